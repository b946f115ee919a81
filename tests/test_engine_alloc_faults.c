/* test_engine_alloc_faults.c - allocation fault injection (SQLite's and libuv's habit): every
 * allocation of building a worker is made to fail once, in turn, and each failure must come back
 * clean.
 *
 *     mpiexec -n R test_engine_alloc_faults        (R = 1: one device; R = 2: data parallel)
 *
 * Scenarios, each a loop n = 1, 2, ... with ct_alloc_fail_nth(n, host | device) until a build
 * passes without reaching its n-th allocation:
 *   - "device":  open a device, create a model (its kernels, parameters, activation arena and
 *                optimizer), initialise it, create the executor of the 1x1x1 grid;
 *   - "dp/zeroZ" (R = 2, Z = 0..3): the world communicator, the grid (its splits), a model for the
 *                grid's coordinates, the executor (gradient reducer with its thread, ZeRO, the
 *                optimizer) on a device opened once outside the loop.
 * Each failed build must return a status that says memory (CT_ERR_NOMEM or CT_ERR_DEVICE_MEM)
 * with a message (ct_comm_world has no error record: its status alone is checked); the device's
 * memory accounting must be back where it was before the failing call (and at zero once the
 * caller freed what it built); under AddressSanitizer (-DCT_SANITIZE=ON) the leak check at exit
 * fails the test if anything a failure path left behind was not freed.
 *
 * With ranks, every process injects at the same n into the same deterministic sequence of its
 * own allocations (building is symmetric across workers; nothing allocates on another thread
 * while building), so all workers fail at the same place; the test checks they agree. That is
 * what makes the loop finish: a failure on one worker only leaves the others in a collective,
 * the case CT_COMM_TIMEOUT and the programs' MPI_Abort are for (tests/test_engine_failures.sh). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine.h"
#include "ct_test.h"
#include "ct_test_dev.h"
#include "ct_test_mpi.h"

static const ct_gpt_config CFG = {8, 32, 32, 2, 2, 16, 0, 0, 0, 0, 0, 0, 0, 0}; /* maxT V Vp L NH C */
#define B_ 4
#define T_ 8

static int mem_status(ct_status st) { return st == CT_ERR_NOMEM || st == CT_ERR_DEVICE_MEM; }

/* Device bytes and live buffers, for "back where it was". */
static void mem_now(ct_device *dev, uint64_t *bytes, int *live) {
    ct_mem_stats s;
    ct_device_mem_stats(dev, &s);
    *bytes = s.total_current;
    *live = s.live_buffers;
}

typedef struct built {
    ct_comm *world;
    ct_grid *grid;
    ct_device *dev; /* owned only in the "device" scenario */
    ct_model *m;
    ct_exec *x;
} built;

static void unbuild(built *b, int own_dev) {
    ct_exec_free(b->x);
    ct_model_free(b->m);
    if (b->dev) {
        uint64_t bytes;
        int live;
        mem_now(b->dev, &bytes, &live);
        CT_ASSERT_MSG(bytes == 0 && live == 0,
                      "after freeing what was built the device still counts %llu bytes in %d "
                      "buffers",
                      (unsigned long long)bytes, live);
    }
    if (own_dev) ct_device_free(b->dev);
    ct_grid_free(b->grid);
    ct_comm_free(b->world);
    memset(b, 0, sizeof *b);
}

/* A failed step: a memory status, a message, and the device accounting unchanged by the call. */
static ct_status check_fail(const char *what, ct_status st, const char *msg, ct_device *dev,
                            uint64_t bytes0, int live0) {
    if (st == CT_OK) return st;
    CT_ASSERT_MSG(mem_status(st), "%s failed with %s, not a memory status: %s", what,
                  ct_status_name(st), msg ? msg : "");
    if (msg) CT_ASSERT_MSG(msg[0] != '\0', "%s failed (%s) without a message", what,
                           ct_status_name(st));
    if (dev) {
        uint64_t bytes;
        int live;
        mem_now(dev, &bytes, &live);
        CT_ASSERT_MSG(bytes == bytes0 && live == live0,
                      "%s failed but left the device at %llu bytes in %d buffers (it held %llu in "
                      "%d before the call)",
                      what, (unsigned long long)bytes, live, (unsigned long long)bytes0, live0);
    }
    return st;
}

#define STEP(what, call, msg, dev)                                                                 \
    do {                                                                                           \
        uint64_t b0_ = 0;                                                                          \
        int l0_ = 0;                                                                               \
        if (dev) mem_now(dev, &b0_, &l0_);                                                         \
        ct_status st_ = (call);                                                                    \
        if (st_ != CT_OK) return check_fail(what, st_, msg, dev, b0_, l0_);                        \
    } while (0)

/* One device, the 1x1x1 grid. */
static ct_status build_device(built *b, const ct_device_info *info) {
    ct_err err = {0};
    ct_device_opts o = ct_device_opts_default();
    ct_layout lay = {1, 1, 1, 0, 1};
    ct_coords at = {0, 0, 0, 0};
    STEP("ct_device_open", ct_device_open(&b->dev, info, &o, &err), err.msg, NULL);
    STEP("ct_model_create", ct_model_create(&b->m, &CFG, &lay, &at, b->dev, B_, T_, &err), err.msg,
         b->dev);
    STEP("ct_model_init_random", ct_model_init_random(b->m, 5), ct_model_errmsg(b->m), b->dev);
    STEP("ct_exec_create", ct_exec_create(&b->x, b->m, NULL, NULL, &err), err.msg, b->dev);
    return CT_OK;
}

/* Data parallel over every rank, ZeRO stage `zero`, on the device opened outside the loop. */
static ct_status build_dp(built *b, ct_topo *topo, ct_device *dev, int zero) {
    ct_err err = {0};
    int W = ct_topo_world_size(topo);
    ct_layout lay = {W, 1, 1, zero, 1};
    STEP("ct_comm_world", ct_comm_world(topo, 0, &b->world), NULL, NULL);
    STEP("ct_grid_create", ct_grid_create(&b->grid, b->world, &lay, &err), err.msg, NULL);
    b->dev = dev;
    STEP("ct_model_create",
         ct_model_create(&b->m, &CFG, &lay, ct_grid_coords(b->grid), dev, B_ / W, T_, &err),
         err.msg, dev);
    STEP("ct_model_init_random", ct_model_init_random(b->m, 5), ct_model_errmsg(b->m), dev);
    ct_exec_opts xo = ct_exec_opts_default();
    xo.grads.bucket_bytes = 4096; /* several buckets */
    xo.grads.overlap = 1;         /* the communication thread is started */
    STEP("ct_exec_create", ct_exec_create(&b->x, b->m, b->grid, &xo, &err), err.msg, dev);
    return CT_OK;
}

/* A check that all ranks made the same decision (outside injection). */
static void agree(ct_topo *topo, const char *what, long n, int v) {
    if (!topo || ct_topo_nranks(topo) < 2) return;
    int lo = v, hi = v;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    CT_ASSERT_MSG(lo == hi, "%s, n = %ld: the ranks disagree (%d vs %d)", what, n, lo, hi);
}

typedef struct scen {
    const char *name;
    ct_topo *topo;
    const ct_device_info *info;
    ct_device *dev;
    int zero, own_dev;
} scen;

static ct_status run_build(built *b, scen *s) {
    return s->own_dev ? build_device(b, s->info) : build_dp(b, s->topo, s->dev, s->zero);
}

/* The loop: fail allocation n for n = 1, 2, ... until a build finishes before its n-th. */
static void scenario(scen *s, int rank) {
    long n = 1, failures = 0, allocs = 0, benign = 0;
    int byst[CT_ERR_STATE + 1] = {0};
    double t0 = ct_time_now();
    for (;; n++) {
        built b;
        memset(&b, 0, sizeof b);
        ct_alloc_fail_nth(n, CT_ALLOC_HOST | CT_ALLOC_DEVICE);
        ct_status st = run_build(&b, s);
        int fired = ct_alloc_failed();
        allocs = ct_alloc_count();
        ct_alloc_fail_nth(0, 0);
        agree(s->topo, s->name, n, fired * 100 + (int)st);
        if (fired == 2) { /* a benign allocation (the program cache): success is allowed */
            CT_ASSERT_MSG(st == CT_OK || mem_status(st), "%s: benign allocation %ld: %s", s->name,
                          n, ct_status_name(st));
            benign++;
        } else if (fired) {
            CT_ASSERT_MSG(st != CT_OK, "%s: allocation %ld failed but the build reported success",
                          s->name, n);
            failures++;
            if ((int)st <= CT_ERR_STATE) byst[st]++;
        } else {
            CT_ASSERT_MSG(st == CT_OK, "%s: nothing was injected (n = %ld) but the build failed: %s",
                          s->name, n, ct_status_name(st));
        }
        unbuild(&b, s->own_dev);
        if (!fired || ct_test_failures > 20) break;
    }
    if (rank == 0)
        printf("ok: %s: %ld allocations, each failed once: %ld clean failures (%d out of host "
               "memory, %d out of device memory), %ld benign (program cache), then a full build; "
               "%.1f s\n",
               s->name, allocs, failures, byst[CT_ERR_NOMEM], byst[CT_ERR_DEVICE_MEM], benign,
               ct_time_now() - t0);
    CT_ASSERT_MSG(failures >= 10, "%s: only %ld allocations were seen", s->name, failures);
}

int main(int argc, char **argv) {
    ct_err err = {0};
    ct_topo *topo = NULL;
    CT_ASSERT_OK(ct_topo_create(&topo, &argc, &argv, 1, &err), err.msg);
    if (!topo) return 1;
    ct_test_mpi_begin();
    int rank = ct_topo_rank(topo), R = ct_topo_nranks(topo);
    ct_test_devices ds;
    CT_REQUIRE_OR(!ct_test_devices_find(&ds, "cpu", 1), 1, "no device");
    const ct_device_info *list = ds.list;
    const int *pick = ds.pick;
    if (R == 1) {
        scen s = {"device (open, model, executor)", NULL, &list[pick[0]], NULL, 0, 1};
        scenario(&s, rank);
    } else {
        ct_device *dev = NULL;
        ct_device_opts o = ct_device_opts_default();
        CT_ASSERT_OK(ct_device_open(&dev, &list[pick[0]], &o, &err), err.msg);
        {   /* the engine's kernels built once, outside the loop (the "device" scenario covers
               their allocations) */
            ct_model *warm = NULL;
            ct_layout lay = {1, 1, 1, 0, 1};
            ct_coords at = {0, 0, 0, 0};
            CT_ASSERT_OK(ct_model_create(&warm, &CFG, &lay, &at, dev, B_, T_, &err), err.msg);
            ct_model_free(warm);
        }
        for (int zero = 0; zero <= 3; zero++) {
            char name[64];
            snprintf(name, sizeof name, "dp %d ranks, ZeRO-%d (world, grid, model, executor)", R,
                     zero);
            scen s = {name, topo, NULL, dev, zero, 0};
            scenario(&s, rank);
        }
        ct_device_free(dev);
    }
    ct_test_devices_free(&ds);
    int rc = ct_test_mpi_end("test_engine_alloc_faults");
    ct_topo_free(topo);
    return rc;
}
