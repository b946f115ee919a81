/* attn_tune.c - which attention path a model runs, and the fused kernels' block shapes per device.
 *
 * Block shapes (ct_attn_tune) are measured once per (device, driver, head size), as CLBlast's
 * GEMM parameters are: a small list of candidates suited to the device type is timed at a fixed
 * representative shape (T = 1024, B*NH = 2 per compute unit, clamped to 4..128), the fastest
 * forward and the fastest backward kept, and stored as a tuning record beside the device's
 * CLBlast set (<tune_dir>/<device>__<driver>.attention.txt, entry attention_hs<HS>), so later runs
 * read it instead of measuring. The path (ct_attn_select) is asked for, or with "auto" the faster
 * of the two measured at the model's own sequence length and heads at start. Timings are the best
 * of a few runs after a warm-up (the warm-up also compiles). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_engine_ops.h"

#define KIND "attention"

const char *ct_attn_path_name(ct_attn_path p) {
    return p == CT_ATTN_GEMM ? "gemm" : p == CT_ATTN_FUSED ? "fused" : p == CT_ATTN_AUTO ? "auto" : "?";
}

ct_status ct_attn_path_parse(const char *s, ct_attn_path *out) {
    static const ct_attn_path all[] = {CT_ATTN_GEMM, CT_ATTN_FUSED, CT_ATTN_AUTO};
    for (int i = 0; i < 3; i++)
        if (s && !strcmp(s, ct_attn_path_name(all[i]))) {
            *out = all[i];
            return CT_OK;
        }
    return CT_ERR_ARG;
}

/* ------------------------------------------------------------------ timing */

typedef struct attn_bufs {
    ct_buffer *inp, *out, *dout, *dinp, *lse, *dsum;     /* both paths */
    ct_buffer *qkvr, *att, *vacc, *dqkvr, *datt, *dvacc; /* the GEMM path */
} attn_bufs;

static void bufs_free(attn_bufs *b) {
    ct_buffer **p = (ct_buffer **)b;
    for (size_t i = 0; i < sizeof *b / sizeof *p; i++) ct_buffer_free(p[i]);
    memset(b, 0, sizeof *b);
}

static ct_view bv(ct_buffer *b) { return ct_view_of(ct_buffer_mem(b), 0); }

static ct_status bufs_alloc(ct_device *dev, attn_bufs *b, int gemm, int B, int T, int C, int NH) {
    size_t BTC = (size_t)B * T * C, BNT = (size_t)B * NH * T, A = (size_t)B * NH * T * T;
    ct_status st;
    memset(b, 0, sizeof *b);
#define ALLOC(f, n)                                                                                \
    if ((st = ct_buffer_alloc(dev, CT_MEM_WORKSPACE, "attention timing", (n) * sizeof(float),      \
                              &b->f)) != CT_OK)                                                    \
        goto fail;
    ALLOC(inp, 3 * BTC) ALLOC(out, BTC) ALLOC(dout, BTC) ALLOC(dinp, 3 * BTC) ALLOC(lse, BNT)
    ALLOC(dsum, BNT)
    if (gemm) {
        ALLOC(qkvr, 3 * BTC) ALLOC(att, A) ALLOC(vacc, BTC) ALLOC(dqkvr, 3 * BTC)
        ALLOC(datt, A) ALLOC(dvacc, BTC)
    }
#undef ALLOC
    /* inputs of a few units: softmax rows neither flat nor one-hot */
    float *h = ct_malloc(3 * BTC * sizeof(float));
    if (!h) {
        st = CT_ERR(ct_device_err(dev), CT_ERR_NOMEM, "attention timing: out of host memory");
        goto fail;
    }
    uint64_t s = 0x2545F4914F6CDD1Dull;
    for (size_t i = 0; i < 3 * BTC; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        h[i] = (float)((double)(s >> 11) * 0x1.0p-53 * 3.0 - 1.5);
    }
    st = ct_buffer_write(b->inp, 0, h, 3 * BTC * sizeof(float));
    if (st == CT_OK) st = ct_buffer_write(b->dout, 0, h, BTC * sizeof(float));
    free(h);
    if (st == CT_OK) return CT_OK;
fail:
    bufs_free(b);
    return st;
}

static ct_status run_fwd(ct_device *dev, attn_bufs *b, ct_attn_path path, const ct_attn_cfg *cfg,
                         int B, int T, int C, int NH) {
    if (path == CT_ATTN_FUSED)
        return ct_attention_fused_forward(dev, cfg, bv(b->out), bv(b->lse), bv(b->inp), B, T, C, NH);
    return ct_attention_forward(dev, bv(b->out), bv(b->qkvr), bv(b->att), bv(b->inp), bv(b->vacc),
                                B, T, C, NH);
}

static ct_status run_bwd(ct_device *dev, attn_bufs *b, ct_attn_path path, const ct_attn_cfg *cfg,
                         int B, int T, int C, int NH) {
    if (path == CT_ATTN_FUSED)
        return ct_attention_fused_backward(dev, cfg, bv(b->dinp), bv(b->dsum), bv(b->dout),
                                           bv(b->inp), bv(b->out), bv(b->lse), B, T, C, NH);
    return ct_attention_backward(dev, bv(b->dinp), bv(b->dqkvr), bv(b->datt), bv(b->dvacc),
                                 bv(b->dout), bv(b->qkvr), bv(b->att), B, T, C, NH);
}

/* Best seconds of `reps` runs after one warm-up (fwd; or bwd, after a forward for its inputs). */
static ct_status best_of(ct_device *dev, attn_bufs *b, ct_attn_path path, const ct_attn_cfg *cfg,
                         int backward, int B, int T, int C, int NH, int reps, double *best) {
    ct_status st = CT_OK;
    *best = INFINITY;
    if (backward && ((st = run_fwd(dev, b, path, cfg, B, T, C, NH)) != CT_OK ||
                     (st = ct_device_finish(dev)) != CT_OK))
        return st;
    for (int r = 0; r <= reps; r++) {
        double t0 = ct_time_now();
        st = backward ? run_bwd(dev, b, path, cfg, B, T, C, NH) : run_fwd(dev, b, path, cfg, B, T, C, NH);
        if (st == CT_OK) st = ct_device_finish(dev);
        if (st != CT_OK) return st;
        double dt = ct_time_now() - t0;
        if (r > 0 && dt < *best) *best = dt;
    }
    return CT_OK;
}

ct_status ct_attn_time(ct_device *dev, ct_attn_path path, const ct_attn_cfg *cfg, int B, int T,
                       int C, int NH, int reps, double *fwd_s, double *bwd_s) {
    attn_bufs b;
    if (path != CT_ATTN_GEMM && path != CT_ATTN_FUSED)
        return CT_ERR(ct_device_err(dev), CT_ERR_ARG, "ct_attn_time: path must be gemm or fused");
    if (B < 1 || T < 1 || NH < 1 || C % NH ||
        (path == CT_ATTN_GEMM && (double)B * NH * T * T * 2 >= 2147483647.0))
        return CT_ERR(ct_device_err(dev), CT_ERR_ARG,
                      "ct_attn_time: shape B=%d T=%d C=%d NH=%d cannot run on the %s path", B, T,
                      C, NH, ct_attn_path_name(path));
    ct_status st = bufs_alloc(dev, &b, path == CT_ATTN_GEMM, B, T, C, NH);
    if (st != CT_OK) return st;
    st = best_of(dev, &b, path, cfg, 0, B, T, C, NH, reps, fwd_s);
    if (st == CT_OK) st = best_of(dev, &b, path, cfg, 1, B, T, C, NH, reps, bwd_s);
    bufs_free(&b);
    return st;
}

/* ------------------------------------------------------------------ block shapes */

/* Candidates for this device type. CPU devices (PoCL): one SIMD vector per work-item lane run
 * (vw 16 where the head size allows) and a few work-items; measured on an AVX-512 core, 64 x 64
 * blocks of 4 work-items ran at ~90 GFLOP/s where 16 x 16 blocks of 64 scalar work-items ran at
 * ~10. GPUs: scalar lanes, work-groups of 64 to 256. */
static int candidates(const ct_device_info *info, int hs, ct_attn_blocks *out) {
    static const ct_attn_blocks cpu[] = {{64, 64, 4, 0}, {64, 64, 8, 0}, {32, 64, 2, 0}, {32, 32, 2, 0}};
    static const ct_attn_blocks gpu[] = {{16, 16, 64, 1},  {32, 32, 64, 1}, {32, 32, 128, 1},
                                         {64, 64, 256, 1}, {64, 32, 128, 1}, {32, 32, 64, 2}};
    int n = 0;
    if (info->type & CL_DEVICE_TYPE_CPU) {
        int vw = 16;
        while (hs % vw) vw /= 2;
        for (size_t i = 0; i < sizeof cpu / sizeof cpu[0]; i++) {
            out[n] = cpu[i];
            out[n++].vw = vw;
        }
    } else {
        for (size_t i = 0; i < sizeof gpu / sizeof gpu[0]; i++) out[n++] = gpu[i];
    }
    return n;
}

int ct_attn_search_heads(const ct_device_info *info) {
    int bnh = 2 * (int)info->compute_units;
    return bnh < 4 ? 4 : bnh > 128 ? 128 : bnh;
}

/* Search: time every candidate that fits, keep the best forward and the best backward. */
static ct_status search(ct_device *dev, int hs, ct_attn_cfg *out, char *note, size_t len) {
    const ct_device_info *info = ct_device_get_info(dev);
    ct_attn_blocks cand[16];
    int nc = candidates(info, hs, cand);
    /* none fits (an odd head size fits no GPU candidate): the default, which fits any */
    int nf = 0, nb = 0;
    for (int i = 0; i < nc; i++) {
        nf += !ct_attn_blocks_check(info, hs, &cand[i], 0, NULL, 0);
        nb += !ct_attn_blocks_check(info, hs, &cand[i], 1, NULL, 0);
    }
    ct_attn_cfg def = ct_attn_cfg_default(info, hs);
    if (!nf) cand[nc++] = def.fwd;
    if (!nb) cand[nc++] = def.bwd;
    int bnh = ct_attn_search_heads(info);
    int T = 1024, B = 1, NH = bnh, C = NH * hs;
    attn_bufs b;
    ct_status st = bufs_alloc(dev, &b, 0, B, T, C, NH);
    if (st != CT_OK) return st;
    ct_attn_cfg best = ct_attn_cfg_default(info, hs);
    double bf = INFINITY, bb = INFINITY;
    char why[200] = "";
    for (int i = 0; i < nc; i++) {
        ct_attn_cfg c = {cand[i], cand[i], 0};
        double tf = INFINITY, tb = INFINITY;
        if (!ct_attn_blocks_check(info, hs, &cand[i], 0, why, sizeof why) &&
            best_of(dev, &b, CT_ATTN_FUSED, &c, 0, B, T, C, NH, 2, &tf) == CT_OK && tf < bf)
            bf = tf, best.fwd = cand[i];
        /* the backward reads a forward's out and lse: the default blocks make them */
        ct_attn_cfg cb = {best.fwd, cand[i], 0};
        if (!ct_attn_blocks_check(info, hs, &cand[i], 1, why, sizeof why) &&
            best_of(dev, &b, CT_ATTN_FUSED, &cb, 1, B, T, C, NH, 2, &tb) == CT_OK && tb < bb)
            bb = tb, best.bwd = cand[i];
        ct_device_finish(dev); /* a failed candidate leaves nothing queued behind */
    }
    bufs_free(&b);
    if (!isfinite(bf) || !isfinite(bb))
        return CT_ERR(ct_device_err(dev), CT_ERR_UNSUPPORTED,
                      "fused attention: no block shape of the search ran on %s at head size %d "
                      "(%s; last: %s)",
                      info->name, hs, isfinite(bf) ? "backward" : "forward", why);
    *out = best;
    snprintf(note, len, "measured at B*NH=%d T=%d: forward %.2f ms, backward %.2f ms", bnh, T,
             bf * 1e3, bb * 1e3);
    return CT_OK;
}

static void entry_name(int hs, char *k, size_t len) { snprintf(k, len, KIND "_hs%d", hs); }

/* The entry for hs in a record, if it holds a valid one. */
static int from_record(const ct_tune_set *s, const ct_device_info *info, int hs, ct_attn_cfg *out) {
    char k[32];
    entry_name(hs, k, sizeof k);
    static const char *const names[8] = {"FBQ", "FBK", "FNT", "FVW", "BBQ", "BBK", "BNT", "BVW"};
    for (int i = 0; i < s->nkernels; i++) {
        const ct_tune_kernel *e = &s->kernels[i];
        if (strcmp(e->kernel, k)) continue;
        int v[8], got = 0;
        for (int n = 0; n < 8; n++)
            for (int j = 0; j < e->n; j++)
                if (!strcmp(e->names[j], names[n]) && e->values[j] <= 4096) v[n] = (int)e->values[j], got++;
        if (got != 8) return 0;
        ct_attn_cfg c = {{v[0], v[1], v[2], v[3]}, {v[4], v[5], v[6], v[7]}, 0};
        if (ct_attn_blocks_check(info, hs, &c.fwd, 0, NULL, 0) ||
            ct_attn_blocks_check(info, hs, &c.bwd, 1, NULL, 0))
            return 0;
        *out = c;
        return 1;
    }
    return 0;
}

/* Workers of one process (threads) may open devices of one kind at once: the first to need a
 * head size searches and stores, the others then read the record instead of measuring on a device
 * the first is loading. Guards a file, carries no device or layout state. */
static pthread_mutex_t tune_lock = PTHREAD_MUTEX_INITIALIZER;

ct_status ct_attn_tune(ct_device *dev, int hs, int again, ct_attn_cfg *out, char *source,
                       size_t len) {
    const ct_device_info *info = ct_device_get_info(dev);
    const char *dir = ct_device_tune_dir(dev);
    char path[1400] = "", tmp[8];
    if (!source) source = tmp, len = sizeof tmp;
    if (hs < 1) return CT_ERR(ct_device_err(dev), CT_ERR_ARG, "ct_attn_tune: head size %d", hs);
    if (ct_tune_record_path(dir, info, KIND, path, sizeof path) != CT_OK) path[0] = '\0';
    pthread_mutex_lock(&tune_lock);
    ct_tune_set s;
    ct_err rerr = {0};
    ct_status st = ct_tune_record_load(dir, info, KIND, &s, &rerr);
    if (st != CT_OK) { /* none yet (or unreadable: it is replaced) */
        memset(&s, 0, sizeof s);
        snprintf(s.device, sizeof s.device, "%s", info->name);
        snprintf(s.driver, sizeof s.driver, "%s", info->driver_version);
        snprintf(s.platform, sizeof s.platform, "%s", info->platform);
        snprintf(s.type, sizeof s.type, "%s", ct_device_type_str(info->type));
        snprintf(s.note, sizeof s.note, "fused attention block shapes per head size (ct_attn_tune)");
    }
    if (!again && from_record(&s, info, hs, out)) {
        pthread_mutex_unlock(&tune_lock);
        snprintf(source, len, "stored %s", path);
        return CT_OK;
    }
    char note[200];
    st = search(dev, hs, out, note, sizeof note);
    if (st == CT_OK) {
        char k[32];
        entry_name(hs, k, sizeof k);
        /* replace this head size's entry; a full record drops its oldest */
        for (int i = 0; i < s.nkernels; i++)
            if (!strcmp(s.kernels[i].kernel, k)) {
                memmove(&s.kernels[i], &s.kernels[i + 1], (size_t)(s.nkernels - i - 1) * sizeof s.kernels[0]);
                s.nkernels--;
                break;
            }
        if (s.nkernels == CT_TUNE_MAX_KERNELS) {
            memmove(&s.kernels[0], &s.kernels[1], (size_t)(s.nkernels - 1) * sizeof s.kernels[0]);
            s.nkernels--;
        }
        const ct_attn_blocks *f = &out->fwd, *b = &out->bwd;
        ct_tune_set_put(&s, k, "FBQ", (size_t)f->bq);
        ct_tune_set_put(&s, k, "FBK", (size_t)f->bk);
        ct_tune_set_put(&s, k, "FNT", (size_t)f->nt);
        ct_tune_set_put(&s, k, "FVW", (size_t)f->vw);
        ct_tune_set_put(&s, k, "BBQ", (size_t)b->bq);
        ct_tune_set_put(&s, k, "BBK", (size_t)b->bk);
        ct_tune_set_put(&s, k, "BNT", (size_t)b->nt);
        ct_tune_set_put(&s, k, "BVW", (size_t)b->vw);
        ct_err serr = {0};
        if (ct_tune_record_store(dir, info, KIND, &s, &serr) == CT_OK)
            snprintf(source, len, "searched now (%s), stored %s", note, path);
        else
            snprintf(source, len, "searched now (%s), not stored: %s", note, serr.msg);
    }
    pthread_mutex_unlock(&tune_lock);
    return st;
}

/* ------------------------------------------------------------------ the path */

/* The mma variant (attention_mma.cl) goes where the device's GEMM plan multiplies bf16 operands
 * on the mma path (--gemm mma, or auto having picked it for any product): that path's rule and
 * probe passed there, so the attention takes its form (the real instructions, or the emulated
 * stand-ins that --gemm mma-emulated names on any device). Head sizes without a shape keep the
 * scalar kernels, said in the note (as the choice of the variant is; a plan without the mma path,
 * every fp32 plan among them, adds nothing). One decision, kept in cfg->mma. */
static int mma_choice(ct_device *dev, int hs, char *why, size_t len) {
    const ct_gemm_plan *p = ct_device_gemm_plan(dev);
    int v = 0;
    for (int i = -1; p && i < p->n; i++) {
        ct_gemm_path g = i < 0 ? p->bf16 : p->shapes[i].path;
        if (g == CT_GEMM_MMA) v = CT_ATTN_MMA_PTX;
        if (g == CT_GEMM_MMA_EMULATED && !v) v = CT_ATTN_MMA_EMULATED;
    }
    why[0] = '\0';
    if (!v) return 0; /* nothing skipped: no mma path here (and fp32 plans never have one) */
    if (!ct_attn_mma_supports(hs)) {
        snprintf(why, len, "; bf16 on the scalar kernels: the mma variant has no shape for head "
                 "size %d (32, 64, 128)", hs);
        return 0;
    }
    snprintf(why, len, "; bf16 on the mma variant%s (the GEMM plan's mma path)",
             v == CT_ATTN_MMA_EMULATED ? ", emulated" : "");
    return v;
}

ct_status ct_attn_select(ct_device *dev, ct_attn_path want, const ct_attn_cfg *blocks, int T,
                         int C, int NH, ct_attn_path *path, ct_attn_cfg *cfg, char *note,
                         size_t len) {
    char src[1500] = "";
    int hs = NH > 0 ? C / NH : 0;
    ct_status st;
    *path = CT_ATTN_GEMM;
    if (want != CT_ATTN_GEMM && want != CT_ATTN_FUSED && want != CT_ATTN_AUTO)
        return CT_ERR(ct_device_err(dev), CT_ERR_ARG, "attention path %d is not gemm, fused or auto",
                      (int)want);
    if (want == CT_ATTN_GEMM) {
        snprintf(note, len, "gemm (batched CLBlast GEMMs; the (B,NH,T,T) scores kept per layer)");
        return CT_OK;
    }
    if (blocks) {
        char why[200];
        if (ct_attn_blocks_check(ct_device_get_info(dev), hs, &blocks->fwd, 0, why, sizeof why) ||
            ct_attn_blocks_check(ct_device_get_info(dev), hs, &blocks->bwd, 1, why, sizeof why))
            return CT_ERR(ct_device_err(dev), CT_ERR_ARG, "fused attention blocks: %s", why);
        *cfg = *blocks;
        snprintf(src, sizeof src, "given");
    } else if ((st = ct_attn_tune(dev, hs, 0, cfg, src, sizeof src)) != CT_OK) {
        return st;
    }
    char shape[1900], mwhy[120];
    cfg->mma = mma_choice(dev, hs, mwhy, sizeof mwhy);
    snprintf(shape, sizeof shape, "blocks fwd %dx%d/%dx%d bwd %dx%d/%dx%d, %s%s", cfg->fwd.bq,
             cfg->fwd.bk, cfg->fwd.nt, cfg->fwd.vw, cfg->bwd.bq, cfg->bwd.bk, cfg->bwd.nt,
             cfg->bwd.vw, src, mwhy);
    if (want == CT_ATTN_FUSED) {
        *path = CT_ATTN_FUSED;
        snprintf(note, len, "fused (%s)", shape);
        return CT_OK;
    }
    /* auto: both paths at one row of the model's shape (time is linear in rows) */
    double ff = 0, fb = 0, gf = 0, gb = 0;
    if ((st = ct_attn_time(dev, CT_ATTN_FUSED, cfg, 1, T, C, NH, 2, &ff, &fb)) != CT_OK) return st;
    st = ct_attn_time(dev, CT_ATTN_GEMM, cfg, 1, T, C, NH, 2, &gf, &gb);
    if (st == CT_ERR_DEVICE_MEM || st == CT_ERR_ARG) {
        *path = CT_ATTN_FUSED;
        snprintf(note, len, "auto -> fused: the GEMM path's scores do not fit at T=%d (%s)", T,
                 shape);
        ct_err_clear(ct_device_err(dev));
        return CT_OK;
    }
    if (st != CT_OK) return st;
    *path = ff + fb <= gf + gb ? CT_ATTN_FUSED : CT_ATTN_GEMM;
    snprintf(note, len,
             "auto -> %s: forward+backward of one row at T=%d NH=%d: fused %.3f ms, gemm %.3f ms "
             "(%s)",
             ct_attn_path_name(*path), T, NH, (ff + fb) * 1e3, (gf + gb) * 1e3, shape);
    return CT_OK;
}
