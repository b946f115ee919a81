/* probe_links.c - a link measured: one collective (or a pipeline message) over every group of
 * a pattern at once, laid out as the layouts lay them, timed at three sizes and fitted to
 * alpha + beta * bytes, the slowest member counting. Collective over the world. */
#include <math.h>
#include <stdlib.h>

#include "plan_impl.h"

/* The groups of pattern (n, stride) over W workers: blocks of n * stride workers, in each the
 * `stride` groups of n at that stride; workers past the last whole block join none. */
static ct_status split_pattern(ct_comm *world, int n, int stride, ct_comm **out) {
    int w = ct_comm_rank(world), W = ct_comm_size(world), blk = n * stride;
    int colour = (w / blk + 1) * blk <= W ? (w / blk) * stride + w % stride : CT_COMM_UNDEFINED;
    return ct_comm_split(world, colour, (w % blk) / stride, out);
}

/* One timed run of a collective of `bytes` over g (host memory). */
static ct_status link_once(ct_comm *g, int coll, float *buf, size_t bytes) {
    int n = ct_comm_size(g), r = ct_comm_rank(g);
    size_t count = bytes / sizeof(float);
    switch (coll) {
    case CT_COLL_ALLREDUCE: return ct_comm_allreduce(g, buf, buf, count, CT_F32, CT_OP_SUM, NULL);
    case CT_COLL_REDUCESCATTER:
        return ct_comm_reduce_scatter(g, buf, buf, count / (size_t)n, CT_F32, CT_OP_SUM, NULL);
    case CT_COLL_ALLGATHER:
        return ct_comm_allgather(g, buf + (size_t)r * (count / (size_t)n), buf, count / (size_t)n,
                                 CT_F32, NULL);
    case CT_COLL_ALLTOALL: /* bytes: each worker's whole send buffer, bytes / n to each */
        return ct_comm_alltoall(g, buf, buf + count, count / (size_t)n, CT_F32, NULL);
    default: { /* a pipeline message each way between the pair */
        ct_request *s = NULL, *q = NULL;
        ct_status st = ct_comm_isend(g, 1 - r, buf, bytes, &s);
        if (st == CT_OK) st = ct_comm_irecv(g, 1 - r, buf + count, bytes, &q);
        ct_status a = ct_comm_wait(q), b = ct_comm_wait(s);
        return st != CT_OK ? st : (a != CT_OK ? a : b);
    }
    }
}

ct_status ct__plan_probe_link(ct_comm *world, ct_plan_link *k, int stride, int reps, FILE *log,
                              ct_err *err) {
    ct_comm *g = NULL;
    ct_status st = split_pattern(world, k->n, stride, &g);
    if (st != CT_OK) return CT_ERR(err, st, "calibration split: %s", ct_comm_errmsg(world));
    double lo = k->lo < 4 ? 4 : k->lo, hi = k->hi < lo ? lo : k->hi;
    if (hi < 4 * lo) hi = 4 * lo;
    double sz[3] = {lo, sqrt(lo * hi), hi}, t[3];
    size_t unit = 4 * (size_t)k->n; /* whole floats per member */
    size_t cap = ((size_t)hi + unit) / unit * unit;
    float *buf = ct_calloc(2 * cap / sizeof(float) + 16, sizeof(float));
    if (!buf) st = CT_ERR(err, CT_ERR_NOMEM, "no memory");
    for (int i = 0; i < 3; i++) {
        size_t bytes = ((size_t)sz[i] + unit - 1) / unit * unit;
        sz[i] = (double)bytes;
        float mine = 0;
        if (g && st == CT_OK) {
            double v[32];
            int rr = reps > 32 ? 32 : reps;
            st = link_once(g, k->coll, buf, bytes); /* warm-up */
            for (int r = 0; r < rr && st == CT_OK; r++) {
                if ((st = ct_comm_barrier(g, NULL)) != CT_OK) break;
                double t0 = ct_time_now();
                st = link_once(g, k->coll, buf, bytes);
                v[r] = 1e3 * (ct_time_now() - t0);
            }
            if (st != CT_OK) CT_ERR(err, st, "calibrating %s over %d: %s", ct__plan_coll_name(k->coll), k->n,
                                    ct_comm_errmsg(g));
            else mine = (float)ct__plan_median(v, rr);
        }
        /* every worker joins, failed or not, so none waits alone; the slowest member counts */
        float fail = st != CT_OK ? 1.0f : 0.0f, pair[2] = {mine, fail};
        ct_status s2 = ct_comm_allreduce(world, pair, pair, 2, CT_F32, CT_OP_MAX, NULL);
        if (s2 != CT_OK && st == CT_OK) st = CT_ERR(err, s2, "%s", ct_comm_errmsg(world));
        if (pair[1] > 0 && st == CT_OK)
            st = CT_ERR(err, CT_ERR_STATE, "calibrating %s over %d failed on another worker",
                        ct__plan_coll_name(k->coll), k->n);
        if (st != CT_OK) break;
        t[i] = pair[0];
    }
    if (st == CT_OK) {
        ct_plan_fit(sz, t, 3, &k->alpha, &k->beta);
        if (log)
            fprintf(log, "  link %-13s n %d %-7s (stride %d): %.3f ms at %.0f B, %.3f ms at %.0f B "
                         "-> alpha %.4f ms, %.3f GB/s\n",
                    ct__plan_coll_name(k->coll), k->n, ct__plan_place_name(k->place), stride, t[0],
                    sz[0], t[2], sz[2], k->alpha, k->beta > 0 ? 1e-6 / k->beta : 0.0);
    }
    free(buf);
    ct_comm_free(g);
    return st;
}
