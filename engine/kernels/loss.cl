/* loss.cl - softmax cross-entropy over the real vocabulary V of padded logits (N,Vp), and the
 * mean of per-token losses (one work-item, fixed order, so the loss is deterministic). */

/* losses[r] = logsumexp(logits[r, :V]) - logits[r, target[r]]; lse[r] saved for backward.
 * A target outside [0, V) gives NaN (the host validates targets before upload). */
__kernel void crossentropy_forward(__global float *losses, ulong losses_off, __global float *lse,
                                   ulong lse_off, __global const float *logits, ulong logits_off,
                                   __global const int *targets, ulong targets_off, int N, int V,
                                   int Vp) {
    size_t r = get_global_id(0);
    if (r >= (size_t)N) return;
    __global const float *l = logits + logits_off + r * (size_t)Vp;
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = fmax(mx, l[v]);
    float s = 0.0f;
    for (int v = 0; v < V; v++) s += exp(l[v] - mx);
    float z = mx + log(s);
    int tg = targets[targets_off + r];
    lse[lse_off + r] = z;
    losses[losses_off + r] = (tg >= 0 && tg < V) ? z - l[tg] : NAN;
}

/* buf (N,Vp): logits in, d loss / d logits out, in place: (softmax - onehot) * dloss for v < V,
 * 0 for the padding. */
__kernel void crossentropy_backward_inplace(__global float *buf, ulong buf_off,
                                            __global const float *lse, ulong lse_off,
                                            __global const int *targets, ulong targets_off, int N,
                                            int V, int Vp, float dloss) {
    size_t i = get_global_id(0);
    if (i >= (size_t)N * (size_t)Vp) return;
    size_t r = i / (size_t)Vp;
    int v = (int)(i % (size_t)Vp);
    float g = 0.0f;
    if (v < V) {
        float p = exp(buf[buf_off + i] - lse[lse_off + r]);
        g = (p - (v == targets[targets_off + r] ? 1.0f : 0.0f)) * dloss;
    }
    buf[buf_off + i] = g;
}

/* out[0] = mean of inp[0..N) */
__kernel void mean_forward(__global float *out, ulong out_off, __global const float *inp,
                           ulong inp_off, int N) {
    if (get_global_id(0) != 0) return;
    float s = 0.0f;
    for (int i = 0; i < N; i++) s += inp[inp_off + i];
    out[out_off] = s / (float)N;
}
