/* ranges.c - the executor's gradient ranges: which parts of a worker's flat gradient are
 * reduced over which groups (DP, the experts' DP group, a pipeline's embedding group, the TP
 * group under sequence parallelism), consecutive alike parts merged. Pure: the memory model
 * plans the same ranges with stand-in groups (ct__exec_ranges in engine_impl.h). */
#include "exec_impl.h"

/* A held (tensor, layer) piece of the flat layout and how it is reduced. */
typedef struct flat_piece {
    size_t lo, hi;
    ct_comm *g0; /* the first group (AVG): DP, or the expert-data-parallel group, or none */
    ct_comm *g1; /* the second group (SUM): the embedding group, the TP group, or none */
    int norm_skip;
} flat_piece;
static int piece_cmp(const void *a, const void *b) {
    size_t x = ((const flat_piece *)a)->lo, y = ((const flat_piece *)b)->lo;
    return x < y ? -1 : x > y;
}

/* The gradient ranges of this worker's flat layout, consecutive pieces alike merged:
 * everything averaged over the DP group dp (NULL: none), except a mixture-of-experts model's
 * expert tensors: averaged over the workers holding the same experts, edp (the
 * expert-data-parallel group, dp / ep of them; NULL when dp = ep); the tied wte of a pipeline
 * then summed over the embedding group emb (the last stage's copy left out of ZeRO-2's norm);
 * under sequence parallelism (tpg not NULL) the replicated LayerNorm parameters summed over the
 * TP group. Every other replicated tensor's gradient is already whole on every TP worker (wpe,
 * attprojb and fcprojb are computed from the gathered output gradient). Pure: the groups are
 * only stored and compared, so the memory model calls it with stand-ins (ct__exec_ranges). */
ct_status ct__exec_ranges(const ct_params *P, ct_comm *dp, ct_comm *edp, ct_comm *emb,
                          ct_comm *tpg, ct_grad_range **out, int *nout, ct_err *err) {
    const ct_gpt_config *c = ct_params_config(P);
    int n = 0;
    *out = NULL, *nout = 0;
    flat_piece *pc = ct_malloc(sizeof *pc * (size_t)(CT_GPT_NUM_TENSORS * c->layers + 2));
    if (!pc) return CT_ERR(err, CT_ERR_NOMEM, "ct_exec_create: out of host memory");
    size_t xlo, xhi;
    ct_params_expert_range(P, &xlo, &xhi);
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        if (!ct_params_holds(P, i) || ct_params_slice_len(P, i) == 0) continue;
        int block = i >= CT_GPT_ln1w && i <= CT_GPT_fcprojb;
        int ln = i == CT_GPT_ln1w || i == CT_GPT_ln1b || i == CT_GPT_ln2w || i == CT_GPT_ln2b ||
                 i == CT_GPT_lnfw || i == CT_GPT_lnfb;
        int ex = ct_params_is_expert(P, i);
        for (int l = 0; l < (block ? c->layers : 1); l++) {
            if (block && !ct_params_holds_layer(P, l)) continue;
            pc[n].lo = ct_params_flat_off(P, i, l);
            pc[n].hi = pc[n].lo + ct_params_slice_len(P, i);
            pc[n].g0 = ex ? edp : dp;
            pc[n].g1 = i == CT_GPT_wte && emb ? emb : tpg && ln ? tpg : NULL;
            pc[n].norm_skip = i == CT_GPT_wte && emb && !ct_params_has_embed(P);
            n++;
        }
    }
    size_t xend = xlo; /* the experts' ZeRO padding joins their range (zeros: no effect) */
    for (int k = 0; k < n; k++)
        if (pc[k].hi <= xhi && pc[k].hi > xend) xend = pc[k].hi;
    if (xhi > xend) {
        pc[n].lo = xend, pc[n].hi = xhi, pc[n].g0 = edp, pc[n].g1 = NULL, pc[n].norm_skip = 0;
        n++;
    }
    qsort(pc, (size_t)n, sizeof *pc, piece_cmp);
    ct_grad_range *rg = ct_calloc((size_t)(n ? n : 1), sizeof *rg);
    if (!rg) {
        free(pc);
        return CT_ERR(err, CT_ERR_NOMEM, "ct_exec_create: out of host memory");
    }
    int nr = 0;
    for (int k = 0; k < n; k++) {
        ct_grad_range *r = nr ? &rg[nr - 1] : NULL;
        if (r && r->hi == pc[k].lo && r->groups[0] == pc[k].g0 && r->groups[1] == pc[k].g1 &&
            r->norm_skip == pc[k].norm_skip) {
            r->hi = pc[k].hi;
            continue;
        }
        r = &rg[nr++];
        r->lo = pc[k].lo, r->hi = pc[k].hi;
        r->groups[0] = pc[k].g0;
        r->ops[0] = CT_OP_AVG;
        r->groups[1] = pc[k].g1;
        r->ops[1] = CT_OP_SUM;
        r->norm_skip = pc[k].norm_skip;
    }
    free(pc);
    *out = rg, *nout = nr;
    return CT_OK;
}

