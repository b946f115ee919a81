/* select.c - the algorithm registry {collective, name, function, restrictions, cost} and the
 * selector: a table of rows "collective nmin nmax local bytes_max algorithm", first match wins
 * (nmax 0 = any size; local -1 any, 0 = every process holds one member, 1 = some process holds
 * several, 2 = the group spans several hosts and some host holds several of its processes (where
 * the hierarchical all-reduce keeps all but one host-to-host exchange inside hosts); bytes_max
 * 0 = any). bench_allreduce --write-table regenerates the all-reduce rows from
 * measurements; programs may load a table file and set overrides (CT_COLL_ALGO, read by
 * programs in one place). Restricted algorithms are skipped by the selector, refused when named. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel_impl.h"

#define F(x) ((void (*)(void))(x))
const ct__algo ct__algos[] = {
    {CT_COLL_ALLREDUCE, "naive", F(ct__allreduce_naive), 0,
     "flat reduce to 0 + flat bcast: 2(n-1)(alpha + beta N) + (n-1) gamma N"},
    {CT_COLL_ALLREDUCE, "tree", F(ct__allreduce_tree), 0,
     "pipelined binary tree, k chunks: 2(lg n + k)(alpha + beta N/k) + 2 gamma N"},
    {CT_COLL_ALLREDUCE, "ring", F(ct__allreduce_ring), 0,
     "ring RS+AG: 2(n-1) alpha + 2(n-1)/n beta N + (n-1)/n gamma N"},
    {CT_COLL_ALLREDUCE, "recdbl", F(ct__allreduce_recdbl), 0,
     "recursive doubling: lg n (alpha + beta N + gamma N) (+2 fold steps)"},
    {CT_COLL_ALLREDUCE, "rabenseifner", F(ct__allreduce_rabenseifner), 0,
     "halving RS + doubling AG: 2 lg n alpha + 2(n-1)/n beta N + (n-1)/n gamma N"},
    {CT_COLL_ALLREDUCE, "hier", F(ct__allreduce_hier), 0,
     "shared-memory RS in the process, leaders' all-reduce, shared-memory copy-out"},
    {CT_COLL_ALLREDUCE, "shm", F(ct__allreduce_shm), CT__ALGO_ONE_PER_RANK | CT__ALGO_ONE_NODE,
     "MPI-3 shared window: copy in, slice reduce, copy out; 3 barriers, ~5N memory traffic"},
    {CT_COLL_ALLREDUCE, "mpi", F(ct__allreduce_mpi), CT__ALGO_ONE_PER_RANK, "MPI_Allreduce"},
    {CT_COLL_ALLREDUCE, "mpi_nb", F(ct__allreduce_mpi_nb), CT__ALGO_ONE_PER_RANK,
     "MPI_Iallreduce + MPI_Test/sched_yield polling"},
    {CT_COLL_REDUCESCATTER, "ring", F(ct__reducescatter_ring), 0,
     "(n-1) alpha + (n-1)/n beta N + (n-1)/n gamma N"},
    {CT_COLL_REDUCESCATTER, "rechalving", F(ct__reducescatter_rechalving), 0,
     "lg n alpha + (n-1)/n beta N + (n-1)/n gamma N"},
    {CT_COLL_REDUCESCATTER, "mpi", F(ct__reducescatter_mpi), CT__ALGO_ONE_PER_RANK,
     "MPI_Reduce_scatter_block"},
    {CT_COLL_ALLGATHER, "ring", F(ct__allgather_ring), 0, "(n-1) alpha + (n-1)/n beta N"},
    {CT_COLL_ALLGATHER, "recdbl", F(ct__allgather_recdbl), 0, "lg n alpha + (n-1)/n beta N"},
    {CT_COLL_ALLGATHER, "mpi", F(ct__allgather_mpi), CT__ALGO_ONE_PER_RANK, "MPI_Allgather"},
    {CT_COLL_REDUCESCATTERV, "ring", F(ct__reducescatterv_ring), 0,
     "(n-1) alpha + beta (S - c_r) + gamma (S - c_r-1), S = sum of counts"},
    {CT_COLL_REDUCESCATTERV, "rechalving", F(ct__reducescatterv_rechalving), 0,
     "lg n alpha + about (n-1)/n beta S + (n-1)/n gamma S for balanced counts"},
    {CT_COLL_REDUCESCATTERV, "mpi", F(ct__reducescatterv_mpi), CT__ALGO_ONE_PER_RANK,
     "MPI_Reduce_scatter"},
    {CT_COLL_ALLGATHERV, "ring", F(ct__allgatherv_ring), 0, "(n-1) alpha + beta (S - c_r+1)"},
    {CT_COLL_ALLGATHERV, "recdbl", F(ct__allgatherv_recdbl), 0,
     "lg n alpha + about (n-1)/n beta S for balanced counts"},
    {CT_COLL_ALLGATHERV, "mpi", F(ct__allgatherv_mpi), CT__ALGO_ONE_PER_RANK, "MPI_Allgatherv"},
    {CT_COLL_ALLTOALL, "pairwise", F(ct__alltoall_pairwise), 0, "(n-1) alpha + (n-1)/n beta N"},
    {CT_COLL_ALLTOALL, "mpi", F(ct__alltoall_mpi), CT__ALGO_ONE_PER_RANK, "MPI_Alltoall"},
    {CT_COLL_ALLTOALLV, "pairwise", F(ct__alltoallv_pairwise), 0, "(n-1) alpha + beta sum"},
    {CT_COLL_ALLTOALLV, "mpi", F(ct__alltoallv_mpi), CT__ALGO_ONE_PER_RANK, "MPI_Alltoallv"},
    {CT_COLL_BCAST, "binomial", F(ct__bcast_binomial), 0, "lg n (alpha + beta N)"},
    {CT_COLL_BCAST, "mpi", F(ct__bcast_mpi), CT__ALGO_ONE_PER_RANK, "MPI_Bcast"},
    {CT_COLL_BARRIER, "dissemination", F(ct__barrier_dissemination), 0, "lg n alpha"},
    {CT_COLL_BARRIER, "mpi", F(ct__barrier_mpi), CT__ALGO_ONE_PER_RANK, "MPI_Barrier"},
};
const int ct__nalgos = (int)(sizeof ct__algos / sizeof ct__algos[0]);

int ct__algo_index(const ct__algo *a) { return (int)(a - ct__algos); }

const ct__algo *ct__algo_find(ct_coll coll, const char *name) {
    for (int i = 0; name && i < ct__nalgos; i++)
        if (ct__algos[i].coll == coll && !strcmp(ct__algos[i].name, name)) return &ct__algos[i];
    return NULL;
}

const char *ct_coll_algo_name(ct_coll coll, int i) {
    for (int k = 0; k < ct__nalgos; k++)
        if (ct__algos[k].coll == coll && i-- == 0) return ct__algos[k].name;
    return NULL;
}

static const char *restriction(const ct_comm *c, const ct__algo *a) {
    if ((a->flags & CT__ALGO_ONE_PER_RANK) && c->g->mpi == MPI_COMM_NULL)
        return "needs one worker per rank in the group";
    if ((a->flags & CT__ALGO_ONE_NODE) && !c->g->one_node)
        return "needs every worker of the group on one node";
    return "";
}

const char *ct_comm_algo_restriction(const ct_comm *c, ct_coll coll, const char *algo) {
    const ct__algo *a = ct__algo_find(coll, algo);
    return a ? restriction(c, a) : "unknown algorithm";
}

static const char *default_table =
    "# collective nmin nmax local bytes_max algorithm   (first match wins)\n"
    "allreduce 1 0 1 0 hier\n"
    "allreduce 1 0 -1 65536 recdbl\n"
    "allreduce 1 0 -1 1048576 rabenseifner\n"
    "allreduce 1 0 2 0 hier\n"
    "allreduce 2 0 0 0 shm\n"
    "allreduce 1 0 -1 67108864 rabenseifner\n"
    "allreduce 1 0 -1 0 ring\n"
    "reducescatter 1 0 -1 65536 rechalving\n"
    "reducescatter 1 0 -1 0 ring\n"
    "allgather 1 0 -1 65536 recdbl\n"
    "allgather 1 0 -1 0 ring\n"
    "reducescatterv 1 0 -1 65536 rechalving\n"
    "reducescatterv 1 0 -1 0 ring\n"
    "allgatherv 1 0 -1 65536 recdbl\n"
    "allgatherv 1 0 -1 0 ring\n"
    "alltoall 1 0 -1 0 pairwise\n"
    "alltoallv 1 0 -1 0 pairwise\n"
    "bcast 1 0 -1 0 binomial\n"
    "barrier 1 0 -1 0 dissemination\n";

/* One whitespace-separated integer field of a table line: all of it a number within [lo, hi]. */
static int parse_field(const char *tok, long long lo, long long hi, long long *out) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(tok, &end, 10);
    if (end == tok || *end || errno == ERANGE || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

ct_status ct__select_parse(const char *text, ct__select_row *rows, int max, int *nrows,
                           ct_err *err) {
    int n = 0, line = 0;
    *nrows = 0;
    const char *p = text ? text : "";
    while (*p) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char buf[256];
        line++;
        /* a line is never cut short: a truncated line could read as another, valid one */
        if (len >= sizeof buf)
            return CT_ERR(err, CT_ERR_FORMAT, "selector table line %d: longer than %zu characters",
                          line, sizeof buf - 1);
        memcpy(buf, p, len);
        buf[len] = 0;
        p = e ? e + 1 : p + len;
        char *h = strchr(buf, '#');
        if (h) *h = 0;
        char *tok[7], *save = NULL;
        int k = 0;
        for (char *w = strtok_r(buf, " \t\r\v\f", &save); w && k < 7;
             w = strtok_r(NULL, " \t\r\v\f", &save))
            tok[k++] = w;
        if (k == 0) continue;
        if (k != 6)
            return CT_ERR(err, CT_ERR_FORMAT,
                          "selector table line %d: expected \"collective nmin nmax local bytes_max "
                          "algorithm\" (6 fields), got %s%d",
                          line, k == 7 ? "more than " : "", k == 7 ? 6 : k);
        ct__select_row r;
        memset(&r, 0, sizeof r);
        long long nmin, nmax, local, bmax;
        if (ct_coll_parse(tok[0], &r.coll))
            return CT_ERR(err, CT_ERR_FORMAT, "selector table line %d: unknown collective \"%.40s\"",
                          line, tok[0]);
        if (parse_field(tok[1], 1, INT_MAX, &nmin) || parse_field(tok[2], 0, INT_MAX, &nmax) ||
            (nmax && nmax < nmin))
            return CT_ERR(err, CT_ERR_FORMAT,
                          "selector table line %d: group sizes \"%.20s %.20s\": nmin >= 1 and nmax "
                          "= 0 (any) or >= nmin",
                          line, tok[1], tok[2]);
        if (parse_field(tok[3], -1, 2, &local))
            return CT_ERR(err, CT_ERR_FORMAT,
                          "selector table line %d: local \"%.20s\" is not -1 (any), 0 (one worker "
                          "per rank), 1 (some rank holds several) or 2 (several hosts, one holding "
                          "several ranks)",
                          line, tok[3]);
        if (parse_field(tok[4], 0, LLONG_MAX, &bmax))
            return CT_ERR(err, CT_ERR_FORMAT,
                          "selector table line %d: bytes_max \"%.30s\" is not a byte count >= 0 "
                          "(0 = any)",
                          line, tok[4]);
        if (!ct__algo_find(r.coll, tok[5]))
            return CT_ERR(err, CT_ERR_FORMAT, "selector table line %d: no algorithm \"%.40s\" for %s",
                          line, tok[5], tok[0]);
        if (n >= max)
            return CT_ERR(err, CT_ERR_FORMAT, "selector table: more than %d rows", max);
        r.nmin = (int)nmin;
        r.nmax = (int)nmax;
        r.local = (int)local;
        r.bytes_max = (size_t)bmax;
        snprintf(r.algo, sizeof r.algo, "%s", tok[5]);
        rows[n++] = r;
    }
    *nrows = n;
    return CT_OK;
}

ct_status ct_topo_set_select_table(ct_topo *t, const char *text, ct_err *err) {
    ct__select_row rows[CT__SELECT_MAX];
    int n = 0;
    ct_status st = ct__select_parse(text, rows, CT__SELECT_MAX, &n, err);
    if (st != CT_OK) return st; /* the table in force stays */
    memcpy(t->table, rows, sizeof(rows[0]) * (size_t)n);
    t->ntable = n;
    return CT_OK;
}

void ct__select_default(ct_topo *t) { ct_topo_set_select_table(t, default_table, NULL); }

ct_status ct_topo_load_select_table(ct_topo *t, const char *path, ct_err *err) {
    enum { CAP = 1 << 16 };
    FILE *f = fopen(path, "rb");
    if (!f) return CT_ERR(err, CT_ERR_IO, "cannot open selector table \"%s\": %s", path,
                          strerror(errno));
    char *buf = ct_calloc(1, CAP + 1);
    if (!buf) {
        fclose(f);
        return CT_ERR(err, CT_ERR_NOMEM, "selector table \"%s\": out of host memory", path);
    }
    size_t n = fread(buf, 1, CAP + 1, f);
    int bad = ferror(f);
    fclose(f);
    ct_status st = CT_OK;
    if (bad)
        st = CT_ERR(err, CT_ERR_IO, "reading selector table \"%s\" failed", path);
    else if (n > CAP) /* never parse a silently cut table */
        st = CT_ERR(err, CT_ERR_FORMAT, "selector table \"%s\" is larger than %d bytes", path, CAP);
    else if (memchr(buf, 0, n))
        st = CT_ERR(err, CT_ERR_FORMAT, "selector table \"%s\" holds a NUL byte (not text)", path);
    else
        st = ct_topo_set_select_table(t, buf, err);
    free(buf);
    return st;
}

ct_status ct_topo_write_select_table(const ct_topo *t, const char *path, ct_err *err) {
    FILE *f = fopen(path, "wb");
    if (!f) return CT_ERR(err, CT_ERR_IO, "cannot write selector table \"%s\"", path);
    fprintf(f, "# collective nmin nmax local bytes_max algorithm   (first match wins)\n");
    for (int i = 0; i < t->ntable; i++) {
        const ct__select_row *r = &t->table[i];
        fprintf(f, "%s %d %d %d %zu %s\n", ct_coll_str(r->coll), r->nmin, r->nmax, r->local,
                r->bytes_max, r->algo);
    }
    return fclose(f) ? CT_ERR(err, CT_ERR_IO, "writing \"%s\"", path) : CT_OK;
}

ct_status ct_topo_set_override(ct_topo *t, const char *spec, ct_err *err) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec ? spec : "");
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        ct_coll coll = CT_COLL_ALLREDUCE;
        if (eq) {
            *eq = 0;
            if (ct_coll_parse(tok, &coll))
                return CT_ERR(err, CT_ERR_ARG, "algorithm override: unknown collective \"%s\"", tok);
            tok = eq + 1;
        }
        if (!ct__algo_find(coll, tok))
            return CT_ERR(err, CT_ERR_ARG, "algorithm override: no algorithm \"%s\" for %s", tok,
                          ct_coll_str(coll));
        snprintf(t->override[coll], sizeof t->override[coll], "%s", tok);
    }
    return CT_OK;
}

static const ct__algo *select_auto(const ct_comm *c, ct_coll coll, size_t bytes) {
    const ct_topo *t = c->topo;
    int local = c->g->nlocal > 1 ? 1 : 0;
    /* nlocal is this process's view; "some process holds several" must agree across workers */
    local = c->g->one_per_rank ? 0 : 1;
    /* the hosts' class: from the members' nodes, the same on every worker */
    int hosts = c->g->nhosts > 1 && c->g->host_multi;
    for (int i = 0; i < t->ntable; i++) {
        const ct__select_row *r = &t->table[i];
        if (r->coll != coll || c->size < r->nmin || (r->nmax && c->size > r->nmax)) continue;
        if (r->local == 2 ? !hosts : r->local >= 0 && r->local != local) continue;
        if (r->bytes_max && bytes > r->bytes_max) continue;
        const ct__algo *a = ct__algo_find(coll, r->algo);
        if (a && !*restriction(c, a)) return a;
    }
    for (int i = 0; i < ct__nalgos; i++) /* no row matched: the first unrestricted one */
        if (ct__algos[i].coll == coll && !*restriction(c, &ct__algos[i])) return &ct__algos[i];
    return NULL;
}

const char *ct_comm_algo_select(const ct_comm *c, ct_coll coll, size_t bytes) {
    if (c->topo->override[coll][0]) return c->topo->override[coll];
    const ct__algo *a = select_auto(c, coll, bytes);
    return a ? a->name : "";
}

ct_status ct__algo_resolve(ct_comm *c, ct_coll coll, const char *name, size_t bytes,
                           const ct__algo **out) {
    const ct__algo *a;
    *out = NULL;
    if (!name || !*name || !strcmp(name, "auto")) name = c->topo->override[coll][0] ? c->topo->override[coll] : NULL;
    if (!name) {
        a = select_auto(c, coll, bytes);
        if (!a) return CT_ERR(&c->err, CT_ERR_NOT_FOUND, "%s: no algorithm usable", ct_coll_str(coll));
        *out = a;
        return CT_OK;
    }
    a = ct__algo_find(coll, name);
    if (!a) {
        char known[256] = "";
        for (int i = 0; i < ct__nalgos; i++)
            if (ct__algos[i].coll == coll) {
                strncat(known, " ", sizeof known - strlen(known) - 1);
                strncat(known, ct__algos[i].name, sizeof known - strlen(known) - 1);
            }
        return CT_ERR(&c->err, CT_ERR_ARG, "%s: unknown algorithm \"%s\" (known:%s)",
                      ct_coll_str(coll), name, known);
    }
    *out = a;
    if (*restriction(c, a)) {
        if (c->g->mpi == MPI_COMM_NULL) return ct__need_mpi_comm(c, name);
        return CT_ERR(&c->err, CT_ERR_UNSUPPORTED, "%s: algorithm \"%s\" %s", ct_coll_str(coll),
                      name, restriction(c, a));
    }
    return CT_OK;
}

/* The algorithm the hierarchical all-reduce runs among leaders (never itself). */
const ct__algo *ct__select_inner(const ct_comm *c, size_t bytes) {
    const ct_topo *t = c->topo;
    for (int i = 0; i < t->ntable; i++) {
        const ct__select_row *r = &t->table[i];
        if (r->coll != CT_COLL_ALLREDUCE || c->size < r->nmin || (r->nmax && c->size > r->nmax))
            continue;
        if (r->local >= 1 || (r->bytes_max && bytes > r->bytes_max) || !strcmp(r->algo, "hier"))
            continue;
        const ct__algo *a = ct__algo_find(CT_COLL_ALLREDUCE, r->algo);
        if (a && !*restriction(c, a)) return a;
    }
    return ct__algo_find(CT_COLL_ALLREDUCE, "rabenseifner");
}
