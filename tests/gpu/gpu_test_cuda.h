// CUDA helpers shared by the GPU parity tests (header-only). The including test defines, before including it,
//   static uint64_t g_seed;   // printed with every fatal error, so a failure can be rerun (STRATA_SEED)
//   static st_rng g_rng;      // fresh random inputs
// and includes <cuda_runtime_api.h>, util/err.h and util/rng.h.
#ifndef STRATA_TESTS_GPU_TEST_CUDA_H
#define STRATA_TESTS_GPU_TEST_CUDA_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu/ops.h"    // st_rope_cache
#include "gpu_check.h"  // CK, CKE, CKL

static inline void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}
// Device memory, poisoned: 0xffffffff is a NaN as f32, 0xffff a NaN as f16, so unwritten outputs fail the checks.
static inline void *dalloc(size_t n) {
    void *p = NULL;
    CK(cudaMalloc(&p, n ? n : 1));
    CK(cudaMemset(p, 0xff, n ? n : 1));
    return p;
}
static inline void *dup_h2d(const void *h, size_t n) {
    void *p = dalloc(n);
    CK(cudaMemcpy(p, h, n, cudaMemcpyHostToDevice));
    return p;
}
static inline void d2h(void *h, const void *d, size_t n) { CK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost)); }
static inline void poison(void *d, size_t n) { CK(cudaMemset(d, 0xff, n)); }
// The RoPE table st_cuda_qk_norm_rope_kv reads ([n_pos][n_rot / 2][2] cos, sin), made as the engine makes it.
static inline float *rope_table_h2d(int64_t n_pos, int n_rot, float freq_base, float freq_scale) {
    float *h = xmalloc(sizeof(float) * (size_t)(n_pos * n_rot));
    for (int64_t p = 0; p < n_pos; p++) st_rope_cache(h + p * n_rot, n_rot, p, freq_base, freq_scale);
    float *d = dup_h2d(h, sizeof(float) * (size_t)(n_pos * n_rot));
    free(h);
    return d;
}
static inline float *rand_f32(int64_t n, float sd) {
    float *x = xmalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = st_rng_normal(&g_rng) * sd;
    return x;
}

#endif
