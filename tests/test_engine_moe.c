/* test_engine_moe.c - the mixture-of-experts layer (engine/moe.c, kernels/moe.cl) against the
 * plain-C double reference (tests/ct_ref.c), at the EP group size mpiexec and the thread count give:
 *
 *     mpiexec -n R test_engine_moe D          (N = R x D workers form one EP group)
 *
 * With one worker, the routing ops alone on awkward shapes: the router's softmax and top-k
 * (N = 37 tokens, E = 5, K = 1, 3 and K = E; rows whose logits tie completely or in the top two:
 * the lower expert first), the capacity assignment (B = 3, T = 7, E = 4, K = 2, capacities 1, 2
 * and T = no limit; a row whose every choice goes to one expert, which fills and drops the rest).
 *
 * On every group size, the whole layer forward and backward: each worker owns B rows of a batch
 * of N x B rows drawn from one seed and E / N experts; its output, its input gradient, its router
 * gradient and its auxiliary loss equal the reference on its own rows, and its experts' weight
 * gradients (accumulated onto random values) equal the reference over all N x B rows divided by
 * N (the EP group's mean objective), for
 * K = 1, 2, K = E, capacity factors that drop choices, F = 0 (no limit), a router with two
 * identical rows (exact ties), and one that sends almost everything to expert 0. Then refusals:
 * top-k outside 1..E, E not divisible by ep, a backward without its forward.
 *
 * With N > 1 the same cases again with the N workers as one TP group instead (every expert split
 * over it as the dense MLP is: fc rows and fcproj columns, hidden 4C / N): every worker holds the
 * same B rows and every expert's slice; the TP group's sum of the partial outputs and of the
 * partial input gradients equals the reference, the router's and the fcproj biases' gradients
 * are whole on every worker, each fc/fcproj slice's gradient equals the reference's slice, the
 * auxiliary loss is the reference's on every worker and the routing is counted by TP rank 0 only. */
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine.h"
#include "ct_ref.h"
#include "ct_test.h"
#include "ct_test_dev.h"
#include "ct_test_mpi.h"

typedef struct ctx {
    ct_device *dev;
    ct_arena *arena; /* one piece: ab */
    ct_buffer *ab;
    size_t at;
} ctx;

static ct_view put(ctx *c, const void *h, size_t n) {
    size_t off = c->at;
    c->at += (n + 15) / 16 * 16;
    CT_REQUIRE_OR(c->at * 4 <= ct_buffer_bytes(c->ab), ct_view_none(), "test arena too small");
    if (h)
        CT_REQUIRE_OK_OR(ct_buffer_write(c->ab, off * 4, h, n * 4), ct_device_errmsg(c->dev),
                         ct_view_none());
    else
        CT_REQUIRE_OK_OR(ct_buffer_zero(c->ab, off * 4, n * 4), ct_device_errmsg(c->dev),
                         ct_view_none());
    return ct_view_of(ct_buffer_mem(c->ab), off);
}
static void *get(ctx *c, ct_view v, size_t n) {
    void *h = malloc(n * 4 + 4);
    CT_REQUIRE_OK_OR(ct_device_finish(c->dev), ct_device_errmsg(c->dev), h);
    CT_REQUIRE_OK_OR(ct_buffer_read(c->ab, v.off * 4, h, n * 4), ct_device_errmsg(c->dev), h);
    return h;
}

static double *rnd(uint64_t seed, size_t n, double scale) {
    double *p = malloc(n * sizeof(double));
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = scale * ((double)((x >> 40) & 0xffffff) / 16777216.0 * 2.0 - 1.0);
    }
    return p;
}
static float *tof(const double *d, size_t n) {
    float *f = malloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) f[i] = (float)d[i];
    return f;
}
/* d rounded to float and back, so the reference sees exactly the device's inputs */
static void round_f(double *d, size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = (float)d[i];
}

/* Worst |a - b| relative to the largest |b|. */
static double rel(const float *a, const double *b, size_t n) {
    double w = 0, s = 0;
    for (size_t i = 0; i < n; i++) s = fmax(s, fabs(b[i]));
    for (size_t i = 0; i < n; i++) w = fmax(w, fabs((double)a[i] - b[i]));
    return w / (s + 1e-30);
}
#define CLOSE(a, b, n, tol, ...)                                                                   \
    do {                                                                                           \
        double e_ = rel((a), (b), (n));                                                            \
        CT_ASSERT_MSG(e_ <= (tol), __VA_ARGS__);                                                   \
        if (e_ > (tol)) fprintf(stderr, "    (relative error %.3g)\n", e_);                       \
    } while (0)

/* A gradient on the device (n floats at v) against the reference, named "<who>: <what>". */
static void grad_close(ctx *c, ct_view v, const double *ref, size_t n, const char *who,
                       const char *what) {
    float *d = get(c, v, n);
    CLOSE(d, ref, n, 5e-5, "%s: %s", who, what);
    free(d);
}

/* ------------------------------------------------------------------ the routing ops */

static void test_route(ctx *c) {
    const int N = 37, E = 5;
    double *lg = rnd(11, (size_t)N * E, 3.0);
    for (int e = 0; e < E; e++) lg[2 * E + e] = 0.25;           /* row 2: every logit equal */
    lg[5 * E + 1] = lg[5 * E + 3] = 4.0;                         /* row 5: a tie at the top */
    lg[9 * E + 4] = lg[9 * E + 0] = 3.5, lg[9 * E + 2] = 5.0;    /* row 9: a tie for second */
    round_f(lg, (size_t)N * E);
    int ks[3] = {1, 3, E};
    for (int q = 0; q < 3; q++) {
        int K = ks[q];
        c->at = 0;
        float *lf = tof(lg, (size_t)N * E);
        ct_view vl = put(c, lf, (size_t)N * E), vp = put(c, NULL, (size_t)N * E);
        ct_view vi = put(c, NULL, (size_t)N * K), vg = put(c, NULL, (size_t)N * K);
        CT_REQUIRE_OK(ct_moe_route_forward(c->dev, vp, vi, vg, vl, N, E, K),
                      ct_device_errmsg(c->dev));
        float *p = get(c, vp, (size_t)N * E), *g = get(c, vg, (size_t)N * K);
        int *ix = get(c, vi, (size_t)N * K);
        double *rp = malloc(sizeof(double) * N * E), *rg = malloc(sizeof(double) * N * K);
        int *ri = malloc(sizeof(int) * N * K);
        ct_ref_moe_route(rp, ri, rg, lg, N, E, K);
        CLOSE(p, rp, (size_t)N * E, 1e-6, "route K=%d: probabilities", K);
        CLOSE(g, rg, (size_t)N * K, 1e-6, "route K=%d: gates", K);
        int same = memcmp(ix, ri, sizeof(int) * N * K) == 0;
        CT_ASSERT_MSG(same, "route K=%d: the selected experts differ from the reference", K);
        /* the ties: equal p go to the lower expert first */
        CT_ASSERT_EQ_INT(ix[2 * K], 0);
        if (K >= 3) CT_ASSERT_EQ_INT(ix[2 * K + 2], 2);
        CT_ASSERT_EQ_INT(ix[5 * K], 1);
        if (K >= 3) {
            CT_ASSERT_EQ_INT(ix[5 * K + 1], 3);
            CT_ASSERT_EQ_INT(ix[9 * K + 1], 0);
            CT_ASSERT_EQ_INT(ix[9 * K + 2], 4);
        }
        if (K == E) /* every expert once per token */
            for (int n = 0; n < N; n++) {
                int seen = 0;
                for (int k = 0; k < K; k++) seen |= 1 << ix[n * K + k];
                CT_ASSERT_EQ_INT(seen, (1 << E) - 1);
            }
        printf("route N=%d E=%d K=%d: p, gates within 1e-6, experts identical to the reference\n",
               N, E, K);
        free(lf), free(p), free(g), free(ix), free(rp), free(rg), free(ri);
    }
    free(lg);
}

static void test_capacity(ctx *c) {
    const int B = 3, T = 7, E = 4, K = 2;
    int idx[3 * 7 * 2];
    uint64_t x = 99;
    for (int n = 0; n < B * T; n++) { /* two distinct experts per token */
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int a = (int)((x >> 33) % E), b = (a + 1 + (int)((x >> 40) % (E - 1))) % E;
        idx[n * K] = a, idx[n * K + 1] = b;
    }
    for (int t = 0; t < T; t++) { /* row 2: every rank-0 choice expert 0 */
        idx[(2 * T + t) * K] = 0;
        if (idx[(2 * T + t) * K + 1] == 0) idx[(2 * T + t) * K + 1] = 1 + t % (E - 1);
    }
    int caps[3] = {1, 2, T};
    for (int q = 0; q < 3; q++) {
        int cap = caps[q];
        c->at = 0;
        ct_view vi = put(c, idx, (size_t)B * T * K), vs = put(c, NULL, (size_t)B * T * K);
        ct_view vk = put(c, NULL, (size_t)B * E), vr = put(c, NULL, (size_t)B * E);
        CT_REQUIRE_OK(ct_moe_capacity(c->dev, vs, vk, vr, vi, B, T, E, K, cap),
                      ct_device_errmsg(c->dev));
        int *s = get(c, vs, (size_t)B * T * K), *k = get(c, vk, (size_t)B * E);
        int *r = get(c, vr, (size_t)B * E);
        int rs[3 * 7 * 2], rk[3 * 4], rr[3 * 4];
        ct_ref_moe_capacity(rs, rk, rr, idx, B, T, E, K, cap);
        CT_ASSERT_MSG(!memcmp(s, rs, sizeof rs), "capacity %d: slots differ from the reference", cap);
        CT_ASSERT_MSG(!memcmp(k, rk, sizeof rk), "capacity %d: kept counts differ", cap);
        CT_ASSERT_MSG(!memcmp(r, rr, sizeof rr), "capacity %d: routed counts differ", cap);
        /* row 2: expert 0 takes its first cap rank-0 choices in t order, drops the rest */
        for (int t = 0; t < T; t++)
            CT_ASSERT_EQ_INT(s[(2 * T + t) * K], t < cap ? t : -1);
        int dropped = 0;
        for (int i = 0; i < B * T * K; i++) dropped += s[i] < 0;
        if (cap == T) CT_ASSERT_EQ_INT(dropped, 0);
        printf("capacity B=%d T=%d E=%d K=%d cap=%d: slots and counts identical to the reference "
               "(%d of %d choices dropped)\n",
               B, T, E, K, cap, dropped, B * T * K);
        free(s), free(k), free(r);
    }
}

/* ------------------------------------------------------------------ the layer */

typedef struct layer_case {
    const char *name;
    int B, T, C, E, K;
    double F, alpha, scale;
    int ties, skew; /* router rows 0 and 1 identical; a router favouring expert 0 */
} layer_case;

static void test_layer(ctx *c, ct_comm *ep, const layer_case *lc) {
    int N = ep ? ct_comm_size(ep) : 1, r = ep ? ct_comm_rank(ep) : 0;
    int B = lc->B, T = lc->T, C = lc->C, E = lc->E, K = lc->K, El = E / N;
    size_t BT = (size_t)B * T, F = 4 * (size_t)C, all = (size_t)N * BT;
    ct_moe_cfg mc = {E, K, lc->F, lc->alpha, B, T, C, 1, 1, 1, 0, 0, 0, 0};
    int cap = ct_moe_row_capacity(&mc, T);
    /* the data every worker draws alike */
    double *x = rnd(1, all * C, 1.0), *dy = rnd(2, all * C, 1.0), *wr = rnd(3, (size_t)E * C, 0.6);
    double *fcw = rnd(4, (size_t)E * F * C, 0.3), *fcb = rnd(5, (size_t)E * F, 0.1);
    double *fpw = rnd(6, (size_t)E * F * C, 0.3), *fpb = rnd(7, (size_t)E * C, 0.1);
    if (lc->ties) memcpy(wr + C, wr, sizeof(double) * C);
    if (lc->skew) {
        for (size_t i = 0; i < all; i++) x[i * C] = 1.0 + 0.1 * x[i * C]; /* a shared direction */
        wr[0] = 6.0;
    }
    round_f(x, all * C), round_f(dy, all * C), round_f(wr, (size_t)E * C);
    round_f(fcw, (size_t)E * F * C), round_f(fcb, (size_t)E * F);
    round_f(fpw, (size_t)E * F * C), round_f(fpb, (size_t)E * C);
    /* gradients start from random values (they accumulate) */
    double *g0 = rnd(8, (size_t)E * C + 2 * (size_t)E * F * C + (size_t)E * F + (size_t)E * C, 0.5);
    round_f(g0, (size_t)E * C + 2 * (size_t)E * F * C + (size_t)E * F + (size_t)E * C);
    double *gwr = g0, *gfcw = gwr + (size_t)E * C, *gfcb = gfcw + (size_t)E * F * C;
    double *gfpw = gfcb + (size_t)E * F, *gfpb = gfpw + (size_t)E * F * C;
    /* the device: this worker's rows and experts */
    c->at = 0;
    size_t mine = (size_t)r * BT * C, e0 = (size_t)r * El;
    float *h;
    ct_view vx = put(c, h = tof(x + mine, BT * C), BT * C);
    free(h);
    ct_view vdy = put(c, h = tof(dy + mine, BT * C), BT * C);
    free(h);
    ct_view vy = put(c, NULL, BT * C), vdx = put(c, NULL, BT * C);
    ct_moe_weights w, dw;
#define PUT2(field, src, off, n)                                                                   \
    do {                                                                                           \
        float *f_ = tof((src) + (off), (n));                                                       \
        w.field = put(c, f_, (n));                                                                 \
        free(f_);                                                                                  \
    } while (0)
#define PUTG(field, src, off, n)                                                                   \
    do {                                                                                           \
        float *f_ = tof((src) + (off), (n));                                                       \
        dw.field = put(c, f_, (n));                                                                \
        free(f_);                                                                                  \
    } while (0)
    PUT2(routerw, wr, 0, (size_t)E * C);
    PUT2(fcw, fcw, e0 * F * C, (size_t)El * F * C);
    PUT2(fcb, fcb, e0 * F, (size_t)El * F);
    PUT2(fcprojw, fpw, e0 * F * C, (size_t)El * F * C);
    PUT2(fcprojb, fpb, e0 * C, (size_t)El * C);
    PUTG(routerw, gwr, 0, (size_t)E * C);
    PUTG(fcw, gfcw, e0 * F * C, (size_t)El * F * C);
    PUTG(fcb, gfcb, e0 * F, (size_t)El * F);
    PUTG(fcprojw, gfpw, e0 * F * C, (size_t)El * F * C);
    PUTG(fcprojb, gfpb, e0 * C, (size_t)El * C);
    size_t blk, scr;
    ct_moe_plan(&mc, N, &blk, &scr);
    ct_view saved = put(c, NULL, blk), scratch = put(c, NULL, scr);
    ct_moe *moe = NULL;
    ct_err err = {0};
    CT_REQUIRE_OK(ct_moe_create(&moe, &mc, ep, NULL, c->dev, c->arena, &err), err.msg);
    CT_REQUIRE_OK(ct_moe_forward(moe, 0, 0, 0, vy, saved, scratch, vx, &w, B, T),
                  ct_device_errmsg(c->dev));
    CT_REQUIRE_OK(
        ct_moe_backward(moe, 0, 0, vdx, &dw, vdy, saved, scratch, vx, &w, (float)lc->scale),
        ct_device_errmsg(c->dev));
    int fails0 = ct_test_failures;
    /* the reference: this worker's rows; the experts over every worker's rows; the objective
     * y . dy + loss_scale alpha aux (dy already carries the loss scale) */
    double *ry = malloc(BT * C * sizeof(double)), *rdx = malloc(all * C * sizeof(double));
    double aux = ct_ref_moe_forward(ry, x + mine, wr, fcw, fcb, fpw, fpb, B, T, C, E, K, cap);
    double *rg = malloc(sizeof(double) * ((size_t)E * C + 2 * (size_t)E * F * C + (size_t)E * F +
                                          (size_t)E * C));
    size_t ng = (size_t)E * C + 2 * (size_t)E * F * C + (size_t)E * F + (size_t)E * C;
    memcpy(rg, g0, ng * sizeof(double));
    double *rwr = rg, *rfcw = rwr + (size_t)E * C, *rfcb = rfcw + (size_t)E * F * C;
    double *rfpw = rfcb + (size_t)E * F, *rfpb = rfpw + (size_t)E * F * C;
    /* the router's gradient from this worker's rows (each with its own mean-over-rows aux) */
    double *scr_wr = calloc((size_t)E * C, sizeof(double));
    double *junk = calloc(ng, sizeof(double));
    for (int q = 0; q < N; q++) {
        double *dxq = rdx + (size_t)q * BT * C;
        double *gw = q == r ? scr_wr : junk;
        ct_ref_moe_backward(dxq, gw, rfcw, rfcb, rfpw, rfpb, dy + (size_t)q * BT * C,
                            x + (size_t)q * BT * C, wr, fcw, fcb, fpw, fpb, B, T, C, E, K, cap,
                            lc->alpha * lc->scale);
    }
    for (size_t i = 0; i < (size_t)E * C; i++) rwr[i] += scr_wr[i];
    /* the experts' gradients are of the EP group's mean objective */
    for (size_t i = (size_t)E * C; i < ng; i++) rg[i] = g0[i] + (rg[i] - g0[i]) / N;
    float *y = get(c, vy, BT * C), *dx = get(c, vdx, BT * C);
    CLOSE(y, ry, BT * C, 2e-5, "%s (ep %d, worker %d): y", lc->name, N, r);
    CLOSE(dx, rdx + mine, BT * C, 5e-5, "%s (ep %d, worker %d): dx", lc->name, N, r);
    char who[160];
    snprintf(who, sizeof who, "%s (ep %d, worker %d)", lc->name, N, r);
    grad_close(c, dw.routerw, rwr, (size_t)E * C, who, "d routerw");
    grad_close(c, dw.fcw, rfcw + e0 * F * C, (size_t)El * F * C, who, "d fcw");
    grad_close(c, dw.fcb, rfcb + e0 * F, (size_t)El * F, who, "d fcb");
    grad_close(c, dw.fcprojw, rfpw + e0 * F * C, (size_t)El * F * C, who, "d fcprojw");
    grad_close(c, dw.fcprojb, rfpb + e0 * C, (size_t)El * C, who, "d fcprojb");
    ct_moe_stats s;
    ct_moe_stats_get(moe, &s);
    CT_ASSERT_MSG(fabs(s.aux - aux) <= 1e-5 * fabs(aux) + 1e-7, "%s: aux %.9g, reference %.9g",
                  lc->name, s.aux, aux);
    double kept = 0, routed = 0, maxr = 0;
    for (int e = 0; e < E; e++) {
        kept += s.kept[e], routed += s.routed[e];
        if (s.routed[e] > maxr) maxr = s.routed[e];
    }
    CT_ASSERT_EQ_INT((long long)routed, (long long)(BT * K));
    if (lc->F == 0) CT_ASSERT_EQ_INT((long long)kept, (long long)(BT * K));
    if (r == 0 && ct_test_failures == fails0)
        printf("%-28s ep %d: y, dx, every gradient within tolerance; aux %.6f; %.0f of %.0f choices "
               "kept, busiest expert %.2f x the mean\n",
               lc->name, N, aux, kept, routed, maxr / (routed / E));
    /* a backward of a block copy that had no forward is refused */
    ct_status bad = ct_moe_backward(moe, 0, 1, vdx, &dw, vdy, saved, scratch, vx, &w, 1.0f);
    CT_ASSERT_EQ_INT(bad, CT_ERR_STATE);
    ct_moe_free(moe);
    free(x), free(dy), free(wr), free(fcw), free(fcb), free(fpw), free(fpb), free(g0);
    free(ry), free(rdx), free(rg), free(scr_wr), free(junk), free(y), free(dx);
}

/* TP rank r's slices of E experts' fc (rows [r Fl, (r+1) Fl) of each (F, C) fcw and F fcb) and
 * fcproj (the same columns of each (C, F) fcproj): as params.c lays a worker's slices out. */
static void expert_slices(double **fcw, double **fcb, double **fpw, const double *wfc,
                          const double *bfc, const double *wfp, size_t E, size_t F, size_t Fl,
                          size_t C, size_t r) {
    *fcw = malloc(E * Fl * C * sizeof(double)), *fcb = malloc(E * Fl * sizeof(double));
    *fpw = malloc(E * C * Fl * sizeof(double));
    for (size_t e = 0; e < E; e++) {
        memcpy(*fcw + e * Fl * C, wfc + e * F * C + r * Fl * C, Fl * C * sizeof(double));
        memcpy(*fcb + e * Fl, bfc + e * F + r * Fl, Fl * sizeof(double));
        for (size_t o = 0; o < C; o++)
            memcpy(*fpw + (e * C + o) * Fl, wfp + (e * C + o) * F + r * Fl, Fl * sizeof(double));
    }
}

/* The layer over a TP group of N workers (see the header). */
static void test_layer_tp(ctx *c, ct_comm *tpc, const layer_case *lc) {
    int N = ct_comm_size(tpc), r = ct_comm_rank(tpc);
    int B = lc->B, T = lc->T, C = lc->C, E = lc->E, K = lc->K;
    size_t BT = (size_t)B * T, F = 4 * (size_t)C, Fl = F / (size_t)N, Ez = (size_t)E;
    ct_moe_cfg mc = {E, K, lc->F, lc->alpha, B, T, C, 1, 1, 1, (int)Fl, 0, 0, 0};
    int cap = ct_moe_row_capacity(&mc, T);
    double *x = rnd(11, BT * C, 1.0), *dy = rnd(12, BT * C, 1.0), *wr = rnd(13, Ez * C, 0.6);
    double *fcw = rnd(14, Ez * F * C, 0.3), *fcb = rnd(15, Ez * F, 0.1);
    double *fpw = rnd(16, Ez * F * C, 0.3), *fpb = rnd(17, Ez * C, 0.1);
    if (lc->ties) memcpy(wr + C, wr, sizeof(double) * C);
    if (lc->skew) {
        for (size_t i = 0; i < BT; i++)
            x[i * C] = 1.0 + 0.1 * x[i * C];
        wr[0] = 6.0;
    }
    round_f(x, BT * C), round_f(dy, BT * C), round_f(wr, Ez * C);
    round_f(fcw, Ez * F * C), round_f(fcb, Ez * F), round_f(fpw, Ez * F * C), round_f(fpb, Ez * C);
    double *sfcw, *sfcb, *sfpw; /* this worker's slices */
    expert_slices(&sfcw, &sfcb, &sfpw, fcw, fcb, fpw, Ez, F, Fl, (size_t)C, (size_t)r);
    c->at = 0;
    float *h;
    ct_moe_weights w, dw;
#define PUTV(v, src, n)                                                                            \
    do {                                                                                           \
        h = tof((src), (n));                                                                       \
        (v) = put(c, h, (n));                                                                      \
        free(h);                                                                                   \
    } while (0)
    ct_view vx, vdy, vy = put(c, NULL, BT * C), vdx = put(c, NULL, BT * C);
    PUTV(vx, x, BT * C);
    PUTV(vdy, dy, BT * C);
    PUTV(w.routerw, wr, Ez * C);
    PUTV(w.fcw, sfcw, Ez * Fl * C);
    PUTV(w.fcb, sfcb, Ez * Fl);
    PUTV(w.fcprojw, sfpw, Ez * C * Fl);
    PUTV(w.fcprojb, fpb, Ez * C);
    dw.routerw = put(c, NULL, Ez * C), dw.fcw = put(c, NULL, Ez * Fl * C);
    dw.fcb = put(c, NULL, Ez * Fl), dw.fcprojw = put(c, NULL, Ez * C * Fl);
    dw.fcprojb = put(c, NULL, Ez * C);
#undef PUTV
    size_t blk, scr;
    ct_moe_plan(&mc, 1, &blk, &scr);
    /* saved and scratch hold junk: nothing may read what the layer did not write */
    double *junk = rnd(18, blk > scr ? blk : scr, 3.0);
    float *fj = tof(junk, blk > scr ? blk : scr);
    ct_view saved = put(c, fj, blk), scratch = put(c, fj, scr);
    free(junk), free(fj);
    ct_err err = {0};
    ct_tp *tp = NULL;
    ct_tp_opts to = ct_tp_opts_default();
    CT_REQUIRE_OK(ct_tp_create(&tp, tpc, c->dev, c->arena, BT * C, &to, &err), err.msg);
    ct_moe *moe = NULL;
    CT_REQUIRE_OK(ct_moe_create(&moe, &mc, NULL, tp, c->dev, c->arena, &err), err.msg);
    CT_REQUIRE_OK(ct_moe_forward(moe, 0, 0, 0, vy, saved, scratch, vx, &w, B, T),
                  ct_device_errmsg(c->dev));
    CT_REQUIRE_OK(ct_tp_allreduce(c->dev, tp, vy, vy, BT * C, CT_OP_SUM), ct_device_errmsg(c->dev));
    CT_REQUIRE_OK(
        ct_moe_backward(moe, 0, 0, vdx, &dw, vdy, saved, scratch, vx, &w, (float)lc->scale),
        ct_device_errmsg(c->dev));
    CT_REQUIRE_OK(ct_tp_allreduce(c->dev, tp, vdx, vdx, BT * C, CT_OP_SUM),
                  ct_device_errmsg(c->dev));
    int fails0 = ct_test_failures;
    size_t ng = Ez * C + 2 * Ez * F * C + Ez * F + Ez * C;
    double *ry = malloc(BT * C * sizeof(double)), *rdx = malloc(BT * C * sizeof(double));
    double *rg = calloc(ng, sizeof(double));
    double *rwr = rg, *rfcw = rwr + Ez * C, *rfcb = rfcw + Ez * F * C, *rfpw = rfcb + Ez * F;
    double *rfpb = rfpw + Ez * F * C;
    double aux = ct_ref_moe_forward(ry, x, wr, fcw, fcb, fpw, fpb, B, T, C, E, K, cap);
    ct_ref_moe_backward(rdx, rwr, rfcw, rfcb, rfpw, rfpb, dy, x, wr, fcw, fcb, fpw, fpb, B, T, C, E,
                        K, cap, lc->alpha * lc->scale);
    double *qfcw, *qfcb, *qfpw; /* the reference's slices of the split gradients */
    expert_slices(&qfcw, &qfcb, &qfpw, rfcw, rfcb, rfpw, Ez, F, Fl, (size_t)C, (size_t)r);
    float *y = get(c, vy, BT * C), *dx = get(c, vdx, BT * C);
    CLOSE(y, ry, BT * C, 2e-5, "%s (tp %d, worker %d): y", lc->name, N, r);
    CLOSE(dx, rdx, BT * C, 5e-5, "%s (tp %d, worker %d): dx", lc->name, N, r);
    char who[160];
    snprintf(who, sizeof who, "%s (tp %d, worker %d)", lc->name, N, r);
    grad_close(c, dw.routerw, rwr, Ez * C, who, "d routerw (whole)");
    grad_close(c, dw.fcw, qfcw, Ez * Fl * C, who, "d fcw (slice)");
    grad_close(c, dw.fcb, qfcb, Ez * Fl, who, "d fcb (slice)");
    grad_close(c, dw.fcprojw, qfpw, Ez * C * Fl, who, "d fcprojw (slice)");
    grad_close(c, dw.fcprojb, rfpb, Ez * C, who, "d fcprojb (whole)");
    ct_moe_stats s;
    ct_moe_stats_get(moe, &s);
    CT_ASSERT_MSG(fabs(s.aux - aux) <= 1e-5 * fabs(aux) + 1e-7, "%s (tp): aux %.9g, reference %.9g",
                  lc->name, s.aux, aux);
    double routed = 0;
    for (int e = 0; e < E; e++)
        routed += s.routed[e];
    CT_ASSERT_EQ_INT((long long)routed, r == 0 ? (long long)(BT * K) : 0LL);
    if (r == 0 && ct_test_failures == fails0)
        printf("%-28s tp %d: y, dx (summed over TP), whole and sliced gradients within tolerance; "
               "aux %.6f\n",
               lc->name, N, aux);
    ct_moe_free(moe);
    ct_tp_free(tp);
    free(x), free(dy), free(wr), free(fcw), free(fcb), free(fpw), free(fpb);
    free(sfcw), free(sfcb), free(sfpw), free(qfcw), free(qfcb), free(qfpw);
    free(ry), free(rdx), free(rg), free(y), free(dx);
}

static void test_refusals(ctx *c, int N) {
    ct_err err = {0};
    ct_moe_cfg a = {4, 5, 1.0, 0.0, 2, 3, 8, 1, 1, 1, 0, 0, 0, 0};
    CT_ASSERT_EQ_INT(ct_moe_check(&a, 1, &err), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(err.msg, "top-k 5");
    a.top_k = 2, a.experts = 6;
    if (N > 1 && 6 % N) {
        CT_ASSERT_EQ_INT(ct_moe_check(&a, N, &err), CT_ERR_ARG);
        CT_ASSERT_STR_CONTAINS(err.msg, "must divide");
    }
    a.experts = 4, a.capacity = -1;
    CT_ASSERT_EQ_INT(ct_moe_check(&a, 1, &err), CT_ERR_ARG);
    (void)c;
}

static void worker(ct_topo *topo, int thread, const ct_device_info *info) {
    ct_err err = {0};
    ctx c = {0};
    ct_comm *world = NULL;
    CT_REQUIRE_OK(ct_comm_world(topo, thread, &world), "world");
    ct_device_opts o = ct_device_opts_default();
    CT_REQUIRE_OK(ct_device_open(&c.dev, info, &o, &err), err.msg);
    static const size_t part0 = 0;
    CT_REQUIRE_OK(ct_arena_alloc(c.dev, CT_MEM_WORKSPACE, "test arena", (size_t)48 << 20, &part0,
                                 NULL, 1, &c.arena),
                  ct_device_errmsg(c.dev));
    c.ab = ct_arena_at(c.arena, 0, NULL);
    int N = ct_comm_size(world);
    ct_comm *ep = N > 1 ? world : NULL;
    if (N == 1) {
        test_route(&c);
        test_capacity(&c);
    }
    const layer_case cases[] = {
        {"K=2, F=1 (drops)", 3, 7, 20, 4, 2, 1.0, 0.1, 0.5, 0, 0},
        {"K=E=4, F=0 (no limit)", 2, 9, 12, 4, 4, 0.0, 0.05, 1.0, 0, 0},
        {"K=1, F=1.5, tied router rows", 1, 33, 8, 8, 1, 1.5, 0.0, 1.0, 1, 0},
        {"K=2, F=0.5, skewed to expert 0", 2, 8, 16, 4, 2, 0.5, 0.2, 1.0, 0, 1},
        {"K=2, F=0, skewed to expert 0", 2, 8, 16, 4, 2, 0.0, 0.2, 1.0, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (cases[i].E % N == 0) test_layer(&c, ep, &cases[i]);
    for (size_t i = 0; N > 1 && i < sizeof cases / sizeof cases[0]; i++)
        if ((4 * cases[i].C) % N == 0) test_layer_tp(&c, world, &cases[i]);
    test_refusals(&c, N);
    ct_arena_free(c.arena);
    ct_device_free(c.dev);
    ct_comm_free(world);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int D = argc > 1 ? atoi(argv[1]) : 1;
    ct_err err = {0};
    ct_topo *topo = NULL;
    CT_REQUIRE_OK_OR(ct_topo_create(&topo, &argc, &argv, D, &err), err.msg, 1);
    ct_test_mpi_begin();
    ct_test_devices ds;
    CT_REQUIRE_OR(!ct_test_devices_find(&ds, "cpu", 0), 1, "no device");
#pragma omp parallel num_threads(D)
    worker(topo, omp_get_thread_num(), &ds.list[ds.pick[omp_get_thread_num() % ds.npick]]);
    ct_test_devices_free(&ds);
    int rc = ct_test_mpi_end("test_engine_moe");
    ct_topo_free(topo);
    return rc;
}
