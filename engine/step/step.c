/* step.c - the step executor: one worker runs its stage's action list (parallel/'s schedules)
 * for one optimizer step. FWD/BWD (or its halves BWD_INPUT, BWD_WEIGHT) call the model's entry
 * points on an activation slot; the executor gathers ZeRO-3 blocks before the model uses them
 * and, after the last action that writes a range of gradients, tells the gradient reducer that
 * range is final; SEND/RECV move activations and their gradients between pipeline stages;
 * GRAD_SYNC waits for the reductions; OPT_STEP runs the optimizer (with the global norm summed
 * over the pipeline) and ZeRO's all-gather. A single device is the 1x1x1 grid (grid NULL or all
 * groups of one) with the trivial list: nothing is reduced. The pipeline's transfers are
 * transfer.c, the step's norm and loss norm.c, the gradient ranges ranges.c. */
#include "exec_impl.h"

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
void ct__exec_slots_free(ct_exec *x) {
    for (int s = 0; s < x->nslots; s++) slot_free(x, s);
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

/* ZeRO-2 and 3 block inside a step (the previous micro-step's buckets, parameter gathers) on
 * their DP group; every send this worker has reached is posted before, so no peer waits on it. */
static ct_status before_zero_wait(ct_exec *x, int stage) {
    return ct_params_zero_stage(x->P) >= stage && x->nxf ? ct__xfer_pump(x, 1) : CT_OK;
}

/* Expert parallelism blocks inside the forward and backward (the MoE layer's all-to-alls over the
 * EP group): every send this worker has reached is posted first. */
static ct_status before_ep_wait(ct_exec *x) {
    return x->epsize > 1 && x->nxf ? ct__xfer_pump(x, 1) : CT_OK;
}

/* ZeRO-3: wte in the working buffer before the embedding or the head reads it. */
static ct_status need_wte(ct_exec *x) {
    ct_status st = ct_zero_need_wte(x->z);
    return st == CT_OK ? st : CT_ERR(&x->err, st, "%s", ct_zero_errmsg(x->z));
}

ct_status ct__exec_forward_chunk(ct_exec *x, const ct_schedule *s, int slot, int chunk,
                                 const int *tokens, const int *targets, int rows, int T,
                                 double *loss) {
    ct_status st = CT_OK;
    int lc = local_chunk(x, chunk), lo, hi;
    ct_params_chunk(x->P, lc, &lo, &hi);
    if ((st = before_zero_wait(x, 3)) != CT_OK || (st = before_ep_wait(x)) != CT_OK) return st;
    if ((st = ct_zero_begin_pass(x->z)) != CT_OK)
        return CT_ERR(&x->err, st, "%s", ct_zero_errmsg(x->z));
    if (chunk == 0) {
        if ((st = need_wte(x)) != CT_OK) return st;
        if ((st = ct_model_embed_forward(x->m, slot, tokens, rows, T)) != CT_OK)
            return fail_model(x, st);
    }
    for (int l = lo; l < hi; l++) {
        if ((st = ct_zero_need_block(x->z, l, l + 1 < hi ? l + 1 : -1)) != CT_OK)
            return CT_ERR(&x->err, st, "%s", ct_zero_errmsg(x->z));
        if ((st = ct_model_block_forward(x->m, slot, l)) != CT_OK) return fail_model(x, st);
    }
    if (last_chunk(x, s, chunk)) {
        float lv = NAN;
        if ((st = need_wte(x)) != CT_OK) return st;
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
static ct_status grads_ready(ct_exec *x, size_t from, size_t to) {
    ct_status st = x->g ? ct_grads_ready(x->g, from, to) : CT_OK;
    return st == CT_OK ? st : sub_fail(x, st, "gradients", ct_grads_errmsg(x->g));
}

/* Backward of one chunk: the whole backward (BWD), its input half (BWD_INPUT: the head's and
 * the embedding's gradients too, which nothing defers) or its weight half (BWD_WEIGHT: the
 * blocks' parameter gradients). `final`: no later action of this step writes the gradients this
 * one writes (the chunk's last BWD or BWD_WEIGHT; for BWD_INPUT, the last chunk's last one, which
 * finishes the head's), so the ranges it finishes go to the reducer as it goes (every range below
 * the chunk once its lowest local chunk is done: the embeddings, or the last stage's tied wte).
 * Under ZeRO-2 every action's pieces leave as it writes them (grads.c). */
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
        if ((st = need_wte(x)) != CT_OK) return st;
        if ((st = ct_model_head_backward(x->m, slot, scale)) != CT_OK) return fail_model(x, st);
        size_t a, b;
        ct_params_lnf_range(x->P, &a, &b);
        if ((st = grads_ready(x, a, b)) != CT_OK) return st;
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
            (st = grads_ready(x, ct_params_layer_begin(x->P, l), ct_params_layer_end(x->P, l))) !=
                CT_OK)
            return st;
    }
    if (kind != CT_ACT_BWD_WEIGHT && chunk == 0 &&
        (st = ct_model_embed_backward(x->m, slot)) != CT_OK)
        return fail_model(x, st);
    /* the embeddings (written by a BWD_INPUT before) leave with the chunk's weight half */
    if (kind != CT_ACT_BWD_INPUT && lc == 0 &&
        (st = grads_ready(x, 0, ct_params_layer_begin(x->P, 0))) != CT_OK)
        return st;
    return CT_OK;
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

/* GRAD_SYNC: the reductions this worker started, waited for; *sumsq: the reduced gradient's
 * sum of squares (the reducer's). Compute time runs from *t_comp0 until the device is done with
 * this worker's backward. */
static ct_status grad_sync(ct_exec *x, double *t_comp0, double *compute_t, double *sumsq) {
    ct_status st;
    if ((st = ct__xfer_pump(x, 1)) != CT_OK) return st; /* nothing this worker owes waits */
    if ((st = ct_device_finish(x->dev)) != CT_OK) return dev_err(x, st);
    double t1 = ct_time_now();
    *compute_t += t1 - *t_comp0;
    if (x->g && (st = ct_grads_finish(x->g, sumsq)) != CT_OK)
        return CT_ERR(&x->err, st, "%s", ct_grads_errmsg(x->g));
    span(x, "gradient sync", "comm", t1, -1);
    return CT_OK;
}

/* OPT_STEP: the global norm and the step's loss, the same on every worker (norm.c); a step
 * where either is not finite changes nothing, on every worker alike; else the optimizer, then
 * ZeRO's all-gather of the updated parameters. */
static ct_status opt_step(ct_exec *x, int M, const ct_adamw_hp *hp, int t, double sumsq,
                          double t_act, double *loss, int *skipped, ct_step_result *out) {
    ct_status st;
    float norm = 0, given = 0;
    int have = 0;
    if ((st = ct__exec_global_norm(x, sumsq, &given, &have)) != CT_OK ||
        (st = ct__exec_step_loss(x, M, loss)) != CT_OK)
        return st;
    if ((st = ct_optim_norm(x->o, have ? &given : NULL, &norm)) != CT_OK)
        return CT_ERR(&x->err, st, "%s", ct_optim_errmsg(x->o));
    *skipped = !isfinite(norm) || !isfinite(*loss);
    if (!*skipped && (st = ct_optim_apply(x->o, hp, t)) != CT_OK)
        return CT_ERR(&x->err, st, "%s", ct_optim_errmsg(x->o));
    if ((st = ct_device_finish(x->dev)) != CT_OK) return dev_err(x, st);
    double t1 = ct_time_now();
    if (!*skipped && (st = ct_zero_after_step(x->z)) != CT_OK)
        CT_ERR(&x->err, st, "%s", ct_zero_errmsg(x->z));
    /* a bf16 model's working copy, from the updated master (after ZeRO's gather) */
    if (st == CT_OK && !*skipped && (st = ct_model_refresh_working_at(x->m, (uint64_t)t)) != CT_OK)
        CT_ERR(&x->err, st, "%s", ct_model_errmsg(x->m));
    double t2 = ct_time_now();
    x->times.optimizer_ms += 1e3 * (t1 - t_act);
    x->times.exposed_ms += 1e3 * (t2 - t1);
    x->times.busy_ms += 1e3 * (t2 - t1);
    if (out) out->grad_norm = norm;
    span(x, "optimizer", "optimizer", t_act, -1);
    return st;
}

/* One step's running state: the schedule's list for this stage, what the actions accumulate. */
typedef struct step_run {
    const ct_schedule *s;
    const ct_action *list;
    int M, n;
    /* the last action writing each chunk's gradients (its gradients become final there): its
     * last BWD or BWD_WEIGHT; the last chunk's last BWD_INPUT finishes the head's */
    int last_bwd[CT_MAX_CHUNKS * 64], last_bin;
    const int *tokens, *targets;
    int rows, T;
    const ct_adamw_hp *hp;
    int t;
    float scale; /* each micro-batch's share of the objective */
    ct_step_result *out;
    double t_step, t_comp0, compute_t, sumsq, loss;
    int have_loss, skipped;
    double tl_compute, tl_end, tl_ms[CT_ACT__COUNT]; /* the timeline's sums */
    long tl_n[CT_ACT__COUNT];
    ct_tp_stats ts0;
} step_run;

/* The schedule checked against the layout and the model's plan, the final actions found, the
 * gradients zeroed, the timeline started (every stage together). */
static ct_status step_begin(ct_exec *x, step_run *r) {
    ct_status st;
    const ct_schedule *s = r->s;
    int virt = s && s->virt > 1 ? s->virt : 1;
    if (!s || x->stage >= s->stages || s->stages != x->nstages || virt != x->nchunks)
        return CT_ERR(&x->err, CT_ERR_ARG,
                      "executor: a schedule for %d stages of %d chunks on a layout of %d stages "
                      "holding %d chunks each (this worker is stage %d)",
                      s ? s->stages : 0, virt, x->nstages, x->nchunks, x->stage);
    r->M = s->micro, r->n = s->n[x->stage], r->list = s->list[x->stage];
    if (r->M > x->nlosses) {
        double *p = ct_realloc(x->losses, sizeof(double) * (size_t)r->M);
        if (!p) return CT_ERR(&x->err, CT_ERR_NOMEM, "executor: no memory");
        x->losses = p, x->nlosses = r->M;
    }
    int nch = s->stages * virt;
    r->last_bin = -1;
    if (nch > (int)(sizeof r->last_bwd / sizeof r->last_bwd[0]))
        return CT_ERR(&x->err, CT_ERR_ARG, "executor: %d model chunks is too many", nch);
    for (int c = 0; c < nch; c++) r->last_bwd[c] = -1;
    for (int i = 0; i < r->n; i++) {
        const ct_action *a = &r->list[i];
        if (a->kind == CT_ACT_BWD || a->kind == CT_ACT_BWD_WEIGHT) r->last_bwd[a->chunk] = i;
        if (a->kind == CT_ACT_BWD_INPUT) {
            if (!ct_model_plan_of(x->m)->split_backward)
                return CT_ERR(&x->err, CT_ERR_ARG,
                              "executor: the %s schedule splits the backward, but the model was "
                              "planned without split_backward (ct_model_plan)",
                              ct_sched_name(s->kind));
            if (last_chunk(x, s, a->chunk)) r->last_bin = i;
        }
    }
    ct__exec_slots_free(x);
    if ((st = ct_model_zero_grad(x->m)) != CT_OK) return fail_model(x, st);
    if (x->timeline) {
        if (r->n > x->tl_cap) {
            double *d = ct_realloc(x->tl_dur, sizeof(double) * (size_t)r->n);
            if (!d) return CT_ERR(&x->err, CT_ERR_NOMEM, "executor: no memory");
            x->tl_dur = d, x->tl_cap = r->n;
        }
        memset(x->tl_dur, 0, sizeof(double) * (size_t)r->n);
        x->tl_n = r->n;
        if ((st = ct_device_finish(x->dev)) != CT_OK) return dev_err(x, st);
        if (multi(x->pp) && (st = ct_comm_barrier(x->pp, NULL)) != CT_OK)
            return CT_ERR(&x->err, st, "timeline: %s", ct_comm_errmsg(x->pp));
        r->t_step = ct_time_now();
    }
    r->t_comp0 = r->t_step;
    /* a test may poison one step's backward with an infinite scale (ct_engine_step_test.h) */
    r->scale = r->t == x->poison_t ? INFINITY : 1.0f / (float)r->M;
    return CT_OK;
}

/* Action i of the list. *arrived: when a received message was in. */
static ct_status run_action(ct_exec *x, step_run *r, int i, double t_act, double *arrived) {
    ct_status st;
    const ct_action *a = &r->list[i];
    size_t BT = (size_t)r->rows * r->T;
    int slot = -1;
    switch (a->kind) {
    case CT_ACT_FWD:
        if ((st = slot_get(x, a->mb, a->chunk, 1, &slot)) != CT_OK) return st;
        x->losses[a->mb] = 0;
        return ct__exec_forward_chunk(x, r->s, slot, a->chunk, r->tokens + (size_t)a->mb * BT,
                                      r->targets + (size_t)a->mb * BT, r->rows, r->T,
                                      &x->losses[a->mb]);
    case CT_ACT_BWD:
    case CT_ACT_BWD_INPUT:
    case CT_ACT_BWD_WEIGHT: {
        if ((st = slot_get(x, a->mb, a->chunk, 0, &slot)) != CT_OK) return st;
        int final = a->kind == CT_ACT_BWD_INPUT ? i == r->last_bin : i == r->last_bwd[a->chunk];
        st = backward_chunk(x, r->s, slot, a->chunk, a->kind, final, r->scale);
        if (a->kind != CT_ACT_BWD_INPUT) slot_free(x, slot); /* its activations are done */
        return st;
    }
    case CT_ACT_RECV_ACT:
    case CT_ACT_SEND_ACT:
        if ((st = slot_get(x, a->mb, a->chunk, a->kind == CT_ACT_RECV_ACT, &slot)) != CT_OK)
            return st;
        return ct__exec_transfer(x, a, slot, r->rows, r->T, arrived);
    case CT_ACT_RECV_GRAD:
    case CT_ACT_SEND_GRAD: return ct__exec_transfer(x, a, 0, r->rows, r->T, arrived);
    case CT_ACT_GRAD_SYNC: return grad_sync(x, &r->t_comp0, &r->compute_t, &r->sumsq);
    case CT_ACT_OPT_STEP:
        st = opt_step(x, r->M, r->hp, r->t, r->sumsq, t_act, &r->loss, &r->skipped, r->out);
        if (st == CT_OK) r->have_loss = 1;
        return st;
    default:
        return CT_ERR(&x->err, CT_ERR_UNSUPPORTED, "executor: unknown action kind %d",
                      (int)a->kind);
    }
}

/* After a compute or transfer action: its span, its time on the timeline, transfers pumped. */
static ct_status action_done(ct_exec *x, step_run *r, int i, double t_act, double arrived) {
    ct_status st;
    ct_act_kind k = r->list[i].kind;
    if (syncing(x) && (st = ct_device_finish(x->dev)) != CT_OK) return dev_err(x, st);
    double t1 = ct_time_now();
    span(x, act_span_name(k), is_compute(k) ? "compute" : "comm", t_act, r->list[i].mb);
    if (is_compute(k)) r->tl_compute += t1 - t_act, r->tl_end = t1;
    double dt = t1 - (k == CT_ACT_RECV_ACT || k == CT_ACT_RECV_GRAD ? arrived : t_act);
    r->tl_ms[k] += dt;
    r->tl_n[k]++;
    if (x->timeline) x->tl_dur[i] = 1e3 * dt;
    return ct__xfer_pump(x, 0);
}

/* Every group's ct_comm_bytes now: dp (both handles), tp (both), ep, edp (both), emb; pp's
 * sends. */
static void bytes_now(const ct_exec *x, uint64_t v[6]) {
    v[0] = ct_comm_bytes(x->dp) + ct_zero_gather_bytes(x->z);
    v[1] = ct_comm_bytes(x->tp) + ct_comm_bytes(x->tpg);
    v[2] = ct_comm_bytes(x->ep);
    v[3] = ct_comm_bytes(x->edp) + ct_zero_expert_gather_bytes(x->z);
    v[4] = ct_comm_bytes(x->emb);
    v[5] = x->pp_bytes;
}

void ct_exec_bytes_last(const ct_exec *x, ct_exec_bytes *out) { *out = x->bytes_last; }

/* The step's results and times, once every action ran. */
static ct_status step_end(ct_exec *x, step_run *r) {
    ct_status st;
    if ((st = ct_device_finish(x->dev)) != CT_OK) return dev_err(x, st);
    if (!r->have_loss && (st = ct__exec_step_loss(x, r->M, &r->loss)) != CT_OK) return st;
    if (r->out) r->out->loss = r->loss, r->out->skipped = r->skipped;
    if (x->experts && (st = ct__exec_moe_stats(x, r->M, r->out)) != CT_OK) return st;
    if (x->timeline) { /* the pipeline's span: the longest stage's */
        float span_ms = (float)(1e3 * (r->tl_end - r->t_step)), mk = span_ms;
        if (multi(x->pp) &&
            (st = ct_comm_allreduce(x->pp, &mk, &mk, 1, CT_F32, CT_OP_MAX, NULL)) != CT_OK)
            return CT_ERR(&x->err, st, "timeline: %s", ct_comm_errmsg(x->pp));
        x->tl.steps++;
        x->tl_last_compute = 1e3 * r->tl_compute, x->tl_last_makespan = mk;
        x->tl.compute_ms += 1e3 * r->tl_compute;
        x->tl.span_ms += span_ms;
        x->tl.makespan_ms += mk;
        for (int k = 0; k < CT_ACT__COUNT; k++)
            x->tl.ms[k] += 1e3 * r->tl_ms[k], x->tl.count[k] += r->tl_n[k];
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
    double tp_comm = ts1.comm_ms - r->ts0.comm_ms, tp_over = ts1.overlap_ms - r->ts0.overlap_ms;
    x->times.tp_comm_ms += tp_comm;
    x->times.tp_overlap_ms += tp_over;
    x->times.compute_ms += 1e3 * r->compute_t - gms - (tp_comm - tp_over);
    uint64_t v[6];
    bytes_now(x, v);
    const ct_comm *g[6] = {x->dp, x->tp, x->ep, x->edp, x->emb, x->pp};
    int64_t d[6];
    for (int k = 0; k < 6; k++) d[k] = multi(g[k]) ? (int64_t)(v[k] - x->bytes0[k]) : -1;
    ct_exec_bytes eb = {d[0], d[1], d[2], d[3], d[4], d[5]};
    x->bytes_last = eb;
    if (ct_trace_on(x->tr)) ct_trace_event(x->tr, CT_TRACE_MAIN, "step", "step", r->t_step, -1);
    return CT_OK;
}

ct_status ct_exec_step(ct_exec *x, const ct_schedule *s, const int *tokens, const int *targets,
                       int rows, int T, const ct_adamw_hp *hp, int t, ct_step_result *out) {
    step_run r;
    memset(&r, 0, sizeof r);
    r.s = s, r.tokens = tokens, r.targets = targets, r.rows = rows, r.T = T;
    r.hp = hp, r.t = t, r.out = out;
    r.t_step = ct_time_now();
    ct_tp_stats_get(ct_model_tp(x->m), &r.ts0);
    bytes_now(x, x->bytes0);
    if (ct_model_moe(x->m)) ct_moe_stats_reset(ct_model_moe(x->m));
    if (out) out->aux_loss = out->drop_frac = out->max_load = 0;
    ct_status st = step_begin(x, &r);
    if (st != CT_OK) return st;
    for (int i = 0; i < r.n && st == CT_OK; i++) {
        double t_act = ct_time_now(), arrived = 0;
        ct_trace_set_mb(x->tr, r.list[i].mb);
        st = run_action(x, &r, i, t_act, &arrived);
        if (st == CT_OK && r.list[i].kind < CT_ACT_GRAD_SYNC)
            st = action_done(x, &r, i, t_act, arrived);
    }
    if (st == CT_OK) st = ct__xfer_drain(x);
    if (st != CT_OK) {
        x->failed = 1;
        if (!x->err.msg[0]) CT_ERR(&x->err, st, "%s", ct_model_errmsg(x->m));
        return st;
    }
    return step_end(x, &r);
}

void ct_exec_set_timeline(ct_exec *x, int on) { x->timeline = on != 0; }
void ct_exec_timeline_get(const ct_exec *x, ct_exec_timeline *out) { *out = x->tl; }
void ct_exec_timeline_reset(ct_exec *x) { memset(&x->tl, 0, sizeof x->tl); }
void ct_exec_timeline_last(const ct_exec *x, const double **dur_ms, int *n, double *compute_ms,
                           double *makespan_ms) {
    *dur_ms = x->tl_dur, *n = x->tl.steps ? x->tl_n : 0;
    *compute_ms = x->tl_last_compute, *makespan_ms = x->tl_last_makespan;
}

