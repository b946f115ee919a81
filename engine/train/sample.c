/* sample.c - text generation from a model: repeated forward passes over the last max_T tokens,
 * a draw from the last position's logits (temperature, top-k, seeded RNG), and printing the
 * result as bytes, token ids, or text through an llm.c tokenizer. The forward is a function the
 * caller gives (a plain model's, or the trainer's over its layout); everything else is host code. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_io.h"
#include "ct_engine_model.h"
#include "ct_engine_train.h"

ct_status ct_model_next_logits(void *model, const int *ctx, int n, float *logits, ct_err *err) {
    ct_model *m = (ct_model *)model;
    size_t Vp = (size_t)ct_model_config(m)->padded_vocab;
    float *all = (float *)ct_malloc((size_t)n * Vp * sizeof(float));
    if (!all) return CT_ERR(err, CT_ERR_NOMEM, "no memory for sampling logits");
    ct_status st = ct_model_forward(m, ctx, NULL, 1, n, NULL);
    if (st == CT_OK) st = ct_model_logits(m, all, (size_t)n * Vp);
    if (st == CT_OK) memcpy(logits, all + (size_t)(n - 1) * Vp, Vp * sizeof(float));
    else CT_ERR(err, st, "sampling forward failed: %s", ct_model_errmsg(m));
    free(all);
    return st;
}

ct_status ct_generate(ct_next_logits_fn next, void *user, const ct_gpt_config *c, int *tokens,
                      int n_prompt, int len, int max_T, double temperature, int top_k,
                      ct_rng *rng, ct_err *err) {
    if (n_prompt < 1 || len < n_prompt || max_T < 1)
        return CT_ERR(err, CT_ERR_ARG, "generation needs a prompt of at least one token (got %d "
                                       "of %d, context %d)", n_prompt, len, max_T);
    for (int i = 0; i < n_prompt; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab)
            return CT_ERR(err, CT_ERR_ARG, "prompt token %d is outside the vocabulary of %d",
                          tokens[i], c->vocab);
    float *logits = (float *)ct_malloc((size_t)c->padded_vocab * sizeof(float));
    if (!logits) return CT_ERR(err, CT_ERR_NOMEM, "no memory for sampling logits");
    ct_status st = CT_OK;
    for (int t = n_prompt; t < len && st == CT_OK; t++) {
        int ctx = t < max_T ? t : max_T;
        st = next(user, tokens + (t - ctx), ctx, logits, err);
        if (st == CT_OK)
            tokens[t] = ct_sample_token(logits, c->vocab, temperature, top_k, rng);
    }
    free(logits);
    return st;
}

void ct_print_tokens(FILE *out, const int *tokens, int n, int vocab, const ct_tokenizer *tok) {
    for (int i = 0; i < n; i++) {
        if (tok) {
            size_t l = 0;
            const char *s = ct_tokenizer_decode(tok, tokens[i], &l);
            if (tokens[i] == ct_tokenizer_eot(tok)) fputs("<|endoftext|>", out);
            else if (s) fwrite(s, 1, l, out);
            else fprintf(out, "<%d>", tokens[i]);
        } else if (vocab <= 256) {
            int ch = tokens[i];
            /* Bytes as they are, except control characters other than newline and tab. */
            if (ch == '\n' || ch == '\t' || ch >= 0x20) fputc(ch, out);
            else fprintf(out, "\\x%02x", ch);
        } else {
            fprintf(out, "%s%d", i ? " " : "", tokens[i]);
        }
    }
    fputc('\n', out);
}

ct_status ct_prompt_parse(const char *prompt, int vocab, int eot, int *tokens, int cap, int *n,
                          ct_err *err) {
    *n = 0;
    if (!prompt || !*prompt) {
        if (cap < 1) return CT_ERR(err, CT_ERR_ARG, "no room for a prompt");
        tokens[0] = vocab <= 256 ? '\n' : (eot >= 0 ? eot : (vocab == 50257 ? 50256 : 0));
        *n = 1;
        return CT_OK;
    }
    if (vocab <= 256) {
        for (const unsigned char *p = (const unsigned char *)prompt; *p; p++) {
            if (*n >= cap) return CT_ERR(err, CT_ERR_ARG, "prompt longer than %d tokens", cap);
            if (*p >= vocab)
                return CT_ERR(err, CT_ERR_ARG, "prompt byte %d is outside the vocabulary of %d",
                              *p, vocab);
            tokens[(*n)++] = *p;
        }
        return CT_OK;
    }
    /* A larger vocabulary: the prompt is a list of token ids ("50256,464,3290"). */
    const char *p = prompt;
    while (*p) {
        char *end = NULL;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= vocab)
            return CT_ERR(err, CT_ERR_ARG,
                          "prompt '%s': with a vocabulary of %d the prompt is a comma-separated "
                          "list of token ids in [0, %d)",
                          prompt, vocab, vocab);
        if (*n >= cap) return CT_ERR(err, CT_ERR_ARG, "prompt longer than %d tokens", cap);
        tokens[(*n)++] = (int)v;
        p = end;
        while (*p == ',' || isspace((unsigned char)*p)) p++;
    }
    return CT_OK;
}
