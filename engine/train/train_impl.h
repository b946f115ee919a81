/* train_impl.h - what the trainer's files share and nobody else sees: the run (ct_train_run:
 * what the workers of one process share, made by run.c) and the worker (ct_trainer, trainer.c),
 * and the internal functions that derive a run's decisions once (worker_plan.c) so that run.c,
 * trainer.c and the reports read them instead of deriving them again. */
#ifndef CT_TRAIN_IMPL_H
#define CT_TRAIN_IMPL_H

#include <pthread.h>
#include <stdio.h>

#include "ct_engine.h"

/* Where a run's model comes from (config.c): its shape, the origin's name (the checkpoint's
 * file, the model file, "random init"), and, when asked to keep them, what was read to learn it:
 * the whole checkpoint (--resume) or the model file's parameters (--init). */
typedef struct ct__train_source {
    ct_gpt_config cfg;
    char origin[1300];
    char ckpath[1300];
    ct_checkpoint ck;  /* --resume (kept): a gathered file whole; a sharded one's head only */
    ct_shard_set *shards; /* --resume of a sharded checkpoint (kept): its manifest, which each
                           * worker reads its runs through (ckpt.c) */
    float *init_params; /* --init (kept): init_n floats */
    size_t init_n;
} ct__train_source;

/* The one resolution of the model's shape: a checkpoint's (--resume), a model file's (--init) or
 * the shape flags', a shape flag given that contradicts a file being CT_ERR_ARG. keep: also keep
 * the checkpoint or the model file's parameters (ct__train_source_release frees them; also after
 * a failure). */
ct_status ct__train_source_load(const ct_train_params *p, int keep, ct__train_source *src,
                                ct_err *err);
void ct__train_source_release(ct__train_source *src);

/* A run's pipeline (worker_plan.c), the one derivation of it: the schedule (trivial with pp 1),
 * its micro-batches (the accumulation steps), v chunks per stage, and the blocks of each of the
 * pp x v model chunks (--pp-split, else balanced by FLOPs). */
typedef struct ct__train_pipe {
    ct_sched_kind kind;
    int accum;       /* micro-batches of a step: --total-batch / (--batch x --seq), or 1 */
    int v, nchunks;  /* chunks per stage; model chunks pp x v */
    int *split;      /* [nchunks] blocks of each chunk */
    int split_given; /* from --pp-split */
} ct__train_pipe;

int ct__train_accum(const ct_train_params *p);
ct_status ct__train_pipe_make(const ct_train_params *p, const ct_gpt_config *cfg,
                              ct__train_pipe *pipe, ct_err *err);
void ct__train_pipe_free(ct__train_pipe *pipe);
/* Activation slots of each of the schedule's stages (slots[stages]): its peak live
 * micro-batches at unit costs, at least 1. */
ct_status ct__train_slots(const ct_schedule *sched, int *slots, ct_err *err);

struct ct_train_run {
    ct_train_params p;
    ct_lr_schedule sched;
    ct__train_pipe pipe; /* the schedule, micro-batches, chunks of blocks */
    ct__train_source src; /* the model's shape, its origin, the checkpoint or model file read */
    ct_data *train, *val;
    ct_tokenizer *tok;
    ct_device_info *list;
    int ndev, *picks, npicks;
    /* Workers of this process sharing a device (--workers-per-device) open it in one context,
     * the first to open it making it: their memory and events are then one another's (TP's
     * device-resident collectives). [npicks], each retained here until the run is freed. */
    cl_context *ctx;
    pthread_mutex_t ctx_lock;
    ct_topo *topo; /* NULL: one worker, no MPI */
    int W;
    FILE *log;     /* warnings, and what a wait at setup is (programs built on first use) */
};

struct ct_trainer {
    ct_train_run *r;
    ct_train_params p;
    int thread, wrank, W, leader, b; /* b: this worker's rows of each micro-batch */
    ct_comm *world;
    ct_grid *grid;
    const ct_device_info *info;
    ct_device *dev;
    ct_model *model;
    ct_exec *x;
    ct_schedule *sched;
    ct_loader *loader, *vloader;
    ct_metrics *mx;
    ct_trace *tr;
    int trace_a, trace_b; /* steps [a, b] are traced */
    int time_a, time_b;   /* pipeline: steps [a, b] record the executed timeline */
    int *slots;           /* [pp] activation slots of each stage: the schedule's peak live */
    ct_rng rng;
    int64_t start, step; /* first step of this run; the next step to run */
    int skips_run;       /* consecutive skipped (non-finite) steps up to the last one */
    double flops_tok, peak;
    const char *peak_src;
    int *in, *tg;       /* this worker's rows of every micro-batch of a step */
    uint64_t *mem;      /* the memory report, W x CT_MEM__COUNT */
    int32_t *tpdev;     /* [W]: 1 where the worker's TP collectives run on the device */
    int built;          /* programs worker 0's device built from source at setup (cold cache) */
    ct_comm *save_comm; /* a second handle on the world for sharded saves' exchange (ckpt.c) */
    struct ct__save *save; /* the save in flight (--save-async), NULL when none */
    void (*save_hook)(void *user, int point, int64_t step); /* ct_engine_train_test.h */
    void *save_hook_user;
    ct_err err;
};

/* ckpt.c: the parameters, Adam state, step and RNG of the checkpoint resumed from (a sharded
 * one: only the runs this worker stores); and the end of the saves (the one in flight waited
 * for, the save handle freed), for ct_trainer_free. */
typedef struct ct__save ct__save;
ct_status ct__trainer_resume(ct_trainer *t, ct_err *err);
void ct__trainer_save_end(ct_trainer *t);
/* The form this worker's saves take (--save-format, auto resolved by the worker count). */
int ct__trainer_save_sharded(const ct_trainer *t);

/* A worker's failure: the message formatted into err (NULL: the trainer's own), st returned. */
ct_status ct__trainer_fail(ct_trainer *t, ct_err *err, ct_status st, const char *fmt, ...);

#endif /* CT_TRAIN_IMPL_H */
