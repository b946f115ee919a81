/* bench.c - `ct_plot bench FILE.csv`: a benchmark's CSV (a header line, then comma-separated
 * rows; a field may be double-quoted with "" inside) drawn as one line per series: y against x,
 * each series' points sorted by x. The defaults read bench_allreduce --csv: x = size (log scale,
 * binary ticks), y = busbw, series = algorithm; --x, --y, --series, --logx, --logy choose
 * otherwise. A row whose x or y is empty is left out with a note; one that is not a number is
 * refused with its line. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"

enum { MAX_COLS = 1024, MAX_SERIES_DRAWN = 30 };

typedef struct csv_row {
    const char *f[MAX_COLS]; /* fields, NUL-terminated in the row's own copy */
    int n;
    char *buf;
    size_t cap;
} csv_row;

/* Splits one line (without its newline) into fields: quotes removed, "" -> ", surrounding
 * spaces kept out of unquoted fields. */
static int split(const char *line, size_t len, csv_row *r, const char *path, int lineno,
                 plot_err *err) {
    if (len + 1 > r->cap) {
        char *nb = realloc(r->buf, len + 1);
        if (!nb) return plot_fail(err, PLOT_NOMEM, "out of memory");
        r->buf = nb, r->cap = len + 1;
    }
    size_t o = 0, i = 0;
    r->n = 0;
    for (;;) {
        if (r->n == MAX_COLS)
            return plot_fail(err, PLOT_BAD, "%s: line %d: more than %d fields", path, lineno,
                             MAX_COLS);
        while (i < len && line[i] == ' ')
            i++;
        r->f[r->n++] = r->buf + o;
        if (i < len && line[i] == '"') {
            for (i++;; i++) {
                if (i >= len)
                    return plot_fail(err, PLOT_BAD, "%s: line %d: a quoted field that does not end",
                                     path, lineno);
                if (line[i] == '"') {
                    if (i + 1 < len && line[i + 1] == '"')
                        r->buf[o++] = '"', i++;
                    else
                        break;
                } else {
                    r->buf[o++] = line[i];
                }
            }
            i++;
            while (i < len && line[i] == ' ')
                i++;
            if (i < len && line[i] != ',')
                return plot_fail(err, PLOT_BAD, "%s: line %d: text after a quoted field", path,
                                 lineno);
        } else {
            size_t s = o;
            while (i < len && line[i] != ',')
                r->buf[o++] = line[i++];
            while (o > s && r->buf[o - 1] == ' ')
                o--;
        }
        r->buf[o++] = 0;
        if (i >= len) break;
        i++; /* the comma */
    }
    return PLOT_OK;
}

static int column(char *const *names, int n, const char *want) {
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], want)) return i;
    return -1;
}

static int no_column(char *const *names, int n, const char *path, const char *flag,
                     const char *want, plot_err *err) {
    char list[300] = "";
    size_t k = 0;
    for (int i = 0; i < n && k + 8 < sizeof list; i++) {
        char pr[sizeof list];
        int w = snprintf(list + k, sizeof list - k, "%s%s", i ? ", " : "",
                         plot_printable(pr, sizeof pr, names[i]));
        if (w < 0 || (size_t)w >= sizeof list - k) {
            snprintf(list + (sizeof list - 5), 5, "...");
            break;
        }
        k += (size_t)w;
    }
    char pw[80];
    return plot_fail(err, PLOT_BAD, "%s: %s%s'%s' is not a column (the header has: %s)", path,
                     flag ? flag : "", flag ? " " : "", plot_printable(pw, sizeof pw, want), list);
}

/* A field as a number: 1 a finite number, 0 empty ("", nan, null), -1 something else. */
static int field_num(const char *f, double *v) {
    if (!*f || !strcmp(f, "nan") || !strcmp(f, "NaN") || !strcmp(f, "null") || !strcmp(f, "-"))
        return 0;
    char *end = NULL;
    *v = strtod(f, &end);
    if (end == f || *end || !isfinite(*v)) return -1;
    return 1;
}

static const char *units(const char *col) {
    static const struct {
        const char *col, *unit;
    } u[] = {{"size", "bytes"},
             {"bytes", "bytes"},
             {"time_us", "\xc2\xb5s"},
             {"time_min_us", "\xc2\xb5s"},
             {"time_max_us", "\xc2\xb5s"},
             {"model_us", "\xc2\xb5s"},
             {"algbw", "GB/s"},
             {"busbw", "GB/s"},
             {"ms", "ms"},
             {"gflops", "GFLOP/s"}};
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++)
        if (!strcmp(col, u[i].col)) return u[i].unit;
    return NULL;
}

static int is_pow2(double v) {
    int e;
    return v > 0 && frexp(v, &e) == 0.5;
}

typedef struct bench_data {
    plot_names series;
    plot_pts *pts; /* [series.n] */
    size_t npts_cap, rows, empty, nonpos;
} bench_data;

static int add_point(bench_data *b, const char *series, double x, double y, plot_err *err) {
    int k, rc = plot_names_get(&b->series, series, &k, err);
    if (rc) return rc;
    if ((size_t)k >= b->npts_cap) {
        size_t nc = b->npts_cap ? 2 * b->npts_cap : 16;
        plot_pts *np = realloc(b->pts, nc * sizeof *np);
        if (!np) return plot_fail(err, PLOT_NOMEM, "out of memory");
        memset(np + b->npts_cap, 0, (nc - b->npts_cap) * sizeof *np);
        b->pts = np, b->npts_cap = nc;
    }
    return plot_pts_add(&b->pts[k], x, y, err);
}

static void draw(plot_svg *s, const plot_opts *o, bench_data *b, const char *xc, const char *yc,
                 const char *sc, int logx, int logy) {
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    int pow2 = 1;
    size_t npts = 0;
    for (size_t k = 0; k < b->series.n; k++)
        for (size_t i = 0; i < b->pts[k].n; i++) {
            const plot_pt *p = &b->pts[k].p[i];
            xlo = fmin(xlo, p->x), xhi = fmax(xhi, p->x), ylo = fmin(ylo, p->y),
            yhi = fmax(yhi, p->y);
            pow2 &= is_pow2(p->x);
            npts++;
        }
    size_t nleg = b->series.n < MAX_SERIES_DRAWN ? b->series.n : MAX_SERIES_DRAWN;
    double lw = 0;
    for (size_t k = 0; k < nleg; k++)
        lw = fmax(lw, plot_text_width(b->series.str[k], 12));
    if (b->series.n > nleg) lw = fmax(lw, plot_text_width("and 0000 more", 12));
    if (lw > 240) lw = 240;
    const double W = o->width > 0 ? o->width : 900, H = 540, L = 80, R = sc ? lw + 64 : 30;
    const double T = 66, B = 480;
    plot_svg_begin(s, W, H, o->title);
    plot_svg_printf(s, "<text x=\"%.0f\" y=\"24\" font-size=\"16\" font-weight=\"bold\">", L);
    plot_svg_text(s, o->title);
    plot_svg_printf(s, "</text>\n<text x=\"%.0f\" y=\"44\" fill=\"#555\">%zu points", L, npts);
    if (sc)
        plot_svg_printf(s, " in %zu series (", b->series.n), plot_svg_text(s, sc),
            plot_svg_printf(s, ")");
    plot_svg_printf(s, "</text>\n");

    plot_axis x = logx ? plot_axis_log(xlo, xhi, pow2) : plot_axis_linear(xlo, xhi, 0);
    plot_axis y = logy ? plot_axis_log(ylo, yhi, 0) : plot_axis_linear(ylo, yhi, 1);
    x.px0 = L, x.px1 = W - R, y.px0 = B, y.px1 = T;
    char xt[200], yt[200];
    const char *ux = units(xc), *uy = units(yc);
    snprintf(xt, sizeof xt, "%s%s%s%s%s", xc, ux || logx ? " (" : "", ux ? ux : "",
             ux && logx ? ", " : "",
             logx ? "log scale)"
             : ux ? ")"
                  : "");
    snprintf(yt, sizeof yt, "%s%s%s%s%s", yc, uy || logy ? " (" : "", uy ? uy : "",
             uy && logy ? ", " : "",
             logy ? "log scale)"
             : uy ? ")"
                  : "");
    plot_frame(s, &x, &y, xt, yt, 0);
    plot_clip_begin(s, &x, &y);
    for (size_t k = 0; k < b->series.n; k++) {
        const char *c = plot_color((int)k);
        plot_polyline(s, &b->pts[k], &x, &y, "series", c, 1.8, NULL);
        if (npts <= 400)
            for (size_t i = 0; i < b->pts[k].n; i++)
                plot_svg_printf(s, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n",
                                plot_axis_px(&x, b->pts[k].p[i].x),
                                plot_axis_px(&y, b->pts[k].p[i].y), c);
    }
    plot_clip_end(s);
    if (sc) {
        for (size_t k = 0; k < nleg; k++)
            plot_legend_entry(s, W - R + 14, T + 8 + 18 * (double)k, plot_color((int)k),
                              PLOT_LEG_LINE, b->series.str[k]);
        if (b->series.n > nleg)
            plot_svg_printf(s, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#555\">and %zu more</text>\n",
                            W - R + 14, T + 12 + 18 * (double)nleg, b->series.n - nleg);
    }
    plot_svg_end(s);
}

int plot_bench(const plot_opts *o, plot_err *err) {
    char *text = NULL, **head = NULL;
    size_t len = 0;
    bench_data b;
    memset(&b, 0, sizeof b);
    csv_row *row = calloc(1, sizeof *row);
    plot_svg s = {0};
    int ncol = 0, xi = -1, yi = -1, si = -1, lineno = 0;
    int rc =
        row ? plot_read_file(o->in, &text, &len, err) : plot_fail(err, PLOT_NOMEM, "out of memory");
    const char *xc = o->xcol, *yc = o->ycol, *sc = o->series;
    int logx = o->logx, logy = o->logy;
    for (size_t at = 0; rc == PLOT_OK && at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len, l = end - at;
        const char *line = text + at;
        at = end + 1;
        lineno++;
        if (l && line[l - 1] == '\r') l--;
        if (memchr(line, 0, l)) {
            rc = plot_fail(err, PLOT_BAD, "%s: line %d: a NUL byte (not a text file?)", o->in,
                           lineno);
            break;
        }
        size_t sp = 0;
        while (sp < l && (line[sp] == ' ' || line[sp] == '\t'))
            sp++;
        if (sp == l) continue; /* blank */
        if ((rc = split(line, l, row, o->in, lineno, err))) break;
        if (!head) { /* the header */
            ncol = row->n;
            head = calloc((size_t)ncol, sizeof *head);
            if (!head) {
                rc = plot_fail(err, PLOT_NOMEM, "out of memory");
                break;
            }
            for (int i = 0; i < ncol; i++)
                if (!(head[i] = strdup(row->f[i])))
                    rc = plot_fail(err, PLOT_NOMEM, "out of memory");
            if (rc) break;
            /* the columns, named or the defaults */
            if (!xc) xc = column(head, ncol, "size") >= 0 ? "size" : head[0];
            if (!yc && column(head, ncol, "busbw") >= 0) yc = "busbw";
            if (!yc) {
                rc = no_column(head, ncol, o->in, NULL, "busbw", err);
                size_t k = strlen(err->msg);
                snprintf(err->msg + k, sizeof err->msg - k, "; name the column to draw with --y");
                break;
            }
            if (!sc && !o->series && column(head, ncol, "algorithm") >= 0) sc = "algorithm";
            if ((xi = column(head, ncol, xc)) < 0)
                rc = no_column(head, ncol, o->in, "--x", xc, err);
            else if ((yi = column(head, ncol, yc)) < 0)
                rc = no_column(head, ncol, o->in, "--y", yc, err);
            else if (sc && *sc && (si = column(head, ncol, sc)) < 0)
                rc = no_column(head, ncol, o->in, "--series", sc, err);
            if (sc && !*sc) sc = NULL;                /* --series "": one line */
            if (logx < 0) logx = !strcmp(xc, "size"); /* a sweep of sizes is geometric */
            if (logy < 0) logy = 0;
            continue;
        }
        if (row->n != ncol) {
            rc = plot_fail(err, PLOT_BAD, "%s: line %d has %d field(s), the header %d", o->in,
                           lineno, row->n, ncol);
            break;
        }
        b.rows++;
        double x, y;
        int kx = field_num(row->f[xi], &x), ky = field_num(row->f[yi], &y);
        if (kx < 0 || ky < 0) {
            char pc[80], pv[44];
            rc = plot_fail(err, PLOT_BAD, "%s: line %d: %s is '%s', not a number", o->in, lineno,
                           plot_printable(pc, sizeof pc, kx < 0 ? xc : yc),
                           plot_printable(pv, sizeof pv, kx < 0 ? row->f[xi] : row->f[yi]));
            break;
        }
        if (!kx || !ky) {
            b.empty++;
            continue;
        }
        if ((logx && x <= 0) || (logy && y <= 0)) {
            b.nonpos++;
            continue;
        }
        rc = add_point(&b, si >= 0 ? row->f[si] : yc, x, y, err);
    }
    if (rc == PLOT_OK && !head) rc = plot_fail(err, PLOT_BAD, "%s: empty (no header line)", o->in);
    if (rc == PLOT_OK && !b.rows) rc = plot_fail(err, PLOT_BAD, "%s: a header and no rows", o->in);
    if (rc == PLOT_OK) {
        if (b.empty)
            fprintf(stderr, "ct_plot: note: %s: %zu row(s) with no %s or %s value left out\n",
                    o->in, b.empty, xc, yc);
        if (b.nonpos)
            fprintf(stderr,
                    "ct_plot: note: %s: %zu row(s) with a value <= 0 left out of the log "
                    "scale\n",
                    o->in, b.nonpos);
        if (!b.series.n)
            rc = plot_fail(err, PLOT_BAD, "%s: none of its %zu row(s) has both %s and %s", o->in,
                           b.rows, xc, yc);
    }
    if (rc == PLOT_OK) {
        for (size_t k = 0; k < b.series.n; k++)
            plot_pts_sort(&b.pts[k], 0);
        draw(&s, o, &b, xc, yc, sc, logx, logy);
        rc = plot_svg_commit(&s, o->out, err);
    }
    plot_svg_free(&s);
    for (size_t k = 0; k < b.npts_cap; k++)
        plot_pts_free(&b.pts[k]);
    free(b.pts);
    plot_names_free(&b.series);
    for (int i = 0; head && i < ncol; i++)
        free(head[i]);
    free(head);
    if (row) free(row->buf);
    free(row);
    free(text);
    return rc;
}
