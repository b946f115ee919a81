/* links.c - the link model: where a group of workers falls (threads of one process, ranks,
 * mixed), t(bytes) = alpha + beta * bytes fitted from measurements, the links table's text
 * (load, write), the default model for links not measured, and the costs' release. */
#include <stdlib.h>
#include <string.h>

#include "plan_impl.h"

/* The default link model (ct_plan_links_default): a ring over each group, with alpha and
 * bandwidth per placement (threads of one process, processes). A guess, said as one. */
#define CT_PLAN_DEFAULT_THREADS_US 5.0
#define CT_PLAN_DEFAULT_THREADS_GBS 10.0
#define CT_PLAN_DEFAULT_RANKS_US 25.0
#define CT_PLAN_DEFAULT_RANKS_GBS 5.0

const char *ct__plan_place_name(ct_plan_place p) {
    return p == CT_PLACE_THREADS ? "threads" : p == CT_PLACE_RANKS ? "ranks" : "mixed";
}

const char *ct__plan_coll_name(int coll) {
    return coll == CT_PLAN_P2P ? "p2p" : ct_coll_str((ct_coll)coll);
}

ct_plan_place ct_plan_group_place(int n, int stride, int D) {
    /* worker 0's group: workers k * stride, k < n; rank of worker w is w / D */
    int first = 0, last = (n - 1) * stride / D, distinct = 1;
    for (int k = 1; k < n; k++)
        if (k * stride / D == (k - 1) * stride / D) distinct = 0;
    if (first == last) return CT_PLACE_THREADS;
    return distinct ? CT_PLACE_RANKS : CT_PLACE_MIXED;
}

void ct_plan_costs_free(ct_plan_costs *c) {
    if (!c) return;
    free(c->comp);
    free(c->link);
    c->comp = NULL, c->link = NULL, c->ncomp = c->nlink = 0;
}

/* ------------------------------------------------------------------ fitting measurements */

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
double ct__plan_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void ct_plan_fit(const double *x, const double *t, int n, double *alpha, double *beta) {
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        double w = t[i] > 0 ? 1.0 / (t[i] * t[i]) : 1.0;
        sw += w, sx += w * x[i], sy += w * t[i], sxx += w * x[i] * x[i], sxy += w * x[i] * t[i];
    }
    double det = sw * sxx - sx * sx;
    double b = det > 0 ? (sw * sxy - sx * sy) / det : 0;
    double a = sw > 0 ? (sy - b * sx) / sw : 0;
    /* negative terms are noise: clamp, refitting the other alone */
    if (b < 0) {
        b = 0;
        a = sw > 0 ? sy / sw : 0;
    }
    if (a < 0) {
        a = 0;
        b = sxx > 0 ? sxy / sxx : 0;
    }
    *alpha = a, *beta = b;
}

ct_status ct_plan_links_load(ct_plan_costs *c, const char *path, ct_err *err) {
    FILE *f = fopen(path, "r");
    if (!f) return CT_ERR(err, CT_ERR_IO, "links table %s: cannot open it", path);
    char line[512];
    int ln = 0;
    ct_status st = CT_OK;
    while (fgets(line, sizeof line, f)) {
        ln++;
        char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        if (*s == '#' || *s == '\n' || !*s) continue;
        char coll[32], place[32];
        ct_plan_link k;
        memset(&k, 0, sizeof k);
        if (sscanf(s, "link %31s %d %31s %lf %lf %lf %lf", coll, &k.n, place, &k.alpha, &k.beta,
                   &k.lo, &k.hi) != 7) {
            st = CT_ERR(err, CT_ERR_ARG,
                        "links table %s line %d: expected \"link COLL N PLACE ALPHA_MS "
                        "BETA_MS_PER_BYTE LO HI\"",
                        path, ln);
            break;
        }
        ct_coll cc;
        if (!strcmp(coll, ct__plan_coll_name(CT_PLAN_P2P))) k.coll = CT_PLAN_P2P;
        else if (ct_coll_parse(coll, &cc) == CT_OK) k.coll = (int)cc;
        else {
            st = CT_ERR(err, CT_ERR_ARG, "links table %s line %d: unknown collective '%s'", path,
                        ln, coll);
            break;
        }
        int pl = CT_PLACE_THREADS;
        while (pl <= CT_PLACE_MIXED && strcmp(place, ct__plan_place_name((ct_plan_place)pl))) pl++;
        k.place = (ct_plan_place)pl;
        if (pl > CT_PLACE_MIXED) {
            st = CT_ERR(err, CT_ERR_ARG,
                        "links table %s line %d: placement '%s' is not threads, ranks or mixed",
                        path, ln, place);
            break;
        }
        if (k.n < 2 || k.alpha < 0 || k.beta < 0) {
            st = CT_ERR(err, CT_ERR_ARG, "links table %s line %d: n >= 2, alpha and beta >= 0",
                        path, ln);
            break;
        }
        int i = 0;
        for (; i < c->nlink; i++)
            if (c->link[i].coll == k.coll && c->link[i].n == k.n && c->link[i].place == k.place)
                break;
        if (i == c->nlink) {
            ct_plan_link *nl = ct_realloc(c->link, sizeof *nl * (size_t)(c->nlink + 1));
            if (!nl) {
                st = CT_ERR(err, CT_ERR_NOMEM, "no memory");
                break;
            }
            c->link = nl;
            c->nlink++;
        }
        c->link[i] = k;
    }
    fclose(f);
    if (st == CT_OK)
        snprintf(c->source, sizeof c->source, "links from %.200s", path);
    return st;
}

ct_status ct_plan_links_write(const ct_plan_costs *c, const char *path, ct_err *err) {
    FILE *f = fopen(path, "w");
    if (!f) return CT_ERR(err, CT_ERR_IO, "cannot write the links table %s", path);
    fprintf(f, "# cltrain links: t(bytes) = alpha + beta * bytes (ms), fitted over [lo, hi] bytes\n"
               "# link COLL N PLACE ALPHA_MS BETA_MS_PER_BYTE LO HI   (%s)\n",
            c->source);
    for (int i = 0; i < c->nlink; i++) {
        const ct_plan_link *k = &c->link[i];
        fprintf(f, "link %s %d %s %.6g %.6g %.0f %.0f\n", ct__plan_coll_name(k->coll), k->n,
                ct__plan_place_name(k->place), k->alpha, k->beta, k->lo, k->hi);
    }
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return CT_ERR(err, CT_ERR_IO, "writing the links table %s failed", path);
    return CT_OK;
}

ct_status ct_plan_links_default(ct_plan_costs *c, const ct_plan_needs *need, ct_err *err) {
    ct_plan_link *l = realloc(c->link, sizeof *l * (size_t)(c->nlink + need->nlink + 1));
    if (!l) return CT_ERR(err, CT_ERR_NOMEM, "no memory");
    c->link = l;
    for (int i = 0; i < need->nlink; i++) {
        ct_plan_link k = need->link[i];
        int threads = k.place == CT_PLACE_THREADS;
        double a = (threads ? CT_PLAN_DEFAULT_THREADS_US : CT_PLAN_DEFAULT_RANKS_US) / 1e3;
        double b = 1e-6 / (threads ? CT_PLAN_DEFAULT_THREADS_GBS : CT_PLAN_DEFAULT_RANKS_GBS);
        double n = k.n, steps = n - 1, share = (n - 1) / n; /* a ring: n - 1 steps of 1/n */
        if (k.coll == CT_PLAN_P2P) k.alpha = a, k.beta = b;
        else if (k.coll == CT_COLL_ALLREDUCE) k.alpha = 2 * steps * a, k.beta = 2 * share * b;
        else k.alpha = steps * a, k.beta = share * b; /* reduce-scatter, all-gather */
        c->link[c->nlink++] = k;
    }
    snprintf(c->source, sizeof c->source,
             "links from the default model, not measured: threads %.0f us + %.0f GB/s, "
             "processes %.0f us + %.0f GB/s, ring collectives",
             CT_PLAN_DEFAULT_THREADS_US, CT_PLAN_DEFAULT_THREADS_GBS, CT_PLAN_DEFAULT_RANKS_US,
             CT_PLAN_DEFAULT_RANKS_GBS);
    return CT_OK;
}
