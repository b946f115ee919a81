/* gemm_mma.cl - bf16 GEMM on NVIDIA's tensor cores: mma.sync m16n8k16 (bf16 in, fp32
 * accumulation), fragments loaded by ldmatrix from local memory that cp.async fills STAGES - 1
 * blocks ahead. Without CT_MMA_NV_PTX the same source runs on any device through the portable
 * stand-ins of mma_nv.clh (CT_GEMM_MMA_EMULATED): every index, tile and edge path below is then
 * exercised on PoCL, and only the four warp instructions differ on the GPU. The stand-ins' cp.async
 * lands only at the ct_cp_async_barrier after the wait that retires it, and poisons misaligned
 * addresses, so a pipeline missing its wait or its barrier fails on PoCL too.
 *
 * Row-major C = alpha * op(A) * op(B) + beta * C per batch matrix, op(A) M x K, op(B) K x N;
 * A stored M x K (ta = 0) or K x M (ta = 1), B stored K x N (tb = 0) or N x K (tb = 1), bf16;
 * C fp32 or, with c_bf16, bf16 (read for beta, written rounded to nearest even). beta == 0: C is
 * not read. Offsets, leading dimensions and strides in elements. `vec` (host: every A and B row
 * start 16-byte aligned) lets whole 8-element chunks go by cp.async; otherwise element copies.
 *
 * Compile-time shape (-D, from the host's tile table in cl/gemm_mma.c):
 *   BM BN BK  the work-group's block of C and the K step (BK a multiple of 16; BM, BN, BK
 *             multiples of 8)
 *   WM WN     a warp's block of C (WM a multiple of 16, WN of 16); (BM/WM) x (BN/WN) warps
 *   STAGES    local-memory buffers of A and B blocks (>= 2: one being computed on while the
 *             next STAGES - 1 are in flight)
 * Launch: global (NT * ceil(N/BN), ceil(M/BM), batch), local (NT, 1, 1), NT = 32 * warps.
 *
 * Local blocks keep the operand's stored orientation, so a transpose costs no shuffle: a block
 * is read by ldmatrix as stored (K-contiguous A rows, N-rows of a stored-transposed B) or with
 * .trans (M-contiguous A, N-contiguous B). Each row is padded by 8 bf16 (16 bytes), which puts
 * the 8 row addresses of an ldmatrix in 8 distinct 16-byte bank groups and keeps every row
 * 16-byte aligned for cp.async. Rows and columns past M, N and K are zero-filled, so the
 * products there are zero and only the store is masked. */

/* Fragment loops unrolled on the GPU, so accumulators and fragments live in registers (ptxas
 * then reports no stack frame); left rolled for the stand-ins, whose barriers would otherwise
 * multiply PoCL's compile time. Unrolling changes no result. */
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
#define PAD 8
#define CT_MAX(a, b) ((a) > (b) ? (a) : (b))
/* elements of one stage: the larger of the two orientations */
#define A_STAGE CT_MAX(BM * (BK + PAD), BK * (BM + PAD))
#define B_STAGE CT_MAX(BN * (BK + PAD), BK * (BN + PAD))

#if (BK % 16) || (WM % 16) || (WN % 16) || (BM % WM) || (BN % WN) || STAGES < 2
#error "gemm_mma.cl: tile shape breaks the rules at the top of the file"
#endif

/* The most cp.async copies a work-item has in flight (the stand-ins' queue, mma_nv.clh): STAGES - 1
 * stages, each this work-item's share of an A and a B block in 8-element chunks. */
#define CT_CDIV(a, b) (((a) + (b) - 1) / (b))
#define CT_CP_ASYNC_MAX ((STAGES - 1) * (CT_CDIV(BM * BK / 8, NT) + CT_CDIV(BN * BK / 8, NT)))

#include "bf16.clh"
#include "mma_nv.clh"

/* Copy the rows x cols block at (r0, c0) of the stored R x Cn matrix X (leading dimension ld)
 * into dst (row length dld), in 8-element chunks; what lies outside X is zero. */
CT_INLINE void load_block(ct_cp_async_queue *q, __local ushort *dst, uint dld,
                          __global const ushort *X, ulong ld, uint R, uint Cn, uint r0, uint c0,
                          uint rows, uint cols, int vec) {
    uint cpr = cols / 8, tid = (uint)get_local_id(0);
    for (uint c = tid; c < rows * cpr; c += NT) {
        uint r = c / cpr, cc = (c % cpr) * 8, gr = r0 + r, gc = c0 + cc;
        __local ushort *d = dst + r * dld + cc;
        uint valid = gr < R && gc < Cn ? min(Cn - gc, 8u) : 0u;
        __global const ushort *s = valid ? X + (ulong)gr * ld + gc : X;
        if (vec) {
            ct_cp_async16(q, d, s, valid);
        } else {
            for (uint e = 0; e < 8; e++) d[e] = e < valid ? s[e] : (ushort)0;
        }
    }
}

/* The A and B blocks of K step kt into stage `st`. */
CT_INLINE void load_stage(ct_cp_async_queue *q, __local ushort *sA, __local ushort *sB, uint st,
                          uint kt, int ta, int tb, __global const ushort *A, ulong lda,
                          __global const ushort *B, ulong ldb, uint M, uint N, uint K, uint m0,
                          uint n0, int vec) {
    uint k0 = kt * BK;
    __local ushort *a = sA + st * A_STAGE, *b = sB + st * B_STAGE;
    if (!ta) load_block(q, a, BK + PAD, A, lda, M, K, m0, k0, BM, BK, vec); /* (BM, BK) */
    else     load_block(q, a, BM + PAD, A, lda, K, M, k0, m0, BK, BM, vec); /* (BK, BM) */
    if (tb)  load_block(q, b, BK + PAD, B, ldb, N, K, n0, k0, BN, BK, vec); /* (BN, BK) */
    else     load_block(q, b, BN + PAD, B, ldb, K, N, k0, n0, BK, BN, vec); /* (BK, BN) */
}

__kernel __attribute__((reqd_work_group_size(NT, 1, 1)))
void ct_gemm_mma(const int ta, const int tb, const uint M, const uint N, const uint K,
                 const float alpha, const float beta,
                 __global const ushort *A, const ulong a_off, const ulong lda, const ulong a_stride,
                 __global const ushort *B, const ulong b_off, const ulong ldb, const ulong b_stride,
                 __global float *C, const ulong c_off, const ulong ldc, const ulong c_stride,
                 const int c_bf16, const int vec) {
    __local uint4 sA4[STAGES * A_STAGE / 8], sB4[STAGES * B_STAGE / 8]; /* 16-byte aligned */
#if CT_WARP_SCRATCH
    __local uint scratch_all[(NT / 32) * CT_WARP_SCRATCH];
#endif
    __local ushort *sA = (__local ushort *)sA4, *sB = (__local ushort *)sB4;

    const uint lane = ct_lane(), warp = ct_warp(), g = lane >> 2, t = lane & 3u;
    const uint j = lane >> 3, i8 = lane & 7u; /* ldmatrix: this lane gives row i8 of matrix j */
#if CT_WARP_SCRATCH
    __local uint *scratch = scratch_all + warp * CT_WARP_SCRATCH;
#else
    __local uint *scratch = 0; /* unused by the PTX bodies */
#endif
    const uint wm0 = (warp % WARPS_M) * WM, wn0 = (warp / WARPS_M) * WN; /* warp's block */
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
    for (uint s = 0; s < STAGES - 1; s++) { /* prologue: STAGES - 1 blocks in flight */
        if (s < ktiles)
            load_stage(&cpq, sA, sB, s, s, ta, tb, A, lda, B, ldb, M, N, K, m0, n0, vec);
        ct_cp_async_commit(&cpq);
    }
    for (uint kt = 0; kt < ktiles; kt++) {
        /* block kt has landed (this work-item's copies); the barrier makes everyone's visible
         * and ends every warp's reads of the stage the next load overwrites (kt - 1's) */
        ct_cp_async_wait(&cpq, STAGES - 2);
        ct_cp_async_barrier(&cpq);
        uint nk = kt + STAGES - 1;
        if (nk < ktiles)
            load_stage(&cpq, sA, sB, nk % STAGES, nk, ta, tb, A, lda, B, ldb, M, N, K, m0, n0,
                       vec);
        ct_cp_async_commit(&cpq); /* possibly empty: keeps the group count uniform for the wait */

        __local const ushort *a = sA + (kt % STAGES) * A_STAGE, *b = sB + (kt % STAGES) * B_STAGE;
        CT_UNROLL
        for (uint ks = 0; ks < BK; ks += 16) {
            uint af[MI][4], bfr[NI][2];
            /* A's 16 x 16 fragment mi: matrix j covers rows 8 (j & 1) .. +7, columns 8 (j >> 1)
             * .. +7 of it, i.e. registers a[0..3] of the layout */
            CT_UNROLL
            for (uint mi = 0; mi < MI; mi++) {
                uint r = wm0 + mi * 16 + i8 + (j & 1u) * 8, c = ks + (j >> 1) * 8;
                uint off = !ta ? r * (BK + PAD) + c                     /* stored (m, k) */
                               : (ks + i8 + (j >> 1) * 8) * (BM + PAD)   /* stored (k, m) */
                                     + wm0 + mi * 16 + (j & 1u) * 8;
                ct_ldsm_x4(a, off, ta, af[mi], scratch);
            }
            /* B for two n8 fragments at once: matrix j covers n 8 (j >> 1) .. +7 and k 8 (j & 1)
             * .. +7, i.e. b[0], b[1] of fragment 2p and then of 2p + 1 */
            CT_UNROLL
            for (uint p = 0; p < NI / 2; p++) {
                uint n = wn0 + p * 16 + i8 + (j >> 1) * 8, k = ks + (j & 1u) * 8;
                uint off = tb ? n * (BK + PAD) + k                            /* stored (n, k) */
                              : (ks + i8 + (j & 1u) * 8) * (BN + PAD)          /* stored (k, n) */
                                    + wn0 + p * 16 + (j >> 1) * 8;
                uint r4[4];
                ct_ldsm_x4(b, off, !tb, r4, scratch);
                bfr[2 * p][0] = r4[0], bfr[2 * p][1] = r4[1];
                bfr[2 * p + 1][0] = r4[2], bfr[2 * p + 1][1] = r4[3];
            }
            CT_UNROLL
            for (uint mi = 0; mi < MI; mi++)
                CT_UNROLL
                for (uint ni = 0; ni < NI; ni++) ct_mma_bf16(acc[mi][ni], af[mi], bfr[ni], scratch);
        }
    }

    /* Epilogue: D's element e of fragment (mi, ni) is row g (+8 for e >= 2), column 2t + e % 2. */
    /* offsets count elements of C's own type */
    __global ushort *Cb = (__global ushort *)C + c_off + z * c_stride;
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
                if (c_bf16) {
                    if (beta != 0.0f) v += beta * ct_bf16_to_f32(Cb[idx]);
                    Cb[idx] = ct_bf16_from_f32(v);
                } else {
                    if (beta != 0.0f) v += beta * C[idx];
                    C[idx] = v;
                }
            }
}
