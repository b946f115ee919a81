/* test_cl_gemm_bf16 - the bf16 GEMM paths and the bf16 conversions.
 *
 * 1. fp32 -> bf16 on the device and on the host against a reference written differently (the two
 *    neighbouring bf16 values compared in double, ties to the even one): every bf16 pattern with
 *    low halves that make exact ties, just-below and just-above ties, and more; infinities, NaNs
 *    (payload only in the low half too), denormals, overflow to infinity. bf16 -> fp32 of all
 *    65536 patterns, bitwise.
 * 2. Every bf16 path that runs here - portable, and the mma kernel through its stand-ins in each
 *    block shape (and through the real instructions where the device has them) - against a double
 *    reference computed on the same bf16 inputs: GPT-2's products scaled down (C 64, 4 heads of
 *    16, T 32, B 2) and odd shapes (edges 1, 7, 17, 33, 65, 100 in M, N and K), batch > 1, all
 *    four transposes, beta 0 (over a C of NaN) and 1, C fp32 and bf16, packed and padded layouts
 *    (which also switch the kernel between 16-byte cp.async chunks and element copies). Every
 *    element of A, B and C outside the matrices (offsets, row padding, gaps between batch
 *    matrices) is a NaN: a kernel that reads one fails, and C's come back unchanged. An element
 *    of C fails when it is past the tolerance or NaN (counted, not found through a maximum).
 * 3. The mma path's rule: refused off NVIDIA sm_80+, with a message naming why; argument errors.
 * 4. Stochastic rounding (ct_bf16_from_f32_stochastic, the bf16 working weights' --bf16-round
 *    stochastic): the device kernel gives the host function's bits; every result is one of the
 *    value's two bf16 neighbours (bf16 values themselves unchanged; infinities and NaNs as
 *    nearest); over 65536 indices a value 0.3 of the way up rounds up 0.3 of the time (within
 *    5 sigma: unbiased), whatever its sign; the same (seed, step, index) draws alike, another
 *    step or seed differently.
 *
 * Tolerance, per element of C. The inputs are bf16, so every product a*b (8-bit by 8-bit
 * significands) is exact in fp32 and the double reference is exact but for its own 2^-53-relative
 * sums. The kernels add K products and then form alpha * s + beta * c in fp32: with u = 2^-24,
 * any order of summation errs by at most (K - 1) u sum|a b| (to first order), and the epilogue adds
 * at most 3 roundings of size u (alpha * s, beta * c, the sum): |err| <= (K + 2) u M, where
 * M = |alpha| sum|a b| + |beta c|. NVIDIA's tensor cores are reported to truncate rather than round
 * inside an mma and to align addends without extra bits, which at most doubles each step's error,
 * so the bound used is 2 (K + 2) u M (the test also runs on GPUs). A bf16 C then rounds once more,
 * to nearest with 8 significant bits (u_bf16 = 2^-8): |got - ref| <= t32 + 2^-8 (|ref| + t32).
 * A wrong fragment index gives errors of the order of M itself, far above the bound. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_cl.h"
#include "ct_test.h"
#include "ct_test_dev.h"

/* ---------------------------------------------------------------- conversions */

static float bits_f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Reference fp32 -> bf16 for a non-NaN input: the two bf16 neighbours of x (truncation, and one
 * step away from zero, 2^128 standing for the step past the largest finite value), the nearer
 * one in exact double arithmetic, on a tie the one with an even last bit. */
static uint16_t ref_round(uint32_t u) {
    uint16_t lo = (uint16_t)(u >> 16);
    if ((u & 0xffffu) == 0 || (u & 0x7fffffffu) == 0x7f800000u) return lo;
    uint16_t hi = (uint16_t)(lo + 1);
    double x = fabs((double)bits_f(u)), dlo = fabs((double)bits_f((uint32_t)lo << 16));
    double dhi = (hi & 0x7fffu) == 0x7f80u ? ldexp(1.0, 128)
                                           : fabs((double)bits_f((uint32_t)hi << 16));
    double below = x - dlo, above = dhi - x;
    if (below < above) return lo;
    if (above < below) return hi;
    return (lo & 1u) ? hi : lo;
}

static int is_nan16(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

static void test_conversions(ct_device *d) {
    static const uint16_t lows[] = {0x0000, 0x0001, 0x4000, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff};
    const size_t nl = sizeof lows / sizeof lows[0], n = 65536 * (nl + 1);
    uint32_t *in = malloc(n * 4);
    uint16_t *out = malloc(n * 2), *w16 = malloc(65536 * 2);
    uint32_t *w32 = malloc(65536 * 4);
    unsigned seed = 12345;
    for (size_t hi = 0; hi < 65536; hi++) {
        for (size_t l = 0; l < nl; l++) in[hi * (nl + 1) + l] = (uint32_t)(hi << 16) | lows[l];
        seed = seed * 1664525u + 1013904223u;
        in[hi * (nl + 1) + nl] = (uint32_t)(hi << 16) | (seed >> 16);
        w16[hi] = (uint16_t)hi;
    }
    ct_buffer *bi = NULL, *bo = NULL, *b16 = NULL, *b32 = NULL;
    int ok = ct_buffer_alloc(d, CT_MEM_WORKSPACE, "conv in", n * 4, &bi) == CT_OK &&
             ct_buffer_alloc(d, CT_MEM_WORKSPACE, "conv out", n * 2, &bo) == CT_OK &&
             ct_buffer_alloc(d, CT_MEM_WORKSPACE, "all bf16", 65536 * 2, &b16) == CT_OK &&
             ct_buffer_alloc(d, CT_MEM_WORKSPACE, "widened", 65536 * 4, &b32) == CT_OK &&
             ct_buffer_write(bi, 0, in, n * 4) == CT_OK &&
             ct_buffer_write(b16, 0, w16, 65536 * 2) == CT_OK &&
             ct_bf16_from_f32_enqueue(d, ct_buffer_mem(bi), 0, ct_buffer_mem(bo), 0, n, NULL) ==
                 CT_OK &&
             ct_bf16_to_f32_enqueue(d, ct_buffer_mem(b16), 0, ct_buffer_mem(b32), 0, 65536,
                                    NULL) == CT_OK &&
             ct_buffer_read(bo, 0, out, n * 2) == CT_OK &&
             ct_buffer_read(b32, 0, w32, 65536 * 4) == CT_OK;
    CT_ASSERT_MSG(ok, "conversion setup: %s", ct_device_errmsg(d));
    size_t bad_dev = 0, bad_host = 0, first = n;
    for (size_t i = 0; ok && i < n; i++) {
        uint32_t u = in[i];
        uint16_t host = ct_bf16_from_f32(bits_f(u));
        int good;
        if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: a NaN of the same sign */
            good = is_nan16(out[i]) && (out[i] >> 15) == (u >> 31);
        else
            good = out[i] == ref_round(u);
        if (!good && first == n) first = i;
        bad_dev += !good;
        bad_host += host != out[i];
    }
    CT_ASSERT_MSG(bad_dev == 0,
                  "device fp32->bf16: %zu of %zu wrong, first 0x%08x -> 0x%04x (want 0x%04x)",
                  bad_dev, n, first < n ? in[first] : 0, first < n ? out[first] : 0,
                  first < n ? ref_round(in[first]) : 0);
    CT_ASSERT_MSG(bad_host == 0, "host and device fp32->bf16 differ on %zu values", bad_host);
    size_t bad_w = 0;
    for (size_t h = 0; ok && h < 65536; h++) bad_w += w32[h] != (uint32_t)h << 16;
    CT_ASSERT_MSG(bad_w == 0, "device bf16->fp32: %zu of 65536 not exact", bad_w);

    /* the cases by name (host; the device agreed with the host on all of the above) */
    CT_ASSERT_EQ_INT(ct_bf16_from_f32(1.0f + 0x1p-8f), 0x3f80);          /* tie, even below */
    CT_ASSERT_EQ_INT(ct_bf16_from_f32(1.0f + 3 * 0x1p-8f), 0x3f82);      /* tie, even above */
    CT_ASSERT_EQ_INT(ct_bf16_from_f32(1.0f + 0x1p-8f + 0x1p-23f), 0x3f81); /* just past a tie */
    CT_ASSERT_EQ_INT(ct_bf16_from_f32(bits_f(0x7f7fffffu)), 0x7f80);     /* FLT_MAX -> inf */
    CT_ASSERT_EQ_INT(ct_bf16_from_f32(bits_f(0x7f7f7fffu)), 0x7f7f);     /* stays finite */
    CT_ASSERT_EQ_INT(ct_bf16_from_f32(-INFINITY), 0xff80);
    CT_ASSERT_EQ_INT(ct_bf16_from_f32(bits_f(0x00008000u)), 0x0000);     /* denormal tie, even */
    CT_ASSERT_EQ_INT(ct_bf16_from_f32(bits_f(0x00018000u)), 0x0002);     /* denormal tie, up */
    CT_ASSERT_EQ_INT(ct_bf16_from_f32(bits_f(0x807fffffu)), 0x8080);     /* denormal to normal */
    CT_ASSERT(is_nan16(ct_bf16_from_f32(bits_f(0x7f800001u))));          /* not an infinity */
    CT_ASSERT(is_nan16(ct_bf16_from_f32(bits_f(0xffc00000u))) &&
              (ct_bf16_from_f32(bits_f(0xffc00000u)) >> 15) == 1);
    CT_ASSERT(ct_bf16_to_f32(0x3f80) == 1.0f && isinf(ct_bf16_to_f32(0xff80)));
    ct_buffer_free(bi), ct_buffer_free(bo), ct_buffer_free(b16), ct_buffer_free(b32);
    free(in), free(out), free(w16), free(w32);
}

/* ---------------------------------------------------------------- GEMM */

static unsigned g_seed = 1;
static float rnd(void) { /* k / 4096 in [-1, 1): bf16-exact after rounding to 8 bits or not */
    g_seed = g_seed * 1664525u + 1013904223u;
    return (float)((int)(g_seed >> 19) - 4096) / 4096.0f;
}

typedef struct run_stats {
    int cases;
    double worst[2]; /* largest |err| / tolerance seen, C fp32 and C bf16 */
} run_stats;

/* C = alpha op(A) op(B) + beta C on `path` (tile), compared element by element with the double
 * reference. padded 0: matrices packed (A at offset 8); 1: odd offsets, leading dimensions and
 * gaps between batch matrices (the kernel copies elements); 8: the same rounded to multiples of
 * 8 elements, so rows start 16-byte aligned and the mma kernel's cp.async takes partial chunks
 * at the edges (zero-filled past src-size). Every element of A, B and C that no matrix covers
 * (the offset, row padding past the stored columns, gaps between batch matrices) holds a NaN, so
 * a kernel that reads one spreads it into C and fails; C's must also come back unchanged. */
static void run_case(ct_device *d, ct_gemm_path path, int tile, size_t m, size_t n, size_t k,
                     size_t batch, int ta, int tb, float alpha, float beta, int c_bf16, int padded,
                     run_stats *rs) {
    size_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    size_t ao = 8, bo = 0, co = 0, lda = ac, ldb = bc, ldc = n, as, bs, cs;
    if (padded == 1) ao = 5, bo = 3, co = 7, lda += 3, ldb += 1, ldc += 2;
    if (padded == 8) bo = 16, co = 4, lda = (ac + 8) / 8 * 8, ldb = (bc + 8) / 8 * 8, ldc += 1;
    as = ar * lda + (padded == 1 ? 9 : (size_t)padded);
    bs = br * ldb + (padded == 1 ? 5 : (size_t)padded);
    cs = m * ldc + (padded ? 3 : 0);
    size_t na = ao + batch * as, nb = bo + batch * bs, nc = co + batch * cs, ce = c_bf16 ? 2 : 4;
    uint16_t *A = malloc(na * 2), *B = malloc(nb * 2);
    unsigned char *C0 = malloc(nc * ce), *C = malloc(nc * ce);
    for (size_t i = 0; i < na; i++) A[i] = 0x7fc0; /* bf16 NaN wherever no matrix lies */
    for (size_t i = 0; i < nb; i++) B[i] = 0x7fc0;
    for (size_t z = 0; z < batch; z++) {
        for (size_t r = 0; r < ar; r++)
            for (size_t c = 0; c < ac; c++) A[ao + z * as + r * lda + c] = ct_bf16_from_f32(rnd());
        for (size_t r = 0; r < br; r++)
            for (size_t c = 0; c < bc; c++) B[bo + z * bs + r * ldb + c] = ct_bf16_from_f32(rnd());
    }
    for (size_t e = 0; e < nc; e++) { /* NaN outside C's matrices, and inside them for beta 0 */
        int inside = 0;
        if (e >= co) {
            size_t r = e - co, z = r / cs, in = r % cs;
            inside = z < batch && in / ldc < m && in % ldc < n;
        }
        float v = inside && beta != 0.0f ? rnd() : NAN;
        if (c_bf16) ((uint16_t *)C0)[e] = ct_bf16_from_f32(v);
        else ((float *)C0)[e] = v;
    }
    char what[160];
    snprintf(what, sizeof what, "%s tile %d: m=%zu n=%zu k=%zu batch=%zu ta=%d tb=%d beta=%g %s %s",
             ct_gemm_path_str(path), tile, m, n, k, batch, ta, tb, beta,
             c_bf16 ? "C bf16" : "C fp32",
             padded == 1 ? "padded" : padded ? "padded to 8" : "packed");
    ct_buffer *bA = NULL, *bB = NULL, *bC = NULL;
    int ok = ct_buffer_alloc(d, CT_MEM_WORKSPACE, "A", na * 2, &bA) == CT_OK &&
             ct_buffer_alloc(d, CT_MEM_WORKSPACE, "B", nb * 2, &bB) == CT_OK &&
             ct_buffer_alloc(d, CT_MEM_WORKSPACE, "C", nc * ce, &bC) == CT_OK &&
             ct_buffer_write(bA, 0, A, na * 2) == CT_OK &&
             ct_buffer_write(bB, 0, B, nb * 2) == CT_OK &&
             ct_buffer_write(bC, 0, C0, nc * ce) == CT_OK;
    CT_ASSERT_MSG(ok, "%s: setup: %s", what, ct_device_errmsg(d));
    if (ok) {
        ct_gemm_desc g = {.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .batch = batch,
                          .alpha = alpha, .beta = beta,
                          .a = ct_buffer_mem(bA), .a_off = ao, .lda = lda, .a_stride = as,
                          .b = ct_buffer_mem(bB), .b_off = bo, .ldb = ldb, .b_stride = bs,
                          .c = ct_buffer_mem(bC), .c_off = co, .ldc = ldc, .c_stride = cs,
                          .c_bf16 = c_bf16, .tile = tile};
        ct_status st = ct_gemm_run(d, path, &g, NULL);
        CT_ASSERT_MSG(st == CT_OK, "%s: %s", what, ct_device_errmsg(d));
        ok = st == CT_OK && ct_buffer_read(bC, 0, C, nc * ce) == CT_OK;
    }
    /* bad: past the tolerance, or not a number at all (NaN compares false with everything, so it
     * is counted on its own, never through a running maximum) */
    double worst = 0, bgot = 0, bref = 0;
    size_t bad = 0, bz = 0, bi = 0, bj = 0, outside = 0;
    for (size_t z = 0; ok && z < batch; z++)
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < n; j++) {
                double s = 0, mag = 0;
                for (size_t p = 0; p < k; p++) {
                    double a = ct_bf16_to_f32(A[ao + z * as + (ta ? p * lda + i : i * lda + p)]);
                    double b = ct_bf16_to_f32(B[bo + z * bs + (tb ? j * ldb + p : p * ldb + j)]);
                    s += a * b;
                    mag += fabs(a * b);
                }
                size_t e = co + z * cs + i * ldc + j;
                double c0 = beta == 0.0f ? 0.0
                          : c_bf16 ? ct_bf16_to_f32(((uint16_t *)C0)[e]) : ((float *)C0)[e];
                double got = c_bf16 ? ct_bf16_to_f32(((uint16_t *)C)[e]) : ((float *)C)[e];
                double ref = alpha * s + beta * c0;
                double t32 =
                    2.0 * (double)(k + 2) * 0x1p-24 * (fabs(alpha) * mag + fabs(beta * c0));
                double tol = c_bf16 ? t32 + 0x1p-8 * (fabs(ref) + t32) : t32;
                double err = fabs(got - ref) / (tol + 1e-300);
                if (err > worst) worst = err;
                if (!(err <= 1.0) && bad++ == 0) bz = z, bi = i, bj = j, bgot = got, bref = ref;
            }
    /* nothing outside the matrices of C (offset, padding, gaps) changes, bit for bit */
    for (size_t e = 0; ok && e < nc; e++) {
        int inside = 0;
        if (e >= co) {
            size_t r = e - co, z = r / cs, in = r % cs;
            inside = z < batch && in / ldc < m && in % ldc < n;
        }
        if (!inside && memcmp(C + e * ce, C0 + e * ce, ce)) outside++;
    }
    CT_ASSERT_MSG(!ok || bad == 0,
                  "%s: %zu of %zu elements of C wrong (past the tolerance or NaN), the first "
                  "C[%zu][%zu][%zu] = %.9g, reference %.9g",
                  what, bad, batch * m * n, bz, bi, bj, bgot, bref);
    CT_ASSERT_MSG(outside == 0, "%s: %zu entries outside C were written", what, outside);
    rs->cases++;
    if (worst > rs->worst[c_bf16 != 0]) rs->worst[c_bf16 != 0] = worst;
    ct_buffer_free(bA), ct_buffer_free(bB), ct_buffer_free(bC);
    free(A), free(B), free(C0), free(C);
}

static void run_path(ct_device *d, ct_gemm_path path, int tile) {
    run_stats rs = {0, {0, 0}};
    double t0 = ct_time_now();
    /* GPT-2's products at C 64 (4C 256), B*T 64, 4 heads of 16, T 32, B 2: (m, n, k, batch, ta,
     * tb, alpha, beta, C bf16) as the model runs them (linear weights stored (out, in)) */
    static const struct {
        size_t m, n, k, batch;
        int ta, tb;
        float alpha, beta;
        int c_bf16;
    } gpt[] = {
        {64, 192, 64, 1, 0, 1, 1.0f, 0.0f, 1},   /* qkv forward: x W^T, activations in bf16 */
        {64, 64, 64, 1, 0, 0, 1.0f, 0.0f, 1},    /* attproj dX: dY W */
        {256, 64, 64, 1, 1, 0, 1.0f, 1.0f, 0},   /* fc dW += dY^T X (fp32 gradients) */
        {64, 64, 256, 1, 0, 1, 1.0f, 0.0f, 0},   /* fcproj forward */
        {32, 32, 16, 8, 0, 1, 0.25f, 0.0f, 0},   /* attention S = Q K^T / sqrt(hs) */
        {32, 16, 32, 8, 0, 0, 1.0f, 0.0f, 1},    /* attention O = P V */
        {32, 16, 32, 8, 1, 0, 1.0f, 1.0f, 0},    /* attention dV = P^T dO */
    };
    for (size_t i = 0; i < sizeof gpt / sizeof gpt[0]; i++)
        run_case(d, path, tile, gpt[i].m, gpt[i].n, gpt[i].k, gpt[i].batch, gpt[i].ta, gpt[i].tb,
                 gpt[i].alpha, gpt[i].beta, gpt[i].c_bf16, 0, &rs);
    /* odd shapes, each in all four transposes; beta and C's type change with the transpose, so
     * each shape meets beta 0 and 1 and both types */
    static const struct { size_t m, n, k, batch; int padded; } odd[] = {
        {1, 7, 17, 1, 1},   {17, 33, 100, 3, 8}, {65, 100, 7, 2, 8},
        {100, 65, 64, 1, 0}, {33, 1, 65, 2, 1}, {130, 260, 200, 2, 8}, /* blocks in M, N, K */
    };
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++)
        for (int t = 0; t < 4; t++)
            run_case(d, path, tile, odd[i].m, odd[i].n, odd[i].k, odd[i].batch, t >> 1, t & 1,
                     t == 3 ? -0.5f : 1.0f, (t == 1 || t == 3) ? 1.0f : 0.0f, t == 1 || t == 2,
                     odd[i].padded, &rs);
    printf("  %-13s tile %d (%s): %d products, worst error %.3f (C fp32) and %.3f (C bf16) of "
           "the tolerance, %.2f s\n", ct_gemm_path_str(path), tile, ct_gemm_tile_str(path, tile),
           rs.cases, rs.worst[0], rs.worst[1], ct_time_now() - t0);
}

static void test_stochastic(ct_device *d) {
    enum { M = 65536 };
    static const uint32_t special[] = {0x7f800000u, 0xff800000u, 0x7fc00001u, 0x7f7fffffu,
                                       0x00000001u, 0x80008000u, 0x3f800000u, 0xbf800000u};
    const size_t ns = sizeof special / sizeof special[0], n = 2 * (size_t)M + ns;
    /* 1.0 + 0.3 of a bf16 step, +-: rounds up (away from zero) with probability 0.3 */
    const uint32_t up3 = 0x3f800000u | (uint32_t)(0.3 * 65536);
    uint32_t *in = malloc(n * 4);
    uint16_t *dev = malloc(n * 2), *dev2 = malloc(n * 2);
    for (size_t i = 0; i < M; i++) in[i] = up3, in[M + i] = up3 | 0x80000000u;
    for (size_t i = 0; i < ns; i++) in[2 * M + i] = special[i];
    ct_buffer *bi = NULL, *bo = NULL;
    int ok = in && dev && dev2 &&
             ct_buffer_alloc(d, CT_MEM_WORKSPACE, "sr in", n * 4, &bi) == CT_OK &&
             ct_buffer_alloc(d, CT_MEM_WORKSPACE, "sr out", n * 2, &bo) == CT_OK &&
             ct_buffer_write(bi, 0, in, n * 4) == CT_OK &&
             ct_bf16_from_f32_stochastic_enqueue(d, ct_buffer_mem(bi), 0, ct_buffer_mem(bo), 0, n,
                                                 7, 3, 1000, NULL) == CT_OK &&
             ct_buffer_read(bo, 0, dev, n * 2) == CT_OK &&
             ct_bf16_from_f32_stochastic_enqueue(d, ct_buffer_mem(bi), 0, ct_buffer_mem(bo), 0, n,
                                                 7, 4, 1000, NULL) == CT_OK &&
             ct_buffer_read(bo, 0, dev2, n * 2) == CT_OK;
    CT_ASSERT_MSG(ok, "stochastic rounding setup: %s", ct_device_errmsg(d));
    size_t bad_host = 0, not_neighbour = 0, up = 0, upn = 0, same_step = 0, seeds = 0;
    for (size_t i = 0; ok && i < n; i++) {
        float x = bits_f(in[i]);
        uint16_t h = ct_bf16_from_f32_stochastic(x, 7, 3, 1000 + i);
        bad_host += is_nan16(h) ? !is_nan16(dev[i]) : h != dev[i];
        seeds += h != ct_bf16_from_f32_stochastic(x, 8, 3, 1000 + i);
        if (i < 2 * (size_t)M) {
            uint16_t lo = (uint16_t)(in[i] >> 16);
            not_neighbour += dev[i] != lo && dev[i] != lo + 1;
            if (i < M) up += dev[i] == lo + 1;
            else upn += dev[i] == lo + 1;
            same_step += dev[i] == dev2[i];
        }
    }
    CT_ASSERT_MSG(bad_host == 0, "stochastic rounding: host and device differ on %zu of %zu",
                  bad_host, n);
    CT_ASSERT_MSG(not_neighbour == 0, "stochastic rounding: %zu results not a neighbour",
                  not_neighbour);
    double sigma = sqrt(0.3 * 0.7 / M);
    CT_ASSERT_MSG(fabs((double)up / M - 0.3) < 5 * sigma && fabs((double)upn / M - 0.3) < 5 * sigma,
                  "stochastic rounding: rounded up %.4f (+) and %.4f (-) of the time, 0.3 expected",
                  (double)up / M, (double)upn / M);
    /* two steps agree where both draws fall on the same side: 0.3^2 + 0.7^2 = 0.58 of the time */
    CT_ASSERT_MSG(fabs((double)same_step / (2 * M) - 0.58) < 0.02,
                  "stochastic rounding: steps 3 and 4 agree on %.4f of the draws (0.58 expected)",
                  (double)same_step / (2 * M));
    CT_ASSERT_MSG(seeds > 0, "stochastic rounding: seeds 7 and 8 draw alike everywhere");
    const size_t s0 = 2 * (size_t)M; /* the specials: as nearest, bf16 values unchanged */
    CT_ASSERT_EQ_INT(dev[s0 + 0], 0x7f80);
    CT_ASSERT_EQ_INT(dev[s0 + 1], 0xff80);
    CT_ASSERT(is_nan16(dev[s0 + 2]));
    CT_ASSERT(dev[s0 + 3] == 0x7f7f || dev[s0 + 3] == 0x7f80);
    CT_ASSERT(dev[s0 + 4] == 0x0000 || dev[s0 + 4] == 0x0001);
    CT_ASSERT(dev[s0 + 5] == 0x8000 || dev[s0 + 5] == 0x8001);
    CT_ASSERT_EQ_INT(dev[s0 + 6], 0x3f80);
    CT_ASSERT_EQ_INT(dev[s0 + 7], 0xbf80);
    ct_buffer_free(bi);
    ct_buffer_free(bo);
    free(in);
    free(dev);
    free(dev2);
}

static void test_rules(ct_device *d, const ct_device_info *info) {
    /* the vendor rule, from what a device reports */
    ct_device_info nv = {0};
    snprintf(nv.vendor, sizeof nv.vendor, "NVIDIA Corporation");
    snprintf(nv.name, sizeof nv.name, "NVIDIA H100 80GB HBM3");
    char why[512] = "";
    nv.nv_cc_major = 9, nv.nv_cc_minor = 0;
    CT_ASSERT_EQ_INT(ct_gemm_mma_eligible(&nv, why, sizeof why), 1);
    nv.nv_cc_major = 8;
    CT_ASSERT_EQ_INT(ct_gemm_mma_eligible(&nv, why, sizeof why), 1);
    nv.nv_cc_major = 7, nv.nv_cc_minor = 5;
    CT_ASSERT_EQ_INT(ct_gemm_mma_eligible(&nv, why, sizeof why), 0);
    CT_ASSERT_STR_CONTAINS(why, "compute capability 7.5");
    nv.nv_cc_major = 0;
    CT_ASSERT_EQ_INT(ct_gemm_mma_eligible(&nv, why, sizeof why), 0);
    CT_ASSERT_STR_CONTAINS(why, "does not report its compute capability");
    ct_device_info amd = {0};
    snprintf(amd.vendor, sizeof amd.vendor, "Advanced Micro Devices, Inc.");
    snprintf(amd.name, sizeof amd.name, "gfx90a");
    CT_ASSERT_EQ_INT(ct_gemm_mma_eligible(&amd, why, sizeof why), 0);
    CT_ASSERT_STR_CONTAINS(why, "needs an NVIDIA device of compute capability 8.0 or more");
    CT_ASSERT_STR_CONTAINS(why, "gfx90a");

    /* this device: refused by name unless it is NVIDIA sm_80+ */
    if (!ct_gemm_mma_eligible(info, NULL, 0)) {
        CT_ASSERT_EQ_INT(ct_gemm_path_check(d, CT_GEMM_MMA), CT_ERR_UNSUPPORTED);
        CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d),
                               "the mma path needs an NVIDIA device of compute capability 8.0");
        CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), info->name);
        ct_gemm_desc g = {.m = 1, .n = 1, .k = 1, .batch = 1};
        CT_ASSERT_EQ_INT(ct_gemm_run(d, CT_GEMM_MMA, &g, NULL), CT_ERR_UNSUPPORTED);
        CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), info->name);
        CT_ASSERT_EQ_INT(ct_gemm_path_check(d, CT_GEMM_MMA), CT_ERR_UNSUPPORTED); /* kept */
        CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), info->name);
    }

    /* a path is checked at one defined point: ct_gemm_run refuses one not checked yet (rather
     * than building kernels and probing in the middle of a step) */
    {
        ct_gemm_desc g = {.m = 1, .n = 1, .k = 1, .batch = 1};
        CT_ASSERT_EQ_INT(ct_gemm_run(d, CT_GEMM_PORTABLE, &g, NULL), CT_ERR_STATE);
        CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "call ct_gemm_path_check");
        CT_ASSERT_OK(ct_gemm_path_check(d, CT_GEMM_CLBLAST), ct_device_errmsg(d));
        CT_ASSERT_OK(ct_gemm_path_check(d, CT_GEMM_PORTABLE), ct_device_errmsg(d));
    }

    /* names */
    for (int p = 0; p < CT_GEMM_PATH__COUNT; p++) {
        ct_gemm_path q = CT_GEMM_CLBLAST;
        ct_err err = {0};
        CT_ASSERT_OK(ct_gemm_path_parse(ct_gemm_path_str((ct_gemm_path)p), &q, &err), err.msg);
        CT_ASSERT_EQ_INT(q, p);
    }
    ct_err err = {0};
    ct_gemm_path q;
    CT_ASSERT_EQ_INT(ct_gemm_path_parse("tensor", &q, &err), CT_ERR_ARG);
    for (int p = 0; p < CT_GEMM_PATH__COUNT; p++) /* the list of names, from the table */
        CT_ASSERT_STR_CONTAINS(err.msg, ct_gemm_path_str((ct_gemm_path)p));

    /* arguments */
    ct_buffer *b = NULL;
    CT_ASSERT_OK(ct_buffer_alloc(d, CT_MEM_WORKSPACE, "small", 64 * 2, &b), ct_device_errmsg(d));
    if (b) {
        cl_mem x = ct_buffer_mem(b);
        ct_gemm_desc g = {.m = 8, .n = 8, .k = 8, .batch = 1, .alpha = 1, .a = x, .lda = 8,
                          .b = x, .ldb = 8, .c = x, .ldc = 8, .c_bf16 = 1};
        CT_ASSERT_EQ_INT(ct_gemm_run(d, CT_GEMM_CLBLAST, &g, NULL), CT_ERR_ARG); /* no bf16 C */
        g.k = 0;
        CT_ASSERT_EQ_INT(ct_gemm_run(d, CT_GEMM_PORTABLE, &g, NULL), CT_ERR_ARG);
        g.k = 8, g.m = 0;
        CT_ASSERT_EQ_INT(ct_gemm_run(d, CT_GEMM_PORTABLE, &g, NULL), CT_OK);
        g.m = 8, g.tile = 5;
        CT_ASSERT_EQ_INT(ct_gemm_run(d, CT_GEMM_PORTABLE, &g, NULL), CT_ERR_ARG);
        g.tile = 0, g.lda = 4;
        CT_ASSERT_EQ_INT(ct_gemm_run(d, CT_GEMM_PORTABLE, &g, NULL), CT_ERR_ARG);
        CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "leading dimension of A");
        g.lda = 8, g.c_bf16 = 0; /* C as fp32 needs 256 bytes; the buffer has 128 */
        CT_ASSERT_EQ_INT(ct_gemm_run(d, CT_GEMM_PORTABLE, &g, NULL), CT_ERR_ARG);
        CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "matrix C needs 64 floats");
        g.c_bf16 = 1, g.m = 9; /* A as bf16: 72 values */
        CT_ASSERT_EQ_INT(ct_gemm_run(d, CT_GEMM_PORTABLE, &g, NULL), CT_ERR_ARG);
        CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "matrix A needs 72 bf16 values");
    }
    ct_buffer_free(b);
}

/* The mma-emulated path's check: a failure to allocate is returned and not kept (the next check
 * runs the probe again); the probe's buffers live in a context of its own (this device's memory
 * sees none of them), and once it passed the kernels are fetched on this device. */
static void test_probe(ct_device *d) {
    CT_ASSERT_EQ_INT(ct_alloc_count(), 0); /* (no hook yet) */
    static const unsigned kinds[] = {CT_ALLOC_DEVICE, CT_ALLOC_HOST};
    static const ct_status want[] = {CT_ERR_DEVICE_MEM, CT_ERR_NOMEM};
    for (int i = 0; i < 2; i++) {
        ct_alloc_fail_nth(1, kinds[i]);
        ct_status st = ct_gemm_path_check(d, CT_GEMM_MMA_EMULATED);
        int fired = ct_alloc_failed();
        ct_alloc_fail_nth(0, 0);
        CT_ASSERT_EQ_INT(fired, 1);
        CT_ASSERT_EQ_INT(st, want[i]);
        CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "not kept");
        ct_gemm_desc g = {.m = 1, .n = 1, .k = 1, .batch = 1};
        CT_ASSERT_EQ_INT(ct_gemm_run(d, CT_GEMM_MMA_EMULATED, &g, NULL), CT_ERR_STATE);
    }
    ct_device_mem_reset_peak(d);
    ct_mem_stats m0, m1;
    ct_program_cache_stats p0, p1;
    ct_device_mem_stats(d, &m0);
    ct_device_program_cache_stats(d, &p0);
    double t0 = ct_time_now();
    CT_ASSERT_OK(ct_gemm_path_check(d, CT_GEMM_MMA_EMULATED), ct_device_errmsg(d));
    printf("  mma-emulated probe: %.2f s\n", ct_time_now() - t0);
    ct_device_mem_stats(d, &m1);
    ct_device_program_cache_stats(d, &p1);
    CT_ASSERT_MSG(m1.total_peak == m0.total_peak,
                  "the probe allocated on the device's own context (peak %llu -> %llu bytes)",
                  (unsigned long long)m0.total_peak, (unsigned long long)m1.total_peak);
    int fetched = (p1.memory_hits + p1.disk_hits + p1.builds) -
                  (p0.memory_hits + p0.disk_hits + p0.builds);
    CT_ASSERT_MSG(fetched >= ct_gemm_path_tiles(CT_GEMM_MMA_EMULATED),
                  "after its probe the path's %d kernels were not fetched on the device (%d)",
                  ct_gemm_path_tiles(CT_GEMM_MMA_EMULATED), fetched);
}

/* batch 0 is nothing to do on every path that runs here, as in ct_gemm_strided_batched: C (here
 * the same buffer as A and B, all bf16 1.0) is neither read nor written */
static void test_batch0(ct_device *d) {
    ct_buffer *b = NULL;
    CT_ASSERT_OK(ct_buffer_alloc(d, CT_MEM_WORKSPACE, "ones", 64 * 2, &b), ct_device_errmsg(d));
    uint16_t ones[64], back[64];
    for (int i = 0; i < 64; i++) ones[i] = 0x3f80;
    static const ct_gemm_path paths[] = {CT_GEMM_CLBLAST, CT_GEMM_PORTABLE, CT_GEMM_MMA_EMULATED};
    for (size_t p = 0; b && p < sizeof paths / sizeof paths[0]; p++) {
        CT_ASSERT_OK(ct_buffer_write(b, 0, ones, sizeof ones), ct_device_errmsg(d));
        int f = paths[p] == CT_GEMM_CLBLAST; /* fp32: 32 values, 4 x 4 matrices */
        size_t e = f ? 4 : 8;
        cl_mem x = ct_buffer_mem(b);
        ct_gemm_desc g = {.m = e, .n = e, .k = e, .batch = 0, .alpha = 1, .a = x, .lda = e,
                          .b = x, .ldb = e, .c = x, .ldc = e, .c_bf16 = !f};
        ct_event *ev = NULL;
        CT_ASSERT_OK(ct_gemm_run(d, paths[p], &g, &ev), ct_device_errmsg(d));
        CT_ASSERT_OK(ct_event_wait_release(ev), ct_device_errmsg(d));
        CT_ASSERT_OK(ct_buffer_read(b, 0, back, sizeof back), ct_device_errmsg(d));
        CT_ASSERT_MSG(!memcmp(ones, back, sizeof ones), "%s: batch 0 wrote C",
                      ct_gemm_path_str(paths[p]));
    }
    ct_buffer_free(b);
}

int main(void) {
    ct_err err = {0};
    ct_device *d = NULL;
    ct_test_devices ds;
    if (ct_test_devices_find(&ds, NULL, 1)) return ct_test_end("test_cl_gemm_bf16");
    const ct_device_info *list = ds.list;
    int pick = ds.pick[0];
    ct_device_opts o = ct_device_opts_default();
    o.apply_tuning = 0; /* no CLBlast here */
    CT_ASSERT_OK(ct_device_open(&d, &list[pick], &o, &err), err.msg);
    if (!d) return ct_test_end("test_cl_gemm_bf16");
    printf("device: %s (%s)\n", list[pick].name, list[pick].vendor);

    double t0 = ct_time_now();
    test_conversions(d);
    printf("  conversions: %.2f s\n", ct_time_now() - t0);
    test_stochastic(d);
    test_rules(d, &list[pick]);
    test_probe(d);
    test_batch0(d);

    for (int t = 1; t <= ct_gemm_path_tiles(CT_GEMM_PORTABLE); t++)
        run_path(d, CT_GEMM_PORTABLE, t);
    for (int t = 1; t <= ct_gemm_path_tiles(CT_GEMM_MMA_EMULATED); t++)
        run_path(d, CT_GEMM_MMA_EMULATED, t);
    if (ct_gemm_path_check(d, CT_GEMM_MMA) == CT_OK)
        for (int t = 1; t <= ct_gemm_path_tiles(CT_GEMM_MMA); t++) run_path(d, CT_GEMM_MMA, t);
    else
        printf("  mma: %s\n", ct_device_errmsg(d));

    ct_device_free(d);
    ct_test_devices_free(&ds);
    return ct_test_end("test_cl_gemm_bf16");
}
