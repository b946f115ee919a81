/* bubble.c - a pipelined run's bubble: measured from the executed timeline, beside the
 * schedule simulator fed the measured action costs, and the last step replayed; with its
 * "pipeline" metrics record. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"

ct_status ct_trainer_pipeline_report(ct_trainer *t, ct_pipeline_bubble *out) {
    const ct_train_params *p = &t->p;
    memset(out, 0, sizeof *out);
    if (p->pp < 2 || !t->grid) return CT_OK;
    enum { F_PP, F_DP, F_STEPS, F_COMP, F_MAKE, F_FWD, F_BWD, F_BIN, F_BWT, F_SEND, F_RECV, F__N };
    ct_exec_timeline tl;
    ct_exec_timeline_get(t->x, &tl);
    float mine[F__N], *all = ct_malloc(sizeof(float) * F__N * (size_t)t->W);
    if (!all) return ct__trainer_fail(t, NULL, CT_ERR_NOMEM, "no memory for the pipeline report");
    const ct_coords *at = ct_grid_coords(t->grid);
    mine[F_PP] = (float)at->pp_rank, mine[F_DP] = (float)(at->dp_rank + at->tp_rank);
    mine[F_STEPS] = (float)tl.steps, mine[F_COMP] = (float)tl.compute_ms;
    mine[F_MAKE] = (float)tl.makespan_ms;
    const ct_act_kind kinds[6] = {CT_ACT_FWD, CT_ACT_BWD, CT_ACT_BWD_INPUT, CT_ACT_BWD_WEIGHT,
                                  CT_ACT_SEND_ACT, CT_ACT_RECV_ACT};
    for (int i = 0; i < 6; i++) { /* mean per action; sends and receives of both kinds together */
        int k = kinds[i];
        double ms = tl.ms[k], n = (double)tl.count[k];
        if (k == CT_ACT_SEND_ACT) ms += tl.ms[CT_ACT_SEND_GRAD], n += (double)tl.count[CT_ACT_SEND_GRAD];
        if (k == CT_ACT_RECV_ACT) ms += tl.ms[CT_ACT_RECV_GRAD], n += (double)tl.count[CT_ACT_RECV_GRAD];
        mine[F_FWD + i] = n > 0 ? (float)(ms / n) : 0.0f;
    }
    ct_status st = ct_comm_allgather(t->world, mine, all, F__N, CT_F32, NULL);
    if (st != CT_OK) {
        free(all);
        return ct__trainer_fail(t, NULL, st, "pipeline report: %s", ct_comm_errmsg(t->world));
    }
    /* the last timed step's action durations, every worker's list padded to the longest */
    const double *ldur = NULL;
    double lcomp = 0, lmake = 0;
    int ln = 0, lmax = 0;
    ct_exec_timeline_last(t->x, &ldur, &ln, &lcomp, &lmake);
    int32_t li = ln;
    if ((st = ct_comm_allreduce(t->world, &li, &li, 1, CT_I32, CT_OP_MAX, NULL)) != CT_OK) {
        free(all);
        return ct__trainer_fail(t, NULL, st, "pipeline report: %s", ct_comm_errmsg(t->world));
    }
    lmax = li;
    float *lmine = ct_calloc((size_t)lmax + 2, sizeof(float));
    float *lall = ct_calloc(((size_t)lmax + 2) * (size_t)t->W, sizeof(float));
    if (!lmine || !lall) {
        free(all), free(lmine), free(lall);
        return ct__trainer_fail(t, NULL, CT_ERR_NOMEM, "no memory for the pipeline report");
    }
    lmine[0] = (float)lcomp, lmine[1] = (float)lmake;
    for (int i = 0; i < ln; i++) lmine[2 + i] = (float)ldur[i];
    st = ct_comm_allgather(t->world, lmine, lall, (size_t)lmax + 2, CT_F32, NULL);
    free(lmine);
    if (st != CT_OK) {
        free(all), free(lall);
        return ct__trainer_fail(t, NULL, st, "pipeline report: %s", ct_comm_errmsg(t->world));
    }
    int N = p->pp;
    ct_err e2 = {0};
    const float *row[CT_PIPELINE_MAX_STAGES] = {0};
    for (int w = 0; w < t->W; w++) /* the first data-parallel replica's stages */
        if (all[w * F__N + F_DP] == 0 && (int)all[w * F__N + F_PP] < CT_PIPELINE_MAX_STAGES)
            row[(int)all[w * F__N + F_PP]] = all + (size_t)w * F__N;
    int steps = row[0] ? (int)row[0][F_STEPS] : 0;
    if (!t->leader || steps == 0 || N > CT_PIPELINE_MAX_STAGES || lmax == 0) {
        free(all), free(lall);
        return CT_OK;
    }
    /* the replay of the last step: the first replica's stages' durations */
    double *dur[CT_PIPELINE_MAX_STAGES] = {0}, lcompute = 0, lspan = 0;
    int okr = 1;
    ct_sched_sim sr = {0};
    for (int w = 0; w < t->W; w++) {
        if (all[w * F__N + F_DP] != 0) continue;
        int q = (int)all[w * F__N + F_PP];
        const float *src = lall + (size_t)w * (lmax + 2);
        if (!(dur[q] = ct_calloc((size_t)lmax, sizeof(double)))) okr = 0;
        for (int i = 0; okr && i < t->sched->n[q] && i < lmax; i++) dur[q][i] = src[2 + i];
        lcompute += src[0], lspan = src[1];
    }
    okr = okr && ct_sched_replay(t->sched, (const double *const *)dur, 0, 0, &sr, &e2) == CT_OK;
    double lmeas = lspan > 0 ? 1 - lcompute / (N * lspan) : NAN;
    ct_sched_costs *c = ct_calloc((size_t)N, sizeof *c), unit = ct_sched_costs_unit();
    ct_sched_sim sm = {0}, su = {0};
    if (!c) {
        for (int q = 0; q < N; q++) free(dur[q]);
        ct_sched_sim_free(&sr);
        free(all), free(lall);
        return ct__trainer_fail(t, NULL, CT_ERR_NOMEM, "no memory for the pipeline report");
    }
    for (int q = 0; q < N; q++) {
        const float *x = row[q];
        c[q].fwd = x[F_FWD], c[q].bwd = x[F_BWD], c[q].bwd_input = x[F_BIN];
        c[q].bwd_weight = x[F_BWT], c[q].send = x[F_SEND], c[q].recv = x[F_RECV], c[q].comm = 0;
    }
    int okm = ct_sched_simulate_stages(t->sched, c, 0, &sm, &e2) == CT_OK;
    int oku = ct_sched_simulate(t->sched, &unit, 0, &su, &e2) == CT_OK;
    double mmean = 0;
    char meas[1024] = "", simu[1024] = "", costs[2048] = "";
    size_t la = 0, lb = 0, lc = 0;
    for (int q = 0; q < N; q++) {
        const float *x = row[q];
        double mb = x[F_MAKE] > 0 ? 1 - x[F_COMP] / x[F_MAKE] : NAN;
        mmean += mb / N;
        la += (size_t)snprintf(meas + la, sizeof meas - la, "%s%.5f", q ? "," : "", mb);
        lb += (size_t)snprintf(simu + lb, sizeof simu - lb, "%s%.5f", q ? "," : "",
                               okm ? sm.stage_bubble[q] : 0.0);
        lc += (size_t)snprintf(costs + lc, sizeof costs - lc,
                               "%s{\"fwd\":%.4f,\"bwd\":%.4f,\"bwd_input\":%.4f,\"bwd_weight\":"
                               "%.4f,\"send\":%.4f,\"recv\":%.4f}",
                               q ? "," : "", x[F_FWD], x[F_BWD], x[F_BIN], x[F_BWT], x[F_SEND],
                               x[F_RECV]);
        if (la >= sizeof meas || lb >= sizeof simu || lc >= sizeof costs) break;
    }
    out->steps = steps, out->stages = N, out->measured = mmean;
    out->schedule = ct_sched_name(t->r->pipe.kind), out->micro_batches = t->r->pipe.accum;
    out->first_step = t->time_a + 1, out->last_step = t->time_b + 1;
    out->simulated = okm ? sm.bubble : NAN, out->unit = oku ? su.bubble : NAN;
    out->makespan_ms = row[0][F_MAKE] / steps;
    out->last_measured = lmeas, out->last_replayed = okr ? sr.bubble : NAN;
    for (int q = 0; q < N; q++) {
        const float *x = row[q];
        out->stage_measured[q] = x[F_MAKE] > 0 ? 1 - x[F_COMP] / x[F_MAKE] : NAN;
        out->stage_simulated[q] = okm ? sm.stage_bubble[q] : NAN;
        out->fwd_ms[q] = x[F_FWD], out->bwd_ms[q] = x[F_BWD], out->bwd_input_ms[q] = x[F_BIN];
        out->bwd_weight_ms[q] = x[F_BWT], out->send_ms[q] = x[F_SEND], out->recv_ms[q] = x[F_RECV];
    }
    char *rec = ct_malloc(4096 + sizeof costs);
    if (rec) {
        snprintf(rec, 4096 + sizeof costs,
                 "\"schedule\":\"%s\",\"stages\":%d,\"micro_batches\":%d,\"steps_timed\":%d,"
                 "\"bubble_measured\":%.5f,\"bubble_simulated\":%.5f,\"bubble_unit\":%.5f,"
                 "\"stage_measured\":[%s],\"stage_simulated\":[%s],\"costs_ms\":[%s],"
                 "\"last_measured\":%.5f,\"last_replayed\":%.5f",
                 ct_sched_name(t->r->pipe.kind), N, t->r->pipe.accum, steps, mmean, okm ? sm.bubble : 0.0,
                 oku ? su.bubble : 0.0, meas, simu, costs, lmeas, okr ? sr.bubble : 0.0);
        ct_metrics_record(t->mx, "pipeline", rec);
    }
    free(rec);
    ct_sched_sim_free(&sm);
    ct_sched_sim_free(&su);
    ct_sched_sim_free(&sr);
    for (int q = 0; q < N; q++) free(dur[q]);
    free(c);
    free(all);
    free(lall);
    return CT_OK;
}

