/* predict.c - the time model: one layout's step time from measured costs (ct_plan_predict). Pure:
 * no device and no communication.
 *
 * The time model follows the engine's step (engine/step/step.c) action by action: per pipeline
 * stage, the forward and backward of its blocks (with TP's collectives inside them, staged through
 * the host as engine/model/tp.c does, the input-gradient reductions partly hidden behind the
 * weight-gradient GEMMs), fed with the sends and receives to the schedule's simulator; then, per
 * stage, the DP reduction of its gradients (buckets from the end, hidden behind the last backward
 * by the measured overlap), the tied embedding's sum over the two pipeline ends, the optimizer,
 * ZeRO's all-gather. The step is the slowest stage's end. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_impl.h"

typedef struct model_ctx {
    const ct_plan_problem *pb;
    const ct_plan_layout *l;
    const ct_plan_costs *c;
    ct_err *err;
    int missing;
} model_ctx;

/* One collective over a group of n at stride s: t(bytes), 0 for a group of one. */
static double link_ms(model_ctx *x, int coll, int n, int stride, double bytes) {
    if (n < 2 || bytes <= 0) return 0;
    ct_plan_place place = ct_plan_group_place(n, stride, x->pb->D);
    for (int i = 0; i < x->c->nlink; i++) {
        const ct_plan_link *k = &x->c->link[i];
        if (k->coll == coll && k->n == n && k->place == place) return k->alpha + k->beta * bytes;
    }
    if (!x->missing)
        CT_ERR(x->err, CT_ERR_ARG,
               "no cost for %s over %d workers (%s): calibrate with the workers the layouts "
               "use, or give a links table that has it",
               ct__plan_coll_name(coll), n, ct__plan_place_name(place));
    x->missing = 1;
    return 0;
}

/* A staged collective (engine/model/tp.c, step/grads.c, step/zero.c): read into host memory,
 * the collective, write back. in/out: the bytes read and written. */
static double staged(model_ctx *x, int coll, int n, int stride, double bytes, double in, double out) {
    const ct_plan_costs *c = x->c;
    return c->copy_alpha + c->copy_beta * in + link_ms(x, coll, n, stride, bytes) + c->copy_alpha +
           c->copy_beta * out;
}

/* The part of a collective of `comm` ms still exposed beside `work` ms of device work. */
static double exposed(const ct_plan_costs *c, double comm, double work) {
    double hide = c->overlap * (comm < work ? comm : work);
    return comm - hide;
}

ct_status ct_plan_predict(const ct_plan_problem *pb, const ct_plan_layout *l, const ct_plan_costs *c,
                          ct_plan_estimate *out, ct_err *err) {
    memset(out, 0, sizeof *out);
    model_ctx x = {pb, l, c, err, 0};
    const ct_gpt_config *cfg = &pb->cfg;
    int b = pb->B / l->dp, m = pb->micro, N = l->pp, v = l->sched == CT_SCHED_INTERLEAVED ? l->virt : 1;
    const ct_plan_compute *k = NULL;
    for (int i = 0; i < c->ncomp; i++)
        if (c->comp[i].b == b && c->comp[i].tp == l->tp && c->comp[i].sp == l->sp) k = &c->comp[i];
    if (!k)
        return CT_ERR(err, CT_ERR_ARG, "no compute cost for %d rows at tp %d%s: %s", b, l->tp,
                      l->sp ? " with SP" : "",
                      l->tp > 1 ? "timing it needs that many workers at once"
                                : "calibrate for it");
    int split[CT_MAX_CHUNKS * 64];
    if (N * v > (int)(sizeof split / sizeof split[0]))
        return CT_ERR(err, CT_ERR_ARG, "too many model chunks");
    ct_status st;
    if ((st = ct__plan_split(pb, l, split, err)) != CT_OK) return st;
    /* activations cross as bf16 in a bf16 run; the gradients' reduction at grad_wire_bytes */
    double C = cfg->channels, T = pb->T, bt = (double)b * T, act = bt * C * pb->act_bytes;
    double gw = pb->grad_wire_bytes / 4.0;
    double tpn = l->tp, wire_ar = 2 * (tpn - 1) / tpn, wire_g = (tpn - 1) / tpn;
    /* 1. TP: its collectives are inside the pieces timed; the bytes they send, per worker: 4
     * all-reduces of (b,T,C) per block (SP: as many gathers and scatters, each (n-1)/n of it,
     * the backward gathering the LayerNorm outputs again), one in the embedding, one in the
     * logits' backward, the loss statistics (3 b T floats) */
    double tpbytes_blk = 0, tpbytes_emb = 0, tpbytes_head = 0;
    if (l->tp > 1) {
        if (l->sp) {
            tpbytes_blk = (4 + 2 + 4) * wire_g * act;
            tpbytes_emb = 2 * wire_g * act, tpbytes_head = 3 * wire_g * act;
        } else {
            tpbytes_blk = 4 * wire_ar * act;
            tpbytes_emb = wire_ar * act, tpbytes_head = wire_ar * act;
        }
        tpbytes_head += wire_ar * 3 * bt * 4;
    }
    /* 2. ZeRO-3: each block gathered over DP before its forward and its backward (prefetched
     * beside the previous block's compute); the embeddings at every forward */
    double z3_blk_f = 0, z3_blk_b = 0, z3_emb = 0;
    if (l->zero >= 3) {
        /* an all-gather of the shards: each worker sends its 1/dp, receives the whole */
        double blk = ct__plan_block_params(pb, l->tp, l->ep) * 4;
        double g = staged(&x, CT_COLL_ALLGATHER, l->dp, l->tp, blk, blk / l->dp, blk);
        z3_blk_f = exposed(c, g, k->block_fwd);
        z3_blk_b = exposed(c, g, k->block_bwd);
        double e = ((double)cfg->padded_vocab / l->tp + cfg->max_seq) * C * 4;
        z3_emb = staged(&x, CT_COLL_ALLGATHER, l->dp, l->tp, e, e / l->dp, e);
    }
    /* 2b. EP: per MoE block and micro-batch, the dispatch and the combine in the forward and again
     * in the backward, each an all-to-all of up to K b T C floats staged through the host (the
     * pieces were timed at ep 1, every expert local: the same expert FLOPs per token when the
     * load is balanced) */
    double ep_blk = 0, ep_bytes_blk = 0;
    if (l->ep > 1) {
        double a2a = cfg->top_k * act;
        ep_blk = 2 * staged(&x, CT_COLL_ALLTOALL, l->ep, l->tp, a2a, a2a, a2a);
        ep_bytes_blk = 4 * a2a * (l->ep - 1) / l->ep;
    }
    /* 3. each stage's costs per micro-batch, per chunk (the stage's total over its v chunks) */
    ct_sched_costs *sc = ct_calloc((size_t)N, sizeof *sc);
    double *psi = ct_calloc((size_t)N, sizeof *psi), *bwd_stage = ct_calloc((size_t)N, sizeof *bwd_stage);
    double *comp_stage = ct_calloc((size_t)N, sizeof *comp_stage), *tp_stage = ct_calloc((size_t)N, sizeof *tp_stage);
    int *blocks = ct_calloc((size_t)N, sizeof *blocks);
    if (!sc || !psi || !bwd_stage || !comp_stage || !tp_stage || !blocks) {
        free(sc), free(psi), free(bwd_stage), free(comp_stage), free(tp_stage), free(blocks);
        return CT_ERR(err, CT_ERR_NOMEM, "no memory");
    }
    double msg = l->sp ? act / l->tp : act;
    double busy = 0, share = k->share >= 1 ? k->share : 1;
    for (int q = 0; q < N; q++) {
        psi[q] = ct__plan_stage_params(pb, l, split, q, &blocks[q]);
        double nb = blocks[q], first = q == 0, last = q == N - 1;
        double F = nb * (k->block_fwd + z3_blk_f + ep_blk) + first * k->embed_fwd + last * k->head_fwd +
                   (first || last) * z3_emb;
        double Bw = nb * (k->block_bwd + z3_blk_b + ep_blk) + first * k->embed_bwd + last * k->head_bwd;
        double Bin = nb * (k->block_bwd_in + z3_blk_b) + first * k->embed_bwd + last * k->head_bwd;
        double Bwt = nb * k->block_bwd_w;
        /* the simulator runs each stage at the speed of a device alone; the stages' work with
         * every worker busy at once bounds the step from below (devices sharing cores) */
        sc[q].fwd = F / v / share, sc[q].bwd = Bw / v / share;
        sc[q].bwd_input = Bin / v / share, sc[q].bwd_weight = Bwt / v / share;
        busy += m * (F + (l->sched == CT_SCHED_ZB1 ? Bin + Bwt : Bw)) / N;
        if (N > 1) {
            sc[q].send = c->copy_alpha + c->copy_beta * msg;
            sc[q].recv = c->copy_alpha + c->copy_beta * msg;
            sc[q].comm = link_ms(&x, CT_PLAN_P2P, 2, l->dp * l->tp, msg);
        }
        bwd_stage[q] = l->sched == CT_SCHED_ZB1 ? Bin + Bwt : Bw;
        comp_stage[q] = m * (nb * (k->block_fwd + k->block_bwd - k->tp_block) +
                             first * (k->embed_fwd + k->embed_bwd - k->tp_embed) +
                             last * (k->head_fwd + k->head_bwd - k->tp_head));
        tp_stage[q] = m * (nb * (k->tp_block + 2 * ep_blk) + first * k->tp_embed + last * k->tp_head);
        double tpb = m * (nb * tpbytes_blk + first * tpbytes_emb + last * tpbytes_head);
        if (tpb > out->tp_bytes) out->tp_bytes = tpb;
        if (m * nb * ep_bytes_blk > out->ep_bytes) out->ep_bytes = m * nb * ep_bytes_blk;
    }
    /* the sends are on every stage alike: comm cost of the first stage's channel */
    for (int q = 0; q < N; q++) sc[q].comm = sc[0].comm;
    ct_schedule *s = NULL;
    ct_sched_sim sim;
    memset(&sim, 0, sizeof sim);
    st = ct_sched_make(N > 1 ? l->sched : CT_SCHED_TRIVIAL, N, m, v, &s, err);
    if (st == CT_OK) st = ct_sched_simulate_stages(s, sc, 1, &sim, err);
    if (st != CT_OK || x.missing) {
        if (st == CT_OK) st = CT_ERR_ARG; /* x.missing: the message is in err */
        goto done;
    }
    /* 4. per stage: its end in the pipeline (stretched to the busy bound), then DP, the tied
     * wte, the optimizer, ZeRO */
    double stretch = sim.makespan > 0 && busy > sim.makespan ? busy / sim.makespan : 1;
    double step = 0, busiest = 0;
    for (int q = 0; q < N; q++) {
        double end = 0;
        for (int i = 0; i < s->n[q]; i++) {
            ct_act_kind ak = s->list[q][i].kind;
            if (ak != CT_ACT_GRAD_SYNC && ak != CT_ACT_OPT_STEP && sim.end[q][i] > end) end = sim.end[q][i];
        }
        end *= stretch;
        double dp_ms = 0, dp_bytes = 0, after = 0;
        double all = psi[q] * 4, bucket = pb->bucket_mb * 1048576.0;
        if (l->dp > 1) {
            /* ZeRO reduce-scatters the buckets: each worker keeps (and writes back) its shard */
            int red = l->zero >= 1 ? CT_COLL_REDUCESCATTER : CT_COLL_ALLREDUCE;
            double dpn = l->dp, kept = l->zero >= 1 ? all / dpn : all;
            int nbk = (int)ceil(all / bucket);
            double one = 0;
            for (int j = 0; j < nbk; j++) {
                double bb = j < nbk - 1 ? bucket : all - bucket * (nbk - 1);
                one += c->copy_alpha + c->copy_beta * bb + link_ms(&x, red, l->dp, l->tp, gw * bb);
            }
            one += c->copy_alpha + c->copy_beta * kept; /* written back */
            if (l->zero >= 2) {
                /* ZeRO-2/3: a bucket per block (and one for the rest: embeddings, head) leaves
                 * at every micro-step, beside every backward; the shard is written at the end */
                double blk = ct__plan_block_params(pb, l->tp, l->ep) * 4, rest = all - blocks[q] * blk;
                double per = blocks[q] * (c->copy_alpha + c->copy_beta * blk +
                                          link_ms(&x, red, l->dp, l->tp, gw * blk));
                if (rest > 0)
                    per += c->copy_alpha + c->copy_beta * rest +
                           link_ms(&x, red, l->dp, l->tp, gw * rest);
                dp_ms = exposed(c, m * per, m * bwd_stage[q]) + c->copy_alpha + c->copy_beta * all / dpn;
                dp_bytes = m * (dpn - 1) / dpn * gw * all;
            } else {
                dp_ms = pb->overlap ? exposed(c, one, bwd_stage[q]) : one;
                dp_bytes = (l->zero >= 1 ? 1 : 2) * (dpn - 1) / dpn * gw * all;
            }
            if (l->zero >= 1) {
                after = staged(&x, CT_COLL_ALLGATHER, l->dp, l->tp, all, all / dpn, all);
                dp_bytes += (dpn - 1) / dpn * all;
            }
        }
        if (N > 1 && (q == 0 || q == N - 1)) { /* the tied wte over the two ends */
            double wte = (double)cfg->padded_vocab * C / l->tp * 4;
            dp_ms += staged(&x, CT_COLL_ALLREDUCE, 2, (N - 1) * l->dp * l->tp, gw * wte, wte, wte);
            dp_bytes += gw * wte;
        }
        int slices = 12 * blocks[q] + (q == 0 ? 2 : 0) + (q == N - 1 ? 3 : 0);
        double nopt = l->zero >= 1 ? psi[q] / l->dp : psi[q];
        double opt = slices * c->opt_alpha + c->opt_beta * nopt;
        double total = end + dp_ms + opt + after;
        double stage_comm = tp_stage[q] + dp_ms + after + (N > 1 ? m * v * 2 * (sc[q].send + sc[q].recv) : 0);
        if (total > step) step = total;
        if (total >= busiest) {
            busiest = total;
            out->comm_ms = stage_comm;
            out->opt_ms = opt;
        }
        if (comp_stage[q] > out->compute_ms) out->compute_ms = comp_stage[q];
        if (dp_bytes > out->dp_bytes) out->dp_bytes = dp_bytes;
    }
    if (N > 1) out->pp_bytes = m * v * 2 * msg;
    /* the loss and the norm: small all-reduces over the world */
    step += 2 * link_ms(&x, CT_COLL_ALLREDUCE, pb->W, 1, 4);
    if (x.missing) {
        st = CT_ERR_ARG;
        goto done;
    }
    out->step_ms = step;
    out->bubble = N > 1 ? sim.bubble : 0;
    out->tokens_per_s = step > 0 ? (double)pb->B * pb->T * m / (step / 1e3) : 0;
    out->comm_share = step > 0 ? out->comm_ms / step : 0;
done:
    ct_sched_sim_free(&sim);
    ct_sched_free(s);
    free(sc), free(psi), free(bwd_stage), free(comp_stage), free(tp_stage), free(blocks);
    return st;
}
