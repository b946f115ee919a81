/* allreduce_recdbl.c - recursive doubling: at step k, core ranks i and i^2^k swap their whole
 * partial vectors and both reduce. Non-powers of two fold first (rec_common.c): the even rank of
 * each of the first r pairs gives its vector to its odd neighbour and receives the result at the
 * end. Phases: (1) fold, (2) lg p2 exchange-and-reduce steps, (3) unfold.
 * Cost: (lg p2 + 2[n != p2]) (alpha + beta N) + (lg p2 + 1) gamma N - best for small messages.
 * Partners reduce a+b and b+a, equal in IEEE arithmetic, from bitwise-equal partials, so every
 * worker holds the same bits. */
#include <string.h>

#include "parallel_impl.h"

ct_status ct__allreduce_recdbl(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt,
                               ct_op op) {
    ct_status st = CT_OK;
    size_t bytes = count * ct_dtype_size(dt);
    ct__fold f;
    if (send != recv) memcpy(recv, send, bytes);
    if (c->size == 1) return CT_OK;
    ct__fold_init(&f, c->size, c->rank);
    if (f.buddy >= 0) { /* (1) fold */
        if (f.core < 0) CT_CHECK(ct__p2p_send(c, f.buddy, recv, bytes));
        else CT_CHECK(ct__p2p_recv_reduce(c, f.buddy, recv, count, dt, op));
    }
    if (f.core >= 0)
        for (int mask = 1; mask < f.p2; mask <<= 1) { /* (2) */
            int partner = ct__fold_old(&f, f.core ^ mask);
            CT_CHECK(ct__p2p_sendrecv_reduce(c, partner, recv, bytes, partner, recv, count, dt, op));
        }
    if (f.buddy >= 0) { /* (3) unfold */
        if (f.core >= 0) CT_CHECK(ct__p2p_send(c, f.buddy, recv, bytes));
        else CT_CHECK(ct__p2p_recv(c, f.buddy, recv, bytes));
    }
cleanup:
    return st;
}
