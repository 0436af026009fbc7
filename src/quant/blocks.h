// Block layouts of GGML's quantized tensor types, as stored in GGUF files.
//
// These are format facts transcribed from llama.cpp's ggml/src/ggml-common.h (and checked against the gguf
// Python package's quants.py / constants.py, GGML_QUANT_SIZES). Every struct is byte-for-byte the on-disk block:
// fields are listed in file order, all multi-byte fields are little-endian, and the static asserts pin the sizes.
// "f16" fields are IEEE binary16 bit patterns (uint16_t); convert with st_f16_to_f32 (quant.h).
//
// Notation used below, per block: y[i] is the i-th dequantized element (0 <= i < block size), d/dmin are the
// block's f16 scales, and "nibble lo/hi" of a byte b means (b & 15) / (b >> 4).
//
// Alignment: blocks holding f16 fields have 2-byte alignment, block_q8_K has 4, and block_mxfp4 / block_iq1_m
// have 1. Tensor data in GGUF is 32-byte aligned, but a row of blocks of odd type_size (MXFP4: 17) can put
// later blocks at any address, so kernels that read rows should not assume more than the struct's alignment.
#ifndef STRATA_QUANT_BLOCKS_H
#define STRATA_QUANT_BLOCKS_H

#include <assert.h>
#include <stdint.h>

#define QK_K 256      // super-block size of the K-quants, IQ quants (except IQ4_NL) and TQ types
#define K_SCALE_SIZE 12  // bytes of packed 6-bit scales/mins in Q3_K, Q4_K, Q5_K

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK4_NL 32
#define QK_MXFP4 32

// ---------------------------------------------------------------------------------------------------------------
// Legacy 32-element blocks. In all 4/5-bit ones, qs[j] holds element j in its low nibble and element j+16 in its
// high nibble (0 <= j < 16), so the first half of the block is all the low nibbles.

// Q4_0: y[i] = d * (q[i] - 8), q in [0, 15].
typedef struct {
    uint16_t d;            // f16 scale
    uint8_t qs[QK4_0 / 2]; // nibbles: lo = q[j], hi = q[j+16]
} block_q4_0;
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 size");

// Q4_1: y[i] = d * q[i] + m, q in [0, 15].
typedef struct {
    uint16_t d;            // f16 scale
    uint16_t m;            // f16 minimum (offset)
    uint8_t qs[QK4_1 / 2]; // nibbles as Q4_0
} block_q4_1;
static_assert(sizeof(block_q4_1) == 20, "block_q4_1 size");

// Q5_0: y[i] = d * (q[i] - 16), q in [0, 31]; the 5th bit of q[i] is bit i of qh (qh read as little-endian u32).
typedef struct {
    uint16_t d;            // f16 scale
    uint8_t qh[4];         // bit i (0..31) = bit 4 of q[i]
    uint8_t qs[QK5_0 / 2]; // low 4 bits of q, nibbles as Q4_0
} block_q5_0;
static_assert(sizeof(block_q5_0) == 22, "block_q5_0 size");

// Q5_1: y[i] = d * q[i] + m, q in [0, 31]; qh/qs as Q5_0.
typedef struct {
    uint16_t d;  // f16 scale
    uint16_t m;  // f16 minimum
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
} block_q5_1;
static_assert(sizeof(block_q5_1) == 24, "block_q5_1 size");

// Q8_0: y[i] = d * qs[i].
typedef struct {
    uint16_t d;         // f16 scale
    int8_t qs[QK8_0];   // one signed byte per element
} block_q8_0;
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 size");

// Q8_1: y[i] = d * qs[i]; s = d * sum(qs) is precomputed for dot products with Q4_1/Q5_1 (their min term).
// Note: ggml's block is 36 bytes (two f16); gguf-py 0.19's GGML_QUANT_SIZES still lists an older 40-byte (two f32)
// layout. We follow ggml, which is what writes and reads the data (Q8_1 is an activation format, never stored).
typedef struct {
    uint16_t d;       // f16 scale
    uint16_t s;       // f16: d * sum(qs[0..31])
    int8_t qs[QK8_1];
} block_q8_1;
static_assert(sizeof(block_q8_1) == 36, "block_q8_1 size");

// MXFP4 (OCP microscaling): y[i] = kvalues_mxfp4[q[i]] * 2^(e - 128), where kvalues_mxfp4 are the E2M1 values
// doubled (so the "- 128" rather than "- 127" compensates); q is a 4-bit E2M1 code (bit 3 = sign).
typedef struct {
    uint8_t e;               // E8M0 shared exponent (bias 127); e = 0 and 1 are handled as subnormal powers of 2
    uint8_t qs[QK_MXFP4 / 2]; // nibbles as Q4_0
} block_mxfp4;
static_assert(sizeof(block_mxfp4) == 17, "block_mxfp4 size");

// IQ4_NL: y[i] = d * kvalues_iq4nl[q[i]] (a fixed non-linear 16-entry codebook).
typedef struct {
    uint16_t d;              // f16 scale
    uint8_t qs[QK4_NL / 2];  // nibbles as Q4_0
} block_iq4_nl;
static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl size");

// ---------------------------------------------------------------------------------------------------------------
// K-quants: 256-element super-blocks made of sub-blocks (16 of 16 or 8 of 32 elements) with their own
// quantized scales.
//
// The "2-bit plane" order used by Q2_K and Q3_K: the block is two halves of 128 (h = 0, 1); within a half,
// element 32*s + l (s = 0..3, l = 0..31) is bits 2s..2s+1 of qs[32*h + l]. Sub-block (16 elements) index is
// 8*h + 2*s + l/16.

// Q2_K: y = d * (scales[sb] & 15) * q - dmin * (scales[sb] >> 4), q in [0, 3] (2-bit plane order above).
typedef struct {
    uint8_t scales[QK_K / 16]; // per 16-element sub-block: lo nibble = scale, hi nibble = min
    uint8_t qs[QK_K / 4];      // 2-bit quants, plane order
    uint16_t d;                // f16 super-block scale for scales
    uint16_t dmin;             // f16 super-block scale for mins
} block_q2_K;
static_assert(sizeof(block_q2_K) == 84, "block_q2_K size");

// Q3_K: y = d * (sc[sb] - 32) * (q - (hbit ? 0 : 4)), q in [0,3] (plane order), so values in [-4, 3].
//   hmask: element 128*h + 32*s + l has its high bit in hmask[l] bit (4*h + s).
//   scales: 16 6-bit scales sc[0..15] packed in 12 bytes: low 4 bits of sc[i] = nibble lo of scales[i] for
//   i < 8, nibble hi of scales[i-8] for i >= 8; high 2 bits = bits 2*(i/4)..+1 of scales[8 + i%4].
typedef struct {
    uint8_t hmask[QK_K / 8];        // high bits (set = +4 relative to the stored -4 offset)
    uint8_t qs[QK_K / 4];           // low 2 bits, plane order
    uint8_t scales[K_SCALE_SIZE];   // 16 packed 6-bit scales, bias 32
    uint16_t d;                     // f16 super-block scale
} block_q3_K;
static_assert(sizeof(block_q3_K) == 110, "block_q3_K size");

// Q4_K: 8 sub-blocks of 32; y = d * sc[j] * q - dmin * mn[j], q in [0, 15].
//   qs: chunk c = 0..3 of 64 elements: qs[32c + l] nibble lo = element 64c + l (sub-block 2c),
//   nibble hi = element 64c + 32 + l (sub-block 2c+1).
//   scales: 8 6-bit scales sc and 8 6-bit mins mn in 12 bytes ("get_scale_min_k4"):
//     j < 4:  sc[j] = scales[j] & 63,  mn[j] = scales[j+4] & 63
//     j >= 4: sc[j] = (scales[j+4] & 15) | ((scales[j-4] >> 6) << 4),
//             mn[j] = (scales[j+4] >> 4) | ((scales[j] >> 6) << 4)
typedef struct {
    uint16_t d;                    // f16 super-block scale for scales
    uint16_t dmin;                 // f16 super-block scale for mins
    uint8_t scales[K_SCALE_SIZE];  // packed 6-bit scales and mins
    uint8_t qs[QK_K / 2];          // 4-bit quants
} block_q4_K;
static_assert(sizeof(block_q4_K) == 144, "block_q4_K size");

// Q5_K: as Q4_K with a 5th bit: q in [0, 31]; element 64c + l has its high bit in qh[l] bit 2c, element
// 64c + 32 + l in qh[l] bit 2c+1.
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];  // as Q4_K
    uint8_t qh[QK_K / 8];          // high bits
    uint8_t qs[QK_K / 2];          // low 4 bits, as Q4_K
} block_q5_K;
static_assert(sizeof(block_q5_K) == 176, "block_q5_K size");

// Q6_K: 16 sub-blocks of 16; y = d * scales[sb] * (q - 32), q in [0, 63].
//   Two halves of 128 (h = 0, 1), ql' = ql + 64h, qh' = qh + 32h; for l = 0..31:
//     element 128h + l      : lo nibble ql'[l]      | bits 0-1 of qh'[l] << 4, sub-block 8h + l/16
//     element 128h + 32 + l : lo nibble ql'[l + 32] | bits 2-3 of qh'[l] << 4, sub-block 8h + 2 + l/16
//     element 128h + 64 + l : hi nibble ql'[l]      | bits 4-5 of qh'[l] << 4, sub-block 8h + 4 + l/16
//     element 128h + 96 + l : hi nibble ql'[l + 32] | bits 6-7 of qh'[l] << 4, sub-block 8h + 6 + l/16
typedef struct {
    uint8_t ql[QK_K / 2];      // low 4 bits
    uint8_t qh[QK_K / 4];      // high 2 bits
    int8_t scales[QK_K / 16];  // signed 8-bit sub-block scales
    uint16_t d;                // f16 super-block scale
} block_q6_K;
static_assert(sizeof(block_q6_K) == 210, "block_q6_K size");

// Q8_K: y[i] = d * qs[i]; an activation format for dot products with K-quants (f32 scale, 16-element sums).
typedef struct {
    float d;                    // f32 scale
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];   // bsums[g] = sum of qs[16g .. 16g+15]
} block_q8_K;
static_assert(sizeof(block_q8_K) == 292, "block_q8_K size");

// ---------------------------------------------------------------------------------------------------------------
// Ternary types (values in {-1, 0, 1} times d).

// TQ1_0: base-3 packing, 5 trits per byte in qs, 4 per byte in qh. A byte b stores trits t_k as a fixed-point
// fraction: for the k-th trit (k = 0..4), t = ((uint8_t)(b * 3^k) * 3) >> 8 (multiplication mod 256), y = d*(t-1).
//   element 32k + l       (l < 32)  <- qs[l],       k = 0..4   (elements 0..159)
//   element 160 + 16k + l (l < 16)  <- qs[32 + l],  k = 0..4   (elements 160..239)
//   element 240 + 4k + l  (l < 4)   <- qh[l],       k = 0..3   (elements 240..255)
typedef struct {
    uint8_t qs[(QK_K - 4 * QK_K / 64) / 5];  // 48 bytes, 5 trits each
    uint8_t qh[QK_K / 64];                   // 4 bytes, 4 trits each
    uint16_t d;                              // f16 scale
} block_tq1_0;
static_assert(sizeof(block_tq1_0) == 54, "block_tq1_0 size");

// TQ2_0: 2 bits per element, y = d * (q - 1), q in [0, 2] (3 is unused). Element 128h + 32s + l is bits
// 2s..2s+1 of qs[32h + l] (the same plane order as Q2_K).
typedef struct {
    uint8_t qs[QK_K / 4];
    uint16_t d;
} block_tq2_0;
static_assert(sizeof(block_tq2_0) == 66, "block_tq2_0 size");

// ---------------------------------------------------------------------------------------------------------------
// I-quants: elements in groups of 8 (or 4 for IQ3) are looked up in fixed codebook grids (quant/iq_tables.h);
// signs are stored separately. The block is 8 sub-blocks ib = 0..7 of 32 elements.
// "7-bit sign index": an index into ksigns_iq2xs[128], which yields an 8-bit mask with even parity (the 8th sign
// is implied); element j of the group of 8 is negated when (mask & kmask_iq2xs[j]) != 0.

// IQ2_XXS (2.06 bpw). Per sub-block ib, the 8 bytes qs[4ib..4ib+3] (as u16) read as two little-endian u32 a, b:
//   a bytes 0..3: grid indices g_k into iq2xxs_grid[256] (8 values each) for groups k = 0..3
//   b bits 7k..7k+6: sign index of group k; b bits 28..31: scale s; y = d * (0.5 + s) * 0.25 * grid * sign.
typedef struct {
    uint16_t d;
    uint16_t qs[QK_K / 8];
} block_iq2_xxs;
static_assert(sizeof(block_iq2_xxs) == 66, "block_iq2_xxs size");

// IQ2_XS (2.31 bpw). qs[4ib + k] (group k = 0..3 of sub-block ib): bits 0..8 = index into iq2xs_grid[512],
// bits 9..15 = sign index. scales[ib]: nibble lo = scale of groups 0,1, hi = groups 2,3;
// y = d * (0.5 + scale) * 0.25 * grid * sign.
typedef struct {
    uint16_t d;
    uint16_t qs[QK_K / 8];
    uint8_t scales[QK_K / 32];
} block_iq2_xs;
static_assert(sizeof(block_iq2_xs) == 74, "block_iq2_xs size");

// IQ2_S (2.5 bpw). qs[0..31]: low 8 bits of the grid index of group g = 4ib + k (iq2s_grid[1024]);
// qh[ib] bits 2k..2k+1 are index bits 8..9. qs[32..63]: one explicit sign byte per group (bit j negates
// element j). scales[ib] as IQ2_XS: y = d * (0.5 + scale) * 0.25 * grid * sign.
typedef struct {
    uint16_t d;
    uint8_t qs[QK_K / 4];    // [0, 32): grid index low bytes; [32, 64): sign bytes
    uint8_t qh[QK_K / 32];   // grid index high bits
    uint8_t scales[QK_K / 32];
} block_iq2_s;
static_assert(sizeof(block_iq2_s) == 82, "block_iq2_s size");

// IQ3_XXS (3.06 bpw). Groups of 4 elements: qs[0..63] are indices into iq3xxs_grid[256] (4 values each),
// 8 per sub-block (qs[8ib + m], elements 32ib + 4m .. +3). qs[64 + 4ib .. +3] is a little-endian u32 w:
// bits 7k..7k+6 = sign index for elements 32ib + 8k .. +7 (k = 0..3), bits 28..31 = scale s;
// y = d * (0.5 + s) * 0.5 * grid * sign.
typedef struct {
    uint16_t d;
    uint8_t qs[3 * QK_K / 8];  // [0, 64): grid indices; [64, 96): scales-and-signs words
} block_iq3_xxs;
static_assert(sizeof(block_iq3_xxs) == 98, "block_iq3_xxs size");

// IQ3_S (3.44 bpw). Groups of 4: qs[8ib + m] = low 8 bits of the index into iq3s_grid[512], bit 8 is qh[ib] bit m.
// signs[4ib + k]: explicit sign bits for elements 32ib + 8k .. +7. scales[ib/2] nibble (ib even: lo, odd: hi) = s;
// y = d * (1 + 2 s) * grid * sign.
typedef struct {
    uint16_t d;
    uint8_t qs[QK_K / 4];
    uint8_t qh[QK_K / 32];
    uint8_t signs[QK_K / 8];
    uint8_t scales[QK_K / 64];
} block_iq3_s;
static_assert(sizeof(block_iq3_s) == 110, "block_iq3_s size");

// IQ1_S (1.56 bpw). Grid values are in {-1, 0, 1} (iq1s_grid[2048], 8 per entry). For sub-block ib:
//   qh[ib] bits 3k..3k+2 = index bits 8..10 of group k (k = 0..3; low 8 bits in qs[4ib + k]),
//   qh[ib] bits 12..14 = s, bit 15 = delta sign. y = d * (2s + 1) * (grid + delta),
//   delta = IQ1S_DELTA (0.125), negated when bit 15 is set.
#define IQ1S_DELTA 0.125f
typedef struct {
    uint16_t d;
    uint8_t qs[QK_K / 8];
    uint16_t qh[QK_K / 32];
} block_iq1_s;
static_assert(sizeof(block_iq1_s) == 50, "block_iq1_s size");

// IQ1_M (1.75 bpw). No standalone scale field: the f16 super-block scale d is spread over the top nibbles of the
// four little-endian u16 words sc[0..3] in `scales`: d bits = (sc[0] >> 12) | ((sc[1] >> 8) & 0xf0) |
// ((sc[2] >> 4) & 0xf00) | (sc[3] & 0xf000). Sub-block ib has two 16-element halves with 3-bit scales:
// s0 = (sc[ib/2] >> (6*(ib%2))) & 7, s1 = (sc[ib/2] >> (6*(ib%2) + 3)) & 7.
// Group k (0..3) of ib: index = qs[4ib + k] | (bits 0..2 of nibble (k%2) of qh[2ib + k/2]) << 8; bit 3 of that
// nibble is its delta sign. y = d * (2 s + 1) * (grid + delta), s = s0 for k < 2, s1 for k >= 2,
// delta = IQ1M_DELTA negated when the sign bit is set.
#define IQ1M_DELTA 0.125f
typedef struct {
    uint8_t qs[QK_K / 8];
    uint8_t qh[QK_K / 16];
    uint8_t scales[QK_K / 32];
} block_iq1_m;
static_assert(sizeof(block_iq1_m) == 56, "block_iq1_m size");

// IQ4_XS (4.25 bpw): IQ4_NL values with 6-bit sub-block scales. Sub-block ib (32 elements): scale
// ls = (nibble (ib%2) of scales_l[ib/2]) | (bits 2ib..2ib+1 of scales_h) << 4; y = d * (ls - 32) * kvalues_iq4nl[q].
// qs[16ib + j]: lo nibble = q of element 32ib + j, hi nibble = element 32ib + 16 + j.
typedef struct {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[QK_K / 64];
    uint8_t qs[QK_K / 2];
} block_iq4_xs;
static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs size");

#endif
