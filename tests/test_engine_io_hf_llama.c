/* test_engine_io_hf_llama.c - Hugging Face LlamaForCausalLM directories, host only.
 *
 * A Llama model (NKV 2 of 4 heads, F 24, untied; and tied) written by the engine as a directory
 * reads back bitwise with its config; the tensors are Hugging Face's names and shapes (q, k, v,
 * gate and up apart; V rows of the embedding and head); BF16 written and read as the rounding of
 * the fp32 values. config.json edited one field at a time: each feature the engine does not
 * implement (attention_bias true, rope_scaling, sliding_window, hidden_act gelu, head_dim,
 * pretraining_tp, an unknown field) is refused naming the field; a shape field that disagrees
 * with the tensors (num_key_value_heads, intermediate_size, hidden_size, vocab_size) is refused
 * naming the first tensor whose shape it contradicts; a missing tensor is named; a tied model
 * whose lm_head.weight differs from its embedding is refused. PyTorch's side of the format is
 * test_engine_llama_torch's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_engine_io.h"
#include "ct_test.h"

static char dir[256];

static const ct_gpt_config base = {.max_seq = 16, .vocab = 50, .padded_vocab = 128, .layers = 2,
                                   .heads = 4, .channels = 16, .arch = CT_ARCH_LLAMA,
                                   .kv_heads = 2, .ffn_dim = 24, .rope_theta = 10000.0f,
                                   .norm_eps = 1e-5f, .tie_embeddings = 0};

/* Deterministic values; the padding rows of wte and lm_head 0 (a file holds the V real rows). */
static float *params_of(const ct_gpt_config *c, size_t *n) {
    size_t sizes[CT_GPT_NUM_TENSORS];
    *n = ct_gpt_param_sizes(c, sizes);
    float *p = malloc(*n * sizeof *p);
    for (size_t i = 0; i < *n; i++) p[i] = (float)((i * 7919u) % 1000u) / 997.0f - 0.5f;
    size_t at = 0;
    for (int t = 0; t < CT_GPT_NUM_TENSORS; at += sizes[t], t++)
        if ((t == CT_GPT_wte || t == CT_GPT_lmhead) && sizes[t])
            memset(p + at + (size_t)c->vocab * c->channels, 0,
                   (size_t)(c->padded_vocab - c->vocab) * c->channels * sizeof *p);
    return p;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CT_ASSERT(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* config.json of cfg with `from` replaced by `to` (NULL: as written). */
static void config_with(const char *d, const ct_gpt_config *c, const char *from, const char *to) {
    char *text = ct_hf_config_format(c, CT_FILE_F32), out[4096], path[340];
    char *at = from ? strstr(text, from) : NULL;
    if (from) CT_ASSERT_MSG(at != NULL, "config.json lacks '%s'", from);
    if (at) snprintf(out, sizeof out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    else snprintf(out, sizeof out, "%s", text);
    snprintf(path, sizeof path, "%s/config.json", d);
    write_text(path, out);
    free(text);
}

static void expect_refused(const char *what, const char *path, ct_status want, const char *msg) {
    ct_err err = {0};
    ct_gpt_config r;
    float *q = NULL;
    size_t nq = 0;
    ct_status st = ct_model_file_read(path, &r, &q, &nq, &err);
    CT_ASSERT_MSG(st == want, "%s: status %d (%s), expected %d", what, st, err.msg, want);
    CT_ASSERT_MSG(strstr(err.msg, msg) != NULL, "%s: message '%s' lacks '%s'", what, err.msg, msg);
    CT_ASSERT(q == NULL && nq == 0);
    if (st == want) printf("ok: %s refused: %s\n", what, err.msg);
}

static void round_trip(const ct_gpt_config *c, const char *name) {
    char d[300];
    snprintf(d, sizeof d, "%s/%s/", dir, name);
    size_t n;
    float *p = params_of(c, &n), *q = NULL;
    ct_err err = {0};
    CT_ASSERT_OK(ct_model_file_write(d, c, p, &err), err.msg);
    ct_gpt_config r;
    size_t nq = 0;
    CT_ASSERT_OK(ct_model_file_read(d, &r, &q, &nq, &err), err.msg);
    CT_ASSERT_MSG(nq == n && !memcmp(&r, c, sizeof r) && q && !memcmp(q, p, n * 4),
                  "%s: the directory read back differs from what was written", name);
    free(q);
    /* BF16: each value the rounding of the fp32 one */
    snprintf(d, sizeof d, "%s/%s_bf16/", dir, name);
    CT_ASSERT_OK(ct_model_file_write_as(d, c, p, CT_FILE_BF16, &err), err.msg);
    q = NULL;
    CT_ASSERT_OK(ct_model_file_read(d, &r, &q, &nq, &err), err.msg);
    int bad = 0;
    for (size_t i = 0; q && i < n; i++) bad += fabsf(q[i] - p[i]) > fabsf(p[i]) * (1.0f / 256);
    CT_ASSERT_MSG(q && nq == n && bad == 0, "%s: bf16: %d values beyond bf16's rounding", name,
                  bad);
    free(q);
    free(p);
    printf("ok: %s round trip (fp32 bitwise, bf16 within its rounding)\n", name);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/ct_test_engine_io_hf_llama_%ld", (long)getpid());
    mkdir(dir, 0777);
    round_trip(&base, "untied");
    ct_gpt_config tied = base;
    tied.tie_embeddings = 1, tied.kv_heads = 1;
    round_trip(&tied, "tied");

    char d[300], f[340];
    snprintf(d, sizeof d, "%s/untied/", dir);
    struct {
        const char *from, *to, *msg;
        ct_status st;
    } cf[] = {
        {"\"attention_bias\": false", "\"attention_bias\": true", "\"attention_bias\": true",
         CT_ERR_UNSUPPORTED},
        {"\"mlp_bias\": false", "\"mlp_bias\": true", "\"mlp_bias\": true", CT_ERR_UNSUPPORTED},
        {"\"rope_scaling\": null", "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}",
         "\"rope_scaling\": an object", CT_ERR_UNSUPPORTED},
        {"\"rope_scaling\": null", "\"rope_scaling\": null, \"sliding_window\": 4096",
         "\"sliding_window\": 4096", CT_ERR_UNSUPPORTED},
        {"\"silu\"", "\"gelu\"", "\"hidden_act\": \"gelu\"", CT_ERR_UNSUPPORTED},
        {"\"head_dim\": 4", "\"head_dim\": 8", "\"head_dim\": 8", CT_ERR_UNSUPPORTED},
        {"\"pretraining_tp\": 1", "\"pretraining_tp\": 2", "\"pretraining_tp\": 2",
         CT_ERR_UNSUPPORTED},
        {"\"mlp_bias\": false", "\"mlp_bias\": false, \"qk_norm\": true", "field \"qk_norm\"",
         CT_ERR_UNSUPPORTED},
        {"\"LlamaForCausalLM\"", "\"MistralForCausalLM\"", "MistralForCausalLM",
         CT_ERR_UNSUPPORTED},
        {"\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3", "does not divide",
         CT_ERR_FORMAT},
        {"\"num_key_value_heads\": 2", "\"num_key_value_heads\": 1",
         "tensor \"model.layers.0.self_attn.k_proj.weight\" has shape (8, 16), but config.json",
         CT_ERR_FORMAT},
        {"\"intermediate_size\": 24", "\"intermediate_size\": 20",
         "tensor \"model.layers.0.mlp.gate_proj.weight\" has shape (24, 16)", CT_ERR_FORMAT},
        {"\"vocab_size\": 50", "\"vocab_size\": 51",
         "tensor \"model.embed_tokens.weight\" has shape (50, 16)", CT_ERR_FORMAT},
        /* C 24 over 4 heads: a head size of 6, which the file's head_dim 4 contradicts */
        {"\"hidden_size\": 16", "\"hidden_size\": 24", "\"head_dim\": 4 is not implemented",
         CT_ERR_UNSUPPORTED},
        {"\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3",
         "tensor \"model.layers.2.input_layernorm.weight\" is missing", CT_ERR_FORMAT},
        {"\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1",
         "unexpected tensor \"model.layers.1.", CT_ERR_FORMAT},
        {"\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true",
         "lm_head.weight differs from model.embed_tokens.weight", CT_ERR_FORMAT},
        {"\"rms_norm_eps\": 1e-05", "\"rms_norm_eps\": 0", "\"rms_norm_eps\" must be a number",
         CT_ERR_FORMAT},
        {"\"hidden_size\"", "\"hidden_sizes\"", "no \"hidden_size\"", CT_ERR_FORMAT},
    };
    for (size_t k = 0; k < sizeof cf / sizeof cf[0]; k++) {
        config_with(d, &base, cf[k].from, cf[k].to);
        expect_refused(cf[k].to, d, cf[k].st, cf[k].msg);
    }
    /* fields that change nothing the engine computes are read past */
    config_with(d, &base, "\"attention_dropout\": 0.0",
                "\"attention_dropout\": 0.0, \"bos_token_id\": 1, \"use_cache\": true");
    {
        ct_err err = {0};
        ct_gpt_config r;
        float *q = NULL;
        size_t nq = 0;
        CT_ASSERT_OK(ct_model_file_read(d, &r, &q, &nq, &err), err.msg);
        free(q);
    }
    /* another model's tensors (NKV 1) under this config */
    config_with(d, &base, NULL, NULL);
    snprintf(f, sizeof f, "%s/tied/model.safetensors", dir);
    char g[340];
    snprintf(g, sizeof g, "%s/model.safetensors", d);
    CT_ASSERT(rename(f, g) == 0); /* the tied model's tensors (NKV 1) under the untied config */
    expect_refused("the tied model's tensors under an untied config", d, CT_ERR_FORMAT,
                   "self_attn.k_proj.weight\" has shape (4, 16)");
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return ct_test_end("test_engine_io_hf_llama");
}
