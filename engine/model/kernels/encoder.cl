/* encoder.cl - token + position embedding, forward and backward.
 * Tensors arrive as (buffer, offset in elements). Token ids outside [0, Vp) read as zeros (the host
 * validates tokens before upload; the guard only keeps a bad id from reading out of bounds).
 * The backward passes are deterministic: no atomics, every output element has one writer.
 * Storage (store.clh): out, wte, wpe, dout are act_t; dwte, dwpe (parameter gradients) fp32. */
#include "bf16.clh"
#include "store.clh"

/* out (B,T,C) = wte[inp[b,t]] + wpe[t]; 2-D range (channel, position b*T+t). */
__kernel void encoder_forward(__global act_t *out, ulong out_off, __global const int *inp,
                              ulong inp_off, __global const act_t *wte, ulong wte_off,
                              __global const act_t *wpe, ulong wpe_off, int BT, int T, int C,
                              int Vp) {
    int c = (int)get_global_id(0);
    int bt = (int)get_global_id(1);
    if (c >= C || bt >= BT) return;
    int t = bt % T;
    int tok = inp[inp_off + bt];
    float e = (tok >= 0 && tok < Vp) ? ACT_LD(wte, wte_off + (size_t)tok * C + c) : 0.0f;
    ACT_ST(out, out_off + (size_t)bt * C + c, e + ACT_LD(wpe, wpe_off + (size_t)t * C + c));
}

/* dwte (Vp,C) += scatter of dout (B,T,C) by token; one work-item per channel walks all positions
 * in order, so rows hit by several tokens are summed in a fixed order. */
__kernel void encoder_backward_wte(__global float *dwte, ulong dwte_off, __global const act_t *dout,
                                   ulong dout_off, __global const int *inp, ulong inp_off, int BT,
                                   int C, int Vp) {
    size_t c = get_global_id(0);
    if (c >= (size_t)C) return;
    for (int bt = 0; bt < BT; bt++) {
        int tok = inp[inp_off + bt];
        if (tok >= 0 && tok < Vp)
            dwte[dwte_off + (size_t)tok * C + c] += ACT_LD(dout, dout_off + (size_t)bt * C + c);
    }
}

/* dwpe (T,C) += sum over b of dout (B,T,C); one work-item per (t, c). */
__kernel void encoder_backward_wpe(__global float *dwpe, ulong dwpe_off, __global const act_t *dout,
                                   ulong dout_off, int B, int T, int C) {
    size_t i = get_global_id(0);
    if (i >= (size_t)T * (size_t)C) return;
    float s = 0.0f;
    for (int b = 0; b < B; b++) s += ACT_LD(dout, dout_off + (size_t)b * T * C + i);
    dwpe[dwpe_off + i] += s;
}
