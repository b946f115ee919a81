/* json.c - ct_plot's JSON reader: RFC 8259 values read into flat records (plot.h), for the
 * metrics' JSON Lines and the traceEvents of a Chrome trace. Strict about the grammar (a file
 * that is not JSON is refused with the line and column), bounded in everything it keeps
 * (keys, strings and field counts cut, nesting at PLOT_DEPTH), and it never reads past the end
 * of the text it was given (the text need not be NUL-terminated). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"

int plot_fail(plot_err *err, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return code;
}

const char *plot_printable(char *buf, size_t cap, const char *s) {
    size_t n = 0;
    for (; s && *s && n + 1 < cap; s++)
        buf[n++] = (unsigned char)*s >= 0x20 && (unsigned char)*s < 0x7f ? *s : '?';
    if (cap) buf[n] = 0;
    return buf;
}

int plot_read_file(const char *path, char **data, size_t *len, plot_err *err) {
    *data = NULL, *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return plot_fail(err, PLOT_BAD, "cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *p = malloc(cap);
    int rc = p ? PLOT_OK : plot_fail(err, PLOT_NOMEM, "out of memory reading %s", path);
    while (rc == PLOT_OK) {
        if (cap - n < 2) {
            char *q = cap < ((size_t)-1) / 2 ? realloc(p, 2 * cap) : NULL;
            if (!q) {
                rc = plot_fail(err, PLOT_NOMEM, "out of memory reading %s (%zu bytes so far)", path,
                               n);
                break;
            }
            p = q, cap *= 2;
        }
        size_t k = fread(p + n, 1, cap - n - 1, f);
        n += k;
        if (k == 0) {
            if (ferror(f))
                rc = plot_fail(err, PLOT_BAD, "cannot read %s: %s", path, strerror(errno));
            break;
        }
    }
    fclose(f);
    if (rc != PLOT_OK) {
        free(p);
        return rc;
    }
    p[n] = 0;
    *data = p, *len = n;
    return PLOT_OK;
}

void plot_json_init(plot_json *j, const char *text, size_t len, const char *what, int line0) {
    j->base = j->p = text, j->end = text + len, j->what = what, j->line0 = line0;
}

void plot_json_ws(plot_json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

int plot_json_at_end(plot_json *j) {
    plot_json_ws(j);
    return j->p == j->end;
}

int plot_json_bad(plot_json *j, plot_err *err, const char *what) {
    int line = j->line0, col = 1;
    for (const char *q = j->base; q < j->p && q < j->end; q++) {
        if (*q == '\n')
            line++, col = 1;
        else
            col++;
    }
    if (j->p >= j->end)
        return plot_fail(err, PLOT_BAD, "%s: line %d: not JSON: %s (the text ends there)", j->what,
                         line, what);
    unsigned char c = (unsigned char)*j->p;
    if (c >= 0x20 && c < 0x7f)
        return plot_fail(err, PLOT_BAD, "%s: line %d, column %d: not JSON: %s (found '%c')",
                         j->what, line, col, what, c);
    return plot_fail(err, PLOT_BAD, "%s: line %d, column %d: not JSON: %s (found byte 0x%02x)",
                     j->what, line, col, what, c);
}

int plot_json_expect(plot_json *j, char c, const char *reading, plot_err *err) {
    plot_json_ws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return PLOT_OK;
    }
    char m[160];
    snprintf(m, sizeof m, "expected '%c' %s", c, reading);
    return plot_json_bad(j, err, m);
}

/* ---- strings --------------------------------------------------------------------------- */

/* Appends code point u as UTF-8 if it fits whole; the first one that does not ends the
 * string (*full), so a cut never splits a character nor drops one from the middle. */
static void put_utf8(char *buf, size_t cap, size_t *n, int *full, unsigned u) {
    char t[4];
    size_t k;
    if (u < 0x80)
        t[0] = (char)u, k = 1;
    else if (u < 0x800)
        t[0] = (char)(0xc0 | u >> 6), t[1] = (char)(0x80 | (u & 0x3f)), k = 2;
    else if (u < 0x10000)
        t[0] = (char)(0xe0 | u >> 12), t[1] = (char)(0x80 | ((u >> 6) & 0x3f)),
        t[2] = (char)(0x80 | (u & 0x3f)), k = 3;
    else
        t[0] = (char)(0xf0 | u >> 18), t[1] = (char)(0x80 | ((u >> 12) & 0x3f)),
        t[2] = (char)(0x80 | ((u >> 6) & 0x3f)), t[3] = (char)(0x80 | (u & 0x3f)), k = 4;
    if (!buf || *full) return;
    if (*n + k < cap) {
        memcpy(buf + *n, t, k);
        *n += k;
    } else {
        *full = 1;
    }
}

/* One UTF-8 character at p (< end): its code point, or 0xFFFD and one byte for an invalid,
 * overlong or surrogate sequence. */
static unsigned utf8_next(const char **pp, const char *end) {
    const unsigned char *p = (const unsigned char *)*pp;
    unsigned c = p[0], u, k;
    if (c < 0x80) {
        *pp += 1;
        return c;
    }
    if (c >= 0xc2 && c <= 0xdf)
        u = c & 0x1f, k = 1;
    else if (c >= 0xe0 && c <= 0xef)
        u = c & 0x0f, k = 2;
    else if (c >= 0xf0 && c <= 0xf4)
        u = c & 0x07, k = 3;
    else {
        *pp += 1;
        return 0xfffd;
    }
    if ((size_t)((const unsigned char *)end - p) <= k) {
        *pp += 1;
        return 0xfffd;
    }
    for (unsigned i = 1; i <= k; i++) {
        if ((p[i] & 0xc0) != 0x80) {
            *pp += 1;
            return 0xfffd;
        }
        u = u << 6 | (p[i] & 0x3f);
    }
    if ((k == 2 && u < 0x800) || (k == 3 && (u < 0x10000 || u > 0x10ffff)) ||
        (u >= 0xd800 && u <= 0xdfff)) {
        *pp += 1;
        return 0xfffd;
    }
    *pp += k + 1;
    return u;
}

static int hex4(plot_json *j, unsigned *u, plot_err *err) {
    *u = 0;
    for (int i = 0; i < 4; i++) {
        if (j->p >= j->end) return plot_json_bad(j, err, "a \\u escape needs four hex digits");
        char c = *j->p;
        unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                            : 16;
        if (d == 16) return plot_json_bad(j, err, "a \\u escape needs four hex digits");
        *u = *u << 4 | d;
        j->p++;
    }
    return PLOT_OK;
}

int plot_json_string(plot_json *j, char *buf, size_t cap, plot_err *err) {
    int rc = plot_json_expect(j, '"', "(a string)", err);
    if (rc) return rc;
    size_t n = 0;
    int full = cap == 0;
    for (;;) {
        if (j->p >= j->end) return plot_json_bad(j, err, "a string that does not end");
        unsigned char c = (unsigned char)*j->p;
        if (c == '"') {
            j->p++;
            break;
        }
        if (c < 0x20) return plot_json_bad(j, err, "a control character inside a string");
        if (c != '\\') {
            put_utf8(buf, cap, &n, &full, utf8_next(&j->p, j->end));
            continue;
        }
        j->p++;
        if (j->p >= j->end) return plot_json_bad(j, err, "a string that does not end");
        char e = *j->p++;
        unsigned u;
        switch (e) {
        case '"':
            u = '"';
            break;
        case '\\':
            u = '\\';
            break;
        case '/':
            u = '/';
            break;
        case 'b':
            u = '\b';
            break;
        case 'f':
            u = '\f';
            break;
        case 'n':
            u = '\n';
            break;
        case 'r':
            u = '\r';
            break;
        case 't':
            u = '\t';
            break;
        case 'u':
            if ((rc = hex4(j, &u, err))) return rc;
            if (u >= 0xd800 && u <= 0xdbff && j->end - j->p >= 6 && j->p[0] == '\\' &&
                j->p[1] == 'u') {
                const char *save = j->p;
                unsigned lo;
                j->p += 2;
                if ((rc = hex4(j, &lo, err))) return rc;
                if (lo >= 0xdc00 && lo <= 0xdfff)
                    u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
                else
                    j->p = save; /* a lone high surrogate; the next escape stands alone */
            }
            if (u >= 0xd800 && u <= 0xdfff) u = 0xfffd; /* lone surrogate */
            break;
        default:
            j->p -= 1;
            return plot_json_bad(j, err, "an unknown escape in a string");
        }
        put_utf8(buf, cap, &n, &full, u);
    }
    if (buf && cap) buf[n] = 0;
    return PLOT_OK;
}

/* ---- numbers and literals -------------------------------------------------------------- */

static int is_digit(const plot_json *j) { return j->p < j->end && *j->p >= '0' && *j->p <= '9'; }

static int number(plot_json *j, double *out, plot_err *err) {
    const char *s = j->p;
    if (j->p < j->end && *j->p == '-') j->p++;
    if (!is_digit(j)) return plot_json_bad(j, err, "a number needs a digit");
    if (*j->p == '0')
        j->p++;
    else
        while (is_digit(j))
            j->p++;
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (!is_digit(j)) return plot_json_bad(j, err, "a digit after the decimal point");
        while (is_digit(j))
            j->p++;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
        if (!is_digit(j)) return plot_json_bad(j, err, "a digit in the exponent");
        while (is_digit(j))
            j->p++;
    }
    char t[128];
    size_t k = (size_t)(j->p - s);
    if (k >= sizeof t) {
        j->p = s;
        return plot_json_bad(j, err, "a number of more than 127 characters");
    }
    memcpy(t, s, k);
    t[k] = 0;
    *out = strtod(t, NULL); /* the grammar above is a subset of strtod's */
    return PLOT_OK;
}

static int literal(plot_json *j, const char *word, plot_err *err) {
    size_t k = strlen(word);
    if ((size_t)(j->end - j->p) < k || memcmp(j->p, word, k) != 0)
        return plot_json_bad(j, err, "expected a value");
    j->p += k;
    return PLOT_OK;
}

/* ---- values ----------------------------------------------------------------------------- */

/* One value at depth (the record's members are at 2). With r set, scalars are stored in r under
 * key; an object at depth 2 has its members stored as "key.member"; deeper ones are only read. */
static int value(plot_json *j, plot_rec *r, const char *key, int depth, plot_err *err);

static void put_field(plot_rec *r, const char *key, int kind, double num, const char *str) {
    if (!r || r->n >= PLOT_FIELDS) return;
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->f[i].key, key)) return; /* a duplicate key: the first one stands */
    plot_field *f = &r->f[r->n++];
    snprintf(f->key, sizeof f->key, "%s", key);
    f->kind = kind, f->num = num;
    snprintf(f->str, sizeof f->str, "%s", str ? str : "");
}

static int object(plot_json *j, plot_rec *r, const char *prefix, int depth, plot_err *err) {
    int rc = plot_json_expect(j, '{', "(an object)", err);
    if (rc) return rc;
    plot_json_ws(j);
    if (j->p < j->end && *j->p == '}') {
        j->p++;
        return PLOT_OK;
    }
    for (;;) {
        char k[PLOT_KEY_MAX], full[2 * PLOT_KEY_MAX + 2];
        plot_json_ws(j);
        if (j->p >= j->end || *j->p != '"')
            return plot_json_bad(j, err, "expected a member's name");
        if ((rc = plot_json_string(j, k, sizeof k, err))) return rc;
        if ((rc = plot_json_expect(j, ':', "after a member's name", err))) return rc;
        if (prefix)
            snprintf(full, sizeof full, "%s.%s", prefix, k);
        else
            snprintf(full, sizeof full, "%s", k);
        if ((rc = value(j, r, full, depth + 1, err))) return rc;
        plot_json_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == '}') {
            j->p++;
            return PLOT_OK;
        }
        return plot_json_bad(j, err, "expected ',' or '}' in an object");
    }
}

static int array(plot_json *j, int depth, plot_err *err) {
    int rc = plot_json_expect(j, '[', "(an array)", err);
    if (rc) return rc;
    plot_json_ws(j);
    if (j->p < j->end && *j->p == ']') {
        j->p++;
        return PLOT_OK;
    }
    for (;;) {
        if ((rc = value(j, NULL, NULL, depth + 1, err))) return rc;
        plot_json_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == ']') {
            j->p++;
            return PLOT_OK;
        }
        return plot_json_bad(j, err, "expected ',' or ']' in an array");
    }
}

static int value(plot_json *j, plot_rec *r, const char *key, int depth, plot_err *err) {
    if (depth > PLOT_DEPTH) return plot_json_bad(j, err, "nested more than 64 deep");
    plot_json_ws(j);
    if (j->p >= j->end) return plot_json_bad(j, err, "expected a value");
    char c = *j->p;
    int rc;
    double v = 0;
    if (c == '{') return object(j, depth == 2 ? r : NULL, depth == 2 ? key : NULL, depth, err);
    if (c == '[') return array(j, depth, err);
    if (c == '"') {
        char s[PLOT_STR_MAX];
        if ((rc = plot_json_string(j, s, sizeof s, err))) return rc;
        put_field(r, key, PLOT_J_STR, 0, s);
        return PLOT_OK;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        if ((rc = number(j, &v, err))) return rc;
        put_field(r, key, PLOT_J_NUM, v, NULL);
        return PLOT_OK;
    }
    if (c == 't' || c == 'f') {
        if ((rc = literal(j, c == 't' ? "true" : "false", err))) return rc;
        put_field(r, key, PLOT_J_BOOL, c == 't', NULL);
        return PLOT_OK;
    }
    if ((rc = literal(j, "null", err))) return rc;
    put_field(r, key, PLOT_J_NULL, 0, NULL);
    return PLOT_OK;
}

int plot_json_record(plot_json *j, plot_rec *r, plot_err *err) {
    r->n = 0;
    return object(j, r, NULL, 1, err);
}

int plot_json_skip(plot_json *j, plot_err *err) { return value(j, NULL, NULL, 1, err); }

const plot_field *plot_rec_get(const plot_rec *r, const char *key) {
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->f[i].key, key)) return &r->f[i];
    return NULL;
}

int plot_rec_num(const plot_rec *r, const char *key, double *out) {
    const plot_field *f = plot_rec_get(r, key);
    if (!f || f->kind != PLOT_J_NUM || !isfinite(f->num)) return 0;
    *out = f->num;
    return 1;
}

const char *plot_rec_str(const plot_rec *r, const char *key) {
    const plot_field *f = plot_rec_get(r, key);
    return f && f->kind == PLOT_J_STR ? f->str : NULL;
}
