/* ct_engine_ops_llama.h - the device ops the Llama family needs beyond GPT-2's (ct_engine_ops.h):
 * RMSNorm, the rotary position embedding in Hugging Face's convention, the SwiGLU gate, the token
 * embedding without positions and grouped-query attention's kv-head repetition. Same
 * conventions as ct_engine_ops.h: views, llm.c's argument order, activation gradients "=" (or
 * "+=" where asked), parameter gradients "+=", everything enqueued, nothing read back.
 *
 *     ct_rmsnorm_forward(dev, h, rstd, x, w, B, T, C, 1e-5f);
 *     ct_rope_forward(dev, q, q, B, T, NH, hd, 3 * C, 10000.0f);     in place, inside a fused qkv
 *     ct_swiglu_forward(dev, a, g, u, (size_t)B * T * F);
 */
#ifndef CT_ENGINE_OPS_LLAMA_H
#define CT_ENGINE_OPS_LLAMA_H

#include "ct_engine_ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- RMSNorm: out = x / sqrt(mean(x^2) + eps) * w over the last dimension (no mean taken off,
 * no bias); rstd keeps 1 / sqrt(mean(x^2) + eps) per row for the backward. */
ct_status ct_rmsnorm_forward(ct_device *dev, ct_view out /* (B,T,C) = */,
                             ct_view rstd /* (B,T) = */, ct_view inp /* (B,T,C) */,
                             ct_view weight /* (C) */, int B, int T, int C, float eps);
/* dinp is overwritten, or accumulated into when accumulate_dinp != 0 (the residual stream);
 * dinp absent (ct_view_none) computes only dweight, dweight absent only dinp. */
ct_status ct_rmsnorm_backward(ct_device *dev, ct_view dinp /* (B,T,C) = or += */,
                              ct_view dweight /* (C) += */, ct_view dout /* (B,T,C) */,
                              ct_view inp /* (B,T,C) */, ct_view weight /* (C) */,
                              ct_view rstd /* (B,T) */, int B, int T, int C, int accumulate_dinp);

/* ---- Rotary position embedding (Hugging Face's LlamaRotaryEmbedding + apply_rotary_pos_emb):
 * for each of the nh heads of size hd (even) of every row (b, t), at position t, the pair
 * (j, j + hd/2), j < hd/2, turned by the angle t * theta^(-2j/hd):
 *     out_j = x_j cos - x_{j+hd/2} sin,  out_{j+hd/2} = x_{j+hd/2} cos + x_j sin
 * (x cos + rotate_half(x) sin). A row's heads start at row * row_stride (floats), head h at
 * h * hd within it: q and k inside a fused (B,T,(NH + 2 NKV) hd) tensor are two calls with
 * row_stride the fused width. out == inp is allowed (in place). */
ct_status ct_rope_forward(ct_device *dev, ct_view out, ct_view inp, int B, int T, int nh, int hd,
                          int row_stride, float theta);
/* The gradient of the input: the same rotation by the opposite angle (dinp == dout allowed). */
ct_status ct_rope_backward(ct_device *dev, ct_view dinp, ct_view dout, int B, int T, int nh,
                           int hd, int row_stride, float theta);

/* ---- SwiGLU's gate: out = silu(gate) * up, silu(g) = g * sigmoid(g), elementwise. */
ct_status ct_swiglu_forward(ct_device *dev, ct_view out /* (N) = */, ct_view gate /* (N) */,
                            ct_view up /* (N) */, size_t N);
ct_status ct_swiglu_backward(ct_device *dev, ct_view dgate /* (N) = */, ct_view dup /* (N) = */,
                             ct_view dout /* (N) */, ct_view gate /* (N) */, ct_view up /* (N) */,
                             size_t N);

/* ---- The token embedding without positions: out = wte[token]. */
ct_status ct_embed_forward(ct_device *dev, ct_view out /* (B,T,C) = */,
                           ct_view tokens /* (B,T) int32 */, ct_view wte /* (Vp,C) */, int B, int T,
                           int C, int Vp);
ct_status ct_embed_backward(ct_device *dev, ct_view dwte /* (Vp,C) += */,
                            ct_view dout /* (B,T,C) */, ct_view tokens /* (B,T) int32 */, int B,
                            int T, int C, int Vp);
/* The same over rows [lo, lo + Vl) of the vocabulary (tensor parallelism's share of wte): an id
 * outside them embeds as zeros, adds nothing to dwte (Vl,C). */
ct_status ct_embed_forward_vp(ct_device *dev, ct_view out /* (B,T,C) = */,
                              ct_view tokens /* (B,T) int32 */, ct_view wte /* (Vl,C) */, int B,
                              int T, int C, int lo, int Vl);
ct_status ct_embed_backward_vp(ct_device *dev, ct_view dwte /* (Vl,C) += */,
                               ct_view dout /* (B,T,C) */, ct_view tokens /* (B,T) int32 */, int B,
                               int T, int C, int lo, int Vl);

/* ---- Grouped-query attention through the multi-head attention ops: the fused q|k|v of NH query
 * and NKV kv heads (Cr = (NH + 2 NKV) hd per row) becomes (B,T,3C) with each kv head repeated for
 * its NH / NKV query heads (query head h reads kv head h / (NH / NKV)); the backward is its
 * adjoint (the repeated heads' gradients summed). NKV = NH is a copy. */
ct_status ct_gqa_expand_forward(ct_device *dev, ct_view out /* (B,T,3C) = */,
                                ct_view inp /* (B,T,Cr) */, int B, int T, int NH, int NKV, int hd);
ct_status ct_gqa_expand_backward(ct_device *dev, ct_view dinp /* (B,T,Cr) = */,
                                 ct_view dout /* (B,T,3C) */, int B, int T, int NH, int NKV,
                                 int hd);

#ifdef __cplusplus
}
#endif
#endif /* CT_ENGINE_OPS_LLAMA_H */
