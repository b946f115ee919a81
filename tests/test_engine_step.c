/* test_engine_step.c - the step executor through the library (no program in between):
 * data parallelism with ZeRO 0..3 over the grid against the single-device run of the same global
 * batch, at the shape mpiexec and the thread count give (threads, ranks, mixed).
 *
 *     mpiexec -n R test_engine_step D
 *
 * Every worker (R ranks x D threads = W) builds the grid dp = W, a model for its coordinates and
 * an executor, and trains 6 steps of 2 micro-batches (gradient accumulation) with clipping on;
 * worker 0 also trains the 1x1x1 layout (grid NULL, the trivial list) on the whole batch. Checked:
 *   - every ZeRO stage's losses and gradient norms equal the single device's within 1e-5
 *     relative, at every step;
 *   - after the steps every worker holds bitwise the same parameters (gathered state compared
 *     through a checksum all-gathered over the world), and they are within 1e-5 of the single
 *     device's;
 *   - the gathered state (params, m, v) of ZeRO-1 equals the single device's within 1e-5;
 *   - a schedule for a different number of stages is refused with a message, and nothing hangs.
 */
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine.h"
#include "ct_test.h"
#include "ct_test_dev.h"
#include "ct_test_mpi.h"
#include "ct_test_workers.h"

#define L_ 2
#define C_ 32
#define NH_ 2
#define T_ 16
#define B_ 12 /* rows per micro-batch, divisible by W = 1..4 and 6 */
#define M_ 2  /* micro-batches */
#define V_ 64
#define STEPS 6

static const ct_gpt_config CFG = {T_, V_, V_, L_, NH_, C_, 0, 0, 0, 0, 0, 0, 0, 0};

/* Tokens of step s: M_ x B_ rows of T_ (inputs) and the shifted targets. */
static void batch(int s, int *in, int *tg) {
    uint64_t x = 0x1234567ull + (uint64_t)s * 7919u;
    for (int i = 0; i < M_ * B_ * T_; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        in[i] = (int)((x >> 33) % V_);
        tg[i] = (int)((x >> 17) % V_);
    }
}

/* This worker's rows of every micro-batch: rows [mb*B + d*b, mb*B + (d+1)*b). */
static void my_rows(const int *all, int d, int b, int *out) {
    for (int mb = 0; mb < M_; mb++)
        memcpy(out + (size_t)mb * b * T_, all + ((size_t)mb * B_ + (size_t)d * b) * T_,
               sizeof(int) * (size_t)b * T_);
}

static const ct_adamw_hp HP = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.05f}; /* clip below the norms */

typedef struct run_out {
    double loss[STEPS], norm[STEPS];
    float *params, *m, *v;
} run_out;

/* The reference: one device, the whole batch. */
static void reference(ct_device *dev, run_out *r) {
    ct_err err = {0};
    ct_layout lay = {1, 1, 1, 0, 1};
    ct_coords at = {0, 0, 0, 0};
    ct_model *m = NULL;
    ct_exec *x = NULL;
    ct_schedule *s = NULL;
    CT_ASSERT_OK(ct_model_create(&m, &CFG, &lay, &at, dev, B_, T_, &err), err.msg);
    CT_ASSERT_OK(ct_model_init_random(m, 7), ct_model_errmsg(m));
    CT_ASSERT_OK(ct_exec_create(&x, m, NULL, NULL, &err), err.msg);
    CT_ASSERT_OK(ct_sched_make(CT_SCHED_TRIVIAL, 1, M_, 1, &s, &err), err.msg);
    int *in = malloc(sizeof(int) * M_ * B_ * T_), *tg = malloc(sizeof(int) * M_ * B_ * T_);
    for (int step = 0; step < STEPS; step++) {
        ct_step_result res;
        batch(step, in, tg);
        CT_ASSERT_OK(ct_exec_step(x, s, in, tg, B_, T_, &HP, step + 1, &res), ct_exec_errmsg(x));
        r->loss[step] = res.loss, r->norm[step] = res.grad_norm;
    }
    size_t n = ct_model_num_params(m);
    r->params = malloc(n * 4), r->m = malloc(n * 4), r->v = malloc(n * 4);
    CT_ASSERT_OK(ct_exec_gather_state(x, r->params, r->m, r->v), ct_exec_errmsg(x));
    free(in);
    free(tg);
    ct_sched_free(s);
    ct_exec_free(x);
    ct_model_free(m);
}

static uint64_t checksum(const float *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n * 4; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static double max_rel(const float *a, const float *b, size_t n) {
    double w = 0, scale = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)b[i]));
    for (size_t i = 0; i < n; i++) w = fmax(w, fabs((double)a[i] - b[i]) / (scale + 1e-30));
    return w;
}

static void worker(ct_topo *topo, int thread, ct_device_info *info) {
    ct_err err = {0};
    ct_comm *world = NULL;
    CT_REQUIRE_OK(ct_comm_world(topo, thread, &world), "world");
    int w = ct_comm_rank(world), W = ct_comm_size(world);
    ct_device *dev = NULL;
    ct_device_opts dopts = ct_device_opts_default();
    CT_REQUIRE_OK(ct_device_open(&dev, info, &dopts, &err), err.msg);
    /* worker 0 trains the single device; everyone receives its results */
    run_out refv, *ref = &refv;
    size_t np = ct_gpt_param_count(&CFG);
    if (w == 0) {
        reference(dev, ref);
    } else {
        ref->params = malloc(np * 4), ref->m = malloc(np * 4), ref->v = malloc(np * 4);
    }
    CT_REQUIRE_OK(ct_comm_bcast(world, ref->loss, 2 * STEPS, CT_I32, 0, NULL),
                  ct_comm_errmsg(world));
    CT_REQUIRE_OK(ct_comm_bcast(world, ref->norm, 2 * STEPS, CT_I32, 0, NULL),
                  ct_comm_errmsg(world));
    CT_REQUIRE_OK(ct_comm_bcast(world, ref->params, np, CT_F32, 0, NULL), ct_comm_errmsg(world));
    CT_REQUIRE_OK(ct_comm_bcast(world, ref->m, np, CT_F32, 0, NULL), ct_comm_errmsg(world));
    CT_REQUIRE_OK(ct_comm_bcast(world, ref->v, np, CT_F32, 0, NULL), ct_comm_errmsg(world));
    int b = B_ / W;
    int *all_in = malloc(sizeof(int) * M_ * B_ * T_), *all_tg = malloc(sizeof(int) * M_ * B_ * T_);
    int *in = malloc(sizeof(int) * M_ * b * T_), *tg = malloc(sizeof(int) * M_ * b * T_);
    for (int zero = 0; zero <= (W > 1 ? 3 : 0); zero++) {
        ct_layout lay = {W, 1, 1, zero, 1};
        ct_grid *grid = NULL;
        ct_model *m = NULL;
        ct_exec *x = NULL;
        ct_schedule *s = NULL;
        CT_REQUIRE_OK(ct_grid_create(&grid, world, &lay, &err), err.msg);
        CT_REQUIRE_OK(ct_model_create(&m, &CFG, &lay, ct_grid_coords(grid), dev, b, T_, &err),
                      err.msg);
        CT_REQUIRE_OK(ct_model_init_random(m, 7), ct_model_errmsg(m));
        ct_exec_opts o = ct_exec_opts_default();
        o.grads.bucket_bytes = 20000; /* several buckets */
        o.grads.overlap = zero != 1;  /* both paths */
        CT_REQUIRE_OK(ct_exec_create(&x, m, grid, &o, &err), err.msg);
        CT_ASSERT_OK(ct_sched_make(CT_SCHED_TRIVIAL, 1, M_, 1, &s, &err), err.msg);
        int d = ct_grid_coords(grid)->dp_rank;
        double worst = 0;
        for (int step = 0; step < STEPS; step++) {
            ct_step_result res;
            batch(step, all_in, all_tg);
            my_rows(all_in, d, b, in);
            my_rows(all_tg, d, b, tg);
            CT_REQUIRE_OK(ct_exec_step(x, s, in, tg, b, T_, &HP, step + 1, &res),
                          ct_exec_errmsg(x));
            double e1 = fabs(res.loss - ref->loss[step]) / fabs(ref->loss[step]);
            double e2 = fabs(res.grad_norm - ref->norm[step]) / fabs(ref->norm[step]);
            worst = fmax(worst, fmax(e1, e2));
            CT_ASSERT_MSG(ref->norm[step] > HP.grad_clip, "step %d: clipping must be active", step);
        }
        CT_ASSERT_MSG(worst <= 1e-5, "W=%d ZeRO-%d: worst relative loss/norm difference %.3g",
                      W, zero, worst);
        /* gathered state: the same on every worker, close to the single device's */
        size_t n = ct_model_num_params(m);
        float *p = malloc(n * 4), *am = malloc(n * 4), *av = malloc(n * 4);
        CT_REQUIRE_OK(ct_exec_gather_state(x, p, am, av), ct_exec_errmsg(x));
        /* every worker's own copy of the parameters (ZeRO-3 keeps only shards: the gathered
         * state is the check there) */
        float *own = malloc(n * 4);
        if (zero < 3) CT_ASSERT_OK(ct_model_get_params(m, own, n), ct_model_errmsg(m));
        uint64_t mine[1] = {checksum(zero < 3 ? own : p, n)};
        uint64_t *sums = malloc(sizeof(uint64_t) * (size_t)W);
        free(own);
        CT_REQUIRE_OK(ct_comm_allgather(world, mine, sums, 2, CT_I32, NULL), ct_comm_errmsg(world));
        for (int k = 1; k < W; k++)
            CT_ASSERT_MSG(sums[k] == sums[0], "ZeRO-%d: worker %d's parameters differ from worker "
                                              "0's", zero, k);
        double ep = max_rel(p, ref->params, n), em = max_rel(am, ref->m, n);
        double ev = max_rel(av, ref->v, n);
        CT_ASSERT_MSG(ep <= 1e-5 && em <= 1e-4 && ev <= 1e-4,
                      "ZeRO-%d: state vs one device: params %.3g, m %.3g, v %.3g", zero, ep, em, ev);
        if (w == 0)
            printf("ok: W=%d ZeRO-%d: %d steps, worst relative loss/norm difference %.2e; "
                   "state vs one device: params %.2e, m %.2e, v %.2e\n",
                   W, zero, STEPS, worst, ep, em, ev);
        /* a schedule for another layout is refused on every worker, nothing hangs */
        ct_schedule *s2 = NULL;
        CT_ASSERT_OK(ct_sched_make(CT_SCHED_GPIPE, 2, M_, 1, &s2, &err), err.msg);
        ct_step_result res;
        ct_status st = ct_exec_step(x, s2, in, tg, b, T_, &HP, STEPS + 1, &res);
        CT_ASSERT_EQ_INT(st, CT_ERR_ARG);
        CT_ASSERT_STR_CONTAINS(ct_exec_errmsg(x), "2 stages");
        ct_sched_free(s2);
        free(sums);
        free(p);
        free(am);
        free(av);
        ct_sched_free(s);
        ct_exec_free(x);
        ct_model_free(m);
        ct_grid_free(grid);
    }
    free(all_in);
    free(all_tg);
    free(in);
    free(tg);
    free(ref->params);
    free(ref->m);
    free(ref->v);
    ct_device_free(dev);
    ct_comm_free(world);
}

int main(int argc, char **argv) {
    return ct_test_workers_main(&argc, &argv, "test_engine_step", worker);
}
