/* test_engine_model.c - the GPT-2 model on the device against independent references, at tiny
 * size (L=2, C=20, NH=4, V=37, Vp=40, B=3, T=7):
 *   - the plain-C double-precision reference model's gradients against central finite
 *     differences of its own loss (validates the reference's backward);
 *   - the device model's loss, logits and every gradient against the reference model;
 *   - a handful of device gradient entries against finite differences of the device loss;
 *   - gradient accumulation (two half-scaled backward passes = one), the gradient norm, and two
 *     AdamW steps (clipping on, decay only on 2-D weights) against the reference AdamW;
 * all through the executor as train_gpt runs it (ct_test_exec.h: gradients from a step with lr 0
 * and no decay, which moves no parameter; losses and logits from ct_exec_forward);
 *   - a long sequence (T=150) on a narrow model: loss and gradients against the reference;
 *   - GPT-2 initialisation (statistics, padded rows, determinism per seed), and bad inputs. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine.h"
#include "ct_ref.h"
#include "ct_test.h"
#include "ct_test_dev.h"
#include "ct_test_exec.h"

static uint64_t g_rng = 0xC0FFEEull;
static double urand(void) { /* uniform [-1, 1) */
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_rng >> 11) * 0x1.0p-52 - 1.0;
}

static const ct_gpt_config CFG = {.max_seq = 8, .vocab = 37, .padded_vocab = 40, .layers = 2,
                                  .heads = 4, .channels = 20};
enum { B = 3, T = 7 };

/* Parameters of a moderate scale (so every path carries a gradient well above rounding). */
static void make_params(const ct_gpt_config *c, float *p) {
    size_t sizes[CT_GPT_NUM_TENSORS], o = 0;
    ct_gpt_param_sizes(c, sizes);
    for (int t = 0; t < CT_GPT_NUM_TENSORS; t++) {
        for (size_t i = 0; i < sizes[t]; i++) {
            double r = urand();
            switch (t) {
            case CT_GPT_ln1w: case CT_GPT_ln2w: case CT_GPT_lnfw: p[o + i] = (float)(1.0 + 0.2 * r); break;
            case CT_GPT_wte: case CT_GPT_wpe: p[o + i] = (float)(0.5 * r); break;
            default: p[o + i] = (float)(0.3 * r); break;
            }
        }
        o += sizes[t];
    }
}

static void make_tokens(int *tok, int *tg, int n, int V) {
    for (int i = 0; i < n; i++) {
        tok[i] = (int)((urand() + 1.0) * 0.5 * V) % V;
        tg[i] = (int)((urand() + 1.0) * 0.5 * V) % V;
    }
}

/* Reference gradients against central differences of the reference loss (double, eps 1e-5). */
static void test_ref_vs_fd(const double *pd, const int *tok, const int *tg, const double *gref,
                           size_t n) {
    size_t sizes[CT_GPT_NUM_TENSORS], o = 0;
    ct_gpt_param_sizes(&CFG, sizes);
    double *p = malloc(n * sizeof *p);
    memcpy(p, pd, n * sizeof *p);
    int checked = 0, bad = 0;
    double worst = 0;
    for (int t = 0; t < CT_GPT_NUM_TENSORS; t++) {
        /* up to 25 entries per tensor, spread over it */
        size_t step = sizes[t] / 25 + 1;
        for (size_t i = (size_t)t % step; i < sizes[t]; i += step) {
            size_t k = o + i;
            double h = 1e-5, save = p[k];
            p[k] = save + h;
            double lp = ct_ref_gpt_loss(&CFG, p, tok, tg, B, T);
            p[k] = save - h;
            double lm = ct_ref_gpt_loss(&CFG, p, tok, tg, B, T);
            p[k] = save;
            double fd = (lp - lm) / (2 * h);
            double e = fabs(fd - gref[k]) / (1e-8 + 1e-5 * fabs(fd));
            if (e > worst) worst = e;
            if (e > 1.0) {
                if (bad++ < 5)
                    fprintf(stderr, "ref vs fd: %s[%zu]: fd %.12g analytic %.12g\n",
                            ct_gpt_tensor_name(t), i, fd, gref[k]);
            }
            checked++;
        }
        o += sizes[t];
    }
    printf("reference gradients vs finite differences: %d entries, worst %.3g x tolerance "
           "(1e-8 + 1e-5 rel)\n",
           checked, worst);
    CT_ASSERT_MSG(bad == 0, "%d of %d reference gradient entries disagree with finite differences",
                  bad, checked);
    CT_ASSERT(checked > 300);
    free(p);
}

/* The single-device model on attention path `path` (fused: the default block shapes, so the test
 * needs no tuning search). */
static ct_status create_on(ct_model **m, const ct_gpt_config *c, ct_device *dev, int b, int t,
                           ct_attn_path path, ct_err *err) {
    ct_layout lay = {1, 1, 1, 0, 1};
    ct_coords at = {0, 0, 0, 0};
    ct_model_plan plan;
    memset(&plan, 0, sizeof plan);
    ct_attn_cfg blocks = ct_attn_cfg_default(ct_device_get_info(dev), c->channels / c->heads);
    plan.max_B = b, plan.max_T = t, plan.slots = 1, plan.attention = path;
    plan.attn_blocks = path == CT_ATTN_GEMM ? NULL : &blocks;
    return ct_model_create_plan(m, c, &lay, &at, dev, &plan, err);
}

static void test_model(ct_device *dev, ct_attn_path path) {
    ct_err err = {0};
    ct_model *m = NULL;
    ct_exec *x = NULL;
    printf("-- attention path %s\n", ct_attn_path_name(path));
    CT_REQUIRE_OK(create_on(&m, &CFG, dev, B, T, path, &err), err.msg);
    CT_ASSERT_EQ_INT(ct_model_attention(m, NULL), path);
    CT_ASSERT_OK(ct_exec_create(&x, m, NULL, NULL, &err), err.msg);
    if (!x) {
        ct_model_free(m);
        return;
    }
    size_t n = ct_model_num_params(m), sizes[CT_GPT_NUM_TENSORS];
    CT_ASSERT_EQ_INT(n, ct_gpt_param_sizes(&CFG, sizes));
    float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g), *g2 = malloc(n * sizeof *g2);
    double *pd = malloc(n * sizeof *pd), *gref = malloc(n * sizeof *gref);
    size_t nlog = (size_t)B * T * CFG.padded_vocab;
    float *logits = malloc(nlog * sizeof *logits);
    double *rlogits = malloc(nlog * sizeof *rlogits);
    int tok[B * T], tg[B * T];
    make_params(&CFG, p);
    make_tokens(tok, tg, B * T, CFG.vocab);
    for (size_t i = 0; i < n; i++) pd[i] = p[i];
    CT_ASSERT_OK(ct_model_set_params(m, p, n), ct_model_errmsg(m));

    /* 1. reference model: loss, logits and gradients; its gradients against finite differences */
    double rloss = ct_ref_gpt_grad(&CFG, pd, tok, tg, B, T, gref, rlogits);
    test_ref_vs_fd(pd, tok, tg, gref, n);

    /* 2. device forward: loss and logits (the executor's forward runs slot 0) */
    float loss = 0;
    CT_ASSERT_OK(ct_exec_forward(x, tok, tg, B, T, &loss, NULL), ct_exec_errmsg(x));
    printf("loss: device %.7f reference %.7f\n", loss, rloss);
    CT_ASSERT_NEAR(loss, rloss, 1e-5 * fabs(rloss));
    CT_ASSERT_OK(ct_model_slot_logits(m, 0, logits, nlog), ct_model_errmsg(m));
    float *rlf = malloc(nlog * sizeof *rlf);
    for (size_t i = 0; i < nlog; i++) rlf[i] = (float)rlogits[i];
    CT_ASSERT_CLOSE_ARRAY(logits, rlf, nlog, 1e-5, 1e-4);

    /* 3. device gradients against the reference, tensor by tensor: one executor step that
     * updates nothing; its loss is the forward's */
    ct_step_result r;
    CT_ASSERT_OK(ct_test_exec_grads(x, m, tok, tg, B, T, g, n, &r), ct_exec_errmsg(x));
    CT_ASSERT_NEAR(r.loss, rloss, 1e-5 * fabs(rloss));
    float *gr = malloc(n * sizeof *gr);
    for (size_t i = 0; i < n; i++) gr[i] = (float)gref[i];
    size_t o = 0;
    for (int t = 0; t < CT_GPT_NUM_TENSORS; t++) {
        double mx = 0;
        for (size_t i = 0; i < sizes[t]; i++) mx = fmax(mx, fabs(gref[o + i]));
        size_t w = 0;
        double e = ct_test_max_err(g + o, gr + o, sizes[t], 1e-4 * mx + 1e-7, 1e-3, &w);
        CT_ASSERT_MSG(e <= 1.0,
                      "gradient %s[%zu]: device %.9g reference %.9g (err %.3g x tolerance)",
                      ct_gpt_tensor_name(t), w, (double)g[o + w], gref[o + w], e);
        o += sizes[t];
    }
    /* the padded rows of wte get no gradient from the loss over the real vocabulary... except
     * through nothing at all: they never meet a token or a real-vocabulary logit */
    CT_TEST_CHECK();
    for (size_t i = (size_t)CFG.vocab * CFG.channels; i < sizes[CT_GPT_wte]; i++)
        if (g[i] != 0.0f) {
            CT__FAIL("padded wte row gradient %zu is %g, expected 0", i, (double)g[i]);
            break;
        }

    /* 4. device finite differences on a handful of entries with large gradients */
    {
        int picks[] = {CT_GPT_wte, CT_GPT_wpe, CT_GPT_qkvw, CT_GPT_attprojw, CT_GPT_fcw,
                       CT_GPT_fcprojb, CT_GPT_ln1w, CT_GPT_lnfb};
        size_t offs[CT_GPT_NUM_TENSORS];
        o = 0;
        for (int t = 0; t < CT_GPT_NUM_TENSORS; t++) offs[t] = o, o += sizes[t];
        for (size_t j = 0; j < sizeof picks / sizeof picks[0]; j++) {
            int t = picks[j];
            size_t best = offs[t];
            for (size_t i = offs[t]; i < offs[t] + sizes[t]; i++)
                if (fabs(gref[i]) > fabs(gref[best])) best = i;
            float save = p[best], h = 1e-2f, lp = 0, lm = 0;
            p[best] = save + h;
            ct_model_set_params(m, p, n);
            ct_exec_forward(x, tok, tg, B, T, &lp, NULL);
            p[best] = save - h;
            ct_model_set_params(m, p, n);
            ct_exec_forward(x, tok, tg, B, T, &lm, NULL);
            p[best] = save;
            double fd = ((double)lp - (double)lm) / (2.0 * ((double)(save + h) - (double)save));
            printf("device fd %-9s: fd %.6f grad %.6f\n", ct_gpt_tensor_name(t), fd, (double)g[best]);
            CT_ASSERT_NEAR(fd, g[best], 2e-3 + 3e-2 * fabs(g[best]));
        }
        CT_ASSERT_OK(ct_model_set_params(m, p, n), ct_model_errmsg(m));
    }

    /* 5. gradient accumulation: a step of two micro-batches (the same rows twice), each
     * backward at scale 1/2, = one backward at scale 1 */
    int tok2[2 * B * T], tg2[2 * B * T];
    memcpy(tok2, tok, sizeof tok), memcpy(tok2 + B * T, tok, sizeof tok);
    memcpy(tg2, tg, sizeof tg), memcpy(tg2 + B * T, tg, sizeof tg);
    CT_ASSERT_OK(ct_test_exec_grads_m(x, m, 2, tok2, tg2, B, T, g2, n, &r), ct_exec_errmsg(x));
    CT_ASSERT_CLOSE_ARRAY(g2, g, n, 1e-7, 1e-5);

    /* 6. gradient norm and two AdamW steps (clip active, decay on 2-D weights only), each the
     * executor's step: its own forward and backward, then the update. The reference AdamW takes
     * the device's gradients of each step (read back after it: the optimizer leaves them) and
     * their norm, so the update is checked apart from the gradients' rounding. */
    double *gd = malloc(n * sizeof *gd), *md = calloc(n, sizeof *md), *vd = calloc(n, sizeof *vd);
    for (size_t i = 0; i < n; i++) gd[i] = g2[i];
    double rn = ct_ref_global_norm(gd, n);
    CT_ASSERT_NEAR(r.grad_norm, rn, 1e-5 * rn);
    CT_ASSERT_OK(ct_model_set_optimizer(m, NULL, NULL, n), ct_model_errmsg(m));
    ct_arena_zero(ct_params_adam_m(ct_model_params(m)), 0, n * sizeof(float));
    ct_arena_zero(ct_params_adam_v(ct_model_params(m)), 0, n * sizeof(float));
    float clip = (float)(0.25 * rn); /* the first step halves the norm: active in both */
    ct_adamw_hp hp = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, clip};
    for (int t = 1; t <= 2; t++) {
        CT_ASSERT_OK(ct_test_exec_step(x, 1, tok, tg, B, T, &hp, t, &r), ct_exec_errmsg(x));
        CT_ASSERT_OK(ct_model_get_grads(m, g, n), ct_model_errmsg(m));
        for (size_t i = 0; i < n; i++)
            gd[i] = g[i];
        double rnt = ct_ref_global_norm(gd, n);
        CT_ASSERT_NEAR(r.grad_norm, rnt, 1e-5 * rnt);
        CT_ASSERT_MSG(rnt > clip, "step %d: the norm %g does not exceed the clip %g", t, rnt,
                      (double)clip);
        o = 0;
        for (int k = 0; k < CT_GPT_NUM_TENSORS; k++) {
            ct_ref_adamw(pd + o, gd + o, md + o, vd + o, sizes[k], fmin(1.0, clip / (rnt + 1e-6)),
                         1e-2, 0.9, 0.95, 1e-8, ct_gpt_tensor_decays(k) ? 0.1 : 0.0, t);
            o += sizes[k];
        }
    }
    CT_ASSERT_OK(ct_model_get_params(m, p, n), ct_model_errmsg(m));
    float *pr = malloc(n * sizeof *pr);
    for (size_t i = 0; i < n; i++) pr[i] = (float)pd[i];
    CT_ASSERT_CLOSE_ARRAY(p, pr, n, 1e-6, 1e-5);
    float *mm = malloc(n * sizeof *mm), *vv = malloc(n * sizeof *vv);
    CT_ASSERT_OK(ct_model_get_optimizer(m, mm, vv, n), ct_model_errmsg(m));
    for (size_t i = 0; i < n; i++) pr[i] = (float)md[i];
    CT_ASSERT_CLOSE_ARRAY(mm, pr, n, 1e-9, 1e-4);
    for (size_t i = 0; i < n; i++) pr[i] = (float)vd[i];
    CT_ASSERT_CLOSE_ARRAY(vv, pr, n, 1e-12, 1e-4);

    /* 7. bad input and wrong states: the model refuses, the executor passes its message on; a
     * head backward with no forward with targets in the slot is refused */
    int badtok[B * T];
    memcpy(badtok, tok, sizeof badtok);
    badtok[5] = CFG.vocab;
    CT_ASSERT_EQ_INT(ct_exec_forward(x, badtok, tg, B, T, &loss, NULL), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_exec_errmsg(x), "tokens[5] = 37 is outside the vocabulary");
    CT_ASSERT_EQ_INT(ct_exec_forward(x, tok, tg, B + 1, T, &loss, NULL), CT_ERR_ARG);
    CT_ASSERT_EQ_INT(ct_model_head_backward(m, 0, 1.0f), CT_ERR_STATE);
    CT_ASSERT_OK(ct_exec_forward(x, tok, NULL, B, T, &loss, NULL), ct_exec_errmsg(x));
    CT_ASSERT(isnan(loss));
    CT_ASSERT_EQ_INT(ct_model_head_backward(m, 0, 1.0f), CT_ERR_STATE);
    CT_ASSERT_EQ_INT(ct_model_set_params(m, p, n - 1), CT_ERR_ARG);
    /* a step at a smaller shape than planned (views planned for 3 x 7, used at 2 x 4): its
     * loss and gradients */
    CT_ASSERT_OK(ct_model_set_params(m, p, n), ct_model_errmsg(m));
    for (size_t i = 0; i < n; i++)
        pd[i] = p[i];
    int tok24[8], tg24[8];
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < 4; t++) tok24[b * 4 + t] = tok[b * 4 + t], tg24[b * 4 + t] = tg[b * 4 + t];
    CT_ASSERT_OK(ct_test_exec_grads(x, m, tok, tg, 2, 4, g, n, &r), ct_exec_errmsg(x));
    double *g24 = malloc(n * sizeof *g24);
    double rl24 = ct_ref_gpt_grad(&CFG, pd, tok24, tg24, 2, 4, g24, NULL);
    CT_ASSERT_NEAR(r.loss, rl24, 1e-5 * fabs(rl24));
    double mx24 = 0;
    for (size_t i = 0; i < n; i++) gr[i] = (float)g24[i], mx24 = fmax(mx24, fabs(g24[i]));
    CT_ASSERT_CLOSE_ARRAY(g, gr, n, 1e-4 * mx24, 1e-3);
    free(g24);

    free(p); free(g); free(g2); free(pd); free(gref); free(logits); free(rlogits); free(rlf);
    free(gr); free(gd); free(md); free(vd); free(pr); free(mm); free(vv);
    ct_exec_free(x);
    ct_model_free(m);
}

/* A long sequence (T = 150 > 128, where batched GEMM paths change) on a narrow model: device loss
 * and every gradient against the reference model. */
static void test_model_long(ct_device *dev, ct_attn_path path) {
    const ct_gpt_config c = {.max_seq = 160, .vocab = 11, .padded_vocab = 16, .layers = 1,
                             .heads = 2, .channels = 16};
    enum { LB = 2, LT = 150 };
    ct_err err = {0};
    ct_model *m = NULL;
    ct_exec *x = NULL;
    CT_REQUIRE_OK(create_on(&m, &c, dev, LB, LT, path, &err), err.msg);
    CT_ASSERT_OK(ct_exec_create(&x, m, NULL, NULL, &err), err.msg);
    if (!x) {
        ct_model_free(m);
        return;
    }
    size_t n = ct_model_num_params(m), sizes[CT_GPT_NUM_TENSORS];
    ct_gpt_param_sizes(&c, sizes);
    float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g), *gr = malloc(n * sizeof *gr);
    double *pd = malloc(n * sizeof *pd), *gd = malloc(n * sizeof *gd);
    int tok[LB * LT], tg[LB * LT];
    make_params(&c, p);
    make_tokens(tok, tg, LB * LT, c.vocab);
    for (size_t i = 0; i < n; i++) pd[i] = p[i];
    double rloss = ct_ref_gpt_grad(&c, pd, tok, tg, LB, LT, gd, NULL);
    ct_step_result r;
    CT_ASSERT_OK(ct_model_set_params(m, p, n), ct_model_errmsg(m));
    CT_ASSERT_OK(ct_test_exec_grads(x, m, tok, tg, LB, LT, g, n, &r), ct_exec_errmsg(x));
    CT_ASSERT_NEAR(r.loss, rloss, 1e-5 * fabs(rloss));
    for (size_t i = 0; i < n; i++) gr[i] = (float)gd[i];
    size_t o = 0;
    for (int t = 0; t < CT_GPT_NUM_TENSORS; t++) {
        double mx = 0;
        for (size_t i = 0; i < sizes[t]; i++) mx = fmax(mx, fabs(gd[o + i]));
        size_t w = 0;
        double e = ct_test_max_err(g + o, gr + o, sizes[t], 1e-4 * mx + 1e-7, 1e-3, &w);
        CT_ASSERT_MSG(e <= 1.0,
                      "%s path, T=%d gradient %s[%zu]: device %.9g reference %.9g (err %.3g x "
                      "tolerance)",
                      ct_attn_path_name(path), LT, ct_gpt_tensor_name(t), w, (double)g[o + w],
                      gd[o + w], e);
        o += sizes[t];
    }
    free(p); free(g); free(gr); free(pd); free(gd);
    ct_exec_free(x);
    ct_model_free(m);
}

/* The fused path's arena: per-layer bytes linear in T (the GEMM path's grow with T^2), the same
 * losses as the GEMM path (to rounding), and two fused runs bitwise the same. */
static void test_attention_memory(ct_device *dev) {
    ct_gpt_config c = {.max_seq = 64, .vocab = 11, .padded_vocab = 16, .layers = 2, .heads = 2,
                       .channels = 16};
    size_t lb[2][2];
    for (int k = 0; k < 2; k++)
        for (int pth = 0; pth < 2; pth++) {
            ct_err err = {0};
            ct_model *m = NULL;
            CT_ASSERT_OK(create_on(&m, &c, dev, 2, 32 * (k + 1), pth ? CT_ATTN_FUSED : CT_ATTN_GEMM,
                                   &err),
                         err.msg);
            lb[k][pth] = m ? ct_model_layer_bytes(m) : 0;
            ct_model_free(m);
        }
    /* per layer at B=2, T: 16 (B,T,C) tensors and 4 (B,T) ones, + the scores (B,NH,T,T) or the
     * log-sum-exp (B,NH,T) */
    size_t rest32 = 16 * 2 * 32 * 16 + 4 * 2 * 32;
    printf("layer bytes: T=32 gemm %zu fused %zu, T=64 gemm %zu fused %zu\n", lb[0][0], lb[0][1],
           lb[1][0], lb[1][1]);
    CT_ASSERT_EQ_INT(lb[0][1], (rest32 + 2 * 2 * 32) * sizeof(float));
    CT_ASSERT_EQ_INT(lb[1][1], 2 * lb[0][1]); /* linear in T */
    CT_ASSERT_EQ_INT(lb[0][0], (rest32 + 2 * 2 * 32 * 32) * sizeof(float));
    CT_ASSERT_EQ_INT(lb[1][0], (2 * rest32 + 2 * 2 * 64 * 64) * sizeof(float)); /* T^2 */
    /* losses over 3 AdamW steps: fused twice (bitwise), gemm once (close) */
    int tok[2 * 64], tg[2 * 64];
    make_tokens(tok, tg, 2 * 64, c.vocab);
    float losses[3][3];
    for (int run = 0; run < 3; run++) {
        ct_err err = {0};
        ct_model *m = NULL;
        ct_exec *x = NULL;
        CT_REQUIRE_OK(create_on(&m, &c, dev, 2, 64, run < 2 ? CT_ATTN_FUSED : CT_ATTN_GEMM, &err),
                      err.msg);
        CT_ASSERT_OK(ct_model_init_random(m, 5), ct_model_errmsg(m));
        CT_ASSERT_OK(ct_exec_create(&x, m, NULL, NULL, &err), err.msg);
        int have = x != NULL;
        ct_adamw_hp hp = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
        for (int k = 0; have && k < 3; k++) {
            ct_step_result r;
            CT_ASSERT_OK(ct_test_exec_step(x, 1, tok, tg, 2, 64, &hp, k + 1, &r),
                         ct_exec_errmsg(x));
            losses[run][k] = (float)r.loss;
        }
        ct_exec_free(x);
        ct_model_free(m);
        if (!have) return;
    }
    for (int k = 0; k < 3; k++) {
        CT_ASSERT_MSG(!memcmp(&losses[0][k], &losses[1][k], sizeof(float)),
                      "fused path: step %d loss %.9g then %.9g (not bitwise the same)", k,
                      (double)losses[0][k], (double)losses[1][k]);
        CT_ASSERT_NEAR(losses[0][k], losses[2][k], 1e-5 * fabs(losses[2][k]));
    }
    printf("losses fused %.7f %.7f %.7f, gemm %.7f %.7f %.7f\n", losses[0][0], losses[0][1],
           losses[0][2], losses[2][0], losses[2][1], losses[2][2]);
}

static void test_init_and_create_errors(ct_device *dev) {
    ct_err err = {0};
    ct_layout lay = {1, 1, 1, 0, 1};
    ct_coords at = {0, 0, 0, 0};
    ct_gpt_config c = {.max_seq = 16, .vocab = 100, .padded_vocab = 128, .layers = 3, .heads = 4,
                       .channels = 64};
    ct_model *a = NULL, *b = NULL;
    CT_ASSERT_OK(ct_model_create(&a, &c, &lay, &at, dev, 2, 16, &err), err.msg);
    CT_ASSERT_OK(ct_model_create(&b, &c, &lay, &at, dev, 1, 8, &err), err.msg);
    if (!a || !b) return;
    size_t n = ct_model_num_params(a);
    float *pa = malloc(n * sizeof *pa), *pb = malloc(n * sizeof *pb);
    ct_model_init_random(a, 7);
    ct_model_init_random(b, 7);
    ct_model_get_params(a, pa, n);
    ct_model_get_params(b, pb, n);
    CT_ASSERT(memcmp(pa, pb, n * sizeof *pa) == 0);
    ct_model_init_random(b, 8);
    ct_model_get_params(b, pb, n);
    CT_ASSERT(memcmp(pa, pb, n * sizeof *pa) != 0);
    for (int t = 0; t < CT_GPT_NUM_TENSORS; t++) {
        size_t off, cnt;
        ct_model_tensor(a, t, &off, &cnt);
        if (cnt == 0) continue; /* a dense model's router: no elements */
        if (t == CT_GPT_wte) cnt = (size_t)c.vocab * c.channels;
        double s = 0, s2 = 0;
        for (size_t i = 0; i < cnt; i++) s += pa[off + i], s2 += (double)pa[off + i] * pa[off + i];
        double mean = s / cnt, sd = sqrt(s2 / cnt - mean * mean);
        double want = 0.0;
        if (t == CT_GPT_wte || t == CT_GPT_wpe || t == CT_GPT_qkvw || t == CT_GPT_fcw) want = 0.02;
        if (t == CT_GPT_attprojw || t == CT_GPT_fcprojw) want = 0.02 / sqrt(2.0 * c.layers);
        if (want > 0) {
            CT_ASSERT_MSG(fabs(sd - want) < 0.1 * want && fabs(mean) < 0.1 * want,
                          "init %s: mean %g sd %g, want 0 and %g", ct_gpt_tensor_name(t), mean, sd,
                          want);
        } else {
            double fill = (t == CT_GPT_ln1w || t == CT_GPT_ln2w || t == CT_GPT_lnfw) ? 1.0 : 0.0;
            CT_ASSERT_MSG(mean == fill && sd == 0, "init %s: mean %g sd %g, want constant %g",
                          ct_gpt_tensor_name(t), mean, sd, fill);
        }
    }
    size_t off, cnt;
    ct_model_tensor(a, CT_GPT_wte, &off, &cnt);
    int padded_zero = 1;
    for (size_t i = (size_t)c.vocab * c.channels; i < cnt; i++) padded_zero &= pa[off + i] == 0.0f;
    CT_ASSERT_MSG(padded_zero, "padded rows of wte must start at zero");
    free(pa);
    free(pb);
    ct_model_free(a);
    ct_model_free(b);

    ct_model *x = NULL;
    ct_gpt_config bad = c;
    bad.heads = 5;
    CT_ASSERT_EQ_INT(ct_model_create(&x, &bad, &lay, &at, dev, 1, 8, &err), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(err.msg, "heads (5) must divide channels (64)");
    bad = c;
    bad.padded_vocab = 50;
    CT_ASSERT_EQ_INT(ct_model_create(&x, &bad, &lay, &at, dev, 1, 8, &err), CT_ERR_ARG);
    CT_ASSERT_EQ_INT(ct_model_create(&x, &c, &lay, &at, dev, 1, 17, &err), CT_ERR_ARG);
    /* tensor parallelism needs its TP group (ct_model_create_plan); ZeRO stages above 3 do not
     * exist */
    ct_layout tp2 = {1, 2, 1, 0, 1}, z4 = {2, 1, 1, 4, 1};
    CT_ASSERT_EQ_INT(ct_model_create(&x, &c, &tp2, &at, dev, 1, 8, &err), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(err.msg, "needs the TP group");
    CT_ASSERT(x == NULL);
    CT_ASSERT_EQ_INT(ct_model_create(&x, &c, &z4, &at, dev, 1, 8, &err), CT_ERR_UNSUPPORTED);
    CT_ASSERT(x == NULL);
}

int main(void) {
    ct_test_devices ds;
    ct_device *dev = ct_test_device_open(&ds, NULL);
    if (!dev) return ct_test_end("test_engine_model");
    test_model(dev, CT_ATTN_GEMM);
    test_model(dev, CT_ATTN_FUSED);
    test_model_long(dev, CT_ATTN_GEMM);
    test_model_long(dev, CT_ATTN_FUSED);
    test_attention_memory(dev);
    test_init_and_create_errors(dev);
    ct_mem_stats ms;
    ct_device_mem_stats(dev, &ms);
    CT_ASSERT_EQ_INT(ms.live_buffers, 0);
    ct_device_free(dev);
    ct_test_devices_free(&ds);
    return ct_test_end("test_engine_model");
}
