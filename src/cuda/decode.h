// Fused kernels of the one-token decode step (issue #4): fewer, larger launches per layer than the operator-by-
// operator path (ops.h + mmvq.h + quantize_act.h). A Qwen3-MoE layer goes from 18 launches to 11:
//   rmsnorm+quant | Q/K/V | qk-norm+rope+kv | attention (split, combine) | quant | wo | rmsnorm+residual+quant |
//   router+top-k | gate/up GLU + quant | down + weighted sum + residual
//
// Numerics: the int8 activations are exactly the CPU backend's (Q8_0 / Q8_1 / Q8_K rules of quantize_act.h), the
// integer dot products are exact, and the float steps follow the CPU reference's order where the old kernels did
// (rmsnorm: squares rounded to float, summed in double; expert outputs weighted and added in rank order, then added
// to the residual, with IEEE-rounded operations so fast math cannot contract them). What differs from the CPU is only
// the float summation order inside one dot product (as before).
//
// Cross-block steps use the "last block finishes" pattern: every block writes its part, fences, and bumps a counter;
// the block that brings the counter to its target does the final step (quantization of a 256-row chunk, the top-k
// of the router) and resets the counter to 0, so the kernels stay graph-replayable. Counters live in a zeroed
// device array the caller owns (st_cuda_dec_counters_bytes); no two launches that may run at once share one.
//
// All launchers are C-callable, enqueue only (no sync, no allocation: capturable in a CUDA graph) and return 0, or
// -1 with st_errmsg for unsupported arguments (the caller then takes the unfused path) or a launch error.
#ifndef STRATA_CUDA_DECODE_H
#define STRATA_CUDA_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "cuda/hybrid.h"  // st_hy_count_args
#include "cuda/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

// Weight types the fused matrix-vector kernels take (one warp per row, n_tok = 1): Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// Q2_K .. Q6_K. Others (IQ*, float) stay on st_cuda_mmvq.
int st_cuda_dec_supported(int weight_type);

// Counters (int32) one launch of each fused kernel may need, for n_tok tokens and n_used experts per token:
// bytes of zeroed device memory to pass as `counters`. Zero it once (cudaMemset) after allocation.
size_t st_cuda_dec_counters_bytes(int64_t n_ff_exp, int n_used, int n_tok);

// RMSNorm with the residual add and the activation quantization in the CPU's format fused in, per row r < n_rows:
//   if res: x[r] += res[r] (written back);  v = x[r] * (1 / sqrt(mean(x^2) + eps)) * w  (as st_rmsnorm)
//   y[r] = v (if y);  yq row r = v quantized in act_format (if yq; rows st_cuda_q8_1_row_bytes(n) apart)
//   act_format: ST_TYPE_Q8_0, Q8_1 or Q8_K (st_cuda_act_format of the consumer's weights); n % 32 (Q8_K: % 256).
//   n <= 12288 (the row is staged in shared memory). One block per row; one row of n % 256 == 0, n <= 8192 with norm
//   weights takes a kernel with one barrier (a group per 256-element span; bit for bit up to the double sum of
//   squares' order), unless st_cuda_rmsnorm_act_set_span(0) or STRATA_NORM_SPAN=0 (A/B; set_span(-1): back to the
//   environment's choice).
void st_cuda_rmsnorm_act_set_span(int on);
int st_cuda_rmsnorm_act(float *y, void *yq, int act_format, float *x, const float *res, const float *w, int n_rows,
                        int n, float eps, cudaStream_t stream);

// Up to ST_DEC_MAX_MATS matrices sharing one quantized input (Q, K and V) in one launch, n_tok = 1:
//   mats[i].y[r] = (add ? add[r] : 0) + dot(mats[i].W row r, x) for r < mats[i].n_out (the sum IEEE-rounded; add
//   may alias y: the residual stream x += O . attn). All ne0 the same; types may differ but must share the
//   activation format of xq (one planar q8_1 row of ne0, quantize_act.h). One warp per output row.
#define ST_DEC_MAX_MATS 4
typedef struct st_cuda_dec_mat {
    int type;          // weight type (st_cuda_dec_supported)
    const void *W;     // [n_out][ne0] rows of `type`, 16-byte aligned
    int64_t n_out;
    float *y;          // [n_out] f32
    const float *add;  // [n_out] f32 added to the dot (NULL: none)
} st_cuda_dec_mat;
int st_cuda_mmvq_multi(const st_cuda_dec_mat *mats, int n_mat, int64_t ne0, const void *xq, cudaStream_t stream);
// (The attention norm folded into this launch, every block normalising x itself, lost on an H200: tg128 -1.2%,
// @ d16384 -2.6%; removed 2026-12-05, docs/experiments/2026-12-05-qkv-norm.patch.)

// MoE router of n_tok tokens in one launch: logits = W . x (float weights, float activations), then per token the
// CPU's route (engine/session.c): softmax (double sum), the top n_used by probability (ties to the lower id),
// renormalised when norm (sum in double, floored at 2^-14).
//   W: [n_expert][ne0] F32 / F16 / BF16; x: [n_tok][ne0] f32; ne0 % 4 == 0; n_expert <= 512; n_used <= 32
//   logits: [n_tok][n_expert] f32 (written: scratch and a debugging aid); ids [n_tok][n_used] int32 in rank order;
//   weights [n_tok][n_used] f32; n_tok <= 8; counters: st_cuda_dec_counters_bytes memory (uses slot 0).
int st_cuda_router_topk(int w_type, const void *W, int64_t ne0, int n_expert, const float *x, int n_tok, int n_used,
                        int norm, float *logits, int32_t *ids, float *weights, int32_t *counters,
                        cudaStream_t stream);
// st_cuda_router_topk, then its last block does st_cuda_hy_count's count of the ids (count->counts NULL: none), so
// a hybrid decode layer needs no count launch between the router and the MoE kernels.
int st_cuda_router_topk_count(int w_type, const void *W, int64_t ne0, int n_expert, const float *x, int n_tok,
                              int n_used, int norm, float *logits, int32_t *ids, float *weights, int32_t *counters,
                              const st_hy_count_args *count, cudaStream_t stream);
// One token (hybrid split, STRATA_HY_SPLIT_FUSED): st_cuda_router_topk_count, then its last block runs
// st_cuda_hy_classify(_bell)'s classify, exports and ring on the route with `split` (hybrid.h), one launch fewer per
// split layer. count->counts must be given (the classify follows the count, as the separate launches do).
int st_cuda_router_topk_split(int w_type, const void *W, int64_t ne0, int n_expert, const float *x, int n_used,
                              int norm, float *logits, int32_t *ids, float *weights, int32_t *counters,
                              const st_hy_count_args *count, const st_hy_split_args *split, cudaStream_t stream);
// One token's logits only (the route is taken by st_cuda_moe_route_glu_q): as st_cuda_router_topk's. snap (NULL:
// none): also the hybrid side block's snapshot of the layer's table and the prefetch's progress word (hybrid.h).
int st_cuda_router_logits(int w_type, const void *W, int64_t ne0, int n_expert, const float *x, float *logits,
                          const st_hy_snap_args *snap, cudaStream_t stream);

// The FFN norm folded into the router launch, one token, no residual (the O launch adds it: st_cuda_dec_mat.add):
// logits and xq exactly as st_cuda_rmsnorm_act(NULL, xq, act_format, x, NULL, norm_w, 1, ne0, eps) +
// st_cuda_router_logits(.., xn, ..) give them (bit for bit, up to the double sum of squares' order: see
// decode_rows.cuh wn_scale). Every router group normalises the row itself in registers, and one more group per
// 256-element span quantizes it: one launch fewer per MoE layer, no tail. Supported (st_cuda_router_fold_supported):
// F32 router, ne0 a multiple of 256 up to 2048, 1 to 65536 experts, act_format Q8_0 / Q8_1 / Q8_K.
int st_cuda_router_fold_supported(int w_type, int64_t ne0, int n_expert, int act_format);
int st_cuda_router_fold(int w_type, const void *W, int64_t ne0, int n_expert, const float *x, const float *norm_w,
                        float eps, void *xq, int act_format, float *logits, cudaStream_t stream);

// One token: st_cuda_rmsnorm_act(xn, xq, act_format, x, res, norm_w, 1, ne0, eps) + st_cuda_router_topk(.., xn, 1,
// ..) in one launch, bit for bit (each router block normalises the row itself; the last block writes x + res, xn
// (may be NULL) and xq, and routes). ne0 % 32 == 0 (% 256 for Q8_K), ne0 <= 12288. A/B: STRATA_ROUTER_NORM=1.
int st_cuda_router_norm_topk(int w_type, const void *W, int64_t ne0, int n_expert, float *x, const float *res,
                             const float *norm_w, float eps, float *xn, void *xq, int act_format, int n_used, int norm,
                             float *logits, int32_t *ids, float *weights, int32_t *counters, cudaStream_t stream);

// Per-expert weight addresses of one layer, so the experts need not be one contiguous stack (the hybrid CPU/GPU
// issue points some at VRAM cache slots and others at host memory mapped into the device):
//   table[3 * e + 0]: gate rows [n_ff][n_embd]; [3 e + 1]: up rows [n_ff][n_embd]; [3 e + 2]: down rows
//   [n_embd][n_ff]; device array of n_expert * 3 device-accessible pointers, each 16-byte aligned.

// Gate/up GLU of the n_tok * n_used selected (token, slot) pairs, p = t * n_used + k, expert ids[p]:
//   act[p][r] = silu(dot(gate_e row r, x_t)) * dot(up_e row r, x_t)   (silu(g) = g / (1 + exp(-g)), as mmvq glu)
//   and actq row p = act[p] quantized in act_format (the down projection's input format), by the last block of
//   each 256-row chunk (32-row for Q8_0/Q8_1 when n_ff % 256 != 0).
//   xq: n_tok planar q8_1 rows of n_embd (format of the gate/up type); act: [n_pairs][n_ff] f32;
//   actq: n_pairs planar rows of n_ff; n_ff % 32 == 0 (% 256 for Q8_K). An id outside [0, n_expert) gives NaN.
int st_cuda_moe_glu_q(int gu_type, const void *const *table, int n_expert, int64_t n_embd, int64_t n_ff,
                      const void *xq, const int32_t *ids, int n_tok, int n_used, float *act, void *actq,
                      int act_format, int32_t *counters, cudaStream_t stream);

// Test hook: for each of n_rows rows of n_expert (<= 128) logits, the ids GLU_FAST_ROUTE's GLU blocks take from the
// logits' top n_used + 1 (ids_fast [n_rows][n_used], -1 where ok[row] is 0: that path defers to the route) and the
// route's ids and weights (ids_ref, w_ref [n_rows][n_used]). Where ok, ids_fast must equal ids_ref.
int st_cuda_route_fast_check(const float *logits, int n_rows, int n_expert, int n_used, int norm, int32_t *ids_fast,
                             int32_t *ok, int32_t *ids_ref, float *w_ref, cudaStream_t stream);

// One token: the route from the router's logits [n_expert] (as st_cuda_router_topk's last block: ids and weights
// written, [n_used]) taken inside the GLU launch, then st_cuda_moe_glu_q of those experts; bit for bit
// st_cuda_router_topk + st_cuda_moe_glu_q. n_used <= 32, n_expert <= 512. Default for one token
// (STRATA_GLU_ROUTE=0: the router routes).
// aff (NULL or gate0 NULL: the table): where every expert of the layer lies at a fixed stride (all in VRAM), the
// launch may take expert e's rows at gate0 / up0 + e stride without the table's load (GLU_AFFINE, the default;
// st_cuda_glu_affine_enabled says whether this build does).
typedef struct {
    const void *gate0, *up0;  // expert 0's gate and up rows [n_ff][n_embd]
    long long stride;         // bytes from expert e to e + 1 (may be negative); all three 16-byte aligned
    // (GLU_SIDE_DOWN_PF builds; down0 NULL: none) expert e's down matrix [n_embd][n_ff] at down0 + e down_stride,
    // down_bytes long, which the launch's side block prefetches into L2 once it has routed
    const void *down0;
    long long down_stride, down_bytes;
} st_cuda_glu_affine;
int st_cuda_glu_affine_enabled(void);
int st_cuda_moe_route_glu_q(int gu_type, const void *const *table, int n_expert, int64_t n_embd, int64_t n_ff,
                            const void *xq, const float *logits, int norm, int n_used, int32_t *ids, float *weights,
                            float *act, void *actq, int act_format, int32_t *counters, const st_cuda_glu_affine *aff,
                            cudaStream_t stream);
// Hybrid one-token decode (STRATA_HY_GLU_SIDE, after st_cuda_router_logits): st_cuda_moe_route_glu_q plus one
// side block that routes (ids, weights written) and then counts by `count` (its progress word left alone) or, with
// `split`, runs the router tail's classify, count, exports and ring (st_cuda_router_topk_split's; ids_gpu written
// for st_cuda_moe_down_join). With `split` every miss must be the CPU's (cpu_q16 ST_HY_Q16): a GLU block skips its rank
// (NaN rows) when the rank's gate entry lies outside [vram_lo, vram_hi), as the side block's classify decides from
// the same entry; so nothing may rewrite the layer's table entries during the launch (the lookahead prefetch's
// copies publish entries at any time: the side block decodes only with its branch off). Bit for bit
// st_cuda_router_topk_split / _count + st_cuda_moe_glu_q.
int st_cuda_moe_route_glu_hy(int gu_type, const void *const *table, int n_expert, int64_t n_embd, int64_t n_ff,
                             const void *xq, const float *logits, int norm, int n_used, int32_t *ids, float *weights,
                             float *act, void *actq, int act_format, int32_t *counters,
                             const st_hy_count_args *count, const st_hy_split_args *split, cudaStream_t stream);

// Down projection of the selected experts, the weighted sum in rank order and the residual add, per token t:
//   o = w[t][0] * y_0; o = o + w[t][1] * y_1; ...  (y_k = dot(down_{ids[t][k]}, actq row t * n_used + k), each
//   product and sum IEEE-rounded, the CPU's order), then out[t][j] = (add ? add[t][j] : 0) + o[j].
//   out, add: [n_tok][n_embd] f32 (add may alias out: x += moe(x)); n_used <= 32.
// Tests: on (1), the down kernels' guesses of each rank's expert (read before their dependency wait) are all made
// wrong, so the path after a wrong guess runs; returns whether the build guesses at all (DOWN_GUESS).
int st_cuda_dec_down_guess_poison(int on);
int st_cuda_moe_down_sum(int down_type, const void *const *table, int n_expert, int64_t n_embd, int64_t n_ff,
                         const void *actq, const int32_t *ids, const float *weights, int n_tok, int n_used,
                         float *out, const float *add, cudaStream_t stream);
// Hybrid decode with CPU misses (cuda/hybrid.h, one token): st_cuda_moe_down_sum of ids_gpu, whose -1 ranks the
// CPU computes. When no rank is -1 it is st_cuda_moe_down_sum (out written); otherwise out is left alone and every
// rank's unweighted row goes to yk [n_used][n_embd] (-1 ranks: NaN) for st_cuda_hy_combine's rank-order sum.
int st_cuda_moe_down_split(int down_type, const void *const *table, int n_expert, int64_t n_embd, int64_t n_ff,
                           const void *actq, const int32_t *ids_gpu, const float *weights, int n_used, float *out,
                           const float *add, float *yk, cudaStream_t stream);
// The same with the combine folded in (hybrid split fused, hybrid.h st_hy_join_args): where a rank is -1, every block
// waits for the doorbell's answer (the first to arrive polls host memory, the others join->leader in L2) and sums
// its rows in rank order with the CPU's rows from join->y_cpu: out as st_cuda_moe_down_split + st_cuda_hy_combine_bell
// give it, bit for bit.
int st_cuda_moe_down_join(int down_type, const void *const *table, int n_expert, int64_t n_embd, int64_t n_ff,
                          const void *actq, const int32_t *ids_gpu, const float *weights, int n_used, float *out,
                          const float *add, const st_hy_join_args *join, cudaStream_t stream);

// ---- round 2: split-adaptive decode attention, PDL -----------------------------------------------------------

// Programmatic dependent launch for every launcher of this header (sm_90+; plain launches elsewhere): on by
// default; st_cuda_dec_set_pdl(0) turns it off process-wide (A/B timing, STRATA_NO_PDL=1 in the engine).
// st_cuda_dec_pdl() says whether launches on the current device use it now.
void st_cuda_dec_set_pdl(int on);
int st_cuda_dec_pdl(void);
// Self-test (tests/gpu): the decode kernels' four-at-once group sums (g32_sum4, g32_sum4_t) against the
// one-value butterfly on n_warps warps of hashed inputs; *mismatches: lanes whose bits differ (0 when they agree).
int st_cuda_dec_selftest_sum4(unsigned long long seed, int n_warps, int *mismatches);

// Decode attention v2 (decode_attn.cu) of one token at position *d_pos over cache positions 0 .. *d_pos, the same
// contract as st_cuda_attn_decode (attention.h: cache layout, q already normalised and rotated, f32 arithmetic)
// but: the number of non-empty splits follows the length read on the device (n_split is only the grid, the most
// splits used; chunks of max(L / n_split, 16..64) positions, rounded up), the splits are merged by the last block
// of each KV head (no second kernel), and, when outq is non-NULL, the output row [n_head * head_dim] is also
// written to outq as one planar q8_1 row in act_format (ST_TYPE_Q8_0 / Q8_1 / Q8_K, the CPU's rules: the O
// projection's input).
//   supported: head_dim 64 or 128, n_head / n_head_kv <= 8, and (outq) (n_head / n_head_kv) * head_dim a multiple
//   of the format's block (32; 256 for Q8_K) so each KV head quantizes whole blocks; act_format < 0: no outq.
//   workspace: st_cuda_attn_dec_ws_bytes() bytes, ZEROED once after allocation (its head holds the counters; every
//   launch leaves them zero again). One workspace per stream (launches sharing one must not overlap).
//   out, q, caches, outq: 16-byte aligned.
int st_cuda_attn_dec_supported(int head_dim, int n_head, int n_head_kv, int act_format);
int st_cuda_attn_dec_splits(int n_head_kv, int n_sm);  // the grid for n_sm multiprocessors (~2 blocks per SM)
size_t st_cuda_attn_dec_ws_bytes(int n_head, int n_head_kv, int head_dim, int n_split);
int st_cuda_attn_dec(float *out, void *outq, int act_format, const float *q, const void *k_cache,
                     const void *v_cache, int kv_f16, const int32_t *d_pos, int n_head, int n_head_kv, int head_dim,
                     float scale, int n_split, void *workspace, cudaStream_t stream);
// Rope mode (st_cuda_attn_dec_ex with a rope): st_cuda_qk_norm_rope_kv(q, k, v, q_norm, k_norm, k_cache, v_cache,
// 1, d_pos, 1, n_head, n_head_kv, head_dim, n_rot, eps, rope_cs, neox) + st_cuda_attn_dec(.., q, ..) in one launch,
// bit for bit up to the double sum of squares' order, where st_cuda_attn_dec_rope_supported (head_dim 128 rotated
// whole, f16 cache, the sm_90 tensor-core kernel): q is read unrotated and left so; the K/V row at the step's
// position is written.
typedef struct st_cuda_attn_rope {
    const float *k, *v;            // [n_head_kv][head_dim] the step's K and V rows (the Q/K/V projection's outputs)
    const float *q_norm, *k_norm;  // [head_dim] QK-norm gains, or NULL
    const float *rope_cs;          // [n_ctx][n_rot / 2] (cos, sin) float pairs, st_cuda_qk_norm_rope_kv's table
    float eps;
    int n_rot, neox;
} st_cuda_attn_rope;
int st_cuda_attn_dec_rope_supported(int head_dim, int n_rot, int kv_f16);
// st_cuda_attn_dec with options: rope (NULL: q already normalised and rotated, this step's K/V row in the caches),
// wide (nonzero: ATC_NW_WIDE = 8 warps per block instead of 4 where the sm_90 TMA kernel runs with head_dim 128;
// faster at long contexts, slower at short ones: decode_attn.cu).
int st_cuda_attn_dec_ex(float *out, void *outq, int act_format, const float *q, const void *k_cache,
                        const void *v_cache, int kv_f16, const int32_t *d_pos, int n_head, int n_head_kv, int head_dim,
                        float scale, int n_split, void *workspace, const st_cuda_attn_rope *rope, int wide,
                        cudaStream_t stream);
// With an f16 cache on sm_80+ and the tensor-core kernel switched on, st_cuda_attn_dec runs a tensor-core kernel
// (mma.sync m16n8k16; the query and the probabilities as f16 hi + lo pairs, so ~f32 accuracy) that merges more than 8
// splits in two levels. On by default: STRATA_ATTN_TC=0 or st_cuda_attn_dec_set_tc(0) turns it off
// process-wide (0: off, -1: back to the environment's choice). st_cuda_attn_dec_tc(kv_f16) says which kernel a
// launch on the current device takes now (1: tensor cores).
void st_cuda_attn_dec_set_tc(int on);
int st_cuda_attn_dec_tc(int kv_f16);

// MoE version 2, the GLU's quantization moved into the down kernel: st_cuda_moe_glu writes act only (as
// st_cuda_moe_glu_q without actq, no counters, no last-block phase); st_cuda_moe_down_q takes that f32 act
// [n_tok * n_used][n_ff], quantizes each token's n_used rows in act_format (byte-identical to the CPU's, as
// moe_glu_q's actq) into shared memory in every block, then does st_cuda_moe_down_sum's down + rank-order sum +
// residual. Needs st_cuda_moe_down_q_smem(n_ff, n_used) <= ST_DEC_DOWN_Q_MAX_SMEM (else use the version 1 pair).
// The hybrid path's PCIe timing uses this pair (gpu_hybrid.c); the engine's one-token decode by it (STRATA_MOE_V2=1,
// the route in st_cuda_moe_route_glu) lost on an H200, tg128 -7.6%: removed 2026-12-05,
// docs/experiments/2026-12-05-moe-v2.patch.
#define ST_DEC_DOWN_Q_MAX_SMEM 40960
int st_cuda_moe_glu(int gu_type, const void *const *table, int n_expert, int64_t n_embd, int64_t n_ff,
                    const void *xq, const int32_t *ids, int n_tok, int n_used, float *act, cudaStream_t stream);
size_t st_cuda_moe_down_q_smem(int64_t n_ff, int n_used);
int st_cuda_moe_down_q(int down_type, const void *const *table, int n_expert, int64_t n_embd, int64_t n_ff,
                       const float *act, int act_format, const int32_t *ids, const float *weights, int n_tok,
                       int n_used, float *out, const float *add, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
