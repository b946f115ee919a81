/* test_engine_io_shards.c - the sharded checkpoint (engine/files/io_shards.c), host only. Three
 * "workers" own interleaved runs of a model big enough for several CRC chunks per shard (each
 * array split differently, as ZeRO splits Adam's state apart from the parameters); the manifest
 * and shards read back as the whole state (ct_checkpoint_read) and as any span (ct_shards_read,
 * ct_shards_read_runs), bit for bit against the arrays written. A partial read opens only the
 * shards it needs (a deleted shard it does not touch is not missed) and checks only the chunks
 * it reads (a flipped byte is found by the reads that cover it, named with shard and chunk);
 * a missing shard, one of another step or worker, a truncated one, a manifest whose ranges do
 * not tile the model are refused by name; the directory's hygiene (pruning a sharded checkpoint
 * takes its shards; killed writers' shard temporaries and orphaned shards go at start). */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ct_engine_io.h"
#include "ct_test.h"

static char dir[256];

static void path_of(char *buf, size_t len, const char *name) {
    snprintf(buf, len, "%s/%s", dir, name);
}
static int file_exists(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* worker owning element i of array a: runs of a length that differs per array */
static uint32_t owner(int a, size_t i) {
    return (uint32_t)((i / (size_t)(97 + 61 * a) + (size_t)a) % 3);
}

typedef struct model {
    ct_checkpoint ck;
    float *arr[3];
} model;

static void model_make(model *md) {
    memset(md, 0, sizeof *md);
    md->ck.cfg = (ct_gpt_config){.max_seq = 16,
                                 .vocab = 5000,
                                 .padded_vocab = 5120,
                                 .layers = 2,
                                 .heads = 4,
                                 .channels = 64};
    size_t sizes[CT_GPT_NUM_TENSORS];
    md->ck.nparams = ct_gpt_param_sizes(&md->ck.cfg, sizes);
    for (int a = 0; a < 3; a++) {
        md->arr[a] = malloc(md->ck.nparams * sizeof(float));
        for (size_t i = 0; i < md->ck.nparams; i++)
            md->arr[a][i] =
                (float)((double)(i * 2654435761u % 1000003) / 1000003.0 - 0.5) * (float)(a + 1);
    }
    md->ck.step = 42;
    md->ck.rng[0] = 7;
    md->ck.loader_B = 4, md->ck.loader_T = 16, md->ck.loader_accum = 1;
    md->ck.loader_seed = 1337;
    md->ck.data_tokens = 99999;
    md->ck.meta = strdup("lr=0.003\nsave-format=sharded\n");
}

/* Write the three shards and the manifest as DIR/ckpt_<step>.bin with DIR/latest. */
static void save_sharded(model *md, const char *ckdir, char *manifest, size_t len) {
    ct_err err = {0};
    size_t np = md->ck.nparams;
    ct_shard_desc d[3];
    ct_shard_range *r = malloc(3 * np * sizeof *r); /* at most one per element */
    size_t nr = 0;
    CT_ASSERT_OK(ct_file_mkdirs(ckdir, &err), err.msg);
    ct_checkpoint_name(manifest, len, ckdir, md->ck.step);
    for (uint32_t w = 0; w < 3; w++) {
        float *pay = malloc(3 * np * sizeof(float));
        size_t n = 0;
        for (int a = 0; a < 3; a++)
            for (size_t i = 0; i < np; i++) {
                if (owner(a, i) != w) continue;
                if (i == 0 || owner(a, i - 1) != w)
                    r[nr++] = (ct_shard_range){w, (uint32_t)a, i, 0, n};
                r[nr - 1].count++;
                pay[n++] = md->arr[a][i];
            }
        char sp[1400];
        ct_shard_path(sp, sizeof sp, manifest, (int)w);
        CT_ASSERT_OK(ct_shard_write(sp, (int)w, md->ck.step, pay, n, &d[w], &err), err.msg);
        CT_ASSERT_MSG(d[w].nchunks >= 2, "shard %u: %u chunks (the test wants several)", w,
                      d[w].nchunks);
        free(pay);
    }
    /* the ranges in a shuffled order: the manifest sorts them */
    for (size_t k = 0; k + 1 < nr; k += 2) {
        ct_shard_range x = r[k];
        r[k] = r[nr - 1 - k / 2], r[nr - 1 - k / 2] = x;
    }
    int32_t lay[5] = {3, 1, 1, 1, 1};
    char written[1300];
    /* a shard worker 0 does not see (a directory not shared by every host), or of another size:
     * refused, naming the shard and the fix, and neither the manifest nor latest is written */
    char sp1[1400], moved[1500], latest[400];
    ct_shard_path(sp1, sizeof sp1, manifest, 1);
    snprintf(moved, sizeof moved, "%s.elsewhere", sp1);
    snprintf(latest, sizeof latest, "%s/latest", ckdir);
    int had_latest = file_exists(latest);
    CT_ASSERT(rename(sp1, moved) == 0);
    CT_ASSERT_EQ_INT(
        ct_checkpoint_save_sharded(ckdir, &md->ck, lay, 3, d, r, nr, written, sizeof written, &err),
        CT_ERR_IO);
    CT_ASSERT_STR_CONTAINS(err.msg, "worker 1 wrote its shard, but worker 0 does not see it");
    CT_ASSERT_STR_CONTAINS(err.msg, "every worker shares");
    CT_ASSERT(rename(moved, sp1) == 0);
    d[2].bytes += 4;
    CT_ASSERT_EQ_INT(
        ct_checkpoint_save_sharded(ckdir, &md->ck, lay, 3, d, r, nr, written, sizeof written, &err),
        CT_ERR_IO);
    CT_ASSERT_STR_CONTAINS(err.msg, "worker 2 wrote its shard, but worker 0 sees another size");
    d[2].bytes -= 4;
    CT_ASSERT(!file_exists(manifest));
    CT_ASSERT_EQ_INT(file_exists(latest), had_latest);
    CT_ASSERT_OK(
        ct_checkpoint_save_sharded(ckdir, &md->ck, lay, 3, d, r, nr, written, sizeof written, &err),
        err.msg);
    CT_ASSERT(!strcmp(written, manifest));
    /* ranges that leave a hole are refused, and nothing is written */
    char bad[1400];
    snprintf(bad, sizeof bad, "%s/bad.bin", ckdir);
    r[nr / 2].count--;
    CT_ASSERT_EQ_INT(ct_shards_manifest_write(bad, &md->ck, lay, 3, d, r, nr, &err), CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(err.msg, "do not tile");
    CT_ASSERT(!file_exists(bad));
    for (int w = 0; w < 3; w++)
        ct_shard_desc_release(&d[w]);
    free(r);
}

static void flip_byte(const char *path, long at) {
    FILE *f = fopen(path, "r+b");
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
}

static void test_round_trip(void) {
    model md;
    model_make(&md);
    ct_err err = {0};
    char ckdir[300], man[1300], found[1300];
    path_of(ckdir, sizeof ckdir, "ck");
    save_sharded(&md, ckdir, man, sizeof man);
    size_t np = md.ck.nparams;
    CT_ASSERT_OK(ct_checkpoint_find(ckdir, found, sizeof found, &err), err.msg);
    CT_ASSERT(!strcmp(found, man));
    CT_ASSERT(ct_checkpoint_is_sharded(man));
    /* the whole state, as tools read it */
    ct_checkpoint r;
    CT_ASSERT_OK(ct_checkpoint_read(man, &r, &err), err.msg);
    CT_ASSERT_EQ_INT(r.step, 42);
    CT_ASSERT_EQ_INT(r.nparams, np);
    CT_ASSERT_EQ_INT(r.loader_seed, 1337);
    CT_ASSERT(r.meta && !strcmp(r.meta, md.ck.meta));
    CT_ASSERT(r.params && !memcmp(r.params, md.arr[0], np * 4));
    CT_ASSERT(r.m && !memcmp(r.m, md.arr[1], np * 4));
    CT_ASSERT(r.v && !memcmp(r.v, md.arr[2], np * 4));
    ct_checkpoint_release(&r);
    /* written back gathered, it reads the same */
    char g[1400];
    snprintf(g, sizeof g, "%s/gathered.bin", ckdir);
    CT_ASSERT_OK(ct_checkpoint_read(man, &r, &err), err.msg);
    CT_ASSERT_OK(ct_checkpoint_write(g, &r, &err), err.msg);
    CT_ASSERT(!ct_checkpoint_is_sharded(g));
    ct_checkpoint_release(&r);
    /* spans and runs, through an open manifest */
    ct_shard_set *s = NULL;
    ct_checkpoint head;
    CT_ASSERT_OK(ct_shards_open(&s, man, &head, &err), err.msg);
    CT_ASSERT(s != NULL);
    if (!s) return;
    CT_ASSERT_EQ_INT(ct_shards_count(s), 3);
    CT_ASSERT(head.params == NULL && head.step == 42 && head.nparams == np);
    float *out = malloc(np * sizeof(float));
    size_t spans[4][2] = {
        {0, 1}, {96, 3}, {np / 2 - 1000, 300000 < np / 2 ? 300000 : np / 2}, {np - 5, 5}};
    for (int a = 0; a < 3; a++)
        for (int k = 0; k < 4; k++) {
            memset(out, 0, np * 4);
            CT_ASSERT_OK(ct_shards_read(s, a, spans[k][0], spans[k][1], out, &err), err.msg);
            CT_ASSERT_MSG(!memcmp(out, md.arr[a] + spans[k][0], spans[k][1] * 4),
                          "array %d, span %zu +%zu differs", a, spans[k][0], spans[k][1]);
        }
    uint64_t runs[6] = {10, 20, 40000, 70000, np - 100, 100};
    float *tab = calloc(np, sizeof(float));
    CT_ASSERT_OK(ct_shards_read_runs(s, 2, runs, 3, tab, &err), err.msg);
    for (int k = 0; k < 3; k++)
        CT_ASSERT(!memcmp(tab + runs[2 * k], md.arr[2] + runs[2 * k], runs[2 * k + 1] * 4));
    CT_ASSERT_EQ_INT(ct_shards_read(s, 3, 0, 1, out, &err), CT_ERR_ARG);
    CT_ASSERT_EQ_INT(ct_shards_read(s, 0, np - 1, 2, out, &err), CT_ERR_ARG);
    /* a partial read opens only the shards it needs: elements [0, 97) of the parameters are
     * worker 0's, so without shard 2 they still read */
    char s2[1400], s2x[1450], s1[1400];
    ct_shard_path(s2, sizeof s2, man, 2);
    ct_shard_path(s1, sizeof s1, man, 1);
    snprintf(s2x, sizeof s2x, "%s.away", s2);
    CT_ASSERT(rename(s2, s2x) == 0);
    CT_ASSERT_OK(ct_shards_read(s, 0, 0, 97, out, &err), err.msg);
    CT_ASSERT_EQ_INT(ct_shards_read(s, 0, 0, 97 * 3, out, &err), CT_ERR_IO);
    CT_ASSERT_STR_CONTAINS(err.msg, "shard_00002");
    CT_ASSERT_EQ_INT(ct_checkpoint_read(man, &r, &err), CT_ERR_IO);
    CT_ASSERT(r.params == NULL && r.meta == NULL);
    CT_ASSERT(rename(s2x, s2) == 0);
    /* a flipped byte in shard 1's second chunk: found by the reads covering it, not others */
    long at = 40 + (long)CT_SHARD_CHUNK_FLOATS * 4 + 12;
    flip_byte(s1, at);
    CT_ASSERT_OK(ct_shards_read(s, 0, 0, 97 * 3, out, &err), err.msg); /* shard 1's first chunk */
    CT_ASSERT_EQ_INT(ct_shards_read(s, 1, 0, np, out, &err), CT_ERR_FORMAT);
    CT_ASSERT_STR_CONTAINS(err.msg, "shard_00001: corrupt checkpoint shard: chunk 1");
    CT_ASSERT_EQ_INT(ct_checkpoint_read(man, &r, &err), CT_ERR_FORMAT);
    flip_byte(s1, at);
    CT_ASSERT_OK(ct_checkpoint_read(man, &r, &err), err.msg);
    ct_checkpoint_release(&r);
    /* shard 1 replaced by one of another step, then of another worker, then cut short */
    float one = 1;
    ct_shard_desc d;
    char s1x[1450];
    snprintf(s1x, sizeof s1x, "%s.keep", s1);
    CT_ASSERT(rename(s1, s1x) == 0);
    CT_ASSERT_OK(ct_shard_write(s1, 1, 41, &one, 1, &d, &err), err.msg);
    ct_shard_desc_release(&d);
    CT_ASSERT_EQ_INT(ct_shards_read(s, 0, 0, np, out, &err), CT_ERR_FORMAT);
    CT_ASSERT_STR_CONTAINS(err.msg, "another step's shard");
    CT_ASSERT_OK(ct_shard_write(s1, 2, 42, &one, 1, &d, &err), err.msg);
    ct_shard_desc_release(&d);
    CT_ASSERT_EQ_INT(ct_shards_read(s, 0, 0, np, out, &err), CT_ERR_FORMAT);
    CT_ASSERT_STR_CONTAINS(err.msg, "another worker's shard");
    CT_ASSERT(truncate(s1x, 1000) == 0);
    CT_ASSERT(rename(s1x, s1) == 0);
    CT_ASSERT_EQ_INT(ct_shards_read(s, 0, 0, np, out, &err), CT_ERR_FORMAT);
    CT_ASSERT_STR_CONTAINS(err.msg, "its size is not the manifest's");
    ct_shards_close(s);
    ct_checkpoint_release(&head);
    /* a gathered file is not a manifest */
    CT_ASSERT_EQ_INT(ct_shards_open(&s, g, &head, &err), CT_ERR_FORMAT);
    CT_ASSERT(s == NULL && head.meta == NULL);
    /* a manifest cut anywhere is refused by name */
    FILE *f = fopen(man, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    char cut[1400];
    snprintf(cut, sizeof cut, "%s/cut.bin", ckdir);
    for (long n = 0; n < size; n += size / 37 + 1) {
        char cmd[3000];
        snprintf(cmd, sizeof cmd, "head -c %ld %s > %s", n, man, cut);
        CT_ASSERT(system(cmd) == 0);
        CT_ASSERT_MSG(ct_shards_open(&s, cut, &head, &err) == CT_ERR_FORMAT,
                      "a manifest cut at %ld of %ld bytes was not refused", n, size);
    }
    free(tab);
    free(out);
    for (int a = 0; a < 3; a++)
        free(md.arr[a]);
    ct_checkpoint_release(&md.ck);
}

static void touch_at(const char *name, const char *text, time_t mtime) {
    char p[400];
    path_of(p, sizeof p, name);
    FILE *f = fopen(p, "wb");
    fputs(text, f);
    fclose(f);
    struct timespec ts[2] = {{mtime, 0}, {mtime, 0}};
    utimensat(AT_FDCWD, p, ts, 0);
}

static void test_hygiene(void) {
    ct_err err = {0};
    char hd[300], p[400];
    path_of(hd, sizeof hd, "hyg");
    mkdir(hd, 0777);
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    /* checkpoints 1..3, 2 sharded (two shards); shards of a step 4 whose manifest never came;
     * a dead writer's shard temporary, a live one's */
    touch_at("hyg/ckpt_00000001.bin", "c", 2010);
    touch_at("hyg/ckpt_00000002.bin", "c", 2020);
    touch_at("hyg/ckpt_00000002.shard_00000", "s", 2020);
    touch_at("hyg/ckpt_00000002.shard_00001", "s", 2020);
    touch_at("hyg/ckpt_00000003.bin", "c", 2030);
    touch_at("hyg/ckpt_00000004.shard_00001", "orphan", 2040);
    char n1[80], n2[80];
    snprintf(n1, sizeof n1, "hyg/ckpt_00000005.shard_00003.tmp.%ld.0", (long)dead);
    snprintf(n2, sizeof n2, "hyg/ckpt_00000005.shard_00002.tmp.%ld.0", (long)getpid());
    touch_at(n1, "xx", 2050);
    touch_at(n2, "x", 2050);
    touch_at("hyg/latest", "ckpt_00000003.bin\n", 3000);
    int nrm = 0;
    uint64_t bytes = 0;
    char names[256];
    CT_ASSERT_OK(ct_checkpoint_clean_stale(hd, &nrm, &bytes, names, sizeof names, &err), err.msg);
    CT_ASSERT_EQ_INT(nrm, 2); /* the dead writer's temporary, the orphaned shard */
    CT_ASSERT_EQ_INT(bytes, 8);
    CT_ASSERT_STR_CONTAINS(names, "ckpt_00000004.shard_00001");
    path_of(p, sizeof p, n2);
    CT_ASSERT(file_exists(p));
    path_of(p, sizeof p, "hyg/ckpt_00000002.shard_00000");
    CT_ASSERT(file_exists(p));
    /* keep 1 (and latest, 3): 1 and 2 go, 2's shards with it */
    CT_ASSERT_OK(ct_checkpoint_prune(hd, 1, &nrm, &err), err.msg);
    CT_ASSERT_EQ_INT(nrm, 2);
    const char *gone[] = {"hyg/ckpt_00000001.bin", "hyg/ckpt_00000002.bin",
                          "hyg/ckpt_00000002.shard_00000", "hyg/ckpt_00000002.shard_00001"};
    for (int k = 0; k < 4; k++) {
        path_of(p, sizeof p, gone[k]);
        CT_ASSERT_MSG(!file_exists(p), "%s was not removed", gone[k]);
    }
    path_of(p, sizeof p, "hyg/ckpt_00000003.bin");
    CT_ASSERT(file_exists(p));
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/ct_test_engine_io_shards_%ld", (long)getpid());
    mkdir(dir, 0777);
    test_round_trip();
    test_hygiene();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return ct_test_end("test_engine_io_shards");
}
