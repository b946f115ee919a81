/* step.c - the step executor: one worker runs its stage's action list (parallel/'s schedules)
 * for one optimizer step. FWD/BWD (or its halves BWD_INPUT, BWD_WEIGHT) call the model's entry
 * points on an activation slot; the executor gathers ZeRO-3 blocks before the model uses them
 * and, after the last action that writes a range of gradients, tells the gradient reducer that
 * range is final; SEND/RECV move activations and their gradients between pipeline stages;
 * GRAD_SYNC waits for the reductions; OPT_STEP runs the optimizer (with the global norm summed
 * over the pipeline) and ZeRO's all-gather. A single device is the 1x1x1 grid (grid NULL or all
 * groups of one) with the trivial list: nothing is reduced.
 *
 * Pipeline transfers go through host staging, one buffer per message in flight. A send enqueues
 * the device read behind the compute that made the tensor and returns; the message is posted
 * (ct_comm_isend) as soon as the read has completed: checked after every action without
 * blocking, and waited for before this worker blocks anywhere (a receive, the gradient sync), so
 * a peer never waits on a send this worker has reached (the schedules assume buffered sends: a
 * blocking rendezvous send deadlocks 1F1B). A receive writes its staging to the device without
 * waiting; the buffer is reused once that write has completed. Sends are completed at the end of
 * the step. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_step.h"
#include "engine_impl.h"

typedef struct slot_use {
    int mb, chunk; /* -1: free */
} slot_use;

/* One pipeline message's host staging. */
enum { X_FREE, X_READING, X_SENT, X_WRITING };
typedef struct xfer {
    float *p;
    size_t cap;    /* floats */
    int state;     /* X_*: READING: device read enqueued, not posted; SENT: isend posted;
                      WRITING: received, the device write not yet complete */
    ct_event *ev;  /* READING, WRITING */
    ct_request *req; /* SENT */
    int peer;
    size_t bytes;
    long seq;      /* order of the sends (posted in this order) */
} xfer;

struct ct_exec {
    ct_model *m;
    ct_params *P;
    ct_device *dev;
    ct_grid *grid;
    ct_comm *world, *dp, *pp, *emb;
    ct_comm *tp;  /* the grid's TP group (the model's collectives; the logits gather) */
    ct_comm *tpg; /* a second handle on it for the gradient thread (sequence parallelism) */
    ct_comm *ep, *edp; /* experts: the EP group (the model's all-to-alls) and the workers holding
                          the same experts (their gradients' reduction, their ZeRO shards) */
    int epsize, experts;
    int32_t *moe_counts; /* the last step's [routed (L E) | kept (L E) | rows per worker (W)] */
    int stage, nstages, dpsize, nchunks; /* nchunks: model chunks held (v) */
    int tpsize;
    ct_grad_range *ranges;
    int nranges;
    size_t norm_lo; /* the stage's norm covers flat [norm_lo, local): the last stage leaves out
                       its copy of the tied wte (the first stage counts it) */
    ct_grads *g; /* NULL: nothing to reduce (one worker) */
    ct_zero *z;
    ct_optim *o;
    ct_trace *tr;
    slot_use *slots;
    int nslots;
    double *losses; /* per micro-batch of the running step */
    int nlosses;
    xfer *xf;       /* pipeline staging, one per message in flight */
    int nxf;
    long xseq;
    int timeline;   /* record the executed timeline (device waited for after each action) */
    int failed;     /* a step failed: posted sends may never complete */
    double *tl_dur; /* the last recorded step: each action's duration (ms) */
    int tl_n, tl_cap;
    double tl_last_compute, tl_last_makespan;
    ct_exec_timeline tl;
    ct_exec_times times;
    int poison_t; /* test hook: the step whose backward gets an infinite loss scale */
    ct_err err;
};

ct_exec_opts ct_exec_opts_default(void) {
    ct_exec_opts o;
    o.grads = ct_grads_opts_default();
    return o;
}

const char *ct_exec_errmsg(const ct_exec *x) { return x->err.msg; }
ct_grads *ct_exec_grads(ct_exec *x) { return x->g; }
ct_zero *ct_exec_zero(ct_exec *x) { return x->z; }

void ct_exec_set_trace(ct_exec *x, ct_trace *t) {
    x->tr = t;
    ct_model_set_trace(x->m, t);
    if (x->g) ct_grads_set_trace(x->g, t);
    ct_zero_set_trace(x->z, t);
}

static int multi(const ct_comm *c) { return c && ct_comm_size(c) > 1; }

/* A held (tensor, layer) piece of the flat layout and how it is reduced. */
typedef struct flat_piece {
    size_t lo, hi;
    ct_comm *g0; /* the first group (AVG): DP, or the expert-data-parallel group, or none */
    ct_comm *g1; /* the second group (SUM): the embedding group, the TP group, or none */
    int norm_skip;
} flat_piece;
static int piece_cmp(const void *a, const void *b) {
    size_t x = ((const flat_piece *)a)->lo, y = ((const flat_piece *)b)->lo;
    return x < y ? -1 : x > y;
}

/* The gradient ranges of this worker's flat layout, consecutive pieces alike merged:
 * everything averaged over the DP group dp (NULL: none), except a mixture-of-experts model's
 * expert tensors: averaged over the workers holding the same experts, edp (the
 * expert-data-parallel group, dp / ep of them; NULL when dp = ep); the tied wte of a pipeline
 * then summed over the embedding group emb (the last stage's copy left out of ZeRO-2's norm);
 * under sequence parallelism (tpg not NULL) the replicated LayerNorm parameters summed over the
 * TP group. Every other replicated tensor's gradient is already whole on every TP worker (wpe,
 * attprojb and fcprojb are computed from the gathered output gradient). Pure: the groups are
 * only stored and compared, so the memory model calls it with stand-ins (ct__exec_ranges). */
ct_status ct__exec_ranges(const ct_params *P, ct_comm *dp, ct_comm *edp, ct_comm *emb,
                          ct_comm *tpg, ct_grad_range **out, int *nout, ct_err *err) {
    const ct_gpt_config *c = ct_params_config(P);
    int n = 0;
    *out = NULL, *nout = 0;
    flat_piece *pc = ct_malloc(sizeof *pc * (size_t)(CT_GPT_NUM_TENSORS * c->layers + 2));
    if (!pc) return CT_ERR(err, CT_ERR_NOMEM, "ct_exec_create: out of host memory");
    size_t xlo, xhi;
    ct_params_expert_range(P, &xlo, &xhi);
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        if (!ct_params_holds(P, i) || ct_params_slice_len(P, i) == 0) continue;
        int block = i >= CT_GPT_ln1w && i <= CT_GPT_fcprojb;
        int ln = i == CT_GPT_ln1w || i == CT_GPT_ln1b || i == CT_GPT_ln2w || i == CT_GPT_ln2b ||
                 i == CT_GPT_lnfw || i == CT_GPT_lnfb;
        int ex = ct_params_is_expert(P, i);
        for (int l = 0; l < (block ? c->layers : 1); l++) {
            if (block && !ct_params_holds_layer(P, l)) continue;
            pc[n].lo = ct_params_flat_off(P, i, l);
            pc[n].hi = pc[n].lo + ct_params_slice_len(P, i);
            pc[n].g0 = ex ? edp : dp;
            pc[n].g1 = i == CT_GPT_wte && emb ? emb : tpg && ln ? tpg : NULL;
            pc[n].norm_skip = i == CT_GPT_wte && emb && !ct_params_has_embed(P);
            n++;
        }
    }
    size_t xend = xlo; /* the experts' ZeRO padding joins their range (zeros: no effect) */
    for (int k = 0; k < n; k++)
        if (pc[k].hi <= xhi && pc[k].hi > xend) xend = pc[k].hi;
    if (xhi > xend) {
        pc[n].lo = xend, pc[n].hi = xhi, pc[n].g0 = edp, pc[n].g1 = NULL, pc[n].norm_skip = 0;
        n++;
    }
    qsort(pc, (size_t)n, sizeof *pc, piece_cmp);
    ct_grad_range *rg = ct_calloc((size_t)(n ? n : 1), sizeof *rg);
    if (!rg) {
        free(pc);
        return CT_ERR(err, CT_ERR_NOMEM, "ct_exec_create: out of host memory");
    }
    int nr = 0;
    for (int k = 0; k < n; k++) {
        ct_grad_range *r = nr ? &rg[nr - 1] : NULL;
        if (r && r->hi == pc[k].lo && r->groups[0] == pc[k].g0 && r->groups[1] == pc[k].g1 &&
            r->norm_skip == pc[k].norm_skip) {
            r->hi = pc[k].hi;
            continue;
        }
        r = &rg[nr++];
        r->lo = pc[k].lo, r->hi = pc[k].hi;
        r->groups[0] = pc[k].g0;
        r->ops[0] = CT_OP_AVG;
        r->groups[1] = pc[k].g1;
        r->ops[1] = CT_OP_SUM;
        r->norm_skip = pc[k].norm_skip;
    }
    free(pc);
    *out = rg, *nout = nr;
    return CT_OK;
}

ct_status ct_exec_create(ct_exec **out, ct_model *m, ct_grid *grid, const ct_exec_opts *o,
                         ct_err *err) {
    *out = NULL;
    ct_exec_opts def = ct_exec_opts_default();
    if (!o) o = &def;
    ct_exec *x = ct_calloc(1, sizeof *x);
    if (!x) return CT_ERR(err, CT_ERR_NOMEM, "ct_exec_create: out of host memory");
    x->m = m;
    x->P = ct_model_params(m);
    x->dev = ct_model_device(m);
    x->grid = grid;
    x->world = grid ? ct_grid_world(grid) : NULL;
    x->dp = grid ? ct_grid_dp(grid) : NULL;
    x->pp = grid ? ct_grid_pp(grid) : NULL;
    x->emb = grid ? ct_grid_emb(grid) : NULL;
    x->stage = ct_params_coords(x->P)->pp_rank;
    x->nstages = ct_params_layout(x->P)->pp;
    x->nchunks = ct_params_nchunks(x->P);
    x->dpsize = x->dp ? ct_comm_size(x->dp) : 1;
    x->tp = grid ? ct_grid_tp(grid) : NULL;
    x->tpsize = x->tp ? ct_comm_size(x->tp) : 1;
    x->experts = ct_params_config(x->P)->experts;
    x->ep = grid && x->experts ? ct_grid_ep(grid) : NULL;
    x->edp = grid && x->experts ? ct_grid_edp(grid) : NULL;
    x->epsize = x->ep ? ct_comm_size(x->ep) : 1;
    if (x->experts) {
        const ct_gpt_config *c = ct_params_config(x->P);
        int W = x->world ? ct_comm_size(x->world) : 1;
        x->moe_counts = ct_calloc(2 * (size_t)c->layers * c->experts + (size_t)W, sizeof(int32_t));
        if (!x->moe_counts) {
            free(x);
            return CT_ERR(err, CT_ERR_NOMEM, "ct_exec_create: out of host memory");
        }
    }
    ct_status st = CT_OK;
    const ct_layout *lay = ct_params_layout(x->P);
    if (grid) {
        const ct_layout *gl = ct_grid_layout(grid);
        const ct_coords *gc = ct_grid_coords(grid), *mc = ct_params_coords(x->P);
        int gep = gl->ep < 1 ? 1 : gl->ep, mep = lay->ep < 1 ? 1 : lay->ep;
        if (gep != mep)
            st = CT_ERR(err, CT_ERR_ARG,
                        "ct_exec_create: the model was built for ep %d, the grid has ep %d", mep,
                        gep);
        else if (gl->dp != lay->dp || gl->tp != lay->tp || gl->pp != lay->pp || gc->dp_rank != mc->dp_rank ||
            gc->tp_rank != mc->tp_rank || gc->pp_rank != mc->pp_rank)
            st = CT_ERR(err, CT_ERR_ARG,
                        "ct_exec_create: the model was built for dp %d tp %d pp %d at (%d, %d, "
                        "%d), the grid is dp %d tp %d pp %d at (%d, %d, %d)",
                        lay->dp, lay->tp, lay->pp, mc->dp_rank, mc->tp_rank, mc->pp_rank, gl->dp,
                        gl->tp, gl->pp, gc->dp_rank, gc->tp_rank, gc->pp_rank);
    } else if (lay->dp * lay->tp * lay->pp != 1) {
        st = CT_ERR(err, CT_ERR_ARG,
                    "ct_exec_create: a layout of several workers (dp %d tp %d pp %d) needs a grid",
                    lay->dp, lay->tp, lay->pp);
    }
    x->nslots = ct_model_plan_of(m)->slots;
    x->slots = ct_malloc(sizeof *x->slots * (size_t)x->nslots);
    if (st == CT_OK && !x->slots) st = CT_ERR(err, CT_ERR_NOMEM, "ct_exec_create: no memory");
    for (int s = 0; st == CT_OK && s < x->nslots; s++) x->slots[s].mb = x->slots[s].chunk = -1;
    /* the gradient ranges: the stage's flat layout averaged over its DP group; a pipeline's tied
     * wte (first and last stage) then summed over the embedding group, so both copies get the
     * whole gradient; under sequence parallelism the LayerNorm parameters summed over the TP
     * group (each TP worker's gradient covers only its tokens) */
    size_t wlo = 0, whi = 0;
    ct_params_wte_range(x->P, &wlo, &whi);
    int tied = multi(x->emb) && whi > wlo;
    int sp = ct_model_plan_of(m)->sp && x->tpsize > 1;
    if (tied && !ct_params_has_embed(x->P)) x->norm_lo = whi;
    if (st == CT_OK && sp) {
        /* the gradient thread's own handle on the TP group, split from world (collective over
         * every worker) with each TP group's colour its first worker: TP groups splitting
         * themselves alike would share an MPI tag across ranks (ct_comm_split) */
        if ((st = ct_comm_split(x->world, ct_comm_world_rank(x->tp, 0), ct_comm_rank(x->tp),
                                &x->tpg)) != CT_OK)
            CT_ERR(err, st, "ct_exec_create: a second handle on the TP group: %s",
                   ct_comm_errmsg(x->world));
    }
    if (st == CT_OK && (multi(x->dp) || tied || sp))
        st = ct__exec_ranges(x->P, multi(x->dp) ? x->dp : NULL, multi(x->edp) ? x->edp : NULL,
                             tied ? x->emb : NULL, sp ? x->tpg : NULL, &x->ranges, &x->nranges,
                             err);
    if (st == CT_OK && x->nranges > 0)
        st = ct_grads_create(&x->g, m, x->ranges, x->nranges, &o->grads, err);
    if (st == CT_OK) st = ct_zero_create(&x->z, m, x->dp, x->edp, x->world, err);
    if (st == CT_OK) st = ct_optim_create(&x->o, x->P, ct_model_profile(m), err);
    if (st != CT_OK) {
        ct_exec_free(x);
        return st;
    }
    *out = x;
    return CT_OK;
}

void ct_exec_free(ct_exec *x) {
    if (!x) return;
    /* nothing may still read or write the staging; after a failed step a posted send's receiver
     * may be gone, so its staging is left to the process rather than waited for */
    for (int i = 0; i < x->nxf; i++) {
        xfer *f = &x->xf[i];
        if (f->state == X_SENT && x->failed) continue;
        if (f->state == X_SENT) ct_comm_wait(f->req);
        ct_event_wait_release(f->ev);
        free(f->p);
    }
    free(x->xf);
    ct_grads_free(x->g);
    ct_comm_free(x->tpg);
    free(x->ranges);
    ct_zero_free(x->z);
    ct_optim_free(x->o);
    if (x->m) ct_model_set_trace(x->m, NULL);
    free(x->slots);
    free(x->moe_counts);
    free(x->losses);
    free(x->tl_dur);
    free(x);
}

/* ------------------------------------------------------------------ helpers */

static ct_status fail_model(ct_exec *x, ct_status st) {
    if (st != CT_OK) CT_ERR(&x->err, st, "%s", ct_model_errmsg(x->m));
    return st;
}

/* The slot holding (mb, chunk), allocated on first use. */
static ct_status slot_get(ct_exec *x, int mb, int chunk, int alloc, int *out) {
    int fr = -1;
    for (int s = 0; s < x->nslots; s++) {
        if (x->slots[s].mb == mb && x->slots[s].chunk == chunk) {
            *out = s;
            return CT_OK;
        }
        if (fr < 0 && x->slots[s].mb < 0) fr = s;
    }
    if (!alloc)
        return CT_ERR(&x->err, CT_ERR_STATE,
                      "executor: no activations of micro-batch %d, chunk %d (backward before its "
                      "forward?)",
                      mb, chunk);
    if (fr < 0)
        return CT_ERR(&x->err, CT_ERR_STATE,
                      "executor: the schedule keeps more than %d micro-batches alive on this "
                      "worker (the model was planned for %d activation slots)",
                      x->nslots, x->nslots);
    x->slots[fr].mb = mb, x->slots[fr].chunk = chunk;
    *out = fr;
    return CT_OK;
}
static void slot_free(ct_exec *x, int s) { x->slots[s].mb = x->slots[s].chunk = -1; }

/* The local chunk index of model chunk c (chunk c lives on stage c % N as local c / N). */
static int local_chunk(const ct_exec *x, int c) { return c / (x->nstages ? x->nstages : 1); }
static int last_chunk(const ct_exec *x, const ct_schedule *s, int c) {
    return c == s->stages * (s->virt < 1 ? 1 : s->virt) - 1;
}

/* Whether the device is waited for after every action: while tracing (so device time lands in
 * the action's span) and while recording the timeline. */
static int syncing(const ct_exec *x) { return x->timeline || ct_trace_on(x->tr); }

/* End of a traced span: while tracing, wait for the device so its time lands in the span. */
static void span(ct_exec *x, const char *name, const char *cat, double t0, int mb) {
    if (!ct_trace_on(x->tr)) return;
    ct_device_finish(x->dev);
    ct_trace_event(x->tr, CT_TRACE_MAIN, name, cat, t0, mb);
}

static ct_status sub_fail(ct_exec *x, ct_status st, const char *what, const char *msg) {
    return CT_ERR(&x->err, st, "%s: %s", what, msg);
}

static ct_status xfer_pump(ct_exec *x, int block);

/* ZeRO-2 and 3 block inside a step (the previous micro-step's buckets, parameter gathers) on
 * their DP group; every send this worker has reached is posted before, so no peer waits on it. */
static ct_status before_zero_wait(ct_exec *x, int stage) {
    return ct_params_zero_stage(x->P) >= stage && x->nxf ? xfer_pump(x, 1) : CT_OK;
}

/* Expert parallelism blocks inside the forward and backward (the MoE layer's all-to-alls over the
 * EP group): every send this worker has reached is posted first. */
static ct_status before_ep_wait(ct_exec *x) {
    return x->epsize > 1 && x->nxf ? xfer_pump(x, 1) : CT_OK;
}

static ct_status forward_chunk(ct_exec *x, const ct_schedule *s, int slot, int mb, int chunk,
                               const int *tokens, const int *targets, int rows, int T,
                               double *loss) {
    ct_status st = CT_OK;
    int lc = local_chunk(x, chunk), lo, hi;
    (void)mb;
    ct_params_chunk(x->P, lc, &lo, &hi);
    if ((st = before_zero_wait(x, 3)) != CT_OK || (st = before_ep_wait(x)) != CT_OK) return st;
    if ((st = ct_zero_begin_pass(x->z)) != CT_OK)
        return CT_ERR(&x->err, st, "%s", ct_zero_errmsg(x->z));
    if (chunk == 0 && (st = ct_model_embed_forward(x->m, slot, tokens, rows, T)) != CT_OK)
        return fail_model(x, st);
    for (int l = lo; l < hi; l++) {
        if ((st = ct_zero_need_block(x->z, l, l + 1 < hi ? l + 1 : -1)) != CT_OK)
            return CT_ERR(&x->err, st, "%s", ct_zero_errmsg(x->z));
        if ((st = ct_model_block_forward(x->m, slot, l)) != CT_OK) return fail_model(x, st);
    }
    if (last_chunk(x, s, chunk)) {
        float lv = NAN;
        if ((st = ct_model_head_forward(x->m, slot, targets, loss ? &lv : NULL)) != CT_OK)
            return fail_model(x, st);
        if (loss) *loss = lv;
    }
    return CT_OK;
}

static ct_status grads_begin(ct_exec *x, int armed) {
    ct_status st = x->g ? ct_grads_begin(x->g, armed) : CT_OK;
    return st == CT_OK ? st : sub_fail(x, st, "gradients", ct_grads_errmsg(x->g));
}
static ct_status grads_ready(ct_exec *x, size_t from) {
    ct_status st = x->g ? ct_grads_ready(x->g, from) : CT_OK;
    return st == CT_OK ? st : sub_fail(x, st, "gradients", ct_grads_errmsg(x->g));
}

/* Backward of one chunk: the whole backward (BWD), its input half (BWD_INPUT: the head's and
 * the embedding's gradients too, which nothing defers) or its weight half (BWD_WEIGHT: the
 * blocks' parameter gradients). `final`: no later action of this step writes the gradients this
 * one writes (the chunk's last BWD or BWD_WEIGHT; for BWD_INPUT, the last chunk's last one, which
 * finishes the head's), so the ranges it finishes go to the reducer as it goes (every range below
 * the chunk once its lowest local chunk is done: the embeddings, or the last stage's tied wte).
 * Every micro-step is "final" under ZeRO-2 (its buckets leave every time). */
static ct_status backward_chunk(ct_exec *x, const ct_schedule *s, int slot, int chunk,
                                ct_act_kind kind, int final, float scale) {
    ct_status st = CT_OK;
    int lc = local_chunk(x, chunk), lo, hi;
    ct_params_chunk(x->P, lc, &lo, &hi);
    if ((st = before_zero_wait(x, 2)) != CT_OK || (st = before_ep_wait(x)) != CT_OK ||
        (st = grads_begin(x, final)) != CT_OK)
        return st;
    /* the blocks' own terms of the objective (the MoE auxiliary loss) take the head's scale */
    if ((st = ct_model_set_loss_scale(x->m, slot, scale)) != CT_OK) return fail_model(x, st);
    if (kind != CT_ACT_BWD_WEIGHT && last_chunk(x, s, chunk)) {
        if ((st = ct_model_head_backward(x->m, slot, scale)) != CT_OK) return fail_model(x, st);
        size_t a, b;
        ct_params_lnf_range(x->P, &a, &b);
        if ((st = grads_ready(x, a)) != CT_OK) return st;
    }
    for (int l = hi - 1; l >= lo; l--) {
        if (kind == CT_ACT_BWD_WEIGHT) { /* reads no parameter: nothing to gather */
            if ((st = ct_model_block_backward(x->m, slot, l, CT_BACKWARD_WEIGHT)) != CT_OK)
                return fail_model(x, st);
        } else {
            if ((st = ct_zero_need_block(x->z, l, l - 1 >= lo ? l - 1 : -1)) != CT_OK)
                return CT_ERR(&x->err, st, "%s", ct_zero_errmsg(x->z));
            st = ct_model_block_backward(x->m, slot, l,
                                         kind == CT_ACT_BWD ? CT_BACKWARD_WHOLE : CT_BACKWARD_INPUT);
            if (st != CT_OK) return fail_model(x, st);
        }
        if (kind != CT_ACT_BWD_INPUT &&
            (st = grads_ready(x, ct_params_layer_begin(x->P, l))) != CT_OK)
            return st;
    }
    if (kind != CT_ACT_BWD_WEIGHT && chunk == 0 &&
        (st = ct_model_embed_backward(x->m, slot)) != CT_OK)
        return fail_model(x, st);
    if (kind != CT_ACT_BWD_INPUT && lc == 0 && (st = grads_ready(x, 0)) != CT_OK) return st;
    return CT_OK;
}

/* ------------------------------------------------------------------ pipeline transfers */

static ct_status xfer_take(ct_exec *x, size_t n, int *out) {
    int k = -1;
    for (int i = 0; i < x->nxf; i++)
        if (x->xf[i].state == X_FREE) {
            k = i;
            if (x->xf[i].cap >= n) break;
        }
    if (k < 0) {
        xfer *a = ct_realloc(x->xf, sizeof *a * (size_t)(x->nxf + 1));
        if (!a) return CT_ERR(&x->err, CT_ERR_NOMEM, "executor: no memory for pipeline staging");
        x->xf = a;
        k = x->nxf++;
        memset(&x->xf[k], 0, sizeof x->xf[k]);
    }
    xfer *f = &x->xf[k];
    if (f->cap < n) {
        float *p = ct_realloc(f->p, n * sizeof(float));
        if (!p) return CT_ERR(&x->err, CT_ERR_NOMEM, "executor: no memory to stage an activation");
        f->p = p, f->cap = n;
    }
    *out = k;
    return CT_OK;
}

static ct_status dev_err(ct_exec *x, ct_status st) {
    return CT_ERR(&x->err, st, "%s", ct_device_errmsg(x->dev));
}
static ct_status pp_err(ct_exec *x, ct_status st, const char *what, int peer) {
    return CT_ERR(&x->err, st, "pipeline %s with stage %d: %s", what, peer, ct_comm_errmsg(x->pp));
}

/* Progress without blocking (block = 0), or post every send this worker has reached, waiting
 * for their device reads (block = 1: before it blocks anywhere else). Sends are posted in the
 * order they were made: the channel to a peer is ordered. Completed sends and writes free their
 * staging. */
static ct_status xfer_pump(ct_exec *x, int block) {
    ct_status st = CT_OK;
    for (;;) {
        int k = -1;
        for (int i = 0; i < x->nxf; i++)
            if (x->xf[i].state == X_READING && (k < 0 || x->xf[i].seq < x->xf[k].seq)) k = i;
        if (k < 0) break;
        xfer *f = &x->xf[k];
        int done = 1;
        if (!block && (st = ct_event_query(f->ev, &done)) != CT_OK) return dev_err(x, st);
        if (!done) break;
        st = ct_event_wait_release(f->ev);
        f->ev = NULL;
        if (st != CT_OK) return dev_err(x, st);
        if ((st = ct_comm_isend(x->pp, f->peer, f->p, f->bytes, &f->req)) != CT_OK)
            return pp_err(x, st, "send", f->peer);
        f->state = X_SENT;
    }
    for (int i = 0; i < x->nxf; i++) {
        xfer *f = &x->xf[i];
        int done = 0;
        if (f->state == X_SENT) {
            if ((st = ct_comm_test(f->req, &done)) != CT_OK) return pp_err(x, st, "send", f->peer);
            if (done) {
                st = ct_comm_wait(f->req);
                f->req = NULL, f->state = X_FREE;
                if (st != CT_OK) return pp_err(x, st, "send", f->peer);
            }
        } else if (f->state == X_WRITING) {
            if ((st = ct_event_query(f->ev, &done)) != CT_OK) return dev_err(x, st);
            if (done) {
                st = ct_event_wait_release(f->ev);
                f->ev = NULL, f->state = X_FREE;
                if (st != CT_OK) return dev_err(x, st);
            }
        }
    }
    return CT_OK;
}

/* Every transfer complete (the end of a step, or before freeing the staging). */
static ct_status xfer_drain(ct_exec *x) {
    ct_status st = xfer_pump(x, 1);
    for (int i = 0; i < x->nxf; i++) {
        xfer *f = &x->xf[i];
        ct_status s2 = CT_OK;
        if (f->state == X_SENT) {
            if ((s2 = ct_comm_wait(f->req)) != CT_OK) pp_err(x, s2, "send", f->peer);
            f->req = NULL;
        } else if (f->state == X_WRITING || f->state == X_READING) {
            if ((s2 = ct_event_wait_release(f->ev)) != CT_OK) dev_err(x, s2);
            f->ev = NULL;
        }
        f->state = X_FREE;
        if (st == CT_OK) st = s2;
    }
    return st;
}

/* A send: the device read enqueued behind the compute that made the tensor; posted later. */
static ct_status xfer_send(ct_exec *x, ct_view v, size_t n, int peer) {
    int k;
    ct_status st = xfer_take(x, n, &k);
    if (st != CT_OK) return st;
    xfer *f = &x->xf[k];
    f->bytes = n * sizeof(float), f->peer = peer, f->seq = x->xseq++;
    if ((st = ct_model_view_read_async(x->m, v, f->p, f->bytes, &f->ev)) != CT_OK)
        return fail_model(x, st);
    f->state = X_READING;
    if ((st = ct_device_flush(x->dev)) != CT_OK) return dev_err(x, st);
    return xfer_pump(x, x->timeline); /* timeline: posted now, so the send's time is its own */
}

/* A receive: every send reached is posted first (this worker is about to block); the message's
 * write to the device is enqueued and not waited for. *arrived: when the message was in. */
static ct_status xfer_recv(ct_exec *x, ct_view v, size_t n, int peer, double *arrived) {
    ct_status st;
    int k;
    ct_request *r = NULL;
    if ((st = xfer_pump(x, 1)) != CT_OK || (st = xfer_take(x, n, &k)) != CT_OK) return st;
    xfer *f = &x->xf[k];
    if ((st = ct_comm_irecv(x->pp, peer, f->p, n * sizeof(float), &r)) != CT_OK ||
        (st = ct_comm_wait(r)) != CT_OK)
        return pp_err(x, st, "receive", peer);
    *arrived = ct_time_now();
    if ((st = ct_model_view_write_async(x->m, v, f->p, n * sizeof(float), &f->ev)) != CT_OK)
        return fail_model(x, st);
    f->state = X_WRITING;
    if ((st = ct_device_flush(x->dev)) != CT_OK) return dev_err(x, st);
    return CT_OK;
}

/* A SEND_/RECV_ action: an activation (or its gradient) between neighbouring stages. */
static ct_status transfer(ct_exec *x, const ct_action *a, int slot, int rows, int T,
                          double *arrived) {
    ct_status st;
    size_t n = ct_model_act_floats(x->m, rows, T); /* sequence parallelism: this worker's rows */
    int N = x->nstages, lo, hi;
    ct_view v;
    *arrived = 0;
    switch (a->kind) {
    case CT_ACT_RECV_ACT:
        if ((st = ct_model_stage_input(x->m, slot, local_chunk(x, a->chunk), rows, T, &v)) != CT_OK)
            return fail_model(x, st);
        return xfer_recv(x, v, n, (a->chunk - 1) % N, arrived);
    case CT_ACT_SEND_ACT:
        ct_params_chunk(x->P, local_chunk(x, a->chunk), &lo, &hi);
        if ((st = ct_model_block_output(x->m, slot, hi - 1, &v)) != CT_OK) return fail_model(x, st);
        return xfer_send(x, v, n, (a->chunk + 1) % N);
    case CT_ACT_RECV_GRAD: return xfer_recv(x, ct_model_dres(x->m), n, (a->chunk + 1) % N, arrived);
    default: return xfer_send(x, ct_model_dres(x->m), n, (a->chunk - 1) % N); /* SEND_GRAD */
    }
}

/* The global gradient's sum of squares when the workers hold different slices (tensor
 * parallelism): the sum over the world of each worker's owned part (ct_optim_owned_sumsq),
 * which counts every parameter once, the pipeline's tied wte and ZeRO shards included. */
static ct_status owned_norm(ct_exec *x, double *ss) {
    double mine = 0;
    ct_status st = ct_optim_owned_sumsq(x->o, &mine);
    if (st != CT_OK) return CT_ERR(&x->err, st, "%s", ct_optim_errmsg(x->o));
    float fs = (float)mine;
    if (multi(x->world) && (st = ct_comm_allreduce(x->world, &fs, &fs, 1, CT_F32, CT_OP_SUM,
                                                   NULL)) != CT_OK)
        return CT_ERR(&x->err, st, "the gradient norm over the workers: %s",
                      ct_comm_errmsg(x->world));
    *ss = fs;
    return CT_OK;
}

/* The step's loss: the mean over micro-batches (the last stage has it), over DP; the same
 * value on every worker. Collective over the pipeline and DP groups. */
static ct_status step_loss(ct_exec *x, int M, double *out) {
    ct_status st;
    double sum = 0;
    for (int mb = 0; mb < M; mb++) sum += x->losses[mb];
    double loss = sum / M;
    if (x->nstages > 1) {
        float lf = (float)loss;
        if ((st = ct_comm_bcast(x->pp, &lf, 1, CT_F32, x->nstages - 1, NULL)) != CT_OK)
            return CT_ERR(&x->err, st, "the loss from the last stage: %s", ct_comm_errmsg(x->pp));
        loss = lf;
    }
    if (multi(x->dp)) {
        float lf = (float)loss;
        if ((st = ct_comm_allreduce(x->dp, &lf, &lf, 1, CT_F32, CT_OP_AVG, NULL)) != CT_OK)
            return CT_ERR(&x->err, st, "averaging the loss: %s", ct_comm_errmsg(x->dp));
        loss = lf;
    }
    *out = loss;
    return CT_OK;
}

/* Whether the global norm is the sum of owned parts over the world (workers holding different
 * slices: tensor parallelism, different experts; or a pipeline with experts, whose stages'
 * flat ranges put the experts before the tied wte); else each stage's range norm, summed over
 * the pipeline. */
static int owned_norm_needed(const ct_exec *x) {
    return x->tpsize > 1 || (x->experts && (x->epsize > 1 || x->nstages > 1));
}

/* A mixture of experts' routing over the step, from every worker (collective over the world):
 * the counts summed (each token's choices are counted by the worker holding its row, each block's
 * by its stage), the rows each worker's experts computed gathered, the auxiliary loss averaged
 * over the replicas of each block (DP, and TP) and summed over the pipeline's blocks. */
static ct_status moe_step_stats(ct_exec *x, int M, ct_step_result *out) {
    ct_moe_stats ms;
    ct_moe_stats_get(ct_model_moe(x->m), &ms);
    int L = ms.layers, E = ms.experts, W = x->world ? ct_comm_size(x->world) : 1;
    int me = x->world ? ct_comm_rank(x->world) : 0;
    size_t LE = (size_t)L * E, n = 2 * LE + (size_t)W;
    int32_t *c = x->moe_counts;
    for (size_t i = 0; i < LE; i++) c[i] = (int32_t)ms.routed[i], c[LE + i] = (int32_t)ms.kept[i];
    for (int w = 0; w < W; w++) c[2 * LE + (size_t)w] = w == me ? (int32_t)ms.rows : 0;
    float aux = (float)(ms.aux / (M > 0 ? M : 1));
    ct_status st = CT_OK;
    if (W > 1 && ((st = ct_comm_allreduce(x->world, c, c, n, CT_I32, CT_OP_SUM, NULL)) != CT_OK ||
                  (st = ct_comm_allreduce(x->world, &aux, &aux, 1, CT_F32, CT_OP_SUM, NULL)) !=
                      CT_OK))
        return CT_ERR(&x->err, st, "the experts' routing counts over the workers: %s",
                      ct_comm_errmsg(x->world));
    if (!out) return CT_OK;
    out->aux_loss = aux / (double)(x->dpsize * x->tpsize);
    double routed = 0, kept = 0, worst = 0;
    for (int l = 0; l < L; l++) {
        double sum = 0, mx = 0;
        for (int e = 0; e < E; e++) {
            double r = c[(size_t)l * E + e];
            sum += r, mx = r > mx ? r : mx;
            kept += c[LE + (size_t)l * E + e];
        }
        routed += sum;
        if (sum > 0 && mx / (sum / E) > worst) worst = mx / (sum / E);
    }
    out->drop_frac = routed > 0 ? 1.0 - kept / routed : 0;
    out->max_load = worst;
    return CT_OK;
}

int ct_exec_moe_get(const ct_exec *x, ct_exec_moe *out) {
    memset(out, 0, sizeof *out);
    if (!x->experts) return 0;
    const ct_gpt_config *c = ct_params_config(x->P);
    size_t LE = (size_t)c->layers * c->experts;
    out->layers = c->layers, out->experts = c->experts;
    out->workers = x->world ? ct_comm_size(x->world) : 1;
    out->routed = x->moe_counts, out->kept = x->moe_counts + LE, out->rows = x->moe_counts + 2 * LE;
    return 1;
}

/* ------------------------------------------------------------------ one step */

static int is_compute(ct_act_kind k) {
    return k == CT_ACT_FWD || k == CT_ACT_BWD || k == CT_ACT_BWD_INPUT || k == CT_ACT_BWD_WEIGHT;
}

static const char *act_span_name(ct_act_kind k) {
    switch (k) {
    case CT_ACT_FWD: return "forward";
    case CT_ACT_BWD: return "backward";
    case CT_ACT_BWD_INPUT: return "backward (input)";
    case CT_ACT_BWD_WEIGHT: return "backward (weight)";
    case CT_ACT_SEND_ACT: return "send activation";
    case CT_ACT_RECV_ACT: return "recv activation";
    case CT_ACT_SEND_GRAD: return "send gradient";
    default: return "recv gradient";
    }
}

ct_status ct_exec_step(ct_exec *x, const ct_schedule *s, const int *tokens, const int *targets,
                       int rows, int T, const ct_adamw_hp *hp, int t, ct_step_result *out) {
    ct_status st = CT_OK;
    double t_step = ct_time_now(), t_act;
    ct_tp_stats ts0;
    ct_tp_stats_get(ct_model_tp(x->m), &ts0);
    if (ct_model_moe(x->m)) ct_moe_stats_reset(ct_model_moe(x->m));
    if (out) out->aux_loss = out->drop_frac = out->max_load = 0;
    int virt = s && s->virt > 1 ? s->virt : 1;
    if (!s || x->stage >= s->stages || s->stages != x->nstages || virt != x->nchunks)
        return CT_ERR(&x->err, CT_ERR_ARG,
                      "executor: a schedule for %d stages of %d chunks on a layout of %d stages "
                      "holding %d chunks each (this worker is stage %d)",
                      s ? s->stages : 0, virt, x->nstages, x->nchunks, x->stage);
    int M = s->micro, n = s->n[x->stage];
    const ct_action *list = s->list[x->stage];
    if (M > x->nlosses) {
        double *p = ct_realloc(x->losses, sizeof(double) * (size_t)M);
        if (!p) return CT_ERR(&x->err, CT_ERR_NOMEM, "executor: no memory");
        x->losses = p, x->nlosses = M;
    }
    /* the last action writing each chunk's gradients (its gradients become final there): its
     * last BWD or BWD_WEIGHT; the last chunk's last BWD_INPUT finishes the head's */
    int nch = s->stages * virt, last_bwd[CT_MAX_CHUNKS * 64], last_bin = -1;
    if (nch > (int)(sizeof last_bwd / sizeof last_bwd[0]))
        return CT_ERR(&x->err, CT_ERR_ARG, "executor: %d model chunks is too many", nch);
    for (int c = 0; c < nch; c++) last_bwd[c] = -1;
    for (int i = 0; i < n; i++) {
        if (list[i].kind == CT_ACT_BWD || list[i].kind == CT_ACT_BWD_WEIGHT)
            last_bwd[list[i].chunk] = i;
        if (list[i].kind == CT_ACT_BWD_INPUT) {
            if (!ct_model_plan_of(x->m)->split_backward)
                return CT_ERR(&x->err, CT_ERR_ARG,
                              "executor: the %s schedule splits the backward, but the model was "
                              "planned without split_backward (ct_model_plan)",
                              ct_sched_name(s->kind));
            if (last_chunk(x, s, list[i].chunk)) last_bin = i;
        }
    }
    if (ct_params_zero_stage(x->P) >= 2 && x->nstages > 1 && (virt > 1 || last_bin >= 0))
        return CT_ERR(&x->err, CT_ERR_UNSUPPORTED,
                      "executor: ZeRO-%d with the %s schedule: its gradient buckets leave after "
                      "every backward through a two-block working buffer, which the interleaved "
                      "and split-backward orders would overwrite before they left",
                      ct_params_zero_stage(x->P), ct_sched_name(s->kind));
    for (int s2 = 0; s2 < x->nslots; s2++) slot_free(x, s2);
    if ((st = ct_model_zero_grad(x->m)) != CT_OK) return fail_model(x, st);
    /* the timeline: every stage starts together */
    double tl_compute = 0, tl_end = 0;
    double tl_ms[CT_ACT__COUNT] = {0};
    long tl_n[CT_ACT__COUNT] = {0};
    if (x->timeline) {
        if (n > x->tl_cap) {
            double *d = ct_realloc(x->tl_dur, sizeof(double) * (size_t)n);
            if (!d) return CT_ERR(&x->err, CT_ERR_NOMEM, "executor: no memory");
            x->tl_dur = d, x->tl_cap = n;
        }
        memset(x->tl_dur, 0, sizeof(double) * (size_t)n);
        x->tl_n = n;
        if ((st = ct_device_finish(x->dev)) != CT_OK) return dev_err(x, st);
        if (multi(x->pp) && (st = ct_comm_barrier(x->pp, NULL)) != CT_OK)
            return CT_ERR(&x->err, st, "timeline: %s", ct_comm_errmsg(x->pp));
        t_step = ct_time_now();
    }
    double sumsq = 0, compute_t = 0, t_comp0 = t_step, loss = 0;
    int have_loss = 0, skipped = 0;
    size_t BT = (size_t)rows * T;
    for (int i = 0; i < n && st == CT_OK; i++) {
        const ct_action *a = &list[i];
        int slot = -1;
        double arrived = 0;
        t_act = ct_time_now();
        ct_trace_set_mb(x->tr, a->mb);
        switch (a->kind) {
        case CT_ACT_FWD:
            if ((st = slot_get(x, a->mb, a->chunk, 1, &slot)) != CT_OK) break;
            x->losses[a->mb] = 0;
            st = forward_chunk(x, s, slot, a->mb, a->chunk, tokens + (size_t)a->mb * BT,
                               targets + (size_t)a->mb * BT, rows, T, &x->losses[a->mb]);
            break;
        case CT_ACT_BWD:
        case CT_ACT_BWD_INPUT:
        case CT_ACT_BWD_WEIGHT: {
            if ((st = slot_get(x, a->mb, a->chunk, 0, &slot)) != CT_OK) break;
            int final = a->kind == CT_ACT_BWD_INPUT ? i == last_bin : i == last_bwd[a->chunk];
            st = backward_chunk(x, s, slot, a->chunk, a->kind, final,
                                t == x->poison_t ? INFINITY : 1.0f / (float)M);
            if (a->kind != CT_ACT_BWD_INPUT) slot_free(x, slot); /* its activations are done */
            break;
        }
        case CT_ACT_RECV_ACT:
            if ((st = slot_get(x, a->mb, a->chunk, 1, &slot)) == CT_OK)
                st = transfer(x, a, slot, rows, T, &arrived);
            break;
        case CT_ACT_SEND_ACT:
            if ((st = slot_get(x, a->mb, a->chunk, 0, &slot)) == CT_OK)
                st = transfer(x, a, slot, rows, T, &arrived);
            break;
        case CT_ACT_RECV_GRAD:
        case CT_ACT_SEND_GRAD: st = transfer(x, a, 0, rows, T, &arrived); break;
        case CT_ACT_GRAD_SYNC: {
            /* compute: until this worker's backward is done on its device */
            if ((st = xfer_pump(x, 1)) != CT_OK) break; /* nothing this worker owes waits */
            if ((st = ct_device_finish(x->dev)) != CT_OK) {
                dev_err(x, st);
                break;
            }
            double t1 = ct_time_now();
            compute_t += t1 - t_comp0;
            if (x->g) st = ct_grads_finish(x->g, &sumsq);
            if (st != CT_OK) CT_ERR(&x->err, st, "%s", ct_grads_errmsg(x->g));
            span(x, "gradient sync", "comm", t1, -1);
            break;
        }
        case CT_ACT_OPT_STEP: {
            /* the global norm: each stage's part (the last leaves out its wte copy), summed
             * over the pipeline; ZeRO-2's from the shards (summed over DP by the reducer) */
            float norm = 0, given = 0;
            int z2 = ct_params_grad_shard(x->P) != NULL, have = z2;
            double ss = sumsq;
            if (owned_norm_needed(x)) {
                /* the workers hold different slices (tensor parallelism, different experts, or
                 * a pipeline's stages with the experts before the tied wte): every parameter
                 * counted once (its owner) over the whole world, one all-reduce, so every
                 * worker clips alike */
                if ((st = owned_norm(x, &ss)) != CT_OK) break;
                have = 1;
            } else if (!z2 && x->nstages > 1) {
                float part = 0;
                st = ct_optim_range_norm(x->o, x->norm_lo, ct_params_local_len(x->P), &part);
                if (st != CT_OK) {
                    CT_ERR(&x->err, st, "%s", ct_optim_errmsg(x->o));
                    break;
                }
                ss = (double)part * part, have = 1;
            }
            if (have && x->nstages > 1 && !owned_norm_needed(x)) {
                float fs = (float)ss;
                if ((st = ct_comm_allreduce(x->pp, &fs, &fs, 1, CT_F32, CT_OP_SUM, NULL)) != CT_OK) {
                    CT_ERR(&x->err, st, "the gradient norm over the pipeline: %s",
                           ct_comm_errmsg(x->pp));
                    break;
                }
                ss = fs;
            }
            given = sqrtf((float)ss);
            /* the global norm and the step's loss, the same on every worker: a step where
             * either is not finite changes nothing, on every worker alike */
            if ((st = step_loss(x, M, &loss)) != CT_OK) break;
            have_loss = 1;
            if ((st = ct_optim_norm(x->o, have ? &given : NULL, &norm)) != CT_OK) {
                CT_ERR(&x->err, st, "%s", ct_optim_errmsg(x->o));
                break;
            }
            skipped = !isfinite(norm) || !isfinite(loss);
            if (!skipped && (st = ct_optim_apply(x->o, hp, t)) != CT_OK) {
                CT_ERR(&x->err, st, "%s", ct_optim_errmsg(x->o));
                break;
            }
            if ((st = ct_device_finish(x->dev)) != CT_OK) {
                dev_err(x, st);
                break;
            }
            double t1 = ct_time_now();
            if (!skipped && (st = ct_zero_after_step(x->z)) != CT_OK)
                CT_ERR(&x->err, st, "%s", ct_zero_errmsg(x->z));
            double t2 = ct_time_now();
            x->times.optimizer_ms += 1e3 * (t1 - t_act);
            x->times.exposed_ms += 1e3 * (t2 - t1);
            x->times.busy_ms += 1e3 * (t2 - t1);
            if (out) out->grad_norm = norm;
            span(x, "optimizer", "optimizer", t_act, -1);
            break;
        }
        default:
            st = CT_ERR(&x->err, CT_ERR_UNSUPPORTED, "executor: unknown action kind %d",
                        (int)a->kind);
        }
        if (st != CT_OK) break;
        if (a->kind < CT_ACT_GRAD_SYNC) {
            if (syncing(x) && (st = ct_device_finish(x->dev)) != CT_OK) {
                dev_err(x, st);
                break;
            }
            double t1 = ct_time_now();
            span(x, act_span_name(a->kind), is_compute(a->kind) ? "compute" : "comm", t_act, a->mb);
            if (is_compute(a->kind)) tl_compute += t1 - t_act, tl_end = t1;
            double dt = t1 - (a->kind == CT_ACT_RECV_ACT || a->kind == CT_ACT_RECV_GRAD ? arrived
                                                                                        : t_act);
            tl_ms[a->kind] += dt;
            tl_n[a->kind]++;
            if (x->timeline) x->tl_dur[i] = 1e3 * dt;
            if ((st = xfer_pump(x, 0)) != CT_OK) break;
        }
    }
    if (st == CT_OK) st = xfer_drain(x);
    if (st != CT_OK) {
        x->failed = 1;
        if (!x->err.msg[0]) CT_ERR(&x->err, st, "%s", ct_model_errmsg(x->m));
        return st;
    }
    if ((st = ct_device_finish(x->dev)) != CT_OK) return dev_err(x, st);
    if (!have_loss && (st = step_loss(x, M, &loss)) != CT_OK) return st;
    if (out) out->loss = loss, out->skipped = skipped;
    if (x->experts && (st = moe_step_stats(x, M, out)) != CT_OK) return st;
    if (x->timeline) { /* the pipeline's span: the longest stage's */
        float span_ms = (float)(1e3 * (tl_end - t_step)), mk = span_ms;
        if (multi(x->pp) &&
            (st = ct_comm_allreduce(x->pp, &mk, &mk, 1, CT_F32, CT_OP_MAX, NULL)) != CT_OK)
            return CT_ERR(&x->err, st, "timeline: %s", ct_comm_errmsg(x->pp));
        x->tl.steps++;
        x->tl_last_compute = 1e3 * tl_compute, x->tl_last_makespan = mk;
        x->tl.compute_ms += 1e3 * tl_compute;
        x->tl.span_ms += span_ms;
        x->tl.makespan_ms += mk;
        for (int k = 0; k < CT_ACT__COUNT; k++) x->tl.ms[k] += 1e3 * tl_ms[k], x->tl.count[k] += tl_n[k];
    }
    if (x->g) {
        ct_grads_times gt;
        ct_grads_times_get(x->g, &gt);
        ct_grads_times_reset(x->g);
        x->times.exposed_ms += gt.exposed_ms;
        x->times.busy_ms += gt.busy_ms;
    }
    double gms = ct_zero_gather_ms(x->z);
    ct_zero_times_reset(x->z);
    x->times.gather_ms += gms;
    x->times.exposed_ms += gms;
    /* TP's collectives ran inside forward and backward: the part not hidden behind a
     * weight-gradient GEMM is exposed communication, not compute */
    ct_tp_stats ts1;
    ct_tp_stats_get(ct_model_tp(x->m), &ts1);
    double tp_comm = ts1.comm_ms - ts0.comm_ms, tp_over = ts1.overlap_ms - ts0.overlap_ms;
    x->times.tp_comm_ms += tp_comm;
    x->times.tp_overlap_ms += tp_over;
    x->times.compute_ms += 1e3 * compute_t - gms - (tp_comm - tp_over);
    if (ct_trace_on(x->tr)) ct_trace_event(x->tr, CT_TRACE_MAIN, "step", "step", t_step, -1);
    return CT_OK;
}

void ct_exec_set_timeline(ct_exec *x, int on) { x->timeline = on != 0; }
void ct_exec_timeline_get(const ct_exec *x, ct_exec_timeline *out) { *out = x->tl; }
void ct_exec_timeline_reset(ct_exec *x) { memset(&x->tl, 0, sizeof x->tl); }
void ct_exec_timeline_last(const ct_exec *x, const double **dur_ms, int *n, double *compute_ms,
                           double *makespan_ms) {
    *dur_ms = x->tl_dur, *n = x->tl.steps ? x->tl_n : 0;
    *compute_ms = x->tl_last_compute, *makespan_ms = x->tl_last_makespan;
}

/* ------------------------------------------------------------------ forward only */

ct_status ct_exec_forward(ct_exec *x, const int *tokens, const int *targets, int rows, int T,
                          float *loss, float *logits_last) {
    ct_status st = CT_OK;
    double lv = NAN;
    int N = x->nstages, C = N * x->nchunks, last = x->stage == N - 1, TP = x->tpsize;
    size_t Vp = (size_t)ct_params_config(x->P)->padded_vocab, Vl = Vp / (size_t)TP;
    for (int s = 0; s < x->nslots; s++) slot_free(x, s);
    ct_schedule one = {CT_SCHED_TRIVIAL, N, 1, x->nchunks, NULL, NULL};
    /* sequence parallelism splits the tokens over the TP group: a generation context of any
     * length is padded at its end to a multiple of tp (the model is causal, so the positions
     * before the padding do not see it) */
    int Tr = T;
    int *padded = NULL;
    if (!targets && ct_model_plan_of(x->m)->sp && TP > 1 && T % TP) {
        Tr = (T + TP - 1) / TP * TP;
        padded = ct_calloc((size_t)rows * Tr, sizeof(int));
        if (!padded) return CT_ERR(&x->err, CT_ERR_NOMEM, "executor: no memory");
        for (int b = 0; b < rows; b++)
            memcpy(padded + (size_t)b * Tr, tokens + (size_t)b * T, sizeof(int) * (size_t)T);
        tokens = padded;
    }
    size_t act = ct_model_act_floats(x->m, rows, Tr);
    /* the chunks in model order, each on its stage: receive, forward, send (one slot suffices:
     * nothing is kept for a backward) */
    for (int c = x->stage; c < C && st == CT_OK; c += N) {
        double arrived;
        ct_view v;
        if (c > 0) {
            st = ct_model_stage_input(x->m, 0, local_chunk(x, c), rows, Tr, &v);
            if (st != CT_OK) {
                free(padded);
                return fail_model(x, st);
            }
            if ((st = xfer_recv(x, v, act, (c - 1) % N, &arrived)) != CT_OK) break;
        }
        st = forward_chunk(x, &one, 0, 0, c, tokens, targets, rows, Tr,
                           targets && c == C - 1 ? &lv : NULL);
        if (st == CT_OK && c < C - 1) {
            int lo, hi;
            ct_params_chunk(x->P, local_chunk(x, c), &lo, &hi);
            if ((st = ct_model_block_output(x->m, 0, hi - 1, &v)) != CT_OK) {
                free(padded);
                return fail_model(x, st);
            }
            st = xfer_send(x, v, act, (c + 1) % N);
        }
    }
    free(padded);
    if (st == CT_OK) st = xfer_drain(x);
    if (st != CT_OK) {
        x->failed = 1;
        return st;
    }
    if (logits_last) {
        if (last) {
            /* this worker's Vp/tp columns of row 0's position T-1, gathered over the TP group */
            size_t n = (size_t)rows * Tr * Vl;
            float *all = ct_malloc(n * sizeof(float));
            if (!all) return CT_ERR(&x->err, CT_ERR_NOMEM, "executor: no memory for logits");
            st = ct_model_slot_logits(x->m, 0, all, n);
            if (st == CT_OK && TP > 1) {
                st = ct_comm_allgather(x->tp, all + (size_t)(T - 1) * Vl, logits_last, Vl, CT_F32,
                                       NULL);
                if (st != CT_OK)
                    CT_ERR(&x->err, st, "gathering the logits over the TP group: %s",
                           ct_comm_errmsg(x->tp));
            } else if (st == CT_OK) {
                memcpy(logits_last, all + (size_t)(T - 1) * Vp, Vp * sizeof(float));
            } else {
                fail_model(x, st);
            }
            free(all);
            if (st != CT_OK) return st;
        }
        if (N > 1 && (st = ct_comm_bcast(x->pp, logits_last, Vp, CT_F32, N - 1, NULL)) != CT_OK)
            return CT_ERR(&x->err, st, "the logits from the last stage: %s", ct_comm_errmsg(x->pp));
    }
    if (loss) {
        float lf = (float)lv;
        if (N > 1 && (st = ct_comm_bcast(x->pp, &lf, 1, CT_F32, N - 1, NULL)) != CT_OK)
            return CT_ERR(&x->err, st, "the loss from the last stage: %s", ct_comm_errmsg(x->pp));
        *loss = lf;
    }
    return CT_OK;
}

ct_status ct_exec_gather_state(ct_exec *x, float *params, float *adam_m, float *adam_v) {
    return ct_state_gather(x->m, x->world, params, adam_m, adam_v, &x->err);
}

ct_status ct_exec_mem_gather(ct_exec *x, uint64_t *out) {
    size_t host = (x->g ? ct_grads_host_bytes(x->g) : 0) + ct_zero_host_bytes(x->z) +
                  ct_tp_host_bytes(ct_model_tp(x->m)) + ct_moe_host_bytes(ct_model_moe(x->m));
    return ct_state_mem_gather(x->dev, x->world, host, out, &x->err);
}

ct_status ct_exec_dp_average(ct_exec *x, float *v) {
    if (!multi(x->dp)) return CT_OK;
    ct_status st = ct_comm_allreduce(x->dp, v, v, 1, CT_F32, CT_OP_AVG, NULL);
    if (st != CT_OK) CT_ERR(&x->err, st, "averaging over the DP group: %s", ct_comm_errmsg(x->dp));
    return st;
}

void ct_exec_times_get(const ct_exec *x, ct_exec_times *out) { *out = x->times; }
void ct_exec_times_reset(ct_exec *x) { memset(&x->times, 0, sizeof x->times); }
void ct_exec_test_poison(ct_exec *x, int t) { x->poison_t = t; }

/* This worker's first non-finite (tensor, layer) as one number in table order (lower = earlier),
 * or INT32_MAX. */
static ct_status first_key(ct_exec *x, int grads, int32_t *key) {
    int tensor = -1, layer = -1;
    ct_status st = ct_optim_find_nonfinite(x->o, grads, &tensor, &layer);
    if (st != CT_OK) return CT_ERR(&x->err, st, "%s", ct_optim_errmsg(x->o));
    *key = tensor < 0 ? INT32_MAX : tensor * 65536 + (layer < 0 ? 0 : layer);
    return CT_OK;
}

ct_status ct_exec_nonfinite_report(ct_exec *x, char *buf, size_t len) {
    ct_status st;
    int32_t key[2]; /* the earliest over every worker: max of the negated keys */
    for (int g = 0; g < 2; g++) {
        if ((st = first_key(x, g == 0, &key[g])) != CT_OK) return st;
        key[g] = -key[g];
    }
    if (multi(x->world) &&
        (st = ct_comm_allreduce(x->world, key, key, 2, CT_I32, CT_OP_MAX, NULL)) != CT_OK)
        return CT_ERR(&x->err, st, "finding the first non-finite tensor: %s",
                      ct_comm_errmsg(x->world));
    for (int g = 0; g < 2; g++) {
        int32_t k = -key[g];
        if (k == INT32_MAX) continue;
        int tensor = k / 65536, layer = k % 65536;
        int block = tensor >= CT_GPT_ln1w && tensor <= CT_GPT_fcprojb;
        char where[48] = "";
        if (block) snprintf(where, sizeof where, " in layer %d", layer);
        snprintf(buf, len, "the first tensor that is not finite is the %s of %s%s",
                 g == 0 ? "gradient" : "parameter", ct_gpt_tensor_name(tensor), where);
        return CT_OK;
    }
    snprintf(buf, len, "every gradient and parameter is finite: only the loss is not");
    return CT_OK;
}
