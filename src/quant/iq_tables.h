// Codebooks of the I-quant, IQ4 and MXFP4 formats (format facts; see quant/blocks.h for how blocks index them).
//
// Source: the gguf Python package (gguf/quants.py, v0.19.0), decoded by src/quant/gen_iq_tables.py into
// iq_tables.c; values checked identical to llama.cpp's ggml/src/ggml-common.h. Grid entries pack their 8 (or 4)
// element values as little-endian bytes: byte j of entry g is element j of the group, so
// ((const uint8_t *)&grid[g])[j] (on little-endian hosts) or (grid[g] >> 8*j) & 0xff give the same value.
#ifndef STRATA_QUANT_IQ_TABLES_H
#define STRATA_QUANT_IQ_TABLES_H

#include <stdint.h>

// kmask_iq2xs[j] = 1 << j: sign bit of element j in a group of 8.
extern const uint8_t st_kmask_iq2xs[8];
// 7-bit sign index -> 8-bit sign mask with even parity (bit 7 is the parity of bits 0..6).
extern const uint8_t st_ksigns_iq2xs[128];
// Same masks expanded: byte j is 0xff where element j is negated, else 0 (for SIMD sign application).
extern const uint64_t st_ksigns64[128];

// IQ4_NL / IQ4_XS non-linear 4-bit codebook.
extern const int8_t st_kvalues_iq4nl[16];
// MXFP4 E2M1 values, doubled so they are integers (0, 0.5, 1, 1.5, 2, 3, 4, 6 -> 0, 1, 2, 3, 4, 6, 8, 12);
// codes 8..15 are the negatives (8 is -0).
extern const int8_t st_kvalues_mxfp4[16];

// 8-element groups, byte values in {0x08, 0x19, 0x2b}.
extern const uint64_t st_iq2xxs_grid[256];
extern const uint64_t st_iq2xs_grid[512];
extern const uint64_t st_iq2s_grid[1024];
// 4-element groups. iq3xxs bytes in {4, 12, 20, 28, 36, 44, 52, 62}; iq3s bytes in {1, 3, 5, ..., 15}.
extern const uint32_t st_iq3xxs_grid[256];
extern const uint32_t st_iq3s_grid[512];
// IQ1_S / IQ1_M: 8-element groups of int8 values in {-1, 0, 1} (bytes 0xff, 0x00, 0x01).
#define ST_NGRID_IQ1S 2048
extern const uint64_t st_iq1s_grid[ST_NGRID_IQ1S];
// Same grid for GPU kernels: byte k holds (v[k] + 1) in its low nibble and (v[k+4] + 1) in its high nibble.
extern const uint32_t st_iq1s_grid_gpu[ST_NGRID_IQ1S];

#endif
