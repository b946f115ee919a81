/* exec.c - the step executor's life: creation (the gradient ranges, the reducer, ZeRO, the
 * optimizer, the groups it works over), what it reports (times, memory, state gathered for a
 * checkpoint), and its end. Running a step is step.c. */
#include "ct_engine_step_test.h"
#include "exec_impl.h"

ct_exec_opts ct_exec_opts_default(void) {
    ct_exec_opts o;
    o.grads = ct_grads_opts_default();
    return o;
}

const char *ct_exec_errmsg(const ct_exec *x) { return x->err.msg; }
ct_grads *ct_exec_grads(ct_exec *x) { return x->g; }
ct_zero *ct_exec_zero(ct_exec *x) { return x->z; }

void ct_exec_set_trace(ct_exec *x, ct_trace *t) {
    x->tr = t;
    ct_model_set_trace(x->m, t);
    if (x->g) ct_grads_set_trace(x->g, t);
    ct_zero_set_trace(x->z, t);
}

ct_status ct_exec_create(ct_exec **out, ct_model *m, ct_grid *grid, const ct_exec_opts *o,
                         ct_err *err) {
    *out = NULL;
    ct_exec_opts def = ct_exec_opts_default();
    if (!o) o = &def;
    ct_exec *x = ct_calloc(1, sizeof *x);
    if (!x) return CT_ERR(err, CT_ERR_NOMEM, "ct_exec_create: out of host memory");
    x->m = m;
    x->P = ct_model_params(m);
    x->dev = ct_model_device(m);
    x->grid = grid;
    x->world = grid ? ct_grid_world(grid) : NULL;
    x->dp = grid ? ct_grid_dp(grid) : NULL;
    x->pp = grid ? ct_grid_pp(grid) : NULL;
    x->emb = grid ? ct_grid_emb(grid) : NULL;
    x->stage = ct_params_coords(x->P)->pp_rank;
    x->nstages = ct_params_layout(x->P)->pp;
    x->nchunks = ct_params_nchunks(x->P);
    x->dpsize = x->dp ? ct_comm_size(x->dp) : 1;
    x->tp = grid ? ct_grid_tp(grid) : NULL;
    x->tpsize = x->tp ? ct_comm_size(x->tp) : 1;
    x->experts = ct_params_config(x->P)->experts;
    x->ep = grid && x->experts ? ct_grid_ep(grid) : NULL;
    x->edp = grid && x->experts ? ct_grid_edp(grid) : NULL;
    x->epsize = x->ep ? ct_comm_size(x->ep) : 1;
    if (x->experts) {
        const ct_gpt_config *c = ct_params_config(x->P);
        int W = x->world ? ct_comm_size(x->world) : 1;
        x->moe_counts = ct_calloc(2 * (size_t)c->layers * c->experts + (size_t)W, sizeof(int32_t));
        if (!x->moe_counts) {
            free(x);
            return CT_ERR(err, CT_ERR_NOMEM, "ct_exec_create: out of host memory");
        }
    }
    ct_status st = CT_OK;
    const ct_layout *lay = ct_params_layout(x->P);
    if (grid) {
        const ct_layout *gl = ct_grid_layout(grid);
        const ct_coords *gc = ct_grid_coords(grid), *mc = ct_params_coords(x->P);
        int gep = gl->ep < 1 ? 1 : gl->ep, mep = lay->ep < 1 ? 1 : lay->ep;
        if (gep != mep)
            st = CT_ERR(err, CT_ERR_ARG,
                        "ct_exec_create: the model was built for ep %d, the grid has ep %d", mep,
                        gep);
        else if (gl->dp != lay->dp || gl->tp != lay->tp || gl->pp != lay->pp || gc->dp_rank != mc->dp_rank ||
            gc->tp_rank != mc->tp_rank || gc->pp_rank != mc->pp_rank)
            st = CT_ERR(err, CT_ERR_ARG,
                        "ct_exec_create: the model was built for dp %d tp %d pp %d at (%d, %d, "
                        "%d), the grid is dp %d tp %d pp %d at (%d, %d, %d)",
                        lay->dp, lay->tp, lay->pp, mc->dp_rank, mc->tp_rank, mc->pp_rank, gl->dp,
                        gl->tp, gl->pp, gc->dp_rank, gc->tp_rank, gc->pp_rank);
    } else if (lay->dp * lay->tp * lay->pp != 1) {
        st = CT_ERR(err, CT_ERR_ARG,
                    "ct_exec_create: a layout of several workers (dp %d tp %d pp %d) needs a grid",
                    lay->dp, lay->tp, lay->pp);
    }
    x->nslots = ct_model_plan_of(m)->slots;
    x->slots = ct_malloc(sizeof *x->slots * (size_t)x->nslots);
    if (st == CT_OK && !x->slots) st = CT_ERR(err, CT_ERR_NOMEM, "ct_exec_create: no memory");
    for (int s = 0; st == CT_OK && s < x->nslots; s++) x->slots[s].mb = x->slots[s].chunk = -1;
    /* the gradient ranges: the stage's flat layout averaged over its DP group; a pipeline's tied
     * wte (first and last stage) then summed over the embedding group, so both copies get the
     * whole gradient; under sequence parallelism the LayerNorm parameters summed over the TP
     * group (each TP worker's gradient covers only its tokens) */
    size_t wlo = 0, whi = 0;
    ct_params_wte_range(x->P, &wlo, &whi);
    int tied = multi(x->emb) && whi > wlo;
    int sp = ct_model_plan_of(m)->sp && x->tpsize > 1;
    if (tied && !ct_params_has_embed(x->P)) x->norm_lo = whi;
    if (st == CT_OK && sp) {
        /* the gradient thread's own handle on the TP group, split from world (collective over
         * every worker) with each TP group's colour its first worker: TP groups splitting
         * themselves alike would share an MPI tag across ranks (ct_comm_split) */
        if ((st = ct_comm_split(x->world, ct_comm_world_rank(x->tp, 0), ct_comm_rank(x->tp),
                                &x->tpg)) != CT_OK)
            CT_ERR(err, st, "ct_exec_create: a second handle on the TP group: %s",
                   ct_comm_errmsg(x->world));
    }
    if (st == CT_OK && (multi(x->dp) || tied || sp))
        st = ct__exec_ranges(x->P, multi(x->dp) ? x->dp : NULL, multi(x->edp) ? x->edp : NULL,
                             tied ? x->emb : NULL, sp ? x->tpg : NULL, &x->ranges, &x->nranges,
                             err);
    if (st == CT_OK && x->nranges > 0)
        st = ct_grads_create(&x->g, m, x->ranges, x->nranges, &o->grads, err);
    if (st == CT_OK) st = ct_zero_create(&x->z, m, x->dp, x->edp, x->world, err);
    if (st == CT_OK) st = ct_optim_create(&x->o, x->P, ct_model_profile(m), err);
    if (st != CT_OK) {
        ct_exec_free(x);
        return st;
    }
    *out = x;
    return CT_OK;
}

void ct_exec_free(ct_exec *x) {
    if (!x) return;
    ct__xfer_free(x);
    ct_grads_free(x->g);
    ct_comm_free(x->tpg);
    free(x->ranges);
    ct_zero_free(x->z);
    ct_optim_free(x->o);
    if (x->m) ct_model_set_trace(x->m, NULL);
    free(x->slots);
    free(x->moe_counts);
    free(x->losses);
    free(x->tl_dur);
    free(x);
}

ct_status ct_exec_gather_state(ct_exec *x, float *params, float *adam_m, float *adam_v) {
    return ct_state_gather(x->m, x->world, params, adam_m, adam_v, &x->err);
}

ct_status ct_exec_mem_gather(ct_exec *x, uint64_t *out) {
    size_t host = (x->g ? ct_grads_host_bytes(x->g) : 0) + ct_zero_host_bytes(x->z) +
                  ct_tp_host_bytes(ct_model_tp(x->m)) + ct_moe_host_bytes(ct_model_moe(x->m));
    return ct_state_mem_gather(x->dev, x->world, host, out, &x->err);
}

ct_status ct_exec_dp_average(ct_exec *x, float *v) {
    if (!multi(x->dp)) return CT_OK;
    ct_status st = ct_comm_allreduce(x->dp, v, v, 1, CT_F32, CT_OP_AVG, NULL);
    if (st != CT_OK) CT_ERR(&x->err, st, "averaging over the DP group: %s", ct_comm_errmsg(x->dp));
    return st;
}

void ct_exec_times_get(const ct_exec *x, ct_exec_times *out) { *out = x->times; }
void ct_exec_times_reset(ct_exec *x) { memset(&x->times, 0, sizeof x->times); }
void ct_exec_test_poison(ct_exec *x, int t) { x->poison_t = t; }

