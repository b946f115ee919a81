/* optim.cl - gradient global norm (partial sums of squares, then one finishing work-item),
 * clip-scaling and AdamW. The clip multiplier is computed on the device from the norm, so an
 * optimizer step needs no host round trip. */

/* partials[i] = sum of x[j]^2 over the i-th contiguous chunk of `chunk` elements (a multiple
 * of 8); P = global size work-items cover n. float8 accumulators, fixed order. */
__kernel void sumsq_partial(__global float *partials, ulong p_off, __global const float *x,
                            ulong x_off, ulong n, ulong chunk) {
    size_t i = get_global_id(0);
    size_t j0 = i * chunk, j1 = j0 + chunk;
    if (j1 > n) j1 = n;
    if (j0 > n) j0 = n;
    __global const float *p = x + x_off;
    float8 s8 = (float8)(0.0f);
    size_t j = j0;
    for (; j + 8 <= j1; j += 8) {
        float8 g = vload8(0, p + j);
        s8 += g * g;
    }
    float s = ((s8.s0 + s8.s1) + (s8.s2 + s8.s3)) + ((s8.s4 + s8.s5) + (s8.s6 + s8.s7));
    for (; j < j1; j++) s += p[j] * p[j];
    partials[p_off + i] = s;
}

/* out[0] = sqrt(sum of the partials) */
__kernel void norm_finalize(__global float *out, ulong out_off, __global const float *partials,
                            ulong p_off, int P) {
    if (get_global_id(0) != 0) return;
    float s = 0.0f;
    for (int i = 0; i < P; i++) s += partials[p_off + i];
    out[out_off] = sqrt(s);
}

/* The clip multiplier, as PyTorch's clip_grad_norm_: min(1, clip / (norm + 1e-6)); 1 when
 * clip <= 0 or no norm is given. */
float clip_scale(__global const float *norm, ulong norm_off, float clip) {
    if (!norm || !(clip > 0.0f)) return 1.0f;
    float c = clip / (norm[norm_off] + 1e-6f);
    return c < 1.0f ? c : 1.0f;
}

/* x *= clip_scale(norm, clip) */
__kernel void scale_by_clip(__global float *x, ulong x_off, __global const float *norm,
                            ulong norm_off, float clip, ulong n) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    x[x_off + i] *= clip_scale(norm, norm_off, clip);
}

/* AdamW with bias correction and decoupled weight decay; g = grad * clip_scale(norm, clip). */
__kernel void adamw_update(__global float *p, ulong p_off, __global const float *grad,
                           ulong g_off, __global float *m, ulong m_off, __global float *v,
                           ulong v_off, __global const float *norm, ulong norm_off, float clip,
                           ulong n, float lr, float b1, float b2, float eps, float wd, float bc1,
                           float bc2) {
    size_t i = get_global_id(0);
    if (i >= n) return;
    float g = grad[g_off + i] * clip_scale(norm, norm_off, clip);
    float mi = b1 * m[m_off + i] + (1.0f - b1) * g;
    float vi = b2 * v[v_off + i] + (1.0f - b2) * g * g;
    m[m_off + i] = mi;
    v[v_off + i] = vi;
    float mh = mi / bc1, vh = vi / bc2;
    float w = p[p_off + i];
    p[p_off + i] = w - lr * (mh / (sqrt(vh) + eps) + wd * w);
}

/* ---- work-group versions (GPUs): group i sums chunk i of x with its items striding through it
 * (coalesced), reduced by a fixed tree in local memory; the finish is one group. */
__kernel void sumsq_partial_groups(__global float *partials, ulong p_off, __global const float *x,
                                   ulong x_off, ulong n, ulong chunk) {
    __local float buf[256];
    size_t i = get_group_id(0);
    int lid = (int)get_local_id(0), ls = (int)get_local_size(0);
    size_t j0 = i * chunk, j1 = j0 + chunk;
    if (j1 > n) j1 = n;
    if (j0 > n) j0 = n;
    __global const float *p = x + x_off;
    float s = 0.0f;
    for (size_t j = j0 + (size_t)lid; j < j1; j += (size_t)ls) s += p[j] * p[j];
    buf[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = ls / 2; k > 0; k >>= 1) {
        if (lid < k) buf[lid] += buf[lid + k];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) partials[p_off + i] = buf[0];
}

__kernel void norm_finalize_group(__global float *out, ulong out_off,
                                  __global const float *partials, ulong p_off, int P) {
    __local float buf[256];
    int lid = (int)get_local_id(0), ls = (int)get_local_size(0);
    float s = 0.0f;
    for (int i = lid; i < P; i += ls) s += partials[p_off + i];
    buf[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int k = ls / 2; k > 0; k >>= 1) {
        if (lid < k) buf[lid] += buf[lid + k];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) out[out_off] = sqrt(buf[0]);
}
