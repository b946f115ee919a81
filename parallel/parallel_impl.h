/* parallel_impl.h - private contracts of parallel/: the topology and comm structs, the worker-level
 * point-to-point layer every algorithm is written over, reduction kernels, and the registry.
 *
 * Transport: peers in this process meet in a rendezvous mailbox (one slot per ordered pair of
 * local members; the receiver copies or reduces straight out of the sender's memory, one pass);
 * peers in other processes go through MPI on the topology's duplicate of MPI_COMM_WORLD with
 * tag = (comm id, src thread, dst thread), messages cut into CT__SEG-byte segments so a receiver
 * reduces segment k while k+1 is in flight. Algorithms only use ct__p2p_*; that is why each one
 * works for ranks, threads and mixes alike.
 */
#ifndef CT_PARALLEL_IMPL_H
#define CT_PARALLEL_IMPL_H

#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "ct_parallel.h"

#define CT__SEG ((size_t)1 << 20) /* bytes per MPI segment */
#define CT__MAX_THREADS 64

/* ---------------------------------------------------------------- shared per-process state */

/* Spin briefly on a flag before sleeping on a condition variable: a hand-off between threads on
 * two running cores costs well under a microsecond instead of a futex wake-up. `spin` is 0 when
 * workers outnumber cores (spinning would steal the core the peer needs). */
static inline void ct__spin_until(const volatile int *flag, int want, int spin) {
    for (int i = 0; i < spin && __atomic_load_n(flag, __ATOMIC_ACQUIRE) != want; i++) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

/* A wait's deadline (CLOCK_MONOTONIC), from the topology's timeout (CT_COMM_TIMEOUT). */
typedef struct ct__deadline {
    struct timespec at;
    int on; /* 0: wait for ever */
} ct__deadline;
ct__deadline ct__deadline_in(double seconds);
int ct__deadline_passed(const ct__deadline *d);
/* pthread_cond_wait bounded by d; ETIMEDOUT once it passed. Condition variables waited on this
 * way are made by ct__cond_init (monotonic clock). */
int ct__cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu, const ct__deadline *d);
void ct__cond_init(pthread_cond_t *cv);

typedef struct ct__barrier {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, waiting;
    volatile int gen;
    int spin;
    uint64_t arrived;           /* local members at the barrier in this generation (bit = index) */
    const volatile int *broken; /* the group's flag: a broken group releases every waiter */
} ct__barrier;
void ct__barrier_init(ct__barrier *b, int n);
void ct__barrier_destroy(ct__barrier *b);
/* Wait for the n local members (me = my local index). 0, ETIMEDOUT (d passed; *missing gets
 * the bits of the members that had not come) or -1 (the group broke meanwhile). */
int ct__barrier_wait_until(ct__barrier *b, int me, const ct__deadline *d, uint64_t *missing);

/* One rendezvous slot src -> dst (local member indices). */
typedef struct ct__slot {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const void *ptr;
    size_t bytes;
    volatile int full; /* posted by the sender, not yet released */
    volatile int done; /* consumed by the receiver */
    int error; /* receiver saw a size mismatch */
} ct__slot;

typedef struct ct__member {
    int wid;    /* world worker id */
    int rank;   /* MPI rank */
    int thread; /* thread within that rank */
    int local;  /* index among this process's members, or -1 */
} ct__member;

/* The non-blocking channel src -> dst between two local members (p2p.c): posted sends not yet
 * taken, in the order posted; each carries its sequence number on the channel so the receiver's
 * k-th receive takes the k-th send whatever order the receives are completed in. */
typedef struct ct__chan {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct ct_request *head, *tail; /* posted sends not yet received */
    uint64_t nsent, nrecv;          /* sequence numbers handed out (sender's, receiver's) */
} ct__chan;

/* State shared by the threads of this process that belong to one group. */
typedef struct ct__group {
    uint32_t id;
    int color;
    int refs;
    int n;              /* group size */
    ct__member *m;      /* [n], in group rank order */
    int nlocal;         /* members in this process */
    int *local_rank;    /* [nlocal]: group rank of local member i */
    int nprocs;         /* distinct ranks */
    int one_per_rank;   /* every rank holds at most one member */
    MPI_Comm mpi;       /* over member ranks when one_per_rank, else MPI_COMM_NULL */
    int one_node;       /* every member's rank is on this node */
    int nhosts;         /* distinct nodes (hosts) the members' ranks are on */
    int host_multi;     /* some host holds members of two or more processes */
    MPI_Win shm_win;    /* "shm" all-reduce: shared window, segments of shm_cap bytes */
    void **shm_seg;     /* [n] each member's segment, mapped here */
    size_t shm_cap;
    ct__slot *slots;    /* [nlocal * nlocal], slot src*nlocal+dst */
    ct__chan *chans;    /* [nlocal * nlocal], non-blocking channel src*nlocal+dst */
    ct__barrier bar;    /* the local members */
    void **ptrs;        /* [nlocal] published pointers (hierarchical) */
    size_t *counts;     /* [nlocal] published counts (hierarchical) */
    void **rptrs;       /* [nlocal] published output pointers (hierarchical, threads only) */
    volatile int broken; /* 1: a member saw a size mismatch without check mode, 2: a wait timed
                            out (CT_COMM_TIMEOUT); all waits fail, later calls are refused */
    void *scratch;      /* shared scratch (hierarchical) */
    size_t scratch_cap;
    struct ct__group *next;
} ct__group;

typedef struct ct__select_row {
    ct_coll coll;
    int nmin, nmax;      /* group size range, inclusive; nmax 0 = any */
    int local;           /* -1 any, 0 only groups with nlocal==1, 1 only groups with nlocal>1 */
    size_t bytes_max;    /* rows apply to bytes <= bytes_max (0 = any) */
    char algo[32];
} ct__select_row;
#define CT__SELECT_MAX 128
/* Parse selector-table text (lines "collective nmin nmax local bytes_max algorithm", '#'
 * comments) into rows[0..*n), at most max. Pure (no topology): ct_topo_set_select_table and the
 * fuzz target call it. A bad line is CT_ERR_FORMAT naming it; *n is 0 then. */
ct_status ct__select_parse(const char *text, ct__select_row *rows, int max, int *n, ct_err *err);

struct ct_topo {
    int rank, nranks, D, W;
    int node, nnodes, local_rank, local_nranks;
    int tag_bits_thread, tag_bits_id;
    int tag_nb; /* the tag bit that marks non-blocking point-to-point messages (their own channel) */
    uint32_t id_max;
    double timeout; /* seconds every wait may take (<= 0: no bound) */
    int owns_mpi;
    int check_default;
    int spin; /* ct__spin_until count for this process's threads */
    MPI_Comm world; /* dup of MPI_COMM_WORLD, errors returned */
    MPI_Comm node_comm;
    char mpi_version[256];
    char host[MPI_MAX_PROCESSOR_NAME]; /* MPI_Get_processor_name, for the grid's description */
    pthread_mutex_t mu; /* guards groups list */
    ct__group *groups;
    ct__group *world_group;
    uint32_t *max_id; /* [D] highest comm id each local worker has seen */
    int *rank_node;   /* [nranks] node index of every rank */
    char *rank_host;  /* [nranks][sizeof host] every rank's host name */
    char override[CT_COLL__COUNT][32];
    ct__select_row table[CT__SELECT_MAX];
    int ntable;
};

struct ct_comm {
    ct_topo *topo;
    ct__group *g;
    int rank, size, thread, local; /* local: my index among local members */
    int check;
    ct_comm *leaders; /* hierarchical: comm of one leader per process (only on leaders) */
    int leader_rank;  /* rank in `leaders`, -1 when not a leader */
    /* hierarchical across hosts, on a group with one member per process (the group itself or
       its leaders) spanning several hosts, some holding several of its processes: */
    ct_comm *node;    /* the members on this host, in group order (its rank 0 leads the host) */
    ct_comm *hosts;   /* the first member of each host (only on those) */
    void *scratch;    /* per-handle scratch */
    size_t scratch_cap;
    void *scratch2;
    size_t scratch2_cap;
    char op[64];      /* what the handle is doing, for a timeout's message: "allreduce (ring)" */
    uint64_t bytes;   /* ct_comm_bytes: the collectives' bandwidth terms, summed */
    ct_err err;
};

/* This worker's barrier with the other local members of c's group, bounded by the timeout:
 * CT_ERR_TIMEOUT naming the members that did not come, or the group's broken error. */
ct_status ct__local_barrier(ct_comm *c);
/* CT_ERR_TIMEOUT on c: `what` ("no message from", "no answer to our message by") group rank
 * `peer` within the timeout, naming c->op, the peer's worker, rank and thread; breaks the group
 * so every local waiter wakes and later calls are refused. */
ct_status ct__timeout(ct_comm *c, int peer, const char *what);

/* Grow c->scratch / scratch2 to at least `bytes`. */
ct_status ct__scratch(ct_comm *c, size_t bytes, void **out);
ct_status ct__scratch2(ct_comm *c, size_t bytes, void **out);

/* ---------------------------------------------------------------- point-to-point */

/* Mark the group broken and wake every local waiter. */
void ct__group_break(ct__group *g);

ct_status ct__p2p_send(ct_comm *c, int dst, const void *buf, size_t bytes);
ct_status ct__p2p_recv(ct_comm *c, int src, void *buf, size_t bytes);
/* acc[i] = acc[i] op incoming[i], count elements. */
ct_status ct__p2p_recv_reduce(ct_comm *c, int src, void *acc, size_t count, ct_dtype dt, ct_op op);
/* Send sbuf to dst while receiving from src; buffers must not overlap. */
ct_status ct__p2p_sendrecv(ct_comm *c, int dst, const void *sbuf, size_t sbytes, int src,
                           void *rbuf, size_t rbytes);
/* Send sbuf to dst while acc = acc op (data from src); acc may overlap sbuf. */
ct_status ct__p2p_sendrecv_reduce(ct_comm *c, int dst, const void *sbuf, size_t sbytes, int src,
                                  void *acc, size_t count, ct_dtype dt, ct_op op);

/* ---------------------------------------------------------------- reductions */

/* out[i] = a[i] op b[i] (out may equal a or b). avg reduces as sum; ct__finish_avg divides. */
void ct__reduce(ct_dtype dt, ct_op op, void *out, const void *a, const void *b, size_t n);
/* memcpy with non-temporal stores where the CPU has them (large outputs that another thread
 * reads next: skips the read-for-ownership); ct__stream_fence orders them before a barrier. */
void ct__copy_stream(void *dst, const void *src, size_t bytes);
void ct__stream_fence(void);
void ct__finish_avg(ct_dtype dt, void *buf, size_t n, int size);

/* Balanced split of n items in p parts: start of part i. */
static inline size_t ct__part(size_t n, int p, int i) {
    return (size_t)((n / (size_t)p) * (size_t)i + ((size_t)i < n % (size_t)p ? (size_t)i : n % (size_t)p));
}

/* ---------------------------------------------------------------- algorithm signatures */

/* All-reduce on host memory; op is SUM or MAX (avg is applied by the caller). send may == recv. */
typedef ct_status (*ct__allreduce_fn)(ct_comm *c, const void *send, void *recv, size_t count,
                                      ct_dtype dt, ct_op op);
typedef ct_status (*ct__reducescatter_fn)(ct_comm *c, const void *send, void *recv, size_t count,
                                          ct_dtype dt, ct_op op);
typedef ct_status (*ct__allgather_fn)(ct_comm *c, const void *send, void *recv, size_t count,
                                      ct_dtype dt);
typedef ct_status (*ct__alltoall_fn)(ct_comm *c, const void *send, void *recv, size_t count,
                                     ct_dtype dt);
typedef ct_status (*ct__alltoallv_fn)(ct_comm *c, const void *send, const size_t *scounts,
                                      const size_t *sdispls, void *recv, const size_t *rcounts,
                                      const size_t *rdispls, ct_dtype dt);
/* Per-rank counts (counts[r] elements in block r, blocks one after another in rank order). */
typedef ct_status (*ct__reducescatterv_fn)(ct_comm *c, const void *send, void *recv,
                                           const size_t *counts, ct_dtype dt, ct_op op);
typedef ct_status (*ct__allgatherv_fn)(ct_comm *c, const void *send, void *recv,
                                       const size_t *counts, ct_dtype dt);
typedef ct_status (*ct__bcast_fn)(ct_comm *c, void *buf, size_t count, ct_dtype dt, int root);
typedef ct_status (*ct__barrier_fn)(ct_comm *c);

ct_status ct__allreduce_naive(ct_comm *, const void *, void *, size_t, ct_dtype, ct_op);
ct_status ct__allreduce_tree(ct_comm *, const void *, void *, size_t, ct_dtype, ct_op);
ct_status ct__allreduce_ring(ct_comm *, const void *, void *, size_t, ct_dtype, ct_op);
ct_status ct__allreduce_recdbl(ct_comm *, const void *, void *, size_t, ct_dtype, ct_op);
ct_status ct__allreduce_rabenseifner(ct_comm *, const void *, void *, size_t, ct_dtype, ct_op);
ct_status ct__allreduce_hier(ct_comm *, const void *, void *, size_t, ct_dtype, ct_op);
ct_status ct__allreduce_mpi(ct_comm *, const void *, void *, size_t, ct_dtype, ct_op);
ct_status ct__allreduce_mpi_nb(ct_comm *, const void *, void *, size_t, ct_dtype, ct_op);
ct_status ct__allreduce_shm(ct_comm *, const void *, void *, size_t, ct_dtype, ct_op);
ct_status ct__reducescatter_ring(ct_comm *, const void *, void *, size_t, ct_dtype, ct_op);
ct_status ct__reducescatter_rechalving(ct_comm *, const void *, void *, size_t, ct_dtype, ct_op);
ct_status ct__reducescatter_mpi(ct_comm *, const void *, void *, size_t, ct_dtype, ct_op);
ct_status ct__allgather_ring(ct_comm *, const void *, void *, size_t, ct_dtype);
ct_status ct__allgather_recdbl(ct_comm *, const void *, void *, size_t, ct_dtype);
ct_status ct__allgather_mpi(ct_comm *, const void *, void *, size_t, ct_dtype);
ct_status ct__alltoall_pairwise(ct_comm *, const void *, void *, size_t, ct_dtype);
ct_status ct__alltoall_mpi(ct_comm *, const void *, void *, size_t, ct_dtype);
ct_status ct__alltoallv_pairwise(ct_comm *, const void *, const size_t *, const size_t *, void *,
                                 const size_t *, const size_t *, ct_dtype);
ct_status ct__alltoallv_mpi(ct_comm *, const void *, const size_t *, const size_t *, void *,
                            const size_t *, const size_t *, ct_dtype);
ct_status ct__reducescatterv_ring(ct_comm *, const void *, void *, const size_t *, ct_dtype, ct_op);
ct_status ct__reducescatterv_rechalving(ct_comm *, const void *, void *, const size_t *, ct_dtype,
                                        ct_op);
ct_status ct__reducescatterv_mpi(ct_comm *, const void *, void *, const size_t *, ct_dtype, ct_op);
ct_status ct__allgatherv_ring(ct_comm *, const void *, void *, const size_t *, ct_dtype);
ct_status ct__allgatherv_recdbl(ct_comm *, const void *, void *, const size_t *, ct_dtype);
ct_status ct__allgatherv_mpi(ct_comm *, const void *, void *, const size_t *, ct_dtype);
ct_status ct__bcast_binomial(ct_comm *, void *, size_t, ct_dtype, int);
ct_status ct__bcast_mpi(ct_comm *, void *, size_t, ct_dtype, int);
ct_status ct__barrier_dissemination(ct_comm *);
ct_status ct__barrier_mpi(ct_comm *);

/* Shared pieces of the recursive algorithms (rec_common.c). Non-power-of-two groups fold: with
 * p2 = largest power of two <= n and r = n - p2, ranks below 2r pair up (even gives its data to
 * odd and sits out); core rank i is old rank 2i+1 (i < r) or i + r. */
typedef struct ct__fold {
    int n, p2, r;
    int core;   /* my core rank, or -1 if I sit out */
    int buddy;  /* the rank I pair with when folding (-1 if none) */
} ct__fold;
void ct__fold_init(ct__fold *f, int n, int rank);
int ct__fold_old(const ct__fold *f, int core); /* old rank of a core rank */
/* First block (of n blocks, one per old rank) served by core rank i; i = p2 gives n. */
int ct__fold_block(const ct__fold *f, int core);
/* Recursive halving reduce-scatter among core ranks over `buf`, whose core region i spans
 * elements [off[i], off[i+1]); afterwards region `core` holds the reduction. */
ct_status ct__rec_halving(ct_comm *c, const ct__fold *f, void *buf, const size_t *off,
                          ct_dtype dt, ct_op op);
/* Recursive doubling all-gather of the regions among core ranks. */
ct_status ct__rec_doubling_gather(ct_comm *c, const ct__fold *f, void *buf, const size_t *off,
                                  size_t esize);

/* The MPI datatype / op. */
MPI_Datatype ct__mpi_type(ct_dtype dt);
MPI_Op ct__mpi_op(ct_op op);
ct_status ct__mpi_err(ct_comm *c, int code, const char *what);
/* The same for a call with group rank `peer`: names the call in progress, the peer, its MPI rank
   and host (a peer that died: MPI reports it here when it does not end the job itself). */
ct_status ct__mpi_err_peer(ct_comm *c, int code, const char *what, int peer);
ct_status ct__need_mpi_comm(ct_comm *c, const char *algo);

/* ---------------------------------------------------------------- registry and selector */

typedef struct ct__algo {
    ct_coll coll;
    const char *name;
    void (*fn)(void); /* cast to the collective's signature */
    unsigned flags;
    const char *cost; /* one line: alpha-beta-gamma cost */
} ct__algo;
#define CT__ALGO_ONE_PER_RANK 1u /* needs one worker per rank (mpi) */
#define CT__ALGO_ONE_NODE 2u     /* needs every member on one node (shm) */

extern const ct__algo ct__algos[];
extern const int ct__nalgos;
const ct__algo *ct__algo_find(ct_coll coll, const char *name);
/* Resolve `name` (NULL = override or selector) to an algorithm usable on c; errors on c. */
ct_status ct__algo_resolve(ct_comm *c, ct_coll coll, const char *name, size_t bytes,
                           const ct__algo **out);
void ct__select_default(ct_topo *t);
int ct__algo_index(const ct__algo *a);

#endif /* CT_PARALLEL_IMPL_H */
