/* reducescatterv_rechalving.c - recursive-halving reduce-scatter with per-rank counts, on a
 * working copy of the input (blocks counts[0..n) one after another). Phases as
 * reducescatter_rechalving.c: (1) fold (rec_common.c): even ranks of the first r pairs give
 * their whole input to the odd neighbour; (2) lg p2 halving steps over core regions, region i =
 * the blocks of the ranks core rank i serves (their counts' sum, possibly empty); (3) an odd core
 * rank sends its folded partner's block back.
 * Cost: lg p2 alpha + beta and gamma about (p2-1)/p2 S for balanced counts (S = sum of counts;
 * each halving step moves the other half's counts), + alpha + beta S + gamma S and
 * alpha + beta c_buddy for the fold. */
#include <stdlib.h>
#include <string.h>

#include "parallel_impl.h"

ct_status ct__reducescatterv_rechalving(ct_comm *c, const void *send, void *recv,
                                        const size_t *counts, ct_dtype dt, ct_op op) {
    ct_status st = CT_OK;
    int n = c->size, r = c->rank;
    size_t es = ct_dtype_size(dt), *boff = NULL, *off = NULL;
    char *w = NULL;
    ct__fold f;
    boff = ct_malloc(sizeof(size_t) * (size_t)(n + 1));
    if (!boff) return CT_ERR(&c->err, CT_ERR_NOMEM, "out of host memory (offsets)");
    boff[0] = 0;
    for (int i = 0; i < n; i++) boff[i + 1] = boff[i] + counts[i];
    if (n == 1) {
        if (counts[0] && send != recv) memmove(recv, send, counts[0] * es);
        goto cleanup;
    }
    ct__fold_init(&f, n, r);
    if (f.core < 0) { /* (1) give everything, (3) get my block */
        CT_CHECK(ct__p2p_send(c, f.buddy, send, boff[n] * es));
        CT_CHECK(ct__p2p_recv(c, f.buddy, recv, counts[r] * es));
        goto cleanup;
    }
    CT_CHECK(ct__scratch2(c, boff[n] * es + 1, (void **)&w));
    memcpy(w, send, boff[n] * es);
    if (f.buddy >= 0) CT_CHECK(ct__p2p_recv_reduce(c, f.buddy, w, boff[n], dt, op));
    off = ct_malloc(sizeof(size_t) * (size_t)(f.p2 + 1));
    if (!off) {
        st = CT_ERR(&c->err, CT_ERR_NOMEM, "out of host memory (offsets)");
        goto cleanup;
    }
    for (int i = 0; i <= f.p2; i++) off[i] = boff[ct__fold_block(&f, i)];
    CT_CHECK(ct__rec_halving(c, &f, w, off, dt, op)); /* (2) */
    if (f.buddy >= 0)
        CT_CHECK(ct__p2p_send(c, f.buddy, w + boff[f.buddy] * es, counts[f.buddy] * es));
    if (counts[r]) memcpy(recv, w + boff[r] * es, counts[r] * es);
cleanup:
    free(boff);
    free(off);
    return st;
}
