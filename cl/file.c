/* file.c - whole files on the host: read one whole, write one atomically, make a folder path.
 * No OpenCL here: the program cache and the tuning store use it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_cl_impl.h"

int ct__mkdirs(const char *path) {
    char tmp[1024];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof tmp) return -1;
    memcpy(tmp, path, n + 1);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    return 0;
}

ct_status ct__read_file(const char *path, char **out, size_t *n, ct_err *err) {
    *out = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return CT_ERR(err, CT_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    ct_status st = CT_OK;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) != 0) goto io;
    long len = ftell(f);
    if (len < 0 || fseek(f, 0, SEEK_SET) != 0) goto io;
    buf = ct_malloc((size_t)len + 1);
    if (!buf) {
        st = CT_ERR(err, CT_ERR_NOMEM, "out of host memory reading '%s' (%ld bytes)", path, len);
        goto done;
    }
    if (fread(buf, 1, (size_t)len, f) != (size_t)len) goto io;
    buf[len] = '\0';
    *out = buf;
    *n = (size_t)len;
    buf = NULL;
    goto done;
io:
    st = CT_ERR(err, CT_ERR_IO, "cannot read '%s': %s", path, strerror(errno));
done:
    free(buf);
    fclose(f);
    return st;
}

ct_status ct__write_file_atomic(const char *path, const void *data, size_t n, ct_err *err) {
    static _Atomic unsigned counter = 0;
    char tmp[1200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%u", path, (long)getpid(), counter++);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return CT_ERR(err, CT_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
    const char *p = data;
    size_t left = n;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd);
            unlink(tmp);
            return CT_ERR(err, CT_ERR_IO, "cannot write '%s': %s", tmp, strerror(e));
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return CT_ERR(err, CT_ERR_IO, "cannot flush '%s': %s", tmp, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return CT_ERR(err, CT_ERR_IO, "cannot rename '%s' to '%s': %s", tmp, path, strerror(e));
    }
    return CT_OK;
}
