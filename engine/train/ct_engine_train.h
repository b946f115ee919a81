/* ct_engine_train.h - the training loop's plumbing: the parameters of a run (one table: type,
 * flag, default, one line of help; the --help text, the parser, the logged configuration and
 * the checkpoint's record all come from it), learning-rate schedules, FLOPs / MFU accounting,
 * the JSON Lines metrics writer, a seeded RNG, sampling from host logits, and the trainer
 * programs and tests run a training with. One file each: opts.c, lr.c, flops.c, metrics.c,
 * rng.c, sample.c (host code); check.c, config.c, worker_plan.c, run.c, trainer.c, peak.c, and
 * the reports as data, report.c and bubble.c (train_gpt prints them: examples/train_report.c).
 *
 *     ct_train_params p = ct_train_params_default();
 *     ct_err err = {0};
 *     if (ct_train_params_parse(&p, nargs, args, &err)) {
 *         fprintf(stderr, "%s\n", err.msg); exit(2);
 *     }
 *     ct_lr_schedule sched;
 *     if (ct_train_params_check(&p, &sched, &err)) { ... }
 *     double lr = ct_lr_at(sched, p.lr, p.warmup, p.steps, p.min_lr_frac, step);
 */
#ifndef CT_ENGINE_TRAIN_H
#define CT_ENGINE_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ct_engine_mem.h"
#include "ct_engine_rng.h"
#include "ct_gpt_config.h"
#include "ct_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- options, generically */

typedef enum ct_opt_type { CT_OPT_INT, CT_OPT_FLOAT, CT_OPT_STR } ct_opt_type;

/* One knob: --flag VALUE (or --flag=VALUE), stored at `offset` in a params struct as int,
 * double or const char * (pointing into the command line or at a literal). `def` is the default in text form;
 * it goes through the same parser as the command line. */
typedef struct ct_opt {
    const char *flag; /* without the leading "--" */
    ct_opt_type type;
    size_t offset;
    const char *def;
    const char *help;
} ct_opt;

/* Set every field to its default. */
void ct_opts_defaults(const ct_opt *opts, int n, void *dst);
/* Parse args[0..nargs) (a command line without the program name). An unknown flag, a missing
 * value, a value that is not a number of the right type, or a stray argument is CT_ERR_ARG
 * naming it. given (NULL: not wanted) gets given[k] = 1 for each opts[k] the arguments set.
 * "--help" is not handled here: check for it first with ct_opts_wants_help. */
ct_status ct_opts_parse(const ct_opt *opts, int n, void *dst, unsigned char *given, int nargs,
                        char *const *args, ct_err *err);
int ct_opts_wants_help(int nargs, char *const *args);
/* "  --flag VALUE   help (default: def)" for every option. */
void ct_opts_help(FILE *out, const ct_opt *opts, int n);
/* The effective values, one "  flag = value" line each (the configuration log at start). */
void ct_opts_log(FILE *out, const ct_opt *opts, int n, const void *src);
/* The effective values as "flag=value\n" lines into buf (for checkpoints). Returns the length
 * needed (like snprintf). */
size_t ct_opts_format(char *buf, size_t len, const ct_opt *opts, int n, const void *src);

/* ---------------------------------------------------------------- the training parameters */

/* X(type, field, flag, default, help) - every knob of train_gpt, declared once. */
#define CT_TRAIN_PARAMS(X)                                                                      \
    X(INT, layers, "layers", "4", "transformer blocks L (new model)")                           \
    X(INT, heads, "heads", "4", "attention heads NH; must divide --dim (new model)")           \
    X(INT, dim, "dim", "128", "channels C (new model)")                                         \
    X(INT, seq, "seq", "64", "sequence length T of a training row")                             \
    X(INT, max_seq, "max-seq", "0", "positions maxT of a new model; 0 = --seq")                 \
    X(INT, vocab, "vocab", "0",                                                                 \
      "vocabulary V of a new model; 0 = 256 for text, 50257 (GPT-2) for token shards")          \
    X(INT, experts, "experts", "0",                                                             \
      "mixture of experts: every block's MLP is E experts (new model); 0 = the dense MLP")     \
    X(INT, top_k, "top-k", "2", "experts per token K, 1..E, of a mixture of experts (new model)") \
    X(STR, arch, "arch", "gpt2",                                                                \
      "gpt2 | llama: the architecture of a new model (a model file or checkpoint brings its own)") \
    X(INT, kv_heads, "kv-heads", "0",                                                           \
      "llama: key/value heads NKV, dividing --heads (1: multi-query); 0 = --heads")             \
    X(INT, ffn_dim, "ffn-dim", "0", "llama: the SwiGLU MLP's hidden width F, any size; 0 = 4C")  \
    X(FLOAT, rope_theta, "rope-theta", "10000", "llama: the rotary embedding's base theta")     \
    X(FLOAT, norm_eps, "norm-eps", "1e-5", "llama: RMSNorm's eps")                              \
    X(INT, tie_embeddings, "tie-embeddings", "0",                                               \
      "llama: 1 = the head reads the token embedding (no lm_head); GPT-2 always ties")          \
    X(FLOAT, capacity_factor, "capacity-factor", "1.25",                                        \
      "each expert takes at most ceil(F*K*T/E) choices of a row; the rest are dropped; 0 = no limit") \
    X(FLOAT, aux_loss, "aux-loss", "0.01",                                                      \
      "weight alpha of the load-balancing loss added to the objective (the logged loss stays the " \
      "cross-entropy)")                                                                         \
    X(STR, init, "init", "",                                                                    \
      "start from this model file (llm.c's GPT-2 format, fp32 or bf16; .safetensors; a Hugging " \
      "Face GPT-2 or Llama directory or its model.safetensors) instead of random init")         \
    X(STR, data, "data", "", "llm.c token shards (glob, sorted, concatenated)")                 \
    X(STR, text, "text", "", "a plain text file, trained on as bytes (vocabulary 256)")         \
    X(STR, val_data, "val-data", "", "validation token shards (glob); default: a held-out tail") \
    X(FLOAT, val_frac, "val-frac", "0.05",                                                      \
      "fraction of the training stream held out for validation when --val-data is not given")  \
    X(INT, batch, "batch", "8", "rows B of one micro-batch")                                    \
    X(INT, total_batch, "total-batch", "0",                                                     \
      "tokens per optimizer step, a multiple of batch*seq (gradient accumulation); 0 = batch*seq") \
    X(INT, steps, "steps", "400", "optimizer steps to run (in total, counting resumed ones)")   \
    X(FLOAT, lr, "lr", "3e-3", "peak learning rate")                                            \
    X(STR, lr_schedule, "lr-schedule", "cosine", "cosine | constant | linear (after warm-up)")  \
    X(INT, warmup, "warmup", "20", "linear warm-up steps")                                      \
    X(FLOAT, min_lr_frac, "min-lr-frac", "0.1", "final learning rate as a fraction of --lr")    \
    X(FLOAT, beta1, "beta1", "0.9", "AdamW beta1")                                              \
    X(FLOAT, beta2, "beta2", "0.95", "AdamW beta2")                                             \
    X(FLOAT, eps, "eps", "1e-8", "AdamW epsilon")                                               \
    X(FLOAT, weight_decay, "weight-decay", "0.1", "decoupled weight decay (2-D weights only)")  \
    X(FLOAT, grad_clip, "grad-clip", "1.0", "global gradient-norm clip; 0 = off")               \
    X(STR, nonfinite, "nonfinite", "skip",                                                      \
      "a step whose loss or gradient norm is inf/NaN: skip (no update, a warning; stop after "  \
      "--max-skips in a row) or stop")                                                          \
    X(INT, max_skips, "max-skips", "5", "with --nonfinite skip: consecutive skipped steps that stop the run") \
    X(INT, seed, "seed", "1337", "seed of the initialisation, shuffling and sampling")         \
    X(INT, shuffle, "shuffle", "0", "0 = llm.c's sequential order; 1 = seeded window permutation") \
    X(INT, eval_every, "eval-every", "50", "validation loss every N steps (and at the end); 0 = off") \
    X(INT, eval_batches, "eval-batches", "8", "micro-batches per validation")                   \
    X(INT, sample_every, "sample-every", "0", "print a sample every N steps; 0 = only at the end") \
    X(INT, sample_len, "sample-len", "256", "tokens to generate per sample")                    \
    X(FLOAT, temperature, "temperature", "0.8", "sampling temperature; 0 = greedy")             \
    X(INT, sample_top_k, "sample-top-k", "40", "sample among the k most likely tokens; 0 = all") \
    X(STR, prompt, "prompt", "", "text prompt of the samples (byte vocabulary); default: a newline") \
    X(STR, tokenizer, "tokenizer", "", "llm.c GPT-2 tokenizer file to print samples as text")   \
    X(STR, save, "save", "", "checkpoint directory (DIR/ckpt_<step>.bin and DIR/latest)")      \
    X(INT, save_every, "save-every", "0", "checkpoint every N steps (needs --save); the end always") \
    X(INT, keep_last, "keep-last", "0",                                                         \
      "keep only the newest N checkpoints in --save DIR (never the one DIR/latest names); 0 = all") \
    X(STR, save_format, "save-format", "auto",                                                  \
      "checkpoint form: gathered (one file DIR/ckpt_<step>.bin, every element sent to worker 0), " \
      "sharded (each worker writes the ranges it owns to DIR/ckpt_<step>.shard_<worker>, all at " \
      "once, and worker 0 the manifest DIR/ckpt_<step>.bin; DIR must be shared by every host), " \
      "or auto: sharded with several workers on one host, else gathered; any layout resumes " \
      "either, sample_gpt reads both")                                                          \
    X(INT, save_async, "save-async", "0",                                                       \
      "1 = copy the state to host memory at the step boundary and write the checkpoint on a "    \
      "background thread while training goes on (the next save and the end wait for it)")       \
    X(STR, resume, "resume", "", "resume from a checkpoint directory or file")                 \
    X(STR, save_model, "save-model", "",                                                        \
      "write the final model: a Hugging Face GPT-2 or Llama directory for a name ending in / "  \
      "(config.json + model.safetensors), safetensors for a *.safetensors name, else llm.c's "  \
      "GPT-2 format (dense GPT-2 models only)")                                                 \
    X(STR, save_dtype, "save-dtype", "fp32",                                                    \
      "how --save-model stores the parameters: fp32, or bf16 (rounded to nearest even; llm.c's " \
      "version 5, BF16 tensors)")                                                               \
    X(STR, metrics, "metrics", "", "write JSON Lines metrics (one object per step) here")      \
    X(STR, device, "device", "", "OpenCL device: auto, an index, P:D, gpu, cpu or a name part; default $CT_DEVICE or auto") \
    X(FLOAT, peak_tflops, "peak-tflops", "0", "peak TFLOP/s for MFU; 0 = measure the device's GEMM rate at start") \
    X(FLOAT, mem_cap_gb, "mem-cap-gb", "0", "device memory cap in GiB; 0 = the device's memory") \
    X(FLOAT, max_alloc_mb, "max-alloc-mb", "0",                                                \
      "largest single device buffer in MiB; 0 = the device's CL_DEVICE_MAX_MEM_ALLOC_SIZE (the activations and the model state are held in pieces below it)") \
    X(INT, log_every, "log-every", "1", "print a step line every N steps")                     \
    X(INT, dp, "dp", "1",                                                                       \
      "data-parallel degree: each DP rank takes batch/dp rows; workers = dp x tp = MPI ranks x --devices-per-rank") \
    X(INT, tp, "tp", "1",                                                                       \
      "tensor-parallel degree: each block's matrices split over tp consecutive workers")       \
    X(INT, sequence_parallel, "sequence-parallel", "0",                                         \
      "1 = LayerNorm/residual activations split over the TP group's tokens (needs --tp >= 2)") \
    X(INT, tp_overlap, "tp-overlap", "1",                                                       \
      "1 = reduce a column-parallel layer's input gradient while its weight gradient computes") \
    X(STR, tp_comm, "tp-comm", "auto",                                                          \
      "TP collectives: host (staged through host memory), device (kernels read the other "     \
      "workers' memory: TP workers that are threads sharing one device), auto = device where " \
      "possible")                                                                               \
    X(INT, ep, "ep", "1",                                                                       \
      "expert-parallel degree: each block's experts divided over ep consecutive DP workers "    \
      "(divides --dp and --experts)")                                                           \
    X(INT, devices_per_rank, "devices-per-rank", "1", "devices (worker threads) per process")  \
    X(INT, pp, "pp", "1",                                                                       \
      "pipeline stages N: the blocks cut into N contiguous stages; --dp x --pp = workers")      \
    X(STR, pp_split, "pp-split", "",                                                            \
      "blocks per stage, e.g. 3,3,2,4 (each >= 1, summing to --layers; one per model chunk, "    \
      "N x v, with --virtual-stages v); default: balanced by training FLOPs per token, a block "  \
      "72C^2+12CT, the embedding (3C) counted on the first stage and the final LayerNorm + "    \
      "logits + loss (6C*Vp) on the last")                                                      \
    X(STR, schedule, "schedule", "1f1b",                                                        \
      "pipeline schedule: gpipe | 1f1b | interleaved | zb1 (zero bubble H1); the micro-batches "  \
      "are --total-batch's accumulation steps")                                                 \
    X(INT, virtual_stages, "virtual-stages", "1",                                               \
      "model chunks per stage for --schedule interleaved (v; micro-batches a multiple of --pp)") \
    X(INT, zero, "zero", "0", "ZeRO: 0 none, 1 Adam m,v sharded over the DP group, 2 + gradients, 3 + parameters") \
    X(FLOAT, bucket_mb, "bucket-mb", "25", "data-parallel gradient bucket size in MiB")        \
    X(INT, overlap, "overlap", "1",                                                             \
      "1 = all-reduce gradient buckets while backward goes on; 0 = after backward")             \
    X(STR, grad_reduce, "grad-reduce", "fp32",                                                  \
      "the data-parallel gradient reduction's type on the wire: fp32, or bf16 (each bucket "     \
      "rounded to bf16 to cross, summed in fp32 on arrival: half the bytes)")                   \
    X(STR, layout, "layout", "manual",                                                          \
      "manual: the layout flags above; auto: the planner (ct_plan) measures the devices and "     \
      "links, picks the fastest layout that fits memory and runs it (layout flags given pin "    \
      "their choice); predicted and measured step times are printed after a few steps")          \
    X(INT, workers_per_device, "workers-per-device", "1",                                       \
      "workers sharing one device (each its own queue, in one context per process: TP's "      \
      "collectives can stay on it; to try layouts on one GPU)")                                  \
    X(STR, trace, "trace", "", "write a Chrome/Perfetto trace (JSON) of the traced steps here")  \
    X(STR, attention, "attention", "gemm",                                                      \
      "attention path: gemm (batched GEMMs, keeps the (B,NH,T,T) scores), fused (online softmax, " \
      "activation memory linear in T) or auto (the faster, measured at start)")                  \
    X(STR, trace_steps, "trace-steps", "", "steps A:B to trace (0-based, inclusive); default the last three") \
    X(STR, recompute, "recompute", "none",                                                      \
      "activation recomputation: none | attention (drop the (B,NH,T,T) probabilities and the "   \
      "LayerNorm and GELU outputs, recompute them before each block's backward) | block (keep "   \
      "only each block's input, run its forward again before its backward); same losses, less "  \
      "activation memory, more time")                                                           \
    X(INT, loss_chunk, "loss-chunk", "0",                                                        \
      "the head and its loss in chunks of N rows (tokens) of a worker's micro-batch: the logits "  \
      "of one chunk at a time (N x V floats instead of batch x seq x V), computed again in the "   \
      "backward; 0 = all rows at once; at least --seq (with --sequence-parallel: N/tp of each "   \
      "worker's rows, gathered)")                                                               \
    X(STR, bf16_round, "bf16-round", "nearest",                                                 \
      "rounding of the bf16 working weights from the fp32 master: nearest (even) or stochastic "  \
      "(a threshold drawn per element and step from --seed: a resumed run rounds alike)")        \
    X(STR, precision, "precision", "fp32",                                                      \
      "storage of activations, their gradients and the working weights: fp32 | bf16 (fp32 "     \
      "master weights, gradients and Adam state; every layout)")                                \
    X(STR, gemm, "gemm", "auto",                                                                \
      "GEMM path: auto (bf16, or fp32 with --tf32 1: every path the device runs timed on the "   \
      "model's shapes at start, the fastest per shape, kept as a tuning record; fp32: clblast) | " \
      "clblast (fp32) | portable (bf16, any device) | mma (bf16 or tf32 on NVIDIA tensor cores, " \
      "sm_80 and later)")                                                                       \
    X(INT, tf32, "tf32", "0",                                                                   \
      "1 = fp32 GEMMs may run on the mma path with tf32 operands (10-bit mantissa, fp32 "       \
      "accumulation; as PyTorch's allow_tf32); 0 = fp32 operands (default)")

#define CT__TP_INT int
#define CT__TP_FLOAT double
#define CT__TP_STR const char *

#define CT_TRAIN_MAX_OPTS 96 /* room for the table's flags in ct_train_params.given */

typedef struct ct_train_params {
#define CT__TP_FIELD(type, field, flag, def, help) CT__TP_##type field;
    CT_TRAIN_PARAMS(CT__TP_FIELD)
#undef CT__TP_FIELD
    /* given[k]: ct_train_opts[k] was set by the command line (ct_train_params_parse), not left
     * at its default; what decides whether a flag pins a choice (a checkpoint's shape, the
     * planner's layout) */
    unsigned char given[CT_TRAIN_MAX_OPTS];
} ct_train_params;

extern const ct_opt ct_train_opts[];
extern const int ct_train_opts_count;

/* Every field at its default, none given. */
ct_train_params ct_train_params_default(void);
/* ct_opts_parse of ct_train_opts into *p (start from ct_train_params_default), recording the
 * flags given. */
ct_status ct_train_params_parse(ct_train_params *p, int nargs, char *const *args, ct_err *err);
/* Whether --flag was given (flag without the dashes; a name not in the table: 0). */
int ct_train_given(const ct_train_params *p, const char *flag);

/* ---------------------------------------------------------------- learning rate */

typedef enum ct_lr_schedule { CT_LR_COSINE, CT_LR_CONSTANT, CT_LR_LINEAR } ct_lr_schedule;

ct_status ct_lr_schedule_parse(const char *name, ct_lr_schedule *out, ct_err *err);
/* Learning rate of step `step` (0-based): linear warm-up lr*(step+1)/warmup for step < warmup,
 * then from lr to lr*min_frac over the remaining steps: cosine 0.5*(1+cos(pi*r)), linear (1-r),
 * or constant, with r = (step-warmup)/(steps-warmup) clamped to [0, 1]. */
double ct_lr_at(ct_lr_schedule s, double lr, int warmup, int steps, double min_frac, int64_t step);

/* ---------------------------------------------------------------- FLOPs and MFU */

/* Training FLOPs per token: 6*N + 12*L*C*T. 6*N counts forward (2N) and backward (4N) of every
 * parameter's multiply-add, the tied wte included (its logits matmul); 12*L*C*T is the attention
 * score and value matmuls (2*2*C*T per token and layer forward, times 3 with backward), counted
 * over the full T x T square as PaLM's appendix does (a causal kernel may skip half). For a
 * mixture of experts N counts the active parameters: K of the E experts of each block (and the
 * router), so MFU is of the work a token does. */
double ct_train_flops_per_token(const ct_gpt_config *c, int T);
size_t ct_gpt_param_count(const ct_gpt_config *c);
size_t ct_gpt_active_param_count(const ct_gpt_config *c);

/* ---------------------------------------------------------------- pipeline split */

/* Training FLOPs per token of the pieces a pipeline split weighs: a block 72C^2 + 12CT (its
 * share of 6N + 12LCT), the embedding 3C (a lookup and its scatter), the head 6*C*Vp (the logits
 * product forward and backward; the LayerNorm and loss are O(C + Vp)). */
void ct_pp_costs(const ct_gpt_config *c, int T, double *block, double *embed, double *head);
/* Blocks per model chunk for `nchunks` consecutive chunks (pipeline stages x virtual stages),
 * each >= 1, balanced by ct_pp_costs: the split minimising the largest chunk's work, the
 * embedding counted on chunk 0 and the head on the last (ties: the later chunks lighter).
 * CT_ERR_ARG when nchunks is not in 1..layers. */
ct_status ct_pp_split_balanced(const ct_gpt_config *c, int T, int nchunks, int *layers, ct_err *err);
/* "3,3,2,4": nchunks entries, each >= 1, summing to c->layers; CT_ERR_ARG naming the problem. */
ct_status ct_pp_split_parse(const char *text, const ct_gpt_config *c, int nchunks, int *layers,
                            ct_err *err);

/* ---------------------------------------------------------------- metrics (JSON Lines) */

typedef struct ct_metrics ct_metrics;

typedef struct ct_step_metrics {
    int64_t step;
    double loss, lr, grad_norm, ms, tokens_per_s, tflops, mfu;
    uint64_t mem_bytes;
    int skipped;   /* the loss or the norm was not finite: nothing was updated */
    int skips_run; /* consecutive skipped steps up to this one */
    /* a mixture of experts (moe != 0): the auxiliary loss (before alpha), the fraction of
     * choices dropped, the busiest expert's routed choices over the mean (the largest over the
     * blocks) */
    int moe;
    double aux_loss, drop_frac, max_load;
    /* comm != 0: the step's communication, this worker's bytes per group (ct_exec_bytes_last:
     * dp, tp, ep, edp, emb, pp); -1: the layout has no such group (nothing written) */
    int comm;
    int64_t comm_bytes[6];
} ct_step_metrics;

/* Open (truncate, or append when `append`) a JSON Lines file; path NULL or "" gives a writer
 * that writes nothing, so callers need no conditionals. */
ct_status ct_metrics_open(ct_metrics **out, const char *path, int append, ct_err *err);
void ct_metrics_close(ct_metrics *m);
/* {"type":"train","step":..,"loss":..,"lr":..,"grad_norm":..,"ms":..,"tokens_per_s":..,
 *  "tflops":..,"mfu":..,"mem_bytes":..} followed by a newline, flushed; with moe set also
 *  "aux_loss", "drop_frac", "max_load"; then "comm_dp_bytes", "comm_tp_bytes", "comm_ep_bytes",
 *  "comm_edp_bytes", "comm_emb_bytes", "comm_pp_bytes" (the pipeline sends this worker made)
 *  for the groups the layout has; a skipped step adds
 *  "skipped":true (a number that is not finite is written null). */
ct_status ct_metrics_train(ct_metrics *m, const ct_step_metrics *s);
/* {"type":"<type>", <fields>}: fields is a JSON object body ("\"step\":3,\"loss\":2.5") built by
 * the caller; NULL or "" for none. Strings from outside go through ct_json_escape. */
ct_status ct_metrics_record(ct_metrics *m, const char *type, const char *fields);
/* Escape `s` as a JSON string (quotes included) into buf. */
void ct_json_escape(char *buf, size_t len, const char *s);


/* ---------------------------------------------------------------- generation (sample.c) */

typedef struct ct_model ct_model;         /* ct_engine_model.h */
typedef struct ct_tokenizer ct_tokenizer; /* ct_engine_io.h */

/* The logits (Vp floats) of the last of the n context tokens ctx[0..n): a forward pass. */
typedef ct_status (*ct_next_logits_fn)(void *user, const int *ctx, int n, float *logits,
                                       ct_err *err);
/* The forward of a plain model (every layer on one worker): user is the ct_model. */
ct_status ct_model_next_logits(void *model, const int *ctx, int n, float *logits, ct_err *err);
/* tokens[0..n_prompt) is the prompt; fills tokens[n_prompt..len) one draw at a time, each from
 * next() over the last max_T tokens (max_T <= the model's max_T). */
ct_status ct_generate(ct_next_logits_fn next, void *user, const ct_gpt_config *cfg, int *tokens,
                      int n_prompt, int len, int max_T, double temperature, int top_k,
                      ct_rng *rng, ct_err *err);
/* Print tokens as text through `tok` (may be NULL), as bytes when vocab <= 256, else as ids. */
void ct_print_tokens(FILE *out, const int *tokens, int n, int vocab, const ct_tokenizer *tok);
/* A prompt as tokens: bytes for vocab <= 256, else a comma-separated id list; empty gives one
 * start token (a newline for bytes, else the end-of-text token `eot` or 50256 for GPT-2). */
ct_status ct_prompt_parse(const char *prompt, int vocab, int eot, int *tokens, int cap, int *n,
                          ct_err *err);

/* ---------------------------------------------------------------- the trainer (check.c ... bubble.c) */

/* Every value check that needs no file or device (the flags' ranges and combinations, output
 * directories that must exist); the LR schedule is parsed into *sched. CT_ERR_ARG naming it. */
ct_status ct_train_params_check(const ct_train_params *p, ct_lr_schedule *sched, ct_err *err);

/* What the trainer builds for worker `worker` (world rank) of the run p (checked by
 * ct_train_params_check) on a model of shape cfg: the layout, the worker's coordinates, and its
 * model plan (micro-batch rows batch/dp, the sequence, the schedule's peak live micro-batches on
 * its stage as slots, its chunks of blocks from --pp-split or the FLOP-balanced split, the split
 * backward under zb1, attention path, sequence parallelism, recompute mode; plan.tp NULL: the
 * trainer puts its TP group there). Pure: ct_trainer_create plans its model with it, so a
 * prediction from it is the trainer's. */
ct_status ct_train_worker_plan(const ct_train_params *p, const ct_gpt_config *cfg, int worker,
                               ct_layout *lay, ct_coords *at, ct_model_plan *plan, ct_err *err);
/* The executor options of the run (--bucket-mb, --overlap). */
ct_exec_opts ct_train_exec_opts(const ct_train_params *p);
/* The memory model (ct_engine_mem.h) for worker `worker` of the run, model + executor as the
 * trainer builds them: what its memory report will show (--attention auto: the GEMM path's
 * figures, flagged attention_bound). Pure: no device, no MPI. */
ct_status ct_train_mem_predict(const ct_train_params *p, const ct_gpt_config *cfg, int worker,
                               ct_mem_predict *out, ct_err *err);
/* The model's shape the parameters give: a checkpoint's (--resume), an llm.c file's (--init)
 * or the shape flags'; a shape flag given (p->given) that contradicts a file is CT_ERR_ARG (the
 * checks ct_train_run_open makes, without reading data or opening devices). */
ct_status ct_train_config(const ct_train_params *p, ct_gpt_config *cfg, ct_err *err);
/* What the layouts support with a mixture of experts (cfg->experts > 0), the checks
 * ct_train_run_open makes: ep divides E, ZeRO 0 or 1, no zb1, a safetensors
 * --save-model; --ep > 1 needs experts. A Llama model: data and pipeline parallelism (ZeRO 0
 * to 3), fp32, a safetensors or Hugging Face --save-model. CT_ERR_ARG naming the flag. */
ct_status ct_train_moe_check(const ct_train_params *p, const ct_gpt_config *cfg, ct_sched_kind kind,
                             ct_err *err);
/* Which of the selected devices (list[picks[0..npicks)]) worker `thread` of this process opens:
 * ct_topo_device_index (topo NULL: 0), the thread index for CPU devices (PoCL exists once per
 * process), shared by workers_per_device workers. May be >= npicks: too few devices. */
int ct_worker_device(const ct_device_info *list, const int *picks, int npicks, ct_topo *topo,
                     int thread, int workers_per_device);

typedef struct ct_exec ct_exec; /* ct_engine_step.h */

/* What the workers of one process share, read-only once they start: the model's shape (from a
 * checkpoint, an llm.c file or the flags), the data (corpus: the text used without --data or
 * --text), the tokenizer, the devices the spec selects. Every failure is bad input (a message
 * naming the flag, file or device; a program exits 2), warnings go to `log`. p->given tells
 * which shape flags were given. topo NULL: one worker without MPI. Rank 0 also
 * removes the temporaries killed writers left in --save DIR (ct_checkpoint_clean_stale) and
 * says so on `log`. */
typedef struct ct_train_run ct_train_run;
ct_status ct_train_run_open(ct_train_run **out, const ct_train_params *p, ct_topo *topo, const ct_cl_source *corpus, int ncorpus, FILE *log,
                            ct_err *err);
void ct_train_run_free(ct_train_run *r);
const ct_gpt_config *ct_train_run_config(const ct_train_run *r);
int ct_train_run_accum(const ct_train_run *r);

/* One worker (thread `thread` of this process): its place in the grid, its device, model and
 * executor, loaders, metrics (the leader's) and trace. Collective over the workers. */
typedef struct ct_trainer ct_trainer;
ct_status ct_trainer_create(ct_trainer **out, ct_train_run *r, int thread, ct_err *err);
void ct_trainer_free(ct_trainer *t);
const char *ct_trainer_errmsg(const ct_trainer *t);
int ct_trainer_leader(const ct_trainer *t);     /* world worker 0: prints, writes files */
int64_t ct_trainer_start(const ct_trainer *t);  /* first step of this run (after a resume) */
/* Programs worker 0's device built from source while the trainer was made (0: the kernel cache
 * had them all); the first step then builds the rest (CLBlast's) on their first use. */
int ct_trainer_built_programs(const ct_trainer *t);
int64_t ct_trainer_step_index(const ct_trainer *t); /* the next step to run */
ct_model *ct_trainer_model(ct_trainer *t);
ct_exec *ct_trainer_exec(ct_trainer *t);
ct_metrics *ct_trainer_metrics(ct_trainer *t);  /* the leader's (NULL elsewhere) */
const ct_tokenizer *ct_trainer_tokenizer(const ct_trainer *t);
/* The start-up report as data (ct_trainer_report): what the run is (the configuration, the
 * layout, the model, the data) and what each worker holds (memory allocated beside the memory
 * model's prediction and the ZeRO formula). A program formats it (train_gpt:
 * examples/train_report.c). Pointers into the trainer (params' strings, device, split, slots,
 * names) live as long as the trainer; grid_lines and worker are the report's own
 * (ct_train_report_free). */
typedef struct ct_train_report_worker {
    uint64_t allocated[CT_MEM__COUNT]; /* bytes per category (ct_mem_category) */
    uint64_t predicted[CT_MEM__COUNT]; /* the memory model's (comm: device + host staging) */
    int predicted_ok;                  /* 0: no prediction, predict_error says why */
    char predict_error[CT_ERR_MSG_MAX];
    int stage, slots;                  /* pipeline stage, its activation slots */
    uint64_t model_state;              /* params + grads + optimizer allocated */
    double model_state_formula;        /* what the ZeRO formulas give for psi and psi_experts */
    double psi, psi_experts;           /* parameters held (TP share; experts apart, over ep) */
} ct_train_report_worker;

typedef struct ct_train_report {
    const ct_train_params *params;  /* the run's effective parameters */
    const ct_device_info *device;   /* worker 0's */
    int workers;                    /* W: dp x tp x pp */
    int multi;                      /* run over a topology (MPI ranks x devices per rank) */
    int ranks, devices_per_rank, buckets; /* (multi) and the gradient buckets of worker 0 */
    int tp_device;                  /* TP collectives on the device (else staged through host) */
    ct_gpt_config cfg;
    const char *origin;             /* the checkpoint's file, the model file or "random init" */
    size_t num_params, active_params;
    int expert_capacity;            /* an expert's most choices of a row's tokens (experts) */
    char *grid_lines;               /* one line per worker (ct_grid_describe); NULL: one worker */
    /* the pipeline (params->pp > 1) */
    const char *schedule;
    int micro_batches, chunks_per_stage, nchunks;
    const int *split;               /* [nchunks] blocks of each model chunk */
    int split_given;                /* --pp-split, else balanced by FLOPs */
    const int *slots;               /* [pp] activation slots of each stage */
    double block_flops, embed_flops, head_flops; /* ct_pp_costs */
    double bubble_unit;             /* simulated at unit costs (NaN: the simulation failed) */
    /* data */
    const char *data_name, *val_name; /* val_name NULL: no validation */
    size_t data_tokens, val_tokens;
    int data_files;
    long long steps_per_epoch;
    int rows_per_worker;
    /* the model as built */
    const char *attention_note;
    const char *gemm_note; /* the GEMM paths: a line, then a line per shape */
    ct_attn_path attention;
    ct_recompute recompute;
    int split_backward;             /* zb1's deferred weight halves */
    double act_slot_bytes, act_layer_bytes, act_scratch_bytes, act_recompute_bytes;
    int act_buffers;                /* > 1: the activations held in pieces, the largest: */
    size_t act_largest;
    int state_arrays, state_buffers; /* model state: arrays and the device buffers holding them */
    size_t state_largest;
    uint64_t max_alloc;             /* the device's largest allocation */
    double flops_per_token, peak_tflops;
    const char *peak_source;
    int64_t start;                  /* first step of this run */
    int traced, trace_first, trace_last; /* --trace: steps traced */
    ct_train_report_worker *worker; /* [workers] */
} ct_train_report;

/* Collective: the start-up report into *out on the leader (elsewhere zeroed), and its "config"
 * and "memory" metrics records. */
ct_status ct_trainer_report(ct_trainer *t, ct_train_report *out);
void ct_train_report_free(ct_train_report *rep);
/* Collective: one optimizer step; *sm is what the log line and the "train" record show (the
 * leader writes the record). A step whose loss or norm is not finite is skipped by the executor
 * (sm->skipped, nothing updated); with --nonfinite stop, or at the --max-skips-th skip in a
 * row, it returns CT_ERR_NONFINITE on every worker, the message naming the step and the first
 * tensor that is not finite. */
ct_status ct_trainer_step(ct_trainer *t, ct_step_metrics *sm);
/* Collective: the mean validation loss over --eval-batches windows (NaN without validation). */
ct_status ct_trainer_eval(ct_trainer *t, double *val);
/* A sample of --sample-len tokens after the prompt (*tokens malloc'd, *n of them). Called by the
 * leader only, unless ct_trainer_sample_collective (ZeRO-3: every forward gathers parameters, so
 * every worker runs it). */
ct_status ct_trainer_sample(ct_trainer *t, int **tokens, int *n);
int ct_trainer_sample_collective(const ct_trainer *t);
/* Collective: a checkpoint of the state after the steps run so far, in --save-format's form
 * (gathered: the leader writes DIR/ckpt_<step>.bin; sharded: every worker its shard, the leader
 * the manifest DIR/ckpt_<step>.bin once all are on disk), then DIR/latest; with --keep-last N the
 * leader then removes all but the newest N checkpoints and the one DIR/latest names. path
 * receives DIR/ckpt_<step>.bin. It first waits for the save in flight (its failure is returned
 * before anything new is copied). --save-async: returns once the state is on the host; the write
 * goes on in the background. A failure every worker knows of (a worker could not copy or write
 * its shard, the leader its manifest) is returned by the leader alone (the others return CT_OK);
 * a collective of the save that fails on one worker (its comm's memory, a timeout) is returned by
 * that worker, as the others may be waiting in it: its program ends the job (MPI_Abort). */
ct_status ct_trainer_save(ct_trainer *t, char *path, size_t len);
/* Wait for the save in flight (none: CT_OK at once, path ""): its status (as above), the
 * checkpoint's path, the seconds its write took. ct_trainer_finish and ct_trainer_free wait too. */
ct_status ct_trainer_save_wait(ct_trainer *t, char *path, size_t len, double *seconds);
/* "sharded" or "gathered": the form this run's checkpoints take (--save-format auto resolved). */
const char *ct_trainer_save_form(const ct_trainer *t);
/* Collective: the model as --save-model names it, stored as --save-dtype says (the leader
 * writes). */
ct_status ct_trainer_save_model(ct_trainer *t);
/* A pipelined run's bubble: measured from the executed timeline, and simulated with the measured
 * action costs of each stage (ct_sched_simulate_stages) and at unit costs; and the last timed
 * step replayed with each of its actions' own durations (ct_sched_replay): what the schedule's
 * dependencies explain once costs that vary from action to action (shared cores) are given. */
#define CT_PIPELINE_MAX_STAGES 64
typedef struct ct_pipeline_bubble {
    int steps;                /* steps timed (0: none, the rest is unset) */
    int stages;
    const char *schedule;     /* its name */
    int micro_batches;
    int first_step, last_step; /* the steps timed, 1-based */
    double measured, simulated, unit; /* the mean over stages */
    double makespan_ms;       /* the measured step span, mean over the steps timed */
    double last_measured;     /* the last timed step's measured bubble, and its replay: the */
    double last_replayed;     /* simulator fed that step's action durations one by one */
    double stage_measured[CT_PIPELINE_MAX_STAGES], stage_simulated[CT_PIPELINE_MAX_STAGES];
    double fwd_ms[CT_PIPELINE_MAX_STAGES], bwd_ms[CT_PIPELINE_MAX_STAGES]; /* mean per action */
    double bwd_input_ms[CT_PIPELINE_MAX_STAGES], bwd_weight_ms[CT_PIPELINE_MAX_STAGES];
    double send_ms[CT_PIPELINE_MAX_STAGES], recv_ms[CT_PIPELINE_MAX_STAGES];
} ct_pipeline_bubble;
/* Collective: a pipelined run's measured bubble per stage (from the executed timeline of the
 * steps timed: the traced ones, else the run's last three) beside the simulator's, into *out on
 * the leader, with a "pipeline" metrics record. Nothing (CT_OK, out->steps = 0) with pp = 1 or
 * no step timed, and elsewhere than on the leader. */
ct_status ct_trainer_pipeline_report(ct_trainer *t, ct_pipeline_bubble *out);
/* Collective: the end of the run (waits for a save in flight; writes the trace when --trace is
 * given). */
ct_status ct_trainer_finish(ct_trainer *t);
/* The peak MFU divides by: the device's fp32 GEMM rate in TFLOP/s (2*M*N*K per product) at the
 * model's forward matmul shapes for BT rows, C = c->channels, Vp = c->padded_vocab: (BT, 3C, C)
 * the QKV projection, (BT, 4C, C) the MLP's fc, (BT, Vp, C) the logits, each as the forward runs
 * it (ct_gemm, A row-major (M,K) times B^T, B row-major (N,K)). Each shape: repeated products
 * (the first left out as a warm-up, at least 4, then until 0.3 s have passed, at most 200), each
 * timed to the device's finish, the fastest kept; the peak is the fastest of the three shapes:
 * what this device reaches on this model's GEMMs, not the vendor's figure. 0 when a buffer
 * cannot be allocated or a product fails. Used by ct_trainer_create (--peak-tflops 0) and
 * bench_train. */
double ct_measure_gemm_tflops(ct_device *dev, const ct_gpt_config *c, int BT);

#ifdef __cplusplus
}
#endif
#endif /* CT_ENGINE_TRAIN_H */
