/* barrier_dissemination.c - dissemination barrier: at round k every rank signals r + 2^k and
 * waits for r - 2^k with empty messages; after ceil(lg n) rounds everyone has heard from everyone.
 * Cost: ceil(lg n) alpha. */
#include "parallel_impl.h"

ct_status ct__barrier_dissemination(ct_comm *c) {
    ct_status st = CT_OK;
    int n = c->size, r = c->rank;
    char dummy = 0;
    for (int k = 1; k < n; k <<= 1)
        CT_CHECK(ct__p2p_sendrecv(c, (r + k) % n, &dummy, 0, (r - k + n) % n, &dummy, 0));
cleanup:
    return st;
}
