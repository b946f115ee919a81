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
#include <time.h>

#include "ct_engine.h"
#include "ct_parallel.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

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
    ct_status ost;
#pragma omp critical(bench_dp_device_open) /* CLBlastOverrideParameters is not thread-safe */
    ost = ct_device_open(&dev, &list[picks[k]], &dopts, &err);
    if (ost) DIE("%s", err.msg);
    ct_gpt_config cfg = {o->T, 256, 256, o->L, o->NH, o->C};
    ct_layout lay = {N, 1, 1, o->zero, 1};
    ct_coords at = {r, 0, 0, 0};
    int b = o->B / N;
    ct_model *m = NULL;
    if (ct_model_create(&m, &cfg, &lay, &at, dev, b, o->T, &err)) DIE("%s", err.msg);
    ct_model_init_random(m, 1);
    ct_dp *dp = NULL;
    ct_dp_opts dpo = ct_dp_opts_default();
    dpo.overlap = o->overlap;
    dpo.bucket_bytes = (size_t)(o->bucket_mb * 1048576.0);
    if (ct_dp_create(&dp, m, world, &dpo, &err)) DIE("%s", err.msg);
    size_t bt = (size_t)b * o->T;
    int *in = malloc(bt * sizeof(int)), *tg = malloc(bt * sizeof(int));
    unsigned s = 12345u + (unsigned)r;
    double t_step = 0, t_compute = 0;
    int counted = 0;
    for (int step = 0; step < o->steps + 2; step++) {
        if (step == 2) ct_dp_times_reset(dp);
        for (size_t i = 0; i < bt; i++) {
            s = s * 1103515245u + 12345u;
            in[i] = (int)((s >> 16) % 256);
            tg[i] = (int)((s >> 8) % 256);
        }
        ct_comm_barrier(world, NULL);
        double t0 = now_ms();
        float loss = 0, norm = 0;
        ct_status st = ct_model_zero_grad(m);
        ct_dp_arm(dp);
        if (!st) st = ct_model_forward(m, in, tg, b, o->T, &loss);
        if (!st) st = ct_model_backward(m, 1.0f);
        if (st) DIE("%s", ct_model_errmsg(m));
        /* compute = until this worker's backward is done on the device (its own queue) */
        ct_device_finish(dev);
        double t1 = now_ms();
        if (ct_dp_finish_grads(dp) ||
            ct_dp_step(dp, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, step + 1, &norm))
            DIE("%s", ct_dp_errmsg(dp));
        double t2 = now_ms();
        if (step >= 2) {
            t_step += t2 - t0;
            t_compute += t1 - t0;
            counted++;
        }
    }
    ct_dp_times tm;
    ct_dp_times_get(dp, &tm);
    if (r == 0) {
        /* ZeRO-3 gathers run inside forward / backward: counted as exposed, not compute */
        double step = t_step / counted, comp = (t_compute - tm.gather_ms) / counted;
        double exposed = tm.exposed_ms / counted, opt = tm.optimizer_ms / counted;
        double tok = (double)o->B * o->T / (step / 1e3);
        printf("N=%d (%dx%d) overlap=%d zero=%d buckets=%d | step %.2f ms | compute %.2f | "
               "exposed comm %.2f (%.1f%%, gathers %.2f) | optimizer %.2f | comm busy %.2f | "
               "%.0f tok/s",
               N, ct_topo_nranks(topo), ct_topo_devices_per_rank(topo), o->overlap, o->zero,
               ct_dp_num_buckets(dp), step, comp, exposed, 100 * exposed / step,
               tm.gather_ms / counted, opt,
               tm.busy_ms / counted, tok);
        if (o->base_ms > 0) printf(" | scaling efficiency %.2f", o->base_ms / (step * N));
        printf("\n");
        fflush(stdout);
    }
    free(in);
    free(tg);
    ct_dp_free(dp);
    ct_model_free(m);
    ct_device_free(dev);
    ct_comm_free(world);
}

int main(int argc, char **argv) {
    bopts o = {1, 1, 0, 10, 4, 128, 4, 64, 8, 25.0, 0.0};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *f = argv[i], *v = argv[i + 1];
        if (!strcmp(f, "--devices-per-rank")) o.D = atoi(v);
        else if (!strcmp(f, "--overlap")) o.overlap = atoi(v);
        else if (!strcmp(f, "--zero")) o.zero = atoi(v);
        else if (!strcmp(f, "--steps")) o.steps = atoi(v);
        else if (!strcmp(f, "--layers")) o.L = atoi(v);
        else if (!strcmp(f, "--dim")) o.C = atoi(v);
        else if (!strcmp(f, "--heads")) o.NH = atoi(v);
        else if (!strcmp(f, "--seq")) o.T = atoi(v);
        else if (!strcmp(f, "--batch")) o.B = atoi(v);
        else if (!strcmp(f, "--bucket-mb")) o.bucket_mb = atof(v);
        else if (!strcmp(f, "--base-ms")) o.base_ms = atof(v);
        else {
            fprintf(stderr, "bench_dp: unknown flag %s (see the comment at the top)\n", f);
            return 2;
        }
    }
    ct_err err = {0};
    ct_topo *topo = NULL;
    if (ct_topo_create(&topo, &argc, &argv, o.D, &err)) {
        fprintf(stderr, "bench_dp: %s\n", err.msg);
        return 2;
    }
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
