// Q4_K / Q6_K matrix products on Intel AMX int8 tiles (Sapphire Rapids and later), for the batched expert products of the
// hybrid prefill's CPU share (place/cpu_experts.c). Not the CPU engine's default: its products follow llama.cpp's
// accumulation order bit for bit, and these sum each 32-element sub-block in int32 on the tiles and scale it in
// float (the same int8 products, another float order: ~1e-7 relative).
#ifndef STRATA_CPU_GEMM_AMX_H
#define STRATA_CPU_GEMM_AMX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// 1 when this build has the AMX kernels, the CPU has AMX-TILE and AMX-INT8, the OS granted the tile state, and
// STRATA_CPU_AMX=0 / st_cpu_amx_enable(false) did not turn them off.
bool st_cpu_amx_available(void);
void st_cpu_amx_enable(bool on);

// Whether the AMX kernels take this weight type (Q4_K, Q6_K).
bool st_cpu_amx_supported(int type);

// Y[t * ldy + r] = dot(W row r, X row t) for r < n_rows (a multiple of 16), t < n_tok: W n_rows rows of ne0 (a
// multiple of 256) elements of `type`; Xq the activation rows quantized to Q8_K (cpu/dot.h st_cpu_quantize_act),
// row t at Xq + t * xq_stride. Single-threaded (callers split rows). 0, or -1 with st_errmsg.
int st_cpu_gemm_amx(int type, const void *W, int64_t ne0, int64_t n_rows, const void *Xq, size_t xq_stride,
                    int64_t n_tok, float *Y, int64_t ldy);

// The same in two steps, for callers that multiply one activation batch by many row ranges: the Q8_K rows packed
// once into the tiles' layout (st_cpu_amx_pack_bytes(ne0, n_tok) bytes, 64-byte aligned), then any row range.
size_t st_cpu_amx_pack_bytes(int64_t ne0, int64_t n_tok);
void st_cpu_amx_pack_q8k(const void *Xq, size_t xq_stride, int64_t ne0, int64_t n_tok, void *packed);
int st_cpu_gemm_amx_packed(int type, const void *W, int64_t ne0, int64_t n_rows, const void *packed, int64_t n_tok,
                           float *Y, int64_t ldy);

#endif
