/* test_cl_program - programs are built once per device, cached on disk so that a second process
 * skips compilation, a corrupted or truncated cache entry is detected and rebuilt, and a build
 * error returns the compiler log. Phases run in child processes (this same executable). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ct_cl.h"
#include "ct_test.h"

static const char kSrcText[] =
    "__kernel void axpb(__global float *y, __global const float *x, const float a,\n"
    "                   const float b, const unsigned n) {\n"
    "    size_t i = get_global_id(0);\n"
    "    if (i < n) y[i] = a * x[i] + b;\n"
    "}\n";
static const ct_cl_source kSrc = {"test_axpb", kSrcText, sizeof kSrcText - 1};
static const char kBadText[] = "__kernel void broken(__global float *y) { y[0] = undefined_name; }\n";
static const ct_cl_source kBad = {"test_broken", kBadText, sizeof kBadText - 1};

static ct_device *open_dev(const char *cache_dir, ct_device_info **list) {
    ct_err err = {0};
    int n = 0, pick = 0, np = 0;
    ct_device *d = NULL;
    if (ct_device_list(list, &n, &err) || ct_device_select(*list, n, NULL, 1, &pick, &np, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return NULL;
    }
    ct_device_opts o = ct_device_opts_default();
    o.cache_dir = cache_dir;
    o.apply_tuning = 0;
    if (ct_device_open(&d, &(*list)[pick], &o, &err)) fprintf(stderr, "%s\n", err.msg);
    return d;
}

/* Build the kernel and run it once; check its result. */
static void use_kernel(ct_device *d) {
    cl_kernel k = NULL, k2 = NULL;
    CT_ASSERT_OK(ct_kernel_get(d, &kSrc, "-DUNUSED=1", "axpb", &k), ct_device_errmsg(d));
    CT_ASSERT_OK(ct_kernel_get(d, &kSrc, "-DUNUSED=1", "axpb", &k2), ct_device_errmsg(d));
    CT_ASSERT(k != NULL && k == k2); /* created once, reused */
    if (!k) return;
    enum { N = 1000 };
    float x[N], y[N];
    for (int i = 0; i < N; i++) x[i] = (float)i;
    ct_buffer *bx = NULL, *by = NULL;
    CT_ASSERT_OK(ct_buffer_alloc(d, CT_MEM_WORKSPACE, "x", sizeof x, &bx), ct_device_errmsg(d));
    CT_ASSERT_OK(ct_buffer_alloc(d, CT_MEM_WORKSPACE, "y", sizeof y, &by), ct_device_errmsg(d));
    if (!bx || !by) return;
    CT_ASSERT_OK(ct_buffer_write(bx, 0, x, sizeof x), ct_device_errmsg(d));
    cl_mem my = ct_buffer_mem(by), mx = ct_buffer_mem(bx);
    float a = 2.0f, b = -1.0f;
    unsigned n = N;
    size_t global = N;
    CT_ASSERT_OK(ct_kernel_set_arg(d, k, 0, sizeof my, &my), ct_device_errmsg(d));
    CT_ASSERT_OK(ct_kernel_set_arg(d, k, 1, sizeof mx, &mx), ct_device_errmsg(d));
    CT_ASSERT_OK(ct_kernel_set_arg(d, k, 2, sizeof a, &a), ct_device_errmsg(d));
    CT_ASSERT_OK(ct_kernel_set_arg(d, k, 3, sizeof b, &b), ct_device_errmsg(d));
    CT_ASSERT_OK(ct_kernel_set_arg(d, k, 4, sizeof n, &n), ct_device_errmsg(d));
    CT_ASSERT_OK(ct_kernel_launch(d, k, 1, &global, NULL, NULL), ct_device_errmsg(d));
    CT_ASSERT_OK(ct_buffer_read(by, 0, y, sizeof y), ct_device_errmsg(d));
    int wrong = 0;
    for (int i = 0; i < N; i++) wrong += y[i] != 2.0f * i - 1.0f;
    CT_ASSERT_EQ_INT(wrong, 0);
    ct_buffer_free(bx), ct_buffer_free(by);
}

/* Child: build+run, then print "builds disk_hits disk_rejects disk_writes". */
static int child(const char *dir) {
    ct_device_info *list = NULL;
    ct_device *d = open_dev(dir, &list);
    if (!d) return 3;
    use_kernel(d);
    ct_program_cache_stats s;
    ct_device_program_cache_stats(d, &s);
    printf("%d %d %d %d\n", s.builds, s.disk_hits, s.disk_rejects, s.disk_writes);
    fflush(stdout);
    ct_device_free(d);
    ct_device_list_free(list);
    return ct_test_failures ? 1 : 0;
}

/* Run the child phase, parse its counters. */
static int run_child(const char *self, const char *dir, int st[4]) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        execl(self, self, "--child", dir, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char buf[256] = "";
    ssize_t r = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (r > 0) buf[r] = '\0';
    if (sscanf(buf, "%d %d %d %d", &st[0], &st[1], &st[2], &st[3]) != 4) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--child")) return child(argv[2]);
    char dir[] = "/tmp/ct_test_cache_XXXXXX";
    CT_ASSERT(mkdtemp(dir) != NULL);
    char self[1024];
    ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
    CT_ASSERT(sl > 0);
    if (sl <= 0) return ct_test_end("test_cl_program");
    self[sl] = '\0';

    /* 1. this process: a fresh cache builds and writes the entry; a second get is a memory hit */
    ct_device_info *list = NULL;
    ct_device *d = open_dev(dir, &list);
    CT_ASSERT(d != NULL);
    if (!d) return ct_test_end("test_cl_program");
    use_kernel(d);
    ct_program_cache_stats s;
    ct_device_program_cache_stats(d, &s);
    CT_ASSERT_EQ_INT(s.builds, 1);
    CT_ASSERT_EQ_INT(s.disk_hits, 0);
    CT_ASSERT_EQ_INT(s.disk_writes, 1);
    CT_ASSERT(s.memory_hits >= 1);
    char path[1200];
    CT_ASSERT_OK(ct_program_cache_path(d, &kSrc, "-DUNUSED=1", path, sizeof path), ct_device_errmsg(d));
    CT_ASSERT(access(path, R_OK) == 0);
    /* other options are another entry */
    char path2[1200];
    ct_program_cache_path(d, &kSrc, "-DUNUSED=2", path2, sizeof path2);
    CT_ASSERT(strcmp(path, path2) != 0);
    /* a build error returns the compiler log */
    cl_program bad = NULL;
    CT_ASSERT_EQ_INT(ct_program_get(d, &kBad, "", &bad), CT_ERR_BUILD);
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "test_broken");
    CT_ASSERT_STR_CONTAINS(ct_device_errmsg(d), "undefined_name");
    ct_device_free(d);
    ct_device_list_free(list);

    /* 2. a second process hits the disk cache and compiles nothing */
    int st[4] = {-1, -1, -1, -1};
    CT_ASSERT_EQ_INT(run_child(self, dir, st), 0);
    CT_ASSERT_EQ_INT(st[0], 0); /* builds */
    CT_ASSERT_EQ_INT(st[1], 1); /* disk hits */
    CT_ASSERT_EQ_INT(st[2], 0); /* rejects */

    /* 3. corrupt the entry (flip bytes in the middle): detected, rebuilt, rewritten */
    FILE *f = fopen(path, "r+b");
    CT_ASSERT(f != NULL);
    if (f) {
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, len / 2, SEEK_SET);
        fputs("garbage!", f);
        fclose(f);
    }
    CT_ASSERT_EQ_INT(run_child(self, dir, st), 0);
    CT_ASSERT_EQ_INT(st[0], 1); /* rebuilt */
    CT_ASSERT_EQ_INT(st[2], 1); /* the corrupt entry was rejected */
    CT_ASSERT_EQ_INT(st[3], 1); /* and rewritten */
    /* 4. truncated entry: same */
    CT_ASSERT(truncate(path, 10) == 0);
    CT_ASSERT_EQ_INT(run_child(self, dir, st), 0);
    CT_ASSERT_EQ_INT(st[0], 1);
    CT_ASSERT_EQ_INT(st[2], 1);
    /* 5. and the rewritten entry is good again */
    CT_ASSERT_EQ_INT(run_child(self, dir, st), 0);
    CT_ASSERT_EQ_INT(st[0], 0);
    CT_ASSERT_EQ_INT(st[1], 1);

    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return ct_test_end("test_cl_program");
}
