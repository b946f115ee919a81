/* test_engine_mem.c - the memory model (ct_engine_mem.h) against what is allocated, and the
 * recompute modes' arena against the per-layer formula of docs/ARCHITECTURE.md.
 *
 * 1. On one device, for three shapes (one with T not a multiple of 16, one with 3 slots and a
 *    pipeline stage's chunks), both attention paths, every recompute mode and ZeRO layouts of a
 *    DP worker (which need no group to build a model): the device's bytes per category after
 *    ct_model_create_plan (and after ct_exec_create on a single worker) equal
 *    ct_model_mem_predict's, exactly; a training step allocates nothing; the model's own
 *    slot/scratch/layer/recompute figures equal the prediction's.
 * 2. The per-layer bytes against the formula written by hand from the tensors each block keeps
 *    (B*T a multiple of 16, so no region is padded): none on the GEMM path
 *    4*B*T*(16C + 4) + 4*B*NH*T^2; attention 4*B*T*(10C + 4); block 4*B*T*C; the fused path's
 *    none 4*B*T*(16C + 4) + 4*B*NH*T; and the recompute scratch: one block's dropped tensors.
 * 3. Layouts without a device: a TP worker's parameters are its slices (psi_tp), SP splits the
 *    rows outside the TP regions, a ZeRO-3 worker holds a shard, an expert-parallel worker its
 *    E / ep experts (their optimizer state sharded over dp / ep) and the EP staging; the
 *    prediction is pure (two calls give the same bytes) and refuses what the model refuses,
 *    with the same code.
 *    The largest single buffer: one block's scores on the GEMM path, an arena part on the fused
 *    path (the model state counts by its largest slice: the first fcw, in every array, and no
 *    more in a ZeRO-1 shard); --attention auto's fallback (ct_model_gemm_exceeds) exactly at the
 *    scores' bytes.
 * Mixture-of-experts shapes (K = 2 with a capacity, K = 1 without) and a Llama shape run through
 * 1. as well.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine.h"
#include "ct_test.h"
#include "ct_test_dev.h"

typedef struct shape {
    ct_gpt_config cfg;
    int B, T, slots, pp, stage; /* pp > 1: this worker is stage `stage` of pp, chunks below */
    int nchunks, lo[2], hi[2];
    double capacity; /* a mixture of experts' capacity factor (cfg.experts > 0) */
} shape;

static const shape SHAPES[] = {
    {{16, 64, 64, 2, 2, 32, 0, 0, 0, 0, 0, 0, 0, 0}, 4, 16, 1, 1, 0, 0, {0}, {0}, 0},
    {{40, 45, 48, 3, 4, 48, 0, 0, 0, 0, 0, 0, 0, 0}, 3, 33, 1, 1, 0, 0, {0}, {0}, 0},
    /* the first stage of pp 2 with two chunks (interleaved): blocks [0,2) and [3,4), 3 slots */
    {{32, 64, 64, 5, 4, 64, 0, 0, 0, 0, 0, 0, 0, 0}, 2, 32, 3, 2, 0, 2, {0, 3}, {2, 4}, 0},
    /* mixtures of experts: 4 experts top-2 at capacity factor 1.25; 6 experts top-1 with no
     * capacity limit (the saved tensors sized for every choice), 2 slots */
    {{16, 64, 64, 2, 2, 32, 4, 2, 0, 0, 0, 0, 0, 0}, 4, 16, 1, 1, 0, 0, {0}, {0}, 1.25},
    {{24, 64, 64, 3, 2, 32, 6, 1, 0, 0, 0, 0, 0, 0}, 2, 24, 2, 1, 0, 0, {0}, {0}, 0},
    /* a Llama model (NKV 2 of 4 heads, F 40, untied: its lm_head) at T = 15, 2 slots */
    {{16, 64, 64, 2, 4, 32, 0, 0, CT_ARCH_LLAMA, 2, 40, 1e4f, 1e-5f, 0}, 3, 15, 2, 1, 0, 0, {0},
     {0}, 0},
};

static void plan_of(const shape *sh, ct_attn_path ap, ct_recompute rc, int split,
                    ct_model_plan *pl) {
    memset(pl, 0, sizeof *pl);
    pl->max_B = sh->B, pl->max_T = sh->T, pl->slots = sh->slots;
    pl->attention = ap, pl->recompute = rc, pl->split_backward = split;
    pl->moe_capacity = sh->capacity, pl->moe_aux = sh->cfg.experts ? 0.01 : 0;
    pl->chunks.nchunks = sh->nchunks;
    for (int k = 0; k < sh->nchunks; k++) pl->chunks.lo[k] = sh->lo[k], pl->chunks.hi[k] = sh->hi[k];
}

static void check_equal(const ct_mem_stats *ms, const ct_mem_stats *before,
                        const ct_mem_predict *mp, const char *what) {
    for (int c = 0; c < CT_MEM__COUNT; c++) {
        uint64_t got = ms->current[c] - before->current[c];
        CT_ASSERT_MSG(got == mp->device[c], "%s: %s allocated %llu, predicted %llu", what,
                      ct_mem_category_str((ct_mem_category)c), (unsigned long long)got,
                      (unsigned long long)mp->device[c]);
    }
}

/* 1. Allocated against predicted, model alone and model + executor. */
static void test_allocated(ct_device *dev) {
    static const ct_attn_path paths[] = {CT_ATTN_GEMM, CT_ATTN_FUSED};
    int cases = 0;
    for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++)
        for (int pi = 0; pi < 2; pi++)
            for (int rc = CT_RECOMPUTE_NONE; rc <= CT_RECOMPUTE_BLOCK; rc++)
                for (int zero = 0; zero <= 3; zero++)
                    for (int split = 0; split <= 1; split++) {
                        const shape *sh = &SHAPES[si];
                        if (split && (rc == CT_RECOMPUTE_BLOCK ||
                                      (rc == CT_RECOMPUTE_ATTENTION && paths[pi] == CT_ATTN_FUSED)))
                            continue; /* refused: below */
                        if (split && (zero || si != 0)) continue; /* a few split cases suffice */
                        if (zero && (rc != CT_RECOMPUTE_BLOCK || pi)) continue;
                        /* experts: ZeRO-2/3 and the split backward are refused (ct_engine_moe.h) */
                        if (sh->cfg.experts && (zero >= 2 || split)) continue;
                        ct_err err = {0};
                        ct_model_plan pl;
                        plan_of(sh, paths[pi], (ct_recompute)rc, split, &pl);
                        int dp = zero ? 2 : 1;
                        ct_layout lay = {dp, 1, sh->pp, zero, 1};
                        ct_coords at = {zero ? 1 : 0, 0, sh->stage, 0};
                        char what[160];
                        snprintf(what, sizeof what, "shape %zu %s recompute %s ZeRO-%d%s", si,
                                 ct_attn_path_name(paths[pi]), ct_recompute_name((ct_recompute)rc),
                                 zero, split ? " split" : "");
                        ct_mem_predict mp, mp2, mx;
                        CT_ASSERT_OK(ct_model_mem_predict(&sh->cfg, &lay, &at, &pl, NULL, &mp, &err),
                                     err.msg);
                        CT_ASSERT_OK(ct_model_mem_predict(&sh->cfg, &lay, &at, &pl, NULL, &mp2, &err),
                                     err.msg);
                        CT_ASSERT_MSG(!memcmp(&mp, &mp2, sizeof mp), "%s: two predictions differ",
                                      what);
                        ct_exec_opts xo = ct_exec_opts_default();
                        CT_ASSERT_OK(ct_model_mem_predict(&sh->cfg, &lay, &at, &pl, &xo, &mx, &err),
                                     err.msg);
                        ct_mem_stats before, ms;
                        ct_device_mem_stats(dev, &before);
                        ct_model *m = NULL;
                        CT_ASSERT_OK(ct_model_create_plan(&m, &sh->cfg, &lay, &at, dev, &pl, &err),
                                     err.msg);
                        if (!m) continue;
                        ct_device_mem_stats(dev, &ms);
                        check_equal(&ms, &before, &mp, what);
                        CT_ASSERT_EQ_INT(ct_model_slot_bytes(m), mp.act_slot);
                        CT_ASSERT_EQ_INT(ct_model_scratch_bytes(m), mp.act_scratch);
                        CT_ASSERT_EQ_INT(ct_model_layer_bytes(m), mp.act_layer);
                        CT_ASSERT_EQ_INT(ct_model_recompute_bytes(m), mp.act_recompute);
                        CT_ASSERT_EQ_INT(mp.host_comm, 0);
                        CT_ASSERT_EQ_INT(mp.attention, paths[pi]);
                        /* the executor needs a grid for several workers; one worker's own */
                        if (dp == 1 && sh->pp == 1) {
                            ct_exec *x = NULL;
                            CT_ASSERT_OK(ct_exec_create(&x, m, NULL, &xo, &err), err.msg);
                            ct_device_mem_stats(dev, &ms);
                            check_equal(&ms, &before, &mx, what);
                            CT_ASSERT_EQ_INT(mx.host_comm, 0); /* one worker reduces nothing */
                            /* a step allocates nothing: the arena is all a step uses */
                            ct_schedule *s = NULL;
                            CT_ASSERT_OK(ct_sched_make(CT_SCHED_TRIVIAL, 1, 2, 1, &s, &err),
                                         err.msg);
                            ct_model_init_random(m, 3);
                            int n = sh->B * sh->T;
                            int *tok = malloc(sizeof(int) * 2 * (size_t)n);
                            for (int i = 0; i < 2 * n; i++) tok[i] = (i * 7 + 3) % sh->cfg.vocab;
                            ct_adamw_hp hp = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
                            ct_step_result res;
                            CT_ASSERT_OK(ct_exec_step(x, s, tok, tok, sh->B, sh->T, &hp, 1, &res),
                                         ct_exec_errmsg(x));
                            ct_mem_stats after;
                            ct_device_mem_stats(dev, &after);
                            for (int c = 0; c < CT_MEM__COUNT; c++)
                                CT_ASSERT_EQ_INT(after.current[c], ms.current[c]);
                            free(tok);
                            ct_sched_free(s);
                            ct_exec_free(x);
                        } else {
                            /* the executor's own optimizer: a second norm scratch (with
                             * experts also the owned runs' norm cells) */
                            size_t ow = 0;
                            CT_ASSERT_OK(ct_optim_workspace_bytes(ct_model_params(m), &ow, &err),
                                         err.msg);
                            CT_ASSERT_EQ_INT(mx.device[CT_MEM_WORKSPACE] -
                                                 mp.device[CT_MEM_WORKSPACE],
                                             ow);
                            CT_ASSERT(ow >= (16 + CT_NORM_PARTIALS) * sizeof(float));
                        }
                        ct_model_free(m);
                        cases++;
                    }
    printf("allocated == predicted: %d plans\n", cases);
}

/* Floats rounded up to whole 64-byte regions, as the arena lays them. */
static size_t r16(size_t n) { return (n + 15) / 16 * 16; }

/* 2. The per-layer formula, and the recompute scratch. */
static void test_formula(void) {
    ct_gpt_config c = {64, 64, 64, 6, 4, 32, 0, 0, 0, 0, 0, 0, 0, 0};
    size_t B = 2, T = 64, C = 32, NH = 4, BT = B * T;
    ct_layout lay = {1, 1, 1, 0, 1};
    ct_coords at = {0, 0, 0, 0};
    ct_err err = {0};
    ct_mem_predict none, attn, blk, fnone, fattn, fblk, snone, sattn;
    ct_model_plan pl;
    memset(&pl, 0, sizeof pl);
    pl.max_B = (int)B, pl.max_T = (int)T, pl.slots = 1;
#define PRED(out, ap, rc, split)                                                                   \
    pl.attention = ap, pl.recompute = rc, pl.split_backward = split;                              \
    CT_ASSERT_OK(ct_model_mem_predict(&c, &lay, &at, &pl, NULL, &out, &err), err.msg)
    PRED(none, CT_ATTN_GEMM, CT_RECOMPUTE_NONE, 0);
    PRED(attn, CT_ATTN_GEMM, CT_RECOMPUTE_ATTENTION, 0);
    PRED(blk, CT_ATTN_GEMM, CT_RECOMPUTE_BLOCK, 0);
    PRED(fnone, CT_ATTN_FUSED, CT_RECOMPUTE_NONE, 0);
    PRED(fattn, CT_ATTN_FUSED, CT_RECOMPUTE_ATTENTION, 0);
    PRED(fblk, CT_ATTN_FUSED, CT_RECOMPUTE_BLOCK, 0);
    PRED(snone, CT_ATTN_GEMM, CT_RECOMPUTE_NONE, 1);
    PRED(sattn, CT_ATTN_GEMM, CT_RECOMPUTE_ATTENTION, 1);
#undef PRED
    size_t att = B * NH * T * T, lse = B * NH * T;
    CT_ASSERT_EQ_INT(none.act_layer, 4 * (BT * (16 * C + 4) + att));
    CT_ASSERT_EQ_INT(attn.act_layer, 4 * BT * (10 * C + 4));
    CT_ASSERT_EQ_INT(blk.act_layer, 4 * BT * C);
    CT_ASSERT_EQ_INT(fnone.act_layer, 4 * (BT * (16 * C + 4) + lse));
    CT_ASSERT_EQ_INT(fattn.act_layer, 4 * (BT * (10 * C + 4) + lse));
    CT_ASSERT_EQ_INT(fblk.act_layer, 4 * BT * C);
    /* the recompute scratch: what one block dropped */
    CT_ASSERT_EQ_INT(none.act_recompute, 0);
    CT_ASSERT_EQ_INT(attn.act_recompute, 4 * (att + 6 * BT * C));
    CT_ASSERT_EQ_INT(blk.act_recompute, 4 * (BT * (15 * C + 4) + att));
    CT_ASSERT_EQ_INT(fattn.act_recompute, 4 * 6 * BT * C);
    CT_ASSERT_EQ_INT(fblk.act_recompute, 4 * (BT * (15 * C + 4) + lse));
    /* the largest single buffer at B 8: one block's scores on the GEMM path (an indivisible part
     * of the arena), an arena part on the fused path; auto's GEMM choice gives way to fused
     * exactly when the scores exceed the limit and the fused path's largest fits it */
    {
        ct_mem_predict g, f;
        pl.max_B = 8, pl.recompute = CT_RECOMPUTE_NONE, pl.split_backward = 0;
        pl.attention = CT_ATTN_GEMM;
        CT_ASSERT_OK(ct_model_mem_predict(&c, &lay, &at, &pl, NULL, &g, &err), err.msg);
        pl.attention = CT_ATTN_FUSED;
        CT_ASSERT_OK(ct_model_mem_predict(&c, &lay, &at, &pl, NULL, &f, &err), err.msg);
        size_t scores = 4 * 8 * NH * T * T;
        CT_ASSERT_EQ_INT(g.largest, scores);
        CT_ASSERT_STR_CONTAINS(g.largest_name, "score"); /* the scores or their gradient */
        /* fused: an arena part; the model state counts by its largest (tensor, layer) slice */
        CT_ASSERT(f.largest >= 4 * 4 * C * C && f.largest < f.device[CT_MEM_PARAMS]);
        CT_ASSERT(f.largest < g.largest);
        ct_params *P = NULL;
        ct_params_buf pb[CT_PARAMS_MAX_BUFFERS];
        CT_ASSERT_OK(ct_params_create(&P, &c, &lay, &at, NULL, NULL, &err), err.msg);
        int npb = P ? ct_params_buffers(P, pb) : 0;
        CT_ASSERT_EQ_INT(npb, 4); /* params, grads, m, v */
        for (int k = 0; k < npb; k++) { /* the first of the largest slices: fcw, 4C x C */
            CT_ASSERT_EQ_INT(pb[k].largest, 4 * 4 * C * C);
            CT_ASSERT_STR_CONTAINS(pb[k].largest_name, "fcw of block 0");
        }
        ct_params_free(P);
        /* ZeRO-1 over 2: m and v hold the second half of the flat layout, cut where it is */
        ct_layout l2 = lay;
        ct_coords a2 = at;
        l2.dp = 2, l2.zero = 1, a2.dp_rank = 1;
        CT_ASSERT_OK(ct_params_create(&P, &c, &l2, &a2, NULL, NULL, &err), err.msg);
        npb = P ? ct_params_buffers(P, pb) : 0;
        for (int k = 0; k < npb; k++) {
            CT_ASSERT(pb[k].largest <= 4 * 4 * C * C && pb[k].largest > 0);
            CT_ASSERT(pb[k].largest <= pb[k].bytes);
        }
        CT_ASSERT(npb == 4 && pb[2].bytes < pb[0].bytes); /* m: the shard */
        ct_params_free(P);
        pl.attention = CT_ATTN_AUTO;
        CT_ASSERT_EQ_INT(ct_model_gemm_exceeds(&c, &lay, &at, &pl, scores - 4), 1);
        CT_ASSERT_EQ_INT(ct_model_gemm_exceeds(&c, &lay, &at, &pl, scores), 0);
        CT_ASSERT_EQ_INT(ct_model_gemm_exceeds(&c, &lay, &at, &pl, f.largest - 4), 0);
        pl.max_B = (int)B;
    }
    /* zb1 keeps 4 (B,T,C) more per block; attention mode then drops the probabilities only */
    CT_ASSERT_EQ_INT(snone.act_layer, none.act_layer + 4 * 4 * BT * C);
    CT_ASSERT_EQ_INT(sattn.act_layer, snone.act_layer - 4 * att);
    CT_ASSERT_EQ_INT(sattn.act_recompute, 4 * att);
    /* the arena: slots x slot + scratch, the head's tensors in the slot once */
    size_t head = r16(BT * C) + 2 * r16(BT) + r16(BT * 64) + 2 * r16(BT) + 16;
    size_t in = 2 * r16(BT) + r16(BT * C);
    CT_ASSERT_EQ_INT(none.act_slot, 4 * (in + head) + 6 * none.act_layer);
    CT_ASSERT_EQ_INT(blk.act_slot, 4 * (in + head) + 6 * blk.act_layer);
    CT_ASSERT_EQ_INT(blk.act_scratch, none.act_scratch + blk.act_recompute);
    /* at L = 6 block recomputation keeps 6 (B,T,C) tensors plus one block's scratch */
    double layers_none = 6.0 * none.act_layer, layers_blk = 6.0 * blk.act_layer + blk.act_recompute;
    printf("layers + recompute scratch at L=6, T=64, C=32: none %.0f, attention %.0f, block %.0f "
           "bytes\n",
           layers_none, 6.0 * attn.act_layer + attn.act_recompute, layers_blk);
    CT_ASSERT(layers_blk < layers_none / 2.5);
    CT_ASSERT(6.0 * attn.act_layer + attn.act_recompute < layers_none);
}

/* 3. Layouts no single device can build: TP slices, SP rows, ZeRO-3 shards; refusals. */
static void test_layouts(void) {
    ct_gpt_config c = {32, 64, 64, 4, 4, 32, 0, 0, 0, 0, 0, 0, 0, 0};
    ct_err err = {0};
    ct_model_plan pl;
    memset(&pl, 0, sizeof pl);
    pl.max_B = 2, pl.max_T = 32, pl.slots = 1;
    ct_layout one = {1, 1, 1, 0, 1}, tp2 = {1, 2, 1, 0, 1}, z3 = {4, 1, 1, 3, 1};
    ct_coords at0 = {0, 0, 0, 0}, at1 = {0, 1, 0, 0}, at3 = {3, 0, 0, 0};
    ct_exec_opts xo = ct_exec_opts_default();
    ct_mem_predict a, b, s, z;
    CT_ASSERT_OK(ct_model_mem_predict(&c, &one, &at0, &pl, &xo, &a, &err), err.msg);
    CT_ASSERT_OK(ct_model_mem_predict(&c, &tp2, &at1, &pl, &xo, &b, &err), err.msg);
    /* psi_tp: the split tensors halve (wte by rows, qkv, fc by rows, the projections by
     * columns), the LayerNorms, wpe and the row-parallel biases stay whole */
    size_t C = 32, L = 4, split = 64 * C + L * (3 * C * C + 3 * C + C * C + 4 * C * C + 4 * C + 4 * C * C);
    size_t whole = 32 * C + L * (4 * C + 2 * C) + 2 * C;
    CT_ASSERT_EQ_INT(a.device[CT_MEM_PARAMS], 4 * (split + whole));
    CT_ASSERT_EQ_INT(b.device[CT_MEM_PARAMS], 4 * (split / 2 + whole));
    CT_ASSERT_EQ_INT(b.device[CT_MEM_OPTIMIZER], 8 * (split / 2 + whole));
    /* the TP pieces' two host staging buffers of a (B,T,C) activation each */
    CT_ASSERT_EQ_INT(b.host_tp, 2 * 4 * 2 * 32 * C);
    CT_ASSERT_EQ_INT(a.host_tp, 0);
    CT_ASSERT(b.act_layer < a.act_layer);
    pl.sp = 1;
    CT_ASSERT_OK(ct_model_mem_predict(&c, &tp2, &at1, &pl, &xo, &s, &err), err.msg);
    /* SP: the (B,T,C) tensors outside the TP regions (ln1, res2, ln2, res3) and the 4 LayerNorm
     * statistics halve; the LayerNorm gradients are summed over the TP group (host buckets) */
    CT_ASSERT_EQ_INT(b.act_layer - s.act_layer, 4 * (4 * 2 * 32 * C / 2 + 4 * 2 * 32 / 2));
    CT_ASSERT(s.host_grads > 0);
    CT_ASSERT_EQ_INT(b.host_grads, 0);
    pl.sp = 0;
    CT_ASSERT_OK(ct_model_mem_predict(&c, &z3, &at3, &pl, &xo, &z, &err), err.msg);
    size_t psi = split + whole, shard = (psi + 3) / 4;
    CT_ASSERT_EQ_INT(z.device[CT_MEM_PARAMS], 4 * shard);
    CT_ASSERT_EQ_INT(z.device[CT_MEM_GRADS], 4 * shard);
    CT_ASSERT_EQ_INT(z.device[CT_MEM_OPTIMIZER], 8 * shard);
    CT_ASSERT_EQ_INT(z.host_zero, 4 * (shard + 3 * psi));
    /* experts over an EP group (no group needed to predict): dp 4, ep 2, ZeRO-1. Each worker
     * holds the router and E / ep = 2 of the 4 experts; the experts' optimizer state is sharded
     * over the dp / ep = 2 workers holding them, the rest over dp = 4; the MoE layer's two EP
     * staging buffers count in host comm */
    {
        ct_gpt_config cm = {32, 64, 64, 4, 4, 32, 4, 2, 0, 0, 0, 0, 0, 0};
        ct_layout one1 = {1, 1, 1, 0, 1}, ep2 = {4, 1, 1, 1, 2};
        ct_coords w3 = {3, 0, 0, 1};
        ct_mem_predict e1, e2;
        pl.moe_capacity = 1.0, pl.moe_aux = 0.01;
        CT_ASSERT_OK(ct_model_mem_predict(&cm, &one1, &at0, &pl, &xo, &e1, &err), err.msg);
        CT_ASSERT_OK(ct_model_mem_predict(&cm, &ep2, &w3, &pl, &xo, &e2, &err), err.msg);
        size_t ex = L * (4 * C * C + 4 * C + 4 * C * C + C); /* one expert of every block */
        size_t dense = split + whole - L * (4 * C * C + 4 * C + 4 * C * C + C) + L * 4 * C;
        CT_ASSERT_EQ_INT(e1.device[CT_MEM_PARAMS], 4 * (dense + 4 * ex));
        size_t xsh = 2 * ex / 2, dsh = (dense + 3) / 4; /* shards: expert region, the rest */
        CT_ASSERT_EQ_INT(e2.device[CT_MEM_PARAMS], 4 * (2 * ex + 4 * dsh));
        CT_ASSERT_EQ_INT(e2.device[CT_MEM_OPTIMIZER], 8 * (xsh + dsh));
        CT_ASSERT_EQ_INT(e1.host_moe, 0);
        CT_ASSERT(e2.host_moe > 0);
        CT_ASSERT_EQ_INT(e2.host_comm, e2.host_grads + e2.host_zero + e2.host_moe);
        /* experts under tp 2: each expert split as the dense MLP is (fc by rows, fcproj by
         * columns, fcprojb whole); the router, like the LayerNorms, whole on every worker */
        ct_layout tpe = {1, 2, 1, 0, 1};
        size_t E = 4;
        size_t tsplit = 64 * C + L * (3 * C * C + 3 * C + C * C) + L * E * (8 * C * C + 4 * C);
        size_t twhole = 32 * C + L * (4 * C + C + 2 * E * C) + 2 * C;
        CT_ASSERT_EQ_INT(tsplit + twhole, dense + 4 * ex); /* the same model, counted by split */
        ct_mem_predict e3;
        CT_ASSERT_OK(ct_model_mem_predict(&cm, &tpe, &at1, &pl, NULL, &e3, &err), err.msg);
        CT_ASSERT_EQ_INT(e3.device[CT_MEM_PARAMS], 4 * (tsplit / 2 + twhole));
        CT_ASSERT(e3.act_layer < e1.act_layer); /* the experts' hidden (4C / tp) halves */
        pl.moe_capacity = 0, pl.moe_aux = 0;
    }
    /* a Llama model (NKV 2 of 4 heads, hd 8, F 40, untied) under tp 2: q|k|v (C + 2 NKV hd rows),
     * o, gate|up (2F rows), down and the embedding and lm_head halve, the RMSNorms stay whole;
     * SP halves the rows outside the TP regions (ln1, res2, ln2, res3 and 2 RMSNorm rstd) */
    {
        ct_gpt_config cl = {32, 64, 64, 4, 4, 32, 0, 0, CT_ARCH_LLAMA, 2, 40, 1e4f, 1e-5f, 0};
        size_t F = 40, lsplit = 2 * 64 * C + L * ((C + 32) * C + C * C + 2 * F * C + C * F);
        size_t lwhole = L * 2 * C + C;
        ct_mem_predict l1, l2, l3;
        CT_ASSERT_OK(ct_model_mem_predict(&cl, &one, &at0, &pl, &xo, &l1, &err), err.msg);
        CT_ASSERT_OK(ct_model_mem_predict(&cl, &tp2, &at1, &pl, &xo, &l2, &err), err.msg);
        CT_ASSERT_EQ_INT(l1.device[CT_MEM_PARAMS], 4 * (lsplit + lwhole));
        CT_ASSERT_EQ_INT(l2.device[CT_MEM_PARAMS], 4 * (lsplit / 2 + lwhole));
        CT_ASSERT(l2.act_layer < l1.act_layer);
        pl.sp = 1;
        CT_ASSERT_OK(ct_model_mem_predict(&cl, &tp2, &at1, &pl, &xo, &l3, &err), err.msg);
        CT_ASSERT_EQ_INT(l2.act_layer - l3.act_layer, 4 * (4 * 2 * 32 * C / 2 + 2 * 2 * 32 / 2));
        pl.sp = 0;
        /* a tp that does not divide NKV is refused naming both */
        ct_layout tp4 = {1, 4, 1, 0, 1};
        ct_coords a41 = {0, 1, 0, 0};
        CT_ASSERT_EQ_INT(ct_model_mem_predict(&cl, &tp4, &a41, &pl, NULL, &l3, &err), CT_ERR_ARG);
        CT_ASSERT_STR_CONTAINS(err.msg, "tp = 4 does not divide the 2 key/value heads");
    }
    /* refusals, with the model's own codes */
    pl.recompute = CT_RECOMPUTE_BLOCK, pl.split_backward = 1;
    CT_ASSERT_EQ_INT(ct_model_mem_predict(&c, &one, &at0, &pl, NULL, &a, &err), CT_ERR_UNSUPPORTED);
    CT_ASSERT_STR_CONTAINS(err.msg, "split backward");
    pl.recompute = CT_RECOMPUTE_ATTENTION, pl.attention = CT_ATTN_FUSED;
    CT_ASSERT_EQ_INT(ct_model_mem_predict(&c, &one, &at0, &pl, NULL, &a, &err), CT_ERR_UNSUPPORTED);
    CT_ASSERT_STR_CONTAINS(err.msg, "drop nothing");
    pl.split_backward = 0, pl.attention = CT_ATTN_AUTO;
    CT_ASSERT_OK(ct_model_mem_predict(&c, &one, &at0, &pl, NULL, &a, &err), err.msg);
    CT_ASSERT_EQ_INT(a.attention_bound, 1);
    CT_ASSERT_EQ_INT(a.attention, CT_ATTN_GEMM);
    pl.slots = 0;
    CT_ASSERT_EQ_INT(ct_model_mem_predict(&c, &one, &at0, &pl, NULL, &a, &err), CT_ERR_ARG);
    pl.slots = 1, pl.max_T = 64; /* above maxT */
    CT_ASSERT_EQ_INT(ct_model_mem_predict(&c, &one, &at0, &pl, NULL, &a, &err), CT_ERR_ARG);
    pl.max_T = 32;
    ct_layout tp3 = {1, 3, 1, 0, 1};
    CT_ASSERT_EQ_INT(ct_model_mem_predict(&c, &tp3, &at0, &pl, NULL, &a, &err), CT_ERR_ARG);
    ct_recompute r;
    CT_ASSERT_EQ_INT(ct_recompute_parse("blocks", &r), CT_ERR_ARG);
    CT_ASSERT_OK(ct_recompute_parse("attention", &r), "parse");
    CT_ASSERT_EQ_INT(r, CT_RECOMPUTE_ATTENTION);
}

int main(void) {
    test_formula();
    test_layouts();
    ct_test_devices ds;
    ct_device *dev = ct_test_device_open(&ds, NULL);
    if (!dev) return ct_test_end("test_engine_mem");
    test_allocated(dev);
    ct_mem_stats ms;
    ct_device_mem_stats(dev, &ms);
    CT_ASSERT_EQ_INT(ms.live_buffers, 0);
    ct_device_free(dev);
    ct_test_devices_free(&ds);
    return ct_test_end("test_engine_mem");
}
