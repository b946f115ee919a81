/* train_util.c - the training loop's host-side plumbing: option tables (defaults, parsing, help,
 * the logged configuration), learning-rate schedules, FLOPs accounting, the JSON Lines metrics
 * writer, the RNG and sampling. Nothing here touches a device or global state. */
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

/* ---------------------------------------------------------------- learning rate */

ct_status ct_lr_schedule_parse(const char *name, ct_lr_schedule *out, ct_err *err) {
    if (name && !strcmp(name, "cosine")) *out = CT_LR_COSINE;
    else if (name && !strcmp(name, "constant")) *out = CT_LR_CONSTANT;
    else if (name && !strcmp(name, "linear")) *out = CT_LR_LINEAR;
    else
        return CT_ERR(err, CT_ERR_ARG,
                      "--lr-schedule: '%s' is not one of cosine, constant, linear",
                      name ? name : "");
    return CT_OK;
}

double ct_lr_at(ct_lr_schedule s, double lr, int warmup, int steps, double min_frac, int64_t step) {
    if (step < warmup) return lr * (double)(step + 1) / (double)warmup;
    if (s == CT_LR_CONSTANT) return lr;
    double span = (double)(steps - warmup);
    double r = span > 0 ? (double)(step - warmup) / span : 1.0;
    if (r < 0) r = 0;
    if (r > 1) r = 1;
    double lo = lr * min_frac;
    double c = s == CT_LR_COSINE ? 0.5 * (1.0 + cos(3.14159265358979323846 * r)) : 1.0 - r;
    return lo + c * (lr - lo);
}

/* ---------------------------------------------------------------- FLOPs */

size_t ct_gpt_param_count(const ct_gpt_config *c) {
    size_t sizes[CT_GPT_NUM_TENSORS];
    return ct_gpt_param_sizes(c, sizes);
}

size_t ct_gpt_active_param_count(const ct_gpt_config *c) {
    size_t sizes[CT_GPT_NUM_TENSORS], n = 0;
    ct_gpt_param_sizes(c, sizes);
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        ct_gpt_tensor_info t = ct_gpt_tensor(c, i);
        /* a token passes through K of the E experts of each block */
        n += t.expert ? sizes[i] / (size_t)t.experts * (size_t)c->top_k : sizes[i];
    }
    return n;
}

double ct_train_flops_per_token(const ct_gpt_config *c, int T) {
    return 6.0 * (double)ct_gpt_active_param_count(c) + 12.0 * c->layers * (double)c->channels * T;
}

/* ---------------------------------------------------------------- pipeline split */

void ct_pp_costs(const ct_gpt_config *c, int T, double *block, double *embed, double *head) {
    double C = c->channels;
    /* 6 x a block's active parameters (attention 4C^2, the MLP 8C^2, or the router EC and K
     * experts' 8C^2 each), + 12CT */
    double mlp = c->experts > 0 ? (double)c->experts * C + 8.0 * c->top_k * C * C : 8.0 * C * C;
    if (block) *block = 6.0 * (4.0 * C * C + mlp) + 12.0 * C * T;
    if (embed) *embed = 3.0 * C;
    if (head) *head = 6.0 * C * c->padded_vocab;
}

ct_status ct_pp_split_balanced(const ct_gpt_config *c, int T, int K, int *layers, ct_err *err) {
    int L = c->layers;
    if (K < 1 || K > L)
        return CT_ERR(err, CT_ERR_ARG,
                      "a pipeline of %d chunks over %d blocks: every chunk needs at least one "
                      "block", K, L);
    double blk, emb, head;
    ct_pp_costs(c, T, &blk, &emb, &head);
    /* best[k][l]: the least largest chunk work splitting blocks [0, l) into chunks 0..k-1;
     * cut[k][l]: where chunk k-1 starts in it */
    double *best = ct_malloc(sizeof(double) * (size_t)(K + 1) * (size_t)(L + 1));
    int *cut = ct_malloc(sizeof(int) * (size_t)(K + 1) * (size_t)(L + 1));
    if (!best || !cut) {
        free(best), free(cut);
        return CT_ERR(err, CT_ERR_NOMEM, "pipeline split: out of memory");
    }
#define BEST(k, l) best[(size_t)(k) * (L + 1) + (l)]
#define CUT(k, l) cut[(size_t)(k) * (L + 1) + (l)]
    for (int k = 0; k <= K; k++)
        for (int l = 0; l <= L; l++) BEST(k, l) = INFINITY, CUT(k, l) = -1;
    BEST(0, 0) = 0;
    for (int k = 1; k <= K; k++)
        for (int l = k; l <= L; l++)
            /* chunk k-1 = blocks [j, l); later starts first, so on a tie the chunk is shorter */
            for (int j = l - 1; j >= k - 1; j--) {
                double w = (l - j) * blk + (k == 1 ? emb : 0) + (k == K && l == L ? head : 0);
                double m = BEST(k - 1, j) > w ? BEST(k - 1, j) : w;
                if (m < BEST(k, l) * (1 - 1e-12)) BEST(k, l) = m, CUT(k, l) = j;
            }
    for (int k = K, l = L; k >= 1; k--) {
        int j = CUT(k, l);
        layers[k - 1] = l - j;
        l = j;
    }
#undef BEST
#undef CUT
    free(best), free(cut);
    return CT_OK;
}

ct_status ct_pp_split_parse(const char *text, const ct_gpt_config *c, int K, int *layers,
                            ct_err *err) {
    const char *p = text;
    int n = 0, sum = 0;
    while (p && *p) {
        char *end = NULL;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 1 << 20)
            return CT_ERR(err, CT_ERR_ARG,
                          "--pp-split '%s': entry %d is not a whole number >= 1", text, n + 1);
        if (n < K) layers[n] = (int)v;
        n++, sum += (int)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) return CT_ERR(err, CT_ERR_ARG, "--pp-split '%s': expected a comma after entry %d",
                                   text, n);
    }
    if (n != K)
        return CT_ERR(err, CT_ERR_ARG,
                      "--pp-split '%s' has %d entries; the pipeline has %d model chunks (--pp x "
                      "--virtual-stages), one entry each", text, n, K);
    if (sum != c->layers)
        return CT_ERR(err, CT_ERR_ARG, "--pp-split '%s' sums to %d blocks; the model has %d", text,
                      sum, c->layers);
    return CT_OK;
}

/* ---------------------------------------------------------------- metrics */

struct ct_metrics {
    FILE *f;
    char path[1024];
};

ct_status ct_metrics_open(ct_metrics **out, const char *path, int append, ct_err *err) {
    *out = NULL;
    ct_metrics *m = (ct_metrics *)ct_calloc(1, sizeof *m);
    if (!m) return CT_ERR(err, CT_ERR_NOMEM, "no memory");
    if (path && *path) {
        snprintf(m->path, sizeof m->path, "%s", path);
        m->f = fopen(path, append ? "a" : "w");
        if (!m->f) {
            int e = errno;
            free(m);
            return CT_ERR(err, CT_ERR_IO, "cannot open metrics file %s: %s", path, strerror(e));
        }
    }
    *out = m;
    return CT_OK;
}

void ct_metrics_close(ct_metrics *m) {
    if (!m) return;
    if (m->f) fclose(m->f);
    free(m);
}

/* JSON has no NaN/Inf: write null for them. */
static void jnum(char *buf, size_t len, double v) {
    if (isfinite(v)) snprintf(buf, len, "%.9g", v);
    else snprintf(buf, len, "null");
}

static ct_status metrics_line(ct_metrics *m, const char *line) {
    if (!m || !m->f) return CT_OK;
    if (fputs(line, m->f) < 0 || fflush(m->f) != 0) return CT_ERR_IO;
    return CT_OK;
}

ct_status ct_metrics_train(ct_metrics *m, const ct_step_metrics *s) {
    if (!m || !m->f) return CT_OK;
    char loss[40], lr[40], gn[40], ms[40], tps[40], tf[40], mfu[40], line[512];
    jnum(loss, sizeof loss, s->loss);
    jnum(lr, sizeof lr, s->lr);
    jnum(gn, sizeof gn, s->grad_norm);
    jnum(ms, sizeof ms, s->ms);
    jnum(tps, sizeof tps, s->tokens_per_s);
    jnum(tf, sizeof tf, s->tflops);
    jnum(mfu, sizeof mfu, s->mfu);
    int k = snprintf(line, sizeof line,
                     "{\"type\":\"train\",\"step\":%lld,\"loss\":%s,\"lr\":%s,\"grad_norm\":%s,"
                     "\"ms\":%s,\"tokens_per_s\":%s,\"tflops\":%s,\"mfu\":%s,\"mem_bytes\":%llu",
                     (long long)s->step, loss, lr, gn, ms, tps, tf, mfu,
                     (unsigned long long)s->mem_bytes);
    if (s->moe && k > 0 && (size_t)k < sizeof line) { /* a mixture of experts */
        char aux[40], drop[40], load[40];
        jnum(aux, sizeof aux, s->aux_loss);
        jnum(drop, sizeof drop, s->drop_frac);
        jnum(load, sizeof load, s->max_load);
        k += snprintf(line + k, sizeof line - (size_t)k,
                      ",\"aux_loss\":%s,\"drop_frac\":%s,\"max_load\":%s", aux, drop, load);
    }
    if (k > 0 && (size_t)k < sizeof line - 20)
        snprintf(line + k, sizeof line - (size_t)k, "%s}\n", s->skipped ? ",\"skipped\":true" : "");
    return metrics_line(m, line);
}

ct_status ct_metrics_record(ct_metrics *m, const char *type, const char *fields) {
    if (!m || !m->f) return CT_OK;
    char t[128];
    ct_json_escape(t, sizeof t, type);
    size_t n = strlen(t) + (fields ? strlen(fields) : 0) + 32;
    char *line = (char *)ct_malloc(n);
    if (!line) return CT_ERR_NOMEM;
    snprintf(line, n, "{\"type\":%s%s%s}\n", t, fields && *fields ? "," : "", fields ? fields : "");
    ct_status st = metrics_line(m, line);
    free(line);
    return st;
}

void ct_json_escape(char *buf, size_t len, const char *s) {
    size_t o = 0;
    if (!len) return;
#define PUT(ch)                            \
    do {                                   \
        if (o + 1 < len) buf[o++] = (ch);  \
    } while (0)
    PUT('"');
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (o + 8 >= len) break;
        if (*p == '"' || *p == '\\') {
            PUT('\\');
            PUT((char)*p);
        } else if (*p < 0x20 || *p == 0x7f) {
            o += (size_t)snprintf(buf + o, len - o, "\\u%04x", *p);
        } else {
            PUT((char)*p);
        }
    }
    PUT('"');
#undef PUT
    buf[o < len ? o : len - 1] = 0;
}

/* ---------------------------------------------------------------- RNG and sampling */

uint64_t ct_mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t ct_splitmix64_next(uint64_t *state) {
    uint64_t r = ct_mix64(*state);
    *state += 0x9E3779B97F4A7C15ull;
    return r;
}

void ct_rng_seed(ct_rng *r, uint64_t seed) {
    uint64_t s = seed;
    for (int i = 0; i < 4; i++) r->s[i] = ct_splitmix64_next(&s);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t ct_rng_u64(ct_rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double ct_rng_uniform(ct_rng *r) { return (double)(ct_rng_u64(r) >> 11) * 0x1.0p-53; }

int ct_sample_token(const float *logits, int V, double temperature, int top_k, ct_rng *rng) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0 || V == 1) return best;
    int k = (top_k <= 0 || top_k >= V) ? V : top_k;
    /* The k largest logits, by insertion into a sorted list (k is small, or k == V). */
    int *idx = (int *)ct_malloc((size_t)k * sizeof *idx);
    if (!idx) return best;
    int have = 0;
    if (k == V) {
        for (int i = 0; i < V; i++) idx[i] = i;
        have = V;
    } else {
        for (int i = 0; i < V; i++) {
            if (have == k && !(logits[i] > logits[idx[k - 1]])) continue;
            int j = have < k ? have++ : k - 1;
            while (j > 0 && logits[idx[j - 1]] < logits[i]) {
                idx[j] = idx[j - 1];
                j--;
            }
            idx[j] = i;
        }
    }
    double mx = logits[best], sum = 0;
    for (int j = 0; j < have; j++) sum += exp(((double)logits[idx[j]] - mx) / temperature);
    double u = ct_rng_uniform(rng) * sum, acc = 0;
    int pick = idx[have - 1];
    for (int j = 0; j < have; j++) {
        acc += exp(((double)logits[idx[j]] - mx) / temperature);
        if (u < acc) {
            pick = idx[j];
            break;
        }
    }
    free(idx);
    return pick;
}
