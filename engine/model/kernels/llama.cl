/* llama.cl - the Llama family's ops that GPT-2 has not: RMSNorm, the rotary position embedding
 * (Hugging Face's rotate_half convention) and the SwiGLU gate. Statistics and rotations in fp32;
 * one work-item per row (RMSNorm), per (row, head, pair) (rotary) or per element (SwiGLU), and one
 * per channel for the norm weight's gradient (a fixed order of rows: deterministic).
 * Storage (store.clh): out, inp, w, dinp, dout, gate, up, the q|k|v tensors and wte are act_t;
 * rstd (statistics), dw and dwte (parameter gradients) fp32; every sum, rotation and
 * exponential in fp32 between a load and a store. */
#include "bf16.clh"
#include "store.clh"

/* out (N,C) = x / sqrt(mean(x^2) + eps) * w; rstd (N) = 1 / sqrt(mean(x^2) + eps) */
__kernel void rmsnorm_forward(__global act_t *out, ulong out_off, __global float *rstd,
                              ulong rstd_off, __global const act_t *inp, ulong inp_off,
                              __global const act_t *w, ulong w_off, int N, int C, float eps) {
    size_t r = get_global_id(0);
    if (r >= (size_t)N) return;
    __global const act_t *x = inp + inp_off + r * C;
    __global act_t *y = out + out_off + r * C;
    float ss = 0.0f;
    for (int i = 0; i < C; i++) ss += ACT_LD(x, i) * ACT_LD(x, i);
    float s = 1.0f / sqrt(ss / (float)C + eps);
    for (int i = 0; i < C; i++) ACT_ST(y, i, ACT_LD(x, i) * s * ACT_LD(w, w_off + i));
    rstd[rstd_off + r] = s;
}

/* dinp (N,C) = (accumulate ? dinp : 0) + s * w.dy - x s^3 / C * sum_j (w_j dy_j x_j) */
__kernel void rmsnorm_backward_dinp(__global act_t *dinp, ulong dinp_off,
                                    __global const act_t *dout, ulong dout_off,
                                    __global const act_t *inp, ulong inp_off,
                                    __global const act_t *w, ulong w_off,
                                    __global const float *rstd, ulong rstd_off, int N, int C,
                                    int accumulate) {
    size_t r = get_global_id(0);
    if (r >= (size_t)N) return;
    __global const act_t *x = inp + inp_off + r * C;
    __global const act_t *dy = dout + dout_off + r * C;
    __global act_t *dx = dinp + dinp_off + r * C;
    float s = rstd[rstd_off + r], dot = 0.0f;
    for (int i = 0; i < C; i++) dot += ACT_LD(w, w_off + i) * ACT_LD(dy, i) * ACT_LD(x, i);
    float k = s * s * s * dot / (float)C;
    for (int i = 0; i < C; i++) {
        float g = s * ACT_LD(w, w_off + i) * ACT_LD(dy, i) - k * ACT_LD(x, i);
        ACT_ST(dx, i, accumulate ? ACT_LD(dx, i) + g : g);
    }
}

/* dw (C) += sum_r dout * x * rstd; one work-item per channel */
__kernel void rmsnorm_backward_dweight(__global float *dw, ulong dw_off,
                                       __global const act_t *dout, ulong dout_off,
                                       __global const act_t *inp, ulong inp_off,
                                       __global const float *rstd, ulong rstd_off, int N, int C) {
    size_t c = get_global_id(0);
    if (c >= (size_t)C) return;
    float sw = 0.0f;
    for (int r = 0; r < N; r++)
        sw += ACT_LD(dout, dout_off + (size_t)r * C + c) * ACT_LD(inp, inp_off + (size_t)r * C + c) *
              rstd[rstd_off + r];
    dw[dw_off + c] += sw;
}

/* The rotary embedding of heads of size hd at positions t = row % T: the pair (j, j + hd/2) of a
 * head turned by the angle t * theta^(-2j/hd). dir 1: forward (out = R x), -1: backward (out =
 * R^T x, the gradient of the input). A head h of row r is at r * stride + h * hd; in place
 * (out == inp) is allowed: a work-item reads its pair before it writes it. */
__kernel void rope_apply(__global act_t *out, ulong out_off, __global const act_t *inp,
                         ulong inp_off, int N, int T, int nh, int hd, int stride, float theta,
                         int dir) {
    size_t gid = get_global_id(0);
    int hh = hd / 2; /* "half" is a type in OpenCL C */
    size_t per_row = (size_t)nh * hh;
    if (gid >= (size_t)N * per_row) return;
    size_t r = gid / per_row;
    int h = (int)(gid % per_row) / hh, j = (int)(gid % per_row) % hh;
    int t = (int)(r % (size_t)T);
    float inv = pow(theta, -2.0f * (float)j / (float)hd);
    float ang = (float)t * inv, c = cos(ang), s = (float)dir * sin(ang);
    size_t o = r * (size_t)stride + (size_t)h * hd + j;
    float a = ACT_LD(inp, inp_off + o), b = ACT_LD(inp, inp_off + o + hh);
    ACT_ST(out, out_off + o, a * c - b * s);
    ACT_ST(out, out_off + o + hh, b * c + a * s);
}

/* out = silu(gate) * up, silu(g) = g / (1 + exp(-g)) */
__kernel void swiglu_forward(__global act_t *out, ulong out_off, __global const act_t *gate,
                             ulong gate_off, __global const act_t *up, ulong up_off, int N) {
    size_t i = get_global_id(0);
    if (i >= (size_t)N) return;
    float g = ACT_LD(gate, gate_off + i), sg = 1.0f / (1.0f + exp(-g));
    ACT_ST(out, out_off + i, g * sg * ACT_LD(up, up_off + i));
}

/* dgate = dout * up * sigma(g) (1 + g (1 - sigma(g))), dup = dout * silu(g) (both overwritten) */
__kernel void swiglu_backward(__global act_t *dgate, ulong dgate_off, __global act_t *dup,
                              ulong dup_off, __global const act_t *dout, ulong dout_off,
                              __global const act_t *gate, ulong gate_off,
                              __global const act_t *up, ulong up_off, int N) {
    size_t i = get_global_id(0);
    if (i >= (size_t)N) return;
    /* dout may be dup (moe.c): read before either write */
    float g = ACT_LD(gate, gate_off + i), sg = 1.0f / (1.0f + exp(-g)), d = ACT_LD(dout, dout_off + i);
    float u = ACT_LD(up, up_off + i);
    ACT_ST(dgate, dgate_off + i, d * u * sg * (1.0f + g * (1.0f - sg)));
    ACT_ST(dup, dup_off + i, d * g * sg);
}

/* The token embedding alone (no positions), over rows [lo, lo + Vl) of the vocabulary (all of
 * it: lo 0, Vl Vp; tensor parallelism: this worker's rows of wte): out (N,C) = wte[tok - lo]
 * when the id is among them, else zeros (the host checks ids first). 2-D range (channel, row). */
__kernel void embed_forward(__global act_t *out, ulong out_off, __global const int *tok,
                            ulong tok_off, __global const act_t *wte, ulong wte_off, int N, int C,
                            int lo, int Vl) {
    int c = (int)get_global_id(0), r = (int)get_global_id(1);
    if (c >= C || r >= N) return;
    int t = tok[tok_off + r] - lo;
    ACT_ST(out, out_off + (size_t)r * C + c,
           t >= 0 && t < Vl ? ACT_LD(wte, wte_off + (size_t)t * C + c) : 0.0f);
}

/* dwte (Vl,C) += dout's rows scattered by token (ids in [lo, lo + Vl)); one work-item per
 * channel walks the rows in order (rows of one token summed in a fixed order: deterministic). */
__kernel void embed_backward(__global float *dwte, ulong dwte_off, __global const act_t *dout,
                             ulong dout_off, __global const int *tok, ulong tok_off, int N, int C,
                             int lo, int Vl) {
    size_t c = get_global_id(0);
    if (c >= (size_t)C) return;
    for (int r = 0; r < N; r++) {
        int t = tok[tok_off + r] - lo;
        if (t >= 0 && t < Vl)
            dwte[dwte_off + (size_t)t * C + c] += ACT_LD(dout, dout_off + (size_t)r * C + c);
    }
}

/* Grouped-query attention's kv heads repeated: raw (N, C + 2 NKV hd) = [q | k | v] with NH query
 * heads and NKV kv heads becomes out (N, 3C) = [q | k' | v'], query head h reading kv head
 * h / (NH / NKV). One work-item per output element. */
__kernel void gqa_expand(__global act_t *out, ulong out_off, __global const act_t *raw,
                         ulong raw_off, int N, int NH, int NKV, int hd) {
    size_t gid = get_global_id(0);
    size_t C = (size_t)NH * hd, Cr = C + 2 * (size_t)NKV * hd;
    if (gid >= (size_t)N * 3 * C) return;
    size_t r = gid / (3 * C), j = gid % (3 * C), sec = j / C, w = j % C;
    size_t src = w;
    if (sec > 0) {
        size_t h = w / hd, d = w % hd, kvh = h / (size_t)(NH / NKV);
        src = C + (sec - 1) * (size_t)NKV * hd + kvh * hd + d;
    }
    ACT_ST(out, out_off + gid, ACT_LD(raw, raw_off + r * Cr + src));
}

/* Its adjoint: draw (N, Cr) = the q gradient as it is, each kv head's gradient the sum over its
 * NH / NKV query heads' (in head order: deterministic). One work-item per draw element. */
__kernel void gqa_reduce(__global act_t *draw, ulong draw_off, __global const act_t *dexp,
                         ulong dexp_off, int N, int NH, int NKV, int hd) {
    size_t gid = get_global_id(0);
    size_t C = (size_t)NH * hd, KV = (size_t)NKV * hd, Cr = C + 2 * KV;
    if (gid >= (size_t)N * Cr) return;
    size_t r = gid / Cr, j = gid % Cr;
    __global const act_t *g = dexp + dexp_off + r * 3 * C;
    if (j < C) {
        ACT_ST(draw, draw_off + gid, ACT_LD(g, j));
        return;
    }
    size_t sec = (j - C) / KV, w = (j - C) % KV, kvh = w / hd, d = w % hd;
    size_t G = (size_t)(NH / NKV);
    float s = 0.0f;
    for (size_t q = 0; q < G; q++) s += ACT_LD(g, C + sec * C + (kvh * G + q) * hd + d);
    ACT_ST(draw, draw_off + gid, s);
}
