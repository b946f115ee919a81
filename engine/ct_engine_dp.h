/* ct_engine_dp.h - data parallelism over a DP group of workers: gradients averaged in buckets
 * (reverse layer order, optionally overlapped with backward), the optimizer step with ZeRO
 * sharding (1: Adam's state; 2: + the averaged gradients, buckets leaving after every layer of
 * every micro-step; 3: + the parameters, gathered per block before its forward and backward with
 * the next block prefetched), gathered model state for checkpoints, and the memory report.
 *
 * Each worker (one device, one thread) owns a ct_model built for layout {dp = N, zero} at
 * coords.dp_rank = its rank in `comm`, and one ct_dp:
 *
 *     ct_dp *dp = NULL; ct_dp_opts o = ct_dp_opts_default();
 *     if (ct_dp_create(&dp, model, dp_comm, &o, &err)) { puts(err.msg); ... }
 *     ct_model_zero_grad(model);
 *     for (int mb = 0; mb < accum; mb++) {
 *         if (mb == accum - 1) ct_dp_arm(dp);          // only the last micro-step communicates
 *         ct_model_forward(model, in, tg, B / N, T, &loss);   // this worker's rows
 *         ct_model_backward(model, 1.0f / accum);      // buckets leave while backward goes on
 *     }
 *     ct_dp_finish_grads(dp);                          // every bucket averaged over the group
 *     ct_dp_step(dp, lr, b1, b2, eps, wd, clip, t, &norm);   // AdamW (+ ZeRO-1 all-gather)
 *     ct_dp_free(dp);
 *
 * Every worker ends a step with bitwise the same parameters (the all-reduce result is bitwise
 * the same on every member; AdamW is deterministic). Averaging is sum / N applied identically.
 * Calls on one ct_dp are collective over the group, in the same order on every worker.
 */
#ifndef CT_ENGINE_DP_H
#define CT_ENGINE_DP_H

#include <stddef.h>
#include <stdint.h>

#include "ct_engine_model.h"
#include "ct_parallel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_dp ct_dp;

typedef struct ct_dp_opts {
    size_t bucket_bytes; /* gradient bucket size (default 25 MiB); the last one may be smaller */
    int overlap;         /* 1: buckets are read back and all-reduced by a communication thread
                            while backward continues; 0: all buckets after backward */
} ct_dp_opts;

ct_dp_opts ct_dp_opts_default(void);

/* comm: the DP group; its rank must equal the model's dp rank and its size the model's dp.
 * Not collective, except under ZeRO-3 (a second handle on the group is split off for the
 * parameter gathers the model's parameter hook makes during forward and backward). */
ct_status ct_dp_create(ct_dp **out, ct_model *m, ct_comm *comm, const ct_dp_opts *o, ct_err *err);
void ct_dp_free(ct_dp *d);
const char *ct_dp_errmsg(const ct_dp *d);
int ct_dp_num_buckets(const ct_dp *d);

/* The next backward is the last micro-step of the step: with overlap, it hands finished buckets
 * to the communication thread as it goes. Without overlap it only marks the step. */
ct_status ct_dp_arm(ct_dp *d);
/* Collective: after the last backward, every bucket is averaged over the group and written back
 * to the model's gradient buffer. */
ct_status ct_dp_finish_grads(ct_dp *d);
/* AdamW on this worker's shard (all of it without ZeRO), then (ZeRO-1) the parameters are
 * all-gathered. norm (may be NULL): the global pre-clip gradient norm, the same on every worker. */
ct_status ct_dp_step(ct_dp *d, float lr, float beta1, float beta2, float eps, float weight_decay,
                     float grad_clip, int t, float *norm);
/* Collective: the whole model state in table order (host arrays of ct_model_num_params floats;
 * any pointer may be NULL to skip it): parameters (gathered under ZeRO-3) and the gathered Adam
 * m and v. */
ct_status ct_dp_gather_state(ct_dp *d, float *params, float *adam_m, float *adam_v);
/* Collective: average of a float over the group (losses). */
ct_status ct_dp_average(ct_dp *d, float *v);

/* Time accounting since creation or the last reset (ms): exposed = time the worker thread waited
 * for communication in ct_dp_finish_grads and ct_dp_step's gather; busy = time spent in
 * collectives and staging in total (on the communication thread too). */
typedef struct ct_dp_times {
    double exposed_ms, busy_ms, optimizer_ms;
    double gather_ms; /* ZeRO-3: the part of exposed_ms spent waiting for parameter gathers,
                         inside forward and backward */
} ct_dp_times;
void ct_dp_times_get(const ct_dp *d, ct_dp_times *out);
void ct_dp_times_reset(ct_dp *d);

/* The per-worker memory report: device bytes per category (ct_mem_category order) of every
 * worker of the group, gathered (collective): out[w * CT_MEM__COUNT + c]. `host_comm` adds this
 * worker's host staging bytes (what the "comm" category holds here: staging is host memory). */
ct_status ct_dp_mem_gather(ct_dp *d, uint64_t *out);
/* Host staging bytes of this worker (bucket buffers). */
size_t ct_dp_comm_bytes(const ct_dp *d);

#ifdef __cplusplus
}
#endif
#endif /* CT_ENGINE_DP_H */
