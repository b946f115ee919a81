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
static const struct { size_t m, n, k, batch; int ta, tb; } kSelectShapes[] = {
    {512, 768, 256, 1, 0, 1},
    {256, 1024, 512, 1, 1, 0},
    {256, 256, 64, 8, 0, 1},
};
#define NSHAPES ((int)(sizeof kSelectShapes / sizeof kSelectShapes[0]))

/* Geometric mean of the path's GFLOP/s over the shapes (0 when a run failed: its status). */
static ct_status time_path(ct_device *dev, ct_gemm_path p, double *gflops) {
    size_t amax = 0, bmax = 0, cmax = 0;
    for (int i = 0; i < NSHAPES; i++) {
        size_t a = kSelectShapes[i].m * kSelectShapes[i].k * kSelectShapes[i].batch;
        size_t b = kSelectShapes[i].k * kSelectShapes[i].n * kSelectShapes[i].batch;
        size_t c = kSelectShapes[i].m * kSelectShapes[i].n * kSelectShapes[i].batch;
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
        g.ta = kSelectShapes[i].ta, g.tb = kSelectShapes[i].tb;
        g.m = kSelectShapes[i].m, g.n = kSelectShapes[i].n, g.k = kSelectShapes[i].k, g.batch = kSelectShapes[i].batch;
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

/* ---------------------------------------------------------------- the model's plan */

static void put_shape(ct_gemm_shape *o, int *n, const char *name, int ta, int tb, int c_bf16,
                      size_t m, size_t nn, size_t k, size_t batch, size_t tm, size_t tn,
                      size_t tk, size_t tbatch) {
    ct_gemm_shape s = {name, ta, tb, c_bf16, m, nn, k, batch, tm, tn, tk, tbatch};
    for (int i = 0; i < *n; i++) /* one key once (a small model's logits are its MLP's shape) */
        if (o[i].ta == ta && o[i].tb == tb && o[i].m == m && o[i].n == nn && o[i].k == k &&
            o[i].batch == batch)
            return;
    o[(*n)++] = s;
}

int ct_gemm_model_shapes(const ct_gpt_config *cfg, int tp, int B, int T, ct_gemm_shape *out) {
    size_t C = (size_t)cfg->channels, Vp = (size_t)cfg->padded_vocab, t = tp > 0 ? (size_t)tp : 1;
    size_t NH = (size_t)cfg->heads / t, hs = C / (size_t)cfg->heads;
    size_t rows = (size_t)B * (size_t)T, tr = rows < 4096 ? rows : 4096;
    size_t blk = (size_t)T < 256 ? (size_t)T : 256, BNH = (size_t)B * NH;
    /* a linear layer in -> outc: forward (N,in).(outc,in)^T, input gradient (N,outc).(outc,in),
     * weight gradient (outc,N).(N,in), N = rows: the wildcard */
    struct { const char *f, *d, *w; size_t in, outc; } lin[] = {
        {"qkv fwd", "qkv dinp", "qkv dw", C, 3 * C / t},
        {"attproj fwd", "attproj dinp", "attproj dw", C / t, C},
        {"fc fwd", "fc dinp", "fc dw", C, 4 * C / t},
        {"fcproj fwd", "fcproj dinp", "fcproj dw", 4 * C / t, C},
        {"logits fwd", "logits dinp", "logits dw", C, Vp / t},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
        size_t in = lin[i].in, oc = lin[i].outc;
        put_shape(out, &n, lin[i].f, 0, 1, 1, 0, oc, in, 1, tr, oc, in, 1);
        put_shape(out, &n, lin[i].d, 0, 0, 1, 0, in, oc, 1, tr, in, oc, 1);
        put_shape(out, &n, lin[i].w, 1, 0, 0, oc, in, 0, 1, oc, in, tr, 1);
    }
    put_shape(out, &n, "att scores", 0, 1, 0, 0, 0, hs, 0, blk, (size_t)T, hs, BNH);
    put_shape(out, &n, "att mix", 0, 0, 1, 0, hs, 0, 0, blk, hs, (size_t)T, BNH);
    return n;
}

/* Median of 3 timed runs (after an untimed one) of shape s on path p, as GFLOP/s. */
static ct_status time_shape(ct_device *dev, ct_gemm_path p, const ct_gemm_shape *s, ct_buffer *A,
                            ct_buffer *B, ct_buffer *C, double *gflops) {
    ct_gemm_desc g;
    memset(&g, 0, sizeof g);
    g.ta = s->ta, g.tb = s->tb, g.m = s->tm, g.n = s->tn, g.k = s->tk, g.batch = s->tbatch;
    g.alpha = 1.0f, g.beta = 0.0f;
    g.c_bf16 = ct_gemm_path_bf16(p) && s->c_bf16;
    g.a = ct_buffer_mem(A), g.lda = g.ta ? g.m : g.k, g.a_stride = g.m * g.k;
    g.b = ct_buffer_mem(B), g.ldb = g.tb ? g.k : g.n, g.b_stride = g.k * g.n;
    g.c = ct_buffer_mem(C), g.ldc = g.n, g.c_stride = g.m * g.n;
    double t[3];
    ct_status st = CT_OK;
    for (int r = -1; r < 3 && st == CT_OK; r++) {
        double t0 = ct_time_now();
        if ((st = ct_gemm_run(dev, p, &g, NULL)) == CT_OK) st = ct_device_finish(dev);
        if (r >= 0) t[r] = ct_time_now() - t0;
    }
    if (st != CT_OK) return st;
    double lo = fmin(t[0], fmin(t[1], t[2])), hi = fmax(t[0], fmax(t[1], t[2]));
    double med = t[0] + t[1] + t[2] - lo - hi;
    *gflops = 2.0 * g.m * g.n * g.k * g.batch / fmax(med, 1e-9) / 1e9;
    return CT_OK;
}

/* A shape's name in a record (fits ct_tune_kernel's 24-byte names): t<ta><tb>m<m>n<n>k<k>b<b>. */
static void shape_key(const ct_gemm_shape *s, char *buf, size_t len) {
    snprintf(buf, len, "t%d%dm%zun%zuk%zub%zu", s->ta, s->tb, s->m, s->n, s->k, s->batch);
}

static const ct_tune_kernel *find_kernel(const ct_tune_set *s, const char *name) {
    for (int i = 0; i < s->nkernels; i++)
        if (!strcmp(s->kernels[i].kernel, name)) return &s->kernels[i];
    return NULL;
}

static int find_value(const ct_tune_kernel *k, const char *name, size_t *v) {
    for (int j = 0; k && j < k->n; j++)
        if (!strcmp(k->names[j], name)) return *v = k->values[j], 1;
    return 0;
}

/* Every shape's stored path, when each is one of the candidates (all checked already). */
static int plan_from_record(const ct_tune_set *s, const char *entry, const char *rates,
                            const ct_gemm_shape *shapes, int n, const ct_gemm_path *cand,
                            int ncand, ct_gemm_plan *plan) {
    const ct_tune_kernel *kp = find_kernel(s, entry), *kr = find_kernel(s, rates);
    for (int i = 0; i < n; i++) {
        char key[24];
        size_t v = 0, r = 0;
        shape_key(&shapes[i], key, sizeof key);
        if (!find_value(kp, key, &v)) return 0;
        int ok = 0;
        for (int c = 0; c < ncand; c++) ok |= (size_t)cand[c] == v;
        if (!ok) return 0;
        find_value(kr, key, &r);
        ct_gemm_choice *ch = &plan->shapes[plan->n++];
        ch->ta = shapes[i].ta, ch->tb = shapes[i].tb, ch->m = shapes[i].m, ch->n = shapes[i].n;
        ch->k = shapes[i].k, ch->batch = shapes[i].batch;
        ch->path = (ct_gemm_path)v, ch->gflops = (double)r / 1000.0;
    }
    return 1;
}

/* The record with this entry's kernels replaced by the plan (other kinds' entries kept). */
static ct_status store_plan(ct_device *dev, const char *entry, const char *rates,
                            const ct_gemm_shape *shapes, const ct_gemm_plan *plan, ct_err *err) {
    const ct_device_info *info = ct_device_get_info(dev);
    const char *dir = ct_device_tune_dir(dev);
    ct_tune_set old, s;
    ct_err lerr = {0};
    memset(&s, 0, sizeof s);
    if (ct_tune_record_load(dir, info, KIND, &old, &lerr) == CT_OK)
        for (int i = 0; i < old.nkernels; i++)
            if (strcmp(old.kernels[i].kernel, entry) && strcmp(old.kernels[i].kernel, rates) &&
                s.nkernels < CT_TUNE_MAX_KERNELS - 2)
                s.kernels[s.nkernels++] = old.kernels[i];
    snprintf(s.device, sizeof s.device, "%s", info->name);
    snprintf(s.driver, sizeof s.driver, "%s", info->driver_version);
    snprintf(s.platform, sizeof s.platform, "%s", info->platform);
    snprintf(s.type, sizeof s.type, "%s", ct_device_type_str(info->type));
    snprintf(s.note, sizeof s.note, "GEMM paths per shape of a model (ct_gemm_plan_make); "
             "rates in MFLOP/s");
    for (int i = 0; i < plan->n; i++) {
        char key[24];
        shape_key(&shapes[i], key, sizeof key);
        ct_tune_set_put(&s, entry, key, (size_t)plan->shapes[i].path);
        ct_tune_set_put(&s, rates, key, (size_t)(plan->shapes[i].gflops * 1000.0 + 0.5));
    }
    return ct_tune_record_store(dir, info, KIND, &s, err);
}

static ct_status plan_measure(ct_device *dev, const ct_gemm_shape *shapes, int n,
                              const ct_gemm_path *cand, int ncand, ct_gemm_plan *plan,
                              double rate[][4]) {
    size_t amax = 1, bmax = 1, cmax = 1;
    for (int i = 0; i < n; i++) {
        const ct_gemm_shape *s = &shapes[i];
        size_t a = s->tm * s->tk * s->tbatch, b = s->tk * s->tn * s->tbatch,
               c = s->tm * s->tn * s->tbatch;
        amax = a > amax ? a : amax, bmax = b > bmax ? b : bmax, cmax = c > cmax ? c : cmax;
    }
    ct_buffer *A = NULL, *B = NULL, *C = NULL;
    ct_status st = ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "gemm timing A", amax * 4, &A);
    if (st == CT_OK) st = ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "gemm timing B", bmax * 4, &B);
    if (st == CT_OK) st = ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "gemm timing C", cmax * 4, &C);
    /* the buffers come zeroed (ct_buffer_alloc): no NaN or denormal timed */
    for (int i = 0; i < n && st == CT_OK; i++) {
        ct_gemm_choice *ch = &plan->shapes[plan->n++];
        ch->ta = shapes[i].ta, ch->tb = shapes[i].tb, ch->m = shapes[i].m, ch->n = shapes[i].n;
        ch->k = shapes[i].k, ch->batch = shapes[i].batch, ch->gflops = -1;
        for (int c = 0; c < ncand && st == CT_OK; c++) {
            st = time_shape(dev, cand[c], &shapes[i], A, B, C, &rate[i][c]);
            if (st == CT_OK && rate[i][c] > ch->gflops) ch->gflops = rate[i][c], ch->path = cand[c];
        }
    }
    ct_buffer_free(A), ct_buffer_free(B), ct_buffer_free(C);
    return st;
}

ct_status ct_gemm_plan_make(ct_device *dev, const char *want, int bf16, int tf32, int again,
                            const ct_gemm_shape *shapes, int nshapes, ct_gemm_plan *plan,
                            char *note, size_t len) {
    ct_err *err = ct_device_err(dev);
    char tmp[8];
    if (!note) note = tmp, len = sizeof tmp;
    note[0] = '\0';
    *plan = ct_gemm_plan_default();
    int is_auto = !want || !strcmp(want, "auto");
    ct_gemm_path asked = CT_GEMM_CLBLAST;
    ct_err perr = {0};
    if (!is_auto && ct_gemm_path_parse(want, &asked, &perr) != CT_OK)
        return CT_ERR(err, CT_ERR_ARG, "--gemm '%s': one of auto, clblast, portable, mma", want);
    if (nshapes < 0 || nshapes > CT_GEMM_PLAN_MAX)
        return CT_ERR(err, CT_ERR_ARG, "gemm plan: %d shapes (at most %d)", nshapes,
                      CT_GEMM_PLAN_MAX);
    if (!bf16 && !tf32) { /* fp32 operands: CLBlast's, nothing to choose */
        if (!is_auto && asked != CT_GEMM_CLBLAST)
            return CT_ERR(err, CT_ERR_ARG,
                          "--gemm %s multiplies bf16 operands; fp32 GEMMs run on clblast (or, "
                          "with --tf32 1, on the mma path with tf32 operands)", want);
        snprintf(note, len, "clblast for every product (fp32 operands%s)",
                 is_auto ? "; --tf32 1 would let auto weigh the mma path's tf32 form" : ", as asked");
        return ct_gemm_path_check(dev, CT_GEMM_CLBLAST);
    }
    if (bf16 && tf32)
        return CT_ERR(err, CT_ERR_ARG, "--tf32 applies to fp32 GEMMs; --precision bf16 has bf16 "
                      "operands");
    /* the candidates: bf16 paths, or with tf32 CLBlast and the mma path's tf32 form */
    ct_gemm_path cand[4];
    int ncand = 0;
    char skipped[900] = "";
    if (!is_auto) {
        if (tf32 && (asked == CT_GEMM_MMA || asked == CT_GEMM_MMA_EMULATED))
            asked = asked == CT_GEMM_MMA ? CT_GEMM_MMA_TF32 : CT_GEMM_MMA_TF32_EMULATED;
        if (tf32 && asked != CT_GEMM_MMA_TF32 && asked != CT_GEMM_MMA_TF32_EMULATED)
            return CT_ERR(err, CT_ERR_ARG,
                          "--tf32 1 runs fp32 GEMMs on the mma path: --gemm auto or mma (got "
                          "'%s')", want);
        if (!tf32 && !ct_gemm_path_bf16(asked))
            return CT_ERR(err, CT_ERR_ARG,
                          "--gemm %s multiplies fp32 operands; --precision bf16 runs auto, "
                          "portable or mma", want);
        ct_status st = ct_gemm_path_check(dev, asked);
        if (st != CT_OK) return st; /* cl/'s reason is on the device's message */
        cand[ncand++] = asked;
    } else {
        ct_gemm_path all[] = {CT_GEMM_PORTABLE, CT_GEMM_MMA};
        ct_gemm_path all_tf32[] = {CT_GEMM_CLBLAST, CT_GEMM_MMA_TF32};
        for (int i = 0; i < 2; i++) {
            ct_gemm_path gp = tf32 ? all_tf32[i] : all[i];
            ct_status st = ct_gemm_path_check(dev, gp);
            if (st == CT_ERR_UNSUPPORTED) { /* said once in the log, with cl/'s reason */
                size_t u = strlen(skipped);
                snprintf(skipped + u, sizeof skipped - u, "; %s not here: %.300s",
                         ct_gemm_path_str(gp), ct_device_errmsg(dev));
                continue;
            }
            if (st != CT_OK) return st;
            cand[ncand++] = gp;
        }
        if (!ncand)
            return CT_ERR(err, CT_ERR_UNSUPPORTED, "bf16 GEMMs: no bf16 path runs on %s%s",
                          ct_device_get_info(dev)->name, skipped);
    }
    const char *entry = tf32 ? "plan_tf32" : "plan_bf16", *rates = tf32 ? "rate_tf32" : "rate_bf16";
    const ct_device_info *info = ct_device_get_info(dev);
    char where[1400] = "";
    if (ct_tune_record_path(ct_device_tune_dir(dev), info, KIND, where, sizeof where) != CT_OK)
        where[0] = '\0';
    double rate[CT_GEMM_PLAN_MAX][4];
    memset(rate, 0, sizeof rate);
    ct_status st = CT_OK;
    const char *how = "";
    char stored[1500] = "";
    pthread_mutex_lock(&gemm_lock);
    ct_tune_set s;
    ct_err rerr = {0};
    if (is_auto && !again &&
        ct_tune_record_load(ct_device_tune_dir(dev), info, KIND, &s, &rerr) == CT_OK &&
        plan_from_record(&s, entry, rates, shapes, nshapes, cand, ncand, plan)) {
        how = "stored";
        snprintf(stored, sizeof stored, " %s", where);
    } else {
        plan->n = 0;
        st = plan_measure(dev, shapes, nshapes, cand, ncand, plan, rate);
        how = "measured now";
        if (st == CT_OK && is_auto) {
            ct_err serr = {0};
            if (store_plan(dev, entry, rates, shapes, plan, &serr) == CT_OK)
                snprintf(stored, sizeof stored, ", stored %s", where);
            else
                snprintf(stored, sizeof stored, ", not stored: %.600s", serr.msg);
        }
    }
    pthread_mutex_unlock(&gemm_lock);
    if (st != CT_OK) return st;
    size_t u = (size_t)snprintf(note, len, "%s products: %s, per shape %s%s%s", tf32 ? "fp32 (tf32 allowed)" : "bf16",
                                is_auto ? "auto" : ct_gemm_path_str(asked), how, stored, skipped);
    for (int i = 0; i < nshapes && u < len; i++) {
        const ct_gemm_shape *sh = &shapes[i];
        const ct_gemm_choice *ch = &plan->shapes[i];
        int w = snprintf(note + u, len - u, "\n%-13s %c%c %5zu x %5zu x %5zu x %3zu: %s %.1f GFLOP/s",
                         sh->name, sh->ta ? 'T' : 'N', sh->tb ? 'T' : 'N', sh->tm, sh->tn, sh->tk,
                         sh->tbatch, ct_gemm_path_str(ch->path), ch->gflops);
        if (w < 0) break;
        u += (size_t)w;
        for (int c = 0; c < ncand && ncand > 1 && rate[i][0] > 0 && u < len; c++)
            if (cand[c] != ch->path) {
                w = snprintf(note + u, len - u, " (%s %.1f)", ct_gemm_path_str(cand[c]),
                             rate[i][c]);
                if (w < 0) break;
                u += (size_t)w;
            }
    }
    return CT_OK;
}
