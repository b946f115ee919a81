/* ckpt.c - a worker's checkpoints. Saving, in one of two forms (--save-format):
 *   gathered  every element summed to the leader (ct_exec_gather_state), which writes one file;
 *   sharded   every worker writes the table ranges it owns (ct_state_runs, owned: each element
 *             of the model exactly once over the layout) to its own shard, in parallel; then the
 *             shards' sizes, CRCs and ranges go to the leader (a second handle on the world, so
 *             a background save never shares a channel with training), which writes the
 *             manifest and only then DIR/latest: a checkpoint is visible once every shard and the
 *             manifest are on disk and fsynced.
 * either synchronously or (--save-async) with the host copy at the step boundary and the rest on
 * a thread while training goes on; the next save, the end of the run and freeing the trainer wait
 * for the one in flight. Every worker takes part in every exchange even after its own failure
 * (which the leader then reports), so a failed save never leaves a worker waiting: every decision
 * a collective depends on (whether every worker has its shard ready, whether every shard was
 * written, whether the leader has room for the notes) is agreed before that collective. Only a
 * failure inside a collective itself (its comm's memory, a timeout) is this worker's alone: it
 * returns it itself, since the others cannot know (its program then ends the job). Resuming: a
 * gathered file is read whole by each process (config.c) and set; from a sharded one each worker
 * reads only the runs it stores (ct_state_runs, stored) from the shards that hold them. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_train_test.h"
#include "train_impl.h"

/* What each worker tells the others after writing its shard (allgathered as int32s). */
typedef struct shard_note {
    int32_t status;
    uint32_t nchunks;
    uint64_t nranges;
    uint64_t bytes;
    uint32_t crc;
    uint32_t zero;
    char msg[256];
} shard_note;

struct ct__save {
    int sharded, leader, wrank, W, keep_last;
    char dir[1024];
    ct_comm *comm;     /* the trainer's save handle on the world (NULL: one worker) */
    ct_checkpoint ck;  /* the head; the gathered arrays on the leader */
    int32_t layout[5]; /* dp tp pp zero ep */
    float *payload;    /* sharded: the values this worker owns, range after range */
    size_t n;
    ct_shard_range *ranges;
    size_t nr, rcap;
    ct_status prep; /* the host copy failed: reported through the exchange */
    char prep_msg[256];
    shard_note *all;      /* [W] every worker's note (allocated before anything can fail) */
    ct_shard_desc *descs; /* [W] (the leader) */
    pthread_t th;
    int threaded;
    ct_status st;
    int own; /* st is this worker's alone (a collective failed here): it reports it itself */
    ct_err err;
    char path[1300];
    double t0, t1; /* the background part's start and end */
    void (*hook)(void *user, int point, int64_t step); /* a test's (ct_engine_train_test.h) */
    void *hook_user;
};

static void save_free(ct__save *s) {
    if (!s) return;
    ct_checkpoint_release(&s->ck);
    free(s->all);
    free(s->descs);
    free(s->payload);
    free(s->ranges);
    free(s);
}

/* ---------------------------------------------------------------- the host copy (step boundary) */

typedef struct pack_ctx {
    ct__save *s;
    const float *flat; /* NULL: count only */
    uint32_t array;
} pack_ctx;

static int pack_run(void *user, size_t toff, size_t foff, size_t n) {
    pack_ctx *c = (pack_ctx *)user;
    ct__save *s = c->s;
    if (c->flat) {
        ct_shard_range *last = s->nr ? &s->ranges[s->nr - 1] : NULL;
        if (last && last->array == c->array && last->table_off + last->count == toff &&
            last->shard_off + last->count == s->n) {
            last->count += n;
        } else {
            if (s->nr == s->rcap) {
                size_t cap = s->rcap ? 2 * s->rcap : 256;
                ct_shard_range *r = (ct_shard_range *)ct_realloc(s->ranges, cap * sizeof *r);
                if (!r) return 1;
                s->ranges = r, s->rcap = cap;
            }
            s->ranges[s->nr++] = (ct_shard_range){(uint32_t)s->wrank, c->array, toff, n, s->n};
        }
        memcpy(s->payload + s->n, c->flat + foff, n * sizeof(float));
    }
    s->n += n;
    return 0;
}

/* This worker's owned values of the three arrays into s->payload, with their ranges. */
static ct_status pack_owned(ct_trainer *t, ct__save *s) {
    ct_model *m = t->model;
    size_t flen = ct_params_flat_len(ct_model_params(m));
    pack_ctx pc = {s, NULL, 0};
    for (int a = 0; a < 3; a++)
        ct_state_runs(m, a, 1, pack_run, &pc);
    size_t total = s->n;
    s->n = 0;
    float *flat = ct_malloc((flen ? flen : 1) * sizeof(float));
    s->payload = ct_malloc((total ? total : 1) * sizeof(float));
    ct_status st = CT_OK;
    if (!flat || !s->payload)
        st = CT_ERR(&s->err, CT_ERR_NOMEM, "no host memory for its checkpoint shard (%zu floats)",
                    total);
    for (int a = 0; a < 3 && st == CT_OK; a++) {
        st = ct_state_read_flat(m, a, flat, &s->err);
        pc.flat = flat, pc.array = (uint32_t)a;
        if (st == CT_OK && ct_state_runs(m, a, 1, pack_run, &pc) != 0)
            st = CT_ERR(&s->err, CT_ERR_NOMEM, "no host memory for its checkpoint ranges");
    }
    free(flat);
    return st;
}

/* ---------------------------------------------------------------- the write (thread or inline) */

static void run_gathered(ct__save *s) {
    s->st = ct_checkpoint_save_dir(s->dir, &s->ck, s->path, sizeof s->path, &s->err);
}

/* Before any shard is written, every worker says whether it could prepare its own (host memory for
 * the copy and the notes): two all-reduces of one int, which need no memory, so a worker that has
 * none still takes part. 0: every worker is ready; else the first worker that is not. */
static int prep_agree(ct_comm *c, int wrank, int failed, ct_status *st) {
    int32_t v[2] = {failed ? 1 : 0, failed ? -wrank : -0x7fffffff}; /* max of -rank: the first */
    *st = CT_OK;
    if (!c) return failed ? wrank + 1 : 0;
    if ((*st = ct_comm_allreduce(c, v, v, 2, CT_I32, CT_OP_MAX, NULL)) == CT_OK)
        return v[0] ? -v[1] + 1 : 0;
    return 0;
}

/* Every worker: its shard, then the exchange; the leader: the manifest and DIR/latest. */
static void run_sharded(ct__save *s) {
    ct_err e = {0};
    ct_shard_desc d;
    memset(&d, 0, sizeof d);
    shard_note mine, *all = s->all;
    ct_shard_desc *descs = s->descs;
    ct_shard_range *ranges = NULL;
    memset(&mine, 0, sizeof mine);
    char sp[1400];
    ct_checkpoint_name(s->path, sizeof s->path, s->dir, s->ck.step);
    ct_shard_path(sp, sizeof sp, s->path, s->wrank);
    ct_status st = s->prep, as;
    int first = prep_agree(s->comm, s->wrank, st != CT_OK, &as);
    if (as != CT_OK) {
        s->st = CT_ERR(&s->err, as, "checkpoint of step %lld: %s", (long long)s->ck.step,
                       ct_comm_errmsg(s->comm));
        s->own = 1;
        goto done;
    }
    if (first) { /* nothing written: the save fails alike on every worker */
        s->st = st != CT_OK ? CT_ERR(&s->err, st, "%s", s->prep_msg)
                            : CT_ERR(&s->err, CT_ERR_NOMEM,
                                     "checkpoint of step %lld not written: worker %d could not "
                                     "prepare its shard (host memory)",
                                     (long long)s->ck.step, first - 1);
        goto done;
    }
    if (st == CT_OK) st = ct_file_mkdirs(s->dir, &e);
    if (st == CT_OK) st = ct_shard_write(sp, s->wrank, s->ck.step, s->payload, s->n, &d, &e);
    if (st == CT_OK && s->hook) s->hook(s->hook_user, CT_SAVE_AT_SHARD, s->ck.step);
    mine.status = (int32_t)st;
    mine.nchunks = d.nchunks;
    mine.nranges = s->nr;
    mine.bytes = d.bytes;
    mine.crc = d.crc;
    snprintf(mine.msg, sizeof mine.msg, "%.255s", st == CT_OK ? "" : e.msg);
    /* 1. Everybody's note (every worker knows whether the set is complete). */
    if (s->comm) {
        st = ct_comm_allgather(s->comm, &mine, all, sizeof mine / 4, CT_I32, NULL);
        if (st != CT_OK) {
            s->st = CT_ERR(&s->err, st, "checkpoint of step %lld: exchanging the shards' notes: %s",
                           (long long)s->ck.step, ct_comm_errmsg(s->comm));
            s->own = 1;
            goto done;
        }
    } else {
        all[0] = mine;
    }
    int bad = -1;
    size_t total = 0;
    for (int w = 0; w < s->W; w++) {
        if (all[w].status != CT_OK && bad < 0) bad = w;
        total += all[w].nranges;
    }
    /* 2. The leader makes room for every worker's chunk CRCs and ranges and says whether it
     * could; only then are they sent (a message nobody receives would wait for the next save's
     * receive and be read as its notes). */
    int room = 1;
    if (bad < 0 && s->leader) {
        ranges = ct_malloc((total ? total : 1) * sizeof *ranges);
        room = ranges != NULL;
        for (int w = 1; w < s->W && room; w++)
            room = (descs[w].chunk_crc = ct_malloc(
                        (all[w].nchunks ? all[w].nchunks : 1) * sizeof(uint32_t))) != NULL;
        if (!room)
            st = CT_ERR(&s->err, CT_ERR_NOMEM,
                        "checkpoint of step %lld: no host memory for the manifest",
                        (long long)s->ck.step);
    }
    if (bad < 0 && s->comm) {
        int32_t r = room;
        ct_status bs = ct_comm_bcast(s->comm, &r, 1, CT_I32, 0, NULL);
        if (bs != CT_OK) {
            s->st = CT_ERR(&s->err, bs, "checkpoint of step %lld: %s", (long long)s->ck.step,
                           ct_comm_errmsg(s->comm));
            s->own = 1;
            goto done;
        }
        room = r;
    }
    if (bad < 0 && room && !s->leader) {
        if (d.nchunks) st = ct_comm_send(s->comm, 0, d.chunk_crc, d.nchunks * sizeof(uint32_t));
        if (st == CT_OK && s->nr)
            st = ct_comm_send(s->comm, 0, s->ranges, s->nr * sizeof(ct_shard_range));
        if (st != CT_OK) {
            s->st = CT_ERR(&s->err, st, "checkpoint: sending the shard's notes: %s",
                           ct_comm_errmsg(s->comm));
            s->own = 1;
            goto done;
        }
    }
    if (bad < 0 && s->leader) {
        size_t at = 0;
        for (int w = 0; w < s->W && room; w++) {
            descs[w].bytes = all[w].bytes;
            descs[w].crc = all[w].crc;
            descs[w].nchunks = all[w].nchunks;
            if (w == 0) {
                descs[0].chunk_crc = d.chunk_crc;
                if (s->nr) memcpy(ranges, s->ranges, s->nr * sizeof *ranges);
                at += s->nr;
                continue;
            }
            ct_status rs = CT_OK;
            if (all[w].nchunks)
                rs = ct_comm_recv(s->comm, w, descs[w].chunk_crc,
                                  all[w].nchunks * sizeof(uint32_t));
            if (rs == CT_OK && all[w].nranges)
                rs = ct_comm_recv(s->comm, w, ranges + at, all[w].nranges * sizeof *ranges);
            at += all[w].nranges;
            if (rs != CT_OK && st == CT_OK)
                st = CT_ERR(&s->err, rs, "checkpoint: the notes of worker %d: %s", w,
                            ct_comm_errmsg(s->comm));
        }
        /* 3. The manifest (after every shard is on disk), then DIR/latest; then pruning. */
        if (st == CT_OK && s->hook) s->hook(s->hook_user, CT_SAVE_AT_MANIFEST, s->ck.step);
        if (st == CT_OK)
            st = ct_checkpoint_save_sharded(s->dir, &s->ck, s->layout, s->W, descs, ranges, total,
                                            s->path, sizeof s->path, &s->err);
        if (st == CT_OK && s->keep_last > 0) {
            st = ct_checkpoint_prune(s->dir, s->keep_last, NULL, &e);
            if (st != CT_OK)
                CT_ERR(&s->err, st,
                       "the checkpoint was written, but --keep-last %d could not "
                       "remove the older ones: %s",
                       s->keep_last, e.msg);
        }
        s->st = st;
    } else if (bad >= 0 && s->leader) {
        s->st = CT_ERR(&s->err, (ct_status)all[bad].status,
                       "the checkpoint of step %lld is incomplete, so not made the latest: worker "
                       "%d could not write its shard: %s",
                       (long long)s->ck.step, bad, all[bad].msg);
    }
    /* 4. Everybody waits for the leader's end: the next save's shards are never written while
     * this one's manifest or pruning is under way. */
    if (s->comm) {
        int32_t fin = (int32_t)s->st;
        ct_status bs = ct_comm_bcast(s->comm, &fin, 1, CT_I32, 0, NULL);
        if (bs != CT_OK && s->st == CT_OK) {
            s->st = CT_ERR(&s->err, bs, "checkpoint: %s", ct_comm_errmsg(s->comm));
            s->own = 1;
        } else if (fin != CT_OK && s->st == CT_OK) /* every worker ends the save alike */
            s->st = CT_ERR(&s->err, (ct_status)fin,
                           "checkpoint of step %lld not made the latest (worker 0 says why)",
                           (long long)s->ck.step);
    }
done:
    for (int w = 1; w < s->W; w++)
        free(descs[w].chunk_crc);
    ct_shard_desc_release(&d);
    free(ranges);
}

static void *save_main(void *arg) {
    ct__save *s = (ct__save *)arg;
    s->t0 = ct_time_now();
    if (s->sharded)
        run_sharded(s);
    else if (s->leader)
        run_gathered(s);
    if (!s->sharded && s->leader && s->st == CT_OK && s->keep_last > 0) {
        ct_err e = {0};
        s->st = ct_checkpoint_prune(s->dir, s->keep_last, NULL, &e);
        if (s->st != CT_OK)
            CT_ERR(&s->err, s->st,
                   "the checkpoint was written, but --keep-last %d could not "
                   "remove the older ones: %s",
                   s->keep_last, e.msg);
    }
    s->t1 = ct_time_now();
    return NULL;
}

/* ---------------------------------------------------------------- the trainer's calls */

/* --save-format auto (the default): sharded with more than one worker on one host; gathered
 * with one worker (its shard would be the whole model, and one self-contained file is what
 * tools and scripts read most simply) and across hosts (a sharded checkpoint needs a directory
 * every host shares, which nothing here can know: --save-format sharded says so, and the leader
 * then checks that it sees every shard before writing the manifest). */
int ct__trainer_save_sharded(const ct_trainer *t) {
    const char *f = t->p.save_format;
    if (!strcmp(f, "sharded")) return 1;
    return !strcmp(f, "auto") && t->W > 1 && (!t->r->topo || ct_topo_nnodes(t->r->topo) <= 1);
}

const char *ct_trainer_save_form(const ct_trainer *t) {
    return ct__trainer_save_sharded(t) ? "sharded" : "gathered";
}

ct_status ct_trainer_save_wait(ct_trainer *t, char *path, size_t len, double *seconds) {
    if (path && len) path[0] = 0;
    if (seconds) *seconds = 0;
    ct__save *s = t->save;
    if (!s) return CT_OK;
    if (s->threaded) pthread_join(s->th, NULL);
    t->save = NULL;
    /* the leader reports what every worker knows; a worker what only it knows */
    ct_status st = t->leader || s->own ? s->st : CT_OK;
    if (st != CT_OK) CT_ERR(&t->err, st, "%s", s->err.msg);
    if (path && len) snprintf(path, len, "%s", s->path);
    if (seconds) *seconds = s->t1 - s->t0;
    save_free(s);
    return st;
}

ct_status ct_trainer_save(ct_trainer *t, char *path, size_t len) {
    const ct_train_params *p = &t->p;
    ct_train_run *r = t->r;
    ct_status st = ct_trainer_save_wait(t, NULL, 0, NULL); /* the one before, if in flight */
    if (st != CT_OK) return st;
    int sharded = ct__trainer_save_sharded(t);
    if (sharded && t->world && t->W > 1 && !t->save_comm &&
        (st = ct_comm_split(t->world, 0, t->wrank, &t->save_comm)) != CT_OK)
        return CT_ERR(&t->err, st, "checkpoint: a second handle on the world: %s",
                      ct_comm_errmsg(t->world));
    ct__save *s = ct_calloc(1, sizeof *s);
    if (!s) { /* sharded: the others are told, and the leader reports it for everybody */
        if (sharded && prep_agree(t->save_comm, t->wrank, 1, &st) && st == CT_OK && !t->leader)
            return CT_OK;
        return CT_ERR(&t->err, CT_ERR_NOMEM, "no memory for a checkpoint");
    }
    s->sharded = sharded, s->leader = t->leader, s->wrank = t->wrank, s->W = t->W;
    s->keep_last = p->keep_last;
    s->comm = t->save_comm;
    s->hook = t->save_hook, s->hook_user = t->save_hook_user;
    snprintf(s->dir, sizeof s->dir, "%s", p->save);
    int32_t lay[5] = {p->dp, p->tp, p->pp, p->zero, p->ep};
    memcpy(s->layout, lay, sizeof lay);
    ct_checkpoint *ck = &s->ck;
    ck->cfg = r->src.cfg;
    ck->nparams = ct_model_num_params(t->model);
    ck->step = t->step;
    memcpy(ck->rng, t->rng.s, sizeof ck->rng);
    ck->loader_B = p->batch;
    ck->loader_T = p->seq;
    ck->loader_accum = r->pipe.accum;
    ck->loader_shuffle = p->shuffle;
    ck->loader_seed = (uint64_t)p->seed;
    ck->data_tokens = ct_data_count(r->train);
    if (t->leader) {
        size_t need = ct_opts_format(NULL, 0, ct_train_opts, ct_train_opts_count, p);
        ck->meta = ct_malloc(need + 1);
        if (ck->meta) ct_opts_format(ck->meta, need + 1, ct_train_opts, ct_train_opts_count, p);
    }
    /* 1. The copy to the host, here at the step boundary. A worker without memory for it (or for
     * the notes) takes part in the first agreement only, which ends the save on every worker. */
    if (sharded) {
        s->all = ct_calloc((size_t)s->W, sizeof *s->all);
        s->descs = ct_calloc((size_t)s->W, sizeof *s->descs);
        if (!s->all || !s->descs) { /* as above */
            save_free(s);
            if (prep_agree(t->save_comm, t->wrank, 1, &st) && st == CT_OK && !t->leader)
                return CT_OK;
            return CT_ERR(&t->err, CT_ERR_NOMEM, "no memory for a checkpoint");
        }
        s->prep = pack_owned(t, s);
        if (s->prep == CT_OK && t->leader && !ck->meta)
            s->prep = CT_ERR(&s->err, CT_ERR_NOMEM, "no memory for a checkpoint");
        if (s->prep != CT_OK) snprintf(s->prep_msg, sizeof s->prep_msg, "%.255s", s->err.msg);
    } else {
        if (t->leader) {
            ck->params = ct_malloc(ck->nparams * 4);
            ck->m = ct_malloc(ck->nparams * 4);
            ck->v = ct_malloc(ck->nparams * 4);
        }
        /* collective: every worker takes part even if the leader is out of memory, then fails */
        st = ct_exec_gather_state(t->x, ck->params, ck->m, ck->v);
        if (st != CT_OK)
            st = CT_ERR(&t->err, st, "gathering the model for a checkpoint failed: %s",
                        ct_exec_errmsg(t->x));
        if (st == CT_OK && t->leader && (!ck->params || !ck->m || !ck->v || !ck->meta))
            st = CT_ERR(&t->err, CT_ERR_NOMEM, "no memory for a checkpoint");
        if (st != CT_OK) {
            save_free(s);
            return st;
        }
    }
    ct_checkpoint_name(s->path, sizeof s->path, s->dir, ck->step);
    if (path && len) snprintf(path, len, "%s", s->path);
    /* 2. The write: on a thread (--save-async), else here. A thread that cannot start leaves the
     * write here: every worker must reach the exchange, so there is no refusing instead. */
    t->save = s;
    if (p->save_async && pthread_create(&s->th, NULL, save_main, s) == 0) {
        s->threaded = 1;
        return CT_OK;
    }
    save_main(s);
    return ct_trainer_save_wait(t, path, len, NULL);
}

/* ---------------------------------------------------------------- resuming */

typedef struct runs_ctx {
    uint64_t *v; /* (table offset, count) pairs */
    size_t n, cap;
} runs_ctx;

static int add_run(void *user, size_t toff, size_t foff, size_t n) {
    (void)foff;
    runs_ctx *c = (runs_ctx *)user;
    if (c->n && c->v[2 * c->n - 2] + c->v[2 * c->n - 1] == toff) {
        c->v[2 * c->n - 1] += n;
        return 0;
    }
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 256;
        uint64_t *v = (uint64_t *)ct_realloc(c->v, 2 * cap * sizeof *v);
        if (!v) return 1;
        c->v = v, c->cap = cap;
    }
    c->v[2 * c->n] = toff, c->v[2 * c->n + 1] = n;
    c->n++;
    return 0;
}

/* A sharded checkpoint: each array's runs this worker stores, read from the shards holding
 * them into a whole-model table (calloc'd: pages no run touches are never backed), then set. */
static ct_status resume_sharded(ct_trainer *t, size_t np, ct_err *err) {
    const ct_shard_set *set = t->r->src.shards;
    float *table = ct_calloc(np ? np : 1, sizeof(float));
    runs_ctx rc = {NULL, 0, 0};
    ct_status st =
        table ? CT_OK
              : CT_ERR(err, CT_ERR_NOMEM, "no host memory to resume from %s", t->r->src.ckpath);
    for (int a = 0; a < 3 && st == CT_OK; a++) {
        rc.n = 0;
        if (ct_state_runs(t->model, a, 0, add_run, &rc) != 0) {
            st = CT_ERR(err, CT_ERR_NOMEM, "no host memory to resume from %s", t->r->src.ckpath);
            break;
        }
        if ((st = ct_shards_read_runs(set, a, rc.v, rc.n, table, err)) != CT_OK) break;
        st = a == 0   ? ct_model_set_params(t->model, table, np)
             : a == 1 ? ct_model_set_optimizer(t->model, table, NULL, np)
                      : ct_model_set_optimizer(t->model, NULL, table, np);
        if (st != CT_OK)
            CT_ERR(err, st, "loading the checkpoint into the model failed: %s",
                   ct_model_errmsg(t->model));
    }
    free(rc.v);
    free(table);
    return st;
}

ct_status ct__trainer_resume(ct_trainer *t, ct_err *err) {
    ct_train_run *r = t->r;
    size_t np = ct_model_num_params(t->model);
    ct_status st;
    if (r->src.ck.nparams != np)
        return CT_ERR(err, CT_ERR_ARG, "checkpoint %s holds %zu parameters, the model %zu",
                      r->src.ckpath, r->src.ck.nparams, np);
    if (r->src.shards) {
        if ((st = resume_sharded(t, np, err)) != CT_OK) return st;
    } else if ((st = ct_model_set_params(t->model, r->src.ck.params, np)) != CT_OK ||
               (st = ct_model_set_optimizer(t->model, r->src.ck.m, r->src.ck.v, np)) != CT_OK) {
        return CT_ERR(err, st, "loading the checkpoint into the model failed: %s",
                      ct_model_errmsg(t->model));
    }
    t->start = r->src.ck.step;
    memcpy(t->rng.s, r->src.ck.rng, sizeof t->rng.s);
    /* bf16: the working copy as the uninterrupted run made it after step ck.step */
    if ((st = ct_model_refresh_working_at(t->model, (uint64_t)r->src.ck.step)) != CT_OK)
        return CT_ERR(err, st, "resuming: the bf16 working copy: %s", ct_model_errmsg(t->model));
    return CT_OK;
}

void ct_trainer_test_save_hook(ct_trainer *t, void (*fn)(void *user, int point, int64_t step),
                               void *user) {
    t->save_hook = fn, t->save_hook_user = user;
}

void ct__trainer_save_end(ct_trainer *t) {
    if (t->save) ct_trainer_save_wait(t, NULL, 0, NULL);
    ct_comm_free(t->save_comm);
    t->save_comm = NULL;
}
