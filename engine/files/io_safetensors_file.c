/* io_safetensors_file.c - the safetensors container (io_safetensors_impl.h): open a file and check
 * every entry of its header, read a tensor as fp32 (F32, BF16, F16), write a file of F32 or BF16
 * tensors atomically. What the tensors mean is the callers' (io_safetensors.c for cltrain's own
 * names, io_hf.c for Hugging Face's). Little-endian hosts only (the format is little-endian). */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ct_alloc.h"
#include "ct_bf16.h"
#include "io_safetensors_impl.h"

int ct__host_is_le(void) {
    uint16_t x = 1;
    unsigned char b;
    memcpy(&b, &x, 1);
    return b == 1;
}

static const struct {
    const char *name;
    int size, readable;
} dtypes[] = {{"F32", 4, 1}, {"BF16", 2, 1}, {"F16", 2, 1},  {"F64", 8, 0},     {"I64", 8, 0},
              {"U64", 8, 0}, {"I32", 4, 0},  {"U32", 4, 0},  {"I16", 2, 0},     {"U16", 2, 0},
              {"I8", 1, 0},  {"U8", 1, 0},   {"BOOL", 1, 0}, {"F8_E4M3", 1, 0}, {"F8_E5M2", 1, 0}};

void ct__st_shape_str(char *b, size_t len, const uint64_t *s, int rank) {
    size_t at = (size_t)snprintf(b, len, "(");
    for (int k = 0; k < rank && at < len; k++)
        at += (size_t)snprintf(b + at, len - at, "%s%llu", k ? ", " : "", (unsigned long long)s[k]);
    if (at < len) snprintf(b + at, len - at, ")");
}

float ct__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31u, m = h & 1023u, u;
    if (e == 31) {
        u = sign | 0x7f800000u | (m << 13); /* inf, NaN (payload kept) */
    } else if (e) {
        u = sign | ((e + 112) << 23) | (m << 13); /* rebias 15 -> 127 */
    } else if (!m) {
        u = sign;
    } else { /* subnormal: normalise m * 2^-24 */
        int k = 0;
        while (!(m & 1024u))
            m <<= 1, k++;
        u = sign | ((uint32_t)(113 - k) << 23) | ((m & 1023u) << 13);
    }
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

void ct__st_close(ct__st_file *sf) {
    if (!sf) return;
    if (sf->f) fclose(sf->f);
    ct__json_free(&sf->root);
    free(sf->t);
    memset(sf, 0, sizeof *sf);
}

typedef struct span {
    uint64_t a, b;
    int i;
} span;
static int span_cmp(const void *x, const void *y) {
    const span *a = x, *b = y;
    return a->a < b->a ? -1 : a->a > b->a;
}

/* One header entry into *t, checked. */
static ct_status entry(ct__st_file *sf, const char *name, const ct_json *v, ct__st_tensor *t,
                       ct_err *err) {
    const char *p = sf->path;
    memset(t, 0, sizeof *t);
    t->name = name;
    if (v->t != CT_JSON_OBJ)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: tensor \"%s\" is %s, not an object", p, name,
                      ct__json_type_name(v->t));
    for (int k = 0; k < v->n; k++)
        if (strcmp(v->keys[k], "dtype") && strcmp(v->keys[k], "shape") &&
            strcmp(v->keys[k], "data_offsets"))
            return CT_ERR(err, CT_ERR_FORMAT, "%s: tensor \"%s\" has an unknown field \"%s\"", p,
                          name, v->keys[k]);
    const ct_json *dt = ct__json_get(v, "dtype"), *sh = ct__json_get(v, "shape"),
                  *of = ct__json_get(v, "data_offsets");
    if (!dt || dt->t != CT_JSON_STR)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: tensor \"%s\" has no dtype string", p, name);
    t->dtype = dt->str;
    for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++)
        if (!strcmp(dt->str, dtypes[k].name))
            t->esize = dtypes[k].size, t->readable = dtypes[k].readable;
    if (!t->esize)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: tensor \"%s\" has dtype %.40s, not a safetensors "
                      "dtype",
                      p, name, dt->str);
    if (!sh || sh->t != CT_JSON_ARR || sh->n > CT__ST_MAX_RANK)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: tensor \"%s\": its shape is not an array of at most "
                      "%d integers",
                      p, name, CT__ST_MAX_RANK);
    t->rank = sh->n;
    t->count = 1;
    for (int k = 0; k < sh->n; k++) {
        if (ct__json_uint(&sh->items[k], (uint64_t)1 << 40, &t->shape[k]))
            return CT_ERR(err, CT_ERR_FORMAT,
                          "%s: tensor \"%s\": shape entry %d is not an integer "
                          "in [0, 2^40]",
                          p, name, k);
        if (t->shape[k] && t->count > ((uint64_t)1 << 50) / t->shape[k])
            return CT_ERR(err, CT_ERR_FORMAT, "%s: tensor \"%s\": its shape is too large", p, name);
        t->count *= t->shape[k];
    }
    if (!of || of->t != CT_JSON_ARR || of->n != 2 ||
        ct__json_uint(&of->items[0], (uint64_t)1 << 53, &t->begin) ||
        ct__json_uint(&of->items[1], (uint64_t)1 << 53, &t->end) || t->end < t->begin)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: tensor \"%s\" has malformed data_offsets", p, name);
    if (t->end > sf->data_len)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: tensor \"%s\": data_offsets [%llu, %llu) run past the "
                      "end of the data section (%llu bytes)",
                      p, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                      (unsigned long long)sf->data_len);
    char s[160];
    ct__st_shape_str(s, sizeof s, t->shape, t->rank);
    if (t->end - t->begin != t->count * (uint64_t)t->esize)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: tensor \"%s\" has dtype %s and shape %s (%llu bytes), but its "
                      "data_offsets [%llu, %llu) hold %llu bytes",
                      p, name, t->dtype, s, (unsigned long long)(t->count * (uint64_t)t->esize),
                      (unsigned long long)t->begin, (unsigned long long)t->end,
                      (unsigned long long)(t->end - t->begin));
    return CT_OK;
}

ct_status ct__st_open(ct__st_file *sf, const char *path, ct_err *err) {
    memset(sf, 0, sizeof *sf);
    snprintf(sf->path, sizeof sf->path, "%s", path);
    ct_status st = CT_OK;
    char *h = NULL;
    span *sp = NULL;
    if (!ct__host_is_le())
        return CT_ERR(err, CT_ERR_UNSUPPORTED, "%s: safetensors needs a little-endian host", path);
    sf->f = fopen(path, "rb");
    if (!sf->f)
        return CT_ERR(err, CT_ERR_IO, "cannot open model file %s: %s", path, strerror(errno));
    long fsize = -1;
    if (fseek(sf->f, 0, SEEK_END) == 0) fsize = ftell(sf->f);
    rewind(sf->f);
    unsigned char le[8];
    if (fsize < 8 || fread(le, 1, 8, sf->f) != 8) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s: too short for a safetensors file", path);
        goto done;
    }
    for (int k = 0; k < 8; k++)
        sf->header_len |= (uint64_t)le[k] << (8 * k);
    if (sf->header_len == 0 || sf->header_len > (uint64_t)fsize - 8 ||
        sf->header_len > ((uint64_t)100 << 20)) {
        st = CT_ERR(err, CT_ERR_FORMAT,
                    "%s: the safetensors header length %llu does not fit the file of %ld bytes "
                    "(or is over 100 MiB)",
                    path, (unsigned long long)sf->header_len, fsize);
        goto done;
    }
    sf->data_len = (uint64_t)fsize - 8 - sf->header_len;
    h = ct_malloc((size_t)sf->header_len);
    if (!h) {
        st = CT_ERR(err, CT_ERR_NOMEM, "%s: out of memory for the header", path);
        goto done;
    }
    if (fread(h, 1, (size_t)sf->header_len, sf->f) != (size_t)sf->header_len) {
        st = CT_ERR(err, CT_ERR_IO, "%s: reading the header failed", path);
        goto done;
    }
    char why[200];
    if (ct__json_parse(h, (size_t)sf->header_len, 8, &sf->root, why, sizeof why)) {
        st = CT_ERR(err, CT_ERR_FORMAT,
                    "%s: the safetensors header is not valid JSON (%s of the "
                    "header)",
                    path, why);
        goto done;
    }
    if (sf->root.t != CT_JSON_OBJ) {
        st = CT_ERR(err, CT_ERR_FORMAT,
                    "%s: the safetensors header is not valid JSON (not an "
                    "object)",
                    path);
        goto done;
    }
    sf->t = ct_calloc((size_t)sf->root.n + 1, sizeof *sf->t);
    sp = ct_calloc((size_t)sf->root.n + 1, sizeof *sp);
    if (!sf->t || !sp) {
        st = CT_ERR(err, CT_ERR_NOMEM, "%s: out of memory for the header", path);
        goto done;
    }
    for (int k = 0; k < sf->root.n; k++) {
        const char *name = sf->root.keys[k];
        const ct_json *v = &sf->root.items[k];
        if (!strcmp(name, "__metadata__")) {
            if (v->t != CT_JSON_OBJ) {
                st = CT_ERR(err, CT_ERR_FORMAT, "%s: \"__metadata__\" is not an object", path);
                goto done;
            }
            for (int j = 0; j < v->n; j++)
                if (v->items[j].t != CT_JSON_STR) {
                    st = CT_ERR(err, CT_ERR_FORMAT,
                                "%s: metadata \"%s\" must be a string "
                                "(safetensors keeps metadata as strings)",
                                path, v->keys[j]);
                    goto done;
                }
            sf->meta = v;
            continue;
        }
        if ((st = entry(sf, name, v, &sf->t[sf->n], err)) != CT_OK) goto done;
        sp[sf->n].a = sf->t[sf->n].begin, sp[sf->n].b = sf->t[sf->n].end, sp[sf->n].i = sf->n;
        sf->n++;
    }
    qsort(sp, (size_t)sf->n, sizeof *sp, span_cmp);
    /* sorted by start: each non-empty tensor must start at or after the furthest end so far */
    for (int k = 0, last = -1; k < sf->n; k++) {
        if (sp[k].b == sp[k].a) continue;
        if (last >= 0 && sp[k].a < sp[last].b) {
            const ct__st_tensor *x = &sf->t[sp[last].i], *y = &sf->t[sp[k].i];
            st = CT_ERR(err, CT_ERR_FORMAT,
                        "%s: tensors \"%s\" [%llu, %llu) and \"%s\" [%llu, %llu) "
                        "overlap",
                        path, x->name, (unsigned long long)x->begin, (unsigned long long)x->end,
                        y->name, (unsigned long long)y->begin, (unsigned long long)y->end);
            goto done;
        }
        if (last < 0 || sp[k].b > sp[last].b) last = k;
    }
done:
    free(h);
    free(sp);
    if (st != CT_OK) ct__st_close(sf);
    return st;
}

const ct__st_tensor *ct__st_find(const ct__st_file *sf, const char *name) {
    for (int i = 0; i < sf->n; i++)
        if (!strcmp(sf->t[i].name, name)) return &sf->t[i];
    return NULL;
}

const char *ct__st_meta(const ct__st_file *sf, const char *key) {
    const ct_json *v = ct__json_get(sf->meta, key);
    return v && v->t == CT_JSON_STR ? v->str : NULL;
}

ct_status ct__st_read_f32(ct__st_file *sf, const ct__st_tensor *t, float *out, ct_err *err) {
    if (!t->readable)
        return CT_ERR(err, CT_ERR_UNSUPPORTED,
                      "%s: tensor \"%s\" has dtype %s; F32, BF16 and F16 "
                      "are read",
                      sf->path, t->name, t->dtype);
    if (fseek(sf->f, (long)(8 + sf->header_len + t->begin), SEEK_SET) != 0)
        return CT_ERR(err, CT_ERR_IO, "%s: seeking to tensor \"%s\" failed", sf->path, t->name);
    if (t->esize == 4) {
        if (fread(out, 4, (size_t)t->count, sf->f) != (size_t)t->count)
            return CT_ERR(err, CT_ERR_IO, "%s: reading tensor \"%s\" failed", sf->path, t->name);
        return CT_OK;
    }
    uint16_t buf[4096];
    int bf16 = !strcmp(t->dtype, "BF16");
    for (uint64_t at = 0; at < t->count;) {
        size_t k = t->count - at < 4096 ? (size_t)(t->count - at) : 4096;
        if (fread(buf, 2, k, sf->f) != k)
            return CT_ERR(err, CT_ERR_IO, "%s: reading tensor \"%s\" failed", sf->path, t->name);
        for (size_t j = 0; j < k; j++)
            out[at + j] = bf16 ? ct_bf16_to_f32(buf[j]) : ct__f16_to_f32(buf[j]);
        at += k;
    }
    return CT_OK;
}

/* ------------------------------------------------------------------ write */

typedef struct sbuf {
    char *b;
    size_t len, cap;
    int failed;
} sbuf;

static void add(sbuf *s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void add(sbuf *s, const char *fmt, ...) {
    for (;;) {
        if (s->failed) return;
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(s->b ? s->b + s->len : NULL, s->b ? s->cap - s->len : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            s->failed = 1;
            return;
        }
        if (s->b && (size_t)k < s->cap - s->len) {
            s->len += (size_t)k;
            return;
        }
        size_t nc = (s->cap ? s->cap * 2 : 4096) + (size_t)k;
        char *nb = ct_realloc(s->b, nc);
        if (!nb) {
            s->failed = 1;
            return;
        }
        s->b = nb, s->cap = nc;
    }
}

/* The tensor's values in file order, converted, through the atomic file in pieces. */
static ct_status write_data(ct_atomic_file *af, const ct__st_out *t, ct_file_dtype dtype,
                            ct_err *err) {
    size_t n = t->rows * t->cols;
    if (!t->transpose && dtype == CT_FILE_F32) return ct_atomic_file_write(af, t->src, n * 4, err);
    enum { CHUNK = 8192 };
    float f[CHUNK];
    uint16_t h[CHUNK];
    ct_status st = CT_OK;
    for (size_t at = 0; at < n && st == CT_OK;) {
        size_t k = n - at < CHUNK ? n - at : CHUNK;
        for (size_t j = 0; j < k; j++) {
            size_t e = at + j; /* element e of the file: (e / rows, e % rows) of the transpose */
            f[j] = t->transpose ? t->src[(e % t->rows) * t->cols + e / t->rows] : t->src[e];
        }
        if (dtype == CT_FILE_BF16) {
            for (size_t j = 0; j < k; j++)
                h[j] = ct_bf16_from_f32(f[j]);
            st = ct_atomic_file_write(af, h, k * 2, err);
        } else {
            st = ct_atomic_file_write(af, f, k * 4, err);
        }
        at += k;
    }
    return st;
}

ct_status ct__st_write(const char *path, const char *meta, const ct__st_out *ts, int n,
                       ct_file_dtype dtype, ct_err *err) {
    if (!ct__host_is_le())
        return CT_ERR(err, CT_ERR_UNSUPPORTED, "%s: safetensors needs a little-endian host", path);
    const char *dname = dtype == CT_FILE_BF16 ? "BF16" : "F32";
    size_t esize = dtype == CT_FILE_BF16 ? 2 : 4;
    sbuf s = {0};
    add(&s, "{");
    if (meta) add(&s, "\"__metadata__\":{%s}", meta);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        add(&s, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i || meta ? "," : "", ts[i].name, dname);
        for (int k = 0; k < ts[i].rank; k++)
            add(&s, "%s%llu", k ? "," : "", (unsigned long long)ts[i].shape[k]);
        uint64_t bytes = (uint64_t)ts[i].rows * ts[i].cols * esize;
        add(&s, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
            (unsigned long long)(off + bytes));
        off += bytes;
    }
    add(&s, "}");
    while (!s.failed && s.len % 8)
        add(&s, " ");
    if (s.failed) {
        free(s.b);
        return CT_ERR(err, CT_ERR_NOMEM, "%s: out of memory for the safetensors header", path);
    }
    unsigned char le[8];
    for (int k = 0; k < 8; k++)
        le[k] = (unsigned char)((uint64_t)s.len >> (8 * k));
    ct_atomic_file af;
    memset(&af, 0, sizeof af);
    ct_status st = ct_atomic_file_open(&af, path, err);
    if (st == CT_OK) st = ct_atomic_file_write(&af, le, 8, err);
    if (st == CT_OK) st = ct_atomic_file_write(&af, s.b, s.len, err);
    for (int i = 0; i < n && st == CT_OK; i++)
        st = write_data(&af, &ts[i], dtype, err);
    free(s.b);
    if (st != CT_OK) {
        ct_atomic_file_abort(&af);
        return st;
    }
    return ct_atomic_file_commit(&af, err);
}
