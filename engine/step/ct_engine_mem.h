/* ct_engine_mem.h - the memory model: the device bytes one worker's model and executor will
 * allocate, per category (params, grads, optimizer, activations, workspace), and the host
 * staging its communication takes, predicted without a device or MPI from (config, layout and
 * coordinates, model plan: micro-batch, sequence, slots, chunks, attention path, TP/SP,
 * split backward, recompute mode; ZeRO from the layout) and the executor's options. It is
 * computed by the functions that size the allocations themselves (params.c's buffer table, the
 * model's arena plan, the optimizer's, gradient reducer's and ZeRO's sizes), so a prediction is
 * what ct_device_mem_stats shows once the model and executor are built: exactly, except what
 * is stated below. The trainer prints it beside the allocated bytes in its memory report; the
 * layout planner ranks layouts with it.
 *
 *     ct_model_plan plan = {0};
 *     plan.max_B = 8, plan.max_T = 1024, plan.slots = 1, plan.recompute = CT_RECOMPUTE_BLOCK;
 *     ct_layout lay = {1, 1, 1, 0, 1}; ct_coords at = {0, 0, 0, 0};
 *     ct_exec_opts xo = ct_exec_opts_default();
 *     ct_mem_predict mp;
 *     if (ct_model_mem_predict(&cfg, &lay, &at, &plan, &xo, &mp, &err)) puts(err.msg);
 *     printf("%llu activation bytes\n", (unsigned long long)mp.device[CT_MEM_ACTIVATIONS]);
 *
 * Not counted (as the memory report does not count them either): the OpenCL runtime's and
 * CLBlast's own temporary buffers; buffers that live only during start-up (the GEMM-rate probe,
 * the attention path's timing under --attention auto, both freed before the report); the
 * pipeline's host staging, which grows with the messages in flight (each at most one (B,T,C)
 * activation, B*T*C/tp under sequence parallelism). With plan.attention = auto the path is
 * chosen on the device at creation: the prediction is the GEMM path's (an upper bound: the
 * fused path's arena is never larger) and says so (attention_bound). */
#ifndef CT_ENGINE_MEM_H
#define CT_ENGINE_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "ct_engine_step.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_mem_predict {
    /* device bytes per category (CT_MEM_PARAMS ... CT_MEM_COMM; comm: TP's device scratch when
     * plan.tp_comm is device, else 0) */
    uint64_t device[CT_MEM__COUNT];
    uint64_t device_total;
    /* host staging bytes (the memory report adds them to its comm column): the gradient
     * buckets (and ZeRO-2's shard accumulator), ZeRO's gathers, the TP pieces' two buffers, the
     * MoE layer's two EP all-to-all buffers (expert parallelism) */
    uint64_t host_comm, host_grads, host_zero, host_tp, host_moe;
    /* the activation arena (device[CT_MEM_ACTIVATIONS] = slots x slot + scratch) */
    uint64_t act_slot;      /* one slot: a micro-batch's saved tensors */
    uint64_t act_scratch;   /* shared by all slots: temporaries, backward scratch, recomputation */
    uint64_t act_layer;     /* what one block keeps in a slot */
    uint64_t act_recompute; /* the part of the scratch holding one block's dropped tensors */
    int slots, blocks;      /* activation slots; blocks per slot (the longest chunk held) */
    ct_attn_path attention; /* the path predicted: gemm or fused */
    int attention_bound;    /* 1: plan.attention was auto; the GEMM path's figures, a bound */
    /* the largest single device buffer the worker must allocate (the activation arena and the
     * parameter, gradient and optimizer buffers counted by their largest indivisible part: one
     * (tensor, layer) slice; they are held in pieces below the device's limit), and its name:
     * what must fit CL_DEVICE_MAX_MEM_ALLOC_SIZE */
    uint64_t largest;
    char largest_name[64];
} ct_mem_predict;

/* The bytes worker `coords` of `layout` takes for a model planned with `plan` (plan.tp, the
 * communicator, is not read: the layout's tp is) inside an executor with options xo (NULL: the
 * model alone, as ct_model_create_plan builds it; the trainer's workers are model + executor).
 * A plan the model would refuse is refused here with the same message (CT_ERR_ARG /
 * CT_ERR_UNSUPPORTED), before anything is sized. Pure: no device, no MPI, no global state. */
ct_status ct_model_mem_predict(const ct_gpt_config *cfg, const ct_layout *layout,
                               const ct_coords *coords, const ct_model_plan *plan,
                               const ct_exec_opts *xo, ct_mem_predict *out, ct_err *err);

#ifdef __cplusplus
}
#endif
#endif /* CT_ENGINE_MEM_H */
