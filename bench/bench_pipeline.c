/* bench_pipeline - the pipeline bubble, measured from the executed timeline beside the simulated
 * one, for each schedule over a grid of stage and micro-batch counts.
 *
 *     POCL_DEVICES="pthread pthread pthread pthread" POCL_MAX_PTHREAD_COUNT=1 \
 *         bench_pipeline [--pp 2,4] [--micro 1,2,4,8,16] [--schedules gpipe,1f1b,interleaved,zb1]
 *                        [--steps S] [--layers L --dim C --heads NH --seq T --batch B]
 *                        [--device SPEC] [--workers-per-device W] [--csv]
 *
 * For each (pp, schedule, m) one process-local run: pp workers as threads of this process (one
 * device each, or W sharing one with --workers-per-device), a random byte model trained for S
 * steps on random bytes with m micro-batches of gradient accumulation, through the library's
 * trainer (the same executor as train_gpt --pp). The last three steps (never the first, which
 * compiles kernels) record the executed timeline (ct_exec_set_timeline: the device waited for
 * after every action, every step starting from a barrier over the pipeline), from which:
 *   measured  = 1 - (a stage's F/B/W time) / (the pipeline's span), the mean over stages;
 *   simulated = the simulator (ct_sched_simulate_stages) fed each stage's measured mean F, B
 *               (B_input, B_weight), send and receive times;
 *   unit      = the simulator at unit costs (F 1, B 2 = 1 + 1);
 *   replay    = the last timed step replayed (ct_sched_replay) with each of its actions' own
 *               durations, beside that step's measured bubble: on shared cores an action's cost
 *               depends on how many stages compute with it, which per-stage means cannot say.
 * Interleaved runs at v = 2 where m is a multiple of pp (skipped otherwise). One line per run;
 * --csv prints pp,schedule,v,m,measured,simulated,unit,rel_diff,last_measured,replayed,step_ms,
 * fwd_ms,bwd_ms instead.
 * MPI is started here (one rank; the workers are threads), so the topology can be re-made for
 * each pp. */
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine.h"
#include "ct_parallel.h"

#define DIE(...)                                                                 \
    do {                                                                         \
        fprintf(stderr, "bench_pipeline: " __VA_ARGS__);                         \
        fprintf(stderr, "\n");                                                   \
        fflush(stderr);                                                          \
        MPI_Abort(MPI_COMM_WORLD, 1);                                            \
    } while (0)

static int parse_list(const char *s, int *out, int cap) {
    int n = 0;
    while (s && *s && n < cap) {
        char *end = NULL;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1) return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

typedef struct bopts {
    int pp[8], npp, micro[16], nmicro, steps, L, C, NH, T, B, wpd, csv;
    const char *scheds[8];
    int nsched;
    const char *device;
} bopts;

/* One run: the trainers of every worker, S steps, the bubble report (leader's). */
static int run_one(ct_topo *topo, const bopts *o, int pp, const char *sched, int m,
                   const ct_cl_source *corpus, ct_pipeline_bubble *res) {
    ct_train_params p = ct_train_params_default();
    p.layers = o->L, p.dim = o->C, p.heads = o->NH, p.seq = o->T, p.batch = o->B;
    p.total_batch = m * o->B * o->T;
    p.steps = o->steps, p.warmup = 1, p.lr = 1e-3;
    p.eval_every = 0, p.sample_len = 0, p.log_every = 1 << 30;
    p.peak_tflops = 1;
    p.pp = pp, p.schedule = sched, p.virtual_stages = !strcmp(sched, "interleaved") ? 2 : 1;
    p.devices_per_rank = pp, p.workers_per_device = o->wpd;
    if (o->device) p.device = o->device;
    ct_err err = {0};
    ct_train_run *run = NULL;
    if (ct_train_run_open(&run, &p, topo, corpus, 1, stderr, &err) != CT_OK)
        DIE("pp %d %s m %d: %s", pp, sched, m, err.msg);
    int ok = 1;
#pragma omp parallel num_threads(pp)
    {
        ct_err e = {0};
        ct_trainer *t = NULL;
        if (ct_trainer_create(&t, run, omp_get_thread_num(), &e) != CT_OK) DIE("%s", e.msg);
        for (int s = 0; s < o->steps; s++) {
            ct_step_metrics sm;
            if (ct_trainer_step(t, &sm) != CT_OK) DIE("step %d: %s", s, ct_trainer_errmsg(t));
            if (!isfinite(sm.loss)) {
#pragma omp atomic write
                ok = 0;
            }
        }
        ct_pipeline_bubble b;
        if (ct_trainer_pipeline_report(t, &b) != CT_OK) DIE("%s", ct_trainer_errmsg(t));
        if (ct_trainer_leader(t)) *res = b;
        ct_trainer_free(t);
    }
    ct_train_run_free(run);
    return ok;
}

int main(int argc, char **argv) {
    bopts o;
    memset(&o, 0, sizeof o);
    o.npp = parse_list("2,4", o.pp, 8);
    o.nmicro = parse_list("1,2,4,8,16", o.micro, 16);
    o.steps = 5, o.L = 8, o.C = 128, o.NH = 4, o.T = 64, o.B = 8, o.wpd = 1;
    const char *scheds = "gpipe,1f1b,interleaved,zb1";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *ip = !strcmp(a, "--steps") ? &o.steps : !strcmp(a, "--layers") ? &o.L
                : !strcmp(a, "--dim") ? &o.C : !strcmp(a, "--heads") ? &o.NH
                : !strcmp(a, "--seq") ? &o.T : !strcmp(a, "--batch") ? &o.B
                : !strcmp(a, "--workers-per-device") ? &o.wpd : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            puts("bench_pipeline [--pp 2,4] [--micro 1,2,4,8,16] [--schedules gpipe,1f1b,interleaved,"
                 "zb1] [--steps S]\n               [--layers L] [--dim C] [--heads NH] [--seq T] "
                 "[--batch B] [--workers-per-device N]\n               [--device SPEC] [--csv]\n"
                 "  measured against simulated pipeline bubbles (see bench/bench_pipeline.c)");
            return 0;
        }
        if (!strcmp(a, "--csv")) o.csv = 1;
        else if (ip && v) *ip = atoi(v), i++;
        else if (!strcmp(a, "--pp") && v) o.npp = parse_list(v, o.pp, 8), i++;
        else if (!strcmp(a, "--micro") && v) o.nmicro = parse_list(v, o.micro, 16), i++;
        else if (!strcmp(a, "--schedules") && v) scheds = v, i++;
        else if (!strcmp(a, "--device") && v) o.device = v, i++;
        else {
            fprintf(stderr, "bench_pipeline: unknown or incomplete argument '%s' (see the header "
                            "of bench/bench_pipeline.c)\n", a);
            return 2;
        }
    }
    if (o.npp < 1 || o.nmicro < 1 || o.steps < 4) {
        fprintf(stderr, "bench_pipeline: --pp and --micro need lists of numbers >= 1, --steps >= 4\n");
        return 2;
    }
    char sbuf[256];
    snprintf(sbuf, sizeof sbuf, "%s", scheds);
    for (char *tok = strtok(sbuf, ","); tok && o.nsched < 8; tok = strtok(NULL, ",")) {
        ct_sched_kind k;
        ct_err e = {0};
        if (ct_sched_parse(tok, &k, &e) != CT_OK || k == CT_SCHED_TRIVIAL) {
            fprintf(stderr, "bench_pipeline: %s\n", e.msg[0] ? e.msg : "trivial is not a pipeline");
            return 2;
        }
        o.scheds[o.nsched++] = tok;
    }
    int prov = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &prov);
    /* random bytes: the data does not change the work */
    size_t nbytes = 1 << 20;
    char *text = malloc(nbytes);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < nbytes; i++) text[i] = (char)(32 + (ct_splitmix64_next(&x) % 95));
    ct_cl_source corpus = {"random", text, nbytes};
    if (o.csv)
        printf("pp,schedule,v,m,measured,simulated,unit,rel_diff,last_measured,replayed,step_ms,"
               "fwd_ms,bwd_ms\n");
    else
        printf("bench_pipeline: L=%d C=%d NH=%d T=%d, %d rows per micro-batch, %d steps (the last "
               "3 timed); bubble = idle / (stages x span)\n"
               "  pp schedule    v   m | measured simulated  unit | sim-meas | last step: "
               "measured replayed | step ms | stage 0 F ms B ms\n",
               o.L, o.C, o.NH, o.T, o.B, o.steps);
    fflush(stdout);
    for (int a = 0; a < o.npp; a++) {
        int pp = o.pp[a];
        ct_topo *topo = NULL;
        ct_err err = {0};
        if (ct_topo_create(&topo, &argc, &argv, pp, &err) != CT_OK) DIE("%s", err.msg);
        for (int si = 0; si < o.nsched; si++)
            for (int mi = 0; mi < o.nmicro; mi++) {
                const char *sched = o.scheds[si];
                int m = o.micro[mi], inter = !strcmp(sched, "interleaved");
                if (inter && (m % pp || 2 * pp > o.L)) continue; /* not a valid interleaved run */
                if (pp > o.L) continue;
                ct_pipeline_bubble b;
                memset(&b, 0, sizeof b);
                if (!run_one(topo, &o, pp, sched, m, &corpus, &b)) DIE("the loss is not finite");
                double bwd = b.bwd_ms[0] > 0 ? b.bwd_ms[0] : b.bwd_input_ms[0] + b.bwd_weight_ms[0];
                double rel = b.simulated > 0 ? (b.simulated - b.measured) / b.simulated : 0;
                if (o.csv)
                    printf("%d,%s,%d,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.2f,%.3f,%.3f\n", pp, sched,
                           inter ? 2 : 1, m, b.measured, b.simulated, b.unit, rel, b.last_measured,
                           b.last_replayed, b.makespan_ms, b.fwd_ms[0], bwd);
                else
                    printf("  %2d %-11s %d %3d | %8.3f %9.3f %5.3f | %+7.1f%% |   %8.3f %8.3f | "
                           "%7.1f | %6.2f %6.2f\n",
                           pp, sched, inter ? 2 : 1, m, b.measured, b.simulated, b.unit,
                           100 * rel, b.last_measured, b.last_replayed, b.makespan_ms, b.fwd_ms[0],
                           bwd);
                fflush(stdout);
            }
        ct_topo_free(topo);
    }
    free(text);
    MPI_Finalize();
    return 0;
}
