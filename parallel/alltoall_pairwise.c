/* alltoall_pairwise.c - pairwise-exchange all-to-all and all-to-all-v: at step s = 1..n-1 send
 * block (r+s) to rank r+s and receive block (r-s) from rank r-s; every pair meets exactly once
 * and no rank waits on two others at a time. In place works on a copy of the input.
 * Cost: (n-1) alpha + (n-1)/n beta N. */
#include <string.h>

#include "parallel_impl.h"

ct_status ct__alltoall_pairwise(ct_comm *c, const void *send, void *recv, size_t count,
                                ct_dtype dt) {
    ct_status st = CT_OK;
    int n = c->size, r = c->rank;
    size_t bs = count * ct_dtype_size(dt);
    const char *src = send;
    char *b = recv;
    if (send == recv) {
        void *w = NULL;
        CT_CHECK(ct__scratch2(c, bs * (size_t)n, &w));
        memcpy(w, send, bs * (size_t)n);
        src = w;
    }
    if (src != b) memcpy(b + (size_t)r * bs, src + (size_t)r * bs, bs);
    for (int s = 1; s < n; s++) {
        int to = (r + s) % n, from = (r - s + n) % n;
        CT_CHECK(ct__p2p_sendrecv(c, to, src + (size_t)to * bs, bs, from, b + (size_t)from * bs, bs));
    }
cleanup:
    return st;
}

ct_status ct__alltoallv_pairwise(ct_comm *c, const void *send, const size_t *sc, const size_t *sd,
                                 void *recv, const size_t *rc, const size_t *rd, ct_dtype dt) {
    ct_status st = CT_OK;
    int n = c->size, r = c->rank;
    size_t es = ct_dtype_size(dt);
    const char *src = send;
    char *b = recv;
    if (send == recv) {
        size_t ext = 0;
        void *w = NULL;
        for (int i = 0; i < n; i++)
            if ((sd[i] + sc[i]) * es > ext) ext = (sd[i] + sc[i]) * es;
        CT_CHECK(ct__scratch2(c, ext ? ext : 1, &w));
        memcpy(w, send, ext);
        src = w;
    }
    if (sc[r] != rc[r]) {
        st = CT_ERR(&c->err, CT_ERR_MISMATCH, "alltoallv: rank %d sends itself %zu elements but "
                    "expects %zu", r, sc[r], rc[r]);
        goto cleanup;
    }
    memmove(b + rd[r] * es, src + sd[r] * es, sc[r] * es);
    for (int s = 1; s < n; s++) {
        int to = (r + s) % n, from = (r - s + n) % n;
        CT_CHECK(ct__p2p_sendrecv(c, to, src + sd[to] * es, sc[to] * es, from, b + rd[from] * es,
                                  rc[from] * es));
    }
cleanup:
    return st;
}
