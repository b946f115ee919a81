/* bf16.cl - fp32 <-> bf16 conversion of n values (cl/bf16.c enqueues them). Offsets in elements.
 * Both move bits as integers (bf16.clh), so denormals, infinities and NaNs pass unchanged by any
 * flush-to-zero of the device's float unit. */
#include "bf16.clh"

__kernel void ct_convert_f32_bf16(__global const uint *x, const ulong xoff, __global ushort *y,
                               const ulong yoff, const ulong n) {
    ulong i = get_global_id(0);
    if (i < n) y[yoff + i] = ct_bf16_from_bits(x[xoff + i]);
}

static ulong ct_mix64(ulong z) {
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9UL;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebUL;
    return z ^ (z >> 31);
}

/* Stochastic rounding (cl/ct_bf16.h states the rule; the host function gives the same bits). */
__kernel void ct_convert_f32_bf16_stochastic(__global const uint *x, const ulong xoff,
                                             __global ushort *y, const ulong yoff, const ulong n,
                                             const ulong seed, const ulong step,
                                             const ulong first) {
    ulong i = get_global_id(0);
    if (i >= n) return;
    uint u = x[xoff + i];
    if ((u & 0x7f800000u) == 0x7f800000u) {
        y[yoff + i] = ct_bf16_from_bits(u);
        return;
    }
    uint r = (uint)(ct_mix64(ct_mix64(seed + step * 0x9e3779b97f4a7c15UL) ^ (first + i)) & 0xffffUL);
    y[yoff + i] = (ushort)((u + r) >> 16);
}

__kernel void ct_convert_bf16_f32(__global const ushort *x, const ulong xoff, __global uint *y,
                             const ulong yoff, const ulong n) {
    ulong i = get_global_id(0);
    if (i < n) y[yoff + i] = (uint)x[xoff + i] << 16;
}
