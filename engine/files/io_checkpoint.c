/* io_checkpoint.c - cltrain's own checkpoint: model parameters, Adam m and v, step, loader
 * position, RNG state, config and training parameters, in CRC-checked sections (layout in
 * ct_engine_io.h). Tensors are stored gathered in table order, so any layout can resume from it.
 * Writes are atomic (temporary file, fsync, rename); reads verify every section's length and CRC
 * and name the first bad one, so truncation and corruption are reported, never trusted. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "ct_engine_io.h"

typedef struct section_hdr {
    char tag[8];
    uint64_t bytes;
    uint32_t crc;
    uint32_t zero;
} section_hdr;

#define NSECTIONS 7

static ct_status write_section(ct_atomic_file *af, const char *tag, const void *data, size_t n,
                               ct_err *err) {
    section_hdr h;
    memset(&h, 0, sizeof h);
    memcpy(h.tag, tag, strlen(tag) < 8 ? strlen(tag) : 8);
    h.bytes = n;
    h.crc = ct_crc32(0, data, n);
    ct_status st = ct_atomic_file_write(af, &h, sizeof h, err);
    if (st == CT_OK) st = ct_atomic_file_write(af, data, n, err);
    return st;
}

typedef struct state_rec {
    int64_t step;
    uint64_t rng[4];
    int32_t B, T, accum, shuffle;
    uint64_t loader_seed;
    uint64_t data_tokens;
    uint64_t nparams;
} state_rec;

ct_status ct_checkpoint_write(const char *path, const ct_checkpoint *ck, ct_err *err) {
    ct_status st = CT_OK;
    ct_atomic_file af;
    memset(&af, 0, sizeof af);
    size_t sizes[CT_GPT_NUM_TENSORS];
    CT_CHECK(ct_gpt_config_check(&ck->cfg, "checkpoint config", err));
    if (ct_gpt_param_sizes(&ck->cfg, sizes) != ck->nparams || !ck->params || !ck->m || !ck->v) {
        st = CT_ERR(err, CT_ERR_ARG, "checkpoint to write is incomplete (%zu parameters for a "
                                     "model of %zu, or a missing tensor)",
                    ck->nparams, ct_gpt_param_sizes(&ck->cfg, sizes));
        goto cleanup;
    }
    CT_CHECK(ct_atomic_file_open(&af, path, err));
    uint32_t head[2] = {CT_CKPT_VERSION, NSECTIONS};
    CT_CHECK(ct_atomic_file_write(&af, CT_CKPT_MAGIC, 8, err));
    CT_CHECK(ct_atomic_file_write(&af, head, sizeof head, err));
    /* a dense model's CONFIG is the 6 sizes (as before experts existed); a mixture of experts
     * adds the experts and top-k */
    int32_t cfg[8] = {ck->cfg.max_seq, ck->cfg.vocab,    ck->cfg.padded_vocab, ck->cfg.layers,
                      ck->cfg.heads,   ck->cfg.channels, ck->cfg.experts,      ck->cfg.top_k};
    CT_CHECK(write_section(&af, "CONFIG", cfg, (ck->cfg.experts > 0 ? 8 : 6) * sizeof(int32_t),
                           err));
    state_rec s;
    memset(&s, 0, sizeof s);
    s.step = ck->step;
    memcpy(s.rng, ck->rng, sizeof s.rng);
    s.B = ck->loader_B;
    s.T = ck->loader_T;
    s.accum = ck->loader_accum;
    s.shuffle = ck->loader_shuffle;
    s.loader_seed = ck->loader_seed;
    s.data_tokens = ck->data_tokens;
    s.nparams = ck->nparams;
    CT_CHECK(write_section(&af, "STATE", &s, sizeof s, err));
    const char *meta = ck->meta ? ck->meta : "";
    CT_CHECK(write_section(&af, "META", meta, strlen(meta), err));
    CT_CHECK(write_section(&af, "PARAMS", ck->params, ck->nparams * sizeof(float), err));
    CT_CHECK(write_section(&af, "ADAM_M", ck->m, ck->nparams * sizeof(float), err));
    CT_CHECK(write_section(&af, "ADAM_V", ck->v, ck->nparams * sizeof(float), err));
    CT_CHECK(write_section(&af, "END", "", 0, err));
    return ct_atomic_file_commit(&af, err);
cleanup:
    ct_atomic_file_abort(&af);
    return st;
}

void ct_checkpoint_release(ct_checkpoint *ck) {
    if (!ck) return;
    free(ck->params);
    free(ck->m);
    free(ck->v);
    free(ck->meta);
    ck->params = ck->m = ck->v = NULL;
    ck->meta = NULL;
}

/* Read one section: its header must carry `tag`, its payload must be `want` bytes (or any size
 * when want == SIZE_MAX; then *data is malloc'd with a NUL after it) and match its CRC. */
static ct_status read_section(FILE *f, const char *path, long fsize, const char *tag, size_t want,
                              void **data, size_t *n, ct_err *err) {
    section_hdr h;
    long at = ftell(f);
    if (fread(&h, sizeof h, 1, f) != 1)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: truncated checkpoint: section %s is missing (file ends at byte %ld)",
                      path, tag, fsize);
    char t[9] = {0};
    memcpy(t, h.tag, 8);
    if (strcmp(t, tag) != 0)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: corrupt checkpoint: expected section %s at byte %ld, found '%.8s'", path,
                      tag, at, t);
    if (want != SIZE_MAX && h.bytes != want)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: corrupt checkpoint: section %s has %llu bytes, %zu expected", path, tag,
                      (unsigned long long)h.bytes, want);
    long left = fsize - ftell(f);
    if (h.bytes > (uint64_t)(left < 0 ? 0 : left))
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: truncated checkpoint: section %s needs %llu bytes, %ld remain", path, tag,
                      (unsigned long long)h.bytes, left);
    unsigned char *buf = (unsigned char *)ct_malloc((size_t)h.bytes + 1);
    if (!buf)
        return CT_ERR(err, CT_ERR_NOMEM, "%s: no memory for section %s (%llu bytes)", path, tag,
                      (unsigned long long)h.bytes);
    if (h.bytes && fread(buf, 1, (size_t)h.bytes, f) != h.bytes) {
        free(buf);
        return CT_ERR(err, CT_ERR_IO, "%s: reading section %s failed", path, tag);
    }
    buf[h.bytes] = 0;
    uint32_t crc = ct_crc32(0, buf, (size_t)h.bytes);
#ifdef CT_FUZZING /* the fuzz campaign's build only (fuzz/fuzz_checkpoint.c says why) */
    crc = h.crc;
#endif
    if (crc != h.crc || h.zero != 0) {
        free(buf);
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: corrupt checkpoint: section %s fails its CRC-32 check (stored %08x, "
                      "computed %08x)",
                      path, tag, h.crc, crc);
    }
    *data = buf;
    if (n) *n = (size_t)h.bytes;
    return CT_OK;
}

ct_status ct_checkpoint_read(const char *path, ct_checkpoint *ck, ct_err *err) {
    memset(ck, 0, sizeof *ck);
    ct_status st = CT_OK;
    void *cfgp = NULL, *statep = NULL, *endp = NULL, *meta = NULL;
    void *params = NULL, *m = NULL, *v = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return CT_ERR(err, CT_ERR_IO, "cannot open checkpoint %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long fsize = ftell(f);
    rewind(f);
    char magic[8];
    uint32_t head[2];
    if (fread(magic, 8, 1, f) != 1 || fread(head, sizeof head, 1, f) != 1) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s: too short to be a cltrain checkpoint (%ld bytes)",
                    path, fsize);
        goto cleanup;
    }
    if (memcmp(magic, CT_CKPT_MAGIC, 8) != 0) {
        st = CT_ERR(err, CT_ERR_FORMAT,
                    "%s: not a cltrain checkpoint (bad magic; an llm.c model file goes to --init)",
                    path);
        goto cleanup;
    }
    if (head[0] != CT_CKPT_VERSION || head[1] != NSECTIONS) {
        st = CT_ERR(err, CT_ERR_FORMAT,
                    "%s: checkpoint version %u with %u sections is not supported (version %d, %d "
                    "sections expected)",
                    path, head[0], head[1], CT_CKPT_VERSION, NSECTIONS);
        goto cleanup;
    }
    size_t cfgn = 0;
    CT_CHECK(read_section(f, path, fsize, "CONFIG", SIZE_MAX, &cfgp, &cfgn, err));
    if (cfgn != 6 * sizeof(int32_t) && cfgn != 8 * sizeof(int32_t)) {
        st = CT_ERR(err, CT_ERR_FORMAT,
                    "%s: corrupt checkpoint: section CONFIG has %zu bytes, 24 or 32 expected", path,
                    cfgn);
        goto cleanup;
    }
    int32_t *c = (int32_t *)cfgp;
    if (cfgn == 8 * sizeof(int32_t)) ck->cfg.experts = c[6], ck->cfg.top_k = c[7];
    ck->cfg.max_seq = c[0];
    ck->cfg.vocab = c[1];
    ck->cfg.padded_vocab = c[2];
    ck->cfg.layers = c[3];
    ck->cfg.heads = c[4];
    ck->cfg.channels = c[5];
    CT_CHECK(ct_gpt_config_check(&ck->cfg, path, err));
    size_t sizes[CT_GPT_NUM_TENSORS];
    size_t np = ct_gpt_param_sizes(&ck->cfg, sizes);
    CT_CHECK(read_section(f, path, fsize, "STATE", sizeof(state_rec), &statep, NULL, err));
    state_rec s;
    memcpy(&s, statep, sizeof s);
    if (s.nparams != np) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s: %llu parameters stored for a model of %zu", path,
                    (unsigned long long)s.nparams, np);
        goto cleanup;
    }
    CT_CHECK(read_section(f, path, fsize, "META", SIZE_MAX, &meta, NULL, err));
    CT_CHECK(read_section(f, path, fsize, "PARAMS", np * sizeof(float), &params, NULL, err));
    CT_CHECK(read_section(f, path, fsize, "ADAM_M", np * sizeof(float), &m, NULL, err));
    CT_CHECK(read_section(f, path, fsize, "ADAM_V", np * sizeof(float), &v, NULL, err));
    CT_CHECK(read_section(f, path, fsize, "END", 0, &endp, NULL, err));
    if (ftell(f) != fsize) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s: %ld bytes of trailing data after the END section",
                    path, fsize - ftell(f));
        goto cleanup;
    }
    ck->step = s.step;
    memcpy(ck->rng, s.rng, sizeof s.rng);
    ck->loader_B = s.B;
    ck->loader_T = s.T;
    ck->loader_accum = s.accum;
    ck->loader_shuffle = s.shuffle;
    ck->loader_seed = s.loader_seed;
    ck->data_tokens = s.data_tokens;
    ck->nparams = np;
    ck->params = (float *)params;
    ck->m = (float *)m;
    ck->v = (float *)v;
    ck->meta = (char *)meta;
    params = m = v = meta = NULL;
cleanup:
    if (st != CT_OK) memset(ck, 0, sizeof *ck);
    free(cfgp);
    free(statep);
    free(endp);
    free(meta);
    free(params);
    free(m);
    free(v);
    fclose(f);
    return st;
}

static ct_status make_dir(const char *dir, ct_err *err) {
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) return CT_OK;
        return CT_ERR(err, CT_ERR_IO, "%s exists and is not a directory", dir);
    }
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return CT_ERR(err, CT_ERR_IO, "cannot create directory %s: %s", dir, strerror(errno));
    return CT_OK;
}

ct_status ct_checkpoint_save_dir(const char *dir, const ct_checkpoint *ck, char *written,
                                 size_t len, ct_err *err) {
    ct_status st = CT_OK;
    CT_CHECK(make_dir(dir, err));
    char name[64], path[1200], latest[1200];
    snprintf(name, sizeof name, "ckpt_%08lld.bin", (long long)ck->step);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(latest, sizeof latest, "%s/latest", dir);
    CT_CHECK(ct_checkpoint_write(path, ck, err));
    ct_atomic_file af;
    CT_CHECK(ct_atomic_file_open(&af, latest, err));
    char line[80];
    int k = snprintf(line, sizeof line, "%s\n", name);
    st = ct_atomic_file_write(&af, line, (size_t)k, err);
    if (st != CT_OK) {
        ct_atomic_file_abort(&af);
        goto cleanup;
    }
    CT_CHECK(ct_atomic_file_commit(&af, err));
    if (written) snprintf(written, len, "%s", path);
cleanup:
    return st;
}

ct_status ct_checkpoint_find(const char *dir, char *path, size_t len, ct_err *err) {
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return CT_ERR(err, CT_ERR_IO, "cannot resume from %s: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) {
        snprintf(path, len, "%s", dir);
        return CT_OK;
    }
    char latest[1200];
    snprintf(latest, sizeof latest, "%s/latest", dir);
    unsigned char *buf = NULL;
    size_t n = 0;
    ct_status st = ct_file_read_all(latest, &buf, &n, err);
    if (st != CT_OK) {
        char why[CT_ERR_MSG_MAX];
        snprintf(why, sizeof why, "%s", err ? err->msg : "");
        return CT_ERR(err, st, "cannot resume from %s: no readable 'latest' file in it (%s)", dir,
                      why);
    }
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) buf[--n] = 0;
    /* one plain file name: a NUL byte would cut it short (found by fuzzing: the directory itself
     * was named), and "." or ".." are not files */
    if (!n || memchr(buf, 0, n) || strchr((char *)buf, '/') || strchr((char *)buf, '\n') ||
        !strcmp((char *)buf, ".") || !strcmp((char *)buf, "..")) {
        free(buf);
        return CT_ERR(err, CT_ERR_FORMAT, "%s is malformed (one checkpoint file name expected)",
                      latest);
    }
    snprintf(path, len, "%s/%s", dir, (char *)buf);
    free(buf);
    return CT_OK;
}

/* ---------------------------------------------------------------- directory hygiene */

/* "ckpt_<digits>.bin" (*step set) */
static int is_ckpt_name(const char *n, long long *step) {
    if (strncmp(n, "ckpt_", 5) != 0 || !isdigit((unsigned char)n[5])) return 0;
    char *end = NULL;
    long long v = strtoll(n + 5, &end, 10);
    if (strcmp(end, ".bin") != 0) return 0;
    if (step) *step = v;
    return 1;
}

/* "<ckpt name or latest>.tmp.<pid>.<n>" (ct_atomic_file's temporaries of this directory; without
 * ".<n>" as older versions named them): the writer's pid */
static long stale_pid(const char *n) {
    const char *t = strstr(n, ".tmp.");
    if (!t || !isdigit((unsigned char)t[5])) return -1;
    char base[256];
    size_t bl = (size_t)(t - n);
    if (bl >= sizeof base) return -1;
    memcpy(base, n, bl);
    base[bl] = 0;
    if (strcmp(base, "latest") != 0 && !is_ckpt_name(base, NULL)) return -1;
    char *end = NULL;
    long pid = strtol(t + 5, &end, 10);
    if (*end == '.' && isdigit((unsigned char)end[1])) strtol(end + 1, &end, 10);
    return *end || pid <= 0 ? -1 : pid;
}

ct_status ct_checkpoint_clean_stale(const char *dir, int *removed, uint64_t *bytes, char *names,
                                    size_t len, ct_err *err) {
    if (removed) *removed = 0;
    if (bytes) *bytes = 0;
    if (names && len) names[0] = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return CT_OK; /* nothing saved there yet */
        return CT_ERR(err, CT_ERR_IO, "cannot list checkpoint directory %s: %s", dir,
                      strerror(errno));
    }
    ct_status st = CT_OK;
    size_t used = 0;
    for (struct dirent *e; (e = readdir(d));) {
        long pid = stale_pid(e->d_name);
        if (pid < 0) continue;
        /* a process that still exists (ours or not: EPERM) may be writing it */
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (remove(path) != 0) {
            st = CT_ERR(err, CT_ERR_IO, "cannot remove the stale temporary %s: %s", path,
                        strerror(errno));
            break;
        }
        if (removed) (*removed)++;
        if (bytes) *bytes += (uint64_t)sb.st_size;
        if (names && used + 1 < len) {
            int w = snprintf(names + used, len - used, "%s%s", used ? ", " : "", e->d_name);
            used = w < 0 ? len : used + (size_t)w;
        }
    }
    closedir(d);
    return st;
}

typedef struct ckpt_file {
    char name[64];
    struct timespec mtime;
    long long step;
} ckpt_file;

static int newest_first(const void *a, const void *b) {
    const ckpt_file *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec > y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec > y->mtime.tv_nsec ? -1 : 1;
    return x->step > y->step ? -1 : x->step < y->step;
}

ct_status ct_checkpoint_prune(const char *dir, int keep, int *removed, ct_err *err) {
    if (removed) *removed = 0;
    if (keep < 1) return CT_ERR(err, CT_ERR_ARG, "keeping %d checkpoints: at least 1", keep);
    /* the one DIR/latest names is never removed, whatever its age */
    char latest[1400] = "";
    ct_err ignore = {0};
    if (ct_checkpoint_find(dir, latest, sizeof latest, &ignore) != CT_OK) latest[0] = 0;
    const char *lname = strrchr(latest, '/') ? strrchr(latest, '/') + 1 : "";
    DIR *d = opendir(dir);
    if (!d)
        return CT_ERR(err, CT_ERR_IO, "cannot list checkpoint directory %s: %s", dir,
                      strerror(errno));
    ckpt_file *f = NULL;
    size_t n = 0, cap = 0;
    ct_status st = CT_OK;
    for (struct dirent *e; (e = readdir(d));) {
        long long step;
        if (!is_ckpt_name(e->d_name, &step) || strlen(e->d_name) >= sizeof f[0].name) continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 32;
            ckpt_file *nf = ct_realloc(f, cap * sizeof *nf);
            if (!nf) {
                st = CT_ERR(err, CT_ERR_NOMEM, "listing checkpoints: out of host memory");
                break;
            }
            f = nf;
        }
        snprintf(f[n].name, sizeof f[n].name, "%s", e->d_name);
        f[n].mtime = sb.st_mtim;
        f[n].step = step;
        n++;
    }
    closedir(d);
    if (st == CT_OK) qsort(f, n, sizeof *f, newest_first);
    for (size_t i = (size_t)keep; st == CT_OK && i < n; i++) {
        if (!strcmp(f[i].name, lname)) continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, f[i].name);
        if (remove(path) != 0)
            st = CT_ERR(err, CT_ERR_IO, "cannot remove the old checkpoint %s: %s", path,
                        strerror(errno));
        else if (removed)
            (*removed)++;
    }
    free(f);
    return st;
}
