/* ct_alloc.h - the one place cltrain's libraries allocate through (cl/alloc.c), and its fault
 * injection hook. Kept apart from ct_cl.h so host-only code (the engine's file readers) can use
 * it without OpenCL's headers. */
#ifndef CT_ALLOC_H
#define CT_ALLOC_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every host allocation of cltrain's libraries goes through these (free with free()), and every
 * device buffer through ct_buffer_alloc: one place a test can make allocations fail. */
void *ct_malloc(size_t bytes);
void *ct_calloc(size_t n, size_t size);
void *ct_realloc(void *p, size_t bytes);
char *ct_strdup(const char *s);

/* Fault injection, for tests. A hook sees every allocation (kind, bytes) before it is made;
 * returning non-zero makes it fail as if the memory were not there (host: NULL, so the caller
 * reports CT_ERR_NOMEM; device: CT_ERR_DEVICE_MEM naming the buffer). Process-wide;
 * thread-safe. NULL removes it.
 *
 *     for (long n = 1;; n++) {                       // SQLite's loop: every allocation fails once
 *         ct_alloc_fail_nth(n, CT_ALLOC_HOST | CT_ALLOC_DEVICE);
 *         ct_status st = build_everything(&err);      // a clean status + message, or CT_OK
 *         int fired = ct_alloc_failed();
 *         ct_alloc_fail_nth(0, 0);
 *         free_everything();
 *         if (!fired) break;                          // n passed the last allocation: done
 *     } */
typedef enum ct_alloc_kind { CT_ALLOC_HOST = 1, CT_ALLOC_DEVICE = 2 } ct_alloc_kind;
typedef int (*ct_alloc_hook_fn)(void *user, ct_alloc_kind kind, size_t bytes);
void ct_alloc_set_hook(ct_alloc_hook_fn fn, void *user);
/* The built-in hook: the n-th allocation (1-based) of the given kinds from now on fails, once;
 * n = 0 or kinds = 0 removes any hook. ct_alloc_count: allocations of those kinds seen since;
 * ct_alloc_failed: 0 while the n-th has not come, 1 once it failed, 2 if it was one whose
 * failure the library survives by design (a "benign" allocation, as SQLite calls them: reading
 * or writing the on-disk program cache, which is only an optimisation), so the call that made it
 * may well succeed. */
void ct_alloc_fail_nth(long n, unsigned kinds);
long ct_alloc_count(void);
int ct_alloc_failed(void);

#ifdef __cplusplus
}
#endif
#endif /* CT_ALLOC_H */
