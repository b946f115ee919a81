/* io_model.c - model files: llm.c's GPT-2 model file (a 256-int32 header: magic 20240326, version
 * 3 = fp32 or 5 = bf16, then maxT, V, L, NH, C, Vp; followed by every parameter tensor of
 * ct_gpt_config.h's table in that order, as fp32 or as bf16), cltrain's safetensors
 * (io_safetensors.c) or a Hugging Face directory, GPT-2 or Llama (io_hf.c). Reading picks the
 * format by the content (a directory is Hugging Face's; so is a safetensors file without cltrain's metadata),
 * writing by the name (DIR/, *.safetensors, else llm.c's). llm.c's format has no place for
 * experts: a mixture-of-experts model is written as safetensors only. Reads validate the header
 * and that the file is exactly header + params; writes are atomic. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ct_alloc.h"
#include "ct_bf16.h"
#include "ct_engine_io.h"

#define HEADER_INTS 256

int ct_file_dtype_parse(const char *s, ct_file_dtype *out) {
    if (!strcmp(s, "fp32"))
        *out = CT_FILE_F32;
    else if (!strcmp(s, "bf16"))
        *out = CT_FILE_BF16;
    else
        return -1;
    return 0;
}

/* Header of an open file into cfg; checks magic, version and sizes. */
static ct_status read_header(FILE *f, const char *path, ct_gpt_config *cfg, int *version,
                             ct_err *err) {
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
    if (h[1] != CT_MODEL_VERSION_FP32 && h[1] != CT_MODEL_VERSION_BF16)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: model file version %d is not supported (%d = fp32, %d = bf16)", path,
                      h[1], CT_MODEL_VERSION_FP32, CT_MODEL_VERSION_BF16);
    *version = h[1];
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
                  "nor a safetensors file (an 8-byte header length, then a JSON header) nor a "
                  "Hugging Face directory",
                  path, magic, n < 4 ? " (the file is too short)" : "", CT_MODEL_MAGIC);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* Which reader: 1 llm.c, 2 cltrain's safetensors, 3 Hugging Face's; 0 with *st set. */
static int kind_of(const char *path, FILE **out, ct_status *st, ct_err *err) {
    struct stat sb;
    *out = NULL;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) return 3;
    FILE *f = fopen(path, "rb");
    if (!f) {
        *st = CT_ERR(err, CT_ERR_IO, "cannot open model file %s: %s", path, strerror(errno));
        return 0;
    }
    int k = sniff(f);
    if (k == 2)
        k = ct_safetensors_is_cltrain(path) ? 2 : 3;
    else if (k == 0 && ends_with(path, ".index.json"))
        k = 3;
    if (k == 0) *st = neither(f, path, err);
    if (k == 1)
        *out = f;
    else
        fclose(f);
    return k;
}

ct_status ct_model_file_read_config(const char *path, ct_gpt_config *cfg, ct_err *err) {
    FILE *f = NULL;
    ct_status st = CT_OK;
    int version;
    switch (kind_of(path, &f, &st, err)) {
    case 1:
        st = read_header(f, path, cfg, &version, err);
        fclose(f);
        return st;
    case 2:
        return ct_safetensors_read_config(path, cfg, err);
    case 3:
        return ct_hf_read_config(path, cfg, err);
    default:
        return st;
    }
}

ct_status ct_model_file_read(const char *path, ct_gpt_config *cfg, float **params, size_t *nparams,
                             ct_err *err) {
    *params = NULL;
    *nparams = 0;
    ct_status st = CT_OK;
    float *p = NULL;
    uint16_t *h16 = NULL;
    FILE *f = NULL;
    int kind = kind_of(path, &f, &st, err), version = 0;
    if (kind == 2) return ct_safetensors_read(path, cfg, params, nparams, err);
    if (kind == 3) return ct_hf_read(path, cfg, params, nparams, err);
    if (kind == 0) return st;
    CT_CHECK(read_header(f, path, cfg, &version, err));
    size_t sizes[CT_GPT_NUM_TENSORS];
    size_t n = ct_gpt_param_sizes(cfg, sizes), esize = version == CT_MODEL_VERSION_BF16 ? 2 : 4;
    if (fseek(f, 0, SEEK_END) != 0) {
        st = CT_ERR(err, CT_ERR_IO, "cannot seek in %s", path);
        goto cleanup;
    }
    long size = ftell(f);
    size_t want = HEADER_INTS * 4 + n * esize;
    if (size < 0 || (size_t)size != want) {
        st = CT_ERR(err, CT_ERR_FORMAT,
                    "%s: the header (version %d, L=%d NH=%d C=%d V=%d Vp=%d maxT=%d) implies %zu "
                    "parameters of %zu bytes, a file of %zu bytes, but it has %ld bytes (%s)",
                    path, version, cfg->layers, cfg->heads, cfg->channels, cfg->vocab,
                    cfg->padded_vocab, cfg->max_seq, n, esize, want, size,
                    (size_t)size < want ? "truncated" : "trailing data");
        goto cleanup;
    }
    fseek(f, HEADER_INTS * 4, SEEK_SET);
    p = (float *)ct_malloc(n * sizeof *p);
    if (!p) {
        st = CT_ERR(err, CT_ERR_NOMEM, "no memory for %zu parameters of %s", n, path);
        goto cleanup;
    }
    if (esize == 4) {
        if (fread(p, sizeof *p, n, f) != n) {
            st = CT_ERR(err, CT_ERR_IO, "reading the parameters of %s failed", path);
            goto cleanup;
        }
    } else { /* bf16, widened exactly */
        h16 = (uint16_t *)ct_malloc(n * 2);
        if (!h16) {
            st = CT_ERR(err, CT_ERR_NOMEM, "no memory for %zu parameters of %s", n, path);
            goto cleanup;
        }
        if (fread(h16, 2, n, f) != n) {
            st = CT_ERR(err, CT_ERR_IO, "reading the parameters of %s failed", path);
            goto cleanup;
        }
        for (size_t i = 0; i < n; i++)
            p[i] = ct_bf16_to_f32(h16[i]);
    }
    *params = p;
    *nparams = n;
    p = NULL;
cleanup:
    free(p);
    free(h16);
    fclose(f);
    return st;
}

int ct_model_file_is_safetensors(const char *path) { return ends_with(path, ".safetensors"); }

int ct_model_file_is_hf_dir(const char *path) { return path[0] && path[strlen(path) - 1] == '/'; }

const char *ct_model_file_format_name(const char *path) {
    return ct_model_file_is_hf_dir(path)        ? "Hugging Face directory"
           : ct_model_file_is_safetensors(path) ? "safetensors"
                                                : "llm.c GPT-2 format";
}

ct_status ct_model_file_write(const char *path, const ct_gpt_config *cfg, const float *params,
                              ct_err *err) {
    return ct_model_file_write_as(path, cfg, params, CT_FILE_F32, err);
}

ct_status ct_model_file_write_as(const char *path, const ct_gpt_config *cfg, const float *params,
                                 ct_file_dtype dtype, ct_err *err) {
    ct_status st = CT_OK;
    if (ct_model_file_is_hf_dir(path)) return ct_hf_write(path, cfg, params, dtype, err);
    if (ct_model_file_is_safetensors(path))
        return ct_safetensors_write(path, cfg, params, dtype, err);
    CT_CHECK(ct_gpt_config_check(cfg, "model to write", err));
    if (cfg->experts > 0)
        return CT_ERR(err, CT_ERR_ARG,
                      "%s: llm.c's model format has no place for experts (this model has %d); "
                      "name the file *.safetensors",
                      path, cfg->experts);
    if (ct_gpt_is_llama(cfg))
        return CT_ERR(err, CT_ERR_ARG,
                      "%s: llm.c's model format is GPT-2's (learned positions, LayerNorm, GELU) "
                      "and has no place for a Llama model; name the file *.safetensors",
                      path);
    int32_t h[HEADER_INTS] = {0};
    h[0] = CT_MODEL_MAGIC;
    h[1] = dtype == CT_FILE_BF16 ? CT_MODEL_VERSION_BF16 : CT_MODEL_VERSION_FP32;
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
    if (dtype == CT_FILE_F32) {
        if (st == CT_OK) st = ct_atomic_file_write(&af, params, n * sizeof(float), err);
    } else {
        uint16_t b[4096];
        for (size_t at = 0; at < n && st == CT_OK; at += 4096) {
            size_t k = n - at < 4096 ? n - at : 4096;
            for (size_t j = 0; j < k; j++)
                b[j] = ct_bf16_from_f32(params[at + j]);
            st = ct_atomic_file_write(&af, b, k * 2, err);
        }
    }
    if (st != CT_OK) {
        ct_atomic_file_abort(&af);
        goto cleanup;
    }
    st = ct_atomic_file_commit(&af, err);
cleanup:
    return st;
}
