/* test_parallel_grid.c - the grid: every layout of W workers, its coordinates and its groups.
 *
 * Run as `mpiexec -n R test_parallel_grid D`: R ranks x D threads = W workers. For every
 * factorisation dp x tp x pp = W and every ep dividing dp, each worker builds the grid and checks,
 * against what it computes alone from pure coordinates (ct_layout_coords / ct_layout_worker):
 *   (a) its coordinates;
 *   (b) every group: NULL exactly where expected, size, rank, member list (ct_comm_world_rank and
 *       an all-gather of world ranks through the group itself);
 *   (c) the groups of each axis partition the world (an all-gather over world of every worker's
 *       (first member, size, rank) per axis: each group claimed by exactly its members, ranks
 *       0..size-1 once each, every worker in one group per axis; middle stages in no embedding
 *       group);
 *   (d) an all-reduce over each group equals the sum over its expected members;
 * then (e) bad layouts (product != W, ep not dividing dp, dp 0, ZeRO 4) give CT_ERR_ARG with the
 * numbers named on every worker, workers passing different layouts all get CT_ERR_MISMATCH, and a
 * good grid still works afterwards; and ct_grid_describe gives one line per worker. (f) For every
 * TP degree, the most hosts a TP group spans and the description's hosts lines; with
 * `--nodes=N` (launched as mpiexec -hosts a:R,b:R,...: N hosts in blocks of R ranks, which Hydra
 * makes N nodes even on one machine) against the hosts the launch placed each worker on. */
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_parallel.h"
#include "ct_test.h"
#include "ct_test_mpi.h"

#define HAS(msg, needle) (strstr((msg), (needle)) != NULL)

enum { AX_TP, AX_DP, AX_PP, AX_EP, AX_EDP, AX_EMB, AX__N };
static const char *ax_name[AX__N] = {"tp", "dp", "pp", "ep", "edp", "emb"};

static ct_comm *grid_axis(ct_grid *g, int ax) {
    switch (ax) {
    case AX_TP: return ct_grid_tp(g);
    case AX_DP: return ct_grid_dp(g);
    case AX_PP: return ct_grid_pp(g);
    case AX_EP: return ct_grid_ep(g);
    case AX_EDP: return ct_grid_edp(g);
    default: return ct_grid_emb(g);
    }
}

/* Members (world workers, in group rank order) of worker w's group on axis ax, from coordinates
 * alone; returns the size (0: w is in no group). */
static int expect_members(const ct_layout *L, int w, int ax, int *mem) {
    ct_coords c = ct_layout_coords(L, w), x = c;
    int E = L->ep > 0 ? L->ep : 1, n = 0;
    switch (ax) {
    case AX_TP:
        for (int t = 0; t < L->tp; t++) { x.tp_rank = t; mem[n++] = ct_layout_worker(L, &x); }
        break;
    case AX_DP:
        for (int d = 0; d < L->dp; d++) { x.dp_rank = d; mem[n++] = ct_layout_worker(L, &x); }
        break;
    case AX_PP:
        for (int p = 0; p < L->pp; p++) { x.pp_rank = p; mem[n++] = ct_layout_worker(L, &x); }
        break;
    case AX_EP:
        for (int e = 0; e < E; e++) {
            x.dp_rank = c.dp_rank / E * E + e;
            mem[n++] = ct_layout_worker(L, &x);
        }
        break;
    case AX_EDP:
        for (int k = 0; k < L->dp / E; k++) {
            x.dp_rank = k * E + c.dp_rank % E;
            mem[n++] = ct_layout_worker(L, &x);
        }
        break;
    default:
        if (L->pp == 1) {
            mem[n++] = w;
        } else if (c.pp_rank == 0 || c.pp_rank == L->pp - 1) {
            x.pp_rank = 0;
            mem[n++] = ct_layout_worker(L, &x);
            x.pp_rank = L->pp - 1;
            mem[n++] = ct_layout_worker(L, &x);
        }
    }
    return n;
}

static int index_of(const int *a, int n, int v) {
    for (int i = 0; i < n; i++)
        if (a[i] == v) return i;
    return -1;
}

static void check_grid(ct_comm *world, ct_grid *g, const ct_layout *L) {
    char ctx[128];
    int W = ct_comm_size(world), w = ct_comm_rank(world);
    snprintf(ctx, sizeof ctx, "worker %d dp %d tp %d pp %d ep %d", w, L->dp, L->tp, L->pp, L->ep);
    int mem[64], got[64], claim[AX__N * 3], *claims = malloc(sizeof(int) * AX__N * 3 * (size_t)W);

    /* (a) coordinates */
    ct_coords c = ct_layout_coords(L, w);
    const ct_coords *gc = ct_grid_coords(g);
    CT_ASSERT_IN(ctx,
                 gc->dp_rank == c.dp_rank && gc->tp_rank == c.tp_rank && gc->pp_rank == c.pp_rank &&
                     gc->ep_rank == c.ep_rank,
                 "coords (%d %d %d %d) vs (%d %d %d %d)", gc->dp_rank, gc->tp_rank, gc->pp_rank,
                 gc->ep_rank, c.dp_rank, c.tp_rank, c.pp_rank, c.ep_rank);
    CT_ASSERT_IN(ctx, ct_layout_worker(L, &c) == w, "worker of my coordinates %d",
                 ct_layout_worker(L, &c));
    CT_ASSERT_IN(ctx, ct_grid_layout(g)->ep == (L->ep > 0 ? L->ep : 1), "ep read as %d",
                 ct_grid_layout(g)->ep);
    CT_ASSERT_IN(ctx, ct_grid_world(g) == world, "world handle kept");

    for (int ax = 0; ax < AX__N; ax++) {
        ct_comm *gr = grid_axis(g, ax);
        int n = expect_members(L, w, ax, mem);
        claim[3 * ax] = n ? mem[0] : -1;
        claim[3 * ax + 1] = n;
        claim[3 * ax + 2] = n ? index_of(mem, n, w) : -1;
        CT_ASSERT_IN(ctx, (gr == NULL) == (n == 0), "%s group %s, expected %d members", ax_name[ax],
                     gr ? "present" : "NULL", n);
        if (!gr || !n) continue;
        /* (b) members */
        CT_ASSERT_IN(ctx, ct_comm_size(gr) == n, "%s size %d, expected %d", ax_name[ax],
                     ct_comm_size(gr), n);
        CT_ASSERT_IN(ctx, ct_comm_rank(gr) == index_of(mem, n, w), "%s rank %d, expected %d",
                     ax_name[ax], ct_comm_rank(gr), index_of(mem, n, w));
        if (ct_comm_size(gr) != n) continue;
        for (int r = 0; r < n; r++)
            CT_ASSERT_IN(ctx, ct_comm_world_rank(gr, r) == mem[r],
                         "%s member %d is worker %d, expected %d", ax_name[ax], r,
                         ct_comm_world_rank(gr, r), mem[r]);
        int me = w;
        ct_status st = ct_comm_allgather(gr, &me, got, 1, CT_I32, NULL);
        CT_ASSERT_IN(ctx, st == CT_OK, "%s all-gather: %s", ax_name[ax], ct_comm_errmsg(gr));
        for (int r = 0; r < n && !st; r++)
            CT_ASSERT_IN(ctx, got[r] == mem[r],
                         "%s all-gather: rank %d says worker %d, expected %d", ax_name[ax], r,
                         got[r], mem[r]);
        /* (d) all-reduce */
        int v = w * 7 + 3, sum = 0, want = 0;
        for (int r = 0; r < n; r++) want += mem[r] * 7 + 3;
        st = ct_comm_allreduce(gr, &v, &sum, 1, CT_I32, CT_OP_SUM, NULL);
        CT_ASSERT_IN(ctx, st == CT_OK && sum == want, "%s all-reduce %d, expected %d (%s)",
                     ax_name[ax], sum, want, ct_comm_errmsg(gr));
        /* (e) within one process: a second handle split by the group itself with colour 0;
         * sibling groups split alike take the same id and colour and must still stay apart
         * (the registry keys on the members too). Across ranks they would share an MPI tag:
         * callers split such handles from world with distinct colours (the executor does). */
        ct_comm *again = NULL;
        if (ct_comm_nprocs(world) == 1) {
            st = ct_comm_split(gr, 0, ct_comm_rank(gr), &again);
            CT_ASSERT_IN(ctx, st == CT_OK && again, "%s: second handle: %s", ax_name[ax],
                         ct_comm_errmsg(gr));
        }
        if (again) {
            sum = 0;
            st = ct_comm_allreduce(again, &v, &sum, 1, CT_I32, CT_OP_SUM, NULL);
            CT_ASSERT_IN(ctx, st == CT_OK && sum == want && ct_comm_size(again) == n,
                         "%s second handle: all-reduce %d, expected %d, size %d (%s)", ax_name[ax],
                         sum, want, ct_comm_size(again), ct_comm_errmsg(again));
            ct_comm_free(again);
        }
    }

    /* (c) partition: every worker's claims, checked on every worker */
    ct_status st = ct_comm_allgather(world, claim, claims, AX__N * 3, CT_I32, NULL);
    CT_ASSERT_IN(ctx, st == CT_OK, "claims all-gather: %s", ct_comm_errmsg(world));
    for (int ax = 0; ax < AX__N && !st; ax++) {
        int covered = 0;
        for (int u = 0; u < W; u++) {
            const int *cu = claims + 3 * (AX__N * u + ax);
            int n = expect_members(L, u, ax, mem);
            CT_ASSERT_IN(ctx, cu[1] == n, "%s: worker %d claims a group of %d, expected %d",
                         ax_name[ax], u, cu[1], n);
            if (!n) continue;
            covered++;
            /* exactly the members claim this group, each with its own rank */
            int cnt = 0, seen = 0;
            for (int q = 0; q < W; q++) {
                const int *cq = claims + 3 * (AX__N * q + ax);
                if (cq[0] != cu[0]) continue;
                cnt++;
                int k = index_of(mem, n, q);
                CT_ASSERT_IN(
                    ctx, k >= 0 && cq[2] == k && cq[1] == n,
                    "%s: worker %d claims group of worker %d (rank %d of %d) but is not member %d",
                    ax_name[ax], q, cu[0], cq[2], cq[1], k);
                if (cq[2] >= 0 && cq[2] < 64) seen |= 1 << (cq[2] & 31);
            }
            CT_ASSERT_IN(ctx, cnt == n, "%s: group of worker %d has %d claimants, expected %d",
                         ax_name[ax], cu[0], cnt, n);
            CT_ASSERT_IN(ctx, n > 31 || seen == (int)((1u << n) - 1),
                         "%s: ranks of group %d not 0..%d", ax_name[ax], cu[0], n - 1);
        }
        int want_cov = ax == AX_EMB && L->pp > 2 ? W / L->pp * 2 : W;
        CT_ASSERT_IN(ctx, covered == want_cov, "%s: %d workers in a group, expected %d",
                     ax_name[ax], covered, want_cov);
    }
    free(claims);
}

/* Every layout of W workers; returns the count. */
static int layouts(int W, ct_layout *out) {
    int n = 0;
    for (int dp = 1; dp <= W; dp++)
        for (int tp = 1; tp <= W; tp++)
            for (int pp = 1; pp <= W; pp++) {
                if (dp * tp * pp != W) continue;
                for (int ep = 1; ep <= dp; ep++) {
                    if (dp % ep) continue;
                    /* ZeRO stages cycle (the grid ignores them); ep 1 sometimes spelled 0 */
                    out[n] = (ct_layout){.dp = dp, .tp = tp, .pp = pp, .zero = n % 4,
                                         .ep = ep == 1 && n % 2 ? 0 : ep};
                    n++;
                }
            }
    return n;
}

static void bad_layouts(ct_comm *world) {
    char ctx[64];
    int W = ct_comm_size(world), w = ct_comm_rank(world);
    snprintf(ctx, sizeof ctx, "worker %d bad layouts", w);
    struct { ct_layout lay; ct_status st; const char *needles[3]; } cases[] = {
        {{.dp = W, .tp = 1, .pp = 2, .zero = 0, .ep = 1}, CT_ERR_ARG, {"dp ", "x pp 2", "workers"}},
        {{.dp = W, .tp = 1, .pp = 1, .zero = 0, .ep = W + 1}, CT_ERR_ARG, {"ep ", "does not divide dp", ""}},
        {{.dp = 0, .tp = W, .pp = 1, .zero = 0, .ep = 1}, CT_ERR_ARG, {"dp 0", "1 or more", ""}},
        {{.dp = 1, .tp = 1, .pp = W, .zero = 4, .ep = 1}, CT_ERR_ARG, {"ZeRO stage 4", "0..3", ""}},
    };
    char num[3][64];
    snprintf(num[0], sizeof num[0], "dp %d x tp 1 x pp 2 = %d workers", W, 2 * W);
    snprintf(num[1], sizeof num[1], "there are %d workers", W);
    snprintf(num[2], sizeof num[2], "ep %d does not divide dp %d", W + 1, W);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ct_grid *g = (ct_grid *)1;
        ct_err err = {0};
        ct_status st = ct_grid_create(&g, world, &cases[i].lay, &err);
        CT_ASSERT_IN(ctx, st == cases[i].st, "case %zu: status %d (%s)", i, st, err.msg);
        CT_ASSERT_IN(ctx, g == NULL, "case %zu: no grid on failure", i);
        for (int k = 0; k < 3; k++)
            CT_ASSERT_IN(ctx, HAS(err.msg, cases[i].needles[k]), "case %zu: \"%s\" not in \"%s\"",
                         i, cases[i].needles[k], err.msg);
        if (i == 0)
            CT_ASSERT_IN(ctx, HAS(err.msg, num[0]) && HAS(err.msg, num[1]), "numbers: %s", err.msg);
        if (i == 1) CT_ASSERT_IN(ctx, HAS(err.msg, num[2]), "numbers: %s", err.msg);
        /* pure check gives the same */
        ct_err e2 = {0};
        CT_ASSERT_IN(
            ctx, ct_layout_check(&cases[i].lay, W, &e2) == cases[i].st && !strcmp(e2.msg, err.msg),
            "case %zu: pure check says \"%s\"", i, e2.msg);
    }
    if (W > 1) { /* workers that disagree */
        ct_layout a = {.dp = W, .tp = 1, .pp = 1, .zero = 0, .ep = 1};
        ct_layout b = {.dp = 1, .tp = W, .pp = 1, .zero = 0, .ep = 1};
        ct_grid *g = NULL;
        ct_err err = {0};
        ct_status st = ct_grid_create(&g, world, w == W - 1 ? &b : &a, &err);
        char want[64];
        snprintf(want, sizeof want, "worker %d passes layout dp 1 x tp %d", W - 1, W);
        CT_ASSERT_IN(ctx, st == CT_ERR_MISMATCH && g == NULL, "disagreeing layouts: status %d (%s)",
                     st, err.msg);
        CT_ASSERT_IN(ctx, HAS(err.msg, want), "\"%s\" not in \"%s\"", want, err.msg);
    }
}

/* Launched over `nodes` hosts in blocks (mpiexec -hosts a:R,b:R: node of rank r is r / R):
 * the host of worker w, known from the launch alone. 0 nodes: one host. */
static int nodes = 0;
static int launch_node(const ct_topo *topo, int w) {
    int R = ct_topo_nranks(topo), D = ct_topo_devices_per_rank(topo);
    return nodes ? (w / D) / (R / nodes) : 0;
}

/* (f) the hosts of TP groups: ct_grid_tp_hosts against the launch's placement, and the
 * description's hosts lines (TP inside hosts, or the warning naming the first group across). */
static void tp_hosts(ct_comm *world, ct_topo *topo, const ct_layout *L) {
    char ctx[96];
    int W = ct_comm_size(world), w = ct_comm_rank(world), want = 1;
    snprintf(ctx, sizeof ctx, "worker %d tp %d hosts", w, L->tp);
    for (int first = 0; first < W; first += L->tp) {
        int n = 1;
        for (int i = 1; i < L->tp; i++)
            n += launch_node(topo, first + i) != launch_node(topo, first + i - 1);
        if (n > want) want = n;
    }
    ct_grid *g = NULL;
    ct_err err = {0};
    char *s = NULL;
    CT_ASSERT_IN(ctx, ct_grid_create(&g, world, L, &err) == CT_OK, "%s", err.msg);
    if (!g) return;
    CT_ASSERT_IN(ctx, ct_grid_tp_hosts(g) == want, "TP groups span up to %d hosts, expected %d",
                 ct_grid_tp_hosts(g), want);
    CT_ASSERT_IN(ctx, ct_grid_describe(g, NULL, &s) == CT_OK, "%s", ct_comm_errmsg(world));
    if (s && nodes > 1) {
        CT_ASSERT_IN(ctx, HAS(s, "\nhosts: "), "no hosts line: %.300s", s);
        if (L->tp > 1 && want == 1)
            CT_ASSERT_IN(ctx, HAS(s, "TP groups: each inside one host\n"), "%.400s", s);
        if (want > 1)
            CT_ASSERT_IN(ctx, HAS(s, "TP groups span hosts (the first: workers "), "%.600s", s);
    } else if (s) {
        CT_ASSERT_IN(ctx, !HAS(s, "hosts: ") && !HAS(s, "TP groups"), "one host: %.300s", s);
    }
    if (w == 0 && s && want > 1) printf("%s", strstr(s, "warning:") ? strstr(s, "warning:") : s);
    free(s);
    ct_grid_free(g);
}

static void describe(ct_comm *world, ct_topo *topo) {
    char ctx[64];
    int W = ct_comm_size(world), w = ct_comm_rank(world);
    snprintf(ctx, sizeof ctx, "worker %d describe", w);
    ct_layout L = {.dp = W, .tp = 1, .pp = 1, .zero = 0, .ep = 1};
    ct_grid *g = NULL;
    ct_err err = {0};
    char dev[32], *s = NULL;
    snprintf(dev, sizeof dev, "device-%d", w);
    CT_ASSERT_IN(ctx, ct_grid_create(&g, world, &L, &err) == CT_OK, "%s", err.msg);
    if (!g) return;
    CT_ASSERT_IN(ctx, ct_grid_describe(g, dev, &s) == CT_OK, "%s", ct_comm_errmsg(world));
    const char *p = s;
    for (int r = 0; r < W && p; r++) {
        char head[64], tail[64];
        snprintf(head, sizeof head, "worker %d: dp %d tp 0 pp 0 ep 0 | rank ", r, r);
        snprintf(tail, sizeof tail, " | host %s | device-%d\n", ct_topo_host(topo), r);
        const char *nl = strchr(p, '\n');
        CT_ASSERT_IN(ctx, !strncmp(p, head, strlen(head)), "line %d: %.80s", r, p);
        const char *at = strstr(p, tail);
        CT_ASSERT_IN(ctx, at && nl && at + strlen(tail) == nl + 1, "line %d: %.120s", r, p);
        p = nl ? nl + 1 : NULL;
    }
    if (nodes > 1 && p) { /* then the hosts: which workers each holds */
        char want[64];
        snprintf(want, sizeof want, "hosts: %d: ", nodes);
        CT_ASSERT_IN(ctx, !strncmp(p, want, strlen(want)), "after the workers: %.120s", p);
        p = strchr(p, '\n');
        if (p) p++;
    }
    CT_ASSERT_IN(ctx, p && *p == 0, "exactly %d lines%s", W, nodes > 1 ? " and the hosts'" : "");
    if (w == 0 && s) printf("%s", s);
    free(s);
    ct_grid_free(g);
}

int main(int argc, char **argv) {
    ct_topo *topo = NULL;
    ct_err err = {0};
    int D = argc > 1 ? atoi(argv[1]) : 1;
    if (argc > 2 && !strncmp(argv[2], "--nodes=", 8)) nodes = atoi(argv[2] + 8);
    if (ct_topo_create(&topo, &argc, &argv, D, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    ct_test_mpi_begin();
    int W = ct_topo_world_size(topo);
    if (nodes && (ct_topo_nnodes(topo) != nodes || ct_topo_nranks(topo) % nodes)) {
        fprintf(stderr, "test_parallel_grid: launched for %d hosts, MPI sees %d nodes (%d ranks)\n",
                nodes, ct_topo_nnodes(topo), ct_topo_nranks(topo));
        ct_topo_free(topo);
        return 1;
    }
    ct_layout *lays = malloc(sizeof(ct_layout) * 256);
    int nl = layouts(W, lays);
    double t0 = MPI_Wtime();
#pragma omp parallel num_threads(D)
    {
        const char *ctx = "setup";
        ct_comm *world = NULL;
        CT_ASSERT_IN(ctx, ct_comm_world(topo, omp_get_thread_num(), &world) == CT_OK, "world");
        for (int i = 0; i < nl && world; i++) {
            ct_grid *g = NULL;
            ct_err e = {0};
            ct_status st = ct_grid_create(&g, world, &lays[i], &e);
            CT_ASSERT_IN(ctx, st == CT_OK, "layout %d: %s", i, e.msg);
            if (g) check_grid(world, g, &lays[i]);
            ct_grid_free(g);
        }
        if (world) {
            bad_layouts(world);
            /* a good grid still works after the refusals */
            ct_grid *g = NULL;
            ct_err e = {0};
            CT_ASSERT_IN(ctx, ct_grid_create(&g, world, &lays[nl - 1], &e) == CT_OK,
                         "after errors: %s", e.msg);
            if (g) check_grid(world, g, &lays[nl - 1]);
            ct_grid_free(g);
            describe(world, topo);
            for (int tp = 1; tp <= W; tp++) /* every TP degree, the rest data parallel */
                if (W % tp == 0) tp_hosts(world, topo, &(ct_layout){W / tp, tp, 1, 0, 1});
        }
        ct_grid_free(NULL);
        ct_comm_free(world);
    }
    char name[120];
    snprintf(name, sizeof name, "test_parallel_grid: %d ranks x %d threads, %d layouts in %.2f s",
             ct_topo_nranks(topo), D, nl, MPI_Wtime() - t0);
    int rc = ct_test_mpi_end(name);
    free(lays);
    ct_topo_free(topo);
    return rc;
}
