/* allgatherv_ring.c - ring all-gather with per-rank counts (blocks counts[0..n) one after another
 * in the output): n-1 steps, at step s pass block (r-s) to r+1 and receive block (r-s-1) from
 * r-1, in place in the output. Empty blocks travel as empty messages.
 * Cost: (n-1) alpha + beta (S - c_{r+1}) (S = sum of counts); with equal counts (n-1)/n beta S. */
#include <stdlib.h>
#include <string.h>

#include "parallel_impl.h"

ct_status ct__allgatherv_ring(ct_comm *c, const void *send, void *recv, const size_t *counts,
                              ct_dtype dt) {
    ct_status st = CT_OK;
    int n = c->size, r = c->rank, right = (r + 1) % n, left = (r - 1 + n) % n;
    size_t es = ct_dtype_size(dt), *off = ct_malloc(sizeof(size_t) * (size_t)(n + 1));
    char *b = recv;
    if (!off) return CT_ERR(&c->err, CT_ERR_NOMEM, "out of host memory (offsets)");
    off[0] = 0;
    for (int i = 0; i < n; i++) off[i + 1] = off[i] + counts[i];
    if (counts[r] && send != b + off[r] * es) memmove(b + off[r] * es, send, counts[r] * es);
    for (int s = 0; s < n - 1; s++) {
        int sb = (r - s + n) % n, rb = (r - s - 1 + n) % n;
        CT_CHECK(ct__p2p_sendrecv(c, right, b + off[sb] * es, counts[sb] * es, left,
                                  b + off[rb] * es, counts[rb] * es));
    }
cleanup:
    free(off);
    return st;
}
