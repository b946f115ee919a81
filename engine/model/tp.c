/* tp.c - tensor parallelism's pieces (see ct_engine_tp.h): column- and row-parallel linear
 * layers with Megatron's conjugate operators, the vocabulary-parallel embedding and
 * cross-entropy, sequence parallelism's gathers and scatters, each calling parallel/ itself.
 *
 * A transfer is: a non-blocking read of the device range into one of two host staging buffers
 * (queued behind the kernels that produce it), the host collective in place on the staging, a
 * non-blocking write of the result to its destination (queued before the kernels that read it).
 * The in-order queue orders each staging buffer's writes before its next read, so the host never
 * waits for a write. The column-parallel backward starts its input-gradient transfer, queues the
 * weight-gradient GEMM behind it and only then communicates: the device computes the GEMM while
 * the host reduces (Megatron's overlap); under sequence parallelism the re-gather of the
 * LayerNorm output likewise runs while the device computes the input gradient.
 *
 * bf16 (a view of CT_STORE_BF16: activations and their gradients in a bf16 model) crosses the link
 * as bf16, half fp32's bytes. parallel/'s collectives have no bf16 type, so bf16 travels as pairs
 * in 4-byte elements (blocks padded to an even count) and the sums are made here: a
 * reduce-scatter is an all-to-all of the blocks, each worker summing its block of every member's
 * contribution in fp32, in member order, rounding once (nearest even); an all-reduce is that
 * reduce-scatter and an all-gather of the summed blocks, so every worker ends with the same bits
 * and sends 2(N-1)/N of the tensor's bf16 bytes, as a ring all-reduce does of fp32's.
 *
 * Why host staging and not the device-buffer collectives of parallel/: those work at offset 0 of
 * a whole ct_buffer, and TP's tensors are views into the activation arena; mapping part of the
 * arena while kernels run on other parts is undefined in OpenCL. On PoCL's CPU device a read or
 * write is a memcpy, a small cost beside the collective itself (docs/BENCHMARKS.md). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_ops_llama.h"
#include "ct_engine_tp.h"

enum { X_AR = 0, X_RS = 1, X_AG = 2 };

struct ct_tp {
    ct_comm *c;
    int n, r;
    ct_device *dev;
    ct_arena *arena;
    ct_tp_opts o;
    float *stage[2];
    size_t cap; /* floats per staging buffer (bf16 transfers use at most half of it) */
    int devmode;     /* device-resident collectives (every member shares this context) */
    ct_buffer *tmp;  /* device mode: cap floats of scratch (reduce-scatter, all-gather) */
    ct_tp_stats stats;
    ct_err err;
};

/* One transfer in flight: started (read queued), then finished (communicated, write queued). */
typedef struct xfer {
    int kind, stage, overlapped, live;
    size_t n; /* all-reduce: elements; reduce-scatter: output elements; all-gather: input ones */
    size_t es; /* bytes per element: 4 (fp32), 2 (bf16) */
    ct_op op;
    ct_view dst, src;
    ct_buffer *dstb; /* the arena piece dst lies in */
    ct_event *rd;
} xfer;

ct_tp_opts ct_tp_opts_default(void) {
    ct_tp_opts o = {0, 1, 0, CT_TP_COMM_AUTO};
    return o;
}

/* Device-resident collectives need every member in this process (threads) with its device
 * opened in one shared context (ct_device_opts.context): then each worker's kernels read the
 * others' memory and its queue waits on their events. Decided from what every member reports,
 * so all decide alike. */
static ct_status choose_mode(ct_tp *t, ct_err *err) {
    t->devmode = 0;
    if (t->o.comm == CT_TP_COMM_HOST || t->n < 2) return CT_OK;
    int local = ct_comm_local_size(t->c) == t->n;
    uint64_t mine = (uint64_t)(uintptr_t)ct_device_context(t->dev), *all = NULL;
    int same = local;
    if (local) {
        all = ct_malloc(sizeof *all * (size_t)t->n);
        if (!all) return CT_ERR(err, CT_ERR_NOMEM, "ct_tp_create: out of host memory");
        ct_status st = ct_comm_allgather(t->c, &mine, all, 2, CT_I32, NULL);
        if (st != CT_OK) {
            free(all);
            return CT_ERR(err, st, "ct_tp_create: exchanging contexts over the TP group: %s",
                          ct_comm_errmsg(t->c));
        }
        for (int k = 0; k < t->n; k++) same &= all[k] == mine;
        free(all);
    }
    /* auto: not on a CPU device, where device memory is host memory and the staging a memcpy
     * (measured faster there than the rounds of event exchange: docs/BENCHMARKS.md) */
    int cpu = (ct_device_get_info(t->dev)->type & CL_DEVICE_TYPE_CPU) != 0;
    if (same && (t->o.comm == CT_TP_COMM_DEVICE || !cpu)) {
        t->devmode = 1;
        return CT_OK;
    }
    if (same) return CT_OK;
    if (t->o.comm == CT_TP_COMM_DEVICE)
        return CT_ERR(err, CT_ERR_ARG,
                      "TP communication 'device' needs the %d workers of a TP group to be threads "
                      "of one process sharing one device (--workers-per-device); %s",
                      t->n, local ? "their devices differ" : "this group spans processes");
    return CT_OK;
}

ct_status ct_tp_create(ct_tp **out, ct_comm *c, ct_device *dev, ct_arena *arena,
                       size_t max_floats, const ct_tp_opts *o, ct_err *err) {
    *out = NULL;
    if (!c || !dev || !arena || max_floats == 0)
        return CT_ERR(err, CT_ERR_ARG, "ct_tp_create: a TP group, a device, an arena and a size "
                                       "are needed");
    ct_tp *t = ct_calloc(1, sizeof *t);
    if (!t) return CT_ERR(err, CT_ERR_NOMEM, "ct_tp_create: out of host memory");
    t->c = c;
    t->n = ct_comm_size(c);
    t->r = ct_comm_rank(c);
    t->dev = dev;
    t->arena = arena;
    t->o = o ? *o : ct_tp_opts_default();
    t->cap = max_floats;
    ct_status st = choose_mode(t, err);
    if (st != CT_OK) {
        ct_tp_free(t);
        return st;
    }
    if (t->devmode) {
        st = ct_buffer_alloc(dev, CT_MEM_COMM, "TP device scratch", max_floats * sizeof(float),
                             &t->tmp);
        if (st != CT_OK) {
            CT_ERR(err, st, "ct_tp_create: %s", ct_device_errmsg(dev));
            ct_tp_free(t);
            return st;
        }
        *out = t;
        return CT_OK;
    }
    t->stage[0] = ct_malloc(max_floats * sizeof(float));
    t->stage[1] = ct_malloc(max_floats * sizeof(float));
    if (!t->stage[0] || !t->stage[1]) {
        ct_tp_free(t);
        return CT_ERR(err, CT_ERR_NOMEM, "ct_tp_create: no host memory for TP staging (2 x %zu "
                                         "floats)", max_floats);
    }
    *out = t;
    return CT_OK;
}

void ct_tp_free(ct_tp *t) {
    if (!t) return;
    ct_device_finish(t->dev); /* writes from the staging may still be queued */
    ct_buffer_free(t->tmp);
    free(t->stage[0]);
    free(t->stage[1]);
    free(t);
}

int ct_tp_size(const ct_tp *t) { return t ? t->n : 1; }
int ct_tp_rank(const ct_tp *t) { return t ? t->r : 0; }
int ct_tp_sp(const ct_tp *t) { return t ? t->o.sp : 0; }
size_t ct_tp_host_bytes(const ct_tp *t) {
    return t && !t->devmode ? 2 * t->cap * sizeof(float) : 0;
}
int ct_tp_device_comm(const ct_tp *t) { return t ? t->devmode : 0; }

ct_status ct_tp_comm_parse(const char *s, int *out, ct_err *err) {
    static const char *const names[] = {"auto", "host", "device"};
    for (int k = 0; k < 3; k++)
        if (s && !strcmp(s, names[k])) {
            *out = k;
            return CT_OK;
        }
    return CT_ERR(err, CT_ERR_ARG, "--tp-comm must be auto, host or device (got '%s')",
                  s ? s : "");
}
void ct_tp_set_overlap(ct_tp *t, int on) {
    if (t) t->o.overlap = on != 0;
}
void ct_tp_set_skip_comm(ct_tp *t, int on) {
    if (t) t->o.skip_comm = on != 0;
}
void ct_tp_stats_get(const ct_tp *t, ct_tp_stats *out) {
    if (t) *out = t->stats;
    else memset(out, 0, sizeof *out);
}
void ct_tp_stats_reset(ct_tp *t) {
    if (t) memset(&t->stats, 0, sizeof t->stats);
}

/* ------------------------------------------------------------------ transfers */

static ct_status dev_err(ct_tp *t, ct_status st, const char *what) {
    if (st != CT_OK) {
        char m[CT_ERR_MSG_MAX];
        snprintf(m, sizeof m, "%s", ct_device_errmsg(t->dev));
        CT_ERR(ct_device_err(t->dev), st, "TP %s: %s", what, m);
    }
    return st;
}

/* The arena piece holding v's n elements (*piece), or an error. */
static ct_status in_arena(ct_tp *t, ct_view v, size_t n, const char *what, ct_buffer **piece) {
    ct_buffer *b = *piece = ct_arena_piece_of(t->arena, v.mem);
    size_t es = ct_view_elem_bytes(v);
    if (!b || (v.off + n) * es > ct_buffer_bytes(b))
        return CT_ERR(ct_device_err(t->dev), CT_ERR_ARG,
                      "TP %s: a view of %zu elements at %zu is not inside the activation arena",
                      what, n, v.off);
    if (n > t->cap)
        return CT_ERR(ct_device_err(t->dev), CT_ERR_ARG,
                      "TP %s: %zu elements exceed the staging planned for %zu", what, n, t->cap);
    return CT_OK;
}

/* bf16 on the host: elements per block of a padded all-to-all or all-gather (even, so a block
 * is whole 4-byte carrier elements). */
static size_t even_up(size_t k) { return (k + 1) & ~(size_t)1; }

static const char *const kind_name[3] = {"all-reduce", "reduce-scatter", "all-gather"};

/* Queue the read of a transfer's input into staging buffer `stage`. */
static ct_status x_start(ct_tp *t, xfer *x, int kind, int stage, ct_view dst, ct_view src,
                         size_t n, ct_op op) {
    memset(x, 0, sizeof *x);
    x->kind = kind, x->stage = stage, x->n = n, x->op = op, x->dst = dst;
    x->es = ct_view_elem_bytes(src);
    size_t in = kind == X_RS ? n * (size_t)t->n : n;
    size_t outn = kind == X_AG ? n * (size_t)t->n : n;
    ct_status st;
    ct_buffer *srcb;
    if (src.store != dst.store)
        return CT_ERR(ct_device_err(t->dev), CT_ERR_ARG,
                      "TP %s: source and destination views differ in storage (fp32 and bf16)",
                      kind_name[kind]);
    if ((st = in_arena(t, src, in, kind_name[kind], &srcb)) != CT_OK ||
        (st = in_arena(t, dst, outn, kind_name[kind], &x->dstb)) != CT_OK)
        return st;
    x->live = 1;
    x->src = src;
    if (t->o.skip_comm || t->devmode) return CT_OK; /* device mode: all of it in x_finish */
    /* bf16 all-gather: this worker's block at its padded place */
    size_t at = kind != X_AG ? 0 : (x->es == 2 ? even_up(n) : n) * (size_t)t->r;
    char *h = (char *)t->stage[stage] + at * x->es;
    st = ct_buffer_read_async(srcb, src.off * x->es, in * x->es, h, &x->rd);
    if (st == CT_OK) st = ct_device_flush(t->dev);
    return dev_err(t, st, "staging read");
}

static void count(ct_tp *t, const xfer *x, double wait_s, double comm_s) {
    ct_tp_stats *s = &t->stats;
    size_t N = (size_t)t->n;
    double payload = (double)(x->kind == X_AR ? x->n : x->n * N) * (double)x->es;
    s->calls[x->kind]++;
    s->payload_bytes[x->kind] += payload;
    s->wire_bytes += payload * (double)(N - 1) / (double)N * (x->kind == X_AR ? 2.0 : 1.0);
    s->wait_ms += 1e3 * wait_s;
    s->comm_ms += 1e3 * comm_s;
    if (x->overlapped) s->overlap_ms += 1e3 * comm_s;
}

/* ---- device-resident collectives (every member a thread sharing this context)
 *
 * The members swap, through the host collective, only small records: event handles and the
 * memory objects of their views. Everything else is queued: each worker's queue waits on the
 * others' events (never the host on the device), its kernels read the others' memory.
 *   all-reduce      each posts a marker behind the producers of its src; once all are ready,
 *                   each combines every src (in member order 0, 1, .., N-1) into its scratch;
 *                   once every worker has read the others' src, it copies the scratch to dst
 *                   (dst may be src). The same kernels in the same order on the same inputs:
 *                   every worker ends with the same bits. Every worker sums the whole tensor
 *                   (N-1 passes, not 2(N-1)/N): on one device the passes are cheap and the
 *                   rounds of event exchange are what cost, so two rounds, not three.
 *   reduce-scatter  block r of every src combined into this worker's scratch, then copied to
 *                   dst once every worker is done reading this one's src (dst may be src).
 *   all-gather      src copied to scratch, then every worker copies each scratch into its
 *                   block of dst; later commands wait until the others copied this scratch.
 * Events cross threads with one hold per reader (ct_event_share): a reader releases its hold
 * once its queue waits on the event, the owner its own after the next swap. */
typedef struct dev_rec {
    uint64_t ev, src_mem, src_off;
} dev_rec;

/* Every member's record (this worker's event and its src view) into all[N]. */
static ct_status swap(ct_tp *t, ct_event *mine, ct_view src, dev_rec *all, const char *what) {
    dev_rec me = {(uint64_t)(uintptr_t)mine, (uint64_t)(uintptr_t)src.mem, src.off};
    /* On a failed exchange the holds stay: some members may have the record, and the run ends;
     * a small event record outlives it rather than being freed twice. */
    ct_event_share(mine, t->n - 1);
    ct_status st = ct_comm_allgather(t->c, &me, all, sizeof me / 4, CT_I32, NULL);
    if (st != CT_OK)
        return CT_ERR(ct_device_err(t->dev), st, "TP %s over the TP group: %s", what,
                      ct_comm_errmsg(t->c));
    return CT_OK;
}

/* This queue waits for every other member's event in `all`, then drops those holds. */
static ct_status wait_others(ct_tp *t, const dev_rec *all) {
    ct_event *ev[64] = {NULL};
    int m = 0;
    for (int k = 0; k < t->n; k++)
        if (k != t->r) ev[m++] = (ct_event *)(uintptr_t)all[k].ev;
    ct_status st = ct_device_wait_events(t->dev, ev, m);
    for (int k = 0; k < m; k++) ct_event_release(ev[k]);
    return st;
}

static ct_status post(ct_tp *t, ct_event **ev) {
    ct_status st = ct_device_marker(t->dev, ev);
    if (st == CT_OK) st = ct_device_flush(t->dev); /* others' queues will wait on it */
    return st;
}

static ct_view vw(uint64_t mem, uint64_t off, ct_store store) {
    ct_view v = {(cl_mem)(uintptr_t)mem, (size_t)off, store};
    return v;
}

/* into = the combination of (the src of every member k, at its offset + lo), n floats, in the
 * order first, first+1, .., first-1 (mod N). */
static ct_status combine_all(ct_tp *t, ct_view into, const dev_rec *all, size_t lo, size_t n,
                             int max_op, int first) {
    if (n == 0) return CT_OK;
    int N = t->n;
#define SRC(k) ct_view_at(vw(all[(k) % N].src_mem, all[(k) % N].src_off, into.store), lo)
    ct_status st = ct_combine(t->dev, into, SRC(first), SRC(first + 1), n, max_op);
    for (int k = 2; k < N && st == CT_OK; k++)
        st = ct_combine(t->dev, into, into, SRC(first + k), n, max_op);
#undef SRC
    return st;
}

static ct_status dev_coll(ct_tp *t, xfer *x) {
    if (t->n > 64)
        return CT_ERR(ct_device_err(t->dev), CT_ERR_ARG, "TP device collectives: at most 64 "
                                                         "workers (%d)", t->n);
    if (x->op != CT_OP_SUM && x->op != CT_OP_MAX)
        return CT_ERR(ct_device_err(t->dev), CT_ERR_ARG, "TP device collectives: only sum and "
                                                         "max (asked for %s)", ct_op_str(x->op));
    double t0 = ct_time_now();
    size_t N = (size_t)t->n, r = (size_t)t->r, n = x->n;
    int mx = x->op == CT_OP_MAX;
    dev_rec all[64];
    ct_event *e1 = NULL, *e2 = NULL;
    ct_view tmp = vw((uint64_t)(uintptr_t)ct_buffer_mem(t->tmp), 0, x->src.store);
    size_t es = x->es;
    ct_status st;
    const char *what = kind_name[x->kind];
#define DTRY(expr)                                                                                 \
    do {                                                                                           \
        if ((st = (expr)) != CT_OK) goto done;                                                     \
    } while (0)
    dev_rec all2[64];
    if (x->kind != X_AG) {
        /* all-reduce: the whole of every src; reduce-scatter: block r, from this worker's own */
        size_t lo = x->kind == X_RS ? r * n : 0;
        DTRY(post(t, &e1));
        DTRY(swap(t, e1, x->src, all, what));
        DTRY(wait_others(t, all));
        DTRY(combine_all(t, tmp, all, lo, n, mx, x->kind == X_RS ? (int)r : 0));
        DTRY(post(t, &e2));
        DTRY(swap(t, e2, ct_view_none(), all2, what));
        DTRY(wait_others(t, all2)); /* the others have read this worker's src */
        DTRY(ct_mem_copy(t->dev, tmp.mem, 0, x->dst.mem, x->dst.off * es, n * es));
    } else {
        DTRY(ct_mem_copy(t->dev, x->src.mem, x->src.off * es, tmp.mem, 0, n * es));
        DTRY(post(t, &e1));
        DTRY(swap(t, e1, tmp, all, what));
        DTRY(wait_others(t, all));
        for (size_t k = 0; k < N; k++)
            DTRY(ct_mem_copy(t->dev, (cl_mem)(uintptr_t)all[k].src_mem, all[k].src_off * es,
                             x->dst.mem, (x->dst.off + k * n) * es, n * es));
        DTRY(post(t, &e2));
        DTRY(swap(t, e2, ct_view_none(), all2, what));
        DTRY(wait_others(t, all2)); /* the others have copied this worker's scratch */
    }
#undef DTRY
done:
    ct_event_release(e1);
    ct_event_release(e2);
    if (st != CT_OK) return dev_err(t, st, what);
    count(t, x, 0.0, ct_time_now() - t0);
    return CT_OK;
}

/* Element i of the sum (max) over the N blocks of b bf16 each at h, in member order, in fp32,
 * rounded once. */
static uint16_t sum_blocks(const uint16_t *h, size_t b, int N, size_t i, int mx) {
    float s = ct_bf16_to_f32(h[i]);
    for (int k = 1; k < N; k++) {
        float v = ct_bf16_to_f32(h[(size_t)k * b + i]);
        s = mx ? (v > s ? v : s) : s + v;
    }
    return ct_bf16_from_f32(s);
}

/* The host collective of a bf16 transfer on staging h (see the opening comment). The input is
 * in place (all-gather: this worker's block at r·even_up(n)); the result is left at *res, its
 * blocks *stride elements apart (all-gather: N blocks; else one). */
static ct_status host_bf16(ct_tp *t, xfer *x, uint16_t *h, uint16_t **res, size_t *stride) {
    int N = t->n, r = t->r, mx = x->op == CT_OP_MAX;
    size_t n = x->n, b;
    ct_status st;
    if (x->kind == X_AG) {
        b = even_up(n);
        *res = h, *stride = b;
        return ct_comm_allgather(t->c, h + (size_t)r * b, h, b / 2, CT_I32, NULL);
    }
    if (x->kind == X_RS) { /* N blocks of n, contiguous as read: spread them to even strides */
        b = even_up(n);
        if (b != n)
            for (int k = N - 1; k > 0; k--) memmove(h + (size_t)k * b, h + (size_t)k * n, n * 2);
    } else { /* all-reduce: n cut into N blocks of b, the tail zero */
        b = even_up((n + (size_t)N - 1) / (size_t)N);
        memset(h + n, 0, ((size_t)N * b - n) * 2);
    }
    if ((st = ct_comm_alltoall(t->c, h, h, b / 2, CT_I32, NULL)) != CT_OK) return st;
    /* block k now holds member k's part of this worker's block r */
    uint16_t *mine = h + (x->kind == X_AR ? (size_t)r * b : 0);
    for (size_t i = 0; i < b; i++) mine[i] = sum_blocks(h, b, N, i, mx);
    *res = mine, *stride = b;
    if (x->kind == X_RS) return CT_OK;
    *res = h;
    return ct_comm_allgather(t->c, mine, h, b / 2, CT_I32, NULL);
}

/* Wait for the input, communicate on the host, queue the write of the result. */
static ct_status x_finish(ct_tp *t, xfer *x) {
    if (!x->live) return CT_OK;
    x->live = 0;
    if (t->o.skip_comm) return CT_OK;
    if (t->devmode) return dev_coll(t, x);
    double t0 = ct_time_now();
    ct_status st = ct_event_wait_release(x->rd);
    x->rd = NULL;
    if (st != CT_OK) return dev_err(t, st, "staging read");
    double t1 = ct_time_now();
    float *h = t->stage[x->stage];
    size_t N = (size_t)t->n, outn = x->kind == X_AG ? x->n * N : x->n;
    if (x->es == 2) {
        uint16_t *res = NULL;
        size_t stride = 0;
        if ((st = host_bf16(t, x, (uint16_t *)h, &res, &stride)) != CT_OK)
            return CT_ERR(ct_device_err(t->dev), st, "TP %s of %zu bf16 over the TP group: %s",
                          kind_name[x->kind], x->kind == X_RS ? x->n * N : outn,
                          ct_comm_errmsg(t->c));
        /* one write when the blocks are contiguous, else one per block */
        size_t nb = x->kind == X_AG && stride != x->n ? N : 1, len = nb == 1 ? outn : x->n;
        for (size_t k = 0; k < nb && st == CT_OK; k++)
            st = ct_buffer_write_async(x->dstb, (x->dst.off + k * len) * 2, len * 2,
                                       res + k * stride, NULL);
        if (st == CT_OK) st = ct_device_flush(t->dev);
        if (st != CT_OK) return dev_err(t, st, "staging write");
        double t2 = ct_time_now();
        count(t, x, t1 - t0, t2 - t1);
        return CT_OK;
    }
    switch (x->kind) {
    case X_AR: st = ct_comm_allreduce(t->c, h, h, x->n, CT_F32, x->op, NULL); break;
    case X_RS: st = ct_comm_reduce_scatter(t->c, h, h, x->n, CT_F32, CT_OP_SUM, NULL); break;
    default: st = ct_comm_allgather(t->c, h + (size_t)t->r * x->n, h, x->n, CT_F32, NULL); break;
    }
    if (st != CT_OK)
        return CT_ERR(ct_device_err(t->dev), st, "TP %s of %zu floats over the TP group: %s",
                      kind_name[x->kind], x->kind == X_RS ? x->n * N : outn,
                      ct_comm_errmsg(t->c));
    st = ct_buffer_write_async(x->dstb, x->dst.off * sizeof(float), outn * sizeof(float), h,
                               NULL);
    if (st == CT_OK) st = ct_device_flush(t->dev);
    if (st != CT_OK) return dev_err(t, st, "staging write");
    double t2 = ct_time_now();
    count(t, x, t1 - t0, t2 - t1);
    return CT_OK;
}

/* A transfer begun and ended at once (nothing to overlap it with). */
static ct_status x_now(ct_tp *t, int kind, ct_view dst, ct_view src, size_t n, ct_op op) {
    xfer x;
    ct_status st = x_start(t, &x, kind, 0, dst, src, n, op);
    if (st == CT_OK) st = x_finish(t, &x);
    return st;
}

ct_status ct_tp_allreduce(ct_device *dev, ct_tp *t, ct_view dst, ct_view src, size_t n,
                          ct_op op) {
    size_t es = ct_view_elem_bytes(src);
    if (!t) return dst.mem == src.mem && dst.off == src.off
                       ? CT_OK
                       : ct_mem_copy(dev, src.mem, src.off * es, dst.mem, dst.off * es, n * es);
    return x_now(t, X_AR, dst, src, n, op);
}
ct_status ct_tp_reduce_scatter(ct_device *dev, ct_tp *t, ct_view dst, ct_view src, size_t n) {
    if (!t) return ct_tp_allreduce(dev, t, dst, src, n, CT_OP_SUM);
    return x_now(t, X_RS, dst, src, n, CT_OP_SUM);
}
ct_status ct_tp_allgather(ct_device *dev, ct_tp *t, ct_view dst, ct_view src, size_t n) {
    if (!t) return ct_tp_allreduce(dev, t, dst, src, n, CT_OP_SUM);
    return x_now(t, X_AG, dst, src, n, CT_OP_SUM);
}

/* ------------------------------------------------------------------ linear layers */

/* Rows outside the TP regions: all of B*T, or this worker's 1/N under sequence parallelism. */
static size_t local_rows(const ct_tp *t, int B, int T) {
    size_t BT = (size_t)B * T;
    return t && t->o.sp ? BT / (size_t)t->n : BT;
}

static ct_status sp_shape(ct_tp *t, int B, int T, const char *what) {
    if (t && t->o.sp && ((size_t)B * T) % (size_t)t->n != 0)
        return CT_ERR(ct_device_err(t->dev), CT_ERR_ARG,
                      "%s: sequence parallelism splits the %d x %d tokens over tp = %d workers, "
                      "which must divide them",
                      what, B, T, t->n);
    return CT_OK;
}

ct_status ct_tp_col_forward(ct_device *dev, ct_tp *t, ct_view out, ct_view inp, ct_view full,
                            ct_view w, ct_view b, int B, int T, int C, int OCl) {
    ct_status st;
    if (!t) return ct_matmul_forward(dev, out, inp, w, b, B, T, C, OCl);
    if ((st = sp_shape(t, B, T, "ct_tp_col_forward")) != CT_OK) return st;
    ct_view x = inp;
    if (t->o.sp) {
        if ((st = x_now(t, X_AG, full, inp, local_rows(t, B, T) * (size_t)C, CT_OP_SUM)) != CT_OK)
            return st;
        x = full;
    }
    return ct_matmul_forward(dev, out, x, w, b, B, T, C, OCl);
}

ct_status ct_tp_col_backward(ct_device *dev, ct_tp *t, ct_view dinp, ct_view dw, ct_view db,
                             ct_view dout, ct_view inp, ct_view full, ct_view dpart, ct_view w,
                             int B, int T, int C, int OCl) {
    ct_status st = CT_OK;
    if (!t) return ct_matmul_backward(dev, dinp, dw, db, dout, inp, w, B, T, C, OCl);
    if ((st = sp_shape(t, B, T, "ct_tp_col_backward")) != CT_OK) return st;
    size_t nl = local_rows(t, B, T) * (size_t)C, n = (size_t)B * T * (size_t)C;
    xfer g, x;
    memset(&g, 0, sizeof g);
    memset(&x, 0, sizeof x);
    ct_view xin = inp;
    /* 1. SP: the LayerNorm output was not kept gathered: gather it again (beside dX) */
    if (t->o.sp && dw.mem) {
        if ((st = x_start(t, &g, X_AG, 1, full, inp, nl, CT_OP_SUM)) != CT_OK) return st;
        if (!t->o.overlap && (st = x_finish(t, &g)) != CT_OK) return st;
        xin = full;
    }
    /* 2. this worker's part of the input gradient, and its reduction */
    if (dinp.mem) {
        if ((st = ct_matmul_backward(dev, dpart, ct_view_none(), ct_view_none(), dout, xin, w, B,
                                     T, C, OCl)) != CT_OK)
            goto fail;
        if ((st = x_start(t, &x, t->o.sp ? X_RS : X_AR, 0, dinp, dpart, t->o.sp ? nl : n,
                          CT_OP_SUM)) != CT_OK)
            goto fail;
        x.overlapped = t->o.overlap && (dw.mem || db.mem);
        if (!t->o.overlap && (st = x_finish(t, &x)) != CT_OK) goto fail;
    }
    /* 3. the weight gradient: the device computes it while the host reduces the above */
    if ((st = x_finish(t, &g)) != CT_OK) goto fail;
    if ((dw.mem || db.mem) &&
        (st = ct_matmul_backward(dev, ct_view_none(), dw, db, dout, xin, w, B, T, C, OCl)) != CT_OK)
        goto fail;
    if ((st = ct_device_flush(dev)) != CT_OK) goto fail;
    return x_finish(t, &x);
fail:
    /* leave no read in flight into staging that a later transfer reuses */
    ct_event_wait_release(g.rd);
    ct_event_wait_release(x.rd);
    return st;
}

ct_status ct_tp_row_forward(ct_device *dev, ct_tp *t, ct_view out, ct_view partial, ct_view inp,
                            ct_view w, ct_view b, int B, int T, int ICl, int C) {
    ct_status st;
    if (!t) return ct_matmul_forward(dev, out, inp, w, b, B, T, ICl, C);
    if ((st = sp_shape(t, B, T, "ct_tp_row_forward")) != CT_OK) return st;
    if ((st = ct_matmul_forward(dev, partial, inp, w, ct_view_none(), B, T, ICl, C)) != CT_OK)
        return st;
    size_t rows = local_rows(t, B, T);
    if ((st = x_now(t, t->o.sp ? X_RS : X_AR, out, partial, rows * (size_t)C, CT_OP_SUM)) != CT_OK)
        return st;
    return b.mem ? ct_bias_forward(dev, out, b, rows, C) : CT_OK; /* once, after the sum */
}

ct_status ct_tp_row_backward(ct_device *dev, ct_tp *t, ct_view dinp, ct_view dw, ct_view db,
                             ct_view dout, ct_view dfull, ct_view inp, ct_view w, int B, int T,
                             int ICl, int C) {
    ct_status st;
    if (t && t->o.sp) {
        if ((st = sp_shape(t, B, T, "ct_tp_row_backward")) != CT_OK) return st;
        if ((st = x_now(t, X_AG, dfull, dout, local_rows(t, B, T) * (size_t)C, CT_OP_SUM)) != CT_OK)
            return st;
        dout = dfull;
    }
    return ct_matmul_backward(dev, dinp, dw, db, dout, inp, w, B, T, ICl, C);
}

/* ------------------------------------------------------------------ vocabulary-parallel */

ct_status ct_tp_embed_forward(ct_device *dev, ct_tp *t, ct_view out, ct_view partial,
                              ct_view tokens, ct_view wte, ct_view wpe, int B, int T, int C,
                              int Vp) {
    ct_status st;
    if (!t && !wpe.mem) return ct_embed_forward(dev, out, tokens, wte, B, T, C, Vp);
    if (!t) return ct_encoder_forward(dev, out, tokens, wte, wpe, B, T, C, Vp);
    if ((st = sp_shape(t, B, T, "ct_tp_embed_forward")) != CT_OK) return st;
    int Vl = Vp / t->n;
    if (!wpe.mem) { /* the token embedding alone: the sum is wte[tok] exactly */
        if ((st = ct_embed_forward_vp(dev, partial, tokens, wte, B, T, C, t->r * Vl, Vl)) != CT_OK)
            return st;
        return x_now(t, t->o.sp ? X_RS : X_AR, out, partial, local_rows(t, B, T) * (size_t)C,
                     CT_OP_SUM);
    }
    /* wpe added by one worker: the sum is wte[tok] + wpe[t] exactly (the others add zeros) */
    if ((st = ct_encoder_forward_vp(dev, partial, tokens, wte, wpe, B, T, C, t->r * Vl, Vl,
                                    t->r == 0)) != CT_OK)
        return st;
    return x_now(t, t->o.sp ? X_RS : X_AR, out, partial, local_rows(t, B, T) * (size_t)C,
                 CT_OP_SUM);
}

ct_status ct_tp_embed_backward(ct_device *dev, ct_tp *t, ct_view dwte, ct_view dwpe, ct_view dout,
                               ct_view dfull, ct_view tokens, int B, int T, int C, int Vp) {
    ct_status st;
    if (!t && !dwpe.mem) return ct_embed_backward(dev, dwte, dout, tokens, B, T, C, Vp);
    if (!t) return ct_encoder_backward(dev, dwte, dwpe, dout, tokens, B, T, C, Vp);
    if (t->o.sp) {
        if ((st = sp_shape(t, B, T, "ct_tp_embed_backward")) != CT_OK) return st;
        if ((st = x_now(t, X_AG, dfull, dout, local_rows(t, B, T) * (size_t)C, CT_OP_SUM)) != CT_OK)
            return st;
        dout = dfull;
    }
    int Vl = Vp / t->n;
    if (!dwpe.mem) return ct_embed_backward_vp(dev, dwte, dout, tokens, B, T, C, t->r * Vl, Vl);
    return ct_encoder_backward_vp(dev, dwte, dwpe, dout, tokens, B, T, C, t->r * Vl, Vl);
}

/* Real vocabulary columns among this worker's [lo, lo + Vl). */
static int real_cols(int V, int lo, int Vl) {
    int k = V - lo;
    return k < 0 ? 0 : (k > Vl ? Vl : k);
}

ct_status ct_tp_crossentropy_forward(ct_device *dev, ct_tp *t, ct_view losses, ct_view lse,
                                     ct_view stats, ct_view logits, ct_view targets, int B, int T,
                                     int V, int Vp) {
    ct_status st;
    if (!t) return ct_crossentropy_forward(dev, losses, lse, logits, targets, B, T, V, Vp);
    size_t BT = (size_t)B * T;
    int Vl = Vp / t->n, lo = t->r * Vl, nreal = real_cols(V, lo, Vl);
    ct_view mx = stats, sums = ct_view_at(stats, BT);
    if ((st = ct_crossentropy_vp_max(dev, mx, logits, B, T, Vl, nreal)) != CT_OK ||
        (st = x_now(t, X_AR, mx, mx, BT, CT_OP_MAX)) != CT_OK ||
        (st = ct_crossentropy_vp_sums(dev, sums, logits, mx, targets, B, T, Vl, nreal, lo)) !=
            CT_OK ||
        (st = x_now(t, X_AR, sums, sums, 2 * BT, CT_OP_SUM)) != CT_OK)
        return st;
    return ct_crossentropy_vp_finish(dev, losses, lse, mx, sums, B, T);
}

ct_status ct_tp_crossentropy_backward(ct_device *dev, ct_tp *t, ct_view dlogits, ct_view lse,
                                      ct_view targets, float dloss, int B, int T, int V, int Vp) {
    if (!t) return ct_crossentropy_backward(dev, dlogits, dlogits, lse, targets, dloss, B, T, V, Vp);
    int Vl = Vp / t->n, lo = t->r * Vl;
    return ct_crossentropy_vp_backward(dev, dlogits, lse, targets, dloss, B, T, Vl,
                                       real_cols(V, lo, Vl), lo);
}
