/* plot.h - ct_plot's private contracts between its files (examples/plot/): a small JSON reader
 * for flat records, an SVG text buffer with axes and legends, the three pictures. Only the C
 * library underneath; nothing here is part of the engine.
 *
 *     plot_svg s;  plot_svg_begin(&s, 900, 600, "title");
 *     plot_axis x = plot_axis_make(0, 400, 0), y = plot_axis_make(2.1, 5.6, 0);
 *     plot_frame(&s, &area, &x, &y, "step", "loss");
 *     plot_svg_end(&s);  plot_svg_commit(&s, "loss.svg", &err);   (temporary file + rename)
 *
 * Every fallible function returns a status: PLOT_OK, PLOT_BAD (bad input: exit status 2) or
 * PLOT_NOMEM (exit status 1), with the message in a plot_err. Input is outside bytes: every
 * reader is bounded (lengths, nesting, field counts) and never trusts a count it was given. */
#ifndef CT_PLOT_H
#define CT_PLOT_H

#include <stddef.h>

enum { PLOT_OK = 0, PLOT_NOMEM = 1, PLOT_BAD = 2 };

typedef struct plot_err {
    char msg[512];
} plot_err;

/* Records the message (printf-style) and returns code. */
int plot_fail(plot_err *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Input text quoted in a message: bytes outside printable ASCII become '?', cut to cap - 1. */
const char *plot_printable(char *buf, size_t cap, const char *s);

/* ---- a whole file in memory (NUL-terminated; data may hold other NULs) ---- */
int plot_read_file(const char *path, char **data, size_t *len, plot_err *err);

/* ---- JSON: flat records ------------------------------------------------------------------
 * A record is one JSON object's scalar members; the members of an object nested one level
 * deep are flattened as "outer.inner" ("args.name"); deeper objects and arrays are skipped (but
 * checked). Strings are decoded to valid UTF-8 (invalid bytes become U+FFFD) and cut at
 * PLOT_STR_MAX - 1 bytes on a character boundary; keys likewise at PLOT_KEY_MAX - 1. */
enum { PLOT_KEY_MAX = 64, PLOT_STR_MAX = 128, PLOT_FIELDS = 48, PLOT_DEPTH = 64 };
enum { PLOT_J_NULL, PLOT_J_BOOL, PLOT_J_NUM, PLOT_J_STR };

typedef struct plot_field {
    char key[PLOT_KEY_MAX];
    int kind;   /* PLOT_J_* */
    double num; /* PLOT_J_NUM (may be inf for 1e999), PLOT_J_BOOL (0 or 1) */
    char str[PLOT_STR_MAX];
} plot_field;

typedef struct plot_rec {
    plot_field f[PLOT_FIELDS]; /* the first PLOT_FIELDS members; later ones are checked, dropped */
    int n;
} plot_rec;

typedef struct plot_json {
    const char *base, *p, *end; /* the text, the cursor, one past the end */
    const char *what;           /* the file's name, for messages */
    int line0;                  /* the line base is on (1-based), for messages */
} plot_json;

void plot_json_init(plot_json *j, const char *text, size_t len, const char *what, int line0);
void plot_json_ws(plot_json *j);
int plot_json_at_end(plot_json *j); /* only whitespace left */
/* One object into r. */
int plot_json_record(plot_json *j, plot_rec *r, plot_err *err);
/* Skips (and checks) any one value. */
int plot_json_skip(plot_json *j, plot_err *err);
/* Expects byte c (after whitespace); the message names what was being read. */
int plot_json_expect(plot_json *j, char c, const char *reading, plot_err *err);
/* A string value into buf (as above). */
int plot_json_string(plot_json *j, char *buf, size_t cap, plot_err *err);
/* A "line L, column C" message about the cursor. */
int plot_json_bad(plot_json *j, plot_err *err, const char *what);

const plot_field *plot_rec_get(const plot_rec *r, const char *key);
/* A finite number under key, else 0 (returns 1 when found). */
int plot_rec_num(const plot_rec *r, const char *key, double *out);
const char *plot_rec_str(const plot_rec *r, const char *key); /* NULL when absent */

/* ---- SVG ---------------------------------------------------------------------------------- */
typedef struct plot_svg {
    char *p;
    size_t n, cap;
    int nomem;
    int clips; /* clip paths made so far (their ids) */
    double w, h;
} plot_svg;

void plot_svg_begin(plot_svg *s, double w, double h, const char *title);
void plot_svg_printf(plot_svg *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* text content or an attribute value: XML-escaped; bytes that are not valid UTF-8 or not XML
 * characters become '?' */
void plot_svg_text(plot_svg *s, const char *t);
void plot_svg_end(plot_svg *s);
/* Writes the document to path through a temporary file in the same folder and a rename: the
 * file is whole or absent. Frees the buffer either way. */
int plot_svg_commit(plot_svg *s, const char *path, plot_err *err);
void plot_svg_free(plot_svg *s);

/* An axis: data range [lo, hi] mapped onto a pixel range; ticks at 1, 2, 5 x 10^k (linear),
 * powers of ten or, when pow2 is set, powers of two (log). */
typedef struct plot_axis {
    double lo, hi; /* data range (log: the values, > 0) */
    double step;   /* linear: the tick spacing */
    int log, pow2;
    double px0, px1; /* pixels of lo and hi */
} plot_axis;

/* A linear axis around [lo, hi] widened to tick marks (from zero when zero is set and the data
 * are positive); a log axis over [lo, hi] (both > 0). */
plot_axis plot_axis_linear(double lo, double hi, int zero);
plot_axis plot_axis_log(double lo, double hi, int pow2);
double plot_axis_px(const plot_axis *a, double v);
/* Tick values (up to cap); returns the count. */
int plot_axis_ticks(const plot_axis *a, double *t, int cap);
/* A tick's label: "0.25", "12k", "1.5M", "64K" (binary for pow2 axes). */
void plot_tick_label(const plot_axis *a, double v, char *buf, size_t cap);

/* Grid lines, tick labels and axis titles of a plot area whose x and y axes have their pixel
 * ranges set (y's px0 is the bottom); side: 0 the y axis on the left with the grid, 1 the y axis
 * on the right (no grid), -1 no y axis; a NULL title draws none. */
void plot_frame(plot_svg *s, const plot_axis *x, const plot_axis *y, const char *xtitle,
                const char *ytitle, int side);

/* A group clipped to a plot area (4 px of slack for markers), and its end. */
void plot_clip_begin(plot_svg *s, const plot_axis *x, const plot_axis *y);
void plot_clip_end(plot_svg *s);

/* A legend entry at (x, y) (y: the middle of the line): a swatch, then the label. */
enum { PLOT_LEG_LINE, PLOT_LEG_FAINT, PLOT_LEG_DASH, PLOT_LEG_DOT, PLOT_LEG_BOX };
void plot_legend_entry(plot_svg *s, double x, double y, const char *color, int kind,
                       const char *label);
/* About how wide text is drawn at a font size (0.6 em per character). */
double plot_text_width(const char *t, double size);

/* The 20 colours of the categorical palette, then grey. */
const char *plot_color(int i);

/* ---- series of points ---------------------------------------------------------------------- */
typedef struct plot_pt {
    double x, y;
    size_t order; /* position in the input: sorting keeps it as the tie-break */
} plot_pt;

typedef struct plot_pts {
    plot_pt *p;
    size_t n, cap;
} plot_pts;

int plot_pts_add(plot_pts *v, double x, double y, plot_err *err); /* PLOT_OK or PLOT_NOMEM */
/* Sorted by x (stable); with dedupe, of points with the same x only the last in the input
 * stays. Returns how many were dropped. */
size_t plot_pts_sort(plot_pts *v, int dedupe);
void plot_pts_free(plot_pts *v);
/* The points as one polyline of class cls (its points in order). */
void plot_polyline(plot_svg *s, const plot_pts *v, const plot_axis *x, const plot_axis *y,
                   const char *cls, const char *color, double width, const char *extra);

/* ---- names: distinct strings numbered in order of first appearance ------------------------ */
typedef struct plot_names {
    char **str;    /* [n] */
    int *slot;     /* [cap]: index + 1, 0 empty (open addressing) */
    size_t n, cap; /* cap a power of two, at least twice n */
} plot_names;

/* The index of str (added when new; PLOT_NOMEM fails with -1 in *index). */
int plot_names_get(plot_names *t, const char *str, int *index, plot_err *err);
void plot_names_free(plot_names *t);

/* ---- the pictures (each writes out or leaves it untouched) ------------------------------- */
typedef struct plot_opts {
    const char *in, *out, *title;
    const char *xcol, *ycol, *series; /* bench: columns (NULL: the defaults) */
    int logx, logy;                   /* bench: -1 default, 0 / 1 as told */
    double width, height;             /* 0: each picture's default */
} plot_opts;

int plot_loss(const plot_opts *o, plot_err *err);
int plot_timeline(const plot_opts *o, plot_err *err);
int plot_bench(const plot_opts *o, plot_err *err);

#endif
