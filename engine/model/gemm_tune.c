/* gemm_tune.c - the bf16 GEMM path a model runs on a device (ct_engine_gemm.h): asked for by name,
 * or the fastest of those the device runs, timed once and kept as a tuning record. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "ct_engine_gemm.h"

#define KIND "gemm"
#define ENTRY "gemm_bf16"

/* The shapes timed: a GPT block's QKV product, its MLP's weight gradient, and the attention
 * scores' batched product (m, n, k, batch, ta, tb) at a size that takes milliseconds, not
 * seconds, on a CPU device. */
static const struct { size_t m, n, k, batch; int ta, tb; } shapes[] = {
    {512, 768, 256, 1, 0, 1},
    {256, 1024, 512, 1, 1, 0},
    {256, 256, 64, 8, 0, 1},
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

/* Geometric mean of the path's GFLOP/s over the shapes (0 when a run failed: its status). */
static ct_status time_path(ct_device *dev, ct_gemm_path p, double *gflops) {
    size_t amax = 0, bmax = 0, cmax = 0;
    for (int i = 0; i < NSHAPES; i++) {
        size_t a = shapes[i].m * shapes[i].k * shapes[i].batch;
        size_t b = shapes[i].k * shapes[i].n * shapes[i].batch;
        size_t c = shapes[i].m * shapes[i].n * shapes[i].batch;
        amax = a > amax ? a : amax, bmax = b > bmax ? b : bmax, cmax = c > cmax ? c : cmax;
    }
    ct_buffer *A = NULL, *B = NULL, *C = NULL;
    ct_status st = ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "gemm timing A", amax * 2, &A);
    if (st == CT_OK) st = ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "gemm timing B", bmax * 2, &B);
    if (st == CT_OK) st = ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "gemm timing C", cmax * 4, &C);
    double logsum = 0;
    for (int i = 0; i < NSHAPES && st == CT_OK; i++) {
        ct_gemm_desc g;
        memset(&g, 0, sizeof g);
        g.ta = shapes[i].ta, g.tb = shapes[i].tb;
        g.m = shapes[i].m, g.n = shapes[i].n, g.k = shapes[i].k, g.batch = shapes[i].batch;
        g.alpha = 1.0f, g.beta = 0.0f;
        g.a = ct_buffer_mem(A), g.lda = g.ta ? g.m : g.k, g.a_stride = g.m * g.k;
        g.b = ct_buffer_mem(B), g.ldb = g.tb ? g.k : g.n, g.b_stride = g.k * g.n;
        g.c = ct_buffer_mem(C), g.ldc = g.n, g.c_stride = g.m * g.n;
        double t[3];
        for (int r = -1; r < 3 && st == CT_OK; r++) {
            double t0 = ct_time_now();
            if ((st = ct_gemm_run(dev, p, &g, NULL)) == CT_OK) st = ct_device_finish(dev);
            if (r >= 0) t[r] = ct_time_now() - t0;
        }
        if (st != CT_OK) break;
        double lo = fmin(t[0], fmin(t[1], t[2])), hi = fmax(t[0], fmax(t[1], t[2]));
        double med = t[0] + t[1] + t[2] - lo - hi;
        logsum += log(2.0 * g.m * g.n * g.k * g.batch / fmax(med, 1e-9) / 1e9);
    }
    ct_buffer_free(A), ct_buffer_free(B), ct_buffer_free(C);
    *gflops = st == CT_OK ? exp(logsum / NSHAPES) : 0;
    return st;
}

/* The stored choice, when the record has one whose path the device still runs. */
static int from_record(ct_device *dev, const ct_tune_set *s, ct_gemm_path *out) {
    for (int i = 0; i < s->nkernels; i++) {
        const ct_tune_kernel *k = &s->kernels[i];
        if (strcmp(k->kernel, ENTRY)) continue;
        for (int j = 0; j < k->n; j++)
            if (!strcmp(k->names[j], "PATH") && k->values[j] < CT_GEMM_PATH__COUNT &&
                ct_gemm_path_bf16((ct_gemm_path)k->values[j]) &&
                ct_gemm_path_check(dev, (ct_gemm_path)k->values[j]) == CT_OK) {
                *out = (ct_gemm_path)k->values[j];
                return 1;
            }
    }
    return 0;
}

/* Threads of one process opening devices of one kind: the first measures and stores, the others
 * read its record. Guards a file; carries no device state. */
static pthread_mutex_t gemm_lock = PTHREAD_MUTEX_INITIALIZER;

static ct_status pick(ct_device *dev, int again, ct_gemm_path *path, char *note, size_t len) {
    const ct_device_info *info = ct_device_get_info(dev);
    const char *dir = ct_device_tune_dir(dev);
    char where[1400] = "";
    if (ct_tune_record_path(dir, info, KIND, where, sizeof where) != CT_OK) where[0] = '\0';
    ct_tune_set s;
    ct_err rerr = {0};
    if (!again && ct_tune_record_load(dir, info, KIND, &s, &rerr) == CT_OK &&
        from_record(dev, &s, path)) {
        snprintf(note, len, "%s, stored %s", ct_gemm_path_str(*path), where);
        return CT_OK;
    }
    double best = -1, rate[CT_GEMM_PATH__COUNT] = {0};
    char rates[300] = "";
    size_t used = 0;
    for (int p = 0; p < CT_GEMM_PATH__COUNT; p++) {
        ct_gemm_path gp = (ct_gemm_path)p;
        if (!ct_gemm_path_bf16(gp) || gp == CT_GEMM_MMA_EMULATED) continue;
        ct_status st = ct_gemm_path_check(dev, gp);
        if (st == CT_ERR_UNSUPPORTED) continue; /* not this device's: its reason is kept by cl/ */
        if (st != CT_OK || (st = time_path(dev, gp, &rate[p])) != CT_OK) return st;
        int k = snprintf(rates + used, sizeof rates - used, "%s%s %.1f", used ? ", " : "",
                         ct_gemm_path_str(gp), rate[p]);
        if (k > 0 && (size_t)k < sizeof rates - used) used += (size_t)k;
        if (rate[p] > best) best = rate[p], *path = gp;
    }
    if (best < 0)
        return CT_ERR(ct_device_err(dev), CT_ERR_UNSUPPORTED,
                      "bf16 GEMMs: no bf16 GEMM path runs on %s", info->name);
    memset(&s, 0, sizeof s);
    snprintf(s.device, sizeof s.device, "%s", info->name);
    snprintf(s.driver, sizeof s.driver, "%s", info->driver_version);
    snprintf(s.platform, sizeof s.platform, "%s", info->platform);
    snprintf(s.type, sizeof s.type, "%s", ct_device_type_str(info->type));
    snprintf(s.note, sizeof s.note, "the fastest bf16 GEMM path (ct_gemm_select), GFLOP/s: %s",
             rates);
    ct_tune_set_put(&s, ENTRY, "PATH", (size_t)*path);
    ct_err serr = {0};
    if (ct_tune_record_store(dir, info, KIND, &s, &serr) == CT_OK)
        snprintf(note, len, "%s, the fastest measured now (GFLOP/s: %s), stored %s",
                 ct_gemm_path_str(*path), rates, where);
    else
        snprintf(note, len, "%s, the fastest measured now (GFLOP/s: %s), not stored: %s",
                 ct_gemm_path_str(*path), rates, serr.msg);
    return CT_OK;
}

ct_status ct_gemm_select(ct_device *dev, const char *want, int again, ct_gemm_path *path,
                         char *note, size_t len) {
    char tmp[8];
    if (!note) note = tmp, len = sizeof tmp;
    note[0] = '\0';
    if (want && strcmp(want, "auto") != 0) {
        ct_gemm_path p;
        ct_err e = {0};
        if (ct_gemm_path_parse(want, &p, &e) != CT_OK || !ct_gemm_path_bf16(p))
            return CT_ERR(ct_device_err(dev), CT_ERR_ARG,
                          "bf16 GEMM path '%s': one of auto, portable, mma, mma-emulated",
                          want);
        ct_status st = ct_gemm_path_check(dev, p);
        if (st != CT_OK) return st; /* cl/'s reason is on the device's message */
        *path = p;
        snprintf(note, len, "%s, as asked", ct_gemm_path_str(p));
        return CT_OK;
    }
    pthread_mutex_lock(&gemm_lock);
    ct_status st = pick(dev, again, path, note, len);
    pthread_mutex_unlock(&gemm_lock);
    return st;
}
