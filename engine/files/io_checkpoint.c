/* io_checkpoint.c - cltrain's own checkpoint, gathered: model parameters, Adam m and v, step,
 * loader position, RNG state, config and training parameters, in CRC-checked sections (layout in
 * ct_engine_io.h; the framing is io_sections.c's). Tensors are stored gathered in table order, so
 * any layout can resume from it; a sharded checkpoint's manifest (io_shards.c) reads the same
 * way. Writes are atomic (temporary file, fsync, rename); reads verify every section's length and
 * CRC and name the first bad one, so truncation and corruption are reported, never trusted. And
 * the checkpoint directory: DIR/latest, the names, pruning, the temporaries of killed writers. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "io_impl.h"

#define NSECTIONS 7

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
    CT_CHECK(ct__ckpt_head_write(&af, ck, CT_CKPT_VERSION, NSECTIONS, err));
    CT_CHECK(ct__section_write(&af, "PARAMS", ck->params, ck->nparams * sizeof(float), err));
    CT_CHECK(ct__section_write(&af, "ADAM_M", ck->m, ck->nparams * sizeof(float), err));
    CT_CHECK(ct__section_write(&af, "ADAM_V", ck->v, ck->nparams * sizeof(float), err));
    CT_CHECK(ct__section_write(&af, "END", "", 0, err));
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

ct_status ct_checkpoint_read(const char *path, ct_checkpoint *ck, ct_err *err) {
    memset(ck, 0, sizeof *ck);
    ct_status st = CT_OK;
    void *endp = NULL, *params = NULL, *m = NULL, *v = NULL;
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
    if (head[0] == CT_CKPT_VERSION_SHARDED && head[1] == CT_CKPT_SHARDED_SECTIONS) {
        st = ct__shards_read_all(f, path, fsize, ck, err);
        goto cleanup;
    }
    if (head[0] != CT_CKPT_VERSION || head[1] != NSECTIONS) {
        st = CT_ERR(err, CT_ERR_FORMAT,
                    "%s: checkpoint version %u with %u sections is not supported (version %d with "
                    "%d sections, or %d with %d, expected)",
                    path, head[0], head[1], CT_CKPT_VERSION, NSECTIONS, CT_CKPT_VERSION_SHARDED,
                    CT_CKPT_SHARDED_SECTIONS);
        goto cleanup;
    }
    size_t np = 0;
    CT_CHECK(ct__ckpt_head_read(f, path, fsize, ck, &np, err));
    CT_CHECK(ct__section_read(f, path, fsize, "PARAMS", np * sizeof(float), &params, NULL, err));
    CT_CHECK(ct__section_read(f, path, fsize, "ADAM_M", np * sizeof(float), &m, NULL, err));
    CT_CHECK(ct__section_read(f, path, fsize, "ADAM_V", np * sizeof(float), &v, NULL, err));
    CT_CHECK(ct__section_read(f, path, fsize, "END", 0, &endp, NULL, err));
    if (ftell(f) != fsize) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s: %ld bytes of trailing data after the END section",
                    path, fsize - ftell(f));
        goto cleanup;
    }
    ck->params = (float *)params;
    ck->m = (float *)m;
    ck->v = (float *)v;
    params = m = v = NULL;
cleanup:
    if (st != CT_OK) {
        free(ck->meta);
        memset(ck, 0, sizeof *ck);
    }
    free(endp);
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

void ct_checkpoint_name(char *out, size_t len, const char *dir, int64_t step) {
    snprintf(out, len, "%s/ckpt_%08lld.bin", dir, (long long)step);
}

ct_status ct_checkpoint_publish(const char *dir, const char *path, ct_err *err) {
    ct_status st = CT_OK;
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    char latest[1200], line[300];
    snprintf(latest, sizeof latest, "%s/latest", dir);
    int k = snprintf(line, sizeof line, "%s\n", name);
    ct_atomic_file af;
    CT_CHECK(ct_atomic_file_open(&af, latest, err));
    st = ct_atomic_file_write(&af, line, (size_t)k, err);
    if (st != CT_OK) {
        ct_atomic_file_abort(&af);
        goto cleanup;
    }
    CT_CHECK(ct_atomic_file_commit(&af, err));
cleanup:
    return st;
}

ct_status ct_checkpoint_save_dir(const char *dir, const ct_checkpoint *ck, char *written,
                                 size_t len, ct_err *err) {
    ct_status st = CT_OK;
    CT_CHECK(make_dir(dir, err));
    char path[1200];
    ct_checkpoint_name(path, sizeof path, dir, ck->step);
    CT_CHECK(ct_checkpoint_write(path, ck, err));
    CT_CHECK(ct_checkpoint_publish(dir, path, err));
    if (written) snprintf(written, len, "%s", path);
cleanup:
    return st;
}

ct_status ct_checkpoint_save_sharded(const char *dir, const ct_checkpoint *head,
                                     const int32_t layout[5], int nshards,
                                     const ct_shard_desc *d, const ct_shard_range *r, size_t nr,
                                     char *written, size_t len, ct_err *err) {
    ct_status st = CT_OK;
    CT_CHECK(make_dir(dir, err));
    char path[1200];
    ct_checkpoint_name(path, sizeof path, dir, head->step);
    for (int w = 0; w < nshards; w++) { /* the manifest names only shards a reader can find */
        char sp[1300];
        ct_shard_path(sp, sizeof sp, path, w);
        CT_CHECK(ct_shard_check_visible(sp, w, d[w].bytes, err));
    }
    CT_CHECK(ct_shards_manifest_write(path, head, layout, nshards, d, r, nr, err));
    CT_CHECK(ct_checkpoint_publish(dir, path, err));
    if (written) snprintf(written, len, "%s", path);
cleanup:
    return st;
}

int ct_checkpoint_is_sharded(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char h[16];
    uint32_t v[2] = {0, 0};
    int ok = fread(h, sizeof h, 1, f) == 1 && !memcmp(h, CT_CKPT_MAGIC, 8);
    fclose(f);
    if (ok) memcpy(v, h + 8, 8);
    return ok && v[0] == CT_CKPT_VERSION_SHARDED;
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

/* "ckpt_<digits>.shard_<digits>" (*step set) */
static int is_shard_name(const char *n, long long *step) {
    if (strncmp(n, "ckpt_", 5) != 0 || !isdigit((unsigned char)n[5])) return 0;
    char *end = NULL;
    long long v = strtoll(n + 5, &end, 10);
    if (strncmp(end, ".shard_", 7) != 0 || !isdigit((unsigned char)end[7])) return 0;
    strtol(end + 7, &end, 10);
    if (*end) return 0;
    if (step) *step = v;
    return 1;
}

/* Remove the shards in `dir` whose manifest DIR/ckpt_<step>.bin is not there (all of them when
 * only_step < 0, else those of that step); counts and names them like ct_checkpoint_clean_stale. */
static ct_status remove_orphan_shards(const char *dir, long long only_step, int *removed,
                                      uint64_t *bytes, char *names, size_t len, size_t *used,
                                      ct_err *err) {
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return CT_OK;
        return CT_ERR(err, CT_ERR_IO, "cannot list checkpoint directory %s: %s", dir,
                      strerror(errno));
    }
    ct_status st = CT_OK;
    for (struct dirent *e; (e = readdir(d));) {
        long long step;
        if (!is_shard_name(e->d_name, &step) || (only_step >= 0 && step != only_step)) continue;
        char man[1400], path[1400];
        ct_checkpoint_name(man, sizeof man, dir, step);
        struct stat sb;
        if (stat(man, &sb) == 0) continue; /* its checkpoint exists */
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (remove(path) != 0) {
            st = CT_ERR(err, CT_ERR_IO, "cannot remove the orphaned shard %s: %s", path,
                        strerror(errno));
            break;
        }
        if (removed) (*removed)++;
        if (bytes) *bytes += (uint64_t)sb.st_size;
        if (names && *used + 1 < len) {
            int w = snprintf(names + *used, len - *used, "%s%s", *used ? ", " : "", e->d_name);
            *used = w < 0 ? len : *used + (size_t)w;
        }
    }
    closedir(d);
    return st;
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
    if (strcmp(base, "latest") != 0 && !is_ckpt_name(base, NULL) && !is_shard_name(base, NULL))
        return -1;
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
    /* a sharded save killed before its manifest: shards no checkpoint names */
    if (st == CT_OK) st = remove_orphan_shards(dir, -1, removed, bytes, names, len, &used, err);
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
        /* the manifest went first, so its shards are orphans now */
        size_t used = 0;
        if (st == CT_OK) st = remove_orphan_shards(dir, f[i].step, NULL, NULL, NULL, 0, &used, err);
    }
    free(f);
    /* shards of a save killed before its manifest (none is in flight: the caller just saved) */
    size_t used = 0;
    if (st == CT_OK) st = remove_orphan_shards(dir, -1, NULL, NULL, NULL, 0, &used, err);
    return st;
}
