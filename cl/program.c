/* program.c - OpenCL programs built once per device, kernels created once, binaries cached on disk.
 *
 * Cache entry: <cache_dir>/programs/<key>.bin, key = FNV-1a 64 of (platform name and version,
 * device name, device and driver version, options, source text). The file is a fixed header
 * (magic, format version, key, payload length, payload hash) followed by the driver's binary.
 * Promises: an entry that is truncated, has the wrong key or hash, or that the driver refuses is
 * counted as a reject and rebuilt from source and rewritten; entries are written atomically
 * (ct_file.h: a temporary of its own + rename), so two writers racing on one entry (processes or
 * threads) both end with a valid file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_cl_impl.h"

#define CT__CACHE_MAGIC 0x42505443u /* "CTPB" */
#define CT__CACHE_VERSION 1u

typedef struct cache_header {
    uint32_t magic, version;
    uint64_t key;
    uint64_t payload_len;
    uint64_t payload_hash;
} cache_header;

/* 64-bit FNV-1a over bytes, chained through `h` (start with FNV_INIT). */
#define FNV_INIT 1469598103934665603ULL
static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static uint64_t program_key(const ct_device *d, const ct_cl_source *src, const char *options) {
    const ct_device_info *i = &d->info;
    uint64_t h = FNV_INIT;
    const char *parts[] = {i->platform, i->platform_version, i->name, i->version,
                           i->driver_version, options ? options : ""};
    for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++)
        h = fnv1a(h, parts[k], strlen(parts[k]) + 1);
    return fnv1a(h, src->text, src->len);
}

ct_status ct_program_cache_path(ct_device *d, const ct_cl_source *src, const char *options,
                                char *path, size_t len) {
    if (!d->cache_dir[0]) {
        path[0] = '\0';
        return CT_OK;
    }
    int w = snprintf(path, len, "%s/programs/%s-%016llx.bin", d->cache_dir, src->name,
                     (unsigned long long)program_key(d, src, options));
    if (w < 0 || (size_t)w >= len) return CT_ERR(&d->err, CT_ERR_ARG, "cache path too long");
    return CT_OK;
}

static ct_status build_log(ct_device *d, cl_program prog, const ct_cl_source *src,
                           const char *options, cl_int rc) {
    size_t n = 0;
    clGetProgramBuildInfo(prog, d->info.device_id, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
    char *log = ct_malloc(n + 1);
    if (log) {
        log[0] = '\0';
        clGetProgramBuildInfo(prog, d->info.device_id, CL_PROGRAM_BUILD_LOG, n, log, NULL);
        log[n] = '\0';
    }
    ct_status st = CT_ERR(&d->err, CT_ERR_BUILD,
                          "building OpenCL program '%s' (options '%s') for device %d (%s) failed: "
                          "%s (%d). Compiler log:\n%s",
                          src->name, options ? options : "", d->info.index, d->info.name,
                          ct_cl_error_name(rc), rc, log ? log : "(no log)");
    free(log);
    return st;
}

/* Try the disk entry; returns a built program or NULL (counting a reject when a file existed). */
static cl_program load_cached(ct_device *d, const char *path, uint64_t key, const char *options) {
    unsigned char *data = NULL;
    size_t n = 0;
    ct_err ignore = {0};
    if (access(path, R_OK) != 0) return NULL;
    cl_program prog = NULL;
    ct__alloc_benign_begin(); /* no memory to read the entry: built from source instead */
    ct_status rst = ct_file_read_all(path, &data, &n, &ignore);
    ct__alloc_benign_end();
    if (rst != CT_OK) goto reject;
    cache_header h;
    if (n < sizeof h) goto reject;
    memcpy(&h, data, sizeof h);
    if (h.magic != CT__CACHE_MAGIC || h.version != CT__CACHE_VERSION || h.key != key ||
        h.payload_len != n - sizeof h || h.payload_len == 0 ||
        h.payload_hash != fnv1a(FNV_INIT, data + sizeof h, h.payload_len))
        goto reject;
    const unsigned char *bin = data + sizeof h;
    size_t blen = (size_t)h.payload_len;
    cl_int bstatus = CL_SUCCESS, rc = CL_SUCCESS;
    prog = clCreateProgramWithBinary(d->ctx, 1, &d->info.device_id, &blen, &bin, &bstatus, &rc);
    if (rc != CL_SUCCESS || bstatus != CL_SUCCESS) goto reject;
    if (clBuildProgram(prog, 1, &d->info.device_id, options ? options : "", NULL, NULL) != CL_SUCCESS)
        goto reject;
    free(data);
    d->cache_stats.disk_hits++;
    return prog;
reject:
    if (prog) clReleaseProgram(prog);
    free(data);
    d->cache_stats.disk_rejects++;
    return NULL;
}

static void store_cached(ct_device *d, cl_program prog, const char *path, uint64_t key) {
    size_t blen = 0;
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof blen, &blen, NULL) != CL_SUCCESS ||
        blen == 0)
        return;
    ct__alloc_benign_begin(); /* the cache is an optimisation: no memory, no entry */
    unsigned char *buf = ct_malloc(sizeof(cache_header) + blen);
    ct__alloc_benign_end();
    if (!buf) return;
    unsigned char *bin = buf + sizeof(cache_header);
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL) == CL_SUCCESS) {
        cache_header h = {CT__CACHE_MAGIC, CT__CACHE_VERSION, key, blen,
                          fnv1a(FNV_INIT, bin, blen)};
        memcpy(buf, &h, sizeof h);
        char dir[1100];
        snprintf(dir, sizeof dir, "%s/programs", d->cache_dir);
        ct_err ignore = {0};
        /* The cache is an optimisation: a failed write is not an error of the build. */
        if (ct_file_mkdirs(dir, &ignore) == CT_OK &&
            ct_file_write_atomic(path, buf, sizeof h + blen, &ignore) == CT_OK)
            d->cache_stats.disk_writes++;
    }
    free(buf);
}

static ct__program_entry *find_entry(ct_device *d, const ct_cl_source *src, const char *options) {
    const char *o = options ? options : "";
    for (int i = 0; i < d->nprograms; i++)
        if (d->programs[i].src == src && !strcmp(d->programs[i].options, o)) return &d->programs[i];
    return NULL;
}

static ct_status get_entry(ct_device *d, const ct_cl_source *src, const char *options,
                           ct__program_entry **out) {
    *out = NULL;
    if (!src || !src->text)
        return CT_ERR(&d->err, CT_ERR_ARG, "ct_program_get: no source given");
    ct__program_entry *e = find_entry(d, src, options);
    if (e) {
        d->cache_stats.memory_hits++;
        *out = e;
        return CT_OK;
    }
    if (d->nprograms == d->cap_programs) {
        int cap = d->cap_programs ? 2 * d->cap_programs : 8;
        ct__program_entry *np = ct_realloc(d->programs, (size_t)cap * sizeof *np);
        if (!np) return CT_ERR(&d->err, CT_ERR_NOMEM, "out of host memory (program table)");
        d->programs = np;
        d->cap_programs = cap;
    }
    const char *o = options ? options : "";
    uint64_t key = program_key(d, src, o);
    char path[1200] = "";
    if (d->cache_dir[0]) ct_program_cache_path(d, src, o, path, sizeof path);
    cl_program prog = path[0] ? load_cached(d, path, key, o) : NULL;
    if (!prog) {
        cl_int rc = CL_SUCCESS;
        const char *text = src->text;
        size_t len = src->len;
        double t0 = ct_time_now();
        if (d->on_build) d->on_build(d->on_build_arg, src->name, 0, 0);
        prog = clCreateProgramWithSource(d->ctx, 1, &text, &len, &rc);
        if (rc != CL_SUCCESS)
            return CT_CL_FAIL(&d->err, rc, "clCreateProgramWithSource '%s'", src->name);
        rc = clBuildProgram(prog, 1, &d->info.device_id, o, NULL, NULL);
        if (rc != CL_SUCCESS) {
            ct_status st = build_log(d, prog, src, o, rc);
            clReleaseProgram(prog);
            return st;
        }
        d->cache_stats.builds++;
        if (d->on_build) d->on_build(d->on_build_arg, src->name, 1, ct_time_now() - t0);
        if (path[0]) store_cached(d, prog, path, key);
    }
    e = &d->programs[d->nprograms];
    memset(e, 0, sizeof *e);
    e->src = src;
    e->program = prog;
    e->options = ct_strdup(o);
    if (!e->options) {
        clReleaseProgram(prog);
        return CT_ERR(&d->err, CT_ERR_NOMEM, "out of host memory (program table)");
    }
    d->nprograms++;
    *out = e;
    return CT_OK;
}

ct_status ct_program_get(ct_device *d, const ct_cl_source *src, const char *options,
                         cl_program *out) {
    ct__program_entry *e = NULL;
    ct_status st = get_entry(d, src, options, &e);
    *out = e ? e->program : NULL;
    return st;
}

ct_status ct_kernel_get(ct_device *d, const ct_cl_source *src, const char *options,
                        const char *kernel, cl_kernel *out) {
    *out = NULL;
    ct__program_entry *e = NULL;
    ct_status st = get_entry(d, src, options, &e);
    if (st != CT_OK) return st;
    for (int i = 0; i < e->nkernels; i++)
        if (!strcmp(e->kernels[i].name, kernel)) {
            *out = e->kernels[i].kernel;
            return CT_OK;
        }
    if (strlen(kernel) >= sizeof e->kernels[0].name)
        return CT_ERR(&d->err, CT_ERR_ARG, "kernel name too long: '%s'", kernel);
    if (e->nkernels == e->cap_kernels) {
        int cap = e->cap_kernels ? 2 * e->cap_kernels : 8;
        ct__kernel_entry *nk = ct_realloc(e->kernels, (size_t)cap * sizeof *nk);
        if (!nk) return CT_ERR(&d->err, CT_ERR_NOMEM, "out of host memory (kernel table)");
        e->kernels = nk;
        e->cap_kernels = cap;
    }
    cl_int rc = CL_SUCCESS;
    cl_kernel k = clCreateKernel(e->program, kernel, &rc);
    if (rc != CL_SUCCESS)
        return CT_CL_FAIL(&d->err, rc, "creating kernel '%s' of program '%s'", kernel, src->name);
    snprintf(e->kernels[e->nkernels].name, sizeof e->kernels[0].name, "%s", kernel);
    e->kernels[e->nkernels++].kernel = k;
    *out = k;
    return CT_OK;
}

void ct_device_program_cache_stats(const ct_device *d, ct_program_cache_stats *out) {
    *out = d->cache_stats;
}

ct_status ct_kernel_set_arg(ct_device *d, cl_kernel k, cl_uint i, size_t size, const void *v) {
    cl_int rc = clSetKernelArg(k, i, size, v);
    if (rc != CL_SUCCESS) {
        char name[64] = "?";
        clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL);
        return CT_CL_FAIL(&d->err, rc, "setting argument %u of kernel '%s'", i, name);
    }
    return CT_OK;
}

ct_status ct__kernel_args(ct_device *d, cl_kernel k, int n, const size_t *sizes,
                          const void *const *vals) {
    for (int i = 0; i < n; i++) {
        ct_status st = ct_kernel_set_arg(d, k, (cl_uint)i, sizes[i], vals[i]);
        if (st != CT_OK) return st;
    }
    return CT_OK;
}

/* The table cmake/embed.cmake generates from the .cl files of cl/kernels (cl/CMakeLists.txt). */
extern const ct_cl_source ct__cl_kernels[];
extern const int ct__cl_kernels_count;

const ct_cl_source *ct__cl_kernel_source(const char *name) {
    for (int i = 0; i < ct__cl_kernels_count; i++)
        if (!strcmp(ct__cl_kernels[i].name, name)) return &ct__cl_kernels[i];
    return NULL;
}

ct_status ct_kernel_launch(ct_device *d, cl_kernel k, cl_uint dims, const size_t *global,
                           const size_t *local, ct_event **ev) {
    if (ev) *ev = NULL;
    char name[64] = "?";
    int empty = 0;
    for (cl_uint i = 0; i < dims; i++) empty |= global[i] == 0;
    ct_event *e = NULL;
    if (ev) clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL);
    ct_status st = ct__event_new(d, ev, &e, "kernel '%s' (global %zu x %zu)", name, global[0],
                                 dims > 1 ? global[1] : 1);
    if (st != CT_OK) return st;
    /* An empty range has nothing to do (OpenCL 1.2 refuses it); its event is a marker. */
    cl_int rc = !empty ? clEnqueueNDRangeKernel(d->queue, k, dims, NULL, global, local, 0, NULL,
                                                e ? &e->ev : NULL)
                       : (e ? clEnqueueMarkerWithWaitList(d->queue, 0, NULL, &e->ev) : CL_SUCCESS);
    if (rc != CL_SUCCESS) {
        ct_event_release(e);
        clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL);
        return CT_CL_FAIL(&d->err, rc, "enqueueing kernel '%s' (global %zu x %zu, local %zu)", name,
                          global[0], dims > 1 ? global[1] : 1, local ? local[0] : 0);
    }
    if (ev) *ev = e;
    return CT_OK;
}
