// CUDA element-wise operators of the decode/prefill step: the small kernels between the matrix products.
//
// Every launcher is C-callable, takes raw device pointers and a stream, launches asynchronously and returns 0, or -1
// with st_errmsg() naming the kernel and the CUDA error (launch errors only: execution errors surface at the next
// synchronisation). Nothing here allocates or synchronises, so every launcher may be captured in a CUDA graph.
//
// Graph friendliness: sizes that change per decode step (the position of the token) are read from device memory
// (`d_pos`, an int32 the engine updates before replaying the graph), never passed by value. Sizes passed by value
// (n_embd, head counts, n_tok) are fixed for a captured graph.
//
// Activations are float32, rows contiguous. The CPU references are in cpu/ops.h and engine/session.c.
#ifndef STRATA_CUDA_OPS_H
#define STRATA_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifndef ST_WARP_SIZE
#define ST_WARP_SIZE 32  // threads per warp: 32 on NVIDIA; a HIP build for wave64 parts defines 64
#endif

#ifdef __cplusplus
extern "C" {
#endif

// ---- normalisation and element-wise ----------------------------------------------------------------------------

// q8_1 outputs use the mmvq kernels' "planar q8_1" row layout (cuda/qblock.h, st_q8_1_row_bytes(ne0)): per row of
// ne0 = 32 nb floats, nb blocks of 32 int8 quants, then nb float pairs (d = amax / 127, s = d * sum(q)), the row
// padded to a multiple of 128 bytes; row r starts at r * st_q8_1_row_bytes(ne0). Rounding as the reference
// st_qb_quantize_q8_1: q = roundf(x * (1 / d)), half away from zero. So the normalised activations go straight into
// st_cuda_mmvq without a separate st_cuda_quantize_q8_1 launch.

// For each of n_rows rows of n floats: if `res` is non-NULL, first x[r] += res[r] (the residual add, written back
// to x, so the caller keeps the stream); then y[r] = x[r] / rms(x[r]) * w (w may be NULL: no gain).
//   x:   [n_rows][n] f32 (read; written only when res != NULL)
//   res: [n_rows][n] f32 or NULL
//   y:   [n_rows][n] f32 or NULL
//   yq:  n_rows planar q8_1 rows of n (n % 32 == 0 required then), or NULL
// At least one of y / yq must be given. One block per row.
int st_cuda_rmsnorm(float *y, void *yq, float *x, const float *res, const float *w, int n_rows, int n, float eps,
                    cudaStream_t stream);

// y[i] = a[i] + b[i] over n floats (y may alias a or b).
int st_cuda_add(float *y, const float *a, const float *b, int64_t n, cudaStream_t stream);

// y[i] = silu(g[i]) * u[i] over n_rows rows of ne0 floats (y may alias g). If yq is non-NULL (ne0 % 32 == 0) the
// result is also written as n_rows planar q8_1 rows (the input of the down projection); y may then be NULL.
int st_cuda_swiglu(float *y, void *yq, const float *g, const float *u, int64_t n_rows, int64_t ne0,
                   cudaStream_t stream);

// ---- attention inputs ------------------------------------------------------------------------------------------

// Per-head QK-norm + RoPE of the freshly projected Q and K of n_tok tokens, and the store of K and V into the cache.
// Token t sits at position *d_pos + t (d_pos: device int32, the number of tokens already cached).
//   q:      [n_tok][n_head * head_dim] f32, normalised (q_norm) and rotated in place
//   k, v:   [n_tok][n_head_kv * head_dim] f32 (read only)
//   q_norm, k_norm: [head_dim] f32 gains, or NULL for no QK-norm (llama)
//   k_cache, v_cache: [n_ctx][n_head_kv * head_dim] rows of IEEE half (kv_f16 = 1) or f32; row *d_pos + t written
//   n_rot:  leading dims that rotate (even, <= head_dim); neox as st_rope (0: pairs (2i, 2i+1); 1: (i, i + n_rot/2))
//   rope_cs: [n_ctx][n_rot / 2][2] f32: cos, sin of position p's angle i, made on the host by st_rope_cache (the
//            C library's cosf / sinf, as the CPU engine: the GPU's own sin / cos round differently in ~2.6% of angles)
// One warp per head vector.
int st_cuda_qk_norm_rope_kv(float *q, const float *k, const float *v, const float *q_norm, const float *k_norm,
                            void *k_cache, void *v_cache, int kv_f16, const int32_t *d_pos, int n_tok, int n_head,
                            int n_head_kv, int head_dim, int n_rot, float eps, const float *rope_cs, int neox,
                            cudaStream_t stream);

// ---- embedding -------------------------------------------------------------------------------------------------

// y[t] = dequantized row tokens[t] of a token embedding table [n_vocab][n_embd] of GGML type `type`
// (row_bytes = st_row_size(type, n_embd)). tokens: device int32 [n_tok]; ids outside [0, n_vocab) give a zero row.
// Types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K (direct per-element kernels) and every other
// type cuda/qblock.h unpacks (IQ*, IQ4_NL, MXFP4: one 32-element item per thread); others: -1 at launch.
int st_cuda_get_rows(float *y, const void *table, int type, size_t row_bytes, int64_t n_vocab, const int32_t *tokens,
                     int n_tok, int n_embd, cudaStream_t stream);
// 1 when st_cuda_get_rows supports `type`.
int st_cuda_get_rows_supported(int type);

// ---- MoE -------------------------------------------------------------------------------------------------------

// Router of qwen3moe-style MoE: per token, softmax over n_expert logits, the top n_used experts by probability
// (ties to the lower id), and (norm != 0) their weights renormalised to sum 1.
//   logits: [n_tok][n_expert] f32; ids: [n_tok][n_used] int32 (descending weight); weights: [n_tok][n_used] f32
// One warp per token; n_expert <= 32 * 16 = 512, n_used <= 32.
int st_cuda_moe_route(int32_t *ids, float *weights, const float *logits, int n_tok, int n_expert, int n_used, int norm,
                      cudaStream_t stream);

// out[t][j] = (add ? add[t][j] : 0) + sum_k weights[t][k] * y[t][k][j]
//   y: [n_tok][n_used][n_embd] f32 (the experts' down-projection outputs, in the router's slot order)
//   out, add: [n_tok][n_embd] f32; add may alias out (x += moe(x)).
int st_cuda_moe_sum(float *out, const float *add, const float *y, const float *weights, int n_tok, int n_used,
                    int n_embd, cudaStream_t stream);

// ---- output: argmax and sampling -------------------------------------------------------------------------------

// Workspace (device bytes) for st_cuda_argmax / st_cuda_sample over n_vocab logits.
size_t st_cuda_sampler_workspace_bytes(int n_vocab);
// Zeroes the workspace's persistent state (the draw counter); call once after allocating it. Synchronous.
int st_cuda_sampler_init(void *workspace, int n_vocab);

// *d_token = index of the largest logit (ties to the lower index; NaNs ignored). One launch: per-block maxima into
// the workspace, the last block to finish picks. Exactly the CPU sampler's greedy pick.
int st_cuda_argmax(int32_t *d_token, const float *logits, int n_vocab, void *workspace, cudaStream_t stream);

typedef struct st_cuda_sample_params {
    float temperature;  // <= 0: greedy (argmax)
    int32_t top_k;      // <= 0: off
    float top_p;        // >= 1: off
    float min_p;        // <= 0: off
    uint64_t seed;      // draws use a counter-based hash of (seed, draw counter kept in the workspace)
} st_cuda_sample_params;

// Candidates the final sorting stage holds; above this many survivors of the cut-offs the sampler keeps the best
// ST_CUDA_SAMPLE_CAP in whole histogram bins (cutoff / 2048 nats wide) and flags the draw approximate (ops.cu).
#define ST_CUDA_SAMPLE_CAP 8192

// Samples a token from logits[n_vocab] with the CPU sampler's semantics (engine/sampler.c, no penalties):
// candidates within 30 nats (x max(1, T)) of the best, top-k, top-p and min-p on temperature-1 probabilities,
// then a draw at temperature T. Each call advances the draw counter in the workspace, so a captured graph
// draws fresh numbers at every replay.
//   d_token: device int32 out.
//   d_debug: NULL, or device int32 [2 + ST_CUDA_SAMPLE_CAP] receiving [0] the final candidate count n,
//            [1] flags (1: candidate set truncated to the cap), [2 .. 2+n) the candidate ids in sampler order.
int st_cuda_sample(int32_t *d_token, const float *logits, int n_vocab, const st_cuda_sample_params *p,
                   void *workspace, int32_t *d_debug, cudaStream_t stream);
// The same, also writing the token to h_token: host memory the device can write (cudaMallocHost), so the caller
// needs no copy operation (read it once an event recorded after this call has completed); NULL: none.
int st_cuda_sample_to(int32_t *d_token, int32_t *h_token, const float *logits, int n_vocab,
                      const st_cuda_sample_params *p, void *workspace, int32_t *d_debug, cudaStream_t stream);

// The next one-token step's inputs by one kernel: *d_pos = pos and, when forced >= 0, *d_token = forced (two
// 4-byte copies from host memory cost more between decode steps: CUPTI timeline 2026-12-04d).
int st_cuda_set_step(int32_t *d_pos, int32_t pos, int32_t *d_token, int32_t forced, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
