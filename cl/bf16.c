/* bf16.c - fp32 <-> bf16 on the host and, enqueued, on the device (cl/kernels/bf16.cl).
 *
 * The host pair is the rule cl/kernels/bf16.clh states, written the same way on the bits (round to
 * nearest even, NaN kept quiet with its sign), so host-made bf16 data equals what a kernel would
 * make of the same fp32. tests/test_cl_gemm_bf16.c holds both to an independent reference. */
#include <string.h>

#include "ct_cl_impl.h"

uint16_t ct_bf16_from_f32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float ct_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static ct_status convert(ct_device *d, const char *kernel, cl_mem src, size_t src_off,
                         size_t src_bytes, cl_mem dst, size_t dst_off, size_t dst_bytes, size_t n,
                         ct_event **ev) {
    if (ev) *ev = NULL;
    if (!src || !dst) return CT_ERR(&d->err, CT_ERR_ARG, "%s: a buffer is NULL", kernel);
    size_t have = 0;
    clGetMemObjectInfo(src, CL_MEM_SIZE, sizeof have, &have, NULL);
    if (have && (src_off + n) * src_bytes > have)
        return CT_ERR(&d->err, CT_ERR_ARG, "%s: source [%zu, %zu) past its buffer of %zu elements",
                      kernel, src_off, src_off + n, have / src_bytes);
    have = 0;
    clGetMemObjectInfo(dst, CL_MEM_SIZE, sizeof have, &have, NULL);
    if (have && (dst_off + n) * dst_bytes > have)
        return CT_ERR(&d->err, CT_ERR_ARG,
                      "%s: destination [%zu, %zu) past its buffer of %zu elements", kernel, dst_off,
                      dst_off + n, have / dst_bytes);
    const ct_cl_source *src_cl = ct__cl_kernel_source("bf16");
    if (!src_cl)
        return CT_ERR(&d->err, CT_ERR_NOT_FOUND, "kernel source 'bf16.cl' is not embedded");
    cl_kernel k = NULL;
    ct_status st = ct_kernel_get(d, src_cl, "", kernel, &k);
    if (st != CT_OK) return st;
    cl_ulong so = src_off, dof = dst_off, cn = n;
    const size_t sizes[] = {sizeof(cl_mem), sizeof so, sizeof(cl_mem), sizeof dof, sizeof cn};
    const void *vals[] = {&src, &so, &dst, &dof, &cn};
    if ((st = ct__kernel_args(d, k, 5, sizes, vals))) return st;
    size_t local = 64, global = (n + local - 1) / local * local;
    return ct_kernel_launch(d, k, 1, &global, &local, ev);
}

ct_status ct_bf16_from_f32_enqueue(ct_device *d, cl_mem src, size_t src_off, cl_mem dst,
                                   size_t dst_off, size_t n, ct_event **ev) {
    return convert(d, "ct_convert_f32_bf16", src, src_off, 4, dst, dst_off, 2, n, ev);
}

ct_status ct_bf16_to_f32_enqueue(ct_device *d, cl_mem src, size_t src_off, cl_mem dst,
                                 size_t dst_off, size_t n, ct_event **ev) {
    return convert(d, "ct_convert_bf16_f32", src, src_off, 2, dst, dst_off, 4, n, ev);
}
