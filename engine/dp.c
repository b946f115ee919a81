/* dp.c - data parallelism: bucketed gradient averaging over the DP group in reverse layer order
 * (optionally overlapped with backward through the model's backward hook and a communication
 * thread), the optimizer step with ZeRO-1 (AdamW on this worker's shard, then an all-gather of
 * the parameters), gathered state for checkpoints and the memory report.
 *
 * Buckets are ranges of the flat (layer-major) gradient buffer cut from its end: bucket 0 is the
 * last `bucket_bytes` (lnf and the last layers), the last bucket starts at 0 (wte, wpe). Backward
 * finishes gradients from the end of the buffer towards its start, so bucket k is complete once
 * the model reports ready_from <= its start.
 *
 * Overlap: the hook (worker thread, between layers) enqueues a non-blocking read of each
 * finished bucket into host staging on the model's in-order queue, right behind the kernels that
 * finish it, and posts (bucket, event) to this worker's communication thread; that thread waits
 * for the read and all-reduces the bucket on host memory while the device runs the next layers'
 * backward. ct_dp_finish_grads waits for the last bucket and writes the averages back with one
 * write. Staging is host memory of the gradient buffer's size (reported as "comm").
 * Without overlap the same buckets go one by one after backward: read, all-reduce, write. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ct_engine_dp.h"

struct ct_dp {
    ct_model *m;
    ct_comm *c;
    ct_device *dev;
    int N, rank, zero, overlap;
    size_t nparams, flat, lo, hi;
    int nb;
    size_t *blo, *bhi; /* bucket k = [blo[k], bhi[k]) floats; k = 0 is the last range */
    size_t *bwork;     /* where bucket k lies in the model's gradient buffer (ZeRO-2: its
                          working buffer; else = blo[k]) */
    float *acc;        /* ZeRO-2: this worker's averaged gradient shard, summed over micro-steps */
    float norm;        /* ZeRO-2: the global norm of the last finished step */
    ct_comm *pc;       /* ZeRO-3: a second handle on the group for parameter gathers (the
                          communication thread uses `c` at the same time) */
    float *ptmp;       /* ZeRO-3: host staging of one gathered range */
    float *mirror;     /* ZeRO-3: host copy of this worker's parameter shard (refreshed at the
                          start of every forward; the shard changes only in the optimizer) */
    int slot_holds[2]; /* ZeRO-3: block in each working slot, -1 unknown */
    /* ZeRO-3 prefetch: the next block's gather runs on a second thread (over `pc`) while the
     * device computes the current block. */
    pthread_t pth;
    int pth_started, pf_block, pf_state; /* pf_state: 0 idle, 1 requested, 2 done */
    size_t pf_a, pf_b;
    float *pf_buf; /* two halves of flat floats: block l's prefetch in half l % 2 */
    ct_status pf_st;
    double gather_ms;
    cl_event ev_ptmp, ev_pf[2]; /* non-blocking slot writes still reading ptmp / pf_buf[parity] */
    float *stage;      /* overlap: flat floats (bucket k at stage + blo[k]); else one bucket */
    size_t stage_floats;
    float *hostflat; /* flat floats: ZeRO gathers */
    int armed, next_issue;
    cl_event *ev;
    /* communication thread */
    pthread_t th;
    int th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int nposted, ndone, quit;
    ct_status th_st;
    double th_busy_ms;
    ct_dp_times times;
    ct_err err;
};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

ct_dp_opts ct_dp_opts_default(void) {
    ct_dp_opts o = {(size_t)25 << 20, 1};
    return o;
}

const char *ct_dp_errmsg(const ct_dp *d) { return d->err.msg; }
int ct_dp_num_buckets(const ct_dp *d) { return d->nb; }
size_t ct_dp_comm_bytes(const ct_dp *d) {
    return (d->stage_floats + (d->hostflat ? d->flat : 0) + (d->ptmp ? 3 * d->flat : 0) +
            (d->mirror ? d->hi - d->lo : 0) +
            (d->acc ? d->hi - d->lo : 0)) *
           sizeof(float);
}

static ct_status comm_fail(ct_dp *d, ct_status st, const char *what) {
    if (st != CT_OK) CT_ERR(&d->err, st, "%s: %s", what, ct_comm_errmsg(d->c));
    return st;
}
static ct_status dev_fail(ct_dp *d, ct_status st, const char *what) {
    if (st != CT_OK) CT_ERR(&d->err, st, "%s: %s", what, ct_device_errmsg(d->dev));
    return st;
}

/* The communication thread: all-reduce posted buckets in order. */
static void *comm_main(void *arg) {
    ct_dp *d = (ct_dp *)arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->quit && d->ndone == d->nposted) pthread_cond_wait(&d->cv, &d->mu);
        if (d->quit) break;
        int k = d->ndone;
        pthread_mutex_unlock(&d->mu);
        ct_status st = CT_OK;
        if (clWaitForEvents(1, &d->ev[k]) != CL_SUCCESS)
            st = CT_ERR(&d->err, CT_ERR_OPENCL, "reading gradient bucket %d back failed", k);
        clReleaseEvent(d->ev[k]);
        d->ev[k] = NULL;
        double t0 = now_ms(); /* busy: the all-reduce, not the wait for backward */
        if (st == CT_OK)
            st = comm_fail(d, ct_comm_allreduce(d->c, d->stage + d->blo[k], d->stage + d->blo[k],
                                                d->bhi[k] - d->blo[k], CT_F32, CT_OP_AVG, NULL),
                           "gradient all-reduce");
        if (st == CT_OK && d->acc) {
            size_t a = d->blo[k] > d->lo ? d->blo[k] : d->lo;
            size_t b = d->bhi[k] < d->hi ? d->bhi[k] : d->hi;
            for (size_t i = a; i < b; i++) d->acc[i - d->lo] += d->stage[i];
        }
        double t1 = now_ms();
        pthread_mutex_lock(&d->mu);
        if (st != CT_OK && d->th_st == CT_OK) d->th_st = st;
        d->th_busy_ms += t1 - t0;
        d->ndone++;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* ZeRO-3: parameters [a, b) into the model's working buffer at `work`: every worker puts its
 * shard's part into a zeroed range and the range is all-reduced (sum): exact, since every other
 * contribution is 0. */
static ct_status gather_host(ct_dp *d, size_t a, size_t b, float *buf) {
    size_t n = b - a, x0 = a > d->lo ? a : d->lo, x1 = b < d->hi ? b : d->hi;
    memset(buf, 0, n * sizeof(float));
    if (x0 < x1) memcpy(buf + (x0 - a), d->mirror + (x0 - d->lo), (x1 - x0) * sizeof(float));
    return comm_fail(d, ct_comm_allreduce(d->pc, buf, buf, n, CT_F32, CT_OP_SUM, NULL),
                     "parameter gather");
}

/* Wait until a non-blocking slot write no longer reads its host buffer. */
static void wait_write(cl_event *ev) {
    if (*ev) {
        clWaitForEvents(1, ev);
        clReleaseEvent(*ev);
        *ev = NULL;
    }
}

/* Enqueue the slot write without waiting (the host runs ahead of the device; on the in-order
 * queue it lands after the kernels that used the slot before). */
static ct_status write_slot(ct_dp *d, ct_model *m, size_t work, const float *src, size_t n,
                            cl_event *ev) {
    cl_int rc = clEnqueueWriteBuffer(ct_device_queue(d->dev),
                                     ct_buffer_mem(ct_model_params_buffer(m)), CL_FALSE,
                                     work * sizeof(float), n * sizeof(float), src, 0, NULL, ev);
    if (rc != CL_SUCCESS)
        return CT_ERR(&d->err, CT_ERR_OPENCL, "writing gathered parameters: OpenCL error %d",
                      (int)rc);
    return CT_OK;
}

static ct_status gather_range(ct_dp *d, ct_model *m, size_t a, size_t b, size_t work) {
    wait_write(&d->ev_ptmp);
    ct_status st = gather_host(d, a, b, d->ptmp);
    if (st == CT_OK) st = write_slot(d, m, work, d->ptmp, b - a, &d->ev_ptmp);
    return st;
}

static void *prefetch_main(void *arg) {
    ct_dp *d = (ct_dp *)arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->quit && d->pf_state != 1) pthread_cond_wait(&d->cv, &d->mu);
        if (d->quit) break;
        size_t a = d->pf_a, b = d->pf_b;
        float *buf = d->pf_buf + (size_t)(d->pf_block % 2) * d->flat;
        pthread_mutex_unlock(&d->mu);
        ct_status st = gather_host(d, a, b, buf);
        pthread_mutex_lock(&d->mu);
        d->pf_st = st;
        d->pf_state = 2;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* Block l into its slot: from the prefetch when it is that block's, else gathered now. */
static ct_status gather_block(ct_dp *d, ct_model *m, int l) {
    size_t a = ct_model_layer_begin(m, l), b = ct_model_layer_begin(m, l + 1);
    size_t work = ct_model_param_offset(m, CT_GPT_ln1w, l);
    ct_status st = CT_OK;
    if (d->slot_holds[l % 2] == l) return CT_OK; /* still there (forward's last blocks) */
    if (d->pf_state != 0 && d->pf_block == l) {
        pthread_mutex_lock(&d->mu);
        while (d->pf_state != 2) pthread_cond_wait(&d->cv, &d->mu);
        st = d->pf_st;
        d->pf_state = 0;
        pthread_mutex_unlock(&d->mu);
        if (st == CT_OK)
            st = write_slot(d, m, work, d->pf_buf + (size_t)(l % 2) * d->flat, b - a,
                            &d->ev_pf[l % 2]);
    } else {
        st = gather_range(d, m, a, b, work);
    }
    if (st == CT_OK) d->slot_holds[l % 2] = l;
    return st;
}

static void prefetch(ct_dp *d, ct_model *m, int l) {
    int L = ct_model_config(m)->layers;
    if (l < 0 || l >= L || d->slot_holds[l % 2] == l || !d->pth_started) return;
    wait_write(&d->ev_pf[l % 2]); /* the thread is about to overwrite that half */
    pthread_mutex_lock(&d->mu);
    d->pf_block = l;
    d->pf_a = ct_model_layer_begin(m, l);
    d->pf_b = ct_model_layer_begin(m, l + 1);
    d->pf_state = 1;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

/* The model's parameter hook (ZeRO-3): block l, or (l = -1) the embeddings and final LayerNorm. */
static ct_status on_params_needed(void *user, ct_model *m, int l, int backward) {
    ct_dp *d = (ct_dp *)user;
    double t0 = now_ms();
    int L = ct_model_config(m)->layers;
    ct_status st;
    if (l < 0) {
        /* a new forward: the shard may have changed (optimizer), so the slots are stale */
        d->slot_holds[0] = d->slot_holds[1] = -1;
        st = dev_fail(d, ct_buffer_read(ct_model_param_shard_buffer(m), 0, d->mirror,
                                        (d->hi - d->lo) * sizeof(float)),
                      "reading the parameter shard");
        if (st == CT_OK) st = gather_range(d, m, 0, ct_model_layer_begin(m, 0), 0);
        if (st == CT_OK)
            st = gather_range(d, m, ct_model_layer_begin(m, L), d->nparams,
                              ct_model_param_offset(m, CT_GPT_lnfw, 0));
    } else {
        st = gather_block(d, m, l);
        /* the next block of this pass goes on the prefetch thread while this one computes */
        if (st == CT_OK) prefetch(d, m, backward ? l - 1 : l + 1);
    }
    double dt = now_ms() - t0;
    d->times.exposed_ms += dt;
    d->gather_ms += dt;
    return st;
}

/* The model's backward hook: hand every bucket that is now complete to the thread. */
static ct_status on_grads_ready(void *user, ct_model *m, size_t ready_from) {
    ct_dp *d = (ct_dp *)user;
    int z2 = d->zero >= 2; /* ZeRO-2 communicates every micro-step: the slots are reused */
    if (!z2 && (!d->armed || !d->overlap)) return CT_OK;
    if (z2 && d->next_issue == d->nb) {
        /* a new micro-step: the previous one's buckets must have left the staging */
        pthread_mutex_lock(&d->mu);
        while (d->ndone < d->nposted) pthread_cond_wait(&d->cv, &d->mu);
        d->nposted = d->ndone = 0;
        pthread_mutex_unlock(&d->mu);
        d->next_issue = 0;
    }
    int posted = 0;
    ct_buffer *g = ct_model_grads_buffer(m);
    while (d->next_issue < d->nb && d->blo[d->next_issue] >= ready_from) {
        int k = d->next_issue;
        size_t n = d->bhi[k] - d->blo[k];
        cl_int rc = clEnqueueReadBuffer(ct_device_queue(d->dev), ct_buffer_mem(g), CL_FALSE,
                                        d->bwork[k] * sizeof(float), n * sizeof(float),
                                        d->stage + d->blo[k], 0, NULL, &d->ev[k]);
        if (rc != CL_SUCCESS)
            return CT_ERR(&d->err, CT_ERR_OPENCL, "staging gradient bucket %d: OpenCL error %d",
                          k, (int)rc);
        /* ZeRO-2: empty the slot behind the read (in order), before the next layer reuses it */
        if (z2 && ct_buffer_zero(g, d->bwork[k] * sizeof(float), n * sizeof(float)) != CT_OK)
            return CT_ERR(&d->err, CT_ERR_OPENCL, "zeroing gradient slot %d: %s", k,
                          ct_device_errmsg(d->dev));
        d->next_issue++;
        posted++;
    }
    if (posted) {
        clFlush(ct_device_queue(d->dev));
        pthread_mutex_lock(&d->mu);
        d->nposted += posted;
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
    }
    return CT_OK;
}

ct_status ct_dp_create(ct_dp **out, ct_model *m, ct_comm *comm, const ct_dp_opts *o, ct_err *err) {
    *out = NULL;
    ct_dp_opts def = ct_dp_opts_default();
    if (!o) o = &def;
    ct_dp *d = calloc(1, sizeof *d);
    if (!d) return CT_ERR(err, CT_ERR_NOMEM, "ct_dp_create: out of host memory");
    d->m = m;
    d->c = comm;
    d->dev = ct_model_device(m);
    d->N = ct_comm_size(comm);
    d->rank = ct_comm_rank(comm);
    d->overlap = o->overlap != 0;
    d->nparams = ct_model_num_params(m);
    d->flat = ct_model_flat_len(m);
    ct_model_shard(m, &d->lo, &d->hi);
    d->zero = ct_model_zero_stage(m);
    if (d->zero >= 2) d->overlap = 1; /* slots are emptied during backward: always staged */
    if (d->zero && (d->lo != (d->hi - d->lo) * (size_t)d->rank ||
                    d->flat != (d->hi - d->lo) * (size_t)d->N)) {
        size_t lo = d->lo, hi = d->hi, fl = d->flat;
        free(d);
        return CT_ERR(err, CT_ERR_ARG,
                      "ct_dp_create: the model's shard [%zu, %zu) of %zu does not belong to rank "
                      "%d of a group of %d (model and group built for different layouts)",
                      lo, hi, fl, ct_comm_rank(comm), ct_comm_size(comm));
    }
    size_t bf = o->bucket_bytes / sizeof(float);
    if (bf < 1024) bf = 1024;
    int L = ct_model_config(m)->layers;
    /* ZeRO-2: one bucket per backward stage (lnf, each layer, the embeddings) */
    d->nb = d->zero >= 2 ? L + 2 : (int)((d->nparams + bf - 1) / bf);
    d->blo = malloc(sizeof(size_t) * (size_t)d->nb);
    d->bhi = malloc(sizeof(size_t) * (size_t)d->nb);
    d->bwork = malloc(sizeof(size_t) * (size_t)d->nb);
    d->ev = calloc((size_t)d->nb, sizeof(cl_event));
    d->stage_floats = d->overlap ? d->flat : (bf < d->nparams ? bf : d->nparams);
    d->stage = malloc(d->stage_floats * sizeof(float));
    if (!d->blo || !d->bhi || !d->bwork || !d->ev || !d->stage) {
        ct_dp_free(d);
        return CT_ERR(err, CT_ERR_NOMEM, "ct_dp_create: out of host memory for staging");
    }
    size_t hi = d->nparams;
    for (int k = 0; k < d->nb; k++) {
        d->bhi[k] = hi;
        if (d->zero >= 2) {
            int l = L - k; /* k = 0: lnf; 1..L: layer L-k; L+1: the embeddings */
            d->blo[k] = k == 0 ? ct_model_layer_begin(m, L) : l >= 0 ? ct_model_layer_begin(m, l) : 0;
            d->bwork[k] = k == 0 ? ct_model_grad_offset(m, CT_GPT_lnfw, 0)
                          : l >= 0 ? ct_model_grad_offset(m, CT_GPT_ln1w, l) : 0;
        } else {
            d->blo[k] = hi > bf ? hi - bf : 0;
            d->bwork[k] = d->blo[k];
        }
        hi = d->blo[k];
    }
    if (d->zero >= 2 && !(d->acc = calloc(d->hi - d->lo, sizeof(float)))) {
        ct_dp_free(d);
        return CT_ERR(err, CT_ERR_NOMEM, "ct_dp_create: out of host memory for the shard");
    }
    if (d->zero) {
        d->hostflat = malloc(d->flat * sizeof(float));
        if (!d->hostflat) {
            ct_dp_free(d);
            return CT_ERR(err, CT_ERR_NOMEM, "ct_dp_create: out of host memory for ZeRO gathers");
        }
    }
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    if (d->overlap) {
        if (pthread_create(&d->th, NULL, comm_main, d) != 0) {
            ct_dp_free(d);
            return CT_ERR(err, CT_ERR_NOMEM, "ct_dp_create: cannot start the communication thread");
        }
        d->th_started = 1;
    }
    if (d->zero >= 3) {
        /* collective over the group (every worker creates its ct_dp together) */
        d->slot_holds[0] = d->slot_holds[1] = -1;
        if (ct_comm_split(comm, 0, d->rank, &d->pc) != CT_OK ||
            !(d->ptmp = malloc(d->flat * sizeof(float))) ||
            !(d->pf_buf = malloc(2 * d->flat * sizeof(float))) ||
            !(d->mirror = malloc((d->hi - d->lo) * sizeof(float)))) {
            CT_ERR(err, CT_ERR_NOMEM, "ct_dp_create: ZeRO-3 gather handle or staging: %s",
                   ct_comm_errmsg(comm));
            ct_dp_free(d);
            return CT_ERR_NOMEM;
        }
        if (pthread_create(&d->pth, NULL, prefetch_main, d) == 0) d->pth_started = 1;
        ct_model_set_param_hook(m, on_params_needed, d);
    }
    ct_model_set_backward_hook(m, on_grads_ready, d);
    *out = d;
    return CT_OK;
}

void ct_dp_free(ct_dp *d) {
    if (!d) return;
    if (d->th_started) {
        pthread_mutex_lock(&d->mu);
        d->quit = 1;
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->th, NULL);
    }
    if (d->pth_started) {
        pthread_mutex_lock(&d->mu);
        d->quit = 1;
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->pth, NULL);
    }
    if (d->blo) {
        pthread_mutex_destroy(&d->mu);
        pthread_cond_destroy(&d->cv);
    }
    wait_write(&d->ev_ptmp);
    wait_write(&d->ev_pf[0]);
    wait_write(&d->ev_pf[1]);
    if (d->ev)
        for (int k = 0; k < d->nb; k++)
            if (d->ev[k]) clReleaseEvent(d->ev[k]);
    if (d->m) ct_model_set_backward_hook(d->m, NULL, NULL);
    if (d->m && d->zero >= 3) ct_model_set_param_hook(d->m, NULL, NULL);
    ct_comm_free(d->pc);
    free(d->ptmp);
    free(d->pf_buf);
    free(d->mirror);
    free(d->blo);
    free(d->bhi);
    free(d->bwork);
    free(d->acc);
    free(d->ev);
    free(d->stage);
    free(d->hostflat);
    free(d);
}

ct_status ct_dp_arm(ct_dp *d) {
    d->armed = 1; /* next_issue is 0 here: ct_dp_finish_grads (and creation) reset it */
    return CT_OK;
}

ct_status ct_dp_finish_grads(ct_dp *d) {
    ct_status st = CT_OK;
    double t0 = now_ms();
    ct_buffer *g = ct_model_grads_buffer(d->m);
    if ((d->overlap && d->armed) || d->zero >= 2) {
        /* The last hook call (ready_from = 0) has posted every bucket. */
        if (d->next_issue != d->nb)
            return CT_ERR(&d->err, CT_ERR_STATE,
                          "ct_dp_finish_grads: %d of %d buckets were handed over (no backward "
                          "since ct_dp_arm?)",
                          d->next_issue, d->nb);
        pthread_mutex_lock(&d->mu);
        while (d->ndone < d->nb) pthread_cond_wait(&d->cv, &d->mu);
        st = d->th_st;
        d->th_st = CT_OK;
        d->nposted = d->ndone = 0;
        d->times.busy_ms += d->th_busy_ms;
        d->th_busy_ms = 0;
        pthread_mutex_unlock(&d->mu);
        if (st == CT_OK && d->zero >= 2) {
            /* the shard to the device; the global norm from every shard's sum of squares */
            size_t sh = d->hi - d->lo;
            double ss = 0;
            for (size_t i = 0; i < sh; i++) ss += (double)d->acc[i] * d->acc[i];
            float fs = (float)ss;
            st = dev_fail(d, ct_buffer_write(ct_model_grad_shard_buffer(d->m), 0, d->acc,
                                             sh * sizeof(float)),
                          "writing the gradient shard");
            memset(d->acc, 0, sh * sizeof(float));
            if (st == CT_OK)
                st = comm_fail(d, ct_comm_allreduce(d->c, &fs, &fs, 1, CT_F32, CT_OP_SUM, NULL),
                               "gradient norm");
            d->norm = sqrtf(fs);
        } else if (st == CT_OK) {
            st = dev_fail(d, ct_buffer_write(g, 0, d->stage, d->nparams * sizeof(float)),
                          "writing averaged gradients");
        }
    } else {
        for (int k = 0; k < d->nb && st == CT_OK; k++) {
            size_t n = d->bhi[k] - d->blo[k];
            st = dev_fail(d, ct_buffer_read(g, d->blo[k] * sizeof(float), d->stage, n * 4),
                          "staging a gradient bucket");
            if (st == CT_OK)
                st = comm_fail(d, ct_comm_allreduce(d->c, d->stage, d->stage, n, CT_F32,
                                                    CT_OP_AVG, NULL),
                               "gradient all-reduce");
            if (st == CT_OK)
                st = dev_fail(d, ct_buffer_write(g, d->blo[k] * sizeof(float), d->stage, n * 4),
                              "writing averaged gradients");
        }
        d->times.busy_ms += now_ms() - t0;
    }
    d->armed = 0;
    d->next_issue = 0;
    d->times.exposed_ms += now_ms() - t0;
    return st;
}

/* ZeRO: every worker's shard of `b` (which holds flat range [lo, hi) at offset boff) into
 * d->hostflat, gathered. */
static ct_status gather_flat(ct_dp *d, ct_buffer *b, size_t boff) {
    size_t sh = d->hi - d->lo;
    ct_status st = dev_fail(d, ct_buffer_read(b, boff * sizeof(float), d->hostflat + d->lo,
                                              sh * sizeof(float)),
                            "reading a shard");
    if (st == CT_OK)
        st = comm_fail(d, ct_comm_allgather(d->c, d->hostflat + d->lo, d->hostflat, sh, CT_F32,
                                            NULL),
                       "all-gather of shards");
    return st;
}

ct_status ct_dp_step(ct_dp *d, float lr, float beta1, float beta2, float eps, float weight_decay,
                     float grad_clip, int t, float *norm) {
    double t0 = now_ms();
    ct_status st;
    if (d->zero >= 2) {
        st = ct_model_adamw_step_norm(d->m, lr, beta1, beta2, eps, weight_decay, grad_clip, t,
                                      d->norm);
        if (norm) *norm = d->norm;
    } else {
        st = ct_model_adamw_step(d->m, lr, beta1, beta2, eps, weight_decay, grad_clip, t, norm);
    }
    if (st != CT_OK) return CT_ERR(&d->err, st, "%s", ct_model_errmsg(d->m));
    if ((st = dev_fail(d, ct_device_finish(d->dev), "optimizer")) != CT_OK) return st;
    double t1 = now_ms();
    d->times.optimizer_ms += t1 - t0;
    if (d->zero && d->zero < 3) { /* ZeRO-3 keeps the updated shard; gathers on use */
        ct_buffer *p = ct_model_params_buffer(d->m);
        st = gather_flat(d, p, d->lo);
        if (st == CT_OK)
            st = dev_fail(d, ct_buffer_write(p, 0, d->hostflat, d->flat * sizeof(float)),
                          "writing gathered parameters");
        double t2 = now_ms();
        d->times.exposed_ms += t2 - t1;
        d->times.busy_ms += t2 - t1;
    }
    return st;
}

ct_status ct_dp_gather_state(ct_dp *d, float *params, float *adam_m, float *adam_v) {
    ct_status st = CT_OK;
    if (d->zero >= 3) {
        st = gather_flat(d, ct_model_param_shard_buffer(d->m), 0);
        if (st != CT_OK) return st;
        if (params) ct_model_flat_to_table(d->m, d->hostflat, params);
    } else if (params && (st = ct_model_get_params(d->m, params, d->nparams)) != CT_OK) {
        return CT_ERR(&d->err, st, "%s", ct_model_errmsg(d->m));
    }
    if (!d->zero) {
        if ((adam_m || adam_v) &&
            (st = ct_model_get_optimizer(d->m, adam_m, adam_v, d->nparams)) != CT_OK)
            return CT_ERR(&d->err, st, "%s", ct_model_errmsg(d->m));
        return CT_OK;
    }
    /* Both gathers run on every worker whatever it asked for (collective). */
    ct_buffer *bufs[2] = {ct_model_adam_m_buffer(d->m), ct_model_adam_v_buffer(d->m)};
    float *outs[2] = {adam_m, adam_v};
    for (int i = 0; i < 2 && st == CT_OK; i++) {
        st = gather_flat(d, bufs[i], 0);
        if (st == CT_OK && outs[i]) ct_model_flat_to_table(d->m, d->hostflat, outs[i]);
    }
    return st;
}

ct_status ct_dp_average(ct_dp *d, float *v) {
    return comm_fail(d, ct_comm_allreduce(d->c, v, v, 1, CT_F32, CT_OP_AVG, NULL), "average");
}

void ct_dp_times_get(const ct_dp *d, ct_dp_times *out) {
    *out = d->times;
    out->gather_ms = d->gather_ms;
}
void ct_dp_times_reset(ct_dp *d) {
    memset(&d->times, 0, sizeof d->times);
    d->gather_ms = 0;
}

ct_status ct_dp_mem_gather(ct_dp *d, uint64_t *out) {
    ct_mem_stats s;
    ct_device_mem_stats(d->dev, &s);
    int32_t mine[2 * CT_MEM__COUNT];
    for (int c = 0; c < CT_MEM__COUNT; c++) {
        uint64_t v = s.current[c] + (c == CT_MEM_COMM ? ct_dp_comm_bytes(d) : 0);
        mine[2 * c] = (int32_t)(uint32_t)(v & 0xffffffffu);
        mine[2 * c + 1] = (int32_t)(uint32_t)(v >> 32);
    }
    int32_t *all = malloc(sizeof(int32_t) * 2 * CT_MEM__COUNT * (size_t)d->N);
    if (!all) return CT_ERR(&d->err, CT_ERR_NOMEM, "memory report: out of host memory");
    ct_status st = comm_fail(d, ct_comm_allgather(d->c, mine, all, 2 * CT_MEM__COUNT, CT_I32, NULL),
                             "memory report");
    if (st == CT_OK)
        for (int w = 0; w < d->N; w++)
            for (int c = 0; c < CT_MEM__COUNT; c++)
                out[w * CT_MEM__COUNT + c] =
                    (uint64_t)(uint32_t)all[w * 2 * CT_MEM__COUNT + 2 * c] |
                    ((uint64_t)(uint32_t)all[w * 2 * CT_MEM__COUNT + 2 * c + 1] << 32);
    free(all);
    return st;
}
