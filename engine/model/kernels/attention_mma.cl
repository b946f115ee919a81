/* attention_mma.cl - the fused causal attention on the warp-level mma wrappers of mma_nv.clh:
 * QK^T, PV and the backward's four products as mma.sync m16n8k16 with bf16 operands and fp32
 * accumulation, the online softmax (max, sum, rescale) and dS = P * (dP - D) in fp32, arranged
 * as FlashAttention-2 does (Dao 2023): a work-group per (block of rows, b*NH + h), each warp
 * owning 16 of the rows, the score tile of a warp held in its accumulator registers and reused
 * as the A operand of the next product (the C layout of m16n8 is the A layout of m16n8k16 for
 * two adjacent n8 tiles), so the scores never touch local memory. With CT_MMA_NV_PTX the
 * wrappers are the NVIDIA sm_80 instructions; without, the portable stand-ins run the same
 * source on any device (the emulated path, how PoCL tests every index of it).
 *
 * Layouts as attention_fused.cl's bf16 variant: qkv (B,T,3,NH,HS) bf16 (row stride 3C), out and
 * dout (B,T,NH,HS) bf16, lse and D (B,NH,T) fp32, dqkv (B,T,3C) bf16. Rounding: P and dS are
 * rounded to bf16 as they become mma operands (the sums and the softmax stay fp32); outputs are
 * rounded once as they are stored. One writer per output element, sums in a fixed order: bitwise
 * reproducible for a given build and shape.
 *
 * Compile-time shape (-D, from the host's table in ops_attention.c):
 *   HS   head size (a multiple of 16)
 *   W    warps per work-group; the work-group's own rows are BW = 16 W (queries in the forward
 *        and dQ kernels, keys in the dK/dV kernel)
 *   BKV  rows of the other side staged per step (keys, or queries in dK/dV; a multiple of 16)
 * Local memory: four (rows x HS + 8) bf16 arrays (the own block's two operands, the step's two),
 * rows padded by 8 bf16 so ldmatrix's 8 row addresses fall in distinct banks and stay 16-byte
 * aligned; plus the stand-ins' per-warp scratch. Control flow is uniform over the work-group (the
 * wrappers' contract): every warp runs every step, masked entries are zeros or -inf. */
#define NT (32 * W)
#define BW (16 * W)
#define PAD 8
#define HSP (HS + PAD)
#define DN (HS / 8)   /* n8 fragments across the head */
#define SN (BKV / 8)  /* n8 fragments across a step's rows */
#define CT_MAXR(a, b) ((a) > (b) ? (a) : (b))
#define ROWS CT_MAXR(BW, BKV)

#if HS % 16 || BKV % 16 || W < 1
#error "attention_mma.cl: HS and BKV must be multiples of 16, W at least 1"
#endif

#define CT_CP_ASYNC_MAX 1 /* no cp.async here: the tiles are plain vector copies */
#include "bf16.clh"
#include "mma_nv.clh"

#ifdef CT_MMA_NV_PTX
#define CT_UNROLL _Pragma("unroll")
#else
#define CT_UNROLL /* the stand-ins' barriers would multiply PoCL's compile time */
#endif

/* Rows [r0, r0 + rows) of a head's (T x HS) matrix at src (row stride ld) into dst (rows x HSP);
 * rows past T are zeros. */
CT_INLINE void load_rows(__local ushort *dst, __global const ushort *src, ulong ld, int r0,
                         int rows, int T) {
    for (int c = (int)get_local_id(0); c < rows * (HS / 8); c += NT) {
        int r = c / (HS / 8), d = (c - r * (HS / 8)) * 8, t = r0 + r;
        ushort8 v = t < T ? vload8(0, src + (ulong)t * ld + d) : (ushort8)0;
        vstore8(v, 0, dst + r * HSP + d);
    }
}

/* Two fp32 as one bf16 pair register (lo in the low half), rounded to nearest even. */
CT_INLINE uint pack2(float lo, float hi) {
    return (uint)ct_bf16_from_f32(lo) | ((uint)ct_bf16_from_f32(hi) << 16);
}

/* The A fragment (16 x 16) at rows r0.., columns k0.. of a (rows x HSP) local array. */
CT_INLINE void frag_a(__local const ushort *s, int r0, int k0, uint *a, __local uint *scratch) {
    uint lane = ct_lane(), j = lane >> 3, i8 = lane & 7u;
    ct_ldsm_x4(s, (uint)(r0 + i8 + (j & 1u) * 8) * HSP + (uint)k0 + (j >> 1) * 8, 0, a, scratch);
}

/* B fragments of two adjacent n8 tiles (n0.., n0 + 8..) at k0.., for B[k][n] = s[n][k] (rows of
 * s are the n index: K or Q or dO rows against the head dimension). */
CT_INLINE void frag_b_rows(__local const ushort *s, int n0, int k0, uint *r4,
                           __local uint *scratch) {
    uint lane = ct_lane(), j = lane >> 3, i8 = lane & 7u;
    ct_ldsm_x4(s, (uint)(n0 + i8 + (j >> 1) * 8) * HSP + (uint)k0 + (j & 1u) * 8, 0, r4, scratch);
}

/* B fragments of two adjacent n8 tiles (head columns n0.., n0 + 8..) at k0.., for
 * B[k][n] = s[k][n] (rows of s are the k index: V, dO, Q or K rows), ldmatrix .trans. */
CT_INLINE void frag_b_cols(__local const ushort *s, int k0, int n0, uint *r4,
                           __local uint *scratch) {
    uint lane = ct_lane(), j = lane >> 3, i8 = lane & 7u;
    ct_ldsm_x4(s, (uint)(k0 + i8 + (j & 1u) * 8) * HSP + (uint)n0 + (j >> 1) * 8, 1, r4, scratch);
}

/* acc[16 x SN*8] += A (rows r0.. of sa, 16 x HS) . B^T (rows of sb, SN*8 x HS). */
CT_INLINE void mul_rows(float acc[SN][4], __local const ushort *sa, int r0,
                        __local const ushort *sb, __local uint *scratch) {
    CT_UNROLL
    for (int ks = 0; ks < HS; ks += 16) {
        uint a[4];
        frag_a(sa, r0, ks, a, scratch);
        CT_UNROLL
        for (int p = 0; p < SN / 2; p++) {
            uint r4[4];
            frag_b_rows(sb, p * 16, ks, r4, scratch);
            ct_mma_bf16(acc[2 * p], a, r4, scratch);
            ct_mma_bf16(acc[2 * p + 1], a, r4 + 2, scratch);
        }
    }
}

/* acc[16 x HS] += X (16 x SN*8, the registers x, rounded to bf16) . s (SN*8 x HS rows). */
CT_INLINE void mul_regs(float acc[DN][4], float x[SN][4], __local const ushort *s,
                        __local uint *scratch) {
    CT_UNROLL
    for (int kk = 0; kk < SN / 2; kk++) {
        /* C's (g, 2t..2t+1) and (g+8, ..) of tiles 2kk and 2kk+1 are A's a[0..3] */
        uint a[4] = {pack2(x[2 * kk][0], x[2 * kk][1]), pack2(x[2 * kk][2], x[2 * kk][3]),
                     pack2(x[2 * kk + 1][0], x[2 * kk + 1][1]),
                     pack2(x[2 * kk + 1][2], x[2 * kk + 1][3])};
        CT_UNROLL
        for (int pd = 0; pd < DN / 2; pd++) {
            uint r4[4];
            frag_b_cols(s, kk * 16, pd * 16, r4, scratch);
            ct_mma_bf16(acc[2 * pd], a, r4, scratch);
            ct_mma_bf16(acc[2 * pd + 1], a, r4 + 2, scratch);
        }
    }
}

#define KERNEL_HEAD                                                                                \
    __local uint4 l0_[ROWS * HSP / 8], l1_[ROWS * HSP / 8], l2_[ROWS * HSP / 8],                   \
        l3_[ROWS * HSP / 8];                                                                       \
    __local ushort *L0 = (__local ushort *)l0_, *L1 = (__local ushort *)l1_,                       \
                   *L2 = (__local ushort *)l2_, *L3 = (__local ushort *)l3_;                       \
    const int lane = (int)ct_lane(), warp = (int)ct_warp(), g = lane >> 2, tq = lane & 3;          \
    const int bh = (int)get_group_id(1), b = bh / NH, h = bh - b * NH;                             \
    const int C = NH * HS, C3 = 3 * C;                                                             \
    __global const ushort *base = qkv + qkv_off + (size_t)b * T * C3 + (size_t)h * HS

#if CT_WARP_SCRATCH
#define SCRATCH                                                                                    \
    __local uint scratch_all[W * CT_WARP_SCRATCH];                                                 \
    __local uint *scratch = scratch_all + warp * CT_WARP_SCRATCH
#else
#define SCRATCH __local uint *scratch = 0 /* unused by the PTX bodies */
#endif

/* Forward: one work-group per (query block, b*NH + h), longest blocks first; out (B,T,C) =,
 * lse (B,NH,T) =. L0: the block's Q, L1/L2: a step's K and V. */
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
attn_mma_forward(__global ushort *out, ulong out_off, __global float *lse, ulong lse_off,
                 __global const ushort *qkv, ulong qkv_off, int T, int NH, float scale) {
    KERNEL_HEAD;
    SCRATCH;
    (void)L3;
    const int nqb = (T + BW - 1) / BW, q0 = (nqb - 1 - (int)get_group_id(0)) * BW;
    const int wr = warp * 16; /* the warp's first row in the block */
    load_rows(L0, base, (ulong)C3, q0, BW, T);
    float o[DN][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    CT_UNROLL
    for (int n = 0; n < DN; n++)
        CT_UNROLL
        for (int e = 0; e < 4; e++) o[n][e] = 0.0f;
    const int kend = min(q0 + BW, T); /* causal: keys up to the block's last query */
    for (int k0 = 0; k0 < kend; k0 += BKV) {
        barrier(CLK_LOCAL_MEM_FENCE); /* the previous step's readers are done (and Q is in) */
        load_rows(L1, base + C, (ulong)C3, k0, BKV, T);
        load_rows(L2, base + 2 * C, (ulong)C3, k0, BKV, T);
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[SN][4];
        CT_UNROLL
        for (int n = 0; n < SN; n++)
            CT_UNROLL
            for (int e = 0; e < 4; e++) s[n][e] = 0.0f;
        mul_rows(s, L0, wr, L1, scratch);
        /* scale, mask, the rows' new maxima (a row's values lie in the 4 lanes of its quad) */
        float mx[2] = {m[0], m[1]};
        CT_UNROLL
        for (int n = 0; n < SN; n++)
            CT_UNROLL
            for (int e = 0; e < 4; e++) {
                int row = q0 + wr + g + (e >> 1) * 8, key = k0 + n * 8 + 2 * tq + (e & 1);
                float v = key > row || key >= T ? -INFINITY : s[n][e] * scale;
                s[n][e] = v;
                mx[e >> 1] = fmax(mx[e >> 1], v);
            }
        float al[2];
        CT_UNROLL
        for (int i = 0; i < 2; i++) {
            mx[i] = ct_quad_max(mx[i], scratch);
            al[i] = exp(m[i] - mx[i]); /* 0 at the first step (m = -inf, mx finite: key 0) */
            m[i] = mx[i];
            l[i] *= al[i];
        }
        CT_UNROLL
        for (int n = 0; n < SN; n++)
            CT_UNROLL
            for (int e = 0; e < 4; e++) {
                float p = exp(s[n][e] - m[e >> 1]);
                s[n][e] = p;
                l[e >> 1] += p;
            }
        CT_UNROLL
        for (int n = 0; n < DN; n++)
            CT_UNROLL
            for (int e = 0; e < 4; e++) o[n][e] *= al[e >> 1];
        mul_regs(o, s, L2, scratch); /* O += P V, P rounded to bf16 */
    }
    for (int i = 0; i < 2; i++) l[i] = ct_quad_sum(l[i], scratch);
    CT_UNROLL
    for (int n = 0; n < DN; n++)
        CT_UNROLL
        for (int e = 0; e < 4; e++) {
            int t = q0 + wr + g + (e >> 1) * 8;
            if (t < T)
                out[out_off + ((size_t)b * T + t) * C + (size_t)h * HS + n * 8 + 2 * tq + (e & 1)] =
                    ct_bf16_from_f32(o[n][e] / l[e >> 1]);
        }
    for (int i = 0; i < 2; i++) {
        int t = q0 + wr + g + i * 8;
        if (tq == 0 && t < T) lse[lse_off + (size_t)bh * T + t] = m[i] + log(l[i]);
    }
}

/* D (B,NH,T) = rowsum(dout * out) per head, the softmax backward's correction term, from the
 * bf16 tensors in fp32. 2-D range (h, b*T + t). */
__kernel void attn_mma_dot(__global float *D, ulong D_off, __global const ushort *dout,
                           ulong dout_off, __global const ushort *out, ulong out_off, int B, int T,
                           int NH) {
    int h = (int)get_global_id(0), bt = (int)get_global_id(1);
    if (h >= NH || bt >= B * T) return;
    int b = bt / T, t = bt - b * T;
    size_t o = (size_t)bt * NH * HS + (size_t)h * HS;
    float s = 0.0f;
    for (int d = 0; d < HS; d++)
        s = fma(ct_bf16_to_f32(dout[dout_off + o + d]), ct_bf16_to_f32(out[out_off + o + d]), s);
    D[D_off + ((size_t)b * NH + h) * T + t] = s;
}

/* P and dS = P * (dP - D) of a score tile in place (s: scores, dp: dP), entry e of fragment n
 * at (query qr, key kc) as the caller maps them; masked entries are 0. */
#define SOFTMAX_BWD(QROW, KCOL, LSE, DD)                                                           \
    CT_UNROLL                                                                                      \
    for (int n = 0; n < SN; n++)                                                                   \
        CT_UNROLL                                                                                  \
        for (int e = 0; e < 4; e++) {                                                              \
            int qr = (QROW), kc = (KCOL);                                                          \
            float p = 0.0f, ds = 0.0f;                                                             \
            if (kc <= qr && qr < T) { /* LSE and DD are read only here */                          \
                p = exp(s[n][e] * scale - (LSE));                                                  \
                ds = p * (dp[n][e] - (DD));                                                        \
            }                                                                                      \
            s[n][e] = p;                                                                           \
            dp[n][e] = ds;                                                                         \
        }

/* Backward, dK and dV: one work-group per (key block, b*NH + h), each warp owning 16 keys,
 * looping over the query steps that see them in order; dK (scaled) and dV written once.
 * L0/L1: the block's K and V; L2/L3: a step's Q and dO. S^T = K Q^T and dP^T = V dO^T in
 * registers, then dV += P^T dO and dK += dS^T Q. */
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
attn_mma_backward_dkv(__global ushort *dqkv, ulong dqkv_off, __global const ushort *dout,
                      ulong dout_off, __global const ushort *qkv, ulong qkv_off,
                      __global const float *lse, ulong lse_off, __global const float *D,
                      ulong D_off, int T, int NH, float scale) {
    KERNEL_HEAD;
    SCRATCH;
    __global const ushort *gbase = dout + dout_off + (size_t)b * T * C + (size_t)h * HS;
    const int k0 = (int)get_group_id(0) * BW, wr = warp * 16;
    load_rows(L0, base + C, (ulong)C3, k0, BW, T);
    load_rows(L1, base + 2 * C, (ulong)C3, k0, BW, T);
    float dk[DN][4], dv[DN][4];
    CT_UNROLL
    for (int n = 0; n < DN; n++)
        CT_UNROLL
        for (int e = 0; e < 4; e++) dk[n][e] = dv[n][e] = 0.0f;
    for (int q0 = k0 / BKV * BKV; q0 < T; q0 += BKV) {
        barrier(CLK_LOCAL_MEM_FENCE);
        load_rows(L2, base, (ulong)C3, q0, BKV, T);
        load_rows(L3, gbase, (ulong)C, q0, BKV, T);
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[SN][4], dp[SN][4];
        CT_UNROLL
        for (int n = 0; n < SN; n++)
            CT_UNROLL
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
        mul_rows(s, L0, wr, L2, scratch);  /* S^T: keys x queries */
        mul_rows(dp, L1, wr, L3, scratch); /* dP^T */
        /* entry e of fragment n: key k0 + wr + g (+8), query q0 + n*8 + 2t (+1) */
        SOFTMAX_BWD(q0 + n * 8 + 2 * tq + (e & 1), k0 + wr + g + (e >> 1) * 8,
                    lse[lse_off + (size_t)bh * T + qr], D[D_off + (size_t)bh * T + qr]);
        mul_regs(dv, s, L3, scratch);  /* dV += P^T dO */
        mul_regs(dk, dp, L2, scratch); /* dK += dS^T Q */
    }
    CT_UNROLL
    for (int n = 0; n < DN; n++)
        CT_UNROLL
        for (int e = 0; e < 4; e++) {
            int t = k0 + wr + g + (e >> 1) * 8;
            if (t >= T) continue;
            __global ushort *o =
                dqkv + dqkv_off + ((size_t)b * T + t) * C3 + (size_t)h * HS + n * 8 + 2 * tq + (e & 1);
            o[C] = ct_bf16_from_f32(dk[n][e] * scale);
            o[2 * C] = ct_bf16_from_f32(dv[n][e]);
        }
}

/* Backward, dQ: one work-group per (query block, b*NH + h), longest first, each warp owning 16
 * queries, looping over the key steps they see; dQ (scaled) written once. L0/L1: the block's Q
 * and dO; L2/L3: a step's K and V. S = Q K^T and dP = dO V^T in registers, then dQ += dS K. */
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
attn_mma_backward_dq(__global ushort *dqkv, ulong dqkv_off, __global const ushort *dout,
                     ulong dout_off, __global const ushort *qkv, ulong qkv_off,
                     __global const float *lse, ulong lse_off, __global const float *D,
                     ulong D_off, int T, int NH, float scale) {
    KERNEL_HEAD;
    SCRATCH;
    __global const ushort *gbase = dout + dout_off + (size_t)b * T * C + (size_t)h * HS;
    const int nqb = (T + BW - 1) / BW, q0 = (nqb - 1 - (int)get_group_id(0)) * BW;
    const int wr = warp * 16;
    load_rows(L0, base, (ulong)C3, q0, BW, T);
    load_rows(L1, gbase, (ulong)C, q0, BW, T);
    float lq[2], dq_[2];
    for (int i = 0; i < 2; i++) {
        int t = q0 + wr + g + i * 8;
        lq[i] = t < T ? lse[lse_off + (size_t)bh * T + t] : 0.0f;
        dq_[i] = t < T ? D[D_off + (size_t)bh * T + t] : 0.0f;
    }
    float dq[DN][4];
    CT_UNROLL
    for (int n = 0; n < DN; n++)
        CT_UNROLL
        for (int e = 0; e < 4; e++) dq[n][e] = 0.0f;
    const int kend = min(q0 + BW, T);
    for (int k0 = 0; k0 < kend; k0 += BKV) {
        barrier(CLK_LOCAL_MEM_FENCE);
        load_rows(L2, base + C, (ulong)C3, k0, BKV, T);
        load_rows(L3, base + 2 * C, (ulong)C3, k0, BKV, T);
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[SN][4], dp[SN][4];
        CT_UNROLL
        for (int n = 0; n < SN; n++)
            CT_UNROLL
            for (int e = 0; e < 4; e++) s[n][e] = dp[n][e] = 0.0f;
        mul_rows(s, L0, wr, L2, scratch);  /* S */
        mul_rows(dp, L1, wr, L3, scratch); /* dP */
        /* entry e of fragment n: query q0 + wr + g (+8), key k0 + n*8 + 2t (+1) */
        SOFTMAX_BWD(q0 + wr + g + (e >> 1) * 8, k0 + n * 8 + 2 * tq + (e & 1),
                    lq[e >> 1], dq_[e >> 1]);
        mul_regs(dq, dp, L2, scratch); /* dQ += dS K */
    }
    CT_UNROLL
    for (int n = 0; n < DN; n++)
        CT_UNROLL
        for (int e = 0; e < 4; e++) {
            int t = q0 + wr + g + (e >> 1) * 8;
            if (t < T)
                dqkv[dqkv_off + ((size_t)b * T + t) * C3 + (size_t)h * HS + n * 8 + 2 * tq +
                     (e & 1)] = ct_bf16_from_f32(dq[n][e] * scale);
        }
}
