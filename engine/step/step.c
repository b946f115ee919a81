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

ct_status ct__exec_forward_chunk(ct_exec *x, const ct_schedule *s, int slot, int chunk,
                                 const int *tokens, const int *targets, int rows, int T,
                                 double *loss) {
    ct_status st = CT_OK;
    int lc = local_chunk(x, chunk), lo, hi;
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
    double t2 = ct_time_now();
    x->times.optimizer_ms += 1e3 * (t1 - t_act);
    x->times.exposed_ms += 1e3 * (t2 - t1);
    x->times.busy_ms += 1e3 * (t2 - t1);
    if (out) out->grad_norm = norm;
    span(x, "optimizer", "optimizer", t_act, -1);
    return st;
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
    ct__exec_slots_free(x);
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
    /* each micro-batch's share of the objective (a test may poison one step's backward with an
     * infinite scale: ct_engine_step_test.h) */
    float scale = t == x->poison_t ? INFINITY : 1.0f / (float)M;
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
            st = ct__exec_forward_chunk(x, s, slot, a->chunk, tokens + (size_t)a->mb * BT,
                               targets + (size_t)a->mb * BT, rows, T, &x->losses[a->mb]);
            break;
        case CT_ACT_BWD:
        case CT_ACT_BWD_INPUT:
        case CT_ACT_BWD_WEIGHT: {
            if ((st = slot_get(x, a->mb, a->chunk, 0, &slot)) != CT_OK) break;
            int final = a->kind == CT_ACT_BWD_INPUT ? i == last_bin : i == last_bwd[a->chunk];
            st = backward_chunk(x, s, slot, a->chunk, a->kind, final, scale);
            if (a->kind != CT_ACT_BWD_INPUT) slot_free(x, slot); /* its activations are done */
            break;
        }
        case CT_ACT_RECV_ACT:
            if ((st = slot_get(x, a->mb, a->chunk, 1, &slot)) == CT_OK)
                st = ct__exec_transfer(x, a, slot, rows, T, &arrived);
            break;
        case CT_ACT_SEND_ACT:
            if ((st = slot_get(x, a->mb, a->chunk, 0, &slot)) == CT_OK)
                st = ct__exec_transfer(x, a, slot, rows, T, &arrived);
            break;
        case CT_ACT_RECV_GRAD:
        case CT_ACT_SEND_GRAD: st = ct__exec_transfer(x, a, 0, rows, T, &arrived); break;
        case CT_ACT_GRAD_SYNC: st = grad_sync(x, &t_comp0, &compute_t, &sumsq); break;
        case CT_ACT_OPT_STEP:
            if ((st = opt_step(x, M, hp, t, sumsq, t_act, &loss, &skipped, out)) == CT_OK)
                have_loss = 1;
            break;
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
            if ((st = ct__xfer_pump(x, 0)) != CT_OK) break;
        }
    }
    if (st == CT_OK) st = ct__xfer_drain(x);
    if (st != CT_OK) {
        x->failed = 1;
        if (!x->err.msg[0]) CT_ERR(&x->err, st, "%s", ct_model_errmsg(x->m));
        return st;
    }
    if ((st = ct_device_finish(x->dev)) != CT_OK) return dev_err(x, st);
    if (!have_loss && (st = ct__exec_step_loss(x, M, &loss)) != CT_OK) return st;
    if (out) out->loss = loss, out->skipped = skipped;
    if (x->experts && (st = ct__exec_moe_stats(x, M, out)) != CT_OK) return st;
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

