/* ct_engine_tp.h - tensor parallelism (Megatron-LM: Shoeybi et al. 2019) with sequence
 * parallelism (Korthikanti et al. 2022): the pieces a GPT-2 block, its embedding and its loss are
 * built from when the matrices are split over the N workers of a TP group. The pieces call
 * parallel/ themselves (the trainer and the executor never see TP's collectives).
 *
 *   column-parallel linear  y_r = x W_r^T + b_r        W_r: rows r of W (output features)
 *                           forward: identity (SP: all-gather x's rows first)
 *                           backward: dx = sum_r dy_r W_r, all-reduced (SP: reduce-scattered),
 *                           overlapped with the weight-gradient GEMM
 *   row-parallel linear     y = sum_r x_r W_r^T, then + b once
 *                           forward: all-reduce (SP: reduce-scatter) of the partial products
 *                           backward: identity (SP: all-gather dy's rows first)
 *   vocabulary-parallel embedding / cross-entropy: rows [r Vp/N, (r+1) Vp/N) of wte; the loss
 *                           from all-reduces of the row maxima and of (sum of exponentials,
 *                           target logit): the full logits never exist on one worker.
 * A block is: LN, column (QKV by heads), attention on its NH/N heads, row (attproj), residual,
 * LN, column (fc), GELU, row (fcproj), residual: two all-reduces of (B,T,C) forward and two
 * backward (SP: two all-gathers + two reduce-scatters forward; two all-gathers of the output
 * gradient, two reduce-scatters of the input gradient and two re-gathers of the LayerNorm outputs
 * backward, which are not kept).
 *
 * Sequence parallelism splits the micro-batch's B*T token rows (row-major (b, t)) into N
 * contiguous blocks: worker r holds rows [r BT/N, (r+1) BT/N) of every tensor outside the
 * column/row-parallel regions (the LayerNorms, residuals, the embedding output, dres), which is
 * Megatron's split of its (T, B, C) layout's token axis applied to ours.
 *
 * Communication goes through host staging (a read of the device range into host memory, the
 * host collective of parallel/, a write back), or, when every member is a thread sharing one
 * device's context, stays on the device (ct_tp_opts.comm). Every
 * piece takes tp = NULL as "one worker" and then runs the single-device op, the same kernels in
 * the same order, so tp = 1 is the plain model bit for bit.
 *
 *     ct_tp *tp = NULL;
 *     ct_tp_opts o = ct_tp_opts_default(); o.sp = 1;
 *     if (ct_tp_create(&tp, ct_grid_tp(grid), dev, arena, B * T * C, &o, &err)) puts(err.msg);
 *     ct_tp_col_forward(dev, tp, qkv, ln1, xfull, qkvw_r, qkvb_r, B, T, C, 3 * C / N);
 *     ct_tp_free(tp);
 */
#ifndef CT_ENGINE_TP_H
#define CT_ENGINE_TP_H

#include <stddef.h>

#include "ct_cl.h"
#include "ct_engine_ops.h"
#include "ct_parallel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_tp ct_tp;

/* How TP's collectives move data. host: every transfer staged through host memory and the
 * host collectives of parallel/ (any layout). device: device-resident (the members' kernels and
 * copies read each other's memory, their queues wait on each other's events; the host never
 * waits for the device): needs every member a thread of one process with its device opened in
 * one shared context (workers sharing one device). auto: device where possible, except on a CPU
 * device (its memory is host memory: staging is a memcpy, measured faster than the device
 * path's rounds of event exchange). */
enum { CT_TP_COMM_AUTO = 0, CT_TP_COMM_HOST = 1, CT_TP_COMM_DEVICE = 2 };

typedef struct ct_tp_opts {
    int sp;        /* sequence parallelism: activations outside TP regions are split over rows */
    int overlap;   /* 1: a column-parallel backward's input-gradient reduction runs while the
                      weight-gradient GEMM computes (default 1) */
    int skip_comm; /* timing only (benchmarks): no staging and no collective; results wrong */
    int comm;      /* CT_TP_COMM_AUTO (default), _HOST or _DEVICE (refused where impossible) */
} ct_tp_opts;
ct_tp_opts ct_tp_opts_default(void);

/* The TP group `c` (this worker's handle; used from the worker's thread only), the device, and
 * the buffer every view passed to the pieces lies in (the model's activation arena). Host
 * staging: two buffers of max_floats (the largest collective: B*T*C). Not collective. */
ct_status ct_tp_create(ct_tp **out, ct_comm *c, ct_device *dev, ct_arena *arena,
                       size_t max_floats, const ct_tp_opts *o, ct_err *err);
/* Waits for the device (writes from the staging may be queued), then frees. NULL: no-op. */
void ct_tp_free(ct_tp *t);
int ct_tp_size(const ct_tp *t); /* N (1 for NULL) */
int ct_tp_rank(const ct_tp *t); /* r (0 for NULL) */
int ct_tp_sp(const ct_tp *t);
size_t ct_tp_host_bytes(const ct_tp *t); /* host staging ("comm"; 0 in device mode) */
int ct_tp_device_comm(const ct_tp *t);     /* 1: device-resident collectives */
/* "auto" | "host" | "device" -> CT_TP_COMM_*; anything else CT_ERR_ARG with a message. */
ct_status ct_tp_comm_parse(const char *s, int *out, ct_err *err);
void ct_tp_set_overlap(ct_tp *t, int on);
void ct_tp_set_skip_comm(ct_tp *t, int on);

/* Counters since the last reset. Bytes: "payload" is the whole tensor a collective is about
 * (all-reduce: n floats; reduce-scatter: the N*n input; all-gather: the N*n output); "wire" is
 * what each worker sends under a bandwidth-optimal algorithm (ring): all-reduce 2(N-1)/N of the
 * payload, reduce-scatter and all-gather (N-1)/N. */
typedef struct ct_tp_stats {
    long calls[3];          /* all-reduce, reduce-scatter, all-gather */
    double payload_bytes[3];
    double wire_bytes;
    double comm_ms;    /* worker thread inside TP collectives, staging included, data ready */
    double overlap_ms; /* the part of comm_ms spent while a weight-gradient GEMM was queued */
    double wait_ms;    /* waiting for the device to produce the data (compute, not comm) */
} ct_tp_stats;
void ct_tp_stats_get(const ct_tp *t, ct_tp_stats *out);
void ct_tp_stats_reset(ct_tp *t);

/* ---- the primitives (collective over the group; views in the arena). Rows of C floats:
 * BT = B*T rows, BTl = BT / N with sequence parallelism. */
/* dst (n) = op over the group of src (n); dst may be src. */
ct_status ct_tp_allreduce(ct_device *dev, ct_tp *t, ct_view dst, ct_view src, size_t n, ct_op op);
/* dst (n) = block r of the sum over the group of src (N*n); dst may be src. */
ct_status ct_tp_reduce_scatter(ct_device *dev, ct_tp *t, ct_view dst, ct_view src, size_t n);
/* dst (N*n) = every worker's src (n), worker k's at k*n. */
ct_status ct_tp_allgather(ct_device *dev, ct_tp *t, ct_view dst, ct_view src, size_t n);

/* ---- the pieces. Under tp = NULL: the single-device op (rows BTl = BT, N = 1, r = 0). */

/* Column-parallel linear: out (BT,OCl) = x W_r^T + b_r, x = inp (BT,C), or with SP the rows of
 * every worker's inp (BTl,C) gathered into `full` (BT,C) scratch. b optional. */
ct_status ct_tp_col_forward(ct_device *dev, ct_tp *t, ct_view out /* (BT,OCl) = */,
                            ct_view inp /* (BTl,C) */, ct_view full /* (BT,C) scratch, SP */,
                            ct_view w /* (OCl,C) */, ct_view b /* (OCl) opt */, int B, int T,
                            int C, int OCl);
/* dinp (BTl,C) = (sum over the group of dout W_r), reduce-scattered under SP; dw += dout^T x;
 * db += column sums of dout. dpart (BT,C) scratch takes this worker's partial dinp (may be the
 * same view as dinp); `full` (BT,C) scratch takes the re-gathered x under SP. dinp, dw, db
 * optional (dinp absent: no reduction). */
ct_status ct_tp_col_backward(ct_device *dev, ct_tp *t, ct_view dinp /* (BTl,C) = */,
                             ct_view dw /* (OCl,C) += */, ct_view db /* (OCl) += */,
                             ct_view dout /* (BT,OCl) */, ct_view inp /* (BTl,C) */,
                             ct_view full /* (BT,C) scratch, SP */,
                             ct_view dpart /* (BT,C) scratch */, ct_view w /* (OCl,C) */, int B,
                             int T, int C, int OCl);
/* Row-parallel linear: out (BTl,C) = sum over the group of inp W_r^T (reduce-scattered under
 * SP) + b. `partial` (BT,C) scratch (may be the same view as out). */
ct_status ct_tp_row_forward(ct_device *dev, ct_tp *t, ct_view out /* (BTl,C) = */,
                            ct_view partial /* (BT,C) scratch */, ct_view inp /* (BT,ICl) */,
                            ct_view w /* (C,ICl) */, ct_view b /* (C) opt */, int B, int T,
                            int ICl, int C);
/* dinp (BT,ICl) = dy W_r; dw += dy^T inp; db += column sums of dy, where dy = dout (BT,C), or
 * under SP every worker's dout (BTl,C) gathered into dfull (BT,C) scratch (so db is the whole
 * sum on every worker). */
ct_status ct_tp_row_backward(ct_device *dev, ct_tp *t, ct_view dinp /* (BT,ICl) = */,
                             ct_view dw /* (C,ICl) += */, ct_view db /* (C) += */,
                             ct_view dout /* (BTl,C) */, ct_view dfull /* (BT,C) scratch, SP */,
                             ct_view inp /* (BT,ICl) */, ct_view w /* (C,ICl) */, int B, int T,
                             int ICl, int C);
/* Vocabulary-parallel embedding: out (BTl,C) = wte[tok] + wpe[t] (reduce-scattered under SP)
 * from this worker's rows of wte; `partial` (BT,C) scratch. wpe absent (ct_view_none: a Llama
 * model, no positions): out = wte[tok]. */
ct_status ct_tp_embed_forward(ct_device *dev, ct_tp *t, ct_view out /* (BTl,C) = */,
                              ct_view partial /* (BT,C) scratch */,
                              ct_view tokens /* (B,T) int32 */, ct_view wte /* (Vp/N,C) */,
                              ct_view wpe /* (>=T,C) */, int B, int T, int C, int Vp);
/* dwte (this worker's rows) += the rows of dy whose token it holds; dwpe += sum over b of dy
 * (dwpe absent: none); dy = dout, or under SP every worker's dout gathered into dfull (BT,C)
 * scratch. */
ct_status ct_tp_embed_backward(ct_device *dev, ct_tp *t, ct_view dwte /* (Vp/N,C) += */,
                               ct_view dwpe /* (>=T,C) += */, ct_view dout /* (BTl,C) */,
                               ct_view dfull /* (BT,C) scratch, SP */,
                               ct_view tokens /* (B,T) int32 */, int B, int T, int C, int Vp);
/* Vocabulary-parallel cross-entropy over the real V of this worker's logits columns
 * [r Vp/N, (r+1) Vp/N): losses and lse (the same on every worker of the group). stats: (3,B,T)
 * scratch (row maxima, sums of exponentials, target logits). */
ct_status ct_tp_crossentropy_forward(ct_device *dev, ct_tp *t, ct_view losses /* (B,T) = */,
                                     ct_view lse /* (B,T) = */, ct_view stats /* (3,B,T) */,
                                     ct_view logits /* (B,T,Vp/N) */,
                                     ct_view targets /* (B,T) int32 */, int B, int T, int V,
                                     int Vp);
/* In place: this worker's logits columns become their gradient (no communication). */
ct_status ct_tp_crossentropy_backward(ct_device *dev, ct_tp *t,
                                      ct_view dlogits /* (B,T,Vp/N) in place */,
                                      ct_view lse /* (B,T) */, ct_view targets /* (B,T) int32 */,
                                      float dloss, int B, int T, int V, int Vp);

#ifdef __cplusplus
}
#endif
#endif /* CT_ENGINE_TP_H */
