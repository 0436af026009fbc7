// CUDA attention over the KV cache: decode (one query token, split along the sequence: flash-decoding) and prefill
// (a chunk of query tokens, tiled flash attention with a causal mask). Grouped-query attention throughout:
// query head h reads KV head h / (n_head / n_head_kv).
//
// Cache layout, as the CPU session's: k_cache, v_cache are [n_ctx][n_head_kv * head_dim] rows of IEEE half
// (kv_f16 = 1) or f32, the row of position p at p * n_head_kv * head_dim. Queries are f32, already normalised and
// rotated (st_cuda_qk_norm_rope_kv), which has also stored this step's K/V rows.
//
// Graph friendliness: the current position is read from device memory (d_pos: device int32, the position of the
// first query token = the number of tokens cached before this step), so one captured graph serves every step.
// Launchers return 0 or -1 with st_errmsg (launch errors only).
#ifndef STRATA_CUDA_ATTENTION_H
#define STRATA_CUDA_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

// head_dim values the kernels are compiled for.
int st_cuda_attn_supported(int head_dim, int n_head, int n_head_kv);

// A good split count for decode: enough (n_split x n_head_kv) blocks to fill n_sm multiprocessors a few times over.
int st_cuda_attn_decode_splits(int n_head_kv, int n_sm);
// Device workspace for st_cuda_attn_decode: partial outputs, maxima and sums per (head, split).
size_t st_cuda_attn_decode_workspace_bytes(int n_head, int head_dim, int n_split);

// Decode attention of one token at position *d_pos over cache positions 0 .. *d_pos (inclusive).
//   out: [n_head * head_dim] f32; q: [n_head * head_dim] f32
//   scale: multiplies q.k (1/sqrt(head_dim)); n_split: fixed per captured graph; each split takes a chunk of
//   ceil(L / n_split) positions rounded up to the tile (64 positions for f16, 32 for f32), so short contexts leave
//   the later splits empty (they only write an empty partial).
//   workspace: st_cuda_attn_decode_workspace_bytes(n_head, head_dim, n_split) bytes.
int st_cuda_attn_decode(float *out, const float *q, const void *k_cache, const void *v_cache, int kv_f16,
                        const int32_t *d_pos, int n_head, int n_head_kv, int head_dim, float scale, int n_split,
                        void *workspace, cudaStream_t stream);

// Prefill attention: n_tok query tokens, token t at position *d_pos + t seeing cache positions 0 .. *d_pos + t.
//   out, q: [n_tok][n_head * head_dim] f32
// Version 1: SIMT tiles in shared memory (f32 arithmetic); a tensor-core (mma, f16) version is the next step.
int st_cuda_attn_prefill(float *out, const float *q, const void *k_cache, const void *v_cache, int kv_f16,
                         const int32_t *d_pos, int n_tok, int n_head, int n_head_kv, int head_dim, float scale,
                         cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
