/* allreduce_hier.c - hierarchical all-reduce over three levels: threads of a process through
 * shared memory, the processes of a host, then one leader per host across hosts; then back.
 * Phases: (1) each of the L local members publishes its input pointer; (2) member t reduces
 * slice t of all L inputs (in local order) into the group's shared scratch - a reduce-scatter
 * that reads every input once, no messages; (3) the first member of each process all-reduces the
 * scratch with the other processes' leaders (`procs` below); (4) every member copies the scratch
 * out. Barriers separate the phases.
 * The processes' level (3), on a group with one member per process (the leaders, or a group of
 * one worker per process): when it spans several hosts and some host holds several of its
 * processes, (3a) the processes of each host all-reduce among themselves (on one host: the
 * selector's algorithm there, shared memory), (3b) the first process of each host all-reduces
 * across hosts, (3c) it broadcasts the result to its host's processes; otherwise the selector's
 * algorithm over all of them. Only (3b) crosses the network: 2(H-1)/H N per host for H hosts
 * with the ring, where a flat all-reduce over the P processes moves about 2N through each host's
 * link. Cost: intra-process about (L+1)/L N read + N/L write per member, plus 3 barriers; (3a)
 * and (3c) two intra-host collectives on N bytes; (3b) the hosts' algorithm on N bytes.
 * Threads only (one process): member t reduces slice t of all inputs in cache-sized pieces and
 * writes each piece straight into every member's output - N read + N written per member, the
 * least any all-reduce can move, no scratch, two barriers. Slices are disjoint, so in place is
 * safe: nobody reads a slice another member writes. Each element is computed once per process in
 * a fixed order, each level's algorithm gives its members the same bits and (3c) copies the
 * hosts' result, so every worker holds the same bits. */
#include <stdlib.h>
#include <string.h>

#include "parallel_impl.h"

const ct__algo *ct__select_inner(const ct_comm *c, size_t bytes);

static ct_status inner(ct_comm *lc, void *buf, size_t count, ct_dtype dt, ct_op op) {
    const ct__algo *a = ct__select_inner(lc, count * ct_dtype_size(dt));
    ct_status st = ((ct__allreduce_fn)a->fn)(lc, buf, buf, count, dt, op);
    return st;
}

/* st from sub-comm s of c: a failure's message is recorded on c too. */
static ct_status on_sub(ct_comm *c, ct_comm *s, ct_status st) {
    if (st && s != c) CT_ERR(&c->err, st, "%s", s->err.msg);
    return st;
}

/* (3) The processes' level on pc (one member per process): see the header. */
static ct_status procs(ct_comm *pc, void *buf, size_t count, ct_dtype dt, ct_op op) {
    if (pc->size == 1) return CT_OK;
    if (!pc->node) return on_sub(pc, pc, inner(pc, buf, count, dt, op));
    ct_comm *node = pc->node;
    ct_status st = CT_OK;
    int32_t ok = 1;
    memcpy(node->op, pc->op, sizeof pc->op);
    if (node->size > 1 && (st = on_sub(pc, node, inner(node, buf, count, dt, op))))
        return st; /* (3a) */
    if (pc->hosts) { /* (3b) */
        memcpy(pc->hosts->op, pc->op, sizeof pc->op);
        st = on_sub(pc, pc->hosts, inner(pc->hosts, buf, count, dt, op));
        ok = st == CT_OK;
    }
    if (node->size == 1) return st;
    /* (3c) whether the hosts' level worked, then its result (the host's processes never wait
       for data that will not come) */
    ct_status bst = on_sub(pc, node, ct__bcast_binomial(node, &ok, 1, CT_I32, 0));
    if (st || bst) return st ? st : bst;
    if (!ok) return CT_ERR(&pc->err, CT_ERR_MPI, "hierarchical all-reduce: this host's leader "
                           "failed in the all-reduce across hosts");
    return on_sub(pc, node, ct__bcast_binomial(node, buf, count, dt, 0));
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
        if (g->one_per_rank) return procs(c, recv, count, dt, op);
        memcpy(c->leaders->op, c->op, sizeof c->op);
        st = procs(c->leaders, recv, count, dt, op);
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
        ist = procs(c->leaders, g->scratch, count, dt, op);
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
