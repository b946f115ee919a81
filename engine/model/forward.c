/* forward.c - the model's forward on activation slots (a Llama model's block is llama.c's, its
 * embedding and final norm picked here): the embedding, block l (and, before a
 * block's backward, what the plan's recompute mode dropped) and the head with the loss, as
 * sequences of ops (ops.c, tp.c, moe.c) over views of the worker's parameters (params.c) and of
 * the arena (arena.c). The tokens go in and (when asked) the loss comes out; under TP the
 * collectives may stage through the host (tp.c), and the MoE layer reads its routing counts
 * back (moe.c). The model knows nothing of other workers beyond its TP and EP groups: the
 * executor (engine/step) gathers ZeRO-3 parameters before a block, reduces gradients after
 * one, and moves activations between pipeline stages. */
#include "ct_engine_ops_llama.h"
#include "model_impl.h"


/* Sequence parallelism splits the B*T tokens over the TP group: T must be a multiple of N. */
static ct_status check_sp(ct_model *m, int T, const char *what) {
    if (m->sp && T % m->N)
        return CT_ERR(&m->err, CT_ERR_ARG,
                      "%s: sequence %d is not a multiple of tp = %d (sequence parallelism splits "
                      "the tokens over the TP group)",
                      what, T, m->N);
    return CT_OK;
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
    if ((st = ct__model_check_ids(m, tokens, BT, "tokens")) != CT_OK) return st;
    slot_state *ss = &m->st[slot];
    ss->B = B, ss->T = T, ss->chunk = 0, ss->have_targets = 0, ss->logits_valid = 0;
    ss->loss_scale = 1.0f;
    size_t sb = slot_base(m, slot);
    RUN(CT_PROF_upload, ct_model_view_write(m, SV(tokens), tokens, BT * sizeof(int)));
    /* a Llama model has no positions (no wpe): the rotary embedding turns q and k */
    ct_view wpe = ct_gpt_is_llama(&m->cfg) ? ct_view_none() : PV(wpe, 0);
    RUN(CT_PROF_encoder_fwd, ct_tp_embed_forward(m->dev, m->tp, SA(in), XA(proj), SV(tokens),
                                            PV(wte, 0), wpe, B, T, m->cfg.channels,
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
    *in = aa(m, slot_base(m, slot) + m->ar.s.in, 0);
    return CT_OK;
}

ct_status ct_model_block_output(ct_model *m, int slot, int l, ct_view *out) {
    ct_status st;
    if ((st = check_slot(m, slot, "ct_model_block_output")) != CT_OK ||
        (st = check_layer(m, l, "ct_model_block_output")) != CT_OK)
        return st;
    *out = aa(m, slot_base(m, slot) + m->ar.s.blk[B_RES3], pos(m, l) * m->ar.lrow);
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
ct_status ct__model_block_run(ct_model *m, int slot, int l, int recompute) {
    ct_status st = CT_OK;
    if (ct_gpt_is_llama(&m->cfg)) return ct__llama_block_forward(m, slot, l, recompute);
    slot_state *ss = &m->st[slot];
    int B = ss->B, T = ss->T, C = m->cfg.channels, N = m->N, rb, rt;
    int Cl = C / N, NHl = m->cfg.heads / N; /* this worker's attention channels and heads */
    row_shape(m, B, T, &rb, &rt);
    size_t rowC = (size_t)rb * rt * C, BT = (size_t)B * T;
    bviews v;
    ct__model_block_views(m, slot, l, &v);
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
        RUN(P_qkv, ct_tp_col_forward(m->dev, m->tp, qkvr, ln1, XA(xfull), PV(qkvw, l),
                                     PV(qkvb, l), B, T, C, 3 * Cl));
        RUN(P_att, ct_attention_fused_forward(m->dev, &m->acfg, atty, att, qkvr, B, T, Cl, NHl));
    } else if (do_attn) {
        RUN(P_qkv, ct_tp_col_forward(m->dev, m->tp, XA(qkv), ln1, XA(xfull), PV(qkvw, l),
                                     PV(qkvb, l), B, T, C, 3 * Cl));
        RUN(P_att, ct_attention_forward(m->dev, atty, qkvr, att, XA(qkv), XA(vaccum), B, T, Cl,
                                        NHl));
    } else if (do_probs) {
        RUN(P_att, ct_attention_probs(m->dev, att, qkvr, XA(vaccum), B, T, Cl, NHl));
    }
    if (do_res2) {
        RUN(P_proj, ct_tp_row_forward(m->dev, m->tp, XA(proj), XA(proj), atty, PV(attprojw, l),
                                      PV(attprojb, l), B, T, Cl, C));
        RUN(P_res, ct_residual_forward(m->dev, res2, res, XA(proj), rowC));
    }
    if (!recompute) GROUP("attention");
    if (do_ln2)
        RUN(P_ln, ct_layernorm_forward(m->dev, ln2, v.t[B_LN2M], v.t[B_LN2R], res2, PV(ln2w, l),
                                       PV(ln2b, l), rb, rt, C));
    if (do_fc)
        RUN(P_fc, ct_tp_col_forward(m->dev, m->tp, fch, ln2, XA(xfull), PV(fcw, l), PV(fcb, l), B,
                                    T, C, 4 * Cl));
    if (do_gelu) RUN(P_gelu, ct_gelu_forward(m->dev, fchg, fch, BT * 4 * (size_t)Cl));
    if (!recompute && m->moe) {
        RUN(CT_PROF_moe_fwd, ct__model_moe_layer_forward(m, slot, l, ln2, rowC));
    } else if (!recompute) {
        RUN(CT_PROF_matmul_fcproj_fwd,
            ct_tp_row_forward(m->dev, m->tp, XA(proj), XA(proj), fchg, PV(fcprojw, l),
                              PV(fcprojb, l), B, T, 4 * Cl, C));
    }
    if (!recompute) {
        RUN(CT_PROF_residual_fwd,
            ct_residual_forward(m->dev, v.t[B_RES3], res2, XA(proj), rowC));
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
    return dev_fail(m, ct__model_block_run(m, slot, l, 0), "ct_model_block_forward");
}



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
    if (targets && (st = ct__model_check_ids(m, targets, BT, "targets")) != CT_OK) return st;
    row_shape(m, B, T, &rb, &rt);
    ct_view last = BA(blk[B_RES3], pos(m, last_layer(m)) * m->ar.lrow);
    double tg_ = ct_time_now();
    if (targets)
        RUN(CT_PROF_upload, ct_model_view_write(m, SV(targets), targets, BT * sizeof(int)));
    ct_view headw = ct__model_head_weight(m, 0); /* wte, or an untied Llama's lm_head */
    if (ct_gpt_is_llama(&m->cfg))
        RUN(CT_PROF_layernorm_fwd, ct_rmsnorm_forward(m->dev, SA(lnf), SV(lnfr), last,
                                                      PV(lnfw, 0), rb, rt, C, m->cfg.norm_eps));
    else
        RUN(CT_PROF_layernorm_fwd, ct_layernorm_forward(m->dev, SA(lnf), SV(lnfm), SV(lnfr), last,
                                                   PV(lnfw, 0), PV(lnfb, 0), rb, rt, C));
    size_t rows = ct__head_rows(m->plan.loss_chunk, B, T, m->sp ? m->N : 1);
    if (rows < BT) {
        if (!targets) {
            st = CT_ERR(&m->err, CT_ERR_ARG,
                        "ct_model_head_forward: logits of %zu rows without targets, above the "
                        "loss chunk of %zu rows (the head keeps one chunk's logits)",
                        BT, rows);
            goto cleanup;
        }
        /* in chunks of rows: each chunk's logits, then its losses (the logits are not kept).
         * Under sequence parallelism a chunk is rows k = rows/N from each worker's BT/N, l0 on,
         * gathered by the product: its logits' block w are global rows w BT/N + l0 .. + k, so
         * the losses go block by block */
        size_t spn = m->sp ? (size_t)m->N : 1, BTl = BT / spn, kc = rows / spn;
        size_t Vl = (size_t)Vp / m->N;
        for (size_t l0 = 0; l0 < BTl; l0 += kc) {
            size_t k = BTl - l0 < kc ? BTl - l0 : kc;
            RUN(CT_PROF_matmul_logits_fwd,
                ct_tp_col_forward(m->dev, m->tp, SA(logits), ct_view_at(SA(lnf), l0 * C),
                                  XA(xfull), headw, ct_view_none(), 1, (int)(k * spn), C,
                                  (int)Vl));
            for (size_t w = 0; w < spn; w++) {
                size_t g0 = w * BTl + l0;
                RUN(CT_PROF_crossentropy_fwd,
                    ct_tp_crossentropy_forward(
                        m->dev, m->tp, ct_view_at(SV(losses), g0), ct_view_at(SV(lse), g0),
                        XV(stats), ct_view_at(SA(logits), w * k * Vl),
                        ct_view_at(SV(targets), g0), 1, (int)k, m->cfg.vocab, Vp));
            }
        }
        ss->have_targets = 1;
        ss->logits_valid = 0;
        RUN(CT_PROF_crossentropy_fwd, ct_mean_forward(m->dev, SV(loss), SV(losses), BT));
        if (loss) RUN(CT_PROF_readback, ct_model_view_read(m, SV(loss), loss, sizeof *loss));
        GROUP("logits and loss");
        goto cleanup;
    }
    /* the logits: column-parallel over the vocabulary (this worker's Vp/N columns) */
    RUN(CT_PROF_matmul_logits_fwd, ct_tp_col_forward(m->dev, m->tp, SA(logits), SA(lnf), XA(xfull),
                                                headw, ct_view_none(), B, T, C, Vp / m->N));
    ss->have_targets = targets != NULL;
    ss->logits_valid = 1;
    if (targets) {
        RUN(CT_PROF_crossentropy_fwd,
            ct_tp_crossentropy_forward(m->dev, m->tp, SV(losses), SV(lse), XV(stats), SA(logits),
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
    ct_view lg = aa(m, slot_base(m, slot) + m->ar.s.logits, 0);
    if (lg.store != CT_STORE_BF16) return ct_model_view_read(m, lg, host, n * sizeof(float));
    /* bf16 logits: read into the upper half of host, widened in place from the front */
    uint16_t *h16 = (uint16_t *)(host + n / 2 + n % 2);
    if ((st = ct_model_view_read(m, lg, h16, n * 2)) != CT_OK) return st;
    for (size_t i = 0; i < n; i++) host[i] = ct_bf16_to_f32(h16[i]);
    return CT_OK;
}

/* ---- the single-worker forward (sampling, tests' forward-only checks) */

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
        ((st = ct__model_check_ids(m, tokens, (size_t)B * T, "tokens")) != CT_OK ||
         (targets && (st = ct__model_check_ids(m, targets, (size_t)B * T, "targets")) != CT_OK)))
        return st;
    if ((st = ct_model_embed_forward(m, 0, tokens, B, T)) != CT_OK) return st;
    for (int l = 0; l < m->cfg.layers; l++)
        if ((st = ct_model_block_forward(m, 0, l)) != CT_OK) return st;
    return ct_model_head_forward(m, 0, targets, loss);
}

ct_status ct_model_logits(ct_model *m, float *host, size_t n) {
    return ct_model_slot_logits(m, 0, host, n);
}
