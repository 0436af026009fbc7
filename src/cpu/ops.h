// CPU element-wise and attention operators of the forward pass (float32 activations).
// Matrix products live in cpu/matmul.h; these are the small operators between them.
// They reproduce the arithmetic of ggml's CPU backend (AVX-512 build, F32 KV cache, no flash attention) bit for bit,
// on every ISA: see the notes at the top of ops.c.
#ifndef STRATA_CPU_OPS_H
#define STRATA_CPU_OPS_H

#include <stdint.h>

#include "util/pool.h"

// y[i] = x[i] / rms(x) * w[i], rms over n elements with eps inside the sqrt. y may alias x. w may be NULL (no scale).
void st_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps);

// Rotary position embedding of one head vector x[head_dim] at position pos, in place.
// neox = 0: pairs (x[2i], x[2i+1]) (GGML "normal", llama); neox = 1: pairs (x[i], x[i + n_rot/2]) (qwen2/3).
// Only the first n_rot dims rotate. theta_i = pos * freq_scale * base^(-2i/n_rot).
void st_rope(float *x, int64_t head_dim, int64_t n_rot, int64_t pos, float freq_base, float freq_scale, int neox);
// The same in two steps, so one position's angles serve every head:
// cs[n_rot]: (cos theta_i, sin theta_i) pairs for i < n_rot/2.
void st_rope_cache(float *cs, int64_t n_rot, int64_t pos, float freq_base, float freq_scale);
void st_rope_apply(float *x, const float *cs, int64_t n_rot, int neox);

// y[i] = silu(g[i]) * u[i] over one row of n (the vector/leftover split is per row, as in ggml). y may alias g.
void st_swiglu(float *y, const float *g, const float *u, int64_t n);

// Softmax in place (ggml's soft_max: vector exp per 16-chunk, double sum).
void st_softmax(float *x, int64_t n);
// MoE routing after the softmax: the K most probable of E experts by repeated max (descending; ties to the lower id,
// as the reference's insertion sort of a short row leaves them) into sel[K] / wt[K]; with norm, the K weights are
// divided by their sum as llama.cpp does it (summed in double, clamped below at 2^-14).
void st_route_topk(const float *prob, int64_t E, int64_t K, int norm, int32_t *sel, float *wt);

// Causal grouped-query attention for a batch of tokens over a KV cache.
//   q:    [n_tok][n_head * head_dim] float32 (already roped)
//   k, v: the cache, [n_kv_pos][n_head_kv * head_dim] rows, float32 (kv_f16 = 0) or IEEE half (kv_f16 = 1);
//         positions 0 .. pos0 + n_tok - 1 are valid, token t sits at position pos0 + t and sees 0 .. pos0 + t.
//   out:  [n_tok][n_head * head_dim] float32
// scale multiplies q.k (1/sqrt(head_dim) for these models). Work is split over (token, head) pairs on the pool.
void st_attention(st_pool *pool, float *out, const float *q, const void *k, const void *v, int kv_f16, int64_t n_tok,
                  int64_t pos0, int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale);

#endif
