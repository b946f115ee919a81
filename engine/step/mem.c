/* mem.c - the memory model (ct_engine_mem.h): one worker's device bytes per category and its
 * host staging, from the same functions that size the allocations (params.c's buffer table,
 * the model's arena plan, the optimizer's norm buffers, the gradient reducer's buckets, ZeRO's
 * gathers, the TP staging, the MoE layer's EP staging). Nothing here knows a size of its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_mem.h"
#include "engine_impl.h"

/* Stand-ins for the groups the executor's gradient ranges name: the range planning only stores
 * and compares them, never calls through them. */
static char stand_in[4];
#define STAND_IN(k) ((ct_comm *)(void *)&stand_in[k])

/* Keep the largest single buffer seen. */
static void biggest(ct_mem_predict *out, uint64_t bytes, const char *name) {
    if (bytes <= out->largest) return;
    out->largest = bytes;
    snprintf(out->largest_name, sizeof out->largest_name, "%s", name ? name : "?");
}

ct_status ct_model_mem_predict(const ct_gpt_config *cfg, const ct_layout *layout,
                               const ct_coords *coords, const ct_model_plan *plan,
                               const ct_exec_opts *xo, ct_mem_predict *out, ct_err *err) {
    ct_status st;
    ct_params *P = NULL;
    ct_grad_range *ranges = NULL;
    int nranges = 0;
    memset(out, 0, sizeof *out);
    if (!cfg || !layout || !coords || !plan)
        return CT_ERR(err, CT_ERR_ARG, "ct_model_mem_predict: config, layout, coords and plan "
                                       "needed");
    /* 1. The parameter layout (layout-only ct_params) and its buffers. */
    ct_params_plan pplan = ct__model_params_plan(cfg, layout, plan);
    if ((st = ct_params_create(&P, cfg, layout, coords, &pplan, NULL, err)) != CT_OK) return st;
    ct_params_buf bufs[CT_PARAMS_MAX_BUFFERS];
    int nb = ct_params_buffers(P, bufs);
    if (nb < 0) {
        st = CT_ERR(err, CT_ERR_NOMEM, "the memory model: out of host memory");
        goto done;
    }
    for (int k = 0; k < nb; k++) {
        out->device[bufs[k].category] += bufs[k].bytes;
        biggest(out, bufs[k].largest, bufs[k].largest_name); /* held in pieces too */
    }
    /* 2. The activation arena. */
    ct__arena a;
    if ((st = ct__model_arena_plan(cfg, P, plan, &a, err)) != CT_OK) goto done;
    out->act_slot = a.slot * sizeof(float), out->act_scratch = a.scratch * sizeof(float);
    out->act_layer = a.layer * sizeof(float), out->act_recompute = a.recompute * sizeof(float);
    out->slots = plan->slots, out->blocks = a.blocks;
    out->attention = a.attention, out->attention_bound = plan->attention == CT_ATTN_AUTO;
    out->device[CT_MEM_ACTIVATIONS] += (uint64_t)plan->slots * out->act_slot + out->act_scratch;
    out->device[CT_MEM_PARAMS] += a.working; /* bf16: the working copy (model.c's work_alloc) */
    biggest(out, a.largest_part * sizeof(float), a.largest_part_name);
    /* TP's buffer: two host staging buffers, or one device scratch buffer when the collectives
     * run on the device (plan.tp_comm device; auto is predicted as host: whether the workers
     * share a device is known only once they open it) */
    if (plan->tp_comm == CT_TP_COMM_DEVICE) {
        out->device[CT_MEM_COMM] += (uint64_t)a.tp_staging * sizeof(float);
        biggest(out, a.tp_staging * sizeof(float), "TP scratch");
    }
    else
        out->host_tp = 2 * (uint64_t)a.tp_staging * sizeof(float);
    out->host_moe = 2 * (uint64_t)a.moe_staging * sizeof(float);
    /* 3. The executor's optimizer: its norm buffers. */
    if (xo) {
        size_t ow = 0;
        if ((st = ct_optim_workspace_bytes(P, &ow, err)) != CT_OK) goto done;
        out->device[CT_MEM_WORKSPACE] += ow;
    }
    /* 4. The executor's host staging: gradient ranges exist when something is reduced (a DP
     * group, a pipeline's tied wte on its two ends, the LayerNorms under sequence
     * parallelism); ZeRO's gathers. */
    if (xo) {
        int first = coords->pp_rank == 0, last = coords->pp_rank == layout->pp - 1;
        int dp = layout->dp > 1, tied = layout->pp > 1 && (first || last);
        int sp = layout->tp > 1 && plan->sp;
        int ep = layout->ep < 1 ? 1 : layout->ep, edp = cfg->experts > 0 && layout->dp / ep > 1;
        if (dp || tied || sp) {
            if ((st = ct__exec_ranges(P, dp ? STAND_IN(0) : NULL, edp ? STAND_IN(3) : NULL,
                                      tied ? STAND_IN(1) : NULL, sp ? STAND_IN(2) : NULL, &ranges,
                                      &nranges, err)) != CT_OK)
                goto done;
            size_t hb = 0;
            if ((st = ct__grads_host_bytes_plan(P, ranges, nranges, &xo->grads, &hb, err)) !=
                CT_OK)
                goto done;
            out->host_grads = hb;
        }
        out->host_zero = ct__zero_host_bytes_plan(P);
    }
    out->host_comm = out->host_grads + out->host_zero + out->host_tp + out->host_moe;
    for (int c = 0; c < CT_MEM__COUNT; c++) out->device_total += out->device[c];
done:
    free(ranges);
    ct_params_free(P);
    return st;
}
