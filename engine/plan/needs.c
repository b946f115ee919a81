/* needs.c - what the candidate layouts need measured: the compute shapes a worker runs (rows,
 * TP degree, SP) and the links (collective, group size, placement) with the byte range each
 * layout sends over them, the optimizer's element counts and the largest staging copy. */
#include <stdlib.h>
#include <string.h>

#include "plan_impl.h"

static int add_comp(ct_plan_needs *nd, int b, int tp, int sp) {
    for (int i = 0; i < nd->ncomp; i++)
        if (nd->comp[i].b == b && nd->comp[i].tp == tp && nd->comp[i].sp == sp) return 0;
    ct_plan_compute *nc = ct_realloc(nd->comp, sizeof *nc * (size_t)(nd->ncomp + 1));
    if (!nc) return -1;
    nd->comp = nc;
    memset(&nc[nd->ncomp], 0, sizeof *nc);
    nc[nd->ncomp].b = b, nc[nd->ncomp].tp = tp, nc[nd->ncomp].sp = sp;
    nd->ncomp++;
    return 0;
}

/* A stride that places a group of n as `place`, with the groups of that pattern tiling W. */
static int stride_for(int n, ct_plan_place place, int W, int D) {
    for (int s = 1; s * n <= W; s++)
        if (ct_plan_group_place(n, s, D) == place) return s;
    return -1;
}

static int add_link(ct_plan_needs *nd, const ct_plan_problem *pb, int coll, int n, int stride,
                    double bytes) {
    if (n < 2 || bytes <= 0) return 0;
    ct_plan_place place = ct_plan_group_place(n, stride, pb->D);
    for (int i = 0; i < nd->nlink; i++) {
        ct_plan_link *k = &nd->link[i];
        if (k->coll == coll && k->n == n && k->place == place) {
            if (bytes < k->lo) k->lo = bytes;
            if (bytes > k->hi) k->hi = bytes;
            return 0;
        }
    }
    ct_plan_link *nl = ct_realloc(nd->link, sizeof *nl * (size_t)(nd->nlink + 1));
    if (!nl) return -1;
    nd->link = nl;
    int *ns = ct_realloc(nd->stride, sizeof *ns * (size_t)(nd->nlink + 1));
    if (!ns) return -1;
    nd->stride = ns;
    ct_plan_link k = {coll, n, place, 0, 0, bytes, bytes};
    nl[nd->nlink] = k;
    int s = stride_for(n, place, pb->W, pb->D);
    ns[nd->nlink] = s > 0 ? s : stride;
    nd->nlink++;
    return 0;
}

void ct_plan_needs_free(ct_plan_needs *n) {
    if (!n) return;
    free(n->comp);
    free(n->link);
    free(n->stride);
    free(n);
}

int ct_plan_needs_limit_tp(ct_plan_needs *n, int max_tp, int *tp_max) {
    int k = 0, dropped = 0, top = 0;
    for (int i = 0; i < n->ncomp; i++) {
        if (n->comp[i].tp > max_tp) {
            dropped++;
            if (n->comp[i].tp > top) top = n->comp[i].tp;
        } else {
            n->comp[k++] = n->comp[i];
        }
    }
    n->ncomp = k;
    if (tp_max) *tp_max = top;
    return dropped;
}

ct_status ct_plan_needs_make(const ct_plan_problem *pb, ct_plan_needs **out, ct_err *err) {
    *out = NULL;
    ct_plan_layout *ls = NULL;
    int nl = 0;
    ct_status st = ct_plan_enumerate(pb, &ls, &nl, err);
    if (st != CT_OK) return st;
    ct_plan_needs *nd = ct_calloc(1, sizeof *nd);
    int *split = ct_malloc(sizeof(int) * (size_t)(pb->cfg.layers + 1));
    if (!nd || !split) {
        free(ls), free(nd), free(split);
        return CT_ERR(err, CT_ERR_NOMEM, "no memory");
    }
    nd->opt_lo = 1e300;
    const ct_gpt_config *c = &pb->cfg;
    double C = c->channels, T = pb->T;
    int bad = 0;
    for (int i = 0; i < nl && !bad; i++) {
        const ct_plan_layout *l = &ls[i];
        int b = pb->B / l->dp;
        double bt = (double)b * T, act = bt * C * pb->act_bytes;
        bad |= add_comp(nd, b, l->tp, l->sp) != 0;
        /* EP: each MoE block's dispatch and combine, forward and backward: an all-to-all of the
         * worker's K choices per token (at most K b T C floats) over ep consecutive DP workers */
        if (l->ep > 1) bad |= add_link(nd, pb, CT_COLL_ALLTOALL, l->ep, l->tp, c->top_k * act) != 0;
        if ((st = ct__plan_split(pb, l, split, err)) != CT_OK) break;
        /* TP's collectives are inside the pieces timed (plan_probe.c): no link for them */
        /* PP: one activation per message; the tied wte over the two ends */
        if (l->pp > 1) {
            double msg = l->sp ? act / l->tp : act;
            bad |= add_link(nd, pb, CT_PLAN_P2P, 2, l->dp * l->tp, msg);
            bad |= add_link(nd, pb, CT_COLL_ALLREDUCE, 2, (l->pp - 1) * l->dp * l->tp,
                            (double)c->padded_vocab * C / l->tp * pb->grad_wire_bytes);
            if (msg > nd->copy_hi) nd->copy_hi = msg;
        }
        for (int q = 0; q < l->pp; q++) {
            double psi = ct__plan_stage_params(pb, l, split, q, NULL);
            double n_opt = l->zero >= 1 ? psi / l->dp : psi;
            if (n_opt < nd->opt_lo) nd->opt_lo = n_opt;
            if (n_opt > nd->opt_hi) nd->opt_hi = n_opt;
            if (l->dp > 1) {
                double bucket = pb->bucket_mb * 1048576.0, all = psi * 4;
                double blk = ct__plan_block_params(pb, l->tp, l->ep) * 4;
                int nb = 0;
                ct__plan_stage_params(pb, l, split, q, &nb);
                /* ZeRO reduce-scatters its buckets (each worker keeps its shard's sum);
                 * --grad-reduce bf16 sends half the bytes (modelled as the same collective at
                 * those bytes: its all-to-all and gather move what a ring would) */
                int red = l->zero >= 1 ? CT_COLL_REDUCESCATTER : CT_COLL_ALLREDUCE;
                double gw = pb->grad_wire_bytes / 4.0;
                bad |= add_link(nd, pb, red, l->dp, l->tp, gw * (all < bucket ? all : bucket));
                if (l->zero >= 2) /* a bucket per block, and the rest (embeddings, head) */
                    bad |= add_link(nd, pb, red, l->dp, l->tp, gw * blk) ||
                           add_link(nd, pb, red, l->dp, l->tp, gw * (all - nb * blk));
                if (l->zero >= 1) bad |= add_link(nd, pb, CT_COLL_ALLGATHER, l->dp, l->tp, all);
                if (l->zero >= 3) /* the blocks' and the embeddings' gathers */
                    bad |= add_link(nd, pb, CT_COLL_ALLGATHER, l->dp, l->tp, blk) ||
                           add_link(nd, pb, CT_COLL_ALLGATHER, l->dp, l->tp,
                                    ((double)c->padded_vocab / l->tp + c->max_seq) * C * 4);
                if (all > nd->copy_hi) nd->copy_hi = all;
            }
        }
        if (pb->W > 1) bad |= add_link(nd, pb, CT_COLL_ALLREDUCE, pb->W, 1, 4);
    }
    free(split);
    free(ls);
    if (st == CT_OK && bad) st = CT_ERR(err, CT_ERR_NOMEM, "no memory");
    if (st != CT_OK) {
        ct_plan_needs_free(nd);
        return st;
    }
    if (nd->opt_lo > nd->opt_hi) nd->opt_lo = nd->opt_hi;
    if (nd->copy_hi < 4096) nd->copy_hi = 4096;
    *out = nd;
    return CT_OK;
}
