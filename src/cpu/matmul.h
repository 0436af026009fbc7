// CPU matrix products Y = X * W^T for quantized weights.
//
// W holds n_out rows of ne0 elements in weight_type (row r at W + r * st_row_size(weight_type, ne0)); X is
// [n_tok][ne0] floats, row-major; Y is [n_tok][n_out] floats (Y[t * n_out + r] = dot(W row r, X row t)).
// Activations are quantized once to the weight type's activation format (cpu/dot.h), then output rows are split
// across the pool's threads. For n_tok > 1 the work is tiled (rows x tokens) so that a tile's weights are read
// from memory once and reused from cache for every token of the tile.
#ifndef STRATA_CPU_MATMUL_H
#define STRATA_CPU_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "util/pool.h"

// A growable, 64-byte aligned work buffer (for quantized activations). Zero-initialise it; reuse it across calls
// from one thread; free with st_cpu_scratch_free.
typedef struct st_cpu_scratch {
    void *data;   // [size] bytes
    size_t size;
} st_cpu_scratch;

void st_cpu_scratch_free(st_cpu_scratch *s);
// Ensures at least `size` bytes; returns the buffer or NULL (st_errmsg).
void *st_cpu_scratch_get(st_cpu_scratch *s, size_t size);

// Full product. pool may be NULL (single-threaded); scratch may be NULL (a temporary buffer is used).
// Returns 0, or -1 with st_errmsg (unsupported type, ne0 not a multiple of the block size, out of memory).
int st_cpu_matmul(st_pool *pool, int weight_type, const void *W, int64_t ne0, int64_t n_out, const float *X,
                  int64_t n_tok, float *Y, st_cpu_scratch *scratch);

// flags for the row variants: ST_MM_EXPERT marks one expert of a MoE tensor (llama.cpp computes those through
// mul_mat_id, whose kernels for some types sum in another order than its dense products; see cpu/dot_impl.h).
// Row ranges should start and end on multiples of 8 so that types computed in 8-row tiles keep their order.
#define ST_MM_EXPERT 1

// Rows [row0, row0 + n_rows) of W only, for n_tok activation rows already quantized with st_cpu_quantize_act
// (Xq row t at Xq + t * xq_stride bytes). Writes Y[t * ldy + (r - row0)]. For MoE experts W points at one
// expert's slice of a [ne0, n_out, n_expert] tensor, and Xq at the quantized rows of the tokens routed to it;
// quantize once and call this per expert (or per row range, to split work between devices).
int st_cpu_matmul_rows_q(st_pool *pool, int weight_type, const void *W, int64_t ne0, int64_t row0, int64_t n_rows,
                         const void *Xq, size_t xq_stride, int64_t n_tok, float *Y, int64_t ldy, int flags);

// Same from float activations X [n_tok][ne0] (quantized into scratch first).
int st_cpu_matmul_rows(st_pool *pool, int weight_type, const void *W, int64_t ne0, int64_t row0, int64_t n_rows,
                       const float *X, int64_t n_tok, float *Y, int64_t ldy, st_cpu_scratch *scratch, int flags);

#endif
