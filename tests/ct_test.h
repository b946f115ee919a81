/* ct_test.h - a tiny assert header for cltrain's test executables.
 *
 * Every assert prints both operands and file:line, counts the failure and goes on (so one run
 * shows every broken case); CT_TEST_MAIN's epilogue returns non-zero when anything failed.
 *
 *     int main(void) {
 *         CT_ASSERT_EQ_INT(1 + 1, 2);
 *         CT_ASSERT_NEAR(0.1f + 0.2f, 0.3f, 1e-6);
 *         return ct_test_end("test_example");
 *     }
 */
#ifndef CT_TEST_H
#define CT_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ct_test_failures = 0;
static int ct_test_checks = 0;

#define CT__FAIL(...)                                              \
    do {                                                           \
        fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);      \
        fprintf(stderr, __VA_ARGS__);                              \
        fprintf(stderr, "\n");                                     \
        ct_test_failures++;                                        \
    } while (0)

#define CT_ASSERT(cond)                                         \
    do {                                                        \
        ct_test_checks++;                                       \
        if (!(cond)) CT__FAIL("%s", #cond);                     \
    } while (0)

#define CT_ASSERT_MSG(cond, ...)                                \
    do {                                                        \
        ct_test_checks++;                                       \
        if (!(cond)) CT__FAIL(__VA_ARGS__);                     \
    } while (0)

#define CT_ASSERT_EQ_INT(a, b)                                                           \
    do {                                                                                 \
        long long ct__a = (long long)(a), ct__b = (long long)(b);                        \
        ct_test_checks++;                                                                \
        if (ct__a != ct__b) CT__FAIL("%s == %s (%lld != %lld)", #a, #b, ct__a, ct__b); \
    } while (0)

#define CT_ASSERT_NE_INT(a, b)                                                           \
    do {                                                                                 \
        long long ct__a = (long long)(a), ct__b = (long long)(b);                        \
        ct_test_checks++;                                                                \
        if (ct__a == ct__b) CT__FAIL("%s != %s (both %lld)", #a, #b, ct__a);            \
    } while (0)

#define CT_ASSERT_STR_CONTAINS(hay, needle)                                                \
    do {                                                                                   \
        const char *ct__h = (hay), *ct__n = (needle);                                      \
        ct_test_checks++;                                                                  \
        if (!ct__h || !strstr(ct__h, ct__n))                                               \
            CT__FAIL("%s contains \"%s\" (it is \"%s\")", #hay, ct__n, ct__h ? ct__h : "(null)"); \
    } while (0)

#define CT_ASSERT_NEAR(a, b, tol)                                                        \
    do {                                                                                 \
        double ct__a = (double)(a), ct__b = (double)(b);                                 \
        ct_test_checks++;                                                                \
        if (!(fabs(ct__a - ct__b) <= (tol)))                                             \
            CT__FAIL("|%s - %s| <= %g (%.9g vs %.9g)", #a, #b, (double)(tol), ct__a, ct__b); \
    } while (0)

/* A status-returning call that must succeed; prints the message source on failure. */
#define CT_ASSERT_OK(expr, msg)                                                           \
    do {                                                                                  \
        int ct__s = (int)(expr);                                                          \
        ct_test_checks++;                                                                 \
        if (ct__s != 0) CT__FAIL("%s returned %d: %s", #expr, ct__s, (msg));             \
    } while (0)

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
        ct_test_checks++;                                                                 \
        if (!(ct__e <= 1.0))                                                              \
            CT__FAIL("%s ~ %s: element %zu is %.9g vs %.9g (err %.3g x tolerance)", #a, #b, \
                     ct__w, (double)(a)[ct__w], (double)(b)[ct__w], ct__e);               \
    } while (0)

static inline int ct_test_end(const char *name) {
    printf("%s: %d checks, %d failed\n", name, ct_test_checks, ct_test_failures);
    return ct_test_failures ? 1 : 0;
}

#endif /* CT_TEST_H */
