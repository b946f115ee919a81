/* test_engine_gemm_select.c - ct_gemm_select on a device whose tuning folder is a fresh temporary
 * one: auto times the bf16 paths the device runs and stores the fastest; the next call reads the
 * record; a damaged record, or one naming a path the device does not run, is measured again and
 * replaced; again = 1 measures even with a good record; a path asked for by name is taken, or
 * refused with cl/'s reason; fp32's path and unknown names are refused. On PoCL the mma path is
 * not NVIDIA's and must not be chosen.
 * The model's plan: ct_gemm_model_shapes lists each key once (GPT-2 124M: 17 products; a model
 * whose padded vocabulary is 4C: 14, its logits products being its MLP's); ct_gemm_plan_path
 * takes the first entry of the operand type whose shape matches (0: any), else the type's
 * default; ct_gemm_plan_make refuses names that do not fit the operands (CT_ERR_ARG) and, in
 * fp32 without tf32, keeps CLBlast without timing anything. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_engine_gemm.h"
#include "ct_test.h"
#include "ct_test_dev.h"

static int file_has(const char *path, const char *what) {
    FILE *f = fopen(path, "rb");
    char buf[4096];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = '\0';
    return strstr(buf, what) != NULL;
}

static void test_plan(ct_device *d) {
    ct_gpt_config c124 = {.max_seq = 1024, .vocab = 50257, .padded_vocab = 50304, .layers = 12,
                          .heads = 12, .channels = 768};
    ct_gemm_shape sh[CT_GEMM_MODEL_SHAPES];
    int n = ct_gemm_model_shapes(&c124, 1, 8, 1024, sh);
    CT_ASSERT_EQ_INT(n, 17);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            CT_ASSERT_MSG(!(sh[i].ta == sh[j].ta && sh[i].tb == sh[j].tb && sh[i].m == sh[j].m &&
                            sh[i].n == sh[j].n && sh[i].k == sh[j].k &&
                            sh[i].batch == sh[j].batch),
                          "shapes %s and %s share a key", sh[i].name, sh[j].name);
    /* qkv forward: rows any, n 3C, k C, timed at 4096 rows (B*T 8192 capped) */
    CT_ASSERT(sh[0].m == 0 && sh[0].n == 2304 && sh[0].k == 768 && sh[0].tm == 4096);
    /* the attention's scores: batch B*NH at one 256-row block against all T keys */
    CT_ASSERT(sh[15].k == 64 && sh[15].tbatch == 96 && sh[15].tm == 256 && sh[15].tn == 1024);
    ct_gpt_config small = {.max_seq = 16, .vocab = 200, .padded_vocab = 256, .layers = 2,
                           .heads = 4, .channels = 64};
    CT_ASSERT_EQ_INT(ct_gemm_model_shapes(&small, 1, 4, 16, sh), 14);
    CT_ASSERT_EQ_INT(ct_gemm_model_shapes(&c124, 2, 8, 1024, sh), 17); /* tp 2: n 3C/2 */
    CT_ASSERT(sh[0].n == 1152);

    ct_gemm_plan p = ct_gemm_plan_default();
    ct_gemm_desc g = {.ta = 0, .tb = 1, .m = 100, .n = 2304, .k = 768, .batch = 1};
    CT_ASSERT_EQ_INT(ct_gemm_plan_path(&p, &g, 1), CT_GEMM_PORTABLE);
    CT_ASSERT_EQ_INT(ct_gemm_plan_path(&p, &g, 0), CT_GEMM_CLBLAST);
    p.shapes[p.n++] = (ct_gemm_choice){0, 1, 0, 2304, 768, 1, CT_GEMM_MMA_EMULATED, 1.0};
    p.shapes[p.n++] = (ct_gemm_choice){0, 1, 0, 0, 768, 0, CT_GEMM_MMA, 1.0};
    p.shapes[p.n++] = (ct_gemm_choice){0, 1, 0, 0, 0, 0, CT_GEMM_MMA_TF32, 1.0};
    CT_ASSERT_EQ_INT(ct_gemm_plan_path(&p, &g, 1), CT_GEMM_MMA_EMULATED); /* the first match */
    g.n = 2000;                                                           /* the wildcard one */
    CT_ASSERT_EQ_INT(ct_gemm_plan_path(&p, &g, 1), CT_GEMM_MMA);
    g.k = 64; /* no bf16 entry matches: the default */
    CT_ASSERT_EQ_INT(ct_gemm_plan_path(&p, &g, 1), CT_GEMM_PORTABLE);
    CT_ASSERT_EQ_INT(ct_gemm_plan_path(&p, &g, 0), CT_GEMM_MMA_TF32); /* fp32 operands */
    g.tb = 0; /* another transpose: no entry */
    CT_ASSERT_EQ_INT(ct_gemm_plan_path(&p, &g, 0), CT_GEMM_CLBLAST);

    /* the maker: names that do not fit the operands, fp32 left on CLBlast untimed */
    char note[4096];
    int ns = ct_gemm_model_shapes(&small, 1, 4, 16, sh);
    CT_ASSERT_EQ_INT(ct_gemm_plan_make(d, "clblast", 1, 0, 0, sh, ns, &p, note, sizeof note),
                     CT_ERR_ARG);
    CT_ASSERT_EQ_INT(ct_gemm_plan_make(d, "portable", 0, 0, 0, sh, ns, &p, note, sizeof note),
                     CT_ERR_ARG);
    CT_ASSERT_EQ_INT(ct_gemm_plan_make(d, "portable", 0, 1, 0, sh, ns, &p, note, sizeof note),
                     CT_ERR_ARG);
    CT_ASSERT_EQ_INT(ct_gemm_plan_make(d, "auto", 1, 1, 0, sh, ns, &p, note, sizeof note),
                     CT_ERR_ARG);
    CT_ASSERT_EQ_INT(ct_gemm_plan_make(d, "fastest", 1, 0, 0, sh, ns, &p, note, sizeof note),
                     CT_ERR_ARG);
    CT_ASSERT_OK(ct_gemm_plan_make(d, "auto", 0, 0, 0, sh, ns, &p, note, sizeof note),
                 ct_device_errmsg(d));
    CT_ASSERT_EQ_INT(p.n, 0);
    CT_ASSERT_STR_CONTAINS(note, "clblast for every product");
    /* asked for by name: timed, not stored; every shape on it */
    CT_ASSERT_OK(ct_gemm_plan_make(d, "portable", 1, 0, 0, sh, ns, &p, note, sizeof note),
                 ct_device_errmsg(d));
    CT_ASSERT_EQ_INT(p.n, ns);
    for (int i = 0; i < p.n; i++) CT_ASSERT_EQ_INT(p.shapes[i].path, CT_GEMM_PORTABLE);
    CT_ASSERT(strstr(note, "stored") == NULL);
    if (!ct_gemm_mma_eligible(ct_device_get_info(d), NULL, 0)) {
        CT_ASSERT_EQ_INT(ct_gemm_plan_make(d, "mma", 1, 0, 0, sh, ns, &p, note, sizeof note),
                         CT_ERR_UNSUPPORTED);
        CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "compute capability 8.0");
        CT_ASSERT_EQ_INT(ct_gemm_plan_make(d, "mma", 0, 1, 0, sh, ns, &p, note, sizeof note),
                         CT_ERR_UNSUPPORTED); /* the tf32 form: the same rule */
    }
}

int main(void) {
    ct_test_devices ds;
    char dir[] = "/tmp/ct_test_gemm_select_XXXXXX";
    CT_ASSERT(mkdtemp(dir) != NULL);
    ct_device_opts o = ct_device_opts_default();
    o.tune_dir = dir;
    ct_device *d = ct_test_device_open(&ds, &o);
    if (!d) return ct_test_end("test_engine_gemm_select");
    const ct_device_info *info = ct_device_get_info(d);
    printf("device: %s\n", info->name);
    char note[600], rec[1400];
    CT_ASSERT_OK(ct_tune_record_path(dir, info, "gemm", rec, sizeof rec), "record path");

    /* auto, nothing stored: measured and stored; a bf16 path the device runs, never emulated */
    ct_gemm_path p = CT_GEMM_CLBLAST, p2 = CT_GEMM_CLBLAST;
    CT_ASSERT_OK(ct_gemm_select(d, "auto", 0, &p, note, sizeof note), ct_device_errmsg(d));
    printf("auto: %s\n", note);
    CT_ASSERT(ct_gemm_path_bf16(p) && p != CT_GEMM_MMA_EMULATED);
    CT_ASSERT_EQ_INT(ct_gemm_path_check(d, p), CT_OK);
    CT_ASSERT_STR_CONTAINS(note, "measured now");
    CT_ASSERT_STR_CONTAINS(note, ct_gemm_path_str(p));
    CT_ASSERT(file_has(rec, "PATH"));
    if (!strstr(info->vendor, "NVIDIA")) CT_ASSERT(p != CT_GEMM_MMA);

    /* the record is read back, not measured */
    CT_ASSERT_OK(ct_gemm_select(d, "auto", 0, &p2, note, sizeof note), ct_device_errmsg(d));
    CT_ASSERT_EQ_INT((int)p2, (int)p);
    CT_ASSERT_STR_CONTAINS(note, "stored");
    CT_ASSERT(strstr(note, "measured now") == NULL);

    /* again = 1 measures even so */
    CT_ASSERT_OK(ct_gemm_select(d, "auto", 1, &p2, note, sizeof note), ct_device_errmsg(d));
    CT_ASSERT_STR_CONTAINS(note, "measured now");

    /* a damaged record is measured again and replaced by a readable one */
    FILE *f = fopen(rec, "wb");
    CT_ASSERT(f != NULL);
    if (f) fputs("this is not a tuning record\n\x01\x02", f), fclose(f);
    CT_ASSERT_OK(ct_gemm_select(d, "auto", 0, &p2, note, sizeof note), ct_device_errmsg(d));
    CT_ASSERT_STR_CONTAINS(note, "measured now");
    CT_ASSERT_OK(ct_gemm_select(d, "auto", 0, &p2, note, sizeof note), ct_device_errmsg(d));
    CT_ASSERT_STR_CONTAINS(note, "stored");

    /* a record naming a path this device does not run is not trusted */
    if (ct_gemm_path_check(d, CT_GEMM_MMA) != CT_OK) {
        ct_tune_set s;
        memset(&s, 0, sizeof s);
        snprintf(s.device, sizeof s.device, "%s", info->name);
        snprintf(s.driver, sizeof s.driver, "%s", info->driver_version);
        ct_tune_set_put(&s, "gemm_bf16", "PATH", (size_t)CT_GEMM_MMA);
        ct_err err = {0};
        CT_ASSERT_OK(ct_tune_record_store(dir, info, "gemm", &s, &err), err.msg);
        CT_ASSERT_OK(ct_gemm_select(d, "auto", 0, &p2, note, sizeof note), ct_device_errmsg(d));
        CT_ASSERT(p2 != CT_GEMM_MMA);
        CT_ASSERT_STR_CONTAINS(note, "measured now");
        /* asked for by name: refused with cl/'s reason */
        CT_ASSERT_EQ_INT(ct_gemm_select(d, "mma", 0, &p2, note, sizeof note),
                         CT_ERR_UNSUPPORTED);
        CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "NVIDIA");
    }
    CT_ASSERT_OK(ct_gemm_select(d, "portable", 0, &p2, note, sizeof note), ct_device_errmsg(d));
    CT_ASSERT_EQ_INT((int)p2, (int)CT_GEMM_PORTABLE);
    CT_ASSERT_STR_CONTAINS(note, "as asked");
    CT_ASSERT_EQ_INT(ct_gemm_select(d, "clblast", 0, &p2, note, sizeof note), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "auto, portable, mma");
    CT_ASSERT_EQ_INT(ct_gemm_select(d, "fastest", 0, &p2, note, sizeof note), CT_ERR_ARG);

    test_plan(d);
    ct_device_free(d);
    ct_test_devices_free(&ds);
    remove(rec);
    rmdir(dir);
    return ct_test_end("test_engine_gemm_select");
}
