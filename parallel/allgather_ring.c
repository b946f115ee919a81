/* allgather_ring.c - ring all-gather: n-1 steps, at step s pass block (r-s) to r+1 and receive
 * block (r-s-1) from r-1, in place in the output.
 * Cost: (n-1) alpha + (n-1)/n beta N (N = the whole output). */
#include <string.h>

#include "parallel_impl.h"

ct_status ct__allgather_ring(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt) {
    ct_status st = CT_OK;
    int n = c->size, r = c->rank, right = (r + 1) % n, left = (r - 1 + n) % n;
    size_t bs = count * ct_dtype_size(dt);
    char *b = recv;
    if (send != b + (size_t)r * bs) memmove(b + (size_t)r * bs, send, bs);
    for (int s = 0; s < n - 1; s++) {
        int sb = (r - s + n) % n, rb = (r - s - 1 + n) % n;
        CT_CHECK(ct__p2p_sendrecv(c, right, b + (size_t)sb * bs, bs, left, b + (size_t)rb * bs, bs));
    }
cleanup:
    return st;
}
