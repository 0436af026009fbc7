// Hybrid expert placement on the CUDA backend (docs/HYBRID.md), the part engine/gpu.c calls: dense weights stay
// in gpu.c's arena; this owns the host expert arena (place/arena.h, page-locked and mapped into the device), the VRAM
// expert slots (cache + prefill staging), the per-layer expert address tables the fused decode kernels read, the
// prefill slot maps, and the adaptive cache (routing counters, swaps between tokens on a copy stream).
//
// Decode: every table entry points at the expert's VRAM slot or at its record in the mapped host arena, so a miss
// is read by the same kernel over PCIe (zero-copy) and greedy output equals the all-in-VRAM path bit for bit.
// Prefill: per layer, every expert that is not resident is copied into a staging buffer (double-buffered: layer l+1
// copies while layer l computes) and the grouped MoE GEMM reads hits from their slots and misses from staging through
// a slot map (st_cuda_moe_ffn_slots): the same tiles over the same bytes, so again bit-identical.
#ifndef STRATA_ENGINE_GPU_HYBRID_H
#define STRATA_ENGINE_GPU_HYBRID_H

#include <stdint.h>

#include "cuda/gemm.h"
#include "cuda/hybrid.h"
#include "cuda/runtime.h"
#include "engine/gpu.h"
#include "engine/model.h"

typedef struct st_hybrid st_hybrid;

// With a budget (o->gpu_mem_gib > 0): plans the model. *out = NULL when everything fits in the budget (the
// all-in-VRAM path runs), else a hybrid state to finish with st_hybrid_init after the dense upload. -1 (st_errmsg)
// when the budget cannot hold the dense weights, KV cache and scratch (the message gives the minimum).
int st_hybrid_plan(const st_model *m, const st_gpu_load_opts *o, st_hybrid **out);
// Builds the arena, allocates the slots, fills the cache and uploads the tables. dense_bytes: what gpu.c uploaded.
int st_hybrid_init(st_hybrid *h, st_cuda_ctx *ctx, uint64_t dense_bytes);
void st_hybrid_free(st_hybrid *h);
// Layer l's decode table: device [n_expert][3] gate/up/down addresses (decode.h), valid until st_hybrid_free.
const void *const *st_hybrid_layer_table(const st_hybrid *h, uint32_t l);

// Enqueued in the forward pass (capturable): counts layer l's routed experts; decode = 1 also counts hits/misses.
int st_hybrid_count(st_hybrid *h, uint32_t l, const int32_t *ids, int n_pairs, int decode, cudaStream_t st);
// The same count's arguments, for the router launch that counts in its last block (st_cuda_router_topk_count).
void st_hybrid_count_args(const st_hybrid *h, uint32_t l, int decode, st_hy_count_args *a);
// Start of a prefill chunk of n_tok tokens: finishes swaps in flight, picks the CPU's share of the experts (small
// chunks), refreshes the slot maps, starts staging layers 0 (and 1). scratch_bytes: the first bytes of the lent
// scratch (st_hybrid_scratch_lend) the chunk uses, whose own slots' copies it drops; 0 where none is lent.
int st_hybrid_prefill_begin(st_hybrid *h, int n_tok, size_t scratch_bytes, st_gpu_hybrid_stats *stats,
                            cudaStream_t st);
// Layer l's MoE of a prefill chunk (after st_hybrid_prefill_begin): waits for its staging, runs the grouped GEMM
// through the slot map, then queues the staging of layer l + n_buffers. Same arguments as st_cuda_moe_ffn.
int st_hybrid_moe_prefill(st_hybrid *h, st_gemm_ctx *gemm, int engine, uint32_t l, const float *X,
                          const int32_t *ids, const float *w, int n_tok, float *Y, void *scratch,
                          size_t scratch_bytes, cudaStream_t st);
// Before an evaluation: flips the table entries of swaps whose copies have finished (stream-ordered).
int st_hybrid_before_eval(st_hybrid *h, cudaStream_t st);
// After an evaluation (st idle): counts tokens; every period reads the counters back, decays the frequencies and
// starts the next swaps on the copy stream. force: read back now (for statistics).
int st_hybrid_after_eval(st_hybrid *h, st_gpu_hybrid_stats *stats, int64_t n_decode, int64_t n_prefill, int force,
                         cudaStream_t st);
// CPU misses (--pcie-frac F < 1, docs/HYBRID.md): 1 when one-token decode steps take st_hybrid_moe_decode.
int st_hybrid_cpu_split(const st_hybrid *h);
// The split's gate has it off (the next decode steps read every miss over PCIe; a decode graph of their own).
int st_hybrid_split_gated(const st_hybrid *h);
// Layer l's MoE of a one-token decode step with a share of the misses on the CPU, enqueued on st after the router
// (ids, wts) and st_hybrid_count (capturable: the CPU part is a host node on a side stream):
//   classify the K experts (hit / PCIe miss / CPU miss) and export the CPU's ids and the row xn to mapped memory;
//   fork: host node -> CPU miss workers compute their experts into mapped memory;
//   meanwhile on st: GLU + down of the hits and PCIe misses (the decode kernels of the all-GPU path, CPU ranks
//   skipped); a layer without CPU misses ends there (x += the down kernel's rank-order sum);
//   join: x += the rank-order weighted sum over all K, each expert's output from the GPU or the CPU.
//   xn: device f32 [n_embd] (the router's input); xq: its quantized row for the gate/up type; act: device scratch
//   f32 [K][n_ff_exp]; actq: its quantized rows (st_cuda_moe_glu_q's, K rows of st_q8_1_row_bytes(n_ff_exp));
//   counters: st_cuda_moe_glu_q's (zero between launches); x: device f32 [n_embd], the residual stream (updated).
//   routed_split: 1, the router launch already classified and rang (st_cuda_router_topk_split with
//   st_hybrid_split_args): only GLU + the down kernel with the join folded in (st_cuda_moe_down_join) follow;
//   2 (st_hybrid_glu_side), the router launch wrote only logits [n_expert] (st_cuda_router_logits): the GLU
//   launch routes (ids, wts written: [K]), counts, classifies and rings in a side block (norm: the top-k weights
//   renormalised), then the down kernel with the join.
int st_hybrid_moe_decode(st_hybrid *h, uint32_t l, int gu_type, int down_type, const float *xn, const void *xq,
                         int32_t *ids, float *wts, float *act, void *actq, int32_t *counters, float *x,
                         int routed_split, const float *logits, int norm, cudaStream_t st);
// The split folded into the router and down launches (STRATA_HY_SPLIT_FUSED=1, A/B; doorbell path only): 1 when on.
// st_hybrid_split_args gives the router launch layer l's classify arguments (xn: the router's input row).
int st_hybrid_split_fused(const st_hybrid *h);
// STRATA_HY_GLU_SIDE (default 1) and the mode applies now (the prefetch's branch off, or on with STRATA_HY_SNAP,
// default 1; no CPU misses, or all of a layer's misses the CPU's through the fused doorbell split): one-token decode
// layers take st_cuda_router_logits + st_cuda_moe_route_glu_hy (decode.h).
int st_hybrid_glu_side(const st_hybrid *h);
// The router launch's snapshot for layer l's side-block GLU (cuda/hybrid.h st_hy_snap_args): 1 with *a filled where
// the side block decodes with the prefetch's branch on (STRATA_HY_SNAP, default 1), else 0.
int st_hybrid_snap_args(const st_hybrid *h, uint32_t l, st_hy_snap_args *a);
void st_hybrid_split_args(const st_hybrid *h, uint32_t l, const float *xn, st_hy_split_args *a);
// Lookahead prefetch (STRATA_HY_PREFETCH=P, cuda/hybrid.h), one-token decode steps only, all capturable:
// st_hybrid_step_begin at the step's start (progress word reset), st_hybrid_prefetch after layer l's FFN norm
// (forks a side branch: layer l+1's router on xn picks P experts, the missing ones are copied and published),
// st_hybrid_step_end before the LM head (joins the branch). No-ops when the prefetch is off.
int st_hybrid_prefetch_on(const st_hybrid *h);
// The prefetch is set up but its gate (STRATA_HY_PF_GATE, default 2) has the branch off: decode steps leave it out
// (a graph of their own); st_hybrid_prefetch_on is 0 meanwhile.
int st_hybrid_prefetch_gated(const st_hybrid *h);
// Tokens per prefill chunk the plan's scratch is for (-ub, else ST_PLAN_PREFILL_CHUNK, halved to fit).
int st_hybrid_prefill_chunk(const st_hybrid *h);
// A session's prefill GEMM / MoE scratch of `bytes` in the prefetch's own slots (the plan's scratch_lent_bytes), or
// NULL (off, too small, or lent to another session): the session then allocates its own. Every prefill step drops the
// prefetch copies under the part it uses first (st_hybrid_prefill_begin). st_hybrid_scratch_return takes it back.
void *st_hybrid_scratch_lend(st_hybrid *h, size_t bytes);
void st_hybrid_scratch_return(st_hybrid *h, const void *p);
// 1 (default): a prefill step claims only the part of the lent scratch it uses; 0: all of it
// (STRATA_HY_PF_SCRATCH_STEP=0).
int st_hybrid_scratch_step(const st_hybrid *h);
// The VRAM the plan set aside for one session (KV cache of its context and compute scratch), and that context.
uint64_t st_hybrid_session_budget(const st_hybrid *h, int64_t *n_ctx);
int st_hybrid_step_begin(st_hybrid *h, cudaStream_t st);
int st_hybrid_prefetch(st_hybrid *h, uint32_t l, int router_type, const void *router_next, const float *xn,
                       cudaStream_t st);
int st_hybrid_step_end(st_hybrid *h, cudaStream_t st);
// Fills the model-level fields of stats (active, slots, sizes).
void st_hybrid_describe(const st_hybrid *h, st_gpu_hybrid_stats *stats);

#endif
