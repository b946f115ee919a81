/* gemm_mma_tf32.c - CT_GEMM_MMA_TF32 and CT_GEMM_MMA_TF32_EMULATED: the fp32 GEMM of
 * cl/kernels/gemm_mma_tf32.cl on NVIDIA's tensor cores with tf32 operands (m16n8k8), built with
 * the real warp instructions (-DCT_MMA_NV_PTX) or with mma_nv.clh's portable stand-ins. Its
 * block shapes, and its check: the same vendor rule as CT_GEMM_MMA (ct_gemm_mma_eligible:
 * NVIDIA, compute capability 8.0 or more; the tf32 mma and cvt.rna.tf32 are sm_80 PTX) and a
 * probe in a context of its own: every block shape on small integer matrices (exact in tf32, so
 * the product must be exact) in all four transposes, batch 2, edges in M, N and K, through
 * cp.async chunks (ld 48) and element copies (ld 45), C beta 0 over NaN and beta 1, padding NaN.
 * Only when the user asks (--tf32 1, as PyTorch's allow_tf32): tf32 keeps 10 mantissa bits. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_cl_impl.h"

/* {BM, BN, BK, WM, WN, STAGES}: tile 1 for large products, tile 2 when few blocks would leave
 * compute units idle. Local memory: STAGES x (A block + B block) floats, rows padded by 4;
 * scripts/ptx_check builds every row for sm_80 and sm_90 and holds ptxas's shared-memory figure
 * to tile_local_bytes: keep one row per line in this form. */
typedef struct tf32_tile {
    int bm, bn, bk, wm, wn, stages;
} tf32_tile;
static const tf32_tile kTiles[] = {
    {128, 128, 16, 64, 32, 2},
    {64, 64, 16, 32, 32, 3},
};
#define NTILES ((int)(sizeof kTiles / sizeof kTiles[0]))

static int tile_threads(const tf32_tile *t) { return 32 * (t->bm / t->wm) * (t->bn / t->wn); }
static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

static size_t tile_local_bytes(const tf32_tile *t, int emulated) {
    size_t a = max_sz((size_t)t->bm * (t->bk + 4), (size_t)t->bk * (t->bm + 4));
    size_t b = max_sz((size_t)t->bn * (t->bk + 4), (size_t)t->bk * (t->bn + 4));
    size_t scratch = emulated ? (size_t)(tile_threads(t) / 32) * (16 * 16 + 16 * 8) * 2 : 0;
    return (size_t)t->stages * (a + b) * 4 + scratch;
}

int ct__gemm_tf32_tiles(void) { return NTILES; }

static char tile_text[NTILES][96];
static pthread_once_t tile_text_once = PTHREAD_ONCE_INIT;
static void tile_text_init(void) {
    for (int i = 0; i < NTILES; i++) {
        const tf32_tile *t = &kTiles[i];
        snprintf(tile_text[i], sizeof tile_text[i],
                 "%dx%dx%d, %d warps of %dx%d, %d stages, %zu B local (%zu B emulated)", t->bm,
                 t->bn, t->bk, tile_threads(t) / 32, t->wm, t->wn, t->stages,
                 tile_local_bytes(t, 0), tile_local_bytes(t, 1));
    }
}
const char *ct__gemm_tf32_tile_str(int tile) {
    if (tile < 1 || tile > NTILES) return NULL;
    pthread_once(&tile_text_once, tile_text_init);
    return tile_text[tile - 1];
}

static const char *path_name(int emulated) { return emulated ? "mma-tf32-emulated" : "mma-tf32"; }

static ct_status get_kernel(ct_device *d, const tf32_tile *t, int emulated, cl_kernel *k) {
    size_t local = tile_local_bytes(t, emulated);
    if (d->info.local_mem_bytes && local > d->info.local_mem_bytes)
        return CT_ERR(&d->err, CT_ERR_UNSUPPORTED,
                      "gemm (%s): block %dx%dx%d needs %zu bytes of local memory, device '%s' "
                      "has %llu", path_name(emulated), t->bm, t->bn, t->bk, local, d->info.name,
                      (unsigned long long)d->info.local_mem_bytes);
    char opts[160];
    snprintf(opts, sizeof opts, "-DBM=%d -DBN=%d -DBK=%d -DWM=%d -DWN=%d -DSTAGES=%d%s", t->bm,
             t->bn, t->bk, t->wm, t->wn, t->stages, emulated ? "" : " -DCT_MMA_NV_PTX");
    return ct__gemm_kernel(d, path_name(emulated), "gemm_mma_tf32", opts, "ct_gemm_mma_tf32",
                           (size_t)tile_threads(t), k);
}

ct_status ct__gemm_tf32_run(ct_device *d, const ct_gemm_desc *g, int emulated, ct_event **ev) {
    if (g->c_bf16)
        return CT_ERR(&d->err, CT_ERR_ARG, "gemm (%s): C is fp32 on this path (c_bf16)",
                      path_name(emulated));
    int tile = g->tile ? g->tile : ct__gemm_pick_tile(d, g, kTiles[0].bm, kTiles[0].bn);
    const tf32_tile *t = &kTiles[tile - 1];
    cl_kernel k = NULL;
    ct_status st = get_kernel(d, t, emulated, &k);
    if (st == CT_OK) st = ct__gemm_kernel_args(d, k, g, 4);
    if (st != CT_OK) return st;
    size_t nt = (size_t)tile_threads(t), batch = g->batch;
    size_t global[3] = {nt * ((g->n + t->bn - 1) / t->bn), (g->m + t->bm - 1) / t->bm, batch};
    size_t local[3] = {nt, 1, 1};
    return ct_kernel_launch(d, k, 3, global, local, ev);
}

/* ---------------------------------------------------------------- the probe */

enum { PM = 33, PN = 23, PK = 44, PB = 2, PLD = 48, PLD_ODD = 45, PSTRIDE = PLD * PLD };
static float probe_a(int z, int i, int p) { return (float)((i * 3 + p * 5 + z * 2) % 7 - 3); }
static float probe_b(int z, int p, int j) { return (float)((p * 2 + j * 7 + z) % 5 - 2); }
static float probe_c(int z, int i, int j) { return (float)((i + j * 2 + z * 3) % 5 - 2); }

static ct_status probe_on(ct_device *pd, int emulated, char *why, size_t len, int *ran) {
    ct_status st = CT_OK;
    const char *name = path_name(emulated), *what = "allocating its buffers";
    size_t nab = (size_t)PB * PSTRIDE, nc = (size_t)PB * PM * PN;
    ct_buffer *ba = NULL, *bb = NULL, *bc = NULL;
    float *ha = malloc(4 * nab), *hb = malloc(4 * nab), *hc = malloc(4 * nc);
    if (!ha || !hb || !hc) {
        st = CT_ERR(&pd->err, CT_ERR_NOMEM, "out of host memory");
        goto cleanup;
    }
    CT_CHECK(ct_buffer_alloc(pd, CT_MEM_WORKSPACE, "tf32 probe A", 4 * nab, &ba));
    CT_CHECK(ct_buffer_alloc(pd, CT_MEM_WORKSPACE, "tf32 probe B", 4 * nab, &bb));
    CT_CHECK(ct_buffer_alloc(pd, CT_MEM_WORKSPACE, "tf32 probe C", 4 * nc, &bc));
    for (int tile = 1; tile <= NTILES; tile++)
        for (int form = 0; form < 2; form++)
            for (int tr = 0; tr < 4; tr++) {
                int ta = tr >> 1, tb = tr & 1, b1 = form == 1;
                size_t ld = form ? PLD_ODD : PLD;
                for (size_t e = 0; e < nab; e++) ha[e] = hb[e] = NAN;
                for (int z = 0; z < PB; z++) {
                    for (int i = 0; i < PM; i++)
                        for (int p = 0; p < PK; p++)
                            ha[z * PSTRIDE + (ta ? p * ld + i : i * ld + p)] = probe_a(z, i, p);
                    for (int p = 0; p < PK; p++)
                        for (int j = 0; j < PN; j++)
                            hb[z * PSTRIDE + (tb ? j * ld + p : p * ld + j)] = probe_b(z, p, j);
                    for (int i = 0; i < PM; i++)
                        for (int j = 0; j < PN; j++)
                            hc[((size_t)z * PM + i) * PN + j] = b1 ? probe_c(z, i, j) : NAN;
                }
                what = "writing its operands";
                CT_CHECK(ct_buffer_write(ba, 0, ha, 4 * nab));
                CT_CHECK(ct_buffer_write(bb, 0, hb, 4 * nab));
                CT_CHECK(ct_buffer_write(bc, 0, hc, 4 * nc));
                ct_gemm_desc g = {.ta = ta, .tb = tb, .m = PM, .n = PN, .k = PK, .batch = PB,
                                  .alpha = 1.0f, .beta = b1 ? 1.0f : 0.0f,
                                  .a = ct_buffer_mem(ba), .lda = ld, .a_stride = PSTRIDE,
                                  .b = ct_buffer_mem(bb), .ldb = ld, .b_stride = PSTRIDE,
                                  .c = ct_buffer_mem(bc), .ldc = PN, .c_stride = PM * PN,
                                  .tile = tile};
                *ran = 1;
                what = "building or running its kernel";
                ct_event *ev = NULL;
                CT_CHECK(ct__gemm_tf32_run(pd, &g, emulated, &ev));
                CT_CHECK(ct_event_wait_release(ev));
                what = "reading its result";
                CT_CHECK(ct_buffer_read(bc, 0, hc, 4 * nc));
                for (int z = 0; z < PB; z++)
                    for (int i = 0; i < PM; i++)
                        for (int j = 0; j < PN; j++) {
                            float want = b1 ? probe_c(z, i, j) : 0.0f;
                            for (int p = 0; p < PK; p++)
                                want += probe_a(z, i, p) * probe_b(z, p, j);
                            float got = hc[((size_t)z * PM + i) * PN + j];
                            if (got == want) continue;
                            snprintf(why, len,
                                     "the %s path's probe gave a wrong product on '%s' (block "
                                     "%s, ta=%d tb=%d, %dx%dx%d, batch %d, beta %d, ld %zu): "
                                     "C[%d][%d][%d] = %g, expected %g",
                                     name, pd->info.name, ct__gemm_tf32_tile_str(tile), ta, tb,
                                     PM, PN, PK, PB, b1, ld, z, i, j, (double)got, (double)want);
                            st = CT_ERR_UNSUPPORTED;
                            goto done;
                        }
            }
cleanup:
    if (st != CT_OK)
        snprintf(why, len, "the %s path's probe failed on '%s' %s: %.600s", name, pd->info.name,
                 what, pd->err.msg);
done:
    ct_buffer_free(ba), ct_buffer_free(bb), ct_buffer_free(bc);
    free(ha), free(hb), free(hc);
    return st;
}

/* In a context of its own, as gemm_mma.c's probe (a faulting kernel must not ruin d's). */
ct_status ct__gemm_tf32_check(ct_device *d, int emulated, char *why, size_t len) {
    if (!emulated && !ct_gemm_mma_eligible(&d->info, why, len)) return CT_ERR_UNSUPPORTED;
    ct_device_opts o = ct_device_opts_default();
    o.apply_tuning = 0;
    o.cache_dir = d->cache_dir;
    o.row_groups = d->row_groups;
    ct_err err = {0};
    ct_device *pd = NULL;
    ct_status st = ct_device_open(&pd, &d->info, &o, &err);
    if (st != CT_OK) {
        snprintf(why, len, "the %s path's probe could not open a context of its own on '%s': "
                 "%.600s", path_name(emulated), d->info.name, err.msg);
        return st;
    }
    int ran = 0;
    st = probe_on(pd, emulated, why, len, &ran);
    ct_device_free(pd);
    if (st != CT_OK) return ran ? ct__gemm_refusal(st) : st;
    for (int i = 0; i < NTILES; i++) {
        cl_kernel k = NULL;
        if ((st = get_kernel(d, &kTiles[i], emulated, &k)) != CT_OK) {
            snprintf(why, len, "the %s path passed its probe on '%s' but its kernel for block %s "
                     "failed on the device's own context: %.600s", path_name(emulated),
                     d->info.name, ct__gemm_tf32_tile_str(i + 1), d->err.msg);
            return ct__gemm_refusal(st);
        }
    }
    return CT_OK;
}
