/* exec_forward.c - a forward alone through the executor (evaluation, sampling): the chunks in
 * model order, each on its stage, with the pipeline's transfers; the loss and the last
 * position's logits gathered to every worker. */
#include "exec_impl.h"

ct_status ct_exec_forward(ct_exec *x, const int *tokens, const int *targets, int rows, int T,
                          float *loss, float *logits_last) {
    ct_status st = CT_OK;
    double lv = NAN;
    int N = x->nstages, C = N * x->nchunks, last = x->stage == N - 1, TP = x->tpsize;
    size_t Vp = (size_t)ct_params_config(x->P)->padded_vocab, Vl = Vp / (size_t)TP;
    ct__exec_slots_free(x);
    ct_schedule one = {CT_SCHED_TRIVIAL, N, 1, x->nchunks, NULL, NULL};
    /* sequence parallelism splits the tokens over the TP group: a generation context of any
     * length is padded at its end to a multiple of tp (the model is causal, so the positions
     * before the padding do not see it) */
    int Tr = T;
    int *padded = NULL;
    if (!targets && ct_model_plan_of(x->m)->sp && TP > 1 && T % TP) {
        Tr = (T + TP - 1) / TP * TP;
        padded = ct_calloc((size_t)rows * Tr, sizeof(int));
        if (!padded) return CT_ERR(&x->err, CT_ERR_NOMEM, "executor: no memory");
        for (int b = 0; b < rows; b++)
            memcpy(padded + (size_t)b * Tr, tokens + (size_t)b * T, sizeof(int) * (size_t)T);
        tokens = padded;
    }
    size_t act = ct_model_act_floats(x->m, rows, Tr);
    /* the chunks in model order, each on its stage: receive, forward, send (one slot suffices:
     * nothing is kept for a backward) */
    for (int c = x->stage; c < C && st == CT_OK; c += N) {
        double arrived;
        ct_view v;
        if (c > 0) {
            st = ct_model_stage_input(x->m, 0, local_chunk(x, c), rows, Tr, &v);
            if (st != CT_OK) {
                free(padded);
                return fail_model(x, st);
            }
            if ((st = ct__xfer_recv(x, v, act, (c - 1) % N, &arrived)) != CT_OK) break;
        }
        st = ct__exec_forward_chunk(x, &one, 0, c, tokens, targets, rows, Tr,
                           targets && c == C - 1 ? &lv : NULL);
        if (st == CT_OK && c < C - 1) {
            int lo, hi;
            ct_params_chunk(x->P, local_chunk(x, c), &lo, &hi);
            if ((st = ct_model_block_output(x->m, 0, hi - 1, &v)) != CT_OK) {
                free(padded);
                return fail_model(x, st);
            }
            st = ct__xfer_send(x, v, act, (c + 1) % N);
        }
    }
    free(padded);
    if (st == CT_OK) st = ct__xfer_drain(x);
    if (st != CT_OK) {
        x->failed = 1;
        return st;
    }
    if (logits_last) {
        if (last) {
            /* this worker's Vp/tp columns of row 0's position T-1, gathered over the TP group */
            size_t n = (size_t)rows * Tr * Vl;
            float *all = ct_malloc(n * sizeof(float));
            if (!all) return CT_ERR(&x->err, CT_ERR_NOMEM, "executor: no memory for logits");
            st = ct_model_slot_logits(x->m, 0, all, n);
            if (st == CT_OK && TP > 1) {
                st = ct_comm_allgather(x->tp, all + (size_t)(T - 1) * Vl, logits_last, Vl, CT_F32,
                                       NULL);
                if (st != CT_OK)
                    CT_ERR(&x->err, st, "gathering the logits over the TP group: %s",
                           ct_comm_errmsg(x->tp));
            } else if (st == CT_OK) {
                memcpy(logits_last, all + (size_t)(T - 1) * Vp, Vp * sizeof(float));
            } else {
                fail_model(x, st);
            }
            free(all);
            if (st != CT_OK) return st;
        }
        if (N > 1 && (st = ct_comm_bcast(x->pp, logits_last, Vp, CT_F32, N - 1, NULL)) != CT_OK)
            return CT_ERR(&x->err, st, "the logits from the last stage: %s", ct_comm_errmsg(x->pp));
    }
    if (loss) {
        float lf = (float)lv;
        if (N > 1 && (st = ct_comm_bcast(x->pp, &lf, 1, CT_F32, N - 1, NULL)) != CT_OK)
            return CT_ERR(&x->err, st, "the loss from the last stage: %s", ct_comm_errmsg(x->pp));
        *loss = lf;
    }
    return CT_OK;
}

