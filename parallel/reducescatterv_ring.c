/* reducescatterv_ring.c - ring reduce-scatter with per-rank counts, on a working copy of the
 * input: the blocks are counts[0..n) one after another; n-1 steps, at step s send block (r-s-1)
 * to r+1 and reduce block (r-s-2) from r-1, so rank r ends owning block r. Empty blocks travel
 * as empty messages (every step stays matched).
 * Cost: (n-1) alpha + beta (S - c_r) + gamma (S - c_{r-1}) (S = sum of counts), plus one local
 * copy; with equal counts the ring reduce-scatter's (n-1)/n beta S. */
#include <stdlib.h>
#include <string.h>

#include "parallel_impl.h"

ct_status ct__reducescatterv_ring(ct_comm *c, const void *send, void *recv, const size_t *counts,
                                  ct_dtype dt, ct_op op) {
    ct_status st = CT_OK;
    int n = c->size, r = c->rank, right = (r + 1) % n, left = (r - 1 + n) % n;
    size_t es = ct_dtype_size(dt), *off = NULL;
    char *w = NULL;
    off = ct_malloc(sizeof(size_t) * (size_t)(n + 1));
    if (!off) return CT_ERR(&c->err, CT_ERR_NOMEM, "out of host memory (offsets)");
    off[0] = 0;
    for (int i = 0; i < n; i++) off[i + 1] = off[i] + counts[i];
    if (n == 1) {
        if (counts[0] && send != recv) memmove(recv, send, counts[0] * es);
        goto cleanup;
    }
    CT_CHECK(ct__scratch2(c, off[n] * es + 1, (void **)&w));
    memcpy(w, send, off[n] * es);
    for (int s = 0; s < n - 1; s++) {
        int sb = (r - s - 1 + 2 * n) % n, rb = (r - s - 2 + 2 * n) % n;
        CT_CHECK(ct__p2p_sendrecv_reduce(c, right, w + off[sb] * es, counts[sb] * es, left,
                                         w + off[rb] * es, counts[rb], dt, op));
    }
    if (counts[r]) memcpy(recv, w + off[r] * es, counts[r] * es);
cleanup:
    free(off);
    return st;
}
