/* ct_gpt_config.h - the model's configuration (GPT-2, or a Llama-style model: arch), the layout a
 * model is built for, and the one table of parameter tensors (llm.c's order) from which offsets,
 * sizes, file I/O and views are derived. A Llama model uses the same table: the rows it has no use
 * for (position embedding, biases) have zero elements, its own (lm_head when untied) zero in GPT-2.
 *
 *     ct_gpt_config c = {.max_seq = 1024, .vocab = 50257, .padded_vocab = 50304,
 *                        .layers = 12, .heads = 12, .channels = 768};  // .experts = 0: dense
 *     if (ct_gpt_config_check(&c, "my model", &err)) { puts(err.msg); return 2; }
 *     size_t sizes[CT_GPT_NUM_TENSORS]; size_t total = ct_gpt_param_sizes(&c, sizes);
 */
#ifndef CT_GPT_CONFIG_H
#define CT_GPT_CONFIG_H

#include <stddef.h>

#include "ct_status.h"

typedef struct ct_gpt_config {
    int max_seq;      /* maxT: positions in wpe */
    int vocab;        /* V: real vocabulary (loss is over these) */
    int padded_vocab; /* Vp >= V: rows of wte (llm.c pads to a multiple of 128) */
    int layers;       /* L */
    int heads;        /* NH */
    int channels;     /* C; C % NH == 0 */
    int experts;      /* E: every block's MLP is a mixture of E experts; 0 = the dense MLP */
    int top_k;        /* K: experts per token, 1..E (0 with a dense model) */
    /* The architecture and its shape (all 0 in a GPT-2 config: the fields below are Llama's). */
    int arch;           /* ct_arch: CT_ARCH_GPT2 (0) or CT_ARCH_LLAMA */
    int kv_heads;       /* NKV: key/value heads, NH % NKV == 0 (llama; 0 in GPT-2: NH) */
    int ffn_dim;        /* F: the MLP's hidden width, any size (llama; 0 in GPT-2: 4C) */
    float rope_theta;   /* the rotary embedding's base theta (llama; 0 in GPT-2) */
    float norm_eps;     /* RMSNorm's eps (llama; 0 in GPT-2, whose LayerNorm eps is 1e-5) */
    int tie_embeddings; /* llama: 1 = the head reads the embedding (no lm_head); GPT-2 always is */
} ct_gpt_config;

typedef enum ct_arch { CT_ARCH_GPT2 = 0, CT_ARCH_LLAMA = 1 } ct_arch;

/* "gpt2" / "llama" ("?" otherwise); the parse returns CT_ERR_ARG for another name. */
const char *ct_arch_name(int arch);
ct_status ct_arch_parse(const char *s, int *arch);

static inline int ct_gpt_is_llama(const ct_gpt_config *c) { return c->arch == CT_ARCH_LLAMA; }
/* NKV, F, the head size, the fused q|k|v rows (C + 2 NKV hd; 3C in GPT-2) */
static inline int ct_gpt_kv_heads(const ct_gpt_config *c) {
    return ct_gpt_is_llama(c) && c->kv_heads > 0 ? c->kv_heads : c->heads;
}
static inline int ct_gpt_ffn(const ct_gpt_config *c) {
    return ct_gpt_is_llama(c) && c->ffn_dim > 0 ? c->ffn_dim : 4 * c->channels;
}
static inline int ct_gpt_head_size(const ct_gpt_config *c) {
    return c->heads > 0 ? c->channels / c->heads : 0;
}
static inline int ct_gpt_qkv_rows(const ct_gpt_config *c) {
    return c->channels + 2 * ct_gpt_kv_heads(c) * ct_gpt_head_size(c);
}
/* Whether the head has its own weight (lm_head): an untied Llama model. */
static inline int ct_gpt_has_lm_head(const ct_gpt_config *c) {
    return ct_gpt_is_llama(c) && !c->tie_embeddings;
}

/* Validate a config (sizes positive, C % NH == 0, V <= Vp, experts 0 with top-k 0 or
 * 1 <= top-k <= experts, a plausible parameter count; a GPT-2 config with the Llama fields 0 or
 * GPT-2's values; a Llama one with NH % NKV == 0, an even head size, F >= 1, theta > 1, eps > 0);
 * `what` names its source in the message, the message the field (gpt_config.c). */
ct_status ct_gpt_config_check(const ct_gpt_config *cfg, const char *what, ct_err *err);

/* The layout a model is built for (ct_layout, ct_coords) lives in parallel/ct_parallel.h. */
#include "ct_parallel.h"

/* How a tensor is cut over the TP group (Megatron's split): */
typedef enum ct_split {
    CT_SPLIT_NONE = 0, /* replicated on every TP rank (LayerNorms, wpe, row-parallel biases) */
    CT_SPLIT_QKV,      /* rows of the fused QKV weight / bias by heads: rank r holds its heads'
                          rows of each of the Q, K and V sections (ct_gpt_split_sections: GPT-2's
                          three of C rows; Llama's C, NKV hd, NKV hd) */
    CT_SPLIT_COL,      /* column-parallel: rows of (out, in) (output features), and the bias;
                          by sections (ct_gpt_split_sections) where the rows stack two products
                          (Llama's [gate; up]: rank r holds its rows of each) */
    CT_SPLIT_ROW,      /* row-parallel: columns of (out, in) (input features) */
    CT_SPLIT_VOCAB     /* vocabulary-parallel: rows of wte (Vp / tp each) */
} ct_split;

/* The row sections a TP split by rows divides one by one (rank r holds rows [r s/tp, (r+1) s/tp)
 * of each section s, in section order): q|k|v (GPT-2: 3 x C; Llama: C, NKV hd, NKV hd) and a
 * Llama model's [gate; up] (F, F); one section of `rows` for every other tensor. Returns the
 * count (1 to 3); `rows` is tensor i's rows (the table's). */
static inline int ct_gpt_split_sections(const ct_gpt_config *c, int i, size_t rows,
                                        size_t sec[3]);

/* How a tensor is initialised (GPT-2's scheme): */
typedef enum ct_init {
    CT_INIT_ZERO = 0,   /* biases */
    CT_INIT_ONE,        /* LayerNorm weights */
    CT_INIT_NORMAL,     /* normal(0, 0.02) */
    CT_INIT_RESID,      /* normal(0, 0.02 / sqrt(2 L)): projections into the residual stream */
    CT_INIT_NORMAL_VOCAB /* normal(0, 0.02) on the V real rows of wte, zero on the padding */
} ct_init;

/* The one table of parameter tensors, in llm.c's order (host arrays, model files, checkpoints):
 * X(name, per_layer, expert, rows, cols, ndim, split, decay, init). A per-layer tensor has one
 * (rows, cols) slice per block (stored for all L blocks together in table order); an expert
 * tensor of a mixture-of-experts model (experts > 0) has one such slice per expert within each
 * block ((L, E, rows, cols) in table order), divided over the expert-parallel group by experts
 * (the TP split then applies within each expert); with experts = 0 it is the dense MLP's. Shapes
 * are (out, in) for linear weights, y = x W^T + b; ndim: the slice as a file stores it (2: a
 * (rows, cols) matrix, 1: a vector of rows*cols); decay: AdamW weight decay applies (the 2-D
 * weights). The router routerw has E rows: none in a dense model.
 *
 * A Llama model (arch llama) reads the rows as: wte embed_tokens; ln1w, ln2w, lnfw the RMSNorm
 * weights (input, post-attention, final); qkvw [Wq; Wk; Wv] stacked ((C + 2 NKV hd) rows);
 * attprojw o_proj; fcw [gate; up] stacked (2F rows); fcprojw down_proj (C x F); lmhead its own
 * head (untied; tied: none, the head reads wte). Its biases, wpe and the LayerNorm biases have
 * no elements. */
/* rows a Llama model does not have (GPT-2's position embedding, biases, LayerNorm biases) */
#define CT__GPT2_ONLY(c, n) (ct_gpt_is_llama(c) ? 0 : (n))
/* the MLP's first weight: GPT-2's fc (4C rows); Llama's gate and up stacked, [gate; up] (2F) */
#define CT__GPT_FC_ROWS(c) (ct_gpt_is_llama(c) ? 2 * ct_gpt_ffn(c) : 4 * (c)->channels)
#define CT_GPT_TABLE(X, c)                                                                         \
    X(wte, 0, 0, (c)->padded_vocab, (c)->channels, 2, CT_SPLIT_VOCAB, 1, CT_INIT_NORMAL_VOCAB)     \
    X(wpe, 0, 0, CT__GPT2_ONLY(c, (c)->max_seq), (c)->channels, 2, CT_SPLIT_NONE, 1,             \
      CT_INIT_NORMAL)                                                                              \
    X(ln1w, 1, 0, 1, (c)->channels, 1, CT_SPLIT_NONE, 0, CT_INIT_ONE)                              \
    X(ln1b, 1, 0, CT__GPT2_ONLY(c, 1), (c)->channels, 1, CT_SPLIT_NONE, 0, CT_INIT_ZERO)           \
    X(qkvw, 1, 0, ct_gpt_qkv_rows(c), (c)->channels, 2, CT_SPLIT_QKV, 1, CT_INIT_NORMAL)           \
    X(qkvb, 1, 0, CT__GPT2_ONLY(c, 3 * (c)->channels), 1, 1, CT_SPLIT_QKV, 0, CT_INIT_ZERO)        \
    X(attprojw, 1, 0, (c)->channels, (c)->channels, 2, CT_SPLIT_ROW, 1, CT_INIT_RESID)             \
    X(attprojb, 1, 0, CT__GPT2_ONLY(c, (c)->channels), 1, 1, CT_SPLIT_NONE, 0, CT_INIT_ZERO)       \
    X(ln2w, 1, 0, 1, (c)->channels, 1, CT_SPLIT_NONE, 0, CT_INIT_ONE)                              \
    X(ln2b, 1, 0, CT__GPT2_ONLY(c, 1), (c)->channels, 1, CT_SPLIT_NONE, 0, CT_INIT_ZERO)           \
    X(routerw, 1, 0, (c)->experts, (c)->channels, 2, CT_SPLIT_NONE, 1, CT_INIT_NORMAL)             \
    X(fcw, 1, 1, CT__GPT_FC_ROWS(c), (c)->channels, 2, CT_SPLIT_COL, 1, CT_INIT_NORMAL)            \
    X(fcb, 1, 1, CT__GPT2_ONLY(c, 4 * (c)->channels), 1, 1, CT_SPLIT_COL, 0, CT_INIT_ZERO)         \
    X(fcprojw, 1, 1, (c)->channels, ct_gpt_ffn(c), 2, CT_SPLIT_ROW, 1, CT_INIT_RESID)              \
    X(fcprojb, 1, 1, CT__GPT2_ONLY(c, (c)->channels), 1, 1, CT_SPLIT_NONE, 0, CT_INIT_ZERO)        \
    X(lnfw, 0, 0, 1, (c)->channels, 1, CT_SPLIT_NONE, 0, CT_INIT_ONE)                              \
    X(lnfb, 0, 0, CT__GPT2_ONLY(c, 1), (c)->channels, 1, CT_SPLIT_NONE, 0, CT_INIT_ZERO)           \
    X(lmhead, 0, 0, ct_gpt_has_lm_head(c) ? (c)->padded_vocab : 0, (c)->channels, 2,              \
      CT_SPLIT_VOCAB, 1, CT_INIT_NORMAL_VOCAB)

enum {
#define CT__GPT_ENUM(name, pl, ex, rows, cols, nd, split, decay, init) CT_GPT_##name,
    CT_GPT_TABLE(CT__GPT_ENUM, (const ct_gpt_config *)0)
#undef CT__GPT_ENUM
    CT_GPT_NUM_TENSORS
};

/* One row of the table, as data. */
typedef struct ct_gpt_tensor_info {
    const char *name;
    int per_layer;    /* one slice per block */
    int expert;       /* one slice per expert of each block (a mixture-of-experts model's MLP) */
    int experts;      /* slices per block: E for an expert tensor of a MoE model, else 1 */
    size_t rows, cols; /* shape of one slice (of the whole tensor when !per_layer) */
    int ndim;         /* the slice's dimensions in a file: 2 (rows, cols) or 1 (rows*cols) */
    ct_split split;
    int decay;
    ct_init init;
} ct_gpt_tensor_info;

/* Row i of the table for config c. */
static inline ct_gpt_tensor_info ct_gpt_tensor(const ct_gpt_config *c, int i) {
    ct_gpt_tensor_info t = {"?", 0, 0, 1, 0, 0, 2, CT_SPLIT_NONE, 0, CT_INIT_ZERO};
    int k = 0;
#define CT__GPT_INFO(name_, pl, ex_, rows_, cols_, nd_, split_, decay_, init_)                     \
    if (k++ == i) {                                                                                \
        t.name = #name_, t.per_layer = (pl), t.rows = (size_t)(rows_), t.cols = (size_t)(cols_);    \
        t.expert = (ex_) && c->experts > 0, t.experts = t.expert ? c->experts : 1;                 \
        t.ndim = (nd_), t.split = (split_), t.decay = (decay_), t.init = (init_);                  \
    }
    CT_GPT_TABLE(CT__GPT_INFO, c)
#undef CT__GPT_INFO
    return t;
}

/* Element counts per tensor (floats, all layers) in table order; returns the total. */
static inline size_t ct_gpt_param_sizes(const ct_gpt_config *c, size_t sizes[CT_GPT_NUM_TENSORS]) {
    size_t total = 0;
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        ct_gpt_tensor_info t = ct_gpt_tensor(c, i);
        sizes[i] = (t.per_layer ? (size_t)c->layers : 1) * (size_t)t.experts * t.rows * t.cols;
        total += sizes[i];
    }
    return total;
}

static inline int ct_gpt_split_sections(const ct_gpt_config *c, int i, size_t rows,
                                        size_t sec[3]) {
    int qkv = i == CT_GPT_qkvw || i == CT_GPT_qkvb;
    if (qkv && rows > 0 && ct_gpt_is_llama(c)) {
        sec[0] = (size_t)c->channels;
        sec[1] = sec[2] = (size_t)ct_gpt_kv_heads(c) * (size_t)ct_gpt_head_size(c);
        return 3;
    }
    if (qkv) {
        sec[0] = sec[1] = sec[2] = rows / 3;
        return 3;
    }
    if (i == CT_GPT_fcw && ct_gpt_is_llama(c)) {
        sec[0] = sec[1] = (size_t)ct_gpt_ffn(c);
        return 2;
    }
    sec[0] = rows;
    return 1;
}

/* Tensor names in table order ("wte", "wpe", ...). */
static inline const char *ct_gpt_tensor_name(int i) {
    static const char *const names[] = {
#define CT__GPT_NAME(name, pl, ex, rows, cols, nd, split, decay, init) #name,
        CT_GPT_TABLE(CT__GPT_NAME, (const ct_gpt_config *)0)
#undef CT__GPT_NAME
    };
    return (i >= 0 && i < CT_GPT_NUM_TENSORS) ? names[i] : "?";
}

/* Whether a worker holds (some of) table tensor i: the blocks' tensors when it holds a block,
 * wte on the first pipeline stage (the embedding) and on the last (the head's tied copy), wpe on
 * the first, the final LayerNorm on the last. The one rule ct_params_create lays out and
 * ct_gpt_worker_params counts. */
static inline int ct_gpt_stage_holds(int i, int blocks, int first, int last) {
    if (i == CT_GPT_wte) return first || last;
    if (i == CT_GPT_wpe) return first;
    if (i == CT_GPT_lnfw || i == CT_GPT_lnfb || i == CT_GPT_lmhead) return last;
    return blocks > 0;
}

/* Whether AdamW decays tensor i (the table's decay column: the 2-D weight matrices). */
int ct_gpt_tensor_decays(int i);

/* The parameters one worker holds before ZeRO shards them, from the table alone: `blocks` of
 * the model's blocks, the embeddings (wte, wpe) when it is the first pipeline stage, the head
 * (the final LayerNorm and the tied copy of wte) when the last; a tensor split by tensor
 * parallelism counts 1/tp, an expert tensor 1/ep. experts (NULL: counted in the result)
 * receives the experts' part apart. What ct_params_create lays out for that worker: the one
 * count the trainer's memory report and the planner use. */
double ct_gpt_worker_params(const ct_gpt_config *c, int blocks, int first, int last, int tp,
                            int ep, double *experts);

#endif /* CT_GPT_CONFIG_H */
