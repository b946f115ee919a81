/* exec_impl.h - what the executor's files share (not installed): the executor's struct, the
 * pipeline staging's, and the functions one file gives another. step.c runs a step, exec.c
 * creates and reports, transfer.c moves activations between stages, ranges.c plans the
 * gradient ranges, norm.c assembles the step's loss, global norm and routing statistics,
 * exec_forward.c runs a forward alone. */
#ifndef CT_EXEC_IMPL_H
#define CT_EXEC_IMPL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_step.h"
#include "engine_impl.h"

typedef struct slot_use {
    int mb, chunk; /* -1: free */
} slot_use;

/* One pipeline message's host staging. */
enum { X_FREE, X_READING, X_SENT, X_WRITING };
typedef struct xfer {
    float *p;
    size_t cap;    /* floats */
    int state;     /* X_*: READING: device read enqueued, not posted; SENT: isend posted;
                      WRITING: received, the device write not yet complete */
    ct_event *ev;  /* READING, WRITING */
    ct_request *req; /* SENT */
    int peer;
    size_t bytes;
    long seq;      /* order of the sends (posted in this order) */
} xfer;

struct ct_exec {
    ct_model *m;
    ct_params *P;
    ct_device *dev;
    ct_grid *grid;
    ct_comm *world, *dp, *pp, *emb;
    ct_comm *tp;  /* the grid's TP group (the model's collectives; the logits gather) */
    ct_comm *tpg; /* a second handle on it for the gradient thread (sequence parallelism) */
    ct_comm *ep, *edp; /* experts: the EP group (the model's all-to-alls) and the workers holding
                          the same experts (their gradients' reduction, their ZeRO shards) */
    int epsize, experts;
    int32_t *moe_counts; /* the last step's [routed (L E) | kept (L E) | rows per worker (W)] */
    int stage, nstages, dpsize, nchunks; /* nchunks: model chunks held (v) */
    int tpsize;
    ct_grad_range *ranges;
    int nranges;
    size_t norm_lo; /* the stage's norm covers flat [norm_lo, local): the last stage leaves out
                       its copy of the tied wte (the first stage counts it) */
    ct_grads *g; /* NULL: nothing to reduce (one worker) */
    ct_zero *z;
    ct_optim *o;
    ct_trace *tr;
    slot_use *slots;
    int nslots;
    double *losses; /* per micro-batch of the running step */
    int nlosses;
    xfer *xf;       /* pipeline staging, one per message in flight */
    int nxf;
    long xseq;
    uint64_t pp_bytes; /* every pipeline send's bytes since creation (transfer.c) */
    int timeline;   /* record the executed timeline (device waited for after each action) */
    int failed;     /* a step failed: posted sends may never complete */
    double *tl_dur; /* the last recorded step: each action's duration (ms) */
    int tl_n, tl_cap;
    double tl_last_compute, tl_last_makespan;
    ct_exec_timeline tl;
    ct_exec_times times;
    uint64_t bytes0[6];        /* ct_comm_bytes per group (dp, tp, ep, edp, emb; pp sent) at step start */
    ct_exec_bytes bytes_last;  /* the last step's */
    int poison_t; /* test hook (ct_engine_step_test.h): the step whose backward gets an
                     infinite loss scale */
    ct_err err;
};

static inline int multi(const ct_comm *c) { return c && ct_comm_size(c) > 1; }
/* The local chunk index of model chunk c (chunk c lives on stage c % N as local c / N). */
static inline int local_chunk(const ct_exec *x, int c) {
    return c / (x->nstages ? x->nstages : 1);
}
static inline int last_chunk(const ct_exec *x, const ct_schedule *s, int c) {
    (void)x;
    return c == s->stages * (s->virt < 1 ? 1 : s->virt) - 1;
}
static inline ct_status fail_model(ct_exec *x, ct_status st) {
    if (st != CT_OK) CT_ERR(&x->err, st, "%s", ct_model_errmsg(x->m));
    return st;
}
static inline ct_status dev_err(ct_exec *x, ct_status st) {
    return CT_ERR(&x->err, st, "%s", ct_device_errmsg(x->dev));
}

/* ---- step.c: slots and one chunk's forward (also exec_forward.c's) */
void ct__exec_slots_free(ct_exec *x);
ct_status ct__exec_forward_chunk(ct_exec *x, const ct_schedule *s, int slot, int chunk,
                                 const int *tokens, const int *targets, int rows, int T,
                                 double *loss);

/* ---- transfer.c: pipeline transfers through host staging (the comment there says how) */
/* Progress without blocking (block = 0), or post every send reached (block = 1). */
ct_status ct__xfer_pump(ct_exec *x, int block);
/* Every transfer complete. */
ct_status ct__xfer_drain(ct_exec *x);
ct_status ct__xfer_send(ct_exec *x, ct_view v, size_t n, int peer);
ct_status ct__xfer_recv(ct_exec *x, ct_view v, size_t n, int peer, double *arrived);
/* A SEND_/RECV_ action of the schedule; *arrived: when a received message was in. */
ct_status ct__exec_transfer(ct_exec *x, const ct_action *a, int slot, int rows, int T,
                            double *arrived);
/* Staging freed at ct_exec_free. */
void ct__xfer_free(ct_exec *x);

/* ---- norm.c: the step's reductions to one value on every worker */
/* The global gradient norm's square from this worker's reduced sumsq (the gradient reducer's,
 * 0 without one): *given, and *have = 1 when it is known here (else the optimizer computes it
 * from the local gradients). Collective over the world or the pipeline where it must be. */
ct_status ct__exec_global_norm(ct_exec *x, double sumsq, float *given, int *have);
/* The step's loss: the mean over M micro-batches, over DP; the same on every worker. */
ct_status ct__exec_step_loss(ct_exec *x, int M, double *out);
/* A mixture of experts' routing statistics over the step (collective over the world). */
ct_status ct__exec_moe_stats(ct_exec *x, int M, ct_step_result *out);

#endif /* CT_EXEC_IMPL_H */
