// Tensor-core prefill attention (flash attention with f16 mma.sync, f32 accumulation) over an f16 KV cache.
// Same contract as st_cuda_attn_prefill (cuda/attention.h): n_tok query tokens, token t at position *d_pos + t
// sees cache positions 0 .. *d_pos + t; out, q: [n_tok][n_head * head_dim] f32; cache rows
// [n_ctx][n_head_kv * head_dim] IEEE half. The SIMT kernel of attention.cu stays the fallback (f32 caches, other
// head sizes). Queries and probabilities are rounded to f16 for the MMAs (relative error ~1e-3 of the output).
#ifndef STRATA_CUDA_ATTENTION_TC_H
#define STRATA_CUDA_ATTENTION_TC_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

// 1 if st_cuda_attn_prefill_tc handles this shape: head_dim 64 or 128, an f16 cache, n_head % n_head_kv == 0.
int st_cuda_attn_prefill_tc_supported(int head_dim, int n_head, int n_head_kv, int kv_f16);

// Returns 0 or -1 with st_errmsg (unsupported shape, launch error).
int st_cuda_attn_prefill_tc(float *out, const float *q, const void *k_cache, const void *v_cache,
                            const int32_t *d_pos, int n_tok, int n_head, int n_head_kv, int head_dim, float scale,
                            cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
