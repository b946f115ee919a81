/* test_cl_gemm - the GEMM wrapper against a plain-C (double) reference on awkward shapes: sizes
 * 1, 7, 129, 1000, non-square, every transpose pair, alpha and beta != 0, offsets and padded
 * leading dimensions; the strided-batched wrapper likewise; bad arguments are refused clearly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_cl.h"
#include "ct_test.h"
#include "ct_test_dev.h"

static void fill(float *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 9) & 0xffff) / 65536.0f - 0.5f;
    }
}

/* C(m x n) = alpha op(A) op(B) + beta C, row-major with offsets/ld/strides; checks every entry. */
static void ref_and_check(const float *A, const float *B, const float *C0, const float *C,
                          size_t m, size_t n, size_t k, int ta, int tb, float alpha, float beta,
                          size_t ao, size_t lda, size_t as, size_t bo, size_t ldb, size_t bs,
                          size_t co, size_t ldc, size_t cs, size_t batch, const char *what) {
    double worst = 0;
    size_t wi = 0, wj = 0;
    for (size_t q = 0; q < batch; q++)
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < n; j++) {
                double s = 0, mag = 0;
                for (size_t p = 0; p < k; p++) {
                    double a = ta ? A[ao + q * as + p * lda + i] : A[ao + q * as + i * lda + p];
                    double b = tb ? B[bo + q * bs + j * ldb + p] : B[bo + q * bs + p * ldb + j];
                    s += a * b;
                    mag += fabs(a * b);
                }
                size_t e = co + q * cs + i * ldc + j;
                double ref = alpha * s + beta * C0[e];
                double err = fabs(C[e] - ref) / (fabs(alpha) * mag + fabs(beta * C0[e]) + 1e-30);
                if (!(err <= worst)) worst = err, wi = i, wj = j;
            }
    double tol = 2e-7 * (double)k + 1e-6;
    CT_ASSERT_MSG(worst <= tol, "%s: relative error %.3g at (%zu,%zu) > %.3g", what, worst, wi, wj, tol);
}

/* Entries of C outside the matrices (padding, gaps between batches) must be untouched. */
static void check_untouched(const float *C0, const float *C, size_t total, size_t m, size_t n,
                            size_t co, size_t ldc, size_t cs, size_t batch, const char *what) {
    size_t bad = 0;
    for (size_t e = 0; e < total; e++) {
        int inside = 0;
        if (e >= co) {
            size_t r = e - co, q = cs ? r / cs : 0, in = cs ? r % cs : r;
            inside = q < batch && in / ldc < m && in % ldc < n;
        }
        if (!inside && C[e] != C0[e]) bad++;
    }
    CT_ASSERT_MSG(bad == 0, "%s: %zu entries outside C were written", what, bad);
}

/* tight = 0: padded leading dimensions and gaps between batch matrices; 1: none (the layout
 * where CLBlast skips its padding pass). */
static int run_case_layout(ct_device *d, size_t m, size_t n, size_t k, int ta, int tb, float alpha,
                           float beta, size_t batch, int tight) {
    size_t ao = tight ? 16 : 3, bo = 5, co = tight ? 0 : 11; /* offsets, floats */
    size_t lda = (ta ? m : k) + (tight ? 0 : 2), ldb = (tb ? k : n) + !tight, ldc = n + (tight ? 0 : 3);
    size_t as = (ta ? k : m) * lda + (tight ? 0 : 7), bs = (tb ? n : k) * ldb + !tight,
           cs = m * ldc + (tight ? 0 : 2);
    size_t na = ao + batch * as, nb = bo + batch * bs, nc = co + batch * cs;
    float *A = malloc(na * 4), *B = malloc(nb * 4), *C0 = malloc(nc * 4), *C = malloc(nc * 4);
    fill(A, na, (unsigned)(m * 31 + k)), fill(B, nb, (unsigned)(n * 17 + k)), fill(C0, nc, 99);
    ct_buffer *bA = NULL, *bB = NULL, *bC = NULL;
    int ok = ct_buffer_alloc(d, CT_MEM_WORKSPACE, "A", na * 4, &bA) == CT_OK &&
             ct_buffer_alloc(d, CT_MEM_WORKSPACE, "B", nb * 4, &bB) == CT_OK &&
             ct_buffer_alloc(d, CT_MEM_WORKSPACE, "C", nc * 4, &bC) == CT_OK &&
             ct_buffer_write(bA, 0, A, na * 4) == CT_OK && ct_buffer_write(bB, 0, B, nb * 4) == CT_OK &&
             ct_buffer_write(bC, 0, C0, nc * 4) == CT_OK;
    CT_ASSERT_MSG(ok, "setup: %s", ct_device_errmsg(d));
    char what[128];
    snprintf(what, sizeof what, "m=%zu n=%zu k=%zu ta=%d tb=%d beta=%g batch=%zu tight=%d", m, n, k,
             ta, tb, beta, batch, tight);
    if (ok) {
        ct_status st = batch == 1
            ? ct_gemm(d, ta, tb, m, n, k, alpha, ct_buffer_mem(bA), ao, lda, ct_buffer_mem(bB), bo,
                      ldb, beta, ct_buffer_mem(bC), co, ldc, NULL)
            : ct_gemm_strided_batched(d, ta, tb, m, n, k, alpha, ct_buffer_mem(bA), ao, lda, as,
                                      ct_buffer_mem(bB), bo, ldb, bs, beta, ct_buffer_mem(bC), co,
                                      ldc, cs, batch, NULL);
        CT_ASSERT_MSG(st == CT_OK, "%s: %s", what, ct_device_errmsg(d));
        if (st == CT_OK && ct_buffer_read(bC, 0, C, nc * 4) == CT_OK) {
            ref_and_check(A, B, C0, C, m, n, k, ta, tb, alpha, beta, ao, lda, as, bo, ldb, bs, co,
                          ldc, cs, batch, what);
            check_untouched(C0, C, nc, m, n, co, ldc, cs, batch, what);
        }
    }
    ct_buffer_free(bA), ct_buffer_free(bB), ct_buffer_free(bC);
    free(A), free(B), free(C0), free(C);
    return ok;
}

static int run_case(ct_device *d, size_t m, size_t n, size_t k, int ta, int tb, float alpha,
                    float beta, size_t batch) {
    return run_case_layout(d, m, n, k, ta, tb, alpha, beta, batch, 0);
}

int main(int argc, char **argv) {
    /* part: "single" (one product per call, bad arguments), "batched" (strided batched), or
     * "all" (default); the two build different CLBlast programs, so on a cold kernel cache two
     * tests share the compiling */
    const char *part = argc > 1 ? argv[1] : "all";
    int single = !strcmp(part, "all") || !strcmp(part, "single");
    int batched = !strcmp(part, "all") || !strcmp(part, "batched");
    if (!single && !batched) {
        fprintf(stderr, "test_cl_gemm: unknown part '%s' (single, batched, all)\n", part);
        return 2;
    }
    ct_err err = {0};
    ct_device *d = NULL;
    ct_test_devices ds;
    if (ct_test_devices_find(&ds, NULL, 1)) return ct_test_end("test_cl_gemm");
    const ct_device_info *list = ds.list;
    int pick = ds.pick[0];
    ct_device_opts o = ct_device_opts_default(); /* stored/shipped tuning applied, as programs do */
    CT_ASSERT_OK(ct_device_open(&d, &list[pick], &o, &err), err.msg);
    if (!d) return ct_test_end("test_cl_gemm");
    printf("device: %s; clblast parameters: %s\n", list[pick].name, ct_device_tuning_source(d));

    static const size_t shapes[][3] = {{1, 1, 1},     {7, 1, 129},  {1, 7, 7},   {129, 7, 1000},
                                       {1000, 129, 7}, {7, 1000, 129}, {129, 129, 129}};
    for (size_t s = 0; single && s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++)
            run_case(d, shapes[s][0], shapes[s][1], shapes[s][2], t >> 1, t & 1, 1.5f,
                     (s + t) % 2 ? 0.75f : 0.0f, 1);
    if (batched) {
        /* strided batched: every transpose pair, odd sizes, gaps between matrices */
        for (int t = 0; t < 4; t++)
            run_case(d, 7, 129, 33, t >> 1, t & 1, 0.5f, t % 2 ? 1.0f : 0.0f, 5);
        run_case(d, 64, 64, 16, 0, 1, 1.0f, 0.0f, 12); /* attention-like: many small products */
        /* larger batched products at offsets, every transpose pair (CLBlast 1.5.3 computes a
         * transposed A at a non-zero offset wrongly once m >= 128; the wrapper must not) */
        for (int t = 0; t < 4; t++) {
            run_case(d, 130, 24, 200, t >> 1, t & 1, 1.0f, 0.0f, 3);
            run_case(d, 256, 8, 130, t >> 1, t & 1, 1.0f, 0.5f, 2);
            run_case_layout(d, 128, 32, 64, t >> 1, t & 1, 1.0f, 0.0f, 2, 1);
            run_case_layout(d, 256, 8, 64, t >> 1, t & 1, 1.0f, 0.0f, 3, 1);
        }
    }

    /* bad arguments are refused with a message, not a crash */
    ct_buffer *b = NULL;
    if (single)
        CT_ASSERT_OK(ct_buffer_alloc(d, CT_MEM_WORKSPACE, "small", 64 * 4, &b),
                     ct_device_errmsg(d));
    if (b) {
        cl_mem m = ct_buffer_mem(b);
        CT_ASSERT_EQ_INT(ct_gemm(d, 0, 0, 4, 4, 4, 1, m, 0, 3, m, 0, 4, 0, m, 0, 4, NULL), CT_ERR_ARG);
        CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "leading dimension of A");
        CT_ASSERT_EQ_INT(ct_gemm(d, 0, 0, 16, 16, 16, 1, m, 0, 16, m, 0, 16, 0, m, 0, 16, NULL), CT_ERR_ARG);
        CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "but its buffer holds 64");
        CT_ASSERT_EQ_INT(ct_gemm(d, 2, 0, 4, 4, 4, 1, m, 0, 4, m, 0, 4, 0, m, 0, 4, NULL), CT_ERR_ARG);
        CT_ASSERT_EQ_INT(ct_gemm(d, 0, 0, 4, 4, 4, 1, NULL, 0, 4, m, 0, 4, 0, m, 0, 4, NULL), CT_ERR_ARG);
        CT_ASSERT_EQ_INT(ct_gemm(d, 0, 0, 0, 4, 4, 1, m, 0, 4, m, 0, 4, 0, m, 0, 4, NULL), CT_OK);
    }
    ct_buffer_free(b);
    ct_device_free(d);
    ct_test_devices_free(&ds);
    return ct_test_end("test_cl_gemm");
}
