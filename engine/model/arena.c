/* arena.c - the model's activation arena, planned: per slot the tensors each block saves for
 * its backward (nb copies), the head's, and a scratch shared by the slots (temporaries, backward
 * scratch, what recomputation drops), cut into indivisible parts below the device's largest
 * allocation. A pure function of (config, layout, plan), shared by ct_model_create_plan (which
 * allocates it) and the memory model (which predicts it), so the two cannot drift; with the
 * checks every plan passes before anything is allocated. */
#include "model_impl.h"

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

size_t ct__model_arena_part_list(const arena_plan *a, int slots, size_t **parts,
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
void ct__model_plan_arena(arena_plan *a, const ct_gpt_config *c, int Nw, int spw, int nbw,
                          int head, ct_attn_path attn, int B, int T, int split, ct_recompute rc,
                          size_t lmoe, size_t xmoe, int loss_chunk, int bf16) {
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
    /* A Llama block keeps the same tensors: the RMSNorms' outputs and rstd (no means), the
     * expanded q|k|v (B,T,3C/N) after RoPE (each kv head repeated for its query heads: the
     * attention's input), fch = [gate (B,T,F/N) | up (B,T,F/N)], fchg the SwiGLU output
     * (B,T,F/N). Its scratch: the GEMM's q|k|v (B,T,Cr/N), Cr = C + 2 NKV hd, in dB in the
     * forward (dB is the backward's), its gradient in dA in the backward. */
    int llama = ct_gpt_is_llama(c);
    size_t Fl = (size_t)ct_gpt_ffn(c) / N, Cr = (size_t)ct_gpt_qkv_rows(c) / N;
    size_t Ffch = llama ? 2 * Fl : F, Ffchg = llama ? Fl : F, stat = llama ? 0 : BTl;
    /* dB also takes the q|k|v product's partial input gradient (B,T,C) under TP */
    size_t wB2 = 2 * Fl > Cr ? 2 * Fl : Cr;
    size_t wA = llama ? (Fl > Cr ? Fl : Cr) : F, wB = llama ? (wB2 > C ? wB2 : C) : F;
    size_t bsz[B__COUNT] = {rowC, stat,    BTl,           BT * Cq,       att, BT * Ca, rowC,
                            rowC, stat,    BTl,   dense * BT * Ffch, dense * BT * Ffchg, rowC};
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
/* 64-byte aligned; recorded with a name (messages) and the stride of its copies (k). n and k
 * count elements; an activation region (act) of a bf16 plan holds 2-byte elements, so it takes
 * half the floats (its copies cut apart only when a copy is a whole number of floats) */
#define HALF(n, act) (bf16 && (act) ? ((size_t)(n) + 1) / 2 : (size_t)(n))
#define HALFK(k, act) (bf16 && (act) ? ((size_t)(k) % 2 ? 0 : (size_t)(k) / 2) : (size_t)(k))
#define REGIONA(list, cnt, p, f, n, k, nm, all, act)                                            \
    ((p)->f = o,                                                                                \
     a->list[a->cnt++] = (arena_region){o, HALF(n, act), HALFK(k, act), nm, all},               \
     o += (HALF(n, act) + 15) / 16 * 16)
#define REGIONK(list, cnt, p, f, n, k, nm, all) REGIONA(list, cnt, p, f, n, k, nm, all, 0)
#define XREG(f, n, nm) REGIONK(xr, nxr, x, f, n, 0, nm, nm)
#define SREG(f, n, nm) REGIONK(sr, nsr, s, f, n, 0, nm, nm)
#define XACT(f, n, nm) REGIONA(xr, nxr, x, f, n, 0, nm, nm, 1)
#define SACT(f, n, nm) REGIONA(sr, nsr, s, f, n, 0, nm, nm, 1)
    a->bf16 = bf16;
    for (int t = 0; t < B__COUNT; t++)
        a->act[t] = !(t == B_LN1M || t == B_LN1R || t == B_LN2M || t == B_LN2R ||
                      (t == B_ATT && fused));
    scratch_plan *x = &a->x;
    XACT(qkv, g * BT * Cq, "the QKV scratch");
    XACT(proj, BTC, "the projection scratch");
    XACT(vaccum, g * BT * Ca, "the attention output scratch");
    XACT(dres, rowC, "the residual gradient");
    XACT(dA, BT * (wA > C ? wA : C), "gradient scratch A");
    XACT(dB, BT * (wB > Cq ? wB : Cq), "gradient scratch B");
    REGIONA(xr, nxr, x, datt, att, 0, fused ? "the attention row sums" : "the score gradient",
            fused ? "the attention row sums" : "the score gradient", !fused); /* the score gradient; fused: rowsum(dout * out) */
    /* the attention backward's head-major temporaries share the forward's: each is written and
     * read within one forward or one attention backward call, and a worker runs those one at a
     * time (a recomputed forward ends before its backward starts) */
    x->dqkvr = x->qkv, x->dvaccum = x->vaccum;
    XACT(xfull, spx * BTC, "the gathered rows");
    XACT(dfull, spx * BTC, "the gathered gradient rows");
    XREG(stats, tpx * 3 * BT, "the loss statistics");
    XREG(moex, xmoe, "the MoE scratch");
    x->rc_lo = o;
    for (int t = 0; t < B__COUNT; t++)
        REGIONA(xr, nxr, x, rc[t], a->kept[t] ? 0 : bsz[t], 0, blk_name(t, fused, 0),
                blk_name(t, fused, 0), a->act[t]);
    x->rc_hi = o;
    x->total = o;
    o = 0;
    slot_plan *s = &a->s;
    SREG(tokens, BT, "the tokens");
    SREG(targets, BT, "the targets");
    SACT(in, rowC, "the stage input");
    for (int t = 0; t < B__COUNT; t++)
        REGIONA(sr, nsr, s, blk[t], a->kept[t] ? nb * bsz[t] : 0, bsz[t], blk_name(t, fused, 0),
                blk_name(t, fused, 1), a->act[t]);
    REGIONK(sr, nsr, s, moe, nb * lmoe, lmoe, "a block's MoE tensors", "every block's MoE tensors");
    /* zero-bubble plans: what the deferred weight gradient needs beyond the saved activations,
     * per block [output gradient | dln2 | residual gradient after ln2 | dln1]; its other two
     * inputs (the gradients of fch and of qkv) go where fch and qkvr were, dead by then (not
     * planned under tensor parallelism, which refuses the split) */
    REGIONA(sr, nsr, s, wg, split ? nb * 4 * BTC : 0, 4 * BTC, "a block's weight-gradient inputs",
            "every block's weight-gradient inputs", 1);
    size_t h = head ? 1 : 0;
    SACT(lnf, h * rowC, "the final LayerNorm");
    SREG(lnfm, h * stat, "the final LayerNorm's means");
    SREG(lnfr, h * BTl, "the final LayerNorm's deviations");
    SACT(logits, h * ct__head_rows(loss_chunk, B, T, spw ? Nw : 1) * Vl, "the logits");
    SREG(losses, h * BT, "the losses");
    SREG(lse, h * BT, "the log-sum-exp");
    SREG(loss, 1, "the loss");
#undef XREG
#undef SREG
#undef XACT
#undef SACT
#undef REGIONK
#undef REGIONA
#undef HALF
#undef HALFK
    s->total = o;
    a->lrow = rowC, a->lst = BTl, a->lqkv = BT * Cq, a->latty = BT * Ca, a->lfc = BT * F;
    a->attL = att;
    a->lmoe = lmoe;
}

ct_params_plan ct__model_params_plan(const ct_gpt_config *c, const ct_layout *lay,
                                     const ct_model_plan *plan) {
    ct_params_plan pp = plan->chunks;
    pp.wte_windows = lay->zero == 2 && plan->precision == CT_PRECISION_FP32 &&
                     !(plan->sp && lay->tp > 1) && !ct_gpt_is_llama(c);
    return pp;
}

const char *ct_precision_name(ct_precision p) {
    return p == CT_PRECISION_FP32 ? "fp32" : p == CT_PRECISION_BF16 ? "bf16" : "?";
}

ct_status ct_precision_parse(const char *s, ct_precision *out) {
    if (s && !strcmp(s, "fp32")) return *out = CT_PRECISION_FP32, CT_OK;
    if (s && !strcmp(s, "bf16")) return *out = CT_PRECISION_BF16, CT_OK;
    return CT_ERR_ARG;
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
    if (ct_gpt_is_llama(c) && ct_gpt_kv_heads(c) % N)
        return CT_ERR(err, CT_ERR_ARG,
                      "tensor parallelism: tp = %d does not divide the %d key/value heads (each "
                      "worker would hold NKV / tp whole kv heads with their query heads)",
                      N, ct_gpt_kv_heads(c));
    if (c->padded_vocab % N)
        return CT_ERR(err, CT_ERR_ARG,
                      "tensor parallelism: tp = %d does not divide the padded vocabulary Vp = %d "
                      "(each worker holds Vp / tp rows of wte)",
                      N, c->padded_vocab);
    if (ct_gpt_is_llama(c) && (ct_gpt_ffn(c) % N || c->channels % N))
        return CT_ERR(err, CT_ERR_ARG,
                      "tensor parallelism: tp = %d does not divide the MLP width F = %d and the "
                      "channels C = %d (each worker holds F / tp rows of gate and of up)",
                      N, ct_gpt_ffn(c), c->channels);
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
size_t ct__model_tp_staging_floats(const ct_gpt_config *cfg, int B, int T) {
    size_t BTC = (size_t)B * T * (size_t)cfg->channels, BT3 = 3 * (size_t)B * T;
    size_t BTK = cfg->experts > 0 ? (size_t)B * T * (size_t)cfg->top_k : 0;
    size_t n = BTC > BT3 ? BTC : BT3;
    return n > BTK ? n : BTK;
}

/* The MoE layer's configuration for this model (cfg->experts > 0), nb blocks per slot, checked
 * against ep; its arena regions in *lmoe (per block, in a slot) and *xmoe (scratch). */
ct_status ct__model_moe_config(const ct_gpt_config *cfg, const ct_layout *layout,
                               const ct_model_plan *plan, int nb, ct_moe_cfg *mc, size_t *lmoe,
                               size_t *xmoe, ct_err *err) {
    int ep = layout->ep < 1 ? 1 : layout->ep;
    memset(mc, 0, sizeof *mc);
    *lmoe = *xmoe = 0;
    if (cfg->experts <= 0) return CT_OK;
    mc->experts = cfg->experts, mc->top_k = cfg->top_k, mc->capacity = plan->moe_capacity;
    mc->aux = plan->moe_aux, mc->max_B = plan->max_B, mc->max_T = plan->max_T;
    mc->channels = cfg->channels, mc->layers = cfg->layers, mc->slots = plan->slots;
    mc->ffn = ct_gpt_ffn(cfg), mc->swiglu = ct_gpt_is_llama(cfg);
    mc->hidden = mc->ffn / (layout->tp > 1 ? layout->tp : 1); /* ct_model_tp_check */
    mc->blocks = nb > 0 ? nb : 1;
    mc->bf16 = plan->precision == CT_PRECISION_BF16;
    ct_status st = ct_moe_check(mc, ep, err);
    if (st == CT_OK) ct_moe_plan(mc, ep, lmoe, xmoe);
    return st;
}

/* Every check of a plan that needs no device (with_group: the TP group must be in the plan). */
ct_status ct__model_plan_check(const ct_gpt_config *cfg, const ct_layout *layout,
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
    if (plan->loss_chunk < 0 || (plan->loss_chunk > 0 && plan->loss_chunk < max_T))
        return PFAIL(CT_ERR_ARG,
                     "%s: a loss chunk of %d rows (0: none; else at least the sequence, %d, so a "
                     "forward without targets keeps a row's logits whole)",
                     plan->loss_chunk, max_T);
    /* The limits that remain (docs/LIMITS.md, "64-bit sizes"): the element-wise and row-wise
     * kernels take any tensor, but a GEMM operand must lie below 2^31 elements (CLBlast hands
     * offsets and sizes to its kernels as int; cl/gemm.c checks every call), and so must the
     * GEMM attention's scores (ops_attention.c indexes them in int). */
    {
        double big = 2147483647.0,
               head = (double)ct__head_rows(plan->loss_chunk, max_B, max_T,
                                            plan->sp && layout->tp > 1 ? layout->tp : 1) *
                      cfg->padded_vocab;
        const char *tensor = head >= big ? "the head's logits (rows x Vp), a GEMM operand"
                           : (double)max_B * max_T * 4 * cfg->channels >= big
                               ? "the MLP's (B*T, 4C) activation, a GEMM operand"
                           : plan->attention == CT_ATTN_GEMM &&
                                   (double)max_B * cfg->heads * max_T * max_T >= big
                               ? "the GEMM attention's scores (B, NH, T, T)"
                               : NULL;
        if (tensor)
            return PFAIL(CT_ERR_UNSUPPORTED,
                         "%s: batch %d x sequence %d is too large: %s would pass 2^31 elements "
                         "(CLBlast indexes in int; --loss-chunk bounds the logits' rows, "
                         "--attention fused keeps no scores)",
                         max_B, max_T, tensor);
    }
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
    if (plan->precision != CT_PRECISION_FP32 && plan->precision != CT_PRECISION_BF16)
        return PFAIL(CT_ERR_ARG, "%s: precision %d is not fp32 or bf16%s", (int)plan->precision,
                     "");
    if (plan->precision == CT_PRECISION_BF16) {
    }
#undef PFAIL
    return CT_OK;
}
ct_status ct__model_arena_plan(const ct_gpt_config *cfg, const ct_params *P,
                               const ct_model_plan *plan, ct__arena *out, ct_err *err) {
    ct_status st;
    const ct_layout *lay = ct_params_layout(P);
    memset(out, 0, sizeof *out);
    if ((st = ct__model_plan_check(cfg, lay, ct_params_coords(P), plan, 0, "ct_model_mem_predict", err)) !=
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
    if ((st = ct__model_moe_config(cfg, lay, plan, nb, &mc, &lmoe, &xmoe, err)) != CT_OK) return st;
    arena_plan a;
    ct__model_plan_arena(&a, cfg, N, N > 1 && plan->sp, nb, ct_params_has_head(P), attn, plan->max_B,
               plan->max_T, plan->split_backward, plan->recompute, lmoe, xmoe, plan->loss_chunk,
               plan->precision == CT_PRECISION_BF16);
    out->moe_staging = cfg->experts > 0 ? ct_moe_staging_floats(&mc, lay->ep) : 0;
    out->slot = a.s.total, out->scratch = a.x.total;
    out->layer = (a.s.lnf - a.s.blk[0]) / (size_t)(nb ? nb : 1);
    out->recompute = a.x.rc_hi - a.x.rc_lo;
    out->blocks = nb;
    out->attention = attn;
    out->working = plan->precision == CT_PRECISION_BF16 ? 2 * ct_params_buffer_len(P) : 0;
    out->tp_staging = N > 1 ? ct__model_tp_staging_floats(cfg, plan->max_B, plan->max_T) : 0;
    /* the largest part: the arena's regions and copies, as the model cuts them */
    size_t total = a.x.total + plan->slots * a.s.total, *parts = NULL, np;
    const char **names = NULL;
    if (!(np = ct__model_arena_part_list(&a, plan->slots, &parts, &names)))
        return CT_ERR(err, CT_ERR_NOMEM, "ct_model_mem_predict: out of host memory");
    for (size_t i = 0; i < np; i++) {
        size_t len = (i + 1 < np ? parts[i + 1] : total * sizeof(float)) - parts[i];
        if (len / sizeof(float) > out->largest_part)
            out->largest_part = len / sizeof(float), out->largest_part_name = names[i];
    }
    free(parts), free(names);
    return CT_OK;
}


/* The largest indivisible device buffer part the model alone takes under `plan`: a parameter,
 * gradient or optimizer slice, an arena part, TP's device scratch (as the memory model counts
 * them). */
static ct_status model_largest(const ct_gpt_config *cfg, const ct_layout *layout,
                               const ct_coords *coords, const ct_model_plan *plan,
                               uint64_t *largest, ct_err *err) {
    ct_params *P = NULL;
    ct_params_plan pp = ct__model_params_plan(cfg, layout, plan);
    ct_status st = ct_params_create(&P, cfg, layout, coords, &pp, NULL, err);
    if (st != CT_OK) return st;
    *largest = 0;
    ct_params_buf bufs[CT_PARAMS_MAX_BUFFERS];
    int nb = ct_params_buffers(P, bufs);
    if (nb < 0) st = CT_ERR(err, CT_ERR_NOMEM, "the model's largest buffer: out of host memory");
    for (int k = 0; k < nb; k++)
        if (bufs[k].largest > *largest) *largest = bufs[k].largest;
    ct__arena a;
    if (st == CT_OK && (st = ct__model_arena_plan(cfg, P, plan, &a, err)) == CT_OK) {
        if (a.largest_part * sizeof(float) > *largest) *largest = a.largest_part * sizeof(float);
        if (plan->tp_comm == CT_TP_COMM_DEVICE && a.tp_staging * sizeof(float) > *largest)
            *largest = a.tp_staging * sizeof(float);
    }
    ct_params_free(P);
    return st;
}

int ct_model_gemm_exceeds(const ct_gpt_config *cfg, const ct_layout *layout,
                          const ct_coords *coords, const ct_model_plan *plan, uint64_t max_alloc) {
    ct_model_plan pg = *plan, pf = *plan;
    pg.attention = CT_ATTN_GEMM, pf.attention = CT_ATTN_FUSED;
    uint64_t g, f;
    ct_err e = {0};
    return model_largest(cfg, layout, coords, &pg, &g, &e) == CT_OK &&
           model_largest(cfg, layout, coords, &pf, &f, &e) == CT_OK && g > max_alloc &&
           f <= max_alloc;
}
