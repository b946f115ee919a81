/* bench_dp - where a data-parallel training step goes: compute (forward + backward), exposed
 * communication (the time the worker waits for gradient buckets and ZeRO gathers after its
 * backward) and the optimizer, per step, for one layout.
 *
 *     mpiexec -n R bench_dp [--devices-per-rank D] [--overlap 0|1] [--zero 0|1] [--steps S]
 *                           [--layers L --dim C --heads NH --seq T --batch B] [--bucket-mb MB]
 *
 * N = R x D workers train a random model on random tokens, each on batch/N rows (the global
 * batch is fixed, so N workers ideally take 1/N of the compute). Worker 0 prints one line:
 * N, overlap, ms per step (mean over the steps after two warm-up steps) split into compute,
 * exposed communication (with ZeRO-3's parameter gathers, which wait inside forward and
 * backward) and optimizer, the communication thread's busy time, tokens/s, and the
 * scaling efficiency against --base-ms (the N = 1 step time, when given). */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine.h"
#include "ct_parallel.h"

typedef struct bopts {
    int D, overlap, zero, steps, L, C, NH, T, B;
    double bucket_mb, base_ms;
} bopts;

/* A benchmark's failure ends the process (mpiexec then ends the other ranks). */
#define DIE(...)                                                                 \
    do {                                                                         \
        fprintf(stderr, "bench_dp: " __VA_ARGS__);                               \
        fprintf(stderr, "\n");                                                   \
        fflush(stderr);                                                          \
        exit(1);                                                                 \
    } while (0)

static void worker(ct_topo *topo, const bopts *o, int thread, ct_device_info *list, int *picks,
                   int npicks) {
    ct_err err = {0};
    ct_comm *world = NULL;
    if (ct_comm_world(topo, thread, &world)) DIE("no communicator");
    int r = ct_comm_rank(world), N = ct_comm_size(world);
    int k = ct_topo_device_index(topo, thread);
    if (k >= npicks) k = thread % npicks;
    ct_device *dev = NULL;
    ct_device_opts dopts = ct_device_opts_default();
    if (ct_device_open(&dev, &list[picks[k]], &dopts, &err)) DIE("%s", err.msg);
    ct_gpt_config cfg = {o->T, 256, 256, o->L, o->NH, o->C, 0, 0, 0, 0, 0, 0, 0, 0};
    ct_layout lay = {N, 1, 1, o->zero, 1};
    ct_grid *grid = NULL;
    if (ct_grid_create(&grid, world, &lay, &err)) DIE("%s", err.msg);
    int b = o->B / N;
    ct_model *m = NULL;
    if (ct_model_create(&m, &cfg, &lay, ct_grid_coords(grid), dev, b, o->T, &err))
        DIE("%s", err.msg);
    ct_model_init_random(m, 1);
    ct_exec *x = NULL;
    ct_exec_opts xo = ct_exec_opts_default();
    xo.grads.overlap = o->overlap;
    xo.grads.bucket_bytes = (size_t)(o->bucket_mb * 1048576.0);
    if (ct_exec_create(&x, m, grid, &xo, &err)) DIE("%s", err.msg);
    ct_schedule *sched = NULL;
    if (ct_sched_make(CT_SCHED_TRIVIAL, 1, 1, 1, &sched, &err)) DIE("%s", err.msg);
    size_t bt = (size_t)b * o->T;
    int *in = malloc(bt * sizeof(int)), *tg = malloc(bt * sizeof(int));
    unsigned s = 12345u + (unsigned)r;
    double t_step = 0;
    int counted = 0;
    ct_adamw_hp hp = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    for (int step = 0; step < o->steps + 2; step++) {
        if (step == 2) ct_exec_times_reset(x);
        for (size_t i = 0; i < bt; i++) {
            s = s * 1103515245u + 12345u;
            in[i] = (int)((s >> 16) % 256);
            tg[i] = (int)((s >> 8) % 256);
        }
        ct_comm_barrier(world, NULL);
        double t0 = ct_time_now();
        ct_step_result res;
        /* the engine's own step: compute until this worker's backward is done on its device,
         * then the gradient sync, the optimizer and ZeRO's gathers (the executor's times) */
        if (ct_exec_step(x, sched, in, tg, b, o->T, &hp, step + 1, &res))
            DIE("%s", ct_exec_errmsg(x));
        if (step >= 2) {
            t_step += 1e3 * (ct_time_now() - t0);
            counted++;
        }
    }
    ct_exec_times tm;
    ct_exec_times_get(x, &tm);
    if (r == 0) {
        /* ZeRO-3 gathers run inside forward / backward: counted as exposed, not compute */
        double step = t_step / counted, comp = tm.compute_ms / counted;
        double exposed = tm.exposed_ms / counted, opt = tm.optimizer_ms / counted;
        double tok = (double)o->B * o->T / (step / 1e3);
        printf("N=%d (%dx%d) overlap=%d zero=%d buckets=%d | step %.2f ms | compute %.2f | "
               "exposed comm %.2f (%.1f%%, gathers %.2f) | optimizer %.2f | comm busy %.2f | "
               "%.0f tok/s",
               N, ct_topo_nranks(topo), ct_topo_devices_per_rank(topo), o->overlap, o->zero,
               ct_exec_grads(x) ? ct_grads_num_buckets(ct_exec_grads(x)) : 0, step, comp, exposed,
               100 * exposed / step, tm.gather_ms / counted, opt, tm.busy_ms / counted, tok);
        if (o->base_ms > 0) printf(" | scaling efficiency %.2f", o->base_ms / (step * N));
        printf("\n");
        fflush(stdout);
    }
    free(in);
    free(tg);
    ct_sched_free(sched);
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
        fprintf(stderr, "%s: %s needs a number (got '%s')\n", "bench_dp", flag, v);
        return 0;
    }
    return 1;
}

static const char *const usage =
    "usage: bench_dp [--devices-per-rank N] [--overlap 0|1] [--zero 0-3] [--steps S]\n"
    "         [--layers L] [--dim C] [--heads NH] [--seq T] [--batch B] [--bucket-mb X]\n"
    "         [--base-ms X]\n"
    "  the data-parallel step split into compute, exposed communication and the rest\n"
    "  (see bench/bench_dp.c)\n";

int main(int argc, char **argv) {
    bopts o = {1, 1, 0, 10, 4, 128, 4, 64, 8, 25.0, 0.0};
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
    if (argc % 2 == 0) {
        fprintf(stderr, "bench_dp: %s needs a value (see --help)\n", argv[argc - 1]);
        return 2;
    }
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *f = argv[i], *v = argv[i + 1];
        double x = 0;
        if (strncmp(f, "--", 2) == 0 && !flag_num(f, v, &x)) return 2;
        if (!strcmp(f, "--devices-per-rank")) o.D = (int)x;
        else if (!strcmp(f, "--overlap")) o.overlap = (int)x;
        else if (!strcmp(f, "--zero")) o.zero = (int)x;
        else if (!strcmp(f, "--steps")) o.steps = (int)x;
        else if (!strcmp(f, "--layers")) o.L = (int)x;
        else if (!strcmp(f, "--dim")) o.C = (int)x;
        else if (!strcmp(f, "--heads")) o.NH = (int)x;
        else if (!strcmp(f, "--seq")) o.T = (int)x;
        else if (!strcmp(f, "--batch")) o.B = (int)x;
        else if (!strcmp(f, "--bucket-mb")) o.bucket_mb = x;
        else if (!strcmp(f, "--base-ms")) o.base_ms = x;
        else {
            fprintf(stderr, "bench_dp: unknown flag %s (see --help)\n", f);
            return 2;
        }
    }
    ct_err err = {0};
    ct_topo *topo = NULL;
    if (ct_topo_create(&topo, &argc, &argv, o.D, &err)) {
        fprintf(stderr, "bench_dp: %s\n", err.msg);
        return 2;
    }
    double tmo = CT_COMM_TIMEOUT_DEFAULT; /* CT_COMM_TIMEOUT: the one place it is read */
    if (ct_comm_timeout_env(&tmo, &err)) {
        fprintf(stderr, "bench_dp: %s\n", err.msg);
        ct_topo_free(topo);
        return 2;
    }
    ct_topo_set_timeout(topo, tmo);
    int W = ct_topo_world_size(topo);
    if (o.B % W) {
        fprintf(stderr, "bench_dp: %d workers do not divide --batch %d\n", W, o.B);
        ct_topo_free(topo);
        return 2;
    }
    ct_device_info *list = NULL;
    int n = 0, npicks = 0;
    if (ct_device_list(&list, &n, &err)) {
        fprintf(stderr, "bench_dp: %s\n", err.msg);
        return 2;
    }
    int *picks = malloc(sizeof(int) * (size_t)(n + 1));
    if (ct_device_select(list, n, ct_device_spec_env(), 0, picks, &npicks, &err) || o.D > npicks) {
        fprintf(stderr, "bench_dp: %s (need %d devices per process)\n", err.msg, o.D);
        return 2;
    }
#pragma omp parallel num_threads(o.D)
    worker(topo, &o, omp_get_thread_num(), list, picks, npicks);
    free(picks);
    ct_device_list_free(list);
    ct_topo_free(topo);
    return 0;
}
