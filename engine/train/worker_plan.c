/* worker_plan.c - what a worker of a run holds and does, derived in one place: the layout and
 * its coordinates, the pipeline schedule and the chunks of blocks, the activation slots, the
 * model plan; the executor's options and the memory model's prediction from them. */
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"

int ct__train_accum(const ct_train_params *p) {
    return p->total_batch && p->batch * p->seq > 0 ? p->total_batch / (p->batch * p->seq) : 1;
}

ct_status ct__train_pipe_make(const ct_train_params *p, const ct_gpt_config *cfg,
                              ct__train_pipe *pipe, ct_err *err) {
    ct_status st;
    memset(pipe, 0, sizeof *pipe);
    pipe->accum = ct__train_accum(p);
    pipe->kind = CT_SCHED_TRIVIAL;
    if (p->pp > 1 && (st = ct_sched_parse(p->schedule, &pipe->kind, err)) != CT_OK) return st;
    pipe->v = pipe->kind == CT_SCHED_INTERLEAVED ? p->virtual_stages : 1;
    pipe->nchunks = p->pp * pipe->v;
    if (pipe->nchunks > cfg->layers || pipe->v > CT_MAX_CHUNKS)
        return CT_ERR(err, CT_ERR_ARG,
                      "--pp %d x --virtual-stages %d = %d model chunks, but the model has %d blocks "
                      "(each chunk needs one)%s",
                      p->pp, pipe->v, pipe->nchunks, cfg->layers,
                      pipe->v > CT_MAX_CHUNKS ? " or more chunks per stage than 16" : "");
    pipe->split = ct_malloc(sizeof(int) * (size_t)pipe->nchunks);
    if (!pipe->split) return CT_ERR(err, CT_ERR_NOMEM, "no memory");
    pipe->split_given = p->pp_split[0] != 0;
    if (pipe->split_given) return ct_pp_split_parse(p->pp_split, cfg, pipe->nchunks, pipe->split, err);
    return ct_pp_split_balanced(cfg, p->seq, pipe->nchunks, pipe->split, err);
}

void ct__train_pipe_free(ct__train_pipe *pipe) {
    free(pipe->split);
    pipe->split = NULL;
}

ct_status ct__train_slots(const ct_schedule *sched, int *slots, ct_err *err) {
    ct_sched_sim sim = {0};
    ct_sched_costs unit = ct_sched_costs_unit();
    ct_status st = ct_sched_simulate(sched, &unit, 0, &sim, err);
    for (int q = 0; st == CT_OK && q < sched->stages; q++)
        slots[q] = sim.peak_live[q] > 0 ? sim.peak_live[q] : 1;
    ct_sched_sim_free(&sim);
    return st;
}

ct_status ct_train_worker_plan(const ct_train_params *p, const ct_gpt_config *cfg, int worker,
                               ct_layout *lay, ct_coords *at, ct_model_plan *plan, ct_err *err) {
    ct_status st;
    memset(plan, 0, sizeof *plan);
    ct_layout l = {p->dp, p->tp, p->pp, p->zero, p->ep};
    if ((st = ct_layout_check(&l, p->dp * p->tp * p->pp, err)) != CT_OK) return st;
    if (worker < 0 || worker >= p->dp * p->tp * p->pp)
        return CT_ERR(err, CT_ERR_ARG, "worker %d outside the %d workers of dp %d x tp %d x pp %d",
                      worker, p->dp * p->tp * p->pp, p->dp, p->tp, p->pp);
    *lay = l;
    *at = ct_layout_coords(&l, worker);
    /* the schedule and the chunks of blocks, as ct_train_run_open has them */
    ct__train_pipe pipe;
    ct_schedule *sched = NULL;
    int *slots = ct_malloc(sizeof(int) * (size_t)p->pp);
    if (!slots) return CT_ERR(err, CT_ERR_NOMEM, "no memory");
    if ((st = ct__train_pipe_make(p, cfg, &pipe, err)) == CT_OK &&
        (st = ct_sched_make(pipe.kind, p->pp, pipe.accum, pipe.v, &sched, err)) == CT_OK)
        st = ct__train_slots(sched, slots, err);
    ct_sched_free(sched);
    if (st != CT_OK) {
        free(slots);
        ct__train_pipe_free(&pipe);
        return st;
    }
    /* activation slots: the schedule's peak live on this worker's stage (unit costs) */
    plan->max_B = p->batch / p->dp, plan->max_T = p->seq, plan->slots = slots[at->pp_rank];
    plan->split_backward = pipe.kind == CT_SCHED_ZB1;
    ct_attn_path_parse(p->attention, &plan->attention); /* checked by ct_train_params_check */
    plan->sp = p->sequence_parallel;
    ct_tp_comm_parse(p->tp_comm, &plan->tp_comm, NULL); /* checked by ct_train_params_check */
    ct_recompute_parse(p->recompute, &plan->recompute);
    plan->loss_chunk = p->loss_chunk;
    ct_precision_parse(p->precision, &plan->precision); /* checked by ct_train_params_check */
    plan->gemm = p->gemm, plan->tf32 = p->tf32;
    plan->bf16_round = !strcmp(p->bf16_round, "stochastic");
    plan->round_seed = (uint64_t)p->seed;
    plan->moe_capacity = p->capacity_factor;
    plan->moe_aux = p->aux_loss;
    if (p->pp > 1) {
        plan->chunks.nchunks = pipe.v;
        for (int j = 0, lo = 0, c = 0; c < pipe.nchunks; lo += pipe.split[c], c++)
            if (c % p->pp == at->pp_rank)
                plan->chunks.lo[j] = lo, plan->chunks.hi[j] = lo + pipe.split[c], j++;
    }
    free(slots);
    ct__train_pipe_free(&pipe);
    return CT_OK;
}

ct_exec_opts ct_train_exec_opts(const ct_train_params *p) {
    ct_exec_opts xo = ct_exec_opts_default();
    xo.grads.bucket_bytes = (size_t)(p->bucket_mb * 1048576.0);
    xo.grads.overlap = p->overlap;
    xo.grads.wire_bf16 = !strcmp(p->grad_reduce, "bf16");
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

