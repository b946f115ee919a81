/* ct_engine_step.h - one training step over the grid: the executor that runs a worker's action
 * list (parallel/'s schedules) on the model's stage entry points, and the pieces it drives, each
 * along one concern:
 *   ct_optim  AdamW on this worker's shard, clipping by a global norm (optim.c)
 *   ct_grads  gradient ranges reduced over their groups, in buckets, overlapped with backward
 *             (grads.c; ZeRO-2 keeps only the averaged shard)
 *   ct_zero   ZeRO parameter traffic: the all-gather after the optimizer (stages 1, 2) and the
 *             per-block gathers with prefetch (stage 3) (zero.c)
 *   state     gathered model state for checkpoints and the memory report (state.c)
 *   ct_trace  Chrome trace events per worker, written as one JSON file (trace.c)
 * Nothing here is called by the model: the executor knows when a block's gradients are final
 * and starts their reduction; it gathers a ZeRO-3 block before the model uses it.
 *
 *     ct_exec *x = NULL;
 *     ct_exec_opts o = ct_exec_opts_default();
 *     if (ct_exec_create(&x, model, grid, &o, &err)) ...           // collective over the grid
 *     ct_schedule *s = NULL; ct_sched_make(CT_SCHED_TRIVIAL, 1, accum, 1, &s, &err);
 *     ct_step_result r;
 *     ct_exec_step(x, s, tokens, targets, rows, T, &hp, step + 1, &r);  // r.loss, r.grad_norm
 *     ct_exec_free(x);
 */
#ifndef CT_ENGINE_STEP_H
#define CT_ENGINE_STEP_H

#include <stddef.h>
#include <stdint.h>

#include "ct_engine_model.h"
#include "ct_engine_trace.h"
#include "ct_parallel.h"

#ifdef __cplusplus
extern "C" {
#endif


/* ---------------------------------------------------------------- optimizer (optim.c) */

typedef struct ct_adamw_hp {
    float lr, beta1, beta2, eps, weight_decay;
    float grad_clip; /* global-norm clip; 0 = off */
} ct_adamw_hp;

typedef struct ct_optim ct_optim;
/* The optimizer of one worker's parameters. Allocates the norm scratch (category workspace).
 * prof (may be NULL): where its time goes in profiling mode (the model's buckets). */
ct_status ct_optim_create(ct_optim **out, ct_params *P, ct_profile *prof, ct_err *err);
void ct_optim_free(ct_optim *o);
/* Device bytes ct_optim_create allocates for P's layout (workspace; P may be layout-only). */
ct_status ct_optim_workspace_bytes(const ct_params *P, size_t *bytes, ct_err *err);
const char *ct_optim_errmsg(const ct_optim *o);
/* The L2 norm of this worker's whole gradient buffer, computed on the device and read back. */
ct_status ct_optim_local_norm(ct_optim *o, float *norm);
/* The L2 norm of the flat gradient range [lo, hi) (device, read back): a pipeline stage's part
 * of the global norm (the last stage leaves out its copy of the tied wte, counted on the first). */
ct_status ct_optim_range_norm(ct_optim *o, size_t lo, size_t hi, float *norm);
/* This worker's sum of squares over its optimizer shard of the gradients (the averaged shard
 * under ZeRO-2), in double on the host: the part of a global norm a group sums. */
ct_status ct_optim_shard_sumsq(ct_optim *o, double *out);
/* The same over the elements this worker OWNS, so that the sum over every worker of the layout
 * counts each parameter once: within its optimizer shard (ZeRO >= 1: its DP shard; else only
 * DP rank 0), TP-sharded tensors' slices, replicated tensors only on TP rank 0, the tied wte
 * only on the first pipeline stage (state.c's owner rule). Layouts with tp > 1 only: the owned
 * flat runs are planned at create; each run's norm is computed on the device and one float per
 * run is read back. */
ct_status ct_optim_owned_sumsq(ct_optim *o, double *out);
/* One AdamW step (t 1-based) on this worker's shard: g = grad * min(1, clip / (norm + 1e-6)),
 * decay on the table's decay tensors. norm NULL: the norm of the local gradient buffer,
 * computed and used on the device (one worker, or replicas holding identical averaged
 * gradients); else the global norm computed by the caller over the right groups. norm_out (may
 * be NULL) receives the norm used. */
ct_status ct_optim_step(ct_optim *o, const ct_adamw_hp *hp, int t, const float *norm,
                        float *norm_out);
/* ct_optim_step in two halves, so the caller can look at the norm before anything changes (the
 * executor skips a step whose norm is not finite): ct_optim_norm puts the global norm in the
 * optimizer's norm cell and in *norm (given: the caller's, else computed on the device from the
 * local gradients as above); ct_optim_apply then runs AdamW with it. Bitwise the same update as
 * ct_optim_step. */
ct_status ct_optim_norm(ct_optim *o, const float *given, float *norm);
ct_status ct_optim_apply(ct_optim *o, const ct_adamw_hp *hp, int t);
/* The first (tensor, layer) in table order whose gradient (grads = 1) or parameter (0) holds
 * an element that is not finite, among what this worker holds (its shard under ZeRO-2 / 3);
 * tensor -1 when every value is finite, layer -1 for a tensor outside the blocks. Reads the
 * whole buffer to the host: for the message after a non-finite step, not for every step. */
ct_status ct_optim_find_nonfinite(ct_optim *o, int grads, int *tensor, int *layer);

/* ---------------------------------------------------------------- gradients (grads.c) */

/* A range of the flat gradient layout and how it is reduced: over groups[0] with op[0], then
 * over groups[1] with op[1] (either may be NULL: nothing at that step). Ranges are data: the
 * stage's layout averaged over the DP group; a pipeline's tied wte then summed over the
 * embedding group; under tensor parallelism with sequence parallelism the replicated LayerNorm
 * parameters (each TP worker's gradient covers only its tokens) summed over the TP group.
 * Buckets are cut within each range; a range with no group is never staged. */
typedef struct ct_grad_range {
    size_t lo, hi;
    ct_comm *groups[2]; /* both NULL: nothing to reduce (no buckets) */
    ct_op ops[2];
    int norm_skip; /* 1: left out of ZeRO-2's sum of squares (the last pipeline stage's copy of
                      the tied wte: the first stage counts it) */
} ct_grad_range;

typedef struct ct_grads_opts {
    size_t bucket_bytes; /* gradient bucket size (default 25 MiB) */
    int overlap;         /* 1: a communication thread reduces buckets while backward runs */
    int wire_bf16;       /* 1: buckets cross as bf16, summed in fp32 on arrival (--grad-reduce
                            bf16: half the bytes); 0: fp32 (default) */
} ct_grads_opts;
ct_grads_opts ct_grads_opts_default(void);

typedef struct ct_grads ct_grads;
/* ranges cover the worker's flat layout [0, local_len) in increasing order (n >= 1). Not
 * collective. */
ct_status ct_grads_create(ct_grads **out, ct_model *m, const ct_grad_range *ranges, int n,
                          const ct_grads_opts *o, ct_err *err);
void ct_grads_free(ct_grads *g);
const char *ct_grads_errmsg(const ct_grads *g);
int ct_grads_num_buckets(const ct_grads *g);
size_t ct_grads_host_bytes(const ct_grads *g); /* host staging (the "comm" category) */
/* Before a backward action: `last` = no later action of the step writes the gradients this one
 * writes. Under ZeRO < 2 only the last ones are reduced (accumulation sums locally first). */
ct_status ct_grads_begin(ct_grads *g, int last);
/* The commands writing flat gradients [lo, hi) (the head's LayerNorm, a block, the embeddings)
 * have been ENQUEUED. ZeRO < 2, on the last action: every range from lo to local_len is final
 * and its buckets leave. ZeRO-2: the piece's buckets leave now, every micro-step, whatever the
 * order (a range outside the block slots with a second group only on the last action). Leaving:
 * staged behind those commands and reduced by the communication thread. */
ct_status ct_grads_ready(ct_grads *g, size_t lo, size_t hi);
/* After the last backward: every bucket reduced and written back (ZeRO-1: this worker's shard
 * reduced, the rest of the buffer stale; ZeRO-2: the averaged shard to the device). sumsq (may
 * be NULL) receives, when ct_grads_sharded, the global sum of squares of the gradient (the
 * shards', summed over the DP group; a range's norm_skip left out); else 0. Collective over the
 * ranges' groups. */
ct_status ct_grads_finish(ct_grads *g, double *sumsq);
/* 1: ZeRO >= 1 over a DP group: buckets are reduce-scattered (each worker gets its shard's part
 * only) and ct_grads_finish gives the global sum of squares. */
int ct_grads_sharded(const ct_grads *g);
typedef struct ct_grads_times {
    double exposed_ms; /* the worker waited for gradient communication */
    double busy_ms;    /* time inside reductions and staging (the communication thread's too) */
} ct_grads_times;
void ct_grads_times_get(const ct_grads *g, ct_grads_times *out);
/* Record each bucket's reduction on the trace's communication lane (NULL: none). */
void ct_grads_set_trace(ct_grads *g, ct_trace *t);
void ct_grads_times_reset(ct_grads *g);

/* ---------------------------------------------------------------- ZeRO parameters (zero.c) */

typedef struct ct_zero ct_zero;
/* dp: the group the shards are over; edp: the expert-data-parallel group (a mixture-of-experts
 * model's expert region is sharded over it; NULL without experts or with one worker per expert
 * set). Under ZeRO-3 a second handle on the group is split for the
 * prefetch thread, from `world` (every worker of the layout calls ct_zero_create together; each
 * DP group its own colour) or, world NULL, from dp itself (one DP group in the layout): sibling
 * groups that each split themselves alike would share an MPI tag (ct_comm_split). Stage 0: a
 * no-op object. */
ct_status ct_zero_create(ct_zero **out, ct_model *m, ct_comm *dp, ct_comm *edp, ct_comm *world,
                         ct_err *err);
void ct_zero_free(ct_zero *z);
const char *ct_zero_errmsg(const ct_zero *z);
/* After the optimizer (stages 1, 2): the updated shards all-gathered into the parameters. */
ct_status ct_zero_after_step(ct_zero *z);
/* ZeRO-3, collective: a new pass over the model: the embeddings and the final LayerNorm are
 * gathered (the shard may have changed since the last pass). */
ct_status ct_zero_begin_pass(ct_zero *z);
/* ZeRO-3, collective: block l's parameters in its working slot before the model uses it (from
 * the prefetch when it was block l's); then block `next` (-1: none) is prefetched. */
ct_status ct_zero_need_block(ct_zero *z, int l, int next);
/* ZeRO-3: before the embedding's forward or the head's forward or backward reads wte: gathered
 * into the working buffer's region it shares with the block slots, unless still there (a block
 * gathered since took its place). Collective over the DP group. A no-op otherwise. */
ct_status ct_zero_need_wte(ct_zero *z);
size_t ct_zero_host_bytes(const ct_zero *z);
double ct_zero_gather_ms(const ct_zero *z); /* time the worker waited for gathers */
/* ZeRO-3: bytes the parameter gathers moved so far (ct_comm_bytes of their handle; else 0). */
uint64_t ct_zero_gather_bytes(const ct_zero *z);
/* The same for the experts' gathers over the expert-data-parallel group (ZeRO-3 with experts). */
uint64_t ct_zero_expert_gather_bytes(const ct_zero *z);
void ct_zero_times_reset(ct_zero *z);
/* Record gathers (waits on the worker's lane, prefetches on the prefetch lane). */
void ct_zero_set_trace(ct_zero *z, ct_trace *t);

/* ---------------------------------------------------------------- state (state.c) */

/* Collective over `world` (every worker of the layout): the whole model state in table order
 * into the leader's arrays (any pointer may be NULL to skip it; pass NULL on the others):
 * parameters and Adam m, v, each element taken from the worker that owns it (its DP shard under
 * ZeRO, else DP rank 0). */
ct_status ct_state_gather(ct_model *m, ct_comm *world, float *params, float *adam_m,
                          float *adam_v, ct_err *err);
/* A worker's part of array `which` (0 params, 1 Adam m, 2 Adam v) as runs of the table:
 * fn(user, table offset, flat offset, floats) per run, in table order within each tensor; a
 * non-zero return stops the walk and is returned. owned = 1: the runs this worker owns by the
 * rule above (over the layout's workers every element exactly once: its shard of a sharded
 * checkpoint); owned = 0: every run it stores on its device (what resuming must fill). */
typedef int (*ct_state_run_fn)(void *user, size_t table_off, size_t flat_off, size_t n);
int ct_state_runs(ct_model *m, int which, int owned, ct_state_run_fn fn, void *user);
/* Array `which` as this worker stores it, read to the host in the flat layout (flat_len floats;
 * positions it does not store are left as they were). Blocking, not collective. */
ct_status ct_state_read_flat(ct_model *m, int which, float *flat, ct_err *err);
/* Collective over `world`: device bytes per category of every worker, out[w * CT_MEM__COUNT + c]
 * (host staging bytes host_comm added to this worker's "comm"). */
ct_status ct_state_mem_gather(ct_device *dev, ct_comm *world, size_t host_comm, uint64_t *out,
                              ct_err *err);


/* ---------------------------------------------------------------- the executor (step.c) */

typedef struct ct_exec_opts {
    ct_grads_opts grads;
} ct_exec_opts;
ct_exec_opts ct_exec_opts_default(void);

typedef struct ct_exec ct_exec;
/* The executor of this worker: its model (built for the grid's layout and coordinates), the
 * grid's groups, the gradient ranges, ZeRO and the optimizer. Collective over the grid. */
ct_status ct_exec_create(ct_exec **out, ct_model *m, ct_grid *grid, const ct_exec_opts *o,
                         ct_err *err);
void ct_exec_free(ct_exec *x);
const char *ct_exec_errmsg(const ct_exec *x);
ct_grads *ct_exec_grads(ct_exec *x);
ct_zero *ct_exec_zero(ct_exec *x);
void ct_exec_set_trace(ct_exec *x, ct_trace *t);

typedef struct ct_step_result {
    double loss;     /* mean cross-entropy over the step's micro-batches (averaged over DP as
                        a float when there are several replicas) */
    float grad_norm; /* pre-clip global gradient norm */
    int skipped;     /* 1: the norm or the loss was inf or NaN, nothing was updated */
    /* a mixture of experts (the config's experts > 0), over the step and every worker: the
     * auxiliary loss before its weight (summed over the blocks, the mean over rows), the fraction
     * of the choices dropped by the capacity, and the busiest expert's routed choices over the
     * mean (the largest over the blocks). 0 for a dense model. */
    double aux_loss, drop_frac, max_load;
} ct_step_result;

/* A mixture of experts' routing in the last step, over every worker: per (block, expert) the
 * choices routed and kept, and the token rows each worker's experts computed (its load under
 * expert parallelism). Pointers into the executor, valid until its next step. Returns 0 (and
 * nothing) for a dense model. */
typedef struct ct_exec_moe {
    int layers, experts, workers;
    const int32_t *routed, *kept; /* [layers * experts] */
    const int32_t *rows;          /* [workers], world order */
} ct_exec_moe;
int ct_exec_moe_get(const ct_exec *x, ct_exec_moe *out);

/* One optimizer step: runs this worker's list of `s` (stage = its pipeline rank; s->stages and
 * s->virt must be the layout's pp and the chunks the model holds; a split-backward schedule, zb1,
 * needs a model planned with split_backward, and as many slots as the schedule keeps alive:
 * ct_sched_simulate's peak_live). tokens/targets: this worker's rows of every micro-batch,
 * s->micro blocks of rows x T (host int32; the targets are read on the last stage only). The
 * loss comes from the last stage; the gradient norm is summed over the pipeline (the tied wte
 * once). Collective over the grid.
 * A step whose global gradient norm or loss is not finite is skipped: OPT_STEP leaves the
 * parameters and the optimizer state (m, v) as they were and sets out->skipped. Both numbers
 * are the same on every worker (the norm over the right groups, the loss averaged over DP), so
 * every worker skips together. t still counts the step (AdamW's bias correction uses t, the
 * step index, as the learning-rate schedule does). */
ct_status ct_exec_step(ct_exec *x, const ct_schedule *s, const int *tokens, const int *targets,
                       int rows, int T, const ct_adamw_hp *hp, int t, ct_step_result *out);
/* A forward pass (evaluation, sampling): with targets, this worker's mean loss over its rows to
 * *loss (average over DP with ct_exec_dp_average); logits_last (may be NULL): the Vp logits of
 * the last position of row 0. Collective under ZeRO-3 (parameters are gathered) and over the
 * pipeline group with pp > 1 (the activations go through every stage; the loss and logits come
 * back from the last: every stage passes loss and logits_last alike). */
ct_status ct_exec_forward(ct_exec *x, const int *tokens, const int *targets, int rows, int T,
                          float *loss, float *logits_last);
/* Collective: the gathered state (ct_state_gather over the grid's world). */
ct_status ct_exec_gather_state(ct_exec *x, float *params, float *adam_m, float *adam_v);
/* Collective: the per-worker memory report (ct_state_mem_gather with this worker's host
 * staging bytes). */
ct_status ct_exec_mem_gather(ct_exec *x, uint64_t *out);
/* Collective: a float averaged over the DP group (a loss). */
ct_status ct_exec_dp_average(ct_exec *x, float *v);
/* Collective, after a skipped step (its gradients are still in place): the first tensor in
 * table order whose gradient, else whose parameter, is not finite, over every worker, as text
 * into buf ("the gradient of fcw in layer 3", or that all are finite and only the loss is not).
 * Reads every worker's buffers to the host: for the message, not for every step. */
ct_status ct_exec_nonfinite_report(ct_exec *x, char *buf, size_t len);

/* The executed timeline of a pipeline, for the measured bubble: while on, every action is
 * followed by a wait for the device (as while tracing) and every step starts with a barrier over
 * the pipeline group, so each stage's actions lie end to end on one clock from a common start.
 * A measurement: the waits cost the overlap of enqueueing with the device. Sums over the steps
 * recorded since the last reset; this stage's measured bubble is 1 - compute_ms / makespan_ms
 * (the simulator's definition). */
typedef struct ct_exec_timeline {
    int steps;
    double compute_ms;  /* this stage's FWD, BWD, BWD_INPUT and BWD_WEIGHT time */
    double span_ms;     /* from the start to the end of this stage's last compute action */
    double makespan_ms; /* the pipeline's: the longest stage span */
    double ms[CT_ACT__COUNT]; /* per action kind (SEND: the device read and the post; RECV: the
                                 device write after the message arrived, not the wait) */
    long count[CT_ACT__COUNT];
} ct_exec_timeline;
void ct_exec_set_timeline(ct_exec *x, int on);
void ct_exec_timeline_get(const ct_exec *x, ct_exec_timeline *out);
void ct_exec_timeline_reset(ct_exec *x);
/* The last step recorded: each action's duration in ms, in list order (n = 0: none; GRAD_SYNC
 * and OPT_STEP 0), this stage's compute time and the pipeline's span in it. Valid until the next
 * step. For a replay of the executed timeline (ct_sched_replay). */
void ct_exec_timeline_last(const ct_exec *x, const double **dur_ms, int *n, double *compute_ms,
                           double *makespan_ms);

typedef struct ct_exec_times {
    double compute_ms;   /* forward and backward enqueue-to-finish time on this worker */
    double exposed_ms;   /* waiting for communication: gradients, ZeRO gathers */
    double busy_ms;      /* inside collectives in total (any thread) */
    double optimizer_ms; /* optimizer and the ZeRO all-gather after it */
    double gather_ms;    /* ZeRO-3: part of exposed_ms spent waiting for parameter gathers */
    double tp_comm_ms;   /* tensor parallelism: the worker inside TP collectives (staging
                            included), not counted in compute_ms except tp_overlap_ms */
    double tp_overlap_ms; /* the part of tp_comm_ms run while a weight-gradient GEMM was queued
                             (counted as compute: the device was busy) */
} ct_exec_times;
void ct_exec_times_get(const ct_exec *x, ct_exec_times *out);
void ct_exec_times_reset(ct_exec *x);

/* The last step's communication, this worker's bytes per group: ct_comm_bytes (the beta term of
 * each collective's bandwidth-optimal cost, whatever algorithm ran) over the step; -1 where the
 * layout has no such group; pp: the pipeline's sends (point-to-point), the bytes this worker
 * sent (activations forward, their gradients backward: 4 or, in bf16, 2 bytes an element).
 * For N workers and P parameters (the flat layout, padded to N shards) with one micro-step:
 * DDP 2P(N-1)/N elements (all-reduce), ZeRO-1 and 2 the same (reduce-scatter, all-gather of the
 * updated shards), ZeRO-3 up to 3P(N-1)/N (reduce-scatter, the forward's gathers, the
 * backward's, less the two blocks still in their slots when backward starts). */
typedef struct ct_exec_bytes {
    int64_t dp;  /* DP: gradient reductions, ZeRO's gathers, the step's loss and norm */
    int64_t tp;  /* TP: tensor parallelism's collectives, SP's LayerNorm gradients */
    int64_t ep;  /* EP: the experts' all-to-alls */
    int64_t edp; /* expert-data-parallel: the experts' gradients and shards */
    int64_t emb; /* the first and last pipeline stage: the tied wte's gradient */
    int64_t pp;  /* PP: the activations and gradients this worker sent to its neighbours */
} ct_exec_bytes;
void ct_exec_bytes_last(const ct_exec *x, ct_exec_bytes *out);

#ifdef __cplusplus
}
#endif
#endif /* CT_ENGINE_STEP_H */
