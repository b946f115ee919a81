/* ops.c - host wrappers of the engine's device ops (attention's: ops_attention.c): argument
 * checks, kernel lookup, launch.
 *
 * Every wrapper only enqueues (kernels on the device's in-order queue, GEMMs through ct_gemm);
 * nothing is read back or allocated. Kernels are fetched from the device's program cache by
 * (file, kernel name); 1-D launches round the global size up to a multiple of a work-group size
 * that is never above CL_KERNEL_WORK_GROUP_SIZE, and kernels guard their index. */
#include "ops_impl.h"

const ct_cl_source *ct__ops_find_source(const char *file) {
    for (int i = 0; i < ct_engine_kernels_count; i++)
        if (!strcmp(ct_engine_kernels[i].name, file)) return &ct_engine_kernels[i];
    return NULL;
}

ct_status ct__ops_get_kernel(ct_device *dev, const char *file, const char *name, cl_kernel *k) {
    const ct_cl_source *src = ct__ops_find_source(file);
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
    ct_status st = ct__ops_get_kernel(dev, file, name, k);
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

ct_status ct__ops_launch(ct_device *dev, const char *file, const char *name, size_t n, size_t pref,
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
ct_status ct__ops_launch2(ct_device *dev, const char *file, const char *name, size_t n0, size_t n1,
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
ct_status ct__ops_launch_groups(ct_device *dev, const char *file, const char *name, size_t ngroups,
                               const karg *args, int nargs) {
    if (ngroups == 0) return CT_OK;
    cl_kernel k = NULL;
    size_t local = 1;
    ct_status st = prepare(dev, file, name, args, nargs, 256, 256, &k, &local);
    if (st != CT_OK) return st;
    size_t global = ngroups * local;
    return ct_kernel_launch(dev, k, 1, &global, &local, NULL);
}

ct_status ct__ops_bad(ct_device *dev, const char *op, const char *what) {
    return CT_ERR(ct_device_err(dev), CT_ERR_ARG, "%s: %s", op, what);
}


const char *ct_profile_name(int bucket) {
    static const char *const names[] = {
#define CT__PROF_NAME(n) #n,
        CT_PROFILE_BUCKETS(CT__PROF_NAME)
#undef CT__PROF_NAME
    };
    return bucket >= 0 && bucket < CT_PROF__COUNT ? names[bucket] : "?";
}

/* ------------------------------------------------------------------ warm-up */

/* The programs a GPT-2 model builds at creation: all but the fused attention (built per head size
 * and block shape when first used) and the Llama family's ops (built when first used). */
static int warmed(const ct_cl_source *src) {
    return strcmp(src->name, "attention_fused") != 0 && strcmp(src->name, "llama") != 0;
}

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
    return ct__ops_launch2(dev, "encoder", "encoder_forward", (size_t)C, (size_t)B * T, 256, a, NARGS(a));
}

ct_status ct_encoder_backward(ct_device *dev, ct_view dwte, ct_view dwpe, ct_view dout,
                              ct_view inp, int B, int T, int C, int Vp) {
    NEED(dims_ok(B, T, C) && Vp > 0, "ct_encoder_backward", "B, T, C, Vp must be positive");
    ct_status st;
    {
        karg a[] = {KMEM(dwte), KMEM(dout), KMEM(inp), KINT(B * T), KINT(C), KINT(Vp)};
        st = ct__ops_launch(dev, "encoder", "encoder_backward_wte", (size_t)C, 64, a, NARGS(a));
        if (st != CT_OK) return st;
    }
    karg a[] = {KMEM(dwpe), KMEM(dout), KINT(B), KINT(T), KINT(C)};
    return ct__ops_launch(dev, "encoder", "encoder_backward_wpe", (size_t)T * C, 256, a, NARGS(a));
}

/* ------------------------------------------------------------------ layernorm */

ct_status ct_layernorm_forward(ct_device *dev, ct_view out, ct_view mean, ct_view rstd,
                               ct_view inp, ct_view weight, ct_view bias, int B, int T, int C) {
    NEED(dims_ok(B, T, C), "ct_layernorm_forward", "B, T, C must be positive");
    karg a[] = {KMEM(out),    KMEM(mean), KMEM(rstd),   KMEM(inp),
                KMEM(weight), KMEM(bias), KINT(B * T), KINT(C)};
    if (ct_device_row_groups(dev))
        return ct__ops_launch_groups(dev, "layernorm", "layernorm_forward_rows", (size_t)B * T, a, NARGS(a));
    return ct__ops_launch(dev, "layernorm", "layernorm_forward", (size_t)B * T, 64, a, NARGS(a));
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
            st = ct__ops_launch(dev, "layernorm", "layernorm_backward_dparams", (size_t)C, 64, a, NARGS(a));
        }
        if (st != CT_OK) return st;
    }
    if (!dinp.mem) return CT_OK;
    karg a[] = {KMEM(dinp), KMEM(dout),  KMEM(inp), KMEM(weight),         KMEM(mean),
                KMEM(rstd), KINT(B * T), KINT(C),   KINT(accumulate_dinp != 0)};
    if (ct_device_row_groups(dev))
        return ct__ops_launch_groups(dev, "layernorm", "layernorm_backward_dinp_rows", (size_t)B * T, a,
                             NARGS(a));
    return ct__ops_launch(dev, "layernorm", "layernorm_backward_dinp", (size_t)B * T, 64, a, NARGS(a));
}

/* ------------------------------------------------------------------ bias, residual, gelu */

ct_status ct_bias_forward(ct_device *dev, ct_view out, ct_view bias, size_t N, int OC) {
    NEED(dims_ok((long long)N, OC, 1), "ct_bias_forward", "N, OC must be positive");
    karg a[] = {KMEM(out), KMEM(bias), KINT(N), KINT(OC)};
    return ct__ops_launch2(dev, "elementwise", "bias_add", (size_t)OC, N, 256, a, NARGS(a));
}

ct_status ct_bias_backward(ct_device *dev, ct_view dbias, ct_view dout, size_t N, int OC) {
    NEED(dims_ok((long long)N, OC, 1), "ct_bias_backward", "N, OC must be positive");
    karg a[] = {KMEM(dbias), KMEM(dout), KINT(N), KINT(OC)};
    return ct__ops_launch(dev, "elementwise", "bias_backward", (size_t)OC, 64, a, NARGS(a));
}

ct_status ct_residual_forward(ct_device *dev, ct_view out, ct_view a_, ct_view b_, size_t N) {
    NEED(N < (size_t)INT_MAX, "ct_residual_forward", "N too large");
    karg a[] = {KMEM(out), KMEM(a_), KMEM(b_), KINT(N)};
    return ct__ops_launch(dev, "elementwise", "residual_forward", N, 256, a, NARGS(a));
}

ct_status ct_residual_backward(ct_device *dev, ct_view da, ct_view db, ct_view dout, size_t N) {
    NEED(N < (size_t)INT_MAX, "ct_residual_backward", "N too large");
    karg a[] = {KMEM(da), KMEM(db), KMEM(dout), KINT(N)};
    return ct__ops_launch(dev, "elementwise", "residual_backward", N, 256, a, NARGS(a));
}

ct_status ct_gelu_forward(ct_device *dev, ct_view out, ct_view inp, size_t N) {
    NEED(N < (size_t)INT_MAX, "ct_gelu_forward", "N too large");
    karg a[] = {KMEM(out), KMEM(inp), KINT(N)};
    return ct__ops_launch(dev, "elementwise", "gelu_forward", N, 256, a, NARGS(a));
}

ct_status ct_gelu_backward(ct_device *dev, ct_view dinp, ct_view inp, ct_view dout, size_t N) {
    NEED(N < (size_t)INT_MAX, "ct_gelu_backward", "N too large");
    karg a[] = {KMEM(dinp), KMEM(inp), KMEM(dout), KINT(N)};
    return ct__ops_launch(dev, "elementwise", "gelu_backward", N, 256, a, NARGS(a));
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

/* ------------------------------------------------------------------ loss */

ct_status ct_crossentropy_forward(ct_device *dev, ct_view losses, ct_view lse, ct_view logits,
                                  ct_view targets, int B, int T, int V, int Vp) {
    NEED(dims_ok(B, T, Vp) && V > 0 && V <= Vp, "ct_crossentropy_forward",
         "B, T, V must be positive and V <= Vp");
    karg a[] = {KMEM(losses), KMEM(lse), KMEM(logits), KMEM(targets),
                KINT(B * T),  KINT(V),   KINT(Vp)};
    if (ct_device_row_groups(dev))
        return ct__ops_launch_groups(dev, "loss", "crossentropy_forward_rows", (size_t)B * T, a, NARGS(a));
    return ct__ops_launch(dev, "loss", "crossentropy_forward", (size_t)B * T, 64, a, NARGS(a));
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
    return ct__ops_launch2(dev, "loss", "crossentropy_backward_inplace", (size_t)Vp, (size_t)B * T, 256, a,
                   NARGS(a));
}

ct_status ct_mean_forward(ct_device *dev, ct_view out, ct_view inp, size_t N) {
    NEED(N > 0 && N < (size_t)INT_MAX, "ct_mean_forward", "N must be positive");
    karg a[] = {KMEM(out), KMEM(inp), KINT(N)};
    return ct__ops_launch(dev, "loss", "mean_forward", 1, 1, a, NARGS(a));
}

/* ------------------------------------------------------------------ vocabulary-parallel */

ct_status ct_encoder_forward_vp(ct_device *dev, ct_view out, ct_view inp, ct_view wte, ct_view wpe,
                                int B, int T, int C, int lo, int Vl, int add_wpe) {
    NEED(dims_ok(B, T, C) && Vl > 0 && lo >= 0, "ct_encoder_forward_vp",
         "B, T, C, Vl must be positive and lo >= 0");
    karg a[] = {KMEM(out), KMEM(inp), KMEM(wte), KMEM(wpe), KINT(B * T), KINT(T),
                KINT(C),   KINT(lo),  KINT(Vl),  KINT(add_wpe != 0)};
    return ct__ops_launch2(dev, "tp", "encoder_forward_vp", (size_t)C, (size_t)B * T, 256, a, NARGS(a));
}

ct_status ct_encoder_backward_vp(ct_device *dev, ct_view dwte, ct_view dwpe, ct_view dout,
                                 ct_view inp, int B, int T, int C, int lo, int Vl) {
    NEED(dims_ok(B, T, C) && Vl > 0 && lo >= 0, "ct_encoder_backward_vp",
         "B, T, C, Vl must be positive and lo >= 0");
    ct_status st;
    {
        karg a[] = {KMEM(dwte), KMEM(dout), KMEM(inp), KINT(B * T), KINT(C), KINT(lo), KINT(Vl)};
        st = ct__ops_launch(dev, "tp", "encoder_backward_wte_vp", (size_t)C, 64, a, NARGS(a));
        if (st != CT_OK) return st;
    }
    karg a[] = {KMEM(dwpe), KMEM(dout), KINT(B), KINT(T), KINT(C)};
    return ct__ops_launch(dev, "encoder", "encoder_backward_wpe", (size_t)T * C, 256, a, NARGS(a));
}

ct_status ct_combine(ct_device *dev, ct_view dst, ct_view a, ct_view b, size_t n, int max_op) {
    NEED(dst.mem && a.mem && b.mem, "ct_combine", "dst, a and b are needed");
    karg k[] = {KMEM(dst), KMEM(a), KMEM(b), KUL(n), KINT(max_op != 0)};
    return ct__ops_launch(dev, "tp", "tp_combine", n, 256, k, NARGS(k));
}

ct_status ct_crossentropy_vp_max(ct_device *dev, ct_view mx, ct_view logits, int B, int T, int Vl,
                                 int nreal) {
    NEED(dims_ok(B, T, Vl) && nreal >= 0 && nreal <= Vl, "ct_crossentropy_vp_max",
         "B, T, Vl must be positive and 0 <= nreal <= Vl");
    karg a[] = {KMEM(mx), KMEM(logits), KINT(B * T), KINT(Vl), KINT(nreal)};
    if (ct_device_row_groups(dev))
        return ct__ops_launch_groups(dev, "tp", "crossentropy_vp_max_rows", (size_t)B * T, a, NARGS(a));
    return ct__ops_launch(dev, "tp", "crossentropy_vp_max", (size_t)B * T, 64, a, NARGS(a));
}

ct_status ct_crossentropy_vp_sums(ct_device *dev, ct_view sums, ct_view logits, ct_view mx,
                                  ct_view targets, int B, int T, int Vl, int nreal, int lo) {
    NEED(dims_ok(B, T, Vl) && nreal >= 0 && nreal <= Vl && lo >= 0, "ct_crossentropy_vp_sums",
         "B, T, Vl must be positive, 0 <= nreal <= Vl, lo >= 0");
    karg a[] = {KMEM(sums), KMEM(logits), KMEM(mx), KMEM(targets), KINT(B * T),
                KINT(Vl),   KINT(nreal),  KINT(lo)};
    if (ct_device_row_groups(dev))
        return ct__ops_launch_groups(dev, "tp", "crossentropy_vp_sums_rows", (size_t)B * T, a, NARGS(a));
    return ct__ops_launch(dev, "tp", "crossentropy_vp_sums", (size_t)B * T, 64, a, NARGS(a));
}

ct_status ct_crossentropy_vp_finish(ct_device *dev, ct_view losses, ct_view lse, ct_view mx,
                                    ct_view sums, int B, int T) {
    NEED(dims_ok(B, T, 1), "ct_crossentropy_vp_finish", "B, T must be positive");
    karg a[] = {KMEM(losses), KMEM(lse), KMEM(mx), KMEM(sums), KINT(B * T)};
    return ct__ops_launch(dev, "tp", "crossentropy_vp_finish", (size_t)B * T, 64, a, NARGS(a));
}

ct_status ct_crossentropy_vp_backward(ct_device *dev, ct_view dlogits, ct_view lse,
                                      ct_view targets, float dloss, int B, int T, int Vl,
                                      int nreal, int lo) {
    NEED(dims_ok(B, T, Vl) && nreal >= 0 && nreal <= Vl && lo >= 0,
         "ct_crossentropy_vp_backward", "B, T, Vl must be positive, 0 <= nreal <= Vl, lo >= 0");
    karg a[] = {KMEM(dlogits), KMEM(lse), KMEM(targets), KINT(B * T), KINT(Vl),
                KINT(nreal),   KINT(lo),  KF(dloss)};
    return ct__ops_launch2(dev, "tp", "crossentropy_vp_backward_inplace", (size_t)Vl, (size_t)B * T, 256,
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
        if ((st = ct__ops_launch_groups(dev, "optim", "sumsq_partial_groups", CT_NORM_PARTIALS, a,
                                NARGS(a))) != CT_OK)
            return st;
        karg f[] = {KMEM(out), KMEM(partials), KINT(CT_NORM_PARTIALS)};
        return ct__ops_launch_groups(dev, "optim", "norm_finalize_group", 1, f, NARGS(f));
    }
    {
        /* The partial count is the global size, so launch exactly CT_NORM_PARTIALS items with a
         * work-group size that divides it. */
        cl_kernel k = NULL;
        st = ct__ops_get_kernel(dev, "optim", "sumsq_partial", &k);
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
    return ct__ops_launch(dev, "optim", "norm_finalize", 1, 1, a, NARGS(a));
}

ct_status ct_scale_by_clip(ct_device *dev, ct_view x, ct_view norm, float clip, size_t n) {
    karg a[] = {KMEM(x), KMEM(norm), KF(clip), KUL(n)};
    return ct__ops_launch(dev, "optim", "scale_by_clip", n, 256, a, NARGS(a));
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
    return ct__ops_launch(dev, "optim", "adamw_update", n, 256, a, NARGS(a));
}

/* ------------------------------------------------------------------ mixture of experts */

ct_status ct_moe_route_forward(ct_device *dev, ct_view p, ct_view idx, ct_view gate,
                               ct_view logits, int N, int E, int K) {
    NEED(dims_ok(N, E, 1) && K >= 1 && K <= E, "ct_moe_route_forward",
         "N, E must be positive and 1 <= K <= E");
    karg a[] = {KMEM(p), KMEM(idx), KMEM(gate), KMEM(logits), KINT(N), KINT(E), KINT(K)};
    return ct__ops_launch(dev, "moe", "moe_route", (size_t)N, 64, a, NARGS(a));
}

ct_status ct_moe_capacity(ct_device *dev, ct_view slot, ct_view kept, ct_view routed, ct_view idx,
                          int B, int T, int E, int K, int cap) {
    NEED(dims_ok(B, T, (long long)E * K) && K <= E && cap >= 0, "ct_moe_capacity",
         "B, T, E must be positive, 1 <= K <= E, cap >= 0");
    karg a[] = {KMEM(slot), KMEM(kept), KMEM(routed), KMEM(idx), KINT(B), KINT(T),
                KINT(E), KINT(K), KINT(cap)};
    return ct__ops_launch(dev, "moe", "moe_capacity", (size_t)B * E, 64, a, NARGS(a));
}

ct_status ct_moe_offsets(ct_device *dev, ct_view off, ct_view kept, int B, int E) {
    NEED(dims_ok(B, E, 1), "ct_moe_offsets", "B, E must be positive");
    karg a[] = {KMEM(off), KMEM(kept), KINT(B), KINT(E)};
    return ct__ops_launch(dev, "moe", "moe_offsets", 1, 1, a, NARGS(a));
}

ct_status ct_moe_prob_mean(ct_device *dev, ct_view pmean, ct_view p, int B, int T, int E) {
    NEED(dims_ok(B, T, E), "ct_moe_prob_mean", "B, T, E must be positive");
    karg a[] = {KMEM(pmean), KMEM(p), KINT(B), KINT(T), KINT(E)};
    return ct__ops_launch(dev, "moe", "moe_prob_mean", (size_t)B * E, 64, a, NARGS(a));
}

ct_status ct_moe_dispatch(ct_device *dev, ct_view xs, ct_view pos, ct_view x, ct_view idx,
                          ct_view slot, ct_view off, int B, int T, int C, int E, int K) {
    NEED(dims_ok(B, T, (long long)C * K) && K <= E, "ct_moe_dispatch",
         "B, T, C must be positive and 1 <= K <= E");
    karg a[] = {KMEM(xs), KMEM(pos), KMEM(x), KMEM(idx), KMEM(slot), KMEM(off),
                KINT((long long)B * T * K), KINT(T), KINT(C), KINT(E), KINT(K)};
    return ct__ops_launch2(dev, "moe", "moe_dispatch", (size_t)C, (size_t)B * T * K, 256, a, NARGS(a));
}

ct_status ct_moe_combine_forward(ct_device *dev, ct_view y, ct_view ys, ct_view gate, ct_view pos,
                                 size_t N, int C, int K) {
    NEED(dims_ok((long long)N, C, K), "ct_moe_combine_forward", "N, C, K must be positive");
    karg a[] = {KMEM(y), KMEM(ys), KMEM(gate), KMEM(pos), KINT(N), KINT(C), KINT(K)};
    return ct__ops_launch2(dev, "moe", "moe_combine", (size_t)C, N, 256, a, NARGS(a));
}

ct_status ct_moe_combine_backward(ct_device *dev, ct_view dys, ct_view dgate, ct_view dy,
                                  ct_view ys, ct_view gate, ct_view pos, size_t N, int C, int K,
                                  float scale) {
    NEED(dims_ok((long long)N, C, K), "ct_moe_combine_backward", "N, C, K must be positive");
    karg g[] = {KMEM(dgate), KMEM(dy), KMEM(ys), KMEM(pos), KINT(N * (size_t)K), KINT(C),
                KINT(K)};
    ct_status st = ct__ops_launch(dev, "moe", "moe_gate_backward", N * (size_t)K, 64, g, NARGS(g));
    if (st != CT_OK) return st;
    karg a[] = {KMEM(dys), KMEM(dy),  KMEM(gate), KMEM(pos), KINT(N * (size_t)K),
                KINT(C),   KINT(K),   KF(scale)};
    return ct__ops_launch2(dev, "moe", "moe_combine_backward", (size_t)C, N * (size_t)K, 256, a, NARGS(a));
}

ct_status ct_moe_router_backward(ct_device *dev, ct_view dlogits, ct_view p, ct_view idx,
                                 ct_view pos, ct_view dgate, ct_view routed, float aux, int B,
                                 int T, int E, int K) {
    NEED(dims_ok(B, T, (long long)E * K) && K <= E, "ct_moe_router_backward",
         "B, T, E must be positive and 1 <= K <= E");
    karg a[] = {KMEM(dlogits), KMEM(p), KMEM(idx), KMEM(pos), KMEM(dgate), KMEM(routed),
                KF(aux), KINT((long long)B * T), KINT(T), KINT(E), KINT(K)};
    return ct__ops_launch(dev, "moe", "moe_router_backward", (size_t)B * T, 64, a, NARGS(a));
}

ct_status ct_moe_dispatch_backward(ct_device *dev, ct_view dx, ct_view dxr, ct_view dxs,
                                   ct_view pos, size_t N, int C, int K, float unscale) {
    NEED(dims_ok((long long)N, C, K), "ct_moe_dispatch_backward", "N, C, K must be positive");
    karg a[] = {KMEM(dx), KMEM(dxr), KMEM(dxs), KMEM(pos), KINT(N), KINT(C), KINT(K), KF(unscale)};
    return ct__ops_launch2(dev, "moe", "moe_dispatch_backward", (size_t)C, N, 256, a, NARGS(a));
}
