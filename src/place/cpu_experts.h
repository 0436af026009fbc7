// CPU miss workers of hybrid decode (issue #6, docs/HYBRID.md "--pcie-frac"): while the GPU computes the experts of
// a MoE layer that sit in its VRAM cache (and the misses it reads over PCIe), the CPU computes the other misses
// straight from the host expert arena (place/arena.h: the parts are already in the GGUF block format the CPU
// kernels read). The CUDA side (engine/gpu_hybrid.c) calls st_hy_cpu_experts from a host node of the decode graph.
//
// Per expert e of layer l, for one activation row x [n_embd] (the layer's normalized FFN input):
//   y_e = down_e(swiglu(gate_e x, up_e x))        (unweighted; the GPU applies the routing weights in rank order)
// with the CPU engine's arithmetic: x quantized once in the gate type's activation format (cpu/dot.h), each product
// by st_cpu_matmul_rows_q with ST_MM_EXPERT on row ranges that are multiples of 8 (so 8-row tiled types keep the
// whole-matrix order), st_swiglu, the SwiGLU output quantized in the down type's format. The result equals
// st_cpu_matmul_rows over each whole matrix bit for bit (tests/place/test_cpu_experts.c).
//
// Work split: one st_pool_run for gate+up+SwiGLU (tasks = experts x row chunks of n_ff), one for down (experts x
// row chunks of n_embd); the activation quantizations run on the calling thread (a few microseconds).
#ifndef STRATA_PLACE_CPU_EXPERTS_H
#define STRATA_PLACE_CPU_EXPERTS_H

#include <stdint.h>

#include "place/arena.h"
#include "util/pool.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_hy_cpu st_hy_cpu;

// Workers for arena a (n_embd, n_ff: the model's; at most max_experts experts per call). n_threads counts the
// calling thread (<= 0: the CPUs this process may use). NULL with st_errmsg when a layer's expert types have no
// CPU kernel or the sizes are not block multiples.
st_hy_cpu *st_hy_cpu_create(const st_arena *a, int64_t n_embd, int64_t n_ff, int max_experts, int n_threads);
void st_hy_cpu_free(st_hy_cpu *c);
int st_hy_cpu_threads(const st_hy_cpu *c);
// The workers spin at least `seconds` after each call before they sleep (util/pool.h st_pool_set_spin).
void st_hy_cpu_set_spin(st_hy_cpu *c, double seconds);
// on: st_hy_cpu_experts records where its calls' time goes (the phases, each pool run's thread start latency and
// busy time; a few clock reads per task); st_hy_cpu_profile_text writes the means so far into buf (1, or 0 when
// the profile is off or empty). 0, or -1 with st_errmsg (out of memory).
int st_hy_cpu_set_profile(st_hy_cpu *c, int on);
int st_hy_cpu_profile_text(const st_hy_cpu *c, char *buf, size_t size);

// out[i][0 .. n_embd) = y_{experts[i]} of layer `layer` for x [n_embd] f32, i < n (n <= max_experts; n == 0: no
// work). Not reentrant (one call at a time per st_hy_cpu). 0, or -1 with st_errmsg (expert id out of range).
int st_hy_cpu_experts(st_hy_cpu *c, uint32_t layer, const float *x, int n, const int32_t *experts, float *const *out);

// Multi-token (hybrid prefill, docs/HYBRID.md "prefill CPU share"): for a chunk's layer with n_tok rows X
// [n_tok][n_embd] (the normalized FFN input) routed by ids/w [n_tok][K] (device order: rank k of token t at
// t * K + k), the experts e with on_cpu[e] != 0 computed here:
//   Y[t] = sum over k in rank order with on_cpu[ids[t][k]] of w[t][k] * y_{ids[t][k]}(X[t])     (0 if none)
// Each expert's tokens go through st_cpu_matmul_rows_q as one batch (its tiled kernels for 8+ tokens), tasks split
// over (expert, row range). Buffers grow to the chunk's pairs on first use. Not reentrant. 0, or -1 with st_errmsg.
int st_hy_cpu_tokens(st_hy_cpu *c, uint32_t layer, const float *X, int64_t n_tok, const int32_t *ids, const float *w,
                     int K, const uint8_t *on_cpu, float *Y);

// Seconds per expert of one st_hy_cpu_tokens call on layer `layer`: n_ex experts (ids 7 apart, shifted by the
// layer) of `tok` tokens each, from synthetic rows (each of the tok * n_expert / K tokens routed top-K to K
// consecutive experts). A warm-up, if wanted, is the caller's. -1 with st_errmsg on error.
double st_hy_cpu_time_tokens(st_hy_cpu *c, uint32_t layer, int K, int tok, int n_ex);

// Measures the CPU expert throughput: `reps` calls of max_experts distinct experts each, cycling over layers and
// experts so the weights come from DRAM, after one warm-up call. Returns seconds per expert of the fastest call
// (> 0), or -1. (The mean let one slow call decide: 228 us per expert once at load against 41-47 us in every other
// run on the same H200 host, 2026-12-01b.)
double st_hy_cpu_time_expert(st_hy_cpu *c, int reps);

// The PCIe share F of a layer's misses. Misses move whole experts: one PCIe miss stalls the GPU for its whole read,
// so it pays only in a layer whose CPU share it shortens by more, i.e. with more than t_pcie / t_cpu misses. A CPU
// that computes ST_HY_SPLIT_PCIE_PER_CPU experts in no more time than the GPU's demand read of one takes every miss:
// F = 0 (the misses a layer really has are fewer than the cache share implies, the lookahead prefetch serving most:
// 0.15-0.66 per layer on the 30B-A3B shape at 16-8 GiB, where t_pcie / t_cpu is 3.3-3.8 and F 0.25 lost 0-4%;
// engine/gpu_hybrid.c). Otherwise the two share: per layer with m misses (m > 0) the GPU reads F * m of them at
// t_pcie seconds each (on top of the hits it computes anyway), the CPU computes (1 - F) * m at t_cpu each after a
// fixed t_fixed (round trip, waking the pool), and both finish together (the 235B-A22B shape in IQ1_M at 8 GiB,
// 3.9 misses per layer, t_pcie / t_cpu 1.2: F 0 8.54 tok/s, 0.3 10.63, 0.5 13.61; 2026-12-01h):
//   F = (t_fixed / m + t_cpu) / (t_pcie + t_cpu), clamped to [0, 1];
// above 0.95, or when the PCIe time the CPU's share saves ((1 - F) * m * t_pcie) does not exceed t_fixed, the split
// is not worth it and the result is 1 (every miss over PCIe). Non-positive or non-finite inputs give 1.
#define ST_HY_SPLIT_PCIE_PER_CPU 2.0
double st_hy_pick_pcie_frac(double t_pcie, double t_cpu, double t_fixed, double misses_per_layer);

#ifdef __cplusplus
}
#endif

#endif
