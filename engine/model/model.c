/* model.c - GPT-2's layer math on activation slots: the embedding, block l and the head, each
 * forward and backward, as sequences of ops (ops.c) over views of the worker's parameter
 * buffers (params.c) and of one activation arena planned at creation. Nothing is allocated and
 * nothing crosses to the host inside a step except tokens in and the loss out. The model knows
 * nothing of other workers: the executor (step.c) gathers ZeRO-3 parameters before a block,
 * reduces gradients after one, and moves activations between pipeline stages. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_mem.h"
#include "ct_engine_model.h"
#include "ct_engine_step.h"
#include "engine_impl.h"

/* The tensors a block saves for its backward, in slot order. Each is kept in the slot (nb
 * consecutive copies, one per block of the longest chunk) or, when the plan's recompute mode
 * drops it, lives in the shared recompute scratch (one copy: the block being run forward, or
 * recomputed before its backward). */
enum {
    B_LN1, B_LN1M, B_LN1R, B_QKVR, B_ATT, B_ATTY, B_RES2, B_LN2, B_LN2M, B_LN2R, B_FCH, B_FCHG,
    B_RES3, B__COUNT
};

/* One slot's regions (offsets in floats from the slot's start), planned for (max_B, max_T) and
 * up to `nb` blocks (the longest chunk). Per-block tensors are nb consecutive copies. */
typedef struct slot_plan {
    size_t tokens, targets, in, blk[B__COUNT], moe, wg, lnf, lnfm, lnfr, logits, losses, lse, loss,
        total;
} slot_plan;
/* The scratch shared by all slots (offsets from the arena's start). */
typedef struct scratch_plan {
    size_t qkv, proj, vaccum, dres, dA, dB, dqkvr, datt, dvaccum;
    size_t xfull, dfull, stats; /* tensor parallelism: gathered rows (SP), loss statistics */
    size_t moex;                /* the MoE layer's scratch */
    size_t rc[B__COUNT];        /* recomputation: one block's dropped tensors */
    size_t rc_lo, rc_hi;        /* their extent */
    size_t total;
} scratch_plan;

/* One planned region: offset and floats, and for a per-block region the stride of its copies
 * (the arena may be cut into pieces between copies; 0: never within the region). */
typedef struct arena_region {
    size_t off, n, stride;
    const char *name, *all; /* one copy's; every copy's (when they form one part) */
} arena_region;
#define CT__MAX_REGIONS 40

/* The whole arena plan: a pure function of (config, plan, layout, held blocks, path), shared by
 * the model (which allocates it) and the memory model (which predicts it). */
typedef struct arena_plan {
    slot_plan s;
    scratch_plan x;
    arena_region xr[CT__MAX_REGIONS], sr[CT__MAX_REGIONS]; /* scratch's and a slot's regions */
    int nxr, nsr;
    int kept[B__COUNT];   /* 1: in the slot; 0: dropped (recompute scratch) */
    size_t bsz[B__COUNT]; /* floats of one block's copy */
    /* per-block strides within a slot (floats): rows outside the TP regions (BTl x C, BTl),
     * this worker's QKV, attention output and MLP columns (BT x 3C/N, C/N, 4C/N), scores */
    size_t lrow, lst, lqkv, latty, lfc, attL;
    size_t lmoe; /* the MoE layer's floats per block (0: dense) */
} arena_plan;

typedef struct slot_state {
    int B, T;         /* shape of the slot's micro-batch */
    int chunk;        /* the chunk its activations belong to (-1: none yet) */
    int have_targets; /* head_forward computed a loss */
    int logits_valid; /* logits hold the last head_forward's values */
    float loss_scale; /* of the objective in the slot's backward (the MoE auxiliary loss's) */
} slot_state;

struct ct_model {
    ct_gpt_config cfg;
    ct_model_plan plan;
    ct_params *P;
    ct_optim *opt; /* for the single-worker ct_model_adamw_step / grad_norm */
    ct_device *dev;
    int nb;            /* blocks per slot: the longest chunk */
    /* tensor parallelism: N workers, this one r; sequence parallelism sp. NULL tp: one worker */
    ct_tp *tp;
    int N, r, sp;
    ct_moe *moe;        /* mixture of experts (NULL: the dense MLP) */
    int *chunk_of;     /* [L]: chunk index of block l, -1 if not held */
    arena_plan ar;
    ct_attn_path attn;      /* the attention path this model runs (gemm or fused) */
    ct_attn_cfg acfg;       /* the fused kernels' block shapes */
    char attn_note[1800];   /* why (for the start-up log) */
    ct_arena *acts;    /* [scratch | slot 0 | slot 1 | ...], in pieces (arena_parts) */
    slot_state *st;
    ct_trace *tr; /* op groups recorded while it is on */
    ct_profile prof;
    ct_err err;
};

/* Run an op; in profiling mode wait for it and charge its time to bucket `op`. */
#define RUN(op, expr)                                                   \
    do {                                                                \
        double t0_ = m->prof.on ? ct_time_now() : 0.0;                  \
        st = (expr);                                                    \
        if (st == CT_OK && m->prof.on) {                                \
            st = ct_device_finish(m->dev);                              \
            m->prof.ms[op] += 1e3 * (ct_time_now() - t0_);              \
            m->prof.calls[op]++;                                        \
        }                                                               \
        if (st != CT_OK) goto cleanup;                                  \
    } while (0)

/* Copy the device's message onto the model's error record. */
static ct_status dev_fail(ct_model *m, ct_status st, const char *what) {
    if (st != CT_OK) CT_ERR(&m->err, st, "%s: %s", what, ct_device_errmsg(m->dev));
    return st;
}

int ct_model_tensor_decays(int i) {
    static const int decays[] = {
#define CT__GPT_DECAY(name, pl, ex, rows, cols, nd, split, decay, init) decay,
        CT_GPT_TABLE(CT__GPT_DECAY, (const ct_gpt_config *)0)
#undef CT__GPT_DECAY
    };
    return i >= 0 && i < CT_GPT_NUM_TENSORS && decays[i];
}

/* A block's saved tensor, named for messages: one copy, or every block's copies where they
 * form one part (a copy not a whole number of 64-byte lines). */
#define CT__BLK_NAMES(X)                                                                        \
    X("ln1") X("ln1 means") X("ln1 deviations") X("QKV") X("scores") X("attention output")     \
    X("residual") X("ln2") X("ln2 means") X("ln2 deviations") X("fc output") X("GELU output")  \
    X("output")
static const char *blk_name(int t, int fused, int every) {
#define CT__ONE(s) "a block's " s,
#define CT__ALL(s) "every block's " s,
    static const char *const one[B__COUNT] = {CT__BLK_NAMES(CT__ONE)};
    static const char *const all[B__COUNT] = {CT__BLK_NAMES(CT__ALL)};
#undef CT__ONE
#undef CT__ALL
    if (t == B_ATT && fused)
        return every ? "every block's attention log-sum-exp" : "a block's attention log-sum-exp";
    return t >= 0 && t < B__COUNT ? (every ? all : one)[t] : "?";
}

/* The arena's indivisible parts as byte offsets (ct_arena_alloc): each region that holds
 * anything, and within a per-block region each copy when copies are whole 64-byte lines, so a
 * piece of the arena holds whole tensors. Fills parts and names when given; returns the count. */
static size_t arena_parts(const arena_plan *a, int slots, size_t *parts, const char **names) {
    size_t n = 0, last = 0;
    for (int s = -1; s < slots; s++) {
        const arena_region *r = s < 0 ? a->xr : a->sr;
        int nr = s < 0 ? a->nxr : a->nsr;
        size_t base = s < 0 ? 0 : a->x.total + (size_t)s * a->s.total;
        for (int i = 0; i < nr; i++) {
            /* copies cut apart only when each starts on a 64-byte line (the offsets the
             * kernels see stay as aligned as in one buffer) */
            int each = r[i].stride && r[i].stride % 16 == 0;
            size_t step = each ? r[i].stride : r[i].n;
            for (size_t k = 0; k < r[i].n; k += step) {
                size_t at = base + r[i].off + k;
                if (n && at <= last) continue;
                if (parts)
                    parts[n] = at * sizeof(float),
                    names[n] = r[i].stride && !each && r[i].n > r[i].stride ? r[i].all : r[i].name;
                n++, last = at;
            }
        }
    }
    return n;
}

/* arena_parts into malloc'd arrays (the caller frees both); 0 when out of host memory. */
static size_t arena_part_list(const arena_plan *a, int slots, size_t **parts,
                              const char ***names) {
    size_t np = arena_parts(a, slots, NULL, NULL);
    *parts = ct_malloc(np * sizeof **parts);
    *names = ct_malloc(np * sizeof **names);
    if (!*parts || !*names) {
        free(*parts), free(*names);
        *parts = NULL, *names = NULL;
        return 0;
    }
    return arena_parts(a, slots, *parts, *names);
}

/* The arena for micro-batches <= B x T. Under tensor parallelism over N workers the column- and
 * row-parallel regions hold this worker's columns (3C/N of QKV, NH/N heads' scores or
 * log-sum-exp and outputs, 4C/N of the MLP, Vp/N logits) for all B*T rows; with sequence
 * parallelism the rest (the residual stream, LayerNorms, dres) holds only this worker's BT/N
 * rows, the gathered LayerNorm output lives in scratch (xfull) and is gathered again in
 * backward. N = 1 is the plain model's arena, region for region. Recomputation (rc) moves the
 * tensors it drops from the slot's per-block regions into one shared copy at the end of the
 * scratch; with rc none the arena is exactly what it was before recomputation existed. A
 * mixture of experts (c->experts > 0) has no fch/fchg: its layer keeps its own tensors, lmoe
 * floats per block in the slot (ct_moe_plan), and xmoe floats of scratch. Those are kept under
 * every recompute mode: recomputing them would repeat the layer's routing and its all-to-alls
 * over the EP group (block mode recomputes the block up to ln2, the MoE layer's input). */
static void plan_arena(arena_plan *a, const ct_gpt_config *c, int Nw, int spw, int nbw, int head,
                       ct_attn_path attn, int B, int T, int split, ct_recompute rc, size_t lmoe,
                       size_t xmoe) {
    size_t nb = (size_t)nbw, C = (size_t)c->channels, N = (size_t)Nw;
    size_t NHl = (size_t)c->heads / N;
    size_t BT = (size_t)B * T, BTC = BT * C;
    size_t BTl = spw ? BT / N : BT, rowC = BTl * C; /* rows outside the TP regions */
    size_t Cq = 3 * C / N, Ca = C / N, F = 4 * C / N, Vl = (size_t)c->padded_vocab / N;
    size_t tpx = Nw > 1 ? 1 : 0, spx = spw ? 1 : 0;
    /* The GEMM path keeps the scores (B,NH,T,T) per block and permutes q, k, v into qkvr; the
     * fused path keeps the log-sum-exp (B,NH,T) in the same place, and the QKV matmul writes
     * (B,T,3C) straight into qkvr, so it needs none of the GEMM path's scratch. */
    int fused = attn == CT_ATTN_FUSED;
    size_t att = fused ? B * NHl * T : B * NHl * T * T, g = fused ? 0 : 1;
    size_t dense = c->experts > 0 ? 0 : 1; /* the MoE layer keeps its own tensors instead */
    size_t bsz[B__COUNT] = {rowC, BTl,     BTl,           BT * Cq,       att, BT * Ca, rowC,
                            rowC, BTl,     BTl,           dense * BT * F, dense * BT * F, rowC};
    for (int t = 0; t < B__COUNT; t++) a->bsz[t] = bsz[t], a->kept[t] = 1;
    if (rc == CT_RECOMPUTE_BLOCK) /* a block keeps only its output (the next one's input) */
        for (int t = 0; t < B__COUNT; t++) a->kept[t] = t == B_RES3;
    if (rc == CT_RECOMPUTE_ATTENTION) {
        /* the probabilities (GEMM path; the fused path's log-sum-exp is no cheaper to get back
         * than the whole attention forward) and, when no deferred weight half reads them later
         * (split backward), the cheap ones: the LayerNorm outputs and the GELU output */
        a->kept[B_ATT] = fused;
        if (!split) a->kept[B_LN1] = a->kept[B_LN2] = a->kept[B_FCHG] = 0;
    }
    a->nxr = a->nsr = 0;
    size_t o = 0;
/* 64-byte aligned; recorded with a name (messages) and the stride of its copies (k) */
#define REGIONK(list, cnt, p, f, n, k, nm, all)                                            \
    ((p)->f = o, a->list[a->cnt++] = (arena_region){o, (size_t)(n), (size_t)(k), nm, all}, \
     o += ((size_t)(n) + 15) / 16 * 16)
#define XREG(f, n, nm) REGIONK(xr, nxr, x, f, n, 0, nm, nm)
#define SREG(f, n, nm) REGIONK(sr, nsr, s, f, n, 0, nm, nm)
    scratch_plan *x = &a->x;
    XREG(qkv, g * BT * Cq, "the QKV scratch");
    XREG(proj, BTC, "the projection scratch");
    XREG(vaccum, g * BT * Ca, "the attention output scratch");
    XREG(dres, rowC, "the residual gradient");
    XREG(dA, BT * (F > C ? F : C), "gradient scratch A");
    XREG(dB, BT * (F > Cq ? F : Cq), "gradient scratch B");
    XREG(datt, att, fused ? "the attention row sums" : "the score gradient"); /* the score gradient; fused: rowsum(dout * out) */
    /* the attention backward's head-major temporaries share the forward's: each is written and
     * read within one forward or one attention backward call, and a worker runs those one at a
     * time (a recomputed forward ends before its backward starts) */
    x->dqkvr = x->qkv, x->dvaccum = x->vaccum;
    XREG(xfull, spx * BTC, "the gathered rows");
    XREG(dfull, spx * BTC, "the gathered gradient rows");
    XREG(stats, tpx * 3 * BT, "the loss statistics");
    XREG(moex, xmoe, "the MoE scratch");
    x->rc_lo = o;
    for (int t = 0; t < B__COUNT; t++)
        XREG(rc[t], a->kept[t] ? 0 : bsz[t], blk_name(t, fused, 0));
    x->rc_hi = o;
    x->total = o;
    o = 0;
    slot_plan *s = &a->s;
    SREG(tokens, BT, "the tokens");
    SREG(targets, BT, "the targets");
    SREG(in, rowC, "the stage input");
    for (int t = 0; t < B__COUNT; t++)
        REGIONK(sr, nsr, s, blk[t], a->kept[t] ? nb * bsz[t] : 0, bsz[t], blk_name(t, fused, 0),
                blk_name(t, fused, 1));
    REGIONK(sr, nsr, s, moe, nb * lmoe, lmoe, "a block's MoE tensors", "every block's MoE tensors");
    /* zero-bubble plans: what the deferred weight gradient needs beyond the saved activations,
     * per block [output gradient | dln2 | residual gradient after ln2 | dln1]; its other two
     * inputs (the gradients of fch and of qkv) go where fch and qkvr were, dead by then (not
     * planned under tensor parallelism, which refuses the split) */
    REGIONK(sr, nsr, s, wg, split ? nb * 4 * BTC : 0, 4 * BTC, "a block's weight-gradient inputs",
            "every block's weight-gradient inputs");
    size_t h = head ? 1 : 0;
    SREG(lnf, h * rowC, "the final LayerNorm");
    SREG(lnfm, h * BTl, "the final LayerNorm's means");
    SREG(lnfr, h * BTl, "the final LayerNorm's deviations");
    SREG(logits, h * BT * Vl, "the logits");
    SREG(losses, h * BT, "the losses");
    SREG(lse, h * BT, "the log-sum-exp");
    SREG(loss, 1, "the loss");
#undef XREG
#undef SREG
#undef REGIONK
    s->total = o;
    a->lrow = rowC, a->lst = BTl, a->lqkv = BT * Cq, a->latty = BT * Ca, a->lfc = BT * F;
    a->attL = att;
    a->lmoe = lmoe;
}

const char *ct_recompute_name(ct_recompute r) {
    switch (r) {
    case CT_RECOMPUTE_NONE: return "none";
    case CT_RECOMPUTE_ATTENTION: return "attention";
    case CT_RECOMPUTE_BLOCK: return "block";
    }
    return "?";
}

ct_status ct_recompute_parse(const char *s, ct_recompute *out) {
    for (int r = CT_RECOMPUTE_NONE; r <= CT_RECOMPUTE_BLOCK; r++)
        if (s && !strcmp(s, ct_recompute_name((ct_recompute)r))) {
            *out = (ct_recompute)r;
            return CT_OK;
        }
    return CT_ERR_ARG;
}

ct_status ct_model_recompute_check(ct_recompute rc, ct_attn_path attn, int split, ct_err *err) {
    if (rc < CT_RECOMPUTE_NONE || rc > CT_RECOMPUTE_BLOCK)
        return CT_ERR(err, CT_ERR_ARG, "recompute mode %d is not none, attention or block", (int)rc);
    if (rc == CT_RECOMPUTE_BLOCK && split)
        return CT_ERR(err, CT_ERR_UNSUPPORTED,
                      "recompute block with the split backward (zb1): the deferred weight half "
                      "reads the block's activations after its input half, while the other "
                      "blocks' recomputations reuse the one scratch copy; keeping them until then "
                      "is what block recomputation drops. Use --recompute attention, or a "
                      "schedule without the split (gpipe, 1f1b, interleaved)");
    if (rc == CT_RECOMPUTE_ATTENTION && split && attn == CT_ATTN_FUSED)
        return CT_ERR(err, CT_ERR_UNSUPPORTED,
                      "recompute attention with the fused attention path and the split backward "
                      "(zb1) would drop nothing: the fused path keeps no scores, and zb1's "
                      "deferred weight half reads the cheap tensors (LayerNorm and GELU outputs) "
                      "late; use --recompute none or block, or --attention gemm");
    return CT_OK;
}

ct_status ct_model_tp_check(const ct_gpt_config *c, int N, int sp, int T, ct_err *err) {
    if (N < 1) return CT_ERR(err, CT_ERR_ARG, "tensor parallelism: tp = %d must be >= 1", N);
    if (N == 1) return CT_OK;
    if (c->heads % N)
        return CT_ERR(err, CT_ERR_ARG,
                      "tensor parallelism: tp = %d does not divide the %d attention heads (each "
                      "worker runs NH / tp whole heads)",
                      N, c->heads);
    if (c->padded_vocab % N)
        return CT_ERR(err, CT_ERR_ARG,
                      "tensor parallelism: tp = %d does not divide the padded vocabulary Vp = %d "
                      "(each worker holds Vp / tp rows of wte)",
                      N, c->padded_vocab);
    if ((4 * c->channels) % N || c->channels % N)
        return CT_ERR(err, CT_ERR_ARG,
                      "tensor parallelism: tp = %d does not divide the MLP width 4C = %d and the "
                      "channels C = %d",
                      N, 4 * c->channels, c->channels);
    if (sp && T % N)
        return CT_ERR(err, CT_ERR_ARG,
                      "sequence parallelism: tp = %d does not divide the sequence length T = %d "
                      "(the tokens outside the TP regions are split over the TP group)",
                      N, T);
    return CT_OK;
}

/* Floats of each of the TP pieces' two host staging buffers: the largest transfer, a (B,T,C)
 * activation, the loss statistics (3 per token) or a MoE layer's gate gradients (K per token). */
static size_t tp_staging_floats(const ct_gpt_config *cfg, int B, int T) {
    size_t BTC = (size_t)B * T * (size_t)cfg->channels, BT3 = 3 * (size_t)B * T;
    size_t BTK = cfg->experts > 0 ? (size_t)B * T * (size_t)cfg->top_k : 0;
    size_t n = BTC > BT3 ? BTC : BT3;
    return n > BTK ? n : BTK;
}

/* The MoE layer's configuration for this model (cfg->experts > 0), nb blocks per slot, checked
 * against ep; its arena regions in *lmoe (per block, in a slot) and *xmoe (scratch). */
static ct_status moe_config(const ct_gpt_config *cfg, const ct_layout *layout,
                            const ct_model_plan *plan, int nb, ct_moe_cfg *mc, size_t *lmoe,
                            size_t *xmoe, ct_err *err) {
    int ep = layout->ep < 1 ? 1 : layout->ep;
    memset(mc, 0, sizeof *mc);
    *lmoe = *xmoe = 0;
    if (cfg->experts <= 0) return CT_OK;
    mc->experts = cfg->experts, mc->top_k = cfg->top_k, mc->capacity = plan->moe_capacity;
    mc->aux = plan->moe_aux, mc->max_B = plan->max_B, mc->max_T = plan->max_T;
    mc->channels = cfg->channels, mc->layers = cfg->layers, mc->slots = plan->slots;
    mc->hidden = 4 * cfg->channels / (layout->tp > 1 ? layout->tp : 1); /* ct_model_tp_check */
    mc->blocks = nb > 0 ? nb : 1;
    ct_status st = ct_moe_check(mc, ep, err);
    if (st == CT_OK) ct_moe_plan(mc, ep, lmoe, xmoe);
    return st;
}

/* Every check of a plan that needs no device (with_group: the TP group must be in the plan). */
static ct_status plan_check(const ct_gpt_config *cfg, const ct_layout *layout,
                            const ct_coords *coords, const ct_model_plan *plan, int with_group,
                            const char *what, ct_err *err) {
    ct_status st;
#define PFAIL(code, fmt, ...) CT_ERR(err, code, fmt, what, __VA_ARGS__)
    int max_B = plan->max_B, max_T = plan->max_T;
    if (cfg->layers < 1 || cfg->heads < 1 || cfg->channels < 1 || cfg->vocab < 1 ||
        cfg->max_seq < 1 || cfg->padded_vocab < cfg->vocab)
        return PFAIL(CT_ERR_ARG,
                      "%s: bad config (L=%d NH=%d C=%d V=%d Vp=%d maxT=%d): all must "
                      "be positive and Vp >= V",
                      cfg->layers, cfg->heads, cfg->channels, cfg->vocab, cfg->padded_vocab,
                      cfg->max_seq);
    if (cfg->channels % cfg->heads != 0)
        return PFAIL(CT_ERR_ARG, "%s: heads (%d) must divide channels (%d)",
                      cfg->heads, cfg->channels);
    if (max_B < 1 || max_T < 1 || max_T > cfg->max_seq || plan->slots < 1)
        return PFAIL(CT_ERR_ARG,
                      "%s: batch %d, sequence %d and slots %d must be positive, "
                      "sequence <= max_seq %d",
                      max_B, max_T, plan->slots, cfg->max_seq);
    if ((double)max_B * max_T * cfg->padded_vocab >= 2147483647.0 ||
        (double)max_B * max_T * 4 * cfg->channels >= 2147483647.0 ||
        (plan->attention == CT_ATTN_GEMM &&
         (double)max_B * cfg->heads * max_T * max_T >= 2147483647.0))
        return PFAIL(CT_ERR_UNSUPPORTED,
                      "%s: batch %d x sequence %d is too large (a tensor would exceed "
                      "2^31 elements)",
                      max_B, max_T);
    if (layout->dp < 1 || layout->tp < 1 || layout->pp < 1 || coords->dp_rank < 0 ||
        coords->dp_rank >= layout->dp || coords->tp_rank < 0 || coords->tp_rank >= layout->tp ||
        coords->pp_rank < 0 || coords->pp_rank >= layout->pp)
        return PFAIL(CT_ERR_ARG,
                      "%s: coordinates (dp %d, tp %d, pp %d) outside the layout "
                      "dp=%d tp=%d pp=%d",
                      coords->dp_rank, coords->tp_rank, coords->pp_rank, layout->dp, layout->tp,
                      layout->pp);
    int N = layout->tp;
    if ((st = ct_model_tp_check(cfg, N, plan->sp, max_T, err)) != CT_OK) return st;
    if (with_group && N > 1 && (!plan->tp || ct_comm_size(plan->tp) != N ||
                  ct_comm_rank(plan->tp) != coords->tp_rank))
        return PFAIL(CT_ERR_ARG,
                      "%s: tp = %d needs the TP group in the plan (ct_grid_tp: %d "
                      "workers, this one rank %d); got %s",
                      N, N, coords->tp_rank, plan->tp ? "a group of another size or rank" : "none");
    if (N > 1 && plan->split_backward)
        return PFAIL(CT_ERR_UNSUPPORTED,
                      "%s: the split backward of zero-bubble schedules is not built "
                      "for tensor parallelism (tp = %d): its weight half would need the TP "
                      "gathers again; use a schedule without the split (gpipe, 1f1b, "
                      "interleaved)",
                      N);
    int E = cfg->experts, ep = layout->ep < 1 ? 1 : layout->ep;
    if (E < 0 || (E == 0 && (cfg->top_k != 0 || ep > 1)))
        return PFAIL(CT_ERR_ARG,
                     "%s: a dense model (experts %d) with top-k %d and ep %d: top-k and expert "
                     "parallelism need experts",
                     E, cfg->top_k, ep);
    if (E > 0 && plan->split_backward)
        return PFAIL(CT_ERR_UNSUPPORTED,
                     "%s: experts with the split backward of zero-bubble schedules are not built "
                     "(the MoE layer's backward runs its all-to-alls as one piece)%s",
                     "; use gpipe, 1f1b or interleaved");
    if (with_group && ep > 1 &&
        (!plan->ep || ct_comm_size(plan->ep) != ep || ct_comm_rank(plan->ep) != coords->dp_rank % ep))
        return PFAIL(CT_ERR_ARG,
                     "%s: ep = %d needs the EP group in the plan (ct_grid_ep: %d workers, this one "
                     "rank %d); got %s",
                     ep, ep, coords->dp_rank % ep,
                     plan->ep ? "a group of another size or rank" : "none");
    if (layout->zero < 0 || layout->zero > 3 || (layout->zero > 0 && layout->dp < 2))
        return PFAIL(CT_ERR_UNSUPPORTED,
                      "%s: ZeRO stage %d with dp=%d is not supported (stages 0 to 3 "
                      "are built; a ZeRO stage needs dp >= 2)",
                      layout->zero, layout->dp);
#undef PFAIL
    return CT_OK;
}

ct_status ct_model_create(ct_model **out, const ct_gpt_config *cfg, const ct_layout *layout,
                          const ct_coords *coords, ct_device *dev, int max_B, int max_T,
                          ct_err *err) {
    ct_model_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.max_B = max_B, plan.max_T = max_T, plan.slots = 1;
    return ct_model_create_plan(out, cfg, layout, coords, dev, &plan, err);
}

ct_status ct_model_create_plan(ct_model **out, const ct_gpt_config *cfg, const ct_layout *layout,
                               const ct_coords *coords, ct_device *dev, const ct_model_plan *plan,
                               ct_err *err) {
    ct_status st = CT_OK;
    ct_model *m = NULL;
    *out = NULL;
    if (!cfg || !layout || !coords || !dev || !plan)
        return CT_ERR(err, CT_ERR_ARG,
                      "ct_model_create: config, layout, coords, device and plan needed");
    if ((st = plan_check(cfg, layout, coords, plan, 1, "ct_model_create", err)) != CT_OK)
        return st;
    int max_B = plan->max_B, max_T = plan->max_T, N = layout->tp;
    m = ct_calloc(1, sizeof *m);
    if (!m) return CT_ERR(err, CT_ERR_NOMEM, "ct_model_create: out of host memory");
    m->cfg = *cfg;
    m->plan = *plan;
    m->dev = dev;
    m->N = N, m->r = coords->tp_rank, m->sp = N > 1 && plan->sp;
    m->plan.sp = m->sp;
    if (N == 1) m->plan.tp = NULL;
    if ((st = ct_params_create(&m->P, cfg, layout, coords, &plan->chunks, dev, err)) != CT_OK)
        goto cleanup;
    m->chunk_of = ct_malloc(sizeof(int) * (size_t)cfg->layers);
    m->st = ct_calloc((size_t)plan->slots, sizeof *m->st);
    if (!m->chunk_of || !m->st) {
        st = CT_ERR(err, CT_ERR_NOMEM, "ct_model_create: out of host memory");
        goto cleanup;
    }
    for (int l = 0; l < cfg->layers; l++) m->chunk_of[l] = -1;
    for (int k = 0; k < ct_params_nchunks(m->P); k++) {
        int lo, hi;
        ct_params_chunk(m->P, k, &lo, &hi);
        for (int l = lo; l < hi; l++) m->chunk_of[l] = k;
        if (hi - lo > m->nb) m->nb = hi - lo;
    }
    for (int s = 0; s < plan->slots; s++) m->st[s].chunk = -1;
    /* a TP worker runs attention on its C/N channels and NH/N heads */
    if ((st = ct_attn_select(dev, plan->attention, plan->attn_blocks, max_T, cfg->channels / N,
                             cfg->heads / N, &m->attn, &m->acfg, m->attn_note,
                             sizeof m->attn_note)) != CT_OK) {
        CT_ERR(err, st, "ct_model_create: choosing the attention path: %s", ct_device_errmsg(dev));
        goto cleanup;
    }
    if (plan->attention == CT_ATTN_AUTO && m->attn == CT_ATTN_GEMM) {
        /* auto timed one row: at the planned batch the GEMM path's scores may not fit where
         * the fused path, which keeps none, does */
        int huge = (double)max_B * (cfg->heads / N) * max_T * max_T >= 2147483647.0;
        if (huge || ct_model_gemm_exceeds(cfg, layout, coords, plan, ct_device_max_alloc(dev))) {
            m->attn = CT_ATTN_FUSED;
            size_t k = strlen(m->attn_note);
            snprintf(m->attn_note + k, sizeof m->attn_note - k,
                     "; fused instead: at batch %d the GEMM path's scores (%d x %d x %d x %d "
                     "floats a block) %s",
                     max_B, max_B, cfg->heads / N, max_T, max_T,
                     huge ? "exceed 2^31 elements"
                          : "need a buffer above the device's largest allocation");
        }
    }
    if (m->attn == CT_ATTN_GEMM &&
        (double)max_B * (cfg->heads / N) * max_T * max_T >= 2147483647.0) {
        st = CT_ERR(err, CT_ERR_UNSUPPORTED,
                    "ct_model_create: batch %d x sequence %d is too large for the GEMM attention "
                    "path (its scores would exceed 2^31 elements; the fused path keeps none)",
                    max_B, max_T);
        goto cleanup;
    }
    if ((st = ct_model_recompute_check(plan->recompute, m->attn, plan->split_backward, err)) !=
        CT_OK)
        goto cleanup;
    ct_moe_cfg mc;
    size_t lmoe, xmoe;
    if ((st = moe_config(cfg, layout, plan, m->nb, &mc, &lmoe, &xmoe, err)) != CT_OK) goto cleanup;
    plan_arena(&m->ar, cfg, N, m->sp, m->nb, ct_params_has_head(m->P), m->attn, max_B, max_T,
               plan->split_backward, plan->recompute, lmoe, xmoe);
    size_t total = m->ar.x.total + (size_t)plan->slots * m->ar.s.total;
    size_t *parts = NULL, np = 0;
    const char **names = NULL;
    if (!(np = arena_part_list(&m->ar, plan->slots, &parts, &names)))
        st = CT_ERR(err, CT_ERR_NOMEM, "ct_model_create: out of host memory");
    else {
        if ((st = ct_arena_alloc(dev, CT_MEM_ACTIVATIONS, "activations", total * sizeof(float),
                                 parts, names, np, &m->acts)) != CT_OK)
            CT_ERR(err, st,
                   "ct_model_create: %s. A smaller micro-batch or sequence shrinks every part; "
                   "tensor parallelism divides the logits and the scores; --attention fused "
                   "keeps no scores",
                   ct_device_errmsg(dev));
    }
    free(parts);
    free(names);
    if (st != CT_OK) goto cleanup;
    if (N > 1) {
        ct_tp_opts to = ct_tp_opts_default();
        to.sp = m->sp;
        to.comm = plan->tp_comm;
        if ((st = ct_tp_create(&m->tp, plan->tp, dev, m->acts, tp_staging_floats(cfg, max_B, max_T),
                               &to, err)) != CT_OK)
            goto cleanup;
    }
    if (cfg->experts > 0 &&
        (st = ct_moe_create(&m->moe, &mc, layout->ep > 1 ? plan->ep : NULL, m->tp, dev, m->acts,
                            err)) != CT_OK)
        goto cleanup;
    if ((st = ct_optim_create(&m->opt, m->P, &m->prof, err)) != CT_OK) goto cleanup;
    if ((st = ct_ops_warmup(dev)) != CT_OK ||
        (m->attn == CT_ATTN_FUSED &&
         (st = ct_attention_fused_warmup(dev, &m->acfg, cfg->channels / cfg->heads)) != CT_OK)) {
        CT_ERR(err, st, "ct_model_create: building the engine kernels: %s", ct_device_errmsg(dev));
        goto cleanup;
    }
    *out = m;
    return CT_OK;
cleanup:
    ct_model_free(m);
    return st;
}

ct_status ct__model_arena_plan(const ct_gpt_config *cfg, const ct_params *P,
                               const ct_model_plan *plan, ct__arena *out, ct_err *err) {
    ct_status st;
    const ct_layout *lay = ct_params_layout(P);
    memset(out, 0, sizeof *out);
    if ((st = plan_check(cfg, lay, ct_params_coords(P), plan, 0, "ct_model_mem_predict", err)) !=
        CT_OK)
        return st;
    /* auto is settled on the device at creation; the GEMM path's arena is never the smaller */
    ct_attn_path attn = plan->attention == CT_ATTN_FUSED ? CT_ATTN_FUSED : CT_ATTN_GEMM;
    if ((st = ct_model_recompute_check(plan->recompute, attn, plan->split_backward, err)) != CT_OK)
        return st;
    int N = lay->tp, nb = 0;
    for (int k = 0; k < ct_params_nchunks(P); k++) {
        int lo, hi;
        ct_params_chunk(P, k, &lo, &hi);
        if (hi - lo > nb) nb = hi - lo;
    }
    ct_moe_cfg mc;
    size_t lmoe, xmoe;
    if ((st = moe_config(cfg, lay, plan, nb, &mc, &lmoe, &xmoe, err)) != CT_OK) return st;
    arena_plan a;
    plan_arena(&a, cfg, N, N > 1 && plan->sp, nb, ct_params_has_head(P), attn, plan->max_B,
               plan->max_T, plan->split_backward, plan->recompute, lmoe, xmoe);
    out->moe_staging = cfg->experts > 0 ? ct_moe_staging_floats(&mc, lay->ep) : 0;
    out->slot = a.s.total, out->scratch = a.x.total;
    out->layer = (a.s.lnf - a.s.blk[0]) / (size_t)(nb ? nb : 1);
    out->recompute = a.x.rc_hi - a.x.rc_lo;
    out->blocks = nb;
    out->attention = attn;
    out->tp_staging = N > 1 ? tp_staging_floats(cfg, plan->max_B, plan->max_T) : 0;
    /* the largest part: the arena's regions and copies, as the model cuts them */
    size_t total = a.x.total + plan->slots * a.s.total, *parts = NULL, np;
    const char **names = NULL;
    if (!(np = arena_part_list(&a, plan->slots, &parts, &names)))
        return CT_ERR(err, CT_ERR_NOMEM, "ct_model_mem_predict: out of host memory");
    for (size_t i = 0; i < np; i++) {
        size_t len = (i + 1 < np ? parts[i + 1] : total * sizeof(float)) - parts[i];
        if (len / sizeof(float) > out->largest_part)
            out->largest_part = len / sizeof(float), out->largest_part_name = names[i];
    }
    free(parts), free(names);
    return CT_OK;
}

void ct_model_free(ct_model *m) {
    if (!m) return;
    ct_moe_free(m->moe);
    ct_tp_free(m->tp);
    ct_optim_free(m->opt);
    ct_arena_free(m->acts);
    ct_params_free(m->P);
    free(m->chunk_of);
    free(m->st);
    free(m);
}

const ct_gpt_config *ct_model_config(const ct_model *m) { return &m->cfg; }
ct_tp *ct_model_tp(ct_model *m) { return m->tp; }
ct_moe *ct_model_moe(ct_model *m) { return m->moe; }
size_t ct_model_act_floats(const ct_model *m, int B, int T) {
    size_t n = (size_t)B * T * (size_t)m->cfg.channels;
    return m->sp ? n / (size_t)m->N : n;
}
ct_device *ct_model_device(const ct_model *m) { return m->dev; }
ct_params *ct_model_params(ct_model *m) { return m->P; }
const ct_model_plan *ct_model_plan_of(const ct_model *m) { return &m->plan; }
const char *ct_model_errmsg(const ct_model *m) { return m->err.msg; }
size_t ct_model_num_params(const ct_model *m) { return ct_params_num_params(m->P); }
size_t ct_model_slot_bytes(const ct_model *m) { return m->ar.s.total * sizeof(float); }
size_t ct_model_layer_bytes(const ct_model *m) {
    /* the per-block regions of a slot: everything between the input and the head's tensors */
    return (m->ar.s.lnf - m->ar.s.blk[0]) / (m->nb ? (size_t)m->nb : 1) * sizeof(float);
}
size_t ct_model_recompute_bytes(const ct_model *m) {
    return (m->ar.x.rc_hi - m->ar.x.rc_lo) * sizeof(float);
}
ct_attn_path ct_model_attention(const ct_model *m, ct_attn_cfg *cfg) {
    if (cfg) *cfg = m->acfg;
    return m->attn;
}
const char *ct_model_attention_note(const ct_model *m) { return m->attn_note; }
size_t ct_model_scratch_bytes(const ct_model *m) { return m->ar.x.total * sizeof(float); }
int ct_model_act_pieces(const ct_model *m, size_t *largest) {
    if (largest) *largest = ct_arena_largest_piece(m->acts);
    return ct_arena_npieces(m->acts);
}

void ct_model_tensor(const ct_model *m, int i, size_t *offset, size_t *count) {
    size_t sizes[CT_GPT_NUM_TENSORS], o = 0;
    ct_gpt_param_sizes(&m->cfg, sizes);
    int ok = i >= 0 && i < CT_GPT_NUM_TENSORS;
    for (int k = 0; ok && k < i; k++) o += sizes[k];
    if (offset) *offset = ok ? o : 0;
    if (count) *count = ok ? sizes[i] : 0;
}

/* ------------------------------------------------------------------ host copies */

/* Errors of the parameter layer, onto the model's record. */
static ct_status pfail(ct_model *m, ct_status st) {
    if (st != CT_OK) CT_ERR(&m->err, st, "%s", ct_params_errmsg(m->P));
    return st;
}
static void invalidate(ct_model *m) {
    for (int s = 0; s < m->plan.slots; s++) m->st[s].logits_valid = 0, m->st[s].have_targets = 0;
}

ct_status ct_model_init_random(ct_model *m, uint64_t seed) {
    invalidate(m);
    return pfail(m, ct_params_init_random(m->P, seed));
}
ct_status ct_model_set_params(ct_model *m, const float *h, size_t n) {
    invalidate(m);
    return pfail(m, ct_params_set(m->P, h, n));
}
ct_status ct_model_get_params(ct_model *m, float *h, size_t n) {
    return pfail(m, ct_params_get(m->P, h, n));
}
ct_status ct_model_set_grads(ct_model *m, const float *h, size_t n) {
    return pfail(m, ct_params_set_grads(m->P, h, n));
}
ct_status ct_model_get_grads(ct_model *m, float *h, size_t n) {
    return pfail(m, ct_params_get_grads(m->P, h, n));
}
ct_status ct_model_set_optimizer(ct_model *m, const float *am, const float *av, size_t n) {
    return pfail(m, ct_params_set_optimizer(m->P, am, av, n));
}
ct_status ct_model_get_optimizer(ct_model *m, float *am, float *av, size_t n) {
    return pfail(m, ct_params_get_optimizer(m->P, am, av, n));
}
ct_status ct_model_zero_grad(ct_model *m) {
    ct_status st = CT_OK;
    RUN(CT_PROF_zero_grad, ct_params_zero_grads(m->P));
cleanup:
    return pfail(m, st);
}

/* ------------------------------------------------------------------ views */

static ct_status check_slot(ct_model *m, int slot, const char *what) {
    if (slot < 0 || slot >= m->plan.slots)
        return CT_ERR(&m->err, CT_ERR_ARG, "%s: slot %d outside 0..%d", what, slot,
                      m->plan.slots - 1);
    return CT_OK;
}
static ct_status check_layer(ct_model *m, int l, const char *what) {
    if (!ct_params_holds_layer(m->P, l))
        return CT_ERR(&m->err, CT_ERR_ARG, "%s: block %d is not held by this worker", what, l);
    return CT_OK;
}

static ct_status check_ids(ct_model *m, const int *ids, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab)
            return CT_ERR(&m->err, CT_ERR_ARG,
                          "ct_model_forward: %s[%zu] = %d is outside the vocabulary [0, %d)", what,
                          i, ids[i], m->cfg.vocab);
    return CT_OK;
}

/* Float offset of slot s in the arena. */
static size_t slot_base(const ct_model *m, int s) { return m->ar.x.total + (size_t)s * m->ar.s.total; }
/* The view of arena float `off`: its piece and the offset within that piece (a planned
 * tensor lies within one piece: arena_parts). */
static ct_view av(const ct_model *m, size_t off) { return ct_arena_view(m->acts, off); }
/* Position of block l within its chunk (its copy in a slot's per-block regions). */
static size_t pos(const ct_model *m, int l) {
    int lo;
    ct_params_chunk(m->P, m->chunk_of[l], &lo, NULL);
    return (size_t)(l - lo);
}
static int chunk_first(const ct_model *m, int l) {
    int lo;
    ct_params_chunk(m->P, m->chunk_of[l], &lo, NULL);
    return l == lo;
}

#define PV(t, l) ct_params_pv(m->P, CT_GPT_##t, l)
#define GV(t, l) ct_params_gv(m->P, CT_GPT_##t, l)
#define SV(f) av(m, sb + m->ar.s.f)         /* the slot's region */
#define BV(f, k) av(m, sb + m->ar.s.f + (k)) /* ... at offset k within it */
#define XV(f) av(m, m->ar.x.f)              /* shared scratch */

/* The tensors block l saves, as views: in slot `slot` (its copy at position pos(l) in the
 * chunk) or, where the recompute mode drops them, the shared recompute scratch; res is the
 * block's input (the slot's chunk input, or block l-1's output). */
typedef struct bviews {
    ct_view res, t[B__COUNT], wg;
} bviews;
static void block_views(const ct_model *m, int slot, int l, bviews *v) {
    size_t sb = slot_base(m, slot), k = pos(m, l);
    for (int t = 0; t < B__COUNT; t++)
        v->t[t] = m->ar.kept[t] ? av(m, sb + m->ar.s.blk[t] + k * m->ar.bsz[t])
                                : av(m, m->ar.x.rc[t]);
    v->res = chunk_first(m, l) ? av(m, sb + m->ar.s.in)
                               : av(m, sb + m->ar.s.blk[B_RES3] + (k - 1) * m->ar.lrow);
    v->wg = av(m, sb + m->ar.s.wg + 4 * k * m->ar.lrow);
}

/* The arena piece holding view v's next `bytes`, or NULL with the model's error set. */
static ct_buffer *act_piece(ct_model *m, ct_view v, size_t bytes, const char *what) {
    ct_buffer *b = ct_arena_piece_of(m->acts, v.mem);
    if (!b || v.off * sizeof(float) + bytes > ct_buffer_bytes(b)) {
        CT_ERR(&m->err, CT_ERR_ARG, "%s: the view is not inside the activation arena", what);
        return NULL;
    }
    return b;
}
ct_status ct_model_view_read(ct_model *m, ct_view v, void *host, size_t bytes) {
    ct_buffer *b = act_piece(m, v, bytes, "ct_model_view_read");
    if (!b) return CT_ERR_ARG;
    return dev_fail(m, ct_buffer_read(b, v.off * sizeof(float), host, bytes), "ct_model_view_read");
}
ct_status ct_model_view_write(ct_model *m, ct_view v, const void *host, size_t bytes) {
    ct_buffer *b = act_piece(m, v, bytes, "ct_model_view_write");
    if (!b) return CT_ERR_ARG;
    return dev_fail(m, ct_buffer_write(b, v.off * sizeof(float), host, bytes),
                    "ct_model_view_write");
}

ct_status ct_model_view_read_async(ct_model *m, ct_view v, void *host, size_t bytes,
                                   ct_event **ev) {
    ct_buffer *b = act_piece(m, v, bytes, "ct_model_view_read_async");
    if (!b) return CT_ERR_ARG;
    return dev_fail(m, ct_buffer_read_async(b, v.off * sizeof(float), bytes, host, ev),
                    "ct_model_view_read_async");
}
ct_status ct_model_view_write_async(ct_model *m, ct_view v, const void *host, size_t bytes,
                                    ct_event **ev) {
    ct_buffer *b = act_piece(m, v, bytes, "ct_model_view_write_async");
    if (!b) return CT_ERR_ARG;
    return dev_fail(m, ct_buffer_write_async(b, v.off * sizeof(float), bytes, host, ev),
                    "ct_model_view_write_async");
}

void ct_model_set_trace(ct_model *m, ct_trace *t) { m->tr = t; }

/* End of an op group: while tracing, wait for the device so the group's time is its own. */
static ct_status group_end(ct_model *m, const char *name, double t0) {
    if (!ct_trace_on(m->tr)) return CT_OK;
    ct_status st = ct_device_finish(m->dev);
    ct_trace_event(m->tr, CT_TRACE_MAIN, name, "compute", t0, CT_TRACE_MB);
    return st;
}
#define GROUP(name)                                                                              \
    do {                                                                                         \
        if ((st = group_end(m, (name), tg_)) != CT_OK) goto cleanup;                             \
        tg_ = ct_time_now();                                                                     \
    } while (0)

/* The MoE layer's parameters of block l in buffer `b` (params or grads, through `view`). */
static ct_moe_weights moe_weights(const ct_model *m, int l, int grads) {
    ct_view (*at)(const ct_params *, int, int) = grads ? ct_params_gv : ct_params_pv;
    ct_moe_weights w;
    w.routerw = at(m->P, CT_GPT_routerw, l);
    w.fcw = at(m->P, CT_GPT_fcw, l);
    w.fcb = at(m->P, CT_GPT_fcb, l);
    w.fcprojw = at(m->P, CT_GPT_fcprojw, l);
    w.fcprojb = at(m->P, CT_GPT_fcprojb, l);
    return w;
}

ct_view ct_model_dres(ct_model *m) { return av(m, m->ar.x.dres); }

/* ------------------------------------------------------------------ forward */

/* Sequence parallelism splits the B*T tokens over the TP group: T must be a multiple of N. */
static ct_status check_sp(ct_model *m, int T, const char *what) {
    if (m->sp && T % m->N)
        return CT_ERR(&m->err, CT_ERR_ARG,
                      "%s: sequence %d is not a multiple of tp = %d (sequence parallelism splits "
                      "the tokens over the TP group)",
                      what, T, m->N);
    return CT_OK;
}

/* Rows of the tensors outside the TP regions, as (B, T) for the row-wise ops: the micro-batch,
 * or under sequence parallelism this worker's B*T/N of them as one row of tokens. */
static void row_shape(const ct_model *m, int B, int T, int *rb, int *rt) {
    if (m->sp) *rb = 1, *rt = B * T / m->N;
    else *rb = B, *rt = T;
}

ct_status ct_model_embed_forward(ct_model *m, int slot, const int *tokens, int B, int T) {
    ct_status st = CT_OK;
    if ((st = check_slot(m, slot, "ct_model_embed_forward")) != CT_OK) return st;
    if (!ct_params_has_embed(m->P))
        return CT_ERR(&m->err, CT_ERR_STATE,
                      "ct_model_embed_forward: this worker does not hold the embedding");
    if (!tokens || B < 1 || T < 1 || B > m->plan.max_B || T > m->plan.max_T)
        return CT_ERR(&m->err, CT_ERR_ARG,
                      "ct_model_forward: batch %d x sequence %d outside the planned %d x %d (or "
                      "no tokens)",
                      B, T, m->plan.max_B, m->plan.max_T);
    if ((st = check_sp(m, T, "ct_model_forward")) != CT_OK) return st;
    size_t BT = (size_t)B * T;
    if ((st = check_ids(m, tokens, BT, "tokens")) != CT_OK) return st;
    slot_state *ss = &m->st[slot];
    ss->B = B, ss->T = T, ss->chunk = 0, ss->have_targets = 0, ss->logits_valid = 0;
    ss->loss_scale = 1.0f;
    size_t sb = slot_base(m, slot);
    RUN(CT_PROF_upload, ct_model_view_write(m, SV(tokens), tokens, BT * sizeof(int)));
    RUN(CT_PROF_encoder_fwd, ct_tp_embed_forward(m->dev, m->tp, SV(in), XV(proj), SV(tokens),
                                            PV(wte, 0), PV(wpe, 0), B, T, m->cfg.channels,
                                            m->cfg.padded_vocab));
cleanup:
    return dev_fail(m, st, "ct_model_embed_forward");
}

ct_status ct_model_stage_input(ct_model *m, int slot, int chunk, int B, int T, ct_view *in) {
    ct_status st;
    if ((st = check_slot(m, slot, "ct_model_stage_input")) != CT_OK) return st;
    if (chunk < 0 || chunk >= ct_params_nchunks(m->P) || B < 1 || T < 1 || B > m->plan.max_B ||
        T > m->plan.max_T)
        return CT_ERR(&m->err, CT_ERR_ARG,
                      "ct_model_stage_input: chunk %d of %d, batch %d x sequence %d (planned %d x "
                      "%d)",
                      chunk, ct_params_nchunks(m->P), B, T, m->plan.max_B, m->plan.max_T);
    if ((st = check_sp(m, T, "ct_model_stage_input")) != CT_OK) return st;
    slot_state *ss = &m->st[slot];
    ss->B = B, ss->T = T, ss->chunk = chunk, ss->have_targets = 0, ss->logits_valid = 0;
    ss->loss_scale = 1.0f;
    *in = av(m, slot_base(m, slot) + m->ar.s.in);
    return CT_OK;
}

ct_status ct_model_block_output(ct_model *m, int slot, int l, ct_view *out) {
    ct_status st;
    if ((st = check_slot(m, slot, "ct_model_block_output")) != CT_OK ||
        (st = check_layer(m, l, "ct_model_block_output")) != CT_OK)
        return st;
    *out = av(m, slot_base(m, slot) + m->ar.s.blk[B_RES3] + pos(m, l) * m->ar.lrow);
    return CT_OK;
}

/* Block l: under tensor parallelism QKV is column-parallel by heads (this worker's NH/N heads'
 * Q, K and V), attention runs on those heads, attproj is row-parallel (all-reduce, bias once),
 * fc column-parallel, GELU local, fcproj row-parallel: two all-reduces (SP: all-gathers before
 * the column-parallel matmuls, reduce-scatters after the row-parallel ones).
 *
 * recompute = 1: the same ops again before the backward, only those whose outputs the plan's
 * mode dropped, into the recompute scratch (the same kernels on the same inputs: the same bits).
 * Block mode runs the block up to the GELU (fcproj and the last residual add make the block's
 * output, which is kept): under TP that repeats the QKV gather (SP), the attproj all-reduce and
 * the fc gather. Attention mode runs the LayerNorms (their statistics rewritten with the same
 * values), the scores' GEMM and softmax (GEMM path) and the GELU. A mixture-of-experts block
 * recomputes up to ln2 (its layer's input); the layer's own tensors stay in the slot. */
static ct_status block_run(ct_model *m, int slot, int l, int recompute) {
    ct_status st = CT_OK;
    slot_state *ss = &m->st[slot];
    int B = ss->B, T = ss->T, C = m->cfg.channels, N = m->N, rb, rt;
    int Cl = C / N, NHl = m->cfg.heads / N; /* this worker's attention channels and heads */
    row_shape(m, B, T, &rb, &rt);
    size_t rowC = (size_t)rb * rt * C, BT = (size_t)B * T;
    bviews v;
    block_views(m, slot, l, &v);
    const int *kept = m->ar.kept;
    /* which steps run: all of them forward; recomputing, those whose outputs were dropped */
    int all = !recompute;
    int do_ln1 = all || !kept[B_LN1] || !kept[B_LN1M];
    int do_attn = all || !kept[B_QKVR] || !kept[B_ATTY]; /* QKV matmul + the whole attention */
    int do_probs = !do_attn && !kept[B_ATT];             /* the probabilities alone (GEMM path) */
    int do_res2 = all || !kept[B_RES2];
    int do_ln2 = all || !kept[B_LN2] || !kept[B_LN2M];
    int do_fc = !m->moe && (all || !kept[B_FCH]);
    int do_gelu = !m->moe && (all || !kept[B_FCHG]);
    ct_view res = v.res, ln1 = v.t[B_LN1], qkvr = v.t[B_QKVR], att = v.t[B_ATT];
    ct_view atty = v.t[B_ATTY], res2 = v.t[B_RES2], ln2 = v.t[B_LN2], fch = v.t[B_FCH];
    ct_view fchg = v.t[B_FCHG];
    int P_ln = recompute ? CT_PROF_recompute : CT_PROF_layernorm_fwd;
    int P_qkv = recompute ? CT_PROF_recompute : CT_PROF_matmul_qkv_fwd;
    int P_att = recompute ? CT_PROF_recompute : CT_PROF_attention_fwd;
    int P_proj = recompute ? CT_PROF_recompute : CT_PROF_matmul_attproj_fwd;
    int P_res = recompute ? CT_PROF_recompute : CT_PROF_residual_fwd;
    int P_fc = recompute ? CT_PROF_recompute : CT_PROF_matmul_fc_fwd;
    int P_gelu = recompute ? CT_PROF_recompute : CT_PROF_gelu_fwd;
    double tg_ = ct_time_now();
    if (do_ln1)
        RUN(P_ln, ct_layernorm_forward(m->dev, ln1, v.t[B_LN1M], v.t[B_LN1R], res, PV(ln1w, l),
                                       PV(ln1b, l), rb, rt, C));
    if (do_attn && m->attn == CT_ATTN_FUSED) { /* qkv (B,T,3C/N) itself is what the backward reads */
        RUN(P_qkv, ct_tp_col_forward(m->dev, m->tp, qkvr, ln1, XV(xfull), PV(qkvw, l),
                                     PV(qkvb, l), B, T, C, 3 * Cl));
        RUN(P_att, ct_attention_fused_forward(m->dev, &m->acfg, atty, att, qkvr, B, T, Cl, NHl));
    } else if (do_attn) {
        RUN(P_qkv, ct_tp_col_forward(m->dev, m->tp, XV(qkv), ln1, XV(xfull), PV(qkvw, l),
                                     PV(qkvb, l), B, T, C, 3 * Cl));
        RUN(P_att, ct_attention_forward(m->dev, atty, qkvr, att, XV(qkv), XV(vaccum), B, T, Cl,
                                        NHl));
    } else if (do_probs) {
        RUN(P_att, ct_attention_probs(m->dev, att, qkvr, B, T, Cl, NHl));
    }
    if (do_res2) {
        RUN(P_proj, ct_tp_row_forward(m->dev, m->tp, XV(proj), XV(proj), atty, PV(attprojw, l),
                                      PV(attprojb, l), B, T, Cl, C));
        RUN(P_res, ct_residual_forward(m->dev, res2, res, XV(proj), rowC));
    }
    if (!recompute) GROUP("attention");
    if (do_ln2)
        RUN(P_ln, ct_layernorm_forward(m->dev, ln2, v.t[B_LN2M], v.t[B_LN2R], res2, PV(ln2w, l),
                                       PV(ln2b, l), rb, rt, C));
    if (do_fc)
        RUN(P_fc, ct_tp_col_forward(m->dev, m->tp, fch, ln2, XV(xfull), PV(fcw, l), PV(fcb, l), B,
                                    T, C, 4 * Cl));
    if (do_gelu) RUN(P_gelu, ct_gelu_forward(m->dev, fchg, fch, BT * 4 * (size_t)Cl));
    if (!recompute && m->moe) {
        /* the mixture of experts (its all-to-alls over the EP group); under TP each worker's
         * slice of the experts over the whole (gathered) tokens, summed as a row-parallel
         * linear's output is */
        ct_moe_weights w = moe_weights(m, l, 0);
        size_t k = pos(m, l);
        ct_view xin = ln2;
        if (m->sp) {
            RUN(CT_PROF_moe_fwd, ct_tp_allgather(m->dev, m->tp, XV(xfull), ln2, rowC));
            xin = XV(xfull);
        }
        RUN(CT_PROF_moe_fwd,
            ct_moe_forward(m->moe, slot, (int)k, l, XV(proj),
                           av(m, slot_base(m, slot) + m->ar.s.moe + k * m->ar.lmoe),
                           XV(moex), xin, &w, B, T));
        if (m->sp)
            RUN(CT_PROF_moe_fwd,
                ct_tp_reduce_scatter(m->dev, m->tp, XV(proj), XV(proj), rowC));
        else if (m->tp)
            RUN(CT_PROF_moe_fwd,
                ct_tp_allreduce(m->dev, m->tp, XV(proj), XV(proj), rowC, CT_OP_SUM));
    } else if (!recompute) {
        RUN(CT_PROF_matmul_fcproj_fwd,
            ct_tp_row_forward(m->dev, m->tp, XV(proj), XV(proj), fchg, PV(fcprojw, l),
                              PV(fcprojb, l), B, T, 4 * Cl, C));
    }
    if (!recompute) {
        RUN(CT_PROF_residual_fwd,
            ct_residual_forward(m->dev, v.t[B_RES3], res2, XV(proj), rowC));
        GROUP("mlp");
    } else {
        GROUP("recompute");
    }
cleanup:
    return st;
}

ct_status ct_model_block_forward(ct_model *m, int slot, int l) {
    ct_status st = CT_OK;
    if ((st = check_slot(m, slot, "ct_model_block_forward")) != CT_OK ||
        (st = check_layer(m, l, "ct_model_block_forward")) != CT_OK)
        return st;
    if (m->st[slot].B < 1)
        return CT_ERR(&m->err, CT_ERR_STATE,
                      "ct_model_block_forward: slot %d has no input (embed_forward or "
                      "stage_input first)",
                      slot);
    return dev_fail(m, block_run(m, slot, l, 0), "ct_model_block_forward");
}

/* Before a block's backward: what the plan's recompute mode dropped, back into the scratch. */
static ct_status recompute_block(ct_model *m, int slot, int l) {
    if (m->plan.recompute == CT_RECOMPUTE_NONE) return CT_OK;
    return block_run(m, slot, l, 1);
}

/* The last block of the model, as held (the head reads its output). */
static int last_layer(const ct_model *m) { return m->cfg.layers - 1; }

ct_status ct_model_head_forward(ct_model *m, int slot, const int *targets, float *loss) {
    ct_status st = CT_OK;
    if (loss) *loss = NAN;
    if ((st = check_slot(m, slot, "ct_model_head_forward")) != CT_OK) return st;
    if (!ct_params_has_head(m->P) || !ct_params_holds_layer(m->P, last_layer(m)))
        return CT_ERR(&m->err, CT_ERR_STATE,
                      "ct_model_head_forward: this worker does not hold the head");
    slot_state *ss = &m->st[slot];
    int B = ss->B, T = ss->T, C = m->cfg.channels, Vp = m->cfg.padded_vocab, rb, rt;
    size_t BT = (size_t)B * T, sb = slot_base(m, slot);
    if (B < 1) return CT_ERR(&m->err, CT_ERR_STATE, "ct_model_head_forward: slot %d is empty", slot);
    if (targets && (st = check_ids(m, targets, BT, "targets")) != CT_OK) return st;
    row_shape(m, B, T, &rb, &rt);
    ct_view last = BV(blk[B_RES3], pos(m, last_layer(m)) * m->ar.lrow);
    double tg_ = ct_time_now();
    if (targets)
        RUN(CT_PROF_upload, ct_model_view_write(m, SV(targets), targets, BT * sizeof(int)));
    RUN(CT_PROF_layernorm_fwd, ct_layernorm_forward(m->dev, SV(lnf), SV(lnfm), SV(lnfr), last,
                                               PV(lnfw, 0), PV(lnfb, 0), rb, rt, C));
    /* the logits: column-parallel over the vocabulary (this worker's Vp/N columns) */
    RUN(CT_PROF_matmul_logits_fwd, ct_tp_col_forward(m->dev, m->tp, SV(logits), SV(lnf), XV(xfull),
                                                PV(wte, 0), ct_view_none(), B, T, C, Vp / m->N));
    ss->have_targets = targets != NULL;
    ss->logits_valid = 1;
    if (targets) {
        RUN(CT_PROF_crossentropy_fwd,
            ct_tp_crossentropy_forward(m->dev, m->tp, SV(losses), SV(lse), XV(stats), SV(logits),
                                       SV(targets), B, T, m->cfg.vocab, Vp));
        RUN(CT_PROF_crossentropy_fwd, ct_mean_forward(m->dev, SV(loss), SV(losses), BT));
        if (loss)
            RUN(CT_PROF_readback, ct_model_view_read(m, SV(loss), loss, sizeof *loss));
    }
    GROUP("logits and loss");
cleanup:
    if (st != CT_OK) ss->logits_valid = ss->have_targets = 0;
    return dev_fail(m, st, "ct_model_head_forward");
}

ct_status ct_model_slot_logits(ct_model *m, int slot, float *host, size_t n) {
    ct_status st;
    if ((st = check_slot(m, slot, "ct_model_logits")) != CT_OK) return st;
    slot_state *ss = &m->st[slot];
    if (!ss->logits_valid)
        return CT_ERR(&m->err, CT_ERR_STATE,
                      "ct_model_logits: no valid forward (none yet, or a backward overwrote them)");
    size_t want = (size_t)ss->B * ss->T * (m->cfg.padded_vocab / m->N);
    if (n != want)
        return CT_ERR(&m->err, CT_ERR_ARG,
                      "ct_model_logits: %zu floats given, this worker's logits are %zu (B x T x "
                      "Vp/tp)",
                      n, want);
    return ct_model_view_read(m, av(m, slot_base(m, slot) + m->ar.s.logits), host,
                              n * sizeof(float));
}

/* ------------------------------------------------------------------ backward */

ct_status ct_model_head_backward(ct_model *m, int slot, float loss_scale) {
    ct_status st = CT_OK;
    if ((st = check_slot(m, slot, "ct_model_head_backward")) != CT_OK) return st;
    slot_state *ss = &m->st[slot];
    if (!ss->logits_valid || !ss->have_targets)
        return CT_ERR(&m->err, CT_ERR_STATE,
                      "ct_model_backward: needs a forward with targets first (and only one "
                      "backward per forward)");
    int B = ss->B, T = ss->T, C = m->cfg.channels, Vp = m->cfg.padded_vocab, rb, rt;
    size_t BT = (size_t)B * T, sb = slot_base(m, slot);
    row_shape(m, B, T, &rb, &rt);
    ct_view last = BV(blk[B_RES3], pos(m, last_layer(m)) * m->ar.lrow);
    ss->logits_valid = 0; /* the logits become their gradient */
    ss->loss_scale = loss_scale;
    double tg_ = ct_time_now();
    RUN(CT_PROF_crossentropy_bwd,
        ct_tp_crossentropy_backward(m->dev, m->tp, SV(logits), SV(lse), SV(targets),
                                    loss_scale / (float)BT, B, T, m->cfg.vocab, Vp));
    RUN(CT_PROF_matmul_logits_bwd,
        ct_tp_col_backward(m->dev, m->tp, XV(dA), GV(wte, 0), ct_view_none(), SV(logits), SV(lnf),
                           XV(xfull), XV(dA), PV(wte, 0), B, T, C, Vp / m->N));
    RUN(CT_PROF_layernorm_bwd, ct_layernorm_backward(m->dev, XV(dres), GV(lnfw, 0), GV(lnfb, 0), XV(dA),
                                                last, PV(lnfw, 0), SV(lnfm), SV(lnfr), rb, rt, C,
                                                0));
    GROUP("logits and loss backward");
cleanup:
    return dev_fail(m, st, "ct_model_head_backward");
}

ct_status ct_model_set_loss_scale(ct_model *m, int slot, float loss_scale) {
    ct_status st = check_slot(m, slot, "ct_model_set_loss_scale");
    if (st == CT_OK) m->st[slot].loss_scale = loss_scale;
    return st;
}

ct_status ct_model_block_backward(ct_model *m, int slot, int l) {
    ct_status st = CT_OK;
    if ((st = check_slot(m, slot, "ct_model_block_backward")) != CT_OK ||
        (st = check_layer(m, l, "ct_model_block_backward")) != CT_OK)
        return st;
    slot_state *ss = &m->st[slot];
    int B = ss->B, T = ss->T, C = m->cfg.channels, N = m->N, rb, rt;
    int Cl = C / N, NHl = m->cfg.heads / N;
    if (B < 1)
        return CT_ERR(&m->err, CT_ERR_STATE, "ct_model_block_backward: slot %d is empty", slot);
    row_shape(m, B, T, &rb, &rt);
    size_t BT = (size_t)B * T;
    bviews v;
    block_views(m, slot, l, &v);
    ct_view res = v.res, ln1 = v.t[B_LN1], qkvr = v.t[B_QKVR], att = v.t[B_ATT];
    ct_view atty = v.t[B_ATTY], res2 = v.t[B_RES2], ln2 = v.t[B_LN2], fch = v.t[B_FCH];
    ct_view fchg = v.t[B_FCHG];
    if ((st = recompute_block(m, slot, l)) != CT_OK) goto cleanup;
    double tg_ = ct_time_now();
    if (m->moe) { /* dA = the gradient of ln2's output */
        ct_moe_weights w = moe_weights(m, l, 0), dw = moe_weights(m, l, 1);
        ct_view saved = av(m, slot_base(m, slot) + m->ar.s.moe + pos(m, l) * m->ar.lmoe);
        ct_view xin = ln2, dy = XV(dres);
        size_t rowC = (size_t)rb * rt * C;
        if (m->sp) { /* SP: the layer's input and output gradient gathered over the TP group */
            RUN(CT_PROF_moe_bwd, ct_tp_allgather(m->dev, m->tp, XV(xfull), ln2, rowC));
            RUN(CT_PROF_moe_bwd, ct_tp_allgather(m->dev, m->tp, XV(dfull), XV(dres), rowC));
            xin = XV(xfull), dy = XV(dfull);
        }
        RUN(CT_PROF_moe_bwd, ct_moe_backward(m->moe, slot, (int)pos(m, l), XV(dA), &dw, dy, saved,
                                             XV(moex), xin, &w, ss->loss_scale));
        /* TP: the partial input gradients summed (SP: each worker its rows of the sum) */
        if (m->sp)
            RUN(CT_PROF_moe_bwd, ct_tp_reduce_scatter(m->dev, m->tp, XV(dA), XV(dA), rowC));
        else if (m->tp)
            RUN(CT_PROF_moe_bwd,
                ct_tp_allreduce(m->dev, m->tp, XV(dA), XV(dA), rowC, CT_OP_SUM));
    } else {
        RUN(CT_PROF_matmul_fcproj_bwd,
            ct_tp_row_backward(m->dev, m->tp, XV(dA), GV(fcprojw, l), GV(fcprojb, l), XV(dres),
                               XV(dfull), fchg, PV(fcprojw, l), B, T, 4 * Cl, C));
        RUN(CT_PROF_gelu_bwd, ct_gelu_backward(m->dev, XV(dB), fch, XV(dA), BT * 4 * (size_t)Cl));
        RUN(CT_PROF_matmul_fc_bwd,
            ct_tp_col_backward(m->dev, m->tp, XV(dA), GV(fcw, l), GV(fcb, l), XV(dB), ln2,
                               XV(xfull), XV(dA), PV(fcw, l), B, T, C, 4 * Cl));
    }
    RUN(CT_PROF_layernorm_bwd,
        ct_layernorm_backward(m->dev, XV(dres), GV(ln2w, l), GV(ln2b, l), XV(dA), res2,
                              PV(ln2w, l), v.t[B_LN2M], v.t[B_LN2R], rb, rt, C, 1));
    GROUP("mlp backward");
    RUN(CT_PROF_matmul_attproj_bwd,
        ct_tp_row_backward(m->dev, m->tp, XV(dA), GV(attprojw, l), GV(attprojb, l), XV(dres),
                           XV(dfull), atty, PV(attprojw, l), B, T, Cl, C));
    if (m->attn == CT_ATTN_FUSED)
        RUN(CT_PROF_attention_bwd,
            ct_attention_fused_backward(m->dev, &m->acfg, XV(dB), XV(datt), XV(dA), qkvr, atty,
                                        att, B, T, Cl, NHl));
    else
        RUN(CT_PROF_attention_bwd,
            ct_attention_backward(m->dev, XV(dB), XV(dqkvr), XV(datt), XV(dvaccum), XV(dA), qkvr,
                                  att, B, T, Cl, NHl));
    RUN(CT_PROF_matmul_qkv_bwd,
        ct_tp_col_backward(m->dev, m->tp, XV(dA), GV(qkvw, l), GV(qkvb, l), XV(dB), ln1, XV(xfull),
                           XV(dA), PV(qkvw, l), B, T, C, 3 * Cl));
    RUN(CT_PROF_layernorm_bwd,
        ct_layernorm_backward(m->dev, XV(dres), GV(ln1w, l), GV(ln1b, l), XV(dA), res,
                              PV(ln1w, l), v.t[B_LN1M], v.t[B_LN1R], rb, rt, C, 1));
    GROUP("attention backward");
cleanup:
    return dev_fail(m, st, "ct_model_block_backward");
}

/* The zero-bubble halves (one worker per layer: tensor parallelism refuses the split). The input half is the block's backward without the weight products
 * (the same dinp products, so the same values), keeping for the weight half the gradients each
 * weight product reads: those of the block's output and of the residual after ln2 (copied from
 * dres, which the next blocks overwrite), dln2 and dln1 (written there directly), and those of
 * fch and qkv (copied over fch and qkvr, which only the input half reads). The weight half runs
 * the same weight products on them, so a split backward adds bitwise what the whole one adds. */
static ct_status split_views(ct_model *m, int slot, int l, const char *what) {
    ct_status st;
    if ((st = check_slot(m, slot, what)) != CT_OK || (st = check_layer(m, l, what)) != CT_OK)
        return st;
    if (!m->plan.split_backward)
        return CT_ERR(&m->err, CT_ERR_STATE,
                      "%s: the model was planned without split backward (ct_model_plan."
                      "split_backward: the slots keep no room for the deferred weight gradient)",
                      what);
    if (m->st[slot].B < 1) return CT_ERR(&m->err, CT_ERR_STATE, "%s: slot %d is empty", what, slot);
    return CT_OK;
}

ct_status ct_model_block_backward_input(ct_model *m, int slot, int l) {
    ct_status st = CT_OK;
    if ((st = split_views(m, slot, l, "ct_model_block_backward_input")) != CT_OK) return st;
    slot_state *ss = &m->st[slot];
    int B = ss->B, T = ss->T, C = m->cfg.channels, NH = m->cfg.heads;
    size_t BTC = (size_t)B * T * C;
    bviews v;
    block_views(m, slot, l, &v);
    ct_view res = v.res, ln1 = v.t[B_LN1], qkvr = v.t[B_QKVR], att = v.t[B_ATT];
    ct_view atty = v.t[B_ATTY], res2 = v.t[B_RES2], ln2 = v.t[B_LN2], fch = v.t[B_FCH];
    ct_view fchg = v.t[B_FCHG], wg = v.wg;
    ct_view wdout = wg, wdln2 = ct_view_at(wg, m->ar.lrow), wdres2 = ct_view_at(wg, 2 * m->ar.lrow);
    ct_view wdln1 = ct_view_at(wg, 3 * m->ar.lrow), none = ct_view_none();
    size_t f4 = sizeof(float);
    /* attention mode under the split drops only the probabilities (the weight half reads the
     * rest later); block mode is refused with the split */
    if ((st = recompute_block(m, slot, l)) != CT_OK) goto cleanup;
    double tg_ = ct_time_now();
    RUN(CT_PROF_matmul_fcproj_bwd,
        ct_mem_copy(m->dev, XV(dres).mem, XV(dres).off * f4, wdout.mem, wdout.off * f4, BTC * f4));
    RUN(CT_PROF_matmul_fcproj_bwd, ct_matmul_backward(m->dev, XV(dA), none, none, XV(dres), fchg,
                                                 PV(fcprojw, l), B, T, 4 * C, C));
    RUN(CT_PROF_gelu_bwd, ct_gelu_backward(m->dev, XV(dB), fch, XV(dA), 4 * BTC));
    RUN(CT_PROF_gelu_bwd, ct_mem_copy(m->dev, XV(dB).mem, XV(dB).off * f4, fch.mem, fch.off * f4, 4 * BTC * f4));
    RUN(CT_PROF_matmul_fc_bwd, ct_matmul_backward(m->dev, wdln2, none, none, XV(dB), ln2, PV(fcw, l), B,
                                             T, C, 4 * C));
    RUN(CT_PROF_layernorm_bwd, ct_layernorm_backward(m->dev, XV(dres), none, none, wdln2, res2,
                                                PV(ln2w, l), v.t[B_LN2M], v.t[B_LN2R], B, T, C, 1));
    GROUP("mlp backward (input)");
    RUN(CT_PROF_matmul_attproj_bwd,
        ct_mem_copy(m->dev, XV(dres).mem, XV(dres).off * f4, wdres2.mem, wdres2.off * f4, BTC * f4));
    RUN(CT_PROF_matmul_attproj_bwd, ct_matmul_backward(m->dev, XV(dA), none, none, XV(dres), atty,
                                                  PV(attprojw, l), B, T, C, C));
    if (m->attn == CT_ATTN_FUSED) /* the same attention backward as the whole block's */
        RUN(CT_PROF_attention_bwd,
            ct_attention_fused_backward(m->dev, &m->acfg, XV(dB), XV(datt), XV(dA), qkvr, atty,
                                        att, B, T, C, NH));
    else
        RUN(CT_PROF_attention_bwd,
            ct_attention_backward(m->dev, XV(dB), XV(dqkvr), XV(datt), XV(dvaccum), XV(dA), qkvr,
                                  att, B, T, C, NH));
    RUN(CT_PROF_attention_bwd,
        ct_mem_copy(m->dev, XV(dB).mem, XV(dB).off * f4, qkvr.mem, qkvr.off * f4, 3 * BTC * f4));
    RUN(CT_PROF_matmul_qkv_bwd, ct_matmul_backward(m->dev, wdln1, none, none, XV(dB), ln1, PV(qkvw, l), B,
                                              T, C, 3 * C));
    RUN(CT_PROF_layernorm_bwd, ct_layernorm_backward(m->dev, XV(dres), none, none, wdln1, res,
                                                PV(ln1w, l), v.t[B_LN1M], v.t[B_LN1R], B, T, C, 1));
    GROUP("attention backward (input)");
cleanup:
    return dev_fail(m, st, "ct_model_block_backward_input");
}

ct_status ct_model_block_backward_weight(ct_model *m, int slot, int l) {
    ct_status st = CT_OK;
    if ((st = split_views(m, slot, l, "ct_model_block_backward_weight")) != CT_OK) return st;
    slot_state *ss = &m->st[slot];
    int B = ss->B, T = ss->T, C = m->cfg.channels;
    bviews v;
    block_views(m, slot, l, &v);
    ct_view res = v.res, ln1 = v.t[B_LN1], dqkv = v.t[B_QKVR], atty = v.t[B_ATTY];
    ct_view res2 = v.t[B_RES2], ln2 = v.t[B_LN2], dfch = v.t[B_FCH], fchg = v.t[B_FCHG];
    ct_view wg = v.wg;
    ct_view wdout = wg, wdln2 = ct_view_at(wg, m->ar.lrow), wdres2 = ct_view_at(wg, 2 * m->ar.lrow);
    ct_view wdln1 = ct_view_at(wg, 3 * m->ar.lrow), none = ct_view_none();
    double tg_ = ct_time_now();
    RUN(CT_PROF_matmul_fcproj_bwd, ct_matmul_backward(m->dev, none, GV(fcprojw, l), GV(fcprojb, l),
                                                 wdout, fchg, none, B, T, 4 * C, C));
    RUN(CT_PROF_matmul_fc_bwd, ct_matmul_backward(m->dev, none, GV(fcw, l), GV(fcb, l), dfch, ln2, none,
                                             B, T, C, 4 * C));
    RUN(CT_PROF_layernorm_bwd, ct_layernorm_backward(m->dev, none, GV(ln2w, l), GV(ln2b, l), wdln2, res2,
                                                none, v.t[B_LN2M], v.t[B_LN2R], B, T, C, 0));
    RUN(CT_PROF_matmul_attproj_bwd, ct_matmul_backward(m->dev, none, GV(attprojw, l),
                                                  GV(attprojb, l), wdres2, atty, none, B, T, C, C));
    RUN(CT_PROF_matmul_qkv_bwd, ct_matmul_backward(m->dev, none, GV(qkvw, l), GV(qkvb, l), dqkv, ln1,
                                              none, B, T, C, 3 * C));
    RUN(CT_PROF_layernorm_bwd, ct_layernorm_backward(m->dev, none, GV(ln1w, l), GV(ln1b, l), wdln1, res,
                                                none, v.t[B_LN1M], v.t[B_LN1R], B, T, C, 0));
    GROUP("weight gradients");
cleanup:
    return dev_fail(m, st, "ct_model_block_backward_weight");
}

ct_status ct_model_embed_backward(ct_model *m, int slot) {
    ct_status st = CT_OK;
    if ((st = check_slot(m, slot, "ct_model_embed_backward")) != CT_OK) return st;
    if (!ct_params_has_embed(m->P))
        return CT_ERR(&m->err, CT_ERR_STATE,
                      "ct_model_embed_backward: this worker does not hold the embedding");
    slot_state *ss = &m->st[slot];
    size_t sb = slot_base(m, slot);
    RUN(CT_PROF_encoder_bwd, ct_tp_embed_backward(m->dev, m->tp, GV(wte, 0), GV(wpe, 0), XV(dres),
                                             XV(dfull), SV(tokens), ss->B, ss->T,
                                             m->cfg.channels, m->cfg.padded_vocab));
cleanup:
    return dev_fail(m, st, "ct_model_embed_backward");
}

/* ------------------------------------------------------------------ the single-device path */

static ct_status whole_model(ct_model *m, const char *what) {
    if (!ct_params_has_embed(m->P) || !ct_params_has_head(m->P) || ct_params_nchunks(m->P) != 1)
        return CT_ERR(&m->err, CT_ERR_STATE,
                      "%s: this worker holds one pipeline stage, not the whole model (use the "
                      "stage entry points)",
                      what);
    return CT_OK;
}

ct_status ct_model_forward(ct_model *m, const int *tokens, const int *targets, int B, int T,
                           float *loss) {
    ct_status st;
    if (loss) *loss = NAN;
    if ((st = whole_model(m, "ct_model_forward")) != CT_OK) return st;
    /* every check before any work, tokens first */
    if (tokens && B >= 1 && T >= 1 && B <= m->plan.max_B && T <= m->plan.max_T &&
        ((st = check_ids(m, tokens, (size_t)B * T, "tokens")) != CT_OK ||
         (targets && (st = check_ids(m, targets, (size_t)B * T, "targets")) != CT_OK)))
        return st;
    if ((st = ct_model_embed_forward(m, 0, tokens, B, T)) != CT_OK) return st;
    for (int l = 0; l < m->cfg.layers; l++)
        if ((st = ct_model_block_forward(m, 0, l)) != CT_OK) return st;
    return ct_model_head_forward(m, 0, targets, loss);
}

ct_status ct_model_logits(ct_model *m, float *host, size_t n) {
    return ct_model_slot_logits(m, 0, host, n);
}

ct_status ct_model_backward(ct_model *m, float loss_scale) {
    ct_status st;
    if ((st = whole_model(m, "ct_model_backward")) != CT_OK) return st;
    if ((st = ct_model_head_backward(m, 0, loss_scale)) != CT_OK) return st;
    for (int l = m->cfg.layers - 1; l >= 0; l--)
        if ((st = ct_model_block_backward(m, 0, l)) != CT_OK) return st;
    return ct_model_embed_backward(m, 0);
}

ct_status ct_model_grad_norm(ct_model *m, float *norm) {
    ct_status st = ct_optim_local_norm(m->opt, norm);
    if (st != CT_OK) CT_ERR(&m->err, st, "%s", ct_optim_errmsg(m->opt));
    return st;
}

ct_status ct_model_adamw_step(ct_model *m, float lr, float beta1, float beta2, float eps,
                              float weight_decay, float grad_clip, int t, float *norm_out) {
    ct_adamw_hp hp = {lr, beta1, beta2, eps, weight_decay, grad_clip};
    invalidate(m);
    ct_status st = ct_optim_step(m->opt, &hp, t, NULL, norm_out);
    if (st != CT_OK) CT_ERR(&m->err, st, "%s", ct_optim_errmsg(m->opt));
    return st;
}

/* ------------------------------------------------------------------ profiling */

ct_profile *ct_model_profile(ct_model *m) { return &m->prof; }
void ct_model_profile_enable(ct_model *m, int on) { m->prof.on = on != 0; }

void ct_model_profile_reset(ct_model *m) {
    memset(m->prof.ms, 0, sizeof m->prof.ms);
    memset(m->prof.calls, 0, sizeof m->prof.calls);
}

int ct_model_profile_get(const ct_model *m, ct_model_op_time *out, int max) {
    int n = 0;
    for (int i = 0; i < CT_PROF__COUNT && n < max; i++)
        if (m->prof.calls[i] > 0) {
            out[n].name = ct_profile_name(i);
            out[n].ms = m->prof.ms[i];
            out[n].calls = m->prof.calls[i];
            n++;
        }
    return n;
}
