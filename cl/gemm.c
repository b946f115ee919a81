/* gemm.c - the fp32 GEMM through CLBlast (the CT_GEMM_CLBLAST path; gemm_path.c dispatches paths),
 * and the argument checks every path shares.
 *
 * Row-major, either operand transposed, alpha/beta, offsets and leading dimensions in floats,
 * and strided-batched for attention. Arguments are checked here first (so a bad call names the
 * matrix and the dimension rather than a bare CLBlast code); CLBlast codes become names. */
#include <stdio.h>

#include <clblast_c.h>

#include "ct_cl_impl.h"

/* esize: bytes per element; unit names the element in messages ("floats", "bf16 values"). */
static ct_status check_mat(ct_device *d, const char *what, cl_mem m, size_t off, size_t rows,
                           size_t cols, size_t ld, size_t stride, size_t batch, size_t esize,
                           const char *unit) {
    if (!m) return CT_ERR(&d->err, CT_ERR_ARG, "gemm: matrix %s is NULL", what);
    if (ld < cols || ld == 0)
        return CT_ERR(&d->err, CT_ERR_ARG,
                      "gemm: leading dimension of %s is %zu but a row holds %zu elements (row-major)",
                      what, ld, cols);
    size_t need = off + (batch - 1) * stride + (rows - 1) * ld + cols;
    size_t have = 0;
    clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof have, &have, NULL);
    if (have && need * esize > have)
        return CT_ERR(&d->err, CT_ERR_ARG,
                      "gemm: matrix %s needs %zu %s (offset %zu, %zu x %zu, ld %zu, batch %zu) "
                      "but its buffer holds %zu",
                      what, need, unit, off, rows, cols, ld, batch, have / esize);
    /* CLBlast 1.5.3 takes size_t but hands m, n, k, offsets and leading dimensions to its kernels
     * as int: past 2^31 elements it would compute wrong results. The other paths (64-bit
     * offsets) are held to the same bound: not tried above it. */
    if (need >= (size_t)1 << 31)
        return CT_ERR(&d->err, CT_ERR_UNSUPPORTED,
                      "gemm: matrix %s reaches element %zu (offset %zu, %zu x %zu, ld %zu, batch "
                      "%zu): a GEMM operand must lie below 2^31 elements of its buffer (CLBlast "
                      "indexes its kernels' arguments in int)",
                      what, need, off, rows, cols, ld, batch);
    return CT_OK;
}

static const char *unit_of(size_t esize) { return esize == 2 ? "bf16 values" : "floats"; }

/* A is stored (m x k) or, transposed, (k x m); likewise B. */
static ct_status gemm_common(ct_device *d, int ta, int tb, size_t m, size_t n, size_t k, cl_mem a,
                             size_t a_off, size_t lda, size_t a_stride, cl_mem b, size_t b_off,
                             size_t ldb, size_t b_stride, cl_mem c, size_t c_off, size_t ldc,
                             size_t c_stride, size_t batch, size_t ab_bytes, size_t c_bytes) {
    if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1))
        return CT_ERR(&d->err, CT_ERR_ARG, "gemm: ta and tb must be 0 or 1 (got %d, %d)", ta, tb);
    ct_status st;
    const char *u = unit_of(ab_bytes);
    if ((st = check_mat(d, "A", a, a_off, ta ? k : m, ta ? m : k, lda, a_stride, batch, ab_bytes,
                        u)))
        return st;
    if ((st = check_mat(d, "B", b, b_off, tb ? n : k, tb ? k : n, ldb, b_stride, batch, ab_bytes,
                        u)))
        return st;
    return check_mat(d, "C", c, c_off, m, n, ldc, c_stride, batch, c_bytes, unit_of(c_bytes));
}

ct_status ct__gemm_check(ct_device *d, const ct_gemm_desc *g, size_t ab_bytes, size_t c_bytes) {
    return gemm_common(d, g->ta, g->tb, g->m, g->n, g->k, g->a, g->a_off, g->lda, g->a_stride, g->b,
                       g->b_off, g->ldb, g->b_stride, g->c, g->c_off, g->ldc, g->c_stride,
                       g->batch, ab_bytes, c_bytes);
}

static ct_status clblast_fail(ct_device *d, CLBlastStatusCode rc, const char *what, size_t m,
                              size_t n, size_t k, int ta, int tb) {
    return CT_ERR(&d->err, CT_ERR_CLBLAST, "%s (m=%zu n=%zu k=%zu ta=%d tb=%d) on device %d failed: %s (%d)",
                  what, m, n, k, ta, tb, d->info.index, ct_clblast_error_name(rc), (int)rc);
}

ct_status ct_gemm(ct_device *d, int ta, int tb, size_t m, size_t n, size_t k, float alpha, cl_mem a,
                  size_t a_off, size_t lda, cl_mem b, size_t b_off, size_t ldb, float beta, cl_mem c,
                  size_t c_off, size_t ldc, ct_event **ev) {
    if (ev) *ev = NULL;
    if (m == 0 || n == 0) return ct_device_marker(d, ev); /* nothing to do; an event if asked */
    if (k == 0) {
        /* C = beta * C alone: CLBlast refuses k = 0 and no engine shape needs it. */
        return CT_ERR(&d->err, CT_ERR_ARG, "gemm: k = 0 is not supported (m=%zu n=%zu)", m, n);
    }
    ct_status st = gemm_common(d, ta, tb, m, n, k, a, a_off, lda, 0, b, b_off, ldb, 0, c, c_off, ldc,
                               0, 1, 4, 4);
    if (st != CT_OK) return st;
    ct_event *e = NULL;
    if ((st = ct__event_new(d, ev, &e, "gemm m=%zu n=%zu k=%zu ta=%d tb=%d", m, n, k, ta, tb)))
        return st;
    cl_command_queue q = d->queue;
    ct__gemm_key key = {0, ta, tb, m, n, k};
    int excl = ct__clblast_gemm_begin(d, &key);
    CLBlastStatusCode rc =
        CLBlastSgemm(CLBlastLayoutRowMajor, ta ? CLBlastTransposeYes : CLBlastTransposeNo,
                     tb ? CLBlastTransposeYes : CLBlastTransposeNo, m, n, k, alpha, a, a_off, lda, b,
                     b_off, ldb, beta, c, c_off, ldc, &q, e ? &e->ev : NULL);
    ct__clblast_gemm_end(d, &key, excl, rc == CLBlastSuccess);
    if (rc != CLBlastSuccess) {
        ct_event_release(e);
        return clblast_fail(d, rc, "CLBlastSgemm", m, n, k, ta, tb);
    }
    if (ev) *ev = e;
    return CT_OK;
}

ct_status ct_gemm_strided_batched(ct_device *d, int ta, int tb, size_t m, size_t n, size_t k,
                                  float alpha, cl_mem a, size_t a_off, size_t lda, size_t a_stride,
                                  cl_mem b, size_t b_off, size_t ldb, size_t b_stride, float beta,
                                  cl_mem c, size_t c_off, size_t ldc, size_t c_stride, size_t batch,
                                  ct_event **ev) {
    if (ev) *ev = NULL;
    if (m == 0 || n == 0 || batch == 0) return ct_device_marker(d, ev);
    if (k == 0) return CT_ERR(&d->err, CT_ERR_ARG, "batched gemm: k = 0 is not supported");
    ct_status st = gemm_common(d, ta, tb, m, n, k, a, a_off, lda, a_stride, b, b_off, ldb, b_stride,
                               c, c_off, ldc, c_stride, batch, 4, 4);
    if (st != CT_OK) return st;
    if (ta && a_off != 0 && batch > 1) {
        /* CLBlast 1.5.3's strided-batched GEMM computes a transposed A at a non-zero offset
         * wrongly with some parameter sets (seen with tune/pocl-cpu.txt when m is a multiple of
         * the tile, i.e. when A needs no padding); one GEMM per matrix is right. Tested in
         * tests/test_cl_gemm.c. */
        for (size_t i = 0; i < batch; i++) {
            st = ct_gemm(d, ta, tb, m, n, k, alpha, a, a_off + i * a_stride, lda, b,
                         b_off + i * b_stride, ldb, beta, c, c_off + i * c_stride, ldc,
                         i + 1 == batch ? ev : NULL);
            if (st != CT_OK) return st;
        }
        return CT_OK;
    }
    ct_event *e = NULL;
    if ((st = ct__event_new(d, ev, &e, "batched gemm m=%zu n=%zu k=%zu ta=%d tb=%d batch=%zu", m, n,
                            k, ta, tb, batch)))
        return st;
    cl_command_queue q = d->queue;
    ct__gemm_key key = {1, ta, tb, m, n, k};
    int excl = ct__clblast_gemm_begin(d, &key);
    CLBlastStatusCode rc = CLBlastSgemmStridedBatched(
        CLBlastLayoutRowMajor, ta ? CLBlastTransposeYes : CLBlastTransposeNo,
        tb ? CLBlastTransposeYes : CLBlastTransposeNo, m, n, k, alpha, a, a_off, lda, a_stride, b,
        b_off, ldb, b_stride, beta, c, c_off, ldc, c_stride, batch, &q, e ? &e->ev : NULL);
    ct__clblast_gemm_end(d, &key, excl, rc == CLBlastSuccess);
    if (rc != CLBlastSuccess) {
        ct_event_release(e);
        return clblast_fail(d, rc, "CLBlastSgemmStridedBatched", m, n, k, ta, tb);
    }
    if (ev) *ev = e;
    return CT_OK;
}
