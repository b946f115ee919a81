/* io_impl.h - what the checkpoint files of engine/files share and nobody else sees: the section
 * framing (io_sections.c), the STATE record and the CONFIG section, and the sharded form's
 * reader that the gathered reader hands a manifest to (io_shards.c). */
#ifndef CT_IO_IMPL_H
#define CT_IO_IMPL_H

#include <stdint.h>
#include <stdio.h>

#include "ct_engine_io.h"

/* { char tag[8]; u64 payload bytes; u32 crc32 of payload; u32 0 } before each payload */
typedef struct ct__section_hdr {
    char tag[8];
    uint64_t bytes;
    uint32_t crc;
    uint32_t zero;
} ct__section_hdr;

/* The STATE section's payload. */
typedef struct ct__state_rec {
    int64_t step;
    uint64_t rng[4];
    int32_t B, T, accum, shuffle;
    uint64_t loader_seed;
    uint64_t data_tokens;
    uint64_t nparams;
} ct__state_rec;

ct_status ct__section_write(ct_atomic_file *af, const char *tag, const void *data, size_t n,
                            ct_err *err);
/* Read one section: its header must carry `tag`, its payload must be `want` bytes (or any size
 * when want == SIZE_MAX; *data is malloc'd with a NUL after it) and match its CRC. */
ct_status ct__section_read(FILE *f, const char *path, long fsize, const char *tag, size_t want,
                           void **data, size_t *n, ct_err *err);
/* magic, version, section count; then CONFIG, STATE and META from ck (its arrays unused) */
ct_status ct__ckpt_head_write(ct_atomic_file *af, const ct_checkpoint *ck, uint32_t version,
                              uint32_t nsections, ct_err *err);
/* CONFIG, STATE and META read into ck (after the magic and head, which the caller checked);
 * *np the parameter count of the config. On failure ck's meta is freed. */
ct_status ct__ckpt_head_read(FILE *f, const char *path, long fsize, ct_checkpoint *ck, size_t *np,
                             ct_err *err);

/* io_shards.c: the whole state of the sharded checkpoint whose manifest `f` is (positioned
 * after the head, version CT_CKPT_VERSION_SHARDED), every shard read and verified. */
ct_status ct__shards_read_all(FILE *f, const char *path, long fsize, ct_checkpoint *ck,
                              ct_err *err);

#endif /* CT_IO_IMPL_H */
