/* fill.cl - x[i] = v for i < n (no caller in the libraries today; its count is 64-bit so a
 * future caller over more than 2^32 elements is not cut short). */
__kernel void ct_fill(__global float *x, const float v, const ulong n) {
    size_t i = get_global_id(0);
    if (i < n) x[i] = v;
}
