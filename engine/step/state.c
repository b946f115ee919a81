/* state.c - the model state gathered from every worker (checkpoints, --save-model) and the
 * per-worker memory report.
 *
 * Gathering works for any layout the same way: for each table tensor every worker writes the
 * elements it OWNS into a zero-filled copy of that tensor and the copies are summed over the
 * world (x + 0 is x exactly, so the sum is a gather). Ownership (ct_params_owned): under ZeRO the
 * shard that holds an element (Adam's m and v for stages >= 1, the parameters for stage 3: the DP
 * shard, or for experts the shard over the expert-data-parallel group); otherwise DP rank 0 (for
 * experts, the first worker holding them: dp_rank < ep). A tensor replicated over the TP group
 * belongs to TP rank 0, and the tied wte of a pipeline to its first stage, so nothing is counted
 * twice. The same rule says what each worker's shard of a sharded checkpoint holds
 * (ct_state_runs with owned = 1), and which runs a resuming worker fills (owned = 0). */
#include <stdlib.h>
#include <string.h>

#include "ct_engine_step.h"

/* The array `which` (0 params, 1 m, 2 v): its buffer and whether it is kept as the ZeRO shard's
 * runs (Adam's m, v for stages >= 1, the parameters for stage 3). */
static ct_arena *array_of(ct_params *P, int which, int *sharded) {
    int zero = ct_params_zero_stage(P);
    if (which == 0) {
        *sharded = zero >= 3;
        return *sharded ? ct_params_param_shard(P) : ct_params_buffer(P);
    }
    *sharded = zero >= 1;
    return which == 1 ? ct_params_adam_m(P) : ct_params_adam_v(P);
}

ct_status ct_state_read_flat(ct_model *m, int which, float *flat, ct_err *err) {
    ct_params *P = ct_model_params(m);
    size_t lo[2], hi[2], flen = ct_params_flat_len(P);
    int nr = ct_params_shards(P, lo, hi), sharded;
    ct_arena *b = array_of(P, which, &sharded);
    /* the buffer holds the flat layout, or (sharded) the shard's runs one after another */
    ct_status st = CT_OK;
    size_t at = 0;
    for (int k = 0; k < (sharded ? nr : 1) && st == CT_OK; k++) {
        size_t a = sharded ? lo[k] : 0, n = sharded ? hi[k] - lo[k] : flen;
        st = ct_arena_read(b, at * sizeof(float), flat + a, n * sizeof(float));
        at += n;
    }
    if (st != CT_OK)
        return CT_ERR(err, st, "reading the model state to the host: %s",
                      ct_device_errmsg(ct_model_device(m)));
    return CT_OK;
}

typedef struct clip_ctx {
    ct_state_run_fn fn;
    void *user;
    size_t lo, hi; /* flat range the runs are clipped to */
    int stop;
} clip_ctx;

static int clip_piece(void *user, size_t toff, size_t foff, size_t n) {
    clip_ctx *c = (clip_ctx *)user;
    size_t a = foff > c->lo ? foff : c->lo, e = foff + n < c->hi ? foff + n : c->hi;
    if (a < e && (c->stop = c->fn(c->user, toff + (a - foff), a, e - a)) != 0) return c->stop;
    return 0;
}

int ct_state_runs(ct_model *m, int which, int owned, ct_state_run_fn fn, void *user) {
    ct_params *P = ct_model_params(m);
    const ct_gpt_config *c = ct_params_config(P);
    size_t lo[2], hi[2];
    int nr = ct_params_shards(P, lo, hi), sharded;
    array_of(P, which, &sharded);
    if (!sharded) lo[0] = 0, hi[0] = ct_params_flat_len(P), nr = 1;
    clip_ctx cc = {fn, user, 0, 0, 0};
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        size_t olo, ohi;
        int runs = owned ? ct_params_owned(P, i, sharded, &olo, &ohi) : ct_params_holds(P, i) ? nr : 0;
        int block = i >= CT_GPT_ln1w && i <= CT_GPT_fcprojb;
        for (int k = 0; k < runs; k++) {
            cc.lo = owned ? olo : lo[k];
            cc.hi = owned ? ohi : hi[k];
            for (int l = 0; l < (block ? c->layers : 1); l++)
                if (!block || ct_params_holds_layer(P, l)) {
                    ct_params_pieces(P, i, l, clip_piece, &cc);
                    if (cc.stop) return cc.stop;
                }
            if (owned) break;
        }
    }
    return 0;
}

typedef struct own_ctx {
    const float *flat; /* this worker's flat values */
    float *tensor;     /* the tensor's zero-filled table-order copy */
    size_t t0;         /* the tensor's table offset */
} own_ctx;

static int put_owned(void *user, size_t toff, size_t foff, size_t n) {
    own_ctx *c = (own_ctx *)user;
    memcpy(c->tensor + (toff - c->t0), c->flat + foff, n * sizeof(float));
    return 0;
}

/* One array (which: 0 params, 1 m, 2 v) gathered into out (may be NULL). */
static ct_status gather_one(ct_model *m, ct_comm *world, int which, float *out, float *flat,
                            float *tensor, ct_err *err) {
    ct_params *P = ct_model_params(m);
    const ct_gpt_config *c = ct_params_config(P);
    ct_status st = ct_state_read_flat(m, which, flat, err);
    if (st != CT_OK) return st;
    int sharded;
    array_of(P, which, &sharded);
    own_ctx oc = {flat, tensor, 0};
    clip_ctx cc = {put_owned, &oc, 0, 0, 0};
    size_t sizes[CT_GPT_NUM_TENSORS], toff = 0;
    ct_gpt_param_sizes(c, sizes);
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        memset(tensor, 0, sizes[i] * sizeof(float));
        oc.t0 = toff;
        if (ct_params_owned(P, i, sharded, &cc.lo, &cc.hi)) {
            int block = i >= CT_GPT_ln1w && i <= CT_GPT_fcprojb;
            for (int l = 0; l < (block ? c->layers : 1); l++)
                if (!block || ct_params_holds_layer(P, l)) ct_params_pieces(P, i, l, clip_piece, &cc);
        }
        if (world && ct_comm_size(world) > 1) {
            st = ct_comm_allreduce(world, tensor, tensor, sizes[i], CT_F32, CT_OP_SUM, NULL);
            if (st != CT_OK)
                return CT_ERR(err, st, "gathering the model state: %s", ct_comm_errmsg(world));
        }
        if (out) memcpy(out + toff, tensor, sizes[i] * sizeof(float));
        toff += sizes[i];
    }
    return CT_OK;
}

ct_status ct_state_gather(ct_model *m, ct_comm *world, float *params, float *adam_m,
                          float *adam_v, ct_err *err) {
    ct_params *P = ct_model_params(m);
    size_t sizes[CT_GPT_NUM_TENSORS], big = 0;
    ct_gpt_param_sizes(ct_params_config(P), sizes);
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++)
        if (sizes[i] > big) big = sizes[i];
    float *flat = ct_malloc(ct_params_flat_len(P) * sizeof(float) + 1);
    float *tensor = ct_malloc(big * sizeof(float));
    ct_status st = CT_OK;
    if (!flat || !tensor) st = CT_ERR(err, CT_ERR_NOMEM, "gathering the model state: out of host memory");
    /* every worker runs all three gathers, whatever it asked for (collective) */
    if (st == CT_OK) st = gather_one(m, world, 0, params, flat, tensor, err);
    if (st == CT_OK) st = gather_one(m, world, 1, adam_m, flat, tensor, err);
    if (st == CT_OK) st = gather_one(m, world, 2, adam_v, flat, tensor, err);
    free(flat);
    free(tensor);
    return st;
}

ct_status ct_state_mem_gather(ct_device *dev, ct_comm *world, size_t host_comm, uint64_t *out,
                              ct_err *err) {
    ct_mem_stats s;
    ct_device_mem_stats(dev, &s);
    int32_t mine[2 * CT_MEM__COUNT];
    for (int c = 0; c < CT_MEM__COUNT; c++) {
        uint64_t v = s.current[c] + (c == CT_MEM_COMM ? host_comm : 0);
        mine[2 * c] = (int32_t)(uint32_t)(v & 0xffffffffu);
        mine[2 * c + 1] = (int32_t)(uint32_t)(v >> 32);
    }
    int N = world ? ct_comm_size(world) : 1;
    int32_t *all = ct_malloc(sizeof(int32_t) * 2 * CT_MEM__COUNT * (size_t)N);
    if (!all) return CT_ERR(err, CT_ERR_NOMEM, "memory report: out of host memory");
    ct_status st = CT_OK;
    if (world) st = ct_comm_allgather(world, mine, all, 2 * CT_MEM__COUNT, CT_I32, NULL);
    else memcpy(all, mine, sizeof mine);
    if (st != CT_OK) CT_ERR(err, st, "memory report: %s", ct_comm_errmsg(world));
    if (st == CT_OK)
        for (int w = 0; w < N; w++)
            for (int c = 0; c < CT_MEM__COUNT; c++)
                out[w * CT_MEM__COUNT + c] =
                    (uint64_t)(uint32_t)all[w * 2 * CT_MEM__COUNT + 2 * c] |
                    ((uint64_t)(uint32_t)all[w * 2 * CT_MEM__COUNT + 2 * c + 1] << 32);
    free(all);
    return st;
}
