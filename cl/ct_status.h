/* ct_status.h - the one status enum of cltrain, and the error record kept on handles.
 *
 * Every fallible function returns a ct_status. The detailed message (what failed, which tensor
 * or file, the foreign code from OpenCL / CLBlast / MPI, and a hint) lives in a ct_err owned by
 * the handle the call was made on, or passed in by the caller for functions without a handle.
 *
 *     ct_err err = {0};
 *     if (ct_device_list(&list, &n, &err) != CT_OK) fprintf(stderr, "%s\n", err.msg);
 */
#ifndef CT_STATUS_H
#define CT_STATUS_H

#include <stddef.h>

/* X(name, value, text) - the single list the enum and ct_status_str() are generated from. */
#define CT_STATUS_MAP(X)                                                      \
    X(CT_OK, 0, "ok")                                                         \
    X(CT_ERR_ARG, 1, "invalid argument")                                      \
    X(CT_ERR_NOMEM, 2, "out of host memory")                                  \
    X(CT_ERR_DEVICE_MEM, 3, "out of device memory or over the memory cap")    \
    X(CT_ERR_OPENCL, 4, "OpenCL error")                                       \
    X(CT_ERR_CLBLAST, 5, "CLBlast error")                                     \
    X(CT_ERR_BUILD, 6, "OpenCL program build failed")                         \
    X(CT_ERR_NOT_FOUND, 7, "not found")                                       \
    X(CT_ERR_IO, 8, "file input/output error")                                \
    X(CT_ERR_FORMAT, 9, "malformed file or data")                             \
    X(CT_ERR_MPI, 10, "MPI error")                                            \
    X(CT_ERR_UNSUPPORTED, 11, "unsupported configuration")                    \
    X(CT_ERR_MISMATCH, 12, "workers disagree (counts, layouts or arguments)") \
    X(CT_ERR_STATE, 13, "call made in the wrong state")                       \
    X(CT_ERR_NONFINITE, 14, "loss or gradients not finite (inf or NaN)")         \
    X(CT_ERR_TIMEOUT, 15, "a peer did not answer in time (CT_COMM_TIMEOUT)")

typedef enum ct_status {
#define CT__STATUS_ENUM(name, value, text) name = value,
    CT_STATUS_MAP(CT__STATUS_ENUM)
#undef CT__STATUS_ENUM
} ct_status;

/* Short fixed text for a status ("out of device memory ..."); never NULL. */
const char *ct_status_str(ct_status s);
/* The enumerator's own name ("CT_ERR_DEVICE_MEM"); never NULL. */
const char *ct_status_name(ct_status s);

/* The detailed error record. `msg` holds the most recent failure's full message. */
#define CT_ERR_MSG_MAX 2048
typedef struct ct_err {
    ct_status status;
    const char *file; /* where it was recorded */
    int line;
    char msg[CT_ERR_MSG_MAX];
} ct_err;

/* Record an error and return `s`. `e` may be NULL (then only the status is returned). */
ct_status ct__err_set(ct_err *e, ct_status s, const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
#define CT_ERR(e, s, ...) ct__err_set((e), (s), __FILE__, __LINE__, __VA_ARGS__)

/* Clear an error record. */
void ct_err_clear(ct_err *e);

/* Evaluate a ct_status expression; on failure store it in `st` and jump to `cleanup`.
 * Functions using it declare `ct_status st = CT_OK;` and a `cleanup:` label. */
#define CT_CHECK(expr)                 \
    do {                               \
        st = (expr);                   \
        if (st != CT_OK) goto cleanup; \
    } while (0)

/* Names of foreign codes, for messages: "CL_OUT_OF_RESOURCES", "CLBlastInvalidLeadDimA". */
const char *ct_cl_error_name(int cl_code);
const char *ct_clblast_error_name(int clblast_code);

#endif /* CT_STATUS_H */
