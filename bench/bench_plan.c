/* bench_plan.c - the layout planner against measurement, in one run: the planner measures the
 * devices and links (as ct_plan does) and ranks every layout of the model that fits; then every
 * ranked layout is trained with the engine's own trainer and its step time measured; the
 * planner's order is compared with the measured one (Spearman's rank correlation) and its pick
 * with the measured best.
 *
 *   POCL_DEVICES="pthread pthread" mpiexec -n 2 build/bin/bench_plan --devices-per-rank 2 \
 *       --layers 4 --heads 4 --dim 128 --seq 64 --batch 8 --total-batch 2048 \
 *       --rounds 5 --steps 3 --json plan.json --markdown plan.md
 *
 * Measuring on a shared, noisy machine: the layouts take turns, round after round (each round
 * in another order: rotated, every other one reversed), each turn building the layout's
 * trainers, running --warmup untimed steps and --steps timed ones; a load that comes and goes
 * falls on every layout alike. A layout's figure is the median of all its timed steps (the
 * leader's step wall time; every worker's step ends in the same collectives), and beside it the
 * fastest of them (other users' load only adds time). Takes train_gpt's
 * model, batch and layout flags (a layout flag given pins that choice, as for ct_plan; the data
 * is a synthetic byte corpus unless --text/--data is given). Own flags: --rounds R (3),
 * --steps N per turn (3), --warmup N (1), --reps N (ct_plan's, 5), --limit N (the first N
 * ranked; 0 all), --json F, --markdown F. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_cl.h"
#include "ct_engine.h"
#include "ct_parallel.h"

typedef struct own {
    int rounds, steps, warmup, reps, limit;
    const char *json, *md;
} own;

static void take_own(int *argc, char **argv, own *o) {
    int k = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i], *v = i + 1 < *argc ? argv[i + 1] : NULL;
        if (v && !strcmp(a, "--rounds")) o->rounds = atoi(v), i++;
        else if (v && !strcmp(a, "--steps")) o->steps = atoi(v), i++;
        else if (v && !strcmp(a, "--warmup")) o->warmup = atoi(v), i++;
        else if (v && !strcmp(a, "--reps")) o->reps = atoi(v), i++;
        else if (v && !strcmp(a, "--limit")) o->limit = atoi(v), i++;
        else if (v && !strcmp(a, "--json")) o->json = v, i++;
        else if (v && !strcmp(a, "--markdown")) o->md = v, i++;
        else argv[k++] = argv[i];
    }
    *argc = k;
    argv[k] = NULL;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Average ranks (ties share), then Pearson's correlation of the ranks. */
static void ranks(const double *v, int n, double *r) {
    for (int i = 0; i < n; i++) {
        int less = 0, eq = 0;
        for (int j = 0; j < n; j++) less += v[j] < v[i], eq += v[j] == v[i];
        r[i] = less + (eq + 1) / 2.0;
    }
}
static double spearman(const double *a, const double *b, int n) {
    double *ra = malloc(sizeof(double) * (size_t)n), *rb = malloc(sizeof(double) * (size_t)n);
    ranks(a, n, ra);
    ranks(b, n, rb);
    double ma = 0, mb = 0, c = 0, va = 0, vb = 0;
    for (int i = 0; i < n; i++) ma += ra[i] / n, mb += rb[i] / n;
    for (int i = 0; i < n; i++)
        c += (ra[i] - ma) * (rb[i] - mb), va += (ra[i] - ma) * (ra[i] - ma), vb += (rb[i] - mb) * (rb[i] - mb);
    free(ra), free(rb);
    return va > 0 && vb > 0 ? c / sqrt(va * vb) : NAN;
}

typedef struct turn {
    ct_train_run *run;
    int steps, warmup;
    double *ms; /* the leader's timed steps */
    int n;
    ct_status st;
    char msg[CT_ERR_MSG_MAX];
} turn;

static void turn_worker(turn *tu, int thread) {
    ct_err err = {0};
    ct_trainer *t = NULL;
    ct_status st = ct_trainer_create(&t, tu->run, thread, &err);
    for (int s = 0; st == CT_OK && s < tu->warmup + tu->steps; s++) {
        ct_step_metrics sm;
        st = ct_trainer_step(t, &sm);
        if (st != CT_OK) snprintf(err.msg, sizeof err.msg, "%s", ct_trainer_errmsg(t));
        if (st == CT_OK && s >= tu->warmup && ct_trainer_leader(t)) tu->ms[tu->n++] = sm.ms;
    }
#pragma omp critical(bench_plan)
    if (st != CT_OK && tu->st == CT_OK) {
        tu->st = st;
        snprintf(tu->msg, sizeof tu->msg, "%s", err.msg);
    }
    ct_trainer_free(t);
}

int main(int argc, char **argv) {
    own o = {3, 3, 1, 5, 0, NULL, NULL};
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: bench_plan [train_gpt's model, batch and layout flags: a layout flag "
                   "pins that choice] [--rounds R (3)] [--steps N (3)] [--warmup N (1)] "
                   "[--reps N (5)] [--limit N (0: every ranked layout)] [--json F] "
                   "[--markdown F]\n"
                   "  e.g. POCL_DEVICES=\"pthread pthread\" mpiexec -n 2 bench_plan "
                   "--devices-per-rank 2 --layers 4 --heads 4 --dim 128 --seq 64 --batch 8 "
                   "--total-batch 2048\n");
            return 0;
        }
    take_own(&argc, argv, &o);
    ct_err err = {0};
    ct_train_params p = ct_train_params_default();
    if (ct_train_params_parse(&p, argc - 1, argv + 1, &err)) {
        fprintf(stderr, "bench_plan: %s\n", err.msg);
        return 2;
    }
    if (o.rounds < 1 || o.steps < 1 || o.warmup < 0 || o.reps < 1) {
        fprintf(stderr, "bench_plan: --rounds, --steps, --reps >= 1, --warmup >= 0\n");
        return 2;
    }
    ct_topo *topo = NULL;
    if (ct_topo_create(&topo, &argc, &argv, p.devices_per_rank, &err)) {
        fprintf(stderr, "bench_plan: %s\n", err.msg);
        return 2;
    }
    int W = ct_topo_world_size(topo), leader = ct_topo_rank(topo) == 0;
    ct_gpt_config cfg;
    if (ct_train_config(&p, &cfg, &err) != CT_OK) {
        fprintf(stderr, "bench_plan: %s\n", err.msg);
        ct_topo_free(topo);
        return 2;
    }
    /* 1. The planner, as ct_plan runs it on these workers */
    ct_plan_problem pb;
    ct_plan_problem_from_params(&pb, &p, &cfg, W, p.devices_per_rank);
    ct_plan_problem_fix(&pb, &p);
    ct_plan_needs *need = NULL;
    ct_plan_costs costs;
    ct_plan_result res;
    double mem_min = 0, alloc_min = 0, t0 = ct_time_now();
    if (ct_plan_needs_make(&pb, &need, &err) != CT_OK ||
        ct_plan_measure(topo, &p, &pb, need, W > 1, NULL, o.reps, NULL, &costs, &mem_min,
                        &alloc_min, &err) != CT_OK) {
        fprintf(stderr, "bench_plan: %s\n", err.msg);
        return 1;
    }
    if (pb.mem_cap <= 0) pb.mem_cap = mem_min;
    ct_plan_limit_alloc(&pb, alloc_min);
    if (ct_plan_rank(&pb, &costs, &res, &err) != CT_OK) {
        fprintf(stderr, "bench_plan: %s\n", err.msg);
        return 2;
    }
    double t_plan = ct_time_now() - t0;
    if (leader) {
        ct_plan_print(stdout, &pb, &costs, &res, 100);
        printf("planning took %.1f s\n", t_plan);
    }
    int n = res.nfit;
    if (o.limit > 0 && o.limit < n) n = o.limit;
    /* 2. The measurement: every layout in turn, round after round */
    static char corpus_text[1 << 20];
    uint64_t s = 12345;
    for (size_t i = 0; i < sizeof corpus_text; i++) { /* words of letters, spaces, newlines */
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        unsigned r = (unsigned)(s >> 33) % 32;
        corpus_text[i] = r < 26 ? (char)('a' + r) : r < 31 ? ' ' : '\n';
    }
    ct_cl_source corpus = {"synthetic", corpus_text, sizeof corpus_text};
    double **ms = calloc((size_t)n, sizeof *ms);
    int *nms = calloc((size_t)n, sizeof *nms);
    for (int i = 0; i < n; i++) ms[i] = calloc((size_t)(o.rounds * o.steps), sizeof(double));
    t0 = ct_time_now();
    for (int r = 0; r < o.rounds; r++)
        for (int j = 0; j < n; j++) {
            int i = (r % 2 ? n - 1 - j : j) + r;
            i %= n;
            ct_train_params q = p;
            ct_plan_apply(&res.e[i].lay, &q);
            q.steps = 1000000, q.eval_every = 0, q.sample_len = 0, q.peak_tflops = 1;
            q.metrics = "", q.save = "", q.trace = "";
            turn tu;
            memset(&tu, 0, sizeof tu);
            tu.steps = o.steps, tu.warmup = o.warmup, tu.ms = ms[i] + nms[i];
            ct_status st = ct_train_run_open(&tu.run, &q, topo, &corpus, 1, stderr, &err);
            if (st != CT_OK) {
                fprintf(stderr, "bench_plan: %s\n", err.msg);
                return 1;
            }
            if (q.devices_per_rank > 1) {
#pragma omp parallel num_threads(q.devices_per_rank)
                turn_worker(&tu, omp_get_thread_num());
            } else {
                turn_worker(&tu, 0);
            }
            ct_train_run_free(tu.run);
            if (tu.st != CT_OK) {
                fprintf(stderr, "bench_plan: %s\n", tu.msg);
                return 1;
            }
            nms[i] += tu.n;
            if (leader) {
                char name[96];
                ct_plan_layout_name(&res.e[i].lay, name, sizeof name);
                printf("round %d  %-26s", r + 1, name);
                for (int k = 0; k < tu.n; k++) printf(" %8.1f", tu.ms[k]);
                printf("  ms (predicted %.1f)\n", res.e[i].est.step_ms);
                fflush(stdout);
            }
        }
    /* 3. Medians, the rank correlation, the pick */
    if (leader) {
        /* two figures per layout: the median of its timed steps, and the fastest (other
         * users' load only adds time: the fastest is the least disturbed) */
        double *pred = calloc((size_t)n, sizeof(double)), *meas = calloc((size_t)n, sizeof(double));
        double *fast = calloc((size_t)n, sizeof(double));
        int best = 0, bestf = 0;
        for (int i = 0; i < n; i++) {
            qsort(ms[i], (size_t)nms[i], sizeof(double), cmp_d);
            meas[i] = nms[i] % 2 ? ms[i][nms[i] / 2] : 0.5 * (ms[i][nms[i] / 2 - 1] + ms[i][nms[i] / 2]);
            fast[i] = ms[i][0];
            pred[i] = res.e[i].est.step_ms;
            if (meas[i] < meas[best]) best = i;
            if (fast[i] < fast[bestf]) bestf = i;
        }
        double rho = spearman(pred, meas, n), gap = meas[0] / meas[best] - 1;
        double rhof = spearman(pred, fast, n), gapf = fast[0] / fast[bestf] - 1;
        char pick[96], bestn[96], bestfn[96];
        ct_plan_layout_name(&res.e[0].lay, pick, sizeof pick);
        ct_plan_layout_name(&res.e[best].lay, bestn, sizeof bestn);
        ct_plan_layout_name(&res.e[bestf].lay, bestfn, sizeof bestfn);
        printf("\n%4s  %-26s %12s %12s %9s %12s %9s\n", "rank", "layout", "predicted ms",
               "median ms", "its rank", "fastest ms", "its rank");
        for (int i = 0; i < n; i++) {
            char name[96];
            int mr = 1, fr = 1;
            for (int j = 0; j < n; j++) mr += meas[j] < meas[i], fr += fast[j] < fast[i];
            ct_plan_layout_name(&res.e[i].lay, name, sizeof name);
            printf("%4d  %-26s %12.1f %12.1f %9d %12.1f %9d\n", i + 1, name, pred[i], meas[i], mr,
                   fast[i], fr);
        }
        printf("median steps:  Spearman %.3f over %d layouts; pick %s measured %.1f ms, best %s %.1f "
               "ms (pick %.1f %% slower)\n",
               rho, n, pick, meas[0], bestn, meas[best], 100 * gap);
        printf("fastest steps: Spearman %.3f; pick %.1f ms, best %s %.1f ms (pick %.1f %% slower); "
               "measuring took %.0f s (%d rounds x %d steps)\n",
               rhof, fast[0], bestfn, fast[bestf], 100 * gapf, ct_time_now() - t0, o.rounds, o.steps);
        if (o.md) {
            FILE *f = fopen(o.md, "w");
            if (f) {
                fprintf(f, "| predicted rank | layout | predicted ms | median ms | its rank | "
                           "fastest ms | its rank |\n| ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
                for (int i = 0; i < n; i++) {
                    char name[96];
                    int mr = 1, fr = 1;
                    for (int j = 0; j < n; j++) mr += meas[j] < meas[i], fr += fast[j] < fast[i];
                    ct_plan_layout_name(&res.e[i].lay, name, sizeof name);
                    fprintf(f, "| %d | %s | %.1f | %.1f | %d | %.1f | %d |\n", i + 1, name, pred[i],
                            meas[i], mr, fast[i], fr);
                }
                fprintf(f, "\nMedian steps: Spearman %.3f over %d layouts; the pick (%s) %.1f ms, the "
                           "measured best (%s) %.1f ms: %+.1f %%. Fastest steps: Spearman %.3f; the "
                           "pick %.1f ms, the best (%s) %.1f ms: %+.1f %%.\n",
                        rho, n, pick, meas[0], bestn, meas[best], 100 * gap, rhof, fast[0], bestfn,
                        fast[bestf], 100 * gapf);
                fclose(f);
            }
        }
        if (o.json) {
            FILE *f = fopen(o.json, "w");
            if (f) {
                fprintf(f, "{\"workers\":%d,\"devices_per_rank\":%d,\"rounds\":%d,\"steps\":%d,"
                           "\"spearman\":%.4f,\"pick\":\"%s\",\"best\":\"%s\",\"pick_gap\":%.4f,"
                           "\"spearman_fastest\":%.4f,\"best_fastest\":\"%s\",\"pick_gap_fastest\":%.4f,"
                           "\"plan_seconds\":%.1f,\"layouts\":[",
                        W, p.devices_per_rank, o.rounds, o.steps, rho, pick, bestn, gap, rhof, bestfn,
                        gapf, t_plan);
                for (int i = 0; i < n; i++) {
                    char name[96];
                    ct_plan_layout_name(&res.e[i].lay, name, sizeof name);
                    fprintf(f, "%s{\"name\":\"%s\",\"predicted_ms\":%.3f,\"measured_ms\":%.3f,"
                               "\"fastest_ms\":%.3f,\"bubble\":%.4f,\"comm_share\":%.4f,\"steps_ms\":[",
                            i ? "," : "", name, pred[i], meas[i], fast[i], res.e[i].est.bubble,
                            res.e[i].est.comm_share);
                    for (int k = 0; k < nms[i]; k++) fprintf(f, "%s%.2f", k ? "," : "", ms[i][k]);
                    fprintf(f, "]}");
                }
                fprintf(f, "]}\n");
                fclose(f);
            }
        }
        free(pred), free(meas), free(fast);
    }
    for (int i = 0; i < n; i++) free(ms[i]);
    free(ms), free(nms);
    ct_plan_result_free(&res);
    ct_plan_costs_free(&costs);
    ct_plan_needs_free(need);
    ct_topo_free(topo);
    return 0;
}
