/* params_copy.c - a worker's parameters between the table and its flat layout (ct_params_pieces,
 * table <-> flat), host copies of its device arrays (whole or the shard), zeroing the gradients,
 * and the random initialisation (see ct_engine_params.h; the layout is params.c's). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_rng.h"
#include "params_impl.h"

/* ------------------------------------------------------------------ table <-> flat */

/* The runs of one (rows, cols) slice of tensor i (info t, table offset tb) that this TP rank
 * holds, at flat offset fb on: row splits by sections (ct_gpt_split_sections) */
static int split_pieces(const ct_params *P, int i, const ct_gpt_tensor_info *t, size_t tb,
                        size_t fb, ct_params_piece_fn fn, void *user) {
    size_t r = (size_t)P->tr, n = (size_t)P->tp;
    switch (t->split) {
    case CT_SPLIT_QKV:
    case CT_SPLIT_COL:
    case CT_SPLIT_VOCAB: {
        size_t sec[3], at = 0;
        int ns = t->split == CT_SPLIT_VOCAB ? (sec[0] = t->rows, 1)
                                            : ct_gpt_split_sections(&P->cfg, i, t->rows, sec);
        if (n == 1) return fn(user, tb, fb, t->rows * t->cols);
        for (int s = 0; s < ns; s++) {
            size_t per = sec[s] / n * t->cols;
            int rc = fn(user, tb + at * t->cols + r * per, fb, per);
            if (rc) return rc;
            at += sec[s], fb += per;
        }
        return 0;
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

int ct_params_pieces(const ct_params *P, int i, int l, ct_params_piece_fn fn, void *user) {
    const ct_gpt_tensor_info *t = &P->t[i];
    size_t one = t->rows * t->cols; /* one slice in table order */
    size_t tb = P->toff[i] + (t->per_layer ? (size_t)l * (size_t)t->experts * one : 0);
    size_t fb = ct_params_flat_off(P, i, l);
    if (!t->expert) return split_pieces(P, i, t, tb, fb, fn, user);
    /* this worker's experts of block l, each split over TP as a dense tensor would be */
    size_t per = P->slen[i] / (size_t)(P->nel ? P->nel : 1);
    for (int e = 0; e < P->nel; e++) {
        int rc = split_pieces(P, i, t, tb + (size_t)(P->el0 + e) * one, fb + (size_t)e * per, fn,
                              user);
        if (rc) return rc;
    }
    return 0;
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
    if (P->xpad > P->xlen) memset(flat + P->xlen, 0, (P->xpad - P->xlen) * sizeof(float));
    if (P->flat > P->local_len)
        memset(flat + P->local_len, 0, (P->flat - P->local_len) * sizeof(float));
}

void ct_params_flat_to_table(const ct_params *P, const float *flat, float *table) {
    copy_ctx c = {flat, table, 0};
    FOR_HELD(P, i, l) ct_params_pieces(P, i, l, copy_piece, &c);
}

/* ------------------------------------------------------------------ host copies */

/* Buffer b holds the flat runs [lo[k], hi[k]) one after another: writes set them (from the
 * whole table-order array), reads fill only those runs' pieces of the table-order array. */
static ct_status copy_runs(ct_params *P, ct_arena *b, int nr, const size_t *lo, const size_t *hi,
                           const float *src, float *dst, size_t n, const char *what) {
    if (n != P->nparams)
        return CT_ERR(&P->err, CT_ERR_ARG, "%s: %zu floats given, the model has %zu", what, n,
                      P->nparams);
    float *flat = ct_malloc(P->flat * sizeof(float));
    if (!flat) return CT_ERR(&P->err, CT_ERR_NOMEM, "%s: out of host memory", what);
    ct_status st = CT_OK;
    size_t at = 0, cover = 0;
    for (int k = 0; k < nr; k++) cover += hi[k] - lo[k];
    if (src) {
        ct_params_table_to_flat(P, src, flat);
        for (int k = 0; k < nr && st == CT_OK; k++) {
            st = ct_arena_write(b, at * sizeof(float), flat + lo[k], (hi[k] - lo[k]) * sizeof(float));
            at += hi[k] - lo[k];
        }
    } else {
        if (cover < P->flat) ct_params_table_to_flat(P, dst, flat);
        for (int k = 0; k < nr && st == CT_OK; k++) {
            st = ct_arena_read(b, at * sizeof(float), flat + lo[k], (hi[k] - lo[k]) * sizeof(float));
            at += hi[k] - lo[k];
        }
        if (st == CT_OK) ct_params_flat_to_table(P, flat, dst);
    }
    free(flat);
    if (st != CT_OK) CT_ERR(&P->err, st, "%s: %s", what, ct_device_errmsg(P->dev));
    return st;
}
static ct_status copy_flat(ct_params *P, ct_arena *b, const float *src, float *dst, size_t n,
                           const char *what) {
    size_t lo = 0, hi = P->flat;
    return copy_runs(P, b, 1, &lo, &hi, src, dst, n, what);
}
static ct_status copy_shard(ct_params *P, ct_arena *b, const float *src, float *dst, size_t n,
                            const char *what) {
    return copy_runs(P, b, P->nsh, P->shlo, P->shhi, src, dst, n, what);
}

ct_status ct_params_set(ct_params *P, const float *h, size_t n) {
    if (P->pshard) return copy_shard(P, P->pshard, h, NULL, n, "set_params");
    return copy_flat(P, P->params, h, NULL, n, "set_params");
}
ct_status ct_params_get(ct_params *P, float *h, size_t n) {
    if (P->pshard) return copy_shard(P, P->pshard, NULL, h, n, "get_params");
    return copy_flat(P, P->params, NULL, h, n, "get_params");
}
static ct_status no_full_grads(ct_params *P, const char *what) {
    return CT_ERR(&P->err, CT_ERR_STATE,
                  "%s: under ZeRO-2 no worker holds the whole gradient (only its shard)", what);
}
ct_status ct_params_set_grads(ct_params *P, const float *h, size_t n) {
    if (P->gshard) return no_full_grads(P, "set_grads");
    return copy_flat(P, P->grads, h, NULL, n, "set_grads");
}
ct_status ct_params_get_grads(ct_params *P, float *h, size_t n) {
    if (P->gshard) return no_full_grads(P, "get_grads");
    return copy_flat(P, P->grads, NULL, h, n, "get_grads");
}
ct_status ct_params_set_optimizer(ct_params *P, const float *am, const float *av, size_t n) {
    ct_status st = CT_OK;
    if (am) st = copy_shard(P, P->adam_m, am, NULL, n, "set_optimizer (m)");
    if (st == CT_OK && av) st = copy_shard(P, P->adam_v, av, NULL, n, "set_optimizer (v)");
    return st;
}
ct_status ct_params_get_optimizer(ct_params *P, float *am, float *av, size_t n) {
    ct_status st = CT_OK;
    if (am) st = copy_shard(P, P->adam_m, NULL, am, n, "get_optimizer (m)");
    if (st == CT_OK && av) st = copy_shard(P, P->adam_v, NULL, av, n, "get_optimizer (v)");
    return st;
}

ct_status ct_params_zero_grads(ct_params *P) {
    ct_status st = ct_arena_zero(P->grads, 0, ct_arena_bytes(P->grads));
    if (st != CT_OK) CT_ERR(&P->err, st, "zero_grad: %s", ct_device_errmsg(P->dev));
    if (P->wwin) memset(P->whost, 0, P->slen[CT_GPT_wte] * sizeof(float));
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
    if (st == CT_OK) st = ct_arena_zero(P->adam_m, 0, P->opt_len * sizeof(float));
    if (st == CT_OK) st = ct_arena_zero(P->adam_v, 0, P->opt_len * sizeof(float));
    if (st != CT_OK && !P->err.msg[0]) CT_ERR(&P->err, st, "init: %s", ct_device_errmsg(P->dev));
    return st;
}
