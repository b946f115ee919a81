/* ct_engine_moe.h - the mixture-of-experts MLP of a block (engine/moe.c): a router, top-k
 * selection with a per-row capacity, E GPT-2 MLPs, and, with expert parallelism, the
 * all-to-all-v over the EP group that sends each kept choice to the worker holding its expert and
 * brings the result back. The model's block calls it in place of the dense MLP (model.c); the
 * layer calls parallel/ itself, as tp.c does for tensor parallelism.
 *
 * The layer, exactly (the PyTorch oracle, tests/torch_gpt2_ref.py, computes the same):
 *   r = x Wr^T (x: the ln2 output (B,T,C), Wr (E,C)); p = softmax(r) over the experts, fp32;
 *   per token the K largest p in descending order (equal p: the lower expert first), gate = p;
 *   capacity per row: expert e takes at most c = min(T, ceil(F K T / E)) choices of a row (F = 0:
 *   T, no limit), filled rank 0 choices in t order, then rank 1, ...; a choice past c is dropped;
 *   y_t = sum over kept choices (e, g) of g MLP_e(x_t) (fc 4C x C + bias, tanh-GELU, fcproj
 *   C x 4C + bias);
 *   aux = the mean over rows of E sum_e f_e P_e (f_e: the row's choices routed to e before
 *   dropping / (K T), a constant; P_e: the row's mean p_e); the objective adds alpha * aux.
 *
 * Llama's SwiGLU experts (ct_moe_cfg.swiglu): MLP_e(x) = down_e(silu(gate_e x) * up_e x), no
 * biases, the same routing.
 *
 * Under tensor parallelism (tp workers, hidden = F / tp) every expert is split over the TP group
 * as the dense MLP is: fc (gate and up) column-parallel, fcproj (down) row-parallel. Each TP worker routes the same
 * (gathered) tokens alike, exchanges them within its own EP group (the workers of its TP rank),
 * and computes its slice of every expert it holds: the layer's output is then this worker's
 * partial sum (the fcproj bias added by TP rank 0 only), which the caller sums over the TP group,
 * as after a row-parallel linear. In the backward the gates' gradients (dot products with the
 * partial expert outputs) are summed over the TP group before the router's backward, and the
 * router's part of the input gradient is added by TP rank 0 only, so the caller's sum over the
 * TP group of the returned partial input gradient is the whole one. The router's and the fcproj
 * bias's gradients come out whole on every TP worker (from the whole output gradient).
 *
 * Expert parallelism (ep workers, E / ep experts each): every worker routes its own rows, reads
 * the per-(row, expert) counts back (the host needs them for the GEMM sizes and the message
 * sizes), exchanges the counts with an all-to-all, gathers its kept choices in expert-major order
 * on the device, sends them through host staging with an all-to-all-v, runs each of its experts
 * as one GEMM over every token it received (from worker 0, 1, ... in order: the single-device
 * order of rows), and returns the outputs with the reverse all-to-all-v; backward mirrors both.
 *
 *     ct_moe_cfg c = {.experts = 8, .top_k = 2, .capacity = 1.25, .aux = 0.01, .max_B = B,
 *                     .max_T = T, .channels = C, .layers = L, .slots = 1, .blocks = L};
 *     size_t per_block, scratch; ct_moe_plan(&c, ep, &per_block, &scratch);   // arena regions
 *     ct_moe *moe = NULL;
 *     if (ct_moe_create(&moe, &c, ep_group, dev, arena, &err)) puts(err.msg);
 *     ct_moe_forward(moe, slot, k, l, y, saved, scratch_view, x, &w, B, T);
 *     ct_moe_backward(moe, slot, k, dx, &dw, dy, saved, scratch_view, x, &w, 1.0f);
 */
#ifndef CT_ENGINE_MOE_H
#define CT_ENGINE_MOE_H

#include <stddef.h>

#include "ct_cl.h"
#include "ct_engine_ops.h"
#include "ct_engine_tp.h"
#include "ct_parallel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ct_moe ct_moe;

typedef struct ct_moe_cfg {
    int experts, top_k; /* E, K (1 <= K <= E) */
    double capacity;    /* F >= 0 (0: no limit) */
    double aux;         /* alpha >= 0: the auxiliary loss's weight in the objective */
    int max_B, max_T;   /* the largest micro-batch (this worker's rows, tokens per row) */
    int channels;       /* C */
    int layers;         /* statistics are kept per layer 0..layers-1 */
    int slots, blocks;  /* routing records for the backward: per slot and block copy in it */
    int hidden;         /* an expert's hidden width on this worker: F / tp (0: F, no TP) */
    int bf16;           /* 1: the activations (router logits, rows, hidden, their gradients) are
                           bf16, their regions and the staging half the floats; the layer's views
                           must then be bf16 (0: fp32, the default) */
    int ffn;            /* F, an expert's whole hidden width (0: 4C, GPT-2's) */
    int swiglu;         /* 1: Llama's SwiGLU experts: fcw (El,2H,C) = [gate; up] per expert,
                           down_proj fcprojw (El,C,H), no biases; y = down(silu(gate x) * up x)
                           (0: GPT-2's MLP, fc + bias, GELU, fcproj + bias) */
} ct_moe_cfg;

/* c = min(T, ceil(F K T / E)), or T when F = 0: the choices an expert takes from one row. */
int ct_moe_row_capacity(const ct_moe_cfg *c, int T);
/* Floats one block keeps in a slot for its backward and the layer's scratch (both int32 and
 * float tensors), for an EP group of ep workers: sized for the worst case the capacity allows
 * (with F = 0, every choice of the group's rows on one worker). */
void ct_moe_plan(const ct_moe_cfg *c, int ep, size_t *block_floats, size_t *scratch_floats);
/* The config checked (E, K, F, alpha, sizes) against an EP group of ep workers (ep divides E):
 * CT_ERR_ARG naming the first problem. */
ct_status ct_moe_check(const ct_moe_cfg *c, int ep, ct_err *err);
/* Floats of each of the two host staging buffers ct_moe_create allocates for an EP group of ep
 * workers (0 for ep = 1): what the memory model counts (ct_moe_host_bytes once created). */
size_t ct_moe_staging_floats(const ct_moe_cfg *c, int ep);

/* ep: this worker's EP group (NULL or one worker: every expert here, no communication). tp: the
 * TP group's layer (NULL: no tensor parallelism; else c->hidden must be 4C / its size, and arena
 * must be the one the TP layer was created on). arena: the buffer the views passed later point
 * into (staged reads and writes go through it). Host memory: the routing records and, with
 * ep > 1, two staging buffers of the largest exchange. */
ct_status ct_moe_create(ct_moe **out, const ct_moe_cfg *c, ct_comm *ep, ct_tp *tp,
                        ct_device *dev, ct_arena *arena, ct_err *err);
void ct_moe_free(ct_moe *m);
/* This worker's experts [first, first + count). */
void ct_moe_experts(const ct_moe *m, int *first, int *count);
/* Host bytes of the EP staging (0 without expert parallelism); the memory report's comm. */
size_t ct_moe_host_bytes(const ct_moe *m);

/* The layer's parameters (or their gradients): the router (E,C) and this worker's experts one
 * after another: fcw (El,4C,C), fcb (El,4C), fcprojw (El,C,4C), fcprojb (El,C) (SwiGLU experts:
 * fcw (El,2F,C), fcprojw (El,C,F), the biases unused). */
typedef struct ct_moe_weights {
    ct_view routerw, fcw, fcb, fcprojw, fcprojb;
} ct_moe_weights;

/* y (B,T,C) "=" the layer of x (B,T,C) (under TP: this worker's partial sum). saved: the block's
 * region of the slot (block_floats), kept until its backward; scratch: the layer's scratch
 * (scratch_floats, shared). The routing is recorded under (slot, block) for the backward and
 * counted under layer in the statistics. Collective over the EP group. Reads the routing counts
 * back (the device is waited for). */
ct_status ct_moe_forward(ct_moe *m, int slot, int block, int layer, ct_view y, ct_view saved,
                         ct_view scratch, ct_view x, const ct_moe_weights *w, int B, int T);
/* dx (B,T,C) "=" the gradient of x (under TP: this worker's partial sum); dw "+=" the parameters'
 * gradients, of the objective sum(y * dy) + loss_scale * alpha * aux given dy (B,T,C) (which
 * carries the loss scale already: it comes from the head's backward), for the slot's last forward
 * of the block. The experts' weight gradients are of the EP group's mean objective (1 / ep times
 * the sum over the group's workers' rows): averaged over the workers holding the same experts they
 * are the data-parallel mean, as the router's and every dense gradient averaged over DP are.
 * Collective over the EP group. */
ct_status ct_moe_backward(ct_moe *m, int slot, int block, ct_view dx, const ct_moe_weights *dw,
                          ct_view dy, ct_view saved, ct_view scratch, ct_view x,
                          const ct_moe_weights *w, float loss_scale);

/* What the forwards since the last reset routed (this worker's rows; counts summed over the
 * forwards; under TP the routed and kept counts on TP rank 0 only, as every TP worker routes the
 * same tokens) and what its experts computed. */
typedef struct ct_moe_stats {
    int layers, experts;
    const double *routed; /* [layers * experts]: choices routed to each expert, before dropping */
    const double *kept;   /* [layers * experts]: choices each expert took */
    double aux;           /* sum over forwards of the layer's aux (the mean over its rows) */
    long forwards;        /* layer forwards */
    double rows;          /* token rows this worker's experts computed (forward) */
    /* with timing on (ct_moe_set_timing): wall time of each part, forward and backward, the
     * device waited for around each */
    double route_ms;      /* router GEMMs, routing kernels, the counts read back */
    double gather_ms;     /* the device's gather into expert-major order and the weighted combine */
    double alltoall_ms;   /* the exchanges: device reads and writes of the staging, all-to-all-v */
    double expert_ms;     /* the experts' GEMMs and GELU */
    double bytes;         /* bytes this worker sent in all-to-all-v's */
} ct_moe_stats;
void ct_moe_stats_get(const ct_moe *m, ct_moe_stats *out);
void ct_moe_stats_reset(ct_moe *m);
/* Timing on: the device is waited for around each part (a measurement; costs the overlap). */
void ct_moe_set_timing(ct_moe *m, int on);

#ifdef __cplusplus
}
#endif
#endif /* CT_ENGINE_MOE_H */
