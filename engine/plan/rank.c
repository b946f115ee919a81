/* rank.c - the ranking: every layout with its memory per worker and its predicted time, those
 * that fit first and fastest first; the result's release. */
#include <stdlib.h>
#include <string.h>

#include "plan_impl.h"

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
