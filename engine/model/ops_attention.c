/* ops_attention.c - the attention ops: the GEMM path (batched GEMMs over (B,NH,T,T) scores,
 * causal softmax, and its backward) and the fused path (online-softmax kernels whose block
 * shapes are checked against the device, keeping only the (B,NH,T) log-sum-exp; with bf16
 * activations and cfg->mma, the same op on the mma wrappers, attention_mma.cl). */
#include "ops_impl.h"

/* ------------------------------------------------------------------ attention */

/* Each (T,T) matrix of a (BNH of them) transposed in place. Why the backward transposes P and dS
 * rather than passing a transposed A to SgemmStridedBatched: CLBlast 1.5.3 returns wrong results
 * for a transposed A at a non-zero offset once m >= 128 (seen on PoCL with the shipped CPU
 * parameters; offset 0, or the same shapes through one Sgemm per matrix, are right), and one Sgemm
 * per matrix costs ~0.1 ms of call overhead each (1152 calls per step at GPT-2 124M). In place
 * rather than into a copy: a copy is another (B,NH,T,T) of scratch (192 MiB at GPT-2 124M's B 4,
 * T 1024), and both callers' A is dead after its use. The attention test covers T = 130 and 256
 * for the bug's sake. */
static ct_status transpose_square(ct_device *dev, size_t T, ct_view a, size_t BNH) {
    karg args[] = {KMEM(a), KINT(BNH), KINT(T)};
    return ct__ops_launch2(dev, "attention", "transpose_square_inplace", a.store == CT_STORE_BF16,
                           T, BNH * T, 64, args, NARGS(args));
}

/* Causal attention multiplies only what the mask keeps. Each (T,T) product is cut into row
 * blocks of CT__ATT_ROWS rows; row block [r0, r1) of a lower-triangular operand (the scores, P,
 * dS: exact zeros above the diagonal) has nothing beyond column r1, and of an upper-triangular one
 * (their transposes) nothing before column r0. With n blocks that is (n + 1) / 2n of the full
 * square's work (T 1024: 4 blocks, 62.5 %; T 2048: 56 %) for n GEMM calls instead of one; T up to
 * one block is a single call, as before. The zeros skipped add nothing to any sum. */
#define CT__ATT_ROWS ((size_t)256)

/* The three shapes of causal product, per (b,h); X, out, A, B are (T,hs) at stride T*hs, the
 * square operands (T,T):
 * - CAUSAL_SCORES: C[r0:r1, 0:r1] = A[r0:r1, :] . B[0:r1, :]^T (the scores, dP). C's entries
 *   right of r1 are not written: the softmax forward and backward read only j <= t and write the
 *   zeros above the diagonal themselves.
 * - CAUSAL_LOWER: out[r0:r1, :] = L[r0:r1, 0:r1] . X[0:r1, :], L lower-triangular (P, dS).
 * - CAUSAL_UPPER: out[r0:r1, :] = U[r0:r1, r0:T] . X[r0:T, :], U upper-triangular (their
 *   transposes). */
typedef enum { CAUSAL_SCORES, CAUSAL_LOWER, CAUSAL_UPPER } causal_kind;
static ct_status gemm_causal(ct_device *dev, causal_kind kind, size_t T, size_t hs, ct_view a,
                             ct_view b, ct_view c, size_t BNH) {
    ct_status st = CT_OK;
    for (size_t r0 = 0; st == CT_OK && r0 < T; r0 += CT__ATT_ROWS) {
        size_t r1 = r0 + CT__ATT_ROWS < T ? r0 + CT__ATT_ROWS : T;
        /* the square left operand (L or U) into the (T,hs) output */
        int tb = 0;
        size_t n = hs, k = r1, ao = r0 * T, lda = T, sa = T * T, bo = 0, ldc = hs, sc = T * hs;
        if (kind == CAUSAL_SCORES) /* (T,hs) . (T,hs)^T into the square */
            tb = 1, n = r1, k = hs, ao = r0 * hs, lda = hs, sa = T * hs, ldc = T, sc = T * T;
        else if (kind == CAUSAL_UPPER)
            k = T - r0, ao = r0 * T + r0, bo = r0 * hs;
        if (a.store == CT_STORE_BF16) { /* the bf16 path: every operand and C bf16 */
            ct_gemm_desc g = {.tb = tb, .m = r1 - r0, .n = n, .k = k, .batch = BNH, .alpha = 1.0f,
                              .a = a.mem, .a_off = a.off + ao, .lda = lda, .a_stride = sa,
                              .b = b.mem, .b_off = b.off + bo, .ldb = hs, .b_stride = T * hs,
                              .c = c.mem, .c_off = c.off + r0 * ldc, .ldc = ldc, .c_stride = sc,
                              .c_bf16 = 1};
            st = ct__ops_gemm_bf16(dev, &g);
        } else {
            ct_gemm_desc g = {.tb = tb, .m = r1 - r0, .n = n, .k = k, .batch = BNH, .alpha = 1.0f,
                              .a = a.mem, .a_off = a.off + ao, .lda = lda, .a_stride = sa,
                              .b = b.mem, .b_off = b.off + bo, .ldb = hs, .b_stride = T * hs,
                              .c = c.mem, .c_off = c.off + r0 * ldc, .ldc = ldc, .c_stride = sc};
            st = ct__ops_gemm_f32_batched(dev, &g);
        }
    }
    return st;
}

/* The bf16 path's scores (or dP) in fp32, a block of R rows of every (b,h) at a time, and the
 * softmax (or its backward) of each block into the bf16 att (or datt): the scores are never
 * rounded to bf16, only the probabilities and dS are. The fp32 block lives in `scratch`, a bf16
 * view the op may overwrite (vaccum in the forward, dqkvr in the backward: both written only
 * after the last block), of n bf16 elements, used from its first 4-byte-aligned element: R is
 * as many rows of (BNH, T) floats as fit (hs / 2 - 1 or more of T for vaccum). Block [r0, r1):
 * C[lr, j] = A[r0 + lr, :] . B[j, :] for j < r1 (the causal cut), then the kernel. */
static ct_status scores_bf16(ct_device *dev, int backward, size_t T, size_t hs, ct_view a,
                             ct_view b, ct_view att, ct_view datt, ct_view scratch, size_t n,
                             size_t BNH, const char *op) {
    size_t f0 = (scratch.off + 1) / 2, f1 = (scratch.off + n) / 2; /* whole floats inside */
    size_t R = f1 > f0 ? (f1 - f0) / (BNH * T) : 0;
    if (R > T) R = T;
    if (R < 1)
        return CT_ERR(ct_device_err(dev), CT_ERR_ARG,
                      "%s: the scratch of %zu bf16 elements holds no row of fp32 scores (%zu x %zu)",
                      op, n, BNH, T);
    float scale = 1.0f / sqrtf((float)hs);
    ct_status st = CT_OK;
    for (size_t r0 = 0; st == CT_OK && r0 < T; r0 += R) {
        size_t r1 = r0 + R < T ? r0 + R : T;
        ct_gemm_desc g = {.tb = 1, .m = r1 - r0, .n = r1, .k = hs, .batch = BNH, .alpha = 1.0f,
                          .a = a.mem, .a_off = a.off + r0 * hs, .lda = hs, .a_stride = T * hs,
                          .b = b.mem, .b_off = b.off, .ldb = hs, .b_stride = T * hs,
                          .c = scratch.mem, .c_off = f0, .ldc = T, .c_stride = R * T};
        if ((st = ct__ops_gemm_bf16(dev, &g)) != CT_OK) return st;
        ct_view sc = ct_view_of(scratch.mem, f0);
        if (backward) {
            karg k[] = {KMEM(datt), KMEM(att), KMEM(sc), KINT(BNH), KINT(T), KINT(r0), KINT(R),
                        KF(scale)};
            st = ct__ops_launch(dev, "attention", "softmax_causal_block_backward", 1, BNH * R, 64,
                                k, NARGS(k));
        } else {
            karg k[] = {KMEM(att), KMEM(sc), KINT(BNH), KINT(T), KINT(r0), KINT(R), KF(scale)};
            st = ct__ops_launch(dev, "attention", "softmax_causal_block_forward", 1, BNH * R, 64,
                                k, NARGS(k));
        }
    }
    return st;
}

/* The forward's probabilities alone: the same GEMM and softmax calls ct_attention_forward makes
 * (it calls this, with its vaccum as the scratch), so a recomputation gives bitwise the tensor
 * the forward kept. */
ct_status ct_attention_probs(ct_device *dev, ct_view att, ct_view qkvr, ct_view scratch, int B,
                             int T, int C, int NH) {
    NEED(dims_ok(B, T, 3 * C) && NH > 0 && C % NH == 0 && dims_ok((long long)B * NH, T, T),
         "ct_attention_probs", "B, T, C, NH must be positive with NH dividing C");
    int bf;
    VARIANT("ct_attention_probs", &bf, VIEWS(NV(att), NV(qkvr)), NO_VIEWS);
    int hs = C / NH;
    size_t BNH = (size_t)B * NH;
    size_t part = (size_t)B * T * C; /* q, k, v blocks of qkvr */
    if (bf) { /* fp32 scores in row blocks of the scratch, P rounded once */
        NEED(scratch.mem && scratch.store == CT_STORE_BF16, "ct_attention_probs",
             "bf16 needs a bf16 scratch of B*T*C elements (the forward's vaccum)");
        return scores_bf16(dev, 0, (size_t)T, (size_t)hs, qkvr, ct_view_at(qkvr, part), att,
                           ct_view_none(), scratch, part, BNH, "ct_attention_probs");
    }
    /* att (T,T) = q (T,hs) . k^T per (b,h), on and below the diagonal */
    ct_status st = gemm_causal(dev, CAUSAL_SCORES, (size_t)T, (size_t)hs, qkvr,
                               ct_view_at(qkvr, part), att, BNH);
    if (st != CT_OK) return st;
    float scale = 1.0f / sqrtf((float)hs);
    karg a[] = {KMEM(att), KINT(BNH * T), KINT(T), KF(scale)};
    if (ct_device_row_groups(dev))
        return ct__ops_launch_groups(dev, "attention", "softmax_causal_forward_rows", 0, BNH * T, a,
                             NARGS(a));
    return ct__ops_launch(dev, "attention", "softmax_causal_forward", 0, BNH * T, 64, a, NARGS(a));
}

ct_status ct_attention_forward(ct_device *dev, ct_view out, ct_view qkvr, ct_view att, ct_view inp,
                               ct_view vaccum, int B, int T, int C, int NH) {
    NEED(dims_ok(B, T, 3 * C) && NH > 0 && C % NH == 0 && dims_ok((long long)B * NH, T, T),
         "ct_attention_forward", "B, T, C, NH must be positive with NH dividing C");
    int bf;
    VARIANT("ct_attention_forward", &bf, VIEWS(NV(out), NV(qkvr), NV(att), NV(inp), NV(vaccum)),
            NO_VIEWS);
    int hs = C / NH;
    size_t BNH = (size_t)B * NH;
    size_t part = (size_t)B * T * C; /* q, k, v blocks of qkvr */
    ct_status st;
    {
        karg a[] = {KMEM(qkvr), KMEM(inp), KINT(B), KINT(T), KINT(NH), KINT(hs)};
        st = ct__ops_launch2(dev, "attention", "qkv_to_heads", bf, (size_t)C, (size_t)B * T, 256,
                             a, NARGS(a));
        if (st != CT_OK) return st;
    }
    /* bf16: fp32 scores in blocks of vaccum (scratch until the P.V product below) */
    if ((st = ct_attention_probs(dev, att, qkvr, vaccum, B, T, C, NH)) != CT_OK) return st;
    /* vaccum (T,hs) = att (T,T) . v (T,hs) per (b,h) */
    st = gemm_causal(dev, CAUSAL_LOWER, (size_t)T, (size_t)hs, att, ct_view_at(qkvr, 2 * part),
                     vaccum, BNH);
    if (st != CT_OK) return st;
    karg a[] = {KMEM(out), KMEM(vaccum), KINT(B), KINT(T), KINT(NH), KINT(hs)};
    return ct__ops_launch2(dev, "attention", "heads_to_seq", bf, (size_t)C, (size_t)B * T, 256, a, NARGS(a));
}

ct_status ct_attention_backward(ct_device *dev, ct_view dinp, ct_view dqkvr, ct_view datt,
                                ct_view dvaccum, ct_view dout, ct_view qkvr, ct_view att, int B,
                                int T, int C, int NH) {
    NEED(dims_ok(B, T, 3 * C) && NH > 0 && C % NH == 0 && dims_ok((long long)B * NH, T, T),
         "ct_attention_backward", "B, T, C, NH must be positive with NH dividing C");
    int bf;
    VARIANT("ct_attention_backward", &bf,
            VIEWS(NV(dinp), NV(dqkvr), NV(datt), NV(dvaccum), NV(dout), NV(qkvr), NV(att)),
            NO_VIEWS);
    int hs = C / NH;
    size_t BNH = (size_t)B * NH;
    size_t part = (size_t)B * T * C;
    ct_status st;
    {
        karg a[] = {KMEM(dvaccum), KMEM(dout), KINT(B), KINT(T), KINT(NH), KINT(hs)};
        st = ct__ops_launch2(dev, "attention", "seq_to_heads", bf, (size_t)C, (size_t)B * T, 256, a, NARGS(a));
        if (st != CT_OK) return st;
    }
    if (bf) { /* dP in fp32 blocks of dqkvr (scratch until dv below), dS into datt in bf16 */
        st = scores_bf16(dev, 1, (size_t)T, (size_t)hs, dvaccum, ct_view_at(qkvr, 2 * part), att,
                         datt, dqkvr, 3 * part, BNH, "ct_attention_backward");
        if (st != CT_OK) return st;
    } else {
        /* datt (T,T) = dvaccum (T,hs) . v^T */
        st = gemm_causal(dev, CAUSAL_SCORES, (size_t)T, (size_t)hs, dvaccum,
                         ct_view_at(qkvr, 2 * part), datt, BNH);
        if (st != CT_OK) return st;
        float scale = 1.0f / sqrtf((float)hs);
        karg a[] = {KMEM(datt), KMEM(att), KINT(BNH * T), KINT(T), KF(scale)};
        st = ct_device_row_groups(dev)
                 ? ct__ops_launch_groups(dev, "attention", "softmax_causal_backward_rows", 0, BNH * T, a,
                                 NARGS(a))
                 : ct__ops_launch(dev, "attention", "softmax_causal_backward", 0, BNH * T, 64, a, NARGS(a));
        if (st != CT_OK) return st;
    }
    /* dv (T,hs) = att^T (T,T) . dvaccum (T,hs): after the softmax backward, the last reader of
     * att as it is (the transpose is done in place) */
    if ((st = transpose_square(dev, (size_t)T, att, BNH)) != CT_OK) return st;
    st = gemm_causal(dev, CAUSAL_UPPER, (size_t)T, (size_t)hs, att, dvaccum,
                     ct_view_at(dqkvr, 2 * part), BNH);
    if (st != CT_OK) return st;
    /* dq (T,hs) = dpre (T,T) . k (T,hs) */
    st = gemm_causal(dev, CAUSAL_LOWER, (size_t)T, (size_t)hs, datt, ct_view_at(qkvr, part),
                     dqkvr, BNH);
    if (st != CT_OK) return st;
    /* dk (T,hs) = dpre^T (T,T) . q (T,hs) */
    if ((st = transpose_square(dev, (size_t)T, datt, BNH)) != CT_OK) return st;
    st = gemm_causal(dev, CAUSAL_UPPER, (size_t)T, (size_t)hs, datt, qkvr,
                     ct_view_at(dqkvr, part), BNH);
    if (st != CT_OK) return st;
    karg a[] = {KMEM(dinp), KMEM(dqkvr), KINT(B), KINT(T), KINT(NH), KINT(hs)};
    return ct__ops_launch2(dev, "attention", "heads_to_qkv", bf, (size_t)C, (size_t)B * T, 256, a,
                           NARGS(a));
}

/* ------------------------------------------------------------------ fused attention */

/* The largest power of two dividing n, at most cap. */
static int pow2_divisor(int n, int cap) {
    int p = 1;
    while (n % (2 * p) == 0 && 2 * p <= cap) p *= 2;
    return p;
}
static int is_pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

/* Work-items across the key vectors of a score tile and across the HS column vectors. */
static void fused_split(int hs, const ct_attn_blocks *k, int *sc, int *oc) {
    *sc = k->bk / k->vw < k->nt ? k->bk / k->vw : k->nt;
    *oc = pow2_divisor(hs / k->vw, k->nt);
}

size_t ct_attn_blocks_local_bytes(int hs, const ct_attn_blocks *k, int backward) {
    size_t pad = k->vw == 1; /* rows padded by one float against bank conflicts (scalar lanes) */
    size_t q = (size_t)k->bq * (hs + pad), kv = (size_t)hs * (k->bk + pad);
    size_t kr = (size_t)k->bk * (hs + pad);
    size_t p = (size_t)k->bq * (k->bk + pad), r = (size_t)k->bq;
    size_t fwd = q + kv + kr + p + 3 * r;
    size_t dkv = 2 * kv + 2 * q + 2 * p + 2 * r;
    size_t dq = 2 * q + 2 * kv + kr + p + 2 * r;
    size_t n = backward ? (dkv > dq ? dkv : dq) : fwd;
    return n * sizeof(float);
}

int ct_attn_blocks_check(const ct_device_info *info, int hs, const ct_attn_blocks *k, int backward,
                         char *why, size_t len) {
    char tmp[8];
    if (!why) why = tmp, len = sizeof tmp;
    if (hs < 1 || !is_pow2(k->bq) || !is_pow2(k->bk) || !is_pow2(k->nt) || k->nt > 1024) {
        snprintf(why, len, "block sizes %d x %d and %d work-items must be powers of two (<= 1024)",
                 k->bq, k->bk, k->nt);
        return 1;
    }
    if (!is_pow2(k->vw) || k->vw > 16 || k->bk % k->vw || hs % k->vw) {
        snprintf(why, len, "vector width %d must be 1, 2, 4, 8 or 16 and divide %d keys and head size %d",
                 k->vw, k->bk, hs);
        return 1;
    }
    int sc, oc;
    fused_split(hs, k, &sc, &oc);
    int sr = k->nt / sc, orow = k->nt / oc;
    if (sr > k->bq || k->bq % sr || k->bq % orow || (backward && k->bk % orow)) {
        snprintf(why, len,
                 "%d work-items do not tile %d queries x %d keys at head size %d (need %d and %d "
                 "to divide the blocks)",
                 k->nt, k->bq, k->bk, hs, sr, orow);
        return 1;
    }
    /* private accumulators per work-item: keep them within what registers (GPU) hold */
    int sn = (k->bq / sr) * (k->bk / sc), on = (k->bq / orow) * (hs / oc);
    int kn = (k->bk / orow) * (hs / oc); /* floats: the vectors' lanes counted */
    int priv = backward ? (2 * sn + (2 * kn > on ? 2 * kn : on)) : sn + on;
    /* GPU registers; on a CPU device privates live in the cache-resident stack */
    int pmax = info && (info->type & CL_DEVICE_TYPE_CPU) ? 4096 : 256;
    if (priv > pmax) {
        snprintf(why, len, "%d private floats per work-item (more than %d)", priv, pmax);
        return 1;
    }
    size_t lm = ct_attn_blocks_local_bytes(hs, k, backward);
    if (info && lm > info->local_mem_bytes) {
        snprintf(why, len, "needs %zu bytes of local memory, the device has %llu", lm,
                 (unsigned long long)info->local_mem_bytes);
        return 1;
    }
    return 0;
}

ct_attn_cfg ct_attn_cfg_default(const ct_device_info *info, int hs) {
    static const ct_attn_blocks cand[] = {{16, 16, 64, 1}, {16, 16, 16, 1}, {8, 8, 8, 1},
                                          {4, 4, 4, 1},    {2, 2, 2, 1},    {1, 1, 1, 1}};
    ct_attn_cfg c = {{1, 1, 1, 1}, {1, 1, 1, 1}, 0};
    int nf = 0, nb = 0;
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
        if (!nf && !ct_attn_blocks_check(info, hs, &cand[i], 0, NULL, 0)) c.fwd = cand[i], nf = 1;
        if (!nb && !ct_attn_blocks_check(info, hs, &cand[i], 1, NULL, 0)) c.bwd = cand[i], nb = 1;
    }
    return c;
}

/* The fused kernel `name` built for head size hs and block shape k (one program per shape). */
static ct_status fused_kernel(ct_device *dev, int hs, const ct_attn_blocks *k, int backward,
                              int bf16, const char *name, cl_kernel *out) {
    char why[200];
    if (ct_attn_blocks_check(ct_device_get_info(dev), hs, k, backward, why, sizeof why))
        return CT_ERR(ct_device_err(dev), CT_ERR_ARG, "fused attention (%s): %s", name, why);
    const ct_cl_source *src = ct__ops_find_source("attention_fused");
    if (!src)
        return CT_ERR(ct_device_err(dev), CT_ERR_NOT_FOUND,
                      "engine kernel source 'attention_fused.cl' is not embedded (build problem)");
    int sc, oc;
    fused_split(hs, k, &sc, &oc);
    char opt[200];
    snprintf(opt, sizeof opt, "-D HS=%d -D BQ=%d -D BK=%d -D NT=%d -D VW=%d -D SC=%d -D OC=%d%s%s",
             hs, k->bq, k->bk, k->nt, k->vw, sc, oc, bf16 ? " " : "", bf16 ? CT__BF16_OPTS : "");
    ct_status st = ct_kernel_get(dev, src, opt, name, out);
    if (st != CT_OK) return st;
    size_t wg = 1;
    if ((st = ct_kernel_max_work_group(dev, *out, &wg)) != CT_OK) return st;
    if (wg < (size_t)k->nt)
        return CT_ERR(ct_device_err(dev), CT_ERR_UNSUPPORTED,
                      "fused attention kernel %s with %d work-items: the device allows %zu for it",
                      name, k->nt, wg);
    return CT_OK;
}

static ct_status fused_launch(ct_device *dev, int hs, const ct_attn_blocks *k, int backward,
                              int bf16, const char *name, size_t groups, size_t BNH,
                              const karg *args, int nargs) {
    cl_kernel kern = NULL;
    ct_status st = fused_kernel(dev, hs, k, backward, bf16, name, &kern);
    for (int i = 0; st == CT_OK && i < nargs; i++)
        st = ct_kernel_set_arg(dev, kern, (cl_uint)i, args[i].size, args[i].p);
    if (st != CT_OK) return st;
    size_t local[2] = {(size_t)k->nt, 1}, global[2] = {groups * (size_t)k->nt, BNH};
    return ct_kernel_launch(dev, kern, 2, global, local, NULL);
}

/* ------------------------------------------------------------------ the mma variant */

/* attention_mma.cl's shape per head size: W warps (16 W rows of the work-group's own block),
 * BKV rows per step. Chosen so the four (rows x HS + 8) bf16 arrays fit NVIDIA's 48 KiB and
 * ptxas (scripts/ptx_check) reports no spills at sm_80 and sm_90. */
typedef struct mma_shape {
    int hs, w, bkv;
} mma_shape;
static const mma_shape kMmaShapes[] = {{32, 4, 64}, {64, 4, 64}, {128, 2, 32}};

static const mma_shape *mma_shape_of(int hs) {
    for (size_t i = 0; i < sizeof kMmaShapes / sizeof kMmaShapes[0]; i++)
        if (kMmaShapes[i].hs == hs) return &kMmaShapes[i];
    return NULL;
}

int ct_attn_mma_supports(int hs) { return mma_shape_of(hs) != NULL; }

size_t ct_attn_mma_local_bytes(int hs, int emulated) {
    const mma_shape *m = mma_shape_of(hs);
    if (!m) return 0;
    size_t rows = (size_t)(16 * m->w > m->bkv ? 16 * m->w : m->bkv);
    /* the stand-ins' scratch: CT_WARP_SCRATCH (192) words a warp, mma_nv.clh */
    return 4 * rows * (size_t)(hs + 8) * 2 + (emulated ? (size_t)m->w * 192 * 4 : 0);
}

static ct_status mma_kernel(ct_device *dev, int hs, int variant, const char *name,
                            cl_kernel *out, int *nt) {
    const mma_shape *m = mma_shape_of(hs);
    if (variant != CT_ATTN_MMA_PTX && variant != CT_ATTN_MMA_EMULATED)
        return CT_ERR(ct_device_err(dev), CT_ERR_ARG, "fused attention: mma variant %d", variant);
    if (!m)
        return CT_ERR(ct_device_err(dev), CT_ERR_ARG,
                      "fused attention (mma): no block shape for head size %d (32, 64, 128)", hs);
    size_t lm = ct_attn_mma_local_bytes(hs, variant == CT_ATTN_MMA_EMULATED);
    const ct_device_info *info = ct_device_get_info(dev);
    if (lm > info->local_mem_bytes)
        return CT_ERR(ct_device_err(dev), CT_ERR_UNSUPPORTED,
                      "fused attention (mma) at head size %d needs %zu bytes of local memory, "
                      "the device has %llu", hs, lm, (unsigned long long)info->local_mem_bytes);
    const ct_cl_source *src = ct__ops_find_source("attention_mma");
    if (!src)
        return CT_ERR(ct_device_err(dev), CT_ERR_NOT_FOUND,
                      "engine kernel source 'attention_mma.cl' is not embedded (build problem)");
    char opt[120];
    snprintf(opt, sizeof opt, "-D HS=%d -D W=%d -D BKV=%d%s", hs, m->w, m->bkv,
             variant == CT_ATTN_MMA_PTX ? " -D CT_MMA_NV_PTX" : "");
    ct_status st = ct_kernel_get(dev, src, opt, name, out);
    if (st != CT_OK) return st;
    size_t wg = 1;
    *nt = 32 * m->w;
    if ((st = ct_kernel_max_work_group(dev, *out, &wg)) != CT_OK) return st;
    if (wg < (size_t)*nt && strcmp(name, "attn_mma_dot"))
        return CT_ERR(ct_device_err(dev), CT_ERR_UNSUPPORTED,
                      "fused attention kernel %s with %d work-items: the device allows %zu for it",
                      name, *nt, wg);
    return CT_OK;
}

/* Launch `name` over (groups of the own block, BNH). */
static ct_status mma_launch(ct_device *dev, int hs, int variant, const char *name, int T,
                            size_t BNH, const karg *args, int nargs) {
    cl_kernel kern = NULL;
    int nt = 0;
    ct_status st = mma_kernel(dev, hs, variant, name, &kern, &nt);
    for (int i = 0; st == CT_OK && i < nargs; i++)
        st = ct_kernel_set_arg(dev, kern, (cl_uint)i, args[i].size, args[i].p);
    if (st != CT_OK) return st;
    size_t bw = (size_t)nt / 2; /* 16 rows a warp */
    size_t local[2] = {(size_t)nt, 1}, global[2] = {((size_t)T + bw - 1) / bw * nt, BNH};
    return ct_kernel_launch(dev, kern, 2, global, local, NULL);
}

ct_status ct_attention_fused_warmup_store(ct_device *dev, const ct_attn_cfg *cfg, int hs,
                                          ct_store store) {
    cl_kernel k = NULL;
    int bf = store == CT_STORE_BF16, nt;
    if (bf && cfg->mma) {
        ct_status st = mma_kernel(dev, hs, cfg->mma, "attn_mma_forward", &k, &nt);
        if (st == CT_OK) st = mma_kernel(dev, hs, cfg->mma, "attn_mma_backward_dkv", &k, &nt);
        if (st == CT_OK) st = mma_kernel(dev, hs, cfg->mma, "attn_mma_backward_dq", &k, &nt);
        return st;
    }
    ct_status st = fused_kernel(dev, hs, &cfg->fwd, 0, bf, "attn_fused_forward", &k);
    if (st == CT_OK) st = fused_kernel(dev, hs, &cfg->bwd, 1, bf, "attn_fused_backward_dkv", &k);
    if (st == CT_OK) st = fused_kernel(dev, hs, &cfg->bwd, 1, bf, "attn_fused_backward_dq", &k);
    return st;
}

ct_status ct_attention_fused_warmup(ct_device *dev, const ct_attn_cfg *cfg, int hs) {
    return ct_attention_fused_warmup_store(dev, cfg, hs, CT_STORE_F32);
}

#define FUSED_DIMS_OK                                                                              \
    (dims_ok(B, T, 3 * C) && NH > 0 && C % NH == 0 && dims_ok((long long)B * NH, T, 1))

ct_status ct_attention_fused_forward(ct_device *dev, const ct_attn_cfg *cfg, ct_view out,
                                     ct_view lse, ct_view inp, int B, int T, int C, int NH) {
    NEED(FUSED_DIMS_OK, "ct_attention_fused_forward",
         "B, T, C, NH must be positive with NH dividing C");
    int bf;
    VARIANT("ct_attention_fused_forward", &bf, VIEWS(NV(out), NV(inp)), VIEWS(NV(lse)));
    int hs = C / NH;
    ct_attn_cfg c = cfg ? *cfg : ct_attn_cfg_default(ct_device_get_info(dev), hs);
    float scale = 1.0f / sqrtf((float)hs);
    size_t nqb = ((size_t)T + c.fwd.bq - 1) / c.fwd.bq;
    karg a[] = {KMEM(out), KMEM(lse), KMEM(inp), KINT(T), KINT(NH), KF(scale)};
    if (bf && c.mma)
        return mma_launch(dev, hs, c.mma, "attn_mma_forward", T, (size_t)B * NH, a, NARGS(a));
    return fused_launch(dev, hs, &c.fwd, 0, bf, "attn_fused_forward", nqb, (size_t)B * NH, a,
                        NARGS(a));
}

ct_status ct_attention_fused_backward(ct_device *dev, const ct_attn_cfg *cfg, ct_view dinp,
                                      ct_view dsum, ct_view dout, ct_view inp, ct_view out,
                                      ct_view lse, int B, int T, int C, int NH) {
    NEED(FUSED_DIMS_OK, "ct_attention_fused_backward",
         "B, T, C, NH must be positive with NH dividing C");
    int bf;
    VARIANT("ct_attention_fused_backward", &bf, VIEWS(NV(dinp), NV(dout), NV(inp), NV(out)),
            VIEWS(NV(dsum), NV(lse)));
    int hs = C / NH;
    ct_attn_cfg c = cfg ? *cfg : ct_attn_cfg_default(ct_device_get_info(dev), hs);
    float scale = 1.0f / sqrtf((float)hs);
    size_t BNH = (size_t)B * NH;
    ct_status st;
    int mma = bf ? c.mma : 0;
    {
        cl_kernel k = NULL;
        int nt;
        karg a[] = {KMEM(dsum), KMEM(dout), KMEM(out), KINT(B), KINT(T), KINT(NH)};
        st = mma ? mma_kernel(dev, hs, mma, "attn_mma_dot", &k, &nt)
                 : fused_kernel(dev, hs, &c.bwd, 1, bf, "attn_fused_dot", &k);
        for (int i = 0; st == CT_OK && i < NARGS(a); i++)
            st = ct_kernel_set_arg(dev, k, (cl_uint)i, a[i].size, a[i].p);
        size_t wg = 1;
        if (st == CT_OK) st = ct_kernel_max_work_group(dev, k, &wg);
        if (st != CT_OK) return st;
        size_t l0 = 1;
        while (l0 * 2 <= (size_t)NH && l0 * 2 <= wg && l0 < 64) l0 *= 2;
        size_t local[2] = {l0, 1}, global[2] = {((size_t)NH + l0 - 1) / l0 * l0, (size_t)B * T};
        if ((st = ct_kernel_launch(dev, k, 2, global, local, NULL)) != CT_OK) return st;
    }
    {
        size_t nkb = ((size_t)T + c.bwd.bk - 1) / c.bwd.bk;
        karg a[] = {KMEM(dinp), KMEM(dout), KMEM(inp), KMEM(lse), KMEM(dsum),
                    KINT(T),    KINT(NH),   KF(scale)};
        st = mma ? mma_launch(dev, hs, mma, "attn_mma_backward_dkv", T, BNH, a, NARGS(a))
                 : fused_launch(dev, hs, &c.bwd, 1, bf, "attn_fused_backward_dkv", nkb, BNH, a,
                                NARGS(a));
        if (st != CT_OK) return st;
    }
    size_t nqb = ((size_t)T + c.bwd.bq - 1) / c.bwd.bq;
    karg a[] = {KMEM(dinp), KMEM(dout), KMEM(inp), KMEM(lse), KMEM(dsum),
                KINT(T),    KINT(NH),   KF(scale)};
    if (mma) return mma_launch(dev, hs, mma, "attn_mma_backward_dq", T, BNH, a, NARGS(a));
    return fused_launch(dev, hs, &c.bwd, 1, bf, "attn_fused_backward_dq", nqb, BNH, a, NARGS(a));
}

