/* ct_engine_trace.h - Chrome trace events (the JSON Perfetto and chrome://tracing read), recorded
 * per worker by the model's op groups and the executor's actions, written as one file by the
 * leader (trace.c). A part of engine/base/, which every other part of the engine may use.
 *
 *     ct_trace *tr = NULL;
 *     if (ct_trace_create(&tr, worker, rank, thread, &err)) { ... }
 *     ct_trace_sync(tr, world);            every worker: a common time origin
 *     ct_trace_enable(tr, 1);
 *     double t0 = ct_time_now(); ... ; ct_trace_event(tr, CT_TRACE_MAIN, "forward", "compute", t0, mb);
 *     ct_trace_write(tr, world, "trace.json", &err);
 *     ct_trace_free(tr);
 */
#ifndef CT_ENGINE_TRACE_H
#define CT_ENGINE_TRACE_H

#include "ct_cl.h"
#include "ct_parallel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_trace ct_trace;
/* One recorder per worker (pid = MPI rank, tid = worker). Events are kept in host memory. */
ct_status ct_trace_create(ct_trace **out, int worker, int rank, int thread, ct_err *err);
void ct_trace_free(ct_trace *t);
/* Recording on or off (the executor and the model record only while on). */
void ct_trace_enable(ct_trace *t, int on);
int ct_trace_on(const ct_trace *t);
/* Collective over world: a common time origin (a barrier, then now), so ranks line up. */
ct_status ct_trace_sync(ct_trace *t, ct_comm *world);
/* Lanes: the worker's own thread, its gradient-communication thread, its ZeRO prefetch thread
 * (each a track in the viewer). */
enum { CT_TRACE_MAIN = 0, CT_TRACE_COMM = 1, CT_TRACE_PREFETCH = 2 };
/* A complete event [t0, now] (seconds from ct_time_now) on a lane, category cat ("compute",
 * "comm", "optimizer", "step"), micro-batch mb (-1: none). name and cat must be string literals
 * (kept by pointer). Thread-safe. */
void ct_trace_event(ct_trace *t, int lane, const char *name, const char *cat, double t0, int mb);
/* The micro-batch the worker is on: events recorded with mb = CT_TRACE_MB take it (the model's
 * op groups do; the executor sets it). */
#define CT_TRACE_MB (-2)
void ct_trace_set_mb(ct_trace *t, int mb);
/* Collective over world: every worker's events to the leader, which writes Chrome trace JSON
 * (atomically). */
ct_status ct_trace_write(ct_trace *t, ct_comm *world, const char *path, ct_err *err);
#ifdef __cplusplus
}
#endif
#endif /* CT_ENGINE_TRACE_H */
