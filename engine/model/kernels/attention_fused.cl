/* attention_fused.cl - causal multi-head attention without the (B,NH,T,T) scores: an online
 * softmax over key blocks in the forward (Dao et al. 2022), the probabilities recomputed block by
 * block from Q, K and the saved log-sum-exp in the backward.
 *
 * Layouts: qkv (B,T,3,NH,HS) as the QKV projection writes it (row stride 3C), out and dout
 * (B,T,NH,HS), lse and D (B,NH,T). Every kernel has one writer per output element and sums in a
 * fixed order (no atomics), so results are bitwise reproducible for a given build and shape.
 *
 * Compile-time shape (-D, chosen per device by the host's measured search, ops.c):
 *   HS  head size;  BQ  queries per work-group block;  BK  keys per block;  NT  work-items (1-D)
 *   SC  work-items across the keys of a (BQ x BK) score tile (SC divides NT and BK)
 *   OC  work-items across the HS columns of a (rows x HS) tile (a power of two dividing HS, <= NT)
 * The host checks the divisibility rules below and the local memory against the device's limit.
 *
 * Tiles: a work-item owns the score-tile entries (sr + a*SR, sc + b*SC) and the HS-tile entries
 * (or + a*OR, oc + c*OC); in both, consecutive work-items take consecutive columns, so loads from
 * local memory are contiguous across them (GPU banks, CPU vector lanes) and the row operand is
 * the same for a run of work-items. Local arrays have one float of padding per row (BKP, HSP)
 * against bank conflicts on transposed stores. Work-groups are launched as (NT * blocks, B*NH).
 *
 * Storage (store.clh): qkv, out, dout, dqkv are act_t (bf16 under CT_BF16: converted to fp32 as
 * they enter local memory, rounded once as they leave); lse and D fp32; the scores, the online
 * softmax and every accumulator fp32. */
#include "bf16.clh"
#include "store.clh"

#ifndef VW
#define VW 1
#endif
#define SR (NT / SC)          /* work-item rows of the score tile */
#define SRN (BQ / SR)         /* score rows per work-item */
#define SJN (BK / VW / SC)    /* score column vectors (VW keys each) per work-item */
#define OR (NT / OC)          /* work-item rows of an HS tile */
#define ORN (BQ / OR)         /* query rows per work-item (forward O, dQ) */
#define KRN (BK / OR)         /* key rows per work-item (dK, dV) */
#define ODN (HS / VW / OC)    /* HS column vectors per work-item */
#define BKP (BK + (VW == 1))  /* padded rows (scalar lanes only: vectors keep their alignment) */
#define HSP (HS + (VW == 1))

#if BK % VW || HS % VW || NT % SC || (BK / VW) % SC || BQ % SR || NT % OC || (HS / VW) % OC ||   \
    BQ % OR
#error "attention_fused.cl: block shape does not divide (see the header)"
#endif

/* vf: VW floats, one work-item's run of consecutive columns (CPU devices use wide vectors, one
 * work-item then covers what a SIMD unit does; GPUs use VW = 1). LANE: the lane indices. */
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#if VW == 1
typedef float vf;
#define VLOAD(p) (*(p))
#define VSTORE(p, x) (*(p) = (x))
#define HMAX(x) (x)
#define HSUM(x) (x)
#define LANE 0.0f
#else
typedef CAT(float, VW) vf;
#define VLOAD(p) CAT(vload, VW)(0, (p))
#define VSTORE(p, x) CAT(vstore, VW)((x), 0, (p))
#if VW == 2
#define LANE ((vf)(0, 1))
#define HMAX(x) fmax((x).s0, (x).s1)
#define HSUM(x) ((x).s0 + (x).s1)
#elif VW == 4
#define LANE ((vf)(0, 1, 2, 3))
#define HMAX(x) fmax(fmax((x).s0, (x).s1), fmax((x).s2, (x).s3))
#define HSUM(x) (((x).s0 + (x).s1) + ((x).s2 + (x).s3))
#elif VW == 8
#define LANE ((vf)(0, 1, 2, 3, 4, 5, 6, 7))
#define HMAX(x) HMAX4(fmax((x).lo, (x).hi))
#define HSUM(x) HSUM4((x).lo + (x).hi)
#elif VW == 16
#define LANE ((vf)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15))
#define HMAX(x) HMAX4(fmax(fmax((x).lo.lo, (x).lo.hi), fmax((x).hi.lo, (x).hi.hi)))
#define HSUM(x) HSUM4(((x).lo.lo + (x).lo.hi) + ((x).hi.lo + (x).hi.hi))
#else
#error "attention_fused.cl: VW must be 1, 2, 4, 8 or 16"
#endif
#endif
#define HMAX4(x) fmax(fmax((x).s0, (x).s1), fmax((x).s2, (x).s3))
/* Store VW floats x at p (global, act_t): a vector store, or lane by lane rounded to bf16. */
#ifdef CT_BF16
#define GSTORE(p, x)                                                                               \
    do {                                                                                           \
        float g_[VW];                                                                              \
        VSTORE(g_, (x));                                                                           \
        for (int l_ = 0; l_ < VW; l_++) ACT_ST((p), l_, g_[l_]);                                   \
    } while (0)
#else
#define GSTORE(p, x) VSTORE(p, x)
#endif
#define HSUM4(x) (((x).s0 + (x).s1) + ((x).s2 + (x).s3))

/* Keys [k0, k0+BK) of head h in rows of `base` (row t at base + t*3C): K transposed into kt
 * (HS x BKP), V transposed into vt (when VT is 1) and/or as rows into vs (BK x HSP, when VS is 1);
 * keys >= T are zeros. (Flags, not null tests: a __local array may sit at address 0.) */
#define LOAD_KV(kt, VT, vt, VS, vs)                                                                \
    for (int i_ = lid; i_ < BK * HS; i_ += NT) {                                                   \
        int j_ = i_ / HS, d_ = i_ - j_ * HS, t_ = k0 + j_;                                         \
        float kv_ = 0.0f, vv_ = 0.0f;                                                              \
        if (t_ < T) {                                                                              \
            kv_ = ACT_LD(base, (size_t)t_ * C3 + C + d_);                                                  \
            vv_ = ACT_LD(base, (size_t)t_ * C3 + 2 * C + d_);                                              \
        }                                                                                          \
        (kt)[d_ * BKP + j_] = kv_;                                                                 \
        if (VT) (vt)[d_ * BKP + j_] = vv_;                                                         \
        if (VS) (vs)[j_ * HSP + d_] = vv_;                                                         \
    }

/* Forward: one work-group per (query block, b*NH + h). out (B,T,C) =, lse (B,NH,T) =. The query
 * blocks are taken longest first (they see the most keys). */
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
attn_fused_forward(__global act_t *out, ulong out_off, __global float *lse, ulong lse_off,
                   __global const act_t *qkv, ulong qkv_off, int T, int NH, float scale) {
    __local float Qs[BQ * HSP], Kt[HS * BKP], Vs[BK * HSP], Ps[BQ * BKP];
    __local float Ms[BQ], Ls[BQ], As[BQ];
    const int lid = (int)get_local_id(0);
    const int nqb = (T + BQ - 1) / BQ, q0 = (nqb - 1 - (int)get_group_id(0)) * BQ;
    const int bh = (int)get_group_id(1), b = bh / NH, h = bh - b * NH;
    const int C = NH * HS, C3 = 3 * C;
    __global const act_t *base = qkv + qkv_off + (size_t)b * T * C3 + (size_t)h * HS;
    const int sc = lid % SC, sr = lid / SC, oc = lid % OC, orow = lid / OC;

    for (int i = lid; i < BQ * HS; i += NT) { /* Q, pre-scaled */
        int r = i / HS, d = i - r * HS, t = q0 + r;
        Qs[r * HSP + d] = t < T ? ACT_LD(base, (size_t)t * C3 + d) * scale : 0.0f;
    }
    for (int r = lid; r < BQ; r += NT) {
        Ms[r] = -INFINITY;
        Ls[r] = 0.0f;
    }
    vf acc[ORN][ODN];
    for (int a = 0; a < ORN; a++)
        for (int c = 0; c < ODN; c++) acc[a][c] = (vf)0.0f;

    const int kend = min(q0 + BQ, T); /* causal: keys < the block's last query + 1 */
    for (int k0 = 0; k0 < kend; k0 += BK) {
        barrier(CLK_LOCAL_MEM_FENCE); /* the previous block's readers are done */
        LOAD_KV(Kt, 0, Kt, 1, Vs);
        barrier(CLK_LOCAL_MEM_FENCE);
        /* 1. scores of this work-item's (row, key) entries, masked with -inf */
        vf s[SRN][SJN];
        for (int a = 0; a < SRN; a++)
            for (int bb = 0; bb < SJN; bb++) s[a][bb] = (vf)0.0f;
        for (int d = 0; d < HS; d++) {
            vf kk[SJN];
            for (int bb = 0; bb < SJN; bb++) kk[bb] = VLOAD(Kt + d * BKP + (sc + bb * SC) * VW);
            for (int a = 0; a < SRN; a++) {
                vf qq = (vf)Qs[(sr + a * SR) * HSP + d];
                for (int bb = 0; bb < SJN; bb++) s[a][bb] = fma(qq, kk[bb], s[a][bb]);
            }
        }
        for (int a = 0; a < SRN; a++)
            for (int bb = 0; bb < SJN; bb++) {
                int r = sr + a * SR, j0 = (sc + bb * SC) * VW;
                vf u = (vf)(float)(k0 + j0) + LANE;
                VSTORE(Ps + r * BKP + j0, select(s[a][bb], (vf)(-INFINITY),
                                                 (u > (vf)(float)(q0 + r)) | (u >= (vf)(float)T)));
            }
        barrier(CLK_LOCAL_MEM_FENCE);
        /* 2. online softmax per row: new max, rescale factor, probabilities, running sum */
        for (int r = lid; r < BQ; r += NT) {
            float mo = Ms[r];
            vf mv = (vf)mo;
            for (int j = 0; j < BK; j += VW) mv = fmax(mv, VLOAD(Ps + r * BKP + j));
            float mx = HMAX(mv);
            vf sv = (vf)0.0f;
            for (int j = 0; j < BK; j += VW) {
                vf p = exp(VLOAD(Ps + r * BKP + j) - (vf)mx);
                VSTORE(Ps + r * BKP + j, p);
                sv += p;
            }
            float al = exp(mo - mx);
            As[r] = al;
            Ls[r] = Ls[r] * al + HSUM(sv);
            Ms[r] = mx;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        /* 3. O = O * alpha + P V */
        for (int a = 0; a < ORN; a++) {
            vf al = (vf)As[orow + a * OR];
            for (int c = 0; c < ODN; c++) acc[a][c] *= al;
        }
        for (int j = 0; j < BK; j++) {
            vf vv[ODN];
            for (int c = 0; c < ODN; c++) vv[c] = VLOAD(Vs + j * HSP + (oc + c * OC) * VW);
            for (int a = 0; a < ORN; a++) {
                vf p = (vf)Ps[(orow + a * OR) * BKP + j];
                for (int c = 0; c < ODN; c++) acc[a][c] = fma(p, vv[c], acc[a][c]);
            }
        }
    }
    for (int a = 0; a < ORN; a++) {
        int r = orow + a * OR, t = q0 + r;
        if (t >= T) continue;
        vf inv = (vf)(1.0f / Ls[r]);
        __global act_t *o = out + out_off + ((size_t)b * T + t) * C + (size_t)h * HS;
        for (int c = 0; c < ODN; c++) GSTORE(o + (oc + c * OC) * VW, acc[a][c] * inv);
    }
    for (int r = lid; r < BQ; r += NT)
        if (q0 + r < T) lse[lse_off + (size_t)bh * T + q0 + r] = Ms[r] + log(Ls[r]);
}

/* D (B,NH,T) = rowsum(dout * out) per head: the softmax backward's correction term. 2-D range
 * (h, b*T + t). */
__kernel void attn_fused_dot(__global float *D, ulong D_off, __global const act_t *dout,
                             ulong dout_off, __global const act_t *out, ulong out_off, int B, int T,
                             int NH) {
    int h = (int)get_global_id(0), bt = (int)get_global_id(1);
    if (h >= NH || bt >= B * T) return;
    int b = bt / T, t = bt - b * T;
    size_t o = (size_t)bt * NH * HS + (size_t)h * HS;
    float s = 0.0f;
    for (int d = 0; d < HS; d++) s = fma(ACT_LD(dout, dout_off + o + d), ACT_LD(out, out_off + o + d), s);
    D[D_off + ((size_t)b * NH + h) * T + t] = s;
}

/* The (BQ x BK) tile of P and dS = P * (dP - D) for queries [q0, q0+BQ) and keys [k0, k0+BK),
 * from Qs, dOs (BQ x HSP) and Kt, Vt (HS x BKP), into ps (when PS is 1) and dss. */
#define SCORE_TILE(PS, ps, dss)                                                                    \
    {                                                                                              \
        vf s_[SRN][SJN], dp_[SRN][SJN];                                                            \
        for (int a = 0; a < SRN; a++)                                                              \
            for (int bb = 0; bb < SJN; bb++) s_[a][bb] = dp_[a][bb] = (vf)0.0f;                    \
        for (int d = 0; d < HS; d++) {                                                             \
            vf kk[SJN], vv[SJN];                                                                   \
            for (int bb = 0; bb < SJN; bb++) {                                                     \
                kk[bb] = VLOAD(Kt + d * BKP + (sc + bb * SC) * VW);                                \
                vv[bb] = VLOAD(Vt + d * BKP + (sc + bb * SC) * VW);                                \
            }                                                                                      \
            for (int a = 0; a < SRN; a++) {                                                        \
                vf qq = (vf)Qs[(sr + a * SR) * HSP + d], gg = (vf)dOs[(sr + a * SR) * HSP + d];    \
                for (int bb = 0; bb < SJN; bb++) {                                                 \
                    s_[a][bb] = fma(qq, kk[bb], s_[a][bb]);                                        \
                    dp_[a][bb] = fma(gg, vv[bb], dp_[a][bb]);                                      \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        for (int a = 0; a < SRN; a++)                                                              \
            for (int bb = 0; bb < SJN; bb++) {                                                     \
                int r = sr + a * SR, j0 = (sc + bb * SC) * VW, t = q0 + r;                         \
                vf u = (vf)(float)(k0 + j0) + LANE;                                                \
                vf p = exp(s_[a][bb] * (vf)scale - (vf)Lq[r]);                                     \
                p = select(p, (vf)0.0f, (u > (vf)(float)t) | (u >= (vf)(float)T));                 \
                if (t >= T) p = (vf)0.0f;                                                          \
                if (PS) VSTORE((ps) + r * BKP + j0, p);                                            \
                VSTORE((dss) + r * BKP + j0, p * (dp_[a][bb] - (vf)Dq[r]));                        \
            }                                                                                      \
    }

/* Queries [q0, q0+BQ): Q and dO rows into Qs, dOs, their lse and D into Lq, Dq (zeros past T). */
#define LOAD_Q()                                                                                   \
    for (int i_ = lid; i_ < BQ * HS; i_ += NT) {                                                   \
        int r_ = i_ / HS, d_ = i_ - r_ * HS, t_ = q0 + r_;                                         \
        Qs[r_ * HSP + d_] = t_ < T ? ACT_LD(base, (size_t)t_ * C3 + d_) : 0.0f;                    \
        dOs[r_ * HSP + d_] = t_ < T ? ACT_LD(gbase, (size_t)t_ * C + d_) : 0.0f;                   \
    }                                                                                              \
    for (int r_ = lid; r_ < BQ; r_ += NT) {                                                        \
        int t_ = q0 + r_;                                                                          \
        Lq[r_] = t_ < T ? lse[lse_off + (size_t)bh * T + t_] : 0.0f;                               \
        Dq[r_] = t_ < T ? D[D_off + (size_t)bh * T + t_] : 0.0f;                                   \
    }

/* Backward, dK and dV: one work-group per (key block, b*NH + h), looping over the query blocks
 * that see its keys in order; dK (scaled) and dV written once into dqkv's k and v parts. */
#if BK % OR
#error "attention_fused.cl: OR must divide BK"
#endif
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
attn_fused_backward_dkv(__global act_t *dqkv, ulong dqkv_off, __global const act_t *dout,
                        ulong dout_off, __global const act_t *qkv, ulong qkv_off,
                        __global const float *lse, ulong lse_off, __global const float *D,
                        ulong D_off, int T, int NH, float scale) {
    __local float Kt[HS * BKP], Vt[HS * BKP], Qs[BQ * HSP], dOs[BQ * HSP];
    __local float Ps[BQ * BKP], dSs[BQ * BKP], Lq[BQ], Dq[BQ];
    const int lid = (int)get_local_id(0);
    const int k0 = (int)get_group_id(0) * BK;
    const int bh = (int)get_group_id(1), b = bh / NH, h = bh - b * NH;
    const int C = NH * HS, C3 = 3 * C;
    __global const act_t *base = qkv + qkv_off + (size_t)b * T * C3 + (size_t)h * HS;
    __global const act_t *gbase = dout + dout_off + (size_t)b * T * C + (size_t)h * HS;
    const int sc = lid % SC, sr = lid / SC, oc = lid % OC, orow = lid / OC;
    LOAD_KV(Kt, 1, Vt, 0, Vt);
    vf dk[KRN][ODN], dv[KRN][ODN];
    for (int a = 0; a < KRN; a++)
        for (int c = 0; c < ODN; c++) dk[a][c] = dv[a][c] = (vf)0.0f;
    for (int q0 = k0 / BQ * BQ; q0 < T; q0 += BQ) {
        barrier(CLK_LOCAL_MEM_FENCE);
        LOAD_Q();
        barrier(CLK_LOCAL_MEM_FENCE);
        SCORE_TILE(1, Ps, dSs);
        barrier(CLK_LOCAL_MEM_FENCE);
        /* dV += P^T dO, dK += dS^T Q over this block's queries */
        for (int r = 0; r < BQ; r++) {
            vf g[ODN], q[ODN];
            for (int c = 0; c < ODN; c++) {
                g[c] = VLOAD(dOs + r * HSP + (oc + c * OC) * VW);
                q[c] = VLOAD(Qs + r * HSP + (oc + c * OC) * VW);
            }
            for (int a = 0; a < KRN; a++) {
                vf p = (vf)Ps[r * BKP + orow + a * OR], ds = (vf)dSs[r * BKP + orow + a * OR];
                for (int c = 0; c < ODN; c++) {
                    dv[a][c] = fma(p, g[c], dv[a][c]);
                    dk[a][c] = fma(ds, q[c], dk[a][c]);
                }
            }
        }
    }
    for (int a = 0; a < KRN; a++) {
        int t = k0 + orow + a * OR;
        if (t >= T) continue;
        __global act_t *o = dqkv + dqkv_off + ((size_t)b * T + t) * C3 + (size_t)h * HS;
        for (int c = 0; c < ODN; c++) {
            GSTORE(o + C + (oc + c * OC) * VW, dk[a][c] * (vf)scale);
            GSTORE(o + 2 * C + (oc + c * OC) * VW, dv[a][c]);
        }
    }
}

/* Backward, dQ: one work-group per (query block, b*NH + h), looping over the key blocks it sees
 * in order; dQ (scaled) written once into dqkv's q part. */
__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void
attn_fused_backward_dq(__global act_t *dqkv, ulong dqkv_off, __global const act_t *dout,
                       ulong dout_off, __global const act_t *qkv, ulong qkv_off,
                       __global const float *lse, ulong lse_off, __global const float *D,
                       ulong D_off, int T, int NH, float scale) {
    __local float Kt[HS * BKP], Vt[HS * BKP], Ks[BK * HSP], Qs[BQ * HSP], dOs[BQ * HSP];
    __local float dSs[BQ * BKP], Lq[BQ], Dq[BQ];
    const int lid = (int)get_local_id(0);
    const int nqb = (T + BQ - 1) / BQ, q0 = (nqb - 1 - (int)get_group_id(0)) * BQ;
    const int bh = (int)get_group_id(1), b = bh / NH, h = bh - b * NH;
    const int C = NH * HS, C3 = 3 * C;
    __global const act_t *base = qkv + qkv_off + (size_t)b * T * C3 + (size_t)h * HS;
    __global const act_t *gbase = dout + dout_off + (size_t)b * T * C + (size_t)h * HS;
    const int sc = lid % SC, sr = lid / SC, oc = lid % OC, orow = lid / OC;
    LOAD_Q();
    vf dq[ORN][ODN];
    for (int a = 0; a < ORN; a++)
        for (int c = 0; c < ODN; c++) dq[a][c] = (vf)0.0f;
    const int kend = min(q0 + BQ, T);
    for (int k0 = 0; k0 < kend; k0 += BK) {
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int i = lid; i < BK * HS; i += NT) { /* K both ways, V transposed */
            int j = i / HS, d = i - j * HS, t = k0 + j;
            float kv = 0.0f, vv = 0.0f;
            if (t < T) {
                kv = ACT_LD(base, (size_t)t * C3 + C + d);
                vv = ACT_LD(base, (size_t)t * C3 + 2 * C + d);
            }
            Kt[d * BKP + j] = kv;
            Ks[j * HSP + d] = kv;
            Vt[d * BKP + j] = vv;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        SCORE_TILE(0, dSs, dSs);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int j = 0; j < BK; j++) { /* dQ += dS K */
            vf kk[ODN];
            for (int c = 0; c < ODN; c++) kk[c] = VLOAD(Ks + j * HSP + (oc + c * OC) * VW);
            for (int a = 0; a < ORN; a++) {
                vf ds = (vf)dSs[(orow + a * OR) * BKP + j];
                for (int c = 0; c < ODN; c++) dq[a][c] = fma(ds, kk[c], dq[a][c]);
            }
        }
    }
    for (int a = 0; a < ORN; a++) {
        int t = q0 + orow + a * OR;
        if (t >= T) continue;
        __global act_t *o = dqkv + dqkv_off + ((size_t)b * T + t) * C3 + (size_t)h * HS;
        for (int c = 0; c < ODN; c++) GSTORE(o + (oc + c * OC) * VW, dq[a][c] * (vf)scale);
    }
}
