/* probe_device.c - a worker's device beyond the model's pieces, as the time model needs it: one
 * host staging copy (the engine's device reads and writes) and the optimizer's update, each as
 * alpha + beta per byte or float, and how much host work hides behind device work. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan_impl.h"

/* One host staging copy (the engine's device reads and writes), at a few sizes: alpha, beta. */
ct_status ct__plan_probe_copy(ct_device *dev, double hi, int reps, double *alpha, double *beta,
                              ct_err *err) {
    double lim = 64.0 * 1048576.0;
    if (hi > lim) hi = lim;
    if (hi < 65536) hi = 65536;
    double sz[3] = {4096, sqrt(4096 * hi), hi}, t[3];
    ct_buffer *b = NULL;
    float *h = ct_malloc((size_t)hi);
    ct_status st = ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "planner copy probe", (size_t)hi, &b);
    if (!h && st == CT_OK) st = CT_ERR(err, CT_ERR_NOMEM, "no memory");
    else if (st != CT_OK) CT_ERR(err, st, "%s", ct_device_errmsg(dev));
    else memset(h, 0, (size_t)hi);
    for (int i = 0; i < 3 && st == CT_OK; i++) {
        size_t n = (size_t)sz[i] / 4 * 4;
        double v[32];
        int rr = reps > 32 ? 32 : reps;
        st = ct_buffer_read(b, 0, h, n);
        for (int r = 0; r < rr && st == CT_OK; r++) {
            double t0 = ct_time_now();
            st = ct_buffer_read(b, 0, h, n);
            if (st == CT_OK) st = ct_buffer_write(b, 0, h, n);
            v[r] = 0.5e3 * (ct_time_now() - t0);
        }
        if (st != CT_OK) CT_ERR(err, st, "%s", ct_device_errmsg(dev));
        else t[i] = ct__plan_median(v, rr);
    }
    if (st == CT_OK) ct_plan_fit(sz, t, 3, alpha, beta);
    ct_buffer_free(b);
    free(h);
    return st;
}

/* The optimizer's update (and norm) over n floats in one launch: alpha per launch, beta per float. */
ct_status ct__plan_probe_opt(ct_device *dev, double lo, double hi, int reps, double *alpha,
                             double *beta, ct_err *err) {
    double cap = 16.0 * 1048576.0; /* floats; beyond it the fit extrapolates */
    if (hi > cap) hi = cap;
    if (lo < 1024) lo = 1024;
    if (hi < 4 * lo) hi = 4 * lo;
    double sz[2] = {lo, hi}, t[2];
    size_t n = (size_t)hi;
    ct_buffer *b = NULL;
    ct_status st = ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "planner optimizer probe",
                                   (4 * n + 1 + CT_NORM_PARTIALS) * sizeof(float), &b);
    if (st != CT_OK) return CT_ERR(err, st, "%s", ct_device_errmsg(dev));
    cl_mem m = ct_buffer_mem(b);
    for (int i = 0; i < 2 && st == CT_OK; i++) {
        size_t k = (size_t)sz[i];
        double v[32];
        int rr = reps > 32 ? 32 : reps;
        for (int r = -1; r < rr && st == CT_OK; r++) {
            double t0 = ct_time_now();
            st = ct_global_norm_forward(dev, ct_view_of(m, 4 * n), ct_view_of(m, 4 * n + 1),
                                        ct_view_of(m, n), k);
            if (st == CT_OK)
                st = ct_adamw_update(dev, ct_view_of(m, 0), ct_view_of(m, n), ct_view_of(m, 2 * n),
                                     ct_view_of(m, 3 * n), ct_view_of(m, 4 * n), 1.0f, k, 1e-4f,
                                     0.9f, 0.95f, 1e-8f, 0.1f, 1);
            if (st == CT_OK) st = ct_device_finish(dev);
            if (r >= 0) v[r] = 1e3 * (ct_time_now() - t0);
        }
        if (st != CT_OK) CT_ERR(err, st, "%s", ct_device_errmsg(dev));
        else t[i] = ct__plan_median(v, rr);
    }
    if (st == CT_OK) ct_plan_fit(sz, t, 2, alpha, beta);
    ct_buffer_free(b);
    return st;
}

/* What a collective's host work (copies and sums over staging memory) costs beside device
 * work: a GEMM enqueued, then a host loop of the same length, against each alone. Returns the
 * share of the shorter hidden (0: they add up, as on devices that share the host's cores; 1:
 * the longer alone, as on a GPU). */
ct_status ct__plan_probe_overlap(ct_device *dev, int reps, double *share, ct_err *err) {
    const size_t M = 256, HN = (size_t)4 << 20; /* GEMM 256^3; host loop over 16 MiB */
    ct_buffer *b = NULL;
    float *h = ct_calloc(2 * HN, sizeof(float));
    ct_status st = ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "planner overlap probe",
                                   3 * M * M * sizeof(float), &b);
    if (st != CT_OK) {
        free(h);
        return CT_ERR(err, st, "%s", ct_device_errmsg(dev));
    }
    if (!h) {
        ct_buffer_free(b);
        return CT_ERR(err, CT_ERR_NOMEM, "no memory");
    }
    cl_mem m = ct_buffer_mem(b);
    volatile float sink = 0;
    /* calibrate the counts so each side takes about the same time */
    int ng = 1, nh = 1;
    double tg = 0, th = 0, tb = 0;
    for (int pass = 0; pass < 2 && st == CT_OK; pass++) {
        double t0 = ct_time_now();
        for (int i = 0; i < ng && st == CT_OK; i++)
            st = ct_gemm(dev, 0, 1, M, M, M, 1.0f, m, 0, M, m, M * M, M, 0.0f, m, 2 * M * M, M, NULL);
        if (st == CT_OK) st = ct_device_finish(dev);
        tg = ct_time_now() - t0;
        t0 = ct_time_now();
        for (int i = 0; i < nh; i++) {
            float s = 0;
            for (size_t j = 0; j < HN; j++) h[HN + j] += h[j], s += h[HN + j];
            sink += s;
        }
        th = ct_time_now() - t0;
        if (pass == 0) { /* aim at ~20 ms each */
            ng = (int)ceil(0.02 / (tg > 1e-5 ? tg : 1e-5));
            nh = (int)ceil(0.02 / (th > 1e-5 ? th : 1e-5));
            if (ng > 200) ng = 200;
            if (nh > 200) nh = 200;
        }
    }
    double v[16];
    int rr = reps > 16 ? 16 : (reps < 1 ? 1 : reps), got = 0;
    for (int r = 0; r < rr && st == CT_OK; r++) {
        double t0 = ct_time_now();
        for (int i = 0; i < ng && st == CT_OK; i++)
            st = ct_gemm(dev, 0, 1, M, M, M, 1.0f, m, 0, M, m, M * M, M, 0.0f, m, 2 * M * M, M, NULL);
        if (st == CT_OK) st = ct_device_flush(dev);
        for (int i = 0; i < nh; i++) {
            float s = 0;
            for (size_t j = 0; j < HN; j++) h[HN + j] += h[j], s += h[HN + j];
            sink += s;
        }
        if (st == CT_OK) st = ct_device_finish(dev);
        tb = ct_time_now() - t0;
        double lo = tg < th ? tg : th;
        double s = lo > 0 ? (tg + th - tb) / lo : 0;
        v[got++] = s < 0 ? 0 : (s > 1 ? 1 : s);
    }
    (void)sink;
    if (st != CT_OK) CT_ERR(err, st, "%s", ct_device_errmsg(dev));
    else *share = ct__plan_median(v, got);
    ct_buffer_free(b);
    free(h);
    return st;
}
