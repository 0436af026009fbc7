// Reference quantization from float rows (round to nearest, no importance weights).
//
// These follow the semantics of GGML's quantize_row_*_ref functions (same scale choice, same rounding rules, same
// scale searches for the K-quants and IQ4), so the bytes match llama.cpp's reference on typical data; the test
// tests/quant/test_quant_ref.py compares them. Deliberate differences are noted where they occur.
// Everything works on stack buffers of at most one super-block: no allocation, O(n) per row.
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "quant/blocks.h"
#include "quant/iq_tables.h"
#include "quant/quant.h"
#include "quant/quant_internal.h"
#include "util/err.h"

#define EPS_GROUP_MAX 1e-15f  // below this |max| a group counts as all-zero (GGML's GROUP_MAX_EPS)

static inline uint16_t h16(float f) { return st_f32_to_f16(f); }
static inline float fh16(uint16_t h) { return st_f16_to_f32(h); }
static inline int imin(int a, int b) { return a < b ? a : b; }
static inline int imax(int a, int b) { return a > b ? a : b; }
static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

// Largest-magnitude element, returned with its sign (the first one on ties).
static float signed_absmax(const float *x, int n, float *amax_out) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > amax) {
            amax = a;
            max = x[i];
        }
    }
    if (amax_out) *amax_out = amax;
    return max;
}

// ---------------------------------------------------------------------------------------------------------------
// 32-element legacy formats.

// Stores the 5-bit codes of elements j (a) and j + 16 (b): low nibbles into qs[j], bit 4 into bits j, j + 16 of qh.
static inline void put_q5(uint8_t *qs, uint32_t *qh, int j, int a, int b) {
    qs[j] = (uint8_t)((a & 15) | ((b & 15) << 4));
    *qh |= (uint32_t)((a >> 4) & 1) << j;
    *qh |= (uint32_t)((b >> 4) & 1) << (j + 16);
}

// The Q8_0 / Q8_1 codes of a 32-element block: round(x / d), d = amax / 127; returns d.
static float q8_codes(const float *x, int8_t *qs) {
    float amax;
    signed_absmax(x, 32, &amax);
    const float d = amax / 127, id = d != 0 ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) qs[j] = (int8_t)roundf(x[j] * id);
    return d;
}

// Q4_0 / Q5_0: the signed absmax maps to the most negative level (-8 / -16), so it is represented exactly.
// Truncation of (v + half-offset) is GGML's rounding rule (rounds half up for v >= -offset).

// The block's scale d = signed absmax / lowest (lowest = -8 or -16), stored as f16 at yd; returns 1/d (0 for d = 0).
static float put_sym_scale(const float *x, float lowest, uint8_t *yd) {
    const float max = signed_absmax(x, 32, NULL);
    const float d = max / lowest, id = d != 0 ? 1.0f / d : 0.0f;
    st_st16(yd, h16(d));
    return id;
}

static void q_q4_0(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32, y += sizeof(block_q4_0)) {
        const float id = put_sym_scale(x, -8, y + offsetof(block_q4_0, d));
        uint8_t *qs = y + offsetof(block_q4_0, qs);
        for (int j = 0; j < 16; j++) {
            int a = imin(15, (int8_t)(x[j] * id + 8.5f));
            int b = imin(15, (int8_t)(x[j + 16] * id + 8.5f));
            qs[j] = (uint8_t)(a | (b << 4));
        }
    }
}

static void q_q5_0(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32, y += sizeof(block_q5_0)) {
        const float id = put_sym_scale(x, -16, y + offsetof(block_q5_0, d));
        uint8_t *qs = y + offsetof(block_q5_0, qs);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++)
            put_q5(qs, &qh, j, imin(31, (int8_t)(x[j] * id + 16.5f)), imin(31, (int8_t)(x[j + 16] * id + 16.5f)));
        st_st32(y + offsetof(block_q5_0, qh), qh);
    }
}

// Q4_1 / Q5_1: min/max affine mapping onto [0, 2^b - 1].

// The block's scale d = (max - min) / top (top = 2^b - 1) at yd and min m at ym, both f16; returns 1/d (0 for
// d = 0) and the min in *mn.
static float put_affine_scale(const float *x, float top, uint8_t *yd, uint8_t *ym, float *mn_out) {
    float mn = FLT_MAX, mx = -FLT_MAX;
    for (int j = 0; j < 32; j++) {
        if (x[j] < mn) mn = x[j];
        if (x[j] > mx) mx = x[j];
    }
    const float d = (mx - mn) / top, id = d != 0 ? 1.0f / d : 0.0f;
    st_st16(yd, h16(d));
    st_st16(ym, h16(mn));
    *mn_out = mn;
    return id;
}

static void q_q4_1(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32, y += sizeof(block_q4_1)) {
        float mn;
        const float id = put_affine_scale(x, 15, y + offsetof(block_q4_1, d), y + offsetof(block_q4_1, m), &mn);
        uint8_t *qs = y + offsetof(block_q4_1, qs);
        for (int j = 0; j < 16; j++) {
            int a = imin(15, (int8_t)((x[j] - mn) * id + 0.5f));
            int b = imin(15, (int8_t)((x[j + 16] - mn) * id + 0.5f));
            qs[j] = (uint8_t)(a | (b << 4));
        }
    }
}

static void q_q5_1(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32, y += sizeof(block_q5_1)) {
        float mn;
        const float id = put_affine_scale(x, 31, y + offsetof(block_q5_1, d), y + offsetof(block_q5_1, m), &mn);
        uint8_t *qs = y + offsetof(block_q5_1, qs);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            // GGML casts straight to uint8 here; clamp to 31 too so a rounding overshoot cannot spill into bit 5.
            put_q5(qs, &qh, j, imin(31, (int)(uint8_t)((x[j] - mn) * id + 0.5f)),
                   imin(31, (int)(uint8_t)((x[j + 16] - mn) * id + 0.5f)));
        }
        st_st32(y + offsetof(block_q5_1, qh), qh);
    }
}

// Q8_0 / Q8_1: symmetric absmax / 127, round half away from zero (roundf, as GGML and gguf-py).
static void q_q8_0(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32, y += sizeof(block_q8_0)) {
        const float d = q8_codes(x, (int8_t *)(y + offsetof(block_q8_0, qs)));
        st_st16(y + offsetof(block_q8_0, d), h16(d));
    }
}

static void q_q8_1(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32, y += sizeof(block_q8_1)) {
        const int8_t *qs = (const int8_t *)(y + offsetof(block_q8_1, qs));
        const float d = q8_codes(x, (int8_t *)(y + offsetof(block_q8_1, qs)));
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += qs[j];
        st_st16(y + offsetof(block_q8_1, d), h16(d));
        st_st16(y + offsetof(block_q8_1, s), h16((float)sum * d));
    }
}

// MXFP4: shared exponent e = floor(log2(amax)) - 2 (+127 bias) so amax lands in the top E2M1 binade (4..6 after the
// doubled-kvalue convention), then each element takes the nearest of the 16 codes (first one on ties).
// GGML computes floor(log2f(amax)); we take the exponent from frexpf, which is exact, whereas log2f can round up
// for amax a hair below a power of two (then GGML picks the next exponent; both are valid encodings).
static void q_mxfp4(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32, y += sizeof(block_mxfp4)) {
        float amax;
        signed_absmax(x, 32, &amax);
        int e = 0;
        if (amax > 0) {
            int ex;
            frexpf(amax, &ex);         // amax = m * 2^ex, m in [0.5, 1): floor(log2 amax) = ex - 1
            e = clampi(ex - 1 - 2 + 127, 0, 255);
        }
        y[offsetof(block_mxfp4, e)] = (uint8_t)e;
        uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
        float d;
        memcpy(&d, &bits, 4);
        uint8_t *qs = y + offsetof(block_mxfp4, qs);
        for (int j = 0; j < 16; j++) {
            int q[2];
            for (int h = 0; h < 2; h++) {
                const float v = x[j + 16 * h];
                int best = 0;
                float best_err = fabsf((float)st_kvalues_mxfp4[0] * d - v);
                for (int k = 1; k < 16; k++) {
                    float err = fabsf((float)st_kvalues_mxfp4[k] * d - v);
                    if (err < best_err) {
                        best_err = err;
                        best = k;
                    }
                }
                q[h] = best;
            }
            qs[j] = (uint8_t)(q[0] | (q[1] << 4));
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// K-quants.

// Weighted fit of x[i] ~ scale * L[i] - mn with integer L in [0, nmax] and mn >= 0 (GGML's make_qkx2_quants
// semantics): start from the min/max mapping, then try nstep+1 inverse scales (nmax + rmin + rdelta * k) / range,
// solving the 2x2 least-squares system for (scale, min) at each and keeping the lowest weighted error
// (absolute error if use_mad). Returns the scale, stores mn (>= 0) and L.
static float fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *mn_out, float rmin,
                           float rdelta, int nstep, bool use_mad) {
    float lo = x[0], hi = x[0], sw = w[0], swx = w[0] * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
        sw += w[i];
        swx += w[i] * x[i];
    }
    if (lo > 0) lo = 0;  // the offset only ever moves values down: a positive min is pinned at zero
    if (hi == lo) {
        memset(L, 0, (size_t)n);
        *mn_out = -lo;
        return 0.f;
    }
    float iscale = nmax / (hi - lo), scale = 1 / iscale, best_err = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(st_nearest_int(iscale * (x[i] - lo)), 0, nmax);
        float diff = scale * L[i] + lo - x[i];
        best_err += w[i] * (use_mad ? fabsf(diff) : diff * diff);
    }
    uint8_t Lt[32];
    for (int step = 0; step <= nstep; step++) {
        iscale = (rmin + rdelta * step + nmax) / (hi - lo);
        float sl = 0, sl2 = 0, sxl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(st_nearest_int(iscale * (x[i] - lo)), 0, nmax);
            Lt[i] = (uint8_t)l;
            sl += w[i] * l;
            sl2 += w[i] * l * l;
            sxl += w[i] * l * x[i];
        }
        float det = sw * sl2 - sl * sl;
        if (!(det > 0)) continue;  // also skips NaN, as GGML's `if (D > 0)`
        float s = (sw * sxl - swx * sl) / det;
        float m = (sl2 * swx - sl * sxl) / det;
        if (m > 0) {  // offset must not be positive: refit the scale alone through the origin
            m = 0;
            s = sxl / sl2;
        }
        float err = 0;
        for (int i = 0; i < n; i++) {
            float diff = s * Lt[i] + m - x[i];
            err += w[i] * (use_mad ? fabsf(diff) : diff * diff);
        }
        if (err < best_err) {
            memcpy(L, Lt, (size_t)n);
            best_err = err;
            scale = s;
            lo = m;
        }
    }
    *mn_out = -lo;
    return scale;
}

static void q_q2_K(const float *x, uint8_t *y, int64_t nb) {
    uint8_t L[QK_K];
    float w[16], scales[16], mins[16];
    for (int64_t i = 0; i < nb; i++, x += QK_K, y += sizeof(block_q2_K)) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
            scales[j] = fit_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        uint8_t *sc = y + offsetof(block_q2_K, scales);
        // 4-bit sub-block scales and mins relative to the largest (which maps to 15).
        if (max_scale > 0) {
            const float is = 15.f / max_scale;
            for (int j = 0; j < 16; j++) sc[j] = (uint8_t)st_nearest_int(is * scales[j]);
            st_st16(y + offsetof(block_q2_K, d), h16(max_scale / 15.f));
        } else {
            memset(sc, 0, 16);
            st_st16(y + offsetof(block_q2_K, d), h16(0.f));
        }
        if (max_min > 0) {
            const float im = 15.f / max_min;
            for (int j = 0; j < 16; j++) sc[j] |= (uint8_t)(st_nearest_int(im * mins[j]) << 4);
            st_st16(y + offsetof(block_q2_K, dmin), h16(max_min / 15.f));
        } else {
            st_st16(y + offsetof(block_q2_K, dmin), h16(0.f));
        }
        // Requantize against the scales actually stored (f16 super-scales times 4-bit sub-scales).
        const float dd = fh16(st_ld16(y + offsetof(block_q2_K, d)));
        const float dm = fh16(st_ld16(y + offsetof(block_q2_K, dmin)));
        for (int j = 0; j < 16; j++) {
            const float d = dd * (sc[j] & 15);
            if (d == 0) continue;
            const float m = dm * (sc[j] >> 4);
            for (int l = 0; l < 16; l++) L[16 * j + l] = (uint8_t)clampi(st_nearest_int((x[16 * j + l] + m) / d), 0, 3);
        }
        uint8_t *qs = y + offsetof(block_q2_K, qs);
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const uint8_t *Lh = L + 128 * h + l;
                qs[32 * h + l] = (uint8_t)(Lh[0] | (Lh[32] << 2) | (Lh[64] << 4) | (Lh[96] << 6));
            }
    }
}

// Symmetric 3-bit fit for Q3_K (GGML's make_q3_quants with rmse refinement): start from the absmax scale, then
// coordinate-descent on each L[i] to maximise (sum w x L)^2 / sum w L^2 with w = x^2, up to 5 sweeps.
// L is returned in [-nmax, nmax-1] + nmax.
static float fit_q3(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    const float max = signed_absmax(x, n, &amax);
    if (amax < EPS_GROUP_MAX) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    const float iscale = -nmax / max;
    float slx = 0, sl2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(st_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        slx += w * x[i] * l;
        sl2 += w * l * l;
    }
    for (int sweep = 0; sweep < 5; sweep++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx_o = slx - w * x[i] * L[i];  // sums without element i
            if (slx_o <= 0) continue;
            float sl2_o = sl2 - w * L[i] * L[i];
            int nl = clampi(st_nearest_int(x[i] * sl2_o / slx_o), -nmax, nmax - 1);
            if (nl == L[i]) continue;
            float slx_n = slx_o + w * x[i] * nl, sl2_n = sl2_o + w * nl * nl;
            if (sl2_n > 0 && slx_n * slx_n * sl2 > slx * slx * sl2_n) {
                L[i] = (int8_t)nl;
                slx = slx_n;
                sl2 = sl2_n;
                changed++;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return sl2 > 0.0f ? slx / sl2 : 0.0f;
}

static void q_q3_K(const float *x, uint8_t *y, int64_t nb) {
    int8_t L[QK_K];
    float scales[16];
    for (int64_t i = 0; i < nb; i++, x += QK_K, y += sizeof(block_q3_K)) {
        for (int j = 0; j < 16; j++) scales[j] = fit_q3(16, 4, x + 16 * j, L + 16 * j);
        const float max_scale = signed_absmax(scales, 16, NULL);
        uint8_t *sc = y + offsetof(block_q3_K, scales);
        memset(sc, 0, 12);
        if (max_scale != 0) {
            // 6-bit signed sub-block scales; the largest maps to -32 (the most negative level).
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; j++) {
                int l = clampi(st_nearest_int(iscale * scales[j]), -32, 31) + 32;
                if (j < 8)
                    sc[j] = (uint8_t)(l & 15);
                else
                    sc[j - 8] |= (uint8_t)((l & 15) << 4);
                sc[8 + j % 4] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            st_st16(y + offsetof(block_q3_K, d), h16(1 / iscale));
        } else {
            st_st16(y + offsetof(block_q3_K, d), h16(0.f));
        }
        const float dd = fh16(st_ld16(y + offsetof(block_q3_K, d)));
        for (int j = 0; j < 16; j++) {
            int s6 = (j < 8 ? (sc[j] & 15) : (sc[j - 8] >> 4)) | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
            const float d = dd * (float)(s6 - 32);
            if (d == 0) continue;
            for (int l = 0; l < 16; l++) L[16 * j + l] = (int8_t)(clampi(st_nearest_int(x[16 * j + l] / d), -4, 3) + 4);
        }
        uint8_t *hm = y + offsetof(block_q3_K, hmask);
        memset(hm, 0, 32);
        for (int j = 0; j < QK_K; j++)
            if (L[j] > 3) {
                hm[j % 32] |= (uint8_t)(1 << (j / 32));
                L[j] = (int8_t)(L[j] - 4);
            }
        uint8_t *qs = y + offsetof(block_q3_K, qs);
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const int8_t *Lh = L + 128 * h + l;
                qs[32 * h + l] = (uint8_t)(Lh[0] | (Lh[32] << 2) | (Lh[64] << 4) | (Lh[96] << 6));
            }
    }
}

// Packs 8 six-bit scales and mins into Q4_K/Q5_K's 12 bytes (layout in blocks.h).
static void pack_k4_scales(uint8_t *q, const uint8_t *ls, const uint8_t *lm) {
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            q[j] = ls[j];
            q[j + 4] = lm[j];
        } else {
            q[j + 4] = (uint8_t)((ls[j] & 15) | ((lm[j] & 15) << 4));
            q[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            q[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

static void unpack_k4(const uint8_t *q, int j, int *sc, int *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Shared by Q4_K (nmax 15) and Q5_K (nmax 31): fits 8 sub-blocks of 32, quantizes their scales/mins to 6 bits
// against the largest, then requantizes L against the stored scales. Weights are rms + |x| (GGML's choice).
static void q_k4_common(const float *x, uint8_t *L, uint8_t *dfield, uint8_t *dminfield, uint8_t *scales12, int nmax,
                        float rmin, int nstep) {
    float w[32], scales[8], mins[8];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xb = x + 32 * j;
        float sx2 = 0;
        for (int l = 0; l < 32; l++) sx2 += xb[l] * xb[l];
        const float av = sqrtf(sx2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av + fabsf(xb[l]);
        scales[j] = fit_scale_min(32, nmax, xb, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float is = max_scale > 0 ? 63.f / max_scale : 0.f, im = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        // GGML stores the rounded value in a uint8 before clamping to 63; values are non-negative here.
        ls[j] = (uint8_t)imin(63, (uint8_t)st_nearest_int(is * scales[j]));
        lm[j] = (uint8_t)imin(63, (uint8_t)st_nearest_int(im * mins[j]));
    }
    memset(scales12, 0, 12);
    pack_k4_scales(scales12, ls, lm);
    st_st16(dfield, h16(max_scale / 63.f));
    st_st16(dminfield, h16(max_min / 63.f));
    const float dd = fh16(st_ld16(dfield)), dm = fh16(st_ld16(dminfield));
    for (int j = 0; j < 8; j++) {
        int sc, mn;
        unpack_k4(scales12, j, &sc, &mn);
        const float d = dd * sc;
        if (d == 0) continue;
        const float m = dm * mn;
        for (int l = 0; l < 32; l++) L[32 * j + l] = (uint8_t)clampi(st_nearest_int((x[32 * j + l] + m) / d), 0, nmax);
    }
}

static void q_q4_K(const float *x, uint8_t *y, int64_t nb) {
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; i++, x += QK_K, y += sizeof(block_q4_K)) {
        q_k4_common(x, L, y + offsetof(block_q4_K, d), y + offsetof(block_q4_K, dmin), y + offsetof(block_q4_K, scales),
                    15, -1.f, 20);
        uint8_t *qs = y + offsetof(block_q4_K, qs);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

static void q_q5_K(const float *x, uint8_t *y, int64_t nb) {
    uint8_t L[QK_K];
    for (int64_t i = 0; i < nb; i++, x += QK_K, y += sizeof(block_q5_K)) {
        q_k4_common(x, L, y + offsetof(block_q5_K, d), y + offsetof(block_q5_K, dmin), y + offsetof(block_q5_K, scales),
                    31, -0.5f, 15);
        uint8_t *qs = y + offsetof(block_q5_K, qs), *qh = y + offsetof(block_q5_K, qh);
        memset(qh, 0, 32);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                int a = L[64 * c + l], b = L[64 * c + 32 + l];
                qh[l] |= (uint8_t)(((a >> 4) << (2 * c)) | ((b >> 4) << (2 * c + 1)));
                qs[32 * c + l] = (uint8_t)((a & 15) | ((b & 15) << 4));
            }
    }
}

// Symmetric fit with search over 18 nearby inverse scales, weights x^2 (GGML's make_qx_quants, rmse_type 1).
// L in [-nmax, nmax-1] + nmax.
static float fit_qx(int n, int nmax, const float *x, int8_t *L) {
    float amax;
    const float max = signed_absmax(x, n, &amax);
    if (amax < EPS_GROUP_MAX) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max, slx = 0, sl2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(st_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        slx += w * x[i] * l;
        sl2 += w * l * l;
    }
    float scale = sl2 != 0 ? slx / sl2 : 0.0f, best = scale * slx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        slx = sl2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(st_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float w = x[i] * x[i];
            slx += w * x[i] * l;
            sl2 += w * l * l;
        }
        if (sl2 > 0 && slx * slx > best * sl2) {
            for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + clampi(st_nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = slx / sl2;
            best = scale * slx;
        }
    }
    return scale;
}

static void q_q6_K(const float *x, uint8_t *y, int64_t nb) {
    int8_t L[QK_K];
    float scales[16];
    for (int64_t i = 0; i < nb; i++, x += QK_K, y += sizeof(block_q6_K)) {
        for (int j = 0; j < 16; j++) scales[j] = fit_qx(16, 32, x + 16 * j, L + 16 * j);
        float max_abs;
        const float max_scale = signed_absmax(scales, 16, &max_abs);
        if (max_abs < EPS_GROUP_MAX) {
            memset(y, 0, sizeof(block_q6_K));
            continue;
        }
        // int8 sub-block scales; the largest maps to -128 (clamped to 127 on the positive side).
        const float iscale = -128.f / max_scale;
        st_st16(y + offsetof(block_q6_K, d), h16(1 / iscale));
        int8_t *sc = (int8_t *)(y + offsetof(block_q6_K, scales));
        for (int j = 0; j < 16; j++) sc[j] = (int8_t)imin(127, st_nearest_int(iscale * scales[j]));
        const float dd = fh16(st_ld16(y + offsetof(block_q6_K, d)));
        for (int j = 0; j < 16; j++) {
            const float d = dd * sc[j];
            if (d == 0) continue;
            for (int l = 0; l < 16; l++) L[16 * j + l] = (int8_t)(clampi(st_nearest_int(x[16 * j + l] / d), -32, 31) + 32);
        }
        uint8_t *ql = y + offsetof(block_q6_K, ql), *qh = y + offsetof(block_q6_K, qh);
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const int8_t *Lh = L + 128 * h + l;
                ql[64 * h + l] = (uint8_t)((Lh[0] & 15) | ((Lh[64] & 15) << 4));
                ql[64 * h + l + 32] = (uint8_t)((Lh[32] & 15) | ((Lh[96] & 15) << 4));
                qh[32 * h + l] = (uint8_t)((Lh[0] >> 4) | ((Lh[32] >> 4) << 2) | ((Lh[64] >> 4) << 4) | ((Lh[96] >> 4) << 6));
            }
    }
}

static void q_q8_K(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK_K, y += sizeof(block_q8_K)) {
        float amax;
        const float max = signed_absmax(x, QK_K, &amax);
        int8_t *qs = (int8_t *)(y + offsetof(block_q8_K, qs));
        uint8_t *bs = y + offsetof(block_q8_K, bsums);
        if (amax == 0) {
            memset(y, 0, sizeof(block_q8_K));
            continue;
        }
        // -127 (not -128) so that negated values stay in range, as GGML does for its SIMD dot products.
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) qs[j] = (int8_t)imin(127, st_nearest_int(iscale * x[j]));
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += qs[16 * g + l];
            st_st16(bs + 2 * g, (uint16_t)(int16_t)s);
        }
        st_stf32(y + offsetof(block_q8_K, d), 1 / iscale);
    }
}

// ---------------------------------------------------------------------------------------------------------------
// IQ4_NL / IQ4_XS.

// Index of the codebook value nearest to v (values sorted ascending; ties go to the upper one, as GGML).
static inline int nearest_iq4(float v) {
    const int8_t *k = st_kvalues_iq4nl;
    if (v <= k[0]) return 0;
    if (v >= k[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (v < k[mid])
            hi = mid;
        else
            lo = mid;
    }
    return v - k[hi - 1] < k[hi] - v ? hi - 1 : hi;
}

// Fits one 32-element block: the codebook's extreme (-127) is mapped onto the signed absmax, L chosen by nearest
// value, then the weighted (x^2) least-squares scale; with ntry > 0 also tries inverse scales
// (-127 + t) / max, t in [-ntry, ntry] (GGML's quantize_row_iq4_nl_impl semantics). Returns the scale.
static float fit_iq4_block(const float *xb, uint8_t *Lb, int ntry) {
    float amax;
    const float max = signed_absmax(xb, 32, &amax);
    if (amax < EPS_GROUP_MAX) {
        memset(Lb, 0, 32);
        return 0;
    }
    const float v0 = st_kvalues_iq4nl[0];
    float d = ntry > 0 ? -max / v0 : max / v0, id = 1 / d;
    float sqx = 0, sq2 = 0;
    for (int j = 0; j < 32; j++) {
        int l = nearest_iq4(id * xb[j]);
        Lb[j] = (uint8_t)l;
        float q = st_kvalues_iq4nl[l], w = xb[j] * xb[j];
        sqx += w * q * xb[j];
        sq2 += w * q * q;
    }
    d = sq2 > 0 ? sqx / sq2 : 0.f;
    float best = d * sqx;
    for (int t = -ntry; t <= ntry; t++) {
        id = (t + v0) / max;
        sqx = sq2 = 0;
        for (int j = 0; j < 32; j++) {
            float q = st_kvalues_iq4nl[nearest_iq4(id * xb[j])], w = xb[j] * xb[j];
            sqx += w * q * xb[j];
            sq2 += w * q * q;
        }
        if (sq2 > 0 && sqx * sqx > best * sq2) {
            d = sqx / sq2;
            best = d * sqx;
        }
    }
    return d;
}

static void q_iq4_nl(const float *x, uint8_t *y, int64_t nb) {
    uint8_t L[32];
    for (int64_t i = 0; i < nb; i++, x += 32, y += sizeof(block_iq4_nl)) {
        // GGML's reference runs with ntry = -1: one least-squares scale, L kept from the absmax mapping.
        const float d = fit_iq4_block(x, L, -1);
        st_st16(y + offsetof(block_iq4_nl, d), h16(d));
        uint8_t *qs = y + offsetof(block_iq4_nl, qs);
        for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
    }
}

static void q_iq4_xs(const float *x, uint8_t *y, int64_t nb) {
    uint8_t L[QK_K];
    float scales[8];
    for (int64_t i = 0; i < nb; i++, x += QK_K, y += sizeof(block_iq4_xs)) {
        float amax_s = 0, max_s = 0;
        for (int ib = 0; ib < 8; ib++) {
            scales[ib] = fit_iq4_block(x + 32 * ib, L + 32 * ib, 7);
            if (fabsf(scales[ib]) > amax_s) {
                amax_s = fabsf(scales[ib]);
                max_s = scales[ib];
            }
        }
        // 6-bit signed sub-block scales relative to d = -max/32; L is requantized with the float (not f16) d, as GGML.
        const float d = -max_s / 32, id = d != 0 ? 1 / d : 0.f;
        st_st16(y + offsetof(block_iq4_xs, d), h16(d));
        uint8_t *sl = y + offsetof(block_iq4_xs, scales_l);
        uint16_t sh = 0;
        memset(sl, 0, 4);
        for (int ib = 0; ib < 8; ib++) {
            int l = clampi(st_nearest_int(id * scales[ib]), -32, 31);
            const float dl = d * l, idl = dl != 0 ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++) L[32 * ib + j] = (uint8_t)nearest_iq4(idl * x[32 * ib + j]);
            l += 32;
            sl[ib / 2] |= (uint8_t)((l & 15) << (4 * (ib % 2)));
            sh |= (uint16_t)((l >> 4) << (2 * ib));
        }
        st_st16(y + offsetof(block_iq4_xs, scales_h), sh);
        uint8_t *qs = y + offsetof(block_iq4_xs, qs);
        for (int ib = 0; ib < 8; ib++)
            for (int j = 0; j < 16; j++) qs[16 * ib + j] = (uint8_t)(L[32 * ib + j] | (L[32 * ib + 16 + j] << 4));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Ternary.

static inline int trit(float v, float id) { return (int)lroundf(v * id) + 1; }  // -1, 0, 1 -> 0, 1, 2

static void q_tq1_0(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK_K, y += sizeof(block_tq1_0)) {
        float amax;
        signed_absmax(x, QK_K, &amax);
        const float d = amax, id = d != 0 ? 1.0f / d : 0.0f;
        st_st16(y + offsetof(block_tq1_0, d), h16(d));
        uint8_t *qs = y + offsetof(block_tq1_0, qs), *qh = y + offsetof(block_tq1_0, qh);
        // A byte holds trits t0..t4 as the base-3 number t0 t1 t2 t3 t4, scaled by 256/243 and rounded up, so that
        // multiplying by 3^k (mod 256) brings trit k to the top (see blocks.h).
        for (int l = 0; l < 32; l++) {
            int q = 0;
            for (int k = 0; k < 5; k++) q = q * 3 + trit(x[32 * k + l], id);
            qs[l] = (uint8_t)((q * 256 + 242) / 243);
        }
        for (int l = 0; l < 16; l++) {
            int q = 0;
            for (int k = 0; k < 5; k++) q = q * 3 + trit(x[160 + 16 * k + l], id);
            qs[32 + l] = (uint8_t)((q * 256 + 242) / 243);
        }
        for (int l = 0; l < 4; l++) {
            int q = 0;
            for (int k = 0; k < 4; k++) q = q * 3 + trit(x[240 + 4 * k + l], id);
            q *= 3;  // 4 trits: the unused fifth is the least significant
            qh[l] = (uint8_t)((q * 256 + 242) / 243);
        }
    }
}

static void q_tq2_0(const float *x, uint8_t *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += QK_K, y += sizeof(block_tq2_0)) {
        float amax;
        signed_absmax(x, QK_K, &amax);
        const float d = amax, id = d != 0 ? 1.0f / d : 0.0f;
        st_st16(y + offsetof(block_tq2_0, d), h16(d));
        uint8_t *qs = y + offsetof(block_tq2_0, qs);
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                int q = 0;
                for (int s = 0; s < 4; s++) q |= (trit(x[128 * h + 32 * s + l], id) & 3) << (2 * s);
                qs[32 * h + l] = (uint8_t)q;
            }
    }
}

// ---------------------------------------------------------------------------------------------------------------

int st_quantize_row(int type, const float *src, void *dst, int64_t n) {
    const st_type_info *ti = st_type_get(type);
    if (!ti) return st_err("quantize: unknown tensor type id %d", type);
    if (!ti->can_quantize) return st_err("quantize: type %s is not supported (dequantize-only)", ti->name);
    if (n < 0 || n % ti->block_size)
        return st_err("quantize %s: row of %lld elements is not a multiple of the block size %d", ti->name,
                      (long long)n, ti->block_size);
    uint8_t *y = (uint8_t *)dst;
    const int64_t nb = n / ti->block_size;
    switch (type) {
    case ST_TYPE_F32: memcpy(dst, src, (size_t)n * 4); break;
    case ST_TYPE_F16:
        for (int64_t i = 0; i < n; i++) st_st16(y + 2 * i, st_f32_to_f16(src[i]));
        break;
    case ST_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) st_st16(y + 2 * i, st_f32_to_bf16(src[i]));
        break;
    case ST_TYPE_Q4_0: q_q4_0(src, y, nb); break;
    case ST_TYPE_Q4_1: q_q4_1(src, y, nb); break;
    case ST_TYPE_Q5_0: q_q5_0(src, y, nb); break;
    case ST_TYPE_Q5_1: q_q5_1(src, y, nb); break;
    case ST_TYPE_Q8_0: q_q8_0(src, y, nb); break;
    case ST_TYPE_Q8_1: q_q8_1(src, y, nb); break;
    case ST_TYPE_Q2_K: q_q2_K(src, y, nb); break;
    case ST_TYPE_Q3_K: q_q3_K(src, y, nb); break;
    case ST_TYPE_Q4_K: q_q4_K(src, y, nb); break;
    case ST_TYPE_Q5_K: q_q5_K(src, y, nb); break;
    case ST_TYPE_Q6_K: q_q6_K(src, y, nb); break;
    case ST_TYPE_Q8_K: q_q8_K(src, y, nb); break;
    case ST_TYPE_IQ4_NL: q_iq4_nl(src, y, nb); break;
    case ST_TYPE_IQ4_XS: q_iq4_xs(src, y, nb); break;
    case ST_TYPE_TQ1_0: q_tq1_0(src, y, nb); break;
    case ST_TYPE_TQ2_0: q_tq2_0(src, y, nb); break;
    case ST_TYPE_MXFP4: q_mxfp4(src, y, nb); break;
    default: return st_err("quantize: type %s is not supported", ti->name);
    }
    return 0;
}
