/* points.c - ct_plot's series: a growing array of (x, y) points kept in input order, sorted
 * stably by x (a resumed run's metrics repeat steps: the last record of a step stands), drawn
 * as one polyline. */
#include <stdlib.h>

#include "plot.h"

int plot_pts_add(plot_pts *v, double x, double y, plot_err *err) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? 2 * v->cap : 256;
        plot_pt *np = nc < ((size_t)-1) / sizeof *np ? realloc(v->p, nc * sizeof *np) : NULL;
        if (!np) return plot_fail(err, PLOT_NOMEM, "out of memory (%zu points)", v->n);
        v->p = np, v->cap = nc;
    }
    v->p[v->n] = (plot_pt){x, y, v->n};
    v->n++;
    return PLOT_OK;
}

static int by_x(const void *a, const void *b) {
    const plot_pt *p = a, *q = b;
    if (p->x != q->x) return p->x < q->x ? -1 : 1;
    return p->order < q->order ? -1 : p->order > q->order;
}

size_t plot_pts_sort(plot_pts *v, int dedupe) {
    if (v->n > 1) qsort(v->p, v->n, sizeof *v->p, by_x);
    if (!dedupe) return 0;
    size_t k = 0;
    for (size_t i = 0; i < v->n; i++) {
        if (k && v->p[k - 1].x == v->p[i].x)
            v->p[k - 1] = v->p[i]; /* later in the input */
        else
            v->p[k++] = v->p[i];
    }
    size_t dropped = v->n - k;
    v->n = k;
    return dropped;
}

void plot_pts_free(plot_pts *v) {
    free(v->p);
    v->p = NULL, v->n = v->cap = 0;
}

void plot_polyline(plot_svg *s, const plot_pts *v, const plot_axis *x, const plot_axis *y,
                   const char *cls, const char *color, double width, const char *extra) {
    plot_svg_printf(s,
                    "<polyline class=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"%g\" "
                    "stroke-linejoin=\"round\"%s points=\"",
                    cls, color, width, extra ? extra : "");
    for (size_t i = 0; i < v->n; i++)
        plot_svg_printf(s, "%s%.1f,%.1f", i ? " " : "", plot_axis_px(x, v->p[i].x),
                        plot_axis_px(y, v->p[i].y));
    plot_svg_printf(s, "\"/>\n");
}
