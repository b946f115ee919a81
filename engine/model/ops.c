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

/* The build options of a variant: the fp32 kernels are built with none, as always. */
static const char *variant_opts(int bf16) { return bf16 ? CT__BF16_OPTS : ""; }

ct_status ct__ops_get_kernel(ct_device *dev, const char *file, const char *name, int bf16,
                             cl_kernel *k) {
    const ct_cl_source *src = ct__ops_find_source(file);
    if (!src)
        return CT_ERR(ct_device_err(dev), CT_ERR_NOT_FOUND,
                      "engine kernel source '%s.cl' is not embedded (build problem)", file);
    return ct_kernel_get(dev, src, variant_opts(bf16), name, k);
}

/* Fetch a kernel, set its arguments, and pick a power-of-two work-group size <= pref that the
 * kernel allows and that does not pad far past n. */
static ct_status prepare(ct_device *dev, const char *file, const char *name, int bf16,
                         const karg *args, int nargs, size_t n, size_t pref, cl_kernel *k,
                         size_t *local) {
    ct_status st = ct__ops_get_kernel(dev, file, name, bf16, k);
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

ct_status ct__ops_launch(ct_device *dev, const char *file, const char *name, int bf16, size_t n,
                         size_t pref, const karg *args, int nargs) {
    if (n == 0) return CT_OK;
    cl_kernel k = NULL;
    size_t local = 1;
    ct_status st = prepare(dev, file, name, bf16, args, nargs, n, pref, &k, &local);
    if (st != CT_OK) return st;
    size_t global = (n + local - 1) / local * local;
    return ct_kernel_launch(dev, k, 1, &global, &local, NULL);
}

ct_status ct__ops_launch2(ct_device *dev, const char *file, const char *name, int bf16, size_t n0,
                          size_t n1, size_t pref0, const karg *args, int nargs) {
    if (n0 == 0 || n1 == 0) return CT_OK;
    cl_kernel k = NULL;
    size_t l0 = 1;
    ct_status st = prepare(dev, file, name, bf16, args, nargs, n0, pref0, &k, &l0);
    if (st != CT_OK) return st;
    size_t local[2] = {l0, 1}, global[2] = {(n0 + l0 - 1) / l0 * l0, n1};
    return ct_kernel_launch(dev, k, 2, global, local, NULL);
}

ct_status ct__ops_launch_pieces(ct_device *dev, const char *file, const char *name, int bf16,
                                size_t n, size_t pref, const karg *args, int nargs,
                                const int *offs, int noffs, int cnt) {
    karg a[24];
    cl_ulong ov[24], cu;
    cl_int ci;
    if (nargs > 24 || noffs > 24) return ct__ops_bad(dev, name, "too many kernel arguments");
    size_t piece = ct_launch_piece_max();
    ct_status st = CT_OK;
    for (size_t at = 0; at < n && st == CT_OK; at += piece) {
        size_t len = n - at < piece ? n - at : piece;
        memcpy(a, args, (size_t)nargs * sizeof *a);
        for (int j = 0; j < noffs; j++) {
            ov[j] = *(const cl_ulong *)args[offs[j]].p + at;
            a[offs[j]].p = &ov[j];
        }
        ci = (cl_int)len, cu = len;
        a[cnt].p = args[cnt].size == sizeof ci ? (const void *)&ci : (const void *)&cu;
        st = ct__ops_launch(dev, file, name, bf16, len, pref, a, nargs);
    }
    return st;
}
#define PIECES(...) (const int[]){__VA_ARGS__}, NARGS(((int[]){__VA_ARGS__}))

/* A work-group per row (or per chunk): ngroups groups of a power-of-two size <= 256 (the
 * kernels' local reduction buffers) that the kernel allows. */
ct_status ct__ops_launch_groups(ct_device *dev, const char *file, const char *name, int bf16,
                                size_t ngroups, const karg *args, int nargs) {
    if (ngroups == 0) return CT_OK;
    cl_kernel k = NULL;
    size_t local = 1;
    ct_status st = prepare(dev, file, name, bf16, args, nargs, 256, 256, &k, &local);
    if (st != CT_OK) return st;
    size_t global = ngroups * local;
    return ct_kernel_launch(dev, k, 1, &global, &local, NULL);
}

ct_status ct__ops_bad(ct_device *dev, const char *op, const char *what) {
    return CT_ERR(ct_device_err(dev), CT_ERR_ARG, "%s: %s", op, what);
}

static const char *store_name(ct_store s) {
    return s == CT_STORE_F32 ? "fp32" : s == CT_STORE_BF16 ? "bf16" : "of an unknown storage";
}

ct_status ct__ops_variant(ct_device *dev, const char *op, const ct__named_view *act, int nact,
                          const ct__named_view *f32, int nf32, int has_bf16, int *bf16) {
    const ct__named_view *first = NULL;
    *bf16 = 0;
    for (int i = 0; i < nact + nf32; i++) {
        const ct__named_view *a = i < nact ? &act[i] : &f32[i - nact];
        if (a->v.store != CT_STORE_F32 && a->v.store != CT_STORE_BF16)
            return CT_ERR(ct_device_err(dev), CT_ERR_ARG, "%s: %s has an unknown storage (%d)", op,
                          a->name, (int)a->v.store);
    }
    for (int i = 0; i < nact; i++) {
        if (!act[i].v.mem) continue;
        if (!first) {
            first = &act[i];
        } else if (act[i].v.store != first->v.store) {
            return CT_ERR(ct_device_err(dev), CT_ERR_ARG,
                          "%s: %s is %s but %s is %s (an op's activations, their gradients and "
                          "the working weights share one storage)",
                          op, act[i].name, store_name(act[i].v.store), first->name,
                          store_name(first->v.store));
        }
    }
    for (int i = 0; i < nf32; i++)
        if (f32[i].v.mem && f32[i].v.store != CT_STORE_F32)
            return CT_ERR(ct_device_err(dev), CT_ERR_ARG,
                          "%s: %s is %s; it is fp32 (int32 for token ids) in every precision "
                          "(parameter gradients, statistics, losses, log-sum-exp)",
                          op, f32[i].name, store_name(f32[i].v.store));
    if (first && first->v.store == CT_STORE_BF16) {
        if (!has_bf16)
            return CT_ERR(ct_device_err(dev), CT_ERR_UNSUPPORTED,
                          "%s: %s is bf16, and this op has no bf16 variant yet", op, first->name);
        *bf16 = 1;
    }
    return CT_OK;
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

/* The programs a GPT-2 model builds at creation: all but the fused attention and its mma variant
 * (built per head size and block shape when first used) and the Llama family's ops (built when
 * first used). */
static int warmed(const ct_cl_source *src) {
    return strcmp(src->name, "attention_fused") != 0 && strcmp(src->name, "attention_mma") != 0 &&
           strcmp(src->name, "llama") != 0;
}
/* The sources with a bf16 variant (store.clh) that the warm-up builds; the fused attention's
 * are built per shape (ct_attention_fused_warmup_store). */
static int has_bf16(const ct_cl_source *src) {
    static const char *const names[] = {"encoder", "elementwise", "layernorm", "loss", "attention", "tp", "moe"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(src->name, names[i])) return 1;
    return 0;
}

int ct_ops_program_count(void) {
    int n = 0;
    for (int i = 0; i < ct_engine_kernels_count; i++) n += warmed(&ct_engine_kernels[i]);
    return n;
}

ct_status ct_ops_warmup_store(ct_device *dev, ct_store store) {
    if (store != CT_STORE_F32 && store != CT_STORE_BF16)
        return CT_ERR(ct_device_err(dev), CT_ERR_ARG, "ct_ops_warmup_store: unknown storage %d",
                      (int)store);
    for (int i = 0; i < ct_engine_kernels_count; i++) {
        cl_program p = NULL;
        /* the fused attention is built per (head size, block shape) when first used */
        if (!warmed(&ct_engine_kernels[i])) continue;
        if (store == CT_STORE_BF16 && !has_bf16(&ct_engine_kernels[i])) continue;
        ct_status st =
            ct_program_get(dev, &ct_engine_kernels[i], variant_opts(store == CT_STORE_BF16), &p);
        if (st != CT_OK) return st;
    }
    return CT_OK;
}

ct_status ct_ops_warmup(ct_device *dev) { return ct_ops_warmup_store(dev, CT_STORE_F32); }

/* ------------------------------------------------------------------ encoder */

ct_status ct_encoder_forward(ct_device *dev, ct_view out, ct_view inp, ct_view wte, ct_view wpe,
                             int B, int T, int C, int Vp) {
    NEED(rows_ok(B, T, C) && Vp > 0, "ct_encoder_forward",
         "B, T, C, Vp must be positive, rows below 2^31");
    int bf;
    VARIANT("ct_encoder_forward", &bf, VIEWS(NV(out), NV(wte), NV(wpe)), VIEWS(NV(inp)));
    karg a[] = {KMEM(out), KMEM(inp), KMEM(wte), KMEM(wpe), KINT(B * T), KINT(T), KINT(C),
                KINT(Vp)};
    return ct__ops_launch2(dev, "encoder", "encoder_forward", bf, (size_t)C, (size_t)B * T, 256, a,
                           NARGS(a));
}

ct_status ct_encoder_backward(ct_device *dev, ct_view dwte, ct_view dwpe, ct_view dout,
                              ct_view inp, int B, int T, int C, int Vp) {
    NEED(rows_ok(B, T, C) && Vp > 0, "ct_encoder_backward",
         "B, T, C, Vp must be positive, rows below 2^31");
    int bf;
    VARIANT("ct_encoder_backward", &bf, VIEWS(NV(dout)), VIEWS(NV(dwte), NV(dwpe), NV(inp)));
    ct_status st;
    {
        karg a[] = {KMEM(dwte), KMEM(dout), KMEM(inp), KINT(B * T), KINT(C), KINT(Vp)};
        st = ct__ops_launch(dev, "encoder", "encoder_backward_wte", bf, (size_t)C, 64, a, NARGS(a));
        if (st != CT_OK) return st;
    }
    karg a[] = {KMEM(dwpe), KMEM(dout), KINT(B), KINT(T), KINT(C)};
    return ct__ops_launch(dev, "encoder", "encoder_backward_wpe", bf, (size_t)T * C, 256, a,
                          NARGS(a));
}

/* ------------------------------------------------------------------ layernorm */

ct_status ct_layernorm_forward(ct_device *dev, ct_view out, ct_view mean, ct_view rstd,
                               ct_view inp, ct_view weight, ct_view bias, int B, int T, int C) {
    NEED(rows_ok(B, T, C), "ct_layernorm_forward", "B, T, C must be positive, rows below 2^31");
    int bf;
    VARIANT("ct_layernorm_forward", &bf, VIEWS(NV(out), NV(inp), NV(weight), NV(bias)),
            VIEWS(NV(mean), NV(rstd)));
    karg a[] = {KMEM(out),    KMEM(mean), KMEM(rstd),   KMEM(inp),
                KMEM(weight), KMEM(bias), KINT(B * T), KINT(C)};
    if (ct_device_row_groups(dev))
        return ct__ops_launch_groups(dev, "layernorm", "layernorm_forward_rows", bf, (size_t)B * T,
                                     a, NARGS(a));
    return ct__ops_launch(dev, "layernorm", "layernorm_forward", bf, (size_t)B * T, 64, a,
                          NARGS(a));
}

ct_status ct_layernorm_backward(ct_device *dev, ct_view dinp, ct_view dweight, ct_view dbias,
                                ct_view dout, ct_view inp, ct_view weight, ct_view mean,
                                ct_view rstd, int B, int T, int C, int accumulate_dinp) {
    NEED(rows_ok(B, T, C), "ct_layernorm_backward", "B, T, C must be positive, rows below 2^31");
    NEED((dweight.mem != NULL) == (dbias.mem != NULL), "ct_layernorm_backward",
         "dweight and dbias are given together or not at all");
    int bf;
    VARIANT("ct_layernorm_backward", &bf, VIEWS(NV(dinp), NV(dout), NV(inp), NV(weight)),
            VIEWS(NV(dweight), NV(dbias), NV(mean), NV(rstd)));
    ct_status st;
    if (dweight.mem) {
        karg a[] = {KMEM(dweight), KMEM(dbias), KMEM(dout), KMEM(inp),
                    KMEM(mean),    KMEM(rstd),  KINT(B * T), KINT(C)};
        cl_kernel k = NULL;
        size_t local = 0;
        if (ct_device_row_groups(dev) &&
            (st = prepare(dev, "layernorm", "layernorm_backward_dparams_groups", bf, a, NARGS(a),
                          256, 256, &k, &local)) != CT_OK)
            return st;
        if (local == 256) { /* 32 channels x 8 row lanes per group */
            size_t global = ((size_t)C + 31) / 32 * 256;
            st = ct_kernel_launch(dev, k, 1, &global, &local, NULL);
        } else {
            st = ct__ops_launch(dev, "layernorm", "layernorm_backward_dparams", bf, (size_t)C, 64,
                                a, NARGS(a));
        }
        if (st != CT_OK) return st;
    }
    if (!dinp.mem) return CT_OK;
    karg a[] = {KMEM(dinp), KMEM(dout),  KMEM(inp), KMEM(weight),         KMEM(mean),
                KMEM(rstd), KINT(B * T), KINT(C),   KINT(accumulate_dinp != 0)};
    if (ct_device_row_groups(dev))
        return ct__ops_launch_groups(dev, "layernorm", "layernorm_backward_dinp_rows", bf,
                                     (size_t)B * T, a, NARGS(a));
    return ct__ops_launch(dev, "layernorm", "layernorm_backward_dinp", bf, (size_t)B * T, 64, a,
                          NARGS(a));
}

/* ------------------------------------------------------------------ bias, residual, gelu */

ct_status ct_bias_forward(ct_device *dev, ct_view out, ct_view bias, size_t N, int OC) {
    NEED(rows_ok((long long)N, 1, OC), "ct_bias_forward",
         "N, OC must be positive, rows below 2^31");
    int bf;
    VARIANT("ct_bias_forward", &bf, VIEWS(NV(out), NV(bias)), NO_VIEWS);
    karg a[] = {KMEM(out), KMEM(bias), KINT(N), KINT(OC)};
    return ct__ops_launch2(dev, "elementwise", "bias_add", bf, (size_t)OC, N, 256, a, NARGS(a));
}

ct_status ct_bias_backward(ct_device *dev, ct_view dbias, ct_view dout, size_t N, int OC) {
    NEED(rows_ok((long long)N, 1, OC), "ct_bias_backward",
         "N, OC must be positive, rows below 2^31");
    int bf;
    VARIANT("ct_bias_backward", &bf, VIEWS(NV(dout)), VIEWS(NV(dbias)));
    karg a[] = {KMEM(dbias), KMEM(dout), KINT(N), KINT(OC)};
    return ct__ops_launch(dev, "elementwise", "bias_backward", bf, (size_t)OC, 64, a, NARGS(a));
}

ct_status ct_residual_forward(ct_device *dev, ct_view out, ct_view a, ct_view b, size_t N) {
    int bf;
    VARIANT("ct_residual_forward", &bf, VIEWS(NV(out), NV(a), NV(b)), NO_VIEWS);
    karg k[] = {KMEM(out), KMEM(a), KMEM(b), KINT(N)};
    return ct__ops_launch_pieces(dev, "elementwise", "residual_forward", bf, N, 256, k, NARGS(k),
                                 PIECES(1, 3, 5), 6);
}

ct_status ct_residual_backward(ct_device *dev, ct_view da, ct_view db, ct_view dout, size_t N) {
    int bf;
    VARIANT("ct_residual_backward", &bf, VIEWS(NV(da), NV(db), NV(dout)), NO_VIEWS);
    karg k[] = {KMEM(da), KMEM(db), KMEM(dout), KINT(N)};
    return ct__ops_launch_pieces(dev, "elementwise", "residual_backward", bf, N, 256, k, NARGS(k),
                                 PIECES(1, 3, 5), 6);
}

ct_status ct_gelu_forward(ct_device *dev, ct_view out, ct_view inp, size_t N) {
    int bf;
    VARIANT("ct_gelu_forward", &bf, VIEWS(NV(out), NV(inp)), NO_VIEWS);
    karg a[] = {KMEM(out), KMEM(inp), KINT(N)};
    return ct__ops_launch_pieces(dev, "elementwise", "gelu_forward", bf, N, 256, a, NARGS(a),
                                 PIECES(1, 3), 4);
}

ct_status ct_gelu_backward(ct_device *dev, ct_view dinp, ct_view inp, ct_view dout, size_t N) {
    int bf;
    VARIANT("ct_gelu_backward", &bf, VIEWS(NV(dinp), NV(inp), NV(dout)), NO_VIEWS);
    karg a[] = {KMEM(dinp), KMEM(inp), KMEM(dout), KINT(N)};
    return ct__ops_launch_pieces(dev, "elementwise", "gelu_backward", bf, N, 256, a, NARGS(a),
                                 PIECES(1, 3, 5), 6);
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
    ct_gemm_desc g = {.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .batch = 1, .alpha = 1.0f,
                      .beta = beta0, .a = a.mem, .a_off = a.off, .lda = lda, .b = b.mem,
                      .b_off = b.off, .ldb = ldb, .c = c.mem, .c_off = c.off, .ldc = ldc};
    ct_gemm_path path = ct_gemm_plan_path(ct_device_gemm_plan(dev), &g, 0);
    if (path != CT_GEMM_CLBLAST) return ct_gemm_run(dev, path, &g, NULL); /* --tf32: one call */
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

ct_status ct__ops_gemm_f32_batched(ct_device *dev, const ct_gemm_desc *g) {
    ct_gemm_path path = ct_gemm_plan_path(ct_device_gemm_plan(dev), g, 0);
    if (path != CT_GEMM_CLBLAST) return ct_gemm_run(dev, path, g, NULL);
    return ct_gemm_strided_batched(dev, g->ta, g->tb, g->m, g->n, g->k, g->alpha, g->a, g->a_off,
                                   g->lda, g->a_stride, g->b, g->b_off, g->ldb, g->b_stride,
                                   g->beta, g->c, g->c_off, g->ldc, g->c_stride, g->batch, NULL);
}

ct_status ct__ops_gemm_bf16(ct_device *dev, const ct_gemm_desc *g) {
    return ct_gemm_run(dev, ct_gemm_plan_path(ct_device_gemm_plan(dev), g, 1), g, NULL);
}

/* The same product with bf16 A and B on the bf16 path the device's plan gives it (fp32
 * accumulation, one call: the bf16 kernels block K themselves); C bf16 or fp32 by its view,
 * rounded once. */
static ct_status gemm_bf16(ct_device *dev, int ta, int tb, size_t m, size_t n, size_t k,
                           ct_view a, size_t lda, ct_view b, size_t ldb, float beta, ct_view c,
                           size_t ldc) {
    ct_gemm_desc g = {.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .batch = 1, .alpha = 1.0f,
                      .beta = beta, .a = a.mem, .a_off = a.off, .lda = lda, .b = b.mem,
                      .b_off = b.off, .ldb = ldb, .c = c.mem, .c_off = c.off, .ldc = ldc,
                      .c_bf16 = c.store == CT_STORE_BF16};
    return ct__ops_gemm_bf16(dev, &g);
}

ct_status ct_matmul_forward(ct_device *dev, ct_view out, ct_view inp, ct_view weight, ct_view bias,
                            int B, int T, int C, int OC) {
    NEED(rows_ok(B, T, C) && rows_ok(B, T, OC), "ct_matmul_forward",
         "B, T, C, OC must be positive, rows below 2^31");
    int bf;
    VARIANT("ct_matmul_forward", &bf, VIEWS(NV(out), NV(inp), NV(weight), NV(bias)), NO_VIEWS);
    size_t N = (size_t)B * T;
    if (bf) { /* out = bias (a copy), then out += inp . weight^T in fp32, rounded once */
        if (bias.mem) {
            karg a[] = {KMEM(out), KMEM(bias), KINT(N), KINT(OC)};
            ct_status st = ct__ops_launch2(dev, "elementwise", "bias_fill", bf, (size_t)OC, N, 256,
                                           a, NARGS(a));
            if (st != CT_OK) return st;
        }
        return gemm_bf16(dev, 0, 1, N, (size_t)OC, (size_t)C, inp, (size_t)C, weight, (size_t)C,
                         bias.mem ? 1.0f : 0.0f, out, (size_t)OC);
    }
    /* (N,C) x (OC,C)^T -> (N,OC) */
    ct_status st = gemm_ksliced(dev, 0, 1, N, (size_t)OC, (size_t)C, inp, (size_t)C, weight,
                                (size_t)C, 0.0f, out, (size_t)OC);
    if (st != CT_OK || !bias.mem) return st;
    return ct_bias_forward(dev, out, bias, N, OC);
}

ct_status ct_matmul_backward(ct_device *dev, ct_view dinp, ct_view dweight, ct_view dbias,
                             ct_view dout, ct_view inp, ct_view weight, int B, int T, int C,
                             int OC) {
    NEED(rows_ok(B, T, C) && rows_ok(B, T, OC), "ct_matmul_backward",
         "B, T, C, OC must be positive, rows below 2^31");
    int bf;
    VARIANT("ct_matmul_backward", &bf, VIEWS(NV(dinp), NV(dout), NV(inp), NV(weight)),
            VIEWS(NV(dweight), NV(dbias)));
    size_t N = (size_t)B * T;
    ct_status st = CT_OK;
    if (bf) {
        if (dinp.mem) /* dinp (N,C) bf16 = dout (N,OC) . weight (OC,C) */
            st = gemm_bf16(dev, 0, 0, N, (size_t)C, (size_t)OC, dout, (size_t)OC, weight,
                           (size_t)C, 0.0f, dinp, (size_t)C);
        if (st == CT_OK && dweight.mem) /* dweight (OC,C) fp32 += dout^T (OC,N) . inp (N,C) */
            st = gemm_bf16(dev, 1, 0, (size_t)OC, (size_t)C, N, dout, (size_t)OC, inp, (size_t)C,
                           1.0f, dweight, (size_t)C);
    } else {
        if (dinp.mem) /* dinp (N,C) = dout (N,OC) . weight (OC,C) */
            st = gemm_ksliced(dev, 0, 0, N, (size_t)C, (size_t)OC, dout, (size_t)OC, weight,
                              (size_t)C, 0.0f, dinp, (size_t)C);
        if (st == CT_OK && dweight.mem) /* dweight (OC,C) += dout^T (OC,N) . inp (N,C) */
            st = gemm_ksliced(dev, 1, 0, (size_t)OC, (size_t)C, N, dout, (size_t)OC, inp,
                              (size_t)C, 1.0f, dweight, (size_t)C);
    }
    if (st == CT_OK && dbias.mem) st = ct_bias_backward(dev, dbias, dout, N, OC);
    return st;
}

/* ------------------------------------------------------------------ loss */

ct_status ct_crossentropy_forward(ct_device *dev, ct_view losses, ct_view lse, ct_view logits,
                                  ct_view targets, int B, int T, int V, int Vp) {
    NEED(rows_ok(B, T, Vp) && V > 0 && V <= Vp, "ct_crossentropy_forward",
         "B, T, V must be positive, rows below 2^31 and V <= Vp");
    int bf;
    VARIANT("ct_crossentropy_forward", &bf, VIEWS(NV(logits)),
            VIEWS(NV(losses), NV(lse), NV(targets)));
    karg a[] = {KMEM(losses), KMEM(lse), KMEM(logits), KMEM(targets),
                KINT(B * T),  KINT(V),   KINT(Vp)};
    if (ct_device_row_groups(dev))
        return ct__ops_launch_groups(dev, "loss", "crossentropy_forward_rows", bf, (size_t)B * T,
                                     a, NARGS(a));
    return ct__ops_launch(dev, "loss", "crossentropy_forward", bf, (size_t)B * T, 64, a,
                          NARGS(a));
}

ct_status ct_crossentropy_backward(ct_device *dev, ct_view dlogits, ct_view logits, ct_view lse,
                                   ct_view targets, float dloss, int B, int T, int V, int Vp) {
    NEED(rows_ok(B, T, Vp) && V > 0 && V <= Vp, "ct_crossentropy_backward",
         "B, T, V must be positive, rows below 2^31 and V <= Vp");
    int bf;
    VARIANT("ct_crossentropy_backward", &bf, VIEWS(NV(dlogits), NV(logits)),
            VIEWS(NV(lse), NV(targets)));
    size_t n = (size_t)B * T * Vp, es = ct_view_elem_bytes(logits);
    if (dlogits.mem != logits.mem || dlogits.off != logits.off) {
        ct_status st = ct_mem_copy(dev, logits.mem, logits.off * es, dlogits.mem,
                                   dlogits.off * es, n * es);
        if (st != CT_OK) return st;
    }
    karg a[] = {KMEM(dlogits), KMEM(lse), KMEM(targets), KINT(B * T), KINT(V), KINT(Vp), KF(dloss)};
    return ct__ops_launch2(dev, "loss", "crossentropy_backward_inplace", bf, (size_t)Vp,
                           (size_t)B * T, 256, a, NARGS(a));
}

ct_status ct_mean_forward(ct_device *dev, ct_view out, ct_view inp, size_t N) {
    NEED(N > 0 && N < (size_t)INT_MAX, "ct_mean_forward", "N must be positive");
    NO_BF16_YET("ct_mean_forward", NO_VIEWS, VIEWS(NV(out), NV(inp)));
    karg a[] = {KMEM(out), KMEM(inp), KINT(N)};
    return ct__ops_launch(dev, "loss", "mean_forward", 0, 1, 1, a, NARGS(a));
}

/* ------------------------------------------------------------------ vocabulary-parallel */

ct_status ct_encoder_forward_vp(ct_device *dev, ct_view out, ct_view inp, ct_view wte, ct_view wpe,
                                int B, int T, int C, int lo, int Vl, int add_wpe) {
    NEED(dims_ok(B, T, C) && Vl > 0 && lo >= 0, "ct_encoder_forward_vp",
         "B, T, C, Vl must be positive and lo >= 0");
    int bf;
    VARIANT("ct_encoder_forward_vp", &bf, VIEWS(NV(out), NV(wte), NV(wpe)), VIEWS(NV(inp)));
    karg a[] = {KMEM(out), KMEM(inp), KMEM(wte), KMEM(wpe), KINT(B * T), KINT(T),
                KINT(C),   KINT(lo),  KINT(Vl),  KINT(add_wpe != 0)};
    return ct__ops_launch2(dev, "tp", "encoder_forward_vp", bf, (size_t)C, (size_t)B * T, 256, a, NARGS(a));
}

ct_status ct_encoder_backward_vp(ct_device *dev, ct_view dwte, ct_view dwpe, ct_view dout,
                                 ct_view inp, int B, int T, int C, int lo, int Vl) {
    NEED(dims_ok(B, T, C) && Vl > 0 && lo >= 0, "ct_encoder_backward_vp",
         "B, T, C, Vl must be positive and lo >= 0");
    int bf;
    VARIANT("ct_encoder_backward_vp", &bf, VIEWS(NV(dout)), VIEWS(NV(dwte), NV(dwpe), NV(inp)));
    ct_status st;
    {
        karg a[] = {KMEM(dwte), KMEM(dout), KMEM(inp), KINT(B * T), KINT(C), KINT(lo), KINT(Vl)};
        st = ct__ops_launch(dev, "tp", "encoder_backward_wte_vp", bf, (size_t)C, 64, a, NARGS(a));
        if (st != CT_OK || !dwpe.mem) return st; /* no dwpe: wte's rows only */
    }
    karg a[] = {KMEM(dwpe), KMEM(dout), KINT(B), KINT(T), KINT(C)};
    return ct__ops_launch(dev, "encoder", "encoder_backward_wpe", bf, (size_t)T * C, 256, a,
                          NARGS(a));
}

ct_status ct_combine(ct_device *dev, ct_view dst, ct_view a, ct_view b, size_t n, int max_op) {
    NEED(dst.mem && a.mem && b.mem, "ct_combine", "dst, a and b are needed");
    int bf;
    VARIANT("ct_combine", &bf, VIEWS(NV(dst), NV(a), NV(b)), NO_VIEWS);
    karg k[] = {KMEM(dst), KMEM(a), KMEM(b), KUL(n), KINT(max_op != 0)};
    return ct__ops_launch(dev, "tp", "tp_combine", bf, n, 256, k, NARGS(k));
}

ct_status ct_crossentropy_vp_max(ct_device *dev, ct_view mx, ct_view logits, int B, int T, int Vl,
                                 int nreal) {
    NEED(dims_ok(B, T, Vl) && nreal >= 0 && nreal <= Vl, "ct_crossentropy_vp_max",
         "B, T, Vl must be positive and 0 <= nreal <= Vl");
    int bf;
    VARIANT("ct_crossentropy_vp_max", &bf, VIEWS(NV(logits)), VIEWS(NV(mx)));
    karg a[] = {KMEM(mx), KMEM(logits), KINT(B * T), KINT(Vl), KINT(nreal)};
    if (ct_device_row_groups(dev))
        return ct__ops_launch_groups(dev, "tp", "crossentropy_vp_max_rows", bf, (size_t)B * T, a, NARGS(a));
    return ct__ops_launch(dev, "tp", "crossentropy_vp_max", bf, (size_t)B * T, 64, a, NARGS(a));
}

ct_status ct_crossentropy_vp_sums(ct_device *dev, ct_view sums, ct_view logits, ct_view mx,
                                  ct_view targets, int B, int T, int Vl, int nreal, int lo) {
    NEED(dims_ok(B, T, Vl) && nreal >= 0 && nreal <= Vl && lo >= 0, "ct_crossentropy_vp_sums",
         "B, T, Vl must be positive, 0 <= nreal <= Vl, lo >= 0");
    int bf;
    VARIANT("ct_crossentropy_vp_sums", &bf, VIEWS(NV(logits)),
            VIEWS(NV(sums), NV(mx), NV(targets)));
    karg a[] = {KMEM(sums), KMEM(logits), KMEM(mx), KMEM(targets), KINT(B * T),
                KINT(Vl),   KINT(nreal),  KINT(lo)};
    if (ct_device_row_groups(dev))
        return ct__ops_launch_groups(dev, "tp", "crossentropy_vp_sums_rows", bf, (size_t)B * T, a, NARGS(a));
    return ct__ops_launch(dev, "tp", "crossentropy_vp_sums", bf, (size_t)B * T, 64, a, NARGS(a));
}

ct_status ct_crossentropy_vp_finish(ct_device *dev, ct_view losses, ct_view lse, ct_view mx,
                                    ct_view sums, int B, int T) {
    NEED(dims_ok(B, T, 1), "ct_crossentropy_vp_finish", "B, T must be positive");
    NO_BF16_YET("ct_crossentropy_vp_finish", NO_VIEWS, VIEWS(NV(losses), NV(lse), NV(mx), NV(sums)));
    karg a[] = {KMEM(losses), KMEM(lse), KMEM(mx), KMEM(sums), KINT(B * T)};
    return ct__ops_launch(dev, "tp", "crossentropy_vp_finish", 0, (size_t)B * T, 64, a, NARGS(a));
}

ct_status ct_crossentropy_vp_backward(ct_device *dev, ct_view dlogits, ct_view lse,
                                      ct_view targets, float dloss, int B, int T, int Vl,
                                      int nreal, int lo) {
    NEED(dims_ok(B, T, Vl) && nreal >= 0 && nreal <= Vl && lo >= 0,
         "ct_crossentropy_vp_backward", "B, T, Vl must be positive, 0 <= nreal <= Vl, lo >= 0");
    int bf;
    VARIANT("ct_crossentropy_vp_backward", &bf, VIEWS(NV(dlogits)), VIEWS(NV(lse), NV(targets)));
    karg a[] = {KMEM(dlogits), KMEM(lse), KMEM(targets), KINT(B * T), KINT(Vl),
                KINT(nreal),   KINT(lo),  KF(dloss)};
    return ct__ops_launch2(dev, "tp", "crossentropy_vp_backward_inplace", bf, (size_t)Vl, (size_t)B * T, 256,
                   a, NARGS(a));
}

/* ------------------------------------------------------------------ optimizer */

ct_status ct_global_norm_forward(ct_device *dev, ct_view out, ct_view partials, ct_view inp,
                                 size_t n) {
    NO_BF16_YET("ct_global_norm_forward", NO_VIEWS, VIEWS(NV(out), NV(partials), NV(inp)));
    ct_status st;
    if (ct_device_row_groups(dev)) {
        /* a work-group per partial, then one group adds the partials */
        cl_ulong chunk = (n + CT_NORM_PARTIALS - 1) / CT_NORM_PARTIALS;
        karg a[] = {KMEM(partials), KMEM(inp), KUL(n), KUL(chunk)};
        if ((st = ct__ops_launch_groups(dev, "optim", "sumsq_partial_groups", 0, CT_NORM_PARTIALS, a,
                                NARGS(a))) != CT_OK)
            return st;
        karg f[] = {KMEM(out), KMEM(partials), KINT(CT_NORM_PARTIALS)};
        return ct__ops_launch_groups(dev, "optim", "norm_finalize_group", 0, 1, f, NARGS(f));
    }
    {
        /* The partial count is the global size, so launch exactly CT_NORM_PARTIALS items with a
         * work-group size that divides it. */
        cl_kernel k = NULL;
        st = ct__ops_get_kernel(dev, "optim", "sumsq_partial", 0, &k);
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
    return ct__ops_launch(dev, "optim", "norm_finalize", 0, 1, 1, a, NARGS(a));
}

ct_status ct_scale_by_clip(ct_device *dev, ct_view x, ct_view norm, float clip, size_t n) {
    NO_BF16_YET("ct_scale_by_clip", NO_VIEWS, VIEWS(NV(x), NV(norm)));
    karg a[] = {KMEM(x), KMEM(norm), KF(clip), KUL(n)};
    return ct__ops_launch_pieces(dev, "optim", "scale_by_clip", 0, n, 256, a, NARGS(a),
                                 PIECES(1), 5);
}

ct_status ct_adamw_update(ct_device *dev, ct_view params, ct_view grads, ct_view m, ct_view v,
                          ct_view norm, float clip, size_t n, float lr, float beta1, float beta2,
                          float eps, float weight_decay, int t) {
    NEED(t >= 1, "ct_adamw_update", "step t must be >= 1");
    NEED(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1, "ct_adamw_update",
         "beta1 and beta2 must be in [0, 1)");
    NO_BF16_YET("ct_adamw_update", NO_VIEWS, VIEWS(NV(params), NV(grads), NV(m), NV(v), NV(norm)));
    float bc1 = (float)(1.0 - pow(beta1, t)), bc2 = (float)(1.0 - pow(beta2, t));
    karg a[] = {KMEM(params), KMEM(grads), KMEM(m),   KMEM(v),          KMEM(norm),
                KF(clip),     KUL(n),      KF(lr),    KF(beta1),        KF(beta2),
                KF(eps),      KF(weight_decay), KF(bc1), KF(bc2)};
    return ct__ops_launch_pieces(dev, "optim", "adamw_update", 0, n, 256, a, NARGS(a),
                                 PIECES(1, 3, 5, 7), 11);
}

/* ------------------------------------------------------------------ mixture of experts */

ct_status ct_moe_route_forward(ct_device *dev, ct_view p, ct_view idx, ct_view gate,
                               ct_view logits, int N, int E, int K) {
    NEED(dims_ok(N, E, 1) && K >= 1 && K <= E, "ct_moe_route_forward",
         "N, E must be positive and 1 <= K <= E");
    int bf;
    VARIANT("ct_moe_route_forward", &bf, VIEWS(NV(logits)), VIEWS(NV(p), NV(gate), NV(idx)));
    karg a[] = {KMEM(p), KMEM(idx), KMEM(gate), KMEM(logits), KINT(N), KINT(E), KINT(K)};
    return ct__ops_launch(dev, "moe", "moe_route", bf, (size_t)N, 64, a, NARGS(a));
}

ct_status ct_moe_capacity(ct_device *dev, ct_view slot, ct_view kept, ct_view routed, ct_view idx,
                          int B, int T, int E, int K, int cap) {
    NEED(dims_ok(B, T, (long long)E * K) && K <= E && cap >= 0, "ct_moe_capacity",
         "B, T, E must be positive, 1 <= K <= E, cap >= 0");
    NO_BF16_YET("ct_moe_capacity", NO_VIEWS, VIEWS(NV(slot), NV(kept), NV(routed), NV(idx)));
    karg a[] = {KMEM(slot), KMEM(kept), KMEM(routed), KMEM(idx), KINT(B), KINT(T),
                KINT(E), KINT(K), KINT(cap)};
    return ct__ops_launch(dev, "moe", "moe_capacity", 0, (size_t)B * E, 64, a, NARGS(a));
}

ct_status ct_moe_offsets(ct_device *dev, ct_view off, ct_view kept, int B, int E) {
    NEED(dims_ok(B, E, 1), "ct_moe_offsets", "B, E must be positive");
    NO_BF16_YET("ct_moe_offsets", NO_VIEWS, VIEWS(NV(off), NV(kept)));
    karg a[] = {KMEM(off), KMEM(kept), KINT(B), KINT(E)};
    return ct__ops_launch(dev, "moe", "moe_offsets", 0, 1, 1, a, NARGS(a));
}

ct_status ct_moe_prob_mean(ct_device *dev, ct_view pmean, ct_view p, int B, int T, int E) {
    NEED(dims_ok(B, T, E), "ct_moe_prob_mean", "B, T, E must be positive");
    NO_BF16_YET("ct_moe_prob_mean", NO_VIEWS, VIEWS(NV(pmean), NV(p)));
    karg a[] = {KMEM(pmean), KMEM(p), KINT(B), KINT(T), KINT(E)};
    return ct__ops_launch(dev, "moe", "moe_prob_mean", 0, (size_t)B * E, 64, a, NARGS(a));
}

ct_status ct_moe_dispatch(ct_device *dev, ct_view xs, ct_view pos, ct_view x, ct_view idx,
                          ct_view slot, ct_view off, int B, int T, int C, int E, int K) {
    NEED(dims_ok(B, T, (long long)C * K) && K <= E, "ct_moe_dispatch",
         "B, T, C must be positive and 1 <= K <= E");
    int bf;
    VARIANT("ct_moe_dispatch", &bf, VIEWS(NV(xs), NV(x)),
            VIEWS(NV(pos), NV(idx), NV(slot), NV(off)));
    karg a[] = {KMEM(xs), KMEM(pos), KMEM(x), KMEM(idx), KMEM(slot), KMEM(off),
                KINT((long long)B * T * K), KINT(T), KINT(C), KINT(E), KINT(K)};
    return ct__ops_launch2(dev, "moe", "moe_dispatch", bf, (size_t)C, (size_t)B * T * K, 256, a, NARGS(a));
}

ct_status ct_moe_combine_forward(ct_device *dev, ct_view y, ct_view ys, ct_view gate, ct_view pos,
                                 size_t N, int C, int K) {
    NEED(dims_ok((long long)N, C, K), "ct_moe_combine_forward", "N, C, K must be positive");
    int bf;
    VARIANT("ct_moe_combine_forward", &bf, VIEWS(NV(y), NV(ys)), VIEWS(NV(gate), NV(pos)));
    karg a[] = {KMEM(y), KMEM(ys), KMEM(gate), KMEM(pos), KINT(N), KINT(C), KINT(K)};
    return ct__ops_launch2(dev, "moe", "moe_combine", bf, (size_t)C, N, 256, a, NARGS(a));
}

ct_status ct_moe_combine_backward(ct_device *dev, ct_view dys, ct_view dgate, ct_view dy,
                                  ct_view ys, ct_view gate, ct_view pos, size_t N, int C, int K,
                                  float scale) {
    NEED(dims_ok((long long)N, C, K), "ct_moe_combine_backward", "N, C, K must be positive");
    int bf;
    VARIANT("ct_moe_combine_backward", &bf, VIEWS(NV(dys), NV(dy), NV(ys)),
            VIEWS(NV(dgate), NV(gate), NV(pos)));
    karg g[] = {KMEM(dgate), KMEM(dy), KMEM(ys), KMEM(pos), KINT(N * (size_t)K), KINT(C),
                KINT(K)};
    ct_status st = ct__ops_launch(dev, "moe", "moe_gate_backward", bf, N * (size_t)K, 64, g, NARGS(g));
    if (st != CT_OK) return st;
    karg a[] = {KMEM(dys), KMEM(dy),  KMEM(gate), KMEM(pos), KINT(N * (size_t)K),
                KINT(C),   KINT(K),   KF(scale)};
    return ct__ops_launch2(dev, "moe", "moe_combine_backward", bf, (size_t)C, N * (size_t)K, 256, a, NARGS(a));
}

ct_status ct_moe_router_backward(ct_device *dev, ct_view dlogits, ct_view p, ct_view idx,
                                 ct_view pos, ct_view dgate, ct_view routed, float aux, int B,
                                 int T, int E, int K) {
    NEED(dims_ok(B, T, (long long)E * K) && K <= E, "ct_moe_router_backward",
         "B, T, E must be positive and 1 <= K <= E");
    int bf;
    VARIANT("ct_moe_router_backward", &bf, VIEWS(NV(dlogits)),
            VIEWS(NV(p), NV(dgate), NV(idx), NV(pos), NV(routed)));
    karg a[] = {KMEM(dlogits), KMEM(p), KMEM(idx), KMEM(pos), KMEM(dgate), KMEM(routed),
                KF(aux), KINT((long long)B * T), KINT(T), KINT(E), KINT(K)};
    return ct__ops_launch(dev, "moe", "moe_router_backward", bf, (size_t)B * T, 64, a, NARGS(a));
}

ct_status ct_moe_dispatch_backward(ct_device *dev, ct_view dx, ct_view dxr, ct_view dxs,
                                   ct_view pos, size_t N, int C, int K, float unscale) {
    NEED(dims_ok((long long)N, C, K), "ct_moe_dispatch_backward", "N, C, K must be positive");
    int bf;
    VARIANT("ct_moe_dispatch_backward", &bf, VIEWS(NV(dx), NV(dxr), NV(dxs)), VIEWS(NV(pos)));
    karg a[] = {KMEM(dx), KMEM(dxr), KMEM(dxs), KMEM(pos), KINT(N), KINT(C), KINT(K), KF(unscale)};
    return ct__ops_launch2(dev, "moe", "moe_dispatch_backward", bf, (size_t)C, N, 256, a, NARGS(a));
}
