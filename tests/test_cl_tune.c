/* test_cl_tune - CLBlast parameter sets: the text form round-trips and rejects bad lines, the
 * shipped set is found for PoCL's CPU device and no shipped CPU pattern can reach a GPU, a stored
 * set wins over it, a set is applied at open and GEMM results stay correct under it, an incomplete
 * set is refused clearly; ct_tune's decision keeps CLBlast's built-in parameters unless a candidate
 * beats them, and a "built-in" record replaces a slower stored set; the ct_tune program, bounded
 * by candidate count (not seconds, so a cold kernel cache changes nothing), stores a set and then
 * the built-in record over it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_cl.h"
#include "ct_test.h"
#include "ct_test_dev.h"

#ifndef CT_BIN_DIR
#error "CT_BIN_DIR must name the build's bin folder"
#endif

static int gemm_ok(ct_device *d, int ta, int tb) {
    enum { M = 37, N = 70, K = 45 };
    float A[M * K], B[K * N], C[M * N];
    for (int i = 0; i < M * K; i++) A[i] = (float)((i * 7) % 13) - 6.0f;
    for (int i = 0; i < K * N; i++) B[i] = (float)((i * 5) % 11) - 5.0f;
    ct_buffer *a = NULL, *b = NULL, *c = NULL;
    int ok = !ct_buffer_alloc(d, CT_MEM_WORKSPACE, "A", sizeof A, &a) &&
             !ct_buffer_alloc(d, CT_MEM_WORKSPACE, "B", sizeof B, &b) &&
             !ct_buffer_alloc(d, CT_MEM_WORKSPACE, "C", sizeof C, &c) &&
             !ct_buffer_write(a, 0, A, sizeof A) && !ct_buffer_write(b, 0, B, sizeof B) &&
             !ct_gemm(d, ta, tb, M, N, K, 1.0f, ct_buffer_mem(a), 0, ta ? M : K, ct_buffer_mem(b), 0,
                      tb ? K : N, 0.0f, ct_buffer_mem(c), 0, N, NULL) &&
             !ct_buffer_read(c, 0, C, sizeof C);
    CT_ASSERT_MSG(ok, "gemm: %s", ct_device_errmsg(d));
    int wrong = 0;
    for (int i = 0; ok && i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0; /* small integers: the result is exact in fp32 */
            for (int p = 0; p < K; p++)
                s += (double)(ta ? A[p * M + i] : A[i * K + p]) * (tb ? B[j * K + p] : B[p * N + j]);
            wrong += C[i * N + j] != (float)s;
        }
    ct_buffer_free(a), ct_buffer_free(b), ct_buffer_free(c);
    return ok && wrong == 0;
}

/* A whole (small) file, NUL-terminated; NULL if unreadable. */
static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *t = calloc(1, 65536);
    size_t n = t ? fread(t, 1, 65535, f) : 0;
    (void)n;
    fclose(f);
    return t;
}

int main(void) {
    ct_err err = {0};
    /* 1. text form */
    const char *name = NULL;
    CT_ASSERT(ct_tune_shipped_count() >= 1);
    const char *text = ct_tune_shipped_text(0, &name);
    ct_tune_set s, s2;
    CT_ASSERT_OK(ct_tune_set_parse(text, &s, &err), err.msg);
    char buf[8192];
    CT_ASSERT_OK(ct_tune_set_format(&s, buf, sizeof buf), "format");
    CT_ASSERT_OK(ct_tune_set_parse(buf, &s2, &err), err.msg);
    CT_ASSERT(memcmp(&s, &s2, sizeof s) == 0);
    CT_ASSERT_EQ_INT(ct_tune_set_parse("device = x\nXgemm: MWG=abc\n", &s2, &err), CT_ERR_FORMAT);
    CT_ASSERT_STR_CONTAINS(err.msg, "line 2");
    CT_ASSERT_EQ_INT(ct_tune_set_parse("device = x\ncolour = blue\n", &s2, &err), CT_ERR_FORMAT);
    CT_ASSERT_STR_CONTAINS(err.msg, "unknown key 'colour'");
    /* strtoull took "-1" as 2^64 - 1 and saturated on overflow: both refused now */
    CT_ASSERT_EQ_INT(ct_tune_set_parse("device = x\nXgemm: MWG=-1\n", &s2, &err), CT_ERR_FORMAT);
    CT_ASSERT_STR_CONTAINS(err.msg, "MWG");
    CT_ASSERT_EQ_INT(ct_tune_set_parse("device = x\nXgemm: MWG=99999999999999999999999\n", &s2, &err),
                     CT_ERR_FORMAT);
    CT_ASSERT_EQ_INT(ct_tune_set_parse("Xgemm: MWG=64\n", &s2, &err), CT_ERR_FORMAT);
    CT_ASSERT_STR_CONTAINS(err.msg, "no 'device ='");
    /* the built-in record: no kernels, round-trips; kernels beside it are refused */
    CT_ASSERT_OK(ct_tune_set_parse("device = x\nbuiltin = 1\nnote = why\n", &s2, &err), err.msg);
    CT_ASSERT_EQ_INT(s2.builtin, 1);
    CT_ASSERT_EQ_INT(s2.nkernels, 0);
    CT_ASSERT_OK(ct_tune_set_format(&s2, buf, sizeof buf), "format");
    CT_ASSERT_STR_CONTAINS(buf, "builtin = 1");
    CT_ASSERT_OK(ct_tune_set_parse(buf, &s, &err), err.msg);
    CT_ASSERT(memcmp(&s, &s2, sizeof s) == 0);
    CT_ASSERT_EQ_INT(ct_tune_set_parse("device = x\nbuiltin = 1\nXgemm: MWG=64\n", &s2, &err),
                     CT_ERR_FORMAT);
    CT_ASSERT_STR_CONTAINS(err.msg, "lists kernels");
    CT_ASSERT_EQ_INT(ct_tune_set_parse("device = x\nbuiltin = yes\n", &s2, &err), CT_ERR_FORMAT);

    /* 1b. the decision: the NVIDIA H100 case (built-in 6451.5, best candidate 4881.5 GFLOP/s)
     * keeps the built-in parameters; so does a gain inside the noise margin */
    CT_ASSERT_EQ_INT(ct_tune_choose(6451.5, 4881.5, CT_TUNE_MIN_GAIN), CT_TUNE_KEEP_BUILTIN);
    CT_ASSERT_EQ_INT(ct_tune_choose(100.0, 101.0, CT_TUNE_MIN_GAIN), CT_TUNE_KEEP_BUILTIN);
    CT_ASSERT_EQ_INT(ct_tune_choose(100.0, 100.0, 1.0), CT_TUNE_KEEP_CANDIDATE);
    CT_ASSERT_EQ_INT(ct_tune_choose(100.0, 103.0, CT_TUNE_MIN_GAIN), CT_TUNE_KEEP_CANDIDATE);
    CT_ASSERT_EQ_INT(ct_tune_choose(100.0, 103.0, 0), CT_TUNE_KEEP_CANDIDATE); /* 0: default */
    CT_ASSERT_EQ_INT(ct_tune_choose(100.0, 300.0, 5.0), CT_TUNE_KEEP_BUILTIN);
    CT_ASSERT_EQ_INT(ct_tune_choose(100.0, -1, CT_TUNE_MIN_GAIN), CT_TUNE_KEEP_BUILTIN);
    CT_ASSERT_EQ_INT(ct_tune_choose(100.0, NAN, CT_TUNE_MIN_GAIN), CT_TUNE_KEEP_BUILTIN);
    CT_ASSERT_EQ_INT(ct_tune_choose(-1, 5.0, CT_TUNE_MIN_GAIN), CT_TUNE_KEEP_CANDIDATE);
    CT_ASSERT_EQ_INT(ct_tune_choose(-1, -1, CT_TUNE_MIN_GAIN), CT_TUNE_KEEP_NOTHING);
    CT_ASSERT_EQ_INT(ct_tune_choose(NAN, NAN, CT_TUNE_MIN_GAIN), CT_TUNE_KEEP_NOTHING);

    /* 2. lookup: shipped for PoCL CPU devices; a stored one wins */
    ct_test_devices ds;
    if (ct_test_devices_find(&ds, NULL, 1)) return ct_test_end("test_cl_tune");
    const ct_device_info *list = ds.list;
    int pick = ds.pick[0];
    const ct_device_info *di = &list[pick];
    int pocl_cpu = strstr(di->platform, "Portable Computing Language") && (di->type & CL_DEVICE_TYPE_CPU);
    char dir[] = "/tmp/ct_test_tune_XXXXXX";
    CT_ASSERT(mkdtemp(dir) != NULL);
    char source[512];
    ct_status st = ct_tune_lookup(dir, di, &s, source, sizeof source, &err);
    if (pocl_cpu) {
        CT_ASSERT_OK(st, err.msg);
        CT_ASSERT_STR_CONTAINS(source, "shipped tune/pocl-cpu.txt");
    }
    /* 2b. shipped patterns by device type: no shipped CPU set matches a GPU, even one of the same
     * platform and name; a pattern without a type matches nothing */
    for (int i = 0; i < ct_tune_shipped_count(); i++) {
        ct_tune_set sh;
        CT_ASSERT_OK(ct_tune_set_parse(ct_tune_shipped_text(i, &name), &sh, &err), err.msg);
        CT_ASSERT_MSG(strcmp(sh.device, "*") || strcmp(sh.type, "*"),
                      "shipped tune/%s.txt is a pattern without a device type", name);
        ct_device_info fake = *di;
        if (strcmp(sh.platform, "*")) snprintf(fake.platform, sizeof fake.platform, "%s", sh.platform);
        if (strcmp(sh.device, "*")) snprintf(fake.name, sizeof fake.name, "%s", sh.device);
        if (strcmp(sh.driver, "*")) snprintf(fake.driver_version, sizeof fake.driver_version, "%s", sh.driver);
        fake.type = CL_DEVICE_TYPE_GPU;
        if (!strcmp(sh.type, "cpu"))
            CT_ASSERT_MSG(ct_tune_set_match(&sh, &fake) < 0, "shipped CPU set tune/%s.txt matches a GPU", name);
        fake.type = CL_DEVICE_TYPE_CPU;
        if (!strcmp(sh.type, "cpu"))
            CT_ASSERT_MSG(ct_tune_set_match(&sh, &fake) >= 0, "shipped CPU set tune/%s.txt misses a CPU", name);
        if (!strcmp(sh.type, "gpu"))
            CT_ASSERT_MSG(ct_tune_set_match(&sh, &fake) < 0, "shipped GPU set tune/%s.txt matches a CPU", name);
    }
    {
        ct_tune_set any;
        CT_ASSERT_OK(ct_tune_set_parse("device = *\ntype = *\nXgemm: MWG=64\n", &any, &err), err.msg);
        CT_ASSERT_EQ_INT(ct_tune_set_match(&any, di), -1);
        snprintf(any.device, sizeof any.device, "%s", di->name); /* named exactly: fits */
        CT_ASSERT(ct_tune_set_match(&any, di) >= 4);
        snprintf(any.device, sizeof any.device, "*");
        snprintf(any.type, sizeof any.type, "%s", ct_device_type_str(di->type));
        CT_ASSERT(ct_tune_set_match(&any, di) >= 0);
    }
    /* a different, complete Xgemm set (64x64 tiles), stored for this device */
    ct_tune_set mine;
    CT_ASSERT_OK(ct_tune_set_parse(ct_tune_shipped_text(0, NULL), &mine, &err), err.msg);
    snprintf(mine.device, sizeof mine.device, "%s", di->name);
    snprintf(mine.driver, sizeof mine.driver, "%s", di->driver_version);
    ct_tune_set_put(&mine, "Xgemm", "MWG", 64);
    ct_tune_set_put(&mine, "Xgemm", "NWG", 64);
    ct_tune_set_put(&mine, "Xgemm", "VWN", 4);
    CT_ASSERT_OK(ct_tune_store(dir, di, &mine, &err), err.msg);
    CT_ASSERT_OK(ct_tune_lookup(dir, di, &s, source, sizeof source, &err), err.msg);
    CT_ASSERT_STR_CONTAINS(source, "stored");
    CT_ASSERT(memcmp(&s, &mine, sizeof s) == 0);

    /* 3. applied at open; GEMM correct under it (every transpose pair) */
    ct_device *d = NULL;
    ct_device_opts o = ct_device_opts_default();
    o.tune_dir = dir;
    CT_ASSERT_OK(ct_device_open(&d, di, &o, &err), err.msg);
    if (d) {
        CT_ASSERT_STR_CONTAINS(ct_device_tuning_source(d), "stored");
        for (int t = 0; t < 4; t++) CT_ASSERT_MSG(gemm_ok(d, t >> 1, t & 1), "tuned gemm ta=%d tb=%d", t >> 1, t & 1);
    }
    ct_device_free(d);

    /* 3b. ct_tune found nothing faster: the built-in record replaces the stored set; opening the
     * device applies nothing (neither the old stored set nor a shipped pattern) */
    ct_tune_set rec;
    ct_tune_set_builtin(&rec, di, "ct_tune found nothing better: best 0.76x");
    CT_ASSERT_OK(ct_tune_store(dir, di, &rec, &err), err.msg);
    CT_ASSERT_OK(ct_tune_lookup(dir, di, &s, source, sizeof source, &err), err.msg);
    CT_ASSERT_EQ_INT(s.builtin, 1);
    CT_ASSERT_EQ_INT(s.nkernels, 0);
    CT_ASSERT_STR_CONTAINS(source, "CLBlast built-in parameters (ct_tune found nothing better: best 0.76x)");
    d = NULL;
    CT_ASSERT_OK(ct_device_open(&d, di, &o, &err), err.msg);
    if (d) {
        CT_ASSERT_STR_CONTAINS(ct_device_tuning_source(d), "CLBlast built-in parameters (ct_tune");
        CT_ASSERT(strstr(ct_device_tuning_source(d), "shipped") == NULL);
        CT_ASSERT(gemm_ok(d, 0, 1));
    }
    ct_device_free(d);

    /* 4. an incomplete stored set is refused at open with a clear message */
    char path[1400];
    ct_tune_store_path(dir, di, path, sizeof path);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "device = %s\nXgemm: MWG=64\n", di->name);
        fclose(f);
    }
    d = NULL;
    CT_ASSERT_EQ_INT(ct_device_open(&d, di, &o, &err), CT_ERR_CLBLAST);
    CT_ASSERT(d == NULL);
    CT_ASSERT_STR_CONTAINS(err.msg, "Xgemm");
    /* a malformed stored file names its path */
    f = fopen(path, "w");
    if (f) {
        fputs("this is not a tuning file\n", f);
        fclose(f);
    }
    CT_ASSERT_EQ_INT(ct_device_open(&d, di, &o, &err), CT_ERR_FORMAT);
    CT_ASSERT_STR_CONTAINS(err.msg, path);
    unlink(path);

    /* 5. the ct_tune program, bounded by candidates (--budget 0: no clock at all), so a cold
     * kernel cache (tens of seconds of compiling) gives the same run as a warm one.
     * 5a: one candidate, kept whatever its speed (--min-gain 0.01): stored, parses, applies. */
    char cmd[4096], out[1200], log[1200];
    snprintf(out, sizeof out, "%s/found.txt", dir);
    snprintf(log, sizeof log, "%s/log.txt", dir);
    snprintf(cmd, sizeof cmd,
             "'%s/ct_tune' --device %d --shapes small --budget 0 --max-candidates 1 --min-gain 0.01 "
             "--reps 1 --store-dir '%s' --out '%s' > '%s' 2>&1",
             CT_BIN_DIR, di->index, dir, out, log);
    int rc = system(cmd);
    CT_ASSERT_EQ_INT(rc, 0);
    char *text5 = slurp(log);
    CT_ASSERT_STR_CONTAINS(text5, "at most 1 candidate(s)");
    CT_ASSERT_STR_CONTAINS(text5, "#1 ");
    CT_ASSERT(strstr(text5 ? text5 : "", "#2 ") == NULL); /* the bound held */
    if (rc != 0 || ct_test_failures) fprintf(stderr, "--- ct_tune said:\n%s---\n", text5 ? text5 : "(no log)");
    free(text5);
    char *found = slurp(out);
    CT_ASSERT(found != NULL);
    if (found) {
        CT_ASSERT_OK(ct_tune_set_parse(found, &s, &err), err.msg);
        CT_ASSERT(strcmp(s.device, di->name) == 0);
        CT_ASSERT_STR_CONTAINS(s.note, "GFLOP/s");
        if (pocl_cpu) CT_ASSERT_EQ_INT(s.builtin, 0); /* the shipped set works on PoCL */
        free(found);
    }
    CT_ASSERT(access(path, R_OK) == 0); /* stored under the device's key */
    CT_ASSERT_OK(ct_device_open(&d, di, &o, &err), err.msg);
    if (d) {
        CT_ASSERT_STR_CONTAINS(ct_device_tuning_source(d), "stored");
        CT_ASSERT(gemm_ok(d, 0, 1));
    }
    ct_device_free(d);
    d = NULL;

    /* 5b. no candidate can win (--max-candidates 0): the built-in record replaces the stored set
     * and says so; the device then runs CLBlast's own parameters */
    snprintf(cmd, sizeof cmd,
             "'%s/ct_tune' --device %d --shapes small --budget 0 --max-candidates 0 --reps 1 "
             "--store-dir '%s' > '%s' 2>&1",
             CT_BIN_DIR, di->index, dir, log);
    rc = system(cmd);
    CT_ASSERT_EQ_INT(rc, 0);
    text5 = slurp(log);
    CT_ASSERT_STR_CONTAINS(text5, "built-in parameters win");
    if (pocl_cpu) CT_ASSERT_STR_CONTAINS(text5, "replaces the parameter set stored there");
    if (rc != 0 || ct_test_failures) fprintf(stderr, "--- ct_tune said:\n%s---\n", text5 ? text5 : "(no log)");
    free(text5);
    found = slurp(path);
    CT_ASSERT(found != NULL);
    if (found) {
        CT_ASSERT_OK(ct_tune_set_parse(found, &s, &err), err.msg);
        CT_ASSERT_EQ_INT(s.builtin, 1);
        CT_ASSERT_EQ_INT(s.nkernels, 0);
        CT_ASSERT_STR_CONTAINS(s.note, "ct_tune found nothing better");
        free(found);
    }
    CT_ASSERT_OK(ct_device_open(&d, di, &o, &err), err.msg);
    if (d) {
        CT_ASSERT_STR_CONTAINS(ct_device_tuning_source(d), "CLBlast built-in parameters");
        CT_ASSERT(gemm_ok(d, 1, 0));
    }
    ct_device_free(d);
    /* 6. records of other tuned parameters beside the CLBlast set (the engine's fused attention
     * shapes): same keying and text form, own file, never applied to CLBlast */
    {
        ct_tune_set r6, back;
        memset(&r6, 0, sizeof r6);
        snprintf(r6.device, sizeof r6.device, "%s", di->name);
        snprintf(r6.driver, sizeof r6.driver, "%s", di->driver_version);
        ct_tune_set_put(&r6, "attention_hs64", "FBQ", 32);
        ct_tune_set_put(&r6, "attention_hs64", "FBK", 64);
        CT_ASSERT_EQ_INT(ct_tune_record_load(dir, di, "attention", &back, &err), CT_ERR_NOT_FOUND);
        CT_ASSERT_OK(ct_tune_record_store(dir, di, "attention", &r6, &err), err.msg);
        CT_ASSERT_OK(ct_tune_record_load(dir, di, "attention", &back, &err), err.msg);
        CT_ASSERT(memcmp(&back, &r6, sizeof back) == 0);
        char rpath[1400];
        CT_ASSERT_OK(ct_tune_record_path(dir, di, "attention", rpath, sizeof rpath), "path");
        CT_ASSERT_STR_CONTAINS(rpath, ".attention.txt");
        CT_ASSERT(strcmp(rpath, path) != 0); /* not the CLBlast set's file */
        CT_ASSERT_EQ_INT(ct_tune_record_path(dir, di, "a.b", rpath, sizeof rpath), CT_ERR_ARG);
        /* the device opens as before: the record is not a CLBlast set */
        CT_ASSERT_OK(ct_device_open(&d, di, &o, &err), err.msg);
        if (d) {
            CT_ASSERT_STR_CONTAINS(ct_device_tuning_source(d), "CLBlast built-in parameters");
            CT_ASSERT_STR_CONTAINS(ct_device_tune_dir(d), dir);
        }
        ct_device_free(d);
        d = NULL;
        FILE *bad = fopen(rpath, "w");
        if (bad) {
            fputs("not a record\n", bad);
            fclose(bad);
        }
        CT_ASSERT_EQ_INT(ct_tune_record_load(dir, di, "attention", &back, &err), CT_ERR_FORMAT);
        CT_ASSERT_STR_CONTAINS(err.msg, rpath);
    }
    /* bounds that cannot end are refused */
    snprintf(cmd, sizeof cmd, "'%s/ct_tune' --device %d --budget 0 > /dev/null 2>&1", CT_BIN_DIR,
             di->index);
    CT_ASSERT_NE_INT(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    ct_test_devices_free(&ds);
    return ct_test_end("test_cl_tune");
}
