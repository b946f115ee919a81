/* model_impl.h - what the model's files share (not installed, not for other parts): the
 * activation arena's plan, the model's struct, the op-running and view macros, and the small
 * helpers the forward and backward files use. model.c creates and owns a model, arena.c plans
 * its arena (and checks a plan), forward.c and backward.c are the layer math (a Llama block's
 * in llama.c). */
#ifndef CT_MODEL_IMPL_H
#define CT_MODEL_IMPL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_model.h"
#include "engine_impl.h"

/* The tensors a block saves for its backward, in slot order. Each is kept in the slot (nb
 * consecutive copies, one per block of the longest chunk) or, when the plan's recompute mode
 * drops it, lives in the shared recompute scratch (one copy: the block being run forward, or
 * recomputed before its backward). */
enum {
    B_LN1, B_LN1M, B_LN1R, B_QKVR, B_ATT, B_ATTY, B_RES2, B_LN2, B_LN2M, B_LN2R, B_FCH, B_FCHG,
    B_RES3, B__COUNT
};

/* One slot's regions (offsets in floats from the slot's start; sizes in elements), planned for (max_B, max_T) and
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
    /* bf16 plan: the activation regions (act[t] for a block's tensors; the scratch's and slot's
     * own: see ct__model_plan_arena) hold bf16 elements in half the floats; offsets stay in
     * floats, the strides above and bsz in elements */
    int bf16;
    int act[B__COUNT];
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
    ct_gemm_plan gemm;      /* the path of each GEMM shape, set on dev (ct_gemm_plan_make) */
    char gemm_note[4096];   /* what was chosen per shape and its rate (for the start-up log) */
    ct_arena *acts;    /* [scratch | slot 0 | slot 1 | ...], in pieces (arena_parts) */
    ct_arena *work;    /* bf16 plan: the parameters' bf16 working copy, the flat layout */
    uint64_t work_step; /* the optimizer step the working copy was last made after */
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
static inline ct_status dev_fail(ct_model *m, ct_status st, const char *what) {
    if (st != CT_OK) CT_ERR(&m->err, st, "%s: %s", what, ct_device_errmsg(m->dev));
    return st;
}

static inline ct_status check_slot(ct_model *m, int slot, const char *what) {
    if (slot < 0 || slot >= m->plan.slots)
        return CT_ERR(&m->err, CT_ERR_ARG, "%s: slot %d outside 0..%d", what, slot,
                      m->plan.slots - 1);
    return CT_OK;
}
static inline ct_status check_layer(ct_model *m, int l, const char *what) {
    if (!ct_params_holds_layer(m->P, l))
        return CT_ERR(&m->err, CT_ERR_ARG, "%s: block %d is not held by this worker", what, l);
    return CT_OK;
}
/* Token or target ids in [0, V) (forward.c). */
ct_status ct__model_check_ids(ct_model *m, const int *ids, size_t n, const char *what);

/* Float offset of slot s in the arena. */
static inline size_t slot_base(const ct_model *m, int s) {
    return m->ar.x.total + (size_t)s * m->ar.s.total;
}
/* The view of arena float `off`: its piece and the offset within that piece (a planned
 * tensor lies within one piece: arena_parts). */
static inline ct_view av(const ct_model *m, size_t off) { return ct_arena_view(m->acts, off); }
/* An activation region's view (bf16 in a bf16 plan): the region at float `off`, element k of it
 * (k counts the region's elements: bf16 ones in a bf16 plan). */
static inline ct_view aa(const ct_model *m, size_t off, size_t k) {
    return m->ar.bf16 ? ct_arena_view_bf16(m->acts, 2 * off + k) : ct_arena_view(m->acts, off + k);
}
/* Position of block l within its chunk (its copy in a slot's per-block regions). */
static inline size_t pos(const ct_model *m, int l) {
    int lo;
    ct_params_chunk(m->P, m->chunk_of[l], &lo, NULL);
    return (size_t)(l - lo);
}
/* The last block of the model, as held (the head reads its output). */
static inline int last_layer(const ct_model *m) { return m->cfg.layers - 1; }
/* Rows of the tensors outside the TP regions, as (B, T) for the row-wise ops: the micro-batch,
 * or under sequence parallelism this worker's B*T/N of them as one row of tokens. */
static inline void row_shape(const ct_model *m, int B, int T, int *rb, int *rt) {
    if (m->sp) *rb = 1, *rt = B * T / m->N;
    else *rb = B, *rt = T;
}

#define GV(t, l) ct_params_gv(m->P, CT_GPT_##t, l)
#define SV(f) av(m, sb + m->ar.s.f)         /* the slot's region (fp32) */
#define XV(f) av(m, m->ar.x.f)              /* shared scratch (fp32) */
#define SA(f) aa(m, sb + m->ar.s.f, 0)      /* the slot's activation region (bf16 plan: bf16) */
#define BA(f, k) aa(m, sb + m->ar.s.f, (k)) /* ... at element k within it */
#define XA(f) aa(m, m->ar.x.f, 0)           /* shared activation scratch */
/* the working copy of the parameters (bf16 plan: the bf16 copy) */
#define PV(t, l) ct__model_pv(m, CT_GPT_##t, l)

/* The tensors block l saves, as views: in slot `slot` (its copy at position pos(l) in the
 * chunk) or, where the recompute mode drops them, the shared recompute scratch; res is the
 * block's input (the slot's chunk input, or block l-1's output); wg the split backward's
 * weight-gradient inputs. */
typedef struct bviews {
    ct_view res, t[B__COUNT], wg;
} bviews;
void ct__model_block_views(const ct_model *m, int slot, int l, bviews *v);

/* End of an op group: while tracing, wait for the device so the group's time is its own. */
ct_status ct__model_group_end(ct_model *m, const char *name, double t0);
#define GROUP(name)                                                                              \
    do {                                                                                         \
        if ((st = ct__model_group_end(m, (name), tg_)) != CT_OK) goto cleanup;                   \
        tg_ = ct_time_now();                                                                     \
    } while (0)

/* Tensor i of block l in the parameters the ops read: the fp32 master, or its bf16 working
 * copy (model.c). */
ct_view ct__model_pv(const ct_model *m, int i, int l);

/* The head's weight (grads 0: the parameters the ops read; 1: its gradient): wte, or an untied
 * Llama model's lm_head (model.c). */
ct_view ct__model_head_weight(const ct_model *m, int grads);

/* A Llama block's forward (recompute 1: what the plan's recompute mode dropped, before its
 * backward), and its backward, whole or one zero-bubble half (dres: the output's gradient in,
 * the input's out) (llama.c). */
/* The mixture-of-experts layer of block l on x (ln2's output, this worker's rowC floats):
 * forward into the projection scratch, backward into dA from dres (moe_layer.c). */
ct_status ct__model_moe_layer_forward(ct_model *m, int slot, int l, ct_view x, size_t rowC);
ct_status ct__model_moe_layer_backward(ct_model *m, int slot, int l, ct_view x, size_t rowC);
ct_status ct__llama_block_forward(ct_model *m, int slot, int l, int recompute);
ct_status ct__llama_block_backward(ct_model *m, int slot, int l, ct_backward_part part);

/* The MoE layer's parameters of block l (params or grads). */
ct_moe_weights ct__model_moe_weights(const ct_model *m, int l, int grads);

/* Block l forward (recompute 0) or, before its backward, what the plan's recompute mode
 * dropped (recompute 1) (forward.c). */
ct_status ct__model_block_run(ct_model *m, int slot, int l, int recompute);

/* ---- arena.c: the arena plan, a pure function shared with the memory model */
void ct__model_plan_arena(arena_plan *a, const ct_gpt_config *c, int Nw, int spw, int nbw,
                          int head, ct_attn_path attn, int B, int T, int split, ct_recompute rc,
                          size_t lmoe, size_t xmoe, int loss_chunk, int bf16);
/* The parameters' plan a model plan gives (ct_params_plan.wte_windows: under ZeRO-2, wte's
 * gradient window by window where the head and embedding can write it so: a tied GPT-2 wte, fp32,
 * no sequence parallelism); model.c, the arena's memory query and the memory model ask it. */
ct_params_plan ct__model_params_plan(const ct_gpt_config *c, const ct_layout *lay,
                                     const ct_model_plan *plan);
/* Rows of the logits the head holds at once: every row of the micro-batch, or a chunk of at
 * most loss_chunk rows. Under sequence parallelism over spn workers (else spn 1) a chunk is
 * loss_chunk/spn (at least 1) of each worker's rows, gathered: spn times that many rows. */
static inline size_t ct__head_rows(int loss_chunk, int B, int T, int spn) {
    size_t BT = (size_t)B * T, n = spn > 1 ? (size_t)spn : 1;
    if (loss_chunk <= 0 || (size_t)loss_chunk >= BT) return BT;
    size_t k = (size_t)loss_chunk / n;
    return (k ? k : 1) * n;
}
/* The arena's indivisible parts as byte offsets into malloc'd arrays (the caller frees both);
 * 0 when out of host memory. */
size_t ct__model_arena_part_list(const arena_plan *a, int slots, size_t **parts,
                                 const char ***names);
/* Every check of a plan that needs no device (with_group: the TP group must be in the plan). */
ct_status ct__model_plan_check(const ct_gpt_config *cfg, const ct_layout *layout,
                               const ct_coords *coords, const ct_model_plan *plan, int with_group,
                               const char *what, ct_err *err);
/* The MoE layer's configuration (cfg->experts > 0), nb blocks per slot, checked against ep;
 * its arena regions in *lmoe (per block, in a slot) and *xmoe (scratch). */
ct_status ct__model_moe_config(const ct_gpt_config *cfg, const ct_layout *layout,
                               const ct_model_plan *plan, int nb, ct_moe_cfg *mc, size_t *lmoe,
                               size_t *xmoe, ct_err *err);
/* Floats of each of the TP pieces' two host staging buffers. */
size_t ct__model_tp_staging_floats(const ct_gpt_config *cfg, int B, int T);

#endif /* CT_MODEL_IMPL_H */
