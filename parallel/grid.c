/* grid.c - the worker grid: a layout dp x tp x pp (experts over ep consecutive dp ranks) laid over
 * the world group, this worker's coordinates, one ct_comm per axis, and where its workers run
 * (the host of each, whether a TP group crosses hosts).
 *
 * Promises: the coordinates are a pure function of (layout, world rank), so any worker can compute
 * any other's; every group is split exactly once, from world, with key = the coordinate along its
 * axis, so group rank = coordinate; a layout that cannot run, or workers passing different layouts,
 * fail on every worker alike before any group exists (one all-gather of the layouts decides). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel_impl.h"

struct ct_grid {
    ct_layout lay; /* ep read as >= 1 */
    ct_coords at;
    ct_comm *world; /* the caller's, not owned */
    ct_comm *tp, *dp, *pp, *ep, *edp, *emb;
};

static int ep_of(const ct_layout *lay) { return lay->ep > 0 ? lay->ep : 1; }

ct_status ct_layout_check(const ct_layout *lay, int W, ct_err *err) {
    if (!lay) return CT_ERR(err, CT_ERR_ARG, "layout is NULL");
    int ep = ep_of(lay);
    if (lay->dp < 1 || lay->tp < 1 || lay->pp < 1)
        return CT_ERR(err, CT_ERR_ARG,
                      "layout dp %d x tp %d x pp %d: every degree must be 1 or more (%s %d)", lay->dp,
                      lay->tp, lay->pp, lay->dp < 1 ? "dp" : lay->tp < 1 ? "tp" : "pp",
                      lay->dp < 1 ? lay->dp : lay->tp < 1 ? lay->tp : lay->pp);
    if (lay->ep < 0 || lay->dp % ep)
        return CT_ERR(err, CT_ERR_ARG,
                      "layout: ep %d does not divide dp %d (experts are spread over ep consecutive "
                      "data-parallel ranks)", lay->ep, lay->dp);
    if (lay->zero < 0 || lay->zero > 3)
        return CT_ERR(err, CT_ERR_ARG, "layout: ZeRO stage %d is outside 0..3", lay->zero);
    long long prod = (long long)lay->dp * lay->tp * lay->pp;
    if (prod != W)
        return CT_ERR(err, CT_ERR_ARG,
                      "layout dp %d x tp %d x pp %d = %lld workers, but there are %d workers (ranks x "
                      "devices per rank)", lay->dp, lay->tp, lay->pp, prod, W);
    return CT_OK;
}

int ct_layout_worker(const ct_layout *lay, const ct_coords *c) {
    return (c->pp_rank * lay->dp + c->dp_rank) * lay->tp + c->tp_rank;
}

ct_coords ct_layout_coords(const ct_layout *lay, int w) {
    ct_coords c;
    c.tp_rank = w % lay->tp;
    c.dp_rank = (w / lay->tp) % lay->dp;
    c.pp_rank = w / (lay->tp * lay->dp);
    c.ep_rank = c.dp_rank % ep_of(lay);
    return c;
}

/* Copy a failure recorded on world's handle into the caller's record. */
static ct_status world_err(ct_comm *world, ct_status st, ct_err *err, const char *what) {
    return CT_ERR(err, st, "ct_grid_create: %s: %s", what, ct_comm_errmsg(world));
}

ct_status ct_grid_create(ct_grid **out, ct_comm *world, const ct_layout *lay, ct_err *err) {
    ct_status st = CT_OK;
    ct_grid *g = NULL;
    int32_t *all = NULL;
    if (!out || !world || !lay)
        return CT_ERR(err, CT_ERR_ARG, "ct_grid_create: out, world and layout must not be NULL");
    *out = NULL;
    int W = ct_comm_size(world), w = ct_comm_rank(world);

    /* 1. agree: every worker sees every layout, so all fail alike or none does */
    all = ct_malloc(sizeof(int32_t) * 5 * (size_t)W);
    g = ct_calloc(1, sizeof *g);
    if (!all || !g) {
        st = CT_ERR(err, CT_ERR_NOMEM, "ct_grid_create: out of memory");
        goto cleanup; /* local: the others may hang in the all-gather; nothing to do about it */
    }
    int32_t mine[5] = {lay->dp, lay->tp, lay->pp, lay->zero, lay->ep};
    memcpy(all + 5 * w, mine, sizeof mine);
    st = ct_comm_allgather(world, all + 5 * w, all, 5, CT_I32, NULL);
    if (st) {
        st = world_err(world, st, err, "exchanging layouts");
        goto cleanup;
    }
    for (int r = 1; r < W; r++)
        if (memcmp(all + 5 * r, all, sizeof mine)) {
            const int32_t *a = all + 5 * r;
            st = CT_ERR(err, CT_ERR_MISMATCH,
                        "ct_grid_create: worker %d passes layout dp %d x tp %d x pp %d (zero %d, ep %d) "
                        "but worker 0 passes dp %d x tp %d x pp %d (zero %d, ep %d)", r, a[0], a[1],
                        a[2], a[3], a[4], all[0], all[1], all[2], all[3], all[4]);
            goto cleanup;
        }
    if ((st = ct_layout_check(lay, W, err))) goto cleanup;
    g->lay = *lay;
    g->lay.ep = ep_of(lay);
    g->at = ct_layout_coords(&g->lay, w);
    g->world = world;

    /* 2. one split per axis; colour = index of the group, key = coordinate along the axis */
    const ct_layout *L = &g->lay;
    const ct_coords *c = &g->at;
    int E = L->ep, dp_groups = L->dp / E;
    int emb_color = L->pp == 1 ? w
                  : c->pp_rank == 0 || c->pp_rank == L->pp - 1 ? c->dp_rank * L->tp + c->tp_rank
                  : CT_COMM_UNDEFINED;
    struct { ct_comm **dst; int color, key; const char *name; } axes[] = {
        {&g->tp, c->pp_rank * L->dp + c->dp_rank, c->tp_rank, "TP"},
        {&g->dp, c->pp_rank * L->tp + c->tp_rank, c->dp_rank, "DP"},
        {&g->pp, c->dp_rank * L->tp + c->tp_rank, c->pp_rank, "PP"},
        {&g->ep, (c->pp_rank * L->tp + c->tp_rank) * dp_groups + c->dp_rank / E, c->ep_rank, "EP"},
        {&g->edp, (c->pp_rank * L->tp + c->tp_rank) * E + c->ep_rank, c->dp_rank / E,
         "expert-data-parallel"},
        {&g->emb, emb_color, c->pp_rank == 0 ? 0 : 1, "embedding"},
    };
    for (size_t i = 0; i < sizeof axes / sizeof axes[0]; i++) {
        st = ct_comm_split(world, axes[i].color, axes[i].key, axes[i].dst);
        if (st) {
            char what[64];
            snprintf(what, sizeof what, "splitting the %s groups", axes[i].name);
            st = world_err(world, st, err, what);
            goto cleanup;
        }
    }
    *out = g;
    g = NULL;
cleanup:
    ct_grid_free(g);
    free(all);
    return st;
}

void ct_grid_free(ct_grid *g) {
    if (!g) return;
    ct_comm_free(g->emb);
    ct_comm_free(g->edp);
    ct_comm_free(g->ep);
    ct_comm_free(g->pp);
    ct_comm_free(g->dp);
    ct_comm_free(g->tp);
    free(g);
}

const ct_layout *ct_grid_layout(const ct_grid *g) { return &g->lay; }
const ct_coords *ct_grid_coords(const ct_grid *g) { return &g->at; }
ct_comm *ct_grid_world(ct_grid *g) { return g->world; }
ct_comm *ct_grid_tp(ct_grid *g) { return g->tp; }
ct_comm *ct_grid_dp(ct_grid *g) { return g->dp; }
ct_comm *ct_grid_pp(ct_grid *g) { return g->pp; }
ct_comm *ct_grid_ep(ct_grid *g) { return g->ep; }
ct_comm *ct_grid_edp(ct_grid *g) { return g->edp; }
ct_comm *ct_grid_emb(ct_grid *g) { return g->emb; }

#define LINE 256 /* bytes per worker's line in the all-gather (a multiple of 4: sent as int32) */

#define HOSTS_LINES 2048 /* bytes for the hosts' and the TP placement lines */

/* The MPI rank, and the node, of grid worker w (the grid's world may be any group). */
static int worker_rank(const ct_grid *g, int w) {
    return ct_comm_world_rank(g->world, w) / g->world->topo->D;
}
static int worker_node(const ct_grid *g, int w) {
    return ct_topo_rank_node(g->world->topo, worker_rank(g, w));
}

/* "a-b" runs of the workers on node `node`, into buf. */
static void node_workers(const ct_grid *g, int W, int node, char *buf, size_t cap) {
    size_t k = 0;
    buf[0] = 0;
    for (int w = 0; w < W && k + 24 < cap; w++) {
        if (worker_node(g, w) != node || (w > 0 && worker_node(g, w - 1) == node)) continue;
        int e = w;
        while (e + 1 < W && worker_node(g, e + 1) == node) e++;
        k += (size_t)snprintf(buf + k, cap - k, e > w ? "%s%d-%d" : "%s%d", k ? "," : "", w, e);
    }
}

int ct_grid_tp_hosts(const ct_grid *g) {
    int most = 1, W = ct_comm_size(g->world), tp = g->lay.tp;
    for (int first = 0; first < W; first += tp) { /* a TP group: tp consecutive workers */
        int n = 0;
        for (int i = 0; i < tp; i++) {
            int node = worker_node(g, first + i), seen = 0;
            for (int j = 0; j < i; j++) seen |= worker_node(g, first + j) == node;
            n += !seen;
        }
        if (n > most) most = n;
    }
    return most;
}

/* After the workers' lines, where the run spans several hosts: which workers each host holds,
 * and a warning naming the first TP group that crosses hosts (TP's collectives run in every
 * layer, forward and backward; across a network they dominate). Returns the bytes written. */
static size_t hosts_lines(const ct_grid *g, char *s, size_t cap) {
    const ct_topo *t = g->world->topo;
    int W = ct_comm_size(g->world), H = ct_topo_nnodes(t), tp = g->lay.tp;
    size_t k = 0;
    char runs[96];
    if (H < 2 || cap < 2) return 0;
    k += (size_t)snprintf(s + k, cap - k, "hosts: %d:", H);
    for (int h = 0; h < H && k < cap; h++) {
        int r0 = 0;
        while (r0 < ct_topo_nranks(t) && ct_topo_rank_node(t, r0) != h) r0++;
        node_workers(g, W, h, runs, sizeof runs);
        k += (size_t)snprintf(s + k, cap - k, "%s %.64s (workers %s)", h ? ";" : "",
                              ct_topo_rank_host(t, r0), runs);
    }
    if (k < cap) k += (size_t)snprintf(s + k, cap - k, "\n");
    if (tp < 2 || k >= cap) return k < cap ? k : cap - 1;
    int spanning = 0, first_bad = -1;
    for (int first = 0; first < W; first += tp)
        for (int i = 1; i < tp; i++)
            if (worker_node(g, first + i) != worker_node(g, first)) {
                spanning++;
                if (first_bad < 0) first_bad = first;
                break;
            }
    if (!spanning)
        k += (size_t)snprintf(s + k, cap - k, "TP groups: each inside one host\n");
    else
        k += (size_t)snprintf(
            s + k, cap - k,
            "warning: %d of %d TP groups span hosts (the first: workers %d-%d, on %.64s and "
            "%.64s): tensor parallelism's collectives in every layer cross the network. TP stays "
            "inside hosts when each host's ranks are consecutive (mpiexec's and srun's block "
            "placement) and tp divides the workers per host\n",
            spanning, W / tp, first_bad, first_bad + tp - 1,
            ct_topo_rank_host(t, worker_rank(g, first_bad)),
            ct_topo_rank_host(t, worker_rank(g, first_bad + tp - 1)));
    return k < cap ? k : cap - 1;
}

ct_status ct_grid_describe(ct_grid *g, const char *device, char **out) {
    ct_status st = CT_OK;
    char *all = NULL, *s = NULL;
    if (!g || !out) return CT_ERR_ARG;
    *out = NULL;
    ct_comm *world = g->world;
    int W = ct_comm_size(world), w = ct_comm_rank(world);
    all = ct_calloc((size_t)W, LINE);
    s = ct_malloc((size_t)W * LINE + 1 + HOSTS_LINES);
    if (!all || !s) {
        st = CT_ERR(ct_comm_err(world), CT_ERR_NOMEM, "ct_grid_describe: out of memory");
        goto cleanup;
    }
    snprintf(all + (size_t)w * LINE, LINE, "worker %d: dp %d tp %d pp %d ep %d | rank %d thread %d | host %s | %s",
             w, g->at.dp_rank, g->at.tp_rank, g->at.pp_rank, g->at.ep_rank,
             ct_topo_rank(world->topo), world->thread, ct_topo_host(world->topo),
             device && *device ? device : "-");
    CT_CHECK(ct_comm_allgather(world, all + (size_t)w * LINE, all, LINE / 4, CT_I32, NULL));
    size_t len = 0;
    for (int r = 0; r < W; r++) {
        const char *line = all + (size_t)r * LINE;
        size_t l = strnlen(line, LINE - 1);
        memcpy(s + len, line, l);
        len += l;
        s[len++] = '\n';
    }
    len += hosts_lines(g, s + len, (size_t)W * LINE + 1 + HOSTS_LINES - len);
    s[len] = 0;
    *out = s;
    s = NULL;
cleanup:
    free(all);
    free(s);
    return st;
}
