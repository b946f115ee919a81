/* model.c - a worker's model: creation (its parameters, the attention path, the activation
 * arena, the TP and MoE pieces), what it reports of itself, host copies of its parameters,
 * gradients and optimizer state, the views the executor moves activations through, and
 * profiling. The layer math is forward.c and backward.c; the arena's plan, arena.c. Nothing is
 * allocated after creation. */
#include "model_impl.h"

#include "ct_engine_gemm.h"

ct_status ct_model_attention_choose(ct_device *dev, const ct_gpt_config *cfg,
                                   const ct_layout *layout, const ct_coords *coords,
                                   const ct_model_plan *plan, ct_attn_path *path,
                                   ct_attn_cfg *acfg, char *note, size_t len) {
    int N = layout->tp, max_B = plan->max_B, max_T = plan->max_T;
    /* a TP worker runs attention on its C/N channels and NH/N heads */
    ct_status st = ct_attn_select(dev, plan->attention, plan->attn_blocks, max_T,
                                  cfg->channels / N, cfg->heads / N, path, acfg, note, len);
    if (st != CT_OK || plan->attention != CT_ATTN_AUTO || *path != CT_ATTN_GEMM) return st;
    /* auto timed one row: at the planned batch the GEMM path's scores may not fit where the
     * fused path, which keeps none, does */
    int huge = (double)max_B * (cfg->heads / N) * max_T * max_T >= 2147483647.0;
    if (huge || ct_model_gemm_exceeds(cfg, layout, coords, plan, ct_device_max_alloc(dev))) {
        *path = CT_ATTN_FUSED;
        size_t k = strlen(note);
        snprintf(note + k, len - k,
                 "; fused instead: at batch %d the GEMM path's scores (%d x %d x %d x %d floats a "
                 "block) %s",
                 max_B, max_B, cfg->heads / N, max_T, max_T,
                 huge ? "exceed 2^31 elements"
                      : "need a buffer above the device's largest allocation");
    }
    return CT_OK;
}

/* The bf16 working copy of the parameters: the parameter buffer's layout at 2 bytes an element
 * (the flat layout, or ZeRO-3's working buffer: each gathered range is converted where it
 * lands), cut into parts where the held (tensor, layer) slices start, so a piece holds whole
 * tensors. */
static int size_cmp(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return x < y ? -1 : x > y;
}
static ct_status work_alloc(ct_model *m, ct_err *err) {
    size_t n = ct_params_buffer_len(m->P), np = 0;
    size_t *parts = ct_malloc(sizeof *parts * (CT_GPT_NUM_TENSORS * (size_t)m->cfg.layers + 1));
    if (!parts) return CT_ERR(err, CT_ERR_NOMEM, "ct_model_create: out of host memory");
    parts[np++] = 0;
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++)
        for (int l = 0; l < m->cfg.layers; l++)
            if (ct_params_slice_len(m->P, i) > 0 && ct_params_holds_layer(m->P, l)) {
                size_t f = ct_params_pview(m->P, i, l);
                if (f < n) parts[np++] = 2 * f;
            }
    qsort(parts, np, sizeof *parts, size_cmp);
    size_t k = 0;
    for (size_t i = 0; i < np; i++)
        if (!k || parts[i] != parts[k - 1]) parts[k++] = parts[i];
    ct_status st = ct_arena_alloc(m->dev, CT_MEM_PARAMS, "bf16 working parameters", 2 * n, parts,
                                  NULL, k, &m->work);
    free(parts);
    if (st != CT_OK)
        return CT_ERR(err, st, "ct_model_create: the bf16 working copy: %s",
                      ct_device_errmsg(m->dev));
    return ct_model_refresh_working(m);
}

ct_status ct_model_refresh_working_at(ct_model *m, uint64_t step) {
    m->work_step = step;
    return ct_model_refresh_working(m);
}

ct_status ct_model_refresh_working(ct_model *m) {
    /* ZeRO-3: the gathers convert what they write (the working buffer is stale in between) */
    if (!m->work || ct_params_zero_stage(m->P) >= 3) return CT_OK;
    return ct_model_refresh_working_range(m, 0, ct_params_flat_len(m->P));
}

ct_status ct_model_refresh_working_range(ct_model *m, size_t lo, size_t len) {
    if (!m->work) return CT_OK;
    int sr = m->plan.bf16_round != 0;
    ct_arena *src = ct_params_buffer(m->P);
    size_t n = lo + len;
    if (n > ct_params_buffer_len(m->P) || n < lo)
        return CT_ERR(&m->err, CT_ERR_ARG, "ct_model_refresh_working_range: [%zu, %zu) outside "
                      "the %zu parameters", lo, n, ct_params_buffer_len(m->P));
    for (size_t e = lo; e < n;) { /* runs that lie within one piece of each */
        size_t is, id;
        ct_buffer *bs = ct_arena_at(src, e * 4, &is), *bd = ct_arena_at(m->work, e * 2, &id);
        size_t run = ct_arena_span(src, e * 4) / 4, rd = ct_arena_span(m->work, e * 2) / 2;
        if (rd < run) run = rd;
        if (run > n - e) run = n - e;
        if (!bs || !bd || !run)
            return CT_ERR(&m->err, CT_ERR_STATE, "ct_model_refresh_working: element %zu", e);
        ct_status st = sr ? ct_bf16_from_f32_stochastic_enqueue(
                                m->dev, ct_buffer_mem(bs), is / 4, ct_buffer_mem(bd), id / 2, run,
                                m->plan.round_seed, m->work_step, e, NULL)
                          : ct_bf16_from_f32_enqueue(m->dev, ct_buffer_mem(bs), is / 4,
                                                     ct_buffer_mem(bd), id / 2, run, NULL);
        if (st != CT_OK) return dev_fail(m, st, "ct_model_refresh_working");
        e += run;
    }
    return CT_OK;
}

ct_view ct__model_pv(const ct_model *m, int i, int l) {
    if (!m->work) return ct_params_pv(m->P, i, l);
    return ct_arena_view_bf16(m->work, ct_params_pview(m->P, i, l));
}

/* The GEMM path per shape (ct_gemm_plan_make), set on the device before anything is timed or
 * enqueued on it (the attention choice runs the ops). */
static ct_status gemm_plan(ct_model *m, const ct_gpt_config *cfg, int N, ct_err *err) {
    int bf16 = m->plan.precision == CT_PRECISION_BF16;
    ct_status st;
    if (!m->plan.gemm) { /* the defaults, unmeasured */
        m->gemm = ct_gemm_plan_default();
        st = ct_gemm_path_check(m->dev, bf16 ? m->gemm.bf16 : m->gemm.fp32);
        snprintf(m->gemm_note, sizeof m->gemm_note, "%s for every product (the default)",
                 ct_gemm_path_str(bf16 ? m->gemm.bf16 : m->gemm.fp32));
    } else {
        ct_gemm_shape sh[CT_GEMM_MODEL_SHAPES];
        int n = ct_gemm_model_shapes(cfg, N, m->plan.max_B, m->plan.max_T, sh);
        st = ct_gemm_plan_make(m->dev, m->plan.gemm, bf16, m->plan.tf32, 0, sh, n, &m->gemm,
                               m->gemm_note, sizeof m->gemm_note);
    }
    if (st != CT_OK)
        return CT_ERR(err, st, "ct_model_create: the GEMM paths (--gemm %s%s): %s",
                      m->plan.gemm ? m->plan.gemm : "default", m->plan.tf32 ? ", --tf32 1" : "",
                      ct_device_errmsg(m->dev));
    ct_device_set_gemm_plan(m->dev, &m->gemm);
    return CT_OK;
}

ct_status ct_model_create(ct_model **out, const ct_gpt_config *cfg, const ct_layout *layout,
                          const ct_coords *coords, ct_device *dev, int max_B, int max_T,
                          ct_err *err) {
    ct_model_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.max_B = max_B, plan.max_T = max_T, plan.slots = 1;
    return ct_model_create_plan(out, cfg, layout, coords, dev, &plan, err);
}

ct_status ct_model_create_plan(ct_model **out, const ct_gpt_config *cfg, const ct_layout *layout,
                               const ct_coords *coords, ct_device *dev, const ct_model_plan *plan,
                               ct_err *err) {
    ct_status st = CT_OK;
    ct_model *m = NULL;
    *out = NULL;
    if (!cfg || !layout || !coords || !dev || !plan)
        return CT_ERR(err, CT_ERR_ARG,
                      "ct_model_create: config, layout, coords, device and plan needed");
    if ((st = ct__model_plan_check(cfg, layout, coords, plan, 1, "ct_model_create", err)) != CT_OK)
        return st;
    int max_B = plan->max_B, max_T = plan->max_T, N = layout->tp;
    m = ct_calloc(1, sizeof *m);
    if (!m) return CT_ERR(err, CT_ERR_NOMEM, "ct_model_create: out of host memory");
    m->cfg = *cfg;
    m->plan = *plan;
    m->dev = dev;
    m->N = N, m->r = coords->tp_rank, m->sp = N > 1 && plan->sp;
    m->plan.sp = m->sp;
    if (N == 1) m->plan.tp = NULL;
    ct_params_plan pplan = ct__model_params_plan(cfg, layout, plan);
    if ((st = ct_params_create(&m->P, cfg, layout, coords, &pplan, dev, err)) != CT_OK)
        goto cleanup;
    m->chunk_of = ct_malloc(sizeof(int) * (size_t)cfg->layers);
    m->st = ct_calloc((size_t)plan->slots, sizeof *m->st);
    if (!m->chunk_of || !m->st) {
        st = CT_ERR(err, CT_ERR_NOMEM, "ct_model_create: out of host memory");
        goto cleanup;
    }
    for (int l = 0; l < cfg->layers; l++) m->chunk_of[l] = -1;
    for (int k = 0; k < ct_params_nchunks(m->P); k++) {
        int lo, hi;
        ct_params_chunk(m->P, k, &lo, &hi);
        for (int l = lo; l < hi; l++) m->chunk_of[l] = k;
        if (hi - lo > m->nb) m->nb = hi - lo;
    }
    for (int s = 0; s < plan->slots; s++) m->st[s].chunk = -1;
    if ((st = gemm_plan(m, cfg, N, err)) != CT_OK) goto cleanup;
    if ((st = ct_model_attention_choose(dev, cfg, layout, coords, plan, &m->attn, &m->acfg,
                                        m->attn_note, sizeof m->attn_note)) != CT_OK) {
        CT_ERR(err, st, "ct_model_create: choosing the attention path: %s", ct_device_errmsg(dev));
        goto cleanup;
    }
    if (m->attn == CT_ATTN_GEMM &&
        (double)max_B * (cfg->heads / N) * max_T * max_T >= 2147483647.0) {
        st = CT_ERR(err, CT_ERR_UNSUPPORTED,
                    "ct_model_create: batch %d x sequence %d is too large for the GEMM attention "
                    "path (its scores would exceed 2^31 elements; the fused path keeps none)",
                    max_B, max_T);
        goto cleanup;
    }
    if ((st = ct_model_recompute_check(plan->recompute, m->attn, plan->split_backward, err)) !=
        CT_OK)
        goto cleanup;
    ct_moe_cfg mc;
    size_t lmoe, xmoe;
    if ((st = ct__model_moe_config(cfg, layout, plan, m->nb, &mc, &lmoe, &xmoe, err)) != CT_OK) goto cleanup;
    ct__model_plan_arena(&m->ar, cfg, N, m->sp, m->nb, ct_params_has_head(m->P), m->attn, max_B, max_T,
               plan->split_backward, plan->recompute, lmoe, xmoe, plan->loss_chunk,
               plan->precision == CT_PRECISION_BF16);
    size_t total = m->ar.x.total + (size_t)plan->slots * m->ar.s.total;
    size_t *parts = NULL, np = 0;
    const char **names = NULL;
    if (!(np = ct__model_arena_part_list(&m->ar, plan->slots, &parts, &names)))
        st = CT_ERR(err, CT_ERR_NOMEM, "ct_model_create: out of host memory");
    else {
        if ((st = ct_arena_alloc(dev, CT_MEM_ACTIVATIONS, "activations", total * sizeof(float),
                                 parts, names, np, &m->acts)) != CT_OK)
            CT_ERR(err, st,
                   "ct_model_create: %s. A smaller micro-batch or sequence shrinks every part; "
                   "tensor parallelism divides the logits and the scores; --attention fused "
                   "keeps no scores",
                   ct_device_errmsg(dev));
    }
    free(parts);
    free(names);
    if (st != CT_OK) goto cleanup;
    if (N > 1) {
        ct_tp_opts to = ct_tp_opts_default();
        to.sp = m->sp;
        to.comm = plan->tp_comm;
        if ((st = ct_tp_create(&m->tp, plan->tp, dev, m->acts, ct__model_tp_staging_floats(cfg, max_B, max_T),
                               &to, err)) != CT_OK)
            goto cleanup;
    }
    if (cfg->experts > 0 &&
        (st = ct_moe_create(&m->moe, &mc, layout->ep > 1 ? plan->ep : NULL, m->tp, dev, m->acts,
                            err)) != CT_OK)
        goto cleanup;
    ct_store store = m->ar.bf16 ? CT_STORE_BF16 : CT_STORE_F32;
    if ((st = ct_ops_warmup(dev)) != CT_OK ||
        (m->ar.bf16 && (st = ct_ops_warmup_store(dev, store)) != CT_OK) ||
        (m->attn == CT_ATTN_FUSED &&
         (st = ct_attention_fused_warmup_store(dev, &m->acfg, cfg->channels / cfg->heads,
                                               store)) != CT_OK)) {
        CT_ERR(err, st, "ct_model_create: building the engine kernels: %s", ct_device_errmsg(dev));
        goto cleanup;
    }
    if (m->ar.bf16 && (st = work_alloc(m, err)) != CT_OK) goto cleanup;
    *out = m;
    return CT_OK;
cleanup:
    ct_model_free(m);
    return st;
}

void ct_model_free(ct_model *m) {
    if (!m) return;
    ct_moe_free(m->moe);
    ct_tp_free(m->tp);
    ct_arena_free(m->acts);
    ct_arena_free(m->work);
    ct_params_free(m->P);
    free(m->chunk_of);
    free(m->st);
    free(m);
}

const ct_gpt_config *ct_model_config(const ct_model *m) { return &m->cfg; }
ct_tp *ct_model_tp(ct_model *m) { return m->tp; }
ct_moe *ct_model_moe(ct_model *m) { return m->moe; }
size_t ct_model_act_floats(const ct_model *m, int B, int T) {
    size_t n = (size_t)B * T * (size_t)m->cfg.channels;
    return m->sp ? n / (size_t)m->N : n;
}
ct_device *ct_model_device(const ct_model *m) { return m->dev; }
ct_params *ct_model_params(ct_model *m) { return m->P; }
const ct_model_plan *ct_model_plan_of(const ct_model *m) { return &m->plan; }
const char *ct_model_errmsg(const ct_model *m) { return m->err.msg; }
size_t ct_model_num_params(const ct_model *m) { return ct_params_num_params(m->P); }
size_t ct_model_slot_bytes(const ct_model *m) { return m->ar.s.total * sizeof(float); }
size_t ct_model_layer_bytes(const ct_model *m) {
    /* the per-block regions of a slot: everything between the input and the head's tensors */
    return (m->ar.s.lnf - m->ar.s.blk[0]) / (m->nb ? (size_t)m->nb : 1) * sizeof(float);
}
size_t ct_model_recompute_bytes(const ct_model *m) {
    return (m->ar.x.rc_hi - m->ar.x.rc_lo) * sizeof(float);
}
ct_attn_path ct_model_attention(const ct_model *m, ct_attn_cfg *cfg) {
    if (cfg) *cfg = m->acfg;
    return m->attn;
}
const char *ct_model_attention_note(const ct_model *m) { return m->attn_note; }
const char *ct_model_gemm_note(const ct_model *m) { return m->gemm_note; }
const ct_gemm_plan *ct_model_gemm_plan(const ct_model *m) { return &m->gemm; }

ct_status ct_model_set_gemm_plan(ct_model *m, const ct_gemm_plan *p, const char *why) {
    for (int i = -2; i < p->n; i++) { /* the defaults, then every shape's path */
        ct_gemm_path path = i == -2 ? p->fp32 : i == -1 ? p->bf16 : p->shapes[i].path;
        ct_status st = ct_gemm_path_check(m->dev, path);
        if (st != CT_OK)
            return CT_ERR(&m->err, st, "ct_model_set_gemm_plan: the %s path: %s",
                          ct_gemm_path_str(path), ct_device_errmsg(m->dev));
    }
    m->gemm = *p;
    ct_device_set_gemm_plan(m->dev, &m->gemm);
    size_t u = strlen(m->gemm_note);
    if (why && u < sizeof m->gemm_note)
        snprintf(m->gemm_note + u, sizeof m->gemm_note - u, "\n%s", why);
    return CT_OK;
}
size_t ct_model_scratch_bytes(const ct_model *m) { return m->ar.x.total * sizeof(float); }
int ct_model_act_pieces(const ct_model *m, size_t *largest) {
    if (largest) *largest = ct_arena_largest_piece(m->acts);
    return ct_arena_npieces(m->acts);
}

void ct_model_tensor(const ct_model *m, int i, size_t *offset, size_t *count) {
    size_t sizes[CT_GPT_NUM_TENSORS], o = 0;
    ct_gpt_param_sizes(&m->cfg, sizes);
    int ok = i >= 0 && i < CT_GPT_NUM_TENSORS;
    for (int k = 0; ok && k < i; k++) o += sizes[k];
    if (offset) *offset = ok ? o : 0;
    if (count) *count = ok ? sizes[i] : 0;
}

/* ------------------------------------------------------------------ host copies */

/* Errors of the parameter layer, onto the model's record. */
static ct_status pfail(ct_model *m, ct_status st) {
    if (st != CT_OK) CT_ERR(&m->err, st, "%s", ct_params_errmsg(m->P));
    return st;
}
static void invalidate(ct_model *m) {
    for (int s = 0; s < m->plan.slots; s++) m->st[s].logits_valid = 0, m->st[s].have_targets = 0;
}

ct_status ct_model_init_random(ct_model *m, uint64_t seed) {
    invalidate(m);
    ct_status st = pfail(m, ct_params_init_random(m->P, seed));
    return st != CT_OK ? st : ct_model_refresh_working(m);
}
ct_status ct_model_set_params(ct_model *m, const float *h, size_t n) {
    invalidate(m);
    ct_status st = pfail(m, ct_params_set(m->P, h, n));
    return st != CT_OK ? st : ct_model_refresh_working(m);
}
ct_status ct_model_get_params(ct_model *m, float *h, size_t n) {
    return pfail(m, ct_params_get(m->P, h, n));
}
ct_status ct_model_set_grads(ct_model *m, const float *h, size_t n) {
    return pfail(m, ct_params_set_grads(m->P, h, n));
}
ct_status ct_model_get_grads(ct_model *m, float *h, size_t n) {
    return pfail(m, ct_params_get_grads(m->P, h, n));
}
ct_status ct_model_set_optimizer(ct_model *m, const float *am, const float *av, size_t n) {
    return pfail(m, ct_params_set_optimizer(m->P, am, av, n));
}
ct_status ct_model_get_optimizer(ct_model *m, float *am, float *av, size_t n) {
    return pfail(m, ct_params_get_optimizer(m->P, am, av, n));
}
ct_status ct_model_zero_grad(ct_model *m) {
    ct_status st = CT_OK;
    RUN(CT_PROF_zero_grad, ct_params_zero_grads(m->P));
cleanup:
    return pfail(m, st);
}

/* ------------------------------------------------------------------ views */

ct_view ct__model_head_weight(const ct_model *m, int grads) {
    int i = ct_gpt_has_lm_head(&m->cfg) ? CT_GPT_lmhead : CT_GPT_wte;
    return grads ? ct_params_gv(m->P, i, 0) : ct__model_pv(m, i, 0);
}


ct_status ct__model_check_ids(ct_model *m, const int *ids, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab)
            return CT_ERR(&m->err, CT_ERR_ARG,
                          "ct_model_forward: %s[%zu] = %d is outside the vocabulary [0, %d)", what,
                          i, ids[i], m->cfg.vocab);
    return CT_OK;
}

static int chunk_first(const ct_model *m, int l) {
    int lo;
    ct_params_chunk(m->P, m->chunk_of[l], &lo, NULL);
    return l == lo;
}


void ct__model_block_views(const ct_model *m, int slot, int l, bviews *v) {
    size_t sb = slot_base(m, slot), k = pos(m, l);
    for (int t = 0; t < B__COUNT; t++) {
        size_t at = m->ar.kept[t] ? sb + m->ar.s.blk[t] : m->ar.x.rc[t];
        size_t e = m->ar.kept[t] ? k * m->ar.bsz[t] : 0; /* elements into the region */
        v->t[t] = m->ar.act[t] ? aa(m, at, e) : av(m, at + e);
    }
    v->res = chunk_first(m, l) ? aa(m, sb + m->ar.s.in, 0)
                               : aa(m, sb + m->ar.s.blk[B_RES3], (k - 1) * m->ar.lrow);
    v->wg = aa(m, sb + m->ar.s.wg, 4 * k * m->ar.lrow);
}

/* The arena piece holding view v's next `bytes`, or NULL with the model's error set. */
static ct_buffer *act_piece(ct_model *m, ct_view v, size_t bytes, const char *what) {
    ct_buffer *b = ct_arena_piece_of(m->acts, v.mem);
    if (!b || v.off * ct_view_elem_bytes(v) + bytes > ct_buffer_bytes(b)) {
        CT_ERR(&m->err, CT_ERR_ARG, "%s: the view is not inside the activation arena", what);
        return NULL;
    }
    return b;
}
ct_status ct_model_view_read(ct_model *m, ct_view v, void *host, size_t bytes) {
    ct_buffer *b = act_piece(m, v, bytes, "ct_model_view_read");
    if (!b) return CT_ERR_ARG;
    return dev_fail(m, ct_buffer_read(b, v.off * ct_view_elem_bytes(v), host, bytes), "ct_model_view_read");
}
ct_status ct_model_view_write(ct_model *m, ct_view v, const void *host, size_t bytes) {
    ct_buffer *b = act_piece(m, v, bytes, "ct_model_view_write");
    if (!b) return CT_ERR_ARG;
    return dev_fail(m, ct_buffer_write(b, v.off * ct_view_elem_bytes(v), host, bytes),
                    "ct_model_view_write");
}

ct_status ct_model_view_read_async(ct_model *m, ct_view v, void *host, size_t bytes,
                                   ct_event **ev) {
    ct_buffer *b = act_piece(m, v, bytes, "ct_model_view_read_async");
    if (!b) return CT_ERR_ARG;
    return dev_fail(m, ct_buffer_read_async(b, v.off * ct_view_elem_bytes(v), bytes, host, ev),
                    "ct_model_view_read_async");
}
ct_status ct_model_view_write_async(ct_model *m, ct_view v, const void *host, size_t bytes,
                                    ct_event **ev) {
    ct_buffer *b = act_piece(m, v, bytes, "ct_model_view_write_async");
    if (!b) return CT_ERR_ARG;
    return dev_fail(m, ct_buffer_write_async(b, v.off * ct_view_elem_bytes(v), bytes, host, ev),
                    "ct_model_view_write_async");
}

void ct_model_set_trace(ct_model *m, ct_trace *t) { m->tr = t; }

ct_status ct__model_group_end(ct_model *m, const char *name, double t0) {
    if (!ct_trace_on(m->tr)) return CT_OK;
    ct_status st = ct_device_finish(m->dev);
    ct_trace_event(m->tr, CT_TRACE_MAIN, name, "compute", t0, CT_TRACE_MB);
    return st;
}

ct_moe_weights ct__model_moe_weights(const ct_model *m, int l, int grads) {
    /* the weights as the step reads them (bf16: the working copy), the gradients fp32 */
#define AT(t) (grads ? ct_params_gv(m->P, CT_GPT_##t, l) : ct__model_pv(m, CT_GPT_##t, l))
    ct_moe_weights w;
    w.routerw = AT(routerw);
    w.fcw = AT(fcw);
    w.fcb = AT(fcb);
    w.fcprojw = AT(fcprojw);
    w.fcprojb = AT(fcprojb);
#undef AT
    return w;
}

ct_view ct_model_dres(ct_model *m) { return aa(m, m->ar.x.dres, 0); }

/* ------------------------------------------------------------------ profiling */

ct_profile *ct_model_profile(ct_model *m) { return &m->prof; }
void ct_model_profile_enable(ct_model *m, int on) { m->prof.on = on != 0; }

void ct_model_profile_reset(ct_model *m) {
    memset(m->prof.ms, 0, sizeof m->prof.ms);
    memset(m->prof.calls, 0, sizeof m->prof.calls);
}

int ct_model_profile_get(const ct_model *m, ct_model_op_time *out, int max) {
    int n = 0;
    for (int i = 0; i < CT_PROF__COUNT && n < max; i++)
        if (m->prof.calls[i] > 0) {
            out[n].name = ct_profile_name(i);
            out[n].ms = m->prof.ms[i];
            out[n].calls = m->prof.calls[i];
            n++;
        }
    return n;
}

