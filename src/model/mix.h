// Quantization mixes ("file types"): which element type each tensor of a model gets in a file quantized with
// llama.cpp's llama-quantize to a given ftype (Q4_K_M, IQ1_M, ...), so make-model writes files whose per-tensor
// types look like real downloads. The rules are facts from llama.cpp's src/llama-quant.cpp
// (llama_tensor_get_type_impl, tensor_type_fallback, llama_ftype_get_default_type; llama-cpp-python 0.3.36),
// re-expressed for our tensor roles, assuming no importance matrix and default quantize parameters.
#ifndef STRATA_MODEL_MIX_H
#define STRATA_MODEL_MIX_H

#include "model/arch.h"

// Values are llama.cpp's llama_ftype (they go into general.file_type).
typedef enum st_ftype {
    ST_FTYPE_F32 = 0,
    ST_FTYPE_F16 = 1,
    ST_FTYPE_Q4_0 = 2,
    ST_FTYPE_Q4_1 = 3,
    ST_FTYPE_Q8_0 = 7,
    ST_FTYPE_Q5_0 = 8,
    ST_FTYPE_Q5_1 = 9,
    ST_FTYPE_Q2_K = 10,
    ST_FTYPE_Q3_K_S = 11,
    ST_FTYPE_Q3_K_M = 12,
    ST_FTYPE_Q3_K_L = 13,
    ST_FTYPE_Q4_K_S = 14,
    ST_FTYPE_Q4_K_M = 15,
    ST_FTYPE_Q5_K_S = 16,
    ST_FTYPE_Q5_K_M = 17,
    ST_FTYPE_Q6_K = 18,
    ST_FTYPE_IQ2_XXS = 19,
    ST_FTYPE_IQ2_XS = 20,
    ST_FTYPE_Q2_K_S = 21,
    ST_FTYPE_IQ3_XS = 22,
    ST_FTYPE_IQ3_XXS = 23,
    ST_FTYPE_IQ1_S = 24,
    ST_FTYPE_IQ4_NL = 25,
    ST_FTYPE_IQ3_S = 26,
    ST_FTYPE_IQ3_M = 27,
    ST_FTYPE_IQ2_S = 28,
    ST_FTYPE_IQ2_M = 29,
    ST_FTYPE_IQ4_XS = 30,
    ST_FTYPE_IQ1_M = 31,
    ST_FTYPE_BF16 = 32,
} st_ftype;

// "Q4_K_M" -> ST_FTYPE_Q4_K_M (case-insensitive); -1 if unknown.
int st_ftype_from_name(const char *name);
const char *st_ftype_name(int ftype);  // "?" if unknown
// Comma-separated list of all mix names (for --help).
const char *st_ftype_list(void);

// The element type (st_type) tensor `t` gets under `ftype` for a model with hparams `hp`. Never fails for a known
// ftype: shapes whose rows do not fit the chosen block fall back like llama.cpp does (down to F16).
int st_mix_tensor_type(int ftype, const st_hparams *hp, const st_tensor_spec *t);

#endif
