/* event.c - completion of asynchronous device work: events, markers, flush, and the wall clock.
 *
 * A ct_event wraps one cl_event with its device and a line naming the command, so a wait that
 * finds the command failed says which copy or kernel it was. Events are small heap records made
 * only when the caller asks for one (a NULL out-pointer costs nothing). Waiting does not release,
 * so several events may be waited in any order and one more than once. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ct_cl_impl.h"

double ct_time_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

ct_status ct__event_new(ct_device *d, ct_event **out, ct_event **e, const char *fmt, ...) {
    *e = NULL;
    if (!out) return CT_OK;
    *out = NULL;
    ct_event *x = ct_calloc(1, sizeof *x);
    if (!x) return CT_ERR(&d->err, CT_ERR_NOMEM, "out of host memory for an event");
    x->dev = d;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->what, sizeof x->what, fmt, ap);
    va_end(ap);
    *e = x;
    return CT_OK;
}

void ct_event_release(ct_event *e) {
    if (!e) return;
    if (__atomic_fetch_sub(&e->extra, 1, __ATOMIC_ACQ_REL) > 0) return; /* others hold it */
    if (e->ev) clReleaseEvent(e->ev);
    free(e);
}

ct_status ct_event_wait_err(ct_event *e, ct_err *err) {
    if (!e) return CT_OK;
    if (!e->ev) return CT_ERR(err, CT_ERR_STATE, "waiting for %s: the command was never enqueued", e->what);
    cl_int rc = clWaitForEvents(1, &e->ev);
    /* A failed command makes the wait return CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST; its own
     * (negative) execution status is the useful code. */
    cl_int exec = CL_COMPLETE;
    if (clGetEventInfo(e->ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof exec, &exec, NULL) !=
        CL_SUCCESS)
        exec = CL_COMPLETE;
    if (exec < 0)
        return CT_CL_FAIL(err, exec, "%s failed on device %d (%s)", e->what, e->dev->info.index,
                          e->dev->info.name);
    if (rc != CL_SUCCESS)
        return CT_CL_FAIL(err, rc, "waiting for %s on device %d", e->what, e->dev->info.index);
    return CT_OK;
}

ct_status ct_event_wait(ct_event *e) { return e ? ct_event_wait_err(e, &e->dev->err) : CT_OK; }

ct_status ct_event_wait_release(ct_event *e) {
    ct_status st = ct_event_wait(e);
    ct_event_release(e);
    return st;
}

ct_status ct_event_query(ct_event *e, int *done) {
    *done = 1;
    if (!e) return CT_OK;
    if (!e->ev) return CT_ERR(&e->dev->err, CT_ERR_STATE, "querying %s: never enqueued", e->what);
    cl_int exec = CL_COMPLETE;
    cl_int rc = clGetEventInfo(e->ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof exec, &exec, NULL);
    if (rc != CL_SUCCESS) return CT_CL_FAIL(&e->dev->err, rc, "querying %s", e->what);
    *done = exec == CL_COMPLETE || exec < 0;
    return CT_OK;
}

ct_status ct_event_times(ct_event *e, uint64_t *start_ns, uint64_t *end_ns) {
    *start_ns = *end_ns = 0;
    if (!e || !e->ev) return CT_ERR_ARG;
    cl_ulong t0 = 0, t1 = 0;
    cl_int rc = clGetEventProfilingInfo(e->ev, CL_PROFILING_COMMAND_START, sizeof t0, &t0, NULL);
    if (rc == CL_SUCCESS)
        rc = clGetEventProfilingInfo(e->ev, CL_PROFILING_COMMAND_END, sizeof t1, &t1, NULL);
    if (rc == CL_PROFILING_INFO_NOT_AVAILABLE)
        return CT_ERR(&e->dev->err, CT_ERR_STATE,
                      "no timestamps for %s: the command has not completed, or device %d was "
                      "opened without profiling (ct_device_opts.profiling)",
                      e->what, e->dev->info.index);
    if (rc != CL_SUCCESS) return CT_CL_FAIL(&e->dev->err, rc, "timestamps of %s", e->what);
    *start_ns = t0, *end_ns = t1;
    return CT_OK;
}

ct_status ct_device_marker(ct_device *d, ct_event **ev) {
    ct_event *e = NULL;
    ct_status st = ct__event_new(d, ev, &e, "marker on device %d", d->info.index);
    if (st != CT_OK) return st;
    if (!ev) return CT_OK; /* a marker nobody waits on does nothing */
    cl_int rc = clEnqueueMarkerWithWaitList(d->queue, 0, NULL, &e->ev);
    if (rc != CL_SUCCESS) {
        ct_event_release(e);
        return CT_CL_FAIL(&d->err, rc, "enqueueing a marker on device %d", d->info.index);
    }
    *ev = e;
    return CT_OK;
}

void ct_event_share(ct_event *e, int n) {
    if (e && n > 0) __atomic_fetch_add(&e->extra, n, __ATOMIC_ACQ_REL);
}

ct_status ct_device_wait_events(ct_device *d, ct_event *const *evs, int n) {
    cl_event list[64];
    if (n <= 0) return CT_OK;
    if (n > 64)
        return CT_ERR(&d->err, CT_ERR_ARG, "waiting for %d events on device %d: at most 64", n,
                      d->info.index);
    for (int i = 0; i < n; i++) {
        if (!evs[i] || !evs[i]->ev)
            return CT_ERR(&d->err, CT_ERR_STATE, "device %d asked to wait for an event that was "
                                                 "never enqueued", d->info.index);
        list[i] = evs[i]->ev;
    }
    cl_int rc = clEnqueueBarrierWithWaitList(d->queue, (cl_uint)n, list, NULL);
    if (rc != CL_SUCCESS)
        return CT_CL_FAIL(&d->err, rc, "queueing a wait for %d events on device %d", n,
                          d->info.index);
    return CT_OK;
}

ct_status ct_device_flush(ct_device *d) {
    cl_int rc = clFlush(d->queue);
    if (rc != CL_SUCCESS) return CT_CL_FAIL(&d->err, rc, "clFlush on device %d", d->info.index);
    return CT_OK;
}

ct_status ct_kernel_max_work_group(ct_device *d, cl_kernel k, size_t *out) {
    size_t wg = 0;
    *out = 1;
    cl_int rc = clGetKernelWorkGroupInfo(k, d->info.device_id, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg,
                                         &wg, NULL);
    if (rc != CL_SUCCESS) {
        char name[64] = "?";
        clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL);
        return CT_CL_FAIL(&d->err, rc, "work-group size of kernel '%s' on device %d", name,
                          d->info.index);
    }
    *out = wg ? wg : 1;
    return CT_OK;
}
