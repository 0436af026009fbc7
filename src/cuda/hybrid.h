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

#ifdef __cplusplus
}
#endif

#endif
