/* params.c - one worker's parameter layout (see ct_engine_params.h): which tensors, layers and
 * TP slices it holds, their places in the flat and working buffers, the device arrays (arenas
 * cut between slices), ZeRO-2's wte gradient windows and their host accumulator. The copies and
 * the initialisation are params_copy.c's. No layer math here (model.c) and no communication
 * (grads.c, zero.c). */
#include <stdlib.h>
#include <string.h>

#include "params_impl.h"



/* Floats of rank r's slice of one (rows, cols) slice of a tensor split `s` over tp. */
static size_t split_len(const ct_gpt_tensor_info *t, int tp) {
    switch (t->split) {
    case CT_SPLIT_QKV:
    case CT_SPLIT_COL:
    case CT_SPLIT_VOCAB: return t->rows / (size_t)tp * t->cols;
    case CT_SPLIT_ROW: return t->rows * (t->cols / (size_t)tp);
    default: return t->rows * t->cols;
    }
}


/* How a buffer lays the parameters out: the flat layout, the ZeRO working buffer, or the
 * optimizer's shard (its runs back to back). */
enum { LAYOUT_FLAT, LAYOUT_WORK, LAYOUT_PWORK, LAYOUT_SHARD };

static size_t layout_len(const ct_params *P, int kind) {
    return kind == LAYOUT_FLAT   ? P->flat
           : kind == LAYOUT_WORK  ? P->wlen
           : kind == LAYOUT_PWORK ? P->pwlen
                                  : P->opt_len;
}

/* Where an indivisible part of a buffer starts (floats), and what it holds: tensor i of layer
 * l (i < 0: padding), from its start or (mid) from inside it. */
typedef struct part_start {
    size_t at;
    int i, l, mid;
} part_start;

static int part_cmp(const void *a, const void *b) {
    size_t x = ((const part_start *)a)->at, y = ((const part_start *)b)->at;
    return x < y ? -1 : x > y;
}

/* Room for any layout's part starts: every held slice and padding run, once per shard run. */
static size_t part_cap(const ct_params *P) {
    return 2 * ((size_t)CT_GPT_NUM_TENSORS * (size_t)(P->cfg.layers + 1) + 4);
}

/* The parts of a buffer of layout `kind`, sorted, first at 0: each held (tensor, layer) slice
 * is one part (a kernel reads it through one view, so it must lie in one device buffer), the
 * padding another; the shard's runs cut them where the runs begin. Returns the count, 0 without
 * host memory. */
static size_t part_starts(const ct_params *P, int kind, part_start *out) {
    size_t cap = part_cap(P), nc = 0, n = 0, len = layout_len(P, kind);
    part_start *cut = ct_malloc(cap * sizeof *cut); /* in flat coordinates */
    if (!cut) return 0;
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++)
        if (holds(P, i))
            for (int l = 0; l < (is_block(i) ? P->cfg.layers : 1); l++)
                if ((!is_block(i) || P->local[l] >= 0) && P->slen[i])
                    cut[nc++] =
                        (part_start){ct_params_flat_off(P, i, l), i, is_block(i) ? l : -1, 0};
    if (P->xpad > P->xlen) cut[nc++] = (part_start){P->xlen, -1, -1, 0};
    if (P->flat > P->local_len) cut[nc++] = (part_start){P->local_len, -1, -1, 0};
    qsort(cut, nc, sizeof *cut, part_cmp);
    if (kind == LAYOUT_SHARD && nc) {
        size_t base = 0;
        for (int k = 0; k < P->nsh; base += P->shhi[k] - P->shlo[k], k++) {
            size_t lo = P->shlo[k], hi = P->shhi[k], c = 0;
            while (c + 1 < nc && cut[c + 1].at <= lo) c++; /* the part holding lo */
            out[n] = cut[c], out[n].at = base, out[n++].mid = cut[c].at < lo;
            for (c++; c < nc && cut[c].at < hi; c++)
                out[n] = cut[c], out[n++].at = base + cut[c].at - lo;
        }
    } else {
        for (size_t c = 0; c < nc; c++) {
            out[n] = cut[c];
            if (kind == LAYOUT_WORK) out[n].at = ct_params_work_off(P, cut[c].at);
            if (kind == LAYOUT_PWORK) out[n].at = ct_params_pwork_off(P, cut[c].at);
            /* wte lies in one part: the slots' cuts inside its span are dropped */
            size_t w0, w1;
            ct_params_wte_range(P, &w0, &w1);
            if (kind != LAYOUT_PWORK || out[n].at <= P->pr0 || out[n].at >= P->pr0 + (w1 - w0))
                n++;
        }
    }
    free(cut);
    qsort(out, n, sizeof *out, part_cmp);
    /* the first at 0, none at or past the end, no two at one place (ZeRO's two working slots
     * repeat the same offsets), and each at a whole 64-byte line: a slice then sits at the same
     * alignment in its piece as in one buffer (a kernel or a CLBlast routine may take another
     * path at another alignment); a slice starting inside a line joins the part before it */
    size_t m = 0;
    if (n == 0 || out[0].at != 0) {
        memmove(out + 1, out, n * sizeof *out);
        out[0] = (part_start){0, -1, -1, 0};
        n++;
    }
    for (size_t k = 0; k < n; k++)
        if (k == 0 || (out[k].at != out[m - 1].at && out[k].at < len && out[k].at % 16 == 0))
            out[m++] = out[k];
    return m;
}

/* "fcw of block 3", "wte", "padding", "(part of) ..." */
static void part_name(const ct_params *P, const part_start *p, char *nm, size_t nmsz) {
    if (p->i < 0) snprintf(nm, nmsz, "padding");
    else if (p->l >= 0)
        snprintf(nm, nmsz, "%s%s of block %d", p->mid ? "part of " : "", P->t[p->i].name, p->l);
    else snprintf(nm, nmsz, "%s%s", p->mid ? "part of " : "", P->t[p->i].name);
}

/* Floats of the largest part of a buffer of layout `kind` (what its largest device buffer must
 * hold at least) into *best, the part's name into nm; 0 without host memory. */
static int largest_part(const ct_params *P, int kind, size_t *best, char *nm, size_t nmsz) {
    part_start *ps = ct_malloc(part_cap(P) * sizeof *ps);
    size_t n = ps ? part_starts(P, kind, ps) : 0, len = layout_len(P, kind), bi = 0;
    *best = 0;
    for (size_t k = 0; k < n; k++) {
        size_t e = k + 1 < n ? ps[k + 1].at : len;
        if (e - ps[k].at > *best) *best = e - ps[k].at, bi = k;
    }
    if (n) part_name(P, &ps[bi], nm, nmsz);
    free(ps);
    return n > 0;
}

/* Allocate one buffer of layout `kind` as an arena whose pieces hold whole parts. */
static ct_status alloc_layout(ct_params *P, ct_mem_category cat, const char *name, int kind,
                              ct_arena **out) {
    size_t cap = part_cap(P), len = layout_len(P, kind);
    part_start *ps = ct_malloc(cap * sizeof *ps);
    size_t *at = ct_malloc(cap * sizeof *at);
    char *nmbuf = ct_malloc(cap * 48);
    const char **names = ct_malloc(cap * sizeof *names);
    ct_status st = CT_OK;
    if (!ps || !at || !nmbuf || !names) {
        st = CT_ERR(&P->err, CT_ERR_NOMEM, "allocating '%s': out of host memory", name);
    } else {
        size_t n = part_starts(P, kind, ps);
        if (n == 0) {
            st = CT_ERR(&P->err, CT_ERR_NOMEM, "allocating '%s': out of host memory", name);
            goto done;
        }
        for (size_t k = 0; k < n; k++) {
            at[k] = ps[k].at * sizeof(float);
            part_name(P, &ps[k], nmbuf + 48 * k, 48);
            names[k] = nmbuf + 48 * k;
        }
        st = ct_arena_alloc(P->dev, cat, name, len * sizeof(float), at, names, n, out);
        if (st != CT_OK) CT_ERR(&P->err, st, "%s", ct_device_errmsg(P->dev));
    }
done:
    free(ps);
    free(at);
    free(nmbuf);
    free(names);
    return st;
}

/* The device buffers of this worker's layout, in allocation order: what ct_params_create
 * allocates and what the memory model (ct_engine_mem.h) counts, from this one table. Under
 * ZeRO-3 the parameters are a working buffer (workspace) plus the shard (params); under ZeRO >= 2
 * the gradients likewise; Adam m and v hold the optimizer shard. dst (may be NULL) receives
 * where each buffer's handle goes, kinds (may be NULL) each one's layout. */
static int buffer_table(ct_params *P, ct_params_buf *b, ct_arena ***dst, int *kinds) {
    int z2 = P->lay.zero >= 2, z3 = P->lay.zero >= 3, n = 0;
#define BUF(cat, nm, kind, where)                                                                \
    do {                                                                                         \
        b[n].category = (cat), b[n].name = (nm);                                                 \
        b[n].bytes = layout_len(P, kind) * sizeof(float);                                        \
        if (dst) dst[n] = (where);                                                               \
        if (kinds) kinds[n] = (kind);                                                            \
        n++;                                                                                     \
    } while (0)
    BUF(z3 ? CT_MEM_WORKSPACE : CT_MEM_PARAMS, z3 ? "parameter working buffer" : "params",
        z3 ? LAYOUT_PWORK : LAYOUT_FLAT, &P->params);
    if (z3) BUF(CT_MEM_PARAMS, "parameter shard", LAYOUT_SHARD, &P->pshard);
    BUF(z2 ? CT_MEM_WORKSPACE : CT_MEM_GRADS, z2 ? "gradient working buffer" : "grads",
        z2 ? LAYOUT_WORK : LAYOUT_FLAT, &P->grads);
    if (z2) BUF(CT_MEM_GRADS, "gradient shard", LAYOUT_SHARD, &P->gshard);
    BUF(CT_MEM_OPTIMIZER, "adam_m", LAYOUT_SHARD, &P->adam_m);
    BUF(CT_MEM_OPTIMIZER, "adam_v", LAYOUT_SHARD, &P->adam_v);
#undef BUF
    return n;
}

int ct_params_held(const ct_params *P, int *nbuffers, size_t *largest) {
    ct_params_buf b[CT_PARAMS_MAX_BUFFERS];
    ct_arena **dst[CT_PARAMS_MAX_BUFFERS];
    int n = buffer_table((ct_params *)P, b, dst, NULL), nb = 0;
    size_t big = 0;
    for (int k = 0; k < n; k++) {
        const ct_arena *a = *dst[k];
        if (!a) continue;
        nb += ct_arena_npieces(a);
        if (ct_arena_largest_piece(a) > big) big = ct_arena_largest_piece(a);
    }
    if (nbuffers) *nbuffers = nb;
    if (largest) *largest = big;
    return n;
}

int ct_params_buffers(const ct_params *P, ct_params_buf out[CT_PARAMS_MAX_BUFFERS]) {
    int kinds[CT_PARAMS_MAX_BUFFERS];
    int n = buffer_table((ct_params *)P, out, NULL, kinds);
    for (int k = 0; k < n; k++) {
        size_t f = 0;
        if (!largest_part(P, kinds[k], &f, out[k].largest_name, sizeof out[k].largest_name))
            return -1;
        out[k].largest = f * sizeof(float);
    }
    return n;
}

ct_status ct_params_create(ct_params **out, const ct_gpt_config *cfg, const ct_layout *layout,
                           const ct_coords *coords, const ct_params_plan *plan, ct_device *dev,
                           ct_err *err) {
    ct_status st = CT_OK;
    *out = NULL;
    int L = cfg->layers, tp = layout->tp < 1 ? 1 : layout->tp, ep = layout->ep < 1 ? 1 : layout->ep;
    int dp = layout->dp < 1 ? 1 : layout->dp;
    if (cfg->channels % tp || (cfg->heads % tp) || cfg->padded_vocab % tp)
        return CT_ERR(err, CT_ERR_ARG,
                      "tp = %d must divide the heads (%d), the channels (%d) and the padded "
                      "vocabulary (%d)",
                      tp, cfg->heads, cfg->channels, cfg->padded_vocab);
    if (cfg->experts < 0 || (ep > 1 && (cfg->experts % ep || dp % ep)))
        return CT_ERR(err, CT_ERR_ARG,
                      "expert parallelism: ep = %d must divide the experts (%d) and dp (%d)", ep,
                      cfg->experts, dp);
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
    P->nel = cfg->experts > 0 ? cfg->experts / ep : 0;
    P->el0 = (coords->dp_rank % ep) * P->nel;
    P->ne = dp / ep;
    P->nr = coords->dp_rank / ep;
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
        P->tsize[i] = (P->t[i].per_layer ? (size_t)L : 1) * (size_t)P->t[i].experts *
                      P->t[i].rows * P->t[i].cols;
        P->toff[i] = o;
        o += P->tsize[i];
        P->slen[i] = split_len(&P->t[i], tp) * (size_t)(P->t[i].expert ? P->nel : 1);
    }
    P->nparams = o;
    /* the flat layout: the experts first, so that the gradient ranges below each block (the
     * executor's "final from here to the end") still end with the layers: the experts of every
     * held block become final with the stage's last backward, and their range is reduced over
     * another group (the expert-data-parallel one) and sharded over it under ZeRO */
    P->estride = 0;
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++)
        if (P->t[i].expert) P->foff[i] = P->estride, P->estride += P->slen[i];
    P->xlen = P->estride * (size_t)P->nheld;
    P->xpad = P->xlen;
    if (layout->zero >= 1 && P->xlen)
        P->xpad = (P->xlen + (size_t)P->ne - 1) / (size_t)P->ne * (size_t)P->ne;
    o = P->xpad;
    P->foff[CT_GPT_wte] = o, o += holds(P, CT_GPT_wte) ? P->slen[CT_GPT_wte] : 0;
    P->foff[CT_GPT_wpe] = o, o += holds(P, CT_GPT_wpe) ? P->slen[CT_GPT_wpe] : 0;
    P->lbase = o;
    P->lstride = 0;
    for (int i = CT_GPT_ln1w; i <= CT_GPT_fcprojb; i++)
        if (!P->t[i].expert) P->foff[i] = P->lstride, P->lstride += P->slen[i];
    o += P->lstride * (size_t)P->nheld;
    P->lnf_lo = o;
    P->foff[CT_GPT_lnfw] = o, o += P->head ? P->slen[CT_GPT_lnfw] : 0;
    P->foff[CT_GPT_lnfb] = o, o += P->head ? P->slen[CT_GPT_lnfb] : 0;
    P->foff[CT_GPT_lmhead] = o, o += P->head ? P->slen[CT_GPT_lmhead] : 0; /* untied Llama */
    P->local_len = o;
    int N = dp;
    P->nsh = 0;
    if (layout->zero >= 1) {
        /* the experts sharded over the workers holding the same ones, the rest over DP */
        if (P->xpad) {
            size_t esh = P->xpad / (size_t)P->ne;
            P->shlo[P->nsh] = esh * (size_t)P->nr, P->shhi[P->nsh] = P->shlo[P->nsh] + esh;
            P->nsh++;
        }
        size_t d = o - P->xpad, sh = (d + (size_t)N - 1) / (size_t)N;
        P->flat = P->xpad + sh * (size_t)N;
        P->lo = P->xpad + sh * (size_t)coords->dp_rank;
        P->hi = P->lo + sh;
    } else {
        P->flat = o, P->lo = 0, P->hi = o;
    }
    P->shlo[P->nsh] = P->lo, P->shhi[P->nsh] = P->hi, P->nsh++;
    P->opt_len = 0;
    for (int k = 0; k < P->nsh; k++) P->opt_len += P->shhi[k] - P->shlo[k];
    /* working buffer: [experts, embeddings | slot 0 | slot 1 | lnf]: the held experts stay whole
     * there (gathered once per pass over the expert-data-parallel group, their gradients
     * reduced once per step); the dense blocks take turns in two slots */
    int slots = P->nheld < 2 ? P->nheld : 2;
    size_t wte_len = holds(P, CT_GPT_wte) ? P->slen[CT_GPT_wte] : 0;
    P->wwin = P->wshift = 0;
    if (layout->zero == 2 && dp > 1 && plan && plan->wte_windows && wte_len &&
        !ct_gpt_has_lm_head(cfg)) {
        size_t rows = wte_len / (size_t)cfg->channels;
        P->wwin = (rows + (size_t)dp - 1) / (size_t)dp;
        P->wshift = wte_len - P->wwin * (size_t)cfg->channels;
    }
    P->wlen = P->lbase + (size_t)slots * P->lstride + (P->local_len - P->lnf_lo) - P->wshift;
    P->pr0 = P->lbase - wte_len;
    P->prlen = (size_t)slots * P->lstride > wte_len ? (size_t)slots * P->lstride : wte_len;
    P->pwlen = P->pr0 + P->prlen + (P->local_len - P->lnf_lo);
    if (!dev) { /* the layout only: what the memory model reads (ct_params_buffers) */
        *out = P;
        return CT_OK;
    }
    if (P->wwin && (!(P->whost = ct_calloc(wte_len, sizeof(float))) ||
                    !(P->wtmp = ct_malloc(P->wwin * (size_t)cfg->channels * sizeof(float))))) {
        ct_params_free(P);
        return CT_ERR(err, CT_ERR_NOMEM, "ct_params_create: out of host memory (wte's gradient)");
    }
    ct_params_buf bufs[CT_PARAMS_MAX_BUFFERS];
    ct_arena **dst[CT_PARAMS_MAX_BUFFERS];
    int kinds[CT_PARAMS_MAX_BUFFERS];
    int nb = buffer_table(P, bufs, dst, kinds);
    for (int k = 0; k < nb; k++)
        if ((st = alloc_layout(P, bufs[k].category, bufs[k].name, kinds[k], dst[k])) != CT_OK) {
            CT_ERR(err, st, "%s", P->err.msg);
            ct_params_free(P);
            return st;
        }
    *out = P;
    return CT_OK;
}

void ct_params_free(ct_params *P) {
    if (!P) return;
    ct_arena_free(P->params);
    ct_arena_free(P->pshard);
    ct_arena_free(P->grads);
    ct_arena_free(P->gshard);
    ct_arena_free(P->adam_m);
    ct_arena_free(P->adam_v);
    free(P->whost);
    free(P->wtmp);
    free(P->local);
    free(P);
}

size_t ct_params_wte_window(const ct_params *P) { return P->wwin; }

size_t ct_params_host_bytes(const ct_params *P) {
    return P->wwin ? (P->slen[CT_GPT_wte] + P->wwin * (size_t)P->cfg.channels) * sizeof(float)
                   : 0;
}

/* Rows [row0, row0 + nrows) of wte's gradient, written into the window's first nrows rows, added
 * to the host accumulator; the window zeroed behind the read (a blocking read: the next window's
 * product waits for it). */
ct_status ct_params_wte_window_add(ct_params *P, size_t row0, size_t nrows) {
    size_t C = (size_t)P->cfg.channels, n = nrows * C, off = ct_params_gview(P, CT_GPT_wte, 0);
    if (!P->wwin || nrows > P->wwin || (row0 + nrows) * C > P->slen[CT_GPT_wte])
        return CT_ERR(&P->err, CT_ERR_ARG,
                      "ct_params_wte_window_add: rows [%zu, %zu) are no window of wte's gradient",
                      row0, row0 + nrows);
    ct_status st = ct_arena_read(P->grads, off * sizeof(float), P->wtmp, n * sizeof(float));
    if (st == CT_OK) st = ct_arena_zero(P->grads, off * sizeof(float), n * sizeof(float));
    if (st != CT_OK)
        return CT_ERR(&P->err, st, "wte's gradient window: %s", ct_device_errmsg(P->dev));
    float *h = P->whost + row0 * C;
    for (size_t i = 0; i < n; i++) h[i] += P->wtmp[i];
    return CT_OK;
}

void ct_params_wte_host_take(ct_params *P, float *dst) {
    size_t n = P->slen[CT_GPT_wte];
    if (!P->wwin) return;
    memcpy(dst, P->whost, n * sizeof(float));
    memset(P->whost, 0, n * sizeof(float));
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
int ct_params_shards(const ct_params *P, size_t lo[2], size_t hi[2]) {
    for (int k = 0; k < P->nsh; k++) lo[k] = P->shlo[k], hi[k] = P->shhi[k];
    return P->nsh;
}
size_t ct_params_opt_len(const ct_params *P) { return P->opt_len; }
void ct_params_experts(const ct_params *P, int *first, int *count) {
    if (first) *first = P->el0;
    if (count) *count = P->nel;
}
void ct_params_expert_range(const ct_params *P, size_t *lo, size_t *hi) {
    *lo = 0;
    *hi = P->xpad;
}
int ct_params_owned(const ct_params *P, int i, int sharded, size_t *lo, size_t *hi) {
    *lo = *hi = 0;
    if (!holds(P, i)) return 0;
    if (P->t[i].split == CT_SPLIT_NONE && P->at.tp_rank != 0) return 0;
    if (i == CT_GPT_wte && P->lay.pp > 1 && P->at.pp_rank != 0) return 0;
    if (P->t[i].expert) {
        if (sharded) *lo = P->shlo[0], *hi = P->shhi[0]; /* the expert shard is the first run */
        else if (P->nr == 0) *lo = 0, *hi = P->xpad;
    } else {
        if (sharded) *lo = P->lo, *hi = P->hi;
        else if (P->at.dp_rank == 0) *lo = P->xpad, *hi = P->local_len;
    }
    return *hi > *lo;
}
int ct_params_is_expert(const ct_params *P, int i) {
    return i >= 0 && i < CT_GPT_NUM_TENSORS && P->t[i].expert;
}
int ct_params_zero_stage(const ct_params *P) { return P->lay.zero; }
ct_arena *ct_params_buffer(ct_params *P) { return P->params; }
ct_arena *ct_params_param_shard(ct_params *P) { return P->pshard; }
ct_arena *ct_params_grads(ct_params *P) { return P->grads; }
ct_arena *ct_params_grad_shard(ct_params *P) { return P->gshard; }
ct_arena *ct_params_adam_m(ct_params *P) { return P->adam_m; }
ct_arena *ct_params_adam_v(ct_params *P) { return P->adam_v; }
size_t ct_params_slice_len(const ct_params *P, int i) { return P->slen[i]; }

size_t ct_params_flat_off(const ct_params *P, int i, int l) {
    if (P->t[i].expert) return (size_t)P->local[l] * P->estride + P->foff[i];
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
    size_t w0, w1, s = P->wshift;
    ct_params_wte_range(P, &w0, &w1);
    if (P->wwin && f >= w0 && f < w1) /* wte's window: row r at r mod the window's rows */
        return w0 + (f - w0) % (P->wwin * (size_t)P->cfg.channels);
    if (f < w0 || (!s && f < P->lbase)) return f;
    if (f < P->lbase) return f - s;
    if (f >= P->lnf_lo) {
        int slots = P->nheld < 2 ? P->nheld : 2;
        return P->lbase - s + (size_t)slots * P->lstride + (f - P->lnf_lo);
    }
    size_t k = (f - P->lbase) / P->lstride; /* local block index */
    return P->lbase - s + (k % 2) * P->lstride + (f - P->lbase - k * P->lstride);
}
size_t ct_params_work_len(const ct_params *P) { return P->wlen; }
size_t ct_params_buffer_len(const ct_params *P) { return P->lay.zero >= 3 ? P->pwlen : P->flat; }

size_t ct_params_pwork_off(const ct_params *P, size_t f) {
    size_t w0, w1;
    ct_params_wte_range(P, &w0, &w1);
    if (f >= w0 && f < w1) return P->pr0 + (f - w0);
    if (f < P->xpad) return f;
    if (f < P->lbase) return f - (w1 - w0); /* wpe: after the experts */
    if (f >= P->lnf_lo) return P->pr0 + P->prlen + (f - P->lnf_lo);
    size_t k = (f - P->lbase) / P->lstride; /* local block index */
    return P->pr0 + (k % 2) * P->lstride + (f - P->lbase - k * P->lstride);
}
void ct_params_pwork_region(const ct_params *P, size_t *r0, size_t *wte_len, size_t *slot_len) {
    size_t w0, w1;
    ct_params_wte_range(P, &w0, &w1);
    *r0 = P->pr0, *wte_len = w1 - w0, *slot_len = P->lstride;
}

size_t ct_params_pview(const ct_params *P, int i, int l) {
    size_t f = ct_params_flat_off(P, i, l);
    return P->lay.zero >= 3 ? ct_params_pwork_off(P, f) : f;
}
size_t ct_params_gview(const ct_params *P, int i, int l) {
    size_t f = ct_params_flat_off(P, i, l);
    return P->lay.zero >= 2 ? ct_params_work_off(P, f) : f;
}

ct_view ct_params_pv(const ct_params *P, int i, int l) {
    return ct_arena_view(P->params, ct_params_pview(P, i, l));
}
ct_view ct_params_gv(const ct_params *P, int i, int l) {
    return ct_arena_view(P->grads, ct_params_gview(P, i, l));
}
