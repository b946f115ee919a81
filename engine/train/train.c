/* train.c - the training loop's library half, used by train_gpt, the benchmarks and the tests:
 *   ct_train_run   what the workers of one process share: the model's shape (from a checkpoint,
 *                  an llm.c file or the flags), the data, the tokenizer, the devices selected;
 *   ct_trainer     one worker: its place in the grid, device, model, executor, loaders, metrics;
 *                  a step, evaluation, sampling, checkpoints, the start-up report, the trace.
 * The program keeps the flags, the printing of step lines and the exit codes. Every collective
 * call here is made by every worker in the same order; only the leader (world worker 0) writes
 * files and prints. */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ct_engine.h"

/* ------------------------------------------------------------------ parameter checks */

/* An output file's directory must exist before training starts, not fail at the end. */
static ct_status check_out_dir(const char *path, const char *flag, ct_err *err) {
    if (!path || !path[0]) return CT_OK;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) return CT_OK;
    if (slash == dir) slash[1] = 0;
    else *slash = 0;
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return CT_ERR(err, CT_ERR_ARG, "%s %s: the directory %s does not exist", flag, path, dir);
    return CT_OK;
}

ct_status ct_train_params_check(const ct_train_params *p, ct_lr_schedule *sched, ct_err *err) {
    ct_status st;
    if ((st = ct_lr_schedule_parse(p->lr_schedule, sched, err)) != CT_OK) return st;
#define NEED(cond, ...)                                                                            \
    do {                                                                                           \
        if (!(cond)) return CT_ERR(err, CT_ERR_ARG, __VA_ARGS__);                                  \
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
    NEED(!strcmp(p->nonfinite, "skip") || !strcmp(p->nonfinite, "stop"),
         "--nonfinite must be skip or stop (got '%s')", p->nonfinite);
    NEED(p->max_skips >= 1, "--max-skips must be >= 1 (got %d)", p->max_skips);
    NEED(p->shuffle == 0 || p->shuffle == 1, "--shuffle must be 0 or 1 (got %d)", p->shuffle);
    NEED(p->eval_every >= 0, "--eval-every must be >= 0 (got %d)", p->eval_every);
    NEED(p->eval_batches > 0, "--eval-batches must be positive (got %d)", p->eval_batches);
    NEED(p->sample_every >= 0, "--sample-every must be >= 0 (got %d)", p->sample_every);
    NEED(p->sample_len >= 0, "--sample-len must be >= 0 (got %d)", p->sample_len);
    NEED(p->temperature >= 0, "--temperature must be >= 0 (got %g)", p->temperature);
    NEED(p->sample_top_k >= 0, "--sample-top-k must be >= 0 (got %d)", p->sample_top_k);
    NEED(p->experts >= 0, "--experts must be >= 0 (0 = the dense MLP; got %d)", p->experts);
    NEED(p->top_k >= 1, "--top-k must be >= 1 (experts per token; got %d)", p->top_k);
    NEED(p->capacity_factor >= 0 && isfinite(p->capacity_factor),
         "--capacity-factor must be >= 0 (0 = no limit; got %g)", p->capacity_factor);
    NEED(p->aux_loss >= 0 && isfinite(p->aux_loss), "--aux-loss must be >= 0 (got %g)",
         p->aux_loss);
    NEED(p->ep >= 1, "--ep must be >= 1 (got %d)", p->ep);
    NEED(p->dp % p->ep == 0,
         "--ep %d does not divide --dp %d: an expert-parallel group is ep consecutive data-parallel "
         "workers",
         p->ep, p->dp);
    NEED(p->save_every >= 0, "--save-every must be >= 0 (got %d)", p->save_every);
    NEED(!(p->save_every > 0 && !p->save[0]), "--save-every needs --save DIR");
    NEED(p->keep_last >= 0, "--keep-last must be >= 0 (0 = keep all; got %d)", p->keep_last);
    NEED(!(p->keep_last > 0 && !p->save[0]), "--keep-last needs --save DIR");
    NEED(p->val_frac >= 0 && p->val_frac < 1, "--val-frac must be in [0, 1) (got %g)", p->val_frac);
    NEED(p->peak_tflops >= 0, "--peak-tflops must be >= 0 (got %g)", p->peak_tflops);
    NEED(p->mem_cap_gb >= 0, "--mem-cap-gb must be >= 0 (got %g)", p->mem_cap_gb);
    NEED(p->max_alloc_mb >= 0, "--max-alloc-mb must be >= 0 (got %g)", p->max_alloc_mb);
    NEED(p->log_every > 0, "--log-every must be positive (got %d)", p->log_every);
    NEED(p->dp >= 1, "--dp must be >= 1 (got %d)", p->dp);
    NEED(p->devices_per_rank >= 1, "--devices-per-rank must be >= 1 (got %d)", p->devices_per_rank);
    NEED(p->workers_per_device >= 1, "--workers-per-device must be >= 1 (got %d)",
         p->workers_per_device);
    NEED(p->tp >= 1, "--tp must be >= 1 (got %d)", p->tp);
    NEED(p->sequence_parallel == 0 || p->sequence_parallel == 1,
         "--sequence-parallel must be 0 or 1 (got %d)", p->sequence_parallel);
    NEED(!(p->sequence_parallel && p->tp < 2),
         "--sequence-parallel 1 needs tensor parallelism (--tp >= 2): it splits activations over "
         "the TP group");
    NEED(p->tp_overlap == 0 || p->tp_overlap == 1, "--tp-overlap must be 0 or 1 (got %d)",
         p->tp_overlap);
    {
        int mode = 0;
        if ((st = ct_tp_comm_parse(p->tp_comm, &mode, err)) != CT_OK) return st;
    }
    NEED(p->zero >= 0 && p->zero <= 3, "--zero must be 0, 1, 2 or 3 (got %d)", p->zero);
    NEED(!(p->zero > 0 && p->dp < 2),
         "--zero %d needs data parallelism (--dp >= 2): ZeRO shards over the DP group", p->zero);
    NEED(p->batch % p->dp == 0,
         "--dp %d does not divide --batch %d: each data-parallel worker takes an equal, contiguous "
         "share of every micro-batch's rows",
         p->dp, p->batch);
    NEED(p->pp >= 1, "--pp must be >= 1 (got %d)", p->pp);
    NEED(p->virtual_stages >= 1, "--virtual-stages must be >= 1 (got %d)", p->virtual_stages);
    ct_sched_kind kind;
    if ((st = ct_sched_parse(p->schedule, &kind, err)) != CT_OK) {
        char m[CT_ERR_MSG_MAX];
        snprintf(m, sizeof m, "%s", err->msg);
        return CT_ERR(err, st, "--schedule: %s", m);
    }
    NEED(kind != CT_SCHED_TRIVIAL, "--schedule trivial is the one-stage list; pick gpipe, 1f1b, "
                                   "interleaved or zb1 (with --pp 1 the plain step runs anyway)");
    NEED(p->virtual_stages == 1 || (kind == CT_SCHED_INTERLEAVED && p->pp > 1),
         "--virtual-stages %d needs --schedule interleaved and --pp >= 2 (the other schedules "
         "hold one chunk of blocks per stage)",
         p->virtual_stages);
    NEED(!p->pp_split[0] || p->pp > 1, "--pp-split needs --pp >= 2");
    NEED(!(p->pp > 1 && p->tp > 1 && kind == CT_SCHED_ZB1),
         "--schedule zb1 with --tp %d: the split backward of zero-bubble schedules is not built "
         "for tensor parallelism (its weight half would need the TP gathers again); use gpipe, "
         "1f1b or interleaved",
         p->tp);
    {
        ct_recompute rc;
        NEED(ct_recompute_parse(p->recompute, &rc) == CT_OK,
             "--recompute must be none, attention or block (got '%s')", p->recompute);
        ct_attn_path ap = CT_ATTN_GEMM;
        ct_attn_path_parse(p->attention, &ap);
        /* auto resolves on the device; only a path given by name is checked here */
        if (ap != CT_ATTN_AUTO &&
            (st = ct_model_recompute_check(rc, ap, p->pp > 1 && kind == CT_SCHED_ZB1, err)) !=
                CT_OK) {
            char m[CT_ERR_MSG_MAX];
            snprintf(m, sizeof m, "%s", err->msg);
            return CT_ERR(err, CT_ERR_ARG, "--recompute %s with --schedule %s: %s", p->recompute,
                          p->schedule, m);
        }
    }
    NEED(!(p->pp > 1 && p->zero >= 2 && (kind == CT_SCHED_INTERLEAVED || kind == CT_SCHED_ZB1)),
         "--zero %d with --schedule %s: ZeRO-2 and 3 send each block's gradient to its DP group "
         "after every backward, through a gradient working buffer of two blocks; the interleaved "
         "and zero-bubble orders run the backwards of other chunks or micro-batches (or defer the "
         "weight gradients) before a block's gradient leaves, and would overwrite it. Use "
         "--schedule gpipe or 1f1b, or --zero 1",
         p->zero, p->schedule);
    {
        int accum = p->total_batch && p->batch * p->seq > 0 ? p->total_batch / (p->batch * p->seq) : 1;
        NEED(!(p->pp > 1 && kind == CT_SCHED_INTERLEAVED && accum % p->pp),
             "--schedule interleaved needs the micro-batches (--total-batch / (--batch x --seq) = "
             "%d) to be a multiple of --pp %d: micro-batches go through the chunks in groups of "
             "--pp",
             accum, p->pp);
    }
    NEED(!strcmp(p->layout, "manual") || !strcmp(p->layout, "auto"),
         "--layout must be manual or auto (got '%s')", p->layout);
    NEED(p->bucket_mb > 0, "--bucket-mb must be positive (got %g)", p->bucket_mb);
    NEED(p->overlap == 0 || p->overlap == 1, "--overlap must be 0 or 1 (got %d)", p->overlap);
    NEED(!(p->data[0] && p->text[0]), "--data and --text are exclusive: give one");
    NEED(!(p->init[0] && p->resume[0]),
         "--init and --resume are exclusive (a checkpoint already holds the model)");
    long long bt = (long long)p->batch * p->seq;
    NEED(bt <= 1 << 30, "--batch x --seq = %lld tokens is too large", bt);
    NEED(p->total_batch == 0 || p->total_batch % bt == 0,
         "--total-batch %d is not a multiple of --batch x --seq = %lld", p->total_batch, bt);
    ct_attn_path ap;
    NEED(ct_attn_path_parse(p->attention, &ap) == CT_OK,
         "--attention must be gemm, fused or auto (got '%s')", p->attention);
    int a = 0, b = 0;
    NEED(!p->trace_steps[0] || (sscanf(p->trace_steps, "%d:%d", &a, &b) == 2 && a >= 0 && b >= a),
         "--trace-steps must be A:B with 0 <= A <= B (got '%s')", p->trace_steps);
#undef NEED
    if ((st = check_out_dir(p->save_model, "--save-model", err)) != CT_OK) return st;
    if ((st = check_out_dir(p->metrics, "--metrics", err)) != CT_OK) return st;
    return check_out_dir(p->trace, "--trace", err);
}

/* ------------------------------------------------------------------ the run */

struct ct_train_run {
    ct_train_params p;
    ct_lr_schedule sched;
    ct_gpt_config cfg;
    int accum;
    ct_sched_kind kind; /* the pipeline schedule (trivial with pp = 1) */
    int nchunks;        /* model chunks: pp x virtual stages */
    int *split;         /* [nchunks] blocks of each chunk */
    int split_given;    /* from --pp-split */
    char origin[1300];
    char ckpath[1300];
    ct_checkpoint ck; /* when resuming */
    float *init_params;
    size_t init_n;
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

/* Warn when a resumed run changes a flag that shapes the optimisation (the checkpoint's META
 * section holds the writing run's flags as "flag=value" lines). */
static void warn_changed_flags(FILE *log, const char *meta, const ct_train_params *p) {
    static const char *const keys[] = {"steps", "lr", "lr-schedule", "warmup", "min-lr-frac",
                                       "beta1", "beta2", "eps", "weight-decay", "grad-clip"};
    size_t need = ct_opts_format(NULL, 0, ct_train_opts, ct_train_opts_count, p);
    char *now = (char *)ct_malloc(need + 1);
    if (!now || !meta) {
        free(now);
        return;
    }
    ct_opts_format(now, need + 1, ct_train_opts, ct_train_opts_count, p);
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        char key[64];
        snprintf(key, sizeof key, "%s=", keys[k]);
        const char *a = strstr(meta, key), *b = strstr(now, key);
        while (a && a != meta && a[-1] != '\n') a = strstr(a + 1, key); /* whole lines only */
        while (b && b != now && b[-1] != '\n') b = strstr(b + 1, key);
        if (!a || !b) continue;
        size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
        if (la != lb || strncmp(a, b, la) != 0)
            fprintf(log, "train_gpt: warning: the checkpoint was written with --%.*s, this run "
                         "uses --%.*s\n",
                    (int)la, a, (int)lb, b);
    }
    free(now);
}

/* A new model's shape from the flags. */
static ct_status config_of_flags(const ct_train_params *p, ct_gpt_config *cfg, ct_err *err) {
    int V = p->vocab ? p->vocab : (p->data[0] ? 50257 : 256);
    cfg->vocab = V;
    cfg->padded_vocab = (V + 127) / 128 * 128;
    cfg->layers = p->layers;
    cfg->heads = p->heads;
    cfg->channels = p->dim;
    cfg->max_seq = p->max_seq ? p->max_seq : p->seq;
    cfg->experts = p->experts;
    cfg->top_k = p->experts > 0 ? p->top_k : 0;
    if (p->experts > 0 && p->top_k > p->experts)
        return CT_ERR(err, CT_ERR_ARG, "--top-k %d is above --experts %d (each token goes to K "
                                       "distinct experts)",
                      p->top_k, p->experts);
    if (p->dim % p->heads != 0)
        return CT_ERR(err, CT_ERR_ARG, "--heads %d does not divide --dim %d (the head size must be whole)",
                      p->heads, p->dim);
    return ct_gpt_config_check(cfg, "the model of the flags", err);
}

/* A shape flag given beside a model file or checkpoint must agree with it. */
static ct_status config_vs_flags(const ct_train_params *p,
                                 const ct_gpt_config *cfg, const char *origin, ct_err *err) {
    if (!p->resume[0] && !p->init[0]) return CT_OK;
    struct {
        const char *flag;
        int given, file;
    } f[] = {{"layers", p->layers, cfg->layers}, {"heads", p->heads, cfg->heads},
             {"dim", p->dim, cfg->channels},     {"vocab", p->vocab, cfg->vocab},
             {"max-seq", p->max_seq, cfg->max_seq}, {"experts", p->experts, cfg->experts},
             {"top-k", p->top_k, cfg->top_k}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (ct_train_given(p, f[i].flag) && f[i].given != f[i].file &&
            !(!strcmp(f[i].flag, "top-k") && cfg->experts == 0)) /* no K without experts */
            return CT_ERR(err, CT_ERR_ARG, "--%s %d contradicts the model of %s (%d); leave it out",
                          f[i].flag, f[i].given, origin, f[i].file);
    return CT_OK;
}

ct_status ct_train_config(const ct_train_params *p, ct_gpt_config *cfg, ct_err *err) {
    ct_status st;
    char origin[1300], path[1300];
    memset(cfg, 0, sizeof *cfg);
    if (p->resume[0]) {
        ct_checkpoint ck;
        memset(&ck, 0, sizeof ck);
        if ((st = ct_checkpoint_find(p->resume, path, sizeof path, err)) != CT_OK ||
            (st = ct_checkpoint_read(path, &ck, err)) != CT_OK) {
            ct_checkpoint_release(&ck);
            return st;
        }
        *cfg = ck.cfg;
        ct_checkpoint_release(&ck);
        snprintf(origin, sizeof origin, "%s", path);
    } else if (p->init[0]) {
        if ((st = ct_model_file_read_config(p->init, cfg, err)) != CT_OK) return st;
        snprintf(origin, sizeof origin, "%s", p->init);
    } else {
        if ((st = config_of_flags(p, cfg, err)) != CT_OK) return st;
        snprintf(origin, sizeof origin, "random init");
    }
    return config_vs_flags(p, cfg, origin, err);
}

ct_status ct_train_moe_check(const ct_train_params *p, const ct_gpt_config *cfg, ct_sched_kind kind,
                             ct_err *err) {
    char m[400];
    if (cfg->experts == 0 && p->ep > 1)
        return CT_ERR(err, CT_ERR_ARG,
                      "--ep needs a mixture of experts (--experts E, or a model file with experts)");
    if (cfg->experts == 0) return CT_OK;
    if (cfg->experts % p->ep)
        return CT_ERR(err, CT_ERR_ARG, "--ep %d does not divide the %d experts (each worker of an EP "
                                       "group holds E / ep of them)",
                      p->ep, cfg->experts);
    if (p->zero >= 2)
        return CT_ERR(err, CT_ERR_ARG, "experts with --zero %d are not built (ZeRO-0 and 1 are): the "
                                       "working buffers hold one block's dense tensors at a time",
                      p->zero);
    if (kind == CT_SCHED_ZB1)
        return CT_ERR(err, CT_ERR_ARG,
                      "experts with --schedule zb1 are not built (the MoE layer's backward runs its "
                      "all-to-alls in one piece, not split in two halves); use gpipe, 1f1b or "
                      "interleaved");
    if (p->save_model[0] && !ct_model_file_is_safetensors(p->save_model)) {
        snprintf(m, sizeof m, "--save-model %s: llm.c's model format has no place for experts; "
                              "name the file *.safetensors",
                 p->save_model);
        return CT_ERR(err, CT_ERR_ARG, "%s", m);
    }
    return CT_OK;
}

int ct_worker_device(const ct_device_info *list, const int *picks, int npicks, ct_topo *topo,
                     int thread, int workers_per_device) {
    int k = topo ? ct_topo_device_index(topo, thread) : 0;
    if (list[picks[0]].type == CL_DEVICE_TYPE_CPU && k >= npicks) k = thread;
    return k / (workers_per_device > 0 ? workers_per_device : 1);
}

ct_status ct_train_run_open(ct_train_run **out, const ct_train_params *pp, ct_topo *topo, const ct_cl_source *corpus, int ncorpus, FILE *log,
                            ct_err *err) {
    ct_status st = CT_OK;
    *out = NULL;
    ct_train_run *r = ct_calloc(1, sizeof *r);
    if (!r) return CT_ERR(err, CT_ERR_NOMEM, "no memory");
    pthread_mutex_init(&r->ctx_lock, NULL);
    r->p = *pp;
    const ct_train_params *p = &r->p;
    r->topo = topo;
    r->W = topo ? ct_topo_world_size(topo) : 1;
    r->log = log;
#define TRY(expr)                                                                                  \
    do {                                                                                           \
        if ((st = (expr)) != CT_OK) goto fail;                                                     \
    } while (0)
    TRY(ct_train_params_check(p, &r->sched, err));
    /* 1. The model's shape: from a checkpoint, an llm.c file, or the flags. */
    ct_gpt_config *cfg = &r->cfg;
    if (p->resume[0]) {
        TRY(ct_checkpoint_find(p->resume, r->ckpath, sizeof r->ckpath, err));
        TRY(ct_checkpoint_read(r->ckpath, &r->ck, err));
        *cfg = r->ck.cfg;
        snprintf(r->origin, sizeof r->origin, "%s", r->ckpath);
    } else if (p->init[0]) {
        TRY(ct_model_file_read(p->init, cfg, &r->init_params, &r->init_n, err));
        snprintf(r->origin, sizeof r->origin, "%s", p->init);
    } else {
        TRY(config_of_flags(p, cfg, err));
        snprintf(r->origin, sizeof r->origin, "random init");
    }
    TRY(config_vs_flags(p, cfg, r->origin, err));
    /* tensor parallelism's divisibility rules, before any device work */
    TRY(ct_model_tp_check(cfg, p->tp, p->sequence_parallel, p->seq, err));
    if (p->seq > cfg->max_seq) {
        st = CT_ERR(err, CT_ERR_ARG,
                    "--seq %d is above the model's maximum sequence length maxT = %d (%s)", p->seq,
                    cfg->max_seq, r->origin);
        goto fail;
    }
    r->accum = p->total_batch ? p->total_batch / (p->batch * p->seq) : 1;
    /* the pipeline: the schedule, and the blocks of each model chunk */
    r->kind = CT_SCHED_TRIVIAL;
    if (p->pp > 1) TRY(ct_sched_parse(p->schedule, &r->kind, err));
    /* mixture of experts: what the layouts support */
    TRY(ct_train_moe_check(p, cfg, r->kind, err));
    r->nchunks = p->pp * (r->kind == CT_SCHED_INTERLEAVED ? p->virtual_stages : 1);
    if (r->nchunks > cfg->layers || r->nchunks > CT_MAX_CHUNKS * p->pp) {
        st = CT_ERR(err, CT_ERR_ARG,
                    "--pp %d x --virtual-stages %d = %d model chunks, but the model has %d blocks "
                    "(each chunk needs one)%s",
                    p->pp, r->nchunks / p->pp, r->nchunks, cfg->layers,
                    r->nchunks / p->pp > CT_MAX_CHUNKS ? " or more chunks per stage than 16" : "");
        goto fail;
    }
    r->split = ct_malloc(sizeof(int) * (size_t)r->nchunks);
    if (!r->split) {
        st = CT_ERR(err, CT_ERR_NOMEM, "no memory");
        goto fail;
    }
    r->split_given = p->pp_split[0] != 0;
    if (r->split_given) TRY(ct_pp_split_parse(p->pp_split, cfg, r->nchunks, r->split, err));
    else TRY(ct_pp_split_balanced(cfg, p->seq, r->nchunks, r->split, err));
    if (p->resume[0]) {
        warn_changed_flags(log, r->ck.meta, p);
        if (r->ck.loader_B != p->batch || r->ck.loader_T != p->seq ||
            r->ck.loader_accum != r->accum || r->ck.loader_shuffle != p->shuffle ||
            r->ck.loader_seed != (uint64_t)p->seed)
            fprintf(log,
                    "train_gpt: warning: the checkpoint was written with batch %d, seq %d, "
                    "accumulation %d, shuffle %d, seed %llu; this run uses %d, %d, %d, %d, %d, so "
                    "the data order differs from an uninterrupted run\n",
                    r->ck.loader_B, r->ck.loader_T, r->ck.loader_accum, r->ck.loader_shuffle,
                    (unsigned long long)r->ck.loader_seed, p->batch, p->seq, r->accum, p->shuffle,
                    p->seed);
    }
    /* Temporaries of killed writers in the checkpoint directory (one process looks). */
    if (p->save[0] && (!topo || ct_topo_rank(topo) == 0)) {
        int nrm = 0;
        uint64_t bytes = 0;
        char names[512];
        TRY(ct_checkpoint_clean_stale(p->save, &nrm, &bytes, names, sizeof names, err));
        if (nrm)
            fprintf(log,
                    "train_gpt: removed %d stale temporary file%s (%.1f MiB) from %s, left by "
                    "processes that are gone (killed while saving): %s\n",
                    nrm, nrm > 1 ? "s" : "", bytes / 1048576.0, p->save, names);
    }
    /* 2. Data. */
    if (p->data[0]) {
        TRY(ct_data_open_shards(&r->train, p->data, err));
    } else if (p->text[0]) {
        TRY(ct_data_open_text(&r->train, p->text, err));
    } else {
        size_t total = 0, at = 0;
        for (int i = 0; i < ncorpus; i++) total += corpus[i].len;
        unsigned char *b = ct_malloc(total ? total : 1);
        if (!b) {
            st = CT_ERR(err, CT_ERR_NOMEM, "no memory for the embedded corpus");
            goto fail;
        }
        for (int i = 0; i < ncorpus; i++, at += corpus[i - 1].len)
            memcpy(b + at, corpus[i].text, corpus[i].len);
        st = ct_data_open_bytes(&r->train, b, total, "the embedded corpus", err);
        free(b);
        if (st != CT_OK) goto fail;
    }
    if (p->val_data[0]) TRY(ct_data_open_shards(&r->val, p->val_data, err));
    else if (p->val_frac > 0 && p->eval_every > 0)
        TRY(ct_data_split_tail(r->train, p->val_frac, &r->val, err));
    TRY(ct_data_check_vocab(r->train, cfg->vocab, err));
    if (r->val && (st = ct_data_check_vocab(r->val, cfg->vocab, err)) != CT_OK) {
        char m[CT_ERR_MSG_MAX];
        snprintf(m, sizeof m, "%s", err->msg);
        CT_ERR(err, st, "validation data: %s", m);
        goto fail;
    }
    { /* the loaders are per worker; make one here to refuse a stream too short up front */
        ct_loader *ld = NULL, *vl = NULL;
        TRY(ct_loader_create(&ld, r->train, p->batch, p->seq, r->accum, p->shuffle,
                             (uint64_t)p->seed, err));
        ct_loader_free(ld);
        if (r->val && ct_loader_create(&vl, r->val, p->batch, p->seq, 1, 0, 0, err) != CT_OK) {
            fprintf(log, "train_gpt: validation disabled: %s\n", err->msg);
            ct_data_free(r->val);
            r->val = NULL;
            ct_err_clear(err);
        }
        ct_loader_free(vl);
    }
    if (p->resume[0] && r->ck.data_tokens != ct_data_count(r->train))
        fprintf(log,
                "train_gpt: warning: the checkpoint was trained on %llu tokens, this data has "
                "%zu; the data order differs from an uninterrupted run\n",
                (unsigned long long)r->ck.data_tokens, ct_data_count(r->train));
    if (p->tokenizer[0]) {
        TRY(ct_tokenizer_open(&r->tok, p->tokenizer, err));
        if (ct_tokenizer_vocab(r->tok) < cfg->vocab) {
            st = CT_ERR(err, CT_ERR_ARG, "tokenizer %s has %d tokens, the model %d", p->tokenizer,
                        ct_tokenizer_vocab(r->tok), cfg->vocab);
            goto fail;
        }
    }
    /* 3. Devices: the ones the spec selects, and the layout's check against them. */
    const char *spec = p->device[0] ? p->device : ct_device_spec_env();
    TRY(ct_device_list(&r->list, &r->ndev, err));
    r->picks = ct_malloc(sizeof(int) * (size_t)(r->ndev + 1));
    r->ctx = ct_calloc((size_t)r->ndev + 1, sizeof *r->ctx);
    if (!r->picks || !r->ctx) {
        st = CT_ERR(err, CT_ERR_NOMEM, "no memory");
        goto fail;
    }
    TRY(ct_device_select(r->list, r->ndev, spec, 0, r->picks, &r->npicks, err));
    int D = p->devices_per_rank, cpu = r->list[r->picks[0]].type == CL_DEVICE_TYPE_CPU;
    int workers = D * (topo && !cpu ? ct_topo_local_nranks(topo) : 1);
    int need = (workers + p->workers_per_device - 1) / p->workers_per_device;
    if (need > r->npicks) {
        st = CT_ERR(err, CT_ERR_ARG,
                    "more workers than devices: %d worker%s on this node need%s %d device%s, but "
                    "--device '%s' selects %d (CPU devices count once per process; "
                    "--workers-per-device N lets N workers share one)",
                    workers, workers > 1 ? "s" : "", workers > 1 ? "" : "s", need,
                    need > 1 ? "s" : "", spec ? spec : "auto", r->npicks);
        goto fail;
    }
#undef TRY
    *out = r;
    return CT_OK;
fail:
    ct_train_run_free(r);
    return st;
}

void ct_train_run_free(ct_train_run *r) {
    if (!r) return;
    ct_checkpoint_release(&r->ck);
    free(r->split);
    free(r->init_params);
    ct_tokenizer_free(r->tok);
    for (int k = 0; r->ctx && k <= r->ndev; k++) ct_context_release(r->ctx[k]);
    free(r->ctx);
    pthread_mutex_destroy(&r->ctx_lock);
    ct_device_list_free(r->list);
    free(r->picks);
    ct_data_free(r->train);
    ct_data_free(r->val);
    free(r);
}

const ct_gpt_config *ct_train_run_config(const ct_train_run *r) { return &r->cfg; }
int ct_train_run_accum(const ct_train_run *r) { return r->accum; }

/* ------------------------------------------------------------------ the trainer */

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
    ct_err err;
};

/* Worker 0's device says when it must build a program from source (a cold kernel cache): the
 * run's log tells what the wait is, counted over the programs the engine builds at setup. */
static void on_build(void *arg, const char *program, int phase, double seconds) {
    ct_trainer *t = arg;
    FILE *f = t->r->log;
    if (!f) return;
    if (phase == 0) {
        if (t->built == 0) {
            char dir[1024];
            ct_cache_dir_default(dir, sizeof dir);
            fprintf(f, "train_gpt: building the OpenCL programs for %s on their first use here "
                       "(kept in %s/programs: later runs load them at once)\n",
                    t->info->name, dir);
        }
        return;
    }
    int total = ct_ops_program_count();
    t->built++;
    if (t->built <= total)
        fprintf(f, "  built %-18s %6.1f s   [%d/%d]\n", program, seconds, t->built, total);
    else
        fprintf(f, "  built %-18s %6.1f s\n", program, seconds);
    fflush(f);
}

static ct_status terr(ct_trainer *t, ct_err *err, ct_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char m[CT_ERR_MSG_MAX];
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    CT_ERR(err ? err : &t->err, st, "%s", m);
    return st;
}

/* The device's GEMM rate at one shape: the best of repeated runs over at least 0.3 s. */
static double gemm_tflops(ct_device *dev, int M, int N, int K) {
    ct_buffer *a = NULL, *b = NULL, *c = NULL;
    double best = 0;
    if (ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "gemm probe A", (size_t)M * K * 4, &a) ||
        ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "gemm probe B", (size_t)N * K * 4, &b) ||
        ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "gemm probe C", (size_t)M * N * 4, &c))
        goto done;
    double start = ct_time_now();
    for (int rep = 0; rep < 200 && (rep < 4 || ct_time_now() - start < 0.3); rep++) {
        double t0 = ct_time_now();
        if (ct_gemm(dev, 0, 1, (size_t)M, (size_t)N, (size_t)K, 1.0f, ct_buffer_mem(a), 0,
                    (size_t)K, ct_buffer_mem(b), 0, (size_t)K, 0.0f, ct_buffer_mem(c), 0,
                    (size_t)N, NULL) ||
            ct_device_finish(dev))
            goto done;
        double dt = ct_time_now() - t0;
        if (rep > 0 && 2.0 * M * N * K / dt / 1e12 > best) best = 2.0 * M * N * K / dt / 1e12;
    }
done:
    ct_buffer_free(a);
    ct_buffer_free(b);
    ct_buffer_free(c);
    return best;
}

double ct_measure_gemm_tflops(ct_device *dev, const ct_gpt_config *c, int BT) {
    int C = c->channels;
    int shapes[3][3] = {{BT, 3 * C, C}, {BT, 4 * C, C}, {BT, c->padded_vocab, C}};
    double best = 0;
    for (int i = 0; i < 3; i++) {
        double t = gemm_tflops(dev, shapes[i][0], shapes[i][1], shapes[i][2]);
        if (t > best) best = t;
    }
    return best;
}

ct_status ct_train_worker_plan(const ct_train_params *p, const ct_gpt_config *cfg, int worker,
                               ct_layout *lay, ct_coords *at, ct_model_plan *plan, ct_err *err) {
    ct_status st;
    ct_schedule *sched = NULL;
    ct_sched_sim sim = {0};
    memset(plan, 0, sizeof *plan);
    ct_layout l = {p->dp, p->tp, p->pp, p->zero, p->ep};
    if ((st = ct_layout_check(&l, p->dp * p->tp * p->pp, err)) != CT_OK) return st;
    if (worker < 0 || worker >= p->dp * p->tp * p->pp)
        return CT_ERR(err, CT_ERR_ARG, "worker %d outside the %d workers of dp %d x tp %d x pp %d",
                      worker, p->dp * p->tp * p->pp, p->dp, p->tp, p->pp);
    *lay = l;
    *at = ct_layout_coords(&l, worker);
    /* the schedule and the chunks of blocks: the same functions ct_train_run_open uses */
    int accum = p->total_batch ? p->total_batch / (p->batch * p->seq) : 1;
    ct_sched_kind kind = CT_SCHED_TRIVIAL;
    if (p->pp > 1 && (st = ct_sched_parse(p->schedule, &kind, err)) != CT_OK) return st;
    int v = kind == CT_SCHED_INTERLEAVED ? p->virtual_stages : 1, nchunks = p->pp * v;
    if (nchunks > cfg->layers || v > CT_MAX_CHUNKS)
        return CT_ERR(err, CT_ERR_ARG,
                      "--pp %d x --virtual-stages %d = %d model chunks, but the model has %d "
                      "blocks (each chunk needs one; at most %d per stage)",
                      p->pp, v, nchunks, cfg->layers, CT_MAX_CHUNKS);
    int split[CT_MAX_CHUNKS * 64];
    if (nchunks > (int)(sizeof split / sizeof split[0]))
        return CT_ERR(err, CT_ERR_ARG, "%d model chunks: too many", nchunks);
    if (p->pp_split[0]) st = ct_pp_split_parse(p->pp_split, cfg, nchunks, split, err);
    else st = ct_pp_split_balanced(cfg, p->seq, nchunks, split, err);
    if (st != CT_OK) return st;
    /* activation slots: the schedule's peak live on this worker's stage (unit costs) */
    ct_sched_costs unit = ct_sched_costs_unit();
    if ((st = ct_sched_make(kind, p->pp, accum, v, &sched, err)) != CT_OK) return st;
    st = ct_sched_simulate(sched, &unit, 0, &sim, err);
    int slots = st == CT_OK && sim.peak_live[at->pp_rank] > 0 ? sim.peak_live[at->pp_rank] : 1;
    ct_sched_sim_free(&sim);
    ct_sched_free(sched);
    if (st != CT_OK) return st;
    plan->max_B = p->batch / p->dp, plan->max_T = p->seq, plan->slots = slots;
    plan->split_backward = kind == CT_SCHED_ZB1;
    ct_attn_path_parse(p->attention, &plan->attention); /* checked by ct_train_params_check */
    plan->sp = p->sequence_parallel;
    ct_tp_comm_parse(p->tp_comm, &plan->tp_comm, NULL); /* checked by ct_train_params_check */
    ct_recompute_parse(p->recompute, &plan->recompute);
    plan->moe_capacity = p->capacity_factor;
    plan->moe_aux = p->aux_loss;
    if (p->pp > 1) {
        plan->chunks.nchunks = v;
        for (int j = 0, lo = 0, c = 0; c < nchunks; lo += split[c], c++)
            if (c % p->pp == at->pp_rank)
                plan->chunks.lo[j] = lo, plan->chunks.hi[j] = lo + split[c], j++;
    }
    return CT_OK;
}

ct_exec_opts ct_train_exec_opts(const ct_train_params *p) {
    ct_exec_opts xo = ct_exec_opts_default();
    xo.grads.bucket_bytes = (size_t)(p->bucket_mb * 1048576.0);
    xo.grads.overlap = p->overlap;
    return xo;
}

ct_status ct_train_mem_predict(const ct_train_params *p, const ct_gpt_config *cfg, int worker,
                               ct_mem_predict *out, ct_err *err) {
    ct_layout lay;
    ct_coords at;
    ct_model_plan plan;
    ct_status st = ct_train_worker_plan(p, cfg, worker, &lay, &at, &plan, err);
    if (st != CT_OK) return st;
    ct_exec_opts xo = ct_train_exec_opts(p);
    return ct_model_mem_predict(cfg, &lay, &at, &plan, &xo, out, err);
}

ct_status ct_trainer_create(ct_trainer **out, ct_train_run *r, int thread, ct_err *err) {
    ct_status st = CT_OK;
    *out = NULL;
    ct_trainer *t = ct_calloc(1, sizeof *t);
    if (!t) return CT_ERR(err, CT_ERR_NOMEM, "no memory");
    t->r = r;
    t->p = r->p;
    const ct_train_params *p = &t->p;
    const ct_gpt_config *cfg = &r->cfg;
    t->thread = thread;
    t->W = r->W;
    /* 1. The world and the grid (a single worker is the 1x1x1 grid without MPI). */
    ct_layout lay = {p->dp, p->tp, p->pp, p->zero, p->ep};
    if (r->topo) {
        if ((st = ct_comm_world(r->topo, thread, &t->world)) != CT_OK) {
            terr(t, err, st, "worker %d: no communicator", thread);
            goto fail;
        }
        t->wrank = ct_comm_rank(t->world);
        if ((st = ct_grid_create(&t->grid, t->world, &lay, err)) != CT_OK) goto fail;
    } else if ((st = ct_layout_check(&lay, 1, err)) != CT_OK) {
        goto fail;
    }
    t->leader = t->wrank == 0;
    ct_coords at = t->grid ? *ct_grid_coords(t->grid) : ct_layout_coords(&lay, 0);
    /* 2. Device: worker w opens the device its topology place names among those the spec
     * selects (shared by --workers-per-device workers); CPU devices (PoCL) exist once per
     * process, so there the thread index counts. */
    int k = ct_worker_device(r->list, r->picks, r->npicks, r->topo, thread, p->workers_per_device);
    if (k >= r->npicks) {
        st = terr(t, err, CT_ERR_ARG, "worker %d needs device %d of those --device selects, only %d exist",
                  t->wrank, k, r->npicks);
        goto fail;
    }
    t->info = &r->list[r->picks[k]];
    ct_device_opts dopts = ct_device_opts_default();
    dopts.mem_cap = (uint64_t)(p->mem_cap_gb * 1073741824.0);
    dopts.max_alloc = (uint64_t)(p->max_alloc_mb * 1048576.0);
    if (p->max_alloc_mb > 0 && !dopts.max_alloc) dopts.max_alloc = 1;
    if (t->wrank == 0) dopts.on_build = on_build, dopts.on_build_arg = t;
    if (p->workers_per_device > 1) {
        pthread_mutex_lock(&r->ctx_lock);
        st = ct_device_open_shared(&t->dev, t->info, &dopts, &r->ctx[k], err);
        pthread_mutex_unlock(&r->ctx_lock);
    } else {
        st = ct_device_open(&t->dev, t->info, &dopts, err);
    }
    if (st != CT_OK) goto fail;
    /* 3. The schedule, and the model planned for it: this stage's chunks of blocks (stage s
     * holds model chunks s, s + pp, ...), as many activation slots as the schedule keeps alive
     * on this stage (the simulator's peak, not the micro-batch count), room for the deferred
     * weight gradients under zb1. Then the executor. */
    t->b = p->batch / p->dp;
    int N = p->pp, v = r->nchunks / N;
    if ((st = ct_sched_make(r->kind, N, r->accum, v, &t->sched, err)) != CT_OK) goto fail;
    {
        ct_sched_sim sim = {0};
        ct_sched_costs unit = ct_sched_costs_unit();
        t->slots = ct_malloc(sizeof(int) * (size_t)N);
        if (!t->slots) {
            st = terr(t, err, CT_ERR_NOMEM, "no memory");
            goto fail;
        }
        if ((st = ct_sched_simulate(t->sched, &unit, 0, &sim, err)) != CT_OK) goto fail;
        for (int q = 0; q < N; q++) t->slots[q] = sim.peak_live[q] > 0 ? sim.peak_live[q] : 1;
        ct_sched_sim_free(&sim);
    }
    ct_model_plan plan;
    {
        ct_layout l2;
        ct_coords a2;
        if ((st = ct_train_worker_plan(p, cfg, t->wrank, &l2, &a2, &plan, err)) != CT_OK) goto fail;
    }
    if (plan.attention == CT_ATTN_AUTO && t->world && ct_comm_size(t->world) > 1) {
        /* One decision for every worker (a timing each worker made for itself could differ
         * between them, and the replicas would then run different numerics): world worker 0
         * measures on its device, every worker builds that path. */
        int tpn = p->tp > 0 ? p->tp : 1;
        int32_t chosen = 0;
        if (t->leader) {
            ct_attn_path path = CT_ATTN_GEMM;
            ct_attn_cfg acfg;
            char note[256];
            if ((st = ct_attn_select(t->dev, CT_ATTN_AUTO, NULL, p->seq, cfg->channels / tpn,
                                     cfg->heads / tpn, &path, &acfg, note, sizeof note)) != CT_OK)
                chosen = -1;
            else
                chosen = path == CT_ATTN_FUSED ? 1 : 0;
            /* as ct_model_create does for auto: the timing was of one row; at this batch the
             * GEMM path's scores may need a buffer the device cannot give where the fused path
             * fits (every worker holds the same rows and heads) */
            ct_model_plan pg = plan;
            pg.attention = CT_ATTN_GEMM;
            if (chosen == 0 &&
                ct_model_gemm_exceeds(cfg, &lay, &at, &pg, ct_device_max_alloc(t->dev)))
                chosen = 1;
        }
        if ((st = ct_comm_bcast(t->world, &chosen, 1, CT_I32, 0, NULL)) != CT_OK) {
            terr(t, err, st, "agreeing on the attention path: %s", ct_comm_errmsg(t->world));
            goto fail;
        }
        if (chosen < 0) {
            st = terr(t, err, CT_ERR_DEVICE_MEM, "choosing the attention path failed on worker 0");
            goto fail;
        }
        plan.attention = chosen ? CT_ATTN_FUSED : CT_ATTN_GEMM;
    }
    plan.tp = t->grid ? ct_grid_tp(t->grid) : NULL;
    plan.ep = t->grid && p->ep > 1 ? ct_grid_ep(t->grid) : NULL;
    if ((st = ct_model_create_plan(&t->model, cfg, &lay, &at, t->dev, &plan, err)) != CT_OK) {
        char m[CT_ERR_MSG_MAX];
        snprintf(m, sizeof m, "%s", err->msg);
        terr(t, err, st, "cannot build the model on %s: %s", t->info->name, m);
        goto fail;
    }
    ct_tp_set_overlap(ct_model_tp(t->model), p->tp_overlap);
    ct_exec_opts xo = ct_train_exec_opts(p);
    if ((st = ct_exec_create(&t->x, t->model, t->grid, &xo, err)) != CT_OK) goto fail;
    /* 4. Parameters: a checkpoint, an llm.c file or the seed. */
    size_t np = ct_model_num_params(t->model);
    ct_rng_seed(&t->rng, (uint64_t)p->seed ^ 0x5A5A5A5A5A5A5A5Aull);
    if (p->resume[0]) {
        if (r->ck.nparams != np) {
            st = terr(t, err, CT_ERR_ARG, "checkpoint %s holds %zu parameters, the model %zu",
                      r->ckpath, r->ck.nparams, np);
            goto fail;
        }
        if ((st = ct_model_set_params(t->model, r->ck.params, np)) != CT_OK ||
            (st = ct_model_set_optimizer(t->model, r->ck.m, r->ck.v, np)) != CT_OK) {
            terr(t, err, st, "loading the checkpoint into the model failed: %s",
                 ct_model_errmsg(t->model));
            goto fail;
        }
        t->start = r->ck.step;
        memcpy(t->rng.s, r->ck.rng, sizeof t->rng.s);
    } else if (r->init_params) {
        if (r->init_n != np) {
            st = terr(t, err, CT_ERR_ARG, "%s holds %zu parameters, the model %zu", p->init,
                      r->init_n, np);
            goto fail;
        }
        if ((st = ct_model_set_params(t->model, r->init_params, np)) != CT_OK) {
            terr(t, err, st, "loading %s failed: %s", p->init, ct_model_errmsg(t->model));
            goto fail;
        }
    } else if ((st = ct_model_init_random(t->model, (uint64_t)p->seed)) != CT_OK) {
        terr(t, err, st, "initialisation failed: %s", ct_model_errmsg(t->model));
        goto fail;
    }
    t->step = t->start;
    /* 5. Loaders, buffers, accounting. */
    if ((st = ct_loader_create(&t->loader, r->train, p->batch, p->seq, r->accum, p->shuffle,
                               (uint64_t)p->seed, err)) != CT_OK)
        goto fail;
    if (r->val && (st = ct_loader_create(&t->vloader, r->val, p->batch, p->seq, 1, 0, 0, err)) !=
                      CT_OK)
        goto fail;
    size_t bt = (size_t)t->b * p->seq * (size_t)r->accum;
    t->in = ct_malloc(bt * sizeof(int));
    t->tg = ct_malloc(bt * sizeof(int));
    t->mem = ct_calloc((size_t)t->W * CT_MEM__COUNT, sizeof(uint64_t));
    t->tpdev = ct_calloc((size_t)t->W, sizeof(int32_t));
    if (!t->in || !t->tg || !t->mem || !t->tpdev) {
        st = terr(t, err, CT_ERR_NOMEM, "no memory for a batch");
        goto fail;
    }
    t->flops_tok = ct_train_flops_per_token(cfg, p->seq);
    t->peak = p->peak_tflops;
    t->peak_src = "--peak-tflops";
    if (t->peak <= 0 && t->leader) {
        if (t->built && r->log) {
            fprintf(r->log, "train_gpt: measuring the device's GEMM rate (MFU's peak): CLBlast "
                            "builds its GEMM program on first use\n");
            fflush(r->log);
        }
        t->peak = ct_measure_gemm_tflops(t->dev, cfg, t->b * p->seq);
        t->peak_src = "measured GEMM rate";
    }
    if (t->leader && (st = ct_metrics_open(&t->mx, p->metrics, t->start > 0, err)) != CT_OK)
        goto fail;
    if ((st = ct_exec_mem_gather(t->x, t->mem)) != CT_OK) {
        terr(t, err, st, "%s", ct_exec_errmsg(t->x));
        goto fail;
    }
    {
        /* where each worker's TP collectives run (the memory model places their buffer) */
        int32_t mine = ct_tp_device_comm(ct_model_tp(t->model));
        if (t->world && (st = ct_comm_allgather(t->world, &mine, t->tpdev, 1, CT_I32, NULL)) !=
                            CT_OK) {
            terr(t, err, st, "%s", ct_comm_errmsg(t->world));
            goto fail;
        }
        if (!t->world) t->tpdev[0] = mine;
    }
    /* 6. A pipeline's measured bubble: the executed timeline of the traced steps, else of the
     * last three (not the run's first step, which compiles kernels, when there are others). */
    t->time_b = p->steps - 1;
    t->time_a = p->steps - 3 > (int)t->start ? p->steps - 3 : (int)t->start;
    if (t->time_a == 0 && t->time_b > 0) t->time_a = 1;
    /* 7. The trace: steps [a, b] (default: the last three). */
    if (p->trace[0]) {
        t->trace_b = p->steps - 1;
        t->trace_a = p->steps - 3 > (int)t->start ? p->steps - 3 : (int)t->start;
        if (p->trace_steps[0]) sscanf(p->trace_steps, "%d:%d", &t->trace_a, &t->trace_b);
        t->time_a = t->trace_a, t->time_b = t->trace_b;
        if ((st = ct_trace_create(&t->tr, t->wrank, r->topo ? ct_topo_rank(r->topo) : 0, thread,
                                  err)) != CT_OK)
            goto fail;
        ct_exec_set_trace(t->x, t->tr);
        if ((st = ct_trace_sync(t->tr, t->world)) != CT_OK) {
            terr(t, err, st, "trace: %s", ct_comm_errmsg(t->world));
            goto fail;
        }
    }
    *out = t;
    return CT_OK;
fail:
    ct_trainer_free(t);
    return st;
}

void ct_trainer_free(ct_trainer *t) {
    if (!t) return;
    ct_sched_free(t->sched);
    free(t->slots);
    ct_exec_free(t->x);
    ct_model_free(t->model);
    ct_device_free(t->dev);
    ct_loader_free(t->loader);
    ct_loader_free(t->vloader);
    ct_metrics_close(t->mx);
    ct_trace_free(t->tr);
    ct_grid_free(t->grid);
    ct_comm_free(t->world);
    free(t->in);
    free(t->tg);
    free(t->mem);
    free(t->tpdev);
    free(t);
}

const char *ct_trainer_errmsg(const ct_trainer *t) { return t->err.msg; }
int ct_trainer_leader(const ct_trainer *t) { return t->leader; }
int64_t ct_trainer_step_index(const ct_trainer *t) { return t->step; }
int64_t ct_trainer_start(const ct_trainer *t) { return t->start; }
int ct_trainer_built_programs(const ct_trainer *t) { return t->built; }
ct_model *ct_trainer_model(ct_trainer *t) { return t->model; }
ct_exec *ct_trainer_exec(ct_trainer *t) { return t->x; }
ct_metrics *ct_trainer_metrics(ct_trainer *t) { return t->mx; }

/* Parameters one worker holds: its pipeline stage's tensors (its blocks, the embeddings on the
 * first stage, wte and the final LayerNorm on the last: the tied wte on both), each TP-split
 * tensor's 1/tp (the table's split column), replicated ones whole; a mixture of experts' expert
 * tensors apart (*experts: its E / ep experts of each held block). */
static double worker_params(const ct_train_run *r, int q, int pp, int tp, int ep, double *experts) {
    size_t sizes[CT_GPT_NUM_TENSORS];
    ct_gpt_param_sizes(&r->cfg, sizes);
    double n = 0, x = 0;
    int held = 0;
    for (int c = q; c < r->nchunks; c += pp) held += r->split[c];
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        ct_gpt_tensor_info ti = ct_gpt_tensor(&r->cfg, i);
        double k = 0, f = ti.split == CT_SPLIT_NONE ? 1.0 : 1.0 / tp;
        if (i >= CT_GPT_ln1w && i <= CT_GPT_fcprojb)
            k = (double)(sizes[i] / (size_t)r->cfg.layers) * held;
        else if (i == CT_GPT_wte && (q == 0 || q == pp - 1))
            k = (double)sizes[i];
        else if (i == CT_GPT_wpe && q == 0)
            k = (double)sizes[i];
        else if ((i == CT_GPT_lnfw || i == CT_GPT_lnfb) && q == pp - 1)
            k = (double)sizes[i];
        if (ti.expert) x += k * f / ep;
        else n += k * f;
    }
    if (experts) *experts = x;
    return n;
}

/* Model-state bytes per worker the ZeRO formulas give for psi parameters. */
static double expected_model_state(double psi, int N, int zero) {
    switch (zero) {
    case 1: return 8 * psi + 8 * psi / N;
    case 2: return 4 * psi + 12 * psi / N;
    case 3: return 16 * psi / N;
    default: return 16 * psi;
    }
}

ct_status ct_trainer_report(ct_trainer *t, FILE *f) {
    ct_status st = CT_OK;
    char *lines = NULL;
    /* collective: every worker's grid line */
    if (t->grid && (st = ct_grid_describe(t->grid, t->info->name, &lines)) != CT_OK)
        return terr(t, NULL, st, "%s", ct_comm_errmsg(t->world));
    if (!t->leader) {
        free(lines);
        return CT_OK;
    }
    const ct_train_params *p = &t->p;
    const ct_train_run *r = t->r;
    const ct_gpt_config *cfg = &r->cfg;
    size_t np = ct_model_num_params(t->model);
    int N = t->W, accum = r->accum;
    fprintf(f, "train_gpt: configuration\n");
    ct_opts_log(f, ct_train_opts, ct_train_opts_count, p);
    fprintf(f, "  device         = %s (%s, %s)\n", t->info->name, t->info->platform,
            ct_device_type_str(t->info->type));
    if (r->topo)
        fprintf(f,
                "  workers        = %d (%d ranks x %d devices per rank): dp %d x tp %d x pp %d, "
                "ZeRO-%d, %d gradient buckets of <= %g MiB, overlap %s\n",
                N, ct_topo_nranks(r->topo), ct_topo_devices_per_rank(r->topo), p->dp, p->tp, p->pp,
                p->zero, ct_exec_grads(t->x) ? ct_grads_num_buckets(ct_exec_grads(t->x)) : 0,
                p->bucket_mb, p->overlap ? "on" : "off");
    if (p->tp > 1)
        fprintf(f,
                "  tensor parallel= %d workers per TP group: heads %d / %d, MLP %d / %d, "
                "vocabulary %d / %d rows each; sequence parallelism %s; input-gradient overlap "
                "%s; collectives %s\n",
                p->tp, cfg->heads / p->tp, cfg->heads, 4 * cfg->channels / p->tp,
                4 * cfg->channels, cfg->padded_vocab / p->tp, cfg->padded_vocab,
                p->sequence_parallel ? "on" : "off", p->tp_overlap ? "on" : "off",
                ct_tp_device_comm(ct_model_tp(t->model))
                    ? "on the device (the TP workers share one device's context)"
                    : "staged through host memory");
    if (cfg->experts > 0)
        fprintf(f,
                "  experts        = %d per block, top-k %d, capacity factor %g (an expert takes at "
                "most %d of a row's %d tokens' choices), aux-loss weight %g; ep %d: %d experts per "
                "worker, their gradients averaged over the %d workers holding the same ones; "
                "%zu of %zu parameters active per token\n",
                cfg->experts, cfg->top_k, p->capacity_factor,
                p->capacity_factor > 0
                    ? (int)fmin(p->seq, ceil(p->capacity_factor * cfg->top_k * (double)p->seq /
                                             cfg->experts))
                    : p->seq,
                p->seq, p->aux_loss, p->ep, cfg->experts / p->ep, p->dp / p->ep,
                ct_gpt_active_param_count(cfg), np);
    if (lines) fprintf(f, "%s", lines);
    free(lines);
    if (p->pp == 1 && strcmp(p->schedule, "1f1b"))
        fprintf(f, "  pipeline       = none: --schedule %s does not apply with --pp 1 (one stage runs "
                   "the plain step)\n",
                p->schedule);
    if (p->pp > 1) { /* the split, the schedule, what it keeps alive */
        int v = r->nchunks / p->pp;
        char split[512] = "", slots[256] = "";
        size_t a = 0, b = 0;
        for (int c = 0; c < r->nchunks && a < sizeof split - 16; c++)
            a += (size_t)snprintf(split + a, sizeof split - a, "%s%d", c ? "," : "", r->split[c]);
        for (int q = 0; q < p->pp && b < sizeof slots - 16; q++)
            b += (size_t)snprintf(slots + b, sizeof slots - b, "%s%d", q ? "," : "", t->slots[q]);
        double blk, emb, head;
        ct_pp_costs(cfg, p->seq, &blk, &emb, &head);
        ct_sched_sim sim = {0};
        ct_sched_costs unit = ct_sched_costs_unit();
        ct_err e2 = {0};
        double bub = ct_sched_simulate(t->sched, &unit, 0, &sim, &e2) == CT_OK ? sim.bubble : NAN;
        ct_sched_sim_free(&sim);
        fprintf(f,
                "  pipeline       = %d stages%s, schedule %s, %d micro-batches; blocks per %s "
                "%s (%s); activation slots per stage %s (the schedule's peak, of %d "
                "micro-batches); simulated bubble %.3f at unit costs\n",
                p->pp, v > 1 ? "" : "", ct_sched_name(r->kind), r->accum,
                v > 1 ? "model chunk" : "stage", split,
                r->split_given ? "--pp-split"
                               : "balanced by FLOPs: a block 1, the embedding and the head extra",
                slots, r->accum, bub);
        if (v > 1)
            fprintf(f, "                   %d chunks per stage (stage s holds chunks s, s+%d, ...)\n",
                    v, p->pp);
        if (!r->split_given)
            fprintf(f, "                   work per token: block %.4g, embedding %.4g, head %.4g "
                       "FLOPs (%.2f blocks)\n",
                    blk, emb, head, head / blk);
    }
    fprintf(f, "  model          = %s: L=%d NH=%d C=%d V=%d Vp=%d maxT=%d, %zu parameters\n",
            r->origin, cfg->layers, cfg->heads, cfg->channels, cfg->vocab, cfg->padded_vocab,
            cfg->max_seq, np);
    fprintf(f, "  data           = %s: %zu tokens in %d file(s), %lld steps per epoch\n",
            ct_data_name(r->train), ct_data_count(r->train), ct_data_files(r->train),
            (long long)ct_loader_windows(t->loader));
    if (r->val)
        fprintf(f, "  validation     = %s: %zu tokens\n", ct_data_name(r->val),
                ct_data_count(r->val));
    else
        fprintf(f, "  validation     = none\n");
    fprintf(f, "  batch          = %d rows x %d tokens x %d micro-batches = %d tokens per step",
            p->batch, p->seq, accum, p->batch * p->seq * accum);
    if (N > 1) fprintf(f, " (%d rows per worker)", t->b);
    fprintf(f, "\n  attention path = %s\n", ct_model_attention_note(t->model));
    fprintf(f,
            "  activations    = %.1f MiB per micro-batch slot, %.1f MiB of it per layer; %.1f MiB "
            "of scratch shared by the slots (%.1f MiB of it for recomputation)\n",
            ct_model_slot_bytes(t->model) / 1048576.0, ct_model_layer_bytes(t->model) / 1048576.0,
            ct_model_scratch_bytes(t->model) / 1048576.0,
            ct_model_recompute_bytes(t->model) / 1048576.0);
    size_t big = 0;
    int npc = ct_model_act_pieces(t->model, &big);
    if (npc > 1)
        fprintf(f,
                "                   held in %d device buffers (the largest %.1f MiB): one would "
                "exceed the device's largest allocation, %.1f MiB\n",
                npc, big / 1048576.0, ct_device_max_alloc(t->dev) / 1048576.0);
    int nbuf = 0, narr = ct_params_held(ct_model_params(t->model), &nbuf, &big);
    if (nbuf > narr)
        fprintf(f,
                "  model state    = %d arrays (parameters, gradients, optimizer) held in %d "
                "device buffers (the largest %.1f MiB): some would exceed the device's largest "
                "allocation, %.1f MiB\n",
                narr, nbuf, big / 1048576.0, ct_device_max_alloc(t->dev) / 1048576.0);
    fprintf(f, "  flops/token    = %.4g (6*N + 12*L*C*T%s)\n", t->flops_tok,
            cfg->experts > 0 ? ", N the active parameters" : "");
    fprintf(f, "  peak           = %.4g TFLOP/s (%s)\n", t->peak, t->peak_src);
    fprintf(f, "  start step     = %lld\n", (long long)t->start);
    if (t->tr)
        fprintf(f, "  trace          = %s, steps %d to %d\n", p->trace, t->trace_a, t->trace_b);
    char cfgline[320];
    snprintf(cfgline, sizeof cfgline,
             "\"params\":%zu,\"layers\":%d,\"heads\":%d,\"dim\":%d,\"vocab\":%d,\"seq\":%d,"
             "\"tokens_per_step\":%d,\"peak_tflops\":%.6g,\"workers\":%d,\"zero\":%d,"
             "\"dp\":%d,\"tp\":%d,\"sequence_parallel\":%d,\"experts\":%d,\"top_k\":%d,"
             "\"ep\":%d",
             np, cfg->layers, cfg->heads, cfg->channels, cfg->vocab, p->seq,
             p->batch * p->seq * accum, t->peak, N, p->zero, p->dp, p->tp, p->sequence_parallel,
             cfg->experts, cfg->top_k, p->ep);
    ct_metrics_record(t->mx, "config", cfgline);
    /* The memory report: one line and one record per worker, the bytes allocated beside the
     * memory model's prediction (ct_train_mem_predict, at the attention path the model chose)
     * and, with several workers, the model state against the ZeRO formula. */
    ct_train_params pp_ = *p;
    pp_.attention = ct_attn_path_name(ct_model_attention(t->model, NULL));
    {
        ct_recompute rc = ct_model_plan_of(t->model)->recompute;
        if (rc != CT_RECOMPUTE_NONE)
            fprintf(f, "  recomputation  = %s", ct_recompute_name(rc));
        if (rc == CT_RECOMPUTE_BLOCK && cfg->experts > 0)
            fprintf(f, ": each block keeps its input and its MoE layer's tensors (recomputing "
                       "those would repeat the routing and the all-to-alls), and runs its forward "
                       "again (to ln2) before its backward\n");
        else if (rc == CT_RECOMPUTE_BLOCK)
            fprintf(f, ": each block keeps its input only, and runs its forward again (to the "
                       "GELU) before its backward\n");
        else if (rc == CT_RECOMPUTE_ATTENTION && cfg->experts > 0)
            fprintf(f, ": %s recomputed before each block's backward (the MoE layers keep their "
                       "own tensors)\n",
                    ct_model_attention(t->model, NULL) == CT_ATTN_FUSED
                        ? "the LayerNorm outputs dropped and"
                        : "the attention probabilities and the LayerNorm outputs dropped and");
        else if (rc == CT_RECOMPUTE_ATTENTION)
            fprintf(f, ": %s recomputed before each block's backward\n",
                    ct_model_plan_of(t->model)->split_backward
                        ? "the attention probabilities dropped (zb1's weight half reads the "
                          "LayerNorm and GELU outputs later, so they are kept) and"
                    : ct_model_attention(t->model, NULL) == CT_ATTN_FUSED
                        ? "the LayerNorm and GELU outputs dropped (the fused path keeps no "
                          "scores) and"
                        : "the attention probabilities and the LayerNorm and GELU outputs "
                          "dropped and");
    }
    fprintf(f,
            "  memory per worker: allocated | predicted by the memory model, bytes (device; comm "
            "= host staging)%s:\n",
            p->pp > 1 ? ", model state against the ZeRO formula for its stage's parameters"
            : N > 1   ? ", model state against the ZeRO formula for psi_tp"
                      : "");
    for (int w = 0; w < N; w++) {
        const uint64_t *u = t->mem + (size_t)w * CT_MEM__COUNT;
        ct_mem_predict mp;
        ct_err e2 = {0};
        pp_.tp_comm = t->tpdev[w] ? "device" : "host";
        int okp = ct_train_mem_predict(&pp_, cfg, w, &mp, &e2) == CT_OK;
        uint64_t pred[CT_MEM__COUNT];
        for (int c = 0; c < CT_MEM__COUNT; c++)
            pred[c] = okp ? mp.device[c] + (c == CT_MEM_COMM ? mp.host_comm : 0) : 0;
        int q = ct_layout_coords(&(ct_layout){p->dp, p->tp, p->pp, p->zero, p->ep}, w).pp_rank;
        /* experts: their share over ep, sharded over the dp / ep workers holding them */
        double psx = 0, psi = worker_params(r, q, p->pp, p->tp, p->ep, &psx);
        double want = expected_model_state(psi, p->dp, p->zero) +
                      expected_model_state(psx, p->dp / p->ep, p->zero);
        uint64_t state = u[CT_MEM_PARAMS] + u[CT_MEM_GRADS] + u[CT_MEM_OPTIMIZER];
        char line[768], rest[160] = "";
        size_t l = (size_t)snprintf(line, sizeof line, "    worker %d:", w);
        static const char *const cn[CT_MEM__COUNT] = {"params", "grads", "optimizer",
                                                       "activations", "workspace", "comm"};
        for (int c = 0; c < CT_MEM__COUNT; c++)
            l += (size_t)snprintf(line + l, sizeof line - l, " %s %llu|%llu", cn[c],
                                  (unsigned long long)u[c], (unsigned long long)pred[c]);
        if (p->pp > 1) snprintf(rest, sizeof rest, " (stage %d, %d slots)", q, t->slots[q]);
        if (N > 1)
            snprintf(rest + strlen(rest), sizeof rest - strlen(rest),
                     " | model state %llu (%.3f x formula)", (unsigned long long)state,
                     (double)state / want);
        fprintf(f, "%s%s%s\n", line, rest, okp ? "" : " (no prediction: see below)");
        if (!okp) fprintf(f, "      memory model: %s\n", e2.msg);
        char rec[1200];
        size_t k = (size_t)snprintf(
            rec, sizeof rec,
            "\"worker\":%d,\"workers\":%d,\"zero\":%d,\"params\":%llu,\"grads\":%llu,"
            "\"optimizer\":%llu,\"activations\":%llu,\"workspace\":%llu,\"comm\":%llu,"
            "\"model_state\":%llu,\"model_state_formula\":%.0f,\"num_params\":%zu,"
            "\"psi_tp\":%.0f,\"tp\":%d,\"dp\":%d,\"recompute\":\"%s\",\"psi_experts\":%.0f,"
            "\"ep\":%d",
            w, N, p->zero, (unsigned long long)u[CT_MEM_PARAMS],
            (unsigned long long)u[CT_MEM_GRADS], (unsigned long long)u[CT_MEM_OPTIMIZER],
            (unsigned long long)u[CT_MEM_ACTIVATIONS], (unsigned long long)u[CT_MEM_WORKSPACE],
            (unsigned long long)u[CT_MEM_COMM], (unsigned long long)state, want, np, psi, p->tp,
            p->dp, p->recompute, psx, p->ep);
        if (okp)
            k += (size_t)snprintf(
                rec + k, sizeof rec - k,
                ",\"predicted\":{\"params\":%llu,\"grads\":%llu,\"optimizer\":%llu,"
                "\"activations\":%llu,\"workspace\":%llu,\"comm\":%llu,\"host_grads\":%llu,"
                "\"host_zero\":%llu,\"host_tp\":%llu,\"act_slot\":%llu,\"act_scratch\":%llu,"
                "\"act_layer\":%llu,\"act_recompute\":%llu,\"slots\":%d,\"attention\":\"%s\","
                "\"largest\":%llu,\"largest_name\":\"%s\"}",
                (unsigned long long)pred[CT_MEM_PARAMS], (unsigned long long)pred[CT_MEM_GRADS],
                (unsigned long long)pred[CT_MEM_OPTIMIZER],
                (unsigned long long)pred[CT_MEM_ACTIVATIONS],
                (unsigned long long)pred[CT_MEM_WORKSPACE], (unsigned long long)pred[CT_MEM_COMM],
                (unsigned long long)mp.host_grads, (unsigned long long)mp.host_zero,
                (unsigned long long)mp.host_tp, (unsigned long long)mp.act_slot,
                (unsigned long long)mp.act_scratch, (unsigned long long)mp.act_layer,
                (unsigned long long)mp.act_recompute, mp.slots, ct_attn_path_name(mp.attention),
                (unsigned long long)mp.largest, mp.largest_name);
        if (p->pp > 1) /* the stage and its activation slots */
            snprintf(rec + k, sizeof rec - k, ",\"stage\":%d,\"slots\":%d,\"stage_params\":%.0f",
                     q, t->slots[q], psi);
        ct_metrics_record(t->mx, "memory", rec);
    }
    fflush(f);
    return CT_OK;
}

/* The "moe" record of a step: tokens (choices kept) per block and expert, routed choices, the
 * rows each worker's experts computed. */
static ct_status moe_record(ct_trainer *t, int64_t step) {
    ct_exec_moe mo;
    if (!ct_exec_moe_get(t->x, &mo)) return CT_OK;
    size_t LE = (size_t)mo.layers * mo.experts, cap = 256 + 24 * (2 * LE + (size_t)mo.workers);
    char *b = ct_malloc(cap);
    if (!b) return terr(t, NULL, CT_ERR_NOMEM, "no memory for the moe record");
    long long kept = 0, routed = 0;
    for (size_t i = 0; i < LE; i++) kept += mo.kept[i], routed += mo.routed[i];
    size_t at = (size_t)snprintf(b, cap, "\"step\":%lld,\"choices\":%lld,\"dropped\":%lld,",
                                 (long long)step, routed, routed - kept);
    for (int pass = 0; pass < 2; pass++) {
        const int32_t *a = pass ? mo.routed : mo.kept;
        at += (size_t)snprintf(b + at, cap - at, "\"%s\":[", pass ? "routed_per_expert"
                                                                  : "tokens_per_expert");
        for (int l = 0; l < mo.layers; l++) {
            at += (size_t)snprintf(b + at, cap - at, "%s[", l ? "," : "");
            for (int e = 0; e < mo.experts; e++)
                at += (size_t)snprintf(b + at, cap - at, "%s%d", e ? "," : "",
                                       (int)a[(size_t)l * mo.experts + e]);
            at += (size_t)snprintf(b + at, cap - at, "]");
        }
        at += (size_t)snprintf(b + at, cap - at, "],");
    }
    at += (size_t)snprintf(b + at, cap - at, "\"tokens_per_worker\":[");
    for (int w = 0; w < mo.workers; w++)
        at += (size_t)snprintf(b + at, cap - at, "%s%d", w ? "," : "", (int)mo.rows[w]);
    snprintf(b + at, cap - at, "]");
    ct_status st = ct_metrics_record(t->mx, "moe", b);
    free(b);
    return st;
}

ct_status ct_trainer_step(ct_trainer *t, ct_step_metrics *sm) {
    ct_status st;
    const ct_train_params *p = &t->p;
    int accum = t->r->accum;
    int64_t step = t->step;
    int tracing = t->tr && step >= t->trace_a && step <= t->trace_b;
    ct_trace_enable(t->tr, tracing);
    ct_exec_set_timeline(t->x, p->pp > 1 && step >= t->time_a && step <= t->time_b);
    double t0 = ct_time_now();
    double lr = ct_lr_at(t->r->sched, p->lr, p->warmup, p->steps, p->min_lr_frac, step);
    /* micro-batch mb of step s is rows [mb*B, (mb+1)*B) of the step; worker w takes rows
     * [mb*B + d*b, mb*B + (d+1)*b) of it, d its DP rank */
    int d = t->grid ? ct_grid_coords(t->grid)->dp_rank : 0;
    size_t bt = (size_t)t->b * p->seq;
    for (int mb = 0; mb < accum; mb++)
        if ((st = ct_loader_rows(t->loader, step, mb * p->batch + d * t->b, t->b, t->in + mb * bt,
                                 t->tg + mb * bt, &t->err)) != CT_OK)
            return st;
    ct_adamw_hp hp = {(float)lr,  (float)p->beta1,        (float)p->beta2,
                      (float)p->eps, (float)p->weight_decay, (float)p->grad_clip};
    ct_step_result res;
    if ((st = ct_exec_step(t->x, t->sched, t->in, t->tg, t->b, p->seq, &hp, (int)(step + 1),
                           &res)) != CT_OK)
        return terr(t, NULL, st, "%s", ct_exec_errmsg(t->x));
    double dt = ct_time_now() - t0;
    double tokens_step = (double)p->batch * p->seq * accum;
    ct_mem_stats ms;
    ct_device_mem_stats(t->dev, &ms);
    sm->step = step;
    sm->loss = isnan(res.loss) ? NAN : res.loss;
    sm->lr = lr;
    sm->grad_norm = isnan(res.grad_norm) ? NAN : res.grad_norm; /* "nan", never "-nan" */
    sm->ms = dt * 1e3;
    sm->tokens_per_s = tokens_step / dt;
    sm->tflops = t->flops_tok * tokens_step / dt / 1e12;
    sm->mfu = t->peak > 0 ? sm->tflops / t->peak : NAN;
    sm->mem_bytes = ms.total_current;
    t->skips_run = res.skipped ? t->skips_run + 1 : 0;
    sm->skipped = res.skipped;
    sm->skips_run = t->skips_run;
    sm->moe = t->r->cfg.experts > 0;
    sm->aux_loss = res.aux_loss, sm->drop_frac = res.drop_frac, sm->max_load = res.max_load;
    if (t->leader) ct_metrics_train(t->mx, sm);
    if (t->leader && sm->moe && (st = moe_record(t, step)) != CT_OK) return st;
    t->step++;
    ct_trace_enable(t->tr, 0);
    ct_exec_set_timeline(t->x, 0);
    if (res.skipped && (!strcmp(p->nonfinite, "stop") || t->skips_run >= p->max_skips)) {
        /* every worker took the same decisions, so all stop here together */
        char first[200];
        if ((st = ct_exec_nonfinite_report(t->x, first, sizeof first)) != CT_OK)
            return terr(t, NULL, st, "%s", ct_exec_errmsg(t->x));
        char why[160];
        if (!strcmp(p->nonfinite, "stop"))
            snprintf(why, sizeof why, "--nonfinite stop");
        else
            snprintf(why, sizeof why, "%d skipped steps in a row (--max-skips %d)", t->skips_run,
                     p->max_skips);
        return terr(t, NULL, CT_ERR_NONFINITE,
                    "step %lld: gradient norm %g, loss %g: not finite; %s: stopping (the "
                    "parameters and optimizer state are those after step %lld); %s",
                    (long long)step + 1, sm->grad_norm, sm->loss, why,
                    (long long)(step - t->skips_run + 1), first);
    }
    return CT_OK;
}

ct_status ct_trainer_eval(ct_trainer *t, double *out) {
    *out = NAN;
    if (!t->vloader) return CT_OK;
    const ct_train_params *p = &t->p;
    int d = t->grid ? ct_grid_coords(t->grid)->dp_rank : 0;
    int64_t W = ct_loader_windows(t->vloader);
    int n = p->eval_batches < W ? p->eval_batches : (int)W;
    double sum = 0;
    ct_status st;
    for (int i = 0; i < n; i++) {
        float loss = 0;
        if ((st = ct_loader_rows(t->vloader, i, d * t->b, t->b, t->in, t->tg, &t->err)) != CT_OK)
            return st;
        if ((st = ct_exec_forward(t->x, t->in, t->tg, t->b, p->seq, &loss, NULL)) != CT_OK)
            return terr(t, NULL, st, "evaluation failed: %s", ct_exec_errmsg(t->x));
        sum += loss;
    }
    /* this worker's mean, averaged over DP as a float */
    *out = sum / n;
    if (t->W > 1) {
        float vf = (float)*out;
        if ((st = ct_exec_dp_average(t->x, &vf)) != CT_OK)
            return terr(t, NULL, st, "%s", ct_exec_errmsg(t->x));
        *out = vf;
    }
    return CT_OK;
}

/* The trainer's forward for generation: one row on every worker (the forward is collective
 * when parameters are sharded), logits on the leader. */
static ct_status trainer_logits(void *user, const int *ctx, int n, float *logits, ct_err *err) {
    ct_trainer *t = (ct_trainer *)user;
    ct_status st = ct_exec_forward(t->x, ctx, NULL, 1, n, NULL, logits);
    if (st != CT_OK) CT_ERR(err, st, "sampling forward failed: %s", ct_exec_errmsg(t->x));
    return st;
}

/* Every forward is collective under ZeRO-3 (parameter gathers), tensor parallelism (the
 * block's own collectives), expert parallelism (the MoE layer's all-to-alls) and a pipeline (it
 * passes through every stage). */
int ct_trainer_sample_collective(const ct_trainer *t) {
    return t->p.zero >= 3 || t->p.tp > 1 || t->p.pp > 1 || t->p.ep > 1;
}

ct_status ct_trainer_sample(ct_trainer *t, int **tokens, int *n) {
    const ct_train_params *p = &t->p;
    const ct_gpt_config *c = &t->r->cfg;
    int cap = p->sample_len + 1024, np = 0;
    *tokens = NULL;
    *n = 0;
    int *tok = ct_malloc((size_t)cap * sizeof(int));
    if (!tok) return terr(t, NULL, CT_ERR_NOMEM, "no memory for a sample");
    ct_status st = ct_prompt_parse(p->prompt, c->vocab, t->r->tok ? ct_tokenizer_eot(t->r->tok) : -1,
                                   tok, 1024, &np, &t->err);
    /* every worker that samples draws the same tokens (same RNG, same logits) */
    if (st == CT_OK)
        st = ct_generate(trainer_logits, t, c, tok, np, np + p->sample_len, p->seq, p->temperature,
                         p->sample_top_k, &t->rng, &t->err);
    if (st != CT_OK) {
        free(tok);
        return st;
    }
    *tokens = tok;
    *n = np + p->sample_len;
    return CT_OK;
}

const ct_tokenizer *ct_trainer_tokenizer(const ct_trainer *t) { return t->r->tok; }

ct_status ct_trainer_save(ct_trainer *t, char *path, size_t len) {
    const ct_train_params *p = &t->p;
    ct_train_run *r = t->r;
    ct_checkpoint ck;
    memset(&ck, 0, sizeof ck);
    ck.cfg = r->cfg;
    ck.nparams = ct_model_num_params(t->model);
    ck.step = t->step;
    memcpy(ck.rng, t->rng.s, sizeof ck.rng);
    ck.loader_B = p->batch;
    ck.loader_T = p->seq;
    ck.loader_accum = r->accum;
    ck.loader_shuffle = p->shuffle;
    ck.loader_seed = (uint64_t)p->seed;
    ck.data_tokens = ct_data_count(r->train);
    ct_status st = CT_OK;
    if (t->leader) {
        ck.params = ct_malloc(ck.nparams * 4);
        ck.m = ct_malloc(ck.nparams * 4);
        ck.v = ct_malloc(ck.nparams * 4);
        size_t need = ct_opts_format(NULL, 0, ct_train_opts, ct_train_opts_count, p);
        ck.meta = ct_malloc(need + 1);
        if (ck.meta) ct_opts_format(ck.meta, need + 1, ct_train_opts, ct_train_opts_count, p);
    }
    /* collective: every worker takes part even if the leader is out of memory, then fails */
    st = ct_exec_gather_state(t->x, ck.params, ck.m, ck.v);
    if (st != CT_OK) st = terr(t, NULL, st, "gathering the model for a checkpoint failed: %s",
                               ct_exec_errmsg(t->x));
    if (st == CT_OK && t->leader && (!ck.params || !ck.m || !ck.v || !ck.meta))
        st = terr(t, NULL, CT_ERR_NOMEM, "no memory for a checkpoint");
    if (st == CT_OK && t->leader)
        st = ct_checkpoint_save_dir(p->save, &ck, path, len, &t->err);
    if (st == CT_OK && t->leader && p->keep_last > 0 &&
        (st = ct_checkpoint_prune(p->save, p->keep_last, NULL, &t->err)) != CT_OK) {
        char m[CT_ERR_MSG_MAX];
        snprintf(m, sizeof m, "%s", t->err.msg);
        terr(t, NULL, st, "the checkpoint was written, but --keep-last %d could not remove the "
                          "older ones: %s", p->keep_last, m);
    }
    ct_checkpoint_release(&ck);
    return st;
}

ct_status ct_trainer_save_model(ct_trainer *t) {
    size_t np = ct_model_num_params(t->model);
    float *host = t->leader ? ct_malloc(np * sizeof(float)) : NULL;
    ct_status st = ct_exec_gather_state(t->x, host, NULL, NULL);
    if (st != CT_OK) st = terr(t, NULL, st, "%s", ct_exec_errmsg(t->x));
    if (st == CT_OK && t->leader && !host) st = terr(t, NULL, CT_ERR_NOMEM, "no memory to save the model");
    if (st == CT_OK && t->leader) st = ct_model_file_write(t->p.save_model, &t->r->cfg, host, &t->err);
    free(host);
    return st;
}

ct_status ct_trainer_pipeline_report(ct_trainer *t, FILE *f, ct_pipeline_bubble *out) {
    const ct_train_params *p = &t->p;
    if (out) memset(out, 0, sizeof *out);
    if (p->pp < 2 || !t->grid) return CT_OK;
    enum { F_PP, F_DP, F_STEPS, F_COMP, F_MAKE, F_FWD, F_BWD, F_BIN, F_BWT, F_SEND, F_RECV, F__N };
    ct_exec_timeline tl;
    ct_exec_timeline_get(t->x, &tl);
    float mine[F__N], *all = ct_malloc(sizeof(float) * F__N * (size_t)t->W);
    if (!all) return terr(t, NULL, CT_ERR_NOMEM, "no memory for the pipeline report");
    const ct_coords *at = ct_grid_coords(t->grid);
    mine[F_PP] = (float)at->pp_rank, mine[F_DP] = (float)(at->dp_rank + at->tp_rank);
    mine[F_STEPS] = (float)tl.steps, mine[F_COMP] = (float)tl.compute_ms;
    mine[F_MAKE] = (float)tl.makespan_ms;
    const ct_act_kind kinds[6] = {CT_ACT_FWD, CT_ACT_BWD, CT_ACT_BWD_INPUT, CT_ACT_BWD_WEIGHT,
                                  CT_ACT_SEND_ACT, CT_ACT_RECV_ACT};
    for (int i = 0; i < 6; i++) { /* mean per action; sends and receives of both kinds together */
        int k = kinds[i];
        double ms = tl.ms[k], n = (double)tl.count[k];
        if (k == CT_ACT_SEND_ACT) ms += tl.ms[CT_ACT_SEND_GRAD], n += (double)tl.count[CT_ACT_SEND_GRAD];
        if (k == CT_ACT_RECV_ACT) ms += tl.ms[CT_ACT_RECV_GRAD], n += (double)tl.count[CT_ACT_RECV_GRAD];
        mine[F_FWD + i] = n > 0 ? (float)(ms / n) : 0.0f;
    }
    ct_status st = ct_comm_allgather(t->world, mine, all, F__N, CT_F32, NULL);
    if (st != CT_OK) {
        free(all);
        return terr(t, NULL, st, "pipeline report: %s", ct_comm_errmsg(t->world));
    }
    /* the last timed step's action durations, every worker's list padded to the longest */
    const double *ldur = NULL;
    double lcomp = 0, lmake = 0;
    int ln = 0, lmax = 0;
    ct_exec_timeline_last(t->x, &ldur, &ln, &lcomp, &lmake);
    int32_t li = ln;
    if ((st = ct_comm_allreduce(t->world, &li, &li, 1, CT_I32, CT_OP_MAX, NULL)) != CT_OK) {
        free(all);
        return terr(t, NULL, st, "pipeline report: %s", ct_comm_errmsg(t->world));
    }
    lmax = li;
    float *lmine = ct_calloc((size_t)lmax + 2, sizeof(float));
    float *lall = ct_calloc(((size_t)lmax + 2) * (size_t)t->W, sizeof(float));
    if (!lmine || !lall) {
        free(all), free(lmine), free(lall);
        return terr(t, NULL, CT_ERR_NOMEM, "no memory for the pipeline report");
    }
    lmine[0] = (float)lcomp, lmine[1] = (float)lmake;
    for (int i = 0; i < ln; i++) lmine[2 + i] = (float)ldur[i];
    st = ct_comm_allgather(t->world, lmine, lall, (size_t)lmax + 2, CT_F32, NULL);
    free(lmine);
    if (st != CT_OK) {
        free(all), free(lall);
        return terr(t, NULL, st, "pipeline report: %s", ct_comm_errmsg(t->world));
    }
    int N = p->pp;
    ct_err e2 = {0};
    const float *row[CT_PIPELINE_MAX_STAGES] = {0};
    for (int w = 0; w < t->W; w++) /* the first data-parallel replica's stages */
        if (all[w * F__N + F_DP] == 0 && (int)all[w * F__N + F_PP] < CT_PIPELINE_MAX_STAGES)
            row[(int)all[w * F__N + F_PP]] = all + (size_t)w * F__N;
    int steps = row[0] ? (int)row[0][F_STEPS] : 0;
    if (!t->leader || steps == 0 || N > CT_PIPELINE_MAX_STAGES || lmax == 0) {
        free(all), free(lall);
        return CT_OK;
    }
    /* the replay of the last step: the first replica's stages' durations */
    double *dur[CT_PIPELINE_MAX_STAGES] = {0}, lcompute = 0, lspan = 0;
    int okr = 1;
    ct_sched_sim sr = {0};
    for (int w = 0; w < t->W; w++) {
        if (all[w * F__N + F_DP] != 0) continue;
        int q = (int)all[w * F__N + F_PP];
        const float *src = lall + (size_t)w * (lmax + 2);
        if (!(dur[q] = ct_calloc((size_t)lmax, sizeof(double)))) okr = 0;
        for (int i = 0; okr && i < t->sched->n[q] && i < lmax; i++) dur[q][i] = src[2 + i];
        lcompute += src[0], lspan = src[1];
    }
    okr = okr && ct_sched_replay(t->sched, (const double *const *)dur, 0, 0, &sr, &e2) == CT_OK;
    double lmeas = lspan > 0 ? 1 - lcompute / (N * lspan) : NAN;
    ct_sched_costs *c = ct_calloc((size_t)N, sizeof *c), unit = ct_sched_costs_unit();
    ct_sched_sim sm = {0}, su = {0};
    if (!c) {
        for (int q = 0; q < N; q++) free(dur[q]);
        ct_sched_sim_free(&sr);
        free(all), free(lall);
        return terr(t, NULL, CT_ERR_NOMEM, "no memory for the pipeline report");
    }
    for (int q = 0; q < N; q++) {
        const float *x = row[q];
        c[q].fwd = x[F_FWD], c[q].bwd = x[F_BWD], c[q].bwd_input = x[F_BIN];
        c[q].bwd_weight = x[F_BWT], c[q].send = x[F_SEND], c[q].recv = x[F_RECV], c[q].comm = 0;
    }
    int okm = ct_sched_simulate_stages(t->sched, c, 0, &sm, &e2) == CT_OK;
    int oku = ct_sched_simulate(t->sched, &unit, 0, &su, &e2) == CT_OK;
    if (f) fprintf(f,
            "pipeline bubble (%s, %d stages, %d micro-batches; executed timeline of %d step%s, "
            "steps %d to %d, the device waited for after every action), measured beside the "
            "simulator fed the measured action costs:\n",
            ct_sched_name(t->r->kind), N, t->r->accum, steps, steps > 1 ? "s" : "", t->time_a + 1,
            t->time_b + 1);
    double mmean = 0;
    char meas[1024] = "", simu[1024] = "", costs[2048] = "";
    size_t la = 0, lb = 0, lc = 0;
    for (int q = 0; q < N; q++) {
        const float *x = row[q];
        double mb = x[F_MAKE] > 0 ? 1 - x[F_COMP] / x[F_MAKE] : NAN;
        mmean += mb / N;
        if (f) fprintf(f, "  stage %d: measured %.3f  simulated %.3f | ", q, mb,
                okm ? sm.stage_bubble[q] : NAN);
        if (f && x[F_FWD] > 0) fprintf(f, "F %.2f ms ", x[F_FWD]);
        if (f && x[F_BWD] > 0) fprintf(f, "B %.2f ms ", x[F_BWD]);
        if (f && x[F_BIN] > 0) fprintf(f, "B_input %.2f ms B_weight %.2f ms ", x[F_BIN], x[F_BWT]);
        if (f) fprintf(f, "send %.2f ms recv %.2f ms\n", x[F_SEND], x[F_RECV]);
        la += (size_t)snprintf(meas + la, sizeof meas - la, "%s%.5f", q ? "," : "", mb);
        lb += (size_t)snprintf(simu + lb, sizeof simu - lb, "%s%.5f", q ? "," : "",
                               okm ? sm.stage_bubble[q] : 0.0);
        lc += (size_t)snprintf(costs + lc, sizeof costs - lc,
                               "%s{\"fwd\":%.4f,\"bwd\":%.4f,\"bwd_input\":%.4f,\"bwd_weight\":"
                               "%.4f,\"send\":%.4f,\"recv\":%.4f}",
                               q ? "," : "", x[F_FWD], x[F_BWD], x[F_BIN], x[F_BWT], x[F_SEND],
                               x[F_RECV]);
        if (la >= sizeof meas || lb >= sizeof simu || lc >= sizeof costs) break;
    }
    if (f) fprintf(f, "  all    : measured %.3f  simulated %.3f  (unit costs: %.3f)\n", mmean,
            okm ? sm.bubble : NAN, oku ? su.bubble : NAN);
    if (f)
        fprintf(f, "  the last step replayed with each action's own duration: simulated %.3f, "
                   "measured %.3f\n",
                okr ? sr.bubble : NAN, lmeas);
    if (out) {
        out->steps = steps, out->stages = N, out->measured = mmean;
        out->simulated = okm ? sm.bubble : NAN, out->unit = oku ? su.bubble : NAN;
        out->makespan_ms = row[0][F_MAKE] / steps;
        out->last_measured = lmeas, out->last_replayed = okr ? sr.bubble : NAN;
        for (int q = 0; q < N; q++) {
            const float *x = row[q];
            out->stage_measured[q] = x[F_MAKE] > 0 ? 1 - x[F_COMP] / x[F_MAKE] : NAN;
            out->stage_simulated[q] = okm ? sm.stage_bubble[q] : NAN;
            out->fwd_ms[q] = x[F_FWD], out->bwd_ms[q] = x[F_BWD], out->bwd_input_ms[q] = x[F_BIN];
            out->bwd_weight_ms[q] = x[F_BWT], out->send_ms[q] = x[F_SEND], out->recv_ms[q] = x[F_RECV];
        }
    }
    char *rec = ct_malloc(4096 + sizeof costs);
    if (rec) {
        snprintf(rec, 4096 + sizeof costs,
                 "\"schedule\":\"%s\",\"stages\":%d,\"micro_batches\":%d,\"steps_timed\":%d,"
                 "\"bubble_measured\":%.5f,\"bubble_simulated\":%.5f,\"bubble_unit\":%.5f,"
                 "\"stage_measured\":[%s],\"stage_simulated\":[%s],\"costs_ms\":[%s],"
                 "\"last_measured\":%.5f,\"last_replayed\":%.5f",
                 ct_sched_name(t->r->kind), N, t->r->accum, steps, mmean, okm ? sm.bubble : 0.0,
                 oku ? su.bubble : 0.0, meas, simu, costs, lmeas, okr ? sr.bubble : 0.0);
        ct_metrics_record(t->mx, "pipeline", rec);
    }
    free(rec);
    if (f) fflush(f);
    ct_sched_sim_free(&sm);
    ct_sched_sim_free(&su);
    ct_sched_sim_free(&sr);
    for (int q = 0; q < N; q++) free(dur[q]);
    free(c);
    free(all);
    free(lall);
    return CT_OK;
}

ct_status ct_trainer_finish(ct_trainer *t) {
    if (!t->tr) return CT_OK;
    ct_status st = ct_trace_write(t->tr, t->world, t->p.trace, &t->err);
    return st;
}
