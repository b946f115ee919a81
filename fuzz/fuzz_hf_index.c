/* fuzz_hf_index.c - fuzz target: model.safetensors.index.json, the index of a sharded Hugging
 * Face model (engine/files/io_hf.c). The directory holds the tiny model's config.json
 * (fuzz_hf.h) and two shards, model.safetensors and other.safetensors, each the whole model
 * (written once by the engine), so an index may place any tensor in either. Any bytes: a
 * refusal with a message (a weight_map that misplaces a tensor, names a path or another file,
 * leaves a tensor out, ...), or the model's exact parameters. */
#include "fuzz_hf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = ct_fuzz_hf_dir("hf_index");
    char path[700], shard[720], other[720];
    size_t n0 = 0;
    float *p0 = ct_fuzz_hf_params(&n0);
    ct_gpt_config want = ct_fuzz_hf_config();
    ct_err err = {0};
    snprintf(shard, sizeof shard, "%s/model.safetensors", dir);
    snprintf(other, sizeof other, "%s/other.safetensors", dir);
    struct stat sb;
    if (stat(other, &sb) != 0) {
        char sub[700];
        snprintf(sub, sizeof sub, "%s/", dir);
        CT_FUZZ_REQUIRE(ct_model_file_write(sub, &want, p0, &err) == CT_OK);
        unsigned char *b = NULL;
        size_t nb = 0;
        CT_FUZZ_REQUIRE(ct_file_read_all(shard, &b, &nb, &err) == CT_OK);
        CT_FUZZ_REQUIRE(ct_file_write_atomic(other, b, nb, &err) == CT_OK);
        free(b);
    }
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "wb");
    CT_FUZZ_REQUIRE(f && (size == 0 || fwrite(data, 1, size, f) == size) && fclose(f) == 0);
    ct_gpt_config cfg;
    float *p = NULL;
    size_t n = 0;
    ct_status st = ct_model_file_read(path, &cfg, &p, &n, &err);
    if (st != CT_OK) {
        ct_fuzz_check_fail(st, &err);
        CT_FUZZ_REQUIRE(p == NULL && n == 0);
    } else {
        CT_FUZZ_REQUIRE(!memcmp(&cfg, &want, sizeof cfg) && n == n0 && !memcmp(p, p0, 4 * n));
    }
    free(p);
    free(p0);
    return 0;
}
