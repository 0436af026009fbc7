// Per-type block math shared by the CUDA kernels and the CPU unit test (tests/cuda_host).
//
// Everything here is `ST_HD`: `__host__ __device__ __forceinline__` under nvcc, `static inline` under a C compiler,
// so gcc compiles the very same code and CI checks it against st_dequantize_row without a GPU.
//
// Unit of work: an "item" is 32 consecutive weights of a row (sub-block j of a block; blocks of 32 have one item,
// 256-blocks eight) and the matching q8_1 activation block (32 int8 quants q, scale d8, s8 = d8 * sum(q)).
// st_qb_unpack() turns an item of any quantized type into
//     v[0..7]: 32 signed int8 weights, 4 per int (element i = byte i % 4 of v[i / 4]), and
//     a[g], b[g] (g = 0..3): weight i = a[g] * v_i + b[g] for the 8 elements 8g..8g+7,
// so the item's dot product is d8 * sum_g (a[g] * sum(v*q over g) + b[g] * sum(q over g)), computed with dp4a.
// Unpacking once and reusing the result for every token is what makes multi-token decode cheap.
// F32/F16/BF16 weights are not integers; st_qb_dot_float() handles them directly (weights times int8 quants).
//
// Memory: unpack functions read the block with the widest loads its alignment allows on device. Blocks are
// assumed to sit at (16-byte aligned base) + k * type_size, which holds for any row of a tensor whose data
// starts 16-byte aligned (cudaMalloc and GGUF's 32-byte data alignment); so a block's alignment is
// gcd(type_size, 16), recorded per type in ST_QB_ALIGN. On the host all loads are memcpy (no alignment needed).
// Layout facts come from quant/blocks.h (transcribed from ggml-common.h).
#ifndef STRATA_CUDA_QBLOCK_H
#define STRATA_CUDA_QBLOCK_H

#include <math.h>
#include <stdint.h>
#include <string.h>

// The quant headers are C; give their functions C linkage when this is compiled as CUDA C++.
#ifdef __cplusplus
extern "C" {
#endif
#include "quant/blocks.h"
#include "quant/iq_tables.h"
#include "quant/quant.h"
#ifdef __cplusplus
}
#endif

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define ST_HD __host__ __device__ __forceinline__
#include "cuda/qblock_tables.h"
#else
#define ST_HD static inline
#endif

// Table access: device copies (cuda/qblock_tables.h) in device code, the host tables otherwise.
#if defined(__CUDA_ARCH__)
#define ST_QTAB(name) st_dev_##name
#else
#define ST_QTAB(name) st_##name
#endif

// ST_QB_GIDX: a codebook index as the unpack functions use it. ST_QB_PROBE_MASK (device code, a timing probe only:
// results wrong; e.g. bench/ab.sh "probe=cflags:-DST_QB_PROBE_MASK=7") ANDs every index with the mask, so a warp's
// lookups fall in one or two lines of the table instead of up to 32: the i-quant kernels' speed with the lookups
// nearly free, an upper bound on what a faster table could buy. The indices are still computed from the weights, so
// their loads stay.
#if defined(__CUDA_ARCH__) && defined(ST_QB_PROBE_MASK)
#define ST_QB_GIDX(i) ((i) & (uint32_t)(ST_QB_PROBE_MASK))
#else
#define ST_QB_GIDX(i) (i)
#endif

#if defined(__CUDA_ARCH__)
#define ST_QB_UNROLL _Pragma("unroll")
#else
#define ST_QB_UNROLL
#endif

// ---------------------------------------------------------------------------------------------------------------
// Portable integer helpers.

// Signed 4-way byte dot product plus accumulator: c + sum_k a.byte[k] * b.byte[k] (bytes as int8).
ST_HD int32_t st_dp4a(int32_t a, int32_t b, int32_t c) {
#if defined(__CUDA_ARCH__)
    return __dp4a(a, b, c);
#else
    for (int k = 0; k < 4; k++) c += (int32_t)(int8_t)(a >> (8 * k)) * (int32_t)(int8_t)(b >> (8 * k));
    return c;
#endif
}

// Per-byte a - b (mod 256).
ST_HD uint32_t st_vsub4(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __vsub4(a, b);
#else
    // SWAR: subtract the low 7 bits with the top bits forced so no borrow crosses a byte, then fix the top bits.
    return ((a | 0x80808080u) - (b & 0x7f7f7f7fu)) ^ ((a ^ ~b) & 0x80808080u);
#endif
}

// Byte permute of the 8 bytes {y:x} (x = bytes 0..3): result byte n = input byte ((s >> 4n) & 7).
ST_HD uint32_t st_byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
    return __byte_perm(x, y, s & 0x7777u);
#else
    uint32_t r = 0;
    for (int n = 0; n < 4; n++) {
        const uint32_t i = (s >> (4 * n)) & 7;
        const uint32_t byte = i < 4 ? (x >> (8 * i)) & 0xff : (y >> (8 * (i - 4))) & 0xff;
        r |= byte << (8 * n);
    }
    return r;
#endif
}

ST_HD int st_qb_popc(uint32_t x) {
#if defined(__CUDA_ARCH__)
    return __popc(x);
#else
    return __builtin_popcount(x);
#endif
}

// 4 bits (bit k = byte k) -> byte mask (0xff where set).
ST_HD uint32_t st_qb_bits_to_mask(uint32_t b4) { return ((b4 * 0x00204081u) & 0x01010101u) * 0xffu; }
// 4 bits (bit k = byte k) -> 0x01 in byte k where set.
ST_HD uint32_t st_qb_bits_to_ones(uint32_t b4) { return (b4 * 0x00204081u) & 0x01010101u; }

// Applies signs: byte k of g (non-negative, < 128) is negated where byte k of mask is 0xff.
ST_HD uint32_t st_qb_sign(uint32_t g, uint32_t mask) { return st_vsub4(g ^ mask, mask); }

// 16-entry int8 codebook lookup: each byte of q (values 0..15) replaced by table byte; table = 4 LE words.
ST_HD uint32_t st_lut16(uint32_t q, uint32_t t0, uint32_t t1, uint32_t t2, uint32_t t3) {
    uint32_t sel = q | (q >> 4);                       // byte0 = q0 | q1 << 4, byte2 = q2 | q3 << 4
    sel = (sel & 0xffu) | ((sel >> 8) & 0xff00u);     // 4 selector nibbles
    const uint32_t lo = st_byte_perm(t0, t1, sel);      // entries 0..7
    const uint32_t hi = st_byte_perm(t2, t3, sel);      // entries 8..15
    const uint32_t m = ((q >> 3) & 0x01010101u) * 0xffu;  // bit 3 of each index picks the upper half
    return (lo & ~m) | (hi & m);
}

// The 16-entry int8 codebooks (NAME = IQ4NL or MXFP4) as 4 packed little-endian words t[4] for st_lut16: the
// device constants (cuda/qblock_tables.h) in device code, the host table otherwise.
#if defined(__CUDA_ARCH__)
#define ST_QB_KV16(NAME, name, t)                                                                   \
    const uint32_t t[4] = {ST_DEV_KVALUES_##NAME##_W0, ST_DEV_KVALUES_##NAME##_W1, ST_DEV_KVALUES_##NAME##_W2, \
                           ST_DEV_KVALUES_##NAME##_W3}
#else
#define ST_QB_KV16(NAME, name, t) \
    uint32_t t[4];                \
    memcpy(t, st_kvalues_##name, 16)
#endif

// IQ2/IQ3 7-bit sign index -> 8-bit sign mask (the 8th bit is the parity, as in ksigns_iq2xs).
ST_HD uint32_t st_qb_ksigns(uint32_t idx7) { return idx7 | ((uint32_t)(st_qb_popc(idx7) & 1) << 7); }

// ---------------------------------------------------------------------------------------------------------------
// Loads. `align` is a compile-time constant after inlining: the guaranteed alignment of p on device.

ST_HD uint32_t st_qb_u8(const uint8_t *p) { return p[0]; }
ST_HD uint32_t st_qb_u16(const uint8_t *p) {
#if defined(__CUDA_ARCH__)
    return *(const uint16_t *)p;
#else
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
#endif
}

// n 32-bit little-endian words from p into w[0..n).
ST_HD void st_qb_ldw(const uint8_t *p, uint32_t *w, int n, int align) {
#if defined(__CUDA_ARCH__)
    if (align >= 16 && n % 4 == 0) {
        ST_QB_UNROLL
        for (int i = 0; i < n; i += 4) {
            const uint4 v = *(const uint4 *)(p + 4 * i);
            w[i] = v.x, w[i + 1] = v.y, w[i + 2] = v.z, w[i + 3] = v.w;
        }
    } else if (align >= 8 && n % 2 == 0) {
        ST_QB_UNROLL
        for (int i = 0; i < n; i += 2) {
            const uint2 v = *(const uint2 *)(p + 4 * i);
            w[i] = v.x, w[i + 1] = v.y;
        }
    } else if (align >= 4) {
        ST_QB_UNROLL
        for (int i = 0; i < n; i++) w[i] = *(const uint32_t *)(p + 4 * i);
    } else if (align >= 2 && n >= 2) {
        // n aligned 32-bit loads from p rounded down to 4, plus the last 2 bytes as a 16-bit load, joined by a
        // funnel shift of 0 or 16 bits: about half the load instructions of 16-bit loads. Branch-free, so lanes
        // whose blocks differ in alignment do not diverge. Besides [p, p + 4n) it reads only the 2 bytes before
        // p when p % 4 == 2, which lie inside the same tensor (its base is 16-byte aligned, so p is not its start).
        const uint32_t sh = (uint32_t)((uintptr_t)p & 2) * 8;
        const uint32_t *a = (const uint32_t *)(p - (sh >> 3));
        const uint32_t tail = *(const uint16_t *)(p + 4 * n - 2);  // bytes p + 4n - 2, p + 4n - 1 (used when sh = 16)
        uint32_t cur = a[0];
        ST_QB_UNROLL
        for (int i = 0; i < n; i++) {
            const uint32_t nxt = i + 1 < n ? a[i + 1] : tail;
            w[i] = __funnelshift_r(cur, nxt, sh);
            cur = nxt;
        }
    } else if (align >= 2) {
        ST_QB_UNROLL
        for (int i = 0; i < n; i++)
            w[i] = (uint32_t) * (const uint16_t *)(p + 4 * i) | ((uint32_t) * (const uint16_t *)(p + 4 * i + 2) << 16);
    } else {
        ST_QB_UNROLL
        for (int i = 0; i < n; i++)
            w[i] = (uint32_t)p[4 * i] | ((uint32_t)p[4 * i + 1] << 8) | ((uint32_t)p[4 * i + 2] << 16) |
                   ((uint32_t)p[4 * i + 3] << 24);
    }
#else
    (void)align;
    memcpy(w, p, 4 * (size_t)n);
#endif
}
ST_HD uint32_t st_qb_u32(const uint8_t *p, int align) {
    uint32_t w;
    st_qb_ldw(p, &w, 1, align);
    return w;
}

ST_HD float st_qb_f16(uint32_t h) {
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half((unsigned short)h));
#else
    return st_f16_to_f32((uint16_t)h);
#endif
}
ST_HD float st_qb_bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}
ST_HD float st_qb_bf16(uint32_t h) { return st_qb_bits_f32(h << 16); }

// ---------------------------------------------------------------------------------------------------------------
// Type properties (constant expressions, usable as template arguments).

// Every weight type the kernels support, as an initialiser list (for tests that iterate over all of them).
#define ST_QB_TYPES                                                                                              \
    ST_TYPE_F32, ST_TYPE_F16, ST_TYPE_BF16, ST_TYPE_Q4_0, ST_TYPE_Q4_1, ST_TYPE_Q5_0, ST_TYPE_Q5_1, ST_TYPE_Q8_0,   \
        ST_TYPE_Q2_K, ST_TYPE_Q3_K, ST_TYPE_Q4_K, ST_TYPE_Q5_K, ST_TYPE_Q6_K, ST_TYPE_IQ1_S, ST_TYPE_IQ1_M,         \
        ST_TYPE_IQ2_XXS, ST_TYPE_IQ2_XS, ST_TYPE_IQ2_S, ST_TYPE_IQ3_XXS, ST_TYPE_IQ3_S, ST_TYPE_IQ4_NL,             \
        ST_TYPE_IQ4_XS, ST_TYPE_MXFP4

// Items (32 weights) per block.
#define ST_QB_IPB(t) ((t) == ST_TYPE_Q2_K || (t) == ST_TYPE_Q3_K || (t) == ST_TYPE_Q4_K || (t) == ST_TYPE_Q5_K || \
                      (t) == ST_TYPE_Q6_K || (t) == ST_TYPE_IQ1_S || (t) == ST_TYPE_IQ1_M ||                     \
                      (t) == ST_TYPE_IQ2_XXS || (t) == ST_TYPE_IQ2_XS || (t) == ST_TYPE_IQ2_S ||                  \
                      (t) == ST_TYPE_IQ3_XXS || (t) == ST_TYPE_IQ3_S || (t) == ST_TYPE_IQ4_XS                     \
                  ? 8                                                                                             \
                  : 1)
// Bytes per block; for F32/F16/BF16 the "block" is one item of 32 elements.
#define ST_QB_TSIZE(t)                                                                                            \
    ((t) == ST_TYPE_F32 ? 128 : (t) == ST_TYPE_F16 || (t) == ST_TYPE_BF16 ? 64                                   \
     : (t) == ST_TYPE_Q4_0 ? 18 : (t) == ST_TYPE_Q4_1 ? 20 : (t) == ST_TYPE_Q5_0 ? 22 : (t) == ST_TYPE_Q5_1 ? 24 \
     : (t) == ST_TYPE_Q8_0 ? 34 : (t) == ST_TYPE_Q2_K ? 84 : (t) == ST_TYPE_Q3_K ? 110 : (t) == ST_TYPE_Q4_K ? 144 \
     : (t) == ST_TYPE_Q5_K ? 176 : (t) == ST_TYPE_Q6_K ? 210 : (t) == ST_TYPE_IQ2_XXS ? 66                        \
     : (t) == ST_TYPE_IQ2_XS ? 74 : (t) == ST_TYPE_IQ2_S ? 82 : (t) == ST_TYPE_IQ3_XXS ? 98                       \
     : (t) == ST_TYPE_IQ3_S ? 110 : (t) == ST_TYPE_IQ1_S ? 50 : (t) == ST_TYPE_IQ1_M ? 56                         \
     : (t) == ST_TYPE_IQ4_NL ? 18 : (t) == ST_TYPE_IQ4_XS ? 136 : (t) == ST_TYPE_MXFP4 ? 17 : 0)
// Guaranteed block alignment on device: gcd(type size, 16).
#define ST_QB_ALIGN(t) ((ST_QB_TSIZE(t) & 15) == 0 ? 16 : (ST_QB_TSIZE(t) & 7) == 0 ? 8 \
                        : (ST_QB_TSIZE(t) & 3) == 0 ? 4 : (ST_QB_TSIZE(t) & 1) == 0 ? 2 : 1)
#define ST_QB_IS_FLOAT(t) ((t) == ST_TYPE_F32 || (t) == ST_TYPE_F16 || (t) == ST_TYPE_BF16)
// How a[] varies: 1 = one scale for the item, 2 = one per 16 elements (a[0]=a[1], a[2]=a[3]).
#define ST_QB_AMODE(t) ((t) == ST_TYPE_Q2_K || (t) == ST_TYPE_Q3_K || (t) == ST_TYPE_Q6_K || (t) == ST_TYPE_IQ2_XS || \
                        (t) == ST_TYPE_IQ2_S || (t) == ST_TYPE_IQ1_M                                               \
                            ? 2                                                                                    \
                            : 1)
// How b[] varies: 0 = all zero, 1 = one offset for the item, 2 = per 16 elements, 3 = per 8 elements.
#define ST_QB_BMODE(t)                                                                                             \
    ((t) == ST_TYPE_Q4_0 || (t) == ST_TYPE_Q4_1 || (t) == ST_TYPE_Q5_0 || (t) == ST_TYPE_Q5_1 ||                  \
             (t) == ST_TYPE_Q4_K || (t) == ST_TYPE_Q5_K || (t) == ST_TYPE_IQ1_S                                    \
         ? 1                                                                                                       \
     : (t) == ST_TYPE_Q2_K ? 2                                                                                     \
     : (t) == ST_TYPE_IQ1_M ? 3                                                                                    \
                            : 0)

// Whether the GPU matrix-vector kernels handle this weight type.
ST_HD int st_qb_supported(int t) { return ST_QB_TSIZE(t) != 0; }

// ---------------------------------------------------------------------------------------------------------------
// Unpacked item.
typedef struct st_qb_w {
    int32_t v[8];  // 32 signed int8 weights, element i in byte i % 4 of v[i / 4]
    float a[4];    // scale for elements 8g..8g+7
    float b[4];    // offset for elements 8g..8g+7 (weight = a * v + b)
} st_qb_w;

ST_HD void st_qb_set_ab(st_qb_w *w, float a0, float a1, float b0, float b1) {
    w->a[0] = a0, w->a[1] = a0, w->a[2] = a1, w->a[3] = a1;
    w->b[0] = b0, w->b[1] = b0, w->b[2] = b1, w->b[3] = b1;
}

// Legacy 32-blocks: qs[j] holds element j (lo nibble) and j + 16 (hi nibble). Writes v from 4 words of qs.
ST_HD void st_qb_nibbles(st_qb_w *w, const uint32_t *q4) {
    ST_QB_UNROLL
    for (int k = 0; k < 4; k++) {
        w->v[k] = (int32_t)(q4[k] & 0x0f0f0f0fu);
        w->v[k + 4] = (int32_t)((q4[k] >> 4) & 0x0f0f0f0fu);
    }
}
// The same layout through a 16-entry codebook t (ST_QB_KV16) instead of the raw nibbles.
ST_HD void st_qb_lut_nibbles(st_qb_w *w, const uint32_t *q4, const uint32_t t[4]) {
    ST_QB_UNROLL
    for (int k = 0; k < 4; k++) {
        w->v[k] = (int32_t)st_lut16(q4[k] & 0x0f0f0f0fu, t[0], t[1], t[2], t[3]);
        w->v[k + 4] = (int32_t)st_lut16((q4[k] >> 4) & 0x0f0f0f0fu, t[0], t[1], t[2], t[3]);
    }
}
// Adds bit 4 from a 32-bit high-bit word (bit i = element i) to the nibbles.
ST_HD void st_qb_hbit5(st_qb_w *w, uint32_t qh) {
    ST_QB_UNROLL
    for (int k = 0; k < 8; k++) w->v[k] |= (int32_t)(st_qb_bits_to_ones((qh >> (4 * k)) & 15) << 4);
}

ST_HD void st_qb_unpack_q4_0(const uint8_t *x, int j, st_qb_w *w) {
    uint32_t q[4];
    st_qb_ldw(x + 2, q, 4, 2);
    const float d = st_qb_f16(st_qb_u16(x));
    st_qb_nibbles(w, q);
    st_qb_set_ab(w, d, d, -8.0f * d, -8.0f * d);
}
ST_HD void st_qb_unpack_q4_1(const uint8_t *x, int j, st_qb_w *w) {
    uint32_t q[4];
    st_qb_ldw(x + 4, q, 4, 4);
    const uint32_t dm = st_qb_u32(x, 4);
    const float d = st_qb_f16(dm & 0xffff), m = st_qb_f16(dm >> 16);
    st_qb_nibbles(w, q);
    st_qb_set_ab(w, d, d, m, m);
}
ST_HD void st_qb_unpack_q5_0(const uint8_t *x, int j, st_qb_w *w) {
    uint32_t q[4];
    st_qb_ldw(x + 6, q, 4, 2);
    const uint32_t qh = st_qb_u32(x + 2, 2);
    const float d = st_qb_f16(st_qb_u16(x));
    st_qb_nibbles(w, q);
    st_qb_hbit5(w, qh);
    st_qb_set_ab(w, d, d, -16.0f * d, -16.0f * d);
}
ST_HD void st_qb_unpack_q5_1(const uint8_t *x, int j, st_qb_w *w) {
    uint32_t h[2], q[4];
    st_qb_ldw(x, h, 2, 8);
    st_qb_ldw(x + 8, q, 4, 8);
    const float d = st_qb_f16(h[0] & 0xffff), m = st_qb_f16(h[0] >> 16);
    st_qb_nibbles(w, q);
    st_qb_hbit5(w, h[1]);
    st_qb_set_ab(w, d, d, m, m);
}
ST_HD void st_qb_unpack_q8_0(const uint8_t *x, int j, st_qb_w *w) {
    st_qb_ldw(x + 2, (uint32_t *)w->v, 8, 2);
    const float d = st_qb_f16(st_qb_u16(x));
    st_qb_set_ab(w, d, d, 0.0f, 0.0f);
}
ST_HD void st_qb_unpack_iq4_nl(const uint8_t *x, int j, st_qb_w *w) {
    uint32_t q[4];
    st_qb_ldw(x + 2, q, 4, 2);
    const float d = st_qb_f16(st_qb_u16(x));
    ST_QB_KV16(IQ4NL, iq4nl, t);
    st_qb_lut_nibbles(w, q, t);
    st_qb_set_ab(w, d, d, 0.0f, 0.0f);
}
ST_HD void st_qb_unpack_mxfp4(const uint8_t *x, int j, st_qb_w *w) {
    uint32_t q[4];
    st_qb_ldw(x + 1, q, 4, 1);
    const uint32_t e = x[0];
    // 2^(e - 128) (kvalues are doubled E2M1 values); e < 2 gives an f32 subnormal.
    const float d = st_qb_bits_f32(e < 2 ? 0x00200000u << e : (e - 1) << 23);
    ST_QB_KV16(MXFP4, mxfp4, t);
    st_qb_lut_nibbles(w, q, t);
    st_qb_set_ab(w, d, d, 0.0f, 0.0f);
}

// --- K-quants ---------------------------------------------------------------------------------------------------

// Q4_K/Q5_K 6-bit scale and min of sub-block j (0..7) from the 12 packed scale bytes held in three words
// (s0: bytes 0-3, s1: 4-7, s2: 8-11; blocks.h, get_scale_min_k4): j < 4: s[j] & 63, s[j + 4] & 63; else the low
// nibbles of s[j + 4] with the top bits of s[j - 4] (scale) and s[j] (min). Register arithmetic with selects: a
// byte array indexed by the lane's j lands in local memory, and the kernels' weight loads (generic pointers from
// the expert tables) then cannot move past its stores: every item's loads waited for the previous item's.
#ifndef ST_QB_SCALE_BYTES
#define ST_QB_SCALE_BYTES 0  // 1: the former byte array (an A/B build of 2026-11-30h's change; bench/ab.sh cflags:)
#endif
ST_HD void st_qb_scale_min_k4(uint32_t s0, uint32_t s1, uint32_t s2, int j, int *sc, int *mn) {
#if ST_QB_SCALE_BYTES
    uint8_t s[12];
    ST_QB_UNROLL
    for (int k = 0; k < 4; k++) s[k] = (uint8_t)(s0 >> (8 * k)), s[k + 4] = (uint8_t)(s1 >> (8 * k)),
                                s[k + 8] = (uint8_t)(s2 >> (8 * k));
    *sc = j < 4 ? s[j] & 63 : (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    *mn = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    return;
#endif
    const int sh = 8 * (j & 3);
    const uint32_t a0 = (s0 >> sh) & 0xffu, a1 = (s1 >> sh) & 0xffu, a2 = (s2 >> sh) & 0xffu;
    const uint32_t lo_sc = a0 & 63u, lo_mn = a1 & 63u;                             // j < 4
    const uint32_t hi_sc = (a2 & 15u) | ((a0 >> 6) << 4), hi_mn = (a2 >> 4) | ((a1 >> 6) << 4);  // j >= 4
    *sc = (int)(j < 4 ? lo_sc : hi_sc);
    *mn = (int)(j < 4 ? lo_mn : hi_mn);
}

// Q4_K / Q5_K: scale a and offset b of sub-block j from the block's first 16 bytes h (d, dmin, scales[12]).
ST_HD void st_qb_k45_ab(const uint32_t h[4], int j, st_qb_w *w) {
    int sc, mn;
    st_qb_scale_min_k4(h[1], h[2], h[3], j, &sc, &mn);
    const float a = st_qb_f16(h[0] & 0xffff) * (float)sc, b = -st_qb_f16(h[0] >> 16) * (float)mn;
    st_qb_set_ab(w, a, a, b, b);
}
ST_HD void st_qb_unpack_q4_K(const uint8_t *x, int j, st_qb_w *w) {
    uint32_t h[4], q[8];
    st_qb_ldw(x, h, 4, 16);                      // d, dmin, scales[12]
    st_qb_ldw(x + 16 + 32 * (j >> 1), q, 8, 16);  // the 64-element chunk holding sub-block j
    const int sh = 4 * (j & 1);
    ST_QB_UNROLL
    for (int k = 0; k < 8; k++) w->v[k] = (int32_t)((q[k] >> sh) & 0x0f0f0f0fu);
    st_qb_k45_ab(h, j, w);
}
ST_HD void st_qb_unpack_q5_K(const uint8_t *x, int j, st_qb_w *w) {
    uint32_t h[4], qh[8], q[8];
    st_qb_ldw(x, h, 4, 16);
    st_qb_ldw(x + 16, qh, 8, 16);
    st_qb_ldw(x + 48 + 32 * (j >> 1), q, 8, 16);
    const int sh = 4 * (j & 1);
    ST_QB_UNROLL
    for (int k = 0; k < 8; k++)
        w->v[k] = (int32_t)(((q[k] >> sh) & 0x0f0f0f0fu) | (((qh[k] >> j) & 0x01010101u) << 4));
    st_qb_k45_ab(h, j, w);
}
// Q6_K: sub-block j = half h (128 elements) and quarter s; see blocks.h for the bit placement.
ST_HD void st_qb_unpack_q6_K(const uint8_t *x, int j, st_qb_w *w) {
    const int h = j >> 2, s = j & 3;
    uint32_t ql[8], qh[8];
    st_qb_ldw(x + 64 * h + 32 * (s & 1), ql, 8, 2);
    st_qb_ldw(x + 128 + 32 * h, qh, 8, 2);
    const int shl = 4 * (s >> 1), shh = 2 * s;
    ST_QB_UNROLL
    for (int k = 0; k < 8; k++) {
        const uint32_t q6 = ((ql[k] >> shl) & 0x0f0f0f0fu) | (((qh[k] >> shh) & 0x03030303u) << 4);
        w->v[k] = (int32_t)st_vsub4(q6, 0x20202020u);
    }
    const uint32_t sc = st_qb_u16(x + 192 + 8 * h + 2 * s);
    const float d = st_qb_f16(st_qb_u16(x + 208));
    st_qb_set_ab(w, d * (float)(int8_t)(sc & 0xff), d * (float)(int8_t)(sc >> 8), 0.0f, 0.0f);
}
// Q3_K 6-bit scale i (0..15), bias removed, from the 12 packed bytes in three words w[0..2] (bytes 0-3, 4-7,
// 8-11): low nibble of byte i (i < 8) or high nibble of byte i - 8, and 2 bits of byte 8 + i % 4. Registers only
// (a runtime-indexed byte array lands in local memory: see st_qb_scale_min_k4).
ST_HD int st_qb_q3k_scale(const uint32_t *w, int i) {
    const int sh = 8 * (i & 3);
    const uint32_t b = (((i & 7) < 4 ? w[0] : w[1]) >> sh) & 0xffu, bh = (w[2] >> sh) & 0xffu;
    const int lo = (int)(i < 8 ? b & 15u : b >> 4);
    const int hi = (int)((bh >> (2 * (i / 4))) & 3u);
    return (lo | (hi << 4)) - 32;
}
ST_HD void st_qb_unpack_q3_K(const uint8_t *x, int j, st_qb_w *w) {
    const int h = j >> 2, s = j & 3;
    uint32_t hm[8], q[8];
    st_qb_ldw(x, hm, 8, 2);
    st_qb_ldw(x + 32 + 32 * h, q, 8, 2);
    const int hb = 4 * h + s;
    ST_QB_UNROLL
    for (int k = 0; k < 8; k++) {
        const uint32_t v = ((q[k] >> (2 * s)) & 0x03030303u) | (((hm[k] >> hb) & 0x01010101u) << 2);
        w->v[k] = (int32_t)st_vsub4(v, 0x04040404u);  // q - 4 where the high bit is clear, q where it is set
    }
    uint32_t scw[3];
    st_qb_ldw(x + 96, scw, 3, 2);
    const float d = st_qb_f16(st_qb_u16(x + 108));
    const int i0 = 8 * h + 2 * s;
    st_qb_set_ab(w, d * (float)st_qb_q3k_scale(scw, i0), d * (float)st_qb_q3k_scale(scw, i0 + 1), 0.0f, 0.0f);
}
ST_HD void st_qb_unpack_q2_K(const uint8_t *x, int j, st_qb_w *w) {
    const int h = j >> 2, s = j & 3;
    uint32_t q[8];
    st_qb_ldw(x + 16 + 32 * h, q, 8, 4);
    ST_QB_UNROLL
    for (int k = 0; k < 8; k++) w->v[k] = (int32_t)((q[k] >> (2 * s)) & 0x03030303u);
    const uint32_t sc = st_qb_u16(x + 8 * h + 2 * s);
    const uint32_t dd = st_qb_u32(x + 80, 4);
    const float d = st_qb_f16(dd & 0xffff), dmin = st_qb_f16(dd >> 16);
    st_qb_set_ab(w, d * (float)(sc & 15), d * (float)((sc >> 8) & 15), -dmin * (float)((sc >> 4) & 15),
                 -dmin * (float)(sc >> 12));
}

// --- I-quants ---------------------------------------------------------------------------------------------------

ST_HD void st_qb_grid8(st_qb_w *w, int k, uint64_t g, uint32_t sign8) {
    w->v[2 * k] = (int32_t)st_qb_sign((uint32_t)g, st_qb_bits_to_mask(sign8 & 15));
    w->v[2 * k + 1] = (int32_t)st_qb_sign((uint32_t)(g >> 32), st_qb_bits_to_mask(sign8 >> 4));
}

// The codebook types take their table as an argument (_t): the device copy, or a block's copy in shared memory
// (cuda/decode_rows.cuh, DEC_SMEM_TABLES); the plain names read ST_QTAB's.
ST_HD void st_qb_unpack_iq2_xxs_t(const uint8_t *x, int j, st_qb_w *w, const uint64_t *grid) {
    uint32_t aux[2];
    st_qb_ldw(x + 2 + 8 * j, aux, 2, 2);
    ST_QB_UNROLL
    for (int k = 0; k < 4; k++)
        st_qb_grid8(w, k, grid[ST_QB_GIDX((aux[0] >> (8 * k)) & 255)], st_qb_ksigns((aux[1] >> (7 * k)) & 127));
    const float a = st_qb_f16(st_qb_u16(x)) * (0.5f + (float)(aux[1] >> 28)) * 0.25f;
    st_qb_set_ab(w, a, a, 0.0f, 0.0f);
}
ST_HD void st_qb_unpack_iq2_xs_t(const uint8_t *x, int j, st_qb_w *w, const uint64_t *grid) {
    uint32_t qs[2];
    st_qb_ldw(x + 2 + 8 * j, qs, 2, 2);
    ST_QB_UNROLL
    for (int k = 0; k < 4; k++) {
        const uint32_t q = (qs[k / 2] >> (16 * (k % 2))) & 0xffff;
        st_qb_grid8(w, k, grid[ST_QB_GIDX(q & 511)], st_qb_ksigns(q >> 9));
    }
    const uint32_t sc = x[66 + j];
    const float d = st_qb_f16(st_qb_u16(x)) * 0.25f;
    st_qb_set_ab(w, d * (0.5f + (float)(sc & 15)), d * (0.5f + (float)(sc >> 4)), 0.0f, 0.0f);
}
ST_HD void st_qb_unpack_iq2_s_t(const uint8_t *x, int j, st_qb_w *w, const uint64_t *grid) {
    const uint32_t qs = st_qb_u32(x + 2 + 4 * j, 2), signs = st_qb_u32(x + 34 + 4 * j, 2);
    const uint32_t qh = x[66 + j], sc = x[74 + j];
    ST_QB_UNROLL
    for (int k = 0; k < 4; k++) {
        const uint32_t idx = ((qs >> (8 * k)) & 255) | (((qh >> (2 * k)) & 3) << 8);
        st_qb_grid8(w, k, grid[ST_QB_GIDX(idx)], (signs >> (8 * k)) & 255);
    }
    const float d = st_qb_f16(st_qb_u16(x)) * 0.25f;
    st_qb_set_ab(w, d * (0.5f + (float)(sc & 15)), d * (0.5f + (float)(sc >> 4)), 0.0f, 0.0f);
}
ST_HD void st_qb_unpack_iq3_xxs_t(const uint8_t *x, int j, st_qb_w *w, const uint32_t *grid) {
    uint32_t qs[2];
    st_qb_ldw(x + 2 + 8 * j, qs, 2, 2);
    const uint32_t aux = st_qb_u32(x + 66 + 4 * j, 2);
    ST_QB_UNROLL
    for (int k = 0; k < 4; k++) {
        const uint32_t sign8 = st_qb_ksigns((aux >> (7 * k)) & 127);
        const uint32_t i0 = (qs[k / 2] >> (16 * (k % 2))) & 255, i1 = (qs[k / 2] >> (16 * (k % 2) + 8)) & 255;
        w->v[2 * k] = (int32_t)st_qb_sign(grid[ST_QB_GIDX(i0)], st_qb_bits_to_mask(sign8 & 15));
        w->v[2 * k + 1] = (int32_t)st_qb_sign(grid[ST_QB_GIDX(i1)], st_qb_bits_to_mask(sign8 >> 4));
    }
    const float a = st_qb_f16(st_qb_u16(x)) * (0.5f + (float)(aux >> 28)) * 0.5f;
    st_qb_set_ab(w, a, a, 0.0f, 0.0f);
}
ST_HD void st_qb_unpack_iq3_s_t(const uint8_t *x, int j, st_qb_w *w, const uint32_t *grid) {
    uint32_t qs[2];
    st_qb_ldw(x + 2 + 8 * j, qs, 2, 2);
    const uint32_t qh = x[66 + j];
    const uint32_t signs = st_qb_u32(x + 74 + 4 * j, 2);
    ST_QB_UNROLL
    for (int m = 0; m < 8; m++) {
        const uint32_t idx = ((qs[m / 4] >> (8 * (m % 4))) & 255) | (((qh >> m) & 1) << 8);
        w->v[m] = (int32_t)st_qb_sign(grid[ST_QB_GIDX(idx)], st_qb_bits_to_mask((signs >> (4 * m)) & 15));
    }
    const uint32_t s = (x[106 + j / 2] >> (4 * (j % 2))) & 15;
    const float a = st_qb_f16(st_qb_u16(x)) * (float)(1 + 2 * s);
    st_qb_set_ab(w, a, a, 0.0f, 0.0f);
}
ST_HD void st_qb_unpack_iq1_s_t(const uint8_t *x, int j, st_qb_w *w, const uint64_t *grid) {
    const uint32_t qs = st_qb_u32(x + 2 + 4 * j, 2);
    const uint32_t qh = st_qb_u16(x + 34 + 2 * j);
    ST_QB_UNROLL
    for (int k = 0; k < 4; k++) {
        const uint64_t g = grid[ST_QB_GIDX(((qs >> (8 * k)) & 255) | (((qh >> (3 * k)) & 7) << 8))];
        w->v[2 * k] = (int32_t)(uint32_t)g;
        w->v[2 * k + 1] = (int32_t)(uint32_t)(g >> 32);
    }
    const float a = st_qb_f16(st_qb_u16(x)) * (float)(2 * ((qh >> 12) & 7) + 1);
    const float b = a * ((qh & 0x8000) ? -IQ1S_DELTA : IQ1S_DELTA);
    st_qb_set_ab(w, a, a, b, b);
}
ST_HD void st_qb_unpack_iq1_m_t(const uint8_t *x, int j, st_qb_w *w, const uint64_t *grid) {
    const uint32_t qs = st_qb_u32(x + 4 * j, 4);
    const uint32_t qh = st_qb_u16(x + 32 + 2 * j);
    uint32_t sc[2];
    st_qb_ldw(x + 48, sc, 2, 8);
    const uint32_t s0 = sc[0] & 0xffff, s1 = sc[0] >> 16, s2 = sc[1] & 0xffff, s3 = sc[1] >> 16;
    const uint32_t dbits = (s0 >> 12) | ((s1 >> 8) & 0x00f0) | ((s2 >> 4) & 0x0f00) | (s3 & 0xf000);
    const float d = st_qb_f16(dbits);
    const uint32_t scw = (j / 2 == 0 ? s0 : j / 2 == 1 ? s1 : j / 2 == 2 ? s2 : s3) >> (6 * (j % 2));
    const float a0 = d * (float)(2 * (scw & 7) + 1), a1 = d * (float)(2 * ((scw >> 3) & 7) + 1);
    ST_QB_UNROLL
    for (int k = 0; k < 4; k++) {
        const uint32_t nib = (qh >> (4 * k)) & 15;  // qh[2j + k/2], nibble k % 2
        const uint64_t g = grid[ST_QB_GIDX(((qs >> (8 * k)) & 255) | ((nib & 7) << 8))];
        w->v[2 * k] = (int32_t)(uint32_t)g;
        w->v[2 * k + 1] = (int32_t)(uint32_t)(g >> 32);
        const float a = k < 2 ? a0 : a1;
        w->a[k] = a;
        w->b[k] = a * ((nib & 8) ? -IQ1M_DELTA : IQ1M_DELTA);
    }
}
// The plain names: the codebook types' unpack with ST_QTAB's table.
#define ST_QB_UNPACK_QTAB(name, tab)                                     \
    ST_HD void st_qb_unpack_##name(const uint8_t *x, int j, st_qb_w *w) { \
        st_qb_unpack_##name##_t(x, j, w, ST_QTAB(tab));                  \
    }
ST_QB_UNPACK_QTAB(iq2_xxs, iq2xxs_grid)
ST_QB_UNPACK_QTAB(iq2_xs, iq2xs_grid)
ST_QB_UNPACK_QTAB(iq2_s, iq2s_grid)
ST_QB_UNPACK_QTAB(iq3_xxs, iq3xxs_grid)
ST_QB_UNPACK_QTAB(iq3_s, iq3s_grid)
ST_QB_UNPACK_QTAB(iq1_s, iq1s_grid)
ST_QB_UNPACK_QTAB(iq1_m, iq1s_grid)
#undef ST_QB_UNPACK_QTAB
ST_HD void st_qb_unpack_iq4_xs(const uint8_t *x, int j, st_qb_w *w) {
    uint32_t q[4];
    st_qb_ldw(x + 8 + 16 * j, q, 4, 8);
    const uint32_t hd = st_qb_u32(x, 8);
    const uint32_t ls = ((x[4 + j / 2] >> (4 * (j % 2))) & 15) | (((hd >> (16 + 2 * j)) & 3) << 4);
    ST_QB_KV16(IQ4NL, iq4nl, t);
    st_qb_lut_nibbles(w, q, t);
    const float a = st_qb_f16(hd & 0xffff) * (float)((int)ls - 32);
    st_qb_set_ab(w, a, a, 0.0f, 0.0f);
}

// Unpacks item j of the block at x. Returns 0, or -1 for a float or unsupported type (nothing written).
ST_HD int st_qb_unpack(int type, const uint8_t *x, int j, st_qb_w *w) {
    switch (type) {
    case ST_TYPE_Q4_0: st_qb_unpack_q4_0(x, j, w); return 0;
    case ST_TYPE_Q4_1: st_qb_unpack_q4_1(x, j, w); return 0;
    case ST_TYPE_Q5_0: st_qb_unpack_q5_0(x, j, w); return 0;
    case ST_TYPE_Q5_1: st_qb_unpack_q5_1(x, j, w); return 0;
    case ST_TYPE_Q8_0: st_qb_unpack_q8_0(x, j, w); return 0;
    case ST_TYPE_Q2_K: st_qb_unpack_q2_K(x, j, w); return 0;
    case ST_TYPE_Q3_K: st_qb_unpack_q3_K(x, j, w); return 0;
    case ST_TYPE_Q4_K: st_qb_unpack_q4_K(x, j, w); return 0;
    case ST_TYPE_Q5_K: st_qb_unpack_q5_K(x, j, w); return 0;
    case ST_TYPE_Q6_K: st_qb_unpack_q6_K(x, j, w); return 0;
    case ST_TYPE_IQ2_XXS: st_qb_unpack_iq2_xxs(x, j, w); return 0;
    case ST_TYPE_IQ2_XS: st_qb_unpack_iq2_xs(x, j, w); return 0;
    case ST_TYPE_IQ2_S: st_qb_unpack_iq2_s(x, j, w); return 0;
    case ST_TYPE_IQ3_XXS: st_qb_unpack_iq3_xxs(x, j, w); return 0;
    case ST_TYPE_IQ3_S: st_qb_unpack_iq3_s(x, j, w); return 0;
    case ST_TYPE_IQ1_S: st_qb_unpack_iq1_s(x, j, w); return 0;
    case ST_TYPE_IQ1_M: st_qb_unpack_iq1_m(x, j, w); return 0;
    case ST_TYPE_IQ4_NL: st_qb_unpack_iq4_nl(x, j, w); return 0;
    case ST_TYPE_IQ4_XS: st_qb_unpack_iq4_xs(x, j, w); return 0;
    case ST_TYPE_MXFP4: st_qb_unpack_mxfp4(x, j, w); return 0;
    default: return -1;
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Dot products with one q8_1 activation block: q = 8 ints of int8 quants, d8 its scale, s8 = d8 * sum(q).

// amode/bmode: ST_QB_AMODE/ST_QB_BMODE of the type (constants after inlining, so unused terms vanish).
ST_HD float st_qb_dot_w(const st_qb_w *w, const int32_t *q, float d8, float s8, int amode, int bmode) {
    float r;
    if (amode == 1) {
        int32_t si = 0;
        ST_QB_UNROLL
        for (int k = 0; k < 8; k++) si = st_dp4a(w->v[k], q[k], si);
        r = w->a[0] * (float)si;
    } else {
        int32_t s0 = 0, s1 = 0;
        ST_QB_UNROLL
        for (int k = 0; k < 4; k++) s0 = st_dp4a(w->v[k], q[k], s0);
        ST_QB_UNROLL
        for (int k = 4; k < 8; k++) s1 = st_dp4a(w->v[k], q[k], s1);
        r = w->a[0] * (float)s0 + w->a[2] * (float)s1;
    }
    r *= d8;
    if (bmode == 1) {
        r += w->b[0] * s8;
    } else if (bmode == 2) {
        int32_t a0 = 0, a1 = 0;
        ST_QB_UNROLL
        for (int k = 0; k < 4; k++) a0 = st_dp4a(0x01010101, q[k], a0);
        ST_QB_UNROLL
        for (int k = 4; k < 8; k++) a1 = st_dp4a(0x01010101, q[k], a1);
        r += d8 * (w->b[0] * (float)a0 + w->b[2] * (float)a1);
    } else if (bmode == 3) {
        float t = 0.0f;
        ST_QB_UNROLL
        for (int g = 0; g < 4; g++) t += w->b[g] * (float)st_dp4a(0x01010101, q[2 * g + 1], st_dp4a(0x01010101, q[2 * g], 0));
        r += d8 * t;
    }
    return r;
}

// F32/F16/BF16: elements 4c..4c+3 (c = 0..7) of the 32 consecutive elements at p (128/64/64 bytes, 16-byte aligned
// on device), as floats.
ST_HD void st_qb_float4(int type, const uint8_t *p, int c, float *w4) {
    if (type == ST_TYPE_F32) {
        uint32_t u[4];
        st_qb_ldw(p + 16 * c, u, 4, 16);
        ST_QB_UNROLL
        for (int e = 0; e < 4; e++) w4[e] = st_qb_bits_f32(u[e]);
    } else {
        uint32_t u[2];
        st_qb_ldw(p + 8 * c, u, 2, 8);
        ST_QB_UNROLL
        for (int e = 0; e < 4; e++) {
            const uint32_t h = (u[e / 2] >> (16 * (e % 2))) & 0xffff;
            w4[e] = type == ST_TYPE_F16 ? st_qb_f16(h) : st_qb_bf16(h);
        }
    }
}

// Float weights times int8 quants: sum_i w[i] * q[i] for the 4 elements of chunk c (q = the chunk's int).
ST_HD float st_qb_float4_dot(const float *w4, int32_t q) {
    return w4[0] * (float)(int8_t)q + w4[1] * (float)(int8_t)(q >> 8) + w4[2] * (float)(int8_t)(q >> 16) +
           w4[3] * (float)(int8_t)(q >> 24);
}

// Item dot for F32/F16/BF16 weights.
ST_HD float st_qb_dot_float(int type, const uint8_t *p, const int32_t *q, float d8) {
    float r = 0.0f;
    ST_QB_UNROLL
    for (int c = 0; c < 8; c++) {
        float w4[4];
        st_qb_float4(type, p, c, w4);
        r += st_qb_float4_dot(w4, q[c]);
    }
    return r * d8;
}

// The item dot for any supported type (the unpack + dot pair above, or the float path).
ST_HD float st_qb_dot(int type, const uint8_t *x, int j, const int32_t *q, float d8, float s8) {
    if (ST_QB_IS_FLOAT(type)) return st_qb_dot_float(type, x, q, d8);
    st_qb_w w;
    if (st_qb_unpack(type, x, j, &w) != 0) return 0.0f;
    return st_qb_dot_w(&w, q, d8, s8, ST_QB_AMODE(type), ST_QB_BMODE(type));
}

// ---------------------------------------------------------------------------------------------------------------
// q8_1 activations. GPU row layout ("planar q8_1") of a row of ne0 = 32 * nb floats:
//   bytes [0, 32 nb)          int8 quants, block b at 32 b (so a block's quants are two aligned 16-byte loads)
//   bytes [32 nb, 40 nb)      float pairs (d, s) per block: d = amax / 127, s = d * sum(quants)
//   row stride                st_q8_1_row_bytes(ne0): 40 nb rounded up to 128 bytes (rows stay 16-byte aligned)
ST_HD int64_t st_q8_1_row_bytes(int64_t ne0) { return ((ne0 / 32) * 40 + 127) / 128 * 128; }

// Reference quantization of one 32-float block (the GPU kernel computes the same thing across a warp).
ST_HD void st_qb_quantize_q8_1(const float *x, int8_t *q, float *d, float *s) {
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = amax > (x[i] < 0 ? -x[i] : x[i]) ? amax : (x[i] < 0 ? -x[i] : x[i]);
    const float dd = amax / 127.0f, id = dd != 0.0f ? 1.0f / dd : 0.0f;
    int sum = 0;
    for (int i = 0; i < 32; i++) {
        const int v = (int)roundf(x[i] * id);
        q[i] = (int8_t)v;
        sum += v;
    }
    *d = dd;
    *s = dd * (float)sum;
}

#endif
