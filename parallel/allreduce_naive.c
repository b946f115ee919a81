/* allreduce_naive.c - all-reduce as a flat reduce to rank 0 followed by a flat broadcast.
 * Phases: (1) rank 0 receives and reduces every other rank's vector in rank order;
 * (2) rank 0 sends the result to every rank.
 * Cost: 2(n-1)(alpha + beta N) + (n-1) gamma N, all through rank 0. The reference point every
 * other algorithm must beat; the result is computed once, so every worker holds the same bits. */
#include <string.h>

#include "parallel_impl.h"

ct_status ct__allreduce_naive(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt,
                              ct_op op) {
    ct_status st = CT_OK;
    size_t bytes = count * ct_dtype_size(dt);
    if (send != recv) memcpy(recv, send, bytes);
    if (c->size == 1) return CT_OK;
    if (c->rank == 0) {
        for (int r = 1; r < c->size; r++) CT_CHECK(ct__p2p_recv_reduce(c, r, recv, count, dt, op));
        for (int r = 1; r < c->size; r++) CT_CHECK(ct__p2p_send(c, r, recv, bytes));
    } else {
        CT_CHECK(ct__p2p_send(c, 0, recv, bytes));
        CT_CHECK(ct__p2p_recv(c, 0, recv, bytes));
    }
cleanup:
    return st;
}
