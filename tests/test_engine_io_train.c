/* test_engine_io_train.c - the training plumbing, host only: option parsing and its errors, the
 * generated help, LR schedules against their closed forms, the FLOPs formula against a count
 * done by hand from the shapes, the JSON Lines writer, the RNG's determinism and sampling's
 * distribution against the softmax it should follow. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ct_engine_train.h"
#include "ct_test.h"

static void test_opts(void) {
    ct_err err = {0};
    ct_train_params p = ct_train_params_default();
    CT_ASSERT_EQ_INT(p.layers, 4);
    CT_ASSERT_NEAR(p.beta2, 0.95, 0);
    CT_ASSERT_NEAR(p.weight_decay, 0.1, 0);
    CT_ASSERT_NEAR(p.grad_clip, 1.0, 0);
    CT_ASSERT(strcmp(p.lr_schedule, "cosine") == 0);
    char *good[] = {"--layers", "6", "--lr=3e-4", "--data", "x_*.bin", "--steps", "1e3",
                    "--lr-schedule", "linear"};
    CT_ASSERT(!ct_train_given(&p, "layers") && !ct_train_given(&p, "lr"));
    CT_ASSERT_OK(ct_train_params_parse(&p, 9, good, &err), err.msg);
    CT_ASSERT_EQ_INT(p.layers, 6);
    /* the flags given are recorded, by either spelling; the others, and names not in the
     * table, are not */
    CT_ASSERT(ct_train_given(&p, "layers") && ct_train_given(&p, "lr") &&
              ct_train_given(&p, "steps") && ct_train_given(&p, "lr-schedule"));
    CT_ASSERT(!ct_train_given(&p, "heads") && !ct_train_given(&p, "seq") &&
              !ct_train_given(&p, "no-such-flag"));
    CT_ASSERT_NEAR(p.lr, 3e-4, 0);
    CT_ASSERT(strcmp(p.data, "x_*.bin") == 0);
    CT_ASSERT_EQ_INT(p.steps, 1000);
    struct {
        int argc;
        char *argv[3];
        const char *msg;
    } bad[] = {
        {2, {"--layrs", "3"}, "unknown flag '--layrs'"},
        {2, {"--layers", "three"}, "--layers: 'three' is not an integer"},
        {2, {"--layers", "2.5"}, "not an integer"},
        {2, {"--lr", "fast"}, "--lr: 'fast' is not a number"},
        {2, {"--lr", "nan"}, "not a number"},
        {1, {"--steps"}, "--steps needs a value"},
        {1, {"stray"}, "unexpected argument 'stray'"},
        {2, {"--layers", "99999999999"}, "not an integer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ct_train_params q = ct_train_params_default();
        CT_ASSERT_EQ_INT(ct_opts_parse(ct_train_opts, ct_train_opts_count, &q, NULL, bad[i].argc,
                                       bad[i].argv, &err),
                         CT_ERR_ARG);
        CT_ASSERT_STR_CONTAINS(err.msg, bad[i].msg);
    }
    char *h[] = {"--layers", "2", "--help"};
    CT_ASSERT(ct_opts_wants_help(3, h));
    CT_ASSERT(!ct_opts_wants_help(2, h));
    /* Help lists every flag with its default; the format lists every flag with its value. */
    char buf[16384];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    ct_opts_help(f, ct_train_opts, ct_train_opts_count);
    fclose(f);
    const char *flags[] = {"layers", "heads", "dim", "seq", "vocab", "init", "data", "text",
                           "val-data", "batch", "total-batch", "steps", "lr", "lr-schedule",
                           "warmup", "min-lr-frac", "beta1", "beta2", "eps", "weight-decay",
                           "grad-clip", "seed", "shuffle", "eval-every", "sample-every", "save",
                           "save-every", "resume", "save-model", "metrics", "device",
                           "peak-tflops"};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        char want[64];
        snprintf(want, sizeof want, "--%s ", flags[i]);
        CT_ASSERT_STR_CONTAINS(buf, want);
    }
    CT_ASSERT_STR_CONTAINS(buf, "(default: 0.95)");
    size_t need = ct_opts_format(buf, sizeof buf, ct_train_opts, ct_train_opts_count, &p);
    CT_ASSERT_EQ_INT(need, strlen(buf));
    CT_ASSERT(strncmp(buf, "layers=6\n", 9) == 0);
    CT_ASSERT_STR_CONTAINS(buf, "lr=0.0003\n");
}

static void test_lr(void) {
    ct_err err = {0};
    ct_lr_schedule s;
    CT_ASSERT_OK(ct_lr_schedule_parse("cosine", &s, &err), err.msg);
    CT_ASSERT_EQ_INT(s, CT_LR_COSINE);
    CT_ASSERT_EQ_INT(ct_lr_schedule_parse("exp", &s, &err), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(err.msg, "'exp'");
    const double lr = 1e-3, fr = 0.1;
    const int W = 10, S = 110;
    for (int i = 0; i < W; i++)
        CT_ASSERT_NEAR(ct_lr_at(CT_LR_COSINE, lr, W, S, fr, i), lr * (i + 1) / W, 1e-15);
    CT_ASSERT_NEAR(ct_lr_at(CT_LR_COSINE, lr, W, S, fr, W), lr, 1e-15);
    CT_ASSERT_NEAR(ct_lr_at(CT_LR_COSINE, lr, W, S, fr, 60), lr * fr + 0.5 * (lr - lr * fr), 1e-15);
    CT_ASSERT_NEAR(ct_lr_at(CT_LR_COSINE, lr, W, S, fr, S), lr * fr, 1e-15);
    CT_ASSERT_NEAR(ct_lr_at(CT_LR_COSINE, lr, W, S, fr, 35),
                   lr * fr + 0.5 * (1 + cos(acos(-1.0) * 0.25)) * (lr - lr * fr), 1e-15);
    CT_ASSERT_NEAR(ct_lr_at(CT_LR_LINEAR, lr, W, S, fr, 35), lr - 0.25 * (lr - lr * fr), 1e-15);
    CT_ASSERT_NEAR(ct_lr_at(CT_LR_CONSTANT, lr, W, S, fr, 100), lr, 0);
    CT_ASSERT_NEAR(ct_lr_at(CT_LR_CONSTANT, lr, 0, S, fr, 0), lr, 0);
    CT_ASSERT_NEAR(ct_lr_at(CT_LR_COSINE, lr, 0, S, fr, 0), lr, 1e-15);
}

static void test_flops(void) {
    ct_gpt_config c = {.max_seq = 1024, .vocab = 50257, .padded_vocab = 50304, .layers = 12,
                       .heads = 12, .channels = 768};
    /* GPT-2 124M as llm.c counts it (wte padded): 124,475,904 parameters. */
    CT_ASSERT_EQ_INT(ct_gpt_param_count(&c), 124475904);
    double f = ct_train_flops_per_token(&c, 64);
    CT_ASSERT_NEAR(f, 6.0 * 124475904 + 12.0 * 12 * 768 * 64, 0.5);
}

static void test_metrics(void) {
    ct_err err = {0};
    char path[256];
    snprintf(path, sizeof path, "/tmp/ct_test_metrics_%ld.jsonl", (long)getpid());
    ct_metrics *m = NULL;
    CT_ASSERT_OK(ct_metrics_open(&m, path, 0, &err), err.msg);
    ct_step_metrics s = {.step = 3, .loss = 2.5, .lr = 1e-3, .grad_norm = 0.75, .ms = 12.5,
                         .tokens_per_s = 4096, .tflops = 0.01, .mfu = 0.02, .mem_bytes = 12345};
    CT_ASSERT_OK(ct_metrics_train(m, &s), "train");
    s.loss = NAN;
    CT_ASSERT_OK(ct_metrics_train(m, &s), "train");
    char esc[64];
    ct_json_escape(esc, sizeof esc, "a\"b\\c\n");
    CT_ASSERT(strcmp(esc, "\"a\\\"b\\\\c\\u000a\"") == 0);
    CT_ASSERT_OK(ct_metrics_record(m, "eval", "\"step\":3,\"val_loss\":2.25"), "eval");
    ct_metrics_close(m);
    char buf[2048] = {0};
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    CT_ASSERT_STR_CONTAINS(buf, "{\"type\":\"train\",\"step\":3,\"loss\":2.5,\"lr\":0.001,"
                                "\"grad_norm\":0.75,\"ms\":12.5,\"tokens_per_s\":4096,"
                                "\"tflops\":0.01,\"mfu\":0.02,\"mem_bytes\":12345}\n");
    CT_ASSERT_STR_CONTAINS(buf, "\"loss\":null");
    CT_ASSERT_STR_CONTAINS(buf, "{\"type\":\"eval\",\"step\":3,\"val_loss\":2.25}\n");
    int lines = 0;
    for (char *p = buf; *p; p++) lines += *p == '\n';
    CT_ASSERT_EQ_INT(lines, 3);
    remove(path);
    /* No path: a writer that writes nothing. */
    CT_ASSERT_OK(ct_metrics_open(&m, "", 0, &err), err.msg);
    CT_ASSERT_OK(ct_metrics_train(m, &s), "null writer");
    ct_metrics_close(m);
    CT_ASSERT_EQ_INT(ct_metrics_open(&m, "/nonexistent_dir/x.jsonl", 0, &err), CT_ERR_IO);
}

static void test_sampling(void) {
    ct_rng a, b;
    ct_rng_seed(&a, 5);
    ct_rng_seed(&b, 5);
    int same = 1;
    for (int i = 0; i < 100; i++) same &= ct_rng_u64(&a) == ct_rng_u64(&b);
    CT_ASSERT(same);
    ct_rng_seed(&b, 6);
    CT_ASSERT(ct_rng_u64(&a) != ct_rng_u64(&b));
    double mean = 0;
    for (int i = 0; i < 10000; i++) mean += ct_rng_uniform(&a);
    CT_ASSERT_NEAR(mean / 10000, 0.5, 0.02);

    float logits[6] = {0.5f, 2.0f, -1.0f, 1.5f, 1.0f, -3.0f};
    CT_ASSERT_EQ_INT(ct_sample_token(logits, 6, 0.0, 0, &a), 1);
    CT_ASSERT_EQ_INT(ct_sample_token(logits, 6, 1.0, 1, &a), 1);
    /* Top-3 at temperature 0.7: frequencies follow softmax over {1, 3, 4}; others never. */
    enum { DRAWS = 40000 };
    int count[6] = {0};
    for (int i = 0; i < DRAWS; i++) count[ct_sample_token(logits, 6, 0.7, 3, &a)]++;
    double z = exp(2.0 / 0.7) + exp(1.5 / 0.7) + exp(1.0 / 0.7);
    CT_ASSERT_EQ_INT(count[0] + count[2] + count[5], 0);
    CT_ASSERT_NEAR((double)count[1] / DRAWS, exp(2.0 / 0.7) / z, 0.01);
    CT_ASSERT_NEAR((double)count[3] / DRAWS, exp(1.5 / 0.7) / z, 0.01);
    CT_ASSERT_NEAR((double)count[4] / DRAWS, exp(1.0 / 0.7) / z, 0.01);
    /* All tokens at temperature 1. */
    memset(count, 0, sizeof count);
    for (int i = 0; i < DRAWS; i++) count[ct_sample_token(logits, 6, 1.0, 0, &a)]++;
    double zz = 0;
    for (int i = 0; i < 6; i++) zz += exp(logits[i]);
    for (int i = 0; i < 6; i++) CT_ASSERT_NEAR((double)count[i] / DRAWS, exp(logits[i]) / zz, 0.01);
}

int main(void) {
    test_opts();
    test_lr();
    test_flops();
    test_metrics();
    test_sampling();
    return ct_test_end("test_engine_io_train");
}
