// Random valid blocks for every dequantizable type, generated directly in the quantized domain (no float
// round trip), so make-model can fill many GiB of weights quickly: O(bytes) with a few rng calls per block.
//
// Strategy: fill the block with random bytes (every bit pattern of a code / grid index / sign field is valid),
// then overwrite the fields that need care: f16 scales are set finite and positive-ish, codes of symmetric types
// are drawn from a range symmetric about zero, and min/offset fields of affine types are set to cancel the mean
// of the codes. The block scale is the tensor scale times a jitter in [0.75, 1.25] (realistic variation);
// every constant below is E[value^2] of the block in units of its scale^2, so the overall stddev comes out
// at `stddev` in expectation.
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "quant/blocks.h"
#include "quant/iq_tables.h"
#include "quant/quant.h"
#include "quant/quant_internal.h"
#include "util/err.h"
#include "util/rng.h"

// E[j^2] for the jitter j ~ U[0.75, 1.25]: 1 + 0.5^2 / 12.
#define JITTER_M2 (1.0 + 0.25 / 12.0)

static void fill_bytes(st_rng *r, uint8_t *p, size_t n) {
    while (n >= 8) {
        uint64_t v = st_rng_u64(r);
        memcpy(p, &v, 8);
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t v = st_rng_u64(r);
        for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
    }
}

// n integers uniform in [lo, lo + range), range <= 65536: four draws per 64-bit rng output.
static void uniform_codes(st_rng *r, int *out, int n, int lo, int range) {
    for (int i = 0; i < n; i += 4) {
        uint64_t v = st_rng_u64(r);
        for (int k = 0; k < 4 && i + k < n; k++) out[i + k] = lo + (int)((((v >> (16 * k)) & 0xffff) * (uint32_t)range) >> 16);
    }
}

static inline float jitter(st_rng *r) { return 0.75f + 0.5f * st_rng_f32(r); }
static inline float rsign(st_rng *r) { return (st_rng_u32(r) & 1) ? -1.f : 1.f; }
static inline void put_h(uint8_t *p, float v) { st_st16(p, st_f32_to_f16(v)); }

// Mean square of the grid byte values over uniform indices (computed from iq_tables.c; exact binary fractions).
// IQ1's grid is signed ({-1, 0, 1}); the others are unsigned magnitudes.
#define M2_IQ2XXS_GRID 534.43017578125
#define M2_IQ2XS_GRID 586.47607421875
#define M2_IQ2S_GRID 596.8416748046875
#define M2_IQ3XXS_GRID 951.640625
#define M2_IQ3S_GRID 57.671875
#define M2_IQ1S_GRID 0.59417724609375

static double kvalues_m2(const int8_t *k) {
    double s = 0;
    for (int i = 0; i < 16; i++) s += (double)k[i] * k[i];
    return s / 16;
}

// Mean squares of common scale distributions: uniform integer s in [a, b] -> E[s^2], and E[f(s)^2] for the
// IQ sub-scale formulas over a uniform 4-bit / 3-bit field.
static double m2_int_range(int a, int b) {
    double s = 0;
    for (int k = a; k <= b; k++) s += (double)k * k;
    return s / (b - a + 1);
}
#define M2_HALF_PLUS_S4 85.25  // E[(0.5 + s)^2], s uniform in 0..15
#define M2_ODD_S4 341.0        // E[(1 + 2s)^2], s uniform in 0..15
#define M2_ODD_S3 85.0         // E[(1 + 2s)^2], s uniform in 0..7

int st_random_blocks(int type, void *dst, int64_t n_blocks, float stddev, struct st_rng *rng) {
    const st_type_info *ti = st_type_get(type);
    if (!ti) return st_err("random_blocks: unknown tensor type id %d", type);
    if (!ti->can_dequantize) return st_err("random_blocks: type %s is not supported", ti->name);
    if (n_blocks < 0) return st_err("random_blocks %s: negative block count %lld", ti->name, (long long)n_blocks);
    if (!(stddev >= 0) || !isfinite(stddev))
        return st_err("random_blocks %s: stddev must be finite and >= 0 (got %g)", ti->name, (double)stddev);
    st_rng *r = rng;
    uint8_t *y = (uint8_t *)dst;
    const size_t bs = (size_t)ti->type_size;
    const double sd = stddev;
    // Scale such that E[value^2] = stddev^2 given m2 = E[(value / scale)^2] with unit jitter.
#define BASE(m2) ((float)(sd / sqrt((m2) * JITTER_M2)))

    // Plain types: gaussian values.
    switch (type) {
    case ST_TYPE_F32:
    case ST_TYPE_F16:
    case ST_TYPE_BF16:
    case ST_TYPE_F64:
    case ST_TYPE_I8:
    case ST_TYPE_I16:
    case ST_TYPE_I32:
    case ST_TYPE_I64:
        for (int64_t i = 0; i < n_blocks; i++, y += bs) {
            float v = st_rng_normal(r) * stddev;
            switch (type) {
            case ST_TYPE_F32: st_stf32(y, v); break;
            case ST_TYPE_F16: st_st16(y, st_f32_to_f16(v)); break;
            case ST_TYPE_BF16: st_st16(y, st_f32_to_bf16(v)); break;
            case ST_TYPE_F64: {
                double dv = v;
                memcpy(y, &dv, 8);
                break;
            }
            default: {
                // Integer types: rounded values, clamped to the type's range.
                double lim = type == ST_TYPE_I8 ? 127 : type == ST_TYPE_I16 ? 32767 : 2147483647.0;
                double dv = nearbyint(v);
                if (dv > lim) dv = lim;
                if (dv < -lim) dv = -lim;
                int64_t iv = (int64_t)dv;
                memcpy(y, &iv, (size_t)ti->type_size);  // little-endian truncation keeps the low bytes
                break;
            }
            }
        }
        return 0;
    default: break;
    }

    fill_bytes(r, y, bs * (size_t)n_blocks);
    int codes[QK_K];
    const double g2 = type == ST_TYPE_IQ2_XXS ? M2_IQ2XXS_GRID
                    : type == ST_TYPE_IQ2_XS  ? M2_IQ2XS_GRID
                    : type == ST_TYPE_IQ2_S   ? M2_IQ2S_GRID
                    : type == ST_TYPE_IQ3_XXS ? M2_IQ3XXS_GRID
                    : type == ST_TYPE_IQ3_S   ? M2_IQ3S_GRID
                                              : M2_IQ1S_GRID;

    for (int64_t i = 0; i < n_blocks; i++, y += bs) {
        const float jit = jitter(r);
        switch (type) {
        case ST_TYPE_Q4_0: {  // q - 8 uniform in [-7, 7]
            const float d = BASE(m2_int_range(-7, 7)) * jit;
            put_h(y + offsetof(block_q4_0, d), d);
            uniform_codes(r, codes, 32, 1, 15);
            uint8_t *qs = y + offsetof(block_q4_0, qs);
            for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(codes[j] | (codes[j + 16] << 4));
            break;
        }
        case ST_TYPE_Q5_0: {  // q - 16 uniform in [-15, 15]
            const float d = BASE(m2_int_range(-15, 15)) * jit;
            put_h(y + offsetof(block_q5_0, d), d);
            uniform_codes(r, codes, 32, 1, 31);
            uint8_t *qs = y + offsetof(block_q5_0, qs);
            uint32_t qh = 0;
            for (int j = 0; j < 32; j++) qh |= (uint32_t)(codes[j] >> 4) << j;
            for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((codes[j] & 15) | ((codes[j + 16] & 15) << 4));
            st_st32(y + offsetof(block_q5_0, qh), qh);
            break;
        }
        case ST_TYPE_Q4_1:
        case ST_TYPE_Q5_1: {  // random codes in [0, 2^b); m = -d * mean code
            const int q4 = type == ST_TYPE_Q4_1;
            const int levels = q4 ? 16 : 32;
            const float d = BASE((levels * levels - 1) / 12.0) * jit;
            const uint16_t dh = st_f32_to_f16(d);
            const size_t od = q4 ? offsetof(block_q4_1, d) : offsetof(block_q5_1, d);
            const size_t om = q4 ? offsetof(block_q4_1, m) : offsetof(block_q5_1, m);
            st_st16(y + od, dh);
            put_h(y + om, -st_f16_to_f32(dh) * (levels - 1) * 0.5f);
            break;
        }
        case ST_TYPE_Q8_0:
        case ST_TYPE_Q8_1: {  // q uniform in [-127, 127]
            const float d = BASE(m2_int_range(-127, 127)) * jit;
            uniform_codes(r, codes, 32, -127, 255);
            const size_t oq = type == ST_TYPE_Q8_0 ? offsetof(block_q8_0, qs) : offsetof(block_q8_1, qs);
            int sum = 0;
            for (int j = 0; j < 32; j++) {
                y[oq + j] = (uint8_t)(int8_t)codes[j];
                sum += codes[j];
            }
            const uint16_t dh = st_f32_to_f16(d);
            st_st16(y, dh);  // d is the first field of both
            if (type == ST_TYPE_Q8_1) put_h(y + offsetof(block_q8_1, s), st_f16_to_f32(dh) * (float)sum);
            break;
        }
        case ST_TYPE_Q8_K: {
            const float d = BASE(m2_int_range(-127, 127)) * jit;
            uniform_codes(r, codes, QK_K, -127, 255);
            int8_t *qs = (int8_t *)(y + offsetof(block_q8_K, qs));
            for (int g = 0; g < 16; g++) {
                int s = 0;
                for (int l = 0; l < 16; l++) {
                    qs[16 * g + l] = (int8_t)codes[16 * g + l];
                    s += codes[16 * g + l];
                }
                st_st16(y + offsetof(block_q8_K, bsums) + 2 * g, (uint16_t)(int16_t)s);
            }
            st_stf32(y + offsetof(block_q8_K, d), d);
            break;
        }
        case ST_TYPE_Q2_K: {  // q random in [0, 3]; sub-scale in [8, 15]; min cancels the mean code 1.5
            const float d = BASE(1.25 * m2_int_range(8, 15)) * jit;
            const uint16_t dh = st_f32_to_f16(d), mh = st_f32_to_f16(1.5f * st_f16_to_f32(dh));
            const float df = st_f16_to_f32(dh), mf = st_f16_to_f32(mh);
            st_st16(y + offsetof(block_q2_K, d), dh);
            st_st16(y + offsetof(block_q2_K, dmin), mh);
            uniform_codes(r, codes, 16, 8, 8);
            for (int j = 0; j < 16; j++) {
                int mn = mf > 0 ? st_nearest_int(df * codes[j] * 1.5f / mf) : 0;
                if (mn > 15) mn = 15;
                y[offsetof(block_q2_K, scales) + j] = (uint8_t)(codes[j] | (mn << 4));
            }
            break;
        }
        case ST_TYPE_Q3_K: {  // signed code in [-3, 3]; 6-bit scale with |s - 32| in [8, 31], random sign
            const float d = BASE(4.0 * m2_int_range(8, 31)) * jit;
            put_h(y + offsetof(block_q3_K, d), d);
            uint8_t *sc = y + offsetof(block_q3_K, scales);
            memset(sc, 0, 12);
            uniform_codes(r, codes, 16, 8, 24);
            for (int j = 0; j < 16; j++) {
                int l = 32 + (int)rsign(r) * codes[j];
                if (l > 63) l = 63;
                if (j < 8)
                    sc[j] = (uint8_t)(l & 15);
                else
                    sc[j - 8] |= (uint8_t)((l & 15) << 4);
                sc[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            uniform_codes(r, codes, QK_K, 1, 7);  // q3 = value + 4 in [1, 7]
            uint8_t *hm = y + offsetof(block_q3_K, hmask), *qs = y + offsetof(block_q3_K, qs);
            memset(hm, 0, 32);
            memset(qs, 0, 64);
            for (int h = 0; h < 2; h++)
                for (int s = 0; s < 4; s++)
                    for (int l = 0; l < 32; l++) {
                        const int q3 = codes[128 * h + 32 * s + l];
                        qs[32 * h + l] |= (uint8_t)((q3 & 3) << (2 * s));
                        hm[l] |= (uint8_t)((q3 >> 2) << (4 * h + s));
                    }
            break;
        }
        case ST_TYPE_Q4_K:
        case ST_TYPE_Q5_K: {  // q random; 6-bit scales in [32, 63]; dmin = 2^b/2 * d, mins cancel the mean code
            const int q4 = type == ST_TYPE_Q4_K;
            const int levels = q4 ? 16 : 32;
            const float d = BASE((levels * levels - 1) / 12.0 * m2_int_range(32, 63)) * jit;
            const uint16_t dh = st_f32_to_f16(d), mh = st_f32_to_f16(st_f16_to_f32(dh) * (float)(levels / 2));
            const float df = st_f16_to_f32(dh), mf = st_f16_to_f32(mh);
            uint8_t *base = y;
            st_st16(base + offsetof(block_q4_K, d), dh);  // Q4_K and Q5_K share the d/dmin/scales prefix
            st_st16(base + offsetof(block_q4_K, dmin), mh);
            uint8_t *q = base + offsetof(block_q4_K, scales);
            memset(q, 0, 12);
            uniform_codes(r, codes, 8, 32, 32);
            for (int j = 0; j < 8; j++) {
                int ls = codes[j];
                int lm = mf > 0 ? st_nearest_int(df * ls * ((levels - 1) * 0.5f) / mf) : 0;
                if (lm > 63) lm = 63;
                if (j < 4) {
                    q[j] |= (uint8_t)ls;
                    q[j + 4] |= (uint8_t)lm;
                } else {
                    q[j + 4] = (uint8_t)((ls & 15) | ((lm & 15) << 4));
                    q[j - 4] |= (uint8_t)((ls >> 4) << 6);
                    q[j] |= (uint8_t)((lm >> 4) << 6);
                }
            }
            break;
        }
        case ST_TYPE_Q6_K: {  // q - 32 uniform in [-31, 31]; int8 scales in [16, 127]
            const float d = BASE(m2_int_range(-31, 31) * m2_int_range(16, 127)) * jit;
            put_h(y + offsetof(block_q6_K, d), d);
            uniform_codes(r, codes, 16, 16, 112);
            for (int j = 0; j < 16; j++) y[offsetof(block_q6_K, scales) + j] = (uint8_t)codes[j];
            uniform_codes(r, codes, QK_K, 1, 63);
            uint8_t *ql = y + offsetof(block_q6_K, ql), *qh = y + offsetof(block_q6_K, qh);
            for (int h = 0; h < 2; h++)
                for (int l = 0; l < 32; l++) {
                    const int *c = codes + 128 * h + l;
                    ql[64 * h + l] = (uint8_t)((c[0] & 15) | ((c[64] & 15) << 4));
                    ql[64 * h + l + 32] = (uint8_t)((c[32] & 15) | ((c[96] & 15) << 4));
                    qh[32 * h + l] = (uint8_t)((c[0] >> 4) | ((c[32] >> 4) << 2) | ((c[64] >> 4) << 4) | ((c[96] >> 4) << 6));
                }
            break;
        }
        case ST_TYPE_IQ4_NL: {  // random codes; random sign of d cancels the codebook's mean (-5.9)
            const float d = BASE(kvalues_m2(st_kvalues_iq4nl)) * jit * rsign(r);
            put_h(y + offsetof(block_iq4_nl, d), d);
            break;
        }
        case ST_TYPE_IQ4_XS: {  // random codes; 6-bit scales with |ls - 32| in [8, 31], random sign
            const float d = BASE(kvalues_m2(st_kvalues_iq4nl) * m2_int_range(8, 31)) * jit;
            put_h(y + offsetof(block_iq4_xs, d), d);
            uint8_t *sl = y + offsetof(block_iq4_xs, scales_l);
            uint16_t sh = 0;
            memset(sl, 0, 4);
            uniform_codes(r, codes, 8, 8, 24);
            for (int ib = 0; ib < 8; ib++) {
                int l = 32 + (int)rsign(r) * codes[ib];
                if (l > 63) l = 63;
                sl[ib / 2] |= (uint8_t)((l & 15) << (4 * (ib % 2)));
                sh |= (uint16_t)((l >> 4) << (2 * ib));
            }
            st_st16(y + offsetof(block_iq4_xs, scales_h), sh);
            break;
        }
        case ST_TYPE_MXFP4: {  // random codes (symmetric codebook); power-of-two scale, dithered between two
                               // exponents so that E[d^2] matches the target
            const double dt = sd / sqrt(kvalues_m2(st_kvalues_mxfp4) * JITTER_M2) * jit;
            int e = 0;
            if (dt > 0) {
                int ex;
                frexp(dt, &ex);  // dt = m 2^ex, m in [0.5, 1): 2^(ex-1) <= dt < 2^ex
                const double lo = ldexp(1.0, ex - 1), ratio = (dt * dt) / (lo * lo);  // in [1, 4)
                const double p_lo = (4.0 - ratio) / 3.0;
                e = (ex - 1) + 128 + (st_rng_f32(r) < p_lo ? 0 : 1);
                if (e < 0) e = 0;
                if (e > 254) e = 254;
            }
            y[offsetof(block_mxfp4, e)] = (uint8_t)e;
            break;
        }
        case ST_TYPE_TQ1_0: {  // random trits, packed with the base-3 fixed-point encoding
            const float d = BASE(2.0 / 3.0) * jit;
            uniform_codes(r, codes, QK_K, 0, 3);
            uint8_t *qs = y + offsetof(block_tq1_0, qs), *qh = y + offsetof(block_tq1_0, qh);
            for (int l = 0; l < 32; l++) {
                int q = 0;
                for (int k = 0; k < 5; k++) q = q * 3 + codes[32 * k + l];
                qs[l] = (uint8_t)((q * 256 + 242) / 243);
            }
            for (int l = 0; l < 16; l++) {
                int q = 0;
                for (int k = 0; k < 5; k++) q = q * 3 + codes[160 + 16 * k + l];
                qs[32 + l] = (uint8_t)((q * 256 + 242) / 243);
            }
            for (int l = 0; l < 4; l++) {
                int q = 0;
                for (int k = 0; k < 4; k++) q = q * 3 + codes[240 + 4 * k + l];
                qh[l] = (uint8_t)((q * 3 * 256 + 242) / 243);
            }
            put_h(y + offsetof(block_tq1_0, d), d);
            break;
        }
        case ST_TYPE_TQ2_0: {  // codes in {0, 1, 2} (3 is never produced by GGML)
            const float d = BASE(2.0 / 3.0) * jit;
            uniform_codes(r, codes, QK_K, 0, 3);
            uint8_t *qs = y + offsetof(block_tq2_0, qs);
            for (int h = 0; h < 2; h++)
                for (int l = 0; l < 32; l++) {
                    int q = 0;
                    for (int s = 0; s < 4; s++) q |= codes[128 * h + 32 * s + l] << (2 * s);
                    qs[32 * h + l] = (uint8_t)q;
                }
            put_h(y + offsetof(block_tq2_0, d), d);
            break;
        }
        // I-quants: every grid index / sign / scale bit pattern is valid; only d needs setting. Signs are random,
        // so the mean is zero for the unsigned grids; IQ1's signed grid gets a random sign on d.
        case ST_TYPE_IQ2_XXS:
            put_h(y, BASE(M2_HALF_PLUS_S4 * 0.0625 * g2) * jit);
            break;
        case ST_TYPE_IQ2_XS:
            put_h(y, BASE(M2_HALF_PLUS_S4 * 0.0625 * g2) * jit);
            break;
        case ST_TYPE_IQ2_S:
            put_h(y, BASE(M2_HALF_PLUS_S4 * 0.0625 * g2) * jit);
            break;
        case ST_TYPE_IQ3_XXS:
            put_h(y, BASE(M2_HALF_PLUS_S4 * 0.25 * g2) * jit);
            break;
        case ST_TYPE_IQ3_S: put_h(y, BASE(M2_ODD_S4 * g2) * jit); break;
        case ST_TYPE_IQ1_S:
            put_h(y, BASE(M2_ODD_S3 * (g2 + IQ1S_DELTA * IQ1S_DELTA)) * jit *
                         rsign(r));
            break;
        case ST_TYPE_IQ1_M: {  // d's f16 bits go into the top nibbles of the four scale words
            const uint16_t dh = st_f32_to_f16(
                BASE(M2_ODD_S3 * (g2 + IQ1M_DELTA * IQ1M_DELTA)) * jit * rsign(r));
            uint8_t *sc = y + offsetof(block_iq1_m, scales);
            for (int k = 0; k < 4; k++) {
                uint16_t w = st_ld16(sc + 2 * k);
                w = (uint16_t)((w & 0x0fff) | (((dh >> (4 * k)) & 15) << 12));
                st_st16(sc + 2 * k, w);
            }
            break;
        }
        default: return st_err("random_blocks: type %s is not supported", ti->name);
        }
    }
    return 0;
#undef BASE
}
