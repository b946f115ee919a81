/* fuzz_hf_llama_model.c - fuzz target: a Hugging Face Llama model.safetensors (engine/files/
 * io_hf.c: the names, q, k, v and gate, up stacked into the table's rows, the untied lm_head,
 * over the container io_safetensors_file.c), read from a directory whose config.json is the tiny
 * Llama model's (fuzz_hf.h). Any bytes: a refusal with a
 * message, or every parameter of that model, which written back as a Hugging Face directory
 * reads again to the same values. */
#include "fuzz_hf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ct_gpt_config cfg, cfg2, want = ct_fuzz_hf_llama_config();
    const char *dir = ct_fuzz_hf_dir_of("hf_llama_model", &want);
    char path[700], out[700];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "wb");
    CT_FUZZ_REQUIRE(f && (size == 0 || fwrite(data, 1, size, f) == size) && fclose(f) == 0);
    ct_err err = {0};
    float *p = NULL, *q = NULL;
    size_t n = 0, n2 = 0;
    ct_status st = ct_model_file_read(dir, &cfg, &p, &n, &err);
    if (st != CT_OK) {
        ct_fuzz_check_fail(st, &err);
        CT_FUZZ_REQUIRE(p == NULL && n == 0);
        return 0;
    }
    size_t sizes[CT_GPT_NUM_TENSORS];
    CT_FUZZ_REQUIRE(!memcmp(&cfg, &want, sizeof cfg) && n == ct_gpt_param_sizes(&cfg, sizes));
    for (size_t i = (size_t)cfg.vocab * cfg.channels; i < sizes[0]; i++)
        CT_FUZZ_REQUIRE(p[i] == 0);
    snprintf(out, sizeof out, "%s_out/", dir);
    CT_FUZZ_REQUIRE(ct_model_file_write(out, &cfg, p, &err) == CT_OK);
    CT_FUZZ_REQUIRE(ct_model_file_read(out, &cfg2, &q, &n2, &err) == CT_OK);
    CT_FUZZ_REQUIRE(n2 == n && !memcmp(&cfg, &cfg2, sizeof cfg) && !memcmp(p, q, 4 * n));
    free(p);
    free(q);
    return 0;
}
