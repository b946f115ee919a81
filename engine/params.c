/* params.c - one worker's parameter layout (see ct_engine_params.h): which tensors, layers and
 * TP slices it holds, their places in the flat and working buffers, the four device buffers,
 * table <-> flat copies and the initialisation. No layer math here (model.c) and no
 * communication (grads.c, zero.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_params.h"
#include "ct_engine_train.h"

struct ct_params {
    ct_gpt_config cfg;
    ct_layout lay;
    ct_coords at;
    ct_device *dev;
    int tp, tr; /* TP size and rank */
    ct_gpt_tensor_info t[CT_GPT_NUM_TENSORS];
    size_t toff[CT_GPT_NUM_TENSORS]; /* offset of the whole tensor in table order */
    size_t tsize[CT_GPT_NUM_TENSORS]; /* floats of the whole tensor (all layers) */
    size_t slen[CT_GPT_NUM_TENSORS];  /* floats of this worker's slice of one (tensor, layer) */
    int nchunks, clo[CT_MAX_CHUNKS], chi[CT_MAX_CHUNKS];
    int *local;   /* [L]: position of block l among the held blocks, or -1 */
    int nheld;    /* held blocks */
    int embed, head;
    /* flat layout: [wte? | wpe? | held blocks (lstride each) | lnfw lnfb?] */
    size_t foff[CT_GPT_NUM_TENSORS]; /* non-block tensors: flat offset; block tensors: offset
                                        within a block */
    size_t lbase, lstride, lnf_lo, local_len, flat, lo, hi, opt_len, wlen, nparams;
    ct_buffer *params, *pshard, *grads, *gshard, *adam_m, *adam_v;
    ct_err err;
};

static int is_block(int i) { return i >= CT_GPT_ln1w && i <= CT_GPT_fcprojb; }

/* Floats of rank r's slice of one (rows, cols) slice of a tensor split `s` over tp. */
static size_t slice_len(const ct_gpt_tensor_info *t, int tp) {
    switch (t->split) {
    case CT_SPLIT_QKV:
    case CT_SPLIT_COL:
    case CT_SPLIT_VOCAB: return t->rows / (size_t)tp * t->cols;
    case CT_SPLIT_ROW: return t->rows * (t->cols / (size_t)tp);
    default: return t->rows * t->cols;
    }
}

static int holds(const ct_params *P, int i) {
    if (i == CT_GPT_wte) return P->embed || P->head;
    if (i == CT_GPT_wpe) return P->embed;
    if (i == CT_GPT_lnfw || i == CT_GPT_lnfb) return P->head;
    return P->nheld > 0;
}

/* The device buffers of this worker's layout, in allocation order: what ct_params_create
 * allocates and what the memory model (ct_engine_mem.h) counts, from this one table. Under
 * ZeRO-3 the parameters are a working buffer (workspace) plus the shard (params); under ZeRO >= 2
 * the gradients likewise; Adam m and v hold the optimizer shard. dst (may be NULL) receives
 * where each buffer's handle goes. */
static int buffer_table(ct_params *P, ct_params_buf *b, ct_buffer ***dst) {
    size_t pb = P->flat * sizeof(float), ob = P->opt_len * sizeof(float);
    size_t wb = P->wlen * sizeof(float);
    int z2 = P->lay.zero >= 2, z3 = P->lay.zero >= 3, n = 0;
#define BUF(cat, nm, by, where)                                                                  \
    do {                                                                                         \
        b[n].category = (cat), b[n].name = (nm), b[n].bytes = (by);                              \
        if (dst) dst[n] = (where);                                                               \
        n++;                                                                                     \
    } while (0)
    BUF(z3 ? CT_MEM_WORKSPACE : CT_MEM_PARAMS, z3 ? "parameter working buffer" : "params",
        z3 ? wb : pb, &P->params);
    if (z3) BUF(CT_MEM_PARAMS, "parameter shard", ob, &P->pshard);
    BUF(z2 ? CT_MEM_WORKSPACE : CT_MEM_GRADS, z2 ? "gradient working buffer" : "grads",
        z2 ? wb : pb, &P->grads);
    if (z2) BUF(CT_MEM_GRADS, "gradient shard", ob, &P->gshard);
    BUF(CT_MEM_OPTIMIZER, "adam_m", ob, &P->adam_m);
    BUF(CT_MEM_OPTIMIZER, "adam_v", ob, &P->adam_v);
#undef BUF
    return n;
}

int ct_params_buffers(const ct_params *P, ct_params_buf out[CT_PARAMS_MAX_BUFFERS]) {
    return buffer_table((ct_params *)P, out, NULL);
}

ct_status ct_params_create(ct_params **out, const ct_gpt_config *cfg, const ct_layout *layout,
                           const ct_coords *coords, const ct_params_plan *plan, ct_device *dev,
                           ct_err *err) {
    ct_status st = CT_OK;
    *out = NULL;
    int L = cfg->layers, tp = layout->tp < 1 ? 1 : layout->tp;
    if (cfg->channels % tp || (cfg->heads % tp) || cfg->padded_vocab % tp)
        return CT_ERR(err, CT_ERR_ARG,
                      "tp = %d must divide the heads (%d), the channels (%d) and the padded "
                      "vocabulary (%d)",
                      tp, cfg->heads, cfg->channels, cfg->padded_vocab);
    ct_params *P = ct_calloc(1, sizeof *P);
    if (!P || !(P->local = ct_malloc(sizeof(int) * (size_t)L))) {
        free(P);
        return CT_ERR(err, CT_ERR_NOMEM, "ct_params_create: out of host memory");
    }
    P->cfg = *cfg;
    P->lay = *layout;
    P->at = *coords;
    P->dev = dev;
    P->tp = tp;
    P->tr = coords->tp_rank;
    /* chunks */
    if (!plan || plan->nchunks == 0) {
        P->nchunks = 1, P->clo[0] = 0, P->chi[0] = L;
    } else {
        P->nchunks = plan->nchunks;
        for (int k = 0; k < plan->nchunks; k++) {
            int lo = plan->lo[k], hi = plan->hi[k];
            if (k >= CT_MAX_CHUNKS || lo < (k ? plan->hi[k - 1] : 0) || hi <= lo || hi > L) {
                ct_params_free(P);
                return CT_ERR(err, CT_ERR_ARG,
                              "ct_params_create: chunk %d [%d, %d) is not an increasing range of "
                              "the %d layers",
                              k, lo, hi, L);
            }
            P->clo[k] = lo, P->chi[k] = hi;
        }
    }
    for (int l = 0; l < L; l++) P->local[l] = -1;
    for (int k = 0; k < P->nchunks; k++)
        for (int l = P->clo[k]; l < P->chi[k]; l++) P->local[l] = P->nheld++;
    P->embed = layout->pp <= 1 || coords->pp_rank == 0;
    P->head = layout->pp <= 1 || coords->pp_rank == layout->pp - 1;
    /* the table */
    size_t o = 0;
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        P->t[i] = ct_gpt_tensor(cfg, i);
        P->tsize[i] = (P->t[i].per_layer ? (size_t)L : 1) * P->t[i].rows * P->t[i].cols;
        P->toff[i] = o;
        o += P->tsize[i];
        P->slen[i] = slice_len(&P->t[i], tp);
    }
    P->nparams = o;
    /* the flat layout */
    o = 0;
    P->foff[CT_GPT_wte] = o, o += holds(P, CT_GPT_wte) ? P->slen[CT_GPT_wte] : 0;
    P->foff[CT_GPT_wpe] = o, o += holds(P, CT_GPT_wpe) ? P->slen[CT_GPT_wpe] : 0;
    P->lbase = o;
    P->lstride = 0;
    for (int i = CT_GPT_ln1w; i <= CT_GPT_fcprojb; i++) P->foff[i] = P->lstride, P->lstride += P->slen[i];
    o += P->lstride * (size_t)P->nheld;
    P->lnf_lo = o;
    P->foff[CT_GPT_lnfw] = o, o += P->head ? P->slen[CT_GPT_lnfw] : 0;
    P->foff[CT_GPT_lnfb] = o, o += P->head ? P->slen[CT_GPT_lnfb] : 0;
    P->local_len = o;
    int N = layout->dp < 1 ? 1 : layout->dp;
    if (layout->zero >= 1) {
        size_t sh = (o + (size_t)N - 1) / (size_t)N;
        P->flat = sh * (size_t)N;
        P->lo = sh * (size_t)coords->dp_rank;
        P->hi = P->lo + sh;
    } else {
        P->flat = o, P->lo = 0, P->hi = o;
    }
    P->opt_len = P->hi - P->lo;
    /* working buffer: [embeddings | slot 0 | slot 1 | lnf] */
    int slots = P->nheld < 2 ? P->nheld : 2;
    P->wlen = P->lbase + (size_t)slots * P->lstride + (P->local_len - P->lnf_lo);
    if (!dev) { /* the layout only: what the memory model reads (ct_params_buffers) */
        *out = P;
        return CT_OK;
    }
    ct_params_buf bufs[CT_PARAMS_MAX_BUFFERS];
    ct_buffer **dst[CT_PARAMS_MAX_BUFFERS];
    int nb = buffer_table(P, bufs, dst);
    for (int k = 0; k < nb; k++)
        if ((st = ct_buffer_alloc(dev, bufs[k].category, bufs[k].name, bufs[k].bytes, dst[k])) !=
            CT_OK) {
            CT_ERR(err, st, "%s", ct_device_errmsg(dev));
            ct_params_free(P);
            return st;
        }
    *out = P;
    return CT_OK;
}

void ct_params_free(ct_params *P) {
    if (!P) return;
    ct_buffer_free(P->params);
    ct_buffer_free(P->pshard);
    ct_buffer_free(P->grads);
    ct_buffer_free(P->gshard);
    ct_buffer_free(P->adam_m);
    ct_buffer_free(P->adam_v);
    free(P->local);
    free(P);
}

const char *ct_params_errmsg(const ct_params *P) { return P->err.msg; }
const ct_gpt_config *ct_params_config(const ct_params *P) { return &P->cfg; }
const ct_layout *ct_params_layout(const ct_params *P) { return &P->lay; }
const ct_coords *ct_params_coords(const ct_params *P) { return &P->at; }
ct_device *ct_params_device(const ct_params *P) { return P->dev; }
int ct_params_holds_layer(const ct_params *P, int l) {
    return l >= 0 && l < P->cfg.layers && P->local[l] >= 0;
}
int ct_params_has_embed(const ct_params *P) { return P->embed; }
int ct_params_has_head(const ct_params *P) { return P->head; }
int ct_params_holds(const ct_params *P, int i) { return holds(P, i); }
int ct_params_nchunks(const ct_params *P) { return P->nchunks; }
void ct_params_chunk(const ct_params *P, int k, int *lo, int *hi) {
    if (lo) *lo = P->clo[k];
    if (hi) *hi = P->chi[k];
}
size_t ct_params_num_params(const ct_params *P) { return P->nparams; }
size_t ct_params_local_len(const ct_params *P) { return P->local_len; }
size_t ct_params_flat_len(const ct_params *P) { return P->flat; }
void ct_params_shard(const ct_params *P, size_t *lo, size_t *hi) {
    if (lo) *lo = P->lo;
    if (hi) *hi = P->hi;
}
int ct_params_zero_stage(const ct_params *P) { return P->lay.zero; }
ct_buffer *ct_params_buffer(ct_params *P) { return P->params; }
ct_buffer *ct_params_param_shard(ct_params *P) { return P->pshard; }
ct_buffer *ct_params_grads(ct_params *P) { return P->grads; }
ct_buffer *ct_params_grad_shard(ct_params *P) { return P->gshard; }
ct_buffer *ct_params_adam_m(ct_params *P) { return P->adam_m; }
ct_buffer *ct_params_adam_v(ct_params *P) { return P->adam_v; }
size_t ct_params_slice_len(const ct_params *P, int i) { return P->slen[i]; }

size_t ct_params_flat_off(const ct_params *P, int i, int l) {
    if (!is_block(i)) return P->foff[i];
    return P->lbase + (size_t)P->local[l] * P->lstride + P->foff[i];
}

size_t ct_params_layer_begin(const ct_params *P, int l) {
    if (l < 0) l = 0;
    while (l < P->cfg.layers && P->local[l] < 0) l++;
    if (l >= P->cfg.layers) return P->lnf_lo;
    return P->lbase + (size_t)P->local[l] * P->lstride;
}
size_t ct_params_layer_end(const ct_params *P, int l) {
    return ct_params_layer_begin(P, l) + (ct_params_holds_layer(P, l) ? P->lstride : 0);
}
void ct_params_lnf_range(const ct_params *P, size_t *lo, size_t *hi) {
    *lo = P->lnf_lo;
    *hi = P->local_len;
}
void ct_params_wte_range(const ct_params *P, size_t *lo, size_t *hi) {
    *lo = P->foff[CT_GPT_wte];
    *hi = *lo + (holds(P, CT_GPT_wte) ? P->slen[CT_GPT_wte] : 0);
}

size_t ct_params_work_off(const ct_params *P, size_t f) {
    if (f < P->lbase) return f;
    if (f >= P->lnf_lo) {
        int slots = P->nheld < 2 ? P->nheld : 2;
        return P->lbase + (size_t)slots * P->lstride + (f - P->lnf_lo);
    }
    size_t k = (f - P->lbase) / P->lstride; /* local block index */
    return P->lbase + (k % 2) * P->lstride + (f - P->lbase - k * P->lstride);
}
size_t ct_params_work_len(const ct_params *P) { return P->wlen; }

size_t ct_params_pview(const ct_params *P, int i, int l) {
    size_t f = ct_params_flat_off(P, i, l);
    return P->lay.zero >= 3 ? ct_params_work_off(P, f) : f;
}
size_t ct_params_gview(const ct_params *P, int i, int l) {
    size_t f = ct_params_flat_off(P, i, l);
    return P->lay.zero >= 2 ? ct_params_work_off(P, f) : f;
}

/* ------------------------------------------------------------------ table <-> flat */

int ct_params_pieces(const ct_params *P, int i, int l, ct_params_piece_fn fn, void *user) {
    const ct_gpt_tensor_info *t = &P->t[i];
    size_t tb = P->toff[i] + (t->per_layer ? (size_t)l * t->rows * t->cols : 0);
    size_t fb = ct_params_flat_off(P, i, l);
    size_t r = (size_t)P->tr, n = (size_t)P->tp;
    switch (t->split) {
    case CT_SPLIT_QKV: {
        /* three sections (Q, K, V) of rows/3 rows each: this rank's rows of each */
        size_t sec = t->rows / 3, per = sec / n * t->cols;
        if (n == 1) return fn(user, tb, fb, t->rows * t->cols);
        for (size_t s = 0; s < 3; s++) {
            int rc = fn(user, tb + (s * sec) * t->cols + r * per, fb + s * per, per);
            if (rc) return rc;
        }
        return 0;
    }
    case CT_SPLIT_COL:
    case CT_SPLIT_VOCAB: {
        size_t per = t->rows / n * t->cols;
        return fn(user, tb + r * per, fb, per);
    }
    case CT_SPLIT_ROW: {
        size_t w = t->cols / n;
        if (n == 1) return fn(user, tb, fb, t->rows * t->cols);
        for (size_t row = 0; row < t->rows; row++) {
            int rc = fn(user, tb + row * t->cols + r * w, fb + row * w, w);
            if (rc) return rc;
        }
        return 0;
    }
    default: return fn(user, tb, fb, t->rows * t->cols);
    }
}

typedef struct copy_ctx {
    const float *src;
    float *dst;
    int to_flat;
} copy_ctx;

static int copy_piece(void *user, size_t toff, size_t foff, size_t n) {
    copy_ctx *c = (copy_ctx *)user;
    if (c->to_flat) memcpy(c->dst + foff, c->src + toff, n * sizeof(float));
    else memcpy(c->dst + toff, c->src + foff, n * sizeof(float));
    return 0;
}

/* Every held (tensor, layer). */
#define FOR_HELD(P, i, l)                                                                          \
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++)                                                   \
        if (holds(P, i))                                                                           \
            for (int l = 0; l < (is_block(i) ? (P)->cfg.layers : 1); l++)                          \
                if (!is_block(i) || (P)->local[l] >= 0)

void ct_params_table_to_flat(const ct_params *P, const float *table, float *flat) {
    copy_ctx c = {table, flat, 1};
    FOR_HELD(P, i, l) ct_params_pieces(P, i, l, copy_piece, &c);
    if (P->flat > P->local_len)
        memset(flat + P->local_len, 0, (P->flat - P->local_len) * sizeof(float));
}

void ct_params_flat_to_table(const ct_params *P, const float *flat, float *table) {
    copy_ctx c = {flat, table, 0};
    FOR_HELD(P, i, l) ct_params_pieces(P, i, l, copy_piece, &c);
}

/* ------------------------------------------------------------------ host copies */

/* Buffer b holds flat range [lo, lo + blen): writes set that range (from the whole table-order
 * array), reads fill only that range's pieces of the table-order array. */
static ct_status copy_flat(ct_params *P, ct_buffer *b, size_t lo, size_t blen, const float *src,
                           float *dst, size_t n, const char *what) {
    if (n != P->nparams)
        return CT_ERR(&P->err, CT_ERR_ARG, "%s: %zu floats given, the model has %zu", what, n,
                      P->nparams);
    float *flat = ct_malloc(P->flat * sizeof(float));
    if (!flat) return CT_ERR(&P->err, CT_ERR_NOMEM, "%s: out of host memory", what);
    ct_status st = CT_OK;
    if (src) {
        ct_params_table_to_flat(P, src, flat);
        st = ct_buffer_write(b, 0, flat + lo, blen * sizeof(float));
    } else {
        if (lo > 0 || blen < P->flat) ct_params_table_to_flat(P, dst, flat);
        st = ct_buffer_read(b, 0, flat + lo, blen * sizeof(float));
        if (st == CT_OK) ct_params_flat_to_table(P, flat, dst);
    }
    free(flat);
    if (st != CT_OK) CT_ERR(&P->err, st, "%s: %s", what, ct_device_errmsg(P->dev));
    return st;
}

ct_status ct_params_set(ct_params *P, const float *h, size_t n) {
    if (P->pshard) return copy_flat(P, P->pshard, P->lo, P->opt_len, h, NULL, n, "set_params");
    return copy_flat(P, P->params, 0, P->flat, h, NULL, n, "set_params");
}
ct_status ct_params_get(ct_params *P, float *h, size_t n) {
    if (P->pshard) return copy_flat(P, P->pshard, P->lo, P->opt_len, NULL, h, n, "get_params");
    return copy_flat(P, P->params, 0, P->flat, NULL, h, n, "get_params");
}
static ct_status no_full_grads(ct_params *P, const char *what) {
    return CT_ERR(&P->err, CT_ERR_STATE,
                  "%s: under ZeRO-2 no worker holds the whole gradient (only its shard)", what);
}
ct_status ct_params_set_grads(ct_params *P, const float *h, size_t n) {
    if (P->gshard) return no_full_grads(P, "set_grads");
    return copy_flat(P, P->grads, 0, P->flat, h, NULL, n, "set_grads");
}
ct_status ct_params_get_grads(ct_params *P, float *h, size_t n) {
    if (P->gshard) return no_full_grads(P, "get_grads");
    return copy_flat(P, P->grads, 0, P->flat, NULL, h, n, "get_grads");
}
ct_status ct_params_set_optimizer(ct_params *P, const float *am, const float *av, size_t n) {
    ct_status st = CT_OK;
    if (am) st = copy_flat(P, P->adam_m, P->lo, P->opt_len, am, NULL, n, "set_optimizer (m)");
    if (st == CT_OK && av)
        st = copy_flat(P, P->adam_v, P->lo, P->opt_len, av, NULL, n, "set_optimizer (v)");
    return st;
}
ct_status ct_params_get_optimizer(ct_params *P, float *am, float *av, size_t n) {
    ct_status st = CT_OK;
    if (am) st = copy_flat(P, P->adam_m, P->lo, P->opt_len, NULL, am, n, "get_optimizer (m)");
    if (st == CT_OK && av)
        st = copy_flat(P, P->adam_v, P->lo, P->opt_len, NULL, av, n, "get_optimizer (v)");
    return st;
}

ct_status ct_params_zero_grads(ct_params *P) {
    ct_status st = ct_buffer_zero(P->grads, 0, ct_buffer_bytes(P->grads));
    if (st != CT_OK) CT_ERR(&P->err, st, "zero_grad: %s", ct_device_errmsg(P->dev));
    return st;
}

/* ------------------------------------------------------------------ init */

/* Standard normal number `i` of the stream `seed` (Box-Muller on two counter-based uniforms). */
static double normal_at(uint64_t seed, uint64_t i) {
    uint64_t k = ct_mix64(seed);
    double u1 = ((double)(ct_mix64(k ^ (2 * i)) >> 11) + 1.0) * 0x1.0p-53; /* (0, 1] */
    double u2 = (double)(ct_mix64(k ^ (2 * i + 1)) >> 11) * 0x1.0p-53;     /* [0, 1) */
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

ct_status ct_params_init_random(ct_params *P, uint64_t seed) {
    float *h = ct_malloc(P->nparams * sizeof *h);
    if (!h) return CT_ERR(&P->err, CT_ERR_NOMEM, "init: out of host memory");
    const ct_gpt_config *c = &P->cfg;
    double resid = 0.02 / sqrt(2.0 * c->layers);
    /* Only the pieces this worker holds need values; drawing the whole table keeps the code
     * one loop and costs host time only once per run. */
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        float *p = h + P->toff[i];
        size_t n = P->tsize[i], nrand = n;
        double std = 0.0, fill = 0.0;
        switch (P->t[i].init) {
        case CT_INIT_NORMAL_VOCAB: std = 0.02, nrand = (size_t)c->vocab * c->channels; break;
        case CT_INIT_NORMAL: std = 0.02; break;
        case CT_INIT_RESID: std = resid; break;
        case CT_INIT_ONE: fill = 1.0; break;
        default: break;
        }
        if (!holds(P, i)) continue;
        for (size_t k = 0; k < n; k++)
            p[k] = (std > 0.0 && k < nrand) ? (float)(std * normal_at(seed, P->toff[i] + k))
                                            : (float)(std > 0.0 ? 0.0 : fill);
    }
    ct_status st = ct_params_set(P, h, P->nparams);
    free(h);
    if (st == CT_OK) st = ct_buffer_zero(P->adam_m, 0, P->opt_len * sizeof(float));
    if (st == CT_OK) st = ct_buffer_zero(P->adam_v, 0, P->opt_len * sizeof(float));
    if (st != CT_OK && !P->err.msg[0]) CT_ERR(&P->err, st, "init: %s", ct_device_errmsg(P->dev));
    return st;
}
