/* ct_cl_impl.h - private contract between the files of cl/: the device struct and helpers.
 * Nothing outside cl/ includes this. */
#ifndef CT_CL_IMPL_H
#define CT_CL_IMPL_H

#include <pthread.h>

#include "ct_cl.h"

/* One built program, keyed by source pointer + options, with its kernels. */
typedef struct ct__kernel_entry {
    char name[64];
    cl_kernel kernel;
} ct__kernel_entry;

typedef struct ct__program_entry {
    const ct_cl_source *src;
    char *options;
    cl_program program;
    int nkernels, cap_kernels;
    ct__kernel_entry *kernels;
} ct__program_entry;

/* Every CLBlast call of the process holds the CLBlast lock (clblast.c: why). ct__clblast_lock:
 * exclusively, for a call that may store into CLBlast's caches other than a GEMM (overrides). */
void ct__clblast_lock(void);
void ct__clblast_device_open(void);  /* a context CLBlast may cache programs for */
void ct__clblast_device_close(void); /* the last one closed clears CLBlast's cache */
void ct__clblast_unlock(void);
/* A GEMM's shape as CLBlast's choice of routine may depend on it. */
typedef struct ct__gemm_key {
    int kind; /* 0: CLBlastSgemm, 1: CLBlastSgemmStridedBatched */
    int ta, tb;
    size_t m, n, k;
} ct__gemm_key;
#define CT__GEMM_SEEN_MAX 128
/* Around one CLBlast GEMM on d: begin takes the lock shared when this handle ran the shape
 * before, else exclusively (returns 1); end(exclusive as begin said, ok: the call succeeded)
 * remembers the shape and unlocks. */
int ct__clblast_gemm_begin(ct_device *d, const ct__gemm_key *k);
void ct__clblast_gemm_end(ct_device *d, const ct__gemm_key *k, int exclusive, int ok);

struct ct_device {
    ct_device_info info;
    int row_groups; /* resolved ct_device_opts.row_groups */
    cl_context ctx;
    cl_command_queue queue;
    ct_err err;

    /* memory accounting (bytes); the mutex guards it because buffers may be freed from any
     * thread even though a device is driven by one. */
    pthread_mutex_t mem_lock;
    uint64_t mem_current[CT_MEM__COUNT];
    uint64_t mem_peak[CT_MEM__COUNT];
    uint64_t mem_total_peak;
    uint64_t mem_cap;
    uint64_t max_alloc; /* the largest single buffer: the device's, or opts.max_alloc below it */
    int live_buffers;

    /* program cache */
    char cache_dir[1024]; /* "" = disk cache off */
    int nprograms, cap_programs;
    ct__program_entry *programs;
    ct_program_cache_stats cache_stats;
    void (*on_build)(void *arg, const char *program, int phase, double seconds);
    void *on_build_arg;

    char tuning_source[512];
    char tune_dir[1100]; /* where stored tuning results live ("" = none known) */

    /* GEMM paths (gemm_path.c): 0 = not checked yet, 1 = runs here, -1 = refused for gemm_why */
    int gemm_state[CT_GEMM_PATH__COUNT];
    char gemm_why[CT_GEMM_PATH__COUNT][768];

    /* the CLBlast GEMM shapes this handle has run in the CLBlast lock's current generation
     * (clblast.c); written under the lock held exclusively */
    unsigned long gemm_seen_gen;
    int gemm_nseen;
    ct__gemm_key gemm_seen[CT__GEMM_SEEN_MAX];
    ct_gemm_plan gemm_plan; /* which path each product of the ops takes (set by the engine) */
};

struct ct_buffer {
    ct_device *dev;
    cl_mem mem;
    size_t bytes;
    ct_mem_category cat;
    char name[64];
};

/* An enqueued command's completion. `what` names the command for messages ("read of buffer
 * 'grads' [0, 4096)"); it is written when the event is made, so a wait needs no other state. */
struct ct_event {
    cl_event ev; /* NULL until the enqueue succeeded */
    ct_device *dev;
    int extra; /* holders beyond the first (ct_event_share); atomic */
    char what[160];
};

/* Make the record for a command about to be enqueued, when the caller asked for one (out != NULL):
 * *e is NULL when out is NULL. Pass `*e ? &(*e)->ev : NULL` to OpenCL; on an enqueue failure
 * ct_event_release(*e); on success *out = *e. */
ct_status ct__event_new(ct_device *d, ct_event **out, ct_event **e, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* Record an OpenCL failure on the device (status.c): "what: CL_... (code)". Returns CT_ERR_OPENCL, or
 * CT_ERR_DEVICE_MEM for allocation failures. */
ct_status ct__cl_fail(ct_err *e, const char *file, int line, int code, const char *what, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
#define CT_CL_FAIL(e, code, ...) ct__cl_fail((e), __FILE__, __LINE__, (code), __VA_ARGS__)

/* Whether the allocation hook (alloc.c) fails this allocation. */
int ct__alloc_fails(ct_alloc_kind kind, size_t bytes);
/* Brackets allocations whose failure the caller survives by design (ct_alloc_failed says 2). */
void ct__alloc_benign_begin(void);
void ct__alloc_benign_end(void);

/* The embedded source cl/kernels/<name>.cl (program.c), or NULL. */
const ct_cl_source *ct__cl_kernel_source(const char *name);
/* Set arguments 0 .. n-1 of k: sizes[i] bytes at vals[i]; the error names the kernel. */
ct_status ct__kernel_args(ct_device *d, cl_kernel k, int n, const size_t *sizes,
                          const void *const *vals);

/* GEMM internals. ct__gemm_check: ta/tb, and every matrix of g fits its buffer, with A and B of
 * ab_bytes per element and C of c_bytes (gemm.c; the message names the matrix). */
ct_status ct__gemm_check(ct_device *d, const ct_gemm_desc *g, size_t ab_bytes, size_t c_bytes);
/* tile 0 of a bf16 path (gemm_common.c): its large block, bm x bn (tile 1), when that gives the
 * device at least two blocks per compute unit, else its small one (tile 2). */
int ct__gemm_pick_tile(const ct_device *d, const ct_gemm_desc *g, int bm, int bn);
/* The kernel `kernel` of cl/kernels/<source>.cl built with opts (once per device), and
 * CT_ERR_UNSUPPORTED unless the device runs it in work-groups of `threads`; path names it. */
ct_status ct__gemm_kernel(ct_device *d, const char *path, const char *source, const char *opts,
                          const char *kernel, size_t threads, cl_kernel *k);
/* Set the arguments every kernel GEMM takes (the list of gemm_mma.cl's kernel), in order
 * (gemm_common.c); chunk: A's and B's elements per 16 bytes (8 bf16, 4 fp32), for `vec`. */
ct_status ct__gemm_kernel_args(ct_device *d, cl_kernel k, const ct_gemm_desc *g, size_t chunk);
/* The paths' bodies: run assumes a checked path and checked arguments with m, n, k, batch >= 1.
 * check: CT_OK; CT_ERR_UNSUPPORTED with the reason in why (kept for the device); or another
 * status when the check could not be made (memory: ct__gemm_refusal), which is not kept. */
ct_status ct__gemm_refusal(ct_status st); /* st as a check returns it: memory stays, else refused */
ct_status ct__gemm_portable_check(ct_device *d, char *why, size_t len); /* builds the kernel */
ct_status ct__gemm_portable_run(ct_device *d, const ct_gemm_desc *g, ct_event **ev);
int ct__gemm_portable_tiles(void);
const char *ct__gemm_portable_tile_str(int tile);
/* emulated: the stand-in build of the mma kernel. check: the vendor rule (not for emulated) and
 * the probe; on refusal writes the reason to why. */
ct_status ct__gemm_mma_check(ct_device *d, int emulated, char *why, size_t len);
ct_status ct__gemm_mma_run(ct_device *d, const ct_gemm_desc *g, int emulated, ct_event **ev);
int ct__gemm_mma_tiles(void);
const char *ct__gemm_mma_tile_str(int tile);
/* gemm_mma_tf32.c: fp32 operands rounded to tf32 on the tensor cores (emulated: the stand-ins). */
ct_status ct__gemm_tf32_check(ct_device *d, int emulated, char *why, size_t len);
ct_status ct__gemm_tf32_run(ct_device *d, const ct_gemm_desc *g, int emulated, ct_event **ev);
int ct__gemm_tf32_tiles(void);
const char *ct__gemm_tf32_tile_str(int tile);

/* Apply stored/shipped tuning at device open (tune.c). */
ct_status ct__tune_apply_at_open(ct_device *dev, const char *tune_dir);

#endif /* CT_CL_IMPL_H */
