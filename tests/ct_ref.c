/* ct_ref.c - plain-C double-precision references of the engine's ops and of the whole GPT-2 model.
 * Written from the formulas for clarity, not speed; used by tests (device vs reference, reference
 * vs finite differences). Never used inside a training step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_ref.h"

void ct_ref_encoder_forward(double *out, const int *inp, const double *wte, const double *wpe,
                            int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const double *e = wte + (size_t)inp[b * T + t] * C, *p = wpe + (size_t)t * C;
            double *o = out + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++) o[c] = e[c] + p[c];
        }
}

void ct_ref_encoder_backward(double *dwte, double *dwpe, const double *dout, const int *inp, int B,
                             int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const double *d = dout + ((size_t)b * T + t) * C;
            double *e = dwte + (size_t)inp[b * T + t] * C, *p = dwpe + (size_t)t * C;
            for (int c = 0; c < C; c++) {
                e[c] += d[c];
                p[c] += d[c];
            }
        }
}

void ct_ref_layernorm_forward(double *out, double *mean, double *rstd, const double *inp,
                              const double *w, const double *b, int B, int T, int C) {
    for (size_t r = 0; r < (size_t)B * T; r++) {
        const double *x = inp + r * C;
        double m = 0, v = 0;
        for (int i = 0; i < C; i++) m += x[i];
        m /= C;
        for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
        v /= C;
        double s = 1.0 / sqrt(v + 1e-5);
        for (int i = 0; i < C; i++) out[r * C + i] = (x[i] - m) * s * w[i] + b[i];
        mean[r] = m;
        rstd[r] = s;
    }
}

void ct_ref_layernorm_backward(double *dinp, double *dw, double *db, const double *dout,
                               const double *inp, const double *w, const double *mean,
                               const double *rstd, int B, int T, int C) {
    for (size_t r = 0; r < (size_t)B * T; r++) {
        const double *x = inp + r * C, *dy = dout + r * C;
        double dmean = 0, dnmean = 0;
        for (int i = 0; i < C; i++) {
            double n = (x[i] - mean[r]) * rstd[r];
            dmean += w[i] * dy[i];
            dnmean += w[i] * dy[i] * n;
        }
        dmean /= C;
        dnmean /= C;
        for (int i = 0; i < C; i++) {
            double n = (x[i] - mean[r]) * rstd[r];
            if (dw) dw[i] += dy[i] * n;
            if (db) db[i] += dy[i];
            if (dinp) dinp[r * C + i] += rstd[r] * (w[i] * dy[i] - dmean - n * dnmean);
        }
    }
}

void ct_ref_matmul_forward(double *out, const double *inp, const double *w, const double *bias,
                           int B, int T, int C, int OC) {
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0.0;
            for (int i = 0; i < C; i++) s += inp[r * C + i] * w[(size_t)o * C + i];
            out[r * OC + o] = s;
        }
}

void ct_ref_matmul_backward(double *dinp, double *dw, double *dbias, const double *dout,
                            const double *inp, const double *w, int B, int T, int C, int OC) {
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int o = 0; o < OC; o++) {
            double d = dout[r * OC + o];
            if (dbias) dbias[o] += d;
            for (int i = 0; i < C; i++) {
                if (dinp) dinp[r * C + i] += d * w[(size_t)o * C + i];
                if (dw) dw[(size_t)o * C + i] += d * inp[r * C + i];
            }
        }
}

void ct_ref_attention_forward(double *out, double *att, const double *inp, int B, int T, int C,
                              int NH) {
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *q = inp + ((size_t)b * T + t) * 3 * C + h * hs;
                double *a = att + (((size_t)b * NH + h) * T + t) * T;
                double mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    const double *k = inp + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    double s = 0;
                    for (int d = 0; d < hs; d++) s += q[d] * k[d];
                    a[j] = s * scale;
                    if (a[j] > mx) mx = a[j];
                }
                double sum = 0;
                for (int j = 0; j <= t; j++) {
                    a[j] = exp(a[j] - mx);
                    sum += a[j];
                }
                for (int j = 0; j <= t; j++) a[j] /= sum;
                for (int j = t + 1; j < T; j++) a[j] = 0;
                double *o = out + ((size_t)b * T + t) * C + h * hs;
                for (int d = 0; d < hs; d++) {
                    double s = 0;
                    for (int j = 0; j <= t; j++)
                        s += a[j] * inp[((size_t)b * T + j) * 3 * C + 2 * C + h * hs + d];
                    o[d] = s;
                }
            }
}

void ct_ref_attention_backward(double *dinp, const double *dout, const double *inp,
                               const double *att, int B, int T, int C, int NH) {
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    double *da = malloc((size_t)T * sizeof *da);
    if (!da) return;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const double *a = att + (((size_t)b * NH + h) * T + t) * T;
                const double *dy = dout + ((size_t)b * T + t) * C + h * hs;
                /* out = sum_j a_j v_j */
                for (int j = 0; j <= t; j++) {
                    const double *v = inp + ((size_t)b * T + j) * 3 * C + 2 * C + h * hs;
                    double *dv = dinp + ((size_t)b * T + j) * 3 * C + 2 * C + h * hs;
                    double s = 0;
                    for (int d = 0; d < hs; d++) {
                        s += dy[d] * v[d];
                        dv[d] += a[j] * dy[d];
                    }
                    da[j] = s;
                }
                /* softmax backward, then the scaled dot products */
                double dot = 0;
                for (int j = 0; j <= t; j++) dot += a[j] * da[j];
                const double *q = inp + ((size_t)b * T + t) * 3 * C + h * hs;
                double *dq = dinp + ((size_t)b * T + t) * 3 * C + h * hs;
                for (int j = 0; j <= t; j++) {
                    double dpre = a[j] * (da[j] - dot) * scale;
                    const double *k = inp + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    double *dk = dinp + ((size_t)b * T + j) * 3 * C + C + h * hs;
                    for (int d = 0; d < hs; d++) {
                        dq[d] += dpre * k[d];
                        dk[d] += dpre * q[d];
                    }
                }
            }
    free(da);
}

#define REF_GELU_S 0.7978845608028654 /* sqrt(2/pi) */

void ct_ref_gelu_forward(double *out, const double *inp, size_t N) {
    for (size_t i = 0; i < N; i++) {
        double x = inp[i];
        out[i] = 0.5 * x * (1.0 + tanh(REF_GELU_S * (x + 0.044715 * x * x * x)));
    }
}

void ct_ref_gelu_backward(double *dinp, const double *inp, const double *dout, size_t N) {
    for (size_t i = 0; i < N; i++) {
        double x = inp[i];
        double th = tanh(REF_GELU_S * (x + 0.044715 * x * x * x));
        double g = 0.5 * (1.0 + th) +
                   0.5 * x * (1.0 - th * th) * REF_GELU_S * (1.0 + 3.0 * 0.044715 * x * x);
        dinp[i] += g * dout[i];
    }
}

void ct_ref_residual_forward(double *out, const double *a, const double *b, size_t N) {
    for (size_t i = 0; i < N; i++) out[i] = a[i] + b[i];
}

void ct_ref_residual_backward(double *da, double *db, const double *dout, size_t N) {
    for (size_t i = 0; i < N; i++) {
        da[i] += dout[i];
        db[i] += dout[i];
    }
}

void ct_ref_crossentropy_forward(double *losses, const double *logits, const int *targets, int B,
                                 int T, int V, int Vp) {
    for (size_t r = 0; r < (size_t)B * T; r++) {
        const double *l = logits + r * Vp;
        double mx = -INFINITY, s = 0;
        for (int v = 0; v < V; v++)
            if (l[v] > mx) mx = l[v];
        for (int v = 0; v < V; v++) s += exp(l[v] - mx);
        losses[r] = mx + log(s) - l[targets[r]];
    }
}

void ct_ref_crossentropy_backward(double *dlogits, const double *logits, const int *targets,
                                  double dloss, int B, int T, int V, int Vp) {
    for (size_t r = 0; r < (size_t)B * T; r++) {
        const double *l = logits + r * Vp;
        double mx = -INFINITY, s = 0;
        for (int v = 0; v < V; v++)
            if (l[v] > mx) mx = l[v];
        for (int v = 0; v < V; v++) s += exp(l[v] - mx);
        for (int v = 0; v < Vp; v++)
            dlogits[r * Vp + v] =
                v < V ? (exp(l[v] - mx) / s - (v == targets[r] ? 1.0 : 0.0)) * dloss : 0.0;
    }
}

double ct_ref_global_norm(const double *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += x[i] * x[i];
    return sqrt(s);
}

void ct_ref_adamw(double *p, const double *g, double *m, double *v, size_t n, double gscale,
                  double lr, double b1, double b2, double eps, double wd, int t) {
    double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    for (size_t i = 0; i < n; i++) {
        double gi = g[i] * gscale;
        m[i] = b1 * m[i] + (1 - b1) * gi;
        v[i] = b2 * v[i] + (1 - b2) * gi * gi;
        p[i] -= lr * ((m[i] / bc1) / (sqrt(v[i] / bc2) + eps) + wd * p[i]);
    }
}

/* ------------------------------------------------------------------ the model */

typedef struct ref_acts {
    double *enc, *ln1, *ln1m, *ln1r, *qkv, *att, *atty, *attp, *res2, *ln2, *ln2m, *ln2r, *fch,
        *fchg, *fcp, *res3, *lnf, *lnfm, *lnfr, *logits, *losses;
} ref_acts;

static void ref_views(const ct_gpt_config *c, const double *base, const double *p[CT_GPT_NUM_TENSORS]) {
    size_t sizes[CT_GPT_NUM_TENSORS];
    ct_gpt_param_sizes(c, sizes);
    size_t off = 0;
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        p[i] = base + off;
        off += sizes[i];
    }
}

static int ref_acts_alloc(ref_acts *a, const ct_gpt_config *cfg, int B, int T) {
    size_t L = (size_t)cfg->layers, BT = (size_t)B * T, C = (size_t)cfg->channels;
    size_t NH = (size_t)cfg->heads, Vp = (size_t)cfg->padded_vocab;
    memset(a, 0, sizeof *a);
    a->enc = calloc(BT * C, sizeof(double));
    a->ln1 = calloc(L * BT * C, sizeof(double));
    a->ln1m = calloc(L * BT, sizeof(double));
    a->ln1r = calloc(L * BT, sizeof(double));
    a->qkv = calloc(L * BT * 3 * C, sizeof(double));
    a->att = calloc(L * B * NH * T * T, sizeof(double));
    a->atty = calloc(L * BT * C, sizeof(double));
    a->attp = calloc(L * BT * C, sizeof(double));
    a->res2 = calloc(L * BT * C, sizeof(double));
    a->ln2 = calloc(L * BT * C, sizeof(double));
    a->ln2m = calloc(L * BT, sizeof(double));
    a->ln2r = calloc(L * BT, sizeof(double));
    a->fch = calloc(L * BT * 4 * C, sizeof(double));
    a->fchg = calloc(L * BT * 4 * C, sizeof(double));
    a->fcp = calloc(L * BT * C, sizeof(double));
    a->res3 = calloc(L * BT * C, sizeof(double));
    a->lnf = calloc(BT * C, sizeof(double));
    a->lnfm = calloc(BT, sizeof(double));
    a->lnfr = calloc(BT, sizeof(double));
    a->logits = calloc(BT * Vp, sizeof(double));
    a->losses = calloc(BT, sizeof(double));
    double **all = (double **)a;
    for (size_t i = 0; i < sizeof *a / sizeof(double *); i++)
        if (!all[i]) return -1;
    return 0;
}

static void ref_acts_free(ref_acts *a) {
    double **all = (double **)a;
    for (size_t i = 0; i < sizeof *a / sizeof(double *); i++) free(all[i]);
}

static double ref_forward(const ct_gpt_config *cfg, const double *const *P, const int *tokens,
                          const int *targets, int B, int T, ref_acts *a) {
    int L = cfg->layers, C = cfg->channels, NH = cfg->heads;
    size_t BT = (size_t)B * T, BTC = BT * C;
    ct_ref_encoder_forward(a->enc, tokens, P[CT_GPT_wte], P[CT_GPT_wpe], B, T, C);
    const double *res = a->enc;
    for (int l = 0; l < L; l++) {
        size_t lc = (size_t)l * C;
        double *ln1 = a->ln1 + l * BTC, *qkv = a->qkv + l * 3 * BTC, *atty = a->atty + l * BTC;
        double *att = a->att + (size_t)l * B * NH * T * T, *attp = a->attp + l * BTC;
        double *res2 = a->res2 + l * BTC, *ln2 = a->ln2 + l * BTC, *fch = a->fch + l * 4 * BTC;
        double *fchg = a->fchg + l * 4 * BTC, *fcp = a->fcp + l * BTC, *res3 = a->res3 + l * BTC;
        ct_ref_layernorm_forward(ln1, a->ln1m + l * BT, a->ln1r + l * BT, res, P[CT_GPT_ln1w] + lc,
                                 P[CT_GPT_ln1b] + lc, B, T, C);
        ct_ref_matmul_forward(qkv, ln1, P[CT_GPT_qkvw] + lc * 3 * C, P[CT_GPT_qkvb] + 3 * lc, B, T,
                              C, 3 * C);
        ct_ref_attention_forward(atty, att, qkv, B, T, C, NH);
        ct_ref_matmul_forward(attp, atty, P[CT_GPT_attprojw] + lc * C, P[CT_GPT_attprojb] + lc, B,
                              T, C, C);
        ct_ref_residual_forward(res2, res, attp, BTC);
        ct_ref_layernorm_forward(ln2, a->ln2m + l * BT, a->ln2r + l * BT, res2,
                                 P[CT_GPT_ln2w] + lc, P[CT_GPT_ln2b] + lc, B, T, C);
        ct_ref_matmul_forward(fch, ln2, P[CT_GPT_fcw] + lc * 4 * C, P[CT_GPT_fcb] + 4 * lc, B, T,
                              C, 4 * C);
        ct_ref_gelu_forward(fchg, fch, 4 * BTC);
        ct_ref_matmul_forward(fcp, fchg, P[CT_GPT_fcprojw] + lc * 4 * C, P[CT_GPT_fcprojb] + lc, B,
                              T, 4 * C, C);
        ct_ref_residual_forward(res3, res2, fcp, BTC);
        res = res3;
    }
    ct_ref_layernorm_forward(a->lnf, a->lnfm, a->lnfr, res, P[CT_GPT_lnfw], P[CT_GPT_lnfb], B, T,
                             C);
    ct_ref_matmul_forward(a->logits, a->lnf, P[CT_GPT_wte], NULL, B, T, C, cfg->padded_vocab);
    if (!targets) return 0.0;
    ct_ref_crossentropy_forward(a->losses, a->logits, targets, B, T, cfg->vocab,
                                cfg->padded_vocab);
    double s = 0;
    for (size_t i = 0; i < BT; i++) s += a->losses[i];
    return s / (double)BT;
}

double ct_ref_gpt_loss(const ct_gpt_config *cfg, const double *params, const int *tokens,
                       const int *targets, int B, int T) {
    if (cfg->experts > 0) return NAN; /* the dense model only: MoE layers have ct_ref_moe_* */
    const double *P[CT_GPT_NUM_TENSORS];
    ref_views(cfg, params, P);
    ref_acts a;
    double loss = NAN;
    if (ref_acts_alloc(&a, cfg, B, T) == 0) loss = ref_forward(cfg, P, tokens, targets, B, T, &a);
    ref_acts_free(&a);
    return loss;
}

double ct_ref_gpt_grad(const ct_gpt_config *cfg, const double *params, const int *tokens,
                       const int *targets, int B, int T, double *grads, double *logits) {
    if (cfg->experts > 0) return NAN; /* the dense model only: MoE layers have ct_ref_moe_* */
    int L = cfg->layers, C = cfg->channels, NH = cfg->heads, V = cfg->vocab;
    int Vp = cfg->padded_vocab;
    size_t BT = (size_t)B * T, BTC = BT * C;
    size_t sizes[CT_GPT_NUM_TENSORS];
    size_t total = ct_gpt_param_sizes(cfg, sizes);
    const double *P[CT_GPT_NUM_TENSORS];
    ref_views(cfg, params, P);
    double *G[CT_GPT_NUM_TENSORS];
    memset(grads, 0, total * sizeof *grads);
    ref_views(cfg, grads, (const double **)G);
    ref_acts a;
    double loss = NAN;
    double *dlogits = calloc(BT * Vp, sizeof(double)), *dres = calloc(BTC, sizeof(double));
    double *d1 = calloc(4 * BTC, sizeof(double)), *d2 = calloc(4 * BTC, sizeof(double));
    double *dln = calloc(BTC, sizeof(double));
    if (ref_acts_alloc(&a, cfg, B, T) != 0 || !dlogits || !dres || !d1 || !d2 || !dln) goto done;
    loss = ref_forward(cfg, P, tokens, targets, B, T, &a);
    if (logits) memcpy(logits, a.logits, BT * Vp * sizeof(double));
    ct_ref_crossentropy_backward(dlogits, a.logits, targets, 1.0 / (double)BT, B, T, V, Vp);
    memset(dln, 0, BTC * sizeof(double));
    ct_ref_matmul_backward(dln, G[CT_GPT_wte], NULL, dlogits, a.lnf, P[CT_GPT_wte], B, T, C, Vp);
    const double *resL = L > 0 ? a.res3 + (size_t)(L - 1) * BTC : a.enc;
    ct_ref_layernorm_backward(dres, G[CT_GPT_lnfw], G[CT_GPT_lnfb], dln, resL, P[CT_GPT_lnfw],
                              a.lnfm, a.lnfr, B, T, C);
    for (int l = L - 1; l >= 0; l--) {
        size_t lc = (size_t)l * C;
        const double *res = l > 0 ? a.res3 + (size_t)(l - 1) * BTC : a.enc;
        /* dres holds d loss / d res3[l]; it becomes d loss / d res (the layer input) */
        memset(d1, 0, 4 * BTC * sizeof(double));
        ct_ref_matmul_backward(d1, G[CT_GPT_fcprojw] + lc * 4 * C, G[CT_GPT_fcprojb] + lc, dres,
                               a.fchg + l * 4 * BTC, P[CT_GPT_fcprojw] + lc * 4 * C, B, T, 4 * C,
                               C);
        memset(d2, 0, 4 * BTC * sizeof(double));
        ct_ref_gelu_backward(d2, a.fch + l * 4 * BTC, d1, 4 * BTC);
        memset(dln, 0, BTC * sizeof(double));
        ct_ref_matmul_backward(dln, G[CT_GPT_fcw] + lc * 4 * C, G[CT_GPT_fcb] + 4 * lc, d2,
                               a.ln2 + l * BTC, P[CT_GPT_fcw] + lc * 4 * C, B, T, C, 4 * C);
        ct_ref_layernorm_backward(dres, G[CT_GPT_ln2w] + lc, G[CT_GPT_ln2b] + lc, dln,
                                  a.res2 + l * BTC, P[CT_GPT_ln2w] + lc, a.ln2m + l * BT,
                                  a.ln2r + l * BT, B, T, C);
        memset(d1, 0, BTC * sizeof(double));
        ct_ref_matmul_backward(d1, G[CT_GPT_attprojw] + lc * C, G[CT_GPT_attprojb] + lc, dres,
                               a.atty + l * BTC, P[CT_GPT_attprojw] + lc * C, B, T, C, C);
        memset(d2, 0, 3 * BTC * sizeof(double));
        ct_ref_attention_backward(d2, d1, a.qkv + l * 3 * BTC, a.att + (size_t)l * B * NH * T * T,
                                  B, T, C, NH);
        memset(dln, 0, BTC * sizeof(double));
        ct_ref_matmul_backward(dln, G[CT_GPT_qkvw] + lc * 3 * C, G[CT_GPT_qkvb] + 3 * lc, d2,
                               a.ln1 + l * BTC, P[CT_GPT_qkvw] + lc * 3 * C, B, T, C, 3 * C);
        ct_ref_layernorm_backward(dres, G[CT_GPT_ln1w] + lc, G[CT_GPT_ln1b] + lc, dln, res,
                                  P[CT_GPT_ln1w] + lc, a.ln1m + l * BT, a.ln1r + l * BT, B, T, C);
    }
    ct_ref_encoder_backward(G[CT_GPT_wte], G[CT_GPT_wpe], dres, tokens, B, T, C);
done:
    ref_acts_free(&a);
    free(dlogits);
    free(dres);
    free(d1);
    free(d2);
    free(dln);
    return loss;
}

/* ------------------------------------------------------------------ mixture of experts */

void ct_ref_moe_route(double *p, int *idx, double *gate, const double *logits, int N, int E, int K) {
    for (int n = 0; n < N; n++) {
        const double *l = logits + (size_t)n * E;
        double *pr = p + (size_t)n * E, mx = l[0], s = 0;
        for (int e = 1; e < E; e++) mx = l[e] > mx ? l[e] : mx;
        for (int e = 0; e < E; e++) s += exp(l[e] - mx);
        for (int e = 0; e < E; e++) pr[e] = exp(l[e] - mx) / s;
        for (int k = 0; k < K; k++) { /* the k-th largest; equal p: the lower expert */
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int j = 0; j < k; j++) taken |= idx[(size_t)n * K + j] == e;
                if (!taken && (best < 0 || pr[e] > pr[best])) best = e;
            }
            idx[(size_t)n * K + k] = best;
            gate[(size_t)n * K + k] = pr[best];
        }
    }
}

void ct_ref_moe_capacity(int *slot, int *kept, int *routed, const int *idx, int B, int T, int E,
                         int K, int cap) {
    for (int b = 0; b < B; b++) {
        int *kp = kept + (size_t)b * E, *rt = routed + (size_t)b * E;
        for (int e = 0; e < E; e++) kp[e] = rt[e] = 0;
        for (int k = 0; k < K; k++) /* rank first, then position */
            for (int t = 0; t < T; t++) {
                size_t i = ((size_t)b * T + t) * K + k;
                int e = idx[i];
                rt[e]++;
                slot[i] = kp[e] < cap ? kp[e]++ : -1;
            }
    }
}

/* The routing of x: p (B,T,E), idx/gate/slot (B,T,K), routed (B,E). */
typedef struct ref_route {
    double *p, *gate;
    int *idx, *slot, *kept, *routed;
} ref_route;

static int ref_route_make(ref_route *r, const double *x, const double *wr, int B, int T, int C,
                          int E, int K, int cap) {
    size_t N = (size_t)B * T;
    double *lg = malloc(N * E * sizeof(double));
    r->p = malloc(N * E * sizeof(double));
    r->gate = malloc(N * K * sizeof(double));
    r->idx = malloc(N * K * sizeof(int));
    r->slot = malloc(N * K * sizeof(int));
    r->kept = malloc((size_t)B * E * sizeof(int));
    r->routed = malloc((size_t)B * E * sizeof(int));
    if (!lg || !r->p || !r->gate || !r->idx || !r->slot || !r->kept || !r->routed) {
        free(lg);
        return -1;
    }
    ct_ref_matmul_forward(lg, x, wr, NULL, B, T, C, E);
    ct_ref_moe_route(r->p, r->idx, r->gate, lg, (int)N, E, K);
    ct_ref_moe_capacity(r->slot, r->kept, r->routed, r->idx, B, T, E, K, cap);
    free(lg);
    return 0;
}

static void ref_route_free(ref_route *r) {
    free(r->p), free(r->gate), free(r->idx), free(r->slot), free(r->kept), free(r->routed);
}

/* One expert's MLP on one token: h (4C) pre-GELU, a = gelu(h), o (C). */
static void ref_expert(double *h, double *a, double *o, const double *x, const double *w1,
                       const double *b1, const double *w2, const double *b2, int C) {
    for (int j = 0; j < 4 * C; j++) {
        double s = b1[j];
        for (int c = 0; c < C; c++) s += w1[(size_t)j * C + c] * x[c];
        h[j] = s;
    }
    ct_ref_gelu_forward(a, h, (size_t)4 * C);
    for (int c = 0; c < C; c++) {
        double s = b2[c];
        for (int j = 0; j < 4 * C; j++) s += w2[(size_t)c * 4 * C + j] * a[j];
        o[c] = s;
    }
}

static double ref_aux(const ref_route *r, int B, int T, int E, int K) {
    double aux = 0;
    for (int b = 0; b < B; b++) {
        double row = 0;
        for (int e = 0; e < E; e++) {
            double P = 0;
            for (int t = 0; t < T; t++) P += r->p[((size_t)b * T + t) * E + e];
            row += (double)r->routed[(size_t)b * E + e] / ((double)K * T) * (P / T);
        }
        aux += E * row;
    }
    return aux / B;
}

double ct_ref_moe_forward(double *y, const double *x, const double *wr, const double *fcw,
                          const double *fcb, const double *fpw, const double *fpb, int B, int T,
                          int C, int E, int K, int cap) {
    ref_route r;
    if (ref_route_make(&r, x, wr, B, T, C, E, K, cap)) return NAN;
    double *h = malloc(4 * (size_t)C * sizeof(double)), *a = malloc(4 * (size_t)C * sizeof(double));
    double *o = malloc((size_t)C * sizeof(double));
    for (size_t n = 0; h && a && o && n < (size_t)B * T; n++) {
        double *yn = y + n * C;
        for (int c = 0; c < C; c++) yn[c] = 0;
        for (int k = 0; k < K; k++) {
            size_t i = n * K + k;
            if (r.slot[i] < 0) continue;
            size_t e = (size_t)r.idx[i];
            ref_expert(h, a, o, x + n * C, fcw + e * 4 * C * C, fcb + e * 4 * C, fpw + e * 4 * C * C,
                       fpb + e * C, C);
            for (int c = 0; c < C; c++) yn[c] += r.gate[i] * o[c];
        }
    }
    double aux = ref_aux(&r, B, T, E, K);
    free(h), free(a), free(o);
    ref_route_free(&r);
    return aux;
}

void ct_ref_moe_backward(double *dx, double *dwr, double *dfcw, double *dfcb, double *dfpw,
                         double *dfpb, const double *dy, const double *x, const double *wr,
                         const double *fcw, const double *fcb, const double *fpw,
                         const double *fpb, int B, int T, int C, int E, int K, int cap,
                         double aux_scale) {
    size_t N = (size_t)B * T, F = 4 * (size_t)C;
    ref_route r;
    if (ref_route_make(&r, x, wr, B, T, C, E, K, cap)) return;
    double *h = malloc(F * sizeof(double)), *a = malloc(F * sizeof(double));
    double *o = malloc((size_t)C * sizeof(double)), *da = malloc(F * sizeof(double));
    double *dh = calloc(F, sizeof(double)), *dp = malloc((size_t)E * sizeof(double));
    double *dl = malloc((size_t)E * sizeof(double));
    if (!h || !a || !o || !da || !dh || !dp || !dl) goto done;
    memset(dx, 0, N * C * sizeof(double));
    for (size_t n = 0; n < N; n++) {
        const double *xn = x + n * C, *dyn = dy + n * C;
        double *dxn = dx + n * C;
        size_t b = n / (size_t)T;
        /* the auxiliary loss: d (aux_scale * mean_b E sum_e f_e P_e) / d p[n, e] */
        for (int e = 0; e < E; e++)
            dp[e] = aux_scale * E * r.routed[b * E + e] / ((double)B * K * T * T);
        for (int k = 0; k < K; k++) {
            size_t i = n * K + k;
            if (r.slot[i] < 0) continue;
            size_t e = (size_t)r.idx[i];
            const double *w1 = fcw + e * F * C, *w2 = fpw + e * F * C;
            ref_expert(h, a, o, xn, w1, fcb + e * F, w2, fpb + e * C, C);
            double g = r.gate[i], dg = 0;
            for (int c = 0; c < C; c++) dg += dyn[c] * o[c];
            dp[e] += dg;
            /* o = W2 a + b2, weighted by g */
            for (size_t j = 0; j < F; j++) da[j] = 0;
            for (int c = 0; c < C; c++) {
                double d = g * dyn[c];
                dfpb[e * C + c] += d;
                for (size_t j = 0; j < F; j++) {
                    dfpw[e * F * C + (size_t)c * F + j] += d * a[j];
                    da[j] += w2[(size_t)c * F + j] * d;
                }
            }
            for (size_t j = 0; j < F; j++) dh[j] = 0;
            ct_ref_gelu_backward(dh, h, da, F);
            for (size_t j = 0; j < F; j++) {
                dfcb[e * F + j] += dh[j];
                for (int c = 0; c < C; c++) {
                    dfcw[e * F * C + j * C + c] += dh[j] * xn[c];
                    dxn[c] += w1[j * C + c] * dh[j];
                }
            }
        }
        const double *pn = r.p + n * E;
        double s = 0;
        for (int e = 0; e < E; e++) s += pn[e] * dp[e];
        for (int e = 0; e < E; e++) dl[e] = pn[e] * (dp[e] - s);
        for (int e = 0; e < E; e++)
            for (int c = 0; c < C; c++) {
                dwr[(size_t)e * C + c] += dl[e] * xn[c];
                dxn[c] += wr[(size_t)e * C + c] * dl[e];
            }
    }
done:
    free(h), free(a), free(o), free(da), free(dh), free(dp), free(dl);
    ref_route_free(&r);
}

/* ---- the Llama family's ops, straight from the formulas */

void ct_ref_rmsnorm_forward(double *out, double *rstd, const double *inp, const double *w, int N,
                            int C, double eps) {
    for (int r = 0; r < N; r++) {
        const double *x = inp + (size_t)r * C;
        double ss = 0;
        for (int i = 0; i < C; i++) ss += x[i] * x[i];
        double s = 1.0 / sqrt(ss / C + eps);
        for (int i = 0; i < C; i++) out[(size_t)r * C + i] = x[i] * s * w[i];
        if (rstd) rstd[r] = s;
    }
}

void ct_ref_rmsnorm_backward(double *dinp, double *dw, const double *dout, const double *inp,
                             const double *w, int N, int C, double eps) {
    for (int r = 0; r < N; r++) {
        const double *x = inp + (size_t)r * C, *dy = dout + (size_t)r * C;
        double ss = 0, dot = 0;
        for (int i = 0; i < C; i++) ss += x[i] * x[i], dot += w[i] * dy[i] * x[i];
        double s = 1.0 / sqrt(ss / C + eps);
        for (int i = 0; i < C; i++) {
            /* d/dx_i of x_k s w_k: s w_i dy_i + sum_k x_k w_k dy_k ds/dx_i, ds/dx_i = -s^3 x_i / C */
            if (dinp) dinp[(size_t)r * C + i] += s * w[i] * dy[i] - s * s * s * x[i] * dot / C;
            if (dw) dw[i] += dy[i] * x[i] * s;
        }
    }
}

void ct_ref_rope(double *out, const double *inp, int N, int T, int nh, int hd, int stride,
                 double theta, int dir) {
    int half = hd / 2;
    for (int r = 0; r < N; r++)
        for (int h = 0; h < nh; h++)
            for (int j = 0; j < half; j++) {
                double ang = (r % T) * pow(theta, -2.0 * j / hd);
                double c = cos(ang), s = dir * sin(ang);
                size_t o = (size_t)r * stride + (size_t)h * hd + j;
                double a = inp[o], b = inp[o + half];
                out[o] = a * c - b * s;
                out[o + half] = b * c + a * s;
            }
}

void ct_ref_swiglu_forward(double *out, const double *g, const double *u, size_t N) {
    for (size_t i = 0; i < N; i++) out[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
}

void ct_ref_swiglu_backward(double *dg, double *du, const double *dout, const double *g,
                            const double *u, size_t N) {
    for (size_t i = 0; i < N; i++) {
        double sg = 1.0 / (1.0 + exp(-g[i]));
        dg[i] += dout[i] * u[i] * sg * (1.0 + g[i] * (1.0 - sg));
        du[i] += dout[i] * g[i] * sg;
    }
}
