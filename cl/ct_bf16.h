/* ct_bf16.h - bf16 on the host (cl/bf16.c), usable without OpenCL's headers (engine/files reads
 * and writes bf16 model files with it). ct_cl.h includes it beside the enqueued conversions.
 *
 *     uint16_t h = ct_bf16_from_f32(x);   // nearest even
 *     float y = ct_bf16_to_f32(h);        // exact
 *
 * bf16 is the upper half of an IEEE fp32, held as uint16_t (ushort in OpenCL C): it needs no
 * OpenCL extension. fp32 -> bf16 rounds to nearest, ties to even; past bf16's largest finite
 * value it rounds to infinity; infinities stay; a NaN stays a NaN of the same sign (made quiet).
 * bf16 -> fp32 is exact. The kernels use the same rule (cl/kernels/bf16.clh). */
#ifndef CT_BF16_H
#define CT_BF16_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

uint16_t ct_bf16_from_f32(float x);
float ct_bf16_to_f32(uint16_t h);
/* Stochastic rounding (llm.c's choice for its bf16 weights): x's low 16 bits plus a threshold
 * r in [0, 65536), truncated, so x rounds away from zero with probability low / 65536 (unbiased).
 * r is counter-based, a function of (seed, step, index) alone: r = mix(mix(seed + step * G) ^
 * index) & 0xffff, mix being splitmix64's finalizer and G its golden-ratio increment; so a run
 * and its resume round alike. Infinities and NaNs are converted as ct_bf16_from_f32 does. The
 * device kernel (ct_bf16_from_f32_stochastic_enqueue) gives the same bits. */
uint16_t ct_bf16_from_f32_stochastic(float x, uint64_t seed, uint64_t step, uint64_t index);

#ifdef __cplusplus
}
#endif

#endif /* CT_BF16_H */
