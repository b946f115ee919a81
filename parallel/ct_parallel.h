/* ct_parallel.h - workers (MPI ranks x OpenMP device threads), communicators and collectives.
 *
 * A worker is one device driven by one OpenMP thread inside one MPI rank. A ct_topo is made once
 * per process; each worker thread then takes its own ct_comm handle on the world group and splits
 * it into the groups it needs (DP, TP, PP, EP). Peers may be threads of this process (shared host
 * memory, no MPI), other ranks (MPI, MPI_THREAD_MULTIPLE) or a mix; results are the same, and
 * every worker ends an all-reduce with bitwise the same data.
 *
 *     ct_topo *topo = NULL; ct_err err = {0};
 *     if (ct_topo_create(&topo, &argc, &argv, 2, &err)) { fprintf(stderr, "%s\n", err.msg); ... }
 *     #pragma omp parallel num_threads(ct_topo_devices_per_rank(topo))
 *     {
 *         ct_comm *world = NULL, *dp = NULL;
 *         ct_comm_world(topo, omp_get_thread_num(), &world);
 *         ct_comm_split(world, ct_comm_rank(world) % 2, 0, &dp);      // collective over world
 *         float g[1000] = {...};
 *         if (ct_comm_allreduce(dp, g, g, 1000, CT_F32, CT_OP_AVG, NULL))   // NULL: selector
 *             fprintf(stderr, "%s\n", ct_comm_errmsg(dp));
 *         ct_comm_free(dp); ct_comm_free(world);
 *     }
 *     ct_topo_free(topo);   // finalizes MPI when ct_topo_create initialised it
 *
 * Programs and the engine take their groups from the grid (ct_grid_create, below), which splits
 * every axis once; the split above is the primitive it uses.
 *
 * Every collective takes an algorithm name (NULL = the selector's choice for this size and group;
 * "ring", "rabenseifner", "mpi", ... see ct_coll_algo_name) and is collective over the group.
 * In place: all-reduce send == recv; reduce-scatter send == recv (input n*count in recv, result in
 * its first count); all-gather send == recv + rank*count elements; all-to-all send == recv.
 * Check mode (on by default) exchanges a small header (collective, count, type, op, algorithm,
 * root, buffer kind) before each collective, so workers that disagree all get CT_ERR_MISMATCH
 * instead of a hang; ct_comm_set_check(c, 0) turns it off for speed (benchmarks do).
 */
#ifndef CT_PARALLEL_H
#define CT_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include "ct_cl.h"
#include "ct_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_topo ct_topo;
typedef struct ct_comm ct_comm;

typedef enum ct_dtype { CT_F32 = 0, CT_I32 = 1, CT_DTYPE__COUNT } ct_dtype;
typedef enum ct_op { CT_OP_SUM = 0, CT_OP_AVG = 1, CT_OP_MAX = 2, CT_OP__COUNT } ct_op;
typedef enum ct_coll {
    CT_COLL_ALLREDUCE = 0,
    CT_COLL_REDUCESCATTER,
    CT_COLL_ALLGATHER,
    CT_COLL_ALLTOALL,
    CT_COLL_ALLTOALLV,
    CT_COLL_BCAST,
    CT_COLL_BARRIER,
    CT_COLL_REDUCESCATTERV, /* per-rank counts */
    CT_COLL_ALLGATHERV,
    CT_COLL__COUNT
} ct_coll;

#define CT_COMM_UNDEFINED (-1) /* split colour: this worker joins no group (out = NULL) */

const char *ct_dtype_str(ct_dtype t); /* "float", "int32" */
size_t ct_dtype_size(ct_dtype t);
const char *ct_op_str(ct_op op);     /* "sum", "avg", "max" */
const char *ct_coll_str(ct_coll c);  /* "allreduce", "reducescatter", "reducescatterv", ... */
ct_status ct_coll_parse(const char *s, ct_coll *out);

/* ---------------------------------------------------------------- layouts */

/* How the W workers are arranged: dp x tp x pp = W, experts spread over ep consecutive dp ranks
 * (ep divides dp; 0 is read as 1: a dense model), and the ZeRO stage over the DP group. A single
 * device is {1, 1, 1, 0, 1}. */
typedef struct ct_layout {
    int dp, tp, pp; /* data, tensor, pipeline parallel degrees */
    int zero;       /* ZeRO stage 0..3 */
    int ep;         /* expert-parallel degree (divides dp); 0 or 1: none */
} ct_layout;

/* This worker's place in the layout. */
typedef struct ct_coords {
    int dp_rank, tp_rank, pp_rank;
    int ep_rank; /* dp_rank % ep */
} ct_coords;

/* ---------------------------------------------------------------- topology */

/* Initialise MPI with MPI_THREAD_MULTIPLE (or accept a program's earlier MPI_Init_thread, which
 * must have provided MPI_THREAD_MULTIPLE), and lay out ranks x devices_per_rank workers. A lower
 * thread level is CT_ERR_UNSUPPORTED with a message; programs print it and exit/MPI_Abort.
 * argc/argv may be NULL. The only place of cltrain that names MPI_COMM_WORLD. */
ct_status ct_topo_create(ct_topo **out, int *argc, char ***argv, int devices_per_rank, ct_err *err);
/* Frees the topology; calls MPI_Finalize only if ct_topo_create called MPI_Init_thread. All
 * comms must be freed first. NULL is a no-op. */
void ct_topo_free(ct_topo *t);

int ct_topo_rank(const ct_topo *t);             /* MPI rank of this process */
int ct_topo_nranks(const ct_topo *t);
int ct_topo_devices_per_rank(const ct_topo *t); /* D: worker threads per rank */
int ct_topo_world_size(const ct_topo *t);       /* W = nranks * D */
int ct_topo_node(const ct_topo *t);             /* node index, 0..nnodes-1 */
int ct_topo_nnodes(const ct_topo *t);
int ct_topo_local_rank(const ct_topo *t);       /* rank within its node */
int ct_topo_local_nranks(const ct_topo *t);     /* ranks on this node */
/* The device a worker thread should open among the node's devices: local_rank * D + thread. */
int ct_topo_device_index(const ct_topo *t, int thread);
/* "MPICH Version: 4.0.2 ..." first line of MPI_Get_library_version. */
const char *ct_topo_mpi_version(const ct_topo *t);
/* This process's host name (MPI_Get_processor_name, read once at create). */
const char *ct_topo_host(const ct_topo *t);
/* Any rank's node index (0..nnodes-1; -1 outside 0..nranks-1) and host name ("?" outside). A
 * node is what MPI_Comm_split_type(SHARED) groups: the ranks of one host. */
int ct_topo_rank_node(const ct_topo *t, int rank);
const char *ct_topo_rank_host(const ct_topo *t, int rank);

/* Launchers. How many ranks the launcher says it started, read before MPI starts (a program
 * decides from it whether to start MPI at all): PMI_SIZE (Hydra's mpiexec, srun --mpi=pmi2),
 * else SLURM_STEP_NUM_TASKS or SLURM_NTASKS (srun, any MPI plugin: PMIx sets no PMI_SIZE), else
 * OMPI_COMM_WORLD_SIZE; 1 when none says more. The world itself is MPI's (ct_topo_nranks after
 * ct_topo_create), and each worker's device comes from MPI's node-local rank
 * (ct_topo_device_index), so any launcher that MPI understands places them alike. */
int ct_launcher_ranks_env(void);
/* Under srun (SLURM_STEP_ID set, no PMI_SIZE): CT_ERR_ARG with a message when the step has
 * several tasks but MPI sees a world of one (tasks started as singletons: srun without a PMI
 * this MPI speaks). Under Hydra inside an allocation the step's tasks are its proxies: no check. */
ct_status ct_topo_launcher_check(const ct_topo *t, ct_err *err);

/* Default check mode for comms created after the call (1 = on, the default). */
void ct_topo_set_check(ct_topo *t, int on);
/* Every wait of parallel/ (a message from a peer, a peer taking ours, a barrier of the threads
 * of a process) gives up after `seconds` (<= 0: never) with CT_ERR_TIMEOUT, naming the
 * collective and the peers not heard from, and marks the group broken (later calls on it are
 * CT_ERR_STATE). A hang (a peer that died, or one waiting in another collective: counts that
 * differ with check mode off) becomes an error. The waits are per message, so a long collective
 * is fine; what must stay below it is how long one worker may keep the others waiting (a
 * leader writing a checkpoint, sampling, compiling kernels on a cold cache). Not bounded: the
 * "mpi" algorithms (MPI's own blocking collectives, baselines the selector never picks) and MPI
 * calls that create communicators or windows. Set before workers start. */
#define CT_COMM_TIMEOUT_DEFAULT 1800.0 /* seconds: generous; programs take CT_COMM_TIMEOUT */
void ct_topo_set_timeout(ct_topo *t, double seconds);
double ct_topo_timeout(const ct_topo *t);
/* The CT_COMM_TIMEOUT environment variable, seconds (the one place it is read: programs call
 * this and pass the value to ct_topo_set_timeout). Unset: *seconds is left as it is. A value
 * that is not a number >= 0 is CT_ERR_ARG with a message (0 = never). */
ct_status ct_comm_timeout_env(double *seconds, ct_err *err);
/* Algorithm overrides, "allreduce=ring,allgather=recdbl" (programs read CT_COLL_ALGO or a flag and
 * pass it here: the one place). Unknown collective or algorithm names are CT_ERR_ARG. */
ct_status ct_topo_set_override(ct_topo *t, const char *spec, ct_err *err);
/* Replace the selector table by a file (format: see parallel/select.c and docs). */
ct_status ct_topo_load_select_table(ct_topo *t, const char *path, ct_err *err);
/* Write the table in force (so a benchmark run can regenerate it). */
ct_status ct_topo_write_select_table(const ct_topo *t, const char *path, ct_err *err);
/* Set the table from text (same format as the file). */
ct_status ct_topo_set_select_table(ct_topo *t, const char *text, ct_err *err);

/* ---------------------------------------------------------------- communicators */

/* This worker's handle on the world group (W workers, rank = worker id = rank*D + thread).
 * Each of the D threads calls it with its own thread index 0..D-1. */
ct_status ct_comm_world(ct_topo *t, int thread, ct_comm **out);
/* Collective over parent's workers: workers with the same colour form a group ordered by
 * (key, parent rank). colour CT_COMM_UNDEFINED gives *out = NULL. Other negative colours are a
 * CT_ERR_ARG on every worker (each sees every worker's colour). Sibling groups that each split
 * themselves with the same colour get the same id: within one process they stay apart, but a
 * group with one worker per rank creates its MPI communicator with a tag from (id, colour), so
 * such groups spanning the same ranks would share it; split them from a common parent (world)
 * with distinct colours instead (the executor's second handles do). */
ct_status ct_comm_split(ct_comm *parent, int color, int key, ct_comm **out);
void ct_comm_free(ct_comm *c);

int ct_comm_rank(const ct_comm *c);
int ct_comm_size(const ct_comm *c);
int ct_comm_world_rank(const ct_comm *c, int rank); /* worker id of a member */
/* Members of this group living in this process (threads sharing memory), and processes spanned. */
int ct_comm_local_size(const ct_comm *c);
int ct_comm_nprocs(const ct_comm *c);
/* Hosts (nodes: ct_topo_rank_node) the group's members are on. */
int ct_comm_nhosts(const ct_comm *c);
const char *ct_comm_errmsg(const ct_comm *c);
ct_err *ct_comm_err(ct_comm *c);
void ct_comm_set_check(ct_comm *c, int on);
ct_topo *ct_comm_topo(ct_comm *c);

/* Point-to-point between members (blocking; sizes must match exactly). */
ct_status ct_comm_send(ct_comm *c, int dst, const void *buf, size_t bytes);
ct_status ct_comm_recv(ct_comm *c, int src, void *buf, size_t bytes);
ct_status ct_comm_sendrecv(ct_comm *c, int dst, const void *sbuf, size_t sbytes, int src,
                           void *rbuf, size_t rbytes);

/* Non-blocking point-to-point: a channel of its own per (group, sender, receiver), apart from the
 * blocking calls above and the collectives (it never matches them). Messages on a channel are
 * received in the order they were sent, any number in flight: the k-th ct_comm_irecv from a
 * peer takes the k-th ct_comm_isend of that peer to this worker, whatever order the requests are
 * completed in. The buffer of a send must stay untouched, and that of a receive unread, until the
 * request completes. Between threads of one process the receiver copies straight from the
 * sender's buffer when it completes its receive (so a send completes once its receiver has
 * called ct_comm_test or ct_comm_wait on the matching receive); between processes each segment is
 * an MPI_Isend / MPI_Irecv. Sizes must match exactly (CT_ERR_MISMATCH on both sides otherwise).
 * Every request is completed by ct_comm_wait (which frees it) before its comm is freed.
 *
 *     ct_request *s = NULL, *r = NULL;
 *     ct_comm_isend(pp, next, act, bytes, &s);      // returns at once
 *     ct_comm_irecv(pp, prev, in, bytes, &r);
 *     ... compute ...
 *     ct_comm_wait(r);                                // `in` holds the message
 *     ct_comm_wait(s);                                // `act` may be reused
 * Errors are on ct_comm_errmsg of the request's comm. */
typedef struct ct_request ct_request;
ct_status ct_comm_isend(ct_comm *c, int dst, const void *buf, size_t bytes, ct_request **req);
ct_status ct_comm_irecv(ct_comm *c, int src, void *buf, size_t bytes, ct_request **req);
/* Progress without blocking: *done = 1 once the request has completed (it still needs
 * ct_comm_wait, which then returns at once). A completed receive has copied its message. */
ct_status ct_comm_test(ct_request *req, int *done);
/* Block until the request completes, then free it (NULL: a no-op returning CT_OK). */
ct_status ct_comm_wait(ct_request *req);

/* ---------------------------------------------------------------- collectives (host memory) */

/* recv[i] = op over workers of send[i]; count elements. avg = sum / size (int32: truncated). */
ct_status ct_comm_allreduce(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt,
                            ct_op op, const char *algo);
/* send: size*count elements; recv: count elements = this rank's block of the reduction. */
ct_status ct_comm_reduce_scatter(ct_comm *c, const void *send, void *recv, size_t count,
                                 ct_dtype dt, ct_op op, const char *algo);
/* send: count elements; recv: size*count elements, block r from rank r. */
ct_status ct_comm_allgather(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt,
                            const char *algo);
/* send/recv: size*count elements; block j of send goes to rank j, block j of recv came from j. */
ct_status ct_comm_alltoall(ct_comm *c, const void *send, void *recv, size_t count, ct_dtype dt,
                           const char *algo);
/* Counts and displacements in elements, one per rank (MPI_Alltoallv's meaning). */
ct_status ct_comm_alltoallv(ct_comm *c, const void *send, const size_t *scounts,
                            const size_t *sdispls, void *recv, const size_t *rcounts,
                            const size_t *rdispls, ct_dtype dt, const char *algo);
ct_status ct_comm_bcast(ct_comm *c, void *buf, size_t count, ct_dtype dt, int root,
                        const char *algo);
ct_status ct_comm_barrier(ct_comm *c, const char *algo);
/* Per-rank counts, one per rank (any may be 0), the same on every worker; block r is counts[r]
 * elements and the blocks lie one after another in rank order (displacements: the running sum).
 * Reduce-scatter (MPI_Reduce_scatter's meaning): send holds every block, recv gets this rank's
 * block of the reduction (counts[rank] elements; recv may point into send, at its own block).
 * All-gather (MPI_Allgatherv's meaning, displacements as above): send holds counts[rank]
 * elements, recv every block, block r from rank r (in place: send == recv + this rank's
 * displacement). */
ct_status ct_comm_reduce_scatterv(ct_comm *c, const void *send, void *recv, const size_t *counts,
                                  ct_dtype dt, ct_op op, const char *algo);
ct_status ct_comm_allgatherv(ct_comm *c, const void *send, void *recv, const size_t *counts,
                             ct_dtype dt, const char *algo);

/* Bytes this handle's collectives have moved for this worker since it was made: the beta term
 * of each collective's bandwidth-optimal cost, whatever algorithm ran (all-reduce 2n(N-1)/N
 * elements; reduce-scatter(v) and all-gather(v) the whole buffer less this rank's block;
 * all-to-all(v) what this worker sends to the others; bcast n; N the group size), so a caller
 * counts the traffic a design needs, not an algorithm's overheads. Host-memory collectives
 * only: check-mode headers, splits, point-to-point messages and the *_buf forms are not
 * counted. */
uint64_t ct_comm_bytes(const ct_comm *c);

/* ---------------------------------------------------------------- collectives (device buffers) */

/* The same collectives on OpenCL buffers (offset 0). Data is staged through mapped host memory
 * (all-reduce in chunks of ct_comm_stage_chunk bytes); send == recv means in place. */
ct_status ct_comm_allreduce_buf(ct_comm *c, ct_buffer *send, ct_buffer *recv, size_t count,
                                ct_dtype dt, ct_op op, const char *algo);
ct_status ct_comm_reduce_scatter_buf(ct_comm *c, ct_buffer *send, ct_buffer *recv, size_t count,
                                     ct_dtype dt, ct_op op, const char *algo);
ct_status ct_comm_allgather_buf(ct_comm *c, ct_buffer *send, ct_buffer *recv, size_t count,
                                ct_dtype dt, const char *algo);
ct_status ct_comm_alltoall_buf(ct_comm *c, ct_buffer *send, ct_buffer *recv, size_t count,
                               ct_dtype dt, const char *algo);
ct_status ct_comm_bcast_buf(ct_comm *c, ct_buffer *buf, size_t count, ct_dtype dt, int root,
                            const char *algo);
#define CT_COMM_STAGE_CHUNK ((size_t)8 << 20) /* bytes per staged all-reduce chunk */

/* ---------------------------------------------------------------- algorithms and selection */

/* Names of the registered algorithms of a collective, i = 0.. until NULL. */
const char *ct_coll_algo_name(ct_coll coll, int i);
/* Why `algo` cannot run on this group ("" if it can): e.g. "mpi" with several workers per rank. */
const char *ct_comm_algo_restriction(const ct_comm *c, ct_coll coll, const char *algo);
/* The algorithm the selector (after overrides) picks for `bytes` on this group. */
const char *ct_comm_algo_select(const ct_comm *c, ct_coll coll, size_t bytes);

/* ---------------------------------------------------------------- the grid */

/* The layout laid over the workers, and one group per axis, split once. Axis order, fastest first:
 * tp, dp, pp (Megatron's): worker w = (pp_rank * dp + dp_rank) * tp + tp_rank, so a TP group is
 * consecutive workers (one process or node where possible) and pipeline neighbours may sit on
 * other nodes. EP groups are ep consecutive dp ranks; the expert-data-parallel group holds the
 * dp/ep workers with the same experts (same dp_rank % ep). Every group's rank is this worker's
 * coordinate along that axis.
 *
 *     ct_layout lay = {.dp = 2, .tp = 2, .pp = 2, .zero = 1, .ep = 1};
 *     ct_grid *g = NULL; ct_err err = {0};
 *     if (ct_grid_create(&g, world, &lay, &err)) { ... err.msg names the numbers ... }
 *     ct_comm *next = ct_grid_pp(g);   // send to rank pp_rank + 1 of this group
 *     ...
 *     ct_grid_free(g);                 // before ct_comm_free(world)
 */
typedef struct ct_grid ct_grid;

/* Pure: CT_ERR_ARG with the numbers named when `lay` cannot run over W workers (a degree < 1,
 * ep < 0 or not dividing dp, zero outside 0..3, dp x tp x pp != W). */
ct_status ct_layout_check(const ct_layout *lay, int W, ct_err *err);
/* Pure: the worker at coordinates c, and the coordinates of worker w (ep_rank = dp_rank % ep). */
int ct_layout_worker(const ct_layout *lay, const ct_coords *c);
ct_coords ct_layout_coords(const ct_layout *lay, int w);

/* Collective over `world` (this worker's handle, usually from ct_comm_world; the grid is laid over
 * its ranks). Every worker passes its layout; workers that disagree all get CT_ERR_MISMATCH, a
 * layout that cannot run gives CT_ERR_ARG on every worker (nothing hangs). Then every group is split
 * once (6 splits of world, in a fixed order). The grid keeps `world` (not owned). */
ct_status ct_grid_create(ct_grid **out, ct_comm *world, const ct_layout *lay, ct_err *err);
/* Frees the groups (not world). NULL is a no-op. */
void ct_grid_free(ct_grid *g);

const ct_layout *ct_grid_layout(const ct_grid *g); /* as passed, ep read as >= 1 */
const ct_coords *ct_grid_coords(const ct_grid *g);
ct_comm *ct_grid_world(ct_grid *g);
ct_comm *ct_grid_tp(ct_grid *g);  /* same (dp, pp); rank = tp_rank */
ct_comm *ct_grid_dp(ct_grid *g);  /* same (tp, pp); rank = dp_rank */
ct_comm *ct_grid_pp(ct_grid *g);  /* same (dp, tp); rank = pp_rank: neighbours are rank -+ 1 */
ct_comm *ct_grid_ep(ct_grid *g);  /* same (tp, pp, dp_rank / ep); rank = ep_rank */
ct_comm *ct_grid_edp(ct_grid *g); /* same (tp, pp, dp_rank % ep); size dp / ep, rank dp_rank / ep */
/* The tied-embedding group: pp == 1: this worker alone; pp > 1: the first and the last stage with
 * this (dp, tp), first stage rank 0; NULL on middle stages. */
ct_comm *ct_grid_emb(ct_grid *g);

/* Collective over world: one line per worker,
 *   "worker W: dp D tp T pp P ep E | rank R thread H | host NAME | DEVICE\n"
 * in worker order, gathered to every worker (lines cut at 255 characters); when the workers span
 * several hosts (ct_topo_nnodes > 1), then "hosts: N: NAME (workers a-b,...); ...\n" and, with
 * tp > 1, "TP groups: each inside one host\n" or a line starting "warning: K of M TP groups
 * span hosts" naming the first. `device` is this worker's device name (NULL: "-"). *out is
 * malloc'd; the caller frees it (worker 0 prints). Errors are on
 * ct_comm_errmsg(ct_grid_world(g)). */
ct_status ct_grid_describe(ct_grid *g, const char *device, char **out);
/* The most hosts any one TP group spans (1: every TP group inside a host). The axis order puts
 * a TP group on tp consecutive workers, so with each host's ranks consecutive (block placement)
 * TP stays inside hosts whenever tp divides the workers per host. */
int ct_grid_tp_hosts(const ct_grid *g);

/* ---------------------------------------------------------------- pipeline schedules */

/* A schedule is data: for each pipeline stage, the ordered list of actions it runs in one optimizer
 * step. Pure functions (no MPI, no devices): generators, a validator and a simulator.
 *
 *     ct_schedule *s = NULL; ct_sched_sim sim = {0}; ct_err err = {0};
 *     if (ct_sched_make(CT_SCHED_1F1B, 4, 8, 1, &s, &err)) { ... err.msg ... }
 *     ct_sched_costs cost = ct_sched_costs_unit();          // F 1, B 2 (B_in 1 + B_w 1), comm 0
 *     if (!ct_sched_simulate(s, &cost, 0, &sim, &err))
 *         printf("bubble %.3f, stage 0 keeps %d micro-batches\n", sim.bubble, sim.peak_live[0]);
 *     for (int i = 0; i < s->n[my_stage]; i++) run(&s->list[my_stage][i]);   // the executor
 *     ct_sched_sim_free(&sim); ct_sched_free(s);
 *
 * Model chunks: the model's layers are cut into v*N consecutive chunks; chunk c lives on stage
 * c % N as that stage's local chunk c / N (v = 1: chunk = stage). Micro-batches are 0..m-1.
 * Communication (only with N > 1): RECV_ACT(mb, c) right before FWD(mb, c) for c > 0 (the input of
 * chunk c, from chunk c-1's stage); SEND_ACT(mb, c) right after FWD(mb, c) for c < vN-1 (its
 * output, to chunk c+1's stage); RECV_GRAD(mb, c) right before the backward of (mb, c) for
 * c < vN-1 (the gradient of chunk c's output, from chunk c+1's stage); SEND_GRAD(mb, c) right after
 * it for c > 0 (the gradient of chunk c's input, to chunk c-1's stage). So SEND_ACT(mb, c) meets
 * RECV_ACT(mb, c+1) and SEND_GRAD(mb, c) meets RECV_GRAD(mb, c-1). Sends are posted and complete
 * later (buffered); receives block. Messages from one stage to another arrive in the order sent,
 * activations and gradients alike (ct_comm_send/recv carry no tag), so one pipeline group serves.
 * Every list ends with GRAD_SYNC (this stage's gradients are final: reduce them over the
 * data-parallel group), OPT_STEP. */
typedef enum ct_act_kind {
    CT_ACT_FWD,        /* forward of (mb, chunk) */
    CT_ACT_BWD,        /* backward: input and weight gradients */
    CT_ACT_BWD_INPUT,  /* zero-bubble halves: input gradient (on the critical path) ... */
    CT_ACT_BWD_WEIGHT, /* ... and weight gradient (deferrable; frees the activations) */
    CT_ACT_SEND_ACT,
    CT_ACT_RECV_ACT,
    CT_ACT_SEND_GRAD,
    CT_ACT_RECV_GRAD,
    CT_ACT_GRAD_SYNC,  /* mb, chunk -1 */
    CT_ACT_OPT_STEP,   /* mb, chunk -1 */
    CT_ACT__COUNT
} ct_act_kind;

typedef struct ct_action {
    ct_act_kind kind;
    int mb;    /* micro-batch 0..m-1 */
    int chunk; /* model chunk 0..v*N-1, on stage chunk % N */
} ct_action;

typedef enum ct_sched_kind {
    CT_SCHED_TRIVIAL,     /* N = 1: F, B per micro-batch (gradient accumulation), sync, step */
    CT_SCHED_GPIPE,       /* all forwards, then all backwards in the same micro-batch order */
    CT_SCHED_1F1B,        /* PipeDream-Flush: min(N-s-1, m) warm-up forwards, then one forward one
                             backward; at most min(N-s, m) micro-batches alive on stage s */
    CT_SCHED_INTERLEAVED, /* Narayanan et al. 2021 (Megatron's order): v chunks per stage,
                             m a multiple of N */
    CT_SCHED_ZB1,         /* ZB-H1 (Qi et al. 2023): backward split into BWD_INPUT and
                             BWD_WEIGHT, W deferred into the cool-down; stage s keeps at most
                             N-s micro-batches before B (as 1F1B) and N before W (1F1B's peak) */
    CT_SCHED__COUNT
} ct_sched_kind;

typedef struct ct_schedule {
    ct_sched_kind kind;
    int stages, micro, virt; /* N, m, v (v = 1 but for interleaved) */
    int *n;                  /* [N] actions of each stage */
    ct_action **list;        /* [N][n[s]]; each list its own malloc (tests edit them) */
} ct_schedule;

/* "gpipe", "1f1b", "interleaved", "zb1" (and "trivial"); CT_ERR_ARG naming the choices. */
ct_status ct_sched_parse(const char *name, ct_sched_kind *out, ct_err *err);
const char *ct_sched_name(ct_sched_kind k); /* "1f1b"; "?" when out of range */
const char *ct_act_name(int kind);          /* "RECV_ACT"; "?" when out of range */
/* "FWD(mb 3, chunk 2)" or "GRAD_SYNC" into buf (64 bytes always suffice); returns buf. */
char *ct_act_str(const ct_action *a, char *buf, size_t size);

/* The lists of one step for N stages, m micro-batches, v chunks per stage (interleaved only; 0 is
 * read as 1). Refused with CT_ERR_ARG and the reason: N, m or v < 1, trivial with N > 1, v > 1 on
 * a schedule without chunks, interleaved with m not a multiple of N. */
ct_status ct_sched_make(ct_sched_kind kind, int stages, int micro, int virt, ct_schedule **out,
                        ct_err *err);
void ct_sched_free(ct_schedule *s); /* NULL is a no-op */

/* CT_OK, or CT_ERR_ARG naming the first problem: the stage, the action index and the action.
 * Checks, in this order: every action well formed (kind, mb and chunk in range, the chunk on this
 * stage, a message that exists); per stage, each (mb, chunk) of the stage has one FWD and one
 * backward (BWD, or BWD_INPUT then BWD_WEIGHT), each needed send and receive once, in local order
 * (RECV_ACT < FWD < SEND_ACT; RECV_GRAD < backward < SEND_GRAD; FWD < backward), ending with
 * GRAD_SYNC, OPT_STEP; between two stages, receives in the order of the sends; no deadlock when
 * sends are buffered and receives block (the message names every waiting stage and what it waits
 * for). */
ct_status ct_sched_validate(const ct_schedule *s, ct_err *err);

/* Cost of each action of one chunk, in any time unit; comm: from a send's post to the matching
 * receive's earliest completion; send, recv: the time a send or (after its message is there) a
 * receive keeps its stage busy (staging the tensor through the host), which is not compute and
 * so counts as bubble. GRAD_SYNC and OPT_STEP cost 0 (they are outside the bubble). */
typedef struct ct_sched_costs {
    double fwd, bwd, bwd_input, bwd_weight, comm;
    double send, recv;
} ct_sched_costs;
ct_sched_costs ct_sched_costs_unit(void); /* fwd 1, bwd 2, bwd_input 1, bwd_weight 1, others 0 */

/* Each stage runs its list in order: a compute action starts when the previous action ends; a send
 * lasts `send` and is posted at its end; a receive ends `recv` after max(now, send post + comm).
 * Idle time (waiting, sends and receives) is the bubble:
 *   bubble = 1 - (sum over stages of compute time) / (N * makespan)
 * (the mean over stages of each one's idle fraction, stage_bubble[s]). At unit costs GPipe and
 * 1F1B give (N-1)/(m+N-1), interleaved (N-1)/(v*m+N-1), zb1 (N-1)/(3m+N-1) for m >= N.
 * peak_live[s] is the most (mb, chunk) activation sets alive at once on stage s: alive from FWD
 * until BWD or BWD_WEIGHT ends (what the activation arena must hold; independent of costs): 1F1B
 * min(N-s, m), GPipe m, zb1 min(N, m) on every stage (its later stages hold W's inputs longer). */
typedef struct ct_sched_sim {
    double makespan;
    double bubble;
    double *stage_bubble; /* [N] 1 - compute time of stage s / makespan */
    int *peak_live;       /* [N] */
    double **start, **end; /* [N][n[s]] when want_timeline, else NULL */
} ct_sched_sim;
/* Validates first (the same errors); *out is filled (free with ct_sched_sim_free). */
ct_status ct_sched_simulate(const ct_schedule *s, const ct_sched_costs *c, int want_timeline,
                            ct_sched_sim *out, ct_err *err);
/* The same with each stage's own costs, per_stage[s->stages] (stages differ: the first embeds,
 * the last computes the loss, a hand-made split gives them different layer counts; measured
 * costs); comm is the sending stage's. */
ct_status ct_sched_simulate_stages(const ct_schedule *s, const ct_sched_costs *per_stage,
                                   int want_timeline, ct_sched_sim *out, ct_err *err);
/* A replay: every action lasts its own dur[stage][i] (compute; a send its cost before the post;
 * a receive its cost after the message is there; GRAD_SYNC, OPT_STEP ignored), every message
 * `comm` in flight. Fed an executed timeline's durations, it separates what the schedule's
 * dependencies explain from how much the action costs varied. */
ct_status ct_sched_replay(const ct_schedule *s, const double *const *dur, double comm,
                          int want_timeline, ct_sched_sim *out, ct_err *err);
void ct_sched_sim_free(ct_sched_sim *r); /* frees the arrays, not r; zeroed r is fine */

#ifdef __cplusplus
}
#endif
#endif /* CT_PARALLEL_H */
