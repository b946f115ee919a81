/* bench_gemm - GFLOP/s of the GEMM wrapper (CLBlast) on the GEMM shapes of GPT training, beside
 * OpenBLAS measured in the same process on the same shapes, and of the bf16 GEMM paths
 * (--paths: portable, mma, mma-emulated; ct_gemm_run) and of the tf32 paths (mma-tf32,
 * mma-tf32-emulated: fp32 operands rounded to tf32 by the kernel) on the same shapes, in rows of
 * their own.
 *
 * For each shape: the first call is timed on its own (it includes CLBlast's and the driver's
 * compilation the first time a kernel variant is met), then steady state is the median of timed
 * repetitions. Every result is checked against a plain-C dot product at sampled entries (all
 * entries for small outputs), and OpenBLAS's result is checked the same way.
 *
 *   bench_gemm [--device SPEC] [--C 256,768] [--BT 1024,4096] [--reps N] [--no-tune] [--csv]
 *              [--no-blas] [--quick] [--paths clblast,portable,mma]
 *
 * A bf16 path's row (shape "<shape>:<path>") times the same product with A and B rounded to bf16
 * and C fp32; its error is against the reference on those rounded inputs, its ratio is to the
 * CLBlast row above it. A path the device refuses is skipped with one line saying why.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "ct_cl.h"
#include "gemm_shapes.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Element (i, j) of op(X) for a row-major X with leading dimension ld. */
static float at(const float *x, int t, size_t ld, size_t i, size_t j) {
    return t ? x[j * ld + i] : x[i * ld + j];
}

/* Largest relative error over sampled entries of C (batch matrix `bi` included). */
static double check(const ct_gemm_shape *s, const float *A, const float *B, const float *C,
                    const float *C0, float alpha, float beta, unsigned seed) {
    size_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    size_t sa = s->m * s->k, sb = s->k * s->n, sc = s->m * s->n;
    size_t total = s->m * s->n * s->batch;
    size_t samples = total <= 4096 ? total : 512;
    double worst = 0;
    for (size_t t = 0; t < samples; t++) {
        size_t e = samples == total ? t : (size_t)((seed = seed * 1103515245u + 12345u) >> 1) % total;
        size_t bi = e / sc, i = (e % sc) / s->n, j = e % s->n;
        double ref = 0, mag = 0;
        for (size_t p = 0; p < s->k; p++) {
            double v = (double)at(A + bi * sa, s->ta, lda, i, p) * at(B + bi * sb, s->tb, ldb, p, j);
            ref += v;
            mag += fabs(v);
        }
        ref = alpha * ref + beta * C0[e];
        mag = fabs(alpha) * mag + fabs(beta * C0[e]);
        double err = fabs(C[e] - ref) / (mag + 1e-30);
        if (err > worst) worst = err;
    }
    return worst;
}

static void fill(float *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 9) & 0x3fff) / 16384.0f - 0.5f;
    }
}

static int parse_list(const char *s, int *out, int room) {
    int n = 0;
    while (*s && n < room) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v <= 0) return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

/* One kernel path on shape s: A and B as bf16 (rounded from the fp32 operands), or fp32 for a
 * tf32 path (which rounds them itself); Ar, Br receive the rounded values as floats, for the
 * reference, C fp32 from C0. Times the first call and the
 * median of `reps` more; C receives the result of one pass from C0. 0 on success. */
/* fp32 -> tf32 as cvt.rna.tf32.f32 (nearest, ties away from zero): the reference's operands of
 * a tf32 path's row. */
static float tf32_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&x, &u, 4);
    return x;
}

static int time_path(ct_device *dev, ct_gemm_path path, const ct_gemm_shape *s, const float *A,
                     const float *B, const float *C0, float *Ar, float *Br, float *C, float alpha,
                     float beta, int reps, double *first, double *med) {
    size_t na = s->m * s->k * s->batch, nb = s->k * s->n * s->batch, nc = s->m * s->n * s->batch;
    int bf = ct_gemm_path_bf16(path); /* else fp32 operands the path rounds to tf32 */
    uint16_t *a16 = malloc(na * 2), *b16 = malloc(nb * 2);
    ct_buffer *bA = NULL, *bB = NULL, *bC = NULL;
    int rc = 1;
    if (!a16 || !b16) goto done;
    for (size_t i = 0; i < na; i++)
        Ar[i] = bf ? ct_bf16_to_f32(a16[i] = ct_bf16_from_f32(A[i])) : tf32_round(A[i]);
    for (size_t i = 0; i < nb; i++)
        Br[i] = bf ? ct_bf16_to_f32(b16[i] = ct_bf16_from_f32(B[i])) : tf32_round(B[i]);
    size_t eb = bf ? 2 : 4;
    if (ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "A", na * eb, &bA) ||
        ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "B", nb * eb, &bB) ||
        ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "C", nc * 4, &bC) ||
        ct_buffer_write(bA, 0, bf ? (const void *)a16 : (const void *)A, na * eb) ||
        ct_buffer_write(bB, 0, bf ? (const void *)b16 : (const void *)B, nb * eb) ||
        ct_buffer_write(bC, 0, C0, nc * 4))
        goto done;
    ct_gemm_desc g = {.ta = s->ta, .tb = s->tb, .m = s->m, .n = s->n, .k = s->k,
                      .batch = s->batch, .alpha = alpha, .beta = beta,
                      .a = ct_buffer_mem(bA), .lda = s->ta ? s->m : s->k, .a_stride = s->m * s->k,
                      .b = ct_buffer_mem(bB), .ldb = s->tb ? s->k : s->n, .b_stride = s->k * s->n,
                      .c = ct_buffer_mem(bC), .ldc = s->n, .c_stride = s->m * s->n};
    double times[64];
    int r_total = reps + 1 > 64 ? 64 : reps + 1;
    for (int r = 0; r < r_total; r++) {
        if (r == 1 && ct_buffer_read(bC, 0, C, nc * 4)) goto done; /* one beta pass */
        double t0 = ct_time_now();
        if (ct_gemm_run(dev, path, &g, NULL) || ct_device_finish(dev)) goto done;
        double t = ct_time_now() - t0;
        if (r == 0) *first = t;
        else times[r - 1] = t;
    }
    qsort(times, (size_t)(r_total - 1), sizeof times[0], cmp_double);
    *med = times[(r_total - 1) / 2];
    rc = 0;
done:
    if (rc) fprintf(stderr, "bench_gemm: %s [%s]: %s\n", s->name, ct_gemm_path_str(path),
                    ct_device_errmsg(dev));
    ct_buffer_free(bA), ct_buffer_free(bB), ct_buffer_free(bC);
    free(a16), free(b16);
    return rc;
}

int main(int argc, char **argv) {
    const char *spec = NULL;
    int Cs[8] = {256, 768}, nC = 2, BTs[8] = {1024, 4096}, nBT = 2, reps = 5, tune = 1, csv = 0,
        blas = 1, compare = 0;
    const char *paths_arg = "clblast";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--device") && v) spec = v, i++;
        else if (!strcmp(a, "--C") && v) { if ((nC = parse_list(v, Cs, 8)) <= 0) goto bad; i++; }
        else if (!strcmp(a, "--BT") && v) { if ((nBT = parse_list(v, BTs, 8)) <= 0) goto bad; i++; }
        else if (!strcmp(a, "--reps") && v) { reps = atoi(v); if (reps < 1) goto bad; i++; }
        else if (!strcmp(a, "--no-tune")) tune = 0;
        else if (!strcmp(a, "--no-blas")) blas = 0;
        else if (!strcmp(a, "--csv")) csv = 1;
        else if (!strcmp(a, "--compare-builtin")) compare = 1;
        else if (!strcmp(a, "--paths") && v) paths_arg = v, i++;
        else if (!strcmp(a, "--quick")) Cs[0] = 256, nC = 1, BTs[0] = 1024, nBT = 1, reps = 3;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: bench_gemm [--device SPEC] [--C 256,768] [--BT 1024,4096] [--reps N]\n"
                   "                  [--no-tune] [--no-blas] [--csv] [--quick] [--compare-builtin]\n"
                   "                  [--paths clblast,portable,mma,mma-emulated,mma-tf32]\n"
                   "  --no-tune  use CLBlast's built-in parameters, not stored/shipped ones\n"
                   "  --paths    GEMM paths to time (default clblast, always timed): a bf16 path\n"
                   "             adds a row \"<shape>:<path>\" per shape (A, B bf16, C fp32; its\n"
                   "             ratio is to the CLBlast row, its error on the bf16 inputs)\n"
                   "  --compare-builtin  also time CLBlast's built-in parameters on a second device\n"
                   "             of the same kind (POCL_DEVICES=\"pthread pthread\"), interleaved\n"
                   "  --csv      one row per shape: shape,m,n,k,batch,ta,tb,first_ms,ms,gflops,"
                   "builtin_gflops,blas_gflops,ratio,max_rel_err\n");
            return 0;
        } else {
        bad:
            fprintf(stderr, "bench_gemm: bad argument '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!spec) spec = ct_device_spec_env();
    ct_err err = {0};
    ct_device_info *list = NULL;
    int n = 0, pick[2] = {0, 0}, npick = 0, ndev = compare ? 2 : 1;
    ct_device *devs[2] = {NULL, NULL}, *dev = NULL;
    if (ct_device_list(&list, &n, &err) ||
        ct_device_select(list, n, spec, ndev, pick, &npick, &err)) {
        fprintf(stderr, "bench_gemm: %s%s\n", err.msg,
                compare ? "\n(--compare-builtin needs two devices of the same kind)" : "");
        return 2;
    }
    for (int v = 0; v < ndev; v++) {
        ct_device_opts o = ct_device_opts_default();
        o.apply_tuning = v == 0 ? tune : 0; /* overrides are per device: device 1 keeps CLBlast's own */
        if (ct_device_open(&devs[v], &list[pick[v]], &o, &err)) {
            fprintf(stderr, "bench_gemm: %s\n", err.msg);
            return 1;
        }
    }
    dev = devs[0];
    if (compare && strcmp(list[pick[0]].name, list[pick[1]].name))
        fprintf(stderr, "bench_gemm: warning: comparing different devices (%s, %s)\n",
                list[pick[0]].name, list[pick[1]].name);
    const ct_device_info *di = ct_device_get_info(dev);
    FILE *info = csv ? stderr : stdout;
    fprintf(info, "# device %d: %s (%s, driver %s)\n# clblast parameters: %s\n", di->index, di->name,
            di->platform, di->driver_version, ct_device_tuning_source(dev));
    if (compare)
        fprintf(info, "# built-in column: device %d, %s\n", pick[1], ct_device_tuning_source(devs[1]));
    if (blas) fprintf(info, "# reference: %s (core %s), %d threads\n", openblas_get_config(), openblas_get_corename(),
                      openblas_get_num_threads());
    ct_gemm_path paths[CT_GEMM_PATH__COUNT];
    int npaths = 0;
    {
        char list_buf[256];
        snprintf(list_buf, sizeof list_buf, "%s", paths_arg);
        for (char *tok = strtok(list_buf, ","); tok; tok = strtok(NULL, ",")) {
            ct_gemm_path p;
            if (ct_gemm_path_parse(tok, &p, &err)) {
                fprintf(stderr, "bench_gemm: %s\n", err.msg);
                return 2;
            }
            if (p == CT_GEMM_CLBLAST) continue; /* the main row */
            if (ct_gemm_path_check(dev, p)) {
                fprintf(info, "# %s: skipped: %s\n", ct_gemm_path_str(p), ct_device_errmsg(dev));
                continue;
            }
            int dup = 0;
            for (int q = 0; q < npaths; q++) dup |= paths[q] == p;
            if (!dup && npaths < CT_GEMM_PATH__COUNT) paths[npaths++] = p;
        }
    }
    const int namew = npaths ? 40 : 26; /* the shape column, wider for "<shape>:<path>" */
    ct_gemm_shape shapes[128];
    int ns = 0;
    for (int c = 0; c < nC; c++)
        for (int b = 0; b < nBT; b++) ns += ct_gemm_shapes_gpt(Cs[c], BTs[b], shapes + ns, 128 - ns);
    if (csv) printf("shape,m,n,k,batch,ta,tb,first_ms,ms,gflops,builtin_gflops,blas_gflops,ratio,max_rel_err\n");
    else
        printf("%-*s %6s %6s %6s %5s %2s %2s %9s %9s %8s %8s %8s %6s %9s\n", namew, "shape", "m", "n",
               "k", "batch", "ta", "tb", "first_ms", "ms", "GFLOP/s", "builtin", "BLAS", "ratio",
               "rel_err");
    double ratios[128], bratios[128];
    int nratio = 0, nbratio = 0, failures = 0;
    for (int si = 0; si < ns; si++) {
        const ct_gemm_shape *s = &shapes[si];
        size_t na = s->m * s->k * s->batch, nb = s->k * s->n * s->batch, nc = s->m * s->n * s->batch;
        float *A = malloc(na * 4), *B = malloc(nb * 4), *C = malloc(nc * 4), *C0 = malloc(nc * 4),
              *Cb = malloc(nc * 4);
        if (!A || !B || !C || !C0 || !Cb) { fprintf(stderr, "bench_gemm: out of host memory\n"); return 1; }
        fill(A, na, 1u + si), fill(B, nb, 7u + si), fill(C0, nc, 13u + si);
        /* operands on the tuned device (0) and, with --compare-builtin, the built-in one (1) */
        ct_buffer *bA[2] = {NULL, NULL}, *bB[2] = {NULL, NULL}, *bC[2] = {NULL, NULL};
        for (int v = 0; v < ndev; v++)
            if (ct_buffer_alloc(devs[v], CT_MEM_WORKSPACE, "A", na * 4, &bA[v]) ||
                ct_buffer_alloc(devs[v], CT_MEM_WORKSPACE, "B", nb * 4, &bB[v]) ||
                ct_buffer_alloc(devs[v], CT_MEM_WORKSPACE, "C", nc * 4, &bC[v]) ||
                ct_buffer_write(bA[v], 0, A, na * 4) || ct_buffer_write(bB[v], 0, B, nb * 4) ||
                ct_buffer_write(bC[v], 0, C0, nc * 4)) {
                fprintf(stderr, "bench_gemm: %s\n", ct_device_errmsg(devs[v]));
                return 1;
            }
        size_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n, ldc = s->n;
        const float alpha = 1.0f, beta = 0.5f;
        /* Interleaved: each repetition times the tuned call, the built-in call and OpenBLAS one
         * after the other, so a change of load affects all of them alike. Repetition 0 is the
         * first call (compilation included) and is reported apart. */
        double times[3][64], first[2] = {0, 0};
        int r_total = reps + 1 > 64 ? 64 : reps + 1;
        for (int r = 0; r < r_total; r++) {
            for (int v = 0; v < ndev; v++) {
                ct_device *dv = devs[v];
                if (r == 1) ct_buffer_read(bC[v], 0, v == 0 ? C : Cb, nc * 4); /* one beta pass */
                double t0 = ct_time_now();
                ct_status st = s->batch == 1
                    ? ct_gemm(dv, s->ta, s->tb, s->m, s->n, s->k, alpha, ct_buffer_mem(bA[v]), 0, lda,
                              ct_buffer_mem(bB[v]), 0, ldb, beta, ct_buffer_mem(bC[v]), 0, ldc, NULL)
                    : ct_gemm_strided_batched(dv, s->ta, s->tb, s->m, s->n, s->k, alpha,
                                              ct_buffer_mem(bA[v]), 0, lda, s->m * s->k,
                                              ct_buffer_mem(bB[v]), 0, ldb, s->k * s->n, beta,
                                              ct_buffer_mem(bC[v]), 0, ldc, s->m * s->n, s->batch, NULL);
                if (st == CT_OK) st = ct_device_finish(dv);
                if (st != CT_OK) {
                    fprintf(stderr, "bench_gemm: %s: %s\n", s->name, ct_device_errmsg(dv));
                    return 1;
                }
                double t = ct_time_now() - t0;
                if (r == 0) first[v] = t;
                else times[v][r - 1] = t;
            }
            if (r == 1 && ndev > 1) { /* check the built-in device's result too */
                double e = check(s, A, B, Cb, C0, alpha, beta, 99u + si);
                if (!(e <= 1e-6 * (double)s->k + 1e-5)) {
                    fprintf(stderr, "bench_gemm: %s: built-in parameters give a WRONG result (%.2e)\n", s->name, e);
                    failures++;
                }
            }
            if (blas) {
                memcpy(Cb, C0, nc * 4);
                double t0 = ct_time_now();
                for (size_t bi = 0; bi < s->batch; bi++)
                    cblas_sgemm(CblasRowMajor, s->ta ? CblasTrans : CblasNoTrans,
                                s->tb ? CblasTrans : CblasNoTrans, (int)s->m, (int)s->n, (int)s->k,
                                alpha, A + bi * s->m * s->k, (int)lda, B + bi * s->k * s->n, (int)ldb,
                                beta, Cb + bi * s->m * s->n, (int)ldc);
                double tb = ct_time_now() - t0;
                if (r > 0) times[2][r - 1] = tb;
            }
        }
        double flops = 2.0 * s->m * s->n * s->k * s->batch;
        double med[3] = {0, 0, 0};
        for (int v = 0; v < 3; v++) {
            if ((v == 1 && ndev < 2) || (v == 2 && !blas)) continue;
            qsort(times[v], (size_t)(r_total - 1), sizeof times[v][0], cmp_double);
            med[v] = times[v][(r_total - 1) / 2];
        }
        double err_ct = check(s, A, B, C, C0, alpha, beta, 99u + si);
        double err_blas = blas ? check(s, A, B, Cb, C0, alpha, beta, 99u + si) : 0;
        /* fp32 accumulation over k terms: allow a few ulps per term of the magnitude sum */
        double tol = 1e-6 * (double)s->k + 1e-5;
        int ok = err_ct <= tol && err_blas <= tol;
        if (!ok) failures++;
        double gf = flops / med[0] / 1e9;
        double bi_gf = ndev > 1 ? flops / med[1] / 1e9 : 0, blas_gf = blas ? flops / med[2] / 1e9 : 0;
        double ratio = blas ? gf / blas_gf : 0;
        if (blas) ratios[nratio++] = ratio;
        if (ndev > 1) bratios[nbratio++] = gf / bi_gf;
        if (csv)
            printf("%s,%zu,%zu,%zu,%zu,%d,%d,%.1f,%.3f,%.2f,%.2f,%.2f,%.3f,%.2e\n", s->name, s->m, s->n,
                   s->k, s->batch, s->ta, s->tb, first[0] * 1e3, med[0] * 1e3, gf, bi_gf, blas_gf,
                   ratio, err_ct);
        else
            printf("%-*s %6zu %6zu %6zu %5zu %2d %2d %9.1f %9.3f %8.1f %8.1f %8.1f %6.2f %9.1e%s\n",
                   namew, s->name, s->m, s->n, s->k, s->batch, s->ta, s->tb, first[0] * 1e3, med[0] * 1e3, gf,
                   bi_gf, blas_gf, ratio, err_ct, ok ? "" : "  WRONG");
        for (int pi = 0; pi < npaths; pi++) {
            float *Ar = malloc(na * 4), *Br = malloc(nb * 4);
            double pfirst = 0, pmed = 0;
            if (!Ar || !Br || time_path(dev, paths[pi], s, A, B, C0, Ar, Br, Cb, alpha, beta, reps,
                                        &pfirst, &pmed)) {
                free(Ar), free(Br);
                return 1;
            }
            /* the same accumulation bound: the reference uses the same bf16 (tf32) inputs */
            double perr = check(s, Ar, Br, Cb, C0, alpha, beta, 99u + si);
            int pok = perr <= tol;
            if (!pok) failures++;
            double pgf = flops / pmed / 1e9;
            char label[80];
            snprintf(label, sizeof label, "%.47s:%.20s", s->name, ct_gemm_path_str(paths[pi]));
            if (csv)
                printf("%s,%zu,%zu,%zu,%zu,%d,%d,%.1f,%.3f,%.2f,0,0,%.3f,%.2e\n", label, s->m, s->n,
                       s->k, s->batch, s->ta, s->tb, pfirst * 1e3, pmed * 1e3, pgf, pgf / gf, perr);
            else
                printf("%-*s %6zu %6zu %6zu %5zu %2d %2d %9.1f %9.3f %8.1f %8s %8s %6.2f %9.1e%s\n",
                       namew, label, s->m, s->n, s->k, s->batch, s->ta, s->tb, pfirst * 1e3,
                       pmed * 1e3, pgf, "-", "-", pgf / gf, perr, pok ? "" : "  WRONG");
            free(Ar), free(Br);
        }
        fflush(stdout);
        for (int v = 0; v < ndev; v++) ct_buffer_free(bA[v]), ct_buffer_free(bB[v]), ct_buffer_free(bC[v]);
        free(A), free(B), free(C), free(C0), free(Cb);
    }
    if (nratio) {
        qsort(ratios, (size_t)nratio, sizeof ratios[0], cmp_double);
        double med = nratio % 2 ? ratios[nratio / 2]
                                : 0.5 * (ratios[nratio / 2 - 1] + ratios[nratio / 2]);
        fprintf(info, "# ratio to OpenBLAS: median %.2f, min %.2f, max %.2f over %d shapes\n", med,
                ratios[0], ratios[nratio - 1], nratio);
    }
    if (nbratio) {
        qsort(bratios, (size_t)nbratio, sizeof bratios[0], cmp_double);
        fprintf(info, "# tuned / built-in parameters: median %.2f, min %.2f, max %.2f\n",
                bratios[nbratio / 2], bratios[0], bratios[nbratio - 1]);
    }
    if (failures) fprintf(stderr, "bench_gemm: %d shape(s) gave WRONG results\n", failures);
    ct_device_free(devs[0]);
    ct_device_free(devs[1]);
    ct_device_list_free(list);
    return failures ? 1 : 0;
}
