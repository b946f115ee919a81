/* zero.c - ZeRO's parameter traffic over the DP group.
 *
 * Stages 1 and 2: after the optimizer updated this worker's shard of the parameters, the shards
 * are all-gathered into every worker's flat parameter buffer (a copy: bitwise the same
 * everywhere). A mixture-of-experts model's expert region is sharded over the expert-data-parallel
 * group (the workers holding the same experts) and all-gathered over it.
 *
 * Stage 3: the parameters are stored as the shard only; before the model uses a block the
 * executor asks for it here, and it is gathered into that block's slot of the parameter working
 * buffer (params.c): an all-gather with per-rank counts over a second handle on the group (rank
 * k gives the part of the range its shard holds, possibly nothing; (N-1)/N of the range on the
 * wire), so the gradient thread (grads.c) can use the first at the same time. The shard is read
 * into a host mirror once per pass (it changes only in the optimizer). The next block of the pass
 * is gathered on a prefetch thread while the device computes, into a double buffer, and written
 * to its slot with a non-blocking write that the in-order queue puts after the kernels that used
 * the slot before. Blocks still in their slot (the last two of forward, the first two of
 * backward) are not gathered again. wte shares its room in the working buffer with the two
 * slots (params.c's region R): gathered when the embedding or the head reads it
 * (ct_zero_need_wte) unless still there, and given up to the next block gathered into a slot
 * it overlaps. The experts' region (the held experts of every block, at
 * the start of the flat layout) stays whole in the working buffer: gathered at the start of
 * each pass over the expert-data-parallel group (its own second handle), or, when no other
 * worker holds the same experts, copied from the shard (which is then all of them). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_step.h"
#include "engine_impl.h"

struct ct_zero {
    ct_model *m;
    ct_params *P;
    ct_device *dev;
    ct_comm *c;  /* the DP group (the worker's handle; the gradient thread uses it too) */
    ct_comm *ec; /* the expert-data-parallel group (experts' shards), or NULL */
    size_t xlo, xhi; /* the experts' shard of the flat layout ([0, 0): none) */
    ct_comm *pc; /* ZeRO-3: a second handle for every parameter gather */
    ct_comm *epc; /* ZeRO-3: a second handle on the expert-data-parallel group (NULL: none) */
    int stage, N, rank;
    size_t flat, local, lo, hi;
    float *hostflat; /* stages 1, 2: flat floats for the all-gather */
    float *mirror;   /* stage 3: host copy of the shard: [experts' run | dense run] */
    size_t opt_len;  /* the shard's floats (both runs) */
    float *ptmp;     /* stage 3: one gathered range (synchronous gathers) */
    float *pf_buf;   /* stage 3: two halves of `local` floats, block parity's half */
    size_t *counts;  /* stage 3: [2N] per-rank counts of a gather (the worker's, the prefetch's) */
    ct_event *ev_ptmp, *ev_pf[2]; /* slot writes still reading ptmp / pf_buf halves */
    int hold_l[2];   /* stage 3: block in each working slot (-1 none) */
    int wte_held;    /* stage 3: the working buffer's region R holds wte (not the slots) */
    size_t r0, wte_len, slot_len; /* R's start, wte's floats (0: not held here), a slot's */
    pthread_t pth;
    int pth_started, quit, pf_block, pf_state; /* 0 idle, 1 requested, 2 done */
    size_t pf_a, pf_b;
    ct_status pf_st;
    ct_err pf_err;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    double gather_ms;
    ct_trace *tr;
    ct_err err;
};

void ct_zero_set_trace(ct_zero *z, ct_trace *t) { z->tr = t; }

const char *ct_zero_errmsg(const ct_zero *z) { return z->err.msg; }
size_t ct_zero_host_bytes(const ct_zero *z) {
    return ((z->hostflat ? z->flat : 0) + (z->mirror ? z->opt_len : 0) +
            (z->ptmp ? 3 * z->local : 0)) *
           sizeof(float);
}
/* The same from the layout alone (what ct_zero_create allocates for P's stage): stages 1, 2 a
 * host copy of the flat layout for the all-gather; stage 3 the shard's mirror, one block's
 * gather buffer and two prefetch buffers of the local layout. */
size_t ct__zero_host_bytes_plan(const ct_params *P) {
    size_t lo, hi;
    ct_params_shard(P, &lo, &hi);
    switch (ct_params_zero_stage(P)) {
    case 1:
    case 2: return ct_params_flat_len(P) * sizeof(float);
    case 3: return (ct_params_opt_len(P) + 3 * ct_params_local_len(P)) * sizeof(float);
    default: return 0;
    }
}
double ct_zero_gather_ms(const ct_zero *z) { return z->gather_ms; }
uint64_t ct_zero_gather_bytes(const ct_zero *z) { return z ? ct_comm_bytes(z->pc) : 0; }
uint64_t ct_zero_expert_gather_bytes(const ct_zero *z) { return z ? ct_comm_bytes(z->epc) : 0; }
void ct_zero_times_reset(ct_zero *z) { z->gather_ms = 0; }

static ct_status comm_fail(ct_zero *z, ct_comm *c, ct_status st, const char *what, ct_err *err) {
    if (st != CT_OK) CT_ERR(err, st, "%s: %s", what, ct_comm_errmsg(c));
    return st;
}
static ct_status dev_fail(ct_zero *z, ct_status st, const char *what) {
    if (st != CT_OK) CT_ERR(&z->err, st, "%s: %s", what, ct_device_errmsg(z->dev));
    return st;
}

/* Flat parameters [a, b) into buf: rank k's part is what its shard [base + k sh, base + (k+1) sh)
 * holds of it, this worker's from the mirror. `half`: which half of the counts (0 the worker's
 * gathers, 1 the prefetch thread's). */
static ct_status gather_host(ct_zero *z, ct_comm *c, size_t a, size_t b, float *buf, int half,
                             ct_err *err) {
    size_t sh = z->hi - z->lo, base = z->lo - sh * (size_t)z->rank, *cnt = z->counts + half * z->N;
    for (int k = 0; k < z->N; k++) {
        size_t s0 = base + (size_t)k * sh, s1 = s0 + sh;
        size_t x0 = a > s0 ? a : s0, x1 = b < s1 ? b : s1;
        cnt[k] = x1 > x0 ? x1 - x0 : 0;
    }
    size_t x0 = a > z->lo ? a : z->lo;
    const float *dense = z->mirror + (z->xhi - z->xlo); /* the mirror's dense run */
    const float *mine = cnt[z->rank] ? dense + (x0 - z->lo) : dense;
    return comm_fail(z, c, ct_comm_allgatherv(c, mine, buf, cnt, CT_F32, NULL),
                     "parameter gather", err);
}

/* The gathered floats to the working buffer at `work` (non-blocking: *ev until src is read);
 * a bf16 model's working copy of them made behind the write, on the device (the conversion the
 * single device makes of its whole parameters, so the copies agree bitwise). */
static ct_status write_slot(ct_zero *z, size_t work, const float *src, size_t n, ct_event **ev) {
    ct_status st = dev_fail(z, ct_arena_write_async(ct_params_buffer(z->P), work * sizeof(float),
                                                    n * sizeof(float), src, ev),
                            "writing gathered parameters");
    if (st == CT_OK && (st = ct_model_refresh_working_range(z->m, work, n)) != CT_OK)
        CT_ERR(&z->err, st, "the bf16 working copy of gathered parameters: %s",
               ct_model_errmsg(z->m));
    return st;
}

/* Synchronous gather of [a, b) into the working buffer at `work`, on the gather handle (the
 * gradient thread may be using the group's first handle): after any prefetch in flight. */
static ct_status gather_range(ct_zero *z, size_t a, size_t b, size_t work) {
    pthread_mutex_lock(&z->mu);
    while (z->pf_state == 1) pthread_cond_wait(&z->cv, &z->mu);
    pthread_mutex_unlock(&z->mu);
    ct_status st = ct_event_wait_release(z->ev_ptmp);
    z->ev_ptmp = NULL;
    if (st != CT_OK) return dev_fail(z, st, "writing gathered parameters");
    if ((st = gather_host(z, z->pc, a, b, z->ptmp, 0, &z->err)) != CT_OK) return st;
    return write_slot(z, work, z->ptmp, b - a, &z->ev_ptmp);
}

/* The experts' region [0, x1) into the working buffer: the shards' all-gather over the
 * expert-data-parallel group, or this worker's run (all of them) when it has none. */
static ct_status gather_experts(ct_zero *z, size_t x1) {
    ct_status st = ct_event_wait_release(z->ev_ptmp);
    z->ev_ptmp = NULL;
    if (st != CT_OK) return dev_fail(z, st, "writing gathered parameters");
    size_t xsh = z->xhi - z->xlo;
    if (z->epc) {
        st = comm_fail(z, z->epc, ct_comm_allgather(z->epc, z->mirror, z->ptmp, xsh, CT_F32, NULL),
                       "the experts' parameter gather", &z->err);
        if (st != CT_OK) return st;
    } else {
        memcpy(z->ptmp, z->mirror, xsh * sizeof(float));
    }
    return write_slot(z, 0, z->ptmp, x1, &z->ev_ptmp);
}

static void *prefetch_main(void *arg) {
    ct_zero *z = (ct_zero *)arg;
    pthread_mutex_lock(&z->mu);
    for (;;) {
        while (!z->quit && z->pf_state != 1) pthread_cond_wait(&z->cv, &z->mu);
        if (z->quit) break;
        size_t a = z->pf_a, b = z->pf_b;
        float *buf = z->pf_buf + (size_t)(z->pf_block % 2) * z->local;
        pthread_mutex_unlock(&z->mu);
        double t0 = ct_time_now();
        ct_status st = gather_host(z, z->pc, a, b, buf, 1, &z->pf_err);
        ct_trace_event(z->tr, CT_TRACE_PREFETCH, "parameter prefetch", "comm", t0, -1);
        pthread_mutex_lock(&z->mu);
        z->pf_st = st;
        z->pf_state = 2;
        pthread_cond_broadcast(&z->cv);
    }
    pthread_mutex_unlock(&z->mu);
    return NULL;
}

ct_status ct_zero_create(ct_zero **out, ct_model *m, ct_comm *dp, ct_comm *edp, ct_comm *world,
                         ct_err *err) {
    *out = NULL;
    ct_zero *z = ct_calloc(1, sizeof *z);
    if (!z) return CT_ERR(err, CT_ERR_NOMEM, "ct_zero_create: out of host memory");
    pthread_mutex_init(&z->mu, NULL);
    pthread_cond_init(&z->cv, NULL);
    z->m = m;
    z->P = ct_model_params(m);
    z->dev = ct_model_device(m);
    z->c = dp;
    z->stage = ct_params_zero_stage(z->P);
    z->N = dp ? ct_comm_size(dp) : 1;
    z->rank = dp ? ct_comm_rank(dp) : 0;
    z->flat = ct_params_flat_len(z->P);
    z->local = ct_params_local_len(z->P);
    z->opt_len = ct_params_opt_len(z->P);
    ct_params_shard(z->P, &z->lo, &z->hi);
    z->hold_l[0] = z->hold_l[1] = -1;
    ct_params_pwork_region(z->P, &z->r0, &z->wte_len, &z->slot_len);
    if (z->stage == 0) {
        *out = z;
        return CT_OK;
    }
    size_t slo[2], shi[2], x0, x1;
    ct_params_expert_range(z->P, &x0, &x1);
    if (ct_params_shards(z->P, slo, shi) == 2) {
        z->xlo = slo[0], z->xhi = shi[0];
        int ne = edp ? ct_comm_size(edp) : 1, er = edp ? ct_comm_rank(edp) : 0;
        if ((ne > 1 && !edp) || x1 != (z->xhi - z->xlo) * (size_t)ne ||
            z->xlo != (z->xhi - z->xlo) * (size_t)er) {
            ct_zero_free(z);
            return CT_ERR(err, CT_ERR_ARG,
                          "ct_zero_create: the expert-data-parallel group (rank %d of %d) does not "
                          "match the experts' shard [%zu, %zu) of %zu",
                          er, ne, z->xlo, z->xhi, x1);
        }
        z->ec = edp && ne > 1 ? edp : NULL;
    }
    const ct_layout *lay = ct_params_layout(z->P);
    if (!dp || z->N != lay->dp || z->lo - x1 != (z->hi - z->lo) * (size_t)z->rank) {
        ct_zero_free(z);
        return CT_ERR(err, CT_ERR_ARG,
                      "ct_zero_create: the DP group (rank %d of %d) does not match the model's "
                      "layout (dp = %d, shard at %zu)",
                      dp ? ct_comm_rank(dp) : -1, dp ? ct_comm_size(dp) : 0, lay->dp, z->lo);
    }
    ct_status st = CT_OK;
    if (z->stage < 3) {
        if (!(z->hostflat = ct_malloc(z->flat * sizeof(float))))
            st = CT_ERR(err, CT_ERR_NOMEM, "ct_zero_create: out of host memory for gathers");
    } else {
        /* collective over world (or the group): every worker creates its ct_zero together */
        ct_comm *from = world ? world : dp;
        if ((st = ct_comm_split(from, world ? ct_comm_world_rank(dp, 0) : 0, z->rank, &z->pc)) !=
            CT_OK)
            CT_ERR(err, st, "ct_zero_create: a second handle on the DP group: %s",
                   ct_comm_errmsg(from));
        else if (z->ec &&
                 (st = ct_comm_split(world ? world : z->ec,
                                     world ? ct_comm_world_rank(z->ec, 0) : 0,
                                     ct_comm_rank(z->ec), &z->epc)) != CT_OK)
            CT_ERR(err, st, "ct_zero_create: a second handle on the expert-data-parallel group: %s",
                   ct_comm_errmsg(world ? world : z->ec));
        else if (!(z->ptmp = ct_malloc(z->local * sizeof(float))) ||
                 !(z->pf_buf = ct_malloc(2 * z->local * sizeof(float))) ||
                 !(z->mirror = ct_malloc(z->opt_len * sizeof(float))) ||
                 !(z->counts = ct_malloc(2 * (size_t)z->N * sizeof(size_t))))
            st = CT_ERR(err, CT_ERR_NOMEM, "ct_zero_create: out of host memory for gathers");
        else if (pthread_create(&z->pth, NULL, prefetch_main, z) != 0)
            st = CT_ERR(err, CT_ERR_NOMEM, "ct_zero_create: cannot start the prefetch thread");
        else
            z->pth_started = 1;
    }
    if (st != CT_OK) {
        ct_zero_free(z);
        return st;
    }
    *out = z;
    return CT_OK;
}

void ct_zero_free(ct_zero *z) {
    if (!z) return;
    if (z->pth_started) {
        pthread_mutex_lock(&z->mu);
        z->quit = 1;
        pthread_cond_broadcast(&z->cv);
        pthread_mutex_unlock(&z->mu);
        pthread_join(z->pth, NULL);
    }
    ct_event_wait_release(z->ev_ptmp);
    ct_event_wait_release(z->ev_pf[0]);
    ct_event_wait_release(z->ev_pf[1]);
    pthread_mutex_destroy(&z->mu);
    pthread_cond_destroy(&z->cv);
    ct_comm_free(z->pc);
    ct_comm_free(z->epc);
    free(z->hostflat);
    free(z->mirror);
    free(z->ptmp);
    free(z->pf_buf);
    free(z->counts);
    free(z);
}

ct_status ct_zero_after_step(ct_zero *z) {
    if (z->stage == 0 || z->stage >= 3) return CT_OK; /* stage 3 keeps the shard; gathers on use */
    ct_arena *p = ct_params_buffer(z->P);
    size_t sh = z->hi - z->lo, xsh = z->xhi - z->xlo, x0 = z->lo - sh * (size_t)z->rank;
    ct_status st = dev_fail(z, ct_arena_read(p, z->lo * sizeof(float), z->hostflat + z->lo,
                                             sh * sizeof(float)),
                            "reading the parameter shard");
    if (st == CT_OK)
        st = comm_fail(z, z->c, ct_comm_allgather(z->c, z->hostflat + z->lo, z->hostflat + x0, sh,
                                                  CT_F32, NULL),
                       "all-gather of parameter shards", &z->err);
    /* the experts' shards over the workers holding the same experts (none to gather when each
     * holds its own: dp = ep) */
    if (st == CT_OK && xsh && z->ec)
        st = dev_fail(z, ct_arena_read(p, z->xlo * sizeof(float), z->hostflat + z->xlo,
                                       xsh * sizeof(float)),
                      "reading the experts' parameter shard");
    if (st == CT_OK && xsh && z->ec)
        st = comm_fail(z, z->ec, ct_comm_allgather(z->ec, z->hostflat + z->xlo, z->hostflat, xsh,
                                                   CT_F32, NULL),
                       "all-gather of the experts' parameter shards", &z->err);
    /* without an expert group every expert here is this worker's own: the device has them */
    size_t w0 = z->ec ? 0 : x0;
    if (st == CT_OK)
        st = dev_fail(z, ct_arena_write(p, w0 * sizeof(float), z->hostflat + w0,
                                        (z->flat - w0) * sizeof(float)),
                      "writing gathered parameters");
    return st;
}

ct_status ct_zero_begin_pass(ct_zero *z) {
    if (z->stage < 3) return CT_OK;
    double t0 = ct_time_now();
    z->hold_l[0] = z->hold_l[1] = -1; /* the shard may have changed (optimizer): slots stale */
    z->wte_held = 0;
    pthread_mutex_lock(&z->mu); /* ... and so may an unused prefetch */
    while (z->pf_state == 1) pthread_cond_wait(&z->cv, &z->mu);
    z->pf_state = 0;
    pthread_mutex_unlock(&z->mu);
    ct_status st = dev_fail(z, ct_arena_read(ct_params_param_shard(z->P), 0, z->mirror,
                                             z->opt_len * sizeof(float)),
                            "reading the parameter shard");
    size_t emb = ct_params_layer_begin(z->P, 0), a, b, x0, x1;
    ct_params_expert_range(z->P, &x0, &x1);
    ct_params_lnf_range(z->P, &a, &b);
    size_t pe = x1 + z->wte_len; /* wpe (wte: gathered when read, ct_zero_need_wte) */
    if (st == CT_OK && x1 > 0) st = gather_experts(z, x1);
    if (st == CT_OK && emb > pe) st = gather_range(z, pe, emb, ct_params_pwork_off(z->P, pe));
    if (st == CT_OK && b > a) st = gather_range(z, a, b, ct_params_pwork_off(z->P, a));
    z->gather_ms += 1e3 * (ct_time_now() - t0);
    ct_trace_event(z->tr, CT_TRACE_MAIN, "parameter gather", "comm", t0, -1);
    return st;
}

/* The working slot (0 or 1) of block l. */
static int slot_of(const ct_zero *z, int l) {
    size_t w = ct_params_pwork_off(z->P, ct_params_layer_begin(z->P, l));
    return w == z->r0 ? 0 : 1; /* slot 0 starts R */
}

static void prefetch(ct_zero *z, int l) {
    if (l < 0 || !ct_params_holds_layer(z->P, l) || !z->pth_started) return;
    int s = slot_of(z, l);
    if (z->hold_l[s] == l) return;
    ct_event_wait_release(z->ev_pf[l % 2]); /* the thread is about to overwrite that half */
    z->ev_pf[l % 2] = NULL;
    pthread_mutex_lock(&z->mu);
    while (z->pf_state == 1) pthread_cond_wait(&z->cv, &z->mu); /* an unused earlier request */
    z->pf_block = l;
    z->pf_a = ct_params_layer_begin(z->P, l);
    z->pf_b = ct_params_layer_end(z->P, l);
    z->pf_state = 1;
    pthread_cond_broadcast(&z->cv);
    pthread_mutex_unlock(&z->mu);
}

ct_status ct_zero_need_block(ct_zero *z, int l, int next) {
    if (z->stage < 3) return CT_OK;
    double t0 = ct_time_now();
    size_t a = ct_params_layer_begin(z->P, l), b = ct_params_layer_end(z->P, l);
    size_t work = ct_params_pwork_off(z->P, a);
    int s = slot_of(z, l);
    ct_status st = CT_OK;
    if (z->hold_l[s] != l) {
        if (z->pf_state != 0 && z->pf_block == l) {
            pthread_mutex_lock(&z->mu);
            while (z->pf_state != 2) pthread_cond_wait(&z->cv, &z->mu);
            st = z->pf_st;
            if (st != CT_OK) CT_ERR(&z->err, st, "%s", z->pf_err.msg);
            z->pf_state = 0;
            pthread_mutex_unlock(&z->mu);
            if (st == CT_OK)
                st = write_slot(z, work, z->pf_buf + (size_t)(l % 2) * z->local, b - a,
                                &z->ev_pf[l % 2]);
        } else {
            st = gather_range(z, a, b, work);
        }
        if (st == CT_OK) z->hold_l[s] = l;
        if ((size_t)s * z->slot_len < z->wte_len) z->wte_held = 0; /* it took wte's place */
    }
    if (st == CT_OK) prefetch(z, next);
    z->gather_ms += 1e3 * (ct_time_now() - t0);
    ct_trace_event(z->tr, CT_TRACE_MAIN, "parameter gather", "comm", t0, CT_TRACE_MB);
    return st;
}

ct_status ct_zero_need_wte(ct_zero *z) {
    if (z->stage < 3 || z->wte_len == 0 || z->wte_held) return CT_OK;
    double t0 = ct_time_now();
    size_t w0, w1;
    ct_params_wte_range(z->P, &w0, &w1);
    ct_status st = gather_range(z, w0, w1, z->r0);
    if (st == CT_OK) {
        z->wte_held = 1;
        for (int s = 0; s < 2; s++) /* the slots it overwrote */
            if ((size_t)s * z->slot_len < z->wte_len) z->hold_l[s] = -1;
    }
    z->gather_ms += 1e3 * (ct_time_now() - t0);
    ct_trace_event(z->tr, CT_TRACE_MAIN, "parameter gather", "comm", t0, CT_TRACE_MB);
    return st;
}
