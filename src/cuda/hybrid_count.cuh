// The hybrid placement's routing count (hybrid.h st_cuda_hy_count) as a device function of one block's threads,
// shared by its own launch (hybrid.cu) and the router launch's last block (decode.cu st_cuda_router_topk_count).
#ifndef STRATA_CUDA_HYBRID_COUNT_CUH
#define STRATA_CUDA_HYBRID_COUNT_CUH

#include "cuda/common.cuh"  // st_tbl_entry
#include "cuda/hybrid.h"

// Whether an expert whose gate address is w sits in the VRAM slots [lo, hi) (else it is a miss in the host arena).
__device__ __forceinline__ bool hy_in_vram(const void *w, const void *lo, const void *hi) {
    return (const uint8_t *)w >= (const uint8_t *)lo && (const uint8_t *)w < (const uint8_t *)hi;
}

// Whether a routed pair whose gate address is w was served from the lookahead prefetch's slots.
__device__ __forceinline__ bool hy_pf_hit(const st_hy_count_args &a, const uint8_t *w) {
    return w >= (const uint8_t *)a.pf.lo && w < (const uint8_t *)a.pf.hi;
}

// The decode statistics' atomics (a.sel_miss set): n_pairs selections, of which misses PCIe misses and pf_hits
// served by the prefetch; integer sums, so any thread may add any part.
__device__ __forceinline__ void hy_count_stats(const st_hy_count_args &a, unsigned n_pairs, unsigned misses,
                                               unsigned pf_hits) {
    if (n_pairs) atomicAdd(&a.sel_miss[0], n_pairs);
    if (misses) atomicAdd(&a.sel_miss[1], misses);
    if (pf_hits && a.pf.hits) atomicAdd(a.pf.hits, (unsigned long long)pf_hits);
}

// Threads tid < nthreads of one block; ids [n_pairs] written before (and visible to) them.
__device__ inline void hy_count_pairs(const int32_t *ids, int n_pairs, const st_hy_count_args &a, int tid,
                                      int nthreads) {
    if (a.pf.progress && tid == 0) atomicExch(a.pf.progress, a.pf.layer);  // before any MoE kernel of the layer
    const uint8_t *lo = (const uint8_t *)a.vram_lo, *hi = (const uint8_t *)a.vram_hi;
    unsigned misses = 0, pf_hits = 0;
    for (int p = tid; p < n_pairs; p += nthreads) {
        const int e = ids[p];
        if (e < 0 || e >= a.n_expert) continue;
        atomicAdd(&a.counts[e], 1u);
        if (a.sel_miss) {
            const uint8_t *w = st_tbl_entry(a.table, 3 * (size_t)e);
            misses += hy_in_vram(w, lo, hi) ? 0u : 1u;
            pf_hits += hy_pf_hit(a, w) ? 1u : 0u;
        }
    }
    if (a.sel_miss) hy_count_stats(a, tid == 0 ? (unsigned)n_pairs : 0u, misses, pf_hits);
}

#endif
