/* optim.c - AdamW on this worker's optimizer shard: one update per held (tensor, layer) slice,
 * clipped to the shard, decay from the table's decay column, gradient clipping by a global norm
 * that is either computed on the device from this worker's gradients (one worker, or replicas
 * with identical averaged gradients) or given by the caller, who summed it over the right
 * groups. Element-wise, so slicing changes no result. */
#include <math.h>
#include <stdlib.h>

#include "ct_engine_step.h" /* ct_optim; it uses only params and ops */

struct ct_optim {
    ct_profile *prof;
    ct_params *P;
    ct_device *dev;
    ct_buffer *scratch; /* [norm (1, padded to 16) | partials (CT_NORM_PARTIALS)] */
    /* Workers holding different slices (tp > 1): the flat runs of the gradient this worker owns
     * within its optimizer shard (every parameter counted by one worker), and a device cell
     * per run for its norm. */
    size_t (*runs)[2];
    int nruns;
    ct_buffer *cells;
    float *hcells;
    ct_err err;
};

typedef struct flat_run {
    size_t lo, hi;
} flat_run;
static int run_cmp(const void *a, const void *b) {
    size_t x = ((const flat_run *)a)->lo, y = ((const flat_run *)b)->lo;
    return x < y ? -1 : x > y;
}

/* The owned runs (ct_params_owned, state.c's rule): within the optimizer shard (ZeRO >= 1: the
 * DP shard, or the experts' shard over the expert-data-parallel group; else the first holder of
 * each copy), TP-split tensors' slices, replicated tensors on TP rank 0 only, the tied wte on the
 * first pipeline stage only; adjacent pieces merged. Pure (a layout-only ct_params will do): the
 * memory model counts the runs' device cells from it. *out is malloc'd (at least one entry);
 * returns the count, -1 without host memory. */
static int owned_runs_plan(const ct_params *P, flat_run **out) {
    const ct_layout *lay = ct_params_layout(P);
    const ct_gpt_config *c = ct_params_config(P);
    flat_run *r = ct_malloc(sizeof *r * (size_t)(CT_GPT_NUM_TENSORS * (c->layers + 1)));
    *out = r;
    if (!r) return -1;
    int n = 0;
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        size_t lo, hi;
        if (!ct_params_owned(P, i, lay->zero > 0, &lo, &hi)) continue;
        int block = i >= CT_GPT_ln1w && i <= CT_GPT_fcprojb;
        for (int l = 0; l < (block ? c->layers : 1); l++) {
            if (block && !ct_params_holds_layer(P, l)) continue;
            size_t a = ct_params_flat_off(P, i, l), b = a + ct_params_slice_len(P, i);
            if (a < lo) a = lo;
            if (b > hi) b = hi;
            if (a < b) r[n].lo = a, r[n].hi = b, n++;
        }
    }
    qsort(r, (size_t)n, sizeof *r, run_cmp);
    int m = 0;
    for (int k = 0; k < n; k++) {
        if (m && r[m - 1].hi == r[k].lo) r[m - 1].hi = r[k].hi;
        else r[m++] = r[k];
    }
    return m;
}

/* Device bytes of the optimizer's buffers (category workspace): the norm scratch, and with
 * tp > 1 or experts one cell per owned run. What ct_optim_create allocates. */
/* The norm from owned runs: tp > 1 (each worker's slice) or experts (a replica per expert-data-
 * parallel group, and no expert on every worker) */
static int owns_runs(const ct_params *P) {
    return ct_params_layout(P)->tp > 1 || ct_params_config(P)->experts > 0;
}
static size_t cells_bytes(int runs) { return (size_t)(runs ? runs : 1) * sizeof(float); }
#define NORM_OFF 0
#define PARTIALS_OFF 16
static size_t scratch_bytes(void) { return (PARTIALS_OFF + CT_NORM_PARTIALS) * sizeof(float); }

ct_status ct_optim_workspace_bytes(const ct_params *P, size_t *bytes, ct_err *err) {
    *bytes = scratch_bytes();
    if (owns_runs(P)) {
        flat_run *r = NULL;
        int m = owned_runs_plan(P, &r);
        free(r);
        if (m < 0) return CT_ERR(err, CT_ERR_NOMEM, "the optimizer's owned runs: out of host memory");
        *bytes += cells_bytes(m);
    }
    return CT_OK;
}

static ct_status owned_runs(ct_optim *o) {
    flat_run *r = NULL;
    int m = owned_runs_plan(o->P, &r);
    if (m < 0) return CT_ERR(&o->err, CT_ERR_NOMEM, "ct_optim_create: out of host memory");
    o->runs = ct_malloc(sizeof *o->runs * (size_t)(m ? m : 1));
    o->hcells = ct_malloc(sizeof(float) * (size_t)(m ? m : 1));
    if (!o->runs || !o->hcells) {
        free(r);
        return CT_ERR(&o->err, CT_ERR_NOMEM, "ct_optim_create: out of host memory");
    }
    for (int k = 0; k < m; k++) o->runs[k][0] = r[k].lo, o->runs[k][1] = r[k].hi;
    o->nruns = m;
    free(r);
    ct_status st = ct_buffer_alloc(o->dev, CT_MEM_WORKSPACE, "owned-gradient norm cells",
                                   cells_bytes(m), &o->cells);
    if (st != CT_OK) CT_ERR(&o->err, st, "ct_optim_create: %s", ct_device_errmsg(o->dev));
    return st;
}


ct_status ct_optim_create(ct_optim **out, ct_params *P, ct_profile *prof, ct_err *err) {
    *out = NULL;
    ct_optim *o = ct_calloc(1, sizeof *o);
    if (!o) return CT_ERR(err, CT_ERR_NOMEM, "ct_optim_create: out of host memory");
    o->prof = prof;
    o->P = P;
    o->dev = ct_params_device(P);
    ct_status st = ct_buffer_alloc(o->dev, CT_MEM_WORKSPACE, "optimizer norm scratch",
                                   scratch_bytes(), &o->scratch);
    if (st != CT_OK) {
        CT_ERR(err, st, "ct_optim_create: %s", ct_device_errmsg(o->dev));
        free(o);
        return st;
    }
    if (owns_runs(P) && (st = owned_runs(o)) != CT_OK) {
        CT_ERR(err, st, "%s", o->err.msg);
        ct_optim_free(o);
        return st;
    }
    *out = o;
    return CT_OK;
}

void ct_optim_free(ct_optim *o) {
    if (!o) return;
    ct_buffer_free(o->scratch);
    ct_buffer_free(o->cells);
    free(o->runs);
    free(o->hcells);
    free(o);
}

const char *ct_optim_errmsg(const ct_optim *o) { return o->err.msg; }

static ct_status dev_fail(ct_optim *o, ct_status st, const char *what) {
    if (st != CT_OK) CT_ERR(&o->err, st, "%s: %s", what, ct_device_errmsg(o->dev));
    return st;
}

/* Time an enqueued op into the profile when profiling is on. */
static ct_status timed(ct_optim *o, int bucket, double t0, ct_status st) {
    if (st == CT_OK && o->prof && o->prof->on) {
        st = ct_device_finish(o->dev);
        o->prof->ms[bucket] += 1e3 * (ct_time_now() - t0);
        o->prof->calls[bucket]++;
    }
    return st;
}

/* Floats [off, off + n) of a lie in one of its device buffers. */
static int within(const ct_arena *a, size_t off, size_t n) {
    return n <= ct_arena_span(a, off * sizeof(float)) / sizeof(float);
}

/* The norm of floats [lo, hi) of g into the scratch's norm cell: one kernel when the range
 * lies in one of g's device buffers; otherwise one per buffer, their squares summed on the host
 * (a device whose largest allocation is smaller than the gradients: ct_params_grads). */
static ct_status norm_range(ct_optim *o, ct_arena *g, size_t lo, size_t hi) {
    cl_mem sm = ct_buffer_mem(o->scratch);
    ct_view out = ct_view_of(sm, NORM_OFF), part = ct_view_of(sm, PARTIALS_OFF);
    if (within(g, lo, hi - lo))
        return ct_global_norm_forward(o->dev, out, part, ct_arena_view(g, lo), hi - lo);
    ct_status st = CT_OK;
    double s = 0;
    for (size_t a = lo, n; a < hi && st == CT_OK; a += n) {
        n = ct_arena_span(g, a * sizeof(float)) / sizeof(float);
        if (n > hi - a) n = hi - a;
        float v = 0;
        st = ct_global_norm_forward(o->dev, out, part, ct_arena_view(g, a), n);
        if (st == CT_OK) st = ct_buffer_read(o->scratch, NORM_OFF, &v, sizeof v);
        s += (double)v * v;
    }
    float t = (float)sqrt(s);
    return st == CT_OK ? ct_buffer_write(o->scratch, NORM_OFF, &t, sizeof t) : st;
}

/* The device norm of the local gradient buffer into the scratch's norm cell. */
static ct_status norm_on_device(ct_optim *o) {
    double t0 = ct_time_now();
    ct_status st = norm_range(o, ct_params_grads(o->P), 0, ct_params_local_len(o->P));
    return dev_fail(o, timed(o, CT_PROF_grad_norm, t0, st), "gradient norm");
}

ct_status ct_optim_local_norm(ct_optim *o, float *norm) {
    if (ct_params_grad_shard(o->P))
        return CT_ERR(&o->err, CT_ERR_STATE,
                      "gradient norm: under ZeRO-2 no worker holds the whole gradient (only its "
                      "shard): the norm spans every worker's shard");
    ct_status st = norm_on_device(o);
    if (st == CT_OK)
        st = dev_fail(o, ct_buffer_read(o->scratch, NORM_OFF, norm, sizeof *norm), "gradient norm");
    return st;
}

ct_status ct_optim_range_norm(ct_optim *o, size_t lo, size_t hi, float *norm) {
    if (ct_params_grad_shard(o->P))
        return CT_ERR(&o->err, CT_ERR_STATE,
                      "gradient norm: under ZeRO-2 no worker holds the whole gradient (only its "
                      "shard)");
    if (lo > hi || hi > ct_params_local_len(o->P))
        return CT_ERR(&o->err, CT_ERR_ARG, "gradient norm: range [%zu, %zu) outside [0, %zu)", lo,
                      hi, ct_params_local_len(o->P));
    *norm = 0;
    if (lo == hi) return CT_OK;
    double t0 = ct_time_now();
    ct_status st = norm_range(o, ct_params_grads(o->P), lo, hi);
    st = dev_fail(o, timed(o, CT_PROF_grad_norm, t0, st), "gradient norm");
    if (st == CT_OK)
        st = dev_fail(o, ct_buffer_read(o->scratch, NORM_OFF, norm, sizeof *norm), "gradient norm");
    return st;
}

ct_status ct_optim_shard_sumsq(ct_optim *o, double *out) {
    size_t lo[2], hi[2], at = 0;
    int nr = ct_params_shards(o->P, lo, hi);
    ct_arena *g = ct_params_grad_shard(o->P);
    double s = 0;
    ct_status st = CT_OK;
    for (int k = 0; k < nr && st == CT_OK; k++) {
        size_t off = g ? at : lo[k], n = hi[k] - lo[k];
        at += n;
        float *h = ct_malloc((n ? n : 1) * sizeof(float));
        if (!h) return CT_ERR(&o->err, CT_ERR_NOMEM, "gradient norm: out of host memory");
        st = dev_fail(o, ct_arena_read(g ? g : ct_params_grads(o->P), off * sizeof(float), h,
                                       n * sizeof(float)),
                      "gradient norm");
        for (size_t i = 0; st == CT_OK && i < n; i++) s += (double)h[i] * h[i];
        free(h);
    }
    *out = s;
    return st;
}

/* Where flat offset f lies in the optimizer shard's layout (its runs back to back). */
static size_t shard_off(const ct_params *P, size_t f) {
    size_t lo[2], hi[2], base = 0;
    int nr = ct_params_shards(P, lo, hi);
    for (int k = 0; k < nr; base += hi[k] - lo[k], k++)
        if (f >= lo[k] && f < hi[k]) return base + (f - lo[k]);
    return base; /* not in the shard: callers pass owned runs only */
}

ct_status ct_optim_owned_sumsq(ct_optim *o, double *out) {
    *out = 0;
    if (!o->runs)
        return CT_ERR(&o->err, CT_ERR_STATE,
                      "gradient norm: the owned runs are planned for tp > 1 or experts only (a "
                      "single worker or replicas use the local norm)");
    if (o->nruns == 0) return CT_OK; /* a DP replica under ZeRO-0: rank 0 counts */
    /* the device's norm of each run (in its cell), read back at once: one float per run */
    ct_arena *g = ct_params_grad_shard(o->P); /* the shard's layout, or the flat one */
    int sharded = g != NULL;
    if (!g) g = ct_params_grads(o->P);
    cl_mem cm = ct_buffer_mem(o->cells), sm = ct_buffer_mem(o->scratch);
    double t0 = ct_time_now();
    ct_status st = CT_OK;
    for (int k = 0; k < o->nruns && st == CT_OK; k++) {
        size_t n = o->runs[k][1] - o->runs[k][0];
        size_t a = sharded ? shard_off(o->P, o->runs[k][0]) : o->runs[k][0];
        if (within(g, a, n)) {
            st = ct_global_norm_forward(o->dev, ct_view_of(cm, (size_t)k),
                                        ct_view_of(sm, PARTIALS_OFF), ct_arena_view(g, a), n);
        } else { /* a run across two of the gradients' device buffers */
            st = norm_range(o, g, a, a + n);
            if (st == CT_OK)
                st = ct_mem_copy(o->dev, sm, NORM_OFF * sizeof(float), cm,
                                 (size_t)k * sizeof(float), sizeof(float));
        }
    }
    if (st == CT_OK)
        st = ct_buffer_read(o->cells, 0, o->hcells, (size_t)o->nruns * sizeof(float));
    if ((st = dev_fail(o, timed(o, CT_PROF_grad_norm, t0, st), "gradient norm")) != CT_OK) return st;
    double s = 0;
    for (int k = 0; k < o->nruns; k++) s += (double)o->hcells[k] * o->hcells[k];
    *out = s;
    return CT_OK;
}

/* AdamW over this worker's shard; `have_norm`: the norm cell holds the global norm (clipping
 * reads it on the device). */
static ct_status apply(ct_optim *o, const ct_adamw_hp *hp, int t, int have_norm) {
    ct_status st = CT_OK;
    ct_params *P = o->P;
    size_t lo[2], hi[2];
    int nr = ct_params_shards(P, lo, hi);
    ct_arena *pb = ct_params_param_shard(P), *gb = ct_params_grad_shard(P);
    int pshard = pb != NULL, gshard = gb != NULL; /* buffers holding the runs, not the flat */
    if (!pb) pb = ct_params_buffer(P);
    if (!gb) gb = ct_params_grads(P);
    ct_arena *mb = ct_params_adam_m(P), *vb = ct_params_adam_v(P);
    cl_mem sm = ct_buffer_mem(o->scratch);
    double t0 = ct_time_now();
    size_t base = 0; /* the run's first float in the optimizer's buffers */
    for (int k = 0; k < nr && st == CT_OK; base += hi[k] - lo[k], k++)
        for (int i = 0; i < CT_GPT_NUM_TENSORS && st == CT_OK; i++) {
            if (!ct_params_holds(P, i)) continue;
            int block = i >= CT_GPT_ln1w && i <= CT_GPT_fcprojb;
            size_t cnt = ct_params_slice_len(P, i);
            for (int l = 0; l < (block ? ct_params_config(P)->layers : 1) && st == CT_OK; l++) {
                if (block && !ct_params_holds_layer(P, l)) continue;
                size_t a = ct_params_flat_off(P, i, l), b = a + cnt;
                if (a < lo[k]) a = lo[k];
                if (b > hi[k]) b = hi[k];
                if (a >= b) continue;
                size_t mo = base + (a - lo[k]), po = pshard ? mo : a, go = gshard ? mo : a;
                /* one slice within a run: one part of every buffer (params.c), never across
                 * two of their device buffers */
                if (!within(pb, po, b - a) || !within(gb, go, b - a) || !within(mb, mo, b - a) ||
                    !within(vb, mo, b - a))
                    return CT_ERR(ct_device_err(o->dev), CT_ERR_STATE, /* callers add it */
                                  "%s of layer %d crosses two device buffers",
                                  ct_gpt_tensor_name(i), block ? l : -1);
                st = ct_adamw_update(o->dev, ct_arena_view(pb, po), ct_arena_view(gb, go),
                                     ct_arena_view(mb, mo), ct_arena_view(vb, mo),
                                     have_norm ? ct_view_of(sm, NORM_OFF) : ct_view_none(),
                                     hp->grad_clip, b - a, hp->lr, hp->beta1, hp->beta2, hp->eps,
                                     ct_gpt_tensor_decays(i) ? hp->weight_decay : 0.0f, t);
                st = timed(o, CT_PROF_adamw, t0, st);
                t0 = ct_time_now();
            }
        }
    return st;
}

ct_status ct_optim_step(ct_optim *o, const ct_adamw_hp *hp, int t, const float *norm,
                        float *norm_out) {
    ct_status st = CT_OK;
    ct_params *P = o->P;
    int need_norm = hp->grad_clip > 0.0f || norm_out;
    if (need_norm && norm)
        st = dev_fail(o, ct_buffer_write(o->scratch, NORM_OFF, norm, sizeof *norm), "optimizer");
    else if (need_norm && ct_params_grad_shard(P))
        return CT_ERR(&o->err, CT_ERR_STATE,
                      "optimizer: under ZeRO-2 the norm spans every worker's shard and must be "
                      "given");
    else if (need_norm)
        st = norm_on_device(o);
    if (st != CT_OK) return st;
    st = apply(o, hp, t, need_norm);
    if (st == CT_OK && norm_out) {
        if (norm) *norm_out = *norm;
        else st = ct_buffer_read(o->scratch, NORM_OFF, norm_out, sizeof *norm_out);
    }
    return dev_fail(o, st, "optimizer");
}

ct_status ct_optim_norm(ct_optim *o, const float *given, float *norm) {
    ct_status st;
    if (given) {
        *norm = *given;
        return dev_fail(o, ct_buffer_write(o->scratch, NORM_OFF, given, sizeof *given), "optimizer");
    }
    if (ct_params_grad_shard(o->P))
        return CT_ERR(&o->err, CT_ERR_STATE,
                      "optimizer: under ZeRO-2 the norm spans every worker's shard and must be "
                      "given");
    if ((st = norm_on_device(o)) != CT_OK) return st;
    return dev_fail(o, ct_buffer_read(o->scratch, NORM_OFF, norm, sizeof *norm), "gradient norm");
}

ct_status ct_optim_apply(ct_optim *o, const ct_adamw_hp *hp, int t) {
    return dev_fail(o, apply(o, hp, t, 1), "optimizer");
}

/* The first (tensor, layer) in table order, among what this worker holds of buffer `b` (flat
 * offset `b0` at its start, covering flat [lo, hi)), with an element that is not finite. */
static ct_status first_bad(ct_optim *o, ct_arena *b, size_t b0, size_t lo, size_t hi, int *tensor,
                           int *layer) {
    ct_params *P = o->P;
    size_t n = hi - lo;
    *tensor = *layer = -1;
    float *h = ct_malloc((n ? n : 1) * sizeof(float));
    if (!h) return CT_ERR(&o->err, CT_ERR_NOMEM, "finding a non-finite tensor: out of host memory");
    ct_status st = dev_fail(o, ct_arena_read(b, (lo - b0) * sizeof(float), h, n * sizeof(float)),
                            "finding a non-finite tensor");
    for (int i = 0; i < CT_GPT_NUM_TENSORS && st == CT_OK && *tensor < 0; i++) {
        if (!ct_params_holds(P, i)) continue;
        int block = i >= CT_GPT_ln1w && i <= CT_GPT_fcprojb;
        size_t cnt = ct_params_slice_len(P, i);
        for (int l = 0; l < (block ? ct_params_config(P)->layers : 1) && *tensor < 0; l++) {
            if (block && !ct_params_holds_layer(P, l)) continue;
            size_t a = ct_params_flat_off(P, i, l), e = a + cnt;
            if (a < lo) a = lo;
            if (e > hi) e = hi;
            for (size_t k = a; k < e; k++)
                if (!isfinite(h[k - lo])) {
                    *tensor = i, *layer = block ? l : -1;
                    break;
                }
        }
    }
    free(h);
    return st;
}

ct_status ct_optim_find_nonfinite(ct_optim *o, int grads, int *tensor, int *layer) {
    ct_params *P = o->P;
    ct_arena *b = grads ? ct_params_grad_shard(P) : ct_params_param_shard(P);
    if (b) { /* the shard is what is held: each run, the earliest tensor in table order */
        size_t lo[2], hi[2], base = 0;
        int nr = ct_params_shards(P, lo, hi);
        *tensor = *layer = -1;
        for (int k = 0; k < nr; base += hi[k] - lo[k], k++) {
            int t = -1, l = -1;
            ct_status st = first_bad(o, b, lo[k] - base, lo[k], hi[k], &t, &l);
            if (st != CT_OK) return st;
            if (t >= 0 && (*tensor < 0 || t < *tensor || (t == *tensor && l < *layer)))
                *tensor = t, *layer = l;
        }
        return CT_OK;
    }
    return first_bad(o, grads ? ct_params_grads(P) : ct_params_buffer(P), 0, 0,
                     ct_params_local_len(P), tensor, layer);
}
