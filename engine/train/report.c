/* report.c - the start-up report of a run: the configuration, the layout, the memory per
 * worker beside the memory model's prediction and the ZeRO formula; with its "config" and
 * "memory" metrics records. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"

/* Parameters one worker holds: its pipeline stage's tensors (its blocks, the embeddings on the
 * first stage, wte and the final LayerNorm on the last: the tied wte on both), each TP-split
 * tensor's 1/tp (the table's split column), replicated ones whole; a mixture of experts' expert
 * tensors apart (*experts: its E / ep experts of each held block). */
static double worker_params(const ct_train_run *r, int q, int pp, int tp, int ep, double *experts) {
    size_t sizes[CT_GPT_NUM_TENSORS];
    ct_gpt_param_sizes(&r->src.cfg, sizes);
    double n = 0, x = 0;
    int held = 0;
    for (int c = q; c < r->pipe.nchunks; c += pp) held += r->pipe.split[c];
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        ct_gpt_tensor_info ti = ct_gpt_tensor(&r->src.cfg, i);
        double k = 0, f = ti.split == CT_SPLIT_NONE ? 1.0 : 1.0 / tp;
        if (i >= CT_GPT_ln1w && i <= CT_GPT_fcprojb)
            k = (double)(sizes[i] / (size_t)r->src.cfg.layers) * held;
        else if (i == CT_GPT_wte && (q == 0 || q == pp - 1))
            k = (double)sizes[i];
        else if (i == CT_GPT_wpe && q == 0)
            k = (double)sizes[i];
        else if ((i == CT_GPT_lnfw || i == CT_GPT_lnfb) && q == pp - 1)
            k = (double)sizes[i];
        if (ti.expert) x += k * f / ep;
        else n += k * f;
    }
    if (experts) *experts = x;
    return n;
}

/* Model-state bytes per worker the ZeRO formulas give for psi parameters. */
static double expected_model_state(double psi, int N, int zero) {
    switch (zero) {
    case 1: return 8 * psi + 8 * psi / N;
    case 2: return 4 * psi + 12 * psi / N;
    case 3: return 16 * psi / N;
    default: return 16 * psi;
    }
}

ct_status ct_trainer_report(ct_trainer *t, FILE *f) {
    ct_status st = CT_OK;
    char *lines = NULL;
    /* collective: every worker's grid line */
    if (t->grid && (st = ct_grid_describe(t->grid, t->info->name, &lines)) != CT_OK)
        return ct__trainer_fail(t, NULL, st, "%s", ct_comm_errmsg(t->world));
    if (!t->leader) {
        free(lines);
        return CT_OK;
    }
    const ct_train_params *p = &t->p;
    const ct_train_run *r = t->r;
    const ct_gpt_config *cfg = &r->src.cfg;
    size_t np = ct_model_num_params(t->model);
    int N = t->W, accum = r->pipe.accum;
    fprintf(f, "train_gpt: configuration\n");
    ct_opts_log(f, ct_train_opts, ct_train_opts_count, p);
    fprintf(f, "  device         = %s (%s, %s)\n", t->info->name, t->info->platform,
            ct_device_type_str(t->info->type));
    if (r->topo)
        fprintf(f,
                "  workers        = %d (%d ranks x %d devices per rank): dp %d x tp %d x pp %d, "
                "ZeRO-%d, %d gradient buckets of <= %g MiB, overlap %s\n",
                N, ct_topo_nranks(r->topo), ct_topo_devices_per_rank(r->topo), p->dp, p->tp, p->pp,
                p->zero, ct_exec_grads(t->x) ? ct_grads_num_buckets(ct_exec_grads(t->x)) : 0,
                p->bucket_mb, p->overlap ? "on" : "off");
    if (p->tp > 1)
        fprintf(f,
                "  tensor parallel= %d workers per TP group: heads %d / %d, MLP %d / %d, "
                "vocabulary %d / %d rows each; sequence parallelism %s; input-gradient overlap "
                "%s; collectives %s\n",
                p->tp, cfg->heads / p->tp, cfg->heads, 4 * cfg->channels / p->tp,
                4 * cfg->channels, cfg->padded_vocab / p->tp, cfg->padded_vocab,
                p->sequence_parallel ? "on" : "off", p->tp_overlap ? "on" : "off",
                ct_tp_device_comm(ct_model_tp(t->model))
                    ? "on the device (the TP workers share one device's context)"
                    : "staged through host memory");
    if (cfg->experts > 0)
        fprintf(f,
                "  experts        = %d per block, top-k %d, capacity factor %g (an expert takes at "
                "most %d of a row's %d tokens' choices), aux-loss weight %g; ep %d: %d experts per "
                "worker, their gradients averaged over the %d workers holding the same ones; "
                "%zu of %zu parameters active per token\n",
                cfg->experts, cfg->top_k, p->capacity_factor,
                p->capacity_factor > 0
                    ? (int)fmin(p->seq, ceil(p->capacity_factor * cfg->top_k * (double)p->seq /
                                             cfg->experts))
                    : p->seq,
                p->seq, p->aux_loss, p->ep, cfg->experts / p->ep, p->dp / p->ep,
                ct_gpt_active_param_count(cfg), np);
    if (lines) fprintf(f, "%s", lines);
    free(lines);
    if (p->pp == 1 && strcmp(p->schedule, "1f1b"))
        fprintf(f, "  pipeline       = none: --schedule %s does not apply with --pp 1 (one stage runs "
                   "the plain step)\n",
                p->schedule);
    if (p->pp > 1) { /* the split, the schedule, what it keeps alive */
        int v = r->pipe.v;
        char split[512] = "", slots[256] = "";
        size_t a = 0, b = 0;
        for (int c = 0; c < r->pipe.nchunks && a < sizeof split - 16; c++)
            a += (size_t)snprintf(split + a, sizeof split - a, "%s%d", c ? "," : "", r->pipe.split[c]);
        for (int q = 0; q < p->pp && b < sizeof slots - 16; q++)
            b += (size_t)snprintf(slots + b, sizeof slots - b, "%s%d", q ? "," : "", t->slots[q]);
        double blk, emb, head;
        ct_pp_costs(cfg, p->seq, &blk, &emb, &head);
        ct_sched_sim sim = {0};
        ct_sched_costs unit = ct_sched_costs_unit();
        ct_err e2 = {0};
        double bub = ct_sched_simulate(t->sched, &unit, 0, &sim, &e2) == CT_OK ? sim.bubble : NAN;
        ct_sched_sim_free(&sim);
        fprintf(f,
                "  pipeline       = %d stages%s, schedule %s, %d micro-batches; blocks per %s "
                "%s (%s); activation slots per stage %s (the schedule's peak, of %d "
                "micro-batches); simulated bubble %.3f at unit costs\n",
                p->pp, v > 1 ? "" : "", ct_sched_name(r->pipe.kind), r->pipe.accum,
                v > 1 ? "model chunk" : "stage", split,
                r->pipe.split_given ? "--pp-split"
                               : "balanced by FLOPs: a block 1, the embedding and the head extra",
                slots, r->pipe.accum, bub);
        if (v > 1)
            fprintf(f, "                   %d chunks per stage (stage s holds chunks s, s+%d, ...)\n",
                    v, p->pp);
        if (!r->pipe.split_given)
            fprintf(f, "                   work per token: block %.4g, embedding %.4g, head %.4g "
                       "FLOPs (%.2f blocks)\n",
                    blk, emb, head, head / blk);
    }
    fprintf(f, "  model          = %s: L=%d NH=%d C=%d V=%d Vp=%d maxT=%d, %zu parameters\n",
            r->src.origin, cfg->layers, cfg->heads, cfg->channels, cfg->vocab, cfg->padded_vocab,
            cfg->max_seq, np);
    fprintf(f, "  data           = %s: %zu tokens in %d file(s), %lld steps per epoch\n",
            ct_data_name(r->train), ct_data_count(r->train), ct_data_files(r->train),
            (long long)ct_loader_windows(t->loader));
    if (r->val)
        fprintf(f, "  validation     = %s: %zu tokens\n", ct_data_name(r->val),
                ct_data_count(r->val));
    else
        fprintf(f, "  validation     = none\n");
    fprintf(f, "  batch          = %d rows x %d tokens x %d micro-batches = %d tokens per step",
            p->batch, p->seq, accum, p->batch * p->seq * accum);
    if (N > 1) fprintf(f, " (%d rows per worker)", t->b);
    fprintf(f, "\n  attention path = %s\n", ct_model_attention_note(t->model));
    fprintf(f,
            "  activations    = %.1f MiB per micro-batch slot, %.1f MiB of it per layer; %.1f MiB "
            "of scratch shared by the slots (%.1f MiB of it for recomputation)\n",
            ct_model_slot_bytes(t->model) / 1048576.0, ct_model_layer_bytes(t->model) / 1048576.0,
            ct_model_scratch_bytes(t->model) / 1048576.0,
            ct_model_recompute_bytes(t->model) / 1048576.0);
    size_t big = 0;
    int npc = ct_model_act_pieces(t->model, &big);
    if (npc > 1)
        fprintf(f,
                "                   held in %d device buffers (the largest %.1f MiB): one would "
                "exceed the device's largest allocation, %.1f MiB\n",
                npc, big / 1048576.0, ct_device_max_alloc(t->dev) / 1048576.0);
    int nbuf = 0, narr = ct_params_held(ct_model_params(t->model), &nbuf, &big);
    if (nbuf > narr)
        fprintf(f,
                "  model state    = %d arrays (parameters, gradients, optimizer) held in %d "
                "device buffers (the largest %.1f MiB): some would exceed the device's largest "
                "allocation, %.1f MiB\n",
                narr, nbuf, big / 1048576.0, ct_device_max_alloc(t->dev) / 1048576.0);
    fprintf(f, "  flops/token    = %.4g (6*N + 12*L*C*T%s)\n", t->flops_tok,
            cfg->experts > 0 ? ", N the active parameters" : "");
    fprintf(f, "  peak           = %.4g TFLOP/s (%s)\n", t->peak, t->peak_src);
    fprintf(f, "  start step     = %lld\n", (long long)t->start);
    if (t->tr)
        fprintf(f, "  trace          = %s, steps %d to %d\n", p->trace, t->trace_a, t->trace_b);
    char cfgline[320];
    snprintf(cfgline, sizeof cfgline,
             "\"params\":%zu,\"layers\":%d,\"heads\":%d,\"dim\":%d,\"vocab\":%d,\"seq\":%d,"
             "\"tokens_per_step\":%d,\"peak_tflops\":%.6g,\"workers\":%d,\"zero\":%d,"
             "\"dp\":%d,\"tp\":%d,\"sequence_parallel\":%d,\"experts\":%d,\"top_k\":%d,"
             "\"ep\":%d",
             np, cfg->layers, cfg->heads, cfg->channels, cfg->vocab, p->seq,
             p->batch * p->seq * accum, t->peak, N, p->zero, p->dp, p->tp, p->sequence_parallel,
             cfg->experts, cfg->top_k, p->ep);
    ct_metrics_record(t->mx, "config", cfgline);
    /* The memory report: one line and one record per worker, the bytes allocated beside the
     * memory model's prediction (ct_train_mem_predict, at the attention path the model chose)
     * and, with several workers, the model state against the ZeRO formula. */
    ct_train_params pp_ = *p;
    pp_.attention = ct_attn_path_name(ct_model_attention(t->model, NULL));
    {
        ct_recompute rc = ct_model_plan_of(t->model)->recompute;
        if (rc != CT_RECOMPUTE_NONE)
            fprintf(f, "  recomputation  = %s", ct_recompute_name(rc));
        if (rc == CT_RECOMPUTE_BLOCK && cfg->experts > 0)
            fprintf(f, ": each block keeps its input and its MoE layer's tensors (recomputing "
                       "those would repeat the routing and the all-to-alls), and runs its forward "
                       "again (to ln2) before its backward\n");
        else if (rc == CT_RECOMPUTE_BLOCK)
            fprintf(f, ": each block keeps its input only, and runs its forward again (to the "
                       "GELU) before its backward\n");
        else if (rc == CT_RECOMPUTE_ATTENTION && cfg->experts > 0)
            fprintf(f, ": %s recomputed before each block's backward (the MoE layers keep their "
                       "own tensors)\n",
                    ct_model_attention(t->model, NULL) == CT_ATTN_FUSED
                        ? "the LayerNorm outputs dropped and"
                        : "the attention probabilities and the LayerNorm outputs dropped and");
        else if (rc == CT_RECOMPUTE_ATTENTION)
            fprintf(f, ": %s recomputed before each block's backward\n",
                    ct_model_plan_of(t->model)->split_backward
                        ? "the attention probabilities dropped (zb1's weight half reads the "
                          "LayerNorm and GELU outputs later, so they are kept) and"
                    : ct_model_attention(t->model, NULL) == CT_ATTN_FUSED
                        ? "the LayerNorm and GELU outputs dropped (the fused path keeps no "
                          "scores) and"
                        : "the attention probabilities and the LayerNorm and GELU outputs "
                          "dropped and");
    }
    fprintf(f,
            "  memory per worker: allocated | predicted by the memory model, bytes (device; comm "
            "= host staging)%s:\n",
            p->pp > 1 ? ", model state against the ZeRO formula for its stage's parameters"
            : N > 1   ? ", model state against the ZeRO formula for psi_tp"
                      : "");
    for (int w = 0; w < N; w++) {
        const uint64_t *u = t->mem + (size_t)w * CT_MEM__COUNT;
        ct_mem_predict mp;
        ct_err e2 = {0};
        pp_.tp_comm = t->tpdev[w] ? "device" : "host";
        int okp = ct_train_mem_predict(&pp_, cfg, w, &mp, &e2) == CT_OK;
        uint64_t pred[CT_MEM__COUNT];
        for (int c = 0; c < CT_MEM__COUNT; c++)
            pred[c] = okp ? mp.device[c] + (c == CT_MEM_COMM ? mp.host_comm : 0) : 0;
        int q = ct_layout_coords(&(ct_layout){p->dp, p->tp, p->pp, p->zero, p->ep}, w).pp_rank;
        /* experts: their share over ep, sharded over the dp / ep workers holding them */
        double psx = 0, psi = worker_params(r, q, p->pp, p->tp, p->ep, &psx);
        double want = expected_model_state(psi, p->dp, p->zero) +
                      expected_model_state(psx, p->dp / p->ep, p->zero);
        uint64_t state = u[CT_MEM_PARAMS] + u[CT_MEM_GRADS] + u[CT_MEM_OPTIMIZER];
        char line[768], rest[160] = "";
        size_t l = (size_t)snprintf(line, sizeof line, "    worker %d:", w);
        static const char *const cn[CT_MEM__COUNT] = {"params", "grads", "optimizer",
                                                       "activations", "workspace", "comm"};
        for (int c = 0; c < CT_MEM__COUNT; c++)
            l += (size_t)snprintf(line + l, sizeof line - l, " %s %llu|%llu", cn[c],
                                  (unsigned long long)u[c], (unsigned long long)pred[c]);
        if (p->pp > 1) snprintf(rest, sizeof rest, " (stage %d, %d slots)", q, t->slots[q]);
        if (N > 1)
            snprintf(rest + strlen(rest), sizeof rest - strlen(rest),
                     " | model state %llu (%.3f x formula)", (unsigned long long)state,
                     (double)state / want);
        fprintf(f, "%s%s%s\n", line, rest, okp ? "" : " (no prediction: see below)");
        if (!okp) fprintf(f, "      memory model: %s\n", e2.msg);
        char rec[1200];
        size_t k = (size_t)snprintf(
            rec, sizeof rec,
            "\"worker\":%d,\"workers\":%d,\"zero\":%d,\"params\":%llu,\"grads\":%llu,"
            "\"optimizer\":%llu,\"activations\":%llu,\"workspace\":%llu,\"comm\":%llu,"
            "\"model_state\":%llu,\"model_state_formula\":%.0f,\"num_params\":%zu,"
            "\"psi_tp\":%.0f,\"tp\":%d,\"dp\":%d,\"recompute\":\"%s\",\"psi_experts\":%.0f,"
            "\"ep\":%d",
            w, N, p->zero, (unsigned long long)u[CT_MEM_PARAMS],
            (unsigned long long)u[CT_MEM_GRADS], (unsigned long long)u[CT_MEM_OPTIMIZER],
            (unsigned long long)u[CT_MEM_ACTIVATIONS], (unsigned long long)u[CT_MEM_WORKSPACE],
            (unsigned long long)u[CT_MEM_COMM], (unsigned long long)state, want, np, psi, p->tp,
            p->dp, p->recompute, psx, p->ep);
        if (okp)
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
                (unsigned long long)mp.host_grads, (unsigned long long)mp.host_zero,
                (unsigned long long)mp.host_tp, (unsigned long long)mp.act_slot,
                (unsigned long long)mp.act_scratch, (unsigned long long)mp.act_layer,
                (unsigned long long)mp.act_recompute, mp.slots, ct_attn_path_name(mp.attention),
                (unsigned long long)mp.largest, mp.largest_name);
        if (p->pp > 1) /* the stage and its activation slots */
            snprintf(rec + k, sizeof rec - k, ",\"stage\":%d,\"slots\":%d,\"stage_params\":%.0f",
                     q, t->slots[q], psi);
        ct_metrics_record(t->mx, "memory", rec);
    }
    fflush(f);
    return CT_OK;
}

