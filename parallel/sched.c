/* sched.c - pipeline schedules as data: the generators of each stage's action list for one step
 * (trivial, GPipe, 1F1B, interleaved 1F1B, ZB-H1), names and parsing. Pure: no MPI, no devices.
 *
 * Every generator decides only the order of the compute actions (FWD, BWD or BWD_INPUT and
 * BWD_WEIGHT); the communication around them is placed by one rule (emit_fwd, emit_bwd): a receive
 * right before the compute that needs it, a send right after the compute that produced it. The
 * validator and simulator are in sched_check.c. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_parallel.h"

static const char *const sched_names[CT_SCHED__COUNT] = {"trivial", "gpipe", "1f1b", "interleaved",
                                                        "zb1"};
static const char *const act_names[CT_ACT__COUNT] = {
    "FWD", "BWD", "BWD_INPUT", "BWD_WEIGHT", "SEND_ACT", "RECV_ACT", "SEND_GRAD", "RECV_GRAD",
    "GRAD_SYNC", "OPT_STEP"};

const char *ct_sched_name(ct_sched_kind k) {
    return (int)k >= 0 && k < CT_SCHED__COUNT ? sched_names[k] : "?";
}

const char *ct_act_name(int kind) { return kind >= 0 && kind < CT_ACT__COUNT ? act_names[kind] : "?"; }

char *ct_act_str(const ct_action *a, char *buf, size_t size) {
    if (a->kind == CT_ACT_GRAD_SYNC || a->kind == CT_ACT_OPT_STEP)
        snprintf(buf, size, "%s", ct_act_name(a->kind));
    else if (a->kind >= 0 && a->kind < CT_ACT__COUNT)
        snprintf(buf, size, "%s(mb %d, chunk %d)", ct_act_name(a->kind), a->mb, a->chunk);
    else
        snprintf(buf, size, "kind %d(mb %d, chunk %d)", (int)a->kind, a->mb, a->chunk);
    return buf;
}

ct_status ct_sched_parse(const char *name, ct_sched_kind *out, ct_err *err) {
    for (int k = 0; name && k < CT_SCHED__COUNT; k++)
        if (!strcmp(name, sched_names[k])) {
            *out = (ct_sched_kind)k;
            return CT_OK;
        }
    return CT_ERR(err, CT_ERR_ARG, "unknown pipeline schedule \"%s\" (gpipe, 1f1b, interleaved, zb1)",
                  name ? name : "(null)");
}

void ct_sched_free(ct_schedule *s) {
    if (!s) return;
    for (int i = 0; s->list && i < s->stages; i++) free(s->list[i]);
    free(s->list);
    free(s->n);
    free(s);
}

/* ------------------------------------------------------------------ building lists */

static void push(ct_schedule *s, int st, ct_act_kind k, int mb, int c) {
    s->list[st][s->n[st]++] = (ct_action){k, mb, c};
}

/* FWD(mb, c) on its stage with its receive before and its send after. */
static void emit_fwd(ct_schedule *s, int mb, int c) {
    int N = s->stages, st = c % N, last = s->virt * N - 1;
    if (N > 1 && c > 0) push(s, st, CT_ACT_RECV_ACT, mb, c);
    push(s, st, CT_ACT_FWD, mb, c);
    if (N > 1 && c < last) push(s, st, CT_ACT_SEND_ACT, mb, c);
}

/* BWD or BWD_INPUT of (mb, c), with the gradient's receive before and the input gradient's send
 * after. */
static void emit_bwd(ct_schedule *s, int mb, int c, ct_act_kind k) {
    int N = s->stages, st = c % N, last = s->virt * N - 1;
    if (N > 1 && c < last) push(s, st, CT_ACT_RECV_GRAD, mb, c);
    push(s, st, k, mb, c);
    if (N > 1 && c > 0) push(s, st, CT_ACT_SEND_GRAD, mb, c);
}

/* GPipe: m forwards, then m backwards in the same micro-batch order (mb 0 first: its activations
 * are the oldest; the bubble is the same either way). */
static void gen_gpipe(ct_schedule *s) {
    for (int st = 0; st < s->stages; st++) {
        for (int mb = 0; mb < s->micro; mb++) emit_fwd(s, mb, st);
        for (int mb = 0; mb < s->micro; mb++) emit_bwd(s, mb, st, CT_ACT_BWD);
    }
}

/* 1F1B (PipeDream-Flush, Narayanan et al. 2021): stage st runs w = min(N-st-1, m) warm-up
 * forwards, then forward w+i and backward i alternately, then the remaining w backwards. Stage st
 * holds at most w + 1 = min(N-st, m) micro-batches. With N = 1 this is the trivial list. */
static void gen_1f1b(ct_schedule *s) {
    int N = s->stages, m = s->micro;
    for (int st = 0; st < N; st++) {
        int w = N - st - 1 < m ? N - st - 1 : m;
        for (int i = 0; i < w; i++) emit_fwd(s, i, st);
        for (int i = 0; i < m - w; i++) {
            emit_fwd(s, w + i, st);
            emit_bwd(s, i, st, CT_ACT_BWD);
        }
        for (int i = m - w; i < m; i++) emit_bwd(s, i, st, CT_ACT_BWD);
    }
}

/* Interleaved 1F1B, Megatron-LM's order (forward_backward_pipelining_with_interleaving). Stage st
 * runs v*m forward and v*m backward "virtual micro-batches" k: in groups of N*v, micro-batches
 * group*N .. group*N+N-1 go through local chunk 0, then 1, ... (forward) or v-1, v-2, ...
 * (backward). Warm-up: 2(N-st-1) + (v-1)N forwards (all of them when m == N), then forward
 * warm+i and backward i alternately, then the rest of the backwards. */
static void interleaved_op(const ct_schedule *s, int st, int k, int fwd, int *mb, int *c) {
    int N = s->stages, v = s->virt, r = k % (N * v), j = r / N;
    *mb = k / (N * v) * N + r % N;
    *c = (fwd ? j : v - 1 - j) * N + st;
}

static void gen_interleaved(ct_schedule *s) {
    int N = s->stages, m = s->micro, v = s->virt, total = v * m, mb, c;
    for (int st = 0; st < N; st++) {
        int warm = m == N ? total : 2 * (N - st - 1) + (v - 1) * N;
        if (warm > total) warm = total;
        for (int k = 0; k < warm; k++) {
            interleaved_op(s, st, k, 1, &mb, &c);
            emit_fwd(s, mb, c);
        }
        for (int i = 0; i < total - warm; i++) {
            interleaved_op(s, st, warm + i, 1, &mb, &c);
            emit_fwd(s, mb, c);
            interleaved_op(s, st, i, 0, &mb, &c);
            emit_bwd(s, mb, c, CT_ACT_BWD);
        }
        for (int k = total - warm; k < total; k++) {
            interleaved_op(s, st, k, 0, &mb, &c);
            emit_bwd(s, mb, c, CT_ACT_BWD);
        }
    }
}

/* ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", section 2.1): 1F1B with the backward
 * split, where B stays on the critical path and each stage starts its W passes later the more
 * warm-up forwards it has, so W fills the cool-down bubble. Memory as the paper states it: stage st
 * holds at most N-st micro-batches with full activations (F done, B not: 1F1B's bound) and at most N
 * in flight (F done, W not): every stage keeps N in flight, which is 1F1B's peak (stage 0's), and
 * the later stages' extra ones hold only W's inputs. Bubble (N-1)(F+B-W) per stage instead of
 * 1F1B's (N-1)(F+B+W): a third at F = B = W.
 * The order is the one each stage takes running greedily at unit costs (F = B = W = 1, no
 * latency) under those two bounds, priority F > B > W, micro-batches in order within each kind.
 * For N = 4, m = 8 that gives the paper's figure 3 (top): stage 3 runs F0 B0 F1 B1 F2 B2 F3 B3 W0
 * F4 B4 W1 ... B7 W4 W5 W6 W7 (W lags B by st micro-batches), and a makespan of 3m + N - 1 for every
 * m >= N (checked for N <= 8, m <= 32 by the tests; B > F > W or W-first priorities miss it for
 * many (N, m)). The time-stepped run is exact: at unit costs every event falls on an integer time and
 * a choice at time t depends only on events ended by t. */
static ct_status gen_zb1(ct_schedule *s, ct_err *err) {
    ct_status st = CT_OK;
    int N = s->stages, m = s->micro;
    int *f_end = ct_malloc(sizeof(int) * (size_t)N * (size_t)m); /* [stage][mb]: end time of F, INT_MAX */
    int *b_end = ct_malloc(sizeof(int) * (size_t)N * (size_t)m);
    int *nxt = ct_calloc((size_t)N * 4, sizeof(int)); /* per stage: next F, next B, next W, busy until */
    if (!f_end || !b_end || !nxt) {
        st = CT_ERR(err, CT_ERR_NOMEM, "ct_sched_make: out of memory");
        goto cleanup;
    }
    for (long i = 0; i < (long)N * m; i++) f_end[i] = b_end[i] = INT_MAX;
    long left = 3L * N * m, t_max = 16L * (N + m) + 64; /* far above any makespan (3m + N - 1) */
    for (int t = 0; left > 0; t++) {
        if (t > t_max) { /* cannot happen: the greedy always progresses; say so if it does */
            st = CT_ERR(err, CT_ERR_STATE, "ct_sched_make: zb1 generator stalled at time %d", t);
            goto cleanup;
        }
        for (int p = 0; p < N; p++) {
            int *f = &nxt[4 * p], *b = f + 1, *w = f + 2, *busy = f + 3;
            if (*busy > t) continue;
            if (*f < m && *f - *b < N - p && *f - *w < N && (p == 0 || f_end[(p - 1) * m + *f] <= t)) {
                f_end[p * m + *f] = t + 1;
                emit_fwd(s, *f, p);
                ++*f;
            } else if (*b < *f && f_end[p * m + *b] <= t &&
                       (p == N - 1 || b_end[(p + 1) * m + *b] <= t)) {
                b_end[p * m + *b] = t + 1;
                emit_bwd(s, *b, p, CT_ACT_BWD_INPUT);
                ++*b;
            } else if (*w < *b && b_end[p * m + *w] <= t) {
                push(s, p, CT_ACT_BWD_WEIGHT, *w, p);
                ++*w;
            } else {
                continue; /* idle at t */
            }
            *busy = t + 1;
            left--;
        }
    }
cleanup:
    free(f_end);
    free(b_end);
    free(nxt);
    return st;
}

ct_status ct_sched_make(ct_sched_kind kind, int stages, int micro, int virt, ct_schedule **out,
                        ct_err *err) {
    ct_status st = CT_OK;
    ct_schedule *s = NULL;
    if (!out) return CT_ERR(err, CT_ERR_ARG, "ct_sched_make: out is NULL");
    *out = NULL;
    if (virt == 0) virt = 1;
    if ((int)kind < 0 || kind >= CT_SCHED__COUNT)
        return CT_ERR(err, CT_ERR_ARG, "ct_sched_make: unknown schedule kind %d", (int)kind);
    if (stages < 1 || micro < 1 || virt < 1)
        return CT_ERR(err, CT_ERR_ARG,
                      "ct_sched_make: %s needs stages, micro-batches and virtual stages >= 1 "
                      "(got %d, %d, %d)", ct_sched_name(kind), stages, micro, virt);
    if ((long long)stages * micro * virt > (1LL << 24))
        return CT_ERR(err, CT_ERR_ARG, "ct_sched_make: %d stages x %d micro-batches x %d chunks is "
                      "too many actions", stages, micro, virt);
    if (kind == CT_SCHED_TRIVIAL && stages != 1)
        return CT_ERR(err, CT_ERR_ARG, "ct_sched_make: the trivial schedule is for one stage, not %d "
                      "(pick gpipe, 1f1b, interleaved or zb1)", stages);
    if (kind != CT_SCHED_INTERLEAVED && virt != 1)
        return CT_ERR(err, CT_ERR_ARG, "ct_sched_make: %s has one chunk per stage; %d virtual stages "
                      "need the interleaved schedule", ct_sched_name(kind), virt);
    if (kind == CT_SCHED_INTERLEAVED && micro % stages)
        return CT_ERR(err, CT_ERR_ARG, "ct_sched_make: interleaved needs micro-batches a multiple of "
                      "the stages (%d micro-batches, %d stages): micro-batches go through the chunks "
                      "in groups of %d", micro, stages, stages);
    s = ct_calloc(1, sizeof *s);
    if (!s) return CT_ERR(err, CT_ERR_NOMEM, "ct_sched_make: out of memory");
    s->kind = kind;
    s->stages = stages;
    s->micro = micro;
    s->virt = virt;
    s->n = ct_calloc((size_t)stages, sizeof *s->n);
    s->list = ct_calloc((size_t)stages, sizeof *s->list);
    if (!s->n || !s->list) {
        st = CT_ERR(err, CT_ERR_NOMEM, "ct_sched_make: out of memory");
        goto cleanup;
    }
    /* per (mb, chunk): RECV_ACT, FWD, SEND_ACT, RECV_GRAD, B, SEND_GRAD, W; then sync and step */
    size_t cap = (size_t)micro * (size_t)virt * 7 + 2;
    for (int i = 0; i < stages; i++)
        if (!(s->list[i] = ct_malloc(cap * sizeof(ct_action)))) {
            st = CT_ERR(err, CT_ERR_NOMEM, "ct_sched_make: out of memory");
            goto cleanup;
        }
    switch (kind) {
    case CT_SCHED_TRIVIAL:
    case CT_SCHED_1F1B: gen_1f1b(s); break;
    case CT_SCHED_GPIPE: gen_gpipe(s); break;
    case CT_SCHED_INTERLEAVED: gen_interleaved(s); break;
    default: CT_CHECK(gen_zb1(s, err)); break;
    }
    for (int i = 0; i < stages; i++) {
        push(s, i, CT_ACT_GRAD_SYNC, -1, -1);
        push(s, i, CT_ACT_OPT_STEP, -1, -1);
    }
    *out = s;
    return CT_OK;
cleanup:
    ct_sched_free(s);
    return st;
}
