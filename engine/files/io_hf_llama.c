/* io_hf_llama.c - Hugging Face's config.json of a LlamaForCausalLM, read into the engine's config
 * and written from it (io_hf_config.c hands over a config whose model_type is "llama"). As for
 * GPT-2, every field is placed: the shape (required integers; num_key_value_heads, rope_theta,
 * rms_norm_eps and tie_word_embeddings optional with Hugging Face's defaults), the ones the engine
 * implements with one value only (hidden_act silu, no attention or MLP biases, no rope_scaling,
 * no sliding window, head_dim C / NH, pretraining_tp 1: anything else refused naming the field),
 * the ones that leave the computed model alone (the GPT-2 reader's list, handed over as `ignored`),
 * and any other field refused. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_alloc.h"
#include "ct_engine_io.h"
#include "io_hf_impl.h"

static ct_status need_int(const ct_json *root, const char *what, const char *key, int required,
                          int *out, ct_err *err) {
    const ct_json *v = ct__json_get(root, key);
    uint64_t x;
    if (!v && !required) return CT_OK;
    if (!v)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s has no \"%s\" (a Llama config.json gives hidden_size, "
                      "num_hidden_layers, num_attention_heads, intermediate_size, vocab_size and "
                      "max_position_embeddings)",
                      what, key);
    if (ct__json_uint(v, 0x7fffffff, &x) || x == 0)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: \"%s\" must be a positive integer", what, key);
    *out = (int)x;
    return CT_OK;
}

static ct_status need_num(const ct_json *v, const char *what, const char *key, double lo,
                          float *out, ct_err *err) {
    if (!v) return CT_OK;
    if (v->t != CT_JSON_NUM || !(v->num > lo) || !isfinite(v->num) || v->num > 3e38)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: \"%s\" must be a number above %g", what, key, lo);
    *out = (float)v->num;
    return CT_OK;
}

/* A field the engine implements with one value only; `is` says whether v has it. */
static ct_status only(int is, const ct_json *v, const char *what, const char *key,
                      const char *want, ct_err *err) {
    if (is) return CT_OK;
    char got[48];
    if (v->t == CT_JSON_STR) snprintf(got, sizeof got, "\"%.40s\"", v->str);
    else if (v->t == CT_JSON_NUM) snprintf(got, sizeof got, "%g", v->num);
    else if (v->t == CT_JSON_BOOL) snprintf(got, sizeof got, "%s", v->num ? "true" : "false");
    else snprintf(got, sizeof got, "%s", ct__json_type_name(v->t));
    return CT_ERR(err, CT_ERR_UNSUPPORTED, "%s: \"%s\": %s is not implemented (only %s)", what,
                  key, got, want);
}

static int is_false(const ct_json *v) { return v->t == CT_JSON_BOOL && !v->num; }

static ct_status field(const char *k, const ct_json *v, const char *what, const ct_gpt_config *c,
                       int (*ignored)(const char *), ct_err *err) {
    static const char *const shape[] = {
        "model_type",        "hidden_size",         "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "intermediate_size",
        "vocab_size",        "max_position_embeddings", "rope_theta",
        "rms_norm_eps",      "tie_word_embeddings"};
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++)
        if (!strcmp(k, shape[i])) return CT_OK; /* read by ct__hf_llama_parse */
    if (!strcmp(k, "architectures")) {
        if (v->t != CT_JSON_ARR)
            return CT_ERR(err, CT_ERR_FORMAT, "%s: \"architectures\" must be an array", what);
        for (int i = 0; i < v->n; i++)
            if (v->items[i].t != CT_JSON_STR || (strcmp(v->items[i].str, "LlamaForCausalLM") &&
                                                 strcmp(v->items[i].str, "LlamaModel")))
                return CT_ERR(err, CT_ERR_UNSUPPORTED,
                              "%s: \"architectures\": %.60s is not supported (LlamaForCausalLM "
                              "is)",
                              what,
                              v->items[i].t == CT_JSON_STR ? v->items[i].str : "a non-string");
        return CT_OK;
    }
    if (!strcmp(k, "hidden_act"))
        return only(v->t == CT_JSON_STR && !strcmp(v->str, "silu"), v, what, k,
                    "\"silu\": the MLP is SwiGLU", err);
    if (!strcmp(k, "attention_bias"))
        return only(is_false(v), v, what, k, "false: q, k, v and o have no biases", err);
    if (!strcmp(k, "mlp_bias"))
        return only(is_false(v), v, what, k, "false: gate, up and down have no biases", err);
    if (!strcmp(k, "rope_scaling"))
        return only(v->t == CT_JSON_NULL, v, what, k,
                    "null: the rotary embedding is unscaled", err);
    if (!strcmp(k, "sliding_window") || !strcmp(k, "use_sliding_window"))
        return only(v->t == CT_JSON_NULL || is_false(v), v, what, k,
                    "null or false: attention is causal over the whole sequence", err);
    if (!strcmp(k, "head_dim")) {
        uint64_t x = 0;
        int ok = !ct__json_uint(v, 0x7fffffff, &x) && c->heads > 0 &&
                 x == (uint64_t)(c->channels / c->heads);
        return only(ok, v, what, k, "hidden_size / num_attention_heads", err);
    }
    if (!strcmp(k, "pretraining_tp")) {
        uint64_t x = 0;
        return only(!ct__json_uint(v, 4, &x) && x == 1, v, what, k, "1", err);
    }
    if (!strcmp(k, "attention_dropout") || !strcmp(k, "hidden_dropout")) return CT_OK;
    if (ignored(k)) return CT_OK;
    return CT_ERR(err, CT_ERR_UNSUPPORTED,
                  "%s: field \"%.60s\" is not known to cltrain's Llama reader, so it may change "
                  "the model in a way the engine does not implement (remove it if it does not)",
                  what, k);
}

ct_status ct__hf_llama_parse(const ct_json *root, const char *what,
                             int (*ignored)(const char *), ct_gpt_config *cfg, ct_err *err) {
    ct_status st;
    memset(cfg, 0, sizeof *cfg);
    cfg->arch = CT_ARCH_LLAMA;
    cfg->rope_theta = 10000.0f, cfg->norm_eps = 1e-6f; /* Hugging Face's LlamaConfig defaults */
    if ((st = need_int(root, what, "hidden_size", 1, &cfg->channels, err)) != CT_OK ||
        (st = need_int(root, what, "num_hidden_layers", 1, &cfg->layers, err)) != CT_OK ||
        (st = need_int(root, what, "num_attention_heads", 1, &cfg->heads, err)) != CT_OK ||
        (st = need_int(root, what, "intermediate_size", 1, &cfg->ffn_dim, err)) != CT_OK ||
        (st = need_int(root, what, "vocab_size", 1, &cfg->vocab, err)) != CT_OK ||
        (st = need_int(root, what, "max_position_embeddings", 1, &cfg->max_seq, err)) != CT_OK)
        return st;
    cfg->kv_heads = cfg->heads;
    if ((st = need_int(root, what, "num_key_value_heads", 0, &cfg->kv_heads, err)) != CT_OK ||
        (st = need_num(ct__json_get(root, "rope_theta"), what, "rope_theta", 1.0,
                       &cfg->rope_theta, err)) != CT_OK ||
        (st = need_num(ct__json_get(root, "rms_norm_eps"), what, "rms_norm_eps", 0.0,
                       &cfg->norm_eps, err)) != CT_OK)
        return st;
    const ct_json *tie = ct__json_get(root, "tie_word_embeddings");
    if (tie && tie->t != CT_JSON_BOOL)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: \"tie_word_embeddings\" must be true or false",
                      what);
    cfg->tie_embeddings = tie && tie->num ? 1 : 0;
    for (int i = 0; i < root->n; i++)
        if ((st = field(root->keys[i], &root->items[i], what, cfg, ignored, err)) != CT_OK)
            return st;
    if (cfg->vocab > 0x7fffffff - 127)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: \"vocab_size\" %d is too large", what, cfg->vocab);
    cfg->padded_vocab = (cfg->vocab + 127) / 128 * 128;
    return ct_gpt_config_check(cfg, what, err);
}

/* The shortest decimal that reads back as float x (1e-06, not 9.99999997e-07: what Hugging Face
 * writes, and what a reader in double precision takes as meant). */
static void short_float(char *b, size_t len, float x) {
    if (x == floorf(x) && fabsf(x) < 1e9f) { /* 10000.0, as Hugging Face writes theta */
        snprintf(b, len, "%.1f", (double)x);
        return;
    }
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(b, len, "%.*g", prec, (double)x);
        if (strtof(b, NULL) == x) break;
    }
    if (!strpbrk(b, ".en")) snprintf(b + strlen(b), len - strlen(b), ".0"); /* a JSON float */
}

char *ct__hf_llama_format(const ct_gpt_config *c, ct_file_dtype dtype) {
    char eps[32], theta[32];
    short_float(eps, sizeof eps, c->norm_eps);
    short_float(theta, sizeof theta, c->rope_theta);
    size_t cap = 1200;
    char *b = ct_malloc(cap);
    if (!b) return NULL;
    int k = snprintf(b, cap,
                     "{\n"
                     "  \"architectures\": [\n    \"LlamaForCausalLM\"\n  ],\n"
                     "  \"attention_bias\": false,\n"
                     "  \"attention_dropout\": 0.0,\n"
                     "  \"head_dim\": %d,\n"
                     "  \"hidden_act\": \"silu\",\n"
                     "  \"hidden_size\": %d,\n"
                     "  \"initializer_range\": 0.02,\n"
                     "  \"intermediate_size\": %d,\n"
                     "  \"max_position_embeddings\": %d,\n"
                     "  \"mlp_bias\": false,\n"
                     "  \"model_type\": \"llama\",\n"
                     "  \"num_attention_heads\": %d,\n"
                     "  \"num_hidden_layers\": %d,\n"
                     "  \"num_key_value_heads\": %d,\n"
                     "  \"pretraining_tp\": 1,\n"
                     "  \"rms_norm_eps\": %s,\n"
                     "  \"rope_scaling\": null,\n"
                     "  \"rope_theta\": %s,\n"
                     "  \"tie_word_embeddings\": %s,\n"
                     "  \"torch_dtype\": \"%s\",\n"
                     "  \"vocab_size\": %d\n"
                     "}\n",
                     c->channels / c->heads, c->channels, c->ffn_dim, c->max_seq, c->heads,
                     c->layers, c->kv_heads, eps, theta,
                     c->tie_embeddings ? "true" : "false",
                     dtype == CT_FILE_BF16 ? "bfloat16" : "float32", c->vocab);
    if (k < 0 || (size_t)k >= cap) {
        free(b);
        return NULL;
    }
    return b;
}
