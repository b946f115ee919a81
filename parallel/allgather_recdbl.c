/* allgather_recdbl.c - recursive-doubling all-gather. Phases: (1) fold (rec_common.c): even
 * ranks of the first r pairs give their block to the odd neighbour; (2) lg p2 steps, step k
 * swaps the 2^k core regions held so far; (3) odd core ranks send the whole result to their
 * folded partner. Cost: lg p2 alpha + (p2-1)/p2 beta N (+ 2 alpha + beta N for the fold).
 * Also carries the check-mode header exchange and the split tables. */
#include <stdlib.h>
#include <string.h>

#include "parallel_impl.h"

ct_status ct__allgather_recdbl(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt) {
    ct_status st = CT_OK;
    int n = c->size, r = c->rank;
    size_t es = ct_dtype_size(dt), bs = count * es, *off = NULL;
    char *b = recv;
    ct__fold f;
    if (send != b + (size_t)r * bs) memmove(b + (size_t)r * bs, send, bs);
    if (n == 1) return CT_OK;
    ct__fold_init(&f, n, r);
    if (f.core < 0) {
        CT_CHECK(ct__p2p_send(c, f.buddy, b + (size_t)r * bs, bs));
        CT_CHECK(ct__p2p_recv(c, f.buddy, b, bs * (size_t)n));
        return CT_OK;
    }
    if (f.buddy >= 0) CT_CHECK(ct__p2p_recv(c, f.buddy, b + (size_t)f.buddy * bs, bs));
    off = ct_malloc(sizeof(size_t) * (size_t)(f.p2 + 1));
    if (!off) {
        st = CT_ERR(&c->err, CT_ERR_NOMEM, "out of host memory (offsets)");
        goto cleanup;
    }
    for (int i = 0; i <= f.p2; i++) off[i] = (size_t)ct__fold_block(&f, i) * count;
    CT_CHECK(ct__rec_doubling_gather(c, &f, b, off, es));
    if (f.buddy >= 0) CT_CHECK(ct__p2p_send(c, f.buddy, b, bs * (size_t)n));
cleanup:
    free(off);
    return st;
}
