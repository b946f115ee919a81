/* coll_mpi.c - the "mpi" algorithm of every collective: MPI's own implementation on the group's
 * MPI communicator, which exists only when each rank holds one worker of the group. Baseline for
 * bench_allreduce and reference for tests. Counts beyond INT_MAX are cut into pieces
 * (all-reduce) or refused (others). */
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "parallel_impl.h"

static ct_status too_big(ct_comm *c, size_t count) {
    if (count > INT_MAX)
        return CT_ERR(&c->err, CT_ERR_UNSUPPORTED, "mpi: count %zu exceeds INT_MAX", count);
    return CT_OK;
}

ct_status ct__allreduce_mpi(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt,
                            ct_op op) {
    ct_status st;
    size_t es = ct_dtype_size(dt);
    if ((st = ct__need_mpi_comm(c, "mpi"))) return st;
    for (size_t off = 0; off < count; off += INT_MAX / 2) {
        size_t len = count - off < INT_MAX / 2 ? count - off : INT_MAX / 2;
        const void *s = send == recv ? MPI_IN_PLACE : (const char *)send + off * es;
        int rc = MPI_Allreduce(s, (char *)recv + off * es, (int)len, ct__mpi_type(dt),
                               ct__mpi_op(op), c->g->mpi);
        if (rc != MPI_SUCCESS) return ct__mpi_err(c, rc, "MPI_Allreduce");
    }
    return CT_OK;
}

ct_status ct__reducescatter_mpi(ct_comm *c, const void *send, void *recv, size_t count,
                                ct_dtype dt, ct_op op) {
    ct_status st;
    if ((st = ct__need_mpi_comm(c, "mpi")) || (st = too_big(c, count))) return st;
    int rc = MPI_Reduce_scatter_block(send == recv ? MPI_IN_PLACE : send, recv, (int)count,
                                      ct__mpi_type(dt), ct__mpi_op(op), c->g->mpi);
    return rc == MPI_SUCCESS ? CT_OK : ct__mpi_err(c, rc, "MPI_Reduce_scatter_block");
}

ct_status ct__allgather_mpi(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt) {
    ct_status st;
    size_t es = ct_dtype_size(dt);
    if ((st = ct__need_mpi_comm(c, "mpi")) || (st = too_big(c, count * (size_t)c->size))) return st;
    int inplace = send == (const char *)recv + (size_t)c->rank * count * es;
    int rc = MPI_Allgather(inplace ? MPI_IN_PLACE : send, (int)count, ct__mpi_type(dt), recv,
                           (int)count, ct__mpi_type(dt), c->g->mpi);
    return rc == MPI_SUCCESS ? CT_OK : ct__mpi_err(c, rc, "MPI_Allgather");
}

ct_status ct__alltoall_mpi(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt) {
    ct_status st;
    if ((st = ct__need_mpi_comm(c, "mpi")) || (st = too_big(c, count * (size_t)c->size))) return st;
    int rc = MPI_Alltoall(send == recv ? MPI_IN_PLACE : send, (int)count, ct__mpi_type(dt), recv,
                          (int)count, ct__mpi_type(dt), c->g->mpi);
    return rc == MPI_SUCCESS ? CT_OK : ct__mpi_err(c, rc, "MPI_Alltoall");
}

ct_status ct__alltoallv_mpi(ct_comm *c, const void *send, const size_t *sc, const size_t *sd,
                            void *recv, const size_t *rc_, const size_t *rd, ct_dtype dt) {
    ct_status st = CT_OK;
    int n = c->size, *v = NULL, rc;
    if ((st = ct__need_mpi_comm(c, "mpi"))) return st;
    v = ct_malloc(sizeof(int) * 4 * (size_t)n);
    if (!v) return CT_ERR(&c->err, CT_ERR_NOMEM, "out of host memory (alltoallv counts)");
    for (int i = 0; i < n; i++) {
        if (sc[i] > INT_MAX || sd[i] > INT_MAX || rc_[i] > INT_MAX || rd[i] > INT_MAX) {
            free(v);
            return too_big(c, (size_t)INT_MAX + 1);
        }
        v[i] = (int)sc[i];
        v[n + i] = (int)sd[i];
        v[2 * n + i] = (int)rc_[i];
        v[3 * n + i] = (int)rd[i];
    }
    rc = MPI_Alltoallv(send == recv ? MPI_IN_PLACE : send, v, v + n, ct__mpi_type(dt), recv,
                       v + 2 * n, v + 3 * n, ct__mpi_type(dt), c->g->mpi);
    free(v);
    return rc == MPI_SUCCESS ? CT_OK : ct__mpi_err(c, rc, "MPI_Alltoallv");
}

/* counts as ints (MPI's), v[0..n), and their running sum v[n..2n); CT_ERR_UNSUPPORTED past
 * INT_MAX. *v is malloc'd. */
static ct_status int_counts(ct_comm *c, const size_t *counts, int **v) {
    int n = c->size;
    size_t at = 0;
    *v = ct_malloc(sizeof(int) * 2 * (size_t)n);
    if (!*v) return CT_ERR(&c->err, CT_ERR_NOMEM, "out of host memory (counts)");
    for (int i = 0; i < n; i++) {
        if (counts[i] > INT_MAX || at > INT_MAX) {
            free(*v);
            *v = NULL;
            return too_big(c, (size_t)INT_MAX + 1);
        }
        (*v)[i] = (int)counts[i];
        (*v)[n + i] = (int)at;
        at += counts[i];
    }
    return at > INT_MAX ? (free(*v), *v = NULL, too_big(c, at)) : CT_OK;
}

ct_status ct__reducescatterv_mpi(ct_comm *c, const void *send, void *recv, const size_t *counts,
                                 ct_dtype dt, ct_op op) {
    ct_status st;
    int *v = NULL;
    void *tmp = NULL;
    if ((st = ct__need_mpi_comm(c, "mpi")) || (st = int_counts(c, counts, &v))) return st;
    /* MPI's result goes to a buffer of its own: recv may lie inside send */
    size_t bytes = counts[c->rank] * ct_dtype_size(dt);
    if ((st = ct__scratch(c, bytes + 1, &tmp)) != CT_OK) {
        free(v);
        return st;
    }
    int rc = MPI_Reduce_scatter(send, tmp, v, ct__mpi_type(dt), ct__mpi_op(op), c->g->mpi);
    free(v);
    if (rc != MPI_SUCCESS) return ct__mpi_err(c, rc, "MPI_Reduce_scatter");
    if (bytes) memcpy(recv, tmp, bytes);
    return CT_OK;
}

ct_status ct__allgatherv_mpi(ct_comm *c, const void *send, void *recv, const size_t *counts,
                             ct_dtype dt) {
    ct_status st;
    int *v = NULL, n = c->size;
    if ((st = ct__need_mpi_comm(c, "mpi")) || (st = int_counts(c, counts, &v))) return st;
    int inplace = send == (const char *)recv + (size_t)v[n + c->rank] * ct_dtype_size(dt);
    int rc = MPI_Allgatherv(inplace ? MPI_IN_PLACE : send, v[c->rank], ct__mpi_type(dt), recv, v,
                            v + n, ct__mpi_type(dt), c->g->mpi);
    free(v);
    return rc == MPI_SUCCESS ? CT_OK : ct__mpi_err(c, rc, "MPI_Allgatherv");
}

ct_status ct__bcast_mpi(ct_comm *c, void *buf, size_t count, ct_dtype dt, int root) {
    ct_status st;
    if ((st = ct__need_mpi_comm(c, "mpi")) || (st = too_big(c, count))) return st;
    int rc = MPI_Bcast(buf, (int)count, ct__mpi_type(dt), root, c->g->mpi);
    return rc == MPI_SUCCESS ? CT_OK : ct__mpi_err(c, rc, "MPI_Bcast");
}

ct_status ct__barrier_mpi(ct_comm *c) {
    ct_status st;
    if ((st = ct__need_mpi_comm(c, "mpi"))) return st;
    int rc = MPI_Barrier(c->g->mpi);
    return rc == MPI_SUCCESS ? CT_OK : ct__mpi_err(c, rc, "MPI_Barrier");
}

/* "mpi_nb": MPI_Iallreduce completed by polling with MPI_Test and yielding the core between polls
 * - MPI's own non-blocking algorithm with the same cooperative waiting our transport uses, so
 * bench_allreduce can tell an algorithmic gain from a waiting-policy gain on oversubscribed hosts. */
ct_status ct__allreduce_mpi_nb(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt,
                               ct_op op) {
    ct_status st;
    size_t es = ct_dtype_size(dt);
    if ((st = ct__need_mpi_comm(c, "mpi_nb"))) return st;
    for (size_t off = 0; off < count; off += INT_MAX / 2) {
        size_t len = count - off < INT_MAX / 2 ? count - off : INT_MAX / 2;
        const void *s = send == recv ? MPI_IN_PLACE : (const char *)send + off * es;
        MPI_Request req;
        ct__deadline dl = ct__deadline_in(c->topo->timeout);
        int rc = MPI_Iallreduce(s, (char *)recv + off * es, (int)len, ct__mpi_type(dt),
                                ct__mpi_op(op), c->g->mpi, &req), done = 0;
        for (int spin = 0; rc == MPI_SUCCESS && !done; spin++) {
            rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
            if (!done && spin > 16) sched_yield();
            if (!done && (spin & 255) == 255 && ct__deadline_passed(&dl)) {
                /* a collective request cannot be cancelled: it stays, the group is broken */
                if (!c->g->broken) c->g->broken = 2;
                return CT_ERR(&c->err, CT_ERR_TIMEOUT,
                              "allreduce (mpi_nb): MPI_Iallreduce over %d ranks did not complete "
                              "within %g s (CT_COMM_TIMEOUT): a member did not take part; this "
                              "comm is broken now",
                              c->size, c->topo->timeout);
            }
        }
        if (rc != MPI_SUCCESS) return ct__mpi_err(c, rc, "MPI_Iallreduce");
    }
    return CT_OK;
}
