/* file.c - whole files on the host (ct_file.h): read one whole, write one atomically, make a
 * folder path. No OpenCL here: the program cache, the tuning store and the engine's file formats
 * all write and read through these, so there is one temporary-name rule and one commit sequence.
 *
 * Why the temporary is created exclusively and not just named by pid: two threads of one process
 * writing the same path (two workers storing one tuning record or cache entry) would otherwise
 * open, truncate and rename one shared temporary, and one could rename the other's half-written
 * file into place. Counting up past existing names needs no shared counter. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_alloc.h"
#include "ct_file.h"

#define TMP_TRIES 1000 /* temporaries of one path a process may have at once */

ct_status ct_file_mkdirs(const char *path, ct_err *err) {
    char tmp[1024];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof tmp)
        return CT_ERR(err, CT_ERR_ARG, "cannot create folder '%s': empty or too long", path);
    memcpy(tmp, path, n + 1);
    for (char *p = tmp + 1;; p++) {
        if (*p && *p != '/') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return CT_ERR(err, CT_ERR_IO, "cannot create folder '%s': %s", tmp, strerror(errno));
        if (!c) break;
        *p = c;
    }
    return CT_OK;
}

ct_status ct_file_read_all(const char *path, unsigned char **out, size_t *n, ct_err *err) {
    *out = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return CT_ERR(err, CT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    ct_status st = CT_OK;
    unsigned char *buf = NULL;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size < 0 ||
        (unsigned long long)sb.st_size >= (unsigned long long)SIZE_MAX) {
        st = CT_ERR(err, CT_ERR_IO, "cannot size %s (not a regular file?)", path);
        goto cleanup;
    }
    size_t size = (size_t)sb.st_size;
    buf = (unsigned char *)ct_malloc(size + 1);
    if (!buf) {
        st = CT_ERR(err, CT_ERR_NOMEM, "no memory for %s (%zu bytes)", path, size);
        goto cleanup;
    }
    if (size && fread(buf, 1, size, f) != size) {
        st = CT_ERR(err, CT_ERR_IO, "reading %s failed: %s", path,
                    ferror(f) ? strerror(errno) : "short read");
        goto cleanup;
    }
    buf[size] = 0;
    *out = buf;
    *n = size;
    buf = NULL;
cleanup:
    free(buf);
    fclose(f);
    return st;
}

ct_status ct_atomic_file_open(ct_atomic_file *af, const char *path, ct_err *err) {
    memset(af, 0, sizeof *af);
    if (!path || !*path) return CT_ERR(err, CT_ERR_ARG, "output file name is empty");
    if (strlen(path) >= sizeof af->path)
        return CT_ERR(err, CT_ERR_ARG, "output path too long: %s", path);
    snprintf(af->path, sizeof af->path, "%s", path);
    int fd = -1;
    for (int i = 0; fd < 0; i++) {
        snprintf(af->tmp, sizeof af->tmp, "%s.tmp.%ld.%d", path, (long)getpid(), i);
        fd = open(af->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && (errno != EEXIST || i + 1 == TMP_TRIES))
            return CT_ERR(err, CT_ERR_IO, "cannot create %s (for %s): %s", af->tmp, path,
                          strerror(errno));
    }
    af->f = fdopen(fd, "wb");
    if (!af->f) {
        int e = errno;
        close(fd);
        unlink(af->tmp);
        return CT_ERR(err, CT_ERR_IO, "cannot create %s (for %s): %s", af->tmp, path, strerror(e));
    }
    return CT_OK;
}

ct_status ct_atomic_file_write(ct_atomic_file *af, const void *data, size_t n, ct_err *err) {
    if (!af->f) return CT_ERR(err, CT_ERR_STATE, "atomic file %s is not open", af->path);
    if (af->failed) return CT_ERR_IO;
    if (n && fwrite(data, 1, n, af->f) != n) {
        af->failed = 1;
        return CT_ERR(err, CT_ERR_IO, "writing %s failed: %s", af->tmp, strerror(errno));
    }
    return CT_OK;
}

void ct_atomic_file_abort(ct_atomic_file *af) {
    if (!af || !af->f) return;
    fclose(af->f);
    af->f = NULL;
    remove(af->tmp);
}

static void fsync_parent_dir(const char *path) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir) dir[1] = '\0';
    else if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    int fd = open(dir, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd); /* best effort: some file systems refuse fsync on directories */
        close(fd);
    }
}

ct_status ct_atomic_file_commit(ct_atomic_file *af, ct_err *err) {
    if (!af->f) return CT_ERR(err, CT_ERR_STATE, "atomic file %s is not open", af->path);
    if (af->failed) {
        ct_atomic_file_abort(af);
        return CT_ERR(err, CT_ERR_IO, "writing %s failed earlier; nothing was written", af->path);
    }
    int bad = fflush(af->f) != 0;
    if (!bad) bad = fsync(fileno(af->f)) != 0;
    int e = errno;
    if (fclose(af->f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    af->f = NULL;
    if (bad) {
        remove(af->tmp);
        return CT_ERR(err, CT_ERR_IO, "flushing %s failed: %s (disk full?); %s left unchanged",
                      af->tmp, strerror(e), af->path);
    }
    if (rename(af->tmp, af->path) != 0) {
        e = errno;
        remove(af->tmp);
        return CT_ERR(err, CT_ERR_IO, "renaming %s to %s failed: %s", af->tmp, af->path,
                      strerror(e));
    }
    fsync_parent_dir(af->path);
    return CT_OK;
}

ct_status ct_file_write_atomic(const char *path, const void *data, size_t n, ct_err *err) {
    ct_atomic_file af;
    ct_status st = ct_atomic_file_open(&af, path, err);
    if (st != CT_OK) return st;
    st = ct_atomic_file_write(&af, data, n, err);
    if (st != CT_OK) {
        ct_atomic_file_abort(&af);
        return st;
    }
    return ct_atomic_file_commit(&af, err);
}
