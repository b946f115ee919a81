/* bf16.cl - fp32 <-> bf16 conversion of n values (cl/bf16.c enqueues them). Offsets in elements.
 * Both move bits as integers (bf16.clh), so denormals, infinities and NaNs pass unchanged by any
 * flush-to-zero of the device's float unit. */
#include "bf16.clh"

__kernel void ct_convert_f32_bf16(__global const uint *x, const ulong xoff, __global ushort *y,
                               const ulong yoff, const ulong n) {
    ulong i = get_global_id(0);
    if (i < n) y[yoff + i] = ct_bf16_from_bits(x[xoff + i]);
}

__kernel void ct_convert_bf16_f32(__global const ushort *x, const ulong xoff, __global uint *y,
                             const ulong yoff, const ulong n) {
    ulong i = get_global_id(0);
    if (i < n) y[yoff + i] = (uint)x[xoff + i] << 16;
}
