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
/* A kernel of the embedded engine sources by (file, kernel name), from the device's cache. */
ct_status ct__ops_get_kernel(ct_device *dev, const char *file, const char *name, cl_kernel *k);
/* Launch `name` from `file` over n work-items (1-D), work-group size `pref` or less. */
ct_status ct__ops_launch(ct_device *dev, const char *file, const char *name, size_t n, size_t pref,
                         const karg *args, int nargs);
/* 2-D launch: n0 x n1 work-items, work-groups of (<= pref0) x 1. */
ct_status ct__ops_launch2(ct_device *dev, const char *file, const char *name, size_t n0,
                          size_t n1, size_t pref0, const karg *args, int nargs);
/* A work-group per row (or per chunk): ngroups groups of a power-of-two size <= 256. */
ct_status ct__ops_launch_groups(ct_device *dev, const char *file, const char *name,
                                size_t ngroups, const karg *args, int nargs);
/* CT_ERR_ARG "op: what" on the device's error record. */
ct_status ct__ops_bad(ct_device *dev, const char *op, const char *what);

/* Shapes must be positive and every index the kernels compute must fit an int where they use one. */
static inline int dims_ok(long long a, long long b, long long c) {
    return a > 0 && b > 0 && c > 0 && a * b * c < (long long)INT_MAX;
}

#define NEED(cond, op, what)                                  \
    do {                                                      \
        if (!(cond)) return ct__ops_bad(dev, (op), (what));   \
    } while (0)

#endif /* CT_OPS_IMPL_H */
