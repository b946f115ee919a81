/* test_cl_threads - two devices in one process (POCL_DEVICES="pthread pthread"), each driven by
 * its own OpenMP thread at the same time: kernels, GEMMs and copies give correct results on both,
 * and each device's memory accounting is its own. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_cl.h"
#include "ct_test.h"
#include "ct_test_dev.h"

static const char kText[] =
    "__kernel void scale_add(__global float *y, __global const float *x, const float a,\n"
    "                        const unsigned n) {\n"
    "    size_t i = get_global_id(0);\n"
    "    if (i < n) y[i] += a * x[i];\n"
    "}\n";
static const ct_cl_source kSrc = {"test_scale_add", kText, sizeof kText - 1};

/* One worker: 20 rounds of y += a x on the device, then C = A B; returns the number of wrong
 * values. Called inside a parallel region by every thread: after enqueueing, the threads meet at
 * a barrier before anything is read back, so the two threads drive their devices at the same time
 * by construction, not because the scheduler happened to start them together (on a busy machine
 * one could otherwise finish before the other starts). Every thread reaches the barrier exactly
 * once, failures included. */
static int worker(ct_device *d, int id) {
    enum { N = 4096, M = 65, K = 33, R = 20 };
    int wrong = 0;
    float *x = malloc(N * 4), *y = malloc(N * 4), *A = malloc(M * K * 4), *C = malloc(M * M * 4);
    for (int i = 0; i < N; i++) x[i] = (float)(i % 17) + id;
    for (int i = 0; i < M * K; i++) A[i] = (float)((i + id) % 7) - 3.0f;
    ct_buffer *bx = NULL, *by = NULL, *bA = NULL, *bC = NULL;
    cl_kernel k = NULL;
    if (ct_buffer_alloc(d, CT_MEM_ACTIVATIONS, "x", N * 4, &bx) ||
        ct_buffer_alloc(d, CT_MEM_ACTIVATIONS, "y", N * 4, &by) ||
        ct_buffer_alloc(d, CT_MEM_PARAMS, "A", M * K * 4, &bA) ||
        ct_buffer_alloc(d, CT_MEM_WORKSPACE, "C", M * M * 4, &bC) ||
        ct_buffer_write(bx, 0, x, N * 4) || ct_buffer_write(bA, 0, A, M * K * 4) ||
        ct_kernel_get(d, &kSrc, "", "scale_add", &k)) {
        fprintf(stderr, "worker %d: %s\n", id, ct_device_errmsg(d));
        wrong = -1;
    }
    float a = 0.5f * (id + 1);
    if (wrong == 0) {
        cl_mem my = ct_buffer_mem(by), mx = ct_buffer_mem(bx);
        unsigned n = N;
        size_t g = N;
        for (int r = 0; r < R && wrong == 0; r++)
            if (ct_kernel_set_arg(d, k, 0, sizeof my, &my) || ct_kernel_set_arg(d, k, 1, sizeof mx, &mx) ||
                ct_kernel_set_arg(d, k, 2, sizeof a, &a) || ct_kernel_set_arg(d, k, 3, sizeof n, &n) ||
                ct_kernel_launch(d, k, 1, &g, NULL, NULL))
                wrong = -1;
        /* C = A A^T (65 x 65) */
        if (wrong == 0 && ct_gemm(d, 0, 1, M, M, K, 1.0f, ct_buffer_mem(bA), 0, K, ct_buffer_mem(bA), 0,
                                  K, 0.0f, ct_buffer_mem(bC), 0, M, NULL))
            wrong = -1;
        if (wrong == 0 && ct_device_flush(d)) wrong = -1;
        if (wrong) fprintf(stderr, "worker %d: %s\n", id, ct_device_errmsg(d));
    }
#pragma omp barrier
    if (wrong) goto done;
    if (ct_buffer_read(by, 0, y, N * 4) || ct_buffer_read(bC, 0, C, M * M * 4)) {
        fprintf(stderr, "worker %d: %s\n", id, ct_device_errmsg(d));
        wrong = -1;
        goto done;
    }
    for (int i = 0; i < N; i++) wrong += y[i] != R * a * x[i];
    for (int i = 0; i < M; i++)
        for (int j = 0; j < M; j++) {
            float s = 0; /* small integers: exact */
            for (int p = 0; p < K; p++) s += A[i * K + p] * A[j * K + p];
            wrong += C[i * M + j] != s;
        }
done:
    ct_buffer_free(bx), ct_buffer_free(by), ct_buffer_free(bA), ct_buffer_free(bC);
    free(x), free(y), free(A), free(C);
    return wrong;
}

int main(void) {
    ct_test_devices ds;
    if (ct_test_devices_find(&ds, NULL, 2)) return ct_test_end("test_cl_threads");
    const ct_device_info *list = ds.list;
    const int *idx = ds.pick;
    ct_device *dev[2] = {NULL, NULL};
    /* opening devices from two threads at once (tuning is applied at open) must be safe */
    for (int round = 0; round < 8; round++) {
        ct_status ost[2] = {CT_OK, CT_OK};
        ct_err oerr[2];
        memset(oerr, 0, sizeof oerr);
#pragma omp parallel num_threads(2)
        {
            int t = omp_get_thread_num();
            ct_device_opts o = ct_device_opts_default();
            ost[t] = ct_device_open(&dev[t], &list[idx[t]], &o, &oerr[t]);
        }
        for (int i = 0; i < 2; i++) {
            CT_ASSERT_OK(ost[i], oerr[i].msg);
            if (round < 7) {
                ct_device_free(dev[i]);
                dev[i] = NULL;
            }
        }
    }
    if (!dev[0] || !dev[1]) return ct_test_end("test_cl_threads");
    int wrong[2] = {-1, -1}, tid[2] = {-1, -1};
    double t_in[2] = {0, 0}, t_out[2] = {0, 0};
#pragma omp parallel num_threads(2)
    {
        int t = omp_get_thread_num();
        tid[t] = t;
        t_in[t] = omp_get_wtime();
        wrong[t] = worker(dev[t], t);
        t_out[t] = omp_get_wtime();
    }
    CT_ASSERT_EQ_INT(omp_get_max_threads() >= 1, 1);
    CT_ASSERT_EQ_INT(tid[0], 0);
    CT_ASSERT_EQ_INT(tid[1], 1);
    CT_ASSERT_EQ_INT(wrong[0], 0);
    CT_ASSERT_EQ_INT(wrong[1], 0);
    /* both threads were inside at the same time (the barrier in worker guarantees it) */
    CT_ASSERT(t_in[0] < t_out[1] && t_in[1] < t_out[0]);
    for (int i = 0; i < 2; i++) {
        ct_mem_stats s;
        ct_device_mem_stats(dev[i], &s);
        CT_ASSERT_EQ_INT(s.total_current, 0);
        CT_ASSERT(s.peak[CT_MEM_PARAMS] == 65 * 33 * 4);
        ct_device_free(dev[i]);
    }
    ct_test_devices_free(&ds);
    return ct_test_end("test_cl_threads");
}
