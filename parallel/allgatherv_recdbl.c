/* allgatherv_recdbl.c - recursive-doubling all-gather with per-rank counts (blocks counts[0..n)
 * one after another in the output). Phases as allgather_recdbl.c: (1) fold (rec_common.c): even
 * ranks of the first r pairs give their block to the odd neighbour; (2) lg p2 steps, step k swaps
 * the 2^k core regions held so far (a region: the blocks of the ranks a core rank serves);
 * (3) odd core ranks send the whole result to their folded partner.
 * Cost: lg p2 alpha + beta (S - the blocks this rank serves) (S = sum of counts; (p2-1)/p2 S for
 * balanced counts), + 2 alpha + beta S for the fold. */
#include <stdlib.h>
#include <string.h>

#include "parallel_impl.h"

ct_status ct__allgatherv_recdbl(ct_comm *c, const void *send, void *recv, const size_t *counts,
                                ct_dtype dt) {
    ct_status st = CT_OK;
    int n = c->size, r = c->rank;
    size_t es = ct_dtype_size(dt), *off = NULL, *boff = ct_malloc(sizeof(size_t) * (size_t)(n + 1));
    char *b = recv;
    ct__fold f;
    if (!boff) return CT_ERR(&c->err, CT_ERR_NOMEM, "out of host memory (offsets)");
    boff[0] = 0;
    for (int i = 0; i < n; i++) boff[i + 1] = boff[i] + counts[i];
    if (counts[r] && send != b + boff[r] * es) memmove(b + boff[r] * es, send, counts[r] * es);
    if (n == 1) goto cleanup;
    ct__fold_init(&f, n, r);
    if (f.core < 0) {
        CT_CHECK(ct__p2p_send(c, f.buddy, b + boff[r] * es, counts[r] * es));
        CT_CHECK(ct__p2p_recv(c, f.buddy, b, boff[n] * es));
        goto cleanup;
    }
    if (f.buddy >= 0)
        CT_CHECK(ct__p2p_recv(c, f.buddy, b + boff[f.buddy] * es, counts[f.buddy] * es));
    off = ct_malloc(sizeof(size_t) * (size_t)(f.p2 + 1));
    if (!off) {
        st = CT_ERR(&c->err, CT_ERR_NOMEM, "out of host memory (offsets)");
        goto cleanup;
    }
    for (int i = 0; i <= f.p2; i++) off[i] = boff[ct__fold_block(&f, i)];
    CT_CHECK(ct__rec_doubling_gather(c, &f, b, off, es));
    if (f.buddy >= 0) CT_CHECK(ct__p2p_send(c, f.buddy, b, boff[n] * es));
cleanup:
    free(boff);
    free(off);
    return st;
}
