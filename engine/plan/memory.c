/* memory.c - what a worker of a layout holds: its device bytes by category (the engine's own
 * memory model, ct_train_mem_predict, for the flags that run the layout) and the parameters of a
 * pipeline stage and of one block (the sizes the time model sends and updates). */
#include <string.h>

#include "plan_impl.h"

ct_status ct_plan_memory(const ct_plan_problem *pb, const ct_plan_layout *l, int w, ct_plan_mem *out,
                         ct_err *err) {
    memset(out, 0, sizeof *out);
    /* The trainer's own prediction (ct_train_mem_predict: the functions that size its
     * allocations) for the flags that would run l; --pp-split is not the planner's (it uses
     * the FLOP-balanced split, as ct__plan_split does). */
    ct_train_params q;
    ct__plan_params(pb, l, &pb->base, &q);
    q.overlap = pb->overlap;
    q.pp_split = "";
    q.attention = ct_attn_path_name(pb->attn);
    q.recompute = pb->recompute[0] ? pb->recompute : "none";
    ct_mem_predict mp;
    ct_status st = ct_train_mem_predict(&q, &pb->cfg, w, &mp, err);
    if (st != CT_OK) return st;
    out->params = (double)mp.device[CT_MEM_PARAMS];
    out->grads = (double)mp.device[CT_MEM_GRADS];
    out->optimizer = (double)mp.device[CT_MEM_OPTIMIZER];
    out->activations = (double)mp.device[CT_MEM_ACTIVATIONS];
    out->workspace = (double)mp.device[CT_MEM_WORKSPACE];
    out->total = (double)mp.device_total;
    out->host = (double)(mp.device[CT_MEM_COMM] + mp.host_comm);
    out->attention_bound = mp.attention_bound;
    out->largest = (double)mp.largest;
    snprintf(out->largest_name, sizeof out->largest_name, "%s", mp.largest_name);
    return CT_OK;
}

/* ------------------------------------------------------------------ what a layout holds */

/* Parameters the worker at stage q holds (TP-split tensors / tp), as the memory report counts
 * them; blocks: the blocks it holds. */
double ct__plan_stage_params(const ct_plan_problem *pb, const ct_plan_layout *l, const int *split,
                             int q, int *blocks) {
    int nchunks = l->pp * (l->sched == CT_SCHED_INTERLEAVED ? l->virt : 1), held = 0;
    for (int k = q; k < nchunks; k += l->pp) held += split[k];
    if (blocks) *blocks = held;
    return ct_gpt_worker_params(&pb->cfg, held, q == 0, q == l->pp - 1, l->tp, l->ep, NULL);
}

/* One block's parameters on a worker (TP-split / tp, experts / ep). */
double ct__plan_block_params(const ct_plan_problem *pb, int tp, int ep) {
    return ct_gpt_worker_params(&pb->cfg, 1, 0, 0, tp, ep, NULL);
}
