/* ct_gpt_config.h - the GPT-2 configuration, the layout a model is built for, and the one table
 * of parameter tensors (llm.c's order) from which offsets, sizes, file I/O and views are derived.
 *
 *     ct_gpt_config c = {.max_seq = 1024, .vocab = 50257, .padded_vocab = 50304,
 *                        .layers = 12, .heads = 12, .channels = 768};
 *     size_t sizes[CT_GPT_NUM_TENSORS]; size_t total = ct_gpt_param_sizes(&c, sizes);
 */
#ifndef CT_GPT_CONFIG_H
#define CT_GPT_CONFIG_H

#include <stddef.h>

typedef struct ct_gpt_config {
    int max_seq;      /* maxT: positions in wpe */
    int vocab;        /* V: real vocabulary (loss is over these) */
    int padded_vocab; /* Vp >= V: rows of wte (llm.c pads to a multiple of 128) */
    int layers;       /* L */
    int heads;        /* NH */
    int channels;     /* C; C % NH == 0 */
} ct_gpt_config;

/* The layout a model is built for (ct_layout, ct_coords) lives in parallel/ct_parallel.h. */
#include "ct_parallel.h"

/* X(name, dims...) with dims expressed through the config fields: the llm.c parameter order.
 * Shapes are (out, in) for linear weights; y = x W^T + b. */
#define CT_GPT_TENSORS(X, c)                                                        \
    X(wte, (size_t)(c)->padded_vocab * (c)->channels)                               \
    X(wpe, (size_t)(c)->max_seq * (c)->channels)                                    \
    X(ln1w, (size_t)(c)->layers * (c)->channels)                                    \
    X(ln1b, (size_t)(c)->layers * (c)->channels)                                    \
    X(qkvw, (size_t)(c)->layers * 3 * (c)->channels * (c)->channels)                \
    X(qkvb, (size_t)(c)->layers * 3 * (c)->channels)                                \
    X(attprojw, (size_t)(c)->layers * (c)->channels * (c)->channels)                \
    X(attprojb, (size_t)(c)->layers * (c)->channels)                                \
    X(ln2w, (size_t)(c)->layers * (c)->channels)                                    \
    X(ln2b, (size_t)(c)->layers * (c)->channels)                                    \
    X(fcw, (size_t)(c)->layers * 4 * (c)->channels * (c)->channels)                 \
    X(fcb, (size_t)(c)->layers * 4 * (c)->channels)                                 \
    X(fcprojw, (size_t)(c)->layers * (c)->channels * 4 * (c)->channels)             \
    X(fcprojb, (size_t)(c)->layers * (c)->channels)                                 \
    X(lnfw, (size_t)(c)->channels)                                                  \
    X(lnfb, (size_t)(c)->channels)

enum {
#define CT__GPT_ENUM(name, n) CT_GPT_##name,
    CT_GPT_TENSORS(CT__GPT_ENUM, (const ct_gpt_config *)0)
#undef CT__GPT_ENUM
    CT_GPT_NUM_TENSORS
};

/* Element counts per tensor (floats) in table order; returns the total. */
static inline size_t ct_gpt_param_sizes(const ct_gpt_config *c, size_t sizes[CT_GPT_NUM_TENSORS]) {
    size_t total = 0, i = 0;
#define CT__GPT_SIZE(name, n) sizes[i++] = (n), total += (n);
    CT_GPT_TENSORS(CT__GPT_SIZE, c)
#undef CT__GPT_SIZE
    return total;
}

/* Tensor names in table order ("wte", "wpe", ...). */
static inline const char *ct_gpt_tensor_name(int i) {
    static const char *const names[] = {
#define CT__GPT_NAME(name, n) #name,
        CT_GPT_TENSORS(CT__GPT_NAME, (const ct_gpt_config *)0)
#undef CT__GPT_NAME
    };
    return (i >= 0 && i < CT_GPT_NUM_TENSORS) ? names[i] : "?";
}

#endif /* CT_GPT_CONFIG_H */
