// Model architectures: hyperparameters read from GGUF metadata, the tensor list each architecture expects, and
// parameter counting. One table entry per architecture (arch.c); the same tensor enumeration drives make-model
// (what to write) and the loader (what a file must contain).
//
// Key names, defaults and tensor shapes are llama.cpp's (facts from llama-arch.cpp, llama-model.cpp and
// models/{llama,qwen3,qwen3moe}.cpp in llama.cpp as vendored by llama-cpp-python 0.3.36).
#ifndef STRATA_MODEL_ARCH_H
#define STRATA_MODEL_ARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef enum st_arch {
    ST_ARCH_UNKNOWN = -1,
    ST_ARCH_LLAMA = 0,
    ST_ARCH_QWEN3,
    ST_ARCH_QWEN3MOE,
    ST_ARCH_COUNT
} st_arch;

// RoPE pairing: NORM rotates adjacent pairs (x[2i], x[2i+1]); NEOX rotates (x[i], x[i + n_rot/2]).
// Values are llama.cpp's (LLAMA_ROPE_TYPE_NORM = 0, LLAMA_ROPE_TYPE_NEOX = 2).
typedef enum st_rope_type { ST_ROPE_NORM = 0, ST_ROPE_NEOX = 2 } st_rope_type;

typedef struct st_hparams {
    st_arch arch;
    uint32_t n_layer;
    uint32_t n_ctx_train;       // trained context length
    uint32_t n_embd;            // residual width d
    uint32_t n_ff;              // dense FFN hidden width (metadata only for qwen3moe)
    uint32_t n_head;            // query heads
    uint32_t n_head_kv;         // key/value heads (GQA)
    uint32_t head_dim_k;        // per-head K/Q width
    uint32_t head_dim_v;        // per-head V width
    uint32_t n_rot;             // rotated dims per head (== head_dim_k for these archs)
    uint32_t n_vocab;
    float rms_eps;
    float rope_freq_base;
    float rope_freq_scale;      // 1 / rope.scaling.factor (1 when absent)
    st_rope_type rope_type;
    uint32_t n_expert;          // 0 for dense models
    uint32_t n_expert_used;     // top-k experts per token
    uint32_t n_ff_exp;          // hidden width of one expert
    bool expert_weights_norm;   // renormalise the top-k router weights to sum to 1
    bool tied_output;           // no output.weight: the LM head reuses token_embd.weight
} st_hparams;

// What kind of data a tensor holds; decides which element types are acceptable and how make-model fills it.
typedef enum st_tensor_class {
    ST_TCLASS_NORM = 0,   // 1D RMSNorm gain, stored F32, values ~1
    ST_TCLASS_WEIGHT,     // 2D/3D matrix, any (quantized) type whose block divides ne[0]
    ST_TCLASS_ROUTER,     // MoE router matrix [n_embd, n_expert]: never quantized (F32/F16/BF16)
} st_tensor_class;

typedef enum st_tensor_role {
    ST_T_TOKEN_EMBD = 0,
    ST_T_OUTPUT_NORM,
    ST_T_OUTPUT,
    ST_T_ATTN_NORM,
    ST_T_ATTN_Q,
    ST_T_ATTN_K,
    ST_T_ATTN_V,
    ST_T_ATTN_OUT,
    ST_T_ATTN_Q_NORM,
    ST_T_ATTN_K_NORM,
    ST_T_FFN_NORM,
    ST_T_FFN_GATE,
    ST_T_FFN_UP,
    ST_T_FFN_DOWN,
    ST_T_FFN_GATE_INP,
    ST_T_FFN_GATE_EXPS,
    ST_T_FFN_UP_EXPS,
    ST_T_FFN_DOWN_EXPS,
    ST_T_ROLE_COUNT
} st_tensor_role;

#define ST_TENSOR_NAME_MAX 64

typedef struct st_tensor_spec {
    char name[ST_TENSOR_NAME_MAX];  // GGUF name, e.g. "blk.3.ffn_gate_exps.weight"
    st_tensor_role role;
    st_tensor_class tclass;
    int layer;                      // block index, -1 for global tensors
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];      // GGUF ne order: ne[0] is the row length; unused dims are 1
    bool expert;                    // 3D expert stack [.., .., n_expert]: only n_expert_used/n_expert is active
} st_tensor_spec;

// "llama" -> ST_ARCH_LLAMA; ST_ARCH_UNKNOWN if not supported.
st_arch st_arch_from_name(const char *name);
const char *st_arch_name(st_arch arch);  // "?" for unknown
const char *st_tensor_role_name(st_tensor_role role);

// Fills in the architecture's fixed properties (rope type, expert weight normalisation) and defaults that depend on
// other fields (head dims from n_embd/n_head, n_rot, n_head_kv). Call after setting the dims, before validating.
void st_hparams_defaults(st_hparams *hp);
// Checks that the dims are consistent for the architecture. -1 with a message naming the field otherwise.
int st_hparams_check(const st_hparams *hp);

// Reads hyperparameters from GGUF metadata (llama.cpp key names, "{arch}.block_count" etc.) and checks them.
// n_vocab comes from {arch}.vocab_size, else tokenizer.ggml.tokens, else token_embd.weight's ne[1]; tied_output is
// set when output.weight is absent. Unknown architecture or bad value -> -1, the message names the key.
int st_hparams_from_gguf(const gguf_ctx *ctx, st_hparams *hp);

// The tensors the architecture expects for these hparams, in file order (global first, then blocks, then output).
// The list includes output.weight unless hp->tied_output. Returns a malloc'd array (caller frees) and its length in
// *n_out, or NULL with st_errmsg.
st_tensor_spec *st_arch_tensors(const st_hparams *hp, int *n_out);

// Checks that `ctx` holds every expected tensor with the expected shape and an acceptable type for its class.
// Tensors the architecture does not know are ignored (their count goes to *n_unknown if non-NULL).
// -1 with a message naming the file, the tensor, and the expected and actual shape/type.
int st_arch_validate(const gguf_ctx *ctx, const st_hparams *hp, const char *fname, int *n_unknown);

// Parameter counts from the hparams alone. `total` counts every weight once (tied embeddings once); `active` is
// what one token touches: MoE expert stacks count n_expert_used of n_expert experts. Embedding and LM head count
// fully, matching how "30B-A3B" style figures are quoted.
void st_hparams_param_count(const st_hparams *hp, uint64_t *total, uint64_t *active);

// Bytes of a KV cache of n_ctx positions for all layers with elements of elem_bytes (2 for F16).
uint64_t st_hparams_kv_bytes(const st_hparams *hp, uint64_t n_ctx, int elem_bytes);

#endif
