/* allreduce_hier.c - hierarchical all-reduce: threads of a process through shared memory, one
 * leader per process across ranks, then back through shared memory.
 * Phases: (1) each of the L local members publishes its input pointer; (2) member t reduces
 * slice t of all L inputs (in local order) into the group's shared scratch - a reduce-scatter
 * that reads every input once, no messages; (3) the first member of each process all-reduces the
 * scratch with the other processes' leaders (the selector's algorithm for that size on the
 * leaders' group); (4) every member copies the scratch out. Barriers separate the phases.
 * Cost: intra-process about (L+1)/L N read + N/L write per member, plus 3 barriers; inter: the
 * leaders' algorithm on N bytes with nprocs workers.
 * Threads only (one process): member t reduces slice t of all inputs in cache-sized pieces and
 * writes each piece straight into every member's output - N read + N written per member, the
 * least any all-reduce can move, no scratch, two barriers. Slices are disjoint, so in place is
 * safe: nobody reads a slice another member writes. Each element is computed once per process in a fixed order and
 * the leaders' algorithm gives all leaders the same bits, so every worker holds the same bits. */
#include <stdlib.h>
#include <string.h>

#include "parallel_impl.h"

const ct__algo *ct__select_inner(const ct_comm *c, size_t bytes);

static ct_status inner(ct_comm *lc, void *buf, size_t count, ct_dtype dt, ct_op op) {
    const ct__algo *a = ct__select_inner(lc, count * ct_dtype_size(dt));
    ct_status st = ((ct__allreduce_fn)a->fn)(lc, buf, buf, count, dt, op);
    return st;
}

#define PIECE 8192 /* elements reduced in cache before being written out */
#define STREAM_MIN ((size_t)4 << 20) /* bytes: above, outputs bypass the cache */

static ct_status direct(ct_comm *c, size_t count, ct_dtype dt, ct_op op) {
    ct_status st = CT_OK;
    ct__group *g = c->g;
    size_t es = ct_dtype_size(dt);
    int L = g->nlocal, me = c->local;
    void *tmp = NULL;
    ct_status sst = ct__scratch(c, PIECE * es, &tmp);
    if ((st = ct__local_barrier(c)) != CT_OK) return st; /* a timeout or a broken group */
    for (int u = 0; u < L; u++)
        if (g->counts[u] != count)
            st = CT_ERR(&c->err, CT_ERR_MISMATCH, "hierarchical all-reduce: local member %d "
                        "passed count %zu, this one %zu (workers disagree on counts)", u,
                        g->counts[u], count);
    if (!st) st = sst;
    if (!st) {
        size_t lo = ct__part(count, L, me), hi = ct__part(count, L, me + 1);
        int stream = count * es >= STREAM_MIN;
        for (size_t off = lo; off < hi; off += PIECE) {
            size_t len = hi - off < PIECE ? hi - off : PIECE, b = off * es;
            ct__reduce(dt, op, tmp, (char *)g->ptrs[0] + b, (char *)g->ptrs[1] + b, len);
            for (int u = 2; u < L; u++) ct__reduce(dt, op, tmp, tmp, (char *)g->ptrs[u] + b, len);
            for (int u = 0; u < L; u++) {
                if (stream) ct__copy_stream((char *)g->rptrs[u] + b, tmp, len * es);
                else memcpy((char *)g->rptrs[u] + b, tmp, len * es);
            }
        }
        if (stream) ct__stream_fence();
    }
    ct_status bst = ct__local_barrier(c); /* every output complete; pointers free for the next call */
    return st ? st : bst;
}

ct_status ct__allreduce_hier(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt,
                             ct_op op) {
    ct_status st = CT_OK;
    ct__group *g = c->g;
    size_t es = ct_dtype_size(dt), bytes = count * es;
    int L = g->nlocal, me = c->local;
    if (g->one_per_rank || L == 1) {
        /* one member here: my buffer is the process's contribution */
        if (send != recv) memcpy(recv, send, bytes);
        if (g->one_per_rank) return c->size == 1 ? CT_OK : inner(c, recv, count, dt, op);
        memcpy(c->leaders->op, c->op, sizeof c->op);
        st = inner(c->leaders, recv, count, dt, op);
        if (st) CT_ERR(&c->err, st, "%s", c->leaders->err.msg);
        return st;
    }
    /* (1) publish; the leader sizes the shared scratch (nobody uses it between calls) */
    g->ptrs[me] = (void *)send;
    g->rptrs[me] = recv;
    g->counts[me] = count;
    if (g->nprocs == 1) return direct(c, count, dt, op);
    int grow_failed = 0;
    if (me == 0 && g->scratch_cap < bytes) {
        void *p = ct_realloc(g->scratch, bytes);
        if (p) {
            g->scratch = p;
            g->scratch_cap = bytes;
        } else {
            grow_failed = 1;
        }
    }
    if ((st = ct__local_barrier(c)) != CT_OK) return st;
    for (int u = 0; u < L; u++)
        if (g->counts[u] != count) { /* every local member sees the same table */
            if ((st = ct__local_barrier(c)) != CT_OK) return st;
            return CT_ERR(&c->err, CT_ERR_MISMATCH, "hierarchical all-reduce: local member %d "
                          "passed count %zu, this one %zu (workers disagree on counts)", u,
                          g->counts[u], count);
        }
    if (g->scratch_cap < bytes || grow_failed) {
        if ((st = ct__local_barrier(c)) != CT_OK) return st;
        return CT_ERR(&c->err, CT_ERR_NOMEM, "out of host memory (hierarchical scratch of %zu bytes)", bytes);
    }
    /* (2) slice reduce */
    size_t lo = ct__part(count, L, me), hi = ct__part(count, L, me + 1);
    char *s = (char *)g->scratch + lo * es;
    if (hi > lo) {
        if (L == 1) memcpy(s, (char *)g->ptrs[0] + lo * es, (hi - lo) * es);
        else ct__reduce(dt, op, s, (char *)g->ptrs[0] + lo * es, (char *)g->ptrs[1] + lo * es, hi - lo);
        for (int u = 2; u < L; u++) ct__reduce(dt, op, s, s, (char *)g->ptrs[u] + lo * es, hi - lo);
    }
    if ((st = ct__local_barrier(c)) != CT_OK) return st;
    /* (3) leaders */
    ct_status ist = CT_OK;
    if (c->leaders) {
        memcpy(c->leaders->op, c->op, sizeof c->op); /* a timeout there names this call */
        ist = inner(c->leaders, g->scratch, count, dt, op);
        if (ist) CT_ERR(&c->err, ist, "%s", c->leaders->err.msg);
    }
    if (ist) g->ptrs[0] = NULL; /* tell the others (read after the barrier) */
    if ((st = ct__local_barrier(c)) != CT_OK) return ist ? ist : st;
    if (g->ptrs[0] == NULL && c->leaders == NULL && g->nprocs > 1)
        st = CT_ERR(&c->err, CT_ERR_MPI, "hierarchical all-reduce: this process's leader failed");
    else if (ist)
        st = ist;
    else
        memcpy(recv, g->scratch, bytes); /* (4) */
    ct_status bst = ct__local_barrier(c);
    return st ? st : bst;
}
