/* probe.c - the layout planner's measurements (ct__plan_calibrate), in order: the attention
 * path, then what a worker's device takes for one block, the embedding and the head at the
 * shapes a layout gives it (the engine's own ops, in the order engine/model/model.c runs them;
 * timed here), then a host staging copy, the optimizer and the overlap (probe_device.c), then
 * the links (probe_links.c). Every worker measures at once, so workers sharing a host (PoCL
 * devices) are measured as they will run; the results are averaged (compute) or taken at the
 * slowest member (links) over the world, so every worker ends with the same costs and ranks the
 * layouts the same way. */
#include <stdlib.h>
#include <string.h>

#include "plan_impl.h"

/* ------------------------------------------------------------------ small helpers */

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
        (st = ct_model_block_backward(m, 0, 0, CT_BACKWARD_WHOLE)) != CT_OK ||
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
    PIECE(P_BLK_B, ct_model_block_backward(m, 0, 0, CT_BACKWARD_WHOLE));
    PIECE(P_EMB_B, ct_model_embed_backward(m, 0));
    t[P_BLK_BI] = t[P_BLK_BW] = 0;
    if (split) {
        if ((st = ct_model_embed_forward(m, 0, tok, b, T)) != CT_OK ||
            (st = ct_model_block_forward(m, 0, 0)) != CT_OK ||
            (st = ct_model_head_forward(m, 0, tok + b * T, NULL)) != CT_OK ||
            (st = ct_model_head_backward(m, 0, 1.0f)) != CT_OK || (st = ct_device_finish(dev)) != CT_OK)
            return st;
        t0 = ct_time_now();
        PIECE(P_BLK_BI, ct_model_block_backward(m, 0, 0, CT_BACKWARD_INPUT));
        PIECE(P_BLK_BW, ct_model_block_backward(m, 0, 0, CT_BACKWARD_WEIGHT));
    }
#undef PIECE
    return CT_OK;
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
    ct_status mine =
        ct__plan_probe_copy(dev, need->copy_hi, reps, &out->copy_alpha, &out->copy_beta, err);
    if (mine == CT_OK)
        mine = ct__plan_probe_opt(dev, need->opt_lo, need->opt_hi, reps, &out->opt_alpha,
                                  &out->opt_beta, err);
    if (world && (st = ct_comm_barrier(world, NULL)) != CT_OK)
        return CT_ERR(err, st, "%s", ct_comm_errmsg(world));
    if (mine == CT_OK) mine = ct__plan_probe_overlap(dev, reps, &out->overlap, err);
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
            st = ct__plan_probe_link(world, &out->link[i], need->stride[i], 3 * reps, log, err);
            if (st != CT_OK) return st;
            out->nlink++;
        }
        snprintf(out->source, sizeof out->source, "links measured over the %d workers", W);
    } else {
        snprintf(out->source, sizeof out->source, "no links measured (one worker)");
    }
    return CT_OK;
}
