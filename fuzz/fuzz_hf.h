/* fuzz_hf.h - what the Hugging Face fuzz targets share: one tiny GPT-2 (L 1, NH 2, C 4, V 6,
 * maxT 4) and a scratch directory per process holding its config.json, so the bytes a target is
 * given are the file under test and the rest of the directory is valid. gen_seeds.c writes the
 * seeds from the same model. */
#ifndef CT_FUZZ_HF_H
#define CT_FUZZ_HF_H

#include <sys/stat.h>

#include "ct_engine_io.h"
#include "fuzz_util.h"

static inline ct_gpt_config ct_fuzz_hf_config(void) {
    ct_gpt_config c = {
        .max_seq = 4, .vocab = 6, .padded_vocab = 128, .layers = 1, .heads = 2, .channels = 4};
    return c;
}

/* A tiny Llama model's (NKV 1 of 2 heads, F 6, untied). */
static inline ct_gpt_config ct_fuzz_hf_llama_config(void) {
    ct_gpt_config c = {.max_seq = 4, .vocab = 6, .padded_vocab = 128, .layers = 1, .heads = 2,
                       .channels = 4, .arch = CT_ARCH_LLAMA, .kv_heads = 1, .ffn_dim = 6,
                       .rope_theta = 10000.0f, .norm_eps = 1e-5f, .tie_embeddings = 0};
    return c;
}

/* The tiny model's parameters (malloc'd; *n of them), deterministic. */
static inline float *ct_fuzz_hf_params_of(const ct_gpt_config *cfg, size_t *n) {
    ct_gpt_config c = *cfg;
    size_t sizes[CT_GPT_NUM_TENSORS];
    *n = ct_gpt_param_sizes(&c, sizes);
    float *p = (float *)calloc(*n, sizeof *p);
    CT_FUZZ_REQUIRE(p != NULL);
    for (size_t i = 0; i < (size_t)c.vocab * c.channels; i++)
        p[i] = (float)i / 16 - 1; /* wte */
    for (size_t i = sizes[0]; i < *n; i++)
        p[i] = (float)(i % 37) / 32 - 0.5f;
    /* an untied head's padding rows are 0 too (a file holds the V real rows) */
    size_t at = 0;
    for (int t = 0; t < CT_GPT_lmhead; t++) at += sizes[t];
    if (sizes[CT_GPT_lmhead])
        for (size_t i = (size_t)c.vocab * c.channels; i < sizes[CT_GPT_lmhead]; i++) p[at + i] = 0;
    return p;
}
static inline float *ct_fuzz_hf_params(size_t *n) {
    ct_gpt_config c = ct_fuzz_hf_config();
    return ct_fuzz_hf_params_of(&c, n);
}

static char ct__fuzz_hf_dir[600];

/* At exit: the files the targets make in their directory and its "_out" twin, then both. */
static inline void ct__fuzz_hf_clean(void) {
    static const char *const names[] = {"config.json", "model.safetensors", "other.safetensors",
                                        "model.safetensors.index.json"};
    char p[700];
    for (int twin = 0; twin < 2; twin++) {
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
            snprintf(p, sizeof p, "%s%s/%s", ct__fuzz_hf_dir, twin ? "_out" : "", names[k]);
            remove(p);
        }
        snprintf(p, sizeof p, "%s%s", ct__fuzz_hf_dir, twin ? "_out" : "");
        rmdir(p);
    }
}

/* "<scratch>/ct_fuzz_<pid>_<tag>/" with the tiny model's config.json (made once per process,
 * removed at exit). */
static inline const char *ct_fuzz_hf_dir_of(const char *tag, const ct_gpt_config *cfg) {
    char *dir = ct__fuzz_hf_dir;
    if (!dir[0]) atexit(ct__fuzz_hf_clean);
    snprintf(dir, sizeof ct__fuzz_hf_dir, "%s/ct_fuzz_%ld_%s", ct_fuzz_dir(), (long)getpid(), tag);
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", dir);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        mkdir(dir, 0755);
        char *text = ct_hf_config_format(cfg, CT_FILE_F32);
        ct_err err = {0};
        CT_FUZZ_REQUIRE(text && ct_file_write_atomic(path, text, strlen(text), &err) == CT_OK);
        free(text);
    }
    return dir;
}

static inline const char *ct_fuzz_hf_dir(const char *tag) {
    ct_gpt_config c = ct_fuzz_hf_config();
    return ct_fuzz_hf_dir_of(tag, &c);
}

#endif /* CT_FUZZ_HF_H */
