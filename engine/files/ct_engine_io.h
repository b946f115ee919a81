/* ct_engine_io.h - files and data of the engine: llm.c token shards and plain text, the batch
 * loader, model files (llm.c's GPT-2 file in fp32 or bf16, safetensors, Hugging Face GPT-2
 * directories), the own checkpoints (gathered and sharded), llm.c's GPT-2 tokenizer, and the
 * CRC-32 the checkpoints use. Whole-file reads and atomic writes are cl/'s (ct_file.h, included
 * here). Pure host code: nothing here touches a device, so every part is testable without OpenCL.
 *
 *     ct_err err = {0};
 *     ct_data *d = NULL; ct_loader *ld = NULL;
 *     if (ct_data_open_shards(&d, "fineweb_train_*.bin", &err) ||
 *         ct_data_check_vocab(d, 50257, &err) ||
 *         ct_loader_create(&ld, d, B, T, accum, shuffle, seed, &err)) { puts(err.msg); return 2; }
 *     for (int64_t s = 0; s < steps; s++)
 *         for (int m = 0; m < accum; m++) {
 *             ct_loader_rows(ld, s, m * B, B, inputs, targets, &err);   // rows of step s
 *             ...
 *         }
 *     ct_loader_free(ld); ct_data_free(d);
 *
 * All functions return ct_status; messages name the file and the problem. Files written by this
 * module are written through ct_atomic_file (a temporary "<path>.tmp.<pid>.<n>", flushed, fsynced
 * and renamed over <path>), so a crash or an error never leaves a half-written file under the
 * final name.
 */
#ifndef CT_ENGINE_IO_H
#define CT_ENGINE_IO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ct_file.h"
#include "ct_gpt_config.h"
#include "ct_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- CRC-32 (io_crc32.c) */

/* CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320, as zlib's crc32). Start with crc = 0;
 * feed chunks by passing the previous result. */
uint32_t ct_crc32(uint32_t crc, const void *data, size_t n);

/* ---------------------------------------------------------------- token data (io_data.c) */

#define CT_SHARD_MAGIC_U16 20240520 /* llm.c shard, version 1, uint16 tokens */
#define CT_SHARD_MAGIC_U32 20240801 /* llm.c shard, version 7, uint32 tokens */
#define CT_SHARD_HEADER_INTS 256

/* A token stream: the concatenation of its sources. Shards are memory-mapped (not copied), text
 * and in-memory tokens are held as uint32. Read-only after opening: threads may share one. */
typedef struct ct_data ct_data;

/* llm.c token shards matching a glob, taken in sorted file-name order and concatenated. Each
 * shard's header is checked (magic, version, token count against the file size). No match is
 * CT_ERR_NOT_FOUND naming the pattern. */
ct_status ct_data_open_shards(ct_data **out, const char *pattern, ct_err *err);
/* A plain file read as bytes: one token per byte, vocabulary 256. */
ct_status ct_data_open_text(ct_data **out, const char *path, ct_err *err);
/* Bytes already in memory (the embedded corpus), one token per byte. `name` is for messages. */
ct_status ct_data_open_bytes(ct_data **out, const void *bytes, size_t n, const char *name,
                             ct_err *err);
/* Tokens already in memory (copied). */
ct_status ct_data_open_tokens(ct_data **out, const uint32_t *tokens, size_t n, const char *name,
                              ct_err *err);
/* Split off the last `frac` (0 < frac < 1) of `d` as a new stream *val (a copy of those
 * tokens); `d` keeps the head. */
ct_status ct_data_split_tail(ct_data *d, double frac, ct_data **val, ct_err *err);
void ct_data_free(ct_data *d);

size_t ct_data_count(const ct_data *d);        /* tokens */
/* Copy tokens [start, start+n) (clipped to the stream) to out; returns how many were copied. */
size_t ct_data_read(const ct_data *d, size_t start, size_t n, uint32_t *out);
uint32_t ct_data_max_token(const ct_data *d);  /* largest id present */
const char *ct_data_name(const ct_data *d);    /* what it was opened from */
int ct_data_files(const ct_data *d);           /* shards / files concatenated */
/* Every token < vocab, else CT_ERR_FORMAT naming the first offending token, its position and
 * the file it came from. */
ct_status ct_data_check_vocab(const ct_data *d, int vocab, ct_err *err);

/* Write an llm.c shard (magic 20240520 / uint16 when every token fits, else 20240801 / uint32),
 * atomically. Tests and tools use it; training never writes data. */
ct_status ct_data_write_shard(const char *path, const uint32_t *tokens, size_t n, int wide,
                              ct_err *err);

/* The batch loader. A step covers N = accum * B * T tokens: step s reads the window of N + 1
 * tokens starting at w * N, where w is the step's window index among W = floor((n-1) / N)
 * windows. shuffle = 0: w = s mod W (llm.c's unshuffled order; past the end it wraps to the
 * start). shuffle = 1: epoch e = s / W uses a permutation of the W windows seeded by (seed, e),
 * w = perm_e[s mod W]. The window is cut into accum*B rows of T inputs; targets are the inputs
 * shifted by one. The loader keeps no cursor: its position is the step index, which is what a
 * checkpoint stores, and any row range of any step can be read (data-parallel shares). A loader
 * caches the current epoch's permutation, so it is used by one thread; threads each create their
 * own over the same ct_data. */
typedef struct ct_loader ct_loader;

ct_status ct_loader_create(ct_loader **out, const ct_data *d, int B, int T, int accum, int shuffle,
                           uint64_t seed, ct_err *err);
void ct_loader_free(ct_loader *ld);
/* Rows [row0, row0 + nrows) of step `step` (row index over the step's accum*B rows) into
 * inputs and targets (nrows*T ints each). */
ct_status ct_loader_rows(ct_loader *ld, int64_t step, int row0, int nrows, int *inputs,
                         int *targets, ct_err *err);
/* Start token of the window step `step` reads, and the number of windows per epoch. */
size_t ct_loader_window_start(ct_loader *ld, int64_t step);
int64_t ct_loader_windows(const ct_loader *ld);

/* ---------------------------------------------------------------- model files (io_model.c,
 * io_safetensors.c, io_hf.c): llm.c's GPT-2 file, safetensors, a Hugging Face GPT-2 directory */

#define CT_MODEL_MAGIC 20240326
#define CT_MODEL_VERSION_FP32 3
#define CT_MODEL_VERSION_BF16 5

/* How a file stores the parameters; the engine always gets and gives fp32. */
typedef enum ct_file_dtype { CT_FILE_F32 = 0, CT_FILE_BF16 } ct_file_dtype;
/* "fp32" or "bf16" (train_gpt's --save-dtype); -1 for anything else. */
int ct_file_dtype_parse(const char *s, ct_file_dtype *out);

/* Read only the header: the config, validated. Any of the formats below, by the content (a
 * directory, or a safetensors file without cltrain's metadata, is Hugging Face's). */
ct_status ct_model_file_read_config(const char *path, ct_gpt_config *cfg, ct_err *err);
/* Read the config and all parameters (malloc'd, *nparams floats in ct_gpt_config.h order, fp32
 * whatever the file stores): an llm.c file (exactly header + params; version 3 = fp32, 5 = bf16),
 * a cltrain safetensors file (F32, BF16 or F16 tensors), or a Hugging Face GPT-2 directory (a
 * directory, its model.safetensors, or its model.safetensors.index.json; io_hf.c). */
ct_status ct_model_file_read(const char *path, ct_gpt_config *cfg, float **params,
                             size_t *nparams, ct_err *err);
/* Write the model atomically in fp32: ct_model_file_write_as(..., CT_FILE_F32, ...). */
ct_status ct_model_file_write(const char *path, const ct_gpt_config *cfg, const float *params,
                              ct_err *err);
/* Write the model atomically, by the name: a name ending in '/' is a Hugging Face directory
 * (created if missing: config.json + model.safetensors), "*.safetensors" cltrain's safetensors,
 * else llm.c's format (version 3 for fp32, 5 for bf16; no place for experts: refused, naming the
 * suffix to use). bf16 rounds each value to nearest even. */
ct_status ct_model_file_write_as(const char *path, const ct_gpt_config *cfg, const float *params,
                                 ct_file_dtype dtype, ct_err *err);
int ct_model_file_is_safetensors(const char *path);
/* The name of the format ct_model_file_write_as picks for `path` ("llm.c GPT-2 format", ...). */
const char *ct_model_file_format_name(const char *path);

/* safetensors (io_safetensors.c): 8-byte little-endian header length, the JSON header (tensor ->
 * {dtype, shape, data_offsets}; "__metadata__": format "cltrain-gpt", max_seq, vocab,
 * padded_vocab, layers, heads, channels, experts, top_k as strings), the raw data. Tensor names
 * and shapes are the table's: (L,) (E,) then (rows, cols) or (rows*cols) for vectors; tensors
 * with no elements (a dense model's routerw) absent. Written as F32 or BF16; read from F32, BF16
 * or F16. Reading refuses, naming the tensor or field: a header that is not valid JSON, missing
 * or malformed metadata, a missing, unexpected or misshapen tensor, another dtype, data_offsets
 * out of the data, not matching the shape, or overlapping. */
ct_status ct_safetensors_write(const char *path, const ct_gpt_config *cfg, const float *params,
                               ct_file_dtype dtype, ct_err *err);
ct_status ct_safetensors_read(const char *path, ct_gpt_config *cfg, float **params,
                              size_t *nparams, ct_err *err);
ct_status ct_safetensors_read_config(const char *path, ct_gpt_config *cfg, ct_err *err);
/* 1 when the first n bytes look like a safetensors file (a plausible length, then '{'). */
int ct_safetensors_sniff(const unsigned char *head, size_t n);
/* 0 when `path` is a well-formed safetensors file without cltrain's metadata (format
 * "cltrain-gpt"): Hugging Face's; 1 otherwise (cltrain's, or broken: its reader says how). */
int ct_safetensors_is_cltrain(const char *path);

/* Hugging Face GPT2LMHeadModel and LlamaForCausalLM directories (io_hf.c, io_hf_config.c,
 * io_hf_llama.c). `path` is the directory,
 * DIR/model.safetensors (or another *.safetensors in it) or DIR/model.safetensors.index.json.
 * config.json gives the shape: n_layer, n_head, n_embd, vocab_size, n_positions (padded_vocab is
 * vocab_size rounded up to 128, as llm.c pads); a field the engine does not implement is refused
 * naming it (CT_ERR_UNSUPPORTED: activation_function other than gelu_new, layer_norm_epsilon
 * other than 1e-5, n_inner other than 4 n_embd, scale_attn_weights false,
 * scale_attn_by_inverse_layer_idx, add_cross_attention, untied embeddings, a model_type or
 * architecture other than GPT-2's, a field not known to the reader); dropout probabilities are
 * not applied (the engine has no dropout). The weights: model.safetensors, or the shards
 * model.safetensors.index.json's weight_map names (file names in DIR only); names
 * transformer.wte/wpe, transformer.h.N.{ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc,
 * mlp.c_proj}.{weight, bias}, transformer.ln_f (the "transformer." prefix may be absent), Conv1D
 * weights (in, out), transposed to the engine's (out, in); F32, BF16 or F16. lm_head.weight, if
 * present, must equal wte (refused if it differs); the attention's causal-mask buffers
 * (h.N.attn.bias, h.N.attn.masked_bias) are ignored. A tensor missing, repeated, unexpected, or
 * of a shape config.json does not give is refused naming it.
 *
 * A LlamaForCausalLM directory (config.json's model_type "llama"; io_hf_llama.c): hidden_size,
 * num_hidden_layers, num_attention_heads, intermediate_size, vocab_size,
 * max_position_embeddings required; num_key_value_heads, rope_theta, rms_norm_eps and
 * tie_word_embeddings optional (Hugging Face's defaults: NH, 10000, 1e-6, false); refused naming
 * the field: attention_bias or mlp_bias true, rope_scaling not null, a sliding window,
 * hidden_act other than silu, head_dim other than C / NH, pretraining_tp other than 1, a field
 * not known to the reader. The weights: model.embed_tokens, model.layers.N.{input_layernorm,
 * self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj}, model.norm,
 * lm_head (its own tensor when untied; when tied, if present, equal to the embedding), all
 * .weight, (out, in); q, k, v stacked into qkvw's rows and gate, up into fcw's; the V real rows
 * of the embedding and head. */
ct_status ct_hf_read_config(const char *path, ct_gpt_config *cfg, ct_err *err);
ct_status ct_hf_read(const char *path, ct_gpt_config *cfg, float **params, size_t *nparams,
                     ct_err *err);
/* Write `dir` (created if its parent exists): config.json and model.safetensors ("transformer."
 * names, Conv1D layout, the V real rows of wte, lm_head tied so not stored; a Llama model in
 * Hugging Face's Llama names, q, k, v, gate and up apart, lm_head when untied), each atomically.
 * A model with experts is refused. */
ct_status ct_hf_write(const char *dir, const ct_gpt_config *cfg, const float *params,
                      ct_file_dtype dtype, ct_err *err);
/* Parse config.json's text into a config (the rules above); `what` names it in messages. */
ct_status ct_hf_config_parse(const char *text, size_t n, const char *what, ct_gpt_config *cfg,
                             ct_err *err);
/* config.json's text for cfg (malloc'd, NUL-ended); NULL when out of memory. */
char *ct_hf_config_format(const ct_gpt_config *cfg, ct_file_dtype dtype);
/* 1 when `path` names a Hugging Face directory to write (it ends in '/'). */
int ct_model_file_is_hf_dir(const char *path);

/* ---------------------------------------------------------------- checkpoints (io_checkpoint.c) */

/* Everything needed to continue training bit-exactly, gathered (full tensors in table order), so
 * it does not depend on the layout that wrote it. */
typedef struct ct_checkpoint {
    ct_gpt_config cfg;
    int64_t step;         /* optimizer steps completed; the next step to run */
    uint64_t rng[4];      /* the trainer's RNG state */
    int loader_B, loader_T, loader_accum, loader_shuffle; /* the loader that produced the steps */
    uint64_t loader_seed;
    uint64_t data_tokens; /* token count of the training stream (a cheap identity check) */
    size_t nparams;
    float *params, *m, *v; /* nparams each; owned (freed by ct_checkpoint_release) */
    char *meta;            /* NUL-ended text "key=value\n" of the training parameters; owned */
} ct_checkpoint;

#define CT_CKPT_MAGIC "CTCKPT\r\n" /* 8 bytes; the \r\n catches text-mode mangling */
#define CT_CKPT_VERSION 1

/* File layout: magic[8], u32 version, u32 section count, then sections, each
 * { char tag[8]; u64 payload bytes; u32 crc32 of payload; u32 0; payload }, the last one "END".
 * Sections: CONFIG, STATE, META, PARAMS, ADAM_M, ADAM_V, END. Little-endian. */
ct_status ct_checkpoint_write(const char *path, const ct_checkpoint *ck, ct_err *err);
/* Read and verify every section; on failure *ck is left empty. */
ct_status ct_checkpoint_read(const char *path, ct_checkpoint *ck, ct_err *err);
void ct_checkpoint_release(ct_checkpoint *ck); /* frees the owned arrays; NULL-safe */

/* ---------------------------------------------------------------- sharded checkpoints
 * (io_shards.c): one file per worker with the table ranges it owns, and a manifest.
 *
 * The manifest has the gathered form's framing and head (magic, CONFIG, STATE, META) with version
 * CT_CKPT_VERSION_SHARDED, then LAYOUT (i32 dp tp pp zero ep, shards W, chunk floats, 0), SHARDS
 * (per shard: u64 payload bytes, u32 CRC-32 of the payload, u32 chunks, u64 its first CRC in
 * CHUNKS), CHUNKS (u32 CRC-32 of each CT_SHARD_CHUNK_FLOATS-float chunk of every payload), RANGES
 * (u32 shard, u32 array 0 params / 1 Adam m / 2 Adam v, u64 table offset, u64 count, u64 offset
 * in the shard's payload, floats; sorted by array and table offset, tiling each array's whole
 * table exactly once), END. Shard k of manifest "P.bin" is "P.shard_<k, 5 digits>": a 40-byte
 * head (magic "CTSHARD\n", u32 1, u32 k, i64 step, u64 payload bytes, u64 0) and the payload.
 * ct_checkpoint_read reads a manifest as the whole state (every shard verified whole), so tools
 * read both forms alike. */
#define CT_CKPT_VERSION_SHARDED 2
#define CT_CKPT_SHARDED_SECTIONS 8
#define CT_SHARD_MAGIC "CTSHARD\n"
#define CT_SHARD_CHUNK_FLOATS 262144 /* 1 MiB: the unit a partial read verifies */

/* What a worker stores: `count` floats of array `array` (0 params, 1 m, 2 v) at table offset
 * `table_off`, found at float `shard_off` of shard `shard`'s payload. */
typedef struct ct_shard_range {
    uint32_t shard, array;
    uint64_t table_off, count, shard_off;
} ct_shard_range;

/* A written shard as the manifest records it. */
typedef struct ct_shard_desc {
    uint64_t bytes;      /* payload */
    uint32_t crc;        /* CRC-32 of the payload */
    uint32_t nchunks;
    uint32_t *chunk_crc; /* [nchunks]; owned (ct_shard_desc_release) */
} ct_shard_desc;

/* Shard `worker`'s path beside manifest path "P.bin": "P.shard_<worker>". */
void ct_shard_path(char *out, size_t len, const char *manifest, int worker);
/* Write n floats as shard `worker` of the checkpoint at `step`, atomically; *d describes it. */
ct_status ct_shard_write(const char *path, int worker, int64_t step, const float *payload,
                         size_t n, ct_shard_desc *d, ct_err *err);
void ct_shard_desc_release(ct_shard_desc *d);
/* CT_OK when shard `worker` at `path` is visible here with its size (header + bytes of payload);
 * else CT_ERR_IO saying that a sharded checkpoint needs a directory every worker shares. */
ct_status ct_shard_check_visible(const char *path, int worker, uint64_t bytes, ct_err *err);
/* The manifest, atomically: head's config, step, loader, RNG and meta (its arrays unused), the
 * layout that wrote it (dp tp pp zero ep), nshards descriptions and the nr ranges (any order).
 * Ranges that do not tile every array's table exactly once are CT_ERR_ARG (nothing written). */
ct_status ct_shards_manifest_write(const char *path, const ct_checkpoint *head,
                                   const int32_t layout[5], int nshards, const ct_shard_desc *d,
                                   const ct_shard_range *r, size_t nr, ct_err *err);

/* An open manifest: read-only once open, so threads may read through one at once. */
typedef struct ct_shard_set ct_shard_set;
/* Read and check the manifest; *head gets everything but the arrays (params, m, v NULL; meta
 * owned: ct_checkpoint_release). A gathered checkpoint is CT_ERR_FORMAT. */
ct_status ct_shards_open(ct_shard_set **out, const char *path, ct_checkpoint *head, ct_err *err);
void ct_shards_close(ct_shard_set *s);
int ct_shards_count(const ct_shard_set *s);
void ct_shards_layout(const ct_shard_set *s, int32_t layout[5]);
/* out[0..n) = array `array` over table [lo, lo + n): only the shards holding it are opened and
 * only the chunks covering it read, each checked against its CRC-32 (a mismatch, a missing
 * shard or one of another step is CT_ERR_FORMAT / CT_ERR_IO naming the file). */
ct_status ct_shards_read(const ct_shard_set *s, int array, size_t lo, size_t n, float *out,
                         ct_err *err);
/* The same for nruns table runs (runs[2k] offset, runs[2k+1] count): table[off, off + count)
 * of each, through one reader (shards opened once, the last chunk kept). */
ct_status ct_shards_read_runs(const ct_shard_set *s, int array, const uint64_t *runs,
                              size_t nruns, float *table, ct_err *err);
/* 1 when `path` is a sharded checkpoint's manifest (by its head), else 0. */
int ct_checkpoint_is_sharded(const char *path);

/* Directory form: DIR/ckpt_<step 8 digits>.bin and DIR/latest (a one-line text file naming it,
 * also written atomically). The directory is created if missing. `written` may be NULL. */
ct_status ct_checkpoint_save_dir(const char *dir, const ct_checkpoint *ck, char *written,
                                 size_t len, ct_err *err);
/* DIR/ckpt_<step>.bin: where the checkpoint of `step` goes (either form). */
void ct_checkpoint_name(char *out, size_t len, const char *dir, int64_t step);
/* DIR/latest names `path` (a file in DIR), atomically: what makes a checkpoint the one resumed. */
ct_status ct_checkpoint_publish(const char *dir, const char *path, ct_err *err);
/* The sharded form of ct_checkpoint_save_dir: the shards are written (ct_shard_path of
 * ct_checkpoint_name); this checks that each is visible here with its size (a directory not
 * shared by every host: CT_ERR_IO, nothing written), writes the manifest, then DIR/latest. */
ct_status ct_checkpoint_save_sharded(const char *dir, const ct_checkpoint *head,
                                     const int32_t layout[5], int nshards,
                                     const ct_shard_desc *d, const ct_shard_range *r, size_t nr,
                                     char *written, size_t len, ct_err *err);
/* The checkpoint DIR/latest names (or, if `dir` is a file, `dir` itself). */
ct_status ct_checkpoint_find(const char *dir, char *path, size_t len, ct_err *err);
/* What killed writers left in `dir`. Temporaries ("ckpt_<step>.bin.tmp.<pid>.<n>",
 * "ckpt_<step>.shard_<k>.tmp.<pid>.<n>", "latest.tmp.<pid>.<n>", or without ".<n>" from older
 * versions): removed when process <pid> no longer exists on this machine; one whose process is
 * alive is left alone (it may be writing; on a directory shared between machines a writer
 * elsewhere is not seen, so run this only where the writers run). Shards of a sharded save killed
 * before its manifest (no DIR/ckpt_<step>.bin beside them): removed, so run this before this
 * directory's saves start (one run writes a directory at a time). *removed, *bytes and names
 * ("a, b", cut to len) say what went (each may be NULL). A missing directory is not an error. */
ct_status ct_checkpoint_clean_stale(const char *dir, int *removed, uint64_t *bytes, char *names,
                                    size_t len, ct_err *err);
/* Keep the newest `keep` (>= 1) checkpoints DIR/ckpt_<step>.bin by modification time, and
 * always the one DIR/latest names; remove the rest, a sharded one's shards with it, and shards
 * whose manifest is gone (a save killed before its manifest). *removed (may be NULL) counts the
 * checkpoints. */
ct_status ct_checkpoint_prune(const char *dir, int keep, int *removed, ct_err *err);

/* ---------------------------------------------------------------- tokenizer (io_tokenizer.c) */

#define CT_TOKENIZER_MAGIC 20240328

typedef struct ct_tokenizer ct_tokenizer;

/* llm.c's GPT-2 tokenizer file (versions 1 and 2; version 2 names the end-of-text token). */
ct_status ct_tokenizer_open(ct_tokenizer **out, const char *path, ct_err *err);
/* The byte vocabulary: token i is byte i. */
ct_status ct_tokenizer_bytes(ct_tokenizer **out, ct_err *err);
void ct_tokenizer_free(ct_tokenizer *t);
int ct_tokenizer_vocab(const ct_tokenizer *t);
int ct_tokenizer_eot(const ct_tokenizer *t); /* -1 when none */
/* The bytes of token `id` (*len set); NULL for an id outside the vocabulary. */
const char *ct_tokenizer_decode(const ct_tokenizer *t, int id, size_t *len);
/* Write the tokenizer file format (for tests and tools). */
ct_status ct_tokenizer_write(const char *path, const char *const *pieces, const size_t *lens,
                             int vocab, int eot, ct_err *err);

#ifdef __cplusplus
}
#endif
#endif /* CT_ENGINE_IO_H */
