/* attention.cl - the non-GEMM parts of causal multi-head attention.
 * Layouts: qkv (B,T,3,NH,hs) as the QKV projection writes it; "heads" (3,B,NH,T,hs) so each
 * (b,h) matrix is contiguous for the strided batched GEMMs; y (B,NH,T,hs) <-> (B,T,NH,hs).
 * The scores att (B,NH,T,T) are softmax-ed in place, with the scale and the causal mask folded in;
 * masked entries are written as exact zeros so the P.V GEMM may read whole rows.
 *
 * Storage (store.clh): the layout changes and the transpose move act_t elements (exact copies in
 * either storage). The in-place softmaxes are the fp32 path's. The bf16 path (-D CT_BF16) keeps P
 * and dS in bf16 but computes the scores and dP in fp32 in row blocks of scratch: the *_block
 * kernels read the block's fp32 rows and write the bf16 rows of att or datt, all sums in fp32. */
#include "bf16.clh"
#include "store.clh"

/* The four layout changes run on a 2-D range: dimension 0 the channel c = h*hs + d in [0, C),
 * dimension 1 the position bt = b*T + t in [0, B*T); 32-bit index math (the host checks sizes). */

/* heads (3,B,NH,T,hs) <- qkv (B,T,3C) */
__kernel void qkv_to_heads(__global act_t *heads, ulong heads_off, __global const act_t *qkv,
                           ulong qkv_off, int B, int T, int NH, int hs) {
    uint c = (uint)get_global_id(0), bt = (uint)get_global_id(1);
    uint C = (uint)(NH * hs);
    if (c >= C || bt >= (uint)(B * T)) return;
    uint h = c / (uint)hs, d = c - h * (uint)hs, b = bt / (uint)T, t = bt - b * (uint)T;
    for (uint s = 0; s < 3; s++)
        heads[heads_off + ((((size_t)s * B + b) * NH + h) * T + t) * hs + d] =
            qkv[qkv_off + ((size_t)bt * 3 + s) * C + c];
}

/* dqkv (B,T,3C) <- dheads (3,B,NH,T,hs) (overwrites) */
__kernel void heads_to_qkv(__global act_t *qkv, ulong qkv_off, __global const act_t *heads,
                           ulong heads_off, int B, int T, int NH, int hs) {
    uint c = (uint)get_global_id(0), bt = (uint)get_global_id(1);
    uint C = (uint)(NH * hs);
    if (c >= C || bt >= (uint)(B * T)) return;
    uint h = c / (uint)hs, d = c - h * (uint)hs, b = bt / (uint)T, t = bt - b * (uint)T;
    for (uint s = 0; s < 3; s++)
        qkv[qkv_off + ((size_t)bt * 3 + s) * C + c] =
            heads[heads_off + ((((size_t)s * B + b) * NH + h) * T + t) * hs + d];
}

/* out (B,T,NH,hs) <- y (B,NH,T,hs) */
__kernel void heads_to_seq(__global act_t *out, ulong out_off, __global const act_t *y,
                           ulong y_off, int B, int T, int NH, int hs) {
    uint c = (uint)get_global_id(0), bt = (uint)get_global_id(1);
    uint C = (uint)(NH * hs);
    if (c >= C || bt >= (uint)(B * T)) return;
    uint h = c / (uint)hs, d = c - h * (uint)hs, b = bt / (uint)T, t = bt - b * (uint)T;
    out[out_off + (size_t)bt * C + c] = y[y_off + (((size_t)b * NH + h) * T + t) * hs + d];
}

/* y (B,NH,T,hs) <- out (B,T,NH,hs) */
__kernel void seq_to_heads(__global act_t *y, ulong y_off, __global const act_t *out,
                           ulong out_off, int B, int T, int NH, int hs) {
    uint c = (uint)get_global_id(0), bt = (uint)get_global_id(1);
    uint C = (uint)(NH * hs);
    if (c >= C || bt >= (uint)(B * T)) return;
    uint h = c / (uint)hs, d = c - h * (uint)hs, b = bt / (uint)T, t = bt - b * (uint)T;
    y[y_off + (((size_t)b * NH + h) * T + t) * hs + d] = out[out_off + (size_t)bt * C + c];
}

/* The work-item-per-row softmaxes (CPU devices: a core walks a row) read and write the row in
 * float16 vectors, so a CPU's vector units compute 16 exponentials at once; sums are kept per lane
 * and added in a fixed order at the end (deterministic). */
#define SM_W 16

/* The max and the sum of a float16's lanes, in a fixed order. */
float sm_hmax(float16 v) {
    float8 a = fmax(v.lo, v.hi);
    float4 b = fmax(a.lo, a.hi);
    float2 c = fmax(b.lo, b.hi);
    return fmax(c.x, c.y);
}
float sm_hsum(float16 v) {
    float8 a = v.lo + v.hi;
    float4 b = a.lo + a.hi;
    float2 c = b.lo + b.hi;
    return c.x + c.y;
}

/* att row r = (b,h,t): softmax over t2 <= t of scale*att, zeros for t2 > t; in place. */
__kernel void softmax_causal_forward(__global float *att, ulong att_off, int rows, int T,
                                     float scale) {
    size_t r = get_global_id(0);
    if (r >= (size_t)rows) return;
    int t = (int)(r % (size_t)T), nv = (t + 1) / SM_W, j0 = nv * SM_W;
    __global float *a = att + att_off + r * T;
    float16 m16 = (float16)(-INFINITY);
    for (int i = 0; i < nv; i++) m16 = fmax(m16, scale * vload16(i, a));
    float mx = sm_hmax(m16);
    for (int j = j0; j <= t; j++) mx = fmax(mx, scale * a[j]);
    float16 s16 = (float16)(0.0f);
    for (int i = 0; i < nv; i++) {
        float16 e = exp(scale * vload16(i, a) - mx);
        vstore16(e, i, a);
        s16 += e;
    }
    float s = sm_hsum(s16);
    for (int j = j0; j <= t; j++) {
        float e = exp(scale * a[j] - mx);
        a[j] = e;
        s += e;
    }
    float inv = 1.0f / s;
    for (int i = 0; i < nv; i++) vstore16(vload16(i, a) * inv, i, a);
    for (int j = j0; j <= t; j++) a[j] *= inv;
    for (int j = t + 1; j < T; j++) a[j] = 0.0f;
}

/* datt row (b,h,t) becomes d loss / d (q.k) in place: scale * att * (datt - sum(att*datt)). */
__kernel void softmax_causal_backward(__global float *datt, ulong datt_off,
                                      __global const float *att, ulong att_off, int rows, int T,
                                      float scale) {
    size_t r = get_global_id(0);
    if (r >= (size_t)rows) return;
    int t = (int)(r % (size_t)T), nv = (t + 1) / SM_W, j0 = nv * SM_W;
    __global float *da = datt + datt_off + r * T;
    __global const float *a = att + att_off + r * T;
    float16 d16 = (float16)(0.0f);
    for (int i = 0; i < nv; i++) d16 += vload16(i, a) * vload16(i, da);
    float dot = sm_hsum(d16);
    for (int j = j0; j <= t; j++) dot += a[j] * da[j];
    for (int i = 0; i < nv; i++)
        vstore16(scale * vload16(i, a) * (vload16(i, da) - dot), i, da);
    for (int j = j0; j <= t; j++) da[j] = scale * a[j] * (da[j] - dot);
    for (int j = t + 1; j < T; j++) da[j] = 0.0f;
}

/* ---- the same two softmaxes with a work-group per row (devices where ct_device_row_groups holds:
 * GPUs, whose many threads a work-item per row leaves idle and whose loads it leaves uncoalesced).
 * Launched as one group per row (group size a power of two <= 256); each item walks the row at a
 * stride of the group's size and the max, sum and dot are reduced by a fixed tree in local
 * memory, so the result is deterministic for a given group size. The exponentials are the same
 * expressions as above; only the order of the sums differs. */

/* The max (is_max) or sum of v over the work-group, returned to every item; buf holds
 * get_local_size(0) floats. */
float att_group_reduce(float v, __local float *buf, int is_max) {
    int lid = (int)get_local_id(0), n = (int)get_local_size(0);
    buf[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = n / 2; s > 0; s >>= 1) {
        if (lid < s) buf[lid] = is_max ? fmax(buf[lid], buf[lid + s]) : buf[lid] + buf[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float r = buf[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}

__kernel void softmax_causal_forward_rows(__global float *att, ulong att_off, int rows, int T,
                                          float scale) {
    __local float buf[256];
    size_t r = get_group_id(0);
    int lid = (int)get_local_id(0), n = (int)get_local_size(0);
    int t = (int)(r % (size_t)T);
    __global float *a = att + att_off + r * T;
    float mx = -INFINITY;
    for (int j = lid; j <= t; j += n) mx = fmax(mx, scale * a[j]);
    mx = att_group_reduce(mx, buf, 1);
    float s = 0.0f;
    for (int j = lid; j <= t; j += n) {
        float e = exp(scale * a[j] - mx);
        a[j] = e;
        s += e;
    }
    float inv = 1.0f / att_group_reduce(s, buf, 0);
    for (int j = lid; j <= t; j += n) a[j] *= inv;
    for (int j = t + 1 + lid; j < T; j += n) a[j] = 0.0f;
}

__kernel void softmax_causal_backward_rows(__global float *datt, ulong datt_off,
                                           __global const float *att, ulong att_off, int rows,
                                           int T, float scale) {
    __local float buf[256];
    size_t r = get_group_id(0);
    int lid = (int)get_local_id(0), n = (int)get_local_size(0);
    int t = (int)(r % (size_t)T);
    __global float *da = datt + datt_off + r * T;
    __global const float *a = att + att_off + r * T;
    float dot = 0.0f;
    for (int j = lid; j <= t; j += n) dot += a[j] * da[j];
    dot = att_group_reduce(dot, buf, 0);
    for (int j = lid; j <= t; j += n) da[j] = scale * a[j] * (da[j] - dot);
    for (int j = t + 1 + lid; j < T; j += n) da[j] = 0.0f;
}

/* Each (T,T) matrix of buf (BNH of them) transposed in place; 2-D range (column c, row
 * bh*T + r): the work-item above the diagonal (c > r) swaps its element with its mirror, the others
 * do nothing, so every pair is swapped once. */
__kernel void transpose_square_inplace(__global act_t *buf, ulong off, int BNH, int T) {
    uint c = (uint)get_global_id(0), row = (uint)get_global_id(1);
    if (c >= (uint)T || row >= (uint)(BNH * T)) return;
    uint bh = row / (uint)T, r = row - bh * (uint)T;
    if (c <= r) return;
    size_t base = off + (size_t)bh * T * T;
    size_t up = base + (size_t)r * T + c, lo = base + (size_t)c * T + r;
    act_t x = buf[up];
    buf[up] = buf[lo];
    buf[lo] = x;
}

/* ---- the bf16 path's softmaxes over a block of rows [r0, r0 + R) of every (b,h): the fp32
 * scores (or dP) of local row lr of matrix bh at sc[bh * R * T + lr * T + j], j <= t = r0 + lr
 * (nothing else of the row is read). One work-item per row (rows = BNH * R, those with t >= T
 * idle); sums in fp32 in index order. */

/* att row (bh, t) = softmax over j <= t of scale * sc, zeros for j > t. */
__kernel void softmax_causal_block_forward(__global act_t *att, ulong att_off,
                                           __global const float *sc, ulong sc_off, int BNH, int T,
                                           int r0, int R, float scale) {
    size_t g = get_global_id(0);
    if (g >= (size_t)BNH * R) return;
    int bh = (int)(g / (size_t)R), lr = (int)(g % (size_t)R), t = r0 + lr;
    if (t >= T) return;
    __global const float *s = sc + sc_off + g * T;
    __global act_t *a = att + att_off + ((size_t)bh * T + t) * T;
    float mx = -INFINITY;
    for (int j = 0; j <= t; j++) mx = fmax(mx, scale * s[j]);
    float sum = 0.0f;
    for (int j = 0; j <= t; j++) sum += exp(scale * s[j] - mx);
    float inv = 1.0f / sum;
    for (int j = 0; j <= t; j++) ACT_ST(a, j, exp(scale * s[j] - mx) * inv);
    for (int j = t + 1; j < T; j++) ACT_ST(a, j, 0.0f);
}

/* datt row (bh, t) = d loss / d (q.k) = scale * P * (dP - sum_j P dP), from P (att) and the fp32
 * dP block; zeros for j > t. */
__kernel void softmax_causal_block_backward(__global act_t *datt, ulong datt_off,
                                            __global const act_t *att, ulong att_off,
                                            __global const float *dp, ulong dp_off, int BNH,
                                            int T, int r0, int R, float scale) {
    size_t g = get_global_id(0);
    if (g >= (size_t)BNH * R) return;
    int bh = (int)(g / (size_t)R), lr = (int)(g % (size_t)R), t = r0 + lr;
    if (t >= T) return;
    __global const float *d = dp + dp_off + g * T;
    size_t row = ((size_t)bh * T + t) * T;
    __global const act_t *a = att + att_off + row;
    __global act_t *da = datt + datt_off + row;
    float dot = 0.0f;
    for (int j = 0; j <= t; j++) dot += ACT_LD(a, j) * d[j];
    for (int j = 0; j <= t; j++) ACT_ST(da, j, scale * ACT_LD(a, j) * (d[j] - dot));
    for (int j = t + 1; j < T; j++) ACT_ST(da, j, 0.0f);
}
