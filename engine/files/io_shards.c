/* io_shards.c - the sharded checkpoint (ct_engine_io.h): one shard file per worker holding the
 * table ranges it owns of the parameters and Adam's m and v, and a manifest naming every range,
 * every shard's size and CRC-32s (whole and per chunk). The manifest is written last, so a
 * checkpoint exists only once every shard is on disk; a reader takes any table range of any
 * array, opening only the shards that hold it and reading only the chunks that cover it, each
 * checked against its CRC. Nothing here knows workers or layouts beyond the numbers stored. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io_impl.h"

#define SHARD_HEAD 40 /* magic[8], u32 version, u32 worker, i64 step, u64 payload bytes, u64 0 */
#define MAX_SHARDS (1 << 20)

typedef struct shard_rec {
    uint64_t bytes; /* payload */
    uint32_t crc;   /* of the whole payload */
    uint32_t nchunks;
    uint64_t chunk0; /* its first CRC in CHUNKS */
} shard_rec;

typedef struct range_rec {
    uint32_t shard, array;
    uint64_t table_off, count, shard_off; /* floats */
} range_rec;

struct ct_shard_set {
    char prefix[1100]; /* the manifest's path without ".bin": shards are prefix.shard_<k> */
    int64_t step;
    size_t np;
    int32_t layout[8]; /* dp tp pp zero ep workers chunk_floats 0 */
    int nshards;
    shard_rec *shards;
    uint32_t *chunks;
    size_t nchunks;
    range_rec *ranges; /* sorted by (array, table_off), tiling [0, np) per array */
    size_t nranges;
    size_t first[4]; /* ranges of array a: [first[a], first[a+1]) */
};

static void prefix_of(char *out, size_t len, const char *manifest) {
    size_t n = strlen(manifest);
    if (n >= 4 && !strcmp(manifest + n - 4, ".bin")) n -= 4;
    snprintf(out, len, "%.*s", (int)n, manifest);
}

void ct_shard_path(char *out, size_t len, const char *manifest, int worker) {
    char pre[1100];
    prefix_of(pre, sizeof pre, manifest);
    snprintf(out, len, "%s.shard_%05d", pre, worker);
}

ct_status ct_shard_check_visible(const char *path, int worker, uint64_t bytes, ct_err *err) {
    struct stat sb;
    int found = stat(path, &sb) == 0;
    if (found && (uint64_t)sb.st_size == SHARD_HEAD + bytes) return CT_OK;
    return CT_ERR(err, CT_ERR_IO,
                  "%s: worker %d wrote its shard, but worker 0 %s: a sharded checkpoint needs "
                  "--save DIR on a file system every worker shares (--save-format gathered "
                  "writes one file, from worker 0)",
                  path, worker, found ? "sees another size" : "does not see it");
}

void ct_shard_desc_release(ct_shard_desc *d) {
    if (!d) return;
    free(d->chunk_crc);
    d->chunk_crc = NULL;
    d->nchunks = 0;
}

ct_status ct_shard_write(const char *path, int worker, int64_t step, const float *payload, size_t n,
                         ct_shard_desc *d, ct_err *err) {
    memset(d, 0, sizeof *d);
    ct_status st = CT_OK;
    ct_atomic_file af;
    memset(&af, 0, sizeof af);
    size_t nch = (n + CT_SHARD_CHUNK_FLOATS - 1) / CT_SHARD_CHUNK_FLOATS;
    d->chunk_crc = (uint32_t *)ct_malloc((nch ? nch : 1) * sizeof(uint32_t));
    if (!d->chunk_crc)
        return CT_ERR(err, CT_ERR_NOMEM, "%s: no memory for %zu chunk CRCs", path, nch);
    d->nchunks = (uint32_t)nch;
    d->bytes = (uint64_t)n * sizeof(float);
    unsigned char head[SHARD_HEAD];
    memset(head, 0, sizeof head);
    uint32_t vw[2] = {1, (uint32_t)worker};
    memcpy(head, CT_SHARD_MAGIC, 8);
    memcpy(head + 8, vw, 8);
    memcpy(head + 16, &step, 8);
    memcpy(head + 24, &d->bytes, 8);
    CT_CHECK(ct_atomic_file_open(&af, path, err));
    CT_CHECK(ct_atomic_file_write(&af, head, sizeof head, err));
    uint32_t crc = 0;
    for (size_t c = 0; c < nch; c++) {
        size_t a = c * CT_SHARD_CHUNK_FLOATS;
        size_t k = n - a < CT_SHARD_CHUNK_FLOATS ? n - a : CT_SHARD_CHUNK_FLOATS;
        d->chunk_crc[c] = ct_crc32(0, payload + a, k * sizeof(float));
        crc = ct_crc32(crc, payload + a, k * sizeof(float));
        CT_CHECK(ct_atomic_file_write(&af, payload + a, k * sizeof(float), err));
    }
    d->crc = crc;
    return ct_atomic_file_commit(&af, err);
cleanup:
    ct_atomic_file_abort(&af);
    ct_shard_desc_release(d);
    return st;
}

static int range_order(const void *a, const void *b) {
    const range_rec *x = a, *y = b;
    if (x->array != y->array) return x->array < y->array ? -1 : 1;
    return x->table_off < y->table_off ? -1 : x->table_off > y->table_off;
}

/* The ranges (sorted) tile [0, np) of each of the three arrays and lie inside their shards;
 * first[] set. The first problem is named. */
static ct_status ranges_check(const char *path, range_rec *r, size_t nr, const shard_rec *sh,
                              int nshards, size_t np, size_t first[4], ct_err *err) {
    size_t k = 0;
    for (uint32_t a = 0; a < 3; a++) {
        first[a] = k;
        uint64_t at = 0;
        for (; k < nr && r[k].array == a; k++) {
            if (r[k].shard >= (uint32_t)nshards || r[k].count == 0)
                return CT_ERR(err, CT_ERR_FORMAT,
                              "%s: range %zu names shard %u of %d (or is empty)", path, k,
                              r[k].shard, nshards);
            if (r[k].table_off != at)
                return CT_ERR(err, CT_ERR_FORMAT,
                              "%s: the ranges of array %u do not tile the model: element %llu is "
                              "%s",
                              path, a,
                              (unsigned long long)(r[k].table_off < at ? r[k].table_off : at),
                              r[k].table_off < at ? "stored twice" : "missing");
            uint64_t sfl = sh[r[k].shard].bytes / sizeof(float);
            if (r[k].count > np - at || r[k].shard_off > sfl || r[k].count > sfl - r[k].shard_off)
                return CT_ERR(err, CT_ERR_FORMAT,
                              "%s: range %zu (%llu floats) lies outside the model or its shard %u",
                              path, k, (unsigned long long)r[k].count, r[k].shard);
            at += r[k].count;
        }
        if (at != np)
            return CT_ERR(err, CT_ERR_FORMAT,
                          "%s: the ranges of array %u cover %llu of the model's %zu elements", path,
                          a, (unsigned long long)at, np);
    }
    first[3] = k;
    if (k != nr)
        return CT_ERR(err, CT_ERR_FORMAT, "%s: range %zu names array %u (0-2 exist)", path, k,
                      r[k].array);
    return CT_OK;
}

ct_status ct_shards_manifest_write(const char *path, const ct_checkpoint *head,
                                   const int32_t layout[5], int nshards, const ct_shard_desc *d,
                                   const ct_shard_range *r, size_t nr, ct_err *err) {
    ct_status st = CT_OK;
    ct_atomic_file af;
    memset(&af, 0, sizeof af);
    shard_rec *sh = NULL;
    range_rec *rr = NULL;
    uint32_t *ch = NULL;
    size_t sizes[CT_GPT_NUM_TENSORS], np = 0, nch = 0, first[4];
    CT_CHECK(ct_gpt_config_check(&head->cfg, "checkpoint config", err));
    np = ct_gpt_param_sizes(&head->cfg, sizes);
    if (np != head->nparams || nshards < 1 || nshards > MAX_SHARDS) {
        st = CT_ERR(err, CT_ERR_ARG,
                    "%s: a manifest of %d shards for %zu parameters (the model "
                    "has %zu)",
                    path, nshards, head->nparams, np);
        goto cleanup;
    }
    sh = (shard_rec *)ct_calloc((size_t)nshards, sizeof *sh);
    rr = (range_rec *)ct_malloc((nr ? nr : 1) * sizeof *rr);
    for (int k = 0; k < nshards; k++)
        nch += d[k].nchunks;
    ch = (uint32_t *)ct_malloc((nch ? nch : 1) * sizeof *ch);
    if (!sh || !rr || !ch) {
        st = CT_ERR(err, CT_ERR_NOMEM, "%s: no memory for the manifest", path);
        goto cleanup;
    }
    for (size_t k = 0, at = 0; k < (size_t)nshards; at += d[k].nchunks, k++) {
        sh[k].bytes = d[k].bytes;
        sh[k].crc = d[k].crc;
        sh[k].nchunks = d[k].nchunks;
        sh[k].chunk0 = (uint64_t)at;
        if (d[k].nchunks) memcpy(ch + at, d[k].chunk_crc, d[k].nchunks * sizeof *ch);
    }
    for (size_t k = 0; k < nr; k++) {
        rr[k].shard = r[k].shard;
        rr[k].array = r[k].array;
        rr[k].table_off = r[k].table_off;
        rr[k].count = r[k].count;
        rr[k].shard_off = r[k].shard_off;
    }
    qsort(rr, nr, sizeof *rr, range_order);
    {
        char what[1200];
        snprintf(what, sizeof what, "%s (to write)", path);
        ct_err why = {0};
        if (ranges_check(what, rr, nr, sh, nshards, np, first, &why) != CT_OK) {
            st = CT_ERR(err, CT_ERR_ARG, "%s", why.msg);
            goto cleanup;
        }
    }
    int32_t lay[8] = {
        layout[0], layout[1], layout[2], layout[3], layout[4], nshards, CT_SHARD_CHUNK_FLOATS, 0};
    CT_CHECK(ct_atomic_file_open(&af, path, err));
    CT_CHECK(
        ct__ckpt_head_write(&af, head, CT_CKPT_VERSION_SHARDED, CT_CKPT_SHARDED_SECTIONS, err));
    CT_CHECK(ct__section_write(&af, "LAYOUT", lay, sizeof lay, err));
    CT_CHECK(ct__section_write(&af, "SHARDS", sh, (size_t)nshards * sizeof *sh, err));
    CT_CHECK(ct__section_write(&af, "CHUNKS", ch, nch * sizeof *ch, err));
    CT_CHECK(ct__section_write(&af, "RANGES", rr, nr * sizeof *rr, err));
    CT_CHECK(ct__section_write(&af, "END", "", 0, err));
    st = ct_atomic_file_commit(&af, err);
    goto done;
cleanup:
    ct_atomic_file_abort(&af);
done:
    free(sh);
    free(rr);
    free(ch);
    return st;
}

void ct_shards_close(ct_shard_set *s) {
    if (!s) return;
    free(s->shards);
    free(s->chunks);
    free(s->ranges);
    free(s);
}

/* The manifest after its head: LAYOUT, SHARDS, CHUNKS, RANGES, END, each checked. */
static ct_status manifest_body(FILE *f, const char *path, long fsize, ct_shard_set *s,
                               ct_err *err) {
    ct_status st = CT_OK;
    void *lay = NULL, *sh = NULL, *ch = NULL, *rr = NULL, *endp = NULL;
    size_t nsh = 0, nch = 0, nrr = 0;
    CT_CHECK(ct__section_read(f, path, fsize, "LAYOUT", sizeof s->layout, &lay, NULL, err));
    memcpy(s->layout, lay, sizeof s->layout);
    int W = s->layout[5];
    if (W < 1 || W > MAX_SHARDS || s->layout[6] <= 0 || s->layout[6] > (1 << 28)) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s: corrupt manifest: %d shards of chunks of %d floats",
                    path, W, s->layout[6]);
        goto cleanup;
    }
    CT_CHECK(
        ct__section_read(f, path, fsize, "SHARDS", (size_t)W * sizeof(shard_rec), &sh, &nsh, err));
    CT_CHECK(ct__section_read(f, path, fsize, "CHUNKS", SIZE_MAX, &ch, &nch, err));
    CT_CHECK(ct__section_read(f, path, fsize, "RANGES", SIZE_MAX, &rr, &nrr, err));
    CT_CHECK(ct__section_read(f, path, fsize, "END", 0, &endp, NULL, err));
    if (ftell(f) != fsize) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s: %ld bytes of trailing data after the END section",
                    path, fsize - ftell(f));
        goto cleanup;
    }
    if (nch % sizeof(uint32_t) || nrr % sizeof(range_rec)) {
        st = CT_ERR(err, CT_ERR_FORMAT,
                    "%s: corrupt manifest: CHUNKS or RANGES is not whole "
                    "records (%zu, %zu bytes)",
                    path, nch, nrr);
        goto cleanup;
    }
    s->nshards = W;
    s->shards = (shard_rec *)sh;
    s->chunks = (uint32_t *)ch;
    s->nchunks = nch / sizeof(uint32_t);
    s->ranges = (range_rec *)rr;
    s->nranges = nrr / sizeof(range_rec);
    sh = ch = rr = NULL;
    uint64_t cf = (uint64_t)s->layout[6], next = 0;
    for (int k = 0; k < W; k++) {
        const shard_rec *r = &s->shards[k];
        uint64_t want = (r->bytes / sizeof(float) + cf - 1) / cf;
        if (r->bytes % sizeof(float) || r->bytes > ((uint64_t)1 << 50) || r->nchunks != want ||
            r->chunk0 != next || r->chunk0 + r->nchunks > s->nchunks) {
            st = CT_ERR(err, CT_ERR_FORMAT,
                        "%s: corrupt manifest: shard %d's size (%llu bytes) and chunks (%u from "
                        "%llu of %zu) disagree",
                        path, k, (unsigned long long)r->bytes, r->nchunks,
                        (unsigned long long)r->chunk0, s->nchunks);
            goto cleanup;
        }
        next += r->nchunks;
    }
    if (next != s->nchunks) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s: corrupt manifest: %zu chunk CRCs for %llu chunks",
                    path, s->nchunks, (unsigned long long)next);
        goto cleanup;
    }
    for (size_t k = 1; k < s->nranges; k++)
        if (range_order(&s->ranges[k - 1], &s->ranges[k]) > 0) {
            st = CT_ERR(err, CT_ERR_FORMAT, "%s: corrupt manifest: range %zu is out of order", path,
                        k);
            goto cleanup;
        }
    CT_CHECK(ranges_check(path, s->ranges, s->nranges, s->shards, W, s->np, s->first, err));
cleanup:
    free(lay);
    free(sh);
    free(ch);
    free(rr);
    free(endp);
    return st;
}

static ct_status open_body(ct_shard_set **out, FILE *f, const char *path, long fsize,
                           ct_checkpoint *head, size_t np, ct_err *err) {
    ct_shard_set *s = (ct_shard_set *)ct_calloc(1, sizeof *s);
    if (!s) return CT_ERR(err, CT_ERR_NOMEM, "%s: no memory for the manifest", path);
    prefix_of(s->prefix, sizeof s->prefix, path);
    s->step = head->step;
    s->np = np;
    ct_status st = manifest_body(f, path, fsize, s, err);
    if (st != CT_OK) {
        ct_shards_close(s);
        return st;
    }
    *out = s;
    return CT_OK;
}

ct_status ct_shards_open(ct_shard_set **out, const char *path, ct_checkpoint *head, ct_err *err) {
    *out = NULL;
    memset(head, 0, sizeof *head);
    FILE *f = fopen(path, "rb");
    if (!f) return CT_ERR(err, CT_ERR_IO, "cannot open checkpoint %s: %s", path, strerror(errno));
    ct_status st = CT_OK;
    fseek(f, 0, SEEK_END);
    long fsize = ftell(f);
    rewind(f);
    char magic[8];
    uint32_t hv[2];
    size_t np = 0;
    if (fread(magic, 8, 1, f) != 1 || fread(hv, sizeof hv, 1, f) != 1 ||
        memcmp(magic, CT_CKPT_MAGIC, 8) != 0 || hv[0] != CT_CKPT_VERSION_SHARDED ||
        hv[1] != CT_CKPT_SHARDED_SECTIONS) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s: not the manifest of a sharded cltrain checkpoint",
                    path);
        goto cleanup;
    }
    CT_CHECK(ct__ckpt_head_read(f, path, fsize, head, &np, err));
    CT_CHECK(open_body(out, f, path, fsize, head, np, err));
cleanup:
    if (st != CT_OK) {
        free(head->meta);
        memset(head, 0, sizeof *head);
    }
    fclose(f);
    return st;
}

int ct_shards_count(const ct_shard_set *s) { return s->nshards; }
void ct_shards_layout(const ct_shard_set *s, int32_t layout[5]) { memcpy(layout, s->layout, 20); }

/* What one read keeps: the shards it opened (each header checked once), which of their chunks
 * were checked against their CRC (each is read whole once; later reads of it take only the bytes
 * they need, so ranges that alternate between shards never read a chunk twice), the last chunk. */
typedef struct reader {
    const ct_shard_set *s;
    FILE **f;
    unsigned char **ok; /* [nshards] bitmaps of checked chunks, made when the shard is opened */
    int cur_shard;
    uint64_t cur_chunk;
    float *buf; /* chunk_floats */
} reader;

static ct_status shard_file(reader *rd, int k, FILE **out, ct_err *err) {
    const ct_shard_set *s = rd->s;
    if (rd->f[k]) {
        *out = rd->f[k];
        return CT_OK;
    }
    char path[1200];
    snprintf(path, sizeof path, "%s.shard_%05d", s->prefix, k);
    FILE *f = fopen(path, "rb");
    if (!f)
        return CT_ERR(err, CT_ERR_IO, "cannot open shard %d of the checkpoint: %s: %s", k, path,
                      strerror(errno));
    unsigned char head[SHARD_HEAD];
    uint32_t vw[2];
    int64_t step;
    uint64_t bytes;
    fseek(f, 0, SEEK_END);
    long fsize = ftell(f);
    rewind(f);
    if (fread(head, sizeof head, 1, f) != 1) {
        fclose(f);
        return CT_ERR(err, CT_ERR_FORMAT, "%s: too short to be a checkpoint shard (%ld bytes)",
                      path, fsize);
    }
    memcpy(vw, head + 8, 8);
    memcpy(&step, head + 16, 8);
    memcpy(&bytes, head + 24, 8);
    const char *why = memcmp(head, CT_SHARD_MAGIC, 8) ? "bad magic"
                      : vw[0] != 1                    ? "unknown version"
                      : vw[1] != (uint32_t)k          ? "another worker's shard"
                      : step != s->step               ? "another step's shard"
                      : bytes != s->shards[k].bytes || (uint64_t)fsize != SHARD_HEAD + bytes
                          ? "its size is not the manifest's"
                          : NULL;
    if (why) {
        fclose(f);
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: not shard %d of the checkpoint at step %lld (%s: worker %u, step %lld, "
                      "%ld bytes)",
                      path, k, (long long)s->step, why, vw[1], (long long)step, fsize);
    }
    rd->ok[k] = (unsigned char *)ct_calloc(s->shards[k].nchunks / 8 + 1, 1);
    if (!rd->ok[k]) {
        fclose(f);
        return CT_ERR(err, CT_ERR_NOMEM, "reading a checkpoint: no host memory");
    }
    rd->f[k] = *out = f;
    return CT_OK;
}

/* floats [pos, pos + n) of shard k's payload into dst, through chunks checked by CRC */
static ct_status shard_read(reader *rd, int k, uint64_t pos, uint64_t n, float *dst, ct_err *err) {
    const ct_shard_set *s = rd->s;
    const shard_rec *sr = &s->shards[k];
    uint64_t cf = (uint64_t)s->layout[6], total = sr->bytes / sizeof(float);
    FILE *f = NULL;
    ct_status st = shard_file(rd, k, &f, err);
    if (st != CT_OK) return st;
    while (n > 0) {
        uint64_t c = pos / cf, a = c * cf, len = total - a < cf ? total - a : cf;
        uint64_t off = pos - a, take = len - off < n ? len - off : n;
        if ((rd->cur_shard != k || rd->cur_chunk != c) && (rd->ok[k][c / 8] >> (c % 8) & 1)) {
            /* checked before: only the bytes wanted */
            if (fseek(f, (long)(SHARD_HEAD + pos * sizeof(float)), SEEK_SET) != 0 ||
                fread(dst, sizeof(float), (size_t)take, f) != take)
                return CT_ERR(err, CT_ERR_IO, "%s.shard_%05d: reading chunk %llu failed", s->prefix,
                              k, (unsigned long long)c);
            dst += take, pos += take, n -= take;
            continue;
        }
        if (rd->cur_shard != k || rd->cur_chunk != c) {
            rd->cur_shard = -1;
            if (fseek(f, (long)(SHARD_HEAD + a * sizeof(float)), SEEK_SET) != 0 ||
                fread(rd->buf, sizeof(float), (size_t)len, f) != len)
                return CT_ERR(err, CT_ERR_IO, "%s.shard_%05d: reading chunk %llu failed", s->prefix,
                              k, (unsigned long long)c);
            uint32_t crc = ct_crc32(0, rd->buf, (size_t)len * sizeof(float));
            uint32_t want = s->chunks[sr->chunk0 + c];
#ifdef CT_FUZZING
            crc = want;
#endif
            if (crc != want)
                return CT_ERR(err, CT_ERR_FORMAT,
                              "%s.shard_%05d: corrupt checkpoint shard: chunk %llu fails its "
                              "CRC-32 check (stored %08x, computed %08x)",
                              s->prefix, k, (unsigned long long)c, want, crc);
            rd->cur_shard = k;
            rd->cur_chunk = c;
            rd->ok[k][c / 8] |= (unsigned char)(1u << (c % 8));
        }
        memcpy(dst, rd->buf + off, (size_t)take * sizeof(float));
        dst += take, pos += take, n -= take;
    }
    return CT_OK;
}

static ct_status reader_open(reader *rd, const ct_shard_set *s, ct_err *err) {
    memset(rd, 0, sizeof *rd);
    rd->s = s;
    rd->cur_shard = -1;
    rd->f = (FILE **)ct_calloc((size_t)s->nshards, sizeof(FILE *));
    rd->ok = (unsigned char **)ct_calloc((size_t)s->nshards, sizeof(unsigned char *));
    rd->buf = (float *)ct_malloc((size_t)s->layout[6] * sizeof(float));
    if (!rd->f || !rd->ok || !rd->buf)
        return CT_ERR(err, CT_ERR_NOMEM, "reading a checkpoint: no host memory");
    return CT_OK;
}

static void reader_close(reader *rd) {
    for (int k = 0; rd->f && k < rd->s->nshards; k++)
        if (rd->f[k]) fclose(rd->f[k]);
    for (int k = 0; rd->ok && k < rd->s->nshards; k++)
        free(rd->ok[k]);
    free(rd->ok);
    free(rd->f);
    free(rd->buf);
}

/* table [lo, lo + n) of `array` into out, from the ranges that hold it */
static ct_status read_span(reader *rd, int array, size_t lo, size_t n, float *out, ct_err *err) {
    const ct_shard_set *s = rd->s;
    if (array < 0 || array > 2 || lo > s->np || n > s->np - lo)
        return CT_ERR(err, CT_ERR_ARG,
                      "reading a checkpoint: array %d, [%zu, +%zu) of %zu "
                      "elements",
                      array, lo, n, s->np);
    /* the first range ending after lo (they tile [0, np) in order) */
    size_t a = s->first[array], b = s->first[array + 1];
    while (a < b) {
        size_t mid = a + (b - a) / 2;
        if (s->ranges[mid].table_off + s->ranges[mid].count <= lo)
            a = mid + 1;
        else
            b = mid;
    }
    size_t end = lo + n;
    ct_status st = CT_OK;
    for (size_t k = a; st == CT_OK && k < s->first[array + 1] && s->ranges[k].table_off < end;
         k++) {
        const range_rec *r = &s->ranges[k];
        size_t x = r->table_off > lo ? (size_t)r->table_off : lo;
        size_t y = r->table_off + r->count < end ? (size_t)(r->table_off + r->count) : end;
        st = shard_read(rd, (int)r->shard, r->shard_off + (x - r->table_off), y - x, out + (x - lo),
                        err);
    }
    return st;
}

ct_status ct_shards_read(const ct_shard_set *s, int array, size_t lo, size_t n, float *out,
                         ct_err *err) {
    reader rd;
    ct_status st = reader_open(&rd, s, err);
    if (st == CT_OK) st = read_span(&rd, array, lo, n, out, err);
    reader_close(&rd);
    return st;
}

ct_status ct_shards_read_runs(const ct_shard_set *s, int array, const uint64_t *runs, size_t nruns,
                              float *table, ct_err *err) {
    reader rd;
    ct_status st = reader_open(&rd, s, err);
    for (size_t k = 0; st == CT_OK && k < nruns; k++)
        st = read_span(&rd, array, (size_t)runs[2 * k], (size_t)runs[2 * k + 1],
                       table + runs[2 * k], err);
    reader_close(&rd);
    return st;
}

/* Every shard whole against its CRC (the tools' full read). */
static ct_status shards_verify(const ct_shard_set *s, ct_err *err) {
    reader rd;
    size_t big = (size_t)s->layout[6];
    ct_status st = reader_open(&rd, s, err);
    float *tmp = (float *)ct_malloc(big * sizeof(float));
    if (st == CT_OK && !tmp) st = CT_ERR(err, CT_ERR_NOMEM, "reading a checkpoint: no host memory");
    for (int k = 0; st == CT_OK && k < s->nshards; k++) {
        uint64_t total = s->shards[k].bytes / sizeof(float);
        uint32_t crc = 0;
        for (uint64_t at = 0; st == CT_OK && at < total; at += big) {
            uint64_t len = total - at < big ? total - at : big;
            st = shard_read(&rd, k, at, len, tmp, err);
            if (st == CT_OK) crc = ct_crc32(crc, tmp, (size_t)len * sizeof(float));
        }
        if (total == 0 && st == CT_OK) { /* no chunk to read: the header still must match */
            FILE *f = NULL;
            st = shard_file(&rd, k, &f, err);
        }
#ifdef CT_FUZZING
        crc = s->shards[k].crc;
#endif
        if (st == CT_OK && crc != s->shards[k].crc)
            st = CT_ERR(err, CT_ERR_FORMAT,
                        "%s.shard_%05d: corrupt checkpoint shard: fails its CRC-32 check (stored "
                        "%08x, computed %08x)",
                        s->prefix, k, s->shards[k].crc, crc);
    }
    reader_close(&rd);
    free(tmp);
    return st;
}

ct_status ct__shards_read_all(FILE *f, const char *path, long fsize, ct_checkpoint *ck,
                              ct_err *err) {
    size_t np = 0;
    ct_shard_set *s = NULL;
    float *a[3] = {NULL, NULL, NULL};
    ct_status st = ct__ckpt_head_read(f, path, fsize, ck, &np, err);
    if (st == CT_OK) st = open_body(&s, f, path, fsize, ck, np, err);
    if (st == CT_OK) st = shards_verify(s, err);
    for (int k = 0; st == CT_OK && k < 3; k++) {
        a[k] = (float *)ct_malloc((np ? np : 1) * sizeof(float));
        st = a[k] ? ct_shards_read(s, k, 0, np, a[k], err)
                  : CT_ERR(err, CT_ERR_NOMEM, "%s: no memory for the model state", path);
    }
    ct_shards_close(s);
    if (st != CT_OK) {
        for (int k = 0; k < 3; k++)
            free(a[k]);
        return st;
    }
    ck->params = a[0], ck->m = a[1], ck->v = a[2];
    return CT_OK;
}
