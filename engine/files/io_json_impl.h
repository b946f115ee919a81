/* io_json_impl.h - the JSON reader of engine/files (io_json.c), private to the folder: the
 * headers of safetensors files, Hugging Face's config.json and model.safetensors.index.json.
 *
 *     ct_json root;
 *     char why[160];
 *     if (ct__json_parse(text, n, 32, &root, why, sizeof why)) { ...refuse: why... }
 *     const ct_json *v = ct__json_get(&root, "n_layer");
 *     uint64_t x;
 *     if (!v || ct__json_uint(v, 1 << 20, &x)) { ...refuse naming "n_layer"... }
 *     ct__json_free(&root);
 *
 * Strict (RFC 8259): one value with only whitespace around it; numbers in JSON's grammar (no
 * leading zeros, no "+", no NaN); strings with valid escapes, \u escapes decoded to UTF-8 with
 * surrogate pairs joined (a lone surrogate is refused), no raw control characters; an object's
 * keys distinct. Bounded: the caller gives the nesting limit, and the text's length bounds
 * everything else (a value takes at least one byte). */
#ifndef CT_IO_JSON_IMPL_H
#define CT_IO_JSON_IMPL_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    CT_JSON_NULL,
    CT_JSON_BOOL,
    CT_JSON_NUM,
    CT_JSON_STR,
    CT_JSON_ARR,
    CT_JSON_OBJ
} ct_json_type;

typedef struct ct_json {
    ct_json_type t;
    int is_int;            /* CT_JSON_NUM written as an integer (no fraction, no exponent) */
    double num;            /* CT_JSON_NUM; CT_JSON_BOOL: 1 or 0 */
    char *str;             /* CT_JSON_STR: NUL-ended UTF-8 (a \u0000 is refused) */
    struct ct_json *items; /* CT_JSON_ARR, CT_JSON_OBJ: the n values */
    char **keys;           /* CT_JSON_OBJ: the n keys */
    int n, cap;
} ct_json;

/* Parse text[0..n). 0 on success (*out owned: ct__json_free); -1 with `why` ("what at byte N")
 * and *out empty. */
int ct__json_parse(const char *text, size_t n, int max_depth, ct_json *out, char *why,
                   size_t why_len);
void ct__json_free(ct_json *v); /* NULL-safe; leaves *v empty */
/* The value of `key` in an object (NULL when absent or `obj` is not an object). */
const ct_json *ct__json_get(const ct_json *obj, const char *key);
/* An integer literal in [0, max] (max <= 2^53) into *out: 0, else -1. */
int ct__json_uint(const ct_json *v, uint64_t max, uint64_t *out);
/* "a string", "a number", ... for messages. */
const char *ct__json_type_name(ct_json_type t);

#endif /* CT_IO_JSON_IMPL_H */
