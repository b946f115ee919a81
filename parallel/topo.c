/* topo.c - the worker topology: MPI initialised with MPI_THREAD_MULTIPLE, ranks x D threads,
 * node (host) membership through MPI_Comm_split_type(SHARED) and every rank's host name
 * (MPI_Get_processor_name, all-gathered), the launcher's task count read before MPI starts
 * (mpiexec's PMI_SIZE, srun's SLURM_*), and the process-level registry of groups
 * that this process's worker threads share. The only file that names MPI_COMM_WORLD. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parallel_impl.h"

#ifdef CT_SANITIZE_BUILD
#include <sanitizer/lsan_interface.h>
/* Sanitizer builds only. LeakSanitizer runs with use_tls=0 (tests/lsan.supp says why), so
 * what libgomp keeps for the initial thread (its thread pool, reachable only through
 * libgomp's thread-local data) would be reported as a leak by every program that opens an
 * OpenMP region on its main thread. libgomp's own frames carry no frame pointers, so a
 * suppression naming the library would also hide our leaks inside parallel regions; instead
 * one empty region is opened before main with leak tracking off, and what libgomp allocates
 * there is ignored (and still scanned, so what it points to later is reachable). */
static int lsan_omp_sink;
__attribute__((constructor)) static void ct__lsan_omp_pool(void) {
  __lsan_disable();
  for (int n = 1; n <= 2; n++) { /* a team of one and a pool of threads take different paths */
#pragma omp parallel num_threads(n)
    __atomic_fetch_add(&lsan_omp_sink, 1, __ATOMIC_RELAXED); /* not empty: kept by -O2 */
  }
  __lsan_enable();
}
#endif

/* ------------------------------------------------------------------ deadlines */

ct__deadline ct__deadline_in(double seconds) {
    ct__deadline d;
    memset(&d, 0, sizeof d);
    if (!(seconds > 0)) return d;
    clock_gettime(CLOCK_MONOTONIC, &d.at);
    double whole = floor(seconds);
    d.at.tv_sec += (time_t)whole;
    d.at.tv_nsec += (long)((seconds - whole) * 1e9);
    if (d.at.tv_nsec >= 1000000000L) d.at.tv_sec++, d.at.tv_nsec -= 1000000000L;
    d.on = 1;
    return d;
}

int ct__deadline_passed(const ct__deadline *d) {
    if (!d || !d->on) return 0;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec > d->at.tv_sec || (now.tv_sec == d->at.tv_sec && now.tv_nsec >= d->at.tv_nsec);
}

void ct__cond_init(pthread_cond_t *cv) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC); /* a deadline must not move with the date */
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

int ct__cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu, const ct__deadline *d) {
    if (!d || !d->on) return pthread_cond_wait(cv, mu);
    return pthread_cond_timedwait(cv, mu, &d->at);
}

/* ------------------------------------------------------------------ the threads' barrier */

void ct__barrier_init(ct__barrier *b, int n) {
    pthread_mutex_init(&b->mu, NULL);
    ct__cond_init(&b->cv);
    b->n = n;
    b->waiting = 0;
    b->gen = 0;
    b->spin = 0;
    b->arrived = 0;
    b->broken = NULL;
}

void ct__barrier_destroy(ct__barrier *b) {
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
}

int ct__barrier_wait_until(ct__barrier *b, int me, const ct__deadline *d, uint64_t *missing) {
    if (b->n <= 1) return 0;
    pthread_mutex_lock(&b->mu);
    if (b->broken && *b->broken) {
        pthread_mutex_unlock(&b->mu);
        return -1;
    }
    int gen = b->gen;
    b->arrived |= (uint64_t)1 << (me & 63);
    if (++b->waiting == b->n) {
        b->waiting = 0;
        b->arrived = 0;
        __atomic_store_n(&b->gen, gen + 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
        return 0;
    }
    pthread_mutex_unlock(&b->mu);
    ct__spin_until(&b->gen, gen + 1, b->spin);
    pthread_mutex_lock(&b->mu);
    int rc = 0;
    while (gen == b->gen && !(b->broken && *b->broken) && rc != ETIMEDOUT)
        rc = ct__cond_wait(&b->cv, &b->mu, d);
    if (gen != b->gen) {
        rc = 0;
    } else { /* timed out or broken: leave the count as if we never came */
        if (missing) *missing = ~b->arrived & (b->n >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << b->n) - 1));
        b->waiting--;
        b->arrived &= ~((uint64_t)1 << (me & 63));
        rc = rc == ETIMEDOUT ? ETIMEDOUT : -1;
    }
    pthread_mutex_unlock(&b->mu);
    return rc;
}

/* ------------------------------------------------------------------ timeouts */

void ct_topo_set_timeout(ct_topo *t, double seconds) { t->timeout = seconds; }
double ct_topo_timeout(const ct_topo *t) { return t->timeout; }

ct_status ct_comm_timeout_env(double *seconds, ct_err *err) {
    const char *v = getenv("CT_COMM_TIMEOUT");
    if (!v || !*v) return CT_OK;
    char *end = NULL;
    double x = strtod(v, &end);
    if (end == v || *end || !(x >= 0) || x > 1e9)
        return CT_ERR(err, CT_ERR_ARG,
                      "CT_COMM_TIMEOUT='%s': expected seconds, a number >= 0 (0 = wait for ever)", v);
    *seconds = x;
    return CT_OK;
}

/* A positive integer environment variable, or 0. */
static int env_count(const char *name) {
    const char *v = getenv(name);
    char *end = NULL;
    long x = v && *v ? strtol(v, &end, 10) : 0;
    return v && *v && end && !*end && x > 0 && x < (1L << 30) ? (int)x : 0;
}

int ct_launcher_ranks_env(void) {
    static const char *const names[] = {"PMI_SIZE", "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS",
                                        "OMPI_COMM_WORLD_SIZE"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (env_count(names[i])) return env_count(names[i]);
    return 1;
}

ct_status ct_topo_launcher_check(const ct_topo *t, ct_err *err) {
    int tasks = env_count("SLURM_STEP_NUM_TASKS");
    if (!tasks) tasks = env_count("SLURM_NTASKS");
    /* only srun's own tasks as singletons: under Hydra inside an allocation (PMI_SIZE set) the
       step's tasks are Hydra's proxies, one per node, not the ranks */
    if (tasks > 1 && getenv("SLURM_STEP_ID") && !env_count("PMI_SIZE") && t->nranks == 1)
        return CT_ERR(err, CT_ERR_ARG,
                      "srun started %d tasks, but MPI sees %d rank in this one (SLURM_PROCID %s, "
                      "node list %s): the tasks did not find each other through a PMI this MPI "
                      "speaks; for MPICH launch with srun --mpi=pmi2 (or set MpiDefault=pmi2 in "
                      "slurm.conf)", tasks, t->nranks,
                      getenv("SLURM_PROCID") ? getenv("SLURM_PROCID") : "?",
                      getenv("SLURM_JOB_NODELIST") ? getenv("SLURM_JOB_NODELIST") : "?");
    return CT_OK;
}

static int bits_for(int v) { /* bits to hold 0..v-1 */
    int b = 0;
    while ((1 << b) < v) b++;
    return b;
}

ct_status ct_topo_create(ct_topo **out, int *argc, char ***argv, int D, ct_err *err) {
    ct_status st = CT_OK;
    ct_topo *t = NULL;
    int inited = 0, provided = 0, rc;
    if (!out) return CT_ERR(err, CT_ERR_ARG, "ct_topo_create: out is NULL");
    *out = NULL;
    if (D < 1 || D > CT__MAX_THREADS)
        return CT_ERR(err, CT_ERR_ARG, "ct_topo_create: devices per rank %d is outside 1..%d", D,
                      CT__MAX_THREADS);
    t = ct_calloc(1, sizeof *t);
    if (!t) return CT_ERR(err, CT_ERR_NOMEM, "ct_topo_create: out of memory");
    t->world = MPI_COMM_NULL;
    t->node_comm = MPI_COMM_NULL;
    pthread_mutex_init(&t->mu, NULL);
    MPI_Initialized(&inited);
    if (!inited) {
        rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS) {
            st = CT_ERR(err, CT_ERR_MPI, "MPI_Init_thread failed (code %d)", rc);
            goto cleanup;
        }
        t->owns_mpi = 1;
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_MULTIPLE) {
        static const char *lv[] = {"MPI_THREAD_SINGLE", "MPI_THREAD_FUNNELED",
                                   "MPI_THREAD_SERIALIZED", "MPI_THREAD_MULTIPLE"};
        int i = provided == MPI_THREAD_SINGLE ? 0 : provided == MPI_THREAD_FUNNELED ? 1
              : provided == MPI_THREAD_SERIALIZED ? 2 : 3;
        st = CT_ERR(err, CT_ERR_UNSUPPORTED,
                    "the MPI library provides only %s, cltrain needs MPI_THREAD_MULTIPLE (worker "
                    "threads of one rank talk to other ranks at once)%s; hint: use an MPI built "
                    "with thread support (MPICH: --enable-threads=multiple)",
                    lv[i], t->owns_mpi ? "" : " - the program initialised MPI itself: call "
                    "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)");
        goto cleanup;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &t->world);
    MPI_Comm_set_errhandler(t->world, MPI_ERRORS_RETURN);
    /* MPICH raises the error of a completed request (MPI_Test of a truncated receive) on
       MPI_COMM_WORLD rather than on the request's communicator: errors must come back to us as
       codes there too, or a count mismatch ends the job instead of being reported. Only when we
       initialised MPI (a program that did may want its own handler). */
    if (t->owns_mpi) MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(t->world, &t->rank);
    MPI_Comm_size(t->world, &t->nranks);
    t->D = D;
    t->W = t->nranks * D;
    MPI_Comm_split_type(t->world, MPI_COMM_TYPE_SHARED, t->rank, MPI_INFO_NULL, &t->node_comm);
    MPI_Comm_rank(t->node_comm, &t->local_rank);
    MPI_Comm_size(t->node_comm, &t->local_nranks);
    {   /* node index: order nodes by their lowest world rank */
        int first = t->rank, *firsts = NULL;
        MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, t->node_comm);
        firsts = ct_malloc(sizeof(int) * (size_t)t->nranks);
        if (!firsts) {
            st = CT_ERR(err, CT_ERR_NOMEM, "ct_topo_create: out of memory");
            goto cleanup;
        }
        MPI_Allgather(&first, 1, MPI_INT, firsts, 1, MPI_INT, t->world);
        t->node = 0;
        t->nnodes = 0;
        for (int r = 0; r < t->nranks; r++)
            if (firsts[r] == r) {
                if (r < first) t->node++;
                t->nnodes++;
            }
        t->rank_node = ct_calloc((size_t)(t->nranks > 0 ? t->nranks : 1), sizeof(int));
        if (!t->rank_node) {
            free(firsts);
            st = CT_ERR(err, CT_ERR_NOMEM, "ct_topo_create: out of memory");
            goto cleanup;
        }
        for (int r = 0; r < t->nranks; r++) /* node index = number of node leaders below */
            for (int q = 0; q < firsts[r]; q++) t->rank_node[r] += firsts[q] == q;
        free(firsts);
    }
    {
        int *ub = NULL, flag = 0, ubits = 0;
        MPI_Comm_get_attr(t->world, MPI_TAG_UB, &ub, &flag);
        long long u = flag ? *ub : 32767;
        while (ubits < 31 && (1LL << (ubits + 1)) - 1 <= u) ubits++;
        t->tag_bits_thread = bits_for(D);
        /* one bit above the ids marks the non-blocking point-to-point channel */
        t->tag_bits_id = ubits - 2 * t->tag_bits_thread - 1;
        if (t->tag_bits_id < 8) {
            st = CT_ERR(err, CT_ERR_UNSUPPORTED,
                        "MPI_TAG_UB %lld leaves %d bits for comm ids with %d threads per rank",
                        u, t->tag_bits_id, D);
            goto cleanup;
        }
        if (t->tag_bits_id > 20) t->tag_bits_id = 20;
        t->id_max = (1u << t->tag_bits_id) - 1;
        t->tag_nb = 1 << (2 * t->tag_bits_thread + t->tag_bits_id);
    }
    {
        int len = 0;
        char v[MPI_MAX_LIBRARY_VERSION_STRING];
        MPI_Get_library_version(v, &len);
        char *nl = strchr(v, '\n');
        if (nl) *nl = 0;
        snprintf(t->mpi_version, sizeof t->mpi_version, "%.255s", v);
        if (MPI_Get_processor_name(t->host, &len) != MPI_SUCCESS) snprintf(t->host, sizeof t->host, "?");
        /* every rank's host name, for the grid's description and messages naming a peer */
        t->rank_host = ct_calloc((size_t)t->nranks, sizeof t->host);
        if (!t->rank_host) {
            st = CT_ERR(err, CT_ERR_NOMEM, "ct_topo_create: out of memory");
            goto cleanup;
        }
        MPI_Allgather(t->host, (int)sizeof t->host, MPI_CHAR, t->rank_host, (int)sizeof t->host,
                      MPI_CHAR, t->world);
        for (int r = 0; r < t->nranks; r++) t->rank_host[(size_t)(r + 1) * sizeof t->host - 1] = 0;
    }
    t->check_default = 1;
    t->timeout = CT_COMM_TIMEOUT_DEFAULT;
    {   /* spin before sleeping only when this node's workers fit its cores */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        t->spin = (long)t->local_nranks * D <= cores ? 200 : 0;
    }
    t->max_id = ct_calloc((size_t)D, sizeof *t->max_id);
    if (!t->max_id) {
        st = CT_ERR(err, CT_ERR_NOMEM, "ct_topo_create: out of memory");
        goto cleanup;
    }
    ct__select_default(t);
    *out = t;
    return CT_OK;
cleanup:
    ct_topo_free(t);
    return st;
}

void ct__group_release(ct_topo *t, ct__group *g);

void ct_topo_free(ct_topo *t) {
    if (!t) return;
    if (t->world_group) ct__group_release(t, t->world_group);
    if (t->node_comm != MPI_COMM_NULL) MPI_Comm_free(&t->node_comm);
    if (t->world != MPI_COMM_NULL) MPI_Comm_free(&t->world);
    if (t->owns_mpi) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) MPI_Finalize();
    }
    pthread_mutex_destroy(&t->mu);
    free(t->max_id);
    free(t->rank_node);
    free(t->rank_host);
    free(t);
}

int ct_topo_rank(const ct_topo *t) { return t->rank; }
int ct_topo_nranks(const ct_topo *t) { return t->nranks; }
int ct_topo_devices_per_rank(const ct_topo *t) { return t->D; }
int ct_topo_world_size(const ct_topo *t) { return t->W; }
int ct_topo_node(const ct_topo *t) { return t->node; }
int ct_topo_nnodes(const ct_topo *t) { return t->nnodes; }
int ct_topo_local_rank(const ct_topo *t) { return t->local_rank; }
int ct_topo_local_nranks(const ct_topo *t) { return t->local_nranks; }
int ct_topo_device_index(const ct_topo *t, int thread) { return t->local_rank * t->D + thread; }
const char *ct_topo_mpi_version(const ct_topo *t) { return t->mpi_version; }
const char *ct_topo_host(const ct_topo *t) { return t->host; }
int ct_topo_rank_node(const ct_topo *t, int rank) {
    return rank >= 0 && rank < t->nranks ? t->rank_node[rank] : -1;
}
const char *ct_topo_rank_host(const ct_topo *t, int rank) {
    return rank >= 0 && rank < t->nranks ? t->rank_host + (size_t)rank * sizeof t->host : "?";
}
void ct_topo_set_check(ct_topo *t, int on) { t->check_default = on; }
