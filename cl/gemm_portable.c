/* gemm_portable.c - CT_GEMM_PORTABLE: the bf16 GEMM in plain OpenCL C (cl/kernels/gemm_bf16.cl)
 * for any device. One block shape for now (64 x 64 of C per 256 work-items, K steps of 16);
 * per-device shapes come with the measured choice of paths. */
#include <stdio.h>

#include "ct_cl_impl.h"

#define TM 64
#define TN 64
#define TK 16

int ct__gemm_portable_tiles(void) { return 1; }

const char *ct__gemm_portable_tile_str(int tile) {
    return tile == 1 ? "64x64x16, 16x16 work-items of 4x4, fp32 local blocks" : NULL;
}

static ct_status get_kernel(ct_device *d, cl_kernel *k) {
    const ct_cl_source *src = ct__cl_kernel_source("gemm_bf16");
    if (!src) return CT_ERR(&d->err, CT_ERR_NOT_FOUND, "kernel source 'gemm_bf16.cl' is not embedded");
    char opts[96];
    snprintf(opts, sizeof opts, "-DTM=%d -DTN=%d -DTK=%d", TM, TN, TK);
    ct_status st = ct_kernel_get(d, src, opts, "ct_gemm_bf16", k);
    size_t most = 0;
    if (st == CT_OK && (st = ct_kernel_max_work_group(d, *k, &most)) == CT_OK && most < 256)
        st = CT_ERR(&d->err, CT_ERR_UNSUPPORTED,
                    "gemm (portable): the kernel needs work-groups of 256 work-items; device '%s' "
                    "allows it %zu", d->info.name, most);
    return st;
}

ct_status ct__gemm_portable_check(ct_device *d, char *why, size_t len) {
    cl_kernel k = NULL;
    ct_status st = get_kernel(d, &k);
    if (st != CT_OK) snprintf(why, len, "the portable path cannot run on '%s': %.600s", d->info.name,
                              d->err.msg);
    return st;
}

ct_status ct__gemm_portable_run(ct_device *d, const ct_gemm_desc *g, ct_event **ev) {
    cl_kernel k = NULL;
    ct_status st = get_kernel(d, &k);
    if (st == CT_OK) st = ct__gemm_bf16_args(d, k, g);
    if (st != CT_OK) return st;
    size_t batch = g->batch ? g->batch : 1;
    size_t global[3] = {16 * ((g->n + TN - 1) / TN), 16 * ((g->m + TM - 1) / TM), batch};
    size_t local[3] = {16, 16, 1};
    return ct_kernel_launch(d, k, 3, global, local, ev);
}
