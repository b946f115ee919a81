/* ct_engine_model.h - the GPT-2 layer math on one worker's device, cut into the entry points a
 * step executor calls: the token embedding, block l, and the head (final LayerNorm, logits,
 * cross-entropy), each forward and backward, on an activation SLOT (one micro-batch's saved
 * tensors). The parameters are a ct_params (ct_engine_params.h: which layers and slices this
 * worker holds, the flat buffers); the model only reads them and adds into their gradients.
 * Nothing is allocated after creation. What crosses to the host inside a step: the tokens in,
 * the loss out (when asked), the MoE layer's routing counts, and under tensor parallelism the
 * collectives that stage through host memory (ct_engine_tp.h).
 *
 * Training runs through the executor (engine/step: ct_exec_step), which calls the entry points
 * for each micro-batch of a schedule: ct_model_embed_forward(m, slot, tokens, B, T) on the first
 * stage (or ct_model_stage_input for the activation received from the previous one),
 * block_forward for each held layer, head_forward on the last stage; backward in reverse. The
 * optimizer is the executor's too. A forward alone, on one worker holding the whole model
 * (sampling, forward-only checks):
 *
 *     ct_model *m = NULL;
 *     ct_layout lay = {1, 1, 1, 0, 1}; ct_coords at = {0, 0, 0, 0};
 *     if (ct_model_create(&m, &cfg, &lay, &at, dev, B, T, &err)) { puts(err.msg); ... }
 *     ct_model_init_random(m, 1337);
 *     float loss;
 *     ct_model_forward(m, tokens, targets, B, T, &loss);
 *     ct_model_free(m);
 */
#ifndef CT_ENGINE_MODEL_H
#define CT_ENGINE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "ct_cl.h"
#include "ct_engine_ops.h"
#include "ct_engine_params.h"
#include "ct_engine_moe.h"
#include "ct_engine_tp.h"
#include "ct_engine_trace.h"
#include "ct_gpt_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_model ct_model;

/* Activation recomputation: what a block drops after its forward and runs again right before
 * its backward (the same kernels on the same inputs, so the results are bitwise those of the
 * run without it; only memory and time change).
 *   NONE       every block keeps all it saves for its backward.
 *   ATTENTION  selective (Korthikanti et al. 2022): the attention probabilities (B,NH,T,T) of
 *              the GEMM path, which grow with T^2, and the tensors that are cheap to get back
 *              (the two LayerNorm outputs and the GELU output, (B,T,C) + (B,T,C) + (B,T,4C))
 *              are dropped; the scores' GEMM, the softmax, the LayerNorms and the GELU are run
 *              again. The fused path keeps no scores (its (B,NH,T) log-sum-exp is kept), so there
 *              only the cheap tensors go. With the split backward (zb1) the deferred weight half
 *              reads the cheap tensors, so only the probabilities go (fused + zb1: refused, it
 *              would drop nothing).
 *   BLOCK      a block keeps only its output (the next block's input; the first keeps the
 *              chunk's input); before its backward its forward runs again up to the GELU into
 *              one block's worth of shared scratch. Refused with the split backward (zb1). */
typedef enum ct_recompute {
    CT_RECOMPUTE_NONE = 0,
    CT_RECOMPUTE_ATTENTION,
    CT_RECOMPUTE_BLOCK
} ct_recompute;
const char *ct_recompute_name(ct_recompute r); /* "none", "attention", "block" */
/* "none", "attention" or "block"; anything else is CT_ERR_ARG (no message: the caller names
 * the flag). */
ct_status ct_recompute_parse(const char *s, ct_recompute *out);
/* Whether mode rc can run with attention path attn (gemm or fused) and the split backward:
 * CT_ERR_UNSUPPORTED with the reason for block + split and attention + split + fused. */
ct_status ct_model_recompute_check(ct_recompute rc, ct_attn_path attn, int split, ct_err *err);

/* The storage of the activations, their gradients and the parameters' working copy:
 *   FP32  everything fp32 (the default and the reference).
 *   BF16  those in bf16 (ct_view_bf16): the activation arena's tensors (logits and their gradient
 *         included; the GEMM path's scores are computed in fp32 inside the bf16 scratch), and a
 *         bf16 working copy of the parameters in the flat layout, made from the fp32 master at
 *         init, set_params and after every optimizer step (ct_model_refresh_working); under
 *         ZeRO-3 in the parameter working buffer's layout, made from each gathered fp32 range
 *         where it lands (ct_model_refresh_working_range). Parameter
 *         gradients, Adam's state, LayerNorm statistics, losses and log-sum-exp stay fp32. Built
 *         for every layout. */
typedef enum ct_precision { CT_PRECISION_FP32 = 0, CT_PRECISION_BF16 } ct_precision;
const char *ct_precision_name(ct_precision p); /* "fp32", "bf16" */
/* "fp32" or "bf16"; anything else is CT_ERR_ARG (no message: the caller names the flag). */
ct_status ct_precision_parse(const char *s, ct_precision *out);

/* What the activation arena is planned for. */
typedef struct ct_model_plan {
    int max_B, max_T; /* the largest micro-batch (rows, tokens per row) */
    int slots;        /* micro-batches alive at once (activation slots), >= 1 */
    ct_params_plan chunks; /* the blocks this worker holds (nchunks 0: all) */
    /* Attention: CT_ATTN_GEMM (0, the default: the reference path, keeps (B,NH,T,T) scores per
     * block), CT_ATTN_FUSED (keeps (B,NH,T): activation memory linear in T) or CT_ATTN_AUTO (the
     * faster of the two at (max_T, heads) on this device, measured at creation). The arena is
     * planned for the path chosen. attn_blocks: the fused block shapes (NULL: ct_attn_tune's). */
    ct_attn_path attention;
    const ct_attn_cfg *attn_blocks;
    int split_backward; /* zero-bubble schedules: block backward run as its input half and a
                           deferred weight half; each slot keeps 4 more (B,T,C) per block for
                           the weight half */
    /* Tensor parallelism (layout tp > 1): this worker's handle on its TP group (ct_grid_tp; used
     * from the worker's thread by the block's own collectives, engine/tp.c), and sequence
     * parallelism (1: activations outside the TP regions split over the group's rows). */
    ct_comm *tp;
    int sp;
    int tp_comm; /* CT_TP_COMM_AUTO (0, default), _HOST or _DEVICE (ct_engine_tp.h) */
    /* A mixture-of-experts model (config experts > 0; engine/moe.c): the capacity factor F (0:
     * no limit) and the auxiliary loss's weight alpha (0: none), and with expert parallelism
     * (layout ep > 1) this worker's handle on its EP group (ct_grid_ep; the block's all-to-alls
     * run on it). Not built with tp > 1 or split_backward. */
    double moe_capacity, moe_aux;
    ct_comm *ep;
    ct_recompute recompute; /* what blocks drop and recompute (default none) */
    /* The head in chunks of loss_chunk rows (0: all rows at once): the logits of one chunk at a
     * time (chunk x Vp/tp floats instead of B x T x Vp/tp), their loss and, in the backward, their
     * gradient from the same chunk's logits computed again (one more logits product). Needs
     * loss_chunk >= max_T (a forward without targets, sampling's, keeps one row's logits whole).
     * Under sequence parallelism over tp workers a chunk is loss_chunk/tp of each worker's rows,
     * gathered (ct__head_rows). */
    int loss_chunk;
    ct_precision precision; /* fp32 (0, default) or bf16 (above) */
    /* The GEMM paths (ct_gemm_plan_make, engine/model/ct_engine_gemm.h): NULL keeps the
     * defaults unmeasured (CLBlast for fp32, the portable kernel for bf16); "auto" measures the
     * paths that fit on the model's shapes (bf16, or fp32 with tf32), or a path by name. The
     * plan is set on the device (ct_device_set_gemm_plan), which the ops read: one model's plan
     * per device. tf32: fp32 products may run on the mma path with tf32 operands. */
    const char *gemm;
    int tf32;
    /* bf16: how the working copy is rounded from the master: 0 nearest even (default), 1
     * stochastic (ct_bf16_from_f32_stochastic with round_seed, the refresh's step and each
     * element's index in this worker's flat layout) */
    int bf16_round;
    uint64_t round_seed;
} ct_model_plan;

/* The model of `cfg` for this worker of `layout`, planned for one micro-batch <= max_B x max_T
 * on one slot, holding every layer (pp = 1), tp = 1. Layouts: dp >= 1 with ZeRO 0..3 (ZeRO >= 1
 * needs dp >= 2); tp > 1 needs the TP group: ct_model_create_plan. A config that cannot be (heads
 * not dividing channels, V > Vp, max_T > max_seq, ...) or memory the device cannot give is an
 * error with a message in *err. Parameters start as zeros (ct_model_init_random /
 * ct_model_set_params). */
ct_status ct_model_create(ct_model **out, const ct_gpt_config *cfg, const ct_layout *layout,
                          const ct_coords *coords, ct_device *dev, int max_B, int max_T,
                          ct_err *err);
/* The same for a plan: several slots, a pipeline stage's chunks of layers. */
ct_status ct_model_create_plan(ct_model **out, const ct_gpt_config *cfg, const ct_layout *layout,
                               const ct_coords *coords, ct_device *dev, const ct_model_plan *plan,
                               ct_err *err);
void ct_model_free(ct_model *m);
/* The attention path a model of this plan runs on dev, the one decision ct_model_create_plan
 * makes (and a trainer makes once for all its workers, then pins): plan->attention gemm or
 * fused as asked; auto times both at (max_T, NH/tp heads) on dev, then takes the fused path
 * where the GEMM path's scores at the planned batch exceed 2^31 elements or the device's largest
 * allocation (ct_model_gemm_exceeds). acfg: the fused block shapes; note: one line saying what
 * was chosen and why. A failure is the device's (ct_device_errmsg). */
ct_status ct_model_attention_choose(ct_device *dev, const ct_gpt_config *cfg,
                                   const ct_layout *layout, const ct_coords *coords,
                                   const ct_model_plan *plan, ct_attn_path *path,
                                   ct_attn_cfg *acfg, char *note, size_t len);
/* Whether the GEMM path's plan needs one indivisible device buffer part above `max_alloc` bytes
 * (one block's scores, B x NH/tp x T x T floats) where the fused path's fits. Pure: no device. */
int ct_model_gemm_exceeds(const ct_gpt_config *cfg, const ct_layout *layout,
                          const ct_coords *coords, const ct_model_plan *plan, uint64_t max_alloc);
/* Tensor parallelism's constraints for cfg over tp = N workers, checked before any work: N
 * divides the heads, the padded vocabulary Vp and 4C (and C); with sequence parallelism (sp) N
 * divides the sequence length T. CT_ERR_ARG naming the first that fails. */
ct_status ct_model_tp_check(const ct_gpt_config *cfg, int N, int sp, int T, ct_err *err);
/* The model's TP pieces (NULL when tp = 1): counters, overlap and timing switches. */
ct_tp *ct_model_tp(ct_model *m);
/* The model's mixture-of-experts layer (NULL for a dense model): routing statistics, timing. */
ct_moe *ct_model_moe(ct_model *m);
/* Floats of one activation (B,T,C) as this worker holds it between blocks: B*T*C, or its
 * B*T*C/tp rows under sequence parallelism (pipeline transfers). */
size_t ct_model_act_floats(const ct_model *m, int B, int T);

const ct_gpt_config *ct_model_config(const ct_model *m);
ct_device *ct_model_device(const ct_model *m);
ct_params *ct_model_params(ct_model *m);
const ct_model_plan *ct_model_plan_of(const ct_model *m);
/* The last error on this model (device failures also in ct_device_errmsg). */
const char *ct_model_errmsg(const ct_model *m);
/* Number of parameters of the whole model (length of the host arrays of set/get). */
size_t ct_model_num_params(const ct_model *m);
/* Offset (floats) and size of table tensor i (CT_GPT_wte, ...) in the HOST arrays of
 * ct_model_get_params & co (table order). */
void ct_model_tensor(const ct_model *m, int i, size_t *offset, size_t *count);
/* Activation bytes one slot takes, and the shared scratch (the arena = slots x slot + scratch). */
size_t ct_model_slot_bytes(const ct_model *m);
size_t ct_model_scratch_bytes(const ct_model *m);
/* Activation bytes one block keeps in a slot for its backward (the per-layer part of a slot). */
size_t ct_model_layer_bytes(const ct_model *m);
/* The part of the scratch that holds one block's dropped tensors (0 with recompute none). */
size_t ct_model_recompute_bytes(const ct_model *m);
/* How many device buffers hold the activation arena (more than one when it exceeds the device's
 * largest single allocation), and the largest one's bytes. */
int ct_model_act_pieces(const ct_model *m, size_t *largest);
/* The attention path the model runs (gemm or fused; auto is resolved at creation), the fused
 * block shapes (cfg may be NULL), and one line saying what was chosen and why. */
ct_attn_path ct_model_attention(const ct_model *m, ct_attn_cfg *cfg);
const char *ct_model_attention_note(const ct_model *m);
/* The GEMM plan's log lines: the decision, then one line per shape (path, rate). */
const char *ct_model_gemm_note(const ct_model *m);
/* The model's GEMM plan, and another in its place (every path checked on the model's device
 * first; `why` appended to the note): how workers agree on one measured choice. */
const ct_gemm_plan *ct_model_gemm_plan(const ct_model *m);
ct_status ct_model_set_gemm_plan(ct_model *m, const ct_gemm_plan *p, const char *why);

/* ---- host copies and initialisation (table order, n = ct_model_num_params; see
 * ct_engine_params.h for what ZeRO keeps) */
ct_status ct_model_init_random(ct_model *m, uint64_t seed);
ct_status ct_model_set_params(ct_model *m, const float *host, size_t n);
ct_status ct_model_get_params(ct_model *m, float *host, size_t n);
ct_status ct_model_set_grads(ct_model *m, const float *host, size_t n);
ct_status ct_model_get_grads(ct_model *m, float *host, size_t n);
ct_status ct_model_set_optimizer(ct_model *m, const float *adam_m, const float *adam_v, size_t n);
ct_status ct_model_get_optimizer(ct_model *m, float *adam_m, float *adam_v, size_t n);
ct_status ct_model_zero_grad(ct_model *m);
/* A bf16 model (plan.precision): make the bf16 working copy from the fp32 master parameters
 * again (enqueued). init_random and set_params do it; the optimizer's caller does it after
 * every update. A no-op in fp32. */
ct_status ct_model_refresh_working(ct_model *m);
/* The same after optimizer step `step` (1-based; 0: the initial parameters), which stochastic
 * rounding draws from; kept for later refreshes (set_params: a resumed run calls this with the
 * checkpoint's step, so it rounds as the uninterrupted run did). */
ct_status ct_model_refresh_working_at(ct_model *m, uint64_t step);
/* The same for floats [lo, lo + n) of the parameter buffer (ZeRO-3: the working buffer, after a
 * gather wrote them; enqueued behind that write). A no-op in fp32. */
ct_status ct_model_refresh_working_range(ct_model *m, size_t lo, size_t n);

/* ---- the stage entry points. `slot` in [0, plan.slots). Forward of a slot overwrites what
 * the slot held; backward of a slot needs that slot's forward (with targets for the head). */

/* Tokens (B,T) (host int32, each in [0,V)) to the slot and the embedding (first stage). */
ct_status ct_model_embed_forward(ct_model *m, int slot, const int *tokens, int B, int T);
/* A stage without the embedding: the slot's input activation (B,T,C), where the activation
 * received from the previous stage is written before the first block_forward of `chunk`. */
ct_status ct_model_stage_input(ct_model *m, int slot, int chunk, int B, int T, ct_view *in);
/* Block l (held) of the slot: its input is the slot's chunk input (first layer of a chunk) or
 * block l-1's output. */
ct_status ct_model_block_forward(ct_model *m, int slot, int l);
/* The output (B,T,C) of block l in the slot (what a stage sends on). */
ct_status ct_model_block_output(ct_model *m, int slot, int l, ct_view *out);
/* Final LayerNorm, logits (B,T,Vp) and, with targets (host, in [0,V)), the mean cross-entropy:
 * *loss (may be NULL: not read back) receives it. targets NULL: logits only. */
ct_status ct_model_head_forward(ct_model *m, int slot, const int *targets, float *loss);
/* Logits of the slot's last head_forward, to host (n = B*T*Vp). Overwritten by head_backward. */
ct_status ct_model_slot_logits(ct_model *m, int slot, float *host, size_t n);

/* grads += d(loss_scale * loss)/d(lnf, wte); the residual gradient (B,T,C) = the gradient of
 * the last block's output (ct_model_dres). */
ct_status ct_model_head_backward(ct_model *m, int slot, float loss_scale);
/* The scale of the slot's objective in its backward (what head_backward takes, and sets): blocks
 * that add their own term to the objective (the MoE layer's auxiliary loss) read it. A stage
 * without the head sets it before its blocks' backward; a forward resets it to 1. */
ct_status ct_model_set_loss_scale(ct_model *m, int slot, float loss_scale);
/* Block l's backward, or a half of it:
 *   CT_BACKWARD_WHOLE   reads the gradient of the block's output from ct_model_dres, adds its
 *                       parameter gradients, leaves the gradient of its input in ct_model_dres.
 *   CT_BACKWARD_INPUT   (zero-bubble schedules; the plan needs split_backward) the same for the
 *                       input gradient, adding no parameter gradient; keeps in the slot what
 *                       the weight half reads.
 *   CT_BACKWARD_WEIGHT  any time after the input half but before the slot's next forward, adds
 *                       the block's parameter gradients (reading no parameter: under ZeRO-3 the
 *                       block need not be gathered for it).
 * The two halves add bitwise what the whole backward adds. */
typedef enum ct_backward_part {
    CT_BACKWARD_WHOLE = 0,
    CT_BACKWARD_INPUT,
    CT_BACKWARD_WEIGHT
} ct_backward_part;
ct_status ct_model_block_backward(ct_model *m, int slot, int l, ct_backward_part part);
/* The embedding's backward (first stage): wte, wpe grads += from ct_model_dres. */
ct_status ct_model_embed_backward(ct_model *m, int slot);
/* The residual-gradient tensor (max_B, max_T, C) the backward entry points pass along: where a
 * stage writes the gradient received from the next stage before its first block_backward, and
 * reads the one to send after its last. */
ct_view ct_model_dres(ct_model *m);

/* Copy between the host and a view the entry points returned (stage input, block output, dres):
 * bytes from the view's start. Blocking. */
ct_status ct_model_view_read(ct_model *m, ct_view v, void *host, size_t bytes);
ct_status ct_model_view_write(ct_model *m, ct_view v, const void *host, size_t bytes);
/* The same, enqueued in order behind the work before them: the host memory stays untouched
 * (read: not read; write: not written or freed) until *ev (required) completes. The pipeline
 * executor's transfers, so a send or receive does not wait for the device. */
ct_status ct_model_view_read_async(ct_model *m, ct_view v, void *host, size_t bytes,
                                   ct_event **ev);
ct_status ct_model_view_write_async(ct_model *m, ct_view v, const void *host, size_t bytes,
                                    ct_event **ev);

/* ---- a forward alone on slot 0, on a worker holding every layer (sampling; tests) */

/* Forward over tokens (B,T). With targets: the mean cross-entropy goes to *loss (read back).
 * targets NULL: logits only (*loss, if given, is set to NaN). */
ct_status ct_model_forward(ct_model *m, const int *tokens, const int *targets, int B, int T,
                           float *loss);
/* Logits (B,T,Vp) of the last forward, to host; valid until the next backward. */
ct_status ct_model_logits(ct_model *m, float *host, size_t n);

/* Model op groups (attention, MLP, loss) recorded while tracing; the device is waited on at the
 * end of each group so its time is attributed. NULL detaches. */
void ct_model_set_trace(ct_model *m, ct_trace *t);

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
/* The model's buckets, for the code that enqueues ops on its behalf (the optimizer). */
ct_profile *ct_model_profile(ct_model *m);

#ifdef __cplusplus
}
#endif
#endif /* CT_ENGINE_MODEL_H */
