/* ct_engine_model.h - the GPT-2 model on one worker's device: parameters, gradients and AdamW
 * state as one contiguous device buffer each (views from the table in ct_gpt_config.h), and one
 * activation arena sized at creation for (max_B, max_T). A step only enqueues kernels and GEMMs:
 * tokens go in, the loss (one float) comes out, nothing is allocated.
 *
 *     ct_model *m = NULL;
 *     ct_layout lay = {1, 1, 1, 0}; ct_coords at = {0, 0, 0};
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
 * at batch <= max_B, sequence <= max_T needs. Only the 1x1x1 layout is supported so far (others:
 * CT_ERR_UNSUPPORTED). A config that cannot be (heads not dividing channels, V > Vp, max_T >
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
/* Number of parameters (floats) this worker holds = length of params, grads, m and v. */
size_t ct_model_num_params(const ct_model *m);
/* Offset (floats) and size of table tensor i (CT_GPT_wte, ...) in the flat buffers. */
void ct_model_tensor(const ct_model *m, int i, size_t *offset, size_t *count);
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
/* AdamW first and second moments (either pointer may be NULL to skip it). */
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
 * clip_grad_norm_ multiplier), decay only the 2-D weight matrices. norm_out (may be NULL)
 * receives the pre-clip gradient norm (a read-back; NULL avoids the round trip). */
ct_status ct_model_adamw_step(ct_model *m, float lr, float beta1, float beta2, float eps,
                              float weight_decay, float grad_clip, int t, float *norm_out);

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
