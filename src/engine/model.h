// The loaded model: hyperparameters and views of every weight in the GGUF mapping (never copied on the CPU path),
// validated once at load against the architecture's tensor list.
#ifndef STRATA_ENGINE_MODEL_H
#define STRATA_ENGINE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "model/arch.h"

// A view of one weight tensor in the mapping. A matrix is ne[1] rows of ne[0] elements (row-major, each row
// row_bytes of block-quantized data); a 3D expert stack is ne[2] experts of ne[1] rows each, expert e starting at
// data + e * ne[1] * row_bytes.
typedef struct st_weight {
    const uint8_t *data;
    int type;              // st_type
    int64_t ne[GGUF_MAX_DIMS];
    size_t row_bytes;
    const char *name;      // GGUF tensor name (points into the gguf context)
} st_weight;

typedef struct st_layer {
    float *attn_norm;      // [n_embd] F32 (owned copy, dequantized at load)
    st_weight wq;          // [n_embd] -> [n_head * head_dim_k]
    st_weight wk;          // [n_embd] -> [n_head_kv * head_dim_k]
    st_weight wv;          // [n_embd] -> [n_head_kv * head_dim_v]
    st_weight wo;          // [n_head * head_dim_v] -> [n_embd]
    float *q_norm;         // [head_dim_k] F32, qwen3 QK-norm; NULL for llama
    float *k_norm;         // [head_dim_k] F32; NULL for llama
    float *ffn_norm;       // [n_embd] F32
    // dense FFN (llama, qwen3)
    st_weight ffn_gate;    // [n_embd] -> [n_ff]
    st_weight ffn_up;      // [n_embd] -> [n_ff]
    st_weight ffn_down;    // [n_ff] -> [n_embd]
    // MoE FFN (qwen3moe)
    st_weight router;      // ffn_gate_inp: [n_embd] -> [n_expert] logits
    st_weight gate_exps;   // [n_embd, n_ff_exp, n_expert]: per expert, [n_embd] -> [n_ff_exp]
    st_weight up_exps;     // [n_embd, n_ff_exp, n_expert]
    st_weight down_exps;   // [n_ff_exp, n_embd, n_expert]: per expert, [n_ff_exp] -> [n_embd]
} st_layer;

typedef struct st_model {
    gguf_ctx *gguf;
    char *path;
    st_hparams hp;
    st_weight token_embd;  // [n_embd, n_vocab]: row t is token t's embedding
    float *output_norm;    // [n_embd] F32
    st_weight output;      // [n_embd] -> [n_vocab]; token_embd when tied
    st_layer *layers;      // [n_layer]
} st_model;

// Opens and validates a model. NULL with st_errmsg naming the file and the tensor or key at fault.
st_model *st_model_load(const char *path);
void st_model_free(st_model *m);

// Checks a batch before evaluation: it fits after n_past cached tokens in a context of n_ctx, and every id is in the
// vocabulary. 0, or -1 with a message that says what to do. Shared by the CPU and CUDA sessions.
int st_model_check_batch(const st_model *m, const int32_t *tokens, int64_t n, int64_t n_past, int64_t n_ctx);

#endif
