/* loss.c - `ct_plot loss METRICS.jsonl`: train_gpt's --metrics file (JSON Lines: one flat
 * object per line, "type" train | eval | config | memory | ...) drawn as two panels over the
 * steps: the training loss (with a centred moving average once there are many steps) and the
 * validation loss above, tokens per second below.
 *
 * A line that is not a JSON object is refused with its number, except an unfinished last line
 * (no newline: a run stopped while writing it), which is left out with a note. Steps that
 * appear twice (a run resumed from an earlier checkpoint appends to the file) keep their last
 * record, also with a note. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"

typedef struct loss_data {
    plot_pts train, mean, eval, tps;
    size_t records, no_loss;
    plot_rec cfg;
    int has_cfg;
} loss_data;

static int read_metrics(const char *path, const char *text, size_t len, loss_data *d,
                        plot_err *err) {
    plot_rec *r = malloc(sizeof *r);
    if (!r) return plot_fail(err, PLOT_NOMEM, "out of memory");
    int rc = PLOT_OK, lineno = 0;
    for (size_t at = 0; at < len && rc == PLOT_OK;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len;
        lineno++;
        plot_json j;
        plot_json_init(&j, text + at, end - at, path, lineno);
        at = end + 1;
        if (plot_json_at_end(&j)) continue; /* a blank line */
        rc = plot_json_record(&j, r, err);
        if (rc == PLOT_OK && !plot_json_at_end(&j))
            rc = plot_json_bad(&j, err, "more after the record (one object per line)");
        if (rc == PLOT_BAD && !nl && lineno > 1) { /* the unfinished last line of a live run */
            fprintf(stderr,
                    "ct_plot: note: %s: line %d is unfinished (no newline; a run stopped "
                    "while writing it?): left out\n",
                    path, lineno);
            rc = PLOT_OK;
            break;
        }
        if (rc != PLOT_OK) break;
        d->records++;
        const char *type = plot_rec_str(r, "type");
        double step, v;
        if (!type) continue;
        if (!strcmp(type, "config") && !d->has_cfg) {
            d->cfg = *r, d->has_cfg = 1;
        } else if (!strcmp(type, "train") && plot_rec_num(r, "step", &step)) {
            if (plot_rec_num(r, "loss", &v))
                rc = plot_pts_add(&d->train, step, v, err);
            else
                d->no_loss++; /* a skipped (non-finite) step writes null */
            if (rc == PLOT_OK && plot_rec_num(r, "tokens_per_s", &v))
                rc = plot_pts_add(&d->tps, step, v, err);
        } else if (!strcmp(type, "eval") && plot_rec_num(r, "step", &step) &&
                   plot_rec_num(r, "val_loss", &v)) {
            rc = plot_pts_add(&d->eval, step, v, err);
        }
    }
    free(r);
    return rc;
}

/* A centred moving average of w points (fewer at the ends). */
static int moving_mean(const plot_pts *in, size_t w, plot_pts *out, plot_err *err) {
    double sum = 0;
    size_t lo = 0, hi = 0; /* the window [lo, hi) */
    for (size_t i = 0; i < in->n; i++) {
        size_t a = i >= w / 2 ? i - w / 2 : 0, b = i + w / 2 + 1 < in->n ? i + w / 2 + 1 : in->n;
        while (hi < b)
            sum += in->p[hi++].y;
        while (lo < a)
            sum -= in->p[lo++].y;
        int rc = plot_pts_add(out, in->p[i].x, sum / (double)(hi - lo), err);
        if (rc) return rc;
    }
    return PLOT_OK;
}

static void range(const plot_pts *v, double *lo, double *hi) {
    for (size_t i = 0; i < v->n; i++) {
        if (v->p[i].y < *lo) *lo = v->p[i].y;
        if (v->p[i].y > *hi) *hi = v->p[i].y;
    }
}

static int by_y(const void *a, const void *b) {
    double p = *(const double *)a, q = *(const double *)b;
    return p < q ? -1 : p > q;
}

static void draw(plot_svg *s, const plot_opts *o, loss_data *d, size_t w) {
    const double W = o->width > 0 ? o->width : 900, L = 78, R = 30;
    const double T1 = 66, B1 = 370, T2 = 420, B2 = 540, H = 600;
    /* the title and a line on the run */
    plot_svg_begin(s, W, H, o->title);
    plot_svg_printf(s, "<text x=\"%.0f\" y=\"24\" font-size=\"16\" font-weight=\"bold\">", L);
    plot_svg_text(s, o->title);
    plot_svg_printf(s, "</text>\n<text x=\"%.0f\" y=\"44\" fill=\"#555\">", L);
    double p, lay, hd, dim, seq;
    if (d->has_cfg && plot_rec_num(&d->cfg, "params", &p) &&
        plot_rec_num(&d->cfg, "layers", &lay) && plot_rec_num(&d->cfg, "heads", &hd) &&
        plot_rec_num(&d->cfg, "dim", &dim) && plot_rec_num(&d->cfg, "seq", &seq))
        plot_svg_printf(
            s, "%.3g %s parameters (layers %.0f, heads %.0f, dim %.0f, seq %.0f) \xc2\xb7 ",
            p >= 1e6 ? p / 1e6 : p / 1e3, p >= 1e6 ? "M" : "k", lay, hd, dim, seq);
    if (d->train.n)
        plot_svg_printf(s, "%zu steps, last train loss %.5g", d->train.n,
                        d->train.p[d->train.n - 1].y);
    if (d->eval.n)
        plot_svg_printf(s, "%slast validation loss %.5g (step %.6g)", d->train.n ? ", " : "",
                        d->eval.p[d->eval.n - 1].y, d->eval.p[d->eval.n - 1].x);
    plot_svg_printf(s, "</text>\n");

    /* the loss panel */
    double xlo = 0, xhi = 0, ylo = INFINITY, yhi = -INFINITY;
    const plot_pts *all[] = {&d->train, &d->eval, &d->tps};
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < all[k]->n; i++)
            xhi = fmax(xhi, all[k]->p[i].x), xlo = fmin(xlo, all[k]->p[i].x);
    range(&d->train, &ylo, &yhi);
    range(&d->eval, &ylo, &yhi);
    plot_axis x = plot_axis_linear(xlo, xhi, 1), y = plot_axis_linear(ylo, yhi, 0);
    if (xhi > x.lo && xhi <= x.hi) x.hi = xhi; /* the run's last step ends the axis */
    x.px0 = L, x.px1 = W - R, y.px0 = B1, y.px1 = T1;
    plot_frame(s, &x, &y, NULL, "loss (nats per token)", 0);
    plot_clip_begin(s, &x, &y);
    const char *ctrain = plot_color(0), *ceval = plot_color(1);
    if (d->train.n)
        plot_polyline(s, &d->train, &x, &y, "train", ctrain, d->mean.n ? 1 : 1.6,
                      d->mean.n ? " stroke-opacity=\"0.35\"" : NULL);
    if (d->mean.n) plot_polyline(s, &d->mean, &x, &y, "train-mean", ctrain, 2, NULL);
    if (d->eval.n) {
        plot_polyline(s, &d->eval, &x, &y, "eval", ceval, 2, NULL);
        if (d->eval.n <= 200)
            for (size_t i = 0; i < d->eval.n; i++)
                plot_svg_printf(s, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                                plot_axis_px(&x, d->eval.p[i].x), plot_axis_px(&y, d->eval.p[i].y),
                                ceval);
    }
    plot_clip_end(s);

    /* the legend, top right inside the panel */
    char lb[3][64];
    const char *names[3], *cols[3];
    int kinds[3], n = 0;
    if (d->train.n) /* faint when its mean is drawn over it */
        names[n] = "train loss", cols[n] = ctrain,
        kinds[n++] = d->mean.n ? PLOT_LEG_FAINT : PLOT_LEG_LINE;
    if (d->mean.n) {
        snprintf(lb[n], sizeof lb[n], "train loss, mean of %zu steps", w);
        names[n] = lb[n], cols[n] = ctrain, kinds[n++] = PLOT_LEG_LINE;
    }
    if (d->eval.n) names[n] = "validation loss", cols[n] = ceval, kinds[n++] = PLOT_LEG_DOT;
    double lw = 0;
    for (int i = 0; i < n; i++)
        lw = fmax(lw, plot_text_width(names[i], 12));
    double lx = W - R - lw - 48, ly = T1 + 8;
    plot_svg_printf(s,
                    "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"white\" "
                    "fill-opacity=\"0.85\" stroke=\"#ccc\"/>\n",
                    lx, ly, lw + 40, 8 + 18 * n);
    for (int i = 0; i < n; i++)
        plot_legend_entry(s, lx + 8, ly + 13 + 18 * i, cols[i], kinds[i], names[i]);

    /* the tokens per second panel */
    double tlo = 0, thi = 0;
    range(&d->tps, &tlo, &thi);
    plot_axis ty = plot_axis_linear(tlo, thi, 1);
    ty.px0 = B2, ty.px1 = T2;
    plot_frame(s, &x, &ty, "step", "tokens/s", 0);
    plot_clip_begin(s, &x, &ty);
    if (d->tps.n) plot_polyline(s, &d->tps, &x, &ty, "tokens", plot_color(2), 1.6, NULL);
    plot_clip_end(s);
    if (d->tps.n) {
        double *v = malloc(d->tps.n * sizeof *v);
        if (v) {
            for (size_t i = 0; i < d->tps.n; i++)
                v[i] = d->tps.p[i].y;
            qsort(v, d->tps.n, sizeof *v, by_y);
            plot_svg_printf(s,
                            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">"
                            "median %.4g tokens/s over %zu steps</text>\n",
                            W - R - 4, T2 - 6, v[d->tps.n / 2], d->tps.n);
            free(v);
        } else {
            s->nomem = 1;
        }
    } else {
        plot_svg_printf(s,
                        "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#888\">no "
                        "tokens_per_s in the train records</text>\n",
                        (L + W - R) / 2, (T2 + B2) / 2);
    }
    plot_svg_end(s);
}

int plot_loss(const plot_opts *o, plot_err *err) {
    char *text = NULL;
    size_t len = 0;
    loss_data d;
    memset(&d, 0, sizeof d);
    plot_svg s = {0};
    int rc = plot_read_file(o->in, &text, &len, err);
    if (rc == PLOT_OK) rc = read_metrics(o->in, text, len, &d, err);
    if (rc == PLOT_OK && !d.train.n && !d.eval.n)
        rc = plot_fail(err, PLOT_BAD,
                       "%s: no \"type\":\"train\" record with a loss and no \"type\":\"eval\" "
                       "record with a val_loss in %zu record(s) (is it train_gpt's --metrics "
                       "file?)",
                       o->in, d.records);
    size_t w = 0;
    if (rc == PLOT_OK) {
        size_t dup = plot_pts_sort(&d.train, 1);
        plot_pts_sort(&d.tps, 1);
        dup += plot_pts_sort(&d.eval, 1);
        if (dup)
            fprintf(stderr,
                    "ct_plot: note: %s: %zu step(s) recorded more than once (a resumed "
                    "run?): the last record of each is drawn\n",
                    o->in, dup);
        if (d.no_loss)
            fprintf(stderr,
                    "ct_plot: note: %s: %zu train record(s) without a finite loss "
                    "(skipped steps) left out\n",
                    o->in, d.no_loss);
        if (d.train.n >= 50) { /* noisy: a centred mean of about 2 % of the run, odd, >= 5 */
            w = d.train.n / 50 | 1;
            if (w < 5) w = 5;
            rc = moving_mean(&d.train, w, &d.mean, err);
        }
    }
    if (rc == PLOT_OK) {
        draw(&s, o, &d, w);
        rc = plot_svg_commit(&s, o->out, err);
    }
    plot_svg_free(&s);
    plot_pts_free(&d.train), plot_pts_free(&d.mean), plot_pts_free(&d.eval), plot_pts_free(&d.tps);
    free(text);
    return rc;
}
