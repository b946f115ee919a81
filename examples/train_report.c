/* train_report.c - the text of the engine's start-up report and pipeline bubble (the engine
 * gives them as data: ct_trainer_report, ct_trainer_pipeline_report). The lines are train_gpt's
 * interface to people and to the tests that grep them: change them deliberately. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "train_report.h"

/* "  pipeline = ...": the split, the schedule, what it keeps alive. */
static void print_pipeline(FILE *f, const ct_train_report *r) {
    const ct_train_params *p = r->params;
    int v = r->chunks_per_stage;
    char split[512] = "", slots[256] = "";
    size_t a = 0, b = 0;
    for (int c = 0; c < r->nchunks && a < sizeof split - 16; c++)
        a += (size_t)snprintf(split + a, sizeof split - a, "%s%d", c ? "," : "", r->split[c]);
    for (int q = 0; q < p->pp && b < sizeof slots - 16; q++)
        b += (size_t)snprintf(slots + b, sizeof slots - b, "%s%d", q ? "," : "", r->slots[q]);
    fprintf(f,
            "  pipeline       = %d stages%s, schedule %s, %d micro-batches; blocks per %s "
            "%s (%s); activation slots per stage %s (the schedule's peak, of %d "
            "micro-batches); simulated bubble %.3f at unit costs\n",
            p->pp, v > 1 ? "" : "", r->schedule, r->micro_batches,
            v > 1 ? "model chunk" : "stage", split,
            r->split_given ? "--pp-split"
                           : "balanced by FLOPs: a block 1, the embedding and the head extra",
            slots, r->micro_batches, r->bubble_unit);
    if (v > 1)
        fprintf(f, "                   %d chunks per stage (stage s holds chunks s, s+%d, ...)\n",
                v, p->pp);
    if (!r->split_given)
        fprintf(f, "                   work per token: block %.4g, embedding %.4g, head %.4g "
                   "FLOPs (%.2f blocks)\n",
                r->block_flops, r->embed_flops, r->head_flops, r->head_flops / r->block_flops);
}

/* "  recomputation  = ...": what the mode drops and recomputes. */
static void print_recompute(FILE *f, const ct_train_report *r) {
    ct_recompute rc = r->recompute;
    int moe = r->cfg.experts > 0, fused = r->attention == CT_ATTN_FUSED;
    if (rc != CT_RECOMPUTE_NONE) fprintf(f, "  recomputation  = %s", ct_recompute_name(rc));
    if (rc == CT_RECOMPUTE_BLOCK && moe)
        fprintf(f, ": each block keeps its input and its MoE layer's tensors (recomputing "
                   "those would repeat the routing and the all-to-alls), and runs its forward "
                   "again (to ln2) before its backward\n");
    else if (rc == CT_RECOMPUTE_BLOCK)
        fprintf(f, ": each block keeps its input only, and runs its forward again (to the "
                   "GELU) before its backward\n");
    else if (rc == CT_RECOMPUTE_ATTENTION && moe)
        fprintf(f, ": %s recomputed before each block's backward (the MoE layers keep their "
                   "own tensors)\n",
                fused ? "the LayerNorm outputs dropped and"
                      : "the attention probabilities and the LayerNorm outputs dropped and");
    else if (rc == CT_RECOMPUTE_ATTENTION)
        fprintf(f, ": %s recomputed before each block's backward\n",
                r->split_backward
                    ? "the attention probabilities dropped (zb1's weight half reads the "
                      "LayerNorm and GELU outputs later, so they are kept) and"
                : fused ? "the LayerNorm and GELU outputs dropped (the fused path keeps no "
                          "scores) and"
                        : "the attention probabilities and the LayerNorm and GELU outputs "
                          "dropped and");
}

/* "  memory per worker: ..." and a line per worker. */
static void print_memory(FILE *f, const ct_train_report *r) {
    const ct_train_params *p = r->params;
    int N = r->workers;
    fprintf(f,
            "  memory per worker: allocated | predicted by the memory model, bytes (device; comm "
            "= host staging)%s:\n",
            p->pp > 1 ? ", model state against the ZeRO formula for its stage's parameters"
            : N > 1   ? ", model state against the ZeRO formula for psi_tp"
                      : "");
    static const char *const cn[CT_MEM__COUNT] = {"params",      "grads",     "optimizer",
                                                   "activations", "workspace", "comm"};
    for (int wi = 0; wi < N; wi++) {
        const ct_train_report_worker *w = &r->worker[wi];
        char line[768], rest[160] = "";
        size_t l = (size_t)snprintf(line, sizeof line, "    worker %d:", wi);
        for (int c = 0; c < CT_MEM__COUNT; c++)
            l += (size_t)snprintf(line + l, sizeof line - l, " %s %llu|%llu", cn[c],
                                  (unsigned long long)w->allocated[c],
                                  (unsigned long long)w->predicted[c]);
        if (p->pp > 1) snprintf(rest, sizeof rest, " (stage %d, %d slots)", w->stage, w->slots);
        if (N > 1)
            snprintf(rest + strlen(rest), sizeof rest - strlen(rest),
                     " | model state %llu (%.3f x formula)", (unsigned long long)w->model_state,
                     (double)w->model_state / w->model_state_formula);
        fprintf(f, "%s%s%s\n", line, rest, w->predicted_ok ? "" : " (no prediction: see below)");
        if (!w->predicted_ok) fprintf(f, "      memory model: %s\n", w->predict_error);
    }
}

void train_report_print(FILE *f, const ct_train_report *r) {
    const ct_train_params *p = r->params;
    const ct_gpt_config *cfg = &r->cfg;
    const ct_device_info *dev = r->device;
    int N = r->workers, accum = r->micro_batches;
    fprintf(f, "train_gpt: configuration\n");
    ct_opts_log(f, ct_train_opts, ct_train_opts_count, p);
    fprintf(f, "  device         = %s (%s, %s)\n", dev->name, dev->platform,
            ct_device_type_str(dev->type));
    if (r->multi)
        fprintf(f,
                "  workers        = %d (%d ranks x %d devices per rank): dp %d x tp %d x pp %d, "
                "ZeRO-%d, %d gradient buckets of <= %g MiB, overlap %s\n",
                N, r->ranks, r->devices_per_rank, p->dp, p->tp, p->pp, p->zero, r->buckets,
                p->bucket_mb, p->overlap ? "on" : "off");
    if (p->tp > 1)
        fprintf(f,
                "  tensor parallel= %d workers per TP group: heads %d / %d, MLP %d / %d, "
                "vocabulary %d / %d rows each; sequence parallelism %s; input-gradient overlap "
                "%s; collectives %s\n",
                p->tp, cfg->heads / p->tp, cfg->heads, ct_gpt_ffn(cfg) / p->tp,
                ct_gpt_ffn(cfg), cfg->padded_vocab / p->tp, cfg->padded_vocab,
                p->sequence_parallel ? "on" : "off", p->tp_overlap ? "on" : "off",
                r->tp_device ? "on the device (the TP workers share one device's context)"
                             : "staged through host memory");
    if (cfg->experts > 0)
        fprintf(f,
                "  experts        = %d per block, top-k %d, capacity factor %g (an expert takes at "
                "most %d of a row's %d tokens' choices), aux-loss weight %g; ep %d: %d experts per "
                "worker, their gradients averaged over the %d workers holding the same ones; "
                "%zu of %zu parameters active per token\n",
                cfg->experts, cfg->top_k, p->capacity_factor, r->expert_capacity, p->seq,
                p->aux_loss, p->ep, cfg->experts / p->ep, p->dp / p->ep, r->active_params,
                r->num_params);
    if (r->grid_lines) fprintf(f, "%s", r->grid_lines);
    if (p->pp == 1 && strcmp(p->schedule, "1f1b"))
        fprintf(f, "  pipeline       = none: --schedule %s does not apply with --pp 1 (one stage runs "
                   "the plain step)\n",
                p->schedule);
    if (p->pp > 1) print_pipeline(f, r);
    if (ct_gpt_is_llama(cfg))
        fprintf(f,
                "  model          = %s: llama L=%d NH=%d NKV=%d C=%d F=%d V=%d Vp=%d maxT=%d "
                "theta=%g eps=%g %s, %zu parameters\n",
                r->origin, cfg->layers, cfg->heads, cfg->kv_heads, cfg->channels, cfg->ffn_dim,
                cfg->vocab, cfg->padded_vocab, cfg->max_seq, (double)cfg->rope_theta,
                (double)cfg->norm_eps, cfg->tie_embeddings ? "tied" : "untied", r->num_params);
    else
        fprintf(f, "  model          = %s: L=%d NH=%d C=%d V=%d Vp=%d maxT=%d, %zu parameters\n",
                r->origin, cfg->layers, cfg->heads, cfg->channels, cfg->vocab, cfg->padded_vocab,
                cfg->max_seq, r->num_params);
    fprintf(f, "  data           = %s: %zu tokens in %d file(s), %lld steps per epoch\n",
            r->data_name, r->data_tokens, r->data_files, r->steps_per_epoch);
    if (r->val_name)
        fprintf(f, "  validation     = %s: %zu tokens\n", r->val_name, r->val_tokens);
    else
        fprintf(f, "  validation     = none\n");
    fprintf(f, "  batch          = %d rows x %d tokens x %d micro-batches = %d tokens per step",
            p->batch, p->seq, accum, p->batch * p->seq * accum);
    if (N > 1) fprintf(f, " (%d rows per worker)", r->rows_per_worker);
    fprintf(f, "\n  attention path = %s\n", r->attention_note);
    if (r->gemm_note) { /* the decision, then a line per shape, indented under it */
        fprintf(f, "  gemm paths     = ");
        for (const char *q = r->gemm_note; *q; q++) {
            fputc(*q, f);
            if (*q == '\n') fprintf(f, "                   ");
        }
        fputc('\n', f);
    }
    fprintf(f,
            "  activations    = %.1f MiB per micro-batch slot, %.1f MiB of it per layer; %.1f MiB "
            "of scratch shared by the slots (%.1f MiB of it for recomputation)\n",
            r->act_slot_bytes / 1048576.0, r->act_layer_bytes / 1048576.0,
            r->act_scratch_bytes / 1048576.0, r->act_recompute_bytes / 1048576.0);
    if (r->act_buffers > 1)
        fprintf(f,
                "                   held in %d device buffers (the largest %.1f MiB): one would "
                "exceed the device's largest allocation, %.1f MiB\n",
                r->act_buffers, r->act_largest / 1048576.0, r->max_alloc / 1048576.0);
    if (r->state_buffers > r->state_arrays)
        fprintf(f,
                "  model state    = %d arrays (parameters, gradients, optimizer) held in %d "
                "device buffers (the largest %.1f MiB): some would exceed the device's largest "
                "allocation, %.1f MiB\n",
                r->state_arrays, r->state_buffers, r->state_largest / 1048576.0,
                r->max_alloc / 1048576.0);
    fprintf(f, "  flops/token    = %.4g (6*N + 12*L*C*T%s)\n", r->flops_per_token,
            cfg->experts > 0 ? ", N the active parameters" : "");
    fprintf(f, "  peak           = %.4g TFLOP/s (%s)\n", r->peak_tflops, r->peak_source);
    fprintf(f, "  start step     = %lld\n", (long long)r->start);
    if (r->traced)
        fprintf(f, "  trace          = %s, steps %d to %d\n", p->trace, r->trace_first,
                r->trace_last);
    print_recompute(f, r);
    print_memory(f, r);
    fflush(f);
}

void train_bubble_print(FILE *f, const ct_pipeline_bubble *b) {
    if (b->steps == 0) return;
    int N = b->stages;
    fprintf(f,
            "pipeline bubble (%s, %d stages, %d micro-batches; executed timeline of %d step%s, "
            "steps %d to %d, the device waited for after every action), measured beside the "
            "simulator fed the measured action costs:\n",
            b->schedule, N, b->micro_batches, b->steps, b->steps > 1 ? "s" : "", b->first_step,
            b->last_step);
    for (int q = 0; q < N; q++) {
        fprintf(f, "  stage %d: measured %.3f  simulated %.3f | ", q, b->stage_measured[q],
                b->stage_simulated[q]);
        if (b->fwd_ms[q] > 0) fprintf(f, "F %.2f ms ", b->fwd_ms[q]);
        if (b->bwd_ms[q] > 0) fprintf(f, "B %.2f ms ", b->bwd_ms[q]);
        if (b->bwd_input_ms[q] > 0)
            fprintf(f, "B_input %.2f ms B_weight %.2f ms ", b->bwd_input_ms[q],
                    b->bwd_weight_ms[q]);
        fprintf(f, "send %.2f ms recv %.2f ms\n", b->send_ms[q], b->recv_ms[q]);
    }
    fprintf(f, "  all    : measured %.3f  simulated %.3f  (unit costs: %.3f)\n", b->measured,
            b->simulated, b->unit);
    fprintf(f, "  the last step replayed with each action's own duration: simulated %.3f, "
               "measured %.3f\n",
            b->last_replayed, b->last_measured);
    fflush(f);
}
