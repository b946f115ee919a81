/* io_json.c - a strict, bounded JSON reader (io_json_impl.h): enough for the files engine/files
 * reads from outside (safetensors headers, Hugging Face's config.json and the sharded-weights
 * index). Recursive descent over a length-delimited buffer; every failure says what and at which
 * byte; nothing is read past n. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_alloc.h"
#include "io_json_impl.h"

typedef struct jparser {
    const char *s;
    size_t n, at;
    int depth, max_depth;
    char *why;
    size_t why_len;
} jparser;

void ct__json_free(ct_json *v) {
    if (!v) return;
    free(v->str);
    for (int i = 0; i < v->n; i++) {
        ct__json_free(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    memset(v, 0, sizeof *v);
}

static int fail(jparser *p, const char *what) {
    if (!p->why[0]) snprintf(p->why, p->why_len, "%s at byte %zu", what, p->at);
    return -1;
}

static void ws(jparser *p) {
    while (p->at < p->n && (p->s[p->at] == ' ' || p->s[p->at] == '\t' || p->s[p->at] == '\n' ||
                            p->s[p->at] == '\r'))
        p->at++;
}

static int hex4(jparser *p, unsigned *u) {
    *u = 0;
    if (p->n - p->at < 4) return fail(p, "a short \\u escape");
    for (int i = 0; i < 4; i++) {
        char h = p->s[p->at++];
        int d = h >= '0' && h <= '9'   ? h - '0'
                : h >= 'a' && h <= 'f' ? h - 'a' + 10
                : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                       : -1;
        if (d < 0) return fail(p, "a bad \\u escape");
        *u = *u * 16 + (unsigned)d;
    }
    return 0;
}

/* Append up to 4 bytes, growing the buffer. */
static int put(jparser *p, char **b, size_t *len, size_t *cap, const unsigned char *c, size_t k) {
    if (*len + k + 1 > *cap) {
        size_t nc = *cap * 2 + k;
        char *nb = ct_realloc(*b, nc);
        if (!nb) return fail(p, "out of memory");
        *b = nb, *cap = nc;
    }
    memcpy(*b + *len, c, k);
    *len += k;
    return 0;
}

static int string(jparser *p, char **out) {
    if (p->at >= p->n || p->s[p->at] != '"') return fail(p, "expected a string");
    p->at++;
    size_t cap = 16, len = 0;
    char *b = ct_malloc(cap);
    if (!b) return fail(p, "out of memory");
    for (;;) {
        if (p->at >= p->n) goto bad_end;
        unsigned char ch = (unsigned char)p->s[p->at++];
        unsigned char enc[4];
        size_t k = 1;
        enc[0] = ch;
        if (ch == '"') break;
        if (ch < 0x20) {
            p->at--;
            fail(p, "a control character in a string");
            goto bad;
        }
        if (ch == '\\') {
            if (p->at >= p->n) goto bad_end;
            char e = p->s[p->at++];
            unsigned u = 0;
            switch (e) {
            case '"':
            case '\\':
            case '/':
                enc[0] = (unsigned char)e;
                break;
            case 'b':
                enc[0] = '\b';
                break;
            case 'f':
                enc[0] = '\f';
                break;
            case 'n':
                enc[0] = '\n';
                break;
            case 'r':
                enc[0] = '\r';
                break;
            case 't':
                enc[0] = '\t';
                break;
            case 'u':
                if (hex4(p, &u)) goto bad;
                if (u >= 0xDC00 && u <= 0xDFFF) {
                    fail(p, "a lone low surrogate in a \\u escape");
                    goto bad;
                }
                if (u >= 0xD800 && u <= 0xDBFF) { /* must be followed by \uDC00..\uDFFF */
                    unsigned lo = 0;
                    if (p->n - p->at < 2 || p->s[p->at] != '\\' || p->s[p->at + 1] != 'u') {
                        fail(p, "a lone high surrogate in a \\u escape");
                        goto bad;
                    }
                    p->at += 2;
                    if (hex4(p, &lo)) goto bad;
                    if (lo < 0xDC00 || lo > 0xDFFF) {
                        fail(p, "a high surrogate not followed by a low one");
                        goto bad;
                    }
                    u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                }
                if (u == 0) {
                    fail(p, "\\u0000 in a string");
                    goto bad;
                }
                if (u < 0x80)
                    enc[0] = (unsigned char)u;
                else if (u < 0x800)
                    enc[0] = (unsigned char)(0xC0 | (u >> 6)),
                    enc[1] = (unsigned char)(0x80 | (u & 63)), k = 2;
                else if (u < 0x10000)
                    enc[0] = (unsigned char)(0xE0 | (u >> 12)),
                    enc[1] = (unsigned char)(0x80 | ((u >> 6) & 63)),
                    enc[2] = (unsigned char)(0x80 | (u & 63)), k = 3;
                else
                    enc[0] = (unsigned char)(0xF0 | (u >> 18)),
                    enc[1] = (unsigned char)(0x80 | ((u >> 12) & 63)),
                    enc[2] = (unsigned char)(0x80 | ((u >> 6) & 63)),
                    enc[3] = (unsigned char)(0x80 | (u & 63)), k = 4;
                break;
            default:
                p->at--;
                fail(p, "an unknown escape");
                goto bad;
            }
        }
        if (put(p, &b, &len, &cap, enc, k)) goto bad;
    }
    b[len] = 0;
    *out = b;
    return 0;
bad_end:
    fail(p, "an unterminated string");
bad:
    free(b);
    return -1;
}

static int digits(jparser *p) {
    size_t a = p->at;
    while (p->at < p->n && p->s[p->at] >= '0' && p->s[p->at] <= '9')
        p->at++;
    return p->at > a ? 0 : -1;
}

/* JSON's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int number(jparser *p, ct_json *v) {
    size_t a = p->at;
    v->t = CT_JSON_NUM;
    v->is_int = 1;
    if (p->s[p->at] == '-') p->at++;
    if (p->at < p->n && p->s[p->at] == '0') {
        p->at++;
        if (p->at < p->n && p->s[p->at] >= '0' && p->s[p->at] <= '9')
            return fail(p, "a number with a leading zero");
    } else if (digits(p)) {
        return fail(p, "a bad number");
    }
    if (p->at < p->n && p->s[p->at] == '.') {
        p->at++, v->is_int = 0;
        if (digits(p)) return fail(p, "a number with no digit after '.'");
    }
    if (p->at < p->n && (p->s[p->at] == 'e' || p->s[p->at] == 'E')) {
        p->at++, v->is_int = 0;
        if (p->at < p->n && (p->s[p->at] == '+' || p->s[p->at] == '-')) p->at++;
        if (digits(p)) return fail(p, "a number with no digit in its exponent");
    }
    char tmp[64];
    size_t len = p->at - a;
    if (len >= sizeof tmp) return fail(p, "a number longer than 63 characters");
    memcpy(tmp, p->s + a, len);
    tmp[len] = 0;
    v->num = strtod(tmp, NULL);
    return 0;
}

static int push(jparser *p, ct_json *v, char *key) {
    if (v->n == v->cap) {
        int nc = v->cap ? v->cap * 2 : 8;
        ct_json *ni = ct_realloc(v->items, sizeof *ni * (size_t)nc);
        if (!ni) return fail(p, "out of memory");
        v->items = ni;
        if (v->t == CT_JSON_OBJ) {
            char **nk = ct_realloc(v->keys, sizeof *nk * (size_t)nc);
            if (!nk) return fail(p, "out of memory");
            v->keys = nk;
        }
        v->cap = nc;
    }
    memset(&v->items[v->n], 0, sizeof v->items[0]);
    if (v->t == CT_JSON_OBJ) v->keys[v->n] = key;
    v->n++;
    return 0;
}

static int value(jparser *p, ct_json *v);

static int key_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* An object's keys are distinct: sorted copies of the pointers, neighbours compared
 * (n log n, so a header of many tensors stays cheap). */
static int distinct_keys(jparser *p, const ct_json *v) {
    if (v->n < 2) return 0;
    char **k = ct_malloc(sizeof *k * (size_t)v->n);
    if (!k) return fail(p, "out of memory");
    memcpy(k, v->keys, sizeof *k * (size_t)v->n);
    qsort(k, (size_t)v->n, sizeof *k, key_cmp);
    int rc = 0;
    for (int i = 1; i < v->n && !rc; i++)
        if (!strcmp(k[i - 1], k[i])) {
            char what[120];
            snprintf(what, sizeof what, "the key \"%.60s\" twice in the object ending", k[i]);
            rc = fail(p, what);
        }
    free(k);
    return rc;
}

static int container(jparser *p, ct_json *v, char close) {
    p->at++;
    ws(p);
    if (p->at < p->n && p->s[p->at] == close) {
        p->at++;
        return 0;
    }
    for (;;) {
        char *key = NULL;
        if (v->t == CT_JSON_OBJ) {
            ws(p);
            if (string(p, &key)) return -1;
            ws(p);
            if (p->at >= p->n || p->s[p->at] != ':') {
                free(key);
                return fail(p, "expected ':'");
            }
            p->at++;
        }
        if (push(p, v, key)) {
            free(key);
            return -1;
        }
        if (value(p, &v->items[v->n - 1])) return -1;
        ws(p);
        if (p->at < p->n && p->s[p->at] == ',') {
            p->at++;
            continue;
        }
        if (p->at < p->n && p->s[p->at] == close) {
            p->at++;
            return v->t == CT_JSON_OBJ ? distinct_keys(p, v) : 0;
        }
        return fail(p, v->t == CT_JSON_OBJ ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int literal(jparser *p, const char *word) {
    size_t k = strlen(word);
    if (p->n - p->at < k || strncmp(p->s + p->at, word, k)) return 0;
    p->at += k;
    return 1;
}

static int value(jparser *p, ct_json *v) {
    memset(v, 0, sizeof *v);
    ws(p);
    if (p->at >= p->n) return fail(p, "an unexpected end");
    char c = p->s[p->at];
    int rc = 0;
    if (c == '{' || c == '[') {
        if (++p->depth > p->max_depth) return fail(p, "nesting too deep");
        v->t = c == '{' ? CT_JSON_OBJ : CT_JSON_ARR;
        rc = container(p, v, c == '{' ? '}' : ']');
        p->depth--;
    } else if (c == '"') {
        v->t = CT_JSON_STR;
        rc = string(p, &v->str);
    } else if (c == '-' || (c >= '0' && c <= '9')) {
        rc = number(p, v);
    } else if (literal(p, "true")) {
        v->t = CT_JSON_BOOL, v->num = 1;
    } else if (literal(p, "false")) {
        v->t = CT_JSON_BOOL;
    } else if (literal(p, "null")) {
        v->t = CT_JSON_NULL;
    } else {
        rc = fail(p, "an unexpected character");
    }
    return rc;
}

int ct__json_parse(const char *text, size_t n, int max_depth, ct_json *out, char *why,
                   size_t why_len) {
    char spare[8];
    if (!why || !why_len) why = spare, why_len = sizeof spare;
    why[0] = 0;
    jparser p = {text, n, 0, 0, max_depth, why, why_len};
    int rc = value(&p, out);
    if (!rc) {
        ws(&p);
        if (p.at != p.n) rc = fail(&p, "trailing characters after the value");
    }
    if (rc) ct__json_free(out);
    return rc;
}

const ct_json *ct__json_get(const ct_json *obj, const char *key) {
    if (!obj || obj->t != CT_JSON_OBJ) return NULL;
    for (int i = 0; i < obj->n; i++)
        if (obj->keys[i] && !strcmp(obj->keys[i], key)) return &obj->items[i];
    return NULL;
}

int ct__json_uint(const ct_json *v, uint64_t max, uint64_t *out) {
    if (!v || v->t != CT_JSON_NUM || !v->is_int || v->num < 0 || v->num > (double)max) return -1;
    *out = (uint64_t)v->num;
    return 0;
}

const char *ct__json_type_name(ct_json_type t) {
    switch (t) {
    case CT_JSON_NULL:
        return "null";
    case CT_JSON_BOOL:
        return "a boolean";
    case CT_JSON_NUM:
        return "a number";
    case CT_JSON_STR:
        return "a string";
    case CT_JSON_ARR:
        return "an array";
    case CT_JSON_OBJ:
        return "an object";
    }
    return "?";
}
