/* train_gpt - train a GPT-2 model on one OpenCL device, or on several workers (MPI ranks x
 * --devices-per-rank devices) laid out as a grid: data parallelism (--dp, ZeRO 0-3) x tensor
 * parallelism (--tp, with sequence parallelism) x pipeline stages (--pp, with the --schedule
 * gpipe, 1f1b, interleaved or zb1).
 *
 * Data: llm.c token shards (--data GLOB), a text file as bytes (--text FILE), or, with neither,
 * the corpus embedded at build time (the project's own headers and docs). Model: new (--layers
 * --heads --dim --seq --vocab), or an llm.c GPT-2 file (--init), or a checkpoint (--resume).
 * One log line per step; JSON Lines with --metrics; checkpoints with --save; the final model as
 * an llm.c file with --save-model; a Chrome trace with --trace; ends by printing a sample.
 * The training itself is the engine's (engine/train/); this file holds the flags, the printing
 * (the engine's reports formatted by train_report.c) and the exit codes.
 *
 * Exit status: 0 done; 2 bad input (flag, value, shape, file, data, layout, or a device too
 * small), always with a message naming the problem; 1 a failure during training (also a loss or
 * gradient norm that is not finite under --nonfinite stop, or --max-skips times in a row). Every file it
 * writes appears complete or not at all (temporary file + rename). */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include <mpi.h>
#include <omp.h>

#include "ct_cl.h"
#include "ct_engine.h"
#include "ct_engine_train_test.h"
#include "ct_parallel.h"
#include "train_report.h"

/* The embedded corpus (examples/engine.cmake). */
extern const ct_cl_source ct_corpus[];
extern const int ct_corpus_count;

/* Set once MPI runs with several ranks: a fatal error on one rank then ends every rank through
 * MPI_Abort instead of leaving the others waiting in a collective. */
static int g_mpi_ranks = 0;

/* --layout auto: the planner's pick and its predicted step time, printed beside the measured. */
static double g_plan_ms = 0;
static char g_plan_name[96];

/* CT_TEST_FAIL_ALLOC=W:N[:host|device] (read once, in main): the N-th allocation made by world
 * worker W's own thread fails, through the allocation hook of cl/. For tests of failures that
 * only one worker meets (a device allocation only it cannot make); never set otherwise. */
static _Thread_local int g_worker = -1; /* this thread's world worker, -1: not a worker */
static struct {
    int worker;
    long n, seen;
    unsigned kinds;
} g_fault = {-1, 0, 0, 0};

static int fault_hook(void *user, ct_alloc_kind kind, size_t bytes) {
    (void)user;
    (void)bytes;
    if (g_worker != g_fault.worker || !(g_fault.kinds & (unsigned)kind)) return 0;
    return __atomic_add_fetch(&g_fault.seen, 1, __ATOMIC_ACQ_REL) == g_fault.n;
}

static int fault_parse(const char *s) {
    char kind[16] = "";
    if (!s || sscanf(s, "%d:%ld:%15s", &g_fault.worker, &g_fault.n, kind) < 2 ||
        g_fault.worker < 0 || g_fault.n < 1)
        return -1;
    g_fault.kinds = !strcmp(kind, "host")     ? CT_ALLOC_HOST
                    : !strcmp(kind, "device") ? CT_ALLOC_DEVICE
                    : !kind[0]                ? CT_ALLOC_HOST | CT_ALLOC_DEVICE
                                              : 0;
    return g_fault.kinds ? 0 : -1;
}

/* CT_TEST_SAVE_KILL=W:STEP:shard|manifest (read once, in main): world worker W's process is
 * SIGKILLed inside the sharded checkpoint of step STEP, after its shard is on disk (shard) or,
 * on worker 0, with every shard on disk and the manifest not yet written (manifest). For tests
 * of a save killed midway; never set otherwise. */
static struct {
    int worker, point;
    long long step;
} g_kill = {-1, 0, 0};

static int kill_parse(const char *s) {
    char at[16] = "";
    if (sscanf(s, "%d:%lld:%15s", &g_kill.worker, &g_kill.step, at) != 3 || g_kill.worker < 0 ||
        g_kill.step < 1)
        return -1;
    g_kill.point = !strcmp(at, "shard") ? CT_SAVE_AT_SHARD
                   : !strcmp(at, "manifest") ? CT_SAVE_AT_MANIFEST
                                             : 0;
    return g_kill.point ? 0 : -1;
}

static void kill_hook(void *user, int point, int64_t step) {
    (void)user;
    if (point == g_kill.point && step == g_kill.step) raise(SIGKILL);
}

static void die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char msg[2300];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "train_gpt: error: %s\n", msg);
    fflush(stderr);
    /* Several worker threads may fail alike (a model none of them can build): exit() is not
     * safe to run twice at once (the exit handlers would run in both), so the first one ends the
     * process and the others wait here for it. */
    static pthread_mutex_t ending = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&ending);
    if (g_mpi_ranks > 1) {
        /* MPICH's launcher drops a rank's output still on its way when MPI_Abort tears the job
         * down (the message was lost in 3 of 8 tries): give it a moment to arrive first */
        struct timespec pause = {0, 500000000L};
        nanosleep(&pause, NULL);
        MPI_Abort(MPI_COMM_WORLD, code);
    }
    exit(code);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: train_gpt [--flag VALUE]...\n"
            "Trains a GPT-2 model on one OpenCL device, or on several laid out as --dp x --tp x --pp\n"
            "(run under mpiexec and/or with --devices-per-rank D; dp x tp x pp = ranks x D). With\n"
            "no flags: a small model on the text embedded in the binary, ending with a sample. Exit\n"
            "status 2 on bad input.\n\n");
    ct_opts_help(f, ct_train_opts, ct_train_opts_count);
    fprintf(f, "\nThe device may also be chosen with the environment variable CT_DEVICE.\n"
               "CT_COMM_TIMEOUT=S: a worker waiting longer than S seconds (default %.0f) for another\n"
               "gives up with an error naming the collective and the peer (0 = wait for ever).\n",
            CT_COMM_TIMEOUT_DEFAULT);
}

/* Bad input during setup exits 2; running out of memory is a failure (1). */
static int setup_code(ct_status st) { return st == CT_ERR_NOMEM ? 1 : 2; }

static void print_sample(ct_trainer *t, const ct_train_params *p, int64_t step) {
    int *tokens = NULL, n = 0;
    int leader = ct_trainer_leader(t);
    if (ct_trainer_sample(t, &tokens, &n) != CT_OK) {
        /* under ZeRO-3 the others would wait in a collective forward: end them all */
        if (ct_trainer_sample_collective(t)) die(1, "sampling failed: %s", ct_trainer_errmsg(t));
        fprintf(stderr, "train_gpt: sampling failed: %s\n", ct_trainer_errmsg(t));
        return;
    }
    if (leader) {
        printf("---- sample at step %lld (temperature %g, top-k %d) ----\n", (long long)step,
               p->temperature, p->sample_top_k);
        ct_print_tokens(stdout, tokens, n, ct_model_config(ct_trainer_model(t))->vocab,
                        ct_trainer_tokenizer(t));
        printf("----\n");
        fflush(stdout);
        char fields[64];
        snprintf(fields, sizeof fields, "\"step\":%lld,\"tokens\":%d", (long long)step,
                 p->sample_len);
        ct_metrics_record(ct_trainer_metrics(t), "sample", fields);
    }
    free(tokens);
}

/* The run's speed without its first step (first uses: programs built on a cold cache, buffers
 * touched): the median step, and the rates of that step's work at that time. */
typedef struct summary {
    double first_ms;
    double *ms;
    int n, cap;
    double tokens, flops_s, mfu_ms; /* per step: tokens, TFLOP/s x ms, MFU x ms */
} summary;

static void summary_add(summary *s, const ct_step_metrics *sm, int first) {
    if (first) {
        s->first_ms = sm->ms;
        return;
    }
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        double *m = realloc(s->ms, sizeof *m * (size_t)cap);
        if (!m) return;
        s->ms = m, s->cap = cap;
    }
    s->ms[s->n++] = sm->ms;
    s->tokens = sm->tokens_per_s * sm->ms / 1e3;
    s->flops_s = sm->tflops * sm->ms, s->mfu_ms = sm->mfu * sm->ms;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void summary_print(summary *s, int64_t start, int cold, ct_metrics *mx) {
    if (s->n > 0) {
        qsort(s->ms, (size_t)s->n, sizeof *s->ms, cmp_double);
        double med = s->n % 2 ? s->ms[s->n / 2] : 0.5 * (s->ms[s->n / 2 - 1] + s->ms[s->n / 2]);
        double tps = s->tokens / (med / 1e3), tf = s->flops_s / med, mfu = s->mfu_ms / med;
        printf("summary  | steps %lld-%lld: median %.1f ms per step, %.0f tok/s, %.4f TFLOP/s, "
               "MFU %.2f%% (step %lld left out: %.1f ms%s)\n",
               (long long)start + 2, (long long)start + 1 + s->n, med, tps, tf, 100 * mfu,
               (long long)start + 1, s->first_ms,
               cold ? ", it built programs on first use" : ", first use of every kernel");
        char f[256];
        snprintf(f, sizeof f,
                 "\"steps\":%d,\"median_ms\":%.4f,\"tokens_per_s\":%.2f,\"tflops\":%.6f,"
                 "\"mfu\":%.6f,\"first_ms\":%.4f,\"first_built\":%s",
                 s->n, med, tps, tf, mfu, s->first_ms, cold ? "true" : "false");
        ct_metrics_record(mx, "summary", f);
    }
    free(s->ms);
}

/* --layout auto: after a few steps (and at the end), the predicted step time beside the median
 * of those measured so far, leaving out the first (kernels compile in it). */
static void plan_check(const ct_step_metrics *sm, int64_t k, int last, ct_metrics *mx) {
    static double ms[4096];
    static int n = 0;
    if (k >= 1 && n < 4096) ms[n++] = sm->ms;
    if (!(n == 5 || (last && n > 0 && n != 5))) return;
    double v[4096];
    memcpy(v, ms, sizeof(double) * (size_t)n);
    for (int i = 1; i < n; i++) /* insertion sort: n is small */
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double x = v[j];
            v[j] = v[j - 1], v[j - 1] = x;
        }
    double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    printf("layout auto: %s predicted %.1f ms per step, measured %.1f ms (median of %d step%s after "
           "the first; %+.1f %%)\n",
           g_plan_name, g_plan_ms, med, n, n > 1 ? "s" : "", 100 * (med / g_plan_ms - 1));
    char f[256];
    snprintf(f, sizeof f, "\"layout\":\"%s\",\"predicted_ms\":%.4f,\"measured_ms\":%.4f,\"steps\":%d",
             g_plan_name, g_plan_ms, med, n);
    ct_metrics_record(mx, "plan", f);
}

/* --layout auto: the planner measures on every worker (collective over the world), ranks the
 * layouts and sets p's layout flags to the fastest one that fits; the leader prints the table. */
static void plan_layout(ct_train_params *p, ct_topo *topo, int W, int argc, char **argv) {
    ct_err err = {0};
    ct_gpt_config cfg;
    if (ct_train_config(p, &cfg, &err) != CT_OK) die(2, "%s", err.msg);
    int D = p->devices_per_rank, leader = !topo || ct_topo_rank(topo) == 0;
    ct_plan_problem pb;
    ct_plan_problem_from_params(&pb, p, &cfg, W, D);
    ct_plan_problem_fix(&pb, p);
    ct_plan_needs *need = NULL;
    if (ct_plan_needs_make(&pb, &need, &err) != CT_OK) die(2, "--layout auto: %s", err.msg);
    ct_plan_costs costs;
    double mem_min = 0, alloc_min = 0;
    if (leader) printf("layout auto: measuring the devices and links of the %d worker%s: %d "
                       "compute shapes, %d links ...\n",
                       W, W > 1 ? "s" : "", need->ncomp, W > 1 && topo ? need->nlink : 0);
    double t0 = ct_time_now();
    ct_status st = ct_plan_measure(topo, p, &pb, need, W > 1 && topo, NULL, 5,
                                   leader && isatty(STDERR_FILENO) ? stderr : NULL, &costs,
                                   &mem_min, &alloc_min, &err);
    if (st != CT_OK) die(st == CT_ERR_ARG ? 2 : 1, "--layout auto: %s", err.msg);
    if (leader) printf("layout auto: measured in %.1f s\n", ct_time_now() - t0);
    if (pb.mem_cap <= 0) pb.mem_cap = mem_min;
    ct_plan_limit_alloc(&pb, alloc_min);
    ct_plan_result res;
    if (ct_plan_rank(&pb, &costs, &res, &err) != CT_OK) die(2, "--layout auto: %s", err.msg);
    if (leader) ct_plan_print(stdout, &pb, &costs, &res, 8);
    if (res.nfit == 0) {
        char why[512];
        ct_plan_why_none(&pb, &res, why, sizeof why);
        die(2, "--layout auto: %s", why);
    }
    ct_plan_apply(&res.e[0].lay, p);
    g_plan_ms = res.e[0].est.step_ms;
    ct_plan_layout_name(&res.e[0].lay, g_plan_name, sizeof g_plan_name);
    ct_plan_result_free(&res);
    ct_plan_costs_free(&costs);
    ct_plan_needs_free(need);
}

/* --save-async: wait for the checkpoint in flight and say it is saved (the leader). */
static void saved_async(ct_trainer *t, int leader) {
    char path[1300];
    double secs = 0;
    if (ct_trainer_save_wait(t, path, sizeof path, &secs) != CT_OK)
        die(1, "checkpoint not written: %s", ct_trainer_errmsg(t));
    if (leader && path[0]) printf("saved checkpoint %s (written in the background in %.2f s)\n", path, secs);
}

/* A worker's end: 0, or the exit status of an end every worker reached together (a collective
 * decision, so nobody waits on anybody and no MPI_Abort is needed). */
static int worker(ct_train_run *run, const ct_train_params *pp, int thread, int rank) {
    ct_train_params p = *pp;
    g_worker = rank * pp->devices_per_rank + thread;
    ct_err err = {0};
    ct_trainer *t = NULL;
    ct_status st = ct_trainer_create(&t, run, thread, &err);
    if (st != CT_OK) die(setup_code(st), "%s", err.msg);
    if (g_kill.worker == g_worker) ct_trainer_test_save_hook(t, kill_hook, NULL);
    int leader = ct_trainer_leader(t);
    int sampler = leader || ct_trainer_sample_collective(t);
    {
        ct_train_report rep;
        if (ct_trainer_report(t, &rep) != CT_OK) die(1, "%s", ct_trainer_errmsg(t));
        if (leader) train_report_print(stdout, &rep);
        ct_train_report_free(&rep);
    }
    int64_t start = ct_trainer_start(t);
    if (leader && start > p.steps)
        fprintf(stderr, "train_gpt: the checkpoint is at step %lld, past --steps %d: nothing to "
                        "train\n", (long long)start, p.steps);
    /* a cold kernel cache: the first step waits for the rest (each kernel's first launch, where
     * drivers such as PoCL compile it for the launch's shape; CLBlast's GEMM programs) */
    int cold = ct_trainer_built_programs(t) > 0;
    if (leader && cold && start < p.steps) {
        fprintf(stderr, "train_gpt: step %lld also waits for the device's compiler: CLBlast's "
                        "GEMM programs and each kernel's first launch (about a minute on a 2-core "
                        "CPU, once); the summary leaves that step out\n",
                (long long)start + 1);
        fflush(stderr);
    }
    summary sum = {0};
    for (int64_t step = start; step < p.steps; step++) {
        ct_step_metrics sm;
        st = ct_trainer_step(t, &sm);
        if (st == CT_ERR_NONFINITE) { /* every worker stops here: the leader says why */
            if (leader) {
                fprintf(stderr, "train_gpt: error: %s\n", ct_trainer_errmsg(t));
                fflush(stderr);
            }
            ct_trainer_free(t);
            return 1;
        }
        if (st != CT_OK) die(1, "step %lld failed: %s", (long long)step + 1, ct_trainer_errmsg(t));
        if (leader && sm.skipped)
            fprintf(stderr,
                    "train_gpt: warning: step %lld skipped: gradient norm %g, loss %g (not "
                    "finite); parameters and optimizer state unchanged (%d in a row; --max-skips "
                    "%d)\n",
                    (long long)step + 1, sm.grad_norm, sm.loss, sm.skips_run, p.max_skips);
        if (leader && (step % p.log_every == 0 || step + 1 == p.steps)) {
            char moe[96] = "";
            if (sm.moe)
                snprintf(moe, sizeof moe, " | aux %.4f drop %.3f max load %.2f", sm.aux_loss,
                         sm.drop_frac, sm.max_load);
            printf("step %5lld/%d | loss %.6f | lr %.3e | norm %.4f | %7.1f ms | %8.0f tok/s | "
                   "%.4f TFLOP/s | MFU %5.2f%% | mem %.1f MiB%s%s\n",
                   (long long)step + 1, p.steps, sm.loss, sm.lr, sm.grad_norm, sm.ms,
                   sm.tokens_per_s, sm.tflops, 100 * sm.mfu, sm.mem_bytes / 1048576.0, moe,
                   step == start && cold ? " | built programs" : "");
        }
        if (leader) summary_add(&sum, &sm, step == start);
        int64_t done = step + 1;
        int last = done == p.steps;
        if (leader && g_plan_ms > 0) plan_check(&sm, step - start, last, ct_trainer_metrics(t));
        if (p.eval_every > 0 && (done % p.eval_every == 0 || last)) {
            double vl = 0;
            if (ct_trainer_eval(t, &vl) != CT_OK) die(1, "%s", ct_trainer_errmsg(t));
            if (leader && !isnan(vl)) {
                /* bytes (--text, the embedded corpus): the loss in bits per byte too */
                int bytes = !p.data[0];
                if (bytes)
                    printf("eval  %5lld | val loss %.6f | %.4f bits per byte\n", (long long)done, vl,
                           vl / log(2.0));
                else
                    printf("eval  %5lld | val loss %.6f\n", (long long)done, vl);
                char f[128];
                if (bytes)
                    snprintf(f, sizeof f, "\"step\":%lld,\"val_loss\":%.9g,\"val_bpb\":%.9g",
                             (long long)done, vl, vl / log(2.0));
                else
                    snprintf(f, sizeof f, "\"step\":%lld,\"val_loss\":%.9g", (long long)done, vl);
                ct_metrics_record(ct_trainer_metrics(t), "eval", f);
            }
        }
        if (sampler && p.sample_every > 0 && done % p.sample_every == 0 && !last)
            print_sample(t, &p, done);
        if (p.save[0] && ((p.save_every > 0 && done % p.save_every == 0) || last)) {
            char path[1300];
            /* parameters, Adam's m and v: 12 bytes a parameter; a large one says it is writing */
            double mib = 12.0 * ct_model_num_params(ct_trainer_model(t)) / 1048576.0;
            if (p.save_async) saved_async(t, leader);
            if (leader && mib >= 256 && !p.save_async) {
                printf("writing checkpoint (step %lld, %.0f MiB) ...\n", (long long)done, mib);
                fflush(stdout);
            }
            double t0 = ct_time_now();
            if (ct_trainer_save(t, path, sizeof path) != CT_OK)
                die(1, "checkpoint not written: %s", ct_trainer_errmsg(t));
            const char *form = ct_trainer_save_form(t);
            if (leader && p.save_async)
                printf("saving checkpoint %s in the background (step %lld, %.1f MiB, %s; on the "
                       "host after %.2f s)\n",
                       path, (long long)done, mib, form, ct_time_now() - t0);
            else if (leader)
                printf("saved checkpoint %s (step %lld, %.1f MiB, %s, in %.2f s)\n", path,
                       (long long)done, mib, form, ct_time_now() - t0);
        }
    }
    if (p.save_async) saved_async(t, leader);
    if (leader) summary_print(&sum, start, cold, ct_trainer_metrics(t));
    {
        ct_pipeline_bubble bub;
        if (ct_trainer_pipeline_report(t, &bub) != CT_OK) die(1, "%s", ct_trainer_errmsg(t));
        if (leader) train_bubble_print(stdout, &bub);
    }
    if (p.dp > 1 && leader && p.steps > start) {
        ct_exec_times tm;
        ct_exec_times_get(ct_trainer_exec(t), &tm);
        printf("data parallel: %lld steps, exposed communication %.1f ms, communication busy %.1f "
               "ms, optimizer %.1f ms (totals on worker 0)\n",
               (long long)(p.steps - start), tm.exposed_ms, tm.busy_ms, tm.optimizer_ms);
    }
    if (p.tp > 1 && leader && p.steps > start) {
        ct_exec_times tm;
        ct_tp_stats ts;
        ct_exec_times_get(ct_trainer_exec(t), &tm);
        ct_tp_stats_get(ct_model_tp(ct_trainer_model(t)), &ts);
        printf("tensor parallel: %lld steps, compute %.1f ms, TP collectives %.1f ms (%.1f ms of "
               "it beside a weight-gradient GEMM), %ld all-reduces, %ld reduce-scatters, %ld "
               "all-gathers, %.2f MB sent per worker (totals on worker 0)\n",
               (long long)(p.steps - start), tm.compute_ms, tm.tp_comm_ms, tm.tp_overlap_ms,
               ts.calls[0], ts.calls[1], ts.calls[2], ts.wire_bytes / 1e6);
    }
    /* The end: the model file, a sample, the trace. */
    if (p.save_model[0]) {
        if (ct_trainer_save_model(t) != CT_OK) die(1, "model not written: %s", ct_trainer_errmsg(t));
        if (leader)
            printf("saved model %s (%s, %s)\n", p.save_model,
                   ct_model_file_format_name(p.save_model), p.save_dtype);
    }
    if (sampler && p.sample_len > 0) print_sample(t, &p, p.steps);
    if (ct_trainer_finish(t) != CT_OK) die(1, "%s", ct_trainer_errmsg(t));
    if (leader && p.trace[0]) printf("wrote trace %s (open it in ui.perfetto.dev)\n", p.trace);
    ct_trainer_free(t);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (ct_opts_wants_help(argc - 1, argv + 1)) {
        usage(stdout);
        return 0;
    }
    ct_err err = {0};
    ct_train_params p = ct_train_params_default();
    ct_lr_schedule sched;
    if (ct_train_params_parse(&p, argc - 1, argv + 1, &err))
        die(2, "%s", err.msg);
    int auto_layout = !strcmp(p.layout, "auto");
    {
        /* --layout auto: the layout flags given only pin the planner's choices; checked once chosen */
        ct_train_params q = p;
        if (auto_layout) {
            q.dp = q.tp = q.pp = q.virtual_stages = q.ep = 1;
            q.zero = q.sequence_parallel = 0;
            q.schedule = "1f1b";
        }
        if (ct_train_params_check(&q, &sched, &err)) die(2, "%s", err.msg);
    }

    const char *fault = getenv("CT_TEST_FAIL_ALLOC");
    if (fault && *fault) {
        if (fault_parse(fault)) die(2, "CT_TEST_FAIL_ALLOC='%s': expected W:N[:host|device]", fault);
        ct_alloc_set_hook(fault_hook, NULL);
    }
    const char *kill_at = getenv("CT_TEST_SAVE_KILL");
    if (kill_at && *kill_at && kill_parse(kill_at))
        die(2, "CT_TEST_SAVE_KILL='%s': expected W:STEP:shard|manifest", kill_at);

    /* Workers: MPI ranks x --devices-per-rank. MPI is started only when there is more than one
     * worker (or mpiexec started several ranks). */
    int launched = ct_launcher_ranks_env(); /* mpiexec's or srun's tasks, before MPI starts */
    ct_topo *topo = NULL;
    int tp = p.tp; /* the layout is dp x tp x pp */
    int workers = p.dp * tp * p.pp;
    if (auto_layout) /* the workers the run has: ranks x devices per rank */
        workers = launched * p.devices_per_rank;
    if (workers > 1 || p.devices_per_rank > 1 || launched > 1) {
        if (ct_topo_create(&topo, &argc, &argv, p.devices_per_rank, &err)) die(2, "%s", err.msg);
        if (ct_topo_launcher_check(topo, &err)) die(2, "%s", err.msg);
        g_mpi_ranks = ct_topo_nranks(topo);
        double tmo = CT_COMM_TIMEOUT_DEFAULT; /* CT_COMM_TIMEOUT: the one place it is read */
        if (ct_comm_timeout_env(&tmo, &err)) die(2, "%s", err.msg);
        ct_topo_set_timeout(topo, tmo);
        if (auto_layout) {
            plan_layout(&p, topo, ct_topo_world_size(topo), argc, argv);
            if (ct_train_params_check(&p, &sched, &err)) die(2, "--layout auto chose: %s", err.msg);
            tp = p.tp;
            workers = p.dp * tp * p.pp;
        }
        int W = ct_topo_world_size(topo);
        if (W != workers) {
            /* every rank sees this: end together (MPI_Abort could cut the message off) */
            if (tp > 1)
                fprintf(stderr,
                        "train_gpt: error: --dp %d x --tp %d x --pp %d = %d does not match the %d "
                        "workers (%d MPI ranks x --devices-per-rank %d): the layout must use every "
                        "worker once\n",
                        p.dp, tp, p.pp, workers, W, ct_topo_nranks(topo), p.devices_per_rank);
            else if (p.pp > 1)
                fprintf(stderr,
                        "train_gpt: error: --dp %d x --pp %d = %d does not match the %d workers "
                        "(%d MPI ranks x --devices-per-rank %d): the layout must use every "
                        "worker once\n",
                        p.dp, p.pp, workers, W, ct_topo_nranks(topo), p.devices_per_rank);
            else
                fprintf(stderr,
                        "train_gpt: error: --dp %d does not match the %d workers (%d MPI ranks x "
                        "--devices-per-rank %d): data parallelism runs over every worker, so --dp "
                        "must equal ranks x devices (or --dp x --pp with a pipeline)\n",
                        p.dp, W, ct_topo_nranks(topo), p.devices_per_rank);
            fflush(stderr);
            ct_topo_free(topo);
            exit(2);
        }
        if (ct_topo_rank(topo) > 0) setvbuf(stdout, NULL, _IOFBF, 1 << 16);
    }
    if (auto_layout && !topo) {
        plan_layout(&p, NULL, 1, argc, argv);
        if (ct_train_params_check(&p, &sched, &err)) die(2, "--layout auto chose: %s", err.msg);
    }
    ct_train_run *run = NULL;
    ct_status st = ct_train_run_open(&run, &p, topo, ct_corpus, ct_corpus_count,
                                     stderr, &err);
    if (st != CT_OK) die(setup_code(st), "%s", err.msg);

    /* One worker per device of this process. */
    int code = 0, rank = topo ? ct_topo_rank(topo) : 0;
    if (p.devices_per_rank > 1) {
#pragma omp parallel num_threads(p.devices_per_rank) reduction(max : code)
        code = worker(run, &p, omp_get_thread_num(), rank);
    } else {
        code = worker(run, &p, 0, rank);
    }
    ct_train_run_free(run);
    ct_topo_free(topo);
    return code;
}
