/* io_model.c - model files: llm.c's GPT-2 model file (a 256-int32 header: magic 20240326, version
 * 3 = fp32, then maxT, V, L, NH, C, Vp; followed by every parameter tensor of ct_gpt_config.h's
 * table as fp32, in that order), or safetensors (io_safetensors.c). Reading picks the format by
 * the content, writing by the name (*.safetensors). llm.c's format has no place for experts: a
 * mixture-of-experts model is written as safetensors only. Reads validate the header and that the
 * file is exactly header + params; writes are atomic. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_io.h"

#define HEADER_INTS 256

/* Header of an open file into cfg; checks magic, version and sizes. */
static ct_status read_header(FILE *f, const char *path, ct_gpt_config *cfg, ct_err *err) {
    int32_t h[HEADER_INTS];
    size_t got = fread(h, sizeof(int32_t), HEADER_INTS, f);
    if (got != HEADER_INTS)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: too short for an llm.c model file (the header alone is 1024 bytes)",
                      path);
    if (h[0] != CT_MODEL_MAGIC)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: bad magic %d; an llm.c GPT-2 model file starts with %d", path, h[0],
                      CT_MODEL_MAGIC);
    if (h[1] != CT_MODEL_VERSION_FP32)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: model file version %d is not supported (only %d = fp32; version 5 is "
                      "llm.c's bf16)",
                      path, h[1], CT_MODEL_VERSION_FP32);
    memset(cfg, 0, sizeof *cfg); /* llm.c files hold dense models: experts 0, top-k 0 */
    cfg->max_seq = h[2];
    cfg->vocab = h[3];
    cfg->layers = h[4];
    cfg->heads = h[5];
    cfg->channels = h[6];
    cfg->padded_vocab = h[7];
    return ct_gpt_config_check(cfg, path, err);
}

/* The format of an open file by its first bytes: 1 llm.c, 2 safetensors, 0 neither (rewound). */
static int sniff(FILE *f) {
    unsigned char b[9] = {0};
    size_t n = fread(b, 1, sizeof b, f);
    rewind(f);
    int32_t magic;
    memcpy(&magic, b, 4);
    if (n >= 4 && magic == CT_MODEL_MAGIC) return 1;
    return ct_safetensors_sniff(b, n) ? 2 : 0;
}

static ct_status neither(FILE *f, const char *path, ct_err *err) {
    int32_t magic = 0;
    size_t n = fread(&magic, 1, 4, f);
    return CT_ERR(err, CT_ERR_FORMAT,
                  "%s: bad magic %d%s: neither an llm.c GPT-2 model file (which starts with %d) "
                  "nor a safetensors file (an 8-byte header length, then a JSON header)",
                  path, magic, n < 4 ? " (the file is too short)" : "", CT_MODEL_MAGIC);
}

ct_status ct_model_file_read_config(const char *path, ct_gpt_config *cfg, ct_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return CT_ERR(err, CT_ERR_IO, "cannot open model file %s: %s", path, strerror(errno));
    int kind = sniff(f);
    ct_status st = kind == 1 ? read_header(f, path, cfg, err) : kind ? CT_OK : neither(f, path, err);
    fclose(f);
    if (kind == 2) return ct_safetensors_read_config(path, cfg, err);
    return st;
}

ct_status ct_model_file_read(const char *path, ct_gpt_config *cfg, float **params,
                             size_t *nparams, ct_err *err) {
    *params = NULL;
    *nparams = 0;
    ct_status st = CT_OK;
    float *p = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return CT_ERR(err, CT_ERR_IO, "cannot open model file %s: %s", path, strerror(errno));
    int kind = sniff(f);
    if (kind != 1) {
        st = kind == 2 ? CT_OK : neither(f, path, err);
        fclose(f);
        return kind == 2 ? ct_safetensors_read(path, cfg, params, nparams, err) : st;
    }
    CT_CHECK(read_header(f, path, cfg, err));
    size_t sizes[CT_GPT_NUM_TENSORS];
    size_t n = ct_gpt_param_sizes(cfg, sizes);
    if (fseek(f, 0, SEEK_END) != 0) {
        st = CT_ERR(err, CT_ERR_IO, "cannot seek in %s", path);
        goto cleanup;
    }
    long size = ftell(f);
    size_t want = HEADER_INTS * 4 + n * 4;
    if (size < 0 || (size_t)size != want) {
        st = CT_ERR(err, CT_ERR_FORMAT,
                    "%s: the header (L=%d NH=%d C=%d V=%d Vp=%d maxT=%d) implies %zu parameters, "
                    "a file of %zu bytes, but it has %ld bytes (%s)",
                    path, cfg->layers, cfg->heads, cfg->channels, cfg->vocab, cfg->padded_vocab,
                    cfg->max_seq, n, want, size, (size_t)size < want ? "truncated" : "trailing data");
        goto cleanup;
    }
    fseek(f, HEADER_INTS * 4, SEEK_SET);
    p = (float *)ct_malloc(n * sizeof *p);
    if (!p) {
        st = CT_ERR(err, CT_ERR_NOMEM, "no memory for %zu parameters of %s", n, path);
        goto cleanup;
    }
    if (fread(p, sizeof *p, n, f) != n) {
        st = CT_ERR(err, CT_ERR_IO, "reading the parameters of %s failed", path);
        goto cleanup;
    }
    *params = p;
    *nparams = n;
    p = NULL;
cleanup:
    free(p);
    fclose(f);
    return st;
}

int ct_model_file_is_safetensors(const char *path) {
    size_t n = strlen(path), k = strlen(".safetensors");
    return n >= k && !strcmp(path + n - k, ".safetensors");
}

ct_status ct_model_file_write(const char *path, const ct_gpt_config *cfg, const float *params,
                              ct_err *err) {
    ct_status st = CT_OK;
    if (ct_model_file_is_safetensors(path)) return ct_safetensors_write(path, cfg, params, err);
    CT_CHECK(ct_gpt_config_check(cfg, "model to write", err));
    if (cfg->experts > 0)
        return CT_ERR(err, CT_ERR_ARG,
                      "%s: llm.c's model format has no place for experts (this model has %d); "
                      "name the file *.safetensors",
                      path, cfg->experts);
    int32_t h[HEADER_INTS] = {0};
    h[0] = CT_MODEL_MAGIC;
    h[1] = CT_MODEL_VERSION_FP32;
    h[2] = cfg->max_seq;
    h[3] = cfg->vocab;
    h[4] = cfg->layers;
    h[5] = cfg->heads;
    h[6] = cfg->channels;
    h[7] = cfg->padded_vocab;
    size_t sizes[CT_GPT_NUM_TENSORS];
    size_t n = ct_gpt_param_sizes(cfg, sizes);
    ct_atomic_file af;
    CT_CHECK(ct_atomic_file_open(&af, path, err));
    st = ct_atomic_file_write(&af, h, sizeof h, err);
    if (st == CT_OK) st = ct_atomic_file_write(&af, params, n * sizeof(float), err);
    if (st != CT_OK) {
        ct_atomic_file_abort(&af);
        goto cleanup;
    }
    st = ct_atomic_file_commit(&af, err);
cleanup:
    return st;
}
