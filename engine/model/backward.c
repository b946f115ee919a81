/* backward.c - the model's backward on activation slots (a Llama model's block is llama.c's,
 * its final RMSNorm and embedding picked here): the head (cross-entropy, logits, final
 * LayerNorm), block l (whole, or the zero-bubble input and weight halves), the embedding. Each
 * adds into the worker's gradients and passes the residual gradient along in ct_model_dres;
 * none reads its forward's outputs but from the slot (or, under recomputation, from the scratch
 * its recomputed forward refills: forward.c). */
#include "ct_engine_ops_llama.h"
#include "model_impl.h"


/* The final norm's backward: dres = the gradient of the last block's output (from dA). */
static ct_status final_norm_backward(ct_model *m, size_t sb, ct_view last, int rb, int rt) {
    int C = m->cfg.channels;
    if (ct_gpt_is_llama(&m->cfg))
        return ct_rmsnorm_backward(m->dev, XA(dres), GV(lnfw, 0), XA(dA), last, PV(lnfw, 0),
                                   SV(lnfr), rb, rt, C, 0);
    return ct_layernorm_backward(m->dev, XA(dres), GV(lnfw, 0), GV(lnfb, 0), XA(dA), last,
                                 PV(lnfw, 0), SV(lnfm), SV(lnfr), rb, rt, C, 0);
}

/* ZeRO-2's wte gradient in windows (ct_params_wte_window rows each; the plan keeps them to fp32
 * and no sequence parallelism): the head's weight gradient from n rows of dlogits (n, Vl) and
 * their input x (n, C), one window of wte's rows at a time, each added to the host
 * accumulator. */
static ct_status head_dw_windows(ct_model *m, ct_view dlogits, ct_view x, size_t n) {
    size_t wr = ct_params_wte_window(m->P), C = (size_t)m->cfg.channels;
    size_t Vl = (size_t)m->cfg.padded_vocab / (size_t)m->N;
    ct_view win = ct__model_head_weight(m, 1);
    ct_status st = CT_OK;
    for (size_t r0 = 0; r0 < Vl && st == CT_OK; r0 += wr) {
        size_t nr = Vl - r0 < wr ? Vl - r0 : wr;
        st = ct_gemm(m->dev, 1, 0, nr, C, n, 1.0f, dlogits.mem, dlogits.off + r0, Vl, x.mem, x.off,
                     C, 1.0f, win.mem, win.off, C, NULL);
        if (st == CT_OK && (st = ct_params_wte_window_add(m->P, r0, nr)) != CT_OK)
            CT_ERR(&m->err, st, "%s", ct_params_errmsg(m->P));
    }
    return st;
}

ct_status ct_model_head_backward(ct_model *m, int slot, float loss_scale) {
    ct_status st = CT_OK;
    if ((st = check_slot(m, slot, "ct_model_head_backward")) != CT_OK) return st;
    slot_state *ss = &m->st[slot];
    int B = ss->B, T = ss->T, C = m->cfg.channels, Vp = m->cfg.padded_vocab, rb, rt;
    size_t BT = (size_t)B * T, sb = slot_base(m, slot);
    size_t rows = ct__head_rows(m->plan.loss_chunk, B, T, m->sp ? m->N : 1); /* < BT: chunks */
    if ((!ss->logits_valid && rows == BT) || !ss->have_targets)
        return CT_ERR(&m->err, CT_ERR_STATE,
                      "ct_model_head_backward: needs a forward with targets first (and only one "
                      "backward per forward)");
    row_shape(m, B, T, &rb, &rt);
    ct_view last = BA(blk[B_RES3], pos(m, last_layer(m)) * m->ar.lrow);
    ct_view hw = ct__model_head_weight(m, 0), dhw = ct__model_head_weight(m, 1);
    int win = ct_params_wte_window(m->P) > 0; /* wte's gradient window by window, after dX */
    if (win) dhw = ct_view_none();
    ss->logits_valid = 0; /* the logits become their gradient */
    ss->loss_scale = loss_scale;
    double tg_ = ct_time_now();
    if (rows < BT) {
        ss->have_targets = 0; /* one backward per forward */
        /* each chunk's logits again (the forward kept none), their gradient in place, and its
         * products: the rows' part of dlnf, wte's gradient accumulated chunk by chunk. Under
         * sequence parallelism the chunks are forward.c's (k of each worker's rows, gathered):
         * the gradient block by block, the input gradient's product over the chunk's gathered
         * rows reduce-scattered onto this worker's k (in place, as the unchunked head does) */
        size_t spn = m->sp ? (size_t)m->N : 1, BTl = BT / spn, kc = rows / spn;
        size_t Vl = (size_t)Vp / m->N;
        for (size_t l0 = 0; l0 < BTl; l0 += kc) {
            size_t k = BTl - l0 < kc ? BTl - l0 : kc;
            int n = (int)(k * spn);
            ct_view x = ct_view_at(SA(lnf), l0 * C), dx = ct_view_at(XA(dA), l0 * C);
            RUN(CT_PROF_recompute,
                ct_tp_col_forward(m->dev, m->tp, SA(logits), x, XA(xfull), hw, ct_view_none(), 1,
                                  n, C, (int)Vl));
            for (size_t w = 0; w < spn; w++) {
                size_t g0 = w * BTl + l0;
                RUN(CT_PROF_crossentropy_bwd,
                    ct_tp_crossentropy_backward(m->dev, m->tp, ct_view_at(SA(logits), w * k * Vl),
                                                ct_view_at(SV(lse), g0),
                                                ct_view_at(SV(targets), g0),
                                                loss_scale / (float)BT, 1, (int)k, m->cfg.vocab,
                                                Vp));
            }
            RUN(CT_PROF_matmul_logits_bwd,
                ct_tp_col_backward(m->dev, m->tp, dx, dhw, ct_view_none(), SA(logits), x,
                                   XA(xfull), dx, hw, 1, n, C, (int)Vl));
            if (win) RUN(CT_PROF_matmul_logits_bwd, head_dw_windows(m, SA(logits), x, (size_t)n));
        }
        RUN(CT_PROF_layernorm_bwd, final_norm_backward(m, sb, last, rb, rt));
        GROUP("logits and loss backward");
        goto cleanup;
    }
    RUN(CT_PROF_crossentropy_bwd,
        ct_tp_crossentropy_backward(m->dev, m->tp, SA(logits), SV(lse), SV(targets),
                                    loss_scale / (float)BT, B, T, m->cfg.vocab, Vp));
    RUN(CT_PROF_matmul_logits_bwd,
        ct_tp_col_backward(m->dev, m->tp, XA(dA), dhw, ct_view_none(), SA(logits), SA(lnf),
                           XA(xfull), XA(dA), hw, B, T, C, Vp / m->N));
    if (win) RUN(CT_PROF_matmul_logits_bwd, head_dw_windows(m, SA(logits), SA(lnf), BT));
    RUN(CT_PROF_layernorm_bwd, final_norm_backward(m, sb, last, rb, rt));
    GROUP("logits and loss backward");
cleanup:
    return dev_fail(m, st, "ct_model_head_backward");
}

ct_status ct_model_set_loss_scale(ct_model *m, int slot, float loss_scale) {
    ct_status st = check_slot(m, slot, "ct_model_set_loss_scale");
    if (st == CT_OK) m->st[slot].loss_scale = loss_scale;
    return st;
}

/* Block l's backward as one sequence of steps, each done as `part` asks: the whole backward
 * (under tensor parallelism the column- and row-parallel products with their collectives; a
 * mixture-of-experts MLP), or one of the zero-bubble halves (one worker per layer: tensor
 * parallelism and experts refuse the split at creation). The input half runs the whole
 * backward's input-gradient products (the same values), keeping for the weight half the
 * gradients each weight product reads: those of the block's output and of the residual after
 * ln2 (copied from dres, which the next blocks overwrite), dln2 and dln1 (written there
 * directly), and those of fch and qkv (copied over fch and qkvr, which only the input half
 * reads). The weight half runs the same weight products on them, so the halves add bitwise what
 * the whole backward adds. */
ct_status ct_model_block_backward(ct_model *m, int slot, int l, ct_backward_part part) {
    static const char *const what[] = {"ct_model_block_backward", "ct_model_block_backward_input",
                                       "ct_model_block_backward_weight"};
    ct_status st = CT_OK;
    if (part < CT_BACKWARD_WHOLE || part > CT_BACKWARD_WEIGHT)
        return CT_ERR(&m->err, CT_ERR_ARG, "ct_model_block_backward: part %d is not whole, input "
                                           "or weight", (int)part);
    const char *fn = what[part];
    if ((st = check_slot(m, slot, fn)) != CT_OK || (st = check_layer(m, l, fn)) != CT_OK)
        return st;
    int whole = part == CT_BACKWARD_WHOLE, input = part == CT_BACKWARD_INPUT;
    if (!whole && !m->plan.split_backward)
        return CT_ERR(&m->err, CT_ERR_STATE,
                      "%s: the model was planned without split backward (ct_model_plan."
                      "split_backward: the slots keep no room for the deferred weight gradient)",
                      fn);
    slot_state *ss = &m->st[slot];
    int B = ss->B, T = ss->T, C = m->cfg.channels, N = m->N, rb, rt;
    int Cl = C / N, NHl = m->cfg.heads / N;
    if (B < 1) return CT_ERR(&m->err, CT_ERR_STATE, "%s: slot %d is empty", fn, slot);
    row_shape(m, B, T, &rb, &rt);
    size_t BT = (size_t)B * T, BTC = BT * C;
    bviews v;
    ct__model_block_views(m, slot, l, &v);
    ct_view res = v.res, ln1 = v.t[B_LN1], qkvr = v.t[B_QKVR], att = v.t[B_ATT];
    ct_view atty = v.t[B_ATTY], res2 = v.t[B_RES2], ln2 = v.t[B_LN2], fch = v.t[B_FCH];
    ct_view fchg = v.t[B_FCHG], none = ct_view_none();
    /* the split's kept gradients: [output | dln2 | residual after ln2 | dln1] per block; those
     * of fch and qkv over fch and qkvr */
    ct_view wdout = v.wg, wdln2 = ct_view_at(v.wg, m->ar.lrow);
    ct_view wdres2 = ct_view_at(v.wg, 2 * m->ar.lrow), wdln1 = ct_view_at(v.wg, 3 * m->ar.lrow);
    /* where the LayerNorms' input gradients land: scratch, or kept for the weight half */
    ct_view dln2 = whole ? XA(dA) : wdln2, dln1 = whole ? XA(dA) : wdln1;
#define COPY(prof, from, to, n) \
    RUN(prof, ct_mem_copy(m->dev, (from).mem, (from).off * ct_view_elem_bytes(from), (to).mem, \
                          (to).off * ct_view_elem_bytes(to), (n) * ct_view_elem_bytes(from)))
    /* what the plan's recompute mode dropped, back (the weight half reads only what it kept:
     * attention mode under the split drops only the probabilities; block mode refuses it) */
    if (part != CT_BACKWARD_WEIGHT && m->plan.recompute != CT_RECOMPUTE_NONE &&
        (st = ct__model_block_run(m, slot, l, 1)) != CT_OK)
        goto cleanup;
    if (ct_gpt_is_llama(&m->cfg)) {
        st = ct__llama_block_backward(m, slot, l, part);
        goto cleanup;
    }
    double tg_ = ct_time_now();
    /* ---- the MLP: dA = the gradient of ln2's output */
    if (whole && m->moe) {
        RUN(CT_PROF_moe_bwd, ct__model_moe_layer_backward(m, slot, l, ln2, (size_t)rb * rt * C));
    } else if (whole) {
        RUN(CT_PROF_matmul_fcproj_bwd,
            ct_tp_row_backward(m->dev, m->tp, XA(dA), GV(fcprojw, l), GV(fcprojb, l), XA(dres),
                               XA(dfull), fchg, PV(fcprojw, l), B, T, 4 * Cl, C));
        RUN(CT_PROF_gelu_bwd, ct_gelu_backward(m->dev, XA(dB), fch, XA(dA), BT * 4 * (size_t)Cl));
        RUN(CT_PROF_matmul_fc_bwd,
            ct_tp_col_backward(m->dev, m->tp, XA(dA), GV(fcw, l), GV(fcb, l), XA(dB), ln2,
                               XA(xfull), XA(dA), PV(fcw, l), B, T, C, 4 * Cl));
    } else if (input) {
        COPY(CT_PROF_matmul_fcproj_bwd, XA(dres), wdout, BTC);
        RUN(CT_PROF_matmul_fcproj_bwd, ct_matmul_backward(m->dev, XA(dA), none, none, XA(dres),
                                                          fchg, PV(fcprojw, l), B, T, 4 * C, C));
        RUN(CT_PROF_gelu_bwd, ct_gelu_backward(m->dev, XA(dB), fch, XA(dA), 4 * BTC));
        COPY(CT_PROF_gelu_bwd, XA(dB), fch, 4 * BTC);
        RUN(CT_PROF_matmul_fc_bwd, ct_matmul_backward(m->dev, wdln2, none, none, XA(dB), ln2,
                                                      PV(fcw, l), B, T, C, 4 * C));
    } else { /* weight: fch holds its gradient now */
        RUN(CT_PROF_matmul_fcproj_bwd, ct_matmul_backward(m->dev, none, GV(fcprojw, l),
                                                          GV(fcprojb, l), wdout, fchg, none, B,
                                                          T, 4 * C, C));
        RUN(CT_PROF_matmul_fc_bwd, ct_matmul_backward(m->dev, none, GV(fcw, l), GV(fcb, l), fch,
                                                      ln2, none, B, T, C, 4 * C));
    }
    /* ---- ln2: dres += its input gradient (the residual branch); its weights' gradients */
    RUN(CT_PROF_layernorm_bwd,
        ct_layernorm_backward(m->dev, whole || input ? XA(dres) : none,
                              input ? none : GV(ln2w, l), input ? none : GV(ln2b, l), dln2, res2,
                              part == CT_BACKWARD_WEIGHT ? none : PV(ln2w, l), v.t[B_LN2M],
                              v.t[B_LN2R], rb, rt, C, part != CT_BACKWARD_WEIGHT));
    if (whole) GROUP("mlp backward");
    else if (input) GROUP("mlp backward (input)");
    /* ---- attention: dA = the gradient of the attention output; dB of qkv */
    if (whole)
        RUN(CT_PROF_matmul_attproj_bwd,
            ct_tp_row_backward(m->dev, m->tp, XA(dA), GV(attprojw, l), GV(attprojb, l), XA(dres),
                               XA(dfull), atty, PV(attprojw, l), B, T, Cl, C));
    else if (input) {
        COPY(CT_PROF_matmul_attproj_bwd, XA(dres), wdres2, BTC);
        RUN(CT_PROF_matmul_attproj_bwd, ct_matmul_backward(m->dev, XA(dA), none, none, XA(dres),
                                                           atty, PV(attprojw, l), B, T, C, C));
    } else
        RUN(CT_PROF_matmul_attproj_bwd, ct_matmul_backward(m->dev, none, GV(attprojw, l),
                                                           GV(attprojb, l), wdres2, atty, none,
                                                           B, T, C, C));
    if (part != CT_BACKWARD_WEIGHT) {
        if (m->attn == CT_ATTN_FUSED)
            RUN(CT_PROF_attention_bwd,
                ct_attention_fused_backward(m->dev, &m->acfg, XA(dB), (m->attn == CT_ATTN_FUSED ? XV(datt) : XA(datt)), XA(dA), qkvr,
                                            atty, att, B, T, Cl, NHl));
        else
            RUN(CT_PROF_attention_bwd,
                ct_attention_backward(m->dev, XA(dB), XA(dqkvr), (m->attn == CT_ATTN_FUSED ? XV(datt) : XA(datt)), XA(dvaccum), XA(dA),
                                      qkvr, att, B, T, Cl, NHl));
    }
    if (whole)
        RUN(CT_PROF_matmul_qkv_bwd,
            ct_tp_col_backward(m->dev, m->tp, XA(dA), GV(qkvw, l), GV(qkvb, l), XA(dB), ln1,
                               XA(xfull), XA(dA), PV(qkvw, l), B, T, C, 3 * Cl));
    else if (input) {
        COPY(CT_PROF_attention_bwd, XA(dB), qkvr, 3 * BTC);
        RUN(CT_PROF_matmul_qkv_bwd, ct_matmul_backward(m->dev, wdln1, none, none, XA(dB), ln1,
                                                       PV(qkvw, l), B, T, C, 3 * C));
    } else /* qkvr holds the gradient of qkv now */
        RUN(CT_PROF_matmul_qkv_bwd, ct_matmul_backward(m->dev, none, GV(qkvw, l), GV(qkvb, l),
                                                       qkvr, ln1, none, B, T, C, 3 * C));
    /* ---- ln1 */
    RUN(CT_PROF_layernorm_bwd,
        ct_layernorm_backward(m->dev, whole || input ? XA(dres) : none,
                              input ? none : GV(ln1w, l), input ? none : GV(ln1b, l), dln1, res,
                              part == CT_BACKWARD_WEIGHT ? none : PV(ln1w, l), v.t[B_LN1M],
                              v.t[B_LN1R], rb, rt, C, part != CT_BACKWARD_WEIGHT));
    GROUP(whole ? "attention backward" : input ? "attention backward (input)" : "weight gradients");
#undef COPY
cleanup:
    return dev_fail(m, st, fn);
}

ct_status ct_model_embed_backward(ct_model *m, int slot) {
    ct_status st = CT_OK;
    if ((st = check_slot(m, slot, "ct_model_embed_backward")) != CT_OK) return st;
    if (!ct_params_has_embed(m->P))
        return CT_ERR(&m->err, CT_ERR_STATE,
                      "ct_model_embed_backward: this worker does not hold the embedding");
    slot_state *ss = &m->st[slot];
    size_t sb = slot_base(m, slot);
    size_t wr = ct_params_wte_window(m->P);
    if (wr) {
        /* ZeRO-2's wte gradient in windows (no sequence parallelism: dres holds every row):
         * wpe's gradient once, each window's rows of wte added to the host accumulator */
        size_t Vl = (size_t)m->cfg.padded_vocab / (size_t)m->N;
        for (size_t r0 = 0; r0 < Vl; r0 += wr) {
            size_t nr = Vl - r0 < wr ? Vl - r0 : wr;
            RUN(CT_PROF_encoder_bwd,
                ct_encoder_backward_vp(m->dev, GV(wte, 0), r0 ? ct_view_none() : GV(wpe, 0),
                                       XA(dres), SV(tokens), ss->B, ss->T, m->cfg.channels,
                                       (int)((size_t)m->r * Vl + r0), (int)nr));
            if ((st = ct_params_wte_window_add(m->P, r0, nr)) != CT_OK) {
                CT_ERR(&m->err, st, "%s", ct_params_errmsg(m->P));
                goto cleanup;
            }
        }
        goto cleanup;
    }
    /* a Llama model has no positions: no wpe (the token embedding alone) */
    ct_view dwpe = ct_gpt_is_llama(&m->cfg) ? ct_view_none() : GV(wpe, 0);
    RUN(CT_PROF_encoder_bwd, ct_tp_embed_backward(m->dev, m->tp, GV(wte, 0), dwpe, XA(dres),
                                             XA(dfull), SV(tokens), ss->B, ss->T,
                                             m->cfg.channels, m->cfg.padded_vocab));
cleanup:
    return dev_fail(m, st, "ct_model_embed_backward");
}

