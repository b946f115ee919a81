/* ct_plot - pictures of a run, as SVG, from the files the programs write; nothing beyond the C
 * library (no device, no MPI):
 *
 *     ct_plot loss run.jsonl -o loss.svg          train_gpt --metrics: train and validation
 *                                                 loss against steps, tokens/s below
 *     ct_plot timeline t.json -o t.svg            train_gpt --trace / ct_pipeline --trace: one
 *                                                 row per worker and lane, events by name
 *     ct_plot bench sweep.csv -o sweep.svg        bench_allreduce --csv (or any CSV with a
 *                                                 header): one line per series
 *
 * The input is read whole and checked before anything is written; the SVG is written to a
 * temporary file beside the output and renamed, so the output is complete or untouched. Exit
 * status 0 written, 2 bad input or flags (the message names the problem), 1 out of memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ct_plot loss METRICS.jsonl -o OUT.svg [--title T] [--width PX]\n"
            "       ct_plot timeline TRACE.json -o OUT.svg [--title T] [--width PX]\n"
            "       ct_plot bench FILE.csv -o OUT.svg [--x COL] [--y COL] [--series COL]\n"
            "                     [--logx | --linx] [--logy] [--title T] [--width PX]\n"
            "Draws an SVG picture of a run from the files the programs write.\n"
            "  loss       train_gpt --metrics FILE (JSON Lines): the train loss (and its moving\n"
            "             average from 50 steps on) and the validation loss against the step;\n"
            "             tokens/s in a second panel\n"
            "  timeline   a Chrome trace (train_gpt --trace, ct_pipeline --trace): one row per\n"
            "             worker and lane (the trace's thread names), nested spans one level\n"
            "             down, coloured by event name, over a time axis\n"
            "  bench      a CSV with a header line (bench_allreduce --csv): one line per series\n"
            "  -o, --out FILE   the SVG to write (required; written whole or not at all)\n"
            "  --title T        the picture's title (default: the mode and the input's name)\n"
            "  --width PX       the picture's width, 400..10000 (default 900; timeline 1100)\n"
            "  --x COL          bench: the x column (default size, else the first column)\n"
            "  --y COL          bench: the y column (default busbw)\n"
            "  --series COL     bench: one line per value of COL (default algorithm when there\n"
            "                   is one; \"\" draws one line)\n"
            "  --logx, --linx   bench: log or linear x (default: log for size, else linear)\n"
            "  --logy           bench: log y\n"
            "Exit status: 0 written; 2 bad input or flags (nothing written); 1 out of memory.\n");
}

static int bad(const char *fmt, const char *arg) {
    fprintf(stderr, "ct_plot: error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (--help lists the flags)\n");
    return 2;
}

int main(int argc, char **argv) {
    plot_opts o = {0};
    o.logx = o.logy = -1;
    const char *mode = NULL, *bench_flag = NULL;
    char title[256];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "-o") || !strcmp(a, "--out") || !strcmp(a, "--title") ||
            !strcmp(a, "--width") || !strcmp(a, "--x") || !strcmp(a, "--y") ||
            !strcmp(a, "--series")) {
            if (!v) return bad("%s needs a value", a);
            i++;
            if (!strcmp(a, "-o") || !strcmp(a, "--out"))
                o.out = v;
            else if (!strcmp(a, "--title"))
                o.title = v;
            else if (!strcmp(a, "--width")) {
                char *end = NULL;
                o.width = strtod(v, &end);
                if (end == v || *end || !(o.width >= 400 && o.width <= 10000))
                    return bad("--width wants a number of pixels from 400 to 10000, not '%s'", v);
            } else {
                bench_flag = a;
                if (!strcmp(a, "--x"))
                    o.xcol = v;
                else if (!strcmp(a, "--y"))
                    o.ycol = v;
                else
                    o.series = v;
            }
        } else if (!strcmp(a, "--logx") || !strcmp(a, "--linx")) {
            if (o.logx >= 0) return bad("%s: give --logx or --linx once", a);
            o.logx = !strcmp(a, "--logx"), bench_flag = a;
        } else if (!strcmp(a, "--logy")) {
            o.logy = 1, bench_flag = a;
        } else if (a[0] == '-' && a[1]) {
            return bad("unknown flag '%s'", a);
        } else if (!mode) {
            mode = a;
        } else if (!o.in) {
            o.in = a;
        } else {
            return bad("one input file only ('%s' is a second)", a);
        }
    }
    if (!mode) return bad("%s", "no mode: loss, timeline or bench");
    int m = !strcmp(mode, "loss")       ? 0
            : !strcmp(mode, "timeline") ? 1
            : !strcmp(mode, "bench")    ? 2
                                        : -1;
    if (m < 0) return bad("unknown mode '%s' (loss, timeline or bench)", mode);
    if (!o.in) return bad("%s needs an input file", mode);
    if (!o.out) return bad("%s needs -o OUT.svg", mode);
    if (!strcmp(o.in, o.out)) return bad("-o %s is the input file", o.out);
    if (m != 2 && bench_flag) return bad("%s is for bench only", bench_flag);
    if (!o.title) {
        const char *base = strrchr(o.in, '/');
        snprintf(title, sizeof title, "%s: %s",
                 m == 0   ? "loss"
                 : m == 1 ? "timeline"
                          : "benchmark",
                 base ? base + 1 : o.in);
        o.title = title;
    }
    plot_err err = {{0}};
    int rc = m == 0 ? plot_loss(&o, &err) : m == 1 ? plot_timeline(&o, &err) : plot_bench(&o, &err);
    if (rc != PLOT_OK) {
        fprintf(stderr, "ct_plot: error: %s\n", err.msg);
        return rc == PLOT_NOMEM ? 1 : 2;
    }
    printf("ct_plot: wrote %s\n", o.out);
    return 0;
}
