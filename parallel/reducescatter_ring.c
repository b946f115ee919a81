/* reducescatter_ring.c - ring reduce-scatter on a working copy of the input: n-1 steps, at step s
 * send block (r-s-1) to r+1 and reduce block (r-s-2) from r-1, so rank r ends owning block r.
 * Cost: (n-1) alpha + (n-1)/n beta N + (n-1)/n gamma N (N = the whole input), plus one local copy.
 * Segmenting is the transport's (CT__SEG). */
#include <string.h>

#include "parallel_impl.h"

ct_status ct__reducescatter_ring(ct_comm *c, const void *send, void *recv, size_t count,
                                 ct_dtype dt, ct_op op) {
    ct_status st = CT_OK;
    int n = c->size, r = c->rank, right = (r + 1) % n, left = (r - 1 + n) % n;
    size_t es = ct_dtype_size(dt), bs = count * es;
    char *w = NULL;
    if (n == 1) {
        if (send != recv) memcpy(recv, send, bs);
        return CT_OK;
    }
    CT_CHECK(ct__scratch2(c, bs * (size_t)n, (void **)&w));
    memcpy(w, send, bs * (size_t)n);
    for (int s = 0; s < n - 1; s++) {
        int sb = (r - s - 1 + 2 * n) % n, rb = (r - s - 2 + 2 * n) % n;
        CT_CHECK(ct__p2p_sendrecv_reduce(c, right, w + (size_t)sb * bs, bs, left,
                                         w + (size_t)rb * bs, count, dt, op));
    }
    memcpy(recv, w + (size_t)r * bs, bs);
cleanup:
    return st;
}
