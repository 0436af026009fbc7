// Tensor element types (GGML's numbering, as stored in GGUF tensor infos) and their block formats:
// sizes, dequantization, reference quantization and random valid blocks.
//
// A row of n elements of a block-quantized type is n / block_size consecutive blocks of type_size bytes.
// Block layouts are GGML's (facts transcribed from ggml-common.h / the gguf Python package; see quant/blocks.h).
#ifndef STRATA_QUANT_QUANT_H
#define STRATA_QUANT_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_type {
    ST_TYPE_F32 = 0,
    ST_TYPE_F16 = 1,
    ST_TYPE_Q4_0 = 2,
    ST_TYPE_Q4_1 = 3,
    ST_TYPE_Q5_0 = 6,
    ST_TYPE_Q5_1 = 7,
    ST_TYPE_Q8_0 = 8,
    ST_TYPE_Q8_1 = 9,
    ST_TYPE_Q2_K = 10,
    ST_TYPE_Q3_K = 11,
    ST_TYPE_Q4_K = 12,
    ST_TYPE_Q5_K = 13,
    ST_TYPE_Q6_K = 14,
    ST_TYPE_Q8_K = 15,
    ST_TYPE_IQ2_XXS = 16,
    ST_TYPE_IQ2_XS = 17,
    ST_TYPE_IQ3_XXS = 18,
    ST_TYPE_IQ1_S = 19,
    ST_TYPE_IQ4_NL = 20,
    ST_TYPE_IQ3_S = 21,
    ST_TYPE_IQ2_S = 22,
    ST_TYPE_IQ4_XS = 23,
    ST_TYPE_I8 = 24,
    ST_TYPE_I16 = 25,
    ST_TYPE_I32 = 26,
    ST_TYPE_I64 = 27,
    ST_TYPE_F64 = 28,
    ST_TYPE_IQ1_M = 29,
    ST_TYPE_BF16 = 30,
    ST_TYPE_TQ1_0 = 34,
    ST_TYPE_TQ2_0 = 35,
    ST_TYPE_MXFP4 = 39,
    ST_TYPE_COUNT = 40  // one past the largest id we know
} st_type;

typedef struct st_type_info {
    const char *name;      // "Q4_K"
    int block_size;        // elements per block (1 for plain types)
    int type_size;         // bytes per block
    bool can_dequantize;   // st_dequantize_row supports it
    bool can_quantize;     // st_quantize_row supports it (reference round-to-nearest)
} st_type_info;

// NULL for ids GGUF does not define (gaps and >= ST_TYPE_COUNT).
const st_type_info *st_type_get(int type);
// "Q4_K" -> ST_TYPE_Q4_K (case-insensitive); -1 if unknown.
int st_type_from_name(const char *name);
const char *st_type_name(int type);  // "?" if unknown

// Bytes of a row of n elements; 0 if n is not a multiple of the block size or the type is unknown.
size_t st_row_size(int type, int64_t n);

// Dequantize n elements (n % block_size == 0). Returns 0, or -1 with st_errmsg for an unsupported type.
int st_dequantize_row(int type, const void *src, float *dst, int64_t n);
// Reference quantization (round to nearest from float, per GGML's reference formulas). -1 if unsupported.
int st_quantize_row(int type, const float *src, void *dst, int64_t n);

// Fills n_blocks blocks with random but valid contents (every grid index in range, finite scales),
// scaled so that dequantized values have roughly zero mean and standard deviation `stddev`.
// Deterministic in (*rng state). Supported for every type with can_dequantize.
struct st_rng;
int st_random_blocks(int type, void *dst, int64_t n_blocks, float stddev, struct st_rng *rng);

// IEEE half and bfloat16 conversions (round to nearest even, like GGML's reference).
float st_f16_to_f32(uint16_t h);
uint16_t st_f32_to_f16(float f);
float st_bf16_to_f32(uint16_t h);
uint16_t st_f32_to_bf16(float f);

#ifdef __cplusplus
}
#endif

#endif
