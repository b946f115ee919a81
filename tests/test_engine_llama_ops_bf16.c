/* test_engine_llama_ops_bf16.c - the Llama family's device ops (ct_engine_ops_llama.h) with bf16
 * storage against the plain-C double reference (tests/ct_ref.c, and the index formulas of the
 * header for the embedding and the kv-head repetition) computed on the same bf16-rounded inputs,
 * forward and backward, at awkward shapes, tensors at odd offsets, "=" outputs pre-filled with
 * garbage and "+=" outputs with random values; an op given a mix of storages is refused naming
 * the argument.
 *
 * Tolerances, derived as in test_engine_ops_bf16.c (u = 2^-8, bf16's unit roundoff; u32 = 2^-24;
 * gamma(K) = K u32 / (1 - K u32)): a bf16 result is fl_bf16(y32), so |y - ref| <= u |ref| +
 * (1 + u) |y32 - ref|; an fp32 result (rstd, dweight, dwte) has the second term only. The fp32
 * arithmetic's bound |y32 - ref| is stated at each check: a sum of K terms within gamma(K) of
 * the sum of |terms| (a product of two bf16 values is exact in fp32), an exp, sqrt or division
 * a few ulps (counted as 4 u32 each), pow 16 ulps, sin and cos 4 ulps plus the argument's error. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_cl.h"
#include "ct_engine_ops_llama.h"
#include "ct_ref.h"
#include "ct_test.h"
#include "ct_test_dev.h"

#define OFF 3 /* every tensor starts 3 elements into its buffer */
#define U 0x1.0p-8
#define U32 0x1.0p-24

static ct_device *g_dev;
static uint64_t g_rng = 0x2545f4914f6cdd1dull;

static double urand(void) { /* uniform [-1, 1) */
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_rng >> 11) * 0x1.0p-52 - 1.0;
}
static double gam(double k) { return k * U32 / (1.0 - k * U32); }
static float bf(double x) { return ct_bf16_to_f32(ct_bf16_from_f32((float)x)); }

/* A device tensor (bf16 or 4-byte) with its host mirror: h as floats (a bf16 tensor's exact
 * values), d as doubles for the reference. */
typedef struct bt {
    ct_buffer *b;
    ct_view v;
    size_t n;
    int bf;
    float *h;
    double *d;
} bt;

static void bt_upload(bt *t) {
    if (t->bf) {
        uint16_t *u = malloc((t->n ? t->n : 1) * sizeof *u);
        for (size_t i = 0; i < t->n; i++) u[i] = ct_bf16_from_f32(t->h[i]);
        CT_ASSERT_OK(ct_buffer_write(t->b, OFF * 2, u, t->n * 2), ct_device_errmsg(g_dev));
        free(u);
    } else {
        CT_ASSERT_OK(ct_buffer_write(t->b, OFF * 4, t->h, t->n * 4), ct_device_errmsg(g_dev));
    }
}

/* n values scale * uniform(-1, 1) (bf16-rounded when bf), or `fill` when scale is 0. */
static bt bt_make(size_t n, int bf16, double scale, double fill) {
    bt t = {0};
    t.n = n, t.bf = bf16;
    t.h = calloc(n ? n : 1, sizeof(float));
    t.d = calloc(n ? n : 1, sizeof(double));
    for (size_t i = 0; i < n; i++) {
        double x = scale != 0 ? scale * urand() : fill;
        t.h[i] = bf16 ? bf(x) : (float)x;
        t.d[i] = t.h[i];
    }
    size_t es = bf16 ? 2 : 4;
    CT_ASSERT_OK(ct_buffer_alloc(g_dev, CT_MEM_WORKSPACE, "test", (n + OFF + 3) * es, &t.b),
                 ct_device_errmsg(g_dev));
    t.v = bf16 ? ct_view_bf16(ct_buffer_mem(t.b), OFF) : ct_view_of(ct_buffer_mem(t.b), OFF);
    bt_upload(&t);
    return t;
}

static bt bt_ints(size_t n, int lo, int hi) {
    bt t = bt_make(n, 0, 0, 0);
    int *ids = (int *)t.h;
    for (size_t i = 0; i < n; i++) ids[i] = lo + (int)((urand() + 1.0) * 0.5 * (hi - lo)) % (hi - lo);
    CT_ASSERT_OK(ct_buffer_write(t.b, OFF * 4, ids, n * 4), ct_device_errmsg(g_dev));
    return t;
}

static void bt_read(bt *t) {
    CT_ASSERT_OK(ct_device_finish(g_dev), ct_device_errmsg(g_dev));
    if (t->bf) {
        uint16_t *u = malloc((t->n ? t->n : 1) * sizeof *u);
        CT_ASSERT_OK(ct_buffer_read(t->b, OFF * 2, u, t->n * 2), ct_device_errmsg(g_dev));
        for (size_t i = 0; i < t->n; i++) t->h[i] = ct_bf16_to_f32(u[i]);
        free(u);
    } else {
        CT_ASSERT_OK(ct_buffer_read(t->b, OFF * 4, t->h, t->n * 4), ct_device_errmsg(g_dev));
    }
}

static void bt_free(bt *t) {
    ct_buffer_free(t->b);
    free(t->h);
    free(t->d);
    memset(t, 0, sizeof *t);
}

static double *dalloc(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

/* Every element of t within u |ref| (t bf16) + (1 + u) e32[i] (e32 NULL: e32s). */
static int check(const char *what, const bt *t, const double *ref, const double *e32, double e32s) {
    double worst = 0, rel = t->bf ? U : 0;
    size_t w = 0;
    for (size_t i = 0; i < t->n; i++) {
        double tol = rel * fabs(ref[i]) + (1 + rel) * (e32 ? e32[i] : e32s);
        double e = fabs((double)t->h[i] - ref[i]) / (tol > 0 ? tol : 1e-300);
        if (!(e <= worst)) worst = e, w = i;
    }
    ct_test_checks++;
    if (!(worst <= 1.0)) {
        double tol = rel * fabs(ref[w]) + (1 + rel) * (e32 ? e32[w] : e32s);
        CT__FAIL("%s: element %zu is %.9g, reference %.9g (err %.3g x tolerance %.3g)", what, w,
                 (double)t->h[w], ref[w], worst, tol);
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------ RMSNorm */

static void test_rmsnorm(int N, int C, double eps) {
    size_t n = (size_t)N * C;
    bt x = bt_make(n, 1, 2, 0), w = bt_make(C, 1, 1.5, 0);
    bt out = bt_make(n, 1, 0, 7.0), rstd = bt_make(N, 0, 0, 7.0);
    CT_ASSERT_OK(ct_rmsnorm_forward(g_dev, out.v, rstd.v, x.v, w.v, 1, N, C, (float)eps),
                 ct_device_errmsg(g_dev));
    double *ro = dalloc(n), *rr = dalloc(N), *eo = dalloc(n), *er = dalloc(N);
    ct_ref_rmsnorm_forward(ro, rr, x.d, w.d, N, C, eps);
    /* rstd = (ss / C + eps)^-1/2, ss a sum of C exact squares (gamma(C)), then a division, an
     * add, a root and a reciprocal: relative gamma(C + 12). out = x s w: two more products. */
    for (int r = 0; r < N; r++) {
        er[r] = gam(C + 12) * rr[r];
        for (int i = 0; i < C; i++)
            eo[(size_t)r * C + i] = gam(C + 14) * fabs(x.d[(size_t)r * C + i]) * rr[r] * fabs(w.d[i]);
    }
    bt_read(&out);
    bt_read(&rstd);
    check("rmsnorm_forward out (bf16)", &out, ro, eo, 0);
    check("rmsnorm_forward rstd (fp32)", &rstd, rr, er, 0);
    for (int acc = 0; acc <= 1; acc++) {
        bt dout = bt_make(n, 1, 1, 0), dinp = acc ? bt_make(n, 1, 1, 0) : bt_make(n, 1, 0, 7.0);
        bt dw = bt_make(C, 0, 1, 0);
        if (!acc) memset(dinp.d, 0, n * sizeof(double));
        double *ed = dalloc(n), *ew = dalloc(C);
        /* dinp = s w dy - s^3 x dot / C (+ dinp), dot = sum of C products w dy x (one rounding
         * each): s's relative error gamma(C + 12) three times, the sum's gamma(2C), a handful of
         * operations: gamma(5C + 60) of s |w dy| + s^3 |x| sum|w dy x| / C (+ |dinp|). dw +=
         * sum over N rows of dy x s: gamma(N + C + 16) of |dw| + sum |dy x| s. */
        for (int i = 0; i < C; i++) ew[i] = fabs(dw.d[i]);
        for (int r = 0; r < N; r++) {
            double adot = 0, s = rr[r];
            const double *xr = x.d + (size_t)r * C, *dy = dout.d + (size_t)r * C;
            for (int i = 0; i < C; i++) adot += fabs(w.d[i] * dy[i] * xr[i]);
            for (int i = 0; i < C; i++) {
                ed[(size_t)r * C + i] =
                    gam(5 * C + 60) * (s * fabs(w.d[i] * dy[i]) + s * s * s * fabs(xr[i]) * adot / C +
                                       fabs(dinp.d[(size_t)r * C + i]));
                ew[i] += fabs(dy[i] * xr[i]) * s;
            }
        }
        for (int i = 0; i < C; i++) ew[i] *= gam(N + C + 16);
        CT_ASSERT_OK(ct_rmsnorm_backward(g_dev, dinp.v, dw.v, dout.v, x.v, w.v, rstd.v, 1, N, C,
                                         acc),
                     ct_device_errmsg(g_dev));
        ct_ref_rmsnorm_backward(dinp.d, dw.d, dout.d, x.d, w.d, N, C, eps);
        bt_read(&dinp);
        bt_read(&dw);
        check(acc ? "rmsnorm_backward dinp (bf16 +=)" : "rmsnorm_backward dinp (bf16 =)", &dinp,
              dinp.d, ed, 0);
        check("rmsnorm_backward dweight (fp32 +=)", &dw, dw.d, ew, 0);
        free(ed), free(ew);
        bt_free(&dout), bt_free(&dinp), bt_free(&dw);
    }
    free(ro), free(rr), free(eo), free(er);
    bt_free(&x), bt_free(&w), bt_free(&out), bt_free(&rstd);
}

/* ------------------------------------------------------------------ RoPE */

/* nh heads of size hd at `at` floats into rows of `stride` (q or k inside a fused q|k|v), turned
 * in place forward, then back (the backward): elements outside the heads untouched. */
static void test_rope(int B, int T, int nh, int hd, int at, int stride, double theta) {
    size_t N = (size_t)B * T, n = N * stride;
    bt t = bt_make(n, 1, 1, 0);
    double *in = dalloc(n), *ref = dalloc(n), *e = dalloc(n);
    memcpy(in, t.d, n * sizeof(double));
    memcpy(ref, t.d, n * sizeof(double));
    ct_ref_rope(ref + at, in + at, (int)N, T, nh, hd, stride, theta, 1);
    /* the angle t * theta^(-2j/hd): pow 16 ulps and a product, so off by 18 u32 |angle|; cos and
     * sin 4 ulps plus that; a c - b s: two products and a sum. |angle| < T. */
    for (size_t r = 0; r < N; r++)
        for (int h = 0; h < nh; h++)
            for (int j = 0; j < hd / 2; j++) {
                size_t o = r * stride + at + (size_t)h * hd + j;
                double m = (fabs(in[o]) + fabs(in[o + hd / 2])) * U32 * (8 + 20.0 * T);
                e[o] = e[o + hd / 2] = m;
            }
    CT_ASSERT_OK(ct_rope_forward(g_dev, ct_view_at(t.v, at), ct_view_at(t.v, at), B, T, nh, hd,
                                 stride, (float)theta),
                 ct_device_errmsg(g_dev));
    bt_read(&t);
    check("rope_forward in place (bf16)", &t, ref, e, 0);
    /* backward from the device's own output (now exact bf16 values) */
    for (size_t i = 0; i < n; i++) in[i] = t.h[i], ref[i] = t.h[i];
    ct_ref_rope(ref + at, in + at, (int)N, T, nh, hd, stride, theta, -1);
    CT_ASSERT_OK(ct_rope_backward(g_dev, ct_view_at(t.v, at), ct_view_at(t.v, at), B, T, nh, hd,
                                  stride, (float)theta),
                 ct_device_errmsg(g_dev));
    bt_read(&t);
    check("rope_backward in place (bf16)", &t, ref, e, 0);
    free(in), free(ref), free(e);
    bt_free(&t);
}

/* ------------------------------------------------------------------ SwiGLU */

static void test_swiglu(size_t N) {
    bt g = bt_make(N, 1, 6, 0), u = bt_make(N, 1, 2, 0), out = bt_make(N, 1, 0, 7.0);
    double *ro = dalloc(N), *eo = dalloc(N);
    ct_ref_swiglu_forward(ro, g.d, u.d, N);
    /* sigma = 1 / (1 + exp(-g)): exp, add, division: relative 10 u32; two products more */
    for (size_t i = 0; i < N; i++) eo[i] = gam(14) * fabs(ro[i]);
    CT_ASSERT_OK(ct_swiglu_forward(g_dev, out.v, g.v, u.v, N), ct_device_errmsg(g_dev));
    bt_read(&out);
    check("swiglu_forward (bf16)", &out, ro, eo, 0);
    bt dout = bt_make(N, 1, 1, 0), dg = bt_make(N, 1, 0, 7.0), du = bt_make(N, 1, 0, 7.0);
    double *rg = dalloc(N), *ru = dalloc(N), *eg = dalloc(N), *eu = dalloc(N);
    ct_ref_swiglu_backward(rg, ru, dout.d, g.d, u.d, N);
    /* dgate = d u s (1 + g (1 - s)): s off by 10 u32 s, so 1 - s by that absolutely; the bracket
     * by (1 + |g|) 12 u32 s; four products: gamma(24) |d u| s (1 + 2 |g|). dup = d g s. */
    for (size_t i = 0; i < N; i++) {
        double s = 1.0 / (1.0 + exp(-g.d[i]));
        eg[i] = gam(24) * fabs(dout.d[i] * u.d[i]) * s * (1 + 2 * fabs(g.d[i]));
        eu[i] = gam(14) * fabs(dout.d[i] * g.d[i]) * s;
    }
    CT_ASSERT_OK(ct_swiglu_backward(g_dev, dg.v, du.v, dout.v, g.v, u.v, N),
                 ct_device_errmsg(g_dev));
    bt_read(&dg);
    bt_read(&du);
    check("swiglu_backward dgate (bf16)", &dg, rg, eg, 0);
    check("swiglu_backward dup (bf16)", &du, ru, eu, 0);
    /* dout may be dup (the SwiGLU experts' backward, moe.c): the same values */
    bt_upload(&dout);
    CT_ASSERT_OK(ct_swiglu_backward(g_dev, dg.v, dout.v, dout.v, g.v, u.v, N),
                 ct_device_errmsg(g_dev));
    bt_read(&dout);
    check("swiglu_backward dup over dout (bf16)", &dout, ru, eu, 0);
    free(ro), free(eo), free(rg), free(ru), free(eg), free(eu);
    bt_free(&g), bt_free(&u), bt_free(&out), bt_free(&dout), bt_free(&dg), bt_free(&du);
}

/* ------------------------------------------------------------------ embedding */

/* The token embedding over rows [lo, lo + Vl) of a vocabulary of V ids: a copy of bf16 values
 * (exact) or zeros; its backward sums up to B T bf16 rows per id into fp32 (gamma(BT + 1)). */
static void test_embed(int B, int T, int C, int V, int lo, int Vl) {
    size_t BT = (size_t)B * T;
    bt tok = bt_ints(BT, 0, V), wte = bt_make((size_t)Vl * C, 1, 1, 0);
    bt out = bt_make(BT * C, 1, 0, 7.0);
    const int *id = (const int *)tok.h;
    CT_ASSERT_OK(ct_embed_forward_vp(g_dev, out.v, tok.v, wte.v, B, T, C, lo, Vl),
                 ct_device_errmsg(g_dev));
    double *ro = dalloc(out.n);
    for (size_t r = 0; r < BT; r++)
        for (int c = 0; c < C; c++) {
            int t = id[r] - lo;
            ro[r * C + c] = t >= 0 && t < Vl ? wte.d[(size_t)t * C + c] : 0.0;
        }
    bt_read(&out);
    check("embed_forward_vp (bf16, exact)", &out, ro, NULL, 0);
    bt dout = bt_make(out.n, 1, 1, 0), dwte = bt_make(wte.n, 0, 1, 0);
    double *ew = dalloc(wte.n);
    for (size_t i = 0; i < wte.n; i++) ew[i] = fabs(dwte.d[i]);
    for (size_t r = 0; r < BT; r++) {
        int t = id[r] - lo;
        if (t < 0 || t >= Vl) continue;
        for (int c = 0; c < C; c++) {
            dwte.d[(size_t)t * C + c] += dout.d[r * C + c];
            ew[(size_t)t * C + c] += fabs(dout.d[r * C + c]);
        }
    }
    for (size_t i = 0; i < wte.n; i++) ew[i] *= gam((double)BT + 1);
    CT_ASSERT_OK(ct_embed_backward_vp(g_dev, dwte.v, dout.v, tok.v, B, T, C, lo, Vl),
                 ct_device_errmsg(g_dev));
    bt_read(&dwte);
    check("embed_backward_vp dwte (fp32 +=)", &dwte, dwte.d, ew, 0);
    free(ro), free(ew);
    bt_free(&tok), bt_free(&wte), bt_free(&out), bt_free(&dout), bt_free(&dwte);
}

/* ------------------------------------------------------------------ kv heads repeated */

/* [q | k | v] of NH query and NKV kv heads -> [q | k' | v'] (query head h reads kv head
 * h / (NH / NKV)): copies, exact; the backward sums each kv head's NH / NKV query heads'
 * gradients in fp32 (gamma(G)) and rounds once. */
static void test_gqa(int B, int T, int NH, int NKV, int hd) {
    size_t N = (size_t)B * T, C = (size_t)NH * hd, KV = (size_t)NKV * hd, Cr = C + 2 * KV;
    size_t G = (size_t)(NH / NKV);
    bt raw = bt_make(N * Cr, 1, 1, 0), ex = bt_make(N * 3 * C, 1, 0, 7.0);
    double *re = dalloc(ex.n);
    for (size_t r = 0; r < N; r++)
        for (size_t j = 0; j < 3 * C; j++) {
            size_t sec = j / C, w = j % C, src = w;
            if (sec > 0) src = C + (sec - 1) * KV + (w / hd) / G * hd + w % hd;
            re[r * 3 * C + j] = raw.d[r * Cr + src];
        }
    CT_ASSERT_OK(ct_gqa_expand_forward(g_dev, ex.v, raw.v, B, T, NH, NKV, hd),
                 ct_device_errmsg(g_dev));
    bt_read(&ex);
    check("gqa_expand (bf16, exact)", &ex, re, NULL, 0);
    bt dex = bt_make(ex.n, 1, 1, 0), draw = bt_make(raw.n, 1, 0, 7.0);
    double *rd = dalloc(raw.n), *ed = dalloc(raw.n);
    for (size_t r = 0; r < N; r++)
        for (size_t j = 0; j < 3 * C; j++) {
            size_t sec = j / C, w = j % C, dst = w;
            if (sec > 0) dst = C + (sec - 1) * KV + (w / hd) / G * hd + w % hd;
            rd[r * Cr + dst] += dex.d[r * 3 * C + j];
            ed[r * Cr + dst] += gam((double)G) * fabs(dex.d[r * 3 * C + j]);
        }
    CT_ASSERT_OK(ct_gqa_expand_backward(g_dev, draw.v, dex.v, B, T, NH, NKV, hd),
                 ct_device_errmsg(g_dev));
    bt_read(&draw);
    check("gqa_expand_backward (bf16)", &draw, rd, ed, 0);
    free(re), free(rd), free(ed);
    bt_free(&raw), bt_free(&ex), bt_free(&dex), bt_free(&draw);
}

/* ------------------------------------------------------------------ refusals */

static void test_refusals(void) {
    bt x = bt_make(12, 1, 1, 0), y32 = bt_make(12, 0, 1, 0), w = bt_make(4, 1, 1, 0);
    bt r = bt_make(3, 0, 0, 0), r16 = bt_make(3, 1, 0, 0);
    ct_status st = ct_rmsnorm_forward(g_dev, y32.v, r.v, x.v, w.v, 1, 3, 4, 1e-5f);
    CT_ASSERT_EQ_INT(st, CT_ERR_ARG);
    CT_ASSERT(strstr(ct_device_errmsg(g_dev), "out") != NULL);
    st = ct_rmsnorm_forward(g_dev, x.v, r16.v, x.v, w.v, 1, 3, 4, 1e-5f);
    CT_ASSERT_EQ_INT(st, CT_ERR_ARG);
    CT_ASSERT(strstr(ct_device_errmsg(g_dev), "rstd") != NULL);
    st = ct_swiglu_forward(g_dev, x.v, x.v, y32.v, 12);
    CT_ASSERT_EQ_INT(st, CT_ERR_ARG);
    CT_ASSERT(strstr(ct_device_errmsg(g_dev), "up") != NULL);
    bt_free(&x), bt_free(&y32), bt_free(&w), bt_free(&r), bt_free(&r16);
}

int main(void) {
    ct_test_devices ds;
    g_dev = ct_test_device_open(&ds, NULL);
    if (!g_dev) return ct_test_end("test_engine_llama_ops_bf16");
    printf("device: %s\n", ds.list[ds.pick[0]].name);
    test_refusals();
    test_rmsnorm(21, 20, 1e-5);
    test_rmsnorm(5, 67, 1e-6);
    test_rope(3, 7, 4, 6, 0, 3 * 4 * 6, 10000.0);     /* q inside a fused q|k|v row */
    test_rope(2, 13, 2, 8, 5 * 8, 8 * 8, 500000.0);   /* k at an offset, NKV 2 of NH 4 */
    test_swiglu(3 * 7 * 20);
    test_swiglu(1001);
    test_embed(3, 7, 20, 37, 0, 40);  /* the whole vocabulary (padded) */
    test_embed(3, 7, 20, 37, 20, 20); /* the second half of a vocabulary split */
    test_gqa(3, 7, 4, 2, 6);
    test_gqa(2, 5, 6, 1, 4); /* multi-query */
    test_gqa(2, 3, 3, 3, 4); /* multi-head: a copy */
    ct_mem_stats ms;
    ct_device_mem_stats(g_dev, &ms);
    CT_ASSERT_EQ_INT(ms.live_buffers, 0);
    ct_device_free(g_dev);
    ct_test_devices_free(&ds);
    return ct_test_end("test_engine_llama_ops_bf16");
}
