/* llama.c - a Llama block's forward and backward on activation slots (Hugging Face's
 * LlamaDecoderLayer): RMSNorm, the q|k|v product, RoPE on q and k, grouped-query attention
 * through the multi-head ops (each kv head repeated for its query heads, ops_llama.c), the output
 * product and residual; RMSNorm, gate and up products, SwiGLU, the down product and residual.
 * Under tensor parallelism over N workers (tp.c's pieces, Megatron's split as GPT-2's block):
 * q|k|v column-parallel by heads (NH/N query and NKV/N kv heads each, params.c's sections),
 * attention on those heads, o row-parallel; gate and up column-parallel (F/N rows of each),
 * SwiGLU local, down row-parallel; the RMSNorms replicated, on this worker's rows under sequence
 * parallelism. With experts the MLP is moe.c's layer of SwiGLU experts (forward.c's and
 * backward.c's MoE helpers, as GPT-2's block). The plan's recompute mode reruns what it dropped before the block's backward;
 * the backward also runs as the zero-bubble schedules' input and weight halves (one worker per
 * block: arena.c refuses the split under TP). The embedding and head differ from GPT-2's in two
 * ops each (forward.c, backward.c). Saved tensors are the GPT-2 block's slots (arena.c says
 * which holds what). */
#include "ct_engine_ops_llama.h"
#include "model_impl.h"

/* The fcw rows [gate; up]: half k (0 gate, 1 up) of block l's weight (params or grads). */
static ct_view half_of(ct_view w, int k, int F, int C) {
    return ct_view_at(w, (size_t)k * F * C);
}

ct_status ct__llama_block_forward(ct_model *m, int slot, int l, int recompute) {
    ct_status st = CT_OK;
    slot_state *ss = &m->st[slot];
    const ct_gpt_config *c = &m->cfg;
    int B = ss->B, T = ss->T, C = c->channels, N = m->N, rb, rt;
    /* this worker's heads, kv heads, attention channels, MLP width and q|k|v rows */
    int NH = c->heads / N, NKV = ct_gpt_kv_heads(c) / N, hd = C / c->heads, Cl = C / N;
    int F = ct_gpt_ffn(c) / N, Cr = ct_gpt_qkv_rows(c) / N;
    row_shape(m, B, T, &rb, &rt);
    size_t BT = (size_t)B * T, rowC = (size_t)rb * rt * C, BTF = BT * F;
    float eps = c->norm_eps, theta = c->rope_theta;
    bviews v;
    ct__model_block_views(m, slot, l, &v);
    ct_view res = v.res, none = ct_view_none();
    ct_view h1 = v.t[B_LN1], qkv = v.t[B_QKVR], att = v.t[B_ATT], atty = v.t[B_ATTY];
    ct_view res2 = v.t[B_RES2], h2 = v.t[B_LN2], fch = v.t[B_FCH], fchg = v.t[B_FCHG];
    ct_view raw = XA(dB); /* the GEMM's q|k|v (B,T,Cr): dB is the backward's scratch */
    ct_view gate = fch, up = ct_view_at(fch, BTF);
    /* which steps run: all of them forward; recomputing (before the backward), those whose
     * outputs the plan's mode dropped, into the recompute scratch: the same kernels on the same
     * inputs, so the same bits (block mode: all but the down product and the last residual add,
     * whose output is kept; attention mode: the norms, the probabilities and SwiGLU) */
    const int *kept = m->ar.kept;
    int all = !recompute;
    int do_ln1 = all || !kept[B_LN1] || !kept[B_LN1R];
    int do_attn = all || !kept[B_QKVR] || !kept[B_ATTY];
    int do_probs = !do_attn && !kept[B_ATT];
    int do_res2 = all || !kept[B_RES2];
    int do_ln2 = all || !kept[B_LN2] || !kept[B_LN2R];
    int do_fc = !m->moe && (all || !kept[B_FCH]), do_glu = !m->moe && (all || !kept[B_FCHG]);
    int P_ln = recompute ? CT_PROF_recompute : CT_PROF_layernorm_fwd;
    int P_qkv = recompute ? CT_PROF_recompute : CT_PROF_matmul_qkv_fwd;
    int P_att = recompute ? CT_PROF_recompute : CT_PROF_attention_fwd;
    int P_proj = recompute ? CT_PROF_recompute : CT_PROF_matmul_attproj_fwd;
    int P_res = recompute ? CT_PROF_recompute : CT_PROF_residual_fwd;
    int P_fc = recompute ? CT_PROF_recompute : CT_PROF_matmul_fc_fwd;
    int P_glu = recompute ? CT_PROF_recompute : CT_PROF_gelu_fwd;
    double tg_ = ct_time_now();
    if (do_ln1)
        RUN(P_ln, ct_rmsnorm_forward(m->dev, h1, v.t[B_LN1R], res, PV(ln1w, l), rb, rt, C, eps));
    if (do_attn) { /* SP: ln1's rows gathered into xfull first */
        RUN(P_qkv, ct_tp_col_forward(m->dev, m->tp, raw, h1, XA(xfull), PV(qkvw, l), none, B, T,
                                     C, Cr));
        RUN(P_att, ct_rope_forward(m->dev, raw, raw, B, T, NH, hd, Cr, theta));
        RUN(P_att, ct_rope_forward(m->dev, ct_view_at(raw, Cl), ct_view_at(raw, Cl), B, T, NKV,
                                   hd, Cr, theta));
    }
    if (do_attn && m->attn == CT_ATTN_FUSED) { /* the expanded q|k|v is what the backward reads */
        RUN(P_att, ct_gqa_expand_forward(m->dev, qkv, raw, B, T, NH, NKV, hd));
        RUN(P_att, ct_attention_fused_forward(m->dev, &m->acfg, atty, att, qkv, B, T, Cl, NH));
    } else if (do_attn) {
        RUN(P_att, ct_gqa_expand_forward(m->dev, XA(qkv), raw, B, T, NH, NKV, hd));
        RUN(P_att,
            ct_attention_forward(m->dev, atty, qkv, att, XA(qkv), XA(vaccum), B, T, Cl, NH));
    } else if (do_probs) {
        RUN(P_att, ct_attention_probs(m->dev, att, qkv, XA(vaccum), B, T, Cl, NH));
    }
    if (do_res2) { /* o row-parallel: the partial products summed (SP: reduce-scattered) */
        RUN(P_proj, ct_tp_row_forward(m->dev, m->tp, XA(proj), XA(proj), atty, PV(attprojw, l),
                                      none, B, T, Cl, C));
        RUN(P_res, ct_residual_forward(m->dev, res2, res, XA(proj), rowC));
    }
    if (!recompute) GROUP("attention");
    if (do_ln2)
        RUN(P_ln, ct_rmsnorm_forward(m->dev, h2, v.t[B_LN2R], res2, PV(ln2w, l), rb, rt, C, eps));
    if (do_fc) { /* gate and up read the same (SP: gathered once) rows */
        RUN(P_fc, ct_tp_col_forward(m->dev, m->tp, gate, h2, XA(xfull),
                                    half_of(PV(fcw, l), 0, F, C), none, B, T, C, F));
        RUN(P_fc, ct_matmul_forward(m->dev, up, m->sp ? XA(xfull) : h2,
                                    half_of(PV(fcw, l), 1, F, C), none, B, T, C, F));
    }
    if (do_glu) RUN(P_glu, ct_swiglu_forward(m->dev, fchg, gate, up, BTF));
    if (recompute) {
        GROUP("recompute");
        goto cleanup;
    }
    if (m->moe) /* SwiGLU experts (moe.c) in place of gate, up and down */
        RUN(CT_PROF_moe_fwd, ct__model_moe_layer_forward(m, slot, l, h2, rowC));
    else
        RUN(CT_PROF_matmul_fcproj_fwd, ct_tp_row_forward(m->dev, m->tp, XA(proj), XA(proj), fchg,
                                                         PV(fcprojw, l), none, B, T, F, C));
    RUN(CT_PROF_residual_fwd, ct_residual_forward(m->dev, v.t[B_RES3], res2, XA(proj), rowC));
    GROUP("mlp");
cleanup:
    return st;
}

/* dres holds the gradient of the block's output; it leaves holding that of its input. The
 * zero-bubble halves (GPT-2's contract, backward.c): the input half runs the input-gradient
 * products, keeping for the weight half the gradients the weight products read: of the output
 * and of the residual after the post-attention norm (copied from dres), of h2 and h1 (written
 * there directly), of gate|up over fch and of the GEMM's q|k|v over the expanded q|k|v (which
 * only the input half reads). The weight half runs the same weight products on them. */
ct_status ct__llama_block_backward(ct_model *m, int slot, int l, ct_backward_part part) {
    ct_status st = CT_OK;
    slot_state *ss = &m->st[slot];
    const ct_gpt_config *c = &m->cfg;
    int B = ss->B, T = ss->T, C = c->channels, N = m->N, rb, rt;
    int NH = c->heads / N, NKV = ct_gpt_kv_heads(c) / N, hd = C / c->heads, Cl = C / N;
    int F = ct_gpt_ffn(c) / N, Cr = ct_gpt_qkv_rows(c) / N;
    row_shape(m, B, T, &rb, &rt);
    size_t BT = (size_t)B * T, BTC = BT * C, BTF = BT * F, rowC = (size_t)rb * rt * C;
    float theta = c->rope_theta;
    int whole = part == CT_BACKWARD_WHOLE, input = part == CT_BACKWARD_INPUT;
    int wonly = part == CT_BACKWARD_WEIGHT;
    bviews v;
    ct__model_block_views(m, slot, l, &v);
    ct_view res = v.res, none = ct_view_none();
    ct_view h1 = v.t[B_LN1], qkv = v.t[B_QKVR], att = v.t[B_ATT], atty = v.t[B_ATTY];
    ct_view res2 = v.t[B_RES2], h2 = v.t[B_LN2], fch = v.t[B_FCH], fchg = v.t[B_FCHG];
    ct_view gate = fch, up = ct_view_at(fch, BTF);
    ct_view dA = XA(dA), dB = XA(dB), dres = XA(dres), tmp = XA(proj);
    /* the split's kept gradients: [output | dh2 | residual after ln2 | dh1] per block */
    ct_view wdout = v.wg, wdh2 = ct_view_at(v.wg, BTC), wdres2 = ct_view_at(v.wg, 2 * BTC);
    ct_view wdh1 = ct_view_at(v.wg, 3 * BTC);
    ct_view dh2 = whole ? dA : wdh2, dh1 = whole ? dB : wdh1;
    /* the weights' gradients (whole and weight half) and the weights (whole and input half) */
#define DW(t) (input ? none : GV(t, l))
#define WI(t) (wonly ? none : PV(t, l))
#define COPY(from, to, n)                                                                          \
    RUN(CT_PROF_attention_bwd,                                                                     \
        ct_mem_copy(m->dev, (from).mem, (from).off * ct_view_elem_bytes(from), (to).mem,           \
                    (to).off * ct_view_elem_bytes(to), (n) * ct_view_elem_bytes(from)))
    double tg_ = ct_time_now();
    /* ---- the MLP: dh2 = the gradient of h2 (SwiGLU experts: moe.c, whole backward only) */
    if (m->moe) {
        RUN(CT_PROF_moe_bwd, ct__model_moe_layer_backward(m, slot, l, h2, rowC));
    } else if (!wonly) {
        if (input) COPY(dres, wdout, BTC);
        /* down row-parallel (SP: the output gradient's rows gathered first) */
        RUN(CT_PROF_matmul_fcproj_bwd,
            ct_tp_row_backward(m->dev, m->tp, dA, DW(fcprojw), none, dres, XA(dfull), fchg,
                               PV(fcprojw, l), B, T, F, C));
        RUN(CT_PROF_gelu_bwd,
            ct_swiglu_backward(m->dev, dB, ct_view_at(dB, BTF), dA, gate, up, BTF));
        /* gate and up column-parallel over the same input: the two partial input gradients
         * added, then summed over the TP group (SP: reduce-scattered into this worker's rows;
         * ln2's output gathered again for the weight gradients, as it was not kept) */
        ct_view x2 = h2;
        if (m->sp) {
            RUN(CT_PROF_matmul_fc_bwd, ct_tp_allgather(m->dev, m->tp, XA(xfull), h2, rowC));
            x2 = XA(xfull);
        }
        RUN(CT_PROF_matmul_fc_bwd,
            ct_matmul_backward(m->dev, dh2, whole ? half_of(GV(fcw, l), 0, F, C) : none, none, dB,
                               x2, half_of(PV(fcw, l), 0, F, C), B, T, C, F));
        RUN(CT_PROF_matmul_fc_bwd,
            ct_matmul_backward(m->dev, tmp, whole ? half_of(GV(fcw, l), 1, F, C) : none, none,
                               ct_view_at(dB, BTF), x2, half_of(PV(fcw, l), 1, F, C), B, T, C, F));
        RUN(CT_PROF_matmul_fc_bwd, ct_residual_forward(m->dev, dh2, dh2, tmp, BTC));
        if (m->sp)
            RUN(CT_PROF_matmul_fc_bwd, ct_tp_reduce_scatter(m->dev, m->tp, dh2, dh2, rowC));
        else if (m->tp)
            RUN(CT_PROF_matmul_fc_bwd, ct_tp_allreduce(m->dev, m->tp, dh2, dh2, BTC, CT_OP_SUM));
        if (input) COPY(dB, fch, 2 * BTF); /* gate|up's gradient, over gate|up */
    } else {
        RUN(CT_PROF_matmul_fcproj_bwd, ct_matmul_backward(m->dev, none, GV(fcprojw, l), none,
                                                          wdout, fchg, none, B, T, F, C));
        RUN(CT_PROF_matmul_fc_bwd, ct_matmul_backward(m->dev, none, half_of(GV(fcw, l), 0, F, C),
                                                      none, gate, h2, none, B, T, C, F));
        RUN(CT_PROF_matmul_fc_bwd, ct_matmul_backward(m->dev, none, half_of(GV(fcw, l), 1, F, C),
                                                      none, up, h2, none, B, T, C, F));
    }
    RUN(CT_PROF_layernorm_bwd, ct_rmsnorm_backward(m->dev, wonly ? none : dres, DW(ln2w), dh2,
                                                   res2, WI(ln2w), v.t[B_LN2R], rb, rt, C, 1));
    if (!wonly) GROUP(whole ? "mlp backward" : "mlp backward (input)");
    /* ---- attention: dA = the gradient of its output, dB of the expanded q|k|v, then dA of the
     * GEMM's q|k|v (the kv heads' summed over their query heads, the rotation undone) */
    if (!wonly) {
        if (input) COPY(dres, wdres2, BTC);
        RUN(CT_PROF_matmul_attproj_bwd,
            ct_tp_row_backward(m->dev, m->tp, dA, DW(attprojw), none, dres, XA(dfull), atty,
                               PV(attprojw, l), B, T, Cl, C));
        if (m->attn == CT_ATTN_FUSED)
            RUN(CT_PROF_attention_bwd, ct_attention_fused_backward(m->dev, &m->acfg, dB, XV(datt),
                                                                   dA, qkv, atty, att, B, T, Cl,
                                                                   NH));
        else
            RUN(CT_PROF_attention_bwd,
                ct_attention_backward(m->dev, dB, XA(dqkvr), XA(datt), XA(dvaccum), dA, qkv, att,
                                      B, T, Cl, NH));
        RUN(CT_PROF_attention_bwd, ct_gqa_expand_backward(m->dev, dA, dB, B, T, NH, NKV, hd));
        RUN(CT_PROF_attention_bwd, ct_rope_backward(m->dev, dA, dA, B, T, NH, hd, Cr, theta));
        RUN(CT_PROF_attention_bwd, ct_rope_backward(m->dev, ct_view_at(dA, Cl),
                                                    ct_view_at(dA, Cl), B, T, NKV, hd, Cr, theta));
        if (input) COPY(dA, qkv, BT * (size_t)Cr); /* over the expanded q|k|v, read no more */
        /* q|k|v column-parallel: its partial input gradient in dh1 (dB), summed over TP */
        RUN(CT_PROF_matmul_qkv_bwd,
            ct_tp_col_backward(m->dev, m->tp, dh1, DW(qkvw), none, dA, h1, XA(xfull), dh1,
                               PV(qkvw, l), B, T, C, Cr));
    } else {
        RUN(CT_PROF_matmul_attproj_bwd, ct_matmul_backward(m->dev, none, GV(attprojw, l), none,
                                                           wdres2, atty, none, B, T, C, C));
        RUN(CT_PROF_matmul_qkv_bwd,
            ct_matmul_backward(m->dev, none, GV(qkvw, l), none, qkv, h1, none, B, T, C, Cr));
    }
    RUN(CT_PROF_layernorm_bwd, ct_rmsnorm_backward(m->dev, wonly ? none : dres, DW(ln1w), dh1,
                                                   res, WI(ln1w), v.t[B_LN1R], rb, rt, C, 1));
    GROUP(whole ? "attention backward" : input ? "attention backward (input)" : "weight gradients");
#undef DW
#undef WI
#undef COPY
cleanup:
    return st;
}
