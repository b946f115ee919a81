/* moe.cl - the mixture-of-experts layer's routing and token movement (engine/moe.c): the router's
 * softmax and top-k, the per-row capacity assignment, the gather of kept choices into
 * expert-major order, the weighted combine, and their backwards. Index tensors are int32 kept in
 * the float arena. Every output has one writer and a fixed summation order (bitwise
 * reproducible); a choice is (token n, rank k), stored at n * K + k.
 * Storage (store.clh): the router's logits and their gradient, the tokens moved (x, xs, ys, y)
 * and their gradients are act_t; p, gate, dgate and pmean fp32 (routing statistics); every sum
 * in fp32. */
#include "bf16.clh"
#include "store.clh"

/* Per token n: p = softmax(logits) over E in fp32 (max subtracted), then the K largest in
 * descending order, equal values taking the lower expert first: idx, gate = p[idx]. */
__kernel void moe_route(__global float *p, ulong p_off, __global int *idx, ulong idx_off,
                        __global float *gate, ulong gate_off, __global const act_t *logits,
                        ulong lg_off, int N, int E, int K) {
    int n = (int)get_global_id(0);
    if (n >= N) return;
    __global const act_t *l = logits + lg_off + (size_t)n * E;
    __global float *pr = p + p_off + (size_t)n * E;
    float mx = ACT_LD(l, 0);
    for (int e = 1; e < E; e++) mx = fmax(mx, ACT_LD(l, e));
    float s = 0.0f;
    for (int e = 0; e < E; e++) s += exp(ACT_LD(l, e) - mx);
    float inv = 1.0f / s;
    for (int e = 0; e < E; e++) pr[e] = exp(ACT_LD(l, e) - mx) * inv;
    __global int *ix = idx + idx_off + (size_t)n * K;
    __global float *g = gate + gate_off + (size_t)n * K;
    for (int k = 0; k < K; k++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int j = 0; j < k; j++) taken |= ix[j] == e;
            if (!taken && (best < 0 || pr[e] > pr[best])) best = e;
        }
        ix[k] = best;
        g[k] = pr[best];
    }
}

/* One work-item per (row b, expert e): the row's choices of e in slot order (all rank-0 choices
 * in t order, then rank 1, ...); the first `cap` get slots 0.., the rest are dropped (-1).
 * kept = slots given, routed = choices of e before dropping. */
__kernel void moe_capacity(__global int *slot, ulong slot_off, __global int *kept, ulong kept_off,
                           __global int *routed, ulong routed_off, __global const int *idx,
                           ulong idx_off, int B, int T, int E, int K, int cap) {
    int g = (int)get_global_id(0);
    if (g >= B * E) return;
    int b = g / E, e = g % E, c = 0, r = 0;
    for (int k = 0; k < K; k++)
        for (int t = 0; t < T; t++) {
            size_t i = ((size_t)b * T + t) * K + k;
            if (idx[idx_off + i] != e) continue;
            r++;
            slot[slot_off + i] = c < cap ? c++ : -1;
        }
    kept[kept_off + g] = c;
    routed[routed_off + g] = r;
}

/* The first row of (row b, expert e)'s kept choices in expert-major order (expert, row, slot):
 * a prefix over experts, then rows. One work-item (B * E is small). */
__kernel void moe_offsets(__global int *off, ulong off_off, __global const int *kept,
                          ulong kept_off, int B, int E) {
    if (get_global_id(0) != 0) return;
    int run = 0;
    for (int e = 0; e < E; e++)
        for (int b = 0; b < B; b++) {
            off[off_off + (size_t)b * E + e] = run;
            run += kept[kept_off + (size_t)b * E + e];
        }
}

/* pmean (B,E) = the mean over the row's T tokens of p. */
__kernel void moe_prob_mean(__global float *pm, ulong pm_off, __global const float *p, ulong p_off,
                            int B, int T, int E) {
    int g = (int)get_global_id(0);
    if (g >= B * E) return;
    int b = g / E, e = g % E;
    float s = 0.0f;
    for (int t = 0; t < T; t++) s += p[p_off + ((size_t)b * T + t) * E + e];
    pm[pm_off + g] = s / (float)T;
}

/* 2-D (channel c, choice i): pos[i] = off[b, idx[i]] + slot[i] for a kept choice (-1 dropped), and
 * xs[pos, c] = x[n, c]. */
__kernel void moe_dispatch(__global act_t *xs, ulong xs_off, __global int *pos, ulong pos_off,
                           __global const act_t *x, ulong x_off, __global const int *idx,
                           ulong idx_off, __global const int *slot, ulong slot_off,
                           __global const int *off, ulong off_off, int NK, int T, int C, int E,
                           int K) {
    int c = (int)get_global_id(0);
    size_t i = get_global_id(1);
    if (c >= C || i >= (size_t)NK) return;
    size_t n = i / (size_t)K, b = n / (size_t)T;
    int s = slot[slot_off + i];
    int q = s < 0 ? -1 : off[off_off + b * E + idx[idx_off + i]] + s;
    if (c == 0) pos[pos_off + i] = q;
    if (q >= 0) xs[xs_off + (size_t)q * C + c] = x[x_off + n * C + c];
}

/* 2-D (c, token n): y[n, c] = sum over the kept choices k of gate * ys[pos, c], k in order. */
__kernel void moe_combine(__global act_t *y, ulong y_off, __global const act_t *ys, ulong ys_off,
                          __global const float *gate, ulong gate_off, __global const int *pos,
                          ulong pos_off, int N, int C, int K) {
    int c = (int)get_global_id(0);
    size_t n = get_global_id(1);
    if (c >= C || n >= (size_t)N) return;
    float s = 0.0f;
    for (int k = 0; k < K; k++) {
        int q = pos[pos_off + n * K + k];
        if (q >= 0) s += gate[gate_off + n * K + k] * ACT_LD(ys, ys_off + (size_t)q * C + c);
    }
    ACT_ST(y, y_off + n * C + c, s);
}

/* One work-item per choice: dgate = dot(dy[n], ys[pos]) for a kept choice, 0 for a dropped one. */
__kernel void moe_gate_backward(__global float *dgate, ulong dg_off, __global const act_t *dy,
                                ulong dy_off, __global const act_t *ys, ulong ys_off,
                                __global const int *pos, ulong pos_off, int NK, int C, int K) {
    size_t i = get_global_id(0);
    if (i >= (size_t)NK) return;
    int q = pos[pos_off + i];
    float s = 0.0f;
    if (q >= 0) {
        size_t n = i / (size_t)K;
        for (int c = 0; c < C; c++)
            s += ACT_LD(dy, dy_off + n * C + c) * ACT_LD(ys, ys_off + (size_t)q * C + c);
    }
    dgate[dg_off + i] = s;
}

/* 2-D (c, choice i): dys[pos, c] = scale * gate * dy[n, c] for a kept choice. */
__kernel void moe_combine_backward(__global act_t *dys, ulong dys_off, __global const act_t *dy,
                                   ulong dy_off, __global const float *gate, ulong gate_off,
                                   __global const int *pos, ulong pos_off, int NK, int C, int K,
                                   float scale) {
    int c = (int)get_global_id(0);
    size_t i = get_global_id(1);
    if (c >= C || i >= (size_t)NK) return;
    int q = pos[pos_off + i];
    if (q >= 0)
        ACT_ST(dys, dys_off + (size_t)q * C + c,
               scale * gate[gate_off + i] * ACT_LD(dy, dy_off + (i / K) * C + c));
}

#ifdef CT_BF16
/* dp[e] of token n (row b), summed as the fp32 build sums it in place. */
static float moe_dp(int e, int b, int n, __global const int *idx, ulong idx_off,
                    __global const int *pos, ulong pos_off, __global const float *dgate,
                    ulong dg_off, __global const int *routed, ulong routed_off, float aux, int E,
                    int K) {
    float v = aux * (float)routed[routed_off + (size_t)b * E + e];
    for (int k = 0; k < K; k++) {
        size_t i = (size_t)n * K + k;
        if (pos[pos_off + i] >= 0 && idx[idx_off + i] == e) v += dgate[dg_off + i];
    }
    return v;
}
#endif

/* Per token: dp[e] = aux * routed[b, e] + the dgate of each kept choice of e; then the softmax
 * backward dlogits = p * (dp - sum_e p dp). The fp32 build keeps dp in dlogits; the bf16 one
 * recomputes dp (the same operations in the same order) rather than round it there. */
__kernel void moe_router_backward(__global act_t *dl, ulong dl_off, __global const float *p,
                                  ulong p_off, __global const int *idx, ulong idx_off,
                                  __global const int *pos, ulong pos_off,
                                  __global const float *dgate, ulong dg_off,
                                  __global const int *routed, ulong routed_off, float aux, int N,
                                  int T, int E, int K) {
    int n = (int)get_global_id(0);
    if (n >= N) return;
    int b = n / T;
    __global const float *pr = p + p_off + (size_t)n * E;
    __global act_t *d = dl + dl_off + (size_t)n * E;
#ifdef CT_BF16
    float s = 0.0f;
    for (int e = 0; e < E; e++) s += pr[e] * moe_dp(e, b, n, idx, idx_off, pos, pos_off, dgate,
                                                    dg_off, routed, routed_off, aux, E, K);
    for (int e = 0; e < E; e++)
        ACT_ST(d, e, pr[e] * (moe_dp(e, b, n, idx, idx_off, pos, pos_off, dgate, dg_off, routed,
                                     routed_off, aux, E, K) - s));
#else
    for (int e = 0; e < E; e++) d[e] = aux * (float)routed[routed_off + (size_t)b * E + e];
    for (int k = 0; k < K; k++) {
        size_t i = (size_t)n * K + k;
        if (pos[pos_off + i] >= 0) d[idx[idx_off + i]] += dgate[dg_off + i];
    }
    float s = 0.0f;
    for (int e = 0; e < E; e++) s += pr[e] * d[e];
    for (int e = 0; e < E; e++) d[e] = pr[e] * (d[e] - s);
#endif
}

/* 2-D (c, token n): dx[n, c] = dxr[n, c] + unscale * the dxs rows of the token's kept choices
 * (k in order). */
__kernel void moe_dispatch_backward(__global act_t *dx, ulong dx_off, __global const act_t *dxr,
                                    ulong dxr_off, __global const act_t *dxs, ulong dxs_off,
                                    __global const int *pos, ulong pos_off, int N, int C, int K,
                                    float unscale) {
    int c = (int)get_global_id(0);
    size_t n = get_global_id(1);
    if (c >= C || n >= (size_t)N) return;
    float s = 0.0f;
    for (int k = 0; k < K; k++) {
        int q = pos[pos_off + n * K + k];
        if (q >= 0) s += ACT_LD(dxs, dxs_off + (size_t)q * C + c);
    }
    ACT_ST(dx, dx_off + n * C + c, ACT_LD(dxr, dxr_off + n * C + c) + unscale * s);
}
