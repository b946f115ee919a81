/* sched_check.c - the validator and simulator of pipeline schedules (ct_schedule, sched.c).
 *
 * Both run the same model of execution: each stage walks its list in order; a send is posted and
 * never waits (buffered); a receive waits for its matching send. Because every stage is
 * sequential and a receive names its one sender, the run is deterministic whatever the timing (a
 * Kahn network): a list that completes at zero cost completes at any cost, so the validator's
 * deadlock check is the simulator at zero cost. Pure: no MPI, no devices.
 *
 * Checks run in phases so the first problem is reported where it is made: (1) each action alone,
 * (2) each stage alone (counts, local order, the ending), (3) channel order across stages,
 * (4) deadlock. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_parallel.h"

/* Per (mb, chunk) positions, -1 when absent: index in the list of the chunk's stage. */
enum { P_FWD, P_BWD, P_BIN, P_BWT, P_SA, P_RA, P_SG, P_RG, P__N };

typedef struct chk {
    const ct_schedule *s;
    int N, m, C;  /* stages, micro-batches, chunks (v*N) */
    int *pos;     /* [m][C][P__N] */
    int *ord;     /* [m][C][P__N] ordinal of a send/receive on its channel */
} chk;

static int *P(const chk *k, int mb, int c) { return k->pos + ((size_t)mb * k->C + c) * P__N; }
static int *O(const chk *k, int mb, int c) { return k->ord + ((size_t)mb * k->C + c) * P__N; }

static int is_comm(int kind) {
    return kind == CT_ACT_SEND_ACT || kind == CT_ACT_RECV_ACT || kind == CT_ACT_SEND_GRAD ||
           kind == CT_ACT_RECV_GRAD;
}
static int slot_of(int kind) {
    static const int map[CT_ACT__COUNT] = {P_FWD, P_BWD, P_BIN, P_BWT, P_SA, P_RA, P_SG, P_RG, -1, -1};
    return kind >= 0 && kind < CT_ACT__COUNT ? map[kind] : -1;
}

/* "stage 2 action 7 RECV_ACT(mb 3, chunk 2): <why>" */
#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
static ct_status fail(ct_err *err, int st, int i, const ct_action *a, const char *fmt, ...) {
    char why[1024], as[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (i < 0) return CT_ERR(err, CT_ERR_ARG, "schedule: stage %d: %s", st, why);
    return CT_ERR(err, CT_ERR_ARG, "schedule: stage %d action %d %s: %s", st, i,
                  ct_act_str(a, as, sizeof as), why);
}

/* Phase 1: the action alone. */
static ct_status check_action(const chk *k, int st, int i, const ct_action *a, ct_err *err) {
    int N = k->N, C = k->C;
    if ((int)a->kind < 0 || a->kind >= CT_ACT__COUNT)
        return fail(err, st, i, a, "unknown action kind %d", (int)a->kind);
    if (a->kind == CT_ACT_GRAD_SYNC || a->kind == CT_ACT_OPT_STEP) return CT_OK;
    if (a->mb < 0 || a->mb >= k->m)
        return fail(err, st, i, a, "micro-batch outside 0..%d", k->m - 1);
    if (a->chunk < 0 || a->chunk >= C) return fail(err, st, i, a, "chunk outside 0..%d", C - 1);
    if (a->chunk % N != st)
        return fail(err, st, i, a, "chunk %d lives on stage %d (chunk %% %d stages), not here",
                    a->chunk, a->chunk % N, N);
    if (is_comm(a->kind) && N == 1)
        return fail(err, st, i, a, "a one-stage schedule sends and receives nothing");
    if (a->kind == CT_ACT_RECV_ACT && a->chunk == 0)
        return fail(err, st, i, a, "chunk 0 starts from the tokens; it receives no activations");
    if (a->kind == CT_ACT_SEND_ACT && a->chunk == C - 1)
        return fail(err, st, i, a, "the last chunk ends in the loss; it sends no activations");
    if (a->kind == CT_ACT_RECV_GRAD && a->chunk == C - 1)
        return fail(err, st, i, a, "the last chunk's gradient starts at the loss; it receives none");
    if (a->kind == CT_ACT_SEND_GRAD && a->chunk == 0)
        return fail(err, st, i, a, "chunk 0 has no previous chunk to send a gradient to");
    return CT_OK;
}

/* Phase 2: one stage's list alone. Fills the positions of its (mb, chunk)s. */
static ct_status check_stage(chk *k, int st, ct_err *err) {
    const ct_action *L = k->s->list[st];
    int n = k->s->n[st], N = k->N, C = k->C;
    char as[64];
    for (int i = 0; i < n; i++) {
        const ct_action *a = &L[i];
        if (a->kind == CT_ACT_GRAD_SYNC || a->kind == CT_ACT_OPT_STEP) {
            if (i != n - 2 + (a->kind == CT_ACT_OPT_STEP))
                return fail(err, st, i, a, "a list ends with GRAD_SYNC, OPT_STEP and has them once");
            continue;
        }
        int *p = P(k, a->mb, a->chunk), slot = slot_of(a->kind), mb = a->mb, c = a->chunk;
        if (p[slot] >= 0)
            return fail(err, st, i, a, "a second %s of (mb %d, chunk %d) (the first is action %d)",
                        ct_act_name(a->kind), mb, c, p[slot]);
        p[slot] = i;
        switch (a->kind) {
        case CT_ACT_FWD:
            if (N > 1 && c > 0 && p[P_RA] < 0)
                return fail(err, st, i, a, "its input is not received before it (no RECV_ACT(mb %d, "
                            "chunk %d) earlier on this stage)", mb, c);
            if (N == 1 && c > 0 && P(k, mb, c - 1)[P_FWD] < 0) /* chunks pass data locally */
                return fail(err, st, i, a, "before FWD(mb %d, chunk %d), whose output it reads", mb,
                            c - 1);
            break;
        case CT_ACT_BWD:
        case CT_ACT_BWD_INPUT: {
            int other = a->kind == CT_ACT_BWD ? P_BIN : P_BWD;
            if (p[other] >= 0)
                return fail(err, st, i, a, "(mb %d, chunk %d) already has a %s at action %d", mb, c,
                            other == P_BWD ? "BWD" : "BWD_INPUT", p[other]);
            if (p[P_FWD] < 0)
                return fail(err, st, i, a, "before FWD(mb %d, chunk %d)", mb, c);
            if (N > 1 && c < C - 1 && p[P_RG] < 0)
                return fail(err, st, i, a, "its output gradient is not received before it (no "
                            "RECV_GRAD(mb %d, chunk %d) earlier on this stage)", mb, c);
            if (N == 1 && c < C - 1 && P(k, mb, c + 1)[P_BWD] < 0 && P(k, mb, c + 1)[P_BIN] < 0)
                return fail(err, st, i, a, "before the backward of (mb %d, chunk %d), whose input "
                            "gradient it reads", mb, c + 1);
            break;
        }
        case CT_ACT_BWD_WEIGHT:
            if (p[P_BIN] < 0)
                return fail(err, st, i, a, "before BWD_INPUT(mb %d, chunk %d)", mb, c);
            break;
        case CT_ACT_SEND_ACT:
            if (p[P_FWD] < 0)
                return fail(err, st, i, a, "before FWD(mb %d, chunk %d) produced it", mb, c);
            break;
        case CT_ACT_SEND_GRAD:
            if (p[P_BWD] < 0 && p[P_BIN] < 0)
                return fail(err, st, i, a, "before the backward of (mb %d, chunk %d) produced it", mb,
                            c);
            break;
        default: /* receives: their consumers check the order */
            break;
        }
    }
    if (n < 2 || L[n - 2].kind != CT_ACT_GRAD_SYNC || L[n - 1].kind != CT_ACT_OPT_STEP)
        return fail(err, st, -1, NULL, "the list must end with GRAD_SYNC, OPT_STEP (it has %d "
                    "actions, the last %s)", n, n ? ct_act_str(&L[n - 1], as, sizeof as) : "none");
    /* everything each (mb, chunk) of this stage needs, once */
    for (int c = st; c < C; c += N)
        for (int mb = 0; mb < k->m; mb++) {
            const int *p = P(k, mb, c);
            int f = p[P_FWD], b = p[P_BWD] >= 0 ? p[P_BWD] : p[P_BIN];
            if (f < 0)
                return fail(err, st, -1, NULL, "no FWD(mb %d, chunk %d) (every micro-batch runs "
                            "every chunk of the stage once)", mb, c);
            if (b < 0)
                return fail(err, st, f, &L[f], "no BWD or BWD_INPUT of it on this stage");
            if (p[P_BIN] >= 0 && p[P_BWT] < 0)
                return fail(err, st, b, &L[b], "no BWD_WEIGHT(mb %d, chunk %d) after it", mb, c);
            if (p[P_BWD] >= 0 && p[P_BWT] >= 0)
                return fail(err, st, p[P_BWT], &L[p[P_BWT]], "(mb %d, chunk %d) has a full BWD at "
                            "action %d", mb, c, p[P_BWD]);
            if (N > 1 && c < C - 1 && p[P_SA] < 0)
                return fail(err, st, f, &L[f], "its output is never sent (no SEND_ACT(mb %d, chunk "
                            "%d) on this stage)", mb, c);
            if (N > 1 && c > 0 && p[P_SG] < 0)
                return fail(err, st, b, &L[b], "its input gradient is never sent (no SEND_GRAD(mb "
                            "%d, chunk %d) on this stage)", mb, c);
        }
    return CT_OK;
}

/* The channel of a message: (kind, from, to). ACT flows c -> c+1, GRAD c -> c-1. */
static int chan_peer(const chk *k, const ct_action *a) {
    int N = k->N, c = a->chunk;
    switch (a->kind) {
    case CT_ACT_SEND_ACT: return (c + 1) % N;
    case CT_ACT_RECV_ACT: return (c - 1 + N) % N;
    case CT_ACT_SEND_GRAD: return (c - 1 + N) % N;
    default: return (c + 1) % N; /* RECV_GRAD */
    }
}

/* The send a receive meets: its (mb, chunk) and position slot. */
static void matching_send(const ct_action *a, int *c, int *slot) {
    *c = a->kind == CT_ACT_RECV_ACT ? a->chunk - 1 : a->chunk + 1;
    *slot = a->kind == CT_ACT_RECV_ACT ? P_SA : P_SG;
}

/* Phase 3: on each channel the k-th receive meets the k-th send. A channel is an ordered pair of
 * stages, activations and gradients together: ct_comm_send/recv carry no tag, so the executor can
 * use one pipeline group as is (every generator here passes this, interleaved included). */
static ct_status check_channels(chk *k, ct_err *err) {
    int N = k->N;
    int *cnt = ct_calloc((size_t)N * 2, sizeof(int)); /* [peer][sends to it, receives from it] */
    if (!cnt) return CT_ERR(err, CT_ERR_NOMEM, "schedule check: out of memory");
    for (int st = 0; st < N; st++) {
        memset(cnt, 0, sizeof(int) * (size_t)N * 2);
        for (int i = 0; i < k->s->n[st]; i++) {
            const ct_action *a = &k->s->list[st][i];
            if (!is_comm(a->kind)) continue;
            int recv = a->kind == CT_ACT_RECV_ACT || a->kind == CT_ACT_RECV_GRAD;
            O(k, a->mb, a->chunk)[slot_of(a->kind)] = cnt[chan_peer(k, a) * 2 + recv]++;
        }
    }
    free(cnt);
    for (int st = 0; st < N; st++)
        for (int i = 0; i < k->s->n[st]; i++) {
            const ct_action *a = &k->s->list[st][i];
            if (a->kind != CT_ACT_RECV_ACT && a->kind != CT_ACT_RECV_GRAD) continue;
            int sc, slot, from = chan_peer(k, a);
            matching_send(a, &sc, &slot);
            int sent_at = P(k, a->mb, sc)[slot];
            int want = O(k, a->mb, a->chunk)[slot_of(a->kind)], got = O(k, a->mb, sc)[slot];
            if (sent_at < 0)
                return fail(err, st, i, a, "no matching %s(mb %d, chunk %d) on stage %d",
                            a->kind == CT_ACT_RECV_ACT ? "SEND_ACT" : "SEND_GRAD", a->mb, sc, from);
            if (want != got) {
                char as[64];
                return fail(err, st, i, a, "it is receive %d from stage %d, but its message is "
                            "send %d to this stage there (action %d %s); messages between two stages "
                            "arrive in the order sent", want, from, got, sent_at,
                            ct_act_str(&k->s->list[from][sent_at], as, sizeof as));
            }
        }
    return CT_OK;
}

/* Phase 4 and the simulator: run every stage until all are done or all that are left wait. */
static ct_status run(const chk *k, const ct_sched_costs *costs, int per_stage,
                     const double *const *dur, ct_sched_sim *out, ct_err *err) {
    const ct_schedule *s = k->s;
    int N = k->N;
    ct_status st = CT_OK;
    int *at = ct_calloc((size_t)N, sizeof(int)), *live = ct_calloc((size_t)N, sizeof(int));
    double *now = ct_calloc((size_t)N, sizeof(double)), *busy = ct_calloc((size_t)N, sizeof(double));
    double **post = ct_calloc((size_t)N, sizeof(double *)); /* [stage][action]: send post times */
    if (!at || !live || !now || !busy || !post) goto nomem;
    for (int i = 0; i < N; i++)
        if (!(post[i] = ct_calloc((size_t)s->n[i] + 1, sizeof(double)))) goto nomem;
    for (int progress = 1; progress;) {
        progress = 0;
        for (int p = 0; p < N; p++) {
            for (; at[p] < s->n[p]; at[p]++) {
                const ct_action *a = &s->list[p][at[p]];
                const ct_sched_costs *cost = costs + (per_stage ? p : 0);
                double t0 = now[p], d = 0, idle = 0; /* compute time, other time */
                switch (a->kind) {
                case CT_ACT_RECV_ACT:
                case CT_ACT_RECV_GRAD: {
                    int sc, slot, from = chan_peer(k, a);
                    matching_send(a, &sc, &slot);
                    int j = P(k, a->mb, sc)[slot];
                    if (at[from] <= j) goto blocked; /* not sent yet */
                    double arrive = post[from][j] + costs[per_stage ? from : 0].comm;
                    if (arrive > now[p]) now[p] = arrive;
                    idle = cost->recv;
                    break;
                }
                case CT_ACT_SEND_ACT:
                case CT_ACT_SEND_GRAD:
                    idle = cost->send;
                    post[p][at[p]] = now[p] + idle;
                    break;
                case CT_ACT_FWD:
                    d = cost->fwd;
                    if (++live[p] > out->peak_live[p]) out->peak_live[p] = live[p];
                    break;
                case CT_ACT_BWD: d = cost->bwd; live[p]--; break;
                case CT_ACT_BWD_INPUT: d = cost->bwd_input; break;
                case CT_ACT_BWD_WEIGHT: d = cost->bwd_weight; live[p]--; break;
                default: break; /* GRAD_SYNC, OPT_STEP: outside the bubble */
                }
                if (dur && a->kind < CT_ACT_GRAD_SYNC) { /* a replay: this action's own time */
                    if (a->kind <= CT_ACT_BWD_WEIGHT) d = dur[p][at[p]];
                    else idle = dur[p][at[p]];
                    if (a->kind == CT_ACT_SEND_ACT || a->kind == CT_ACT_SEND_GRAD)
                        post[p][at[p]] = now[p] + idle;
                }
                now[p] += d + idle;
                busy[p] += d;
                if (out->start) {
                    out->start[p][at[p]] = t0;
                    out->end[p][at[p]] = now[p];
                }
                progress = 1;
            }
        blocked:;
        }
    }
    int stuck = 0;
    for (int p = 0; p < N; p++) stuck |= at[p] < s->n[p];
    if (stuck) {
        char msg[1800], as[64], bs[64];
        size_t len = (size_t)snprintf(msg, sizeof msg, "schedule: deadlock (sends buffered, receives "
                                      "block):");
        for (int p = 0, first = 1; p < N && len < sizeof msg; p++) {
            if (at[p] >= s->n[p]) continue;
            const ct_action *a = &s->list[p][at[p]];
            int sc, slot, from = chan_peer(k, a);
            matching_send(a, &sc, &slot);
            int j = P(k, a->mb, sc)[slot];
            len += (size_t)snprintf(msg + len, sizeof msg - len, "%s stage %d waits at action %d %s "
                                    "for stage %d action %d %s", first ? "" : ";", p, at[p],
                                    ct_act_str(a, as, sizeof as), from, j,
                                    ct_act_str(&s->list[from][j], bs, sizeof bs));
            first = 0;
        }
        st = CT_ERR(err, CT_ERR_ARG, "%s", msg);
        goto cleanup;
    }
    double total = 0;
    for (int p = 0; p < N; p++) {
        if (now[p] > out->makespan) out->makespan = now[p];
        total += busy[p];
    }
    for (int p = 0; p < N; p++)
        out->stage_bubble[p] = out->makespan > 0 ? 1 - busy[p] / out->makespan : 0;
    out->bubble = out->makespan > 0 ? 1 - total / (N * out->makespan) : 0;
    goto cleanup;
nomem:
    st = CT_ERR(err, CT_ERR_NOMEM, "schedule check: out of memory");
cleanup:
    for (int i = 0; post && i < N; i++) free(post[i]);
    free(post);
    free(at);
    free(live);
    free(now);
    free(busy);
    return st;
}

/* Phases 1-3; k->pos filled for run(). */
static ct_status check(chk *k, const ct_schedule *s, ct_err *err) {
    memset(k, 0, sizeof *k);
    if (!s || !s->n || !s->list) return CT_ERR(err, CT_ERR_ARG, "schedule: NULL");
    if (s->stages < 1 || s->micro < 1 || s->virt < 1)
        return CT_ERR(err, CT_ERR_ARG, "schedule: %d stages, %d micro-batches, %d chunks per stage: "
                      "each must be >= 1", s->stages, s->micro, s->virt);
    for (int i = 0; i < s->stages; i++)
        if (s->n[i] < 0 || (s->n[i] > 0 && !s->list[i]))
            return CT_ERR(err, CT_ERR_ARG, "schedule: stage %d has no list", i);
    k->s = s;
    k->N = s->stages;
    k->m = s->micro;
    k->C = s->virt * s->stages;
    size_t cells = (size_t)k->m * (size_t)k->C * P__N;
    k->pos = ct_malloc(cells * sizeof(int));
    k->ord = ct_malloc(cells * sizeof(int));
    if (!k->pos || !k->ord) return CT_ERR(err, CT_ERR_NOMEM, "schedule check: out of memory");
    memset(k->pos, 0xff, cells * sizeof(int)); /* -1 */
    memset(k->ord, 0xff, cells * sizeof(int));
    ct_status st;
    for (int i = 0; i < k->N; i++) /* phase 1 everywhere first: a misplaced action is named where it is */
        for (int j = 0; j < s->n[i]; j++)
            if ((st = check_action(k, i, j, &s->list[i][j], err))) return st;
    for (int i = 0; i < k->N; i++)
        if ((st = check_stage(k, i, err))) return st;
    return check_channels(k, err);
}

static int sim_alloc(ct_sched_sim *r, const ct_schedule *s, int timeline) {
    int N = s->stages;
    r->stage_bubble = ct_calloc((size_t)N, sizeof(double));
    r->peak_live = ct_calloc((size_t)N, sizeof(int));
    if (!r->stage_bubble || !r->peak_live) return 0;
    if (!timeline) return 1;
    size_t total = 0;
    for (int i = 0; i < N; i++) total += (size_t)s->n[i];
    r->start = ct_calloc((size_t)N, sizeof(double *));
    r->end = ct_calloc((size_t)N, sizeof(double *));
    if (!r->start || !r->end) return 0;
    /* one block each; row i points into it (freed through row 0) */
    r->start[0] = ct_calloc(total + 1, sizeof(double));
    r->end[0] = ct_calloc(total + 1, sizeof(double));
    if (!r->start[0] || !r->end[0]) return 0;
    for (int i = 1; i < N; i++) {
        r->start[i] = r->start[i - 1] + s->n[i - 1];
        r->end[i] = r->end[i - 1] + s->n[i - 1];
    }
    return 1;
}

void ct_sched_sim_free(ct_sched_sim *r) {
    if (!r) return;
    free(r->stage_bubble);
    free(r->peak_live);
    if (r->start) free(r->start[0]);
    if (r->end) free(r->end[0]);
    free(r->start);
    free(r->end);
    memset(r, 0, sizeof *r);
}

ct_sched_costs ct_sched_costs_unit(void) {
    return (ct_sched_costs){.fwd = 1, .bwd = 2, .bwd_input = 1, .bwd_weight = 1, .comm = 0};
}

ct_status ct_sched_validate(const ct_schedule *s, ct_err *err) {
    chk k;
    ct_sched_sim r = {0};
    ct_sched_costs zero = {0};
    ct_status st = check(&k, s, err);
    if (!st) st = sim_alloc(&r, s, 0) ? run(&k, &zero, 0, NULL, &r, err)
                                      : CT_ERR(err, CT_ERR_NOMEM, "schedule check: out of memory");
    ct_sched_sim_free(&r);
    free(k.pos);
    free(k.ord);
    return st;
}

static ct_status simulate(const ct_schedule *s, const ct_sched_costs *c, int per_stage,
                          const double *const *dur, int want_timeline, ct_sched_sim *out,
                          ct_err *err) {
    chk k;
    if (!out || !c) return CT_ERR(err, CT_ERR_ARG, "ct_sched_simulate: costs and out must not be NULL");
    memset(out, 0, sizeof *out);
    ct_status st = check(&k, s, err);
    if (!st && !sim_alloc(out, s, want_timeline))
        st = CT_ERR(err, CT_ERR_NOMEM, "ct_sched_simulate: out of memory");
    if (!st) st = run(&k, c, per_stage, dur, out, err);
    if (st) ct_sched_sim_free(out);
    free(k.pos);
    free(k.ord);
    return st;
}

ct_status ct_sched_simulate(const ct_schedule *s, const ct_sched_costs *c, int want_timeline,
                            ct_sched_sim *out, ct_err *err) {
    return simulate(s, c, 0, NULL, want_timeline, out, err);
}

ct_status ct_sched_simulate_stages(const ct_schedule *s, const ct_sched_costs *per_stage,
                                   int want_timeline, ct_sched_sim *out, ct_err *err) {
    return simulate(s, per_stage, 1, NULL, want_timeline, out, err);
}

ct_status ct_sched_replay(const ct_schedule *s, const double *const *dur, double comm,
                          int want_timeline, ct_sched_sim *out, ct_err *err) {
    ct_sched_costs c = {0};
    c.comm = comm;
    if (!dur) return CT_ERR(err, CT_ERR_ARG, "ct_sched_replay: no durations");
    return simulate(s, &c, 0, dur, want_timeline, out, err);
}
