/* gemm_portable.c - CT_GEMM_PORTABLE: the bf16 GEMM in plain OpenCL C (cl/kernels/gemm_bf16.cl)
 * for any device. Two block shapes of 16 x 16 work-items; the large one unless it would leave
 * compute units idle. Measured on PoCL (2 cores, 512^3): 22 GFLOP/s with 128 x 128 blocks of 8 x 8
 * per work-item in float8 rows, against 3 with scalar 4 x 4 (the first version). */
#include <stdio.h>

#include "ct_cl_impl.h"

typedef struct portable_tile {
    int tm, tn, tk;
    const char *text;
} portable_tile;
static const portable_tile kTiles[] = {
    {128, 128, 16, "128x128x16, 16x16 work-items of 8x8 (float8 rows)"},
    {64, 64, 16, "64x64x16, 16x16 work-items of 4x4 (float4 rows)"},
};
#define NTILES ((int)(sizeof kTiles / sizeof kTiles[0]))

int ct__gemm_portable_tiles(void) { return NTILES; }

const char *ct__gemm_portable_tile_str(int tile) {
    return tile >= 1 && tile <= NTILES ? kTiles[tile - 1].text : NULL;
}

static ct_status get_kernel(ct_device *d, const portable_tile *t, cl_kernel *k) {
    char opts[96];
    snprintf(opts, sizeof opts, "-DTM=%d -DTN=%d -DTK=%d%s", t->tm, t->tn, t->tk,
             d->info.type & CL_DEVICE_TYPE_CPU ? "" : " -DCT_UNROLL_ROWS"); /* gemm_bf16.cl: why */
    return ct__gemm_kernel(d, "portable", "gemm_bf16", opts, "ct_gemm_bf16", 256, k);
}

ct_status ct__gemm_portable_check(ct_device *d, char *why, size_t len) {
    for (int i = 0; i < NTILES; i++) {
        cl_kernel k = NULL;
        ct_status st = get_kernel(d, &kTiles[i], &k);
        if (st != CT_OK) {
            snprintf(why, len, "the portable path cannot run on '%s': %.600s", d->info.name,
                     d->err.msg);
            return ct__gemm_refusal(st);
        }
    }
    return CT_OK;
}

ct_status ct__gemm_portable_run(ct_device *d, const ct_gemm_desc *g, ct_event **ev) {
    int tile = g->tile ? g->tile : ct__gemm_pick_tile(d, g, kTiles[0].tm, kTiles[0].tn);
    const portable_tile *t = &kTiles[tile - 1];
    cl_kernel k = NULL;
    ct_status st = get_kernel(d, t, &k);
    if (st == CT_OK) st = ct__gemm_kernel_args(d, k, g, 8);
    if (st != CT_OK) return st;
    size_t batch = g->batch;
    size_t global[3] = {16 * ((g->n + t->tn - 1) / t->tn), 16 * ((g->m + t->tm - 1) / t->tm),
                        batch};
    size_t local[3] = {16, 16, 1};
    return ct_kernel_launch(d, k, 3, global, local, ev);
}
