/* fuzz_hf_config.c - fuzz target: Hugging Face's config.json (engine/files/io_hf_config.c, over
 * the JSON reader io_json.c). Any bytes: a refusal with a message, or a config that passes
 * ct_gpt_config_check, whose config.json as the engine writes it parses to the same config. */
#include "ct_engine_io.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ct_err err = {0};
    ct_gpt_config cfg, cfg2;
    ct_status st = ct_hf_config_parse((const char *)data, size, "config.json", &cfg, &err);
    if (st != CT_OK) {
        ct_fuzz_check_fail(st, &err);
        return 0;
    }
    CT_FUZZ_REQUIRE(ct_gpt_config_check(&cfg, "parsed", &err) == CT_OK);
    CT_FUZZ_REQUIRE(cfg.padded_vocab >= cfg.vocab && cfg.padded_vocab % 128 == 0 && !cfg.experts);
    char *text = ct_hf_config_format(&cfg, CT_FILE_BF16);
    CT_FUZZ_REQUIRE(text != NULL);
    CT_FUZZ_REQUIRE(ct_hf_config_parse(text, strlen(text), "again", &cfg2, &err) == CT_OK);
    CT_FUZZ_REQUIRE(!memcmp(&cfg, &cfg2, sizeof cfg));
    free(text);
    return 0;
}
