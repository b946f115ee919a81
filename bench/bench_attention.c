/* bench_attention.c - causal attention forward + backward on one OpenCL device: the fused path
 * (engine/kernels/attention_fused.cl) against the GEMM path (permute, batched CLBlast GEMMs,
 * softmax row kernels), and the activation bytes one transformer layer keeps for backward with
 * each path (from the model's arena plan).
 *
 *   bench_attention [--T 256,1024,2048] [--B 1] [--NH 12] [--hs 64] [--reps N] [--device SPEC]
 *                   [--blocks FBQ,FBK,FNT,FVW,BBQ,BBK,BNT,BVW] [--search] [--mma on|emulated]
 *
 * --mma: the fused attention's mma variant (attention_mma.cl; "on": the NVIDIA instructions,
 * refused where the mma GEMM path's rule or probe fails, with its reason; "emulated": the
 * portable stand-ins, for checking the bench itself anywhere) against the scalar fused kernels,
 * both on bf16 activations (lse and D fp32), in the same run; the GEMM path is not timed then.
 *
 * Each measurement is the best of --reps (default 3) after one warm-up call: the forward and
 * backward of one layer, timed to a device finish (the best, since the machine may be shared).
 * GFLOP/s count the causal products the fused path computes (forward QK^T and PV; backward QK^T
 * and dO V^T twice, dV, dK, dQ) over the lower triangle, the same count for both paths, so the
 * figures compare times. The fused path's block shape is --blocks, else the device's tuned one
 * (ct_attn_tune: the stored record, or the start-up search), or with --search a fresh search.
 * Each row also goes out as one JSON line prefixed "JSON " for scripts. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine.h"

typedef struct bufs {
    ct_buffer *inp, *out, *qkvr, *att, *vacc, *dout, *dinp, *dqkvr, *datt, *dvacc, *lse, *dsum;
} bufs;

static void bufs_free(bufs *b) {
    ct_buffer **p = (ct_buffer **)b;
    for (size_t i = 0; i < sizeof *b / sizeof *p; i++) ct_buffer_free(p[i]);
    memset(b, 0, sizeof *b);
}

static ct_view V(ct_buffer *b) { return ct_view_of(ct_buffer_mem(b), 0); }

static int alloc(ct_device *dev, ct_buffer **b, size_t floats, const char *name) {
    if (ct_buffer_alloc(dev, CT_MEM_WORKSPACE, name, (floats ? floats : 1) * sizeof(float), b)) {
        fprintf(stderr, "%s\n", ct_device_errmsg(dev));
        return 1;
    }
    return 0;
}

/* A bf16 view of an activation buffer (the fused path's bf16 variant), else fp32. */
static ct_view A(ct_buffer *b, int bf16) {
    return bf16 ? ct_view_bf16(ct_buffer_mem(b), 0) : V(b);
}

/* One layer's forward + backward on path `fused` (activations bf16 when bf16): best seconds of
 * `reps` (forward, backward). */
static int time_path(ct_device *dev, bufs *b, int fused, int bf16, const ct_attn_cfg *cfg, int B,
                     int T, int C, int NH, int reps, double *fwd, double *bwd) {
    *fwd = *bwd = 1e30;
    for (int r = 0; r <= reps; r++) {
        double t0 = ct_time_now();
        ct_status st = fused ? ct_attention_fused_forward(dev, cfg, A(b->out, bf16), V(b->lse),
                                                          A(b->inp, bf16), B, T, C, NH)
                             : ct_attention_forward(dev, V(b->out), V(b->qkvr), V(b->att),
                                                    V(b->inp), V(b->vacc), B, T, C, NH);
        if (st == CT_OK) st = ct_device_finish(dev);
        double t1 = ct_time_now();
        if (st == CT_OK)
            st = fused ? ct_attention_fused_backward(dev, cfg, A(b->dinp, bf16), V(b->dsum),
                                                     A(b->dout, bf16), A(b->inp, bf16),
                                                     A(b->out, bf16), V(b->lse), B, T, C, NH)
                       : ct_attention_backward(dev, V(b->dinp), V(b->dqkvr), V(b->datt),
                                               V(b->dvacc), V(b->dout), V(b->qkvr), V(b->att), B,
                                               T, C, NH);
        if (st == CT_OK) st = ct_device_finish(dev);
        double t2 = ct_time_now();
        if (st != CT_OK) {
            fprintf(stderr, "%s path: %s\n", fused ? "fused" : "gemm", ct_device_errmsg(dev));
            return 1;
        }
        if (r > 0) { /* the first call compiles and warms up */
            if (t1 - t0 < *fwd) *fwd = t1 - t0;
            if (t2 - t1 < *bwd) *bwd = t2 - t1;
        }
    }
    return 0;
}

/* Activation bytes one block keeps for backward on this path at (B, T), from the arena plan of a
 * one-block model with a byte vocabulary (the per-layer part does not depend on it). */
static size_t layer_bytes(ct_device *dev, int B, int T, int C, int NH, ct_attn_path path) {
    ct_gpt_config cfg = {T, 256, 256, 1, NH, C, 0, 0, 0, 0, 0, 0, 0, 0};
    ct_model_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.max_B = B, plan.max_T = T, plan.slots = 1, plan.attention = path;
    ct_layout lay = {1, 1, 1, 0, 1};
    ct_coords at = {0, 0, 0, 0};
    ct_model *m = NULL;
    ct_err err = {0};
    if (ct_model_create_plan(&m, &cfg, &lay, &at, dev, &plan, &err)) {
        fprintf(stderr, "layer bytes: %s\n", err.msg);
        return 0;
    }
    size_t n = ct_model_layer_bytes(m);
    ct_model_free(m);
    return n;
}

static int parse_list(const char *s, int *out, int max) {
    int n = 0;
    while (s && *s && n < max) {
        char *end = NULL;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1) return -1;
        out[n++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

int main(int argc, char **argv) {
    int Ts[8] = {256, 1024, 2048}, nT = 3, B = 1, NH = 12, hs = 64, reps = 3, search = 0;
    const char *spec = NULL, *mma_arg = NULL;
    int blk[8], nblk = 0, mma = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--search")) { search = 1; continue; }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            puts("bench_attention [--T 256,1024,2048] [--B 1] [--NH 12] [--hs 64] [--reps N] "
                 "[--device SPEC]\n                [--blocks FBQ,FBK,FNT,FVW,BBQ,BBK,BNT,BVW] "
                 "[--search] [--mma on|emulated]\n  the fused attention path against the GEMM path, forward + "
                 "backward of one layer (see bench/bench_attention.c)");
            return 0;
        }
        if (!v) {
            fprintf(stderr, "bench_attention: %s needs a value (see the header of bench_attention.c)\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--T")) nT = parse_list(v, Ts, 8);
        else if (!strcmp(a, "--B")) B = atoi(v);
        else if (!strcmp(a, "--NH")) NH = atoi(v);
        else if (!strcmp(a, "--hs")) hs = atoi(v);
        else if (!strcmp(a, "--reps")) reps = atoi(v);
        else if (!strcmp(a, "--device")) spec = v;
        else if (!strcmp(a, "--blocks")) nblk = parse_list(v, blk, 8);
        else if (!strcmp(a, "--mma")) mma_arg = v;
        else {
            fprintf(stderr, "bench_attention: unknown flag %s\n", a);
            return 2;
        }
    }
    if (mma_arg) {
        mma = !strcmp(mma_arg, "on") ? CT_ATTN_MMA_PTX
              : !strcmp(mma_arg, "emulated") ? CT_ATTN_MMA_EMULATED : -1;
        if (mma < 0 || !ct_attn_mma_supports(hs)) {
            fprintf(stderr, "bench_attention: --mma is on or emulated (got '%s'), at a head size "
                            "the variant has (32, 64, 128; got %d)\n", mma_arg, hs);
            return 2;
        }
    }
    if (nT < 1 || B < 1 || NH < 1 || hs < 1 || reps < 1 || (nblk != 0 && nblk != 8)) {
        fprintf(stderr, "bench_attention: --T is a comma list of lengths, --B/--NH/--hs/--reps "
                        "positive, --blocks eight numbers FBQ,FBK,FNT,FVW,BBQ,BBK,BNT,BVW\n");
        return 2;
    }
    ct_err err = {0};
    ct_device_info *list = NULL;
    int n = 0, pick = 0, npick = 0;
    if (!spec) spec = ct_device_spec_env();
    if (ct_device_list(&list, &n, &err) || ct_device_select(list, n, spec, 1, &pick, &npick, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    ct_device *dev = NULL;
    ct_device_opts o = ct_device_opts_default();
    if (ct_device_open(&dev, &list[pick], &o, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int C = NH * hs;
    printf("device: %s (%s, driver %s), CLBlast tuning: %s\n", list[pick].name,
           list[pick].platform, list[pick].driver_version, ct_device_tuning_source(dev));
    ct_attn_cfg cfg;
    char src[300];
    if (nblk == 8) {
        ct_attn_cfg c = {{blk[0], blk[1], blk[2], blk[3]}, {blk[4], blk[5], blk[6], blk[7]}, 0};
        cfg = c;
        snprintf(src, sizeof src, "--blocks");
    } else if (ct_attn_tune(dev, hs, search, &cfg, src, sizeof src) != CT_OK) {
        fprintf(stderr, "%s\n", ct_device_errmsg(dev));
        return 1;
    }
    printf("fused blocks (head size %d): forward %dx%d/%dx%d, backward %dx%d/%dx%d (%s)\n", hs,
           cfg.fwd.bq, cfg.fwd.bk, cfg.fwd.nt, cfg.fwd.vw, cfg.bwd.bq, cfg.bwd.bk, cfg.bwd.nt,
           cfg.bwd.vw, src);
    if (mma == CT_ATTN_MMA_PTX && ct_gemm_path_check(dev, CT_GEMM_MMA) != CT_OK) {
        fprintf(stderr, "bench_attention: --mma on: %s\n", ct_device_errmsg(dev));
        return 1;
    }
    ct_attn_cfg mcfg = cfg;
    mcfg.mma = mma;
    if (mma)
        printf("%5s %3s %3s %4s | %9s %9s %8s | %9s %9s %8s | %6s   (bf16 activations; mma %s)\n",
               "T", "B", "NH", "hs", "fused fwd", "fused bwd", "GFLOP/s", "mma fwd", "mma bwd",
               "GFLOP/s", "speed", mma == CT_ATTN_MMA_PTX ? "on" : "emulated");
    else
        printf("%5s %3s %3s %4s | %9s %9s %8s | %9s %9s %8s | %6s | %12s %12s\n", "T", "B", "NH",
               "hs", "gemm fwd", "gemm bwd", "GFLOP/s", "fused fwd", "fused bwd", "GFLOP/s",
               "speed", "layer gemm", "layer fused");
    int rc = 0;
    for (int k = 0; k < nT && rc == 0; k++) {
        int T = Ts[k];
        size_t BTC = (size_t)B * T * C, A = (size_t)B * NH * T * T, BNT = (size_t)B * NH * T;
        bufs b;
        memset(&b, 0, sizeof b);
        if (alloc(dev, &b.inp, 3 * BTC, "inp") || alloc(dev, &b.out, BTC, "out") ||
            alloc(dev, &b.qkvr, 3 * BTC, "qkvr") || alloc(dev, &b.att, A, "att") ||
            alloc(dev, &b.vacc, BTC, "vaccum") || alloc(dev, &b.dout, BTC, "dout") ||
            alloc(dev, &b.dinp, 3 * BTC, "dinp") || alloc(dev, &b.dqkvr, 3 * BTC, "dqkvr") ||
            alloc(dev, &b.datt, A, "datt") || alloc(dev, &b.dvacc, BTC, "dvaccum") ||
            alloc(dev, &b.lse, BNT, "lse") || alloc(dev, &b.dsum, BNT, "dsum")) {
            bufs_free(&b);
            rc = 1;
            break;
        }
        /* inputs of a few units (scores neither flat nor one-hot) */
        float *h = malloc(3 * BTC * sizeof(float));
        uint64_t s = 7;
        for (size_t i = 0; i < 3 * BTC; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            h[i] = (float)((double)(s >> 11) * 0x1.0p-53 * 3.0 - 1.5);
        }
        if (mma) { /* the same values in bf16, in the first half of each buffer */
            uint16_t *u = (uint16_t *)h;
            for (size_t i = 0; i < 3 * BTC; i++) u[i] = ct_bf16_from_f32(h[i]);
        }
        size_t es = mma ? 2 : sizeof(float);
        ct_buffer_write(b.inp, 0, h, 3 * BTC * es);
        ct_buffer_write(b.dout, 0, h, BTC * es);
        free(h);
        /* causal products: forward 2 (QK^T, PV), backward 5 (QK^T, dO V^T, dV, dK, dQ) + 2 (the
         * dQ kernel's recomputed QK^T and dO V^T), each 2 T^2 hs / 2 per head */
        double half = (double)B * NH * T * (T + 1) / 2.0 * hs * 2.0;
        double flops = 9.0 * half;
        double gf, gb, ff, fb;
        if (mma) { /* the scalar fused kernels and the variant, both bf16 */
            if (time_path(dev, &b, 1, 1, &cfg, B, T, C, NH, reps, &gf, &gb) ||
                time_path(dev, &b, 1, 1, &mcfg, B, T, C, NH, reps, &ff, &fb))
                rc = 1;
            bufs_free(&b);
            if (rc) break;
            printf("%5d %3d %3d %4d | %7.2fms %7.2fms %8.1f | %7.2fms %7.2fms %8.1f | %5.2fx\n", T,
                   B, NH, hs, gf * 1e3, gb * 1e3, flops / (gf + gb) / 1e9, ff * 1e3, fb * 1e3,
                   flops / (ff + fb) / 1e9, (gf + gb) / (ff + fb));
            printf("JSON {\"T\":%d,\"B\":%d,\"NH\":%d,\"hs\":%d,\"mma\":\"%s\","
                   "\"fused_bf16_fwd_ms\":%.3f,\"fused_bf16_bwd_ms\":%.3f,\"mma_fwd_ms\":%.3f,"
                   "\"mma_bwd_ms\":%.3f,\"speedup\":%.3f}\n",
                   T, B, NH, hs, mma_arg, gf * 1e3, gb * 1e3, ff * 1e3, fb * 1e3,
                   (gf + gb) / (ff + fb));
            fflush(stdout);
            continue;
        }
        if (time_path(dev, &b, 0, 0, NULL, B, T, C, NH, reps, &gf, &gb) ||
            time_path(dev, &b, 1, 0, &cfg, B, T, C, NH, reps, &ff, &fb)) {
            bufs_free(&b);
            rc = 1;
            break;
        }
        bufs_free(&b);
        size_t lg = layer_bytes(dev, B, T, C, NH, CT_ATTN_GEMM);
        size_t lf = layer_bytes(dev, B, T, C, NH, CT_ATTN_FUSED);
        printf("%5d %3d %3d %4d | %7.2fms %7.2fms %8.1f | %7.2fms %7.2fms %8.1f | %5.2fx | %9.1fMiB "
               "%9.1fMiB\n",
               T, B, NH, hs, gf * 1e3, gb * 1e3, flops / (gf + gb) / 1e9, ff * 1e3, fb * 1e3,
               flops / (ff + fb) / 1e9, (gf + gb) / (ff + fb), lg / 1048576.0, lf / 1048576.0);
        printf("JSON {\"T\":%d,\"B\":%d,\"NH\":%d,\"hs\":%d,\"gemm_fwd_ms\":%.3f,\"gemm_bwd_ms\":%.3f,"
               "\"fused_fwd_ms\":%.3f,\"fused_bwd_ms\":%.3f,\"speedup\":%.3f,"
               "\"layer_bytes_gemm\":%zu,\"layer_bytes_fused\":%zu}\n",
               T, B, NH, hs, gf * 1e3, gb * 1e3, ff * 1e3, fb * 1e3, (gf + gb) / (ff + fb), lg, lf);
        fflush(stdout);
    }
    ct_device_free(dev);
    ct_device_list_free(list);
    return rc;
}
