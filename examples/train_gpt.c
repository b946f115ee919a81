/* train_gpt - train a GPT-2 model on one OpenCL device.
 *
 * Data: llm.c token shards (--data GLOB), a text file as bytes (--text FILE), or, with neither,
 * the corpus embedded at build time (the project's own headers and docs). Model: new (--layers
 * --heads --dim --seq --vocab), or an llm.c GPT-2 file (--init), or a checkpoint (--resume).
 * One log line per step; JSON Lines with --metrics; checkpoints with --save; the final model as
 * an llm.c file with --save-model; ends by printing a sample.
 *
 * Exit status: 0 done; 2 bad input (flag, value, shape, file, data, or a device too small),
 * always with a message naming the problem; 1 a failure during training. Every file it writes
 * appears complete or not at all (temporary file + rename). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <mpi.h>
#include <omp.h>

#include "ct_cl.h"
#include "ct_engine.h"
#include "ct_engine_io.h"
#include "ct_engine_train.h"
#include "ct_parallel.h"

/* The embedded corpus (examples/engine.cmake). */
extern const ct_cl_source ct_corpus[];
extern const int ct_corpus_count;

/* Set once MPI runs with several ranks: a fatal error on one rank then ends every rank through
 * MPI_Abort instead of leaving the others waiting in a collective. */
static int g_mpi_ranks = 0;

static void die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "train_gpt: error: %s\n", msg);
    fflush(stderr);
    if (g_mpi_ranks > 1) MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: train_gpt [--flag VALUE]...\n"
            "Trains a GPT-2 model on one OpenCL device, or data-parallel on several (--dp N, run\n"
            "under mpiexec and/or with --devices-per-rank D). With no flags: a small model on the text\n"
            "embedded in the binary, ending with a sample. Exit status 2 on bad input.\n\n");
    ct_opts_help(f, ct_train_opts, ct_train_opts_count);
    fprintf(f, "\nThe device may also be chosen with the environment variable CT_DEVICE.\n");
}

/* Bytes of the embedded corpus, concatenated (malloc'd). */
static unsigned char *corpus_bytes(size_t *n) {
    size_t total = 0;
    for (int i = 0; i < ct_corpus_count; i++) total += ct_corpus[i].len;
    unsigned char *b = (unsigned char *)malloc(total ? total : 1);
    if (!b) return NULL;
    size_t at = 0;
    for (int i = 0; i < ct_corpus_count; i++) {
        memcpy(b + at, ct_corpus[i].text, ct_corpus[i].len);
        at += ct_corpus[i].len;
    }
    *n = total;
    return b;
}

/* An output file's directory must exist before training starts, not fail at the end. */
static void check_out_dir(const char *path, const char *flag) {
    if (!path || !path[0]) return;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) return;
    if (slash == dir) slash[1] = 0;
    else *slash = 0;
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        die(2, "%s %s: the directory %s does not exist", flag, path, dir);
}

/* Whether --name was given on the command line (as "--name V" or "--name=V"). */
static int flag_given(int argc, char **argv, const char *name) {
    size_t n = strlen(name);
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], "--", 2) && !strncmp(argv[i] + 2, name, n) &&
            (argv[i][2 + n] == 0 || argv[i][2 + n] == '='))
            return 1;
    return 0;
}

/* A shape flag given together with --init/--resume must agree with the file's model. */
static void check_shape_flags(int argc, char **argv, const ct_train_params *p,
                              const ct_gpt_config *c, const char *origin) {
    struct {
        const char *flag;
        int given, file;
    } f[] = {{"layers", p->layers, c->layers}, {"heads", p->heads, c->heads},
             {"dim", p->dim, c->channels},     {"vocab", p->vocab, c->vocab},
             {"max-seq", p->max_seq, c->max_seq}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (flag_given(argc, argv, f[i].flag) && f[i].given != f[i].file)
            die(2, "--%s %d contradicts the model of %s (%d); leave it out", f[i].flag, f[i].given,
                origin, f[i].file);
}

/* Warn when a resumed run changes a flag that shapes the optimisation (the checkpoint's META
 * section holds the writing run's flags as "flag=value" lines). */
static void warn_changed_flags(const char *meta, const ct_train_params *p) {
    static const char *const keys[] = {"steps", "lr", "lr-schedule", "warmup", "min-lr-frac",
                                       "beta1", "beta2", "eps", "weight-decay", "grad-clip"};
    size_t need = ct_opts_format(NULL, 0, ct_train_opts, ct_train_opts_count, p);
    char *now = (char *)malloc(need + 1);
    if (!now || !meta) {
        free(now);
        return;
    }
    ct_opts_format(now, need + 1, ct_train_opts, ct_train_opts_count, p);
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        char key[64];
        snprintf(key, sizeof key, "%s=", keys[k]);
        const char *a = strstr(meta, key), *b = strstr(now, key);
        /* Match whole lines only. */
        while (a && a != meta && a[-1] != '\n') a = strstr(a + 1, key);
        while (b && b != now && b[-1] != '\n') b = strstr(b + 1, key);
        if (!a || !b) continue;
        size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
        if (la != lb || strncmp(a, b, la) != 0)
            fprintf(stderr, "train_gpt: warning: the checkpoint was written with --%.*s, this run "
                            "uses --%.*s\n", (int)la, a, (int)lb, b);
    }
    free(now);
}

/* Parameter and value checks that need no file or device. */
static void check_params(const ct_train_params *p, ct_lr_schedule *sched) {
    ct_err err = {0};
    if (ct_lr_schedule_parse(p->lr_schedule, sched, &err)) die(2, "%s", err.msg);
#define NEED(cond, ...)                          \
    do {                                         \
        if (!(cond)) die(2, __VA_ARGS__);        \
    } while (0)
    NEED(p->layers > 0, "--layers must be positive (got %d)", p->layers);
    NEED(p->heads > 0, "--heads must be positive (got %d)", p->heads);
    NEED(p->dim > 0, "--dim must be positive (got %d)", p->dim);
    NEED(p->seq > 0, "--seq must be positive (got %d)", p->seq);
    NEED(p->max_seq >= 0, "--max-seq must be >= 0 (got %d)", p->max_seq);
    NEED(p->vocab >= 0, "--vocab must be >= 0 (got %d)", p->vocab);
    NEED(p->batch > 0, "--batch must be positive (got %d)", p->batch);
    NEED(p->total_batch >= 0, "--total-batch must be >= 0 (got %d)", p->total_batch);
    NEED(p->steps >= 0, "--steps must be >= 0 (got %d)", p->steps);
    NEED(p->lr > 0, "--lr must be positive (got %g)", p->lr);
    NEED(p->warmup >= 0, "--warmup must be >= 0 (got %d)", p->warmup);
    NEED(p->min_lr_frac >= 0 && p->min_lr_frac <= 1, "--min-lr-frac must be in [0, 1] (got %g)",
         p->min_lr_frac);
    NEED(p->beta1 >= 0 && p->beta1 < 1, "--beta1 must be in [0, 1) (got %g)", p->beta1);
    NEED(p->beta2 >= 0 && p->beta2 < 1, "--beta2 must be in [0, 1) (got %g)", p->beta2);
    NEED(p->eps > 0, "--eps must be positive (got %g)", p->eps);
    NEED(p->weight_decay >= 0, "--weight-decay must be >= 0 (got %g)", p->weight_decay);
    NEED(p->grad_clip >= 0, "--grad-clip must be >= 0 (0 = off; got %g)", p->grad_clip);
    NEED(p->shuffle == 0 || p->shuffle == 1, "--shuffle must be 0 or 1 (got %d)", p->shuffle);
    NEED(p->eval_every >= 0, "--eval-every must be >= 0 (got %d)", p->eval_every);
    NEED(p->eval_batches > 0, "--eval-batches must be positive (got %d)", p->eval_batches);
    NEED(p->sample_every >= 0, "--sample-every must be >= 0 (got %d)", p->sample_every);
    NEED(p->sample_len >= 0, "--sample-len must be >= 0 (got %d)", p->sample_len);
    NEED(p->temperature >= 0, "--temperature must be >= 0 (got %g)", p->temperature);
    NEED(p->top_k >= 0, "--top-k must be >= 0 (got %d)", p->top_k);
    NEED(p->save_every >= 0, "--save-every must be >= 0 (got %d)", p->save_every);
    NEED(!(p->save_every > 0 && !p->save[0]), "--save-every needs --save DIR");
    NEED(p->val_frac >= 0 && p->val_frac < 1, "--val-frac must be in [0, 1) (got %g)", p->val_frac);
    NEED(p->peak_tflops >= 0, "--peak-tflops must be >= 0 (got %g)", p->peak_tflops);
    NEED(p->mem_cap_gb >= 0, "--mem-cap-gb must be >= 0 (got %g)", p->mem_cap_gb);
    NEED(p->log_every > 0, "--log-every must be positive (got %d)", p->log_every);
    NEED(p->dp >= 1, "--dp must be >= 1 (got %d)", p->dp);
    NEED(p->devices_per_rank >= 1, "--devices-per-rank must be >= 1 (got %d)", p->devices_per_rank);
    NEED(p->zero >= 0 && p->zero <= 3, "--zero must be 0, 1, 2 or 3 (got %d)", p->zero);
    NEED(!(p->zero > 0 && p->dp < 2),
         "--zero %d needs data parallelism (--dp >= 2): ZeRO shards over the DP group", p->zero);
    NEED(p->batch % p->dp == 0,
         "--dp %d does not divide --batch %d: each data-parallel worker takes an equal, contiguous "
         "share of every micro-batch's rows",
         p->dp, p->batch);
    NEED(p->bucket_mb > 0, "--bucket-mb must be positive (got %g)", p->bucket_mb);
    NEED(p->overlap == 0 || p->overlap == 1, "--overlap must be 0 or 1 (got %d)", p->overlap);
    NEED(!(p->data[0] && p->text[0]), "--data and --text are exclusive: give one");
    NEED(!(p->init[0] && p->resume[0]),
         "--init and --resume are exclusive (a checkpoint already holds the model)");
    long long bt = (long long)p->batch * p->seq;
    NEED(bt <= 1 << 30, "--batch x --seq = %lld tokens is too large", bt);
    NEED(p->total_batch == 0 || p->total_batch % bt == 0,
         "--total-batch %d is not a multiple of --batch x --seq = %lld", p->total_batch, bt);
#undef NEED
    check_out_dir(p->save_model, "--save-model");
    check_out_dir(p->metrics, "--metrics");
}

/* The device's GEMM rate at one shape: the best of repeated runs over at least 0.3 s. */
static double gemm_tflops(ct_device *dev, int M, int N, int K) {
    ct_buffer *a = NULL, *b = NULL, *c = NULL;
    double best = 0;
    if (ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "gemm probe A", (size_t)M * K * 4, &a) ||
        ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "gemm probe B", (size_t)N * K * 4, &b) ||
        ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "gemm probe C", (size_t)M * N * 4, &c))
        goto done;
    double start = now_s();
    for (int rep = 0; rep < 200 && (rep < 4 || now_s() - start < 0.3); rep++) {
        double t0 = now_s();
        if (ct_gemm(dev, 0, 1, (size_t)M, (size_t)N, (size_t)K, 1.0f, ct_buffer_mem(a), 0,
                    (size_t)K, ct_buffer_mem(b), 0, (size_t)K, 0.0f, ct_buffer_mem(c), 0,
                    (size_t)N, NULL) ||
            ct_device_finish(dev))
            goto done;
        double dt = now_s() - t0;
        if (rep > 0 && 2.0 * M * N * K / dt / 1e12 > best) best = 2.0 * M * N * K / dt / 1e12;
    }
done:
    ct_buffer_free(a);
    ct_buffer_free(b);
    ct_buffer_free(c);
    return best;
}

/* The peak for MFU: the best GEMM rate over the model's forward matmul shapes (the kernels are
 * the ones training compiles anyway). A busy machine makes it low, so MFU may read high. */
static double measure_gemm_tflops(ct_device *dev, const ct_gpt_config *c, int BT) {
    int C = c->channels;
    int shapes[3][3] = {{BT, 3 * C, C}, {BT, 4 * C, C}, {BT, c->padded_vocab, C}};
    double best = 0;
    for (int i = 0; i < 3; i++) {
        double t = gemm_tflops(dev, shapes[i][0], shapes[i][1], shapes[i][2]);
        if (t > best) best = t;
    }
    return best;
}

static uint64_t mem_in_use(ct_device *dev) {
    ct_mem_stats s;
    ct_device_mem_stats(dev, &s);
    return s.total_current;
}

/* Mean loss over the first `batches` windows of the validation stream. */
static ct_status evaluate(ct_model *m, ct_loader *vl, int batches, int row0, int B, int T,
                          int *in, int *tg, double *out) {
    double sum = 0;
    ct_err err = {0};
    int64_t W = ct_loader_windows(vl);
    int n = batches < W ? batches : (int)W;
    for (int i = 0; i < n; i++) {
        float loss = 0;
        ct_status st = ct_loader_rows(vl, i, row0, B, in, tg, &err);
        if (st == CT_OK) st = ct_model_forward(m, in, tg, B, T, &loss);
        if (st != CT_OK) return st;
        sum += loss;
    }
    *out = sum / n;
    return CT_OK;
}

/* print = 0: generate only (a ZeRO-3 worker other than the leader: every forward gathers
 * parameters collectively, so every worker runs the same forwards). */
static void sample_and_print(ct_model *m, const ct_train_params *p, int T, const ct_tokenizer *tok,
                             ct_rng *rng, int64_t step, ct_metrics *mx, int print) {
    const ct_gpt_config *c = ct_model_config(m);
    ct_err err = {0};
    int cap = p->sample_len + 1024;
    int *tokens = (int *)malloc((size_t)cap * sizeof(int));
    int n = 0;
    if (!tokens) return;
    if (ct_prompt_parse(p->prompt, c->vocab, tok ? ct_tokenizer_eot(tok) : -1, tokens, 1024, &n,
                        &err) ||
        ct_generate(m, tokens, n, n + p->sample_len, T, p->temperature, p->top_k, rng, &err)) {
        if (p->zero >= 3) die(1, "sampling failed: %s", err.msg); /* the others would wait */
        fprintf(stderr, "train_gpt: sampling failed: %s\n", err.msg);
        free(tokens);
        return;
    }
    if (!print) {
        free(tokens);
        return;
    }
    printf("---- sample at step %lld (temperature %g, top-k %d) ----\n", (long long)step,
           p->temperature, p->top_k);
    ct_print_tokens(stdout, tokens, n + p->sample_len, c->vocab, tok);
    printf("----\n");
    fflush(stdout);
    char fields[64];
    snprintf(fields, sizeof fields, "\"step\":%lld,\"tokens\":%d", (long long)step, p->sample_len);
    ct_metrics_record(mx, "sample", fields);
    free(tokens);
}

/* Gathered state (table order): collective over the DP group; only the leader writes. */
static void save_checkpoint(ct_model *m, ct_dp *dp, int leader, const ct_train_params *p,
                            int64_t step, int accum, const ct_rng *rng, size_t data_tokens) {
    ct_err err = {0};
    ct_checkpoint ck;
    memset(&ck, 0, sizeof ck);
    ck.cfg = *ct_model_config(m);
    ck.nparams = ct_model_num_params(m);
    ck.step = step;
    memcpy(ck.rng, rng->s, sizeof ck.rng);
    ck.loader_B = p->batch;
    ck.loader_T = p->seq;
    ck.loader_accum = accum;
    ck.loader_shuffle = p->shuffle;
    ck.loader_seed = (uint64_t)p->seed;
    ck.data_tokens = data_tokens;
    ck.params = (float *)malloc(ck.nparams * 4);
    ck.m = (float *)malloc(ck.nparams * 4);
    ck.v = (float *)malloc(ck.nparams * 4);
    size_t need = ct_opts_format(NULL, 0, ct_train_opts, ct_train_opts_count, p);
    ck.meta = (char *)malloc(need + 1);
    if (!ck.params || !ck.m || !ck.v || !ck.meta) die(1, "no memory for a checkpoint");
    ct_opts_format(ck.meta, need + 1, ct_train_opts, ct_train_opts_count, p);
    if (dp) {
        if (ct_dp_gather_state(dp, ck.params, ck.m, ck.v))
            die(1, "gathering the model for a checkpoint failed: %s", ct_dp_errmsg(dp));
    } else if (ct_model_get_params(m, ck.params, ck.nparams) ||
               ct_model_get_optimizer(m, ck.m, ck.v, ck.nparams)) {
        die(1, "reading the model for a checkpoint failed: %s", ct_model_errmsg(m));
    }
    if (leader) {
        char path[1300];
        if (ct_checkpoint_save_dir(p->save, &ck, path, sizeof path, &err))
            die(1, "checkpoint not written: %s", err.msg);
        printf("saved checkpoint %s (step %lld)\n", path, (long long)step);
    }
    ct_checkpoint_release(&ck);
}

/* What the workers of this process share (read-only once the workers start). */
typedef struct run_ctx {
    ct_train_params p;
    ct_lr_schedule sched;
    ct_gpt_config cfg;
    int accum, argc;
    char **argv;
    const char *origin;
    char ckpath[1300];
    ct_checkpoint ck; /* when resuming */
    float *init_params;
    size_t init_n;
    ct_data *train, *val;
    ct_tokenizer *tok;
    ct_device_info *list;
    int ndev, *picks, npicks;
    ct_topo *topo; /* NULL: one worker, no MPI */
    int W;         /* workers = DP size */
} run_ctx;

/* Model-state bytes per worker the formulas give for Psi parameters. */
static double expected_model_state(double psi, int N, int zero) {
    switch (zero) {
    case 1: return 8 * psi + 8 * psi / N;
    case 2: return 4 * psi + 12 * psi / N;
    case 3: return 16 * psi / N;
    default: return 16 * psi;
    }
}

static void worker(run_ctx *x, int thread) {
    const ct_train_params *pp = &x->p;
    ct_train_params p = x->p;
    const ct_gpt_config cfg = x->cfg;
    int accum = x->accum;
    ct_err err = {0};
    ct_status st = CT_OK;
    ct_comm *world = NULL;
    int wrank = 0, N = x->W;
    if (x->topo) {
        if ((st = ct_comm_world(x->topo, thread, &world)) != CT_OK)
            die(1, "worker %d: no communicator", thread);
        wrank = ct_comm_rank(world);
    }
    int leader = wrank == 0;

    /* 3. Device and model: worker w opens the device its topology place names among those the
     * spec selects; CPU devices (PoCL) exist once per process, so there the thread index counts. */
    int k = x->topo ? ct_topo_device_index(x->topo, thread) : 0;
    if (k >= x->npicks && x->list[x->picks[0]].type == CL_DEVICE_TYPE_CPU) k = thread;
    if (k >= x->npicks)
        die(2, "worker %d needs device %d of those --device selects, only %d exist", wrank, k,
            x->npicks);
    const ct_device_info *info = &x->list[x->picks[k]];
    ct_device_opts dopts = ct_device_opts_default();
    dopts.mem_cap = (uint64_t)(p.mem_cap_gb * 1073741824.0);
    ct_device *dev = NULL;
    /* One open at a time: applying CLBlast parameters (CLBlastOverrideParameters, inside
     * ct_device_open) from two threads at once crashes in CLBlast's database copy. */
    ct_status ost;
#pragma omp critical(ct_train_device_open)
    ost = ct_device_open(&dev, info, &dopts, &err);
    if (ost) die(2, "%s", err.msg);
    ct_layout layout = {N, 1, 1, p.zero, 1};
    ct_coords coords = {wrank, 0, 0, 0};
    int b = p.batch / N; /* this worker's rows of each micro-batch */
    ct_model *model = NULL;
    st = ct_model_create(&model, &cfg, &layout, &coords, dev, b, p.seq, &err);
    if (st != CT_OK) die(2, "cannot build the model on %s: %s", info->name, err.msg);
    ct_dp *dp = NULL;
    if (world) {
        ct_dp_opts o = ct_dp_opts_default();
        o.bucket_bytes = (size_t)(p.bucket_mb * 1048576.0);
        o.overlap = p.overlap;
        if (ct_dp_create(&dp, model, world, &o, &err)) die(1, "%s", err.msg);
    }
    size_t np = ct_model_num_params(model);
    int64_t start = 0;
    ct_rng rng;
    ct_rng_seed(&rng, (uint64_t)p.seed ^ 0x5A5A5A5A5A5A5A5Aull);
    if (p.resume[0]) {
        if (x->ck.nparams != np)
            die(2, "checkpoint %s holds %zu parameters, the model %zu", x->ckpath, x->ck.nparams,
                np);
        if (ct_model_set_params(model, x->ck.params, np) ||
            ct_model_set_optimizer(model, x->ck.m, x->ck.v, np))
            die(1, "loading the checkpoint into the model failed: %s", ct_model_errmsg(model));
        start = x->ck.step;
        memcpy(rng.s, x->ck.rng, sizeof rng.s);
    } else if (x->init_params) {
        if (x->init_n != np) die(2, "%s holds %zu parameters, the model %zu", p.init, x->init_n, np);
        if (ct_model_set_params(model, x->init_params, np))
            die(1, "loading %s failed: %s", p.init, ct_model_errmsg(model));
    } else if (ct_model_init_random(model, (uint64_t)p.seed)) {
        die(1, "initialisation failed: %s", ct_model_errmsg(model));
    }
    if (leader && start > p.steps)
        fprintf(stderr, "train_gpt: the checkpoint is at step %lld, past --steps %d: nothing to "
                        "train\n", (long long)start, p.steps);
    ct_loader *loader = NULL, *vloader = NULL;
    if (ct_loader_create(&loader, x->train, p.batch, p.seq, accum, p.shuffle, (uint64_t)p.seed,
                         &err))
        die(2, "%s", err.msg);
    if (x->val && ct_loader_create(&vloader, x->val, p.batch, p.seq, 1, 0, 0, &err))
        die(1, "validation loader: %s", err.msg);

    /* 4. Accounting and logs (the leader prints and writes metrics). */
    double flops_tok = ct_train_flops_per_token(&cfg, p.seq);
    double peak = p.peak_tflops;
    const char *peak_src = "--peak-tflops";
    if (peak <= 0 && leader) {
        peak = measure_gemm_tflops(dev, &cfg, b * p.seq);
        peak_src = "measured GEMM rate";
    }
    ct_metrics *mx = NULL;
    if (leader && ct_metrics_open(&mx, p.metrics, start > 0, &err)) die(2, "%s", err.msg);
    uint64_t *mem = (uint64_t *)calloc((size_t)N * CT_MEM__COUNT, sizeof(uint64_t));
    if (!mem) die(1, "no memory");
    if (dp) {
        if (ct_dp_mem_gather(dp, mem)) die(1, "%s", ct_dp_errmsg(dp));
    } else {
        ct_mem_stats ms;
        ct_device_mem_stats(dev, &ms);
        for (int c = 0; c < CT_MEM__COUNT; c++) mem[c] = ms.current[c];
    }
    if (leader) {
        printf("train_gpt: configuration\n");
        ct_opts_log(stdout, ct_train_opts, ct_train_opts_count, pp);
        printf("  device         = %s (%s, %s)\n", info->name, info->platform,
               ct_device_type_str(info->type));
        if (x->topo)
            printf("  workers        = %d (%d ranks x %d devices per rank), data parallel over all"
                   ", ZeRO-%d, %d gradient buckets of <= %g MiB, overlap %s\n",
                   N, ct_topo_nranks(x->topo), ct_topo_devices_per_rank(x->topo), p.zero,
                   ct_dp_num_buckets(dp), p.bucket_mb, p.overlap ? "on" : "off");
        printf("  model          = %s: L=%d NH=%d C=%d V=%d Vp=%d maxT=%d, %zu parameters\n",
               x->origin, cfg.layers, cfg.heads, cfg.channels, cfg.vocab, cfg.padded_vocab,
               cfg.max_seq, np);
        printf("  data           = %s: %zu tokens in %d file(s), %lld steps per epoch\n",
               ct_data_name(x->train), ct_data_count(x->train), ct_data_files(x->train),
               (long long)ct_loader_windows(loader));
        if (x->val)
            printf("  validation     = %s: %zu tokens\n", ct_data_name(x->val),
                   ct_data_count(x->val));
        else
            printf("  validation     = none\n");
        printf("  batch          = %d rows x %d tokens x %d micro-batches = %d tokens per step",
               p.batch, p.seq, accum, p.batch * p.seq * accum);
        if (N > 1) printf(" (%d rows per worker)", b);
        printf("\n  flops/token    = %.4g (6*N + 12*L*C*T)\n", flops_tok);
        printf("  peak           = %.4g TFLOP/s (%s)\n", peak, peak_src);
        printf("  start step     = %lld\n", (long long)start);
        char cfgline[256];
        snprintf(cfgline, sizeof cfgline,
                 "\"params\":%zu,\"layers\":%d,\"heads\":%d,\"dim\":%d,\"vocab\":%d,\"seq\":%d,"
                 "\"tokens_per_step\":%d,\"peak_tflops\":%.6g,\"workers\":%d,\"zero\":%d",
                 np, cfg.layers, cfg.heads, cfg.channels, cfg.vocab, p.seq,
                 p.batch * p.seq * accum, peak, N, p.zero);
        ct_metrics_record(mx, "config", cfgline);
        /* The memory report: one record per worker. */
        double psi = (double)np, want = expected_model_state(psi, N, p.zero);
        printf("  memory per worker (device bytes; comm = host staging), model state expected "
               "%.0f (ZeRO-%d formula for %zu parameters, N = %d):\n",
               want, p.zero, np, N);
        for (int w = 0; w < N; w++) {
            const uint64_t *u = mem + (size_t)w * CT_MEM__COUNT;
            uint64_t state = u[CT_MEM_PARAMS] + u[CT_MEM_GRADS] + u[CT_MEM_OPTIMIZER];
            printf("    worker %d: params %llu grads %llu optimizer %llu activations %llu "
                   "workspace %llu comm %llu | model state %llu (%.3f x formula)\n",
                   w, (unsigned long long)u[CT_MEM_PARAMS], (unsigned long long)u[CT_MEM_GRADS],
                   (unsigned long long)u[CT_MEM_OPTIMIZER],
                   (unsigned long long)u[CT_MEM_ACTIVATIONS],
                   (unsigned long long)u[CT_MEM_WORKSPACE], (unsigned long long)u[CT_MEM_COMM],
                   (unsigned long long)state, (double)state / want);
            char f[512];
            snprintf(f, sizeof f,
                     "\"worker\":%d,\"workers\":%d,\"zero\":%d,\"params\":%llu,\"grads\":%llu,"
                     "\"optimizer\":%llu,\"activations\":%llu,\"workspace\":%llu,\"comm\":%llu,"
                     "\"model_state\":%llu,\"model_state_formula\":%.0f,\"num_params\":%zu",
                     w, N, p.zero, (unsigned long long)u[CT_MEM_PARAMS],
                     (unsigned long long)u[CT_MEM_GRADS], (unsigned long long)u[CT_MEM_OPTIMIZER],
                     (unsigned long long)u[CT_MEM_ACTIVATIONS],
                     (unsigned long long)u[CT_MEM_WORKSPACE], (unsigned long long)u[CT_MEM_COMM],
                     (unsigned long long)state, want, np);
            ct_metrics_record(mx, "memory", f);
        }
    }
    free(mem);

    /* 5. Train. Micro-batch mb of step s is rows [mb*B, (mb+1)*B) of the step; worker w takes
     * rows [mb*B + w*b, mb*B + (w+1)*b) of it. */
    size_t bt = (size_t)b * p.seq;
    int *in = (int *)malloc(bt * sizeof(int)), *tg = (int *)malloc(bt * sizeof(int));
    if (!in || !tg) die(1, "no memory for a batch");
    double tokens_step = (double)p.batch * p.seq * accum;
    for (int64_t step = start; step < p.steps; step++) {
        double t0 = now_s();
        double lr = ct_lr_at(x->sched, p.lr, p.warmup, p.steps, p.min_lr_frac, step);
        double loss_sum = 0;
        float norm = 0;
        st = ct_model_zero_grad(model);
        for (int mb = 0; mb < accum && st == CT_OK; mb++) {
            float loss = 0;
            if (dp && mb == accum - 1) ct_dp_arm(dp);
            st = ct_loader_rows(loader, step, mb * p.batch + wrank * b, b, in, tg, &err);
            if (st != CT_OK) die(1, "step %lld: %s", (long long)step, err.msg);
            if (st == CT_OK) st = ct_model_forward(model, in, tg, b, p.seq, &loss);
            if (st == CT_OK) st = ct_model_backward(model, 1.0f / (float)accum);
            loss_sum += loss;
        }
        if (st != CT_OK) die(1, "step %lld failed: %s", (long long)step, ct_model_errmsg(model));
        float step_loss = (float)(loss_sum / accum);
        if (dp) {
            if (ct_dp_finish_grads(dp) ||
                ct_dp_step(dp, (float)lr, (float)p.beta1, (float)p.beta2, (float)p.eps,
                           (float)p.weight_decay, (float)p.grad_clip, (int)(step + 1), &norm) ||
                ct_dp_average(dp, &step_loss))
                die(1, "step %lld failed: %s", (long long)step, ct_dp_errmsg(dp));
        } else {
            st = ct_model_adamw_step(model, (float)lr, (float)p.beta1, (float)p.beta2,
                                     (float)p.eps, (float)p.weight_decay, (float)p.grad_clip,
                                     (int)(step + 1), &norm);
        }
        if (st == CT_OK) st = ct_device_finish(dev);
        if (st != CT_OK) die(1, "step %lld failed: %s", (long long)step, ct_model_errmsg(model));
        double dt = now_s() - t0;
        ct_step_metrics sm;
        sm.step = step;
        sm.loss = dp ? (double)step_loss : loss_sum / accum;
        sm.lr = lr;
        sm.grad_norm = norm;
        sm.ms = dt * 1e3;
        sm.tokens_per_s = tokens_step / dt;
        sm.tflops = flops_tok * tokens_step / dt / 1e12;
        sm.mfu = peak > 0 ? sm.tflops / peak : NAN;
        sm.mem_bytes = mem_in_use(dev);
        if (leader) ct_metrics_train(mx, &sm);
        if (!isfinite(sm.loss)) die(1, "the loss became %g at step %lld", sm.loss, (long long)step);
        if (leader && (step % p.log_every == 0 || step + 1 == p.steps))
            printf("step %5lld/%d | loss %.6f | lr %.3e | norm %.4f | %7.1f ms | %8.0f tok/s | "
                   "%.4f TFLOP/s | MFU %5.2f%% | mem %.1f MiB\n",
                   (long long)step + 1, p.steps, sm.loss, lr, norm, sm.ms, sm.tokens_per_s,
                   sm.tflops, 100 * sm.mfu, sm.mem_bytes / 1048576.0);
        int64_t done = step + 1;
        int last = done == p.steps;
        if (vloader && p.eval_every > 0 && (done % p.eval_every == 0 || last)) {
            double vl = 0;
            if (evaluate(model, vloader, p.eval_batches, wrank * b, b, p.seq, in, tg, &vl))
                die(1, "evaluation failed: %s", ct_model_errmsg(model));
            float vf = (float)vl;
            if (dp && ct_dp_average(dp, &vf)) die(1, "%s", ct_dp_errmsg(dp));
            if (dp) vl = vf;
            if (leader) {
                printf("eval  %5lld | val loss %.6f\n", (long long)done, vl);
                char f[96];
                snprintf(f, sizeof f, "\"step\":%lld,\"val_loss\":%.9g", (long long)done, vl);
                ct_metrics_record(mx, "eval", f);
            }
        }
        if ((leader || p.zero >= 3) && p.sample_every > 0 && done % p.sample_every == 0 && !last)
            sample_and_print(model, &p, p.seq, x->tok, &rng, done, mx, leader);
        if (p.save[0] && ((p.save_every > 0 && done % p.save_every == 0) || last))
            save_checkpoint(model, dp, leader, &p, done, accum, &rng, ct_data_count(x->train));
    }
    if (dp && leader && p.steps > start) {
        ct_dp_times tm;
        ct_dp_times_get(dp, &tm);
        printf("data parallel: %lld steps, exposed communication %.1f ms, communication busy %.1f "
               "ms, optimizer %.1f ms (totals on worker 0)\n",
               (long long)(p.steps - start), tm.exposed_ms, tm.busy_ms, tm.optimizer_ms);
    }

    /* 6. The end: the model file and a sample (the leader; parameters are the same everywhere). */
    if ((leader || p.zero >= 3) && p.save_model[0]) { /* ZeRO-3: the gather is collective */
        float *host = (float *)malloc(np * sizeof(float));
        if (!host) die(1, "no memory to save the model");
        if (p.zero >= 3 ? ct_dp_gather_state(dp, host, NULL, NULL) != CT_OK
                        : ct_model_get_params(model, host, np) != CT_OK)
            die(1, "%s", p.zero >= 3 ? ct_dp_errmsg(dp) : ct_model_errmsg(model));
        if (leader && ct_model_file_write(p.save_model, &cfg, host, &err))
            die(1, "model not written: %s", err.msg);
        if (leader) printf("saved model %s (llm.c GPT-2 format, fp32)\n", p.save_model);
        free(host);
    }
    if ((leader || p.zero >= 3) && p.sample_len > 0)
        sample_and_print(model, &p, p.seq, x->tok, &rng, p.steps, mx, leader);

    free(in);
    free(tg);
    ct_metrics_close(mx);
    ct_dp_free(dp);
    ct_model_free(model);
    ct_device_free(dev);
    ct_loader_free(loader);
    ct_loader_free(vloader);
    ct_comm_free(world);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (ct_opts_wants_help(argc - 1, argv + 1)) {
        usage(stdout);
        return 0;
    }
    ct_err err = {0};
    ct_train_params p = ct_train_params_default();
    if (ct_opts_parse(ct_train_opts, ct_train_opts_count, &p, argc - 1, argv + 1, &err))
        die(2, "%s", err.msg);
    ct_lr_schedule sched;
    check_params(&p, &sched);

    /* 0. Workers: MPI ranks x --devices-per-rank, all of them one data-parallel group. MPI is
     * started only when there is more than one worker (or mpiexec started several ranks). */
    const char *pmi = getenv("PMI_SIZE");
    ct_topo *topo = NULL;
    if (p.dp > 1 || p.devices_per_rank > 1 || (pmi && atoi(pmi) > 1)) {
        if (ct_topo_create(&topo, &argc, &argv, p.devices_per_rank, &err)) die(2, "%s", err.msg);
        g_mpi_ranks = ct_topo_nranks(topo);
        int W = ct_topo_world_size(topo);
        if (W != p.dp) {
            /* every rank sees this: end together (MPI_Abort could cut the message off) */
            fprintf(stderr,
                    "train_gpt: error: --dp %d does not match the %d workers (%d MPI ranks x "
                    "--devices-per-rank %d): data parallelism runs over every worker, so --dp "
                    "must equal ranks x devices\n",
                    p.dp, W, ct_topo_nranks(topo), p.devices_per_rank);
            fflush(stderr);
            ct_topo_free(topo);
            exit(2);
        }
        if (ct_topo_rank(topo) > 0) setvbuf(stdout, NULL, _IOFBF, 1 << 16);
    }

    /* 1. The model's shape: from a checkpoint, an llm.c file, or the flags. */
    ct_checkpoint ck;
    memset(&ck, 0, sizeof ck);
    char ckpath[1300] = "";
    ct_gpt_config cfg;
    float *init_params = NULL;
    size_t init_n = 0;
    const char *origin;
    if (p.resume[0]) {
        if (ct_checkpoint_find(p.resume, ckpath, sizeof ckpath, &err) ||
            ct_checkpoint_read(ckpath, &ck, &err))
            die(2, "%s", err.msg);
        cfg = ck.cfg;
        origin = ckpath;
    } else if (p.init[0]) {
        if (ct_model_file_read(p.init, &cfg, &init_params, &init_n, &err)) die(2, "%s", err.msg);
        origin = p.init;
    } else {
        int V = p.vocab ? p.vocab : (p.data[0] ? 50257 : 256);
        cfg.vocab = V;
        cfg.padded_vocab = (V + 127) / 128 * 128;
        cfg.layers = p.layers;
        cfg.heads = p.heads;
        cfg.channels = p.dim;
        cfg.max_seq = p.max_seq ? p.max_seq : p.seq;
        if (p.dim % p.heads != 0)
            die(2, "--heads %d does not divide --dim %d (the head size must be whole)", p.heads,
                p.dim);
        if (ct_gpt_config_check(&cfg, "the model of the flags", &err)) die(2, "%s", err.msg);
        origin = "random init";
    }
    if (p.resume[0] || p.init[0]) check_shape_flags(argc, argv, &p, &cfg, origin);
    if (p.seq > cfg.max_seq)
        die(2, "--seq %d is above the model's maximum sequence length maxT = %d (%s)", p.seq,
            cfg.max_seq, origin);
    int accum = p.total_batch ? p.total_batch / (p.batch * p.seq) : 1;
    if (p.resume[0]) warn_changed_flags(ck.meta, &p);
    if (p.resume[0] && (ck.loader_B != p.batch || ck.loader_T != p.seq ||
                        ck.loader_accum != accum || ck.loader_shuffle != p.shuffle ||
                        ck.loader_seed != (uint64_t)p.seed))
        fprintf(stderr,
                "train_gpt: warning: the checkpoint was written with batch %d, seq %d, "
                "accumulation %d, shuffle %d, seed %llu; this run uses %d, %d, %d, %d, %d, so the "
                "data order differs from an uninterrupted run\n",
                ck.loader_B, ck.loader_T, ck.loader_accum, ck.loader_shuffle,
                (unsigned long long)ck.loader_seed, p.batch, p.seq, accum, p.shuffle, p.seed);

    /* 2. Data. */
    ct_data *train = NULL, *val = NULL;
    if (p.data[0]) {
        if (ct_data_open_shards(&train, p.data, &err)) die(2, "%s", err.msg);
    } else if (p.text[0]) {
        if (ct_data_open_text(&train, p.text, &err)) die(2, "%s", err.msg);
    } else {
        size_t n = 0;
        unsigned char *b = corpus_bytes(&n);
        if (!b) die(1, "no memory for the embedded corpus");
        if (ct_data_open_bytes(&train, b, n, "the embedded corpus", &err)) die(2, "%s", err.msg);
        free(b);
    }
    if (p.val_data[0]) {
        if (ct_data_open_shards(&val, p.val_data, &err)) die(2, "%s", err.msg);
    } else if (p.val_frac > 0 && p.eval_every > 0) {
        if (ct_data_split_tail(train, p.val_frac, &val, &err)) die(2, "%s", err.msg);
    }
    if (ct_data_check_vocab(train, cfg.vocab, &err)) die(2, "%s", err.msg);
    if (val && ct_data_check_vocab(val, cfg.vocab, &err)) die(2, "validation data: %s", err.msg);
    ct_loader *loader = NULL, *vloader = NULL;
    if (ct_loader_create(&loader, train, p.batch, p.seq, accum, p.shuffle, (uint64_t)p.seed, &err))
        die(2, "%s", err.msg);
    if (val && ct_loader_create(&vloader, val, p.batch, p.seq, 1, 0, 0, &err)) {
        fprintf(stderr, "train_gpt: validation disabled: %s\n", err.msg);
        ct_data_free(val);
        val = NULL;
    }
    if (p.resume[0] && ck.data_tokens != ct_data_count(train))
        fprintf(stderr,
                "train_gpt: warning: the checkpoint was trained on %llu tokens, this data has "
                "%zu; the data order differs from an uninterrupted run\n",
                (unsigned long long)ck.data_tokens, ct_data_count(train));
    ct_tokenizer *tok = NULL;
    if (p.tokenizer[0]) {
        if (ct_tokenizer_open(&tok, p.tokenizer, &err)) die(2, "%s", err.msg);
        if (ct_tokenizer_vocab(tok) < cfg.vocab)
            die(2, "tokenizer %s has %d tokens, the model %d", p.tokenizer,
                ct_tokenizer_vocab(tok), cfg.vocab);
    }

    /* 3. Devices: the ones the spec selects, and the layout's check against them. */
    run_ctx *x = (run_ctx *)calloc(1, sizeof *x);
    if (!x) die(1, "no memory");
    const char *spec = p.device[0] ? p.device : ct_device_spec_env();
    if (ct_device_list(&x->list, &x->ndev, &err)) die(2, "%s", err.msg);
    x->picks = (int *)malloc(sizeof(int) * (size_t)(x->ndev + 1));
    if (!x->picks) die(1, "no memory");
    if (ct_device_select(x->list, x->ndev, spec, 0, x->picks, &x->npicks, &err))
        die(2, "%s", err.msg);
    int D = p.devices_per_rank;
    int need = D * (topo && x->list[x->picks[0]].type != CL_DEVICE_TYPE_CPU
                        ? ct_topo_local_nranks(topo) : 1);
    if (need > x->npicks)
        die(2, "more workers than devices: %d worker%s on this node need%s %d devices, but "
               "--device '%s' selects %d (CPU devices count once per process)",
            need, need > 1 ? "s" : "", need > 1 ? "" : "s", need, spec ? spec : "auto",
            x->npicks);
    x->p = p;
    x->sched = sched;
    x->cfg = cfg;
    x->accum = accum;
    x->argc = argc;
    x->argv = argv;
    x->origin = origin;
    snprintf(x->ckpath, sizeof x->ckpath, "%s", ckpath);
    x->ck = ck;
    x->init_params = init_params;
    x->init_n = init_n;
    x->train = train;
    x->val = val;
    x->tok = tok;
    x->topo = topo;
    x->W = topo ? ct_topo_world_size(topo) : 1;
    ct_loader_free(loader);
    ct_loader_free(vloader);

    /* 4. The workers: one per device of this process. */
    if (D > 1) {
#pragma omp parallel num_threads(D)
        worker(x, omp_get_thread_num());
    } else {
        worker(x, 0);
    }

    ct_checkpoint_release(&x->ck);
    free(x->init_params);
    ct_tokenizer_free(tok);
    ct_device_list_free(x->list);
    free(x->picks);
    ct_data_free(train);
    ct_data_free(val);
    free(x);
    ct_topo_free(topo);
    return 0;
}
