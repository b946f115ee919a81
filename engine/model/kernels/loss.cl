/* loss.cl - softmax cross-entropy over the real vocabulary V of padded logits (N,Vp), and the
 * mean of per-token losses (one work-item, fixed order, so the loss is deterministic).
 * Storage (store.clh): the logits (and their gradient, in place) are act_t; losses, lse and the
 * mean are fp32, and so is every max, sum and exponential. */
#include "bf16.clh"
#include "store.clh"

/* losses[r] = logsumexp(logits[r, :V]) - logits[r, target[r]]; lse[r] saved for backward.
 * A target outside [0, V) gives NaN (the host validates targets before upload). One work-item per
 * row; the row loops use float8 so CPU compilers emit SIMD (fixed order: deterministic). */
__kernel void crossentropy_forward(__global float *losses, ulong losses_off, __global float *lse,
                                   ulong lse_off, __global const act_t *logits, ulong logits_off,
                                   __global const int *targets, ulong targets_off, int N, int V,
                                   int Vp) {
    size_t r = get_global_id(0);
    if (r >= (size_t)N) return;
    __global const act_t *l = logits + logits_off + r * (size_t)Vp;
    int V8 = V / 8 * 8;
    float8 m8 = (float8)(-INFINITY);
    for (int v = 0; v < V8; v += 8) m8 = fmax(m8, ACT_LD8(l + v));
    float mx = fmax(fmax(fmax(m8.s0, m8.s1), fmax(m8.s2, m8.s3)),
                    fmax(fmax(m8.s4, m8.s5), fmax(m8.s6, m8.s7)));
    for (int v = V8; v < V; v++) mx = fmax(mx, ACT_LD(l, v));
    float8 s8 = (float8)(0.0f);
    for (int v = 0; v < V8; v += 8) s8 += exp(ACT_LD8(l + v) - mx);
    float s = ((s8.s0 + s8.s1) + (s8.s2 + s8.s3)) + ((s8.s4 + s8.s5) + (s8.s6 + s8.s7));
    for (int v = V8; v < V; v++) s += exp(ACT_LD(l, v) - mx);
    float z = mx + log(s);
    int tg = targets[targets_off + r];
    lse[lse_off + r] = z;
    losses[losses_off + r] = (tg >= 0 && tg < V) ? z - ACT_LD(l, tg) : NAN;
}

/* buf (N,Vp): logits in, d loss / d logits out, in place: (softmax - onehot) * dloss for v < V,
 * 0 for the padding. 2-D range: dimension 0 the column, dimension 1 the row. */
__kernel void crossentropy_backward_inplace(__global act_t *buf, ulong buf_off,
                                            __global const float *lse, ulong lse_off,
                                            __global const int *targets, ulong targets_off, int N,
                                            int V, int Vp, float dloss) {
    int v = (int)get_global_id(0);
    size_t r = get_global_id(1);
    if (v >= Vp || r >= (size_t)N) return;
    size_t i = buf_off + r * (size_t)Vp + (size_t)v;
    float g = 0.0f;
    if (v < V) {
        float p = exp(ACT_LD(buf, i) - lse[lse_off + r]);
        g = (p - (v == targets[targets_off + r] ? 1.0f : 0.0f)) * dloss;
    }
    ACT_ST(buf, i, g);
}

/* out[0] = mean of inp[0..N) */
__kernel void mean_forward(__global float *out, ulong out_off, __global const float *inp,
                           ulong inp_off, int N) {
    if (get_global_id(0) != 0) return;
    float s = 0.0f;
    for (int i = 0; i < N; i++) s += inp[inp_off + i];
    out[out_off] = s / (float)N;
}

/* ---- a work-group per row (GPUs): the same cross-entropy, the row's max and sum of
 * exponentials reduced by a fixed tree in local memory (deterministic for a given group size). */
__kernel void crossentropy_forward_rows(__global float *losses, ulong losses_off,
                                        __global float *lse, ulong lse_off,
                                        __global const act_t *logits, ulong logits_off,
                                        __global const int *targets, ulong targets_off, int N,
                                        int V, int Vp) {
    __local float buf[256];
    size_t r = get_group_id(0); /* launched with exactly N groups: no early return before the
                                   barriers (every item of a group must reach each one) */
    int lid = (int)get_local_id(0), n = (int)get_local_size(0);
    __global const act_t *l = logits + logits_off + r * (size_t)Vp;
    float mx = -INFINITY;
    for (int v = lid; v < V; v += n) mx = fmax(mx, ACT_LD(l, v));
    buf[lid] = mx;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = n / 2; s > 0; s >>= 1) {
        if (lid < s) buf[lid] = fmax(buf[lid], buf[lid + s]);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    mx = buf[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    float s = 0.0f;
    for (int v = lid; v < V; v += n) s += exp(ACT_LD(l, v) - mx);
    buf[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = n / 2; k > 0; k >>= 1) {
        if (lid < k) buf[lid] += buf[lid + k];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        float z = mx + log(buf[0]);
        int tg = targets[targets_off + r];
        lse[lse_off + r] = z;
        losses[losses_off + r] = (tg >= 0 && tg < V) ? z - ACT_LD(l, tg) : NAN;
    }
}
