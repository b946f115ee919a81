/* allreduce_rabenseifner.c - Rabenseifner's all-reduce: recursive-halving reduce-scatter then
 * recursive-doubling all-gather among the power-of-two core, with the fold of rec_common.c for
 * other sizes. Phases: (1) fold, (2) lg p2 halving steps (exchange half of the remaining range,
 * reduce the kept half), (3) lg p2 doubling steps, (4) unfold.
 * Cost: 2 lg p2 alpha + 2 (p2-1)/p2 beta N + (p2-1)/p2 gamma N (+ 2(alpha + beta N) + gamma N
 * for the fold). MPICH's default for large messages. Each region is reduced once, by its
 * owner, and then copied: every worker holds the same bits. */
#include <stdlib.h>
#include <string.h>

#include "parallel_impl.h"

ct_status ct__allreduce_rabenseifner(ct_comm *c, const void *send, void *recv, size_t count,
                                     ct_dtype dt, ct_op op) {
    ct_status st = CT_OK;
    size_t es = ct_dtype_size(dt), bytes = count * es, *off = NULL;
    ct__fold f;
    if (send != recv) memcpy(recv, send, bytes);
    if (c->size == 1) return CT_OK;
    ct__fold_init(&f, c->size, c->rank);
    if (f.buddy >= 0) { /* (1) */
        if (f.core < 0) CT_CHECK(ct__p2p_send(c, f.buddy, recv, bytes));
        else CT_CHECK(ct__p2p_recv_reduce(c, f.buddy, recv, count, dt, op));
    }
    if (f.core >= 0) {
        off = ct_malloc(sizeof(size_t) * (size_t)(f.p2 + 1));
        if (!off) {
            st = CT_ERR(&c->err, CT_ERR_NOMEM, "out of host memory (offsets)");
            goto cleanup;
        }
        for (int i = 0; i <= f.p2; i++) off[i] = ct__part(count, f.p2, i);
        CT_CHECK(ct__rec_halving(c, &f, recv, off, dt, op));      /* (2) */
        CT_CHECK(ct__rec_doubling_gather(c, &f, recv, off, es));  /* (3) */
    }
    if (f.buddy >= 0) { /* (4) */
        if (f.core >= 0) CT_CHECK(ct__p2p_send(c, f.buddy, recv, bytes));
        else CT_CHECK(ct__p2p_recv(c, f.buddy, recv, bytes));
    }
cleanup:
    free(off);
    return st;
}
