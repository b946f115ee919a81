/* ct_pipeline - the pipeline schedule viewer: a schedule of parallel/ (the same lists the executor
 * runs) simulated at given action costs, printed as a text timeline with one row per stage (as
 * the figures of the GPipe, Megatron and zero-bubble papers draw them), then the bubble fraction
 * and the peak live activations of each stage. No devices, no MPI.
 *
 *     ct_pipeline --pp 4 --micro-batches 8 --schedule 1f1b
 *     ct_pipeline --pp 4 --micro-batches 8 --schedule interleaved --virtual-stages 2
 *     ct_pipeline --pp 4 --micro-batches 8 --schedule zb1 --costs 1,1,1 --json
 *     ct_pipeline --pp 4 --micro-batches 8 --schedule gpipe --trace gpipe.json
 *
 * Costs F,B,W: forward, backward's input half, its weight half (default 1,1,1: a whole backward
 * costs B + W = 2). Timeline cells: "F3" the forward of micro-batch 3, "B3" its backward (the
 * input half under zb1), "W3" the weight half, "==" the action goes on, "." idle; with several
 * chunks per stage a letter names the chunk (F3a, F3b, ...). Exit status 2 on bad input. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_parallel.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ct_pipeline --pp N --micro-batches M [--schedule gpipe|1f1b|interleaved|zb1]\n"
            "                   [--virtual-stages V] [--costs F,B,W] [--json] [--trace FILE]\n"
            "Simulates one step of a pipeline schedule and prints it as a timeline, one row per\n"
            "stage, with the bubble fraction and the peak live activations per stage.\n"
            "  --pp N              pipeline stages (default 4)\n"
            "  --micro-batches M   micro-batches per step (default 8)\n"
            "  --schedule S        gpipe | 1f1b | interleaved | zb1 (default 1f1b)\n"
            "  --virtual-stages V  model chunks per stage, interleaved only (default 1)\n"
            "  --costs F,B,W       forward, backward input half, backward weight half (default\n"
            "                      1,1,1: a whole backward costs B + W)\n"
            "  --json              one JSON object instead of the text (bubble_fraction, makespan,\n"
            "                      peak_activations, stage_bubble, the timeline)\n"
            "  --trace FILE        the simulated timeline as Chrome trace JSON (ui.perfetto.dev)\n");
}

static void die(const char *fmt, const char *arg) {
    fprintf(stderr, "ct_pipeline: error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (--help lists the flags)\n");
    exit(2);
}

static int to_int(const char *flag, const char *v) {
    char *end = NULL;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || !*v || *end || x < 1 || x > 1 << 20) die("%s needs a whole number >= 1", flag);
    return (int)x;
}

static int is_compute(ct_act_kind k) {
    return k == CT_ACT_FWD || k == CT_ACT_BWD || k == CT_ACT_BWD_INPUT || k == CT_ACT_BWD_WEIGHT;
}

/* "F3", "B3", "W3" (+ the chunk's letter with several per stage). */
static void label(const ct_schedule *s, const ct_action *a, char *buf, size_t n) {
    char k = a->kind == CT_ACT_FWD ? 'F' : a->kind == CT_ACT_BWD_WEIGHT ? 'W' : 'B';
    if (s->virt > 1) snprintf(buf, n, "%c%d%c", k, a->mb, 'a' + a->chunk / s->stages);
    else snprintf(buf, n, "%c%d", k, a->mb);
}

/* The time quantum of the text: the largest q dividing every cost (within 1e-6), at least a
 * tenth of the smallest; otherwise the smallest / 10 and times rounded to it. */
static double quantum(const double *c, int n, int *exact) {
    double lo = INFINITY;
    for (int i = 0; i < n; i++)
        if (c[i] > 0 && c[i] < lo) lo = c[i];
    if (!isfinite(lo)) lo = 1;
    for (int k = 1; k <= 10; k++) {
        double q = lo / k;
        int ok = 1;
        for (int i = 0; i < n; i++) {
            double r = c[i] / q;
            if (fabs(r - floor(r + 0.5)) > 1e-6 * (r > 1 ? r : 1)) ok = 0;
        }
        if (ok) {
            *exact = 1;
            return q;
        }
    }
    *exact = 0;
    return lo / 10;
}

static void print_text(const ct_schedule *s, const ct_sched_sim *r, const ct_sched_costs *c) {
    double cs[3] = {c->fwd, c->bwd_input, c->bwd_weight};
    int exact = 0;
    double q = quantum(cs, 3, &exact);
    int cols = (int)floor(r->makespan / q + 0.5), w = 3;
    char lb[32];
    for (int st = 0; st < s->stages; st++) /* the cell width: the longest label + a space */
        for (int i = 0; i < s->n[st]; i++)
            if (is_compute(s->list[st][i].kind)) {
                label(s, &s->list[st][i], lb, sizeof lb);
                if ((int)strlen(lb) + 1 > w) w = (int)strlen(lb) + 1;
            }
    printf("%s: %d stages, %d micro-batches%s, costs F %g B %g W %g (a whole backward %g); one "
           "column = %g time unit%s%s\n",
           ct_sched_name(s->kind), s->stages, s->micro, "", c->fwd, c->bwd_input, c->bwd_weight,
           c->bwd, q, q == 1 ? "" : "s", exact ? "" : " (times rounded to it)");
    if (s->virt > 1)
        printf("%d chunks per stage: stage s holds model chunks s, s+%d, ... (letters a, b, ...)\n",
               s->virt, s->stages);
    char *row = malloc((size_t)cols * (size_t)w + 64);
    if (!row) return;
    /* a ruler: the time at every 5th column */
    memset(row, ' ', (size_t)cols * w + 32);
    for (int k = 0; k < cols; k += 5) {
        char t[32];
        int n = snprintf(t, sizeof t, "%g", k * q);
        memcpy(row + (size_t)k * w, t, (size_t)n);
    }
    row[(size_t)cols * w + 8] = 0;
    printf("time     %s\n", row);
    for (int st = 0; st < s->stages; st++) {
        for (int k = 0; k < cols; k++) { /* idle */
            memset(row + (size_t)k * w, ' ', (size_t)w);
            row[(size_t)k * w] = '.';
        }
        row[(size_t)cols * w] = 0;
        for (int i = 0; i < s->n[st]; i++) {
            const ct_action *a = &s->list[st][i];
            if (!is_compute(a->kind)) continue;
            int c0 = (int)floor(r->start[st][i] / q + 0.5), c1 = (int)floor(r->end[st][i] / q + 0.5);
            if (c1 <= c0) c1 = c0 + 1;
            if (c1 > cols) c1 = cols;
            label(s, a, lb, sizeof lb);
            for (int k = c0; k < c1; k++) {
                char *cell = row + (size_t)k * w;
                memset(cell, ' ', (size_t)w);
                if (k == c0) memcpy(cell, lb, strlen(lb));
                else memset(cell, '=', (size_t)w - 1);
            }
        }
        printf("stage %-2d %s\n", st, row);
    }
    free(row);
    printf("bubble fraction %.4f, makespan %g (idle time / (stages x makespan))\n", r->bubble,
           r->makespan);
    printf("stage  peak live activations  idle fraction\n");
    for (int st = 0; st < s->stages; st++)
        printf("%-6d %-22d %.4f\n", st, r->peak_live[st], r->stage_bubble[st]);
}

static void print_json(FILE *f, const ct_schedule *s, const ct_sched_sim *r,
                       const ct_sched_costs *c) {
    fprintf(f,
            "{\"schedule\":\"%s\",\"stages\":%d,\"micro_batches\":%d,\"virtual_stages\":%d,"
            "\"costs\":{\"fwd\":%g,\"bwd\":%g,\"bwd_input\":%g,\"bwd_weight\":%g},"
            "\"makespan\":%.9g,\"bubble_fraction\":%.9g,\"peak_activations\":[",
            ct_sched_name(s->kind), s->stages, s->micro, s->virt, c->fwd, c->bwd, c->bwd_input,
            c->bwd_weight, r->makespan, r->bubble);
    for (int st = 0; st < s->stages; st++) fprintf(f, "%s%d", st ? "," : "", r->peak_live[st]);
    fprintf(f, "],\"stage_bubble\":[");
    for (int st = 0; st < s->stages; st++) fprintf(f, "%s%.9g", st ? "," : "", r->stage_bubble[st]);
    fprintf(f, "],\"timeline\":[");
    for (int st = 0; st < s->stages; st++) {
        fprintf(f, "%s[", st ? "," : "");
        for (int i = 0, first = 1; i < s->n[st]; i++) {
            const ct_action *a = &s->list[st][i];
            if (!is_compute(a->kind)) continue;
            fprintf(f, "%s{\"kind\":\"%s\",\"mb\":%d,\"chunk\":%d,\"start\":%.9g,\"end\":%.9g}",
                    first ? "" : ",", ct_act_name(a->kind), a->mb, a->chunk, r->start[st][i],
                    r->end[st][i]);
            first = 0;
        }
        fprintf(f, "]");
    }
    fprintf(f, "]}\n");
}

/* Chrome trace: one process, one track per stage, a time unit drawn as 1 ms. */
static int write_trace(const char *path, const ct_schedule *s, const ct_sched_sim *r) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return 0;
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n");
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"%s, %d "
               "stages, %d micro-batches (simulated; 1 time unit = 1 ms)\"}}",
            ct_sched_name(s->kind), s->stages, s->micro);
    for (int st = 0; st < s->stages; st++)
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,\"args\":"
                   "{\"name\":\"stage %d\"}}", st, st);
    char lb[32];
    for (int st = 0; st < s->stages; st++)
        for (int i = 0; i < s->n[st]; i++) {
            const ct_action *a = &s->list[st][i];
            double d = r->end[st][i] - r->start[st][i];
            if (!is_compute(a->kind)) continue; /* messages cost nothing here (a receive's span
                                                    would only be its wait) */
            label(s, a, lb, sizeof lb);
            fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"compute\",\"ph\":\"X\",\"ts\":%.3f,"
                       "\"dur\":%.3f,\"pid\":0,\"tid\":%d,\"args\":{\"action\":\"%s\",\"mb\":%d,"
                       "\"chunk\":%d}}",
                    lb, 1e3 * r->start[st][i], 1e3 * d, st, ct_act_name(a->kind), a->mb, a->chunk);
        }
    fprintf(f, "\n]}\n");
    int ok = fclose(f) == 0;
    if (ok) ok = rename(tmp, path) == 0;
    if (!ok) remove(tmp);
    return ok;
}

int main(int argc, char **argv) {
    int N = 4, m = 8, v = 1, json = 0;
    const char *sched = "1f1b", *trace = NULL, *costs = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--pp")) {
            N = to_int(a, val), i++;
        } else if (!strcmp(a, "--micro-batches")) {
            m = to_int(a, val), i++;
        } else if (!strcmp(a, "--virtual-stages")) {
            v = to_int(a, val), i++;
        } else if (!strcmp(a, "--schedule")) {
            if (!val) die("%s needs a value", a);
            sched = val, i++;
        } else if (!strcmp(a, "--costs")) {
            if (!val) die("%s needs F,B,W", a);
            costs = val, i++;
        } else if (!strcmp(a, "--trace")) {
            if (!val) die("%s needs a file name", a);
            trace = val, i++;
        } else {
            die("unknown argument '%s'", a);
        }
    }
    ct_sched_costs c = ct_sched_costs_unit();
    if (costs) {
        double f = 0, b = 0, w = 0;
        char extra;
        if (sscanf(costs, "%lf,%lf,%lf%c", &f, &b, &w, &extra) != 3 || !(f > 0) || !(b > 0) ||
            !(w >= 0) || !isfinite(f + b + w))
            die("--costs '%s': want three numbers F,B,W (forward and backward input half > 0, "
                "weight half >= 0)", costs);
        c.fwd = f, c.bwd_input = b, c.bwd_weight = w, c.bwd = b + w;
    }
    ct_err err = {0};
    ct_sched_kind kind;
    if (ct_sched_parse(sched, &kind, &err) != CT_OK) die("%s", err.msg);
    if (kind == CT_SCHED_TRIVIAL && N > 1) die("%s", "the trivial schedule is for one stage (--pp 1)");
    ct_schedule *s = NULL;
    ct_sched_sim r = {0};
    if (ct_sched_make(kind, N, m, v, &s, &err) != CT_OK) die("%s", err.msg);
    if (ct_sched_simulate(s, &c, 1, &r, &err) != CT_OK) {
        ct_sched_free(s);
        die("%s", err.msg);
    }
    if (json) print_json(stdout, s, &r, &c);
    else print_text(s, &r, &c);
    int rc = 0;
    if (trace) {
        if (write_trace(trace, s, &r)) {
            if (!json) printf("wrote %s (open it at ui.perfetto.dev or chrome://tracing)\n", trace);
        } else {
            fprintf(stderr, "ct_pipeline: error: cannot write %s\n", trace);
            rc = 2;
        }
    }
    ct_sched_sim_free(&r);
    ct_sched_free(s);
    return rc;
}
