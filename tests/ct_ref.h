/* ct_ref.h - plain-C references of every device op and of the whole GPT-2 model, in double
 * precision, written straight from the formulas (no blocking, no tricks). Tests compare the
 * device ops to these, and check these against central finite differences.
 *
 * Same argument order and "=" / "+=" contract as ct_engine_ops.h; arrays are host doubles
 * (tokens int). The model reference allocates its own activations per call.
 *
 *     double loss = ct_ref_gpt_loss(&cfg, params, tokens, targets, B, T);
 *     ct_ref_gpt_grad(&cfg, params, tokens, targets, B, T, grads);   grads "=" d loss / d params
 */
#ifndef CT_REF_H
#define CT_REF_H

#include <stddef.h>

#include "ct_gpt_config.h"

#ifdef __cplusplus
extern "C" {
#endif

void ct_ref_encoder_forward(double *out, const int *inp, const double *wte, const double *wpe,
                            int B, int T, int C);
void ct_ref_encoder_backward(double *dwte, double *dwpe, const double *dout, const int *inp, int B,
                             int T, int C);

void ct_ref_layernorm_forward(double *out, double *mean, double *rstd, const double *inp,
                              const double *w, const double *b, int B, int T, int C);
/* dinp "+=" (callers zero it for "="); dw, db "+=" */
void ct_ref_layernorm_backward(double *dinp, double *dw, double *db, const double *dout,
                               const double *inp, const double *w, const double *mean,
                               const double *rstd, int B, int T, int C);

/* out (B,T,OC) = inp (B,T,C) . w^T (w (OC,C)) + bias (may be NULL) */
void ct_ref_matmul_forward(double *out, const double *inp, const double *w, const double *bias,
                           int B, int T, int C, int OC);
/* dinp "+=", dw "+=", dbias "+=" (each may be NULL) */
void ct_ref_matmul_backward(double *dinp, double *dw, double *dbias, const double *dout,
                            const double *inp, const double *w, int B, int T, int C, int OC);

/* out (B,T,C), att (B,NH,T,T) the softmax (zeros above the diagonal); inp (B,T,3C) */
void ct_ref_attention_forward(double *out, double *att, const double *inp, int B, int T, int C,
                              int NH);
/* dinp (B,T,3C) "+=" */
void ct_ref_attention_backward(double *dinp, const double *dout, const double *inp,
                               const double *att, int B, int T, int C, int NH);

void ct_ref_gelu_forward(double *out, const double *inp, size_t N);
/* dinp "+=" */
void ct_ref_gelu_backward(double *dinp, const double *inp, const double *dout, size_t N);

void ct_ref_residual_forward(double *out, const double *a, const double *b, size_t N);
void ct_ref_residual_backward(double *da, double *db, const double *dout, size_t N);

/* losses (B,T); logits (B,T,Vp), softmax over the first V */
void ct_ref_crossentropy_forward(double *losses, const double *logits, const int *targets, int B,
                                 int T, int V, int Vp);
/* dlogits "=" (softmax - onehot) * dloss, 0 for the padding */
void ct_ref_crossentropy_backward(double *dlogits, const double *logits, const int *targets,
                                  double dloss, int B, int T, int V, int Vp);

double ct_ref_global_norm(const double *x, size_t n);
/* one AdamW step t over n elements, g = grad * gscale */
void ct_ref_adamw(double *p, const double *g, double *m, double *v, size_t n, double gscale,
                  double lr, double b1, double b2, double eps, double wd, int t);

/* ---- the mixture-of-experts MLP (engine/moe.c): router logits x.Wr^T, p = softmax over E,
 * the K largest p per token (descending; equal p: the lower expert), per-row capacity cap
 * (ranks first, then positions; a choice past cap is dropped), y = sum of kept gate * MLP_e(x). */
/* p (N,E), idx and gate (N,K) from logits (N,E). */
void ct_ref_moe_route(double *p, int *idx, double *gate, const double *logits, int N, int E, int K);
/* slot (B,T,K): the choice's slot in its expert within the row, or -1; kept, routed (B,E). */
void ct_ref_moe_capacity(int *slot, int *kept, int *routed, const int *idx, int B, int T, int E,
                         int K, int cap);
/* y (B,T,C) "="; returns the auxiliary loss, the mean over rows of E sum_e f_e P_e (f_e: the
 * row's choices routed to e before dropping / (K T); P_e: the row's mean p_e). Weights: wr (E,C),
 * fcw (E,4C,C), fcb (E,4C), fpw (E,C,4C), fpb (E,C). */
double ct_ref_moe_forward(double *y, const double *x, const double *wr, const double *fcw,
                          const double *fcb, const double *fpw, const double *fpb, int B, int T,
                          int C, int E, int K, int cap);
/* The gradients of sum(y * dy) + aux_scale * aux: dx "=", parameter gradients "+=". */
void ct_ref_moe_backward(double *dx, double *dwr, double *dfcw, double *dfcb, double *dfpw,
                         double *dfpb, const double *dy, const double *x, const double *wr,
                         const double *fcw, const double *fcb, const double *fpw,
                         const double *fpb, int B, int T, int C, int E, int K, int cap,
                         double aux_scale);

/* The Llama family's ops (ct_engine_ops_llama.h). RMSNorm: out = x / sqrt(mean(x^2) + eps) * w,
 * rstd per row; backward dinp "+=", dw "+=". */
void ct_ref_rmsnorm_forward(double *out, double *rstd, const double *inp, const double *w, int N,
                            int C, double eps);
void ct_ref_rmsnorm_backward(double *dinp, double *dw, const double *dout, const double *inp,
                             const double *w, int N, int C, double eps);
/* Rotary embedding of the nh heads (size hd) of each row r at position r % T, heads at
 * r * stride + h * hd; dir 1: forward, -1: its transpose (the input's gradient). out != inp. */
void ct_ref_rope(double *out, const double *inp, int N, int T, int nh, int hd, int stride,
                 double theta, int dir);
/* SwiGLU: out = silu(g) * u; backward dg "+=", du "+=". */
void ct_ref_swiglu_forward(double *out, const double *g, const double *u, size_t N);
void ct_ref_swiglu_backward(double *dg, double *du, const double *dout, const double *g,
                            const double *u, size_t N);

/* The whole model: parameters in the table order of ct_gpt_config.h. Mean cross-entropy loss.
 * Dense models only (a config with experts gives NaN). */
double ct_ref_gpt_loss(const ct_gpt_config *cfg, const double *params, const int *tokens,
                       const int *targets, int B, int T);
/* Loss, and grads "=" d loss / d params (all entries written). logits (B,T,Vp) optional out. */
double ct_ref_gpt_grad(const ct_gpt_config *cfg, const double *params, const int *tokens,
                       const int *targets, int B, int T, double *grads, double *logits);

#ifdef __cplusplus
}
#endif
#endif /* CT_REF_H */
