/* bench_moe - where one mixture-of-experts layer's time goes under expert parallelism: the
 * all-to-all-v's that dispatch the tokens and bring the results back (with their host staging),
 * the device's gather and weighted combine, the experts' GEMMs, and the router, forward and
 * backward, for an EP group of the N = ranks x --devices-per-rank workers.
 *
 *     bench_moe [--devices-per-rank N] [--skew S] [--experts E --top-k K --dim C --seq T
 *               --batch B --capacity F --steps S --warmup W]
 *     POCL_DEVICES="pthread pthread" bench_moe --devices-per-rank 2   (ep 2 as threads)
 *     mpiexec -n 4 bench_moe                                            (ep 4 as ranks)
 *
 * Each worker holds B rows of T tokens (its share of a data-parallel batch) and E / N experts;
 * the layer runs forward and backward S times after W warm-up rounds, with the device waited for
 * around each part (ct_moe_set_timing), so every part's time is its own:
 *   dispatch+combine = the all-to-all-v's (device reads into staging, the exchange, the writes;
 *                      0 at ep 1) + the gather into expert-major order and the weighted combine
 *                      (and their backwards) on the device;
 *   experts          = the experts' fc, GELU and fcproj, forward and backward (one GEMM per
 *                      expert over all its rows);
 *   router           = the router GEMMs, softmax/top-k/capacity kernels, the counts read back.
 * Load: --skew 0 draws the router and the tokens at random (balanced within noise); --skew S > 0
 * gives every token a shared direction that the router's row 0 weighs by S, so expert 0 is most
 * tokens' first choice (its worker computes more rows and receives more in the exchange).
 * Worker 0 prints the figures (each the slowest worker's mean per step), the rows each worker's
 * experts computed per step, and a "JSON " line. Default shape: C 256, E 8, K 2, B 4, T 256,
 * capacity factor 0 (no limit, so a skew shows whole). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine.h"
#include "ct_parallel.h"

typedef struct bopts {
    int D, E, K, C, T, B, steps, warmup;
    double F, skew;
} bopts;

#define DIE(...)                                                                 \
    do {                                                                         \
        fprintf(stderr, "bench_moe: " __VA_ARGS__);                              \
        fprintf(stderr, "\n");                                                   \
        fflush(stderr);                                                          \
        exit(1);                                                                 \
    } while (0)

static float *rnd(unsigned long long seed, size_t n, float scale) {
    float *p = malloc(n * sizeof(float));
    unsigned long long x = seed * 0x9E3779B97F4A7C15ull + 12345;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = scale * ((float)((x >> 40) & 0xffffff) / 16777216.0f * 2.0f - 1.0f);
    }
    return p;
}

static void worker(ct_topo *topo, int thread, const ct_device_info *info, const bopts *o) {
    ct_err err = {0};
    ct_comm *world = NULL;
    ct_device *dev = NULL;
    ct_arena *arena = NULL; /* one piece: ab */
    ct_buffer *ab = NULL;
    if (ct_comm_world(topo, thread, &world)) DIE("no world");
    int N = ct_comm_size(world), r = ct_comm_rank(world);
    ct_device_opts dopts = ct_device_opts_default();
    if (ct_device_open(&dev, info, &dopts, &err)) DIE("%s", err.msg);
    ct_moe_cfg mc = {o->E, o->K, o->F, 0.01, o->B, o->T, o->C, 1, 1, 1, 0, 0, 0, 0};
    if (ct_moe_check(&mc, N, &err)) DIE("%s", err.msg);
    size_t blk, scr, C = (size_t)o->C, BT = (size_t)o->B * o->T, El = (size_t)(o->E / N);
    ct_moe_plan(&mc, N, &blk, &scr);
    size_t wsz = (size_t)o->E * C + El * (8 * C * C + 5 * C); /* router + the local experts */
    size_t need = 4 * BT * C + 2 * wsz + blk + scr + 64 * 16;
    static const size_t part0 = 0;
    if (ct_arena_alloc(dev, CT_MEM_WORKSPACE, "bench arena", need * sizeof(float), &part0, NULL, 1,
                       &arena))
        DIE("%s", ct_device_errmsg(dev));
    ab = ct_arena_at(arena, 0, NULL);
    cl_mem am = ct_buffer_mem(ab);
    size_t at = 0;
#define TAKE(n) (at += ((size_t)(n) + 15) / 16 * 16, ct_view_of(am, at - ((size_t)(n) + 15) / 16 * 16))
    ct_view x = TAKE(BT * C), y = TAKE(BT * C), dy = TAKE(BT * C), dx = TAKE(BT * C);
    ct_moe_weights w, g;
    w.routerw = TAKE(o->E * C), w.fcw = TAKE(El * 4 * C * C), w.fcb = TAKE(El * 4 * C);
    w.fcprojw = TAKE(El * 4 * C * C), w.fcprojb = TAKE(El * C);
    g.routerw = TAKE(o->E * C), g.fcw = TAKE(El * 4 * C * C), g.fcb = TAKE(El * 4 * C);
    g.fcprojw = TAKE(El * 4 * C * C), g.fcprojb = TAKE(El * C);
    ct_view saved = TAKE(blk), scratch = TAKE(scr);
    /* the data: this worker's rows, the router (every worker the same), its experts */
    float *hx = rnd(100 + (unsigned long long)r, BT * C, 1.0f);
    float *hw = rnd(7, (size_t)o->E * C, 0.3f);
    if (o->skew > 0) {
        for (size_t i = 0; i < BT; i++) hx[i * C] = 1.0f; /* a shared direction */
        hw[0] = (float)o->skew;
    }
    float *he = rnd(8 + (unsigned long long)r, El * 4 * C * C, 0.05f);
    float *hdy = rnd(200 + (unsigned long long)r, BT * C, 1.0f);
#define PUT(v, h, n)                                                                               \
    if (ct_buffer_write(ab, (v).off * sizeof(float), (h), (n) * sizeof(float)))                \
        DIE("%s", ct_device_errmsg(dev));
    PUT(x, hx, BT * C);
    PUT(dy, hdy, BT * C);
    PUT(w.routerw, hw, (size_t)o->E * C);
    PUT(w.fcw, he, El * 4 * C * C);
    PUT(w.fcprojw, he, El * 4 * C * C);
    ct_moe *moe = NULL;
    if (ct_moe_create(&moe, &mc, N > 1 ? world : NULL, NULL, dev, arena, &err)) DIE("%s", err.msg);
    ct_moe_set_timing(moe, 1);
    double wall = 0;
    for (int s = 0; s < o->warmup + o->steps; s++) {
        if (s == o->warmup) {
            ct_moe_stats_reset(moe);
            ct_comm_barrier(world, NULL);
            wall = ct_time_now();
        }
        if (ct_moe_forward(moe, 0, 0, 0, y, saved, scratch, x, &w, o->B, o->T) ||
            ct_moe_backward(moe, 0, 0, dx, &g, dy, saved, scratch, x, &w, 1.0f) ||
            ct_device_finish(dev))
            DIE("step %d: %s", s, ct_device_errmsg(dev));
    }
    wall = (ct_time_now() - wall) * 1e3 / o->steps;
    ct_moe_stats st;
    ct_moe_stats_get(moe, &st);
    /* the slowest worker's parts, every worker's rows */
    float mine[6] = {(float)(st.alltoall_ms / o->steps), (float)(st.gather_ms / o->steps),
                     (float)(st.expert_ms / o->steps),   (float)(st.route_ms / o->steps),
                     (float)wall, (float)(st.bytes / o->steps)};
    float mx[6], *rows = malloc(sizeof(float) * (size_t)N), myrows = (float)(st.rows / o->steps);
    if (ct_comm_allreduce(world, mine, mx, 6, CT_F32, CT_OP_MAX, NULL) ||
        ct_comm_allgather(world, &myrows, rows, 1, CT_F32, NULL))
        DIE("%s", ct_comm_errmsg(world));
    if (r == 0) {
        double mean = 0, big = 0;
        for (int i = 0; i < N; i++) mean += rows[i] / N, big = fmax(big, rows[i]);
        char rl[512] = "";
        size_t a = 0;
        for (int i = 0; i < N && a < sizeof rl - 16; i++)
            a += (size_t)snprintf(rl + a, sizeof rl - a, "%s%.0f", i ? "," : "", rows[i]);
        printf("ep %d, %s load (skew %g): per forward+backward of one layer (the slowest worker's "
               "mean over %d steps)\n",
               N, o->skew > 0 ? "skewed" : "balanced", o->skew, o->steps);
        printf("  dispatch+combine %8.2f ms (all-to-all-v %.2f ms, %.2f MB sent; gather/combine "
               "on the device %.2f ms)\n",
               mx[0] + mx[1], mx[0], mx[5] / 1e6, mx[1]);
        printf("  experts          %8.2f ms\n", mx[2]);
        printf("  router           %8.2f ms\n", mx[3]);
        printf("  step             %8.2f ms wall; rows per worker's experts %s (busiest %.2f x the "
               "mean)\n",
               mx[4], rl, mean > 0 ? big / mean : 0.0);
        printf("JSON {\"ep\":%d,\"skew\":%g,\"E\":%d,\"K\":%d,\"C\":%d,\"B\":%d,\"T\":%d,"
               "\"capacity\":%g,\"alltoall_ms\":%.4f,\"gather_ms\":%.4f,\"dispatch_combine_ms\":"
               "%.4f,\"expert_ms\":%.4f,\"router_ms\":%.4f,\"step_ms\":%.4f,\"bytes\":%.0f,"
               "\"rows\":[%s],\"max_over_mean\":%.4f}\n",
               N, o->skew, o->E, o->K, o->C, o->B, o->T, o->F, mx[0], mx[1], mx[0] + mx[1], mx[2],
               mx[3], mx[4], mx[5], rl, mean > 0 ? big / mean : 0.0);
    }
    free(rows), free(hx), free(hw), free(he), free(hdy);
    ct_moe_free(moe);
    ct_arena_free(arena);
    ct_device_free(dev);
    ct_comm_free(world);
}

int main(int argc, char **argv) {
    bopts o = {1, 8, 2, 256, 256, 4, 10, 2, 0.0, 0.0};
    struct {
        const char *flag;
        int *i;
        double *d;
    } f[] = {{"--devices-per-rank", &o.D, NULL}, {"--experts", &o.E, NULL}, {"--top-k", &o.K, NULL},
             {"--dim", &o.C, NULL},              {"--seq", &o.T, NULL},     {"--batch", &o.B, NULL},
             {"--steps", &o.steps, NULL},        {"--warmup", &o.warmup, NULL},
             {"--capacity", NULL, &o.F},         {"--skew", NULL, &o.skew}};
    ct_err err = {0};
    ct_topo *topo = NULL;
    for (int i = 1; i < argc; i++) {
        int hit = 0;
        for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
            if (!strcmp(argv[i], f[k].flag) && i + 1 < argc) {
                if (f[k].i) *f[k].i = atoi(argv[++i]);
                else *f[k].d = atof(argv[++i]);
                hit = 1;
            }
        if (!hit && strcmp(argv[i], "--help")) {
            fprintf(stderr, "bench_moe: unknown or incomplete argument %s (see --help)\n", argv[i]);
            return 2;
        }
        if (!strcmp(argv[i], "--help")) {
            printf("bench_moe [--devices-per-rank N --skew S --experts E --top-k K --dim C --seq T "
                   "--batch B --capacity F --steps S --warmup W]\n");
            return 0;
        }
    }
    if (o.D < 1 || o.steps < 1 || o.warmup < 0) {
        fprintf(stderr, "bench_moe: bad --devices-per-rank, --steps or --warmup\n");
        return 2;
    }
    if (ct_topo_create(&topo, &argc, &argv, o.D, &err)) DIE("%s", err.msg);
    ct_device_info *list = NULL;
    int n = 0, picks[16], np = 0;
    const char *spec = ct_device_spec_env();
    if (ct_device_list(&list, &n, &err) ||
        ct_device_select(list, n, spec ? spec : "cpu", 0, picks, &np, &err))
        DIE("%s", err.msg);
#pragma omp parallel num_threads(o.D)
    worker(topo, omp_get_thread_num(), &list[picks[omp_get_thread_num() % np]], &o);
    ct_device_list_free(list);
    ct_topo_free(topo);
    return 0;
}
