/* ct_plan - which layout to train a model with on W workers: every dp x tp x pp (with ZeRO
 * stage, schedule, virtual stages, sequence parallelism) train_gpt would run, its memory per
 * worker (the engine's own model), and its step time predicted from costs measured on these
 * devices and links (engine/plan/). Prints the best layouts and the one chosen, or --json.
 *
 *   # measure on the workers the run will use (they time their ops and links at once)
 *   mpiexec -n 2 build/bin/ct_plan --devices-per-rank 2 --layers 8 --dim 256 --seq 128 \
 *       --batch 8 --total-batch 8192
 *   # plan for 8 workers from here: compute timed on this device, links from a table (without
 *   # one, from a default link model it names); TP layouts above the workers here by memory
 *   build/bin/ct_plan --workers 8 --devices-per-rank 4 --links links.txt --layers 8 ...
 *
 * Takes train_gpt's model and batch flags (--init FILE or --layers/--heads/--dim/..., --seq,
 * --batch, --total-batch, --attention, --bucket-mb, --mem-cap-gb, --device); a layout flag
 * given (--dp, --tp, --pp, --zero, --schedule, --virtual-stages, --sequence-parallel) pins that
 * choice. Its own: --workers W (default: ranks x --devices-per-rank), --links FILE (alpha-beta
 * table: bench_allreduce --write-links or ct_plan --write-links), --write-links FILE, --json,
 * --top N (rows shown, default 10), --reps N (timed repetitions, default 5), --no-calibrate
 * (memory only, no device), --max-virtual V (chunks per stage tried with interleaved, 2),
 * --verbose (every measurement), --only (exactly the layout train_gpt runs with the flags given,
 * its defaults for those not given: to check one layout's memory).
 *
 * Exit status: 0 a layout chosen; 2 bad input, or no layout fits (the message names the
 * smallest shortfall); 1 a failure while measuring. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>
#include <omp.h>

#include "ct_cl.h"
#include "ct_engine.h"
#include "ct_parallel.h"

static int g_ranks = 0;

static void die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char msg[2400];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "ct_plan: error: %s\n", msg);
    fflush(stderr);
    if (g_ranks > 1) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: [mpiexec -n R] ct_plan [--workers W] [--links FILE] [--write-links FILE] [--json]\n"
            "         [--top N] [--reps N] [--no-calibrate] [--max-virtual V] [--verbose] [--only]\n"
            "         [train_gpt's model, batch and layout flags]\n"
            "Ranks the layouts train_gpt can run the model with on W workers by predicted step\n"
            "time, among those that fit each worker's memory (--mem-cap-gb, else the device's).\n"
            "Layout flags given (--dp, --tp, --pp, --zero, --schedule, --virtual-stages,\n"
            "--sequence-parallel) pin that choice. Costs are measured on the workers this runs as\n"
            "(ranks x --devices-per-rank, all at once) when they are the W; otherwise the compute\n"
            "on this device and the links from --links, or from a default link model it names\n"
            "(layouts whose TP degree exceeds the workers here: memory only, said so).\n");
}

typedef struct own_opts {
    int workers, json, top, reps, no_cal, max_virt, verbose, only;
    const char *links, *write_links;
} own_opts;

/* A whole number >= lo, or the program says which flag and stops. */
static int own_int(const char *name, const char *v, int lo) {
    char *end = NULL;
    long n = strtol(v, &end, 10);
    if (end == v || *end || n < lo || n > 1 << 30)
        die(2, "%s needs a whole number >= %d (got '%s')", name, lo, v);
    return (int)n;
}

/* Take ct_plan's own flags out of argv (the rest are train_gpt's). */
static void own_parse(int *argc, char **argv, own_opts *o) {
    int k = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < *argc ? argv[i + 1] : NULL;
#define VAL(name)                                                                                  \
    (!strcmp(a, name) ? (v ? (i++, v) : (die(2, "%s needs a value", name), (const char *)0)) : NULL)
        const char *x;
        if ((x = VAL("--workers"))) o->workers = own_int("--workers", x, 1);
        else if ((x = VAL("--links"))) o->links = x;
        else if ((x = VAL("--write-links"))) o->write_links = x;
        else if ((x = VAL("--top"))) o->top = own_int("--top", x, 1);
        else if ((x = VAL("--reps"))) o->reps = own_int("--reps", x, 1);
        else if ((x = VAL("--max-virtual"))) o->max_virt = own_int("--max-virtual", x, 1);
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--no-calibrate")) o->no_cal = 1;
        else if (!strcmp(a, "--verbose")) o->verbose = 1;
        else if (!strcmp(a, "--only")) o->only = 1;
        else argv[k++] = argv[i];
#undef VAL
    }
    *argc = k;
    argv[k] = NULL;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (ct_opts_wants_help(argc - 1, argv + 1)) {
        usage(stdout);
        ct_opts_help(stdout, ct_train_opts, ct_train_opts_count);
        return 0;
    }
    own_opts o = {0, 0, 10, 5, 0, 2, 0, 0, NULL, NULL};
    own_parse(&argc, argv, &o);
    ct_err err = {0};
    ct_train_params p = ct_train_params_default();
    if (ct_train_params_parse(&p, argc - 1, argv + 1, &err))
        die(2, "%s", err.msg);
    if (o.top < 1) die(2, "--top must be >= 1 (got %d)", o.top);
    if (o.reps < 1 || o.reps > 64) die(2, "--reps must be in 1..64 (got %d)", o.reps);
    if (o.max_virt < 1 || o.max_virt > 16) die(2, "--max-virtual must be in 1..16 (got %d)", o.max_virt);
    ct_gpt_config cfg;
    if (ct_train_config(&p, &cfg, &err) != CT_OK) die(2, "%s", err.msg);

    /* The workers this process is one of, and the W planned for. */
    int ranks = ct_launcher_ranks_env(), D = p.devices_per_rank; /* mpiexec's or srun's */
    int here = ranks * D; /* the workers running this */
    int W = o.workers > 0 ? o.workers : here;
    if (o.workers < 0 || W < 1) die(2, "--workers must be >= 1 (got %d)", o.workers);
    int live = !o.no_cal && W == here && W > 1;
    /* planning for workers that are not all here: the links come from --links or the default
     * model, the compute of TP degrees above the workers here cannot be timed (TP's collectives
     * run inside it): those layouts are ranked by memory alone, said so */
    int away = !o.no_cal && W != here;
    if (W > 1 && W % D) die(2, "--workers %d is not a multiple of --devices-per-rank %d", W, D);

    ct_plan_problem pb;
    ct_plan_problem_from_params(&pb, &p, &cfg, W, D);
    ct_plan_problem_fix(&pb, &p);
    if (o.only) { /* exactly the layout train_gpt runs with these flags (defaults included) */
        ct_err e2 = {0};
        pb.fix.dp = p.dp, pb.fix.tp = p.tp, pb.fix.pp = p.pp, pb.fix.zero = p.zero, pb.fix.ep = p.ep;
        pb.fix.sp = p.sequence_parallel, pb.fix.virt = p.virtual_stages;
        if (p.pp > 1 && ct_sched_parse(p.schedule, &pb.fix.sched, &e2) != CT_OK) die(2, "%s", e2.msg);
    }
    pb.max_virt = o.max_virt;
    pb.untimed_ok = away;
    ct_plan_needs *need = NULL;
    if (ct_plan_needs_make(&pb, &need, &err) != CT_OK) die(2, "%s", err.msg);
    int tp_dropped = 0, tp_top = 0;
    if (away) tp_dropped = ct_plan_needs_limit_tp(need, here, &tp_top);

    ct_topo *topo = NULL;
    ct_plan_costs costs_v;
    memset(&costs_v, 0, sizeof costs_v);
    ct_plan_costs *costs = NULL;
    if (!o.no_cal) {
        if (here > 1) {
            if (ct_topo_create(&topo, &argc, &argv, D, &err)) die(2, "%s", err.msg);
            g_ranks = ct_topo_nranks(topo);
            if (ct_topo_rank(topo) > 0) setvbuf(stdout, NULL, _IOFBF, 1 << 16);
        }
        double mem_min = 0, alloc_min = 0;
        int leader0 = !topo || ct_topo_rank(topo) == 0;
        /* progress on stderr (stdout may be --json): what is measured, and when done; each
         * measurement as it comes with --verbose or on a terminal */
        int each = o.verbose || isatty(STDERR_FILENO);
        double t0 = ct_time_now();
        if (leader0) {
            fprintf(stderr, "ct_plan: measuring on %d worker%s: %d compute shape%s (%d repetitions "
                            "each), %d link%s, host copies, the optimizer%s\n",
                    here, here > 1 ? "s" : "", need->ncomp, need->ncomp == 1 ? "" : "s", o.reps,
                    live ? need->nlink : 0, live && need->nlink == 1 ? "" : "s",
                    each ? "" : " (--verbose: each as it is measured)");
            fflush(stderr);
        }
        ct_status st = ct_plan_measure(topo, &p, &pb, need, live, o.links, o.reps,
                                       each && leader0 ? stderr : NULL, &costs_v, &mem_min,
                                       &alloc_min, &err);
        if (st != CT_OK) die(st == CT_ERR_ARG || st == CT_ERR_IO ? 2 : 1, "%s", err.msg);
        if (leader0) fprintf(stderr, "ct_plan: measured in %.1f s\n", ct_time_now() - t0);
        if (pb.mem_cap <= 0) pb.mem_cap = mem_min;
        ct_plan_limit_alloc(&pb, alloc_min);
        if (away && !o.links && ct_plan_links_default(&costs_v, need, &err) != CT_OK)
            die(1, "%s", err.msg);
        costs = &costs_v;
    } else if (o.links) {
        die(2, "--links with --no-calibrate: without measured compute no time is predicted");
    }
    int leader = !topo || ct_topo_rank(topo) == 0;
    ct_plan_result res;
    int rc = 0;
    if (ct_plan_rank(&pb, costs, &res, &err) != CT_OK) die(2, "%s", err.msg);
    if (leader) {
        if (o.write_links && costs && ct_plan_links_write(costs, o.write_links, &err) != CT_OK)
            die(2, "%s", err.msg);
        if (o.json) ct_plan_print_json(stdout, &pb, costs, &res);
        else ct_plan_print(stdout, &pb, costs, &res, o.top);
        fflush(stdout);
        if (away) { /* what this ranking rests on, on stderr so --json stays parseable */
            fprintf(stderr,
                    "ct_plan: planning for %d workers from %d: compute timed on this device%s; "
                    "links %s.\n",
                    W, here, here > 1 ? "s" : "",
                    o.links ? "from the table given" : "not measured: the default link model "
                              "(a guess; measure yours with bench_allreduce --write-links FILE or "
                              "ct_plan --write-links FILE run as the workers, then --links FILE)");
            if (tp_dropped)
                fprintf(stderr,
                        "ct_plan: not timed: the layouts with tp up to %d (TP's pieces are timed "
                        "with their collectives inside, which needs that many workers at once): "
                        "listed by memory; run ct_plan as the %d workers, or pin --tp, to time "
                        "them\n",
                        tp_top, W);
        }
    }
    if (res.nfit == 0) {
        char why[512];
        ct_plan_why_none(&pb, &res, why, sizeof why);
        if (leader) fprintf(stderr, "ct_plan: error: %s\n", why);
        rc = 2;
    }
    ct_plan_result_free(&res);
    ct_plan_costs_free(&costs_v);
    ct_plan_needs_free(need);
    ct_topo_free(topo);
    return rc;
}
