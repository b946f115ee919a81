/* tune.c - per-device CLBlast parameter sets: text form, storage, lookup, and application.
 *
 * A set names the device (and driver) it was found on and lists, per CLBlast kernel, every
 * parameter (CLBlast requires the full list of a kernel in an override). Stored sets live in
 * <tune_dir>/<device>__<driver>.txt; shipped sets are the files of the repository's tune/ folder, compiled in.
 * Lookup prefers the stored set of this exact device and driver, then the shipped set that
 * matches best (exact device name beats a platform+type pattern; a pattern names its device
 * type, so a CPU set never reaches a GPU). Sets are applied once per device at open: an override
 * costs milliseconds and makes CLBlast compile a new program. A stored "built-in" record (what
 * ct_tune writes when nothing beat CLBlast's own parameters) applies nothing and keeps any shipped
 * pattern from applying. */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clblast_c.h>

#include "ct_cl_impl.h"

extern const ct_cl_source ct__tune_shipped[];
extern const int ct__tune_shipped_count;

int ct_tune_shipped_count(void) { return ct__tune_shipped_count; }

const char *ct_tune_shipped_text(int i, const char **name) {
    if (i < 0 || i >= ct__tune_shipped_count) return NULL;
    if (name) *name = ct__tune_shipped[i].name;
    return ct__tune_shipped[i].text;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    return s;
}

ct_status ct_tune_set_put(ct_tune_set *s, const char *kernel, const char *name, size_t value) {
    ct_tune_kernel *k = NULL;
    for (int i = 0; i < s->nkernels; i++)
        if (!strcmp(s->kernels[i].kernel, kernel)) k = &s->kernels[i];
    if (!k) {
        if (s->nkernels == CT_TUNE_MAX_KERNELS || strlen(kernel) >= sizeof k->kernel)
            return CT_ERR_ARG;
        k = &s->kernels[s->nkernels++];
        memset(k, 0, sizeof *k);
        snprintf(k->kernel, sizeof k->kernel, "%s", kernel);
    }
    for (int i = 0; i < k->n; i++)
        if (!strcmp(k->names[i], name)) {
            k->values[i] = value;
            return CT_OK;
        }
    if (k->n == CT_TUNE_MAX_PARAMS || strlen(name) >= sizeof k->names[0]) return CT_ERR_ARG;
    snprintf(k->names[k->n], sizeof k->names[0], "%s", name);
    k->values[k->n++] = value;
    return CT_OK;
}

ct_status ct_tune_set_parse(const char *text, ct_tune_set *out, ct_err *err) {
    memset(out, 0, sizeof *out);
    snprintf(out->driver, sizeof out->driver, "*");
    snprintf(out->platform, sizeof out->platform, "*");
    snprintf(out->type, sizeof out->type, "*");
    int lineno = 0;
    const char *p = text;
    while (p && *p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[1024];
        lineno++;
        if (len >= sizeof line)
            return CT_ERR(err, CT_ERR_FORMAT, "tuning file line %d is too long", lineno);
        memcpy(line, p, len);
        line[len] = '\0';
        p = nl ? nl + 1 : NULL;
        char *l = trim(line);
        if (!*l || *l == '#') continue;
        char *colon = strchr(l, ':'), *eq = strchr(l, '=');
        if (eq && (!colon || eq < colon)) { /* key = value */
            *eq = '\0';
            char *k = trim(l), *v = trim(eq + 1);
            char *dst = NULL;
            size_t cap = 0;
            if (!strcmp(k, "device")) dst = out->device, cap = sizeof out->device;
            else if (!strcmp(k, "driver")) dst = out->driver, cap = sizeof out->driver;
            else if (!strcmp(k, "platform")) dst = out->platform, cap = sizeof out->platform;
            else if (!strcmp(k, "type")) dst = out->type, cap = sizeof out->type;
            else if (!strcmp(k, "note")) dst = out->note, cap = sizeof out->note;
            else if (!strcmp(k, "builtin")) {
                if (strcmp(v, "0") && strcmp(v, "1"))
                    return CT_ERR(err, CT_ERR_FORMAT, "tuning file line %d: builtin is 0 or 1",
                                  lineno);
                out->builtin = v[0] == '1';
                continue;
            } else
                return CT_ERR(err, CT_ERR_FORMAT, "tuning file line %d: unknown key '%s'", lineno, k);
            snprintf(dst, cap, "%s", v);
            continue;
        }
        if (!colon)
            return CT_ERR(err, CT_ERR_FORMAT,
                          "tuning file line %d: expected 'key = value' or 'Kernel: NAME=VALUE ...'",
                          lineno);
        *colon = '\0';
        char *kernel = trim(l);
        char *save = NULL;
        for (char *tok = strtok_r(colon + 1, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
            char *e = strchr(tok, '=');
            char *end = NULL;
            if (!e || e == tok)
                return CT_ERR(err, CT_ERR_FORMAT, "tuning file line %d: '%s' is not NAME=VALUE",
                              lineno, tok);
            *e = '\0';
            errno = 0;
            /* digits only: strtoull would take "-1" as 2^64 - 1 and saturate on overflow */
            unsigned long long v = isdigit((unsigned char)e[1]) ? strtoull(e + 1, &end, 10) : 0;
            if (!isdigit((unsigned char)e[1]) || *end || errno == ERANGE || v > SIZE_MAX)
                return CT_ERR(err, CT_ERR_FORMAT,
                              "tuning file line %d: value of %s is not a non-negative number",
                              lineno, tok);
            if (ct_tune_set_put(out, kernel, tok, (size_t)v) != CT_OK)
                return CT_ERR(err, CT_ERR_FORMAT, "tuning file line %d: too many kernels or parameters",
                              lineno);
        }
    }
    if (!out->device[0]) return CT_ERR(err, CT_ERR_FORMAT, "tuning file has no 'device =' line");
    if (out->builtin && out->nkernels)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "tuning file says 'builtin = 1' (CLBlast's own parameters) but lists kernels");
    if (!out->builtin && out->nkernels == 0)
        return CT_ERR(err, CT_ERR_FORMAT, "tuning file lists no kernel");
    return CT_OK;
}

ct_status ct_tune_set_format(const ct_tune_set *s, char *buf, size_t len) {
    size_t used = 0;
#define OUT(...)                                                            \
    do {                                                                    \
        int w = snprintf(buf + used, len - used, __VA_ARGS__);              \
        if (w < 0 || (size_t)w >= len - used) return CT_ERR_ARG;            \
        used += (size_t)w;                                                  \
    } while (0)
    OUT("# cltrain CLBlast parameters (single precision); see tune/README.md\n");
    OUT("device = %s\ndriver = %s\nplatform = %s\ntype = %s\n", s->device, s->driver, s->platform,
        s->type);
    if (s->note[0]) OUT("note = %s\n", s->note);
    if (s->builtin) OUT("builtin = 1\n");
    for (int i = 0; i < s->nkernels; i++) {
        OUT("%s:", s->kernels[i].kernel);
        for (int j = 0; j < s->kernels[i].n; j++)
            OUT(" %s=%zu", s->kernels[i].names[j], s->kernels[i].values[j]);
        OUT("\n");
    }
#undef OUT
    return CT_OK;
}

ct_status ct_tune_set_apply(ct_device *d, const ct_tune_set *s) {
    if (s->builtin) return CT_OK; /* CLBlast's own database applies */
    ct__clblast_lock();
    ct_status st = CT_OK;
    for (int i = 0; i < s->nkernels && st == CT_OK; i++) {
        const ct_tune_kernel *k = &s->kernels[i];
        const char *names[CT_TUNE_MAX_PARAMS];
        for (int j = 0; j < k->n; j++) names[j] = k->names[j];
        CLBlastStatusCode rc = CLBlastOverrideParameters(d->info.device_id, k->kernel,
                                                         CLBlastPrecisionSingle, (size_t)k->n,
                                                         names, k->values);
        if (rc != CLBlastSuccess)
            st = CT_ERR(&d->err, CT_ERR_CLBLAST,
                        "applying CLBlast parameters for kernel %s on device %d (%s) failed: %s "
                        "(%d). Hint: every parameter of the kernel must be listed",
                        k->kernel, d->info.index, d->info.name, ct_clblast_error_name(rc), (int)rc);
    }
    ct__clblast_unlock();
    return st;
}

static void sanitize(const char *in, char *out, size_t len) {
    size_t j = 0;
    for (size_t i = 0; in[i] && j + 1 < len; i++) {
        unsigned char c = (unsigned char)in[i];
        out[j++] = (isalnum(c) || c == '.' || c == '-') ? (char)c : '_';
    }
    out[j] = '\0';
}

ct_status ct_tune_store_path(const char *tune_dir, const ct_device_info *info, char *path,
                             size_t len) {
    char dn[200], dv[100];
    sanitize(info->name, dn, sizeof dn);
    sanitize(info->driver_version, dv, sizeof dv);
    int w = snprintf(path, len, "%s/%s__%s.txt", tune_dir, dn, dv);
    return (w < 0 || (size_t)w >= len) ? CT_ERR_ARG : CT_OK;
}

ct_status ct_tune_store(const char *tune_dir, const ct_device_info *info, const ct_tune_set *s,
                        ct_err *err) {
    char path[1400], text[8192];
    if (!tune_dir || !*tune_dir) return CT_ERR(err, CT_ERR_ARG, "no tuning directory known");
    if (ct_file_mkdirs(tune_dir, NULL) != CT_OK)
        return CT_ERR(err, CT_ERR_IO, "cannot create tuning directory '%s'", tune_dir);
    if (ct_tune_store_path(tune_dir, info, path, sizeof path) != CT_OK ||
        ct_tune_set_format(s, text, sizeof text) != CT_OK)
        return CT_ERR(err, CT_ERR_ARG, "tuning set or path too long");
    return ct_file_write_atomic(path, text, strlen(text), err);
}

ct_status ct_tune_record_path(const char *tune_dir, const ct_device_info *info, const char *kind,
                              char *path, size_t len) {
    char dn[200], dv[100];
    if (!tune_dir || !*tune_dir || !kind || !*kind) return CT_ERR_ARG;
    for (const char *k = kind; *k; k++)
        if (!isalnum((unsigned char)*k) && *k != '_') return CT_ERR_ARG;
    sanitize(info->name, dn, sizeof dn);
    sanitize(info->driver_version, dv, sizeof dv);
    int w = snprintf(path, len, "%s/%s__%s.%s.txt", tune_dir, dn, dv, kind);
    return (w < 0 || (size_t)w >= len) ? CT_ERR_ARG : CT_OK;
}

ct_status ct_tune_record_load(const char *tune_dir, const ct_device_info *info, const char *kind,
                              ct_tune_set *out, ct_err *err) {
    char path[1400];
    unsigned char *text = NULL;
    size_t n = 0;
    ct_err ignore = {0};
    if (ct_tune_record_path(tune_dir, info, kind, path, sizeof path) != CT_OK ||
        ct_file_read_all(path, &text, &n, &ignore) != CT_OK)
        return CT_ERR_NOT_FOUND;
    ct_status st = ct_tune_set_parse((const char *)text, out, err);
    free(text);
    if (st != CT_OK) {
        char msg[CT_ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
        return CT_ERR(err, st, "tuning record '%s': %s (delete it to measure again)", path, msg);
    }
    return CT_OK;
}

ct_status ct_tune_record_store(const char *tune_dir, const ct_device_info *info, const char *kind,
                               const ct_tune_set *s, ct_err *err) {
    char path[1400], text[8192];
    if (!tune_dir || !*tune_dir) return CT_ERR(err, CT_ERR_ARG, "no tuning directory known");
    if (ct_file_mkdirs(tune_dir, NULL) != CT_OK)
        return CT_ERR(err, CT_ERR_IO, "cannot create tuning directory '%s'", tune_dir);
    char body[8192];
    if (ct_tune_record_path(tune_dir, info, kind, path, sizeof path) != CT_OK ||
        ct_tune_set_format(s, body, sizeof body) != CT_OK)
        return CT_ERR(err, CT_ERR_ARG, "tuning record or path too long (kind '%s')", kind);
    const char *rest = strchr(body, '\n'); /* the set's own first line says "CLBlast" */
    int w = snprintf(text, sizeof text,
                     "# cltrain tuning record '%s' (never given to CLBlast); see tune/README.md\n%s",
                     kind, rest ? rest + 1 : body);
    if (w < 0 || (size_t)w >= sizeof text)
        return CT_ERR(err, CT_ERR_ARG, "tuning record too long (kind '%s')", kind);
    return ct_file_write_atomic(path, text, strlen(text), err);
}

ct_tune_choice ct_tune_choose(double builtin_gflops, double best_gflops, double min_gain) {
    int best_ok = best_gflops > 0, base_ok = builtin_gflops > 0; /* NaN compares false */
    if (!best_ok) return base_ok ? CT_TUNE_KEEP_BUILTIN : CT_TUNE_KEEP_NOTHING;
    if (!base_ok) return CT_TUNE_KEEP_CANDIDATE;
    if (!(min_gain > 0)) min_gain = CT_TUNE_MIN_GAIN;
    return best_gflops >= builtin_gflops * min_gain ? CT_TUNE_KEEP_CANDIDATE : CT_TUNE_KEEP_BUILTIN;
}

void ct_tune_set_builtin(ct_tune_set *s, const ct_device_info *info, const char *note) {
    memset(s, 0, sizeof *s);
    snprintf(s->device, sizeof s->device, "%s", info->name);
    snprintf(s->driver, sizeof s->driver, "%s", info->driver_version);
    snprintf(s->platform, sizeof s->platform, "%s", info->platform);
    snprintf(s->type, sizeof s->type, "%s", ct_device_type_str(info->type));
    snprintf(s->note, sizeof s->note, "%s", note ? note : "");
    s->builtin = 1;
}

int ct_tune_set_match(const ct_tune_set *s, const ct_device_info *info) {
    int score = 0;
    int exact = !strcmp(s->device, info->name);
    if (!exact && strcmp(s->device, "*")) return -1;
    /* A pattern must say which kind of device it is for: parameters found on a CPU (wide vectors,
     * no local memory) are slow or invalid on a GPU, and the reverse. */
    if (!exact && !strcmp(s->type, "*")) return -1;
    if (strcmp(s->type, "*") && strcmp(s->type, ct_device_type_str(info->type))) return -1;
    if (strcmp(s->platform, "*") && !strstr(info->platform, s->platform)) return -1;
    if (exact) score += 4;
    if (!strcmp(s->driver, info->driver_version)) score += 2;
    else if (strcmp(s->driver, "*")) return -1;
    return score;
}

ct_status ct_tune_lookup(const char *tune_dir, const ct_device_info *info, ct_tune_set *out,
                         char *source, size_t source_len, ct_err *err) {
    if (tune_dir && *tune_dir) {
        char path[1400];
        unsigned char *text = NULL;
        size_t n = 0;
        ct_err rerr = {0};
        ct_status rst = ct_tune_store_path(tune_dir, info, path, sizeof path) == CT_OK
                            ? ct_file_read_all(path, &text, &n, &rerr)
                            : CT_ERR_NOT_FOUND;
        /* no stored file is normal; a stored file we cannot read for lack of memory must not
           quietly become the shipped parameters */
        if (rst == CT_ERR_NOMEM) return CT_ERR(err, rst, "stored tuning file: %s", rerr.msg);
        if (rst == CT_OK) {
            ct_status st = ct_tune_set_parse((const char *)text, out, err);
            free(text);
            if (st != CT_OK) {
                char msg[CT_ERR_MSG_MAX];
                snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
                return CT_ERR(err, st, "stored tuning file '%s': %s (delete it or re-run ct_tune)",
                              path, msg);
            }
            if (source && out->builtin)
                snprintf(source, source_len, "CLBlast built-in parameters (%s), stored %s",
                         out->note[0] ? out->note : "ct_tune found nothing better", path);
            else if (source)
                snprintf(source, source_len, "stored %s", path);
            return CT_OK;
        }
    }
    int best = -1;
    for (int i = 0; i < ct__tune_shipped_count; i++) {
        ct_tune_set s;
        ct_err perr = {0};
        if (ct_tune_set_parse(ct__tune_shipped[i].text, &s, &perr) != CT_OK)
            return CT_ERR(err, CT_ERR_FORMAT, "shipped tuning set tune/%s.txt: %s",
                          ct__tune_shipped[i].name, perr.msg);
        int sc = ct_tune_set_match(&s, info);
        if (sc > best) {
            best = sc;
            *out = s;
            if (source && s.builtin)
                snprintf(source, source_len, "CLBlast built-in parameters (%s), shipped tune/%s.txt",
                         s.note[0] ? s.note : "nothing better known", ct__tune_shipped[i].name);
            else if (source)
                snprintf(source, source_len, "shipped tune/%s.txt", ct__tune_shipped[i].name);
        }
    }
    if (best < 0)
        return CT_ERR(err, CT_ERR_NOT_FOUND,
                      "no stored or shipped CLBlast parameters for device '%s' (driver %s)",
                      info->name, info->driver_version);
    return CT_OK;
}

ct_status ct__tune_apply_at_open(ct_device *d, const char *tune_dir) {
    ct_tune_set s;
    char source[480];
    ct_status st = ct_tune_lookup(tune_dir, &d->info, &s, source, sizeof source, &d->err);
    if (st == CT_ERR_NOT_FOUND) {
        /* Not an error: CLBlast's own database applies. Say so (the programs log this). */
        snprintf(d->tuning_source, sizeof d->tuning_source, "none (CLBlast's built-in parameters)");
        ct_err_clear(&d->err);
        return CT_OK;
    }
    if (st != CT_OK) return st;
    st = ct_tune_set_apply(d, &s);
    if (st != CT_OK) return st;
    snprintf(d->tuning_source, sizeof d->tuning_source, "%s", source);
    return CT_OK;
}
