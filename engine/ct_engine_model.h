/* ct_engine_model.h - the GPT-2 model on one worker's device: parameters, gradients and AdamW
 * state as one contiguous device buffer each (views from the table in ct_gpt_config.h), and one
 * activation arena sized at creation for (max_B, max_T).
 *
 * Two orders: host arrays (ct_model_set_params/get_*, files, checkpoints) are in the table's
 * llm.c order (all layers' qkvw together, ...). The device buffers are layer-major ("flat"):
 * wte, wpe, then per layer [ln1w ln1b qkvw qkvb attprojw attprojb ln2w ln2b fcw fcb fcprojw
 * fcprojb], then lnfw, lnfb, so a layer's parameters and gradients are one contiguous range and
 * backward finishes the gradients from the end of the buffer towards its start (data-parallel
 * buckets in reverse layer order). Data parallelism (layout dp = N): every worker holds the whole
 * model; with ZeRO-1 Adam m and v hold only this worker's shard [lo, hi) of the flat buffers
 * (params and grads padded to N * shard floats). A step only enqueues kernels and GEMMs:
 * tokens go in, the loss (one float) comes out, nothing is allocated.
 *
 *     ct_model *m = NULL;
 *     ct_layout lay = {1, 1, 1, 0, 1}; ct_coords at = {0, 0, 0, 0};
 *     if (ct_model_create(&m, &cfg, &lay, &at, dev, B, T, &err)) { puts(err.msg); ... }
 *     ct_model_init_random(m, 1337);
 *     for (int step = 1; step <= n; step++) {
 *         float loss, norm;
 *         ct_model_zero_grad(m);
 *         ct_model_forward(m, tokens, targets, B, T, &loss);
 *         ct_model_backward(m, 1.0f);
 *         ct_model_adamw_step(m, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, step, &norm);
 *     }
 *     ct_model_free(m);
 */
#ifndef CT_ENGINE_MODEL_H
#define CT_ENGINE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "ct_cl.h"
#include "ct_gpt_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_model ct_model;

/* Builds the model of `cfg` for this worker of `layout` on `dev` and allocates everything a step
 * at batch <= max_B, sequence <= max_T needs. Layouts: dp >= 1 with tp = pp = 1, ZeRO stage 0,
 * or 1, 2, 3 with dp >= 2 (others: CT_ERR_UNSUPPORTED). A config that cannot be (heads not dividing channels, V > Vp, max_T >
 * max_seq, ...) or memory the device cannot give is an error with a message in *err. Parameters
 * start as zeros; call ct_model_init_random or ct_model_set_params. */
ct_status ct_model_create(ct_model **out, const ct_gpt_config *cfg, const ct_layout *layout,
                          const ct_coords *coords, ct_device *dev, int max_B, int max_T,
                          ct_err *err);
void ct_model_free(ct_model *m);

const ct_gpt_config *ct_model_config(const ct_model *m);
ct_device *ct_model_device(const ct_model *m);
/* The last error on this model (also in ct_device_errmsg for device failures). */
const char *ct_model_errmsg(const ct_model *m);
/* Number of parameters (floats) of the model = length of the host arrays of set/get. */
size_t ct_model_num_params(const ct_model *m);
/* Offset (floats) and size of table tensor i (CT_GPT_wte, ...) in the HOST arrays of
 * ct_model_get_params & co (table order); not in the device buffers (see the next one). */
void ct_model_tensor(const ct_model *m, int i, size_t *offset, size_t *count);
/* Offset and size of tensor i's slice of layer l in the device (flat, layer-major) buffers; for
 * wte, wpe, lnfw and lnfb (one slice) l is ignored but must be a valid layer. */
void ct_model_tensor_flat(const ct_model *m, int i, int l, size_t *offset, size_t *count);
/* Floats of the params and grads device buffers (num_params, padded to dp * shard for ZeRO). */
size_t ct_model_flat_len(const ct_model *m);
/* This worker's optimizer shard [lo, hi) of the flat buffers: [0, num_params) without ZeRO;
 * the Adam m and v buffers hold exactly this range. */
void ct_model_shard(const ct_model *m, size_t *lo, size_t *hi);
/* Flat offset where layer l's block starts (l = layers: where lnfw starts). */
size_t ct_model_layer_begin(const ct_model *m, int l);
/* Permute a whole parameter-sized array between table order and flat order (flat: flat_len
 * floats, padding zeroed). */
void ct_model_table_to_flat(const ct_model *m, const float *table, float *flat);
void ct_model_flat_to_table(const ct_model *m, const float *flat, float *table);

/* Backward hook: called by ct_model_backward on the calling thread each time the commands that
 * finish the gradients of flat range [ready_from, flat end) have been ENQUEUED (after the final
 * LayerNorm, after each block l = L-1 .. 0, and after the embeddings with ready_from = 0). The
 * device reaches that point later; a hook that needs the data enqueues a marker or a read on the
 * device's queue. A hook's error ends the backward with that status. NULL removes it. */
typedef ct_status (*ct_model_bwd_hook)(void *user, ct_model *m, size_t ready_from);
void ct_model_set_backward_hook(ct_model *m, ct_model_bwd_hook fn, void *user);
/* Whether AdamW decays tensor i (the 2-D weight matrices: wte, wpe, qkvw, attprojw, fcw, fcprojw). */
int ct_model_tensor_decays(int i);

/* The flat device buffers (params, grads, Adam m, Adam v) for communication layers. */
ct_buffer *ct_model_params_buffer(ct_model *m);
ct_buffer *ct_model_grads_buffer(ct_model *m);
ct_buffer *ct_model_adam_m_buffer(ct_model *m);
ct_buffer *ct_model_adam_v_buffer(ct_model *m);

/* GPT-2 initialisation: normal(0, 0.02) for wte (real rows; padded rows 0), wpe, qkvw, fcw;
 * normal(0, 0.02/sqrt(2L)) for attprojw and fcprojw; biases 0; LayerNorm weights 1. Every value
 * depends only on (seed, its index in the full table), through a counter-based generator and
 * Box-Muller, so it is the same on every platform. Adam state is zeroed. */
ct_status ct_model_init_random(ct_model *m, uint64_t seed);

/* Host copies, n = ct_model_num_params(m) floats in table order (blocking). */
ct_status ct_model_set_params(ct_model *m, const float *host, size_t n);
ct_status ct_model_get_params(ct_model *m, float *host, size_t n);
ct_status ct_model_set_grads(ct_model *m, const float *host, size_t n);
ct_status ct_model_get_grads(ct_model *m, float *host, size_t n);
/* AdamW first and second moments (either pointer may be NULL to skip it). Under ZeRO-1 only the
 * shard is stored: set takes the whole table-order arrays and keeps the shard's part; get fills
 * only the shard's part of the arrays (gather over the DP group for the rest: ct_dp_*). */
ct_status ct_model_set_optimizer(ct_model *m, const float *adam_m, const float *adam_v, size_t n);
ct_status ct_model_get_optimizer(ct_model *m, float *adam_m, float *adam_v, size_t n);

/* Forward over tokens (B,T) (host int32, each in [0,V)). With targets (B,T) (host, in [0,V)):
 * the mean cross-entropy goes to *loss (the one value read back) and a backward may follow.
 * targets NULL: logits only (*loss, if given, is set to NaN). */
ct_status ct_model_forward(ct_model *m, const int *tokens, const int *targets, int B, int T,
                           float *loss);
/* Logits (B,T,Vp) of the last forward, to host. Valid until the next ct_model_backward, which
 * overwrites them with their gradient. */
ct_status ct_model_logits(ct_model *m, float *host, size_t n);

ct_status ct_model_zero_grad(ct_model *m);
/* Backward of the last forward (which must have had targets): grads += d(loss_scale * loss)/dp.
 * For gradient accumulation over k micro-batches pass loss_scale = 1/k. */
ct_status ct_model_backward(ct_model *m, float loss_scale);
/* The global L2 norm of the gradients (computed on the device, read back). */
ct_status ct_model_grad_norm(ct_model *m, float *norm);
/* One AdamW step (t is 1-based): clip the gradients to global norm grad_clip (0: off; PyTorch's
 * clip_grad_norm_ multiplier), decay only the 2-D weight matrices. The norm is over the whole
 * gradient buffer; only the shard [lo, hi) of the parameters is updated (all of them without
 * ZeRO). norm_out (may be NULL)
 * receives the pre-clip gradient norm (a read-back; NULL avoids the round trip). */
ct_status ct_model_adamw_step(ct_model *m, float lr, float beta1, float beta2, float eps,
                              float weight_decay, float grad_clip, int t, float *norm_out);

/* The same with the global gradient norm given (ZeRO-2, where each worker holds one shard of the
 * gradient: norm = sqrt(sum over workers of its shard's sum of squares)). */
ct_status ct_model_adamw_step_norm(ct_model *m, float lr, float beta1, float beta2, float eps,
                                   float weight_decay, float grad_clip, int t, float norm);

/* ZeRO-2 (layout zero = 2): ct_model_grads_buffer is a WORKING buffer of glen floats
 * [wte wpe | layer slot 0 | layer slot 1 | lnfw lnfb] (category workspace), layer l's gradients in
 * slot l % 2, which a data-parallel hook must read and zero after that layer's backward (before
 * layer l - 2's backward reuses it: on the in-order queue, enqueue both from the hook). The
 * averaged shard [lo, hi) lives in ct_model_grad_shard_buffer (category grads; NULL otherwise).
 * Full-gradient calls (get/set_grads, grad_norm, adamw_step with a norm) are CT_ERR_STATE. */
ct_buffer *ct_model_grad_shard_buffer(ct_model *m);
/* Offset of (tensor i, layer l) in ct_model_grads_buffer (the flat offset unless ZeRO-2). */
size_t ct_model_grad_offset(const ct_model *m, int i, int l);
int ct_model_zero_stage(const ct_model *m);

/* ZeRO-3 (layout zero = 3): the parameters are stored as this worker's shard [lo, hi)
 * (ct_model_param_shard_buffer, category params; set/get_params write / fill only that part, as
 * for Adam's state); ct_model_params_buffer is a WORKING buffer laid out like ZeRO-2's gradient
 * one (category workspace), and forward and backward call the parameter hook before each use:
 * l = -1 at the start of forward (wte, wpe, lnfw, lnfb), then l before block l's forward
 * (backward = 0) and again before its backward (backward = 1). The hook must leave those parameters at ct_model_param_offset in the
 * working buffer (enqueued before it returns). AdamW updates the shard in place. */
typedef ct_status (*ct_model_param_hook)(void *user, ct_model *m, int layer, int backward);
void ct_model_set_param_hook(ct_model *m, ct_model_param_hook fn, void *user);
ct_buffer *ct_model_param_shard_buffer(ct_model *m);
size_t ct_model_param_offset(const ct_model *m, int i, int l);

/* ---- where the time goes: in profiling mode every op is followed by a device finish and its
 * wall time is added to its bucket (this slows a step down a little; off by default). */
typedef struct ct_model_op_time {
    const char *name; /* "matmul_fc_fwd", "attention_bwd", ... */
    double ms;        /* total since the last reset */
    long calls;
} ct_model_op_time;
void ct_model_profile_enable(ct_model *m, int on);
void ct_model_profile_reset(ct_model *m);
/* Fills up to `max` entries (buckets with calls > 0, in pipeline order); returns the count. */
int ct_model_profile_get(const ct_model *m, ct_model_op_time *out, int max);

#ifdef __cplusplus
}
#endif
#endif /* CT_ENGINE_MODEL_H */
