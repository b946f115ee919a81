/* test_parallel_p2p.c - non-blocking point-to-point (ct_comm_isend / irecv / test / wait).
 *
 * Run as `mpiexec -n R test_parallel_p2p D`: R ranks x D threads = W workers, so peers are
 * threads of one process, other ranks, or both. Every message's content is computed from
 * (sender, receiver, message index, element), so a receiver checks each one exactly against
 * what its sender must have sent. Cases, on the world group and on a split group with reversed
 * keys (group ranks differ from world ranks):
 *   1. many messages in flight to the same peer: every worker posts K sends to each other worker
 *      before any receive (sizes 0, 1, odd, and larger than one MPI segment), then receives them
 *      completing the requests in reverse order: message k must be the k-th sent;
 *   2. the exchange that deadlocks with blocking rendezvous sends (1F1B between neighbours: each
 *      sends to both neighbours first, then receives), polled with ct_comm_test;
 *   3. the channel is apart from the collectives: sends posted, an all-reduce and blocking
 *      ct_comm_sendrecv in between, then the receives;
 *   4. a size disagreement fails the receive with CT_ERR_MISMATCH (and the send too between
 *      threads), without a hang, and the channel goes on working. */
#include <mpi.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_parallel.h"
#include "ct_test.h"
#include "ct_test_mpi.h"

/* Element i of message k from group rank s to group rank d. */
static int32_t val(int s, int d, int k, size_t i) {
    return (int32_t)(((uint32_t)s * 2654435761u) ^ ((uint32_t)d * 40503u) ^ ((uint32_t)k << 20) ^
                     (uint32_t)i);
}
static void fill(int32_t *p, size_t n, int s, int d, int k) {
    for (size_t i = 0; i < n; i++) p[i] = val(s, d, k, i);
}
static size_t bad_at(const int32_t *p, size_t n, int s, int d, int k) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != val(s, d, k, i)) return i;
    return (size_t)-1;
}

#define K 6
/* int32 elements of message k: 0, 1, odd, two segments and a half (CT__SEG is 1 MiB) */
static size_t msg_len(int k) {
    static const size_t len[K] = {0, 1, 333, 655360 + 7, 5, 4096};
    return len[k];
}

static void many_in_flight(ct_comm *c, const char *name) {
    char ctx[128];
    int n = ct_comm_size(c), r = ct_comm_rank(c);
    snprintf(ctx, sizeof ctx, "%s n=%d r=%d in flight", name, n, r);
    int32_t **sb = calloc((size_t)n * K, sizeof *sb), **rb = calloc((size_t)n * K, sizeof *rb);
    ct_request **sr = calloc((size_t)n * K, sizeof *sr), **rr = calloc((size_t)n * K, sizeof *rr);
    for (int p = 0; p < n; p++)
        for (int k = 0; k < K && p != r; k++) {
            size_t len = msg_len(k);
            sb[p * K + k] = malloc(len * 4 + 4);
            fill(sb[p * K + k], len, r, p, k);
            CT_ASSERT_IN(ctx, ct_comm_isend(c, p, sb[p * K + k], len * 4, &sr[p * K + k]) == CT_OK,
                         "isend: %s", ct_comm_errmsg(c));
        }
    /* every send is posted before any receive: none of them may have waited */
    for (int p = 0; p < n; p++)
        for (int k = 0; k < K && p != r; k++) {
            rb[p * K + k] = malloc(msg_len(k) * 4 + 4);
            memset(rb[p * K + k], 0xee, msg_len(k) * 4 + 4);
            CT_ASSERT_IN(
                ctx, ct_comm_irecv(c, p, rb[p * K + k], msg_len(k) * 4, &rr[p * K + k]) == CT_OK,
                "irecv: %s", ct_comm_errmsg(c));
        }
    for (int p = n - 1; p >= 0; p--) /* reverse order: matching is by sequence, not by wait */
        for (int k = K - 1; k >= 0 && p != r; k--) {
            CT_ASSERT_IN(ctx, ct_comm_wait(rr[p * K + k]) == CT_OK, "wait recv: %s",
                         ct_comm_errmsg(c));
            size_t at = bad_at(rb[p * K + k], msg_len(k), p, r, k);
            CT_ASSERT_IN(ctx, at == (size_t)-1, "message %d from %d: element %zu wrong", k, p, at);
            uint32_t tail;
            memcpy(&tail, (char *)rb[p * K + k] + msg_len(k) * 4, 4);
            CT_ASSERT_IN(ctx, tail == 0xeeeeeeeeu, "message %d from %d: wrote past its end", k, p);
        }
    for (int i = 0; i < n * K; i++)
        if (sr[i])
            CT_ASSERT_IN(ctx, ct_comm_wait(sr[i]) == CT_OK, "wait send: %s", ct_comm_errmsg(c));
    for (int i = 0; i < n * K; i++) free(sb[i]), free(rb[i]);
    free(sb), free(rb), free(sr), free(rr);
}

/* Each worker sends to both ring neighbours, then receives from both: the exchange a blocking
 * rendezvous send deadlocks on. Completed by polling. */
static void neighbours(ct_comm *c, const char *name) {
    char ctx[128];
    int n = ct_comm_size(c), r = ct_comm_rank(c);
    snprintf(ctx, sizeof ctx, "%s n=%d r=%d neighbours", name, n, r);
    if (n < 2) return;
    int nb[2] = {(r + 1) % n, (r + n - 1) % n};
    size_t len = 100000;
    int32_t *s[2], *in[2];
    ct_request *sq[2], *rq[2];
    for (int j = 0; j < 2; j++) {
        s[j] = malloc(len * 4), in[j] = malloc(len * 4);
        fill(s[j], len, r, nb[j], 100 + j);
        CT_ASSERT_IN(ctx, ct_comm_isend(c, nb[j], s[j], len * 4, &sq[j]) == CT_OK, "%s",
                     ct_comm_errmsg(c));
    }
    /* from the right neighbour (it sent to its left: j = 1) and from the left (j = 0) */
    CT_ASSERT_IN(ctx, ct_comm_irecv(c, nb[0], in[0], len * 4, &rq[0]) == CT_OK, "%s",
                 ct_comm_errmsg(c));
    CT_ASSERT_IN(ctx, ct_comm_irecv(c, nb[1], in[1], len * 4, &rq[1]) == CT_OK, "%s",
                 ct_comm_errmsg(c));
    int left = 4, done[4] = {0, 0, 0, 0};
    ct_request *all[4] = {rq[0], rq[1], sq[0], sq[1]};
    for (long spins = 0; left > 0 && spins < 200000000L; spins++)
        for (int i = 0; i < 4; i++)
            if (!done[i]) {
                int d = 0;
                CT_ASSERT_IN(ctx, ct_comm_test(all[i], &d) == CT_OK, "test: %s", ct_comm_errmsg(c));
                if (d) done[i] = 1, left--;
            }
    CT_ASSERT_IN(ctx, left == 0, "%d requests never completed", left);
    for (int i = 0; i < 4; i++)
        CT_ASSERT_IN(ctx, ct_comm_wait(all[i]) == CT_OK, "%s", ct_comm_errmsg(c));
    /* n == 2: both neighbours are the same peer; the first message sent to it is j = 0 */
    int k0 = n == 2 ? 100 : 101, k1 = 100;
    CT_ASSERT_IN(ctx, bad_at(in[0], len, nb[0], r, k0) == (size_t)-1, "from the right neighbour");
    CT_ASSERT_IN(ctx, bad_at(in[1], len, nb[1], r, n == 2 ? 101 : k1) == (size_t)-1,
                 "from the left neighbour");
    for (int j = 0; j < 2; j++) free(s[j]), free(in[j]);
}

/* Posted sends survive collectives and blocking point-to-point on the same group. */
static void apart_from_collectives(ct_comm *c, const char *name) {
    char ctx[128];
    int n = ct_comm_size(c), r = ct_comm_rank(c);
    snprintf(ctx, sizeof ctx, "%s n=%d r=%d apart", name, n, r);
    int to = (r + 1) % n, from = (r + n - 1) % n;
    size_t len = 777;
    int32_t *s = malloc(len * 4), *in = malloc(len * 4);
    fill(s, len, r, to, 7);
    ct_request *sq = NULL, *rq = NULL;
    CT_ASSERT_IN(ctx, ct_comm_isend(c, to, s, len * 4, &sq) == CT_OK, "%s", ct_comm_errmsg(c));
    float v = (float)r, sum = 0;
    CT_ASSERT_IN(ctx, ct_comm_allreduce(c, &v, &sum, 1, CT_F32, CT_OP_SUM, NULL) == CT_OK, "%s",
                 ct_comm_errmsg(c));
    CT_ASSERT_IN(ctx, sum == (float)(n * (n - 1) / 2), "all-reduce %g", sum);
    int32_t a = r, b = -1;
    CT_ASSERT_IN(ctx, ct_comm_sendrecv(c, to, &a, 4, from, &b, 4) == CT_OK, "%s",
                 ct_comm_errmsg(c));
    CT_ASSERT_IN(ctx, b == from, "sendrecv got %d, want %d", b, from);
    CT_ASSERT_IN(ctx, ct_comm_irecv(c, from, in, len * 4, &rq) == CT_OK, "%s", ct_comm_errmsg(c));
    CT_ASSERT_IN(ctx, ct_comm_wait(rq) == CT_OK, "%s", ct_comm_errmsg(c));
    CT_ASSERT_IN(ctx, ct_comm_wait(sq) == CT_OK, "%s", ct_comm_errmsg(c));
    CT_ASSERT_IN(ctx, bad_at(in, len, from, r, 7) == (size_t)-1, "message across collectives");
    free(s), free(in);
}

/* The receiver expects 8 bytes more than sent: it fails, nothing hangs, the channel goes on. */
static void mismatch(ct_comm *c, const char *name) {
    char ctx[128];
    int n = ct_comm_size(c), r = ct_comm_rank(c);
    snprintf(ctx, sizeof ctx, "%s n=%d r=%d mismatch", name, n, r);
    if (n < 2) return;
    int to = (r + 1) % n, from = (r + n - 1) % n;
    int32_t s[16], in[18];
    fill(s, 16, r, to, 9);
    ct_request *sq = NULL, *rq = NULL;
    CT_ASSERT_IN(ctx, ct_comm_isend(c, to, s, 64, &sq) == CT_OK, "%s", ct_comm_errmsg(c));
    CT_ASSERT_IN(ctx, ct_comm_irecv(c, from, in, 72, &rq) == CT_OK, "%s", ct_comm_errmsg(c));
    ct_status rs = ct_comm_wait(rq);
    CT_ASSERT_IN(ctx, rs == CT_ERR_MISMATCH, "receive of a short message: status %d (%s)", rs,
                 ct_comm_errmsg(c));
    CT_ASSERT_IN(ctx, strstr(ct_comm_errmsg(c), "expected") != NULL, "message: %s",
                 ct_comm_errmsg(c));
    ct_status ss = ct_comm_wait(sq);
    /* between threads the sender learns it too; MPI completes a short send normally */
    CT_ASSERT_IN(ctx, ss == CT_OK || ss == CT_ERR_MISMATCH, "send status %d", ss);
    /* the next message on the channel is intact */
    fill(s, 16, r, to, 10);
    CT_ASSERT_IN(ctx, ct_comm_isend(c, to, s, 64, &sq) == CT_OK, "%s", ct_comm_errmsg(c));
    CT_ASSERT_IN(ctx, ct_comm_irecv(c, from, in, 64, &rq) == CT_OK, "%s", ct_comm_errmsg(c));
    CT_ASSERT_IN(ctx, ct_comm_wait(rq) == CT_OK, "%s", ct_comm_errmsg(c));
    CT_ASSERT_IN(ctx, ct_comm_wait(sq) == CT_OK, "%s", ct_comm_errmsg(c));
    CT_ASSERT_IN(ctx, bad_at(in, 16, from, r, 10) == (size_t)-1, "the message after a mismatch");
    /* bad arguments */
    CT_ASSERT_IN(ctx, ct_comm_isend(c, n, s, 4, &sq) == CT_ERR_ARG, "peer out of range");
    CT_ASSERT_IN(ctx, ct_comm_irecv(c, 0, NULL, 4, &rq) == CT_ERR_ARG, "NULL buffer");
    CT_ASSERT_IN(ctx, ct_comm_wait(NULL) == CT_OK, "wait(NULL)");
}

static void suite(ct_comm *c, const char *name) {
    many_in_flight(c, name);
    neighbours(c, name);
    apart_from_collectives(c, name);
    mismatch(c, name);
}

int main(int argc, char **argv) {
    ct_topo *topo = NULL;
    ct_err err = {0};
    int D = argc > 1 ? atoi(argv[1]) : 1;
    if (ct_topo_create(&topo, &argc, &argv, D, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    ct_test_mpi_begin();
    int W = ct_topo_world_size(topo);
#pragma omp parallel num_threads(D)
    {
        const char *ctx = "setup";
        int t = omp_get_thread_num();
        ct_comm *world = NULL, *rev = NULL;
        CT_ASSERT_IN(ctx, ct_comm_world(topo, t, &world) == CT_OK, "world");
        suite(world, "world");
        int wid = ct_comm_rank(world);
        CT_ASSERT_IN(ctx, ct_comm_split(world, 0, -wid, &rev) == CT_OK, "%s",
                     ct_comm_errmsg(world));
        if (rev) {
            CT_ASSERT_IN(ctx, ct_comm_rank(rev) == W - 1 - wid, "reversed rank %d",
                         ct_comm_rank(rev));
            suite(rev, "reversed");
        }
        /* two parents split again: disjoint groups that may get the same id and colour (each
         * parent's members have seen the same ids); with threads they must stay apart */
        ct_comm *par = NULL, *sub = NULL;
        CT_ASSERT_IN(ctx, ct_comm_split(world, wid % 2, wid, &par) == CT_OK, "%s",
                     ct_comm_errmsg(world));
        if (par)
            CT_ASSERT_IN(ctx, ct_comm_split(par, 0, ct_comm_rank(par), &sub) == CT_OK, "%s",
                         ct_comm_errmsg(par));
        if (sub) {
            int32_t v = wid, sum = 0, want = 0;
            for (int w = wid % 2; w < W; w += 2) want += w;
            CT_ASSERT_IN(ctx, ct_comm_size(sub) == (W - wid % 2 + 1) / 2, "sub size %d",
                         ct_comm_size(sub));
            CT_ASSERT_IN(ctx, ct_comm_allreduce(sub, &v, &sum, 1, CT_I32, CT_OP_SUM, NULL) == CT_OK,
                         "%s", ct_comm_errmsg(sub));
            CT_ASSERT_IN(ctx, sum == want, "split of a split: sum %d over my parity, want %d", sum,
                         want);
            suite(sub, "split of a split");
        }
        ct_comm_free(sub);
        ct_comm_free(par);
        ct_comm_free(rev);
        ct_comm_free(world);
    }
    char name[80];
    snprintf(name, sizeof name, "test_parallel_p2p: %d ranks x %d threads", ct_topo_nranks(topo),
             D);
    int rc = ct_test_mpi_end(name);
    ct_topo_free(topo);
    return rc;
}
