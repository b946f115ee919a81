/* metrics.c - the JSON Lines metrics writer: one object per line, flushed, numbers that are
 * not finite written null. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_train.h"

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
    static const char *const group[6] = {"dp", "tp", "ep", "edp", "emb", "pp"};
    for (int g = 0; g < 6; g++)
        if (s->comm && s->comm_bytes[g] >= 0 && k > 0 && (size_t)k < sizeof line)
            k += snprintf(line + k, sizeof line - (size_t)k, ",\"comm_%s_bytes\":%lld", group[g],
                          (long long)s->comm_bytes[g]);
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
