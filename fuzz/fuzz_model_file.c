/* fuzz_model_file.c - fuzz target: model files (engine/io_model.c, io_safetensors.c): llm.c's
 * GPT-2 format (fp32 or bf16) or safetensors (F32, BF16 or F16), told apart by the content. Any
 * bytes: either a refusal with a message, or a config that passes ct_gpt_config_check with every
 * parameter (an llm.c file: exactly header + parameters; safetensors: the data inside the file),
 * which writes back in the same format (fp32) and reads again to the same parameters. */
#include "ct_engine_io.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = ct_fuzz_file("model", data, size);
    ct_err err = {0};
    ct_gpt_config cfg, cfg2;
    ct_status st = ct_model_file_read_config(path, &cfg, &err);
    if (st != CT_OK) ct_fuzz_check_fail(st, &err);
    float *p = NULL, *q = NULL;
    size_t n = 0, n2 = 0;
    ct_err err2 = {0};
    ct_status st2 = ct_model_file_read(path, &cfg2, &p, &n, &err2);
    if (st2 != CT_OK) {
        ct_fuzz_check_fail(st2, &err2);
        CT_FUZZ_REQUIRE(p == NULL && n == 0);
        return 0;
    }
    /* a file the full read takes has a header the config read takes, with the same numbers */
    CT_FUZZ_REQUIRE(st == CT_OK && !memcmp(&cfg, &cfg2, sizeof cfg));
    size_t sizes[CT_GPT_NUM_TENSORS];
    CT_FUZZ_REQUIRE(n == ct_gpt_param_sizes(&cfg, sizes));
    int safetensors = ct_safetensors_sniff(data, size);
    int32_t version = 0;
    if (size >= 8) memcpy(&version, data + 4, 4);
    CT_FUZZ_REQUIRE(safetensors ? size >= 8 + 2 * n : size == 1024 + (version == 5 ? 2 : 4) * n);
    char out[600];
    snprintf(out, sizeof out, "%s.out%s", path, safetensors ? ".safetensors" : "");
    CT_FUZZ_REQUIRE(ct_model_file_write(out, &cfg, p, &err) == CT_OK);
    CT_FUZZ_REQUIRE(ct_model_file_read(out, &cfg2, &q, &n2, &err) == CT_OK);
    CT_FUZZ_REQUIRE(n2 == n && !memcmp(&cfg, &cfg2, sizeof cfg) && !memcmp(p, q, 4 * n));
    remove(out);
    free(p);
    free(q);
    return 0;
}
