/* ct_engine_plan.h - the layout planner: every way to lay a model over W workers (dp x tp x pp,
 * ep, the ZeRO stage, the pipeline schedule and its virtual stages, sequence parallelism), which
 * of them fit each worker's memory, and a predicted step time for each, from costs measured on
 * the devices and links the run will use. train_gpt --layout auto and ct_plan use it.
 *
 *     ct_plan_problem pb;                       // the model, the batch, the workers
 *     ct_plan_problem_from_params(&pb, &params, &cfg, W, D);
 *     ct_plan_problem_fix(&pb, &params);        // the layout flags given pin their choices
 *     ct_plan_needs *need = NULL;               // what the candidates need measured
 *     ct_plan_needs_make(&pb, &need, &err);
 *     ct_plan_costs costs;                      // measured by this process's workers, with
 *     double mem, alloc;                        // the other ranks' when live (collective)
 *     ct_plan_measure(topo, &params, &pb, need, live, NULL, 5, NULL, &costs, &mem, &alloc, &err);
 *     if (pb.mem_cap <= 0) pb.mem_cap = mem;    // the devices' memory unless --mem-cap-gb
 *     ct_plan_limit_alloc(&pb, alloc);          // and their largest buffer
 *     ct_plan_result res;                       // ranked: fitting layouts first, fastest first
 *     if (ct_plan_rank(&pb, &costs, &res, &err) == CT_OK && res.nfit > 0) {
 *         ct_plan_print(stdout, &pb, &costs, &res, 10);
 *         ct_plan_apply(&res.e[0].lay, &params);   // train with the fastest that fits
 *     }
 *     ct_plan_result_free(&res); ct_plan_needs_free(need); ct_plan_costs_free(&costs);
 *
 * The time model, per layout (costs in ms, measured; nothing assumed about the device):
 *   - compute: one block's forward and backward (and the zero-bubble halves), the embedding and
 *     the head, each the engine's own ops timed on the device at the shapes the layout gives a
 *     worker (rows B/dp, heads NH/tp, MLP 4C/tp, vocabulary Vp/tp, rows / tp under SP), with
 *     every worker timing at once, so devices that share a host (PoCL) are timed as they run;
 *   - links: t(bytes) = alpha + beta * bytes per (collective, group size, placement: threads of
 *     one process, one worker per rank, or mixed), fitted from the collectives run over groups
 *     laid out as the layouts lay them (all groups of a kind at once), or read from a table
 *     (bench_allreduce --write-links); host staging (device read + write) apart;
 *   - overlap: how much of a collective hides behind device work, measured (a GEMM enqueued,
 *     a collective on the host meanwhile) rather than assumed;
 *   - the pipeline: each stage's forward, backward (or input and weight halves), sends and
 *     receives fed to the schedule's own simulator (ct_sched_simulate_stages), which gives the
 *     makespan and the bubble; then each stage's gradient reduction over DP (buckets,
 *     overlapped with its last backward), the tied embedding's, ZeRO's gathers, the optimizer;
 *   - volumes: bytes per worker per step on each axis (TP, DP, PP), from the engine's own
 *     message sizes.
 * Memory per worker is the engine's own memory model (ct_train_mem_predict, through
 * ct_plan_memory): what the run's memory report shows. */
#ifndef CT_ENGINE_PLAN_H
#define CT_ENGINE_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ct_engine_model.h"
#include "ct_engine_train.h"
#include "ct_gpt_config.h"
#include "ct_parallel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- layouts and the problem */

/* One candidate: every choice train_gpt's layout flags make. */
typedef struct ct_plan_layout {
    int dp, tp, pp;
    int ep;              /* experts over ep consecutive dp ranks; 1: dense */
    int zero;            /* 0..3 */
    ct_sched_kind sched; /* CT_SCHED_TRIVIAL with pp = 1 */
    int virt;            /* chunks per stage (interleaved), else 1 */
    int sp;              /* sequence parallelism (tp >= 2) */
} ct_plan_layout;

/* "dp2 tp2 pp2 1f1b z1 sp" (short, for tables); buf of 64 suffices. */
char *ct_plan_layout_name(const ct_plan_layout *l, char *buf, size_t len);
/* Set train_gpt's layout flags to l (dp, tp, pp, ep, zero, schedule, virtual stages, SP). */
void ct_plan_apply(const ct_plan_layout *l, ct_train_params *p);

/* What is fixed: the model, the batch, the workers and their memory, the engine's knobs. A
 * field of `fix` >= 0 pins that choice (fix.sched: >= 0 a schedule), -1 leaves it free. */
typedef struct ct_plan_problem {
    ct_gpt_config cfg;
    int T;             /* --seq */
    int B;             /* --batch: rows of one micro-batch, over all DP ranks */
    int micro;         /* micro-batches per step: --total-batch / (B T) */
    int W, D;          /* workers; devices (worker threads) per rank: where groups fall */
    double mem_cap;    /* bytes per worker; 0: no cap */
    double max_alloc;  /* the largest single buffer a device takes, bytes; 0: no limit */
    ct_attn_path attn; /* gemm or fused (auto: resolved by ct_plan_measure's timing) */
    double bucket_mb;  /* --bucket-mb */
    int overlap, tp_overlap;
    /* bytes of an element on the links: activations (4, or 2 with --precision bf16: TP, PP, EP)
     * and the gradients' reduction (4, or 2 with --grad-reduce bf16) */
    int act_bytes, grad_wire_bytes;
    int max_virt;      /* the most chunks per stage enumerated for interleaved (default 2) */
    char recompute[16]; /* --recompute (none, attention, block): the memory model's input */
    ct_train_params base; /* the command line's flags (the memory model reads the ones a layout
                             leaves: MoE's capacity factor, ...); strings point into the command line */
    ct_plan_layout fix;
    int untimed_ok;    /* 1: a layout whose costs are missing is ranked by memory alone ("not
                          timed", the reason kept) instead of failing ct_plan_rank: planning for
                          workers that are not all here */
} ct_plan_problem;

/* The problem of a train_gpt command line: cfg (the model's shape, resolved), its batch flags,
 * W workers over D devices per rank; layout flags given (given[] from the command line: see
 * ct_plan_problem_fix) pin choices. */
void ct_plan_problem_from_params(ct_plan_problem *pb, const ct_train_params *p,
                                 const ct_gpt_config *cfg, int W, int D);
/* Pin the layout flags given on a command line (--dp, --tp, --pp, --ep, --zero, --schedule,
 * --virtual-stages, --sequence-parallel) in pb->fix; the others stay free. */
void ct_plan_problem_fix(ct_plan_problem *pb, const ct_train_params *p);
/* The devices' largest allocation (0: unknown) as the problem's limit: --max-alloc-mb may
 * lower it (pb->max_alloc set from the flag), not raise it (the device would refuse). */
void ct_plan_limit_alloc(ct_plan_problem *pb, double device_max_alloc);

/* CT_OK when train_gpt would run `l` for this problem; otherwise CT_ERR_ARG with train_gpt's
 * own message (the same checks: ct_train_params_check, ct_model_tp_check, chunks <= blocks). */
ct_status ct_plan_layout_check(const ct_plan_problem *pb, const ct_plan_layout *l, ct_err *err);

/* Every layout that passes ct_plan_layout_check and `fix`, in a fixed order; *out malloc'd. */
ct_status ct_plan_enumerate(const ct_plan_problem *pb, ct_plan_layout **out, int *n, ct_err *err);

/* ---------------------------------------------------------------- memory */

/* Device bytes of one worker by category (what the memory report shows as allocated). */
typedef struct ct_plan_mem {
    double params, grads, optimizer, activations, workspace;
    double total;           /* the device bytes: the sum of the five; what the cap is against */
    double host;            /* host staging (the report's comm column), not in total */
    int attention_bound;    /* --attention auto: the GEMM path's arena, an upper bound */
    double largest;         /* the largest single device buffer (ct_mem_predict.largest) */
    char largest_name[64];
} ct_plan_mem;

/* Worker w's bytes for layout l: the engine's own memory model, ct_train_mem_predict
 * (ct_engine_mem.h) for the train_gpt flags that run l (the problem's batch, attention path, recompute mode,
 * buckets), so exactly what the run's memory report will show as allocated, up to the buffers
 * ct_engine_mem.h states it leaves out. CT_ERR_ARG / _UNSUPPORTED with the model's message. */
ct_status ct_plan_memory(const ct_plan_problem *pb, const ct_plan_layout *l, int w, ct_plan_mem *out,
                         ct_err *err);

/* ---------------------------------------------------------------- costs */

/* One worker's pieces at one shape, ms per micro-batch: the model's own entry points
 * (ct_model_embed_forward, block_forward, head_forward and their backwards; the zero-bubble
 * halves at tp = 1) timed on a one-block model built for the shape, with TP's collectives over
 * real TP groups (consecutive workers, as the grid lays them) inside, every worker at once. */
typedef struct ct_plan_compute {
    int b, tp, sp;       /* key: rows per micro-batch on the worker, TP degree, SP */
    double block_fwd, block_bwd, block_bwd_in, block_bwd_w;
    double embed_fwd, embed_bwd, head_fwd, head_bwd;
    double tp_block, tp_embed, tp_head; /* the TP collectives' exposed part of a block's, the
                                           embedding's and the head's forward + backward (with
                                           minus without them) */
    double share;        /* the pieces' time with every worker at once over that with one TP
                            group alone: 1 where devices are independent (GPUs), up to the
                            workers per core where they share a host's cores (PoCL) */
} ct_plan_compute;

/* A link: t(bytes) = alpha + beta * bytes (ms), one collective over groups of n workers placed
 * as `place` (all groups of that kind running at once), fitted over [lo, hi] bytes. */
typedef enum ct_plan_place { CT_PLACE_THREADS = 0, CT_PLACE_RANKS, CT_PLACE_MIXED } ct_plan_place;
#define CT_PLAN_P2P CT_COLL__COUNT /* the collective "kind" of a pipeline message (one way) */
typedef struct ct_plan_link {
    int coll; /* CT_COLL_ALLREDUCE, _REDUCESCATTER, _ALLGATHER, or CT_PLAN_P2P */
    int n;
    ct_plan_place place;
    double alpha, beta;
    double lo, hi;
} ct_plan_link;
/* Where a group of n workers at stride `stride` (worker 0's group) falls with D per rank. */
ct_plan_place ct_plan_group_place(int n, int stride, int D);

typedef struct ct_plan_costs {
    ct_plan_compute *comp;
    int ncomp;
    ct_plan_link *link;
    int nlink;
    double copy_alpha, copy_beta; /* one host staging copy (device read or write), ms, ms/byte */
    double opt_alpha, opt_beta;   /* the optimizer (norm + AdamW) over n floats, ms, ms/float */
    double overlap;               /* 0..1: the share of the shorter of (device work, host
                                     collective) hidden when both run at once */
    ct_attn_path attn;            /* the path timed (auto resolved) */
    int workers_timed;            /* workers that timed at once (1: alone) */
    char source[256];             /* how the links were had ("measured over 8 workers", a file) */
} ct_plan_costs;
void ct_plan_costs_free(ct_plan_costs *c);

/* What the candidates need measured: compute shapes and links with their byte ranges. */
typedef struct ct_plan_needs {
    ct_plan_compute *comp; /* keys only */
    int ncomp;
    ct_plan_link *link;    /* coll, n, place, lo, hi */
    int *stride;           /* [nlink] a stride that gives this placement (live calibration) */
    int nlink;
    double opt_lo, opt_hi; /* optimizer element counts */
    double copy_hi;        /* largest staging copy, bytes */
} ct_plan_needs;
ct_status ct_plan_needs_make(const ct_plan_problem *pb, ct_plan_needs **out, ct_err *err);
void ct_plan_needs_free(ct_plan_needs *n);
/* Drop the compute shapes of TP degree above max_tp (they need that many workers timing at
 * once); returns how many were dropped, and the largest TP degree dropped in *tp_max (may be
 * NULL). */
int ct_plan_needs_limit_tp(ct_plan_needs *n, int max_tp, int *tp_max);
/* The default link model, for planning without the links measured or a table: every link `need`
 * lists, as a ring over its group with alpha and bandwidth per placement (threads of a process,
 * processes: links.c states the numbers), added to c->link; c->source names it. A guess, said
 * as one: measure the links (bench_allreduce --write-links, ct_plan --write-links over the real
 * workers) and give --links for a ranking to trust. */
ct_status ct_plan_links_default(ct_plan_costs *c, const ct_plan_needs *need, ct_err *err);

/* Links as text, one per line: "link COLL N PLACE ALPHA_MS BETA_MS_PER_BYTE LO HI" (#
 * comments); what bench_allreduce --write-links and ct_plan --write-links write. Loading adds
 * to c->link (a later line for the same key replaces an earlier one). */
ct_status ct_plan_links_load(ct_plan_costs *c, const char *path, ct_err *err);
ct_status ct_plan_links_write(const ct_plan_costs *c, const char *path, ct_err *err);
/* Least-squares fit of t = alpha + beta * x over n points, weighted by 1/t^2 (relative error). */
void ct_plan_fit(const double *x, const double *t, int n, double *alpha, double *beta);

/* The whole measurement of a program: this process's workers (topo's devices per rank, or one
 * without topo) each open the device train_gpt would give them (p->device, CT_DEVICE,
 * --workers-per-device) and measure what `need` lists, collectively over the world when `live`
 * (every worker of the run is here; links over groups of each needed size and placement, all
 * groups at once), else the compute only, by this process's workers at once; then `links` (may
 * be NULL: a table that replaces the links' measurement) is loaded. Compute shapes are timed
 * on every worker at once and averaged; a shape of TP degree tp is timed with its collectives
 * inside, over groups of tp workers: tp above the workers measuring is CT_ERR_ARG (it says to
 * run as more workers or pin --tp; ct_plan_needs_limit_tp drops them first). reps: timed
 * repetitions per item (compute: the fastest; the rest: the median). log (may be NULL, the
 * leader's): one line per item measured.
 * Every worker of the process ends with the same costs in *out; *mem_min and *alloc_min (each
 * may be NULL) are the smallest global memory and the smallest CL_DEVICE_MAX_MEM_ALLOC_SIZE
 * among the devices of every worker (of the world when `topo` is given: every rank plans alike;
 * then rounded down to KiB). Runs its own OpenMP region: call it from the program's main
 * thread. */
ct_status ct_plan_measure(ct_topo *topo, const ct_train_params *p, const ct_plan_problem *pb,
                          const ct_plan_needs *need, int live, const char *links, int reps,
                          FILE *log, ct_plan_costs *out, double *mem_min, double *alloc_min,
                          ct_err *err);

/* ---------------------------------------------------------------- prediction and ranking */

typedef struct ct_plan_estimate {
    double step_ms;      /* predicted time of one optimizer step */
    double tokens_per_s;
    double compute_ms;   /* the busiest stage's compute (forward + backward, all micro-batches) */
    double bubble;       /* the pipeline simulator's idle fraction (0 with pp = 1) */
    double comm_ms;      /* exposed communication (TP, pipeline staging, DP, ZeRO), busiest stage */
    double comm_share;   /* comm_ms / step_ms */
    double opt_ms;
    double tp_bytes, dp_bytes, pp_bytes; /* per worker per step, sent (busiest worker) */
    double ep_bytes;                     /* the same for EP's all-to-alls (MoE) */
} ct_plan_estimate;

/* Pure: the step time of `l` from `c`. CT_ERR_ARG when c lacks a cost l needs (names it). */
ct_status ct_plan_predict(const ct_plan_problem *pb, const ct_plan_layout *l, const ct_plan_costs *c,
                          ct_plan_estimate *out, ct_err *err);

typedef struct ct_plan_entry {
    ct_plan_layout lay;
    int fits;            /* every worker's total <= mem_cap (or no cap), and its largest buffer
                            <= max_alloc (or no limit) */
    int mem_known;       /* the engine's memory model answered */
    ct_plan_mem mem;     /* the worker with the most bytes */
    ct_plan_mem *worker; /* [W] */
    double largest;      /* the largest single buffer of any worker, and its name */
    char largest_name[64];
    int timed;           /* est holds a prediction (costs for every piece of this layout) */
    char why_untimed[160]; /* when not timed under pb->untimed_ok: the cost that was missing */
    ct_plan_estimate est;
} ct_plan_entry;

typedef struct ct_plan_result {
    ct_plan_entry *e; /* fitting first (timed ones fastest first, then those not timed, least
                         memory first), then those that do not fit (smallest shortfall first) */
    int n, nfit;
    char mem_note[256]; /* why memory is unknown, when it is */
} ct_plan_result;

/* Enumerate, predict memory and time (c NULL: memory only, times 0), rank. CT_ERR_ARG when no layout passes the checks;
 * res->nfit = 0 (CT_OK) when none fits memory: the caller refuses with ct_plan_why_none. */
ct_status ct_plan_rank(const ct_plan_problem *pb, const ct_plan_costs *c, ct_plan_result *res,
                       ct_err *err);
void ct_plan_result_free(ct_plan_result *r);
/* Why no layout fits (res->nfit == 0), one sentence: the smallest memory shortfall per worker,
 * or, where layouts fit the memory but each needs one buffer above the device's largest
 * allocation, the smallest such buffer. */
void ct_plan_why_none(const ct_plan_problem *pb, const ct_plan_result *r, char *buf, size_t len);

/* The table of the best `top` layouts and the choice (text), and the whole result as one JSON
 * object ({"workers":..,"layouts":[{"name","flags","fits","mem":{..},"workers":[..],
 * "step_ms",..}],"chosen":..}). */
void ct_plan_print(FILE *f, const ct_plan_problem *pb, const ct_plan_costs *c, const ct_plan_result *r,
                   int top);
void ct_plan_print_json(FILE *f, const ct_plan_problem *pb, const ct_plan_costs *c,
                        const ct_plan_result *r);

#ifdef __cplusplus
}
#endif
#endif /* CT_ENGINE_PLAN_H */
