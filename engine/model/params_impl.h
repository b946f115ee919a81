/* params_impl.h - what params.c (the layout, the buffers) and params_copy.c (table <-> flat,
 * host copies, initialisation) share: the ct_params struct and two helpers. Only those two files
 * include it. */
#ifndef CT_PARAMS_IMPL_H
#define CT_PARAMS_IMPL_H

#include "ct_engine_params.h"

struct ct_params {
    ct_gpt_config cfg;
    ct_layout lay;
    ct_coords at;
    ct_device *dev;
    int tp, tr; /* TP size and rank */
    int el0, nel; /* experts held: [el0, el0 + nel) of each block (E / ep of them) */
    int ne, nr;   /* the expert-data-parallel group: dp / ep workers holding the same experts;
                     this worker's rank in it (dp_rank / ep) */
    ct_gpt_tensor_info t[CT_GPT_NUM_TENSORS];
    size_t toff[CT_GPT_NUM_TENSORS]; /* offset of the whole tensor in table order */
    size_t tsize[CT_GPT_NUM_TENSORS]; /* floats of the whole tensor (all layers) */
    size_t slen[CT_GPT_NUM_TENSORS];  /* floats of this worker's slice of one (tensor, layer) */
    int nchunks, clo[CT_MAX_CHUNKS], chi[CT_MAX_CHUNKS];
    int *local;   /* [L]: position of block l among the held blocks, or -1 */
    int nheld;    /* held blocks */
    int embed, head;
    /* flat layout: [experts of the held blocks (estride each, padded to xpad) | wte? | wpe? |
     * held blocks (lstride each) | lnfw lnfb?] */
    size_t foff[CT_GPT_NUM_TENSORS]; /* non-block tensors: flat offset; block tensors: offset
                                        within a block; expert tensors: within a block's experts */
    size_t estride, xlen, xpad; /* experts: floats per held block, real, padded to ne * shard */
    size_t lbase, lstride, lnf_lo, local_len, flat, lo, hi, opt_len, wlen, nparams;
    /* ZeRO-3's parameter working buffer: [experts | wpe | R | lnf], R (pr0, prlen floats) holding
     * either wte or the two block slots: wte is gathered when the embedding or the head reads
     * it, and the blocks' gathers take its place after */
    size_t pr0, prlen, pwlen;
    /* the optimizer's shard as runs of the flat layout, in the order Adam's m, v store them:
     * ZeRO >= 1 with experts: [the expert shard over the expert-data-parallel group | the DP
     * shard of the rest]; otherwise one run [lo, hi) */
    int nsh;
    size_t shlo[2], shhi[2];
    /* ZeRO-2's wte gradient in windows: rows per window (0: whole), the floats the working
     * buffer saves (wte's slice less a window), the host accumulator (Vl x C) and a window's
     * read buffer */
    size_t wwin, wshift;
    float *whost, *wtmp;
    ct_arena *params, *pshard, *grads, *gshard, *adam_m, *adam_v;
    ct_err err;
};

static inline int is_block(int i) { return i >= CT_GPT_ln1w && i <= CT_GPT_fcprojb; }

static inline int holds(const ct_params *P, int i) {
    return ct_gpt_stage_holds(i, P->nheld, P->embed, P->head);
}

#endif /* CT_PARAMS_IMPL_H */
