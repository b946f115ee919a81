/* gemm_mma.c - CT_GEMM_MMA and CT_GEMM_MMA_EMULATED: the tensor-core bf16 GEMM of
 * cl/kernels/gemm_mma.cl, built with the real warp instructions (-DCT_MMA_NV_PTX) or with the
 * portable stand-ins of cl/kernels/mma_nv.clh. Its block shapes, the rule that enables it and the
 * probe that must pass first.
 *
 * Enabling (CT_GEMM_MMA): the device says it is NVIDIA's, of compute capability 8.0 or more
 * (cl_nv_device_attribute_query: mma.sync with bf16, ldmatrix and cp.async are sm_80 PTX), and
 * the probe passes: every block shape built for the device and run on known batches of small
 * integer matrices, in all four transposes, at edges in M, N and K, through 16-byte cp.async
 * chunks (partial ones too) and through element copies, C fp32 (beta 0 over NaN) and bf16 (beta
 * 1), padding NaN; the result must equal the exact product bit for bit (every partial sum is an
 * integer far below 2^24, so any order of accumulation is exact; a bf16 C is that rounded once).
 * A wrong fragment layout, a compiler that misreads the PTX or a local pointer that is not a
 * .shared address all fail it. The emulated form has no vendor rule but passes the same probe. */
#include <ctype.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_cl_impl.h"

/* A block shape (gemm_mma.cl's -D parameters): tile 1 for large products (many blocks), tile 2
 * when few blocks would leave compute units idle (small or few batched products). Local memory:
 * STAGES buffers of an A block and a B block, each row padded by 8 bf16; at most 48 KiB, what
 * NVIDIA's OpenCL gives a work-group. scripts/ptx_check builds every row of this table for sm_80
 * and sm_90 and holds ptxas's shared-memory figure to tile_local_bytes: keep one row per line in
 * this form. */
typedef struct mma_tile {
    int bm, bn, bk, wm, wn, stages;
} mma_tile;
static const mma_tile kTiles[] = {
    {128, 128, 32, 64, 32, 2},
    {64, 64, 32, 32, 32, 3},
};
#define NTILES ((int)(sizeof kTiles / sizeof kTiles[0]))

static int tile_threads(const mma_tile *t) { return 32 * (t->bm / t->wm) * (t->bn / t->wn); }

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* Bytes of local memory the kernel declares (as gemm_mma.cl computes them): the stages, and for
 * the stand-ins each warp's scratch (CT_WARP_SCRATCH words; the PTX build declares none). */
static size_t tile_local_bytes(const mma_tile *t, int emulated) {
    size_t a = max_sz((size_t)t->bm * (t->bk + 8), (size_t)t->bk * (t->bm + 8));
    size_t b = max_sz((size_t)t->bn * (t->bk + 8), (size_t)t->bk * (t->bn + 8));
    size_t scratch = emulated ? (size_t)(tile_threads(t) / 32) * (16 * 16 + 16 * 8) * 2 : 0;
    return (size_t)t->stages * (a + b) * 2 + scratch;
}

int ct__gemm_mma_tiles(void) { return NTILES; }

/* The lines of ct_gemm_tile_str, written once from the table and tile_local_bytes. */
static char tile_text[NTILES][96];
static pthread_once_t tile_text_once = PTHREAD_ONCE_INIT;

static void tile_text_init(void) {
    for (int i = 0; i < NTILES; i++) {
        const mma_tile *t = &kTiles[i];
        snprintf(tile_text[i], sizeof tile_text[i],
                 "%dx%dx%d, %d warps of %dx%d, %d stages, %zu B local (%zu B emulated)", t->bm,
                 t->bn, t->bk, tile_threads(t) / 32, t->wm, t->wn, t->stages,
                 tile_local_bytes(t, 0), tile_local_bytes(t, 1));
    }
}

const char *ct__gemm_mma_tile_str(int tile) {
    if (tile < 1 || tile > NTILES) return NULL;
    pthread_once(&tile_text_once, tile_text_init);
    return tile_text[tile - 1];
}

static int contains_nocase(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] &&
               tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n) return 1;
    }
    return 0;
}

int ct_gemm_mma_eligible(const ct_device_info *info, char *why, size_t len) {
    static const char need[] = "the mma path needs an NVIDIA device of compute capability 8.0 or "
                               "more (mma.sync with bf16, ldmatrix and cp.async are sm_80 PTX)";
    if (!contains_nocase(info->vendor, "nvidia")) {
        if (why) snprintf(why, len, "%s; this device is '%s' from '%s' (platform '%s')", need,
                          info->name, info->vendor, info->platform);
        return 0;
    }
    if (info->nv_cc_major == 0) {
        if (why) snprintf(why, len, "%s; this NVIDIA device ('%s') does not report its compute "
                          "capability (no cl_nv_device_attribute_query)", need, info->name);
        return 0;
    }
    if (info->nv_cc_major < 8) {
        if (why) snprintf(why, len, "%s; this device is '%s' of compute capability %d.%d", need,
                          info->name, info->nv_cc_major, info->nv_cc_minor);
        return 0;
    }
    return 1;
}

/* Fetch (build once) the kernel for a block shape and check it can run here. */
static ct_status get_kernel(ct_device *d, const mma_tile *t, int emulated, cl_kernel *k) {
    size_t local = tile_local_bytes(t, emulated);
    if (d->info.local_mem_bytes && local > d->info.local_mem_bytes)
        return CT_ERR(&d->err, CT_ERR_UNSUPPORTED,
                      "gemm (mma): block %dx%dx%d needs %zu bytes of local memory, device '%s' "
                      "has %llu", t->bm, t->bn, t->bk, local, d->info.name,
                      (unsigned long long)d->info.local_mem_bytes);
    char opts[160];
    snprintf(opts, sizeof opts, "-DBM=%d -DBN=%d -DBK=%d -DWM=%d -DWN=%d -DSTAGES=%d%s", t->bm,
             t->bn, t->bk, t->wm, t->wn, t->stages, emulated ? "" : " -DCT_MMA_NV_PTX");
    return ct__gemm_kernel(d, emulated ? "mma-emulated" : "mma", "gemm_mma", opts, "ct_gemm_mma",
                           (size_t)tile_threads(t), k);
}

ct_status ct__gemm_mma_run(ct_device *d, const ct_gemm_desc *g, int emulated, ct_event **ev) {
    int tile = g->tile ? g->tile : ct__gemm_pick_tile(d, g, kTiles[0].bm, kTiles[0].bn);
    const mma_tile *t = &kTiles[tile - 1];
    cl_kernel k = NULL;
    ct_status st = get_kernel(d, t, emulated, &k);
    if (st == CT_OK) st = ct__gemm_kernel_args(d, k, g, 8);
    if (st != CT_OK) return st;
    size_t nt = (size_t)tile_threads(t), batch = g->batch;
    size_t global[3] = {nt * ((g->n + t->bn - 1) / t->bn), (g->m + t->bm - 1) / t->bm, batch};
    size_t local[3] = {nt, 1, 1};
    return ct_kernel_launch(d, k, 3, global, local, ev);
}

/* ---------------------------------------------------------------- the probe */

/* The probe's products: op(A) PM x PK, op(B) PK x PN, PB of them, small integers (every partial
 * sum exact in fp32 whatever the order). Stored rows are 44 (K), 33 (M) and 23 (N) long, so a
 * block's last 16-byte cp.async chunk of a row carries 8, 2 and 14 bytes (src-size, the rest
 * zero-filled); K = 44 is a full K step of 32 and a partial one. Two forms, each in all four
 * transposes and every block shape: "chunks", every stored row PLD (48) apart, batch matrices
 * PLD * PLD apart (all 16-byte aligned: cp.async), C fp32 and beta 0 over NaN; "elements",
 * leading dimensions PLD_ODD (45: element copies), C bf16 and beta 1 over small integers (read,
 * then the exact sum rounded once). Every element outside the matrices is a NaN, so a read of
 * padding shows. */
enum { PM = 33, PN = 23, PK = 44, PB = 2, PLD = 48, PLD_ODD = 45, PSTRIDE = PLD * PLD };

static float probe_a(int z, int i, int p) { return (float)((i * 3 + p * 5 + z * 2) % 7 - 3); }
static float probe_b(int z, int p, int j) { return (float)((p * 2 + j * 7 + z) % 5 - 2); }
static float probe_c(int z, int i, int j) { return (float)((i + j * 2 + z * 3) % 5 - 2); }

/* The probe's products on pd, a device opened for it alone. CT_OK when every one is exact; else
 * the status with the reason in why; *ran says whether the failure came after the first kernel
 * was built (before it, nothing was learnt about the path). */
static ct_status probe_on(ct_device *pd, int emulated, char *why, size_t len, int *ran) {
    ct_status st = CT_OK;
    const char *name = emulated ? "mma-emulated" : "mma";
    ct_buffer *ba = NULL, *bb = NULL, *bc = NULL;
    const size_t nab = (size_t)PB * PSTRIDE, nc = (size_t)PB * PM * PN;
    uint16_t *ha = NULL, *hb = NULL, *hc16 = NULL;
    float *hc = NULL;
    const char *what = "allocating its buffers";
    *ran = 0;
    ha = ct_malloc(2 * nab), hb = ct_malloc(2 * nab), hc = ct_malloc(4 * nc);
    hc16 = (uint16_t *)hc;
    if (!ha || !hb || !hc) {
        st = CT_ERR(&pd->err, CT_ERR_NOMEM, "out of host memory");
        goto cleanup;
    }
    CT_CHECK(ct_buffer_alloc(pd, CT_MEM_WORKSPACE, "mma probe A", 2 * nab, &ba));
    CT_CHECK(ct_buffer_alloc(pd, CT_MEM_WORKSPACE, "mma probe B", 2 * nab, &bb));
    CT_CHECK(ct_buffer_alloc(pd, CT_MEM_WORKSPACE, "mma probe C", 4 * nc, &bc));
    for (int tile = 1; tile <= NTILES; tile++)
        for (int form = 0; form < 2; form++)
            for (int tr = 0; tr < 4; tr++) {
                int ta = tr >> 1, tb = tr & 1, cb = form == 1;
                size_t ld = form ? PLD_ODD : PLD;
                for (size_t e = 0; e < nab; e++) ha[e] = hb[e] = 0x7fc0; /* bf16 NaN */
                for (int z = 0; z < PB; z++) {
                    for (int i = 0; i < PM; i++)
                        for (int p = 0; p < PK; p++)
                            ha[z * PSTRIDE + (ta ? p * ld + i : i * ld + p)] =
                                ct_bf16_from_f32(probe_a(z, i, p));
                    for (int p = 0; p < PK; p++)
                        for (int j = 0; j < PN; j++)
                            hb[z * PSTRIDE + (tb ? j * ld + p : p * ld + j)] =
                                ct_bf16_from_f32(probe_b(z, p, j));
                    for (int i = 0; i < PM; i++)
                        for (int j = 0; j < PN; j++) {
                            size_t e = ((size_t)z * PM + i) * PN + j;
                            if (cb) hc16[e] = ct_bf16_from_f32(probe_c(z, i, j));
                            else hc[e] = NAN;
                        }
                }
                what = "writing its operands";
                CT_CHECK(ct_buffer_write(ba, 0, ha, 2 * nab));
                CT_CHECK(ct_buffer_write(bb, 0, hb, 2 * nab));
                CT_CHECK(ct_buffer_write(bc, 0, hc, (cb ? 2 : 4) * nc));
                ct_gemm_desc g = {.ta = ta, .tb = tb, .m = PM, .n = PN, .k = PK, .batch = PB,
                                  .alpha = 1.0f, .beta = cb ? 1.0f : 0.0f,
                                  .a = ct_buffer_mem(ba), .lda = ld, .a_stride = PSTRIDE,
                                  .b = ct_buffer_mem(bb), .ldb = ld, .b_stride = PSTRIDE,
                                  .c = ct_buffer_mem(bc), .ldc = PN, .c_stride = PM * PN,
                                  .c_bf16 = cb, .tile = tile};
                /* from here on a failure is the path's: the kernel's build, its launch, its own
                 * execution status (a fault), the read after it, the product */
                *ran = 1;
                what = "building or running its kernel";
                ct_event *ev = NULL;
                CT_CHECK(ct__gemm_mma_run(pd, &g, emulated, &ev));
                CT_CHECK(ct_event_wait_release(ev));
                what = "reading its result";
                CT_CHECK(ct_buffer_read(bc, 0, hc, (cb ? 2 : 4) * nc));
                for (int z = 0; z < PB; z++)
                    for (int i = 0; i < PM; i++)
                        for (int j = 0; j < PN; j++) {
                            float want = cb ? probe_c(z, i, j) : 0.0f; /* beta 1 or 0 */
                            for (int p = 0; p < PK; p++)
                                want += probe_a(z, i, p) * probe_b(z, p, j);
                            size_t e = ((size_t)z * PM + i) * PN + j;
                            float got = cb ? ct_bf16_to_f32(hc16[e]) : hc[e];
                            if (cb) want = ct_bf16_to_f32(ct_bf16_from_f32(want));
                            if (got == want) continue;
                            snprintf(why, len,
                                     "the %s path's probe gave a wrong product on '%s' (block "
                                     "%s, ta=%d tb=%d, %dx%dx%d, batch %d, %s, ld %zu): "
                                     "C[%d][%d][%d] = %g, expected %g",
                                     name, pd->info.name, ct__gemm_mma_tile_str(tile), ta, tb, PM,
                                     PN, PK, PB, cb ? "C bf16" : "C fp32", ld, z, i, j,
                                     (double)got, (double)want);
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

/* The probe runs in a context and queue of its own on the same cl_device_id: on NVIDIA a kernel
 * that faults (a misaligned ldmatrix or cp.async, an instruction the driver's compiler
 * mistranslated) leaves its context unusable for good, CLBlast's programs in it included, so a
 * failing probe must not touch d's. Only when it passed are the kernels fetched on d (the program
 * cache on disk, which the probe's builds filled, makes that a load rather than a build). */
static ct_status probe(ct_device *d, int emulated, char *why, size_t len) {
    ct_device_opts o = ct_device_opts_default();
    o.apply_tuning = 0;
    o.cache_dir = d->cache_dir; /* "" (no disk cache) stays "" */
    o.row_groups = d->row_groups;
    ct_err err = {0};
    ct_device *pd = NULL;
    ct_status st = ct_device_open(&pd, &d->info, &o, &err);
    if (st != CT_OK) {
        /* no second context now says nothing about the path (ct_device_open's statuses are
         * memory or OpenCL's, never CT_ERR_UNSUPPORTED): not kept */
        snprintf(why, len, "the %s path's probe could not open a context of its own on '%s': "
                 "%.600s", emulated ? "mma-emulated" : "mma", d->info.name, err.msg);
        return st;
    }
    int ran = 0;
    st = probe_on(pd, emulated, why, len, &ran);
    ct_device_free(pd);
    /* before its first kernel the probe learnt nothing about the path: not kept */
    if (st != CT_OK) return ran ? ct__gemm_refusal(st) : st;
    for (int i = 0; i < NTILES; i++) {
        cl_kernel k = NULL;
        if ((st = get_kernel(d, &kTiles[i], emulated, &k)) != CT_OK) {
            snprintf(why, len, "the %s path passed its probe on '%s' but its kernel for block %s "
                     "failed on the device's own context: %.600s",
                     emulated ? "mma-emulated" : "mma", d->info.name,
                     ct__gemm_mma_tile_str(i + 1), d->err.msg);
            return ct__gemm_refusal(st);
        }
    }
    return CT_OK;
}

ct_status ct__gemm_mma_check(ct_device *d, int emulated, char *why, size_t len) {
    if (!emulated && !ct_gemm_mma_eligible(&d->info, why, len)) return CT_ERR_UNSUPPORTED;
    return probe(d, emulated, why, len);
}
