/* clblast.c - the process-wide guard around CLBlast: one lock for every call into it, and the
 * count of open devices that decides when its program cache is cleared. */
#include <pthread.h>

#include <clblast_c.h>

#include "ct_cl_impl.h"

/* CLBlast 1.5.3 (Debian 12's) is not safe to call from several threads at once:
 * CLBlastOverrideParameters updates a process-wide parameter database (seen crashing when two
 * workers opened their devices together), and storing a compiled routine in its cache races
 * (CLBlast's issue 486, fixed in 1.6.1 by its PR 495; seen here as a segfault in the first GEMM of
 * four worker threads sharing one GPU, one run in three). So every CLBlast call of the process is
 * serialised by this lock: overrides here, GEMMs in gemm.c. The calls only enqueue, so the lock
 * is held for microseconds, except while CLBlast compiles a routine the first time. It guards a
 * third-party library; it carries no device or layout state. */
static pthread_mutex_t clblast_lock = PTHREAD_MUTEX_INITIALIZER;
void ct__clblast_lock(void) { pthread_mutex_lock(&clblast_lock); }
void ct__clblast_unlock(void) { pthread_mutex_unlock(&clblast_lock); }

/* CLBlast keeps every routine it compiled in a process-wide cache keyed by context, and each
 * cached program holds a reference to its context: a context we release stays alive inside
 * CLBlast for the life of the process. A program that opens and frees devices again and again
 * (the planner's calibration then the real run, bench_plan's layouts one after another) piled
 * them up until the NVIDIA driver refused the next clCreateContext (CL_OUT_OF_HOST_MEMORY after
 * about a hundred, on an H100). CLBlast's C API can only clear the whole cache, so it is cleared
 * when the last open device of the process is freed; a device opened later compiles its routines
 * again (the drivers' own binary caches make that cheap). Counted under the CLBlast lock: the
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
