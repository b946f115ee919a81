/* test_engine_split.c - the zero-bubble halves of the block backward (ct_model_block_backward
 * with CT_BACKWARD_INPUT and CT_BACKWARD_WEIGHT) against the whole block backward, on one device at tiny size (L=3, C=20, NH=4,
 * V=37, Vp=40, B=3, T=7), two micro-batches alive in two slots:
 *   - reference: forward of both, then the whole backward of each (the 1F1B order);
 *   - split: forward of both, the input halves of both micro-batches (head and embedding
 *     included), then the deferred weight halves in micro-batch order (zb1's order);
 * every gradient tensor must be bitwise the same (the same products on the same values, added in
 * the same order), and so must the input gradient each half passes on (checked through the
 * embedding's gradients, which read it). Also: the halves are refused on a plan without
 * split_backward, and the plan's slots are larger by 4 (B,T,C) per block. On both attention
 * paths (GEMM and fused). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine.h"
#include "ct_test.h"
#include "ct_test_dev.h"

static const ct_gpt_config CFG = {.max_seq = 8, .vocab = 37, .padded_vocab = 40, .layers = 3,
                                  .heads = 4, .channels = 20};
enum { B = 3, T = 7 };

static uint64_t g_rng = 0x5EEDull;
static double urand(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(g_rng >> 11) * 0x1.0p-52 - 1.0;
}

static ct_model *make(ct_device *dev, int split, ct_attn_path attn) {
    ct_model *m = NULL;
    ct_err err = {0};
    ct_layout lay = {1, 1, 1, 0, 1};
    ct_coords at = {0, 0, 0, 0};
    ct_model_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.max_B = B, plan.max_T = T, plan.slots = 2, plan.split_backward = split;
    plan.attention = attn;
    ct_status st = ct_model_create_plan(&m, &CFG, &lay, &at, dev, &plan, &err);
    CT_ASSERT_MSG(st == CT_OK, "create (split %d): %s", split, err.msg);
    return m;
}

/* Forward of micro-batch k on slot k. */
static void forward(ct_model *m, int k, const int *tok, const int *tg) {
    float loss = 0;
    CT_ASSERT_OK(ct_model_embed_forward(m, k, tok + k * B * T, B, T), ct_model_errmsg(m));
    for (int l = 0; l < CFG.layers; l++)
        CT_ASSERT_OK(ct_model_block_forward(m, k, l), ct_model_errmsg(m));
    CT_ASSERT_OK(ct_model_head_forward(m, k, tg + k * B * T, &loss), ct_model_errmsg(m));
    CT_ASSERT(isfinite(loss) && loss > 0);
}

static void run(ct_device *dev, ct_attn_path attn) {
    size_t n = 0;
    int tok[2 * B * T], tg[2 * B * T];
    for (int i = 0; i < 2 * B * T; i++) {
        tok[i] = (int)((urand() + 1.0) * 0.5 * CFG.vocab) % CFG.vocab;
        tg[i] = (int)((urand() + 1.0) * 0.5 * CFG.vocab) % CFG.vocab;
    }
    ct_model *whole = make(dev, 0, attn), *split = make(dev, 1, attn);
    if (!whole || !split) goto done;
    n = ct_model_num_params(whole);
    float *p = malloc(n * sizeof *p), *g1 = malloc(n * sizeof *g1), *g2 = malloc(n * sizeof *g2);
    CT_ASSERT_OK(ct_model_init_random(whole, 7), ct_model_errmsg(whole));
    CT_ASSERT_OK(ct_model_get_params(whole, p, n), ct_model_errmsg(whole));
    for (size_t i = 0; i < n; i++) p[i] += (float)(0.05 * urand()); /* LayerNorms off 1 and 0 */
    CT_ASSERT_OK(ct_model_set_params(whole, p, n), ct_model_errmsg(whole));
    CT_ASSERT_OK(ct_model_set_params(split, p, n), ct_model_errmsg(split));
    CT_ASSERT(ct_model_slot_bytes(split) >
              ct_model_slot_bytes(whole) + (size_t)CFG.layers * 4 * B * T * CFG.channels * 4 - 1);

    /* the whole backward, micro-batch by micro-batch */
    CT_ASSERT_OK(ct_model_zero_grad(whole), ct_model_errmsg(whole));
    for (int k = 0; k < 2; k++) forward(whole, k, tok, tg);
    for (int k = 0; k < 2; k++) {
        CT_ASSERT_OK(ct_model_head_backward(whole, k, 0.5f), ct_model_errmsg(whole));
        for (int l = CFG.layers - 1; l >= 0; l--)
            CT_ASSERT_OK(ct_model_block_backward(whole, k, l, CT_BACKWARD_WHOLE),
                         ct_model_errmsg(whole));
        CT_ASSERT_OK(ct_model_embed_backward(whole, k), ct_model_errmsg(whole));
    }
    CT_ASSERT_OK(ct_model_get_grads(whole, g1, n), ct_model_errmsg(whole));

    /* the halves: every input half first, then the weight halves */
    CT_ASSERT_OK(ct_model_zero_grad(split), ct_model_errmsg(split));
    for (int k = 0; k < 2; k++) forward(split, k, tok, tg);
    for (int k = 0; k < 2; k++) {
        CT_ASSERT_OK(ct_model_head_backward(split, k, 0.5f), ct_model_errmsg(split));
        for (int l = CFG.layers - 1; l >= 0; l--)
            CT_ASSERT_OK(ct_model_block_backward(split, k, l, CT_BACKWARD_INPUT),
                         ct_model_errmsg(split));
        CT_ASSERT_OK(ct_model_embed_backward(split, k), ct_model_errmsg(split));
    }
    /* after the input halves alone, no block weight has a gradient yet */
    CT_ASSERT_OK(ct_model_get_grads(split, g2, n), ct_model_errmsg(split));
    size_t off, cnt;
    ct_model_tensor(split, CT_GPT_fcw, &off, &cnt);
    double s = 0;
    for (size_t i = 0; i < cnt; i++) s += fabs(g2[off + i]);
    CT_ASSERT_MSG(s == 0, "the input halves added %g to fcw's gradient", s);
    for (int k = 0; k < 2; k++)
        for (int l = CFG.layers - 1; l >= 0; l--)
            CT_ASSERT_OK(ct_model_block_backward(split, k, l, CT_BACKWARD_WEIGHT),
                         ct_model_errmsg(split));
    CT_ASSERT_OK(ct_model_get_grads(split, g2, n), ct_model_errmsg(split));

    for (int t = 0; t < CT_GPT_NUM_TENSORS; t++) {
        ct_model_tensor(whole, t, &off, &cnt);
        size_t diff = 0;
        double mx = 0;
        for (size_t i = 0; i < cnt; i++) {
            if (memcmp(&g1[off + i], &g2[off + i], 4)) diff++;
            if (fabs(g1[off + i]) > mx) mx = fabs(g1[off + i]);
        }
        CT_ASSERT_MSG(diff == 0, "attention %d, tensor %d: %zu of %zu gradient entries differ "
                      "from the whole backward", (int)attn, t, diff, cnt);
        CT_ASSERT_MSG(mx > 0 || t == CT_GPT_wpe || cnt == 0, /* cnt 0: a dense model's router */
                      "tensor %d has no gradient at all", t);
    }
    free(p), free(g1), free(g2);

    /* the halves need a split plan */
    forward(whole, 0, tok, tg);
    CT_ASSERT_OK(ct_model_head_backward(whole, 0, 1.0f), ct_model_errmsg(whole));
    CT_ASSERT_EQ_INT(ct_model_block_backward(whole, 0, CFG.layers - 1, CT_BACKWARD_INPUT),
                     CT_ERR_STATE);
    CT_ASSERT_STR_CONTAINS(ct_model_errmsg(whole), "split_backward");
    CT_ASSERT_EQ_INT(ct_model_block_backward(split, 5, 0, CT_BACKWARD_WEIGHT), CT_ERR_ARG);
    /* a part that is none of the three is refused, naming the parts */
    CT_ASSERT_EQ_INT(ct_model_block_backward(split, 0, 0, (ct_backward_part)7), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(ct_model_errmsg(split), "whole, input or weight");
done:
    ct_model_free(whole);
    ct_model_free(split);
}

int main(void) {
    ct_test_devices ds;
    ct_device *dev = ct_test_device_open(&ds, NULL);
    if (!dev) return ct_test_end("test_engine_split");
    run(dev, CT_ATTN_GEMM);
    run(dev, CT_ATTN_FUSED); /* both attention paths: the input half calls the model's own */
    ct_mem_stats ms;
    ct_device_mem_stats(dev, &ms);
    CT_ASSERT_EQ_INT(ms.live_buffers, 0);
    ct_device_free(dev);
    ct_test_devices_free(&ds);
    return ct_test_end("test_engine_split");
}
