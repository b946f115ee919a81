/* comm.c - ct_comm: groups of workers, split by colour and key, and the entry points of every
 * collective (argument checks, the optional header exchange of check mode, algorithm resolution,
 * avg finishing, device-buffer staging through mapped host memory).
 *
 * Group identity: each split takes id = 1 + the highest id any parent member has seen (two ids:
 * the group's and its leaders' sub-group's), so two groups sharing a worker never share an id;
 * groups of one split share the id but not members. MPI tags carry the id, so threads of several
 * groups can talk at once. Groups whose members share a process are found through the topology's
 * registry; groups with one member here are private (so no lock is held across MPI calls). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel_impl.h"

/* ------------------------------------------------------------------ groups */

static void group_free(ct__group *g) {
    if (!g) return;
    if (g->shm_win != MPI_WIN_NULL) {
        MPI_Win_unlock_all(g->shm_win);
        MPI_Win_free(&g->shm_win);
    }
    free(g->shm_seg);
    if (g->mpi != MPI_COMM_NULL) MPI_Comm_free(&g->mpi);
    if (g->slots) {
        for (int i = 0; i < g->nlocal * g->nlocal; i++) {
            pthread_mutex_destroy(&g->slots[i].mu);
            pthread_cond_destroy(&g->slots[i].cv);
        }
        free(g->slots);
    }
    if (g->chans) {
        for (int i = 0; i < g->nlocal * g->nlocal; i++) {
            pthread_mutex_destroy(&g->chans[i].mu);
            pthread_cond_destroy(&g->chans[i].cv);
        }
        free(g->chans);
    }
    ct__barrier_destroy(&g->bar);
    free(g->m);
    free(g->local_rank);
    free(g->ptrs);
    free(g->counts);
    free(g->rptrs);
    free(g->scratch);
    free(g);
}

void ct__group_release(ct_topo *t, ct__group *g) {
    if (!g) return;
    if (g->nlocal > 1) {
        pthread_mutex_lock(&t->mu);
        int last = --g->refs == 0;
        if (last) {
            ct__group **pp = &t->groups;
            while (*pp && *pp != g) pp = &(*pp)->next;
            if (*pp) *pp = g->next;
        }
        pthread_mutex_unlock(&t->mu);
        if (last) group_free(g);
    } else {
        group_free(g);
    }
}

static ct_status group_build(ct_topo *t, uint32_t id, int color, const int *wids, int n,
                             ct__group **out, ct_err *err) {
    ct__group *g = ct_calloc(1, sizeof *g);
    if (!g) return CT_ERR(err, CT_ERR_NOMEM, "out of host memory (group)");
    g->id = id;
    g->color = color;
    g->refs = 1;
    g->n = n;
    g->mpi = MPI_COMM_NULL;
    g->shm_win = MPI_WIN_NULL;
    ct__barrier_init(&g->bar, 1);
    g->m = ct_calloc((size_t)n, sizeof *g->m);
    if (!g->m) goto nomem;
    int *seen = ct_calloc((size_t)t->nranks, sizeof(int));
    if (!seen) goto nomem;
    g->one_per_rank = 1;
    for (int i = 0; i < n; i++) {
        ct__member *m = &g->m[i];
        m->wid = wids[i];
        m->rank = wids[i] / t->D;
        m->thread = wids[i] % t->D;
        m->local = m->rank == t->rank ? g->nlocal++ : -1;
        if (seen[m->rank]++) g->one_per_rank = 0;
        else g->nprocs++;
    }
    free(seen);
    g->one_node = 1;
    for (int i = 0; i < n; i++) g->one_node &= t->rank_node[g->m[i].rank] == t->node;
    /* hosts spanned, and whether one of them holds members of several processes */
    for (int i = 0; i < n; i++) {
        int node = t->rank_node[g->m[i].rank], first_on_node = 1, first_of_rank = 1;
        for (int j = 0; j < i; j++) {
            if (t->rank_node[g->m[j].rank] == node) first_on_node = 0;
            if (g->m[j].rank == g->m[i].rank) first_of_rank = 0;
        }
        if (first_on_node) g->nhosts++;
        else if (first_of_rank) g->host_multi = 1;
    }
    g->shm_seg = ct_calloc((size_t)n, sizeof(void *));
    if (!g->shm_seg) goto nomem;
    g->local_rank = ct_calloc((size_t)(g->nlocal ? g->nlocal : 1), sizeof(int));
    g->ptrs = ct_calloc((size_t)(g->nlocal ? g->nlocal : 1), sizeof(void *));
    g->counts = ct_calloc((size_t)(g->nlocal ? g->nlocal : 1), sizeof(size_t));
    g->rptrs = ct_calloc((size_t)(g->nlocal ? g->nlocal : 1), sizeof(void *));
    g->slots = ct_calloc((size_t)(g->nlocal > 0 ? g->nlocal * g->nlocal : 1), sizeof(ct__slot));
    g->chans = ct_calloc((size_t)(g->nlocal > 0 ? g->nlocal * g->nlocal : 1), sizeof(ct__chan));
    if (!g->local_rank || !g->ptrs || !g->counts || !g->rptrs || !g->slots || !g->chans)
        goto nomem;
    for (int i = 0; i < n; i++)
        if (g->m[i].local >= 0) g->local_rank[g->m[i].local] = i;
    for (int i = 0; i < g->nlocal * g->nlocal; i++) {
        pthread_mutex_init(&g->slots[i].mu, NULL);
        ct__cond_init(&g->slots[i].cv);
        pthread_mutex_init(&g->chans[i].mu, NULL);
        ct__cond_init(&g->chans[i].cv);
    }
    ct__barrier_destroy(&g->bar);
    ct__barrier_init(&g->bar, g->nlocal);
    g->bar.spin = t->spin;
    g->bar.broken = &g->broken;
    *out = g;
    return CT_OK;
nomem:
    group_free(g);
    return CT_ERR(err, CT_ERR_NOMEM, "out of host memory (group of %d workers)", n);
}

/* Create the MPI communicator of a one-per-rank group (called by its single local member). */
static ct_status group_mpi(ct_topo *t, ct__group *g, int tag, ct_err *err) {
    MPI_Group wg, sg;
    int *ranks = ct_malloc(sizeof(int) * (size_t)g->n), rc;
    if (!ranks) return CT_ERR(err, CT_ERR_NOMEM, "out of host memory (ranks)");
    for (int i = 0; i < g->n; i++) ranks[i] = g->m[i].rank;
    MPI_Comm_group(t->world, &wg);
    MPI_Group_incl(wg, g->n, ranks, &sg);
    rc = MPI_Comm_create_group(t->world, sg, tag, &g->mpi);
    MPI_Group_free(&sg);
    MPI_Group_free(&wg);
    free(ranks);
    if (rc != MPI_SUCCESS) return CT_ERR(err, CT_ERR_MPI, "MPI_Comm_create_group failed (%d)", rc);
    MPI_Comm_set_errhandler(g->mpi, MPI_ERRORS_RETURN);
    return CT_OK;
}

static int same_members(const ct__group *g, const int *wids, int n) {
    if (g->n != n) return 0;
    for (int i = 0; i < n; i++)
        if (g->m[i].wid != wids[i]) return 0;
    return 1;
}

/* Find or make this process's shared state for group (id, color, members). The members count:
 * splits of two different parents (the DP groups of two pipeline stages, each split again)
 * can give disjoint groups the same id and colour. */
static ct_status group_attach(ct_topo *t, uint32_t id, int color, int tag, const int *wids, int n,
                              ct__group **out, ct_err *err) {
    ct_status st;
    int nlocal = 0;
    for (int i = 0; i < n; i++) nlocal += wids[i] / t->D == t->rank;
    if (nlocal <= 1) {
        if ((st = group_build(t, id, color, wids, n, out, err))) return st;
        if ((*out)->one_per_rank && (st = group_mpi(t, *out, tag, err))) {
            group_free(*out);
            *out = NULL;
        }
        return st;
    }
    pthread_mutex_lock(&t->mu);
    for (ct__group *g = t->groups; g; g = g->next)
        if (g->id == id && g->color == color && same_members(g, wids, n)) {
            g->refs++;
            *out = g;
            pthread_mutex_unlock(&t->mu);
            return CT_OK;
        }
    st = group_build(t, id, color, wids, n, out, err);
    if (!st) {
        (*out)->next = t->groups;
        t->groups = *out;
    }
    pthread_mutex_unlock(&t->mu);
    return st;
}

static int comm_tag(ct_topo *t, uint32_t id, int color_index) {
    int *ub = NULL, flag = 0;
    MPI_Comm_get_attr(t->world, MPI_TAG_UB, &ub, &flag);
    long u = flag ? *ub : 32767;
    return (int)((((long)id << 11) | (color_index & 0x7ff)) % (u + 1));
}

static ct_status comm_make(ct_topo *t, ct__group *g, int thread, int check, uint32_t base,
                           ct_comm **out, ct_err *err);

/* The sub-group of c's members listed in wids (n of them, group order), with id `id`, as a
   handle on *out: called by exactly those members. */
static ct_status sub_make(ct_comm *c, uint32_t id, const int *wids, int n, uint32_t base,
                          ct_comm **out, ct_err *err) {
    ct__group *sg = NULL;
    ct_status st = group_attach(c->topo, id, c->g->color, comm_tag(c->topo, id, c->g->color), wids,
                                n, &sg, err);
    if (st) return st;
    return comm_make(c->topo, sg, c->thread, 0, base, out, err);
}

/* On a group with one member per process spanning several hosts, some holding several of its
   processes: c->node (this host's members) and, on the first member of each host, c->hosts. */
static ct_status hosts_make(ct_comm *c, uint32_t base, ct_err *err) {
    ct_topo *t = c->topo;
    ct__group *g = c->g;
    ct_status st = CT_OK;
    int *w = ct_malloc(sizeof(int) * (size_t)g->n), n = 0, me_first = 1;
    if (!w) return CT_ERR(err, CT_ERR_NOMEM, "out of host memory (hosts)");
    int mine = t->rank_node[g->m[c->rank].rank];
    for (int i = 0; i < g->n; i++)
        if (t->rank_node[g->m[i].rank] == mine) {
            if (i < c->rank) me_first = 0;
            w[n++] = g->m[i].wid;
        }
    st = sub_make(c, base + 2, w, n, base, &c->node, err);
    if (!st && me_first) {
        n = 0;
        for (int i = 0; i < g->n; i++) {
            int node = t->rank_node[g->m[i].rank], first = 1;
            for (int j = 0; j < i; j++) first &= t->rank_node[g->m[j].rank] != node;
            if (first) w[n++] = g->m[i].wid;
        }
        st = sub_make(c, base + 3, w, n, base, &c->hosts, err);
    }
    free(w);
    return st;
}

/* Handle for a member of g; plus the leaders' sub-comm for hierarchical algorithms, and the
   hosts' levels (ids base + 1 .. base + 3: every split reserves four). */
static ct_status comm_make(ct_topo *t, ct__group *g, int thread, int check, uint32_t base,
                           ct_comm **out, ct_err *err) {
    ct_status st = CT_OK;
    ct_comm *c = ct_calloc(1, sizeof *c);
    int *lw = NULL;
    if (!c) {
        ct__group_release(t, g);
        return CT_ERR(err, CT_ERR_NOMEM, "out of host memory (comm)");
    }
    c->topo = t;
    c->g = g;
    c->size = g->n;
    c->thread = thread;
    c->check = check;
    c->leader_rank = -1;
    c->rank = -1;
    for (int i = 0; i < g->n; i++)
        if (g->m[i].rank == t->rank && g->m[i].thread == thread) c->rank = i;
    c->local = g->m[c->rank].local;
    if (!g->one_per_rank && g->nprocs > 1) {
        /* leaders: the first member (group order) of each process */
        int nl = 0, me_leader = 0;
        lw = ct_malloc(sizeof(int) * (size_t)g->nprocs);
        if (!lw) {
            st = CT_ERR(err, CT_ERR_NOMEM, "out of host memory (leaders)");
            goto cleanup;
        }
        for (int i = 0; i < g->n; i++) {
            int first = 1;
            for (int j = 0; j < i; j++)
                if (g->m[j].rank == g->m[i].rank) first = 0;
            if (first) {
                if (i == c->rank) me_leader = 1;
                lw[nl++] = g->m[i].wid;
            }
        }
        if (me_leader) {
            CT_CHECK(sub_make(c, base + 1, lw, nl, base, &c->leaders, err));
            c->leader_rank = c->leaders->rank;
        }
    } else if (g->one_per_rank && g->nhosts > 1 && g->host_multi) {
        /* one worker per process (a group, or the leaders of one): the hosts' levels (never
           again below: a host's members are on one host, the hosts' leaders one per host) */
        CT_CHECK(hosts_make(c, base, err));
    }
    *out = c;
    free(lw);
    return CT_OK;
cleanup:
    free(lw);
    ct_comm_free(c);
    return st;
}

ct_status ct_comm_world(ct_topo *t, int thread, ct_comm **out) {
    ct_status st;
    ct__group *g = NULL;
    int *w = NULL;
    ct_err err = {0};
    if (!t || !out) return CT_ERR_ARG;
    *out = NULL;
    if (thread < 0 || thread >= t->D) return CT_ERR_ARG;
    w = ct_malloc(sizeof(int) * (size_t)t->W);
    if (!w) return CT_ERR_NOMEM;
    for (int i = 0; i < t->W; i++) w[i] = i;
    st = group_attach(t, 0, 0, 0, w, t->W, &g, &err);
    free(w);
    if (st) return st;
    if (t->max_id[thread] < 3) t->max_id[thread] = 3; /* ids 0 (world) .. 3 (comm_make's) */
    return comm_make(t, g, thread, t->check_default, 0, out, &err);
}

void ct_comm_free(ct_comm *c) {
    if (!c) return;
    ct_comm_free(c->leaders);
    ct_comm_free(c->node);
    ct_comm_free(c->hosts);
    ct__group_release(c->topo, c->g);
    free(c->scratch);
    free(c->scratch2);
    free(c);
}

int ct_comm_rank(const ct_comm *c) { return c->rank; }
int ct_comm_size(const ct_comm *c) { return c->size; }
int ct_comm_world_rank(const ct_comm *c, int r) { return r >= 0 && r < c->size ? c->g->m[r].wid : -1; }
int ct_comm_local_size(const ct_comm *c) { return c->g->nlocal; }
int ct_comm_nprocs(const ct_comm *c) { return c->g->nprocs; }
int ct_comm_nhosts(const ct_comm *c) { return c->g->nhosts; }
const char *ct_comm_errmsg(const ct_comm *c) { return c ? c->err.msg : "comm is NULL"; }
ct_err *ct_comm_err(ct_comm *c) { return &c->err; }
void ct_comm_set_check(ct_comm *c, int on) { c->check = on; }
ct_topo *ct_comm_topo(ct_comm *c) { return c->topo; }

/* ------------------------------------------------------------------ check mode */

enum { H_COLL, H_COUNT, H_DT, H_OP, H_ROOT, H_KIND, H_ALGO, H_COUNTS, H_ERR, H__N };
static const char *hname[H__N] = {"collective", "count", "type", "op", "root", "buffer kind",
                                  "algorithm", "per-rank counts (hash)", "error"};

/* Exchange the header; every worker sees every header, so all fail or none do. */
static ct_status check_exchange(ct_comm *c, int64_t h[H__N], ct_status local) {
    ct_status st;
    int n = c->size;
    int64_t *all = ct_malloc(sizeof(int64_t) * H__N * (size_t)n);
    if (!all) return CT_ERR(&c->err, CT_ERR_NOMEM, "out of host memory (check header)");
    memcpy(all + (size_t)c->rank * H__N, h, sizeof(int64_t) * H__N);
    char saved[CT_ERR_MSG_MAX];
    memcpy(saved, c->err.msg, sizeof saved);
    st = ct__allgather_recdbl(c, all + (size_t)c->rank * H__N, all, H__N * 2, CT_I32);
    if (st) {
        free(all);
        return st;
    }
    for (int r = 0; r < n; r++)
        if (all[(size_t)r * H__N + H_ERR]) {
            ct_status other = (ct_status)all[(size_t)r * H__N + H_ERR];
            free(all);
            if (local) {
                memcpy(c->err.msg, saved, sizeof saved);
                return local;
            }
            return CT_ERR(&c->err, other, "%s: group rank %d (worker %d) rejected the call: %s",
                          ct_coll_str((ct_coll)h[H_COLL]), r, c->g->m[r].wid,
                          ct_status_str(other));
        }
    for (int r = 1; r < n; r++)
        for (int f = 0; f < H_ERR; f++)
            if (all[(size_t)r * H__N + f] != all[f]) {
                long long a = all[f], b = all[(size_t)r * H__N + f];
                free(all);
                if (f == H_COLL)
                    return CT_ERR(&c->err, CT_ERR_MISMATCH,
                                  "workers called different collectives: group rank 0 called %s, "
                                  "group rank %d called %s", a >= 100 ? "split" : ct_coll_str((ct_coll)a),
                                  r, b >= 100 ? "split" : ct_coll_str((ct_coll)b));
                return CT_ERR(&c->err, CT_ERR_MISMATCH,
                              "%s: workers disagree on the %s: group rank 0 passed %lld, group "
                              "rank %d (worker %d) passed %lld",
                              h[H_COLL] >= 100 ? "split" : ct_coll_str((ct_coll)h[H_COLL]),
                              hname[f], a, r, c->g->m[r].wid, b);
            }
    free(all);
    return CT_OK;
}

/* Local checks, header exchange (check mode), algorithm resolution. counts_hash: the v forms'
 * per-rank counts, hashed, so workers that disagree on any count all fail alike. */
static ct_status coll_begin_v(ct_comm *c, ct_coll coll, size_t count, ct_dtype dt, ct_op op,
                              int root, int kind, const char *algo, int null_buf,
                              int64_t counts_hash, const ct__algo **a) {
    ct_status st = CT_OK;
    *a = NULL;
    size_t es = ct_dtype_size(dt);
    snprintf(c->op, sizeof c->op, "%s (check-mode header exchange)", ct_coll_str(coll));
    if (c->g->broken)
        return CT_ERR(&c->err, CT_ERR_STATE, "%s: this comm was broken by an earlier %s; free it "
                      "and split a new one", ct_coll_str(coll),
                      c->g->broken == 2 ? "timeout (CT_COMM_TIMEOUT)" : "size mismatch");
    if ((unsigned)dt >= CT_DTYPE__COUNT)
        st = CT_ERR(&c->err, CT_ERR_ARG, "%s: unknown data type %d", ct_coll_str(coll), (int)dt);
    else if ((coll == CT_COLL_ALLREDUCE || coll == CT_COLL_REDUCESCATTER ||
              coll == CT_COLL_REDUCESCATTERV) &&
             (unsigned)op >= CT_OP__COUNT)
        st = CT_ERR(&c->err, CT_ERR_ARG, "%s: unknown op %d (sum, avg, max)", ct_coll_str(coll),
                    (int)op);
    else if (coll == CT_COLL_BCAST && (root < 0 || root >= c->size))
        st = CT_ERR(&c->err, CT_ERR_ARG, "bcast: root %d is outside 0..%d", root, c->size - 1);
    else if (null_buf)
        st = CT_ERR(&c->err, CT_ERR_ARG, "%s: NULL buffer with count %zu", ct_coll_str(coll),
                    count);
    else if (count > ((size_t)1 << 40) / (es ? es : 1))
        st = CT_ERR(&c->err, CT_ERR_ARG, "%s: count %zu is implausibly large", ct_coll_str(coll),
                    count);
    else
        st = ct__algo_resolve(c, coll, algo, count * es, a);
    if (c->check && c->size > 1) {
        int64_t h[H__N] = {coll, (int64_t)count, dt, op, root, kind, *a ? ct__algo_index(*a) : -1,
                           counts_hash, st};
        if (coll != CT_COLL_ALLREDUCE && coll != CT_COLL_REDUCESCATTER &&
            coll != CT_COLL_REDUCESCATTERV)
            h[H_OP] = 0;
        if (coll != CT_COLL_BCAST) h[H_ROOT] = 0;
        ct_status s2 = check_exchange(c, h, st);
        if (s2) return s2;
    }
    if (*a) snprintf(c->op, sizeof c->op, "%s (%s)", ct_coll_str(coll), (*a)->name);
    return st;
}
static ct_status coll_begin(ct_comm *c, ct_coll coll, size_t count, ct_dtype dt, ct_op op,
                            int root, int kind, const char *algo, int null_buf,
                            const ct__algo **a) {
    return coll_begin_v(c, coll, count, dt, op, root, kind, algo, null_buf, 0, a);
}

/* ct_comm_bytes: elements times their size added to the handle's count. */
static void count_bytes(ct_comm *c, double elems, ct_dtype dt) {
    c->bytes += (uint64_t)(elems * (double)ct_dtype_size(dt) + 0.5);
}
uint64_t ct_comm_bytes(const ct_comm *c) { return c ? c->bytes : 0; }

/* ------------------------------------------------------------------ split */

ct_status ct_comm_split(ct_comm *parent, int color, int key, ct_comm **out) {
    ct_status st = CT_OK;
    ct_comm *c = parent;
    int32_t *tab = NULL;
    int *w = NULL, n, nm = 0;
    ct__group *g = NULL;
    if (!parent || !out) return CT_ERR_ARG;
    *out = NULL;
    n = c->size;
    snprintf(c->op, sizeof c->op, "split");
    if (c->check && n > 1) {
        int64_t h[H__N] = {100, 0, 0, 0, 0, 0, 0, 0};
        CT_CHECK(check_exchange(c, h, CT_OK));
    }
    tab = ct_malloc(sizeof(int32_t) * 4 * (size_t)n);
    w = ct_malloc(sizeof(int) * (size_t)n);
    if (!tab || !w) {
        st = CT_ERR(&c->err, CT_ERR_NOMEM, "out of host memory (split table)");
        goto cleanup;
    }
    int32_t mine[4] = {color, key, (int32_t)c->topo->max_id[c->thread], c->rank};
    memcpy(tab + 4 * c->rank, mine, sizeof mine);
    CT_CHECK(ct__allgather_recdbl(c, tab + 4 * c->rank, tab, 4, CT_I32));
    uint32_t maxid = 0;
    for (int r = 0; r < n; r++) {
        if (tab[4 * r] < CT_COMM_UNDEFINED) {
            st = CT_ERR(&c->err, CT_ERR_ARG,
                        "ct_comm_split: group rank %d (worker %d) passed colour %d; colours are "
                        ">= 0 or CT_COMM_UNDEFINED", r, c->g->m[r].wid, tab[4 * r]);
            goto cleanup;
        }
        if ((uint32_t)tab[4 * r + 2] > maxid) maxid = (uint32_t)tab[4 * r + 2];
    }
    uint32_t id = maxid + 1; /* ids id .. id + 3: the group and comm_make's sub-groups */
    if (id + 3 > c->topo->id_max) {
        st = CT_ERR(&c->err, CT_ERR_UNSUPPORTED,
                    "ct_comm_split: out of comm ids (%u; MPI_TAG_UB leaves %d bits)", id,
                    c->topo->tag_bits_id);
        goto cleanup;
    }
    c->topo->max_id[c->thread] = id + 3;
    if (color == CT_COMM_UNDEFINED) goto cleanup;
    /* members with my colour, ordered by (key, parent rank): insertion sort, n is small */
    for (int r = 0; r < n; r++) {
        if (tab[4 * r] != color) continue;
        int j = nm++;
        while (j > 0 && (tab[4 * w[j - 1] + 1] > tab[4 * r + 1])) {
            w[j] = w[j - 1];
            j--;
        }
        w[j] = r;
    }
    int cindex = 0; /* distinct colours below mine */
    for (int r = 0; r < n; r++) {
        int dup = 0;
        if (tab[4 * r] < 0 || tab[4 * r] >= color) continue;
        for (int q = 0; q < r; q++) dup |= tab[4 * q] == tab[4 * r];
        cindex += !dup;
    }
    for (int i = 0; i < nm; i++) w[i] = c->g->m[w[i]].wid;
    CT_CHECK(group_attach(c->topo, id, color, comm_tag(c->topo, id, cindex), w, nm, &g, &c->err));
    CT_CHECK(comm_make(c->topo, g, c->thread, c->check, id, out, &c->err));
cleanup:
    free(tab);
    free(w);
    return st;
}

/* ------------------------------------------------------------------ collectives, host */

ct_status ct_comm_allreduce(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt,
                            ct_op op, const char *algo) {
    ct_status st;
    const ct__algo *a;
    if (!c) return CT_ERR_ARG;
    if ((st = coll_begin(c, CT_COLL_ALLREDUCE, count, dt, op, 0, 0, algo,
                         count && (!send || !recv), &a)))
        return st;
    if (!count) return CT_OK;
    st = ((ct__allreduce_fn)a->fn)(c, send, recv, count, dt, op == CT_OP_MAX ? CT_OP_MAX : CT_OP_SUM);
    if (!st && op == CT_OP_AVG) ct__finish_avg(dt, recv, count, c->size);
    if (!st) count_bytes(c, 2.0 * (double)count * (c->size - 1) / c->size, dt);
    return st;
}

ct_status ct_comm_reduce_scatter(ct_comm *c, const void *send, void *recv, size_t count,
                                 ct_dtype dt, ct_op op, const char *algo) {
    ct_status st;
    const ct__algo *a;
    if (!c) return CT_ERR_ARG;
    if ((st = coll_begin(c, CT_COLL_REDUCESCATTER, count, dt, op, 0, 0, algo,
                         count && (!send || !recv), &a)))
        return st;
    if (!count) return CT_OK;
    st = ((ct__reducescatter_fn)a->fn)(c, send, recv, count, dt,
                                       op == CT_OP_MAX ? CT_OP_MAX : CT_OP_SUM);
    if (!st && op == CT_OP_AVG) ct__finish_avg(dt, recv, count, c->size);
    if (!st) count_bytes(c, (double)count * (c->size - 1), dt);
    return st;
}

ct_status ct_comm_allgather(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt,
                            const char *algo) {
    ct_status st;
    const ct__algo *a;
    if (!c) return CT_ERR_ARG;
    if ((st = coll_begin(c, CT_COLL_ALLGATHER, count, dt, 0, 0, 0, algo,
                         count && (!send || !recv), &a)))
        return st;
    if (!count) return CT_OK;
    st = ((ct__allgather_fn)a->fn)(c, send, recv, count, dt);
    if (!st) count_bytes(c, (double)count * (c->size - 1), dt);
    return st;
}

/* The v forms' counts: their sum, this rank's, and a hash for check mode. */
static int64_t counts_sum(const ct_comm *c, const size_t *counts, size_t *total) {
    uint64_t h = 1469598103934665603ull;
    *total = 0;
    for (int i = 0; counts && i < c->size; i++) {
        *total += counts[i];
        h = (h ^ (uint64_t)counts[i]) * 1099511628211ull;
    }
    return (int64_t)(h >> 2);
}

ct_status ct_comm_reduce_scatterv(ct_comm *c, const void *send, void *recv, const size_t *counts,
                                  ct_dtype dt, ct_op op, const char *algo) {
    ct_status st;
    const ct__algo *a;
    size_t total = 0;
    if (!c) return CT_ERR_ARG;
    int64_t hash = counts_sum(c, counts, &total);
    size_t mine = counts ? counts[c->rank] : 0;
    if ((st = coll_begin_v(c, CT_COLL_REDUCESCATTERV, total, dt, op, 0, 0, algo,
                           !counts || (total && !send) || (mine && !recv), hash, &a)))
        return st;
    if (!total) return CT_OK;
    st = ((ct__reducescatterv_fn)a->fn)(c, send, recv, counts, dt,
                                        op == CT_OP_MAX ? CT_OP_MAX : CT_OP_SUM);
    if (!st && op == CT_OP_AVG) ct__finish_avg(dt, recv, mine, c->size);
    if (!st) count_bytes(c, (double)(total - mine), dt);
    return st;
}

ct_status ct_comm_allgatherv(ct_comm *c, const void *send, void *recv, const size_t *counts,
                             ct_dtype dt, const char *algo) {
    ct_status st;
    const ct__algo *a;
    size_t total = 0;
    if (!c) return CT_ERR_ARG;
    int64_t hash = counts_sum(c, counts, &total);
    size_t mine = counts ? counts[c->rank] : 0;
    if ((st = coll_begin_v(c, CT_COLL_ALLGATHERV, total, dt, 0, 0, 0, algo,
                           !counts || (total && !recv) || (mine && !send), hash, &a)))
        return st;
    if (!total) return CT_OK;
    st = ((ct__allgatherv_fn)a->fn)(c, send, recv, counts, dt);
    if (!st) count_bytes(c, (double)(total - mine), dt);
    return st;
}

ct_status ct_comm_alltoall(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt,
                           const char *algo) {
    ct_status st;
    const ct__algo *a;
    if (!c) return CT_ERR_ARG;
    if ((st = coll_begin(c, CT_COLL_ALLTOALL, count, dt, 0, 0, 0, algo,
                         count && (!send || !recv), &a)))
        return st;
    if (!count) return CT_OK;
    st = ((ct__alltoall_fn)a->fn)(c, send, recv, count, dt);
    if (!st) count_bytes(c, (double)count * (c->size - 1), dt);
    return st;
}

ct_status ct_comm_alltoallv(ct_comm *c, const void *send, const size_t *scounts,
                            const size_t *sdispls, void *recv, const size_t *rcounts,
                            const size_t *rdispls, ct_dtype dt, const char *algo) {
    ct_status st;
    const ct__algo *a;
    size_t tot = 0;
    if (!c) return CT_ERR_ARG;
    int bad = !scounts || !sdispls || !rcounts || !rdispls;
    for (int i = 0; !bad && i < c->size; i++) tot += scounts[i] + rcounts[i];
    if ((st = coll_begin(c, CT_COLL_ALLTOALLV, 0, dt, 0, 0, 0, algo,
                         bad || (tot && (!send || !recv)), &a)))
        return st;
    if (c->check && c->size > 1) { /* every pair agrees on its count */
        size_t *got = ct_malloc(sizeof(size_t) * (size_t)c->size);
        int32_t flag[2] = {0, 0};
        if (!got) return CT_ERR(&c->err, CT_ERR_NOMEM, "out of host memory (alltoallv check)");
        st = ct__alltoall_pairwise(c, scounts, got, sizeof(size_t) / 4, CT_I32);
        for (int i = 0; !st && i < c->size; i++)
            if (got[i] != rcounts[i] && !flag[0]) {
                flag[0] = 1;
                CT_ERR(&c->err, CT_ERR_MISMATCH,
                       "alltoallv: group rank %d sends %zu elements to rank %d, which expects %zu",
                       i, got[i], c->rank, rcounts[i]);
            }
        free(got);
        if (st) return st;
        int32_t any[2];
        flag[1] = flag[0];
        if ((st = ct__allreduce_recdbl(c, flag, any, 2, CT_I32, CT_OP_MAX))) return st;
        if (any[0]) {
            if (!flag[0])
                CT_ERR(&c->err, CT_ERR_MISMATCH, "alltoallv: workers disagree on counts (another "
                       "worker saw a send count that does not match its receive count)");
            return CT_ERR_MISMATCH;
        }
    }
    st = ((ct__alltoallv_fn)a->fn)(c, send, scounts, sdispls, recv, rcounts, rdispls, dt);
    if (!st) {
        size_t out = 0;
        for (int i = 0; i < c->size; i++) out += i == c->rank ? 0 : scounts[i];
        count_bytes(c, (double)out, dt);
    }
    return st;
}

ct_status ct_comm_bcast(ct_comm *c, void *buf, size_t count, ct_dtype dt, int root,
                        const char *algo) {
    ct_status st;
    const ct__algo *a;
    if (!c) return CT_ERR_ARG;
    if ((st = coll_begin(c, CT_COLL_BCAST, count, dt, 0, root, 0, algo, count && !buf, &a)))
        return st;
    if (!count) return CT_OK;
    st = ((ct__bcast_fn)a->fn)(c, buf, count, dt, root);
    if (!st) count_bytes(c, (double)count, dt);
    return st;
}

ct_status ct_comm_barrier(ct_comm *c, const char *algo) {
    ct_status st;
    const ct__algo *a;
    if (!c) return CT_ERR_ARG;
    if ((st = coll_begin(c, CT_COLL_BARRIER, 0, CT_F32, 0, 0, 0, algo, 0, &a))) return st;
    return ((ct__barrier_fn)a->fn)(c);
}

/* ------------------------------------------------------------------ collectives, device */

static ct_status dev_err(ct_comm *c, ct_buffer *b, ct_status s, const char *what) {
    return CT_ERR(&c->err, s, "%s of buffer \"%s\": %s", what, ct_buffer_name(b),
                  ct_device_errmsg(ct_buffer_device(b)));
}

static ct_status buf_need(ct_comm *c, ct_buffer *b, size_t bytes, const char *what) {
    if (!b) return CT_ERR(&c->err, CT_ERR_ARG, "%s: buffer is NULL", what);
    if (ct_buffer_bytes(b) < bytes)
        return CT_ERR(&c->err, CT_ERR_ARG, "%s: buffer \"%s\" holds %zu bytes, the call needs %zu",
                      what, ct_buffer_name(b), ct_buffer_bytes(b), bytes);
    return CT_OK;
}

ct_status ct_comm_allreduce_buf(ct_comm *c, ct_buffer *send, ct_buffer *recv, size_t count,
                                ct_dtype dt, ct_op op, const char *algo) {
    ct_status st = CT_OK, s2;
    const ct__algo *a;
    if (!c) return CT_ERR_ARG;
    size_t es = ct_dtype_size(dt), bytes = count * es;
    ct_status local = es ? buf_need(c, send, bytes, "allreduce") : CT_OK;
    if (!local) local = buf_need(c, recv, bytes, "allreduce");
    if ((st = coll_begin(c, CT_COLL_ALLREDUCE, count, dt, op, 0, 1, algo, 0, &a)) || local)
        return st ? st : local;
    if (!count) return CT_OK;
    ct_op rop = op == CT_OP_MAX ? CT_OP_MAX : CT_OP_SUM;
    size_t chunk = CT_COMM_STAGE_CHUNK / es * es;
    size_t nchunks = (bytes + chunk - 1) / chunk;
    ct_device *dev = ct_buffer_device(recv);
    /* A two-deep pipeline: the maps of chunk i+1 are queued (non-blocking) before chunk i is
     * reduced, and chunk i's unmap is queued after, so the device stages the next chunk (a DMA
     * on a GPU) while the host communicates this one. Every worker cuts at the same element
     * boundaries, so the algorithm sees consistent counts. ps/pr/ev hold two slots. */
    void *mps[2] = {NULL, NULL}, *mpr[2] = {NULL, NULL};
    ct_event *evs[2] = {NULL, NULL}, *evr[2] = {NULL, NULL};
    ct_status mst = CT_OK;
#define MAP_CHUNK(i)                                                                            \
    do {                                                                                        \
        size_t o_ = (i) * chunk, l_ = bytes - o_ < chunk ? bytes - o_ : chunk;                  \
        int k_ = (int)((i) & 1);                                                                \
        if (send == recv) {                                                                     \
            if ((s2 = ct_buffer_map_async(recv, o_, l_, CL_MAP_READ | CL_MAP_WRITE, &mpr[k_], &evr[k_]))) \
                mst = dev_err(c, recv, s2, "map");                                              \
            mps[k_] = mpr[k_];                                                                  \
        } else {                                                                                \
            if ((s2 = ct_buffer_map_async(send, o_, l_, CL_MAP_READ, &mps[k_], &evs[k_])))      \
                mst = dev_err(c, send, s2, "map");                                              \
            else if ((s2 = ct_buffer_map_async(recv, o_, l_, CL_MAP_WRITE, &mpr[k_], &evr[k_]))) \
                mst = dev_err(c, recv, s2, "map");                                              \
        }                                                                                       \
    } while (0)
    MAP_CHUNK((size_t)0);
    for (size_t i = 0; i < nchunks && !mst; i++) {
        int k = (int)(i & 1);
        size_t len = bytes - i * chunk < chunk ? bytes - i * chunk : chunk;
        if (send != recv && (s2 = ct_event_wait_release(evs[k])) && !mst)
            mst = dev_err(c, send, s2, "map");
        if ((s2 = ct_event_wait_release(evr[k])) && !mst) mst = dev_err(c, recv, s2, "map");
        evs[k] = evr[k] = NULL;
        if (mst) break;
        if (i + 1 < nchunks) MAP_CHUNK(i + 1);
        st = ((ct__allreduce_fn)a->fn)(c, mps[k], mpr[k], len / es, dt, rop);
        if (!st && op == CT_OP_AVG) ct__finish_avg(dt, mpr[k], len / es, c->size);
        if (send != recv && (s2 = ct_buffer_unmap_async(send, mps[k], NULL)) && !st)
            st = dev_err(c, send, s2, "unmap");
        if ((s2 = ct_buffer_unmap_async(recv, mpr[k], NULL)) && !st) st = dev_err(c, recv, s2, "unmap");
        mps[k] = mpr[k] = NULL;
        if (st) break;
    }
#undef MAP_CHUNK
    /* Drain: release what a failure left mapped, and wait for every unmap. */
    for (int k = 0; k < 2; k++) {
        ct_event_wait_release(evs[k]);
        ct_event_wait_release(evr[k]);
        if (send != recv && mps[k]) ct_buffer_unmap(send, mps[k]);
        if (mpr[k]) ct_buffer_unmap(recv, mpr[k]);
    }
    if (send != recv && (s2 = ct_device_finish(ct_buffer_device(send))) && !st && !mst)
        st = dev_err(c, send, s2, "unmap");
    if ((s2 = ct_device_finish(dev)) && !st && !mst) st = dev_err(c, recv, s2, "unmap");
    return st ? st : mst;
}

/* Map whole buffers, run the host collective, unmap. kind: 0 rs, 1 ag, 2 a2a. */
static ct_status whole_buf(ct_comm *c, ct_coll coll, ct_buffer *send, ct_buffer *recv,
                           size_t count, ct_dtype dt, ct_op op, const char *algo) {
    ct_status st = CT_OK, s2;
    const ct__algo *a;
    void *ps = NULL, *pr = NULL;
    size_t es = ct_dtype_size(dt), n = (size_t)c->size;
    size_t sb = (coll == CT_COLL_ALLGATHER ? count : count * n) * es;
    size_t rb = (coll == CT_COLL_REDUCESCATTER ? count : count * n) * es;
    ct_status local = CT_OK;
    if (es) {
        local = buf_need(c, recv, send == recv ? (sb > rb ? sb : rb) : rb, ct_coll_str(coll));
        if (!local && send != recv) local = buf_need(c, send, sb, ct_coll_str(coll));
    }
    if ((st = coll_begin(c, coll, count, dt, op, 0, 1, algo, 0, &a)) || local)
        return st ? st : local;
    if (!count) return CT_OK;
    size_t mb = send == recv ? (sb > rb ? sb : rb) : rb;
    if ((s2 = ct_buffer_map(recv, 0, mb, CL_MAP_READ | CL_MAP_WRITE, &pr)))
        return dev_err(c, recv, s2, "map");
    if (send == recv) ps = coll == CT_COLL_ALLGATHER ? (char *)pr + (size_t)c->rank * count * es : pr;
    else if ((s2 = ct_buffer_map(send, 0, sb, CL_MAP_READ, &ps))) {
        ct_buffer_unmap(recv, pr);
        return dev_err(c, send, s2, "map");
    }
    ct_op rop = op == CT_OP_MAX ? CT_OP_MAX : CT_OP_SUM;
    if (coll == CT_COLL_REDUCESCATTER) {
        st = ((ct__reducescatter_fn)a->fn)(c, ps, pr, count, dt, rop);
        if (!st && op == CT_OP_AVG) ct__finish_avg(dt, pr, count, c->size);
    } else if (coll == CT_COLL_ALLGATHER) {
        st = ((ct__allgather_fn)a->fn)(c, ps, pr, count, dt);
    } else {
        st = ((ct__alltoall_fn)a->fn)(c, ps, pr, count, dt);
    }
    if (send != recv && (s2 = ct_buffer_unmap(send, ps)) && !st) st = dev_err(c, send, s2, "unmap");
    if ((s2 = ct_buffer_unmap(recv, pr)) && !st) st = dev_err(c, recv, s2, "unmap");
    return st;
}

ct_status ct_comm_reduce_scatter_buf(ct_comm *c, ct_buffer *send, ct_buffer *recv, size_t count,
                                     ct_dtype dt, ct_op op, const char *algo) {
    if (!c) return CT_ERR_ARG;
    return whole_buf(c, CT_COLL_REDUCESCATTER, send, recv, count, dt, op, algo);
}

ct_status ct_comm_allgather_buf(ct_comm *c, ct_buffer *send, ct_buffer *recv, size_t count,
                                ct_dtype dt, const char *algo) {
    if (!c) return CT_ERR_ARG;
    return whole_buf(c, CT_COLL_ALLGATHER, send, recv, count, dt, 0, algo);
}

ct_status ct_comm_alltoall_buf(ct_comm *c, ct_buffer *send, ct_buffer *recv, size_t count,
                               ct_dtype dt, const char *algo) {
    if (!c) return CT_ERR_ARG;
    return whole_buf(c, CT_COLL_ALLTOALL, send, recv, count, dt, 0, algo);
}

ct_status ct_comm_bcast_buf(ct_comm *c, ct_buffer *buf, size_t count, ct_dtype dt, int root,
                            const char *algo) {
    ct_status st = CT_OK, s2;
    const ct__algo *a;
    void *p = NULL;
    if (!c) return CT_ERR_ARG;
    size_t bytes = count * ct_dtype_size(dt);
    ct_status local = ct_dtype_size(dt) ? buf_need(c, buf, bytes, "bcast") : CT_OK;
    if ((st = coll_begin(c, CT_COLL_BCAST, count, dt, 0, root, 1, algo, 0, &a)) || local)
        return st ? st : local;
    if (!count) return CT_OK;
    if ((s2 = ct_buffer_map(buf, 0, bytes, CL_MAP_READ | CL_MAP_WRITE, &p)))
        return dev_err(c, buf, s2, "map");
    st = ((ct__bcast_fn)a->fn)(c, p, count, dt, root);
    if ((s2 = ct_buffer_unmap(buf, p)) && !st) st = dev_err(c, buf, s2, "unmap");
    return st;
}
