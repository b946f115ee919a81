/* ct_test_mpi.h - ct_test.h under mpiexec: failures name their rank, a failed REQUIRE ends every
 * worker (a worker that left a collective would leave the others waiting), and the tally sums
 * every rank's counts so every rank exits non-zero when any failed.
 *
 *     int main(int argc, char **argv) {
 *         ct_topo *topo = NULL;
 *         ct_topo_create(&topo, &argc, &argv, D, &err);  // or MPI_Init_thread
 *         ct_test_mpi_begin();
 *         ...                                            // CT_ASSERT_*, CT_REQUIRE_OK
 *         int rc = ct_test_mpi_end("test_example");      // collective, before MPI ends
 *         ct_topo_free(topo);
 *         return rc;
 *     }
 */
#ifndef CT_TEST_MPI_H
#define CT_TEST_MPI_H

#include <mpi.h>

#include "ct_test.h"

static inline void ct__test_mpi_abort(void) {
    fflush(stdout);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* After MPI is initialised: failures carry this rank, a failed REQUIRE aborts every rank. */
static inline void ct_test_mpi_begin(void) {
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    ct__test_rank = r;
    ct__test_stop_hook = ct__test_mpi_abort;
}

/* Collective over MPI_COMM_WORLD: the checks and failures of every rank summed; rank 0 prints
 * "name: N checks, F failed"; every rank returns 1 when any rank failed. */
static inline int ct_test_mpi_end(const char *name) {
    int mine[2] = {atomic_load(&ct_test_checks), atomic_load(&ct_test_failures)}, all[2] = {0, 0};
    MPI_Allreduce(mine, all, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (ct__test_rank <= 0) printf("%s: %d checks, %d failed\n", name, all[0], all[1]);
    fflush(stdout);
    return all[1] ? 1 : 0;
}

#endif /* CT_TEST_MPI_H */
