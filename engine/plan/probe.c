/* probe.c - the layout planner's measurements: what a worker's device takes for one block, the
 * embedding and the head at the shapes a layout gives it (the engine's own ops, in the order
 * engine/model/model.c runs them), one host staging copy, the optimizer per element, how much host
 * work hides behind device work, and the links (alpha-beta per collective, group size and
 * placement) over groups laid out as the layouts lay them. Every worker measures at once, so
 * workers sharing a host (PoCL devices) are measured as they will run; the results are averaged
 * (compute) or taken at the slowest member (links) over the world, so every worker ends with the
 * same costs and ranks the layouts the same way. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_impl.h"

/* ------------------------------------------------------------------ small helpers */

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
/* The fastest of n: other users' load only ever adds time, so on a shared host the least
 * disturbed repetition is the best estimate of a piece's own time (the contention among the
 * workers measuring is in every repetition alike). */
static double fastest(const double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

/* ------------------------------------------------------------------ compute */

/* The pieces timed, in the order a step runs them; the zero-bubble halves after (tp = 1). */
enum { P_EMB_F, P_BLK_F, P_HEAD_F, P_HEAD_B, P_BLK_B, P_EMB_B, P_BLK_BI, P_BLK_BW, P__N };

/* The one-block model of shape k on this worker, over its TP group (consecutive workers, as the
 * grid lays them: group rank = w % tp). Collective over world (the split). */
static ct_status shape_open(ct_comm *world, ct_device *dev, const ct_plan_problem *pb,
                            ct_attn_path path, const ct_attn_cfg *acfg, const ct_plan_compute *k,
                            ct_model **m, ct_comm **tp, ct_err *err) {
    *m = NULL, *tp = NULL;
    int w = world ? ct_comm_rank(world) : 0;
    ct_status st = CT_OK;
    if (world && (st = ct_comm_split(world, w / k->tp, w % k->tp, tp)) != CT_OK)
        return CT_ERR(err, st, "calibration split: %s", ct_comm_errmsg(world));
    ct_gpt_config c1 = pb->cfg;
    c1.layers = 1;
    ct_layout lay = {1, k->tp, 1, 0, 1};
    ct_coords at = {0, w % k->tp, 0, 0};
    ct_model_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.max_B = k->b, plan.max_T = pb->T, plan.slots = 1;
    plan.attention = path;
    plan.attn_blocks = path == CT_ATTN_FUSED ? acfg : NULL;
    plan.split_backward = k->tp == 1 && pb->cfg.experts == 0; /* MoE: no zb1 */
    plan.tp = k->tp > 1 ? *tp : NULL;
    plan.sp = k->sp;
    if ((st = ct_model_create_plan(m, &c1, &lay, &at, dev, &plan, err)) == CT_OK &&
        (st = ct_model_init_random(*m, 1234)) != CT_OK)
        CT_ERR(err, st, "%s", ct_model_errmsg(*m));
    if (st == CT_OK) ct_tp_set_overlap(ct_model_tp(*m), pb->tp_overlap);
    return st;
}

/* One timed pass over the pieces (ms into t[P__N]); the device waited for after each. The
 * sequence runs once untimed first: with several workers on one host, the first backward of a
 * pass after the others' barrier came out 2-10x the steady one (seen on PoCL, 2 and 4 workers:
 * the full backward far above its two halves, though equal to them alone), and a training step
 * runs its pieces back to back. */
static ct_status time_pieces(ct_model *m, int b, int T, const int *tok, int split, double *t) {
    ct_status st = CT_OK;
    ct_device *dev = ct_model_device(m);
    if ((st = ct_model_embed_forward(m, 0, tok, b, T)) != CT_OK ||
        (st = ct_model_block_forward(m, 0, 0)) != CT_OK ||
        (st = ct_model_head_forward(m, 0, tok + b * T, NULL)) != CT_OK ||
        (st = ct_model_head_backward(m, 0, 1.0f)) != CT_OK ||
        (st = ct_model_block_backward(m, 0, 0)) != CT_OK ||
        (st = ct_model_embed_backward(m, 0)) != CT_OK || (st = ct_device_finish(dev)) != CT_OK)
        return st;
    double t0 = ct_time_now();
#define PIECE(i, expr)                                                                             \
    do {                                                                                           \
        if ((st = (expr)) != CT_OK || (st = ct_device_finish(dev)) != CT_OK) return st;            \
        double t1_ = ct_time_now();                                                                \
        t[i] = 1e3 * (t1_ - t0);                                                                   \
        t0 = t1_;                                                                                  \
    } while (0)
    PIECE(P_EMB_F, ct_model_embed_forward(m, 0, tok, b, T));
    PIECE(P_BLK_F, ct_model_block_forward(m, 0, 0));
    PIECE(P_HEAD_F, ct_model_head_forward(m, 0, tok + b * T, NULL));
    PIECE(P_HEAD_B, ct_model_head_backward(m, 0, 1.0f));
    PIECE(P_BLK_B, ct_model_block_backward(m, 0, 0));
    PIECE(P_EMB_B, ct_model_embed_backward(m, 0));
    t[P_BLK_BI] = t[P_BLK_BW] = 0;
    if (split) {
        if ((st = ct_model_embed_forward(m, 0, tok, b, T)) != CT_OK ||
            (st = ct_model_block_forward(m, 0, 0)) != CT_OK ||
            (st = ct_model_head_forward(m, 0, tok + b * T, NULL)) != CT_OK ||
            (st = ct_model_head_backward(m, 0, 1.0f)) != CT_OK || (st = ct_device_finish(dev)) != CT_OK)
            return st;
        t0 = ct_time_now();
        PIECE(P_BLK_BI, ct_model_block_backward_input(m, 0, 0));
        PIECE(P_BLK_BW, ct_model_block_backward_weight(m, 0, 0));
    }
#undef PIECE
    return CT_OK;
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
    case CT_COLL_ALLTOALL: /* bytes: each worker's whole send buffer, bytes / n to each */
        return ct_comm_alltoall(g, buf, buf + count, count / (size_t)n, CT_F32, NULL);
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
            if (st != CT_OK) CT_ERR(err, st, "calibrating %s over %d: %s", ct__plan_coll_name(k->coll), k->n,
                                    ct_comm_errmsg(g));
            else mine = (float)median(v, rr);
        }
        /* every worker joins, failed or not, so none waits alone; the slowest member counts */
        float fail = st != CT_OK ? 1.0f : 0.0f, pair[2] = {mine, fail};
        ct_status s2 = ct_comm_allreduce(world, pair, pair, 2, CT_F32, CT_OP_MAX, NULL);
        if (s2 != CT_OK && st == CT_OK) st = CT_ERR(err, s2, "%s", ct_comm_errmsg(world));
        if (pair[1] > 0 && st == CT_OK)
            st = CT_ERR(err, CT_ERR_STATE, "calibrating %s over %d failed on another worker",
                        ct__plan_coll_name(k->coll), k->n);
        if (st != CT_OK) break;
        t[i] = pair[0];
    }
    if (st == CT_OK) {
        ct_plan_fit(sz, t, 3, &k->alpha, &k->beta);
        if (log)
            fprintf(log, "  link %-13s n %d %-7s (stride %d): %.3f ms at %.0f B, %.3f ms at %.0f B "
                         "-> alpha %.4f ms, %.3f GB/s\n",
                    ct__plan_coll_name(k->coll), k->n, ct__plan_place_name(k->place), stride, t[0],
                    sz[0], t[2], sz[2], k->alpha, k->beta > 0 ? 1e-6 / k->beta : 0.0);
    }
    free(buf);
    ct_comm_free(g);
    return st;
}

/* ------------------------------------------------------------------ calibrate */

ct_status ct__plan_calibrate(ct_comm *world, ct_device *dev, const ct_plan_problem *pb,
                            const ct_plan_needs *need, int reps, FILE *log, ct_plan_costs *out,
                            ct_err *err) {
    memset(out, 0, sizeof *out);
    ct_status st = CT_OK;
    int W = world ? ct_comm_size(world) : 1;
    if (reps < 1) reps = 1;
    out->workers_timed = W;
    /* TP's collectives run inside the pieces timed: a tp-degree shape needs that many workers */
    for (int i = 0; i < need->ncomp; i++)
        if (need->comp[i].tp > W)
            return CT_ERR(err, CT_ERR_ARG,
                          "timing tp %d's pieces needs %d workers measuring together (TP's "
                          "collectives run inside them); %d %s here: run the planner as at least "
                          "%d workers (mpiexec x --devices-per-rank), or pin --tp",
                          need->comp[i].tp, need->comp[i].tp, W, W == 1 ? "is" : "are",
                          need->comp[i].tp);
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
    /* 2. The pieces at every shape: `reps` rounds over the shapes (a load that comes and goes
     * falls on every shape alike), each time (a) every worker at once, (b) worker 0's TP group
     * alone, (c) every worker at once without TP's collectives; the fastest round per piece */
    int nk = need->ncomp;
    out->comp = ct_calloc((size_t)nk + 1, sizeof *out->comp);
    size_t per = (size_t)P__N * (size_t)reps;
    double *tall = ct_calloc((size_t)nk * per + 1, sizeof(double));
    double *talone = ct_calloc((size_t)nk * per + 1, sizeof(double));
    double *tskip = ct_calloc((size_t)nk * per + 1, sizeof(double));
    int *tok = NULL;
    if (!out->comp || !tall || !talone || !tskip) st = CT_ERR(err, CT_ERR_NOMEM, "no memory");
    else out->ncomp = nk;
    int wr = world ? ct_comm_rank(world) : 0;
    for (int r = 0; r < reps && st == CT_OK; r++)
        for (int i = 0; i < nk && st == CT_OK; i++) {
            const ct_plan_compute *k = &need->comp[i];
            ct_model *m = NULL;
            ct_comm *tpc = NULL;
            ct_status mine = shape_open(world, dev, pb, path, &acfg, k, &m, &tpc, err);
            size_t bt = (size_t)k->b * pb->T;
            int *nt = mine == CT_OK ? ct_realloc(tok, sizeof(int) * 2 * bt) : NULL;
            if (mine == CT_OK && !nt) mine = CT_ERR(err, CT_ERR_NOMEM, "no memory");
            if (nt) {
                tok = nt;
                for (size_t j = 0; j < 2 * bt; j++) tok[j] = (int)((j * 7 + 3) % (size_t)pb->cfg.vocab);
            }
            double a[P__N] = {0}, al[P__N] = {0}, sk[P__N] = {0};
            int split = k->tp == 1 && pb->cfg.experts == 0;
            /* every step below is entered by every worker; a failure is carried to the end */
            if (mine == CT_OK && r == 0) mine = time_pieces(m, k->b, pb->T, tok, split, a); /* warm-up */
            if (world && ct_comm_barrier(world, NULL) != CT_OK && mine == CT_OK) mine = CT_ERR_STATE;
            if (mine == CT_OK) mine = time_pieces(m, k->b, pb->T, tok, split, a);
            if (world && ct_comm_barrier(world, NULL) != CT_OK && mine == CT_OK) mine = CT_ERR_STATE;
            if (mine == CT_OK && wr < k->tp) mine = time_pieces(m, k->b, pb->T, tok, split, al);
            if (world && ct_comm_barrier(world, NULL) != CT_OK && mine == CT_OK) mine = CT_ERR_STATE;
            if (k->tp > 1) {
                if (mine == CT_OK) ct_tp_set_skip_comm(ct_model_tp(m), 1);
                if (mine == CT_OK) mine = time_pieces(m, k->b, pb->T, tok, split, sk);
            } else {
                memcpy(sk, a, sizeof sk);
            }
            if (mine != CT_OK && m && !err->msg[0]) CT_ERR(err, mine, "%s", ct_model_errmsg(m));
            ct_model_free(m);
            ct_comm_free(tpc);
            float v[3 * P__N + 1];
            for (int j = 0; j < P__N; j++) v[j] = (float)a[j], v[P__N + j] = (float)al[j], v[2 * P__N + j] = (float)sk[j];
            v[3 * P__N] = mine != CT_OK ? 1.0f : 0.0f;
            if (world && (st = ct_comm_allreduce(world, v, v, 3 * P__N + 1, CT_F32, CT_OP_SUM, NULL)) != CT_OK) {
                CT_ERR(err, st, "%s", ct_comm_errmsg(world));
                break;
            }
            if (mine != CT_OK) st = mine;
            else if (v[3 * P__N] > 0) st = CT_ERR(err, CT_ERR_STATE, "timing the model's pieces failed on another worker");
            for (int j = 0; j < P__N; j++) {
                tall[(size_t)i * per + (size_t)j * reps + r] = v[j] / W;
                talone[(size_t)i * per + (size_t)j * reps + r] = v[P__N + j] / k->tp;
                tskip[(size_t)i * per + (size_t)j * reps + r] = v[2 * P__N + j] / W;
            }
        }
    for (int i = 0; i < nk && st == CT_OK; i++) {
        ct_plan_compute *k = &out->comp[i];
        *k = need->comp[i];
        double A[P__N], L[P__N], S[P__N];
        for (int j = 0; j < P__N; j++) {
            A[j] = fastest(tall + (size_t)i * per + (size_t)j * reps, reps);
            L[j] = fastest(talone + (size_t)i * per + (size_t)j * reps, reps);
            S[j] = fastest(tskip + (size_t)i * per + (size_t)j * reps, reps);
        }
        k->embed_fwd = A[P_EMB_F], k->block_fwd = A[P_BLK_F], k->head_fwd = A[P_HEAD_F];
        k->head_bwd = A[P_HEAD_B], k->block_bwd = A[P_BLK_B], k->embed_bwd = A[P_EMB_B];
        k->block_bwd_in = A[P_BLK_BI], k->block_bwd_w = A[P_BLK_BW];
        double tpb = A[P_BLK_F] + A[P_BLK_B] - S[P_BLK_F] - S[P_BLK_B];
        double tpe = A[P_EMB_F] + A[P_EMB_B] - S[P_EMB_F] - S[P_EMB_B];
        double tph = A[P_HEAD_F] + A[P_HEAD_B] - S[P_HEAD_F] - S[P_HEAD_B];
        k->tp_block = tpb > 0 ? tpb : 0, k->tp_embed = tpe > 0 ? tpe : 0, k->tp_head = tph > 0 ? tph : 0;
        double sa = 0, sl = 0;
        for (int j = 0; j < P_BLK_BI; j++) sa += A[j], sl += L[j];
        k->share = sl > 0 && sa > sl ? sa / sl : 1.0;
        if (log)
            fprintf(log, "  compute %4d rows tp %d%s: block fwd %.3f bwd %.3f (halves %.3f + %.3f) ms "
                         "(TP %.3f), head fwd %.3f bwd %.3f ms, embedding %.3f + %.3f ms; %.2f x one "
                         "group alone\n",
                    k->b, k->tp, k->sp ? " sp" : "   ", k->block_fwd, k->block_bwd, k->block_bwd_in,
                    k->block_bwd_w, k->tp_block, k->head_fwd, k->head_bwd, k->embed_fwd,
                    k->embed_bwd, k->share);
    }
    free(tall), free(talone), free(tskip), free(tok);
    if (st != CT_OK) return st;
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
            if ((st = probe_link(world, &out->link[i], need->stride[i], 3 * reps, log, err)) != CT_OK)
                return st;
            out->nlink++;
        }
        snprintf(out->source, sizeof out->source, "links measured over the %d workers", W);
    } else {
        snprintf(out->source, sizeof out->source, "no links measured (one worker)");
    }
    return CT_OK;
}
