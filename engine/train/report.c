/* report.c - the start-up report of a run: the configuration, the layout, the memory per
 * worker beside the memory model's prediction and the ZeRO formula; with its "config" and
 * "memory" metrics records. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"

/* Model-state bytes per worker the ZeRO formulas give for psi parameters. */
static double expected_model_state(double psi, int N, int zero) {
    switch (zero) {
    case 1: return 8 * psi + 8 * psi / N;
    case 2: return 4 * psi + 12 * psi / N;
    case 3: return 16 * psi / N;
    default: return 16 * psi;
    }
}

void ct_train_report_free(ct_train_report *rep) {
    if (!rep) return;
    free(rep->grid_lines);
    free(rep->worker);
    memset(rep, 0, sizeof *rep);
}

/* The "config" record. */
static void config_record(ct_trainer *t, const ct_train_report *o) {
    const ct_train_params *p = o->params;
    const ct_gpt_config *cfg = &o->cfg;
    char line[480];
    snprintf(line, sizeof line,
             "\"params\":%zu,\"layers\":%d,\"heads\":%d,\"dim\":%d,\"vocab\":%d,\"seq\":%d,"
             "\"tokens_per_step\":%d,\"peak_tflops\":%.6g,\"workers\":%d,\"zero\":%d,"
             "\"dp\":%d,\"tp\":%d,\"sequence_parallel\":%d,\"experts\":%d,\"top_k\":%d,"
             "\"ep\":%d,\"arch\":\"%s\",\"kv_heads\":%d,\"ffn_dim\":%d",
             o->num_params, cfg->layers, cfg->heads, cfg->channels, cfg->vocab, p->seq,
             p->batch * p->seq * o->micro_batches, o->peak_tflops, o->workers, p->zero, p->dp,
             p->tp, p->sequence_parallel, cfg->experts, cfg->top_k, p->ep, ct_arch_name(cfg->arch),
             ct_gpt_kv_heads(cfg), ct_gpt_ffn(cfg));
    ct_metrics_record(t->mx, "config", line);
}

/* One worker's "memory" record; mp: the memory model's prediction (when w->predicted_ok). */
static void memory_record(ct_trainer *t, const ct_train_report *o, int wi,
                          const ct_mem_predict *mp) {
    const ct_train_params *p = o->params;
    const ct_train_report_worker *w = &o->worker[wi];
    const uint64_t *u = w->allocated, *pred = w->predicted;
    char rec[1200];
    size_t k = (size_t)snprintf(
        rec, sizeof rec,
        "\"worker\":%d,\"workers\":%d,\"zero\":%d,\"params\":%llu,\"grads\":%llu,"
        "\"optimizer\":%llu,\"activations\":%llu,\"workspace\":%llu,\"comm\":%llu,"
        "\"model_state\":%llu,\"model_state_formula\":%.0f,\"num_params\":%zu,"
        "\"psi_tp\":%.0f,\"tp\":%d,\"dp\":%d,\"recompute\":\"%s\",\"psi_experts\":%.0f,"
        "\"ep\":%d",
        wi, o->workers, p->zero, (unsigned long long)u[CT_MEM_PARAMS],
        (unsigned long long)u[CT_MEM_GRADS], (unsigned long long)u[CT_MEM_OPTIMIZER],
        (unsigned long long)u[CT_MEM_ACTIVATIONS], (unsigned long long)u[CT_MEM_WORKSPACE],
        (unsigned long long)u[CT_MEM_COMM], (unsigned long long)w->model_state,
        w->model_state_formula, o->num_params, w->psi, p->tp, p->dp, p->recompute,
        w->psi_experts, p->ep);
    if (w->predicted_ok)
        k += (size_t)snprintf(
            rec + k, sizeof rec - k,
            ",\"predicted\":{\"params\":%llu,\"grads\":%llu,\"optimizer\":%llu,"
            "\"activations\":%llu,\"workspace\":%llu,\"comm\":%llu,\"host_grads\":%llu,"
            "\"host_zero\":%llu,\"host_tp\":%llu,\"act_slot\":%llu,\"act_scratch\":%llu,"
            "\"act_layer\":%llu,\"act_recompute\":%llu,\"slots\":%d,\"attention\":\"%s\","
            "\"largest\":%llu,\"largest_name\":\"%s\"}",
            (unsigned long long)pred[CT_MEM_PARAMS], (unsigned long long)pred[CT_MEM_GRADS],
            (unsigned long long)pred[CT_MEM_OPTIMIZER],
            (unsigned long long)pred[CT_MEM_ACTIVATIONS],
            (unsigned long long)pred[CT_MEM_WORKSPACE], (unsigned long long)pred[CT_MEM_COMM],
            (unsigned long long)mp->host_grads, (unsigned long long)mp->host_zero,
            (unsigned long long)mp->host_tp, (unsigned long long)mp->act_slot,
            (unsigned long long)mp->act_scratch, (unsigned long long)mp->act_layer,
            (unsigned long long)mp->act_recompute, mp->slots, ct_attn_path_name(mp->attention),
            (unsigned long long)mp->largest, mp->largest_name);
    if (p->pp > 1) /* the stage and its activation slots */
        snprintf(rec + k, sizeof rec - k, ",\"stage\":%d,\"slots\":%d,\"stage_params\":%.0f",
                 w->stage, w->slots, w->psi);
    ct_metrics_record(t->mx, "memory", rec);
}

ct_status ct_trainer_report(ct_trainer *t, ct_train_report *o) {
    ct_status st = CT_OK;
    memset(o, 0, sizeof *o);
    /* collective: every worker's grid line */
    if (t->grid && (st = ct_grid_describe(t->grid, t->info->name, &o->grid_lines)) != CT_OK)
        return ct__trainer_fail(t, NULL, st, "%s", ct_comm_errmsg(t->world));
    if (!t->leader) {
        ct_train_report_free(o);
        return CT_OK;
    }
    const ct_train_params *p = &t->p;
    const ct_train_run *r = t->r;
    const ct_gpt_config *cfg = &r->src.cfg;
    /* 1. The run: configuration, layout, model, data. */
    o->params = p;
    o->device = t->info;
    o->workers = t->W;
    o->multi = r->topo != NULL;
    if (r->topo) {
        o->ranks = ct_topo_nranks(r->topo);
        o->devices_per_rank = ct_topo_devices_per_rank(r->topo);
    }
    o->buckets = ct_exec_grads(t->x) ? ct_grads_num_buckets(ct_exec_grads(t->x)) : 0;
    o->tp_device = ct_tp_device_comm(ct_model_tp(t->model));
    o->cfg = *cfg;
    o->origin = r->src.origin;
    o->num_params = ct_model_num_params(t->model);
    o->active_params = ct_gpt_active_param_count(cfg);
    o->expert_capacity =
        cfg->experts > 0 && p->capacity_factor > 0
            ? (int)fmin(p->seq, ceil(p->capacity_factor * cfg->top_k * (double)p->seq /
                                     cfg->experts))
            : p->seq;
    o->schedule = ct_sched_name(r->pipe.kind);
    o->micro_batches = r->pipe.accum;
    o->chunks_per_stage = r->pipe.v;
    o->nchunks = r->pipe.nchunks;
    o->split = r->pipe.split;
    o->split_given = r->pipe.split_given;
    o->slots = t->slots;
    ct_pp_costs(cfg, p->seq, &o->block_flops, &o->embed_flops, &o->head_flops);
    {
        ct_sched_sim sim = {0};
        ct_sched_costs unit = ct_sched_costs_unit();
        ct_err e2 = {0};
        o->bubble_unit =
            ct_sched_simulate(t->sched, &unit, 0, &sim, &e2) == CT_OK ? sim.bubble : NAN;
        ct_sched_sim_free(&sim);
    }
    o->data_name = ct_data_name(r->train);
    o->data_tokens = ct_data_count(r->train);
    o->data_files = ct_data_files(r->train);
    o->steps_per_epoch = (long long)ct_loader_windows(t->loader);
    if (r->val) o->val_name = ct_data_name(r->val), o->val_tokens = ct_data_count(r->val);
    o->rows_per_worker = t->b;
    /* 2. The model as built: attention, activations, model state, recomputation. */
    o->attention_note = ct_model_attention_note(t->model);
    o->gemm_note = ct_model_gemm_note(t->model);
    o->attention = ct_model_attention(t->model, NULL);
    o->recompute = ct_model_plan_of(t->model)->recompute;
    o->split_backward = ct_model_plan_of(t->model)->split_backward;
    o->act_slot_bytes = (double)ct_model_slot_bytes(t->model);
    o->act_layer_bytes = (double)ct_model_layer_bytes(t->model);
    o->act_scratch_bytes = (double)ct_model_scratch_bytes(t->model);
    o->act_recompute_bytes = (double)ct_model_recompute_bytes(t->model);
    o->act_buffers = ct_model_act_pieces(t->model, &o->act_largest);
    o->state_arrays = ct_params_held(ct_model_params(t->model), &o->state_buffers,
                                     &o->state_largest);
    o->max_alloc = ct_device_max_alloc(t->dev);
    o->flops_per_token = t->flops_tok;
    o->peak_tflops = t->peak;
    o->peak_source = t->peak_src;
    o->start = t->start;
    o->traced = t->tr != NULL, o->trace_first = t->trace_a, o->trace_last = t->trace_b;
    config_record(t, o);
    /* 3. The memory per worker: the bytes allocated beside the memory model's prediction
     * (ct_train_mem_predict, at the attention path the model chose) and the model state against
     * the ZeRO formula; one record each. */
    int N = t->W;
    o->worker = ct_calloc((size_t)N, sizeof *o->worker);
    if (!o->worker) {
        ct_train_report_free(o);
        return ct__trainer_fail(t, NULL, CT_ERR_NOMEM, "no memory for the report");
    }
    ct_train_params pp_ = *p;
    pp_.attention = ct_attn_path_name(o->attention);
    for (int wi = 0; wi < N; wi++) {
        ct_train_report_worker *w = &o->worker[wi];
        const uint64_t *u = t->mem + (size_t)wi * CT_MEM__COUNT;
        ct_mem_predict mp;
        ct_err e2 = {0};
        pp_.tp_comm = t->tpdev[wi] ? "device" : "host";
        w->predicted_ok = ct_train_mem_predict(&pp_, cfg, wi, &mp, &e2) == CT_OK;
        if (!w->predicted_ok) snprintf(w->predict_error, sizeof w->predict_error, "%s", e2.msg);
        for (int c = 0; c < CT_MEM__COUNT; c++) {
            w->allocated[c] = u[c];
            w->predicted[c] =
                w->predicted_ok ? mp.device[c] + (c == CT_MEM_COMM ? mp.host_comm : 0) : 0;
        }
        w->stage = ct_layout_coords(&(ct_layout){p->dp, p->tp, p->pp, p->zero, p->ep}, wi).pp_rank;
        w->slots = t->slots[w->stage];
        /* experts: their share over ep, sharded over the dp / ep workers holding them */
        int held = 0;
        for (int c = w->stage; c < r->pipe.nchunks; c += p->pp) held += r->pipe.split[c];
        w->psi = ct_gpt_worker_params(&r->src.cfg, held, w->stage == 0, w->stage == p->pp - 1,
                                      p->tp, p->ep, &w->psi_experts);
        w->model_state_formula = expected_model_state(w->psi, p->dp, p->zero) +
                                 expected_model_state(w->psi_experts, p->dp / p->ep, p->zero);
        w->model_state = u[CT_MEM_PARAMS] + u[CT_MEM_GRADS] + u[CT_MEM_OPTIMIZER];
        memory_record(t, o, wi, &mp);
    }
    return CT_OK;
}
