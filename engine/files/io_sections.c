/* io_sections.c - the framing both checkpoint forms share (ct_engine_io.h): CRC-checked sections
 * { tag, bytes, crc32, 0, payload }, and the head every checkpoint file starts with: magic,
 * version, section count, CONFIG, STATE, META. A read names the section that is missing, short,
 * misplaced or fails its CRC, so truncation and corruption are reported, never trusted. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "io_impl.h"

ct_status ct__section_write(ct_atomic_file *af, const char *tag, const void *data, size_t n,
                            ct_err *err) {
    ct__section_hdr h;
    memset(&h, 0, sizeof h);
    memcpy(h.tag, tag, strlen(tag) < 8 ? strlen(tag) : 8);
    h.bytes = n;
    h.crc = ct_crc32(0, data, n);
    ct_status st = ct_atomic_file_write(af, &h, sizeof h, err);
    if (st == CT_OK) st = ct_atomic_file_write(af, data, n, err);
    return st;
}

ct_status ct__section_read(FILE *f, const char *path, long fsize, const char *tag, size_t want,
                           void **data, size_t *n, ct_err *err) {
    ct__section_hdr h;
    long at = ftell(f);
    if (fread(&h, sizeof h, 1, f) != 1)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: truncated checkpoint: section %s is missing (file ends at byte %ld)",
                      path, tag, fsize);
    char t[9] = {0};
    memcpy(t, h.tag, 8);
    if (strcmp(t, tag) != 0)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: corrupt checkpoint: expected section %s at byte %ld, found '%.8s'", path,
                      tag, at, t);
    if (want != SIZE_MAX && h.bytes != want)
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: corrupt checkpoint: section %s has %llu bytes, %zu expected", path, tag,
                      (unsigned long long)h.bytes, want);
    long left = fsize - ftell(f);
    if (h.bytes > (uint64_t)(left < 0 ? 0 : left))
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: truncated checkpoint: section %s needs %llu bytes, %ld remain", path,
                      tag, (unsigned long long)h.bytes, left);
    unsigned char *buf = (unsigned char *)ct_malloc((size_t)h.bytes + 1);
    if (!buf)
        return CT_ERR(err, CT_ERR_NOMEM, "%s: no memory for section %s (%llu bytes)", path, tag,
                      (unsigned long long)h.bytes);
    if (h.bytes && fread(buf, 1, (size_t)h.bytes, f) != h.bytes) {
        free(buf);
        return CT_ERR(err, CT_ERR_IO, "%s: reading section %s failed", path, tag);
    }
    buf[h.bytes] = 0;
    uint32_t crc = ct_crc32(0, buf, (size_t)h.bytes);
#ifdef CT_FUZZING /* the fuzz campaign's build only (fuzz/fuzz_checkpoint.c says why) */
    crc = h.crc;
#endif
    if (crc != h.crc || h.zero != 0) {
        free(buf);
        return CT_ERR(err, CT_ERR_FORMAT,
                      "%s: corrupt checkpoint: section %s fails its CRC-32 check (stored %08x, "
                      "computed %08x)",
                      path, tag, h.crc, crc);
    }
    *data = buf;
    if (n) *n = (size_t)h.bytes;
    return CT_OK;
}

ct_status ct__ckpt_head_write(ct_atomic_file *af, const ct_checkpoint *ck, uint32_t version,
                              uint32_t nsections, ct_err *err) {
    ct_status st = CT_OK;
    uint32_t head[2] = {version, nsections};
    CT_CHECK(ct_atomic_file_write(af, CT_CKPT_MAGIC, 8, err));
    CT_CHECK(ct_atomic_file_write(af, head, sizeof head, err));
    /* a dense GPT-2 model's CONFIG is the 6 sizes (as before experts existed); a mixture of
     * experts adds the experts and top-k; a Llama model those and its 6 fields (arch, kv heads,
     * ffn dim, theta and eps as float bits, tie) */
    int32_t cfg[14] = {ck->cfg.max_seq, ck->cfg.vocab,    ck->cfg.padded_vocab, ck->cfg.layers,
                       ck->cfg.heads,   ck->cfg.channels, ck->cfg.experts,      ck->cfg.top_k,
                       ck->cfg.arch,    ck->cfg.kv_heads, ck->cfg.ffn_dim,      0,
                       0,               ck->cfg.tie_embeddings};
    memcpy(&cfg[11], &ck->cfg.rope_theta, 4);
    memcpy(&cfg[12], &ck->cfg.norm_eps, 4);
    size_t ncfg = ck->cfg.arch != CT_ARCH_GPT2 ? 14 : ck->cfg.experts > 0 ? 8 : 6;
    CT_CHECK(ct__section_write(af, "CONFIG", cfg, ncfg * sizeof(int32_t), err));
    ct__state_rec s;
    memset(&s, 0, sizeof s);
    s.step = ck->step;
    memcpy(s.rng, ck->rng, sizeof s.rng);
    s.B = ck->loader_B;
    s.T = ck->loader_T;
    s.accum = ck->loader_accum;
    s.shuffle = ck->loader_shuffle;
    s.loader_seed = ck->loader_seed;
    s.data_tokens = ck->data_tokens;
    s.nparams = ck->nparams;
    CT_CHECK(ct__section_write(af, "STATE", &s, sizeof s, err));
    const char *meta = ck->meta ? ck->meta : "";
    CT_CHECK(ct__section_write(af, "META", meta, strlen(meta), err));
cleanup:
    return st;
}

ct_status ct__ckpt_head_read(FILE *f, const char *path, long fsize, ct_checkpoint *ck, size_t *np,
                             ct_err *err) {
    ct_status st = CT_OK;
    void *cfgp = NULL, *statep = NULL, *meta = NULL;
    size_t cfgn = 0;
    CT_CHECK(ct__section_read(f, path, fsize, "CONFIG", SIZE_MAX, &cfgp, &cfgn, err));
    if (cfgn != 6 * sizeof(int32_t) && cfgn != 8 * sizeof(int32_t) &&
        cfgn != 14 * sizeof(int32_t)) {
        st = CT_ERR(err, CT_ERR_FORMAT,
                    "%s: corrupt checkpoint: section CONFIG has %zu bytes, 24, 32 or 56 expected",
                    path, cfgn);
        goto cleanup;
    }
    int32_t *c = (int32_t *)cfgp;
    if (cfgn >= 8 * sizeof(int32_t)) ck->cfg.experts = c[6], ck->cfg.top_k = c[7];
    if (cfgn == 14 * sizeof(int32_t)) {
        ck->cfg.arch = c[8], ck->cfg.kv_heads = c[9], ck->cfg.ffn_dim = c[10];
        memcpy(&ck->cfg.rope_theta, &c[11], 4);
        memcpy(&ck->cfg.norm_eps, &c[12], 4);
        ck->cfg.tie_embeddings = c[13];
    }
    ck->cfg.max_seq = c[0];
    ck->cfg.vocab = c[1];
    ck->cfg.padded_vocab = c[2];
    ck->cfg.layers = c[3];
    ck->cfg.heads = c[4];
    ck->cfg.channels = c[5];
    CT_CHECK(ct_gpt_config_check(&ck->cfg, path, err));
    size_t sizes[CT_GPT_NUM_TENSORS];
    *np = ct_gpt_param_sizes(&ck->cfg, sizes);
    CT_CHECK(ct__section_read(f, path, fsize, "STATE", sizeof(ct__state_rec), &statep, NULL, err));
    ct__state_rec s;
    memcpy(&s, statep, sizeof s);
    if (s.nparams != *np) {
        st = CT_ERR(err, CT_ERR_FORMAT, "%s: %llu parameters stored for a model of %zu", path,
                    (unsigned long long)s.nparams, *np);
        goto cleanup;
    }
    CT_CHECK(ct__section_read(f, path, fsize, "META", SIZE_MAX, &meta, NULL, err));
    ck->step = s.step;
    memcpy(ck->rng, s.rng, sizeof s.rng);
    ck->loader_B = s.B;
    ck->loader_T = s.T;
    ck->loader_accum = s.accum;
    ck->loader_shuffle = s.shuffle;
    ck->loader_seed = s.loader_seed;
    ck->data_tokens = s.data_tokens;
    ck->nparams = *np;
    ck->meta = (char *)meta;
    meta = NULL;
cleanup:
    free(cfgp);
    free(statep);
    free(meta);
    return st;
}
