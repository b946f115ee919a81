/* worker_plan.c - what a worker of a run holds and does, derived in one place: the layout and
 * its coordinates, the pipeline schedule and the chunks of blocks, the activation slots, the
 * model plan; the executor's options and the memory model's prediction from them. */
#include <string.h>

#include "train_impl.h"

ct_status ct_train_worker_plan(const ct_train_params *p, const ct_gpt_config *cfg, int worker,
                               ct_layout *lay, ct_coords *at, ct_model_plan *plan, ct_err *err) {
    ct_status st;
    ct_schedule *sched = NULL;
    ct_sched_sim sim = {0};
    memset(plan, 0, sizeof *plan);
    ct_layout l = {p->dp, p->tp, p->pp, p->zero, p->ep};
    if ((st = ct_layout_check(&l, p->dp * p->tp * p->pp, err)) != CT_OK) return st;
    if (worker < 0 || worker >= p->dp * p->tp * p->pp)
        return CT_ERR(err, CT_ERR_ARG, "worker %d outside the %d workers of dp %d x tp %d x pp %d",
                      worker, p->dp * p->tp * p->pp, p->dp, p->tp, p->pp);
    *lay = l;
    *at = ct_layout_coords(&l, worker);
    /* the schedule and the chunks of blocks: the same functions ct_train_run_open uses */
    int accum = p->total_batch ? p->total_batch / (p->batch * p->seq) : 1;
    ct_sched_kind kind = CT_SCHED_TRIVIAL;
    if (p->pp > 1 && (st = ct_sched_parse(p->schedule, &kind, err)) != CT_OK) return st;
    int v = kind == CT_SCHED_INTERLEAVED ? p->virtual_stages : 1, nchunks = p->pp * v;
    if (nchunks > cfg->layers || v > CT_MAX_CHUNKS)
        return CT_ERR(err, CT_ERR_ARG,
                      "--pp %d x --virtual-stages %d = %d model chunks, but the model has %d "
                      "blocks (each chunk needs one; at most %d per stage)",
                      p->pp, v, nchunks, cfg->layers, CT_MAX_CHUNKS);
    int split[CT_MAX_CHUNKS * 64];
    if (nchunks > (int)(sizeof split / sizeof split[0]))
        return CT_ERR(err, CT_ERR_ARG, "%d model chunks: too many", nchunks);
    if (p->pp_split[0]) st = ct_pp_split_parse(p->pp_split, cfg, nchunks, split, err);
    else st = ct_pp_split_balanced(cfg, p->seq, nchunks, split, err);
    if (st != CT_OK) return st;
    /* activation slots: the schedule's peak live on this worker's stage (unit costs) */
    ct_sched_costs unit = ct_sched_costs_unit();
    if ((st = ct_sched_make(kind, p->pp, accum, v, &sched, err)) != CT_OK) return st;
    st = ct_sched_simulate(sched, &unit, 0, &sim, err);
    int slots = st == CT_OK && sim.peak_live[at->pp_rank] > 0 ? sim.peak_live[at->pp_rank] : 1;
    ct_sched_sim_free(&sim);
    ct_sched_free(sched);
    if (st != CT_OK) return st;
    plan->max_B = p->batch / p->dp, plan->max_T = p->seq, plan->slots = slots;
    plan->split_backward = kind == CT_SCHED_ZB1;
    ct_attn_path_parse(p->attention, &plan->attention); /* checked by ct_train_params_check */
    plan->sp = p->sequence_parallel;
    ct_tp_comm_parse(p->tp_comm, &plan->tp_comm, NULL); /* checked by ct_train_params_check */
    ct_recompute_parse(p->recompute, &plan->recompute);
    plan->moe_capacity = p->capacity_factor;
    plan->moe_aux = p->aux_loss;
    if (p->pp > 1) {
        plan->chunks.nchunks = v;
        for (int j = 0, lo = 0, c = 0; c < nchunks; lo += split[c], c++)
            if (c % p->pp == at->pp_rank)
                plan->chunks.lo[j] = lo, plan->chunks.hi[j] = lo + split[c], j++;
    }
    return CT_OK;
}

ct_exec_opts ct_train_exec_opts(const ct_train_params *p) {
    ct_exec_opts xo = ct_exec_opts_default();
    xo.grads.bucket_bytes = (size_t)(p->bucket_mb * 1048576.0);
    xo.grads.overlap = p->overlap;
    return xo;
}

ct_status ct_train_mem_predict(const ct_train_params *p, const ct_gpt_config *cfg, int worker,
                               ct_mem_predict *out, ct_err *err) {
    ct_layout lay;
    ct_coords at;
    ct_model_plan plan;
    ct_status st = ct_train_worker_plan(p, cfg, worker, &lay, &at, &plan, err);
    if (st != CT_OK) return st;
    ct_exec_opts xo = ct_train_exec_opts(p);
    return ct_model_mem_predict(cfg, &lay, &at, &plan, &xo, out, err);
}

