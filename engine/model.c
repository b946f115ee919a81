/* model.c - GPT-2 on one worker's device: flat parameter / gradient / AdamW buffers, one
 * activation arena planned at creation, forward, backward and the optimizer step as sequences of
 * ops (ops.c). Nothing is allocated and nothing crosses to the host inside a step except the
 * tokens in and the loss out. Layouts: one device, or data parallel (dp = N) with ZeRO 0-3; the
 * flat buffers are layer-major (see ct_engine_model.h), host arrays in llm.c's table order. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ct_engine_model.h"
#include "ct_engine_ops.h"

/* Profiling buckets, in pipeline order. */
#define CT__OPS(X)                                                                              \
    X(encoder_fwd) X(layernorm_fwd) X(matmul_qkv_fwd) X(attention_fwd) X(matmul_attproj_fwd)    \
    X(residual_fwd) X(matmul_fc_fwd) X(gelu_fwd) X(matmul_fcproj_fwd) X(matmul_logits_fwd)      \
    X(crossentropy_fwd) X(crossentropy_bwd) X(matmul_logits_bwd) X(layernorm_bwd)               \
    X(matmul_fcproj_bwd) X(gelu_bwd) X(matmul_fc_bwd) X(matmul_attproj_bwd) X(attention_bwd)    \
    X(matmul_qkv_bwd) X(encoder_bwd) X(zero_grad) X(grad_norm) X(adamw) X(upload) X(readback)

enum {
#define CT__OPENUM(n) OP_##n,
    CT__OPS(CT__OPENUM)
#undef CT__OPENUM
    OP__COUNT
};
static const char *const op_names[] = {
#define CT__OPNAME(n) #n,
    CT__OPS(CT__OPNAME)
#undef CT__OPNAME
};

/* Activation arena regions (offsets in floats), planned for (max_B, max_T). */
typedef struct arena_plan {
    size_t tokens, targets, enc, ln1, ln1m, ln1r, qkv, qkvr, att, atty, res2, ln2, ln2m, ln2r, fch,
        fchg, res3, lnf, lnfm, lnfr, logits, losses, lse, loss, norm, partials, proj, vaccum, dres,
        dA, dB, dqkvr, datt, dvaccum, total;
} arena_plan;

struct ct_model {
    ct_gpt_config cfg;
    ct_layout layout;
    ct_coords coords;
    ct_device *dev;
    int max_B, max_T;
    size_t sizes[CT_GPT_NUM_TENSORS]; /* whole tensor (all layers), floats */
    size_t toffs[CT_GPT_NUM_TENSORS]; /* offset in table (llm.c) order: host arrays and files */
    /* Device (flat) layout, layer-major: wte, wpe, then per layer l the 12 block tensors, then
     * lnfw, lnfb. Offset of (tensor i, layer l) = loffs[i] + l * lstride for block tensors,
     * loffs[i] for the others. */
    size_t loffs[CT_GPT_NUM_TENSORS], lstride, lbase;
    size_t nparams;      /* real parameter count */
    size_t flat;         /* length of params / grads buffers: nparams padded to dp * shard */
    size_t shard_lo, shard_hi; /* this worker's optimizer shard [lo, hi) of the flat buffers */
    size_t opt_len;      /* length of adam m / v buffers: flat (ZeRO-0) or the shard size */
    /* ZeRO-2: `grads` is a working buffer [wte wpe | layer slot 0 | layer slot 1 | lnfw lnfb]
     * (layer l uses slot l % 2; a data-parallel hook empties each slot after its backward), and
     * `gshard` holds this worker's averaged gradient shard [shard_lo, shard_hi). */
    size_t glen;         /* floats of `grads` */
    ct_buffer *gshard;
    /* ZeRO-3: `params` is a working buffer laid out like ZeRO-2's gradient one (block l in slot
     * l % 2), filled by the parameter hook before each use; `pshard` holds this worker's shard. */
    ct_buffer *pshard;
    ct_model_param_hook phook;
    void *phook_user;
    ct_model_bwd_hook hook;
    void *hook_user;
    ct_buffer *params, *grads, *adam_m, *adam_v, *acts;
    arena_plan a;
    int B, T;          /* shape of the last forward */
    int have_targets;  /* the last forward computed a loss */
    int fwd_valid;     /* logits and saved activations belong to the last forward */
    int profile;
    double prof_ms[OP__COUNT];
    long prof_calls[OP__COUNT];
    ct_err err;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Run an op; in profiling mode wait for it and charge its time to bucket `op`. */
#define RUN(op, expr)                                                   \
    do {                                                                \
        double t0_ = m->profile ? now_s() : 0.0;                        \
        st = (expr);                                                    \
        if (st == CT_OK && m->profile) {                                \
            st = ct_device_finish(m->dev);                              \
            m->prof_ms[op] += 1e3 * (now_s() - t0_);                    \
            m->prof_calls[op]++;                                        \
        }                                                               \
        if (st != CT_OK) goto cleanup;                                  \
    } while (0)

/* Copy the device's message onto the model's error record. */
static ct_status dev_fail(ct_model *m, ct_status st, const char *what) {
    if (st != CT_OK) CT_ERR(&m->err, st, "%s: %s", what, ct_device_errmsg(m->dev));
    return st;
}

/* Block tensors (one slice per layer) are ln1w .. fcprojb in the table. */
static int is_block(int i) { return i >= CT_GPT_ln1w && i <= CT_GPT_fcprojb; }

/* Flat (device) offset of tensor i's slice of layer l (l ignored for wte, wpe, lnfw, lnfb). */
static size_t foff(const ct_model *m, int i, int l) {
    return m->loffs[i] + (is_block(i) ? (size_t)l * m->lstride : 0);
}

/* Offset of (tensor i, layer l) in a working buffer [wte wpe | slot 0 | slot 1 | lnfw lnfb]. */
static size_t woff(const ct_model *m, int i, int l) {
    if (is_block(i)) return m->lbase + (size_t)(l % 2) * m->lstride + (m->loffs[i] - m->lbase);
    if (i == CT_GPT_lnfw || i == CT_GPT_lnfb)
        return m->lbase + 2 * m->lstride + (m->loffs[i] - m->loffs[CT_GPT_lnfw]);
    return m->loffs[i];
}
/* ... in the gradient buffer (flat, or the ZeRO-2/3 working buffer) and the parameter buffer
 * (flat, or the ZeRO-3 working buffer). */
static size_t goff(const ct_model *m, int i, int l) {
    return m->layout.zero < 2 ? foff(m, i, l) : woff(m, i, l);
}
static size_t poff(const ct_model *m, int i, int l) {
    return m->layout.zero < 3 ? foff(m, i, l) : woff(m, i, l);
}

int ct_model_tensor_decays(int i) {
    return i == CT_GPT_wte || i == CT_GPT_wpe || i == CT_GPT_qkvw || i == CT_GPT_attprojw ||
           i == CT_GPT_fcw || i == CT_GPT_fcprojw;
}

static void plan_arena(arena_plan *a, const ct_gpt_config *c, int B, int T) {
    size_t L = (size_t)c->layers, C = (size_t)c->channels, NH = (size_t)c->heads;
    size_t BT = (size_t)B * T, BTC = BT * C, att = (size_t)B * NH * T * T;
    size_t o = 0;
#define REGION(f, n) (a->f = o, o += ((size_t)(n) + 15) / 16 * 16) /* 64-byte aligned starts */
    REGION(tokens, BT);
    REGION(targets, BT);
    REGION(enc, BTC);
    REGION(ln1, L * BTC);
    REGION(ln1m, L * BT);
    REGION(ln1r, L * BT);
    REGION(qkv, L * 3 * BTC);
    REGION(qkvr, L * 3 * BTC);
    REGION(att, L * att);
    REGION(atty, L * BTC);
    REGION(res2, L * BTC);
    REGION(ln2, L * BTC);
    REGION(ln2m, L * BT);
    REGION(ln2r, L * BT);
    REGION(fch, L * 4 * BTC);
    REGION(fchg, L * 4 * BTC);
    REGION(res3, L * BTC);
    REGION(lnf, BTC);
    REGION(lnfm, BT);
    REGION(lnfr, BT);
    REGION(logits, BT * (size_t)c->padded_vocab);
    REGION(losses, BT);
    REGION(lse, BT);
    REGION(loss, 1);
    REGION(norm, 1);
    REGION(partials, CT_NORM_PARTIALS);
    REGION(proj, BTC);
    REGION(vaccum, BTC);
    REGION(dres, BTC);
    REGION(dA, 4 * BTC);
    REGION(dB, 4 * BTC);
    REGION(dqkvr, 3 * BTC);
    REGION(datt, 2 * att); /* the score gradient and a transposed copy */
    REGION(dvaccum, BTC);
#undef REGION
    a->total = o;
}

ct_status ct_model_create(ct_model **out, const ct_gpt_config *cfg, const ct_layout *layout,
                          const ct_coords *coords, ct_device *dev, int max_B, int max_T,
                          ct_err *err) {
    ct_status st = CT_OK;
    ct_model *m = NULL;
    *out = NULL;
    if (!cfg || !layout || !coords || !dev)
        return CT_ERR(err, CT_ERR_ARG, "ct_model_create: config, layout, coords and device needed");
    if (cfg->layers < 1 || cfg->heads < 1 || cfg->channels < 1 || cfg->vocab < 1 ||
        cfg->max_seq < 1 || cfg->padded_vocab < cfg->vocab)
        return CT_ERR(err, CT_ERR_ARG,
                      "ct_model_create: bad config (L=%d NH=%d C=%d V=%d Vp=%d maxT=%d): all must "
                      "be positive and Vp >= V",
                      cfg->layers, cfg->heads, cfg->channels, cfg->vocab, cfg->padded_vocab,
                      cfg->max_seq);
    if (cfg->channels % cfg->heads != 0)
        return CT_ERR(err, CT_ERR_ARG, "ct_model_create: heads (%d) must divide channels (%d)",
                      cfg->heads, cfg->channels);
    if (max_B < 1 || max_T < 1 || max_T > cfg->max_seq)
        return CT_ERR(err, CT_ERR_ARG,
                      "ct_model_create: batch %d and sequence %d must be positive, sequence <= "
                      "max_seq %d",
                      max_B, max_T, cfg->max_seq);
    if ((double)max_B * max_T * cfg->padded_vocab >= 2147483647.0 ||
        (double)max_B * max_T * 4 * cfg->channels >= 2147483647.0 ||
        (double)max_B * cfg->heads * max_T * max_T >= 2147483647.0)
        return CT_ERR(err, CT_ERR_UNSUPPORTED,
                      "ct_model_create: batch %d x sequence %d is too large (a tensor would exceed "
                      "2^31 elements)",
                      max_B, max_T);
    if (layout->dp < 1 || layout->tp != 1 || layout->pp != 1 || coords->tp_rank != 0 ||
        coords->pp_rank != 0 || coords->dp_rank < 0 || coords->dp_rank >= layout->dp)
        return CT_ERR(err, CT_ERR_UNSUPPORTED,
                      "ct_model_create: layout dp=%d tp=%d pp=%d (dp rank %d) is not supported "
                      "(data parallelism only: tp = pp = 1, 0 <= dp rank < dp)",
                      layout->dp, layout->tp, layout->pp, coords->dp_rank);
    if (layout->zero < 0 || layout->zero > 3 || (layout->zero > 0 && layout->dp < 2))
        return CT_ERR(err, CT_ERR_UNSUPPORTED,
                      "ct_model_create: ZeRO stage %d with dp=%d is not supported (stages 0 to 3 "
                      "are built; a ZeRO stage needs dp >= 2)",
                      layout->zero, layout->dp);
    m = calloc(1, sizeof *m);
    if (!m) return CT_ERR(err, CT_ERR_NOMEM, "ct_model_create: out of host memory");
    m->cfg = *cfg;
    m->layout = *layout;
    m->coords = *coords;
    m->dev = dev;
    m->max_B = max_B;
    m->max_T = max_T;
    m->nparams = ct_gpt_param_sizes(cfg, m->sizes);
    size_t o = 0;
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        m->toffs[i] = o;
        o += m->sizes[i];
    }
    /* layer-major flat layout */
    m->loffs[CT_GPT_wte] = 0;
    m->loffs[CT_GPT_wpe] = m->sizes[CT_GPT_wte];
    m->lbase = m->sizes[CT_GPT_wte] + m->sizes[CT_GPT_wpe];
    m->lstride = 0;
    for (int i = CT_GPT_ln1w; i <= CT_GPT_fcprojb; i++) {
        m->loffs[i] = m->lbase + m->lstride;
        m->lstride += m->sizes[i] / (size_t)cfg->layers;
    }
    m->loffs[CT_GPT_lnfw] = m->lbase + m->lstride * (size_t)cfg->layers;
    m->loffs[CT_GPT_lnfb] = m->loffs[CT_GPT_lnfw] + m->sizes[CT_GPT_lnfw];
    if (layout->zero >= 1) {
        size_t N = (size_t)layout->dp, sh = (m->nparams + N - 1) / N;
        m->flat = sh * N;
        m->shard_lo = sh * (size_t)coords->dp_rank;
        m->shard_hi = m->shard_lo + sh;
        m->opt_len = sh;
    } else {
        m->flat = m->nparams;
        m->shard_lo = 0;
        m->shard_hi = m->nparams;
        m->opt_len = m->nparams;
    }
    m->glen = layout->zero >= 2 ? m->lbase + 2 * m->lstride + 2 * (size_t)cfg->channels : m->flat;
    plan_arena(&m->a, cfg, max_B, max_T);
    size_t pb = m->flat * sizeof(float), ob = m->opt_len * sizeof(float);
    int z3 = layout->zero >= 3;
    if ((st = ct_buffer_alloc(dev, z3 ? CT_MEM_WORKSPACE : CT_MEM_PARAMS,
                              z3 ? "parameter working buffer" : "params",
                              z3 ? m->glen * sizeof(float) : pb, &m->params)) != CT_OK ||
        (z3 && (st = ct_buffer_alloc(dev, CT_MEM_PARAMS, "parameter shard", ob, &m->pshard)) !=
                   CT_OK) ||
        (st = ct_buffer_alloc(dev, layout->zero >= 2 ? CT_MEM_WORKSPACE : CT_MEM_GRADS,
                              layout->zero >= 2 ? "gradient working buffer" : "grads",
                              m->glen * sizeof(float), &m->grads)) != CT_OK ||
        (layout->zero >= 2 && (st = ct_buffer_alloc(dev, CT_MEM_GRADS, "gradient shard", ob,
                                                    &m->gshard)) != CT_OK) ||
        (st = ct_buffer_alloc(dev, CT_MEM_OPTIMIZER, "adam_m", ob, &m->adam_m)) != CT_OK ||
        (st = ct_buffer_alloc(dev, CT_MEM_OPTIMIZER, "adam_v", ob, &m->adam_v)) != CT_OK ||
        (st = ct_buffer_alloc(dev, CT_MEM_ACTIVATIONS, "activations", m->a.total * sizeof(float),
                              &m->acts)) != CT_OK) {
        CT_ERR(err, st, "ct_model_create: %s", ct_device_errmsg(dev));
        goto cleanup;
    }
    if ((st = ct_ops_warmup(dev)) != CT_OK) {
        CT_ERR(err, st, "ct_model_create: building the engine kernels: %s", ct_device_errmsg(dev));
        goto cleanup;
    }
    *out = m;
    return CT_OK;
cleanup:
    ct_model_free(m);
    return st;
}

void ct_model_free(ct_model *m) {
    if (!m) return;
    ct_buffer_free(m->params);
    ct_buffer_free(m->grads);
    ct_buffer_free(m->gshard);
    ct_buffer_free(m->pshard);
    ct_buffer_free(m->adam_m);
    ct_buffer_free(m->adam_v);
    ct_buffer_free(m->acts);
    free(m);
}

const ct_gpt_config *ct_model_config(const ct_model *m) { return &m->cfg; }
ct_device *ct_model_device(const ct_model *m) { return m->dev; }
const char *ct_model_errmsg(const ct_model *m) { return m->err.msg; }
size_t ct_model_num_params(const ct_model *m) { return m->nparams; }
ct_buffer *ct_model_params_buffer(ct_model *m) { return m->params; }
ct_buffer *ct_model_grads_buffer(ct_model *m) { return m->grads; }
ct_buffer *ct_model_grad_shard_buffer(ct_model *m) { return m->gshard; }
ct_buffer *ct_model_param_shard_buffer(ct_model *m) { return m->pshard; }
size_t ct_model_param_offset(const ct_model *m, int i, int l) { return poff(m, i, l); }
void ct_model_set_param_hook(ct_model *m, ct_model_param_hook fn, void *user) {
    m->phook = fn;
    m->phook_user = user;
}
size_t ct_model_grad_offset(const ct_model *m, int i, int l) { return goff(m, i, l); }
int ct_model_zero_stage(const ct_model *m) { return m->layout.zero; }
ct_buffer *ct_model_adam_m_buffer(ct_model *m) { return m->adam_m; }
ct_buffer *ct_model_adam_v_buffer(ct_model *m) { return m->adam_v; }

void ct_model_tensor(const ct_model *m, int i, size_t *offset, size_t *count) {
    int ok = i >= 0 && i < CT_GPT_NUM_TENSORS;
    if (offset) *offset = ok ? m->toffs[i] : 0;
    if (count) *count = ok ? m->sizes[i] : 0;
}

void ct_model_tensor_flat(const ct_model *m, int i, int l, size_t *offset, size_t *count) {
    int ok = i >= 0 && i < CT_GPT_NUM_TENSORS && l >= 0 && l < m->cfg.layers;
    if (offset) *offset = ok ? foff(m, i, l) : 0;
    if (count) *count = ok ? (is_block(i) ? m->sizes[i] / (size_t)m->cfg.layers : m->sizes[i]) : 0;
}

size_t ct_model_flat_len(const ct_model *m) { return m->flat; }
void ct_model_shard(const ct_model *m, size_t *lo, size_t *hi) {
    if (lo) *lo = m->shard_lo;
    if (hi) *hi = m->shard_hi;
}
size_t ct_model_layer_begin(const ct_model *m, int l) {
    if (l < 0) l = 0;
    if (l > m->cfg.layers) l = m->cfg.layers;
    return m->lbase + (size_t)l * m->lstride;
}
void ct_model_set_backward_hook(ct_model *m, ct_model_bwd_hook fn, void *user) {
    m->hook = fn;
    m->hook_user = user;
}

/* Table order <-> flat order, one (tensor, layer) slice at a time. */
void ct_model_table_to_flat(const ct_model *m, const float *table, float *flat) {
    int L = m->cfg.layers;
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        int nl = is_block(i) ? L : 1;
        size_t cnt = m->sizes[i] / (size_t)nl;
        for (int l = 0; l < nl; l++)
            memcpy(flat + foff(m, i, l), table + m->toffs[i] + (size_t)l * cnt, cnt * sizeof(float));
    }
    if (m->flat > m->nparams) memset(flat + m->nparams, 0, (m->flat - m->nparams) * sizeof(float));
}
void ct_model_flat_to_table(const ct_model *m, const float *flat, float *table) {
    int L = m->cfg.layers;
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        int nl = is_block(i) ? L : 1;
        size_t cnt = m->sizes[i] / (size_t)nl;
        for (int l = 0; l < nl; l++)
            memcpy(table + m->toffs[i] + (size_t)l * cnt, flat + foff(m, i, l), cnt * sizeof(float));
    }
}

/* ------------------------------------------------------------------ host copies */

/* Host arrays are in table order; the device buffers layer-major (flat). Buffers b of length
 * `blen` floats hold flat range [lo, lo + blen) (the whole flat buffer, or an optimizer shard):
 * writes set that range (from the full table-order array), reads fill only that range of the
 * table-order array (the rest is left as it was). */
static ct_status copy_flat(ct_model *m, ct_buffer *b, size_t lo, size_t blen, const float *src,
                           float *dst, size_t n, const char *what) {
    if (n != m->nparams)
        return CT_ERR(&m->err, CT_ERR_ARG, "%s: %zu floats given, the model has %zu", what, n,
                      m->nparams);
    float *flat = malloc(m->flat * sizeof(float));
    if (!flat) return CT_ERR(&m->err, CT_ERR_NOMEM, "%s: out of host memory", what);
    ct_status st = CT_OK;
    if (src) {
        ct_model_table_to_flat(m, src, flat);
        st = ct_buffer_write(b, 0, flat + lo, blen * sizeof(float));
    } else {
        if (dst != NULL && (lo > 0 || blen < m->flat)) ct_model_table_to_flat(m, dst, flat);
        st = ct_buffer_read(b, 0, flat + lo, blen * sizeof(float));
        if (st == CT_OK) ct_model_flat_to_table(m, flat, dst);
    }
    free(flat);
    return dev_fail(m, st, what);
}

ct_status ct_model_set_params(ct_model *m, const float *h, size_t n) {
    m->fwd_valid = 0;
    if (m->pshard)
        return copy_flat(m, m->pshard, m->shard_lo, m->opt_len, h, NULL, n, "ct_model_set_params");
    return copy_flat(m, m->params, 0, m->flat, h, NULL, n, "ct_model_set_params");
}
ct_status ct_model_get_params(ct_model *m, float *h, size_t n) {
    if (m->pshard)
        return copy_flat(m, m->pshard, m->shard_lo, m->opt_len, NULL, h, n, "ct_model_get_params");
    return copy_flat(m, m->params, 0, m->flat, NULL, h, n, "ct_model_get_params");
}
static ct_status no_full_grads(ct_model *m, const char *what) {
    return CT_ERR(&m->err, CT_ERR_STATE,
                  "%s: under ZeRO-2 no worker holds the whole gradient (only its shard)", what);
}
ct_status ct_model_set_grads(ct_model *m, const float *h, size_t n) {
    if (m->layout.zero >= 2) return no_full_grads(m, "ct_model_set_grads");
    return copy_flat(m, m->grads, 0, m->flat, h, NULL, n, "ct_model_set_grads");
}
ct_status ct_model_get_grads(ct_model *m, float *h, size_t n) {
    if (m->layout.zero >= 2) return no_full_grads(m, "ct_model_get_grads");
    return copy_flat(m, m->grads, 0, m->flat, NULL, h, n, "ct_model_get_grads");
}
ct_status ct_model_set_optimizer(ct_model *m, const float *am, const float *av, size_t n) {
    ct_status st = CT_OK;
    if (am) st = copy_flat(m, m->adam_m, m->shard_lo, m->opt_len, am, NULL, n, "ct_model_set_optimizer (m)");
    if (st == CT_OK && av) st = copy_flat(m, m->adam_v, m->shard_lo, m->opt_len, av, NULL, n, "ct_model_set_optimizer (v)");
    return st;
}
ct_status ct_model_get_optimizer(ct_model *m, float *am, float *av, size_t n) {
    ct_status st = CT_OK;
    if (am) st = copy_flat(m, m->adam_m, m->shard_lo, m->opt_len, NULL, am, n, "ct_model_get_optimizer (m)");
    if (st == CT_OK && av) st = copy_flat(m, m->adam_v, m->shard_lo, m->opt_len, NULL, av, n, "ct_model_get_optimizer (v)");
    return st;
}

/* ------------------------------------------------------------------ init */

static uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Standard normal number `i` of the stream `seed` (Box-Muller on two counter-based uniforms). */
static double normal_at(uint64_t seed, uint64_t i) {
    uint64_t k = splitmix64(seed);
    double u1 = ((double)(splitmix64(k ^ (2 * i)) >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
    double u2 = (double)(splitmix64(k ^ (2 * i + 1)) >> 11) * 0x1.0p-53;     /* [0, 1) */
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

ct_status ct_model_init_random(ct_model *m, uint64_t seed) {
    ct_status st = CT_OK;
    float *h = malloc(m->nparams * sizeof *h);
    if (!h) return CT_ERR(&m->err, CT_ERR_NOMEM, "ct_model_init_random: out of host memory");
    const ct_gpt_config *c = &m->cfg;
    double resid = 0.02 / sqrt(2.0 * c->layers);
    for (int t = 0; t < CT_GPT_NUM_TENSORS; t++) {
        float *p = h + m->toffs[t];
        size_t n = m->sizes[t];
        double std = 0.0, fill = 0.0;
        size_t nrand = n;
        switch (t) {
        case CT_GPT_wte: std = 0.02; nrand = (size_t)c->vocab * c->channels; break;
        case CT_GPT_wpe: case CT_GPT_qkvw: case CT_GPT_fcw: std = 0.02; break;
        case CT_GPT_attprojw: case CT_GPT_fcprojw: std = resid; break;
        case CT_GPT_ln1w: case CT_GPT_ln2w: case CT_GPT_lnfw: fill = 1.0; break;
        default: break; /* biases */
        }
        for (size_t i = 0; i < n; i++)
            p[i] = (std > 0.0 && i < nrand) ? (float)(std * normal_at(seed, m->toffs[t] + i))
                                            : (float)(std > 0.0 ? 0.0 : fill);
    }
    st = ct_model_set_params(m, h, m->nparams);
    free(h);
    if (st == CT_OK) st = dev_fail(m, ct_buffer_zero(m->adam_m, 0, m->opt_len * sizeof(float)), "init");
    if (st == CT_OK) st = dev_fail(m, ct_buffer_zero(m->adam_v, 0, m->opt_len * sizeof(float)), "init");
    return st;
}

/* ------------------------------------------------------------------ forward / backward */

static ct_status check_ids(ct_model *m, const int *ids, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab)
            return CT_ERR(&m->err, CT_ERR_ARG,
                          "ct_model_forward: %s[%zu] = %d is outside the vocabulary [0, %d)", what,
                          i, ids[i], m->cfg.vocab);
    return CT_OK;
}

#define PV(t) ct_view_of(pm, poff(m, CT_GPT_##t, 0))
#define GV(t) ct_view_of(gm, goff(m, CT_GPT_##t, 0))
#define PL(t, l) ct_view_of(pm, poff(m, CT_GPT_##t, l))
/* ZeRO-3: have the parameters of block l (-1: embeddings and final LayerNorm) gathered. */
#define PHOOK(l, bwd)                                                                   \
    do {                                                                                \
        if (m->phook && (st = m->phook(m->phook_user, m, (l), (bwd))) != CT_OK)         \
            goto cleanup;                                                               \
    } while (0)
#define GL(t, l) ct_view_of(gm, goff(m, CT_GPT_##t, l))
#define AV(f) ct_view_of(am, m->a.f)

ct_status ct_model_forward(ct_model *m, const int *tokens, const int *targets, int B, int T,
                           float *loss) {
    ct_status st = CT_OK;
    if (loss) *loss = NAN;
    m->fwd_valid = 0;
    if (!tokens || B < 1 || T < 1 || B > m->max_B || T > m->max_T)
        return CT_ERR(&m->err, CT_ERR_ARG,
                      "ct_model_forward: batch %d x sequence %d outside the planned %d x %d (or "
                      "no tokens)",
                      B, T, m->max_B, m->max_T);
    size_t BT = (size_t)B * T;
    if ((st = check_ids(m, tokens, BT, "tokens")) != CT_OK) return st;
    if (targets && (st = check_ids(m, targets, BT, "targets")) != CT_OK) return st;
    const ct_gpt_config *c = &m->cfg;
    int L = c->layers, C = c->channels, NH = c->heads, Vp = c->padded_vocab;
    size_t BTC = BT * C;
    size_t attL = (size_t)m->max_B * NH * m->max_T * m->max_T; /* per-layer stride of att */
    size_t lBTC = (size_t)m->max_B * m->max_T * C, lBT = (size_t)m->max_B * m->max_T;
    cl_mem pm = ct_buffer_mem(m->params), am = ct_buffer_mem(m->acts);
    RUN(OP_upload, ct_buffer_write(m->acts, m->a.tokens * sizeof(float), tokens, BT * sizeof(int)));
    if (targets)
        RUN(OP_upload,
            ct_buffer_write(m->acts, m->a.targets * sizeof(float), targets, BT * sizeof(int)));
    PHOOK(-1, 0);
    RUN(OP_encoder_fwd, ct_encoder_forward(m->dev, AV(enc), AV(tokens), PV(wte), PV(wpe), B, T, C, Vp));
    for (int l = 0; l < L; l++) {
        PHOOK(l, 0);
        ct_view res = l ? ct_view_at(AV(res3), (l - 1) * lBTC) : AV(enc);
        ct_view ln1 = ct_view_at(AV(ln1), l * lBTC), qkv = ct_view_at(AV(qkv), 3 * l * lBTC);
        ct_view qkvr = ct_view_at(AV(qkvr), 3 * l * lBTC), att = ct_view_at(AV(att), l * attL);
        ct_view atty = ct_view_at(AV(atty), l * lBTC), res2 = ct_view_at(AV(res2), l * lBTC);
        ct_view ln2 = ct_view_at(AV(ln2), l * lBTC), fch = ct_view_at(AV(fch), 4 * l * lBTC);
        ct_view fchg = ct_view_at(AV(fchg), 4 * l * lBTC), res3 = ct_view_at(AV(res3), l * lBTC);
        RUN(OP_layernorm_fwd,
            ct_layernorm_forward(m->dev, ln1, ct_view_at(AV(ln1m), l * lBT),
                                 ct_view_at(AV(ln1r), l * lBT), res, PL(ln1w, l),
                                 PL(ln1b, l), B, T, C));
        RUN(OP_matmul_qkv_fwd,
            ct_matmul_forward(m->dev, qkv, ln1, PL(qkvw, l),
                              PL(qkvb, l), B, T, C, 3 * C));
        RUN(OP_attention_fwd,
            ct_attention_forward(m->dev, atty, qkvr, att, qkv, AV(vaccum), B, T, C, NH));
        RUN(OP_matmul_attproj_fwd,
            ct_matmul_forward(m->dev, AV(proj), atty, PL(attprojw, l),
                              PL(attprojb, l), B, T, C, C));
        RUN(OP_residual_fwd, ct_residual_forward(m->dev, res2, res, AV(proj), BTC));
        RUN(OP_layernorm_fwd,
            ct_layernorm_forward(m->dev, ln2, ct_view_at(AV(ln2m), l * lBT),
                                 ct_view_at(AV(ln2r), l * lBT), res2, PL(ln2w, l),
                                 PL(ln2b, l), B, T, C));
        RUN(OP_matmul_fc_fwd,
            ct_matmul_forward(m->dev, fch, ln2, PL(fcw, l),
                              PL(fcb, l), B, T, C, 4 * C));
        RUN(OP_gelu_fwd, ct_gelu_forward(m->dev, fchg, fch, 4 * BTC));
        RUN(OP_matmul_fcproj_fwd,
            ct_matmul_forward(m->dev, AV(proj), fchg, PL(fcprojw, l),
                              PL(fcprojb, l), B, T, 4 * C, C));
        RUN(OP_residual_fwd, ct_residual_forward(m->dev, res3, res2, AV(proj), BTC));
    }
    RUN(OP_layernorm_fwd,
        ct_layernorm_forward(m->dev, AV(lnf), AV(lnfm), AV(lnfr),
                             ct_view_at(AV(res3), (size_t)(L - 1) * lBTC), PV(lnfw), PV(lnfb), B, T,
                             C));
    RUN(OP_matmul_logits_fwd,
        ct_matmul_forward(m->dev, AV(logits), AV(lnf), PV(wte), ct_view_none(), B, T, C, Vp));
    m->B = B;
    m->T = T;
    m->have_targets = targets != NULL;
    m->fwd_valid = 1;
    if (targets) {
        RUN(OP_crossentropy_fwd,
            ct_crossentropy_forward(m->dev, AV(losses), AV(lse), AV(logits), AV(targets), B, T,
                                    c->vocab, Vp));
        RUN(OP_crossentropy_fwd, ct_mean_forward(m->dev, AV(loss), AV(losses), BT));
        float lv = NAN;
        RUN(OP_readback, ct_buffer_read(m->acts, m->a.loss * sizeof(float), &lv, sizeof lv));
        if (loss) *loss = lv;
    }
cleanup:
    if (st != CT_OK) {
        m->fwd_valid = 0;
        dev_fail(m, st, "ct_model_forward");
    }
    return st;
}

ct_status ct_model_logits(ct_model *m, float *host, size_t n) {
    if (!m->fwd_valid)
        return CT_ERR(&m->err, CT_ERR_STATE,
                      "ct_model_logits: no valid forward (none yet, or a backward overwrote them)");
    size_t want = (size_t)m->B * m->T * m->cfg.padded_vocab;
    if (n != want)
        return CT_ERR(&m->err, CT_ERR_ARG, "ct_model_logits: %zu floats given, logits are %zu", n,
                      want);
    return dev_fail(m, ct_buffer_read(m->acts, m->a.logits * sizeof(float), host, n * sizeof(float)),
                    "ct_model_logits");
}

ct_status ct_model_zero_grad(ct_model *m) {
    ct_status st = CT_OK;
    RUN(OP_zero_grad, ct_buffer_zero(m->grads, 0, m->glen * sizeof(float)));
cleanup:
    return dev_fail(m, st, "ct_model_zero_grad");
}

ct_status ct_model_backward(ct_model *m, float loss_scale) {
    ct_status st = CT_OK;
    if (!m->fwd_valid || !m->have_targets)
        return CT_ERR(&m->err, CT_ERR_STATE,
                      "ct_model_backward: needs a forward with targets first (and only one "
                      "backward per forward)");
    const ct_gpt_config *c = &m->cfg;
    int B = m->B, T = m->T, L = c->layers, C = c->channels, NH = c->heads, Vp = c->padded_vocab;
    size_t BT = (size_t)B * T, BTC = BT * C;
    size_t attL = (size_t)m->max_B * NH * m->max_T * m->max_T;
    size_t lBTC = (size_t)m->max_B * m->max_T * C, lBT = (size_t)m->max_B * m->max_T;
    cl_mem pm = ct_buffer_mem(m->params), gm = ct_buffer_mem(m->grads);
    cl_mem am = ct_buffer_mem(m->acts);
    m->fwd_valid = 0; /* the logits become their gradient */
    RUN(OP_crossentropy_bwd,
        ct_crossentropy_backward(m->dev, AV(logits), AV(logits), AV(lse), AV(targets),
                                 loss_scale / (float)BT, B, T, c->vocab, Vp));
    RUN(OP_matmul_logits_bwd, ct_matmul_backward(m->dev, AV(dA), GV(wte), ct_view_none(),
                                                 AV(logits), AV(lnf), PV(wte), B, T, C, Vp));
    RUN(OP_layernorm_bwd,
        ct_layernorm_backward(m->dev, AV(dres), GV(lnfw), GV(lnfb), AV(dA),
                              ct_view_at(AV(res3), (size_t)(L - 1) * lBTC), PV(lnfw), AV(lnfm),
                              AV(lnfr), B, T, C, 0));
    if (m->hook && (st = m->hook(m->hook_user, m, m->loffs[CT_GPT_lnfw])) != CT_OK) goto cleanup;
    for (int l = L - 1; l >= 0; l--) {
        PHOOK(l, 1);
        ct_view res = l ? ct_view_at(AV(res3), (l - 1) * lBTC) : AV(enc);
        ct_view ln1 = ct_view_at(AV(ln1), l * lBTC);
        ct_view qkvr = ct_view_at(AV(qkvr), 3 * l * lBTC), att = ct_view_at(AV(att), l * attL);
        ct_view atty = ct_view_at(AV(atty), l * lBTC), res2 = ct_view_at(AV(res2), l * lBTC);
        ct_view ln2 = ct_view_at(AV(ln2), l * lBTC), fch = ct_view_at(AV(fch), 4 * l * lBTC);
        ct_view fchg = ct_view_at(AV(fchg), 4 * l * lBTC);
        RUN(OP_matmul_fcproj_bwd,
            ct_matmul_backward(m->dev, AV(dA), GL(fcprojw, l),
                               GL(fcprojb, l), AV(dres), fchg,
                               PL(fcprojw, l), B, T, 4 * C, C));
        RUN(OP_gelu_bwd, ct_gelu_backward(m->dev, AV(dB), fch, AV(dA), 4 * BTC));
        RUN(OP_matmul_fc_bwd,
            ct_matmul_backward(m->dev, AV(dA), GL(fcw, l),
                               GL(fcb, l), AV(dB), ln2,
                               PL(fcw, l), B, T, C, 4 * C));
        RUN(OP_layernorm_bwd,
            ct_layernorm_backward(m->dev, AV(dres), GL(ln2w, l),
                                  GL(ln2b, l), AV(dA), res2,
                                  PL(ln2w, l), ct_view_at(AV(ln2m), l * lBT),
                                  ct_view_at(AV(ln2r), l * lBT), B, T, C, 1));
        RUN(OP_matmul_attproj_bwd,
            ct_matmul_backward(m->dev, AV(dA), GL(attprojw, l),
                               GL(attprojb, l), AV(dres), atty,
                               PL(attprojw, l), B, T, C, C));
        RUN(OP_attention_bwd,
            ct_attention_backward(m->dev, AV(dB), AV(dqkvr), AV(datt), AV(dvaccum), AV(dA), qkvr,
                                  att, B, T, C, NH));
        RUN(OP_matmul_qkv_bwd,
            ct_matmul_backward(m->dev, AV(dA), GL(qkvw, l),
                               GL(qkvb, l), AV(dB), ln1,
                               PL(qkvw, l), B, T, C, 3 * C));
        RUN(OP_layernorm_bwd,
            ct_layernorm_backward(m->dev, AV(dres), GL(ln1w, l),
                                  GL(ln1b, l), AV(dA), res, PL(ln1w, l),
                                  ct_view_at(AV(ln1m), l * lBT), ct_view_at(AV(ln1r), l * lBT), B,
                                  T, C, 1));
        if (m->hook && (st = m->hook(m->hook_user, m, ct_model_layer_begin(m, l))) != CT_OK)
            goto cleanup;
    }
    RUN(OP_encoder_bwd,
        ct_encoder_backward(m->dev, GV(wte), GV(wpe), AV(dres), AV(tokens), B, T, C, Vp));
    if (m->hook && (st = m->hook(m->hook_user, m, 0)) != CT_OK) goto cleanup;
cleanup:
    return dev_fail(m, st, "ct_model_backward");
}

ct_status ct_model_grad_norm(ct_model *m, float *norm) {
    ct_status st = CT_OK;
    if (m->layout.zero >= 2) return no_full_grads(m, "ct_model_grad_norm");
    cl_mem am = ct_buffer_mem(m->acts);
    ct_view partials = AV(partials);
    RUN(OP_grad_norm, ct_global_norm_forward(m->dev, AV(norm), partials,
                                             ct_view_of(ct_buffer_mem(m->grads), 0), m->nparams));
    RUN(OP_readback, ct_buffer_read(m->acts, m->a.norm * sizeof(float), norm, sizeof *norm));
cleanup:
    return dev_fail(m, st, "ct_model_grad_norm");
}

/* given: the global gradient norm computed elsewhere (ZeRO-2: over the shards), or NULL. */
static ct_status adamw(ct_model *m, float lr, float beta1, float beta2, float eps,
                       float weight_decay, float grad_clip, int t, const float *given,
                       float *norm_out) {
    ct_status st = CT_OK;
    cl_mem am = ct_buffer_mem(m->acts), pm = ct_buffer_mem(m->pshard ? m->pshard : m->params);
    cl_mem gm = ct_buffer_mem(m->gshard ? m->gshard : m->grads), mm = ct_buffer_mem(m->adam_m);
    size_t p0 = m->pshard ? m->shard_lo : 0;
    cl_mem vm = ct_buffer_mem(m->adam_v);
    size_t g0 = m->gshard ? m->shard_lo : 0; /* flat offset of the gradient buffer's start */
    int need_norm = grad_clip > 0.0f || norm_out;
    if (need_norm && given)
        RUN(OP_upload, ct_buffer_write(m->acts, m->a.norm * sizeof(float), given, sizeof(float)));
    else if (need_norm)
        RUN(OP_grad_norm, ct_global_norm_forward(m->dev, AV(norm), AV(partials),
                                                 ct_view_of(gm, 0), m->nparams));
    /* One update per (tensor, layer) slice, clipped to this worker's shard [lo, hi); Adam m and
     * v hold only the shard (index o - lo). Element-wise, so slicing changes no result. */
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        int nl = is_block(i) ? m->cfg.layers : 1;
        size_t cnt = m->sizes[i] / (size_t)nl;
        for (int l = 0; l < nl; l++) {
            size_t a = foff(m, i, l), b = a + cnt;
            if (a < m->shard_lo) a = m->shard_lo;
            if (b > m->shard_hi) b = m->shard_hi;
            if (a >= b) continue;
            size_t mo = a - m->shard_lo;
            RUN(OP_adamw,
                ct_adamw_update(m->dev, ct_view_of(pm, a - p0), ct_view_of(gm, a - g0), ct_view_of(mm, mo),
                                ct_view_of(vm, mo), need_norm ? AV(norm) : ct_view_none(),
                                grad_clip, b - a, lr, beta1, beta2, eps,
                                ct_model_tensor_decays(i) ? weight_decay : 0.0f, t));
        }
    }
    if (norm_out)
        RUN(OP_readback, ct_buffer_read(m->acts, m->a.norm * sizeof(float), norm_out, sizeof(float)));
    m->fwd_valid = 0;
cleanup:
    return dev_fail(m, st, "ct_model_adamw_step");
}

ct_status ct_model_adamw_step(ct_model *m, float lr, float beta1, float beta2, float eps,
                              float weight_decay, float grad_clip, int t, float *norm_out) {
    if (m->gshard && (grad_clip > 0.0f || norm_out))
        return CT_ERR(&m->err, CT_ERR_STATE,
                      "ct_model_adamw_step: under ZeRO-2 the norm spans every worker's shard: use "
                      "ct_model_adamw_step_norm");
    return adamw(m, lr, beta1, beta2, eps, weight_decay, grad_clip, t, NULL, norm_out);
}

ct_status ct_model_adamw_step_norm(ct_model *m, float lr, float beta1, float beta2, float eps,
                                   float weight_decay, float grad_clip, int t, float norm) {
    return adamw(m, lr, beta1, beta2, eps, weight_decay, grad_clip, t, &norm, NULL);
}

/* ------------------------------------------------------------------ profiling */

void ct_model_profile_enable(ct_model *m, int on) { m->profile = on != 0; }

void ct_model_profile_reset(ct_model *m) {
    memset(m->prof_ms, 0, sizeof m->prof_ms);
    memset(m->prof_calls, 0, sizeof m->prof_calls);
}

int ct_model_profile_get(const ct_model *m, ct_model_op_time *out, int max) {
    int n = 0;
    for (int i = 0; i < OP__COUNT && n < max; i++)
        if (m->prof_calls[i] > 0) {
            out[n].name = op_names[i];
            out[n].ms = m->prof_ms[i];
            out[n].calls = m->prof_calls[i];
            n++;
        }
    return n;
}
