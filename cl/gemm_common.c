/* gemm_common.c - what the bf16 GEMM kernels' files (gemm_portable.c, gemm_mma.c) share: building
 * a kernel and checking its work-group size, the arguments every bf16 kernel takes, the rule that
 * picks a block shape, and how a failed check becomes a refusal. The path table (gemm_path.c)
 * sits above both. */
#include <stdio.h>

#include "ct_cl_impl.h"

ct_status ct__gemm_refusal(ct_status st) {
    return st == CT_ERR_NOMEM || st == CT_ERR_DEVICE_MEM ? st : CT_ERR_UNSUPPORTED;
}

int ct__gemm_pick_tile(const ct_device *d, const ct_gemm_desc *g, int bm, int bn) {
    size_t bm_ = (size_t)bm, bn_ = (size_t)bn;
    size_t blocks = ((g->m + bm_ - 1) / bm_) * ((g->n + bn_ - 1) / bn_) * g->batch;
    return blocks >= 2 * (size_t)(d->info.compute_units ? d->info.compute_units : 1) ? 1 : 2;
}

ct_status ct__gemm_kernel(ct_device *d, const char *path, const char *source, const char *opts,
                          const char *kernel, size_t threads, cl_kernel *k) {
    const ct_cl_source *src = ct__cl_kernel_source(source);
    if (!src)
        return CT_ERR(&d->err, CT_ERR_NOT_FOUND, "kernel source '%s.cl' is not embedded", source);
    ct_status st = ct_kernel_get(d, src, opts, kernel, k);
    size_t most = 0;
    if (st == CT_OK && (st = ct_kernel_max_work_group(d, *k, &most)) == CT_OK && most < threads)
        st = CT_ERR(&d->err, CT_ERR_UNSUPPORTED,
                    "gemm (%s): kernel %s (%s) needs work-groups of %zu work-items; device '%s' "
                    "allows it %zu",
                    path, kernel, opts, threads, d->info.name, most);
    return st;
}

ct_status ct__gemm_kernel_args(ct_device *d, cl_kernel k, const ct_gemm_desc *g, size_t chunk) {
    size_t batch = g->batch;
    /* cp.async moves 16-byte chunks (`chunk` elements: 8 bf16, 4 fp32): every row of A and B
     * must start 16-byte aligned (buffers themselves are aligned far beyond that by OpenCL) */
    size_t c = chunk;
    int vec = g->a_off % c == 0 && g->lda % c == 0 && (batch == 1 || g->a_stride % c == 0) &&
              g->b_off % c == 0 && g->ldb % c == 0 && (batch == 1 || g->b_stride % c == 0);
    cl_int ta = g->ta, tb = g->tb, c_bf16 = g->c_bf16 != 0, cvec = vec;
    cl_uint m = (cl_uint)g->m, n = (cl_uint)g->n, kk = (cl_uint)g->k;
    cl_float alpha = g->alpha, beta = g->beta;
    cl_ulong a_off = g->a_off, lda = g->lda, as = g->a_stride, b_off = g->b_off, ldb = g->ldb,
             bs = g->b_stride, c_off = g->c_off, ldc = g->ldc, cs = g->c_stride;
    const size_t U = sizeof(cl_ulong), M = sizeof(cl_mem);
    const size_t sizes[] = {4, 4, 4, 4, 4, 4, 4, M, U, U, U, M, U, U, U, M, U, U, U, 4, 4};
    const void *vals[] = {&ta,   &tb,    &m,   &n,  &kk,   &alpha, &beta, &g->a, &a_off,  &lda, &as,
                          &g->b, &b_off, &ldb, &bs, &g->c, &c_off, &ldc,  &cs,   &c_bf16, &cvec};
    return ct__kernel_args(d, k, (int)(sizeof sizes / sizeof sizes[0]), sizes, vals);
}
