/* engine_impl.h - the engine's private contracts between its files (not installed, not for
 * programs): the pure halves of what the model, the executor, the gradient reducer and ZeRO
 * allocate, so that the memory model (mem.c) computes a worker's bytes with the very functions
 * that size the allocations, and the two cannot drift. */
#ifndef CT_ENGINE_IMPL_H
#define CT_ENGINE_IMPL_H

#include <stddef.h>

#include "ct_engine_step.h"

/* The activation arena of the model for (cfg, the layout-only params P, plan), in floats, as
 * ct_model_create_plan allocates it: slots x slot + scratch. plan->attention auto is taken as
 * the GEMM path (the larger arena). tp_staging: floats of each of the TP pieces' two host
 * staging buffers (0 with tp = 1). Every device-free check of ct_model_create_plan is made. */
typedef struct ct__arena {
    size_t slot, scratch, layer, recompute, tp_staging;
    size_t moe_staging; /* floats of each of the MoE layer's two EP staging buffers (0: none) */
    size_t largest_part; /* floats of the arena's largest indivisible part (ct_arena_alloc) */
    const char *largest_part_name;
    int blocks;
    ct_attn_path attention;
    size_t working; /* bytes of the bf16 working copy of the parameters (0 in fp32) */
} ct__arena;
ct_status ct__model_arena_plan(const ct_gpt_config *cfg, const ct_params *P,
                               const ct_model_plan *plan, ct__arena *out, ct_err *err);

/* The parameters' plan of a model plan (arena.c: ZeRO-2's wte gradient windows decided once). */
ct_params_plan ct__model_params_plan(const ct_gpt_config *c, const ct_layout *lay,
                                     const ct_model_plan *plan);

/* The executor's gradient ranges for P (step.c): dp, edp (the experts' data-parallel group),
 * emb, tpg are the groups each range is reduced over (NULL: none); only stored and compared, so
 * stand-ins will do. *out malloc'd. */
ct_status ct__exec_ranges(const ct_params *P, ct_comm *dp, ct_comm *edp, ct_comm *emb,
                          ct_comm *tpg, ct_grad_range **out, int *nout, ct_err *err);
/* The host staging bytes ct_grads_create allocates for these ranges (0 for n = 0). */
ct_status ct__grads_host_bytes_plan(const ct_params *P, const ct_grad_range *ranges, int n,
                                    const ct_grads_opts *o, size_t *bytes, ct_err *err);
/* The host bytes ct_zero_create allocates for P's ZeRO stage. */
size_t ct__zero_host_bytes_plan(const ct_params *P);

#endif /* CT_ENGINE_IMPL_H */
