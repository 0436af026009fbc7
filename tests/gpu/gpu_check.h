// Checked calls for the GPU tests and benchmarks (C and C++). The including file defines `static uint64_t g_seed`
// (printed with every fatal error, so a failure can be rerun with STRATA_SEED) and includes <cuda_runtime_api.h>
// and util/err.h.
#ifndef STRATA_TESTS_GPU_CHECK_H
#define STRATA_TESTS_GPU_CHECK_H

#include <stdio.h>
#include <stdlib.h>

// A CUDA runtime call that must succeed.
#define CK(call)                                                                                                   \
    do {                                                                                                           \
        cudaError_t e_ = (call);                                                                                   \
        if (e_ != cudaSuccess) {                                                                                   \
            fprintf(stderr, "%s:%d: %s: %s (seed %llu)\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_),   \
                    (unsigned long long)g_seed);                                                                   \
            exit(2);                                                                                               \
        }                                                                                                          \
    } while (0)
// A Strata call that must return 0.
#define CKE(call)                                                                                                  \
    do {                                                                                                           \
        if ((call) != 0) {                                                                                         \
            fprintf(stderr, "%s:%d: %s: %s (seed %llu)\n", __FILE__, __LINE__, #call, st_errmsg(),              \
                    (unsigned long long)g_seed);                                                                   \
            exit(2);                                                                                               \
        }                                                                                                          \
    } while (0)
// A Strata launcher that must return 0, then a device synchronisation (so asynchronous errors land here).
#define CKL(call)                                                                                                  \
    do {                                                                                                           \
        CKE(call);                                                                                                 \
        CK(cudaDeviceSynchronize());                                                                               \
    } while (0)

#endif
