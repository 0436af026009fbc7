// Small kernels of the hybrid expert placement (docs/HYBRID.md, engine/gpu_hybrid.c): routing counters for the
// adaptive expert cache, and stream-ordered updates of the per-layer expert address tables that the fused decode
// kernels read (decode.h). Launchers are C-callable, enqueue only (capturable in a CUDA graph) and return 0, or -1
// with st_errmsg.
#ifndef STRATA_CUDA_HYBRID_H
#define STRATA_CUDA_HYBRID_H

#include <stddef.h>
#include <stdint.h>

#include "cuda/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

// Counts the routed experts of one layer's step:
//   for p < n_pairs: counts[ids[p]] += 1;
//   if sel_miss (decode statistics): sel_miss[0] += n_pairs, and sel_miss[1] += 1 for every pair whose expert's
//   gate address in `table` (the layer's [n_expert][3] address table) lies outside [vram_lo, vram_hi): a miss, read
//   over PCIe from the host arena.
//   ids: device int32 [n_pairs] (valid ids in [0, n_expert)); counts: device uint32 [n_expert] of this layer;
//   sel_miss: device uint32 [2] of this layer or NULL. Integer atomics only (order-independent).
int st_cuda_hy_count(const int32_t *ids, int n_pairs, int n_expert, const void *const *table, const void *vram_lo,
                     const void *vram_hi, uint32_t *counts, uint32_t *sel_miss, cudaStream_t stream);

// Up to ST_HY_MAX_UPDATES table entries written in one launch (the values travel as kernel arguments, so the host
// needs no buffer that outlives the call): table[u.index * 3 + k] = u.ptr[k] for k < 3.
#define ST_HY_MAX_UPDATES 32
typedef struct st_hy_update {
    int64_t index;         // entry index in the whole table: layer * n_expert + expert
    const void *ptr[3];    // gate, up, down addresses (device-accessible)
} st_hy_update;
int st_cuda_hy_set_table(const void **table, const st_hy_update *u, int n, cudaStream_t stream);


// ---- CPU misses (--pcie-frac < 1, docs/HYBRID.md) -----------------------------------------------------------------

// Classifies the K selected experts of one decode token of one layer (cuda/hybrid_split.h: hit, PCIe miss or CPU
// miss; a miss = the gate address in `table` outside [vram_lo, vram_hi)) and exports the CPU's work:
//   ids_gpu[k] = ids[k] for hits and PCIe misses, -1 for CPU misses (the GPU kernels skip -1: no weight reads);
//   meta[0] = n_cpu, meta[1 + i] = rank, meta[1 + 32 + i] = expert id of the i-th CPU miss (rank order);
//   hx[0 .. n_embd) = x (only when n_cpu > 0);
//   *carry: the layer's error-diffusion residue (st_hy_split_cpu), *cpu_count += n_cpu (if cpu_count).
//   ids: device int32 [K] (K <= 32); x: device f32 [n_embd]; ids_gpu: device int32 [K]; meta: int32 [65] and hx:
//   f32 [n_embd], both page-locked host memory mapped into the device (device pointers); carry, cpu_count: device
//   uint32 [1]. cpu_q16: st_hy_cpu_q16(F). One block.
#define ST_HY_META_INTS 65
int st_cuda_hy_classify(const int32_t *ids, int K, int n_expert, const void *const *table, const void *vram_lo,
                        const void *vram_hi, uint32_t cpu_q16, uint32_t *carry, int32_t *ids_gpu, int32_t *meta,
                        const float *x, float *hx, int n_embd, uint32_t *cpu_count, cudaStream_t stream);

// The rank-order weighted sum of K expert outputs and the residual add, as the fused down kernel's (decode.h
// st_cuda_moe_down_q: o = w[0] y_0; o = o + w[k] y_k ...; out = add + o, each step IEEE-rounded), where y_k is
// y_gpu row k when ids_gpu[k] >= 0, else y_cpu row k (a CPU miss: host memory mapped into the device, read uncached):
//   out[r] = add[r] + o[r] for r < n_embd; out may alias add. y_gpu: device f32 [K][n_embd]; y_cpu: mapped
//   f32 [K][n_embd]; w: device f32 [K].
int st_cuda_hy_combine(const int32_t *ids_gpu, const float *w, const float *y_gpu, const float *y_cpu, int K,
                       int n_embd, float *out, const float *add, cudaStream_t stream);

// ---- doorbell: the CPU branch without a host node (STRATA_HY_DOORBELL=1 in the engine) ------------------------
//
// bell: 4 words of page-locked host memory mapped into the device (its device address here), seq: one word of
// device memory; both zeroed once, one pair per stream of splits. The classify kernel increments *seq (value s);
// when it exported CPU misses it writes bell[2] = layer and then, after a system fence, bell[0] = s; with none it
// writes bell[1] = s itself. A host thread that sees bell[0] change reads the exports, computes those experts into
// y_cpu and then writes bell[1] = s (release). The combine kernel first waits until bell[1] == *seq, polling system
// memory; after ST_HY_BELL_TIMEOUT_NS it gives up, writes bell[3] = 1 and the CPU rows it reads are NaN, so a lost
// host thread shows as an error, never as a hang.
#define ST_HY_BELL_TIMEOUT_NS 5000000000ull
int st_cuda_hy_classify_bell(const int32_t *ids, int K, int n_expert, const void *const *table, const void *vram_lo,
                             const void *vram_hi, uint32_t cpu_q16, uint32_t *carry, int32_t *ids_gpu, int32_t *meta,
                             const float *x, float *hx, int n_embd, uint32_t *cpu_count, uint32_t *seq,
                             uint32_t *bell, int layer, cudaStream_t stream);
int st_cuda_hy_combine_bell(const int32_t *ids_gpu, const float *w, const float *y_gpu, const float *y_cpu, int K,
                            int n_embd, float *out, const float *add, const uint32_t *seq, uint32_t *bell,
                            cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
