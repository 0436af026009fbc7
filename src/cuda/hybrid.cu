// Hybrid placement kernels (see hybrid.h).
#include "cuda/hybrid.h"

#include <string.h>

__global__ void k_hy_count(const int32_t *__restrict__ ids, int n_pairs, int n_expert,
                           const void *const *__restrict__ table, const uint8_t *lo, const uint8_t *hi,
                           uint32_t *__restrict__ counts, uint32_t *__restrict__ sel_miss) {
    unsigned misses = 0;
    for (int p = threadIdx.x; p < n_pairs; p += blockDim.x) {
        const int e = ids[p];
        if (e < 0 || e >= n_expert) continue;
        atomicAdd(&counts[e], 1u);
        if (sel_miss) {
            const uint8_t *a = (const uint8_t *)table[3 * e];
            misses += (a < lo || a >= hi) ? 1u : 0u;
        }
    }
    if (sel_miss) {
        if (misses) atomicAdd(&sel_miss[1], misses);
        if (threadIdx.x == 0) atomicAdd(&sel_miss[0], (unsigned)n_pairs);
    }
}

extern "C" int st_cuda_hy_count(const int32_t *ids, int n_pairs, int n_expert, const void *const *table,
                                const void *vram_lo, const void *vram_hi, uint32_t *counts, uint32_t *sel_miss,
                                cudaStream_t stream) {
    if (n_pairs <= 0) return 0;
    if (sel_miss && !table) return st_err("st_cuda_hy_count: miss counting needs the layer's address table");
    const int threads = n_pairs < 256 ? ((n_pairs + ST_WARP_SIZE - 1) / ST_WARP_SIZE) * ST_WARP_SIZE : 256;
    k_hy_count<<<1, threads, 0, stream>>>(ids, n_pairs, n_expert, table, (const uint8_t *)vram_lo,
                                          (const uint8_t *)vram_hi, counts, sel_miss);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : st_cuda_check_at(e, "k_hy_count<<<>>>", __FILE__, __LINE__);
}

struct hy_updates {
    st_hy_update u[ST_HY_MAX_UPDATES];
    int n;
};

__global__ void k_hy_set_table(const void **table, const hy_updates up) {
    const int i = threadIdx.x;
    if (i >= up.n * 3) return;
    const st_hy_update &u = up.u[i / 3];
    table[u.index * 3 + i % 3] = u.ptr[i % 3];
}

extern "C" int st_cuda_hy_set_table(const void **table, const st_hy_update *u, int n, cudaStream_t stream) {
    if (n <= 0) return 0;
    if (n > ST_HY_MAX_UPDATES) return st_err("st_cuda_hy_set_table: %d updates, at most %d per call", n, ST_HY_MAX_UPDATES);
    hy_updates up;
    memset(&up, 0, sizeof up);
    memcpy(up.u, u, sizeof *u * (size_t)n);
    up.n = n;
    k_hy_set_table<<<1, ST_HY_MAX_UPDATES * 3, 0, stream>>>(table, up);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : st_cuda_check_at(e, "k_hy_set_table<<<>>>", __FILE__, __LINE__);
}
