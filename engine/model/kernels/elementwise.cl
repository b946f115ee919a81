/* elementwise.cl - GELU (tanh approximation), residual add, bias add and the bias-gradient
 * reduction. One work-item per element, except the bias gradient (one per column, fixed order).
 * Storage (store.clh): every tensor is act_t but dbias (a parameter gradient: fp32). */
#include "bf16.clh"
#include "store.clh"

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */

__kernel void gelu_forward(__global act_t *out, ulong out_off, __global const act_t *inp,
                           ulong inp_off, int N) {
    size_t i = get_global_id(0);
    if (i >= (size_t)N) return;
    float x = ACT_LD(inp, inp_off + i);
    float u = GELU_S * (x + 0.044715f * x * x * x);
    ACT_ST(out, out_off + i, 0.5f * x * (1.0f + tanh(u)));
}

/* dinp = gelu'(inp) * dout (overwrites dinp) */
__kernel void gelu_backward(__global act_t *dinp, ulong dinp_off, __global const act_t *inp,
                            ulong inp_off, __global const act_t *dout, ulong dout_off, int N) {
    size_t i = get_global_id(0);
    if (i >= (size_t)N) return;
    float x = ACT_LD(inp, inp_off + i);
    float u = GELU_S * (x + 0.044715f * x * x * x);
    float th = tanh(u);
    float sech2 = 1.0f - th * th;
    float g = 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
    ACT_ST(dinp, dinp_off + i, g * ACT_LD(dout, dout_off + i));
}

__kernel void residual_forward(__global act_t *out, ulong out_off, __global const act_t *a,
                               ulong a_off, __global const act_t *b, ulong b_off, int N) {
    size_t i = get_global_id(0);
    if (i >= (size_t)N) return;
    ACT_ST(out, out_off + i, ACT_LD(a, a_off + i) + ACT_LD(b, b_off + i));
}

/* da += dout, db += dout */
__kernel void residual_backward(__global act_t *da, ulong da_off, __global act_t *db, ulong db_off,
                                __global const act_t *dout, ulong dout_off, int N) {
    size_t i = get_global_id(0);
    if (i >= (size_t)N) return;
    float g = ACT_LD(dout, dout_off + i);
    ACT_ST(da, da_off + i, ACT_LD(da, da_off + i) + g);
    ACT_ST(db, db_off + i, ACT_LD(db, db_off + i) + g);
}

/* out (N,OC) += bias (OC) broadcast over rows; 2-D range (column, row). */
__kernel void bias_add(__global act_t *out, ulong out_off, __global const act_t *bias,
                       ulong bias_off, int N, int OC) {
    int o = (int)get_global_id(0);
    size_t r = get_global_id(1);
    if (o >= OC || r >= (size_t)N) return;
    size_t i = out_off + r * (size_t)OC + o;
    ACT_ST(out, i, ACT_LD(out, i) + ACT_LD(bias, bias_off + o));
}

/* out (N,OC) = bias (OC) broadcast over rows (a copy: exact in either storage); the bf16 linear
 * layer fills its output so and lets the GEMM add the product (beta 1), one rounding in all. */
__kernel void bias_fill(__global act_t *out, ulong out_off, __global const act_t *bias,
                        ulong bias_off, int N, int OC) {
    int o = (int)get_global_id(0);
    size_t r = get_global_id(1);
    if (o >= OC || r >= (size_t)N) return;
    out[out_off + r * (size_t)OC + o] = bias[bias_off + o];
}

/* dbias (OC) += sum over rows of dout (N,OC); one work-item per column. */
__kernel void bias_backward(__global float *dbias, ulong dbias_off, __global const act_t *dout,
                            ulong dout_off, int N, int OC) {
    size_t o = get_global_id(0);
    if (o >= (size_t)OC) return;
    float s = 0.0f;
    for (int r = 0; r < N; r++) s += ACT_LD(dout, dout_off + (size_t)r * OC + o);
    dbias[dbias_off + o] += s;
}
