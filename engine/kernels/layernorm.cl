/* layernorm.cl - LayerNorm over the last dimension (eps 1e-5), forward and backward.
 * Forward saves the per-row mean and 1/std for the backward pass. One work-item per row for the
 * row passes, one per channel for the parameter-gradient reduction (deterministic order). */

__kernel void layernorm_forward(__global float *out, ulong out_off, __global float *mean,
                                ulong mean_off, __global float *rstd, ulong rstd_off,
                                __global const float *inp, ulong inp_off,
                                __global const float *w, ulong w_off, __global const float *b,
                                ulong b_off, int N, int C) {
    size_t r = get_global_id(0);
    if (r >= (size_t)N) return;
    __global const float *x = inp + inp_off + r * C;
    __global float *y = out + out_off + r * C;
    float m = 0.0f;
    for (int i = 0; i < C; i++) m += x[i];
    m /= (float)C;
    float v = 0.0f;
    for (int i = 0; i < C; i++) {
        float d = x[i] - m;
        v += d * d;
    }
    v /= (float)C;
    float s = 1.0f / sqrt(v + 1e-5f);
    for (int i = 0; i < C; i++) y[i] = (x[i] - m) * s * w[w_off + i] + b[b_off + i];
    mean[mean_off + r] = m;
    rstd[rstd_off + r] = s;
}

/* dinp (N,C) = (accumulate ? dinp : 0) + d LayerNorm / d inp . dout */
__kernel void layernorm_backward_dinp(__global float *dinp, ulong dinp_off,
                                      __global const float *dout, ulong dout_off,
                                      __global const float *inp, ulong inp_off,
                                      __global const float *w, ulong w_off,
                                      __global const float *mean, ulong mean_off,
                                      __global const float *rstd, ulong rstd_off, int N, int C,
                                      int accumulate) {
    size_t r = get_global_id(0);
    if (r >= (size_t)N) return;
    __global const float *x = inp + inp_off + r * C;
    __global const float *dy = dout + dout_off + r * C;
    __global float *dx = dinp + dinp_off + r * C;
    float m = mean[mean_off + r], s = rstd[rstd_off + r];
    float dmean = 0.0f, dnmean = 0.0f;
    for (int i = 0; i < C; i++) {
        float n = (x[i] - m) * s;
        float dn = w[w_off + i] * dy[i];
        dmean += dn;
        dnmean += dn * n;
    }
    dmean /= (float)C;
    dnmean /= (float)C;
    for (int i = 0; i < C; i++) {
        float n = (x[i] - m) * s;
        float dn = w[w_off + i] * dy[i];
        float g = s * (dn - dmean - n * dnmean);
        dx[i] = accumulate ? dx[i] + g : g;
    }
}

/* dw (C) += sum_r dout*norm, db (C) += sum_r dout; one work-item per channel. */
__kernel void layernorm_backward_dparams(__global float *dw, ulong dw_off, __global float *db,
                                         ulong db_off, __global const float *dout, ulong dout_off,
                                         __global const float *inp, ulong inp_off,
                                         __global const float *mean, ulong mean_off,
                                         __global const float *rstd, ulong rstd_off, int N,
                                         int C) {
    size_t c = get_global_id(0);
    if (c >= (size_t)C) return;
    float sw = 0.0f, sb = 0.0f;
    for (int r = 0; r < N; r++) {
        float dy = dout[dout_off + (size_t)r * C + c];
        float n = (inp[inp_off + (size_t)r * C + c] - mean[mean_off + r]) * rstd[rstd_off + r];
        sw += dy * n;
        sb += dy;
    }
    dw[dw_off + c] += sw;
    db[db_off + c] += sb;
}
