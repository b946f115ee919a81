/* check.c - the checks of a run's parameters that need no file or device: each flag's range,
 * the combinations the layouts support, the output directories that must exist. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "train_impl.h"

/* An output file's directory must exist before training starts, not fail at the end. */
static ct_status check_out_dir(const char *path, const char *flag, ct_err *err) {
    if (!path || !path[0]) return CT_OK;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') dir[--n] = 0; /* DIR/: a directory the writer makes */
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
    {
        int arch = 0;
        NEED(ct_arch_parse(p->arch, &arch) == CT_OK, "--arch must be gpt2 or llama (got '%s')",
             p->arch);
        /* a Llama flag describes a new Llama model (a file's: read there, config.c compares) */
        static const char *const lflags[] = {"kv-heads", "ffn-dim", "rope-theta", "norm-eps",
                                             "tie-embeddings"};
        for (size_t i = 0; i < sizeof lflags / sizeof lflags[0]; i++)
            NEED(arch == CT_ARCH_LLAMA || !ct_train_given(p, lflags[i]) || p->init[0] ||
                     p->resume[0],
                 "--%s is a Llama model's; give --arch llama (a GPT-2 model has none)",
                 lflags[i]);
        NEED(p->kv_heads >= 0, "--kv-heads must be >= 0 (0 = --heads; got %d)", p->kv_heads);
        NEED(p->ffn_dim >= 0, "--ffn-dim must be >= 0 (0 = 4 x --dim; got %d)", p->ffn_dim);
        NEED(p->rope_theta > 1 && isfinite(p->rope_theta), "--rope-theta must be above 1 (got %g)",
             p->rope_theta);
        NEED(p->norm_eps > 0 && isfinite(p->norm_eps), "--norm-eps must be positive (got %g)",
             p->norm_eps);
        NEED(p->tie_embeddings == 0 || p->tie_embeddings == 1,
             "--tie-embeddings must be 0 or 1 (got %d)", p->tie_embeddings);
    }
    NEED(p->ep >= 1, "--ep must be >= 1 (got %d)", p->ep);
    NEED(p->dp % p->ep == 0,
         "--ep %d does not divide --dp %d: an expert-parallel group is ep consecutive data-parallel "
         "workers",
         p->ep, p->dp);
    NEED(p->save_every >= 0, "--save-every must be >= 0 (got %d)", p->save_every);
    NEED(!(p->save_every > 0 && !p->save[0]), "--save-every needs --save DIR");
    NEED(p->keep_last >= 0, "--keep-last must be >= 0 (0 = keep all; got %d)", p->keep_last);
    NEED(!(p->keep_last > 0 && !p->save[0]), "--keep-last needs --save DIR");
    NEED(!strcmp(p->save_format, "gathered") || !strcmp(p->save_format, "sharded") ||
             !strcmp(p->save_format, "auto"),
         "--save-format must be auto, gathered or sharded (got '%s')", p->save_format);
    NEED(p->save_async == 0 || p->save_async == 1, "--save-async must be 0 or 1 (got %d)",
         p->save_async);
    NEED(!(p->save_async && !p->save[0]), "--save-async needs --save DIR");
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
    NEED(p->loss_chunk == 0 || p->loss_chunk >= p->seq,
         "--loss-chunk %d: 0 (no chunks) or at least --seq %d (a forward without targets, "
         "sampling's, keeps one row's logits whole)",
         p->loss_chunk, p->seq);
    {
        int accum = ct__train_accum(p);
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
    ct_file_dtype save_dtype;
    NEED(ct_file_dtype_parse(p->save_dtype, &save_dtype) == 0,
         "--save-dtype must be fp32 or bf16 (got '%s')", p->save_dtype);
    NEED(!(p->init[0] && p->resume[0]),
         "--init and --resume are exclusive (a checkpoint already holds the model)");
    long long bt = (long long)p->batch * p->seq;
    NEED(bt <= 1 << 30, "--batch x --seq = %lld tokens is too large", bt);
    NEED(p->total_batch == 0 || p->total_batch % bt == 0,
         "--total-batch %d is not a multiple of --batch x --seq = %lld", p->total_batch, bt);
    ct_precision prec;
    NEED(ct_precision_parse(p->precision, &prec) == CT_OK,
         "--precision must be fp32 or bf16 (got '%s')", p->precision);
    {
    }
    {
        ct_gemm_path gp = CT_GEMM_CLBLAST;
        ct_err gerr = {0};
        int is_auto = !strcmp(p->gemm, "auto");
        NEED(is_auto || ct_gemm_path_parse(p->gemm, &gp, &gerr) == CT_OK,
             "--gemm must be auto, clblast, portable or mma (got '%s')", p->gemm);
        NEED(p->tf32 == 0 || p->tf32 == 1, "--tf32 must be 0 or 1 (got %d)", p->tf32);
        NEED(!p->tf32 || prec == CT_PRECISION_FP32,
             "--tf32 1 applies to fp32 GEMMs; --precision bf16 has bf16 operands already");
        NEED(is_auto || prec != CT_PRECISION_BF16 || ct_gemm_path_bf16(gp),
             "--gemm %s multiplies fp32 operands; --precision bf16 runs auto, portable or mma",
             p->gemm);
        NEED(is_auto || prec != CT_PRECISION_FP32 || p->tf32 || gp == CT_GEMM_CLBLAST,
             "--gemm %s multiplies bf16 operands; fp32 GEMMs run on clblast, or on mma with "
             "--tf32 1 (tf32 operands)", p->gemm);
        NEED(is_auto || !p->tf32 || gp == CT_GEMM_MMA || gp == CT_GEMM_MMA_EMULATED,
             "--tf32 1 runs fp32 GEMMs on the mma path: --gemm auto or mma (got '%s')", p->gemm);
    }
    NEED(!strcmp(p->bf16_round, "nearest") || !strcmp(p->bf16_round, "stochastic"),
         "--bf16-round must be nearest or stochastic (got '%s')", p->bf16_round);
    NEED(!strcmp(p->grad_reduce, "fp32") || !strcmp(p->grad_reduce, "bf16"),
         "--grad-reduce must be fp32 or bf16 (got '%s')", p->grad_reduce);
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
