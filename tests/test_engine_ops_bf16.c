/* test_engine_ops_bf16.c - the device ops with bf16 storage (ct_view.store = CT_STORE_BF16)
 * against the plain-C double reference (tests/ct_ref.c) computed on the same bf16-rounded inputs,
 * forward and backward, at awkward shapes (B=3, T=7, C=20, NH=4, V=37, Vp=40, ...), tensors at
 * odd offsets, "=" outputs pre-filled with garbage and "+=" outputs with random values. Also: the
 * conversions round-trip every bf16 bit pattern and round ties to even (by their bits), and an op
 * given a mix of storages is refused naming the argument.
 *
 * Tolerances, derived (u = 2^-8, bf16's unit roundoff under round-to-nearest; u32 = 2^-24):
 *   a result stored in bf16 is fl_bf16(y32), y32 the kernel's fp32 value, so
 *       |y - ref| <= u |ref| + (1 + u) |y32 - ref|;
 *   a result stored in fp32 (parameter gradients, statistics, losses, lse) has the second term
 *   only. |y32 - ref| is fp32 arithmetic on exact inputs: a sum of K terms accumulated in fp32 is
 *   within gamma(K) = K u32 / (1 - K u32) of sum |terms| (products of two bf16 values are exact in
 *   fp32); an exp, log, tanh or sqrt adds a few ulps (OpenCL: <= 4 ulp, counted as 4 u32 of the
 *   magnitude); each further fp32 operation adds one u32 of the magnitude it works at. The
 *   magnitude M of each element (the sum of |terms|) is computed here by running the same
 *   reference on absolute values where the op is linear, and from stated bounds where it is not.
 *   Each check below says its K and M. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_cl.h"
#include "ct_engine_ops.h"
#include "ct_ref.h"
#include "ct_test.h"
#include "ct_test_dev.h"

#define OFF 5 /* every tensor starts 5 elements into its buffer */
#define U 0x1.0p-8
#define U32 0x1.0p-24

static ct_device *g_dev;
static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static double urand(void) { /* uniform [-1, 1) */
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_rng >> 11) * 0x1.0p-52 - 1.0;
}
static double gam(double k) { return k * U32 / (1.0 - k * U32); }
static float bf(double x) { return ct_bf16_to_f32(ct_bf16_from_f32((float)x)); }

/* A device tensor (bf16 or 4-byte storage) with its host mirror: h the values as floats (for a
 * bf16 tensor, exactly the bf16 values), d the same as doubles for the reference. */
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
        for (size_t i = 0; i < t->n; i++)
            u[i] = ct_bf16_from_f32(t->h[i]);
        CT_ASSERT_OK(ct_buffer_write(t->b, OFF * 2, u, t->n * 2), ct_device_errmsg(g_dev));
        free(u);
    } else {
        CT_ASSERT_OK(ct_buffer_write(t->b, OFF * 4, t->h, t->n * 4), ct_device_errmsg(g_dev));
    }
}

/* n values scale * uniform(-1, 1) (rounded to bf16 when bf), or `fill` when scale is 0. */
static bt bt_make(size_t n, int bf16, double scale, double fill) {
    bt t = {0};
    t.n = n;
    t.bf = bf16;
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

/* Set host values (already representable) and upload. */
static void bt_set(bt *t, size_t i, double x) {
    t->h[i] = t->bf ? bf(x) : (float)x;
    t->d[i] = t->h[i];
}

static bt bt_ints(size_t n, int lo, int hi) {
    bt t = bt_make(n, 0, 0, 0);
    int *ids = (int *)t.h;
    for (size_t i = 0; i < n; i++)
        ids[i] = lo + (int)((urand() + 1.0) * 0.5 * (hi - lo)) % (hi - lo);
    CT_ASSERT_OK(ct_buffer_write(t.b, OFF * 4, ids, n * 4), ct_device_errmsg(g_dev));
    return t;
}

static void bt_read(bt *t) {
    CT_ASSERT_OK(ct_device_finish(g_dev), ct_device_errmsg(g_dev));
    if (t->bf) {
        uint16_t *u = malloc((t->n ? t->n : 1) * sizeof *u);
        CT_ASSERT_OK(ct_buffer_read(t->b, OFF * 2, u, t->n * 2), ct_device_errmsg(g_dev));
        for (size_t i = 0; i < t->n; i++)
            t->h[i] = ct_bf16_to_f32(u[i]);
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
static double *dabs(const double *x, size_t n) {
    double *a = dalloc(n);
    for (size_t i = 0; i < n; i++)
        a[i] = fabs(x[i]);
    return a;
}

/* Every element of the device result t within u |ref| (when t is bf16) + (1 + u) e32[i], e32 the
 * fp32 arithmetic's bound (e32 NULL: e32s for all). Also: no element equals its reference
 * exactly while the reference is not representable, i.e. the bound is not vacuous, is not
 * checked; what is checked is that the bound is at most a few bf16 ulps (sane tolerances). */
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

/* ------------------------------------------------------------------ encoder */

static void test_encoder(int B, int T, int C, int V, int Vp, int maxT) {
    size_t BT = (size_t)B * T;
    bt inp = bt_ints(BT, 0, V), wte = bt_make((size_t)Vp * C, 1, 1, 0);
    bt wpe = bt_make((size_t)maxT * C, 1, 1, 0), out = bt_make(BT * C, 1, 0, 7.0);
    CT_ASSERT_OK(ct_encoder_forward(g_dev, out.v, inp.v, wte.v, wpe.v, B, T, C, Vp),
                 ct_device_errmsg(g_dev));
    bt_read(&out);
    double *r = dalloc(out.n), *m = dalloc(out.n);
    double *awte = dabs(wte.d, wte.n), *awpe = dabs(wpe.d, wpe.n);
    ct_ref_encoder_forward(r, (int *)inp.h, wte.d, wpe.d, B, T, C);
    ct_ref_encoder_forward(m, (int *)inp.h, awte, awpe, B, T, C);
    for (size_t i = 0; i < out.n; i++)
        m[i] *= gam(1); /* one fp32 add */
    check("encoder_forward (bf16 out)", &out, r, m, 0);
    /* backward: dwte, dwpe fp32 "+=" of sums of up to B*T bf16 terms */
    bt dout = bt_make(out.n, 1, 1, 0), dwte = bt_make(wte.n, 0, 1, 0),
       dwpe = bt_make(wpe.n, 0, 1, 0);
    double *mwte = dabs(dwte.d, dwte.n), *mwpe = dabs(dwpe.d, dwpe.n),
           *adout = dabs(dout.d, dout.n);
    CT_ASSERT_OK(ct_encoder_backward(g_dev, dwte.v, dwpe.v, dout.v, inp.v, B, T, C, Vp),
                 ct_device_errmsg(g_dev));
    ct_ref_encoder_backward(dwte.d, dwpe.d, dout.d, (int *)inp.h, B, T, C);
    ct_ref_encoder_backward(mwte, mwpe, adout, (int *)inp.h, B, T, C);
    for (size_t i = 0; i < dwte.n; i++)
        mwte[i] *= gam((double)BT + 1);
    for (size_t i = 0; i < dwpe.n; i++)
        mwpe[i] *= gam((double)B + 1);
    bt_read(&dwte);
    bt_read(&dwpe);
    check("encoder_backward dwte (fp32 +=)", &dwte, dwte.d, mwte, 0);
    check("encoder_backward dwpe (fp32 +=)", &dwpe, dwpe.d, mwpe, 0);
    free(r);
    free(m);
    free(awte);
    free(awpe);
    free(mwte);
    free(mwpe);
    free(adout);
    bt_free(&inp);
    bt_free(&wte);
    bt_free(&wpe);
    bt_free(&out);
    bt_free(&dout);
    bt_free(&dwte);
    bt_free(&dwpe);
}

/* ------------------------------------------------------------------ layernorm */

static void test_layernorm(int B, int T, int C) {
    size_t N = (size_t)B * T, n = N * C;
    bt inp = bt_make(n, 1, 2, 0), w = bt_make(C, 1, 1, 0), b = bt_make(C, 1, 1, 0);
    for (size_t i = 0; i < n; i++)
        bt_set(&inp, i, inp.d[i] + (double)(i / C % 5) - 2.0);
    bt_upload(&inp);
    bt out = bt_make(n, 1, 0, 7.0), mean = bt_make(N, 0, 0, 7.0), rstd = bt_make(N, 0, 0, 7.0);
    CT_ASSERT_OK(ct_layernorm_forward(g_dev, out.v, mean.v, rstd.v, inp.v, w.v, b.v, B, T, C),
                 ct_device_errmsg(g_dev));
    double *ro = dalloc(n), *rm = dalloc(N), *rr = dalloc(N);
    ct_ref_layernorm_forward(ro, rm, rr, inp.d, w.d, b.d, B, T, C);
    /* Magnitudes. mean: a sum of C terms, M = mean |x|. rstd = (var + eps)^-1/2 with var a sum of
     * C squares of (x - m), each off by the mean's error: relative error gamma(2C + 8) times
     * (1 + mean|x|^2 / var) (the mean's error relative to the spread), doubled for the root and
     * reciprocal. out = (x - m) s w + b: M = (|x| + |m|) s |w| + |b| at gamma(2C + 12) (the row's
     * statistics' errors carried through plus four operations). */
    double *em = dalloc(N), *er = dalloc(N), *eo = dalloc(n);
    for (size_t r = 0; r < N; r++) {
        double ax = 0, ax2 = 0;
        for (int i = 0; i < C; i++)
            ax += fabs(inp.d[r * C + i]) / C;
        for (int i = 0; i < C; i++)
            ax2 += inp.d[r * C + i] * inp.d[r * C + i] / C;
        double var = 1.0 / (rr[r] * rr[r]);
        em[r] = gam(C + 2) * ax;
        er[r] = 2 * gam(2 * C + 8) * (1 + ax2 / var) * rr[r];
        for (int i = 0; i < C; i++)
            eo[r * C + i] =
                gam(2 * C + 12) * (1 + ax2 / var) *
                ((fabs(inp.d[r * C + i]) + fabs(rm[r])) * rr[r] * fabs(w.d[i]) + fabs(b.d[i]));
    }
    bt_read(&out);
    bt_read(&mean);
    bt_read(&rstd);
    check("layernorm_forward out (bf16)", &out, ro, eo, 0);
    check("layernorm_forward mean (fp32)", &mean, rm, em, 0);
    check("layernorm_forward rstd (fp32)", &rstd, rr, er, 0);
    for (int acc = 0; acc <= 1; acc++) {
        bt dout = bt_make(n, 1, 1, 0), dinp = acc ? bt_make(n, 1, 1, 0) : bt_make(n, 1, 0, 7.0);
        bt dw = bt_make(C, 0, 1, 0), db = bt_make(C, 0, 1, 0);
        if (!acc) memset(dinp.d, 0, n * sizeof(double));
        double *ed = dalloc(n), *ew = dabs(dw.d, C), *eb = dabs(db.d, C);
        /* dinp = s (w dy - mean(w dy) - n mean(w dy n)) (+ dinp): M = s (|w dy| + mean|w dy| +
         * |n| mean|w dy n|) (+ |dinp|) at gamma(2C + 16) (1 + mean x^2/var): two row sums of C
         * terms and the normalised input's own error. dw, db: fp32 "+=" of N terms dy n and dy,
         * M = |dw| + sum |dy| (|x| + |m|) s and |db| + sum |dy| at gamma(N + 8) (1 + ...). */
        for (size_t r = 0; r < N; r++) {
            double ax2 = 0, a1 = 0, a2 = 0;
            for (int i = 0; i < C; i++)
                ax2 += inp.d[r * C + i] * inp.d[r * C + i] / C;
            double k = 1 + ax2 * rr[r] * rr[r];
            for (int i = 0; i < C; i++) {
                double nn = (inp.d[r * C + i] - rm[r]) * rr[r], wd = w.d[i] * dout.d[r * C + i];
                a1 += fabs(wd) / C;
                a2 += fabs(wd * nn) / C;
            }
            for (int i = 0; i < C; i++) {
                double nn = (inp.d[r * C + i] - rm[r]) * rr[r], wd = w.d[i] * dout.d[r * C + i];
                ed[r * C + i] = gam(2 * C + 16) * k *
                                (rr[r] * (fabs(wd) + a1 + fabs(nn) * a2) + fabs(dinp.d[r * C + i]));
                ew[i] += gam(N + 8) * k * fabs(dout.d[r * C + i]) *
                         (fabs(inp.d[r * C + i]) + fabs(rm[r])) * rr[r];
                eb[i] += gam(N + 1) * fabs(dout.d[r * C + i]);
            }
        }
        for (int i = 0; i < C; i++)
            ew[i] += gam(N + 8) * fabs(dw.d[i]);
        for (int i = 0; i < C; i++)
            eb[i] += gam(N + 1) * fabs(db.d[i]);
        CT_ASSERT_OK(ct_layernorm_backward(g_dev, dinp.v, dw.v, db.v, dout.v, inp.v, w.v, mean.v,
                                           rstd.v, B, T, C, acc),
                     ct_device_errmsg(g_dev));
        ct_ref_layernorm_backward(dinp.d, dw.d, db.d, dout.d, inp.d, w.d, rm, rr, B, T, C);
        bt_read(&dinp);
        bt_read(&dw);
        bt_read(&db);
        check(acc ? "layernorm_backward dinp (bf16 +=)" : "layernorm_backward dinp (bf16 =)", &dinp,
              dinp.d, ed, 0);
        check("layernorm_backward dweight (fp32 +=)", &dw, dw.d, ew, 0);
        check("layernorm_backward dbias (fp32 +=)", &db, db.d, eb, 0);
        free(ed);
        free(ew);
        free(eb);
        bt_free(&dout);
        bt_free(&dinp);
        bt_free(&dw);
        bt_free(&db);
    }
    free(ro);
    free(rm);
    free(rr);
    free(em);
    free(er);
    free(eo);
    bt_free(&inp);
    bt_free(&w);
    bt_free(&b);
    bt_free(&out);
    bt_free(&mean);
    bt_free(&rstd);
}

/* ------------------------------------------------------------------ matmul */

static void test_matmul(int B, int T, int C, int OC, int with_bias) {
    size_t N = (size_t)B * T;
    bt inp = bt_make(N * C, 1, 1, 0), w = bt_make((size_t)OC * C, 1, 1, 0),
       b = bt_make(OC, 1, 1, 0);
    bt out = bt_make(N * OC, 1, 0, 7.0);
    ct_view bias = with_bias ? b.v : ct_view_none();
    CT_ASSERT_OK(ct_matmul_forward(g_dev, out.v, inp.v, w.v, bias, B, T, C, OC),
                 ct_device_errmsg(g_dev));
    double *r = dalloc(out.n), *m = dalloc(out.n);
    double *ainp = dabs(inp.d, inp.n), *aw = dabs(w.d, w.n), *ab = dabs(b.d, b.n);
    ct_ref_matmul_forward(r, inp.d, w.d, with_bias ? b.d : NULL, B, T, C, OC);
    /* out = fl_bf16(bias + sum of C exact products, accumulated in fp32): one rounding */
    ct_ref_matmul_forward(m, ainp, aw, with_bias ? ab : NULL, B, T, C, OC);
    for (size_t i = 0; i < out.n; i++)
        m[i] *= gam(C + 1);
    bt_read(&out);
    check(with_bias ? "matmul_forward (bf16, bias)" : "matmul_forward (bf16)", &out, r, m, 0);
    bt dout = bt_make(N * OC, 1, 1, 0), dinp = bt_make(N * C, 1, 0, 7.0);
    bt dw = bt_make((size_t)OC * C, 0, 1, 0), db = bt_make(OC, 0, 1, 0);
    memset(dinp.d, 0, dinp.n * sizeof(double));
    double *adout = dabs(dout.d, dout.n), *mi = dalloc(dinp.n), *mw = dabs(dw.d, dw.n),
           *mb = dabs(db.d, db.n);
    CT_ASSERT_OK(ct_matmul_backward(g_dev, dinp.v, dw.v, with_bias ? db.v : ct_view_none(), dout.v,
                                    inp.v, w.v, B, T, C, OC),
                 ct_device_errmsg(g_dev));
    ct_ref_matmul_backward(dinp.d, dw.d, with_bias ? db.d : NULL, dout.d, inp.d, w.d, B, T, C, OC);
    /* dinp: OC terms; dweight, dbias: the old value and N terms, fp32 */
    ct_ref_matmul_backward(mi, mw, with_bias ? mb : NULL, adout, ainp, aw, B, T, C, OC);
    for (size_t i = 0; i < dinp.n; i++)
        mi[i] *= gam(OC);
    for (size_t i = 0; i < dw.n; i++)
        mw[i] *= gam((double)N + 1);
    for (size_t i = 0; i < db.n; i++)
        mb[i] *= gam((double)N + 1);
    bt_read(&dinp);
    bt_read(&dw);
    bt_read(&db);
    check("matmul_backward dinp (bf16)", &dinp, dinp.d, mi, 0);
    check("matmul_backward dweight (fp32 +=)", &dw, dw.d, mw, 0);
    check(with_bias ? "matmul_backward dbias (fp32 +=)" : "matmul_backward dbias untouched", &db,
          db.d, mb, 0);
    free(r);
    free(m);
    free(ainp);
    free(aw);
    free(ab);
    free(adout);
    free(mi);
    free(mw);
    free(mb);
    bt_free(&inp);
    bt_free(&w);
    bt_free(&b);
    bt_free(&out);
    bt_free(&dout);
    bt_free(&dinp);
    bt_free(&dw);
    bt_free(&db);
}

/* ------------------------------------------------------------------ elementwise */

static void test_elementwise(size_t N, int OC) {
    bt x = bt_make(N, 1, 4, 0), y = bt_make(N, 1, 0, 7.0);
    CT_ASSERT_OK(ct_gelu_forward(g_dev, y.v, x.v, N), ct_device_errmsg(g_dev));
    double *r = dalloc(N), *m = dalloc(N);
    ct_ref_gelu_forward(r, x.d, N);
    /* gelu = x (1 + tanh(u)) / 2: the polynomial u (6 operations), tanh (4 ulp), and the
     * cancellation in 1 + tanh for x < 0: M = |x| (1 + |u|), at 12 u32 */
    for (size_t i = 0; i < N; i++) {
        double a = fabs(x.d[i]);
        m[i] = 12 * U32 * a * (1 + 0.7978845608 * (a + 0.044715 * a * a * a));
    }
    bt_read(&y);
    check("gelu_forward (bf16)", &y, r, m, 0);
    bt dout = bt_make(N, 1, 1, 0), dinp = bt_make(N, 1, 0, 7.0);
    memset(dinp.d, 0, N * sizeof(double));
    CT_ASSERT_OK(ct_gelu_backward(g_dev, dinp.v, x.v, dout.v, N), ct_device_errmsg(g_dev));
    ct_ref_gelu_backward(dinp.d, x.d, dout.d, N);
    /* gelu' = (1 + th)/2 + x (1 - th^2) S (1 + 3k x^2) / 2: M = |dout| (1 + |x| (1 + 3k x^2)
     * (1 + |u|)), at 16 u32 (a dozen operations and tanh) */
    for (size_t i = 0; i < N; i++) {
        double a = fabs(x.d[i]);
        m[i] =
            16 * U32 * fabs(dout.d[i]) *
            (1 + a * (1 + 3 * 0.044715 * a * a) * (1 + 0.7978845608 * (a + 0.044715 * a * a * a)));
    }
    bt_read(&dinp);
    check("gelu_backward (bf16)", &dinp, dinp.d, m, 0);
    /* residual: one fp32 add of two bf16 values, rounded once: M = |a| + |b| at u32 */
    bt a = bt_make(N, 1, 1, 0), b = bt_make(N, 1, 1, 0), o = bt_make(N, 1, 0, 7.0);
    CT_ASSERT_OK(ct_residual_forward(g_dev, o.v, a.v, b.v, N), ct_device_errmsg(g_dev));
    ct_ref_residual_forward(r, a.d, b.d, N);
    for (size_t i = 0; i < N; i++)
        m[i] = U32 * (fabs(a.d[i]) + fabs(b.d[i]));
    bt_read(&o);
    check("residual_forward (bf16)", &o, r, m, 0);
    double *ma = dalloc(N), *mb = dalloc(N);
    for (size_t i = 0; i < N; i++) {
        ma[i] = U32 * (fabs(a.d[i]) + fabs(dout.d[i]));
        mb[i] = U32 * (fabs(b.d[i]) + fabs(dout.d[i]));
    }
    CT_ASSERT_OK(ct_residual_backward(g_dev, a.v, b.v, dout.v, N), ct_device_errmsg(g_dev));
    ct_ref_residual_backward(a.d, b.d, dout.d, N);
    bt_read(&a);
    bt_read(&b);
    check("residual_backward da (bf16 +=)", &a, a.d, ma, 0);
    check("residual_backward db (bf16 +=)", &b, b.d, mb, 0);
    /* bias over (N/OC rows, OC): out += bias (bf16, one add), dbias (fp32) += rows of dout */
    size_t rows = N / OC;
    bt bias = bt_make(OC, 1, 1, 0), mm = bt_make(rows * OC, 1, 1, 0), dbias = bt_make(OC, 0, 1, 0);
    for (size_t i = 0; i < rows * OC; i++)
        m[i] = U32 * (fabs(mm.d[i]) + fabs(bias.d[i % OC]));
    CT_ASSERT_OK(ct_bias_forward(g_dev, mm.v, bias.v, rows, OC), ct_device_errmsg(g_dev));
    for (size_t i = 0; i < rows * OC; i++)
        mm.d[i] += bias.d[i % OC];
    bt_read(&mm);
    check("bias_forward (bf16 +=)", &mm, mm.d, m, 0);
    double *md = dabs(dbias.d, OC);
    CT_ASSERT_OK(ct_bias_backward(g_dev, dbias.v, dout.v, rows, OC), ct_device_errmsg(g_dev));
    for (size_t i = 0; i < rows * OC; i++) {
        dbias.d[i % OC] += dout.d[i];
        md[i % OC] += fabs(dout.d[i]);
    }
    for (int i = 0; i < OC; i++)
        md[i] *= gam((double)rows + 1);
    bt_read(&dbias);
    check("bias_backward (fp32 +=)", &dbias, dbias.d, md, 0);
    free(r);
    free(m);
    free(ma);
    free(mb);
    free(md);
    bt_free(&x);
    bt_free(&y);
    bt_free(&dout);
    bt_free(&dinp);
    bt_free(&a);
    bt_free(&b);
    bt_free(&o);
    bt_free(&bias);
    bt_free(&mm);
    bt_free(&dbias);
}

/* ------------------------------------------------------------------ loss */

static void test_crossentropy(int B, int T, int V, int Vp) {
    size_t N = (size_t)B * T;
    bt logits = bt_make(N * Vp, 1, 5, 0), tg = bt_ints(N, 0, V);
    for (size_t r = 0; r < N; r++) /* big padding: must not leak into the softmax */
        for (int v = V; v < Vp; v++)
            bt_set(&logits, r * Vp + v, 50.0);
    bt_upload(&logits);
    bt losses = bt_make(N, 0, 0, 7.0), lse = bt_make(N, 0, 0, 7.0), mean = bt_make(1, 0, 0, 7.0);
    CT_ASSERT_OK(ct_crossentropy_forward(g_dev, losses.v, lse.v, logits.v, tg.v, B, T, V, Vp),
                 ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_mean_forward(g_dev, mean.v, losses.v, N), ct_device_errmsg(g_dev));
    double *rl = dalloc(N), *rz = dalloc(N), *el = dalloc(N), rmean = 0, emean = 0;
    ct_ref_crossentropy_forward(rl, logits.d, (int *)tg.h, B, T, V, Vp);
    /* losses (fp32) = mx + log(sum of V exponentials) - l[target]: the sum relative gamma(V + 4)
     * (plus 4 ulp per exp), log 4 ulp, two adds at |lse| + |l|: M = |lse| + |l[t]| + V + 8 at
     * 4 u32 + gamma(V + 8) */
    for (size_t r = 0; r < N; r++) {
        int t = ((int *)tg.h)[r];
        rz[r] = rl[r] + logits.d[r * Vp + t];
        el[r] = 4 * U32 * (fabs(rz[r]) + fabs(logits.d[r * Vp + t])) + gam(V + 8) * 2;
        rmean += rl[r] / (double)N;
        emean += (el[r] + gam((double)N + 2) * fabs(rl[r])) / (double)N;
    }
    bt_read(&losses);
    bt_read(&mean);
    bt_read(&lse);
    check("crossentropy_forward losses (fp32, bf16 logits)", &losses, rl, el, 0);
    check("crossentropy_forward lse (fp32)", &lse, rz, el, 0);
    check("mean_forward", &mean, &rmean, NULL, emean);
    double dloss = 1.0 / (double)N;
    double *rd = dalloc(logits.n), *ed = dalloc(logits.n);
    ct_ref_crossentropy_backward(rd, logits.d, (int *)tg.h, dloss, B, T, V, Vp);
    /* dlogits (bf16) = (exp(l - lse) - onehot) dloss: p off by the lse's error plus the
     * subtraction at |l| + |lse| and exp's 4 ulp: M = p dloss (el + 8 u32 (|l| + |lse|)) */
    for (size_t r = 0; r < N; r++)
        for (int v = 0; v < V; v++) {
            double p = exp(logits.d[r * Vp + v] - rz[r]);
            ed[r * Vp + v] =
                p * dloss * (2 * el[r] + 8 * U32 * (fabs(logits.d[r * Vp + v]) + fabs(rz[r]) + 1));
        }
    bt dl = bt_make(logits.n, 1, 0, 7.0);
    CT_ASSERT_OK(
        ct_crossentropy_backward(g_dev, dl.v, logits.v, lse.v, tg.v, (float)dloss, B, T, V, Vp),
        ct_device_errmsg(g_dev));
    bt_read(&dl);
    check("crossentropy_backward (bf16)", &dl, rd, ed, 0);
    CT_ASSERT_OK(
        ct_crossentropy_backward(g_dev, logits.v, logits.v, lse.v, tg.v, (float)dloss, B, T, V, Vp),
        ct_device_errmsg(g_dev));
    bt_read(&logits);
    check("crossentropy_backward in place (bf16)", &logits, rd, ed, 0);
    free(rl);
    free(rz);
    free(el);
    free(rd);
    free(ed);
    bt_free(&logits);
    bt_free(&tg);
    bt_free(&losses);
    bt_free(&lse);
    bt_free(&mean);
    bt_free(&dl);
}

/* ------------------------------------------------------------------ fused attention */

/* cfg->mma (the variant on the mma wrappers, attention_mma.cl) rounds two more things to bf16,
 * as FlashAttention-2 does: P before P.V (forward) and P^T.dO (dV), and dS before dS.K and
 * dS^T.Q. Each rounding is off by at most u of the rounded value, so it adds u times the same
 * magnitudes the fp32 bounds below use (sum p |v| for out, sum p |dO| for dV, sum S |k| and
 * sum S |q| for dQ and dK, S >= |dS|): `mu` below, u for the variant, 0 for the scalar kernels. */
static void test_attention_fused(int B, int T, int C, int NH, const ct_attn_cfg *cfg) {
    const double mu = cfg && cfg->mma ? U : 0;
    size_t BTC = (size_t)B * T * C, A = (size_t)B * NH * T * T;
    int hs = C / NH;
    bt inp = bt_make(3 * BTC, 1, 1.5, 0), out = bt_make(BTC, 1, 0, 7.0);
    bt lse = bt_make((size_t)B * NH * T, 0, 0, 7.0);
    CT_ASSERT_OK(ct_attention_fused_forward(g_dev, cfg, out.v, lse.v, inp.v, B, T, C, NH),
                 ct_device_errmsg(g_dev));
    double *ro = dalloc(BTC), *ra = dalloc(A), *mo = dalloc(BTC), *rl = dalloc(lse.n),
           *el = dalloc(lse.n);
    ct_ref_attention_forward(ro, ra, inp.d, B, T, C, NH);
    /* Scores s = q.k / sqrt(hs) in fp32: off by Es = gamma(hs + 2) max sum |q||k| / sqrt(hs);
     * each p is then off relatively by 2 Es + the online softmax's rescaling and exp (4 ulp each,
     * at most T / 1 blocks: (4 T + 8) u32), and the output sum of T terms p v by gamma(T):
     * M = sum_j p_j |v_j| (2 Es + (5 T + 16) u32), the sum computed from the reference's p.
     * lse (fp32) = max + log(sum): Es + gamma(T + 8) + u32 |lse|. */
    double es = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++) {
                const double *q = inp.d + ((size_t)b * T + t) * 3 * C + (size_t)h * hs;
                for (int t2 = 0; t2 <= t; t2++) {
                    const double *k = inp.d + ((size_t)b * T + t2) * 3 * C + C + (size_t)h * hs;
                    double s = 0;
                    for (int d = 0; d < hs; d++)
                        s += fabs(q[d] * k[d]);
                    if (s > es) es = s;
                }
            }
    es *= gam(hs + 2) / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *p = ra + (((size_t)b * NH + h) * T + t) * T;
                double mx = -INFINITY, z = 0;
                const double *q = inp.d + ((size_t)b * T + t) * 3 * C + (size_t)h * hs;
                double sc[4096];
                for (int t2 = 0; t2 <= t; t2++) {
                    const double *k = inp.d + ((size_t)b * T + t2) * 3 * C + C + (size_t)h * hs;
                    double s = 0;
                    for (int d = 0; d < hs; d++)
                        s += q[d] * k[d];
                    sc[t2] = s / sqrt((double)hs);
                    if (sc[t2] > mx) mx = sc[t2];
                }
                for (int t2 = 0; t2 <= t; t2++)
                    z += exp(sc[t2] - mx);
                size_t li = ((size_t)b * NH + h) * T + t;
                rl[li] = mx + log(z);
                el[li] = es + gam(T + 8) + 4 * U32 * fabs(rl[li]);
                for (int d = 0; d < hs; d++) {
                    double sv = 0;
                    for (int t2 = 0; t2 <= t; t2++)
                        sv +=
                            p[t2] *
                            fabs(inp.d[((size_t)b * T + t2) * 3 * C + 2 * C + (size_t)h * hs + d]);
                    mo[((size_t)b * T + t) * C + (size_t)h * hs + d] =
                        sv * (2 * es + (5.0 * T + 16) * U32 + mu);
                }
            }
    bt_read(&out);
    bt_read(&lse);
    check("attention_fused_forward out (bf16)", &out, ro, mo, 0);
    check("attention_fused_forward lse (fp32)", &lse, rl, el, 0);
    /* The backward's inputs are dout, inp, the stored (bf16) out and lse. It uses
     * D_i = rowsum(dout_i * out_i) from the stored out, which differs from the reference's out by
     * the forward's rounding; the reference (ct_ref_attention_backward, from att) is corrected
     * exactly for that, in double: with dD_i = sum_d dO_id (out_stored - out_ref)_id,
     * dq_i -= scale dD_i sum_j p_ij k_j, dk_j -= scale sum_i p_ij dD_i q_i (dv has no D).
     * Error of the fp32 arithmetic, per element: dS_ij = p_ij (dp_ij - D_i) with magnitude
     * S_ij = p_ij (|dp_ij| + |D_i| + sum_d |dO_id| (|v_jd| + |out_id|)), off relatively by the
     * p error of the forward (2 Es + (5 T + 16) u32) and gamma(hs + 2) for dp and D; dq, dk then
     * sum up to T terms (gamma(T + 1) more): M_dq_i = scale sum_j S_ij |k_j|, M_dk_j = scale
     * sum_i S_ij |q_i|, M_dv_j = sum_i p_ij |dO_i|, all times that relative error. */
    bt dout = bt_make(BTC, 1, 1, 0), dinp = bt_make(3 * BTC, 1, 0, 7.0);
    bt dsum = bt_make((size_t)B * NH * T, 0, 0, 7.0);
    CT_ASSERT_OK(ct_attention_fused_backward(g_dev, cfg, dinp.v, dsum.v, dout.v, inp.v, out.v,
                                             lse.v, B, T, C, NH),
                 ct_device_errmsg(g_dev));
    memset(dinp.d, 0, dinp.n * sizeof(double));
    ct_ref_attention_backward(dinp.d, dout.d, inp.d, ra, B, T, C, NH);
    double *eb = dalloc(dinp.n), sc = 1.0 / sqrt((double)hs);
    double rel = 2 * es + (5.0 * T + 16) * U32 + gam(hs + 2) + gam(T + 1) + mu;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                size_t ri = (size_t)b * T + i;
                const double *p = ra + (((size_t)b * NH + h) * T + i) * T;
                const double *dO = dout.d + ri * C + (size_t)h * hs;
                double dD = 0, D = 0, dOo = 0;
                for (int d = 0; d < hs; d++) {
                    double ost = out.h[ri * C + (size_t)h * hs + d];
                    dD += dO[d] * (ost - ro[ri * C + (size_t)h * hs + d]);
                    D += dO[d] * ost;
                    dOo += fabs(dO[d] * ost);
                }
                const double *q = inp.d + ri * 3 * C + (size_t)h * hs;
                double *dq = dinp.d + ri * 3 * C + (size_t)h * hs;
                double *edq = eb + ri * 3 * C + (size_t)h * hs;
                for (int j = 0; j <= i; j++) {
                    size_t rj = (size_t)b * T + j;
                    const double *k = inp.d + rj * 3 * C + C + (size_t)h * hs;
                    const double *v = inp.d + rj * 3 * C + 2 * C + (size_t)h * hs;
                    double *dk = dinp.d + rj * 3 * C + C + (size_t)h * hs;
                    double *edk = eb + rj * 3 * C + C + (size_t)h * hs;
                    double *edv = eb + rj * 3 * C + 2 * C + (size_t)h * hs;
                    double dp = 0, dOv = 0;
                    for (int d = 0; d < hs; d++)
                        dp += dO[d] * v[d], dOv += fabs(dO[d] * v[d]);
                    double S = p[j] * (fabs(dp) + fabs(D) + dOv + dOo);
                    for (int d = 0; d < hs; d++) {
                        dq[d] -= sc * dD * p[j] * k[d];
                        dk[d] -= sc * p[j] * dD * q[d];
                        edq[d] += rel * sc * S * fabs(k[d]);
                        edk[d] += rel * sc * S * fabs(q[d]);
                        edv[d] += rel * p[j] * fabs(dO[d]);
                    }
                }
            }
    bt_read(&dinp);
    check("attention_fused_backward dinp (bf16)", &dinp, dinp.d, eb, 0);
    free(eb);
    free(ro);
    free(ra);
    free(mo);
    free(rl);
    free(el);
    bt_free(&inp);
    bt_free(&out);
    bt_free(&lse);
    bt_free(&dout);
    bt_free(&dinp);
    bt_free(&dsum);
}

/* ------------------------------------------------------------------ vocabulary-parallel */

/* Two workers' halves of the vocabulary-parallel embedding and cross-entropy (tensor
 * parallelism), combined as tp.c does, against the whole op's reference: the embedding halves
 * (one holds wpe) sum exactly (one of the two is zero per element), so the result is the
 * encoder's, one bf16 rounding of a single fp32 add; the losses and lse are the cross-entropy's
 * with the max and the sums combined in fp32 (the bounds of test_crossentropy, the sums' two
 * halves adding one u32); the logits' gradient halves are the whole one's columns. */
static void test_vocab_parallel(int B, int T, int C, int V, int Vp, int split) {
    size_t N = (size_t)B * T;
    int lo[2] = {0, split}, Vl[2] = {split, Vp - split}, nreal[2];
    for (int w = 0; w < 2; w++)
        nreal[w] = V - lo[w] < 0 ? 0 : V - lo[w] > Vl[w] ? Vl[w] : V - lo[w];
    bt tok = bt_ints(N, 0, V), wte = bt_make((size_t)Vp * C, 1, 1, 0),
       wpe = bt_make((size_t)T * C, 1, 1, 0);
    bt wpart[2], out[2], dwte[2];
    bt dout = bt_make(N * C, 1, 1, 0), dwpe = bt_make(wpe.n, 0, 1, 0);
    double *r = dalloc(N * C), *m = dalloc(N * C), *aw = dabs(wte.d, wte.n),
           *ap = dabs(wpe.d, wpe.n);
    double *rdwte = dalloc(wte.n), *rdwpe = dalloc(wpe.n), *mdwte = dalloc(wte.n),
           *mdwpe = dalloc(wpe.n), *adout = dabs(dout.d, dout.n);
    for (int w = 0; w < 2; w++) {
        wpart[w] = bt_make((size_t)Vl[w] * C, 1, 0, 0);
        for (size_t i = 0; i < wpart[w].n; i++)
            bt_set(&wpart[w], i, wte.d[(size_t)lo[w] * C + i]);
        bt_upload(&wpart[w]);
        out[w] = bt_make(N * C, 1, 0, 7.0);
        dwte[w] = bt_make((size_t)Vl[w] * C, 0, 1, 0);
        CT_ASSERT_OK(ct_encoder_forward_vp(g_dev, out[w].v, tok.v, wpart[w].v, wpe.v, B, T, C,
                                           lo[w], Vl[w], w == 0),
                     ct_device_errmsg(g_dev));
    }
    CT_ASSERT_OK(ct_combine(g_dev, out[0].v, out[0].v, out[1].v, N * C, 0),
                 ct_device_errmsg(g_dev));
    ct_ref_encoder_forward(r, (int *)tok.h, wte.d, wpe.d, B, T, C);
    ct_ref_encoder_forward(m, (int *)tok.h, aw, ap, B, T, C);
    for (size_t i = 0; i < N * C; i++)
        m[i] *= gam(1);
    bt_read(&out[0]);
    check("encoder_forward_vp + combine (bf16)", &out[0], r, m, 0);
    /* backward: each worker's dwte rows; dwpe from worker 0 */
    memcpy(rdwpe, dwpe.d, wpe.n * sizeof(double));
    for (size_t i = 0; i < wpe.n; i++)
        mdwpe[i] = fabs(dwpe.d[i]);
    for (int w = 0; w < 2; w++)
        for (size_t i = 0; i < dwte[w].n; i++) {
            rdwte[(size_t)lo[w] * C + i] = dwte[w].d[i];
            mdwte[(size_t)lo[w] * C + i] = fabs(dwte[w].d[i]);
        }
    ct_ref_encoder_backward(rdwte, rdwpe, dout.d, (int *)tok.h, B, T, C);
    ct_ref_encoder_backward(mdwte, mdwpe, adout, (int *)tok.h, B, T, C);
    CT_ASSERT_OK(
        ct_encoder_backward_vp(g_dev, dwte[0].v, dwpe.v, dout.v, tok.v, B, T, C, lo[0], Vl[0]),
        ct_device_errmsg(g_dev));
    bt spare = bt_make(wpe.n, 0, 1, 0);
    CT_ASSERT_OK(
        ct_encoder_backward_vp(g_dev, dwte[1].v, spare.v, dout.v, tok.v, B, T, C, lo[1], Vl[1]),
        ct_device_errmsg(g_dev));
    for (int w = 0; w < 2; w++) {
        bt_read(&dwte[w]);
        double *e = dalloc(dwte[w].n);
        for (size_t i = 0; i < dwte[w].n; i++)
            e[i] = gam((double)N + 1) * mdwte[(size_t)lo[w] * C + i];
        check("encoder_backward_vp dwte (fp32 +=)", &dwte[w], rdwte + (size_t)lo[w] * C, e, 0);
        free(e);
    }
    for (size_t i = 0; i < wpe.n; i++)
        mdwpe[i] *= gam(B + 1);
    bt_read(&dwpe);
    check("encoder_backward_vp dwpe (fp32 +=)", &dwpe, rdwpe, mdwpe, 0);
    /* cross-entropy over the two halves of bf16 logits */
    bt logits = bt_make(N * Vp, 1, 5, 0), tg = bt_ints(N, 0, V), L[2];
    for (int w = 0; w < 2; w++) {
        L[w] = bt_make(N * Vl[w], 1, 0, 0);
        for (size_t rr = 0; rr < N; rr++)
            for (int v = 0; v < Vl[w]; v++)
                bt_set(&L[w], rr * Vl[w] + v, logits.d[rr * Vp + lo[w] + v]);
        bt_upload(&L[w]);
    }
    bt mx[2] = {bt_make(N, 0, 0, 7.0), bt_make(N, 0, 0, 7.0)};
    bt sums[2] = {bt_make(2 * N, 0, 0, 7.0), bt_make(2 * N, 0, 0, 7.0)};
    bt losses = bt_make(N, 0, 0, 7.0), lse = bt_make(N, 0, 0, 7.0);
    for (int w = 0; w < 2; w++)
        CT_ASSERT_OK(ct_crossentropy_vp_max(g_dev, mx[w].v, L[w].v, B, T, Vl[w], nreal[w]),
                     ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_combine(g_dev, mx[0].v, mx[0].v, mx[1].v, N, 1), ct_device_errmsg(g_dev));
    for (int w = 0; w < 2; w++)
        CT_ASSERT_OK(ct_crossentropy_vp_sums(g_dev, sums[w].v, L[w].v, mx[0].v, tg.v, B, T, Vl[w],
                                             nreal[w], lo[w]),
                     ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_combine(g_dev, sums[0].v, sums[0].v, sums[1].v, 2 * N, 0),
                 ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_crossentropy_vp_finish(g_dev, losses.v, lse.v, mx[0].v, sums[0].v, B, T),
                 ct_device_errmsg(g_dev));
    double *rl = dalloc(N), *rz = dalloc(N), *el = dalloc(N);
    ct_ref_crossentropy_forward(rl, logits.d, (int *)tg.h, B, T, V, Vp);
    for (size_t rr = 0; rr < N; rr++) {
        int t = ((int *)tg.h)[rr];
        rz[rr] = rl[rr] + logits.d[rr * Vp + t];
        el[rr] = 4 * U32 * (fabs(rz[rr]) + fabs(logits.d[rr * Vp + t])) + gam(V + 9) * 2;
    }
    bt_read(&losses);
    bt_read(&lse);
    check("crossentropy_vp losses (fp32, bf16 logits)", &losses, rl, el, 0);
    check("crossentropy_vp lse (fp32)", &lse, rz, el, 0);
    double dloss = 1.0 / (double)N;
    double *rd = dalloc(logits.n);
    ct_ref_crossentropy_backward(rd, logits.d, (int *)tg.h, dloss, B, T, V, Vp);
    for (int w = 0; w < 2; w++) {
        CT_ASSERT_OK(ct_crossentropy_vp_backward(g_dev, L[w].v, lse.v, tg.v, (float)dloss, B, T,
                                                 Vl[w], nreal[w], lo[w]),
                     ct_device_errmsg(g_dev));
        bt_read(&L[w]);
        double *ref = dalloc(L[w].n), *e = dalloc(L[w].n);
        for (size_t rr = 0; rr < N; rr++)
            for (int v = 0; v < Vl[w]; v++) {
                double l = logits.d[rr * Vp + lo[w] + v];
                ref[rr * Vl[w] + v] = rd[rr * Vp + lo[w] + v];
                e[rr * Vl[w] + v] = lo[w] + v < V
                                        ? exp(l - rz[rr]) * dloss *
                                              (2 * el[rr] + 8 * U32 * (fabs(l) + fabs(rz[rr]) + 1))
                                        : 0;
            }
        check("crossentropy_vp_backward (bf16, in place)", &L[w], ref, e, 0);
        free(ref);
        free(e);
    }
    free(r);
    free(m);
    free(aw);
    free(ap);
    free(rdwte);
    free(rdwpe);
    free(mdwte);
    free(mdwpe);
    free(adout);
    free(rl);
    free(rz);
    free(el);
    free(rd);
    for (int w = 0; w < 2; w++) {
        bt_free(&wpart[w]);
        bt_free(&out[w]);
        bt_free(&dwte[w]);
        bt_free(&L[w]);
        bt_free(&mx[w]);
        bt_free(&sums[w]);
    }
    bt_free(&tok);
    bt_free(&wte);
    bt_free(&wpe);
    bt_free(&dout);
    bt_free(&dwpe);
    bt_free(&spare);
    bt_free(&logits);
    bt_free(&tg);
    bt_free(&losses);
    bt_free(&lse);
}

/* ------------------------------------------------------------------ mixture of experts */

/* The MoE layer's routing and token movement with bf16 tokens and router logits (p, gate,
 * dgate fp32; index tensors int32). References in double on the same inputs (the device's own
 * fp32 p, gate, dgate where an op takes them), per op:
 *   route: p = softmax of the bf16 logits (fp32: E exponentials and a sum, gamma(4 E + 16) p);
 *          idx, gate = ct_ref_moe_route's (the same top-K, exactly)
 *   dispatch: xs[pos] = x[token] bit for bit; pos = off[b, idx] + slot
 *   combine: y = fl_bf16(sum_k gate_k ys_k): gamma(2K + 1) sum |gate| |ys|
 *   gate backward (fp32): dot of C exact bf16 products: gamma(C) sum |dy| |ys|
 *   combine backward: fl_bf16(scale gate dy): two fp32 products, 2 u32 |ref|
 *   router backward: fl_bf16(p (dp - sum p dp)): gamma(E + K + 4) p (|dp| + sum p |dp|)
 *   dispatch backward: fl_bf16(dxr + unscale sum_k dxs): gamma(K + 2) (|dxr| + sum |dxs|) */
static void test_moe(int B, int T, int C, int E, int K, int cap) {
    int N = B * T, NK = N * K;
    bt lg = bt_make((size_t)N * E, 1, 3, 0), p = bt_make((size_t)N * E, 0, 0, 7.0);
    bt idx = bt_make(NK, 0, 0, 0), gate = bt_make(NK, 0, 0, 7.0);
    CT_ASSERT_OK(ct_moe_route_forward(g_dev, p.v, idx.v, gate.v, lg.v, N, E, K),
                 ct_device_errmsg(g_dev));
    double *rp = dalloc((size_t)N * E), *rg = dalloc(NK), *ep = dalloc((size_t)N * E);
    int *ri = calloc(NK, sizeof(int));
    ct_ref_moe_route(rp, ri, rg, lg.d, N, E, K);
    for (int i = 0; i < N * E; i++)
        ep[i] = gam(4 * E + 16) * rp[i];
    bt_read(&p);
    bt_read(&gate);
    bt_read(&idx);
    check("moe_route p (fp32, bf16 logits)", &p, rp, ep, 0);
    int *di = (int *)idx.h, same = 1;
    for (int i = 0; i < NK; i++)
        same &= di[i] == ri[i];
    CT_ASSERT_EQ_INT(same, 1);
    for (int i = 0; i < NK; i++)
        ep[i] = gam(4 * E + 16) * rg[i];
    check("moe_route gate (fp32)", &gate, rg, ep, 0);
    CT_ASSERT_OK(ct_buffer_write(idx.b, OFF * 4, di, (size_t)NK * 4), ct_device_errmsg(g_dev));
    /* capacity and offsets (int32 ops), then the bf16 movement */
    bt slot = bt_make(NK, 0, 0, 0), kept = bt_make((size_t)B * E, 0, 0, 0);
    bt routed = bt_make((size_t)B * E, 0, 0, 0), off = bt_make((size_t)B * E, 0, 0, 0);
    bt pos = bt_make(NK, 0, 0, 0);
    CT_ASSERT_OK(ct_moe_capacity(g_dev, slot.v, kept.v, routed.v, idx.v, B, T, E, K, cap),
                 ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_moe_offsets(g_dev, off.v, kept.v, B, E), ct_device_errmsg(g_dev));
    bt x = bt_make((size_t)N * C, 1, 1, 0), xs = bt_make((size_t)NK * C, 1, 0, 7.0);
    CT_ASSERT_OK(ct_moe_dispatch(g_dev, xs.v, pos.v, x.v, idx.v, slot.v, off.v, B, T, C, E, K),
                 ct_device_errmsg(g_dev));
    bt_read(&slot);
    bt_read(&off);
    bt_read(&pos);
    bt_read(&xs);
    bt_read(&routed);
    int *ds = (int *)slot.h, *doff = (int *)off.h, *dpos = (int *)pos.h, *drt = (int *)routed.h;
    int nkept = 0, posok = 1, moved = 0;
    for (int i = 0; i < NK; i++) {
        int n = i / K, b = n / T, q = ds[i] < 0 ? -1 : doff[b * E + di[i]] + ds[i];
        posok &= dpos[i] == q;
        if (q < 0) continue;
        nkept++;
        for (int c = 0; c < C; c++)
            moved += xs.h[(size_t)q * C + c] != x.h[(size_t)n * C + c];
    }
    CT_ASSERT_EQ_INT(posok, 1);
    CT_ASSERT_EQ_INT(moved, 0);
    CT_ASSERT(nkept > 0);
    /* combine forward and backward */
    bt ys = bt_make((size_t)NK * C, 1, 1, 0), y = bt_make((size_t)N * C, 1, 0, 7.0);
    bt dy = bt_make((size_t)N * C, 1, 1, 0), dys = bt_make((size_t)NK * C, 1, 0, 7.0);
    bt dgate = bt_make(NK, 0, 0, 7.0);
    float scale = 0.75f;
    CT_ASSERT_OK(ct_moe_combine_forward(g_dev, y.v, ys.v, gate.v, pos.v, N, C, K),
                 ct_device_errmsg(g_dev));
    CT_ASSERT_OK(
        ct_moe_combine_backward(g_dev, dys.v, dgate.v, dy.v, ys.v, gate.v, pos.v, N, C, K, scale),
        ct_device_errmsg(g_dev));
    double *ry = dalloc(y.n), *ey = dalloc(y.n), *rdg = dalloc(NK), *edg = dalloc(NK);
    double *rdys = dalloc(dys.n), *edys = dalloc(dys.n);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < K; k++) {
            int i = n * K + k, q = dpos[i];
            if (q < 0) continue;
            for (int c = 0; c < C; c++) {
                double g = gate.h[i], v = ys.d[(size_t)q * C + c], d = dy.d[(size_t)n * C + c];
                ry[(size_t)n * C + c] += g * v;
                ey[(size_t)n * C + c] += gam(2 * K + 1) * fabs(g * v);
                rdg[i] += d * v;
                edg[i] += gam(C) * fabs(d * v);
                rdys[(size_t)q * C + c] = scale * g * d;
                edys[(size_t)q * C + c] = 2 * U32 * fabs(scale * g * d);
            }
        }
    bt_read(&y);
    bt_read(&dgate);
    bt_read(&dys);
    check("moe_combine_forward (bf16)", &y, ry, ey, 0);
    check("moe_combine_backward dgate (fp32)", &dgate, rdg, edg, 0);
    bt dys_kept = dys;
    dys_kept.n = (size_t)nkept * C; /* the kept rows: every one written once */
    check("moe_combine_backward dys (bf16)", &dys_kept, rdys, edys, 0);
    /* router backward on the device's p and dgate */
    bt dl = bt_make((size_t)N * E, 1, 0, 7.0);
    float aux = 0.01f;
    CT_ASSERT_OK(
        ct_moe_router_backward(g_dev, dl.v, p.v, idx.v, pos.v, dgate.v, routed.v, aux, B, T, E, K),
        ct_device_errmsg(g_dev));
    double *rdl = dalloc(dl.n), *edl = dalloc(dl.n), *dp = dalloc(E);
    for (int n = 0; n < N; n++) {
        int b = n / T;
        double sdp = 0, sabs = 0;
        for (int e = 0; e < E; e++) {
            dp[e] = (double)aux * drt[b * E + e];
            for (int k = 0; k < K; k++)
                if (dpos[n * K + k] >= 0 && di[n * K + k] == e) dp[e] += dgate.h[n * K + k];
            sdp += p.h[n * E + e] * dp[e];
            sabs += p.h[n * E + e] * fabs(dp[e]);
        }
        for (int e = 0; e < E; e++) {
            rdl[n * E + e] = p.h[n * E + e] * (dp[e] - sdp);
            edl[n * E + e] = gam(E + K + 4) * p.h[n * E + e] * (fabs(dp[e]) + sabs);
        }
    }
    bt_read(&dl);
    check("moe_router_backward (bf16)", &dl, rdl, edl, 0);
    /* dispatch backward */
    bt dxr = bt_make((size_t)N * C, 1, 1, 0), dxs = bt_make((size_t)NK * C, 1, 1, 0);
    bt dx = bt_make((size_t)N * C, 1, 0, 7.0);
    float unscale = 1.5f;
    CT_ASSERT_OK(ct_moe_dispatch_backward(g_dev, dx.v, dxr.v, dxs.v, pos.v, N, C, K, unscale),
                 ct_device_errmsg(g_dev));
    double *rdx = dalloc(dx.n), *edx = dalloc(dx.n);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double sum = 0, sa = 0;
            for (int k = 0; k < K; k++) {
                int q = dpos[n * K + k];
                if (q >= 0) sum += dxs.d[(size_t)q * C + c], sa += fabs(dxs.d[(size_t)q * C + c]);
            }
            rdx[(size_t)n * C + c] = dxr.d[(size_t)n * C + c] + unscale * sum;
            edx[(size_t)n * C + c] = gam(K + 2) * (fabs(dxr.d[(size_t)n * C + c]) + unscale * sa);
        }
    bt_read(&dx);
    check("moe_dispatch_backward (bf16)", &dx, rdx, edx, 0);
    free(rp);
    free(rg);
    free(ep);
    free(ri);
    free(ry);
    free(ey);
    free(rdg);
    free(edg);
    free(rdys);
    free(edys);
    free(rdl);
    free(edl);
    free(dp);
    free(rdx);
    free(edx);
    bt_free(&lg);
    bt_free(&p);
    bt_free(&idx);
    bt_free(&gate);
    bt_free(&slot);
    bt_free(&kept);
    bt_free(&routed);
    bt_free(&off);
    bt_free(&pos);
    bt_free(&x);
    bt_free(&xs);
    bt_free(&ys);
    bt_free(&y);
    bt_free(&dy);
    bt_free(&dys);
    bt_free(&dgate);
    bt_free(&dl);
    bt_free(&dxr);
    bt_free(&dxs);
    bt_free(&dx);
}

/* ------------------------------------------------------------------ GEMM attention */

/* The GEMM path in bf16: P (att) and dS kept in bf16, the scores and dP in fp32 (ops_attention.c).
 * Forward: p off relatively by rel = 2 Es + 4 (T + 16) u32 (Es: the scores' fp32 error, as in the
 * fused test; the softmax's max, T exponentials and the sum), then stored: att within
 * u p + rel p. out = fl_bf16(sum_j fl_bf16(p_j) v_j): M = sum_j p_j |v_j| (u (1 + rel) + rel +
 * gamma(T + 1)) (the stored P's rounding is part of the design's error, counted here).
 * Backward, from the stored P (the reference is given the same bf16 P): dS_ij =
 * scale P_ij (dp_ij - dot_i) with S_ij = scale P_ij (|dp_ij| + |dot_i| + sum_d |dO_id| |v_jd| +
 * sum_j' P_ij' sum_d |dO_id| |v_j'd|), stored in bf16: off by (u + gamma(T + hs + 4)) S_ij; then
 * dq_i = sum_j dS_ij k_j and dk_j = sum_i dS_ij q_i carry that plus gamma(T + 1) of their own
 * sums; dv_j = sum_i P_ij dO_i: gamma(T + 1) sum P |dO|. */
static void test_attention_gemm(int B, int T, int C, int NH) {
    size_t BTC = (size_t)B * T * C, A = (size_t)B * NH * T * T;
    int hs = C / NH;
    double sc = 1.0 / sqrt((double)hs);
    bt inp = bt_make(3 * BTC, 1, 1.5, 0), out = bt_make(BTC, 1, 0, 7.0);
    bt qkvr = bt_make(3 * BTC, 1, 0, 7.0), att = bt_make(A, 1, 0, 7.0),
       vacc = bt_make(BTC, 1, 0, 7.0);
    CT_ASSERT_OK(ct_attention_forward(g_dev, out.v, qkvr.v, att.v, inp.v, vacc.v, B, T, C, NH),
                 ct_device_errmsg(g_dev));
    double *ro = dalloc(BTC), *ra = dalloc(A), *mo = dalloc(BTC), *ma = dalloc(A);
    ct_ref_attention_forward(ro, ra, inp.d, B, T, C, NH);
    double es = 0, mx = 0;
    for (size_t i = 0; i < inp.n; i++)
        mx = fmax(mx, fabs(inp.d[i]));
    es = gam(hs + 2) * hs * mx * mx * sc;
    double rel = 2 * es + 4 * (T + 16.0) * U32;
    for (size_t i = 0; i < A; i++)
        ma[i] = rel * ra[i];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++)
                for (int d = 0; d < hs; d++) {
                    double m = 0;
                    for (int j = 0; j <= t; j++)
                        m += ra[(((size_t)b * NH + h) * T + t) * T + j] *
                             fabs(inp.d[((size_t)b * T + j) * 3 * C + 2 * C + (size_t)h * hs + d]);
                    mo[((size_t)b * T + t) * C + (size_t)h * hs + d] =
                        m * (U * (1 + rel) + rel + gam(T + 1));
                }
    bt_read(&out);
    bt_read(&att);
    { /* the recomputation (ct_attention_probs into another tensor, its own scratch) gives the
       * forward's P bitwise */
        bt att2 = bt_make(A, 1, 0, 3.0), scr = bt_make(BTC, 1, 0, 5.0);
        CT_ASSERT_OK(ct_attention_probs(g_dev, att2.v, qkvr.v, scr.v, B, T, C, NH),
                     ct_device_errmsg(g_dev));
        bt_read(&att2);
        size_t diff = 0;
        for (size_t i = 0; i < A; i++)
            diff += att2.h[i] != att.h[i];
        CT_ASSERT_EQ_INT((long long)diff, 0);
        bt_free(&att2);
        bt_free(&scr);
    }
    check("attention_forward (gemm) att (bf16, exact zeros above the diagonal)", &att, ra, ma, 0);
    check("attention_forward (gemm) out (bf16)", &out, ro, mo, 0);
    /* the backward on the stored P */
    double *P = dalloc(A);
    for (size_t i = 0; i < A; i++)
        P[i] = att.h[i];
    bt dout = bt_make(BTC, 1, 1, 0), dinp = bt_make(3 * BTC, 1, 0, 7.0);
    bt dqkvr = bt_make(3 * BTC, 1, 0, 7.0), datt = bt_make(2 * A, 1, 0, 7.0);
    bt dvacc = bt_make(BTC, 1, 0, 7.0);
    CT_ASSERT_OK(ct_attention_backward(g_dev, dinp.v, dqkvr.v, datt.v, dvacc.v, dout.v, qkvr.v,
                                       att.v, B, T, C, NH),
                 ct_device_errmsg(g_dev));
    memset(dinp.d, 0, dinp.n * sizeof(double));
    ct_ref_attention_backward(dinp.d, dout.d, inp.d, P, B, T, C, NH);
    double *eb = dalloc(dinp.n), *S = dalloc((size_t)T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const double *p = P + (((size_t)b * NH + h) * T + i) * T;
                const double *dO = dout.d + ((size_t)b * T + i) * C + (size_t)h * hs;
                const double *q = inp.d + ((size_t)b * T + i) * 3 * C + (size_t)h * hs;
                double dot = 0, avg = 0;
                double *dps = dalloc((size_t)T), *dOv = dalloc((size_t)T);
                for (int j = 0; j <= i; j++) {
                    const double *v = inp.d + ((size_t)b * T + j) * 3 * C + 2 * C + (size_t)h * hs;
                    for (int d = 0; d < hs; d++)
                        dps[j] += dO[d] * v[d], dOv[j] += fabs(dO[d] * v[d]);
                    dot += p[j] * dps[j];
                    avg += p[j] * dOv[j];
                }
                for (int j = 0; j <= i; j++)
                    S[j] = sc * p[j] * (fabs(dps[j]) + fabs(dot) + dOv[j] + avg) *
                           (U + gam(T + hs + 4));
                double *edq = eb + ((size_t)b * T + i) * 3 * C + (size_t)h * hs;
                for (int j = 0; j <= i; j++) {
                    const double *k = inp.d + ((size_t)b * T + j) * 3 * C + C + (size_t)h * hs;
                    double *edk = eb + ((size_t)b * T + j) * 3 * C + C + (size_t)h * hs;
                    double *edv = edk + C;
                    double sabs = sc * p[j] * (fabs(dps[j] - dot));
                    for (int d = 0; d < hs; d++) {
                        edq[d] += S[j] * fabs(k[d]) + gam(T + 1) * sabs * fabs(k[d]);
                        edk[d] += S[j] * fabs(q[d]) + gam(T + 1) * sabs * fabs(q[d]);
                        edv[d] += gam(T + 1) * p[j] * fabs(dO[d]);
                    }
                }
                free(dps);
                free(dOv);
            }
    bt_read(&dinp);
    check("attention_backward (gemm) dinp (bf16)", &dinp, dinp.d, eb, 0);
    bt_read(&datt);
    size_t beyond = 0;
    for (size_t i = A; i < 2 * A; i++)
        beyond += datt.h[i] != 7.0f;
    CT_ASSERT_EQ_INT(beyond, 0);
    float *before = malloc(A * sizeof(float));
    memcpy(before, att.h, A * sizeof(float));
    bt_read(&att); /* att comes back as its transpose: the same bits */
    size_t moved = 0;
    for (size_t m = 0; m < (size_t)B * NH; m++)
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++)
                moved += att.h[(m * T + i) * T + j] != before[(m * T + j) * T + i];
    CT_ASSERT_EQ_INT(moved, 0);
    free(before);
    free(P);
    free(eb);
    free(S);
    free(ro);
    free(ra);
    free(mo);
    free(ma);
    bt_free(&inp);
    bt_free(&out);
    bt_free(&qkvr);
    bt_free(&att);
    bt_free(&vacc);
    bt_free(&dout);
    bt_free(&dinp);
    bt_free(&dqkvr);
    bt_free(&datt);
    bt_free(&dvacc);
}

/* ------------------------------------------------------------------ conversions */

/* Every bf16 bit pattern through a device op that is an exact copy in fp32 (x + -0 = x for every
 * x, +0 and -0 included): it must come back with the same bits; a NaN stays a NaN of its sign.
 * And the host pair the same way. Then ties: 1 + 2^-8 lies half-way between bf16 1 (0x3f80) and
 * its successor 0x3f81, so nearest-even gives 0x3f80; 1 + 3 * 2^-8 lies half-way between 0x3f81
 * and 0x3f82: 0x3f82; just above a tie rounds up. */
static void test_conversions(void) {
    size_t n = 65536;
    bt a = bt_make(n, 1, 0, 0), z = bt_make(n, 1, 0, -0.0), o = bt_make(n, 1, 0, 7.0);
    uint16_t *u = malloc(n * 2), *back = malloc(n * 2);
    for (size_t i = 0; i < n; i++)
        u[i] = (uint16_t)i;
    CT_ASSERT_OK(ct_buffer_write(a.b, OFF * 2, u, n * 2), ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_residual_forward(g_dev, o.v, a.v, z.v, n), ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_device_finish(g_dev), ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_buffer_read(o.b, OFF * 2, back, n * 2), ct_device_errmsg(g_dev));
    size_t bad = 0, host_bad = 0, nans = 0;
    for (size_t i = 0; i < n; i++) {
        int isnan_ = (u[i] & 0x7fff) > 0x7f80;
        nans += isnan_;
        if (isnan_)
            bad += !((back[i] & 0x7fff) > 0x7f80 && (back[i] & 0x8000) == (u[i] & 0x8000));
        else
            bad += back[i] != u[i];
        uint16_t h = ct_bf16_from_f32(ct_bf16_to_f32(u[i]));
        host_bad +=
            isnan_ ? !((h & 0x7fff) > 0x7f80 && (h & 0x8000) == (u[i] & 0x8000)) : h != u[i];
    }
    CT_ASSERT_EQ_INT((long long)nans, 2 * 127);
    CT_ASSERT_EQ_INT((long long)bad, 0);
    CT_ASSERT_EQ_INT((long long)host_bad, 0);
    /* ties and near-ties, as sums the device rounds: (a, b, expected bits of a + b) */
    static const struct {
        uint16_t a, b, want;
    } ties[] = {
        {0x3f80, 0x3b80, 0x3f80}, /* 1 + 2^-8: tie, down to even 0x3f80 */
        {0x3f81, 0x3b80, 0x3f82}, /* (1 + 2^-7) + 2^-8: tie, up to even 0x3f82 */
        {0xbf80, 0xbb80, 0xbf80}, /* negative tie: magnitude to even */
        {0x3f80, 0x3b81, 0x3f81}, /* just above the tie: up */
        {0x3f80, 0x3b7f, 0x3f80}, /* just below: down */
        {0x7f7f, 0x7b80, 0x7f80}, /* bf16's largest finite + half an ulp: tie to even = inf */
    };
    size_t nt = sizeof ties / sizeof ties[0];
    bt ta = bt_make(nt, 1, 0, 0), tb = bt_make(nt, 1, 0, 0), to = bt_make(nt, 1, 0, 7.0);
    uint16_t ua[8], ub[8], uo[8];
    for (size_t i = 0; i < nt; i++)
        ua[i] = ties[i].a, ub[i] = ties[i].b;
    CT_ASSERT_OK(ct_buffer_write(ta.b, OFF * 2, ua, nt * 2), ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_buffer_write(tb.b, OFF * 2, ub, nt * 2), ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_residual_forward(g_dev, to.v, ta.v, tb.v, nt), ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_device_finish(g_dev), ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_buffer_read(to.b, OFF * 2, uo, nt * 2), ct_device_errmsg(g_dev));
    for (size_t i = 0; i < nt; i++) {
        /* the sum is exact in fp32 here; the host's rounding of it must agree */
        float s = ct_bf16_to_f32(ua[i]) + ct_bf16_to_f32(ub[i]);
        CT_ASSERT_EQ_INT(uo[i], ties[i].want);
        CT_ASSERT_EQ_INT(ct_bf16_from_f32(s), ties[i].want);
    }
    free(u);
    free(back);
    bt_free(&a);
    bt_free(&z);
    bt_free(&o);
    bt_free(&ta);
    bt_free(&tb);
    bt_free(&to);
}

/* ------------------------------------------------------------------ refusals */

static void test_refusals(void) {
    bt x = bt_make(64, 0, 1, 0), h = bt_make(64, 1, 1, 0);
    /* an activation fp32 beside bf16 ones */
    CT_ASSERT_EQ_INT(ct_gelu_forward(g_dev, h.v, x.v, 8), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "ct_gelu_forward: inp is fp32 but out is bf16");
    CT_ASSERT_EQ_INT(ct_matmul_forward(g_dev, h.v, h.v, x.v, ct_view_none(), 1, 2, 2, 2),
                     CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "weight is fp32");
    /* the always-fp32 classes given bf16 */
    CT_ASSERT_EQ_INT(ct_layernorm_forward(g_dev, h.v, h.v, x.v, h.v, h.v, h.v, 1, 2, 4),
                     CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "ct_layernorm_forward: mean is bf16");
    CT_ASSERT_EQ_INT(ct_matmul_backward(g_dev, h.v, h.v, ct_view_none(), h.v, h.v, h.v, 1, 2, 2, 2),
                     CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "dweight is bf16");
    CT_ASSERT_EQ_INT(ct_crossentropy_forward(g_dev, x.v, h.v, h.v, x.v, 1, 2, 3, 4), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "lse is bf16");
    CT_ASSERT_EQ_INT(ct_mean_forward(g_dev, x.v, h.v, 4), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "inp is bf16");
    CT_ASSERT_EQ_INT(ct_adamw_update(g_dev, h.v, x.v, x.v, x.v, ct_view_none(), 0, 8, 1e-3f, 0.9f,
                                     0.95f, 1e-8f, 0, 1),
                     CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "params is bf16");
    /* bf16 probabilities need their scratch */
    CT_ASSERT_EQ_INT(ct_attention_probs(g_dev, h.v, h.v, ct_view_none(), 1, 2, 4, 2), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "bf16 needs a bf16 scratch");
    CT_ASSERT_EQ_INT(ct_moe_prob_mean(g_dev, x.v, h.v, 1, 2, 4), CT_ERR_ARG);
    /* an unknown storage value */
    ct_view odd = h.v;
    odd.store = (ct_store)7;
    CT_ASSERT_EQ_INT(ct_gelu_forward(g_dev, odd, odd, 8), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "unknown storage");
    bt_free(&x);
    bt_free(&h);
}

/* The fused attention's mma variant through the portable stand-ins (CT_ATTN_MMA_EMULATED) and,
 * where the mma GEMM path's rule and probe pass (an NVIDIA sm_80+ GPU), with the instructions
 * (CT_ATTN_MMA_PTX): the head sizes it has shapes for, T not a multiple of its blocks (several
 * query blocks and key steps: 16 W own rows, BKV rows a step; W, BKV = 4, 64 at 32 and 64, 2, 32
 * at 128), T = 1, B, NH > 1. */
static void test_attention_mma_variant(int variant) {
    const ct_attn_cfg mma = {{16, 16, 64, 1}, {16, 16, 64, 1}, variant};
    test_attention_fused(2, 70, 64, 2, &mma);   /* hs 32: 2 query blocks of 64, 2 key steps */
    test_attention_fused(2, 67, 192, 3, &mma);  /* hs 64 */
    test_attention_fused(1, 45, 256, 2, &mma);  /* hs 128: 2 blocks of 32 */
    test_attention_fused(2, 1, 64, 2, &mma);    /* T 1: one real row of 64 */
    test_attention_fused(3, 32, 128, 2, &mma);  /* T a multiple of 16, not of the block (64) */
}

static void test_attention_mma(void) {
    const ct_attn_cfg mma = {{16, 16, 64, 1}, {16, 16, 64, 1}, CT_ATTN_MMA_EMULATED};
    test_attention_mma_variant(CT_ATTN_MMA_EMULATED);
    if (ct_gemm_path_check(g_dev, CT_GEMM_MMA) == CT_OK) {
        printf("mma attention: the instructions (the mma path runs here)\n");
        test_attention_mma_variant(CT_ATTN_MMA_PTX);
    } else {
        printf("mma attention: emulated only (%s)\n", ct_device_errmsg(g_dev));
    }
    /* a head size it has no shape for is refused by name (the host falls back before this) */
    bt inp = bt_make(3 * 2 * 5 * 40, 1, 1, 0), out = bt_make(2 * 5 * 40, 1, 0, 0);
    bt lse = bt_make(2 * 2 * 5, 0, 0, 0);
    ct_status st = ct_attention_fused_forward(g_dev, &mma, out.v, lse.v, inp.v, 2, 5, 40, 2);
    CT_ASSERT_EQ_INT(st, CT_ERR_ARG);
    CT_ASSERT(strstr(ct_device_errmsg(g_dev), "head size 20") != NULL);
    bt_free(&inp);
    bt_free(&out);
    bt_free(&lse);
}

int main(int argc, char **argv) {
    ct_test_devices ds;
    int only_mma = argc > 1 && !strcmp(argv[1], "mma");
    g_dev = ct_test_device_open(&ds, NULL);
    if (!g_dev) return ct_test_end("test_engine_ops_bf16");
    printf("device: %s\n", ds.list[ds.pick[0]].name);
    if (only_mma) {
        test_attention_mma();
        ct_device_free(g_dev);
        ct_test_devices_free(&ds);
        return ct_test_end("test_engine_ops_bf16 mma");
    }
    CT_REQUIRE_OK_OR(ct_gemm_path_check(g_dev, CT_GEMM_PORTABLE), ct_device_errmsg(g_dev),
                     ct_test_end("test_engine_ops_bf16"));
    CT_REQUIRE_OK_OR(ct_ops_warmup_store(g_dev, CT_STORE_BF16), ct_device_errmsg(g_dev),
                     ct_test_end("test_engine_ops_bf16"));
    test_conversions();
    test_refusals();
    test_encoder(3, 7, 20, 37, 40, 9);
    test_encoder(1, 1, 3, 5, 5, 1);
    test_layernorm(3, 7, 20);
    test_layernorm(2, 5, 33);
    test_matmul(3, 7, 20, 60, 1);
    test_matmul(3, 7, 20, 37, 0);
    test_matmul(2, 3, 65, 13, 1);
    test_matmul(3, 70, 130, 9, 1); /* K = 210 rows in dweight: several of the kernel's K steps */
    test_elementwise(3 * 7 * 20, 20);
    test_elementwise(1001, 13);
    test_crossentropy(3, 7, 37, 40);
    test_crossentropy(2, 5, 11, 11);
    test_attention_fused(3, 7, 20, 4, NULL);
    test_attention_fused(2, 33, 24, 3, NULL);
    test_attention_fused(1, 70, 16, 2, NULL);
    /* vectors of 4 lanes per work-item (the CPU shapes): the lane-by-lane bf16 stores */
    const ct_attn_cfg vec4 = {{16, 16, 16, 4}, {16, 16, 16, 4}, 0};
    test_attention_fused(2, 37, 16, 2, &vec4);
    test_vocab_parallel(3, 7, 20, 37, 40, 24); /* the second half holds 13 real columns + padding */
    test_vocab_parallel(2, 5, 8, 11, 16, 12);  /* the second half is all padding */
    test_moe(3, 7, 20, 5, 2, 4);               /* capacity 4 of 14 choices per row: some dropped */
    test_moe(2, 5, 8, 3, 1, 5);
    test_attention_gemm(3, 7, 20, 4);
    test_attention_gemm(1, 33, 24, 3);
    test_attention_gemm(1, 130, 16, 2); /* several row blocks of scores in the scratch */
    /* the other row-reduction kernels (a work-group per row on GPUs, a work-item per row on
     * CPUs): both against the reference on every device, rows longer than a work-group */
    const ct_device_info *info = &ds.list[ds.pick[0]];
    int first = ct_device_row_groups(g_dev);
    ct_mem_stats ms;
    ct_device_mem_stats(g_dev, &ms);
    CT_ASSERT_EQ_INT(ms.live_buffers, 0);
    ct_device_free(g_dev);
    ct_device_opts o = ct_device_opts_default();
    ct_err err = {0};
    o.row_groups = !first;
    g_dev = NULL;
    CT_REQUIRE_OK_OR(ct_device_open(&g_dev, info, &o, &err), err.msg,
                     ct_test_end("test_engine_ops_bf16"));
    CT_REQUIRE_OK_OR(ct_gemm_path_check(g_dev, CT_GEMM_PORTABLE), ct_device_errmsg(g_dev),
                     ct_test_end("test_engine_ops_bf16"));
    printf("row reductions: %s, then %s\n", first ? "work-group per row" : "work-item per row",
           first ? "work-item per row" : "work-group per row");
    test_layernorm(3, 7, 20);
    test_layernorm(2, 3, 1000);
    test_crossentropy(3, 7, 37, 40);
    test_crossentropy(2, 3, 3000, 3072);
    test_vocab_parallel(2, 3, 8, 2900, 3072, 1536);
    ct_device_mem_stats(g_dev, &ms);
    CT_ASSERT_EQ_INT(ms.live_buffers, 0);
    ct_device_free(g_dev);
    ct_test_devices_free(&ds);
    return ct_test_end("test_engine_ops_bf16");
}
