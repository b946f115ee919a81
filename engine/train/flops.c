/* flops.c - the work of a training token: parameter counts (all, and a mixture of experts'
 * active ones), FLOPs per token behind MFU, and the pipeline split balanced by it. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_train.h"

/* ---------------------------------------------------------------- FLOPs */

size_t ct_gpt_param_count(const ct_gpt_config *c) {
    size_t sizes[CT_GPT_NUM_TENSORS];
    return ct_gpt_param_sizes(c, sizes);
}

size_t ct_gpt_active_param_count(const ct_gpt_config *c) {
    size_t sizes[CT_GPT_NUM_TENSORS], n = 0;
    ct_gpt_param_sizes(c, sizes);
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        ct_gpt_tensor_info t = ct_gpt_tensor(c, i);
        /* a token passes through K of the E experts of each block */
        n += t.expert ? sizes[i] / (size_t)t.experts * (size_t)c->top_k : sizes[i];
    }
    return n;
}

double ct_train_flops_per_token(const ct_gpt_config *c, int T) {
    return 6.0 * (double)ct_gpt_active_param_count(c) + 12.0 * c->layers * (double)c->channels * T;
}

/* ---------------------------------------------------------------- pipeline split */

void ct_pp_costs(const ct_gpt_config *c, int T, double *block, double *embed, double *head) {
    double C = c->channels;
    /* 6 x a block's active parameters (attention 4C^2, the MLP 8C^2, or the router EC and K
     * experts' 8C^2 each), + 12CT */
    double mlp = c->experts > 0 ? (double)c->experts * C + 8.0 * c->top_k * C * C : 8.0 * C * C;
    if (block) *block = 6.0 * (4.0 * C * C + mlp) + 12.0 * C * T;
    if (embed) *embed = 3.0 * C;
    if (head) *head = 6.0 * C * c->padded_vocab;
}

ct_status ct_pp_split_balanced(const ct_gpt_config *c, int T, int K, int *layers, ct_err *err) {
    int L = c->layers;
    if (K < 1 || K > L)
        return CT_ERR(err, CT_ERR_ARG,
                      "a pipeline of %d chunks over %d blocks: every chunk needs at least one "
                      "block", K, L);
    double blk, emb, head;
    ct_pp_costs(c, T, &blk, &emb, &head);
    /* best[k][l]: the least largest chunk work splitting blocks [0, l) into chunks 0..k-1;
     * cut[k][l]: where chunk k-1 starts in it */
    double *best = ct_malloc(sizeof(double) * (size_t)(K + 1) * (size_t)(L + 1));
    int *cut = ct_malloc(sizeof(int) * (size_t)(K + 1) * (size_t)(L + 1));
    if (!best || !cut) {
        free(best), free(cut);
        return CT_ERR(err, CT_ERR_NOMEM, "pipeline split: out of memory");
    }
#define BEST(k, l) best[(size_t)(k) * (L + 1) + (l)]
#define CUT(k, l) cut[(size_t)(k) * (L + 1) + (l)]
    for (int k = 0; k <= K; k++)
        for (int l = 0; l <= L; l++) BEST(k, l) = INFINITY, CUT(k, l) = -1;
    BEST(0, 0) = 0;
    for (int k = 1; k <= K; k++)
        for (int l = k; l <= L; l++)
            /* chunk k-1 = blocks [j, l); later starts first, so on a tie the chunk is shorter */
            for (int j = l - 1; j >= k - 1; j--) {
                double w = (l - j) * blk + (k == 1 ? emb : 0) + (k == K && l == L ? head : 0);
                double m = BEST(k - 1, j) > w ? BEST(k - 1, j) : w;
                if (m < BEST(k, l) * (1 - 1e-12)) BEST(k, l) = m, CUT(k, l) = j;
            }
    for (int k = K, l = L; k >= 1; k--) {
        int j = CUT(k, l);
        layers[k - 1] = l - j;
        l = j;
    }
#undef BEST
#undef CUT
    free(best), free(cut);
    return CT_OK;
}

ct_status ct_pp_split_parse(const char *text, const ct_gpt_config *c, int K, int *layers,
                            ct_err *err) {
    const char *p = text;
    int n = 0, sum = 0;
    while (p && *p) {
        char *end = NULL;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 1 << 20)
            return CT_ERR(err, CT_ERR_ARG,
                          "--pp-split '%s': entry %d is not a whole number >= 1", text, n + 1);
        if (n < K) layers[n] = (int)v;
        n++, sum += (int)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) return CT_ERR(err, CT_ERR_ARG, "--pp-split '%s': expected a comma after entry %d",
                                   text, n);
    }
    if (n != K)
        return CT_ERR(err, CT_ERR_ARG,
                      "--pp-split '%s' has %d entries; the pipeline has %d model chunks (--pp x "
                      "--virtual-stages), one entry each", text, n, K);
    if (sum != c->layers)
        return CT_ERR(err, CT_ERR_ARG, "--pp-split '%s' sums to %d blocks; the model has %d", text,
                      sum, c->layers);
    return CT_OK;
}
