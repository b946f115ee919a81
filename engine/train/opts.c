/* opts.c - option tables generically (defaults, parsing, help, the logged configuration, the
 * "flag=value" form checkpoints keep) and the training parameters' table built on them. Host
 * code: no device, no global state. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_train.h"

/* ---------------------------------------------------------------- option tables */

const ct_opt ct_train_opts[] = {
#define CT__TP_OPT(type, field, flag, def, help) \
    {flag, CT_OPT_##type, offsetof(ct_train_params, field), def, help},
    CT_TRAIN_PARAMS(CT__TP_OPT)
#undef CT__TP_OPT
};
const int ct_train_opts_count = (int)(sizeof ct_train_opts / sizeof ct_train_opts[0]);

static ct_status opt_set(const ct_opt *o, void *dst, const char *val, ct_err *err) {
    char *p = (char *)dst + o->offset;
    if (o->type == CT_OPT_STR) {
        *(const char **)p = val;
        return CT_OK;
    }
    if (!val || !*val)
        return CT_ERR(err, CT_ERR_ARG, "--%s needs a value (see --help)", o->flag);
    char *end = NULL;
    errno = 0;
    if (o->type == CT_OPT_INT) {
        long v = strtol(val, &end, 10);
        if (*end || errno || v < INT_MIN || v > INT_MAX) {
            /* Accept integral floats written like 1e6 for convenience. */
            double d = strtod(val, &end);
            if (*end || !(d == floor(d)) || d < INT_MIN || d > INT_MAX)
                return CT_ERR(err, CT_ERR_ARG, "--%s: '%s' is not an integer", o->flag, val);
            v = (long)d;
        }
        *(int *)p = (int)v;
    } else {
        double v = strtod(val, &end);
        if (*end || end == val || !isfinite(v))
            return CT_ERR(err, CT_ERR_ARG, "--%s: '%s' is not a number", o->flag, val);
        *(double *)p = v;
    }
    return CT_OK;
}

void ct_opts_defaults(const ct_opt *opts, int n, void *dst) {
    for (int i = 0; i < n; i++) opt_set(&opts[i], dst, opts[i].def, NULL);
}

int ct_opts_wants_help(int nargs, char *const *args) {
    for (int i = 0; i < nargs; i++)
        if (!strcmp(args[i], "--help") || !strcmp(args[i], "-h")) return 1;
    return 0;
}

ct_status ct_opts_parse(const ct_opt *opts, int n, void *dst, unsigned char *given, int nargs,
                        char *const *args, ct_err *err) {
    for (int i = 0; i < nargs; i++) {
        const char *a = args[i];
        if (strncmp(a, "--", 2) != 0 || !a[2])
            return CT_ERR(err, CT_ERR_ARG, "unexpected argument '%s' (flags look like --name "
                                           "VALUE; see --help)", a);
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t nl = eq ? (size_t)(eq - name) : strlen(name);
        const ct_opt *o = NULL;
        for (int k = 0; k < n; k++)
            if (strlen(opts[k].flag) == nl && !strncmp(opts[k].flag, name, nl)) o = &opts[k];
        if (!o) return CT_ERR(err, CT_ERR_ARG, "unknown flag '%s' (see --help)", a);
        const char *val;
        if (eq) val = eq + 1;
        else if (i + 1 < nargs) val = args[++i];
        else return CT_ERR(err, CT_ERR_ARG, "--%s needs a value (see --help)", o->flag);
        ct_status st = opt_set(o, dst, val, err);
        if (st != CT_OK) return st;
        if (given) given[o - opts] = 1;
    }
    return CT_OK;
}

static int opt_value(char *buf, size_t len, const ct_opt *o, const void *src) {
    const char *p = (const char *)src + o->offset;
    switch (o->type) {
    case CT_OPT_INT: return snprintf(buf, len, "%d", *(const int *)p);
    case CT_OPT_FLOAT: return snprintf(buf, len, "%.9g", *(const double *)p);
    default: {
        const char *s = *(const char *const *)p;
        return snprintf(buf, len, "%s", s ? s : "");
    }
    }
}

void ct_opts_help(FILE *out, const ct_opt *opts, int n) {
    for (int i = 0; i < n; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s %s", opts[i].flag,
                 opts[i].type == CT_OPT_INT ? "N" : opts[i].type == CT_OPT_FLOAT ? "X" : "S");
        fprintf(out, "  %-22s %s (default: %s)\n", left, opts[i].help,
                opts[i].def[0] ? opts[i].def : "none");
    }
}

void ct_opts_log(FILE *out, const ct_opt *opts, int n, const void *src) {
    for (int i = 0; i < n; i++) {
        char v[1024];
        opt_value(v, sizeof v, &opts[i], src);
        fprintf(out, "  %-14s = %s\n", opts[i].flag, v[0] ? v : "(none)");
    }
}

size_t ct_opts_format(char *buf, size_t len, const ct_opt *opts, int n, const void *src) {
    size_t used = 0;
    if (len) buf[0] = 0;
    for (int i = 0; i < n; i++) {
        char v[1024];
        opt_value(v, sizeof v, &opts[i], src);
        int k = snprintf(used < len ? buf + used : NULL, used < len ? len - used : 0, "%s=%s\n",
                         opts[i].flag, v);
        if (k > 0) used += (size_t)k;
    }
    return used;
}

_Static_assert(sizeof ct_train_opts / sizeof ct_train_opts[0] <= CT_TRAIN_MAX_OPTS,
               "ct_train_params.given has no room for every flag: raise CT_TRAIN_MAX_OPTS");

ct_train_params ct_train_params_default(void) {
    ct_train_params p;
    memset(&p, 0, sizeof p);
    ct_opts_defaults(ct_train_opts, ct_train_opts_count, &p);
    return p;
}

ct_status ct_train_params_parse(ct_train_params *p, int nargs, char *const *args, ct_err *err) {
    return ct_opts_parse(ct_train_opts, ct_train_opts_count, p, p->given, nargs, args, err);
}

int ct_train_given(const ct_train_params *p, const char *flag) {
    for (int k = 0; k < ct_train_opts_count; k++)
        if (!strcmp(ct_train_opts[k].flag, flag)) return p->given[k];
    return 0;
}
