/* ct_test_exec.h - the tests train the way train_gpt does: through the executor
 * (engine/step/ct_engine_step.h) with the trivial schedule and the executor's optimizer.
 *
 * A gradient check needs the gradients of one forward and backward without an update: that is
 * one executor step whose AdamW has lr 0 and no weight decay, so every parameter becomes
 * p - 0 * u = p bit for bit (u is finite: the gradients of a finite loss, eps > 0), and the
 * gradients the step computed are still in place (the optimizer reads them and writes only the
 * parameters and m, v) to read back with ct_model_get_grads. ct_test_exec_grads checks that the
 * parameters did not move; the step's Adam m and v did (reset them before real steps).
 *
 *     ct_exec *x = NULL;
 *     CT_REQUIRE_OK(ct_exec_create(&x, m, NULL, NULL, &err), err.msg);   // one worker: no grid
 *     ct_step_result r;
 *     CT_ASSERT_OK(ct_test_exec_grads(x, m, tok, tg, B, T, g, n, &r), ct_exec_errmsg(x));
 *     ct_adamw_hp hp = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
 *     CT_ASSERT_OK(ct_test_exec_step(x, 1, tok, tg, B, T, &hp, 1, &r), ct_exec_errmsg(x));
 *     ct_exec_free(x);
 */
#ifndef CT_TEST_EXEC_H
#define CT_TEST_EXEC_H

#include "ct_engine.h"
#include "ct_test.h"

/* One optimizer step t (1-based) on M micro-batches of rows x T (tokens and targets: M blocks
 * one after the other), run as train_gpt runs it: the trivial schedule (forward, backward with
 * scale 1/M per micro-batch, gradient sync, AdamW). Collective over the executor's grid. */
static inline ct_status ct_test_exec_step(ct_exec *x, int M, const int *tokens, const int *targets,
                                          int rows, int T, const ct_adamw_hp *hp, int t,
                                          ct_step_result *out) {
    ct_schedule *s = NULL;
    ct_err err = {0};
    ct_status st = ct_sched_make(CT_SCHED_TRIVIAL, 1, M, 1, &s, &err);
    if (st != CT_OK) {
        CT__FAIL("the trivial schedule for %d micro-batches: %s", M, err.msg);
        return st;
    }
    st = ct_exec_step(x, s, tokens, targets, rows, T, hp, t, out);
    ct_sched_free(s);
    return st;
}

/* The AdamW of a step that updates nothing: lr 0, no decay, no clipping. */
static inline ct_adamw_hp ct_test_hp_frozen(void) {
    ct_adamw_hp hp = {0.0f, 0.9f, 0.95f, 1e-8f, 0.0f, 0.0f};
    return hp;
}

/* The gradients (host, table order, n = ct_model_num_params; a worker holding part of the
 * model fills its parts only) of one forward and backward over M micro-batches at the current
 * parameters, through one executor step that updates nothing (ct_test_hp_frozen); out (may be
 * NULL) gets the step's loss and pre-clip norm. A FAIL when the parameters moved. Collective
 * over the executor's grid. */
static inline ct_status ct_test_exec_grads_m(ct_exec *x, ct_model *m, int M, const int *tokens,
                                             const int *targets, int rows, int T, float *g,
                                             size_t n, ct_step_result *out) {
    ct_adamw_hp hp = ct_test_hp_frozen();
    ct_step_result r;
    float *before = calloc(n, sizeof(float)), *after = calloc(n, sizeof(float));
    ct_status st = before && after ? CT_OK : CT_ERR_NOMEM;
    if (st == CT_OK) st = ct_model_get_params(m, before, n);
    if (st == CT_OK) st = ct_test_exec_step(x, M, tokens, targets, rows, T, &hp, 1, &r);
    if (st == CT_OK) st = ct_model_get_params(m, after, n);
    if (st == CT_OK) st = ct_model_get_grads(m, g, n);
    if (st == CT_OK) {
        CT_ASSERT_MSG(!memcmp(before, after, n * sizeof(float)),
                      "a step with lr 0 and no decay moved the parameters");
        CT_ASSERT_MSG(!r.skipped, "the gradient step was skipped (loss %g, norm %g)", r.loss,
                      (double)r.grad_norm);
        if (out) *out = r;
    }
    free(before);
    free(after);
    return st;
}

static inline ct_status ct_test_exec_grads(ct_exec *x, ct_model *m, const int *tokens,
                                           const int *targets, int rows, int T, float *g,
                                           size_t n, ct_step_result *out) {
    return ct_test_exec_grads_m(x, m, 1, tokens, targets, rows, T, g, n, out);
}

#endif /* CT_TEST_EXEC_H */
