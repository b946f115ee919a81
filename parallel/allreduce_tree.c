/* allreduce_tree.c - pipelined binary-tree all-reduce: rank r has children 2r+1, 2r+2.
 * Phases: (1) reduce up the tree chunk by chunk (a parent reduces chunk k of its children while
 * they already work on chunk k+1); (2) broadcast down the tree chunk by chunk.
 * Chunks: 256 KiB, at most 64 of them. Cost with k chunks of N/k: 2(lg n + k - 1)(alpha + beta N/k) + 2 gamma N (a node reduces two
 * children) - latency lg n for small N, bandwidth about 2 beta N (not 2(n-1)/n) for large N.
 * The root computes each element once and broadcasts it: every worker holds the same bits. */
#include <string.h>

#include "parallel_impl.h"

#define TREE_CHUNK ((size_t)256 << 10) /* bytes, at least */
#define TREE_MAX_CHUNKS 64             /* bounds the per-chunk handshakes on big vectors */

ct_status ct__allreduce_tree(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt,
                             ct_op op) {
    ct_status st = CT_OK;
    size_t es = ct_dtype_size(dt), bytes = count * es, ce = TREE_CHUNK / es;
    if (count / TREE_MAX_CHUNKS > ce) ce = count / TREE_MAX_CHUNKS + 1;
    int r = c->rank, n = c->size, parent = (r - 1) / 2, ch[2] = {2 * r + 1, 2 * r + 2};
    char *b = recv;
    if (send != recv) memcpy(recv, send, bytes);
    if (n == 1) return CT_OK;
    for (size_t off = 0; off < count; off += ce) { /* (1) reduce up */
        size_t len = count - off < ce ? count - off : ce;
        for (int k = 0; k < 2; k++)
            if (ch[k] < n) CT_CHECK(ct__p2p_recv_reduce(c, ch[k], b + off * es, len, dt, op));
        if (r > 0) CT_CHECK(ct__p2p_send(c, parent, b + off * es, len * es));
    }
    for (size_t off = 0; off < count; off += ce) { /* (2) broadcast down */
        size_t len = count - off < ce ? count - off : ce;
        if (r > 0) CT_CHECK(ct__p2p_recv(c, parent, b + off * es, len * es));
        for (int k = 0; k < 2; k++)
            if (ch[k] < n) CT_CHECK(ct__p2p_send(c, ch[k], b + off * es, len * es));
    }
cleanup:
    return st;
}
