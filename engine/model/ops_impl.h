/* ops_impl.h - what the device ops' files share (not installed): kernel arguments and the
 * launch helpers of ops.c, used by ops.c and ops_attention.c. */
#ifndef CT_OPS_IMPL_H
#define CT_OPS_IMPL_H

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

/* The embedded engine source `file` (no ".cl"), or NULL. */
const ct_cl_source *ct__ops_find_source(const char *file);
/* The build options of an engine source's bf16 variant (store.clh); the fp32 variant has none. */
#define CT__BF16_OPTS "-D CT_BF16"
/* A product with bf16 A and B on the path the device's GEMM plan gives it (ct_gemm_plan_path:
 * the model's choice per shape, ct_gemm_plan_make at setup, which checked every path it names;
 * the portable kernel on a device no plan was set on). */
ct_status ct__ops_gemm_bf16(ct_device *dev, const ct_gemm_desc *g);
/* The same with fp32 operands and C for the batched products: CLBlast's strided-batched GEMM
 * (the call the attention always made), or the plan's path (--tf32). */
ct_status ct__ops_gemm_f32_batched(ct_device *dev, const ct_gemm_desc *g);

/* A kernel of the embedded engine sources by (file, kernel name) and variant (bf16 != 0: the
 * file built with CT__BF16_OPTS), from the device's cache. */
ct_status ct__ops_get_kernel(ct_device *dev, const char *file, const char *name, int bf16,
                             cl_kernel *k);
/* Launch `name` from `file` (variant bf16) over n work-items (1-D), work-group size `pref` or
 * less. */
ct_status ct__ops_launch(ct_device *dev, const char *file, const char *name, int bf16, size_t n,
                         size_t pref, const karg *args, int nargs);
/* 2-D launch: n0 x n1 work-items, work-groups of (<= pref0) x 1. */
ct_status ct__ops_launch2(ct_device *dev, const char *file, const char *name, int bf16, size_t n0,
                          size_t n1, size_t pref0, const karg *args, int nargs);
/* A work-group per row (or per chunk): ngroups groups of a power-of-two size <= 256. */
ct_status ct__ops_launch_groups(ct_device *dev, const char *file, const char *name, int bf16,
                                size_t ngroups, const karg *args, int nargs);
/* CT_ERR_ARG "op: what" on the device's error record. */
ct_status ct__ops_bad(ct_device *dev, const char *op, const char *what);

/* A view with its argument's name, for the storage check. */
typedef struct ct__named_view {
    const char *name;
    ct_view v;
} ct__named_view;
#define NV(v) {#v, (v)}
/* The one place an op's kernel variant is decided, from its views: every present view of `act`
 * (activations, their gradients, the working weights) must have the first one's storage, every
 * present view of `f32` (parameter gradients, statistics, losses, token ids) must be 4-byte:
 * else CT_ERR_ARG naming the argument. *bf16 = 1 when the act views are bf16; an op without a
 * bf16 variant (has_bf16 0) refuses them with CT_ERR_UNSUPPORTED. */
ct_status ct__ops_variant(ct_device *dev, const char *op, const ct__named_view *act, int nact,
                          const ct__named_view *f32, int nf32, int has_bf16, int *bf16);
/* VARIANT(op, &bf, VIEWS(act views), VIEWS(f32 views)) in a wrapper: decide, or return the
 * refusal. NO_BF16_YET: the same for an op with fp32 kernels only (its act views refused when
 * bf16, CT_ERR_UNSUPPORTED). NO_VIEWS: an empty class. */
#define VARIANT(op, bf, ACT, F32)                                                                  \
    do {                                                                                           \
        const ct__named_view act_[] = ACT, f32_[] = F32;                                           \
        ct_status vst_ =                                                                           \
            ct__ops_variant(dev, (op), act_, NARGS(act_), f32_, NARGS(f32_), 1, (bf));             \
        if (vst_ != CT_OK) return vst_;                                                            \
    } while (0)
#define NO_BF16_YET(op, ACT, F32)                                                                  \
    do {                                                                                           \
        int bf_;                                                                                   \
        const ct__named_view act_[] = ACT, f32_[] = F32;                                           \
        ct_status vst_ =                                                                           \
            ct__ops_variant(dev, (op), act_, NARGS(act_), f32_, NARGS(f32_), 0, &bf_);             \
        if (vst_ != CT_OK) return vst_;                                                            \
    } while (0)
#define NO_VIEWS {{"", {NULL, 0, CT_STORE_F32}}}
#define VIEWS(...) {__VA_ARGS__}

/* Shapes must be positive and every index the kernels compute must fit an int where they use one:
 * the ops whose kernels still index the whole tensor in 32 bits (tp.cl, moe.cl, the attention's
 * and the Llama ops': docs/LIMITS.md, "64-bit sizes"). */
static inline int dims_ok(long long a, long long b, long long c) {
    return a > 0 && b > 0 && c > 0 && a * b * c < (long long)INT_MAX;
}
/* The same for the ops whose kernels index rows in 64 bits (row * C in size_t): the rows a*b and
 * the row length c each fit an int (the kernels take them as int), the tensor any size. */
static inline int rows_ok(long long a, long long b, long long c) {
    return a > 0 && b > 0 && c > 0 && a < INT_MAX && b < INT_MAX && a * b < (long long)INT_MAX &&
           c < (long long)INT_MAX;
}
/* An element-wise kernel over n elements, enqueued in pieces of ct_launch_piece_max() (cl/): the
 * offsets at argument indices offs[0..noffs) advance by each piece's start, the count at index
 * cnt (cl_int or cl_ulong, by its size) is the piece's length. Every element is computed by the
 * same kernel as in one launch, so the results are bitwise those of one launch. */
ct_status ct__ops_launch_pieces(ct_device *dev, const char *file, const char *name, int bf16,
                                size_t n, size_t pref, const karg *args, int nargs,
                                const int *offs, int noffs, int cnt);

#define NEED(cond, op, what)                                  \
    do {                                                      \
        if (!(cond)) return ct__ops_bad(dev, (op), (what));   \
    } while (0)

#endif /* CT_OPS_IMPL_H */
