/* allreduce_ring.c - ring all-reduce: reduce-scatter then all-gather around the ring r -> r+1.
 * Phases: (1) n-1 steps: send block (r-s), receive and reduce block (r-s-1); rank r ends owning
 * block r+1; (2) n-1 steps passing the owned blocks on. Each step's message is cut into
 * CT__SEG segments by the transport, so reduction of a segment overlaps the next one's transfer.
 * Cost: 2(n-1) alpha + 2 (n-1)/n beta N + (n-1)/n gamma N - bandwidth-optimal, latency linear.
 * Each block is reduced once, by its owner, then copied: every worker holds the same bits. */
#include <stdlib.h>
#include <string.h>

#include "parallel_impl.h"

ct_status ct__allreduce_ring(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt,
                             ct_op op) {
    ct_status st = CT_OK;
    int n = c->size, r = c->rank, right = (r + 1) % n, left = (r - 1 + n) % n;
    size_t es = ct_dtype_size(dt), *off = NULL;
    char *b = recv;
    if (send != recv) memcpy(recv, send, count * es);
    if (n == 1) return CT_OK;
    off = ct_malloc(sizeof(size_t) * (size_t)(n + 1));
    if (!off) return CT_ERR(&c->err, CT_ERR_NOMEM, "out of host memory (ring offsets)");
    for (int i = 0; i <= n; i++) off[i] = ct__part(count, n, i);
    for (int s = 0; s < n - 1; s++) { /* (1) reduce-scatter */
        int sb = (r - s + n) % n, rb = (r - s - 1 + n) % n;
        CT_CHECK(ct__p2p_sendrecv_reduce(c, right, b + off[sb] * es, (off[sb + 1] - off[sb]) * es,
                                         left, b + off[rb] * es, off[rb + 1] - off[rb], dt, op));
    }
    for (int s = 0; s < n - 1; s++) { /* (2) all-gather */
        int sb = (r + 1 - s + n) % n, rb = (r - s + n) % n;
        CT_CHECK(ct__p2p_sendrecv(c, right, b + off[sb] * es, (off[sb + 1] - off[sb]) * es, left,
                                  b + off[rb] * es, (off[rb + 1] - off[rb]) * es));
    }
cleanup:
    free(off);
    return st;
}
