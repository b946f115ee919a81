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

static uint64_t mix64(uint64_t z) {
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ull;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint16_t ct_bf16_from_f32_stochastic(float x, uint64_t seed, uint64_t step, uint64_t index) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) return ct_bf16_from_f32(x);
    uint32_t r = (uint32_t)(mix64(mix64(seed + step * 0x9e3779b97f4a7c15ull) ^ index) & 0xffffu);
    return (uint16_t)((u + r) >> 16);
}

/* The conversion kernels' arguments: src, src_off, dst, dst_off, n, then `extra` ulongs. */
static ct_status convert_x(ct_device *d, const char *kernel, cl_mem src, size_t src_off,
                           size_t src_bytes, cl_mem dst, size_t dst_off, size_t dst_bytes,
                           size_t n, const cl_ulong *extra, int nextra, ct_event **ev);
static ct_status convert(ct_device *d, const char *kernel, cl_mem src, size_t src_off,
                         size_t src_bytes, cl_mem dst, size_t dst_off, size_t dst_bytes, size_t n,
                         ct_event **ev) {
    return convert_x(d, kernel, src, src_off, src_bytes, dst, dst_off, dst_bytes, n, NULL, 0, ev);
}
static ct_status convert_x(ct_device *d, const char *kernel, cl_mem src, size_t src_off,
                           size_t src_bytes, cl_mem dst, size_t dst_off, size_t dst_bytes,
                           size_t n, const cl_ulong *extra, int nextra, ct_event **ev) {
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
    /* pieces of ct_launch_piece_max() elements at advancing offsets (the stochastic form's
     * index, extra[2], advances with them): each element is converted as in one launch; `ev`,
     * when asked, is the last piece's (the queue is in order) */
    size_t piece = ct_launch_piece_max();
    for (size_t at = 0; at < n || (at == 0 && n == 0); at += piece) {
        size_t len = n - at < piece ? n - at : piece;
        cl_ulong so = src_off + at, dof = dst_off + at, cn = len, ex[3] = {0, 0, 0};
        size_t sizes[8] = {sizeof(cl_mem), sizeof so, sizeof(cl_mem), sizeof dof, sizeof cn};
        const void *vals[8] = {&src, &so, &dst, &dof, &cn};
        for (int i = 0; i < nextra && i < 3; i++) {
            ex[i] = extra[i] + (i == 2 ? at : 0);
            sizes[5 + i] = sizeof(cl_ulong), vals[5 + i] = &ex[i];
        }
        if ((st = ct__kernel_args(d, k, 5 + (nextra < 3 ? nextra : 3), sizes, vals))) return st;
        size_t local = 64, global = (len + local - 1) / local * local; /* n = 0: a marker */
        if ((st = ct_kernel_launch(d, k, 1, &global, &local, at + len >= n ? ev : NULL)))
            return st;
        if (n == 0) break;
    }
    return CT_OK;
}

ct_status ct_bf16_from_f32_enqueue(ct_device *d, cl_mem src, size_t src_off, cl_mem dst,
                                   size_t dst_off, size_t n, ct_event **ev) {
    return convert(d, "ct_convert_f32_bf16", src, src_off, 4, dst, dst_off, 2, n, ev);
}

ct_status ct_bf16_from_f32_stochastic_enqueue(ct_device *d, cl_mem src, size_t src_off,
                                              cl_mem dst, size_t dst_off, size_t n, uint64_t seed,
                                              uint64_t step, uint64_t first, ct_event **ev) {
    const cl_ulong extra[3] = {seed, step, first};
    return convert_x(d, "ct_convert_f32_bf16_stochastic", src, src_off, 4, dst, dst_off, 2, n,
                     extra, 3, ev);
}

ct_status ct_bf16_to_f32_enqueue(ct_device *d, cl_mem src, size_t src_off, cl_mem dst,
                                 size_t dst_off, size_t n, ct_event **ev) {
    return convert(d, "ct_convert_bf16_f32", src, src_off, 2, dst, dst_off, 4, n, ev);
}
