/* io_safetensors_impl.h - the safetensors container (io_safetensors_file.c), private to
 * engine/files: what both the cltrain model file (io_safetensors.c) and Hugging Face's directories
 * (io_hf.c) are made of. A file is an 8-byte little-endian header length N, N bytes of JSON (an
 * object: tensor name -> {"dtype", "shape", "data_offsets" [begin, end) in the data}, and an
 * optional
 * "__metadata__" of string values), then the data.
 *
 *     ct__st_file sf;
 *     if (ct__st_open(&sf, path, &err)) return ...;        // every entry checked
 *     const ct__st_tensor *t = ct__st_find(&sf, "wte");
 *     float *x = malloc(t->count * 4);
 *     if (ct__st_read_f32(&sf, t, x, &err)) ...;            // F32, BF16 or F16 -> fp32
 *     ct__st_close(&sf);
 *
 * Opening checks every entry, so a reader only maps names: an object with a known dtype, a shape
 * of at most 8 non-negative integers, data_offsets inside the data whose length is the shape's
 * elements times the dtype's size, no two tensors' bytes overlapping, metadata values strings.
 * Messages name the file and the tensor. */
#ifndef CT_IO_SAFETENSORS_IMPL_H
#define CT_IO_SAFETENSORS_IMPL_H

#include <stdint.h>
#include <stdio.h>

#include "ct_engine_io.h"
#include "io_json_impl.h"

#define CT__ST_MAX_RANK 8

typedef struct ct__st_tensor {
    const char *name;  /* points into the parsed header */
    const char *dtype; /* "F32", "BF16", ... as written */
    int esize;         /* bytes per element */
    int readable;      /* F32, BF16 or F16: ct__st_read_f32 converts it */
    int rank;
    uint64_t shape[CT__ST_MAX_RANK];
    uint64_t count;      /* elements */
    uint64_t begin, end; /* bytes in the data section */
} ct__st_tensor;

typedef struct ct__st_file {
    char path[1024];
    FILE *f;
    uint64_t header_len, data_len;
    ct_json root;
    const ct_json *meta; /* "__metadata__" (NULL when absent) */
    ct__st_tensor *t;    /* n tensors, in the header's order */
    int n;
} ct__st_file;

ct_status ct__st_open(ct__st_file *sf, const char *path, ct_err *err);
void ct__st_close(ct__st_file *sf); /* NULL-safe, and safe on a failed open */
const ct__st_tensor *ct__st_find(const ct__st_file *sf, const char *name);
/* A metadata string (NULL when absent). */
const char *ct__st_meta(const ct__st_file *sf, const char *key);
/* The tensor's t->count elements as fp32 (bf16 and f16 widened exactly); a dtype that is not
 * readable is CT_ERR_UNSUPPORTED naming it. */
ct_status ct__st_read_f32(ct__st_file *sf, const ct__st_tensor *t, float *out, ct_err *err);
/* "(2, 3)" */
void ct__st_shape_str(char *b, size_t len, const uint64_t *s, int rank);
float ct__f16_to_f32(uint16_t h);

/* One tensor to write: rows x cols fp32 values at src (row-major), stored with `shape`; when
 * transpose, the file holds the (cols, rows) transpose (Hugging Face's Conv1D layout). */
typedef struct ct__st_out {
    char name[96];
    int rank;
    uint64_t shape[4];
    const float *src;
    size_t rows, cols;
    int transpose;
} ct__st_out;

/* Write a safetensors file atomically: `meta` is the inside of the "__metadata__" object
 * ("\"format\":\"pt\"") or NULL for none; the tensors in the given order, each F32 or BF16
 * (rounded to nearest even). The header is padded with spaces to a multiple of 8. */
ct_status ct__st_write(const char *path, const char *meta, const ct__st_out *ts, int n,
                       ct_file_dtype dtype, ct_err *err);

int ct__host_is_le(void);

#endif /* CT_IO_SAFETENSORS_IMPL_H */
