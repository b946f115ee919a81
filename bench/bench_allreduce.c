/* bench_allreduce.c - nccl-tests-style benchmark of cltrain's collectives, run under mpiexec.
 *
 *   mpiexec -n 4 build/bin/bench_allreduce -b 8 -e 256M -f 2 -a all [--devices-per-rank D]
 *           [-c allreduce|reducescatter|allgather|alltoall] [-w 1] [-n 20] [--budget 256M]
 *           [--inplace] [--device-buffers] [-o sum|max|avg] [--csv F] [--json F] [--svg F]
 *           [--write-table F] [--write-links F] [--algo-env]
 *
 * Workers = ranks x D threads. Every algorithm of the collective (or -a NAME[,NAME]) runs at every
 * size, interleaved with rotated order in the same process, MPI's own collective ("mpi") among
 * them as the reference whenever each rank holds one worker. Per row: size (bytes), count, type,
 * op, algorithm, time in us (min/avg/max over workers of the mean over iterations), algbw = S/t
 * and busbw = algbw * 2(n-1)/n (all-reduce) or (n-1)/n (the others) in GB/s from the average
 * time, busbw relative to mpi's, and #wrong from an exact check of every element (integer-valued
 * data, receive buffers poisoned with NaN first). Then the per-size winner, an alpha-beta fit per
 * algorithm with predicted against measured time, and optional CSV / JSON / SVG (busbw vs size).
 * Check mode is off while timing (it adds a header exchange per call); the checked call has it on.
 * Iterations per size: min(n, max(2, budget / size)) so a sweep to 256 MiB takes minutes;
 * --trials K repeats the whole interleaved round K times and reports the median round. */
#include <math.h>
#include <mpi.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ct_parallel.h"

#define MAX_ALGOS 16
#define MAX_SIZES 64
#define MAX_TRIALS 9

typedef struct row {
    size_t bytes, count;
    int algo; /* index into names */
    double tmin, tavg, tmax; /* us */
    double algbw, busbw, ratio, model, spread; /* spread: (max-min)/median of trial averages */
    long long wrong;
    int iters;
} row;

typedef struct cfg {
    size_t minb, maxb;
    double factor;
    int warm, iters, inplace, device, D, trials;
    size_t budget;
    ct_coll coll;
    ct_op op;
    const char *algos, *csv, *json, *svg, *table, *links;
} cfg;

static size_t parse_size(const char *s) {
    char *e = NULL;
    double v = strtod(s, &e);
    if (e && (*e == 'K' || *e == 'k')) v *= 1024;
    else if (e && (*e == 'M' || *e == 'm')) v *= 1024 * 1024;
    else if (e && (*e == 'G' || *e == 'g')) v *= 1024.0 * 1024 * 1024;
    return (size_t)v;
}

static void human(size_t b, char *out, size_t len) {
    if (b >= (1u << 30) && b % (1u << 30) == 0) snprintf(out, len, "%zu GiB", b >> 30);
    else if (b >= (1u << 20) && b % (1u << 20) == 0) snprintf(out, len, "%zu MiB", b >> 20);
    else if (b >= 1024 && b % 1024 == 0) snprintf(out, len, "%zu KiB", b >> 10);
    else snprintf(out, len, "%zu B", b);
}

static void usage(void) {
    fprintf(stderr,
            "usage: mpiexec -n R bench_allreduce [-b MIN] [-e MAX] [-f FACTOR] [-a ALGO|all]\n"
            "  [-c allreduce|reducescatter|allgather|alltoall] [-w WARMUP] [-n ITERS] [--budget BYTES]\n"
            "  [--trials K (interleaved rounds per size; the median round is reported)]\n"
            "  [--inplace] [--device-buffers] [--devices-per-rank D] [-o sum|avg|max]\n"
            "  [--csv FILE] [--json FILE] [--svg FILE] [--write-table FILE] [--write-links FILE]\n"
            "sizes take K, M, G suffixes; CT_COLL_ALGO=\"allreduce=ring\" sets selector overrides\n");
}

static double loadavg(void) {
    double v = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &v) != 1) v = -1;
        fclose(f);
    }
    return v;
}

static float val(int r, size_t i) { return (float)((int)((r * 131 + (long)i * 7) % 23) - 11); }

/* busbw factor (nccl-tests) */
static double bus_factor(ct_coll c, int n) {
    if (n <= 1) return 1.0;
    return c == CT_COLL_ALLREDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
}

/* Per-worker buffers and one collective call of the benchmark. */
typedef struct wk {
    ct_comm *c;
    ct_device *dev;
    ct_buffer *ds, *dr;
    float *hs, *hr;
} wk;

static ct_status run_once(const cfg *g, wk *w, const char *algo, size_t count, int inplace) {
    int n = ct_comm_size(w->c), r = ct_comm_rank(w->c);
    if (g->device) {
        ct_buffer *s = w->ds, *d = inplace ? w->ds : w->dr;
        switch (g->coll) {
        case CT_COLL_ALLREDUCE: return ct_comm_allreduce_buf(w->c, s, d, count, CT_F32, g->op, algo);
        case CT_COLL_REDUCESCATTER: return ct_comm_reduce_scatter_buf(w->c, s, d, count, CT_F32, g->op, algo);
        case CT_COLL_ALLGATHER: return ct_comm_allgather_buf(w->c, s, d, count, CT_F32, algo);
        default: return ct_comm_alltoall_buf(w->c, s, d, count, CT_F32, algo);
        }
    }
    float *s = inplace ? w->hr : w->hs, *d = w->hr;
    switch (g->coll) {
    case CT_COLL_ALLREDUCE: return ct_comm_allreduce(w->c, s, d, count, CT_F32, g->op, algo);
    case CT_COLL_REDUCESCATTER: return ct_comm_reduce_scatter(w->c, s, d, count, CT_F32, g->op, algo);
    case CT_COLL_ALLGATHER:
        return ct_comm_allgather(w->c, inplace ? d + (size_t)r * count : s, d, count, CT_F32, algo);
    default: (void)n; return ct_comm_alltoall(w->c, s, d, count, CT_F32, algo);
    }
}

/* Element counts: input and output sizes of this collective for `count` (per-block) elements. */
static void extents(ct_coll c, int n, size_t count, size_t *in, size_t *out) {
    switch (c) {
    case CT_COLL_ALLREDUCE: *in = count; *out = count; break;
    case CT_COLL_REDUCESCATTER: *in = count * (size_t)n; *out = count; break;
    case CT_COLL_ALLGATHER: *in = count; *out = count * (size_t)n; break;
    default: *in = count * (size_t)n; *out = count * (size_t)n; break;
    }
}

/* Fill inputs with integer values, poison outputs, run once, count wrong elements. */
static long long checked(const cfg *g, wk *w, const char *algo, size_t count, int inplace,
                         ct_status *st) {
    int n = ct_comm_size(w->c), r = ct_comm_rank(w->c);
    size_t in, out;
    extents(g->coll, n, count, &in, &out);
    float *src = g->device ? w->hs : (inplace ? w->hr : w->hs);
    size_t base_in = (g->coll == CT_COLL_ALLGATHER && inplace && !g->device) ? (size_t)r * count : 0;
    if (!(inplace && !g->device)) for (size_t i = 0; i < out; i++) w->hr[i] = NAN;
    if (g->coll == CT_COLL_ALLGATHER && inplace) {
        for (size_t i = 0; i < out; i++) w->hr[i] = NAN;
        for (size_t i = 0; i < count; i++) w->hr[(size_t)r * count + i] = val(r, i);
    } else if (g->coll == CT_COLL_ALLTOALL) {
        for (int j = 0; j < n; j++)
            for (size_t i = 0; i < count; i++) src[(size_t)j * count + i] = val(r * n + j, i);
    } else {
        for (size_t i = 0; i < in; i++) src[base_in + i] = val(r, i);
    }
    if (g->device) {
        if (g->coll == CT_COLL_ALLGATHER && inplace) ct_buffer_write(w->ds, 0, w->hr, out * 4);
        else ct_buffer_write(w->ds, 0, w->hs, in * 4);
        if (!inplace) ct_buffer_write(w->dr, 0, w->hr, out * 4);
    }
    ct_comm_set_check(w->c, 1);
    *st = run_once(g, w, algo, count, inplace);
    ct_comm_set_check(w->c, 0);
    if (*st) return (long long)out;
    if (g->device) ct_buffer_read(inplace ? w->ds : w->dr, 0, w->hr, out * 4);
    long long wrong = 0;
    for (size_t i = 0; i < out; i++) {
        double e;
        if (g->coll == CT_COLL_ALLGATHER) e = val((int)(i / count), i % count);
        else if (g->coll == CT_COLL_ALLTOALL) e = val((int)(i / count) * n + r, i % count);
        else {
            size_t k = g->coll == CT_COLL_REDUCESCATTER ? (size_t)r * count + i : i;
            double s = 0, m = -1e30;
            for (int q = 0; q < n; q++) {
                s += val(q, k);
                if (val(q, k) > m) m = val(q, k);
            }
            e = g->op == CT_OP_MAX ? m : g->op == CT_OP_AVG ? (double)((float)s / (float)n) : s;
        }
        if (!(w->hr[i] == (float)e)) wrong++;
    }
    return wrong;
}

static void write_svg(const char *path, const cfg *g, const row *rows, int nrows, char names[][32],
                      int nalg, const char *title) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s\n", path);
        return;
    }
    const int W = 860, H = 520, L = 70, R = 170, T = 40, B = 60;
    double xmin = 1e300, xmax = 0, ymax = 0;
    for (int i = 0; i < nrows; i++) {
        double x = log2((double)rows[i].bytes);
        if (x < xmin) xmin = x;
        if (x > xmax) xmax = x;
        if (rows[i].busbw > ymax) ymax = rows[i].busbw;
    }
    if (xmax <= xmin) xmax = xmin + 1;
    double ystep = ymax > 4 ? 1 : ymax > 1 ? 0.25 : ymax > 0.2 ? 0.05 : 0.01;
    ymax = ceil(ymax / ystep + 1e-9) * ystep;
    if (ymax <= 0) ymax = 1;
    static const char *col[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%d\" y=\"22\" font-size=\"14\">%s</text>\n", L, title);
#define PX(x) (L + ((x) - xmin) / (xmax - xmin) * (W - L - R))
#define PY(y) (H - B - (y) / ymax * (H - T - B))
    for (double y = 0; y <= ymax + 1e-9; y += ystep) {
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", L,
                W - R, PY(y), PY(y));
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%.2f</text>\n", L - 6, PY(y) + 4, y);
    }
    for (int x = (int)xmin; x <= (int)xmax; x += 2) {
        char h[32];
        human((size_t)1 << x, h, sizeof h);
        fprintf(f, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#eee\"/>\n", PX(x),
                PX(x), T, H - B);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%s</text>\n", PX(x), H - B + 16, h);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">message size (bytes, log scale)</text>\n",
            (L + W - R) / 2, H - 18);
    fprintf(f, "<text transform=\"translate(18,%d) rotate(-90)\" text-anchor=\"middle\">busbw (GB/s)</text>\n",
            (T + H - B) / 2);
    for (int a = 0; a < nalg; a++) {
        int any = 0;
        for (int i = 0; i < nrows; i++) any |= rows[i].algo == a;
        if (!any) continue;
        const char *c = col[a % 10];
        int dash = !strcmp(names[a], "mpi");
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s points=\"", c,
                dash ? "2.5" : "1.6", dash ? " stroke-dasharray=\"6,3\"" : "");
        for (int i = 0; i < nrows; i++)
            if (rows[i].algo == a)
                fprintf(f, "%.1f,%.1f ", PX(log2((double)rows[i].bytes)), PY(rows[i].busbw));
        fprintf(f, "\"/>\n");
        int ly = T + 10 + a * 18;
        fprintf(f, "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
                W - R + 12, W - R + 36, ly, ly, c, dash ? " stroke-dasharray=\"6,3\"" : "");
        fprintf(f, "<text x=\"%d\" y=\"%d\">%s</text>\n", W - R + 42, ly + 4, names[a]);
    }
    fprintf(f, "</svg>\n");
    fclose(f);
    (void)g;
}

int main(int argc, char **argv) {
    cfg g = {8, (size_t)64 << 20, 2.0, 1, 20, 0, 0, 1, 1, (size_t)256 << 20, CT_COLL_ALLREDUCE,
             CT_OP_SUM, "all", NULL, NULL, NULL, NULL, NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define ARG(s) (!strcmp(a, s) && v && ++i)
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage();
            return 0;
        }
        if (ARG("-b")) g.minb = parse_size(v);
        else if (ARG("-e")) g.maxb = parse_size(v);
        else if (ARG("-f")) g.factor = atof(v);
        else if (ARG("-a")) g.algos = v;
        else if (ARG("-w")) g.warm = atoi(v);
        else if (ARG("-n")) g.iters = atoi(v);
        else if (ARG("--budget")) g.budget = parse_size(v);
        else if (ARG("--trials")) g.trials = atoi(v);
        else if (ARG("-c")) {
            if (ct_coll_parse(v, &g.coll) || g.coll == CT_COLL_ALLTOALLV || g.coll == CT_COLL_BCAST ||
                g.coll == CT_COLL_BARRIER || g.coll == CT_COLL_REDUCESCATTERV ||
                g.coll == CT_COLL_ALLGATHERV) {
                fprintf(stderr, "unknown collective \"%s\"\n", v);
                usage();
                return 2;
            }
        } else if (ARG("-o")) {
            g.op = !strcmp(v, "max") ? CT_OP_MAX : !strcmp(v, "avg") ? CT_OP_AVG : CT_OP_SUM;
            if (strcmp(v, "max") && strcmp(v, "avg") && strcmp(v, "sum")) {
                fprintf(stderr, "unknown op \"%s\"\n", v);
                return 2;
            }
        } else if (ARG("--devices-per-rank") || ARG("-t")) g.D = atoi(v);
        else if (ARG("--csv")) g.csv = v;
        else if (ARG("--json")) g.json = v;
        else if (ARG("--svg")) g.svg = v;
        else if (ARG("--write-table")) g.table = v;
        else if (ARG("--write-links")) g.links = v;
        else if (!strcmp(a, "--inplace")) g.inplace = 1;
        else if (!strcmp(a, "--device-buffers")) g.device = 1;
        else {
            fprintf(stderr, "unknown argument \"%s\"\n", a);
            usage();
            return 2;
        }
    }
    if (g.factor <= 1.0 || g.minb < 1 || g.maxb < g.minb || g.iters < 1 || g.warm < 0 || g.D < 1 ||
        g.trials < 1 || g.trials > MAX_TRIALS) {
        fprintf(stderr, "bad sizes, factor, iterations or devices per rank\n");
        usage();
        return 2;
    }
    ct_topo *topo = NULL;
    ct_err err = {0};
    if (ct_topo_create(&topo, &argc, &argv, g.D, &err)) {
        fprintf(stderr, "bench_allreduce: %s\n", err.msg);
        MPI_Abort(MPI_COMM_WORLD, 2);
        return 2;
    }
    const char *env = getenv("CT_COLL_ALGO"); /* the one place this program reads it */
    if (env && ct_topo_set_override(topo, env, &err)) {
        fprintf(stderr, "CT_COLL_ALGO: %s\n", err.msg);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    double tmo = CT_COMM_TIMEOUT_DEFAULT; /* CT_COMM_TIMEOUT: the one place it is read */
    if (ct_comm_timeout_env(&tmo, &err)) {
        fprintf(stderr, "bench_allreduce: %s\n", err.msg);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    ct_topo_set_timeout(topo, tmo);
    ct_topo_set_check(topo, 0);
    int rank = ct_topo_rank(topo), R = ct_topo_nranks(topo), D = g.D, W = R * D;
    int root = rank == 0;
    /* algorithms */
    char names[MAX_ALGOS][32];
    int nalg = 0;
    if (!strcmp(g.algos, "all")) {
        for (int i = 0; ct_coll_algo_name(g.coll, i) && nalg < MAX_ALGOS; i++)
            snprintf(names[nalg++], 32, "%s", ct_coll_algo_name(g.coll, i));
    } else {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", g.algos);
        for (char *t = strtok(buf, ","); t && nalg < MAX_ALGOS; t = strtok(NULL, ","))
            snprintf(names[nalg++], 32, "%s", t);
    }
    for (int a = 0; a < nalg; a++) {
        int ok = 0;
        for (int i = 0; ct_coll_algo_name(g.coll, i); i++) ok |= !strcmp(names[a], ct_coll_algo_name(g.coll, i));
        if (!ok) {
            if (root) fprintf(stderr, "no algorithm \"%s\" for %s\n", names[a], ct_coll_str(g.coll));
            ct_topo_free(topo);
            return 2;
        }
    }
    /* sizes: multiples of W*4 bytes for the block collectives, of 4 for all-reduce */
    size_t sizes[MAX_SIZES];
    int nsz = 0;
    size_t unit = g.coll == CT_COLL_ALLREDUCE ? 4 : (size_t)W * 4;
    for (double s = (double)g.minb; s <= (double)g.maxb * 1.0000001 && nsz < MAX_SIZES; s *= g.factor) {
        size_t b = (size_t)s / unit * unit;
        if (b == 0) b = unit;
        if (nsz == 0 || b != sizes[nsz - 1]) sizes[nsz++] = b;
    }
    if (nsz < MAX_SIZES && g.maxb / unit * unit > sizes[nsz - 1]) sizes[nsz++] = g.maxb / unit * unit;
    row *rows = calloc((size_t)nsz * (size_t)nalg, sizeof(row));
    int nrows = 0;
    double t_start = MPI_Wtime();
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int workers_here = ct_topo_local_nranks(topo) * D;
    double load0[1] = {loadavg()};
    int oversub = workers_here > cores;
    /* restricted algorithms (mpi with threads) are noted and skipped */
    int usable[MAX_ALGOS];
    int mpi_idx = -1;
    ct_device_info *dlist = NULL;
    int ndev = 0;
    if (g.device && ct_device_list(&dlist, &ndev, &err)) {
        fprintf(stderr, "bench_allreduce: %s\n", err.msg);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    double *tsum = calloc((size_t)D, sizeof(double));
    static double meas[MAX_TRIALS][MAX_ALGOS][3];
    static long long mwrong[MAX_ALGOS];
    static int sel[MAX_SIZES]; /* the selector's algorithm per size (index into names, -1 none) */
    long long *wr = calloc((size_t)D, sizeof(long long));
    int fatal = 0;
#pragma omp parallel num_threads(D)
    {
        int t = omp_get_thread_num();
        wk w = {0};
        ct_status st = ct_comm_world(topo, t, &w.c);
        if (st) {
            fprintf(stderr, "ct_comm_world: %s\n", ct_status_str(st));
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        int n = ct_comm_size(w.c);
        size_t maxcount = sizes[nsz - 1] / 4, in, out;
        if (g.coll != CT_COLL_ALLREDUCE) maxcount = sizes[nsz - 1] / 4 / (size_t)n;
        extents(g.coll, n, maxcount, &in, &out);
        w.hs = malloc(in * 4 + 64);
        w.hr = malloc((out > in ? out : in) * 4 + 64);
        if (!w.hs || !w.hr) {
            fprintf(stderr, "bench_allreduce: out of host memory for %zu bytes\n", (in + out) * 4);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        for (size_t i = 0; i < in; i++) w.hs[i] = val(ct_comm_rank(w.c), i);
        for (size_t i = 0; i < (out > in ? out : in); i++) w.hr[i] = val(ct_comm_rank(w.c), i);
        if (g.device) {
            ct_device_opts o = ct_device_opts_default();
            o.apply_tuning = 0;
            if (ct_device_open(&w.dev, &dlist[ct_topo_device_index(topo, t) % ndev], &o, &err) ||
                ct_buffer_alloc(w.dev, CT_MEM_COMM, "bench_send", (out > in ? out : in) * 4, &w.ds) ||
                ct_buffer_alloc(w.dev, CT_MEM_COMM, "bench_recv", out * 4, &w.dr)) {
                fprintf(stderr, "bench_allreduce: device: %s %s\n", err.msg,
                        w.dev ? ct_device_errmsg(w.dev) : "");
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            ct_buffer_write(w.ds, 0, w.hs, in * 4);
        }
        if (t == 0) {
            for (int a = 0; a < nalg; a++) {
                usable[a] = !*ct_comm_algo_restriction(w.c, g.coll, names[a]);
                if (!strcmp(names[a], "mpi") && usable[a]) mpi_idx = a;
            }
            for (int si = 0; si < nsz; si++) { /* what the engine's calls (no name) would run */
                const char *pick = ct_comm_algo_select(w.c, g.coll, sizes[si]);
                sel[si] = -1;
                for (int a = 0; pick && a < nalg; a++)
                    if (!strcmp(names[a], pick)) sel[si] = a;
            }
            if (root) {
                char h1[32], h2[32];
                human(sizes[0], h1, sizeof h1);
                human(sizes[nsz - 1], h2, sizeof h2);
                printf("# bench_allreduce (cltrain %s) collective %s, op %s, type float, %s, %s buffers\n",
                       "0.1.0", ct_coll_str(g.coll), ct_op_str(g.op),
                       g.inplace ? "in place" : "out of place", g.device ? "OpenCL device" : "host");
                printf("# MPI: %s\n", ct_topo_mpi_version(topo));
                printf("# workers %d = %d ranks x %d threads, %d node(s); %d workers on this node, "
                       "%ld online cores%s; loadavg %.2f\n", W, R, D, ct_topo_nnodes(topo),
                       workers_here, cores, oversub ? " - OVERSUBSCRIBED" : "", load0[0]);
                if (g.device)
                    printf("# device: %s (%s); device<->host staging inside the timed region\n",
                           dlist[ct_topo_device_index(topo, 0) % ndev].name,
                           dlist[ct_topo_device_index(topo, 0) % ndev].platform);
                printf("# sizes %s .. %s factor %g; warm-up %d (first trial), iterations min(%d, max(2, %zu B / size)); "
                       "%d interleaved trial(s) per size, algorithm order rotated, median trial reported "
                       "(spread = (max-min)/median of trial averages); time = mean per call; "
                       "min/avg/max over workers; bandwidths from avg; MPI_Wtick %.1e s\n", h1, h2,
                       g.factor, g.warm, g.iters, g.budget, g.trials, MPI_Wtick());
                printf("# check mode off while timing; exact check of every element after timing "
                       "(integer data, NaN-poisoned output)\n");
                for (int a = 0; a < nalg; a++)
                    if (!usable[a])
                        printf("# %s skipped: %s\n", names[a],
                               ct_comm_algo_restriction(w.c, g.coll, names[a]));
                printf("#%12s %11s %6s %5s %13s %10s %10s %10s %9s %9s %7s %7s %7s\n", "size(B)",
                       "count", "type", "redop", "algorithm", "min(us)", "avg(us)", "max(us)",
                       "algbw", "busbw", "vs_mpi", "spread", "#wrong");
                fflush(stdout);
            }
        }
#pragma omp barrier
        for (int si = 0; si < nsz; si++) {
            size_t bytes = sizes[si];
            size_t count = g.coll == CT_COLL_ALLREDUCE ? bytes / 4 : bytes / 4 / (size_t)n;
            int iters = (int)(g.budget / bytes);
            if (iters > g.iters) iters = g.iters;
            if (iters < 2) iters = 2;
            int first_row = nrows;
            for (int tr = 0; tr < g.trials; tr++)
            for (int k = 0; k < nalg; k++) {
                int a = (k + si + tr) % nalg; /* rotate the order per size and trial */
                if (!usable[a]) continue;
                for (int i = 0; tr == 0 && i < g.warm; i++) run_once(&g, &w, names[a], count, g.inplace);
                ct_comm_barrier(w.c, "dissemination");
                double t0 = MPI_Wtime();
                for (int i = 0; i < iters && !st; i++) st = run_once(&g, &w, names[a], count, g.inplace);
                double dt = (MPI_Wtime() - t0) / iters * 1e6;
                if (st) {
                    fprintf(stderr, "%s %zu B: %s\n", names[a], bytes, ct_comm_errmsg(w.c));
                    fatal = 1;
                }
                long long wrong = 0;
                if (tr == g.trials - 1) { /* the exact check, once per size and algorithm */
                    ct_status cst = CT_OK;
                    wrong = checked(&g, &w, names[a], count, g.inplace, &cst);
                    if (cst) {
                        fprintf(stderr, "%s %zu B (checked call): %s\n", names[a], bytes, ct_comm_errmsg(w.c));
                        fatal = 1;
                    }
                    /* restore inputs the check overwrote */
                    if (g.coll == CT_COLL_ALLREDUCE && g.device) ct_buffer_write(w.ds, 0, w.hs, count * 4);
                }
                tsum[t] = dt;
                wr[t] = wrong;
#pragma omp barrier
                if (t == 0) {
                    double lmin = 1e300, lmax = 0, lsum = 0, gmin, gmax, gsum;
                    long long lw = 0, gw;
                    for (int q = 0; q < D; q++) {
                        lmin = tsum[q] < lmin ? tsum[q] : lmin;
                        lmax = tsum[q] > lmax ? tsum[q] : lmax;
                        lsum += tsum[q];
                        lw += wr[q];
                    }
                    MPI_Allreduce(&lmin, &gmin, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
                    MPI_Allreduce(&lmax, &gmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                    MPI_Allreduce(&lsum, &gsum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
                    MPI_Allreduce(&lw, &gw, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
                    meas[tr][a][0] = gmin;
                    meas[tr][a][1] = gsum / W;
                    meas[tr][a][2] = gmax;
                    if (tr == g.trials - 1) mwrong[a] = gw;
                }
#pragma omp barrier
            }
            if (t == 0) { /* one row per algorithm: the trial with the median average time */
                for (int a = 0; a < nalg; a++) {
                    if (!usable[a]) continue;
                    int idx[MAX_TRIALS];
                    for (int tr = 0; tr < g.trials; tr++) idx[tr] = tr;
                    for (int x = 1; x < g.trials; x++) /* insertion sort by average time */
                        for (int y = x; y > 0 && meas[idx[y]][a][1] < meas[idx[y - 1]][a][1]; y--) {
                            int z = idx[y]; idx[y] = idx[y - 1]; idx[y - 1] = z;
                        }
                    int md = idx[(g.trials - 1) / 2];
                    row *rw = &rows[nrows++];
                    rw->bytes = bytes;
                    rw->count = g.coll == CT_COLL_ALLREDUCE ? count : count * (size_t)n;
                    rw->algo = a;
                    rw->tmin = meas[md][a][0];
                    rw->tavg = meas[md][a][1];
                    rw->tmax = meas[md][a][2];
                    rw->spread = g.trials > 1 ? (meas[idx[g.trials - 1]][a][1] - meas[idx[0]][a][1]) / rw->tavg : 0;
                    rw->algbw = (double)bytes / (rw->tavg * 1e-6) / 1e9;
                    rw->busbw = rw->algbw * bus_factor(g.coll, n);
                    rw->wrong = mwrong[a];
                    rw->iters = iters;
                }
            }
            if (t == 0 && root) { /* print this size's rows, with ratios to mpi and the winner */
                double mpibw = 0;
                int best = -1;
                for (int i = first_row; i < nrows; i++) {
                    if (rows[i].algo == mpi_idx) mpibw = rows[i].busbw;
                    if (best < 0 || rows[i].busbw > rows[best].busbw) best = i;
                }
                for (int k = 0; k < nalg; k++)
                    for (int i = first_row; i < nrows; i++) {
                        row *rw = &rows[i];
                        if (rw->algo != k) continue;
                        rw->ratio = mpibw > 0 ? rw->busbw / mpibw : 0;
                        char ratio[16] = "-";
                        if (mpibw > 0) snprintf(ratio, sizeof ratio, "%.2f", rw->ratio);
                        printf("%13zu %11zu %6s %5s %13s %10.1f %10.1f %10.1f %9.3f %9.3f %7s %6.0f%% %7lld%s\n",
                               rw->bytes, rw->count, "float", ct_op_str(g.op), names[rw->algo],
                               rw->tmin, rw->tavg, rw->tmax, rw->algbw, rw->busbw, ratio,
                               rw->spread * 100, rw->wrong, i == best ? "  *" : "");
                    }
                fflush(stdout);
                char h[32];
                human(bytes, h, sizeof h);
                fprintf(stderr, "# progress: %d/%d sizes done (%s), %.0f s elapsed\n", si + 1, nsz,
                        h, MPI_Wtime() - t_start);
            }
#pragma omp barrier
        }
        ct_buffer_free(w.ds);
        ct_buffer_free(w.dr);
        ct_device_free(w.dev);
        free(w.hs);
        free(w.hr);
        ct_comm_free(w.c);
    }
    int rc = 0;
    if (root) {
        long long wrong = 0;
        for (int i = 0; i < nrows; i++) wrong += rows[i].wrong;
        /* winners */
        printf("#\n# per-size winner (busbw GB/s; ratio to mpi)\n");
        int *win = calloc((size_t)nsz, sizeof(int));
        for (int si = 0; si < nsz; si++) {
            int best = -1;
            double mpibw = 0, bestnm = 0;
            int bestnm_i = -1;
            for (int i = 0; i < nrows; i++) {
                if (rows[i].bytes != sizes[si]) continue;
                if (best < 0 || rows[i].busbw > rows[best].busbw) best = i;
                if (rows[i].algo == mpi_idx) mpibw = rows[i].busbw;
                else if (rows[i].busbw > bestnm) { bestnm = rows[i].busbw; bestnm_i = i; }
            }
            win[si] = best >= 0 ? rows[best].algo : -1;
            char h[32];
            human(sizes[si], h, sizeof h);
            if (best < 0) continue;
            printf("#   %9s  %-13s %8.3f", h, names[rows[best].algo], rows[best].busbw);
            if (mpibw > 0 && bestnm_i >= 0)
                printf("   best of ours: %-13s %.2fx mpi", names[rows[bestnm_i].algo], bestnm / mpibw);
            printf("\n");
        }
        /* alpha-beta fit per algorithm: t = alpha + beta * bytes, least squares on relative error */
        printf("#\n# alpha-beta fit per algorithm (t = alpha + beta*S, weighted by 1/t^2) and model/measured\n");
        for (int a = 0; a < nalg; a++) {
            double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
            int m = 0;
            for (int i = 0; i < nrows; i++) {
                if (rows[i].algo != a) continue;
                double x = (double)rows[i].bytes, y = rows[i].tavg, wgt = 1.0 / (y * y);
                sw += wgt; sx += wgt * x; sy += wgt * y; sxx += wgt * x * x; sxy += wgt * x * y;
                m++;
            }
            if (m < 2) continue;
            double det = sw * sxx - sx * sx;
            double beta = det != 0 ? (sw * sxy - sx * sy) / det : 0, alpha = (sy - beta * sx) / sw;
            printf("#   %-13s alpha %10.2f us  beta %9.4f ns/B (%.3f GB/s algbw asymptote)\n", names[a],
                   alpha, beta * 1e3, beta > 0 ? 1e-3 / beta : 0);
            printf("#   %-13s model/measured:", "");
            for (int i = 0; i < nrows; i++)
                if (rows[i].algo == a) {
                    rows[i].model = alpha + beta * (double)rows[i].bytes;
                    printf(" %.2f", rows[i].model / rows[i].tavg);
                }
            printf("\n");
        }
        double load1[1] = {loadavg()};
        printf("# Out of bounds values : %lld %s\n", wrong, wrong ? "FAILED" : "OK");
        for (int a = 0; a < nalg; a++) {
            double s = 0;
            int m = 0;
            for (int i = 0; i < nrows; i++)
                if (rows[i].algo == a) { s += rows[i].busbw; m++; }
            if (m) printf("# Avg bus bandwidth %-13s: %.4f GB/s\n", names[a], s / m);
        }
        printf("# loadavg at end %.2f; %.0f s\n", load1[0], MPI_Wtime() - t_start);
        rc = wrong || fatal ? 1 : 0;
        if (g.csv) {
            FILE *f = fopen(g.csv, "w");
            if (f) {
                fprintf(f, "size,count,type,op,algorithm,time_us,time_min_us,time_max_us,algbw,busbw,"
                           "busbw_vs_mpi,wrong,model_us,iters,trials,spread,workers,ranks,threads,inplace,device\n");
                for (int i = 0; i < nrows; i++) {
                    row *r = &rows[i];
                    fprintf(f, "%zu,%zu,float,%s,%s,%.3f,%.3f,%.3f,%.6f,%.6f,%.4f,%lld,%.3f,%d,%d,%.3f,%d,%d,%d,%d,%d\n",
                            r->bytes, r->count, ct_op_str(g.op), names[r->algo], r->tavg, r->tmin,
                            r->tmax, r->algbw, r->busbw, r->ratio, r->wrong, r->model, r->iters,
                            g.trials, r->spread, W, R, D, g.inplace, g.device);
                }
                fclose(f);
            } else fprintf(stderr, "cannot write %s\n", g.csv);
        }
        if (g.json) {
            FILE *f = fopen(g.json, "w");
            if (f) {
                fprintf(f, "{\n  \"collective\": \"%s\", \"op\": \"%s\", \"type\": \"float\",\n"
                           "  \"mpi\": \"%s\",\n  \"workers\": %d, \"ranks\": %d, \"threads\": %d, "
                           "\"cores\": %ld, \"oversubscribed\": %s, \"inplace\": %s, \"device\": %s,\n"
                           "  \"rows\": [\n", ct_coll_str(g.coll), ct_op_str(g.op),
                        ct_topo_mpi_version(topo), W, R, D, cores, oversub ? "true" : "false",
                        g.inplace ? "true" : "false", g.device ? "true" : "false");
                for (int i = 0; i < nrows; i++) {
                    row *r = &rows[i];
                    fprintf(f, "    {\"size\": %zu, \"count\": %zu, \"algorithm\": \"%s\", \"time_us\": %.3f, "
                               "\"time_min_us\": %.3f, \"time_max_us\": %.3f, \"algbw\": %.6f, \"busbw\": %.6f, "
                               "\"busbw_vs_mpi\": %.4f, \"wrong\": %lld, \"model_us\": %.3f, \"iters\": %d, "
                               "\"spread\": %.3f}%s\n",
                            r->bytes, r->count, names[r->algo], r->tavg, r->tmin, r->tmax, r->algbw,
                            r->busbw, r->ratio, r->wrong, r->model, r->iters, r->spread,
                            i + 1 < nrows ? "," : "");
                }
                fprintf(f, "  ]\n}\n");
                fclose(f);
            } else fprintf(stderr, "cannot write %s\n", g.json);
        }
        if (g.svg) {
            char title[256];
            snprintf(title, sizeof title, "%s busbw, %d workers = %d ranks x %d threads%s%s",
                     ct_coll_str(g.coll), W, R, D, oversub ? " (oversubscribed)" : "",
                     g.device ? ", device buffers" : "");
            write_svg(g.svg, &g, rows, nrows, names, nalg, title);
        }
        if (g.table && g.coll == CT_COLL_ALLREDUCE) {
            /* rows for this group size first (consecutive sizes with one winner collapse), then
             * the table in force */
            char tmp[4096] = "";
            size_t len = 0;
            /* the selector's classes: threads, else several hosts with several ranks on one */
            int local = D > 1 ? 1 : ct_topo_nnodes(topo) > 1 && R > ct_topo_nnodes(topo) ? 2 : 0;
            for (int si = 0; si < nsz; si++) {
                if (win[si] < 0) continue;
                if (si + 1 < nsz && win[si + 1] == win[si]) continue;
                len += (size_t)snprintf(tmp + len, sizeof tmp - len, "allreduce %d %d %d %zu %s\n", W, W,
                                        local, si + 1 == nsz ? (size_t)0 : sizes[si], names[win[si]]);
            }
            FILE *f = fopen(g.table, "w");
            if (f) {
                fprintf(f, "# measured by bench_allreduce: %d workers = %d x %d\n%s", W, R, D, tmp);
                fclose(f);
                char path2[512];
                snprintf(path2, sizeof path2, "%s.base", g.table);
                ct_topo_write_select_table(topo, path2, &err);
                printf("# selector rows written to %s (the table in force: %s)\n", g.table, path2);
            }
        }
        if (g.links) {
            /* the layout planner's link: the selector's pick at each size (the engine names no
             * algorithm), its slowest worker's time, fitted t = alpha + beta * bytes in ms over
             * the sizes measured; placement of this world as a group */
            double xs[MAX_SIZES], ts[MAX_SIZES], lo = 0, hi = 0;
            int m = 0;
            for (int si = 0; si < nsz; si++)
                for (int i = 0; i < nrows && sel[si] >= 0; i++)
                    if (rows[i].bytes == sizes[si] && rows[i].algo == sel[si]) {
                        xs[m] = (double)sizes[si], ts[m] = rows[i].tmax * 1e-3;
                        if (m == 0 || xs[m] < lo) lo = xs[m];
                        if (xs[m] > hi) hi = xs[m];
                        m++;
                    }
            double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
            for (int i = 0; i < m; i++) {
                double wgt = 1.0 / (ts[i] * ts[i]);
                sw += wgt; sx += wgt * xs[i]; sy += wgt * ts[i]; sxx += wgt * xs[i] * xs[i];
                sxy += wgt * xs[i] * ts[i];
            }
            double det = sw * sxx - sx * sx;
            double beta = det > 0 ? (sw * sxy - sx * sy) / det : 0, alpha = sw > 0 ? (sy - beta * sx) / sw : 0;
            if (beta < 0) beta = 0, alpha = sw > 0 ? sy / sw : 0;
            if (alpha < 0) alpha = 0, beta = sxx > 0 ? sxy / sxx : 0;
            const char *place = R == 1 ? "threads" : D == 1 ? "ranks" : "mixed";
            FILE *f = m >= 2 ? fopen(g.links, "a") : NULL;
            if (f) {
                fprintf(f, "# bench_allreduce %s: %d workers = %d ranks x %d threads, the selector's "
                           "picks, slowest worker, %d sizes%s\n",
                        ct_coll_str(g.coll), W, R, D, m,
                        g.device ? ", device buffers (staging included)" : "");
                fprintf(f, "link %s %d %s %.6g %.6g %.0f %.0f\n", ct_coll_str(g.coll), W, place,
                        alpha, beta, lo, hi);
                fclose(f);
                printf("# link for the layout planner appended to %s: %s over %d %s, alpha %.4f ms, "
                       "%.3f GB/s\n",
                       g.links, ct_coll_str(g.coll), W, place, alpha, beta > 0 ? 1e-6 / beta : 0.0);
            } else {
                fprintf(stderr, "cannot write %s (or fewer than 2 sizes ran the selector's pick: "
                                "measure with -a all)\n", g.links);
                rc = 1;
            }
        }
        free(win);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    free(rows);
    free(tsum);
    free(wr);
    ct_device_list_free(dlist);
    ct_topo_free(topo);
    return rc;
}
