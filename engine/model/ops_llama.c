/* ops_llama.c - host wrappers of the Llama family's ops (ct_engine_ops_llama.h, kernels in
 * llama.cl): argument checks, the variant from the views (fp32 or bf16: ct__ops_variant) and
 * launches, through the launch helpers of ops.c. */
#include "ct_engine_ops_llama.h"
#include "ops_impl.h"

static int has(ct_view v) { return v.mem != NULL; }

ct_status ct_rmsnorm_forward(ct_device *dev, ct_view out, ct_view rstd, ct_view inp,
                             ct_view weight, int B, int T, int C, float eps) {
    NEED(dims_ok(B, T, C), "ct_rmsnorm_forward", "B, T and C must be positive");
    NEED(has(out) && has(rstd) && has(inp) && has(weight), "ct_rmsnorm_forward",
         "out, rstd, inp and weight are required");
    NEED(eps > 0 && isfinite(eps), "ct_rmsnorm_forward", "eps must be positive");
    int bf;
    VARIANT("ct_rmsnorm_forward", &bf, VIEWS(NV(out), NV(inp), NV(weight)), VIEWS(NV(rstd)));
    karg a[] = {KMEM(out), KMEM(rstd), KMEM(inp), KMEM(weight), KINT(B * T), KINT(C), KF(eps)};
    return ct__ops_launch(dev, "llama", "rmsnorm_forward", bf, (size_t)B * T, 64, a, NARGS(a));
}

ct_status ct_rmsnorm_backward(ct_device *dev, ct_view dinp, ct_view dweight, ct_view dout,
                              ct_view inp, ct_view weight, ct_view rstd, int B, int T, int C,
                              int accumulate_dinp) {
    NEED(dims_ok(B, T, C), "ct_rmsnorm_backward", "B, T and C must be positive");
    NEED(has(dout) && has(inp) && has(rstd), "ct_rmsnorm_backward",
         "dout, inp and rstd are required");
    NEED(!has(dinp) || has(weight), "ct_rmsnorm_backward", "dinp needs the weight");
    int bf;
    VARIANT("ct_rmsnorm_backward", &bf, VIEWS(NV(dinp), NV(dout), NV(inp), NV(weight)),
                VIEWS(NV(dweight), NV(rstd)));
    ct_status st = CT_OK;
    if (has(dinp)) {
        karg a[] = {KMEM(dinp), KMEM(dout),  KMEM(inp),  KMEM(weight),
                    KMEM(rstd), KINT(B * T), KINT(C), KINT(accumulate_dinp != 0)};
        st = ct__ops_launch(dev, "llama", "rmsnorm_backward_dinp", bf, (size_t)B * T, 64, a,
                            NARGS(a));
    }
    if (st == CT_OK && has(dweight)) {
        karg a[] = {KMEM(dweight), KMEM(dout), KMEM(inp), KMEM(rstd), KINT(B * T), KINT(C)};
        st = ct__ops_launch(dev, "llama", "rmsnorm_backward_dweight", bf, (size_t)C, 64, a,
                            NARGS(a));
    }
    return st;
}

static ct_status rope(ct_device *dev, const char *op, ct_view out, ct_view inp, int B, int T,
                      int nh, int hd, int row_stride, float theta, int dir) {
    NEED(dims_ok(B, T, nh) && hd > 0 && hd % 2 == 0, op,
         "B, T and the heads must be positive, the head size positive and even");
    NEED(row_stride >= nh * hd, op, "row_stride must hold the row's heads");
    NEED(dims_ok(B, T, row_stride), op, "B x T x row_stride too large");
    NEED(theta > 1 && isfinite(theta), op, "theta must be above 1");
    NEED(has(out) && has(inp), op, "out and inp are required");
    int bf;
    VARIANT(op, &bf, VIEWS(NV(out), NV(inp)), NO_VIEWS);
    karg a[] = {KMEM(out), KMEM(inp),        KINT(B * T), KINT(T),   KINT(nh),
                KINT(hd),  KINT(row_stride), KF(theta),   KINT(dir)};
    return ct__ops_launch(dev, "llama", "rope_apply", bf, (size_t)B * T * nh * (hd / 2), 256, a,
                          NARGS(a));
}

ct_status ct_rope_forward(ct_device *dev, ct_view out, ct_view inp, int B, int T, int nh, int hd,
                          int row_stride, float theta) {
    return rope(dev, "ct_rope_forward", out, inp, B, T, nh, hd, row_stride, theta, 1);
}

ct_status ct_rope_backward(ct_device *dev, ct_view dinp, ct_view dout, int B, int T, int nh,
                           int hd, int row_stride, float theta) {
    return rope(dev, "ct_rope_backward", dinp, dout, B, T, nh, hd, row_stride, theta, -1);
}

ct_status ct_swiglu_forward(ct_device *dev, ct_view out, ct_view gate, ct_view up, size_t N) {
    NEED(N < (size_t)INT_MAX, "ct_swiglu_forward", "N too large");
    NEED(has(out) && has(gate) && has(up), "ct_swiglu_forward", "out, gate and up are required");
    int bf;
    VARIANT("ct_swiglu_forward", &bf, VIEWS(NV(out), NV(gate), NV(up)), NO_VIEWS);
    karg a[] = {KMEM(out), KMEM(gate), KMEM(up), KINT(N)};
    return ct__ops_launch(dev, "llama", "swiglu_forward", bf, N, 256, a, NARGS(a));
}

ct_status ct_swiglu_backward(ct_device *dev, ct_view dgate, ct_view dup, ct_view dout,
                             ct_view gate, ct_view up, size_t N) {
    NEED(N < (size_t)INT_MAX, "ct_swiglu_backward", "N too large");
    NEED(has(dgate) && has(dup) && has(dout) && has(gate) && has(up), "ct_swiglu_backward",
         "dgate, dup, dout, gate and up are required");
    int bf;
    VARIANT("ct_swiglu_backward", &bf, VIEWS(NV(dgate), NV(dup), NV(dout), NV(gate), NV(up)),
                NO_VIEWS);
    karg a[] = {KMEM(dgate), KMEM(dup), KMEM(dout), KMEM(gate), KMEM(up), KINT(N)};
    return ct__ops_launch(dev, "llama", "swiglu_backward", bf, N, 256, a, NARGS(a));
}

ct_status ct_embed_forward_vp(ct_device *dev, ct_view out, ct_view tokens, ct_view wte, int B,
                              int T, int C, int lo, int Vl) {
    NEED(dims_ok(B, T, C) && Vl > 0 && lo >= 0, "ct_embed_forward",
         "B, T, C and the rows held must be positive, lo >= 0");
    NEED(has(out) && has(tokens) && has(wte), "ct_embed_forward",
         "out, tokens and wte are required");
    int bf;
    VARIANT("ct_embed_forward", &bf, VIEWS(NV(out), NV(wte)), VIEWS(NV(tokens)));
    karg a[] = {KMEM(out), KMEM(tokens), KMEM(wte), KINT(B * T), KINT(C), KINT(lo), KINT(Vl)};
    return ct__ops_launch2(dev, "llama", "embed_forward", bf, (size_t)C, (size_t)B * T, 256, a,
                           NARGS(a));
}

ct_status ct_embed_forward(ct_device *dev, ct_view out, ct_view tokens, ct_view wte, int B, int T,
                           int C, int Vp) {
    return ct_embed_forward_vp(dev, out, tokens, wte, B, T, C, 0, Vp);
}

ct_status ct_embed_backward_vp(ct_device *dev, ct_view dwte, ct_view dout, ct_view tokens, int B,
                               int T, int C, int lo, int Vl) {
    NEED(dims_ok(B, T, C) && Vl > 0 && lo >= 0, "ct_embed_backward",
         "B, T, C and the rows held must be positive, lo >= 0");
    NEED(has(dwte) && has(dout) && has(tokens), "ct_embed_backward",
         "dwte, dout and tokens are required");
    int bf;
    VARIANT("ct_embed_backward", &bf, VIEWS(NV(dout)), VIEWS(NV(dwte), NV(tokens)));
    karg a[] = {KMEM(dwte), KMEM(dout), KMEM(tokens), KINT(B * T), KINT(C), KINT(lo), KINT(Vl)};
    return ct__ops_launch(dev, "llama", "embed_backward", bf, (size_t)C, 64, a, NARGS(a));
}

ct_status ct_embed_backward(ct_device *dev, ct_view dwte, ct_view dout, ct_view tokens, int B,
                            int T, int C, int Vp) {
    return ct_embed_backward_vp(dev, dwte, dout, tokens, B, T, C, 0, Vp);
}

static ct_status gqa(ct_device *dev, const char *op, const char *kernel, ct_view out, ct_view inp,
                     int B, int T, int NH, int NKV, int hd, size_t n) {
    NEED(dims_ok(B, T, NH) && NKV > 0 && hd > 0 && NH % NKV == 0, op,
         "B, T, the heads and the head size must be positive, NKV must divide NH");
    NEED(dims_ok(B, T, 3 * NH * hd), op, "B x T x 3C too large");
    NEED(has(out) && has(inp), op, "both tensors are required");
    int bf;
    VARIANT(op, &bf, VIEWS(NV(out), NV(inp)), NO_VIEWS);
    karg a[] = {KMEM(out), KMEM(inp), KINT(B * T), KINT(NH), KINT(NKV), KINT(hd)};
    return ct__ops_launch(dev, "llama", kernel, bf, n, 256, a, NARGS(a));
}

ct_status ct_gqa_expand_forward(ct_device *dev, ct_view out, ct_view inp, int B, int T, int NH,
                                int NKV, int hd) {
    return gqa(dev, "ct_gqa_expand_forward", "gqa_expand", out, inp, B, T, NH, NKV, hd,
               (size_t)B * T * 3 * NH * hd);
}

ct_status ct_gqa_expand_backward(ct_device *dev, ct_view dinp, ct_view dout, int B, int T, int NH,
                                 int NKV, int hd) {
    return gqa(dev, "ct_gqa_expand_backward", "gqa_reduce", dinp, dout, B, T, NH, NKV, hd,
               (size_t)B * T * (NH + 2 * NKV) * hd);
}
