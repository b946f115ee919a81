/* io_util.c - small file helpers shared by the engine's I/O: CRC-32, atomic writes (temporary file,
 * flush, fsync, rename, directory fsync) and whole-file reads. Every failure names the file and
 * the system's reason. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_engine_io.h"

/* ---------------------------------------------------------------- CRC-32 */

static uint32_t crc_table[256];
static int crc_table_ready; /* a pure function of constants: racing initialisations write the
                               same values, so no lock is needed for correctness */

static void crc_table_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[i] = c;
    }
    crc_table_ready = 1;
}

uint32_t ct_crc32(uint32_t crc, const void *data, size_t n) {
    if (!crc_table_ready) crc_table_init();
    const unsigned char *p = (const unsigned char *)data;
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

/* ---------------------------------------------------------------- atomic files */

ct_status ct_atomic_file_open(ct_atomic_file *af, const char *path, ct_err *err) {
    memset(af, 0, sizeof *af);
    if (!path || !*path) return CT_ERR(err, CT_ERR_ARG, "output file name is empty");
    if (strlen(path) >= sizeof af->path)
        return CT_ERR(err, CT_ERR_ARG, "output path too long: %s", path);
    snprintf(af->path, sizeof af->path, "%s", path);
    snprintf(af->tmp, sizeof af->tmp, "%s.tmp.%ld", path, (long)getpid());
    af->f = fopen(af->tmp, "wb");
    if (!af->f)
        return CT_ERR(err, CT_ERR_IO, "cannot create %s (for %s): %s", af->tmp, path,
                      strerror(errno));
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
    int fd = open(dir, O_RDONLY);
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

/* ---------------------------------------------------------------- whole-file reads */

ct_status ct_file_read_all(const char *path, unsigned char **out, size_t *n, ct_err *err) {
    *out = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return CT_ERR(err, CT_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    ct_status st = CT_OK;
    unsigned char *buf = NULL;
    if (fseek(f, 0, SEEK_END) != 0) {
        st = CT_ERR(err, CT_ERR_IO, "cannot seek in %s: %s", path, strerror(errno));
        goto cleanup;
    }
    long size = ftell(f);
    if (size < 0) {
        st = CT_ERR(err, CT_ERR_IO, "cannot size %s (not a regular file?)", path);
        goto cleanup;
    }
    rewind(f);
    buf = (unsigned char *)ct_malloc((size_t)size + 1);
    if (!buf) {
        st = CT_ERR(err, CT_ERR_NOMEM, "no memory for %s (%ld bytes)", path, size);
        goto cleanup;
    }
    if (size && fread(buf, 1, (size_t)size, f) != (size_t)size) {
        st = CT_ERR(err, CT_ERR_IO, "reading %s failed: %s", path,
                    ferror(f) ? strerror(errno) : "short read");
        goto cleanup;
    }
    buf[size] = 0;
    *out = buf;
    *n = (size_t)size;
    buf = NULL;
cleanup:
    free(buf);
    fclose(f);
    return st;
}
