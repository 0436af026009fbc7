// A session: one timeline over a model, owning its KV cache and the scratch of the forward pass.
// The engine is immutable and may serve several sessions; each session is used by one thread at a time.
#ifndef STRATA_ENGINE_SESSION_H
#define STRATA_ENGINE_SESSION_H

#include <stdint.h>

#include "cpu/matmul.h"
#include "engine/model.h"
#include "util/pool.h"

typedef struct st_session {
    const st_model *model;
    st_pool *pool;          // borrowed; compute threads
    int64_t n_ctx;          // KV capacity in positions
    int kv_f16;             // 1: K/V cache elements are IEEE half; 0: float32 (exact, for tests)
    void **k_cache;         // [n_layer] -> [n_ctx][n_head_kv * head_dim_k] K rows (roped), kv_f16 ? half : float
    void **v_cache;         // [n_layer] -> [n_ctx][n_head_kv * head_dim_v] V rows
    int32_t *tokens;        // [n_ctx] the tokens whose K/V the cache holds, positions 0..n_past-1
    int64_t n_past;
    int64_t max_batch;      // tokens per forward chunk (prefill splits longer inputs)
    // scratch for one chunk of up to max_batch tokens (float32, row-major [token][features])
    float *x;               // [max_batch][n_embd] residual stream
    float *xn;              // [max_batch][n_embd] normed input of the current sublayer
    float *q;               // [max_batch][n_head * head_dim_k]
    float *k;               // [max_batch][n_head_kv * head_dim_k]
    float *v;               // [max_batch][n_head_kv * head_dim_v]
    float *attn;            // [max_batch][n_head * head_dim_v]
    float *ffn_a;           // [max_batch][max(n_ff, n_ff_exp)] gate, then SwiGLU output
    float *ffn_b;           // [max_batch][max(n_ff, n_ff_exp)] up
    float *ffn_out;         // [max_batch][n_embd]
    float *router;          // [max_batch][n_expert] router logits -> probabilities
    int32_t *sel_expert;    // [max_batch][n_expert_used] chosen experts per token
    float *sel_weight;      // [max_batch][n_expert_used] their mixing weights
    int32_t *group_tok;     // [max_batch * n_expert_used] token indices grouped by expert
    float *gx;              // [max_batch][n_embd] gathered inputs of one expert's tokens
    float *moe_y;           // [max_batch * n_expert_used][n_embd] expert outputs per (token, rank), summed in rank
                            // order afterwards (llama.cpp's order); NULL for dense models
    float *rope_cs;         // [n_rot] (cos, sin) pairs of the current position
    st_cpu_scratch mm_scratch;  // quantized activations of the current matmul
    uint32_t *route_counts;     // optional, caller-owned [n_layer][n_expert]: incremented for every (token, expert)
                                // the router selects (strata profile); NULL: not counted
    struct st_route_pred *route_pred;  // STRATA_ROUTE_PREDICT measurement (engine/route_predict.h); NULL: off
    struct st_actdump *actdump;        // STRATA_DUMP_ACT per-layer activations (engine/actdump.h); NULL: off
} st_session;

st_session *st_session_new(const st_model *m, st_pool *pool, int64_t n_ctx, int kv_f16);
void st_session_free(st_session *s);

// Runs tokens[0..n) at positions n_past.., appending their K/V to the cache. When logits is non-NULL it receives
// [n][n_vocab] logits if all_logits, else [n_vocab] for the last token. Inputs longer than max_batch run in
// chunks. Returns 0, or -1 (context full, bad token id) with st_errmsg; the cache is unchanged on error.
int st_session_eval(st_session *s, const int32_t *tokens, int64_t n, float *logits, int all_logits);

// Drops cached positions from n_keep on (the prefix cache keeps the common prefix of a new request).
void st_session_truncate(st_session *s, int64_t n_keep);

#endif
