/* plan_impl.h - the planner's private contracts between its files (not for programs). The
 * files stand in layers, each calling only files below it (scripts/file_cycles finds none
 * calling back up):
 *
 *   measure.c        --layout auto's measurement: this process's devices and workers, a table
 *   probe.c          the measurements in order; the model's pieces on every worker
 *   probe_device.c   a staging copy, the optimizer, the overlap of host and device work
 *   probe_links.c    one link over every group of a pattern at once
 *   print.c          a ranked result as text and JSON
 *   rank.c           every layout with its memory and predicted time, in order
 *   predict.c        the time model of one layout
 *   needs.c          what the layouts need measured
 *   memory.c         what a worker of a layout holds
 *   problem.c        the problem, the valid layouts, the pipeline split
 *   layout.c         a layout's name, flags and the parameters that run it
 *   links.c          the link model: placements, the fit, the links table, the default model
 *
 * The measurement (probe*.c, measure.c) sits above the pure model and nothing in the model
 * calls it: ct_plan_rank, ct_plan_predict and the printing run without a device. */
#ifndef CT_PLAN_IMPL_H
#define CT_PLAN_IMPL_H

#include "ct_engine_plan.h"

/* layout.c: the train_gpt flags that run l: "--dp 2 --tp 2 --pp 2 --schedule 1f1b --zero 1 ..." */
char *ct__plan_layout_flags(const ct_plan_layout *l, char *buf, size_t len);

/* layout.c: the train_gpt parameters that run l for pb: `from` (the defaults, or the command
 * line's) with the problem's batch (--seq, --batch, --total-batch), its --bucket-mb when set,
 * and l's layout flags (ct_plan_apply). */
void ct__plan_params(const ct_plan_problem *pb, const ct_plan_layout *l,
                     const ct_train_params *from, ct_train_params *q);

/* problem.c: the blocks per model chunk the trainer uses for `l` (the FLOP-balanced split,
 * ct_pp_split_balanced); split has pp * virt entries. */
ct_status ct__plan_split(const ct_plan_problem *pb, const ct_plan_layout *l, int *split,
                         ct_err *err);

/* memory.c: the parameters (elements) the worker at stage q of `l` holds (TP-split tensors / tp,
 * experts / ep), as the memory report counts them; *blocks (may be NULL): the blocks it holds. */
double ct__plan_stage_params(const ct_plan_problem *pb, const ct_plan_layout *l, const int *split,
                             int q, int *blocks);
/* memory.c: one block's parameters on a worker (TP-split / tp, experts / ep). */
double ct__plan_block_params(const ct_plan_problem *pb, int tp, int ep);

/* links.c: "threads", "ranks", "mixed"; "allreduce", ..., "p2p" */
const char *ct__plan_place_name(ct_plan_place p);
const char *ct__plan_coll_name(int coll);

/* links.c: the median of n timings (v is sorted). */
double ct__plan_median(double *v, int n);

/* probe_device.c: one host staging copy (device read + write) at a few sizes up to hi bytes, and
 * the optimizer (norm + AdamW) over lo..hi floats in one launch: alpha (ms), beta (ms per byte,
 * per float); the share (0..1) of the shorter of (device work, host work) hidden when both run
 * at once. reps: timed repetitions (the median). */
ct_status ct__plan_probe_copy(ct_device *dev, double hi, int reps, double *alpha, double *beta,
                              ct_err *err);
ct_status ct__plan_probe_opt(ct_device *dev, double lo, double hi, int reps, double *alpha,
                             double *beta, ct_err *err);
ct_status ct__plan_probe_overlap(ct_device *dev, int reps, double *share, ct_err *err);

/* probe_links.c: k's alpha and beta (k->coll, n, lo, hi given), measured over every group of
 * k->n workers at `stride` in world at once, the slowest member counting; every worker of world
 * calls it. log (may be NULL): one line. */
ct_status ct__plan_probe_link(ct_comm *world, ct_plan_link *k, int stride, int reps, FILE *log,
                              ct_err *err);

/* probe.c: measure what `need` lists. Collective over `world` (each worker with its own device,
 * every worker calling with the same problem): compute shapes are timed on every worker at once
 * and averaged, links over groups of each needed size and placement, all groups at once
 * (need->nlink 0: none, they come from ct_plan_links_load). world NULL: this device alone. A
 * shape of TP degree tp is timed with its collectives inside, over groups of tp workers of
 * world: tp > the workers measuring is CT_ERR_ARG (it says to run as more workers or pin --tp).
 * reps: timed repetitions per item (compute: the fastest; the rest: the median). log (may be
 * NULL, the leader's): one line per item measured. */
ct_status ct__plan_calibrate(ct_comm *world, ct_device *dev, const ct_plan_problem *pb,
                             const ct_plan_needs *need, int reps, FILE *log, ct_plan_costs *out,
                             ct_err *err);

#endif /* CT_PLAN_IMPL_H */
