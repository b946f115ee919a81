/* gpt_config.c - the model configuration's own check (ct_gpt_config.h: GPT-2 or Llama): what
 * every reader of a config (model files, safetensors, checkpoints, the trainer's flags) asks
 * before trusting one; the architectures' names. */
#include <math.h>
#include <string.h>

#include "ct_gpt_config.h"

const char *ct_arch_name(int arch) {
    return arch == CT_ARCH_GPT2 ? "gpt2" : arch == CT_ARCH_LLAMA ? "llama" : "?";
}

ct_status ct_arch_parse(const char *s, int *arch) {
    if (s && !strcmp(s, "gpt2")) return *arch = CT_ARCH_GPT2, CT_OK;
    if (s && !strcmp(s, "llama")) return *arch = CT_ARCH_LLAMA, CT_OK;
    return CT_ERR_ARG;
}

/* The Llama fields: GPT-2 leaves them 0 (or at GPT-2's own values); Llama's are in range. */
static ct_status arch_check(const ct_gpt_config *c, const char *what, ct_err *err) {
    int C = c->channels, NH = c->heads;
    if (c->arch != CT_ARCH_GPT2 && c->arch != CT_ARCH_LLAMA)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: architecture %d is neither gpt2 (0) nor llama (1)",
                      what, c->arch);
    if (c->arch == CT_ARCH_GPT2) {
        if (c->kv_heads != 0 && c->kv_heads != NH)
            return CT_ERR(err, CT_ERR_FORMAT,
                          "%s: kv_heads %d in a GPT-2 model (its attention is multi-head: %d)",
                          what, c->kv_heads, NH);
        if (c->ffn_dim != 0 && c->ffn_dim != 4 * C)
            return CT_ERR(err, CT_ERR_FORMAT,
                          "%s: ffn_dim %d in a GPT-2 model (its MLP is 4C = %d wide)", what,
                          c->ffn_dim, 4 * C);
        if (c->rope_theta != 0.0f)
            return CT_ERR(err, CT_ERR_FORMAT,
                          "%s: rope_theta %g in a GPT-2 model (it has learned positions, no "
                          "rotary embedding)",
                          what, (double)c->rope_theta);
        if (c->norm_eps != 0.0f && c->norm_eps != 1e-5f)
            return CT_ERR(err, CT_ERR_FORMAT,
                          "%s: norm_eps %g in a GPT-2 model (its LayerNorm's eps is 1e-5)", what,
                          (double)c->norm_eps);
        return CT_OK;
    }
    if (c->kv_heads < 1 || NH % c->kv_heads)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: kv_heads %d does not divide the %d heads (NH %% NKV must be 0: each kv "
                      "head serves NH / NKV query heads)",
                      what, c->kv_heads, NH);
    if ((C / NH) % 2)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: head size %d is odd (the rotary embedding turns pairs of channels)",
                      what, C / NH);
    if (c->ffn_dim < 1)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: ffn_dim %d must be positive", what, c->ffn_dim);
    if (!(c->rope_theta > 1.0f) || !isfinite(c->rope_theta))
        return CT_ERR(err, CT_ERR_FORMAT, "%s: rope_theta %g must be a finite number above 1",
                      what, (double)c->rope_theta);
    if (!(c->norm_eps > 0.0f) || !isfinite(c->norm_eps))
        return CT_ERR(err, CT_ERR_FORMAT, "%s: norm_eps %g must be a finite positive number",
                      what, (double)c->norm_eps);
    if (c->tie_embeddings != 0 && c->tie_embeddings != 1)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: tie_embeddings %d is not 0 or 1", what,
                      c->tie_embeddings);
    return CT_OK;
}

ct_status ct_gpt_config_check(const ct_gpt_config *c, const char *what, ct_err *err) {
    if (c->max_seq <= 0 || c->vocab <= 0 || c->padded_vocab <= 0 || c->layers <= 0 ||
        c->heads <= 0 || c->channels <= 0)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: every size must be positive (maxT=%d V=%d Vp=%d L=%d NH=%d C=%d)", what,
                      c->max_seq, c->vocab, c->padded_vocab, c->layers, c->heads, c->channels);
    if (c->channels % c->heads != 0)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: %d heads do not divide %d channels (C %% NH must be 0)", what, c->heads,
                      c->channels);
    if (c->padded_vocab < c->vocab)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: padded vocabulary %d is below the vocabulary %d",
                      what, c->padded_vocab, c->vocab);
    if (c->experts < 0 || (c->experts == 0 && c->top_k != 0) ||
        (c->experts > 0 && (c->top_k < 1 || c->top_k > c->experts)))
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: %d experts with top-k %d (a dense model has experts 0 and top-k 0; a "
                      "mixture of experts needs 1 <= top-k <= experts)",
                      what, c->experts, c->top_k);
    ct_status st = arch_check(c, what, err);
    if (st != CT_OK) return st;
    /* Guard against sizes whose product overflows or is absurd (a corrupt header). */
    double e = c->experts > 0 ? c->experts : 1;
    double total = (double)c->padded_vocab * c->channels + (double)c->max_seq * c->channels +
                   (4.0 + 8.0 * e) * c->layers * (double)c->channels * c->channels;
    if (ct_gpt_is_llama(c))
        total += 3.0 * c->layers * (double)c->channels * c->ffn_dim +
                 (double)c->padded_vocab * c->channels;
    if (total > 1e11)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: the sizes imply %.3g parameters; not plausible",
                      what, total);
    return CT_OK;
}

int ct_gpt_tensor_decays(int i) {
    static const int decays[] = {
#define CT__GPT_DECAY(name, pl, ex, rows, cols, nd, split, decay, init) decay,
        CT_GPT_TABLE(CT__GPT_DECAY, (const ct_gpt_config *)0)
#undef CT__GPT_DECAY
    };
    return i >= 0 && i < CT_GPT_NUM_TENSORS && decays[i];
}

double ct_gpt_worker_params(const ct_gpt_config *c, int blocks, int first, int last, int tp,
                            int ep, double *experts) {
    size_t sizes[CT_GPT_NUM_TENSORS];
    ct_gpt_param_sizes(c, sizes);
    double n = 0, x = 0;
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        ct_gpt_tensor_info ti = ct_gpt_tensor(c, i);
        double k = 0;
        if (ti.per_layer)
            k = (double)(sizes[i] / (size_t)c->layers) * blocks;
        else if (ct_gpt_stage_holds(i, blocks, first, last))
            k = (double)sizes[i];
        double v = k * (ti.split == CT_SPLIT_NONE ? 1.0 : 1.0 / tp);
        if (ti.expert) v /= ep;
        if (ti.expert && experts) x += v;
        else n += v;
    }
    if (experts) *experts = x;
    return n;
}
