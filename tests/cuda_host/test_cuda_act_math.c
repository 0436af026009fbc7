// src/cuda/act_math.h (the CUDA kernels' SwiGLU) against the CPU engine's st_swiglu, bit for bit, compiled by the C
// compiler: fresh random inputs over the range activations take, plus edge values (0, -0, saturation, inf, NaN).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/ops.h"
#include "cuda/act_math.h"
#include "util/rng.h"

static int same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0 || (isnan(a) && isnan(b)); }

int main(void) {
    // Fresh seed per run (STRATA_SEED overrides), printed so a failure can be repeated.
    const char *env = getenv("STRATA_SEED");
    const uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    printf("test_cuda_act_math: seed %llu\n", (unsigned long long)seed);
    st_rng rng;
    st_rng_init(&rng, seed, 0);
    enum { N = 1 << 16 };  // a multiple of 16: every element takes st_swiglu's vector exp
    static float g[N], u[N], y[N];
    int64_t bad = 0, checked = 0;
    for (int round = 0; round < 16; round++) {
        const float scale = round < 8 ? 0.5f * (float)(round + 1) : 20.0f * (float)(round - 7);
        for (int i = 0; i < N; i++) g[i] = scale * st_rng_normal(&rng), u[i] = st_rng_normal(&rng);
        if (round == 0) {
            const float edge[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, -88.0f, 104.0f, -104.0f, 200.0f, -200.0f,
                                  INFINITY, -INFINITY, NAN, 3.4e38f, -3.4e38f, 1.0f};
            for (int i = 0; i < 16; i++) g[i] = edge[i];
        }
        st_swiglu(y, g, u, N);
        for (int i = 0; i < N; i++, checked++) {
            const float got = st_am_silu_mul(g[i], u[i]);
            if (!same_bits(got, y[i])) {
                if (bad < 5) printf("  silu_mul(%.9g, %.9g) = %.9g, st_swiglu %.9g\n", g[i], u[i], got, y[i]);
                bad++;
            }
        }
    }
    if (bad) {
        printf("test_cuda_act_math: FAIL (%lld of %lld differ)\n", (long long)bad, (long long)checked);
        return 1;
    }
    printf("test_cuda_act_math: PASS (%lld SwiGLU elements bit for bit with st_swiglu)\n", (long long)checked);
    return 0;
}
