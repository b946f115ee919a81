/* gemm_bf16.cl - the portable bf16 GEMM: plain OpenCL C 1.2 for any device (CT_GEMM_PORTABLE).
 * The same contract and arguments as gemm_mma.cl's ct_gemm_mma (see there): row-major
 * C = alpha * op(A) * op(B) + beta * C per batch matrix, bf16 operands, fp32 accumulation, C fp32
 * or bf16; beta == 0 does not read C. `vec` is accepted and unused.
 *
 * Compile-time shape (-D, cl/gemm_portable.c's table): a TM x TN block of C per work-group of
 * 16 x 16 work-items, TK the K step; TM a multiple of 16, TN 64 or 128. Work-item (x, y) owns
 * rows y + 16 i (i < TM / 16) and the TN / 16 adjacent columns from x * TN / 16, which it keeps
 * as one float vector per row: within a work-item the arithmetic is vector fma (what PoCL turns
 * into SIMD on a CPU; a GPU sees wide local loads). Operands are widened to fp32 as they enter
 * local memory. With -DCT_UNROLL_ROWS (the host passes it to GPUs) the loops over a work-item's
 * rows are unrolled, so its accumulators stay in registers (ptxas: no stack frame); PoCL runs the
 * rolled loops about 5x faster (22 against 4.5 GFLOP/s at 512^3), so CPUs get them.
 * Launch: global (16 * ceil(N/TN), 16 * ceil(M/TM), batch), local (16, 16, 1). */
#include "bf16.clh"

#ifndef TM
#define TM 128
#endif
#ifndef TN
#define TN 128
#endif
#ifndef TK
#define TK 16
#endif
#define RM (TM / 16) /* rows per work-item */
#ifdef CT_UNROLL_ROWS
#define ROWS_UNROLL _Pragma("unroll")
#else
#define ROWS_UNROLL
#endif
#if TN == 64
#define floatV float4
#define vloadV vload4
#define vstoreV vstore4
#elif TN == 128
#define floatV float8
#define vloadV vload8
#define vstoreV vstore8
#else
#error "gemm_bf16.cl: TN must be 64 or 128"
#endif
#define VN (TN / 16) /* adjacent columns per work-item */
#if TM % 16
#error "gemm_bf16.cl: TM must be a multiple of 16"
#endif

__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void ct_gemm_bf16(const int ta, const int tb, const uint M, const uint N, const uint K,
                  const float alpha, const float beta,
                  __global const ushort *A, const ulong a_off, const ulong lda,
                  const ulong a_stride, __global const ushort *B, const ulong b_off,
                  const ulong ldb, const ulong b_stride,
                  __global float *C, const ulong c_off, const ulong ldc, const ulong c_stride,
                  const int c_bf16, const int vec) {
    (void)vec;
    __local float As[TK][TM], Bs[TK][TN]; /* (k, m) and (k, n) */
    const uint x = (uint)get_local_id(0), y = (uint)get_local_id(1), tid = y * 16 + x;
    const uint n0 = (uint)get_group_id(0) * TN, m0 = (uint)get_group_id(1) * TM;
    const ulong z = get_group_id(2);
    A += a_off + z * a_stride;
    B += b_off + z * b_stride;

    floatV acc[RM];
    ROWS_UNROLL
    for (uint i = 0; i < RM; i++) acc[i] = (floatV)(0.0f);

    for (uint k0 = 0; k0 < K; k0 += TK) {
        /* Each block is read along the stored matrix's contiguous dimension. */
        for (uint e = tid; e < TM * TK; e += 256) {
            uint r = ta ? e % TM : e / TK, kk = ta ? e / TM : e % TK;
            uint gm = m0 + r, gk = k0 + kk;
            ushort v = 0;
            if (gm < M && gk < K) v = ta ? A[(ulong)gk * lda + gm] : A[(ulong)gm * lda + gk];
            As[kk][r] = ct_bf16_to_f32(v);
        }
        for (uint e = tid; e < TN * TK; e += 256) {
            uint c = tb ? e / TK : e % TN, kk = tb ? e % TK : e / TN;
            uint gn = n0 + c, gk = k0 + kk;
            ushort v = 0;
            if (gn < N && gk < K) v = tb ? B[(ulong)gn * ldb + gk] : B[(ulong)gk * ldb + gn];
            Bs[kk][c] = ct_bf16_to_f32(v);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint kk = 0; kk < TK; kk++) {
            floatV b = vloadV(x, Bs[kk]);
            ROWS_UNROLL
            for (uint i = 0; i < RM; i++) acc[i] = fma((floatV)(As[kk][y + 16 * i]), b, acc[i]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    /* offsets count elements of C's own type */
    __global ushort *Cb = (__global ushort *)C + c_off + z * c_stride;
    C += c_off + z * c_stride;
    ROWS_UNROLL
    for (uint i = 0; i < RM; i++) {
        float v[VN];
        vstoreV(acc[i], 0, v);
        ROWS_UNROLL
        for (uint jj = 0; jj < VN; jj++) {
            uint row = m0 + y + 16 * i, col = n0 + VN * x + jj;
            if (row >= M || col >= N) continue;
            ulong idx = (ulong)row * ldc + col;
            float o = alpha * v[jj];
            if (c_bf16) {
                if (beta != 0.0f) o += beta * ct_bf16_to_f32(Cb[idx]);
                Cb[idx] = ct_bf16_from_f32(o);
            } else {
                if (beta != 0.0f) o += beta * C[idx];
                C[idx] = o;
            }
        }
    }
}
