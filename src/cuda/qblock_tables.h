// Device copies of the I-quant codebooks (indexed per lane, so __device__ rather than __constant__, which would
// serialise divergent lookups). The values are the same initialisers as the host tables (quant/iq_tables.inc,
// used by quant/iq_tables.c); tests/cuda_host compares every value with the host tables.
#ifndef STRATA_CUDA_QBLOCK_TABLES_H
#define STRATA_CUDA_QBLOCK_TABLES_H
#include <stdint.h>

#include "quant/iq_tables.inc"

#if defined(__CUDACC__)
#define ST_DEVTAB static __device__ const
#else
#define ST_DEVTAB static const
#endif

// The 16-entry int8 codebooks (IQ4_NL, MXFP4) packed into four little-endian u32 words each for byte-permute
// lookups: word w holds entries 4w..4w+3 (constant expressions, usable in device code without a table).
#define ST_PACK4_(a, b, c, d) \
    ((uint32_t)(uint8_t)(a) | (uint32_t)(uint8_t)(b) << 8 | (uint32_t)(uint8_t)(c) << 16 | (uint32_t)(uint8_t)(d) << 24)
#define ST_KV16_W0_(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15) ST_PACK4_(a0, a1, a2, a3)
#define ST_KV16_W1_(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15) ST_PACK4_(a4, a5, a6, a7)
#define ST_KV16_W2_(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15) ST_PACK4_(a8, a9, a10, a11)
#define ST_KV16_W3_(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15) \
    ST_PACK4_(a12, a13, a14, a15)
// Extra level so the values macro expands into 16 arguments before the word macro sees them.
#define ST_KV16_WORD_(word, ...) word(__VA_ARGS__)
#define ST_DEV_KVALUES_IQ4NL_W0 ST_KV16_WORD_(ST_KV16_W0_, ST_KVALUES_IQ4NL_VALUES)
#define ST_DEV_KVALUES_IQ4NL_W1 ST_KV16_WORD_(ST_KV16_W1_, ST_KVALUES_IQ4NL_VALUES)
#define ST_DEV_KVALUES_IQ4NL_W2 ST_KV16_WORD_(ST_KV16_W2_, ST_KVALUES_IQ4NL_VALUES)
#define ST_DEV_KVALUES_IQ4NL_W3 ST_KV16_WORD_(ST_KV16_W3_, ST_KVALUES_IQ4NL_VALUES)
#define ST_DEV_KVALUES_MXFP4_W0 ST_KV16_WORD_(ST_KV16_W0_, ST_KVALUES_MXFP4_VALUES)
#define ST_DEV_KVALUES_MXFP4_W1 ST_KV16_WORD_(ST_KV16_W1_, ST_KVALUES_MXFP4_VALUES)
#define ST_DEV_KVALUES_MXFP4_W2 ST_KV16_WORD_(ST_KV16_W2_, ST_KVALUES_MXFP4_VALUES)
#define ST_DEV_KVALUES_MXFP4_W3 ST_KV16_WORD_(ST_KV16_W3_, ST_KVALUES_MXFP4_VALUES)

ST_DEVTAB uint64_t st_dev_iq2xxs_grid[256] = {ST_IQ2XXS_GRID_VALUES};
ST_DEVTAB uint64_t st_dev_iq2xs_grid[512] = {ST_IQ2XS_GRID_VALUES};
ST_DEVTAB uint64_t st_dev_iq2s_grid[1024] = {ST_IQ2S_GRID_VALUES};
ST_DEVTAB uint32_t st_dev_iq3xxs_grid[256] = {ST_IQ3XXS_GRID_VALUES};
ST_DEVTAB uint32_t st_dev_iq3s_grid[512] = {ST_IQ3S_GRID_VALUES};
ST_DEVTAB uint64_t st_dev_iq1s_grid[2048] = {ST_IQ1S_GRID_VALUES};
#endif
