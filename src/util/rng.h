// Deterministic random numbers for make-model, tests and sampling: splitmix64 seeding into xoshiro256**.
// Same seed, same stream, on every platform. Streams for parallel work are derived with st_rng_init(seed, stream).
#ifndef STRATA_UTIL_RNG_H
#define STRATA_UTIL_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct st_rng {
    uint64_t s[4];
} st_rng;

static inline uint64_t st_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// `stream` selects an independent sequence for the same seed (e.g. one per tensor or per block range).
static inline void st_rng_init(st_rng *r, uint64_t seed, uint64_t stream) {
    uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ull);
    for (int i = 0; i < 4; i++) r->s[i] = st_splitmix64(&x);
}

static inline uint64_t st_rng_u64(st_rng *r) {
    uint64_t *s = r->s;
    uint64_t t1 = s[1] * 5;
    uint64_t result = ((t1 << 7) | (t1 >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

static inline uint32_t st_rng_u32(st_rng *r) { return (uint32_t)(st_rng_u64(r) >> 32); }

// Uniform in [0, 1).
static inline float st_rng_f32(st_rng *r) { return (float)(st_rng_u64(r) >> 40) * (1.0f / 16777216.0f); }

// Uniform integer in [0, n).
static inline uint32_t st_rng_below(st_rng *r, uint32_t n) { return (uint32_t)(((uint64_t)st_rng_u32(r) * n) >> 32); }

// Standard normal (Box-Muller; one value per call keeps streams simple to reason about).
static inline float st_rng_normal(st_rng *r) {
    float u1 = st_rng_f32(r), u2 = st_rng_f32(r);
    if (u1 < 1e-7f) u1 = 1e-7f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

#endif
