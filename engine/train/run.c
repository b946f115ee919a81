/* run.c - ct_train_run: what the workers of one process share, read-only once they start: the
 * checked parameters, the model's shape, the data and loaders' check, the tokenizer, the
 * devices the spec selects (and the contexts workers sharing a device share). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_impl.h"

/* Warn when a resumed run changes a flag that shapes the optimisation (the checkpoint's META
 * section holds the writing run's flags as "flag=value" lines). */
static void warn_changed_flags(FILE *log, const char *meta, const ct_train_params *p) {
    static const char *const keys[] = {"steps", "lr", "lr-schedule", "warmup", "min-lr-frac",
                                       "beta1", "beta2", "eps", "weight-decay", "grad-clip"};
    size_t need = ct_opts_format(NULL, 0, ct_train_opts, ct_train_opts_count, p);
    char *now = (char *)ct_malloc(need + 1);
    if (!now || !meta) {
        free(now);
        return;
    }
    ct_opts_format(now, need + 1, ct_train_opts, ct_train_opts_count, p);
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        char key[64];
        snprintf(key, sizeof key, "%s=", keys[k]);
        const char *a = strstr(meta, key), *b = strstr(now, key);
        while (a && a != meta && a[-1] != '\n') a = strstr(a + 1, key); /* whole lines only */
        while (b && b != now && b[-1] != '\n') b = strstr(b + 1, key);
        if (!a || !b) continue;
        size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
        if (la != lb || strncmp(a, b, la) != 0)
            fprintf(log, "train_gpt: warning: the checkpoint was written with --%.*s, this run "
                         "uses --%.*s\n",
                    (int)la, a, (int)lb, b);
    }
    free(now);
}


int ct_worker_device(const ct_device_info *list, const int *picks, int npicks, ct_topo *topo,
                     int thread, int workers_per_device) {
    int k = topo ? ct_topo_device_index(topo, thread) : 0;
    if (list[picks[0]].type == CL_DEVICE_TYPE_CPU && k >= npicks) k = thread;
    return k / (workers_per_device > 0 ? workers_per_device : 1);
}

ct_status ct_train_run_open(ct_train_run **out, const ct_train_params *pp, ct_topo *topo, const ct_cl_source *corpus, int ncorpus, FILE *log,
                            ct_err *err) {
    ct_status st = CT_OK;
    *out = NULL;
    ct_train_run *r = ct_calloc(1, sizeof *r);
    if (!r) return CT_ERR(err, CT_ERR_NOMEM, "no memory");
    pthread_mutex_init(&r->ctx_lock, NULL);
    r->p = *pp;
    const ct_train_params *p = &r->p;
    r->topo = topo;
    r->W = topo ? ct_topo_world_size(topo) : 1;
    r->log = log;
#define TRY(expr)                                                                                  \
    do {                                                                                           \
        if ((st = (expr)) != CT_OK) goto fail;                                                     \
    } while (0)
    TRY(ct_train_params_check(p, &r->sched, err));
    /* 1. The model's shape: from a checkpoint, an llm.c file, or the flags. */
    ct_gpt_config *cfg = &r->src.cfg;
    TRY(ct__train_source_load(p, 1, &r->src, err));
    /* tensor parallelism's divisibility rules, before any device work */
    TRY(ct_model_tp_check(cfg, p->tp, p->sequence_parallel, p->seq, err));
    if (p->seq > cfg->max_seq) {
        st = CT_ERR(err, CT_ERR_ARG,
                    "--seq %d is above the model's maximum sequence length maxT = %d (%s)", p->seq,
                    cfg->max_seq, r->src.origin);
        goto fail;
    }
    /* the pipeline: the schedule, and the blocks of each model chunk */
    TRY(ct__train_pipe_make(p, cfg, &r->pipe, err));
    /* mixture of experts: what the layouts support */
    TRY(ct_train_moe_check(p, cfg, r->pipe.kind, err));
    if (p->resume[0]) {
        warn_changed_flags(log, r->src.ck.meta, p);
        if (r->src.ck.loader_B != p->batch || r->src.ck.loader_T != p->seq ||
            r->src.ck.loader_accum != r->pipe.accum || r->src.ck.loader_shuffle != p->shuffle ||
            r->src.ck.loader_seed != (uint64_t)p->seed)
            fprintf(log,
                    "train_gpt: warning: the checkpoint was written with batch %d, seq %d, "
                    "accumulation %d, shuffle %d, seed %llu; this run uses %d, %d, %d, %d, %d, so "
                    "the data order differs from an uninterrupted run\n",
                    r->src.ck.loader_B, r->src.ck.loader_T, r->src.ck.loader_accum, r->src.ck.loader_shuffle,
                    (unsigned long long)r->src.ck.loader_seed, p->batch, p->seq, r->pipe.accum, p->shuffle,
                    p->seed);
    }
    /* Temporaries of killed writers in the checkpoint directory (one process looks). */
    if (p->save[0] && (!topo || ct_topo_rank(topo) == 0)) {
        int nrm = 0;
        uint64_t bytes = 0;
        char names[512];
        TRY(ct_checkpoint_clean_stale(p->save, &nrm, &bytes, names, sizeof names, err));
        if (nrm)
            fprintf(log,
                    "train_gpt: removed %d stale temporary file%s (%.1f MiB) from %s, left by "
                    "processes that are gone (killed while saving): %s\n",
                    nrm, nrm > 1 ? "s" : "", bytes / 1048576.0, p->save, names);
    }
    /* 2. Data. */
    if (p->data[0]) {
        TRY(ct_data_open_shards(&r->train, p->data, err));
    } else if (p->text[0]) {
        TRY(ct_data_open_text(&r->train, p->text, err));
    } else {
        size_t total = 0, at = 0;
        for (int i = 0; i < ncorpus; i++) total += corpus[i].len;
        unsigned char *b = ct_malloc(total ? total : 1);
        if (!b) {
            st = CT_ERR(err, CT_ERR_NOMEM, "no memory for the embedded corpus");
            goto fail;
        }
        for (int i = 0; i < ncorpus; i++, at += corpus[i - 1].len)
            memcpy(b + at, corpus[i].text, corpus[i].len);
        st = ct_data_open_bytes(&r->train, b, total, "the embedded corpus", err);
        free(b);
        if (st != CT_OK) goto fail;
    }
    if (p->val_data[0]) TRY(ct_data_open_shards(&r->val, p->val_data, err));
    else if (p->val_frac > 0 && p->eval_every > 0)
        TRY(ct_data_split_tail(r->train, p->val_frac, &r->val, err));
    TRY(ct_data_check_vocab(r->train, cfg->vocab, err));
    if (r->val && (st = ct_data_check_vocab(r->val, cfg->vocab, err)) != CT_OK) {
        char m[CT_ERR_MSG_MAX];
        snprintf(m, sizeof m, "%s", err->msg);
        CT_ERR(err, st, "validation data: %s", m);
        goto fail;
    }
    { /* the loaders are per worker; make one here to refuse a stream too short up front */
        ct_loader *ld = NULL, *vl = NULL;
        TRY(ct_loader_create(&ld, r->train, p->batch, p->seq, r->pipe.accum, p->shuffle,
                             (uint64_t)p->seed, err));
        ct_loader_free(ld);
        if (r->val && ct_loader_create(&vl, r->val, p->batch, p->seq, 1, 0, 0, err) != CT_OK) {
            fprintf(log, "train_gpt: validation disabled: %s\n", err->msg);
            ct_data_free(r->val);
            r->val = NULL;
            ct_err_clear(err);
        }
        ct_loader_free(vl);
    }
    if (p->resume[0] && r->src.ck.data_tokens != ct_data_count(r->train))
        fprintf(log,
                "train_gpt: warning: the checkpoint was trained on %llu tokens, this data has "
                "%zu; the data order differs from an uninterrupted run\n",
                (unsigned long long)r->src.ck.data_tokens, ct_data_count(r->train));
    if (p->tokenizer[0]) {
        TRY(ct_tokenizer_open(&r->tok, p->tokenizer, err));
        if (ct_tokenizer_vocab(r->tok) < cfg->vocab) {
            st = CT_ERR(err, CT_ERR_ARG, "tokenizer %s has %d tokens, the model %d", p->tokenizer,
                        ct_tokenizer_vocab(r->tok), cfg->vocab);
            goto fail;
        }
    }
    /* 3. Devices: the ones the spec selects, and the layout's check against them. */
    const char *spec = p->device[0] ? p->device : ct_device_spec_env();
    TRY(ct_device_list(&r->list, &r->ndev, err));
    r->picks = ct_malloc(sizeof(int) * (size_t)(r->ndev + 1));
    r->ctx = ct_calloc((size_t)r->ndev + 1, sizeof *r->ctx);
    if (!r->picks || !r->ctx) {
        st = CT_ERR(err, CT_ERR_NOMEM, "no memory");
        goto fail;
    }
    TRY(ct_device_select(r->list, r->ndev, spec, 0, r->picks, &r->npicks, err));
    int D = p->devices_per_rank, cpu = r->list[r->picks[0]].type == CL_DEVICE_TYPE_CPU;
    int workers = D * (topo && !cpu ? ct_topo_local_nranks(topo) : 1);
    int need = (workers + p->workers_per_device - 1) / p->workers_per_device;
    if (need > r->npicks) {
        st = CT_ERR(err, CT_ERR_ARG,
                    "more workers than devices: %d worker%s on this node need%s %d device%s, but "
                    "--device '%s' selects %d (CPU devices count once per process; "
                    "--workers-per-device N lets N workers share one)",
                    workers, workers > 1 ? "s" : "", workers > 1 ? "" : "s", need,
                    need > 1 ? "s" : "", spec ? spec : "auto", r->npicks);
        goto fail;
    }
#undef TRY
    *out = r;
    return CT_OK;
fail:
    ct_train_run_free(r);
    return st;
}

void ct_train_run_free(ct_train_run *r) {
    if (!r) return;
    ct__train_source_release(&r->src);
    ct__train_pipe_free(&r->pipe);
    ct_tokenizer_free(r->tok);
    for (int k = 0; r->ctx && k <= r->ndev; k++) ct_context_release(r->ctx[k]);
    free(r->ctx);
    pthread_mutex_destroy(&r->ctx_lock);
    ct_device_list_free(r->list);
    free(r->picks);
    ct_data_free(r->train);
    ct_data_free(r->val);
    free(r);
}

const ct_gpt_config *ct_train_run_config(const ct_train_run *r) { return &r->src.cfg; }
int ct_train_run_accum(const ct_train_run *r) { return r->pipe.accum; }
