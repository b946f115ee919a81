/* ct_test.h - the one assert header of cltrain's test executables (header-only: each test is
 * one executable, so its counters are the executable's).
 *
 * Every assert prints both operands and file:line, counts the failure and goes on (so one run
 * shows every broken case); ct_test_end returns non-zero when anything failed. A REQUIRE stops
 * instead: it fails and returns from the current test function (a collective test registers a
 * stop that ends every worker instead, ct_test_mpi.h, so no worker waits for one that left).
 *
 * Safe under threads (OpenMP workers, pthreads): the counters are atomic and each failure is one
 * line written at once, never interleaved with another thread's. Under MPI each failure names
 * its rank ("[rank 1]") once the test called ct_test_mpi_begin (ct_test_mpi.h), whose
 * ct_test_mpi_end sums the counts over every rank so each rank's exit status reflects them all.
 * A context label (ct_test_context: an algorithm, a case) may prefix a thread's failures.
 *
 *     int main(void) {
 *         CT_ASSERT_EQ_INT(1 + 1, 2);
 *         CT_ASSERT_NEAR(0.1f + 0.2f, 0.3f, 1e-6);
 *         return ct_test_end("test_example");
 *     }
 *     static void test_case(ct_device *dev) {
 *         ct_buffer *b = NULL;
 *         CT_REQUIRE_OK(ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "b", 64, &b),
 *                       ct_device_errmsg(dev));
 *         ...                                   // reached only when the allocation worked
 *     }
 *
 * Companions: ct_test_dev.h (the device a test runs on), ct_test_mpi.h (ranks), ct_test_exec.h
 * (a training step through the executor). */
#ifndef CT_TEST_H
#define CT_TEST_H

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Checks made and failed in this executable (this process; ct_test_mpi_end sums over ranks). */
static atomic_int ct_test_failures = 0;
static atomic_int ct_test_checks = 0;
/* This process's MPI rank, -1 without MPI (set by ct_test_mpi_begin). */
static int ct__test_rank = -1;
/* What a failed REQUIRE does before returning (NULL: only return): ct_test_mpi_begin's ends
 * every worker. */
static void (*ct__test_stop_hook)(void) = NULL;
/* The calling thread's context label, printed in its failures (NULL: none). */
static _Thread_local const char *ct__test_ctx = NULL;

static inline void ct_test_context(const char *label) { ct__test_ctx = label; }

/* One failure: counted, and printed as one line "file:line: FAIL [rank r] [context] message". */
static inline void ct__test_fail(const char *file, int line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static inline void ct__test_fail(const char *file, int line, const char *fmt, ...) {
    char buf[2048];
    int n = snprintf(buf, sizeof buf, "%s:%d: FAIL", file, line);
    if (n > 0 && ct__test_rank >= 0 && (size_t)n < sizeof buf)
        n += snprintf(buf + n, sizeof buf - (size_t)n, " [rank %d]", ct__test_rank);
    if (n > 0 && ct__test_ctx && (size_t)n < sizeof buf)
        n += snprintf(buf + n, sizeof buf - (size_t)n, " [%s]", ct__test_ctx);
    if (n > 0 && (size_t)n < sizeof buf - 2) {
        buf[n++] = ':', buf[n++] = ' ';
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
        va_end(ap);
    }
    /* one write per line: a thread's line is never cut by another's */
    flockfile(stderr);
    fputs(buf, stderr);
    fputc('\n', stderr);
    fflush(stderr);
    funlockfile(stderr);
    atomic_fetch_add(&ct_test_failures, 1);
}

/* A failure outside an assert (a comparison the test makes itself). */
#define CT__FAIL(...) ct__test_fail(__FILE__, __LINE__, __VA_ARGS__)
/* Count one check (the asserts do; a test that decides a failure itself calls it once). */
#define CT_TEST_CHECK() atomic_fetch_add(&ct_test_checks, 1)

#define CT_ASSERT(cond)                                         \
    do {                                                        \
        CT_TEST_CHECK();                                        \
        if (!(cond)) CT__FAIL("%s", #cond);                     \
    } while (0)

#define CT_ASSERT_MSG(cond, ...)                                \
    do {                                                        \
        CT_TEST_CHECK();                                        \
        if (!(cond)) CT__FAIL(__VA_ARGS__);                     \
    } while (0)

#define CT_ASSERT_EQ_INT(a, b)                                                           \
    do {                                                                                 \
        long long ct__a = (long long)(a), ct__b = (long long)(b);                        \
        CT_TEST_CHECK();                                                                 \
        if (ct__a != ct__b) CT__FAIL("%s == %s (%lld != %lld)", #a, #b, ct__a, ct__b); \
    } while (0)

#define CT_ASSERT_NE_INT(a, b)                                                           \
    do {                                                                                 \
        long long ct__a = (long long)(a), ct__b = (long long)(b);                        \
        CT_TEST_CHECK();                                                                 \
        if (ct__a == ct__b) CT__FAIL("%s != %s (both %lld)", #a, #b, ct__a);            \
    } while (0)

#define CT_ASSERT_STR_CONTAINS(hay, needle)                                                \
    do {                                                                                   \
        const char *ct__h = (hay), *ct__n = (needle);                                      \
        CT_TEST_CHECK();                                                                   \
        if (!ct__h || !strstr(ct__h, ct__n))                                               \
            CT__FAIL("%s contains \"%s\" (it is \"%s\")", #hay, ct__n, ct__h ? ct__h : "(null)"); \
    } while (0)

#define CT_ASSERT_NEAR(a, b, tol)                                                        \
    do {                                                                                 \
        double ct__a = (double)(a), ct__b = (double)(b);                                 \
        CT_TEST_CHECK();                                                                 \
        if (!(fabs(ct__a - ct__b) <= (tol)))                                             \
            CT__FAIL("|%s - %s| <= %g (%.9g vs %.9g)", #a, #b, (double)(tol), ct__a, ct__b); \
    } while (0)

/* An assert labelled with its case (a context string: "allreduce ring n=3 count=7"), printed
 * as "[label]" in its failure line. */
#define CT_ASSERT_IN(label, cond, ...)                          \
    do {                                                        \
        CT_TEST_CHECK();                                        \
        if (!(cond)) {                                          \
            const char *ct__o = ct__test_ctx;                   \
            ct__test_ctx = (label);                             \
            CT__FAIL(__VA_ARGS__);                              \
            ct__test_ctx = ct__o;                               \
        }                                                       \
    } while (0)

/* A status-returning call that must succeed; prints the message source on failure. */
#define CT_ASSERT_OK(expr, msg)                                                           \
    do {                                                                                  \
        int ct__s = (int)(expr);                                                          \
        CT_TEST_CHECK();                                                                  \
        if (ct__s != 0) CT__FAIL("%s returned %d: %s", #expr, ct__s, (msg));             \
    } while (0)

/* ---- REQUIRE: what the rest of the test function cannot do without. A failure is counted and
 * printed like an assert's, then the stop hook runs (a collective test's: every worker ends)
 * and the current function returns (the _OR forms return `ret` from a function with a value). */
static inline void ct__test_stop(void) {
    if (ct__test_stop_hook) ct__test_stop_hook();
}

#define CT_REQUIRE_OR(cond, ret, ...)                           \
    do {                                                        \
        CT_TEST_CHECK();                                        \
        if (!(cond)) {                                          \
            CT__FAIL(__VA_ARGS__);                              \
            ct__test_stop();                                    \
            return ret;                                         \
        }                                                       \
    } while (0)
#define CT_REQUIRE_OK_OR(expr, msg, ret)                                                  \
    do {                                                                                  \
        int ct__s = (int)(expr);                                                          \
        CT_TEST_CHECK();                                                                  \
        if (ct__s != 0) {                                                                 \
            CT__FAIL("%s returned %d: %s", #expr, ct__s, (msg));                         \
            ct__test_stop();                                                              \
            return ret;                                                                   \
        }                                                                                 \
    } while (0)
/* In a function returning void (the empty `ret`). */
#define CT_REQUIRE(cond) CT_REQUIRE_OR(cond, , "required: %s", #cond)
#define CT_REQUIRE_OK(expr, msg) CT_REQUIRE_OK_OR(expr, msg, )

/* Largest |a-b| / (atol + rtol*|b|) over n floats; <= 1 means every element is within tolerance. */
static inline double ct_test_max_err(const float *a, const float *b, size_t n, double atol,
                                     double rtol, size_t *worst) {
    double m = 0;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]) / (atol + rtol * fabs((double)b[i]));
        if (!(d <= m)) { m = d; w = i; }
        if (isnan(a[i]) != isnan(b[i])) { m = INFINITY; w = i; break; }
    }
    if (worst) *worst = w;
    return m;
}

#define CT_ASSERT_CLOSE_ARRAY(a, b, n, atol, rtol)                                        \
    do {                                                                                  \
        size_t ct__w = 0;                                                                 \
        double ct__e = ct_test_max_err((a), (b), (n), (atol), (rtol), &ct__w);            \
        CT_TEST_CHECK();                                                                  \
        if (!(ct__e <= 1.0))                                                              \
            CT__FAIL("%s ~ %s: element %zu is %.9g vs %.9g (err %.3g x tolerance)", #a, #b, \
                     ct__w, (double)(a)[ct__w], (double)(b)[ct__w], ct__e);               \
    } while (0)

/* The tally line "name: N checks, F failed" and the exit status (this process's counts; under
 * MPI use ct_test_mpi_end, which sums every rank's). */
static inline int ct_test_end(const char *name) {
    int f = atomic_load(&ct_test_failures);
    printf("%s: %d checks, %d failed\n", name, atomic_load(&ct_test_checks), f);
    return f ? 1 : 0;
}

#endif /* CT_TEST_H */
