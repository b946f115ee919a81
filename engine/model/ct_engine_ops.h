/* ct_engine_ops.h - the device ops of the GPT-2 model: OpenCL kernels and CLBlast GEMMs.
 *
 * Each op is a forward/backward pair in llm.c's argument order,
 *     ct_<op>_forward(dev, out, <saved for backward>, inp, <params>, <dims>)
 *     ct_<op>_backward(dev, dinp, <dparams>, dout, inp, <params>, <saved>, <dims>)
 * Tensors are views (ct_view: an OpenCL buffer + an offset in elements) into the model's flat
 * buffers; the shape is in the comment next to each argument. Activation gradients are
 * overwritten ("="), parameter gradients accumulate ("+="). Everything is enqueued on the device's
 * in-order queue; nothing is read back and nothing is allocated. Kernels are compiled on first use
 * (once per device; cached on disk by cl/). Errors: a ct_status, message in ct_device_errmsg(dev).
 *
 *     ct_view x = ct_view_of(ct_buffer_mem(acts), 0), y = ct_view_of(ct_buffer_mem(acts), n);
 *     ct_gelu_forward(dev, y, x, n);
 *     ct_device_finish(dev);
 */
#ifndef CT_ENGINE_OPS_H
#define CT_ENGINE_OPS_H

#include <stddef.h>

#include "ct_cl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How a view's elements are stored. Zero is 4-byte elements (fp32; int32 for token tensors), so
 * a view made without saying is what every view was before bf16. */
typedef enum ct_store {
    CT_STORE_F32 = 0, /* 4 bytes per element: fp32 (int32 for token tensors) */
    CT_STORE_BF16 = 1 /* 2 bytes per element: the upper half of an fp32 (ct_bf16_from_f32) */
} ct_store;

/* A tensor on the device: buffer + offset in elements of its storage (floats, int32 for token
 * tensors, or bf16 halves when store is CT_STORE_BF16). A view with mem == NULL is "absent" where
 * an argument is documented as optional.
 *
 * Storage classes of the ops' arguments: the activations, the activation gradients and the
 * parameters' working copy are all fp32 or all bf16 (the op runs its bf16 kernels when they are
 * bf16); parameter gradients, LayerNorm statistics, losses, log-sum-exp and token ids are always
 * 4-byte. An op given another mix returns CT_ERR_ARG naming the argument. */
typedef struct ct_view {
    cl_mem mem;
    size_t off;     /* in elements of `store` */
    ct_store store; /* zero: fp32 */
} ct_view;

static inline ct_view ct_view_of(cl_mem mem, size_t off) {
    ct_view v = {mem, off, CT_STORE_F32};
    return v;
}
/* A bf16 view: `off` counts bf16 elements (2 bytes) from the start of mem. */
static inline ct_view ct_view_bf16(cl_mem mem, size_t off) {
    ct_view v = {mem, off, CT_STORE_BF16};
    return v;
}
static inline ct_view ct_view_at(ct_view v, size_t off) {
    v.off += off;
    return v;
}
/* Bytes per element of the view's storage: 4 or 2. */
static inline size_t ct_view_elem_bytes(ct_view v) { return v.store == CT_STORE_BF16 ? 2 : 4; }
/* Float `off` of an arena (cl/) as a view: the piece holding it, the offset in that piece. */
static inline ct_view ct_arena_view(const ct_arena *a, size_t off) {
    size_t in = 0;
    ct_buffer *b = ct_arena_at(a, off * sizeof(float), &in);
    ct_view v = {b ? ct_buffer_mem(b) : NULL, in / sizeof(float), CT_STORE_F32};
    return v;
}
/* bf16 element `off` of an arena as a bf16 view (an arena of bf16 tensors: 2 bytes each). */
static inline ct_view ct_arena_view_bf16(const ct_arena *a, size_t off) {
    size_t in = 0;
    ct_buffer *b = ct_arena_at(a, off * 2, &in);
    ct_view v = {b ? ct_buffer_mem(b) : NULL, in / 2, CT_STORE_BF16};
    return v;
}
static inline ct_view ct_view_none(void) {
    ct_view v = {NULL, 0, CT_STORE_F32};
    return v;
}

/* Where the time goes: named buckets of op time, in pipeline order. In profiling mode (on != 0)
 * the code that enqueues an op finishes the queue after it and adds the wall time to its bucket
 * (the model's layer math, the optimizer). Plain data: zero-initialise it. */
#define CT_PROFILE_BUCKETS(X)                                                                   \
    X(encoder_fwd) X(layernorm_fwd) X(matmul_qkv_fwd) X(attention_fwd) X(matmul_attproj_fwd)    \
    X(residual_fwd) X(matmul_fc_fwd) X(gelu_fwd) X(matmul_fcproj_fwd) X(matmul_logits_fwd)      \
    X(crossentropy_fwd) X(crossentropy_bwd) X(matmul_logits_bwd) X(layernorm_bwd) X(recompute) \
    X(matmul_fcproj_bwd) X(gelu_bwd) X(matmul_fc_bwd) X(matmul_attproj_bwd) X(attention_bwd)    \
    X(matmul_qkv_bwd) X(encoder_bwd) X(zero_grad) X(grad_norm) X(adamw) X(upload) X(readback)    \
    X(moe_fwd) X(moe_bwd)
enum {
#define CT__PROF_ENUM(n) CT_PROF_##n,
    CT_PROFILE_BUCKETS(CT__PROF_ENUM)
#undef CT__PROF_ENUM
    CT_PROF__COUNT
};
typedef struct ct_profile {
    int on;
    double ms[CT_PROF__COUNT];
    long calls[CT_PROF__COUNT];
} ct_profile;
const char *ct_profile_name(int bucket); /* "matmul_fc_fwd" */

/* Number of partial sums the global-norm reduction uses (size of its `partials` scratch). */
#define CT_NORM_PARTIALS 1024

/* The embedded kernel sources of the engine (generated from the .cl files in engine/kernels). */
extern const ct_cl_source ct_engine_kernels[];
extern const int ct_engine_kernels_count;

/* Compile every engine kernel program now (so later calls only enqueue): the fp32 variants. */
ct_status ct_ops_warmup(ct_device *dev);
/* The same for one storage: CT_STORE_BF16 builds the bf16 variants of the sources that have one
 * (every source but optim; the fused attention's per shape:
 * ct_attention_fused_warmup_store). The bf16 matmul runs on the portable GEMM path, which the
 * caller checks once at setup: ct_gemm_path_check(dev, CT_GEMM_PORTABLE). */
ct_status ct_ops_warmup_store(ct_device *dev, ct_store store);
/* How many programs ct_ops_warmup builds (the engine's kernels but the fused attention's, which
 * is built per head size and block shape on first use). */
int ct_ops_program_count(void);

/* ---- encoder: out = wte[token] + wpe[position] */
ct_status ct_encoder_forward(ct_device *dev, ct_view out /* (B,T,C) = */,
                             ct_view inp /* (B,T) int32 tokens */, ct_view wte /* (Vp,C) */,
                             ct_view wpe /* (>=T,C) */, int B, int T, int C, int Vp);
ct_status ct_encoder_backward(ct_device *dev, ct_view dwte /* (Vp,C) += */,
                              ct_view dwpe /* (>=T,C) += */, ct_view dout /* (B,T,C) */,
                              ct_view inp /* (B,T) int32 */, int B, int T, int C, int Vp);

/* ---- LayerNorm over C, eps 1e-5 */
ct_status ct_layernorm_forward(ct_device *dev, ct_view out /* (B,T,C) = */,
                               ct_view mean /* (B,T) = */, ct_view rstd /* (B,T) = */,
                               ct_view inp /* (B,T,C) */, ct_view weight /* (C) */,
                               ct_view bias /* (C) */, int B, int T, int C);
/* dinp is overwritten, or accumulated into when accumulate_dinp != 0 (the residual stream).
 * Either half may be left out: dinp absent (ct_view_none) computes only dweight and dbias;
 * dweight and dbias absent (both) only dinp (zero-bubble schedules run them apart). */
ct_status ct_layernorm_backward(ct_device *dev, ct_view dinp /* (B,T,C) = or += */,
                                ct_view dweight /* (C) += */, ct_view dbias /* (C) += */,
                                ct_view dout /* (B,T,C) */, ct_view inp /* (B,T,C) */,
                                ct_view weight /* (C) */, ct_view mean /* (B,T) */,
                                ct_view rstd /* (B,T) */, int B, int T, int C,
                                int accumulate_dinp);

/* ---- linear layer: out = inp . weight^T + bias; weight stored (OC, C) */
ct_status ct_matmul_forward(ct_device *dev, ct_view out /* (B,T,OC) = */, ct_view inp /* (B,T,C) */,
                            ct_view weight /* (OC,C) */, ct_view bias /* (OC), optional */, int B,
                            int T, int C, int OC);
/* dinp (optional) overwritten; dweight and dbias (optional) accumulate. */
ct_status ct_matmul_backward(ct_device *dev, ct_view dinp /* (B,T,C) = */,
                             ct_view dweight /* (OC,C) += */, ct_view dbias /* (OC) += */,
                             ct_view dout /* (B,T,OC) */, ct_view inp /* (B,T,C) */,
                             ct_view weight /* (OC,C) */, int B, int T, int C, int OC);

/* ---- causal multi-head self-attention on fused qkv, scale 1/sqrt(C/NH).
 * Saved for backward: qkvr (the q, k, v in head-major layout) and att (the softmax).
 * Scratch: vaccum (B,NH,T,hs).
 * In bf16 (every view bf16) att holds P and the backward's datt dS in bf16, while the scores and
 * dP are computed in fp32 a block of rows at a time in the scratch (vaccum in the forward, dqkvr
 * in the backward) and never rounded. */
ct_status ct_attention_forward(ct_device *dev, ct_view out /* (B,T,C) = */,
                               ct_view qkvr /* (3,B,NH,T,hs) = */, ct_view att /* (B,NH,T,T) = */,
                               ct_view inp /* (B,T,3C) */, ct_view vaccum /* (B,NH,T,hs) scratch */,
                               int B, int T, int C, int NH);
/* The probabilities alone from the head-major q, k: the forward's own GEMM and softmax calls,
 * so a recomputation before the backward (ct_model_plan.recompute) gives the forward's bits.
 * scratch: in bf16 the fp32 scores' blocks (the forward's vaccum, or any (B,NH,T,hs) bf16
 * scratch); fp32 does not use it (ct_view_none() will do). */
ct_status ct_attention_probs(ct_device *dev, ct_view att /* (B,NH,T,T) = */,
                             ct_view qkvr /* (3,B,NH,T,hs) */,
                             ct_view scratch /* (B,NH,T,hs) scratch, bf16 only */, int B, int T,
                             int C, int NH);
/* Scratch: dqkvr (3,B,NH,T,hs), datt (B,NH,T,T) (the score gradient), dvaccum (B,NH,T,hs).
 * att is consumed: it comes back holding each (T,T) matrix transposed (transposed in place for
 * the products with att^T and dscores^T, instead of into another (B,NH,T,T) of scratch). */
ct_status ct_attention_backward(ct_device *dev, ct_view dinp /* (B,T,3C) = */,
                                ct_view dqkvr /* scratch */, ct_view datt /* (B,NH,T,T) scratch */,
                                ct_view dvaccum /* scratch */, ct_view dout /* (B,T,C) */,
                                ct_view qkvr /* (3,B,NH,T,hs) */,
                                ct_view att /* (B,NH,T,T), left transposed */, int B, int T, int C,
                                int NH);

/* ---- the same attention fused (engine/kernels/attention_fused.cl): an online softmax over key
 * blocks, no (B,NH,T,T) tensor. Saved for backward: the input qkv itself (B,T,3C), the output and
 * the per-row log-sum-exp lse (B,NH,T) of the scaled scores. Each output element has one writer
 * and a fixed summation order, so results are bitwise reproducible for a given device, block
 * shape and input shape (they differ from the GEMM path's in the last bits).
 *
 * The kernels are compiled per head size and block shape: bq queries per work-group, bk keys per
 * block, nt work-items, vw-wide vectors per work-item (powers of two). ct_attn_tune (ct_engine_model.h) picks them per device from
 * a measured search; cfg NULL takes ct_attn_cfg_default. */
typedef struct ct_attn_blocks {
    int bq, bk, nt; /* queries per work-group, keys per block, work-items per group */
    int vw;         /* floats per work-item lane run (1 on GPUs; wide on CPUs, one SIMD vector) */
} ct_attn_blocks;
typedef struct ct_attn_cfg {
    ct_attn_blocks fwd; /* the forward kernel */
    ct_attn_blocks bwd; /* the two backward kernels (dK/dV per key block, dQ per query block) */
    int mma;            /* bf16 activations run the mma variant (attention_mma.cl) instead:
                         * 0 no, CT_ATTN_MMA_PTX (NVIDIA sm_80+), CT_ATTN_MMA_EMULATED (the
                         * portable stand-ins, any device); fp32 activations ignore it */
} ct_attn_cfg;
#define CT_ATTN_MMA_PTX 1
#define CT_ATTN_MMA_EMULATED 2
/* 1 if the mma variant has a block shape for head size hs (32, 64, 128), else 0. */
int ct_attn_mma_supports(int hs);
/* Local memory (bytes) the mma variant's kernels take at head size hs (0: no shape). */
size_t ct_attn_mma_local_bytes(int hs, int emulated);
/* 0 if blocks k can run at head size hs on this device (info may be NULL: no local-memory
 * check); otherwise 1 with the reason in why (may be NULL). */
int ct_attn_blocks_check(const ct_device_info *info, int hs, const ct_attn_blocks *k, int backward,
                         char *why, size_t len);
/* Local memory (bytes) one work-group of k takes (backward: the larger of its two kernels). */
size_t ct_attn_blocks_local_bytes(int hs, const ct_attn_blocks *k, int backward);
/* The first of a short fixed list that fits the device: 16 x 16 blocks of 64 work-items where
 * they fit, smaller ones where not (any head size, any device); mma 0. */
ct_attn_cfg ct_attn_cfg_default(const ct_device_info *info, int hs);

/* Compile the programs cfg needs at head size hs now (so the step only enqueues). */
ct_status ct_attention_fused_warmup(ct_device *dev, const ct_attn_cfg *cfg, int hs);
/* The same for the kernels of one storage (CT_STORE_BF16: the bf16 variant). */
ct_status ct_attention_fused_warmup_store(ct_device *dev, const ct_attn_cfg *cfg, int hs,
                                          ct_store store);

ct_status ct_attention_fused_forward(ct_device *dev, const ct_attn_cfg *cfg,
                                     ct_view out /* (B,T,C) = */, ct_view lse /* (B,NH,T) = */,
                                     ct_view inp /* (B,T,3C) */, int B, int T, int C, int NH);
/* dsum: scratch (B,NH,T) for rowsum(dout * out). */
ct_status ct_attention_fused_backward(ct_device *dev, const ct_attn_cfg *cfg,
                                      ct_view dinp /* (B,T,3C) = */,
                                      ct_view dsum /* (B,NH,T) scratch */,
                                      ct_view dout /* (B,T,C) */, ct_view inp /* (B,T,3C) */,
                                      ct_view out /* (B,T,C) */, ct_view lse /* (B,NH,T) */, int B,
                                      int T, int C, int NH);

/* ---- which attention path, and the fused kernels' block shapes per device (attn_tune.c) */
typedef enum ct_attn_path {
    CT_ATTN_GEMM = 0, /* ct_attention_forward/backward: batched GEMMs, (B,NH,T,T) scores kept */
    CT_ATTN_FUSED,    /* ct_attention_fused_*: online softmax, (B,NH,T) log-sum-exp kept */
    CT_ATTN_AUTO      /* the faster of the two, measured at the model's shape at start */
} ct_attn_path;
const char *ct_attn_path_name(ct_attn_path p); /* "gemm", "fused", "auto" */
/* "gemm", "fused" or "auto"; anything else is CT_ERR_ARG (no message: the caller names the flag). */
ct_status ct_attn_path_parse(const char *s, ct_attn_path *out);

/* The fused block shapes for head size hs on this device: the stored record
 * (<ct_device_tune_dir>/<device>__<driver>.attention.txt, entry attention_hs<hs>), else a
 * measured search over a few candidates for the device type at T = 1024 (seconds: each candidate
 * is a program to compile), stored for later runs. again != 0 searches even when a record exists.
 * source (may be NULL) receives where they came from. Safe to call from several workers at once. */
ct_status ct_attn_tune(ct_device *dev, int hs, int again, ct_attn_cfg *out, char *source,
                       size_t len);
/* The head count (B = 1) the search times its candidates at on this device: 2 per compute unit,
 * 4 to 128. */
int ct_attn_search_heads(const ct_device_info *info);
/* Time one layer's attention forward and backward on `path` (gemm or fused) at (B,T,C,NH), on
 * temporary workspace buffers freed before returning: best of `reps` after a warm-up, seconds.
 * CT_ERR_DEVICE_MEM when that path's buffers do not fit. */
ct_status ct_attn_time(ct_device *dev, ct_attn_path path, const ct_attn_cfg *cfg, int B, int T,
                       int C, int NH, int reps, double *fwd_s, double *bwd_s);
/* The path a model runs for `want`: gemm and fused as asked; auto times both at one row of
 * (T, C, NH) and takes the faster (fused when the GEMM path's scores do not fit). *cfg receives
 * the fused block shapes: `blocks` if given (checked), else ct_attn_tune's. note: one line for
 * the start-up log saying what was chosen and why. */
ct_status ct_attn_select(ct_device *dev, ct_attn_path want, const ct_attn_cfg *blocks, int T,
                         int C, int NH, ct_attn_path *path, ct_attn_cfg *cfg, char *note,
                         size_t len);

/* ---- GELU, tanh approximation */
ct_status ct_gelu_forward(ct_device *dev, ct_view out /* (N) = */, ct_view inp /* (N) */, size_t N);
ct_status ct_gelu_backward(ct_device *dev, ct_view dinp /* (N) = */, ct_view inp /* (N) */,
                           ct_view dout /* (N) */, size_t N);

/* ---- residual: out = a + b; backward da += dout, db += dout */
ct_status ct_residual_forward(ct_device *dev, ct_view out /* (N) = */, ct_view a /* (N) */,
                              ct_view b /* (N) */, size_t N);
ct_status ct_residual_backward(ct_device *dev, ct_view da /* (N) += */, ct_view db /* (N) += */,
                               ct_view dout /* (N) */, size_t N);

/* ---- bias: out += bias broadcast over rows; dbias += column sums of dout */
ct_status ct_bias_forward(ct_device *dev, ct_view out /* (N,OC) += */, ct_view bias /* (OC) */,
                          size_t N, int OC);
ct_status ct_bias_backward(ct_device *dev, ct_view dbias /* (OC) += */, ct_view dout /* (N,OC) */,
                           size_t N, int OC);

/* ---- softmax cross-entropy over the real vocabulary V of logits padded to Vp.
 * losses[r] = logsumexp(logits[r,:V]) - logits[r,target[r]]; lse (saved) = the logsumexp. */
ct_status ct_crossentropy_forward(ct_device *dev, ct_view losses /* (B,T) = */,
                                  ct_view lse /* (B,T) = */, ct_view logits /* (B,T,Vp) */,
                                  ct_view targets /* (B,T) int32 */, int B, int T, int V, int Vp);
/* dlogits = (softmax - onehot) * dloss for v < V, 0 for padding; dloss is d loss / d losses[r],
 * the same for every row (1/(B*T) for a mean). dlogits may be the same view as logits (in place). */
ct_status ct_crossentropy_backward(ct_device *dev, ct_view dlogits /* (B,T,Vp) = */,
                                   ct_view logits /* (B,T,Vp) */, ct_view lse /* (B,T) */,
                                   ct_view targets /* (B,T) int32 */, float dloss, int B, int T,
                                   int V, int Vp);
/* out[0] = mean of inp[0..N) (fixed summation order). */
ct_status ct_mean_forward(ct_device *dev, ct_view out /* (1) = */, ct_view inp /* (N) */, size_t N);

/* ---- vocabulary-parallel embedding and cross-entropy (tensor parallelism, engine/tp.c): this
 * worker holds rows [lo, lo + Vl) of wte, the columns [lo, lo + Vl) of the logits, of which the
 * first nreal = clamp(V - lo, 0, Vl) are real vocabulary. */
/* out = (tok in [lo, lo+Vl) ? wte[tok - lo] : 0) + (add_wpe ? wpe[t] : 0) */
ct_status ct_encoder_forward_vp(ct_device *dev, ct_view out /* (B,T,C) = */,
                                ct_view inp /* (B,T) int32 */, ct_view wte /* (Vl,C) */,
                                ct_view wpe /* (>=T,C) */, int B, int T, int C, int lo, int Vl,
                                int add_wpe);
/* dwte += the rows of dout whose token is in [lo, lo+Vl); dwpe += sum over b of dout. */
ct_status ct_encoder_backward_vp(ct_device *dev, ct_view dwte /* (Vl,C) += */,
                                 ct_view dwpe /* (>=T,C) +=; none: skipped */, ct_view dout /* (B,T,C) */,
                                 ct_view inp /* (B,T) int32 */, int B, int T, int C, int lo,
                                 int Vl);
/* dst = a + b (max_op 0) or max(a, b) elementwise, n floats; the views may be memory of other
 * workers in this device's context; dst may be a or b. */
ct_status ct_combine(ct_device *dev, ct_view dst /* (n) = */, ct_view a, ct_view b, size_t n,
                     int max_op);
/* mx[r] = max of logits[r, 0..nreal) (-inf when nreal = 0). */
ct_status ct_crossentropy_vp_max(ct_device *dev, ct_view mx /* (B,T) = */,
                                 ct_view logits /* (B,T,Vl) */, int B, int T, int Vl, int nreal);
/* sums[r] = sum of exp(logits[r, v] - mx[r]) over v < nreal; sums[BT + r] = the logit of the
 * target when lo <= target < lo + nreal, else 0. */
ct_status ct_crossentropy_vp_sums(ct_device *dev, ct_view sums /* (2,B,T) = */,
                                  ct_view logits /* (B,T,Vl) */, ct_view mx /* (B,T) */,
                                  ct_view targets /* (B,T) int32 */, int B, int T, int Vl,
                                  int nreal, int lo);
/* lse = mx + log(sums[r]); losses = lse - sums[BT + r]. */
ct_status ct_crossentropy_vp_finish(ct_device *dev, ct_view losses /* (B,T) = */,
                                    ct_view lse /* (B,T) = */, ct_view mx /* (B,T) */,
                                    ct_view sums /* (2,B,T) */, int B, int T);
/* In place: dlogits = (exp(logits - lse) - [lo + v == target]) * dloss for v < nreal, else 0. */
ct_status ct_crossentropy_vp_backward(ct_device *dev, ct_view dlogits /* (B,T,Vl) in place */,
                                      ct_view lse /* (B,T) */, ct_view targets /* (B,T) int32 */,
                                      float dloss, int B, int T, int Vl, int nreal, int lo);

/* ---- mixture of experts (the layer is engine/moe.c; kernels in moe.cl). A choice is (token n,
 * rank k) at n * K + k; index tensors (idx, slot, pos, off, kept, routed) are int32. */
/* p = softmax over the E experts of each token's logits (fp32); idx, gate: its K largest p in
 * descending order (equal p: the lower expert first) and those p. */
ct_status ct_moe_route_forward(ct_device *dev, ct_view p /* (N,E) = */, ct_view idx /* (N,K) = */,
                               ct_view gate /* (N,K) = */, ct_view logits /* (N,E) */, int N,
                               int E, int K);
/* Per row b and expert e, the row's choices of e taken by rank first, then position: the first
 * cap get slots 0..cap-1, the rest -1 (dropped). kept: slots given; routed: choices before
 * dropping. */
ct_status ct_moe_capacity(ct_device *dev, ct_view slot /* (B,T,K) = */, ct_view kept /* (B,E) = */,
                          ct_view routed /* (B,E) = */, ct_view idx /* (B,T,K) */, int B, int T,
                          int E, int K, int cap);
/* off[b, e]: where row b's kept choices of expert e begin in expert-major order (expert, row,
 * slot). */
ct_status ct_moe_offsets(ct_device *dev, ct_view off /* (B,E) = */, ct_view kept /* (B,E) */,
                         int B, int E);
/* pmean[b, e] = the mean of p[b, t, e] over t. */
ct_status ct_moe_prob_mean(ct_device *dev, ct_view pmean /* (B,E) = */, ct_view p /* (B,T,E) */,
                           int B, int T, int E);
/* pos = off[b, idx] + slot for kept choices (-1 dropped); xs[pos] = x[token]. */
ct_status ct_moe_dispatch(ct_device *dev, ct_view xs /* (kept,C) = */, ct_view pos /* (B,T,K) = */,
                          ct_view x /* (B,T,C) */, ct_view idx /* (B,T,K) */,
                          ct_view slot /* (B,T,K) */, ct_view off /* (B,E) */, int B, int T,
                          int C, int E, int K);
/* y[n] = sum over kept choices k (in order) of gate * ys[pos]. */
ct_status ct_moe_combine_forward(ct_device *dev, ct_view y /* (N,C) = */, ct_view ys /* (kept,C) */,
                                 ct_view gate /* (N,K) */, ct_view pos /* (N,K) */, size_t N,
                                 int C, int K);
/* dgate = dot(dy[n], ys[pos]) (0 for dropped choices); dys[pos] = scale * gate * dy[n]. */
ct_status ct_moe_combine_backward(ct_device *dev, ct_view dys /* (kept,C) = */,
                                  ct_view dgate /* (N,K) = */, ct_view dy /* (N,C) */,
                                  ct_view ys /* (kept,C) */, ct_view gate /* (N,K) */,
                                  ct_view pos /* (N,K) */, size_t N, int C, int K, float scale);
/* dp[e] = aux * routed[b, e] + the dgate of the token's kept choices of e; dlogits = the softmax
 * backward p * (dp - sum p dp). aux: the auxiliary loss's gradient per routed choice and unit p. */
ct_status ct_moe_router_backward(ct_device *dev, ct_view dlogits /* (B,T,E) = */,
                                 ct_view p /* (B,T,E) */, ct_view idx /* (B,T,K) */,
                                 ct_view pos /* (B,T,K) */, ct_view dgate /* (B,T,K) */,
                                 ct_view routed /* (B,E) */, float aux, int B, int T, int E, int K);
/* dx[n] = dxr[n] + unscale * the sum of the dxs rows of the token's kept choices (in order). */
ct_status ct_moe_dispatch_backward(ct_device *dev, ct_view dx /* (N,C) = */, ct_view dxr /* (N,C) */,
                                   ct_view dxs /* (kept,C) */, ct_view pos /* (N,K) */, size_t N,
                                   int C, int K, float unscale);

/* ---- optimizer. The clip multiplier is PyTorch's clip_grad_norm_ one:
 * s = min(1, clip / (norm + 1e-6)), and s = 1 when clip <= 0 or norm is absent. */
/* out[0] = ||inp||_2 over n elements. partials: scratch of CT_NORM_PARTIALS floats. */
ct_status ct_global_norm_forward(ct_device *dev, ct_view out /* (1) = */,
                                 ct_view partials /* (CT_NORM_PARTIALS) scratch */,
                                 ct_view inp /* (n) */, size_t n);
/* x *= s(norm[0], clip) */
ct_status ct_scale_by_clip(ct_device *dev, ct_view x /* (n) */, ct_view norm /* (1) */, float clip,
                           size_t n);
/* AdamW step t (1-based) over n elements: g = grad * s(norm[0], clip);
 * m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr (m^/(sqrt(v^)+eps) + wd p),
 * m^ = m/(1-b1^t), v^ = v/(1-b2^t). m, v, params updated in place. */
ct_status ct_adamw_update(ct_device *dev, ct_view params /* (n) */, ct_view grads /* (n) */,
                          ct_view m /* (n) */, ct_view v /* (n) */, ct_view norm /* (1) opt */,
                          float clip, size_t n, float lr, float beta1, float beta2, float eps,
                          float weight_decay, int t);

#ifdef __cplusplus
}
#endif
#endif /* CT_ENGINE_OPS_H */
