/* names.c - ct_plot's table of distinct strings (event names, tracks, series), numbered in the
 * order they first appear; a hash table, so a file with a million distinct names costs time in
 * proportion to its size. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"

static uint64_t hash(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int grow(plot_names *t) {
    size_t nc = t->cap ? 2 * t->cap : 64;
    int *ns = nc < (size_t)1 << 40 ? calloc(nc, sizeof *ns) : NULL;
    char **nstr = ns ? realloc(t->str, nc / 2 * sizeof *nstr) : NULL;
    if (!nstr) {
        free(ns);
        return PLOT_NOMEM;
    }
    t->str = nstr;
    for (size_t i = 0; i < t->n; i++) {
        size_t h = (size_t)hash(t->str[i]) & (nc - 1);
        while (ns[h])
            h = (h + 1) & (nc - 1);
        ns[h] = (int)i + 1;
    }
    free(t->slot);
    t->slot = ns, t->cap = nc;
    return PLOT_OK;
}

int plot_names_get(plot_names *t, const char *str, int *index, plot_err *err) {
    *index = -1;
    if (2 * (t->n + 1) > t->cap && (t->n >= 0x3fffffff || grow(t) != PLOT_OK))
        return plot_fail(err, PLOT_NOMEM, "out of memory (%zu names)", t->n);
    size_t h = (size_t)hash(str) & (t->cap - 1);
    for (; t->slot[h]; h = (h + 1) & (t->cap - 1))
        if (!strcmp(t->str[t->slot[h] - 1], str)) {
            *index = t->slot[h] - 1;
            return PLOT_OK;
        }
    char *copy = malloc(strlen(str) + 1);
    if (!copy) return plot_fail(err, PLOT_NOMEM, "out of memory (%zu names)", t->n);
    strcpy(copy, str);
    t->str[t->n] = copy;
    t->slot[h] = (int)t->n + 1;
    *index = (int)t->n++;
    return PLOT_OK;
}

void plot_names_free(plot_names *t) {
    for (size_t i = 0; i < t->n; i++)
        free(t->str[i]);
    free(t->str);
    free(t->slot);
    memset(t, 0, sizeof *t);
}
