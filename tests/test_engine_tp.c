/* test_engine_tp.c - tensor parallelism's pieces (engine/tp.c) against the single-device ops, on
 * awkward shapes, forward and backward, with and without sequence parallelism, at the group size
 * mpiexec and the thread count give (threads, ranks, mixed):
 *
 *     mpiexec -n R test_engine_tp D          (N = R x D workers form one TP group)
 *
 * Every worker draws the same whole tensors from one seed, computes the reference with the
 * single-device op (the piece with tp = NULL) on its own device, runs the piece on its slice
 * and compares its part of each result:
 *   - column-parallel linear (C = 19 in, 5 outputs per worker): out, dinp (all-reduced or
 *     reduce-scattered), dW, db (accumulated onto random values), overlap on and off;
 *   - row-parallel linear (7 inputs per worker, 13 out): out (bias once after the sum), dinp,
 *     dW, db;
 *   - attention on this worker's NH/N heads (NH = 12): output and dqkv columns;
 *   - vocabulary-parallel embedding (V = 45, Vp = 48, tokens on every worker's rows): out, dwte
 *     rows, dwpe;
 *   - vocabulary-parallel cross-entropy, V = 45 (targets on every worker) and V = 20 (targets in
 *     the padding-free part only; with N >= 2 some workers hold padding alone), padding logits
 *     set huge: losses and lse the same bit for bit on every worker and equal the reference,
 *     dlogits columns;
 *   - sequence parallelism's all-gather and reduce-scatter of rows against host sums;
 *   - the whole model (L = 2, C = 24, NH = 12, V = 45, Vp = 48): one forward and backward at
 *     tp = N against tp = 1, each through its executor as train_gpt runs it (a step with lr 0:
 *     ct_test_exec.h): loss the same bit for bit on every TP worker and within 1e-5 of the
 *     single device's, every gradient piece this worker holds within tolerance (this also checks
 *     ct_params' slicing of every tensor, and under SP the executor's sum of the LayerNorms'
 *     gradients over the TP group);
 *   - refusals: NH, Vp, 4C not divisible by N, T not divisible under SP, a model without its TP
 *     group; a bad shape from every worker together (nothing hangs).
 * A second argument "shared" opens every thread's device in one context (the device path of
 * TP's collectives); "rows" runs the GPUs' work-group-per-row reduction kernels (LayerNorm,
 * softmax, both cross-entropies) on the CPU device, against references of the same family. */
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine.h"
#include "ct_test.h"
#include "ct_test_dev.h"
#include "ct_test_exec.h"
#include "ct_test_mpi.h"

#define B_ 3
#define T_ 12 /* a multiple of N = 1..4 and 6 */
#define BT (B_ * T_)

/* ------------------------------------------------------------------ a worker's scratch */

typedef struct ctx {
    ct_device *dev;
    ct_arena *arena; /* one piece: ab */
    ct_buffer *ab;
    size_t at;
    int N, r;
    ct_comm *tpc;
    int tp_comm; /* CT_TP_COMM_DEVICE where the threads share the device, else auto */
} ctx;

static ct_view vw(ctx *c, size_t off) { return ct_view_of(ct_buffer_mem(c->ab), off); }

/* n floats in the arena, 64-byte aligned, filled from host (or zeros when h is NULL). */
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
    return vw(c, off);
}
static float *get(ctx *c, ct_view v, size_t n) {
    float *h = malloc(n * 4);
    CT_REQUIRE_OK_OR(ct_device_finish(c->dev), ct_device_errmsg(c->dev), h);
    CT_REQUIRE_OK_OR(ct_buffer_read(c->ab, v.off * 4, h, n * 4), ct_device_errmsg(c->dev), h);
    return h;
}

static float *rnd(uint64_t seed, size_t n, float scale) {
    float *p = malloc(n * 4);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = scale * ((float)((x >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f);
    }
    return p;
}

/* Columns [c0, c0 + w) of a (rows, cols) matrix. */
static float *cols(const float *a, size_t rows, size_t ncols, size_t c0, size_t w) {
    float *o = malloc(rows * w * 4);
    for (size_t i = 0; i < rows; i++) memcpy(o + i * w, a + i * ncols + c0, w * 4);
    return o;
}

/* Worst |a - b| relative to the largest |b|, over n. */
static double rel(const float *a, const float *b, size_t n) {
    double w = 0, s = 0;
    for (size_t i = 0; i < n; i++) s = fmax(s, fabs((double)b[i]));
    for (size_t i = 0; i < n; i++) w = fmax(w, fabs((double)a[i] - b[i]));
    return w / (s + 1e-30);
}

#define CLOSE(a, b, n, tol, ...)                                                                   \
    do {                                                                                           \
        double e_ = rel((a), (b), (n));                                                            \
        CT_ASSERT_MSG(e_ <= (tol), __VA_ARGS__);                                                   \
        if (e_ > (tol)) fprintf(stderr, "    (relative error %.3g)\n", e_);                       \
    } while (0)

/* Bitwise the same on every worker of the group (a checksum all-gathered). */
static int same_everywhere(ctx *c, const float *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n * 4; i++) h = (h ^ b[i]) * 1099511628211ull;
    uint64_t all[16];
    CT_REQUIRE_OK_OR(ct_comm_allgather(c->tpc, &h, all, 2, CT_I32, NULL), ct_comm_errmsg(c->tpc),
                     0);
    for (int k = 1; k < c->N; k++)
        if (all[k] != all[0]) return 0;
    return 1;
}

/* ------------------------------------------------------------------ the pieces */

static void test_col(ctx *c, ct_tp *tp, int sp, int overlap) {
    const int C = 19, OCl = 5, N = c->N, r = c->r, OC = OCl * N;
    size_t BTl = sp ? BT / N : BT;
    c->at = 0;
    ct_tp_set_overlap(tp, overlap);
    float *x = rnd(1, (size_t)BT * C, 1), *w = rnd(2, (size_t)OC * C, 0.5f), *b = rnd(3, OC, 0.5f);
    float *dy = rnd(4, (size_t)BT * OC, 1), *dw0 = rnd(5, (size_t)OC * C, 1), *db0 = rnd(6, OC, 1);
    /* the reference: the whole layer on one device */
    ct_view X = put(c, x, BT * C), W = put(c, w, OC * C), Bv = put(c, b, OC);
    ct_view Y = put(c, NULL, BT * OC), DY = put(c, dy, BT * OC), DX = put(c, NULL, BT * C);
    ct_view DW = put(c, dw0, OC * C), DB = put(c, db0, OC);
    CT_REQUIRE_OK(ct_tp_col_forward(c->dev, NULL, Y, X, ct_view_none(), W, Bv, B_, T_, C, OC),
                  ct_device_errmsg(c->dev));
    CT_REQUIRE_OK(
        ct_tp_col_backward(c->dev, NULL, DX, DW, DB, DY, X, ct_view_none(), DX, W, B_, T_, C, OC),
        ct_device_errmsg(c->dev));
    float *y = get(c, Y, BT * OC), *dx = get(c, DX, BT * C), *dw = get(c, DW, OC * C);
    float *db = get(c, DB, OC);
    /* this worker: rows r of W, b; its rows of x under SP; its columns of dy */
    float *dyl = cols(dy, BT, OC, (size_t)r * OCl, OCl);
    ct_view xl = put(c, x + (sp ? (size_t)r * BTl * C : 0), BTl * C);
    ct_view wl = put(c, w + (size_t)r * OCl * C, OCl * C), bl = put(c, b + (size_t)r * OCl, OCl);
    ct_view yl = put(c, NULL, BT * OCl), full = put(c, NULL, BT * C), dyv = put(c, dyl, BT * OCl);
    ct_view dpart = put(c, NULL, BT * C);
    ct_view dwl = put(c, dw0 + (size_t)r * OCl * C, OCl * C), dbl = put(c, db0 + (size_t)r * OCl, OCl);
    CT_REQUIRE_OK(ct_tp_col_forward(c->dev, tp, yl, xl, full, wl, bl, B_, T_, C, OCl),
                  ct_device_errmsg(c->dev));
    CT_REQUIRE_OK(
        ct_tp_col_backward(c->dev, tp, dpart, dwl, dbl, dyv, xl, full, dpart, wl, B_, T_, C, OCl),
        ct_device_errmsg(c->dev));
    float *yg = get(c, yl, BT * OCl), *dxg = get(c, dpart, BTl * C);
    float *dwg = get(c, dwl, OCl * C), *dbg = get(c, dbl, OCl);
    float *yr = cols(y, BT, OC, (size_t)r * OCl, OCl);
    const char *m = sp ? "SP" : "no SP";
    CLOSE(yg, yr, BT * OCl, 1e-6, "column-parallel forward (%s, N %d)", m, N);
    CLOSE(dxg, dx + (sp ? (size_t)r * BTl * C : 0), BTl * C, 1e-5,
          "column-parallel dinp (%s, overlap %d, N %d)", m, overlap, N);
    CLOSE(dwg, dw + (size_t)r * OCl * C, OCl * C, 1e-5, "column-parallel dW (%s, N %d)", m, N);
    CLOSE(dbg, db + (size_t)r * OCl, OCl, 1e-5, "column-parallel db (%s, N %d)", m, N);
    if (!sp) CT_ASSERT_MSG(same_everywhere(c, dxg, BT * C), "dinp differs between TP workers");
    free(x), free(w), free(b), free(dy), free(dw0), free(db0), free(y), free(dx), free(dw);
    free(db), free(dyl), free(yg), free(dxg), free(dwg), free(dbg), free(yr);
}

static void test_row(ctx *c, ct_tp *tp, int sp) {
    const int ICl = 7, C = 13, N = c->N, r = c->r, IC = ICl * N;
    size_t BTl = sp ? BT / N : BT;
    c->at = 0;
    float *x = rnd(11, (size_t)BT * IC, 1), *w = rnd(12, (size_t)C * IC, 0.5f), *b = rnd(13, C, 1);
    float *dy = rnd(14, (size_t)BT * C, 1), *dw0 = rnd(15, (size_t)C * IC, 1), *db0 = rnd(16, C, 1);
    ct_view X = put(c, x, BT * IC), W = put(c, w, C * IC), Bv = put(c, b, C);
    ct_view Y = put(c, NULL, BT * C), DY = put(c, dy, BT * C), DX = put(c, NULL, BT * IC);
    ct_view DW = put(c, dw0, C * IC), DB = put(c, db0, C);
    CT_REQUIRE_OK(ct_tp_row_forward(c->dev, NULL, Y, Y, X, W, Bv, B_, T_, IC, C),
                  ct_device_errmsg(c->dev));
    CT_REQUIRE_OK(
        ct_tp_row_backward(c->dev, NULL, DX, DW, DB, DY, ct_view_none(), X, W, B_, T_, IC, C),
        ct_device_errmsg(c->dev));
    float *y = get(c, Y, BT * C), *dx = get(c, DX, BT * IC), *dw = get(c, DW, C * IC);
    float *db = get(c, DB, C);
    float *xl = cols(x, BT, IC, (size_t)r * ICl, ICl), *wl = cols(w, C, IC, (size_t)r * ICl, ICl);
    float *dw0l = cols(dw0, C, IC, (size_t)r * ICl, ICl);
    ct_view xv = put(c, xl, BT * ICl), wv = put(c, wl, C * ICl), bv = put(c, b, C);
    ct_view part = put(c, NULL, BT * C), dyv = put(c, dy + (sp ? (size_t)r * BTl * C : 0), BTl * C);
    ct_view dfull = put(c, NULL, BT * C), dxv = put(c, NULL, BT * ICl);
    ct_view dwv = put(c, dw0l, C * ICl), dbv = put(c, db0, C);
    CT_REQUIRE_OK(ct_tp_row_forward(c->dev, tp, part, part, xv, wv, bv, B_, T_, ICl, C),
                  ct_device_errmsg(c->dev));
    CT_REQUIRE_OK(ct_tp_row_backward(c->dev, tp, dxv, dwv, dbv, dyv, dfull, xv, wv, B_, T_, ICl, C),
                  ct_device_errmsg(c->dev));
    float *yg = get(c, part, BTl * C), *dxg = get(c, dxv, BT * ICl), *dwg = get(c, dwv, C * ICl);
    float *dbg = get(c, dbv, C);
    float *dxr = cols(dx, BT, IC, (size_t)r * ICl, ICl), *dwr = cols(dw, C, IC, (size_t)r * ICl, ICl);
    const char *m = sp ? "SP" : "no SP";
    CLOSE(yg, y + (sp ? (size_t)r * BTl * C : 0), BTl * C, 1e-5, "row-parallel forward (%s, N %d)",
          m, N);
    CLOSE(dxg, dxr, BT * ICl, 1e-6, "row-parallel dinp (%s, N %d)", m, N);
    CLOSE(dwg, dwr, C * ICl, 1e-6, "row-parallel dW (%s, N %d)", m, N);
    CLOSE(dbg, db, C, 1e-6, "row-parallel db (%s, N %d)", m, N);
    CT_ASSERT_MSG(same_everywhere(c, dbg, C), "the replicated bias gradient differs between workers");
    free(x), free(w), free(b), free(dy), free(dw0), free(db0), free(y), free(dx), free(dw), free(db);
    free(xl), free(wl), free(dw0l), free(yg), free(dxg), free(dwg), free(dbg), free(dxr), free(dwr);
}

static void test_attention(ctx *c) {
    const int C = 24, NH = 12, N = c->N, r = c->r, Cl = C / N, NHl = NH / N;
    c->at = 0;
    float *qkv = rnd(21, (size_t)BT * 3 * C, 1), *dy = rnd(22, (size_t)BT * C, 1);
    size_t att = (size_t)B_ * NH * T_ * T_;
    ct_view Q = put(c, qkv, BT * 3 * C), Y = put(c, NULL, BT * C), QR = put(c, NULL, BT * 3 * C);
    ct_view A = put(c, NULL, att), VA = put(c, NULL, BT * C), DY = put(c, dy, BT * C);
    ct_view DQ = put(c, NULL, BT * 3 * C), DQR = put(c, NULL, BT * 3 * C), DA = put(c, NULL, 2 * att);
    ct_view DVA = put(c, NULL, BT * C);
    CT_REQUIRE_OK(ct_attention_forward(c->dev, Y, QR, A, Q, VA, B_, T_, C, NH),
                  ct_device_errmsg(c->dev));
    CT_REQUIRE_OK(ct_attention_backward(c->dev, DQ, DQR, DA, DVA, DY, QR, A, B_, T_, C, NH),
                  ct_device_errmsg(c->dev));
    float *y = get(c, Y, BT * C), *dq = get(c, DQ, BT * 3 * C);
    /* this worker's heads: its Cl columns of each of the Q, K and V sections */
    float *ql = malloc((size_t)BT * 3 * Cl * 4), *dqr = malloc((size_t)BT * 3 * Cl * 4);
    for (size_t i = 0; i < BT; i++)
        for (int s = 0; s < 3; s++) {
            memcpy(ql + (i * 3 + s) * Cl, qkv + i * 3 * C + (size_t)s * C + (size_t)r * Cl, Cl * 4);
            memcpy(dqr + (i * 3 + s) * Cl, dq + i * 3 * C + (size_t)s * C + (size_t)r * Cl, Cl * 4);
        }
    float *dyl = cols(dy, BT, C, (size_t)r * Cl, Cl), *yr = cols(y, BT, C, (size_t)r * Cl, Cl);
    size_t attl = att / N;
    ct_view q = put(c, ql, BT * 3 * Cl), yv = put(c, NULL, BT * Cl), qr = put(c, NULL, BT * 3 * Cl);
    ct_view a = put(c, NULL, attl), va = put(c, NULL, BT * Cl), dyv = put(c, dyl, BT * Cl);
    ct_view dqv = put(c, NULL, BT * 3 * Cl), dqrv = put(c, NULL, BT * 3 * Cl), da = put(c, NULL, 2 * attl);
    ct_view dva = put(c, NULL, BT * Cl);
    CT_REQUIRE_OK(ct_attention_forward(c->dev, yv, qr, a, q, va, B_, T_, Cl, NHl),
                  ct_device_errmsg(c->dev));
    CT_REQUIRE_OK(ct_attention_backward(c->dev, dqv, dqrv, da, dva, dyv, qr, a, B_, T_, Cl, NHl),
                  ct_device_errmsg(c->dev));
    float *yg = get(c, yv, BT * Cl), *dqg = get(c, dqv, BT * 3 * Cl);
    CLOSE(yg, yr, BT * Cl, 1e-6, "attention on heads %d..%d: output", r * NHl, (r + 1) * NHl - 1);
    CLOSE(dqg, dqr, BT * 3 * Cl, 1e-6, "attention on heads %d..%d: dqkv", r * NHl, (r + 1) * NHl - 1);
    free(qkv), free(dy), free(y), free(dq), free(ql), free(dqr), free(dyl), free(yr), free(yg), free(dqg);
}

static void test_embed(ctx *c, ct_tp *tp, int sp) {
    const int C = 10, V = 45, Vp = 48, N = c->N, r = c->r, Vl = Vp / N;
    size_t BTl = sp ? BT / N : BT;
    c->at = 0;
    int tok[BT];
    for (int i = 0; i < BT; i++) tok[i] = (i * 7 + 3) % V; /* 36 positions cover every rank */
    tok[5] = tok[9]; /* a row hit twice */
    float *wte = rnd(31, (size_t)Vp * C, 1), *wpe = rnd(32, (size_t)T_ * C, 1);
    float *dy = rnd(33, (size_t)BT * C, 1), *dwte0 = rnd(34, (size_t)Vp * C, 1);
    float *dwpe0 = rnd(35, (size_t)T_ * C, 1);
    ct_view TK = put(c, tok, BT), WTE = put(c, wte, Vp * C), WPE = put(c, wpe, T_ * C);
    ct_view Y = put(c, NULL, BT * C), DY = put(c, dy, BT * C), DWTE = put(c, dwte0, Vp * C);
    ct_view DWPE = put(c, dwpe0, T_ * C);
    CT_REQUIRE_OK(ct_tp_embed_forward(c->dev, NULL, Y, ct_view_none(), TK, WTE, WPE, B_, T_, C, Vp),
                  ct_device_errmsg(c->dev));
    CT_REQUIRE_OK(
        ct_tp_embed_backward(c->dev, NULL, DWTE, DWPE, DY, ct_view_none(), TK, B_, T_, C, Vp),
        ct_device_errmsg(c->dev));
    float *y = get(c, Y, BT * C), *dwte = get(c, DWTE, Vp * C), *dwpe = get(c, DWPE, T_ * C);
    ct_view wtel = put(c, wte + (size_t)r * Vl * C, Vl * C), wpev = put(c, wpe, T_ * C);
    ct_view yl = put(c, NULL, BTl * C), part = put(c, NULL, BT * C);
    ct_view dyl = put(c, dy + (sp ? (size_t)r * BTl * C : 0), BTl * C), dfull = put(c, NULL, BT * C);
    ct_view dwtel = put(c, dwte0 + (size_t)r * Vl * C, Vl * C), dwpev = put(c, dwpe0, T_ * C);
    CT_REQUIRE_OK(ct_tp_embed_forward(c->dev, tp, yl, part, TK, wtel, wpev, B_, T_, C, Vp),
                  ct_device_errmsg(c->dev));
    CT_REQUIRE_OK(ct_tp_embed_backward(c->dev, tp, dwtel, dwpev, dyl, dfull, TK, B_, T_, C, Vp),
                  ct_device_errmsg(c->dev));
    float *yg = get(c, yl, BTl * C), *dwteg = get(c, dwtel, Vl * C), *dwpeg = get(c, dwpev, T_ * C);
    const float *yr = y + (sp ? (size_t)r * BTl * C : 0);
    CT_ASSERT_MSG(memcmp(yg, yr, BTl * C * 4) == 0,
                  "vocabulary-parallel embedding: not bitwise the single device's (%s, N %d)",
                  sp ? "SP" : "no SP", N);
    CLOSE(dwteg, dwte + (size_t)r * Vl * C, Vl * C, 1e-6, "vocabulary-parallel dwte rows");
    CLOSE(dwpeg, dwpe, T_ * C, 1e-6, "vocabulary-parallel dwpe");
    free(wte), free(wpe), free(dy), free(dwte0), free(dwpe0), free(y), free(dwte), free(dwpe);
    free(yg), free(dwteg), free(dwpeg);
}

static void test_ce(ctx *c, ct_tp *tp, int V) {
    const int Vp = 48, N = c->N, r = c->r, Vl = Vp / N;
    c->at = 0;
    float *lg = rnd(41 + (uint64_t)V, (size_t)BT * Vp, 4);
    for (size_t i = 0; i < BT; i++)
        for (int v = V; v < Vp; v++) lg[i * Vp + v] = 1e4f; /* padding must not leak in */
    int tg[BT];
    for (int i = 0; i < BT; i++) tg[i] = (i * 11 + 1) % V;
    int ranks_hit = 0;
    for (int k = 0; k < N; k++) {
        int hit = 0;
        for (int i = 0; i < BT; i++) hit |= tg[i] / Vl == k;
        ranks_hit += hit;
    }
    ct_view L = put(c, lg, BT * Vp), TG = put(c, tg, BT), LS = put(c, NULL, BT), LSE = put(c, NULL, BT);
    CT_REQUIRE_OK(
        ct_tp_crossentropy_forward(c->dev, NULL, LS, LSE, ct_view_none(), L, TG, B_, T_, V, Vp),
        ct_device_errmsg(c->dev));
    CT_REQUIRE_OK(ct_tp_crossentropy_backward(c->dev, NULL, L, LSE, TG, 0.5f, B_, T_, V, Vp),
                  ct_device_errmsg(c->dev));
    float *ls = get(c, LS, BT), *lse = get(c, LSE, BT), *dl = get(c, L, BT * Vp);
    float *lgl = cols(lg, BT, Vp, (size_t)r * Vl, Vl);
    ct_view l = put(c, lgl, BT * Vl), lsv = put(c, NULL, BT), lsev = put(c, NULL, BT);
    ct_view stats = put(c, NULL, 3 * BT);
    CT_REQUIRE_OK(ct_tp_crossentropy_forward(c->dev, tp, lsv, lsev, stats, l, TG, B_, T_, V, Vp),
                  ct_device_errmsg(c->dev));
    CT_REQUIRE_OK(ct_tp_crossentropy_backward(c->dev, tp, l, lsev, TG, 0.5f, B_, T_, V, Vp),
                  ct_device_errmsg(c->dev));
    float *lsg = get(c, lsv, BT), *lseg = get(c, lsev, BT), *dlg = get(c, l, BT * Vl);
    float *dlr = cols(dl, BT, Vp, (size_t)r * Vl, Vl);
    CLOSE(lsg, ls, BT, 1e-6, "vocabulary-parallel losses, V %d (targets on %d of %d workers)", V,
          ranks_hit, N);
    CLOSE(lseg, lse, BT, 1e-6, "vocabulary-parallel lse, V %d", V);
    CT_ASSERT_MSG(same_everywhere(c, lsg, BT), "the losses differ between TP workers (V %d)", V);
    CLOSE(dlg, dlr, BT * Vl, 1e-6, "vocabulary-parallel dlogits columns, V %d", V);
    if (c->r == 0 && V == 45) CT_ASSERT_MSG(ranks_hit == N, "the targets must hit every worker");
    free(lg), free(ls), free(lse), free(dl), free(lgl), free(lsg), free(lseg), free(dlg), free(dlr);
}

static void test_gather_scatter(ctx *c, ct_tp *tp) {
    const size_t n = 37; /* floats per worker */
    int N = c->N, r = c->r;
    c->at = 0;
    float *mine = rnd(51 + (uint64_t)r, n, 1), *big = rnd(61 + (uint64_t)r, n * N, 1);
    ct_view src = put(c, mine, n), dst = put(c, NULL, n * N), bsrc = put(c, big, n * N);
    ct_view bdst = put(c, NULL, n);
    CT_REQUIRE_OK(ct_tp_allgather(c->dev, tp, dst, src, n), ct_device_errmsg(c->dev));
    CT_REQUIRE_OK(ct_tp_reduce_scatter(c->dev, tp, bdst, bsrc, n), ct_device_errmsg(c->dev));
    float *g = get(c, dst, n * N), *s = get(c, bdst, n);
    double eg = 0, es = 0;
    for (int k = 0; k < N; k++) {
        float *o = rnd(51 + (uint64_t)k, n, 1);
        for (size_t i = 0; i < n; i++) eg = fmax(eg, fabs(g[k * n + i] - o[i]));
        free(o);
    }
    for (size_t i = 0; i < n; i++) {
        double sum = 0;
        for (int k = 0; k < N; k++) {
            float *o = rnd(61 + (uint64_t)k, n * N, 1);
            sum += o[(size_t)r * n + i];
            free(o);
        }
        es = fmax(es, fabs(s[i] - sum));
    }
    CT_ASSERT_MSG(eg == 0, "all-gather of rows: worst difference %g", eg);
    CT_ASSERT_MSG(es <= 1e-5, "reduce-scatter of rows: worst difference %g", es);
    free(mine), free(big), free(g), free(s);
}

/* ------------------------------------------------------------------ the whole model */

static void test_model(ctx *c, ct_grid *grid, int sp) {
    ct_gpt_config cfg = {T_, 45, 48, 2, 12, 24, 0, 0, 0, 0, 0, 0, 0, 0};
    ct_err err = {0};
    ct_layout one = {1, 1, 1, 0, 1}, lay = {1, c->N, 1, 0, 1};
    ct_coords at0 = {0, 0, 0, 0};
    ct_model *ref = NULL, *m = NULL;
    ct_exec *xr = NULL, *x = NULL;
    CT_REQUIRE_OK(ct_model_create(&ref, &cfg, &one, &at0, c->dev, B_, T_, &err), err.msg);
    ct_model_plan pl;
    memset(&pl, 0, sizeof pl);
    pl.max_B = B_, pl.max_T = T_, pl.slots = 1, pl.tp = ct_grid_tp(grid), pl.sp = sp;
    pl.tp_comm = c->tp_comm;
    CT_REQUIRE_OK(ct_model_create_plan(&m, &cfg, &lay, ct_grid_coords(grid), c->dev, &pl, &err),
                  err.msg);
    CT_REQUIRE_OK(ct_exec_create(&xr, ref, NULL, NULL, &err), err.msg);
    CT_REQUIRE_OK(ct_exec_create(&x, m, grid, NULL, &err), err.msg);
    size_t np = ct_model_num_params(ref);
    float *p = rnd(71, np, 0.3f); /* moderate random parameters: every gradient non-trivial */
    CT_REQUIRE_OK(ct_model_set_params(ref, p, np), ct_model_errmsg(ref));
    CT_REQUIRE_OK(ct_model_set_params(m, p, np), ct_model_errmsg(m));
    int tok[BT], tg[BT];
    for (int i = 0; i < BT; i++) tok[i] = (i * 13 + 5) % 45, tg[i] = (i * 17 + 2) % 45;
    /* one forward and backward each through its executor (a step that updates nothing); the
     * TP executor's gradient ranges sum the LayerNorms' gradients over the TP group under SP
     * (each worker's cover only its rows) */
    float *g1 = malloc(np * 4), *g2 = malloc(np * 4);
    ct_step_result r1, r2;
    ct_tp_stats ts0, ts1;
    ct_tp_stats_get(ct_model_tp(m), &ts0);
    CT_REQUIRE_OK(ct_test_exec_grads(xr, ref, tok, tg, B_, T_, g1, np, &r1), ct_exec_errmsg(xr));
    memcpy(g2, g1, np * 4); /* this worker's pieces overwrite its parts */
    CT_REQUIRE_OK(ct_test_exec_grads(x, m, tok, tg, B_, T_, g2, np, &r2), ct_exec_errmsg(x));
    ct_tp_stats_get(ct_model_tp(m), &ts1);
    float l1 = (float)r1.loss, l2 = (float)r2.loss;
    CT_ASSERT_MSG(fabs(l1 - l2) <= 1e-5 * fabs(l1), "model loss tp %d (%s): %.9g vs one device %.9g",
                  c->N, sp ? "SP" : "no SP", l2, l1);
    CT_ASSERT_MSG(same_everywhere(c, &l2, 1), "the loss differs between TP workers");
    /* SP was in effect: the model's activations went through reduce-scatters and all-gathers
     * of rows (what leaves each LayerNorm's gradient partial before the executor's sum) */
    if (sp && c->N > 1)
        CT_ASSERT_MSG(ts1.calls[1] > ts0.calls[1] && ts1.calls[2] > ts0.calls[2],
                      "SP: the model step made %ld reduce-scatters and %ld all-gathers",
                      ts1.calls[1] - ts0.calls[1], ts1.calls[2] - ts0.calls[2]);
    /* worst error per tensor, relative to the tensor's largest gradient */
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        size_t off, cnt;
        ct_model_tensor(ref, i, &off, &cnt);
        if (cnt == 0) continue; /* a dense model's router: no elements */
        double e = rel(g2 + off, g1 + off, cnt), big = 0;
        for (size_t k = 0; k < cnt; k++) big = fmax(big, fabs(g1[off + k]));
        CT_ASSERT_MSG(big > 0 && e <= 2e-5, "model gradient %s (tp %d, %s): relative error %.3g",
                      ct_gpt_tensor_name(i), c->N, sp ? "SP" : "no SP", e);
    }
    /* and the pieces this worker's get_grads fills are exactly its layout (psi_tp floats) */
    float *g3 = malloc(np * 4);
    for (size_t k = 0; k < np; k++) g3[k] = NAN;
    CT_REQUIRE_OK(ct_model_get_grads(m, g3, np), ct_model_errmsg(m));
    size_t got = 0;
    for (size_t k = 0; k < np; k++) got += !isnan(g3[k]);
    size_t psi_tp = ct_params_local_len(ct_model_params(m));
    CT_ASSERT_MSG(got == psi_tp, "this worker's pieces cover %zu floats, its layout %zu", got, psi_tp);
    free(g1), free(g2), free(g3), free(p);
    ct_exec_free(x);
    ct_exec_free(xr);
    ct_model_free(m);
    ct_model_free(ref);
}

static void test_refusals(ctx *c, ct_grid *grid) {
    ct_err err = {0};
    int N = c->N;
    if (N < 2) return;
    /* the checks, pure */
    ct_gpt_config bad_h = {T_, 45, 48, 2, 2 * N + 1, 24 * (2 * N + 1), 0, 0, 0, 0, 0, 0, 0, 0};
    CT_ASSERT_EQ_INT(ct_model_tp_check(&bad_h, N, 0, T_, &err), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(err.msg, "attention heads");
    ct_gpt_config bad_v = {T_, 45, 48 * N + 1, 2, 12, 24, 0, 0, 0, 0, 0, 0, 0, 0};
    CT_ASSERT_EQ_INT(ct_model_tp_check(&bad_v, N, 0, T_, &err), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(err.msg, "padded vocabulary");
    ct_gpt_config ok = {T_, 45, 48, 2, 12, 24, 0, 0, 0, 0, 0, 0, 0, 0};
    CT_ASSERT_EQ_INT(ct_model_tp_check(&ok, N, 1, T_ + 1, &err), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(err.msg, "sequence length");
    CT_ASSERT_EQ_INT(ct_model_tp_check(&ok, N, 0, T_ + 1, &err), CT_OK);
    /* a model without its TP group */
    ct_layout lay = {1, N, 1, 0, 1};
    ct_model *m = NULL;
    ct_status st = ct_model_create(&m, &ok, &lay, ct_grid_coords(grid), c->dev, B_, T_, &err);
    CT_ASSERT_EQ_INT(st, CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(err.msg, "needs the TP group");
    /* a forward at a sequence SP cannot split, on every worker together: refused, no hang */
    ct_model_plan pl;
    memset(&pl, 0, sizeof pl);
    pl.max_B = B_, pl.max_T = T_, pl.slots = 1, pl.tp = ct_grid_tp(grid), pl.sp = 1;
    CT_REQUIRE_OK(ct_model_create_plan(&m, &ok, &lay, ct_grid_coords(grid), c->dev, &pl, &err),
                  err.msg);
    ct_exec *x = NULL;
    CT_REQUIRE_OK(ct_exec_create(&x, m, grid, NULL, &err), err.msg);
    /* with targets (a training or evaluation batch: not padded as a generation context is) */
    int tok[BT] = {0};
    float l;
    st = ct_exec_forward(x, tok, tok, B_, T_ - 1, &l, NULL);
    CT_ASSERT_EQ_INT(st, CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_exec_errmsg(x), "not a multiple of tp");
    ct_exec_free(x);
    ct_model_free(m);
}

/* "rows": every device runs the work-group-per-row reduction kernels (GPUs' family) */
static int g_row_groups = -1;

static void worker(ct_topo *topo, int thread, ct_device_info *info, cl_context shared) {
    ct_err err = {0};
    ctx c;
    memset(&c, 0, sizeof c);
    ct_comm *world = NULL;
    CT_REQUIRE_OK(ct_comm_world(topo, thread, &world), "world");
    int W = ct_comm_size(world);
    ct_layout lay = {1, W, 1, 0, 1};
    ct_grid *grid = NULL;
    CT_REQUIRE_OK(ct_grid_create(&grid, world, &lay, &err), err.msg);
    c.tpc = ct_grid_tp(grid);
    c.N = ct_comm_size(c.tpc), c.r = ct_comm_rank(c.tpc);
    ct_device_opts dopts = ct_device_opts_default();
    dopts.context = shared;
    dopts.row_groups = g_row_groups;
    CT_REQUIRE_OK(ct_device_open(&c.dev, info, &dopts, &err), err.msg);
    static const size_t part0 = 0;
    CT_REQUIRE_OK(ct_arena_alloc(c.dev, CT_MEM_ACTIVATIONS, "test arena", (size_t)4 << 20, &part0,
                                 NULL, 1, &c.arena),
                  ct_device_errmsg(c.dev));
    c.ab = ct_arena_at(c.arena, 0, NULL);
    ct_tp *tps[2] = {NULL, NULL};
    /* device-resident collectives where every member is a thread of this process sharing the
     * context (asked for: auto keeps a CPU device's on the host), otherwise staged through the
     * host */
    int dev_expected = shared && c.N > 1 && ct_comm_local_size(c.tpc) == c.N;
    c.tp_comm = dev_expected ? CT_TP_COMM_DEVICE : CT_TP_COMM_AUTO;
    for (int sp = 0; sp < 2; sp++) {
        ct_tp_opts o = ct_tp_opts_default();
        o.sp = sp;
        o.comm = c.tp_comm;
        CT_REQUIRE_OK(ct_tp_create(&tps[sp], c.tpc, c.dev, c.arena, (size_t)1 << 16, &o, &err),
                      err.msg);
        CT_ASSERT_MSG(ct_tp_device_comm(tps[sp]) == dev_expected,
                      "TP communication is %s, expected %s (N %d, %d in this process)",
                      ct_tp_device_comm(tps[sp]) ? "device" : "host",
                      dev_expected ? "device" : "host", c.N, ct_comm_local_size(c.tpc));
    }
    if (shared && c.N > 1 && ct_comm_local_size(c.tpc) == c.N) {
        /* auto on a CPU device keeps the host staging (a memcpy there); elsewhere the device */
        ct_tp_opts o = ct_tp_opts_default();
        ct_tp *a = NULL;
        CT_REQUIRE_OK(ct_tp_create(&a, c.tpc, c.dev, c.arena, 64, &o, &err), err.msg);
        int cpu = (ct_device_get_info(c.dev)->type & CL_DEVICE_TYPE_CPU) != 0;
        CT_ASSERT_MSG(ct_tp_device_comm(a) == !cpu, "auto chose %s on a %s device",
                      ct_tp_device_comm(a) ? "device" : "host", cpu ? "CPU" : "non-CPU");
        ct_tp_free(a);
    }
    if (shared && c.N > 1 && ct_comm_local_size(c.tpc) < c.N) {
        /* device mode asked for across processes: refused on every worker alike */
        ct_tp_opts o = ct_tp_opts_default();
        o.comm = CT_TP_COMM_DEVICE;
        ct_tp *bad = NULL;
        ct_status st = ct_tp_create(&bad, c.tpc, c.dev, c.arena, 64, &o, &err);
        CT_ASSERT_EQ_INT(st, CT_ERR_ARG);
        CT_ASSERT_STR_CONTAINS(err.msg, "spans processes");
    }
    for (int sp = 0; sp < 2; sp++) {
        test_col(&c, tps[sp], sp, 1);
        test_col(&c, tps[sp], sp, 0);
        test_row(&c, tps[sp], sp);
        test_embed(&c, tps[sp], sp);
    }
    test_attention(&c);
    test_ce(&c, tps[0], 45);
    test_ce(&c, tps[0], 20);
    test_gather_scatter(&c, tps[1]);
    ct_tp_stats s;
    ct_tp_stats_get(tps[1], &s);
    if (c.N > 1)
        CT_ASSERT_MSG(s.calls[1] > 0 && s.calls[2] > 0 && s.wire_bytes > 0,
                      "SP counted %ld reduce-scatters, %ld all-gathers, %.0f bytes", s.calls[1],
                      s.calls[2], s.wire_bytes);
    ct_tp_free(tps[0]);
    ct_tp_free(tps[1]);
    ct_arena_free(c.arena);
    for (int sp = 0; sp < 2; sp++) test_model(&c, grid, sp);
    test_refusals(&c, grid);
    if (ct_comm_rank(world) == 0) printf("N = %d: pieces, model and refusals checked\n", c.N);
    ct_device_free(c.dev);
    ct_grid_free(grid);
    ct_comm_free(world);
}

int main(int argc, char **argv) {
    int D = argc > 1 ? atoi(argv[1]) : 1;
    /* "shared": every thread opens the first device in one context (workers sharing a device:
     * TP's collectives then stay on the device) */
    int shared = argc > 2 && !strcmp(argv[2], "shared");
    if (argc > 2 && !strcmp(argv[2], "rows")) g_row_groups = 1;
    ct_err err = {0};
    ct_topo *topo = NULL;
    CT_REQUIRE_OK_OR(ct_topo_create(&topo, &argc, &argv, D, &err), err.msg, 1);
    ct_test_mpi_begin();
    /* CPU devices (PoCL: one per POCL_DEVICES entry) unless CT_DEVICE names others; workers
     * share a device when there are fewer (each its own context and queue, or one
     * context with "shared") */
    ct_test_devices ds;
    CT_REQUIRE_OR(!ct_test_devices_find(&ds, "cpu", 0), 1, "no device");
    int np = ds.npick;
    ct_device *holder = NULL;
    if (shared) {
        ct_device_opts o = ct_device_opts_default();
        CT_ASSERT_OK(ct_device_open(&holder, &ds.list[ds.pick[0]], &o, &err), err.msg);
        np = 1;
    }
#pragma omp parallel num_threads(D)
    worker(topo, omp_get_thread_num(), &ds.list[ds.pick[omp_get_thread_num() % np]],
           holder ? ct_device_context(holder) : NULL);
    ct_device_free(holder);
    ct_test_devices_free(&ds);
    int rc = ct_test_mpi_end("test_engine_tp");
    ct_topo_free(topo);
    return rc;
}
