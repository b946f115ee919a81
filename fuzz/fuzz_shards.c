/* fuzz_shards.c - fuzz target: llm.c token shards, both magics (engine/io_data.c), and the
 * loader reading them. The input is [u16 n][n bytes: shard a][the rest: shard b], written as
 * two shards, so multi-file streams (and an empty or bad second file) are covered; a stream that
 * opens is then read back through ct_data_read, checked against its vocabulary, split for
 * validation and walked by a loader whose shape the input's last bytes pick. */
#include "ct_engine_io.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t first = (size_t)data[0] | (size_t)data[1] << 8; /* bytes of the first shard */
    size_t cut = 2 + (first < size - 2 ? first : size - 2);
    ct_fuzz_file("shard_a", data + 2, cut - 2);
    const char *b = ct_fuzz_file("shard_b", data + cut, size - cut);
    char pattern[600];
    snprintf(pattern, sizeof pattern, "%.*sshard_[ab]", (int)(strlen(b) - 7), b);
    ct_err err = {0};
    ct_data *d = NULL;
    ct_status st = ct_data_open_shards(&d, pattern, &err);
    if (st != CT_OK) {
        ct_fuzz_check_fail(st, &err);
        CT_FUZZ_REQUIRE(d == NULL);
        return 0;
    }
    size_t n = ct_data_count(d);
    CT_FUZZ_REQUIRE(n >= 2 && ct_data_files(d) == 2);
    /* every token read back, and the largest is the one the stream reports */
    uint32_t buf[256], mx = 0;
    for (size_t at = 0; at < n; at += 256) {
        size_t got = ct_data_read(d, at, 256, buf);
        CT_FUZZ_REQUIRE(got == (n - at < 256 ? n - at : 256));
        for (size_t i = 0; i < got; i++)
            if (buf[i] > mx) mx = buf[i];
    }
    CT_FUZZ_REQUIRE(mx == ct_data_max_token(d));
    CT_FUZZ_REQUIRE(ct_data_read(d, n, 1, buf) == 0);
    int vocab = (int)(data[size - 1] % 2 ? 50257 : 256);
    st = ct_data_check_vocab(d, vocab, &err);
    CT_FUZZ_REQUIRE((st == CT_OK) == (mx < (uint32_t)vocab));
    if (st != CT_OK) ct_fuzz_check_fail(st, &err);
    int B = 1 + data[size - 1] % 3, T = 1 + (size > 2 ? data[size - 2] % 7 : 0);
    int accum = 1 + (size > 3 ? data[size - 3] % 2 : 0), shuffle = size > 4 && data[size - 4] % 2;
    ct_loader *ld = NULL;
    st = ct_loader_create(&ld, d, B, T, accum, shuffle, 42, &err);
    if (st == CT_OK) {
        int in[3 * 7 * 2], tg[3 * 7 * 2];
        int64_t W = ct_loader_windows(ld);
        CT_FUZZ_REQUIRE(W >= 1 && (size_t)W * B * T * accum + 1 <= n);
        for (int64_t s = 0; s < 3 * W && s < 40; s++) {
            CT_FUZZ_REQUIRE(ct_loader_window_start(ld, s) + (size_t)B * T * accum + 1 <= n);
            CT_FUZZ_REQUIRE(ct_loader_rows(ld, s, 0, B * accum, in, tg, &err) == CT_OK);
            for (int i = 0; i + 1 < B * T * accum; i++)
                if ((i + 1) % T) CT_FUZZ_REQUIRE(in[i + 1] == tg[i]);
        }
        CT_FUZZ_REQUIRE(ct_loader_rows(ld, 0, 0, B * accum + 1, in, tg, &err) == CT_ERR_ARG);
        ct_loader_free(ld);
    } else {
        CT_FUZZ_REQUIRE(n < (size_t)B * T * accum + 1);
        ct_fuzz_check_fail(st, &err);
    }
    /* the held-out tail is a copy of the stream's last quarter: its first token is the one at
       the cut, and the head keeps everything before it */
    ct_data *val = NULL;
    size_t head = n - (size_t)((double)n * 0.25);
    uint32_t at_cut = 0, got = 0, last = 0, last2 = 0;
    CT_FUZZ_REQUIRE(ct_data_read(d, head, 1, &at_cut) == 1 || head == n);
    if (head > 0) CT_FUZZ_REQUIRE(ct_data_read(d, head - 1, 1, &last) == 1);
    st = ct_data_split_tail(d, 0.25, &val, &err);
    if (st == CT_OK) {
        CT_FUZZ_REQUIRE(ct_data_count(d) == head && ct_data_count(val) == n - head);
        CT_FUZZ_REQUIRE(ct_data_read(val, 0, 1, &got) == 1 && got == at_cut);
        CT_FUZZ_REQUIRE(ct_data_read(d, head - 1, 1, &last2) == 1 && last2 == last);
        CT_FUZZ_REQUIRE(ct_data_read(d, head, 1, &got) == 0);
        ct_data_free(val);
    } else {
        CT_FUZZ_REQUIRE(val == NULL && ct_data_count(d) == n);
        ct_fuzz_check_fail(st, &err);
    }
    ct_data_free(d);
    return 0;
}
