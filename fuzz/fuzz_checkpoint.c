/* fuzz_checkpoint.c - fuzz target: cltrain's checkpoint (engine/io_checkpoint.c), and the
 * one-line DIR/latest file that names it. A checkpoint that reads is consistent (parameter
 * count from its config) and writes back and reads again to the same state. The campaign build
 * defines CT_FUZZING, which lets a section with a wrong CRC through so the fuzzer reaches the
 * checks behind it (a mutated payload otherwise never passes its CRC-32). */
#include <sys/stat.h>

#include "ct_engine_io.h"
#include "fuzz_util.h"

static int same(const ct_checkpoint *a, const ct_checkpoint *b) {
    size_t n = a->nparams * sizeof(float);
    return !memcmp(&a->cfg, &b->cfg, sizeof a->cfg) && a->step == b->step &&
           !memcmp(a->rng, b->rng, sizeof a->rng) && a->loader_B == b->loader_B &&
           a->loader_T == b->loader_T && a->loader_accum == b->loader_accum &&
           a->loader_shuffle == b->loader_shuffle && a->loader_seed == b->loader_seed &&
           a->data_tokens == b->data_tokens && a->nparams == b->nparams &&
           !memcmp(a->params, b->params, n) && !memcmp(a->m, b->m, n) && !memcmp(a->v, b->v, n) &&
           !strcmp(a->meta, b->meta);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = ct_fuzz_file("ckpt", data, size);
    ct_err err = {0};
    ct_checkpoint ck, back;
    ct_status st = ct_checkpoint_read(path, &ck, &err);
    if (st != CT_OK) {
        ct_fuzz_check_fail(st, &err);
        CT_FUZZ_REQUIRE(!ck.params && !ck.m && !ck.v && !ck.meta);
    } else {
        size_t sizes[CT_GPT_NUM_TENSORS];
        CT_FUZZ_REQUIRE(ck.nparams == ct_gpt_param_sizes(&ck.cfg, sizes));
        CT_FUZZ_REQUIRE(ck.params && ck.m && ck.v && ck.meta);
        char out[600];
        snprintf(out, sizeof out, "%s.out", path);
        CT_FUZZ_REQUIRE(ct_checkpoint_write(out, &ck, &err) == CT_OK);
        CT_FUZZ_REQUIRE(ct_checkpoint_read(out, &back, &err) == CT_OK);
        /* META is text up to its first NUL byte; the rest cannot round-trip */
        CT_FUZZ_REQUIRE(same(&ck, &back));
        ct_checkpoint_release(&back);
        remove(out);
    }
    ct_checkpoint_release(&ck);
    /* the same bytes as DIR/latest: a file name in that directory, or a refusal */
    char dir[600], latest[700], found[1300];
    snprintf(dir, sizeof dir, "%s.d", path);
    mkdir(dir, 0700);
    snprintf(latest, sizeof latest, "%s/latest", dir);
    FILE *f = fopen(latest, "wb");
    CT_FUZZ_REQUIRE(f && (size == 0 || fwrite(data, 1, size, f) == size) && fclose(f) == 0);
    st = ct_checkpoint_find(dir, found, sizeof found, &err);
    if (st == CT_OK) {
        size_t dl = strlen(dir);
        CT_FUZZ_REQUIRE(!strncmp(found, dir, dl) && found[dl] == '/' && found[dl + 1]);
        CT_FUZZ_REQUIRE(!strchr(found + dl + 1, '/') && !strchr(found + dl + 1, '\n'));
    } else {
        ct_fuzz_check_fail(st, &err);
    }
    return 0;
}
