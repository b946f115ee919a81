/* grads.c - gradient ranges reduced over their groups, in buckets cut from the END of the flat
 * gradient layout (reverse layer order): bucket 0 is the last piece (lnf and the last layers),
 * the last bucket starts at 0 (the embeddings). Backward finishes gradients from the end towards
 * the start, so bucket k can leave once the executor reports a range from at most its start.
 *
 * Overlap: ct_grads_ready enqueues a non-blocking read of each finished bucket into host staging
 * on the in-order queue, right behind the kernels that finish it, and posts it to this worker's
 * communication thread, which waits for the read and reduces the bucket over its range's groups
 * on host memory while the device runs the next layers' backward. ct_grads_finish waits for the
 * last bucket and writes the results back with one write. Without overlap the same buckets go
 * one by one in ct_grads_finish: read, reduce, write.
 *
 * ZeRO >= 1: a bucket is reduce-scattered over its first group with per-rank counts (each
 * rank's part of the bucket is what lies in its shard, possibly nothing), so a worker receives
 * only its part: (N-1)/N of the bucket on the wire instead of an all-reduce's 2(N-1)/N. A range
 * with a second group (a pipeline's tied wte, SP's LayerNorms) is first all-reduced over it, whole
 * (its members' shards need not line up). The rest of the staged bucket is stale: ZeRO-1
 * writes it back unreduced (nothing reads gradients outside the shard), and the global norm comes
 * from the shards' sums of squares, summed over the group in ct_grads_finish.
 *
 * ZeRO-2: one bucket per backward piece (the head's LayerNorm, each block, the embeddings), read
 * from the gradient WORKING buffer (params.c) and the slot zeroed behind the read. A piece's
 * buckets leave right after the action that wrote it (ct_grads_ready names the piece), in
 * whatever order the schedule runs them, so a slot never carries a gradient past its pass and
 * two slots serve every schedule: the interleaved one's chunks, zb1's deferred weight passes
 * (the input half writes no block gradient). A bucket staged again waits for its previous
 * reduction only. Every micro-step's buckets leave (the full gradient is never kept) but a
 * range outside the slots with a second group (the tied wte, whose pipeline ends do not run a
 * micro-step's backward at the same time), which accumulates and leaves once, at the action
 * that finishes it. wte's gradient in windows (ct_params_wte_window) is no device range: its
 * bucket takes it from the parameters' host accumulator, which the head's and the embedding's
 * backward filled window by window. The thread adds this worker's part of each reduced bucket to
 * a host shard accumulator; ct_grads_finish writes the shard to the device and sums the shards'
 * squares over the group.
 *
 * --grad-reduce bf16 (ct_grads_opts.wire_bf16): the buckets cross as bf16, half the bytes.
 * parallel/'s reductions combine in the type on the wire, and it has no bf16 type: summing bf16
 * in bf16 would round after each addition. So the reduction is made here, around an all-to-all:
 *   reduce-scatter (rank k's part: counts[k] consecutive elements): every member sends rank k
 *     its part rounded to bf16 (nearest even; pairs in 4-byte elements, odd parts padded);
 *     rank k sums the N contributions in fp32, in member order (avg: then / N) and keeps fp32;
 *   all-reduce: that reduce-scatter over N equal blocks, each block's sum rounded to bf16 once
 *     and all-gathered, so every member ends with the same bits.
 * Bytes: (N-1)/N of the bucket at 2 bytes (reduce-scatter), twice that (all-reduce): half of
 * fp32's. Rounds of at most WIRE_ELEMS / (2N) elements per member keep the scratch one fixed
 * size whatever N (counted as host staging). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_step.h"
#include "engine_impl.h"

enum { WIRE_ELEMS = 1 << 19 }; /* --grad-reduce bf16: bf16 per scratch half (1 MiB) */

typedef struct bucket {
    size_t lo, hi; /* flat range */
    size_t work;   /* where it lies in the gradient buffer (ZeRO-2: the working buffer) */
    int range;     /* index of its ct_grad_range */
} bucket;

struct ct_grads {
    ct_model *m;
    ct_params *P;
    ct_device *dev;
    int zero, overlap;
    size_t local, lo, hi; /* local length, this worker's shard [lo, hi) */
    ct_grad_range *ranges;
    int nranges;
    bucket *b;
    int nb;
    ct_event **ev;
    float *stage; /* overlap: local floats (bucket k at stage + b[k].lo); else one bucket */
    size_t stage_floats;
    float *acc;   /* ZeRO-2: this worker's averaged shard, summed over micro-steps, laid out as
                     the gradient shard: [the experts' shard run | the dense shard run] */
    size_t opt_len, xs_lo, xsh; /* the shard's floats; the experts' run [xs_lo, xs_lo + xsh) */
    int wire_bf16;   /* --grad-reduce bf16 */
    uint16_t *wire;  /* wire_bf16: 2 x WIRE_ELEMS bf16 (send, receive) */
    size_t *wcnt;    /* wire_bf16: 6 x the largest group: counts, offsets, round's counts */
    /* ZeRO >= 1: the shards of a range's first group, rank k's [base + k len, base + (k+1) len):
     * the dense tensors' over DP (base: the experts' region's end), the experts' over their
     * expert-data-parallel group (base 0) */
    size_t dbase, dlen, xend, xlen;
    size_t *counts; /* [the largest first group] a reduce-scatter's per-rank counts */
    double ss;      /* ZeRO-1: sum of squares of this worker's reduced parts (not norm_skip) */
    ct_comm *ssg;   /* the group the shards' sums of squares are summed over (DP) */
    int armed, next_issue;
    int last;   /* the action running is the last to write its gradients */
    int *order; /* [nb] ring: the buckets in the order posted (entry i % nb) */
    char *pending; /* [nb] ZeRO-2: posted, not reduced yet (its staging is in use) */
    char *left;    /* [nb] ZeRO-2: posted by a last action this step (every bucket must be) */
    size_t blk_lo, blk_hi; /* ZeRO-2: the blocks' part of the flat layout (the two slots) */
    int all_bucketed; /* every range has a group (else only the buckets are written back) */
    /* communication thread */
    pthread_t th;
    int th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int nposted, ndone, quit;
    ct_status th_st;
    ct_err th_err; /* the thread's own record (never written by the worker thread) */
    double th_busy_ms;
    ct_grads_times times;
    ct_trace *tr;
    ct_err err;
};

void ct_grads_set_trace(ct_grads *g, ct_trace *t) { g->tr = t; }

ct_grads_opts ct_grads_opts_default(void) {
    ct_grads_opts o = {(size_t)25 << 20, 1, 0};
    return o;
}

const char *ct_grads_errmsg(const ct_grads *g) { return g->err.msg; }
int ct_grads_num_buckets(const ct_grads *g) { return g->nb; }
size_t ct_grads_host_bytes(const ct_grads *g) {
    return (g->stage_floats + (g->acc ? g->opt_len : 0)) * sizeof(float) +
           (g->wire ? 2 * (size_t)WIRE_ELEMS * sizeof(uint16_t) : 0) +
           ct_params_host_bytes(g->P);
}

/* ZeRO-2: add p (flat [lo, hi)) into the accumulator where it meets this worker's shard runs. */
static void acc_add(ct_grads *g, const float *p, size_t lo, size_t hi) {
    size_t run[2][3] = {{g->xs_lo, g->xs_lo + g->xsh, 0}, {g->lo, g->hi, g->xsh}};
    for (int r = 0; r < 2; r++) {
        size_t a = lo > run[r][0] ? lo : run[r][0], e = hi < run[r][1] ? hi : run[r][1];
        for (size_t i = a; i < e; i++) g->acc[run[r][2] + i - run[r][0]] += p[i - lo];
    }
}

/* This worker's part [*a, *e) of flat range [lo, hi) (empty: *a == *e) under its first group's
 * shards, and every rank's count of it. */
static void shard_part(ct_grads *g, ct_comm *c, size_t lo, size_t hi, size_t *a, size_t *e) {
    int n = ct_comm_size(c), me = ct_comm_rank(c);
    int ex = lo < g->xend;
    size_t base = ex ? 0 : g->dbase, len = ex ? g->xlen : g->dlen;
    for (int k = 0; k < n; k++) {
        size_t s0 = base + (size_t)k * len, s1 = s0 + len;
        size_t x0 = lo > s0 ? lo : s0, x1 = hi < s1 ? hi : s1;
        g->counts[k] = x1 > x0 ? x1 - x0 : 0;
        if (k == me) *a = x1 > x0 ? x0 : lo, *e = x1 > x0 ? x1 : lo;
    }
}

/* ------------------------------------------------------------------ bf16 on the wire */

static size_t even_up(size_t k) { return (k + 1) & ~(size_t)1; }

/* Reduce-scatter of p over c: rank k's part is cnt[k] elements at p + off[k]; this worker's
 * part is replaced by the fp32 sum (avg: mean) of every member's bf16-rounded part. */
static ct_status wire_rs(ct_grads *g, ct_comm *c, float *p, const size_t *cnt, const size_t *off,
                         ct_op op) {
    int N = ct_comm_size(c), me = ct_comm_rank(c);
    size_t *sc = g->wcnt + 2 * (size_t)N, *sd = sc + N, *rc = sd + N, *rd = rc + N;
    size_t m = WIRE_ELEMS / (2 * (size_t)N) & ~(size_t)1, most = 0;
    uint16_t *snd = g->wire, *rcv = g->wire + WIRE_ELEMS;
    for (int k = 0; k < N; k++) most = cnt[k] > most ? cnt[k] : most;
    for (size_t r0 = 0; r0 < most; r0 += m) { /* every member runs the same rounds */
        size_t at = 0, mine = cnt[me] > r0 ? (cnt[me] - r0 < m ? cnt[me] - r0 : m) : 0;
        for (int k = 0; k < N; k++) {
            size_t len = cnt[k] > r0 ? (cnt[k] - r0 < m ? cnt[k] - r0 : m) : 0;
            for (size_t i = 0; i < len; i++) snd[at + i] = ct_bf16_from_f32(p[off[k] + r0 + i]);
            if (len % 2) snd[at + len] = 0;
            sc[k] = even_up(len) / 2, sd[k] = at / 2, at += even_up(len);
            rc[k] = even_up(mine) / 2, rd[k] = (size_t)k * even_up(mine) / 2;
        }
        ct_status st = ct_comm_alltoallv(c, snd, sc, sd, rcv, rc, rd, CT_I32, NULL);
        if (st != CT_OK) return st;
        float *out = p + off[me] + r0;
        size_t e = even_up(mine);
        for (size_t i = 0; i < mine; i++) {
            float s = ct_bf16_to_f32(rcv[i]);
            for (int k = 1; k < N; k++) s += ct_bf16_to_f32(rcv[(size_t)k * e + i]);
            out[i] = op == CT_OP_AVG ? s / (float)N : s;
        }
    }
    return CT_OK;
}

/* All-reduce of p's n elements over c (sum or avg): wire_rs over N blocks, each block rounded
 * to bf16 by its owner and all-gathered. */
static ct_status wire_ar(ct_grads *g, ct_comm *c, float *p, size_t n, ct_op op) {
    int N = ct_comm_size(c), me = ct_comm_rank(c);
    size_t *cnt = g->wcnt, *off = cnt + N, b = (n + (size_t)N - 1) / (size_t)N;
    for (int k = 0; k < N; k++) {
        size_t lo = (size_t)k * b < n ? (size_t)k * b : n;
        off[k] = lo, cnt[k] = n - lo < b ? n - lo : b;
    }
    ct_status st = wire_rs(g, c, p, cnt, off, op);
    if (st != CT_OK) return st;
    size_t *gc = g->wcnt + 2 * (size_t)N, m = WIRE_ELEMS / (size_t)N & ~(size_t)1;
    uint16_t *all = g->wire;
    for (size_t r0 = 0; r0 < b; r0 += m) {
        size_t at = 0;
        for (int k = 0; k < N; k++) {
            size_t len = cnt[k] > r0 ? (cnt[k] - r0 < m ? cnt[k] - r0 : m) : 0;
            gc[k] = even_up(len) / 2;
            if (k == me) {
                for (size_t i = 0; i < len; i++)
                    all[at + i] = ct_bf16_from_f32(p[off[k] + r0 + i]);
                if (len % 2) all[at + len] = 0;
            }
            at += even_up(len);
        }
        size_t mine_at = 0;
        for (int k = 0; k < me; k++) mine_at += 2 * gc[k];
        if ((st = ct_comm_allgatherv(c, all + mine_at, all, gc, CT_I32, NULL)) != CT_OK) return st;
        at = 0;
        for (int k = 0; k < N; k++) { /* every member, the owner too, takes the rounded sums */
            size_t len = cnt[k] > r0 ? (cnt[k] - r0 < m ? cnt[k] - r0 : m) : 0;
            for (size_t i = 0; i < len; i++) p[off[k] + r0 + i] = ct_bf16_to_f32(all[at + i]);
            at += 2 * gc[k];
        }
    }
    return CT_OK;
}

/* An all-reduce of a staged range, in fp32 or bf16 on the wire. */
static ct_status allreduce(ct_grads *g, ct_comm *c, float *p, size_t n, ct_op op) {
    return g->wire_bf16 ? wire_ar(g, c, p, n, op)
                        : ct_comm_allreduce(c, p, p, n, CT_F32, op, NULL);
}

/* Reduce staged bucket k over its range's groups (in place on host memory). */
static ct_status reduce_bucket(ct_grads *g, int k, ct_err *err) {
    const bucket *bk = &g->b[k];
    const ct_grad_range *r = &g->ranges[bk->range];
    float *p = g->stage + (g->overlap ? bk->lo : 0);
    if (g->zero >= 1 && r->groups[0]) {
        /* the second group first, whole; then the shards' reduce-scatter over the first */
        ct_comm *c1 = r->groups[1], *c0 = r->groups[0];
        ct_status st = CT_OK;
        size_t a = bk->lo, e = bk->lo, n = bk->hi - bk->lo;
        if (c1 && (st = allreduce(g, c1, p, n, r->ops[1])) != CT_OK)
            return CT_ERR(err, st, "gradient reduction of [%zu, %zu): %s", bk->lo, bk->hi,
                          ct_comm_errmsg(c1));
        shard_part(g, c0, bk->lo, bk->hi, &a, &e);
        if (g->wire_bf16) { /* the parts lie in rank order from the bucket's start */
            size_t *off = g->wcnt + ct_comm_size(c0), at = 0;
            for (int j = 0; j < ct_comm_size(c0); at += g->counts[j], j++) off[j] = at;
            memcpy(g->wcnt, g->counts, sizeof *g->counts * (size_t)ct_comm_size(c0));
            st = wire_rs(g, c0, p, g->wcnt, off, r->ops[0]);
        } else {
            st = ct_comm_reduce_scatterv(c0, p, p + (a - bk->lo), g->counts, CT_F32, r->ops[0],
                                         NULL);
        }
        if (st != CT_OK)
            return CT_ERR(err, st, "gradient reduce-scatter of [%zu, %zu): %s", bk->lo, bk->hi,
                          ct_comm_errmsg(c0));
        if (g->acc) { /* ZeRO-2: keep this worker's part */
            acc_add(g, p + (a - bk->lo), a, e);
        } else if (!r->norm_skip) {
            double ss = 0;
            for (size_t i = a; i < e; i++) ss += (double)p[i - bk->lo] * p[i - bk->lo];
            g->ss += ss;
        }
        return CT_OK;
    }
    for (int i = 0; i < 2; i++) {
        if (!r->groups[i]) continue;
        ct_status st = allreduce(g, r->groups[i], p, bk->hi - bk->lo, r->ops[i]);
        if (st != CT_OK)
            return CT_ERR(err, st, "gradient reduction of [%zu, %zu): %s", bk->lo, bk->hi,
                          ct_comm_errmsg(r->groups[i]));
    }
    if (g->acc) acc_add(g, p, bk->lo, bk->hi); /* ZeRO-2: keep this worker's part (the
                                                   experts held by no other worker: all) */
    return CT_OK;
}

/* The communication thread: reduce posted buckets in order. */
static void *comm_main(void *arg) {
    ct_grads *g = (ct_grads *)arg;
    pthread_mutex_lock(&g->mu);
    for (;;) {
        while (!g->quit && g->ndone == g->nposted) pthread_cond_wait(&g->cv, &g->mu);
        if (g->quit) break;
        int k = g->order[g->ndone % g->nb];
        pthread_mutex_unlock(&g->mu);
        ct_status st = ct_event_wait_err(g->ev[k], &g->th_err);
        ct_event_release(g->ev[k]);
        g->ev[k] = NULL;
        double t0 = ct_time_now(); /* busy: the reduction, not the wait for backward */
        if (st == CT_OK) st = reduce_bucket(g, k, &g->th_err);
        double t1 = ct_time_now();
        ct_trace_event(g->tr, CT_TRACE_COMM, "bucket reduction", "comm", t0, -1);
        pthread_mutex_lock(&g->mu);
        if (st != CT_OK && g->th_st == CT_OK) g->th_st = st;
        g->th_busy_ms += 1e3 * (t1 - t0);
        g->pending[k] = 0;
        g->ndone++;
        pthread_cond_broadcast(&g->cv);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

static ct_status add_bucket(ct_grads *g, int *cap, size_t lo, size_t hi, size_t work, int range) {
    if (g->nb == *cap) {
        int nc = *cap ? 2 * *cap : 64;
        bucket *nb = ct_realloc(g->b, sizeof *nb * (size_t)nc);
        if (!nb) return CT_ERR(&g->err, CT_ERR_NOMEM, "gradient buckets: out of host memory");
        g->b = nb, *cap = nc;
    }
    bucket *bk = &g->b[g->nb++];
    bk->lo = lo, bk->hi = hi, bk->work = work, bk->range = range;
    return CT_OK;
}

static int range_of(const ct_grads *g, size_t lo, size_t hi) {
    for (int r = 0; r < g->nranges; r++)
        if (lo >= g->ranges[r].lo && hi <= g->ranges[r].hi) return r;
    return -1;
}

/* The buckets, last first. */
static ct_status cut_buckets(ct_grads *g, size_t bucket_floats) {
    int cap = 0;
    ct_status st = CT_OK;
    if (g->zero >= 2) {
        /* one bucket per backward stage: the head's LayerNorm, each held block, the embeddings */
        const ct_gpt_config *c = ct_params_config(g->P);
        size_t a, e;
        ct_params_lnf_range(g->P, &a, &e);
        struct {
            size_t lo, hi;
        } piece[1024 + 2];
        int n = 0;
        if (e > a) piece[n].lo = a, piece[n].hi = e, n++;
        for (int l = c->layers - 1; l >= 0; l--)
            if (ct_params_holds_layer(g->P, l) && n < 1024 + 1)
                piece[n].lo = ct_params_layer_begin(g->P, l),
                piece[n].hi = ct_params_layer_end(g->P, l), n++;
        size_t emb = ct_params_layer_begin(g->P, 0);
        if (emb > 0) piece[n].lo = 0, piece[n].hi = emb, n++;
        for (int k = 0; k < n && st == CT_OK; k++) {
            /* a piece over several ranges (the embeddings: a tied wte and wpe) is one bucket per
             * range, last first */
            size_t hi = piece[k].hi;
            while (hi > piece[k].lo && st == CT_OK) {
                int r = range_of(g, hi - 1, hi);
                size_t lo = g->ranges[r].lo > piece[k].lo ? g->ranges[r].lo : piece[k].lo;
                st = add_bucket(g, &cap, lo, hi, ct_params_work_off(g->P, lo), r);
                hi = lo;
            }
        }
        return st;
    }
    for (int r = g->nranges - 1; r >= 0 && st == CT_OK; r--) {
        size_t hi = g->ranges[r].hi, lo = g->ranges[r].lo;
        if (!g->ranges[r].groups[0] && !g->ranges[r].groups[1]) continue; /* nothing to reduce */
        while (hi > lo && st == CT_OK) {
            size_t a = hi - lo > bucket_floats ? hi - bucket_floats : lo;
            st = add_bucket(g, &cap, a, hi, a, r);
            hi = a;
        }
    }
    return st;
}

/* Host staging floats once the buckets are cut: the whole local layout with overlap (bucket k
 * at its own offset, several in flight), else the biggest bucket. */
static size_t stage_floats(const ct_grads *g) {
    size_t biggest = 0;
    for (int k = 0; k < g->nb; k++)
        if (g->b[k].hi - g->b[k].lo > biggest) biggest = g->b[k].hi - g->b[k].lo;
    return g->overlap ? g->local : biggest;
}

ct_status ct__grads_host_bytes_plan(const ct_params *P, const ct_grad_range *ranges, int n,
                                    const ct_grads_opts *o, size_t *bytes, ct_err *err) {
    ct_grads_opts def = ct_grads_opts_default();
    if (!o) o = &def;
    *bytes = 0;
    if (n <= 0) return CT_OK; /* nothing to reduce: the executor makes no ct_grads */
    ct_grads g;
    memset(&g, 0, sizeof g);
    g.P = (ct_params *)P;
    g.zero = ct_params_zero_stage(P);
    g.overlap = o->overlap;
    g.local = ct_params_local_len(P);
    ct_params_shard(P, &g.lo, &g.hi);
    g.ranges = (ct_grad_range *)ranges;
    g.nranges = n;
    size_t bf = o->bucket_bytes / sizeof(float);
    if (bf < 1024) bf = 1024;
    ct_status st = cut_buckets(&g, bf);
    if (st == CT_OK)
        *bytes = (stage_floats(&g) + (g.zero >= 2 ? ct_params_opt_len(P) : 0)) *
                     sizeof(float) +
                 (o->wire_bf16 ? 2 * (size_t)WIRE_ELEMS * sizeof(uint16_t) : 0) +
                 ct_params_host_bytes(P);
    else
        CT_ERR(err, st, "%s", g.err.msg);
    free(g.b);
    return st;
}

ct_status ct_grads_create(ct_grads **out, ct_model *m, const ct_grad_range *ranges, int n,
                          const ct_grads_opts *o, ct_err *err) {
    *out = NULL;
    ct_grads_opts def = ct_grads_opts_default();
    if (!o) o = &def;
    ct_grads *g = ct_calloc(1, sizeof *g);
    if (!g) return CT_ERR(err, CT_ERR_NOMEM, "ct_grads_create: out of host memory");
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->m = m;
    g->P = ct_model_params(m);
    g->dev = ct_model_device(m);
    g->zero = ct_params_zero_stage(g->P);
    g->overlap = o->overlap != 0 || g->zero >= 2; /* ZeRO-2 empties slots during backward */
    g->local = ct_params_local_len(g->P);
    ct_params_shard(g->P, &g->lo, &g->hi);
    ct_status st = CT_OK;
    size_t at = 0;
    for (int r = 0; r < n && st == CT_OK; r++) {
        if (ranges[r].lo != at || ranges[r].hi <= ranges[r].lo || ranges[r].hi > g->local)
            st = CT_ERR(err, CT_ERR_ARG,
                        "ct_grads_create: range %d [%zu, %zu) does not continue the cover of [0, "
                        "%zu) at %zu",
                        r, ranges[r].lo, ranges[r].hi, g->local, at);
        else
            at = ranges[r].hi;
    }
    if (st == CT_OK && at != g->local)
        st = CT_ERR(err, CT_ERR_ARG, "ct_grads_create: the ranges cover [0, %zu) of [0, %zu)", at,
                    g->local);
    if (st != CT_OK) {
        ct_grads_free(g);
        return st;
    }
    g->nranges = n;
    g->ranges = ct_malloc(sizeof *g->ranges * (size_t)n);
    if (!g->ranges) {
        ct_grads_free(g);
        return CT_ERR(err, CT_ERR_NOMEM, "ct_grads_create: out of host memory");
    }
    memcpy(g->ranges, ranges, sizeof *g->ranges * (size_t)n);
    int nmax = 1;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < 2; i++)
            if (ranges[r].groups[i] && ct_comm_size(ranges[r].groups[i]) > nmax)
                nmax = ct_comm_size(ranges[r].groups[i]);
    if (g->zero >= 1) {
        size_t x0, x1, slo[2], shi[2];
        ct_params_expert_range(g->P, &x0, &x1);
        if (ct_params_shards(g->P, slo, shi) == 2)
            g->xend = x1, g->xlen = shi[0] - slo[0], g->xs_lo = slo[0], g->xsh = g->xlen;
        g->opt_len = ct_params_opt_len(g->P);
        g->dlen = g->hi - g->lo;
        g->dbase = g->lo - g->dlen * (size_t)ct_params_coords(g->P)->dp_rank;
        g->ssg = ranges[n - 1].groups[0];
    }
    g->counts = ct_malloc(sizeof *g->counts * (size_t)nmax);
    if (!g->counts) {
        ct_grads_free(g);
        return CT_ERR(err, CT_ERR_NOMEM, "ct_grads_create: out of host memory");
    }
    g->all_bucketed = 1;
    for (int r = 0; r < n; r++)
        if (!ranges[r].groups[0] && !ranges[r].groups[1]) g->all_bucketed = 0;
    size_t bf = o->bucket_bytes / sizeof(float);
    if (bf < 1024) bf = 1024;
    if ((st = cut_buckets(g, bf)) != CT_OK) {
        CT_ERR(err, st, "ct_grads_create: %s", g->err.msg);
        ct_grads_free(g);
        return st;
    }
    g->stage_floats = stage_floats(g);
    g->ev = ct_calloc((size_t)(g->nb ? g->nb : 1), sizeof *g->ev);
    g->order = ct_calloc((size_t)(g->nb ? g->nb : 1), sizeof *g->order);
    g->pending = ct_calloc((size_t)(g->nb ? g->nb : 1), 1);
    g->left = ct_calloc((size_t)(g->nb ? g->nb : 1), 1);
    g->stage = ct_malloc((g->stage_floats ? g->stage_floats : 1) * sizeof(float));
    if (g->zero >= 2) g->acc = ct_calloc(g->opt_len ? g->opt_len : 1, sizeof(float));
    size_t lnf_hi;
    g->blk_lo = ct_params_layer_begin(g->P, -1);
    ct_params_lnf_range(g->P, &g->blk_hi, &lnf_hi);
    if ((g->wire_bf16 = o->wire_bf16 != 0) && nmax > WIRE_ELEMS / 8) {
        ct_grads_free(g);
        return CT_ERR(err, CT_ERR_UNSUPPORTED, "--grad-reduce bf16: at most %d workers in a "
                      "group (%d)", WIRE_ELEMS / 8, nmax);
    }
    if (g->wire_bf16) {
        g->wire = ct_malloc(2 * (size_t)WIRE_ELEMS * sizeof(uint16_t));
        g->wcnt = ct_malloc(6 * (size_t)nmax * sizeof(size_t));
    }
    if (!g->ev || !g->order || !g->pending || !g->left || !g->stage ||
        (g->zero >= 2 && !g->acc) || (g->wire_bf16 && (!g->wire || !g->wcnt))) {
        ct_grads_free(g);
        return CT_ERR(err, CT_ERR_NOMEM, "ct_grads_create: out of host memory for staging");
    }
    if (g->overlap) {
        if (pthread_create(&g->th, NULL, comm_main, g) != 0) {
            ct_grads_free(g);
            return CT_ERR(err, CT_ERR_NOMEM, "ct_grads_create: cannot start the communication "
                                             "thread");
        }
        g->th_started = 1;
    }
    *out = g;
    return CT_OK;
}

void ct_grads_free(ct_grads *g) {
    if (!g) return;
    if (g->th_started) {
        pthread_mutex_lock(&g->mu);
        g->quit = 1;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->th, NULL);
    }
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    if (g->ev)
        for (int k = 0; k < g->nb; k++) ct_event_release(g->ev[k]);
    free(g->ranges);
    free(g->b);
    free(g->ev);
    free(g->order);
    free(g->pending);
    free(g->left);
    free(g->stage);
    free(g->acc);
    free(g->wire);
    free(g->wcnt);
    free(g->counts);
    free(g);
}

ct_status ct_grads_begin(ct_grads *g, int last) {
    g->armed = last || g->zero >= 2;
    g->last = last;
    return CT_OK;
}

/* Stage bucket k behind the enqueued commands and hand it to the thread (ZeRO-2: after its
 * previous reduction, whose staging it reuses; the slot emptied behind the read). */
static ct_status post_bucket(ct_grads *g, int k) {
    size_t n = g->b[k].hi - g->b[k].lo;
    ct_arena *gb = ct_params_grads(g->P);
    if (g->zero >= 2) {
        double t0 = ct_time_now();
        pthread_mutex_lock(&g->mu);
        while (g->pending[k]) pthread_cond_wait(&g->cv, &g->mu);
        pthread_mutex_unlock(&g->mu);
        g->times.exposed_ms += 1e3 * (ct_time_now() - t0);
    }
    size_t w0, w1;
    ct_params_wte_range(g->P, &w0, &w1);
    ct_status st = CT_OK;
    size_t lo = g->b[k].lo, hi = g->b[k].hi;
    if (ct_params_wte_window(g->P) && lo <= w0 && hi >= w1 && w1 > w0) {
        /* wte's gradient in windows: already summed on the host (ct_params_wte_window_add); the
         * bucket's other tensors (wpe) read as they are, waited for */
        ct_params_wte_host_take(g->P, g->stage + w0);
        size_t run[2][2] = {{lo, w0}, {w1, hi}};
        for (int r = 0; r < 2 && st == CT_OK; r++) {
            size_t a = run[r][0], e = run[r][1], wo = ct_params_work_off(g->P, a);
            if (e <= a) continue;
            st = ct_arena_read(gb, wo * sizeof(float), g->stage + a, (e - a) * sizeof(float));
            if (st == CT_OK) st = ct_arena_zero(gb, wo * sizeof(float), (e - a) * sizeof(float));
        }
    } else {
        st = ct_arena_read_async(gb, g->b[k].work * sizeof(float), n * sizeof(float),
                                 g->stage + g->b[k].lo, &g->ev[k]);
        if (st == CT_OK && g->zero >= 2)
            st = ct_arena_zero(gb, g->b[k].work * sizeof(float), n * sizeof(float));
    }
    if (st != CT_OK)
        return CT_ERR(&g->err, st, "staging gradient bucket %d: %s", k, ct_device_errmsg(g->dev));
    ct_device_flush(g->dev);
    pthread_mutex_lock(&g->mu);
    g->order[g->nposted % g->nb] = k;
    g->pending[k] = 1;
    g->nposted++;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
    return CT_OK;
}

ct_status ct_grads_ready(ct_grads *g, size_t lo, size_t hi) {
    if (!g->armed || !g->overlap) return CT_OK;
    ct_status st = CT_OK;
    if (g->zero >= 2) {
        /* the piece's buckets (stored last first, like the pieces) */
        for (int k = 0; k < g->nb && st == CT_OK; k++) {
            const bucket *bk = &g->b[k];
            if (bk->lo < lo || bk->hi > hi) continue;
            int slotted = bk->lo >= g->blk_lo && bk->hi <= g->blk_hi;
            /* outside the slots, a range with a second group and the experts accumulate and
             * leave once */
            if (!g->last && !slotted && (g->ranges[bk->range].groups[1] || bk->hi <= g->xend))
                continue;
            st = post_bucket(g, k);
            if (st == CT_OK && g->last) g->left[k] = 1;
        }
        return st;
    }
    while (st == CT_OK && g->next_issue < g->nb && g->b[g->next_issue].lo >= lo)
        st = post_bucket(g, g->next_issue++);
    return st;
}

ct_status ct_grads_finish(ct_grads *g, double *sumsq) {
    ct_status st = CT_OK;
    double t0 = ct_time_now();
    ct_arena *gb = ct_params_grads(g->P);
    if (sumsq) *sumsq = 0;
    if (g->overlap && g->armed) {
        for (int k = 0; g->zero >= 2 && k < g->nb; k++) /* a gradient never left: lost */
            if (!g->left[k])
                return CT_ERR(&g->err, CT_ERR_STATE,
                              "ct_grads_finish: gradient bucket %d [%zu, %zu) was not handed over "
                              "by the last action writing it (ct_grads_ready)",
                              k, g->b[k].lo, g->b[k].hi);
        if (g->zero >= 2) memset(g->left, 0, (size_t)g->nb);
        if (g->zero < 2 && g->next_issue != g->nb)
            return CT_ERR(&g->err, CT_ERR_STATE,
                          "ct_grads_finish: %d of %d buckets were handed over (was the backward "
                          "of the last micro-step reported up to 0?)",
                          g->next_issue, g->nb);
        pthread_mutex_lock(&g->mu);
        while (g->ndone < g->nposted) pthread_cond_wait(&g->cv, &g->mu);
        st = g->th_st;
        if (st != CT_OK) CT_ERR(&g->err, st, "%s", g->th_err.msg);
        g->th_st = CT_OK;
        g->nposted = g->ndone = 0;
        g->times.busy_ms += g->th_busy_ms;
        g->th_busy_ms = 0;
        pthread_mutex_unlock(&g->mu);
        if (st == CT_OK && g->acc) {
            /* the shard to the device; the global sum of squares from every worker's shard */
            size_t sh = g->opt_len;
            size_t run[2][3] = {{g->xs_lo, g->xs_lo + g->xsh, 0}, {g->lo, g->hi, g->xsh}};
            double ss = 0;
            for (int r = 0; r < g->nranges; r++) /* ranges counted on another worker left out */
                for (int k = 0; k < 2 && !g->ranges[r].norm_skip; k++) {
                    size_t a = g->ranges[r].lo > run[k][0] ? g->ranges[r].lo : run[k][0];
                    size_t e = g->ranges[r].hi < run[k][1] ? g->ranges[r].hi : run[k][1];
                    for (size_t i = a; i < e; i++) {
                        double v = g->acc[run[k][2] + i - run[k][0]];
                        ss += v * v;
                    }
                }
            float fs = (float)ss;
            st = ct_arena_write(ct_params_grad_shard(g->P), 0, g->acc, sh * sizeof(float));
            if (st != CT_OK)
                CT_ERR(&g->err, st, "writing the gradient shard: %s", ct_device_errmsg(g->dev));
            memset(g->acc, 0, sh * sizeof(float));
            ct_comm *dp = g->ssg;
            if (st == CT_OK && dp) {
                st = ct_comm_allreduce(dp, &fs, &fs, 1, CT_F32, CT_OP_SUM, NULL);
                if (st != CT_OK)
                    CT_ERR(&g->err, st, "gradient norm over the group: %s", ct_comm_errmsg(dp));
            }
            if (sumsq) *sumsq = fs;
        } else if (st == CT_OK && g->all_bucketed) {
            st = ct_arena_write(gb, 0, g->stage, g->local * sizeof(float));
            if (st != CT_OK)
                CT_ERR(&g->err, st, "writing reduced gradients: %s", ct_device_errmsg(g->dev));
        } else {
            /* only the ranges some group reduces (a pipeline stage's tied wte, say) */
            for (int k = 0; k < g->nb && st == CT_OK; k++) {
                size_t n = g->b[k].hi - g->b[k].lo;
                st = ct_arena_write(gb, g->b[k].lo * sizeof(float), g->stage + g->b[k].lo,
                                     n * sizeof(float));
                if (st != CT_OK)
                    CT_ERR(&g->err, st, "writing reduced gradients: %s", ct_device_errmsg(g->dev));
            }
        }
    } else {
        for (int k = 0; k < g->nb && st == CT_OK; k++) {
            size_t n = g->b[k].hi - g->b[k].lo, off = g->b[k].work * sizeof(float);
            st = ct_arena_read(gb, off, g->stage, n * sizeof(float));
            if (st == CT_OK) st = reduce_bucket(g, k, &g->err);
            else CT_ERR(&g->err, st, "staging a gradient bucket: %s", ct_device_errmsg(g->dev));
            if (st == CT_OK && (st = ct_arena_write(gb, off, g->stage, n * sizeof(float))) != CT_OK)
                CT_ERR(&g->err, st, "writing reduced gradients: %s", ct_device_errmsg(g->dev));
        }
        g->times.busy_ms += 1e3 * (ct_time_now() - t0);
    }
    if (g->zero == 1 && g->ssg) { /* the shards' sums of squares over the group */
        float fs = (float)g->ss;
        g->ss = 0;
        ct_status s2 = st == CT_OK ? ct_comm_allreduce(g->ssg, &fs, &fs, 1, CT_F32, CT_OP_SUM,
                                                       NULL)
                                   : st;
        if (st == CT_OK && s2 != CT_OK)
            st = CT_ERR(&g->err, s2, "gradient norm over the group: %s", ct_comm_errmsg(g->ssg));
        if (sumsq) *sumsq = fs;
    }
    g->armed = 0;
    g->next_issue = 0;
    g->times.exposed_ms += 1e3 * (ct_time_now() - t0);
    return st;
}

void ct_grads_times_get(const ct_grads *g, ct_grads_times *out) { *out = g->times; }
int ct_grads_sharded(const ct_grads *g) { return g && g->zero >= 1 && g->ssg; }
void ct_grads_times_reset(ct_grads *g) { memset(&g->times, 0, sizeof g->times); }
