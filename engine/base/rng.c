/* rng.c - the seeded generators (splitmix64, xoshiro256**) and a draw of a token from host
 * logits (temperature, top-k). */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_alloc.h"
#include "ct_engine_rng.h"

/* ---------------------------------------------------------------- RNG and sampling */

uint64_t ct_mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t ct_splitmix64_next(uint64_t *state) {
    uint64_t r = ct_mix64(*state);
    *state += 0x9E3779B97F4A7C15ull;
    return r;
}

void ct_rng_seed(ct_rng *r, uint64_t seed) {
    uint64_t s = seed;
    for (int i = 0; i < 4; i++) r->s[i] = ct_splitmix64_next(&s);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t ct_rng_u64(ct_rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double ct_rng_uniform(ct_rng *r) { return (double)(ct_rng_u64(r) >> 11) * 0x1.0p-53; }

int ct_sample_token(const float *logits, int V, double temperature, int top_k, ct_rng *rng) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temperature <= 0 || V == 1) return best;
    int k = (top_k <= 0 || top_k >= V) ? V : top_k;
    /* The k largest logits, by insertion into a sorted list (k is small, or k == V). */
    int *idx = (int *)ct_malloc((size_t)k * sizeof *idx);
    if (!idx) return best;
    int have = 0;
    if (k == V) {
        for (int i = 0; i < V; i++) idx[i] = i;
        have = V;
    } else {
        for (int i = 0; i < V; i++) {
            if (have == k && !(logits[i] > logits[idx[k - 1]])) continue;
            int j = have < k ? have++ : k - 1;
            while (j > 0 && logits[idx[j - 1]] < logits[i]) {
                idx[j] = idx[j - 1];
                j--;
            }
            idx[j] = i;
        }
    }
    double mx = logits[best], sum = 0;
    for (int j = 0; j < have; j++) sum += exp(((double)logits[idx[j]] - mx) / temperature);
    double u = ct_rng_uniform(rng) * sum, acc = 0;
    int pick = idx[have - 1];
    for (int j = 0; j < have; j++) {
        acc += exp(((double)logits[idx[j]] - mx) / temperature);
        if (u < acc) {
            pick = idx[j];
            break;
        }
    }
    free(idx);
    return pick;
}
