// Private to src/cpu: per-ISA kernel tables and small shared helpers.
#ifndef STRATA_CPU_DOT_IMPL_H
#define STRATA_CPU_DOT_IMPL_H

#include <stdint.h>
#include <string.h>

#include "cpu/dot.h"
#include "quant/quant.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define ST_CPU_X86 1
#endif

typedef void (*st_quant_act_fn)(const float *x, void *dst, int64_t n);

// Dot products of one weight row with 4 activation rows (a + c * a_stride bytes, c = 0..3) -> out[0..3]; used by
// matmul for prefill so each weight block is decoded once for 4 tokens.
typedef void (*st_vec_dot4_fn)(int64_t n, const void *w, const void *a, size_t a_stride, float out[4]);

// Tiles of 8 weight rows (prefill, MoE experts): st_cpu_repack8 interleaves 8 rows into the type's x8 layout
// (below), then one call computes those 8 rows for n_tok <= 4 tokens (a + c * a_stride), y[c * ldy + r] for r < 8.
// The rows are SIMD lanes, so no horizontal sums. The float accumulation follows llama.cpp's repacked kernels,
// which it uses for these types when a tensor's row count is a multiple of 8 (ggml-cpu repack.cpp, x86): per
// 64-column chunk in its 4-token GEMM (chunk_order = 1), per super-block in its 1-token GEMV (chunk_order = 0).
typedef void (*st_gemm8_fn)(int64_t n, const void *w8, const void *a, size_t a_stride, int n_tok, float *y,
                            int64_t ldy, int chunk_order);

// Q4_K x8: per super-block of 256 columns, 8 rows interleaved so a 32-byte load holds 4 bytes of each row.
typedef struct {
    float d[8], dmin[8];   // per row: the super-block scales, widened
    uint8_t sc[8][8];      // [sub-block][row] 6-bit scales
    int16_t mn[4][16];     // [sub-block pair p][2 * row + j]: min of sub-block 2p + j (pairs for madd with bsums)
    uint8_t qs[4][8][32];  // [chunk c][group g][4 * row + e] = row's qs[32c + 4g + e] (lo/hi nibble as in Q4_K)
} block_q4_Kx8;

// Repacks rows [0, 8) of w (stride w_stride bytes, ne0 columns) into dst; returns 0, or -1 where weight_type has
// no x8 layout. st_cpu_repack8_size gives dst's bytes (0: none).
size_t st_cpu_repack8_size(int weight_type, int64_t ne0);
int st_cpu_repack8(int weight_type, const void *w, size_t w_stride, int64_t ne0, void *dst);

// llama.cpp's tiled order (ggml-cpu/tiled, AVX-512 VNNI build), which it uses for K-quant and IQ weights that it has
// not repacked once a product has >= ST_CPU_TILED_MIN_TOK tokens (for MUL_MAT_ID: tokens routed to the expert):
// per (row, token) and 256-column super-block i, exact integer sums s1 = sum_j scale_j * dot_j (sub-block dot
// products, offsets such as Q6_K's -32 included) and, for types with mins (Q2_K, Q4_K, Q5_K), s2 = sum_j min_j *
// bsum_j; then in float, from y = 0 over super-blocks in order:
//     r = (float)s1 * d_w;  r = fma(-dmin_w, (float)s2, r);  y = fma(r, d_a, y)
// with d_w the block scale widened from f16 times the type's constant (1/8 for IQ2_*, IQ1_*; 1/4 for IQ3_XXS) and
// d_a the token's Q8_K scale. (Facts from tiled.cpp / tiled-kernel.cpp and the disassembly of the installed
// libggml-cpu.so: vmulps, vfnmadd231ps, then the store contracted to vfmadd213ps.)
// One call computes one weight row for n_tok = 1..4 tokens (a + c * a_stride) -> out[0..n_tok).
typedef void (*st_tdot_fn)(int64_t n, const void *w, const void *a, size_t a_stride, int n_tok, float out[4]);
#define ST_CPU_TILED_MIN_TOK 8

typedef struct st_cpu_kernels {
    st_vec_dot_fn dot[ST_TYPE_COUNT];  // NULL where this ISA has no kernel of its own
    st_vec_dot4_fn dot4[ST_TYPE_COUNT];  // optional (NULL: matmul calls dot per token)
    st_gemm8_fn gemm8[ST_TYPE_COUNT];    // optional 8-row x 4-token tiles on repacked rows (see st_cpu_repack8)
    st_vec_dot_fn dot_x8[ST_TYPE_COUNT]; // 1-token kernel on plain rows in the x8 GEMV order (with gemm8)
    st_tdot_fn tdot[ST_TYPE_COUNT];      // tiled-order kernel (types llama.cpp tiles; see st_tdot_fn)
    st_quant_act_fn quant_q8_0, quant_q8_1, quant_q8_K;
} st_cpu_kernels;

void st_cpu_kernels_init_portable(st_cpu_kernels *k);
// The 4-token kernel for weight_type on isa (not inherited from lower ISAs); NULL if none.
st_vec_dot4_fn st_cpu_vec_dot4(int weight_type, st_cpu_isa isa);
// 1 where weight_type's 4-token kernel follows llama.cpp's prompt-path (tinyBLAS) accumulation order rather than
// the 1-token kernel's: then every token of a multi-token matmul must go through the 4-token kernel (a lone
// token as a_stride = 0) to stay bit-identical to llama.cpp. See dot_x86.inc.
int st_cpu_dot4_gemm_order(int weight_type);
// The 8-row tile kernel for weight_type on isa and its 1-token companion in the same (GEMV) order; NULL if none
// (both exist or neither).
st_gemm8_fn st_cpu_gemm8(int weight_type, st_cpu_isa isa);
st_vec_dot_fn st_cpu_vec_dot_x8(int weight_type, st_cpu_isa isa);
// The tiled-order kernel for weight_type on isa (falls back to lower ISAs, so every type llama.cpp tiles has one);
// NULL for other types.
st_tdot_fn st_cpu_tiled_dot(int weight_type, st_cpu_isa isa);
// 1 where llama.cpp computes a product of n_tok tokens with this weight tensor (n_rows rows in all) in the tiled
// order on the build that `isa` stands for: a tiled type, n_tok >= ST_CPU_TILED_MIN_TOK, and not a tensor it
// repacks at load time (x86: Q4_K with rows % 8 == 0; with AVX-512 also Q2_K with rows % 8 == 0; repack.cpp).
// The portable ISA follows the AVX2 rule (llama.cpp without AVX has no tiled path), so that the portable and
// SIMD paths compute the same products in the same order.
int st_cpu_tiled_applies(int weight_type, int64_t n_rows, int64_t n_tok, st_cpu_isa isa);
#ifdef ST_CPU_X86
void st_cpu_kernels_init_avx2(st_cpu_kernels *k);
void st_cpu_kernels_init_avx512(st_cpu_kernels *k);
#endif

// IEEE binary16 -> float without a library call (portable path; SIMD files use F16C).
static inline float st_cpu_h2f(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 31, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {  // subnormal: normalise
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline float st_cpu_bf2f(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

// MXFP4's E8M0 scale, halved (the codebook holds doubled E2M1 values): 2^(e - 128), exact, e = 0..255.
static inline float st_cpu_e8m0_half(uint8_t e) {
    uint32_t bits = e < 2 ? (0x00200000u << e) : ((uint32_t)(e - 1) << 23);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

// 6-bit scale j and min j of Q4_K/Q5_K's packed 12 bytes (layout in quant/blocks.h).
static inline void st_cpu_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Q3_K's 16 packed 6-bit scales, unpacked to signed values (bias 32 removed).
static inline void st_cpu_q3k_scales(const uint8_t *s, int8_t out[16]) {
    for (int i = 0; i < 16; i++) {
        int lo = i < 8 ? (s[i] & 15) : (s[i - 8] >> 4);
        int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        out[i] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

#endif
