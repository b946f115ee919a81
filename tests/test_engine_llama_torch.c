/* test_engine_llama_torch.c - cltrain's Llama model against PyTorch (tests/torch_llama_ref.py,
 * Debian's /usr/bin/python3 with python3-torch; a missing torch is a failure, not a skip).
 *
 * Awkward shapes: C = 32 over NH = 4 heads (hd 8), NKV 1 (multi-query) and 2 (< NH), an MLP
 * width F = 40 (not a multiple of 64), tied and untied heads, T = 9 (not a power of two) below
 * maxT = 16, V = 50 padded to 64, eps and theta not the defaults. For each, both attention paths
 * (GEMM and fused): on identical weights (ours, written as cltrain's safetensors file, which the
 * reference reads and splits into Hugging Face's q, k, v, gate and up) the logits, the loss and
 * every gradient at fp32 tolerance against PyTorch's float64, then 10 AdamW steps (weight decay
 * 0.1, clipping at 0.5, which the first step's norm exceeds) with every loss within 1e-4
 * relative. The file read back gives bitwise the parameters and the config written. Every step is
 * the executor's, as train_gpt runs it (ct_test_exec.h). A model with 4 SwiGLU experts (top-2,
 * capacity factor 1 so that choices drop, aux-loss weight 0.05) likewise through cltrain's file. */
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
    double *logits, loss, *grads, *losses;
} ref_out;

static void ref_free(ref_out *r) {
    free(r->logits), free(r->grads), free(r->losses);
    memset(r, 0, sizeof *r);
}

static int run_ref(const char *model, const char *batch, const char *extra, ref_out *r) {
    char out[400], cmd[2000];
    snprintf(out, sizeof out, "%s/ref.out", dir);
    remove(out);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 %s/tests/torch_llama_ref.py --model %s --batch %s --out %s %s",
             CT_SOURCE_DIR, model, batch, out, extra);
    int rc = system(cmd);
    memset(r, 0, sizeof *r);
    if (rc != 0) {
        fprintf(stderr, "FAIL: the PyTorch reference did not run (status %d): %s\n", rc, cmd);
        return 0;
    }
    FILE *f = fopen(out, "rb");
    if (!f) return 0;
    int64_t h[16];
    int ok = fread(h, 8, 16, f) == 16 && h[0] == 20241121 && h[1] == 1;
    if (ok) {
        r->B = h[2], r->T = h[3], r->Vp = h[4], r->n = h[5], r->K = h[6], r->V = h[7];
        size_t nl = (size_t)(r->B * r->T * r->Vp);
        r->logits = malloc(nl * 8);
        r->grads = malloc((size_t)r->n * 8);
        r->losses = malloc((size_t)(r->K + 1) * 8);
        ok = fread(r->logits, 8, nl, f) == nl && fread(&r->loss, 8, 1, f) == 1 &&
             fread(r->grads, 8, (size_t)r->n, f) == (size_t)r->n &&
             fread(r->losses, 8, (size_t)r->K, f) == (size_t)r->K;
    }
    fclose(f);
    if (!ok) fprintf(stderr, "FAIL: malformed reference output %s\n", out);
    return ok;
}

/* |a - ref| <= atol + rtol*|ref| elementwise, with atol = aabs * max|ref| of the tensor. */
static double compare(const char *what, const float *a, const double *ref, size_t n, double aabs,
                      double rtol) {
    double mx = 0, worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(ref[i]));
    double atol = aabs * mx + 1e-12;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - ref[i]) / (atol + rtol * fabs(ref[i]));
        if (!(e <= worst)) worst = e, wi = i;
    }
    if (n)
        CT_ASSERT_MSG(worst <= 1.0, "%s: element %zu is %.9g, PyTorch %.9g (%.3g x tolerance)",
                      what, wi, (double)a[wi], ref[wi], worst);
    return worst;
}

static unsigned lcg(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static void one_case(ct_device *dev, int NKV, int tied, int E, int K, const int *in,
                     const int *tg, int B, int T, const char *batch) {
    const int steps = 10;
    ct_gpt_config cfg = {.max_seq = 16, .vocab = 50, .padded_vocab = 64, .layers = 2, .heads = 4,
                         .channels = 32, .experts = E, .top_k = K, .arch = CT_ARCH_LLAMA,
                         .kv_heads = NKV, .ffn_dim = 40, .rope_theta = 500.0f, .norm_eps = 1e-6f,
                         .tie_embeddings = tied};
    char what[120];
    snprintf(what, sizeof what, "NKV %d %s%s", NKV, tied ? "tied" : "untied",
             E ? ", 4 SwiGLU experts top-2" : "");
    ct_layout lay = {1, 1, 1, 0, 1};
    ct_coords at = {0, 0, 0, 0};
    ct_model *ms[2] = {NULL, NULL};
    ct_exec *xs[2] = {NULL, NULL};
    ct_err err = {0};
    for (int pi = 0; pi < 2; pi++) {
        ct_model_plan plan;
        memset(&plan, 0, sizeof plan);
        plan.max_B = B, plan.max_T = T, plan.slots = 1;
        plan.attention = pi ? CT_ATTN_FUSED : CT_ATTN_GEMM;
        plan.moe_capacity = 1.0, plan.moe_aux = E ? 0.05 : 0; /* some choices dropped */
        CT_REQUIRE_OK(ct_model_create_plan(&ms[pi], &cfg, &lay, &at, dev, &plan, &err), err.msg);
        CT_REQUIRE_OK(ct_exec_create(&xs[pi], ms[pi], NULL, NULL, &err), err.msg);
    }
    size_t n = ct_model_num_params(ms[0]);
    float *p0 = malloc(n * 4), *buf = malloc(n * 4);
    float *logits = malloc((size_t)B * T * cfg.padded_vocab * 4);
    CT_ASSERT_OK(ct_model_init_random(ms[0], 42 + (uint64_t)NKV), ct_model_errmsg(ms[0]));
    CT_ASSERT_OK(ct_model_get_params(ms[0], p0, n), ct_model_errmsg(ms[0]));
    { /* weights large enough that attention and the gates matter; norm weights away from 1 */
        unsigned s = 5 + (unsigned)NKV;
        for (int t = 0; t < CT_GPT_NUM_TENSORS; t++) {
            size_t off, cnt;
            ct_model_tensor(ms[0], t, &off, &cnt);
            int norm = t == CT_GPT_ln1w || t == CT_GPT_ln2w || t == CT_GPT_lnfw;
            for (size_t i = 0; i < cnt; i++)
                p0[off + i] = norm ? 1.0f + 0.2f * ((float)(lcg(&s) % 2001) / 1000.0f - 1.0f)
                                   : 12.0f * p0[off + i];
        }
    }
    char path[300];
    snprintf(path, sizeof path, "%s/llama_%d_%d_%d.safetensors", dir, NKV, tied, E);
    CT_ASSERT_OK(ct_model_file_write(path, &cfg, p0, &err), err.msg);
    { /* the round trip: bitwise the parameters, the same config */
        ct_gpt_config rc;
        float *fp = NULL;
        size_t fn = 0;
        CT_ASSERT_OK(ct_model_file_read(path, &rc, &fp, &fn, &err), err.msg);
        CT_ASSERT(fn == n && memcmp(&rc, &cfg, sizeof cfg) == 0);
        CT_ASSERT_MSG(fp && fn == n && !memcmp(fp, p0, n * 4),
                      "%s: the safetensors file read back differs from the parameters written",
                      what);
        free(fp);
    }
    ref_out r;
    if (!run_ref(path, batch,
                 E ? "--steps 10 --lr 1e-3 --weight-decay 0.1 --grad-clip 0.5 --capacity-factor 1.0 "
                     "--aux-loss 0.05"
                   : "--steps 10 --lr 1e-3 --weight-decay 0.1 --grad-clip 0.5",
                 &r)) {
        CT_ASSERT_MSG(0, "%s: no reference", what);
        goto done;
    }
    CT_ASSERT_EQ_INT(r.n, (long long)n);
    for (int pi = 0; pi < 2; pi++) {
        ct_model *m = ms[pi];
        ct_exec *x = xs[pi];
        const char *pn = pi ? "fused" : "gemm";
        float loss = 0;
        ct_step_result sr;
        CT_ASSERT_OK(ct_model_set_params(m, p0, n), ct_model_errmsg(m));
        CT_ASSERT_OK(ct_exec_forward(x, in, tg, B, T, &loss, NULL), ct_exec_errmsg(x));
        CT_ASSERT_OK(ct_model_slot_logits(m, 0, logits, (size_t)B * T * cfg.padded_vocab),
                     ct_model_errmsg(m));
        CT_ASSERT_OK(ct_test_exec_grads(x, m, in, tg, B, T, buf, n, &sr), ct_exec_errmsg(x));
        char w2[200];
        snprintf(w2, sizeof w2, "%s %s: logits", what, pn);
        double el = compare(w2, logits, r.logits, (size_t)B * T * cfg.padded_vocab, 1e-5, 1e-4);
        CT_ASSERT_NEAR(loss, r.loss, 1e-5 * fabs(r.loss));
        double worst = 0;
        for (int t = 0; t < CT_GPT_NUM_TENSORS; t++) {
            size_t off, cnt;
            ct_model_tensor(m, t, &off, &cnt);
            snprintf(w2, sizeof w2, "%s %s: grad %s", what, pn, ct_gpt_tensor_name(t));
            worst = fmax(worst, compare(w2, buf + off, r.grads + off, cnt, 1e-5, 1e-4));
        }
        printf("%s %s: logits %.3g x tolerance, loss %.9g vs PyTorch %.9g, every gradient within "
               "%.3g x tolerance (1e-5*max + 1e-4 rel)\n",
               what, pn, el, loss, r.loss, worst);
        /* 10 AdamW steps from the same parameters */
        float *zero = calloc(n, 4);
        CT_ASSERT_OK(ct_model_set_params(m, p0, n), ct_model_errmsg(m));
        CT_ASSERT_OK(ct_model_set_optimizer(m, zero, zero, n), ct_model_errmsg(m));
        free(zero);
        ct_adamw_hp hp = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f};
        double wrel = 0;
        for (int k = 0; k < steps; k++) {
            CT_ASSERT_OK(ct_test_exec_step(x, 1, in, tg, B, T, &hp, k + 1, &sr),
                         ct_exec_errmsg(x));
            double rl = fabs(sr.loss - r.losses[k]) / fabs(r.losses[k]);
            wrel = fmax(wrel, rl);
            CT_ASSERT_MSG(rl <= 1e-4, "%s %s step %d: loss %.9g vs PyTorch %.9g", what, pn, k,
                          sr.loss, r.losses[k]);
            if (k == 0)
                CT_ASSERT_MSG(sr.grad_norm > 0.5f, "%s: the norm %g never exceeded the clip",
                              what, sr.grad_norm);
        }
        printf("%s %s: %d AdamW steps (decay 0.1, clip 0.5), max rel loss difference %.3g "
               "(%.6f -> %.6f)\n",
               what, pn, steps, wrel, r.losses[0], r.losses[steps - 1]);
        CT_ASSERT_MSG(r.losses[steps - 1] < r.losses[0] - 1e-3, "%s: the loss did not fall",
                      what);
    }
    ref_free(&r);
done:
    for (int pi = 0; pi < 2; pi++) ct_exec_free(xs[pi]), ct_model_free(ms[pi]);
    free(p0), free(buf), free(logits);
}

/* A Hugging Face Llama directory PyTorch wrote: read by the engine (ct_model_file_read of DIR/),
 * trained 10 steps against PyTorch reading the same directory; written back by the engine as a
 * directory that reads back bitwise and that PyTorch reads to the same losses. */
static void hf_case(ct_device *dev, int NKV, int tied, const int *in, const int *tg, int B, int T,
                    const char *batch) {
    char what[120], hf[300], hf2[300], extra[800];
    snprintf(what, sizeof what, "HF directory NKV %d %s", NKV, tied ? "tied" : "untied");
    snprintf(hf, sizeof hf, "%s/hf_%d_%d/", dir, NKV, tied);
    snprintf(hf2, sizeof hf2, "%s/hf_back_%d_%d/", dir, NKV, tied);
    snprintf(extra, sizeof extra,
             "--steps 10 --lr 1e-3 --weight-decay 0.1 --grad-clip 0.5 --make-hf %s "
             "--config 50,2,4,%d,32,40,500,1e-6,%d --seed %d",
             hf, NKV, tied, 7 + NKV);
    ref_out r, r2;
    if (!run_ref(hf, batch, extra, &r)) {
        CT_ASSERT_MSG(0, "%s: no reference", what);
        return;
    }
    ct_gpt_config cfg;
    float *p0 = NULL, *back = NULL;
    size_t n = 0, n2 = 0;
    ct_err err = {0};
    CT_REQUIRE_OK(ct_model_file_read(hf, &cfg, &p0, &n, &err), err.msg);
    CT_ASSERT(cfg.arch == CT_ARCH_LLAMA && cfg.kv_heads == NKV && cfg.ffn_dim == 40 &&
              cfg.tie_embeddings == tied && cfg.rope_theta == 500.0f && cfg.norm_eps == 1e-6f &&
              cfg.padded_vocab == 128);
    CT_ASSERT_EQ_INT(r.n, (long long)n);
    /* ours written back as a directory: bitwise the same parameters and config */
    CT_ASSERT_OK(ct_model_file_write(hf2, &cfg, p0, &err), err.msg);
    ct_gpt_config c2;
    CT_ASSERT_OK(ct_model_file_read(hf2, &c2, &back, &n2, &err), err.msg);
    CT_ASSERT(n2 == n && !memcmp(&c2, &cfg, sizeof cfg) && back && !memcmp(back, p0, n * 4));
    free(back);
    ct_layout lay = {1, 1, 1, 0, 1};
    ct_coords at = {0, 0, 0, 0};
    ct_model_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.max_B = B, plan.max_T = T, plan.slots = 1, plan.attention = CT_ATTN_FUSED;
    ct_model *m = NULL;
    ct_exec *x = NULL;
    CT_REQUIRE_OK(ct_model_create_plan(&m, &cfg, &lay, &at, dev, &plan, &err), err.msg);
    CT_REQUIRE_OK(ct_exec_create(&x, m, NULL, NULL, &err), err.msg);
    float *zero = calloc(n, 4);
    CT_ASSERT_OK(ct_model_set_params(m, p0, n), ct_model_errmsg(m));
    CT_ASSERT_OK(ct_model_set_optimizer(m, zero, zero, n), ct_model_errmsg(m));
    free(zero);
    ct_adamw_hp hp = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f};
    double wrel = 0;
    for (int k = 0; k < 10; k++) {
        ct_step_result sr;
        CT_ASSERT_OK(ct_test_exec_step(x, 1, in, tg, B, T, &hp, k + 1, &sr), ct_exec_errmsg(x));
        double rl = fabs(sr.loss - r.losses[k]) / fabs(r.losses[k]);
        wrel = fmax(wrel, rl);
        CT_ASSERT_MSG(rl <= 1e-4, "%s step %d: loss %.9g vs PyTorch %.9g", what, k, sr.loss,
                      r.losses[k]);
    }
    printf("%s: 10 AdamW steps (fused attention) max rel loss difference %.3g (%.6f -> %.6f)\n",
           what, wrel, r.losses[0], r.losses[9]);
    /* PyTorch reads the directory the engine wrote to the same losses, bitwise its own */
    if (run_ref(hf2, batch, "--steps 10 --lr 1e-3 --weight-decay 0.1 --grad-clip 0.5", &r2)) {
        CT_ASSERT_MSG(!memcmp(r2.losses, r.losses, 10 * sizeof(double)),
                      "%s: PyTorch's losses from the directory cltrain wrote differ", what);
        ref_free(&r2);
    }
    ref_free(&r);
    ct_exec_free(x);
    ct_model_free(m);
    free(p0);
}

int main(void) {
    setvbuf(stdout, NULL, _IONBF, 0);
    snprintf(dir, sizeof dir, "/tmp/ct_test_engine_llama_torch_%ld", (long)getpid());
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0) return 1;
    ct_test_devices ds;
    ct_device *dev = ct_test_device_open(&ds, NULL);
    if (!dev) return ct_test_end("test_engine_llama_torch");
    enum { B = 2, T = 9 };
    int in[B * T], tg[B * T];
    unsigned s = 3;
    for (int i = 0; i < B * T; i++) in[i] = (int)(lcg(&s) % 50u), tg[i] = (int)(lcg(&s) % 50u);
    char batch[300];
    snprintf(batch, sizeof batch, "%s/batch.bin", dir);
    FILE *f = fopen(batch, "wb");
    int32_t h[2] = {B, T};
    CT_REQUIRE_OR(f && fwrite(h, 4, 2, f) == 2 && fwrite(in, 4, B * T, f) == B * T &&
                      fwrite(tg, 4, B * T, f) == B * T,
                  1, "cannot write %s", batch);
    fclose(f);
    one_case(dev, 1, 0, 0, 0, in, tg, B, T, batch); /* multi-query, untied */
    one_case(dev, 2, 1, 0, 0, in, tg, B, T, batch); /* NKV < NH, tied */
    one_case(dev, 2, 0, 4, 2, in, tg, B, T, batch); /* SwiGLU experts, capacity 1: drops */
    hf_case(dev, 1, 1, in, tg, B, T, batch);
    hf_case(dev, 2, 0, in, tg, B, T, batch);
    ct_test_devices_free(&ds);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) return 1;
    return ct_test_end("test_engine_llama_torch");
}
