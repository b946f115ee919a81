/* io_tokenizer.c - decoding token ids to bytes: llm.c's GPT-2 tokenizer file (a 256-uint32 header:
 * magic 20240328, version 1 or 2, vocabulary size, and in version 2 the end-of-text token; then
 * per token a length byte and that many bytes), or the trivial byte vocabulary. Decoding only;
 * encoding text into GPT-2 tokens is done by llm.c's Python tools. */
#include <stdlib.h>
#include <string.h>

#include "ct_engine_io.h"

struct ct_tokenizer {
    int vocab;
    int eot;
    char **piece;
    size_t *len;
};

void ct_tokenizer_free(ct_tokenizer *t) {
    if (!t) return;
    if (t->piece)
        for (int i = 0; i < t->vocab; i++) free(t->piece[i]);
    free(t->piece);
    free(t->len);
    free(t);
}

static ct_status tok_alloc(ct_tokenizer **out, int vocab, ct_err *err) {
    ct_tokenizer *t = (ct_tokenizer *)ct_calloc(1, sizeof *t);
    if (!t) return CT_ERR(err, CT_ERR_NOMEM, "no memory for a tokenizer");
    t->vocab = vocab;
    t->eot = -1;
    t->piece = (char **)ct_calloc((size_t)vocab, sizeof *t->piece);
    t->len = (size_t *)ct_calloc((size_t)vocab, sizeof *t->len);
    if (!t->piece || !t->len) {
        ct_tokenizer_free(t);
        return CT_ERR(err, CT_ERR_NOMEM, "no memory for a tokenizer of %d tokens", vocab);
    }
    *out = t;
    return CT_OK;
}

ct_status ct_tokenizer_bytes(ct_tokenizer **out, ct_err *err) {
    *out = NULL;
    ct_tokenizer *t = NULL;
    ct_status st = tok_alloc(&t, 256, err);
    if (st != CT_OK) return st;
    for (int i = 0; i < 256; i++) {
        t->piece[i] = (char *)ct_malloc(2);
        if (!t->piece[i]) {
            ct_tokenizer_free(t);
            return CT_ERR(err, CT_ERR_NOMEM, "no memory");
        }
        t->piece[i][0] = (char)i;
        t->piece[i][1] = 0;
        t->len[i] = 1;
    }
    *out = t;
    return CT_OK;
}

ct_status ct_tokenizer_open(ct_tokenizer **out, const char *path, ct_err *err) {
    *out = NULL;
    ct_status st = CT_OK;
    unsigned char *buf = NULL;
    size_t n = 0;
    ct_tokenizer *t = NULL;
    CT_CHECK(ct_file_read_all(path, &buf, &n, err));
    if (n < 1024) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s: too short for an llm.c tokenizer file (%zu bytes)",
                    path, n);
        goto cleanup;
    }
    uint32_t h[4];
    memcpy(h, buf, sizeof h);
    if (h[0] != CT_TOKENIZER_MAGIC) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s: bad magic %u; an llm.c tokenizer file starts with %d",
                    path, h[0], CT_TOKENIZER_MAGIC);
        goto cleanup;
    }
    if (h[1] != 1 && h[1] != 2) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s: tokenizer version %u is not supported (1 or 2)", path,
                    h[1]);
        goto cleanup;
    }
    if (h[2] == 0 || h[2] > (1u << 24)) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s: implausible vocabulary size %u", path, h[2]);
        goto cleanup;
    }
    /* every token takes at least 2 bytes (length, one byte): refuse a header that promises more
     * tokens than the file can hold before allocating for them (a 1 KiB file could otherwise
     * make us allocate 256 MiB of tables) */
    if (h[2] > (n - 1024) / 2) {
        st = CT_ERR(err, CT_ERR_FORMAT,
                    "%s: the header says %u tokens, but the %zu bytes after it hold at most %zu "
                    "(truncated?)",
                    path, h[2], n - 1024, (n - 1024) / 2);
        goto cleanup;
    }
    CT_CHECK(tok_alloc(&t, (int)h[2], err));
    if (h[1] == 2) {
        if (h[3] >= h[2]) {
            st = CT_ERR(err, CT_ERR_FORMAT, "%s: end-of-text token %u outside the vocabulary %u",
                        path, h[3], h[2]);
            goto cleanup;
        }
        t->eot = (int)h[3];
    }
    size_t at = 1024;
    for (int i = 0; i < t->vocab; i++) {
        if (at >= n) {
            st = CT_ERR(err, CT_ERR_FORMAT, "%s: truncated at token %d of %d", path, i, t->vocab);
            goto cleanup;
        }
        size_t len = buf[at++];
        if (len == 0 || at + len > n) {
            st = CT_ERR(err, CT_ERR_FORMAT, "%s: %s at token %d", path,
                        len == 0 ? "zero-length token" : "truncated", i);
            goto cleanup;
        }
        t->piece[i] = (char *)ct_malloc(len + 1);
        if (!t->piece[i]) {
            st = CT_ERR(err, CT_ERR_NOMEM, "no memory");
            goto cleanup;
        }
        memcpy(t->piece[i], buf + at, len);
        t->piece[i][len] = 0;
        t->len[i] = len;
        at += len;
    }
    if (at != n) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s: %zu bytes of trailing data after %d tokens", path,
                    n - at, t->vocab);
        goto cleanup;
    }
    *out = t;
    t = NULL;
cleanup:
    ct_tokenizer_free(t);
    free(buf);
    return st;
}

int ct_tokenizer_vocab(const ct_tokenizer *t) { return t->vocab; }
int ct_tokenizer_eot(const ct_tokenizer *t) { return t->eot; }

const char *ct_tokenizer_decode(const ct_tokenizer *t, int id, size_t *len) {
    if (id < 0 || id >= t->vocab || !t->piece[id]) {
        if (len) *len = 0;
        return NULL;
    }
    if (len) *len = t->len[id];
    return t->piece[id];
}

ct_status ct_tokenizer_write(const char *path, const char *const *pieces, const size_t *lens,
                             int vocab, int eot, ct_err *err) {
    ct_status st = CT_OK;
    uint32_t h[256] = {0};
    h[0] = CT_TOKENIZER_MAGIC;
    h[1] = eot >= 0 ? 2 : 1;
    h[2] = (uint32_t)vocab;
    h[3] = eot >= 0 ? (uint32_t)eot : 0;
    ct_atomic_file af;
    CT_CHECK(ct_atomic_file_open(&af, path, err));
    st = ct_atomic_file_write(&af, h, sizeof h, err);
    for (int i = 0; i < vocab && st == CT_OK; i++) {
        if (lens[i] == 0 || lens[i] > 255) {
            st = CT_ERR(err, CT_ERR_ARG, "token %d has length %zu (1..255 allowed)", i, lens[i]);
            break;
        }
        unsigned char l = (unsigned char)lens[i];
        st = ct_atomic_file_write(&af, &l, 1, err);
        if (st == CT_OK) st = ct_atomic_file_write(&af, pieces[i], lens[i], err);
    }
    if (st != CT_OK) {
        ct_atomic_file_abort(&af);
        return st;
    }
    return ct_atomic_file_commit(&af, err);
cleanup:
    return st;
}
