// Per-tensor type selection for quantization mixes. Facts from llama.cpp src/llama-quant.cpp (llama-cpp-python
// 0.3.36): the default type per ftype, the category-specific bumps (attn_v, ffn_down, attn_output, output and
// token_embd), the "use more bits" layer pattern and the fallbacks for rows that are not a multiple of the block.
// Assumptions: no importance matrix, no user overrides, "pure" off, tensors processed in layer order (llama.cpp
// sorts weights by block index, so its attn_v / ffn_down counters equal the block index for these archs).
#include "model/mix.h"

#include <stdbool.h>
#include <stddef.h>
#include <strings.h>

#include "quant/quant.h"

typedef struct {
    int ftype;
    const char *name;
    int default_type;  // llama_ftype_get_default_type
} ftype_entry;

static const ftype_entry ftypes[] = {
    {ST_FTYPE_F32, "F32", ST_TYPE_F32},
    {ST_FTYPE_F16, "F16", ST_TYPE_F16},
    {ST_FTYPE_BF16, "BF16", ST_TYPE_BF16},
    {ST_FTYPE_Q8_0, "Q8_0", ST_TYPE_Q8_0},
    {ST_FTYPE_Q4_0, "Q4_0", ST_TYPE_Q4_0},
    {ST_FTYPE_Q4_1, "Q4_1", ST_TYPE_Q4_1},
    {ST_FTYPE_Q5_0, "Q5_0", ST_TYPE_Q5_0},
    {ST_FTYPE_Q5_1, "Q5_1", ST_TYPE_Q5_1},
    {ST_FTYPE_Q2_K, "Q2_K", ST_TYPE_Q2_K},
    {ST_FTYPE_Q2_K_S, "Q2_K_S", ST_TYPE_Q2_K},
    {ST_FTYPE_Q3_K_S, "Q3_K_S", ST_TYPE_Q3_K},
    {ST_FTYPE_Q3_K_M, "Q3_K_M", ST_TYPE_Q3_K},
    {ST_FTYPE_Q3_K_L, "Q3_K_L", ST_TYPE_Q3_K},
    {ST_FTYPE_Q4_K_S, "Q4_K_S", ST_TYPE_Q4_K},
    {ST_FTYPE_Q4_K_M, "Q4_K_M", ST_TYPE_Q4_K},
    {ST_FTYPE_Q5_K_S, "Q5_K_S", ST_TYPE_Q5_K},
    {ST_FTYPE_Q5_K_M, "Q5_K_M", ST_TYPE_Q5_K},
    {ST_FTYPE_Q6_K, "Q6_K", ST_TYPE_Q6_K},
    {ST_FTYPE_IQ1_S, "IQ1_S", ST_TYPE_IQ1_S},
    {ST_FTYPE_IQ1_M, "IQ1_M", ST_TYPE_IQ1_M},
    {ST_FTYPE_IQ2_XXS, "IQ2_XXS", ST_TYPE_IQ2_XXS},
    {ST_FTYPE_IQ2_XS, "IQ2_XS", ST_TYPE_IQ2_XS},
    {ST_FTYPE_IQ2_S, "IQ2_S", ST_TYPE_IQ2_XS},  // sic: IQ2_S mixes use IQ2_XS as the base type
    {ST_FTYPE_IQ2_M, "IQ2_M", ST_TYPE_IQ2_S},
    {ST_FTYPE_IQ3_XXS, "IQ3_XXS", ST_TYPE_IQ3_XXS},
    {ST_FTYPE_IQ3_XS, "IQ3_XS", ST_TYPE_IQ3_S},
    {ST_FTYPE_IQ3_S, "IQ3_S", ST_TYPE_IQ3_S},
    {ST_FTYPE_IQ3_M, "IQ3_M", ST_TYPE_IQ3_S},
    {ST_FTYPE_IQ4_NL, "IQ4_NL", ST_TYPE_IQ4_NL},
    {ST_FTYPE_IQ4_XS, "IQ4_XS", ST_TYPE_IQ4_XS},
};
#define N_FTYPES ((int)(sizeof ftypes / sizeof ftypes[0]))

static const ftype_entry *ftype_get(int ftype) {
    for (int i = 0; i < N_FTYPES; i++)
        if (ftypes[i].ftype == ftype) return &ftypes[i];
    return NULL;
}

int st_ftype_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < N_FTYPES; i++)
        if (!strcasecmp(ftypes[i].name, name)) return ftypes[i].ftype;
    return -1;
}

const char *st_ftype_name(int ftype) {
    const ftype_entry *e = ftype_get(ftype);
    return e ? e->name : "?";
}

const char *st_ftype_list(void) {
    return "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q2_K_S, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, "
           "Q5_K_S, Q5_K_M, Q6_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M, IQ3_XXS, IQ3_XS, IQ3_S, IQ3_M, "
           "IQ4_NL, IQ4_XS";
}

// llama-quant.cpp's tensor categories.
typedef enum { CAT_TOKEN_EMBD, CAT_ATTN_Q, CAT_ATTN_V, CAT_ATTN_K, CAT_ATTN_OUT, CAT_FFN_UP, CAT_FFN_GATE,
               CAT_FFN_DOWN, CAT_OUTPUT, CAT_OTHER } category;

static category role_category(st_tensor_role r) {
    switch (r) {
        case ST_T_TOKEN_EMBD: return CAT_TOKEN_EMBD;
        case ST_T_OUTPUT: return CAT_OUTPUT;
        case ST_T_ATTN_Q: return CAT_ATTN_Q;
        case ST_T_ATTN_K: return CAT_ATTN_K;
        case ST_T_ATTN_V: return CAT_ATTN_V;
        case ST_T_ATTN_OUT: return CAT_ATTN_OUT;
        case ST_T_FFN_UP:
        case ST_T_FFN_UP_EXPS: return CAT_FFN_UP;
        case ST_T_FFN_GATE:
        case ST_T_FFN_GATE_EXPS: return CAT_FFN_GATE;
        case ST_T_FFN_DOWN:
        case ST_T_FFN_DOWN_EXPS: return CAT_FFN_DOWN;
        default: return CAT_OTHER;
    }
}

static bool is_quantized(int type) {
    return type != ST_TYPE_F32 && type != ST_TYPE_F16 && type != ST_TYPE_BF16 && type != ST_TYPE_F64;
}

static int block_size(int type) {
    const st_type_info *ti = st_type_get(type);
    return ti ? ti->block_size : 1;
}

// llama.cpp's "use_more_bits": the first and last eighth of the layers plus every third layer in between.
static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// llama_tensor_get_type_impl for the categories our archs have (falcon / glm5 / bailing / MXFP4 cases dropped).
static int pick(int ft, int new_type, const st_hparams *hp, const st_tensor_spec *t, category cat) {
    const int n_layer = (int)hp->n_layer;
    const int il = t->layer;
    const uint32_t n_gqa = hp->n_head_kv ? hp->n_head / hp->n_head_kv : 0;
    const uint32_t n_expert = hp->n_expert;
    // llama.cpp's LLM_TYPE_70B for the llama arch: 80 layers with GQA.
    const bool is_70b = hp->arch == ST_ARCH_LLAMA && n_layer == 80 && hp->n_head != hp->n_head_kv;
    const bool low_iq = ft == ST_FTYPE_IQ2_XXS || ft == ST_FTYPE_IQ2_XS || ft == ST_FTYPE_IQ1_S ||
                        ft == ST_FTYPE_IQ2_S || ft == ST_FTYPE_IQ2_M || ft == ST_FTYPE_IQ1_M;

    if (cat == CAT_OUTPUT || (hp->tied_output && cat == CAT_TOKEN_EMBD)) {
        // The LM head (or the tied embedding that serves as it) keeps more bits.
        if (t->ne[0] % block_size(new_type) != 0) return ST_TYPE_Q8_0;
        if (ft == ST_FTYPE_IQ2_XXS || ft == ST_FTYPE_IQ2_XS || ft == ST_FTYPE_IQ3_XXS || ft == ST_FTYPE_IQ1_S ||
            ft == ST_FTYPE_IQ2_S || ft == ST_FTYPE_IQ2_M || ft == ST_FTYPE_IQ1_M)
            return ST_TYPE_Q5_K;
        if (new_type != ST_TYPE_Q8_0) return ST_TYPE_Q6_K;
        return new_type;
    }
    if (cat == CAT_TOKEN_EMBD) {
        if (ft == ST_FTYPE_IQ2_XXS || ft == ST_FTYPE_IQ2_XS || ft == ST_FTYPE_IQ1_S || ft == ST_FTYPE_IQ1_M)
            return ST_TYPE_Q2_K;
        if (ft == ST_FTYPE_IQ2_S || ft == ST_FTYPE_IQ2_M || ft == ST_FTYPE_IQ3_XXS) return ST_TYPE_IQ3_S;
        return new_type;
    }
    if (low_iq) {
        const bool s_or_m = ft == ST_FTYPE_IQ2_S || ft == ST_FTYPE_IQ2_M;
        if (cat == CAT_ATTN_V) {
            if (n_gqa >= 4 || n_expert >= 4) return ST_TYPE_Q4_K;
            return s_or_m ? ST_TYPE_IQ3_S : ST_TYPE_Q2_K;
        }
        if (n_expert == 8 && cat == CAT_ATTN_K) return ST_TYPE_Q4_K;
        if (cat == CAT_FFN_DOWN) {
            if (il < n_layer / 8) return s_or_m ? ST_TYPE_IQ3_S : ST_TYPE_Q2_K;
            return new_type;
        }
        if (cat == CAT_ATTN_OUT) {
            if (n_expert == 8) return ST_TYPE_Q5_K;
            if (ft == ST_FTYPE_IQ1_S || ft == ST_FTYPE_IQ1_M) return ST_TYPE_IQ2_XXS;
            if (s_or_m) return ST_TYPE_IQ3_S;
        }
        return new_type;
    }
    if (cat == CAT_ATTN_V) {
        const int i = il, n = n_layer;  // attn_v counter == block index
        if (ft == ST_FTYPE_Q2_K) new_type = n_gqa >= 4 ? ST_TYPE_Q4_K : ST_TYPE_Q3_K;
        else if (ft == ST_FTYPE_Q2_K_S && n_gqa >= 4) new_type = ST_TYPE_Q4_K;
        else if (ft == ST_FTYPE_IQ3_XXS) new_type = n_gqa >= 4 ? ST_TYPE_Q4_K : ST_TYPE_IQ3_S;  // no imatrix
        else if ((ft == ST_FTYPE_IQ3_XS || ft == ST_FTYPE_IQ3_S) && n_gqa >= 4) new_type = ST_TYPE_Q4_K;
        else if (ft == ST_FTYPE_IQ3_M) new_type = ST_TYPE_Q4_K;
        else if (ft == ST_FTYPE_Q3_K_M) new_type = i < 2 ? ST_TYPE_Q5_K : ST_TYPE_Q4_K;
        else if (ft == ST_FTYPE_Q3_K_L) new_type = ST_TYPE_Q5_K;
        else if ((ft == ST_FTYPE_IQ4_NL || ft == ST_FTYPE_IQ4_XS) && n_gqa >= 4) new_type = ST_TYPE_Q5_K;
        else if ((ft == ST_FTYPE_Q4_K_M || ft == ST_FTYPE_Q5_K_M) && use_more_bits(i, n)) new_type = ST_TYPE_Q6_K;
        else if (ft == ST_FTYPE_Q4_K_S && i < 4) new_type = ST_TYPE_Q5_K;
        if (is_70b && (new_type == ST_TYPE_Q3_K || new_type == ST_TYPE_Q4_K)) new_type = ST_TYPE_Q5_K;
        if (n_expert == 8) new_type = ST_TYPE_Q8_0;
        return new_type;
    }
    if (cat == CAT_ATTN_K) {
        if (n_expert == 8) return ST_TYPE_Q8_0;
        if (ft == ST_FTYPE_IQ3_XS) return ST_TYPE_IQ3_XXS;
        if (ft == ST_FTYPE_IQ3_XXS) return ST_TYPE_IQ2_S;
        return new_type;
    }
    if (cat == CAT_ATTN_Q) {
        if (ft == ST_FTYPE_IQ3_XS) return ST_TYPE_IQ3_XXS;
        if (ft == ST_FTYPE_IQ3_XXS) return ST_TYPE_IQ2_S;
        return new_type;
    }
    if (cat == CAT_FFN_DOWN) {
        const int i = il, n = n_layer;
        if (ft == ST_FTYPE_Q2_K) new_type = ST_TYPE_Q3_K;
        else if (ft == ST_FTYPE_Q2_K_S) {
            if (i < n / 8) new_type = ST_TYPE_Q4_K;
        } else if (ft == ST_FTYPE_IQ3_XXS) new_type = i < n / 8 ? ST_TYPE_Q4_K : ST_TYPE_Q3_K;  // no imatrix
        else if (ft == ST_FTYPE_Q3_K_M) new_type = i < n / 16 ? ST_TYPE_Q5_K : ST_TYPE_Q4_K;  // not falcon
        else if (ft == ST_FTYPE_IQ3_M && (i < n / 8 || (n_expert == 8 && use_more_bits(i, n))))
            new_type = ST_TYPE_Q4_K;
        else if (ft == ST_FTYPE_Q3_K_L) new_type = ST_TYPE_Q5_K;
        else if (ft == ST_FTYPE_Q4_K_M) {
            if (use_more_bits(i, n)) new_type = ST_TYPE_Q6_K;
        } else if (i < n / 8 && (ft == ST_FTYPE_IQ4_NL || ft == ST_FTYPE_IQ4_XS)) new_type = ST_TYPE_Q5_K;
        else if (ft == ST_FTYPE_Q5_K_M && use_more_bits(i, n)) new_type = ST_TYPE_Q6_K;
        else if (ft == ST_FTYPE_Q4_K_S && i < n / 8) new_type = ST_TYPE_Q5_K;
        return new_type;
    }
    if (cat == CAT_ATTN_OUT) {
        if (n_expert == 8) {
            if (ft == ST_FTYPE_Q2_K || ft == ST_FTYPE_IQ3_XS || ft == ST_FTYPE_IQ3_XXS || ft == ST_FTYPE_Q3_K_S ||
                ft == ST_FTYPE_Q3_K_M || ft == ST_FTYPE_IQ4_NL || ft == ST_FTYPE_Q4_K_S || ft == ST_FTYPE_Q4_K_M ||
                ft == ST_FTYPE_IQ3_S || ft == ST_FTYPE_IQ3_M || ft == ST_FTYPE_IQ4_XS)
                new_type = ST_TYPE_Q5_K;
        } else {
            if (ft == ST_FTYPE_Q2_K) new_type = ST_TYPE_Q3_K;
            else if (ft == ST_FTYPE_IQ3_XXS) new_type = ST_TYPE_IQ3_S;
            else if (ft == ST_FTYPE_Q3_K_M) new_type = ST_TYPE_Q4_K;
            else if (ft == ST_FTYPE_Q3_K_L) new_type = ST_TYPE_Q5_K;
            else if (ft == ST_FTYPE_IQ3_M) new_type = ST_TYPE_Q4_K;
        }
        return new_type;
    }
    if (cat == CAT_FFN_GATE || cat == CAT_FFN_UP) {
        if (ft == ST_FTYPE_IQ3_XS && il >= n_layer / 8 && il < 7 * n_layer / 8) new_type = ST_TYPE_IQ3_XXS;
        return new_type;
    }
    return new_type;
}

// tensor_type_fallback: rows that do not split into the chosen blocks get a smaller-block type, else F16.
static int fallback(int type, int64_t ncols) {
    if (ncols % block_size(type) == 0) return type;
    int r;
    switch (type) {
        case ST_TYPE_IQ1_S:
        case ST_TYPE_IQ1_M:
        case ST_TYPE_IQ2_XXS:
        case ST_TYPE_IQ2_XS:
        case ST_TYPE_IQ2_S:
        case ST_TYPE_IQ3_XXS:
        case ST_TYPE_IQ3_S:
        case ST_TYPE_IQ4_XS: r = ST_TYPE_IQ4_NL; break;
        case ST_TYPE_Q2_K:
        case ST_TYPE_Q3_K:
        case ST_TYPE_TQ1_0:
        case ST_TYPE_TQ2_0: r = ST_TYPE_Q4_0; break;
        case ST_TYPE_Q4_K: r = ST_TYPE_Q5_0; break;
        case ST_TYPE_Q5_K: r = ST_TYPE_Q5_1; break;
        case ST_TYPE_Q6_K: r = ST_TYPE_Q8_0; break;
        default: r = type; break;  // already a 32-block type
    }
    if (ncols % block_size(r) != 0) r = ST_TYPE_F16;
    return r;
}

int st_mix_tensor_type(int ftype, const st_hparams *hp, const st_tensor_spec *t) {
    const ftype_entry *fe = ftype_get(ftype);
    int def = fe ? fe->default_type : ST_TYPE_F16;
    // Only 2D/3D "weight" tensors are quantized: norms stay F32 and routers keep their F32 source type
    // (convert_hf_to_gguf stores ffn_gate_inp as F32; llama-quantize never quantizes it).
    if (t->tclass != ST_TCLASS_WEIGHT || t->n_dims < 2) return ST_TYPE_F32;
    if (!is_quantized(def)) {
        // F32 / F16 / BF16 files: every matrix in that type (rows of any length fit).
        return def;
    }
    int type = pick(ftype, def, hp, t, role_category(t->role));
    return fallback(type, t->ne[0]);
}
