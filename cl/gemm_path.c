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

static ct_status tf32_check(ct_device *d, char *why, size_t len) {
    return ct__gemm_tf32_check(d, 0, why, len);
}
static ct_status tf32_run(ct_device *d, const ct_gemm_desc *g, ct_event **ev) {
    return ct__gemm_tf32_run(d, g, 0, ev);
}
static ct_status tf32_emulated_check(ct_device *d, char *why, size_t len) {
    return ct__gemm_tf32_check(d, 1, why, len);
}
static ct_status tf32_emulated_run(ct_device *d, const ct_gemm_desc *g, ct_event **ev) {
    return ct__gemm_tf32_run(d, g, 1, ev);
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
    [CT_GEMM_MMA_TF32] = {"mma-tf32", 0, tf32_check, tf32_run, ct__gemm_tf32_tiles,
                          ct__gemm_tf32_tile_str},
    [CT_GEMM_MMA_TF32_EMULATED] = {"mma-tf32-emulated", 0, tf32_emulated_check,
                                   tf32_emulated_run, ct__gemm_tf32_tiles,
                                   ct__gemm_tf32_tile_str},
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
    if ((st = ct__gemm_check(d, g, kPaths[p].bf16 ? 2 : 4, g->c_bf16 ? 2 : 4))) return st;
    return kPaths[p].run(d, g, ev);
}

/* ---------------------------------------------------------------- the plan a device's ops read */

static int size_matches(size_t want, size_t got) { return want == 0 || want == got; }

ct_gemm_path ct_gemm_plan_path(const ct_gemm_plan *p, const ct_gemm_desc *g, int bf16) {
    for (int i = 0; i < p->n && i < CT_GEMM_PLAN_MAX; i++) {
        const ct_gemm_choice *c = &p->shapes[i];
        if (ct_gemm_path_bf16(c->path) == (bf16 != 0) && c->ta == g->ta && c->tb == g->tb &&
            size_matches(c->m, g->m) && size_matches(c->n, g->n) && size_matches(c->k, g->k) &&
            size_matches(c->batch, g->batch))
            return c->path;
    }
    return bf16 ? p->bf16 : p->fp32;
}
