/* test_engine_nonfinite.c - a step whose gradients are not finite is skipped, on every worker
 * alike, and changes nothing.
 *
 *     mpiexec -n R test_engine_nonfinite D            (1x1, 1x2 threads, 2x1 ranks)
 *
 * Every worker builds dp = W (ZeRO 0..3 when W > 1) and trains 5 steps; at step 3 worker 0
 * alone runs its backward with an infinite loss scale (ct_exec_test_poison), so its gradients,
 * and after the reduction everybody's, are inf/NaN. Worker 0 also trains the single device
 * (grid NULL) with the same poison as the reference. Checked:
 *   - step 3 is reported skipped on every worker and no other step is; its norm is not finite,
 *     its loss is (the forward was not touched);
 *   - the gathered state (parameters, Adam m and v) after step 3 is bitwise the state after
 *     step 2 (nothing was updated), and training goes on afterwards (step 4 changes it);
 *   - after 5 steps every worker holds bitwise the same parameters, within 1e-5 of the single
 *     device's, whose losses and norms match at every step;
 *   - the report after the skipped step names the gradient of wte (the first tensor in table
 *     order; all of them are NaN), the same text on every worker.
 */
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine.h"
#include "ct_engine_step_test.h"
#include "ct_test.h"
#include "ct_test_dev.h"
#include "ct_test_mpi.h"
#include "ct_test_workers.h"

#define L_ 2
#define C_ 32
#define NH_ 2
#define T_ 16
#define B_ 4
#define M_ 2
#define V_ 64
#define STEPS 5
#define POISON 3 /* 1-based optimizer step */

static const ct_gpt_config CFG = {T_, V_, V_, L_, NH_, C_, 0, 0, 0, 0, 0, 0, 0, 0};
static const ct_adamw_hp HP = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};

static void batch(int s, int *in, int *tg) {
    uint64_t x = 0xabcdefull + (uint64_t)s * 104729u;
    for (int i = 0; i < M_ * B_ * T_; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        in[i] = (int)((x >> 33) % V_);
        tg[i] = (int)((x >> 17) % V_);
    }
}

static void my_rows(const int *all, int d, int b, int *out) {
    for (int mb = 0; mb < M_; mb++)
        memcpy(out + (size_t)mb * b * T_, all + ((size_t)mb * B_ + (size_t)d * b) * T_,
               sizeof(int) * (size_t)b * T_);
}

static uint64_t checksum(const float *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; i < n * 4; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

typedef struct result {
    double loss[STEPS], norm[STEPS];
    int skipped[STEPS];
    float *params; /* after the last step */
    char report[256];
} result;

/* Train STEPS steps on (grid, lay); poison step POISON on world worker `poisoner`. The state
 * checks of one run are made here; the caller compares runs. */
static void train(ct_device *dev, ct_grid *grid, const ct_layout *lay, int w, int poisoner,
                  const char *what, result *r) {
    ct_err err = {0};
    ct_model *m = NULL;
    ct_exec *x = NULL;
    ct_schedule *s = NULL;
    int W = lay->dp, d = grid ? ct_grid_coords(grid)->dp_rank : 0, b = B_ / W;
    ct_coords at0 = {0, 0, 0, 0};
    CT_REQUIRE_OK(
        ct_model_create(&m, &CFG, lay, grid ? ct_grid_coords(grid) : &at0, dev, b, T_, &err),
        err.msg);
    CT_REQUIRE_OK(ct_model_init_random(m, 11), ct_model_errmsg(m));
    ct_exec_opts o = ct_exec_opts_default();
    o.grads.bucket_bytes = 20000;
    CT_REQUIRE_OK(ct_exec_create(&x, m, grid, &o, &err), err.msg);
    CT_REQUIRE_OK(ct_sched_make(CT_SCHED_TRIVIAL, 1, M_, 1, &s, &err), err.msg);
    if (w == poisoner) ct_exec_test_poison(x, POISON);
    size_t n = ct_model_num_params(m);
    float *before[3], *after[3];
    for (int k = 0; k < 3; k++) before[k] = malloc(n * 4), after[k] = malloc(n * 4);
    int *all_in = malloc(sizeof(int) * M_ * B_ * T_), *all_tg = malloc(sizeof(int) * M_ * B_ * T_);
    int *in = malloc(sizeof(int) * M_ * b * T_), *tg = malloc(sizeof(int) * M_ * b * T_);
    for (int step = 0; step < STEPS; step++) {
        ct_step_result res;
        batch(step, all_in, all_tg);
        my_rows(all_in, d, b, in);
        my_rows(all_tg, d, b, tg);
        if (step + 1 == POISON)
            CT_REQUIRE_OK(ct_exec_gather_state(x, before[0], before[1], before[2]),
                          ct_exec_errmsg(x));
        CT_REQUIRE_OK(ct_exec_step(x, s, in, tg, b, T_, &HP, step + 1, &res), ct_exec_errmsg(x));
        r->loss[step] = res.loss, r->norm[step] = res.grad_norm, r->skipped[step] = res.skipped;
        CT_ASSERT_MSG(res.skipped == (step + 1 == POISON), "%s: step %d skipped = %d", what,
                      step + 1, res.skipped);
        CT_ASSERT_MSG(isfinite(res.loss), "%s: step %d: loss %g", what, step + 1, res.loss);
        CT_ASSERT_MSG(isfinite(res.grad_norm) == (step + 1 != POISON), "%s: step %d: norm %g",
                      what, step + 1, res.grad_norm);
        if (step + 1 == POISON) {
            CT_REQUIRE_OK(ct_exec_nonfinite_report(x, r->report, sizeof r->report),
                          ct_exec_errmsg(x));
            CT_REQUIRE_OK(ct_exec_gather_state(x, after[0], after[1], after[2]), ct_exec_errmsg(x));
            for (int k = 0; k < 3; k++)
                CT_ASSERT_MSG(!memcmp(before[k], after[k], n * 4),
                              "%s: the skipped step changed the %s", what,
                              k == 0 ? "parameters" : k == 1 ? "Adam m" : "Adam v");
        }
        if (step + 1 == POISON + 1) { /* training goes on */
            CT_REQUIRE_OK(ct_exec_gather_state(x, before[0], NULL, NULL), ct_exec_errmsg(x));
            CT_ASSERT_MSG(memcmp(before[0], after[0], n * 4) != 0,
                          "%s: the step after the skipped one changed nothing", what);
        }
    }
    r->params = malloc(n * 4);
    CT_REQUIRE_OK(ct_exec_gather_state(x, r->params, NULL, NULL), ct_exec_errmsg(x));
    for (int k = 0; k < 3; k++) free(before[k]), free(after[k]);
    free(all_in);
    free(all_tg);
    free(in);
    free(tg);
    ct_sched_free(s);
    ct_exec_free(x);
    ct_model_free(m);
}

static void worker(ct_topo *topo, int thread, ct_device_info *info) {
    ct_err err = {0};
    ct_comm *world = NULL;
    CT_REQUIRE_OK(ct_comm_world(topo, thread, &world), "world");
    int w = ct_comm_rank(world), W = ct_comm_size(world);
    ct_device *dev = NULL;
    ct_device_opts dopts = ct_device_opts_default();
    CT_REQUIRE_OK(ct_device_open(&dev, info, &dopts, &err), err.msg);
    size_t np = ct_gpt_param_count(&CFG);
    result ref;
    memset(&ref, 0, sizeof ref);
    if (w == 0) {
        ct_layout one = {1, 1, 1, 0, 1};
        train(dev, NULL, &one, 0, 0, "one device", &ref);
        CT_ASSERT_STR_CONTAINS(ref.report, "gradient of wte");
        printf("ok: one device: step %d skipped, state unchanged by it; report: %s\n", POISON,
               ref.report);
    } else {
        ref.params = malloc(np * 4);
    }
    CT_REQUIRE_OK(ct_comm_bcast(world, ref.loss, 2 * STEPS, CT_I32, 0, NULL),
                  ct_comm_errmsg(world));
    CT_REQUIRE_OK(ct_comm_bcast(world, ref.norm, 2 * STEPS, CT_I32, 0, NULL),
                  ct_comm_errmsg(world));
    CT_REQUIRE_OK(ct_comm_bcast(world, ref.params, np, CT_F32, 0, NULL), ct_comm_errmsg(world));
    for (int zero = 0; W > 1 && zero <= 3; zero++) {
        ct_layout lay = {W, 1, 1, zero, 1};
        ct_grid *grid = NULL;
        char what[64];
        snprintf(what, sizeof what, "W=%d ZeRO-%d", W, zero);
        CT_REQUIRE_OK(ct_grid_create(&grid, world, &lay, &err), err.msg);
        result r;
        memset(&r, 0, sizeof r);
        train(dev, grid, &lay, w, 0, what, &r);
        double worst = 0;
        for (int k = 0; k < STEPS; k++) {
            worst = fmax(worst, fabs(r.loss[k] - ref.loss[k]) / fabs(ref.loss[k]));
            if (k + 1 != POISON)
                worst = fmax(worst, fabs(r.norm[k] - ref.norm[k]) / fabs(ref.norm[k]));
        }
        CT_ASSERT_MSG(worst <= 1e-5, "%s: losses/norms differ from one device by %.3g", what,
                      worst);
        double ep = 0, scale = 0;
        for (size_t i = 0; i < np; i++) scale = fmax(scale, fabs(ref.params[i]));
        for (size_t i = 0; i < np; i++)
            ep = fmax(ep, fabs((double)r.params[i] - ref.params[i]) / scale);
        CT_ASSERT_MSG(ep <= 1e-5, "%s: parameters differ from one device by %.3g", what, ep);
        CT_ASSERT_STR_CONTAINS(r.report, "gradient of wte");
        /* every worker's own copy of the parameters is the same (ZeRO-3: the gathered state) */
        uint64_t mine[1] = {checksum(r.params, np)}, *sums = malloc(sizeof(uint64_t) * (size_t)W);
        CT_REQUIRE_OK(ct_comm_allgather(world, mine, sums, 2, CT_I32, NULL), ct_comm_errmsg(world));
        for (int k = 1; k < W; k++)
            CT_ASSERT_MSG(sums[k] == sums[0], "%s: worker %d's parameters differ from worker 0's",
                          what, k);
        if (w == 0)
            printf("ok: %s: step %d skipped on every worker, state unchanged by it, then "
                   "training went on; vs one device: losses/norms %.2e, parameters %.2e\n",
                   what, POISON, worst, ep);
        free(sums);
        free(r.params);
        ct_grid_free(grid);
    }
    free(ref.params);
    ct_device_free(dev);
    ct_comm_free(world);
}

int main(int argc, char **argv) {
    return ct_test_workers_main(&argc, &argv, "test_engine_nonfinite", worker);
}
