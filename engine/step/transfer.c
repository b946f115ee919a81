/* transfer.c - pipeline transfers: activations and their gradients between neighbouring
 * stages, through host staging, one buffer per message in flight. A send enqueues the device
 * read behind the compute that made the tensor and returns; the message is posted
 * (ct_comm_isend) as soon as the read has completed: checked after every action without
 * blocking, and waited for before this worker blocks anywhere (a receive, the gradient sync),
 * so a peer never waits on a send this worker has reached (the schedules assume buffered sends:
 * a blocking rendezvous send deadlocks 1F1B). A receive writes its staging to the device
 * without waiting; the buffer is reused once that write has completed. Sends are completed at
 * the end of the step. A bf16 model's views are bf16: its messages are half fp32's bytes, and
 * every byte sent is counted (ct_exec_bytes.pp). */
#include "exec_impl.h"

/* A free staging buffer of at least `bytes` (grown if none is). */
static ct_status xfer_take(ct_exec *x, size_t bytes, int *out) {
    size_t n = (bytes + sizeof(float) - 1) / sizeof(float);
    int k = -1;
    for (int i = 0; i < x->nxf; i++)
        if (x->xf[i].state == X_FREE) {
            k = i;
            if (x->xf[i].cap >= n) break;
        }
    if (k < 0) {
        xfer *a = ct_realloc(x->xf, sizeof *a * (size_t)(x->nxf + 1));
        if (!a) return CT_ERR(&x->err, CT_ERR_NOMEM, "executor: no memory for pipeline staging");
        x->xf = a;
        k = x->nxf++;
        memset(&x->xf[k], 0, sizeof x->xf[k]);
    }
    xfer *f = &x->xf[k];
    if (f->cap < n) {
        float *p = ct_realloc(f->p, n * sizeof(float));
        if (!p) return CT_ERR(&x->err, CT_ERR_NOMEM, "executor: no memory to stage an activation");
        f->p = p, f->cap = n;
    }
    *out = k;
    return CT_OK;
}

static ct_status pp_err(ct_exec *x, ct_status st, const char *what, int peer) {
    return CT_ERR(&x->err, st, "pipeline %s with stage %d: %s", what, peer, ct_comm_errmsg(x->pp));
}

/* Progress without blocking (block = 0), or post every send this worker has reached, waiting
 * for their device reads (block = 1: before it blocks anywhere else). Sends are posted in the
 * order they were made: the channel to a peer is ordered. Completed sends and writes free their
 * staging. */
ct_status ct__xfer_pump(ct_exec *x, int block) {
    ct_status st = CT_OK;
    for (;;) {
        int k = -1;
        for (int i = 0; i < x->nxf; i++)
            if (x->xf[i].state == X_READING && (k < 0 || x->xf[i].seq < x->xf[k].seq)) k = i;
        if (k < 0) break;
        xfer *f = &x->xf[k];
        int done = 1;
        if (!block && (st = ct_event_query(f->ev, &done)) != CT_OK) return dev_err(x, st);
        if (!done) break;
        st = ct_event_wait_release(f->ev);
        f->ev = NULL;
        if (st != CT_OK) return dev_err(x, st);
        if ((st = ct_comm_isend(x->pp, f->peer, f->p, f->bytes, &f->req)) != CT_OK)
            return pp_err(x, st, "send", f->peer);
        f->state = X_SENT;
    }
    for (int i = 0; i < x->nxf; i++) {
        xfer *f = &x->xf[i];
        int done = 0;
        if (f->state == X_SENT) {
            if ((st = ct_comm_test(f->req, &done)) != CT_OK) return pp_err(x, st, "send", f->peer);
            if (done) {
                st = ct_comm_wait(f->req);
                f->req = NULL, f->state = X_FREE;
                if (st != CT_OK) return pp_err(x, st, "send", f->peer);
            }
        } else if (f->state == X_WRITING) {
            if ((st = ct_event_query(f->ev, &done)) != CT_OK) return dev_err(x, st);
            if (done) {
                st = ct_event_wait_release(f->ev);
                f->ev = NULL, f->state = X_FREE;
                if (st != CT_OK) return dev_err(x, st);
            }
        }
    }
    return CT_OK;
}

/* Every transfer complete (the end of a step, or before freeing the staging). */
ct_status ct__xfer_drain(ct_exec *x) {
    ct_status st = ct__xfer_pump(x, 1);
    for (int i = 0; i < x->nxf; i++) {
        xfer *f = &x->xf[i];
        ct_status s2 = CT_OK;
        if (f->state == X_SENT) {
            if ((s2 = ct_comm_wait(f->req)) != CT_OK) pp_err(x, s2, "send", f->peer);
            f->req = NULL;
        } else if (f->state == X_WRITING || f->state == X_READING) {
            if ((s2 = ct_event_wait_release(f->ev)) != CT_OK) dev_err(x, s2);
            f->ev = NULL;
        }
        f->state = X_FREE;
        if (st == CT_OK) st = s2;
    }
    return st;
}

/* A send: the device read enqueued behind the compute that made the tensor; posted later. */
ct_status ct__xfer_send(ct_exec *x, ct_view v, size_t n, int peer) {
    int k;
    size_t bytes = n * ct_view_elem_bytes(v);
    ct_status st = xfer_take(x, bytes, &k);
    if (st != CT_OK) return st;
    xfer *f = &x->xf[k];
    f->bytes = bytes, f->peer = peer, f->seq = x->xseq++;
    x->pp_bytes += bytes;
    if ((st = ct_model_view_read_async(x->m, v, f->p, f->bytes, &f->ev)) != CT_OK)
        return fail_model(x, st);
    f->state = X_READING;
    if ((st = ct_device_flush(x->dev)) != CT_OK) return dev_err(x, st);
    return ct__xfer_pump(x, x->timeline); /* timeline: posted now, so the send's time is its own */
}

/* A receive: every send reached is posted first (this worker is about to block); the message's
 * write to the device is enqueued and not waited for. *arrived: when the message was in. */
ct_status ct__xfer_recv(ct_exec *x, ct_view v, size_t n, int peer, double *arrived) {
    ct_status st;
    int k;
    ct_request *r = NULL;
    size_t bytes = n * ct_view_elem_bytes(v);
    if ((st = ct__xfer_pump(x, 1)) != CT_OK || (st = xfer_take(x, bytes, &k)) != CT_OK) return st;
    xfer *f = &x->xf[k];
    if ((st = ct_comm_irecv(x->pp, peer, f->p, bytes, &r)) != CT_OK ||
        (st = ct_comm_wait(r)) != CT_OK)
        return pp_err(x, st, "receive", peer);
    *arrived = ct_time_now();
    if ((st = ct_model_view_write_async(x->m, v, f->p, bytes, &f->ev)) != CT_OK)
        return fail_model(x, st);
    f->state = X_WRITING;
    if ((st = ct_device_flush(x->dev)) != CT_OK) return dev_err(x, st);
    return CT_OK;
}

/* A SEND_/RECV_ action: an activation (or its gradient) between neighbouring stages. */
ct_status ct__exec_transfer(ct_exec *x, const ct_action *a, int slot, int rows, int T,
                            double *arrived) {
    ct_status st;
    size_t n = ct_model_act_floats(x->m, rows, T); /* sequence parallelism: this worker's rows */
    int N = x->nstages, lo, hi;
    ct_view v;
    *arrived = 0;
    switch (a->kind) {
    case CT_ACT_RECV_ACT:
        if ((st = ct_model_stage_input(x->m, slot, local_chunk(x, a->chunk), rows, T, &v)) != CT_OK)
            return fail_model(x, st);
        return ct__xfer_recv(x, v, n, (a->chunk - 1) % N, arrived);
    case CT_ACT_SEND_ACT:
        ct_params_chunk(x->P, local_chunk(x, a->chunk), &lo, &hi);
        if ((st = ct_model_block_output(x->m, slot, hi - 1, &v)) != CT_OK) return fail_model(x, st);
        return ct__xfer_send(x, v, n, (a->chunk + 1) % N);
    case CT_ACT_RECV_GRAD: return ct__xfer_recv(x, ct_model_dres(x->m), n, (a->chunk + 1) % N, arrived);
    default: return ct__xfer_send(x, ct_model_dres(x->m), n, (a->chunk - 1) % N); /* SEND_GRAD */
    }
}


void ct__xfer_free(ct_exec *x) {
    /* nothing may still read or write the staging; after a failed step a posted send's receiver
     * may be gone, so its staging is left to the process rather than waited for */
    for (int i = 0; i < x->nxf; i++) {
        xfer *f = &x->xf[i];
        if (f->state == X_SENT && x->failed) continue;
        if (f->state == X_SENT) ct_comm_wait(f->req);
        ct_event_wait_release(f->ev);
        free(f->p);
    }
    free(x->xf);
}
