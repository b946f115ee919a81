/* test_parallel_errors.c - bad use of ct_comm gives clear errors on every worker and no hang.
 *
 *   mpiexec -n R test_parallel_errors D     counts that differ, unknown op / algorithm / type on
 *                                           one or all workers, inconsistent split (bad colour,
 *                                           split against all-reduce), "mpi" with several workers
 *                                           per rank, mismatched sizes without check mode
 *                                           (threads), then a correct call still works
 *   test_parallel_errors nothread           MPI initialised without MPI_THREAD_MULTIPLE
 *   test_parallel_errors select             the selector table: parse errors, choices, overrides
 *   test_parallel_errors preinit            MPI initialised by the program with MULTIPLE: used
 *   mpiexec -n R test_parallel_errors timeout D   CT_COMM_TIMEOUT turns hangs into errors
 */
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_parallel.h"
#include "ct_test.h"
#include "ct_test_mpi.h"

#define HAS(msg, needle) (strstr((msg), (needle)) != NULL)

static int nothread(int argc, char **argv) {
    const char *ctx = "nothread";
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    ct_test_mpi_begin();
    ct_topo *t = NULL;
    ct_err err = {0};
    ct_status st = ct_topo_create(&t, &argc, &argv, 2, &err);
    if (provided < MPI_THREAD_MULTIPLE) {
        CT_ASSERT_IN(ctx, st == CT_ERR_UNSUPPORTED, "status %d", st);
        CT_ASSERT_IN(ctx,
                     HAS(err.msg, "MPI_THREAD_MULTIPLE") && HAS(err.msg, "MPI_THREAD_SERIALIZED"),
                     "message: %s", err.msg);
        CT_ASSERT_IN(ctx, t == NULL, "no topology on failure");
    } else {
        CT_ASSERT_IN(ctx, 0, "MPI gave MPI_THREAD_MULTIPLE when asked for less; cannot test");
    }
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    int rc = ct_test_mpi_end("test_parallel_errors nothread");
    ct_topo_free(t);
    MPI_Finalize();
    return rc;
}

/* The program initialised MPI itself (with MPI_THREAD_MULTIPLE): the topology uses it, works, and
 * leaves finalising to the program. */
static int preinit(int argc, char **argv) {
    const char *ctx = "preinit";
    int provided = 0, fin = 0, r = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    ct_test_mpi_begin();
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    ct_topo *t = NULL;
    ct_err err = {0};
    CT_ASSERT_IN(ctx, ct_topo_create(&t, NULL, NULL, 2, &err) == CT_OK, "%s", err.msg);
    if (t) {
#pragma omp parallel num_threads(2)
        {
            ct_comm *w = NULL;
            int x[1] = {1}, y[1] = {0};
            CT_ASSERT_IN(ctx, ct_comm_world(t, omp_get_thread_num(), &w) == CT_OK, "world");
            CT_ASSERT_IN(ctx, ct_comm_allreduce(w, x, y, 1, CT_I32, CT_OP_SUM, NULL) == CT_OK, "%s",
                         ct_comm_errmsg(w));
            CT_ASSERT_IN(ctx, y[0] == ct_topo_world_size(t), "sum %d", y[0]);
            ct_comm_free(w);
        }
        ct_topo_free(t);
    }
    MPI_Finalized(&fin);
    CT_ASSERT_IN(ctx, !fin, "ct_topo_free must not finalise an MPI the program initialised");
    int rc = ct_test_mpi_end("test_parallel_errors preinit");
    MPI_Finalize();
    return rc;
}

static int selector(int argc, char **argv) {
    const char *ctx = "select";
    ct_topo *t = NULL;
    ct_err err = {0};
    CT_ASSERT_IN(ctx, ct_topo_create(&t, &argc, &argv, 0, &err) == CT_ERR_ARG, "D = 0 refused");
    CT_ASSERT_IN(ctx, HAS(err.msg, "devices per rank 0"), "message: %s", err.msg);
    if (ct_topo_create(&t, &argc, &argv, 1, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    ct_test_mpi_begin();
    ct_comm *w = NULL;
    CT_ASSERT_IN(ctx, ct_comm_world(t, 0, &w) == CT_OK, "world");
    CT_ASSERT_IN(ctx,
                 ct_topo_set_select_table(t,
                                          "allreduce 1 0 -1 100 recdbl\nallreduce 1 0 -1 0 ring\n"
                                          "allgather 1 0 -1 0 recdbl\n",
                                          &err) == CT_OK,
                 "%s", err.msg);
    CT_ASSERT_IN(ctx, !strcmp(ct_comm_algo_select(w, CT_COLL_ALLREDUCE, 100), "recdbl"), "100 B");
    CT_ASSERT_IN(ctx, !strcmp(ct_comm_algo_select(w, CT_COLL_ALLREDUCE, 101), "ring"), "101 B");
    CT_ASSERT_IN(ctx, !strcmp(ct_comm_algo_select(w, CT_COLL_ALLGATHER, 1 << 20), "recdbl"),
                 "allgather");
    /* a row for groups over several hosts does not match a group on one host (the hosts'
       case: parallel_coll_hosts_*) */
    CT_ASSERT_IN(ctx,
                 ct_topo_set_select_table(t, "allreduce 1 0 2 0 naive\nallreduce 1 0 -1 0 ring\n",
                                          &err) == CT_OK,
                 "%s", err.msg);
    CT_ASSERT_IN(ctx, !strcmp(ct_comm_algo_select(w, CT_COLL_ALLREDUCE, 100), "ring"), "one host");
    CT_ASSERT_IN(ctx,
                 ct_topo_set_select_table(t,
                                          "allreduce 1 0 -1 100 recdbl\nallreduce 1 0 -1 0 ring\n"
                                          "allgather 1 0 -1 0 recdbl\n",
                                          &err) == CT_OK,
                 "%s", err.msg);
    /* no row for bcast: the first usable algorithm */
    CT_ASSERT_IN(ctx, !strcmp(ct_comm_algo_select(w, CT_COLL_BCAST, 8), "binomial"),
                 "bcast fallback");
    CT_ASSERT_IN(ctx,
                 ct_topo_set_select_table(t, "allreduce 1 0 -1 0 warp\n", &err) == CT_ERR_FORMAT,
                 "bad algo");
    CT_ASSERT_IN(ctx, HAS(err.msg, "line 1") && HAS(err.msg, "warp"), "message: %s", err.msg);
    CT_ASSERT_IN(ctx, ct_topo_set_select_table(t, "# c\nallreduce 1 0\n", &err) == CT_ERR_FORMAT,
                 "short line");
    CT_ASSERT_IN(ctx, HAS(err.msg, "line 2"), "message: %s", err.msg);
    /* found reviewing the parser for the fuzz target: 129 rows wrote past the 128-row table;
     * a line over 255 characters was cut short (and could read as another valid line); the
     * numbers were not checked */
    {
        char big[129 * 20 + 1] = "", longl[300];
        for (int i = 0; i < 129; i++) strcat(big, "bcast 1 0 1 0 mpi\n");
        CT_ASSERT_IN(ctx, ct_topo_set_select_table(t, big, &err) == CT_ERR_FORMAT,
                     "129 rows refused");
        CT_ASSERT_IN(ctx, HAS(err.msg, "more than 128 rows"), "message: %s", err.msg);
        snprintf(longl, sizeof longl, "allreduce 1 0 -1 0 ring%260s\n", "x");
        CT_ASSERT_IN(ctx, ct_topo_set_select_table(t, longl, &err) == CT_ERR_FORMAT,
                     "long line refused");
        CT_ASSERT_IN(ctx, HAS(err.msg, "longer than"), "message: %s", err.msg);
        CT_ASSERT_IN(ctx,
                     ct_topo_set_select_table(t, "allreduce 1 0 3 0 ring\n", &err) == CT_ERR_FORMAT,
                     "local 3");
        CT_ASSERT_IN(ctx, HAS(err.msg, "local"), "message: %s", err.msg);
        CT_ASSERT_IN(
            ctx, ct_topo_set_select_table(t, "allreduce 4 2 -1 0 ring\n", &err) == CT_ERR_FORMAT,
            "nmax < nmin");
        CT_ASSERT_IN(
            ctx, ct_topo_set_select_table(t, "allreduce 1 0 -1 -5 ring\n", &err) == CT_ERR_FORMAT,
            "bytes < 0");
        CT_ASSERT_IN(
            ctx, ct_topo_set_select_table(t, "allreduce 1x 0 -1 0 ring\n", &err) == CT_ERR_FORMAT,
            "1x");
        CT_ASSERT_IN(ctx,
                     ct_topo_set_select_table(t, "allreduce 1 0 -1 0 ring ring\n", &err) ==
                         CT_ERR_FORMAT,
                     "7 fields");
    }
    CT_ASSERT_IN(ctx,
                 ct_topo_set_select_table(t, "allreduce 1 0 -1 0 mpi\nallreduce 1 0 -1 0 naive\n",
                                          &err) == CT_OK,
                 "x");
    CT_ASSERT_IN(ctx, !strcmp(ct_comm_algo_select(w, CT_COLL_ALLREDUCE, 8), "mpi"),
                 "mpi usable with 1x1");
    char path[] = "/tmp/ct_select_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) {
        CT_ASSERT_IN(ctx, ct_topo_write_select_table(t, path, &err) == CT_OK, "%s", err.msg);
        CT_ASSERT_IN(ctx, ct_topo_set_select_table(t, "allreduce 1 0 -1 0 tree\n", &err) == CT_OK,
                     "x");
        CT_ASSERT_IN(ctx, ct_topo_load_select_table(t, path, &err) == CT_OK, "%s", err.msg);
        CT_ASSERT_IN(ctx, !strcmp(ct_comm_algo_select(w, CT_COLL_ALLREDUCE, 8), "mpi"),
                     "round trip");
        remove(path);
    }
    CT_ASSERT_IN(ctx, ct_topo_load_select_table(t, "/nonexistent/x", &err) == CT_ERR_IO,
                 "missing file");
    CT_ASSERT_IN(ctx, ct_topo_set_override(t, "allreduce=ring,bcast=binomial", &err) == CT_OK, "%s",
                 err.msg);
    CT_ASSERT_IN(ctx, !strcmp(ct_comm_algo_select(w, CT_COLL_ALLREDUCE, 8), "ring"), "override");
    CT_ASSERT_IN(ctx, ct_topo_set_override(t, "allreduce=warp", &err) == CT_ERR_ARG,
                 "bad override");
    CT_ASSERT_IN(ctx, HAS(err.msg, "warp"), "message: %s", err.msg);
    CT_ASSERT_IN(ctx, ct_topo_set_override(t, "sideways=ring", &err) == CT_ERR_ARG,
                 "bad collective");
    for (int i = 0; ct_coll_algo_name(CT_COLL_ALLREDUCE, i); i++) {
        const char *a = ct_coll_algo_name(CT_COLL_ALLREDUCE, i);
        CT_ASSERT_IN(ctx, *ct_comm_algo_restriction(w, CT_COLL_ALLREDUCE, a) == 0,
                     "%s usable on 1x1", a);
    }
    ct_comm_free(w);
    int rc = ct_test_mpi_end("test_parallel_errors select");
    ct_topo_free(t);
    return rc;
}

/* CT_COMM_TIMEOUT: a wait that cannot end ends with CT_ERR_TIMEOUT naming the collective and a
 * peer, on every worker, within a few timeouts (2 s here), instead of hanging.
 *   (a) the last worker never calls the collective the others are in (check mode on);
 *   (b) with check mode off, workers in several processes pass different counts: MPI sees the
 *       truncation on some, the others wait for a message that never comes.
 * Every worker must come back with an error, none later than 10 s. */
static double now_s(void) { return MPI_Wtime(); }

static int timeouts(int argc, char **argv) {
    int D = argc > 2 ? atoi(argv[2]) : 1;
    /* one case per run: messages a timed-out call left in flight would meet the next call on a
       new world handle (same comm id, same tags) */
    int part_b = argc > 3 && !strcmp(argv[3], "b");
    ct_topo *topo = NULL;
    ct_err err = {0};
    if (ct_topo_create(&topo, &argc, &argv, D, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    ct_test_mpi_begin();
    double env = 2.0;
    setenv("CT_COMM_TIMEOUT", "2.5", 1);
    {
        const char *ctx = "timeout env";
        CT_ASSERT_IN(ctx, ct_comm_timeout_env(&env, &err) == CT_OK && env == 2.5, "%g %s", env,
                     err.msg);
        setenv("CT_COMM_TIMEOUT", "soon", 1);
        CT_ASSERT_IN(
            ctx, ct_comm_timeout_env(&env, &err) == CT_ERR_ARG && HAS(err.msg, "CT_COMM_TIMEOUT"),
            "%s", err.msg);
        CT_ASSERT_IN(ctx, ct_topo_timeout(topo) == CT_COMM_TIMEOUT_DEFAULT, "default %g",
                     ct_topo_timeout(topo));
    }
    ct_topo_set_timeout(topo, 2.0);
#pragma omp parallel num_threads(D)
    {
        const char *ctx = "timeout";
        int th = omp_get_thread_num();
        float a[64] = {0}, b[64];
        ct_comm *w = NULL;
        ct_comm_world(topo, th, &w);
        int r = ct_comm_rank(w), n = ct_comm_size(w);
        ct_status st;
        double t0;

        ctx = "a worker that never comes";
        t0 = now_s();
        if (!part_b && r != n - 1) {
            st = ct_comm_allreduce(w, a, b, 10, CT_F32, CT_OP_SUM, "ring");
            char m[CT_ERR_MSG_MAX];
            snprintf(m, sizeof m, "%s", ct_comm_errmsg(w));
            double dt = now_s() - t0;
            CT_ASSERT_IN(ctx,
                         st == CT_ERR_TIMEOUT && HAS(m, "allreduce") && HAS(m, "CT_COMM_TIMEOUT") &&
                             HAS(m, "group rank"),
                         "%d %s", st, m);
            CT_ASSERT_IN(ctx, dt < 10, "came back after %.1f s", dt);
            st = ct_comm_allreduce(w, a, b, 10, CT_F32, CT_OP_SUM, "ring");
            CT_ASSERT_IN(ctx, st == CT_ERR_STATE && HAS(ct_comm_errmsg(w), "timeout"),
                         "then refused: %d %s", st, ct_comm_errmsg(w));
#pragma omp critical(print)
            printf("ok: (a) worker %d after %.1f s: %s\n", r, dt, m);
        }
        ctx = "counts differ between processes, check mode off";
        ct_comm_set_check(w, 0);
        t0 = now_s();
        if (!part_b) goto done;
        st = ct_comm_allreduce(w, a, b, r == n - 1 ? 40 : 20, CT_F32, CT_OP_SUM, "ring");
        double dt = now_s() - t0;
        CT_ASSERT_IN(ctx, n == 1 || st != CT_OK, "worker %d: %d", r, st);
        CT_ASSERT_IN(ctx, dt < 10, "worker %d came back after %.1f s", r, dt);
        if (st == CT_ERR_TIMEOUT)
            CT_ASSERT_IN(ctx, HAS(ct_comm_errmsg(w), "allreduce (ring)"), "%s", ct_comm_errmsg(w));
#pragma omp critical(print)
        if (n > 1)
            printf("ok: (b) worker %d after %.1f s: %s: %.300s\n", r, dt, ct_status_name(st),
                   ct_comm_errmsg(w));
    done:;
#pragma omp barrier
#pragma omp master
        MPI_Barrier(MPI_COMM_WORLD);
#pragma omp barrier
        ct_comm_free(w);
    }
    int rc = ct_test_mpi_end("test_parallel_errors timeout");
    ct_topo_free(topo);
    return rc;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "timeout")) return timeouts(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "nothread")) return nothread(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "select")) return selector(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "preinit")) return preinit(argc, argv);
    int D = argc > 1 ? atoi(argv[1]) : 2;
    ct_topo *topo = NULL;
    ct_err err = {0};
    if (ct_topo_create(&topo, &argc, &argv, D, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    ct_test_mpi_begin();
#pragma omp parallel num_threads(D)
    {
        const char *ctx = "errors";
        ct_comm *w = NULL, *s = NULL;
        float a[64], b[64];
        ct_comm_world(topo, omp_get_thread_num(), &w);
        int r = ct_comm_rank(w), n = ct_comm_size(w);
        for (int i = 0; i < 64; i++) a[i] = (float)(r + i);
        const char *m;
        ct_status st;

        ctx = "count differs";
        st = ct_comm_allreduce(w, a, b, r == n - 1 ? 11 : 10, CT_F32, CT_OP_SUM, "ring");
        m = ct_comm_errmsg(w);
        CT_ASSERT_IN(ctx, st == CT_ERR_MISMATCH && HAS(m, "count") && HAS(m, "11"), "%d %s", st, m);

        ctx = "unknown op everywhere";
        st = ct_comm_allreduce(w, a, b, 10, CT_F32, (ct_op)7, NULL);
        m = ct_comm_errmsg(w);
        CT_ASSERT_IN(ctx, st == CT_ERR_ARG && (HAS(m, "unknown op") || HAS(m, "rejected")), "%d %s",
                     st, m);

        ctx = "unknown op on one worker";
        st = ct_comm_allreduce(w, a, b, 10, CT_F32, r == 0 ? (ct_op)9 : CT_OP_SUM, NULL);
        m = ct_comm_errmsg(w);
        CT_ASSERT_IN(ctx,
                     st == CT_ERR_ARG && (r == 0 ? HAS(m, "unknown op 9") : HAS(m, "group rank 0")),
                     "%d %s", st, m);

        ctx = "unknown type";
        st = ct_comm_allgather(w, a, b, 1, (ct_dtype)5, NULL);
        CT_ASSERT_IN(ctx, st == CT_ERR_ARG, "%d %s", st, ct_comm_errmsg(w));

        ctx = "unknown algorithm everywhere";
        st = ct_comm_allreduce(w, a, b, 10, CT_F32, CT_OP_SUM, "warp");
        m = ct_comm_errmsg(w);
        CT_ASSERT_IN(ctx,
                     st == CT_ERR_ARG && HAS(m, "unknown algorithm \"warp\"") && HAS(m, "ring"),
                     "%d %s", st, m);

        ctx = "unknown algorithm on the last worker";
        st = ct_comm_allreduce(w, a, b, 10, CT_F32, CT_OP_SUM, r == n - 1 ? "warp" : "ring");
        m = ct_comm_errmsg(w);
        CT_ASSERT_IN(ctx, st != CT_OK && HAS(m, r == n - 1 ? "warp" : "rejected"), "%d %s", st, m);

        ctx = "algorithms disagree";
        st = ct_comm_allreduce(w, a, b, 10, CT_F32, CT_OP_SUM, r == 0 ? "tree" : "ring");
        m = ct_comm_errmsg(w);
        CT_ASSERT_IN(ctx, st == CT_ERR_MISMATCH && HAS(m, "algorithm"), "%d %s", st, m);

        ctx = "bcast roots disagree";
        st = ct_comm_bcast(w, a, 4, CT_F32, r == 0 ? 0 : n - 1, NULL);
        CT_ASSERT_IN(ctx, n == 1 || (st == CT_ERR_MISMATCH && HAS(ct_comm_errmsg(w), "root")),
                     "%d %s", st, ct_comm_errmsg(w));

        ctx = "alltoallv counts disagree";
        {
            size_t sc[64], sd[64], rc[64], rd[64];
            for (int j = 0; j < n; j++) { sc[j] = 1; sd[j] = (size_t)j; rc[j] = j == 0 && r == 1 ? 2 : 1; rd[j] = (size_t)j * 2; }
            st = ct_comm_alltoallv(w, a, sc, sd, b, rc, rd, CT_F32, NULL);
            CT_ASSERT_IN(ctx, n == 1 || (st == CT_ERR_MISMATCH), "%d %s", st, ct_comm_errmsg(w));
        }

        ctx = "split: bad colour on one worker";
        st = ct_comm_split(w, r == 1 % n ? -5 : 0, 0, &s);
        m = ct_comm_errmsg(w);
        CT_ASSERT_IN(ctx, st == CT_ERR_ARG && HAS(m, "colour -5") && s == NULL, "%d %s", st, m);

        ctx = "split against all-reduce";
        if (r == 0) st = ct_comm_split(w, 0, 0, &s);
        else st = ct_comm_allreduce(w, a, b, 10, CT_F32, CT_OP_SUM, NULL);
        m = ct_comm_errmsg(w);
        CT_ASSERT_IN(ctx, n == 1 || (st == CT_ERR_MISMATCH && HAS(m, "different collectives")),
                     "%d %s", st, m);
        ct_comm_free(s);
        s = NULL;

        ctx = "mpi with several workers per rank";
        st = ct_comm_allreduce(w, a, b, 10, CT_F32, CT_OP_SUM, "mpi");
        m = ct_comm_errmsg(w);
        if (D > 1)
            CT_ASSERT_IN(ctx, st == CT_ERR_UNSUPPORTED && HAS(m, "one worker per rank"), "%d %s",
                         st, m);
        else
            CT_ASSERT_IN(ctx, st == CT_OK, "%d %s", st, m);

        ctx = "NULL buffer";
        st = ct_comm_allreduce(w, r == 0 ? NULL : a, b, 10, CT_F32, CT_OP_SUM, NULL);
        CT_ASSERT_IN(ctx, st == CT_ERR_ARG, "%d %s", st, ct_comm_errmsg(w));

        /* without check mode, threads of one process still see a size mismatch in the mailbox */
        ctx = "no check mode, threads";
        ct_comm *tc = NULL;
        ct_comm_split(w, ct_topo_rank(topo), r, &tc);
        if (tc && ct_comm_size(tc) > 1) {
            ct_comm_set_check(tc, 0);
            int tr = ct_comm_rank(tc);
            st = ct_comm_allreduce(tc, a, b, tr == 1 ? 11 : 10, CT_F32, CT_OP_SUM, "naive");
            m = ct_comm_errmsg(tc);
            /* a thread that starts after the break is refused at the door (CT_ERR_STATE) */
            CT_ASSERT_IN(ctx, (st == CT_ERR_MISMATCH && HAS(m, "disagree")) || st == CT_ERR_STATE,
                         "%d %s", st, m);
            st = ct_comm_barrier(tc, NULL);
            CT_ASSERT_IN(ctx, st == CT_ERR_STATE, "a broken comm refuses further calls: %d", st);
            ct_comm_free(tc);
            tc = NULL;
            ct_comm_split(w, ct_topo_rank(topo), r, &tc);
            ct_comm_set_check(tc, 0);
            st = ct_comm_allreduce(tc, a, b, tr == 0 ? 12 : 10, CT_F32, CT_OP_SUM, "hier");
            CT_ASSERT_IN(ctx, st == CT_ERR_MISMATCH && HAS(ct_comm_errmsg(tc), "count"),
                         "hier: %d %s", st, ct_comm_errmsg(tc));
        }
        ct_comm_free(tc);

        ctx = "still usable";
        st = ct_comm_allreduce(w, a, b, 10, CT_F32, CT_OP_SUM, NULL);
        CT_ASSERT_IN(ctx, st == CT_OK, "%d %s", st, ct_comm_errmsg(w));
        for (int i = 0; i < 10; i++)
            CT_ASSERT_IN(ctx, b[i] == (float)(n * (n - 1) / 2 + n * i), "b[%d] = %g", i, b[i]);
        ct_comm_free(w);
    }
    int rc = ct_test_mpi_end("test_parallel_errors");
    ct_topo_free(topo);
    return rc;
}
