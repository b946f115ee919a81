/* svg.c - ct_plot's SVG writer: the document as a growing text buffer (so nothing reaches the
 * output file until the picture is whole), XML escaping of every text that came from input,
 * axes with 1-2-5 or power ticks, the frame of a plot area, a legend entry, the palette, and the
 * atomic write (temporary file in the output's folder, fsync, rename). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "plot.h"

void plot_svg_printf(plot_svg *s, const char *fmt, ...) {
    if (s->nomem) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(s->p ? s->p + s->n : NULL, s->p ? s->cap - s->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            s->nomem = 1;
            return;
        }
        if (s->p && s->n + (size_t)k < s->cap) {
            s->n += (size_t)k;
            return;
        }
        size_t nc = s->cap ? 2 * s->cap : 1 << 16;
        while (nc < s->n + (size_t)k + 1)
            nc *= 2;
        char *np = realloc(s->p, nc);
        if (!np) {
            s->nomem = 1;
            return;
        }
        s->p = np, s->cap = nc;
    }
}

/* Valid UTF-8 that XML 1.0 allows passes; '<', '&', quotes are escaped; anything else
 * (control bytes, broken sequences, U+FFFE/U+FFFF) becomes '?'. */
void plot_svg_text(plot_svg *s, const char *t) {
    const unsigned char *p = (const unsigned char *)(t ? t : "");
    while (*p) {
        unsigned c = *p;
        if (c == '<')
            plot_svg_printf(s, "&lt;"), p++;
        else if (c == '>')
            plot_svg_printf(s, "&gt;"), p++;
        else if (c == '&')
            plot_svg_printf(s, "&amp;"), p++;
        else if (c == '"')
            plot_svg_printf(s, "&quot;"), p++;
        else if (c == '\'')
            plot_svg_printf(s, "&apos;"), p++;
        else if (c >= 0x20 && c < 0x7f)
            plot_svg_printf(s, "%c", c), p++;
        else if (c < 0x80)
            plot_svg_printf(s, "?"), p++; /* controls (tab and newline too) */
        else {
            unsigned k = c >= 0xc2 && c <= 0xdf   ? 1
                         : c >= 0xe0 && c <= 0xef ? 2
                         : c >= 0xf0 && c <= 0xf4 ? 3
                                                  : 0;
            unsigned u = c & (k == 1 ? 0x1f : k == 2 ? 0x0f : 0x07), i;
            for (i = 1; k && i <= k; i++) {
                if ((p[i] & 0xc0) != 0x80) break; /* also stops at the NUL */
                u = u << 6 | (p[i] & 0x3f);
            }
            int ok = k && i == k + 1 && !(k == 2 && u < 0x800) &&
                     !(k == 3 && (u < 0x10000 || u > 0x10ffff)) && !(u >= 0xd800 && u <= 0xdfff) &&
                     u != 0xfffe && u != 0xffff;
            if (ok)
                plot_svg_printf(s, "%.*s", (int)(k + 1), (const char *)p), p += k + 1;
            else
                plot_svg_printf(s, "?"), p++;
        }
    }
}

void plot_svg_begin(plot_svg *s, double w, double h, const char *title) {
    memset(s, 0, sizeof *s);
    s->w = w, s->h = h;
    plot_svg_printf(s,
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                    "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                    "viewBox=\"0 0 %.0f %.0f\" font-family=\"DejaVu Sans, Helvetica, Arial, "
                    "sans-serif\" font-size=\"12\">\n<title>",
                    w, h, w, h);
    plot_svg_text(s, title);
    plot_svg_printf(s, "</title>\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
}

void plot_svg_end(plot_svg *s) { plot_svg_printf(s, "</svg>\n"); }

void plot_svg_free(plot_svg *s) {
    free(s->p);
    s->p = NULL, s->n = s->cap = 0;
}

int plot_svg_commit(plot_svg *s, const char *path, plot_err *err) {
    if (s->nomem) {
        plot_svg_free(s);
        return plot_fail(err, PLOT_NOMEM, "out of memory drawing %s", path);
    }
    size_t n = strlen(path) + 32;
    char *tmp = malloc(n);
    if (!tmp) {
        plot_svg_free(s);
        return plot_fail(err, PLOT_NOMEM, "out of memory");
    }
    snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    int rc = PLOT_OK;
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        rc = plot_fail(err, PLOT_BAD, "cannot write %s: %s", path, strerror(errno));
    } else {
        int ok = fwrite(s->p, 1, s->n, f) == s->n && fflush(f) == 0 && fsync(fileno(f)) == 0;
        int e = errno;
        ok = fclose(f) == 0 && ok;
        if (!ok)
            rc = plot_fail(err, PLOT_BAD, "cannot write %s: %s", tmp, strerror(e ? e : errno));
        else if (rename(tmp, path) != 0)
            rc = plot_fail(err, PLOT_BAD, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
        if (rc != PLOT_OK) remove(tmp);
    }
    free(tmp);
    plot_svg_free(s);
    return rc;
}

/* ---- axes ------------------------------------------------------------------------------- */

static double nice_step(double span) {
    double raw = span / 5, mag = pow(10, floor(log10(raw))), m = raw / mag;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * mag;
}

plot_axis plot_axis_linear(double lo, double hi, int zero) {
    plot_axis a = {0};
    if (!(lo <= hi)) lo = 0, hi = 1; /* NaN or reversed: only from a caller's bug */
    if (zero && lo > 0) lo = 0;
    if (zero && hi < 0) hi = 0;
    if (hi - lo < 1e-12 * (fabs(lo) + fabs(hi)) || hi == lo) {
        double d = lo == 0 ? 1 : fabs(lo) * 0.1;
        lo -= d, hi += d;
        if (zero && lo < 0 && hi - d >= 0) lo = 0;
    }
    if (!isfinite(hi - lo) || hi - lo < 1e-200 || fabs(lo) > 1e300 || fabs(hi) > 1e300) {
        /* absurd values (fuzzed input): a unit axis; whatever falls outside is clipped */
        lo = fmax(fmin(lo, 1e300), -1e300), hi = fmax(fmin(hi, 1e300), -1e300);
        if (!(hi - lo >= 1e-200) || !isfinite(hi - lo)) lo = 0, hi = 1;
    }
    a.step = nice_step(hi - lo);
    a.lo = floor(lo / a.step + 1e-9) * a.step;
    a.hi = ceil(hi / a.step - 1e-9) * a.step;
    if (!(a.step > 0) || !isfinite(a.hi - a.lo) || !(a.hi > a.lo)) a.lo = 0, a.hi = 1, a.step = 0.2;
    return a;
}

plot_axis plot_axis_log(double lo, double hi, int pow2) {
    plot_axis a = {0};
    a.log = 1, a.pow2 = pow2;
    if (!(lo > 0) || !(hi >= lo) || !isfinite(hi)) lo = 1, hi = 10;
    if (lo < 1e-300) lo = 1e-300; /* no denormals (fuzzed input) */
    if (hi < lo) hi = lo;
    double b = pow2 ? 2 : 10;
    double e0 = floor(log(lo) / log(b) + 1e-9), e1 = ceil(log(hi) / log(b) - 1e-9);
    if (e1 <= e0) e1 = e0 + 1;
    a.lo = pow(b, e0), a.hi = pow(b, e1);
    return a;
}

double plot_axis_px(const plot_axis *a, double v) {
    double f =
        a->log ? (log(v) - log(a->lo)) / (log(a->hi) - log(a->lo)) : (v - a->lo) / (a->hi - a->lo);
    return a->px0 + f * (a->px1 - a->px0);
}

int plot_axis_ticks(const plot_axis *a, double *t, int cap) {
    int n = 0;
    if (!a->log) {
        for (int i = 0; n < cap; i++) {
            double v = a->lo + i * a->step;
            if (v > a->hi + 1e-9 * a->step) break;
            t[n++] = fabs(v) < 1e-9 * a->step ? 0 : v;
        }
        return n;
    }
    double b = a->pow2 ? 2 : 10;
    int e0 = (int)lround(log(a->lo) / log(b)), e1 = (int)lround(log(a->hi) / log(b));
    int stride = 1;
    while ((e1 - e0) / stride > 9)
        stride++;
    if (a->pow2 && stride > 1 && stride % 2) stride++; /* even powers: 1, 4, 16, ..., 1K, 4K */
    for (int e = e0; e <= e1 && n < cap; e += stride)
        t[n++] = pow(b, e);
    if (!a->pow2 && e1 - e0 <= 2) /* two decades or fewer: 2x and 5x too */
        for (int e = e0; e < e1; e++)
            for (int m = 2; m <= 5 && n < cap; m += 3)
                t[n++] = m * pow(10, e);
    return n;
}

void plot_tick_label(const plot_axis *a, double v, char *buf, size_t cap) {
    if (a->log) {
        double k = a->pow2 ? 1024 : 1000;
        const char *suf[] = {"", a->pow2 ? "K" : "k", "M", "G", "T", "P"};
        int i = 0;
        while (fabs(v) >= k && i < 5)
            v /= k, i++;
        snprintf(buf, cap, "%g%s", v, suf[i]);
        return;
    }
    double big = fmax(fabs(a->lo), fabs(a->hi)), div = 1;
    const char *suf = "";
    if (big >= 1e10 || a->step < 1e-6) { /* far from a run's numbers: plain %g */
        snprintf(buf, cap, "%.4g", v);
        return;
    }
    if (big >= 1e7)
        div = 1e6, suf = "M";
    else if (big >= 1e4)
        div = 1e3, suf = "k";
    if (v == 0) {
        snprintf(buf, cap, "0");
        return;
    }
    double step = a->step / div;
    int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    if (dec > 12) dec = 12;
    snprintf(buf, cap, "%.*f%s", dec, v / div, suf);
}

void plot_frame(plot_svg *s, const plot_axis *x, const plot_axis *y, const char *xtitle,
                const char *ytitle, int side) {
    double t[64];
    char lb[48];
    double top = y->px1, bot = y->px0, left = x->px0, right = x->px1;
    int n;
    if (side == 0) { /* horizontal grid */
        n = plot_axis_ticks(y, t, 64);
        for (int i = 0; i < n; i++)
            plot_svg_printf(
                s, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n",
                left, right, plot_axis_px(y, t[i]), plot_axis_px(y, t[i]));
    }
    { /* vertical grid, tick labels, title */
        n = plot_axis_ticks(x, t, 64);
        for (int i = 0; i < n; i++) {
            double px = plot_axis_px(x, t[i]);
            plot_tick_label(x, t[i], lb, sizeof lb);
            if (side == 0)
                plot_svg_printf(
                    s,
                    "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#efefef\"/>\n",
                    px, px, top, bot);
            plot_svg_printf(
                s,
                "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#333\">%s</text>\n",
                px, px, bot, bot + 4, px, bot + 17, lb);
        }
        plot_svg_printf(s,
                        "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n",
                        left, right, bot, bot);
        if (xtitle) {
            plot_svg_printf(s, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">",
                            (left + right) / 2, bot + 34);
            plot_svg_text(s, xtitle);
            plot_svg_printf(s, "</text>\n");
        }
    }
    if (side < 0) return;
    double ax = side ? right : left, d = side ? 1 : -1;
    n = plot_axis_ticks(y, t, 64);
    double wmax = 0;
    for (int i = 0; i < n; i++) {
        double py = plot_axis_px(y, t[i]);
        plot_tick_label(y, t[i], lb, sizeof lb);
        if (strlen(lb) > wmax) wmax = (double)strlen(lb);
        plot_svg_printf(s,
                        "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n"
                        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" fill=\"#333\">%s</text>\n",
                        ax, ax + 4 * d, py, py, ax + 7 * d, py + 4, side ? "start" : "end", lb);
    }
    plot_svg_printf(s, "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n",
                    ax, ax, top, bot);
    if (ytitle) {
        double tx = ax + d * (14 + 7.2 * wmax), ty = (top + bot) / 2;
        plot_svg_printf(
            s, "<text transform=\"translate(%.1f,%.1f) rotate(%d)\" text-anchor=\"middle\">", tx,
            ty, side ? 90 : -90);
        plot_svg_text(s, ytitle);
        plot_svg_printf(s, "</text>\n");
    }
}

void plot_clip_begin(plot_svg *s, const plot_axis *x, const plot_axis *y) {
    int id = ++s->clips;
    plot_svg_printf(s,
                    "<clipPath id=\"clip%d\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                    "height=\"%.1f\"/></clipPath>\n<g clip-path=\"url(#clip%d)\">\n",
                    id, x->px0 - 4, y->px1 - 4, x->px1 - x->px0 + 8, y->px0 - y->px1 + 8, id);
}

void plot_clip_end(plot_svg *s) { plot_svg_printf(s, "</g>\n"); }

double plot_text_width(const char *t, double size) {
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)(t ? t : ""); *p; p++)
        n += (*p & 0xc0) != 0x80; /* characters, not bytes */
    return 0.6 * size * (double)n;
}

void plot_legend_entry(plot_svg *s, double x, double y, const char *color, int kind,
                       const char *label) {
    if (kind == PLOT_LEG_BOX)
        plot_svg_printf(s, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\" fill=\"%s\"/>\n",
                        x, y - 5, color);
    else
        plot_svg_printf(s,
                        "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                        "stroke-width=\"2\"%s/>\n",
                        x, x + 22, y, y, color,
                        kind == PLOT_LEG_DASH    ? " stroke-dasharray=\"5,3\""
                        : kind == PLOT_LEG_FAINT ? " stroke-opacity=\"0.35\""
                                                 : "");
    if (kind == PLOT_LEG_DOT)
        plot_svg_printf(s, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", x + 11, y,
                        color);
    plot_svg_printf(s, "<text class=\"legend\" x=\"%.1f\" y=\"%.1f\">",
                    x + (kind == PLOT_LEG_BOX ? 20 : 28), y + 4);
    plot_svg_text(s, label);
    plot_svg_printf(s, "</text>\n");
}

/* Tableau 20 (matplotlib's tab20), the strong shade of each hue first. */
const char *plot_color(int i) {
    static const char *const c[20] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
                                      "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5",
                                      "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5"};
    return i >= 0 && i < 20 ? c[i] : "#bbbbbb";
}
