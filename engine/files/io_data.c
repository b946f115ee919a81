/* io_data.c - token streams (llm.c shards, plain text as bytes, memory) and the batch loader.
 *
 * A stream is a list of segments, the concatenation of its files in sorted order: llm.c shards
 * are memory-mapped (a 10B-token dataset is not copied into memory; the page cache serves it),
 * text and in-memory tokens are held as uint32 arrays. Every shard's header is validated before
 * a token is used. A stream is read-only after opening, so several threads may read one. The
 * loader is stateless apart from a cached permutation: step s always reads the same window (see
 * ct_engine_io.h), so resuming is storing the step index and data-parallel workers can read any
 * contiguous share of a step's rows (one loader per thread). */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_engine_io.h"
#include "ct_engine_rng.h"

typedef struct data_seg {
    char *path;
    size_t start;               /* first token of this segment in the stream */
    size_t count;               /* tokens */
    int width;                  /* 2 or 4 bytes per stored token */
    const unsigned char *tok;   /* the tokens (into map, or owned) */
    void *map;                  /* mmap of the whole file, or NULL */
    size_t map_len;
    uint32_t *owned;            /* owned tokens, or NULL */
} data_seg;

struct ct_data {
    char name[1024];
    data_seg *segs;
    int nsegs;
    size_t n;     /* tokens in the stream (may be less than the segments hold after a split) */
    uint32_t max; /* largest token among the first n */
};

void ct_data_free(ct_data *d) {
    if (!d) return;
    for (int i = 0; i < d->nsegs; i++) {
        free(d->segs[i].path);
        free(d->segs[i].owned);
        if (d->segs[i].map) munmap(d->segs[i].map, d->segs[i].map_len);
    }
    free(d->segs);
    free(d);
}

static ct_status data_new(ct_data **out, const char *name, ct_err *err) {
    ct_data *d = (ct_data *)ct_calloc(1, sizeof *d);
    if (!d) return CT_ERR(err, CT_ERR_NOMEM, "no memory for a token stream");
    snprintf(d->name, sizeof d->name, "%s", name ? name : "(memory)");
    *out = d;
    return CT_OK;
}

/* Append a segment (takes ownership of map / owned on success and on failure). */
static ct_status data_add_seg(ct_data *d, const char *path, data_seg seg, ct_err *err) {
    data_seg *s = (data_seg *)ct_realloc(d->segs, (size_t)(d->nsegs + 1) * sizeof *s);
    if (s) d->segs = s;
    seg.path = s ? ct_strdup(path) : NULL;
    if (!s || !seg.path) {
        free(seg.owned);
        if (seg.map) munmap(seg.map, seg.map_len);
        return CT_ERR(err, CT_ERR_NOMEM, "no memory for the segment list of %s", d->name);
    }
    seg.start = d->n;
    d->segs[d->nsegs++] = seg;
    d->n += seg.count;
    return CT_OK;
}

static inline uint32_t seg_token(const data_seg *s, size_t i) {
    if (s->width == 4) {
        uint32_t v;
        memcpy(&v, s->tok + 4 * i, 4);
        return v;
    }
    uint16_t v;
    memcpy(&v, s->tok + 2 * i, 2);
    return v;
}

/* Index of the segment holding stream position i (i < total held). */
static int seg_of(const ct_data *d, size_t i) {
    int lo = 0, hi = d->nsegs - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (d->segs[mid].start <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

size_t ct_data_read(const ct_data *d, size_t start, size_t n, uint32_t *out) {
    if (start >= d->n) return 0;
    if (n > d->n - start) n = d->n - start;
    size_t done = 0;
    int k = seg_of(d, start);
    while (done < n && k < d->nsegs) {
        const data_seg *s = &d->segs[k];
        size_t off = start + done - s->start, take = s->count - off;
        if (take > n - done) take = n - done;
        if (s->width == 4) memcpy(out + done, s->tok + 4 * off, 4 * take);
        else
            for (size_t i = 0; i < take; i++) out[done + i] = seg_token(s, off + i);
        done += take;
        k++;
    }
    return done;
}

/* Reads n tokens at start as ints (the loader's rows). */
static void data_read_int(const ct_data *d, size_t start, size_t n, int *out) {
    size_t done = 0;
    int k = seg_of(d, start);
    while (done < n && k < d->nsegs) {
        const data_seg *s = &d->segs[k];
        size_t off = start + done - s->start, take = s->count - off;
        if (take > n - done) take = n - done;
        for (size_t i = 0; i < take; i++) out[done + i] = (int)seg_token(s, off + i);
        done += take;
        k++;
    }
}

static void data_update_max(ct_data *d) {
    d->max = 0;
    for (int k = 0; k < d->nsegs; k++) {
        const data_seg *s = &d->segs[k];
        if (s->start >= d->n) break;
        size_t cnt = d->n - s->start < s->count ? d->n - s->start : s->count;
        uint32_t mx = d->max;
        if (s->width == 2) {
            for (size_t i = 0; i < cnt; i++) {
                uint32_t v = seg_token(s, i);
                if (v > mx) mx = v;
            }
        } else {
            for (size_t i = 0; i < cnt; i++) {
                uint32_t v = seg_token(s, i);
                if (v > mx) mx = v;
            }
        }
        d->max = mx;
    }
}

/* Map one llm.c shard and append it after validating its header against the file size. */
static ct_status data_append_shard(ct_data *d, const char *path, ct_err *err) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return CT_ERR(err, CT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return CT_ERR(err, CT_ERR_IO, "%s is not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    if (size < CT_SHARD_HEADER_INTS * 4) {
        close(fd);
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: too short for an llm.c token shard (%zu bytes; the header alone is "
                      "1024)",
                      path, size);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED)
        return CT_ERR(err, CT_ERR_IO, "cannot map %s: %s", path, strerror(e));
    ct_status st = CT_OK;
    int32_t h[3];
    memcpy(h, map, sizeof h);
    int width = 0;
    if (h[0] == CT_SHARD_MAGIC_U16) width = 2;
    else if (h[0] == CT_SHARD_MAGIC_U32) width = 4;
    if (!width) {
        st = CT_ERR(err, CT_ERR_FORMAT,
                    "%s: bad magic %d (an llm.c token shard starts with %d for uint16 tokens or "
                    "%d for uint32); for plain text use --text",
                    path, h[0], CT_SHARD_MAGIC_U16, CT_SHARD_MAGIC_U32);
        goto fail;
    }
    int want_version = width == 2 ? 1 : 7;
    if (h[1] != want_version) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s: unsupported shard version %d (magic %d needs %d)",
                    path, h[1], h[0], want_version);
        goto fail;
    }
    if (h[2] < 0) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s: negative token count %d in the header", path, h[2]);
        goto fail;
    }
    size_t ntok = (size_t)(uint32_t)h[2];
    size_t want = CT_SHARD_HEADER_INTS * 4 + ntok * (size_t)width;
    if (size != want) {
        st = CT_ERR(err, CT_ERR_FORMAT,
                    "%s: the header says %zu tokens of %d bytes (file of %zu bytes) but the file "
                    "has %zu bytes (%s)",
                    path, ntok, width, want, size, size < want ? "truncated" : "trailing data");
        goto fail;
    }
    data_seg seg;
    memset(&seg, 0, sizeof seg);
    seg.count = ntok;
    seg.width = width;
    seg.map = map;
    seg.map_len = size;
    seg.tok = (const unsigned char *)map + CT_SHARD_HEADER_INTS * 4;
    return data_add_seg(d, path, seg, err);
fail:
    munmap(map, size);
    return st;
}

ct_status ct_data_open_shards(ct_data **out, const char *pattern, ct_err *err) {
    *out = NULL;
    if (!pattern || !*pattern) return CT_ERR(err, CT_ERR_ARG, "empty data pattern");
    ct_status st = CT_OK;
    ct_data *d = NULL;
    glob_t g;
    memset(&g, 0, sizeof g);
    int rc = glob(pattern, 0, NULL, &g); /* glob sorts the names */
    if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
        st = CT_ERR(err, CT_ERR_NOT_FOUND, "no file matches the data pattern '%s'", pattern);
        goto cleanup;
    }
    if (rc != 0) {
        st = CT_ERR(err, CT_ERR_IO, "cannot expand the data pattern '%s' (glob error %d)",
                    pattern, rc);
        goto cleanup;
    }
    CT_CHECK(data_new(&d, pattern, err));
    for (size_t i = 0; i < g.gl_pathc; i++) CT_CHECK(data_append_shard(d, g.gl_pathv[i], err));
    if (d->n < 2) {
        st = CT_ERR(err, CT_ERR_FORMAT, "'%s' holds %zu tokens; at least 2 are needed", pattern,
                    d->n);
        goto cleanup;
    }
    data_update_max(d);
    *out = d;
    d = NULL;
cleanup:
    globfree(&g);
    ct_data_free(d);
    return st;
}

/* A stream of one owned segment (takes `tok`). */
static ct_status data_from_owned(ct_data **out, uint32_t *tok, size_t n, const char *name,
                                 ct_err *err) {
    *out = NULL;
    if (n < 2) {
        free(tok);
        return CT_ERR(err, CT_ERR_FORMAT, "%s holds %zu tokens; at least 2 are needed",
                      name ? name : "(memory)", n);
    }
    ct_data *d = NULL;
    ct_status st = data_new(&d, name, err);
    if (st != CT_OK) {
        free(tok);
        return st;
    }
    data_seg seg;
    memset(&seg, 0, sizeof seg);
    seg.count = n;
    seg.width = 4;
    seg.owned = tok;
    seg.tok = (const unsigned char *)tok;
    st = data_add_seg(d, d->name, seg, err);
    if (st != CT_OK) {
        ct_data_free(d);
        return st;
    }
    data_update_max(d);
    *out = d;
    return CT_OK;
}

ct_status ct_data_open_bytes(ct_data **out, const void *bytes, size_t n, const char *name,
                             ct_err *err) {
    *out = NULL;
    uint32_t *t = (uint32_t *)ct_malloc((n ? n : 1) * sizeof *t);
    if (!t) return CT_ERR(err, CT_ERR_NOMEM, "no memory for %zu tokens of %s", n, name);
    const unsigned char *p = (const unsigned char *)bytes;
    for (size_t i = 0; i < n; i++) t[i] = p[i];
    return data_from_owned(out, t, n, name, err);
}

ct_status ct_data_open_text(ct_data **out, const char *path, ct_err *err) {
    *out = NULL;
    unsigned char *buf = NULL;
    size_t n = 0;
    ct_status st = ct_file_read_all(path, &buf, &n, err);
    if (st == CT_OK) st = ct_data_open_bytes(out, buf, n, path, err);
    free(buf);
    return st;
}

ct_status ct_data_open_tokens(ct_data **out, const uint32_t *tokens, size_t n, const char *name,
                              ct_err *err) {
    *out = NULL;
    uint32_t *t = (uint32_t *)ct_malloc((n ? n : 1) * sizeof *t);
    if (!t) return CT_ERR(err, CT_ERR_NOMEM, "no memory for %zu tokens of %s", n, name);
    if (n) memcpy(t, tokens, n * sizeof *t);
    return data_from_owned(out, t, n, name, err);
}

ct_status ct_data_split_tail(ct_data *d, double frac, ct_data **val, ct_err *err) {
    *val = NULL;
    if (!(frac > 0 && frac < 1))
        return CT_ERR(err, CT_ERR_ARG, "validation fraction %g is not in (0, 1)", frac);
    size_t nval = (size_t)((double)d->n * frac);
    if (nval < 2 || d->n - nval < 2)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s (%zu tokens) is too short to hold out %g of it for validation",
                      d->name, d->n, frac);
    size_t head = d->n - nval;
    uint32_t *t = (uint32_t *)ct_malloc(nval * sizeof *t);
    if (!t)
        return CT_ERR(err, CT_ERR_NOMEM, "no memory to copy %zu validation tokens of %s", nval,
                      d->name);
    ct_data_read(d, head, nval, t);
    char name[1100];
    snprintf(name, sizeof name, "%s (last %.3g)", d->name, frac);
    ct_status st = data_from_owned(val, t, nval, name, err);
    if (st != CT_OK) return st;
    d->n = head;
    data_update_max(d);
    return CT_OK;
}

size_t ct_data_count(const ct_data *d) { return d->n; }
uint32_t ct_data_max_token(const ct_data *d) { return d->max; }
const char *ct_data_name(const ct_data *d) { return d->name; }
int ct_data_files(const ct_data *d) { return d->nsegs; }

ct_status ct_data_check_vocab(const ct_data *d, int vocab, ct_err *err) {
    if (vocab <= 0) return CT_ERR(err, CT_ERR_ARG, "vocabulary size %d is not positive", vocab);
    if (d->max < (uint32_t)vocab) return CT_OK;
    for (int k = 0; k < d->nsegs; k++) {
        const data_seg *s = &d->segs[k];
        for (size_t i = 0; i < s->count && s->start + i < d->n; i++) {
            uint32_t v = seg_token(s, i);
            if (v < (uint32_t)vocab) continue;
            return CT_ERR(err, CT_ERR_FORMAT,
                          "token %u at position %zu of %s is outside the vocabulary of %d (the "
                          "largest token in the data is %u; a larger --vocab or another model is "
                          "needed)",
                          v, i, s->path, vocab, d->max);
        }
    }
    return CT_OK;
}

ct_status ct_data_write_shard(const char *path, const uint32_t *tokens, size_t n, int wide,
                              ct_err *err) {
    if (n > INT32_MAX) return CT_ERR(err, CT_ERR_ARG, "%zu tokens do not fit one shard", n);
    for (size_t i = 0; i < n && !wide; i++)
        if (tokens[i] > 0xFFFF) wide = 1;
    int32_t h[CT_SHARD_HEADER_INTS] = {0};
    h[0] = wide ? CT_SHARD_MAGIC_U32 : CT_SHARD_MAGIC_U16;
    h[1] = wide ? 7 : 1;
    h[2] = (int32_t)n;
    ct_atomic_file af;
    ct_status st = CT_OK;
    CT_CHECK(ct_atomic_file_open(&af, path, err));
    CT_CHECK(ct_atomic_file_write(&af, h, sizeof h, err));
    if (wide) {
        CT_CHECK(ct_atomic_file_write(&af, tokens, n * 4, err));
    } else {
        for (size_t i = 0; i < n; i++) {
            uint16_t v = (uint16_t)tokens[i];
            CT_CHECK(ct_atomic_file_write(&af, &v, 2, err));
        }
    }
    return ct_atomic_file_commit(&af, err);
cleanup:
    ct_atomic_file_abort(&af);
    return st;
}

/* ---------------------------------------------------------------- the loader */

struct ct_loader {
    const ct_data *d;
    int B, T, accum, shuffle;
    uint64_t seed;
    size_t N;         /* tokens per step */
    int64_t windows;  /* W */
    int64_t epoch;    /* epoch whose permutation is in perm, -1 none */
    int64_t *perm;    /* W entries when shuffling */
};

ct_status ct_loader_create(ct_loader **out, const ct_data *d, int B, int T, int accum, int shuffle,
                           uint64_t seed, ct_err *err) {
    *out = NULL;
    if (B <= 0 || T <= 0 || accum <= 0)
        return CT_ERR(err, CT_ERR_ARG, "loader shape B=%d T=%d accumulation=%d must be positive",
                      B, T, accum);
    if (shuffle != 0 && shuffle != 1)
        return CT_ERR(err, CT_ERR_ARG, "shuffle must be 0 or 1 (got %d)", shuffle);
    size_t N = (size_t)B * (size_t)T * (size_t)accum;
    if (d->n < N + 1)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s holds %zu tokens, fewer than one step needs (%d x %d x %d + 1 = %zu); "
                      "use a smaller --batch/--seq/--total-batch or more data",
                      d->name, d->n, accum, B, T, N + 1);
    ct_loader *ld = (ct_loader *)ct_calloc(1, sizeof *ld);
    if (!ld) return CT_ERR(err, CT_ERR_NOMEM, "no memory for a loader");
    ld->d = d;
    ld->B = B;
    ld->T = T;
    ld->accum = accum;
    ld->shuffle = shuffle;
    ld->seed = seed;
    ld->N = N;
    ld->windows = (int64_t)((d->n - 1) / N);
    ld->epoch = -1;
    if (shuffle) {
        ld->perm = (int64_t *)ct_malloc((size_t)ld->windows * sizeof *ld->perm);
        if (!ld->perm) {
            long long w = (long long)ld->windows;
            free(ld);
            return CT_ERR(err, CT_ERR_NOMEM, "no memory for a permutation of %lld windows", w);
        }
    }
    *out = ld;
    return CT_OK;
}

void ct_loader_free(ct_loader *ld) {
    if (!ld) return;
    free(ld->perm);
    free(ld);
}

int64_t ct_loader_windows(const ct_loader *ld) { return ld->windows; }

size_t ct_loader_window_start(ct_loader *ld, int64_t step) {
    if (step < 0) step = 0;
    int64_t W = ld->windows, e = step / W, i = step % W, w = i;
    if (ld->shuffle) {
        if (ld->epoch != e) {
            /* Fisher-Yates over the W windows with a generator seeded by (seed, epoch). */
            uint64_t s = ld->seed ^ (0xD1B54A32D192ED03ull * (uint64_t)(e + 1));
            for (int64_t k = 0; k < W; k++) ld->perm[k] = k;
            for (int64_t k = W - 1; k > 0; k--) {
                int64_t j = (int64_t)(ct_splitmix64_next(&s) % (uint64_t)(k + 1));
                int64_t t = ld->perm[k];
                ld->perm[k] = ld->perm[j];
                ld->perm[j] = t;
            }
            ld->epoch = e;
        }
        w = ld->perm[i];
    }
    return (size_t)w * ld->N;
}

ct_status ct_loader_rows(ct_loader *ld, int64_t step, int row0, int nrows, int *inputs,
                         int *targets, ct_err *err) {
    int rows = ld->B * ld->accum;
    if (step < 0 || row0 < 0 || nrows < 0 || row0 + nrows > rows)
        return CT_ERR(err, CT_ERR_ARG, "rows [%d, %d) of step %lld are outside the %d rows of a step",
                      row0, row0 + nrows, (long long)step, rows);
    size_t base = ct_loader_window_start(ld, step) + (size_t)row0 * ld->T;
    size_t n = (size_t)nrows * ld->T;
    data_read_int(ld->d, base, n, inputs);
    if (targets) data_read_int(ld->d, base + 1, n, targets);
    return CT_OK;
}
