/* ct_file.h - whole files on the host (cl/file.c): read one whole, write one atomically (at once
 * or streamed), make a folder path. The one implementation the device layer's caches and the
 * engine's file formats share. Kept apart from ct_cl.h so host-only code can use it without
 * OpenCL's headers.
 *
 *     ct_err err = {0};
 *     unsigned char *text = NULL; size_t n = 0;
 *     if (ct_file_read_all("in.txt", &text, &n, &err) ||       // text[n] == 0
 *         ct_file_write_atomic("out.txt", text, n, &err)) puts(err.msg);
 *     free(text);
 *
 *     ct_atomic_file af;                                       // streamed: many writes, one commit
 *     if (ct_atomic_file_open(&af, "big.bin", &err) == CT_OK) {
 *         if (ct_atomic_file_write(&af, head, sizeof head, &err) ||
 *             ct_atomic_file_write(&af, body, nbody, &err)) ct_atomic_file_abort(&af);
 *         else ct_atomic_file_commit(&af, &err);
 *     }
 *
 * An atomic write goes to a temporary "<path>.tmp.<pid>.<n>" in the same folder, created
 * exclusively (n counts up past names that exist, so threads and processes writing one path at
 * once never share a temporary), then is flushed, fsynced, renamed over <path>, and the folder is
 * fsynced. A crash or an error never leaves a half-written file under the final name; readers
 * see the old file or the new one. Every failure names the file and the system's reason.
 */
#ifndef CT_FILE_H
#define CT_FILE_H

#include <stddef.h>
#include <stdio.h>

#include "ct_status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Read a whole regular file into a buffer from ct_malloc (+1 NUL byte, not counted in *n), freed
 * with free(). CT_ERR_IO when it cannot be opened or read (or is not a regular file),
 * CT_ERR_NOMEM when the buffer cannot be had. */
ct_status ct_file_read_all(const char *path, unsigned char **out, size_t *n, ct_err *err);

/* Write n bytes as the whole content of `path`, atomically (above). */
ct_status ct_file_write_atomic(const char *path, const void *data, size_t n, ct_err *err);

/* mkdir -p (mode 0755 before the umask); CT_OK when the folder exists afterwards. */
ct_status ct_file_mkdirs(const char *path, ct_err *err);

/* A streamed atomic write: open a temporary next to `path`, write, then commit (flush, fsync,
 * rename over `path`, fsync the folder) or abort (remove the temporary). */
typedef struct ct_atomic_file {
    FILE *f;
    char path[1024];
    char tmp[1100];
    int failed; /* a write failed: commit will refuse */
} ct_atomic_file;

ct_status ct_atomic_file_open(ct_atomic_file *af, const char *path, ct_err *err);
/* fwrite that records failure (and the error) on the handle. */
ct_status ct_atomic_file_write(ct_atomic_file *af, const void *data, size_t n, ct_err *err);
ct_status ct_atomic_file_commit(ct_atomic_file *af, ct_err *err);
void ct_atomic_file_abort(ct_atomic_file *af); /* no-op when not open */

#ifdef __cplusplus
}
#endif

#endif /* CT_FILE_H */
