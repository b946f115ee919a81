/* gemm_path.c - the GEMM paths behind one call: which exist, whether each runs on a device (asked
 * once per device, the answer kept with its reason), and the dispatch.
 *
 * One table row per path: its name, its operand type, its check and its body. A vendor's
 * matrix-unit path (AMD MFMA/WMMA, Intel DPAS) is one more row with a check of the same shape
 * (vendor rule + probe) and a kernel written against stand-ins as gemm_mma.cl is; its emulated
 * form is a second row, so PoCL runs its index paths. The choice among rows per device and per
 * shape (measured, stored as a tuning record) belongs to the caller, which passes the path down. */
#include <stdio.h>
#include <string.h>

#include "ct_cl_impl.h"

static ct_status clblast_check(ct_device *d, char *why, size_t len) {
    (void)d, (void)why, (void)len;
    return CT_OK;
}

static ct_status clblast_run(ct_device *d, const ct_gemm_desc *g, ct_event **ev) {
    if (g->c_bf16)
        return CT_ERR(&d->err, CT_ERR_ARG, "gemm: the clblast path has no bf16 output (c_bf16)");
    if (g->tile != 0)
        return CT_ERR(&d->err, CT_ERR_ARG,
                      "gemm: the clblast path has no tile %d (its tiles are "
                      "CLBlast's tuned parameters)",
                      g->tile);
    if (g->batch == 1)
        return ct_gemm(d, g->ta, g->tb, g->m, g->n, g->k, g->alpha, g->a, g->a_off, g->lda, g->b,
                       g->b_off, g->ldb, g->beta, g->c, g->c_off, g->ldc, ev);
    return ct_gemm_strided_batched(d, g->ta, g->tb, g->m, g->n, g->k, g->alpha, g->a, g->a_off,
                                   g->lda, g->a_stride, g->b, g->b_off, g->ldb, g->b_stride,
                                   g->beta, g->c, g->c_off, g->ldc, g->c_stride, g->batch, ev);
}

static ct_status mma_check(ct_device *d, char *why, size_t len) {
    return ct__gemm_mma_check(d, 0, why, len);
}
static ct_status mma_run(ct_device *d, const ct_gemm_desc *g, ct_event **ev) {
    return ct__gemm_mma_run(d, g, 0, ev);
}
static ct_status mma_emulated_check(ct_device *d, char *why, size_t len) {
    return ct__gemm_mma_check(d, 1, why, len);
}
static ct_status mma_emulated_run(ct_device *d, const ct_gemm_desc *g, ct_event **ev) {
    return ct__gemm_mma_run(d, g, 1, ev);
}

typedef struct path_row {
    const char *name;
    int bf16;                                                /* A and B bf16 */
    ct_status (*check)(ct_device *d, char *why, size_t len); /* CT_OK, or the reason in why */
    ct_status (*run)(ct_device *d, const ct_gemm_desc *g, ct_event **ev);
    int (*tiles)(void);
    const char *(*tile_str)(int tile);
} path_row;

static int no_tiles(void) { return 0; }
static const char *no_tile_str(int tile) {
    (void)tile;
    return NULL;
}

static const path_row kPaths[CT_GEMM_PATH__COUNT] = {
    [CT_GEMM_CLBLAST] = {"clblast", 0, clblast_check, clblast_run, no_tiles, no_tile_str},
    [CT_GEMM_PORTABLE] = {"portable", 1, ct__gemm_portable_check, ct__gemm_portable_run,
                          ct__gemm_portable_tiles, ct__gemm_portable_tile_str},
    [CT_GEMM_MMA] = {"mma", 1, mma_check, mma_run, ct__gemm_mma_tiles, ct__gemm_mma_tile_str},
    [CT_GEMM_MMA_EMULATED] = {"mma-emulated", 1, mma_emulated_check, mma_emulated_run,
                              ct__gemm_mma_tiles, ct__gemm_mma_tile_str},
};

static int valid_path(ct_gemm_path p) { return (int)p >= 0 && p < CT_GEMM_PATH__COUNT; }

const char *ct_gemm_path_str(ct_gemm_path p) { return valid_path(p) ? kPaths[p].name : "?"; }

int ct_gemm_path_bf16(ct_gemm_path p) { return valid_path(p) && kPaths[p].bf16; }

ct_status ct_gemm_path_parse(const char *s, ct_gemm_path *out, ct_err *err) {
    char names[128] = "";
    size_t used = 0;
    for (int p = 0; p < CT_GEMM_PATH__COUNT; p++) {
        if (s && !strcmp(s, kPaths[p].name)) {
            *out = (ct_gemm_path)p;
            return CT_OK;
        }
        int w = snprintf(names + used, sizeof names - used, "%s%s", p ? ", " : "", kPaths[p].name);
        if (w > 0) used += (size_t)w < sizeof names - used ? (size_t)w : sizeof names - used - 1;
    }
    return CT_ERR(err, CT_ERR_ARG, "unknown GEMM path '%s' (the paths: %s)", s ? s : "(null)",
                  names);
}

int ct_gemm_path_tiles(ct_gemm_path p) { return valid_path(p) ? kPaths[p].tiles() : 0; }

const char *ct_gemm_tile_str(ct_gemm_path p, int tile) {
    return valid_path(p) ? kPaths[p].tile_str(tile) : NULL;
}

ct_status ct__gemm_refusal(ct_status st) {
    return st == CT_ERR_NOMEM || st == CT_ERR_DEVICE_MEM ? st : CT_ERR_UNSUPPORTED;
}

/* A check's answer is kept when it is one (CT_OK, or CT_ERR_UNSUPPORTED: the path does not run
 * here); any other status says only that the check could not be made this time (memory), so
 * the next call checks again. */
ct_status ct_gemm_path_check(ct_device *d, ct_gemm_path p) {
    if (!valid_path(p)) return CT_ERR(&d->err, CT_ERR_ARG, "gemm: no path %d", (int)p);
    if (d->gemm_state[p] == 0) {
        char why[sizeof d->gemm_why[0]] = "";
        ct_status st = kPaths[p].check(d, why, sizeof why);
        if (st != CT_OK && !why[0]) /* d->err.msg is not formatted into itself */
            snprintf(why, sizeof why, "%.700s", d->err.msg);
        if (st != CT_OK && st != CT_ERR_UNSUPPORTED)
            return CT_ERR(&d->err, st,
                          "%s (the check of the %s path could not be made; it was not kept, so "
                          "the next check tries again)",
                          why, kPaths[p].name);
        d->gemm_state[p] = st == CT_OK ? 1 : -1;
        snprintf(d->gemm_why[p], sizeof d->gemm_why[p], "%s", why);
    }
    if (d->gemm_state[p] > 0) return CT_OK;
    return CT_ERR(&d->err, CT_ERR_UNSUPPORTED, "%s", d->gemm_why[p]);
}

ct_status ct_gemm_run(ct_device *d, ct_gemm_path p, const ct_gemm_desc *g, ct_event **ev) {
    if (ev) *ev = NULL;
    if (!valid_path(p)) return CT_ERR(&d->err, CT_ERR_ARG, "gemm: no path %d", (int)p);
    if (d->gemm_state[p] == 0)
        return CT_ERR(&d->err, CT_ERR_STATE,
                      "gemm: the %s path has not been checked on device '%s': call "
                      "ct_gemm_path_check at setup, before its first GEMM (the check may build "
                      "kernels and run a probe, which has no place in the middle of a step)",
                      kPaths[p].name, d->info.name);
    if (d->gemm_state[p] < 0)
        return CT_ERR(&d->err, CT_ERR_UNSUPPORTED, "%s", d->gemm_why[p]);
    ct_status st;
    if (!g) return CT_ERR(&d->err, CT_ERR_ARG, "gemm: no descriptor");
    if (g->m == 0 || g->n == 0 || g->batch == 0) return ct_device_marker(d, ev);
    if (p == CT_GEMM_CLBLAST) return clblast_run(d, g, ev);
    if (g->k == 0)
        return CT_ERR(&d->err, CT_ERR_ARG, "gemm (%s): k = 0 is not supported (m=%zu n=%zu)",
                      kPaths[p].name, g->m, g->n);
    if (g->m > 0x7fffffff || g->n > 0x7fffffff || g->k > 0x7fffffff)
        return CT_ERR(&d->err, CT_ERR_ARG,
                      "gemm (%s): m, n and k must be below 2^31 (m=%zu n=%zu k=%zu)",
                      kPaths[p].name, g->m, g->n, g->k);
    int ntiles = kPaths[p].tiles();
    if (g->tile < 0 || g->tile > ntiles)
        return CT_ERR(&d->err, CT_ERR_ARG, "gemm (%s): no tile %d (the path has %d)",
                      kPaths[p].name, g->tile, ntiles);
    if ((st = ct__gemm_check(d, g, 2, g->c_bf16 ? 2 : 4))) return st;
    return kPaths[p].run(d, g, ev);
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

ct_status ct__gemm_bf16_args(ct_device *d, cl_kernel k, const ct_gemm_desc *g) {
    size_t batch = g->batch;
    /* cp.async moves 16-byte chunks: every row of A and B must start 16-byte aligned (buffers
     * themselves are aligned far beyond that by OpenCL) */
    int vec = g->a_off % 8 == 0 && g->lda % 8 == 0 && (batch == 1 || g->a_stride % 8 == 0) &&
              g->b_off % 8 == 0 && g->ldb % 8 == 0 && (batch == 1 || g->b_stride % 8 == 0);
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
