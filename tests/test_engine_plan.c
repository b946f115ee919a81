/* test_engine_plan.c - the layout planner's pure half (engine/plan/ but probe.c, measure.c), no device:
 *   1. the layouts enumerated are exactly those a plain restatement of train_gpt's rules allows
 *      (dp x tp x pp = W, dp | batch, tp | heads, Vp, 4C, SP: tp | T, ZeRO needs dp >= 2,
 *      chunks <= blocks, interleaved: v >= 2 and pp | micro-batches, zb1 without TP, ZeRO 1-3
 *      with every schedule), over several models and W, and pinned flags narrow it;
 *   2. the time model against step times worked by hand from given costs: a data-parallel step
 *      (compute, buckets, optimizer, the small world all-reduces), a two-stage 1F1B pipeline
 *      ((m + N - 1)(F + B), bubble 1/(m + 1)), the exposed share under overlap, the bound of
 *      devices that share cores, TP's time and bytes;
 *   3. a cost the layout needs and the costs lack is an error naming it;
 *   4. the alpha-beta fit on exact lines, the links table written and read back, bad lines;
 *   5. where groups fall (threads, ranks, mixed);
 *   6. memory through the engine's model (equal to each run's memory report: test_engine_layout):
 *      the fullest worker is the entry's, a cap splits fitting from not (smallest shortfall
 *      first), nothing fitting leaves the smallest total first, --recompute reaches the model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ct_engine.h"
#include "ct_test.h"

static ct_plan_problem problem(int L, int NH, int C, int V, int T, int B, int micro, int W, int D) {
    ct_train_params p = ct_train_params_default();
    p.seq = T, p.batch = B, p.total_batch = micro > 1 ? micro * B * T : 0;
    ct_gpt_config cfg = {T, V, (V + 127) / 128 * 128, L, NH, C, 0, 0, 0, 0, 0, 0, 0, 0};
    ct_plan_problem pb;
    ct_plan_problem_from_params(&pb, &p, &cfg, W, D);
    return pb;
}

/* train_gpt's rules, written out again without its code. */
static int allowed(const ct_plan_problem *pb, const ct_plan_layout *l) {
    const ct_gpt_config *c = &pb->cfg;
    if (l->dp * l->tp * l->pp != pb->W) return 0;
    if (pb->B % l->dp) return 0;
    if (l->tp > 1 && (c->heads % l->tp || c->padded_vocab % l->tp || (4 * c->channels) % l->tp))
        return 0;
    if (l->sp && (l->tp < 2 || pb->T % l->tp)) return 0;
    if (l->zero > 0 && l->dp < 2) return 0;
    int inter = l->sched == CT_SCHED_INTERLEAVED;
    if (l->pp == 1 && (l->sched != CT_SCHED_TRIVIAL || l->virt != 1)) return 0;
    if (l->pp > 1 && l->sched == CT_SCHED_TRIVIAL) return 0;
    if (!inter && l->virt != 1) return 0;
    if (inter && (l->virt < 2 || pb->micro % l->pp)) return 0;
    if (l->pp * l->virt > c->layers) return 0;
    if (l->sched == CT_SCHED_ZB1 && l->tp > 1) return 0;
    return 1;
}

static void check_enumeration(ct_plan_problem pb, const char *what) {
    ct_plan_layout *ls = NULL;
    int n = 0;
    ct_err err = {0};
    CT_ASSERT_OK(ct_plan_enumerate(&pb, &ls, &n, &err), err.msg);
    int want = 0, found = 0;
    for (int pp = 1; pp <= pb.W; pp++)
        for (int tp = 1; tp <= pb.W; tp++)
            for (int dp = 1; dp <= pb.W; dp++)
                for (int z = 0; z <= 3; z++)
                    for (int sk = 0; sk < CT_SCHED__COUNT; sk++)
                        for (int v = 1; v <= pb.max_virt; v++)
                            for (int sp = 0; sp <= 1; sp++) {
                                ct_plan_layout l = {dp, tp, pp, 1, z, (ct_sched_kind)sk, v, sp};
                                if (!allowed(&pb, &l)) continue;
                                const ct_plan_layout *f = &pb.fix;
                                if ((f->dp >= 0 && f->dp != dp) || (f->tp >= 0 && f->tp != tp) ||
                                    (f->pp >= 0 && f->pp != pp) || (f->zero >= 0 && f->zero != z) ||
                                    (f->sp >= 0 && f->sp != sp))
                                    continue;
                                want++;
                                int hit = 0;
                                for (int i = 0; i < n; i++)
                                    hit += !memcmp(&ls[i], &l, sizeof l);
                                found += hit == 1;
                                char name[96];
                                CT_ASSERT_MSG(hit == 1, "%s: %s enumerated %d times, expected once",
                                              what, ct_plan_layout_name(&l, name, sizeof name), hit);
                            }
    CT_ASSERT_MSG(n == want, "%s: %d layouts enumerated, the rules allow %d", what, n, want);
    for (int i = 0; i < n; i++) {
        char name[96];
        CT_ASSERT_MSG(allowed(&pb, &ls[i]), "%s: %s enumerated but not allowed", what,
                      ct_plan_layout_name(&ls[i], name, sizeof name));
        CT_ASSERT_OK(ct_plan_layout_check(&pb, &ls[i], &err), err.msg);
    }
    printf("%-50s %3d layouts (rules: %d)\n", what, n, want);
    free(ls);
}

/* Costs where everything is free but what a case sets. */
static ct_plan_costs zero_costs(int b, int tp, int sp) {
    ct_plan_costs c;
    memset(&c, 0, sizeof c);
    c.comp = calloc(1, sizeof *c.comp);
    c.ncomp = 1;
    c.comp[0].b = b, c.comp[0].tp = tp, c.comp[0].sp = sp;
    c.workers_timed = 1;
    return c;
}
static void add_link(ct_plan_costs *c, int coll, int n, ct_plan_place place, double a, double b) {
    c->link = realloc(c->link, sizeof *c->link * (size_t)(c->nlink + 1));
    ct_plan_link k = {coll, n, place, a, b, 0, 1e12};
    c->link[c->nlink++] = k;
}

static double param_count(const ct_gpt_config *c) {
    size_t sizes[CT_GPT_NUM_TENSORS];
    return (double)ct_gpt_param_sizes(c, sizes);
}

static void test_time_model(void) {
    ct_err err = {0};
    ct_plan_estimate e;
    /* 1. a data-parallel step: dp 2 on two threads, 3 micro-batches, no overlap */
    {
        ct_plan_problem pb = problem(3, 4, 32, 256, 16, 4, 3, 2, 2);
        pb.bucket_mb = 0.1; /* 104857.6 bytes: the gradients (~42k floats) in 2 buckets */
        ct_plan_costs c = zero_costs(2, 1, 0);
        ct_plan_compute *k = &c.comp[0];
        k->block_fwd = 1.0, k->block_bwd = 2.5, k->embed_fwd = 0.25, k->embed_bwd = 0.5;
        k->head_fwd = 0.75, k->head_bwd = 1.25;
        c.copy_alpha = 0.01, c.copy_beta = 1e-7, c.opt_alpha = 0.02, c.opt_beta = 3e-6;
        c.overlap = 0;
        double a = 0.05, bb = 2e-7;
        add_link(&c, CT_COLL_ALLREDUCE, 2, CT_PLACE_THREADS, a, bb);
        ct_plan_layout l = {2, 1, 1, 1, 0, CT_SCHED_TRIVIAL, 1, 0};
        CT_ASSERT_OK(ct_plan_predict(&pb, &l, &c, &e, &err), err.msg);
        double psi = param_count(&pb.cfg), all = psi * 4, bucket = 0.1 * 1048576.0;
        double compute = 3 * (3 * (1.0 + 2.5) + 0.25 + 0.5 + 0.75 + 1.25);
        double dp = (0.01 + 1e-7 * bucket + a + bb * bucket) +
                    (0.01 + 1e-7 * (all - bucket) + a + bb * (all - bucket)) + 0.01 + 1e-7 * all;
        double opt = (12 * 3 + 2 + 3) * 0.02 + 3e-6 * psi;
        double small = 2 * (a + bb * 4);
        CT_ASSERT_NEAR(e.step_ms, compute + dp + opt + small, 1e-9);
        CT_ASSERT_NEAR(e.compute_ms, compute, 1e-9);
        CT_ASSERT_NEAR(e.dp_bytes, all, 1e-3); /* ring all-reduce: 2 (n-1)/n of the bytes */
        CT_ASSERT_NEAR(e.bubble, 0, 0);
        CT_ASSERT_NEAR(e.tokens_per_s, 4.0 * 16 * 3 / ((compute + dp + opt + small) / 1e3), 1e-6);
        /* with overlap 1 the buckets hide behind the last backward, up to its length */
        c.overlap = 1;
        CT_ASSERT_OK(ct_plan_predict(&pb, &l, &c, &e, &err), err.msg);
        double bwd = 3 * 2.5 + 0.5 + 1.25;
        CT_ASSERT_NEAR(e.step_ms, compute + (dp > bwd ? dp - bwd : 0) + opt + small, 1e-9);
        /* a cost it needs and lacks: the DP all-reduce over 2 ranks (one device per rank) */
        pb.D = 1;
        CT_ASSERT(ct_plan_predict(&pb, &l, &c, &e, &err) == CT_ERR_ARG);
        CT_ASSERT_STR_CONTAINS(err.msg, "no cost for allreduce over 2 workers (ranks)");
        ct_plan_costs_free(&c);
    }
    /* 2. a two-stage 1F1B pipeline: F, B per stage (one block each), free messages */
    for (int m = 2; m <= 6; m += 2) {
        ct_plan_problem pb = problem(2, 4, 32, 256, 16, 4, m, 2, 2);
        ct_plan_costs c = zero_costs(4, 1, 0);
        c.comp[0].block_fwd = 1.5, c.comp[0].block_bwd = 2.5;
        add_link(&c, CT_PLAN_P2P, 2, CT_PLACE_THREADS, 0, 0);
        add_link(&c, CT_COLL_ALLREDUCE, 2, CT_PLACE_THREADS, 0, 0);
        ct_plan_layout l = {1, 1, 2, 1, 0, CT_SCHED_1F1B, 1, 0};
        CT_ASSERT_OK(ct_plan_predict(&pb, &l, &c, &e, &err), err.msg);
        CT_ASSERT_NEAR(e.step_ms, (m + 1) * 4.0, 1e-9);
        CT_ASSERT_NEAR(e.bubble, 1.0 / (m + 1), 1e-12);
        CT_ASSERT_NEAR(e.pp_bytes, m * 2 * 4.0 * 16 * 32 * 4, 1e-6);
        /* a message that takes 1 ms on the wire, both ways: each hand-off waits for it */
        c.link[0].alpha = 1.0;
        CT_ASSERT_OK(ct_plan_predict(&pb, &l, &c, &e, &err), err.msg);
        CT_ASSERT(e.step_ms > (m + 1) * 4.0 + 1.0);
        ct_plan_costs_free(&c);
    }
    /* 3. devices sharing cores: the stages' work with every worker busy bounds the pipeline
     * (share 2: each piece takes twice as long with all workers at once as alone) */
    for (int m = 2; m <= 4; m += 2) {
        ct_plan_problem pb = problem(2, 4, 32, 256, 16, 4, m, 2, 2);
        ct_plan_costs c = zero_costs(4, 1, 0);
        c.comp[0].block_fwd = 1.5, c.comp[0].block_bwd = 2.5, c.comp[0].share = 2;
        add_link(&c, CT_PLAN_P2P, 2, CT_PLACE_THREADS, 0, 0);
        add_link(&c, CT_COLL_ALLREDUCE, 2, CT_PLACE_THREADS, 0, 0);
        ct_plan_layout l = {1, 1, 2, 1, 0, CT_SCHED_1F1B, 1, 0};
        CT_ASSERT_OK(ct_plan_predict(&pb, &l, &c, &e, &err), err.msg);
        /* alone: (m + 1)(F + B) / 2; busy: m (F + B) per stage, both stages at once */
        CT_ASSERT_NEAR(e.step_ms, m * 4.0 > (m + 1) * 2.0 ? m * 4.0 : (m + 1) * 2.0, 1e-9);
        c.comp[0].share = 1.25;
        CT_ASSERT_OK(ct_plan_predict(&pb, &l, &c, &e, &err), err.msg);
        CT_ASSERT_NEAR(e.step_ms, (m + 1) * 4.0 / 1.25 > m * 4.0 ? (m + 1) * 4.0 / 1.25 : m * 4.0, 1e-9);
        ct_plan_costs_free(&c);
    }
    /* 4. TP: its collectives are inside the pieces; the step is the pieces', the comm share
     * their TP part; the bytes per worker: 4 all-reduces of (b,T,C) per block, one in the
     * embedding, one in the logits' backward, the loss statistics (3 b T floats) */
    {
        int m = 2, L = 3, T = 16, C = 32, b = 4;
        ct_plan_problem pb = problem(L, 4, C, 256, T, b, m, 2, 2);
        ct_plan_costs c = zero_costs(b, 2, 0);
        ct_plan_compute *k = &c.comp[0];
        k->block_fwd = 2.0, k->block_bwd = 3.0, k->tp_block = 1.5;
        k->embed_fwd = 0.5, k->embed_bwd = 0.25, k->tp_embed = 0.125;
        k->head_fwd = 1.0, k->head_bwd = 1.5, k->tp_head = 0.75;
        add_link(&c, CT_COLL_ALLREDUCE, 2, CT_PLACE_THREADS, 0.1, 1e-6);
        ct_plan_layout l = {1, 2, 1, 1, 0, CT_SCHED_TRIVIAL, 1, 0};
        CT_ASSERT_OK(ct_plan_predict(&pb, &l, &c, &e, &err), err.msg);
        double act = (double)b * T * C * 4;
        CT_ASSERT_NEAR(e.tp_bytes, m * (L * 4 * act + act + act + 3.0 * b * T * 4), 1e-6);
        double want = m * (L * 5.0 + 0.75 + 2.5) + 2 * (0.1 + 1e-6 * 4);
        CT_ASSERT_NEAR(e.step_ms, want, 1e-9);
        CT_ASSERT_NEAR(e.comm_ms, m * (L * 1.5 + 0.125 + 0.75), 1e-9);
        CT_ASSERT_NEAR(e.compute_ms, m * (L * 3.5 + 0.625 + 1.75), 1e-9);
        ct_plan_costs_free(&c);
    }
    /* 5. experts under TP: tp 2 x dp 2 (ep 2). TP's bytes as in 4 (the experts' TP sums are the
     * dense MLP's), EP's apart: per block and micro-batch four all-to-alls of K b T C floats, each
     * worker sending (ep-1)/ep of them; each all-to-all (over the ep workers of one TP rank) is
     * staged, its link cost added to every block's forward and backward twice */
    {
        int m = 2, L = 3, T = 16, C = 32, B = 8, b = 4, K = 2;
        ct_plan_problem pb = problem(L, 4, C, 256, T, B, m, 4, 4);
        pb.cfg.experts = 4, pb.cfg.top_k = K;
        ct_plan_costs c = zero_costs(b, 2, 0);
        c.comp[0].block_fwd = 2.0, c.comp[0].block_bwd = 3.0;
        add_link(&c, CT_COLL_ALLREDUCE, 2, CT_PLACE_THREADS, 0, 0);
        add_link(&c, CT_COLL_ALLREDUCE, 4, CT_PLACE_THREADS, 0, 0);
        add_link(&c, CT_COLL_ALLTOALL, 2, CT_PLACE_THREADS, 0.25, 0);
        ct_plan_layout l = {2, 2, 1, 2, 0, CT_SCHED_TRIVIAL, 1, 0};
        CT_ASSERT_OK(ct_plan_predict(&pb, &l, &c, &e, &err), err.msg);
        double act = (double)b * T * C * 4;
        CT_ASSERT_NEAR(e.tp_bytes, m * (L * 4 * act + act + act + 3.0 * b * T * 4), 1e-6);
        CT_ASSERT_NEAR(e.ep_bytes, m * L * 4 * K * act * 0.5, 1e-6);
        /* the blocks' compute plus 2 staged all-to-alls (0.25 ms each) in each block's forward
         * and backward, m micro-batches; the optimizer and the DP links are free here */
        CT_ASSERT_NEAR(e.step_ms, m * L * (5.0 + 4 * 0.25), 1e-9);
        l.ep = 1; /* no EP: no all-to-all, no EP bytes */
        CT_ASSERT_OK(ct_plan_predict(&pb, &l, &c, &e, &err), err.msg);
        CT_ASSERT_NEAR(e.ep_bytes, 0, 0);
        CT_ASSERT_NEAR(e.step_ms, m * L * 5.0, 1e-9);
        ct_plan_costs_free(&c);
    }
}

static void test_fit_and_table(void) {
    double x[4] = {4, 1024, 65536, 1048576}, t[4];
    for (int i = 0; i < 4; i++) t[i] = 0.05 + 3e-7 * x[i];
    double a, b;
    ct_plan_fit(x, t, 4, &a, &b);
    CT_ASSERT_NEAR(a, 0.05, 1e-9);
    CT_ASSERT_NEAR(b, 3e-7, 1e-15);
    char path[] = "/tmp/ct_test_plan_XXXXXX";
    int fd = mkstemp(path);
    CT_ASSERT(fd >= 0);
    if (fd >= 0) close(fd);
    ct_plan_costs c;
    memset(&c, 0, sizeof c);
    add_link(&c, CT_COLL_ALLREDUCE, 4, CT_PLACE_MIXED, 0.125, 2.5e-7);
    add_link(&c, CT_PLAN_P2P, 2, CT_PLACE_RANKS, 0.03, 1e-7);
    add_link(&c, CT_COLL_ALLGATHER, 8, CT_PLACE_THREADS, 0.2, 0);
    ct_err err = {0};
    CT_ASSERT_OK(ct_plan_links_write(&c, path, &err), err.msg);
    ct_plan_costs d;
    memset(&d, 0, sizeof d);
    CT_ASSERT_OK(ct_plan_links_load(&d, path, &err), err.msg);
    CT_ASSERT_EQ_INT(d.nlink, 3);
    for (int i = 0; i < 3 && i < d.nlink; i++) {
        CT_ASSERT_EQ_INT(d.link[i].coll, c.link[i].coll);
        CT_ASSERT_EQ_INT(d.link[i].n, c.link[i].n);
        CT_ASSERT_EQ_INT(d.link[i].place, c.link[i].place);
        CT_ASSERT_NEAR(d.link[i].alpha, c.link[i].alpha, 1e-12);
        CT_ASSERT_NEAR(d.link[i].beta, c.link[i].beta, 1e-18);
    }
    FILE *f = fopen(path, "w");
    fprintf(f, "# ok\nlink allreduce 2 ranks 0.1 1e-7 0 100\nlink allreduce 2 nowhere 0.1 1e-7 0 1\n");
    fclose(f);
    CT_ASSERT(ct_plan_links_load(&d, path, &err) == CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(err.msg, "line 3: placement 'nowhere'");
    f = fopen(path, "w");
    fprintf(f, "link allreduce 2 ranks 0.1\n");
    fclose(f);
    CT_ASSERT(ct_plan_links_load(&d, path, &err) == CT_ERR_ARG);
    CT_ASSERT_STR_CONTAINS(err.msg, "line 1: expected");
    CT_ASSERT(ct_plan_links_load(&d, "/nonexistent/links.txt", &err) == CT_ERR_IO);
    remove(path);
    ct_plan_costs_free(&c);
    ct_plan_costs_free(&d);
}

/* Memory: every layout's per-worker figures answered by the memory model, the fullest worker's
 * the entry's; a cap splits the layouts into those that fit (each total <= cap) and the rest,
 * smallest shortfall first; nothing fits gives the smallest total first; --recompute reaches
 * the model (block keeps less activation memory than none, the same parameters). */
static void test_memory_rank(void) {
    ct_err err = {0};
    ct_plan_problem pb = problem(4, 4, 32, 256, 16, 4, 2, 4, 2);
    ct_plan_result res;
    CT_ASSERT_OK(ct_plan_rank(&pb, NULL, &res, &err), err.msg);
    CT_ASSERT(res.n >= 10 && res.nfit == res.n);
    double lo = 1e30, hi = 0;
    for (int i = 0; i < res.n; i++) {
        const ct_plan_entry *e = &res.e[i];
        CT_ASSERT(e->mem_known);
        double worst = 0;
        for (int w = 0; w < pb.W; w++) {
            const ct_plan_mem *m = &e->worker[w];
            CT_ASSERT(m->params > 0 && m->activations > 0);
            CT_ASSERT_NEAR(m->total, m->params + m->grads + m->optimizer + m->activations + m->workspace, 0.5);
            if (m->total > worst) worst = m->total;
        }
        CT_ASSERT_NEAR(e->mem.total, worst, 0.5);
        if (worst < lo) lo = worst;
        if (worst > hi) hi = worst;
    }
    CT_ASSERT(hi > lo);
    ct_plan_result_free(&res);
    pb.mem_cap = 0.5 * (lo + hi);
    CT_ASSERT_OK(ct_plan_rank(&pb, NULL, &res, &err), err.msg);
    CT_ASSERT(res.nfit > 0 && res.nfit < res.n);
    for (int i = 0; i < res.n; i++) {
        CT_ASSERT_EQ_INT(res.e[i].fits, i < res.nfit);
        CT_ASSERT_EQ_INT(res.e[i].fits, res.e[i].mem.total <= pb.mem_cap);
        if (i > res.nfit) CT_ASSERT(res.e[i].mem.total >= res.e[i - 1].mem.total);
    }
    ct_plan_result_free(&res);
    pb.mem_cap = 0.5 * lo;
    CT_ASSERT_OK(ct_plan_rank(&pb, NULL, &res, &err), err.msg);
    CT_ASSERT_EQ_INT(res.nfit, 0);
    CT_ASSERT_NEAR(res.e[0].mem.total, lo, 0.5);
    ct_plan_result_free(&res);
    /* the recompute mode reaches the memory model */
    ct_plan_problem pn = problem(4, 4, 32, 256, 16, 4, 2, 2, 2), pk = pn;
    snprintf(pk.recompute, sizeof pk.recompute, "block");
    ct_plan_layout l = {2, 1, 1, 1, 0, CT_SCHED_TRIVIAL, 1, 0};
    ct_plan_mem mn, mk;
    CT_ASSERT_OK(ct_plan_memory(&pn, &l, 0, &mn, &err), err.msg);
    CT_ASSERT_OK(ct_plan_memory(&pk, &l, 0, &mk, &err), err.msg);
    CT_ASSERT(mk.activations < mn.activations);
    CT_ASSERT_NEAR(mk.params, mn.params, 0.5);
}

static void test_places(void) {
    /* D = 4 devices per rank: worker w on rank w / 4 */
    CT_ASSERT_EQ_INT(ct_plan_group_place(2, 1, 4), CT_PLACE_THREADS);
    CT_ASSERT_EQ_INT(ct_plan_group_place(4, 1, 4), CT_PLACE_THREADS);
    CT_ASSERT_EQ_INT(ct_plan_group_place(2, 4, 4), CT_PLACE_RANKS);
    CT_ASSERT_EQ_INT(ct_plan_group_place(8, 1, 4), CT_PLACE_MIXED);
    CT_ASSERT_EQ_INT(ct_plan_group_place(4, 2, 4), CT_PLACE_MIXED);
    CT_ASSERT_EQ_INT(ct_plan_group_place(2, 2, 4), CT_PLACE_THREADS);
    CT_ASSERT_EQ_INT(ct_plan_group_place(4, 1, 1), CT_PLACE_RANKS);
}

int main(void) {
    /* 1. enumeration against the rules */
    check_enumeration(problem(4, 4, 32, 256, 16, 4, 2, 8, 4), "L4 NH4 C32 T16 B4 m2, W 8");
    check_enumeration(problem(2, 6, 48, 256, 18, 6, 4, 4, 2), "L2 NH6 C48 T18 B6 m4, W 4 (no tp 4)");
    check_enumeration(problem(8, 4, 32, 300, 16, 8, 3, 4, 4), "L8 V300 B8 m3 (interleaved needs pp | m)");
    check_enumeration(problem(1, 2, 16, 64, 8, 2, 1, 2, 2), "L1 (no pipeline), W 2");
    check_enumeration(problem(6, 12, 96, 256, 32, 12, 6, 6, 3), "L6 NH12 W 6");
    ct_plan_problem pb = problem(8, 4, 32, 256, 16, 4, 4, 8, 4);
    pb.max_virt = 4;
    check_enumeration(pb, "L8 m4 W 8, up to 4 chunks per stage");
    pb = problem(4, 4, 32, 256, 16, 4, 2, 8, 4);
    pb.fix.tp = 2, pb.fix.zero = 1;
    check_enumeration(pb, "L4 W 8 pinned tp 2, ZeRO-1");
    pb = problem(4, 4, 32, 256, 16, 3, 2, 8, 4); /* batch 3: dp must divide it */
    pb.fix.tp = 8;
    {
        ct_plan_layout *ls = NULL;
        int n = 0;
        ct_err err = {0};
        CT_ASSERT_OK(ct_plan_enumerate(&pb, &ls, &n, &err), err.msg);
        CT_ASSERT_EQ_INT(n, 0); /* tp 8 does not divide 4 heads */
        free(ls);
        ct_plan_result res;
        CT_ASSERT(ct_plan_rank(&pb, NULL, &res, &err) == CT_ERR_ARG);
        CT_ASSERT_STR_CONTAINS(err.msg, "no layout of 8 workers");
    }
    /* 2-3. the time model */
    test_time_model();
    /* 4-5. fits, tables, placements */
    test_fit_and_table();
    test_places();
    test_memory_rank();
    return ct_test_end("test_engine_plan");
}
