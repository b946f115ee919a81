/* test_cl_clblast_lock - the CLBlast lock (cl/clblast.c) with four devices of one kind in one
 * process (POCL_DEVICES="pthread pthread pthread pthread"), each driven by its own thread, all
 * released at once by a barrier:
 *   - the first GEMMs of every shape on every device meet at once: the routines are compiled and
 *     stored into CLBlast's caches by four threads together, whose binary-cache key (the device's
 *     name) is the same on all four (CLBlast 1.5.3 fails the second store of a key, so only the
 *     lock keeps these calls apart); every device is freed after each round, which clears
 *     CLBlast's cache (the last device closed), so each of the 3 rounds compiles again;
 *   - then 40 calls per device of those shapes together (shapes already run: the lock is taken
 *     shared and the four enqueue at once);
 * every call succeeds and every result equals the product computed on the host (small integers:
 * exact in fp32). The shapes take CLBlast's direct kernel (small) and its indirect one (large),
 * one product per call and strided-batched. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_cl.h"
#include "ct_test.h"
#include "ct_test_dev.h"

enum { NDEV = 4, ROUNDS = 3, REPS = 40 };

typedef struct shape {
    size_t m, n, k, batch;
    int ta, tb;
} shape;

static const shape kShapes[] = {
    {33, 17, 9, 1, 0, 1},   /* direct */
    {256, 256, 256, 1, 0, 0}, /* indirect on CLBlast's and the shipped PoCL parameters */
    {40, 24, 16, 3, 1, 0},  /* strided-batched, A transposed (at offset 0) */
};
#define NSHAPES (int)(sizeof kShapes / sizeof kShapes[0])

/* One shape on one device: A, B filled with small integers of the worker's own, C = op(A) op(B)
 * per batch matrix; *wrong counts entries that differ from the host's product. */
typedef struct job {
    ct_buffer *a, *b, *c;
    float *A, *B, *C, *R;
} job;

static float op_at(const float *x, int t, size_t rows, size_t cols, size_t i, size_t j) {
    /* element (i, j) of op(X), rows x cols, X stored row-major (transposed: as cols x rows) */
    return t ? x[j * rows + i] : x[i * cols + j];
}

static int job_init(ct_device *d, const shape *s, int id, job *j) {
    size_t na = s->m * s->k * s->batch, nb = s->k * s->n * s->batch, nc = s->m * s->n * s->batch;
    memset(j, 0, sizeof *j);
    j->A = malloc(na * 4), j->B = malloc(nb * 4), j->C = malloc(nc * 4), j->R = malloc(nc * 4);
    if (!j->A || !j->B || !j->C || !j->R) return -1;
    for (size_t i = 0; i < na; i++) j->A[i] = (float)((i * 7 + (size_t)id) % 5) - 2.0f;
    for (size_t i = 0; i < nb; i++) j->B[i] = (float)((i * 3 + (size_t)id) % 7) - 3.0f;
    for (size_t b = 0; b < s->batch; b++) {
        const float *A = j->A + b * s->m * s->k, *B = j->B + b * s->k * s->n;
        for (size_t r = 0; r < s->m; r++)
            for (size_t c = 0; c < s->n; c++) {
                float v = 0;
                for (size_t p = 0; p < s->k; p++)
                    v += op_at(A, s->ta, s->m, s->k, r, p) * op_at(B, s->tb, s->k, s->n, p, c);
                j->R[b * s->m * s->n + r * s->n + c] = v;
            }
    }
    if (ct_buffer_alloc(d, CT_MEM_WORKSPACE, "A", na * 4, &j->a) ||
        ct_buffer_alloc(d, CT_MEM_WORKSPACE, "B", nb * 4, &j->b) ||
        ct_buffer_alloc(d, CT_MEM_WORKSPACE, "C", nc * 4, &j->c) ||
        ct_buffer_write(j->a, 0, j->A, na * 4) || ct_buffer_write(j->b, 0, j->B, nb * 4))
        return -1;
    return 0;
}

static void job_free(job *j) {
    ct_buffer_free(j->a), ct_buffer_free(j->b), ct_buffer_free(j->c);
    free(j->A), free(j->B), free(j->C), free(j->R);
}

static ct_status job_run(ct_device *d, const shape *s, job *j) {
    size_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    cl_mem a = ct_buffer_mem(j->a), b = ct_buffer_mem(j->b), c = ct_buffer_mem(j->c);
    if (s->batch == 1)
        return ct_gemm(d, s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, 0, lda, b, 0, ldb, 0.0f, c, 0,
                       s->n, NULL);
    return ct_gemm_strided_batched(d, s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, 0, lda, s->m * s->k,
                                   b, 0, ldb, s->k * s->n, 0.0f, c, 0, s->n, s->m * s->n, s->batch,
                                   NULL);
}

static long job_wrong(const shape *s, job *j) {
    size_t nc = s->m * s->n * s->batch;
    if (ct_buffer_read(j->c, 0, j->C, nc * 4) != CT_OK) return -1;
    long w = 0;
    for (size_t i = 0; i < nc; i++) w += j->C[i] != j->R[i];
    return w;
}

/* One thread's round: buffers ready, then every thread at the barrier, then the first calls
 * (checked), then REPS more of each shape, checked at the end. Reaches both barriers always. */
static void worker(ct_device *d, int id, long *wrong, char *msg, size_t len) {
    job jobs[NSHAPES];
    int ok = 1;
    for (int s = 0; s < NSHAPES; s++) ok = job_init(d, &kShapes[s], id, &jobs[s]) == 0 && ok;
    if (!ok) snprintf(msg, len, "device %d setup: %s", id, ct_device_errmsg(d));
#pragma omp barrier
    for (int s = 0; s < NSHAPES && ok; s++) {
        if (job_run(d, &kShapes[s], &jobs[s]) != CT_OK) {
            snprintf(msg, len, "device %d, first call of shape %d: %s", id, s, ct_device_errmsg(d));
            ok = 0;
        } else if (job_wrong(&kShapes[s], &jobs[s]) != 0) {
            snprintf(msg, len, "device %d, first call of shape %d: wrong result", id, s);
            ok = 0;
        }
    }
#pragma omp barrier
    for (int r = 0; r < REPS && ok; r++)
        for (int s = 0; s < NSHAPES && ok; s++)
            if (job_run(d, &kShapes[s], &jobs[s]) != CT_OK) {
                snprintf(msg, len, "device %d, call %d of shape %d: %s", id, r, s,
                         ct_device_errmsg(d));
                ok = 0;
            }
    for (int s = 0; s < NSHAPES && ok; s++) {
        long w = job_wrong(&kShapes[s], &jobs[s]);
        if (w != 0) snprintf(msg, len, "device %d, shape %d: %ld wrong entries", id, s, w), ok = 0;
    }
    *wrong = !ok;
    for (int s = 0; s < NSHAPES; s++) job_free(&jobs[s]);
}

int main(void) {
    ct_test_devices ds;
    if (ct_test_devices_find(&ds, NULL, NDEV)) return ct_test_end("test_cl_clblast_lock");
    CT_ASSERT_EQ_INT(ds.npick, NDEV);
    if (ds.npick != NDEV) return ct_test_end("test_cl_clblast_lock");
    for (int i = 1; i < NDEV; i++) /* one kind: the binary cache's key is the same on all */
        CT_ASSERT(!strcmp(ds.list[ds.pick[i]].name, ds.list[ds.pick[0]].name));
    double t0 = omp_get_wtime();
    for (int round = 0; round < ROUNDS; round++) {
        ct_device *dev[NDEV] = {NULL};
        ct_err oerr[NDEV];
        memset(oerr, 0, sizeof oerr);
        int opened = 1;
        for (int i = 0; i < NDEV; i++) {
            ct_device_opts o = ct_device_opts_default();
            CT_ASSERT_OK(ct_device_open(&dev[i], &ds.list[ds.pick[i]], &o, &oerr[i]), oerr[i].msg);
            opened = opened && dev[i];
        }
        long wrong[NDEV] = {0};
        char msg[NDEV][512];
        memset(msg, 0, sizeof msg);
        if (opened) {
#pragma omp parallel num_threads(NDEV)
            {
                int t = omp_get_thread_num();
                worker(dev[t], t, &wrong[t], msg[t], sizeof msg[t]);
            }
        }
        for (int i = 0; i < NDEV && opened; i++)
            CT_ASSERT_MSG(wrong[i] == 0, "round %d: %s", round, msg[i]);
        for (int i = 0; i < NDEV; i++) ct_device_free(dev[i]); /* the last clears CLBlast's cache */
    }
    printf("%d rounds of %d devices x %d shapes (first calls together, then %d calls each): "
           "%.1f s\n",
           ROUNDS, NDEV, NSHAPES, REPS, omp_get_wtime() - t0);
    ct_test_devices_free(&ds);
    return ct_test_end("test_cl_clblast_lock");
}
