/* fuzz_manifest.c - fuzz target: the sharded checkpoint (engine/files/io_shards.c): a manifest
 * and its shards. The input is [u16 n][n bytes: the manifest][u16 k][k bytes: shard 0][the rest:
 * shard 1], written as P.bin, P.shard_00000 and P.shard_00001, so manifests naming shards that
 * are missing, short, of another step or worker are covered too. A manifest that opens is
 * consistent (parameter count from its config, shards counted); every span read from it equals
 * the same span of the whole-state read (ct_checkpoint_read, which checks every shard whole) when
 * both succeed; a whole state that reads is written back in both forms (gathered, and sharded in
 * two halves of each array) and reads again to the same bits. The campaign build (CT_FUZZING)
 * lets wrong CRCs through, as for fuzz_checkpoint.c. */
#include "ct_engine_io.h"
#include "fuzz_util.h"

static size_t take(const uint8_t **data, size_t *size) {
    if (*size < 2) return 0;
    size_t n = (size_t)(*data)[0] | (size_t)(*data)[1] << 8;
    *data += 2, *size -= 2;
    return n < *size ? n : *size;
}

static int same(const ct_checkpoint *a, const ct_checkpoint *b) {
    size_t n = a->nparams * sizeof(float);
    return !memcmp(&a->cfg, &b->cfg, sizeof a->cfg) && a->step == b->step &&
           !memcmp(a->rng, b->rng, sizeof a->rng) && a->loader_B == b->loader_B &&
           a->loader_T == b->loader_T && a->loader_seed == b->loader_seed &&
           a->data_tokens == b->data_tokens && a->nparams == b->nparams &&
           !memcmp(a->params, b->params, n) && !memcmp(a->m, b->m, n) && !memcmp(a->v, b->v, n) &&
           !strcmp(a->meta, b->meta);
}

/* The state written back sharded: shard w holds [w * half, ...) of every array. */
static void write_back_sharded(const ct_checkpoint *ck, const char *man) {
    ct_err err = {0};
    size_t np = ck->nparams, half = np / 2;
    const float *arr[3] = {ck->params, ck->m, ck->v};
    ct_shard_desc d[2];
    ct_shard_range r[6];
    size_t nr = 0;
    float *pay = malloc((np ? np : 1) * 3 * sizeof(float));
    CT_FUZZ_REQUIRE(pay);
    for (int w = 0; w < 2; w++) {
        size_t lo = w ? half : 0, hi = w ? np : half, n = 0;
        for (uint32_t a = 0; a < 3; a++) {
            if (hi > lo) r[nr++] = (ct_shard_range){(uint32_t)w, a, lo, hi - lo, n};
            memcpy(pay + n, arr[a] + lo, (hi - lo) * sizeof(float));
            n += hi - lo;
        }
        char sp[700];
        ct_shard_path(sp, sizeof sp, man, w);
        CT_FUZZ_REQUIRE(ct_shard_write(sp, w, ck->step, pay, n, &d[w], &err) == CT_OK);
    }
    int32_t lay[5] = {2, 1, 1, 1, 1};
    CT_FUZZ_REQUIRE(ct_shards_manifest_write(man, ck, lay, 2, d, r, nr, &err) == CT_OK);
    ct_shard_desc_release(&d[0]);
    ct_shard_desc_release(&d[1]);
    free(pay);
    ct_checkpoint back;
    CT_FUZZ_REQUIRE(ct_checkpoint_read(man, &back, &err) == CT_OK);
    CT_FUZZ_REQUIRE(same(ck, &back));
    ct_checkpoint_release(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t nm = take(&data, &size);
    char man[512], sp[600];
    snprintf(man, sizeof man, "%s", ct_fuzz_file("m.bin", data, nm));
    data += nm, size -= nm;
    size_t n0 = take(&data, &size);
    ct_fuzz_file("m.shard_00000", data, n0);
    ct_fuzz_file("m.shard_00001", data + n0, size - n0);
    ct_shard_path(sp, sizeof sp, man, 1);
    CT_FUZZ_REQUIRE(strstr(sp, "m.shard_00001") != NULL);
    ct_err err = {0};
    ct_checkpoint head, whole;
    ct_shard_set *s = NULL;
    ct_status sw = ct_checkpoint_read(man, &whole, &err);
    if (sw != CT_OK) {
        ct_fuzz_check_fail(sw, &err);
        CT_FUZZ_REQUIRE(!whole.params && !whole.m && !whole.v && !whole.meta);
    }
    ct_status st = ct_shards_open(&s, man, &head, &err);
    if (st != CT_OK) {
        ct_fuzz_check_fail(st, &err);
        CT_FUZZ_REQUIRE(s == NULL && head.meta == NULL);
    } else {
        size_t sizes[CT_GPT_NUM_TENSORS], np = head.nparams;
        CT_FUZZ_REQUIRE(np == ct_gpt_param_sizes(&head.cfg, sizes) && !head.params);
        CT_FUZZ_REQUIRE(ct_shards_count(s) >= 1);
        float *out = malloc(1000 * sizeof(float));
        CT_FUZZ_REQUIRE(out);
        size_t lo = np / 3, n = np - lo < 1000 ? np - lo : 1000;
        for (int a = 0; a < 3; a++) {
            ct_status rs = ct_shards_read(s, a, lo, n, out, &err);
            if (rs != CT_OK) {
                ct_fuzz_check_fail(rs, &err);
                continue;
            }
            const float *w = a == 0 ? whole.params : a == 1 ? whole.m : whole.v;
            if (sw == CT_OK) CT_FUZZ_REQUIRE(!memcmp(out, w + lo, n * sizeof(float)));
        }
        free(out);
        ct_shards_close(s);
        ct_checkpoint_release(&head);
    }
    if (sw == CT_OK) {
        CT_FUZZ_REQUIRE(st == CT_OK); /* what reads whole opens */
        char g[600];
        snprintf(g, sizeof g, "%s.gathered", man);
        CT_FUZZ_REQUIRE(ct_checkpoint_write(g, &whole, &err) == CT_OK);
        ct_checkpoint back;
        CT_FUZZ_REQUIRE(ct_checkpoint_read(g, &back, &err) == CT_OK);
        CT_FUZZ_REQUIRE(same(&whole, &back));
        ct_checkpoint_release(&back);
        remove(g);
        snprintf(g, sizeof g, "%s.again.bin", man);
        write_back_sharded(&whole, g);
        for (int w = 0; w < 2; w++) {
            ct_shard_path(sp, sizeof sp, g, w);
            remove(sp);
        }
        remove(g);
    }
    ct_checkpoint_release(&whole);
    return 0;
}
