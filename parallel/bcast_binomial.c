/* bcast_binomial.c - binomial-tree broadcast: relative rank v = r - root receives from v - 2^k
 * (its lowest set bit) and sends to v + 2^j for each j below it. Cost: lg n (alpha + beta N). */
#include "parallel_impl.h"

ct_status ct__bcast_binomial(ct_comm *c, void *buf, size_t count, ct_dtype dt, int root) {
    ct_status st = CT_OK;
    int n = c->size, v = (c->rank - root + n) % n, mask = 1;
    size_t bytes = count * ct_dtype_size(dt);
    while (mask < n) {
        if (v & mask) {
            CT_CHECK(ct__p2p_recv(c, (v - mask + root) % n, buf, bytes));
            break;
        }
        mask <<= 1;
    }
    for (mask >>= 1; mask > 0; mask >>= 1)
        if (v + mask < n) CT_CHECK(ct__p2p_send(c, (v + mask + root) % n, buf, bytes));
cleanup:
    return st;
}
