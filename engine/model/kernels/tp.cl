/* tp.cl - the vocabulary-parallel embedding and cross-entropy of tensor parallelism (Megatron's
 * VocabParallelEmbedding and vocab_parallel_cross_entropy). A worker holds rows [lo, lo + Vl) of
 * wte and so the columns [lo, lo + Vl) of the logits; of those, the first `nreal` are real
 * vocabulary (v < V), the rest padding. Fixed summation orders, no atomics: deterministic.
 * Storage (store.clh): out, wte, wpe, dout, the logits (and their gradient) and tp_combine's
 * operands are act_t; dwte, mx, sums, lse, losses fp32 (tp_combine on those runs the fp32
 * build); every max, sum and exponential in fp32. */
#include "bf16.clh"
#include "store.clh"

/* out (BT,C) = (tok in [lo, lo+Vl) ? wte[tok - lo] : 0) + (add_wpe ? wpe[t] : 0); 2-D range
 * (channel, position). The workers' outputs summed give wte[tok] + wpe[t] exactly (one is
 * non-zero per element, with wpe added by one worker). */
__kernel void encoder_forward_vp(__global act_t *out, ulong out_off, __global const int *inp,
                                 ulong inp_off, __global const act_t *wte, ulong wte_off,
                                 __global const act_t *wpe, ulong wpe_off, int BT, int T, int C,
                                 int lo, int Vl, int add_wpe) {
    int c = (int)get_global_id(0);
    int bt = (int)get_global_id(1);
    if (c >= C || bt >= BT) return;
    int t = bt % T;
    int tok = inp[inp_off + bt] - lo;
    float e = (tok >= 0 && tok < Vl) ? ACT_LD(wte, wte_off + (size_t)tok * C + c) : 0.0f;
    if (add_wpe) e += ACT_LD(wpe, wpe_off + (size_t)t * C + c);
    ACT_ST(out, out_off + (size_t)bt * C + c, e);
}

/* dwte (Vl,C) += the rows of dout (BT,C) whose token is in [lo, lo+Vl); one work-item per
 * channel walks the positions in order (rows hit by several tokens are summed in that order). */
__kernel void encoder_backward_wte_vp(__global float *dwte, ulong dwte_off,
                                      __global const act_t *dout, ulong dout_off,
                                      __global const int *inp, ulong inp_off, int BT, int C,
                                      int lo, int Vl) {
    size_t c = get_global_id(0);
    if (c >= (size_t)C) return;
    for (int bt = 0; bt < BT; bt++) {
        int tok = inp[inp_off + bt] - lo;
        if (tok >= 0 && tok < Vl)
            dwte[dwte_off + (size_t)tok * C + c] += ACT_LD(dout, dout_off + (size_t)bt * C + c);
    }
}

/* mx[r] = max over the real columns held, logits[r, 0..nreal) (-inf when nreal = 0). */
__kernel void crossentropy_vp_max(__global float *mx, ulong mx_off, __global const act_t *logits,
                                  ulong logits_off, int N, int Vl, int nreal) {
    size_t r = get_global_id(0);
    if (r >= (size_t)N) return;
    __global const act_t *l = logits + logits_off + r * (size_t)Vl;
    float m = -INFINITY;
    for (int v = 0; v < nreal; v++) m = fmax(m, ACT_LD(l, v));
    mx[mx_off + r] = m;
}

/* sums (2,N): sums[r] = sum over the real columns held of exp(logits - mx[r]) (mx: the global
 * row maximum); sums[N + r] = the target's logit when this worker holds it, else 0. */
__kernel void crossentropy_vp_sums(__global float *sums, ulong sums_off,
                                   __global const act_t *logits, ulong logits_off,
                                   __global const float *mx, ulong mx_off,
                                   __global const int *targets, ulong targets_off, int N, int Vl,
                                   int nreal, int lo) {
    size_t r = get_global_id(0);
    if (r >= (size_t)N) return;
    __global const act_t *l = logits + logits_off + r * (size_t)Vl;
    float m = mx[mx_off + r], s = 0.0f;
    for (int v = 0; v < nreal; v++) s += exp(ACT_LD(l, v) - m);
    int tg = targets[targets_off + r] - lo;
    sums[sums_off + r] = s;
    sums[sums_off + (size_t)N + r] = (tg >= 0 && tg < nreal) ? ACT_LD(l, tg) : 0.0f;
}

/* lse[r] = mx[r] + log(sums[r]); losses[r] = lse[r] - sums[N + r] (sums summed over the group). */
__kernel void crossentropy_vp_finish(__global float *losses, ulong losses_off,
                                     __global float *lse, ulong lse_off,
                                     __global const float *mx, ulong mx_off,
                                     __global const float *sums, ulong sums_off, int N) {
    size_t r = get_global_id(0);
    if (r >= (size_t)N) return;
    float z = mx[mx_off + r] + log(sums[sums_off + r]);
    lse[lse_off + r] = z;
    losses[losses_off + r] = z - sums[sums_off + (size_t)N + r];
}

/* buf (N,Vl): this worker's logits in, their gradient out, in place: (softmax - onehot) * dloss
 * on the real columns, 0 on the padding. 2-D range (column, row). */
__kernel void crossentropy_vp_backward_inplace(__global act_t *buf, ulong buf_off,
                                               __global const float *lse, ulong lse_off,
                                               __global const int *targets, ulong targets_off,
                                               int N, int Vl, int nreal, int lo, float dloss) {
    int v = (int)get_global_id(0);
    size_t r = get_global_id(1);
    if (v >= Vl || r >= (size_t)N) return;
    size_t i = buf_off + r * (size_t)Vl + (size_t)v;
    float g = 0.0f;
    if (v < nreal) {
        float p = exp(ACT_LD(buf, i) - lse[lse_off + r]);
        g = (p - (v + lo == targets[targets_off + r] ? 1.0f : 0.0f)) * dloss;
    }
    ACT_ST(buf, i, g);
}

/* ---- a work-group per row (GPUs): the same two row reductions, each over the group by a fixed
 * tree in local memory (deterministic for a given group size). Launched with exactly N groups
 * of a power-of-two size <= 256: no early return before the barriers. */

/* The group's fmax (op 0) or sum (op 1) of v, in buf[0] for every item. */
static float vp_group_reduce(__local float *buf, float v, int op) {
    int lid = (int)get_local_id(0), n = (int)get_local_size(0);
    buf[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = n / 2; s > 0; s >>= 1) {
        if (lid < s) buf[lid] = op ? buf[lid] + buf[lid + s] : fmax(buf[lid], buf[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = buf[0];
    barrier(CLK_LOCAL_MEM_FENCE); /* buf is reused by the caller's next reduction */
    return r;
}

__kernel void crossentropy_vp_max_rows(__global float *mx, ulong mx_off,
                                       __global const act_t *logits, ulong logits_off, int N,
                                       int Vl, int nreal) {
    __local float buf[256];
    size_t r = get_group_id(0);
    int lid = (int)get_local_id(0), n = (int)get_local_size(0);
    __global const act_t *l = logits + logits_off + r * (size_t)Vl;
    float m = -INFINITY;
    for (int v = lid; v < nreal; v += n) m = fmax(m, ACT_LD(l, v));
    m = vp_group_reduce(buf, m, 0);
    if (lid == 0) mx[mx_off + r] = m;
}

__kernel void crossentropy_vp_sums_rows(__global float *sums, ulong sums_off,
                                        __global const act_t *logits, ulong logits_off,
                                        __global const float *mx, ulong mx_off,
                                        __global const int *targets, ulong targets_off, int N,
                                        int Vl, int nreal, int lo) {
    __local float buf[256];
    size_t r = get_group_id(0);
    int lid = (int)get_local_id(0), n = (int)get_local_size(0);
    __global const act_t *l = logits + logits_off + r * (size_t)Vl;
    float m = mx[mx_off + r], s = 0.0f;
    for (int v = lid; v < nreal; v += n) s += exp(ACT_LD(l, v) - m);
    s = vp_group_reduce(buf, s, 1);
    if (lid == 0) {
        int tg = targets[targets_off + r] - lo;
        sums[sums_off + r] = s;
        sums[sums_off + (size_t)N + r] = (tg >= 0 && tg < nreal) ? ACT_LD(l, tg) : 0.0f;
    }
}

/* dst[i] = a[i] + b[i] (op 0) or max(a[i], b[i]) (op 1): one step of a device-resident
 * reduction, the operands another worker's memory in the same context. dst may be a or b
 * (the same elements). */
__kernel void tp_combine(__global act_t *dst, ulong dst_off, __global const act_t *a, ulong a_off,
                         __global const act_t *b, ulong b_off, ulong n, int op) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    float x = ACT_LD(a, a_off + i), y = ACT_LD(b, b_off + i);
    ACT_ST(dst, dst_off + i, op ? fmax(x, y) : x + y);
}
