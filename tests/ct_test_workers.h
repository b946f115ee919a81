/* ct_test_workers.h - the main of a test whose workers are MPI ranks x threads: the topology
 * (argv[1]: threads per rank, default 1), the tally of ct_test_mpi.h, one device per thread (the
 * PoCL devices CT_DEVICE names, else the CPU devices), each thread running the test's worker.
 * Tests that include it are built with OpenMP.
 *
 *     static void worker(ct_topo *topo, int thread, ct_device_info *info) { ... }
 *     int main(int argc, char **argv) { return ct_test_workers_main(&argc, &argv, "test_x", worker); }
 */
#ifndef CT_TEST_WORKERS_H
#define CT_TEST_WORKERS_H

#include <omp.h>
#include <stdlib.h>

#include "ct_parallel.h"
#include "ct_test_dev.h"
#include "ct_test_mpi.h"

typedef void (*ct_test_worker_fn)(ct_topo *topo, int thread, ct_device_info *info);

static inline int ct_test_workers_main(int *argc, char ***argv, const char *name,
                                       ct_test_worker_fn worker) {
    int D = *argc > 1 ? atoi((*argv)[1]) : 1;
    ct_err err = {0};
    ct_topo *topo = NULL;
    CT_REQUIRE_OK_OR(ct_topo_create(&topo, argc, argv, D, &err), err.msg, 1);
    ct_test_mpi_begin();
    ct_test_devices ds;
    CT_REQUIRE_OR(!ct_test_devices_find(&ds, "cpu", 0), 1, "no device");
    CT_REQUIRE_OR(ds.npick >= D, 1, "need %d devices (POCL_DEVICES), have %d", D, ds.npick);
#pragma omp parallel num_threads(D)
    worker(topo, omp_get_thread_num(), &ds.list[ds.pick[omp_get_thread_num()]]);
    ct_test_devices_free(&ds);
    int rc = ct_test_mpi_end(name);
    ct_topo_free(topo);
    return rc;
}

#endif /* CT_TEST_WORKERS_H */
