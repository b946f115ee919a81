/* layernorm.cl - LayerNorm over the last dimension (eps 1e-5), forward and backward.
 * Forward saves the per-row mean and 1/std for the backward pass. One work-item per row for the
 * row passes, one per channel for the parameter-gradient reduction (deterministic order).
 * Storage (store.clh): out, inp, w, b, dinp, dout are act_t; mean, rstd (statistics) and dw, db
 * (parameter gradients) fp32; every sum in fp32. */
#include "bf16.clh"
#include "store.clh"

__kernel void layernorm_forward(__global act_t *out, ulong out_off, __global float *mean,
                                ulong mean_off, __global float *rstd, ulong rstd_off,
                                __global const act_t *inp, ulong inp_off,
                                __global const act_t *w, ulong w_off, __global const act_t *b,
                                ulong b_off, int N, int C) {
    size_t r = get_global_id(0);
    if (r >= (size_t)N) return;
    __global const act_t *x = inp + inp_off + r * C;
    __global act_t *y = out + out_off + r * C;
    float m = 0.0f;
    for (int i = 0; i < C; i++) m += ACT_LD(x, i);
    m /= (float)C;
    float v = 0.0f;
    for (int i = 0; i < C; i++) {
        float d = ACT_LD(x, i) - m;
        v += d * d;
    }
    v /= (float)C;
    float s = 1.0f / sqrt(v + 1e-5f);
    for (int i = 0; i < C; i++) ACT_ST(y, i, (ACT_LD(x, i) - m) * s * ACT_LD(w, w_off + i) + ACT_LD(b, b_off + i));
    mean[mean_off + r] = m;
    rstd[rstd_off + r] = s;
}

/* dinp (N,C) = (accumulate ? dinp : 0) + d LayerNorm / d inp . dout */
__kernel void layernorm_backward_dinp(__global act_t *dinp, ulong dinp_off,
                                      __global const act_t *dout, ulong dout_off,
                                      __global const act_t *inp, ulong inp_off,
                                      __global const act_t *w, ulong w_off,
                                      __global const float *mean, ulong mean_off,
                                      __global const float *rstd, ulong rstd_off, int N, int C,
                                      int accumulate) {
    size_t r = get_global_id(0);
    if (r >= (size_t)N) return;
    __global const act_t *x = inp + inp_off + r * C;
    __global const act_t *dy = dout + dout_off + r * C;
    __global act_t *dx = dinp + dinp_off + r * C;
    float m = mean[mean_off + r], s = rstd[rstd_off + r];
    float dmean = 0.0f, dnmean = 0.0f;
    for (int i = 0; i < C; i++) {
        float n = (ACT_LD(x, i) - m) * s;
        float dn = ACT_LD(w, w_off + i) * ACT_LD(dy, i);
        dmean += dn;
        dnmean += dn * n;
    }
    dmean /= (float)C;
    dnmean /= (float)C;
    for (int i = 0; i < C; i++) {
        float n = (ACT_LD(x, i) - m) * s;
        float dn = ACT_LD(w, w_off + i) * ACT_LD(dy, i);
        float g = s * (dn - dmean - n * dnmean);
        ACT_ST(dx, i, accumulate ? ACT_LD(dx, i) + g : g);
    }
}

/* dw (C) += sum_r dout*norm, db (C) += sum_r dout; one work-item per channel. */
__kernel void layernorm_backward_dparams(__global float *dw, ulong dw_off, __global float *db,
                                         ulong db_off, __global const act_t *dout, ulong dout_off,
                                         __global const act_t *inp, ulong inp_off,
                                         __global const float *mean, ulong mean_off,
                                         __global const float *rstd, ulong rstd_off, int N,
                                         int C) {
    size_t c = get_global_id(0);
    if (c >= (size_t)C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int r = 0; r < N; r++) {
        float dy = ACT_LD(dout, dout_off + (size_t)r * C + c);
        float n = (ACT_LD(inp, inp_off + (size_t)r * C + c) - mean[mean_off + r]) * rstd[rstd_off + r];
        sw += dy * n;
        sb += dy;
    }
    dw[dw_off + c] += sw;
    db[db_off + c] += sb;
}

/* ---- a work-group per row (devices with many threads: GPUs). The group's size is a power of two
 * <= 256; each item walks the row with stride = the group size (coalesced), and sums are reduced
 * by a fixed tree in local memory, so the result is deterministic for a given group size. */

/* The sum of v over the work-group, returned to every item; buf holds get_local_size(0) floats. */
float ct_group_sum(float v, __local float *buf) {
    int lid = (int)get_local_id(0), n = (int)get_local_size(0);
    buf[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = n / 2; s > 0; s >>= 1) {
        if (lid < s) buf[lid] += buf[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = buf[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

__kernel void layernorm_forward_rows(__global act_t *out, ulong out_off, __global float *mean,
                                     ulong mean_off, __global float *rstd, ulong rstd_off,
                                     __global const act_t *inp, ulong inp_off,
                                     __global const act_t *w, ulong w_off, __global const act_t *b,
                                     ulong b_off, int N, int C) {
    __local float buf[256];
    size_t r = get_group_id(0);
    int lid = (int)get_local_id(0), n = (int)get_local_size(0);
    __global const act_t *x = inp + inp_off + r * C;
    __global act_t *y = out + out_off + r * C;
    float s = 0.0f;
    for (int i = lid; i < C; i += n) s += ACT_LD(x, i);
    float m = ct_group_sum(s, buf) / (float)C;
    float v = 0.0f;
    for (int i = lid; i < C; i += n) {
        float d = ACT_LD(x, i) - m;
        v += d * d;
    }
    float rs = 1.0f / sqrt(ct_group_sum(v, buf) / (float)C + 1e-5f);
    for (int i = lid; i < C; i += n) ACT_ST(y, i, (ACT_LD(x, i) - m) * rs * ACT_LD(w, w_off + i) + ACT_LD(b, b_off + i));
    if (lid == 0) {
        mean[mean_off + r] = m;
        rstd[rstd_off + r] = rs;
    }
}

__kernel void layernorm_backward_dinp_rows(__global act_t *dinp, ulong dinp_off,
                                           __global const act_t *dout, ulong dout_off,
                                           __global const act_t *inp, ulong inp_off,
                                           __global const act_t *w, ulong w_off,
                                           __global const float *mean, ulong mean_off,
                                           __global const float *rstd, ulong rstd_off, int N,
                                           int C, int accumulate) {
    __local float buf[256];
    size_t r = get_group_id(0); /* launched with exactly N groups: no early return before the
                                   barriers (every item of a group must reach each one) */
    int lid = (int)get_local_id(0), n = (int)get_local_size(0);
    __global const act_t *x = inp + inp_off + r * C;
    __global const act_t *dy = dout + dout_off + r * C;
    __global act_t *dx = dinp + dinp_off + r * C;
    float m = mean[mean_off + r], s = rstd[rstd_off + r];
    float a = 0.0f, c = 0.0f;
    for (int i = lid; i < C; i += n) {
        float dn = ACT_LD(w, w_off + i) * ACT_LD(dy, i);
        a += dn;
        c += dn * (ACT_LD(x, i) - m) * s;
    }
    float dmean = ct_group_sum(a, buf) / (float)C;
    float dnmean = ct_group_sum(c, buf) / (float)C;
    for (int i = lid; i < C; i += n) {
        float nn = (ACT_LD(x, i) - m) * s;
        float g = s * (ACT_LD(w, w_off + i) * ACT_LD(dy, i) - dmean - nn * dnmean);
        ACT_ST(dx, i, accumulate ? ACT_LD(dx, i) + g : g);
    }
}

/* dw (C) += sum_r dout*norm, db (C) += sum_r dout with work-groups of 32 channels x 8 row lanes
 * (exactly 256 items): lane k sums rows k, k + 8, ...; consecutive items take consecutive
 * channels (coalesced reads); the 8 lanes of a channel are added in lane order. */
__kernel void layernorm_backward_dparams_groups(__global float *dw, ulong dw_off,
                                                __global float *db, ulong db_off,
                                                __global const act_t *dout, ulong dout_off,
                                                __global const act_t *inp, ulong inp_off,
                                                __global const float *mean, ulong mean_off,
                                                __global const float *rstd, ulong rstd_off,
                                                int N, int C) {
    __local float pw[8][32], pb[8][32];
    int lid = (int)get_local_id(0), ch = lid % 32, lane = lid / 32;
    size_t c = get_group_id(0) * 32 + (size_t)ch;
    float sw = 0.0f, sb = 0.0f;
    if (c < (size_t)C)
        for (size_t r = (size_t)lane; r < (size_t)N; r += 8) {
            float dy = ACT_LD(dout, dout_off + r * C + c);
            float nn = (ACT_LD(inp, inp_off + r * C + c) - mean[mean_off + r]) * rstd[rstd_off + r];
            sw += dy * nn;
            sb += dy;
        }
    pw[lane][ch] = sw;
    pb[lane][ch] = sb;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lane == 0 && c < (size_t)C) {
        float tw = 0.0f, tb = 0.0f;
        for (int k = 0; k < 8; k++) {
            tw += pw[k][ch];
            tb += pb[k][ch];
        }
        dw[dw_off + c] += tw;
        db[db_off + c] += tb;
    }
}
