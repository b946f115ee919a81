/* fuzz_util.h - what the fuzz targets share: a scratch file the readers open (they take paths,
 * so the bytes go through the real open/read/mmap path), and the invariant every reader must
 * keep on bad input: a ct_status that is not CT_OK and a message saying what is wrong.
 *
 * A target is one function, LLVMFuzzerTestOneInput (libFuzzer's entry point). The same source
 * is linked with libFuzzer for the campaign (scripts/fuzz, clang) and with replay.c, a plain
 * main() over corpus files, for the CTest replay in the normal (gcc) build.
 *
 *     int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
 *         const char *path = ct_fuzz_file("model", data, size);
 *         ...reader(path)...; ct_fuzz_check_fail(st, &err);
 *         return 0;
 *     }
 */
#ifndef CT_FUZZ_UTIL_H
#define CT_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_status.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A violated invariant is a crash, so the fuzzer records the input. */
#define CT_FUZZ_REQUIRE(cond)                                                                     \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "%s:%d: invariant violated: %s\n", __FILE__, __LINE__, #cond);       \
            abort();                                                                              \
        }                                                                                         \
    } while (0)

/* Directory for scratch files: $CT_FUZZ_TMP, else /dev/shm (no disk traffic), else /tmp. */
static inline const char *ct_fuzz_dir(void) {
    const char *d = getenv("CT_FUZZ_TMP");
    if (d && *d) return d;
    return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

/* Write `size` bytes to this process's scratch file `tag` (replaced each time); its path. */
static inline const char *ct_fuzz_file(const char *tag, const uint8_t *data, size_t size) {
    static char path[512];
    snprintf(path, sizeof path, "%s/ct_fuzz_%ld_%s", ct_fuzz_dir(), (long)getpid(), tag);
    FILE *f = fopen(path, "wb");
    CT_FUZZ_REQUIRE(f != NULL);
    CT_FUZZ_REQUIRE(size == 0 || fwrite(data, 1, size, f) == size);
    CT_FUZZ_REQUIRE(fclose(f) == 0);
    return path;
}

/* A refused input: a failure status, a known kind of failure, and a message. */
static inline void ct_fuzz_check_fail(ct_status st, const ct_err *err) {
    CT_FUZZ_REQUIRE(st != CT_OK);
    CT_FUZZ_REQUIRE(st == CT_ERR_FORMAT || st == CT_ERR_IO || st == CT_ERR_NOT_FOUND ||
                    st == CT_ERR_ARG || st == CT_ERR_UNSUPPORTED);
    CT_FUZZ_REQUIRE(err->msg[0] != '\0');
    CT_FUZZ_REQUIRE(memchr(err->msg, '\0', sizeof err->msg) != NULL);
}

#endif /* CT_FUZZ_UTIL_H */
