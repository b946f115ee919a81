/* problem.c - what is fixed and what is free: the problem from train_gpt's parameters (the
 * flags given pin their choices), the devices' allocation limit, the validity of a layout
 * (train_gpt's own checks), every valid layout in a fixed order, and a layout's pipeline split. */
#include <stdlib.h>
#include <string.h>

#include "plan_impl.h"

void ct_plan_problem_from_params(ct_plan_problem *pb, const ct_train_params *p,
                                 const ct_gpt_config *cfg, int W, int D) {
    memset(pb, 0, sizeof *pb);
    pb->cfg = *cfg;
    pb->base = *p;
    pb->T = p->seq;
    pb->B = p->batch;
    pb->micro = p->total_batch ? p->total_batch / (p->batch * p->seq) : 1;
    pb->W = W;
    pb->D = D;
    pb->mem_cap = p->mem_cap_gb * 1073741824.0;
    pb->max_alloc = (double)(uint64_t)(p->max_alloc_mb * 1048576.0); /* as the device takes it */
    ct_attn_path_parse(p->attention, &pb->attn);
    pb->bucket_mb = p->bucket_mb;
    pb->overlap = p->overlap;
    pb->tp_overlap = p->tp_overlap;
    pb->act_bytes = p->precision && !strcmp(p->precision, "bf16") ? 2 : 4;
    pb->grad_wire_bytes = p->grad_reduce && !strcmp(p->grad_reduce, "bf16") ? 2 : 4;
    pb->max_virt = 2;
    snprintf(pb->recompute, sizeof pb->recompute, "%s", p->recompute ? p->recompute : "none");
    pb->fix.dp = pb->fix.tp = pb->fix.pp = pb->fix.ep = pb->fix.zero = -1;
    pb->fix.sched = (ct_sched_kind)-1;
    pb->fix.virt = pb->fix.sp = -1;
}

void ct_plan_problem_fix(ct_plan_problem *pb, const ct_train_params *p) {
    if (ct_train_given(p, "dp")) pb->fix.dp = p->dp;
    if (ct_train_given(p, "tp")) pb->fix.tp = p->tp;
    if (ct_train_given(p, "pp")) pb->fix.pp = p->pp;
    if (ct_train_given(p, "zero")) pb->fix.zero = p->zero;
    if (ct_train_given(p, "ep")) pb->fix.ep = p->ep;
    if (ct_train_given(p, "sequence-parallel")) pb->fix.sp = p->sequence_parallel;
    if (ct_train_given(p, "virtual-stages")) pb->fix.virt = p->virtual_stages;
    if (ct_train_given(p, "schedule")) {
        ct_sched_kind k;
        ct_err e = {0};
        if (ct_sched_parse(p->schedule, &k, &e) == CT_OK) pb->fix.sched = k;
    }
}

void ct_plan_limit_alloc(ct_plan_problem *pb, double device_max_alloc) {
    if (device_max_alloc > 0 && (pb->max_alloc <= 0 || pb->max_alloc > device_max_alloc))
        pb->max_alloc = device_max_alloc;
}

ct_status ct_plan_layout_check(const ct_plan_problem *pb, const ct_plan_layout *l, ct_err *err) {
    if (l->dp < 1 || l->tp < 1 || l->pp < 1 || (long long)l->dp * l->tp * l->pp != pb->W)
        return CT_ERR(err, CT_ERR_ARG, "dp %d x tp %d x pp %d is not the %d workers", l->dp, l->tp,
                      l->pp, pb->W);
    if (l->ep < 1 || l->dp % l->ep)
        return CT_ERR(err, CT_ERR_ARG, "ep %d does not divide dp %d", l->ep, l->dp);
    /* train_gpt's own checks, on the flags that would run it */
    ct_train_params q, d = ct_train_params_default();
    ct__plan_params(pb, l, &d, &q);
    q.virtual_stages = l->virt; /* as asked, not as applied: train_gpt refuses them unused */
    q.precision = pb->base.precision, q.grad_reduce = pb->base.grad_reduce;
    if (l->pp > 1 && l->sched == CT_SCHED_TRIVIAL)
        return CT_ERR(err, CT_ERR_ARG, "a pipeline needs a schedule other than trivial");
    ct_lr_schedule ls;
    ct_status st;
    if ((st = ct_train_params_check(&q, &ls, err)) != CT_OK) return st;
    if ((st = ct_model_tp_check(&pb->cfg, l->tp, l->sp, pb->T, err)) != CT_OK) return st;
    if ((st = ct_train_moe_check(&q, &pb->cfg, l->pp > 1 ? l->sched : CT_SCHED_TRIVIAL, err)) != CT_OK)
        return st;
    int nchunks = l->pp * (l->sched == CT_SCHED_INTERLEAVED ? l->virt : 1);
    if (nchunks > pb->cfg.layers || nchunks > CT_MAX_CHUNKS * l->pp)
        return CT_ERR(err, CT_ERR_ARG,
                      "--pp %d x --virtual-stages %d = %d model chunks, but the model has %d "
                      "blocks (each chunk needs one)",
                      l->pp, nchunks / l->pp, nchunks, pb->cfg.layers);
    return CT_OK;
}

ct_status ct_plan_enumerate(const ct_plan_problem *pb, ct_plan_layout **out, int *n, ct_err *err) {
    *out = NULL;
    *n = 0;
    int cap = 64, k = 0;
    ct_plan_layout *v = ct_malloc(sizeof *v * (size_t)cap);
    if (!v) return CT_ERR(err, CT_ERR_NOMEM, "no memory for the layouts");
    const ct_plan_layout *f = &pb->fix;
    int W = pb->W, maxv = pb->max_virt > 1 ? pb->max_virt : 1;
    for (int pp = 1; pp <= W; pp++) {
        if (W % pp || (f->pp >= 0 && f->pp != pp)) continue;
        for (int tp = 1; tp <= W / pp; tp++) {
            if ((W / pp) % tp || (f->tp >= 0 && f->tp != tp)) continue;
            int dp = W / pp / tp;
            if (f->dp >= 0 && f->dp != dp) continue;
            for (int si = 0; si < (pp > 1 ? 4 : 1); si++) {
                static const ct_sched_kind kinds[4] = {CT_SCHED_1F1B, CT_SCHED_GPIPE,
                                                       CT_SCHED_INTERLEAVED, CT_SCHED_ZB1};
                ct_sched_kind sk = pp > 1 ? kinds[si] : CT_SCHED_TRIVIAL;
                if (pp > 1 && (int)f->sched >= 0 && f->sched != sk) continue;
                int vlo = sk == CT_SCHED_INTERLEAVED ? 2 : 1;
                int vhi = sk == CT_SCHED_INTERLEAVED ? maxv : 1;
                if (sk == CT_SCHED_INTERLEAVED && f->virt >= 2) vlo = vhi = f->virt;
                for (int vv = vlo; vv <= vhi; vv++) {
                    if (f->virt >= 0 && sk != CT_SCHED_INTERLEAVED && f->virt != 1) continue;
                    for (int z = 0; z <= (dp > 1 ? 3 : 0); z++) {
                        if (f->zero >= 0 && f->zero != z) continue;
                        for (int sp = 0; sp <= (tp > 1 ? 1 : 0); sp++)
                        for (int ep = 1; ep <= (pb->cfg.experts > 0 ? dp : 1); ep++) {
                            if (f->sp >= 0 && f->sp != sp) continue;
                            if (dp % ep || (f->ep >= 0 && f->ep != ep)) continue;
                            ct_plan_layout l = {dp, tp, pp, ep, z, sk, vv, sp};
                            ct_err e = {0};
                            if (ct_plan_layout_check(pb, &l, &e) != CT_OK) continue;
                            if (k == cap) {
                                ct_plan_layout *nv = ct_realloc(v, sizeof *v * (size_t)(cap *= 2));
                                if (!nv) {
                                    free(v);
                                    return CT_ERR(err, CT_ERR_NOMEM, "no memory for the layouts");
                                }
                                v = nv;
                            }
                            v[k++] = l;
                        }
                    }
                }
            }
        }
    }
    *out = v;
    *n = k;
    return CT_OK;
}

ct_status ct__plan_split(const ct_plan_problem *pb, const ct_plan_layout *l, int *split,
                         ct_err *err) {
    int nchunks = l->pp * (l->sched == CT_SCHED_INTERLEAVED ? l->virt : 1);
    return ct_pp_split_balanced(&pb->cfg, pb->T, nchunks, split, err);
}
