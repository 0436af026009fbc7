// Quantized matrix-vector products for decode (1..8 tokens): y[t][r] = dot(W row r, x[t]).
//
// Activations are first quantized to "planar q8_1" rows (st_cuda_quantize_q8_1; layout in cuda/qblock.h:
// int8 quants of 32-element blocks, then a (scale, scale * sum) float pair per block; row stride
// st_q8_1_row_bytes(ne0), a multiple of 128 bytes). The products then use int8 dot products (dp4a) against the
// weights in their stored GGUF block format, reading each weight byte once.
//
// Weights: W_dev holds n_out rows of ne0 elements in weight_type, row r at W_dev + r * st_row_size(type, ne0);
// W_dev must be 16-byte aligned (cudaMalloc and GGUF tensor data at 32-byte alignment are). ne0 must be a multiple
// of the type's block size (256 for K/I-quants, 32 otherwise and for F32/F16/BF16).
// Supported weight types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
// IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS, MXFP4 (st_cuda_mmvq_supported). Float weights also use the int8
// activations (relative error ~1e-3 against float activations), which keeps one code path; prefill uses cuBLAS.
//
// All functions enqueue work on `stream` and return 0, or -1 with st_errmsg for bad arguments or a launch error.
#ifndef STRATA_CUDA_MMVQ_H
#define STRATA_CUDA_MMVQ_H

#include <stdint.h>

#include "cuda/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ST_MMVQ_MAX_TOK 8

int st_cuda_mmvq_supported(int weight_type);

// Bytes of one planar q8_1 row of ne0 elements (same as st_q8_1_row_bytes in cuda/qblock.h).
int64_t st_cuda_q8_1_row_bytes(int64_t ne0);

// Quantizes x_dev [n_tok][ne0] floats (row-major, contiguous) into xq_dev: n_tok planar q8_1 rows of
// st_cuda_q8_1_row_bytes(ne0) bytes each (xq_dev 16-byte aligned). ne0 % 32 == 0.
int st_cuda_quantize_q8_1(st_cuda_ctx *ctx, const float *x_dev, void *xq_dev, int64_t n_tok, int64_t ne0,
                          cudaStream_t stream);

// y_dev [n_tok][n_out] floats: y[t * n_out + r] = dot(W row r, x row t), for 1 <= n_tok <= ST_MMVQ_MAX_TOK;
// xq_dev holds n_tok quantized rows.
int st_cuda_mmvq(st_cuda_ctx *ctx, int weight_type, const void *W_dev, int64_t ne0, int64_t n_out, const void *xq_dev,
                 int n_tok, float *y_dev, cudaStream_t stream);

// One token's rows of Q2_K / Q3_K / Q6_K (block fields not 16-byte aligned) are staged through shared memory with
// 16-byte loads when a row is 16-byte aligned and fits (bit-identical outputs). On by default; off with
// STRATA_MMVQ_STAGE=0 or here (1 on, 0 off, -1 back to the environment's choice; tests compare both).
void st_cuda_mmvq_set_staging(int on);
// (Staged Q6_K rows with a half block per lane, STRATA_MMVQ_HB=1, lost on an H200: tg128 -2.3%, the LM head ~40 us
// per token slower; removed 2026-12-05, docs/experiments/2026-12-05-mmvq-q6k-half-blocks.patch.)

// MoE: W_dev is a [ne0, n_out, n_expert] stack (expert e's n_out rows start at W_dev + e * n_out * row_size).
// For each of the n_sel selected (token, slot) pairs p:
//   y_dev[p * n_out + r] = dot(W[ids_dev[p]] row r, xq row xrow_dev[p])
// ids_dev [n_sel] int32 expert ids; xrow_dev [n_sel] int32 activation rows of xq_dev (n_xrows quantized rows), or
// NULL for row p (e.g. the down projection, whose input is per pair). One launch covers every pair; an id or row
// out of range makes that pair's outputs NaN (the device cannot report errors otherwise).
int st_cuda_mmvq_ids(st_cuda_ctx *ctx, int weight_type, const void *W_dev, int64_t ne0, int64_t n_out,
                     int64_t n_expert, const void *xq_dev, int64_t n_xrows, const int32_t *ids_dev,
                     const int32_t *xrow_dev, int n_sel, float *y_dev, cudaStream_t stream);

// Fused gate+up of a gated FFN (both stacks the same type and shape): for each pair p and row r,
//   y_dev[p * n_out + r] = silu(dot(Wgate[e] row r, x)) * dot(Wup[e] row r, x),  e = ids_dev[p], x = xq row xrow[p]
// reading the shared activation once. silu(g) = g / (1 + exp(-g)).
int st_cuda_mmvq_ids_glu(st_cuda_ctx *ctx, int weight_type, const void *Wgate_dev, const void *Wup_dev, int64_t ne0,
                         int64_t n_out, int64_t n_expert, const void *xq_dev, int64_t n_xrows, const int32_t *ids_dev,
                         const int32_t *xrow_dev, int n_sel, float *y_dev, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
