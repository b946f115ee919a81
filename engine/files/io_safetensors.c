/* io_safetensors.c - model files in the safetensors format: an 8-byte little-endian header
 * length N, N bytes of JSON (padded with spaces to a multiple of 8), then the tensors' raw
 * little-endian data. The JSON maps each tensor's name to {"dtype", "shape", "data_offsets"
 * [begin, end) relative to the data}, and "__metadata__" to string values: here the configuration
 * (format "cltrain-gpt", max_seq, vocab, padded_vocab, layers, heads, channels, experts, top_k).
 *
 * Names and shapes are the project's table (ct_gpt_config.h): shape = [L if per layer] + [E if an
 * expert tensor of a mixture-of-experts model] + [rows, cols] (or [rows * cols] for a vector).
 * Tensors of no elements (a dense model's router) are not written and must not be present.
 * Reading is strict: a header that is not valid JSON, a missing or malformed metadata field, a
 * missing, unexpected or misshapen tensor, a dtype other than F32, offsets out of the data or
 * overlapping another tensor's are refused, naming the tensor or field. Pure host code; the JSON
 * parser below is just enough for this header (objects, arrays, strings, numbers, literals). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_io.h"

/* ------------------------------------------------------------------ a small JSON reader */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jval {
    jtype t;
    double num;
    char *str;          /* J_STR (NUL-ended, escapes resolved) */
    struct jval *items; /* J_ARR, J_OBJ (values) */
    char **keys;        /* J_OBJ */
    int n;
} jval;

typedef struct jparser {
    const char *s;
    size_t n, at;
    char err[160];
    int depth;
} jparser;

static void jfree(jval *v) {
    if (!v) return;
    free(v->str);
    for (int i = 0; i < v->n; i++) {
        jfree(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    memset(v, 0, sizeof *v);
}

static int jfail(jparser *p, const char *what) {
    if (!p->err[0]) snprintf(p->err, sizeof p->err, "%s at byte %zu of the header", what, p->at);
    return -1;
}

static void jws(jparser *p) {
    while (p->at < p->n && (p->s[p->at] == ' ' || p->s[p->at] == '\t' || p->s[p->at] == '\n' ||
                            p->s[p->at] == '\r'))
        p->at++;
}

static int jvalue(jparser *p, jval *v);

static int jstring(jparser *p, char **out) {
    if (p->at >= p->n || p->s[p->at] != '"') return jfail(p, "expected a string");
    p->at++;
    size_t cap = 16, len = 0;
    char *b = ct_malloc(cap);
    if (!b) return jfail(p, "out of memory");
    for (;;) {
        if (p->at >= p->n) {
            free(b);
            return jfail(p, "unterminated string");
        }
        unsigned char ch = (unsigned char)p->s[p->at++];
        if (ch == '"') break;
        if (ch < 0x20) {
            free(b);
            return jfail(p, "a control character in a string");
        }
        if (ch == '\\') {
            if (p->at >= p->n) {
                free(b);
                return jfail(p, "unterminated escape");
            }
            char e = p->s[p->at++];
            switch (e) {
            case '"': case '\\': case '/': ch = (unsigned char)e; break;
            case 'b': ch = '\b'; break;
            case 'f': ch = '\f'; break;
            case 'n': ch = '\n'; break;
            case 'r': ch = '\r'; break;
            case 't': ch = '\t'; break;
            case 'u': { /* kept as '?' unless ASCII: names here are ASCII */
                unsigned u = 0;
                for (int i = 0; i < 4; i++) {
                    char h = p->at < p->n ? p->s[p->at++] : 0;
                    int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                          : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                    if (d < 0) {
                        free(b);
                        return jfail(p, "a bad \\u escape");
                    }
                    u = u * 16 + (unsigned)d;
                }
                ch = u < 0x80 && u ? (unsigned char)u : '?';
                break;
            }
            default: free(b); return jfail(p, "an unknown escape");
            }
        }
        if (len + 2 > cap) {
            char *nb = ct_realloc(b, cap *= 2);
            if (!nb) {
                free(b);
                return jfail(p, "out of memory");
            }
            b = nb;
        }
        b[len++] = (char)ch;
    }
    b[len] = 0;
    *out = b;
    return 0;
}

static int jnumber(jparser *p, jval *v) {
    size_t a = p->at;
    if (p->at < p->n && p->s[p->at] == '-') p->at++;
    if (p->at >= p->n || p->s[p->at] < '0' || p->s[p->at] > '9') return jfail(p, "a bad number");
    while (p->at < p->n && ((p->s[p->at] >= '0' && p->s[p->at] <= '9') || p->s[p->at] == '.' ||
                            p->s[p->at] == 'e' || p->s[p->at] == 'E' || p->s[p->at] == '+' ||
                            p->s[p->at] == '-'))
        p->at++;
    char tmp[64];
    size_t len = p->at - a;
    if (len >= sizeof tmp) return jfail(p, "a number too long");
    memcpy(tmp, p->s + a, len);
    tmp[len] = 0;
    char *end = NULL;
    v->t = J_NUM;
    v->num = strtod(tmp, &end);
    if (!end || *end) return jfail(p, "a bad number");
    return 0;
}

static int jpush(jval *v, char *key) {
    jval *ni = ct_realloc(v->items, sizeof *ni * (size_t)(v->n + 1));
    if (!ni) return -1;
    v->items = ni;
    memset(&v->items[v->n], 0, sizeof *ni);
    if (v->t == J_OBJ) {
        char **nk = ct_realloc(v->keys, sizeof *nk * (size_t)(v->n + 1));
        if (!nk) return -1;
        v->keys = nk;
        v->keys[v->n] = key;
    }
    v->n++;
    return 0;
}

static int jvalue(jparser *p, jval *v) {
    memset(v, 0, sizeof *v);
    if (++p->depth > 32) return jfail(p, "nesting too deep");
    jws(p);
    if (p->at >= p->n) return jfail(p, "unexpected end");
    char c = p->s[p->at];
    int rc = 0;
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        v->t = c == '{' ? J_OBJ : J_ARR;
        p->at++;
        jws(p);
        if (p->at < p->n && p->s[p->at] == close) {
            p->at++;
        } else {
            for (;;) {
                char *key = NULL;
                if (v->t == J_OBJ) {
                    jws(p);
                    if (jstring(p, &key)) return -1;
                    jws(p);
                    if (p->at >= p->n || p->s[p->at] != ':') {
                        free(key);
                        return jfail(p, "expected ':'");
                    }
                    p->at++;
                }
                if (jpush(v, key)) {
                    free(key);
                    return jfail(p, "out of memory");
                }
                if (jvalue(p, &v->items[v->n - 1])) return -1;
                jws(p);
                if (p->at < p->n && p->s[p->at] == ',') {
                    p->at++;
                    continue;
                }
                if (p->at < p->n && p->s[p->at] == close) {
                    p->at++;
                    break;
                }
                return jfail(p, v->t == J_OBJ ? "expected ',' or '}'" : "expected ',' or ']'");
            }
        }
    } else if (c == '"') {
        v->t = J_STR;
        rc = jstring(p, &v->str);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        rc = jnumber(p, v);
    } else if (p->n - p->at >= 4 && !strncmp(p->s + p->at, "true", 4)) {
        v->t = J_BOOL, v->num = 1, p->at += 4;
    } else if (p->n - p->at >= 5 && !strncmp(p->s + p->at, "false", 5)) {
        v->t = J_BOOL, p->at += 5;
    } else if (p->n - p->at >= 4 && !strncmp(p->s + p->at, "null", 4)) {
        v->t = J_NULL, p->at += 4;
    } else {
        rc = jfail(p, "unexpected character");
    }
    p->depth--;
    return rc;
}

static const jval *jget(const jval *o, const char *key) {
    if (!o || o->t != J_OBJ) return NULL;
    for (int i = 0; i < o->n; i++)
        if (!strcmp(o->keys[i], key)) return &o->items[i];
    return NULL;
}

/* ------------------------------------------------------------------ the table's view */

static int host_is_le(void) {
    uint16_t x = 1;
    unsigned char b;
    memcpy(&b, &x, 1);
    return b == 1;
}

/* The file shape of table tensor i; returns its rank. */
static int tensor_shape(const ct_gpt_config *c, int i, size_t shape[4]) {
    ct_gpt_tensor_info t = ct_gpt_tensor(c, i);
    int r = 0;
    if (t.per_layer) shape[r++] = (size_t)c->layers;
    if (t.expert) shape[r++] = (size_t)t.experts;
    if (t.ndim == 2) shape[r++] = t.rows, shape[r++] = t.cols;
    else shape[r++] = t.rows * t.cols;
    return r;
}

static void shape_str(char *b, size_t len, const size_t *s, int r) {
    size_t at = (size_t)snprintf(b, len, "(");
    for (int k = 0; k < r && at < len; k++)
        at += (size_t)snprintf(b + at, len - at, "%s%zu", k ? ", " : "", s[k]);
    if (at < len) snprintf(b + at, len - at, ")");
}

/* ------------------------------------------------------------------ write */

ct_status ct_safetensors_write(const char *path, const ct_gpt_config *cfg, const float *params,
                               ct_err *err) {
    ct_status st = CT_OK;
    CT_CHECK(ct_gpt_config_check(cfg, "model to write", err));
    if (!host_is_le())
        return CT_ERR(err, CT_ERR_UNSUPPORTED, "safetensors: writing needs a little-endian host");
    size_t sizes[CT_GPT_NUM_TENSORS];
    ct_gpt_param_sizes(cfg, sizes);
    size_t cap = 4096, len = 0;
    char *h = ct_malloc(cap);
    if (!h) return CT_ERR(err, CT_ERR_NOMEM, "safetensors: out of memory for the header");
#define APPEND(...)                                                                                \
    do {                                                                                           \
        int k_ = snprintf(h + len, cap - len, __VA_ARGS__);                                        \
        while (k_ >= 0 && (size_t)k_ >= cap - len) {                                               \
            char *nh_ = ct_realloc(h, cap *= 2);                                                      \
            if (!nh_) {                                                                            \
                free(h);                                                                           \
                return CT_ERR(err, CT_ERR_NOMEM, "safetensors: out of memory for the header");     \
            }                                                                                      \
            h = nh_;                                                                               \
            k_ = snprintf(h + len, cap - len, __VA_ARGS__);                                        \
        }                                                                                          \
        len += (size_t)k_;                                                                         \
    } while (0)
    APPEND("{\"__metadata__\":{\"format\":\"cltrain-gpt\",\"max_seq\":\"%d\",\"vocab\":\"%d\","
           "\"padded_vocab\":\"%d\",\"layers\":\"%d\",\"heads\":\"%d\",\"channels\":\"%d\","
           "\"experts\":\"%d\",\"top_k\":\"%d\"}",
           cfg->max_seq, cfg->vocab, cfg->padded_vocab, cfg->layers, cfg->heads, cfg->channels,
           cfg->experts, cfg->top_k);
    size_t off = 0;
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        if (!sizes[i]) continue;
        size_t s[4];
        int r = tensor_shape(cfg, i, s);
        APPEND(",\"%s\":{\"dtype\":\"F32\",\"shape\":[", ct_gpt_tensor_name(i));
        for (int k = 0; k < r; k++) APPEND("%s%zu", k ? "," : "", s[k]);
        APPEND("],\"data_offsets\":[%zu,%zu]}", off, off + 4 * sizes[i]);
        off += 4 * sizes[i];
    }
    APPEND("}");
    while (len % 8) APPEND(" ");
#undef APPEND
    ct_atomic_file af;
    uint64_t hl = (uint64_t)len;
    unsigned char le[8];
    for (int k = 0; k < 8; k++) le[k] = (unsigned char)(hl >> (8 * k));
    if ((st = ct_atomic_file_open(&af, path, err)) != CT_OK) {
        free(h);
        return st;
    }
    st = ct_atomic_file_write(&af, le, 8, err);
    if (st == CT_OK) st = ct_atomic_file_write(&af, h, len, err);
    size_t at = 0;
    for (int i = 0; i < CT_GPT_NUM_TENSORS && st == CT_OK; i++) {
        if (sizes[i]) st = ct_atomic_file_write(&af, params + at, sizes[i] * sizeof(float), err);
        at += sizes[i];
    }
    free(h);
    if (st != CT_OK) {
        ct_atomic_file_abort(&af);
        return st;
    }
    return ct_atomic_file_commit(&af, err);
cleanup:
    return st;
}

/* ------------------------------------------------------------------ read */

int ct_safetensors_sniff(const unsigned char *head, size_t n) {
    if (n < 9) return 0;
    uint64_t hl = 0;
    for (int k = 0; k < 8; k++) hl |= (uint64_t)head[k] << (8 * k);
    return hl > 1 && hl < ((uint64_t)1 << 40) && head[8] == '{';
}

static ct_status meta_int(const jval *meta, const char *path, const char *key, int *out,
                          ct_err *err) {
    const jval *v = jget(meta, key);
    if (!v)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: the safetensors metadata has no \"%s\"", path, key);
    if (v->t != J_STR)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: metadata \"%s\" must be a string (safetensors keeps "
                                          "metadata as strings)", path, key);
    char *end = NULL;
    errno = 0;
    long x = strtol(v->str, &end, 10);
    if (!v->str[0] || !end || *end || errno || x < 0 || x > 0x7fffffff)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: metadata \"%s\" = \"%s\" is not a non-negative "
                                          "integer", path, key, v->str);
    *out = (int)x;
    return CT_OK;
}

typedef struct used_range {
    uint64_t a, b;
    const char *name;
} used_range;
static int range_cmp(const void *x, const void *y) {
    const used_range *a = x, *b = y;
    return a->a < b->a ? -1 : a->a > b->a;
}

/* The header parsed and the config checked; *root owned by the caller (jfree). */
static ct_status read_header(FILE *f, const char *path, long fsize, jval *root, uint64_t *hl,
                             ct_gpt_config *cfg, ct_err *err) {
    unsigned char le[8];
    memset(root, 0, sizeof *root);
    if (fsize < 8 || fread(le, 1, 8, f) != 8)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: too short for a safetensors file", path);
    *hl = 0;
    for (int k = 0; k < 8; k++) *hl |= (uint64_t)le[k] << (8 * k);
    if (*hl == 0 || *hl > (uint64_t)fsize - 8 || *hl > ((uint64_t)100 << 20))
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: the safetensors header length %llu does not fit the file of %ld bytes",
                      path, (unsigned long long)*hl, fsize);
    char *h = ct_malloc((size_t)*hl + 1);
    if (!h) return CT_ERR(err, CT_ERR_NOMEM, "%s: out of memory for the header", path);
    if (fread(h, 1, (size_t)*hl, f) != (size_t)*hl) {
        free(h);
        return CT_ERR(err, CT_ERR_IO, "%s: reading the header failed", path);
    }
    h[*hl] = 0;
    jparser p = {h, (size_t)*hl, 0, {0}, 0};
    int rc = jvalue(&p, root);
    if (!rc) {
        jws(&p);
        if (p.at != p.n) rc = jfail(&p, "trailing characters after the JSON object");
    }
    free(h);
    if (rc || root->t != J_OBJ) {
        ct_status st = CT_ERR(err, CT_ERR_FORMAT, "%s: the safetensors header is not valid JSON (%s)",
                              path, p.err[0] ? p.err : "not an object");
        jfree(root);
        return st;
    }
    const jval *meta = jget(root, "__metadata__");
    if (!meta || meta->t != J_OBJ)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: no \"__metadata__\" object (a cltrain model file keeps its configuration "
                      "there)", path);
    const jval *fmt = jget(meta, "format");
    if (!fmt || fmt->t != J_STR || strcmp(fmt->str, "cltrain-gpt"))
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: metadata \"format\" is %s%s%s, expected \"cltrain-gpt\"", path,
                      fmt && fmt->t == J_STR ? "\"" : "", fmt && fmt->t == J_STR ? fmt->str : "missing",
                      fmt && fmt->t == J_STR ? "\"" : "");
    memset(cfg, 0, sizeof *cfg);
    ct_status st;
    if ((st = meta_int(meta, path, "max_seq", &cfg->max_seq, err)) != CT_OK ||
        (st = meta_int(meta, path, "vocab", &cfg->vocab, err)) != CT_OK ||
        (st = meta_int(meta, path, "padded_vocab", &cfg->padded_vocab, err)) != CT_OK ||
        (st = meta_int(meta, path, "layers", &cfg->layers, err)) != CT_OK ||
        (st = meta_int(meta, path, "heads", &cfg->heads, err)) != CT_OK ||
        (st = meta_int(meta, path, "channels", &cfg->channels, err)) != CT_OK ||
        (st = meta_int(meta, path, "experts", &cfg->experts, err)) != CT_OK ||
        (st = meta_int(meta, path, "top_k", &cfg->top_k, err)) != CT_OK)
        return st;
    return ct_gpt_config_check(cfg, path, err);
}

ct_status ct_safetensors_read_config(const char *path, ct_gpt_config *cfg, ct_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return CT_ERR(err, CT_ERR_IO, "cannot open model file %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long fsize = ftell(f);
    rewind(f);
    jval root;
    uint64_t hl;
    ct_status st = read_header(f, path, fsize, &root, &hl, cfg, err);
    jfree(&root);
    fclose(f);
    return st;
}

ct_status ct_safetensors_read(const char *path, ct_gpt_config *cfg, float **params,
                              size_t *nparams, ct_err *err) {
    *params = NULL;
    *nparams = 0;
    if (!host_is_le())
        return CT_ERR(err, CT_ERR_UNSUPPORTED, "safetensors: reading needs a little-endian host");
    FILE *f = fopen(path, "rb");
    if (!f) return CT_ERR(err, CT_ERR_IO, "cannot open model file %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long fsize = ftell(f);
    rewind(f);
    jval root;
    uint64_t hl;
    float *p = NULL;
    used_range *used = NULL;
    ct_status st = read_header(f, path, fsize, &root, &hl, cfg, err);
    if (st != CT_OK) goto done;
    uint64_t data = (uint64_t)fsize - 8 - hl; /* bytes of the data section */
    size_t sizes[CT_GPT_NUM_TENSORS];
    size_t n = ct_gpt_param_sizes(cfg, sizes);
    /* every entry must be a tensor of the table */
    for (int k = 0; k < root.n; k++) {
        const char *name = root.keys[k];
        if (!strcmp(name, "__metadata__")) continue;
        int found = 0;
        for (int i = 0; i < CT_GPT_NUM_TENSORS; i++)
            if (!strcmp(name, ct_gpt_tensor_name(i)) && sizes[i]) found = 1;
        if (!found) {
            st = CT_ERR(err, CT_ERR_FORMAT,
                        "%s: unexpected tensor \"%s\" (not in the model of L=%d NH=%d C=%d E=%d)",
                        path, name, cfg->layers, cfg->heads, cfg->channels, cfg->experts);
            goto done;
        }
    }
    p = ct_malloc((n ? n : 1) * sizeof *p);
    used = ct_calloc(CT_GPT_NUM_TENSORS, sizeof *used);
    if (!p || !used) {
        st = CT_ERR(err, CT_ERR_NOMEM, "no memory for %zu parameters of %s", n, path);
        goto done;
    }
    int nu = 0;
    size_t at = 0;
    for (int i = 0; i < CT_GPT_NUM_TENSORS; at += sizes[i], i++) {
        if (!sizes[i]) continue;
        const char *name = ct_gpt_tensor_name(i);
        const jval *t = jget(&root, name);
        size_t want[4];
        int r = tensor_shape(cfg, i, want);
        char ws[96];
        shape_str(ws, sizeof ws, want, r);
        if (!t || t->t != J_OBJ) {
            st = CT_ERR(err, CT_ERR_FORMAT, "%s: tensor \"%s\" %s is missing", path, name, ws);
            goto done;
        }
        const jval *dt = jget(t, "dtype"), *sh = jget(t, "shape"), *of = jget(t, "data_offsets");
        if (!dt || dt->t != J_STR || strcmp(dt->str, "F32")) {
            st = CT_ERR(err, CT_ERR_FORMAT, "%s: tensor \"%s\" has dtype %s; only F32 is read",
                        path, name, dt && dt->t == J_STR ? dt->str : "(none)");
            goto done;
        }
        int shape_ok = sh && sh->t == J_ARR && sh->n == r;
        size_t got[8];
        int gr = sh && sh->t == J_ARR && sh->n <= 8 ? sh->n : 0;
        for (int k = 0; k < gr; k++) {
            const jval *d = &sh->items[k];
            got[k] = d->t == J_NUM && d->num >= 0 ? (size_t)d->num : (size_t)-1;
            if (shape_ok && got[k] != want[k]) shape_ok = 0;
        }
        if (!shape_ok) {
            char gs[128];
            if (gr) shape_str(gs, sizeof gs, got, gr);
            else snprintf(gs, sizeof gs, "(malformed)");
            st = CT_ERR(err, CT_ERR_FORMAT, "%s: tensor \"%s\" has shape %s, the model needs %s",
                        path, name, gs, ws);
            goto done;
        }
        if (!of || of->t != J_ARR || of->n != 2 || of->items[0].t != J_NUM ||
            of->items[1].t != J_NUM || of->items[0].num < 0 ||
            of->items[1].num < of->items[0].num) {
            st = CT_ERR(err, CT_ERR_FORMAT, "%s: tensor \"%s\" has malformed data_offsets", path,
                        name);
            goto done;
        }
        uint64_t a = (uint64_t)of->items[0].num, b = (uint64_t)of->items[1].num;
        if (b - a != 4 * (uint64_t)sizes[i] || b > data) {
            st = CT_ERR(err, CT_ERR_FORMAT,
                        "%s: tensor \"%s\": data_offsets [%llu, %llu) %s (%zu floats need %llu "
                        "bytes; the data section has %llu)",
                        path, name, (unsigned long long)a, (unsigned long long)b,
                        b > data ? "run past the end of the file" : "do not match its shape",
                        sizes[i], (unsigned long long)(4 * (uint64_t)sizes[i]),
                        (unsigned long long)data);
            goto done;
        }
        used[nu].a = a, used[nu].b = b, used[nu].name = name, nu++;
        if (fseek(f, (long)(8 + hl + a), SEEK_SET) != 0 ||
            fread(p + at, sizeof(float), sizes[i], f) != sizes[i]) {
            st = CT_ERR(err, CT_ERR_IO, "%s: reading tensor \"%s\" failed", path, name);
            goto done;
        }
    }
    qsort(used, (size_t)nu, sizeof *used, range_cmp);
    for (int k = 1; k < nu; k++)
        if (used[k].a < used[k - 1].b) {
            st = CT_ERR(err, CT_ERR_FORMAT,
                        "%s: tensors \"%s\" [%llu, %llu) and \"%s\" [%llu, %llu) overlap", path,
                        used[k - 1].name, (unsigned long long)used[k - 1].a,
                        (unsigned long long)used[k - 1].b, used[k].name,
                        (unsigned long long)used[k].a, (unsigned long long)used[k].b);
            goto done;
        }
    *params = p;
    *nparams = n;
    p = NULL;
done:
    free(p);
    free(used);
    jfree(&root);
    fclose(f);
    return st;
}
