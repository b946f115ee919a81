/* device.c - an opened device: its context and queue, the settings it was opened with (cache and
 * tuning folders, row groups, memory cap), the tuning applied at open, and its accessors.
 *
 * Promises: opening applies the stored or shipped CLBlast parameters once (tune.c) and says which
 * in ct_device_tuning_source; ct_device_free(NULL) is a no-op and frees what a failed open made. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_cl_impl.h"

ct_device_opts ct_device_opts_default(void) {
    ct_device_opts o;
    memset(&o, 0, sizeof o);
    o.apply_tuning = 1;
    o.row_groups = -1;
    return o;
}

void ct_cache_dir_default(char *buf, size_t len) {
    const char *x = getenv("XDG_CACHE_HOME");
    const char *h = getenv("HOME");
    if (x && *x) snprintf(buf, len, "%s/cltrain", x);
    else if (h && *h) snprintf(buf, len, "%s/.cache/cltrain", h);
    else buf[0] = '\0';
}

ct_status ct_device_open(ct_device **out, const ct_device_info *info, const ct_device_opts *opts,
                         ct_err *err) {
    ct_status st = CT_OK;
    ct_device_opts o = opts ? *opts : ct_device_opts_default();
    *out = NULL;
    ct_device *d = ct_calloc(1, sizeof *d);
    if (!d) return CT_ERR(err, CT_ERR_NOMEM, "out of host memory opening device");
    d->info = *info;
    d->gemm_plan = ct_gemm_plan_default();
    d->row_groups = o.row_groups >= 0 ? o.row_groups != 0 : !(info->type & CL_DEVICE_TYPE_CPU);
    pthread_mutex_init(&d->mem_lock, NULL);
    d->mem_cap = o.mem_cap ? o.mem_cap : info->global_mem_bytes;
    d->max_alloc = o.max_alloc && o.max_alloc < info->max_alloc_bytes ? o.max_alloc
                                                                      : info->max_alloc_bytes;
    cl_int rc = CL_SUCCESS;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)info->platform_id,
                                     0};
    if (o.context) {
        /* another worker's context: it must hold this device */
        cl_device_id ids[64];
        size_t bytes = 0;
        int found = 0;
        rc = clGetContextInfo(o.context, CL_CONTEXT_DEVICES, sizeof ids, ids, &bytes);
        for (size_t i = 0; rc == CL_SUCCESS && i < bytes / sizeof ids[0]; i++)
            found |= ids[i] == info->device_id;
        if (rc != CL_SUCCESS || !found) {
            st = rc != CL_SUCCESS
                     ? CT_CL_FAIL(err, rc, "the shared context for device %d (%s)", info->index,
                                  info->name)
                     : CT_ERR(err, CT_ERR_ARG, "the shared context does not hold device %d (%s)",
                              info->index, info->name);
            goto cleanup;
        }
        clRetainContext(o.context);
        d->ctx = o.context;
    } else {
        d->ctx = clCreateContext(props, 1, &info->device_id, NULL, NULL, &rc);
    }
    if (rc != CL_SUCCESS) {
        d->ctx = NULL;
        st = CT_CL_FAIL(err, rc, "clCreateContext for device %d (%s)", info->index, info->name);
        goto cleanup;
    }
    ct__clblast_device_open();
    d->queue = clCreateCommandQueue(d->ctx, info->device_id,
                                    o.profiling ? CL_QUEUE_PROFILING_ENABLE : 0, &rc);
    if (rc != CL_SUCCESS) {
        st = CT_CL_FAIL(err, rc, "clCreateCommandQueue for device %d (%s)", info->index, info->name);
        goto cleanup;
    }
    d->on_build = o.on_build, d->on_build_arg = o.on_build_arg;
    if (o.cache_dir) snprintf(d->cache_dir, sizeof d->cache_dir, "%s", o.cache_dir);
    else ct_cache_dir_default(d->cache_dir, sizeof d->cache_dir);
    snprintf(d->tuning_source, sizeof d->tuning_source, "disabled (CLBlast's built-in parameters)");
    if (o.tune_dir) snprintf(d->tune_dir, sizeof d->tune_dir, "%s", o.tune_dir);
    else if (d->cache_dir[0]) snprintf(d->tune_dir, sizeof d->tune_dir, "%s/tune", d->cache_dir);
    if (o.apply_tuning) {
        st = ct__tune_apply_at_open(d, d->tune_dir);
        if (st != CT_OK) {
            if (err) *err = d->err;
            goto cleanup;
        }
    }
    *out = d;
    return CT_OK;
cleanup:
    ct_device_free(d);
    return st;
}

ct_status ct_device_open_shared(ct_device **out, const ct_device_info *info,
                                const ct_device_opts *opts, cl_context *shared, ct_err *err) {
    ct_device_opts o = opts ? *opts : ct_device_opts_default();
    o.context = *shared;
    ct_status st = ct_device_open(out, info, &o, err);
    if (st == CT_OK && !*shared) {
        *shared = (*out)->ctx;
        clRetainContext(*shared);
    }
    return st;
}

void ct_context_release(cl_context ctx) {
    if (ctx) clReleaseContext(ctx);
}

void ct_device_free(ct_device *d) {
    if (!d) return;
    for (int i = 0; i < d->nprograms; i++) {
        ct__program_entry *p = &d->programs[i];
        for (int k = 0; k < p->nkernels; k++) clReleaseKernel(p->kernels[k].kernel);
        free(p->kernels);
        free(p->options);
        if (p->program) clReleaseProgram(p->program);
    }
    free(d->programs);
    if (d->queue) {
        clFinish(d->queue);
        clReleaseCommandQueue(d->queue);
    }
    if (d->ctx) {
        clReleaseContext(d->ctx);
        ct__clblast_device_close(); /* CLBlast's cached programs hold the context too */
    }
    pthread_mutex_destroy(&d->mem_lock);
    free(d);
}

const ct_device_info *ct_device_get_info(const ct_device *d) { return &d->info; }
int ct_device_row_groups(const ct_device *d) { return d->row_groups; }
cl_context ct_device_context(const ct_device *d) { return d->ctx; }
cl_command_queue ct_device_queue(const ct_device *d) { return d->queue; }
cl_device_id ct_device_id(const ct_device *d) { return d->info.device_id; }
const char *ct_device_errmsg(const ct_device *d) { return d ? d->err.msg : "no device"; }
ct_err *ct_device_err(ct_device *d) { return &d->err; }
const char *ct_device_tuning_source(const ct_device *d) { return d->tuning_source; }
const char *ct_device_tune_dir(const ct_device *d) { return d->tune_dir; }

ct_status ct_device_finish(ct_device *d) {
    cl_int rc = clFinish(d->queue);
    if (rc != CL_SUCCESS) return CT_CL_FAIL(&d->err, rc, "clFinish on device %d", d->info.index);
    return CT_OK;
}

/* The GEMM plan the ops read (ct_gemm_plan_path, gemm_path.c); kept here, decided by the engine. */
ct_gemm_plan ct_gemm_plan_default(void) {
    ct_gemm_plan p;
    memset(&p, 0, sizeof p);
    p.fp32 = CT_GEMM_CLBLAST, p.bf16 = CT_GEMM_PORTABLE;
    return p;
}

void ct_device_set_gemm_plan(ct_device *d, const ct_gemm_plan *p) {
    d->gemm_plan = p ? *p : ct_gemm_plan_default();
}

const ct_gemm_plan *ct_device_gemm_plan(const ct_device *d) { return &d->gemm_plan; }
