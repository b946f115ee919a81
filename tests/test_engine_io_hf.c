/* test_engine_io_hf.c - model files in bf16 and Hugging Face GPT-2 directories, host only.
 *
 * References independent of the library: bf16 rounding computed with frexp/nearbyint (not on the
 * bits, as cl/bf16.c does), f16 decoded with ldexp, and a safetensors writer and a Hugging Face
 * GPT-2 layout written here (the Conv1D transposes by this file's own loops). Checked:
 * - llm.c files: fp32 -> bf16 file (version 5, 2 bytes a parameter) -> read equals the
 *   bf16-rounded values exactly (ties, overflow to inf, subnormals, NaN, -0 among them);
 * - cltrain safetensors: BF16 written and read the same way; F16 tensors read exactly;
 * - Hugging Face: the engine's directory is byte for byte the one built here (F32 and BF16), and
 *   reads back as the model (wte's padding rows zero); the directories built here read as the
 *   model with and without the "transformer." prefix, with lm_head tied and the attention's mask
 *   buffers, sharded through an index, in F16; refusals name the field or tensor: every
 *   unsupported config.json field, a shape config.json does not give, missing, repeated and
 *   unexpected tensors, an untied lm_head, bad indexes (no weight_map, a path, a misplaced or
 *   unlisted tensor, a tensor its shard lacks). */
#include <fenv.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ct_engine_io.h"
#include "ct_test.h"

static char dir[256];

static void path_of(char *buf, size_t len, const char *name) {
    snprintf(buf, len, "%s/%s", dir, name);
}

/* ------------------------------------------------------------------ reference numerics */

/* fp32 -> bf16 -> fp32 by arithmetic: 8 significant bits, nearest even (nearbyint in the default
 * mode), subnormals on bf16's grid of 2^-133, past the largest finite bf16 to infinity. */
static float ref_bf16(float x) {
    if (isnan(x) || isinf(x) || x == 0) return x;
    double r;
    if (fabs(x) < ldexp(1, -126)) {
        r = ldexp(nearbyint(ldexp(x, 133)), -133);
    } else {
        int e;
        double m = frexp(x, &e); /* x = m 2^e, 0.5 <= |m| < 1 */
        r = ldexp(nearbyint(ldexp(m, 8)), e - 8);
    }
    double maxf = ldexp(255, 120); /* (2 - 2^-7) 2^127 */
    if (fabs(r) > maxf) return x > 0 ? INFINITY : -INFINITY;
    return (float)r;
}

static float ref_f16(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (float)(s ? -v : v);
}

/* An f16-exact value's bits (normal or subnormal, finite). */
static uint16_t enc_f16(float x) {
    uint16_t s = signbit(x) ? 0x8000 : 0;
    double a = fabs(x);
    if (a == 0) return s;
    if (a < ldexp(1, -14)) return (uint16_t)(s | (uint16_t)ldexp(a, 24));
    int e;
    double m = frexp(a, &e); /* a = m 2^e: exponent field e + 14, mantissa (2m - 1) 2^10 */
    return (uint16_t)(s | (uint16_t)((e + 14) << 10) | (uint16_t)((2 * m - 1) * 1024));
}

static uint16_t bits16(float x) { /* a bf16-exact float's upper half */
    uint32_t u;
    memcpy(&u, &x, 4);
    return (uint16_t)(u >> 16);
}

static int same_bits(float a, float b) {
    return memcmp(&a, &b, 4) == 0 || (isnan(a) && isnan(b) && signbit(a) == signbit(b));
}

static void fill(float *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (float)((int)(seed >> 8) % 20001 - 10000) * 1.2345e-4f;
    }
}

/* Values that exercise the rounding at the front of p. */
static void specials(float *p) {
    float s[] = {1.0f + 0x1p-8f,               /* a tie: stays 1 (even) */
                 1.0f + 0x3p-8f,               /* a tie: up to 1 + 2^-6 */
                 -(1.0f + 0x1p-8f + 0x1p-20f), /* above the tie: away */
                 3.4e38f,                      /* past bf16's largest: inf */
                 -3.38e38f,                    /* just below it: stays finite */
                 1e-40f,                       /* an fp32 subnormal */
                 -0.0f,
                 INFINITY,
                 -INFINITY,
                 NAN,
                 -NAN,
                 0x1p-133f * 1.5f};
    memcpy(p, s, sizeof s);
}

/* ------------------------------------------------------------------ llm.c and cltrain files */

static const ct_gpt_config base = {
    .max_seq = 16, .vocab = 50, .padded_vocab = 128, .layers = 2, .heads = 2, .channels = 8};

static void test_llmc_bf16(void) {
    ct_err err = {0};
    size_t sizes[CT_GPT_NUM_TENSORS], n = ct_gpt_param_sizes(&base, sizes);
    float *p = malloc(n * 4), *q = NULL;
    fill(p, n, 3);
    specials(p);
    char path[300];
    path_of(path, sizeof path, "m5.bin");
    CT_ASSERT_OK(ct_model_file_write_as(path, &base, p, CT_FILE_BF16, &err), err.msg);
    unsigned char *raw = NULL;
    size_t nraw = 0;
    CT_ASSERT_OK(ct_file_read_all(path, &raw, &nraw, &err), err.msg);
    CT_ASSERT_EQ_INT(nraw, 1024 + 2 * n);
    if (raw && nraw == 1024 + 2 * n) {
        int32_t h[8], want[8] = {20240326, 5, 16, 50, 2, 2, 8, 128};
        memcpy(h, raw, sizeof h);
        CT_ASSERT(memcmp(h, want, sizeof want) == 0);
        int bad = 0;
        for (size_t i = 0; i < n; i++) {
            uint16_t b;
            memcpy(&b, raw + 1024 + 2 * i, 2);
            float r = ref_bf16(p[i]);
            if (isnan(r)
                    ? (b & 0x7f80) != 0x7f80 || !(b & 0x7f) || (b >> 15) != (signbit(r) ? 1 : 0)
                    : b != bits16(r))
                bad++;
        }
        CT_ASSERT_MSG(bad == 0, "%d of %zu bf16 values in the file are not the nearest-even ones",
                      bad, n);
    }
    free(raw);
    ct_gpt_config r;
    size_t nq = 0;
    CT_ASSERT_OK(ct_model_file_read(path, &r, &q, &nq, &err), err.msg);
    CT_ASSERT(memcmp(&r, &base, sizeof r) == 0);
    CT_ASSERT_EQ_INT(nq, n);
    int bad = 0;
    for (size_t i = 0; q && i < n; i++)
        bad += !same_bits(q[i], ref_bf16(p[i]));
    CT_ASSERT_MSG(bad == 0, "%d of %zu values read from the version-5 file differ from bf16(x)",
                  bad, n);
    CT_ASSERT(q && q[0] == 1.0f && q[1] == 1.0f + 0x1p-6f && isinf(q[3]) && q[4] == -0x1.fcp127f);
    /* the read values are bf16 already: written again they are the same file */
    char again[300];
    path_of(again, sizeof again, "m5b.bin");
    CT_ASSERT_OK(ct_model_file_write_as(again, &base, q, CT_FILE_BF16, &err), err.msg);
    unsigned char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    CT_ASSERT_OK(ct_file_read_all(path, &a, &na, &err), err.msg);
    CT_ASSERT_OK(ct_file_read_all(again, &b, &nb, &err), err.msg);
    CT_ASSERT(a && b && na == nb && !memcmp(a, b, na));
    /* a version-5 file one byte short is refused */
    FILE *f = fopen(again, "wb");
    fwrite(a, 1, na - 1, f);
    fclose(f);
    float *x = NULL;
    CT_ASSERT_EQ_INT(ct_model_file_read(again, &r, &x, &nq, &err), CT_ERR_FORMAT);
    CT_ASSERT_STR_CONTAINS(err.msg, "truncated");
    free(a);
    free(b);
    free(p);
    free(q);
}

static void test_safetensors_bf16_f16(void) {
    ct_err err = {0};
    size_t sizes[CT_GPT_NUM_TENSORS], n = ct_gpt_param_sizes(&base, sizes);
    float *p = malloc(n * 4), *q = NULL;
    fill(p, n, 5);
    specials(p);
    char path[300];
    path_of(path, sizeof path, "m.safetensors");
    CT_ASSERT_OK(ct_model_file_write_as(path, &base, p, CT_FILE_BF16, &err), err.msg);
    unsigned char *raw = NULL;
    size_t nraw = 0;
    CT_ASSERT_OK(ct_file_read_all(path, &raw, &nraw, &err), err.msg);
    uint64_t hl = 0;
    for (int k = 0; raw && k < 8; k++)
        hl |= (uint64_t)raw[k] << (8 * k);
    CT_ASSERT_EQ_INT(nraw, 8 + hl + 2 * n);
    CT_ASSERT(raw && strstr((char *)raw + 8, "\"dtype\":\"BF16\"") &&
              !strstr((char *)raw + 8, "F32"));
    ct_gpt_config r;
    size_t nq = 0;
    CT_ASSERT_OK(ct_model_file_read(path, &r, &q, &nq, &err), err.msg);
    CT_ASSERT(memcmp(&r, &base, sizeof r) == 0 && nq == n);
    int bad = 0;
    for (size_t i = 0; q && i < n; i++)
        bad += !same_bits(q[i], ref_bf16(p[i]));
    CT_ASSERT_MSG(bad == 0, "%d of %zu values of the BF16 safetensors file differ from bf16(x)",
                  bad, n);
    free(q);
    q = NULL;
    /* F16: the BF16 file's header with dtype F16 and f16 patterns as the data, every 16-bit
     * pattern's value against ldexp */
    if (raw && nraw == 8 + hl + 2 * n) {
        for (char *s = strstr((char *)raw + 8, "\"BF16\""); s && s < (char *)raw + 8 + hl;
             s = strstr(s, "\"BF16\""))
            memcpy(s, "\"F16\" ", 6);
        uint16_t *h = (uint16_t *)(raw + 8 + hl);
        for (size_t i = 0; i < n; i++)
            h[i] = (uint16_t)(i * 40503u + 7);
        char p16[300];
        path_of(p16, sizeof p16, "m16.safetensors");
        CT_ASSERT_OK(ct_file_write_atomic(p16, raw, nraw, &err), err.msg);
        CT_ASSERT_OK(ct_model_file_read(p16, &r, &q, &nq, &err), err.msg);
        bad = 0;
        for (size_t i = 0; q && i < n; i++)
            bad += !same_bits(q[i], ref_f16(h[i]));
        CT_ASSERT_MSG(bad == 0, "%d of %zu F16 values read wrong", bad, n);
        free(q);
    }
    free(raw);
    free(p);
}

/* ------------------------------------------------------------------ Hugging Face, built here */

typedef struct raw_t {
    char name[96];
    int dtype; /* 0 F32, 1 BF16, 2 F16 */
    int rank;
    size_t shape[4];
    float *val; /* the values in the file's order (owned) */
} raw_t;

static raw_t *add_t(raw_t *ts, int *n, const char *name, int dtype, int rank, size_t a, size_t b) {
    raw_t *t = &ts[(*n)++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype, t->rank = rank, t->shape[0] = a, t->shape[1] = b;
    t->val = calloc(rank == 1 ? a : a * b, 4);
    return t;
}

/* GPT2LMHeadModel's tensors for the engine's parameters p, in Hugging Face's module order:
 * wte (V real rows), wpe, per block ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj
 * (Conv1D weights (in, out): the transpose of the engine's (out, in)), ln_f. */
static int hf_build(const ct_gpt_config *c, const float *p, const char *prefix, int dtype,
                    raw_t *ts) {
    size_t sizes[CT_GPT_NUM_TENSORS], off[CT_GPT_NUM_TENSORS] = {0};
    ct_gpt_param_sizes(c, sizes);
    for (int i = 1; i < CT_GPT_NUM_TENSORS; i++)
        off[i] = off[i - 1] + sizes[i - 1];
    size_t C = (size_t)c->channels, V = (size_t)c->vocab, T = (size_t)c->max_seq;
    int n = 0;
    char name[96];
    raw_t *t;
    snprintf(name, sizeof name, "%swte.weight", prefix);
    t = add_t(ts, &n, name, dtype, 2, V, C);
    memcpy(t->val, p + off[CT_GPT_wte], V * C * 4);
    snprintf(name, sizeof name, "%swpe.weight", prefix);
    t = add_t(ts, &n, name, dtype, 2, T, C);
    memcpy(t->val, p + off[CT_GPT_wpe], T * C * 4);
    for (int l = 0; l < c->layers; l++) {
        struct {
            const char *hf;
            int tensor;
            size_t out, in; /* the engine's (out, in); 0 in: a vector of out */
        } b[] = {{"ln_1.weight", CT_GPT_ln1w, C, 0},
                 {"ln_1.bias", CT_GPT_ln1b, C, 0},
                 {"attn.c_attn.weight", CT_GPT_qkvw, 3 * C, C},
                 {"attn.c_attn.bias", CT_GPT_qkvb, 3 * C, 0},
                 {"attn.c_proj.weight", CT_GPT_attprojw, C, C},
                 {"attn.c_proj.bias", CT_GPT_attprojb, C, 0},
                 {"ln_2.weight", CT_GPT_ln2w, C, 0},
                 {"ln_2.bias", CT_GPT_ln2b, C, 0},
                 {"mlp.c_fc.weight", CT_GPT_fcw, 4 * C, C},
                 {"mlp.c_fc.bias", CT_GPT_fcb, 4 * C, 0},
                 {"mlp.c_proj.weight", CT_GPT_fcprojw, C, 4 * C},
                 {"mlp.c_proj.bias", CT_GPT_fcprojb, C, 0}};
        for (size_t k = 0; k < sizeof b / sizeof b[0]; k++) {
            snprintf(name, sizeof name, "%sh.%d.%s", prefix, l, b[k].hf);
            size_t per = b[k].out * (b[k].in ? b[k].in : 1);
            const float *src = p + off[b[k].tensor] + (size_t)l * per;
            if (!b[k].in) {
                t = add_t(ts, &n, name, dtype, 1, b[k].out, 0);
                memcpy(t->val, src, per * 4);
            } else {
                t = add_t(ts, &n, name, dtype, 2, b[k].in, b[k].out);
                for (size_t i = 0; i < b[k].in; i++)
                    for (size_t o = 0; o < b[k].out; o++)
                        t->val[i * b[k].out + o] = src[o * b[k].in + i];
            }
        }
    }
    snprintf(name, sizeof name, "%sln_f.weight", prefix);
    t = add_t(ts, &n, name, dtype, 1, C, 0);
    memcpy(t->val, p + off[CT_GPT_lnfw], C * 4);
    snprintf(name, sizeof name, "%sln_f.bias", prefix);
    t = add_t(ts, &n, name, dtype, 1, C, 0);
    memcpy(t->val, p + off[CT_GPT_lnfb], C * 4);
    return n;
}

static void free_ts(raw_t *ts, int n) {
    for (int i = 0; i < n; i++)
        free(ts[i].val);
}

/* A safetensors file of the tensors ts[k] for which pick(k) holds, in the form the engine
 * writes: {"__metadata__":{"format":"pt"},"name":{"dtype":..,"shape":[..],"data_offsets":[a,b]},
 * ...} padded with spaces to a multiple of 8. */
static void raw_write(const char *path, const raw_t *ts, int n, int shard, int nshards) {
    static const char *dn[] = {"F32", "BF16", "F16"};
    static const size_t es[] = {4, 2, 2};
    char *h = malloc(1 << 16);
    size_t len = (size_t)sprintf(h, "{\"__metadata__\":{\"format\":\"pt\"}"), off = 0;
    for (int k = 0; k < n; k++) {
        if (k % nshards != shard) continue;
        size_t cnt = ts[k].rank == 1 ? ts[k].shape[0] : ts[k].shape[0] * ts[k].shape[1];
        len += (size_t)sprintf(h + len, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", ts[k].name,
                               dn[ts[k].dtype]);
        for (int r = 0; r < ts[k].rank; r++)
            len += (size_t)sprintf(h + len, "%s%zu", r ? "," : "", ts[k].shape[r]);
        len += (size_t)sprintf(h + len, "],\"data_offsets\":[%zu,%zu]}", off,
                               off + cnt * es[ts[k].dtype]);
        off += cnt * es[ts[k].dtype];
    }
    len += (size_t)sprintf(h + len, "}");
    while (len % 8)
        h[len++] = ' ';
    FILE *f = fopen(path, "wb");
    uint64_t hl = len;
    fwrite(&hl, 8, 1, f);
    fwrite(h, 1, len, f);
    for (int k = 0; k < n; k++) {
        if (k % nshards != shard) continue;
        size_t cnt = ts[k].rank == 1 ? ts[k].shape[0] : ts[k].shape[0] * ts[k].shape[1];
        for (size_t i = 0; i < cnt; i++) {
            float v = ts[k].val[i];
            uint16_t b = ts[k].dtype == 1 ? bits16(ref_bf16(v)) : enc_f16(v);
            if (ts[k].dtype == 0)
                fwrite(&v, 4, 1, f);
            else
                fwrite(&b, 2, 1, f);
        }
    }
    fclose(f);
    free(h);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
}

/* The engine's parameters as the directory gives them: wte's padding rows zero. */
static void expect_model(const char *what, const char *path, const float *want, size_t n) {
    ct_err err = {0};
    ct_gpt_config r;
    float *q = NULL;
    size_t nq = 0;
    ct_status st = ct_model_file_read(path, &r, &q, &nq, &err);
    CT_ASSERT_MSG(st == CT_OK, "%s: %s", what, err.msg);
    if (st != CT_OK) return;
    CT_ASSERT_MSG(memcmp(&r, &base, sizeof r) == 0 && nq == n, "%s: config or count differ", what);
    size_t VC = (size_t)base.vocab * base.channels, VpC = (size_t)base.padded_vocab * base.channels;
    int bad = 0;
    for (size_t i = 0; i < n && nq == n; i++)
        bad += !same_bits(q[i], i >= VC && i < VpC ? 0.0f : want[i]);
    CT_ASSERT_MSG(bad == 0, "%s: %d of %zu parameters differ", what, bad, n);
    free(q);
}

static void expect_refused(const char *what, const char *path, ct_status want, const char *msg) {
    ct_err err = {0};
    ct_gpt_config r;
    float *q = NULL;
    size_t nq = 0;
    ct_status st = ct_model_file_read(path, &r, &q, &nq, &err);
    CT_ASSERT_MSG(st == want, "%s: status %d (%s), expected %d", what, st, err.msg, want);
    CT_ASSERT_MSG(strstr(err.msg, msg) != NULL, "%s: message '%s' lacks '%s'", what, err.msg, msg);
    CT_ASSERT(q == NULL && nq == 0);
}

static int same_file(const char *a, const char *b) {
    unsigned char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    ct_err err = {0};
    int same = !ct_file_read_all(a, &x, &nx, &err) && !ct_file_read_all(b, &y, &ny, &err) &&
               nx == ny && !memcmp(x, y, nx);
    free(x);
    free(y);
    return same;
}

static void test_hf_engine_dir(void) {
    ct_err err = {0};
    size_t sizes[CT_GPT_NUM_TENSORS], n = ct_gpt_param_sizes(&base, sizes);
    float *p = malloc(n * 4), *pb = malloc(n * 4);
    fill(p, n, 11);
    for (size_t i = 0; i < n; i++)
        pb[i] = ref_bf16(p[i]);
    char d[300], f[340], mine[340];
    raw_t ts[40];
    for (int dt = 0; dt < 2; dt++) {
        path_of(d, sizeof d, dt ? "hf_bf16/" : "hf_f32/");
        CT_ASSERT_OK(ct_model_file_write_as(d, &base, p, dt ? CT_FILE_BF16 : CT_FILE_F32, &err),
                     err.msg);
        /* the same bytes as the layout built here */
        int nt = hf_build(&base, p, "transformer.", dt, ts);
        snprintf(f, sizeof f, "%smodel.safetensors", d);
        path_of(mine, sizeof mine, "mine.safetensors");
        raw_write(mine, ts, nt, 0, 1);
        free_ts(ts, nt);
        CT_ASSERT_MSG(same_file(f, mine),
                      "%s: model.safetensors is not the Hugging Face layout "
                      "built by the test",
                      d);
        snprintf(f, sizeof f, "%sconfig.json", d);
        unsigned char *conf = NULL;
        size_t nc = 0;
        CT_ASSERT_OK(ct_file_read_all(f, &conf, &nc, &err), err.msg);
        if (conf) {
            const char *keys[] = {"\"n_layer\": 2,",      "\"n_head\": 2,",
                                  "\"n_embd\": 8,",       "\"vocab_size\": 50\n",
                                  "\"n_positions\": 16,", "\"GPT2LMHeadModel\"",
                                  "\"gelu_new\"",         dt ? "\"bfloat16\"" : "\"float32\""};
            for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
                CT_ASSERT_STR_CONTAINS((char *)conf, keys[k]);
        }
        free(conf);
        /* read back: the directory, its model.safetensors, with or without the slash */
        expect_model("engine's directory", d, dt ? pb : p, n);
        snprintf(f, sizeof f, "%smodel.safetensors", d);
        expect_model("engine's model.safetensors", f, dt ? pb : p, n);
        snprintf(f, sizeof f, "%.*s", (int)strlen(d) - 1, d);
        expect_model("engine's directory without /", f, dt ? pb : p, n);
    }
    /* experts have no place in a GPT-2 directory */
    ct_gpt_config moe = base;
    moe.experts = 2, moe.top_k = 1;
    size_t nm = ct_gpt_param_sizes(&moe, sizes);
    float *pm = calloc(nm, 4);
    path_of(d, sizeof d, "hf_moe/");
    CT_ASSERT_EQ_INT(ct_model_file_write(d, &moe, pm, &err), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(err.msg, "no place for experts");
    free(pm);
    free(p);
    free(pb);
}

/* config.json's text as the engine writes it, with `from` replaced by `to`. */
static void config_with(const char *d, const char *from, const char *to) {
    char *text = ct_hf_config_format(&base, CT_FILE_F32), out[4096], path[340];
    char *at = from ? strstr(text, from) : NULL;
    if (from) CT_ASSERT_MSG(at != NULL, "config.json lacks '%s'", from);
    if (at)
        snprintf(out, sizeof out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    else
        snprintf(out, sizeof out, "%s", text);
    snprintf(path, sizeof path, "%s/config.json", d);
    write_text(path, out);
    free(text);
}

static void test_hf_built_here(void) {
    size_t sizes[CT_GPT_NUM_TENSORS], n = ct_gpt_param_sizes(&base, sizes);
    float *p = malloc(n * 4);
    fill(p, n, 13);
    char d[300], f[340], g[340];
    raw_t ts[48];
    path_of(d, sizeof d, "hf_here");
    mkdir(d, 0755);
    config_with(d, NULL, NULL);
    snprintf(f, sizeof f, "%s/model.safetensors", d);
    /* no prefix, lm_head tied, the mask buffers */
    int nt = hf_build(&base, p, "", 0, ts);
    raw_t *lm = add_t(ts, &nt, "lm_head.weight", 0, 2, (size_t)base.vocab, (size_t)base.channels);
    memcpy(lm->val, ts[0].val, 4 * (size_t)base.vocab * base.channels);
    add_t(ts, &nt, "h.0.attn.bias", 0, 2, 16, 16);
    add_t(ts, &nt, "h.1.attn.masked_bias", 0, 1, 1, 0);
    raw_write(f, ts, nt, 0, 1);
    expect_model("no prefix, lm_head, mask buffers", d, p, n);
    lm->val[5] += 1;
    raw_write(f, ts, nt, 0, 1);
    expect_refused("lm_head untied", d, CT_ERR_UNSUPPORTED, "lm_head.weight differs");
    free_ts(ts, nt);

    /* F16 tensors, values exact in f16 */
    float *p16 = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        p16[i] = ref_f16((uint16_t)((i * 40503u) % 0x7c00u | (i & 1) << 15));
    nt = hf_build(&base, p16, "transformer.", 2, ts);
    raw_write(f, ts, nt, 0, 1);
    expect_model("F16 tensors", d, p16, n);
    free_ts(ts, nt);
    free(p16);

    /* the layout refused: a Conv1D weight stored (out, in); a tensor missing, twice, unknown */
    nt = hf_build(&base, p, "transformer.", 0, ts);
    raw_t keep = ts[4]; /* h.0.attn.c_attn.weight (8, 24) */
    ts[4].shape[0] = keep.shape[1], ts[4].shape[1] = keep.shape[0];
    raw_write(f, ts, nt, 0, 1);
    expect_refused(
        "c_attn as (out, in)", d, CT_ERR_FORMAT,
        "tensor \"transformer.h.0.attn.c_attn.weight\" has shape (24, 8), but config.json");
    ts[4] = keep;
    raw_write(f, ts, nt - 1, 0, 1);
    expect_refused("missing ln_f.bias", d, CT_ERR_FORMAT,
                   "tensor \"transformer.ln_f.bias\" is missing");
    raw_t *w2 = add_t(ts, &nt, "wte.weight", 0, 2, (size_t)base.vocab, (size_t)base.channels);
    memcpy(w2->val, ts[0].val, 4 * (size_t)base.vocab * base.channels);
    raw_write(f, ts, nt, 0, 1);
    expect_refused("wte twice", d, CT_ERR_FORMAT, "given twice");
    snprintf(w2->name, sizeof w2->name, "transformer.h.2.ln_1.weight");
    raw_write(f, ts, nt, 0, 1);
    expect_refused("a third block", d, CT_ERR_FORMAT,
                   "unexpected tensor \"transformer.h.2.ln_1.weight\"");
    free(w2->val);
    nt--;

    /* sharded: tensors dealt over three files by an index */
    raw_write(f, ts, nt, 0, 1);
    char idx[8192], ip[340];
    size_t at = (size_t)sprintf(idx, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
    for (int k = 0; k < nt; k++) {
        snprintf(g, sizeof g, "%s/model-%05d-of-00003.safetensors", d, k % 3 + 1);
        if (k < 3) raw_write(g, ts, nt, k, 3);
        at += (size_t)sprintf(idx + at, "%s\"%s\": \"model-%05d-of-00003.safetensors\"",
                              k ? ", " : "", ts[k].name, k % 3 + 1);
    }
    sprintf(idx + at, "}}");
    remove(f); /* a directory with model.safetensors reads that; without, the index */
    snprintf(ip, sizeof ip, "%s/model.safetensors.index.json", d);
    write_text(ip, idx);
    expect_model("three shards through the index", d, p, n);
    expect_model("the index named", ip, p, n);
    /* bad indexes */
    char bad[8192];
    struct {
        const char *what, *from, *to;
        const char *msg;
    } ix[] = {
        {"no weight_map", "\"weight_map\"", "\"weightmap\"", "unknown field \"weightmap\""},
        {"a path", "\"model-00002-of-00003.safetensors\"",
         "\"../x/model-00002-of-00003.safetensors\"", "in the same directory"},
        {"misplaced", "\"transformer.wpe.weight\": \"model-00002",
         "\"transformer.wpe.weight\": \"model-00001",
         "tensor \"transformer.wpe.weight\" is here, but the index's weight_map puts it in"},
        {"unlisted", "\"transformer.wpe.weight\": \"model-00002-of-00003.safetensors\", ", "",
         "tensor \"transformer.wpe.weight\" is not in the index's weight_map"},
        {"a tensor its shard lacks", "\"weight_map\": {",
         "\"weight_map\": {\"transformer.h.0.ln_9.weight\": \"model-00001-of-00003.safetensors\", ",
         "puts tensor \"transformer.h.0.ln_9.weight\" in"},
        {"not JSON", "}}", "},}", "is not valid JSON"},
        {"a shard missing", "\"transformer.wte.weight\": \"model-00001",
         "\"transformer.wte.weight\": \"model-00009", "cannot open model file"},
    };
    for (size_t k = 0; k < sizeof ix / sizeof ix[0]; k++) {
        char *s = strstr(idx, ix[k].from);
        CT_ASSERT_MSG(s != NULL, "index case %s: no '%s'", ix[k].what, ix[k].from);
        if (!s) continue;
        snprintf(bad, sizeof bad, "%.*s%s%s", (int)(s - idx), idx, ix[k].to,
                 s + strlen(ix[k].from));
        write_text(ip, bad);
        expect_refused(ix[k].what, d, k == 6 ? CT_ERR_IO : CT_ERR_FORMAT, ix[k].msg);
    }
    write_text(ip, idx);

    /* config.json: each field the engine does not implement, named */
    struct {
        const char *from, *to, *msg;
        ct_status st;
    } cf[] = {
        {"\"gelu_new\"", "\"relu\"", "\"activation_function\": relu is not implemented",
         CT_ERR_UNSUPPORTED},
        {"\"scale_attn_weights\": true", "\"scale_attn_weights\": false", "\"scale_attn_weights\"",
         CT_ERR_UNSUPPORTED},
        {"\"add_cross_attention\": false", "\"add_cross_attention\": true",
         "\"add_cross_attention\"", CT_ERR_UNSUPPORTED},
        {"\"scale_attn_by_inverse_layer_idx\": false", "\"scale_attn_by_inverse_layer_idx\": true",
         "\"scale_attn_by_inverse_layer_idx\"", CT_ERR_UNSUPPORTED},
        {"\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false",
         "\"tie_word_embeddings\"", CT_ERR_UNSUPPORTED},
        {"\"n_inner\": null", "\"n_inner\": 24", "\"n_inner\"", CT_ERR_UNSUPPORTED},
        {"1e-05", "1e-06", "\"layer_norm_epsilon\"", CT_ERR_UNSUPPORTED},
        {"\"model_type\": \"gpt2\"", "\"model_type\": \"mistral\"",
         "\"model_type\": \"mistral\"", CT_ERR_UNSUPPORTED},
        /* a GPT-2 config called llama is read as Llama's, which names what it lacks */
        {"\"model_type\": \"gpt2\"", "\"model_type\": \"llama\"", "no \"hidden_size\"",
         CT_ERR_FORMAT},
        {"\"model_type\"", "\"rope_scaling\": {\"type\": \"linear\"},\n  \"model_type\"",
         "field \"rope_scaling\"", CT_ERR_UNSUPPORTED},
        {"\"n_layer\"", "\"num_layers\"", "no \"n_layer\"", CT_ERR_FORMAT},
        {"\"n_head\": 2", "\"n_head\": 3", "do not divide", CT_ERR_FORMAT},
        {"\"n_positions\": 16", "\"n_positions\": 32",
         "tensor \"transformer.wpe.weight\" has shape (16, 8), but config.json", CT_ERR_FORMAT},
        {"\"n_embd\": 8", "\"n_embd\": 8, \"n_embd\": 8", "twice", CT_ERR_FORMAT},
        {"\"vocab_size\": 50\n", "\"vocab_size\": 50,\n", "not valid JSON", CT_ERR_FORMAT},
    };
    for (size_t k = 0; k < sizeof cf / sizeof cf[0]; k++) {
        config_with(d, cf[k].from, cf[k].to);
        expect_refused(cf[k].to, d, cf[k].st, cf[k].msg);
    }
    /* fields that change nothing the engine computes are read past */
    config_with(d, "\"attn_pdrop\": 0.0",
                "\"attn_pdrop\": 0.1, \"bos_token_id\": 50256, \"use_cache\": true");
    expect_model("dropout and token ids", d, p, n);
    snprintf(g, sizeof g, "%s/config.json", d);
    remove(g);
    expect_refused("no config.json", d, CT_ERR_NOT_FOUND, "no config.json");
    free_ts(ts, nt);
    free(p);
}

int main(void) {
    fesetround(FE_TONEAREST);
    snprintf(dir, sizeof dir, "/tmp/ct_test_engine_io_hf_%ld", (long)getpid());
    mkdir(dir, 0777);
    test_llmc_bf16();
    test_safetensors_bf16_f16();
    test_hf_engine_dir();
    test_hf_built_here();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return ct_test_end("test_engine_io_hf");
}
