/* alloc.c - the one place cltrain's libraries allocate through: host memory (ct_malloc,
 * ct_calloc, ct_realloc; freed with free()) and device buffers (ct_buffer_alloc asks here
 * before OpenCL). It exists for fault injection (SQLite's and libuv's habit): a test makes the
 * N-th allocation fail and checks that the failure comes back as a status with a message,
 * leaking nothing. Off, the cost is one relaxed atomic load per allocation.
 *
 * This is process-wide state on purpose, like the allocator of the C library it wraps; it
 * carries no device or layout state and is never set outside tests. */
#include <stdlib.h>
#include <string.h>

#include "ct_cl_impl.h"

static ct_alloc_hook_fn hook_fn;     /* set and read with atomics: worker threads allocate */
static void *hook_user;

/* The built-in hook of ct_alloc_fail_nth. */
static long nth_target, nth_count;
static unsigned nth_kinds;
static int nth_fired;
/* Allocations whose failure the caller survives by design (SQLite's "benign" mallocs: the
 * program cache on disk is an optimisation; without memory to read it, the program is built from
 * source): this thread's depth of ct__alloc_benign_begin. */
static _Thread_local int benign;

void ct__alloc_benign_begin(void) { benign++; }
void ct__alloc_benign_end(void) { benign--; }

void ct_alloc_set_hook(ct_alloc_hook_fn fn, void *user) {
    __atomic_store_n(&hook_user, user, __ATOMIC_RELEASE);
    __atomic_store_n(&hook_fn, fn, __ATOMIC_RELEASE);
}

int ct__alloc_fails(ct_alloc_kind kind, size_t bytes) {
    ct_alloc_hook_fn fn = __atomic_load_n(&hook_fn, __ATOMIC_ACQUIRE);
    if (!fn) return 0;
    return fn(__atomic_load_n(&hook_user, __ATOMIC_ACQUIRE), kind, bytes) != 0;
}

static int nth_hook(void *user, ct_alloc_kind kind, size_t bytes) {
    (void)user;
    (void)bytes;
    if (!(nth_kinds & (unsigned)kind)) return 0;
    long k = __atomic_add_fetch(&nth_count, 1, __ATOMIC_ACQ_REL);
    if (k != nth_target) return 0;
    __atomic_store_n(&nth_fired, benign ? 2 : 1, __ATOMIC_RELEASE);
    return 1;
}

void ct_alloc_fail_nth(long n, unsigned kinds) {
    ct_alloc_set_hook(NULL, NULL);
    __atomic_store_n(&nth_count, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&nth_fired, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&nth_target, n, __ATOMIC_RELEASE);
    __atomic_store_n(&nth_kinds, kinds, __ATOMIC_RELEASE);
    if (kinds) ct_alloc_set_hook(nth_hook, NULL);
}

long ct_alloc_count(void) { return __atomic_load_n(&nth_count, __ATOMIC_ACQUIRE); }
int ct_alloc_failed(void) { return __atomic_load_n(&nth_fired, __ATOMIC_ACQUIRE); }

void *ct_malloc(size_t bytes) {
    return ct__alloc_fails(CT_ALLOC_HOST, bytes) ? NULL : malloc(bytes);
}

void *ct_calloc(size_t n, size_t size) {
    return ct__alloc_fails(CT_ALLOC_HOST, n * size) ? NULL : calloc(n, size);
}

void *ct_realloc(void *p, size_t bytes) {
    return ct__alloc_fails(CT_ALLOC_HOST, bytes) ? NULL : realloc(p, bytes);
}

char *ct_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = ct_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}
