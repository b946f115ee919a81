/* timeline.c - `ct_plot timeline TRACE.json`: a Chrome trace (train_gpt --trace, ct_pipeline
 * --trace, or any file of that format: one object with a traceEvents array, or the bare array)
 * drawn as one row per track, (pid, tid) = (rank, worker * 4 + lane) for train_gpt, labelled by
 * the thread_name metadata ("worker 0", "worker 0 comm", "stage 1"), its complete ("X") events
 * as boxes over a time axis, nested spans (step > forward > attention) one level lower each,
 * coloured by name (by args.action where an event has one: ct_pipeline's "F3" is a "forward"),
 * with a legend ordered by total time. Other phases (B/E pairs, instants, counters) are left out
 * with a note. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"

enum { MAX_TRACKS = 256, MAX_LEVELS = 6, LEVEL_H = 15 };

typedef struct tl_event {
    double ts, dur; /* microseconds */
    int track, kind, name, level;
    int row;   /* its track's row (lay_out) */
    double mb; /* NAN when absent */
} tl_event;

typedef struct tl_track {
    double pid, tid;
    int label, proc; /* names' indices (-1: none) */
    int levels, row; /* levels drawn; order on the page */
    size_t nev;
} tl_track;

typedef struct tl_data {
    tl_event *ev;
    size_t n, cap;
    plot_names keys, labels, kinds; /* "pid/tid" -> track; label strings; colour keys */
    tl_track *tr;
    size_t ntr, trcap;
    double *kind_total; /* per kind, microseconds */
    size_t skipped_phase, skipped_bad;
} tl_data;

static int track_of(tl_data *d, double pid, double tid, int *out, plot_err *err) {
    char key[80];
    snprintf(key, sizeof key, "%.17g/%.17g", pid, tid);
    int i, rc = plot_names_get(&d->keys, key, &i, err);
    if (rc) return rc;
    if ((size_t)i == d->ntr) { /* new */
        if (d->ntr == d->trcap) {
            size_t nc = d->trcap ? 2 * d->trcap : 16;
            tl_track *nt = realloc(d->tr, nc * sizeof *nt);
            if (!nt) return plot_fail(err, PLOT_NOMEM, "out of memory (%zu tracks)", d->ntr);
            d->tr = nt, d->trcap = nc;
        }
        d->tr[d->ntr++] = (tl_track){pid, tid, -1, -1, 1, 0, 0};
    }
    *out = i;
    return PLOT_OK;
}

/* One traceEvents element. */
static int take_event(tl_data *d, const plot_rec *r, plot_err *err) {
    const char *ph = plot_rec_str(r, "ph"), *name = plot_rec_str(r, "name");
    double pid = 0, tid = 0, ts, dur, mb = NAN;
    plot_rec_num(r, "pid", &pid);
    plot_rec_num(r, "tid", &tid);
    int rc, t, k;
    if (ph && !strcmp(ph, "M") && name &&
        (!strcmp(name, "thread_name") || !strcmp(name, "process_name"))) {
        const char *label = plot_rec_str(r, "args.name");
        if (!label) return PLOT_OK;
        int li;
        if ((rc = plot_names_get(&d->labels, label, &li, err))) return rc;
        if (!strcmp(name, "thread_name")) {
            if ((rc = track_of(d, pid, tid, &t, err))) return rc;
            d->tr[t].label = li;
        } else { /* every track of this pid, now and later: kept on a track with tid NaN */
            if ((rc = track_of(d, pid, NAN, &t, err))) return rc;
            d->tr[t].proc = li;
        }
        return PLOT_OK;
    }
    if (!ph || strcmp(ph, "X")) {
        if (!ph || strcmp(ph, "M")) d->skipped_phase++;
        return PLOT_OK;
    }
    if (!plot_rec_num(r, "ts", &ts) || !plot_rec_num(r, "dur", &dur) || dur < 0 ||
        fabs(ts) > 1e15 || dur > 1e15) {
        d->skipped_bad++;
        return PLOT_OK;
    }
    plot_rec_num(r, "args.mb", &mb);
    const char *key = plot_rec_str(r, "args.action");
    if (!key) key = name ? name : "(no name)";
    if ((rc = track_of(d, pid, tid, &t, err))) return rc;
    if ((rc = plot_names_get(&d->kinds, key, &k, err))) return rc;
    int ni = -1;
    if (name && (rc = plot_names_get(&d->labels, name, &ni, err))) return rc;
    if (d->n == d->cap) {
        size_t nc = d->cap ? 2 * d->cap : 1024;
        tl_event *ne = nc < ((size_t)-1) / sizeof *ne ? realloc(d->ev, nc * sizeof *ne) : NULL;
        if (!ne) return plot_fail(err, PLOT_NOMEM, "out of memory (%zu events)", d->n);
        d->ev = ne, d->cap = nc;
    }
    d->ev[d->n++] = (tl_event){ts, dur, t, k, ni, 0, 0, mb};
    d->tr[t].nev++;
    return PLOT_OK;
}

static int read_events(plot_json *j, tl_data *d, plot_err *err) {
    plot_rec *r = malloc(sizeof *r);
    if (!r) return plot_fail(err, PLOT_NOMEM, "out of memory");
    int rc = plot_json_expect(j, '[', "(the traceEvents array)", err);
    plot_json_ws(j);
    if (rc == PLOT_OK && j->p < j->end && *j->p == ']') {
        j->p++;
        free(r);
        return PLOT_OK;
    }
    while (rc == PLOT_OK) {
        plot_json_ws(j);
        if (j->p >= j->end) {
            rc = plot_json_bad(j, err, "traceEvents does not end");
            break;
        }
        if (*j->p != '{') {
            rc = plot_json_bad(j, err, "each element of traceEvents must be an object");
            break;
        }
        if ((rc = plot_json_record(j, r, err)) || (rc = take_event(d, r, err))) break;
        plot_json_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == ']') {
            j->p++;
            break;
        }
        rc = plot_json_bad(j, err, "expected ',' or ']' in traceEvents");
    }
    free(r);
    return rc;
}

static int read_trace(const char *path, const char *text, size_t len, tl_data *d, plot_err *err) {
    plot_json j;
    plot_json_init(&j, text, len, path, 1);
    plot_json_ws(&j);
    int rc, found = 0;
    if (j.p < j.end && *j.p == '[') { /* the JSON Array Format: the events alone */
        rc = read_events(&j, d, err);
        found = 1;
    } else if ((rc = plot_json_expect(&j, '{', "(a trace is an object with traceEvents)", err)) ==
               PLOT_OK) {
        plot_json_ws(&j);
        if (j.p < j.end && *j.p == '}')
            j.p++;
        else
            for (;;) {
                char key[PLOT_KEY_MAX];
                if ((rc = plot_json_string(&j, key, sizeof key, err)) ||
                    (rc = plot_json_expect(&j, ':', "after a member's name", err)))
                    break;
                if (!strcmp(key, "traceEvents") && !found)
                    rc = read_events(&j, d, err), found = 1;
                else
                    rc = plot_json_skip(&j, err);
                if (rc) break;
                plot_json_ws(&j);
                if (j.p < j.end && *j.p == ',') {
                    j.p++;
                    continue;
                }
                if (j.p < j.end && *j.p == '}') {
                    j.p++;
                    break;
                }
                rc = plot_json_bad(&j, err, "expected ',' or '}' in the trace object");
                break;
            }
    }
    if (rc == PLOT_OK && !plot_json_at_end(&j))
        rc = plot_json_bad(&j, err, "more after the trace object");
    if (rc == PLOT_OK && !found)
        rc = plot_fail(err, PLOT_BAD,
                       "%s: no traceEvents array (is it a Chrome trace, as "
                       "train_gpt --trace writes?)",
                       path);
    if (rc == PLOT_OK && !d->n)
        rc = plot_fail(err, PLOT_BAD,
                       "%s: no complete (\"ph\":\"X\") events with ts and dur "
                       "in its traceEvents",
                       path);
    return rc;
}

/* ---- layout ------------------------------------------------------------------------------ */

static int by_row_time(const void *a, const void *b) {
    const tl_event *p = a, *q = b;
    if (p->row != q->row) return p->row < q->row ? -1 : 1;
    if (p->track != q->track) return p->track < q->track ? -1 : 1; /* beyond the drawn rows */
    if (p->ts != q->ts) return p->ts < q->ts ? -1 : 1;
    if (p->dur != q->dur) return p->dur > q->dur ? -1 : 1; /* the enclosing span first */
    return 0;
}
static int by_pid_tid(const void *a, const void *b) {
    const tl_track *p = *(tl_track *const *)a, *q = *(tl_track *const *)b;
    if (p->pid != q->pid) return p->pid < q->pid ? -1 : 1;
    if (p->tid != q->tid) return p->tid < q->tid ? -1 : 1;
    return 0;
}

/* Rows in (pid, tid) order for the tracks with events; each event's nesting level on its row
 * (a stack of the enclosing spans' ends). Returns the rows drawn. */
static int lay_out(tl_data *d) {
    tl_track **ord = malloc((d->ntr ? d->ntr : 1) * sizeof *ord);
    if (!ord) return -1;
    size_t k = 0;
    for (size_t i = 0; i < d->ntr; i++)
        if (d->tr[i].nev)
            ord[k++] = &d->tr[i];
        else
            d->tr[i].row = -1;
    qsort(ord, k, sizeof *ord, by_pid_tid);
    for (size_t i = 0; i < k; i++)
        ord[i]->row = i < MAX_TRACKS ? (int)i : MAX_TRACKS;
    free(ord);
    for (size_t i = 0; i < d->n; i++)
        d->ev[i].row = d->tr[d->ev[i].track].row;
    qsort(d->ev, d->n, sizeof *d->ev, by_row_time);
    double stack[64];
    int depth = 0, cur = -1;
    for (size_t i = 0; i < d->n; i++) {
        tl_event *e = &d->ev[i];
        if (e->track != cur) cur = e->track, depth = 0;
        while (depth && stack[depth - 1] <= e->ts + 1e-6)
            depth--;
        e->level = depth < MAX_LEVELS ? depth : MAX_LEVELS - 1;
        if (depth < 64) stack[depth++] = e->ts + e->dur;
        tl_track *t = &d->tr[e->track];
        if (e->level + 1 > t->levels) t->levels = e->level + 1;
    }
    return (int)(k < MAX_TRACKS ? k : MAX_TRACKS);
}

typedef struct kind_total {
    double total;
    int kind;
} kind_total;

static int by_total(const void *a, const void *b) {
    const kind_total *p = a, *q = b;
    if (p->total != q->total) return p->total > q->total ? -1 : 1;
    return p->kind < q->kind ? -1 : p->kind > q->kind;
}

static void draw(plot_svg *s, const plot_opts *o, tl_data *d, int rows, size_t total_rows) {
    /* colours: kinds by total time, the 20 largest get the palette, the rest grey */
    size_t nk = d->kinds.n;
    int *order = malloc(nk * sizeof *order), *color = malloc(nk * sizeof *color);
    kind_total *kt = malloc(nk * sizeof *kt);
    tl_track **byrow = calloc((size_t)rows + 1, sizeof *byrow);
    if (!order || !color || !byrow || !kt) {
        s->nomem = 1;
        free(order), free(color), free(byrow), free(kt);
        return;
    }
    for (size_t i = 0; i < nk; i++)
        kt[i] = (kind_total){d->kind_total[i], (int)i};
    qsort(kt, nk, sizeof *kt, by_total);
    for (size_t i = 0; i < nk; i++)
        order[i] = kt[i].kind;
    free(kt);
    for (size_t i = 0; i < nk; i++)
        color[order[i]] = i < 20 ? (int)i : 20;
    for (size_t i = 0; i < d->ntr; i++)
        if (d->tr[i].row >= 0 && d->tr[i].row < rows) byrow[d->tr[i].row] = &d->tr[i];

    /* labels: thread_name, with the process name in front when there are several processes */
    int procs = 0;
    double pid0 = NAN;
    for (int r = 0; r < rows; r++)
        if (byrow[r]->pid != pid0) procs++, pid0 = byrow[r]->pid;
    char(*lab)[160] = malloc(((size_t)rows + 1) * sizeof *lab);
    if (!lab) {
        s->nomem = 1;
        free(order), free(color), free(byrow);
        return;
    }
    double lw = 60;
    for (int r = 0; r < rows; r++) {
        const tl_track *t = byrow[r];
        int proc = -1;
        for (size_t i = 0; i < d->ntr; i++)
            if (d->tr[i].pid == t->pid && isnan(d->tr[i].tid)) proc = d->tr[i].proc;
        char own[80];
        if (t->label >= 0)
            snprintf(own, sizeof own, "%s", d->labels.str[t->label]);
        else
            snprintf(own, sizeof own, "tid %.6g", t->tid);
        if (procs > 1 && proc >= 0)
            snprintf(lab[r], sizeof lab[r], "%s: %s", d->labels.str[proc], own);
        else if (procs > 1)
            snprintf(lab[r], sizeof lab[r], "pid %.6g: %s", t->pid, own);
        else
            snprintf(lab[r], sizeof lab[r], "%s", own);
        lw = fmax(lw, plot_text_width(lab[r], 12));
    }
    if (lw > 260) lw = 260;

    /* geometry */
    double t0 = INFINITY, t1 = -INFINITY;
    for (size_t i = 0; i < d->n; i++)
        if (d->ev[i].row < rows)
            t0 = fmin(t0, d->ev[i].ts), t1 = fmax(t1, d->ev[i].ts + d->ev[i].dur);
    const double W = o->width > 0 ? o->width : 1100, L = lw + 24, R = 24, T = 66, GAP = 8;
    double y = T, *rowy = malloc(((size_t)rows + 1) * sizeof *rowy);
    if (!rowy) {
        s->nomem = 1;
        free(order), free(color), free(byrow), free(lab);
        return;
    }
    for (int r = 0; r < rows; r++)
        rowy[r] = y, y += byrow[r]->levels * LEVEL_H + GAP;
    double bot = y - GAP + 4;
    /* the legend: entries in columns below the axis */
    size_t nleg = nk < 21 ? nk : 21;
    double ew = 0;
    for (size_t i = 0; i < nleg; i++)
        ew = fmax(ew, plot_text_width(i < 20 ? d->kinds.str[order[i]] : "other (000 names)", 12));
    ew += 34;
    int per = (int)fmax(1, floor((W - L - R) / ew));
    double legy = bot + 56, H = legy + ceil((double)nleg / per) * 18 + 14;

    plot_svg_begin(s, W, H, o->title);
    plot_svg_printf(s, "<text x=\"%.0f\" y=\"24\" font-size=\"16\" font-weight=\"bold\">", L);
    plot_svg_text(s, o->title);
    plot_svg_printf(s,
                    "</text>\n<text x=\"%.0f\" y=\"44\" fill=\"#555\">%zu events on %d row(s)%s, "
                    "%.4g ms</text>\n",
                    L, d->n, rows, total_rows > (size_t)rows ? " (the first ones)" : "",
                    (t1 - t0) / 1e3);
    plot_axis x = plot_axis_linear(0, (t1 - t0) / 1e3, 1), ya = plot_axis_linear(0, 1, 0);
    if (t1 > t0 && (t1 - t0) / 1e3 <= x.hi) x.hi = (t1 - t0) / 1e3; /* the last event ends it */
    x.px0 = L, x.px1 = W - R, ya.px0 = bot, ya.px1 = T - 4;
    plot_frame(s, &x, &ya, "time (ms)", NULL, -1);
    /* rows: a band, the label, the events */
    size_t e = 0;
    for (int r = 0; r < rows; r++) {
        const tl_track *t = byrow[r];
        double hgt = t->levels * LEVEL_H;
        plot_svg_printf(s,
                        "<g class=\"track\">\n<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
                        "height=\"%.1f\" fill=\"%s\"/>\n<text class=\"track-label\" x=\"%.1f\" "
                        "y=\"%.1f\" text-anchor=\"end\">",
                        L, rowy[r] - 2, W - R - L, hgt + 4, r % 2 ? "#fafafa" : "#f2f2f2", L - 8,
                        rowy[r] + 11);
        plot_svg_text(s, lab[r]);
        plot_svg_printf(s, "</text>\n");
        while (e < d->n && d->ev[e].row < r)
            e++;
        for (; e < d->n && d->ev[e].row == r; e++) {
            const tl_event *v = &d->ev[e];
            double x0 = plot_axis_px(&x, (v->ts - t0) / 1e3);
            double x1 = plot_axis_px(&x, (v->ts + v->dur - t0) / 1e3);
            double w = fmax(x1 - x0, 0.6), yy = rowy[r] + v->level * LEVEL_H;
            const char *kn = d->kinds.str[v->kind],
                       *nm = v->name >= 0 ? d->labels.str[v->name] : kn;
            plot_svg_printf(s,
                            "<rect class=\"event\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" "
                            "height=\"%d\" fill=\"%s\"><title>",
                            x0, yy, w, LEVEL_H - 2, plot_color(color[v->kind]));
            plot_svg_text(s, nm);
            if (!isnan(v->mb)) plot_svg_printf(s, ", micro-batch %.6g", v->mb);
            plot_svg_printf(s, ": %.4g ms</title></rect>\n", v->dur / 1e3);
            if (w > plot_text_width(nm, 10) + 6) {
                plot_svg_printf(s, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"%s\">",
                                x0 + 3, yy + 10, color[v->kind] < 10 ? "white" : "#222");
                plot_svg_text(s, nm);
                plot_svg_printf(s, "</text>\n");
            }
        }
        plot_svg_printf(s, "</g>\n");
    }
    for (size_t i = 0; i < nleg; i++) {
        char other[64];
        const char *name = d->kinds.str[order[i]];
        if (i == 20) snprintf(other, sizeof other, "other (%zu names)", nk - 20), name = other;
        plot_legend_entry(s, L + (double)(i % (size_t)per) * ew,
                          legy + (double)(i / (size_t)per) * 18, plot_color(i < 20 ? (int)i : 20),
                          PLOT_LEG_BOX, name);
    }
    plot_svg_end(s);
    free(order), free(color), free(byrow), free(lab), free(rowy);
}

int plot_timeline(const plot_opts *o, plot_err *err) {
    char *text = NULL;
    size_t len = 0;
    tl_data d;
    memset(&d, 0, sizeof d);
    plot_svg s = {0};
    int rc = plot_read_file(o->in, &text, &len, err);
    if (rc == PLOT_OK) rc = read_trace(o->in, text, len, &d, err);
    if (rc == PLOT_OK) {
        d.kind_total = calloc(d.kinds.n, sizeof *d.kind_total);
        if (!d.kind_total)
            rc = plot_fail(err, PLOT_NOMEM, "out of memory");
        else
            for (size_t i = 0; i < d.n; i++)
                d.kind_total[d.ev[i].kind] += d.ev[i].dur;
    }
    int rows = 0;
    size_t total_rows = 0;
    if (rc == PLOT_OK) {
        for (size_t i = 0; i < d.ntr; i++)
            total_rows += d.tr[i].nev > 0;
        rows = lay_out(&d);
        if (rows < 0) rc = plot_fail(err, PLOT_NOMEM, "out of memory");
    }
    if (rc == PLOT_OK) {
        if (d.skipped_phase)
            fprintf(stderr,
                    "ct_plot: note: %s: %zu event(s) of phases other than X (complete) "
                    "and M (metadata) left out\n",
                    o->in, d.skipped_phase);
        if (d.skipped_bad)
            fprintf(stderr,
                    "ct_plot: note: %s: %zu complete event(s) without a usable ts and "
                    "dur left out\n",
                    o->in, d.skipped_bad);
        if (total_rows > (size_t)rows)
            fprintf(stderr, "ct_plot: note: %s: %zu tracks; the first %d are drawn\n", o->in,
                    total_rows, rows);
        draw(&s, o, &d, rows, total_rows);
        rc = plot_svg_commit(&s, o->out, err);
    }
    plot_svg_free(&s);
    free(d.ev), free(d.tr), free(d.kind_total);
    plot_names_free(&d.keys), plot_names_free(&d.labels), plot_names_free(&d.kinds);
    free(text);
    return rc;
}
