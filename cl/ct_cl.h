/* ct_cl.h - cltrain's device layer: OpenCL and CLBlast only, nothing of models or MPI.
 *
 * Discovery and selection of devices, one context + in-order queue per device, buffers counted by
 * memory category with a per-device cap, programs built once per device and cached on disk, and
 * the GEMM every matmul goes through (row-major): CLBlast's fp32, and the bf16 paths beside it
 * (a portable kernel, NVIDIA tensor cores) behind ct_gemm_run, with bf16 conversion. Per-device
 * CLBlast parameters (found by ct_tune or shipped in tune/) are applied once, when a device is
 * opened.
 *
 * A device handle is meant to be driven by one thread at a time (a "worker"); several handles may
 * be used concurrently from several OpenMP threads.
 *
 *     ct_err err = {0};
 *     ct_device_info *list = NULL; int n = 0, pick[1], npick = 0;
 *     if (ct_device_list(&list, &n, &err) ||
 *         ct_device_select(list, n, NULL, 1, pick, &npick, &err)) { puts(err.msg); return 2; }
 *     ct_device *dev = NULL;
 *     ct_device_opts o = ct_device_opts_default();
 *     if (ct_device_open(&dev, &list[pick[0]], &o, &err)) { puts(err.msg); return 2; }
 *     ct_buffer *a = NULL;
 *     if (ct_buffer_alloc(dev, CT_MEM_PARAMS, "wte", 1 << 20, &a)) puts(ct_device_errmsg(dev));
 *     ...
 *     ct_buffer_free(a); ct_device_free(dev); ct_device_list_free(list);
 *
 * Asynchronous work returns a ct_event (or nothing, when the out-pointer is NULL):
 *
 *     ct_event *ev = NULL;
 *     if (ct_buffer_read_async(a, 0, bytes, host, &ev) || ct_device_flush(dev)) ...;
 *     ... other host work ...
 *     if (ct_event_wait_release(ev)) puts(ct_device_errmsg(dev));   -- host now holds the data
 */
#ifndef CT_CL_H
#define CT_CL_H

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdint.h>
#include <stddef.h>

#include "ct_alloc.h"
#include "ct_bf16.h"
#include "ct_file.h"
#include "ct_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- discovery and selection */

typedef struct ct_device_info {
    int index;          /* flat index over all platforms, as ct_devices prints it */
    int platform_index; /* P in "P:D" */
    int device_index;   /* D in "P:D" */
    cl_platform_id platform_id;
    cl_device_id device_id;
    cl_device_type type;
    char platform[128];
    char platform_version[128];
    char vendor[128];
    char name[256];
    char version[128];        /* CL_DEVICE_VERSION */
    char driver_version[128]; /* CL_DRIVER_VERSION */
    unsigned compute_units;
    unsigned clock_mhz;
    uint64_t global_mem_bytes;
    uint64_t max_alloc_bytes;
    uint64_t local_mem_bytes;
    int fp16, fp64;
    int nv_cc_major, nv_cc_minor; /* NVIDIA compute capability (cl_nv_device_attribute_query);
                                     0.0 on other devices */
} ct_device_info;

/* Every device of every platform, in platform order. *out is freed with ct_device_list_free.
 * No platform or no device is an error (CT_ERR_NOT_FOUND) with a hint. */
ct_status ct_device_list(ct_device_info **out, int *n, ct_err *err);
void ct_device_list_free(ct_device_info *list);

/* "gpu", "cpu", "accelerator", "other". */
const char *ct_device_type_str(cl_device_type t);

/* Pick `want` devices by a specification:
 *   NULL or "" or "auto"  the best type present (gpu, then accelerator, then cpu), in index order
 *   "3"                   flat index 3;        "0:1"  platform 0, device 1
 *   "gpu" "cpu" "accelerator"  by type;        any other text: devices whose name contains it
 *   "0,2" or "gpu,cpu"    a comma list; each item yields its matches in order
 * The first `want` matches go to idx[]; fewer than `want` matches, or a spec matching nothing,
 * is a CT_ERR_NOT_FOUND naming the spec and listing what exists. want <= 0 means "all matches";
 * then idx must have room for n entries. */
ct_status ct_device_select(const ct_device_info *list, int n, const char *spec, int want, int *idx,
                           int *nidx, ct_err *err);

/* The CT_DEVICE environment variable (the one place it is read), or NULL. */
const char *ct_device_spec_env(void);

/* ---------------------------------------------------------------- devices */

typedef struct ct_device ct_device;

typedef struct ct_device_opts {
    int profiling;         /* queue created with CL_QUEUE_PROFILING_ENABLE */
    uint64_t mem_cap;      /* bytes; 0 = the device's global memory */
    uint64_t max_alloc;    /* the largest single buffer in bytes; 0 (or more than the device's
                              CL_DEVICE_MAX_MEM_ALLOC_SIZE) = the device's. Lower it for a driver
                              that fails below its stated limit, or to test arenas in pieces */
    int apply_tuning;      /* apply stored/shipped CLBlast parameters at open (default 1) */
    const char *cache_dir; /* program binary cache; NULL = $XDG_CACHE_HOME/cltrain or
                              ~/.cache/cltrain; "" disables the disk cache */
    const char *tune_dir;  /* stored tuning results; NULL = <cache_dir>/tune */
    int row_groups;        /* reductions along a row (LayerNorm, cross-entropy, norms, the
                              attention scores' softmax and its backward): 1 = a
                              work-group per row (GPUs: many rows' worth of threads), 0 = a
                              work-item per row (CPUs: a core walks a row with SIMD), -1 = by
                              device type (the default) */
    cl_context context;    /* NULL: a context of its own; else open in this context (retained),
                              which must hold the device: workers sharing one device then
                              share memory objects and events (device-resident collectives) */
    /* Called, when set, around each program this device has to build from source (found in
     * neither its memory nor its disk cache): phase 0 just before the build, phase 1 after a
     * successful one with the seconds it took. On the thread that asked for the program; what
     * to say is the caller's (the library prints nothing). */
    void (*on_build)(void *arg, const char *program, int phase, double seconds);
    void *on_build_arg;
} ct_device_opts;

ct_device_opts ct_device_opts_default(void);

ct_status ct_device_open(ct_device **out, const ct_device_info *info, const ct_device_opts *opts,
                         ct_err *err);
/* Open in *shared (the context of other workers on this device) when it is set; otherwise in a
 * new context, which *shared then also holds (retained: ct_context_release it when no worker
 * will open the device again). Callers sharing *shared serialise their calls. */
ct_status ct_device_open_shared(ct_device **out, const ct_device_info *info,
                                const ct_device_opts *opts, cl_context *shared, ct_err *err);
void ct_context_release(cl_context ctx); /* NULL: no-op */
void ct_device_free(ct_device *dev);

const ct_device_info *ct_device_get_info(const ct_device *dev);
/* Whether row reductions use a work-group per row on this device (ct_device_opts.row_groups,
 * resolved at open). */
int ct_device_row_groups(const ct_device *dev);
cl_context ct_device_context(const ct_device *dev);
cl_command_queue ct_device_queue(const ct_device *dev);
cl_device_id ct_device_id(const ct_device *dev);
/* The last error recorded on this device (message with file:line and foreign code). */
const char *ct_device_errmsg(const ct_device *dev);
ct_err *ct_device_err(ct_device *dev);
/* Block until everything enqueued on the device has completed. */
ct_status ct_device_finish(ct_device *dev);
/* Submit what is enqueued without waiting (clFlush): commands may otherwise sit in the driver
 * until a wait. Call after a batch of asynchronous work the host will not wait for at once. */
ct_status ct_device_flush(ct_device *dev);
/* Where the tuning applied at open came from: "stored <path>", "shipped <entry>", "CLBlast
 * built-in parameters (<why>), stored <path>" (ct_tune found nothing better), "none" or
 * "disabled (CLBlast's built-in parameters)". */
const char *ct_device_tuning_source(const ct_device *dev);
/* The folder stored tuning results of this device live in (opts.tune_dir, else <cache_dir>/tune;
 * "" when none is known): CLBlast sets and the records of ct_tune_record_*. */
const char *ct_device_tune_dir(const ct_device *dev);

/* ---------------------------------------------------------------- memory */

typedef enum ct_mem_category {
    CT_MEM_PARAMS = 0,
    CT_MEM_GRADS,
    CT_MEM_OPTIMIZER,
    CT_MEM_ACTIVATIONS,
    CT_MEM_WORKSPACE,
    CT_MEM_COMM,
    CT_MEM__COUNT
} ct_mem_category;

const char *ct_mem_category_str(ct_mem_category c); /* "params", "grads", ... */

typedef struct ct_mem_stats {
    uint64_t current[CT_MEM__COUNT]; /* bytes live now, per category */
    uint64_t peak[CT_MEM__COUNT];    /* highest `current` seen, per category */
    uint64_t total_current, total_peak;
    uint64_t cap; /* the per-device cap in force */
    int live_buffers;
} ct_mem_stats;

void ct_device_mem_stats(const ct_device *dev, ct_mem_stats *out);
void ct_device_mem_reset_peak(ct_device *dev);

typedef struct ct_buffer ct_buffer;

/* Allocate `bytes` on the device, counted under `cat`, named for messages. Fails cleanly (no
 * crash, nothing allocated) with CT_ERR_DEVICE_MEM when `bytes` exceeds the device's max
 * allocation, the cap, or the OpenCL allocation fails; the message names the tensor, the bytes
 * asked and what is in use. Contents are zeroed. */
ct_status ct_buffer_alloc(ct_device *dev, ct_mem_category cat, const char *name, size_t bytes,
                          ct_buffer **out);
void ct_buffer_free(ct_buffer *b);
cl_mem ct_buffer_mem(const ct_buffer *b);
size_t ct_buffer_bytes(const ct_buffer *b);
const char *ct_buffer_name(const ct_buffer *b);
ct_device *ct_buffer_device(const ct_buffer *b);

/* The largest single buffer ct_buffer_alloc accepts on this device (ct_device_opts.max_alloc). */
uint64_t ct_device_max_alloc(const ct_device *dev);

/* An arena: one logical allocation of `bytes` held as consecutive buffers ("pieces"), none above
 * the device's largest single allocation, for tensors that together exceed it (OpenCL caps one
 * buffer at CL_DEVICE_MAX_MEM_ALLOC_SIZE, often a quarter of the device's memory). The arena
 * is made of `nparts` indivisible parts, part i starting at byte parts[i] (parts[0] = 0,
 * increasing, each < bytes) and ending where the next starts: a piece holds whole parts, as many
 * as fit, so a tensor that lies within one part lies within one piece. One piece when the whole
 * fits. A part larger than the limit is refused (CT_ERR_DEVICE_MEM) naming it (names[i], or its
 * offset when names is NULL); a failure leaves nothing allocated. Contents are zeroed. */
typedef struct ct_arena ct_arena;
typedef struct ct_event ct_event; /* below */
ct_status ct_arena_alloc(ct_device *dev, ct_mem_category cat, const char *name, size_t bytes,
                         const size_t *parts, const char *const *names, size_t nparts,
                         ct_arena **out);
void ct_arena_free(ct_arena *a);
size_t ct_arena_bytes(const ct_arena *a);
int ct_arena_npieces(const ct_arena *a);
size_t ct_arena_largest_piece(const ct_arena *a); /* bytes */
/* The piece holding byte `off` of the arena and off's position in it (off == bytes: the end of
 * the last piece). NULL when off > bytes. */
ct_buffer *ct_arena_at(const ct_arena *a, size_t off, size_t *in_piece);
/* The piece whose memory object is `mem`, or NULL. */
ct_buffer *ct_arena_piece_of(const ct_arena *a, cl_mem mem);
/* Bytes from byte `off` to the end of off's piece: how far a view starting there may reach
 * (0 at the arena's end or beyond). */
size_t ct_arena_span(const ct_arena *a, size_t off);
/* Host copies and zeroing of [off, off + bytes) of the arena, one command per piece the range
 * crosses; a range outside the arena is CT_ERR_ARG. The non-blocking forms' event (when ev is
 * non-NULL) is the last piece's command's: on the device's in-order queue it completes after
 * the others (see the events below). */
ct_status ct_arena_read(const ct_arena *a, size_t off, void *dst, size_t bytes);
ct_status ct_arena_write(ct_arena *a, size_t off, const void *src, size_t bytes);
ct_status ct_arena_zero(ct_arena *a, size_t off, size_t bytes);
ct_status ct_arena_read_async(const ct_arena *a, size_t off, size_t bytes, void *dst,
                              ct_event **ev);
ct_status ct_arena_write_async(ct_arena *a, size_t off, size_t bytes, const void *src,
                               ct_event **ev);

/* Blocking host <-> device copies of [off, off+bytes). */
ct_status ct_buffer_write(ct_buffer *b, size_t off, const void *src, size_t bytes);
ct_status ct_buffer_read(const ct_buffer *b, size_t off, void *dst, size_t bytes);
ct_status ct_buffer_zero(ct_buffer *b, size_t off, size_t bytes);
/* Map [off, off+bytes) for host access (blocking); unmap when done. flags: CL_MAP_READ/WRITE. */
ct_status ct_buffer_map(ct_buffer *b, size_t off, size_t bytes, cl_map_flags flags, void **ptr);
ct_status ct_buffer_unmap(ct_buffer *b, void *ptr);

/* ---------------------------------------------------------------- asynchronous work and events */

/* The completion of one enqueued command (a copy, a map, a kernel, a GEMM, a marker). Every
 * `ct_event **ev` argument may be NULL: then no event is made, and the caller promises not to
 * depend on the command's completion (nor touch the host memory it reads or writes) before a
 * later ct_device_finish, or a wait on a later command of the same in-order queue. With `ev`
 * non-NULL, *ev is set on success and NULL on failure; the caller releases it, once.
 * Commands are enqueued, not flushed: after a batch, ct_device_flush (waiting also flushes). */
typedef struct ct_event ct_event;

/* Block until the command has completed. A command that failed on the device is an error naming
 * what it was ("read of buffer 'grads' [0, 4096)") and the CL error, recorded on the event's
 * device (ct_device_errmsg). Several events may be waited in any order, one event more than once.
 * Does not release. NULL: CT_OK. */
ct_status ct_event_wait(ct_event *ev);
/* The same, with the message recorded in `err` instead: for a thread that is not the one
 * driving the device (a communication thread), so the two never write one record at once. */
ct_status ct_event_wait_err(ct_event *ev, ct_err *err);
/* Release (NULL is a no-op). Does not wait: the command still runs. */
void ct_event_release(ct_event *ev);
/* ct_event_wait, then ct_event_release whatever the wait returned. */
ct_status ct_event_wait_release(ct_event *ev);
/* n more holders of the event (threads that will each wait on it or queue behind it, then
 * ct_event_release it): the record and its cl_event live until the last release. Call before
 * handing the event to the others. */
void ct_event_share(ct_event *ev, int n);
/* Commands enqueued on dev after this wait for the n events (clEnqueueBarrierWithWaitList);
 * the events may be other queues' of the same context (another worker's, same device), which
 * must have been flushed. The host does not wait. */
ct_status ct_device_wait_events(ct_device *dev, ct_event *const *evs, int n);
/* Without blocking: *done = 1 once the command has completed or failed (then a wait reports it). */
ct_status ct_event_query(ct_event *ev, int *done);
/* Device timestamps of a completed command in ns (clGetEventProfilingInfo START/END), on a device
 * opened with opts.profiling; otherwise CT_ERR_STATE. */
ct_status ct_event_times(ct_event *ev, uint64_t *start_ns, uint64_t *end_ns);
/* An event that completes when everything enqueued before it has (clEnqueueMarkerWithWaitList):
 * waiting on it waits for the device up to this point, without a clFinish. */
ct_status ct_device_marker(ct_device *dev, ct_event **ev);

/* Non-blocking host <-> device copies of [off, off+bytes). The host memory must stay untouched
 * (read_async: not read; write_async: not written or freed) until *ev has completed. */
ct_status ct_buffer_read_async(const ct_buffer *b, size_t off, size_t bytes, void *dst,
                               ct_event **ev);
ct_status ct_buffer_write_async(ct_buffer *b, size_t off, size_t bytes, const void *src,
                                ct_event **ev);
/* Device-side copy of `bytes` from [soff, ...) of src to [doff, ...) of dst, enqueued (completes
 * in queue order; a marker after it gives an event). Both buffers belong to one device; ranges of
 * one buffer must not overlap. */
ct_status ct_buffer_copy(ct_buffer *src, size_t soff, ct_buffer *dst, size_t doff, size_t bytes);
/* The same on raw memory objects of `dev` (the engine's views: cl_mem + offset), offsets in
 * bytes; ranges are checked against the objects' sizes. */
ct_status ct_mem_copy(ct_device *dev, cl_mem src, size_t soff, cl_mem dst, size_t doff,
                      size_t bytes);
/* The most work-items one launch of an element-wise kernel covers (the engine's element-wise ops,
 * the optimizer's, the bf16 conversions): a longer range is enqueued as pieces of this many, each
 * at its own element offset (the kernels' offsets are 64-bit; the count and index inside a piece
 * fit 32 bits). 2^30, or CT_TEST_MAX_LAUNCH when set to a positive count (a test hook, read once
 * per process: the splitting paths run at tiny sizes). */
size_t ct_launch_piece_max(void);
/* Map for host access without blocking: *ptr may be used once *ev has completed. The unmap's
 * event completes when the device may use the memory again. Both flush. */
ct_status ct_buffer_map_async(ct_buffer *b, size_t off, size_t bytes, cl_map_flags flags,
                              void **ptr, ct_event **ev);
ct_status ct_buffer_unmap_async(ct_buffer *b, void *ptr, ct_event **ev);

/* ---------------------------------------------------------------- time */

/* Monotonic wall clock in seconds (CLOCK_MONOTONIC): the one clock programs time work with. */
double ct_time_now(void);

/* ---------------------------------------------------------------- programs and kernels */

/* One embedded OpenCL C source (generated by CMake from a .cl file). */
typedef struct ct_cl_source {
    const char *name; /* file name without extension, e.g. "layernorm" */
    const char *text;
    size_t len;
} ct_cl_source;

/* Build (or fetch from the in-memory or disk cache) `src` with `options` for this device. The
 * program stays owned by the device. A compile error returns CT_ERR_BUILD with the build log in
 * the device's message. */
ct_status ct_program_get(ct_device *dev, const ct_cl_source *src, const char *options,
                         cl_program *out);
/* A kernel of a program from ct_program_get, created once per device and reused. */
ct_status ct_kernel_get(ct_device *dev, const ct_cl_source *src, const char *options,
                        const char *kernel, cl_kernel *out);

/* Counters of the program cache of this device since open. */
typedef struct ct_program_cache_stats {
    int memory_hits, disk_hits, builds, disk_rejects, disk_writes;
} ct_program_cache_stats;
void ct_device_program_cache_stats(const ct_device *dev, ct_program_cache_stats *out);
/* The file a program is cached under (for tests and diagnostics); "" when the cache is off. */
ct_status ct_program_cache_path(ct_device *dev, const ct_cl_source *src, const char *options,
                                char *path, size_t len);

/* Set kernel arguments and enqueue: helpers that turn cl errors into messages. */
ct_status ct_kernel_set_arg(ct_device *dev, cl_kernel k, cl_uint i, size_t size, const void *v);
ct_status ct_kernel_launch(ct_device *dev, cl_kernel k, cl_uint dims, const size_t *global,
                           const size_t *local, ct_event **ev);
/* The largest work-group this kernel can be launched with on this device
 * (CL_KERNEL_WORK_GROUP_SIZE); *out >= 1 on success. */
ct_status ct_kernel_max_work_group(ct_device *dev, cl_kernel k, size_t *out);

/* ---------------------------------------------------------------- GEMM (CLBlast) */

/* Row-major C = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T (ta, tb = 0 or 1).
 * op(A) is m x k, op(B) is k x n, C is m x n. Offsets and leading dimensions in floats.
 * Enqueued on the device's queue; `ev` (may be NULL) receives the completion event. */
ct_status ct_gemm(ct_device *dev, int ta, int tb, size_t m, size_t n, size_t k, float alpha,
                  cl_mem a, size_t a_off, size_t lda, cl_mem b, size_t b_off, size_t ldb,
                  float beta, cl_mem c, size_t c_off, size_t ldc, ct_event **ev);

/* `batch` independent GEMMs; matrix i of A starts at a_off + i * a_stride (floats), etc. m, n or
 * batch 0: nothing to do (an event if asked). */
ct_status ct_gemm_strided_batched(ct_device *dev, int ta, int tb, size_t m, size_t n, size_t k,
                                  float alpha, cl_mem a, size_t a_off, size_t lda, size_t a_stride,
                                  cl_mem b, size_t b_off, size_t ldb, size_t b_stride, float beta,
                                  cl_mem c, size_t c_off, size_t ldc, size_t c_stride, size_t batch,
                                  ct_event **ev);

/* ---------------------------------------------------------------- bf16 */

/* The host pair, ct_bf16_from_f32 and ct_bf16_to_f32, and the format's rules: ct_bf16.h. */
/* The same on the device for n values: src fp32 -> dst bf16 and src bf16 -> dst fp32, offsets in
 * elements of each buffer's type. Enqueued; `ev` as everywhere. */
ct_status ct_bf16_from_f32_enqueue(ct_device *dev, cl_mem src, size_t src_off, cl_mem dst,
                                   size_t dst_off, size_t n, ct_event **ev);
ct_status ct_bf16_to_f32_enqueue(ct_device *dev, cl_mem src, size_t src_off, cl_mem dst,
                                 size_t dst_off, size_t n, ct_event **ev);
/* fp32 -> bf16 by stochastic rounding (ct_bf16_from_f32_stochastic's rule and bits): element i
 * of the n takes index first + i (the caller's own numbering, e.g. a flat parameter index). */
ct_status ct_bf16_from_f32_stochastic_enqueue(ct_device *dev, cl_mem src, size_t src_off,
                                              cl_mem dst, size_t dst_off, size_t n, uint64_t seed,
                                              uint64_t step, uint64_t first, ct_event **ev);

/* ---------------------------------------------------------------- GEMM paths */

/* Every GEMM path behind one call, ct_gemm_run(dev, path, desc, ev):
 *
 *     ct_gemm_desc g = {.m = T, .n = 3 * C, .k = C, .batch = 1, .tb = 1, .alpha = 1,
 *                       .a = x, .lda = C, .b = w, .ldb = C, .c = y, .ldc = 3 * C};
 *     if (ct_gemm_path_check(dev, CT_GEMM_MMA) != CT_OK) log(ct_device_errmsg(dev)); -- why not
 *     else if (ct_gemm_run(dev, CT_GEMM_MMA, &g, NULL)) ...
 *
 * Paths (a vendor's matrix-unit kernels sit beside CT_GEMM_MMA as further values, each with its
 * enabling rule and probe, and its kernel source runnable through portable stand-ins):
 *   CT_GEMM_CLBLAST       fp32 operands and C (CLBlast: the reference; ct_gemm)
 *   CT_GEMM_PORTABLE      bf16 operands, fp32 accumulation, C fp32 or bf16: plain OpenCL C for
 *                         any device (cl/kernels/gemm_bf16.cl)
 *   CT_GEMM_MMA           the same on NVIDIA tensor cores: mma.sync m16n8k16 through inline PTX
 *                         (cl/kernels/gemm_mma.cl). Only on an NVIDIA device of compute capability
 *                         8.0 or more whose probe (the kernel built and run on a known pair of
 *                         matrices in all four transposes, the product checked exactly) passes
 *   CT_GEMM_MMA_EMULATED  CT_GEMM_MMA's kernel source with portable stand-ins for the warp
 *                         instructions (mma, ldmatrix, cp.async): any device, slow; it runs every
 *                         index, tile and edge path of the mma kernel where no tensor core is
 *   CT_GEMM_MMA_TF32      fp32 operands and C on NVIDIA tensor cores: each element of A and B
 *                         rounded to tf32 (cvt.rna.tf32.f32: 10-bit mantissa, to nearest, ties
 *                         away from zero), mma.sync m16n8k8, fp32 accumulation
 *                         (cl/kernels/gemm_mma_tf32.cl); the vendor rule and a probe as
 *                         CT_GEMM_MMA's. For --tf32 only: tf32 is not fp32
 *   CT_GEMM_MMA_TF32_EMULATED  its source on the stand-ins, the rounding included: any device */
typedef enum ct_gemm_path {
    CT_GEMM_CLBLAST = 0,
    CT_GEMM_PORTABLE,
    CT_GEMM_MMA,
    CT_GEMM_MMA_EMULATED,
    CT_GEMM_MMA_TF32,
    CT_GEMM_MMA_TF32_EMULATED,
    CT_GEMM_PATH__COUNT
} ct_gemm_path;

/* "clblast", "portable", "mma", "mma-emulated", "mma-tf32", "mma-tf32-emulated"; "?" for a
 * value out of range. */
const char *ct_gemm_path_str(ct_gemm_path p);
/* The inverse of ct_gemm_path_str; an unknown name is CT_ERR_ARG listing the names. */
ct_status ct_gemm_path_parse(const char *s, ct_gemm_path *out, ct_err *err);
/* 1 when the path's A and B are bf16 (all but CT_GEMM_CLBLAST and the tf32 paths). */
int ct_gemm_path_bf16(ct_gemm_path p);

/* One GEMM: row-major C = alpha * op(A) * op(B) + beta * C for each of `batch` matrices, op(X) =
 * X^T when tX = 1; op(A) is m x k, op(B) k x n, C m x n. Offsets, leading dimensions and strides
 * (matrix i of A starts at a_off + i * a_stride) count elements of the buffer's type: fp32 for
 * CT_GEMM_CLBLAST, bf16 for A and B on the other paths, C's type by c_bf16. beta == 0 does not
 * read C (a NaN there does not spread). A plain struct: zero what is not used (batch is always
 * used: 1 for a single product). */
typedef struct ct_gemm_desc {
    int ta, tb;
    size_t m, n, k;
    size_t batch; /* how many products: 1 for one; 0 is nothing to do, as in
                     ct_gemm_strided_batched (so a desc left zeroed computes nothing) */
    float alpha, beta;
    cl_mem a;
    size_t a_off, lda, a_stride;
    cl_mem b;
    size_t b_off, ldb, b_stride;
    cl_mem c;
    size_t c_off, ldc, c_stride;
    int c_bf16; /* C held as bf16 (read for beta, written rounded to nearest even): bf16 paths */
    int tile;   /* 0: the path picks its block shape from the shape of the product; i >= 1: the
                   path's i-th (ct_gemm_path_tiles; tests and measurements) */
} ct_gemm_desc;

/* Whether `path` runs on this device: CT_OK, or CT_ERR_UNSUPPORTED with the reason on the
 * device's message ("the mma path needs an NVIDIA device of compute capability 8.0 or more; this
 * device is ..."); both answers are kept for the device. The one place a path is checked: call it
 * at setup, for every path a run will use (CT_GEMM_CLBLAST included); ct_gemm_run refuses a path
 * not checked yet. The first check may build the path's kernels and run its probe (blocking,
 * seconds on a cold program cache). A probe runs in a context of its own on the same device, so
 * a kernel that faults there (which on some drivers ruins its context for good) leaves this
 * device's context as it was; only when it passed are the kernels built here (from the program
 * cache). A check that could not be made (host or device memory: CT_ERR_NOMEM,
 * CT_ERR_DEVICE_MEM) returns that status and is not kept: the next call checks again. */
ct_status ct_gemm_path_check(ct_device *dev, ct_gemm_path path);
/* Enqueue the GEMM on `path`: CT_ERR_STATE when ct_gemm_path_check has not answered for the path
 * yet, CT_ERR_UNSUPPORTED with its reason when it refused it. Arguments are checked as ct_gemm's
 * are (CT_ERR_ARG naming the matrix). m, n or batch 0: nothing to do on every path, nothing is
 * read or written (an event if asked), as ct_gemm_strided_batched does with batch 0; k = 0 is
 * refused. */
ct_status ct_gemm_run(ct_device *dev, ct_gemm_path path, const ct_gemm_desc *g, ct_event **ev);
/* How many block shapes the path has (desc.tile 1 .. n), and a line describing shape i
 * ("128x128x32, 8 warps of 64x32, 2 stages, 40960 B local (47104 B emulated)"); NULL out of
 * range. */
int ct_gemm_path_tiles(ct_gemm_path path);
const char *ct_gemm_tile_str(ct_gemm_path path, int tile);
/* The vendor rule of CT_GEMM_MMA alone, from what the device reports (no probe): 1 when `info`
 * is an NVIDIA device of compute capability 8.0 or more; else 0 with the reason in why. */
int ct_gemm_mma_eligible(const ct_device_info *info, char *why, size_t len);

/* Which path each GEMM of a device's ops takes: the engine decides it (ct_gemm_plan_make in
 * engine/model/gemm_tune.c, per shape of the model, measured or asked for) and sets it on the
 * device once at setup; the ops read it for every product they enqueue. cl/ only keeps it.
 * An entry names a product by its transposes and sizes, 0 in m, n, k or batch matching any
 * (a linear layer's rows B*T change with the micro-batch; the attention's causal row blocks
 * change m and n); the first entry whose operand type (ct_gemm_path_bf16) and shape match wins,
 * else the default of the operand type. Every path named must have passed ct_gemm_path_check on
 * the device (the maker checks them). */
#define CT_GEMM_PLAN_MAX 24
typedef struct ct_gemm_choice {
    int ta, tb;
    size_t m, n, k, batch; /* 0: any */
    ct_gemm_path path;
    double gflops;         /* the rate measured when it was chosen; 0: not measured */
} ct_gemm_choice;
typedef struct ct_gemm_plan {
    ct_gemm_path fp32, bf16; /* a product no entry names: CT_GEMM_CLBLAST, CT_GEMM_PORTABLE */
    int n;
    ct_gemm_choice shapes[CT_GEMM_PLAN_MAX];
} ct_gemm_plan;
/* The plan of a device nothing was set on: fp32 on CLBlast, bf16 on the portable kernel. */
ct_gemm_plan ct_gemm_plan_default(void);
/* The path of product g with bf16 (1) or fp32 (0) operands under plan p. */
ct_gemm_path ct_gemm_plan_path(const ct_gemm_plan *p, const ct_gemm_desc *g, int bf16);
/* Set (a copy; NULL: the default) and read the device's plan. Set it from the device's own
 * thread, before the ops that read it are enqueued. */
void ct_device_set_gemm_plan(ct_device *dev, const ct_gemm_plan *p);
const ct_gemm_plan *ct_device_gemm_plan(const ct_device *dev);

/* ---------------------------------------------------------------- CLBlast tuning */

/* One CLBlast kernel's parameters, e.g. kernel "Xgemm" with MWG=128, NWG=128, ... */
#define CT_TUNE_MAX_PARAMS 24
#define CT_TUNE_MAX_KERNELS 8
typedef struct ct_tune_kernel {
    char kernel[32];
    int n;
    char names[CT_TUNE_MAX_PARAMS][24];
    size_t values[CT_TUNE_MAX_PARAMS];
} ct_tune_kernel;

/* A full parameter set for one device: what ct_tune stores and programs apply at open. */
typedef struct ct_tune_set {
    char device[256];         /* device name it was found on; a shipped set may use a pattern */
    char driver[128];         /* driver version it was found on ("*" = any) */
    char platform[128];       /* platform name substring a shipped set matches ("*" = any) */
    char type[16];            /* "cpu", "gpu", ... or "*" */
    char note[256];           /* free text: how it was found, the score */
    int builtin;              /* 1: a record that CLBlast's built-in parameters are best here
                                 (ct_tune found nothing faster); lists no kernel, applies nothing */
    int nkernels;
    ct_tune_kernel kernels[CT_TUNE_MAX_KERNELS];
} ct_tune_set;

/* Parse / format the text form (see tune/README.md). Parsing errors name the line. */
ct_status ct_tune_set_parse(const char *text, ct_tune_set *out, ct_err *err);
ct_status ct_tune_set_format(const ct_tune_set *s, char *buf, size_t len);
/* Set a parameter (adds the kernel or the name when missing). */
ct_status ct_tune_set_put(ct_tune_set *s, const char *kernel, const char *name, size_t value);
/* Apply with CLBlastOverrideParameters, every kernel of the set, on this device (a built-in
 * record applies nothing). */
ct_status ct_tune_set_apply(ct_device *dev, const ct_tune_set *s);
/* How well a set fits a device: -1 = not at all, else higher is better (exact device name 4,
 * exact driver 2). A pattern (device "*") applies only to the one device type it names, so a set
 * with device "*" and type "*" matches nothing and a CPU set never reaches a GPU. */
int ct_tune_set_match(const ct_tune_set *s, const ct_device_info *info);

/* ct_tune's decision after a search. Scores are GFLOP/s (< 0 or NaN: failed or not measured).
 * A candidate is kept only if it is at least `min_gain` times as fast as CLBlast's built-in
 * parameters (ct_tune's default CT_TUNE_MIN_GAIN: a tie within measurement noise keeps the
 * built-in parameters, since every override makes CLBlast compile its programs again at open;
 * the built-in score on an H100 varied by about 3% between runs, so raise it on noisy devices);
 * if the built-in parameters failed, any working candidate is kept. */
#define CT_TUNE_MIN_GAIN 1.02
typedef enum ct_tune_choice {
    CT_TUNE_KEEP_NOTHING = 0, /* nothing worked: store nothing, leave what is stored */
    CT_TUNE_KEEP_BUILTIN,     /* store the built-in record (it replaces a stored set) */
    CT_TUNE_KEEP_CANDIDATE    /* store the best candidate */
} ct_tune_choice;
ct_tune_choice ct_tune_choose(double builtin_gflops, double best_gflops, double min_gain);
/* Make the built-in record for a device; `note` says why ("ct_tune found nothing better: ..."). */
void ct_tune_set_builtin(ct_tune_set *s, const ct_device_info *info, const char *note);

/* The stored file for a device under `tune_dir` (keyed by device name and driver version). */
ct_status ct_tune_store_path(const char *tune_dir, const ct_device_info *info, char *path,
                             size_t len);
/* Write atomically (temporary file + rename). */
ct_status ct_tune_store(const char *tune_dir, const ct_device_info *info, const ct_tune_set *s,
                        ct_err *err);
/* Find parameters for a device: the stored file first, then the best shipped match.
 * CT_ERR_NOT_FOUND if neither has one. `source` (may be NULL) receives where it came from; for a
 * built-in record (out->builtin) it starts "CLBlast built-in parameters (<its note>)". */
ct_status ct_tune_lookup(const char *tune_dir, const ct_device_info *info, ct_tune_set *out,
                         char *source, size_t source_len, ct_err *err);
/* Records of other measured parameters (the engine's fused attention block shapes, ...) kept
 * beside the CLBlast set with the same keying and text form, one file per kind:
 * <tune_dir>/<device>__<driver>.<kind>.txt ("kind" letters, digits, '_'; the CLBlast set's own
 * file name never has a second dot, so the two never meet). Their kernel lines are never given to
 * CLBlast. load: CT_ERR_NOT_FOUND when there is no such file (nothing recorded in *err). */
ct_status ct_tune_record_path(const char *tune_dir, const ct_device_info *info, const char *kind,
                              char *path, size_t len);
ct_status ct_tune_record_load(const char *tune_dir, const ct_device_info *info, const char *kind,
                              ct_tune_set *out, ct_err *err);
ct_status ct_tune_record_store(const char *tune_dir, const ct_device_info *info, const char *kind,
                               const ct_tune_set *s, ct_err *err);
/* The shipped sets compiled into the library (the files of tune/). */
int ct_tune_shipped_count(void);
const char *ct_tune_shipped_text(int i, const char **name);
/* The default directories. `buf` receives the path; "" if no home directory is known. */
void ct_cache_dir_default(char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* CT_CL_H */
