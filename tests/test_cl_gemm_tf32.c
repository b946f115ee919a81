/* test_cl_gemm_tf32 - the fp32 GEMM with tf32 operands (--tf32 1; cl/kernels/gemm_mma_tf32.cl),
 * through its portable stand-ins on any device (mma-tf32-emulated) and through the real
 * instructions where the device has them (mma-tf32: NVIDIA sm_80+).
 *
 * 1. The rounding, exactly: K = 1 products against 1 give the rounded operand itself, and
 *    cvt.rna.tf32.f32 rounds to nearest with ties AWAY from zero (PTX ISA: .rna), so
 *    1 + 2^-11 (a tie) gives 1 + 2^-10 where ties-to-even would give 1; 1 + 3 * 2^-11 gives
 *    1 + 2^-9 (a tie, away = even here); 1 + 2^-11 + 2^-23 rounds up; 1 + 2^-11 - 2^-23 rounds
 *    down; the negatives mirror; the largest finite fp32 rounds to infinity; 0, infinity pass.
 * 2. Products against a double reference computed on the tf32-rounded inputs (rounded here by
 *    frexp/ldexp arithmetic, not the kernel's bit trick): GPT-2's products scaled down (C 64, 4
 *    heads of 16, T 32, B 2: every transpose and batched shape the model runs) and odd shapes
 *    (edges 1, 7, 17, 33, 65, 100, 130 in M, N and K, batch up to 3, all four transposes, beta 0
 *    over NaN and 1, alpha -0.5, packed, odd and 16-byte-aligned padded layouts: element copies
 *    and cp.async chunks), in every block shape. NaN fills every element outside the matrices.
 *    The inputs have full 24-bit significands, so rounding matters: each shape also counts the
 *    elements whose error against the unrounded (fp32) reference exceeds the tolerance, which
 *    must be some (the operands really were rounded) on the larger products.
 *
 * Tolerance, per element: products of two tf32 (11-bit significands) are exact in fp32, so the
 * reference on rounded inputs is exact but for double's own rounding. K additions in fp32 err by
 * at most (K - 1) u sum|a b| (u = 2^-24), the epilogue (alpha * s, beta * c, their sum) by 3 u
 * more of M = |alpha| sum|a b| + |beta c|; tensor cores may truncate inside an mma, which at
 * most doubles each step: |err| <= 2 (K + 2) u M. A wrong rounding (ties to even, truncation,
 * none) or a wrong fragment index gives errors of the order of 2^-11 M or M, far past it. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_cl.h"
#include "ct_test.h"
#include "ct_test_dev.h"

/* Round to tf32 by arithmetic: x = f 2^e, f in [0.5, 1); keep 11 significant bits of f, the
 * half-way case away from zero; past the largest finite fp32 it is infinity (as the bits say). */
static float ref_tf32(float x) {
    if (x == 0.0f || !isfinite(x)) return x;
    int e;
    double f = frexp(fabs((double)x), &e);
    double r = floor(f * 2048.0 + 0.5) / 2048.0; /* 11 bits: the implicit one and 10 */
    double v = ldexp(r, e);
    if (v > (double)3.4028234663852886e38) v = INFINITY;
    return (float)(x < 0 ? -v : v);
}

static unsigned g_seed = 7;
static float rnd(void) { /* in [-1, 1) with a full 24-bit significand most of the time */
    g_seed = g_seed * 1664525u + 1013904223u;
    unsigned a = g_seed >> 8;
    g_seed = g_seed * 1664525u + 1013904223u;
    return (float)(((double)a + (double)(g_seed >> 8) / 16777216.0) / 8388608.0 - 1.0);
}

static ct_status gemm(ct_device *d, ct_gemm_path path, int tile, const float *A, size_t na,
                      const float *B, size_t nb, float *C, size_t nc, ct_gemm_desc g) {
    ct_buffer *bA = NULL, *bB = NULL, *bC = NULL;
    ct_status st = ct_buffer_alloc(d, CT_MEM_WORKSPACE, "A", na * 4, &bA);
    if (!st) st = ct_buffer_alloc(d, CT_MEM_WORKSPACE, "B", nb * 4, &bB);
    if (!st) st = ct_buffer_alloc(d, CT_MEM_WORKSPACE, "C", nc * 4, &bC);
    if (!st) st = ct_buffer_write(bA, 0, A, na * 4);
    if (!st) st = ct_buffer_write(bB, 0, B, nb * 4);
    if (!st) st = ct_buffer_write(bC, 0, C, nc * 4);
    g.a = ct_buffer_mem(bA), g.b = ct_buffer_mem(bB), g.c = ct_buffer_mem(bC), g.tile = tile;
    if (!st) st = ct_gemm_run(d, path, &g, NULL);
    if (!st) st = ct_buffer_read(bC, 0, C, nc * 4);
    ct_buffer_free(bA), ct_buffer_free(bB), ct_buffer_free(bC);
    return st;
}

static void test_rounding(ct_device *d, ct_gemm_path path) {
    const float big = 3.4028234663852886e38f;
    const float x[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-11f + 0x1p-23f,
                       1.0f + 0x1p-11f - 0x1p-23f, -(1.0f + 0x1p-11f), -(1.0f + 3 * 0x1p-11f),
                       big, -big, 0.0f, INFINITY, 0x1p-126f * 1.5f, 1.0f + 0x1p-12f};
    const float want[] = {1.0f + 0x1p-10f, 1.0f + 0x1p-9f, 1.0f + 0x1p-10f, 1.0f,
                          -(1.0f + 0x1p-10f), -(1.0f + 0x1p-9f), INFINITY, -INFINITY, 0.0f,
                          INFINITY, 0x1p-126f * 1.5f, 1.0f};
    enum { NX = sizeof x / sizeof x[0] };
    float A[NX], B[1] = {1.0f}, C[NX];
    for (int i = 0; i < NX; i++) A[i] = x[i], C[i] = NAN;
    ct_gemm_desc g = {.m = NX, .n = 1, .k = 1, .batch = 1, .alpha = 1.0f, .lda = 1, .ldb = 1,
                      .ldc = 1};
    CT_ASSERT_OK(gemm(d, path, 0, A, NX, B, 1, C, NX, g), ct_device_errmsg(d));
    for (int i = 0; i < NX; i++) {
        CT_ASSERT_MSG(C[i] == want[i] || (isnan(C[i]) && isnan(want[i])),
                      "%s: tf32(%a) = %a, expected %a (cvt.rna: nearest, ties away from zero)",
                      ct_gemm_path_str(path), (double)x[i], (double)C[i], (double)want[i]);
        CT_ASSERT_MSG(ref_tf32(x[i]) == want[i], "the test's own rounding of %a gives %a",
                      (double)x[i], (double)ref_tf32(x[i]));
    }
}

typedef struct stats {
    int cases;
    double worst;
} stats;

/* One product; padded: 0 packed, 1 odd offsets and leading dimensions (element copies), 4
 * rounded to 4 floats (16-byte rows: cp.async with partial chunks at the edges). Returns how
 * many elements differ from the unrounded fp32 reference by more than the tolerance. */
static size_t run_case(ct_device *d, ct_gemm_path path, int tile, size_t m, size_t n, size_t k,
                       size_t batch, int ta, int tb, float alpha, float beta, int padded,
                       stats *rs) {
    size_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    size_t ao = 4, bo = 0, co = 0, lda = ac, ldb = bc, ldc = n;
    if (padded == 1) ao = 5, bo = 3, co = 7, lda += 3, ldb += 1, ldc += 2;
    if (padded == 4) bo = 8, co = 4, lda = (ac + 4) / 4 * 4, ldb = (bc + 4) / 4 * 4, ldc += 1;
    size_t as = ar * lda + (padded == 1 ? 9 : (size_t)padded), bs = br * ldb + (padded ? 5 : 0);
    if (padded == 4) bs = br * ldb + 4;
    size_t cs = m * ldc + (padded ? 3 : 0);
    size_t na = ao + batch * as, nb = bo + batch * bs, nc = co + batch * cs;
    float *A = malloc(na * 4), *B = malloc(nb * 4), *C0 = malloc(nc * 4), *C = malloc(nc * 4);
    for (size_t i = 0; i < na; i++) A[i] = NAN;
    for (size_t i = 0; i < nb; i++) B[i] = NAN;
    for (size_t z = 0; z < batch; z++) {
        for (size_t r = 0; r < ar; r++)
            for (size_t c = 0; c < ac; c++) A[ao + z * as + r * lda + c] = rnd();
        for (size_t r = 0; r < br; r++)
            for (size_t c = 0; c < bc; c++) B[bo + z * bs + r * ldb + c] = rnd();
    }
    for (size_t e = 0; e < nc; e++) {
        int inside = e >= co && (e - co) / cs < batch && (e - co) % cs / ldc < m &&
                     (e - co) % cs % ldc < n;
        C0[e] = C[e] = inside && beta != 0.0f ? rnd() : NAN;
    }
    ct_gemm_desc g = {.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .batch = batch,
                      .alpha = alpha, .beta = beta, .a_off = ao, .lda = lda, .a_stride = as,
                      .b_off = bo, .ldb = ldb, .b_stride = bs, .c_off = co, .ldc = ldc,
                      .c_stride = cs};
    char what[160];
    snprintf(what, sizeof what, "%s tile %d: m=%zu n=%zu k=%zu batch=%zu ta=%d tb=%d alpha=%g "
             "beta=%g %s", ct_gemm_path_str(path), tile, m, n, k, batch, ta, tb, alpha, beta,
             padded == 1 ? "padded" : padded ? "padded to 4" : "packed");
    ct_status st = gemm(d, path, tile, A, na, B, nb, C, nc, g);
    CT_ASSERT_MSG(st == CT_OK, "%s: %s", what, ct_device_errmsg(d));
    size_t bad = 0, unrounded_far = 0, outside = 0, bz = 0, bi = 0, bj = 0;
    double worst = 0, bgot = 0, bref = 0;
    for (size_t z = 0; st == CT_OK && z < batch; z++)
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < n; j++) {
                double s = 0, s32 = 0, mag = 0;
                for (size_t p = 0; p < k; p++) {
                    float a = A[ao + z * as + (ta ? p * lda + i : i * lda + p)];
                    float b = B[bo + z * bs + (tb ? j * ldb + p : p * ldb + j)];
                    double ra = ref_tf32(a), rb = ref_tf32(b);
                    s += ra * rb, s32 += (double)a * b, mag += fabs(ra * rb);
                }
                size_t e = co + z * cs + i * ldc + j;
                double c0 = beta == 0.0f ? 0.0 : C0[e], got = C[e];
                double ref = alpha * s + beta * c0, ref32 = alpha * s32 + beta * c0;
                double tol = 2.0 * (double)(k + 2) * 0x1p-24 * (fabs(alpha) * mag + fabs(beta * c0));
                double err = fabs(got - ref) / (tol + 1e-300);
                if (err > worst) worst = err;
                if (!(err <= 1.0) && bad++ == 0) bz = z, bi = i, bj = j, bgot = got, bref = ref;
                if (fabs(got - ref32) > tol) unrounded_far++;
            }
    for (size_t e = 0; st == CT_OK && e < nc; e++) {
        int inside = e >= co && (e - co) / cs < batch && (e - co) % cs / ldc < m &&
                     (e - co) % cs % ldc < n;
        if (!inside && memcmp(&C[e], &C0[e], 4)) outside++;
    }
    CT_ASSERT_MSG(bad == 0, "%s: %zu of %zu elements past the tolerance or NaN, the first "
                  "C[%zu][%zu][%zu] = %.9g, reference %.9g", what, bad, batch * m * n, bz, bi, bj,
                  bgot, bref);
    CT_ASSERT_MSG(outside == 0, "%s: %zu entries outside C were written", what, outside);
    rs->cases++;
    if (worst > rs->worst) rs->worst = worst;
    free(A), free(B), free(C0), free(C);
    return unrounded_far;
}

static void run_path(ct_device *d, ct_gemm_path path, int tile) {
    stats rs = {0, 0};
    double t0 = ct_time_now();
    size_t far = 0;
    /* GPT-2's products at C 64, B*T 64, 4 heads of 16, T 32, B 2, as the model runs them */
    static const struct {
        size_t m, n, k, batch;
        int ta, tb;
        float alpha, beta;
    } gpt[] = {
        {64, 192, 64, 1, 0, 1, 1.0f, 0.0f},  /* qkv forward: x W^T */
        {64, 64, 192, 1, 0, 0, 1.0f, 0.0f},  /* qkv dX: dY W */
        {192, 64, 64, 1, 1, 0, 1.0f, 1.0f},  /* qkv dW += dY^T X */
        {64, 256, 64, 1, 0, 1, 1.0f, 0.0f},  /* fc forward */
        {64, 64, 256, 1, 0, 0, 1.0f, 0.0f},  /* fc dX */
        {64, 256, 64, 1, 1, 0, 1.0f, 1.0f},  /* fcproj dW */
        {32, 32, 16, 8, 0, 1, 1.0f, 0.0f},   /* attention S = Q K^T */
        {32, 16, 32, 8, 0, 0, 1.0f, 0.0f},   /* attention O = P V, dQ = dS K */
    };
    for (size_t i = 0; i < sizeof gpt / sizeof gpt[0]; i++)
        far += run_case(d, path, tile, gpt[i].m, gpt[i].n, gpt[i].k, gpt[i].batch, gpt[i].ta,
                        gpt[i].tb, gpt[i].alpha, gpt[i].beta, 0, &rs);
    static const struct { size_t m, n, k, batch; int padded; } odd[] = {
        {1, 7, 17, 1, 1}, {17, 33, 100, 3, 4}, {65, 100, 7, 2, 4},
        {100, 65, 64, 1, 0}, {33, 1, 65, 2, 1}, {130, 140, 70, 1, 4}, /* blocks in M, N, K */
    };
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++)
        for (int t = 0; t < 4; t++)
            far += run_case(d, path, tile, odd[i].m, odd[i].n, odd[i].k, odd[i].batch, t >> 1,
                            t & 1, t == 3 ? -0.5f : 1.0f, (t == 1 || t == 3) ? 1.0f : 0.0f,
                            odd[i].padded, &rs);
    CT_ASSERT_MSG(far > 0, "%s tile %d: every element is within the tolerance of the unrounded "
                  "fp32 product: the operands were not rounded to tf32", ct_gemm_path_str(path),
                  tile);
    printf("  %-17s tile %d (%s): %d products, worst error %.3f of the tolerance; %zu elements "
           "farther than it from the unrounded product, %.2f s\n", ct_gemm_path_str(path), tile,
           ct_gemm_tile_str(path, tile), rs.cases, rs.worst, far, ct_time_now() - t0);
}

int main(void) {
    ct_err err = {0};
    ct_device *d = NULL;
    ct_test_devices ds;
    if (ct_test_devices_find(&ds, NULL, 1)) return ct_test_end("test_cl_gemm_tf32");
    ct_device_opts o = ct_device_opts_default();
    o.apply_tuning = 0;
    CT_ASSERT_OK(ct_device_open(&d, &ds.list[ds.pick[0]], &o, &err), err.msg);
    if (!d) return ct_test_end("test_cl_gemm_tf32");
    printf("device: %s (%s)\n", ds.list[ds.pick[0]].name, ds.list[ds.pick[0]].vendor);
    CT_ASSERT_EQ_INT(ct_gemm_path_bf16(CT_GEMM_MMA_TF32), 0);
    ct_gemm_path paths[] = {CT_GEMM_MMA_TF32_EMULATED, CT_GEMM_MMA_TF32};
    for (int p = 0; p < 2; p++) {
        if (ct_gemm_path_check(d, paths[p]) != CT_OK) {
            /* only the real instructions may be missing, and then for the vendor rule */
            CT_ASSERT_EQ_INT((int)paths[p], (int)CT_GEMM_MMA_TF32);
            if (!ct_gemm_mma_eligible(&ds.list[ds.pick[0]], NULL, 0))
                CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "NVIDIA");
            printf("  %s: %s\n", ct_gemm_path_str(paths[p]), ct_device_errmsg(d));
            continue;
        }
        test_rounding(d, paths[p]);
        for (int t = 1; t <= ct_gemm_path_tiles(paths[p]); t++) run_path(d, paths[p], t);
        ct_gemm_desc g = {.m = 4, .n = 4, .k = 4, .batch = 1, .lda = 4, .ldb = 4, .ldc = 4,
                          .c_bf16 = 1};
        float z[16] = {0};
        CT_ASSERT_EQ_INT(gemm(d, paths[p], 0, z, 16, z, 16, z, 16, g), CT_ERR_ARG); /* C fp32 */
    }
    ct_device_free(d);
    ct_test_devices_free(&ds);
    return ct_test_end("test_cl_gemm_tf32");
}
