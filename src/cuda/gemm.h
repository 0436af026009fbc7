// Matrix-matrix products for prefill: Y[n_tok][n_out] = X[n_tok][ne0] . W^T with W in any GGUF weight type, and
// the MoE feed-forward with tokens grouped by expert.
//
// Two engines:
//   * cuBLAS ("f16"): W is dequantized to IEEE half rows in a device scratch, X converted to half, then
//     cublasGemmEx (f16 inputs, f32 accumulate and output). Works for every type st_cuda_gemm_supported() lists.
//   * int8 tensor cores ("mmq"): mma.sync s8 on weight tiles unpacked on the fly from the stored blocks (the
//     per-type math of cuda/qblock.h) and activations quantized to int8 per 32 elements; the sub-block scales are
//     applied per 16/32-element group in the epilogue. Reads each weight byte from DRAM once per token tile, no
//     scratch copy of the weights. For types whose offsets fit that scheme (st_cuda_mmq_supported), ne0 % 256 == 0.
// The MoE path groups the (token, slot) pairs by expert with a stable counting sort on the device, so results are
// deterministic (no float atomics). With the mmq engine it needs no host synchronisation (graph-capturable); with
// cuBLAS the per-expert counts are copied to the host once per call (cuBLAS takes sizes on the host).
//
// Layouts: W_dev holds n_out rows of ne0 elements, row r at W_dev + r * st_row_size(type, ne0), 16-byte aligned
// base. An expert stack is [n_expert][n_out][ne0] (expert e at W_dev + e * n_out * row_size). Activations and
// outputs are row-major floats, rows contiguous.
//
// Every function enqueues on `stream` and returns 0, or -1 with st_errmsg (bad arguments, unsupported type, scratch
// too small, CUDA/cuBLAS error). Nothing allocates after st_cuda_gemm_create, so calls may be captured in a CUDA
// graph (except the cuBLAS MoE engine, which synchronises to read the expert counts).
#ifndef STRATA_CUDA_GEMM_H
#define STRATA_CUDA_GEMM_H

#include <stddef.h>
#include <stdint.h>

#include "cuda/gemm_sizes.h"
#include "cuda/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

// Per-device GEMM state: the cuBLAS handle (also published in ctx->cublas for other users; st_cuda_gemm_destroy
// destroys it and clears ctx->cublas), its preallocated workspace, and pinned host memory for MoE counts.
typedef struct st_gemm_ctx st_gemm_ctx;

st_gemm_ctx *st_cuda_gemm_create(st_cuda_ctx *ctx);
void st_cuda_gemm_destroy(st_gemm_ctx *g);

// st_gemm_engine, st_moe_engine: cuda/gemm_sizes.h (with the type lists and the scratch sizes).

// 1 if the cuBLAS engine handles the type: every type with a qblock.h unpacker plus F32, F16, BF16.
int st_cuda_gemm_supported(int weight_type);
// 1 if the int8 engine handles the type (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ2_*, IQ3_*, IQ1_S, IQ4_*,
// MXFP4: every unpacker whose offsets are per 16 or 32 elements).
int st_cuda_mmq_supported(int weight_type);

// 1 if the f16 tensor-core engine (ST_GEMM_TC, ST_MOE_TC) handles the type: the mmq types plus IQ1_M.
int st_cuda_tc_supported(int weight_type);

// Dequantizes n_rows rows of ne0 elements of W_dev (any st_cuda_gemm_supported type) into IEEE half.
// Output row r goes to out_f16 + ((r / group_rows) * dst_group_rows + r % group_rows) * ne0 elements: group_rows =
// dst_group_rows = n_rows is a plain copy; group_rows = n_ff, dst_group_rows = 2 n_ff interleaves two expert
// stacks (gate then up per expert) when called twice with out_f16 offset by n_ff rows.
// Values beyond the f16 range saturate to +-65504.
int st_cuda_dequant_f16(st_cuda_ctx *ctx, int weight_type, const void *W_dev, int64_t ne0, int64_t n_rows,
                        int64_t group_rows, int64_t dst_group_rows, void *out_f16, cudaStream_t stream);

// y_f16[i] = half(x[i]) for n floats (saturating).
int st_cuda_f32_to_f16(st_cuda_ctx *ctx, const float *x, void *y_f16, int64_t n, cudaStream_t stream);

// Device scratch bytes st_cuda_gemm needs for these sizes with this engine (0 possible).
size_t st_cuda_gemm_scratch_bytes(int engine, int weight_type, int64_t ne0, int64_t n_out, int64_t n_tok);

// Y_dev [n_tok][n_out] = X_dev [n_tok][ne0] . W^T. scratch: device memory of at least st_cuda_gemm_scratch_bytes
// (256-byte aligned). engine: st_gemm_engine.
int st_cuda_gemm(st_gemm_ctx *g, int engine, int weight_type, const void *W_dev, int64_t ne0, int64_t n_out,
                 const float *X_dev, int64_t n_tok, float *Y_dev, void *scratch, size_t scratch_bytes,
                 cudaStream_t stream);
// Same with X already in half precision (cuBLAS engine only; X_f16 [n_tok][ne0]).
int st_cuda_gemm_f16x(st_gemm_ctx *g, int weight_type, const void *W_dev, int64_t ne0, int64_t n_out,
                      const void *X_f16, int64_t n_tok, float *Y_dev, void *scratch, size_t scratch_bytes,
                      cudaStream_t stream);

// ---- MoE feed-forward ----------------------------------------------------------------------------------------
//
// Y[t] = sum_k weights[t][k] * down_e( silu(gate_e x_t) * up_e x_t ),  e = ids[t][k]
//   X_dev:     [n_tok][n_embd] f32
//   ids_dev:   [n_tok][n_used] int32 expert ids (router output); ids outside [0, n_expert) make the pair count as
//              zero (its contribution is dropped) rather than read out of bounds.
//   w_dev:     [n_tok][n_used] f32 router weights
//   Wgate/Wup: [n_expert][n_ff][n_embd] stacks of type_gu; Wdown: [n_expert][n_embd][n_ff] of type_down
//   Y_dev:     [n_tok][n_embd] f32, overwritten
// Steps: counting sort of pairs by expert (counts, offsets, permutation and its inverse), gather of X rows into
// expert order (quantized to int8 for mmq, half for cuBLAS), one grouped GEMM for gate+up over the active experts,
// SwiGLU, one grouped GEMM for down, and a weighted sum back to token order.

size_t st_cuda_moe_scratch_bytes(int engine, int type_gu, int type_down, int64_t n_embd, int64_t n_ff,
                                 int n_expert, int n_tok, int n_used);

int st_cuda_moe_ffn(st_gemm_ctx *g, int engine, int type_gu, const void *Wgate_dev, const void *Wup_dev,
                    int type_down, const void *Wdown_dev, int64_t n_embd, int64_t n_ff, int n_expert,
                    const float *X_dev, const int32_t *ids_dev, const float *w_dev, int n_tok, int n_used,
                    float *Y_dev, void *scratch, size_t scratch_bytes, cudaStream_t stream);

// As st_cuda_moe_ffn, for experts that are not one contiguous stack (hybrid placement, docs/HYBRID.md): expert e's
// gate rows are at Wgate0 + slot_of_dev[e] * slot_stride, its up rows at Wup0 + slot_of_dev[e] * slot_stride and its
// down rows at Wdown0 + slot_of_dev[e] * slot_stride (slots of one device buffer, each holding gate|up|down at fixed
// offsets). slot_of_dev: device int32 [n_expert], a valid slot for each expert the ids select, or -1 for an
// expert left out: its pairs contribute nothing to Y (the caller adds them; hybrid prefill's CPU share).
// Tensor-core and int8 engines only (the cuBLAS engines dequantize whole stacks). The arithmetic is exactly
// st_cuda_moe_ffn's: the same tiles over the same bytes, only the addresses differ, so results are bit-identical.
int st_cuda_moe_ffn_slots(st_gemm_ctx *g, int engine, int type_gu, const void *Wgate0, const void *Wup0,
                          int type_down, const void *Wdown0, long long slot_stride, const int32_t *slot_of_dev,
                          int64_t n_embd, int64_t n_ff, int n_expert, const float *X_dev, const int32_t *ids_dev,
                          const float *w_dev, int n_tok, int n_used, float *Y_dev, void *scratch,
                          size_t scratch_bytes, cudaStream_t stream);

// Last MoE call's expert counts as seen by the host (cuBLAS engines only; for tests): n_expert ints or NULL.
const int32_t *st_cuda_moe_last_counts(const st_gemm_ctx *g);

#ifdef __cplusplus
}
#endif

#endif
