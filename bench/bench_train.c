/* bench_train.c - training-step throughput of the GPT-2 model on one OpenCL device: tokens/s,
 * achieved TFLOP/s and MFU for fixed configurations, then a per-op time split.
 *
 *   bench_train [--config tiny|124m|all] [--steps N] [--warmup N] [--peak-tflops X]
 *               [--profile-steps N] [--device SPEC] [--recompute none|attention|block|all]
 *               [--attention gemm|fused] [--precision fp32|bf16] [--gemm auto|clblast|portable|mma]
 *               [--tf32 0|1] [--seq T] [--batch B] [--layers L]
 *
 * Configurations (GPT-2 vocabulary: V=50257, Vp=50304, maxT=1024):
 *   tiny: L=4, C=256, NH=4, T=256, B=4;     124m: L=12, C=768, NH=12, T=64, B=4.
 * A step is the engine's own (the executor's trivial list on one device: zero_grad + forward
 * with the loss read back + backward + AdamW with clip 1.0 and decay 0.1), timed to its end; the mean and the best step are reported (on a shared machine the best
 * step is the least disturbed estimate).
 * FLOPs per token are ct_train_flops_per_token (6 N + 12 L C T). The peak for MFU is
 * --peak-tflops, else the device's GEMM rate at each configuration's matmul shapes
 * (ct_measure_gemm_tflops, the peak train_gpt's MFU uses), measured before it runs: the line
 * "peak" says which. The time split runs extra steps with a device finish after every op (host
 * timers), so its total is a little above the plain step time; GEMM buckets also show their
 * achieved GFLOP/s (attention counts the full T x T products the batched GEMMs compute). Each result also goes out as one
 * JSON line prefixed "JSON " for scripts.
 *
 * --recompute MODE runs the configurations with that activation recomputation (all: the three
 * modes' models built side by side and their steps interleaved, then a table of each mode's
 * step time and activation memory against none's; their losses must agree bitwise). Activation memory is the arena the model allocated (device category
 * "activations": slots x slot + scratch, checked against the memory model's prediction), and
 * its layers' part: L x the bytes a block keeps + the recompute scratch (one block's dropped
 * tensors), which is what recomputation changes; the rest (the head's logits, the backward's
 * scratch) is the same in every mode. --seq, --batch, --layers override the configuration's
 * (e.g. --seq 1024 --batch 1 for the long-sequence figures). --gemm and --tf32 are train_gpt's
 * (ct_gemm_plan_make: auto times the paths on the model's shapes); left out, the model runs the
 * default paths unmeasured (CLBlast, bf16 the portable kernel); the line "gemm paths" says
 * which ran per shape. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine.h"

static double now_s(void) { return ct_time_now(); }

typedef struct bench_cfg {
    const char *name;
    ct_gpt_config cfg;
    int B, T;
} bench_cfg;

static const bench_cfg CONFIGS[] = {
    {"tiny", {1024, 50257, 50304, 4, 4, 256, 0, 0, 0, 0, 0, 0, 0, 0}, 4, 256},
    {"124m", {1024, 50257, 50304, 12, 12, 768, 0, 0, 0, 0, 0, 0, 0, 0}, 4, 64},
};

/* GEMM FLOPs per step behind a profiling bucket (0 for the non-GEMM ones). */
static double bucket_flops(const char *name, const ct_gpt_config *c, int B, int T) {
    double BT = (double)B * T, C = c->channels, L = c->layers;
    double f = 0;
    if (strstr(name, "matmul_qkv")) f = 2 * BT * C * 3 * C * L;
    else if (strstr(name, "matmul_attproj")) f = 2 * BT * C * C * L;
    else if (strstr(name, "matmul_fc")) f = 2 * BT * C * 4 * C * L; /* fc and fcproj alike */
    else if (strstr(name, "matmul_logits")) f = 2 * BT * C * c->padded_vocab;
    else if (strstr(name, "attention")) f = 4 * BT * T * C * L; /* QK^T and PV, full squares */
    if (strstr(name, "_bwd")) f *= 2;
    return f;
}

static int run_config(ct_device *dev, const bench_cfg *bc, int steps, int warmup, int psteps,
                      double peak, const char *peak_src, ct_recompute rcm, ct_attn_path ap,
                      ct_precision prec, const char *gemm, int tf32) {
    ct_err err = {0};
    ct_layout lay = {1, 1, 1, 0, 1};
    ct_coords at = {0, 0, 0, 0};
    ct_model *m = NULL;
    ct_exec *x = NULL;
    ct_schedule *sched = NULL;
    ct_adamw_hp hp = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    ct_step_result res = {0};
    int B = bc->B, T = bc->T, rc = 1;
    int *tok = malloc(sizeof(int) * B * T), *tg = malloc(sizeof(int) * B * T);
    double t0 = now_s();
    ct_model_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.max_B = B, plan.max_T = T, plan.slots = 1, plan.attention = ap, plan.recompute = rcm;
    plan.precision = prec;
    plan.gemm = gemm, plan.tf32 = tf32;
    ct_mem_stats m0;
    ct_device_mem_stats(dev, &m0);
    if (ct_model_create_plan(&m, &bc->cfg, &lay, &at, dev, &plan, &err)) {
        fprintf(stderr, "%s: %s\n", bc->name, err.msg);
        goto done;
    }
    ct_mem_predict mp;
    ct_mem_stats m1;
    ct_device_mem_stats(dev, &m1);
    if (ct_model_mem_predict(&bc->cfg, &lay, &at, &plan, NULL, &mp, &err)) {
        fprintf(stderr, "%s: memory model: %s\n", bc->name, err.msg);
        goto done;
    }
    double act = (double)(m1.current[CT_MEM_ACTIVATIONS] - m0.current[CT_MEM_ACTIVATIONS]);
    double layers = (double)bc->cfg.layers * (double)ct_model_layer_bytes(m) +
                    (double)ct_model_recompute_bytes(m);
    if (act != (double)mp.device[CT_MEM_ACTIVATIONS]) {
        fprintf(stderr, "%s: activation bytes allocated %.0f, predicted %llu\n", bc->name, act,
                (unsigned long long)mp.device[CT_MEM_ACTIVATIONS]);
        goto done;
    }
    /* the engine's own step: the executor on the 1x1x1 layout with the trivial list */
    if (ct_exec_create(&x, m, NULL, NULL, &err) ||
        ct_sched_make(CT_SCHED_TRIVIAL, 1, 1, 1, &sched, &err)) {
        fprintf(stderr, "%s: %s\n", bc->name, err.msg);
        goto done;
    }
    if (ct_model_init_random(m, 1337)) goto fail;
    uint64_t s = 42;
    for (int i = 0; i < B * T + 1; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int v = (int)((s >> 33) % (uint64_t)bc->cfg.vocab);
        if (i < B * T) tok[i] = v;
        if (i > 0) tg[i - 1] = v;
    }
    double setup = now_s() - t0;
    float loss = 0, first = 0;
    double tsteady = 0, best = 1e30;
    for (int i = 0; i < warmup + steps; i++) {
        double ts = now_s();
        if (i == warmup) tsteady = ts;
        if (ct_exec_step(x, sched, tok, tg, B, T, &hp, i + 1, &res)) goto fail_x;
        if (i >= warmup && now_s() - ts < best) best = now_s() - ts;
        loss = (float)res.loss;
        if (i == 0) first = loss;
    }
    double el = now_s() - tsteady;
    double ms = 1e3 * el / steps, tps = (double)B * T * steps / el;
    double best_ms = 1e3 * best, best_tps = (double)B * T / best;
    double fpt = ct_train_flops_per_token(&bc->cfg, T);
    double tflops = fpt * tps / 1e12;
    double mfu = peak > 0 ? tflops / peak : 0;
    double best_mfu = peak > 0 ? fpt * best_tps / 1e12 / peak : 0;
    ct_mem_stats ms_;
    ct_device_mem_stats(dev, &ms_);
    printf("\n== %s: L=%d C=%d NH=%d T=%d B=%d V=%d Vp=%d, %.2fM parameters (setup %.1f s), "
           "attention %s, recompute %s, precision %s\n",
           bc->name, bc->cfg.layers, bc->cfg.channels, bc->cfg.heads, T, B, bc->cfg.vocab,
           bc->cfg.padded_vocab, ct_model_num_params(m) / 1e6, setup,
           ct_attn_path_name(ct_model_attention(m, NULL)), ct_recompute_name(rcm),
           ct_precision_name(prec));
    printf("gemm paths: %s\n", ct_model_gemm_note(m));
    printf("activations: %.1f MiB allocated (= predicted), of which the layers %.1f MiB (%d x %.2f "
           "MiB + %.2f MiB recompute scratch); slot %.1f MiB, scratch %.1f MiB\n",
           act / 1048576.0, layers / 1048576.0, bc->cfg.layers,
           ct_model_layer_bytes(m) / 1048576.0, ct_model_recompute_bytes(m) / 1048576.0,
           ct_model_slot_bytes(m) / 1048576.0, ct_model_scratch_bytes(m) / 1048576.0);
    printf("%d steps after %d warm-up: %.1f ms/step (best %.1f), %.0f tokens/s (best %.0f), "
           "%.3f TFLOP/s, MFU %.1f%% (best %.1f%%) of %.3f TFLOP/s (%s); loss %.4f -> %.4f; "
           "device memory peak %.1f MiB\n",
           steps, warmup, ms, best_ms, tps, best_tps, tflops, 100 * mfu, 100 * best_mfu, peak,
           peak_src, first, loss, ms_.total_peak / 1048576.0);
    printf("JSON {\"config\":\"%s\",\"impl\":\"cltrain\",\"ms_per_step\":%.2f,"
           "\"best_ms_per_step\":%.2f,\"tokens_per_s\":%.1f,\"best_tokens_per_s\":%.1f,"
           "\"tflops\":%.4f,\"mfu\":%.4f,\"best_mfu\":%.4f,\"peak_tflops\":%.4f,\"steps\":%d,"
           "\"T\":%d,\"B\":%d,\"L\":%d,\"attention\":\"%s\",\"recompute\":\"%s\","
           "\"act_bytes\":%.0f,\"act_layer_bytes\":%.0f}\n",
           bc->name, ms, best_ms, tps, best_tps, tflops, mfu, best_mfu, peak, steps, T, B,
           bc->cfg.layers, ct_attn_path_name(ct_model_attention(m, NULL)), ct_recompute_name(rcm),
           act, layers);
    if (psteps > 0) {
        ct_model_profile_enable(m, 1);
        ct_model_profile_reset(m);
        double p0 = now_s();
        for (int i = 0; i < psteps; i++)
            if (ct_exec_step(x, sched, tok, tg, B, T, &hp, warmup + steps + i + 1, &res))
                goto fail_x;
        double ptot = 1e3 * (now_s() - p0) / psteps;
        ct_model_op_time ot[64];
        int n = ct_model_profile_get(m, ot, 64);
        double sum = 0;
        for (int i = 0; i < n; i++) sum += ot[i].ms / psteps;
        printf("time split over %d profiled steps (%.1f ms/step with a finish after every op; "
               "ops sum to %.1f ms):\n",
               psteps, ptot, sum);
        printf("  %-20s %10s %7s %8s %10s\n", "op", "ms/step", "share", "calls", "GFLOP/s");
        for (int i = 0; i < n; i++) {
            double f = bucket_flops(ot[i].name, &bc->cfg, B, T), ms1 = ot[i].ms / psteps;
            char rate[32] = "";
            if (f > 0 && ms1 > 0) snprintf(rate, sizeof rate, "%.1f", f / (ms1 * 1e-3) / 1e9);
            printf("  %-20s %10.2f %6.1f%% %8ld %10s\n", ot[i].name, ms1, 100 * ms1 / sum,
                   ot[i].calls / psteps, rate);
        }
        ct_model_profile_enable(m, 0);
    }
    rc = 0;
    goto done;
fail_x:
    fprintf(stderr, "%s: %s\n", bc->name, ct_exec_errmsg(x));
    goto done;
fail:
    fprintf(stderr, "%s: %s\n", bc->name, ct_model_errmsg(m));
done:
    ct_sched_free(sched);
    ct_exec_free(x);
    ct_model_free(m);
    free(tok);
    free(tg);
    return rc;
}

/* --recompute all: the three modes' models side by side on the device, their steps interleaved
 * (none, attention, block, none, ...) so that a change of the machine's load between them
 * touches every mode alike; the same tokens, so the losses must agree bitwise. */
static int compare_modes(ct_device *dev, const bench_cfg *bc, int steps, int warmup,
                         ct_attn_path ap) {
    enum { NM = 3 };
    ct_err err = {0};
    ct_layout lay = {1, 1, 1, 0, 1};
    ct_coords at = {0, 0, 0, 0};
    ct_model *m[NM] = {0};
    ct_exec *x[NM] = {0};
    ct_schedule *sched = NULL;
    ct_adamw_hp hp = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f};
    double act[NM], layers[NM], best[NM], sum[NM], loss[NM];
    int B = bc->B, T = bc->T, rc = 1;
    int *tok = malloc(sizeof(int) * B * T), *tg = malloc(sizeof(int) * B * T);
    if (ct_sched_make(CT_SCHED_TRIVIAL, 1, 1, 1, &sched, &err)) goto fail_err;
    for (int k = 0; k < NM; k++) {
        ct_model_plan plan;
        memset(&plan, 0, sizeof plan);
        plan.max_B = B, plan.max_T = T, plan.slots = 1, plan.attention = ap;
        plan.recompute = (ct_recompute)k;
        ct_mem_stats m0, m1;
        ct_mem_predict mp;
        ct_device_mem_stats(dev, &m0);
        if (ct_model_create_plan(&m[k], &bc->cfg, &lay, &at, dev, &plan, &err) ||
            ct_model_mem_predict(&bc->cfg, &lay, &at, &plan, NULL, &mp, &err))
            goto fail_err;
        ct_device_mem_stats(dev, &m1);
        act[k] = (double)(m1.current[CT_MEM_ACTIVATIONS] - m0.current[CT_MEM_ACTIVATIONS]);
        if (act[k] != (double)mp.device[CT_MEM_ACTIVATIONS]) {
            fprintf(stderr, "%s: activation bytes allocated %.0f, predicted %llu\n", bc->name,
                    act[k], (unsigned long long)mp.device[CT_MEM_ACTIVATIONS]);
            goto done;
        }
        layers[k] = (double)bc->cfg.layers * (double)ct_model_layer_bytes(m[k]) +
                    (double)ct_model_recompute_bytes(m[k]);
        if (ct_exec_create(&x[k], m[k], NULL, NULL, &err)) goto fail_err;
        if (ct_model_init_random(m[k], 1337)) {
            fprintf(stderr, "%s: %s\n", bc->name, ct_model_errmsg(m[k]));
            goto done;
        }
        best[k] = 1e30, sum[k] = 0;
    }
    uint64_t s = 42;
    for (int i = 0; i < B * T + 1; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int v = (int)((s >> 33) % (uint64_t)bc->cfg.vocab);
        if (i < B * T) tok[i] = v;
        if (i > 0) tg[i - 1] = v;
    }
    for (int i = 0; i < warmup + steps; i++)
        for (int k = 0; k < NM; k++) {
            ct_step_result res;
            double t0 = now_s();
            if (ct_exec_step(x[k], sched, tok, tg, B, T, &hp, i + 1, &res)) {
                fprintf(stderr, "%s: %s\n", bc->name, ct_exec_errmsg(x[k]));
                goto done;
            }
            double dt = now_s() - t0;
            loss[k] = res.loss;
            if (i >= warmup) {
                sum[k] += dt;
                if (dt < best[k]) best[k] = dt;
            }
        }
    printf("\n== %s: L=%d C=%d NH=%d T=%d B=%d, attention %s: the three modes interleaved, %d "
           "steps each after %d warm-up; last losses %.7f %.7f %.7f (%s)\n",
           bc->name, bc->cfg.layers, bc->cfg.channels, bc->cfg.heads, T, B,
           ct_attn_path_name(ct_model_attention(m[0], NULL)), steps, warmup, loss[0], loss[1],
           loss[2], loss[0] == loss[1] && loss[0] == loss[2] ? "bitwise equal" : "DIFFER");
    printf("  recompute | ms/step mean (best) | best x none | activations MiB | none / it | "
           "layers MiB | none / it\n");
    for (int k = 0; k < NM; k++) {
        printf("  %-9s | %9.1f (%9.1f) | %6.3f | %9.1f | %5.2f | %9.1f | %5.2f\n",
               ct_recompute_name((ct_recompute)k), 1e3 * sum[k] / steps, 1e3 * best[k],
               best[k] / best[0], act[k] / 1048576.0, act[0] / act[k], layers[k] / 1048576.0,
               layers[0] / layers[k]);
        printf("JSON {\"config\":\"%s\",\"T\":%d,\"B\":%d,\"L\":%d,\"attention\":\"%s\","
               "\"recompute\":\"%s\",\"ms_per_step\":%.2f,\"best_ms_per_step\":%.2f,"
               "\"act_bytes\":%.0f,\"act_layer_bytes\":%.0f,\"loss\":%.9g}\n",
               bc->name, T, B, bc->cfg.layers, ct_attn_path_name(ct_model_attention(m[k], NULL)),
               ct_recompute_name((ct_recompute)k), 1e3 * sum[k] / steps, 1e3 * best[k], act[k],
               layers[k], loss[k]);
    }
    rc = loss[0] == loss[1] && loss[0] == loss[2] ? 0 : 1;
    goto done;
fail_err:
    fprintf(stderr, "%s: %s\n", bc->name, err.msg);
done:
    for (int k = 0; k < NM; k++) ct_exec_free(x[k]), ct_model_free(m[k]);
    ct_sched_free(sched);
    free(tok);
    free(tg);
    return rc;
}

int main(int argc, char **argv) {
    const char *config = "all", *spec = NULL, *recompute = "none", *attention = "gemm";
    const char *precision = "fp32", *gemm = NULL;
    int tf32 = 0;
    int steps = 5, warmup = 2, psteps = 2, seq = 0, batch = 0, layers = 0;
    double peak = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: bench_train [--config tiny|124m|all (all)] [--steps N (5)] [--warmup N "
                   "(2)] [--profile-steps N (2)] [--peak-tflops X (0: measure)] [--device SPEC] "
                   "[--recompute none|attention|block|all (none)] [--attention gemm|fused "
                   "(gemm)] [--precision fp32|bf16 (fp32)] [--gemm auto|clblast|portable|mma (the "
                   "defaults: clblast, bf16 portable, unmeasured)] [--tf32 0|1 (0)] [--seq T] [--batch B] [--layers L] (0: "
                   "the configuration's)\n");
            return 0;
        }
        if (!v) {
            fprintf(stderr, "bench_train: %s needs a value (see --help)\n", a);
            return 2;
        }
        if (!strcmp(a, "--config")) config = v;
        else if (!strcmp(a, "--steps")) steps = atoi(v);
        else if (!strcmp(a, "--warmup")) warmup = atoi(v);
        else if (!strcmp(a, "--profile-steps")) psteps = atoi(v);
        else if (!strcmp(a, "--peak-tflops")) peak = atof(v);
        else if (!strcmp(a, "--device")) spec = v;
        else if (!strcmp(a, "--recompute")) recompute = v;
        else if (!strcmp(a, "--attention")) attention = v;
        else if (!strcmp(a, "--precision")) precision = v;
        else if (!strcmp(a, "--gemm")) gemm = v;
        else if (!strcmp(a, "--tf32")) tf32 = atoi(v);
        else if (!strcmp(a, "--seq")) seq = atoi(v);
        else if (!strcmp(a, "--batch")) batch = atoi(v);
        else if (!strcmp(a, "--layers")) layers = atoi(v);
        else {
            fprintf(stderr, "bench_train: unknown flag '%s' (see --help)\n", a);
            return 2;
        }
        i++;
    }
    ct_recompute rcm = CT_RECOMPUTE_NONE;
    ct_attn_path ap = CT_ATTN_GEMM;
    int all_modes = !strcmp(recompute, "all");
    if (steps < 1 || warmup < 0 || psteps < 0 || seq < 0 || batch < 0 || layers < 0 ||
        (strcmp(config, "all") && strcmp(config, "tiny") && strcmp(config, "124m"))) {
        fprintf(stderr, "bench_train: bad --config/--steps/--warmup/--profile-steps/--seq/--batch/"
                        "--layers value\n");
        return 2;
    }
    if ((!all_modes && ct_recompute_parse(recompute, &rcm) != CT_OK) ||
        ct_attn_path_parse(attention, &ap) != CT_OK || ap == CT_ATTN_AUTO) {
        fprintf(stderr, "bench_train: --recompute must be none, attention, block or all, "
                        "--attention gemm or fused (got '%s', '%s')\n",
                recompute, attention);
        return 2;
    }
    ct_precision prec = CT_PRECISION_FP32;
    if (ct_precision_parse(precision, &prec) != CT_OK || (all_modes && prec != CT_PRECISION_FP32)) {
        fprintf(stderr, "bench_train: --precision must be fp32 or bf16 (bf16 not with --recompute "
                        "all; got '%s')\n",
                precision);
        return 2;
    }
    if ((all_modes && (gemm || tf32)) || tf32 < 0 || tf32 > 1) {
        fprintf(stderr, "bench_train: --tf32 is 0 or 1; --gemm and --tf32 are not for --recompute "
                        "all\n");
        return 2;
    }
    ct_err err = {0};
    ct_device_info *list = NULL;
    int n = 0, pick = 0, npick = 0;
    ct_device *dev = NULL;
    if (ct_device_list(&list, &n, &err) ||
        ct_device_select(list, n, spec ? spec : ct_device_spec_env(), 1, &pick, &npick, &err) ||
        ct_device_open(&dev, &list[pick], NULL, &err)) {
        fprintf(stderr, "bench_train: %s\n", err.msg);
        return 2;
    }
    printf("device: %s (%s), CLBlast tuning: %s\n", list[pick].name, list[pick].platform,
           ct_device_tuning_source(dev));
    const char *src = "--peak-tflops";
    int measure = peak <= 0;
    if (!measure) printf("peak: %.3f TFLOP/s (%s)\n", peak, src);
    int rc = 0;
    for (size_t i = 0; i < sizeof CONFIGS / sizeof CONFIGS[0]; i++) {
        if (strcmp(config, "all") && strcmp(config, CONFIGS[i].name)) continue;
        bench_cfg bc = CONFIGS[i];
        if (seq) bc.T = seq;
        if (batch) bc.B = batch;
        if (layers) bc.cfg.layers = layers;
        if (bc.T > bc.cfg.max_seq) bc.cfg.max_seq = bc.T;
        if (measure) { /* the peak train_gpt's MFU uses: the model's matmul shapes at B x T rows */
            peak = ct_measure_gemm_tflops(dev, &bc.cfg, bc.B * bc.T);
            src = "measured GEMM rate at the model's matmul shapes";
            printf("peak: %.3f TFLOP/s (%s, %s)\n", peak, src, bc.name);
        }
        if (all_modes) rc |= compare_modes(dev, &bc, steps, warmup, ap);
        else rc |= run_config(dev, &bc, steps, warmup, psteps, peak, src, rcm, ap, prec, gemm, tf32);
    }
    ct_device_free(dev);
    ct_device_list_free(list);
    return rc ? 1 : 0;
}
