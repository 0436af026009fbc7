// Portable C dot products (the reference path) and activation quantization.
// Integer products are accumulated exactly in int32 per sub-block and scaled once, like the SIMD kernels, so
// the two paths differ only by float summation order.
#include <math.h>

#include "cpu/dot_impl.h"
#include "quant/blocks.h"
#include "quant/iq_tables.h"

// ---------------------------------------------------------------------------------------------------------------
// Activation quantization (GGML reference formulas; bytes must match st_quantize_row).

// One 32-element block, symmetric 8-bit: qs[j] = round(x[j] / d) with d = amax / 127; returns d.
static float quant_block_q8(const float *x, int8_t qs[32]) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    // llama.cpp's x86 runtime rule (inverse scale 127/amax, ties to even), not GGML's reference quantizer: the
    // activations must be the ones llama.cpp multiplies with for the outputs to match it.
    const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int j = 0; j < 32; j++) qs[j] = (int8_t)nearbyintf(x[j] * id);
    return d;
}

static void quant_q8_0(const float *x, void *dst, int64_t n) {
    block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32) y[i].d = st_f32_to_f16(quant_block_q8(x, y[i].qs));
}

static void quant_q8_1(const float *x, void *dst, int64_t n) {
    block_q8_1 *y = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        const float d = quant_block_q8(x, y[i].qs);
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += y[i].qs[j];
        y[i].d = st_f32_to_f16(d);
        y[i].s = st_f32_to_f16((float)sum * d);
    }
}

// Round to nearest, ties to even (GGML's nearest_int for K-quant activations).
static inline int nearest_even(float v) { return (int)lrintf(v); }

static void quant_q8_K(const float *x, void *dst, int64_t n) {
    block_q8_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK_K; j++) {
            float ax = fabsf(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        // -127/max (not 127/amax): the value of largest magnitude maps to -127 exactly, never -128.
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; j++) {
            int v = nearest_even(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < QK_K / 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += y[i].qs[16 * g + l];
            y[i].bsums[g] = (int16_t)s;
        }
        y[i].d = 1.0f / iscale;
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Plain types (F32 activations).

static inline float f32_id(float v) { return v; }

// Portable path favours accuracy (double accumulator); SIMD paths use float lanes.
#define DOT_PLAIN(name, wtype, to_f32)                                                        \
    static float dot_##name(int64_t n, const void *w, const void *a) {                        \
        const wtype *x = w;                                                                   \
        const float *y = a;                                                                   \
        double s = 0.0;                                                                       \
        for (int64_t i = 0; i < n; i++) s += (double)to_f32(x[i]) * y[i];                     \
        return (float)s;                                                                      \
    }
DOT_PLAIN(f32, float, f32_id)
DOT_PLAIN(bf16, uint16_t, st_cpu_bf2f)

// F16 weights with F16 activations (llama.cpp's generic ggml_vec_dot_f16: float products, double sum).
static float dot_f16(int64_t n, const void *w, const void *a) {
    const uint16_t *x = w, *y = a;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)(st_cpu_h2f(x[i]) * st_cpu_h2f(y[i]));
    return (float)s;
}

// Every quantized dot below is a sum over blocks of blk_<type>(weight block, activation block), the block's
// contribution in float; the row loop is the same for all types.
#define DOT_ROW(name, wblock, ablock, qk)                                                     \
    static float dot_##name(int64_t n, const void *w, const void *a) {                        \
        const wblock *x = w;                                                                  \
        const ablock *y = a;                                                                  \
        float s = 0.0f;                                                                       \
        for (int64_t i = 0; i < n / (qk); i++) s += blk_##name(&x[i], &y[i]);                 \
        return s;                                                                             \
    }

// ---------------------------------------------------------------------------------------------------------------
// 32-element blocks with Q8_0 / Q8_1 activations.

// sum_j (q_j - bias) * q8[j] over a 32-element block: element j < 16 in the low nibble of qs[j], element j + 16
// in its high nibble, and bit j of qh as the fifth bit (qh = 0 for 4-bit types).
static inline int nibble_sum(const uint8_t *qs, uint32_t qh, int bias, const int8_t *q8) {
    int sum = 0;
    for (int j = 0; j < 16; j++) {
        int q0 = (qs[j] & 15) | (((qh >> j) & 1) << 4);
        int q1 = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
        sum += (q0 - bias) * q8[j] + (q1 - bias) * q8[j + 16];
    }
    return sum;
}

// The same layout through a 16-entry codebook: sum_j lut[nibble j] * q8[j].
static inline int lut_nibble_sum(const int8_t lut[16], const uint8_t *qs, const int8_t *q8) {
    int sum = 0;
    for (int j = 0; j < 16; j++) sum += lut[qs[j] & 15] * q8[j] + lut[qs[j] >> 4] * q8[j + 16];
    return sum;
}

static inline uint32_t load_qh(const uint8_t qh[4]) {
    uint32_t v;
    memcpy(&v, qh, 4);
    return v;
}

static inline float blk_q4_0(const block_q4_0 *x, const block_q8_0 *y) {
    return st_cpu_h2f(x->d) * st_cpu_h2f(y->d) * (float)nibble_sum(x->qs, 0, 8, y->qs);
}
DOT_ROW(q4_0, block_q4_0, block_q8_0, 32)

static inline float blk_q4_1(const block_q4_1 *x, const block_q8_1 *y) {
    const int sum = nibble_sum(x->qs, 0, 0, y->qs);
    // sum_j (d q_j + m) * a_j = d*da*sum(q*qa) + m * (da*sum(qa)), the latter precomputed as y.s
    return st_cpu_h2f(x->d) * st_cpu_h2f(y->d) * (float)sum + st_cpu_h2f(x->m) * st_cpu_h2f(y->s);
}
DOT_ROW(q4_1, block_q4_1, block_q8_1, 32)

static inline float blk_q5_0(const block_q5_0 *x, const block_q8_0 *y) {
    return st_cpu_h2f(x->d) * st_cpu_h2f(y->d) * (float)nibble_sum(x->qs, load_qh(x->qh), 16, y->qs);
}
DOT_ROW(q5_0, block_q5_0, block_q8_0, 32)

static inline float blk_q5_1(const block_q5_1 *x, const block_q8_1 *y) {
    const int sum = nibble_sum(x->qs, load_qh(x->qh), 0, y->qs);
    return st_cpu_h2f(x->d) * st_cpu_h2f(y->d) * (float)sum + st_cpu_h2f(x->m) * st_cpu_h2f(y->s);
}
DOT_ROW(q5_1, block_q5_1, block_q8_1, 32)

static inline float blk_q8_0(const block_q8_0 *x, const block_q8_0 *y) {
    int sum = 0;
    for (int j = 0; j < 32; j++) sum += x->qs[j] * y->qs[j];
    return st_cpu_h2f(x->d) * st_cpu_h2f(y->d) * (float)sum;
}
DOT_ROW(q8_0, block_q8_0, block_q8_0, 32)

static inline float blk_iq4_nl(const block_iq4_nl *x, const block_q8_0 *y) {
    return st_cpu_h2f(x->d) * st_cpu_h2f(y->d) * (float)lut_nibble_sum(st_kvalues_iq4nl, x->qs, y->qs);
}
DOT_ROW(iq4_nl, block_iq4_nl, block_q8_0, 32)

static inline float blk_mxfp4(const block_mxfp4 *x, const block_q8_0 *y) {
    return st_cpu_e8m0_half(x->e) * st_cpu_h2f(y->d) * (float)lut_nibble_sum(st_kvalues_mxfp4, x->qs, y->qs);
}
DOT_ROW(mxfp4, block_mxfp4, block_q8_0, 32)

// ---------------------------------------------------------------------------------------------------------------
// K-quants and I-quants with Q8_K activations: sb_<type> gives one super-block's exact integer sums (st_tdot_fn's
// s1 and s2) and its scales; the 1-token dot (blk_<type>) and the tiled-order kernel (tdot_<type>) differ only in
// the float epilogue.

typedef struct {
    int32_t s1;      // sum_j scale_j * (sub-block j's weight codes . activations), offsets included
    int32_t s2;      // sum_j min_j * (sub-block j's activation sum); 0 for types without mins
    float d, dmin;   // the block's scales widened from f16 (without the type's constant factor)
} sb_sums;

static inline sb_sums sb_q2_K(const block_q2_K *x, const block_q8_K *y) {
    int sum_q = 0, sum_m = 0;
    for (int sb = 0; sb < 16; sb++) sum_m += (x->scales[sb] >> 4) * y->bsums[sb];
    for (int e = 0; e < QK_K; e += 16) {  // one 16-element sub-block
        int h = e / 128, sp = (e % 128) / 32, l0 = e % 32, sb = e / 16, acc = 0;
        for (int l = 0; l < 16; l++) acc += ((x->qs[32 * h + l0 + l] >> (2 * sp)) & 3) * y->qs[e + l];
        sum_q += (x->scales[sb] & 15) * acc;
    }
    return (sb_sums){sum_q, sum_m, st_cpu_h2f(x->d), st_cpu_h2f(x->dmin)};
}

static inline sb_sums sb_q3_K(const block_q3_K *x, const block_q8_K *y) {
    int8_t sc[16];
    st_cpu_q3k_scales(x->scales, sc);
    int sum = 0;
    for (int e = 0; e < QK_K; e += 16) {
        int h = e / 128, sp = (e % 128) / 32, l0 = e % 32, acc = 0;
        for (int l = 0; l < 16; l++) {
            int q = (x->qs[32 * h + l0 + l] >> (2 * sp)) & 3;
            q -= (x->hmask[l0 + l] >> (4 * h + sp)) & 1 ? 0 : 4;
            acc += q * y->qs[e + l];
        }
        sum += sc[e / 16] * acc;
    }
    return (sb_sums){sum, 0, st_cpu_h2f(x->d), 0.0f};
}

// Q4_K and Q5_K: eight 32-element sub-blocks with 6-bit scale and min; qh (Q5_K's fifth bits, bit j of qh[l]
// for sub-block j) is NULL for Q4_K.
static inline sb_sums sb_k45(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh, uint16_t d,
                             uint16_t dmin, const block_q8_K *y) {
    int sum_q = 0, sum_m = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, mn;
        st_cpu_scale_min_k4(j, scales, &sc, &mn);
        const uint8_t *q = qs + 32 * (j / 2);
        const int shift = 4 * (j % 2);
        int acc = 0;
        for (int l = 0; l < 32; l++) {
            int v = ((q[l] >> shift) & 15) | (qh ? ((qh[l] >> j) & 1) << 4 : 0);
            acc += v * y->qs[32 * j + l];
        }
        sum_q += sc * acc;
        sum_m += mn * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
    }
    return (sb_sums){sum_q, sum_m, st_cpu_h2f(d), st_cpu_h2f(dmin)};
}

static inline sb_sums sb_q4_K(const block_q4_K *x, const block_q8_K *y) {
    return sb_k45(x->scales, x->qs, NULL, x->d, x->dmin, y);
}

static inline sb_sums sb_q5_K(const block_q5_K *x, const block_q8_K *y) {
    return sb_k45(x->scales, x->qs, x->qh, x->d, x->dmin, y);
}

static inline sb_sums sb_q6_K(const block_q6_K *x, const block_q8_K *y) {
    int sum = 0;
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = x->ql + 64 * h, *qh = x->qh + 32 * h;
        const int8_t *q8 = y->qs + 128 * h;
        for (int part = 0; part < 4; part++) {  // elements 32*part + l of this half
            for (int g = 0; g < 2; g++) {       // 16-element sub-block within the part
                int acc = 0;
                for (int l = 16 * g; l < 16 * g + 16; l++) {
                    int lo = part & 1 ? ql[l + 32] : ql[l];
                    lo = part & 2 ? lo >> 4 : lo & 15;
                    int q = lo | (((qh[l] >> (2 * part)) & 3) << 4);
                    acc += (q - 32) * q8[32 * part + l];
                }
                sum += x->scales[8 * h + 2 * part + g] * acc;
            }
        }
    }
    return (sb_sums){sum, 0, st_cpu_h2f(x->d), 0.0f};
}

// I-quants: scales of the form (0.5 + s) * k are kept as integers (2s + 1) and the constant factor (K_<type>
// below) applied once per block.

// sum_j grid[j] * (sign bit j ? -1 : 1) * q8[j] over one group of 8.
static inline int signed_grid8(const uint8_t *grid, uint8_t signs, const int8_t *q8) {
    int acc = 0;
    for (int j = 0; j < 8; j++) acc += (signs >> j & 1 ? -grid[j] : grid[j]) * q8[j];
    return acc;
}

static inline sb_sums sb_iq2_xxs(const block_iq2_xxs *x, const block_q8_K *y) {
    int sum = 0;
    for (int ib = 0; ib < 8; ib++) {
        uint32_t aux[2];
        memcpy(aux, x->qs + 4 * ib, 8);
        const uint8_t *idx = (const uint8_t *)&aux[0];
        const int8_t *q8 = y->qs + 32 * ib;
        int acc = 0;
        for (int k = 0; k < 4; k++) {
            uint64_t g = st_iq2xxs_grid[idx[k]];
            acc += signed_grid8((const uint8_t *)&g, st_ksigns_iq2xs[(aux[1] >> (7 * k)) & 127], q8 + 8 * k);
        }
        sum += (int)(2 * (aux[1] >> 28) + 1) * acc;
    }
    return (sb_sums){sum, 0, st_cpu_h2f(x->d), 0.0f};
}

static inline sb_sums sb_iq2_xs(const block_iq2_xs *x, const block_q8_K *y) {
    int sum = 0;
    for (int ib = 0; ib < 8; ib++) {
        for (int half = 0; half < 2; half++) {
            int acc = 0;
            for (int k = 2 * half; k < 2 * half + 2; k++) {
                uint16_t q = x->qs[4 * ib + k];
                uint64_t g = st_iq2xs_grid[q & 511];
                acc += signed_grid8((const uint8_t *)&g, st_ksigns_iq2xs[q >> 9], y->qs + 32 * ib + 8 * k);
            }
            sum += (2 * ((x->scales[ib] >> (4 * half)) & 15) + 1) * acc;
        }
    }
    return (sb_sums){sum, 0, st_cpu_h2f(x->d), 0.0f};
}

static inline sb_sums sb_iq2_s(const block_iq2_s *x, const block_q8_K *y) {
    int sum = 0;
    for (int ib = 0; ib < 8; ib++) {
        for (int half = 0; half < 2; half++) {
            int acc = 0;
            for (int k = 2 * half; k < 2 * half + 2; k++) {
                int idx = x->qs[4 * ib + k] | (((x->qh[ib] >> (2 * k)) & 3) << 8);
                uint64_t g = st_iq2s_grid[idx];
                acc += signed_grid8((const uint8_t *)&g, x->qs[32 + 4 * ib + k], y->qs + 32 * ib + 8 * k);
            }
            sum += (2 * ((x->scales[ib] >> (4 * half)) & 15) + 1) * acc;
        }
    }
    return (sb_sums){sum, 0, st_cpu_h2f(x->d), 0.0f};
}

static inline sb_sums sb_iq3_xxs(const block_iq3_xxs *x, const block_q8_K *y) {
    int sum = 0;
    for (int ib = 0; ib < 8; ib++) {
        uint32_t ss;
        memcpy(&ss, x->qs + 64 + 4 * ib, 4);
        int acc = 0;
        for (int k = 0; k < 4; k++) {
            uint32_t g[2] = {st_iq3xxs_grid[x->qs[8 * ib + 2 * k]], st_iq3xxs_grid[x->qs[8 * ib + 2 * k + 1]]};
            acc += signed_grid8((const uint8_t *)g, st_ksigns_iq2xs[(ss >> (7 * k)) & 127],
                                y->qs + 32 * ib + 8 * k);
        }
        sum += (int)(2 * (ss >> 28) + 1) * acc;
    }
    return (sb_sums){sum, 0, st_cpu_h2f(x->d), 0.0f};
}

static inline sb_sums sb_iq3_s(const block_iq3_s *x, const block_q8_K *y) {
    int sum = 0;
    for (int ib = 0; ib < 8; ib++) {
        int acc = 0;
        for (int k = 0; k < 4; k++) {
            int m0 = 2 * k, m1 = 2 * k + 1;
            uint32_t g[2] = {st_iq3s_grid[x->qs[8 * ib + m0] | (((x->qh[ib] >> m0) & 1) << 8)],
                             st_iq3s_grid[x->qs[8 * ib + m1] | (((x->qh[ib] >> m1) & 1) << 8)]};
            acc += signed_grid8((const uint8_t *)g, x->signs[4 * ib + k], y->qs + 32 * ib + 8 * k);
        }
        sum += (2 * ((x->scales[ib / 2] >> (4 * (ib % 2))) & 15) + 1) * acc;
    }
    return (sb_sums){sum, 0, st_cpu_h2f(x->d), 0.0f};
}

// IQ1: y = d * (2s + 1) * (grid + delta); delta = +-1/8, so 8 * y / (d (2s+1)) = 8 grid +- 1 stays integer.
static inline sb_sums sb_iq1_s(const block_iq1_s *x, const block_q8_K *y) {
    int sum = 0;
    for (int ib = 0; ib < 8; ib++) {
        const uint16_t qh = x->qh[ib];
        int acc = 0;
        for (int k = 0; k < 4; k++) {
            uint64_t g = st_iq1s_grid[x->qs[4 * ib + k] | (((qh >> (3 * k)) & 7) << 8)];
            const int8_t *gv = (const int8_t *)&g, *q8 = y->qs + 32 * ib + 8 * k;
            for (int j = 0; j < 8; j++) acc += gv[j] * q8[j];
        }
        int asum = y->bsums[2 * ib] + y->bsums[2 * ib + 1];
        sum += (2 * ((qh >> 12) & 7) + 1) * (8 * acc + (qh & 0x8000 ? -asum : asum));
    }
    return (sb_sums){sum, 0, st_cpu_h2f(x->d), 0.0f};
}

static inline sb_sums sb_iq1_m(const block_iq1_m *x, const block_q8_K *y) {
    uint16_t sc[4];
    memcpy(sc, x->scales, 8);
    const uint16_t dbits = (sc[0] >> 12) | ((sc[1] >> 8) & 0xf0) | ((sc[2] >> 4) & 0xf00) | (sc[3] & 0xf000);
    int sum = 0;
    for (int ib = 0; ib < 8; ib++) {
        for (int half = 0; half < 2; half++) {
            int acc = 0;
            for (int k = 2 * half; k < 2 * half + 2; k++) {
                const int nib = (x->qh[2 * ib + k / 2] >> (4 * (k % 2))) & 15;
                uint64_t g = st_iq1s_grid[x->qs[4 * ib + k] | ((nib & 7) << 8)];
                const int8_t *gv = (const int8_t *)&g, *q8 = y->qs + 32 * ib + 8 * k;
                int gs = 0, as = 0;
                for (int j = 0; j < 8; j++) { gs += gv[j] * q8[j]; as += q8[j]; }
                acc += 8 * gs + (nib & 8 ? -as : as);
            }
            const int ls = (sc[ib / 2] >> (6 * (ib % 2) + 3 * half)) & 7;
            sum += (2 * ls + 1) * acc;
        }
    }
    return (sb_sums){sum, 0, st_cpu_h2f(dbits), 0.0f};
}

static inline sb_sums sb_iq4_xs(const block_iq4_xs *x, const block_q8_K *y) {
    int sum = 0;
    for (int ib = 0; ib < 8; ib++) {
        const int ls = ((x->scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((x->scales_h >> (2 * ib)) & 3) << 4);
        sum += (ls - 32) * lut_nibble_sum(st_kvalues_iq4nl, x->qs + 16 * ib, y->qs + 32 * ib);
    }
    return (sb_sums){sum, 0, st_cpu_h2f(x->d), 0.0f};
}

// The types' constant scale factors: (0.5 + s) * 0.25 = (2s + 1) / 8 for IQ2_*, (0.5 + s) * 0.5 = (2s + 1) / 4 for
// IQ3_XXS, and IQ1's weights kept as 8 * (grid + delta).
#define K_q2_K 1.0f
#define K_q3_K 1.0f
#define K_q4_K 1.0f
#define K_q5_K 1.0f
#define K_q6_K 1.0f
#define K_iq2_xxs 0.125f
#define K_iq2_xs 0.125f
#define K_iq2_s 0.125f
#define K_iq3_xxs 0.25f
#define K_iq3_s 1.0f
#define K_iq1_s 0.125f
#define K_iq1_m 0.125f
#define K_iq4_xs 1.0f

// 1-token dot: one float product per block (types with mins: y.d * (d * s1 - dmin * s2)).
#define BLK_NOMIN(name)                                                                       \
    static inline float blk_##name(const block_##name *x, const block_q8_K *y) {              \
        const sb_sums s = sb_##name(x, y);                                                    \
        return K_##name * y->d * s.d * (float)s.s1;                                           \
    }
#define BLK_MIN(name)                                                                         \
    static inline float blk_##name(const block_##name *x, const block_q8_K *y) {              \
        const sb_sums s = sb_##name(x, y);                                                    \
        return y->d * (s.d * (float)s.s1 - s.dmin * (float)s.s2);                             \
    }

// Tiled order (st_tdot_fn): fmaf is the fused vfnmadd / vfmadd of llama.cpp's AVX-512 kernel.
#define TDOT(name)                                                                                          \
    static void tdot_##name(int64_t n, const void *w, const void *a, size_t as, int n_tok, float out[4]) {  \
        const block_##name *x = w;                                                                          \
        for (int c = 0; c < n_tok; c++) {                                                                   \
            const block_q8_K *y = (const block_q8_K *)((const uint8_t *)a + (size_t)c * as);                 \
            float acc = 0.0f;                                                                               \
            for (int64_t i = 0; i < n / QK_K; i++) {                                                        \
                const sb_sums s = sb_##name(&x[i], &y[i]);                                                  \
                float r = (float)s.s1 * (s.d * K_##name);                                                   \
                r = fmaf(-s.dmin, (float)s.s2, r);                                                          \
                acc = fmaf(r, y[i].d, acc);                                                                 \
            }                                                                                               \
            out[c] = acc;                                                                                   \
        }                                                                                                   \
    }

#define KQ_NOMIN(name) BLK_NOMIN(name) DOT_ROW(name, block_##name, block_q8_K, QK_K) TDOT(name)
#define KQ_MIN(name) BLK_MIN(name) DOT_ROW(name, block_##name, block_q8_K, QK_K) TDOT(name)
KQ_MIN(q2_K)
KQ_NOMIN(q3_K)
KQ_MIN(q4_K)
KQ_MIN(q5_K)
KQ_NOMIN(q6_K)
KQ_NOMIN(iq2_xxs)
KQ_NOMIN(iq2_xs)
KQ_NOMIN(iq2_s)
KQ_NOMIN(iq3_xxs)
KQ_NOMIN(iq3_s)
KQ_NOMIN(iq1_s)
KQ_NOMIN(iq1_m)
KQ_NOMIN(iq4_xs)

void st_cpu_kernels_init_portable(st_cpu_kernels *k) {
    memset(k, 0, sizeof *k);
    k->quant_q8_0 = quant_q8_0;
    k->quant_q8_1 = quant_q8_1;
    k->quant_q8_K = quant_q8_K;
    k->dot[ST_TYPE_F32] = dot_f32;
    k->dot[ST_TYPE_F16] = dot_f16;
    k->dot[ST_TYPE_BF16] = dot_bf16;
    k->dot[ST_TYPE_Q4_0] = dot_q4_0;
    k->dot[ST_TYPE_Q4_1] = dot_q4_1;
    k->dot[ST_TYPE_Q5_0] = dot_q5_0;
    k->dot[ST_TYPE_Q5_1] = dot_q5_1;
    k->dot[ST_TYPE_Q8_0] = dot_q8_0;
    k->dot[ST_TYPE_IQ4_NL] = dot_iq4_nl;
    k->dot[ST_TYPE_MXFP4] = dot_mxfp4;
    k->dot[ST_TYPE_Q2_K] = dot_q2_K;
    k->dot[ST_TYPE_Q3_K] = dot_q3_K;
    k->dot[ST_TYPE_Q4_K] = dot_q4_K;
    k->dot[ST_TYPE_Q5_K] = dot_q5_K;
    k->dot[ST_TYPE_Q6_K] = dot_q6_K;
    k->dot[ST_TYPE_IQ2_XXS] = dot_iq2_xxs;
    k->dot[ST_TYPE_IQ2_XS] = dot_iq2_xs;
    k->dot[ST_TYPE_IQ2_S] = dot_iq2_s;
    k->dot[ST_TYPE_IQ3_XXS] = dot_iq3_xxs;
    k->dot[ST_TYPE_IQ3_S] = dot_iq3_s;
    k->dot[ST_TYPE_IQ1_S] = dot_iq1_s;
    k->dot[ST_TYPE_IQ1_M] = dot_iq1_m;
    k->dot[ST_TYPE_IQ4_XS] = dot_iq4_xs;
    k->tdot[ST_TYPE_Q2_K] = tdot_q2_K;
    k->tdot[ST_TYPE_Q3_K] = tdot_q3_K;
    k->tdot[ST_TYPE_Q4_K] = tdot_q4_K;
    k->tdot[ST_TYPE_Q5_K] = tdot_q5_K;
    k->tdot[ST_TYPE_Q6_K] = tdot_q6_K;
    k->tdot[ST_TYPE_IQ2_XXS] = tdot_iq2_xxs;
    k->tdot[ST_TYPE_IQ2_XS] = tdot_iq2_xs;
    k->tdot[ST_TYPE_IQ2_S] = tdot_iq2_s;
    k->tdot[ST_TYPE_IQ3_XXS] = tdot_iq3_xxs;
    k->tdot[ST_TYPE_IQ3_S] = tdot_iq3_s;
    k->tdot[ST_TYPE_IQ1_S] = tdot_iq1_s;
    k->tdot[ST_TYPE_IQ1_M] = tdot_iq1_m;
    k->tdot[ST_TYPE_IQ4_XS] = tdot_iq4_xs;
}
