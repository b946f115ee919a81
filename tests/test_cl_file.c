/* test_cl_file - cl/'s whole-file helpers (ct_file.h), the one implementation the program cache,
 * the tuning store and the engine's files share: whole-file reads refuse what is not a regular
 * file and name the path; atomic writes leave the old or the new content, never a mix, even with
 * two threads writing one path at once (each has a temporary of its own), leave no temporary
 * behind, and step past a temporary that is already there; mkdirs makes a nested path. Host only:
 * no device. */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_file.h"
#include "ct_test.h"

static char g_dir[256];

/* Files in g_dir whose name contains ".tmp." */
static int count_tmp(void) {
    DIR *d = opendir(g_dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));)
        n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

static void test_read(void) {
    ct_err err = {0};
    unsigned char *buf = NULL;
    size_t n = 7;
    char path[512];
    snprintf(path, sizeof path, "%s/missing.txt", g_dir);
    CT_ASSERT_EQ_INT(ct_file_read_all(path, &buf, &n, &err), CT_ERR_IO);
    CT_ASSERT_STR_CONTAINS(err.msg, "cannot open");
    CT_ASSERT_STR_CONTAINS(err.msg, path);
    CT_ASSERT(buf == NULL && n == 0);

    CT_ASSERT_EQ_INT(ct_file_read_all(g_dir, &buf, &n, &err), CT_ERR_IO); /* a folder */
    CT_ASSERT_STR_CONTAINS(err.msg, "not a regular file");

    snprintf(path, sizeof path, "%s/empty.txt", g_dir);
    CT_ASSERT_OK(ct_file_write_atomic(path, "", 0, &err), err.msg);
    CT_ASSERT_OK(ct_file_read_all(path, &buf, &n, &err), err.msg);
    CT_ASSERT(buf != NULL && n == 0 && buf[0] == 0);
    free(buf);

    snprintf(path, sizeof path, "%s/hello.txt", g_dir);
    CT_ASSERT_OK(ct_file_write_atomic(path, "hello", 5, &err), err.msg);
    CT_ASSERT_OK(ct_file_read_all(path, &buf, &n, &err), err.msg);
    CT_ASSERT_EQ_INT(n, 5);
    CT_ASSERT(buf && !strcmp((const char *)buf, "hello")); /* NUL after the content */
    free(buf);
    CT_ASSERT_EQ_INT(count_tmp(), 0);
}

static void test_streamed(void) {
    ct_err err = {0};
    char path[512];
    snprintf(path, sizeof path, "%s/streamed.bin", g_dir);
    CT_ASSERT_OK(ct_file_write_atomic(path, "old", 3, &err), err.msg);
    ct_atomic_file af;
    CT_ASSERT_OK(ct_atomic_file_open(&af, path, &err), err.msg);
    CT_ASSERT_OK(ct_atomic_file_write(&af, "new", 3, &err), err.msg);
    CT_ASSERT_EQ_INT(count_tmp(), 1);
    ct_atomic_file_abort(&af); /* the old content stays, the temporary goes */
    ct_atomic_file_abort(&af); /* twice: a no-op */
    CT_ASSERT_EQ_INT(count_tmp(), 0);
    unsigned char *buf = NULL;
    size_t n = 0;
    CT_ASSERT_OK(ct_file_read_all(path, &buf, &n, &err), err.msg);
    CT_ASSERT(buf && n == 3 && !memcmp(buf, "old", 3));
    free(buf);

    /* a temporary of this process already there (a writer of this path that died in a fork, or
     * another thread's): the write takes the next name and leaves that one alone */
    char stale[600];
    snprintf(stale, sizeof stale, "%s.tmp.%ld.0", path, (long)getpid());
    FILE *f = fopen(stale, "wb");
    CT_ASSERT(f != NULL);
    if (f) fclose(f);
    CT_ASSERT_OK(ct_atomic_file_open(&af, path, &err), err.msg);
    CT_ASSERT(strcmp(af.tmp, stale) != 0);
    CT_ASSERT_OK(ct_atomic_file_write(&af, "newer", 5, &err), err.msg);
    CT_ASSERT_OK(ct_atomic_file_commit(&af, &err), err.msg);
    CT_ASSERT_OK(ct_file_read_all(path, &buf, &n, &err), err.msg);
    CT_ASSERT(buf && n == 5 && !memcmp(buf, "newer", 5));
    free(buf);
    CT_ASSERT_EQ_INT(count_tmp(), 1);
    remove(stale);

    /* a folder that does not exist: the error names the temporary and the target */
    snprintf(path, sizeof path, "%s/no/such/dir/x.bin", g_dir);
    CT_ASSERT_EQ_INT(ct_file_write_atomic(path, "x", 1, &err), CT_ERR_IO);
    CT_ASSERT_STR_CONTAINS(err.msg, "cannot create");
    CT_ASSERT_STR_CONTAINS(err.msg, path);
}

/* Two threads write one path, each many times, each its own content: every write succeeds, the
 * file always holds one writer's whole content, and no temporary is left. */
enum { WRITES = 200, BYTES = 1 << 16 };
typedef struct writer {
    const char *path;
    unsigned char fill;
    int failures;
    char msg[CT_ERR_MSG_MAX];
} writer;

static void *write_many(void *arg) {
    writer *w = arg;
    unsigned char *data = malloc(BYTES);
    if (!data) {
        w->failures = WRITES;
        return NULL;
    }
    memset(data, w->fill, BYTES);
    for (int i = 0; i < WRITES; i++) {
        ct_err err = {0};
        if (ct_file_write_atomic(w->path, data, BYTES, &err) != CT_OK) {
            w->failures++;
            snprintf(w->msg, sizeof w->msg, "%s", err.msg);
        }
    }
    free(data);
    return NULL;
}

static void test_two_threads(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/shared.bin", g_dir);
    writer w[2] = {{path, 'A', 0, ""}, {path, 'B', 0, ""}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CT_ASSERT_EQ_INT(pthread_create(&t[i], NULL, write_many, &w[i]), 0);
    /* read while they write: always a whole file of one letter */
    for (int r = 0; r < 100; r++) {
        ct_err err = {0};
        unsigned char *buf = NULL;
        size_t n = 0;
        if (ct_file_read_all(path, &buf, &n, &err) != CT_OK) continue; /* not written yet */
        int whole = n == BYTES && (buf[0] == 'A' || buf[0] == 'B');
        for (size_t i = 1; whole && i < n; i++)
            whole = buf[i] == buf[0];
        CT_ASSERT_MSG(whole, "read %zu bytes starting '%c': a mix or a part", n, n ? buf[0] : '?');
        free(buf);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++)
        CT_ASSERT_MSG(w[i].failures == 0, "writer %c failed %d times: %s", w[i].fill, w[i].failures,
                      w[i].msg);
    CT_ASSERT_EQ_INT(count_tmp(), 0);
}

static void test_mkdirs(void) {
    ct_err err = {0};
    char path[512];
    struct stat sb;
    snprintf(path, sizeof path, "%s/a/b/c", g_dir);
    CT_ASSERT_OK(ct_file_mkdirs(path, &err), err.msg);
    CT_ASSERT(stat(path, &sb) == 0 && S_ISDIR(sb.st_mode));
    CT_ASSERT_OK(ct_file_mkdirs(path, &err), err.msg);      /* exists: fine */
    snprintf(path, sizeof path, "%s/hello.txt/sub", g_dir); /* through a file */
    CT_ASSERT_EQ_INT(ct_file_mkdirs(path, &err), CT_ERR_IO);
    CT_ASSERT_STR_CONTAINS(err.msg, "hello.txt/sub");
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "%s/ct_test_file_XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_read();
    test_streamed();
    test_two_threads();
    test_mkdirs();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return ct_test_end("test_cl_file");
}
