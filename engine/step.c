/* step.c - the step executor: one worker runs its stage's action list (parallel/'s schedules)
 * for one optimizer step. FWD/BWD call the model's entry points on an activation slot; the
 * executor gathers ZeRO-3 blocks before the model uses them and, after each backward piece,
 * tells the gradient reducer which range is now final; SEND/RECV move activations and their
 * gradients between pipeline stages; GRAD_SYNC waits for the reductions; OPT_STEP runs the
 * optimizer (with the norm over the right groups) and ZeRO's all-gather. A single device is the
 * 1x1x1 grid (grid NULL or all groups of one) with the trivial list: nothing is reduced. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_step.h"

typedef struct slot_use {
    int mb, chunk; /* -1: free */
} slot_use;

struct ct_exec {
    ct_model *m;
    ct_params *P;
    ct_device *dev;
    ct_grid *grid;
    ct_comm *world, *dp, *pp;
    int stage, nstages, dpsize;
    ct_grads *g; /* NULL: nothing to reduce (one worker) */
    ct_zero *z;
    ct_optim *o;
    ct_trace *tr;
    slot_use *slots;
    int nslots;
    double *losses; /* per micro-batch of the running step */
    int nlosses;
    float *xfer;    /* host staging of one activation (pipeline sends / receives) */
    size_t xfer_floats;
    ct_exec_times times;
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

ct_status ct_exec_create(ct_exec **out, ct_model *m, ct_grid *grid, const ct_exec_opts *o,
                         ct_err *err) {
    *out = NULL;
    ct_exec_opts def = ct_exec_opts_default();
    if (!o) o = &def;
    ct_exec *x = calloc(1, sizeof *x);
    if (!x) return CT_ERR(err, CT_ERR_NOMEM, "ct_exec_create: out of host memory");
    x->m = m;
    x->P = ct_model_params(m);
    x->dev = ct_model_device(m);
    x->grid = grid;
    x->world = grid ? ct_grid_world(grid) : NULL;
    x->dp = grid ? ct_grid_dp(grid) : NULL;
    x->pp = grid ? ct_grid_pp(grid) : NULL;
    x->stage = ct_params_coords(x->P)->pp_rank;
    x->nstages = ct_params_layout(x->P)->pp;
    x->dpsize = x->dp ? ct_comm_size(x->dp) : 1;
    ct_status st = CT_OK;
    const ct_layout *lay = ct_params_layout(x->P);
    if (grid) {
        const ct_layout *gl = ct_grid_layout(grid);
        const ct_coords *gc = ct_grid_coords(grid), *mc = ct_params_coords(x->P);
        if (gl->dp != lay->dp || gl->tp != lay->tp || gl->pp != lay->pp || gc->dp_rank != mc->dp_rank ||
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
    x->slots = malloc(sizeof *x->slots * (size_t)x->nslots);
    if (st == CT_OK && !x->slots) st = CT_ERR(err, CT_ERR_NOMEM, "ct_exec_create: no memory");
    for (int s = 0; st == CT_OK && s < x->nslots; s++) x->slots[s].mb = x->slots[s].chunk = -1;
    /* the gradient ranges: the whole layout over the DP group (averaged) */
    if (st == CT_OK && multi(x->dp)) {
        ct_grad_range r;
        memset(&r, 0, sizeof r);
        r.lo = 0;
        r.hi = ct_params_local_len(x->P);
        r.groups[0] = x->dp;
        r.ops[0] = CT_OP_AVG;
        st = ct_grads_create(&x->g, m, &r, 1, &o->grads, err);
    }
    if (st == CT_OK) st = ct_zero_create(&x->z, m, x->dp, err);
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
    ct_grads_free(x->g);
    ct_zero_free(x->z);
    ct_optim_free(x->o);
    if (x->m) ct_model_set_trace(x->m, NULL);
    free(x->slots);
    free(x->losses);
    free(x->xfer);
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

/* End of a traced span: while tracing, wait for the device so its time lands in the span. */
static void span(ct_exec *x, const char *name, const char *cat, double t0, int mb) {
    if (!ct_trace_on(x->tr)) return;
    ct_device_finish(x->dev);
    ct_trace_event(x->tr, CT_TRACE_MAIN, name, cat, t0, mb);
}

static ct_status forward_chunk(ct_exec *x, const ct_schedule *s, int slot, int mb, int chunk,
                               const int *tokens, const int *targets, int rows, int T,
                               double *loss) {
    ct_status st = CT_OK;
    int lc = local_chunk(x, chunk), lo, hi;
    ct_params_chunk(x->P, lc, &lo, &hi);
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

/* Backward of one chunk; `comm`: this is the step's last backward of the chunk (its gradients
 * become final as it goes), or every one under ZeRO-2. */
static ct_status backward_chunk(ct_exec *x, const ct_schedule *s, int slot, int chunk, int last,
                                float scale) {
    ct_status st = CT_OK;
    int lc = local_chunk(x, chunk), lo, hi;
    ct_params_chunk(x->P, lc, &lo, &hi);
    if (x->g && (st = ct_grads_begin(x->g, last)) != CT_OK)
        return CT_ERR(&x->err, st, "%s", ct_grads_errmsg(x->g));
    if (last_chunk(x, s, chunk)) {
        if ((st = ct_model_head_backward(x->m, slot, scale)) != CT_OK) return fail_model(x, st);
        size_t a, b;
        ct_params_lnf_range(x->P, &a, &b);
        if (x->g && (st = ct_grads_ready(x->g, a)) != CT_OK)
            return CT_ERR(&x->err, st, "%s", ct_grads_errmsg(x->g));
    }
    for (int l = hi - 1; l >= lo; l--) {
        if ((st = ct_zero_need_block(x->z, l, l - 1 >= lo ? l - 1 : -1)) != CT_OK)
            return CT_ERR(&x->err, st, "%s", ct_zero_errmsg(x->z));
        if ((st = ct_model_block_backward(x->m, slot, l)) != CT_OK) return fail_model(x, st);
        if (x->g && (st = ct_grads_ready(x->g, ct_params_layer_begin(x->P, l))) != CT_OK)
            return CT_ERR(&x->err, st, "%s", ct_grads_errmsg(x->g));
    }
    if (chunk == 0) {
        if ((st = ct_model_embed_backward(x->m, slot)) != CT_OK) return fail_model(x, st);
        if (x->g && (st = ct_grads_ready(x->g, 0)) != CT_OK)
            return CT_ERR(&x->err, st, "%s", ct_grads_errmsg(x->g));
    }
    return CT_OK;
}

/* Host staging for one activation of rows x T x C floats. */
static ct_status xfer_buf(ct_exec *x, size_t n) {
    if (n <= x->xfer_floats) return CT_OK;
    float *p = realloc(x->xfer, n * sizeof(float));
    if (!p) return CT_ERR(&x->err, CT_ERR_NOMEM, "executor: no memory to stage an activation");
    x->xfer = p, x->xfer_floats = n;
    return CT_OK;
}

/* Pipeline transfers: an activation (or its gradient) between neighbouring stages through host
 * staging. Blocking here; the pipeline schedules post them non-blocking. */
static ct_status transfer(ct_exec *x, const ct_action *a, int slot, int rows, int T) {
    ct_status st;
    size_t n = (size_t)rows * T * ct_params_config(x->P)->channels;
    if ((st = xfer_buf(x, n)) != CT_OK) return st;
    int N = x->nstages, peer;
    ct_view v;
    switch (a->kind) {
    case CT_ACT_RECV_ACT:
        peer = (a->chunk - 1) % N;
        if ((st = ct_model_stage_input(x->m, slot, local_chunk(x, a->chunk), rows, T, &v)) != CT_OK)
            return fail_model(x, st);
        break;
    case CT_ACT_SEND_ACT: {
        int lo, hi;
        peer = (a->chunk + 1) % N;
        ct_params_chunk(x->P, local_chunk(x, a->chunk), &lo, &hi);
        if ((st = ct_model_block_output(x->m, slot, hi - 1, &v)) != CT_OK) return fail_model(x, st);
        break;
    }
    case CT_ACT_RECV_GRAD: peer = (a->chunk + 1) % N, v = ct_model_dres(x->m); break;
    default: peer = (a->chunk - 1) % N, v = ct_model_dres(x->m); break; /* SEND_GRAD */
    }
    int send = a->kind == CT_ACT_SEND_ACT || a->kind == CT_ACT_SEND_GRAD;
    if (send) {
        if ((st = ct_model_view_read(x->m, v, x->xfer, n * sizeof(float))) != CT_OK)
            return fail_model(x, st);
        st = ct_comm_send(x->pp, peer, x->xfer, n * sizeof(float));
    } else {
        st = ct_comm_recv(x->pp, peer, x->xfer, n * sizeof(float));
        if (st == CT_OK && (st = ct_model_view_write(x->m, v, x->xfer, n * sizeof(float))) != CT_OK)
            return fail_model(x, st);
    }
    if (st != CT_OK)
        CT_ERR(&x->err, st, "pipeline %s with stage %d: %s", ct_act_name(a->kind), peer,
               ct_comm_errmsg(x->pp));
    return st;
}

/* ------------------------------------------------------------------ one step */

ct_status ct_exec_step(ct_exec *x, const ct_schedule *s, const int *tokens, const int *targets,
                       int rows, int T, const ct_adamw_hp *hp, int t, ct_step_result *out) {
    ct_status st = CT_OK;
    double t_step = ct_time_now(), t_act;
    if (!s || x->stage >= s->stages || s->stages != x->nstages)
        return CT_ERR(&x->err, CT_ERR_ARG,
                      "executor: a schedule for %d stages on a layout of %d (this worker is "
                      "stage %d)",
                      s ? s->stages : 0, x->nstages, x->stage);
    int M = s->micro, n = s->n[x->stage];
    const ct_action *list = s->list[x->stage];
    if (M > x->nlosses) {
        double *p = realloc(x->losses, sizeof(double) * (size_t)M);
        if (!p) return CT_ERR(&x->err, CT_ERR_NOMEM, "executor: no memory");
        x->losses = p, x->nlosses = M;
    }
    /* which backward action is the last of each chunk (its gradients become final there) */
    int nch = s->stages * (s->virt < 1 ? 1 : s->virt), last_bwd[CT_MAX_CHUNKS * 64];
    if (nch > (int)(sizeof last_bwd / sizeof last_bwd[0]))
        return CT_ERR(&x->err, CT_ERR_ARG, "executor: %d model chunks is too many", nch);
    for (int c = 0; c < nch; c++) last_bwd[c] = -1;
    for (int i = 0; i < n; i++)
        if (list[i].kind == CT_ACT_BWD) last_bwd[list[i].chunk] = i;
    for (int s2 = 0; s2 < x->nslots; s2++) slot_free(x, s2);
    if ((st = ct_model_zero_grad(x->m)) != CT_OK) return fail_model(x, st);
    double sumsq = 0, compute_t = 0, t_comp0 = t_step;
    size_t BT = (size_t)rows * T;
    for (int i = 0; i < n && st == CT_OK; i++) {
        const ct_action *a = &list[i];
        int slot = -1;
        t_act = ct_time_now();
        ct_trace_set_mb(x->tr, a->mb);
        switch (a->kind) {
        case CT_ACT_FWD:
            if ((st = slot_get(x, a->mb, a->chunk, 1, &slot)) != CT_OK) break;
            x->losses[a->mb] = 0;
            st = forward_chunk(x, s, slot, a->mb, a->chunk, tokens + (size_t)a->mb * BT,
                               targets + (size_t)a->mb * BT, rows, T, &x->losses[a->mb]);
            span(x, "forward", "compute", t_act, a->mb);
            break;
        case CT_ACT_BWD:
            if ((st = slot_get(x, a->mb, a->chunk, 0, &slot)) != CT_OK) break;
            st = backward_chunk(x, s, slot, a->chunk, i == last_bwd[a->chunk], 1.0f / (float)M);
            slot_free(x, slot);
            span(x, "backward", "compute", t_act, a->mb);
            break;
        case CT_ACT_RECV_ACT:
            if ((st = slot_get(x, a->mb, a->chunk, 1, &slot)) == CT_OK)
                st = transfer(x, a, slot, rows, T);
            span(x, "recv activation", "comm", t_act, a->mb);
            break;
        case CT_ACT_SEND_ACT:
            if ((st = slot_get(x, a->mb, a->chunk, 0, &slot)) == CT_OK)
                st = transfer(x, a, slot, rows, T);
            span(x, "send activation", "comm", t_act, a->mb);
            break;
        case CT_ACT_RECV_GRAD:
        case CT_ACT_SEND_GRAD:
            st = transfer(x, a, 0, rows, T);
            span(x, a->kind == CT_ACT_RECV_GRAD ? "recv gradient" : "send gradient", "comm", t_act,
                 a->mb);
            break;
        case CT_ACT_GRAD_SYNC: {
            /* compute: until this worker's backward is done on its device */
            if ((st = ct_device_finish(x->dev)) != CT_OK) {
                CT_ERR(&x->err, st, "%s", ct_device_errmsg(x->dev));
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
            float norm = 0, given = 0;
            int z2 = ct_params_grad_shard(x->P) != NULL;
            if (z2) given = sqrtf((float)sumsq);
            st = ct_optim_step(x->o, hp, t, z2 ? &given : NULL, &norm);
            if (st != CT_OK) {
                CT_ERR(&x->err, st, "%s", ct_optim_errmsg(x->o));
                break;
            }
            if ((st = ct_device_finish(x->dev)) != CT_OK) {
                CT_ERR(&x->err, st, "%s", ct_device_errmsg(x->dev));
                break;
            }
            double t1 = ct_time_now();
            if ((st = ct_zero_after_step(x->z)) != CT_OK)
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
            st = CT_ERR(&x->err, CT_ERR_UNSUPPORTED, "executor: action %s is not supported yet",
                        ct_act_name(a->kind));
        }
        if (st != CT_OK && !x->err.msg[0]) CT_ERR(&x->err, st, "%s", ct_model_errmsg(x->m));
    }
    if (st != CT_OK) return st;
    if ((st = ct_device_finish(x->dev)) != CT_OK)
        return CT_ERR(&x->err, st, "%s", ct_device_errmsg(x->dev));
    /* the step's loss: the mean over micro-batches (the last stage has it), over DP */
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
    if (out) out->loss = loss;
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
    x->times.compute_ms += 1e3 * compute_t - gms;
    if (ct_trace_on(x->tr)) ct_trace_event(x->tr, CT_TRACE_MAIN, "step", "step", t_step, -1);
    return CT_OK;
}

/* ------------------------------------------------------------------ forward only */

ct_status ct_exec_forward(ct_exec *x, const int *tokens, const int *targets, int rows, int T,
                          float *loss, float *logits_last) {
    ct_status st = CT_OK;
    if (x->nstages > 1)
        return CT_ERR(&x->err, CT_ERR_UNSUPPORTED,
                      "executor: a forward pass over a pipeline is not built yet");
    double lv = NAN;
    for (int s = 0; s < x->nslots; s++) slot_free(x, s);
    ct_schedule one = {CT_SCHED_TRIVIAL, 1, 1, 1, NULL, NULL};
    if ((st = forward_chunk(x, &one, 0, 0, 0, tokens, targets, rows, T, targets ? &lv : NULL)) !=
        CT_OK)
        return st;
    if (logits_last) {
        size_t Vp = (size_t)ct_params_config(x->P)->padded_vocab, n = (size_t)rows * T * Vp;
        float *all = malloc(n * sizeof(float));
        if (!all) return CT_ERR(&x->err, CT_ERR_NOMEM, "executor: no memory for logits");
        st = ct_model_slot_logits(x->m, 0, all, n);
        if (st == CT_OK) memcpy(logits_last, all + (size_t)(T - 1) * Vp, Vp * sizeof(float));
        free(all);
        if (st != CT_OK) return fail_model(x, st);
    }
    if (loss) *loss = (float)lv;
    return CT_OK;
}

ct_status ct_exec_gather_state(ct_exec *x, float *params, float *adam_m, float *adam_v) {
    return ct_state_gather(x->m, x->world, params, adam_m, adam_v, &x->err);
}

ct_status ct_exec_mem_gather(ct_exec *x, uint64_t *out) {
    size_t host = (x->g ? ct_grads_host_bytes(x->g) : 0) + ct_zero_host_bytes(x->z);
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
