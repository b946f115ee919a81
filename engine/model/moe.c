/* moe.c - the mixture-of-experts MLP (see ct_engine_moe.h): routing on the device, the counts read
 * back, the kept choices gathered in expert-major order, the experts as one GEMM each over their
 * rows, the weighted combine; with expert parallelism the all-to-all-v's over the EP group.
 *
 * Order of rows. A worker's kept choices are gathered expert-major (expert, row, slot): the rows
 * for the experts of EP rank j are one contiguous block, which is what an all-to-all-v sends to j.
 * A receiver gets, from each peer in rank order, that peer's rows of each of its experts; it
 * rearranges them expert-major on the host (for expert e: peer 0's rows, peer 1's, ...), so an
 * expert's GEMM sees its rows in the order of the global batch, as on a single device. The
 * return trip undoes both steps.
 *
 * Staging. An exchange reads the device range into host staging (blocking: it needs the data),
 * runs the all-to-all-v on the host, and writes the result without waiting. The in-order queue
 * puts that write before the next exchange's read of the same staging, so the host never
 * overwrites staging the device still reads. Why not device buffers: the tensors are views into
 * the activation arena (see engine/tp.c).
 *
 * bf16 (ct_moe_cfg.bf16: the layer's views are bf16). The block's regions are planned in floats;
 * the activation regions (router logits, rows, hidden, their gradients) hold bf16 and take half
 * the floats, the routing tensors (probabilities, gates, indices, positions, counts, the gates'
 * gradients) stay 4-byte. Rows cross the EP link as bf16, half fp32's bytes:
 * parallel/ has no bf16 type, so a row of C bf16 travels as C/2 4-byte elements (C even). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_moe.h"
#include "ct_engine_ops_llama.h"

/* Regions (floats, 16-aligned) of a block's saved part and of the scratch. */
typedef struct moe_regions {
    size_t p, idx, gate, pos, stats, ys, xe, h, g, block;            /* saved */
    size_t lg, slot, off, dg, dxr, xs, dye, dh, dxe, scratch;        /* scratch */
} moe_regions;

/* One forward's routing, kept for its backward. */
typedef struct moe_rec {
    int B, T, valid;
    size_t nk, mtot; /* kept choices sent; rows received for this worker's experts */
    int *sent;       /* [E]: this worker's kept choices per expert (global index) */
    int *recv;       /* [ep * El]: rows from peer j for local expert e at j * El + e */
} moe_rec;

struct ct_moe {
    ct_moe_cfg c;
    ct_comm *ep;
    ct_tp *tp;    /* NULL: no tensor parallelism */
    int n, r, el; /* EP size, rank, experts per worker */
    int H, tr;    /* an expert's hidden width here (4C / tp); the TP rank */
    ct_device *dev;
    ct_arena *arena;
    moe_regions o;
    size_t nmax, mmax; /* the largest kept choices sent / rows received */
    moe_rec *rec;      /* [slots * blocks] */
    int *rbuf;         /* the counts read back: kept, routed, pmean (B * E each) */
    float *sa, *sb;    /* ep > 1: staging, mmax * C floats each */
    size_t *cnt;       /* ep > 1: 4 * ep counts and displacements, then El expert starts */
    double *routed, *kept;
    ct_moe_stats st;
    int timing;
    ct_err err;
};

int ct_moe_row_capacity(const ct_moe_cfg *c, int T) {
    if (c->capacity <= 0) return T;
    double v = ceil(c->capacity * c->top_k * (double)T / c->experts);
    return v < (double)T ? (int)v : T;
}

/* An expert's whole hidden width, and its width on this worker. */
static size_t ffn_of(const ct_moe_cfg *c) {
    return c->ffn > 0 ? (size_t)c->ffn : 4 * (size_t)c->channels;
}
static size_t hidden_of(const ct_moe_cfg *c) {
    return c->hidden > 0 ? (size_t)c->hidden : ffn_of(c);
}

static void regions(const ct_moe_cfg *c, int ep, moe_regions *o, size_t *nmax, size_t *mmax) {
    size_t E = (size_t)c->experts, K = (size_t)c->top_k, C = (size_t)c->channels;
    size_t H = hidden_of(c), H2 = c->swiglu ? 2 * H : H; /* SwiGLU: h and dh hold gate|up */
    size_t B = (size_t)c->max_B, N = B * (size_t)c->max_T;
    size_t cap = (size_t)ct_moe_row_capacity(c, c->max_T);
    /* an expert takes at most cap choices of each row; a worker sends at most its rows' N K
     * choices and receives at most those of the group's ep B rows for its E / ep experts */
    size_t nm = N * K < E * B * cap ? N * K : E * B * cap;
    size_t mm = (size_t)ep * N * K < E * B * cap ? (size_t)ep * N * K : E * B * cap;
    if (mm < nm) mm = nm;
    size_t at = 0;
#define R(f, n) (o->f = at, at += ((size_t)(n) + 15) / 16 * 16)
#define RA(f, n) R(f, c->bf16 ? ((size_t)(n) + 1) / 2 : (size_t)(n)) /* an activation region */
    R(p, N * E);
    R(idx, N * K);
    R(gate, N * K);
    R(pos, N * K);
    R(stats, 3 * B * E);
    RA(ys, nm * C);
    RA(xe, mm * C);
    RA(h, mm * H2);
    RA(g, mm * H);
    o->block = at;
    at = 0;
    RA(lg, N * E);
    R(slot, N * K);
    R(off, B * E);
    R(dg, N * K);
    RA(dxr, N * C);
    RA(xs, ep > 1 ? nm * C : 0);
    RA(dye, mm * C);
    RA(dh, mm * H2);
    RA(dxe, mm * C);
    o->scratch = at;
#undef RA
#undef R
    if (nmax) *nmax = nm;
    if (mmax) *mmax = mm;
}

void ct_moe_plan(const ct_moe_cfg *c, int ep, size_t *block_floats, size_t *scratch_floats) {
    moe_regions o;
    regions(c, ep < 1 ? 1 : ep, &o, NULL, NULL);
    if (block_floats) *block_floats = o.block;
    if (scratch_floats) *scratch_floats = o.scratch;
}

size_t ct_moe_staging_floats(const ct_moe_cfg *c, int ep) {
    if (ep <= 1) return 0;
    moe_regions o;
    size_t mm = 0;
    regions(c, ep, &o, NULL, &mm);
    size_t f = mm * (size_t)c->channels;
    if (c->bf16) f = (f + 1) / 2; /* rows of bf16 */
    return f ? f : 1;
}

ct_status ct_moe_check(const ct_moe_cfg *c, int ep, ct_err *err) {
    if (c->experts < 1)
        return CT_ERR(err, CT_ERR_ARG, "mixture of experts: %d experts (need >= 1)", c->experts);
    if (c->top_k < 1 || c->top_k > c->experts)
        return CT_ERR(err, CT_ERR_ARG,
                      "mixture of experts: top-k %d must be in 1..%d (the experts)", c->top_k,
                      c->experts);
    if (!(c->capacity >= 0) || !(c->aux >= 0) || !isfinite(c->capacity) || !isfinite(c->aux))
        return CT_ERR(err, CT_ERR_ARG,
                      "mixture of experts: capacity factor %g and auxiliary-loss weight %g must "
                      "be finite and >= 0",
                      c->capacity, c->aux);
    if (ep < 1 || c->experts % ep)
        return CT_ERR(err, CT_ERR_ARG,
                      "expert parallelism: ep = %d must divide the %d experts (each worker holds "
                      "E / ep of them)",
                      ep, c->experts);
    if (c->max_B < 1 || c->max_T < 1 || c->channels < 1 || c->layers < 1 || c->slots < 1 ||
        c->blocks < 1 || c->hidden < 0 || c->ffn < 0 || (size_t)c->hidden > ffn_of(c))
        return CT_ERR(err, CT_ERR_ARG, "mixture of experts: sizes must be positive (hidden %d: "
                                       "0 or at most F = %zu)",
                      c->hidden, ffn_of(c));
    double big = (double)c->max_B * c->max_T * c->top_k * ep * (c->swiglu ? 2.0 : 1.0) *
                 (double)ffn_of(c);
    if (big < (double)c->max_B * c->max_T * c->top_k * ep * 4.0 * c->channels)
        big = (double)c->max_B * c->max_T * c->top_k * ep * 4.0 * c->channels;
    if (big >= 2147483647.0)
        return CT_ERR(err, CT_ERR_UNSUPPORTED,
                      "mixture of experts: %d rows x %d tokens x top-k %d x ep %d x 4C = %.3g "
                      "elements would exceed 2^31 in one tensor",
                      c->max_B, c->max_T, c->top_k, ep, big);
    return CT_OK;
}

ct_status ct_moe_create(ct_moe **out, const ct_moe_cfg *c, ct_comm *ep, ct_tp *tp,
                        ct_device *dev, ct_arena *arena, ct_err *err) {
    *out = NULL;
    int n = ep ? ct_comm_size(ep) : 1;
    ct_status st = ct_moe_check(c, n, err);
    if (st != CT_OK) return st;
    if (!dev || !arena) return CT_ERR(err, CT_ERR_ARG, "ct_moe_create: a device and an arena");
    int tn = ct_tp_size(tp);
    if ((size_t)tn * hidden_of(c) != ffn_of(c))
        return CT_ERR(err, CT_ERR_ARG,
                      "ct_moe_create: an expert's hidden width %zu on each of tp = %d workers "
                      "does not make F = %zu",
                      hidden_of(c), tn, ffn_of(c));
    ct_moe *m = ct_calloc(1, sizeof *m);
    if (!m) return CT_ERR(err, CT_ERR_NOMEM, "ct_moe_create: out of host memory");
    m->c = *c;
    m->n = n;
    m->ep = n > 1 ? ep : NULL;
    m->r = m->ep ? ct_comm_rank(ep) : 0;
    m->el = c->experts / n;
    m->tp = tn > 1 ? tp : NULL;
    m->tr = ct_tp_rank(m->tp);
    m->H = (int)hidden_of(c);
    m->dev = dev;
    m->arena = arena;
    regions(c, n, &m->o, &m->nmax, &m->mmax);
    size_t nrec = (size_t)c->slots * c->blocks, E = (size_t)c->experts;
    size_t LE = (size_t)c->layers * E;
    m->rec = ct_calloc(nrec, sizeof *m->rec);
    m->rbuf = ct_malloc(3 * (size_t)c->max_B * E * sizeof(int));
    m->routed = ct_calloc(LE, sizeof(double));
    m->kept = ct_calloc(LE, sizeof(double));
    int ok = m->rec && m->rbuf && m->routed && m->kept;
    for (size_t i = 0; ok && i < nrec; i++) {
        m->rec[i].sent = ct_malloc(E * sizeof(int));
        m->rec[i].recv = ct_malloc(E * sizeof(int)); /* ep * El = E */
        ok = m->rec[i].sent && m->rec[i].recv;
    }
    if (ok && m->ep) {
        size_t f = ct_moe_staging_floats(c, n);
        m->sa = ct_malloc(f * sizeof(float));
        m->sb = ct_malloc(f * sizeof(float));
        m->cnt = ct_malloc((4 * (size_t)n + (size_t)m->el) * sizeof(size_t));
        ok = m->sa && m->sb && m->cnt;
    }
    if (!ok) {
        ct_moe_free(m);
        return CT_ERR(err, CT_ERR_NOMEM,
                      "ct_moe_create: no host memory for the routing records and staging");
    }
    m->st.layers = c->layers, m->st.experts = c->experts;
    m->st.routed = m->routed, m->st.kept = m->kept;
    *out = m;
    return CT_OK;
}

void ct_moe_free(ct_moe *m) {
    if (!m) return;
    if (m->sa) ct_device_finish(m->dev); /* writes from the staging may still be queued */
    if (m->rec)
        for (size_t i = 0; i < (size_t)m->c.slots * m->c.blocks; i++) {
            free(m->rec[i].sent);
            free(m->rec[i].recv);
        }
    free(m->rec);
    free(m->rbuf);
    free(m->sa);
    free(m->sb);
    free(m->cnt);
    free(m->routed);
    free(m->kept);
    free(m);
}

void ct_moe_experts(const ct_moe *m, int *first, int *count) {
    if (first) *first = m->r * m->el;
    if (count) *count = m->el;
}
size_t ct_moe_host_bytes(const ct_moe *m) {
    return m && m->sa ? 2 * ct_moe_staging_floats(&m->c, m->n) * sizeof(float) : 0;
}
void ct_moe_stats_get(const ct_moe *m, ct_moe_stats *out) { *out = m->st; }
void ct_moe_stats_reset(ct_moe *m) {
    size_t LE = (size_t)m->c.layers * m->c.experts;
    memset(m->routed, 0, LE * sizeof(double));
    memset(m->kept, 0, LE * sizeof(double));
    m->st.aux = m->st.rows = m->st.bytes = 0;
    m->st.forwards = 0;
    m->st.route_ms = m->st.gather_ms = m->st.alltoall_ms = m->st.expert_ms = 0;
}
void ct_moe_set_timing(ct_moe *m, int on) { m->timing = on != 0; }

/* ------------------------------------------------------------------ helpers */

static ct_status dev_fail(ct_moe *m, ct_status st, const char *what) {
    if (st != CT_OK) {
        char msg[CT_ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", ct_device_errmsg(m->dev));
        CT_ERR(ct_device_err(m->dev), st, "mixture of experts, %s: %s", what, msg);
    }
    return st;
}
static ct_status comm_fail(ct_moe *m, ct_status st, const char *what) {
    if (st != CT_OK)
        CT_ERR(ct_device_err(m->dev), st, "expert parallelism, %s: %s", what,
               ct_comm_errmsg(m->ep));
    return st;
}

/* Timing: wait for the device and charge the time since *t0 to a bucket. */
static ct_status lap(ct_moe *m, double *bucket, double *t0) {
    if (!m->timing) return CT_OK;
    ct_status st = ct_device_finish(m->dev);
    double t1 = ct_time_now();
    *bucket += 1e3 * (t1 - *t0);
    *t0 = t1;
    return st;
}

/* The arena piece holding v's next n elements (NULL: not in the arena). */
static ct_buffer *arena_piece(ct_moe *m, ct_view v, size_t n) {
    ct_buffer *b = ct_arena_piece_of(m->arena, v.mem);
    return b && (v.off + n) * ct_view_elem_bytes(v) <= ct_buffer_bytes(b) ? b : NULL;
}
static ct_status not_in_arena(ct_moe *m, ct_view v, size_t n) {
    return CT_ERR(ct_device_err(m->dev), CT_ERR_ARG,
                  "MoE: a view of %zu elements at %zu is not inside the activation arena", n,
                  v.off);
}
static ct_status arena_read(ct_moe *m, ct_view v, void *host, size_t n) {
    if (!n) return CT_OK;
    ct_buffer *b = arena_piece(m, v, n);
    if (!b) return not_in_arena(m, v, n);
    size_t es = ct_view_elem_bytes(v);
    return ct_buffer_read(b, v.off * es, host, n * es);
}
static ct_status arena_write(ct_moe *m, ct_view v, const void *host, size_t n) {
    if (!n) return CT_OK;
    ct_buffer *b = arena_piece(m, v, n);
    if (!b) return not_in_arena(m, v, n);
    size_t es = ct_view_elem_bytes(v);
    return ct_buffer_write_async(b, v.off * es, n * es, host, NULL);
}
static ct_status arena_zero(ct_moe *m, ct_view v, size_t n) {
    if (!n) return CT_OK;
    ct_buffer *b = arena_piece(m, v, n);
    if (!b) return not_in_arena(m, v, n);
    size_t es = ct_view_elem_bytes(v);
    return ct_buffer_zero(b, v.off * es, n * es);
}

/* An activation region at float `off` of a float-planned base: bf16 elements from its start in
 * a bf16 model (store), else the floats themselves. */
static ct_view act_at(ct_view base, size_t off, ct_store store) {
    ct_view v = ct_view_at(base, off);
    if (store == CT_STORE_BF16) v.off *= 2, v.store = CT_STORE_BF16;
    return v;
}

/* Rows from peer j for local expert e, and their sums per peer. */
static size_t recv_of(const ct_moe *m, const moe_rec *r, int j) {
    size_t s = 0;
    for (int e = 0; e < m->el; e++) s += (size_t)r->recv[j * m->el + e];
    return s;
}
static size_t sent_to(const ct_moe *m, const moe_rec *r, int j) {
    size_t s = 0;
    for (int e = 0; e < m->el; e++) s += (size_t)r->sent[j * m->el + e];
    return s;
}

/* Rearrange rows between peer-major (peer, local expert) and expert-major (local expert, peer)
 * order; to_expert: peer-major src into expert-major dst, else the reverse. */
static void permute(const ct_moe *m, const moe_rec *r, void *dstp, const void *srcp, size_t es,
                    int to_expert) {
    size_t C = (size_t)m->c.channels * es, pm = 0; /* bytes a row */
    char *dst = dstp;
    const char *src = srcp;
    size_t *em = m->cnt + 4 * (size_t)m->n; /* where each local expert's rows start */
    size_t at = 0;
    for (int e = 0; e < m->el; e++) {
        em[e] = at;
        for (int j = 0; j < m->n; j++) at += (size_t)r->recv[j * m->el + e];
    }
    for (int j = 0; j < m->n; j++)
        for (int e = 0; e < m->el; e++) {
            size_t rows = (size_t)r->recv[j * m->el + e], x = em[e];
            for (int j2 = 0; j2 < j; j2++) x += (size_t)r->recv[j2 * m->el + e];
            if (to_expert) memcpy(dst + x * C, src + pm * C, rows * C);
            else memcpy(dst + pm * C, src + x * C, rows * C);
            pm += rows;
        }
}

/* The all-to-all-v of rows: this worker sends send_rows(j) rows to peer j from sbuf (peer-major)
 * and receives recv_rows(j) from it into rbuf. */
static ct_status alltoallv_rows(ct_moe *m, const moe_rec *r, int forward, const void *sbuf,
                                void *rbuf, size_t es) {
    /* a row in 4-byte elements: C floats, or C bf16 as C / 2 pairs */
    size_t C = (size_t)m->c.channels * es / 4, *sc = m->cnt, *sd = sc + m->n, *rc = sd + m->n,
           *rd = rc + m->n, a = 0, b = 0;
    if ((size_t)m->c.channels * es % 4)
        return CT_ERR(ct_device_err(m->dev), CT_ERR_UNSUPPORTED,
                      "expert parallelism in bf16 sends a row of C = %d bf16 as 4-byte pairs: C "
                      "must be even",
                      m->c.channels);
    for (int j = 0; j < m->n; j++) {
        size_t out = forward ? sent_to(m, r, j) : recv_of(m, r, j);
        size_t in = forward ? recv_of(m, r, j) : sent_to(m, r, j);
        sc[j] = out * C, sd[j] = a, rc[j] = in * C, rd[j] = b;
        a += sc[j], b += rc[j];
    }
    m->st.bytes += (double)(a - sc[m->r]) * 4.0;
    return comm_fail(m, ct_comm_alltoallv(m->ep, sbuf, sc, sd, rbuf, rc, rd,
                                          es == 4 ? CT_F32 : CT_I32, NULL),
                     "all-to-all-v of token rows");
}

/* This worker's kept choices (src, expert-major) to their experts' workers; dst receives this
 * worker's experts' rows, expert-major (each expert's rows from peer 0, 1, ...). */
static ct_status ep_dispatch(ct_moe *m, const moe_rec *r, ct_view src, ct_view dst) {
    size_t es = ct_view_elem_bytes(src);
    ct_status st = dev_fail(m, arena_read(m, src, m->sa, r->nk * (size_t)m->c.channels),
                            "reading the rows to send");
    if (st == CT_OK) st = alltoallv_rows(m, r, 1, m->sa, m->sb, es);
    if (st != CT_OK) return st;
    permute(m, r, m->sa, m->sb, es, 1);
    return dev_fail(m, arena_write(m, dst, m->sa, r->mtot * (size_t)m->c.channels),
                    "writing the received rows");
}

/* The reverse: this worker's experts' rows (src, expert-major) back to the workers they came
 * from; dst receives this worker's choices' rows in its expert-major order. */
static ct_status ep_return(ct_moe *m, const moe_rec *r, ct_view src, ct_view dst) {
    size_t es = ct_view_elem_bytes(src);
    ct_status st = dev_fail(m, arena_read(m, src, m->sa, r->mtot * (size_t)m->c.channels),
                            "reading the experts' rows");
    if (st != CT_OK) return st;
    permute(m, r, m->sb, m->sa, es, 0);
    if ((st = alltoallv_rows(m, r, 0, m->sb, m->sa, es)) != CT_OK) return st;
    return dev_fail(m, arena_write(m, dst, m->sa, r->nk * (size_t)m->c.channels),
                    "writing the returned rows");
}

/* The activations' storage must be the one the regions were planned for (ct_moe_cfg.bf16). */
static ct_status store_check(ct_moe *m, ct_view x, const char *what) {
    if ((x.store == CT_STORE_BF16) == (m->c.bf16 != 0)) return CT_OK;
    return CT_ERR(ct_device_err(m->dev), CT_ERR_ARG, "%s: the input is %s but the layer was "
                  "planned for %s activations (ct_moe_cfg.bf16)", what,
                  x.store == CT_STORE_BF16 ? "bf16" : "fp32", m->c.bf16 ? "bf16" : "fp32");
}

static moe_rec *rec_of(ct_moe *m, int slot, int block) {
    if (slot < 0 || slot >= m->c.slots || block < 0 || block >= m->c.blocks) return NULL;
    return &m->rec[(size_t)slot * m->c.blocks + block];
}

/* ------------------------------------------------------------------ forward */

#define S(f) ct_view_at(saved, m->o.f)
#define X(f) ct_view_at(scratch, m->o.f)
/* the activation regions: bf16 when the block's input is */
#define SA(f) act_at(saved, m->o.f, x.store)
#define XA(f) act_at(scratch, m->o.f, x.store)
#define TRY(expr, what)                                                                            \
    do {                                                                                           \
        if ((st = dev_fail(m, (expr), (what))) != CT_OK) return st;                                \
    } while (0)

ct_status ct_moe_forward(ct_moe *m, int slot, int block, int layer, ct_view y, ct_view saved,
                         ct_view scratch, ct_view x, const ct_moe_weights *w, int B, int T) {
    ct_status st = CT_OK;
    moe_rec *r = rec_of(m, slot, block);
    if (!r || layer < 0 || layer >= m->c.layers || B < 1 || T < 1 || B > m->c.max_B ||
        T > m->c.max_T)
        return CT_ERR(ct_device_err(m->dev), CT_ERR_ARG,
                      "ct_moe_forward: slot %d, block %d, layer %d, batch %d x %d outside the plan "
                      "(%d slots, %d blocks, %d layers, %d x %d)",
                      slot, block, layer, B, T, m->c.slots, m->c.blocks, m->c.layers, m->c.max_B,
                      m->c.max_T);
    if ((st = store_check(m, x, "ct_moe_forward")) != CT_OK) return st;
    int E = m->c.experts, K = m->c.top_k, C = m->c.channels, el = m->el, H = m->H;
    int cap = ct_moe_row_capacity(&m->c, T), sw = m->c.swiglu;
    size_t N = (size_t)B * T, BE = (size_t)m->c.max_B * E, Cz = (size_t)C, Hz = (size_t)H;
    ct_view kept = S(stats), routed = ct_view_at(S(stats), BE), pmean = ct_view_at(S(stats), 2 * BE);
    double t0 = ct_time_now();
    r->valid = 0;
    /* 1. routing on the device, the counts to the host */
    TRY(ct_matmul_forward(m->dev, XA(lg), x, w->routerw, ct_view_none(), B, T, C, E), "router");
    TRY(ct_moe_route_forward(m->dev, S(p), S(idx), S(gate), XA(lg), (int)N, E, K), "top-k");
    TRY(ct_moe_capacity(m->dev, X(slot), kept, routed, S(idx), B, T, E, K, cap), "capacity");
    TRY(ct_moe_offsets(m->dev, X(off), kept, B, E), "offsets");
    TRY(ct_moe_prob_mean(m->dev, pmean, S(p), B, T, E), "mean probabilities");
    TRY(arena_read(m, S(stats), m->rbuf, 3 * BE), "reading the routing counts");
    const int *hk = m->rbuf, *hr = m->rbuf + BE;
    const float *hp = (const float *)(m->rbuf + 2 * BE);
    double aux = 0;
    int count = m->tr == 0; /* the TP group routes the same tokens: counted once */
    for (int e = 0; e < E; e++) r->sent[e] = 0;
    for (int b = 0; b < B; b++) {
        double row = 0;
        for (int e = 0; e < E; e++) {
            size_t i = (size_t)b * E + e;
            r->sent[e] += hk[i];
            if (count) m->routed[(size_t)layer * E + e] += hr[i];
            row += (double)hr[i] / ((double)K * T) * hp[i];
        }
        aux += E * row / B;
    }
    r->nk = 0;
    for (int e = 0; e < E; e++) {
        if (count) m->kept[(size_t)layer * E + e] += r->sent[e];
        r->nk += (size_t)r->sent[e];
    }
    m->st.aux += aux;
    m->st.forwards++;
    if (m->ep) { /* every peer's counts for this worker's experts */
        st = ct_comm_alltoall(m->ep, r->sent, r->recv, (size_t)el, CT_I32, NULL);
        if ((st = comm_fail(m, st, "all-to-all of the routing counts")) != CT_OK) return st;
    } else {
        memcpy(r->recv, r->sent, (size_t)E * sizeof(int));
    }
    r->mtot = 0;
    for (int i = 0; i < E; i++) r->mtot += (size_t)r->recv[i];
    r->B = B, r->T = T;
    m->st.rows += (double)r->mtot;
    if ((st = lap(m, &m->st.route_ms, &t0)) != CT_OK) return dev_fail(m, st, "timing");
    /* 2. the kept choices, expert-major, to their experts */
    ct_view xs = m->ep ? XA(xs) : SA(xe);
    TRY(ct_moe_dispatch(m->dev, xs, S(pos), x, S(idx), X(slot), X(off), B, T, C, E, K), "gather");
    if ((st = lap(m, &m->st.gather_ms, &t0)) != CT_OK) return dev_fail(m, st, "timing");
    if (m->ep && (st = ep_dispatch(m, r, xs, SA(xe))) != CT_OK) return st;
    if ((st = lap(m, &m->st.alltoall_ms, &t0)) != CT_OK) return dev_fail(m, st, "timing");
    /* 3. each expert over its rows */
    ct_view ye = m->ep ? XA(dye) : SA(ys);
    size_t at = 0;
    for (int e = 0; e < el; e++) {
        size_t M = 0;
        for (int j = 0; j < m->n; j++) M += (size_t)r->recv[j * el + e];
        if (!M) continue;
        ct_view g = ct_view_at(SA(g), at * Hz), xr = ct_view_at(SA(xe), at * Cz);
        if (sw) { /* gate and up (h: gate's M rows, then up's), SwiGLU */
            ct_view h = ct_view_at(SA(h), at * 2 * Hz), hu = ct_view_at(h, M * Hz);
            ct_view wg = ct_view_at(w->fcw, (size_t)e * 2 * Hz * Cz);
            TRY(ct_matmul_forward(m->dev, h, xr, wg, ct_view_none(), 1, (int)M, C, H),
                "expert gate");
            TRY(ct_matmul_forward(m->dev, hu, xr, ct_view_at(wg, Hz * Cz), ct_view_none(), 1,
                                  (int)M, C, H),
                "expert up");
            TRY(ct_swiglu_forward(m->dev, g, h, hu, M * Hz), "expert SwiGLU");
        } else {
            ct_view h = ct_view_at(SA(h), at * Hz);
            TRY(ct_matmul_forward(m->dev, h, xr, ct_view_at(w->fcw, (size_t)e * Hz * Cz),
                                  ct_view_at(w->fcb, (size_t)e * Hz), 1, (int)M, C, H),
                "expert fc");
            TRY(ct_gelu_forward(m->dev, g, h, M * Hz), "expert GELU");
        }
        /* the bias once over the TP group (the caller sums the partial outputs) */
        TRY(ct_matmul_forward(m->dev, ct_view_at(ye, at * Cz), g,
                              ct_view_at(w->fcprojw, (size_t)e * Hz * Cz),
                              m->tr == 0 && !sw ? ct_view_at(w->fcprojb, (size_t)e * Cz)
                                                : ct_view_none(),
                              1, (int)M, H, C),
            "expert fcproj");
        at += M;
    }
    if ((st = lap(m, &m->st.expert_ms, &t0)) != CT_OK) return dev_fail(m, st, "timing");
    /* 4. back, and the weighted sum */
    if (m->ep && (st = ep_return(m, r, ye, SA(ys))) != CT_OK) return st;
    if ((st = lap(m, &m->st.alltoall_ms, &t0)) != CT_OK) return dev_fail(m, st, "timing");
    TRY(ct_moe_combine_forward(m->dev, y, SA(ys), S(gate), S(pos), N, C, K), "combine");
    if ((st = lap(m, &m->st.gather_ms, &t0)) != CT_OK) return dev_fail(m, st, "timing");
    r->valid = 1;
    return CT_OK;
}

/* ------------------------------------------------------------------ backward */

/* A SwiGLU expert's backward over its M rows from row `at`: dye's rows -> down's gradients and
 * d(SwiGLU output) (in dh's up half), -> d(gate), d(up) (dh: gate's rows, then up's) -> the
 * two products' gradients, their input gradients added into dxe (up's first in dye's rows,
 * read no more). */
static ct_status swiglu_expert_backward(ct_moe *m, const ct_moe_weights *dw,
                                        const ct_moe_weights *w, ct_view saved, ct_view scratch,
                                        ct_view x, int e, size_t at, size_t M) {
    ct_status st;
    int C = m->c.channels, H = m->H;
    size_t Cz = (size_t)C, Hz = (size_t)H;
    ct_view none = ct_view_none();
    ct_view dh = ct_view_at(XA(dh), at * 2 * Hz), dhu = ct_view_at(dh, M * Hz);
    ct_view h = ct_view_at(SA(h), at * 2 * Hz), hu = ct_view_at(h, M * Hz);
    ct_view xr = ct_view_at(SA(xe), at * Cz), dxr = ct_view_at(XA(dxe), at * Cz);
    ct_view dyr = ct_view_at(XA(dye), at * Cz);
    ct_view wg = ct_view_at(w->fcw, (size_t)e * 2 * Hz * Cz), wu = ct_view_at(wg, Hz * Cz);
    ct_view dwg = ct_view_at(dw->fcw, (size_t)e * 2 * Hz * Cz), dwu = ct_view_at(dwg, Hz * Cz);
    TRY(ct_matmul_backward(m->dev, dhu, ct_view_at(dw->fcprojw, (size_t)e * Hz * Cz), none, dyr,
                           ct_view_at(SA(g), at * Hz), ct_view_at(w->fcprojw, (size_t)e * Hz * Cz),
                           1, (int)M, H, C),
        "expert down backward");
    TRY(ct_swiglu_backward(m->dev, dh, dhu, dhu, h, hu, M * Hz), "expert SwiGLU backward");
    TRY(ct_matmul_backward(m->dev, dxr, dwg, none, dh, xr, wg, 1, (int)M, C, H),
        "expert gate backward");
    TRY(ct_matmul_backward(m->dev, dyr, dwu, none, dhu, xr, wu, 1, (int)M, C, H),
        "expert up backward");
    TRY(ct_residual_forward(m->dev, dxr, dxr, dyr, M * Cz), "expert gate + up input gradients");
    return CT_OK;
}

ct_status ct_moe_backward(ct_moe *m, int slot, int block, ct_view dx, const ct_moe_weights *dw,
                          ct_view dy, ct_view saved, ct_view scratch, ct_view x,
                          const ct_moe_weights *w, float loss_scale) {
    ct_status st = CT_OK;
    moe_rec *r = rec_of(m, slot, block);
    if (!r || !r->valid)
        return CT_ERR(ct_device_err(m->dev), CT_ERR_STATE,
                      "ct_moe_backward: no forward of slot %d, block %d to go back through", slot,
                      block);
    if ((st = store_check(m, x, "ct_moe_backward")) != CT_OK) return st;
    int E = m->c.experts, K = m->c.top_k, C = m->c.channels, el = m->el, B = r->B, T = r->T;
    int H = m->H, sw = m->c.swiglu;
    size_t N = (size_t)B * T, BE = (size_t)m->c.max_B * E, Cz = (size_t)C, Hz = (size_t)H;
    double t0 = ct_time_now();
    /* 1. the combine: the gates' gradients and the rows' (to the experts' workers). The rows'
     * gradients are scaled by 1 / ep: an expert's weight gradient then is that of the EP group's
     * mean objective, and averaging it over the workers holding the same experts gives the
     * data-parallel mean, as every other gradient is (without it the experts' would be ep times
     * too large). The returned input gradients are scaled back. */
    ct_view dys = m->ep ? XA(xs) : XA(dye);
    TRY(ct_moe_combine_backward(m->dev, dys, X(dg), dy, SA(ys), S(gate), S(pos), N, C, K,
                                1.0f / (float)m->n),
        "combine backward");
    /* TP: each gate's gradient is a dot product with this worker's partial expert output */
    if (m->tp)
        TRY(ct_tp_allreduce(m->dev, m->tp, X(dg), X(dg), N * (size_t)K, CT_OP_SUM),
            "the gates' gradients over the TP group");
    if ((st = lap(m, &m->st.gather_ms, &t0)) != CT_OK) return dev_fail(m, st, "timing");
    if (m->ep && (st = ep_dispatch(m, r, dys, XA(dye))) != CT_OK) return st;
    if ((st = lap(m, &m->st.alltoall_ms, &t0)) != CT_OK) return dev_fail(m, st, "timing");
    /* 2. each expert's backward over its rows */
    size_t at = 0;
    for (int e = 0; e < el; e++) {
        size_t M = 0;
        for (int j = 0; j < m->n; j++) M += (size_t)r->recv[j * el + e];
        if (!M) continue;
        if (sw) {
            if ((st = swiglu_expert_backward(m, dw, w, saved, scratch, x, e, at, M)) != CT_OK)
                return st;
            at += M;
            continue;
        }
        ct_view dh = ct_view_at(XA(dh), at * Hz), h = ct_view_at(SA(h), at * Hz);
        TRY(ct_matmul_backward(m->dev, dh, ct_view_at(dw->fcprojw, (size_t)e * Hz * Cz),
                               ct_view_at(dw->fcprojb, (size_t)e * Cz), ct_view_at(XA(dye), at * Cz),
                               ct_view_at(SA(g), at * Hz),
                               ct_view_at(w->fcprojw, (size_t)e * Hz * Cz), 1, (int)M, H, C),
            "expert fcproj backward");
        TRY(ct_gelu_backward(m->dev, dh, h, dh, M * Hz), "expert GELU backward");
        TRY(ct_matmul_backward(m->dev, ct_view_at(XA(dxe), at * Cz),
                               ct_view_at(dw->fcw, (size_t)e * Hz * Cz),
                               ct_view_at(dw->fcb, (size_t)e * Hz), dh,
                               ct_view_at(SA(xe), at * Cz),
                               ct_view_at(w->fcw, (size_t)e * Hz * Cz), 1, (int)M, C, H),
            "expert fc backward");
        at += M;
    }
    if ((st = lap(m, &m->st.expert_ms, &t0)) != CT_OK) return dev_fail(m, st, "timing");
    ct_view dxs = m->ep ? XA(xs) : XA(dxe);
    if (m->ep && (st = ep_return(m, r, XA(dxe), dxs)) != CT_OK) return st;
    if ((st = lap(m, &m->st.alltoall_ms, &t0)) != CT_OK) return dev_fail(m, st, "timing");
    /* 3. the router: the gates' and the auxiliary loss's gradients through the softmax */
    double aux = (double)loss_scale * m->c.aux * E / ((double)B * K * T * T);
    TRY(ct_moe_router_backward(m->dev, XA(lg), S(p), S(idx), S(pos), X(dg),
                               ct_view_at(S(stats), BE), (float)aux, B, T, E, K),
        "router backward");
    /* TP: the router's input gradient once over the group (the caller sums the partial ones) */
    TRY(ct_matmul_backward(m->dev, m->tr == 0 ? XA(dxr) : ct_view_none(), dw->routerw,
                           ct_view_none(), XA(lg), x, w->routerw, B, T, C, E),
        "router GEMMs backward");
    if (m->tr != 0)
        TRY(arena_zero(m, XA(dxr), N * Cz),
            "zeroing the router's input gradient");
    if ((st = lap(m, &m->st.route_ms, &t0)) != CT_OK) return dev_fail(m, st, "timing");
    TRY(ct_moe_dispatch_backward(m->dev, dx, XA(dxr), dxs, S(pos), N, C, K, (float)m->n),
        "gather backward");
    if ((st = lap(m, &m->st.gather_ms, &t0)) != CT_OK) return dev_fail(m, st, "timing");
    return CT_OK;
}
