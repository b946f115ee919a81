/* ct_engine_params.h - one worker's share of the model's parameters: which tensors, layers and
 * slices it holds for its place in the layout, and the device arrays (params, grads, Adam m,
 * Adam v, and the ZeRO shards), each one buffer or several cut between (tensor, layer) slices,
 * with a view per (tensor, layer), all derived from the table in
 * ct_gpt_config.h, so nothing is kept in sync by hand.
 *
 * Orders. Host arrays (set/get, files, checkpoints) are the WHOLE model in the table's llm.c
 * order (all layers' qkvw together, ...), whatever this worker holds. The device buffers are
 * "flat": this worker's pieces, layer-major:
 *     [experts | wte (first or last stage) | wpe (first stage) | block l0 | block l0+1 | ... |
 *      lnfw lnfb (last)]
 * with each block's tensors [ln1w ln1b qkvw qkvb attprojw attprojb ln2w ln2b routerw fcw fcb
 * fcprojw fcprojb] together, so a layer is one contiguous range and backward finishes the
 * gradients from the end of the buffer towards its start (reverse-layer-order buckets). For a
 * single device this is the whole model. Tensors cut over the TP group (ct_split) hold this
 * rank's slice. A mixture-of-experts model (config experts > 0) keeps its expert tensors (fcw fcb
 * fcprojw fcprojb, one slice per expert) apart, at the start: for each held block, each expert
 * tensor's slices of this worker's experts (E / ep of them: experts [first, first + count) with
 * first = (dp_rank % ep) * count), [fcw (count) | fcb | fcprojw | fcprojb]. Those differ between
 * the workers of an EP group, are reduced over the expert-data-parallel group, and become final
 * only with the stage's last backward. A dense model's region is empty (the layout is as before).
 *
 * ZeRO over the DP group (N workers): stage >= 1 pads the flat length to N * shard and keeps Adam
 * m, v only for this worker's shard [lo, hi); the experts' region is padded to a multiple of
 * dp / ep and sharded over the expert-data-parallel group instead (m, v = [expert shard | DP
 * shard]: ct_params_shards). Stage 2: the gradient buffer becomes a WORKING
 * buffer [experts | wte wpe | layer slot 0 | layer slot 1 | lnf] (layer l in slot l % 2; wte
 * only a window of its rows when ct_params_plan.wte_windows) and the averaged gradients live in
 * a shard buffer. Stage 3: the same for the parameters (the shard is the
 * storage; the working buffer is filled by gathers before each use). ct_params_pview/gview hide
 * the difference from the layer math.
 *
 *     ct_params *P = NULL;
 *     ct_params_plan pl = {0};           // all layers, one chunk
 *     if (ct_params_create(&P, &cfg, &layout, &coords, &pl, dev, &err)) puts(err.msg);
 *     ct_params_init_random(P, 1337);
 *     size_t off = ct_params_pview(P, CT_GPT_qkvw, 3);   // block 3's QKV weight in params
 */
#ifndef CT_ENGINE_PARAMS_H
#define CT_ENGINE_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "ct_cl.h"
#include "ct_engine_ops.h"
#include "ct_gpt_config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_params ct_params;

#define CT_MAX_CHUNKS 16

/* Which blocks this worker holds: chunks of consecutive layers [lo[k], hi[k]), increasing
 * (interleaved pipelines give a worker several). nchunks = 0 means every layer in one chunk. */
typedef struct ct_params_plan {
    int nchunks;
    int lo[CT_MAX_CHUNKS], hi[CT_MAX_CHUNKS];
    /* ZeRO-2 with dp > 1 and a tied wte held: its gradient has no whole (Vl, C) room in the
     * working buffer, only a window of ceil(Vl/dp) rows; the model writes it window by window
     * and adds each to a host accumulator (ct_params_wte_window_add), which the reducer takes.
     * Set by the model's plan (ct__model_wte_windows: fp32, no sequence parallelism). */
    int wte_windows;
} ct_params_plan;

/* The worker's layout (tp > 1: this TP rank's slice of every split tensor, engine/tp.c)
 * and its pipeline chunks. A config or layout that cannot be is CT_ERR_ARG / CT_ERR_UNSUPPORTED
 * with a message; device memory that cannot be had is CT_ERR_DEVICE_MEM naming the buffer.
 * dev NULL: the layout only, no device buffer (what the memory model reads: every query below
 * works except the buffers, host copies and initialisation). */
ct_status ct_params_create(ct_params **out, const ct_gpt_config *cfg, const ct_layout *layout,
                           const ct_coords *coords, const ct_params_plan *plan, ct_device *dev,
                           ct_err *err);
void ct_params_free(ct_params *P);

/* The device buffers this worker's layout takes (ct_params_create allocates exactly these):
 * category, name, bytes, largest part; returns how many (<= CT_PARAMS_MAX_BUFFERS), -1 without
 * host memory. */
#define CT_PARAMS_MAX_BUFFERS 8
typedef struct ct_params_buf {
    ct_mem_category category;
    const char *name;
    size_t bytes;
    size_t largest;        /* bytes of its largest indivisible part: one (tensor, layer) slice */
    char largest_name[48]; /* that part ("fcw of block 3", "wte") */
} ct_params_buf;
int ct_params_buffers(const ct_params *P, ct_params_buf out[CT_PARAMS_MAX_BUFFERS]);
/* How they are held on the device: returns the count of arrays (as ct_params_buffers lists
 * them); *nbuffers the device buffers holding them (more when an array exceeds the device's
 * largest single allocation: each is an arena), *largest the largest one's bytes. */
int ct_params_held(const ct_params *P, int *nbuffers, size_t *largest);
const char *ct_params_errmsg(const ct_params *P);

const ct_gpt_config *ct_params_config(const ct_params *P);
const ct_layout *ct_params_layout(const ct_params *P);
const ct_coords *ct_params_coords(const ct_params *P);
ct_device *ct_params_device(const ct_params *P);

/* What this worker holds. */
int ct_params_holds_layer(const ct_params *P, int l);
int ct_params_has_embed(const ct_params *P); /* wte + wpe for the token embedding (first stage) */
int ct_params_has_head(const ct_params *P);  /* lnf + wte for the logits (last stage) */
int ct_params_holds(const ct_params *P, int i); /* tensor i is held (any layer) */
int ct_params_nchunks(const ct_params *P);
void ct_params_chunk(const ct_params *P, int k, int *lo, int *hi);

/* Sizes (floats). num_params: the whole model (host arrays); local: this worker's real floats;
 * flat: length of the flat layout (local, padded to dp * shard under ZeRO). */
size_t ct_params_num_params(const ct_params *P);
size_t ct_params_local_len(const ct_params *P);
size_t ct_params_flat_len(const ct_params *P);
/* This worker's optimizer shard [lo, hi) of the flat layout ([0, local) without ZeRO): the DP
 * shard of the dense tensors (the experts' shard, under ZeRO >= 1 with experts, is apart). */
void ct_params_shard(const ct_params *P, size_t *lo, size_t *hi);
/* The whole optimizer shard as runs of the flat layout, in the order Adam's m and v hold them
 * (run k starts at the sum of the earlier runs' lengths): ZeRO >= 1 with experts [the expert
 * shard over the expert-data-parallel group, the DP shard]; otherwise one run. Returns the
 * count (1 or 2). */
int ct_params_shards(const ct_params *P, size_t lo[2], size_t hi[2]);
size_t ct_params_opt_len(const ct_params *P); /* floats of Adam's m (and v): the runs' total */
/* Experts: this worker holds experts [first, first + count) of every held block (count 0 in a
 * dense model); ct_params_is_expert(i): tensor i has one slice per expert (kept in the expert
 * region [lo, hi) of the flat layout, padding included: [0, 0) in a dense model). */
void ct_params_experts(const ct_params *P, int *first, int *count);
int ct_params_is_expert(const ct_params *P, int i);
void ct_params_expert_range(const ct_params *P, size_t *lo, size_t *hi);
/* Ownership, so that a sum over every worker of the layout counts each parameter once (the
 * gathered state, the global gradient norm): the flat range [lo, hi) within which this worker
 * owns tensor i's elements (returns 0, [0, 0), when it owns none). A tensor replicated over TP
 * belongs to TP rank 0, the tied wte of a pipeline to the first stage; sharded (the arrays kept
 * as ZeRO shards): the shard's run that holds the tensor; otherwise the first of the workers
 * holding the same copy (DP rank 0; for expert tensors the first of the expert-data-parallel
 * group, dp_rank < ep). */
int ct_params_owned(const ct_params *P, int i, int sharded, size_t *lo, size_t *hi);
int ct_params_zero_stage(const ct_params *P);

/* Flat offset and length of (tensor i, layer l) (l ignored for the non-block tensors; the
 * tensor must be held). An expert tensor's (i, l) is its slices of every held expert, one after
 * another (slice_len / count each). */
size_t ct_params_flat_off(const ct_params *P, int i, int l);
size_t ct_params_slice_len(const ct_params *P, int i);
/* Flat offset where block l begins (held); l = layers (or past the last held block): where the
 * final LayerNorm begins, or the end of the layout. The first held block's begin is also the
 * end of the embeddings. */
size_t ct_params_layer_begin(const ct_params *P, int l);
size_t ct_params_layer_end(const ct_params *P, int l);
/* Flat range of the head's LayerNorm (lnfw, lnfb) and of wte ([0,0) when not held). */
void ct_params_lnf_range(const ct_params *P, size_t *lo, size_t *hi);
void ct_params_wte_range(const ct_params *P, size_t *lo, size_t *hi);

/* Offsets of (tensor i, layer l) in the buffer the layer math reads parameters from
 * (ct_params_buffer: flat, or the ZeRO-3 working buffer) and writes gradients into
 * (ct_params_grads: flat, or the ZeRO-2 working buffer). */
size_t ct_params_pview(const ct_params *P, int i, int l);
size_t ct_params_gview(const ct_params *P, int i, int l);
/* The same as views kernels take: the device buffer holding the slice, the offset in it. */
ct_view ct_params_pv(const ct_params *P, int i, int l);
ct_view ct_params_gv(const ct_params *P, int i, int l);
/* Where flat range [lo, hi) of block l / of the non-block tensors lies in a working buffer:
 * the offset of flat position `flat_off` of the piece that starts at flat `piece_lo`. */
size_t ct_params_work_off(const ct_params *P, size_t flat_off);
size_t ct_params_work_len(const ct_params *P);
/* Floats of the parameter buffer (ct_params_buffer): the flat layout, or under ZeRO-3 the
 * working buffer (what a bf16 model's working copy mirrors). */
size_t ct_params_buffer_len(const ct_params *P);
/* ZeRO-2's wte gradient in windows (ct_params_plan.wte_windows): rows per window (0: wte's
 * gradient is whole in the gradient buffer, ct_params_gv as for any tensor; else gv(wte) is the
 * window); the host accumulator, this worker's wte slice (Vl x C floats) summed over the windows
 * added since the reducer last took it (ct_params_wte_host_take: copied out and zeroed); host
 * bytes of the two (accumulator and a window's read buffer). */
size_t ct_params_wte_window(const ct_params *P);
ct_status ct_params_wte_window_add(ct_params *P, size_t row0, size_t nrows);
void ct_params_wte_host_take(ct_params *P, float *dst);
size_t ct_params_host_bytes(const ct_params *P);
/* ZeRO-3's parameter working buffer: [experts | wpe | R | lnf], where R holds either wte (when
 * the embedding or the head reads it) or the two block slots (their gathers take wte's place):
 * where flat position f lies in it, and R's start, wte's and a slot's floats. */
size_t ct_params_pwork_off(const ct_params *P, size_t f);
void ct_params_pwork_region(const ct_params *P, size_t *r0, size_t *wte_len, size_t *slot_len);

/* The device memory, each an arena (cl/: one buffer, or several when the device's largest
 * single allocation is smaller; a piece holds whole (tensor, layer) slices, so a slice's view
 * never crosses pieces, while a flat range may: copy it with ct_arena_read/write/zero, and
 * give kernels ranges cut at ct_arena_span). params: flat (ZeRO < 3) or the working buffer
 * (3); param_shard: the parameters' storage under ZeRO-3 (else NULL); grads: flat (ZeRO < 2)
 * or the working buffer; grad_shard: averaged gradient shard under ZeRO >= 2 (else NULL);
 * adam m, v: the shard. The shard's pieces are cut where the slices of the flat layout are. */
ct_arena *ct_params_buffer(ct_params *P);
ct_arena *ct_params_param_shard(ct_params *P);
ct_arena *ct_params_grads(ct_params *P);
ct_arena *ct_params_grad_shard(ct_params *P);
ct_arena *ct_params_adam_m(ct_params *P);
ct_arena *ct_params_adam_v(ct_params *P);

/* Whole-model table order <-> this worker's flat layout. to_flat fills flat[0..flat_len)
 * (padding zeroed); from_flat writes this worker's pieces into the table array and leaves the
 * rest as it was. */
void ct_params_table_to_flat(const ct_params *P, const float *table, float *flat);
void ct_params_flat_to_table(const ct_params *P, const float *flat, float *table);
/* Visit this worker's pieces: fn(user, table offset, flat offset, floats) per contiguous run
 * (a TP row-parallel slice is one run per row). Returns the first non-zero fn result. */
typedef int (*ct_params_piece_fn)(void *user, size_t table_off, size_t flat_off, size_t n);
int ct_params_pieces(const ct_params *P, int i, int l, ct_params_piece_fn fn, void *user);

/* Host copies, n = ct_params_num_params floats in table order (blocking). Parameters under
 * ZeRO-3 and Adam's m, v under ZeRO >= 1 are stored only as this worker's shard: set takes the
 * whole array and keeps the shard's part, get fills only that part. Gradients under ZeRO-2
 * exist only as a shard: set/get_grads are CT_ERR_STATE. */
ct_status ct_params_set(ct_params *P, const float *host, size_t n);
ct_status ct_params_get(ct_params *P, float *host, size_t n);
ct_status ct_params_set_grads(ct_params *P, const float *host, size_t n);
ct_status ct_params_get_grads(ct_params *P, float *host, size_t n);
ct_status ct_params_set_optimizer(ct_params *P, const float *m, const float *v, size_t n);
ct_status ct_params_get_optimizer(ct_params *P, float *m, float *v, size_t n);

/* GPT-2 initialisation from the table's init column; every value depends only on (seed, its
 * index in the whole table), so every layout draws the same model. Adam state zeroed. */
ct_status ct_params_init_random(ct_params *P, uint64_t seed);
ct_status ct_params_zero_grads(ct_params *P);


#ifdef __cplusplus
}
#endif
#endif /* CT_ENGINE_PARAMS_H */
