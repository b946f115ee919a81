/* measure.c - the planner's measurement as programs run it (ct_plan, train_gpt --layout auto):
 * every worker of this process opens the device train_gpt would give it and measures
 * (probe.c), together with the other processes' workers when the whole run is here; a links
 * table replaces the links' measurement. The top of the planner: nothing here calls it. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "plan_impl.h"

typedef struct shared {
    ct_topo *topo;
    const ct_train_params *p;
    const ct_plan_problem *pb;
    const ct_plan_needs *need;
    const ct_device_info *list;
    const int *picks;
    int npicks, live, reps;
    FILE *log;
    ct_plan_costs costs; /* the first worker's */
    double mem_min, alloc_min;
    ct_status st;
    char msg[CT_ERR_MSG_MAX];
} shared;

static void measure_worker(shared *s, int thread) {
    ct_err err = {0};
    ct_device *dev = NULL;
    ct_comm *world = NULL;
    ct_plan_costs c;
    memset(&c, 0, sizeof c);
    ct_status st = CT_OK;
    int k = ct_worker_device(s->list, s->picks, s->npicks, s->topo, thread, s->p->workers_per_device);
    if (k >= s->npicks) {
        st = CT_ERR(&err, CT_ERR_ARG,
                    "worker thread %d needs device %d of those --device selects; only %d exist "
                    "(--workers-per-device N lets N workers share one)",
                    thread, k, s->npicks);
    }
    /* every worker takes its world handle (collective creation), failed or not */
    if (s->topo && ct_comm_world(s->topo, thread, &world) != CT_OK && st == CT_OK)
        st = CT_ERR(&err, CT_ERR_STATE, "no communicator for worker thread %d", thread);
    ct_device_opts dopts = ct_device_opts_default();
    if (st == CT_OK) st = ct_device_open(&dev, &s->list[s->picks[k]], &dopts, &err);
    int first = !world || ct_comm_rank(world) == 0;
    if (world) { /* one worker that cannot measure stops them all, none waits */
        int32_t bad = st != CT_OK;
        if (ct_comm_allreduce(world, &bad, &bad, 1, CT_I32, CT_OP_MAX, NULL) != CT_OK && st == CT_OK)
            st = CT_ERR(&err, CT_ERR_STATE, "%s", ct_comm_errmsg(world));
        if (bad && st == CT_OK)
            st = CT_ERR(&err, CT_ERR_STATE, "another worker could not open its device");
    }
    /* the smallest memory and largest allocation over every worker of the world (KiB, so that
     * an int holds 2 TiB): ranks with different devices must plan alike */
    double gm = 0, am = 0;
    if (st == CT_OK) {
        gm = (double)s->list[s->picks[k]].global_mem_bytes;
        am = (double)s->list[s->picks[k]].max_alloc_bytes;
    }
    if (world && st == CT_OK) {
        int32_t v[2] = {-(int32_t)(gm / 1024), -(int32_t)(am / 1024)};
        if (ct_comm_allreduce(world, v, v, 2, CT_I32, CT_OP_MAX, NULL) != CT_OK)
            st = CT_ERR(&err, CT_ERR_STATE, "%s", ct_comm_errmsg(world));
        gm = -1024.0 * v[0], am = -1024.0 * v[1];
    }
    if (st == CT_OK) {
        FILE *log = first ? s->log : NULL;
        if (log) fprintf(log, "planner: measuring on %s (%s)\n", s->list[s->picks[k]].name,
                         s->live ? "every worker at once"
                         : world ? "this process's workers at once, links from the table"
                                 : "this device alone");
        /* not live (planning for workers that are not all here): the compute is still timed
         * by the workers here at once (TP groups among them), the links come from a table */
        ct_plan_needs nd = *s->need;
        if (!s->live) nd.nlink = 0;
        st = ct__plan_calibrate(world, dev, s->pb, &nd, s->reps, log, &c, &err);
        if (st == CT_OK && s->live && s->need->nlink == 0)
            snprintf(c.source, sizeof c.source, "compute measured over the %d workers",
                     ct_comm_size(world));
    }
#pragma omp critical(ct_plan_measure)
    {
        if (st == CT_OK && thread == 0) {
            s->costs = c;
            memset(&c, 0, sizeof c);
        }
        if (st == CT_OK && k < s->npicks) {
            if (s->mem_min == 0 || gm < s->mem_min) s->mem_min = gm;
            if (s->alloc_min == 0 || am < s->alloc_min) s->alloc_min = am;
        }
        if (st != CT_OK && s->st == CT_OK) {
            s->st = st;
            snprintf(s->msg, sizeof s->msg, "%s", err.msg);
        }
    }
    ct_plan_costs_free(&c);
    ct_comm_free(world);
    ct_device_free(dev);
}

ct_status ct_plan_measure(ct_topo *topo, const ct_train_params *p, const ct_plan_problem *pb,
                          const ct_plan_needs *need, int live, const char *links, int reps,
                          FILE *log, ct_plan_costs *out, double *mem_min, double *alloc_min,
                          ct_err *err) {
    memset(out, 0, sizeof *out);
    ct_device_info *list = NULL;
    int ndev = 0, npicks = 0;
    ct_status st = ct_device_list(&list, &ndev, err);
    if (st != CT_OK) return st;
    int *picks = ct_malloc(sizeof(int) * (size_t)(ndev + 1));
    if (!picks) {
        ct_device_list_free(list);
        return CT_ERR(err, CT_ERR_NOMEM, "no memory");
    }
    const char *spec = p->device[0] ? p->device : ct_device_spec_env();
    st = ct_device_select(list, ndev, spec, 0, picks, &npicks, err);
    ct_plan_needs nd = *need; /* a links table replaces the links' measurement */
    if (links) nd.nlink = 0;
    if (links && st == CT_OK) { /* a bad table is bad input: said before anything is measured */
        ct_plan_costs probe;
        memset(&probe, 0, sizeof probe);
        st = ct_plan_links_load(&probe, links, err);
        ct_plan_costs_free(&probe);
    }
    shared s;
    memset(&s, 0, sizeof s);
    s.topo = topo, s.p = p, s.pb = pb, s.need = &nd, s.list = list, s.picks = picks;
    s.npicks = npicks, s.live = live && topo, s.reps = reps, s.log = log;
    int D = topo ? ct_topo_devices_per_rank(topo) : 1;
    if (st == CT_OK) {
        if (D > 1) {
#pragma omp parallel num_threads(D)
            measure_worker(&s, omp_get_thread_num());
        } else {
            measure_worker(&s, 0);
        }
        if (s.st != CT_OK) st = CT_ERR(err, s.st, "%s", s.msg);
    }
    if (st == CT_OK && links) st = ct_plan_links_load(&s.costs, links, err);
    if (st == CT_OK) {
        *out = s.costs;
        if (mem_min) *mem_min = s.mem_min;
        if (alloc_min) *alloc_min = s.alloc_min;
    } else {
        ct_plan_costs_free(&s.costs);
    }
    free(picks);
    ct_device_list_free(list);
    return st;
}
