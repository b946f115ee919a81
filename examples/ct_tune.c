/* ct_tune - a bounded search for CLBlast GEMM parameters on one device, measured on the engine's
 * own GEMM shapes; the result is stored keyed by device name and driver version, and every cltrain
 * program applies it once when it opens that device.
 *
 * Method: CLBlast's built-in parameters are measured first (before any override, and outside the
 * bounds: on a cold kernel cache this alone takes tens of seconds), then the shipped set for this
 * kind of device, then seeded random candidates from a grid that respects CLBlast's Xgemm
 * constraints, until the candidate count (--max-candidates) or the time budget (--budget) is
 * spent. Every candidate's results are checked against a plain-C dot product at sampled entries;
 * a wrong or failing candidate is discarded. Score: geometric mean GFLOP/s over the shapes. Last,
 * the direct/indirect threshold is tried with the best Xgemm set. Each new parameter set makes
 * CLBlast compile its GEMM program again (seconds on PoCL), which is what the budget mostly pays
 * for.
 *
 * The best candidate is stored only if it beats the built-in parameters by --min-gain (default
 * CT_TUNE_MIN_GAIN); otherwise a "built-in" record is stored, which replaces a stored set and
 * keeps a shipped pattern from applying, so a device never runs slower for having been tuned. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ct_cl.h"
#include "gemm_shapes.h"

typedef struct bench_buf {
    ct_gemm_shape s;
    ct_buffer *a, *b, *c;
    float *ha, *hb; /* host copies for the check */
} bench_buf;

static void fill(float *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 9) & 0x3fff) / 16384.0f - 0.5f;
    }
}

static ct_status run_one(ct_device *dev, bench_buf *b) {
    const ct_gemm_shape *s = &b->s;
    size_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    if (s->batch == 1)
        return ct_gemm(dev, s->ta, s->tb, s->m, s->n, s->k, 1.0f, ct_buffer_mem(b->a), 0, lda,
                       ct_buffer_mem(b->b), 0, ldb, 0.0f, ct_buffer_mem(b->c), 0, s->n, NULL);
    return ct_gemm_strided_batched(dev, s->ta, s->tb, s->m, s->n, s->k, 1.0f, ct_buffer_mem(b->a), 0,
                                   lda, s->m * s->k, ct_buffer_mem(b->b), 0, ldb, s->k * s->n, 0.0f,
                                   ct_buffer_mem(b->c), 0, s->n, s->m * s->n, s->batch, NULL);
}

/* Sampled check of C = op(A) op(B) for batch 0. Returns the largest relative error. */
static double check(ct_device *dev, bench_buf *b) {
    const ct_gemm_shape *s = &b->s;
    size_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    float *c = malloc(s->m * s->n * 4);
    if (!c || ct_buffer_read(b->c, 0, c, s->m * s->n * 4) != CT_OK) {
        free(c);
        return INFINITY;
    }
    double worst = 0;
    unsigned seed = 5;
    for (int t = 0; t < 128; t++) {
        seed = seed * 1103515245u + 12345u;
        size_t i = (seed >> 3) % s->m;
        seed = seed * 1103515245u + 12345u;
        size_t j = (seed >> 3) % s->n;
        double ref = 0, mag = 0;
        for (size_t p = 0; p < s->k; p++) {
            float av = s->ta ? b->ha[p * lda + i] : b->ha[i * lda + p];
            float bv = s->tb ? b->hb[j * ldb + p] : b->hb[p * ldb + j];
            ref += (double)av * bv;
            mag += fabs((double)av * bv);
        }
        double e = fabs(c[i * s->n + j] - ref) / (mag + 1e-30);
        if (!(e <= worst)) worst = e;
    }
    free(c);
    return worst;
}

/* Geometric-mean GFLOP/s over the shapes, or -1 if a call failed or a result was wrong. */
static double score(ct_device *dev, bench_buf *bufs, int nb, int reps, char *why, size_t wlen) {
    double logsum = 0;
    for (int i = 0; i < nb; i++) {
        const ct_gemm_shape *s = &bufs[i].s;
        double best = INFINITY;
        for (int r = 0; r <= reps; r++) { /* r = 0 compiles and warms */
            double t0 = ct_time_now();
            if (run_one(dev, &bufs[i]) != CT_OK || ct_device_finish(dev) != CT_OK) {
                snprintf(why, wlen, "%s: %s", s->name, ct_device_errmsg(dev));
                return -1;
            }
            double t = ct_time_now() - t0;
            if (r > 0 && t < best) best = t;
        }
        double e = check(dev, &bufs[i]);
        if (!(e <= 1e-6 * (double)s->k + 1e-5)) {
            snprintf(why, wlen, "%s: wrong result (relative error %.2e)", s->name, e);
            return -1;
        }
        logsum += log(2.0 * s->m * s->n * s->k * s->batch / best / 1e9);
    }
    return exp(logsum / nb);
}

typedef struct xgemm_params {
    int MWG, NWG, KWG, MDIMC, NDIMC, VWM, VWN, SA, SB, KWI;
} xgemm_params;

static int xgemm_valid(const xgemm_params *p, size_t max_wg, uint64_t local_mem) {
    int MDIMA = p->MDIMC, NDIMB = p->NDIMC;
    if ((size_t)(p->MDIMC * p->NDIMC) > max_wg) return 0;
    if (p->MWG % (p->MDIMC * p->VWM) || p->NWG % (p->NDIMC * p->VWN)) return 0;
    if (p->MWG % (MDIMA * p->VWM) || p->NWG % (NDIMB * p->VWN)) return 0;
    if (p->KWG % ((p->MDIMC * p->NDIMC) / MDIMA) || p->KWG % ((p->MDIMC * p->NDIMC) / NDIMB)) return 0;
    if (p->KWG % p->KWI) return 0;
    uint64_t lm = 4ull * ((p->SA ? p->KWG * p->MWG : 0) + (p->SB ? p->KWG * p->NWG : 0));
    if (lm > local_mem) return 0;
    return 1;
}

static void set_xgemm(ct_tune_set *s, const xgemm_params *p) {
    ct_tune_set_put(s, "Xgemm", "GEMMK", 0);
    ct_tune_set_put(s, "Xgemm", "KREG", 1);
    ct_tune_set_put(s, "Xgemm", "KWG", (size_t)p->KWG);
    ct_tune_set_put(s, "Xgemm", "KWI", (size_t)p->KWI);
    ct_tune_set_put(s, "Xgemm", "MDIMA", (size_t)p->MDIMC);
    ct_tune_set_put(s, "Xgemm", "MDIMC", (size_t)p->MDIMC);
    ct_tune_set_put(s, "Xgemm", "MWG", (size_t)p->MWG);
    ct_tune_set_put(s, "Xgemm", "NDIMB", (size_t)p->NDIMC);
    ct_tune_set_put(s, "Xgemm", "NDIMC", (size_t)p->NDIMC);
    ct_tune_set_put(s, "Xgemm", "NWG", (size_t)p->NWG);
    ct_tune_set_put(s, "Xgemm", "SA", (size_t)p->SA);
    ct_tune_set_put(s, "Xgemm", "SB", (size_t)p->SB);
    ct_tune_set_put(s, "Xgemm", "STRM", 0);
    ct_tune_set_put(s, "Xgemm", "STRN", 0);
    ct_tune_set_put(s, "Xgemm", "VWM", (size_t)p->VWM);
    ct_tune_set_put(s, "Xgemm", "VWN", (size_t)p->VWN);
}

/* The kernels CLBlast's GEMM routine uses besides Xgemm, with CLBlast's generic values, so a
 * stored set is complete on any device. */
static void set_rest(ct_tune_set *s, size_t indirect_threshold) {
    ct_tune_set_put(s, "GemmRoutine", "XGEMM_MIN_INDIRECT_SIZE", indirect_threshold);
    const char *xd[] = {"KWID", "MDIMAD", "MDIMCD", "NDIMBD", "NDIMCD", "PADA", "PADB", "VWMD", "VWND", "WGD"};
    const size_t xdv[] = {2, 8, 8, 8, 8, 1, 1, 1, 1, 16};
    for (int i = 0; i < 10; i++) ct_tune_set_put(s, "XgemmDirect", xd[i], xdv[i]);
    ct_tune_set_put(s, "Copy", "COPY_DIMX", 16), ct_tune_set_put(s, "Copy", "COPY_DIMY", 16);
    ct_tune_set_put(s, "Copy", "COPY_VW", 4), ct_tune_set_put(s, "Copy", "COPY_WPT", 2);
    ct_tune_set_put(s, "Pad", "PAD_DIMX", 32), ct_tune_set_put(s, "Pad", "PAD_DIMY", 8);
    ct_tune_set_put(s, "Pad", "PAD_WPTX", 2), ct_tune_set_put(s, "Pad", "PAD_WPTY", 1);
    ct_tune_set_put(s, "Transpose", "TRA_DIM", 8), ct_tune_set_put(s, "Transpose", "TRA_PAD", 0);
    ct_tune_set_put(s, "Transpose", "TRA_SHUFFLE", 1), ct_tune_set_put(s, "Transpose", "TRA_WPT", 4);
    ct_tune_set_put(s, "Padtranspose", "PADTRA_PAD", 0);
    ct_tune_set_put(s, "Padtranspose", "PADTRA_TILE", 8);
    ct_tune_set_put(s, "Padtranspose", "PADTRA_WPT", 4);
}

static void describe(const ct_tune_set *s, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < s->nkernels; i++) {
        if (strcmp(s->kernels[i].kernel, "Xgemm") && strcmp(s->kernels[i].kernel, "GemmRoutine")) continue;
        for (int j = 0; j < s->kernels[i].n; j++) {
            const char *n = s->kernels[i].names[j];
            if (!strcmp(n, "GEMMK") || !strcmp(n, "KREG") || !strcmp(n, "STRM") || !strcmp(n, "STRN") ||
                !strcmp(n, "MDIMA") || !strcmp(n, "NDIMB"))
                continue;
            int w = snprintf(buf + used, len - used, "%s%s=%zu", used ? " " : "",
                             !strcmp(n, "XGEMM_MIN_INDIRECT_SIZE") ? "INDIRECT" : n,
                             s->kernels[i].values[j]);
            if (w < 0 || (size_t)w >= len - used) return;
            used += (size_t)w;
        }
    }
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: ct_tune [--device SPEC] [--budget SECONDS] [--max-candidates N] [--min-gain X]\n"
            "               [--reps N] [--seed N] [--out FILE] [--dry-run] [--shapes small|engine]\n"
            "  --budget S   stop starting new candidates S seconds after the built-in parameters\n"
            "               were measured (default 300; 0 = no time limit)\n"
            "  --max-candidates N  measure at most N parameter sets besides the built-in ones\n"
            "               (default: no limit; 0 = only check the built-in parameters)\n"
            "  --min-gain X store the best candidate only if at least X times as fast as CLBlast's\n"
            "               built-in parameters (default %.2f); otherwise store a record that the\n"
            "               built-in parameters are best, replacing any stored set\n"
            "  --reps N     timed repetitions per shape and candidate (default 3)\n"
            "  --out FILE   also write the winning set to FILE (e.g. to ship it in tune/)\n"
            "  --dry-run    search and print, but store nothing\n"
            "  --store-dir D  store under D instead of the default tuning directory\n"
            "  --shapes     'engine' (default): qkv/attproj/fc/fcproj forward, dX, dW and attention\n"
            "               at C=256, B*T=1024 plus fc at C=768; 'small': four shapes, for tests\n"
            "The result is stored under $XDG_CACHE_HOME/cltrain/tune (or ~/.cache/cltrain/tune),\n"
            "keyed by device name and driver version; ct_devices -v shows what a device uses.\n",
            CT_TUNE_MIN_GAIN);
}

int main(int argc, char **argv) {
    const char *spec = NULL, *out_file = NULL, *shape_set = "engine", *store_dir = NULL;
    double budget = 300, min_gain = CT_TUNE_MIN_GAIN;
    int reps = 3, dry = 0, max_cand = -1; /* -1: no limit */
    unsigned seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--device") && v) spec = v, i++;
        else if (!strcmp(a, "--budget") && v) {
            budget = strtod(v, &end), i++;
            if (*end || !(budget >= 0)) { fprintf(stderr, "ct_tune: --budget needs a number of seconds >= 0\n"); return 2; }
        } else if (!strcmp(a, "--max-candidates") && v) {
            max_cand = (int)strtol(v, &end, 10), i++;
            if (*end || max_cand < 0) { fprintf(stderr, "ct_tune: --max-candidates needs an integer >= 0\n"); return 2; }
        } else if (!strcmp(a, "--min-gain") && v) {
            min_gain = strtod(v, &end), i++;
            if (*end || !(min_gain > 0)) { fprintf(stderr, "ct_tune: --min-gain needs a positive number\n"); return 2; }
        } else if (!strcmp(a, "--reps") && v) {
            reps = (int)strtol(v, &end, 10), i++;
            if (*end || reps < 1) { fprintf(stderr, "ct_tune: --reps needs a positive integer\n"); return 2; }
        } else if (!strcmp(a, "--seed") && v) seed = (unsigned)strtoul(v, NULL, 10), i++;
        else if (!strcmp(a, "--out") && v) out_file = v, i++;
        else if (!strcmp(a, "--store-dir") && v) store_dir = v, i++;
        else if (!strcmp(a, "--shapes") && v) {
            shape_set = v, i++;
            if (strcmp(v, "engine") && strcmp(v, "small")) { fprintf(stderr, "ct_tune: --shapes is 'engine' or 'small'\n"); return 2; }
        } else if (!strcmp(a, "--dry-run")) dry = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else { fprintf(stderr, "ct_tune: unknown or incomplete argument '%s'\n", a); usage(stderr); return 2; }
    }
    if (budget == 0 && max_cand < 0) {
        fprintf(stderr, "ct_tune: --budget 0 needs --max-candidates N (the search must end)\n");
        return 2;
    }
    if (!spec) spec = ct_device_spec_env();
    ct_err err = {0};
    ct_device_info *list = NULL;
    int n = 0, pick = 0, npick = 0;
    if (ct_device_list(&list, &n, &err) || ct_device_select(list, n, spec, 1, &pick, &npick, &err)) {
        fprintf(stderr, "ct_tune: %s\n", err.msg);
        return 2;
    }
    ct_device *dev = NULL;
    ct_device_opts o = ct_device_opts_default();
    o.apply_tuning = 0; /* measure CLBlast's built-in parameters first */
    if (ct_device_open(&dev, &list[pick], &o, &err)) {
        fprintf(stderr, "ct_tune: %s\n", err.msg);
        return 1;
    }
    const ct_device_info *di = ct_device_get_info(dev);
    char bounds[128];
    if (max_cand >= 0 && budget > 0) snprintf(bounds, sizeof bounds, "at most %d candidate(s) or %.0f s", max_cand, budget);
    else if (max_cand >= 0) snprintf(bounds, sizeof bounds, "at most %d candidate(s)", max_cand);
    else snprintf(bounds, sizeof bounds, "budget %.0f s", budget);
    printf("ct_tune: device %d: %s (driver %s), %s\n", di->index, di->name, di->driver_version, bounds);

    /* 1. the shapes */
    ct_gemm_shape shapes[64];
    int ns = 0;
    if (!strcmp(shape_set, "small")) {
        ct_gemm_shape all[32];
        int na = ct_gemm_shapes_gpt(128, 256, all, 32);
        for (int i = 0; i < na; i++) /* one of each transpose kind plus a batched one */
            if (strstr(all[i].name, "fc_fwd") || strstr(all[i].name, "fc_dX") ||
                strstr(all[i].name, "fc_dW") || strstr(all[i].name, "att_QKt"))
                shapes[ns++] = all[i];
    } else {
        ns = ct_gemm_shapes_gpt(256, 1024, shapes, 64);
        ct_gemm_shape big[32];
        int nb = ct_gemm_shapes_gpt(768, 1024, big, 32);
        for (int i = 0; i < nb; i++)
            if (strstr(big[i].name, "_fc_")) shapes[ns++] = big[i];
    }
    bench_buf *bufs = calloc((size_t)ns, sizeof *bufs);
    for (int i = 0; i < ns; i++) {
        const ct_gemm_shape *s = &shapes[i];
        size_t na = s->m * s->k * s->batch, nb = s->k * s->n * s->batch, nc = s->m * s->n * s->batch;
        bufs[i].s = *s;
        bufs[i].ha = malloc(na * 4), bufs[i].hb = malloc(nb * 4);
        if (!bufs[i].ha || !bufs[i].hb) { fprintf(stderr, "ct_tune: out of host memory\n"); return 1; }
        fill(bufs[i].ha, na, 3u + i), fill(bufs[i].hb, nb, 11u + i);
        if (ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "A", na * 4, &bufs[i].a) ||
            ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "B", nb * 4, &bufs[i].b) ||
            ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "C", nc * 4, &bufs[i].c) ||
            ct_buffer_write(bufs[i].a, 0, bufs[i].ha, na * 4) ||
            ct_buffer_write(bufs[i].b, 0, bufs[i].hb, nb * 4)) {
            fprintf(stderr, "ct_tune: %s\n", ct_device_errmsg(dev));
            return 1;
        }
    }
    printf("ct_tune: %d shapes (%s), %d timed repetitions each\n", ns, shape_set, reps);

    /* 2. the baseline: CLBlast's built-in parameters */
    double t_start = ct_time_now();
    char why[2300] = "";
    double base = score(dev, bufs, ns, reps, why, sizeof why);
    printf("[%6.1f s] built-in parameters: %s%.1f GFLOP/s%s%s\n", ct_time_now() - t_start,
           base < 0 ? "FAILED " : "", base < 0 ? 0 : base, base < 0 ? " - " : "", base < 0 ? why : "");
    fflush(stdout);
    /* The bounds count from here: how long the built-in parameters took to compile and measure
     * (seconds on a cold kernel cache) must not decide how many candidates are tried. */
    double t_search = ct_time_now();
#define MORE(tried, tlimit) \
    ((max_cand < 0 || (tried) < max_cand) && (budget <= 0 || ct_time_now() - t_search < (tlimit)))

    /* 3. candidates: the shipped set for this device kind, then seeded random grid points */
    ct_tune_set best;
    double best_score = -1;
    int tried = 0, rejected = 0;
    size_t max_wg = 256;
    clGetDeviceInfo(di->device_id, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wg, &max_wg, NULL);
    int is_gpu = (di->type & CL_DEVICE_TYPE_GPU) != 0;
    static const int cpu_wg[] = {64, 128}, cpu_dim[] = {4, 8}, cpu_vw[] = {4, 8, 16}, cpu_kwg[] = {16, 32};
    static const int gpu_wg[] = {32, 64, 128}, gpu_dim[] = {8, 16, 32}, gpu_vw[] = {1, 2, 4}, gpu_kwg[] = {16, 32};
    const int *wg = is_gpu ? gpu_wg : cpu_wg, *dim = is_gpu ? gpu_dim : cpu_dim,
              *vw = is_gpu ? gpu_vw : cpu_vw, *kwg = is_gpu ? gpu_kwg : cpu_kwg;
    int nwg = is_gpu ? 3 : 2, ndim = is_gpu ? 3 : 2, nvw = 3, nkwg = 2;
    ct_tune_set shipped;
    char shipped_src[512] = "";
    int have_shipped = ct_tune_lookup(NULL, di, &shipped, shipped_src, sizeof shipped_src, &err) == CT_OK;
    for (int cand = 0; MORE(tried, budget); cand++) {
        ct_tune_set s;
        memset(&s, 0, sizeof s);
        if (cand == 0) {
            if (!have_shipped || shipped.builtin) continue;
            s = shipped;
        } else {
            xgemm_params p;
            int guard = 0;
            do {
#define PICK(arr, n) arr[(seed = seed * 1103515245u + 12345u, (seed >> 8) % (unsigned)(n))]
                p.MWG = PICK(wg, nwg), p.NWG = PICK(wg, nwg), p.KWG = PICK(kwg, nkwg);
                p.MDIMC = PICK(dim, ndim), p.NDIMC = PICK(dim, ndim);
                p.VWM = PICK(vw, nvw), p.VWN = PICK(vw, nvw);
                p.SA = is_gpu ? (int)PICK(dim, 2) % 2 : 0, p.SB = p.SA, p.KWI = 2;
#undef PICK
            } while (!xgemm_valid(&p, max_wg, di->local_mem_bytes) && ++guard < 1000);
            if (guard >= 1000) break;
            set_xgemm(&s, &p);
            set_rest(&s, 1);
        }
        tried++;
        char desc[512];
        describe(&s, desc, sizeof desc);
        double sc = -1;
        if (ct_tune_set_apply(dev, &s) != CT_OK) snprintf(why, sizeof why, "%s", ct_device_errmsg(dev));
        else sc = score(dev, bufs, ns, reps, why, sizeof why);
        if (sc < 0) rejected++;
        if (sc > best_score) best_score = sc, best = s;
        printf("[%6.1f s] #%d %s%s: %s%.1f GFLOP/s (best %.1f)%s%s\n", ct_time_now() - t_start, tried,
               cand == 0 ? "shipped " : "", desc, sc < 0 ? "REJECTED " : "", sc < 0 ? 0 : sc,
               best_score, sc < 0 ? " - " : "", sc < 0 ? why : "");
        fflush(stdout);
    }
    /* 4. the direct/indirect threshold with the best Xgemm set */
    if (best_score > 0) {
        size_t thresholds[] = {1, 512, 896};
        for (int t = 0; t < 3 && MORE(tried, budget * 1.2); t++) {
            ct_tune_set s = best;
            size_t cur = 0;
            for (int i = 0; i < s.nkernels; i++)
                if (!strcmp(s.kernels[i].kernel, "GemmRoutine")) cur = s.kernels[i].values[0];
            if (thresholds[t] == cur) continue;
            ct_tune_set_put(&s, "GemmRoutine", "XGEMM_MIN_INDIRECT_SIZE", thresholds[t]);
            tried++;
            double sc = ct_tune_set_apply(dev, &s) == CT_OK ? score(dev, bufs, ns, reps, why, sizeof why) : -1;
            printf("[%6.1f s] #%d indirect threshold %zu: %.1f GFLOP/s (best %.1f)\n",
                   ct_time_now() - t_start, tried, thresholds[t], sc < 0 ? 0 : sc, best_score);
            if (sc > best_score) best_score = sc, best = s;
        }
    }
#undef MORE
    /* 5. the decision: a candidate only if it beats CLBlast's own parameters */
    int rc = 0;
    ct_tune_choice choice = ct_tune_choose(base, best_score, min_gain);
    time_t tt = time(NULL);
    char date[32], ratio[64];
    strftime(date, sizeof date, "%Y-%m-%d", gmtime(&tt));
    snprintf(ratio, sizeof ratio, "%s", tried ? "no candidate worked" : "no candidate tried");
    if (best_score > 0 && base > 0) snprintf(ratio, sizeof ratio, "best %.2fx", best_score / base);
    ct_tune_set keep;
    if (choice == CT_TUNE_KEEP_NOTHING) {
        printf("ct_tune: neither CLBlast's built-in parameters nor any of %d candidates worked; "
               "nothing stored (a stored set, if any, is left as it was)\n", tried);
        rc = 1;
    } else if (choice == CT_TUNE_KEEP_BUILTIN) {
        char note[256];
        if (best_score > 0)
            snprintf(note, sizeof note,
                     "ct_tune found nothing better: %s; %.1f vs %.1f GFLOP/s built-in, geomean over "
                     "%d %s shapes, %d candidates, %s",
                     ratio, best_score, base, ns, shape_set, tried, date);
        else
            snprintf(note, sizeof note,
                     "ct_tune found nothing better: %s; built-in %.1f GFLOP/s, geomean over %d %s "
                     "shapes, %d candidates, %s",
                     ratio, base, ns, shape_set, tried, date);
        ct_tune_set_builtin(&keep, di, note);
        printf("ct_tune: CLBlast's built-in parameters win (%.1f GFLOP/s; candidates: %s, %.2fx "
               "needed); no parameters will be applied on this device\n",
               base, ratio, min_gain);
    } else {
        keep = best;
        snprintf(keep.device, sizeof keep.device, "%s", di->name);
        snprintf(keep.driver, sizeof keep.driver, "%s", di->driver_version);
        snprintf(keep.platform, sizeof keep.platform, "%s", di->platform);
        snprintf(keep.type, sizeof keep.type, "%s", ct_device_type_str(di->type));
        keep.builtin = 0;
        snprintf(keep.note, sizeof keep.note,
                 "ct_tune %s: %.1f GFLOP/s geomean over %d %s shapes (built-in: %s%.1f), %d candidates",
                 date, best_score, ns, shape_set, base < 0 ? "FAILED " : "", base < 0 ? 0 : base, tried);
        if (base > 0)
            printf("ct_tune: best %.1f GFLOP/s, %.2fx the built-in parameters\n", best_score,
                   best_score / base);
        else
            printf("ct_tune: best %.1f GFLOP/s; the built-in parameters FAILED\n", best_score);
    }
    if (choice != CT_TUNE_KEEP_NOTHING) {
        char text[8192];
        ct_tune_set_format(&keep, text, sizeof text);
        fputs(text, stdout);
        if (out_file) {
            FILE *f = fopen(out_file, "w");
            if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
                fprintf(stderr, "ct_tune: cannot write '%s'\n", out_file);
                rc = 1;
            }
        }
        char cache[1024], tdir[1100], path[1400];
        ct_cache_dir_default(cache, sizeof cache);
        if (store_dir) snprintf(tdir, sizeof tdir, "%s", store_dir);
        else snprintf(tdir, sizeof tdir, "%s/tune", cache);
        ct_tune_store_path(tdir, di, path, sizeof path);
        /* what is stored now, to say what the new result replaces */
        ct_tune_set old;
        char old_src[1600] = "";
        ct_err oerr = {0};
        int had_set = ct_tune_lookup(tdir, di, &old, old_src, sizeof old_src, &oerr) == CT_OK &&
                      !strncmp(old_src, "stored", 6) && !old.builtin;
        if (dry) {
            printf("ct_tune: --dry-run: nothing stored%s\n",
                   had_set && choice == CT_TUNE_KEEP_BUILTIN ? " (the stored set, slower than the "
                                                               "built-in parameters, stays)" : "");
        } else if (ct_tune_store(tdir, di, &keep, &err) != CT_OK) {
            fprintf(stderr, "ct_tune: %s\n", err.msg);
            rc = 1;
        } else if (choice == CT_TUNE_KEEP_BUILTIN) {
            printf("ct_tune: stored %s (CLBlast's built-in parameters)%s\n", path,
                   had_set ? "; it replaces the parameter set stored there before" : "");
        } else {
            printf("ct_tune: stored %s\n", path);
        }
    }
    for (int i = 0; i < ns; i++) {
        ct_buffer_free(bufs[i].a), ct_buffer_free(bufs[i].b), ct_buffer_free(bufs[i].c);
        free(bufs[i].ha), free(bufs[i].hb);
    }
    free(bufs);
    ct_device_free(dev);
    ct_device_list_free(list);
    return rc;
}
