/* plan.c - the layout planner's pure half: candidate layouts and their validity (train_gpt's own
 * checks), what they need measured, the time model over measured costs, ranking, and the table
 * and JSON a program prints. No device and no communication here (plan_probe.c measures).
 *
 * The time model follows the engine's step (engine/step.c) action by action: per pipeline
 * stage, the forward and backward of its blocks (with TP's collectives inside them, staged
 * through the host as engine/tp.c does, the input-gradient reductions partly hidden behind the
 * weight-gradient GEMMs), fed with the sends and receives to the schedule's simulator; then,
 * per stage, the DP reduction of its gradients (buckets from the end, hidden behind the last
 * backward by the measured overlap), the tied embedding's sum over the two pipeline ends, the
 * optimizer, ZeRO's all-gather. The step is the slowest stage's end. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_plan.h"

/* ------------------------------------------------------------------ names */

char *ct_plan_layout_name(const ct_plan_layout *l, char *buf, size_t len) {
    size_t o = (size_t)snprintf(buf, len, "dp%d tp%d pp%d", l->dp, l->tp, l->pp);
    if (l->ep > 1 && o < len) o += (size_t)snprintf(buf + o, len - o, " ep%d", l->ep);
    if (l->pp > 1 && o < len) {
        if (l->sched == CT_SCHED_INTERLEAVED)
            o += (size_t)snprintf(buf + o, len - o, " int%d", l->virt);
        else
            o += (size_t)snprintf(buf + o, len - o, " %s", ct_sched_name(l->sched));
    }
    if (l->zero > 0 && o < len) o += (size_t)snprintf(buf + o, len - o, " z%d", l->zero);
    if (l->sp && o < len) snprintf(buf + o, len - o, " sp");
    return buf;
}

char *ct_plan_layout_flags(const ct_plan_layout *l, char *buf, size_t len) {
    size_t o = (size_t)snprintf(buf, len, "--dp %d --tp %d --pp %d", l->dp, l->tp, l->pp);
    if (l->ep > 1 && o < len) o += (size_t)snprintf(buf + o, len - o, " --ep %d", l->ep);
    if (l->pp > 1 && o < len)
        o += (size_t)snprintf(buf + o, len - o, " --schedule %s", ct_sched_name(l->sched));
    if (l->virt > 1 && o < len)
        o += (size_t)snprintf(buf + o, len - o, " --virtual-stages %d", l->virt);
    if (l->zero > 0 && o < len) o += (size_t)snprintf(buf + o, len - o, " --zero %d", l->zero);
    if (l->sp && o < len) snprintf(buf + o, len - o, " --sequence-parallel 1");
    return buf;
}

const char *ct_plan_place_name(ct_plan_place p) {
    return p == CT_PLACE_THREADS ? "threads" : p == CT_PLACE_RANKS ? "ranks" : "mixed";
}

const char *ct_plan_coll_name(int coll) {
    return coll == CT_PLAN_P2P ? "p2p" : ct_coll_str((ct_coll)coll);
}

ct_plan_place ct_plan_group_place(int n, int stride, int D) {
    /* worker 0's group: workers k * stride, k < n; rank of worker w is w / D */
    int first = 0, last = (n - 1) * stride / D, distinct = 1;
    for (int k = 1; k < n; k++)
        if (k * stride / D == (k - 1) * stride / D) distinct = 0;
    if (first == last) return CT_PLACE_THREADS;
    return distinct ? CT_PLACE_RANKS : CT_PLACE_MIXED;
}

/* ------------------------------------------------------------------ the problem */

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

ct_status ct_plan_layout_check(const ct_plan_problem *pb, const ct_plan_layout *l, ct_err *err) {
    if (l->dp < 1 || l->tp < 1 || l->pp < 1 || (long long)l->dp * l->tp * l->pp != pb->W)
        return CT_ERR(err, CT_ERR_ARG, "dp %d x tp %d x pp %d is not the %d workers", l->dp, l->tp,
                      l->pp, pb->W);
    if (l->ep < 1 || l->dp % l->ep)
        return CT_ERR(err, CT_ERR_ARG, "ep %d does not divide dp %d", l->ep, l->dp);
    /* train_gpt's own checks, on the flags that would run it */
    ct_train_params q = ct_train_params_default();
    q.seq = pb->T;
    q.batch = pb->B;
    q.total_batch = pb->micro > 1 ? pb->micro * pb->B * pb->T : 0;
    q.dp = l->dp, q.tp = l->tp, q.pp = l->pp, q.zero = l->zero, q.ep = l->ep;
    q.sequence_parallel = l->sp;
    q.virtual_stages = l->virt;
    q.bucket_mb = pb->bucket_mb > 0 ? pb->bucket_mb : q.bucket_mb;
    q.schedule = l->pp > 1 ? ct_sched_name(l->sched) : "1f1b";
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

ct_status ct_plan_split(const ct_plan_problem *pb, const ct_plan_layout *l, int *split, ct_err *err) {
    int nchunks = l->pp * (l->sched == CT_SCHED_INTERLEAVED ? l->virt : 1);
    return ct_pp_split_balanced(&pb->cfg, pb->T, nchunks, split, err);
}

/* ------------------------------------------------------------------ memory */

ct_status ct_plan_memory(const ct_plan_problem *pb, const ct_plan_layout *l, int w, ct_plan_mem *out,
                         ct_err *err) {
    memset(out, 0, sizeof *out);
    /* The trainer's own prediction (ct_train_mem_predict: the functions that size its
     * allocations) for the flags that would run l; --pp-split is not the planner's (it uses
     * the FLOP-balanced split, as ct_plan_split does). */
    ct_train_params q = pb->base;
    q.seq = pb->T;
    q.batch = pb->B;
    q.total_batch = pb->micro > 1 ? pb->micro * pb->B * pb->T : 0;
    q.bucket_mb = pb->bucket_mb > 0 ? pb->bucket_mb : q.bucket_mb;
    q.overlap = pb->overlap;
    q.pp_split = "";
    q.attention = ct_attn_path_name(pb->attn);
    q.recompute = pb->recompute[0] ? pb->recompute : "none";
    ct_plan_apply(l, &q);
    ct_mem_predict mp;
    ct_status st = ct_train_mem_predict(&q, &pb->cfg, w, &mp, err);
    if (st != CT_OK) return st;
    out->params = (double)mp.device[CT_MEM_PARAMS];
    out->grads = (double)mp.device[CT_MEM_GRADS];
    out->optimizer = (double)mp.device[CT_MEM_OPTIMIZER];
    out->activations = (double)mp.device[CT_MEM_ACTIVATIONS];
    out->workspace = (double)mp.device[CT_MEM_WORKSPACE];
    out->total = (double)mp.device_total;
    out->host = (double)(mp.device[CT_MEM_COMM] + mp.host_comm);
    out->attention_bound = mp.attention_bound;
    out->largest = (double)mp.largest;
    snprintf(out->largest_name, sizeof out->largest_name, "%s", mp.largest_name);
    return CT_OK;
}

/* ------------------------------------------------------------------ what a layout holds */

/* Parameters worker at stage q holds (TP-split tensors / tp), as train.c's memory report
 * counts them; blocks: the blocks it holds. */
static double stage_params(const ct_plan_problem *pb, const ct_plan_layout *l, const int *split,
                           int q, int *blocks) {
    const ct_gpt_config *c = &pb->cfg;
    size_t sizes[CT_GPT_NUM_TENSORS];
    ct_gpt_param_sizes(c, sizes);
    int nchunks = l->pp * (l->sched == CT_SCHED_INTERLEAVED ? l->virt : 1), held = 0;
    for (int k = q; k < nchunks; k += l->pp) held += split[k];
    double n = 0;
    for (int i = 0; i < CT_GPT_NUM_TENSORS; i++) {
        ct_gpt_tensor_info ti = ct_gpt_tensor(c, i);
        double k = 0, f = (ti.split == CT_SPLIT_NONE ? 1.0 : 1.0 / l->tp) / (ti.expert ? l->ep : 1);
        if (i >= CT_GPT_ln1w && i <= CT_GPT_fcprojb)
            k = (double)(sizes[i] / (size_t)c->layers) * held;
        else if (i == CT_GPT_wte && (q == 0 || q == l->pp - 1))
            k = (double)sizes[i];
        else if (i == CT_GPT_wpe && q == 0)
            k = (double)sizes[i];
        else if ((i == CT_GPT_lnfw || i == CT_GPT_lnfb) && q == l->pp - 1)
            k = (double)sizes[i];
        n += k * f;
    }
    if (blocks) *blocks = held;
    return n;
}

/* One block's parameters on a worker (TP-split / tp, experts / ep). */
static double block_params(const ct_plan_problem *pb, int tp, int ep) {
    const ct_gpt_config *c = &pb->cfg;
    size_t sizes[CT_GPT_NUM_TENSORS];
    ct_gpt_param_sizes(c, sizes);
    double n = 0;
    for (int i = CT_GPT_ln1w; i <= CT_GPT_fcprojb; i++)
        n += (double)(sizes[i] / (size_t)c->layers) *
             (ct_gpt_tensor(c, i).split == CT_SPLIT_NONE ? 1.0 : 1.0 / tp) /
             (ct_gpt_tensor(c, i).expert ? ep : 1);
    return n;
}

/* ------------------------------------------------------------------ needs */

static int add_comp(ct_plan_needs *nd, int b, int tp, int sp) {
    for (int i = 0; i < nd->ncomp; i++)
        if (nd->comp[i].b == b && nd->comp[i].tp == tp && nd->comp[i].sp == sp) return 0;
    ct_plan_compute *nc = ct_realloc(nd->comp, sizeof *nc * (size_t)(nd->ncomp + 1));
    if (!nc) return -1;
    nd->comp = nc;
    memset(&nc[nd->ncomp], 0, sizeof *nc);
    nc[nd->ncomp].b = b, nc[nd->ncomp].tp = tp, nc[nd->ncomp].sp = sp;
    nd->ncomp++;
    return 0;
}

/* A stride that places a group of n as `place`, with the groups of that pattern tiling W. */
static int stride_for(int n, ct_plan_place place, int W, int D) {
    for (int s = 1; s * n <= W; s++)
        if (ct_plan_group_place(n, s, D) == place) return s;
    return -1;
}

static int add_link(ct_plan_needs *nd, const ct_plan_problem *pb, int coll, int n, int stride,
                    double bytes) {
    if (n < 2 || bytes <= 0) return 0;
    ct_plan_place place = ct_plan_group_place(n, stride, pb->D);
    for (int i = 0; i < nd->nlink; i++) {
        ct_plan_link *k = &nd->link[i];
        if (k->coll == coll && k->n == n && k->place == place) {
            if (bytes < k->lo) k->lo = bytes;
            if (bytes > k->hi) k->hi = bytes;
            return 0;
        }
    }
    ct_plan_link *nl = ct_realloc(nd->link, sizeof *nl * (size_t)(nd->nlink + 1));
    if (!nl) return -1;
    nd->link = nl;
    int *ns = ct_realloc(nd->stride, sizeof *ns * (size_t)(nd->nlink + 1));
    if (!ns) return -1;
    nd->stride = ns;
    ct_plan_link k = {coll, n, place, 0, 0, bytes, bytes};
    nl[nd->nlink] = k;
    int s = stride_for(n, place, pb->W, pb->D);
    ns[nd->nlink] = s > 0 ? s : stride;
    nd->nlink++;
    return 0;
}

void ct_plan_needs_free(ct_plan_needs *n) {
    if (!n) return;
    free(n->comp);
    free(n->link);
    free(n->stride);
    free(n);
}

int ct_plan_needs_limit_tp(ct_plan_needs *n, int max_tp, int *tp_max) {
    int k = 0, dropped = 0, top = 0;
    for (int i = 0; i < n->ncomp; i++) {
        if (n->comp[i].tp > max_tp) {
            dropped++;
            if (n->comp[i].tp > top) top = n->comp[i].tp;
        } else {
            n->comp[k++] = n->comp[i];
        }
    }
    n->ncomp = k;
    if (tp_max) *tp_max = top;
    return dropped;
}

ct_status ct_plan_needs_make(const ct_plan_problem *pb, ct_plan_needs **out, ct_err *err) {
    *out = NULL;
    ct_plan_layout *ls = NULL;
    int nl = 0;
    ct_status st = ct_plan_enumerate(pb, &ls, &nl, err);
    if (st != CT_OK) return st;
    ct_plan_needs *nd = ct_calloc(1, sizeof *nd);
    int *split = ct_malloc(sizeof(int) * (size_t)(pb->cfg.layers + 1));
    if (!nd || !split) {
        free(ls), free(nd), free(split);
        return CT_ERR(err, CT_ERR_NOMEM, "no memory");
    }
    nd->opt_lo = 1e300;
    const ct_gpt_config *c = &pb->cfg;
    double C = c->channels, T = pb->T;
    int bad = 0;
    for (int i = 0; i < nl && !bad; i++) {
        const ct_plan_layout *l = &ls[i];
        int b = pb->B / l->dp;
        double bt = (double)b * T, act = bt * C * 4;
        bad |= add_comp(nd, b, l->tp, l->sp) != 0;
        /* EP: each MoE block's dispatch and combine, forward and backward: an all-to-all of the
         * worker's K choices per token (at most K b T C floats) over ep consecutive DP workers */
        if (l->ep > 1) bad |= add_link(nd, pb, CT_COLL_ALLTOALL, l->ep, l->tp, c->top_k * act) != 0;
        if ((st = ct_plan_split(pb, l, split, err)) != CT_OK) break;
        /* TP's collectives are inside the pieces timed (plan_probe.c): no link for them */
        /* PP: one activation per message; the tied wte over the two ends */
        if (l->pp > 1) {
            double msg = l->sp ? act / l->tp : act;
            bad |= add_link(nd, pb, CT_PLAN_P2P, 2, l->dp * l->tp, msg);
            bad |= add_link(nd, pb, CT_COLL_ALLREDUCE, 2, (l->pp - 1) * l->dp * l->tp,
                            (double)c->padded_vocab * C / l->tp * 4);
            if (msg > nd->copy_hi) nd->copy_hi = msg;
        }
        for (int q = 0; q < l->pp; q++) {
            double psi = stage_params(pb, l, split, q, NULL);
            double n_opt = l->zero >= 1 ? psi / l->dp : psi;
            if (n_opt < nd->opt_lo) nd->opt_lo = n_opt;
            if (n_opt > nd->opt_hi) nd->opt_hi = n_opt;
            if (l->dp > 1) {
                double bucket = pb->bucket_mb * 1048576.0, all = psi * 4;
                double blk = block_params(pb, l->tp, l->ep) * 4;
                int nb = 0;
                stage_params(pb, l, split, q, &nb);
                bad |= add_link(nd, pb, CT_COLL_ALLREDUCE, l->dp, l->tp, all < bucket ? all : bucket);
                if (l->zero >= 2) /* a bucket per block, and the rest (embeddings, head) */
                    bad |= add_link(nd, pb, CT_COLL_ALLREDUCE, l->dp, l->tp, blk) ||
                           add_link(nd, pb, CT_COLL_ALLREDUCE, l->dp, l->tp, all - nb * blk);
                if (l->zero >= 1) bad |= add_link(nd, pb, CT_COLL_ALLGATHER, l->dp, l->tp, all);
                if (l->zero >= 3) /* the embeddings' gathers */
                    bad |= add_link(nd, pb, CT_COLL_ALLREDUCE, l->dp, l->tp,
                                    ((double)c->padded_vocab / l->tp + c->max_seq) * C * 4);
                if (all > nd->copy_hi) nd->copy_hi = all;
            }
        }
        if (pb->W > 1) bad |= add_link(nd, pb, CT_COLL_ALLREDUCE, pb->W, 1, 4);
    }
    free(split);
    free(ls);
    if (st == CT_OK && bad) st = CT_ERR(err, CT_ERR_NOMEM, "no memory");
    if (st != CT_OK) {
        ct_plan_needs_free(nd);
        return st;
    }
    if (nd->opt_lo > nd->opt_hi) nd->opt_lo = nd->opt_hi;
    if (nd->copy_hi < 4096) nd->copy_hi = 4096;
    *out = nd;
    return CT_OK;
}

/* ------------------------------------------------------------------ costs */

void ct_plan_costs_free(ct_plan_costs *c) {
    if (!c) return;
    free(c->comp);
    free(c->link);
    c->comp = NULL, c->link = NULL, c->ncomp = c->nlink = 0;
}

void ct_plan_fit(const double *x, const double *t, int n, double *alpha, double *beta) {
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        double w = t[i] > 0 ? 1.0 / (t[i] * t[i]) : 1.0;
        sw += w, sx += w * x[i], sy += w * t[i], sxx += w * x[i] * x[i], sxy += w * x[i] * t[i];
    }
    double det = sw * sxx - sx * sx;
    double b = det > 0 ? (sw * sxy - sx * sy) / det : 0;
    double a = sw > 0 ? (sy - b * sx) / sw : 0;
    /* negative terms are noise: clamp, refitting the other alone */
    if (b < 0) {
        b = 0;
        a = sw > 0 ? sy / sw : 0;
    }
    if (a < 0) {
        a = 0;
        b = sxx > 0 ? sxy / sxx : 0;
    }
    *alpha = a, *beta = b;
}

ct_status ct_plan_links_load(ct_plan_costs *c, const char *path, ct_err *err) {
    FILE *f = fopen(path, "r");
    if (!f) return CT_ERR(err, CT_ERR_IO, "links table %s: cannot open it", path);
    char line[512];
    int ln = 0;
    ct_status st = CT_OK;
    while (fgets(line, sizeof line, f)) {
        ln++;
        char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        if (*s == '#' || *s == '\n' || !*s) continue;
        char coll[32], place[32];
        ct_plan_link k;
        memset(&k, 0, sizeof k);
        if (sscanf(s, "link %31s %d %31s %lf %lf %lf %lf", coll, &k.n, place, &k.alpha, &k.beta,
                   &k.lo, &k.hi) != 7) {
            st = CT_ERR(err, CT_ERR_ARG,
                        "links table %s line %d: expected \"link COLL N PLACE ALPHA_MS "
                        "BETA_MS_PER_BYTE LO HI\"",
                        path, ln);
            break;
        }
        ct_coll cc;
        if (!strcmp(coll, "p2p")) k.coll = CT_PLAN_P2P;
        else if (ct_coll_parse(coll, &cc) == CT_OK) k.coll = (int)cc;
        else {
            st = CT_ERR(err, CT_ERR_ARG, "links table %s line %d: unknown collective '%s'", path,
                        ln, coll);
            break;
        }
        if (!strcmp(place, "threads")) k.place = CT_PLACE_THREADS;
        else if (!strcmp(place, "ranks")) k.place = CT_PLACE_RANKS;
        else if (!strcmp(place, "mixed")) k.place = CT_PLACE_MIXED;
        else {
            st = CT_ERR(err, CT_ERR_ARG,
                        "links table %s line %d: placement '%s' is not threads, ranks or mixed",
                        path, ln, place);
            break;
        }
        if (k.n < 2 || k.alpha < 0 || k.beta < 0) {
            st = CT_ERR(err, CT_ERR_ARG, "links table %s line %d: n >= 2, alpha and beta >= 0",
                        path, ln);
            break;
        }
        int i = 0;
        for (; i < c->nlink; i++)
            if (c->link[i].coll == k.coll && c->link[i].n == k.n && c->link[i].place == k.place)
                break;
        if (i == c->nlink) {
            ct_plan_link *nl = ct_realloc(c->link, sizeof *nl * (size_t)(c->nlink + 1));
            if (!nl) {
                st = CT_ERR(err, CT_ERR_NOMEM, "no memory");
                break;
            }
            c->link = nl;
            c->nlink++;
        }
        c->link[i] = k;
    }
    fclose(f);
    if (st == CT_OK)
        snprintf(c->source, sizeof c->source, "links from %.200s", path);
    return st;
}

ct_status ct_plan_links_write(const ct_plan_costs *c, const char *path, ct_err *err) {
    FILE *f = fopen(path, "w");
    if (!f) return CT_ERR(err, CT_ERR_IO, "cannot write the links table %s", path);
    fprintf(f, "# cltrain links: t(bytes) = alpha + beta * bytes (ms), fitted over [lo, hi] bytes\n"
               "# link COLL N PLACE ALPHA_MS BETA_MS_PER_BYTE LO HI   (%s)\n",
            c->source);
    for (int i = 0; i < c->nlink; i++) {
        const ct_plan_link *k = &c->link[i];
        fprintf(f, "link %s %d %s %.6g %.6g %.0f %.0f\n", ct_plan_coll_name(k->coll), k->n,
                ct_plan_place_name(k->place), k->alpha, k->beta, k->lo, k->hi);
    }
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return CT_ERR(err, CT_ERR_IO, "writing the links table %s failed", path);
    return CT_OK;
}

ct_status ct_plan_links_default(ct_plan_costs *c, const ct_plan_needs *need, ct_err *err) {
    ct_plan_link *l = realloc(c->link, sizeof *l * (size_t)(c->nlink + need->nlink + 1));
    if (!l) return CT_ERR(err, CT_ERR_NOMEM, "no memory");
    c->link = l;
    for (int i = 0; i < need->nlink; i++) {
        ct_plan_link k = need->link[i];
        int threads = k.place == CT_PLACE_THREADS;
        double a = (threads ? CT_PLAN_DEFAULT_THREADS_US : CT_PLAN_DEFAULT_RANKS_US) / 1e3;
        double b = 1e-6 / (threads ? CT_PLAN_DEFAULT_THREADS_GBS : CT_PLAN_DEFAULT_RANKS_GBS);
        double n = k.n, steps = n - 1, share = (n - 1) / n; /* a ring: n - 1 steps of 1/n */
        if (k.coll == CT_PLAN_P2P) k.alpha = a, k.beta = b;
        else if (k.coll == CT_COLL_ALLREDUCE) k.alpha = 2 * steps * a, k.beta = 2 * share * b;
        else k.alpha = steps * a, k.beta = share * b; /* reduce-scatter, all-gather */
        c->link[c->nlink++] = k;
    }
    snprintf(c->source, sizeof c->source,
             "links from the default model, not measured: threads %.0f us + %.0f GB/s, "
             "processes %.0f us + %.0f GB/s, ring collectives",
             CT_PLAN_DEFAULT_THREADS_US, CT_PLAN_DEFAULT_THREADS_GBS, CT_PLAN_DEFAULT_RANKS_US,
             CT_PLAN_DEFAULT_RANKS_GBS);
    return CT_OK;
}

/* ------------------------------------------------------------------ prediction */

typedef struct model_ctx {
    const ct_plan_problem *pb;
    const ct_plan_layout *l;
    const ct_plan_costs *c;
    ct_err *err;
    int missing;
} model_ctx;

/* One collective over a group of n at stride s: t(bytes), 0 for a group of one. */
static double link_ms(model_ctx *x, int coll, int n, int stride, double bytes) {
    if (n < 2 || bytes <= 0) return 0;
    ct_plan_place place = ct_plan_group_place(n, stride, x->pb->D);
    for (int i = 0; i < x->c->nlink; i++) {
        const ct_plan_link *k = &x->c->link[i];
        if (k->coll == coll && k->n == n && k->place == place) return k->alpha + k->beta * bytes;
    }
    if (!x->missing)
        CT_ERR(x->err, CT_ERR_ARG,
               "no cost for %s over %d workers (%s): calibrate with the workers the layouts "
               "use, or give a links table that has it",
               ct_plan_coll_name(coll), n, ct_plan_place_name(place));
    x->missing = 1;
    return 0;
}

/* A staged collective (engine/tp.c, grads.c, zero.c): read into host memory, the collective,
 * write back. in/out: the bytes read and written. */
static double staged(model_ctx *x, int coll, int n, int stride, double bytes, double in, double out) {
    const ct_plan_costs *c = x->c;
    return c->copy_alpha + c->copy_beta * in + link_ms(x, coll, n, stride, bytes) + c->copy_alpha +
           c->copy_beta * out;
}

/* The part of a collective of `comm` ms still exposed beside `work` ms of device work. */
static double exposed(const ct_plan_costs *c, double comm, double work) {
    double hide = c->overlap * (comm < work ? comm : work);
    return comm - hide;
}

ct_status ct_plan_predict(const ct_plan_problem *pb, const ct_plan_layout *l, const ct_plan_costs *c,
                          ct_plan_estimate *out, ct_err *err) {
    memset(out, 0, sizeof *out);
    model_ctx x = {pb, l, c, err, 0};
    const ct_gpt_config *cfg = &pb->cfg;
    int b = pb->B / l->dp, m = pb->micro, N = l->pp, v = l->sched == CT_SCHED_INTERLEAVED ? l->virt : 1;
    const ct_plan_compute *k = NULL;
    for (int i = 0; i < c->ncomp; i++)
        if (c->comp[i].b == b && c->comp[i].tp == l->tp && c->comp[i].sp == l->sp) k = &c->comp[i];
    if (!k)
        return CT_ERR(err, CT_ERR_ARG, "no compute cost for %d rows at tp %d%s: %s", b, l->tp,
                      l->sp ? " with SP" : "",
                      l->tp > 1 ? "timing it needs that many workers at once"
                                : "calibrate for it");
    int split[CT_MAX_CHUNKS * 64];
    if (N * v > (int)(sizeof split / sizeof split[0]))
        return CT_ERR(err, CT_ERR_ARG, "too many model chunks");
    ct_status st;
    if ((st = ct_plan_split(pb, l, split, err)) != CT_OK) return st;
    double C = cfg->channels, T = pb->T, bt = (double)b * T, act = bt * C * 4;
    double tpn = l->tp, wire_ar = 2 * (tpn - 1) / tpn, wire_g = (tpn - 1) / tpn;
    /* 1. TP: its collectives are inside the pieces timed; the bytes they send, per worker: 4
     * all-reduces of (b,T,C) per block (SP: as many gathers and scatters, each (n-1)/n of it,
     * the backward gathering the LayerNorm outputs again), one in the embedding, one in the
     * logits' backward, the loss statistics (3 b T floats) */
    double tpbytes_blk = 0, tpbytes_emb = 0, tpbytes_head = 0;
    if (l->tp > 1) {
        if (l->sp) {
            tpbytes_blk = (4 + 2 + 4) * wire_g * act;
            tpbytes_emb = 2 * wire_g * act, tpbytes_head = 3 * wire_g * act;
        } else {
            tpbytes_blk = 4 * wire_ar * act;
            tpbytes_emb = wire_ar * act, tpbytes_head = wire_ar * act;
        }
        tpbytes_head += wire_ar * 3 * bt * 4;
    }
    /* 2. ZeRO-3: each block gathered over DP before its forward and its backward (prefetched
     * beside the previous block's compute); the embeddings at every forward */
    double z3_blk_f = 0, z3_blk_b = 0, z3_emb = 0;
    if (l->zero >= 3) {
        double g = staged(&x, CT_COLL_ALLREDUCE, l->dp, l->tp, block_params(pb, l->tp, l->ep) * 4,
                          block_params(pb, l->tp, l->ep) * 4, block_params(pb, l->tp, l->ep) * 4);
        z3_blk_f = exposed(c, g, k->block_fwd);
        z3_blk_b = exposed(c, g, k->block_bwd);
        double e = ((double)cfg->padded_vocab / l->tp + cfg->max_seq) * C * 4;
        z3_emb = staged(&x, CT_COLL_ALLREDUCE, l->dp, l->tp, e, e, e);
    }
    /* 2b. EP: per MoE block and micro-batch, the dispatch and the combine in the forward and again
     * in the backward, each an all-to-all of up to K b T C floats staged through the host (the
     * pieces were timed at ep 1, every expert local: the same expert FLOPs per token when the
     * load is balanced) */
    double ep_blk = 0, ep_bytes_blk = 0;
    if (l->ep > 1) {
        double a2a = cfg->top_k * act;
        ep_blk = 2 * staged(&x, CT_COLL_ALLTOALL, l->ep, l->tp, a2a, a2a, a2a);
        ep_bytes_blk = 4 * a2a * (l->ep - 1) / l->ep;
    }
    /* 3. each stage's costs per micro-batch, per chunk (the stage's total over its v chunks) */
    ct_sched_costs *sc = ct_calloc((size_t)N, sizeof *sc);
    double *psi = ct_calloc((size_t)N, sizeof *psi), *bwd_stage = ct_calloc((size_t)N, sizeof *bwd_stage);
    double *comp_stage = ct_calloc((size_t)N, sizeof *comp_stage), *tp_stage = ct_calloc((size_t)N, sizeof *tp_stage);
    int *blocks = ct_calloc((size_t)N, sizeof *blocks);
    if (!sc || !psi || !bwd_stage || !comp_stage || !tp_stage || !blocks) {
        free(sc), free(psi), free(bwd_stage), free(comp_stage), free(tp_stage), free(blocks);
        return CT_ERR(err, CT_ERR_NOMEM, "no memory");
    }
    double msg = l->sp ? act / l->tp : act;
    double busy = 0, share = k->share >= 1 ? k->share : 1;
    for (int q = 0; q < N; q++) {
        psi[q] = stage_params(pb, l, split, q, &blocks[q]);
        double nb = blocks[q], first = q == 0, last = q == N - 1;
        double F = nb * (k->block_fwd + z3_blk_f + ep_blk) + first * k->embed_fwd + last * k->head_fwd +
                   (first || last) * z3_emb;
        double Bw = nb * (k->block_bwd + z3_blk_b + ep_blk) + first * k->embed_bwd + last * k->head_bwd;
        double Bin = nb * (k->block_bwd_in + z3_blk_b) + first * k->embed_bwd + last * k->head_bwd;
        double Bwt = nb * k->block_bwd_w;
        /* the simulator runs each stage at the speed of a device alone; the stages' work with
         * every worker busy at once bounds the step from below (devices sharing cores) */
        sc[q].fwd = F / v / share, sc[q].bwd = Bw / v / share;
        sc[q].bwd_input = Bin / v / share, sc[q].bwd_weight = Bwt / v / share;
        busy += m * (F + (l->sched == CT_SCHED_ZB1 ? Bin + Bwt : Bw)) / N;
        if (N > 1) {
            sc[q].send = c->copy_alpha + c->copy_beta * msg;
            sc[q].recv = c->copy_alpha + c->copy_beta * msg;
            sc[q].comm = link_ms(&x, CT_PLAN_P2P, 2, l->dp * l->tp, msg);
        }
        bwd_stage[q] = l->sched == CT_SCHED_ZB1 ? Bin + Bwt : Bw;
        comp_stage[q] = m * (nb * (k->block_fwd + k->block_bwd - k->tp_block) +
                             first * (k->embed_fwd + k->embed_bwd - k->tp_embed) +
                             last * (k->head_fwd + k->head_bwd - k->tp_head));
        tp_stage[q] = m * (nb * (k->tp_block + 2 * ep_blk) + first * k->tp_embed + last * k->tp_head);
        double tpb = m * (nb * tpbytes_blk + first * tpbytes_emb + last * tpbytes_head);
        if (tpb > out->tp_bytes) out->tp_bytes = tpb;
        if (m * nb * ep_bytes_blk > out->ep_bytes) out->ep_bytes = m * nb * ep_bytes_blk;
    }
    /* the sends are on every stage alike: comm cost of the first stage's channel */
    for (int q = 0; q < N; q++) sc[q].comm = sc[0].comm;
    ct_schedule *s = NULL;
    ct_sched_sim sim;
    memset(&sim, 0, sizeof sim);
    st = ct_sched_make(N > 1 ? l->sched : CT_SCHED_TRIVIAL, N, m, v, &s, err);
    if (st == CT_OK) st = ct_sched_simulate_stages(s, sc, 1, &sim, err);
    if (st != CT_OK || x.missing) {
        if (st == CT_OK) st = CT_ERR_ARG; /* x.missing: the message is in err */
        goto done;
    }
    /* 4. per stage: its end in the pipeline (stretched to the busy bound), then DP, the tied
     * wte, the optimizer, ZeRO */
    double stretch = sim.makespan > 0 && busy > sim.makespan ? busy / sim.makespan : 1;
    double step = 0, busiest = 0;
    for (int q = 0; q < N; q++) {
        double end = 0;
        for (int i = 0; i < s->n[q]; i++) {
            ct_act_kind ak = s->list[q][i].kind;
            if (ak != CT_ACT_GRAD_SYNC && ak != CT_ACT_OPT_STEP && sim.end[q][i] > end) end = sim.end[q][i];
        }
        end *= stretch;
        double dp_ms = 0, dp_bytes = 0, after = 0;
        double all = psi[q] * 4, bucket = pb->bucket_mb * 1048576.0;
        if (l->dp > 1) {
            int nbk = (int)ceil(all / bucket);
            double one = 0;
            for (int j = 0; j < nbk; j++) {
                double bb = j < nbk - 1 ? bucket : all - bucket * (nbk - 1);
                one += c->copy_alpha + c->copy_beta * bb + link_ms(&x, CT_COLL_ALLREDUCE, l->dp, l->tp, bb);
            }
            one += c->copy_alpha + c->copy_beta * all; /* written back */
            double dpn = l->dp;
            if (l->zero >= 2) {
                /* ZeRO-2/3: a bucket per block (and one for the rest: embeddings, head) leaves
                 * at every micro-step, beside every backward; the shard is written at the end */
                double blk = block_params(pb, l->tp, l->ep) * 4, rest = all - blocks[q] * blk;
                double per = blocks[q] * (c->copy_alpha + c->copy_beta * blk +
                                          link_ms(&x, CT_COLL_ALLREDUCE, l->dp, l->tp, blk));
                if (rest > 0)
                    per += c->copy_alpha + c->copy_beta * rest +
                           link_ms(&x, CT_COLL_ALLREDUCE, l->dp, l->tp, rest);
                dp_ms = exposed(c, m * per, m * bwd_stage[q]) + c->copy_alpha + c->copy_beta * all / dpn;
                dp_bytes = m * 2 * (dpn - 1) / dpn * all;
            } else {
                dp_ms = pb->overlap ? exposed(c, one, bwd_stage[q]) : one;
                dp_bytes = 2 * (dpn - 1) / dpn * all;
            }
            if (l->zero >= 1) {
                after = staged(&x, CT_COLL_ALLGATHER, l->dp, l->tp, all, all / dpn, all);
                dp_bytes += (dpn - 1) / dpn * all;
            }
        }
        if (N > 1 && (q == 0 || q == N - 1)) { /* the tied wte over the two ends */
            double wte = (double)cfg->padded_vocab * C / l->tp * 4;
            dp_ms += staged(&x, CT_COLL_ALLREDUCE, 2, (N - 1) * l->dp * l->tp, wte, wte, wte);
            dp_bytes += wte;
        }
        int slices = 12 * blocks[q] + (q == 0 ? 2 : 0) + (q == N - 1 ? 3 : 0);
        double nopt = l->zero >= 1 ? psi[q] / l->dp : psi[q];
        double opt = slices * c->opt_alpha + c->opt_beta * nopt;
        double total = end + dp_ms + opt + after;
        double stage_comm = tp_stage[q] + dp_ms + after + (N > 1 ? m * v * 2 * (sc[q].send + sc[q].recv) : 0);
        if (total > step) step = total;
        if (total >= busiest) {
            busiest = total;
            out->comm_ms = stage_comm;
            out->opt_ms = opt;
        }
        if (comp_stage[q] > out->compute_ms) out->compute_ms = comp_stage[q];
        if (dp_bytes > out->dp_bytes) out->dp_bytes = dp_bytes;
    }
    if (N > 1) out->pp_bytes = m * v * 2 * msg;
    /* the loss and the norm: small all-reduces over the world */
    step += 2 * link_ms(&x, CT_COLL_ALLREDUCE, pb->W, 1, 4);
    if (x.missing) {
        st = CT_ERR_ARG;
        goto done;
    }
    out->step_ms = step;
    out->bubble = N > 1 ? sim.bubble : 0;
    out->tokens_per_s = step > 0 ? (double)pb->B * pb->T * m / (step / 1e3) : 0;
    out->comm_share = step > 0 ? out->comm_ms / step : 0;
done:
    ct_sched_sim_free(&sim);
    ct_sched_free(s);
    free(sc), free(psi), free(bwd_stage), free(comp_stage), free(tp_stage), free(blocks);
    return st;
}

/* ------------------------------------------------------------------ ranking */

void ct_plan_result_free(ct_plan_result *r) {
    if (!r) return;
    for (int i = 0; i < r->n; i++) free(r->e[i].worker);
    free(r->e);
    memset(r, 0, sizeof *r);
}

static int cmp_entry(const void *pa, const void *pb) {
    const ct_plan_entry *a = pa, *b = pb;
    if (a->fits != b->fits) return b->fits - a->fits;
    if (!a->fits) { /* the smallest shortfall first (memory, then the largest buffer) */
        if (a->mem.total != b->mem.total) return a->mem.total < b->mem.total ? -1 : 1;
        if (a->largest != b->largest) return a->largest < b->largest ? -1 : 1;
    }
    if (a->timed != b->timed) return b->timed - a->timed;
    if (a->est.step_ms != b->est.step_ms) return a->est.step_ms < b->est.step_ms ? -1 : 1;
    if (a->mem.total != b->mem.total) return a->mem.total < b->mem.total ? -1 : 1;
    return 0;
}

ct_status ct_plan_rank(const ct_plan_problem *pb, const ct_plan_costs *c, ct_plan_result *res,
                       ct_err *err) {
    memset(res, 0, sizeof *res);
    ct_plan_layout *ls = NULL;
    int n = 0;
    ct_status st = ct_plan_enumerate(pb, &ls, &n, err);
    if (st != CT_OK) return st;
    if (n == 0) {
        free(ls);
        return CT_ERR(err, CT_ERR_ARG,
                      "no layout of %d workers can run this model and batch (every dp x tp x pp "
                      "is refused by the checks train_gpt makes: batch %d rows, %d heads, %d "
                      "blocks, T %d)",
                      pb->W, pb->B, pb->cfg.heads, pb->cfg.layers, pb->T);
    }
    res->e = ct_calloc((size_t)n, sizeof *res->e);
    if (!res->e) {
        free(ls);
        return CT_ERR(err, CT_ERR_NOMEM, "no memory");
    }
    res->n = n;
    /* the memory model for the attention path the costs were timed with (auto resolved) */
    ct_plan_problem pm = *pb;
    if (c && pm.attn == CT_ATTN_AUTO) pm.attn = c->attn;
    for (int i = 0; i < n && st == CT_OK; i++) {
        ct_plan_entry *e = &res->e[i];
        e->lay = ls[i];
        e->worker = ct_calloc((size_t)pb->W, sizeof *e->worker);
        if (!e->worker) {
            st = CT_ERR(err, CT_ERR_NOMEM, "no memory");
            break;
        }
        e->mem_known = 1;
        for (int w = 0; w < pb->W; w++) {
            ct_err me = {0};
            if (ct_plan_memory(&pm, &e->lay, w, &e->worker[w], &me) != CT_OK) {
                e->mem_known = 0;
                if (!res->mem_note[0]) snprintf(res->mem_note, sizeof res->mem_note, "%.250s", me.msg);
                break;
            }
            if (e->worker[w].total > e->mem.total) e->mem = e->worker[w];
            if (e->worker[w].largest > e->largest) {
                e->largest = e->worker[w].largest;
                snprintf(e->largest_name, sizeof e->largest_name, "%s", e->worker[w].largest_name);
            }
        }
        e->fits = !e->mem_known || ((pb->mem_cap <= 0 || e->mem.total <= pb->mem_cap) &&
                                    (pb->max_alloc <= 0 || e->largest <= pb->max_alloc));
        if (c) {
            ct_err pe = {0};
            st = ct_plan_predict(pb, &e->lay, c, &e->est, &pe);
            e->timed = st == CT_OK;
            if (st == CT_ERR_ARG && pb->untimed_ok) { /* a cost missing: memory only */
                snprintf(e->why_untimed, sizeof e->why_untimed, "%.159s", pe.msg);
                memset(&e->est, 0, sizeof e->est);
                st = CT_OK;
            } else if (st != CT_OK) {
                CT_ERR(err, st, "%s", pe.msg);
            }
        }
    }
    free(ls);
    if (st != CT_OK) {
        ct_plan_result_free(res);
        return st;
    }
    qsort(res->e, (size_t)n, sizeof *res->e, cmp_entry);
    for (int i = 0; i < n; i++) res->nfit += res->e[i].fits;
    return CT_OK;
}

/* ------------------------------------------------------------------ output */

static double mib(double b) { return b / 1048576.0; }

void ct_plan_print(FILE *f, const ct_plan_problem *pb, const ct_plan_costs *c, const ct_plan_result *r,
                   int top) {
    const ct_gpt_config *cfg = &pb->cfg;
    fprintf(f,
            "ct_plan: L=%d NH=%d C=%d V=%d T=%d, batch %d rows x %d micro-batches, %d workers (%d "
            "per rank), memory cap ",
            cfg->layers, cfg->heads, cfg->channels, cfg->vocab, pb->T, pb->B, pb->micro, pb->W,
            pb->D);
    if (pb->mem_cap > 0) fprintf(f, "%.1f MiB per worker", mib(pb->mem_cap));
    else fprintf(f, "none");
    if (pb->max_alloc > 0)
        fprintf(f, mib(pb->max_alloc) < 10 ? ", single buffers up to %.2f MiB"
                                            : ", single buffers up to %.1f MiB",
                mib(pb->max_alloc));
    fputc('\n', f);
    if (c)
        fprintf(f, "costs: compute timed on %d worker%s at once (%s attention), %s; overlap %.2f\n",
                c->workers_timed, c->workers_timed > 1 ? "s" : "", ct_attn_path_name(c->attn),
                c->source, c->overlap);
    else
        fprintf(f, "costs: not measured (memory only)\n");
    if (r->mem_note[0]) fprintf(f, "memory: %s\n", r->mem_note);
    fprintf(f, "%d layouts, %d fit%s\n", r->n, r->nfit,
            r->nfit == r->n ? "" : " (the others are listed after them)");
    fprintf(f, "%4s  %-26s %11s %10s %10s %7s %6s %8s %9s %9s %9s%s\n", "rank", "layout",
            "mem/worker", "step ms", "tokens/s", "bubble", "comm", "comp ms", "TP MB", "DP MB",
            "PP MB", pb->cfg.experts > 0 ? "     EP MB" : "");
    int shown = 0;
    for (int i = 0; i < r->n && shown < top; i++, shown++) {
        const ct_plan_entry *e = &r->e[i];
        char name[96], mem[32];
        ct_plan_layout_name(&e->lay, name, sizeof name);
        if (e->mem_known) snprintf(mem, sizeof mem, "%.1f MiB", mib(e->mem.total));
        else snprintf(mem, sizeof mem, "?");
        if (c && !e->timed) {
            fprintf(f, "%4d%s %-26s %11s   not timed: %s\n", i + 1, e->fits ? " " : "!", name, mem,
                    e->why_untimed);
            continue;
        }
        fprintf(f, "%4d%s %-26s %11s %10.2f %10.0f %7.3f %5.0f%% %8.2f %9.3f %9.3f %9.3f", i + 1,
                e->fits ? " " : "!", name, mem, e->est.step_ms, e->est.tokens_per_s, e->est.bubble,
                100 * e->est.comm_share, e->est.compute_ms, e->est.tp_bytes / 1e6,
                e->est.dp_bytes / 1e6, e->est.pp_bytes / 1e6);
        if (pb->cfg.experts > 0) fprintf(f, " %9.3f", e->est.ep_bytes / 1e6);
        fputc('\n', f);
    }
    if (r->nfit > 0 && c && !r->e[0].timed) {
        char name[96];
        ct_plan_layout_name(&r->e[0].lay, name, sizeof name);
        fprintf(f, "chosen: none timed: %d layouts fit, none could be timed here (%s fits with the "
                   "least memory)\n", r->nfit, name);
    } else if (r->nfit > 0) {
        char name[96], flags[256];
        ct_plan_layout_name(&r->e[0].lay, name, sizeof name);
        ct_plan_layout_flags(&r->e[0].lay, flags, sizeof flags);
        fprintf(f, "chosen: %s (%.2f ms per step predicted): train_gpt %s\n", name,
                r->e[0].est.step_ms, flags);
    } else if (r->n > 0) {
        char why[512];
        ct_plan_why_none(pb, r, why, sizeof why);
        fprintf(f, "chosen: none fits: %s\n", why);
    }
}

void ct_plan_limit_alloc(ct_plan_problem *pb, double device_max_alloc) {
    if (device_max_alloc > 0 && (pb->max_alloc <= 0 || pb->max_alloc > device_max_alloc))
        pb->max_alloc = device_max_alloc;
}

void ct_plan_why_none(const ct_plan_problem *pb, const ct_plan_result *r, char *buf, size_t len) {
    /* the layout that fits the memory with the smallest largest buffer, if any does */
    const ct_plan_entry *best = NULL;
    for (int i = 0; i < r->n; i++) {
        const ct_plan_entry *e = &r->e[i];
        if (e->mem_known && (pb->mem_cap <= 0 || e->mem.total <= pb->mem_cap) &&
            (!best || e->largest < best->largest))
            best = e;
    }
    char name[96];
    if (best) {
        ct_plan_layout_name(&best->lay, name, sizeof name);
        snprintf(buf, len,
                 "every layout of %d workers that fits the memory needs a single buffer above the "
                 "device's largest allocation (%.1f MiB): the smallest is %.1f MiB (%s of %s)",
                 pb->W, mib(pb->max_alloc), mib(best->largest), best->largest_name, name);
    } else if (r->n > 0) {
        ct_plan_layout_name(&r->e[0].lay, name, sizeof name);
        snprintf(buf, len,
                 "no layout of %d workers fits %.1f MiB per worker: the smallest shortfall is "
                 "%.1f MiB (%s needs %.1f MiB on its fullest worker)",
                 pb->W, mib(pb->mem_cap), mib(r->e[0].mem.total - pb->mem_cap), name,
                 mib(r->e[0].mem.total));
    } else {
        snprintf(buf, len, "no layout of %d workers", pb->W);
    }
}

static void json_mem(FILE *f, const ct_plan_mem *m) {
    fprintf(f, "\"params\":%.0f,\"grads\":%.0f,\"optimizer\":%.0f,\"activations\":%.0f,"
               "\"workspace\":%.0f,\"total\":%.0f,\"host\":%.0f",
            m->params, m->grads, m->optimizer, m->activations, m->workspace, m->total, m->host);
}

void ct_plan_print_json(FILE *f, const ct_plan_problem *pb, const ct_plan_costs *c,
                        const ct_plan_result *r) {
    const ct_gpt_config *cfg = &pb->cfg;
    char src[600];
    ct_json_escape(src, sizeof src, c ? c->source : "not measured");
    fprintf(f, "{\"model\":{\"layers\":%d,\"heads\":%d,\"dim\":%d,\"vocab\":%d,\"seq\":%d},"
               "\"batch\":%d,\"micro_batches\":%d,\"workers\":%d,\"devices_per_rank\":%d,"
               "\"mem_cap\":%.0f,\"max_alloc\":%.0f,\"costs\":{\"source\":%s,\"workers_timed\":%d,\"overlap\":%.4f,"
               "\"attention\":\"%s\"},\"fit\":%d,\"layouts\":[",
            cfg->layers, cfg->heads, cfg->channels, cfg->vocab, pb->T, pb->B, pb->micro, pb->W,
            pb->D, pb->mem_cap, pb->max_alloc, src, c ? c->workers_timed : 0, c ? c->overlap : 0.0,
            ct_attn_path_name(c ? c->attn : pb->attn), r->nfit);
    for (int i = 0; i < r->n; i++) {
        const ct_plan_entry *e = &r->e[i];
        char name[96], flags[256];
        ct_plan_layout_name(&e->lay, name, sizeof name);
        ct_plan_layout_flags(&e->lay, flags, sizeof flags);
        fprintf(f,
                "%s{\"rank\":%d,\"name\":\"%s\",\"flags\":\"%s\",\"dp\":%d,\"tp\":%d,\"pp\":%d,"
                "\"ep\":%d,\"zero\":%d,\"schedule\":\"%s\",\"virtual_stages\":%d,"
                "\"sequence_parallel\":%d,\"fits\":%s,\"mem_known\":%s,\"largest_buffer\":%.0f,"
                "\"largest_name\":\"%s\",\"mem\":{",
                i ? "," : "", i + 1, name, flags, e->lay.dp, e->lay.tp, e->lay.pp, e->lay.ep,
                e->lay.zero, e->lay.pp > 1 ? ct_sched_name(e->lay.sched) : "none", e->lay.virt,
                e->lay.sp, e->fits ? "true" : "false", e->mem_known ? "true" : "false",
                e->largest, e->largest_name);
        json_mem(f, &e->mem);
        fprintf(f, "},\"workers\":[");
        for (int w = 0; e->mem_known && w < pb->W; w++) {
            fprintf(f, "%s{\"worker\":%d,", w ? "," : "", w);
            json_mem(f, &e->worker[w]);
            fprintf(f, "}");
        }
        char why[400];
        ct_json_escape(why, sizeof why, e->why_untimed);
        fprintf(f,
                "],\"timed\":%s,\"why_untimed\":%s,\"step_ms\":%.4f,\"tokens_per_s\":%.2f,"
                "\"compute_ms\":%.4f,\"bubble\":%.5f,\"comm_ms\":%.4f,\"comm_share\":%.5f,"
                "\"opt_ms\":%.4f,\"tp_bytes\":%.0f,\"dp_bytes\":%.0f,\"pp_bytes\":%.0f,"
                "\"ep_bytes\":%.0f}",
                e->timed ? "true" : "false", why, e->est.step_ms, e->est.tokens_per_s,
                e->est.compute_ms, e->est.bubble, e->est.comm_ms, e->est.comm_share, e->est.opt_ms,
                e->est.tp_bytes, e->est.dp_bytes, e->est.pp_bytes, e->est.ep_bytes);
    }
    fprintf(f, "],\"chosen\":");
    if (r->nfit > 0 && (!c || r->e[0].timed)) {
        char name[96];
        ct_plan_layout_name(&r->e[0].lay, name, sizeof name);
        fprintf(f, "\"%s\"", name);
    } else {
        fprintf(f, "null");
    }
    if (r->nfit == 0 && r->n > 0 && pb->mem_cap > 0 && r->e[0].mem.total > pb->mem_cap)
        fprintf(f, ",\"shortfall\":%.0f", r->e[0].mem.total - pb->mem_cap);
    fprintf(f, "}\n");
}
