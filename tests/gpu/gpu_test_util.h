// Helpers shared by the GPU test programs (header-only: every test_gpu_*.c is its own program).
#ifndef STRATA_TESTS_GPU_TEST_UTIL_H
#define STRATA_TESTS_GPU_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// Parses [--quick] [--no-timing] (only [--quick] when no_timing is NULL) into 0/1 flags; on anything else prints
// the usage and returns -1 (the caller exits with 2).
static inline int gpu_test_args(int argc, char **argv, int *quick, int *no_timing) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) *quick = 1;
        else if (no_timing && !strcmp(argv[i], "--no-timing")) *no_timing = 1;
        else {
            fprintf(stderr, "usage: %s %s\n", argv[0], no_timing ? "[--quick] [--no-timing]" : "[--quick]");
            return -1;
        }
    }
    return 0;
}

// The run's seed: STRATA_SEED when set, else fresh from the clock (clock_shift mixes in the CPU time).
static inline uint64_t gpu_test_seed(int clock_shift) {
    const char *env = getenv("STRATA_SEED");
    return env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)clock() << clock_shift);
}

// The larger of m and d where a NaN in either sticks (`if (!(d <= m)) m = d` drops a NaN at the next finite d).
static inline double gpu_max_nan(double m, double d) { return isnan(m) || isnan(d) ? NAN : d > m ? d : m; }

#endif
