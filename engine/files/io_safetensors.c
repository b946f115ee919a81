/* io_safetensors.c - cltrain's model file in the safetensors format (the container is
 * io_safetensors_file.c): "__metadata__" holds the configuration as strings (format
 * "cltrain-gpt", max_seq, vocab, padded_vocab, layers, heads, channels, experts, top_k); the
 * tensors are the table's (ct_gpt_config.h), named as it names them, with shape [L if per layer]
 * + [E if an expert tensor of a mixture-of-experts model] + [rows, cols] (or [rows * cols] for a
 * vector). Tensors of no elements (a dense model's router) are not written and must not be
 * present. Written as F32 or BF16; read from F32, BF16 or F16. Reading is strict: missing or
 * malformed metadata, a missing, unexpected or misshapen tensor are refused, naming the tensor
 * or field (the container refuses the rest). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ct_alloc.h"
#include "io_safetensors_impl.h"

/* The file shape of table tensor i; returns its rank. */
static int tensor_shape(const ct_gpt_config *c, int i, uint64_t shape[4]) {
    ct_gpt_tensor_info t = ct_gpt_tensor(c, i);
    int r = 0;
    if (t.per_layer) shape[r++] = (uint64_t)c->layers;
    if (t.expert) shape[r++] = (uint64_t)t.experts;
    if (t.ndim == 2)
        shape[r++] = t.rows, shape[r++] = t.cols;
    else
        shape[r++] = (uint64_t)t.rows * t.cols;
    return r;
}

ct_status ct_safetensors_write(const char *path, const ct_gpt_config *cfg, const float *params,
                               ct_file_dtype dtype, ct_err *err) {
    ct_status st = ct_gpt_config_check(cfg, "model to write", err);
    if (st != CT_OK) return st;
    size_t sizes[CT_GPT_NUM_TENSORS];
    ct_gpt_param_sizes(cfg, sizes);
    char meta[400];
    snprintf(meta, sizeof meta,
             "\"format\":\"cltrain-gpt\",\"max_seq\":\"%d\",\"vocab\":\"%d\","
             "\"padded_vocab\":\"%d\",\"layers\":\"%d\",\"heads\":\"%d\",\"channels\":\"%d\","
             "\"experts\":\"%d\",\"top_k\":\"%d\"",
             cfg->max_seq, cfg->vocab, cfg->padded_vocab, cfg->layers, cfg->heads, cfg->channels,
             cfg->experts, cfg->top_k);
    if (ct_gpt_is_llama(cfg)) /* a GPT-2 file's metadata stays as it was */
        snprintf(meta + strlen(meta), sizeof meta - strlen(meta),
                 ",\"arch\":\"llama\",\"kv_heads\":\"%d\",\"ffn_dim\":\"%d\","
                 "\"rope_theta\":\"%.9g\",\"norm_eps\":\"%.9g\",\"tie_embeddings\":\"%d\"",
                 cfg->kv_heads, cfg->ffn_dim, (double)cfg->rope_theta, (double)cfg->norm_eps,
                 cfg->tie_embeddings);
    ct__st_out ts[CT_GPT_NUM_TENSORS];
    int n = 0;
    size_t at = 0;
    for (int i = 0; i < CT_GPT_NUM_TENSORS; at += sizes[i], i++) {
        if (!sizes[i]) continue;
        ct__st_out *o = &ts[n++];
        memset(o, 0, sizeof *o);
        snprintf(o->name, sizeof o->name, "%s", ct_gpt_tensor_name(i));
        o->rank = tensor_shape(cfg, i, o->shape);
        o->src = params + at, o->rows = 1, o->cols = sizes[i];
    }
    return ct__st_write(path, meta, ts, n, dtype, err);
}

int ct_safetensors_sniff(const unsigned char *head, size_t n) {
    if (n < 9) return 0;
    uint64_t hl = 0;
    for (int k = 0; k < 8; k++)
        hl |= (uint64_t)head[k] << (8 * k);
    return hl > 1 && hl < ((uint64_t)1 << 40) && head[8] == '{';
}

static ct_status meta_int(const ct__st_file *sf, const char *key, int *out, ct_err *err) {
    const char *v = ct__st_meta(sf, key);
    if (!v)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: the safetensors metadata has no \"%s\"", sf->path,
                      key);
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!v[0] || !end || *end || errno || x < 0 || x > 0x7fffffff)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: metadata \"%s\" = \"%.40s\" is not a non-negative "
                      "integer",
                      sf->path, key, v);
    *out = (int)x;
    return CT_OK;
}

static ct_status meta_float(const ct__st_file *sf, const char *key, float *out, ct_err *err) {
    const char *v = ct__st_meta(sf, key);
    if (!v)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: the safetensors metadata has no \"%s\"", sf->path,
                      key);
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (!v[0] || !end || *end || errno || !(x > 0) || x > 3e38)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: metadata \"%s\" = \"%.40s\" is not a positive number", sf->path, key,
                      v);
    *out = (float)x;
    return CT_OK;
}

/* The file opened and its configuration read and checked. */
static ct_status open_model(ct__st_file *sf, const char *path, ct_gpt_config *cfg, ct_err *err) {
    ct_status st = ct__st_open(sf, path, err);
    if (st != CT_OK) return st;
    const char *fmt = ct__st_meta(sf, "format");
    if (!sf->meta)
        st = CT_ERR(err, CT_ERR_FORMAT,
                    "%s: no \"__metadata__\" object (a cltrain model file keeps "
                    "its configuration there)",
                    path);
    else if (!fmt || strcmp(fmt, "cltrain-gpt"))
        st = CT_ERR(err, CT_ERR_FORMAT,
                    "%s: metadata \"format\" is %s%.40s%s, expected "
                    "\"cltrain-gpt\"",
                    path, fmt ? "\"" : "", fmt ? fmt : "missing", fmt ? "\"" : "");
    memset(cfg, 0, sizeof *cfg);
    static const char *const keys[] = {"max_seq",  "vocab",    "padded_vocab", "layers",
                                       "heads",    "channels", "experts",      "top_k"};
    int *fields[] = {&cfg->max_seq, &cfg->vocab,    &cfg->padded_vocab, &cfg->layers,
                     &cfg->heads,   &cfg->channels, &cfg->experts,      &cfg->top_k};
    for (int k = 0; k < 8 && st == CT_OK; k++) st = meta_int(sf, keys[k], fields[k], err);
    const char *arch = st == CT_OK ? ct__st_meta(sf, "arch") : NULL;
    if (arch && ct_arch_parse(arch, &cfg->arch) != CT_OK)
        st = CT_ERR(err, CT_ERR_FORMAT, "%s: metadata \"arch\" = \"%.40s\" is not gpt2 or llama",
                    path, arch);
    if (st == CT_OK && ct_gpt_is_llama(cfg)) {
        st = meta_int(sf, "kv_heads", &cfg->kv_heads, err);
        if (st == CT_OK) st = meta_int(sf, "ffn_dim", &cfg->ffn_dim, err);
        if (st == CT_OK) st = meta_int(sf, "tie_embeddings", &cfg->tie_embeddings, err);
        if (st == CT_OK) st = meta_float(sf, "rope_theta", &cfg->rope_theta, err);
        if (st == CT_OK) st = meta_float(sf, "norm_eps", &cfg->norm_eps, err);
    }
    if (st == CT_OK) st = ct_gpt_config_check(cfg, path, err);
    if (st != CT_OK) ct__st_close(sf);
    return st;
}

ct_status ct_safetensors_read_config(const char *path, ct_gpt_config *cfg, ct_err *err) {
    ct__st_file sf;
    ct_status st = open_model(&sf, path, cfg, err);
    ct__st_close(&sf);
    return st;
}

int ct_safetensors_is_cltrain(const char *path) {
    ct__st_file sf;
    ct_err err = {0};
    if (ct__st_open(&sf, path, &err) != CT_OK) return 1;
    const char *fmt = ct__st_meta(&sf, "format");
    int yes = fmt && !strcmp(fmt, "cltrain-gpt");
    ct__st_close(&sf);
    return yes;
}

ct_status ct_safetensors_read(const char *path, ct_gpt_config *cfg, float **params, size_t *nparams,
                              ct_err *err) {
    *params = NULL;
    *nparams = 0;
    ct__st_file sf;
    float *p = NULL;
    ct_status st = open_model(&sf, path, cfg, err);
    if (st != CT_OK) return st;
    size_t sizes[CT_GPT_NUM_TENSORS];
    size_t n = ct_gpt_param_sizes(cfg, sizes);
    /* every entry must be a tensor of the table */
    for (int k = 0; k < sf.n; k++) {
        int found = 0;
        for (int i = 0; i < CT_GPT_NUM_TENSORS; i++)
            if (!strcmp(sf.t[k].name, ct_gpt_tensor_name(i)) && sizes[i]) found = 1;
        if (!found) {
            st =
                CT_ERR(err, CT_ERR_FORMAT,
                       "%s: unexpected tensor \"%.80s\" (not in the model of L=%d NH=%d C=%d E=%d)",
                       path, sf.t[k].name, cfg->layers, cfg->heads, cfg->channels, cfg->experts);
            goto done;
        }
    }
    p = ct_malloc((n ? n : 1) * sizeof *p);
    if (!p) {
        st = CT_ERR(err, CT_ERR_NOMEM, "no memory for %zu parameters of %s", n, path);
        goto done;
    }
    size_t at = 0;
    for (int i = 0; i < CT_GPT_NUM_TENSORS; at += sizes[i], i++) {
        if (!sizes[i]) continue;
        const char *name = ct_gpt_tensor_name(i);
        const ct__st_tensor *t = ct__st_find(&sf, name);
        uint64_t want[4];
        int r = tensor_shape(cfg, i, want);
        char ws[96], gs[160];
        ct__st_shape_str(ws, sizeof ws, want, r);
        if (!t) {
            st = CT_ERR(err, CT_ERR_FORMAT, "%s: tensor \"%s\" %s is missing", path, name, ws);
            goto done;
        }
        if (t->rank != r || memcmp(t->shape, want, sizeof want[0] * (size_t)r)) {
            ct__st_shape_str(gs, sizeof gs, t->shape, t->rank);
            st = CT_ERR(err, CT_ERR_FORMAT, "%s: tensor \"%s\" has shape %s, the model needs %s",
                        path, name, gs, ws);
            goto done;
        }
        if (!t->readable) {
            st = CT_ERR(err, CT_ERR_FORMAT,
                        "%s: tensor \"%s\" has dtype %s; F32, BF16 and F16 are "
                        "read",
                        path, name, t->dtype);
            goto done;
        }
        if ((st = ct__st_read_f32(&sf, t, p + at, err)) != CT_OK) goto done;
    }
    *params = p;
    *nparams = n;
    p = NULL;
done:
    free(p);
    ct__st_close(&sf);
    return st;
}
