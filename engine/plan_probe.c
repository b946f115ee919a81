/* plan_probe.c - the layout planner's measurements: what a worker's device takes for one block,
 * the embedding and the head at the shapes a layout gives it (the engine's own ops, in the
 * order engine/model.c runs them), one host staging copy, the optimizer per element, how much
 * host work hides behind device work, and the links (alpha-beta per collective, group size and
 * placement) over groups laid out as the layouts lay them. Every worker measures at once, so
 * workers sharing a host (PoCL devices) are measured as they will run; the results are averaged
 * (compute) or taken at the slowest member (links) over the world, so every worker ends with
 * the same costs and ranks the layouts the same way. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_plan.h"

/* ------------------------------------------------------------------ small helpers */

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ------------------------------------------------------------------ compute */

/* The sequences timed: each the ops engine/model.c enqueues for that piece, at this worker's
 * shapes (TP: its heads, MLP and vocabulary columns; SP: its rows outside the TP regions). */
enum { SEQ_FWD, SEQ_BWD, SEQ_BWD_IN, SEQ_BWD_W, SEQ_DW_COL, SEQ_DX, SEQ_EMB_FWD, SEQ_EMB_BWD,
       SEQ_HEAD_FWD, SEQ_HEAD_BWD, SEQ_HEAD_DW, SEQ__N };

typedef struct probe {
    ct_device *dev;
    ct_buffer *buf;
    cl_mem mem;
    int b, T, C, Cl, NHl, Cq, F, Vl, V, Vp, rows, tp;
    ct_attn_path attn;
    const ct_attn_cfg *acfg;
    /* regions (floats) */
    size_t x, ln, mean, rstd, qkv, qkvr, att, vac, atty, proj, res2, fch, fchg, dA, dB, dres, dqkvr,
        datt, dvac, logits, losses, lse, stats, tokens, targets, wg, w, g, total;
    size_t qkvw, qkvb, apw, apb, fcw, fcb, fpw, fpb, lnw, lnb, wte, wpe, nw;
} probe;

static void probe_plan(probe *p) {
    size_t BT = (size_t)p->b * p->T, C = (size_t)p->C, o = 0;
    size_t att = p->attn == CT_ATTN_FUSED ? (size_t)p->b * p->NHl * p->T
                                          : (size_t)p->b * p->NHl * p->T * p->T;
    size_t big = (size_t)p->F > C ? (size_t)p->F : C;
    if ((size_t)p->Cq > big) big = (size_t)p->Cq;
#define R(f, n) (p->f = o, o += ((size_t)(n) + 15) / 16 * 16)
    R(x, BT * C);
    R(ln, BT * C);
    R(mean, BT);
    R(rstd, BT);
    R(qkv, BT * p->Cq);
    R(qkvr, BT * p->Cq);
    R(att, att);
    R(vac, BT * p->Cl);
    R(atty, BT * p->Cl);
    R(proj, BT * C);
    R(res2, BT * C);
    R(fch, BT * p->F);
    R(fchg, BT * p->F);
    R(dA, BT * big);
    R(dB, BT * big);
    R(dres, BT * C);
    R(dqkvr, BT * p->Cq);
    R(datt, 2 * att);
    R(dvac, BT * p->Cl);
    R(logits, BT * p->Vl);
    R(losses, BT);
    R(lse, BT);
    R(stats, 3 * BT);
    R(tokens, BT);
    R(targets, BT);
    R(wg, 4 * BT * C);
    size_t w0 = o;
    R(qkvw, (size_t)p->Cq * C);
    R(qkvb, p->Cq);
    R(apw, C * p->Cl);
    R(apb, C);
    R(fcw, (size_t)p->F * C);
    R(fcb, p->F);
    R(fpw, C * p->F);
    R(fpb, C);
    R(lnw, C);
    R(lnb, C);
    R(wte, (size_t)p->Vl * C);
    R(wpe, (size_t)p->T * C);
    p->nw = o - w0;
    p->w = w0;
    p->g = o;
    o += p->nw; /* the gradients: the same layout, nw floats on */
#undef R
    p->total = o;
}

#define V(f) ct_view_of(p->mem, p->f)
#define G(f) ct_view_of(p->mem, p->f + (p->g - p->w))

static ct_status attn_fwd(probe *p) {
    int C = p->Cl, NH = p->NHl;
    if (p->attn == CT_ATTN_FUSED)
        return ct_attention_fused_forward(p->dev, p->acfg, V(atty), V(att), V(qkvr), p->b, p->T, C, NH);
    return ct_attention_forward(p->dev, V(atty), V(qkvr), V(att), V(qkv), V(vac), p->b, p->T, C, NH);
}
static ct_status attn_bwd(probe *p) {
    int C = p->Cl, NH = p->NHl;
    if (p->attn == CT_ATTN_FUSED)
        return ct_attention_fused_backward(p->dev, p->acfg, V(dB), V(datt), V(dA), V(qkvr), V(atty),
                                           V(att), p->b, p->T, C, NH);
    return ct_attention_backward(p->dev, V(dB), V(dqkvr), V(datt), V(dvac), V(dA), V(qkvr), V(att),
                                 p->b, p->T, C, NH);
}

/* Enqueue one sequence; the caller finishes the queue. */
static ct_status run_seq(probe *p, int seq) {
    ct_device *d = p->dev;
    int b = p->b, T = p->T, C = p->C, F = p->F, Cq = p->Cq, Cl = p->Cl, Vl = p->Vl;
    size_t BT = (size_t)b * T, rowsC = (size_t)p->rows * C;
    ct_view none = ct_view_none();
    size_t f4 = sizeof(float);
    ct_status st = CT_OK;
#define DO(e)                                                                                      \
    do {                                                                                           \
        if ((st = (e)) != CT_OK) return st;                                                        \
    } while (0)
    switch (seq) {
    case SEQ_FWD:
        DO(ct_layernorm_forward(d, V(ln), V(mean), V(rstd), V(x), V(lnw), V(lnb), 1, p->rows, C));
        DO(ct_matmul_forward(d, p->attn == CT_ATTN_FUSED ? V(qkvr) : V(qkv), V(ln), V(qkvw), V(qkvb),
                             b, T, C, Cq));
        DO(attn_fwd(p));
        DO(ct_matmul_forward(d, V(proj), V(atty), V(apw), V(apb), b, T, Cl, C));
        DO(ct_residual_forward(d, V(res2), V(x), V(proj), rowsC));
        DO(ct_layernorm_forward(d, V(ln), V(mean), V(rstd), V(res2), V(lnw), V(lnb), 1, p->rows, C));
        DO(ct_matmul_forward(d, V(fch), V(ln), V(fcw), V(fcb), b, T, C, F));
        DO(ct_gelu_forward(d, V(fchg), V(fch), BT * (size_t)F));
        DO(ct_matmul_forward(d, V(proj), V(fchg), V(fpw), V(fpb), b, T, F, C));
        DO(ct_residual_forward(d, V(x), V(res2), V(proj), rowsC));
        break;
    case SEQ_BWD:
        DO(ct_matmul_backward(d, V(dA), G(fpw), G(fpb), V(dres), V(fchg), V(fpw), b, T, F, C));
        DO(ct_gelu_backward(d, V(dB), V(fch), V(dA), BT * (size_t)F));
        DO(ct_matmul_backward(d, V(dA), G(fcw), G(fcb), V(dB), V(ln), V(fcw), b, T, C, F));
        DO(ct_layernorm_backward(d, V(dres), G(lnw), G(lnb), V(dA), V(res2), V(lnw), V(mean),
                                 V(rstd), 1, p->rows, C, 1));
        DO(ct_matmul_backward(d, V(dA), G(apw), G(apb), V(dres), V(atty), V(apw), b, T, Cl, C));
        DO(attn_bwd(p));
        DO(ct_matmul_backward(d, V(dA), G(qkvw), G(qkvb), V(dB), V(ln), V(qkvw), b, T, C, Cq));
        DO(ct_layernorm_backward(d, V(dres), G(lnw), G(lnb), V(dA), V(x), V(lnw), V(mean), V(rstd),
                                 1, p->rows, C, 1));
        break;
    case SEQ_BWD_IN: /* the zero-bubble input half: no weight products, the copies it keeps */
        DO(ct_mem_copy(d, p->mem, p->dres * f4, p->mem, p->wg * f4, rowsC * f4));
        DO(ct_matmul_backward(d, V(dA), none, none, V(dres), V(fchg), V(fpw), b, T, F, C));
        DO(ct_gelu_backward(d, V(dB), V(fch), V(dA), BT * (size_t)F));
        DO(ct_mem_copy(d, p->mem, p->dB * f4, p->mem, p->fch * f4, BT * (size_t)F * f4));
        DO(ct_matmul_backward(d, V(dA), none, none, V(dB), V(ln), V(fcw), b, T, C, F));
        DO(ct_layernorm_backward(d, V(dres), none, none, V(dA), V(res2), V(lnw), V(mean), V(rstd),
                                 1, p->rows, C, 1));
        DO(ct_mem_copy(d, p->mem, p->dres * f4, p->mem, (p->wg + rowsC) * f4, rowsC * f4));
        DO(ct_matmul_backward(d, V(dA), none, none, V(dres), V(atty), V(apw), b, T, Cl, C));
        DO(attn_bwd(p));
        DO(ct_mem_copy(d, p->mem, p->dB * f4, p->mem, p->qkvr * f4, BT * (size_t)Cq * f4));
        DO(ct_matmul_backward(d, V(dA), none, none, V(dB), V(ln), V(qkvw), b, T, C, Cq));
        DO(ct_layernorm_backward(d, V(dres), none, none, V(dA), V(x), V(lnw), V(mean), V(rstd), 1,
                                 p->rows, C, 1));
        break;
    case SEQ_BWD_W:
        DO(ct_matmul_backward(d, none, G(fpw), G(fpb), V(dres), V(fchg), none, b, T, F, C));
        DO(ct_matmul_backward(d, none, G(fcw), G(fcb), V(dB), V(ln), none, b, T, C, F));
        DO(ct_layernorm_backward(d, none, G(lnw), G(lnb), V(dA), V(res2), none, V(mean), V(rstd),
                                 1, p->rows, C, 0));
        DO(ct_matmul_backward(d, none, G(apw), G(apb), V(dres), V(atty), none, b, T, Cl, C));
        DO(ct_matmul_backward(d, none, G(qkvw), G(qkvb), V(dB), V(ln), none, b, T, C, Cq));
        DO(ct_layernorm_backward(d, none, G(lnw), G(lnb), V(dA), V(x), none, V(mean), V(rstd), 1,
                                 p->rows, C, 0));
        break;
    case SEQ_DW_COL:
        DO(ct_matmul_backward(d, none, G(fcw), G(fcb), V(dB), V(ln), none, b, T, C, F));
        DO(ct_matmul_backward(d, none, G(qkvw), G(qkvb), V(dB), V(ln), none, b, T, C, Cq));
        break;
    case SEQ_DX:
        DO(ct_matmul_backward(d, V(dA), none, none, V(dB), V(ln), V(fcw), b, T, C, F));
        DO(ct_matmul_backward(d, V(dA), none, none, V(dB), V(ln), V(qkvw), b, T, C, Cq));
        break;
    case SEQ_EMB_FWD:
        if (p->tp > 1)
            DO(ct_encoder_forward_vp(d, V(x), V(tokens), V(wte), V(wpe), b, T, C, 0, Vl, 1));
        else
            DO(ct_encoder_forward(d, V(x), V(tokens), V(wte), V(wpe), b, T, C, p->Vp));
        break;
    case SEQ_EMB_BWD:
        if (p->tp > 1)
            DO(ct_encoder_backward_vp(d, G(wte), G(wpe), V(dres), V(tokens), b, T, C, 0, Vl));
        else
            DO(ct_encoder_backward(d, G(wte), G(wpe), V(dres), V(tokens), b, T, C, p->Vp));
        break;
    case SEQ_HEAD_FWD: {
        DO(ct_layernorm_forward(d, V(ln), V(mean), V(rstd), V(x), V(lnw), V(lnb), 1, p->rows, C));
        DO(ct_matmul_forward(d, V(logits), V(ln), V(wte), none, b, T, C, Vl));
        if (p->tp > 1) {
            int nreal = p->V < Vl ? p->V : Vl;
            ct_view mx = V(stats), sums = ct_view_at(V(stats), BT);
            DO(ct_crossentropy_vp_max(d, mx, V(logits), b, T, Vl, nreal));
            DO(ct_crossentropy_vp_sums(d, sums, V(logits), mx, V(targets), b, T, Vl, nreal, 0));
            DO(ct_crossentropy_vp_finish(d, V(losses), V(lse), mx, sums, b, T));
        } else {
            DO(ct_crossentropy_forward(d, V(losses), V(lse), V(logits), V(targets), b, T, p->V, p->Vp));
        }
        DO(ct_mean_forward(d, V(stats), V(losses), BT));
        break;
    }
    case SEQ_HEAD_BWD:
        if (p->tp > 1)
            DO(ct_crossentropy_vp_backward(d, V(logits), V(lse), V(targets), 1.0f / (float)BT, b, T,
                                           Vl, p->V < Vl ? p->V : Vl, 0));
        else
            DO(ct_crossentropy_backward(d, V(logits), V(logits), V(lse), V(targets), 1.0f / (float)BT,
                                        b, T, p->V, p->Vp));
        DO(ct_matmul_backward(d, V(dA), G(wte), none, V(logits), V(ln), V(wte), b, T, C, Vl));
        DO(ct_layernorm_backward(d, V(dres), G(lnw), G(lnb), V(dA), V(x), V(lnw), V(mean), V(rstd),
                                 1, p->rows, C, 0));
        break;
    case SEQ_HEAD_DW:
        DO(ct_matmul_backward(d, none, G(wte), none, V(logits), V(ln), none, b, T, C, Vl));
        break;
    }
#undef DO
    return st;
}
#undef V
#undef G

/* One timed run of every sequence at this worker's shape (after an untimed run of each when
 * `warm`: the first time compiles kernels), ms into t[SEQ__N]. */
static ct_status probe_compute(ct_device *dev, const ct_plan_problem *pb, ct_attn_path attn,
                               const ct_attn_cfg *acfg, const ct_plan_compute *k, int warm,
                               double *t, ct_err *err) {
    const ct_gpt_config *c = &pb->cfg;
    probe p;
    memset(&p, 0, sizeof p);
    p.dev = dev, p.b = k->b, p.T = pb->T, p.C = c->channels, p.tp = k->tp;
    p.Cl = c->channels / k->tp, p.NHl = c->heads / k->tp, p.Cq = 3 * p.Cl, p.F = 4 * p.Cl;
    p.Vp = c->padded_vocab, p.Vl = c->padded_vocab / k->tp, p.V = c->vocab;
    p.rows = k->sp ? k->b * pb->T / k->tp : k->b * pb->T;
    p.attn = attn, p.acfg = acfg;
    probe_plan(&p);
    ct_status st = ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "planner probe", p.total * sizeof(float),
                                   &p.buf);
    if (st != CT_OK)
        return CT_ERR(err, st, "timing %d rows at tp %d: %s", k->b, k->tp, ct_device_errmsg(dev));
    p.mem = ct_buffer_mem(p.buf);
    for (int s = 0; s < SEQ__N && st == CT_OK; s++) {
        t[s] = 0;
        if (s == SEQ_BWD_IN && k->tp > 1) continue; /* no split backward under TP (refused) */
        if (warm && ((st = run_seq(&p, s)) != CT_OK || (st = ct_device_finish(dev)) != CT_OK)) break;
        double t0 = ct_time_now();
        if ((st = run_seq(&p, s)) != CT_OK || (st = ct_device_finish(dev)) != CT_OK) break;
        t[s] = 1e3 * (ct_time_now() - t0);
    }
    if (st != CT_OK)
        CT_ERR(err, st, "timing the block at %d rows, tp %d: %s", k->b, k->tp, ct_device_errmsg(dev));
    ct_buffer_free(p.buf);
    return st;
}

/* ------------------------------------------------------------------ copies, optimizer, overlap */

/* One host staging copy (the engine's device reads and writes), at a few sizes: alpha, beta. */
static ct_status probe_copy(ct_device *dev, double hi, int reps, double *alpha, double *beta,
                            ct_err *err) {
    double lim = 64.0 * 1048576.0;
    if (hi > lim) hi = lim;
    if (hi < 65536) hi = 65536;
    double sz[3] = {4096, sqrt(4096 * hi), hi}, t[3];
    ct_buffer *b = NULL;
    float *h = ct_malloc((size_t)hi);
    ct_status st = ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "planner copy probe", (size_t)hi, &b);
    if (!h && st == CT_OK) st = CT_ERR(err, CT_ERR_NOMEM, "no memory");
    else if (st != CT_OK) CT_ERR(err, st, "%s", ct_device_errmsg(dev));
    else memset(h, 0, (size_t)hi);
    for (int i = 0; i < 3 && st == CT_OK; i++) {
        size_t n = (size_t)sz[i] / 4 * 4;
        double v[32];
        int rr = reps > 32 ? 32 : reps;
        st = ct_buffer_read(b, 0, h, n);
        for (int r = 0; r < rr && st == CT_OK; r++) {
            double t0 = ct_time_now();
            st = ct_buffer_read(b, 0, h, n);
            if (st == CT_OK) st = ct_buffer_write(b, 0, h, n);
            v[r] = 0.5e3 * (ct_time_now() - t0);
        }
        if (st != CT_OK) CT_ERR(err, st, "%s", ct_device_errmsg(dev));
        else t[i] = median(v, rr);
    }
    if (st == CT_OK) ct_plan_fit(sz, t, 3, alpha, beta);
    ct_buffer_free(b);
    free(h);
    return st;
}

/* The optimizer's update (and norm) over n floats in one launch: alpha per launch, beta per float. */
static ct_status probe_opt(ct_device *dev, double lo, double hi, int reps, double *alpha,
                           double *beta, ct_err *err) {
    double cap = 16.0 * 1048576.0; /* floats; beyond it the fit extrapolates */
    if (hi > cap) hi = cap;
    if (lo < 1024) lo = 1024;
    if (hi < 4 * lo) hi = 4 * lo;
    double sz[2] = {lo, hi}, t[2];
    size_t n = (size_t)hi;
    ct_buffer *b = NULL;
    ct_status st = ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "planner optimizer probe",
                                   (4 * n + 1 + CT_NORM_PARTIALS) * sizeof(float), &b);
    if (st != CT_OK) return CT_ERR(err, st, "%s", ct_device_errmsg(dev));
    cl_mem m = ct_buffer_mem(b);
    for (int i = 0; i < 2 && st == CT_OK; i++) {
        size_t k = (size_t)sz[i];
        double v[32];
        int rr = reps > 32 ? 32 : reps;
        for (int r = -1; r < rr && st == CT_OK; r++) {
            double t0 = ct_time_now();
            st = ct_global_norm_forward(dev, ct_view_of(m, 4 * n), ct_view_of(m, 4 * n + 1),
                                        ct_view_of(m, n), k);
            if (st == CT_OK)
                st = ct_adamw_update(dev, ct_view_of(m, 0), ct_view_of(m, n), ct_view_of(m, 2 * n),
                                     ct_view_of(m, 3 * n), ct_view_of(m, 4 * n), 1.0f, k, 1e-4f,
                                     0.9f, 0.95f, 1e-8f, 0.1f, 1);
            if (st == CT_OK) st = ct_device_finish(dev);
            if (r >= 0) v[r] = 1e3 * (ct_time_now() - t0);
        }
        if (st != CT_OK) CT_ERR(err, st, "%s", ct_device_errmsg(dev));
        else t[i] = median(v, rr);
    }
    if (st == CT_OK) ct_plan_fit(sz, t, 2, alpha, beta);
    ct_buffer_free(b);
    return st;
}

/* What a collective's host work (copies and sums over staging memory) costs beside device
 * work: a GEMM enqueued, then a host loop of the same length, against each alone. Returns the
 * share of the shorter hidden (0: they add up, as on devices that share the host's cores; 1:
 * the longer alone, as on a GPU). */
static ct_status probe_overlap(ct_device *dev, int reps, double *share, ct_err *err) {
    const size_t M = 256, HN = (size_t)4 << 20; /* GEMM 256^3; host loop over 16 MiB */
    ct_buffer *b = NULL;
    float *h = ct_calloc(2 * HN, sizeof(float));
    ct_status st = ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "planner overlap probe",
                                   3 * M * M * sizeof(float), &b);
    if (st != CT_OK) {
        free(h);
        return CT_ERR(err, st, "%s", ct_device_errmsg(dev));
    }
    if (!h) {
        ct_buffer_free(b);
        return CT_ERR(err, CT_ERR_NOMEM, "no memory");
    }
    cl_mem m = ct_buffer_mem(b);
    volatile float sink = 0;
    /* calibrate the counts so each side takes about the same time */
    int ng = 1, nh = 1;
    double tg = 0, th = 0, tb = 0;
    for (int pass = 0; pass < 2 && st == CT_OK; pass++) {
        double t0 = ct_time_now();
        for (int i = 0; i < ng && st == CT_OK; i++)
            st = ct_gemm(dev, 0, 1, M, M, M, 1.0f, m, 0, M, m, M * M, M, 0.0f, m, 2 * M * M, M, NULL);
        if (st == CT_OK) st = ct_device_finish(dev);
        tg = ct_time_now() - t0;
        t0 = ct_time_now();
        for (int i = 0; i < nh; i++) {
            float s = 0;
            for (size_t j = 0; j < HN; j++) h[HN + j] += h[j], s += h[HN + j];
            sink += s;
        }
        th = ct_time_now() - t0;
        if (pass == 0) { /* aim at ~20 ms each */
            ng = (int)ceil(0.02 / (tg > 1e-5 ? tg : 1e-5));
            nh = (int)ceil(0.02 / (th > 1e-5 ? th : 1e-5));
            if (ng > 200) ng = 200;
            if (nh > 200) nh = 200;
        }
    }
    double v[16];
    int rr = reps > 16 ? 16 : (reps < 1 ? 1 : reps), got = 0;
    for (int r = 0; r < rr && st == CT_OK; r++) {
        double t0 = ct_time_now();
        for (int i = 0; i < ng && st == CT_OK; i++)
            st = ct_gemm(dev, 0, 1, M, M, M, 1.0f, m, 0, M, m, M * M, M, 0.0f, m, 2 * M * M, M, NULL);
        if (st == CT_OK) st = ct_device_flush(dev);
        for (int i = 0; i < nh; i++) {
            float s = 0;
            for (size_t j = 0; j < HN; j++) h[HN + j] += h[j], s += h[HN + j];
            sink += s;
        }
        if (st == CT_OK) st = ct_device_finish(dev);
        tb = ct_time_now() - t0;
        double lo = tg < th ? tg : th;
        double s = lo > 0 ? (tg + th - tb) / lo : 0;
        v[got++] = s < 0 ? 0 : (s > 1 ? 1 : s);
    }
    (void)sink;
    if (st != CT_OK) CT_ERR(err, st, "%s", ct_device_errmsg(dev));
    else *share = median(v, got);
    ct_buffer_free(b);
    free(h);
    return st;
}

/* ------------------------------------------------------------------ links */

/* The groups of pattern (n, stride) over W workers: blocks of n * stride workers, in each the
 * `stride` groups of n at that stride; workers past the last whole block join none. */
static ct_status split_pattern(ct_comm *world, int n, int stride, ct_comm **out) {
    int w = ct_comm_rank(world), W = ct_comm_size(world), blk = n * stride;
    int colour = (w / blk + 1) * blk <= W ? (w / blk) * stride + w % stride : CT_COMM_UNDEFINED;
    return ct_comm_split(world, colour, (w % blk) / stride, out);
}

/* One timed run of a collective of `bytes` over g (host memory). */
static ct_status link_once(ct_comm *g, int coll, float *buf, size_t bytes) {
    int n = ct_comm_size(g), r = ct_comm_rank(g);
    size_t count = bytes / sizeof(float);
    switch (coll) {
    case CT_COLL_ALLREDUCE: return ct_comm_allreduce(g, buf, buf, count, CT_F32, CT_OP_SUM, NULL);
    case CT_COLL_REDUCESCATTER:
        return ct_comm_reduce_scatter(g, buf, buf, count / (size_t)n, CT_F32, CT_OP_SUM, NULL);
    case CT_COLL_ALLGATHER:
        return ct_comm_allgather(g, buf + (size_t)r * (count / (size_t)n), buf, count / (size_t)n,
                                 CT_F32, NULL);
    default: { /* a pipeline message each way between the pair */
        ct_request *s = NULL, *q = NULL;
        ct_status st = ct_comm_isend(g, 1 - r, buf, bytes, &s);
        if (st == CT_OK) st = ct_comm_irecv(g, 1 - r, buf + count, bytes, &q);
        ct_status a = ct_comm_wait(q), b = ct_comm_wait(s);
        return st != CT_OK ? st : (a != CT_OK ? a : b);
    }
    }
}

static ct_status probe_link(ct_comm *world, ct_plan_link *k, int stride, int reps, FILE *log,
                            ct_err *err) {
    ct_comm *g = NULL;
    ct_status st = split_pattern(world, k->n, stride, &g);
    if (st != CT_OK) return CT_ERR(err, st, "calibration split: %s", ct_comm_errmsg(world));
    double lo = k->lo < 4 ? 4 : k->lo, hi = k->hi < lo ? lo : k->hi;
    if (hi < 4 * lo) hi = 4 * lo;
    double sz[3] = {lo, sqrt(lo * hi), hi}, t[3];
    size_t unit = 4 * (size_t)k->n; /* whole floats per member */
    size_t cap = ((size_t)hi + unit) / unit * unit;
    float *buf = ct_calloc(2 * cap / sizeof(float) + 16, sizeof(float));
    if (!buf) st = CT_ERR(err, CT_ERR_NOMEM, "no memory");
    for (int i = 0; i < 3; i++) {
        size_t bytes = ((size_t)sz[i] + unit - 1) / unit * unit;
        sz[i] = (double)bytes;
        float mine = 0;
        if (g && st == CT_OK) {
            double v[32];
            int rr = reps > 32 ? 32 : reps;
            st = link_once(g, k->coll, buf, bytes); /* warm-up */
            for (int r = 0; r < rr && st == CT_OK; r++) {
                if ((st = ct_comm_barrier(g, NULL)) != CT_OK) break;
                double t0 = ct_time_now();
                st = link_once(g, k->coll, buf, bytes);
                v[r] = 1e3 * (ct_time_now() - t0);
            }
            if (st != CT_OK) CT_ERR(err, st, "calibrating %s over %d: %s", ct_plan_coll_name(k->coll), k->n,
                                    ct_comm_errmsg(g));
            else mine = (float)median(v, rr);
        }
        /* every worker joins, failed or not, so none waits alone; the slowest member counts */
        float fail = st != CT_OK ? 1.0f : 0.0f, pair[2] = {mine, fail};
        ct_status s2 = ct_comm_allreduce(world, pair, pair, 2, CT_F32, CT_OP_MAX, NULL);
        if (s2 != CT_OK && st == CT_OK) st = CT_ERR(err, s2, "%s", ct_comm_errmsg(world));
        if (pair[1] > 0 && st == CT_OK)
            st = CT_ERR(err, CT_ERR_STATE, "calibrating %s over %d failed on another worker",
                        ct_plan_coll_name(k->coll), k->n);
        if (st != CT_OK) break;
        t[i] = pair[0];
    }
    if (st == CT_OK) {
        ct_plan_fit(sz, t, 3, &k->alpha, &k->beta);
        if (log)
            fprintf(log, "  link %-13s n %d %-7s (stride %d): %.3f ms at %.0f B, %.3f ms at %.0f B "
                         "-> alpha %.4f ms, %.3f GB/s\n",
                    ct_plan_coll_name(k->coll), k->n, ct_plan_place_name(k->place), stride, t[0],
                    sz[0], t[2], sz[2], k->alpha, k->beta > 0 ? 1e-6 / k->beta : 0.0);
    }
    free(buf);
    ct_comm_free(g);
    return st;
}

/* ------------------------------------------------------------------ calibrate */

ct_status ct_plan_calibrate(ct_comm *world, ct_device *dev, const ct_plan_problem *pb,
                            const ct_plan_needs *need, int reps, FILE *log, ct_plan_costs *out,
                            ct_err *err) {
    memset(out, 0, sizeof *out);
    ct_status st = CT_OK;
    int W = world ? ct_comm_size(world) : 1;
    if (reps < 1) reps = 1;
    out->workers_timed = W;
    /* 1. The attention path: auto is the leader's measurement, the same for all */
    ct_attn_path path = pb->attn;
    ct_attn_cfg acfg;
    memset(&acfg, 0, sizeof acfg);
    int hs = pb->cfg.channels / pb->cfg.heads;
    char note[1800];
    if ((st = ct_attn_select(dev, pb->attn, NULL, pb->T, pb->cfg.channels, pb->cfg.heads, &path,
                             &acfg, note, sizeof note)) != CT_OK)
        return CT_ERR(err, st, "choosing the attention path: %s", ct_device_errmsg(dev));
    if (world) {
        int32_t pi = (int32_t)path;
        if ((st = ct_comm_bcast(world, &pi, 1, CT_I32, 0, NULL)) != CT_OK)
            return CT_ERR(err, st, "%s", ct_comm_errmsg(world));
        if ((ct_attn_path)pi != path) {
            path = (ct_attn_path)pi;
            if (path == CT_ATTN_FUSED && (st = ct_attn_tune(dev, hs, 0, &acfg, NULL, 0)) != CT_OK)
                return CT_ERR(err, st, "%s", ct_device_errmsg(dev));
        }
    }
    if (path == CT_ATTN_FUSED && (st = ct_attention_fused_warmup(dev, &acfg, hs)) != CT_OK)
        return CT_ERR(err, st, "%s", ct_device_errmsg(dev));
    if ((st = ct_ops_warmup(dev)) != CT_OK) return CT_ERR(err, st, "%s", ct_device_errmsg(dev));
    out->attn = path;
    /* 2. Compute at every shape, every worker at once: `reps` rounds over the shapes (a load
     * that comes and goes falls on every shape alike), the median per shape, averaged over the
     * workers */
    out->comp = ct_calloc((size_t)need->ncomp + 1, sizeof *out->comp);
    double *tt = ct_calloc((size_t)need->ncomp * SEQ__N * (size_t)reps + 1, sizeof *tt);
    if (!out->comp || !tt) {
        free(tt);
        return CT_ERR(err, CT_ERR_NOMEM, "no memory");
    }
    out->ncomp = need->ncomp;
    for (int r = 0; r < reps && st == CT_OK; r++)
        for (int i = 0; i < need->ncomp && st == CT_OK; i++) {
            if (world && (st = ct_comm_barrier(world, NULL)) != CT_OK) {
                CT_ERR(err, st, "%s", ct_comm_errmsg(world));
                break;
            }
            double t[SEQ__N];
            ct_status mine = probe_compute(dev, pb, path, &acfg, &need->comp[i], r == 0, t, err);
            int32_t bad = mine != CT_OK;
            if (world && (st = ct_comm_allreduce(world, &bad, &bad, 1, CT_I32, CT_OP_MAX, NULL)) != CT_OK)
                CT_ERR(err, st, "%s", ct_comm_errmsg(world));
            else if (mine != CT_OK) st = mine;
            else if (bad) st = CT_ERR(err, CT_ERR_STATE, "timing the model's ops failed on another worker");
            for (int j = 0; j < SEQ__N; j++) tt[((size_t)i * SEQ__N + j) * reps + r] = t[j];
        }
    if (st != CT_OK) {
        free(tt);
        return st;
    }
    for (int i = 0; i < need->ncomp; i++) {
        ct_plan_compute *k = &out->comp[i];
        *k = need->comp[i];
        float v[SEQ__N];
        for (int j = 0; j < SEQ__N; j++) v[j] = (float)median(tt + ((size_t)i * SEQ__N + j) * reps, reps);
        if (world && (st = ct_comm_allreduce(world, v, v, SEQ__N, CT_F32, CT_OP_SUM, NULL)) != CT_OK) {
            free(tt);
            return CT_ERR(err, st, "%s", ct_comm_errmsg(world));
        }
        double *dst[SEQ__N] = {&k->block_fwd, &k->block_bwd, &k->block_bwd_in, &k->block_bwd_w,
                               &k->block_dw_col, &k->block_dx, &k->embed_fwd, &k->embed_bwd,
                               &k->head_fwd, &k->head_bwd, &k->head_dw};
        for (int j = 0; j < SEQ__N; j++) *dst[j] = v[j] / W;
        if (log)
            fprintf(log, "  compute %4d rows tp %d%s: block fwd %.3f bwd %.3f ms, head fwd %.3f bwd %.3f "
                         "ms, embedding %.3f + %.3f ms\n",
                    k->b, k->tp, k->sp ? " sp" : "   ", k->block_fwd, k->block_bwd, k->head_fwd,
                    k->head_bwd, k->embed_fwd, k->embed_bwd);
    }
    free(tt);
    /* 3. Staging copies, the optimizer, the overlap: every worker at once, averaged */
    if (world && (st = ct_comm_barrier(world, NULL)) != CT_OK)
        return CT_ERR(err, st, "%s", ct_comm_errmsg(world));
    ct_status mine = probe_copy(dev, need->copy_hi, reps, &out->copy_alpha, &out->copy_beta, err);
    if (mine == CT_OK)
        mine = probe_opt(dev, need->opt_lo, need->opt_hi, reps, &out->opt_alpha, &out->opt_beta, err);
    if (world && (st = ct_comm_barrier(world, NULL)) != CT_OK)
        return CT_ERR(err, st, "%s", ct_comm_errmsg(world));
    if (mine == CT_OK) mine = probe_overlap(dev, reps, &out->overlap, err);
    {
        float v[6] = {(float)out->copy_alpha, (float)(out->copy_beta * 1e9), (float)out->opt_alpha,
                      (float)(out->opt_beta * 1e9), (float)out->overlap, mine != CT_OK ? 1.0f : 0.0f};
        if (world && (st = ct_comm_allreduce(world, v, v, 6, CT_F32, CT_OP_SUM, NULL)) != CT_OK)
            return CT_ERR(err, st, "%s", ct_comm_errmsg(world));
        if (mine != CT_OK) return mine;
        if (v[5] > 0) return CT_ERR(err, CT_ERR_STATE, "a measurement failed on another worker");
        out->copy_alpha = v[0] / W, out->copy_beta = v[1] / W / 1e9, out->opt_alpha = v[2] / W;
        out->opt_beta = v[3] / W / 1e9, out->overlap = v[4] / W;
    }
    if (log)
        fprintf(log, "  staging copy %.4f ms + %.3f GB/s; optimizer %.4f ms per launch + %.3f ns per "
                     "float; host work hidden beside device work: %.2f\n",
                out->copy_alpha, out->copy_beta > 0 ? 1e-6 / out->copy_beta : 0.0, out->opt_alpha,
                out->opt_beta * 1e6, out->overlap);
    /* 4. Links over groups laid out as the layouts lay them, all groups of a pattern at once */
    if (world) {
        out->link = ct_calloc((size_t)need->nlink + 1, sizeof *out->link);
        if (!out->link) return CT_ERR(err, CT_ERR_NOMEM, "no memory");
        for (int i = 0; i < need->nlink; i++) {
            out->link[i] = need->link[i];
            if ((st = probe_link(world, &out->link[i], need->stride[i], reps, log, err)) != CT_OK)
                return st;
            out->nlink++;
        }
        snprintf(out->source, sizeof out->source, "links measured over the %d workers", W);
    } else {
        snprintf(out->source, sizeof out->source, "no links measured (one worker)");
    }
    return CT_OK;
}
