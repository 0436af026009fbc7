// Type table, half/bfloat16 conversions and dequantization of every GGML block format (layouts: quant/blocks.h).
//
// Dequantization performs the same float operations in the same order as GGML's reference dequantizers (and the
// gguf Python package), so results are bit-identical; the library is built with -ffp-contract=off so the
// compiler cannot fuse a multiply and add into an FMA, which would change rounding.
#include "quant/quant.h"

#include <math.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "quant/blocks.h"
#include "quant/iq_tables.h"
#include "quant/quant_internal.h"
#include "util/err.h"

// ---------------------------------------------------------------------------------------------------------------
// Type table (ids, sizes: GGML's ggml_type / gguf-py's GGML_QUANT_SIZES; see blocks.h for the Q8_1 note).

#define BLK(t) ((int)sizeof(t))
static const st_type_info k_types[ST_TYPE_COUNT] = {
    [ST_TYPE_F32] = {"F32", 1, 4, true, true},
    [ST_TYPE_F16] = {"F16", 1, 2, true, true},
    [ST_TYPE_Q4_0] = {"Q4_0", QK4_0, BLK(block_q4_0), true, true},
    [ST_TYPE_Q4_1] = {"Q4_1", QK4_1, BLK(block_q4_1), true, true},
    [ST_TYPE_Q5_0] = {"Q5_0", QK5_0, BLK(block_q5_0), true, true},
    [ST_TYPE_Q5_1] = {"Q5_1", QK5_1, BLK(block_q5_1), true, true},
    [ST_TYPE_Q8_0] = {"Q8_0", QK8_0, BLK(block_q8_0), true, true},
    [ST_TYPE_Q8_1] = {"Q8_1", QK8_1, BLK(block_q8_1), true, true},
    [ST_TYPE_Q2_K] = {"Q2_K", QK_K, BLK(block_q2_K), true, true},
    [ST_TYPE_Q3_K] = {"Q3_K", QK_K, BLK(block_q3_K), true, true},
    [ST_TYPE_Q4_K] = {"Q4_K", QK_K, BLK(block_q4_K), true, true},
    [ST_TYPE_Q5_K] = {"Q5_K", QK_K, BLK(block_q5_K), true, true},
    [ST_TYPE_Q6_K] = {"Q6_K", QK_K, BLK(block_q6_K), true, true},
    [ST_TYPE_Q8_K] = {"Q8_K", QK_K, BLK(block_q8_K), true, true},
    [ST_TYPE_IQ2_XXS] = {"IQ2_XXS", QK_K, BLK(block_iq2_xxs), true, false},
    [ST_TYPE_IQ2_XS] = {"IQ2_XS", QK_K, BLK(block_iq2_xs), true, false},
    [ST_TYPE_IQ3_XXS] = {"IQ3_XXS", QK_K, BLK(block_iq3_xxs), true, false},
    [ST_TYPE_IQ1_S] = {"IQ1_S", QK_K, BLK(block_iq1_s), true, false},
    [ST_TYPE_IQ4_NL] = {"IQ4_NL", QK4_NL, BLK(block_iq4_nl), true, true},
    [ST_TYPE_IQ3_S] = {"IQ3_S", QK_K, BLK(block_iq3_s), true, false},
    [ST_TYPE_IQ2_S] = {"IQ2_S", QK_K, BLK(block_iq2_s), true, false},
    [ST_TYPE_IQ4_XS] = {"IQ4_XS", QK_K, BLK(block_iq4_xs), true, true},
    [ST_TYPE_I8] = {"I8", 1, 1, true, false},
    [ST_TYPE_I16] = {"I16", 1, 2, true, false},
    [ST_TYPE_I32] = {"I32", 1, 4, true, false},
    [ST_TYPE_I64] = {"I64", 1, 8, true, false},
    [ST_TYPE_F64] = {"F64", 1, 8, true, false},
    [ST_TYPE_IQ1_M] = {"IQ1_M", QK_K, BLK(block_iq1_m), true, false},
    [ST_TYPE_BF16] = {"BF16", 1, 2, true, true},
    [ST_TYPE_TQ1_0] = {"TQ1_0", QK_K, BLK(block_tq1_0), true, true},
    [ST_TYPE_TQ2_0] = {"TQ2_0", QK_K, BLK(block_tq2_0), true, true},
    [ST_TYPE_MXFP4] = {"MXFP4", QK_MXFP4, BLK(block_mxfp4), true, true},
};

const st_type_info *st_type_get(int type) {
    if (type < 0 || type >= ST_TYPE_COUNT || !k_types[type].name) return NULL;
    return &k_types[type];
}

int st_type_from_name(const char *name) {
    if (!name) return -1;
    for (int t = 0; t < ST_TYPE_COUNT; t++)
        if (k_types[t].name && strcasecmp(k_types[t].name, name) == 0) return t;
    return -1;
}

const char *st_type_name(int type) {
    const st_type_info *ti = st_type_get(type);
    return ti ? ti->name : "?";
}

size_t st_row_size(int type, int64_t n) {
    const st_type_info *ti = st_type_get(type);
    if (!ti || n < 0 || n % ti->block_size) return 0;
    return (size_t)(n / ti->block_size) * (size_t)ti->type_size;
}

// ---------------------------------------------------------------------------------------------------------------
// Half and bfloat16.

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float st_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000 | (man << 13));  // inf / NaN (payload kept)
    if (exp != 0) return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
    // Zero or subnormal: man * 2^-24, exact in float.
    float v = (float)man * 0x1p-24f;
    return sign ? -v : v;
}

uint16_t st_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    x &= 0x7fffffff;
    if (x > 0x7f800000) return sign | 0x7e00;   // NaN -> quiet NaN (as GGML)
    if (x >= 0x477ff000) return sign | 0x7c00;  // >= 65520 rounds to infinity
    if (x >= 0x38800000) {                      // normal half range (>= 2^-14)
        uint32_t r = x - 0x38000000;            // rebias exponent 127 -> 15
        r += 0x0fff + ((r >> 13) & 1);          // round to nearest even on the 13 dropped bits
        return sign | (uint16_t)(r >> 13);
    }
    // Subnormal half (or zero): round |f| / 2^-24 to an integer, ties to even (exact scaling, then the 2^23 trick).
    float m = bits_f32(x) * 0x1p24f;
    float r = (m + 8388608.f) - 8388608.f;
    return sign | (uint16_t)r;
}

float st_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t st_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 64);  // NaN: force quiet
    return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

// ---------------------------------------------------------------------------------------------------------------
// Dequantization. Each takes the row's blocks as bytes and nb = number of blocks.

static inline float ldh(const uint8_t *p) { return st_f16_to_f32(st_ld16(p)); }

static void deq_q4_0(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_q4_0), y += 32) {
        const float d = ldh(x + offsetof(block_q4_0, d));
        const uint8_t *qs = x + offsetof(block_q4_0, qs);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((qs[j] & 15) - 8) * d;
            y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
        }
    }
}

static void deq_q4_1(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_q4_1), y += 32) {
        const float d = ldh(x + offsetof(block_q4_1, d)), m = ldh(x + offsetof(block_q4_1, m));
        const uint8_t *qs = x + offsetof(block_q4_1, qs);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(qs[j] & 15) * d + m;
            y[j + 16] = (float)(qs[j] >> 4) * d + m;
        }
    }
}

static void deq_q5_0(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_q5_0), y += 32) {
        const float d = ldh(x + offsetof(block_q5_0, d));
        const uint32_t qh = st_ld32(x + offsetof(block_q5_0, qh));
        const uint8_t *qs = x + offsetof(block_q5_0, qs);
        for (int j = 0; j < 16; j++) {
            int q0 = (qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
            int q1 = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = (float)(q0 - 16) * d;
            y[j + 16] = (float)(q1 - 16) * d;
        }
    }
}

static void deq_q5_1(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_q5_1), y += 32) {
        const float d = ldh(x + offsetof(block_q5_1, d)), m = ldh(x + offsetof(block_q5_1, m));
        const uint32_t qh = st_ld32(x + offsetof(block_q5_1, qh));
        const uint8_t *qs = x + offsetof(block_q5_1, qs);
        for (int j = 0; j < 16; j++) {
            int q0 = (qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
            int q1 = (qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            y[j] = (float)q0 * d + m;
            y[j + 16] = (float)q1 * d + m;
        }
    }
}

static void deq_q8_0(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_q8_0), y += 32) {
        const float d = ldh(x + offsetof(block_q8_0, d));
        const int8_t *qs = (const int8_t *)(x + offsetof(block_q8_0, qs));
        for (int j = 0; j < 32; j++) y[j] = (float)qs[j] * d;
    }
}

static void deq_q8_1(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_q8_1), y += 32) {
        const float d = ldh(x + offsetof(block_q8_1, d));
        const int8_t *qs = (const int8_t *)(x + offsetof(block_q8_1, qs));
        for (int j = 0; j < 32; j++) y[j] = (float)qs[j] * d;
    }
}

static void deq_mxfp4(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_mxfp4), y += 32) {
        const uint8_t e = x[offsetof(block_mxfp4, e)];
        // 2^(e-128): kvalues are doubled E2M1 values, so this is half the E8M0 scale. e < 2 is subnormal in f32.
        const float d = e < 2 ? bits_f32(0x00200000u << e) : bits_f32((uint32_t)(e - 1) << 23);
        const uint8_t *qs = x + offsetof(block_mxfp4, qs);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)st_kvalues_mxfp4[qs[j] & 15];
            y[j + 16] = d * (float)st_kvalues_mxfp4[qs[j] >> 4];
        }
    }
}

static void deq_iq4_nl(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_iq4_nl), y += 32) {
        const float d = ldh(x + offsetof(block_iq4_nl, d));
        const uint8_t *qs = x + offsetof(block_iq4_nl, qs);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)st_kvalues_iq4nl[qs[j] & 15];
            y[j + 16] = d * (float)st_kvalues_iq4nl[qs[j] >> 4];
        }
    }
}

static void deq_q2_K(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_q2_K), y += QK_K) {
        const float d = ldh(x + offsetof(block_q2_K, d)), dmin = ldh(x + offsetof(block_q2_K, dmin));
        const uint8_t *sc = x + offsetof(block_q2_K, scales);
        const uint8_t *qs = x + offsetof(block_q2_K, qs);
        for (int h = 0; h < 2; h++)
            for (int s = 0; s < 4; s++)
                for (int half = 0; half < 2; half++) {
                    const int sb = 8 * h + 2 * s + half;
                    const float dl = d * (float)(sc[sb] & 15), ml = dmin * (float)(sc[sb] >> 4);
                    float *yy = y + 128 * h + 32 * s + 16 * half;
                    const uint8_t *q = qs + 32 * h + 16 * half;
                    for (int l = 0; l < 16; l++) yy[l] = dl * (float)((q[l] >> (2 * s)) & 3) - ml;
                }
    }
}

// 6-bit scale i of Q3_K's 12-byte packing (see blocks.h).
static inline int q3k_scale(const uint8_t *sc, int i) {
    int lo = i < 8 ? (sc[i] & 15) : (sc[i - 8] >> 4);
    int hi = (sc[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
    return lo | (hi << 4);
}

static void deq_q3_K(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_q3_K), y += QK_K) {
        const float d = ldh(x + offsetof(block_q3_K, d));
        const uint8_t *hm = x + offsetof(block_q3_K, hmask);
        const uint8_t *qs = x + offsetof(block_q3_K, qs);
        const uint8_t *sc = x + offsetof(block_q3_K, scales);
        for (int h = 0; h < 2; h++)
            for (int s = 0; s < 4; s++)
                for (int half = 0; half < 2; half++) {
                    const int sb = 8 * h + 2 * s + half;
                    const float dl = d * (float)(q3k_scale(sc, sb) - 32);
                    float *yy = y + 128 * h + 32 * s + 16 * half;
                    for (int l = 16 * half; l < 16 * half + 16; l++) {
                        int q = (qs[32 * h + l] >> (2 * s)) & 3;
                        if (!((hm[l] >> (4 * h + s)) & 1)) q -= 4;
                        yy[l - 16 * half] = dl * (float)q;
                    }
                }
    }
}

// Scale and min j of Q4_K/Q5_K's 12-byte packing (see blocks.h).
static inline void k4_scale_min(const uint8_t *q, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// One Q4_K / Q5_K super-block: eight 32-element sub-blocks with 6-bit scale and min; qh (Q5_K's fifth bits, bit j
// of qh[l] for sub-block j) is NULL for Q4_K.
static void deq_k45_block(float d, float dmin, const uint8_t *scales, const uint8_t *qs, const uint8_t *qh,
                          float *y) {
    for (int c = 0; c < 4; c++)
        for (int hi = 0; hi < 2; hi++) {
            int sc, mn;
            k4_scale_min(scales, 2 * c + hi, &sc, &mn);
            const float d1 = d * (float)sc, m1 = dmin * (float)mn;
            float *yy = y + 64 * c + 32 * hi;
            for (int l = 0; l < 32; l++) {
                int q = ((qs[32 * c + l] >> (4 * hi)) & 15) | (qh ? ((qh[l] >> (2 * c + hi)) & 1) << 4 : 0);
                yy[l] = d1 * (float)q - m1;
            }
        }
}

static void deq_q4_K(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_q4_K), y += QK_K)
        deq_k45_block(ldh(x + offsetof(block_q4_K, d)), ldh(x + offsetof(block_q4_K, dmin)),
                      x + offsetof(block_q4_K, scales), x + offsetof(block_q4_K, qs), NULL, y);
}

static void deq_q5_K(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_q5_K), y += QK_K)
        deq_k45_block(ldh(x + offsetof(block_q5_K, d)), ldh(x + offsetof(block_q5_K, dmin)),
                      x + offsetof(block_q5_K, scales), x + offsetof(block_q5_K, qs), x + offsetof(block_q5_K, qh), y);
}

static void deq_q6_K(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_q6_K), y += QK_K) {
        const float d = ldh(x + offsetof(block_q6_K, d));
        const int8_t *sc = (const int8_t *)(x + offsetof(block_q6_K, scales));
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x + offsetof(block_q6_K, ql) + 64 * h;
            const uint8_t *qh = x + offsetof(block_q6_K, qh) + 32 * h;
            float *yy = y + 128 * h;
            for (int l = 0; l < 32; l++) {
                const int sb = 8 * h + l / 16;
                int q1 = ((ql[l] & 15) | ((qh[l] & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                yy[l] = (d * (float)sc[sb]) * (float)q1;
                yy[l + 32] = (d * (float)sc[sb + 2]) * (float)q2;
                yy[l + 64] = (d * (float)sc[sb + 4]) * (float)q3;
                yy[l + 96] = (d * (float)sc[sb + 6]) * (float)q4;
            }
        }
    }
}

static void deq_q8_K(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_q8_K), y += QK_K) {
        const float d = st_ldf32(x + offsetof(block_q8_K, d));
        const int8_t *qs = (const int8_t *)(x + offsetof(block_q8_K, qs));
        for (int j = 0; j < QK_K; j++) y[j] = d * (float)qs[j];
    }
}

static inline float tq1_trit(uint8_t b, int k) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    uint8_t q = (uint8_t)(b * pow3[k]);
    return (float)((((uint16_t)q * 3) >> 8) - 1);
}

static void deq_tq1_0(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_tq1_0), y += QK_K) {
        const float d = ldh(x + offsetof(block_tq1_0, d));
        const uint8_t *qs = x + offsetof(block_tq1_0, qs), *qh = x + offsetof(block_tq1_0, qh);
        for (int k = 0; k < 5; k++)
            for (int l = 0; l < 32; l++) y[32 * k + l] = tq1_trit(qs[l], k) * d;
        for (int k = 0; k < 5; k++)
            for (int l = 0; l < 16; l++) y[160 + 16 * k + l] = tq1_trit(qs[32 + l], k) * d;
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 4; l++) y[240 + 4 * k + l] = tq1_trit(qh[l], k) * d;
    }
}

static void deq_tq2_0(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_tq2_0), y += QK_K) {
        const float d = ldh(x + offsetof(block_tq2_0, d));
        const uint8_t *qs = x + offsetof(block_tq2_0, qs);
        for (int h = 0; h < 2; h++)
            for (int s = 0; s < 4; s++)
                for (int l = 0; l < 32; l++) y[128 * h + 32 * s + l] = (float)(((qs[32 * h + l] >> (2 * s)) & 3) - 1) * d;
    }
}

// Writes 8 elements: db * grid byte j * sign (sign bit j of `signs`).
static inline void iq_group8(float *y, float db, uint64_t grid, uint8_t signs) {
    for (int j = 0; j < 8; j++) {
        float g = (float)(uint8_t)(grid >> (8 * j));
        y[j] = db * g * ((signs >> j) & 1 ? -1.f : 1.f);
    }
}

static void deq_iq2_xxs(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_iq2_xxs)) {
        const float d = ldh(x + offsetof(block_iq2_xxs, d));
        const uint8_t *qs = x + offsetof(block_iq2_xxs, qs);
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *g = qs + 8 * ib;
            const uint32_t w = st_ld32(g + 4);
            const float db = d * (0.5f + (float)(w >> 28)) * 0.25f;
            for (int k = 0; k < 4; k++, y += 8)
                iq_group8(y, db, st_iq2xxs_grid[g[k]], st_ksigns_iq2xs[(w >> (7 * k)) & 127]);
        }
    }
}

static void deq_iq2_xs(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_iq2_xs)) {
        const float d = ldh(x + offsetof(block_iq2_xs, d));
        const uint8_t *qs = x + offsetof(block_iq2_xs, qs), *sc = x + offsetof(block_iq2_xs, scales);
        for (int ib = 0; ib < 8; ib++) {
            const float db0 = d * (0.5f + (float)(sc[ib] & 15)) * 0.25f;
            const float db1 = d * (0.5f + (float)(sc[ib] >> 4)) * 0.25f;
            for (int k = 0; k < 4; k++, y += 8) {
                const uint16_t v = st_ld16(qs + 2 * (4 * ib + k));
                iq_group8(y, k < 2 ? db0 : db1, st_iq2xs_grid[v & 511], st_ksigns_iq2xs[v >> 9]);
            }
        }
    }
}

static void deq_iq2_s(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_iq2_s)) {
        const float d = ldh(x + offsetof(block_iq2_s, d));
        const uint8_t *qs = x + offsetof(block_iq2_s, qs), *signs = qs + QK_K / 8;
        const uint8_t *qh = x + offsetof(block_iq2_s, qh), *sc = x + offsetof(block_iq2_s, scales);
        for (int ib = 0; ib < 8; ib++) {
            const float db0 = d * (0.5f + (float)(sc[ib] & 15)) * 0.25f;
            const float db1 = d * (0.5f + (float)(sc[ib] >> 4)) * 0.25f;
            for (int k = 0; k < 4; k++, y += 8) {
                const int idx = qs[4 * ib + k] | (((qh[ib] >> (2 * k)) & 3) << 8);
                iq_group8(y, k < 2 ? db0 : db1, st_iq2s_grid[idx], signs[4 * ib + k]);
            }
        }
    }
}

// Writes 4 elements: db * grid byte j * sign (bit (j + off) of signs).
static inline void iq_group4(float *y, float db, uint32_t grid, uint8_t signs, int off) {
    for (int j = 0; j < 4; j++) {
        float g = (float)(uint8_t)(grid >> (8 * j));
        y[j] = db * g * ((signs >> (j + off)) & 1 ? -1.f : 1.f);
    }
}

static void deq_iq3_xxs(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_iq3_xxs)) {
        const float d = ldh(x + offsetof(block_iq3_xxs, d));
        const uint8_t *qs = x + offsetof(block_iq3_xxs, qs);
        for (int ib = 0; ib < 8; ib++) {
            const uint32_t w = st_ld32(qs + QK_K / 4 + 4 * ib);
            const float db = d * (0.5f + (float)(w >> 28)) * 0.5f;
            for (int k = 0; k < 4; k++, y += 8) {
                const uint8_t s = st_ksigns_iq2xs[(w >> (7 * k)) & 127];
                iq_group4(y, db, st_iq3xxs_grid[qs[8 * ib + 2 * k]], s, 0);
                iq_group4(y + 4, db, st_iq3xxs_grid[qs[8 * ib + 2 * k + 1]], s, 4);
            }
        }
    }
}

static void deq_iq3_s(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_iq3_s)) {
        const float d = ldh(x + offsetof(block_iq3_s, d));
        const uint8_t *qs = x + offsetof(block_iq3_s, qs), *qh = x + offsetof(block_iq3_s, qh);
        const uint8_t *signs = x + offsetof(block_iq3_s, signs), *sc = x + offsetof(block_iq3_s, scales);
        for (int ib = 0; ib < 8; ib++) {
            const int s = (sc[ib / 2] >> (4 * (ib % 2))) & 15;
            const float db = d * (float)(1 + 2 * s);
            for (int k = 0; k < 4; k++, y += 8) {
                const int m0 = 2 * k, m1 = 2 * k + 1;
                const int i0 = qs[8 * ib + m0] | (((qh[ib] >> m0) & 1) << 8);
                const int i1 = qs[8 * ib + m1] | (((qh[ib] >> m1) & 1) << 8);
                iq_group4(y, db, st_iq3s_grid[i0], signs[4 * ib + k], 0);
                iq_group4(y + 4, db, st_iq3s_grid[i1], signs[4 * ib + k], 4);
            }
        }
    }
}

// 8 elements of dl * (grid + delta) for the {-1, 0, 1} IQ1 grid.
static inline void iq1_group8(float *y, float dl, uint64_t grid, float delta) {
    for (int j = 0; j < 8; j++) y[j] = dl * ((float)(int8_t)(uint8_t)(grid >> (8 * j)) + delta);
}

static void deq_iq1_s(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_iq1_s)) {
        const float d = ldh(x + offsetof(block_iq1_s, d));
        const uint8_t *qs = x + offsetof(block_iq1_s, qs), *qhp = x + offsetof(block_iq1_s, qh);
        for (int ib = 0; ib < 8; ib++) {
            const uint16_t qh = st_ld16(qhp + 2 * ib);
            const float dl = d * (float)(2 * ((qh >> 12) & 7) + 1);
            const float delta = qh & 0x8000 ? -IQ1S_DELTA : IQ1S_DELTA;
            for (int k = 0; k < 4; k++, y += 8)
                iq1_group8(y, dl, st_iq1s_grid[qs[4 * ib + k] | (((qh >> (3 * k)) & 7) << 8)], delta);
        }
    }
}

static void deq_iq1_m(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_iq1_m)) {
        const uint8_t *qs = x + offsetof(block_iq1_m, qs), *qh = x + offsetof(block_iq1_m, qh);
        const uint8_t *scb = x + offsetof(block_iq1_m, scales);
        uint16_t sc[4];
        for (int k = 0; k < 4; k++) sc[k] = st_ld16(scb + 2 * k);
        const uint16_t dbits = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) |
                                          (sc[3] & 0xf000));
        const float d = st_f16_to_f32(dbits);
        for (int ib = 0; ib < 8; ib++) {
            const float dl0 = d * (float)(2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1);
            const float dl1 = d * (float)(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1);
            for (int k = 0; k < 4; k++, y += 8) {
                const int nib = (qh[2 * ib + k / 2] >> (4 * (k % 2))) & 15;
                const int idx = qs[4 * ib + k] | ((nib & 7) << 8);
                iq1_group8(y, k < 2 ? dl0 : dl1, st_iq1s_grid[idx], nib & 8 ? -IQ1M_DELTA : IQ1M_DELTA);
            }
        }
    }
}

static void deq_iq4_xs(const uint8_t *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += sizeof(block_iq4_xs)) {
        const float d = ldh(x + offsetof(block_iq4_xs, d));
        const uint16_t sh = st_ld16(x + offsetof(block_iq4_xs, scales_h));
        const uint8_t *sl = x + offsetof(block_iq4_xs, scales_l), *qs = x + offsetof(block_iq4_xs, qs);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            const int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 15) | (((sh >> (2 * ib)) & 3) << 4);
            const float dl = d * (float)(ls - 32);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)st_kvalues_iq4nl[qs[16 * ib + j] & 15];
                y[j + 16] = dl * (float)st_kvalues_iq4nl[qs[16 * ib + j] >> 4];
            }
        }
    }
}

int st_dequantize_row(int type, const void *src, float *dst, int64_t n) {
    const st_type_info *ti = st_type_get(type);
    if (!ti) return st_err("dequantize: unknown tensor type id %d", type);
    if (n < 0 || n % ti->block_size)
        return st_err("dequantize %s: row of %lld elements is not a multiple of the block size %d", ti->name,
                      (long long)n, ti->block_size);
    const uint8_t *x = (const uint8_t *)src;
    const int64_t nb = n / ti->block_size;
    switch (type) {
    case ST_TYPE_F32: memcpy(dst, src, (size_t)n * 4); break;
    case ST_TYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = st_f16_to_f32(st_ld16(x + 2 * i));
        break;
    case ST_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = st_bf16_to_f32(st_ld16(x + 2 * i));
        break;
    case ST_TYPE_F64:
        for (int64_t i = 0; i < n; i++) {
            double v;
            memcpy(&v, x + 8 * i, 8);
            dst[i] = (float)v;
        }
        break;
    case ST_TYPE_I8:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)(int8_t)x[i];
        break;
    case ST_TYPE_I16:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)(int16_t)st_ld16(x + 2 * i);
        break;
    case ST_TYPE_I32:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)(int32_t)st_ld32(x + 4 * i);
        break;
    case ST_TYPE_I64:
        for (int64_t i = 0; i < n; i++) {
            int64_t v;
            memcpy(&v, x + 8 * i, 8);
            dst[i] = (float)v;
        }
        break;
    case ST_TYPE_Q4_0: deq_q4_0(x, dst, nb); break;
    case ST_TYPE_Q4_1: deq_q4_1(x, dst, nb); break;
    case ST_TYPE_Q5_0: deq_q5_0(x, dst, nb); break;
    case ST_TYPE_Q5_1: deq_q5_1(x, dst, nb); break;
    case ST_TYPE_Q8_0: deq_q8_0(x, dst, nb); break;
    case ST_TYPE_Q8_1: deq_q8_1(x, dst, nb); break;
    case ST_TYPE_Q2_K: deq_q2_K(x, dst, nb); break;
    case ST_TYPE_Q3_K: deq_q3_K(x, dst, nb); break;
    case ST_TYPE_Q4_K: deq_q4_K(x, dst, nb); break;
    case ST_TYPE_Q5_K: deq_q5_K(x, dst, nb); break;
    case ST_TYPE_Q6_K: deq_q6_K(x, dst, nb); break;
    case ST_TYPE_Q8_K: deq_q8_K(x, dst, nb); break;
    case ST_TYPE_IQ2_XXS: deq_iq2_xxs(x, dst, nb); break;
    case ST_TYPE_IQ2_XS: deq_iq2_xs(x, dst, nb); break;
    case ST_TYPE_IQ2_S: deq_iq2_s(x, dst, nb); break;
    case ST_TYPE_IQ3_XXS: deq_iq3_xxs(x, dst, nb); break;
    case ST_TYPE_IQ3_S: deq_iq3_s(x, dst, nb); break;
    case ST_TYPE_IQ1_S: deq_iq1_s(x, dst, nb); break;
    case ST_TYPE_IQ1_M: deq_iq1_m(x, dst, nb); break;
    case ST_TYPE_IQ4_NL: deq_iq4_nl(x, dst, nb); break;
    case ST_TYPE_IQ4_XS: deq_iq4_xs(x, dst, nb); break;
    case ST_TYPE_TQ1_0: deq_tq1_0(x, dst, nb); break;
    case ST_TYPE_TQ2_0: deq_tq2_0(x, dst, nb); break;
    case ST_TYPE_MXFP4: deq_mxfp4(x, dst, nb); break;
    default: return st_err("dequantize: type %s is not supported", ti->name);
    }
    return 0;
}
