/* ct_engine_rng.h - the engine's seeded random numbers (rng.c): the counter-based mixer parameter
 * initialisation uses, the generator the data loader's shuffle and sampling use (its state is
 * saved in checkpoints), and a draw of a token from host logits. Host-only, no global state. A
 * part of engine/base/, which every other part of the engine may use.
 *
 *     ct_rng r;
 *     ct_rng_seed(&r, 1337);
 *     double u = ct_rng_uniform(&r);
 *     int tok = ct_sample_token(logits, V, 0.8, 40, &r);
 */
#ifndef CT_ENGINE_RNG_H
#define CT_ENGINE_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* splitmix64 (Steele, Lea, Flood 2014): ct_mix64 is its output function of x + the golden
 * gamma, a counter-based mixer (initialisation draws value i from ct_mix64(seed' ^ i), the same
 * in every layout); ct_splitmix64_next steps a state and returns the next value. The engine's
 * one definition of it. */
uint64_t ct_mix64(uint64_t x);
uint64_t ct_splitmix64_next(uint64_t *state);

/* xoshiro256** seeded through splitmix64: 256 bits of state, saved in checkpoints. */
typedef struct ct_rng {
    uint64_t s[4];
} ct_rng;

void ct_rng_seed(ct_rng *r, uint64_t seed);
uint64_t ct_rng_u64(ct_rng *r);
double ct_rng_uniform(ct_rng *r); /* [0, 1) with 53 random bits */

/* Draw a token from logits[0..V): temperature <= 0 is the argmax; otherwise softmax of
 * logits/temperature restricted to the top_k largest (top_k <= 0 or >= V: all). */
int ct_sample_token(const float *logits, int V, double temperature, int top_k, ct_rng *rng);

#ifdef __cplusplus
}
#endif
#endif /* CT_ENGINE_RNG_H */
