/* ct_engine_gemm.h - which bf16 GEMM path a model runs on a device (gemm_tune.c): the paths are
 * cl/'s (ct_gemm_run: portable OpenCL C, NVIDIA's tensor cores through mma.sync, ...); the choice
 * is the engine's, made once per device like the attention path's (ct_attn_select): a path asked
 * for by name is checked and taken or refused with cl/'s reason; "auto" times every bf16 path the
 * device runs on the engine's GEMM shapes and takes the fastest, kept as a tuning record (kind
 * "gemm") so the next run on this device and driver reads it instead of measuring.
 *
 *     ct_gemm_path path;
 *     char note[400];
 *     if (ct_gemm_select(dev, "auto", 0, &path, note, sizeof note)) puts(ct_device_errmsg(dev));
 *     else printf("bf16 GEMMs: %s (%s)\n", ct_gemm_path_str(path), note);
 */
#ifndef CT_ENGINE_GEMM_H
#define CT_ENGINE_GEMM_H

#include <stddef.h>

#include "ct_cl.h"
#include "ct_gpt_config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* want: "auto", or a bf16 path's name ("portable", "mma"; "mma-emulated" for tests). A path the
 * device does not run: CT_ERR_UNSUPPORTED with cl/'s reason; fp32's "clblast" or an unknown name:
 * CT_ERR_ARG listing the choices. auto: the stored record when its path still passes its check
 * (again = 0), else every bf16 path but the emulated one is checked and timed (the median of 3
 * after one untimed call, on three shapes of a GPT block's products), the fastest by geometric
 * mean taken and stored. note: one line saying what was chosen and why (rates, "stored ...").
 * Checking a path may build its kernels and run its probe (seconds on a cold program cache). */
ct_status ct_gemm_select(ct_device *dev, const char *want, int again, ct_gemm_path *path,
                         char *note, size_t len);

/* ---- the model's plan: a path per GEMM shape it runs (ct_gemm_plan, kept on the device) */

/* One product of the model: its key in the plan (0 in m, n, k, batch: any) and the size it is
 * timed at. `name` says which ("qkv fwd", "att scores") for the log. */
typedef struct ct_gemm_shape {
    const char *name;
    int ta, tb, c_bf16;        /* C bf16 (an activation) or fp32 (a gradient, the scores) */
    size_t m, n, k, batch;     /* the key */
    size_t tm, tn, tk, tbatch; /* timed at */
} ct_gemm_shape;
#define CT_GEMM_MODEL_SHAPES 18
/* The products a GPT model of `cfg` runs per block and in its head on one worker, at micro-batch
 * B x T (rows B*T timed at most 4096: the rate of a larger one differs little), every linear
 * layer's forward, input and weight gradient, the attention's scores (QK^T, dP) and its
 * probability-times-matrix products (PV, dS K, ...; timed at one 256-row block, how the causal
 * products run), heads and channels divided by tp; a key met twice is listed once, under its first
 * name. Returns how many (<= CT_GEMM_MODEL_SHAPES). */
int ct_gemm_model_shapes(const ct_gpt_config *cfg, int tp, int B, int T, ct_gemm_shape *out);

/* The device's GEMM plan for a model's shapes, and a note for the start-up log (a line saying
 * what was decided, then one line per shape: its path and measured rate).
 * want: "auto" (NULL too), "clblast", "portable", "mma" ("mma-emulated": the stand-ins, tests);
 * bf16: the model's operands are bf16; tf32: fp32 products may use the mma path's tf32 form.
 * - fp32 without tf32: CLBlast, nothing timed ("auto" or "clblast"; a bf16 path: CT_ERR_ARG).
 * - bf16 or tf32: the paths that fit (asked for by name: that one, checked, CT_ERR_UNSUPPORTED
 *   with cl/'s reason when the device does not run it; auto: every non-emulated one that passes
 *   its check), each shape timed on each (the median of 3 after one untimed call) and the
 *   fastest taken; auto's choices are stored as a tuning record (kind "gemm", entries plan_bf16
 *   or plan_tf32 and their rates) and read back instead of timing when every shape has one whose
 *   path still passes its check (again = 0). A name that does not fit the operands: CT_ERR_ARG.
 * Messages go to the device's error record. */
ct_status ct_gemm_plan_make(ct_device *dev, const char *want, int bf16, int tf32, int again,
                            const ct_gemm_shape *shapes, int nshapes, ct_gemm_plan *plan,
                            char *note, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* CT_ENGINE_GEMM_H */
