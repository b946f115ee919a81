/* gemm_mma_tf32.cl - fp32 GEMM on NVIDIA's tensor cores with tf32 operands: every element of A
 * and B rounded to tf32 (cvt.rna: 10-bit mantissa, nearest, ties away from zero) as its fragment
 * is loaded, mma.sync m16n8k8 with fp32 accumulation; local memory filled by cp.async STAGES - 1
 * blocks ahead, as gemm_mma.cl does. Without CT_MMA_NV_PTX the same source runs on any device
 * through the portable stand-ins of mma_nv.clh (CT_GEMM_MMA_TF32_EMULATED), the rounding
 * included, so PoCL runs every index, tile and edge path and gives the tf32 products.
 *
 * Row-major C = alpha * op(A) * op(B) + beta * C per batch matrix, as gemm_mma.cl, with A, B and
 * C fp32 (c_bf16 must be 0: the host refuses it). `vec`: every A and B row start 16-byte
 * aligned, so whole 4-float chunks go by cp.async; otherwise element copies.
 *
 * Compile-time shape (-D, from cl/gemm_mma_tf32.c's tile table): BM BN BK (BK a multiple of 8;
 * BM, BN multiples of 4), WM WN (WM a multiple of 16, WN of 8), STAGES >= 2. Launch: global
 * (NT * ceil(N/BN), ceil(M/BM), batch), local (NT, 1, 1), NT = 32 * (BM/WM) * (BN/WN).
 *
 * Local blocks keep the operand's stored orientation and each row is padded by 4 floats (16
 * bytes): the fragment loads are plain 32-bit reads (ldmatrix moves 16-bit elements), and with
 * that pad the 32 lanes of one read fall in 32 distinct banks in either orientation (row
 * stride = 4 mod 32 words; lane (g, t) at g * stride + t or t * stride + g). Rows and columns
 * past M, N and K are zero-filled, so only the store is masked. */

#ifdef CT_MMA_NV_PTX
#define CT_UNROLL _Pragma("unroll")
#else
#define CT_UNROLL
#endif

#define WARPS_M (BM / WM)
#define WARPS_N (BN / WN)
#define NT (32 * WARPS_M * WARPS_N)
#define MI (WM / 16) /* m16 fragments per warp */
#define NI (WN / 8)  /* n8 fragments per warp */
#define PADF 4
#define CT_MAX(a, b) ((a) > (b) ? (a) : (b))
#define A_STAGE CT_MAX(BM * (BK + PADF), BK * (BM + PADF)) /* floats */
#define B_STAGE CT_MAX(BN * (BK + PADF), BK * (BN + PADF))

#if (BK % 8) || (WM % 16) || (WN % 8) || (BM % WM) || (BN % WN) || STAGES < 2
#error "gemm_mma_tf32.cl: tile shape breaks the rules at the top of the file"
#endif

#define CT_CDIV(a, b) (((a) + (b) - 1) / (b))
#define CT_CP_ASYNC_MAX ((STAGES - 1) * (CT_CDIV(BM * BK / 4, NT) + CT_CDIV(BN * BK / 4, NT)))

#include "bf16.clh"
#include "mma_nv.clh"

/* Copy the rows x cols block at (r0, c0) of the stored R x Cn matrix X (leading dimension ld)
 * into dst (row length dld), in 4-float chunks (cp.async's 16 bytes, given to it as 8 ushort);
 * what lies outside X is zero. */
CT_INLINE void load_block(ct_cp_async_queue *q, __local float *dst, uint dld,
                          __global const float *X, ulong ld, uint R, uint Cn, uint r0, uint c0,
                          uint rows, uint cols, int vec) {
    uint cpr = cols / 4, tid = (uint)get_local_id(0);
    for (uint c = tid; c < rows * cpr; c += NT) {
        uint r = c / cpr, cc = (c % cpr) * 4, gr = r0 + r, gc = c0 + cc;
        __local float *d = dst + r * dld + cc;
        uint valid = gr < R && gc < Cn ? min(Cn - gc, 4u) : 0u;
        __global const float *s = valid ? X + (ulong)gr * ld + gc : X;
        if (vec) {
            ct_cp_async16(q, (__local ushort *)d, (__global const ushort *)s, 2 * valid);
        } else {
            for (uint e = 0; e < 4; e++) d[e] = e < valid ? s[e] : 0.0f;
        }
    }
}

CT_INLINE void load_stage(ct_cp_async_queue *q, __local float *sA, __local float *sB, uint st,
                          uint kt, int ta, int tb, __global const float *A, ulong lda,
                          __global const float *B, ulong ldb, uint M, uint N, uint K, uint m0,
                          uint n0, int vec) {
    uint k0 = kt * BK;
    __local float *a = sA + st * A_STAGE, *b = sB + st * B_STAGE;
    if (!ta) load_block(q, a, BK + PADF, A, lda, M, K, m0, k0, BM, BK, vec); /* (BM, BK) */
    else     load_block(q, a, BM + PADF, A, lda, K, M, k0, m0, BK, BM, vec); /* (BK, BM) */
    if (tb)  load_block(q, b, BK + PADF, B, ldb, N, K, n0, k0, BN, BK, vec); /* (BN, BK) */
    else     load_block(q, b, BN + PADF, B, ldb, K, N, k0, n0, BK, BN, vec); /* (BK, BN) */
}

__kernel __attribute__((reqd_work_group_size(NT, 1, 1)))
void ct_gemm_mma_tf32(const int ta, const int tb, const uint M, const uint N, const uint K,
                      const float alpha, const float beta,
                      __global const float *A, const ulong a_off, const ulong lda, const ulong a_stride,
                      __global const float *B, const ulong b_off, const ulong ldb, const ulong b_stride,
                      __global float *C, const ulong c_off, const ulong ldc, const ulong c_stride,
                      const int c_bf16, const int vec) {
    (void)c_bf16;
    __local uint4 sA4[STAGES * A_STAGE / 4], sB4[STAGES * B_STAGE / 4]; /* 16-byte aligned */
#if CT_WARP_SCRATCH
    __local uint scratch_all[(NT / 32) * CT_WARP_SCRATCH];
#endif
    __local float *sA = (__local float *)sA4, *sB = (__local float *)sB4;

    const uint lane = ct_lane(), warp = ct_warp(), g = lane >> 2, t = lane & 3u;
#if CT_WARP_SCRATCH
    __local uint *scratch = scratch_all + warp * CT_WARP_SCRATCH;
#else
    __local uint *scratch = 0;
#endif
    const uint wm0 = (warp % WARPS_M) * WM, wn0 = (warp / WARPS_M) * WN;
    const uint n0 = (uint)get_group_id(0) * BN, m0 = (uint)get_group_id(1) * BM;
    const ulong z = get_group_id(2);
    A += a_off + z * a_stride;
    B += b_off + z * b_stride;

    float acc[MI][NI][4];
    CT_UNROLL
    for (uint mi = 0; mi < MI; mi++)
        CT_UNROLL
        for (uint ni = 0; ni < NI; ni++)
            CT_UNROLL
            for (uint e = 0; e < 4; e++) acc[mi][ni][e] = 0.0f;

    ct_cp_async_queue cpq;
    ct_cp_async_init(&cpq);
    const uint ktiles = (K + BK - 1) / BK;
    for (uint s = 0; s < STAGES - 1; s++) {
        if (s < ktiles)
            load_stage(&cpq, sA, sB, s, s, ta, tb, A, lda, B, ldb, M, N, K, m0, n0, vec);
        ct_cp_async_commit(&cpq);
    }
    for (uint kt = 0; kt < ktiles; kt++) {
        ct_cp_async_wait(&cpq, STAGES - 2);
        ct_cp_async_barrier(&cpq);
        uint nk = kt + STAGES - 1;
        if (nk < ktiles)
            load_stage(&cpq, sA, sB, nk % STAGES, nk, ta, tb, A, lda, B, ldb, M, N, K, m0, n0,
                       vec);
        ct_cp_async_commit(&cpq);

        __local const float *a = sA + (kt % STAGES) * A_STAGE, *b = sB + (kt % STAGES) * B_STAGE;
        CT_UNROLL
        for (uint ks = 0; ks < BK; ks += 8) {
            uint af[MI][4], bfr[NI][2];
            CT_UNROLL
            for (uint mi = 0; mi < MI; mi++)
                CT_UNROLL
                for (uint i = 0; i < 4; i++) { /* a[i]: row g (+8 for i odd), column t (+4, i >= 2) */
                    uint r = wm0 + mi * 16 + g + (i & 1u) * 8, c = ks + t + (i >> 1) * 4;
                    af[mi][i] = ct_cvt_tf32(!ta ? a[r * (BK + PADF) + c] : a[c * (BM + PADF) + r]);
                }
            CT_UNROLL
            for (uint ni = 0; ni < NI; ni++)
                CT_UNROLL
                for (uint i = 0; i < 2; i++) { /* b[i]: row (k) t (+4), column (n) g */
                    uint n = wn0 + ni * 8 + g, k = ks + t + i * 4;
                    bfr[ni][i] = ct_cvt_tf32(tb ? b[n * (BK + PADF) + k] : b[k * (BN + PADF) + n]);
                }
            CT_UNROLL
            for (uint mi = 0; mi < MI; mi++)
                CT_UNROLL
                for (uint ni = 0; ni < NI; ni++) ct_mma_tf32(acc[mi][ni], af[mi], bfr[ni], scratch);
        }
    }

    C += c_off + z * c_stride;
    CT_UNROLL
    for (uint mi = 0; mi < MI; mi++)
        CT_UNROLL
        for (uint ni = 0; ni < NI; ni++)
            CT_UNROLL
            for (uint e = 0; e < 4; e++) {
                uint row = m0 + wm0 + mi * 16 + g + (e >> 1) * 8;
                uint col = n0 + wn0 + ni * 8 + 2 * t + (e & 1u);
                if (row >= M || col >= N) continue;
                ulong idx = (ulong)row * ldc + col;
                float v = alpha * acc[mi][ni][e];
                if (beta != 0.0f) v += beta * C[idx];
                C[idx] = v;
            }
}
