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

#ifdef __cplusplus
}
#endif
#endif /* CT_ENGINE_GEMM_H */
