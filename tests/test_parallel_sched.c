/* test_parallel_sched.c - pipeline schedules as data: generators, validator, simulator (no MPI, no
 * devices).
 *
 * - Every generator for N = 1..8 stages, m = 1..32 micro-batches (interleaved: v = 1..4, m a
 *   multiple of N) gives lists the validator accepts, with the counts the schedule implies.
 * - Unit costs (F 1, B 2 = B_in 1 + B_w 1, no latency): bubble (N-1)/(m+N-1) for gpipe and 1f1b,
 *   (N-1)/(v*m+N-1) for interleaved, (N-1)/(3m+N-1) for zb1 when m >= N (ZB-H1's (N-1)(F+B-W)), and
 *   zb1 <= 1f1b always, < when N >= 2 and m >= N; peak live: 1f1b min(N-s, m), gpipe m, zb1
 *   min(N, m) on every stage (1F1B's peak); timelines consistent; a latency adds 2(N-1) hops to
 *   GPipe.
 * - Corrupted lists are refused with the stage, the action index and the action in the message: a
 *   dropped receive, swapped sends (breaking local order, and keeping it but breaking the channel
 *   order), a BWD before its FWD, a receive on the wrong stage, a dropped W, a deadlock, a missing
 *   OPT_STEP, out-of-range fields.
 * - The trivial list for m = 1..4; names and parsing; refused arguments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_parallel.h"
#include "ct_test.h"

static double bubble_of(ct_sched_kind k, int N, int m, int v) {
    ct_schedule *s = NULL;
    ct_sched_sim r = {0};
    ct_err err = {0};
    ct_sched_costs u = ct_sched_costs_unit();
    double b = -1;
    if (!ct_sched_make(k, N, m, v, &s, &err) && !ct_sched_simulate(s, &u, 0, &r, &err)) b = r.bubble;
    ct_sched_sim_free(&r);
    ct_sched_free(s);
    return b;
}

static int count_kind(const ct_schedule *s, int st, ct_act_kind k) {
    int n = 0;
    for (int i = 0; i < s->n[st]; i++) n += s->list[st][i].kind == k;
    return n;
}

static int find(const ct_schedule *s, int st, ct_act_kind k, int mb, int c) {
    for (int i = 0; i < s->n[st]; i++)
        if (s->list[st][i].kind == k && s->list[st][i].mb == mb && s->list[st][i].chunk == c) return i;
    return -1;
}

static void drop(ct_schedule *s, int st, int i) {
    memmove(&s->list[st][i], &s->list[st][i + 1], sizeof(ct_action) * (size_t)(s->n[st] - i - 1));
    s->n[st]--;
}

/* Insert at position i (lists have spare capacity only by accident: grow). */
static void insert(ct_schedule *s, int st, int i, ct_action a) {
    s->list[st] = realloc(s->list[st], sizeof(ct_action) * (size_t)(s->n[st] + 1));
    memmove(&s->list[st][i + 1], &s->list[st][i], sizeof(ct_action) * (size_t)(s->n[st] - i));
    s->list[st][i] = a;
    s->n[st]++;
}

static void swap(ct_schedule *s, int st, int i, int j) {
    ct_action t = s->list[st][i];
    s->list[st][i] = s->list[st][j];
    s->list[st][j] = t;
}

/* Every generator, every size: valid, counts right, bubbles and peaks as promised. */
static void test_generators(void) {
    ct_sched_costs u = ct_sched_costs_unit();
    char as[64];
    for (int kind = CT_SCHED_GPIPE; kind <= CT_SCHED_ZB1; kind++)
        for (int v = 1; v <= (kind == CT_SCHED_INTERLEAVED ? 4 : 1); v++)
            for (int N = 1; N <= 8; N++)
                for (int m = 1; m <= 32; m++) {
                    if (kind == CT_SCHED_INTERLEAVED && m % N) continue;
                    ct_schedule *s = NULL;
                    ct_sched_sim r = {0};
                    ct_err err = {0};
                    int ok = ct_sched_make((ct_sched_kind)kind, N, m, v, &s, &err) == CT_OK;
                    CT_ASSERT_MSG(ok, "make %s N %d m %d v %d: %s", ct_sched_name(kind), N, m, v, err.msg);
                    if (!ok) continue;
                    ok = ct_sched_validate(s, &err) == CT_OK;
                    CT_ASSERT_MSG(ok, "validate %s N %d m %d v %d: %s", ct_sched_name(kind), N, m, v,
                                  err.msg);
                    ok = ok && ct_sched_simulate(s, &u, kind == CT_SCHED_ZB1, &r, &err) == CT_OK;
                    CT_ASSERT_MSG(ok, "simulate %s N %d m %d v %d: %s", ct_sched_name(kind), N, m, v,
                                  err.msg);
                    if (!ok) {
                        ct_sched_free(s);
                        continue;
                    }
                    int C = v * N, split = kind == CT_SCHED_ZB1;
                    for (int st = 0; st < N; st++) {
                        int chunks = v; /* chunks on this stage */
                        int first = st == 0;
                        CT_ASSERT_EQ_INT(count_kind(s, st, CT_ACT_FWD), m * chunks);
                        CT_ASSERT_EQ_INT(count_kind(s, st, split ? CT_ACT_BWD_INPUT : CT_ACT_BWD), m * chunks);
                        CT_ASSERT_EQ_INT(count_kind(s, st, CT_ACT_BWD_WEIGHT), split ? m * chunks : 0);
                        /* a stage sends activations for each chunk but the model's last */
                        int sends = N == 1 ? 0 : m * (chunks - (st == (C - 1) % N));
                        int recvs = N == 1 ? 0 : m * (chunks - first);
                        CT_ASSERT_EQ_INT(count_kind(s, st, CT_ACT_SEND_ACT), sends);
                        CT_ASSERT_EQ_INT(count_kind(s, st, CT_ACT_RECV_ACT), recvs);
                        CT_ASSERT_EQ_INT(count_kind(s, st, CT_ACT_RECV_GRAD), sends);
                        CT_ASSERT_EQ_INT(count_kind(s, st, CT_ACT_SEND_GRAD), recvs);
                        CT_ASSERT_EQ_INT(s->list[st][s->n[st] - 2].kind, CT_ACT_GRAD_SYNC);
                        CT_ASSERT_EQ_INT(s->list[st][s->n[st] - 1].kind, CT_ACT_OPT_STEP);
                        int lim1 = N - st < m ? N - st : m, limN = N < m ? N : m;
                        if (kind == CT_SCHED_1F1B)
                            CT_ASSERT_MSG(r.peak_live[st] == lim1, "1f1b N %d m %d stage %d peak %d, want %d",
                                          N, m, st, r.peak_live[st], lim1);
                        if (kind == CT_SCHED_GPIPE) CT_ASSERT_EQ_INT(r.peak_live[st], m);
                        if (kind == CT_SCHED_ZB1) /* 1F1B's peak (stage 0's), on every stage */
                            CT_ASSERT_MSG(r.peak_live[st] == limN, "zb1 N %d m %d stage %d peak %d, want %d",
                                          N, m, st, r.peak_live[st], limN);
                        CT_ASSERT(r.stage_bubble[st] >= -1e-12 && r.stage_bubble[st] < 1);
                    }
                    double want = -1;
                    if (kind == CT_SCHED_GPIPE || kind == CT_SCHED_1F1B)
                        want = (double)(N - 1) / (m + N - 1);
                    if (kind == CT_SCHED_INTERLEAVED) want = (double)(N - 1) / (v * m + N - 1);
                    if (kind == CT_SCHED_ZB1 && m >= N) want = (double)(N - 1) / (3 * m + N - 1);
                    if (want >= 0)
                        CT_ASSERT_MSG(fabs(r.bubble - want) < 1e-9, "%s N %d m %d v %d: bubble %.12f, "
                                      "want %.12f", ct_sched_name(kind), N, m, v, r.bubble, want);
                    if (kind == CT_SCHED_ZB1) {
                        double b1 = bubble_of(CT_SCHED_1F1B, N, m, 1);
                        int zpk = 0;
                        for (int st = 0; st < N; st++) zpk = r.peak_live[st] > zpk ? r.peak_live[st] : zpk;
                        CT_ASSERT_MSG(r.bubble <= b1 + 1e-12, "zb1 N %d m %d: %.6f > 1f1b %.6f", N, m,
                                      r.bubble, b1);
                        if (N >= 2 && m >= N)
                            CT_ASSERT_MSG(r.bubble < b1 - 1e-9, "zb1 N %d m %d: %.6f not below 1f1b %.6f",
                                          N, m, r.bubble, b1);
                        CT_ASSERT_EQ_INT(zpk, N < m ? N : m); /* 1F1B's peak, stage 0's */
                        /* the timeline: actions in order, compute lasting its cost, no overlap */
                        for (int st = 0; st < N; st++)
                            for (int i = 0; i < s->n[st]; i++) {
                                const ct_action *a = &s->list[st][i];
                                double d = r.end[st][i] - r.start[st][i];
                                double c = a->kind == CT_ACT_FWD || a->kind == CT_ACT_BWD_INPUT ||
                                           a->kind == CT_ACT_BWD_WEIGHT ? 1 : -1;
                                if (c > 0) CT_ASSERT_MSG(d == c, "stage %d action %d %s lasts %g", st, i,
                                                         ct_act_str(a, as, sizeof as), d);
                                if (i) CT_ASSERT(r.start[st][i] >= r.end[st][i - 1]);
                                CT_ASSERT(r.end[st][i] <= r.makespan);
                            }
                    }
                    ct_sched_sim_free(&r);
                    ct_sched_free(s);
                }
}

/* The schedules' shapes, spelled out for a small case. */
static void test_shapes(void) {
    ct_schedule *s = NULL;
    ct_err err = {0};
    char as[64];
    /* 1F1B N 4, m 8, stage 1: two warm-up forwards, then F B pairs */
    CT_ASSERT_OK(ct_sched_make(CT_SCHED_1F1B, 4, 8, 1, &s, &err), err.msg);
    if (s) {
        const char *want[] = {"RECV_ACT(mb 0, chunk 1)", "FWD(mb 0, chunk 1)", "SEND_ACT(mb 0, chunk 1)",
                              "RECV_ACT(mb 1, chunk 1)", "FWD(mb 1, chunk 1)", "SEND_ACT(mb 1, chunk 1)",
                              "RECV_ACT(mb 2, chunk 1)", "FWD(mb 2, chunk 1)", "SEND_ACT(mb 2, chunk 1)",
                              "RECV_GRAD(mb 0, chunk 1)", "BWD(mb 0, chunk 1)", "SEND_GRAD(mb 0, chunk 1)",
                              "RECV_ACT(mb 3, chunk 1)"};
        for (int i = 0; i < (int)(sizeof want / sizeof want[0]); i++)
            CT_ASSERT_MSG(!strcmp(ct_act_str(&s->list[1][i], as, sizeof as), want[i]),
                          "1f1b stage 1 action %d is %s, want %s", i, as, want[i]);
        CT_ASSERT_EQ_INT(s->n[3], 8 * 4 + 2); /* last stage: RECV_ACT FWD BWD SEND_GRAD per mb */
    }
    ct_sched_free(s);
    s = NULL;
    /* ZB-H1 N 4, m 8, last stage: W lags B by 3 micro-batches, four W's at the end */
    CT_ASSERT_OK(ct_sched_make(CT_SCHED_ZB1, 4, 8, 1, &s, &err), err.msg);
    if (s) {
        char got[512] = "";
        for (int i = 0; i < s->n[3]; i++) {
            const ct_action *a = &s->list[3][i];
            const char *l = a->kind == CT_ACT_FWD ? "F" : a->kind == CT_ACT_BWD_INPUT ? "B"
                          : a->kind == CT_ACT_BWD_WEIGHT ? "W" : NULL;
            if (l) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%d ", l, a->mb);
        }
        CT_ASSERT_STR_CONTAINS(got, "F0 B0 F1 B1 F2 B2 F3 B3 W0 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 W5 W6 W7 ");
    }
    ct_sched_free(s);
    s = NULL;
    /* interleaved N 2, m 4, v 2: stage 0 runs chunks 0 and 2, Megatron's warm-up of 2(N-1)+(v-1)N */
    CT_ASSERT_OK(ct_sched_make(CT_SCHED_INTERLEAVED, 2, 4, 2, &s, &err), err.msg);
    if (s) {
        char got[512] = "";
        for (int i = 0; i < s->n[0]; i++) {
            const ct_action *a = &s->list[0][i];
            if (a->kind == CT_ACT_FWD || a->kind == CT_ACT_BWD)
                snprintf(got + strlen(got), sizeof got - strlen(got), "%s%d.%d ",
                         a->kind == CT_ACT_FWD ? "F" : "B", a->mb, a->chunk);
        }
        CT_ASSERT_STR_CONTAINS(got, "F0.0 F1.0 F0.2 F1.2 F2.0 B0.2 F3.0 B1.2 F2.2 B0.0 F3.2 B1.0 B2.2 "
                                    "B3.2 B2.0 B3.0 ");
    }
    ct_sched_free(s);
}

/* The plain data-parallel step: F, B per micro-batch, sync, step. */
static void test_trivial(void) {
    ct_sched_costs u = ct_sched_costs_unit();
    for (int m = 1; m <= 4; m++) {
        ct_schedule *s = NULL;
        ct_sched_sim r = {0};
        ct_err err = {0};
        CT_ASSERT_OK(ct_sched_make(CT_SCHED_TRIVIAL, 1, m, 1, &s, &err), err.msg);
        if (!s) continue;
        CT_ASSERT_EQ_INT(s->n[0], 2 * m + 2);
        for (int mb = 0; mb < m; mb++) {
            CT_ASSERT_EQ_INT(s->list[0][2 * mb].kind, CT_ACT_FWD);
            CT_ASSERT_EQ_INT(s->list[0][2 * mb + 1].kind, CT_ACT_BWD);
            CT_ASSERT_EQ_INT(s->list[0][2 * mb].mb, mb);
            CT_ASSERT_EQ_INT(s->list[0][2 * mb + 1].chunk, 0);
        }
        CT_ASSERT_OK(ct_sched_validate(s, &err), err.msg);
        CT_ASSERT_OK(ct_sched_simulate(s, &u, 1, &r, &err), err.msg);
        CT_ASSERT_NEAR(r.makespan, 3 * m, 0);
        CT_ASSERT_NEAR(r.bubble, 0, 0);
        CT_ASSERT_EQ_INT(r.peak_live ? r.peak_live[0] : -1, 1);
        CT_ASSERT(r.start && r.end && r.end[0][s->n[0] - 1] == 3 * m);
        ct_sched_sim_free(&r);
        ct_sched_sim_free(&r); /* twice: zeroed */
        ct_sched_free(s);
    }
    ct_sched_free(NULL);
    ct_sched_sim_free(NULL);
}

/* Latency: in GPipe every message is on the critical path: 2(N-1) hops. */
static void test_latency(void) {
    for (int N = 2; N <= 5; N++) {
        int m = 6;
        ct_schedule *s = NULL;
        ct_sched_sim r = {0};
        ct_err err = {0};
        ct_sched_costs c = ct_sched_costs_unit();
        c.comm = 0.25;
        CT_ASSERT_OK(ct_sched_make(CT_SCHED_GPIPE, N, m, 1, &s, &err), err.msg);
        CT_ASSERT_OK(ct_sched_simulate(s, &c, 1, &r, &err), err.msg);
        if (r.start) {
            CT_ASSERT_NEAR(r.makespan, 3 * m + 3 * (N - 1) + 2 * (N - 1) * c.comm, 1e-12);
            /* a receive ends no earlier than its send's post + latency */
            for (int st = 1; st < N; st++) {
                int i = find(s, st, CT_ACT_RECV_ACT, 2, st), j = find(s, st - 1, CT_ACT_SEND_ACT, 2, st - 1);
                CT_ASSERT(i >= 0 && j >= 0 && r.end[st][i] >= r.start[st - 1][j] + c.comm - 1e-12);
            }
        }
        ct_sched_sim_free(&r);
        ct_sched_free(s);
    }
}

/* Per-stage costs, send and receive time: GPipe N 2, m 1 worked by hand. Stage 0: F [0,1], send
 * [1,1.5] (posted 1.5); stage 1: receive ends 1.5 + comm 1 + recv 0.25 = 2.75, F [2.75,5.75], B
 * [5.75,11.75], send [11.75,12.25]; stage 0: receive 12.25 + comm 2 (stage 1's) + 0.25 = 14.5, B
 * [14.5,16.5]. Compute 3 + 9 in 2 x 16.5. */
static void test_stage_costs(void) {
    ct_schedule *s = NULL;
    ct_sched_sim r = {0};
    ct_err err = {0};
    ct_sched_costs c[2] = {{.fwd = 1, .bwd = 2, .comm = 1, .send = 0.5, .recv = 0.25},
                           {.fwd = 3, .bwd = 6, .comm = 2, .send = 0.5, .recv = 0.25}};
    CT_ASSERT_OK(ct_sched_make(CT_SCHED_GPIPE, 2, 1, 1, &s, &err), err.msg);
    CT_ASSERT_OK(ct_sched_simulate_stages(s, c, 1, &r, &err), err.msg);
    if (r.start) {
        CT_ASSERT_NEAR(r.makespan, 16.5, 1e-12);
        CT_ASSERT_NEAR(r.bubble, 1 - 12.0 / 33.0, 1e-12);
        CT_ASSERT_NEAR(r.stage_bubble[0], 1 - 3 / 16.5, 1e-12);
        CT_ASSERT_NEAR(r.stage_bubble[1], 1 - 9 / 16.5, 1e-12);
        int i = find(s, 1, CT_ACT_FWD, 0, 1);
        CT_ASSERT(i >= 0 && fabs(r.start[1][i] - 2.75) < 1e-12);
    }
    ct_sched_sim_free(&r);
    /* a replay of each action's own duration: the costs above, action by action */
    {
        double *dur[2], *row0 = NULL, *row1 = NULL;
        ct_sched_sim rp = {0};
        dur[0] = row0 = calloc((size_t)s->n[0], sizeof(double));
        dur[1] = row1 = calloc((size_t)s->n[1], sizeof(double));
        for (int st = 0; st < 2; st++)
            for (int i = 0; i < s->n[st]; i++) {
                ct_act_kind k = s->list[st][i].kind;
                dur[st][i] = k == CT_ACT_FWD ? c[st].fwd : k == CT_ACT_BWD ? c[st].bwd
                             : k == CT_ACT_SEND_ACT || k == CT_ACT_SEND_GRAD ? c[st].send
                             : k == CT_ACT_RECV_ACT || k == CT_ACT_RECV_GRAD ? c[st].recv : 0;
            }
        /* comm differs per stage above (1, 2): the replay takes one latency; 1.5 on both gives
         * the same makespan (one message each way on the critical path) */
        CT_ASSERT_OK(ct_sched_replay(s, (const double *const *)dur, 1.5, 0, &rp, &err), err.msg);
        CT_ASSERT_NEAR(rp.makespan, 16.5, 1e-12);
        CT_ASSERT_NEAR(rp.bubble, 1 - 12.0 / 33.0, 1e-12);
        dur[1][find(s, 1, CT_ACT_BWD, 0, 1)] = 7; /* one action longer: the makespan follows */
        ct_sched_sim_free(&rp);
        CT_ASSERT_OK(ct_sched_replay(s, (const double *const *)dur, 1.5, 0, &rp, &err), err.msg);
        CT_ASSERT_NEAR(rp.makespan, 17.5, 1e-12);
        ct_sched_sim_free(&rp);
        free(row0), free(row1);
    }
    /* the same cost on every stage is ct_sched_simulate */
    ct_sched_sim a = {0}, b = {0};
    ct_sched_costs u = ct_sched_costs_unit(), uu[4] = {u, u, u, u};
    ct_sched_free(s);
    s = NULL;
    CT_ASSERT_OK(ct_sched_make(CT_SCHED_ZB1, 4, 8, 1, &s, &err), err.msg);
    CT_ASSERT_OK(ct_sched_simulate(s, &u, 0, &a, &err), err.msg);
    CT_ASSERT_OK(ct_sched_simulate_stages(s, uu, 0, &b, &err), err.msg);
    CT_ASSERT(a.makespan == b.makespan && a.bubble == b.bubble);
    ct_sched_sim_free(&a);
    ct_sched_sim_free(&b);
    ct_sched_free(s);
}

typedef void (*corrupt_fn)(ct_schedule *s);
static int g_at; /* the action index a corruption expects in the message (-1: none) */

/* Make, corrupt, validate; the message must hold `fmt` (formatted with g_at) and every needle. */
static void expect_refused(const char *what, ct_sched_kind k, int N, int m, int v, corrupt_fn f,
                           const char *fmt, const char *const *needles) {
    ct_schedule *s = NULL;
    ct_err err = {0};
    ct_sched_sim r = {0};
    ct_sched_costs u = ct_sched_costs_unit();
    char first[256];
    CT_ASSERT_OK(ct_sched_make(k, N, m, v, &s, &err), err.msg);
    if (!s) return;
    g_at = -1;
    f(s);
    snprintf(first, sizeof first, fmt, g_at);
    ct_status st = ct_sched_validate(s, &err);
    CT_ASSERT_MSG(st == CT_ERR_ARG, "%s: validate returned %d", what, st);
    CT_ASSERT_MSG(strstr(err.msg, first), "%s: \"%s\" not in \"%s\"", what, first, err.msg);
    for (int i = 0; needles && needles[i]; i++)
        CT_ASSERT_MSG(strstr(err.msg, needles[i]), "%s: \"%s\" not in \"%s\"", what, needles[i], err.msg);
    /* the simulator refuses it alike and leaves nothing allocated */
    ct_err e2 = {0};
    CT_ASSERT_MSG(ct_sched_simulate(s, &u, 1, &r, &e2) == CT_ERR_ARG && !strcmp(e2.msg, err.msg),
                  "%s: simulate says \"%s\"", what, e2.msg);
    CT_ASSERT(r.peak_live == NULL && r.start == NULL);
    ct_sched_free(s);
}

/* 1F1B N 4 m 8, stage 2: drop RECV_ACT(mb 3, chunk 2); the FWD that needed it is named */
static void c_drop_recv(ct_schedule *s) {
    drop(s, 2, find(s, 2, CT_ACT_RECV_ACT, 3, 2));
    g_at = find(s, 2, CT_ACT_FWD, 3, 2);
}
/* stage 1: swap SEND_ACT(mb 1) and SEND_ACT(mb 2): mb 2's send now precedes its FWD */
static void c_swap_sends(ct_schedule *s) {
    int i = find(s, 1, CT_ACT_SEND_ACT, 1, 1), j = find(s, 1, CT_ACT_SEND_ACT, 2, 1);
    swap(s, 1, i, j);
    g_at = i;
}
/* GPipe N 2 m 4, stage 0: F0 S0 F1 S1 becomes F0 F1 S1 S0 (local order kept, channel order not) */
static void c_swap_sends_channel(ct_schedule *s) {
    int s0 = find(s, 0, CT_ACT_SEND_ACT, 0, 0), f1 = find(s, 0, CT_ACT_FWD, 1, 0);
    int s1 = find(s, 0, CT_ACT_SEND_ACT, 1, 0);
    ct_action F1 = s->list[0][f1], S0 = s->list[0][s0], S1 = s->list[0][s1];
    s->list[0][s0] = F1;
    s->list[0][f1] = S1;
    s->list[0][s1] = S0;
}
/* last stage: BWD(mb 0) before FWD(mb 0) */
static void c_bwd_first(ct_schedule *s) {
    int st = s->stages - 1, f = find(s, st, CT_ACT_FWD, 0, st), b = find(s, st, CT_ACT_BWD, 0, st);
    swap(s, st, f, b);
    g_at = f;
}
/* RECV_ACT(mb 2, chunk 1) moved from stage 1 to stage 2 (before stage 2's RECV_ACT of mb 2) */
static void c_wrong_stage(ct_schedule *s) {
    int i = find(s, 1, CT_ACT_RECV_ACT, 2, 1);
    ct_action a = s->list[1][i];
    drop(s, 1, i);
    g_at = find(s, 2, CT_ACT_RECV_ACT, 2, 2);
    insert(s, 2, g_at, a);
}
/* zb1: drop BWD_WEIGHT(mb 5, chunk 0); the BWD_INPUT left without it is named */
static void c_drop_w(ct_schedule *s) {
    drop(s, 0, find(s, 0, CT_ACT_BWD_WEIGHT, 5, 0));
    g_at = find(s, 0, CT_ACT_BWD_INPUT, 5, 0);
}
/* zb1: BWD_WEIGHT(mb 0) moved before its BWD_INPUT */
static void c_w_first(ct_schedule *s) {
    int w = find(s, 1, CT_ACT_BWD_WEIGHT, 0, 1);
    ct_action a = s->list[1][w];
    drop(s, 1, w);
    g_at = find(s, 1, CT_ACT_BWD_INPUT, 0, 1);
    insert(s, 1, g_at, a);
}
/* GPipe N 2 m 2, stage 0: RECV_GRAD(mb 0) moved before SEND_ACT(mb 0): each stage waits on the other */
static void c_deadlock(ct_schedule *s) {
    int rg = find(s, 0, CT_ACT_RECV_GRAD, 0, 0);
    ct_action a = s->list[0][rg];
    drop(s, 0, rg);
    insert(s, 0, find(s, 0, CT_ACT_SEND_ACT, 0, 0), a);
}
static void c_no_step(ct_schedule *s) { g_at = --s->n[1] - 1; }
static void c_no_ending(ct_schedule *s) { s->n[1] -= 2; }
static void c_bad_mb(ct_schedule *s) { s->list[1][4].mb = 99; g_at = 4; }
static void c_bad_kind(ct_schedule *s) { s->list[0][0].kind = (ct_act_kind)42; }
static void c_dup_fwd(ct_schedule *s) {
    g_at = find(s, 0, CT_ACT_FWD, 1, 0);
    s->list[0][g_at].mb = 0;
}

static void test_corrupt(void) {
    expect_refused("dropped receive", CT_SCHED_1F1B, 4, 8, 1, c_drop_recv,
                   "stage 2 action %d FWD(mb 3, chunk 2): its input is not received before it",
                   (const char *[]){"no RECV_ACT(mb 3, chunk 2)", NULL});
    expect_refused("swapped sends", CT_SCHED_1F1B, 4, 8, 1, c_swap_sends,
                   "stage 1 action %d SEND_ACT(mb 2, chunk 1): before FWD(mb 2, chunk 1)", NULL);
    expect_refused("swapped sends, channel order", CT_SCHED_GPIPE, 2, 4, 1, c_swap_sends_channel,
                   "stage 1 action 0 RECV_ACT(mb 0, chunk 1): it is receive 0 from stage 0",
                   (const char *[]){"send 1 to this stage", "SEND_ACT(mb 0, chunk 0)", "in the order sent",
                                    NULL});
    expect_refused("BWD before FWD", CT_SCHED_1F1B, 4, 8, 1, c_bwd_first,
                   "stage 3 action %d BWD(mb 0, chunk 3): before FWD(mb 0, chunk 3)", NULL);
    expect_refused("receive on the wrong stage", CT_SCHED_1F1B, 4, 8, 1, c_wrong_stage,
                   "stage 2 action %d RECV_ACT(mb 2, chunk 1): chunk 1 lives on stage 1", NULL);
    expect_refused("dropped W", CT_SCHED_ZB1, 3, 8, 1, c_drop_w,
                   "stage 0 action %d BWD_INPUT(mb 5, chunk 0): no BWD_WEIGHT(mb 5, chunk 0)", NULL);
    expect_refused("W before B", CT_SCHED_ZB1, 3, 8, 1, c_w_first,
                   "stage 1 action %d BWD_WEIGHT(mb 0, chunk 1): before BWD_INPUT(mb 0, chunk 1)", NULL);
    expect_refused("deadlock", CT_SCHED_GPIPE, 2, 2, 1, c_deadlock,
                   "deadlock", (const char *[]){
                       "stage 0 waits at action 1 RECV_GRAD(mb 0, chunk 0) for stage 1 action ",
                       "SEND_GRAD(mb 0, chunk 1)",
                       "stage 1 waits at action 0 RECV_ACT(mb 0, chunk 1) for stage 0 action 2 "
                       "SEND_ACT(mb 0, chunk 0)", NULL});
    expect_refused("no OPT_STEP", CT_SCHED_1F1B, 2, 3, 1, c_no_step,
                   "stage 1 action %d GRAD_SYNC: a list ends with GRAD_SYNC, OPT_STEP", NULL);
    expect_refused("no ending", CT_SCHED_1F1B, 2, 3, 1, c_no_ending,
                   "stage 1: the list must end with GRAD_SYNC, OPT_STEP", NULL);
    expect_refused("micro-batch out of range", CT_SCHED_1F1B, 4, 8, 1, c_bad_mb,
                   "stage 1 action %d FWD(mb 99, chunk 1): micro-batch outside 0..7", NULL);
    expect_refused("bad kind", CT_SCHED_GPIPE, 2, 2, 1, c_bad_kind,
                   "stage 0 action 0 kind 42(mb 0, chunk 0): unknown action kind 42", NULL);
    expect_refused("duplicate FWD", CT_SCHED_GPIPE, 1, 3, 1, c_dup_fwd,
                   "stage 0 action %d FWD(mb 0, chunk 0): a second FWD of (mb 0, chunk 0) (the first "
                   "is action 0)", NULL);
}

static void test_args(void) {
    ct_err err = {0};
    ct_schedule *s = (ct_schedule *)1;
    ct_sched_kind k;
    CT_ASSERT_EQ_INT(ct_sched_make(CT_SCHED_INTERLEAVED, 4, 6, 2, &s, &err), CT_ERR_ARG);
    CT_ASSERT(s == NULL);
    CT_ASSERT_STR_CONTAINS(err.msg, "multiple of the stages (6 micro-batches, 4 stages)");
    CT_ASSERT_EQ_INT(ct_sched_make(CT_SCHED_TRIVIAL, 2, 4, 1, &s, &err), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(err.msg, "one stage, not 2");
    CT_ASSERT_EQ_INT(ct_sched_make(CT_SCHED_1F1B, 2, 4, 2, &s, &err), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(err.msg, "2 virtual stages need the interleaved schedule");
    CT_ASSERT_EQ_INT(ct_sched_make(CT_SCHED_GPIPE, 0, 4, 1, &s, &err), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(err.msg, "(got 0, 4, 1)");
    CT_ASSERT_EQ_INT(ct_sched_make(CT_SCHED_ZB1, 3, 0, 1, &s, &err), CT_ERR_ARG);
    /* virt 0 is read as 1 */
    CT_ASSERT_OK(ct_sched_make(CT_SCHED_1F1B, 2, 2, 0, &s, &err), err.msg);
    CT_ASSERT(s && s->virt == 1);
    ct_sched_free(s);

    const char *names[] = {"trivial", "gpipe", "1f1b", "interleaved", "zb1"};
    for (int i = 0; i < CT_SCHED__COUNT; i++) {
        CT_ASSERT_OK(ct_sched_parse(names[i], &k, &err), err.msg);
        CT_ASSERT_EQ_INT(k, i);
        CT_ASSERT(!strcmp(ct_sched_name(k), names[i]));
    }
    CT_ASSERT_EQ_INT(ct_sched_parse("pipedream", &k, &err), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(err.msg, "\"pipedream\" (gpipe, 1f1b, interleaved, zb1)");
    CT_ASSERT(!strcmp(ct_sched_name((ct_sched_kind)99), "?"));
    CT_ASSERT(!strcmp(ct_act_name(CT_ACT_RECV_GRAD), "RECV_GRAD"));
    CT_ASSERT(!strcmp(ct_act_name(-1), "?"));
    char buf[64];
    ct_action a = {CT_ACT_GRAD_SYNC, -1, -1};
    CT_ASSERT(!strcmp(ct_act_str(&a, buf, sizeof buf), "GRAD_SYNC"));
    ct_sched_costs u = ct_sched_costs_unit();
    CT_ASSERT(u.fwd == 1 && u.bwd == 2 && u.bwd_input == 1 && u.bwd_weight == 1 && u.comm == 0);
    CT_ASSERT_EQ_INT(ct_sched_validate(NULL, &err), CT_ERR_ARG);
}

int main(int argc, char **argv) {
    if (argc > 1) { /* print one schedule: test_parallel_sched KIND N m [v] */
        ct_sched_kind k;
        ct_err err = {0};
        ct_schedule *s = NULL;
        ct_sched_sim r = {0};
        ct_sched_costs u = ct_sched_costs_unit();
        char as[64];
        if (argc < 4 || ct_sched_parse(argv[1], &k, &err) ||
            ct_sched_make(k, atoi(argv[2]), atoi(argv[3]), argc > 4 ? atoi(argv[4]) : 1, &s, &err) ||
            ct_sched_simulate(s, &u, 1, &r, &err)) {
            fprintf(stderr, "usage: test_parallel_sched [KIND N m [v]]: %s\n", err.msg);
            return 2;
        }
        for (int st = 0; st < s->stages; st++) {
            printf("stage %d (peak %d, idle %.3f):", st, r.peak_live[st], r.stage_bubble[st]);
            for (int i = 0; i < s->n[st]; i++)
                printf(" %s@%g", ct_act_str(&s->list[st][i], as, sizeof as), r.start[st][i]);
            printf("\n");
        }
        printf("makespan %g bubble %.6f\n", r.makespan, r.bubble);
        ct_sched_sim_free(&r);
        ct_sched_free(s);
        return 0;
    }
    test_args();
    test_trivial();
    test_shapes();
    test_latency();
    test_stage_costs();
    test_corrupt();
    test_generators();
    return ct_test_end("test_parallel_sched");
}
