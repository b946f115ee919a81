/* ops.c - host wrappers of the engine's device ops: argument checks, kernel lookup, launch.
 *
 * Every wrapper only enqueues (kernels on the device's in-order queue, GEMMs through ct_gemm);
 * nothing is read back or allocated. Kernels are fetched from the device's program cache by
 * (file, kernel name); 1-D launches round the global size up to a multiple of a work-group size
 * that is never above CL_KERNEL_WORK_GROUP_SIZE, and kernels guard their index. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ct_engine_ops.h"

typedef struct karg {
    size_t size;
    const void *p;
} karg;

/* Argument makers; the compound literals live until the end of the enclosing block. */
#define KMEM(v) {sizeof(cl_mem), &(v).mem}, {sizeof(cl_ulong), &(cl_ulong){(cl_ulong)(v).off}}
#define KINT(x) {sizeof(cl_int), &(cl_int){(cl_int)(x)}}
#define KUL(x) {sizeof(cl_ulong), &(cl_ulong){(cl_ulong)(x)}}
#define KF(x) {sizeof(cl_float), &(cl_float){(cl_float)(x)}}
#define NARGS(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const ct_cl_source *find_source(const char *file) {
    for (int i = 0; i < ct_engine_kernels_count; i++)
        if (!strcmp(ct_engine_kernels[i].name, file)) return &ct_engine_kernels[i];
    return NULL;
}

static ct_status get_kernel(ct_device *dev, const char *file, const char *name, cl_kernel *k) {
    const ct_cl_source *src = find_source(file);
    if (!src)
        return CT_ERR(ct_device_err(dev), CT_ERR_NOT_FOUND,
                      "engine kernel source '%s.cl' is not embedded (build problem)", file);
    return ct_kernel_get(dev, src, "", name, k);
}

/* Launch `name` from `file` over n work-items (1-D), work-group size `pref` or less. */
/* Fetch a kernel, set its arguments, and pick a power-of-two work-group size <= pref that the
 * kernel allows and that does not pad far past n. */
static ct_status prepare(ct_device *dev, const char *file, const char *name, const karg *args,
                         int nargs, size_t n, size_t pref, cl_kernel *k, size_t *local) {
    ct_status st = get_kernel(dev, file, name, k);
    if (st != CT_OK) return st;
    for (int i = 0; i < nargs; i++) {
        st = ct_kernel_set_arg(dev, *k, (cl_uint)i, args[i].size, args[i].p);
        if (st != CT_OK) return st;
    }
    size_t wg = 1;
    st = ct_kernel_max_work_group(dev, *k, &wg);
    if (st != CT_OK) return st;
    size_t l = 1;
    while (l * 2 <= pref && l * 2 <= wg) l *= 2;
    while (l > 1 && l > n) l /= 2; /* tiny ranges: do not pad far past n */
    *local = l;
    return CT_OK;
}

static ct_status launch(ct_device *dev, const char *file, const char *name, size_t n, size_t pref,
                        const karg *args, int nargs) {
    if (n == 0) return CT_OK;
    cl_kernel k = NULL;
    size_t local = 1;
    ct_status st = prepare(dev, file, name, args, nargs, n, pref, &k, &local);
    if (st != CT_OK) return st;
    size_t global = (n + local - 1) / local * local;
    return ct_kernel_launch(dev, k, 1, &global, &local, NULL);
}

/* 2-D launch: n0 x n1 work-items, work-groups of (<= pref0) x 1. */
static ct_status launch2(ct_device *dev, const char *file, const char *name, size_t n0, size_t n1,
                         size_t pref0, const karg *args, int nargs) {
    if (n0 == 0 || n1 == 0) return CT_OK;
    cl_kernel k = NULL;
    size_t l0 = 1;
    ct_status st = prepare(dev, file, name, args, nargs, n0, pref0, &k, &l0);
    if (st != CT_OK) return st;
    size_t local[2] = {l0, 1}, global[2] = {(n0 + l0 - 1) / l0 * l0, n1};
    return ct_kernel_launch(dev, k, 2, global, local, NULL);
}

/* A work-group per row (or per chunk): ngroups groups of a power-of-two size <= 256 (the
 * kernels' local reduction buffers) that the kernel allows. */
static ct_status launch_groups(ct_device *dev, const char *file, const char *name, size_t ngroups,
                               const karg *args, int nargs) {
    if (ngroups == 0) return CT_OK;
    cl_kernel k = NULL;
    size_t local = 1;
    ct_status st = prepare(dev, file, name, args, nargs, 256, 256, &k, &local);
    if (st != CT_OK) return st;
    size_t global = ngroups * local;
    return ct_kernel_launch(dev, k, 1, &global, &local, NULL);
}

static ct_status bad(ct_device *dev, const char *op, const char *what) {
    return CT_ERR(ct_device_err(dev), CT_ERR_ARG, "%s: %s", op, what);
}

/* Shapes must be positive and every index the kernels compute must fit an int where they use one. */
static int dims_ok(long long a, long long b, long long c) {
    return a > 0 && b > 0 && c > 0 && a * b * c < (long long)INT_MAX;
}

#define NEED(cond, op, what)                           \
    do {                                               \
        if (!(cond)) return bad(dev, (op), (what));    \
    } while (0)

const char *ct_profile_name(int bucket) {
    static const char *const names[] = {
#define CT__PROF_NAME(n) #n,
        CT_PROFILE_BUCKETS(CT__PROF_NAME)
#undef CT__PROF_NAME
    };
    return bucket >= 0 && bucket < CT_PROF__COUNT ? names[bucket] : "?";
}

/* ------------------------------------------------------------------ warm-up */

static int warmed(const ct_cl_source *src) { return strcmp(src->name, "attention_fused") != 0; }

int ct_ops_program_count(void) {
    int n = 0;
    for (int i = 0; i < ct_engine_kernels_count; i++) n += warmed(&ct_engine_kernels[i]);
    return n;
}

ct_status ct_ops_warmup(ct_device *dev) {
    for (int i = 0; i < ct_engine_kernels_count; i++) {
        cl_program p = NULL;
        /* the fused attention is built per (head size, block shape) when first used */
        if (!warmed(&ct_engine_kernels[i])) continue;
        ct_status st = ct_program_get(dev, &ct_engine_kernels[i], "", &p);
        if (st != CT_OK) return st;
    }
    return CT_OK;
}

/* ------------------------------------------------------------------ encoder */

ct_status ct_encoder_forward(ct_device *dev, ct_view out, ct_view inp, ct_view wte, ct_view wpe,
                             int B, int T, int C, int Vp) {
    NEED(dims_ok(B, T, C) && Vp > 0, "ct_encoder_forward", "B, T, C, Vp must be positive");
    karg a[] = {KMEM(out), KMEM(inp), KMEM(wte), KMEM(wpe), KINT(B * T), KINT(T), KINT(C),
                KINT(Vp)};
    return launch2(dev, "encoder", "encoder_forward", (size_t)C, (size_t)B * T, 256, a, NARGS(a));
}

ct_status ct_encoder_backward(ct_device *dev, ct_view dwte, ct_view dwpe, ct_view dout,
                              ct_view inp, int B, int T, int C, int Vp) {
    NEED(dims_ok(B, T, C) && Vp > 0, "ct_encoder_backward", "B, T, C, Vp must be positive");
    ct_status st;
    {
        karg a[] = {KMEM(dwte), KMEM(dout), KMEM(inp), KINT(B * T), KINT(C), KINT(Vp)};
        st = launch(dev, "encoder", "encoder_backward_wte", (size_t)C, 64, a, NARGS(a));
        if (st != CT_OK) return st;
    }
    karg a[] = {KMEM(dwpe), KMEM(dout), KINT(B), KINT(T), KINT(C)};
    return launch(dev, "encoder", "encoder_backward_wpe", (size_t)T * C, 256, a, NARGS(a));
}

/* ------------------------------------------------------------------ layernorm */

ct_status ct_layernorm_forward(ct_device *dev, ct_view out, ct_view mean, ct_view rstd,
                               ct_view inp, ct_view weight, ct_view bias, int B, int T, int C) {
    NEED(dims_ok(B, T, C), "ct_layernorm_forward", "B, T, C must be positive");
    karg a[] = {KMEM(out),    KMEM(mean), KMEM(rstd),   KMEM(inp),
                KMEM(weight), KMEM(bias), KINT(B * T), KINT(C)};
    if (ct_device_row_groups(dev))
        return launch_groups(dev, "layernorm", "layernorm_forward_rows", (size_t)B * T, a, NARGS(a));
    return launch(dev, "layernorm", "layernorm_forward", (size_t)B * T, 64, a, NARGS(a));
}

ct_status ct_layernorm_backward(ct_device *dev, ct_view dinp, ct_view dweight, ct_view dbias,
                                ct_view dout, ct_view inp, ct_view weight, ct_view mean,
                                ct_view rstd, int B, int T, int C, int accumulate_dinp) {
    NEED(dims_ok(B, T, C), "ct_layernorm_backward", "B, T, C must be positive");
    NEED((dweight.mem != NULL) == (dbias.mem != NULL), "ct_layernorm_backward",
         "dweight and dbias are given together or not at all");
    ct_status st;
    if (dweight.mem) {
        karg a[] = {KMEM(dweight), KMEM(dbias), KMEM(dout), KMEM(inp),
                    KMEM(mean),    KMEM(rstd),  KINT(B * T), KINT(C)};
        cl_kernel k = NULL;
        size_t local = 0;
        if (ct_device_row_groups(dev) &&
            (st = prepare(dev, "layernorm", "layernorm_backward_dparams_groups", a, NARGS(a), 256,
                          256, &k, &local)) != CT_OK)
            return st;
        if (local == 256) { /* 32 channels x 8 row lanes per group */
            size_t global = ((size_t)C + 31) / 32 * 256;
            st = ct_kernel_launch(dev, k, 1, &global, &local, NULL);
        } else {
            st = launch(dev, "layernorm", "layernorm_backward_dparams", (size_t)C, 64, a, NARGS(a));
        }
        if (st != CT_OK) return st;
    }
    if (!dinp.mem) return CT_OK;
    karg a[] = {KMEM(dinp), KMEM(dout),  KMEM(inp), KMEM(weight),         KMEM(mean),
                KMEM(rstd), KINT(B * T), KINT(C),   KINT(accumulate_dinp != 0)};
    if (ct_device_row_groups(dev))
        return launch_groups(dev, "layernorm", "layernorm_backward_dinp_rows", (size_t)B * T, a,
                             NARGS(a));
    return launch(dev, "layernorm", "layernorm_backward_dinp", (size_t)B * T, 64, a, NARGS(a));
}

/* ------------------------------------------------------------------ bias, residual, gelu */

ct_status ct_bias_forward(ct_device *dev, ct_view out, ct_view bias, size_t N, int OC) {
    NEED(dims_ok((long long)N, OC, 1), "ct_bias_forward", "N, OC must be positive");
    karg a[] = {KMEM(out), KMEM(bias), KINT(N), KINT(OC)};
    return launch2(dev, "elementwise", "bias_add", (size_t)OC, N, 256, a, NARGS(a));
}

ct_status ct_bias_backward(ct_device *dev, ct_view dbias, ct_view dout, size_t N, int OC) {
    NEED(dims_ok((long long)N, OC, 1), "ct_bias_backward", "N, OC must be positive");
    karg a[] = {KMEM(dbias), KMEM(dout), KINT(N), KINT(OC)};
    return launch(dev, "elementwise", "bias_backward", (size_t)OC, 64, a, NARGS(a));
}

ct_status ct_residual_forward(ct_device *dev, ct_view out, ct_view a_, ct_view b_, size_t N) {
    NEED(N < (size_t)INT_MAX, "ct_residual_forward", "N too large");
    karg a[] = {KMEM(out), KMEM(a_), KMEM(b_), KINT(N)};
    return launch(dev, "elementwise", "residual_forward", N, 256, a, NARGS(a));
}

ct_status ct_residual_backward(ct_device *dev, ct_view da, ct_view db, ct_view dout, size_t N) {
    NEED(N < (size_t)INT_MAX, "ct_residual_backward", "N too large");
    karg a[] = {KMEM(da), KMEM(db), KMEM(dout), KINT(N)};
    return launch(dev, "elementwise", "residual_backward", N, 256, a, NARGS(a));
}

ct_status ct_gelu_forward(ct_device *dev, ct_view out, ct_view inp, size_t N) {
    NEED(N < (size_t)INT_MAX, "ct_gelu_forward", "N too large");
    karg a[] = {KMEM(out), KMEM(inp), KINT(N)};
    return launch(dev, "elementwise", "gelu_forward", N, 256, a, NARGS(a));
}

ct_status ct_gelu_backward(ct_device *dev, ct_view dinp, ct_view inp, ct_view dout, size_t N) {
    NEED(N < (size_t)INT_MAX, "ct_gelu_backward", "N too large");
    karg a[] = {KMEM(dinp), KMEM(inp), KMEM(dout), KINT(N)};
    return launch(dev, "elementwise", "gelu_backward", N, 256, a, NARGS(a));
}

/* ------------------------------------------------------------------ matmul */

/* C = op(A) op(B) + beta0 C with the inner dimension K summed in slices of CT__K_SLICE (beta = 1
 * after the first). CLBlast's Xgemm has no cache blocking over K; on PoCL (2 cores, quiet) slices
 * of 1024 measured 1.6-2.2x faster for every K > 1024 of GPT-2 shapes: the logits input gradient
 * 1024x256 . K=Vp 20 -> 44 GFLOP/s, 256x768 K=Vp 37 -> 63, the MLP's K = 4C = 3072 forward
 * 37 -> 62 and input gradient 38 -> 64. Shapes with K <= 1024 are one call, as before. Only
 * CPU devices slice (that is where it was measured); other devices get one call per product. */
#define CT__K_SLICE ((size_t)1024)
static ct_status gemm_ksliced(ct_device *dev, int ta, int tb, size_t m, size_t n, size_t k,
                              ct_view a, size_t lda, ct_view b, size_t ldb, float beta0, ct_view c,
                              size_t ldc) {
    ct_status st = CT_OK;
    size_t slice = (ct_device_get_info(dev)->type & CL_DEVICE_TYPE_CPU) ? CT__K_SLICE : k;
    for (size_t k0 = 0; st == CT_OK && k0 < k; k0 += slice) {
        size_t kk = k - k0 < slice ? k - k0 : slice;
        size_t ao = a.off + (ta ? k0 * lda : k0), bo = b.off + (tb ? k0 : k0 * ldb);
        st = ct_gemm(dev, ta, tb, m, n, kk, 1.0f, a.mem, ao, lda, b.mem, bo, ldb,
                     k0 ? 1.0f : beta0, c.mem, c.off, ldc, NULL);
    }
    return st;
}

ct_status ct_matmul_forward(ct_device *dev, ct_view out, ct_view inp, ct_view weight, ct_view bias,
                            int B, int T, int C, int OC) {
    NEED(dims_ok(B, T, C) && dims_ok(B, T, OC), "ct_matmul_forward", "B, T, C, OC must be positive");
    size_t N = (size_t)B * T;
    /* (N,C) x (OC,C)^T -> (N,OC) */
    ct_status st = gemm_ksliced(dev, 0, 1, N, (size_t)OC, (size_t)C, inp, (size_t)C, weight,
                                (size_t)C, 0.0f, out, (size_t)OC);
    if (st != CT_OK || !bias.mem) return st;
    return ct_bias_forward(dev, out, bias, N, OC);
}

ct_status ct_matmul_backward(ct_device *dev, ct_view dinp, ct_view dweight, ct_view dbias,
                             ct_view dout, ct_view inp, ct_view weight, int B, int T, int C,
                             int OC) {
    NEED(dims_ok(B, T, C) && dims_ok(B, T, OC), "ct_matmul_backward",
         "B, T, C, OC must be positive");
    size_t N = (size_t)B * T;
    ct_status st = CT_OK;
    if (dinp.mem) /* dinp (N,C) = dout (N,OC) . weight (OC,C) */
        st = gemm_ksliced(dev, 0, 0, N, (size_t)C, (size_t)OC, dout, (size_t)OC, weight,
                          (size_t)C, 0.0f, dinp, (size_t)C);
    if (st == CT_OK && dweight.mem) /* dweight (OC,C) += dout^T (OC,N) . inp (N,C) */
        st = gemm_ksliced(dev, 1, 0, (size_t)OC, (size_t)C, N, dout, (size_t)OC, inp, (size_t)C,
                          1.0f, dweight, (size_t)C);
    if (st == CT_OK && dbias.mem) st = ct_bias_backward(dev, dbias, dout, N, OC);
    return st;
}

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
    return launch2(dev, "attention", "transpose_square_inplace", T, BNH * T, 64, args,
                   NARGS(args));
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
        st = ct_gemm_strided_batched(dev, 0, tb, r1 - r0, n, k, 1.0f, a.mem, a.off + ao, lda, sa,
                                     b.mem, b.off + bo, hs, T * hs, 0.0f, c.mem, c.off + r0 * ldc,
                                     ldc, sc, BNH, NULL);
    }
    return st;
}

/* The forward's probabilities alone: the same GEMM and softmax calls ct_attention_forward makes
 * (it calls this), so a recomputation gives bitwise the tensor the forward kept. */
ct_status ct_attention_probs(ct_device *dev, ct_view att, ct_view qkvr, int B, int T, int C,
                             int NH) {
    NEED(dims_ok(B, T, 3 * C) && NH > 0 && C % NH == 0 && dims_ok((long long)B * NH, T, T),
         "ct_attention_probs", "B, T, C, NH must be positive with NH dividing C");
    int hs = C / NH;
    size_t BNH = (size_t)B * NH;
    size_t part = (size_t)B * T * C; /* q, k, v blocks of qkvr */
    /* att (T,T) = q (T,hs) . k^T per (b,h), on and below the diagonal */
    ct_status st = gemm_causal(dev, CAUSAL_SCORES, (size_t)T, (size_t)hs, qkvr,
                               ct_view_at(qkvr, part), att, BNH);
    if (st != CT_OK) return st;
    float scale = 1.0f / sqrtf((float)hs);
    karg a[] = {KMEM(att), KINT(BNH * T), KINT(T), KF(scale)};
    if (ct_device_row_groups(dev))
        return launch_groups(dev, "attention", "softmax_causal_forward_rows", BNH * T, a,
                             NARGS(a));
    return launch(dev, "attention", "softmax_causal_forward", BNH * T, 64, a, NARGS(a));
}

ct_status ct_attention_forward(ct_device *dev, ct_view out, ct_view qkvr, ct_view att, ct_view inp,
                               ct_view vaccum, int B, int T, int C, int NH) {
    NEED(dims_ok(B, T, 3 * C) && NH > 0 && C % NH == 0 && dims_ok((long long)B * NH, T, T),
         "ct_attention_forward", "B, T, C, NH must be positive with NH dividing C");
    int hs = C / NH;
    size_t BNH = (size_t)B * NH;
    size_t part = (size_t)B * T * C; /* q, k, v blocks of qkvr */
    ct_status st;
    {
        karg a[] = {KMEM(qkvr), KMEM(inp), KINT(B), KINT(T), KINT(NH), KINT(hs)};
        st = launch2(dev, "attention", "qkv_to_heads", (size_t)C, (size_t)B * T, 256, a, NARGS(a));
        if (st != CT_OK) return st;
    }
    if ((st = ct_attention_probs(dev, att, qkvr, B, T, C, NH)) != CT_OK) return st;
    /* vaccum (T,hs) = att (T,T) . v (T,hs) per (b,h) */
    st = gemm_causal(dev, CAUSAL_LOWER, (size_t)T, (size_t)hs, att, ct_view_at(qkvr, 2 * part),
                     vaccum, BNH);
    if (st != CT_OK) return st;
    karg a[] = {KMEM(out), KMEM(vaccum), KINT(B), KINT(T), KINT(NH), KINT(hs)};
    return launch2(dev, "attention", "heads_to_seq", (size_t)C, (size_t)B * T, 256, a, NARGS(a));
}

ct_status ct_attention_backward(ct_device *dev, ct_view dinp, ct_view dqkvr, ct_view datt,
                                ct_view dvaccum, ct_view dout, ct_view qkvr, ct_view att, int B,
                                int T, int C, int NH) {
    NEED(dims_ok(B, T, 3 * C) && NH > 0 && C % NH == 0 && dims_ok((long long)B * NH, T, T),
         "ct_attention_backward", "B, T, C, NH must be positive with NH dividing C");
    int hs = C / NH;
    size_t BNH = (size_t)B * NH;
    size_t part = (size_t)B * T * C;
    ct_status st;
    {
        karg a[] = {KMEM(dvaccum), KMEM(dout), KINT(B), KINT(T), KINT(NH), KINT(hs)};
        st = launch2(dev, "attention", "seq_to_heads", (size_t)C, (size_t)B * T, 256, a, NARGS(a));
        if (st != CT_OK) return st;
    }
    /* datt (T,T) = dvaccum (T,hs) . v^T */
    st = gemm_causal(dev, CAUSAL_SCORES, (size_t)T, (size_t)hs, dvaccum,
                     ct_view_at(qkvr, 2 * part), datt, BNH);
    if (st != CT_OK) return st;
    {
        float scale = 1.0f / sqrtf((float)hs);
        karg a[] = {KMEM(datt), KMEM(att), KINT(BNH * T), KINT(T), KF(scale)};
        st = ct_device_row_groups(dev)
                 ? launch_groups(dev, "attention", "softmax_causal_backward_rows", BNH * T, a,
                                 NARGS(a))
                 : launch(dev, "attention", "softmax_causal_backward", BNH * T, 64, a, NARGS(a));
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
    return launch2(dev, "attention", "heads_to_qkv", (size_t)C, (size_t)B * T, 256, a, NARGS(a));
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
    ct_attn_cfg c = {{1, 1, 1, 1}, {1, 1, 1, 1}};
    int nf = 0, nb = 0;
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++) {
        if (!nf && !ct_attn_blocks_check(info, hs, &cand[i], 0, NULL, 0)) c.fwd = cand[i], nf = 1;
        if (!nb && !ct_attn_blocks_check(info, hs, &cand[i], 1, NULL, 0)) c.bwd = cand[i], nb = 1;
    }
    return c;
}

/* The fused kernel `name` built for head size hs and block shape k (one program per shape). */
static ct_status fused_kernel(ct_device *dev, int hs, const ct_attn_blocks *k, int backward,
                              const char *name, cl_kernel *out) {
    char why[200];
    if (ct_attn_blocks_check(ct_device_get_info(dev), hs, k, backward, why, sizeof why))
        return CT_ERR(ct_device_err(dev), CT_ERR_ARG, "fused attention (%s): %s", name, why);
    const ct_cl_source *src = find_source("attention_fused");
    if (!src)
        return CT_ERR(ct_device_err(dev), CT_ERR_NOT_FOUND,
                      "engine kernel source 'attention_fused.cl' is not embedded (build problem)");
    int sc, oc;
    fused_split(hs, k, &sc, &oc);
    char opt[160];
    snprintf(opt, sizeof opt, "-D HS=%d -D BQ=%d -D BK=%d -D NT=%d -D VW=%d -D SC=%d -D OC=%d", hs,
             k->bq, k->bk, k->nt, k->vw, sc, oc);
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
                              const char *name, size_t groups, size_t BNH, const karg *args,
                              int nargs) {
    cl_kernel kern = NULL;
    ct_status st = fused_kernel(dev, hs, k, backward, name, &kern);
    for (int i = 0; st == CT_OK && i < nargs; i++)
        st = ct_kernel_set_arg(dev, kern, (cl_uint)i, args[i].size, args[i].p);
    if (st != CT_OK) return st;
    size_t local[2] = {(size_t)k->nt, 1}, global[2] = {groups * (size_t)k->nt, BNH};
    return ct_kernel_launch(dev, kern, 2, global, local, NULL);
}

ct_status ct_attention_fused_warmup(ct_device *dev, const ct_attn_cfg *cfg, int hs) {
    cl_kernel k = NULL;
    ct_status st = fused_kernel(dev, hs, &cfg->fwd, 0, "attn_fused_forward", &k);
    if (st == CT_OK) st = fused_kernel(dev, hs, &cfg->bwd, 1, "attn_fused_backward_dkv", &k);
    if (st == CT_OK) st = fused_kernel(dev, hs, &cfg->bwd, 1, "attn_fused_backward_dq", &k);
    return st;
}

#define FUSED_DIMS_OK                                                                              \
    (dims_ok(B, T, 3 * C) && NH > 0 && C % NH == 0 && dims_ok((long long)B * NH, T, 1))

ct_status ct_attention_fused_forward(ct_device *dev, const ct_attn_cfg *cfg, ct_view out,
                                     ct_view lse, ct_view inp, int B, int T, int C, int NH) {
    NEED(FUSED_DIMS_OK, "ct_attention_fused_forward",
         "B, T, C, NH must be positive with NH dividing C");
    int hs = C / NH;
    ct_attn_cfg c = cfg ? *cfg : ct_attn_cfg_default(ct_device_get_info(dev), hs);
    float scale = 1.0f / sqrtf((float)hs);
    size_t nqb = ((size_t)T + c.fwd.bq - 1) / c.fwd.bq;
    karg a[] = {KMEM(out), KMEM(lse), KMEM(inp), KINT(T), KINT(NH), KF(scale)};
    return fused_launch(dev, hs, &c.fwd, 0, "attn_fused_forward", nqb, (size_t)B * NH, a,
                        NARGS(a));
}

ct_status ct_attention_fused_backward(ct_device *dev, const ct_attn_cfg *cfg, ct_view dinp,
                                      ct_view dsum, ct_view dout, ct_view inp, ct_view out,
                                      ct_view lse, int B, int T, int C, int NH) {
    NEED(FUSED_DIMS_OK, "ct_attention_fused_backward",
         "B, T, C, NH must be positive with NH dividing C");
    int hs = C / NH;
    ct_attn_cfg c = cfg ? *cfg : ct_attn_cfg_default(ct_device_get_info(dev), hs);
    float scale = 1.0f / sqrtf((float)hs);
    size_t BNH = (size_t)B * NH;
    ct_status st;
    {
        cl_kernel k = NULL;
        karg a[] = {KMEM(dsum), KMEM(dout), KMEM(out), KINT(B), KINT(T), KINT(NH)};
        st = fused_kernel(dev, hs, &c.bwd, 1, "attn_fused_dot", &k);
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
        st = fused_launch(dev, hs, &c.bwd, 1, "attn_fused_backward_dkv", nkb, BNH, a, NARGS(a));
        if (st != CT_OK) return st;
    }
    size_t nqb = ((size_t)T + c.bwd.bq - 1) / c.bwd.bq;
    karg a[] = {KMEM(dinp), KMEM(dout), KMEM(inp), KMEM(lse), KMEM(dsum),
                KINT(T),    KINT(NH),   KF(scale)};
    return fused_launch(dev, hs, &c.bwd, 1, "attn_fused_backward_dq", nqb, BNH, a, NARGS(a));
}

/* ------------------------------------------------------------------ loss */

ct_status ct_crossentropy_forward(ct_device *dev, ct_view losses, ct_view lse, ct_view logits,
                                  ct_view targets, int B, int T, int V, int Vp) {
    NEED(dims_ok(B, T, Vp) && V > 0 && V <= Vp, "ct_crossentropy_forward",
         "B, T, V must be positive and V <= Vp");
    karg a[] = {KMEM(losses), KMEM(lse), KMEM(logits), KMEM(targets),
                KINT(B * T),  KINT(V),   KINT(Vp)};
    if (ct_device_row_groups(dev))
        return launch_groups(dev, "loss", "crossentropy_forward_rows", (size_t)B * T, a, NARGS(a));
    return launch(dev, "loss", "crossentropy_forward", (size_t)B * T, 64, a, NARGS(a));
}

ct_status ct_crossentropy_backward(ct_device *dev, ct_view dlogits, ct_view logits, ct_view lse,
                                   ct_view targets, float dloss, int B, int T, int V, int Vp) {
    NEED(dims_ok(B, T, Vp) && V > 0 && V <= Vp, "ct_crossentropy_backward",
         "B, T, V must be positive and V <= Vp");
    size_t n = (size_t)B * T * Vp;
    if (dlogits.mem != logits.mem || dlogits.off != logits.off) {
        ct_status st = ct_mem_copy(dev, logits.mem, logits.off * sizeof(float), dlogits.mem,
                                   dlogits.off * sizeof(float), n * sizeof(float));
        if (st != CT_OK) return st;
    }
    karg a[] = {KMEM(dlogits), KMEM(lse), KMEM(targets), KINT(B * T), KINT(V), KINT(Vp), KF(dloss)};
    return launch2(dev, "loss", "crossentropy_backward_inplace", (size_t)Vp, (size_t)B * T, 256, a,
                   NARGS(a));
}

ct_status ct_mean_forward(ct_device *dev, ct_view out, ct_view inp, size_t N) {
    NEED(N > 0 && N < (size_t)INT_MAX, "ct_mean_forward", "N must be positive");
    karg a[] = {KMEM(out), KMEM(inp), KINT(N)};
    return launch(dev, "loss", "mean_forward", 1, 1, a, NARGS(a));
}

/* ------------------------------------------------------------------ vocabulary-parallel */

ct_status ct_encoder_forward_vp(ct_device *dev, ct_view out, ct_view inp, ct_view wte, ct_view wpe,
                                int B, int T, int C, int lo, int Vl, int add_wpe) {
    NEED(dims_ok(B, T, C) && Vl > 0 && lo >= 0, "ct_encoder_forward_vp",
         "B, T, C, Vl must be positive and lo >= 0");
    karg a[] = {KMEM(out), KMEM(inp), KMEM(wte), KMEM(wpe), KINT(B * T), KINT(T),
                KINT(C),   KINT(lo),  KINT(Vl),  KINT(add_wpe != 0)};
    return launch2(dev, "tp", "encoder_forward_vp", (size_t)C, (size_t)B * T, 256, a, NARGS(a));
}

ct_status ct_encoder_backward_vp(ct_device *dev, ct_view dwte, ct_view dwpe, ct_view dout,
                                 ct_view inp, int B, int T, int C, int lo, int Vl) {
    NEED(dims_ok(B, T, C) && Vl > 0 && lo >= 0, "ct_encoder_backward_vp",
         "B, T, C, Vl must be positive and lo >= 0");
    ct_status st;
    {
        karg a[] = {KMEM(dwte), KMEM(dout), KMEM(inp), KINT(B * T), KINT(C), KINT(lo), KINT(Vl)};
        st = launch(dev, "tp", "encoder_backward_wte_vp", (size_t)C, 64, a, NARGS(a));
        if (st != CT_OK) return st;
    }
    karg a[] = {KMEM(dwpe), KMEM(dout), KINT(B), KINT(T), KINT(C)};
    return launch(dev, "encoder", "encoder_backward_wpe", (size_t)T * C, 256, a, NARGS(a));
}

ct_status ct_combine(ct_device *dev, ct_view dst, ct_view a, ct_view b, size_t n, int max_op) {
    NEED(dst.mem && a.mem && b.mem, "ct_combine", "dst, a and b are needed");
    karg k[] = {KMEM(dst), KMEM(a), KMEM(b), KUL(n), KINT(max_op != 0)};
    return launch(dev, "tp", "tp_combine", n, 256, k, NARGS(k));
}

ct_status ct_crossentropy_vp_max(ct_device *dev, ct_view mx, ct_view logits, int B, int T, int Vl,
                                 int nreal) {
    NEED(dims_ok(B, T, Vl) && nreal >= 0 && nreal <= Vl, "ct_crossentropy_vp_max",
         "B, T, Vl must be positive and 0 <= nreal <= Vl");
    karg a[] = {KMEM(mx), KMEM(logits), KINT(B * T), KINT(Vl), KINT(nreal)};
    if (ct_device_row_groups(dev))
        return launch_groups(dev, "tp", "crossentropy_vp_max_rows", (size_t)B * T, a, NARGS(a));
    return launch(dev, "tp", "crossentropy_vp_max", (size_t)B * T, 64, a, NARGS(a));
}

ct_status ct_crossentropy_vp_sums(ct_device *dev, ct_view sums, ct_view logits, ct_view mx,
                                  ct_view targets, int B, int T, int Vl, int nreal, int lo) {
    NEED(dims_ok(B, T, Vl) && nreal >= 0 && nreal <= Vl && lo >= 0, "ct_crossentropy_vp_sums",
         "B, T, Vl must be positive, 0 <= nreal <= Vl, lo >= 0");
    karg a[] = {KMEM(sums), KMEM(logits), KMEM(mx), KMEM(targets), KINT(B * T),
                KINT(Vl),   KINT(nreal),  KINT(lo)};
    if (ct_device_row_groups(dev))
        return launch_groups(dev, "tp", "crossentropy_vp_sums_rows", (size_t)B * T, a, NARGS(a));
    return launch(dev, "tp", "crossentropy_vp_sums", (size_t)B * T, 64, a, NARGS(a));
}

ct_status ct_crossentropy_vp_finish(ct_device *dev, ct_view losses, ct_view lse, ct_view mx,
                                    ct_view sums, int B, int T) {
    NEED(dims_ok(B, T, 1), "ct_crossentropy_vp_finish", "B, T must be positive");
    karg a[] = {KMEM(losses), KMEM(lse), KMEM(mx), KMEM(sums), KINT(B * T)};
    return launch(dev, "tp", "crossentropy_vp_finish", (size_t)B * T, 64, a, NARGS(a));
}

ct_status ct_crossentropy_vp_backward(ct_device *dev, ct_view dlogits, ct_view lse,
                                      ct_view targets, float dloss, int B, int T, int Vl,
                                      int nreal, int lo) {
    NEED(dims_ok(B, T, Vl) && nreal >= 0 && nreal <= Vl && lo >= 0,
         "ct_crossentropy_vp_backward", "B, T, Vl must be positive, 0 <= nreal <= Vl, lo >= 0");
    karg a[] = {KMEM(dlogits), KMEM(lse), KMEM(targets), KINT(B * T), KINT(Vl),
                KINT(nreal),   KINT(lo),  KF(dloss)};
    return launch2(dev, "tp", "crossentropy_vp_backward_inplace", (size_t)Vl, (size_t)B * T, 256,
                   a, NARGS(a));
}

/* ------------------------------------------------------------------ optimizer */

ct_status ct_global_norm_forward(ct_device *dev, ct_view out, ct_view partials, ct_view inp,
                                 size_t n) {
    ct_status st;
    if (ct_device_row_groups(dev)) {
        /* a work-group per partial, then one group adds the partials */
        cl_ulong chunk = (n + CT_NORM_PARTIALS - 1) / CT_NORM_PARTIALS;
        karg a[] = {KMEM(partials), KMEM(inp), KUL(n), KUL(chunk)};
        if ((st = launch_groups(dev, "optim", "sumsq_partial_groups", CT_NORM_PARTIALS, a,
                                NARGS(a))) != CT_OK)
            return st;
        karg f[] = {KMEM(out), KMEM(partials), KINT(CT_NORM_PARTIALS)};
        return launch_groups(dev, "optim", "norm_finalize_group", 1, f, NARGS(f));
    }
    {
        /* The partial count is the global size, so launch exactly CT_NORM_PARTIALS items with a
         * work-group size that divides it. */
        cl_kernel k = NULL;
        st = get_kernel(dev, "optim", "sumsq_partial", &k);
        if (st != CT_OK) return st;
        cl_ulong po = partials.off, xo = inp.off, nn = n;
        cl_ulong chunk = ((n + CT_NORM_PARTIALS - 1) / CT_NORM_PARTIALS + 7) / 8 * 8;
        if ((st = ct_kernel_set_arg(dev, k, 0, sizeof(cl_mem), &partials.mem)) != CT_OK ||
            (st = ct_kernel_set_arg(dev, k, 1, sizeof po, &po)) != CT_OK ||
            (st = ct_kernel_set_arg(dev, k, 2, sizeof(cl_mem), &inp.mem)) != CT_OK ||
            (st = ct_kernel_set_arg(dev, k, 3, sizeof xo, &xo)) != CT_OK ||
            (st = ct_kernel_set_arg(dev, k, 4, sizeof nn, &nn)) != CT_OK ||
            (st = ct_kernel_set_arg(dev, k, 5, sizeof chunk, &chunk)) != CT_OK)
            return st;
        size_t wg = 1;
        if ((st = ct_kernel_max_work_group(dev, k, &wg)) != CT_OK) return st;
        size_t local = 1;
        while (local * 2 <= 64 && local * 2 <= wg) local *= 2; /* a power of two divides 1024 */
        size_t global = CT_NORM_PARTIALS;
        st = ct_kernel_launch(dev, k, 1, &global, &local, NULL);
        if (st != CT_OK) return st;
    }
    karg a[] = {KMEM(out), KMEM(partials), KINT(CT_NORM_PARTIALS)};
    return launch(dev, "optim", "norm_finalize", 1, 1, a, NARGS(a));
}

ct_status ct_scale_by_clip(ct_device *dev, ct_view x, ct_view norm, float clip, size_t n) {
    karg a[] = {KMEM(x), KMEM(norm), KF(clip), KUL(n)};
    return launch(dev, "optim", "scale_by_clip", n, 256, a, NARGS(a));
}

ct_status ct_adamw_update(ct_device *dev, ct_view params, ct_view grads, ct_view m, ct_view v,
                          ct_view norm, float clip, size_t n, float lr, float beta1, float beta2,
                          float eps, float weight_decay, int t) {
    NEED(t >= 1, "ct_adamw_update", "step t must be >= 1");
    NEED(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "ct_adamw_update",
         "beta1 and beta2 must be in [0, 1)");
    float bc1 = (float)(1.0 - pow(beta1, t)), bc2 = (float)(1.0 - pow(beta2, t));
    karg a[] = {KMEM(params), KMEM(grads), KMEM(m),   KMEM(v),          KMEM(norm),
                KF(clip),     KUL(n),      KF(lr),    KF(beta1),        KF(beta2),
                KF(eps),      KF(weight_decay), KF(bc1), KF(bc2)};
    return launch(dev, "optim", "adamw_update", n, 256, a, NARGS(a));
}

/* ------------------------------------------------------------------ mixture of experts */

ct_status ct_moe_route_forward(ct_device *dev, ct_view p, ct_view idx, ct_view gate,
                               ct_view logits, int N, int E, int K) {
    NEED(dims_ok(N, E, 1) && K >= 1 && K <= E, "ct_moe_route_forward",
         "N, E must be positive and 1 <= K <= E");
    karg a[] = {KMEM(p), KMEM(idx), KMEM(gate), KMEM(logits), KINT(N), KINT(E), KINT(K)};
    return launch(dev, "moe", "moe_route", (size_t)N, 64, a, NARGS(a));
}

ct_status ct_moe_capacity(ct_device *dev, ct_view slot, ct_view kept, ct_view routed, ct_view idx,
                          int B, int T, int E, int K, int cap) {
    NEED(dims_ok(B, T, (long long)E * K) && K <= E && cap >= 0, "ct_moe_capacity",
         "B, T, E must be positive, 1 <= K <= E, cap >= 0");
    karg a[] = {KMEM(slot), KMEM(kept), KMEM(routed), KMEM(idx), KINT(B), KINT(T),
                KINT(E), KINT(K), KINT(cap)};
    return launch(dev, "moe", "moe_capacity", (size_t)B * E, 64, a, NARGS(a));
}

ct_status ct_moe_offsets(ct_device *dev, ct_view off, ct_view kept, int B, int E) {
    NEED(dims_ok(B, E, 1), "ct_moe_offsets", "B, E must be positive");
    karg a[] = {KMEM(off), KMEM(kept), KINT(B), KINT(E)};
    return launch(dev, "moe", "moe_offsets", 1, 1, a, NARGS(a));
}

ct_status ct_moe_prob_mean(ct_device *dev, ct_view pmean, ct_view p, int B, int T, int E) {
    NEED(dims_ok(B, T, E), "ct_moe_prob_mean", "B, T, E must be positive");
    karg a[] = {KMEM(pmean), KMEM(p), KINT(B), KINT(T), KINT(E)};
    return launch(dev, "moe", "moe_prob_mean", (size_t)B * E, 64, a, NARGS(a));
}

ct_status ct_moe_dispatch(ct_device *dev, ct_view xs, ct_view pos, ct_view x, ct_view idx,
                          ct_view slot, ct_view off, int B, int T, int C, int E, int K) {
    NEED(dims_ok(B, T, (long long)C * K) && K <= E, "ct_moe_dispatch",
         "B, T, C must be positive and 1 <= K <= E");
    karg a[] = {KMEM(xs), KMEM(pos), KMEM(x), KMEM(idx), KMEM(slot), KMEM(off),
                KINT((long long)B * T * K), KINT(T), KINT(C), KINT(E), KINT(K)};
    return launch2(dev, "moe", "moe_dispatch", (size_t)C, (size_t)B * T * K, 256, a, NARGS(a));
}

ct_status ct_moe_combine_forward(ct_device *dev, ct_view y, ct_view ys, ct_view gate, ct_view pos,
                                 size_t N, int C, int K) {
    NEED(dims_ok((long long)N, C, K), "ct_moe_combine_forward", "N, C, K must be positive");
    karg a[] = {KMEM(y), KMEM(ys), KMEM(gate), KMEM(pos), KINT(N), KINT(C), KINT(K)};
    return launch2(dev, "moe", "moe_combine", (size_t)C, N, 256, a, NARGS(a));
}

ct_status ct_moe_combine_backward(ct_device *dev, ct_view dys, ct_view dgate, ct_view dy,
                                  ct_view ys, ct_view gate, ct_view pos, size_t N, int C, int K,
                                  float scale) {
    NEED(dims_ok((long long)N, C, K), "ct_moe_combine_backward", "N, C, K must be positive");
    karg g[] = {KMEM(dgate), KMEM(dy), KMEM(ys), KMEM(pos), KINT(N * (size_t)K), KINT(C),
                KINT(K)};
    ct_status st = launch(dev, "moe", "moe_gate_backward", N * (size_t)K, 64, g, NARGS(g));
    if (st != CT_OK) return st;
    karg a[] = {KMEM(dys), KMEM(dy),  KMEM(gate), KMEM(pos), KINT(N * (size_t)K),
                KINT(C),   KINT(K),   KF(scale)};
    return launch2(dev, "moe", "moe_combine_backward", (size_t)C, N * (size_t)K, 256, a, NARGS(a));
}

ct_status ct_moe_router_backward(ct_device *dev, ct_view dlogits, ct_view p, ct_view idx,
                                 ct_view pos, ct_view dgate, ct_view routed, float aux, int B,
                                 int T, int E, int K) {
    NEED(dims_ok(B, T, (long long)E * K) && K <= E, "ct_moe_router_backward",
         "B, T, E must be positive and 1 <= K <= E");
    karg a[] = {KMEM(dlogits), KMEM(p), KMEM(idx), KMEM(pos), KMEM(dgate), KMEM(routed),
                KF(aux), KINT((long long)B * T), KINT(T), KINT(E), KINT(K)};
    return launch(dev, "moe", "moe_router_backward", (size_t)B * T, 64, a, NARGS(a));
}

ct_status ct_moe_dispatch_backward(ct_device *dev, ct_view dx, ct_view dxr, ct_view dxs,
                                   ct_view pos, size_t N, int C, int K, float unscale) {
    NEED(dims_ok((long long)N, C, K), "ct_moe_dispatch_backward", "N, C, K must be positive");
    karg a[] = {KMEM(dx), KMEM(dxr), KMEM(dxs), KMEM(pos), KINT(N), KINT(C), KINT(K), KF(unscale)};
    return launch2(dev, "moe", "moe_dispatch_backward", (size_t)C, N, 256, a, NARGS(a));
}
