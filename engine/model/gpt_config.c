/* gpt_config.c - the GPT-2 configuration's own check (ct_gpt_config.h): what every reader of a
 * config (model files, safetensors, checkpoints, the trainer's flags) asks before trusting one. */
#include "ct_gpt_config.h"

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
    /* Guard against sizes whose product overflows or is absurd (a corrupt header). */
    double e = c->experts > 0 ? c->experts : 1;
    double total = (double)c->padded_vocab * c->channels + (double)c->max_seq * c->channels +
                   (4.0 + 8.0 * e) * c->layers * (double)c->channels * c->channels;
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
