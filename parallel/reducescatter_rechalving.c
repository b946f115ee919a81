/* reducescatter_rechalving.c - recursive-halving reduce-scatter on a working copy of the input.
 * Phases: (1) fold (rec_common.c): even ranks of the first r pairs give their whole input to the
 * odd neighbour; (2) lg p2 halving steps over core regions, region i = the blocks of the ranks
 * core rank i serves; (3) an odd core rank sends its folded partner's block back.
 * Cost: lg p2 alpha + (p2-1)/p2 beta N + (p2-1)/p2 gamma N (+ alpha + beta N + gamma N and
 * alpha + beta N/n for the fold). */
#include <stdlib.h>
#include <string.h>

#include "parallel_impl.h"

ct_status ct__reducescatter_rechalving(ct_comm *c, const void *send, void *recv, size_t count,
                                       ct_dtype dt, ct_op op) {
    ct_status st = CT_OK;
    int n = c->size;
    size_t es = ct_dtype_size(dt), bs = count * es, *off = NULL;
    char *w = NULL;
    ct__fold f;
    if (n == 1) {
        if (send != recv) memcpy(recv, send, bs);
        return CT_OK;
    }
    ct__fold_init(&f, n, c->rank);
    if (f.core < 0) { /* (1) give everything, (3) get my block */
        CT_CHECK(ct__p2p_send(c, f.buddy, send, bs * (size_t)n));
        CT_CHECK(ct__p2p_recv(c, f.buddy, recv, bs));
        return CT_OK;
    }
    CT_CHECK(ct__scratch2(c, bs * (size_t)n, (void **)&w));
    memcpy(w, send, bs * (size_t)n);
    if (f.buddy >= 0) CT_CHECK(ct__p2p_recv_reduce(c, f.buddy, w, count * (size_t)n, dt, op));
    off = ct_malloc(sizeof(size_t) * (size_t)(f.p2 + 1));
    if (!off) {
        st = CT_ERR(&c->err, CT_ERR_NOMEM, "out of host memory (offsets)");
        goto cleanup;
    }
    for (int i = 0; i <= f.p2; i++) off[i] = (size_t)ct__fold_block(&f, i) * count;
    CT_CHECK(ct__rec_halving(c, &f, w, off, dt, op)); /* (2) */
    if (f.buddy >= 0) CT_CHECK(ct__p2p_send(c, f.buddy, w + (size_t)f.buddy * bs, bs));
    memcpy(recv, w + (size_t)c->rank * bs, bs);
cleanup:
    free(off);
    return st;
}
