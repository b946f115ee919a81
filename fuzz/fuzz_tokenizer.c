/* fuzz_tokenizer.c - fuzz target: llm.c's GPT-2 tokenizer file (engine/io_tokenizer.c). A file
 * that opens decodes every id of its vocabulary to 1..255 bytes and refuses ids outside it. */
#include "ct_engine_io.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = ct_fuzz_file("tokenizer", data, size);
    ct_err err = {0};
    ct_tokenizer *t = NULL;
    ct_status st = ct_tokenizer_open(&t, path, &err);
    if (st != CT_OK) {
        ct_fuzz_check_fail(st, &err);
        CT_FUZZ_REQUIRE(t == NULL);
        return 0;
    }
    int V = ct_tokenizer_vocab(t), eot = ct_tokenizer_eot(t);
    CT_FUZZ_REQUIRE(V >= 1 && eot >= -1 && eot < V);
    size_t total = 0;
    for (int i = 0; i < V; i++) {
        size_t len = 0;
        const char *s = ct_tokenizer_decode(t, i, &len);
        CT_FUZZ_REQUIRE(s && len >= 1 && len <= 255 && s[len] == '\0');
        total += 1 + len;
    }
    CT_FUZZ_REQUIRE(total + 1024 == size); /* every byte accounted for */
    CT_FUZZ_REQUIRE(!ct_tokenizer_decode(t, V, NULL) && !ct_tokenizer_decode(t, -1, NULL));
    ct_tokenizer_free(t);
    return 0;
}
