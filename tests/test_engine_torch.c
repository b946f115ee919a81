/* test_engine_torch.c - cltrain's GPT-2 against PyTorch (tests/torch_gpt2_ref.py, Debian's
 * /usr/bin/python3 with python3-torch; a missing torch is a failure, not a skip).
 *
 * On identical weights (written by our llm.c writer) and tokens, in an awkward tiny shape
 * (C=24, NH=3, V=50 padded to 64, T=9 < maxT=16): logits, loss and every gradient tensor agree
 * to fp32 tolerance with PyTorch's float64 computation, and the losses of 10 AdamW steps agree to
 * 1e-4 relative, with weight decay and clipping each on and off; both attention paths (the GEMM
 * path and the fused one), and the fused path's 10 steps twice, bitwise the same. Also the llm.c
 * file round trips:
 * ours -> file -> ours bit-exact, and a file PyTorch wrote is read, rewritten byte-identically,
 * and gives PyTorch's logits.
 *
 * A mixture-of-experts model (E = 4 experts, K = 1 and 2, capacity factor 1 so that choices are
 * dropped, and F = 0 with a larger auxiliary-loss weight), read by both from one safetensors file
 * cltrain wrote (PyTorch reads it with json + numpy): the kept choices and the auxiliary loss, the
 * logits, the loss and every gradient (of the cross-entropy + alpha aux) at fp32 tolerance, and the
 * cross-entropy over 10 AdamW steps (weight decay on, clipping on in one case) within 1e-4
 * relative; the safetensors file read back gives bitwise the parameters written.
 *
 * Every step is the executor's, as train_gpt runs it (ct_test_exec.h): the gradients are those
 * of a step with lr 0 and no decay (no parameter moves), the logits those of ct_exec_forward's
 * slot. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_cl.h"
#include "ct_engine.h"
#include "ct_engine_io.h"
#include "ct_test.h"
#include "ct_test_dev.h"
#include "ct_test_exec.h"

#ifndef CT_SOURCE_DIR
#define CT_SOURCE_DIR "."
#endif

static char dir[256];

typedef struct ref_out {
    int64_t B, T, Vp, n, K, V;
    int64_t kept, choices; /* a mixture of experts' first forward: choices kept, made */
    double *logits, loss, *grads, *losses;
    double aux; /* its auxiliary loss */
} ref_out;

static void ref_free(ref_out *r) {
    free(r->logits);
    free(r->grads);
    free(r->losses);
    memset(r, 0, sizeof *r);
}

static int run_ref(const char *model, const char *batch, const char *extra, ref_out *r) {
    char out[400], cmd[2000];
    snprintf(out, sizeof out, "%s/ref.out", dir);
    remove(out);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/torch_gpt2_ref.py --model %s --batch %s --out %s %s",
             CT_SOURCE_DIR, model, batch, out, extra);
    int rc = system(cmd);
    if (rc != 0) {
        fprintf(stderr,
                "FAIL: the PyTorch reference did not run (status %d): %s\n"
                "      it needs /usr/bin/python3 with torch (Debian: apt-get install python3-torch;"
                " scripts/test installs it)\n",
                rc, cmd);
        return 0;
    }
    memset(r, 0, sizeof *r);
    FILE *f = fopen(out, "rb");
    if (!f) return 0;
    int64_t h[16];
    int ok = fread(h, 8, 16, f) == 16 && h[0] == 20241121 && h[1] == 1;
    if (ok) {
        r->B = h[2];
        r->T = h[3];
        r->Vp = h[4];
        r->n = h[5];
        r->K = h[6];
        r->V = h[7];
        r->kept = h[8];
        r->choices = h[9];
        size_t nl = (size_t)(r->B * r->T * r->Vp);
        r->logits = (double *)malloc(nl * 8);
        r->grads = (double *)malloc((size_t)r->n * 8);
        r->losses = (double *)malloc((size_t)(r->K + 1) * 8);
        ok = fread(r->logits, 8, nl, f) == nl && fread(&r->loss, 8, 1, f) == 1 &&
             fread(r->grads, 8, (size_t)r->n, f) == (size_t)r->n &&
             fread(r->losses, 8, (size_t)r->K, f) == (size_t)r->K &&
             fread(&r->aux, 8, 1, f) == 1;
    }
    fclose(f);
    if (!ok) fprintf(stderr, "FAIL: malformed reference output %s\n", out);
    return ok;
}

/* |a - ref| <= atol + rtol*|ref| elementwise, with atol = aabs * max|ref| of the tensor. */
static double compare(const char *what, const float *a, const double *ref, size_t n, double aabs,
                      double rtol) {
    double mx = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(ref[i]));
    double atol = aabs * mx + 1e-12, worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - ref[i]) / (atol + rtol * fabs(ref[i]));
        if (!(e <= worst)) {
            worst = e;
            wi = i;
        }
    }
    CT_ASSERT_MSG(worst <= 1.0, "%s: element %zu is %.9g, PyTorch %.9g (%.3g x tolerance)", what,
                  wi, (double)a[wi], ref[wi], worst);
    return worst;
}

static void write_batch(const char *path, int B, int T, const int *in, const int *tg) {
    FILE *f = fopen(path, "wb");
    int32_t h[2] = {B, T};
    fwrite(h, 4, 2, f);
    fwrite(in, 4, (size_t)B * T, f);
    fwrite(tg, 4, (size_t)B * T, f);
    fclose(f);
}

static unsigned lcg(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

/* The mixture-of-experts model against the oracle, through a safetensors file. */
static void test_moe(ct_device *dev, const int *in, const int *tg, int B, int T) {
    const struct {
        int K;
        double F, alpha, clip;
    } cases[3] = {{1, 1.0, 0.01, 0.0}, {2, 1.0, 0.01, 0.5}, {2, 0.0, 0.1, 0.0}};
    const int steps = 10;
    for (int q = 0; q < 3; q++) {
        ct_gpt_config cfg = {.max_seq = 16, .vocab = 50, .padded_vocab = 64, .layers = 2,
                             .heads = 3, .channels = 24, .experts = 4, .top_k = cases[q].K};
        ct_layout lay = {1, 1, 1, 0, 1};
        ct_coords at = {0, 0, 0, 0};
        ct_model_plan plan;
        memset(&plan, 0, sizeof plan);
        plan.max_B = B, plan.max_T = T, plan.slots = 1;
        plan.moe_capacity = cases[q].F, plan.moe_aux = cases[q].alpha;
        ct_model *m = NULL;
        ct_exec *x = NULL;
        ct_err err = {0};
        CT_REQUIRE_OK(ct_model_create_plan(&m, &cfg, &lay, &at, dev, &plan, &err), err.msg);
        CT_ASSERT_OK(ct_exec_create(&x, m, NULL, NULL, &err), err.msg);
        if (!x) {
            ct_model_free(m);
            return;
        }
        size_t n = ct_model_num_params(m);
        float *p0 = malloc(n * 4), *buf = malloc(n * 4);
        float *logits = malloc((size_t)B * T * cfg.padded_vocab * 4);
        CT_ASSERT_OK(ct_model_init_random(m, 42 + (uint64_t)q), ct_model_errmsg(m));
        CT_ASSERT_OK(ct_model_get_params(m, p0, n), ct_model_errmsg(m));
        unsigned s = 11 + (unsigned)q;
        int perturb[] = {CT_GPT_ln1w, CT_GPT_ln1b, CT_GPT_qkvb, CT_GPT_attprojb, CT_GPT_ln2w,
                         CT_GPT_ln2b, CT_GPT_fcb, CT_GPT_fcprojb, CT_GPT_lnfw, CT_GPT_lnfb};
        for (size_t k = 0; k < sizeof perturb / sizeof perturb[0]; k++) {
            size_t off, cnt;
            ct_model_tensor(m, perturb[k], &off, &cnt);
            for (size_t i = 0; i < cnt; i++)
                p0[off + i] += 0.05f * ((float)(lcg(&s) % 2001) / 1000.0f - 1.0f);
        }
        { /* a router that decides: larger weights than the init's 0.02 */
            size_t off, cnt;
            ct_model_tensor(m, CT_GPT_routerw, &off, &cnt);
            for (size_t i = 0; i < cnt; i++) p0[off + i] *= 25.0f;
        }
        char path[300], extra[400];
        snprintf(path, sizeof path, "%s/moe_%d.safetensors", dir, q);
        CT_ASSERT_OK(ct_model_file_write(path, &cfg, p0, &err), err.msg);
        /* the round trip: bitwise the parameters written, the same config */
        ct_gpt_config rc;
        float *fp = NULL;
        size_t fn = 0;
        CT_ASSERT_OK(ct_model_file_read(path, &rc, &fp, &fn, &err), err.msg);
        CT_ASSERT(fn == n && memcmp(&rc, &cfg, sizeof cfg) == 0);
        CT_ASSERT_MSG(fp && fn == n && !memcmp(fp, p0, n * 4),
                      "the safetensors file read back differs from the parameters written");
        free(fp);
        char batch[300];
        snprintf(batch, sizeof batch, "%s/batch.bin", dir);
        snprintf(extra, sizeof extra,
                 "--steps %d --lr 1e-3 --weight-decay 0.1 --grad-clip %g --capacity-factor %g "
                 "--aux-loss %g",
                 steps, cases[q].clip, cases[q].F, cases[q].alpha);
        ref_out r;
        if (!run_ref(path, batch, extra, &r)) {
            ct_exec_free(x);
            ct_model_free(m);
            free(p0), free(buf), free(logits);
            continue;
        }
        float loss = 0;
        ct_moe_stats ms;
        ct_step_result sr;
        CT_ASSERT_OK(ct_model_set_params(m, p0, n), ct_model_errmsg(m));
        ct_moe_stats_reset(ct_model_moe(m));
        CT_ASSERT_OK(ct_exec_forward(x, in, tg, B, T, &loss, NULL), ct_exec_errmsg(x));
        ct_moe_stats_get(ct_model_moe(m), &ms);
        CT_ASSERT_OK(ct_model_slot_logits(m, 0, logits, (size_t)B * T * cfg.padded_vocab),
                     ct_model_errmsg(m));
        CT_ASSERT_OK(ct_test_exec_grads(x, m, in, tg, B, T, buf, n, &sr), ct_exec_errmsg(x));
        CT_ASSERT_MSG(!memcmp(&(float){(float)sr.loss}, &loss, sizeof loss),
                      "the step's loss %.9g is not its forward's %.9g", sr.loss, loss);
        double kept = 0;
        for (int i = 0; i < cfg.layers * cfg.experts; i++) kept += ms.kept[i];
        char what[120];
        snprintf(what, sizeof what, "moe K=%d F=%g", cases[q].K, cases[q].F);
        printf("%s: PyTorch keeps %lld of %lld choices, cltrain %.0f; aux %.9g vs %.9g\n", what,
               (long long)r.kept, (long long)r.choices, kept, ms.aux, r.aux);
        CT_ASSERT_EQ_INT((long long)kept, r.kept);
        if (cases[q].F > 0) CT_ASSERT_MSG(r.kept < r.choices, "%s: no choice was dropped", what);
        CT_ASSERT_NEAR(ms.aux, r.aux, 1e-5 * fabs(r.aux));
        double el = compare(what, logits, r.logits, (size_t)B * T * cfg.padded_vocab, 1e-5, 1e-4);
        printf("%s: logits max error %.3g x tolerance; loss %.9g vs %.9g\n", what, el, loss,
               r.loss);
        CT_ASSERT_NEAR(loss, r.loss, 1e-5 * fabs(r.loss));
        double worst = 0;
        for (int t = 0; t < CT_GPT_NUM_TENSORS; t++) {
            size_t off, cnt;
            ct_model_tensor(m, t, &off, &cnt);
            char w2[160];
            snprintf(w2, sizeof w2, "%s: grad %s", what, ct_gpt_tensor_name(t));
            worst = fmax(worst, compare(w2, buf + off, r.grads + off, cnt, 1e-5, 1e-4));
        }
        printf("%s: every gradient within %.3g x tolerance (1e-5*max + 1e-4 rel)\n", what, worst);
        /* 10 AdamW steps from the same parameters */
        float *zero = calloc(n, 4);
        CT_ASSERT_OK(ct_model_set_params(m, p0, n), ct_model_errmsg(m));
        CT_ASSERT_OK(ct_model_set_optimizer(m, zero, zero, n), ct_model_errmsg(m));
        free(zero);
        double wrel = 0;
        ct_adamw_hp hp = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, (float)cases[q].clip};
        for (int k = 0; k < steps; k++) {
            CT_ASSERT_OK(ct_test_exec_step(x, 1, in, tg, B, T, &hp, k + 1, &sr), ct_exec_errmsg(x));
            float norm = sr.grad_norm;
            loss = (float)sr.loss;
            double rl = fabs(loss - r.losses[k]) / fabs(r.losses[k]);
            wrel = fmax(wrel, rl);
            CT_ASSERT_MSG(rl <= 1e-4, "%s step %d: loss %.9g vs PyTorch %.9g", what, k, loss,
                          r.losses[k]);
            if (k == 0 && cases[q].clip > 0)
                CT_ASSERT_MSG(norm > cases[q].clip, "%s: the norm %g never exceeded the clip", what,
                              norm);
        }
        printf("%s alpha %g clip %g: %d AdamW steps, max rel loss difference %.3g (%.6f -> %.6f)\n",
               what, cases[q].alpha, cases[q].clip, steps, wrel, r.losses[0], r.losses[steps - 1]);
        ref_free(&r);
        ct_exec_free(x);
        ct_model_free(m);
        free(p0), free(buf), free(logits);
    }
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    snprintf(dir, sizeof dir, "/tmp/ct_test_engine_torch_%ld", (long)getpid());
    char cmd[1000];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0) return 1;
    ct_err err = {0};
    ct_test_devices ds;
    ct_device *dev = ct_test_device_open(&ds, NULL);
    if (!dev) return ct_test_end("test_engine_torch");
    const ct_gpt_config cfg = {.max_seq = 16, .vocab = 50, .padded_vocab = 64, .layers = 2,
                               .heads = 3, .channels = 24};
    const int B = 2, T = 9, K = 10;
    ct_layout lay = {1, 1, 1, 0, 1};
    ct_coords at = {0, 0, 0, 0};
    ct_model *m = NULL, *models[2] = {NULL, NULL};
    CT_ASSERT_OK(ct_model_create(&m, &cfg, &lay, &at, dev, B, T, &err), err.msg);
    if (!m) return ct_test_end("test_engine_torch");
    { /* the fused path as --attention fused runs it: the device's block shapes (ct_attn_tune:
         * the stored record, or a search the first time on this device and head size) */
        ct_model_plan plan;
        memset(&plan, 0, sizeof plan);
        plan.max_B = B, plan.max_T = T, plan.slots = 1, plan.attention = CT_ATTN_FUSED;
        CT_ASSERT_OK(ct_model_create_plan(&models[1], &cfg, &lay, &at, dev, &plan, &err), err.msg);
        if (!models[1]) return ct_test_end("test_engine_torch");
        printf("fused attention: %s\n", ct_model_attention_note(models[1]));
    }
    models[0] = m;
    ct_exec *xs[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++)
        CT_ASSERT_OK(ct_exec_create(&xs[i], models[i], NULL, NULL, &err), err.msg);
    if (!xs[0] || !xs[1]) return ct_test_end("test_engine_torch");
    size_t n = ct_model_num_params(m);
    float *p0 = (float *)malloc(n * 4), *buf = (float *)malloc(n * 4);
    float *logits = (float *)malloc((size_t)B * T * cfg.padded_vocab * 4);
    CT_ASSERT_OK(ct_model_init_random(m, 42), ct_model_errmsg(m));
    CT_ASSERT_OK(ct_model_get_params(m, p0, n), ct_model_errmsg(m));
    /* Nonzero biases and non-unit LayerNorm weights exercise more of the backward. */
    unsigned s = 7;
    int perturb[] = {CT_GPT_ln1w, CT_GPT_ln1b, CT_GPT_qkvb, CT_GPT_attprojb, CT_GPT_ln2w,
                     CT_GPT_ln2b, CT_GPT_fcb, CT_GPT_fcprojb, CT_GPT_lnfw, CT_GPT_lnfb};
    for (size_t k = 0; k < sizeof perturb / sizeof perturb[0]; k++) {
        size_t off, cnt;
        ct_model_tensor(m, perturb[k], &off, &cnt);
        for (size_t i = 0; i < cnt; i++) p0[off + i] += 0.05f * ((float)(lcg(&s) % 2001) / 1000.0f - 1.0f);
    }
    char model_path[300], batch_path[300];
    snprintf(model_path, sizeof model_path, "%s/model.bin", dir);
    snprintf(batch_path, sizeof batch_path, "%s/batch.bin", dir);
    CT_ASSERT_OK(ct_model_file_write(model_path, &cfg, p0, &err), err.msg);
    int in[2 * 9], tg[2 * 9];
    for (int i = 0; i < B * T; i++) {
        in[i] = (int)(lcg(&s) % (unsigned)cfg.vocab);
        tg[i] = (int)(lcg(&s) % (unsigned)cfg.vocab);
    }
    write_batch(batch_path, B, T, in, tg);

    /* ---- llm.c round trip, ours: file -> model -> host equals what was written, bitwise. */
    ct_gpt_config rc;
    float *fp = NULL;
    size_t fn = 0;
    CT_ASSERT_OK(ct_model_file_read(model_path, &rc, &fp, &fn, &err), err.msg);
    CT_ASSERT(fn == n && memcmp(&rc, &cfg, sizeof cfg) == 0);
    if (fp && fn == n) {
        CT_ASSERT_OK(ct_model_set_params(m, fp, n), ct_model_errmsg(m));
        CT_ASSERT_OK(ct_model_get_params(m, buf, n), ct_model_errmsg(m));
        CT_ASSERT(memcmp(buf, p0, n * 4) == 0);
    }
    free(fp);

    /* ---- logits, loss and every gradient. */
    const double wds[2] = {0.0, 0.1}, clips[2] = {0.0, 0.5};
    ref_out r;
    char extra[300];
    snprintf(extra, sizeof extra, "--steps %d --lr 1e-3 --weight-decay 0 --grad-clip 0", K);
    if (run_ref(model_path, batch_path, extra, &r)) {
        for (int pi = 0; pi < 2; pi++) {
            ct_model *mm = models[pi];
            ct_exec *x = xs[pi];
            const char *pn = pi ? "fused" : "gemm";
            float loss = 0;
            ct_step_result sr;
            CT_ASSERT_OK(ct_model_set_params(mm, p0, n), ct_model_errmsg(mm));
            CT_ASSERT_OK(ct_exec_forward(x, in, tg, B, T, &loss, NULL), ct_exec_errmsg(x));
            CT_ASSERT_OK(ct_model_slot_logits(mm, 0, logits, (size_t)B * T * cfg.padded_vocab),
                         ct_model_errmsg(mm));
            CT_ASSERT_OK(ct_test_exec_grads(x, mm, in, tg, B, T, buf, n, &sr), ct_exec_errmsg(x));
            CT_ASSERT_MSG(!memcmp(&(float){(float)sr.loss}, &loss, sizeof loss),
                          "%s: the step's loss %.9g is not its forward's %.9g", pn, sr.loss, loss);
            char what[80];
            snprintf(what, sizeof what, "%s: logits", pn);
            double el = compare(what, logits, r.logits, (size_t)B * T * cfg.padded_vocab, 1e-5, 1e-4);
            printf("%s attention: logits: max error %.3g x tolerance (1e-5*max + 1e-4 rel)\n", pn, el);
            printf("%s attention: loss: ours %.9g, PyTorch %.9g (rel %.3g)\n", pn, loss, r.loss,
                   fabs(loss - r.loss) / fabs(r.loss));
            CT_ASSERT_NEAR(loss, r.loss, 1e-5 * fabs(r.loss));
            for (int t = 0; t < CT_GPT_NUM_TENSORS; t++) {
                size_t off, cnt;
                ct_model_tensor(mm, t, &off, &cnt);
                snprintf(what, sizeof what, "%s: grad %s", pn, ct_gpt_tensor_name(t));
                double e = compare(what, buf + off, r.grads + off, cnt, 1e-5, 1e-4);
                printf("%-20s max error %.3g x tolerance (1e-5*max + 1e-4 rel)\n", what, e);
            }
        }
        ref_free(&r);
    }

    /* ---- 10 AdamW steps: weight decay and clipping on and off. */
    for (int wi = 0; wi < 2; wi++)
        for (int ci = 0; ci < 2; ci++) {
            snprintf(extra, sizeof extra, "--steps %d --lr 1e-3 --weight-decay %g --grad-clip %g",
                     K, wds[wi], clips[ci]);
            if (!run_ref(model_path, batch_path, extra, &r)) continue;
            /* gemm, fused, fused again (bitwise the same losses as the first fused run) */
            float fl[2][16];
            for (int run = 0; run < 3; run++) {
                ct_model *mm = models[run ? 1 : 0];
                ct_exec *x = xs[run ? 1 : 0];
                const char *pn = run ? "fused" : "gemm";
                CT_ASSERT_OK(ct_model_set_params(mm, p0, n), ct_model_errmsg(mm));
                float *zero = (float *)calloc(n, 4);
                CT_ASSERT_OK(ct_model_set_optimizer(mm, zero, zero, n), ct_model_errmsg(mm));
                free(zero);
                double worst = 0;
                float norm0 = 0;
                ct_adamw_hp hp = {1e-3f, 0.9f, 0.95f, 1e-8f, (float)wds[wi], (float)clips[ci]};
                for (int k = 0; k < K; k++) {
                    ct_step_result sr;
                    CT_ASSERT_OK(ct_test_exec_step(x, 1, in, tg, B, T, &hp, k + 1, &sr),
                                 ct_exec_errmsg(x));
                    float loss = (float)sr.loss, norm = sr.grad_norm;
                    if (k == 0) norm0 = norm;
                    if (run) fl[run - 1][k] = loss;
                    double rel = fabs(loss - r.losses[k]) / fabs(r.losses[k]);
                    worst = fmax(worst, rel);
                    CT_ASSERT_MSG(rel <= 1e-4, "%s attention, wd %g clip %g step %d: loss %.9g vs "
                                  "PyTorch %.9g",
                                  pn, wds[wi], clips[ci], k, loss, r.losses[k]);
                }
                /* Clipping must actually have been active in the clipped runs. */
                if (clips[ci] > 0)
                    CT_ASSERT_MSG(norm0 > clips[ci], "gradient norm %g never exceeded the clip %g",
                                  norm0, clips[ci]);
                if (run < 2)
                    printf("%s attention, adamw wd=%g clip=%g: %d step losses, max rel diff %.3g "
                           "(first %.6f last %.6f, first norm %.4f)\n",
                           pn, wds[wi], clips[ci], K, worst, r.losses[0], r.losses[K - 1], norm0);
            }
            CT_ASSERT_MSG(!memcmp(fl[0], fl[1], (size_t)K * sizeof(float)),
                          "fused attention, wd %g clip %g: two runs of %d steps differ", wds[wi],
                          clips[ci], K);
            ref_free(&r);
        }

    /* ---- a file PyTorch wrote: read, rewrite byte-identically, same logits as PyTorch. */
    char torch_model[300], rewritten[300];
    snprintf(torch_model, sizeof torch_model, "%s/torch_model.bin", dir);
    snprintf(rewritten, sizeof rewritten, "%s/rewritten.bin", dir);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/torch_gpt2_ref.py --make-model %s --config 16,50,2,3,24,64 --seed 5",
             CT_SOURCE_DIR, torch_model);
    int ok = system(cmd) == 0;
    CT_ASSERT_MSG(ok, "PyTorch could not write a model file: %s", cmd);
    if (ok) {
        CT_ASSERT_OK(ct_model_file_read(torch_model, &rc, &fp, &fn, &err), err.msg);
        if (fp) {
            CT_ASSERT(memcmp(&rc, &cfg, sizeof cfg) == 0 && fn == n);
            CT_ASSERT_OK(ct_model_file_write(rewritten, &rc, fp, &err), err.msg);
            unsigned char *a = NULL, *b = NULL;
            size_t na = 0, nb = 0;
            CT_ASSERT_OK(ct_file_read_all(torch_model, &a, &na, &err), err.msg);
            CT_ASSERT_OK(ct_file_read_all(rewritten, &b, &nb, &err), err.msg);
            CT_ASSERT_MSG(a && b && na == nb && memcmp(a, b, na) == 0,
                          "rewriting PyTorch's file changed its bytes");
            free(a);
            free(b);
            if (run_ref(torch_model, batch_path, "--steps 0", &r)) {
                float loss = 0;
                CT_ASSERT_OK(ct_model_set_params(m, fp, n), ct_model_errmsg(m));
                CT_ASSERT_OK(ct_exec_forward(xs[0], in, tg, B, T, &loss, NULL),
                             ct_exec_errmsg(xs[0]));
                CT_ASSERT_OK(ct_model_slot_logits(m, 0, logits, (size_t)B * T * cfg.padded_vocab),
                             ct_model_errmsg(m));
                double e = compare("logits of PyTorch's file", logits, r.logits,
                                   (size_t)B * T * cfg.padded_vocab, 1e-5, 1e-4);
                printf("PyTorch-written file: logits max error %.3g x tolerance, loss %.9g vs %.9g\n",
                       e, loss, r.loss);
                CT_ASSERT_NEAR(loss, r.loss, 1e-5 * fabs(r.loss));
                ref_free(&r);
            }
            free(fp);
        }
    }

    test_moe(dev, in, tg, B, T);

    free(p0);
    free(buf);
    free(logits);
    ct_exec_free(xs[0]);
    ct_exec_free(xs[1]);
    ct_model_free(m);
    ct_model_free(models[1]);
    ct_device_free(dev);
    ct_test_devices_free(&ds);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return ct_test_end("test_engine_torch");
}
