/* test_parallel_coll.c - every algorithm of every collective against a plain-C reference.
 *
 * Run as `mpiexec -n R test_parallel_coll D [--device]`: R ranks x D threads = W workers. Each
 * worker's input is integer-valued (exact in float), computed from (group rank, element) so any
 * worker can compute the exact expected result alone; results must equal it bit for bit, on
 * counts 0, 1, n-1, n, n+1 and a large odd count, in place and not. Random floats check that
 * every worker ends an all-reduce with bitwise the same data (hashes compared over the group).
 * The suite runs on the world group and on split groups (sizes W/2-ish and W-1, reversed keys),
 * so sizes 1..8 arise from ranks, threads and mixes. --device repeats the collectives on OpenCL
 * buffers (ct_buffer_*; no kernels, so no program compiles). "mpi" where the group has several
 * workers per rank must fail with CT_ERR_UNSUPPORTED (all workers alike, no hang). --nodes=N:
 * launched over N hosts (mpiexec -hosts a:R,b:R: Hydra gives each its node even on one machine),
 * so the hierarchical all-reduce runs its hosts' levels; the topology must see N nodes. */
#include <mpi.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_parallel.h"
#include "ct_test.h"
#include "ct_test_mpi.h"

static int32_t val(int r, size_t i, int seed) { return (int32_t)((r * 131 + (long)i * 7 + seed) % 23) - 11; }

static void fill(void *p, ct_dtype dt, size_t n, int r, int seed, size_t base) {
    for (size_t i = 0; i < n; i++) {
        int32_t v = val(r, base + i, seed);
        if (dt == CT_F32) ((float *)p)[i] = (float)v;
        else ((int32_t *)p)[i] = v;
    }
}

/* Expected all-reduce of elements [base, base+n) over workers 0..size-1. */
static void ref_reduce(void *out, ct_dtype dt, ct_op op, size_t n, int size, int seed, size_t base) {
    for (size_t i = 0; i < n; i++) {
        int64_t s = 0, m = INT64_MIN;
        for (int r = 0; r < size; r++) {
            int32_t v = val(r, base + i, seed);
            s += v;
            if (v > m) m = v;
        }
        if (dt == CT_F32) {
            float f = op == CT_OP_MAX ? (float)m : (float)s;
            if (op == CT_OP_AVG) f /= (float)size;
            ((float *)out)[i] = f;
        } else {
            ((int32_t *)out)[i] = op == CT_OP_MAX ? (int32_t)m : op == CT_OP_AVG ? (int32_t)(s / size) : (int32_t)s;
        }
    }
}

static void poison(void *p, size_t bytes) { memset(p, 0xff, bytes); } /* NaN / -1 */

static uint64_t fnv(const void *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
    return h;
}

static int expect_restricted(ct_comm *c, const char *algo) {
    return *ct_comm_algo_restriction(c, CT_COLL_ALLREDUCE, algo) != 0;
}

typedef struct opts { int full; size_t big; } opts;

static void suite(ct_comm *c, const char *name, const opts *o) {
    char ctx[160];
    int n = ct_comm_size(c), r = ct_comm_rank(c), st;
    size_t counts[6] = {0, 1, (size_t)n - 1, (size_t)n, (size_t)n + 1, o->big};
    size_t maxc = o->big > (size_t)n + 1 ? o->big : (size_t)n + 1;
    size_t cap = maxc * (size_t)n + 64;
    char *sb = malloc(cap * 4), *rb = malloc(cap * 4), *ref = malloc(cap * 4);
    const struct { ct_dtype dt; ct_op op; } dops[] = {
        {CT_F32, CT_OP_SUM}, {CT_F32, CT_OP_MAX}, {CT_F32, CT_OP_AVG}, {CT_I32, CT_OP_SUM}, {CT_I32, CT_OP_AVG}};
    int seed = 1;
    for (int ci = 0; ci < 6; ci++) {
        size_t cnt = counts[ci];
        int nd = (ci >= 4 || o->full) ? 5 : 1;
        /* ---- all-reduce */
        for (int ai = 0; ct_coll_algo_name(CT_COLL_ALLREDUCE, ai); ai++) {
            const char *al = ct_coll_algo_name(CT_COLL_ALLREDUCE, ai);
            for (int d = 0; d < nd; d++)
                for (int inpl = 0; inpl < 2; inpl++) {
                    ct_dtype dt = dops[d].dt;
                    ct_op op = dops[d].op;
                    snprintf(ctx, sizeof ctx, "%s n=%d r=%d allreduce %s %s %s count=%zu%s", name, n, r,
                             al, ct_dtype_str(dt), ct_op_str(op), cnt, inpl ? " inplace" : "");
                    seed++;
                    fill(sb, dt, cnt, r, seed, 0);
                    if (inpl) memcpy(rb, sb, cnt * 4);
                    else poison(rb, cnt * 4 + 4);
                    st = ct_comm_allreduce(c, inpl ? rb : sb, rb, cnt, dt, op, al);
                    if (expect_restricted(c, al)) {
                        CT_ASSERT_IN(ctx, st == CT_ERR_UNSUPPORTED,
                                     "expected CT_ERR_UNSUPPORTED, got %d", st);
                        continue;
                    }
                    CT_ASSERT_IN(ctx, st == CT_OK, "status %d: %s", st, ct_comm_errmsg(c));
                    ref_reduce(ref, dt, op, cnt, n, seed, 0);
                    CT_ASSERT_IN(ctx, memcmp(ref, rb, cnt * 4) == 0,
                                 "result differs from the reference");
                    if (!inpl) {
                        uint32_t tail;
                        memcpy(&tail, rb + cnt * 4, 4);
                        CT_ASSERT_IN(ctx, tail == 0xffffffffu, "wrote past the end");
                    }
                }
        }
        /* ---- reduce-scatter */
        for (int ai = 0; ct_coll_algo_name(CT_COLL_REDUCESCATTER, ai); ai++) {
            const char *al = ct_coll_algo_name(CT_COLL_REDUCESCATTER, ai);
            for (int d = 0; d < nd; d += (nd > 1 ? 2 : 1))
                for (int inpl = 0; inpl < 2; inpl++) {
                    ct_dtype dt = dops[d].dt;
                    ct_op op = dops[d].op;
                    snprintf(ctx, sizeof ctx, "%s n=%d r=%d reducescatter %s %s %s count=%zu%s", name, n, r,
                             al, ct_dtype_str(dt), ct_op_str(op), cnt, inpl ? " inplace" : "");
                    seed++;
                    fill(sb, dt, cnt * (size_t)n, r, seed, 0);
                    if (inpl) memcpy(rb, sb, cnt * (size_t)n * 4);
                    else poison(rb, cnt * 4 + 4);
                    st = ct_comm_reduce_scatter(c, inpl ? rb : sb, rb, cnt, dt, op, al);
                    if (*ct_comm_algo_restriction(c, CT_COLL_REDUCESCATTER, al)) {
                        CT_ASSERT_IN(ctx, st == CT_ERR_UNSUPPORTED,
                                     "expected CT_ERR_UNSUPPORTED, got %d", st);
                        continue;
                    }
                    CT_ASSERT_IN(ctx, st == CT_OK, "status %d: %s", st, ct_comm_errmsg(c));
                    ref_reduce(ref, dt, op, cnt, n, seed, (size_t)r * cnt);
                    CT_ASSERT_IN(ctx, memcmp(ref, rb, cnt * 4) == 0,
                                 "result differs from the reference");
                }
        }
        /* ---- all-gather */
        for (int ai = 0; ct_coll_algo_name(CT_COLL_ALLGATHER, ai); ai++) {
            const char *al = ct_coll_algo_name(CT_COLL_ALLGATHER, ai);
            for (int inpl = 0; inpl < 2; inpl++) {
                snprintf(ctx, sizeof ctx, "%s n=%d r=%d allgather %s count=%zu%s", name, n, r, al, cnt,
                         inpl ? " inplace" : "");
                seed++;
                poison(rb, cnt * (size_t)n * 4);
                char *src = inpl ? rb + (size_t)r * cnt * 4 : sb;
                fill(src, CT_F32, cnt, r, seed, 0);
                st = ct_comm_allgather(c, src, rb, cnt, CT_F32, al);
                if (*ct_comm_algo_restriction(c, CT_COLL_ALLGATHER, al)) {
                    CT_ASSERT_IN(ctx, st == CT_ERR_UNSUPPORTED,
                                 "expected CT_ERR_UNSUPPORTED, got %d", st);
                    continue;
                }
                CT_ASSERT_IN(ctx, st == CT_OK, "status %d: %s", st, ct_comm_errmsg(c));
                for (int q = 0; q < n; q++) fill(ref + (size_t)q * cnt * 4, CT_F32, cnt, q, seed, 0);
                CT_ASSERT_IN(ctx, memcmp(ref, rb, cnt * (size_t)n * 4) == 0,
                             "result differs from the reference");
            }
        }
        /* ---- reduce-scatter and all-gather with per-rank counts: block q has cv(q) elements,
         * some empty, one after another (the "mpi" algorithm is MPI_Reduce_scatter and
         * MPI_Allgatherv themselves, held to the same reference) */
        {
            size_t vc[64], vo[65];
#define CVV(q) (((size_t)(q) * 5 + cnt) % 3 == 0 ? 0 : cnt + (size_t)(q) % 3)
            vo[0] = 0;
            for (int q = 0; q < n; q++) vc[q] = CVV(q), vo[q + 1] = vo[q] + vc[q];
            for (int ai = 0; ct_coll_algo_name(CT_COLL_REDUCESCATTERV, ai); ai++) {
                const char *al = ct_coll_algo_name(CT_COLL_REDUCESCATTERV, ai);
                for (int d = 0; d < nd; d += (nd > 1 ? 2 : 1))
                    for (int inpl = 0; inpl < 2; inpl++) {
                        ct_dtype dt = dops[d].dt;
                        ct_op op = dops[d].op;
                        snprintf(ctx, sizeof ctx, "%s n=%d r=%d reducescatterv %s %s %s count=%zu%s",
                                 name, n, r, al, ct_dtype_str(dt), ct_op_str(op), cnt,
                                 inpl ? " inplace" : "");
                        seed++;
                        fill(sb, dt, vo[n], r, seed, 0);
                        char *dst = rb;
                        if (inpl) memcpy(rb, sb, vo[n] * 4), dst = rb + vo[r] * 4;
                        else poison(rb, vc[r] * 4 + 4);
                        st = ct_comm_reduce_scatterv(c, inpl ? rb : sb, dst, vc, dt, op, al);
                        if (*ct_comm_algo_restriction(c, CT_COLL_REDUCESCATTERV, al)) {
                            CT_ASSERT_IN(ctx, st == CT_ERR_UNSUPPORTED,
                                         "expected CT_ERR_UNSUPPORTED, got %d", st);
                            continue;
                        }
                        CT_ASSERT_IN(ctx, st == CT_OK, "status %d: %s", st, ct_comm_errmsg(c));
                        ref_reduce(ref, dt, op, vc[r], n, seed, vo[r]);
                        CT_ASSERT_IN(ctx, memcmp(ref, dst, vc[r] * 4) == 0,
                                     "result differs from the reference");
                        if (!inpl) {
                            uint32_t tail;
                            memcpy(&tail, rb + vc[r] * 4, 4);
                            CT_ASSERT_IN(ctx, tail == 0xffffffffu, "wrote past the end");
                        }
                    }
            }
            for (int ai = 0; ct_coll_algo_name(CT_COLL_ALLGATHERV, ai); ai++) {
                const char *al = ct_coll_algo_name(CT_COLL_ALLGATHERV, ai);
                for (int inpl = 0; inpl < 2; inpl++) {
                    snprintf(ctx, sizeof ctx, "%s n=%d r=%d allgatherv %s count=%zu%s", name, n, r,
                             al, cnt, inpl ? " inplace" : "");
                    seed++;
                    poison(rb, vo[n] * 4 + 4);
                    char *src = inpl ? rb + vo[r] * 4 : sb;
                    fill(src, CT_F32, vc[r], r, seed, vo[r]);
                    uint64_t b0 = ct_comm_bytes(c);
                    st = ct_comm_allgatherv(c, src, rb, vc, CT_F32, al);
                    if (*ct_comm_algo_restriction(c, CT_COLL_ALLGATHERV, al)) {
                        CT_ASSERT_IN(ctx, st == CT_ERR_UNSUPPORTED,
                                     "expected CT_ERR_UNSUPPORTED, got %d", st);
                        continue;
                    }
                    CT_ASSERT_IN(ctx, st == CT_OK, "status %d: %s", st, ct_comm_errmsg(c));
                    for (int q = 0; q < n; q++) fill(ref + vo[q] * 4, CT_F32, vc[q], q, seed, vo[q]);
                    CT_ASSERT_IN(ctx, memcmp(ref, rb, vo[n] * 4) == 0,
                                 "result differs from the reference");
                    uint32_t tail;
                    memcpy(&tail, rb + vo[n] * 4, 4);
                    CT_ASSERT_IN(ctx, tail == 0xffffffffu, "wrote past the end");
                    /* the byte count: the whole output less this rank's block */
                    CT_ASSERT_IN(ctx, ct_comm_bytes(c) - b0 == (vo[n] - vc[r]) * 4,
                                 "counted %llu bytes, expected %zu",
                                 (unsigned long long)(ct_comm_bytes(c) - b0), (vo[n] - vc[r]) * 4);
                }
            }
#undef CVV
        }
        /* ---- all-to-all: block j of worker q is val(q*n + j, i) */
        for (int ai = 0; ct_coll_algo_name(CT_COLL_ALLTOALL, ai); ai++) {
            const char *al = ct_coll_algo_name(CT_COLL_ALLTOALL, ai);
            for (int inpl = 0; inpl < 2; inpl++) {
                snprintf(ctx, sizeof ctx, "%s n=%d r=%d alltoall %s count=%zu%s", name, n, r, al, cnt,
                         inpl ? " inplace" : "");
                seed++;
                char *src = inpl ? rb : sb;
                for (int j = 0; j < n; j++) fill(src + (size_t)j * cnt * 4, CT_I32, cnt, r * n + j, seed, 0);
                if (!inpl) poison(rb, cnt * (size_t)n * 4);
                st = ct_comm_alltoall(c, src, rb, cnt, CT_I32, al);
                if (*ct_comm_algo_restriction(c, CT_COLL_ALLTOALL, al)) {
                    CT_ASSERT_IN(ctx, st == CT_ERR_UNSUPPORTED,
                                 "expected CT_ERR_UNSUPPORTED, got %d", st);
                    continue;
                }
                CT_ASSERT_IN(ctx, st == CT_OK, "status %d: %s", st, ct_comm_errmsg(c));
                for (int j = 0; j < n; j++) fill(ref + (size_t)j * cnt * 4, CT_I32, cnt, j * n + r, seed, 0);
                CT_ASSERT_IN(ctx, memcmp(ref, rb, cnt * (size_t)n * 4) == 0,
                             "result differs from the reference");
            }
        }
        /* ---- all-to-all-v: q sends cv(q, j) elements to j, placed with gaps */
        for (int ai = 0; ct_coll_algo_name(CT_COLL_ALLTOALLV, ai); ai++) {
            const char *al = ct_coll_algo_name(CT_COLL_ALLTOALLV, ai);
            size_t sc[64], sd[64], rc[64], rd[64], so = 0, ro = 0;
#define CV(q, j) ((size_t)(((q) * 3 + (j) * 5) % 4) + cnt / 2)
            for (int j = 0; j < n; j++) {
                sc[j] = CV(r, j); sd[j] = so; so += sc[j] + 1;
                rc[j] = CV(j, r); rd[j] = ro; ro += rc[j] + 2;
            }
            snprintf(ctx, sizeof ctx, "%s n=%d r=%d alltoallv %s count=%zu", name, n, r, al, cnt);
            seed++;
            for (int j = 0; j < n; j++) fill(sb + sd[j] * 4, CT_I32, sc[j], r * n + j, seed, 0);
            poison(rb, ro * 4);
            st = ct_comm_alltoallv(c, sb, sc, sd, rb, rc, rd, CT_I32, al);
            if (*ct_comm_algo_restriction(c, CT_COLL_ALLTOALLV, al)) {
                CT_ASSERT_IN(ctx, st == CT_ERR_UNSUPPORTED, "expected CT_ERR_UNSUPPORTED, got %d",
                             st);
                continue;
            }
            CT_ASSERT_IN(ctx, st == CT_OK, "status %d: %s", st, ct_comm_errmsg(c));
            poison(ref, ro * 4);
            for (int j = 0; j < n; j++) fill(ref + rd[j] * 4, CT_I32, rc[j], j * n + r, seed, 0);
            CT_ASSERT_IN(ctx, memcmp(ref, rb, ro * 4) == 0, "result differs from the reference");
        }
        /* ---- broadcast from the first and the last rank */
        for (int ai = 0; ct_coll_algo_name(CT_COLL_BCAST, ai); ai++) {
            const char *al = ct_coll_algo_name(CT_COLL_BCAST, ai);
            for (int root = 0; root < n; root += (n > 1 ? n - 1 : 1)) {
                snprintf(ctx, sizeof ctx, "%s n=%d r=%d bcast %s root=%d count=%zu", name, n, r, al, root, cnt);
                seed++;
                if (r == root) fill(rb, CT_F32, cnt, root, seed, 0);
                else poison(rb, cnt * 4);
                st = ct_comm_bcast(c, rb, cnt, CT_F32, root, al);
                if (*ct_comm_algo_restriction(c, CT_COLL_BCAST, al)) {
                    CT_ASSERT_IN(ctx, st == CT_ERR_UNSUPPORTED,
                                 "expected CT_ERR_UNSUPPORTED, got %d", st);
                    continue;
                }
                CT_ASSERT_IN(ctx, st == CT_OK, "status %d: %s", st, ct_comm_errmsg(c));
                fill(ref, CT_F32, cnt, root, seed, 0);
                CT_ASSERT_IN(ctx, memcmp(ref, rb, cnt * 4) == 0,
                             "result differs from the reference");
            }
        }
    }
    /* ---- barriers */
    for (int ai = 0; ct_coll_algo_name(CT_COLL_BARRIER, ai); ai++) {
        const char *al = ct_coll_algo_name(CT_COLL_BARRIER, ai);
        snprintf(ctx, sizeof ctx, "%s n=%d r=%d barrier %s", name, n, r, al);
        st = ct_comm_barrier(c, al);
        CT_ASSERT_IN(
            ctx,
            st == (*ct_comm_algo_restriction(c, CT_COLL_BARRIER, al) ? CT_ERR_UNSUPPORTED : CT_OK),
            "status %d: %s", st, ct_comm_errmsg(c));
    }
    /* ---- random floats: every worker must end with bitwise the same all-reduce */
    {
        size_t cnt = o->big;
        uint64_t *h = malloc(sizeof(uint64_t) * (size_t)n);
        for (int ai = 0; ct_coll_algo_name(CT_COLL_ALLREDUCE, ai); ai++) {
            const char *al = ct_coll_algo_name(CT_COLL_ALLREDUCE, ai);
            if (expect_restricted(c, al)) continue;
            snprintf(ctx, sizeof ctx, "%s n=%d r=%d allreduce %s random floats bitwise", name, n, r, al);
            uint32_t x = 12345u + 977u * (uint32_t)r;
            for (size_t i = 0; i < cnt; i++) {
                x = x * 1664525u + 1013904223u;
                ((float *)rb)[i] = (float)((double)(x >> 8) / 16777216.0 * 2.0 - 1.0) * 1e-3f * (float)(1 + i % 1000);
            }
            st = ct_comm_allreduce(c, rb, rb, cnt, CT_F32, CT_OP_SUM, al);
            CT_ASSERT_IN(ctx, st == CT_OK, "status %d: %s", st, ct_comm_errmsg(c));
            uint64_t mine = fnv(rb, cnt * 4);
            st = ct_comm_allgather(c, &mine, h, 2, CT_I32, "ring");
            CT_ASSERT_IN(ctx, st == CT_OK, "gather hashes: %s", ct_comm_errmsg(c));
            for (int q = 0; q < n; q++)
                CT_ASSERT_IN(ctx, h[q] == mine, "worker %d ended with different bits", q);
        }
        free(h);
    }
    free(sb);
    free(rb);
    free(ref);
}

/* Device buffers: the collectives on ct_buffer, world group only. */
static void device_suite(ct_comm *c, ct_device *dev, size_t big) {
    char ctx[160];
    int n = ct_comm_size(c), r = ct_comm_rank(c), st;
    size_t counts[4] = {1, (size_t)n + 1, big, ((size_t)CT_COMM_STAGE_CHUNK / 4) + 3};
    size_t maxc = counts[3] * (size_t)n;
    char *h = malloc(maxc * 4), *ref = malloc(maxc * 4);
    ct_buffer *a = NULL, *b = NULL;
    snprintf(ctx, sizeof ctx, "device r=%d alloc", r);
    CT_ASSERT_IN(ctx, ct_buffer_alloc(dev, CT_MEM_COMM, "comm_a", maxc * 4, &a) == CT_OK, "%s",
                 ct_device_errmsg(dev));
    CT_ASSERT_IN(ctx, ct_buffer_alloc(dev, CT_MEM_COMM, "comm_b", maxc * 4, &b) == CT_OK, "%s",
                 ct_device_errmsg(dev));
    if (!a || !b) goto done;
    int seed = 900;
    for (int ci = 0; ci < 4; ci++) {
        size_t cnt = counts[ci];
        for (int ai = 0; ct_coll_algo_name(CT_COLL_ALLREDUCE, ai); ai++) {
            const char *al = ct_coll_algo_name(CT_COLL_ALLREDUCE, ai);
            if (ci == 3 && strcmp(al, "ring") && strcmp(al, "hier")) continue; /* 2 chunks: keep it short */
            for (int inpl = 0; inpl < 2; inpl++) {
                snprintf(ctx, sizeof ctx, "device n=%d r=%d allreduce %s count=%zu%s", n, r, al, cnt,
                         inpl ? " inplace" : "");
                seed++;
                fill(h, CT_F32, cnt, r, seed, 0);
                ct_buffer_write(a, 0, h, cnt * 4);
                st = ct_comm_allreduce_buf(c, a, inpl ? a : b, cnt, CT_F32, CT_OP_SUM, al);
                if (expect_restricted(c, al)) {
                    CT_ASSERT_IN(ctx, st == CT_ERR_UNSUPPORTED,
                                 "expected CT_ERR_UNSUPPORTED, got %d", st);
                    continue;
                }
                CT_ASSERT_IN(ctx, st == CT_OK, "status %d: %s", st, ct_comm_errmsg(c));
                ct_buffer_read(inpl ? a : b, 0, h, cnt * 4);
                ref_reduce(ref, CT_F32, CT_OP_SUM, cnt, n, seed, 0);
                CT_ASSERT_IN(ctx, memcmp(ref, h, cnt * 4) == 0,
                             "result differs from the reference");
            }
        }
        if (ci == 3) continue;
        for (int inpl = 0; inpl < 2; inpl++) {
            for (int ai = 0; ct_coll_algo_name(CT_COLL_REDUCESCATTER, ai); ai++) {
                const char *al = ct_coll_algo_name(CT_COLL_REDUCESCATTER, ai);
                snprintf(ctx, sizeof ctx, "device n=%d r=%d reducescatter %s count=%zu%s", n, r, al, cnt, inpl ? " inplace" : "");
                seed++;
                fill(h, CT_F32, cnt * (size_t)n, r, seed, 0);
                ct_buffer_write(a, 0, h, cnt * (size_t)n * 4);
                st = ct_comm_reduce_scatter_buf(c, a, inpl ? a : b, cnt, CT_F32, CT_OP_MAX, al);
                if (*ct_comm_algo_restriction(c, CT_COLL_REDUCESCATTER, al)) {
                    CT_ASSERT_IN(ctx, st == CT_ERR_UNSUPPORTED,
                                 "expected CT_ERR_UNSUPPORTED, got %d", st);
                    continue;
                }
                CT_ASSERT_IN(ctx, st == CT_OK, "status %d: %s", st, ct_comm_errmsg(c));
                ct_buffer_read(inpl ? a : b, 0, h, cnt * 4);
                ref_reduce(ref, CT_F32, CT_OP_MAX, cnt, n, seed, (size_t)r * cnt);
                CT_ASSERT_IN(ctx, memcmp(ref, h, cnt * 4) == 0,
                             "result differs from the reference");
            }
            for (int ai = 0; ct_coll_algo_name(CT_COLL_ALLGATHER, ai); ai++) {
                const char *al = ct_coll_algo_name(CT_COLL_ALLGATHER, ai);
                snprintf(ctx, sizeof ctx, "device n=%d r=%d allgather %s count=%zu%s", n, r, al, cnt, inpl ? " inplace" : "");
                seed++;
                fill(h, CT_F32, cnt, r, seed, 0);
                ct_buffer_write(a, inpl ? (size_t)r * cnt * 4 : 0, h, cnt * 4);
                st = ct_comm_allgather_buf(c, a, inpl ? a : b, cnt, CT_F32, al);
                if (*ct_comm_algo_restriction(c, CT_COLL_ALLGATHER, al)) {
                    CT_ASSERT_IN(ctx, st == CT_ERR_UNSUPPORTED,
                                 "expected CT_ERR_UNSUPPORTED, got %d", st);
                    continue;
                }
                CT_ASSERT_IN(ctx, st == CT_OK, "status %d: %s", st, ct_comm_errmsg(c));
                ct_buffer_read(inpl ? a : b, 0, h, cnt * (size_t)n * 4);
                for (int q = 0; q < n; q++) fill(ref + (size_t)q * cnt * 4, CT_F32, cnt, q, seed, 0);
                CT_ASSERT_IN(ctx, memcmp(ref, h, cnt * (size_t)n * 4) == 0,
                             "result differs from the reference");
            }
            for (int ai = 0; ct_coll_algo_name(CT_COLL_ALLTOALL, ai); ai++) {
                const char *al = ct_coll_algo_name(CT_COLL_ALLTOALL, ai);
                snprintf(ctx, sizeof ctx, "device n=%d r=%d alltoall %s count=%zu%s", n, r, al, cnt, inpl ? " inplace" : "");
                seed++;
                for (int j = 0; j < n; j++) fill(h + (size_t)j * cnt * 4, CT_I32, cnt, r * n + j, seed, 0);
                ct_buffer_write(a, 0, h, cnt * (size_t)n * 4);
                st = ct_comm_alltoall_buf(c, a, inpl ? a : b, cnt, CT_I32, al);
                if (*ct_comm_algo_restriction(c, CT_COLL_ALLTOALL, al)) {
                    CT_ASSERT_IN(ctx, st == CT_ERR_UNSUPPORTED,
                                 "expected CT_ERR_UNSUPPORTED, got %d", st);
                    continue;
                }
                CT_ASSERT_IN(ctx, st == CT_OK, "status %d: %s", st, ct_comm_errmsg(c));
                ct_buffer_read(inpl ? a : b, 0, h, cnt * (size_t)n * 4);
                for (int j = 0; j < n; j++) fill(ref + (size_t)j * cnt * 4, CT_I32, cnt, j * n + r, seed, 0);
                CT_ASSERT_IN(ctx, memcmp(ref, h, cnt * (size_t)n * 4) == 0,
                             "result differs from the reference");
            }
        }
        for (int ai = 0; ct_coll_algo_name(CT_COLL_BCAST, ai); ai++) {
            const char *al = ct_coll_algo_name(CT_COLL_BCAST, ai);
            snprintf(ctx, sizeof ctx, "device n=%d r=%d bcast %s count=%zu", n, r, al, cnt);
            seed++;
            fill(h, CT_F32, cnt, r == n - 1 ? n - 1 : r + 50, seed, 0);
            ct_buffer_write(a, 0, h, cnt * 4);
            st = ct_comm_bcast_buf(c, a, cnt, CT_F32, n - 1, al);
            if (*ct_comm_algo_restriction(c, CT_COLL_BCAST, al)) {
                CT_ASSERT_IN(ctx, st == CT_ERR_UNSUPPORTED, "expected CT_ERR_UNSUPPORTED, got %d",
                             st);
                continue;
            }
            CT_ASSERT_IN(ctx, st == CT_OK, "status %d: %s", st, ct_comm_errmsg(c));
            ct_buffer_read(a, 0, h, cnt * 4);
            fill(ref, CT_F32, cnt, n - 1, seed, 0);
            CT_ASSERT_IN(ctx, memcmp(ref, h, cnt * 4) == 0, "result differs from the reference");
        }
    }
done:
    ct_buffer_free(a);
    ct_buffer_free(b);
    free(h);
    free(ref);
}

int main(int argc, char **argv) {
    ct_topo *topo = NULL;
    ct_err err = {0};
    int D = argc > 1 ? atoi(argv[1]) : 1, device = 0, nodes = 0;
    opts o = {0, 3001};
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--device")) device = 1;
        if (!strcmp(argv[i], "--full")) o.full = 1;
        if (!strncmp(argv[i], "--big=", 6)) o.big = (size_t)atol(argv[i] + 6);
        if (!strncmp(argv[i], "--nodes=", 8)) nodes = atoi(argv[i] + 8);
    }
    if (ct_topo_create(&topo, &argc, &argv, D, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    ct_test_mpi_begin();
    int W = ct_topo_world_size(topo), rank = ct_topo_rank(topo);
    ct_device_info *list = NULL;
    int ndev = 0;
    /* every device, each worker on its topology's index (not ct_test_devices: CT_DEVICE's pick) */
    CT_REQUIRE_OR(!device || ct_device_list(&list, &ndev, &err) == CT_OK, 2, "%s", err.msg);
#pragma omp parallel num_threads(D)
    {
        const char *ctx = "setup";
        int t = omp_get_thread_num();
        ct_comm *world = NULL, *half = NULL, *most = NULL;
        CT_ASSERT_IN(ctx, ct_comm_world(topo, t, &world) == CT_OK, "world");
        int wid = ct_comm_rank(world);
        CT_ASSERT_IN(ctx, wid == rank * D + t, "world rank %d, expected %d", wid, rank * D + t);
        if (nodes) { /* launched over several (Hydra) hosts: the levels of the hierarchy exist */
            CT_ASSERT_IN(ctx, ct_topo_nnodes(topo) == nodes && ct_comm_nhosts(world) == nodes,
                         "%d nodes, world spans %d hosts; launched on %d", ct_topo_nnodes(topo),
                         ct_comm_nhosts(world), nodes);
            /* the selector counts hosts: several, one holding several ranks -> hierarchical
               above 1 MiB (below, the latency-bound flat algorithms, as on one host) */
            const char *sel = ct_comm_algo_select(world, CT_COLL_ALLREDUCE, 4 << 20);
            if (ct_topo_nranks(topo) > nodes)
                CT_ASSERT_IN(ctx, !strcmp(sel, "hier"), "4 MiB all-reduce: selected %s", sel);
        }
        suite(world, "world", &o);
        /* split: parity groups with reversed keys; and all but the last worker */
        CT_ASSERT_IN(ctx, ct_comm_split(world, wid % 2, -wid, &half) == CT_OK, "%s",
                     ct_comm_errmsg(world));
        if (half) {
            CT_ASSERT_IN(ctx, ct_comm_size(half) == (W - wid % 2 + 1) / 2, "half size %d",
                         ct_comm_size(half));
            CT_ASSERT_IN(ctx, ct_comm_world_rank(half, 0) == (W - 1) - ((W - 1 - wid % 2) % 2),
                         "order %d", ct_comm_world_rank(half, 0));
            suite(half, "half", &o);
        }
        CT_ASSERT_IN(ctx,
                     ct_comm_split(world, wid < W - 1 || W == 1 ? 0 : CT_COMM_UNDEFINED, wid,
                                   &most) == CT_OK,
                     "%s", ct_comm_errmsg(world));
        CT_ASSERT_IN(ctx, (most == NULL) == (wid == W - 1 && W > 1), "undefined colour gives NULL");
        if (most) suite(most, "most", &o);
        if (device) {
            ct_device *dev = NULL;
            ct_device_opts dopt = ct_device_opts_default();
            dopt.apply_tuning = 0;
            CT_ASSERT_IN(ctx,
                         ct_device_open(&dev, &list[ct_topo_device_index(topo, t) % ndev], &dopt,
                                        &err) == CT_OK,
                         "open device: %s", err.msg);
            if (dev) device_suite(world, dev, o.big);
            ct_device_free(dev);
        }
        ct_comm_free(most);
        ct_comm_free(half);
        ct_comm_free(world);
    }
    ct_device_list_free(list);
    char name[80];
    snprintf(name, sizeof name, "test_parallel_coll: %d ranks x %d threads", ct_topo_nranks(topo),
             D);
    int rc = ct_test_mpi_end(name);
    ct_topo_free(topo);
    return rc;
}
