/* test_engine_ops.c - every device op of the engine, forward and backward, against its plain-C
 * double-precision reference (tests/ct_ref.c) on awkward shapes (B=3, T=7, C=20, NH=4, V=37,
 * Vp=40, ...), with tensors placed at odd offsets inside their buffers, "=" outputs pre-filled
 * with garbage (they must be overwritten) and "+=" outputs pre-filled with random values (they
 * must be accumulated into). Also: bad shapes give a clear error, not a crash. The Llama family's
 * ops (RMSNorm, rotary embedding, SwiGLU) likewise, their references first checked against central
 * finite differences and the rotary one against Hugging Face's rotate_half form; the token
 * embedding without positions, and grouped-query attention's kv-head repetition and its adjoint. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_cl.h"
#include "ct_engine_ops.h"
#include "ct_engine_ops_llama.h"
#include "ct_ref.h"
#include "ct_test.h"
#include "ct_test_dev.h"

#define OFF 5 /* every tensor starts 5 floats into its buffer */

static ct_device *g_dev;
static uint64_t g_rng = 0x1234567ull;

static double urand(void) { /* uniform [-1, 1) */
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_rng >> 11) * 0x1.0p-52 - 1.0;
}

/* A device tensor with its host mirror. */
typedef struct dt {
    ct_buffer *b;
    ct_view v;
    size_t n;
    float *h;  /* host values (what was uploaded / what was read back) */
    double *d; /* the same as doubles, for the reference */
} dt;

static dt dt_make(size_t n, double scale, double fill_garbage) {
    dt t = {0};
    t.n = n;
    t.h = calloc(n ? n : 1, sizeof(float));
    t.d = calloc(n ? n : 1, sizeof(double));
    for (size_t i = 0; i < n; i++) {
        t.h[i] = scale != 0 ? (float)(scale * urand()) : (float)fill_garbage;
        t.d[i] = t.h[i];
    }
    CT_ASSERT_OK(ct_buffer_alloc(g_dev, CT_MEM_WORKSPACE, "test", (n + OFF + 3) * sizeof(float), &t.b),
                 ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_buffer_write(t.b, OFF * sizeof(float), t.h, n * sizeof(float)),
                 ct_device_errmsg(g_dev));
    t.v = ct_view_of(ct_buffer_mem(t.b), OFF);
    return t;
}

static dt dt_ints(size_t n, int lo, int hi) {
    dt t = dt_make(n, 0, 0);
    int *ids = (int *)t.h;
    for (size_t i = 0; i < n; i++) ids[i] = lo + (int)((urand() + 1.0) * 0.5 * (hi - lo)) % (hi - lo);
    CT_ASSERT_OK(ct_buffer_write(t.b, OFF * sizeof(float), ids, n * sizeof(int)),
                 ct_device_errmsg(g_dev));
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
    free(t->d);
    memset(t, 0, sizeof *t);
}

/* Compare the device result t->h to the reference r (doubles). */
static int close_to(const char *what, const dt *t, const double *r, double atol, double rtol) {
    float *rf = malloc(t->n * sizeof(float));
    for (size_t i = 0; i < t->n; i++) rf[i] = (float)r[i];
    size_t w = 0;
    double e = ct_test_max_err(t->h, rf, t->n, atol, rtol, &w);
    ct_test_checks++;
    int ok = e <= 1.0;
    if (!ok)
        CT__FAIL("%s: element %zu is %.9g, reference %.9g (err %.3g x tolerance)", what, w,
                 (double)t->h[w], r[w], e);
    free(rf);
    return ok;
}

#define ATOL 2e-5
#define RTOL 2e-4

static void test_encoder(int B, int T, int C, int V, int Vp, int maxT) {
    dt inp = dt_ints((size_t)B * T, 0, V), wte = dt_make((size_t)Vp * C, 1, 0);
    dt wpe = dt_make((size_t)maxT * C, 1, 0), out = dt_make((size_t)B * T * C, 0, 7.0);
    CT_ASSERT_OK(ct_encoder_forward(g_dev, out.v, inp.v, wte.v, wpe.v, B, T, C, Vp),
                 ct_device_errmsg(g_dev));
    dt_read(&out);
    double *r = calloc(out.n, sizeof(double));
    ct_ref_encoder_forward(r, (int *)inp.h, wte.d, wpe.d, B, T, C);
    close_to("encoder_forward", &out, r, ATOL, RTOL);
    /* backward: += into random grads */
    dt dout = dt_make(out.n, 1, 0), dwte = dt_make(wte.n, 1, 0), dwpe = dt_make(wpe.n, 1, 0);
    CT_ASSERT_OK(ct_encoder_backward(g_dev, dwte.v, dwpe.v, dout.v, inp.v, B, T, C, Vp),
                 ct_device_errmsg(g_dev));
    ct_ref_encoder_backward(dwte.d, dwpe.d, dout.d, (int *)inp.h, B, T, C);
    dt_read(&dwte);
    dt_read(&dwpe);
    close_to("encoder_backward dwte", &dwte, dwte.d, ATOL, RTOL);
    close_to("encoder_backward dwpe", &dwpe, dwpe.d, ATOL, RTOL);
    free(r);
    dt_free(&inp); dt_free(&wte); dt_free(&wpe); dt_free(&out);
    dt_free(&dout); dt_free(&dwte); dt_free(&dwpe);
}

static void test_layernorm(int B, int T, int C) {
    size_t N = (size_t)B * T, n = N * C;
    dt inp = dt_make(n, 2, 0), w = dt_make(C, 1, 0), b = dt_make(C, 1, 0);
    /* a non-zero mean per row, as a residual stream has */
    for (size_t i = 0; i < n; i++) {
        inp.h[i] += (float)(i / C % 5) - 2.0f;
        inp.d[i] = inp.h[i];
    }
    ct_buffer_write(inp.b, OFF * sizeof(float), inp.h, n * sizeof(float));
    dt out = dt_make(n, 0, 7.0), mean = dt_make(N, 0, 7.0), rstd = dt_make(N, 0, 7.0);
    CT_ASSERT_OK(ct_layernorm_forward(g_dev, out.v, mean.v, rstd.v, inp.v, w.v, b.v, B, T, C),
                 ct_device_errmsg(g_dev));
    double *ro = calloc(n, sizeof(double)), *rm = calloc(N, sizeof(double)),
           *rr = calloc(N, sizeof(double));
    ct_ref_layernorm_forward(ro, rm, rr, inp.d, w.d, b.d, B, T, C);
    dt_read(&out); dt_read(&mean); dt_read(&rstd);
    close_to("layernorm_forward out", &out, ro, ATOL, RTOL);
    close_to("layernorm_forward mean", &mean, rm, ATOL, RTOL);
    close_to("layernorm_forward rstd", &rstd, rr, ATOL, RTOL);
    for (int acc = 0; acc <= 1; acc++) {
        dt dout = dt_make(n, 1, 0), dinp = acc ? dt_make(n, 1, 0) : dt_make(n, 0, 7.0);
        dt dw = dt_make(C, 1, 0), db = dt_make(C, 1, 0);
        if (!acc) memset(dinp.d, 0, n * sizeof(double));
        CT_ASSERT_OK(ct_layernorm_backward(g_dev, dinp.v, dw.v, db.v, dout.v, inp.v, w.v, mean.v,
                                           rstd.v, B, T, C, acc),
                     ct_device_errmsg(g_dev));
        ct_ref_layernorm_backward(dinp.d, dw.d, db.d, dout.d, inp.d, w.d, rm, rr, B, T, C);
        dt_read(&dinp); dt_read(&dw); dt_read(&db);
        close_to(acc ? "layernorm_backward dinp (+=)" : "layernorm_backward dinp (=)", &dinp,
                 dinp.d, 1e-4, RTOL);
        close_to("layernorm_backward dweight", &dw, dw.d, 1e-4, RTOL);
        close_to("layernorm_backward dbias", &db, db.d, 1e-4, RTOL);
        dt_free(&dout); dt_free(&dinp); dt_free(&dw); dt_free(&db);
    }
    free(ro); free(rm); free(rr);
    dt_free(&inp); dt_free(&w); dt_free(&b); dt_free(&out); dt_free(&mean); dt_free(&rstd);
}

static void test_matmul(int B, int T, int C, int OC, int with_bias) {
    size_t N = (size_t)B * T;
    dt inp = dt_make(N * C, 1, 0), w = dt_make((size_t)OC * C, 1, 0), b = dt_make(OC, 1, 0);
    dt out = dt_make(N * OC, 0, 7.0);
    ct_view bias = with_bias ? b.v : ct_view_none();
    CT_ASSERT_OK(ct_matmul_forward(g_dev, out.v, inp.v, w.v, bias, B, T, C, OC),
                 ct_device_errmsg(g_dev));
    double *r = calloc(out.n, sizeof(double));
    ct_ref_matmul_forward(r, inp.d, w.d, with_bias ? b.d : NULL, B, T, C, OC);
    dt_read(&out);
    close_to("matmul_forward", &out, r, 1e-4, RTOL);
    dt dout = dt_make(N * OC, 1, 0), dinp = dt_make(N * C, 0, 7.0);
    dt dw = dt_make((size_t)OC * C, 1, 0), db = dt_make(OC, 1, 0);
    memset(dinp.d, 0, dinp.n * sizeof(double));
    CT_ASSERT_OK(ct_matmul_backward(g_dev, dinp.v, dw.v, with_bias ? db.v : ct_view_none(), dout.v,
                                    inp.v, w.v, B, T, C, OC),
                 ct_device_errmsg(g_dev));
    ct_ref_matmul_backward(dinp.d, dw.d, with_bias ? db.d : NULL, dout.d, inp.d, w.d, B, T, C, OC);
    dt_read(&dinp); dt_read(&dw); dt_read(&db);
    close_to("matmul_backward dinp", &dinp, dinp.d, 1e-4, RTOL);
    close_to("matmul_backward dweight", &dw, dw.d, 1e-4, RTOL);
    close_to(with_bias ? "matmul_backward dbias" : "matmul_backward dbias untouched", &db, db.d,
             1e-4, RTOL);
    free(r);
    dt_free(&inp); dt_free(&w); dt_free(&b); dt_free(&out);
    dt_free(&dout); dt_free(&dinp); dt_free(&dw); dt_free(&db);
}

static void test_attention(int B, int T, int C, int NH) {
    size_t BTC = (size_t)B * T * C, A = (size_t)B * NH * T * T;
    dt inp = dt_make(3 * BTC, 1.5, 0), out = dt_make(BTC, 0, 7.0);
    dt qkvr = dt_make(3 * BTC, 0, 7.0), att = dt_make(A, 0, 7.0), vacc = dt_make(BTC, 0, 7.0);
    CT_ASSERT_OK(ct_attention_forward(g_dev, out.v, qkvr.v, att.v, inp.v, vacc.v, B, T, C, NH),
                 ct_device_errmsg(g_dev));
    double *ro = calloc(BTC, sizeof(double)), *ra = calloc(A, sizeof(double));
    ct_ref_attention_forward(ro, ra, inp.d, B, T, C, NH);
    dt_read(&out); dt_read(&att);
    close_to("attention_forward out", &out, ro, ATOL, RTOL);
    close_to("attention_forward att (incl. exact zeros above the diagonal)", &att, ra, 1e-6, RTOL);
    dt dout = dt_make(BTC, 1, 0), dinp = dt_make(3 * BTC, 0, 7.0);
    /* datt: the backward's scratch is one (B,NH,T,T); a second one after it, filled with 7,
     * must come back untouched */
    dt dqkvr = dt_make(3 * BTC, 0, 7.0), datt = dt_make(2 * A, 0, 7.0), dvacc = dt_make(BTC, 0, 7.0);
    memset(dinp.d, 0, dinp.n * sizeof(double));
    CT_ASSERT_OK(ct_attention_backward(g_dev, dinp.v, dqkvr.v, datt.v, dvacc.v, dout.v, qkvr.v,
                                       att.v, B, T, C, NH),
                 ct_device_errmsg(g_dev));
    ct_ref_attention_backward(dinp.d, dout.d, inp.d, ra, B, T, C, NH);
    dt_read(&dinp);
    close_to("attention_backward dinp", &dinp, dinp.d, 1e-4, RTOL);
    dt_read(&datt);
    size_t beyond = 0;
    for (size_t i = A; i < 2 * A; i++) beyond += datt.h[i] != 7.0f;
    CT_ASSERT(beyond == 0);
    /* att comes back as its transpose (the backward transposes it in place): the same bits */
    float *before = malloc(A * sizeof(float));
    memcpy(before, att.h, A * sizeof(float));
    dt_read(&att);
    size_t moved = 0;
    for (size_t m = 0; m < (size_t)B * NH; m++)
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++)
                moved += att.h[(m * T + i) * T + j] != before[(m * T + j) * T + i];
    CT_ASSERT(moved == 0);
    free(before);
    free(ro); free(ra);
    dt_free(&inp); dt_free(&out); dt_free(&qkvr); dt_free(&att); dt_free(&vacc);
    dt_free(&dout); dt_free(&dinp); dt_free(&dqkvr); dt_free(&datt); dt_free(&dvacc);
}

static void test_elementwise(size_t N, int OC) {
    dt x = dt_make(N, 4, 0), y = dt_make(N, 0, 7.0);
    CT_ASSERT_OK(ct_gelu_forward(g_dev, y.v, x.v, N), ct_device_errmsg(g_dev));
    double *r = calloc(N, sizeof(double));
    ct_ref_gelu_forward(r, x.d, N);
    dt_read(&y);
    close_to("gelu_forward", &y, r, ATOL, RTOL);
    dt dout = dt_make(N, 1, 0), dinp = dt_make(N, 0, 7.0);
    memset(dinp.d, 0, N * sizeof(double));
    CT_ASSERT_OK(ct_gelu_backward(g_dev, dinp.v, x.v, dout.v, N), ct_device_errmsg(g_dev));
    ct_ref_gelu_backward(dinp.d, x.d, dout.d, N);
    dt_read(&dinp);
    close_to("gelu_backward", &dinp, dinp.d, ATOL, RTOL);
    /* residual */
    dt a = dt_make(N, 1, 0), b = dt_make(N, 1, 0), o = dt_make(N, 0, 7.0);
    CT_ASSERT_OK(ct_residual_forward(g_dev, o.v, a.v, b.v, N), ct_device_errmsg(g_dev));
    ct_ref_residual_forward(r, a.d, b.d, N);
    dt_read(&o);
    close_to("residual_forward", &o, r, ATOL, RTOL);
    CT_ASSERT_OK(ct_residual_backward(g_dev, a.v, b.v, dout.v, N), ct_device_errmsg(g_dev));
    ct_ref_residual_backward(a.d, b.d, dout.d, N);
    dt_read(&a); dt_read(&b);
    close_to("residual_backward da", &a, a.d, ATOL, RTOL);
    close_to("residual_backward db", &b, b.d, ATOL, RTOL);
    /* bias over (N/OC rows, OC) */
    size_t rows = N / OC;
    dt bias = dt_make(OC, 1, 0), m = dt_make(rows * OC, 1, 0), dbias = dt_make(OC, 1, 0);
    CT_ASSERT_OK(ct_bias_forward(g_dev, m.v, bias.v, rows, OC), ct_device_errmsg(g_dev));
    for (size_t i = 0; i < rows * OC; i++) m.d[i] += bias.d[i % OC];
    dt_read(&m);
    close_to("bias_forward", &m, m.d, ATOL, RTOL);
    CT_ASSERT_OK(ct_bias_backward(g_dev, dbias.v, dout.v, rows, OC), ct_device_errmsg(g_dev));
    for (size_t i = 0; i < rows * OC; i++) dbias.d[i % OC] += dout.d[i];
    dt_read(&dbias);
    close_to("bias_backward", &dbias, dbias.d, 1e-4, RTOL);
    free(r);
    dt_free(&x); dt_free(&y); dt_free(&dout); dt_free(&dinp); dt_free(&a); dt_free(&b);
    dt_free(&o); dt_free(&bias); dt_free(&m); dt_free(&dbias);
}

static void test_crossentropy(int B, int T, int V, int Vp) {
    size_t N = (size_t)B * T;
    dt logits = dt_make(N * Vp, 5, 0), tg = dt_ints(N, 0, V);
    /* the padding holds big values: they must not leak into the softmax */
    for (size_t r = 0; r < N; r++)
        for (int v = V; v < Vp; v++) logits.h[r * Vp + v] = 50.0f, logits.d[r * Vp + v] = 50.0;
    ct_buffer_write(logits.b, OFF * sizeof(float), logits.h, logits.n * sizeof(float));
    dt losses = dt_make(N, 0, 7.0), lse = dt_make(N, 0, 7.0), mean = dt_make(1, 0, 7.0);
    CT_ASSERT_OK(ct_crossentropy_forward(g_dev, losses.v, lse.v, logits.v, tg.v, B, T, V, Vp),
                 ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_mean_forward(g_dev, mean.v, losses.v, N), ct_device_errmsg(g_dev));
    double *rl = calloc(N, sizeof(double)), rmean = 0;
    ct_ref_crossentropy_forward(rl, logits.d, (int *)tg.h, B, T, V, Vp);
    for (size_t i = 0; i < N; i++) rmean += rl[i] / (double)N;
    dt_read(&losses); dt_read(&mean);
    close_to("crossentropy_forward losses", &losses, rl, ATOL, RTOL);
    close_to("mean_forward", &mean, &rmean, ATOL, RTOL);
    double dloss = 1.0 / (double)N;
    double *rd = calloc(logits.n, sizeof(double));
    ct_ref_crossentropy_backward(rd, logits.d, (int *)tg.h, dloss, B, T, V, Vp);
    /* out of place, then in place */
    dt dl = dt_make(logits.n, 0, 7.0);
    CT_ASSERT_OK(ct_crossentropy_backward(g_dev, dl.v, logits.v, lse.v, tg.v, (float)dloss, B, T,
                                          V, Vp),
                 ct_device_errmsg(g_dev));
    dt_read(&dl);
    close_to("crossentropy_backward", &dl, rd, 1e-7, RTOL);
    CT_ASSERT_OK(ct_crossentropy_backward(g_dev, logits.v, logits.v, lse.v, tg.v, (float)dloss, B,
                                          T, V, Vp),
                 ct_device_errmsg(g_dev));
    dt_read(&logits);
    close_to("crossentropy_backward in place", &logits, rd, 1e-7, RTOL);
    free(rl); free(rd);
    dt_free(&logits); dt_free(&tg); dt_free(&losses); dt_free(&lse); dt_free(&mean); dt_free(&dl);
}

static void test_optim(size_t n) {
    dt g = dt_make(n, 0.01, 0), nrm = dt_make(1, 0, 7.0);
    ct_buffer *partials = NULL;
    CT_ASSERT_OK(ct_buffer_alloc(g_dev, CT_MEM_WORKSPACE, "partials",
                                 CT_NORM_PARTIALS * sizeof(float), &partials),
                 ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_global_norm_forward(g_dev, nrm.v, ct_view_of(ct_buffer_mem(partials), 0), g.v, n),
                 ct_device_errmsg(g_dev));
    double rn = ct_ref_global_norm(g.d, n);
    dt_read(&nrm);
    close_to("global_norm", &nrm, &rn, 1e-7, 1e-5);
    /* AdamW, three steps, with clipping active (clip below the norm) and weight decay */
    dt p = dt_make(n, 1, 0), m = dt_make(n, 0, 0.0), v = dt_make(n, 0, 0.0);
    double clip = rn * 0.5;
    for (int t = 1; t <= 3; t++) {
        CT_ASSERT_OK(ct_adamw_update(g_dev, p.v, g.v, m.v, v.v, nrm.v, (float)clip, n, 1e-2f, 0.9f,
                                     0.95f, 1e-8f, 0.1f, t),
                     ct_device_errmsg(g_dev));
        ct_ref_adamw(p.d, g.d, m.d, v.d, n, clip / (rn + 1e-6), 1e-2, 0.9, 0.95, 1e-8, 0.1, t);
    }
    dt_read(&p); dt_read(&m); dt_read(&v);
    close_to("adamw params", &p, p.d, 1e-6, 1e-5);
    close_to("adamw m", &m, m.d, 1e-9, 1e-4);
    close_to("adamw v", &v, v.d, 1e-12, 1e-4);
    /* no clip, no norm buffer: plain AdamW */
    dt p2 = dt_make(n, 1, 0), m2 = dt_make(n, 0, 0.0), v2 = dt_make(n, 0, 0.0);
    CT_ASSERT_OK(ct_adamw_update(g_dev, p2.v, g.v, m2.v, v2.v, ct_view_none(), 0.0f, n, 1e-3f, 0.9f,
                                 0.999f, 1e-8f, 0.0f, 1),
                 ct_device_errmsg(g_dev));
    ct_ref_adamw(p2.d, g.d, m2.d, v2.d, n, 1.0, 1e-3, 0.9, 0.999, 1e-8, 0.0, 1);
    dt_read(&p2);
    close_to("adamw params (no clip, no decay)", &p2, p2.d, 1e-6, 1e-5);
    /* scale by clip */
    CT_ASSERT_OK(ct_scale_by_clip(g_dev, g.v, nrm.v, (float)clip, n), ct_device_errmsg(g_dev));
    for (size_t i = 0; i < n; i++) g.d[i] *= clip / (rn + 1e-6);
    dt_read(&g);
    close_to("scale_by_clip", &g, g.d, 1e-9, 1e-5);
    ct_buffer_free(partials);
    dt_free(&g); dt_free(&nrm); dt_free(&p); dt_free(&m); dt_free(&v);
    dt_free(&p2); dt_free(&m2); dt_free(&v2);
}

static void test_bad_input(void) {
    dt x = dt_make(16, 1, 0);
    CT_ASSERT_EQ_INT(ct_matmul_forward(g_dev, x.v, x.v, x.v, ct_view_none(), 0, 2, 2, 2), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "ct_matmul_forward");
    CT_ASSERT_EQ_INT(ct_attention_forward(g_dev, x.v, x.v, x.v, x.v, x.v, 1, 2, 6, 4), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "NH dividing C");
    CT_ASSERT_EQ_INT(ct_crossentropy_forward(g_dev, x.v, x.v, x.v, x.v, 1, 1, 9, 8), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "V <= Vp");
    CT_ASSERT_EQ_INT(ct_adamw_update(g_dev, x.v, x.v, x.v, x.v, ct_view_none(), 0, 16, 1e-3f, 0.9f,
                                     0.95f, 1e-8f, 0, 0),
                     CT_ERR_ARG);
    dt_free(&x);
}

/* ---- the Llama family's ops */

/* The reference's backward against central differences of L = sum(out * dy): a wrong reference
 * would otherwise carry into the device check. f(x) computes out from x (n_in -> n_out). */
typedef void (*fwd_fn)(double *out, const double *x, const void *ctx);
static void fd_check(const char *what, fwd_fn f, const void *ctx, const double *x, size_t n_in,
                     size_t n_out, const double *dy, const double *grad) {
    double *xp = malloc(n_in * sizeof(double)), *o = malloc(n_out * sizeof(double));
    memcpy(xp, x, n_in * sizeof(double));
    double worst = 0;
    for (size_t i = 0; i < n_in; i++) {
        double h = 1e-5, lp = 0, lm = 0;
        xp[i] = x[i] + h, f(o, xp, ctx);
        for (size_t k = 0; k < n_out; k++) lp += o[k] * dy[k];
        xp[i] = x[i] - h, f(o, xp, ctx);
        for (size_t k = 0; k < n_out; k++) lm += o[k] * dy[k];
        xp[i] = x[i];
        double e = fabs((lp - lm) / (2 * h) - grad[i]) / (1e-6 + fabs(grad[i]));
        if (e > worst) worst = e;
    }
    ct_test_checks++;
    if (!(worst < 1e-5))
        CT__FAIL("%s: the reference's gradient is off central differences by %.3g (relative)", what,
                 worst);
    free(xp), free(o);
}

typedef struct rms_ctx { const double *w; int N, C; } rms_ctx;
static void rms_of_x(double *out, const double *x, const void *c) {
    const rms_ctx *k = c;
    ct_ref_rmsnorm_forward(out, NULL, x, k->w, k->N, k->C, 1e-5);
}
static void rms_of_w(double *out, const double *w, const void *c) {
    const rms_ctx *k = c;
    ct_ref_rmsnorm_forward(out, NULL, k->w, w, k->N, k->C, 1e-5); /* k->w holds x here */
}
typedef struct rope_ctx { int N, T, nh, hd, stride; } rope_ctx;
static void rope_of_x(double *out, const double *x, const void *c) {
    const rope_ctx *k = c;
    memcpy(out, x, (size_t)k->N * k->stride * sizeof(double));
    ct_ref_rope(out, x, k->N, k->T, k->nh, k->hd, k->stride, 10000.0, 1);
}
typedef struct glu_ctx { const double *other; size_t N; int wrt_up; } glu_ctx;
static void glu_of(double *out, const double *x, const void *c) {
    const glu_ctx *k = c;
    if (k->wrt_up) ct_ref_swiglu_forward(out, k->other, x, k->N);
    else ct_ref_swiglu_forward(out, x, k->other, k->N);
}

static void test_rmsnorm(int B, int T, int C) {
    size_t N = (size_t)B * T, n = N * C;
    dt x = dt_make(n, 2, 0), w = dt_make(C, 1, 0), y = dt_make(n, 0, 7.0);
    dt rs = dt_make(N, 0, 7.0);
    CT_ASSERT_OK(ct_rmsnorm_forward(g_dev, y.v, rs.v, x.v, w.v, B, T, C, 1e-5f),
                 ct_device_errmsg(g_dev));
    double *r = calloc(n, sizeof(double)), *rr = calloc(N, sizeof(double));
    ct_ref_rmsnorm_forward(r, rr, x.d, w.d, (int)N, C, 1e-5);
    dt_read(&y), dt_read(&rs);
    close_to("rmsnorm_forward", &y, r, ATOL, RTOL);
    close_to("rmsnorm_forward rstd", &rs, rr, ATOL, RTOL);
    /* backward: dinp "=" then "+=", dw "+=" */
    dt dy = dt_make(n, 1, 0), dx = dt_make(n, 0, 7.0), dw = dt_make(C, 1, 0);
    memset(dx.d, 0, n * sizeof(double));
    CT_ASSERT_OK(ct_rmsnorm_backward(g_dev, dx.v, dw.v, dy.v, x.v, w.v, rs.v, B, T, C, 0),
                 ct_device_errmsg(g_dev));
    double *gx = calloc(n, sizeof(double)), *gw = calloc(C, sizeof(double));
    ct_ref_rmsnorm_backward(gx, gw, dy.d, x.d, w.d, (int)N, C, 1e-5);
    for (size_t i = 0; i < n; i++) dx.d[i] = gx[i];
    for (int i = 0; i < C; i++) dw.d[i] += gw[i];
    dt_read(&dx), dt_read(&dw);
    close_to("rmsnorm_backward dinp", &dx, dx.d, ATOL, RTOL);
    close_to("rmsnorm_backward dweight", &dw, dw.d, 1e-4, RTOL);
    CT_ASSERT_OK(
        ct_rmsnorm_backward(g_dev, dx.v, ct_view_none(), dy.v, x.v, w.v, rs.v, B, T, C, 1),
        ct_device_errmsg(g_dev));
    for (size_t i = 0; i < n; i++) dx.d[i] += gx[i];
    dt_read(&dx);
    close_to("rmsnorm_backward dinp +=", &dx, dx.d, ATOL, RTOL);
    /* the reference against differences, on the shape's first rows */
    int Nf = (int)(N < 3 ? N : 3);
    rms_ctx cx = {w.d, Nf, C}, cw = {x.d, Nf, C};
    memset(gx, 0, n * sizeof(double)), memset(gw, 0, C * sizeof(double));
    ct_ref_rmsnorm_backward(gx, gw, dy.d, x.d, w.d, Nf, C, 1e-5);
    fd_check("rmsnorm reference dinp", rms_of_x, &cx, x.d, (size_t)Nf * C, (size_t)Nf * C, dy.d,
             gx);
    fd_check("rmsnorm reference dweight", rms_of_w, &cw, w.d, C, (size_t)Nf * C, dy.d, gw);
    free(r), free(rr), free(gx), free(gw);
    dt_free(&x), dt_free(&w), dt_free(&y), dt_free(&rs), dt_free(&dy), dt_free(&dx), dt_free(&dw);
}

/* q and k inside a fused (B,T,(nh + 2 nkv) hd) row, as the Llama block holds them */
static void test_rope(int B, int T, int nh, int nkv, int hd) {
    int N = B * T, stride = (nh + 2 * nkv) * hd;
    size_t n = (size_t)N * stride;
    dt qkv = dt_make(n, 1, 0);
    double *ref = malloc(n * sizeof(double)), *hf = malloc(n * sizeof(double));
    memcpy(ref, qkv.d, n * sizeof(double));
    ct_ref_rope(ref, qkv.d, N, T, nh, hd, stride, 10000.0, 1);                      /* q */
    ct_ref_rope(ref + (size_t)nh * hd, qkv.d + (size_t)nh * hd, N, T, nkv, hd, stride, 10000.0, 1);
    /* Hugging Face's form, written apart: x * cos + rotate_half(x) * sin, cos and sin of
     * position * inv_freq repeated over both halves, inv_freq_i = theta^(-2i/hd) */
    memcpy(hf, qkv.d, n * sizeof(double));
    int half = hd / 2;
    for (int r = 0; r < N; r++)
        for (int h = 0; h < nh + nkv; h++) {
            const double *x = qkv.d + (size_t)r * stride + (size_t)h * hd;
            double *o = hf + (size_t)r * stride + (size_t)h * hd;
            for (int j = 0; j < hd; j++) {
                double inv = 1.0 / pow(10000.0, (2.0 * (j % half)) / hd), a = (r % T) * inv;
                double rot = j < half ? -x[j + half] : x[j - half];
                o[j] = x[j] * cos(a) + rot * sin(a);
            }
        }
    double worst = 0;
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(ref[i] - hf[i]));
    ct_test_checks++;
    if (!(worst < 1e-12))
        CT__FAIL("rope reference differs from rotate_half's form by %.3g", worst);
    /* the device, in place: q, then k; v untouched */
    CT_ASSERT_OK(ct_rope_forward(g_dev, qkv.v, qkv.v, B, T, nh, hd, stride, 10000.0f),
                 ct_device_errmsg(g_dev));
    ct_view k = ct_view_of(qkv.v.mem, qkv.v.off + (size_t)nh * hd);
    CT_ASSERT_OK(ct_rope_forward(g_dev, k, k, B, T, nkv, hd, stride, 10000.0f),
                 ct_device_errmsg(g_dev));
    dt_read(&qkv);
    close_to("rope_forward (q and k in place, v untouched)", &qkv, ref, ATOL, RTOL);
    /* backward: the adjoint, checked against differences of the reference and on the device */
    rope_ctx rc = {N, T, nh, hd, stride};
    dt dy = dt_make(n, 1, 0), dx = dt_make(n, 0, 7.0);
    double *g = malloc(n * sizeof(double));
    memcpy(g, dy.d, n * sizeof(double));
    ct_ref_rope(g, dy.d, N, T, nh, hd, stride, 10000.0, -1);
    fd_check("rope reference backward", rope_of_x, &rc, ref, n, n, dy.d, g);
    memcpy(dx.h, dy.h, n * sizeof(float)); /* heads not rotated pass through: dx starts as dy */
    CT_ASSERT_OK(ct_buffer_write(dx.b, OFF * sizeof(float), dx.h, n * sizeof(float)),
                 ct_device_errmsg(g_dev));
    CT_ASSERT_OK(ct_rope_backward(g_dev, dx.v, dy.v, B, T, nh, hd, stride, 10000.0f),
                 ct_device_errmsg(g_dev));
    dt_read(&dx);
    close_to("rope_backward", &dx, g, ATOL, RTOL);
    free(ref), free(hf), free(g);
    dt_free(&qkv), dt_free(&dy), dt_free(&dx);
}

static void test_swiglu(size_t N) {
    dt g = dt_make(N, 4, 0), u = dt_make(N, 2, 0), y = dt_make(N, 0, 7.0);
    CT_ASSERT_OK(ct_swiglu_forward(g_dev, y.v, g.v, u.v, N), ct_device_errmsg(g_dev));
    double *r = calloc(N, sizeof(double)), *dg = calloc(N, sizeof(double));
    double *du = calloc(N, sizeof(double));
    ct_ref_swiglu_forward(r, g.d, u.d, N);
    dt_read(&y);
    close_to("swiglu_forward", &y, r, ATOL, RTOL);
    dt dy = dt_make(N, 1, 0), dgv = dt_make(N, 0, 7.0), duv = dt_make(N, 0, 7.0);
    CT_ASSERT_OK(ct_swiglu_backward(g_dev, dgv.v, duv.v, dy.v, g.v, u.v, N),
                 ct_device_errmsg(g_dev));
    ct_ref_swiglu_backward(dg, du, dy.d, g.d, u.d, N);
    dt_read(&dgv), dt_read(&duv);
    close_to("swiglu_backward dgate", &dgv, dg, ATOL, RTOL);
    close_to("swiglu_backward dup", &duv, du, ATOL, RTOL);
    size_t nf = N < 40 ? N : 40;
    glu_ctx cg = {u.d, nf, 0}, cu = {g.d, nf, 1};
    fd_check("swiglu reference dgate", glu_of, &cg, g.d, nf, nf, dy.d, dg);
    fd_check("swiglu reference dup", glu_of, &cu, u.d, nf, nf, dy.d, du);
    free(r), free(dg), free(du);
    dt_free(&g), dt_free(&u), dt_free(&y), dt_free(&dy), dt_free(&dgv), dt_free(&duv);
}

/* The token embedding without positions: out = wte[token]; dwte += the rows scattered by token
 * (a token repeated: summed). Reference: the GPT-2 encoder's with a zero position table. */
static void test_embed(int B, int T, int C, int V, int Vp) {
    size_t BT = (size_t)B * T;
    dt inp = dt_ints(BT, 0, V), wte = dt_make((size_t)Vp * C, 1, 0), out = dt_make(BT * C, 0, 7.0);
    double *zpe = calloc((size_t)T * C, sizeof(double)), *r = calloc(out.n, sizeof(double));
    CT_ASSERT_OK(ct_embed_forward(g_dev, out.v, inp.v, wte.v, B, T, C, Vp), ct_device_errmsg(g_dev));
    dt_read(&out);
    ct_ref_encoder_forward(r, (int *)inp.h, wte.d, zpe, B, T, C);
    close_to("embed_forward", &out, r, 1e-30, 0); /* a copy: exact */
    dt dout = dt_make(out.n, 1, 0), dwte = dt_make(wte.n, 1, 0);
    CT_ASSERT_OK(ct_embed_backward(g_dev, dwte.v, dout.v, inp.v, B, T, C, Vp),
                 ct_device_errmsg(g_dev));
    ct_ref_encoder_backward(dwte.d, zpe, dout.d, (int *)inp.h, B, T, C);
    dt_read(&dwte);
    close_to("embed_backward dwte (+=)", &dwte, dwte.d, ATOL, RTOL);
    free(zpe), free(r);
    dt_free(&inp), dt_free(&wte), dt_free(&out), dt_free(&dout), dt_free(&dwte);
}

/* Grouped-query attention's kv-head repetition: (N, (NH + 2 NKV) hd) -> (N, 3C), query head h
 * reading kv head h / (NH / NKV) (written here as an index map), and the backward as its adjoint:
 * <expand(x), y> = <x, reduce(y)> in double, and reduce(y) against the sum over each kv head's
 * query heads written apart. */
static void test_gqa(int B, int T, int NH, int NKV, int hd) {
    int N = B * T, C = NH * hd, KV = NKV * hd, Cr = C + 2 * KV, G = NH / NKV;
    dt x = dt_make((size_t)N * Cr, 1, 0), y = dt_make((size_t)N * 3 * C, 0, 7.0);
    CT_ASSERT_OK(ct_gqa_expand_forward(g_dev, y.v, x.v, B, T, NH, NKV, hd),
                 ct_device_errmsg(g_dev));
    double *r = calloc(y.n, sizeof(double)), *dr = calloc(x.n, sizeof(double));
    for (int n = 0; n < N; n++)
        for (int s = 0; s < 3; s++)
            for (int h = 0; h < NH; h++)
                for (int d = 0; d < hd; d++) {
                    int src = s == 0 ? h * hd + d : C + (s - 1) * KV + (h / G) * hd + d;
                    r[(size_t)n * 3 * C + (size_t)s * C + (size_t)h * hd + d] =
                        x.d[(size_t)n * Cr + src];
                }
    dt_read(&y);
    close_to("gqa_expand_forward", &y, r, 1e-30, 0); /* a copy: exact */
    dt dy = dt_make(y.n, 1, 0), dx = dt_make(x.n, 0, 7.0);
    CT_ASSERT_OK(ct_gqa_expand_backward(g_dev, dx.v, dy.v, B, T, NH, NKV, hd),
                 ct_device_errmsg(g_dev));
    for (int n = 0; n < N; n++)
        for (int j = 0; j < Cr; j++) {
            double sum = 0;
            if (j < C) sum = dy.d[(size_t)n * 3 * C + j];
            else
                for (int q = 0; q < G; q++) {
                    int s = (j - C) / KV, w = (j - C) % KV, kvh = w / hd, d = w % hd;
                    sum += dy.d[(size_t)n * 3 * C + (size_t)(s + 1) * C + (size_t)(kvh * G + q) * hd + d];
                }
            dr[(size_t)n * Cr + j] = sum;
        }
    dt_read(&dx);
    close_to("gqa_expand_backward", &dx, dr, ATOL, RTOL);
    double lhs = 0, rhs = 0;
    for (size_t i = 0; i < y.n; i++) lhs += r[i] * dy.d[i];
    for (size_t i = 0; i < x.n; i++) rhs += x.d[i] * dr[i];
    ct_test_checks++;
    if (!(fabs(lhs - rhs) <= 1e-9 * (fabs(lhs) + 1)))
        CT__FAIL("gqa reference: <E x, y> = %.15g but <x, E^T y> = %.15g", lhs, rhs);
    free(r), free(dr);
    dt_free(&x), dt_free(&y), dt_free(&dy), dt_free(&dx);
}

static void test_llama_bad_input(void) {
    dt x = dt_make(64, 1, 0);
    CT_ASSERT_EQ_INT(ct_rope_forward(g_dev, x.v, x.v, 1, 2, 2, 5, 10, 10000.0f), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "even");
    CT_ASSERT_EQ_INT(ct_rope_forward(g_dev, x.v, x.v, 1, 2, 2, 4, 6, 10000.0f), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "row_stride");
    CT_ASSERT_EQ_INT(ct_rmsnorm_forward(g_dev, x.v, x.v, x.v, x.v, 1, 2, 4, 0.0f), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "eps");
    /* a mix of storages is refused naming the argument, not read as one (the bf16 variants:
     * test_engine_llama_ops_bf16) */
    ct_view h = ct_view_bf16(x.v.mem, x.v.off);
    CT_ASSERT_EQ_INT(ct_swiglu_forward(g_dev, h, h, x.v, 8), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "up");
    CT_ASSERT_EQ_INT(ct_gqa_expand_forward(g_dev, x.v, x.v, 1, 2, 4, 3, 2), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(g_dev), "NKV must divide NH");
    dt_free(&x);
}

int main(void) {
    ct_test_devices ds;
    g_dev = ct_test_device_open(&ds, NULL);
    if (!g_dev) return ct_test_end("test_engine_ops");
    const ct_device_info *info = &ds.list[ds.pick[0]];
    printf("device: %s\n", info->name);
    test_encoder(3, 7, 20, 37, 40, 9);
    test_encoder(1, 1, 3, 5, 5, 1);
    test_layernorm(3, 7, 20);
    test_layernorm(2, 5, 33);
    test_matmul(3, 7, 20, 60, 1);
    test_matmul(3, 7, 20, 37, 0);
    test_matmul(2, 3, 65, 13, 1);
    test_matmul(1, 3, 5, 2 * 8192 + 37, 0); /* dinp summed in K slices */
    test_matmul(2, 3, 7, 1024 + 3, 1);
    test_matmul(3, 700, 2 * 1024 + 5, 9, 1); /* K slices in the forward (C) and dweight (B*T) */
    test_attention(3, 7, 20, 4);
    test_attention(2, 1, 6, 2);
    test_attention(1, 33, 24, 3);
    test_attention(1, 130, 24, 2); /* T >= 128: see transpose_square in ops.c */
    test_attention(2, 256, 32, 4);
    test_attention(1, 520, 16, 2); /* three row blocks of the causal products, the last short */
    test_elementwise(3 * 7 * 20, 20);
    test_elementwise(1001, 13);
    test_crossentropy(3, 7, 37, 40);
    test_crossentropy(2, 5, 11, 11);
    test_optim(10007);
    test_optim(3);
    test_bad_input();
    test_rmsnorm(3, 7, 20);
    test_rmsnorm(1, 1, 3);
    test_rope(3, 7, 4, 2, 6);  /* grouped-query: 4 query heads, 2 kv heads */
    test_rope(2, 5, 3, 1, 2);  /* multi-query, the smallest head */
    test_swiglu(3 * 7 * 52);   /* an intermediate size not a multiple of 64 */
    test_swiglu(5);
    test_embed(3, 7, 20, 37, 40);
    test_embed(1, 1, 3, 5, 5);
    test_gqa(3, 7, 4, 2, 6); /* grouped */
    test_gqa(2, 5, 3, 1, 2); /* multi-query */
    test_gqa(1, 3, 2, 2, 4); /* NKV = NH: a copy */
    test_llama_bad_input();
    ct_mem_stats ms;
    ct_device_mem_stats(g_dev, &ms);
    CT_ASSERT_EQ_INT(ms.live_buffers, 0);
    /* The other kernel family for the row reductions (LayerNorm, cross-entropy, the norm, the
     * attention scores' softmax forward and backward): a work-group per row on GPUs, a work-item
     * per row on CPUs; both against the reference on every device, with rows longer than a
     * work-group. */
    int first = ct_device_row_groups(g_dev);
    ct_device_free(g_dev);
    ct_device_opts o = ct_device_opts_default();
    ct_err err = {0};
    o.row_groups = !first;
    g_dev = NULL;
    CT_REQUIRE_OK_OR(ct_device_open(&g_dev, info, &o, &err), err.msg,
                     ct_test_end("test_engine_ops"));
    printf("row reductions: %s, then %s\n", first ? "work-group per row" : "work-item per row",
           first ? "work-item per row" : "work-group per row");
    test_layernorm(3, 7, 20);
    test_layernorm(2, 5, 33);
    test_layernorm(2, 3, 1000);
    test_crossentropy(3, 7, 37, 40);
    test_crossentropy(2, 5, 11, 11);
    test_crossentropy(2, 3, 3000, 3072);
    test_attention(3, 7, 20, 4);
    test_attention(1, 130, 24, 2);
    test_attention(1, 300, 16, 2); /* rows of up to 300 scores: longer than a work-group */
    test_optim(10007);
    test_optim(3);
    test_optim(300001);
    ct_device_mem_stats(g_dev, &ms);
    CT_ASSERT_EQ_INT(ms.live_buffers, 0);
    ct_device_free(g_dev);
    ct_test_devices_free(&ds);
    return ct_test_end("test_engine_ops");
}
