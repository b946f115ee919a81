/* loss.cl - softmax cross-entropy over the real vocabulary V of padded logits (N,Vp), and the
 * mean of per-token losses (one work-item, fixed order, so the loss is deterministic). */

/* losses[r] = logsumexp(logits[r, :V]) - logits[r, target[r]]; lse[r] saved for backward.
 * A target outside [0, V) gives NaN (the host validates targets before upload). One work-item per
 * row; the row loops use float8 so CPU compilers emit SIMD (fixed order: deterministic). */
__kernel void crossentropy_forward(__global float *losses, ulong losses_off, __global float *lse,
                                   ulong lse_off, __global const float *logits, ulong logits_off,
                                   __global const int *targets, ulong targets_off, int N, int V,
                                   int Vp) {
    size_t r = get_global_id(0);
    if (r >= (size_t)N) return;
    __global const float *l = logits + logits_off + r * (size_t)Vp;
    int V8 = V / 8 * 8;
    float8 m8 = (float8)(-INFINITY);
    for (int v = 0; v < V8; v += 8) m8 = fmax(m8, vload8(0, l + v));
    float mx = fmax(fmax(fmax(m8.s0, m8.s1), fmax(m8.s2, m8.s3)),
                    fmax(fmax(m8.s4, m8.s5), fmax(m8.s6, m8.s7)));
    for (int v = V8; v < V; v++) mx = fmax(mx, l[v]);
    float8 s8 = (float8)(0.0f);
    for (int v = 0; v < V8; v += 8) s8 += exp(vload8(0, l + v) - mx);
    float s = ((s8.s0 + s8.s1) + (s8.s2 + s8.s3)) + ((s8.s4 + s8.s5) + (s8.s6 + s8.s7));
    for (int v = V8; v < V; v++) s += exp(l[v] - mx);
    float z = mx + log(s);
    int tg = targets[targets_off + r];
    lse[lse_off + r] = z;
    losses[losses_off + r] = (tg >= 0 && tg < V) ? z - l[tg] : NAN;
}

/* buf (N,Vp): logits in, d loss / d logits out, in place: (softmax - onehot) * dloss for v < V,
 * 0 for the padding. 2-D range: dimension 0 the column, dimension 1 the row. */
__kernel void crossentropy_backward_inplace(__global float *buf, ulong buf_off,
                                            __global const float *lse, ulong lse_off,
                                            __global const int *targets, ulong targets_off, int N,
                                            int V, int Vp, float dloss) {
    int v = (int)get_global_id(0);
    size_t r = get_global_id(1);
    if (v >= Vp || r >= (size_t)N) return;
    size_t i = buf_off + r * (size_t)Vp + (size_t)v;
    float g = 0.0f;
    if (v < V) {
        float p = exp(buf[i] - lse[lse_off + r]);
        g = (p - (v == targets[targets_off + r] ? 1.0f : 0.0f)) * dloss;
    }
    buf[i] = g;
}

/* out[0] = mean of inp[0..N) */
__kernel void mean_forward(__global float *out, ulong out_off, __global const float *inp,
                           ulong inp_off, int N) {
    if (get_global_id(0) != 0) return;
    float s = 0.0f;
    for (int i = 0; i < N; i++) s += inp[inp_off + i];
    out[out_off] = s / (float)N;
}
