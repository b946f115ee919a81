/* test_engine_attention.c - the fused causal attention (engine/kernels/attention_fused.cl)
 * (and which form a bf16 run takes: ct_attn_select's cfg.mma; the mma variant's numbers are
 * test_engine_ops_bf16's)
 * against the double-precision reference (tests/ct_ref.c), forward (output and log-sum-exp) and
 * backward (dq, dk, dv), on awkward shapes: T = 1, 7, 33, 130, 1000; head sizes 8, 20, 64, 128;
 * NH = 1, 3, 12; several block shapes (blocks larger than T, T not a multiple of the blocks, more
 * keys than queries per block and the reverse). Also: two runs give bitwise the same results,
 * the fused path agrees with the GEMM path, "=" outputs are overwritten (pre-filled with garbage),
 * bad shapes and block shapes give a clear error. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_cl.h"
#include "ct_engine_ops.h"
#include "ct_ref.h"
#include "ct_test.h"
#include "ct_test_dev.h"

#define OFF 3 /* every tensor starts 3 floats into its buffer */

static ct_device *g_dev;
static const ct_device_info *g_info;
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;

static double urand(void) { /* uniform [-1, 1) */
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_rng >> 11) * 0x1.0p-52 - 1.0;
}

typedef struct dt {
    ct_buffer *b;
    ct_view v;
    size_t n;
    float *h;
} dt;

static dt dt_make(size_t n, double scale, float fill) {
    dt t = {0};
    t.n = n;
    t.h = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) t.h[i] = scale != 0 ? (float)(scale * urand()) : fill;
    CT_ASSERT_OK(ct_buffer_alloc(g_dev, CT_MEM_WORKSPACE, "test", (n + OFF + 1) * sizeof(float), &t.b),
                 ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_buffer_write(t.b, OFF * sizeof(float), t.h, n * sizeof(float)),
                 ct_device_errmsg(g_dev));
    t.v = ct_view_of(ct_buffer_mem(t.b), OFF);
    return t;
}

static void dt_read(dt *t) {
    CT_ASSERT_OK(ct_device_finish(g_dev), ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_buffer_read(t->b, OFF * sizeof(float), t->h, t->n * sizeof(float)),
                 ct_device_errmsg(g_dev));
}

static void dt_free(dt *t) {
    ct_buffer_free(t->b);
    free(t->h);
    memset(t, 0, sizeof *t);
}

static double *to_double(const float *x, size_t n) {
    double *d = malloc((n ? n : 1) * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* max |x - r| / (atol + rtol |r|) over the elements; 1 = at the tolerance. */
static int close_to(const char *what, const char *shape, const float *x, const double *r, size_t n,
                    double atol, double rtol) {
    double worst = 0;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)x[i] - r[i]) / (atol + rtol * fabs(r[i]));
        if (!(e <= worst)) worst = e, w = i; /* NaN counts as the worst */
    }
    ct_test_checks++;
    if (!(worst <= 1.0)) {
        CT__FAIL("%s %s: element %zu is %.9g, reference %.9g (%.3g x tolerance)", what, shape, w,
                 (double)x[w], r[w], worst);
        return 0;
    }
    return 1;
}

/* Log-sum-exp of each row's scaled causal scores (B,NH,T), in double. */
static void ref_lse(double *lse, const double *qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    double *s = malloc((size_t)T * sizeof *s);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const double *k = qkv + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    double d = 0;
                    for (int i = 0; i < hs; i++) d += q[i] * k[i];
                    s[j] = d * scale;
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j <= t; j++) sum += exp(s[j] - mx);
                lse[((size_t)b * NH + h) * T + t] = mx + log(sum);
            }
    free(s);
}

/* Forward and backward at (B, T, NH, hs) with block configuration cfg (NULL: the default)
 * against the reference; `repeat` also checks that a second run is bitwise the same. */
static void test_fused(int B, int T, int NH, int hs, const ct_attn_cfg *cfg, int repeat) {
    int C = NH * hs;
    size_t BTC = (size_t)B * T * C, BNT = (size_t)B * NH * T;
    char shape[160];
    snprintf(shape, sizeof shape, "(B=%d T=%d NH=%d hs=%d, fwd %dx%d/%dx%d bwd %dx%d/%dx%d)", B, T,
             NH, hs, cfg ? cfg->fwd.bq : 0, cfg ? cfg->fwd.bk : 0, cfg ? cfg->fwd.nt : 0,
             cfg ? cfg->fwd.vw : 0, cfg ? cfg->bwd.bq : 0, cfg ? cfg->bwd.bk : 0,
             cfg ? cfg->bwd.nt : 0, cfg ? cfg->bwd.vw : 0);
    char why[200];
    if (cfg && (ct_attn_blocks_check(g_info, hs, &cfg->fwd, 0, why, sizeof why) ||
                ct_attn_blocks_check(g_info, hs, &cfg->bwd, 1, why, sizeof why))) {
        /* e.g. 64 x 64 blocks need more local memory than a GPU's 48 KiB */
        printf("skipped on this device %s: %s\n", shape, why);
        return;
    }
    /* q, k of scale 1.5 give scores of a few units: softmax rows neither flat nor one-hot */
    dt inp = dt_make(3 * BTC, 1.5, 0), out = dt_make(BTC, 0, 7.0f), lse = dt_make(BNT, 0, 7.0f);
    CT_ASSERT_OK(ct_attention_fused_forward(g_dev, cfg, out.v, lse.v, inp.v, B, T, C, NH),
                 ct_device_errmsg(g_dev));
    dt_read(&out);
    dt_read(&lse);
    double *din = to_double(inp.h, inp.n);
    double *ro = calloc(BTC, sizeof(double)), *rl = calloc(BNT, sizeof(double));
    double *ra = calloc((size_t)B * NH * T * T, sizeof(double));
    ct_ref_attention_forward(ro, ra, din, B, T, C, NH);
    ref_lse(rl, din, B, T, C, NH);
    close_to("fused forward out", shape, out.h, ro, BTC, 2e-5, 2e-4);
    close_to("fused forward lse", shape, lse.h, rl, BNT, 2e-5, 2e-5);

    dt dout = dt_make(BTC, 1, 0), dinp = dt_make(3 * BTC, 0, 7.0f), dsum = dt_make(BNT, 0, 7.0f);
    CT_ASSERT_OK(ct_attention_fused_backward(g_dev, cfg, dinp.v, dsum.v, dout.v, inp.v, out.v,
                                             lse.v, B, T, C, NH),
                 ct_device_errmsg(g_dev));
    dt_read(&dinp);
    double *rd = calloc(3 * BTC, sizeof(double)), *ddo = to_double(dout.h, dout.n);
    ct_ref_attention_backward(rd, ddo, din, ra, B, T, C, NH);
    /* split the check by part so a failure names dq, dk or dv */
    size_t BT = (size_t)B * T;
    float *part = malloc(BTC * sizeof(float));
    double *rpart = malloc(BTC * sizeof(double));
    static const char *const names[3] = {"fused backward dq", "fused backward dk",
                                         "fused backward dv"};
    for (int s = 0; s < 3; s++) {
        for (size_t r = 0; r < BT; r++)
            for (int c = 0; c < C; c++) {
                part[r * C + c] = dinp.h[(r * 3 + s) * C + c];
                rpart[r * C + c] = rd[(r * 3 + s) * C + c];
            }
        close_to(names[s], shape, part, rpart, BTC, 1e-4, 2e-4);
    }
    if (repeat) { /* bitwise the same on a second run, outputs garbage-filled again */
        float *o1 = malloc(BTC * sizeof(float)), *l1 = malloc(BNT * sizeof(float));
        float *d1 = malloc(3 * BTC * sizeof(float));
        memcpy(o1, out.h, BTC * sizeof(float));
        memcpy(l1, lse.h, BNT * sizeof(float));
        memcpy(d1, dinp.h, 3 * BTC * sizeof(float));
        for (size_t i = 0; i < dinp.n; i++) dinp.h[i] = -3.0f;
        ct_buffer_write(dinp.b, OFF * sizeof(float), dinp.h, dinp.n * sizeof(float));
        CT_ASSERT_OK(ct_attention_fused_forward(g_dev, cfg, out.v, lse.v, inp.v, B, T, C, NH),
                     ct_device_errmsg(g_dev));
        CT_ASSERT_OK(ct_attention_fused_backward(g_dev, cfg, dinp.v, dsum.v, dout.v, inp.v, out.v,
                                                 lse.v, B, T, C, NH),
                     ct_device_errmsg(g_dev));
        dt_read(&out);
        dt_read(&lse);
        dt_read(&dinp);
        CT_ASSERT_MSG(!memcmp(o1, out.h, BTC * sizeof(float)) &&
                          !memcmp(l1, lse.h, BNT * sizeof(float)) &&
                          !memcmp(d1, dinp.h, 3 * BTC * sizeof(float)),
                      "fused attention %s: a second run is not bitwise the same", shape);
        free(o1);
        free(l1);
        free(d1);
    }
    free(part); free(rpart); free(din); free(ro); free(rl); free(ra); free(rd); free(ddo);
    dt_free(&inp); dt_free(&out); dt_free(&lse); dt_free(&dout); dt_free(&dinp); dt_free(&dsum);
}

/* The fused and GEMM paths on the same input agree (to float rounding). */
static void test_vs_gemm(int B, int T, int NH, int hs) {
    int C = NH * hs;
    size_t BTC = (size_t)B * T * C, A = (size_t)B * NH * T * T, BNT = (size_t)B * NH * T;
    dt inp = dt_make(3 * BTC, 1.5, 0), dout = dt_make(BTC, 1, 0);
    dt o1 = dt_make(BTC, 0, 7.0f), qkvr = dt_make(3 * BTC, 0, 0), att = dt_make(A, 0, 0);
    dt vacc = dt_make(BTC, 0, 0), d1 = dt_make(3 * BTC, 0, 7.0f), dq = dt_make(3 * BTC, 0, 0);
    dt datt = dt_make(A, 0, 0), dva = dt_make(BTC, 0, 0);
    dt o2 = dt_make(BTC, 0, 7.0f), lse = dt_make(BNT, 0, 0), d2 = dt_make(3 * BTC, 0, 7.0f);
    dt ds = dt_make(BNT, 0, 0);
    CT_ASSERT_OK(ct_attention_forward(g_dev, o1.v, qkvr.v, att.v, inp.v, vacc.v, B, T, C, NH),
                 ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_attention_backward(g_dev, d1.v, dq.v, datt.v, dva.v, dout.v, qkvr.v, att.v, B,
                                       T, C, NH),
                 ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_attention_fused_forward(g_dev, NULL, o2.v, lse.v, inp.v, B, T, C, NH),
                 ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_attention_fused_backward(g_dev, NULL, d2.v, ds.v, dout.v, inp.v, o2.v, lse.v, B,
                                             T, C, NH),
                 ct_device_errmsg(g_dev));
    dt_read(&o1); dt_read(&o2); dt_read(&d1); dt_read(&d2);
    char shape[96];
    snprintf(shape, sizeof shape, "(B=%d T=%d NH=%d hs=%d)", B, T, NH, hs);
    double *r = to_double(o1.h, BTC);
    close_to("fused vs GEMM path: out", shape, o2.h, r, BTC, 1e-5, 1e-4);
    free(r);
    r = to_double(d1.h, 3 * BTC);
    close_to("fused vs GEMM path: dinp", shape, d2.h, r, 3 * BTC, 1e-4, 2e-4);
    free(r);
    dt_free(&inp); dt_free(&dout); dt_free(&o1); dt_free(&qkvr); dt_free(&att); dt_free(&vacc);
    dt_free(&d1); dt_free(&dq); dt_free(&datt); dt_free(&dva); dt_free(&o2); dt_free(&lse);
    dt_free(&d2); dt_free(&ds);
}

/* ct_attn_tune on a device whose tuning folder is a fresh temporary one: a stored record is used
 * as it is; an unusable entry is searched again (the search picks a shape that fits, stores it,
 * and a second call reads it back); what the search picked computes the right thing. */
static void test_tune(const ct_device_info *info) {
    char dir[] = "/tmp/ct_test_attn_tune_XXXXXX";
    CT_ASSERT(mkdtemp(dir) != NULL);
    ct_device_opts o = ct_device_opts_default();
    o.tune_dir = dir;
    ct_device *d = NULL;
    ct_err err = {0};
    CT_ASSERT_OK(ct_device_open(&d, info, &o, &err), err.msg);
    if (!d) return;
    ct_tune_set s;
    memset(&s, 0, sizeof s);
    snprintf(s.device, sizeof s.device, "%s", info->name);
    snprintf(s.driver, sizeof s.driver, "%s", info->driver_version);
    static const char *const names[8] = {"FBQ", "FBK", "FNT", "FVW", "BBQ", "BBK", "BNT", "BVW"};
    const int want[8] = {32, 16, 64, 1, 16, 32, 64, 1};
    for (int i = 0; i < 8; i++) ct_tune_set_put(&s, "attention_hs20", names[i], (size_t)want[i]);
    for (int i = 0; i < 8; i++) /* 12 keys: not a power of two, must not be used */
        ct_tune_set_put(&s, "attention_hs64", names[i], (size_t)(i == 1 ? 12 : want[i]));
    CT_ASSERT_OK(ct_tune_record_store(dir, info, "attention", &s, &err), err.msg);
    ct_attn_cfg c, c2;
    char src[1600];
    CT_ASSERT_OK(ct_attn_tune(d, 20, 0, &c, src, sizeof src), ct_device_errmsg(d));
    CT_ASSERT_STR_CONTAINS(src, "stored");
    CT_ASSERT(c.fwd.bq == 32 && c.fwd.bk == 16 && c.fwd.nt == 64 && c.fwd.vw == 1 &&
              c.bwd.bq == 16 && c.bwd.bk == 32 && c.bwd.nt == 64 && c.bwd.vw == 1);
    CT_ASSERT_OK(ct_attn_tune(d, 64, 0, &c, src, sizeof src), ct_device_errmsg(d));
    printf("search at head size 64: %s\n", src);
    CT_ASSERT_STR_CONTAINS(src, "searched now");
    CT_ASSERT_EQ_INT(ct_attn_blocks_check(info, 64, &c.fwd, 0, NULL, 0), 0);
    CT_ASSERT_EQ_INT(ct_attn_blocks_check(info, 64, &c.bwd, 1, NULL, 0), 0);
    CT_ASSERT_OK(ct_attn_tune(d, 64, 0, &c2, src, sizeof src), ct_device_errmsg(d));
    CT_ASSERT_STR_CONTAINS(src, "stored");
    CT_ASSERT(!memcmp(&c, &c2, sizeof c));
    /* the head size 20 entry survived the store */
    CT_ASSERT_OK(ct_attn_tune(d, 20, 0, &c2, src, sizeof src), ct_device_errmsg(d));
    CT_ASSERT(c2.fwd.bq == 32 && c2.bwd.bk == 32);
    ct_device_free(d);
    /* what the search picked, at the search's own head count: the kernels then run at work-group
     * sizes the search itself launched. At another head count the dot kernel's group size would
     * differ, and a CPU driver that compiles a kernel per group size (PoCL) would build one more
     * for whichever shape won: a build the kernel cache of an earlier run need not hold when the
     * search's timings pick another winner (the sanitizer suite's cold-compile leak reports,
     * docs/RELIABILITY.md section 7). */
    test_fused(2, 130, ct_attn_search_heads(info), 64, &c, 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static void test_bad_input(void) {
    dt x = dt_make(64, 1, 0);
    CT_ASSERT_EQ_INT(ct_attention_fused_forward(g_dev, NULL, x.v, x.v, x.v, 1, 2, 6, 4), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "NH dividing C");
    CT_ASSERT_EQ_INT(ct_attention_fused_backward(g_dev, NULL, x.v, x.v, x.v, x.v, x.v, x.v, 0, 2,
                                                 8, 2),
                     CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "ct_attention_fused_backward");
    ct_attn_cfg bad = {{16, 12, 64, 1}, {16, 16, 64, 1}, 0}; /* 12 is not a power of two */
    CT_ASSERT_EQ_INT(ct_attention_fused_forward(g_dev, &bad, x.v, x.v, x.v, 1, 2, 8, 2), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "powers of two");
    ct_attn_cfg untileable = {{4, 4, 64, 1}, {4, 4, 64, 1}, 0}; /* 64 work-items cannot tile 4 x 4 */
    CT_ASSERT_EQ_INT(ct_attention_fused_forward(g_dev, &untileable, x.v, x.v, x.v, 1, 2, 8, 2),
                     CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "do not tile");
    ct_device_info small = *g_info;
    small.local_mem_bytes = 4096;
    ct_attn_blocks big = {64, 64, 64, 1};
    char why[200] = "";
    CT_ASSERT_EQ_INT(ct_attn_blocks_check(&small, 64, &big, 0, why, sizeof why), 1);
    CT_ASSERT_STR_CONTAINS(why, "local memory");
    /* the default fits even a device with little local memory */
    ct_attn_cfg d = ct_attn_cfg_default(&small, 64);
    CT_ASSERT_EQ_INT(ct_attn_blocks_check(&small, 64, &d.fwd, 0, NULL, 0), 0);
    CT_ASSERT_EQ_INT(ct_attn_blocks_check(&small, 64, &d.bwd, 1, NULL, 0), 0);
    dt_free(&x);
}

/* Which fused form a bf16 run takes (ct_attn_select, cfg.mma): the mma variant exactly where the
 * device's GEMM plan has the mma path, in that path's form (an entry on CT_GEMM_MMA: the
 * instructions; only CT_GEMM_MMA_EMULATED: the stand-ins), at the head sizes it has shapes for;
 * at another head size the scalar kernels, said in the note; nothing said without the path. No
 * kernel runs (the blocks are given, the path is fused). */
static void select_case(const ct_gemm_plan *plan, int hs, int want_mma, const char *says,
                        const char *never) {
    ct_attn_cfg blocks = ct_attn_cfg_default(g_info, hs), cfg;
    memset(&cfg, 0x55, sizeof cfg);
    ct_attn_path path = CT_ATTN_GEMM;
    char note[1800];
    ct_device_set_gemm_plan(g_dev, plan);
    CT_ASSERT_OK(ct_attn_select(g_dev, CT_ATTN_FUSED, &blocks, 64, 2 * hs, 2, &path, &cfg, note,
                                sizeof note),
                 ct_device_errmsg(g_dev));
    CT_ASSERT_EQ_INT(path, CT_ATTN_FUSED);
    CT_ASSERT_EQ_INT(cfg.mma, want_mma);
    if (says) CT_ASSERT_STR_CONTAINS(note, says);
    if (never) CT_ASSERT(strstr(note, never) == NULL);
    ct_device_set_gemm_plan(g_dev, NULL);
}

static void test_select_mma(void) {
    ct_gemm_plan def = ct_gemm_plan_default(), emu = def, ptx = def;
    emu.bf16 = CT_GEMM_MMA_EMULATED;
    ptx.n = 1; /* one product on the mma path is enough */
    ptx.shapes[0] = (ct_gemm_choice){0, 1, 64, 64, 32, 2, CT_GEMM_MMA, 1.0};
    select_case(&def, 32, 0, NULL, "mma");
    select_case(&emu, 32, CT_ATTN_MMA_EMULATED, "bf16 on the mma variant, emulated", NULL);
    select_case(&ptx, 64, CT_ATTN_MMA_PTX, "bf16 on the mma variant (the GEMM plan", NULL);
    select_case(&emu, 20, 0, "no shape for head size 20", NULL);
    select_case(&ptx, 128, CT_ATTN_MMA_PTX, "mma variant", NULL);
}

int main(int argc, char **argv) {
    /* part: "shapes" (the default blocks at head sizes 8, 20 and 128, bad input), "hs64" (the
     * default blocks at head size 64, T up to 1000, against the GEMM path), "blocks" (other
     * block shapes), "search" (ct_attn_tune's search, labelled slow in tests/suites.cmake), or
     * "all" (default). Each head size and block shape is a program build: parts spread them
     * over tests that run side by side on a cold kernel cache. */
    const char *part = argc > 1 ? argv[1] : "all";
    int all = !strcmp(part, "all"), shapes = all || !strcmp(part, "shapes");
    int hs64 = all || !strcmp(part, "hs64");
    int blocks = all || !strcmp(part, "blocks"), search = all || !strcmp(part, "search");
    if (!shapes && !hs64 && !blocks && !search) {
        fprintf(stderr, "test_engine_attention: unknown part '%s' (shapes, hs64, blocks, search, "
                        "all)\n", part);
        return 2;
    }
    ct_test_devices ds;
    g_dev = ct_test_device_open(&ds, NULL);
    if (!g_dev) return ct_test_end("test_engine_attention");
    const ct_device_info *info = &ds.list[ds.pick[0]];
    g_info = info;
    printf("device: %s\n", info->name);
    /* the default blocks (the first of ct_attn_cfg_default's list that fits: 16 x 16 blocks of
     * 64 scalar work-items) on every shape of the issue: T = 1, 7, 33, 130, 1000; head sizes 8,
     * 20, 64, 128; NH = 1, 3, 12 */
    if (shapes) {
        test_fused(1, 1, 3, 20, NULL, 1);
        test_fused(3, 7, 12, 8, NULL, 1);
        test_fused(2, 33, 3, 20, NULL, 0);
        test_fused(1, 130, 3, 128, NULL, 0);
        test_bad_input();
        test_select_mma();
    }
    if (hs64) {
        test_fused(1, 130, 1, 64, NULL, 1);
        test_fused(1, 33, 12, 64, NULL, 0);
        test_fused(1, 1000, 1, 64, NULL, 1);
        test_vs_gemm(2, 130, 3, 64);
    }
    /* other block shapes (one program each to compile, so one head size each): more keys than
     * queries per block and the reverse, narrow work-groups, 2- to 16-wide vectors per work-item
     * (CPU devices pick 16); T not a multiple of any block, blocks larger than T */
    if (blocks) {
        ct_attn_cfg c1 = {{32, 16, 64, 1}, {16, 32, 64, 1}, 0};
        ct_attn_cfg c2 = {{8, 32, 32, 1}, {32, 8, 32, 1}, 0};
        ct_attn_cfg v1 = {{64, 64, 4, 16}, {64, 64, 4, 16}, 0};
        ct_attn_cfg v2 = {{16, 32, 2, 8}, {32, 16, 4, 4}, 0};
        ct_attn_cfg v3 = {{8, 8, 2, 4}, {16, 8, 4, 2}, 0};
        test_fused(2, 130, 3, 64, &c1, 1);
        test_fused(1, 7, 1, 64, &c1, 0);
        test_fused(2, 33, 3, 20, &c2, 0);
        test_fused(2, 130, 12, 64, &v1, 1);
        test_fused(1, 1000, 1, 64, &v1, 1);
        test_fused(1, 33, 3, 128, &v2, 1);
        test_fused(1, 1000, 1, 128, &v2, 0);
        test_fused(2, 33, 3, 20, &v3, 0);
        test_fused(1, 1, 1, 20, &v3, 0);
    }
    if (search) test_tune(info);
    ct_mem_stats ms;
    ct_device_mem_stats(g_dev, &ms);
    CT_ASSERT_EQ_INT(ms.live_buffers, 0);
    ct_device_free(g_dev);
    ct_test_devices_free(&ds);
    return ct_test_end("test_engine_attention");
}
