/* test_engine_io.c - the engine's file formats and data loader, host only: token shards written
 * byte by byte here (not by the library) and read back, every malformed-shard case, the loader's
 * windows against the formula of llm.c's unshuffled loader, shuffling as a permutation, the
 * llm.c model file round trip and its validation, checkpoints (round trip, CRC corruption in
 * every section, truncation at many lengths, no temporary file left), and the tokenizer. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ct_engine_io.h"
#include "ct_test.h"

static char dir[256];

static void path_of(char *buf, size_t len, const char *name) {
    snprintf(buf, len, "%s/%s", dir, name);
}

/* A shard written by hand: header ints then raw tokens, independent of ct_data_write_shard. */
static void write_raw_shard(const char *path, int32_t magic, int32_t version, int32_t count,
                            const uint32_t *tok, size_t n, int width) {
    FILE *f = fopen(path, "wb");
    int32_t h[256] = {0};
    h[0] = magic;
    h[1] = version;
    h[2] = count;
    fwrite(h, 4, 256, f);
    for (size_t i = 0; i < n; i++) {
        if (width == 2) {
            uint16_t v = (uint16_t)tok[i];
            fwrite(&v, 2, 1, f);
        } else {
            fwrite(&tok[i], 4, 1, f);
        }
    }
    fclose(f);
}

static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

static int dir_has_tmp(void) {
    char cmd[400];
    snprintf(cmd, sizeof cmd, "ls %s | grep -q '\\.tmp\\.'", dir);
    return system(cmd) == 0;
}

static void test_crc(void) {
    /* The standard check value of CRC-32/ISO-HDLC. */
    CT_ASSERT_EQ_INT(ct_crc32(0, "123456789", 9), 0xCBF43926u);
    /* Chunked equals whole. */
    uint32_t a = ct_crc32(0, "12345", 5);
    CT_ASSERT_EQ_INT(ct_crc32(a, "6789", 4), 0xCBF43926u);
    CT_ASSERT_EQ_INT(ct_crc32(0, "", 0), 0);
}

static void test_shards(void) {
    ct_err err = {0};
    enum { N1 = 1000, N2 = 777 };
    static uint32_t t1[N1], t2[N2], all[N1 + N2];
    for (int i = 0; i < N1; i++) t1[i] = (uint32_t)((i * 37 + 11) % 50257);
    for (int i = 0; i < N2; i++) t2[i] = (uint32_t)((i * 101 + 5) % 50257);
    memcpy(all, t1, sizeof t1);
    memcpy(all + N1, t2, sizeof t2);
    char p1[300], p2[300], pat[300];
    /* Names chosen so that creation order differs from sorted order. */
    path_of(p2, sizeof p2, "tok_001.bin");
    path_of(p1, sizeof p1, "tok_000.bin");
    write_raw_shard(p2, 20240801, 7, N2, t2, N2, 4);
    write_raw_shard(p1, 20240520, 1, N1, t1, N1, 2);
    path_of(pat, sizeof pat, "tok_*.bin");
    ct_data *d = NULL;
    CT_ASSERT_OK(ct_data_open_shards(&d, pat, &err), err.msg);
    if (d) {
        CT_ASSERT_EQ_INT(ct_data_count(d), N1 + N2);
        CT_ASSERT_EQ_INT(ct_data_files(d), 2);
        static uint32_t got[N1 + N2 + 5];
        CT_ASSERT_EQ_INT(ct_data_read(d, 0, N1 + N2 + 5, got), N1 + N2);
        CT_ASSERT(memcmp(got, all, sizeof all) == 0);
        /* A read across the shard boundary. */
        CT_ASSERT_EQ_INT(ct_data_read(d, N1 - 3, 6, got), 6);
        CT_ASSERT(memcmp(got, all + N1 - 3, 6 * 4) == 0);
        CT_ASSERT_EQ_INT(ct_data_read(d, N1 + N2, 1, got), 0);
        uint32_t mx = 0;
        for (int i = 0; i < N1 + N2; i++) mx = all[i] > mx ? all[i] : mx;
        CT_ASSERT_EQ_INT(ct_data_max_token(d), mx);
        CT_ASSERT_OK(ct_data_check_vocab(d, 50257, &err), err.msg);
        CT_ASSERT_EQ_INT(ct_data_check_vocab(d, 1000, &err), CT_ERR_FORMAT);
        CT_ASSERT_STR_CONTAINS(err.msg, "outside the vocabulary of 1000");
        CT_ASSERT_STR_CONTAINS(err.msg, "tok_000.bin");
        ct_data_free(d);
    }
    /* The library's writer produces files the hand reader agrees with: compare bytes. */
    char pw[300];
    path_of(pw, sizeof pw, "written.bin");
    CT_ASSERT_OK(ct_data_write_shard(pw, t1, N1, 0, &err), err.msg);
    unsigned char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    CT_ASSERT_OK(ct_file_read_all(pw, &a, &na, &err), err.msg);
    CT_ASSERT_OK(ct_file_read_all(p1, &b, &nb, &err), err.msg);
    CT_ASSERT(na == nb && a && b && memcmp(a, b, na) == 0);
    free(a);
    free(b);

    /* Malformed shards. */
    char bad[300];
    path_of(bad, sizeof bad, "bad_trunc.bin");
    write_raw_shard(bad, 20240520, 1, 100, t1, 99, 2); /* one token short */
    CT_ASSERT_EQ_INT(ct_data_open_shards(&d, bad, &err), CT_ERR_FORMAT);
    CT_ASSERT_STR_CONTAINS(err.msg, "truncated");
    CT_ASSERT(d == NULL);
    path_of(bad, sizeof bad, "bad_trail.bin");
    write_raw_shard(bad, 20240520, 1, 100, t1, 101, 2);
    CT_ASSERT_EQ_INT(ct_data_open_shards(&d, bad, &err), CT_ERR_FORMAT);
    CT_ASSERT_STR_CONTAINS(err.msg, "trailing");
    path_of(bad, sizeof bad, "bad_magic.bin");
    write_raw_shard(bad, 12345, 1, 100, t1, 100, 2);
    CT_ASSERT_EQ_INT(ct_data_open_shards(&d, bad, &err), CT_ERR_FORMAT);
    CT_ASSERT_STR_CONTAINS(err.msg, "bad magic");
    path_of(bad, sizeof bad, "bad_version.bin");
    write_raw_shard(bad, 20240520, 7, 100, t1, 100, 2);
    CT_ASSERT_EQ_INT(ct_data_open_shards(&d, bad, &err), CT_ERR_FORMAT);
    CT_ASSERT_STR_CONTAINS(err.msg, "version");
    path_of(bad, sizeof bad, "bad_short.bin");
    FILE *f = fopen(bad, "wb");
    fwrite("abc", 1, 3, f);
    fclose(f);
    CT_ASSERT_EQ_INT(ct_data_open_shards(&d, bad, &err), CT_ERR_FORMAT);
    CT_ASSERT_STR_CONTAINS(err.msg, "too short");
    path_of(bad, sizeof bad, "nothing_*.bin");
    CT_ASSERT_EQ_INT(ct_data_open_shards(&d, bad, &err), CT_ERR_NOT_FOUND);
    CT_ASSERT_STR_CONTAINS(err.msg, "nothing_*.bin");
}

static void test_text_and_split(void) {
    ct_err err = {0};
    char p[300];
    path_of(p, sizeof p, "text.txt");
    const char *txt = "hello, world\n\xff\x80 bytes";
    FILE *f = fopen(p, "wb");
    fputs(txt, f);
    fclose(f);
    ct_data *d = NULL, *val = NULL;
    CT_ASSERT_OK(ct_data_open_text(&d, p, &err), err.msg);
    if (!d) return;
    size_t n = strlen(txt);
    CT_ASSERT_EQ_INT(ct_data_count(d), n);
    uint32_t got[64];
    CT_ASSERT_EQ_INT(ct_data_read(d, 0, 64, got), n);
    for (size_t i = 0; i < n; i++) CT_ASSERT_EQ_INT(got[i], (unsigned char)txt[i]);
    CT_ASSERT_EQ_INT(ct_data_max_token(d), 0xff);
    CT_ASSERT_OK(ct_data_check_vocab(d, 256, &err), err.msg);
    CT_ASSERT_OK(ct_data_split_tail(d, 0.25, &val, &err), err.msg);
    if (val) {
        size_t nv = (size_t)(n * 0.25);
        CT_ASSERT_EQ_INT(ct_data_count(val), nv);
        CT_ASSERT_EQ_INT(ct_data_count(d), n - nv);
        CT_ASSERT_EQ_INT(ct_data_read(val, 0, 1, got), 1);
        CT_ASSERT_EQ_INT(got[0], (unsigned char)txt[n - nv]);
        /* The head no longer reads past its new end. */
        CT_ASSERT_EQ_INT(ct_data_read(d, 0, 64, got), n - nv);
        ct_data_free(val);
    }
    CT_ASSERT_EQ_INT(ct_data_split_tail(d, 1.5, &val, &err), CT_ERR_ARG);
    ct_data_free(d);
    path_of(p, sizeof p, "missing.txt");
    CT_ASSERT_EQ_INT(ct_data_open_text(&d, p, &err), CT_ERR_IO);
    CT_ASSERT_STR_CONTAINS(err.msg, "missing.txt");
}

static void test_loader(void) {
    ct_err err = {0};
    enum { NT = 1000 };
    static uint32_t tok[NT];
    for (int i = 0; i < NT; i++) tok[i] = (uint32_t)i; /* token == position */
    ct_data *d = NULL;
    CT_ASSERT_OK(ct_data_open_tokens(&d, tok, NT, "ramp", &err), err.msg);
    const int B = 3, T = 7, A = 2; /* N = 42 tokens per step, W = 999/42 = 23 windows */
    const int N = A * B * T;
    ct_loader *ld = NULL;
    CT_ASSERT_OK(ct_loader_create(&ld, d, B, T, A, 0, 0, &err), err.msg);
    if (!ld) return;
    CT_ASSERT_EQ_INT(ct_loader_windows(ld), (NT - 1) / N);
    int in[6 * 7], tg[6 * 7];
    /* llm.c's unshuffled loader: micro-batch m of step s reads B*T+1 tokens at (s*A+m)*B*T. */
    int ok = 1;
    for (int s = 0; s < 23; s++)
        for (int m = 0; m < A; m++) {
            ct_loader_rows(ld, s, m * B, B, in, tg, &err);
            for (int i = 0; i < B * T; i++) {
                int pos = (s * A + m) * B * T + i;
                if (in[i] != pos || tg[i] != pos + 1) ok = 0;
            }
        }
    CT_ASSERT_MSG(ok, "unshuffled rows differ from llm.c's sequential windows");
    /* Past the end it wraps to the start. */
    ct_loader_rows(ld, 23, 0, 1, in, tg, &err);
    CT_ASSERT_EQ_INT(in[0], 0);
    ct_loader_rows(ld, 23 + 5, 2, 1, in, tg, &err);
    CT_ASSERT_EQ_INT(in[0], 5 * N + 2 * T);
    /* A row range equals the same rows of the whole step (data-parallel shares). */
    int all_in[6 * 7], all_tg[6 * 7];
    ct_loader_rows(ld, 4, 0, A * B, all_in, all_tg, &err);
    ct_loader_rows(ld, 4, 2, 3, in, tg, &err);
    CT_ASSERT(memcmp(in, all_in + 2 * T, 3 * T * sizeof(int)) == 0);
    CT_ASSERT(memcmp(tg, all_tg + 2 * T, 3 * T * sizeof(int)) == 0);
    CT_ASSERT_EQ_INT(ct_loader_rows(ld, 0, 5, 2, in, tg, &err), CT_ERR_ARG);
    ct_loader_free(ld);

    /* Shuffled: each epoch visits every window exactly once; the order depends on the seed and
     * the epoch, and is reproducible. */
    ct_loader *l1 = NULL, *l2 = NULL, *l3 = NULL;
    CT_ASSERT_OK(ct_loader_create(&l1, d, B, T, A, 1, 42, &err), err.msg);
    CT_ASSERT_OK(ct_loader_create(&l2, d, B, T, A, 1, 42, &err), err.msg);
    CT_ASSERT_OK(ct_loader_create(&l3, d, B, T, A, 1, 43, &err), err.msg);
    if (l1 && l2 && l3) {
        int W = (int)ct_loader_windows(l1);
        int seen[2][64] = {{0}}, same_epoch = 1, same_seed = 1, diff_seed = 0, identity = 1;
        for (int s = 0; s < 2 * W; s++) {
            size_t w = ct_loader_window_start(l1, s);
            CT_ASSERT_EQ_INT(w % N, 0);
            seen[s / W][w / N]++;
            if (ct_loader_window_start(l2, s) != w) same_seed = 0;
            if (ct_loader_window_start(l3, s) != w) diff_seed = 1;
            if (s < W && w != (size_t)s * N) identity = 0;
            if (s >= W && w != ct_loader_window_start(l1, s - W)) same_epoch = 0;
        }
        int perm = 1;
        for (int e = 0; e < 2; e++)
            for (int w = 0; w < W; w++) perm &= seen[e][w] == 1;
        CT_ASSERT_MSG(perm, "a shuffled epoch does not visit every window once");
        CT_ASSERT(same_seed);
        CT_ASSERT(diff_seed);
        CT_ASSERT(!identity);
        CT_ASSERT_MSG(!same_epoch, "two epochs used the same order");
        /* Random access out of order gives the same rows as in order. */
        ct_loader_rows(l1, 3, 0, B, in, tg, &err);
        ct_loader_rows(l2, 40, 0, B, all_in, all_tg, &err);
        ct_loader_rows(l2, 3, 0, B, all_in, all_tg, &err);
        CT_ASSERT(memcmp(in, all_in, B * T * sizeof(int)) == 0);
    }
    ct_loader_free(l1);
    ct_loader_free(l2);
    ct_loader_free(l3);
    /* Too little data for one step. */
    CT_ASSERT_EQ_INT(ct_loader_create(&ld, d, 100, 10, 1, 0, 0, &err), CT_ERR_FORMAT);
    CT_ASSERT_STR_CONTAINS(err.msg, "fewer than one step needs");
    CT_ASSERT_EQ_INT(ct_loader_create(&ld, d, 0, 10, 1, 0, 0, &err), CT_ERR_ARG);
    ct_data_free(d);
}

static void fill(float *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (float)((int)(seed >> 8) % 20001 - 10000) * 1e-4f;
    }
}

static void test_model_file(void) {
    ct_err err = {0};
    ct_gpt_config c = {.max_seq = 16, .vocab = 50, .padded_vocab = 64, .layers = 2, .heads = 2,
                       .channels = 8};
    size_t sizes[CT_GPT_NUM_TENSORS];
    size_t n = ct_gpt_param_sizes(&c, sizes);
    float *p = (float *)malloc(n * 4);
    fill(p, n, 7);
    char path[300];
    path_of(path, sizeof path, "model.bin");
    CT_ASSERT_OK(ct_model_file_write(path, &c, p, &err), err.msg);
    CT_ASSERT(!dir_has_tmp());
    /* The bytes on disk, read independently: llm.c's header then the params. */
    unsigned char *raw = NULL;
    size_t nraw = 0;
    CT_ASSERT_OK(ct_file_read_all(path, &raw, &nraw, &err), err.msg);
    CT_ASSERT_EQ_INT(nraw, 1024 + n * 4);
    if (raw && nraw == 1024 + n * 4) {
        int32_t h[8];
        memcpy(h, raw, sizeof h);
        int32_t want[8] = {20240326, 3, 16, 50, 2, 2, 8, 64};
        CT_ASSERT(memcmp(h, want, sizeof want) == 0);
        CT_ASSERT(memcmp(raw + 1024, p, n * 4) == 0);
    }
    ct_gpt_config r;
    float *q = NULL;
    size_t nq = 0;
    CT_ASSERT_OK(ct_model_file_read(path, &r, &q, &nq, &err), err.msg);
    CT_ASSERT(memcmp(&r, &c, sizeof c) == 0);
    CT_ASSERT_EQ_INT(nq, n);
    CT_ASSERT(q && memcmp(q, p, n * 4) == 0);
    free(q);

    /* Malformed files: each written by patching the good bytes. */
    struct {
        const char *what;
        int field;       /* header int to change, or -1 */
        int32_t value;
        long cut;        /* bytes to drop (or add when negative) */
        const char *msg;
    } cases[] = {
        {"magic", 0, 20240327, 0, "bad magic"},
        {"version 4", 1, 4, 0, "version 4 is not supported"},
        {"bf16 size", 1, 5, 0, "trailing data"}, /* version 5: 2 bytes a parameter */
        {"heads", 5, 3, 0, "do not divide"},
        {"zero L", 4, 0, 0, "positive"},
        {"Vp<V", 7, 32, 0, "padded vocabulary"},
        {"truncated", -1, 0, 4, "truncated"},
        {"trailing", -1, 0, -4, "trailing"},
        {"header only", -1, 0, (long)(n * 4), "truncated"},
        {"half header", -1, 0, (long)(n * 4 + 600), "too short"},
    };
    char bad[300];
    path_of(bad, sizeof bad, "bad_model.bin");
    for (size_t i = 0; raw && i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fopen(bad, "wb");
        unsigned char *copy = (unsigned char *)malloc(nraw + 4);
        memcpy(copy, raw, nraw);
        memset(copy + nraw, 0, 4);
        if (cases[i].field >= 0) memcpy(copy + 4 * cases[i].field, &cases[i].value, 4);
        fwrite(copy, 1, (size_t)((long)nraw - cases[i].cut), f);
        fclose(f);
        free(copy);
        float *x = NULL;
        size_t nx = 0;
        ct_status st = ct_model_file_read(bad, &r, &x, &nx, &err);
        CT_ASSERT_MSG(st == CT_ERR_FORMAT, "case %s: status %d", cases[i].what, st);
        CT_ASSERT_STR_CONTAINS(err.msg, cases[i].msg);
        CT_ASSERT(x == NULL);
    }
    free(raw);
    path_of(bad, sizeof bad, "no_such_model.bin");
    CT_ASSERT_EQ_INT(ct_model_file_read_config(bad, &r, &err), CT_ERR_IO);
    /* A write into a missing directory fails and leaves nothing. */
    path_of(bad, sizeof bad, "no_dir/model.bin");
    CT_ASSERT_EQ_INT(ct_model_file_write(bad, &c, p, &err), CT_ERR_IO);
    CT_ASSERT(!file_exists(bad));
    free(p);
}

static void test_checkpoint(void) {
    ct_err err = {0};
    ct_checkpoint ck;
    memset(&ck, 0, sizeof ck);
    ck.cfg = (ct_gpt_config){.max_seq = 8, .vocab = 20, .padded_vocab = 32, .layers = 1,
                             .heads = 2, .channels = 4};
    size_t sizes[CT_GPT_NUM_TENSORS];
    ck.nparams = ct_gpt_param_sizes(&ck.cfg, sizes);
    ck.params = (float *)malloc(ck.nparams * 4);
    ck.m = (float *)malloc(ck.nparams * 4);
    ck.v = (float *)malloc(ck.nparams * 4);
    fill(ck.params, ck.nparams, 1);
    fill(ck.m, ck.nparams, 2);
    fill(ck.v, ck.nparams, 3);
    ck.step = 123;
    ck.rng[0] = 1;
    ck.rng[1] = 0xFFFFFFFFFFFFFFFFull;
    ck.rng[2] = 3;
    ck.rng[3] = 4;
    ck.loader_B = 4;
    ck.loader_T = 8;
    ck.loader_accum = 2;
    ck.loader_shuffle = 1;
    ck.loader_seed = 99;
    ck.data_tokens = 123456789;
    ck.meta = strdup("lr=0.001\nseed=1\n");
    char ckdir[300], path[1300];
    path_of(ckdir, sizeof ckdir, "ckpts");
    CT_ASSERT_OK(ct_checkpoint_save_dir(ckdir, &ck, path, sizeof path, &err), err.msg);
    CT_ASSERT_STR_CONTAINS(path, "ckpt_00000123.bin");
    char found[1300];
    CT_ASSERT_OK(ct_checkpoint_find(ckdir, found, sizeof found, &err), err.msg);
    CT_ASSERT(strcmp(found, path) == 0);
    ct_checkpoint r;
    CT_ASSERT_OK(ct_checkpoint_read(found, &r, &err), err.msg);
    CT_ASSERT(memcmp(&r.cfg, &ck.cfg, sizeof ck.cfg) == 0);
    CT_ASSERT_EQ_INT(r.step, 123);
    CT_ASSERT(memcmp(r.rng, ck.rng, sizeof ck.rng) == 0);
    CT_ASSERT_EQ_INT(r.loader_B, 4);
    CT_ASSERT_EQ_INT(r.loader_T, 8);
    CT_ASSERT_EQ_INT(r.loader_accum, 2);
    CT_ASSERT_EQ_INT(r.loader_shuffle, 1);
    CT_ASSERT_EQ_INT(r.loader_seed, 99);
    CT_ASSERT_EQ_INT(r.data_tokens, 123456789);
    CT_ASSERT(r.params && memcmp(r.params, ck.params, ck.nparams * 4) == 0);
    CT_ASSERT(r.m && memcmp(r.m, ck.m, ck.nparams * 4) == 0);
    CT_ASSERT(r.v && memcmp(r.v, ck.v, ck.nparams * 4) == 0);
    CT_ASSERT(r.meta && strcmp(r.meta, ck.meta) == 0);
    ct_checkpoint_release(&r);
    ct_checkpoint_release(NULL);
    /* A later save moves 'latest'. */
    ck.step = 200;
    CT_ASSERT_OK(ct_checkpoint_save_dir(ckdir, &ck, path, sizeof path, &err), err.msg);
    CT_ASSERT_OK(ct_checkpoint_find(ckdir, found, sizeof found, &err), err.msg);
    CT_ASSERT_STR_CONTAINS(found, "ckpt_00000200.bin");
    CT_ASSERT(!dir_has_tmp());
    /* a 'latest' with a NUL byte named the directory itself (found by fuzzing); "." and ".."
     * are not checkpoint files */
    {
        char lp[1300];
        snprintf(lp, sizeof lp, "%s/latest", ckdir);
        const char *bodies[] = {"\0ckpt_00000200.bin\n", ".\n", "..", "ckpt_1\0.bin"};
        const size_t lens[] = {19, 2, 2, 12};
        for (int i = 0; i < 4; i++) {
            FILE *f = fopen(lp, "wb");
            fwrite(bodies[i], 1, lens[i], f);
            fclose(f);
            CT_ASSERT_EQ_INT(ct_checkpoint_find(ckdir, found, sizeof found, &err), CT_ERR_FORMAT);
            CT_ASSERT_STR_CONTAINS(err.msg, "malformed");
        }
        CT_ASSERT_OK(ct_checkpoint_save_dir(ckdir, &ck, path, sizeof path, &err), err.msg);
        CT_ASSERT_OK(ct_checkpoint_find(ckdir, found, sizeof found, &err), err.msg);
    }

    /* Corruption: flip one byte inside each section's payload or header; truncate at many
     * lengths. Every case must be refused with a message, and must never pass. */
    unsigned char *raw = NULL;
    size_t n = 0;
    CT_ASSERT_OK(ct_file_read_all(found, &raw, &n, &err), err.msg);
    char bad[300];
    path_of(bad, sizeof bad, "bad.ckpt");
    const char *tags[] = {"CONFIG", "STATE", "META", "PARAMS", "ADAM_M", "ADAM_V"};
    size_t at = 16;
    for (int s = 0; raw && s < 6; s++) {
        uint64_t bytes;
        memcpy(&bytes, raw + at + 8, 8);
        unsigned char *copy = (unsigned char *)malloc(n);
        memcpy(copy, raw, n);
        copy[at + 24 + bytes / 2] ^= 0x10;
        FILE *f = fopen(bad, "wb");
        fwrite(copy, 1, n, f);
        fclose(f);
        free(copy);
        ct_status st = ct_checkpoint_read(bad, &r, &err);
        CT_ASSERT_MSG(st == CT_ERR_FORMAT, "flipped byte in %s: status %d", tags[s], st);
        CT_ASSERT_STR_CONTAINS(err.msg, tags[s]);
        CT_ASSERT_STR_CONTAINS(err.msg, "CRC");
        CT_ASSERT(r.params == NULL);
        at += 24 + bytes;
    }
    int refused = 0, tried = 0;
    for (size_t cut = 1; raw && cut < n; cut += 1 + cut / 7) {
        FILE *f = fopen(bad, "wb");
        fwrite(raw, 1, n - cut, f);
        fclose(f);
        tried++;
        ct_status st = ct_checkpoint_read(bad, &r, &err);
        if (st == CT_ERR_FORMAT && (strstr(err.msg, "truncated") || strstr(err.msg, "too short")))
            refused++;
        else
            fprintf(stderr, "cut %zu: status %d msg %s\n", cut, st, err.msg);
    }
    CT_ASSERT_EQ_INT(refused, tried);
    /* Trailing bytes and a wrong magic. */
    if (raw) {
        FILE *f = fopen(bad, "wb");
        fwrite(raw, 1, n, f);
        fputc(0, f);
        fclose(f);
        CT_ASSERT_EQ_INT(ct_checkpoint_read(bad, &r, &err), CT_ERR_FORMAT);
        CT_ASSERT_STR_CONTAINS(err.msg, "trailing");
        raw[0] ^= 1;
        f = fopen(bad, "wb");
        fwrite(raw, 1, n, f);
        fclose(f);
        CT_ASSERT_EQ_INT(ct_checkpoint_read(bad, &r, &err), CT_ERR_FORMAT);
        CT_ASSERT_STR_CONTAINS(err.msg, "not a cltrain checkpoint");
    }
    free(raw);
    char nodir[300];
    path_of(nodir, sizeof nodir, "no_ckpts");
    CT_ASSERT_NE_INT(ct_checkpoint_find(nodir, found, sizeof found, &err), CT_OK);
    /* An incomplete checkpoint is refused before anything is written. */
    float *keep = ck.v;
    ck.v = NULL;
    path_of(bad, sizeof bad, "incomplete.ckpt");
    CT_ASSERT_EQ_INT(ct_checkpoint_write(bad, &ck, &err), CT_ERR_ARG);
    CT_ASSERT(!file_exists(bad));
    ck.v = keep;
    ct_checkpoint_release(&ck);
}

/* A write that fails half-way (file size limit, as a full disk would) leaves the previous file
 * untouched and no temporary file behind. */
static void test_failed_write(void) {
    ct_err err = {0};
    ct_gpt_config c = {.max_seq = 64, .vocab = 256, .padded_vocab = 256, .layers = 2, .heads = 2,
                       .channels = 32};
    size_t sizes[CT_GPT_NUM_TENSORS];
    size_t n = ct_gpt_param_sizes(&c, sizes);
    float *p = (float *)calloc(n, 4);
    char path[300];
    path_of(path, sizeof path, "fsize.bin");
    FILE *f = fopen(path, "wb");
    fputs("previous contents", f);
    fclose(f);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 64 * 1024; /* the model file is ~150 KiB */
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    int limited = setrlimit(RLIMIT_FSIZE, &lim) == 0;
    CT_ASSERT(limited);
    ct_status st1 = ct_model_file_write(path, &c, p, &err);
    char msg1[CT_ERR_MSG_MAX];
    snprintf(msg1, sizeof msg1, "%s", err.msg);
    ct_checkpoint ck;
    memset(&ck, 0, sizeof ck);
    ck.cfg = c;
    ck.nparams = n;
    ck.params = ck.m = ck.v = p;
    ct_status st2 = ct_checkpoint_write(path, &ck, &err);
    if (limited) setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    CT_ASSERT_EQ_INT(st1, CT_ERR_IO);
    CT_ASSERT_STR_CONTAINS(msg1, "fsize.bin");
    CT_ASSERT_EQ_INT(st2, CT_ERR_IO);
    unsigned char *raw = NULL;
    size_t nraw = 0;
    CT_ASSERT_OK(ct_file_read_all(path, &raw, &nraw, &err), err.msg);
    CT_ASSERT(raw && nraw == 17 && memcmp(raw, "previous contents", 17) == 0);
    free(raw);
    CT_ASSERT(!dir_has_tmp());
    /* Without the limit the same writes succeed. */
    CT_ASSERT_OK(ct_model_file_write(path, &c, p, &err), err.msg);
    CT_ASSERT_OK(ct_checkpoint_write(path, &ck, &err), err.msg);
    free(p);
}

static void test_tokenizer(void) {
    ct_err err = {0};
    const char *pieces[] = {"a", "bc", " the", "<|endoftext|>", "\xe2\x82\xac"};
    size_t lens[] = {1, 2, 4, 13, 3};
    char p[300];
    path_of(p, sizeof p, "tok.bin");
    CT_ASSERT_OK(ct_tokenizer_write(p, pieces, lens, 5, 3, &err), err.msg);
    /* Check the layout by hand: header then length-prefixed pieces. */
    unsigned char *raw = NULL;
    size_t n = 0;
    CT_ASSERT_OK(ct_file_read_all(p, &raw, &n, &err), err.msg);
    CT_ASSERT_EQ_INT(n, 1024 + 5 + 1 + 2 + 4 + 13 + 3);
    if (raw && n > 1030) {
        uint32_t h[4];
        memcpy(h, raw, 16);
        CT_ASSERT_EQ_INT(h[0], 20240328);
        CT_ASSERT_EQ_INT(h[1], 2);
        CT_ASSERT_EQ_INT(h[2], 5);
        CT_ASSERT_EQ_INT(h[3], 3);
        CT_ASSERT_EQ_INT(raw[1024], 1);
        CT_ASSERT_EQ_INT(raw[1025], 'a');
        CT_ASSERT_EQ_INT(raw[1026], 2);
    }
    ct_tokenizer *t = NULL;
    CT_ASSERT_OK(ct_tokenizer_open(&t, p, &err), err.msg);
    if (t) {
        CT_ASSERT_EQ_INT(ct_tokenizer_vocab(t), 5);
        CT_ASSERT_EQ_INT(ct_tokenizer_eot(t), 3);
        for (int i = 0; i < 5; i++) {
            size_t l = 0;
            const char *s = ct_tokenizer_decode(t, i, &l);
            CT_ASSERT(s && l == lens[i] && memcmp(s, pieces[i], l) == 0);
        }
        CT_ASSERT(ct_tokenizer_decode(t, 5, NULL) == NULL);
        CT_ASSERT(ct_tokenizer_decode(t, -1, NULL) == NULL);
        ct_tokenizer_free(t);
    }
    /* Truncated and bad-magic files. */
    char bad[300];
    path_of(bad, sizeof bad, "tok_bad.bin");
    if (raw) {
        FILE *f = fopen(bad, "wb");
        fwrite(raw, 1, n - 2, f);
        fclose(f);
        CT_ASSERT_EQ_INT(ct_tokenizer_open(&t, bad, &err), CT_ERR_FORMAT);
        CT_ASSERT_STR_CONTAINS(err.msg, "truncated");
        raw[0] ^= 1;
        f = fopen(bad, "wb");
        fwrite(raw, 1, n, f);
        fclose(f);
        CT_ASSERT_EQ_INT(ct_tokenizer_open(&t, bad, &err), CT_ERR_FORMAT);
        CT_ASSERT_STR_CONTAINS(err.msg, "bad magic");
        /* a header promising 2^24 tokens in a 1 KiB file is refused before 256 MiB of tables
         * are allocated for them (found reviewing the reader for its fuzz target) */
        raw[0] ^= 1;
        uint32_t big = 1u << 24;
        memcpy(raw + 8, &big, 4);
        f = fopen(bad, "wb");
        fwrite(raw, 1, n, f);
        fclose(f);
        CT_ASSERT_EQ_INT(ct_tokenizer_open(&t, bad, &err), CT_ERR_FORMAT);
        CT_ASSERT_STR_CONTAINS(err.msg, "hold at most");
    }
    free(raw);
    /* Version 1 has no end-of-text token. */
    CT_ASSERT_OK(ct_tokenizer_write(p, pieces, lens, 3, -1, &err), err.msg);
    CT_ASSERT_OK(ct_tokenizer_open(&t, p, &err), err.msg);
    if (t) {
        CT_ASSERT_EQ_INT(ct_tokenizer_eot(t), -1);
        ct_tokenizer_free(t);
    }
    CT_ASSERT_OK(ct_tokenizer_bytes(&t, &err), err.msg);
    if (t) {
        size_t l = 0;
        const char *s = ct_tokenizer_decode(t, 200, &l);
        CT_ASSERT(s && l == 1 && (unsigned char)s[0] == 200);
        ct_tokenizer_free(t);
    }
}

/* Directory hygiene: temporaries of dead writers go, live ones and other files stay; --keep-last
 * keeps the newest by time and never the one 'latest' names. */
static void touch_at(const char *name, const char *body, time_t when) {
    char p[400];
    path_of(p, sizeof p, name);
    FILE *f = fopen(p, "wb");
    fputs(body, f);
    fclose(f);
    struct timespec ts[2] = {{when, 0}, {when, 0}};
    utimensat(AT_FDCWD, p, ts, 0);
}

static void test_dir_hygiene(void) {
    ct_err err = {0};
    char hd[300], p[400];
    path_of(hd, sizeof hd, "hyg");
    mkdir(hd, 0777);
    pid_t dead = fork(); /* a pid that is surely gone: a child we reaped */
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    char n1[80], n2[80], n3[80], n4[80];
    snprintf(n1, sizeof n1, "hyg/ckpt_00000003.bin.tmp.%ld", (long)dead);
    snprintf(n2, sizeof n2, "hyg/latest.tmp.%ld", (long)dead);
    snprintf(n3, sizeof n3, "hyg/ckpt_00000004.bin.tmp.%ld", (long)getpid()); /* alive: us */
    snprintf(n4, sizeof n4, "hyg/notes.tmp.%ld", (long)dead);                 /* not ours */
    touch_at(n1, "0123456789", 1000);
    touch_at(n2, "x", 1000);
    touch_at(n3, "x", 1000);
    touch_at(n4, "x", 1000);
    int nrm = 0;
    uint64_t bytes = 0;
    char names[256];
    CT_ASSERT_OK(ct_checkpoint_clean_stale(hd, &nrm, &bytes, names, sizeof names, &err), err.msg);
    CT_ASSERT_EQ_INT(nrm, 2);
    CT_ASSERT_EQ_INT(bytes, 11);
    CT_ASSERT_STR_CONTAINS(names, "latest.tmp.");
    path_of(p, sizeof p, n1);
    CT_ASSERT(!file_exists(p));
    path_of(p, sizeof p, n3);
    CT_ASSERT(file_exists(p));
    path_of(p, sizeof p, n4);
    CT_ASSERT(file_exists(p));
    path_of(p, sizeof p, "no_such_dir");
    CT_ASSERT_OK(ct_checkpoint_clean_stale(p, &nrm, NULL, NULL, 0, &err), err.msg);
    CT_ASSERT_EQ_INT(nrm, 0);
    /* five checkpoints, 'latest' naming the OLDEST by time (a resume from an old one) */
    for (int k = 1; k <= 5; k++) {
        char nm[64];
        snprintf(nm, sizeof nm, "hyg/ckpt_%08d.bin", k);
        touch_at(nm, "c", 2000 + 10 * k);
    }
    touch_at("hyg/ckpt_00000002.bin", "c", 1500); /* now the oldest */
    touch_at("hyg/latest", "ckpt_00000002.bin\n", 3000);
    CT_ASSERT_OK(ct_checkpoint_prune(hd, 2, &nrm, &err), err.msg);
    CT_ASSERT_EQ_INT(nrm, 2); /* 1 and 3 go; 5, 4 (newest two) and 2 (latest) stay */
    const int stays[6] = {0, 0, 1, 0, 1, 1};
    for (int k = 1; k <= 5; k++) {
        char nm[64];
        snprintf(nm, sizeof nm, "hyg/ckpt_%08d.bin", k);
        path_of(p, sizeof p, nm);
        CT_ASSERT_MSG(file_exists(p) == stays[k], "checkpoint %d: exists %d, expected %d", k,
                      file_exists(p), stays[k]);
    }
    CT_ASSERT_EQ_INT(ct_checkpoint_prune(hd, 0, NULL, &err), CT_ERR_ARG);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/ct_test_engine_io_%ld", (long)getpid());
    mkdir(dir, 0777);
    test_crc();
    test_shards();
    test_text_and_split();
    test_loader();
    test_model_file();
    test_checkpoint();
    test_tokenizer();
    test_failed_write();
    test_dir_hygiene();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return ct_test_end("test_engine_io");
}
