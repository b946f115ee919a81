/* io_hf_config.c - Hugging Face's config.json of a GPT2LMHeadModel, read into the engine's config
 * and written from it (ct_engine_io.h states the rules); a LlamaForCausalLM's (model_type "llama")
 * is handed to io_hf_llama.c. Every field is placed in one table: the
 * shape (required integers), the ones whose values the engine implements only in part (checked,
 * refused naming the field and value otherwise), and the ones that do not change the model the
 * engine computes (ignored: dropout, token ids, the double-heads model's summary, bookkeeping).
 * Any other field is refused: a reader cannot know that a field it has never seen changes
 * nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_alloc.h"
#include "ct_engine_io.h"
#include "io_hf_impl.h"

#define CONFIG_MAX_BYTES (1u << 20)

/* Fields that leave the computed model alone. Dropout is not applied (the engine has none; llm.c
 * trains GPT-2 without it too); reorder_and_upcast_attn only asks for fp32 attention, which the
 * engine's is. */
static const char *const ignored[] = {"_name_or_path",
                                      "attn_pdrop",
                                      "embd_pdrop",
                                      "resid_pdrop",
                                      "summary_activation",
                                      "summary_first_dropout",
                                      "summary_proj_to_labels",
                                      "summary_type",
                                      "summary_use_proj",
                                      "bos_token_id",
                                      "eos_token_id",
                                      "pad_token_id",
                                      "initializer_range",
                                      "use_cache",
                                      "torch_dtype",
                                      "dtype",
                                      "transformers_version",
                                      "task_specific_params",
                                      "n_ctx",
                                      "tokenizer_class",
                                      "output_past",
                                      "reorder_and_upcast_attn",
                                      "gradient_checkpointing",
                                      "id2label",
                                      "label2id",
                                      "output_hidden_states",
                                      "output_attentions",
                                      "return_dict",
                                      "use_return_dict",
                                      "torchscript",
                                      "prefix",
                                      "problem_type",
                                      "finetuning_task",
                                      "max_length",
                                      "min_length",
                                      "do_sample",
                                      "num_beams",
                                      "temperature",
                                      "top_k",
                                      "top_p",
                                      "repetition_penalty",
                                      "no_repeat_ngram_size",
                                      "length_penalty",
                                      "early_stopping",
                                      "decoder_start_token_id",
                                      "sep_token_id",
                                      "chunk_size_feed_forward",
                                      "pruned_heads"};

static int is_ignored(const char *k) {
    for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
        if (!strcmp(k, ignored[i])) return 1;
    return 0;
}

static ct_status need_int(const ct_json *root, const char *what, const char *key, int *out,
                          ct_err *err) {
    const ct_json *v = ct__json_get(root, key);
    uint64_t x;
    if (!v)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s has no \"%s\" (a GPT-2 config.json gives n_layer, "
                      "n_head, n_embd, vocab_size and n_positions)",
                      what, key);
    if (ct__json_uint(v, 0x7fffffff, &x) || x == 0)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: \"%s\" must be a positive integer", what, key);
    *out = (int)x;
    return CT_OK;
}

/* A boolean field the engine implements with one value only (absent = HF's default). */
static ct_status need_bool(const ct_json *v, const char *what, const char *key, int want,
                           const char *why, ct_err *err) {
    if (!v) return CT_OK;
    if (v->t != CT_JSON_BOOL)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: \"%s\" must be true or false (it is %s)", what, key,
                      ct__json_type_name(v->t));
    if ((int)v->num != want)
        return CT_ERR(err, CT_ERR_UNSUPPORTED, "%s: \"%s\": %s is not implemented (%s)", what, key,
                      want ? "false" : "true", why);
    return CT_OK;
}

static ct_status check_field(const char *k, const ct_json *v, const char *what, int C,
                             ct_err *err) {
    if (!strcmp(k, "model_type")) {
        if (v->t != CT_JSON_STR || strcmp(v->str, "gpt2"))
            return CT_ERR(err, CT_ERR_UNSUPPORTED,
                          "%s: \"model_type\": %s%.40s%s is not supported "
                          "(this reader takes GPT-2's, \"gpt2\", and Llama's, \"llama\")",
                          what, v->t == CT_JSON_STR ? "\"" : "",
                          v->t == CT_JSON_STR ? v->str : ct__json_type_name(v->t),
                          v->t == CT_JSON_STR ? "\"" : "");
    } else if (!strcmp(k, "architectures")) {
        if (v->t != CT_JSON_ARR)
            return CT_ERR(err, CT_ERR_FORMAT, "%s: \"architectures\" must be an array", what);
        for (int i = 0; i < v->n; i++)
            if (v->items[i].t != CT_JSON_STR || (strcmp(v->items[i].str, "GPT2LMHeadModel") &&
                                                 strcmp(v->items[i].str, "GPT2Model")))
                return CT_ERR(err, CT_ERR_UNSUPPORTED,
                              "%s: \"architectures\": %.60s is not supported (GPT2LMHeadModel is)",
                              what,
                              v->items[i].t == CT_JSON_STR ? v->items[i].str : "a non-string");
    } else if (!strcmp(k, "activation_function")) {
        if (v->t != CT_JSON_STR ||
            (strcmp(v->str, "gelu_new") && strcmp(v->str, "gelu_pytorch_tanh")))
            return CT_ERR(
                err, CT_ERR_UNSUPPORTED,
                "%s: \"activation_function\": %.40s is not implemented (the engine's GELU "
                "is the tanh approximation: gelu_new or gelu_pytorch_tanh)",
                what, v->t == CT_JSON_STR ? v->str : ct__json_type_name(v->t));
    } else if (!strcmp(k, "layer_norm_epsilon")) {
        if (v->t != CT_JSON_NUM || fabs(v->num - 1e-5) > 1e-12)
            return CT_ERR(err, CT_ERR_UNSUPPORTED,
                          "%s: \"layer_norm_epsilon\": %s%g is not "
                          "implemented (the engine's LayerNorm uses 1e-5)",
                          what, v->t == CT_JSON_NUM ? "" : "a non-number ", v->num);
    } else if (!strcmp(k, "n_inner")) {
        uint64_t x = 0;
        if (v->t != CT_JSON_NULL && (ct__json_uint(v, 0x7fffffff, &x) || x != 4 * (uint64_t)C))
            return CT_ERR(err, CT_ERR_UNSUPPORTED,
                          "%s: \"n_inner\": only null or 4 x n_embd = %d is "
                          "implemented (the MLP is C -> 4C -> C)",
                          what, 4 * C);
    } else if (!strcmp(k, "scale_attn_weights")) {
        return need_bool(v, what, k, 1, "attention scores are scaled by 1/sqrt(head size)", err);
    } else if (!strcmp(k, "scale_attn_by_inverse_layer_idx")) {
        return need_bool(v, what, k, 0, "no per-layer scaling of attention scores", err);
    } else if (!strcmp(k, "add_cross_attention")) {
        return need_bool(v, what, k, 0, "GPT-2 blocks here have self-attention only", err);
    } else if (!strcmp(k, "is_encoder_decoder")) {
        return need_bool(v, what, k, 0, "a decoder-only model", err);
    } else if (!strcmp(k, "is_decoder")) {
        return CT_OK; /* GPT-2 attends causally either way */
    } else if (!strcmp(k, "tie_word_embeddings")) {
        return need_bool(v, what, k, 1, "the head is the token embedding wte", err);
    } else if (strcmp(k, "n_layer") && strcmp(k, "n_head") && strcmp(k, "n_embd") &&
               strcmp(k, "vocab_size") && strcmp(k, "n_positions") && !is_ignored(k)) {
        return CT_ERR(
            err, CT_ERR_UNSUPPORTED,
            "%s: field \"%.60s\" is not known to cltrain's GPT-2 reader, so it may change "
            "the model in a way the engine does not implement (remove it if it does not)",
            what, k);
    }
    return CT_OK;
}

ct_status ct_hf_config_parse(const char *text, size_t n, const char *what, ct_gpt_config *cfg,
                             ct_err *err) {
    ct_json root;
    char why[200];
    ct_status st = CT_OK;
    memset(cfg, 0, sizeof *cfg);
    if (n > CONFIG_MAX_BYTES)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: %zu bytes; a config.json over %u bytes is refused",
                      what, n, CONFIG_MAX_BYTES);
    if (ct__json_parse(text, n, 16, &root, why, sizeof why))
        return CT_ERR(err, CT_ERR_FORMAT, "%s is not valid JSON (%s)", what, why);
    if (root.t != CT_JSON_OBJ) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s is not a JSON object", what);
        goto done;
    }
    const ct_json *mt = ct__json_get(&root, "model_type");
    if (mt && mt->t == CT_JSON_STR && !strcmp(mt->str, "llama")) {
        st = ct__hf_llama_parse(&root, what, is_ignored, cfg, err);
        goto done;
    }
    if ((st = need_int(&root, what, "n_layer", &cfg->layers, err)) != CT_OK ||
        (st = need_int(&root, what, "n_head", &cfg->heads, err)) != CT_OK ||
        (st = need_int(&root, what, "n_embd", &cfg->channels, err)) != CT_OK ||
        (st = need_int(&root, what, "vocab_size", &cfg->vocab, err)) != CT_OK ||
        (st = need_int(&root, what, "n_positions", &cfg->max_seq, err)) != CT_OK)
        goto done;
    for (int i = 0; i < root.n; i++)
        if ((st = check_field(root.keys[i], &root.items[i], what, cfg->channels, err)) != CT_OK)
            goto done;
    if (cfg->vocab > 0x7fffffff - 127) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s: \"vocab_size\" %d is too large", what, cfg->vocab);
        goto done;
    }
    cfg->padded_vocab = (cfg->vocab + 127) / 128 * 128;
    st = ct_gpt_config_check(cfg, what, err);
done:
    ct__json_free(&root);
    if (st != CT_OK) memset(cfg, 0, sizeof *cfg);
    return st;
}

char *ct_hf_config_format(const ct_gpt_config *c, ct_file_dtype dtype) {
    if (ct_gpt_is_llama(c)) return ct__hf_llama_format(c, dtype);
    size_t cap = 1024;
    char *b = ct_malloc(cap);
    if (!b) return NULL;
    int k = snprintf(b, cap,
                     "{\n"
                     "  \"activation_function\": \"gelu_new\",\n"
                     "  \"add_cross_attention\": false,\n"
                     "  \"architectures\": [\n    \"GPT2LMHeadModel\"\n  ],\n"
                     "  \"attn_pdrop\": 0.0,\n"
                     "  \"embd_pdrop\": 0.0,\n"
                     "  \"initializer_range\": 0.02,\n"
                     "  \"layer_norm_epsilon\": 1e-05,\n"
                     "  \"model_type\": \"gpt2\",\n"
                     "  \"n_ctx\": %d,\n"
                     "  \"n_embd\": %d,\n"
                     "  \"n_head\": %d,\n"
                     "  \"n_inner\": null,\n"
                     "  \"n_layer\": %d,\n"
                     "  \"n_positions\": %d,\n"
                     "  \"reorder_and_upcast_attn\": false,\n"
                     "  \"resid_pdrop\": 0.0,\n"
                     "  \"scale_attn_by_inverse_layer_idx\": false,\n"
                     "  \"scale_attn_weights\": true,\n"
                     "  \"tie_word_embeddings\": true,\n"
                     "  \"torch_dtype\": \"%s\",\n"
                     "  \"vocab_size\": %d\n"
                     "}\n",
                     c->max_seq, c->channels, c->heads, c->layers, c->max_seq,
                     dtype == CT_FILE_BF16 ? "bfloat16" : "float32", c->vocab);
    if (k < 0 || (size_t)k >= cap) {
        free(b);
        return NULL;
    }
    return b;
}
