// Architecture table, GGUF hyperparameter reading, tensor enumeration and validation, parameter counting.
// Facts (key names, defaults, tensor names and shapes) are llama.cpp's: llama-arch.cpp, llama-model.cpp
// (load_hparams), models/llama.cpp, models/qwen3.cpp, models/qwen3moe.cpp (llama-cpp-python 0.3.36 sdist).
#include "model/arch.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "util/err.h"

// Symbolic dimensions used by the tensor templates, resolved against st_hparams.
typedef enum {
    D_NONE = 0,
    D_EMBD,    // n_embd
    D_FF,      // n_ff
    D_QDIM,    // n_head * head_dim_k
    D_KDIM,    // n_head_kv * head_dim_k
    D_VDIM,    // n_head_kv * head_dim_v
    D_ODIM,    // n_head * head_dim_v (attention output before attn_output)
    D_HEADK,   // head_dim_k
    D_EXPERT,  // n_expert
    D_FFEXP,   // n_ff_exp
    D_VOCAB,   // n_vocab
} dim_sym;

// When a template applies.
typedef enum {
    C_ALWAYS = 0,
    C_DENSE,   // n_expert == 0
    C_MOE,     // n_expert > 0
    C_UNTIED,  // output.weight present
} tensor_cond;

typedef struct {
    st_tensor_role role;
    const char *name;  // printf pattern with %d for the block index when per_layer
    bool per_layer;
    tensor_cond cond;
    dim_sym dims[3];   // GGUF ne order; D_NONE ends the list
} tensor_tmpl;

typedef enum { MOE_NO = 0, MOE_OPTIONAL, MOE_REQUIRED } moe_mode;

typedef struct {
    st_arch arch;
    const char *name;            // general.architecture value
    st_rope_type rope_type;
    moe_mode moe;
    bool expert_weights_norm;    // hard-wired in llama.cpp's graph for these archs
    bool ff_exp_from_ff;         // MoE expert width is {arch}.feed_forward_length (llama/Mixtral)
    const tensor_tmpl *global_pre;   // before the blocks
    const tensor_tmpl *layer;        // per block
    const tensor_tmpl *global_post;  // after the blocks
} arch_entry;

#define END {ST_T_ROLE_COUNT, NULL, false, C_ALWAYS, {D_NONE, D_NONE, D_NONE}}

static const tensor_tmpl pre_common[] = {
    {ST_T_TOKEN_EMBD, "token_embd.weight", false, C_ALWAYS, {D_EMBD, D_VOCAB, D_NONE}},
    END,
};
static const tensor_tmpl post_common[] = {
    {ST_T_OUTPUT_NORM, "output_norm.weight", false, C_ALWAYS, {D_EMBD, D_NONE, D_NONE}},
    {ST_T_OUTPUT, "output.weight", false, C_UNTIED, {D_EMBD, D_VOCAB, D_NONE}},
    END,
};

// The attention and feed-forward rows every llama-family block has (the FFN rows cover dense and MoE).
#define ROWS_ATTN \
    {ST_T_ATTN_NORM, "blk.%d.attn_norm.weight", true, C_ALWAYS, {D_EMBD}},           \
    {ST_T_ATTN_Q, "blk.%d.attn_q.weight", true, C_ALWAYS, {D_EMBD, D_QDIM}},         \
    {ST_T_ATTN_K, "blk.%d.attn_k.weight", true, C_ALWAYS, {D_EMBD, D_KDIM}},         \
    {ST_T_ATTN_V, "blk.%d.attn_v.weight", true, C_ALWAYS, {D_EMBD, D_VDIM}},         \
    {ST_T_ATTN_OUT, "blk.%d.attn_output.weight", true, C_ALWAYS, {D_ODIM, D_EMBD}}
#define ROWS_FFN \
    {ST_T_FFN_NORM, "blk.%d.ffn_norm.weight", true, C_ALWAYS, {D_EMBD}},                            \
    {ST_T_FFN_GATE, "blk.%d.ffn_gate.weight", true, C_DENSE, {D_EMBD, D_FF}},                       \
    {ST_T_FFN_DOWN, "blk.%d.ffn_down.weight", true, C_DENSE, {D_FF, D_EMBD}},                       \
    {ST_T_FFN_UP, "blk.%d.ffn_up.weight", true, C_DENSE, {D_EMBD, D_FF}},                           \
    {ST_T_FFN_GATE_INP, "blk.%d.ffn_gate_inp.weight", true, C_MOE, {D_EMBD, D_EXPERT}},             \
    {ST_T_FFN_GATE_EXPS, "blk.%d.ffn_gate_exps.weight", true, C_MOE, {D_EMBD, D_FFEXP, D_EXPERT}},  \
    {ST_T_FFN_DOWN_EXPS, "blk.%d.ffn_down_exps.weight", true, C_MOE, {D_FFEXP, D_EMBD, D_EXPERT}},  \
    {ST_T_FFN_UP_EXPS, "blk.%d.ffn_up_exps.weight", true, C_MOE, {D_EMBD, D_FFEXP, D_EXPERT}}

// llama: dense SwiGLU, or Mixtral-style MoE when expert_count > 0 (experts of width feed_forward_length).
static const tensor_tmpl layer_llama[] = {
    ROWS_ATTN,
    ROWS_FFN,
    END,
};

// qwen3: llama's block plus per-head RMSNorm of Q and K (before RoPE).
static const tensor_tmpl layer_qwen3[] = {
    ROWS_ATTN,
    {ST_T_ATTN_K_NORM, "blk.%d.attn_k_norm.weight", true, C_ALWAYS, {D_HEADK}},
    {ST_T_ATTN_Q_NORM, "blk.%d.attn_q_norm.weight", true, C_ALWAYS, {D_HEADK}},
    ROWS_FFN,
    END,
};

// New architectures (qwen3next, gpt-oss, ...) add an entry here plus their templates.
static const arch_entry arch_table[] = {
    {ST_ARCH_LLAMA, "llama", ST_ROPE_NORM, MOE_OPTIONAL, true, true, pre_common, layer_llama, post_common},
    {ST_ARCH_QWEN3, "qwen3", ST_ROPE_NEOX, MOE_NO, false, false, pre_common, layer_qwen3, post_common},
    {ST_ARCH_QWEN3MOE, "qwen3moe", ST_ROPE_NEOX, MOE_REQUIRED, true, false, pre_common, layer_qwen3, post_common},
};
#define N_ARCH ((int)(sizeof arch_table / sizeof arch_table[0]))

static const arch_entry *arch_get(st_arch a) {
    for (int i = 0; i < N_ARCH; i++)
        if (arch_table[i].arch == a) return &arch_table[i];
    return NULL;
}

st_arch st_arch_from_name(const char *name) {
    if (!name) return ST_ARCH_UNKNOWN;
    for (int i = 0; i < N_ARCH; i++)
        if (!strcmp(arch_table[i].name, name)) return arch_table[i].arch;
    return ST_ARCH_UNKNOWN;
}

const char *st_arch_name(st_arch arch) {
    const arch_entry *e = arch_get(arch);
    return e ? e->name : "?";
}

const char *st_tensor_role_name(st_tensor_role role) {
    static const char *names[ST_T_ROLE_COUNT] = {
        "token_embd", "output_norm", "output", "attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
        "attn_q_norm", "attn_k_norm", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down", "ffn_gate_inp",
        "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps",
    };
    return (unsigned)role < ST_T_ROLE_COUNT ? names[role] : "?";
}

void st_hparams_defaults(st_hparams *hp) {
    const arch_entry *e = arch_get(hp->arch);
    if (!e) return;
    hp->rope_type = e->rope_type;
    hp->expert_weights_norm = hp->n_expert > 0 && e->expert_weights_norm;
    if (hp->n_head_kv == 0) hp->n_head_kv = hp->n_head;
    if (hp->head_dim_k == 0 && hp->n_head) hp->head_dim_k = hp->n_embd / hp->n_head;
    if (hp->head_dim_v == 0 && hp->n_head) hp->head_dim_v = hp->n_embd / hp->n_head;
    if (hp->n_rot == 0) hp->n_rot = hp->head_dim_k;
    if (hp->rope_freq_base == 0) hp->rope_freq_base = 10000.0f;
    if (hp->rope_freq_scale == 0) hp->rope_freq_scale = 1.0f;
    if (hp->n_expert > 0 && hp->n_ff_exp == 0) {
        // llama (Mixtral) experts are feed_forward_length wide; qwen3moe falls back to n_ff / n_expert_used
        // when expert_feed_forward_length is absent (llama.cpp models/qwen3moe.cpp).
        if (e->ff_exp_from_ff) hp->n_ff_exp = hp->n_ff;
        else if (hp->n_expert_used) hp->n_ff_exp = hp->n_ff / hp->n_expert_used;
    }
}

// Upper bounds as llama.cpp's (LLAMA_MAX_LAYERS 512, LLAMA_MAX_EXPERTS 512); dims bounded to keep products sane.
#define MAX_LAYERS 512
#define MAX_EXPERTS 512
#define MAX_DIM (1u << 24)

int st_hparams_check(const st_hparams *hp) {
    const arch_entry *e = arch_get(hp->arch);
    if (!e) return st_err("architecture %d is not supported", (int)hp->arch);
    const char *a = e->name;
#define NEED(cond, ...)                          \
    do {                                         \
        if (!(cond)) return st_err(__VA_ARGS__); \
    } while (0)
    NEED(hp->n_layer >= 1 && hp->n_layer <= MAX_LAYERS, "%s.block_count = %u: expected 1..%d", a, hp->n_layer,
         MAX_LAYERS);
    NEED(hp->n_embd >= 1 && hp->n_embd <= MAX_DIM, "%s.embedding_length = %u: expected 1..%u", a, hp->n_embd,
         MAX_DIM);
    NEED(hp->n_ctx_train >= 1, "%s.context_length = %u: expected > 0", a, hp->n_ctx_train);
    NEED(hp->n_head >= 1 && hp->n_head <= 4096, "%s.attention.head_count = %u: expected 1..4096", a, hp->n_head);
    NEED(hp->n_head_kv >= 1 && hp->n_head_kv <= hp->n_head && hp->n_head % hp->n_head_kv == 0,
         "%s.attention.head_count_kv = %u: expected a divisor of head_count %u", a, hp->n_head_kv, hp->n_head);
    NEED(hp->head_dim_k >= 2 && hp->head_dim_k <= 4096 && hp->head_dim_k % 2 == 0,
         "%s.attention.key_length = %u: expected an even value in 2..4096", a, hp->head_dim_k);
    // These graphs use one head width for Q, K and V (llama.cpp asserts n_embd_head_k == n_embd_head_v).
    NEED(hp->head_dim_v == hp->head_dim_k, "%s.attention.value_length = %u: expected key_length %u", a,
         hp->head_dim_v, hp->head_dim_k);
    NEED(hp->n_rot == hp->head_dim_k, "%s.rope.dimension_count = %u: expected key_length %u", a, hp->n_rot,
         hp->head_dim_k);
    NEED(hp->n_vocab >= 1 && hp->n_vocab <= (1u << 24), "n_vocab = %u: expected 1..%u (from %s.vocab_size, "
         "tokenizer.ggml.tokens or token_embd.weight)", hp->n_vocab, 1u << 24, a);
    NEED(isfinite(hp->rms_eps) && hp->rms_eps > 0 && hp->rms_eps < 1,
         "%s.attention.layer_norm_rms_epsilon = %g: expected a value in (0, 1)", a, hp->rms_eps);
    NEED(isfinite(hp->rope_freq_base) && hp->rope_freq_base > 0, "%s.rope.freq_base = %g: expected > 0", a,
         hp->rope_freq_base);
    NEED(isfinite(hp->rope_freq_scale) && hp->rope_freq_scale > 0,
         "%s.rope.scaling.factor gives freq scale %g: expected > 0", a, hp->rope_freq_scale);
    if (hp->n_expert == 0) {
        NEED(e->moe != MOE_REQUIRED, "%s.expert_count: missing or 0, but %s is a mixture-of-experts architecture",
             a, a);
        NEED(hp->n_expert_used == 0, "%s.expert_used_count = %u: expected 0 when expert_count is 0", a,
             hp->n_expert_used);
        NEED(hp->n_ff >= 1 && hp->n_ff <= MAX_DIM, "%s.feed_forward_length = %u: expected 1..%u", a, hp->n_ff,
             MAX_DIM);
    } else {
        NEED(e->moe != MOE_NO, "%s.expert_count = %u: %s has no mixture-of-experts layers (expected 0)", a,
             hp->n_expert, a);
        NEED(hp->n_expert >= 1 && hp->n_expert <= MAX_EXPERTS, "%s.expert_count = %u: expected 1..%d", a,
             hp->n_expert, MAX_EXPERTS);
        NEED(hp->n_expert_used >= 1 && hp->n_expert_used <= hp->n_expert,
             "%s.expert_used_count = %u: expected 1..expert_count (%u)", a, hp->n_expert_used, hp->n_expert);
        NEED(hp->n_ff_exp >= 1 && hp->n_ff_exp <= MAX_DIM, "%s.expert_feed_forward_length = %u: expected 1..%u",
             a, hp->n_ff_exp, MAX_DIM);
    }
#undef NEED
    return 0;
}

// ---- reading from GGUF ---------------------------------------------------------------------------------------

// Reads an unsigned integer key "{arch}.{suffix}". Per-layer arrays are accepted when all elements are equal
// (llama.cpp's get_key_or_arr); these architectures have no per-layer variation.
// Returns 1 if found, 0 if absent (and !required), -1 on error.
static int get_uint_key(const gguf_ctx *ctx, const char *arch, const char *suffix, bool required, uint32_t *out) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const gguf_kv *kv = gguf_find_kv(ctx, key);
    if (!kv) {
        if (required) return st_err("metadata key '%s' is missing (required for %s)", key, arch);
        return 0;
    }
    if (kv->value.type == GGUF_VT_ARRAY) {
        gguf_vtype et = kv->value.arr.elem_type;
        if (et == GGUF_VT_STRING || et == GGUF_VT_ARRAY || et == GGUF_VT_FLOAT32 || et == GGUF_VT_FLOAT64 ||
            kv->value.arr.n == 0)
            return st_err("metadata key '%s': expected an integer or a non-empty integer array, got array of %s",
                          key, gguf_vtype_name(et));
        int64_t v0 = gguf_arr_i64(&kv->value, 0);
        for (uint64_t i = 1; i < kv->value.arr.n; i++)
            if (gguf_arr_i64(&kv->value, i) != v0)
                return st_err("metadata key '%s': per-layer values differ (element %" PRIu64 " = %" PRId64
                              ", element 0 = %" PRId64 "); not supported",
                              key, i, gguf_arr_i64(&kv->value, i), v0);
        if (v0 < 0 || v0 > UINT32_MAX) return st_err("metadata key '%s' = %" PRId64 ": out of range", key, v0);
        *out = (uint32_t)v0;
        return 1;
    }
    if (gguf_get_u32(ctx, key, out) != 0) return st_err_prefix("metadata key '%s': ", key);
    return 1;
}

static int get_float_key(const gguf_ctx *ctx, const char *arch, const char *suffix, bool required, float *out) {
    char key[160];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!gguf_find_kv(ctx, key)) {
        if (required) return st_err("metadata key '%s' is missing (required for %s)", key, arch);
        return 0;
    }
    if (gguf_get_f32(ctx, key, out) != 0) return st_err_prefix("metadata key '%s': ", key);
    return 1;
}

int st_hparams_from_gguf(const gguf_ctx *ctx, st_hparams *hp) {
    memset(hp, 0, sizeof *hp);
    hp->arch = ST_ARCH_UNKNOWN;
    char *aname = gguf_get_str_dup(ctx, "general.architecture");
    if (!aname) return st_err("metadata key 'general.architecture' is missing or not a string");
    st_arch arch = st_arch_from_name(aname);
    if (arch == ST_ARCH_UNKNOWN) {
        st_err("architecture '%s' (general.architecture) is not supported; supported: llama, qwen3, qwen3moe",
               aname);
        free(aname);
        return -1;
    }
    free(aname);
    const char *a = st_arch_name(arch);
    hp->arch = arch;

    if (get_uint_key(ctx, a, "block_count", true, &hp->n_layer) < 0) return -1;
    if (get_uint_key(ctx, a, "context_length", true, &hp->n_ctx_train) < 0) return -1;
    if (get_uint_key(ctx, a, "embedding_length", true, &hp->n_embd) < 0) return -1;
    if (get_uint_key(ctx, a, "attention.head_count", true, &hp->n_head) < 0) return -1;
    if (get_uint_key(ctx, a, "attention.head_count_kv", false, &hp->n_head_kv) < 0) return -1;
    const arch_entry *e = arch_get(arch);
    if (get_uint_key(ctx, a, "expert_count", e->moe == MOE_REQUIRED, &hp->n_expert) < 0) return -1;
    if (get_uint_key(ctx, a, "expert_used_count", e->moe == MOE_REQUIRED, &hp->n_expert_used) < 0) return -1;
    // Dense models need feed_forward_length; qwen3moe only uses it as a fallback for the expert width.
    bool ff_required = hp->n_expert == 0 || e->ff_exp_from_ff;
    if (get_uint_key(ctx, a, "feed_forward_length", ff_required, &hp->n_ff) < 0) return -1;
    if (get_uint_key(ctx, a, "expert_feed_forward_length", false, &hp->n_ff_exp) < 0) return -1;
    if (e->ff_exp_from_ff && hp->n_expert > 0) hp->n_ff_exp = hp->n_ff;
    if (get_uint_key(ctx, a, "attention.key_length", false, &hp->head_dim_k) < 0) return -1;
    if (get_uint_key(ctx, a, "attention.value_length", false, &hp->head_dim_v) < 0) return -1;
    if (get_uint_key(ctx, a, "rope.dimension_count", false, &hp->n_rot) < 0) return -1;
    if (get_float_key(ctx, a, "attention.layer_norm_rms_epsilon", true, &hp->rms_eps) < 0) return -1;
    if (get_float_key(ctx, a, "rope.freq_base", false, &hp->rope_freq_base) < 0) return -1;
    float factor = 0;
    if (get_float_key(ctx, a, "rope.scaling.factor", false, &factor) < 0) return -1;
    hp->rope_freq_scale = factor == 0 ? 1.0f : 1.0f / factor;

    // n_vocab: explicit key, else the tokenizer's token count, else the embedding's rows.
    uint32_t nv = 0;
    int r = get_uint_key(ctx, a, "vocab_size", false, &nv);
    if (r < 0) return -1;
    if (r == 0) {
        const gguf_kv *tk = gguf_find_kv(ctx, "tokenizer.ggml.tokens");
        const gguf_tensor *te = gguf_find_tensor(ctx, "token_embd.weight");
        if (tk && tk->value.type == GGUF_VT_ARRAY) nv = (uint32_t)tk->value.arr.n;
        else if (te && te->n_dims >= 2) nv = (uint32_t)te->ne[1];
    }
    hp->n_vocab = nv;
    hp->tied_output = gguf_find_tensor(ctx, "output.weight") == NULL;
    st_hparams_defaults(hp);
    // rope.freq_base absent means llama.cpp's default 10000, which st_hparams_defaults set.
    return st_hparams_check(hp);
}

// ---- tensor enumeration ---------------------------------------------------------------------------------------

static int64_t dim_value(const st_hparams *hp, dim_sym d) {
    switch (d) {
        case D_EMBD: return hp->n_embd;
        case D_FF: return hp->n_ff;
        case D_QDIM: return (int64_t)hp->n_head * hp->head_dim_k;
        case D_KDIM: return (int64_t)hp->n_head_kv * hp->head_dim_k;
        case D_VDIM: return (int64_t)hp->n_head_kv * hp->head_dim_v;
        case D_ODIM: return (int64_t)hp->n_head * hp->head_dim_v;
        case D_HEADK: return hp->head_dim_k;
        case D_EXPERT: return hp->n_expert;
        case D_FFEXP: return hp->n_ff_exp;
        case D_VOCAB: return hp->n_vocab;
        default: return 1;
    }
}

static bool cond_holds(const st_hparams *hp, tensor_cond c) {
    switch (c) {
        case C_DENSE: return hp->n_expert == 0;
        case C_MOE: return hp->n_expert > 0;
        case C_UNTIED: return !hp->tied_output;
        default: return true;
    }
}

static st_tensor_class role_class(st_tensor_role r) {
    switch (r) {
        case ST_T_OUTPUT_NORM:
        case ST_T_ATTN_NORM:
        case ST_T_ATTN_Q_NORM:
        case ST_T_ATTN_K_NORM:
        case ST_T_FFN_NORM: return ST_TCLASS_NORM;
        case ST_T_FFN_GATE_INP: return ST_TCLASS_ROUTER;
        default: return ST_TCLASS_WEIGHT;
    }
}

static void spec_from_tmpl(const st_hparams *hp, const tensor_tmpl *t, int layer, st_tensor_spec *s) {
    memset(s, 0, sizeof *s);
    if (t->per_layer) snprintf(s->name, sizeof s->name, t->name, layer);
    else snprintf(s->name, sizeof s->name, "%s", t->name);
    s->role = t->role;
    s->tclass = role_class(t->role);
    s->layer = t->per_layer ? layer : -1;
    s->n_dims = 0;
    for (int i = 0; i < GGUF_MAX_DIMS; i++) s->ne[i] = 1;
    for (int i = 0; i < 3 && t->dims[i] != D_NONE; i++) {
        s->ne[i] = dim_value(hp, t->dims[i]);
        s->n_dims = (uint32_t)i + 1;
    }
    s->expert = t->role == ST_T_FFN_GATE_EXPS || t->role == ST_T_FFN_UP_EXPS || t->role == ST_T_FFN_DOWN_EXPS;
}

static int count_tmpl(const st_hparams *hp, const tensor_tmpl *t, bool per_layer_list) {
    int n = 0;
    for (; t->name; t++)
        if (cond_holds(hp, t->cond)) n++;
    return per_layer_list ? n * (int)hp->n_layer : n;
}

st_tensor_spec *st_arch_tensors(const st_hparams *hp, int *n_out) {
    const arch_entry *e = arch_get(hp->arch);
    if (!e) {
        st_err("architecture %d is not supported", (int)hp->arch);
        return NULL;
    }
    int n = count_tmpl(hp, e->global_pre, false) + count_tmpl(hp, e->layer, true) +
            count_tmpl(hp, e->global_post, false);
    st_tensor_spec *specs = calloc((size_t)n, sizeof *specs);
    if (!specs) {
        st_err("out of memory for %d tensor specs", n);
        return NULL;
    }
    int k = 0;
    for (const tensor_tmpl *t = e->global_pre; t->name; t++)
        if (cond_holds(hp, t->cond)) spec_from_tmpl(hp, t, -1, &specs[k++]);
    for (int l = 0; l < (int)hp->n_layer; l++)
        for (const tensor_tmpl *t = e->layer; t->name; t++)
            if (cond_holds(hp, t->cond)) spec_from_tmpl(hp, t, l, &specs[k++]);
    for (const tensor_tmpl *t = e->global_post; t->name; t++)
        if (cond_holds(hp, t->cond)) spec_from_tmpl(hp, t, -1, &specs[k++]);
    *n_out = k;
    return specs;
}

static void fmt_shape(char *buf, size_t n, uint32_t n_dims, const int64_t *ne) {
    size_t off = (size_t)snprintf(buf, n, "[");
    for (uint32_t i = 0; i < n_dims && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%" PRId64, i ? ", " : "", ne[i]);
    if (off < n) snprintf(buf + off, n - off, "]");
}

static bool type_ok_for_class(st_tensor_class c, int type) {
    switch (c) {
        case ST_TCLASS_NORM: return type == ST_TYPE_F32;
        case ST_TCLASS_ROUTER: return type == ST_TYPE_F32 || type == ST_TYPE_F16 || type == ST_TYPE_BF16;
        default: {
            const st_type_info *ti = st_type_get(type);
            return ti && ti->can_dequantize;
        }
    }
}

static const char *class_types(st_tensor_class c) {
    switch (c) {
        case ST_TCLASS_NORM: return "F32";
        case ST_TCLASS_ROUTER: return "F32, F16 or BF16";
        default: return "a type strata can dequantize";
    }
}

int st_arch_validate(const gguf_ctx *ctx, const st_hparams *hp, const char *fname, int *n_unknown) {
    int n = 0;
    st_tensor_spec *specs = st_arch_tensors(hp, &n);
    if (!specs) return -1;
    int rc = 0;
    char want[96], got[96];
    for (int i = 0; i < n && rc == 0; i++) {
        const st_tensor_spec *s = &specs[i];
        const gguf_tensor *t = gguf_find_tensor(ctx, s->name);
        fmt_shape(want, sizeof want, s->n_dims, s->ne);
        if (!t) {
            rc = st_err("%s: tensor '%s' is missing (expected shape %s for %s)", fname, s->name, want,
                        st_arch_name(hp->arch));
            break;
        }
        // Trailing dims of 1 are equivalent (a 2D [n, 1] tensor may be stored with n_dims 1 or 2).
        bool same = true;
        for (int d = 0; d < GGUF_MAX_DIMS; d++)
            if (t->ne[d] != s->ne[d]) same = false;
        if (!same) {
            fmt_shape(got, sizeof got, t->n_dims, t->ne);
            rc = st_err("%s: tensor '%s' has shape %s, expected %s", fname, s->name, got, want);
            break;
        }
        if (!type_ok_for_class(s->tclass, t->type)) {
            rc = st_err("%s: tensor '%s' has type %s, expected %s", fname, s->name, st_type_name(t->type),
                        class_types(s->tclass));
            break;
        }
        const st_type_info *ti = st_type_get(t->type);
        if (!ti || t->ne[0] % ti->block_size != 0) {
            rc = st_err("%s: tensor '%s': row length %" PRId64 " is not a multiple of %s's block size %d", fname,
                        s->name, t->ne[0], st_type_name(t->type), ti ? ti->block_size : 0);
            break;
        }
    }
    if (rc == 0 && n_unknown) {
        // Every expected name is distinct, so the unknown count is the difference.
        *n_unknown = (int)ctx->n_tensors - n;
    }
    free(specs);
    return rc;
}

void st_hparams_param_count(const st_hparams *hp, uint64_t *total, uint64_t *active) {
    int n = 0;
    st_tensor_spec *specs = st_arch_tensors(hp, &n);
    uint64_t tot = 0, act = 0;
    for (int i = 0; specs && i < n; i++) {
        uint64_t ne = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) ne *= (uint64_t)specs[i].ne[d];
        tot += ne;
        if (specs[i].expert && hp->n_expert > 0) act += ne / hp->n_expert * hp->n_expert_used;
        else act += ne;
    }
    free(specs);
    if (total) *total = tot;
    if (active) *active = act;
}

uint64_t st_hparams_kv_bytes(const st_hparams *hp, uint64_t n_ctx, int elem_bytes) {
    uint64_t per_pos = (uint64_t)hp->n_head_kv * (hp->head_dim_k + hp->head_dim_v);
    return (uint64_t)hp->n_layer * n_ctx * per_pos * (uint64_t)elem_bytes;
}
