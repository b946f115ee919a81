/* moe_layer.c - a block's mixture-of-experts layer as the model runs it (moe.c's layer with the
 * TP group's collectives around it: the gathered rows under sequence parallelism, the partial
 * outputs and input gradients summed over TP), forward and backward. GPT-2's block (forward.c,
 * backward.c) and Llama's (llama.c) call it; it calls neither. */
#include "model_impl.h"

/* The mixture of experts (its all-to-alls over the EP group) on block l's ln2 output x (this
 * worker's rows: rowC floats), its output in the projection scratch; under TP each worker's
 * slice of the experts over the whole (gathered) tokens, summed as a row-parallel linear's
 * output is. */
ct_status ct__model_moe_layer_forward(ct_model *m, int slot, int l, ct_view x, size_t rowC) {
    ct_status st = CT_OK;
    slot_state *ss = &m->st[slot];
    ct_moe_weights w = ct__model_moe_weights(m, l, 0);
    size_t k = pos(m, l);
    ct_view xin = x;
    if (m->sp) {
        if ((st = ct_tp_allgather(m->dev, m->tp, XA(xfull), x, rowC)) != CT_OK) return st;
        xin = XA(xfull);
    }
    if ((st = ct_moe_forward(m->moe, slot, (int)k, l, XA(proj),
                             av(m, slot_base(m, slot) + m->ar.s.moe + k * m->ar.lmoe), XV(moex),
                             xin, &w, ss->B, ss->T)) != CT_OK)
        return st;
    if (m->sp) return ct_tp_reduce_scatter(m->dev, m->tp, XA(proj), XA(proj), rowC);
    if (m->tp) return ct_tp_allreduce(m->dev, m->tp, XA(proj), XA(proj), rowC, CT_OP_SUM);
    return CT_OK;
}

/* The mixture of experts' backward on block l: dA = the gradient of its input x (ln2's output,
 * this worker's rowC floats) from dres; under SP the input and the output gradient gathered
 * over the TP group, the partial input gradients summed (SP: each worker its rows of the sum). */
ct_status ct__model_moe_layer_backward(ct_model *m, int slot, int l, ct_view x, size_t rowC) {
    ct_status st;
    ct_moe_weights w = ct__model_moe_weights(m, l, 0), dw = ct__model_moe_weights(m, l, 1);
    ct_view saved = av(m, slot_base(m, slot) + m->ar.s.moe + pos(m, l) * m->ar.lmoe);
    ct_view xin = x, dy = XA(dres);
    if (m->sp) {
        if ((st = ct_tp_allgather(m->dev, m->tp, XA(xfull), x, rowC)) != CT_OK ||
            (st = ct_tp_allgather(m->dev, m->tp, XA(dfull), XA(dres), rowC)) != CT_OK)
            return st;
        xin = XA(xfull), dy = XA(dfull);
    }
    if ((st = ct_moe_backward(m->moe, slot, (int)pos(m, l), XA(dA), &dw, dy, saved, XV(moex), xin,
                              &w, m->st[slot].loss_scale)) != CT_OK)
        return st;
    if (m->sp) return ct_tp_reduce_scatter(m->dev, m->tp, XA(dA), XA(dA), rowC);
    if (m->tp) return ct_tp_allreduce(m->dev, m->tp, XA(dA), XA(dA), rowC, CT_OP_SUM);
    return CT_OK;
}
