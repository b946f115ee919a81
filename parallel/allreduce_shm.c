/* allreduce_shm.c - all-reduce for ranks that share a node, through an MPI-3 shared-memory window
 * (one segment per rank, mapped by every rank of the group).
 * Phases: (1) each rank copies its input into its segment; barrier; (2) rank r reduces slice r of
 * every segment in cache-sized pieces, in rank order, and writes the piece back into slice r of its
 * own segment (nobody else reads that slice); barrier; (3) every rank copies slice q of segment q,
 * for all q, into its output; barrier (segments are reused by the next call).
 * Cost: 3 barriers (dissemination over our yielding p2p: 3 ceil(lg n) alpha) + about 5N bytes of
 * memory traffic per rank (copy in, reduce, copy out) and no message carrying data - against
 * roughly 2 x 2(n-1)/n N of copies through MPI's shared-memory transport for a ring.
 * Valid when each rank holds one worker of the group and all of them share a node. Each element
 * is computed once: every worker holds the same bits. The window grows (collectively, all members
 * agree because they pass the same count) to the largest size seen. */
#include <string.h>

#include "parallel_impl.h"

#define PIECE 8192 /* elements */

static ct_status shm_grow(ct_comm *c, size_t bytes) {
    ct__group *g = c->g;
    if (g->shm_cap >= bytes) return CT_OK;
    if (g->shm_win != MPI_WIN_NULL) {
        MPI_Win_unlock_all(g->shm_win);
        MPI_Win_free(&g->shm_win);
        g->shm_cap = 0;
    }
    size_t cap = (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
    void *base = NULL;
    int rc = MPI_Win_allocate_shared((MPI_Aint)cap, 1, MPI_INFO_NULL, g->mpi, &base, &g->shm_win);
    if (rc != MPI_SUCCESS) {
        g->shm_win = MPI_WIN_NULL;
        return ct__mpi_err(c, rc, "MPI_Win_allocate_shared");
    }
    for (int q = 0; q < g->n; q++) {
        MPI_Aint sz = 0;
        int disp = 0;
        void *p = NULL;
        MPI_Win_shared_query(g->shm_win, q, &sz, &disp, &p);
        g->shm_seg[q] = p;
    }
    MPI_Win_lock_all(MPI_MODE_NOCHECK, g->shm_win);
    g->shm_cap = cap;
    return CT_OK;
}

static ct_status sync_all(ct_comm *c) {
    MPI_Win_sync(c->g->shm_win); /* make my stores visible, see the others' */
    ct_status st = ct__barrier_dissemination(c);
    MPI_Win_sync(c->g->shm_win);
    return st;
}

ct_status ct__allreduce_shm(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt,
                            ct_op op) {
    ct_status st = CT_OK;
    ct__group *g = c->g;
    size_t es = ct_dtype_size(dt), bytes = count * es;
    int n = c->size, r = c->rank;
    void *tmp = NULL;
    if ((st = ct__need_mpi_comm(c, "shm"))) return st;
    if (!g->one_node)
        return CT_ERR(&c->err, CT_ERR_UNSUPPORTED, "algorithm \"shm\" needs every rank of the group "
                      "on one node");
    if (n == 1) {
        if (send != recv) memcpy(recv, send, bytes);
        return CT_OK;
    }
    CT_CHECK(shm_grow(c, bytes));
    CT_CHECK(ct__scratch(c, PIECE * es, &tmp));
    memcpy(g->shm_seg[r], send, bytes); /* (1) */
    CT_CHECK(sync_all(c));
    size_t lo = ct__part(count, n, r), hi = ct__part(count, n, r + 1); /* (2) */
    for (size_t off = lo; off < hi; off += PIECE) {
        size_t len = hi - off < PIECE ? hi - off : PIECE, b = off * es;
        ct__reduce(dt, op, tmp, (char *)g->shm_seg[0] + b, (char *)g->shm_seg[1] + b, len);
        for (int q = 2; q < n; q++) ct__reduce(dt, op, tmp, tmp, (char *)g->shm_seg[q] + b, len);
        memcpy((char *)g->shm_seg[r] + b, tmp, len * es);
    }
    CT_CHECK(sync_all(c));
    for (int q = 0; q < n; q++) { /* (3) */
        size_t qlo = ct__part(count, n, q), qhi = ct__part(count, n, q + 1);
        memcpy((char *)recv + qlo * es, (char *)g->shm_seg[q] + qlo * es, (qhi - qlo) * es);
    }
    CT_CHECK(sync_all(c));
cleanup:
    return st;
}
