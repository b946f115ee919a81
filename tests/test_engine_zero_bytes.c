/* test_engine_zero_bytes.c - the executor's per-step communication counters (ct_exec_bytes_last)
 * against the ZeRO formulas, data parallel over every worker (dp 2: 1 rank x 2 threads; dp 4:
 * 2 ranks x 2 threads):
 *
 *     mpiexec -n R test_engine_zero_bytes D
 *
 * For N workers and the flat layout of P floats (padded to N shards of S under ZeRO >= 1, this
 * worker's shard holding `mine(a, b)` of a flat range [a, b)), M micro-steps, per worker:
 *   - ZeRO-0: 2 P (N-1)/N (the gradient all-reduce, once: accumulation is local);
 *   - ZeRO-1: (P - mine) reduce-scatter + S (N-1) all-gather = 2 P (N-1)/N;
 *   - ZeRO-2: M (P - mine) + S (N-1) (every micro-step's buckets leave);
 *   - ZeRO-3: M [(P - mine) reduce-scatter + (P - mine) the forward's gathers + wte's again for
 *     the head (it shares the working buffer with the block slots: the embedding's copy gave way
 *     to the blocks) + the backward's gathers of every block but the last one still in its slot
 *     (the head's wte evicted slot 0, and slot 1 too when wte is larger)]: about 3 P (N-1)/N;
 * plus the step's scalars (the loss, the shards' sum of squares). The counters are the
 * collectives' bandwidth terms (ct_comm_bytes), so they are exact; allowed: the scalars and a
 * rounding per collective. The other groups (tp, ep, edp, emb) are absent (-1). Also checked:
 * with ZeRO >= 1 the DP traffic is below the old all-reduce's, 2 P (N-1)/N per reduction.
 *
 * With experts (E = 4, ep = 2, ZeRO 2 and 3): the flat layout starts with this worker's experts
 * (X floats, sharded over the Ne = N / 2 workers holding the same ones in runs of Sx, this
 * worker's `xmine`); the dense rest is counted on the DP group as above, and the experts on the
 * expert-data-parallel group, once per step (they stay whole in the working buffers):
 *   - ZeRO-2: (X - xmine) reduce-scatter + Sx (Ne-1) all-gather;
 *   - ZeRO-3: (X - xmine) reduce-scatter + M Sx (Ne-1) (one gather per forward pass);
 * with Ne = 1 (dp 2) that group is absent (-1): each worker's experts are its own. */
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

#define L_ 4 /* two blocks re-gathered by ZeRO-3's backward */
#define C_ 32
#define NH_ 2
#define T_ 8
#define B_ 8 /* rows per micro-batch, divisible by W = 2 and 4 */
#define V_ 64

static const ct_gpt_config CFG = {T_, V_, V_, L_, NH_, C_, 0, 0, 0, 0, 0, 0, 0, 0};
static const ct_gpt_config CFGX = {T_, V_, V_, L_, NH_, C_, 4, 2, 0, 0, 0, 0, 0, 0}; /* experts */
static const ct_adamw_hp HP = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};

static void batch(int s, int M, int d, int b, int *in, int *tg) {
    uint64_t x = 0x7654321ull + (uint64_t)s * 7919u;
    for (int mb = 0; mb < M; mb++)
        for (int row = 0; row < B_; row++)
            for (int t = 0; t < T_; t++) {
                x = x * 6364136223846793005ull + 1442695040888963407ull;
                if (row / b != d) continue;
                size_t i = ((size_t)mb * b + (size_t)(row % b)) * T_ + (size_t)t;
                in[i] = (int)((x >> 33) % V_), tg[i] = (int)((x >> 17) % V_);
            }
}

/* Floats of [a, b) outside this worker's shard [lo, hi). */
static double others(size_t a, size_t b, size_t lo, size_t hi) {
    size_t x0 = a > lo ? a : lo, x1 = b < hi ? b : hi;
    return (double)(b - a) - (double)(x1 > x0 ? x1 - x0 : 0);
}

static void worker(ct_topo *topo, int thread, ct_device_info *info) {
    ct_err err = {0};
    ct_comm *world = NULL;
    CT_REQUIRE_OK(ct_comm_world(topo, thread, &world), "world");
    int w = ct_comm_rank(world), W = ct_comm_size(world), b = B_ / W;
    ct_device *dev = NULL;
    ct_device_opts dopts = ct_device_opts_default();
    CT_REQUIRE_OK(ct_device_open(&dev, info, &dopts, &err), err.msg);
    int *in = malloc(sizeof(int) * 2 * b * T_), *tg = malloc(sizeof(int) * 2 * b * T_);
    for (int ex = 0; ex <= 1; ex++)
    for (int zero = ex ? 2 : 0; zero <= 3; zero++)
        for (int M = 1; M <= 2; M++) {
            ct_layout lay = {W, 1, 1, zero, ex ? 2 : 1};
            ct_grid *grid = NULL;
            ct_model *m = NULL;
            ct_exec *x = NULL;
            ct_schedule *s = NULL;
            CT_REQUIRE_OK(ct_grid_create(&grid, world, &lay, &err), err.msg);
            ct_model_plan plan;
            memset(&plan, 0, sizeof plan);
            plan.max_B = b, plan.max_T = T_, plan.slots = 1;
            plan.ep = ex ? ct_grid_ep(grid) : NULL; /* E = 4 over ep 2; no capacity limit */
            CT_REQUIRE_OK(ct_model_create_plan(&m, ex ? &CFGX : &CFG, &lay, ct_grid_coords(grid),
                                               dev, &plan, &err),
                          err.msg);
            CT_REQUIRE_OK(ct_model_init_random(m, 7), ct_model_errmsg(m));
            ct_exec_opts o = ct_exec_opts_default();
            o.grads.bucket_bytes = 8192; /* several buckets */
            CT_REQUIRE_OK(ct_exec_create(&x, m, grid, &o, &err), err.msg);
            CT_REQUIRE_OK(ct_sched_make(CT_SCHED_TRIVIAL, 1, M, 1, &s, &err), err.msg);
            int d = ct_grid_coords(grid)->dp_rank;
            ct_step_result res;
            for (int step = 0; step < 2; step++) {
                batch(step, M, d, b, in, tg);
                CT_REQUIRE_OK(ct_exec_step(x, s, in, tg, b, T_, &HP, step + 1, &res),
                              ct_exec_errmsg(x));
            }
            ct_exec_bytes eb;
            ct_exec_bytes_last(x, &eb);
            /* the formula, in floats */
            const ct_params *P = ct_model_params(m);
            size_t local = ct_params_local_len(P), flat = ct_params_flat_len(P), lo, hi, x0, X;
            ct_params_shard(P, &lo, &hi);
            ct_params_expert_range(P, &x0, &X); /* [0, X): the experts (0 without) */
            double N = W, S = (double)(hi - lo), rs = others(X, local, lo, hi), want = 0;
            double scalar = floor(2.0 * 4 * (N - 1) / N + 0.5) / 4; /* one float all-reduced */
            int nscalars = 1 + (zero >= 1); /* the loss; ZeRO >= 1: the shards' sum of squares */
            switch (zero) {
            case 0: want = 2.0 * (double)local * (N - 1) / N; break;
            case 1: want = rs + S * (N - 1); break;
            case 2: want = M * rs + S * (N - 1); break;
            case 3: {
                /* wte gathered again for the head, which evicts the slot(s) it overlaps: their
                 * blocks are gathered again in the backward too */
                size_t w0, w1, r0, wl, sl;
                ct_params_wte_range(P, &w0, &w1);
                ct_params_pwork_region(P, &r0, &wl, &sl);
                int ev = wl > sl ? 2 : 1;
                /* the working buffer: [experts | wpe | max(wte, two blocks) | lnf], from the
                 * model's sizes (a block's dense tensors 12 C^2 + 13 C floats; with experts
                 * the attention's, the LayerNorms' and the router's, 4 C^2 + 8 C + E C) */
                size_t blk = ex ? 4 * C_ * C_ + 8 * C_ + 4 * C_ : 12 * C_ * C_ + 13 * C_;
                size_t wte = (size_t)V_ * C_;
                size_t wlen = X + (size_t)T_ * C_ + (wte > 2 * blk ? wte : 2 * blk) + 2 * C_;
                CT_ASSERT_MSG(ct_params_buffer_len(P) == wlen && wl == wte && sl == blk,
                              "ZeRO-3 parameter working buffer of %zu floats (wte %zu, a slot "
                              "%zu), expected %zu", ct_params_buffer_len(P), wl, sl, wlen);
                double back = 0;
                for (int l = 0; l < L_ - 2 + ev; l++)
                    back += others(ct_params_layer_begin(P, l), ct_params_layer_end(P, l), lo, hi);
                want = M * (2 * rs + others(w0, w1, lo, hi) + back);
                break;
            }
            }
            want = 4 * (want + nscalars * scalar);
            double got = (double)eb.dp, P1 = (double)(zero ? flat : local) * (N - 1) / N * 4;
            char what[96];
            snprintf(what, sizeof what, "dp %d%s ZeRO-%d M %d worker %d", W,
                     ex ? " (ep 2, experts)" : "", zero, M, w);
            CT_ASSERT_MSG(fabs(got - want) <= 8 + 1e-6 * want,
                          "%s: %.0f DP bytes counted, the formula gives %.0f", what, got, want);
            if (ex) {
                size_t slo[2], shi[2];
                CT_ASSERT_EQ_INT(ct_params_shards(P, slo, shi), 2);
                double Ne = N / 2, Sx = (double)(shi[0] - slo[0]);
                double wx = 4 * ((double)X - Sx + (zero == 3 ? M : 1) * Sx * (Ne - 1));
                if (Ne > 1)
                    CT_ASSERT_MSG(fabs((double)eb.edp - wx) <= 8 + 1e-6 * wx && X > 0,
                                  "%s: %lld expert-data-parallel bytes counted, the formula "
                                  "gives %.0f", what, (long long)eb.edp, wx);
                else
                    CT_ASSERT_MSG(eb.edp == -1, "%s: expert group of one counted (%lld)", what,
                                  (long long)eb.edp);
                CT_ASSERT_MSG(eb.tp == -1 && eb.ep > 0 && eb.emb == -1,
                              "%s: groups (tp %lld ep %lld emb %lld)", what, (long long)eb.tp,
                              (long long)eb.ep, (long long)eb.emb);
                if (w == 0)
                    printf("ok: %s: %.0f DP bytes (formula %.0f), %lld expert-group bytes "
                           "(formula %.0f, group of %.0f)\n", what, got, want,
                           (long long)eb.edp, Ne > 1 ? wx : -1.0, Ne);
                ct_sched_free(s);
                ct_exec_free(x);
                ct_model_free(m);
                ct_grid_free(grid);
                continue;
            }
            CT_ASSERT_MSG(eb.tp == -1 && eb.ep == -1 && eb.edp == -1 && eb.emb == -1,
                          "%s: groups the layout lacks are counted (tp %lld ep %lld edp %lld emb "
                          "%lld)", what, (long long)eb.tp, (long long)eb.ep, (long long)eb.edp,
                          (long long)eb.emb);
            /* the formulas of the issue, in units of P (N-1)/N, over the workers' mean (a ZeRO-3
             * worker receives none of the blocks its shard holds): 2 for DDP, ZeRO-1 and ZeRO-2
             * at one micro-step; ZeRO-3 3 less the embeddings' and two blocks' backward gathers */
            float fm = (float)got;
            CT_REQUIRE_OK(ct_comm_allreduce(world, &fm, &fm, 1, CT_F32, CT_OP_AVG, NULL),
                          ct_comm_errmsg(world));
            double ratio = fm / P1;
            if (M == 1 && zero <= 2)
                CT_ASSERT_MSG(fabs(ratio - 2) < 0.01, "%s: %.4f x P(N-1)/N, expected 2", what,
                              ratio);
            if (M == 1 && zero == 3)
                CT_ASSERT_MSG(ratio > 2.2 && ratio < 3.0 + 1e-3, "%s: %.4f x P(N-1)/N, expected "
                              "between 2 and 3", what, ratio);
            if (w == 0)
                printf("ok: %s: %.0f DP bytes (formula %.0f); workers' mean %.4f x P(N-1)/N "
                       "(P = %zu floats)\n", what, got, want, ratio, zero ? flat : local);
            ct_sched_free(s);
            ct_exec_free(x);
            ct_model_free(m);
            ct_grid_free(grid);
        }
    free(in);
    free(tg);
    ct_device_free(dev);
    ct_comm_free(world);
}

int main(int argc, char **argv) {
    return ct_test_workers_main(&argc, &argv, "test_engine_zero_bytes", worker);
}
