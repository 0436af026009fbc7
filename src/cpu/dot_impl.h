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

typedef struct st_cpu_kernels {
    st_vec_dot_fn dot[ST_TYPE_COUNT];  // NULL where this ISA has no kernel of its own
    st_vec_dot4_fn dot4[ST_TYPE_COUNT];  // optional (NULL: matmul calls dot per token)
    st_quant_act_fn quant_q8_0, quant_q8_1, quant_q8_K;
} st_cpu_kernels;

void st_cpu_kernels_init_portable(st_cpu_kernels *k);
// The 4-token kernel for weight_type on isa (not inherited from lower ISAs); NULL if none.
st_vec_dot4_fn st_cpu_vec_dot4(int weight_type, st_cpu_isa isa);
// 1 where weight_type's 4-token kernel follows llama.cpp's prompt-path (tinyBLAS) accumulation order rather than
// the 1-token kernel's: then every token of a multi-token matmul must go through the 4-token kernel (a lone
// token as a_stride = 0) to stay bit-identical to llama.cpp. See dot_x86.inc.
int st_cpu_dot4_gemm_order(int weight_type);
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
