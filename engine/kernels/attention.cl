/* attention.cl - the non-GEMM parts of causal multi-head attention.
 * Layouts: qkv (B,T,3,NH,hs) as the QKV projection writes it; "heads" (3,B,NH,T,hs) so each
 * (b,h) matrix is contiguous for the strided batched GEMMs; y (B,NH,T,hs) <-> (B,T,NH,hs).
 * The scores att (B,NH,T,T) are softmax-ed in place, with the scale and the causal mask folded in;
 * masked entries are written as exact zeros so the P.V GEMM may read whole rows. */

/* The four layout changes run on a 2-D range: dimension 0 the channel c = h*hs + d in [0, C),
 * dimension 1 the position bt = b*T + t in [0, B*T); 32-bit index math (the host checks sizes). */

/* heads (3,B,NH,T,hs) <- qkv (B,T,3C) */
__kernel void qkv_to_heads(__global float *heads, ulong heads_off, __global const float *qkv,
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
__kernel void heads_to_qkv(__global float *qkv, ulong qkv_off, __global const float *heads,
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
__kernel void heads_to_seq(__global float *out, ulong out_off, __global const float *y,
                           ulong y_off, int B, int T, int NH, int hs) {
    uint c = (uint)get_global_id(0), bt = (uint)get_global_id(1);
    uint C = (uint)(NH * hs);
    if (c >= C || bt >= (uint)(B * T)) return;
    uint h = c / (uint)hs, d = c - h * (uint)hs, b = bt / (uint)T, t = bt - b * (uint)T;
    out[out_off + (size_t)bt * C + c] = y[y_off + (((size_t)b * NH + h) * T + t) * hs + d];
}

/* y (B,NH,T,hs) <- out (B,T,NH,hs) */
__kernel void seq_to_heads(__global float *y, ulong y_off, __global const float *out,
                           ulong out_off, int B, int T, int NH, int hs) {
    uint c = (uint)get_global_id(0), bt = (uint)get_global_id(1);
    uint C = (uint)(NH * hs);
    if (c >= C || bt >= (uint)(B * T)) return;
    uint h = c / (uint)hs, d = c - h * (uint)hs, b = bt / (uint)T, t = bt - b * (uint)T;
    y[y_off + (((size_t)b * NH + h) * T + t) * hs + d] = out[out_off + (size_t)bt * C + c];
}

/* att row r = (b,h,t): softmax over t2 <= t of scale*att, zeros for t2 > t; in place. */
__kernel void softmax_causal_forward(__global float *att, ulong att_off, int rows, int T,
                                     float scale) {
    size_t r = get_global_id(0);
    if (r >= (size_t)rows) return;
    int t = (int)(r % (size_t)T);
    __global float *a = att + att_off + r * T;
    float mx = -INFINITY;
    for (int j = 0; j <= t; j++) mx = fmax(mx, scale * a[j]);
    float s = 0.0f;
    for (int j = 0; j <= t; j++) {
        float e = exp(scale * a[j] - mx);
        a[j] = e;
        s += e;
    }
    float inv = 1.0f / s;
    for (int j = 0; j <= t; j++) a[j] *= inv;
    for (int j = t + 1; j < T; j++) a[j] = 0.0f;
}

/* datt row (b,h,t) becomes d loss / d (q.k) in place: scale * att * (datt - sum(att*datt)). */
__kernel void softmax_causal_backward(__global float *datt, ulong datt_off,
                                      __global const float *att, ulong att_off, int rows, int T,
                                      float scale) {
    size_t r = get_global_id(0);
    if (r >= (size_t)rows) return;
    int t = (int)(r % (size_t)T);
    __global float *da = datt + datt_off + r * T;
    __global const float *a = att + att_off + r * T;
    float dot = 0.0f;
    for (int j = 0; j <= t; j++) dot += a[j] * da[j];
    for (int j = 0; j <= t; j++) da[j] = scale * a[j] * (da[j] - dot);
    for (int j = t + 1; j < T; j++) da[j] = 0.0f;
}

/* Each (T,T) matrix of buf (BNH of them) transposed in place; 2-D range (column c, row
 * bh*T + r): the work-item above the diagonal (c > r) swaps its element with its mirror, the others
 * do nothing, so every pair is swapped once. */
__kernel void transpose_square_inplace(__global float *buf, ulong off, int BNH, int T) {
    uint c = (uint)get_global_id(0), row = (uint)get_global_id(1);
    if (c >= (uint)T || row >= (uint)(BNH * T)) return;
    uint bh = row / (uint)T, r = row - bh * (uint)T;
    if (c <= r) return;
    size_t base = off + (size_t)bh * T * T;
    size_t up = base + (size_t)r * T + c, lo = base + (size_t)c * T + r;
    float x = buf[up];
    buf[up] = buf[lo];
    buf[lo] = x;
}
