/* trainer.c - ct_trainer, one worker of a run: its place in the grid, device, model, executor,
 * loaders, metrics, trace; a step, evaluation, sampling, the model file, the end of the run
 * (checkpoints are ckpt.c's). Every collective call here is made by every worker in the same
 * order; only the leader (world worker 0) writes files. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"

/* Worker 0's device says when it must build a program from source (a cold kernel cache): the
 * run's log tells what the wait is, counted over the programs the engine builds at setup. */
static void on_build(void *arg, const char *program, int phase, double seconds) {
    ct_trainer *t = arg;
    FILE *f = t->r->log;
    if (!f) return;
    if (phase == 0) {
        if (t->built == 0) {
            char dir[1024];
            ct_cache_dir_default(dir, sizeof dir);
            fprintf(f, "train_gpt: building the OpenCL programs for %s on their first use here "
                       "(kept in %s/programs: later runs load them at once)\n",
                    t->info->name, dir);
        }
        return;
    }
    int total = ct_ops_program_count();
    t->built++;
    if (t->built <= total)
        fprintf(f, "  built %-18s %6.1f s   [%d/%d]\n", program, seconds, t->built, total);
    else
        fprintf(f, "  built %-18s %6.1f s\n", program, seconds);
    fflush(f);
}

ct_status ct__trainer_fail(ct_trainer *t, ct_err *err, ct_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char m[CT_ERR_MSG_MAX];
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    CT_ERR(err ? err : &t->err, st, "%s", m);
    return st;
}

ct_status ct_trainer_create(ct_trainer **out, ct_train_run *r, int thread, ct_err *err) {
    ct_status st = CT_OK;
    *out = NULL;
    ct_trainer *t = ct_calloc(1, sizeof *t);
    if (!t) return CT_ERR(err, CT_ERR_NOMEM, "no memory");
    t->r = r;
    t->p = r->p;
    const ct_train_params *p = &t->p;
    const ct_gpt_config *cfg = &r->src.cfg;
    t->thread = thread;
    t->W = r->W;
    /* 1. The world and the grid (a single worker is the 1x1x1 grid without MPI). */
    ct_layout lay = {p->dp, p->tp, p->pp, p->zero, p->ep};
    if (r->topo) {
        if ((st = ct_comm_world(r->topo, thread, &t->world)) != CT_OK) {
            ct__trainer_fail(t, err, st, "worker %d: no communicator", thread);
            goto fail;
        }
        t->wrank = ct_comm_rank(t->world);
        if ((st = ct_grid_create(&t->grid, t->world, &lay, err)) != CT_OK) goto fail;
    } else if ((st = ct_layout_check(&lay, 1, err)) != CT_OK) {
        goto fail;
    }
    t->leader = t->wrank == 0;
    ct_coords at = t->grid ? *ct_grid_coords(t->grid) : ct_layout_coords(&lay, 0);
    /* 2. Device: worker w opens the device its topology place names among those the spec
     * selects (shared by --workers-per-device workers); CPU devices (PoCL) exist once per
     * process, so there the thread index counts. */
    int k = ct_worker_device(r->list, r->picks, r->npicks, r->topo, thread, p->workers_per_device);
    if (k >= r->npicks) {
        st = ct__trainer_fail(t, err, CT_ERR_ARG, "worker %d needs device %d of those --device selects, only %d exist",
                  t->wrank, k, r->npicks);
        goto fail;
    }
    t->info = &r->list[r->picks[k]];
    ct_device_opts dopts = ct_device_opts_default();
    dopts.mem_cap = (uint64_t)(p->mem_cap_gb * 1073741824.0);
    dopts.max_alloc = (uint64_t)(p->max_alloc_mb * 1048576.0);
    if (p->max_alloc_mb > 0 && !dopts.max_alloc) dopts.max_alloc = 1;
    if (t->wrank == 0) dopts.on_build = on_build, dopts.on_build_arg = t;
    if (p->workers_per_device > 1) {
        pthread_mutex_lock(&r->ctx_lock);
        st = ct_device_open_shared(&t->dev, t->info, &dopts, &r->ctx[k], err);
        pthread_mutex_unlock(&r->ctx_lock);
    } else {
        st = ct_device_open(&t->dev, t->info, &dopts, err);
    }
    if (st != CT_OK) goto fail;
    /* 3. The schedule, and the model planned for it: this stage's chunks of blocks (stage s
     * holds model chunks s, s + pp, ...), as many activation slots as the schedule keeps alive
     * on this stage (the simulator's peak, not the micro-batch count), room for the deferred
     * weight gradients under zb1. Then the executor. */
    if ((st = ct_sched_make(r->pipe.kind, p->pp, r->pipe.accum, r->pipe.v, &t->sched, err)) !=
        CT_OK)
        goto fail;
    t->slots = ct_malloc(sizeof(int) * (size_t)p->pp);
    if (!t->slots) {
        st = ct__trainer_fail(t, err, CT_ERR_NOMEM, "no memory");
        goto fail;
    }
    if ((st = ct__train_slots(t->sched, t->slots, err)) != CT_OK) goto fail;
    ct_model_plan plan;
    {
        ct_layout l2;
        ct_coords a2;
        if ((st = ct_train_worker_plan(p, cfg, t->wrank, &l2, &a2, &plan, err)) != CT_OK) goto fail;
    }
    t->b = plan.max_B;
    if (plan.attention == CT_ATTN_AUTO && t->world && ct_comm_size(t->world) > 1) {
        /* One decision for every worker (a timing each worker made for itself could differ
         * between them, and the replicas would then run different numerics): world worker 0
         * measures on its device, every worker builds that path. */
        int32_t chosen = 0;
        if (t->leader) {
            /* the model's own choice (ct_model_attention_choose), with ct_attn_tune's blocks */
            ct_model_plan pa = plan;
            pa.attn_blocks = NULL;
            ct_attn_path path = CT_ATTN_GEMM;
            ct_attn_cfg acfg;
            char note[512];
            if (ct_model_attention_choose(t->dev, cfg, &lay, &at, &pa, &path, &acfg, note,
                                          sizeof note) != CT_OK)
                chosen = -1;
            else
                chosen = path == CT_ATTN_FUSED ? 1 : 0;
        }
        if ((st = ct_comm_bcast(t->world, &chosen, 1, CT_I32, 0, NULL)) != CT_OK) {
            ct__trainer_fail(t, err, st, "agreeing on the attention path: %s", ct_comm_errmsg(t->world));
            goto fail;
        }
        if (chosen < 0) {
            st = ct__trainer_fail(t, err, CT_ERR_DEVICE_MEM, "choosing the attention path failed on worker 0");
            goto fail;
        }
        plan.attention = chosen ? CT_ATTN_FUSED : CT_ATTN_GEMM;
    }
    plan.tp = t->grid ? ct_grid_tp(t->grid) : NULL;
    plan.ep = t->grid && p->ep > 1 ? ct_grid_ep(t->grid) : NULL;
    if ((st = ct_model_create_plan(&t->model, cfg, &lay, &at, t->dev, &plan, err)) != CT_OK) {
        char m[CT_ERR_MSG_MAX];
        snprintf(m, sizeof m, "%s", err->msg);
        ct__trainer_fail(t, err, st, "cannot build the model on %s: %s", t->info->name, m);
        goto fail;
    }
    ct_tp_set_overlap(ct_model_tp(t->model), p->tp_overlap);
    if (t->world && ct_comm_size(t->world) > 1 && !strcmp(p->gemm, "auto") &&
        (plan.precision == CT_PRECISION_BF16 || p->tf32)) {
        /* One GEMM plan for every worker, world worker 0's (as the attention path above): each
         * measured its own, and timings differ between devices and runs. The plan is plain
         * data of the same layout in every process of the run. */
        _Static_assert(sizeof(ct_gemm_plan) % sizeof(int32_t) == 0, "bcast as int32s");
        ct_gemm_plan gp = *ct_model_gemm_plan(t->model);
        if ((st = ct_comm_bcast(t->world, &gp, sizeof gp / sizeof(int32_t), CT_I32, 0, NULL)) !=
            CT_OK) {
            ct__trainer_fail(t, err, st, "agreeing on the GEMM paths: %s", ct_comm_errmsg(t->world));
            goto fail;
        }
        if (!t->leader &&
            (st = ct_model_set_gemm_plan(t->model, &gp, "(worker 0's measured choice, taken by "
                                                        "every worker)")) != CT_OK) {
            ct__trainer_fail(t, err, st, "%s", ct_model_errmsg(t->model));
            goto fail;
        }
    }
    ct_exec_opts xo = ct_train_exec_opts(p);
    if ((st = ct_exec_create(&t->x, t->model, t->grid, &xo, err)) != CT_OK) goto fail;
    /* 4. Parameters: a checkpoint, an llm.c file or the seed. */
    size_t np = ct_model_num_params(t->model);
    ct_rng_seed(&t->rng, (uint64_t)p->seed ^ 0x5A5A5A5A5A5A5A5Aull);
    if (p->resume[0]) {
        if ((st = ct__trainer_resume(t, err)) != CT_OK) goto fail;
    } else if (r->src.init_params) {
        if (r->src.init_n != np) {
            st = ct__trainer_fail(t, err, CT_ERR_ARG, "%s holds %zu parameters, the model %zu", p->init,
                      r->src.init_n, np);
            goto fail;
        }
        if ((st = ct_model_set_params(t->model, r->src.init_params, np)) != CT_OK) {
            ct__trainer_fail(t, err, st, "loading %s failed: %s", p->init, ct_model_errmsg(t->model));
            goto fail;
        }
    } else if ((st = ct_model_init_random(t->model, (uint64_t)p->seed)) != CT_OK) {
        ct__trainer_fail(t, err, st, "initialisation failed: %s", ct_model_errmsg(t->model));
        goto fail;
    }
    t->step = t->start;
    /* 5. Loaders, buffers, accounting. */
    if ((st = ct_loader_create(&t->loader, r->train, p->batch, p->seq, r->pipe.accum, p->shuffle,
                               (uint64_t)p->seed, err)) != CT_OK)
        goto fail;
    if (r->val && (st = ct_loader_create(&t->vloader, r->val, p->batch, p->seq, 1, 0, 0, err)) !=
                      CT_OK)
        goto fail;
    size_t bt = (size_t)t->b * p->seq * (size_t)r->pipe.accum;
    t->in = ct_malloc(bt * sizeof(int));
    t->tg = ct_malloc(bt * sizeof(int));
    t->mem = ct_calloc((size_t)t->W * CT_MEM__COUNT, sizeof(uint64_t));
    t->tpdev = ct_calloc((size_t)t->W, sizeof(int32_t));
    if (!t->in || !t->tg || !t->mem || !t->tpdev) {
        st = ct__trainer_fail(t, err, CT_ERR_NOMEM, "no memory for a batch");
        goto fail;
    }
    t->flops_tok = ct_train_flops_per_token(cfg, p->seq);
    t->peak = p->peak_tflops;
    t->peak_src = "--peak-tflops";
    if (t->peak <= 0 && t->leader) {
        if (t->built && r->log) {
            fprintf(r->log, "train_gpt: measuring the device's GEMM rate (MFU's peak): CLBlast "
                            "builds its GEMM program on first use\n");
            fflush(r->log);
        }
        t->peak = ct_measure_gemm_tflops(t->dev, cfg, t->b * p->seq);
        t->peak_src = "measured GEMM rate";
    }
    if (t->leader && (st = ct_metrics_open(&t->mx, p->metrics, t->start > 0, err)) != CT_OK)
        goto fail;
    if ((st = ct_exec_mem_gather(t->x, t->mem)) != CT_OK) {
        ct__trainer_fail(t, err, st, "%s", ct_exec_errmsg(t->x));
        goto fail;
    }
    {
        /* where each worker's TP collectives run (the memory model places their buffer) */
        int32_t mine = ct_tp_device_comm(ct_model_tp(t->model));
        if (t->world && (st = ct_comm_allgather(t->world, &mine, t->tpdev, 1, CT_I32, NULL)) !=
                            CT_OK) {
            ct__trainer_fail(t, err, st, "%s", ct_comm_errmsg(t->world));
            goto fail;
        }
        if (!t->world) t->tpdev[0] = mine;
    }
    /* 6. A pipeline's measured bubble: the executed timeline of the traced steps, else of the
     * last three (not the run's first step, which compiles kernels, when there are others). */
    t->time_b = p->steps - 1;
    t->time_a = p->steps - 3 > (int)t->start ? p->steps - 3 : (int)t->start;
    if (t->time_a == 0 && t->time_b > 0) t->time_a = 1;
    /* 7. The trace: steps [a, b] (default: the last three). */
    if (p->trace[0]) {
        t->trace_b = p->steps - 1;
        t->trace_a = p->steps - 3 > (int)t->start ? p->steps - 3 : (int)t->start;
        if (p->trace_steps[0]) sscanf(p->trace_steps, "%d:%d", &t->trace_a, &t->trace_b);
        t->time_a = t->trace_a, t->time_b = t->trace_b;
        if ((st = ct_trace_create(&t->tr, t->wrank, r->topo ? ct_topo_rank(r->topo) : 0, thread,
                                  err)) != CT_OK)
            goto fail;
        ct_exec_set_trace(t->x, t->tr);
        if ((st = ct_trace_sync(t->tr, t->world)) != CT_OK) {
            ct__trainer_fail(t, err, st, "trace: %s", ct_comm_errmsg(t->world));
            goto fail;
        }
    }
    *out = t;
    return CT_OK;
fail:
    ct_trainer_free(t);
    return st;
}

void ct_trainer_free(ct_trainer *t) {
    if (!t) return;
    ct__trainer_save_end(t);
    ct_sched_free(t->sched);
    free(t->slots);
    ct_exec_free(t->x);
    ct_model_free(t->model);
    ct_device_free(t->dev);
    ct_loader_free(t->loader);
    ct_loader_free(t->vloader);
    ct_metrics_close(t->mx);
    ct_trace_free(t->tr);
    ct_grid_free(t->grid);
    ct_comm_free(t->world);
    free(t->in);
    free(t->tg);
    free(t->mem);
    free(t->tpdev);
    free(t);
}

const char *ct_trainer_errmsg(const ct_trainer *t) { return t->err.msg; }
int ct_trainer_leader(const ct_trainer *t) { return t->leader; }
int64_t ct_trainer_step_index(const ct_trainer *t) { return t->step; }
int64_t ct_trainer_start(const ct_trainer *t) { return t->start; }
int ct_trainer_built_programs(const ct_trainer *t) { return t->built; }
ct_model *ct_trainer_model(ct_trainer *t) { return t->model; }
ct_exec *ct_trainer_exec(ct_trainer *t) { return t->x; }
ct_metrics *ct_trainer_metrics(ct_trainer *t) { return t->mx; }

/* The "moe" record of a step: tokens (choices kept) per block and expert, routed choices, the
 * rows each worker's experts computed. */
static ct_status moe_record(ct_trainer *t, int64_t step) {
    ct_exec_moe mo;
    if (!ct_exec_moe_get(t->x, &mo)) return CT_OK;
    size_t LE = (size_t)mo.layers * mo.experts, cap = 256 + 24 * (2 * LE + (size_t)mo.workers);
    char *b = ct_malloc(cap);
    if (!b) return ct__trainer_fail(t, NULL, CT_ERR_NOMEM, "no memory for the moe record");
    long long kept = 0, routed = 0;
    for (size_t i = 0; i < LE; i++) kept += mo.kept[i], routed += mo.routed[i];
    size_t at = (size_t)snprintf(b, cap, "\"step\":%lld,\"choices\":%lld,\"dropped\":%lld,",
                                 (long long)step, routed, routed - kept);
    for (int pass = 0; pass < 2; pass++) {
        const int32_t *a = pass ? mo.routed : mo.kept;
        at += (size_t)snprintf(b + at, cap - at, "\"%s\":[", pass ? "routed_per_expert"
                                                                  : "tokens_per_expert");
        for (int l = 0; l < mo.layers; l++) {
            at += (size_t)snprintf(b + at, cap - at, "%s[", l ? "," : "");
            for (int e = 0; e < mo.experts; e++)
                at += (size_t)snprintf(b + at, cap - at, "%s%d", e ? "," : "",
                                       (int)a[(size_t)l * mo.experts + e]);
            at += (size_t)snprintf(b + at, cap - at, "]");
        }
        at += (size_t)snprintf(b + at, cap - at, "],");
    }
    at += (size_t)snprintf(b + at, cap - at, "\"tokens_per_worker\":[");
    for (int w = 0; w < mo.workers; w++)
        at += (size_t)snprintf(b + at, cap - at, "%s%d", w ? "," : "", (int)mo.rows[w]);
    snprintf(b + at, cap - at, "]");
    ct_status st = ct_metrics_record(t->mx, "moe", b);
    free(b);
    return st;
}

ct_status ct_trainer_step(ct_trainer *t, ct_step_metrics *sm) {
    ct_status st;
    const ct_train_params *p = &t->p;
    int accum = t->r->pipe.accum;
    int64_t step = t->step;
    int tracing = t->tr && step >= t->trace_a && step <= t->trace_b;
    ct_trace_enable(t->tr, tracing);
    ct_exec_set_timeline(t->x, p->pp > 1 && step >= t->time_a && step <= t->time_b);
    double t0 = ct_time_now();
    double lr = ct_lr_at(t->r->sched, p->lr, p->warmup, p->steps, p->min_lr_frac, step);
    /* micro-batch mb of step s is rows [mb*B, (mb+1)*B) of the step; worker w takes rows
     * [mb*B + d*b, mb*B + (d+1)*b) of it, d its DP rank */
    int d = t->grid ? ct_grid_coords(t->grid)->dp_rank : 0;
    size_t bt = (size_t)t->b * p->seq;
    for (int mb = 0; mb < accum; mb++)
        if ((st = ct_loader_rows(t->loader, step, mb * p->batch + d * t->b, t->b, t->in + mb * bt,
                                 t->tg + mb * bt, &t->err)) != CT_OK)
            return st;
    ct_adamw_hp hp = {(float)lr,  (float)p->beta1,        (float)p->beta2,
                      (float)p->eps, (float)p->weight_decay, (float)p->grad_clip};
    ct_step_result res;
    if ((st = ct_exec_step(t->x, t->sched, t->in, t->tg, t->b, p->seq, &hp, (int)(step + 1),
                           &res)) != CT_OK)
        return ct__trainer_fail(t, NULL, st, "%s", ct_exec_errmsg(t->x));
    double dt = ct_time_now() - t0;
    double tokens_step = (double)p->batch * p->seq * accum;
    ct_mem_stats ms;
    ct_device_mem_stats(t->dev, &ms);
    sm->step = step;
    sm->loss = isnan(res.loss) ? NAN : res.loss;
    sm->lr = lr;
    sm->grad_norm = isnan(res.grad_norm) ? NAN : res.grad_norm; /* "nan", never "-nan" */
    sm->ms = dt * 1e3;
    sm->tokens_per_s = tokens_step / dt;
    sm->tflops = t->flops_tok * tokens_step / dt / 1e12;
    sm->mfu = t->peak > 0 ? sm->tflops / t->peak : NAN;
    sm->mem_bytes = ms.total_current;
    t->skips_run = res.skipped ? t->skips_run + 1 : 0;
    sm->skipped = res.skipped;
    sm->skips_run = t->skips_run;
    sm->moe = t->r->src.cfg.experts > 0;
    sm->aux_loss = res.aux_loss, sm->drop_frac = res.drop_frac, sm->max_load = res.max_load;
    ct_exec_bytes eb;
    ct_exec_bytes_last(t->x, &eb);
    int64_t cb[6] = {eb.dp, eb.tp, eb.ep, eb.edp, eb.emb, eb.pp};
    memcpy(sm->comm_bytes, cb, sizeof cb);
    sm->comm = 1;
    if (t->leader) ct_metrics_train(t->mx, sm);
    if (t->leader && sm->moe && (st = moe_record(t, step)) != CT_OK) return st;
    t->step++;
    ct_trace_enable(t->tr, 0);
    ct_exec_set_timeline(t->x, 0);
    if (res.skipped && (!strcmp(p->nonfinite, "stop") || t->skips_run >= p->max_skips)) {
        /* every worker took the same decisions, so all stop here together */
        char first[200];
        if ((st = ct_exec_nonfinite_report(t->x, first, sizeof first)) != CT_OK)
            return ct__trainer_fail(t, NULL, st, "%s", ct_exec_errmsg(t->x));
        char why[160];
        if (!strcmp(p->nonfinite, "stop"))
            snprintf(why, sizeof why, "--nonfinite stop");
        else
            snprintf(why, sizeof why, "%d skipped steps in a row (--max-skips %d)", t->skips_run,
                     p->max_skips);
        return ct__trainer_fail(t, NULL, CT_ERR_NONFINITE,
                    "step %lld: gradient norm %g, loss %g: not finite; %s: stopping (the "
                    "parameters and optimizer state are those after step %lld); %s",
                    (long long)step + 1, sm->grad_norm, sm->loss, why,
                    (long long)(step - t->skips_run + 1), first);
    }
    return CT_OK;
}

ct_status ct_trainer_eval(ct_trainer *t, double *out) {
    *out = NAN;
    if (!t->vloader) return CT_OK;
    const ct_train_params *p = &t->p;
    int d = t->grid ? ct_grid_coords(t->grid)->dp_rank : 0;
    int64_t W = ct_loader_windows(t->vloader);
    int n = p->eval_batches < W ? p->eval_batches : (int)W;
    double sum = 0;
    ct_status st;
    for (int i = 0; i < n; i++) {
        float loss = 0;
        if ((st = ct_loader_rows(t->vloader, i, d * t->b, t->b, t->in, t->tg, &t->err)) != CT_OK)
            return st;
        if ((st = ct_exec_forward(t->x, t->in, t->tg, t->b, p->seq, &loss, NULL)) != CT_OK)
            return ct__trainer_fail(t, NULL, st, "evaluation failed: %s", ct_exec_errmsg(t->x));
        sum += loss;
    }
    /* this worker's mean, averaged over DP as a float */
    *out = sum / n;
    if (t->W > 1) {
        float vf = (float)*out;
        if ((st = ct_exec_dp_average(t->x, &vf)) != CT_OK)
            return ct__trainer_fail(t, NULL, st, "%s", ct_exec_errmsg(t->x));
        *out = vf;
    }
    return CT_OK;
}

/* The trainer's forward for generation: one row on every worker (the forward is collective
 * when parameters are sharded), logits on the leader. */
static ct_status trainer_logits(void *user, const int *ctx, int n, float *logits, ct_err *err) {
    ct_trainer *t = (ct_trainer *)user;
    ct_status st = ct_exec_forward(t->x, ctx, NULL, 1, n, NULL, logits);
    if (st != CT_OK) CT_ERR(err, st, "sampling forward failed: %s", ct_exec_errmsg(t->x));
    return st;
}

/* Every forward is collective under ZeRO-3 (parameter gathers), tensor parallelism (the
 * block's own collectives), expert parallelism (the MoE layer's all-to-alls) and a pipeline (it
 * passes through every stage). */
int ct_trainer_sample_collective(const ct_trainer *t) {
    return t->p.zero >= 3 || t->p.tp > 1 || t->p.pp > 1 || t->p.ep > 1;
}

ct_status ct_trainer_sample(ct_trainer *t, int **tokens, int *n) {
    const ct_train_params *p = &t->p;
    const ct_gpt_config *c = &t->r->src.cfg;
    int cap = p->sample_len + 1024, np = 0;
    *tokens = NULL;
    *n = 0;
    int *tok = ct_malloc((size_t)cap * sizeof(int));
    if (!tok) return ct__trainer_fail(t, NULL, CT_ERR_NOMEM, "no memory for a sample");
    ct_status st = ct_prompt_parse(p->prompt, c->vocab, t->r->tok ? ct_tokenizer_eot(t->r->tok) : -1,
                                   tok, 1024, &np, &t->err);
    /* every worker that samples draws the same tokens (same RNG, same logits) */
    if (st == CT_OK)
        st = ct_generate(trainer_logits, t, c, tok, np, np + p->sample_len, p->seq, p->temperature,
                         p->sample_top_k, &t->rng, &t->err);
    if (st != CT_OK) {
        free(tok);
        return st;
    }
    *tokens = tok;
    *n = np + p->sample_len;
    return CT_OK;
}

const ct_tokenizer *ct_trainer_tokenizer(const ct_trainer *t) { return t->r->tok; }

ct_status ct_trainer_save_model(ct_trainer *t) {
    size_t np = ct_model_num_params(t->model);
    float *host = t->leader ? ct_malloc(np * sizeof(float)) : NULL;
    ct_status st = ct_exec_gather_state(t->x, host, NULL, NULL);
    if (st != CT_OK) st = ct__trainer_fail(t, NULL, st, "%s", ct_exec_errmsg(t->x));
    if (st == CT_OK && t->leader && !host) st = ct__trainer_fail(t, NULL, CT_ERR_NOMEM, "no memory to save the model");
    ct_file_dtype dt = CT_FILE_F32;
    ct_file_dtype_parse(t->p.save_dtype, &dt); /* checked by ct_train_params_check */
    if (st == CT_OK && t->leader)
        st = ct_model_file_write_as(t->p.save_model, &t->r->src.cfg, host, dt, &t->err);
    free(host);
    return st;
}

ct_status ct_trainer_finish(ct_trainer *t) {
    ct_status st = ct_trainer_save_wait(t, NULL, 0, NULL);
    if (st != CT_OK || !t->tr) return st;
    return ct_trace_write(t->tr, t->world, t->p.trace, &t->err);
}
