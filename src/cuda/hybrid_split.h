// The rule that splits one MoE layer's expert-cache misses of a decode token between the GPU (zero-copy reads of
// the host arena over PCIe) and the CPU miss workers (--pcie-frac, docs/HYBRID.md). C-compatible: the classify
// kernel (cuda/hybrid.cu) runs it on the device, tests/place/test_cpu_experts.c checks it with gcc.
//
// Classes of the K selected experts of a token (rank order, as the router ranks them):
//   ST_HY_HIT   the expert sits in a VRAM slot: the GPU computes it
//   ST_HY_PCIE  a miss the GPU computes by reading the arena over PCIe
//   ST_HY_CPU   a miss the CPU computes from the arena; the GPU takes its output in the rank-order sum
// Of a layer's n misses, st_hy_split_cpu says how many go to the CPU: error diffusion of the CPU share
// (cpu_q16 / 65536 = 1 - F) over the token stream with a per-layer carry, so the long-run share is exact and every
// token's count is within one of share * n (plain rounding would send every lone miss the same way). The CPU takes
// the misses of the highest ranks (the smallest routing weights), the GPU the rest: a deterministic order.
#ifndef STRATA_CUDA_HYBRID_SPLIT_H
#define STRATA_CUDA_HYBRID_SPLIT_H

#include <stdint.h>

#if defined(__CUDACC__)
#define ST_HY_HD __host__ __device__ __forceinline__
#else
#define ST_HY_HD static inline
#endif

#define ST_HY_HIT 0
#define ST_HY_PCIE 1
#define ST_HY_CPU 2
#define ST_HY_Q16 65536u  // cpu_q16 of "every miss to the CPU"

// The CPU share 1 - pcie_frac in 1/65536 units (pcie_frac clamped to [0, 1]; NaN counts as 1: no CPU work).
ST_HY_HD uint32_t st_hy_cpu_q16(double pcie_frac) {
    if (!(pcie_frac < 1.0)) return 0;
    if (pcie_frac <= 0.0) return ST_HY_Q16;
    return (uint32_t)((1.0 - pcie_frac) * (double)ST_HY_Q16 + 0.5);
}

// How many of n_miss misses (0 <= n_miss <= 32) go to the CPU this token; *carry in [0, 65536) is the layer's
// residue, updated. The result is in [0, n_miss].
ST_HY_HD int st_hy_split_cpu(int n_miss, uint32_t cpu_q16, uint32_t *carry) {
    if (n_miss <= 0) return 0;
    if (cpu_q16 > ST_HY_Q16) cpu_q16 = ST_HY_Q16;
    const uint32_t want = (uint32_t)n_miss * cpu_q16 + (*carry & 0xffffu);  // < (n_miss + 1) * 2^16
    *carry = want & 0xffffu;
    return (int)(want >> 16);
}

// The CPU's ranks of a layer: of the misses (bit k of miss_mask: rank k, K <= 32) the last n_cpu, the highest ranks.
// The classify kernel's warp takes it as is (cuda/hybrid_bell.cuh); st_hy_classify spells it out per rank.
ST_HY_HD uint32_t st_hy_cpu_mask(uint32_t miss_mask, int n_cpu) {
    uint32_t cpu = 0;
    for (int k = 31; k >= 0 && n_cpu > 0; k--)
        if ((miss_mask >> k) & 1u) {
            cpu |= 1u << k;
            n_cpu--;
        }
    return cpu;
}

// Classes of K experts in rank order: is_miss[k] != 0 for misses; the last n_cpu misses (highest ranks) become
// ST_HY_CPU (st_hy_cpu_mask), the other misses ST_HY_PCIE, the rest ST_HY_HIT. Returns the number of misses.
ST_HY_HD int st_hy_classify(const uint8_t *is_miss, int K, int n_cpu, uint8_t *cls) {
    uint32_t miss = 0;
    int n_miss = 0;
    for (int k = 0; k < K; k++)
        if (is_miss[k]) {
            miss |= 1u << k;
            n_miss++;
        }
    const uint32_t cpu = st_hy_cpu_mask(miss, n_cpu);
    for (int k = 0; k < K; k++)
        cls[k] = !((miss >> k) & 1u) ? ST_HY_HIT : ((cpu >> k) & 1u) ? ST_HY_CPU : ST_HY_PCIE;
    return n_miss;
}

#endif
