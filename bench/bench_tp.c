/* bench_tp - where a tensor-parallel training step goes: compute, exposed TP communication and
 * the rest, the bytes each worker moves per step against the formula, and the activation memory
 * per worker, for one TP group (dp = 1) of the N = ranks x --devices-per-rank workers.
 *
 *     POCL_DEVICES="pthread pthread" bench_tp --devices-per-rank 2 [--sp 0|1] [--steps S]
 *         [--warmup W] [--layers L --dim C --heads NH --seq T --batch B --vocab V]
 *     mpiexec -n 2 bench_tp ...                           (the TP group across ranks)
 *     CT_DEVICE=gpu bench_tp --devices-per-rank 2 ...     (workers sharing one GPU)
 *     ... --tp-comm host|device                           (where TP's collectives run)
 *
 * Workers on one device open it in one context, so with --tp-comm device (or auto on a GPU)
 * their collectives stay on the device (engine/tp.c); host stages them through host memory.
 * Default shape: bench_train's "tiny" (L=4, C=256, NH=4, T=256, B=4, GPT-2's V=50257, Vp=50304).
 * Each layout is timed three ways on the same model, interleaved step by step (so a changing
 * load on a shared machine hits them alike), after W warm-up rounds, as the mean and the best of
 * S steps each (the engine's own step: zero_grad, forward with the loss, backward, AdamW with
 * clip 1.0):
 *   "tp"        the step as trained (the input-gradient reduction overlapped with the
 *               weight-gradient GEMM);
 *   "no-overlap" the same with that reduction done before the GEMM;
 *   "no-comm"   every TP transfer skipped (no staging, no collective; numerically wrong, timing
 *               only): the same kernels, so its step is the compute alone.
 * Exposed TP communication = step(tp) - step(no-comm), measured, not assumed; the overlap's
 * gain = step(no-overlap) - step(tp). compute = the executor's forward+backward time in the
 * no-comm run; rest = step(no-comm) - compute (optimizer, zero_grad, the loss read-back).
 * Bytes: each worker's counted TP traffic per step (what it sends under a ring algorithm:
 * 2(N-1)/N of an all-reduce's tensor, (N-1)/N of a reduce-scatter's or all-gather's), against
 * the formula per micro-batch: without SP (4L+2) all-reduces of B*T*C floats + 3 B*T floats of
 * loss statistics; with SP (4L+2) reduce-scatters and (6L+3) all-gathers of B*T*C (the
 * backward re-gathers the LayerNorm outputs it does not keep) + the same loss statistics.
 * Activation memory: the worker's activation arena (device, category activations) and its TP
 * host staging (0 on the device path, whose scratch is device memory of category comm). Worker 0
 * prints one line per way and a "JSON " line for scripts. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine.h"
#include "ct_parallel.h"

typedef struct bopts {
    int D, sp, steps, warmup, L, C, NH, T, B, V, verbose, comm;
    cl_context *shared; /* [npicks]: workers on one device open it in one context */
} bopts;

#define DIE(...)                                                                 \
    do {                                                                         \
        fprintf(stderr, "bench_tp: " __VA_ARGS__);                               \
        fprintf(stderr, "\n");                                                   \
        fflush(stderr);                                                          \
        exit(1);                                                                 \
    } while (0)

/* Bytes each worker sends per micro-batch under a ring algorithm, from the shapes alone. */
static double formula_bytes(const bopts *o, int N, int sp) {
    double BTC = (double)o->B * o->T * o->C, BT = (double)o->B * o->T, f = (double)(N - 1) / N;
    double stats = 2 * f * 3 * BT * 4;
    if (N == 1) return 0;
    if (!sp) return 2 * f * (4.0 * o->L + 2) * BTC * 4 + stats;
    return f * ((4.0 * o->L + 2) + (6.0 * o->L + 3)) * BTC * 4 + stats;
}

typedef struct way {
    double step_ms, best_ms, compute_ms, tp_comm_ms, tp_overlap_ms, wire_bytes;
    long calls[3];
    int n;
} way;

/* The three ways run interleaved, step by step (tp, no-overlap, no-comm, tp, ...), so that a
 * machine whose load changes affects them alike; each way's figures are the differences of the
 * executor's and the TP counters around its own steps. */
static void run_ways(ct_exec *x, ct_model *m, ct_comm *world, const bopts *o, const int *in,
                     const int *tg, int nways, way *w) {
    ct_schedule *sched = NULL;
    ct_err err = {0};
    if (ct_sched_make(CT_SCHED_TRIVIAL, 1, 1, 1, &sched, &err)) DIE("%s", err.msg);
    ct_adamw_hp hp = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    ct_tp *tp = ct_model_tp(m);
    int t = 0;
    for (int k = 0; k < nways; k++) w[k].best_ms = 1e30;
    for (int s = 0; s < o->warmup + o->steps; s++)
        for (int k = 0; k < nways; k++) {
            ct_tp_set_overlap(tp, k != 1);
            ct_tp_set_skip_comm(tp, k == 2);
            ct_exec_times a, b;
            ct_tp_stats sa, sb;
            ct_exec_times_get(x, &a);
            ct_tp_stats_get(tp, &sa);
            ct_comm_barrier(world, NULL);
            double t0 = ct_time_now();
            ct_step_result res;
            if (ct_exec_step(x, sched, in, tg, o->B, o->T, &hp, ++t, &res))
                DIE("%s", ct_exec_errmsg(x));
            ct_comm_barrier(world, NULL); /* the step ends when every worker's does */
            double dt = 1e3 * (ct_time_now() - t0);
            ct_exec_times_get(x, &b);
            ct_tp_stats_get(tp, &sb);
            if (o->verbose && ct_comm_rank(world) == 0)
                printf("    step %d way %d: %.1f ms (loss %.4f)\n", s, k, dt, res.loss);
            if (s < o->warmup) continue;
            way *v = &w[k];
            v->n++;
            v->step_ms += dt;
            v->best_ms = dt < v->best_ms ? dt : v->best_ms;
            v->compute_ms += b.compute_ms - a.compute_ms;
            v->tp_comm_ms += b.tp_comm_ms - a.tp_comm_ms;
            v->tp_overlap_ms += b.tp_overlap_ms - a.tp_overlap_ms;
            v->wire_bytes += sb.wire_bytes - sa.wire_bytes;
            for (int c = 0; c < 3; c++) v->calls[c] += sb.calls[c] - sa.calls[c];
        }
    ct_tp_set_overlap(tp, 1);
    ct_tp_set_skip_comm(tp, 0);
    for (int k = 0; k < nways; k++) {
        way *v = &w[k];
        v->step_ms /= v->n, v->compute_ms /= v->n, v->tp_comm_ms /= v->n;
        v->tp_overlap_ms /= v->n, v->wire_bytes /= v->n;
        for (int c = 0; c < 3; c++) v->calls[c] /= v->n;
    }
    ct_sched_free(sched);
}

static void worker(ct_topo *topo, bopts *o, int thread, ct_device_info *list, int *picks,
                   int npicks) {
    ct_err err = {0};
    ct_comm *world = NULL;
    if (ct_comm_world(topo, thread, &world)) DIE("no communicator");
    int r = ct_comm_rank(world), N = ct_comm_size(world);
    int k = ct_topo_device_index(topo, thread);
    if (k >= npicks) k = thread % npicks;
    ct_device *dev = NULL;
    ct_device_opts dopts = ct_device_opts_default();
    ct_status st;
#pragma omp critical(bench_tp_context)
    st = ct_device_open_shared(&dev, &list[picks[k]], &dopts, &o->shared[k], &err);
    if (st != CT_OK) DIE("%s", err.msg);
    int Vp = (o->V + 127) / 128 * 128;
    ct_gpt_config cfg = {o->T, o->V, Vp, o->L, o->NH, o->C, 0, 0, 0, 0, 0, 0, 0, 0};
    int sp = N > 1 && o->sp;
    if (ct_model_tp_check(&cfg, N, sp, o->T, &err)) DIE("%s", err.msg);
    ct_layout lay = {1, N, 1, 0, 1};
    ct_grid *grid = NULL;
    if (ct_grid_create(&grid, world, &lay, &err)) DIE("%s", err.msg);
    ct_model_plan pl;
    memset(&pl, 0, sizeof pl);
    pl.max_B = o->B, pl.max_T = o->T, pl.slots = 1, pl.tp = ct_grid_tp(grid), pl.sp = sp;
    pl.tp_comm = o->comm;
    ct_model *m = NULL;
    if (ct_model_create_plan(&m, &cfg, &lay, ct_grid_coords(grid), dev, &pl, &err))
        DIE("%s", err.msg);
    ct_model_init_random(m, 1);
    ct_exec *x = NULL;
    if (ct_exec_create(&x, m, grid, NULL, &err)) DIE("%s", err.msg);
    size_t bt = (size_t)o->B * o->T;
    int *in = malloc(bt * sizeof(int)), *tg = malloc(bt * sizeof(int));
    unsigned s = 12345u; /* the same tokens on every worker of the TP group */
    for (size_t i = 0; i < bt; i++) {
        s = s * 1103515245u + 12345u;
        in[i] = (int)((s >> 8) % (unsigned)o->V);
        tg[i] = (int)((s >> 4) % (unsigned)o->V);
    }
    way w[3];
    memset(w, 0, sizeof w);
    ct_tp *tp = ct_model_tp(m);
    run_ways(x, m, world, o, in, tg, N > 1 ? 3 : 1, w);
    if (N == 1) w[1] = w[2] = w[0];
    ct_mem_stats ms;
    ct_device_mem_stats(dev, &ms);
    double act = (double)ms.current[CT_MEM_ACTIVATIONS], host = (double)ct_tp_host_bytes(tp);
    if (r == 0) {
        double exposed = w[0].step_ms - w[2].step_ms, gain = w[1].step_ms - w[0].step_ms;
        double rest = w[2].step_ms - w[2].compute_ms, want = formula_bytes(o, N, sp);
        printf("tp %d (%dx%d) SP %d | L=%d C=%d NH=%d T=%d B=%d V=%d | collectives %s\n", N,
               ct_topo_nranks(topo), ct_topo_devices_per_rank(topo), sp, o->L, o->C, o->NH, o->T,
               o->B, o->V, ct_tp_device_comm(tp) ? "device-resident" : "host-staged");
        printf("  step %.1f ms (no overlap %.1f, no TP comm %.1f): compute %.1f | exposed TP comm "
               "%.1f (%.1f%%) | rest %.1f | overlap saves %.1f ms\n",
               w[0].step_ms, w[1].step_ms, w[2].step_ms, w[2].compute_ms, exposed,
               100 * exposed / w[0].step_ms, rest, gain);
        printf("  best steps: %.1f ms (no overlap %.1f, no TP comm %.1f): exposed TP comm %.1f "
               "(%.1f%%), overlap saves %.1f ms\n",
               w[0].best_ms, w[1].best_ms, w[2].best_ms, w[0].best_ms - w[2].best_ms,
               100 * (w[0].best_ms - w[2].best_ms) / w[0].best_ms, w[1].best_ms - w[0].best_ms);
        printf("  TP collectives on the worker thread %.1f ms per step (%.1f of it beside a weight-"
               "gradient GEMM); per step %ld all-reduces, %ld reduce-scatters, %ld all-gathers\n",
               w[0].tp_comm_ms, w[0].tp_overlap_ms, w[0].calls[0], w[0].calls[1], w[0].calls[2]);
        printf("  bytes sent per worker per step %.3f MB, formula %.3f MB (%.4f x)\n",
               w[0].wire_bytes / 1e6, want / 1e6, want > 0 ? w[0].wire_bytes / want : 1.0);
        printf("  activation memory per worker %.1f MiB (arena) + %.1f MiB TP host staging\n",
               act / 1048576, host / 1048576);
        printf("JSON {\"tp\":%d,\"ranks\":%d,\"sp\":%d,\"device_comm\":%d,\"best_ms\":%.3f,"
               "\"best_no_overlap_ms\":%.3f,"
               "\"best_no_comm_ms\":%.3f,\"step_ms\":%.3f,\"step_no_overlap_ms\":%.3f,"
               "\"step_no_comm_ms\":%.3f,\"compute_ms\":%.3f,\"exposed_tp_ms\":%.3f,"
               "\"rest_ms\":%.3f,\"tp_comm_ms\":%.3f,\"tp_overlap_ms\":%.3f,\"bytes\":%.0f,"
               "\"bytes_formula\":%.0f,\"act_bytes\":%.0f,\"staging_bytes\":%.0f}\n",
               N, ct_topo_nranks(topo), sp, ct_tp_device_comm(tp), w[0].best_ms, w[1].best_ms,
               w[2].best_ms, w[0].step_ms,
               w[1].step_ms, w[2].step_ms,
               w[2].compute_ms, exposed, rest, w[0].tp_comm_ms, w[0].tp_overlap_ms,
               w[0].wire_bytes, want, act, host);
        fflush(stdout);
    }
    free(in);
    free(tg);
    ct_exec_free(x);
    ct_model_free(m);
    ct_grid_free(grid);
    ct_device_free(dev);
    ct_comm_free(world);
}

/* A flag's value: the whole string a number, or the program says which flag and stops. */
static int flag_num(const char *flag, const char *v, double *out) {
    char *end = NULL;
    *out = strtod(v, &end);
    if (end == v || *end) {
        fprintf(stderr, "%s: %s needs a number (got '%s')\n", "bench_tp", flag, v);
        return 0;
    }
    return 1;
}

static const char *const usage =
    "usage: bench_tp [--devices-per-rank N] [--sp 0|1] [--steps S] [--warmup W] [--layers L]\n"
    "         [--dim C] [--heads NH] [--seq T] [--batch B] [--vocab V] [--verbose 0|1]\n"
    "         [--tp-comm auto|host|device]\n"
    "  one TP group of ranks x N workers: the step split into compute, exposed TP\n"
    "  communication and the rest; bytes per worker against the formula; activation memory\n"
    "  (see bench/bench_tp.c)\n";

int main(int argc, char **argv) {
    ct_err err = {0};
    bopts o = {1, 0, 3, 1, 4, 256, 4, 256, 4, 50257, 0, CT_TP_COMM_AUTO, NULL};
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
    if (argc % 2 == 0) {
        fprintf(stderr, "bench_tp: %s needs a value (see --help)\n", argv[argc - 1]);
        return 2;
    }
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *f = argv[i], *v = argv[i + 1];
        double x = 0;
        if (!strcmp(f, "--tp-comm")) {
            if (ct_tp_comm_parse(v, &o.comm, &err)) {
                fprintf(stderr, "bench_tp: %s\n", err.msg);
                return 2;
            }
            continue;
        }
        if (strncmp(f, "--", 2) == 0 && !flag_num(f, v, &x)) return 2;
        if (!strcmp(f, "--devices-per-rank")) o.D = (int)x;
        else if (!strcmp(f, "--sp")) o.sp = (int)x;
        else if (!strcmp(f, "--steps")) o.steps = (int)x;
        else if (!strcmp(f, "--warmup")) o.warmup = (int)x;
        else if (!strcmp(f, "--layers")) o.L = (int)x;
        else if (!strcmp(f, "--dim")) o.C = (int)x;
        else if (!strcmp(f, "--heads")) o.NH = (int)x;
        else if (!strcmp(f, "--seq")) o.T = (int)x;
        else if (!strcmp(f, "--batch")) o.B = (int)x;
        else if (!strcmp(f, "--vocab")) o.V = (int)x;
        else if (!strcmp(f, "--verbose")) o.verbose = (int)x;
        else {
            fprintf(stderr, "bench_tp: unknown flag %s (see --help)\n", f);
            return 2;
        }
    }
    if (o.D < 1 || o.steps < 1 || o.warmup < 0 || o.L < 1 || o.C < 1 || o.NH < 1 || o.T < 1 ||
        o.B < 1 || o.V < 1 || o.C % o.NH) {
        fprintf(stderr, "bench_tp: bad shape or counts\n");
        return 2;
    }
    ct_topo *topo = NULL;
    if (ct_topo_create(&topo, &argc, &argv, o.D, &err)) {
        fprintf(stderr, "bench_tp: %s\n", err.msg);
        return 2;
    }
    ct_device_info *list = NULL;
    int n = 0, npicks = 0;
    if (ct_device_list(&list, &n, &err)) {
        fprintf(stderr, "bench_tp: %s\n", err.msg);
        return 2;
    }
    int *picks = malloc(sizeof(int) * (size_t)(n + 1));
    /* workers share a device when there are fewer (each its own queue, in one context) */
    if (ct_device_select(list, n, ct_device_spec_env(), 0, picks, &npicks, &err) || npicks < 1) {
        fprintf(stderr, "bench_tp: %s\n", err.msg);
        return 2;
    }
    o.shared = calloc((size_t)npicks, sizeof *o.shared);
#pragma omp parallel num_threads(o.D)
    worker(topo, &o, omp_get_thread_num(), list, picks, npicks);
    for (int k = 0; k < npicks; k++) ct_context_release(o.shared[k]);
    free(o.shared);
    free(picks);
    ct_device_list_free(list);
    ct_topo_free(topo);
    return 0;
}
