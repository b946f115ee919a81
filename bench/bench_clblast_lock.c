/* bench_clblast_lock - what the CLBlast lock (cl/clblast.c) costs with two devices in one process.
 *
 * Two devices of one kind (POCL_DEVICES="pthread pthread"), one thread each, run the GEMMs of a
 * GPT training step: for each of --layers layers, the shapes of gemm_shapes.h at (--C, --BT)
 * (forward, dX and dW of the four linear layers, the attention's batched products), then wait for
 * their device. Two modes, alternated round by round in the same process:
 *   shared      the library as it is: a call takes the lock shared once its shape has run on
 *               that device (the first round, not counted, runs every shape once);
 *   serialised  the same calls, each inside one process-wide mutex of this program's: what the
 *               library's single lock did before (every CLBlast call of the process, one at a
 *               time; the lock covered the call only, as this mutex does).
 * Per mode: the round's wall time (both threads, from a barrier to both devices done; median and
 * best over rounds), and the host time inside one GEMM call (the enqueue: what a lock
 * serialises; mean over calls). The results' correctness is test_cl_clblast_lock's.
 *
 *   bench_clblast_lock [--C 256] [--BT 512] [--layers 4] [--rounds 10] [--device SPEC]
 */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_cl.h"
#include "gemm_shapes.h"

#define MAX_SHAPES 32

static pthread_mutex_t serial = PTHREAD_MUTEX_INITIALIZER;

typedef struct worker {
    ct_device *d;
    ct_buffer *a, *b, *c;
    double enq_s[2]; /* host seconds inside GEMM calls, per mode */
    long calls[2];
    int failed;
    char msg[512];
} worker;

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* One round of one worker: every layer's GEMMs, then the device finished. */
static void round_run(worker *w, const ct_gemm_shape *s, int ns, int layers, int mode, int count) {
    cl_mem a = ct_buffer_mem(w->a), b = ct_buffer_mem(w->b), c = ct_buffer_mem(w->c);
    for (int l = 0; l < layers && !w->failed; l++)
        for (int i = 0; i < ns && !w->failed; i++) {
            const ct_gemm_shape *g = &s[i];
            size_t lda = g->ta ? g->m : g->k, ldb = g->tb ? g->k : g->n;
            double t0 = ct_time_now();
            if (mode == 1) pthread_mutex_lock(&serial);
            ct_status st =
                g->batch == 1
                    ? ct_gemm(w->d, g->ta, g->tb, g->m, g->n, g->k, 1.0f, a, 0, lda, b, 0, ldb,
                              0.0f, c, 0, g->n, NULL)
                    : ct_gemm_strided_batched(w->d, g->ta, g->tb, g->m, g->n, g->k, 1.0f, a, 0,
                                              lda, g->m * g->k, b, 0, ldb, g->k * g->n, 0.0f, c,
                                              0, g->n, g->m * g->n, g->batch, NULL);
            if (mode == 1) pthread_mutex_unlock(&serial);
            if (count) w->enq_s[mode] += ct_time_now() - t0, w->calls[mode]++;
            if (st != CT_OK) {
                w->failed = 1;
                snprintf(w->msg, sizeof w->msg, "%s: %s", g->name, ct_device_errmsg(w->d));
            }
        }
    if (!w->failed && ct_device_finish(w->d) != CT_OK) {
        w->failed = 1;
        snprintf(w->msg, sizeof w->msg, "finish: %s", ct_device_errmsg(w->d));
    }
}

int main(int argc, char **argv) {
    int C = 256, BT = 512, layers = 4, rounds = 10;
    const char *spec = NULL;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            printf("usage: bench_clblast_lock [--C 256] [--BT 512] [--layers 4] [--rounds 10] "
                   "[--device SPEC]\n  two devices, one thread each: a step's GEMMs under the "
                   "library's lock and serialised (see bench/bench_clblast_lock.c)\n");
            return 0;
        }
        int *num = !strcmp(f, "--C")        ? &C
                   : !strcmp(f, "--BT")     ? &BT
                   : !strcmp(f, "--layers") ? &layers
                   : !strcmp(f, "--rounds") ? &rounds
                                            : NULL;
        if (!num && strcmp(f, "--device")) {
            fprintf(stderr, "bench_clblast_lock: unknown flag %s (see --help)\n", f);
            return 2;
        }
        if (!v) {
            fprintf(stderr, "bench_clblast_lock: %s needs a value (see --help)\n", f);
            return 2;
        }
        if (num) {
            char *end = NULL;
            long x = strtol(v, &end, 10);
            if (end == v || *end || x < 1 || x > 1000000) {
                fprintf(stderr, "bench_clblast_lock: %s needs a number from 1 (got '%s')\n", f, v);
                return 2;
            }
            *num = (int)x;
        } else {
            spec = v;
        }
        i++;
    }
    if (C % 64) {
        fprintf(stderr, "bench_clblast_lock: --C must be a multiple of 64 (the head size)\n");
        return 2;
    }
    if (!spec) spec = ct_device_spec_env();
    ct_gemm_shape s[MAX_SHAPES];
    int ns = ct_gemm_shapes_gpt(C, BT, s, MAX_SHAPES);
    size_t na = 1, nb = 1, nc = 1;
    for (int i = 0; i < ns; i++) {
        size_t bt = s[i].batch;
        if (s[i].m * s[i].k * bt > na) na = s[i].m * s[i].k * bt;
        if (s[i].k * s[i].n * bt > nb) nb = s[i].k * s[i].n * bt;
        if (s[i].m * s[i].n * bt > nc) nc = s[i].m * s[i].n * bt;
    }
    ct_err err = {0};
    ct_device_info *list = NULL;
    int n = 0, pick[2] = {0, 0}, npick = 0;
    if (ct_device_list(&list, &n, &err) || ct_device_select(list, n, spec, 2, pick, &npick, &err) ||
        npick < 2) {
        fprintf(stderr, "bench_clblast_lock: %s (two devices needed: POCL_DEVICES=\"pthread "
                        "pthread\")\n",
                err.msg);
        return 2;
    }
    worker w[2];
    memset(w, 0, sizeof w);
    float *fill = calloc(na > nb ? na : nb, sizeof(float));
    for (size_t i = 0; fill && i < (na > nb ? na : nb); i++) fill[i] = (float)(i % 13) * 0.01f;
    for (int t = 0; t < 2; t++) {
        ct_device_opts o = ct_device_opts_default();
        if (!fill || ct_device_open(&w[t].d, &list[pick[t]], &o, &err) ||
            ct_buffer_alloc(w[t].d, CT_MEM_WORKSPACE, "A", na * 4, &w[t].a) ||
            ct_buffer_alloc(w[t].d, CT_MEM_WORKSPACE, "B", nb * 4, &w[t].b) ||
            ct_buffer_alloc(w[t].d, CT_MEM_WORKSPACE, "C", nc * 4, &w[t].c) ||
            ct_buffer_write(w[t].a, 0, fill, na * 4) || ct_buffer_write(w[t].b, 0, fill, nb * 4)) {
            fprintf(stderr, "bench_clblast_lock: device %d: %s\n", t,
                    w[t].d ? ct_device_errmsg(w[t].d) : err.msg);
            return 1;
        }
    }
    printf("# devices: 2 x %s; C=%d BT=%d: %d GEMM shapes x %d layers per round, %d rounds per "
           "mode (after one warm-up round)\n",
           list[pick[0]].name, C, BT, ns, layers, rounds);
    double *wall[2] = {calloc((size_t)rounds, sizeof(double)), calloc((size_t)rounds, sizeof(double))};
    double t_start = 0;
    int failed = 0;
    /* round 0: warm-up (every shape compiled and run once on each device); then the modes
     * alternate: round r runs mode (r + k) % 2 for k = 0, 1, so each comes first half the time */
#pragma omp parallel num_threads(2)
    {
        int t = omp_get_thread_num();
        round_run(&w[t], s, ns, 1, 0, 0);
#pragma omp barrier
        for (int r = 0; r < rounds; r++)
            for (int k = 0; k < 2; k++) {
                int mode = (r + k) % 2;
#pragma omp barrier
#pragma omp single
                t_start = ct_time_now();
                if (!w[0].failed && !w[1].failed) round_run(&w[t], s, ns, layers, mode, 1);
#pragma omp barrier
#pragma omp single
                wall[mode][r] = ct_time_now() - t_start;
            }
    }
    for (int t = 0; t < 2; t++)
        if (w[t].failed) {
            fprintf(stderr, "bench_clblast_lock: device %d: %s\n", t, w[t].msg);
            failed = 1;
        }
    if (failed) return 1;
    const char *names[2] = {"shared", "serialised"};
    double med[2];
    for (int m = 0; m < 2; m++) {
        qsort(wall[m], (size_t)rounds, sizeof(double), cmp_double);
        med[m] = wall[m][rounds / 2];
        double enq = (w[0].enq_s[m] + w[1].enq_s[m]) / (double)(w[0].calls[m] + w[1].calls[m]);
        printf("%-10s  round %8.2f ms median, %8.2f ms best | %6.1f us host time per GEMM call\n",
               names[m], 1e3 * med[m], 1e3 * wall[m][0], 1e6 * enq);
        printf("JSON {\"bench\":\"clblast_lock\",\"mode\":\"%s\",\"C\":%d,\"BT\":%d,\"layers\":%d,"
               "\"rounds\":%d,\"round_ms_median\":%.3f,\"round_ms_best\":%.3f,\"call_us\":%.2f}\n",
               names[m], C, BT, layers, rounds, 1e3 * med[m], 1e3 * wall[m][0], 1e6 * enq);
    }
    printf("shared / serialised round time (median): %.3f\n", med[0] / med[1]);
    for (int t = 0; t < 2; t++) {
        ct_buffer_free(w[t].a), ct_buffer_free(w[t].b), ct_buffer_free(w[t].c);
        ct_device_free(w[t].d);
    }
    free(wall[0]), free(wall[1]), free(fill);
    ct_device_list_free(list);
    return 0;
}
