/* clblast.c - the process-wide guard around CLBlast: a reader-writer lock that lets GEMMs on
 * different devices enqueue at once while keeping every call that may write CLBlast's caches to
 * itself, and the count of open devices that decides when its program cache is cleared.
 *
 * Why not one lock per device, nor none. CLBlast (1.5.3 here, Debian 12's) keeps three
 * process-wide caches, each behind its own mutex (src/cache.cpp): compiled binaries keyed by
 * (platform, precision, routine, device NAME), programs keyed by (context, device, precision,
 * routine), tuning databases keyed by (platform, device, precision, kernel). A call looks its
 * routine up and, on a miss, compiles it and stores it. Two threads that miss the same key both
 * compile and both store: a build with C++14 or later keeps a std::map and throws "object already
 * in cache" at the second store, failing that call (CLBlast's issue 486, fixed in 1.6.1 by PR
 * 495); Debian's (-std=c++11) keeps a vector and appends a duplicate. The binary key holds the
 * device's name, not its id, so two devices of one kind (two PoCL "pthread" devices, two H100s)
 * meet on it: a lock per device would not keep them apart. CLBlastOverrideParameters removes then
 * stores a database entry (two steps; seen crashing when two workers opened their devices
 * together), CLBlastClearCache empties every cache, and the first GEMM of four worker threads
 * sharing one GPU was seen to segfault one run in three (NVIDIA, before any lock; not
 * root-caused: each of these is a call that compiles or writes a cache). Every other part of a call
 * reads: the cache lookups (each under its mutex), clCreateKernel on a cached program and the
 * enqueues (OpenCL calls, thread-safe), a kernel object of the call's own.
 *
 * So: a GEMM whose shape this device handle has run before (its routine is then in every
 * cache: a lookup cannot miss) takes the lock shared; anything that may store takes it
 * exclusively: the first GEMM of a shape on a handle, parameter overrides, clearing the cache.
 * Overrides and clears change which routine a shape needs, so they start a new generation and
 * every handle's shapes count as new again. The lock guards a third-party library; it carries
 * no device or layout state (the shapes a handle has run live on the handle). */
#include <pthread.h>

#include <clblast_c.h>

#include "ct_cl_impl.h"

static pthread_rwlock_t clblast_lock = PTHREAD_RWLOCK_INITIALIZER;
static unsigned long clblast_gen = 1; /* written under the exclusive lock, read under either */

void ct__clblast_lock(void) {
    pthread_rwlock_wrlock(&clblast_lock);
    clblast_gen++; /* an override or a clear follows: every shape is new again */
}
void ct__clblast_unlock(void) { pthread_rwlock_unlock(&clblast_lock); }

static int key_eq(const ct__gemm_key *a, const ct__gemm_key *b) {
    return a->kind == b->kind && a->ta == b->ta && a->tb == b->tb && a->m == b->m && a->n == b->n &&
           a->k == b->k;
}

static int seen(const ct_device *d, const ct__gemm_key *k) {
    if (d->gemm_seen_gen != clblast_gen) return 0;
    for (int i = 0; i < d->gemm_nseen; i++)
        if (key_eq(&d->gemm_seen[i], k)) return 1;
    return 0;
}

int ct__clblast_gemm_begin(ct_device *d, const ct__gemm_key *k) {
    pthread_rwlock_rdlock(&clblast_lock);
    if (seen(d, k)) return 0;
    pthread_rwlock_unlock(&clblast_lock);
    pthread_rwlock_wrlock(&clblast_lock);
    return 1;
}

void ct__clblast_gemm_end(ct_device *d, const ct__gemm_key *k, int exclusive, int ok) {
    if (exclusive && ok && !seen(d, k)) {
        if (d->gemm_seen_gen != clblast_gen) d->gemm_nseen = 0, d->gemm_seen_gen = clblast_gen;
        /* a full table only means that more shapes keep taking the lock exclusively */
        if (d->gemm_nseen < CT__GEMM_SEEN_MAX) d->gemm_seen[d->gemm_nseen++] = *k;
    }
    pthread_rwlock_unlock(&clblast_lock);
}

/* CLBlast keeps every routine it compiled in a process-wide cache keyed by context, and each
 * cached program holds a reference to its context: a context we release stays alive inside
 * CLBlast for the life of the process. A program that opens and frees devices again and again
 * (the planner's calibration then the real run, bench_plan's layouts one after another) piled
 * them up until the NVIDIA driver refused the next clCreateContext (CL_OUT_OF_HOST_MEMORY after
 * about a hundred, on an H100). CLBlast's C API can only clear the whole cache, so it is cleared
 * when the last open device of the process is freed; a device opened later compiles its routines
 * again (the drivers' own binary caches make that cheap). Counted under the exclusive lock: the
 * count describes CLBlast's process-wide cache, not any device or layout. */
static int clblast_devices;
void ct__clblast_device_open(void) {
    ct__clblast_lock();
    clblast_devices++;
    ct__clblast_unlock();
}
void ct__clblast_device_close(void) {
    ct__clblast_lock();
    if (--clblast_devices == 0) CLBlastClearCache();
    ct__clblast_unlock();
}
