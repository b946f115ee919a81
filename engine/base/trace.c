/* trace.c - Chrome trace events (the JSON Perfetto and chrome://tracing read): one process per
 * MPI rank, one track per worker lane (its own thread, its gradient-communication thread, its
 * ZeRO prefetch thread), a complete ("X") event per recorded span with the micro-batch as an
 * argument. Events stay in host memory while recording; ct_trace_write sends every worker's to
 * the leader (point to point over the world group), which writes one file atomically. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_trace.h"
#include "ct_file.h"

typedef struct tev {
    const char *name, *cat;
    double t0, t1; /* seconds, ct_time_now */
    int lane, mb;
} tev;

struct ct_trace {
    int worker, rank, thread, on, cur_mb;
    double epoch;
    tev *ev;
    size_t n, cap;
    pthread_mutex_t mu;
};

ct_status ct_trace_create(ct_trace **out, int worker, int rank, int thread, ct_err *err) {
    *out = NULL;
    ct_trace *t = ct_calloc(1, sizeof *t);
    if (!t) return CT_ERR(err, CT_ERR_NOMEM, "ct_trace_create: out of host memory");
    t->worker = worker, t->rank = rank, t->thread = thread;
    t->epoch = ct_time_now();
    pthread_mutex_init(&t->mu, NULL);
    *out = t;
    return CT_OK;
}

void ct_trace_free(ct_trace *t) {
    if (!t) return;
    pthread_mutex_destroy(&t->mu);
    free(t->ev);
    free(t);
}

void ct_trace_enable(ct_trace *t, int on) {
    if (t) t->on = on != 0;
}
int ct_trace_on(const ct_trace *t) { return t && t->on; }

ct_status ct_trace_sync(ct_trace *t, ct_comm *world) {
    ct_status st = world && ct_comm_size(world) > 1 ? ct_comm_barrier(world, NULL) : CT_OK;
    if (t) t->epoch = ct_time_now();
    return st;
}

void ct_trace_set_mb(ct_trace *t, int mb) {
    if (t) t->cur_mb = mb;
}

void ct_trace_event(ct_trace *t, int lane, const char *name, const char *cat, double t0, int mb) {
    if (!t || !t->on) return;
    if (mb == CT_TRACE_MB) mb = t->cur_mb;
    double t1 = ct_time_now();
    pthread_mutex_lock(&t->mu);
    if (t->n == t->cap) {
        size_t nc = t->cap ? 2 * t->cap : 1024;
        tev *ne = ct_realloc(t->ev, nc * sizeof *ne);
        if (!ne) { /* out of memory: drop the event rather than fail the step */
            pthread_mutex_unlock(&t->mu);
            return;
        }
        t->ev = ne, t->cap = nc;
    }
    tev *e = &t->ev[t->n++];
    e->name = name, e->cat = cat, e->t0 = t0, e->t1 = t1, e->lane = lane, e->mb = mb;
    pthread_mutex_unlock(&t->mu);
}

/* Append formatted text to a growing buffer. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
    int fail;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    if (b->fail) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->fail = 1;
            return;
        }
        if (b->p && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t nc = b->cap ? 2 * b->cap : 1 << 16;
        while (nc < b->n + (size_t)k + 1) nc *= 2;
        char *np = ct_realloc(b->p, nc);
        if (!np) {
            b->fail = 1;
            return;
        }
        b->p = np, b->cap = nc;
    }
}

static const char *const lane_names[] = {"", " comm", " prefetch"};

/* This worker's events as JSON objects, each followed by ",\n". */
static void format_events(ct_trace *t, sbuf *b) {
    int tid0 = t->worker * 4;
    for (int lane = 0; lane < 3; lane++)
        sb_printf(b,
                  "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":"
                  "\"worker %d%s\"}},\n",
                  t->rank, tid0 + lane, t->worker, lane_names[lane]);
    sb_printf(b,
              "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}},"
              "\n",
              t->rank, t->rank);
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < t->n; i++) {
        const tev *e = &t->ev[i];
        sb_printf(b,
                  "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,"
                  "\"tid\":%d,\"args\":{\"mb\":%d}},\n",
                  e->name, e->cat, 1e6 * (e->t0 - t->epoch), 1e6 * (e->t1 - e->t0), t->rank,
                  tid0 + e->lane, e->mb);
    }
    pthread_mutex_unlock(&t->mu);
}

ct_status ct_trace_write(ct_trace *t, ct_comm *world, const char *path, ct_err *err) {
    sbuf b = {0};
    format_events(t, &b);
    if (b.fail) {
        free(b.p);
        return CT_ERR(err, CT_ERR_NOMEM, "trace: out of host memory");
    }
    int W = world ? ct_comm_size(world) : 1, me = world ? ct_comm_rank(world) : 0;
    ct_status st = CT_OK;
    if (me != 0) {
        uint64_t n = b.n;
        st = ct_comm_send(world, 0, &n, sizeof n);
        if (st == CT_OK && n) st = ct_comm_send(world, 0, b.p, b.n);
        if (st != CT_OK) CT_ERR(err, st, "trace: sending events: %s", ct_comm_errmsg(world));
        free(b.p);
        return st;
    }
    sbuf all = {0};
    sb_printf(&all, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    if (b.n) sb_printf(&all, "%.*s", (int)b.n, b.p);
    free(b.p);
    for (int w = 1; w < W && st == CT_OK; w++) {
        uint64_t n = 0;
        st = ct_comm_recv(world, w, &n, sizeof n);
        char *p = st == CT_OK && n ? ct_malloc(n) : NULL;
        if (st == CT_OK && n && !p) st = CT_ERR(err, CT_ERR_NOMEM, "trace: out of host memory");
        if (st == CT_OK && n) st = ct_comm_recv(world, w, p, n);
        if (st == CT_OK && n) sb_printf(&all, "%.*s", (int)n, p);
        free(p);
        if (st != CT_OK && !err->msg[0])
            CT_ERR(err, st, "trace: receiving events: %s", ct_comm_errmsg(world));
    }
    /* the last object's ",\n" closes with an empty metadata event: valid JSON, no special case */
    sb_printf(&all, "{\"name\":\"trace_end\",\"ph\":\"M\",\"pid\":0,\"args\":{}}\n]}\n");
    if (st == CT_OK && all.fail) st = CT_ERR(err, CT_ERR_NOMEM, "trace: out of host memory");
    ct_atomic_file af;
    if (st == CT_OK && (st = ct_atomic_file_open(&af, path, err)) == CT_OK) {
        st = ct_atomic_file_write(&af, all.p, all.n, err);
        if (st == CT_OK) st = ct_atomic_file_commit(&af, err);
        else ct_atomic_file_abort(&af);
    }
    free(all.p);
    return st;
}
