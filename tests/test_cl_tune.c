/* test_cl_tune - CLBlast parameter sets: the text form round-trips and rejects bad lines, the
 * shipped set is found for PoCL's CPU device, a stored set wins over it, a set is applied at open
 * and GEMM results stay correct under it, an incomplete set is refused clearly, and the ct_tune
 * program finds, stores and reports a set within its budget. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_cl.h"
#include "ct_test.h"

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
    CT_ASSERT_EQ_INT(ct_tune_set_parse("Xgemm: MWG=64\n", &s2, &err), CT_ERR_FORMAT);
    CT_ASSERT_STR_CONTAINS(err.msg, "no 'device ='");

    /* 2. lookup: shipped for PoCL CPU devices; a stored one wins */
    ct_device_info *list = NULL;
    int n = 0, pick = 0, np = 0;
    CT_ASSERT_OK(ct_device_list(&list, &n, &err), err.msg);
    CT_ASSERT_OK(ct_device_select(list, n, ct_device_spec_env(), 1, &pick, &np, &err), err.msg);
    if (!list) return ct_test_end("test_cl_tune");
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

    /* 5. the ct_tune program: a short budget still measures, stores a set that parses and
     * applies, and says so */
    char cmd[2048], out[1200];
    snprintf(out, sizeof out, "%s/found.txt", dir);
    snprintf(cmd, sizeof cmd,
             "'%s/ct_tune' --device %d --shapes small --budget 1 --reps 1 --store-dir '%s' --out '%s' > '%s/log.txt' 2>&1",
             CT_BIN_DIR, di->index, dir, out, dir);
    int rc = system(cmd);
    CT_ASSERT_EQ_INT(rc, 0);
    if (rc != 0) { /* show what ct_tune said */
        snprintf(cmd, sizeof cmd, "cat '%s/log.txt' >&2", dir);
        if (system(cmd) != 0) fprintf(stderr, "(no log)\n");
    }
    char *found = NULL;
    f = fopen(out, "r");
    CT_ASSERT(f != NULL);
    if (f) {
        found = calloc(1, 8192);
        if (fread(found, 1, 8191, f) == 0) found[0] = '\0';
        fclose(f);
        CT_ASSERT_OK(ct_tune_set_parse(found, &s, &err), err.msg);
        CT_ASSERT(strcmp(s.device, di->name) == 0);
        CT_ASSERT_STR_CONTAINS(s.note, "GFLOP/s");
        free(found);
    }
    CT_ASSERT(access(path, R_OK) == 0); /* stored under the device's key */
    CT_ASSERT_OK(ct_device_open(&d, di, &o, &err), err.msg);
    if (d) {
        CT_ASSERT_STR_CONTAINS(ct_device_tuning_source(d), "stored");
        CT_ASSERT(gemm_ok(d, 0, 1));
    }
    ct_device_free(d);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    ct_device_list_free(list);
    return ct_test_end("test_cl_tune");
}
