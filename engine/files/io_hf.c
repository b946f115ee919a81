/* io_hf.c - Hugging Face GPT2LMHeadModel directories (ct_engine_io.h states the rules): which
 * files make the model (config.json beside model.safetensors, or the shards an index names), the
 * tensor names and their Conv1D layout mapped onto the engine's table, and the directory written
 * back in that layout. config.json's fields are io_hf_config.c's; the container is
 * io_safetensors_file.c's. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ct_alloc.h"
#include "io_safetensors_impl.h"

#define INDEX_MAX_BYTES (64u << 20)
#define MAX_SHARDS 4096

/* ------------------------------------------------------------------ names */

/* One block's tensors, in Hugging Face's module order: its name after "h.N.", the table tensor,
 * and whether it is a Conv1D weight (stored (in, out): the transpose of the engine's). */
static const struct {
    const char *hf;
    int t, conv1d;
} block_names[] = {{"ln_1.weight", CT_GPT_ln1w, 0},
                   {"ln_1.bias", CT_GPT_ln1b, 0},
                   {"attn.c_attn.weight", CT_GPT_qkvw, 1},
                   {"attn.c_attn.bias", CT_GPT_qkvb, 0},
                   {"attn.c_proj.weight", CT_GPT_attprojw, 1},
                   {"attn.c_proj.bias", CT_GPT_attprojb, 0},
                   {"ln_2.weight", CT_GPT_ln2w, 0},
                   {"ln_2.bias", CT_GPT_ln2b, 0},
                   {"mlp.c_fc.weight", CT_GPT_fcw, 1},
                   {"mlp.c_fc.bias", CT_GPT_fcb, 0},
                   {"mlp.c_proj.weight", CT_GPT_fcprojw, 1},
                   {"mlp.c_proj.bias", CT_GPT_fcprojb, 0}};
#define NBLOCK ((int)(sizeof block_names / sizeof block_names[0]))

/* A LlamaForCausalLM block's tensors after "model.layers.N.": the table tensor and which of its
 * stacked parts (q, k, v of qkvw; gate, up of fcw) the name is. */
static const struct {
    const char *hf;
    int t, part;
} llama_names[] = {{"input_layernorm.weight", CT_GPT_ln1w, 0},
                   {"self_attn.q_proj.weight", CT_GPT_qkvw, 0},
                   {"self_attn.k_proj.weight", CT_GPT_qkvw, 1},
                   {"self_attn.v_proj.weight", CT_GPT_qkvw, 2},
                   {"self_attn.o_proj.weight", CT_GPT_attprojw, 0},
                   {"post_attention_layernorm.weight", CT_GPT_ln2w, 0},
                   {"mlp.gate_proj.weight", CT_GPT_fcw, 0},
                   {"mlp.up_proj.weight", CT_GPT_fcw, 1},
                   {"mlp.down_proj.weight", CT_GPT_fcprojw, 0}};
#define NLLAMA ((int)(sizeof llama_names / sizeof llama_names[0]))

enum { NAME_TENSOR, NAME_IGNORED, NAME_LM_HEAD, NAME_UNKNOWN };

typedef struct slot {
    int t, layer, conv1d;
    int part; /* a Llama stacked tensor's part (q, k, v; gate, up); 0 otherwise */
} slot;

/* Parts of table tensor t in a file (a Llama model's q|k|v and gate|up are three and two). */
static int nparts(const ct_gpt_config *c, int t) {
    if (!ct_gpt_is_llama(c)) return 1;
    return t == CT_GPT_qkvw ? 3 : t == CT_GPT_fcw ? 2 : 1;
}

/* The rows [*row0, *row0 + *nrows) of table tensor t's slice that part `part` is. */
static void part_rows(const ct_gpt_config *c, int t, int part, size_t *row0, size_t *nrows) {
    ct_gpt_tensor_info ti = ct_gpt_tensor(c, t);
    size_t C = (size_t)c->channels, KV = (size_t)ct_gpt_kv_heads(c) * ct_gpt_head_size(c);
    size_t F = (size_t)ct_gpt_ffn(c);
    *row0 = 0, *nrows = ti.rows;
    if (nparts(c, t) == 1) return;
    if (t == CT_GPT_qkvw) *row0 = part == 0 ? 0 : C + (size_t)(part - 1) * KV;
    if (t == CT_GPT_qkvw) *nrows = part == 0 ? C : KV;
    if (t == CT_GPT_fcw) *row0 = (size_t)part * F, *nrows = F;
}

/* A block index "N." at d (no leading zeros, below layers): its end, or NULL. */
static const char *layer_of(const char *d, int layers, long *l) {
    const char *s0 = d;
    int nd = 0;
    *l = 0;
    while (*d >= '0' && *d <= '9' && nd < 9)
        *l = *l * 10 + (*d++ - '0'), nd++;
    if (!nd || *d != '.' || (nd > 1 && s0[0] == '0') || *l >= layers) return NULL;
    return d + 1;
}

/* A Llama model's names: model.embed_tokens, model.layers.N.*, model.norm, lm_head (its own
 * tensor when untied; with tied embeddings a copy of the embedding, checked by the caller). */
static int llama_name_kind(const char *name, const ct_gpt_config *c, slot *s) {
    s->layer = 0, s->conv1d = 0, s->part = 0;
    if (!strcmp(name, "lm_head.weight")) {
        if (c->tie_embeddings) return NAME_LM_HEAD;
        return s->t = CT_GPT_lmhead, NAME_TENSOR;
    }
    if (!strcmp(name, "model.embed_tokens.weight")) return s->t = CT_GPT_wte, NAME_TENSOR;
    if (!strcmp(name, "model.norm.weight")) return s->t = CT_GPT_lnfw, NAME_TENSOR;
    if (strncmp(name, "model.layers.", 13)) return NAME_UNKNOWN;
    long l;
    const char *d = layer_of(name + 13, c->layers, &l);
    if (!d) return NAME_UNKNOWN;
    if (!strcmp(d, "self_attn.rotary_emb.inv_freq")) return NAME_IGNORED; /* older files */
    for (int k = 0; k < NLLAMA; k++)
        if (!strcmp(d, llama_names[k].hf)) {
            s->t = llama_names[k].t, s->layer = (int)l, s->part = llama_names[k].part;
            return NAME_TENSOR;
        }
    return NAME_UNKNOWN;
}

/* What a tensor name is; a table tensor's slot in *s. */
static int name_kind(const char *name, const ct_gpt_config *c, slot *s) {
    int layers = c->layers;
    if (ct_gpt_is_llama(c)) return llama_name_kind(name, c, s);
    s->part = 0;
    if (!strcmp(name, "lm_head.weight")) return NAME_LM_HEAD;
    if (!strncmp(name, "transformer.", 12)) name += 12;
    s->layer = 0, s->conv1d = 0;
    if (!strcmp(name, "wte.weight")) return s->t = CT_GPT_wte, NAME_TENSOR;
    if (!strcmp(name, "wpe.weight")) return s->t = CT_GPT_wpe, NAME_TENSOR;
    if (!strcmp(name, "ln_f.weight")) return s->t = CT_GPT_lnfw, NAME_TENSOR;
    if (!strcmp(name, "ln_f.bias")) return s->t = CT_GPT_lnfb, NAME_TENSOR;
    if (strncmp(name, "h.", 2)) return NAME_UNKNOWN;
    long l;
    const char *d = layer_of(name + 2, layers, &l);
    if (!d) return NAME_UNKNOWN;
    if (!strcmp(d, "attn.bias") || !strcmp(d, "attn.masked_bias")) return NAME_IGNORED;
    for (int k = 0; k < NBLOCK; k++)
        if (!strcmp(d, block_names[k].hf)) {
            s->t = block_names[k].t, s->layer = (int)l, s->conv1d = block_names[k].conv1d;
            return NAME_TENSOR;
        }
    return NAME_UNKNOWN;
}

/* The shape Hugging Face stores table tensor t (its part `part`) in; returns the rank. */
static int hf_shape(const ct_gpt_config *c, int t, int conv1d, int part, uint64_t s[2]) {
    ct_gpt_tensor_info ti = ct_gpt_tensor(c, t);
    if (t == CT_GPT_wte || t == CT_GPT_lmhead)
        return s[0] = (uint64_t)c->vocab, s[1] = (uint64_t)c->channels, 2;
    if (ti.ndim == 1) return s[0] = (uint64_t)ti.rows * ti.cols, 1;
    if (conv1d) return s[0] = ti.cols, s[1] = ti.rows, 2;
    size_t r0, nr;
    part_rows(c, t, part, &r0, &nr);
    return s[0] = nr, s[1] = ti.cols, 2;
}

/* ------------------------------------------------------------------ files */

typedef struct hf_src {
    char dir[1024];
    char weights[1100]; /* model.safetensors (or the file named), or "" with an index */
    char index[1100];   /* model.safetensors.index.json, or "" */
} hf_src;

static int is_file(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static ct_status find_files(const char *path, hf_src *h, ct_err *err) {
    struct stat sb;
    memset(h, 0, sizeof *h);
    if (strlen(path) >= sizeof h->dir)
        return CT_ERR(err, CT_ERR_ARG, "model path too long: %.100s...", path);
    if (stat(path, &sb) != 0)
        return CT_ERR(err, CT_ERR_IO, "cannot open model file %s: %s", path, strerror(errno));
    if (S_ISDIR(sb.st_mode)) {
        snprintf(h->dir, sizeof h->dir, "%s", path);
        size_t n = strlen(h->dir);
        while (n > 1 && h->dir[n - 1] == '/')
            h->dir[--n] = 0;
        snprintf(h->weights, sizeof h->weights, "%s/model.safetensors", h->dir);
        if (is_file(h->weights)) return CT_OK;
        h->weights[0] = 0;
        snprintf(h->index, sizeof h->index, "%s/model.safetensors.index.json", h->dir);
        if (is_file(h->index)) return CT_OK;
        return CT_ERR(err, CT_ERR_NOT_FOUND,
                      "%s: neither model.safetensors nor "
                      "model.safetensors.index.json is there (a Hugging Face "
                      "model directory holds one)",
                      path);
    }
    const char *slash = strrchr(path, '/');
    if (slash)
        snprintf(h->dir, sizeof h->dir, "%.*s", (int)(slash == path ? 1 : slash - path), path);
    else
        snprintf(h->dir, sizeof h->dir, ".");
    size_t n = strlen(path), k = strlen(".index.json");
    if (n >= k && !strcmp(path + n - k, ".index.json"))
        snprintf(h->index, sizeof h->index, "%s", path);
    else
        snprintf(h->weights, sizeof h->weights, "%s", path);
    return CT_OK;
}

static ct_status read_config(const hf_src *h, const char *path, ct_gpt_config *cfg, ct_err *err) {
    char p[1200];
    snprintf(p, sizeof p, "%s/config.json", h->dir);
    if (!is_file(p))
        return CT_ERR(err, CT_ERR_NOT_FOUND,
                      "%s: no config.json in %s (a safetensors file without cltrain's metadata is "
                      "read as a Hugging Face model, whose shape config.json gives)",
                      path, h->dir);
    unsigned char *text = NULL;
    size_t n = 0;
    ct_status st = ct_file_read_all(p, &text, &n, err);
    if (st != CT_OK) return st;
    st = ct_hf_config_parse((const char *)text, n, p, cfg, err);
    free(text);
    return st;
}

ct_status ct_hf_read_config(const char *path, ct_gpt_config *cfg, ct_err *err) {
    hf_src h;
    ct_status st = find_files(path, &h, err);
    if (st == CT_OK) st = read_config(&h, path, cfg, err);
    return st;
}

/* ------------------------------------------------------------------ read */

typedef struct reader {
    const ct_gpt_config *cfg;
    float *p;                       /* the table's parameters */
    size_t off[CT_GPT_NUM_TENSORS]; /* where each table tensor starts in p */
    unsigned char *filled;          /* per (tensor, layer) */
    float *lm_head;                 /* (V, C) when the file has one */
    char lm_head_file[1100];
    const ct_json *map; /* the index's weight_map, or NULL */
    int matched;        /* weight_map entries found in their shard */
} reader;

/* One tensor of an open shard: checked against config.json and placed. */
static ct_status take(reader *r, ct__st_file *sf, const ct__st_tensor *t, const char *shard,
                      ct_err *err) {
    const ct_gpt_config *c = r->cfg;
    slot s = {0, 0, 0, 0};
    ct_status st = CT_OK;
    if (r->map) {
        const ct_json *m = ct__json_get(r->map, t->name);
        if (!m)
            return CT_ERR(err, CT_ERR_FORMAT,
                          "%s: tensor \"%.100s\" is not in the index's "
                          "weight_map",
                          sf->path, t->name);
        if (strcmp(m->str, shard))
            return CT_ERR(err, CT_ERR_FORMAT,
                          "%s: tensor \"%.100s\" is here, but the index's "
                          "weight_map puts it in %.100s",
                          sf->path, t->name, m->str);
        r->matched++;
    }
    int kind = name_kind(t->name, c, &s), llama = ct_gpt_is_llama(c);
    if (kind == NAME_IGNORED) return CT_OK;
    if (kind == NAME_UNKNOWN)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: unexpected tensor \"%.100s\" (not part of a %s of %d layers)",
                      sf->path, t->name, llama ? "LlamaForCausalLM" : "GPT2LMHeadModel",
                      c->layers);
    uint64_t want[2];
    int wr = kind == NAME_LM_HEAD
                 ? (want[0] = (uint64_t)c->vocab, want[1] = (uint64_t)c->channels, 2)
                 : hf_shape(c, s.t, s.conv1d, s.part, want);
    if (t->rank != wr || memcmp(t->shape, want, sizeof want[0] * (size_t)wr)) {
        char ws[64], gs[160], fields[200];
        ct__st_shape_str(ws, sizeof ws, want, wr);
        ct__st_shape_str(gs, sizeof gs, t->shape, t->rank);
        if (llama)
            snprintf(fields, sizeof fields,
                     "num_hidden_layers %d, num_attention_heads %d, num_key_value_heads %d, "
                     "hidden_size %d, intermediate_size %d, vocab_size %d",
                     c->layers, c->heads, c->kv_heads, c->channels, c->ffn_dim, c->vocab);
        else
            snprintf(fields, sizeof fields,
                     "n_layer %d, n_head %d, n_embd %d, vocab_size %d, n_positions %d", c->layers,
                     c->heads, c->channels, c->vocab, c->max_seq);
        return CT_ERR(err, CT_ERR_FORMAT, "%s: tensor \"%s\" has shape %s, but config.json (%s) gives %s",
                      sf->path, t->name, gs, fields, ws);
    }
    if (!t->readable)
        return CT_ERR(err, CT_ERR_UNSUPPORTED,
                      "%s: tensor \"%s\" has dtype %s; F32, BF16 and F16 "
                      "are read",
                      sf->path, t->name, t->dtype);
    if (kind == NAME_LM_HEAD) {
        if (r->lm_head)
            return CT_ERR(err, CT_ERR_FORMAT, "%s: tensor \"lm_head.weight\" appears twice",
                          sf->path);
        r->lm_head = ct_malloc((size_t)t->count * sizeof(float) + 1);
        if (!r->lm_head)
            return CT_ERR(err, CT_ERR_NOMEM, "%s: no memory for lm_head.weight", sf->path);
        snprintf(r->lm_head_file, sizeof r->lm_head_file, "%s", sf->path);
        return ct__st_read_f32(sf, t, r->lm_head, err);
    }
    unsigned char *done = &r->filled[s.t * c->layers + s.layer];
    if (*done & (1u << s.part))
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: tensor \"%s\" is given twice (%s, or in two shards)", sf->path,
                      t->name, llama ? "twice in one file" : "with and without the \"transformer.\" prefix");
    *done |= (unsigned char)(1u << s.part);
    ct_gpt_tensor_info ti = ct_gpt_tensor(c, s.t);
    size_t row0, nrows;
    part_rows(c, s.t, s.part, &row0, &nrows);
    float *dst = r->p + r->off[s.t] + ((size_t)s.layer * ti.rows + row0) * ti.cols;
    if (!s.conv1d) return ct__st_read_f32(sf, t, dst, err); /* wte: its V rows; the rest stay 0 */
    float *tmp = ct_malloc((size_t)t->count * sizeof(float));
    if (!tmp)
        return CT_ERR(err, CT_ERR_NOMEM, "%s: no memory for tensor \"%s\"", sf->path, t->name);
    st = ct__st_read_f32(sf, t, tmp, err);
    size_t in = ti.cols, out = ti.rows; /* the file's (in, out) -> the engine's (out, in) */
    for (size_t i = 0; st == CT_OK && i < in; i++)
        for (size_t o = 0; o < out; o++)
            dst[o * in + i] = tmp[i * out + o];
    free(tmp);
    return st;
}

static ct_status take_file(reader *r, const char *path, const char *shard, ct_err *err) {
    ct__st_file sf;
    ct_status st = ct__st_open(&sf, path, err);
    for (int k = 0; st == CT_OK && k < sf.n; k++)
        st = take(r, &sf, &sf.t[k], shard, err);
    ct__st_close(&sf);
    return st;
}

static int plain_name(const char *s) {
    size_t n = strlen(s), k = strlen(".safetensors");
    return n > k && n < 256 && !strcmp(s + n - k, ".safetensors") && !strchr(s, '/') &&
           !strchr(s, '\\') && s[0] != '.';
}

/* The index's shards, each read once, every weight_map entry found where it says. */
static ct_status take_index(reader *r, const hf_src *h, ct_err *err) {
    unsigned char *text = NULL;
    size_t n = 0;
    ct_json root;
    char why[200];
    const char **shards = NULL;
    int ns = 0;
    memset(&root, 0, sizeof root);
    ct_status st = ct_file_read_all(h->index, &text, &n, err);
    if (st != CT_OK) return st;
    if (n > INDEX_MAX_BYTES) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s: %zu bytes; an index over %u bytes is refused",
                    h->index, n, INDEX_MAX_BYTES);
        goto done;
    }
    if (ct__json_parse((const char *)text, n, 8, &root, why, sizeof why)) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s is not valid JSON (%s)", h->index, why);
        goto done;
    }
    for (int k = 0; root.t == CT_JSON_OBJ && k < root.n; k++)
        if (strcmp(root.keys[k], "metadata") && strcmp(root.keys[k], "weight_map")) {
            st = CT_ERR(err, CT_ERR_FORMAT,
                        "%s: unknown field \"%.60s\" (an index has \"metadata\" "
                        "and \"weight_map\")",
                        h->index, root.keys[k]);
            goto done;
        }
    r->map = ct__json_get(&root, "weight_map");
    if (!r->map || r->map->t != CT_JSON_OBJ || !r->map->n) {
        st = CT_ERR(err, CT_ERR_FORMAT,
                    "%s: no \"weight_map\" object of tensor -> file (the index "
                    "of sharded safetensors has one)",
                    h->index);
        goto done;
    }
    shards = ct_calloc((size_t)r->map->n, sizeof *shards);
    if (!shards) {
        st = CT_ERR(err, CT_ERR_NOMEM, "%s: out of memory", h->index);
        goto done;
    }
    for (int k = 0; k < r->map->n; k++) {
        const ct_json *v = &r->map->items[k];
        if (v->t != CT_JSON_STR || !plain_name(v->str)) {
            st = CT_ERR(err, CT_ERR_FORMAT,
                        "%s: weight_map[\"%.100s\"] must name a *.safetensors file "
                        "in the same directory (no path)",
                        h->index, r->map->keys[k]);
            goto done;
        }
        int seen = 0;
        for (int j = 0; j < ns && !seen; j++)
            seen = !strcmp(shards[j], v->str);
        if (!seen && ns == MAX_SHARDS) {
            st = CT_ERR(err, CT_ERR_FORMAT, "%s: more than %d shards", h->index, MAX_SHARDS);
            goto done;
        }
        if (!seen) shards[ns++] = v->str;
    }
    for (int j = 0; j < ns && st == CT_OK; j++) {
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", h->dir, shards[j]);
        st = take_file(r, p, shards[j], err);
    }
    if (st == CT_OK && r->matched != r->map->n)
        for (int k = 0; k < r->map->n; k++) {
            char p[1400];
            snprintf(p, sizeof p, "%s/%s", h->dir, r->map->items[k].str);
            ct__st_file sf;
            ct_err e2 = {0};
            int there = ct__st_open(&sf, p, &e2) == CT_OK && ct__st_find(&sf, r->map->keys[k]);
            ct__st_close(&sf);
            if (!there) {
                st = CT_ERR(err, CT_ERR_FORMAT,
                            "%s: weight_map puts tensor \"%.100s\" in %s, which "
                            "does not hold it",
                            h->index, r->map->keys[k], p);
                break;
            }
        }
done:
    r->map = NULL;
    free(shards);
    ct__json_free(&root);
    free(text);
    return st;
}

/* The HF name of a table tensor's slice (its part), for messages. */
static void hf_name(char *b, size_t len, const ct_gpt_config *c, int t, int layer, int part) {
    if (ct_gpt_is_llama(c)) {
        snprintf(b, len, "%s", t == CT_GPT_wte      ? "model.embed_tokens.weight"
                               : t == CT_GPT_lnfw   ? "model.norm.weight"
                               : t == CT_GPT_lmhead ? "lm_head.weight"
                                                    : "?");
        for (int k = 0; k < NLLAMA; k++)
            if (llama_names[k].t == t && llama_names[k].part == part)
                snprintf(b, len, "model.layers.%d.%s", layer, llama_names[k].hf);
        return;
    }
    const char *top = t == CT_GPT_wte    ? "wte.weight"
                      : t == CT_GPT_wpe  ? "wpe.weight"
                      : t == CT_GPT_lnfw ? "ln_f.weight"
                      : t == CT_GPT_lnfb ? "ln_f.bias"
                                         : NULL;
    if (top) {
        snprintf(b, len, "transformer.%s", top);
        return;
    }
    for (int k = 0; k < NBLOCK; k++)
        if (block_names[k].t == t)
            snprintf(b, len, "transformer.h.%d.%s", layer, block_names[k].hf);
}

ct_status ct_hf_read(const char *path, ct_gpt_config *cfg, float **params, size_t *nparams,
                     ct_err *err) {
    *params = NULL;
    *nparams = 0;
    hf_src h;
    reader r;
    memset(&r, 0, sizeof r);
    ct_status st = find_files(path, &h, err);
    if (st == CT_OK) st = read_config(&h, path, cfg, err);
    if (st != CT_OK) return st;
    r.cfg = cfg;
    size_t sizes[CT_GPT_NUM_TENSORS];
    size_t n = ct_gpt_param_sizes(cfg, sizes);
    for (int i = 1; i < CT_GPT_NUM_TENSORS; i++)
        r.off[i] = r.off[i - 1] + sizes[i - 1];
    r.p = ct_calloc(n, sizeof(float));
    r.filled = ct_calloc((size_t)CT_GPT_NUM_TENSORS * (size_t)cfg->layers, 1);
    if (!r.p || !r.filled) {
        st = CT_ERR(err, CT_ERR_NOMEM, "no memory for %zu parameters of %s", n, path);
        goto done;
    }
    st = h.index[0] ? take_index(&r, &h, err) : take_file(&r, h.weights, NULL, err);
    for (int t = 0; st == CT_OK && t < CT_GPT_NUM_TENSORS; t++) {
        ct_gpt_tensor_info ti = ct_gpt_tensor(cfg, t);
        if (!sizes[t]) continue; /* the router of a dense model */
        for (int l = 0; st == CT_OK && l < (ti.per_layer ? cfg->layers : 1); l++)
            for (int part = 0; part < nparts(cfg, t); part++)
                if (!(r.filled[t * cfg->layers + l] & (1u << part))) {
                    char name[96];
                    hf_name(name, sizeof name, cfg, t, l, part);
                    st = CT_ERR(err, CT_ERR_FORMAT, "%s: tensor \"%s\" is missing", path, name);
                    break;
                }
    }
    if (st == CT_OK && r.lm_head && ct_gpt_is_llama(cfg) &&
        memcmp(r.lm_head, r.p + r.off[CT_GPT_wte],
               (size_t)cfg->vocab * cfg->channels * sizeof(float)))
        st = CT_ERR(err, CT_ERR_FORMAT,
                    "%s: lm_head.weight differs from model.embed_tokens.weight, but config.json "
                    "ties them (tie_word_embeddings true)",
                    r.lm_head_file);
    if (st == CT_OK && r.lm_head &&
        memcmp(r.lm_head, r.p + r.off[CT_GPT_wte],
               (size_t)cfg->vocab * cfg->channels * sizeof(float)))
        st = CT_ERR(err, CT_ERR_UNSUPPORTED,
                    "%s: lm_head.weight differs from transformer.wte.weight; the engine ties the "
                    "head to the token embedding (untied embeddings are not implemented)",
                    r.lm_head_file);
    if (st == CT_OK) {
        *params = r.p;
        *nparams = n;
        r.p = NULL;
    }
done:
    free(r.p);
    free(r.filled);
    free(r.lm_head);
    if (st != CT_OK) memset(cfg, 0, sizeof *cfg);
    return st;
}

/* ------------------------------------------------------------------ write */

/* A Llama model's tensors in Hugging Face's names and order (embedding, each layer's nine, the
 * final norm, an untied head), the stacked ones cut into their parts; returns the count
 * (at most 3 + 9 L). */
static int llama_outs(const ct_gpt_config *cfg, const float *params, const size_t *off,
                      ct__st_out *ts) {
    int n = 0;
    for (int k = -1; k <= cfg->layers; k++) {
        int cnt = k < 0 ? 1 : k == cfg->layers ? 1 + ct_gpt_has_lm_head(cfg) : NLLAMA;
        for (int j = 0; j < cnt; j++) {
            int t, part = 0, layer = k < 0 || k == cfg->layers ? 0 : k;
            if (k < 0) t = CT_GPT_wte;
            else if (k == cfg->layers) t = j ? CT_GPT_lmhead : CT_GPT_lnfw;
            else t = llama_names[j].t, part = llama_names[j].part;
            ct_gpt_tensor_info ti = ct_gpt_tensor(cfg, t);
            size_t row0, nrows;
            part_rows(cfg, t, part, &row0, &nrows);
            ct__st_out *o = &ts[n++];
            hf_name(o->name, sizeof o->name, cfg, t, layer, part);
            o->rank = hf_shape(cfg, t, 0, part, o->shape);
            o->src = params + off[t] + ((size_t)layer * ti.rows + row0) * ti.cols;
            /* the embedding and head: their V real rows */
            o->rows = t == CT_GPT_wte || t == CT_GPT_lmhead ? (size_t)cfg->vocab : nrows;
            o->cols = ti.cols;
        }
    }
    return n;
}

ct_status ct_hf_write(const char *dir, const ct_gpt_config *cfg, const float *params,
                      ct_file_dtype dtype, ct_err *err) {
    ct_status st = ct_gpt_config_check(cfg, "model to write", err);
    if (st != CT_OK) return st;
    if (cfg->experts > 0)
        return CT_ERR(err, CT_ERR_ARG,
                      "%s: a Hugging Face directory (GPT2LMHeadModel or LlamaForCausalLM) has no "
                      "place for experts (this model has %d); name a *.safetensors file",
                      dir, cfg->experts);
    char d[1024], p[1100];
    if (strlen(dir) >= sizeof d)
        return CT_ERR(err, CT_ERR_ARG, "directory name too long: %.100s...", dir);
    snprintf(d, sizeof d, "%s", dir);
    size_t dl = strlen(d);
    while (dl > 1 && d[dl - 1] == '/')
        d[--dl] = 0;
    if ((st = ct_file_mkdirs(d, err)) != CT_OK) return st;
    size_t sizes[CT_GPT_NUM_TENSORS], off[CT_GPT_NUM_TENSORS] = {0};
    ct_gpt_param_sizes(cfg, sizes);
    for (int i = 1; i < CT_GPT_NUM_TENSORS; i++)
        off[i] = off[i - 1] + sizes[i - 1];
    int L = cfg->layers, n = 0;
    ct__st_out *ts = ct_calloc((size_t)(4 + NBLOCK * L), sizeof *ts);
    if (!ts) return CT_ERR(err, CT_ERR_NOMEM, "%s: out of memory", dir);
    if (ct_gpt_is_llama(cfg)) n = llama_outs(cfg, params, off, ts);
    for (int k = 0; !ct_gpt_is_llama(cfg) && k < 4 + NBLOCK * L; k++) { /* wte, wpe, blocks, ln_f */
        int t, layer = 0, conv1d = 0, b = k - 2;
        const char *name;
        if (k < 2) {
            t = k ? CT_GPT_wpe : CT_GPT_wte;
            name = k ? "wpe.weight" : "wte.weight";
        } else if (b >= NBLOCK * L) {
            t = b == NBLOCK * L ? CT_GPT_lnfw : CT_GPT_lnfb;
            name = t == CT_GPT_lnfw ? "ln_f.weight" : "ln_f.bias";
        } else {
            layer = b / NBLOCK;
            t = block_names[b % NBLOCK].t;
            conv1d = block_names[b % NBLOCK].conv1d;
            name = block_names[b % NBLOCK].hf;
        }
        ct_gpt_tensor_info ti = ct_gpt_tensor(cfg, t);
        ct__st_out *o = &ts[n++];
        if (ti.per_layer)
            snprintf(o->name, sizeof o->name, "transformer.h.%d.%s", layer, name);
        else
            snprintf(o->name, sizeof o->name, "transformer.%s", name);
        o->rank = hf_shape(cfg, t, conv1d, 0, o->shape);
        o->src = params + off[t] + (size_t)layer * ti.rows * ti.cols;
        o->rows = t == CT_GPT_wte ? (size_t)cfg->vocab : ti.rows; /* wte: the V real rows */
        o->cols = ti.cols;
        o->transpose = conv1d;
    }
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    st = ct__st_write(p, "\"format\":\"pt\"", ts, n, dtype, err);
    free(ts);
    if (st != CT_OK) return st;
    char *conf = ct_hf_config_format(cfg, dtype);
    if (!conf) return CT_ERR(err, CT_ERR_NOMEM, "%s: out of memory for config.json", dir);
    snprintf(p, sizeof p, "%s/config.json", d);
    st = ct_file_write_atomic(p, conf, strlen(conf), err);
    free(conf);
    return st;
}
