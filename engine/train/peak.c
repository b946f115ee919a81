/* peak.c - the peak behind MFU: the device's GEMM rate at the model's own matmul shapes, the one
 * measurement train_gpt (when --peak-tflops is not given) and bench_train divide by. */
#include "ct_engine.h"

/* The device's GEMM rate at one shape: the best of repeated runs over at least 0.3 s. */
static double gemm_tflops(ct_device *dev, int M, int N, int K) {
    ct_buffer *a = NULL, *b = NULL, *c = NULL;
    double best = 0;
    if (ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "gemm probe A", (size_t)M * K * 4, &a) ||
        ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "gemm probe B", (size_t)N * K * 4, &b) ||
        ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "gemm probe C", (size_t)M * N * 4, &c))
        goto done;
    double start = ct_time_now();
    for (int rep = 0; rep < 200 && (rep < 4 || ct_time_now() - start < 0.3); rep++) {
        double t0 = ct_time_now();
        if (ct_gemm(dev, 0, 1, (size_t)M, (size_t)N, (size_t)K, 1.0f, ct_buffer_mem(a), 0,
                    (size_t)K, ct_buffer_mem(b), 0, (size_t)K, 0.0f, ct_buffer_mem(c), 0,
                    (size_t)N, NULL) ||
            ct_device_finish(dev))
            goto done;
        double dt = ct_time_now() - t0;
        if (rep > 0 && 2.0 * M * N * K / dt / 1e12 > best) best = 2.0 * M * N * K / dt / 1e12;
    }
done:
    ct_buffer_free(a);
    ct_buffer_free(b);
    ct_buffer_free(c);
    return best;
}

double ct_measure_gemm_tflops(ct_device *dev, const ct_gpt_config *c, int BT) {
    int C = c->channels;
    int shapes[3][3] = {{BT, 3 * C, C}, {BT, 4 * C, C}, {BT, c->padded_vocab, C}};
    double best = 0;
    for (int i = 0; i < 3; i++) {
        double t = gemm_tflops(dev, shapes[i][0], shapes[i][1], shapes[i][2]);
        if (t > best) best = t;
    }
    return best;
}

