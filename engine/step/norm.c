/* norm.c - the step's reductions to one value on every worker: the global gradient norm that
 * clipping uses (each stage's part summed over the pipeline, or each worker's owned part summed
 * over the world where workers hold different slices), the step's loss (the last stage's mean,
 * over DP), a mixture of experts' routing statistics, and where a non-finite value first is. */
#include "exec_impl.h"

/* The global gradient's sum of squares when the workers hold different slices (tensor
 * parallelism): the sum over the world of each worker's owned part (ct_optim_owned_sumsq),
 * which counts every parameter once, the pipeline's tied wte and ZeRO shards included. */
static ct_status owned_norm(ct_exec *x, double *ss) {
    double mine = 0;
    ct_status st = ct_optim_owned_sumsq(x->o, &mine);
    if (st != CT_OK) return CT_ERR(&x->err, st, "%s", ct_optim_errmsg(x->o));
    float fs = (float)mine;
    if (multi(x->world) && (st = ct_comm_allreduce(x->world, &fs, &fs, 1, CT_F32, CT_OP_SUM,
                                                   NULL)) != CT_OK)
        return CT_ERR(&x->err, st, "the gradient norm over the workers: %s",
                      ct_comm_errmsg(x->world));
    *ss = fs;
    return CT_OK;
}

/* The step's loss: the mean over micro-batches (the last stage has it), over DP; the same
 * value on every worker. Collective over the pipeline and DP groups. */
ct_status ct__exec_step_loss(ct_exec *x, int M, double *out) {
    ct_status st;
    double sum = 0;
    for (int mb = 0; mb < M; mb++) sum += x->losses[mb];
    double loss = sum / M;
    if (x->nstages > 1) {
        float lf = (float)loss;
        if ((st = ct_comm_bcast(x->pp, &lf, 1, CT_F32, x->nstages - 1, NULL)) != CT_OK)
            return CT_ERR(&x->err, st, "the loss from the last stage: %s", ct_comm_errmsg(x->pp));
        loss = lf;
    }
    if (multi(x->dp)) {
        float lf = (float)loss;
        if ((st = ct_comm_allreduce(x->dp, &lf, &lf, 1, CT_F32, CT_OP_AVG, NULL)) != CT_OK)
            return CT_ERR(&x->err, st, "averaging the loss: %s", ct_comm_errmsg(x->dp));
        loss = lf;
    }
    *out = loss;
    return CT_OK;
}

/* Whether the global norm is the sum of owned parts over the world (workers holding different
 * slices: tensor parallelism, different experts; or a pipeline with experts, whose stages'
 * flat ranges put the experts before the tied wte); else each stage's range norm, summed over
 * the pipeline. */
static int owned_norm_needed(const ct_exec *x) {
    return x->tpsize > 1 || (x->experts && (x->epsize > 1 || x->nstages > 1));
}

/* A mixture of experts' routing over the step, from every worker (collective over the world):
 * the counts summed (each token's choices are counted by the worker holding its row, each block's
 * by its stage), the rows each worker's experts computed gathered, the auxiliary loss averaged
 * over the replicas of each block (DP, and TP) and summed over the pipeline's blocks. */
ct_status ct__exec_moe_stats(ct_exec *x, int M, ct_step_result *out) {
    ct_moe_stats ms;
    ct_moe_stats_get(ct_model_moe(x->m), &ms);
    int L = ms.layers, E = ms.experts, W = x->world ? ct_comm_size(x->world) : 1;
    int me = x->world ? ct_comm_rank(x->world) : 0;
    size_t LE = (size_t)L * E, n = 2 * LE + (size_t)W;
    int32_t *c = x->moe_counts;
    for (size_t i = 0; i < LE; i++) c[i] = (int32_t)ms.routed[i], c[LE + i] = (int32_t)ms.kept[i];
    for (int w = 0; w < W; w++) c[2 * LE + (size_t)w] = w == me ? (int32_t)ms.rows : 0;
    float aux = (float)(ms.aux / (M > 0 ? M : 1));
    ct_status st = CT_OK;
    if (W > 1 && ((st = ct_comm_allreduce(x->world, c, c, n, CT_I32, CT_OP_SUM, NULL)) != CT_OK ||
                  (st = ct_comm_allreduce(x->world, &aux, &aux, 1, CT_F32, CT_OP_SUM, NULL)) !=
                      CT_OK))
        return CT_ERR(&x->err, st, "the experts' routing counts over the workers: %s",
                      ct_comm_errmsg(x->world));
    if (!out) return CT_OK;
    out->aux_loss = aux / (double)(x->dpsize * x->tpsize);
    double routed = 0, kept = 0, worst = 0;
    for (int l = 0; l < L; l++) {
        double sum = 0, mx = 0;
        for (int e = 0; e < E; e++) {
            double r = c[(size_t)l * E + e];
            sum += r, mx = r > mx ? r : mx;
            kept += c[LE + (size_t)l * E + e];
        }
        routed += sum;
        if (sum > 0 && mx / (sum / E) > worst) worst = mx / (sum / E);
    }
    out->drop_frac = routed > 0 ? 1.0 - kept / routed : 0;
    out->max_load = worst;
    return CT_OK;
}

int ct_exec_moe_get(const ct_exec *x, ct_exec_moe *out) {
    memset(out, 0, sizeof *out);
    if (!x->experts) return 0;
    const ct_gpt_config *c = ct_params_config(x->P);
    size_t LE = (size_t)c->layers * c->experts;
    out->layers = c->layers, out->experts = c->experts;
    out->workers = x->world ? ct_comm_size(x->world) : 1;
    out->routed = x->moe_counts, out->kept = x->moe_counts + LE, out->rows = x->moe_counts + 2 * LE;
    return 1;
}

ct_status ct__exec_global_norm(ct_exec *x, double sumsq, float *given, int *have) {
    /* each stage's part (the last leaves out its wte copy), summed over the pipeline; ZeRO-1's
     * and 2's from the shards (summed over DP by the reducer) */
    ct_status st;
    int z2 = ct_params_grad_shard(x->P) != NULL || ct_grads_sharded(x->g);
    double ss = sumsq;
    *have = z2;
    if (owned_norm_needed(x)) {
        /* the workers hold different slices (tensor parallelism, different experts, or a
         * pipeline's stages with the experts before the tied wte): every parameter counted once
         * (its owner) over the whole world, one all-reduce, so every worker clips alike */
        if ((st = owned_norm(x, &ss)) != CT_OK) return st;
        *have = 1;
    } else if (!z2 && x->nstages > 1) {
        float part = 0;
        st = ct_optim_range_norm(x->o, x->norm_lo, ct_params_local_len(x->P), &part);
        if (st != CT_OK) return CT_ERR(&x->err, st, "%s", ct_optim_errmsg(x->o));
        ss = (double)part * part, *have = 1;
    }
    if (*have && x->nstages > 1 && !owned_norm_needed(x)) {
        float fs = (float)ss;
        if ((st = ct_comm_allreduce(x->pp, &fs, &fs, 1, CT_F32, CT_OP_SUM, NULL)) != CT_OK)
            return CT_ERR(&x->err, st, "the gradient norm over the pipeline: %s",
                          ct_comm_errmsg(x->pp));
        ss = fs;
    }
    *given = sqrtf((float)ss);
    return CT_OK;
}

/* This worker's first non-finite (tensor, layer) as one number in table order (lower = earlier),
 * or INT32_MAX. */
static ct_status first_key(ct_exec *x, int grads, int32_t *key) {
    int tensor = -1, layer = -1;
    ct_status st = ct_optim_find_nonfinite(x->o, grads, &tensor, &layer);
    if (st != CT_OK) return CT_ERR(&x->err, st, "%s", ct_optim_errmsg(x->o));
    *key = tensor < 0 ? INT32_MAX : tensor * 65536 + (layer < 0 ? 0 : layer);
    return CT_OK;
}

ct_status ct_exec_nonfinite_report(ct_exec *x, char *buf, size_t len) {
    ct_status st;
    int32_t key[2]; /* the earliest over every worker: max of the negated keys */
    for (int g = 0; g < 2; g++) {
        if ((st = first_key(x, g == 0, &key[g])) != CT_OK) return st;
        key[g] = -key[g];
    }
    if (multi(x->world) &&
        (st = ct_comm_allreduce(x->world, key, key, 2, CT_I32, CT_OP_MAX, NULL)) != CT_OK)
        return CT_ERR(&x->err, st, "finding the first non-finite tensor: %s",
                      ct_comm_errmsg(x->world));
    for (int g = 0; g < 2; g++) {
        int32_t k = -key[g];
        if (k == INT32_MAX) continue;
        int tensor = k / 65536, layer = k % 65536;
        int block = tensor >= CT_GPT_ln1w && tensor <= CT_GPT_fcprojb;
        char where[48] = "";
        if (block) snprintf(where, sizeof where, " in layer %d", layer);
        snprintf(buf, len, "the first tensor that is not finite is the %s of %s%s",
                 g == 0 ? "gradient" : "parameter", ct_gpt_tensor_name(tensor), where);
        return CT_OK;
    }
    snprintf(buf, len, "every gradient and parameter is finite: only the loss is not");
    return CT_OK;
}
