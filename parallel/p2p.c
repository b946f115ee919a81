/* p2p.c - worker-level point-to-point: the layer every collective algorithm is written over.
 *
 * Same process: a rendezvous slot per ordered pair. The sender posts (pointer, bytes) and waits;
 * the receiver copies or reduces straight from the sender's memory (one pass over the data, no
 * intermediate buffer) and releases it. A size disagreement fails both sides with
 * CT_ERR_MISMATCH. Other process: MPI_Isend/Irecv on the topology's world duplicate, tag =
 * (comm id, src thread, dst thread), every message cut into CT__SEG-byte segments so a reducing
 * receiver works on segment k while k+1 arrives. Both sides derive the segmentation from the
 * byte count, which therefore must agree (a disagreement is reported, not hung on, where MPI can
 * see it: truncation or a short count). */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel_impl.h"

ct_status ct__scratch(ct_comm *c, size_t bytes, void **out) {
    if (bytes > c->scratch_cap) {
        void *p = ct_realloc(c->scratch, bytes);
        if (!p) return CT_ERR(&c->err, CT_ERR_NOMEM, "out of host memory (comm scratch of %zu bytes)", bytes);
        c->scratch = p;
        c->scratch_cap = bytes;
    }
    *out = c->scratch;
    return CT_OK;
}

ct_status ct__scratch2(ct_comm *c, size_t bytes, void **out) {
    if (bytes > c->scratch2_cap) {
        void *p = ct_realloc(c->scratch2, bytes);
        if (!p) return CT_ERR(&c->err, CT_ERR_NOMEM, "out of host memory (comm scratch of %zu bytes)", bytes);
        c->scratch2 = p;
        c->scratch2_cap = bytes;
    }
    *out = c->scratch2;
    return CT_OK;
}

/* MPI_Wait that yields the core between polls: with more ranks than cores (common on shared
 * machines), a spinning MPI_Wait holds the core its peer needs to make progress. Gives up with
 * -1 once d has passed (the request is still active then). */
static int wait_yield(MPI_Request *req, MPI_Status *stt, const ct__deadline *d) {
    int done = 0, rc;
    for (int spin = 0;; spin++) {
        rc = MPI_Test(req, &done, stt);
        if (rc != MPI_SUCCESS || done) return rc;
        if (spin > 16) sched_yield();
        if ((spin & 255) == 255 && ct__deadline_passed(d)) return -1;
    }
}

static ct_status broken_err(ct_comm *c);

/* A request given up on (a timeout): cancelled and freed, so nothing completes into memory the
 * caller no longer owns and nothing leaks. */
static void drop_request(MPI_Request *r) {
    if (*r == MPI_REQUEST_NULL) return;
    MPI_Cancel(r);
    MPI_Request_free(r);
}

/* ------------------------------------------------------------------ timeouts */

ct_status ct__timeout(ct_comm *c, int peer, const char *what) {
    ct__group *g = c->g;
    const ct__member *m = &g->m[peer];
    if (!g->broken) g->broken = 2;
    ct__group_break(g);
    return CT_ERR(&c->err, CT_ERR_TIMEOUT,
                  "%s: %s group rank %d (world worker %d, MPI rank %d thread %d on host %s) "
                  "within %g s (CT_COMM_TIMEOUT): it failed, or waits in another call (check "
                  "mode off and counts that differ?); this comm is broken now",
                  c->op[0] ? c->op : "a call", what, peer, m->wid, m->rank, m->thread,
                  ct_topo_rank_host(c->topo, m->rank), c->topo->timeout);
}

ct_status ct__local_barrier(ct_comm *c) {
    ct__group *g = c->g;
    ct__deadline d = ct__deadline_in(c->topo->timeout);
    uint64_t missing = 0;
    int rc = ct__barrier_wait_until(&g->bar, c->local, &d, &missing);
    if (rc == 0) return CT_OK;
    if (rc != ETIMEDOUT) return broken_err(c);
    char who[256] = "";
    size_t used = 0;
    for (int i = 0; i < g->nlocal && used + 1 < sizeof who; i++)
        if (missing >> i & 1) {
            int r = g->local_rank[i];
            int w = snprintf(who + used, sizeof who - used, "%sgroup rank %d (world worker %d)",
                             used ? ", " : "", r, g->m[r].wid);
            used = w < 0 ? sizeof who : used + (size_t)w;
        }
    if (!g->broken) g->broken = 2;
    ct__group_break(g);
    return CT_ERR(&c->err, CT_ERR_TIMEOUT,
                  "%s: the threads of this process did not all reach the barrier within %g s "
                  "(CT_COMM_TIMEOUT); not there: %s; this comm is broken now",
                  c->op[0] ? c->op : "a call", c->topo->timeout, who);
}

static int mpi_tag(const ct_comm *c, int src_thread, int dst_thread) {
    int tb = c->topo->tag_bits_thread;
    return (int)(((c->g->id & c->topo->id_max) << (2 * tb)) | ((uint32_t)src_thread << tb) |
                 (uint32_t)dst_thread);
}

static ct_status check_peer(ct_comm *c, int peer, const char *what) {
    if (peer < 0 || peer >= c->size)
        return CT_ERR(&c->err, CT_ERR_ARG, "%s: peer rank %d is outside 0..%d", what, peer,
                      c->size - 1);
    return CT_OK;
}

/* ------------------------------------------------------------------ posted sends */

void ct__group_break(ct__group *g) {
    if (!g->broken) g->broken = 1;
    for (int i = 0; i < g->nlocal * g->nlocal; i++) {
        pthread_mutex_lock(&g->slots[i].mu);
        pthread_cond_broadcast(&g->slots[i].cv);
        pthread_mutex_unlock(&g->slots[i].mu);
    }
    pthread_mutex_lock(&g->bar.mu);
    pthread_cond_broadcast(&g->bar.cv);
    pthread_mutex_unlock(&g->bar.mu);
}

/* The group broke while this worker waited for `peer` (-1: the threads' barrier). */
static ct_status broken_err_peer(ct_comm *c, int peer) {
    if (c->g->broken == 2) {
        char who[160] = "";
        if (peer >= 0)
            snprintf(who, sizeof who, " while waiting for group rank %d (world worker %d, MPI "
                     "rank %d thread %d)", peer, c->g->m[peer].wid, c->g->m[peer].rank,
                     c->g->m[peer].thread);
        return CT_ERR(&c->err, CT_ERR_TIMEOUT,
                      "%s: another worker of this process gave up waiting (CT_COMM_TIMEOUT)%s; "
                      "the comm is unusable now, free it",
                      c->op[0] ? c->op : "a call", who);
    }
    return broken_err(c);
}

static ct_status broken_err(ct_comm *c) {
    if (c->g->broken == 2)
        return CT_ERR(&c->err, CT_ERR_TIMEOUT,
                      "%s: another worker of this group gave up waiting (CT_COMM_TIMEOUT); the "
                      "comm is unusable now, free it",
                      c->op[0] ? c->op : "a call");
    return CT_ERR(&c->err, CT_ERR_MISMATCH,
                  "another worker of this group saw a size mismatch (workers disagree on counts; "
                  "turn check mode on to find which); the comm is unusable now, free it");
}

typedef struct posted {
    ct__slot *slot; /* local */
    MPI_Request *req; /* remote: nreq requests */
    MPI_Request one[1];
    int nreq;
    ct__deadline dl; /* remote: when waiting for the sends gives up */
} posted;

static size_t nseg(size_t bytes) { return bytes == 0 ? 1 : (bytes + CT__SEG - 1) / CT__SEG; }

static ct_status post_send(ct_comm *c, int dst, const void *buf, size_t bytes, posted *p) {
    const ct__member *d = &c->g->m[dst];
    memset(p, 0, sizeof *p);
    if (d->local >= 0) {
        ct__slot *s = &c->g->slots[c->local * c->g->nlocal + d->local];
        ct__deadline dl = ct__deadline_in(c->topo->timeout);
        int rc = 0;
        ct__spin_until(&s->full, 0, c->topo->spin);
        pthread_mutex_lock(&s->mu);
        while (s->full && !c->g->broken && rc != ETIMEDOUT) rc = ct__cond_wait(&s->cv, &s->mu, &dl);
        if (c->g->broken || s->full) {
            pthread_mutex_unlock(&s->mu);
            return c->g->broken ? broken_err_peer(c, dst)
                                : ct__timeout(c, dst, "our previous message was not taken by");
        }
        s->ptr = buf;
        s->bytes = bytes;
        s->full = 1;
        s->done = 0;
        s->error = 0;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        p->slot = s;
        return CT_OK;
    }
    size_t ns = nseg(bytes);
    p->req = ns == 1 ? p->one : ct_malloc(ns * sizeof(MPI_Request));
    if (!p->req) return CT_ERR(&c->err, CT_ERR_NOMEM, "out of host memory (send requests)");
    int tag = mpi_tag(c, c->thread, d->thread);
    p->dl = ct__deadline_in(c->topo->timeout);
    for (size_t k = 0; k < ns; k++) {
        size_t off = k * CT__SEG, len = bytes - off < CT__SEG ? bytes - off : CT__SEG;
        int rc = MPI_Isend((const char *)buf + off, (int)len, MPI_BYTE, d->rank, tag,
                           c->topo->world, &p->req[k]);
        if (rc != MPI_SUCCESS) {
            p->nreq = (int)k;
            return ct__mpi_err_peer(c, rc, "MPI_Isend", dst);
        }
    }
    p->nreq = (int)ns;
    return CT_OK;
}

static ct_status complete_send(ct_comm *c, int dst, posted *p) {
    ct_status st = CT_OK;
    if (p->slot) {
        ct__slot *s = p->slot;
        ct__deadline dl = ct__deadline_in(c->topo->timeout);
        int rc = 0;
        ct__spin_until(&s->done, 1, c->topo->spin);
        pthread_mutex_lock(&s->mu);
        while (!s->done && !c->g->broken && rc != ETIMEDOUT) rc = ct__cond_wait(&s->cv, &s->mu, &dl);
        int timed_out = !s->done && !c->g->broken;
        int e = s->error || !s->done;
        size_t want = s->bytes;
        s->full = 0;
        s->done = 0;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        p->slot = NULL;
        if (timed_out) return ct__timeout(c, dst, "no answer to our message by");
        if (e && c->g->broken == 2) return broken_err_peer(c, dst);
        if (e)
            st = CT_ERR(&c->err, CT_ERR_MISMATCH,
                        "send of %zu bytes to group rank %d: the receiver expected a different "
                        "size (workers disagree on counts)", want, dst);
        return st;
    }
    if (p->nreq) {
        for (int k = 0; k < p->nreq; k++) {
            int rc = st == CT_OK ? wait_yield(&p->req[k], MPI_STATUS_IGNORE, &p->dl) : -1;
            if (rc == -1) { /* timed out (or an earlier segment failed): give the rest up */
                if (st == CT_OK) st = ct__timeout(c, dst, "no answer to our message by");
                drop_request(&p->req[k]);
            } else if (rc != MPI_SUCCESS && st == CT_OK) {
                st = ct__mpi_err_peer(c, rc, "MPI_Wait (send)", dst);
            }
        }
    }
    if (p->req && p->req != p->one) free(p->req);
    p->req = NULL;
    p->nreq = 0;
    return st;
}

/* ------------------------------------------------------------------ receives */

/* Local: wait for the sender's post; on size mismatch release with an error. */
static ct_status local_take(ct_comm *c, int src, size_t bytes, ct__slot **sp, const void **ptr) {
    ct__slot *s = &c->g->slots[c->g->m[src].local * c->g->nlocal + c->local];
    ct__deadline dl = ct__deadline_in(c->topo->timeout);
    int rc = 0;
    ct__spin_until(&s->full, 1, c->topo->spin);
    pthread_mutex_lock(&s->mu);
    while (!(s->full && !s->done) && !c->g->broken && rc != ETIMEDOUT)
        rc = ct__cond_wait(&s->cv, &s->mu, &dl);
    if (!(s->full && !s->done)) {
        pthread_mutex_unlock(&s->mu);
        return c->g->broken ? broken_err_peer(c, src) : ct__timeout(c, src, "no message from");
    }
    if (s->bytes != bytes) {
        size_t got = s->bytes;
        c->g->broken = 1; /* before the sender can see the error and start its next call */
        s->error = 1;
        s->done = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        ct__group_break(c->g);
        return CT_ERR(&c->err, CT_ERR_MISMATCH,
                      "receive from group rank %d: expected %zu bytes, the sender sent %zu "
                      "(workers disagree on counts)", src, bytes, got);
    }
    *ptr = s->ptr;
    pthread_mutex_unlock(&s->mu);
    *sp = s;
    return CT_OK;
}

static void local_release(ct__slot *s) {
    pthread_mutex_lock(&s->mu);
    s->done = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

typedef struct rposted {
    MPI_Request *req;
    MPI_Request one[1];
    int nreq;
    ct__deadline dl;
} rposted;

static ct_status post_recv_remote(ct_comm *c, int src, void *buf, size_t bytes, rposted *p) {
    const ct__member *s = &c->g->m[src];
    size_t ns = nseg(bytes);
    p->req = ns == 1 ? p->one : ct_malloc(ns * sizeof(MPI_Request));
    p->nreq = 0;
    p->dl = ct__deadline_in(c->topo->timeout);
    if (!p->req) return CT_ERR(&c->err, CT_ERR_NOMEM, "out of host memory (receive requests)");
    int tag = mpi_tag(c, s->thread, c->thread);
    for (size_t k = 0; k < ns; k++) {
        size_t off = k * CT__SEG, len = bytes - off < CT__SEG ? bytes - off : CT__SEG;
        int rc = MPI_Irecv((char *)buf + off, (int)len, MPI_BYTE, s->rank, tag, c->topo->world,
                           &p->req[k]);
        if (rc != MPI_SUCCESS) return ct__mpi_err_peer(c, rc, "MPI_Irecv", src);
        p->nreq++;
    }
    return CT_OK;
}

/* Wait for segment k and check its length. */
static ct_status wait_seg(ct_comm *c, int src, rposted *p, size_t k, size_t bytes) {
    MPI_Status stt;
    int rc = wait_yield(&p->req[k], &stt, &p->dl), cnt = 0;
    size_t off = k * CT__SEG, len = bytes - off < CT__SEG ? bytes - off : CT__SEG;
    if (rc == -1) return ct__timeout(c, src, "no message from"); /* rposted_free cancels */
    if (rc != MPI_SUCCESS) { /* (MPI_Wait leaves status.MPI_ERROR unset) */
        int code = rc, cls = 0;
        MPI_Error_class(code, &cls);
        if (cls == MPI_ERR_TRUNCATE)
            return CT_ERR(&c->err, CT_ERR_MISMATCH,
                          "receive from group rank %d: the sender sent more than the %zu bytes "
                          "expected (workers disagree on counts)", src, bytes);
        return ct__mpi_err_peer(c, code, "MPI_Wait (receive)", src);
    }
    MPI_Get_count(&stt, MPI_BYTE, &cnt);
    if ((size_t)cnt != len)
        return CT_ERR(&c->err, CT_ERR_MISMATCH,
                      "receive from group rank %d: expected %zu bytes, got a segment of %d "
                      "(workers disagree on counts)", src, bytes, cnt);
    return CT_OK;
}

static void rposted_free(rposted *p) {
    for (int k = 0; k < p->nreq; k++) drop_request(&p->req[k]);
    if (p->req && p->req != p->one) free(p->req);
    p->req = NULL;
    p->nreq = 0;
}

static ct_status do_recv(ct_comm *c, int src, void *buf, size_t bytes) {
    ct_status st = CT_OK;
    if (c->g->m[src].local >= 0) {
        ct__slot *s = NULL;
        const void *p = NULL;
        CT_CHECK(local_take(c, src, bytes, &s, &p));
        if (bytes) memcpy(buf, p, bytes);
        local_release(s);
        return CT_OK;
    }
    rposted r = {0};
    st = post_recv_remote(c, src, buf, bytes, &r);
    for (int k = 0; st == CT_OK && k < r.nreq; k++) st = wait_seg(c, src, &r, (size_t)k, bytes);
    rposted_free(&r);
cleanup:
    return st;
}

/* acc op= incoming; if `hold` is a posted send that reads acc, finish it before writing acc. */
static ct_status do_recv_reduce(ct_comm *c, int src, void *acc, size_t count, ct_dtype dt,
                                ct_op op, int dst, posted *hold) {
    ct_status st = CT_OK;
    size_t es = ct_dtype_size(dt), bytes = count * es;
    if (c->g->m[src].local >= 0) {
        ct__slot *s = NULL;
        const void *p = NULL;
        CT_CHECK(local_take(c, src, bytes, &s, &p));
        if (hold) { /* acc is being read by our receiver: take a copy, let both sides go on */
            void *tmp = NULL;
            st = ct__scratch(c, bytes, &tmp);
            if (st == CT_OK && bytes) memcpy(tmp, p, bytes);
            local_release(s);
            ct_status s2 = complete_send(c, dst, hold);
            if (st == CT_OK) st = s2;
            if (st == CT_OK) ct__reduce(dt, op, acc, acc, tmp, count);
            return st;
        }
        ct__reduce(dt, op, acc, acc, p, count);
        local_release(s);
        return CT_OK;
    }
    void *tmp = NULL;
    rposted r = {0};
    CT_CHECK(ct__scratch(c, bytes ? bytes : 1, &tmp));
    st = post_recv_remote(c, src, tmp, bytes, &r);
    if (st == CT_OK && hold) st = complete_send(c, dst, hold);
    for (int k = 0; st == CT_OK && k < r.nreq; k++) {
        st = wait_seg(c, src, &r, (size_t)k, bytes);
        if (st == CT_OK) {
            size_t off = (size_t)k * CT__SEG, len = bytes - off < CT__SEG ? bytes - off : CT__SEG;
            ct__reduce(dt, op, (char *)acc + off, (char *)acc + off, (char *)tmp + off, len / es);
        }
    }
    rposted_free(&r);
cleanup:
    return st;
}

/* ------------------------------------------------------------------ the primitives */

ct_status ct__p2p_send(ct_comm *c, int dst, const void *buf, size_t bytes) {
    ct_status st;
    posted p;
    if ((st = check_peer(c, dst, "send"))) return st;
    if ((st = post_send(c, dst, buf, bytes, &p))) {
        complete_send(c, dst, &p);
        return st;
    }
    return complete_send(c, dst, &p);
}

ct_status ct__p2p_recv(ct_comm *c, int src, void *buf, size_t bytes) {
    ct_status st;
    if ((st = check_peer(c, src, "recv"))) return st;
    return do_recv(c, src, buf, bytes);
}

ct_status ct__p2p_recv_reduce(ct_comm *c, int src, void *acc, size_t count, ct_dtype dt,
                              ct_op op) {
    ct_status st;
    if ((st = check_peer(c, src, "recv"))) return st;
    return do_recv_reduce(c, src, acc, count, dt, op, -1, NULL);
}

ct_status ct__p2p_sendrecv(ct_comm *c, int dst, const void *sbuf, size_t sbytes, int src,
                           void *rbuf, size_t rbytes) {
    ct_status st, s2;
    posted p;
    if ((st = check_peer(c, dst, "sendrecv")) || (st = check_peer(c, src, "sendrecv"))) return st;
    if ((st = post_send(c, dst, sbuf, sbytes, &p))) {
        complete_send(c, dst, &p);
        return st;
    }
    st = do_recv(c, src, rbuf, rbytes);
    s2 = complete_send(c, dst, &p);
    return st ? st : s2;
}

ct_status ct__p2p_sendrecv_reduce(ct_comm *c, int dst, const void *sbuf, size_t sbytes, int src,
                                  void *acc, size_t count, ct_dtype dt, ct_op op) {
    ct_status st, s2 = CT_OK;
    posted p;
    size_t abytes = count * ct_dtype_size(dt);
    if ((st = check_peer(c, dst, "sendrecv")) || (st = check_peer(c, src, "sendrecv"))) return st;
    if ((st = post_send(c, dst, sbuf, sbytes, &p))) {
        complete_send(c, dst, &p);
        return st;
    }
    const char *a0 = acc, *s0 = sbuf;
    int overlap = sbytes && abytes && a0 < s0 + sbytes && s0 < a0 + abytes;
    st = do_recv_reduce(c, src, acc, count, dt, op, dst, overlap ? &p : NULL);
    if (!overlap || p.slot || p.nreq) s2 = complete_send(c, dst, &p);
    return st ? st : s2;
}

/* ------------------------------------------------------------------ public wrappers */

ct_status ct_comm_send(ct_comm *c, int dst, const void *buf, size_t bytes) {
    if (!c) return CT_ERR_ARG;
    snprintf(c->op, sizeof c->op, "send to group rank %d", dst);
    if (!buf && bytes) return CT_ERR(&c->err, CT_ERR_ARG, "ct_comm_send: buf is NULL");
    return ct__p2p_send(c, dst, buf, bytes);
}

ct_status ct_comm_recv(ct_comm *c, int src, void *buf, size_t bytes) {
    if (!c) return CT_ERR_ARG;
    snprintf(c->op, sizeof c->op, "receive from group rank %d", src);
    if (!buf && bytes) return CT_ERR(&c->err, CT_ERR_ARG, "ct_comm_recv: buf is NULL");
    return ct__p2p_recv(c, src, buf, bytes);
}

ct_status ct_comm_sendrecv(ct_comm *c, int dst, const void *sbuf, size_t sbytes, int src,
                           void *rbuf, size_t rbytes) {
    if (!c) return CT_ERR_ARG;
    snprintf(c->op, sizeof c->op, "sendrecv");
    if ((!sbuf && sbytes) || (!rbuf && rbytes))
        return CT_ERR(&c->err, CT_ERR_ARG, "ct_comm_sendrecv: NULL buffer");
    return ct__p2p_sendrecv(c, dst, sbuf, sbytes, src, rbuf, rbytes);
}

/* ------------------------------------------------------------------ non-blocking channel */

struct ct_request {
    ct_comm *c;
    int send;   /* 1: a send, 0: a receive */
    int peer;   /* group rank */
    const void *sbuf;
    void *rbuf;
    size_t bytes;
    /* between threads: the channel, the sequence number on it, the queue link (sends) */
    ct__chan *ch;
    uint64_t seq;
    struct ct_request *next;
    int done;       /* complete (under ch->mu) */
    int taken;      /* a send being copied by its receiver (under ch->mu) */
    size_t other;   /* the size the other side posted, on a mismatch */
    int mismatch;
    /* between processes: one request per segment */
    MPI_Request *mreq;
    MPI_Request one[1];
    int nreq, ndone;
    ct_status st;
};

static int nb_tag(const ct_comm *c, int src_thread, int dst_thread) {
    return mpi_tag(c, src_thread, dst_thread) | c->topo->tag_nb;
}

static ct_status nb_new(ct_comm *c, int send, int peer, const void *sbuf, void *rbuf, size_t bytes,
                        ct_request **out) {
    ct_status st;
    *out = NULL;
    if ((st = check_peer(c, peer, send ? "isend" : "irecv"))) return st;
    if (bytes && (send ? sbuf == NULL : rbuf == NULL))
        return CT_ERR(&c->err, CT_ERR_ARG, "ct_comm_%s: buf is NULL", send ? "isend" : "irecv");
    if (bytes > (size_t)INT32_MAX * CT__SEG)
        return CT_ERR(&c->err, CT_ERR_ARG, "ct_comm_%s: %zu bytes is too large", send ? "isend" : "irecv",
                      bytes);
    ct_request *r = ct_calloc(1, sizeof *r);
    if (!r) return CT_ERR(&c->err, CT_ERR_NOMEM, "ct_comm_%s: out of host memory", send ? "isend" : "irecv");
    r->c = c, r->send = send, r->peer = peer, r->sbuf = sbuf, r->rbuf = rbuf, r->bytes = bytes;
    *out = r;
    return CT_OK;
}

static void nb_free(ct_request *r) {
    if (!r) return;
    if (r->mreq && r->mreq != r->one) free(r->mreq);
    free(r);
}

/* Post the segments of a message to another process. */
static ct_status nb_post_remote(ct_request *r) {
    ct_comm *c = r->c;
    const ct__member *p = &c->g->m[r->peer];
    size_t ns = nseg(r->bytes);
    r->mreq = ns == 1 ? r->one : ct_malloc(ns * sizeof(MPI_Request));
    if (!r->mreq) return CT_ERR(&c->err, CT_ERR_NOMEM, "point-to-point requests");
    int tag = r->send ? nb_tag(c, c->thread, p->thread) : nb_tag(c, p->thread, c->thread);
    for (size_t k = 0; k < ns; k++) {
        size_t off = k * CT__SEG, len = r->bytes - off < CT__SEG ? r->bytes - off : CT__SEG;
        int rc = r->send ? MPI_Isend((const char *)r->sbuf + off, (int)len, MPI_BYTE, p->rank, tag,
                                     c->topo->world, &r->mreq[k])
                         : MPI_Irecv((char *)r->rbuf + off, (int)len, MPI_BYTE, p->rank, tag,
                                     c->topo->world, &r->mreq[k]);
        if (rc != MPI_SUCCESS) {
            for (size_t j = 0; j < k; j++) { /* nothing half-posted is left behind */
                MPI_Cancel(&r->mreq[j]);
                MPI_Request_free(&r->mreq[j]);
            }
            return ct__mpi_err_peer(c, rc, r->send ? "MPI_Isend" : "MPI_Irecv", r->peer);
        }
        r->nreq++;
    }
    return CT_OK;
}

ct_status ct_comm_isend(ct_comm *c, int dst, const void *buf, size_t bytes, ct_request **req) {
    if (!c || !req) return CT_ERR_ARG;
    ct_request *r = NULL;
    ct_status st = nb_new(c, 1, dst, buf, NULL, bytes, &r);
    if (st) return st;
    const ct__member *d = &c->g->m[dst];
    if (d->local >= 0) {
        ct__chan *ch = &c->g->chans[c->local * c->g->nlocal + d->local];
        r->ch = ch;
        pthread_mutex_lock(&ch->mu);
        r->seq = ch->nsent++;
        if (ch->tail) ch->tail->next = r;
        else ch->head = r;
        ch->tail = r;
        pthread_cond_broadcast(&ch->cv);
        pthread_mutex_unlock(&ch->mu);
    } else if ((st = nb_post_remote(r)) != CT_OK) {
        nb_free(r);
        return st;
    }
    *req = r;
    return CT_OK;
}

ct_status ct_comm_irecv(ct_comm *c, int src, void *buf, size_t bytes, ct_request **req) {
    if (!c || !req) return CT_ERR_ARG;
    ct_request *r = NULL;
    ct_status st = nb_new(c, 0, src, NULL, buf, bytes, &r);
    if (st) return st;
    const ct__member *s = &c->g->m[src];
    if (s->local >= 0) {
        ct__chan *ch = &c->g->chans[s->local * c->g->nlocal + c->local];
        r->ch = ch;
        pthread_mutex_lock(&ch->mu);
        r->seq = ch->nrecv++;
        pthread_mutex_unlock(&ch->mu);
    } else if ((st = nb_post_remote(r)) != CT_OK) {
        nb_free(r);
        return st;
    }
    *req = r;
    return CT_OK;
}

/* Take a posted send off its channel's queue (ch->mu held): a send given up on (a timeout). */
static void chan_unlink(ct__chan *ch, ct_request *r) {
    ct_request *s = ch->head, *prev = NULL;
    while (s && s != r) prev = s, s = s->next;
    if (!s) return;
    if (prev) prev->next = s->next;
    else ch->head = s->next;
    if (ch->tail == s) ch->tail = prev;
    s->next = NULL;
}

/* A local receive (ch->mu held): take its send off the queue if it has been posted, copy outside
 * the lock (the sender may post more meanwhile), then complete both. Returns 1 when done. */
static int local_try_recv(ct_request *r) {
    ct__chan *ch = r->ch;
    if (r->done) return 1;
    ct_request *s = ch->head, *prev = NULL;
    while (s && s->seq != r->seq) prev = s, s = s->next;
    if (!s) return 0;
    if (prev) prev->next = s->next;
    else ch->head = s->next;
    if (ch->tail == s) ch->tail = prev;
    s->next = NULL;
    s->taken = 1;
    if (s->bytes != r->bytes) {
        s->mismatch = r->mismatch = 1;
        s->other = r->bytes, r->other = s->bytes;
    } else if (r->bytes) {
        pthread_mutex_unlock(&ch->mu);
        memcpy(r->rbuf, s->sbuf, r->bytes);
        pthread_mutex_lock(&ch->mu);
    }
    s->done = r->done = 1;
    pthread_cond_broadcast(&ch->cv);
    return 1;
}

static ct_status local_result(ct_request *r) {
    if (!r->mismatch) return CT_OK;
    if (r->send)
        return CT_ERR(&r->c->err, CT_ERR_MISMATCH,
                      "isend of %zu bytes to group rank %d: the receiver expected %zu (workers "
                      "disagree on counts)", r->bytes, r->peer, r->other);
    return CT_ERR(&r->c->err, CT_ERR_MISMATCH,
                  "irecv from group rank %d: expected %zu bytes, the sender sent %zu (workers "
                  "disagree on counts)", r->peer, r->bytes, r->other);
}

/* Check a completed remote segment's length (receives). */
static ct_status remote_seg_done(ct_request *r, int k, MPI_Status *stt) {
    if (r->send) return CT_OK;
    int cnt = 0;
    size_t off = (size_t)k * CT__SEG, len = r->bytes - off < CT__SEG ? r->bytes - off : CT__SEG;
    MPI_Get_count(stt, MPI_BYTE, &cnt);
    if ((size_t)cnt != len)
        return CT_ERR(&r->c->err, CT_ERR_MISMATCH,
                      "irecv from group rank %d: expected %zu bytes, got a segment of %d (workers "
                      "disagree on counts)", r->peer, r->bytes, cnt);
    return CT_OK;
}

static ct_status remote_err(ct_request *r, int rc) {
    int cls = 0;
    MPI_Error_class(rc, &cls);
    if (!r->send && cls == MPI_ERR_TRUNCATE)
        return CT_ERR(&r->c->err, CT_ERR_MISMATCH,
                      "irecv from group rank %d: the sender sent more than the %zu bytes expected "
                      "(workers disagree on counts)", r->peer, r->bytes);
    return ct__mpi_err_peer(r->c, rc, r->send ? "MPI_Wait (isend)" : "MPI_Wait (irecv)", r->peer);
}

ct_status ct_comm_test(ct_request *r, int *done) {
    *done = 0;
    if (!r) return CT_ERR_ARG;
    if (r->ch) {
        pthread_mutex_lock(&r->ch->mu);
        *done = r->send ? r->done : local_try_recv(r);
        pthread_mutex_unlock(&r->ch->mu);
        return *done ? local_result(r) : CT_OK;
    }
    while (r->ndone < r->nreq && r->st == CT_OK) {
        int flag = 0;
        MPI_Status stt;
        int rc = MPI_Test(&r->mreq[r->ndone], &flag, &stt);
        if (rc != MPI_SUCCESS) r->st = remote_err(r, rc);
        else if (!flag) break;
        else r->st = remote_seg_done(r, r->ndone++, &stt);
    }
    *done = r->ndone == r->nreq || r->st != CT_OK;
    return r->st;
}

ct_status ct_comm_wait(ct_request *r) {
    if (!r) return CT_OK;
    ct_status st = CT_OK;
    ct_comm *c = r->c;
    ct__deadline dl = ct__deadline_in(c->topo->timeout);
    const char *what = r->send ? "our message was not taken by" : "no message from";
    snprintf(c->op, sizeof c->op, "wait for the %s %s group rank %d", r->send ? "isend" : "irecv",
             r->send ? "to" : "from", r->peer);
    if (r->ch) {
        ct__chan *ch = r->ch;
        int rc = 0, late = 0;
        pthread_mutex_lock(&ch->mu);
        for (;;) {
            if (r->send ? r->done : local_try_recv(r)) break;
            int copying = r->send && r->taken; /* the receiver is copying it: moments away */
            if (late && !copying) break;
            rc = copying ? pthread_cond_wait(&ch->cv, &ch->mu) : ct__cond_wait(&ch->cv, &ch->mu, &dl);
            if (rc == ETIMEDOUT) late = 1;
        }
        int timed_out = !r->done;
        if (timed_out && r->send) { /* off the queue: nobody may copy from it after we return */
            chan_unlink(ch, r);
        }
        pthread_mutex_unlock(&ch->mu);
        st = timed_out ? ct__timeout(c, r->peer, what) : local_result(r);
    } else {
        st = r->st;
        for (; r->ndone < r->nreq; r->ndone++) {
            MPI_Request *q = &r->mreq[r->ndone];
            if (st != CT_OK) { /* an earlier segment failed (or timed out): drop the rest */
                drop_request(q);
                continue;
            }
            MPI_Status stt;
            int rc = wait_yield(q, &stt, &dl);
            if (rc == -1) {
                st = ct__timeout(c, r->peer, what);
                drop_request(q);
                continue;
            }
            st = rc != MPI_SUCCESS ? remote_err(r, rc) : remote_seg_done(r, r->ndone, &stt);
        }
    }
    nb_free(r);
    return st;
}
