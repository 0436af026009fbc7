// Portable C dot products (the reference path) and activation quantization.
// Integer products are accumulated exactly in int32 per sub-block and scaled once, like the SIMD kernels, so
// the two paths differ only by float summation order.
#include <math.h>

#include "cpu/dot_impl.h"
#include "quant/blocks.h"
#include "quant/iq_tables.h"

// ---------------------------------------------------------------------------------------------------------------
// Activation quantization (GGML reference formulas; bytes must match st_quantize_row).

static void quant_q8_0(const float *x, void *dst, int64_t n) {
    block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = st_f32_to_f16(d);
        for (int j = 0; j < 32; j++) y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

static void quant_q8_1(const float *x, void *dst, int64_t n) {
    block_q8_1 *y = dst;
    for (int64_t i = 0; i < n / 32; i++, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        for (int j = 0; j < 32; j++) {
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
            sum += y[i].qs[j];
        }
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

static float dot_f32(int64_t n, const void *w, const void *a) {
    const float *x = w, *y = a;
    double s = 0.0;  // portable path favours accuracy; SIMD paths use float lanes
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * y[i];
    return (float)s;
}

static float dot_f16(int64_t n, const void *w, const void *a) {
    const uint16_t *x = w;
    const float *y = a;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)st_cpu_h2f(x[i]) * y[i];
    return (float)s;
}

static float dot_bf16(int64_t n, const void *w, const void *a) {
    const uint16_t *x = w;
    const float *y = a;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)st_cpu_bf2f(x[i]) * y[i];
    return (float)s;
}

// ---------------------------------------------------------------------------------------------------------------
// 32-element blocks with Q8_0 / Q8_1 activations.

static float dot_q4_0(int64_t n, const void *w, const void *a) {
    const block_q4_0 *x = w;
    const block_q8_0 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int sum = 0;
        for (int j = 0; j < 16; j++) {
            sum += ((x[i].qs[j] & 15) - 8) * y[i].qs[j];
            sum += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        }
        s += st_cpu_h2f(x[i].d) * st_cpu_h2f(y[i].d) * (float)sum;
    }
    return s;
}

static float dot_q4_1(int64_t n, const void *w, const void *a) {
    const block_q4_1 *x = w;
    const block_q8_1 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int sum = 0;
        for (int j = 0; j < 16; j++) {
            sum += (x[i].qs[j] & 15) * y[i].qs[j];
            sum += (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        }
        // sum_j (d q_j + m) * a_j = d*da*sum(q*qa) + m * (da*sum(qa)), the latter precomputed as y.s
        s += st_cpu_h2f(x[i].d) * st_cpu_h2f(y[i].d) * (float)sum + st_cpu_h2f(x[i].m) * st_cpu_h2f(y[i].s);
    }
    return s;
}

static float dot_q5_0(int64_t n, const void *w, const void *a) {
    const block_q5_0 *x = w;
    const block_q8_0 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        int sum = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = (x[i].qs[j] & 15) | (((qh >> j) & 1) << 4);
            int q1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            sum += (q0 - 16) * y[i].qs[j] + (q1 - 16) * y[i].qs[j + 16];
        }
        s += st_cpu_h2f(x[i].d) * st_cpu_h2f(y[i].d) * (float)sum;
    }
    return s;
}

static float dot_q5_1(int64_t n, const void *w, const void *a) {
    const block_q5_1 *x = w;
    const block_q8_1 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        int sum = 0;
        for (int j = 0; j < 16; j++) {
            int q0 = (x[i].qs[j] & 15) | (((qh >> j) & 1) << 4);
            int q1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            sum += q0 * y[i].qs[j] + q1 * y[i].qs[j + 16];
        }
        s += st_cpu_h2f(x[i].d) * st_cpu_h2f(y[i].d) * (float)sum + st_cpu_h2f(x[i].m) * st_cpu_h2f(y[i].s);
    }
    return s;
}

static float dot_q8_0(int64_t n, const void *w, const void *a) {
    const block_q8_0 *x = w;
    const block_q8_0 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += x[i].qs[j] * y[i].qs[j];
        s += st_cpu_h2f(x[i].d) * st_cpu_h2f(y[i].d) * (float)sum;
    }
    return s;
}

static float dot_iq4_nl(int64_t n, const void *w, const void *a) {
    const block_iq4_nl *x = w;
    const block_q8_0 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int sum = 0;
        for (int j = 0; j < 16; j++) {
            sum += st_kvalues_iq4nl[x[i].qs[j] & 15] * y[i].qs[j];
            sum += st_kvalues_iq4nl[x[i].qs[j] >> 4] * y[i].qs[j + 16];
        }
        s += st_cpu_h2f(x[i].d) * st_cpu_h2f(y[i].d) * (float)sum;
    }
    return s;
}

static float dot_mxfp4(int64_t n, const void *w, const void *a) {
    const block_mxfp4 *x = w;
    const block_q8_0 *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        int sum = 0;
        for (int j = 0; j < 16; j++) {
            sum += st_kvalues_mxfp4[x[i].qs[j] & 15] * y[i].qs[j];
            sum += st_kvalues_mxfp4[x[i].qs[j] >> 4] * y[i].qs[j + 16];
        }
        s += st_cpu_e8m0_half(x[i].e) * st_cpu_h2f(y[i].d) * (float)sum;
    }
    return s;
}

// ---------------------------------------------------------------------------------------------------------------
// K-quants with Q8_K activations.

static float dot_q2_K(int64_t n, const void *w, const void *a) {
    const block_q2_K *x = w;
    const block_q8_K *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sum_q = 0, sum_m = 0;
        for (int sb = 0; sb < 16; sb++) sum_m += (x[i].scales[sb] >> 4) * y[i].bsums[sb];
        for (int e = 0; e < QK_K; e += 16) {  // one 16-element sub-block
            int h = e / 128, sp = (e % 128) / 32, l0 = e % 32, sb = e / 16, acc = 0;
            for (int l = 0; l < 16; l++) acc += ((x[i].qs[32 * h + l0 + l] >> (2 * sp)) & 3) * y[i].qs[e + l];
            sum_q += (x[i].scales[sb] & 15) * acc;
        }
        s += y[i].d * (st_cpu_h2f(x[i].d) * (float)sum_q - st_cpu_h2f(x[i].dmin) * (float)sum_m);
    }
    return s;
}

static float dot_q3_K(int64_t n, const void *w, const void *a) {
    const block_q3_K *x = w;
    const block_q8_K *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t sc[16];
        st_cpu_q3k_scales(x[i].scales, sc);
        int sum = 0;
        for (int e = 0; e < QK_K; e += 16) {
            int h = e / 128, sp = (e % 128) / 32, l0 = e % 32, acc = 0;
            for (int l = 0; l < 16; l++) {
                int q = (x[i].qs[32 * h + l0 + l] >> (2 * sp)) & 3;
                q -= (x[i].hmask[l0 + l] >> (4 * h + sp)) & 1 ? 0 : 4;
                acc += q * y[i].qs[e + l];
            }
            sum += sc[e / 16] * acc;
        }
        s += y[i].d * st_cpu_h2f(x[i].d) * (float)sum;
    }
    return s;
}

static float dot_q4_K(int64_t n, const void *w, const void *a) {
    const block_q4_K *x = w;
    const block_q8_K *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sum_q = 0, sum_m = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, mn;
            st_cpu_scale_min_k4(j, x[i].scales, &sc, &mn);
            const uint8_t *q = x[i].qs + 32 * (j / 2);
            const int shift = 4 * (j % 2);
            int acc = 0;
            for (int l = 0; l < 32; l++) acc += ((q[l] >> shift) & 15) * y[i].qs[32 * j + l];
            sum_q += sc * acc;
            sum_m += mn * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        s += y[i].d * (st_cpu_h2f(x[i].d) * (float)sum_q - st_cpu_h2f(x[i].dmin) * (float)sum_m);
    }
    return s;
}

static float dot_q5_K(int64_t n, const void *w, const void *a) {
    const block_q5_K *x = w;
    const block_q8_K *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sum_q = 0, sum_m = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, mn;
            st_cpu_scale_min_k4(j, x[i].scales, &sc, &mn);
            const uint8_t *q = x[i].qs + 32 * (j / 2);
            const int shift = 4 * (j % 2);
            int acc = 0;
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> shift) & 15) | (((x[i].qh[l] >> j) & 1) << 4);
                acc += v * y[i].qs[32 * j + l];
            }
            sum_q += sc * acc;
            sum_m += mn * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
        }
        s += y[i].d * (st_cpu_h2f(x[i].d) * (float)sum_q - st_cpu_h2f(x[i].dmin) * (float)sum_m);
    }
    return s;
}

static float dot_q6_K(int64_t n, const void *w, const void *a) {
    const block_q6_K *x = w;
    const block_q8_K *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sum = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const int8_t *q8 = y[i].qs + 128 * h;
            for (int part = 0; part < 4; part++) {  // elements 32*part + l of this half
                for (int g = 0; g < 2; g++) {       // 16-element sub-block within the part
                    int acc = 0;
                    for (int l = 16 * g; l < 16 * g + 16; l++) {
                        int lo = part & 1 ? ql[l + 32] : ql[l];
                        lo = part & 2 ? lo >> 4 : lo & 15;
                        int q = lo | (((qh[l] >> (2 * part)) & 3) << 4);
                        acc += (q - 32) * q8[32 * part + l];
                    }
                    sum += x[i].scales[8 * h + 2 * part + g] * acc;
                }
            }
        }
        s += y[i].d * st_cpu_h2f(x[i].d) * (float)sum;
    }
    return s;
}

// ---------------------------------------------------------------------------------------------------------------
// I-quants with Q8_K activations. Scales of the form (0.5 + s) * k are kept as integers (2s + 1) and the
// constant factor applied once per block.

// sum_j grid[j] * (sign bit j ? -1 : 1) * q8[j] over one group of 8.
static inline int signed_grid8(const uint8_t *grid, uint8_t signs, const int8_t *q8) {
    int acc = 0;
    for (int j = 0; j < 8; j++) acc += (signs >> j & 1 ? -grid[j] : grid[j]) * q8[j];
    return acc;
}

static float dot_iq2_xxs(int64_t n, const void *w, const void *a) {
    const block_iq2_xxs *x = w;
    const block_q8_K *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sum = 0;
        for (int ib = 0; ib < 8; ib++) {
            uint32_t aux[2];
            memcpy(aux, x[i].qs + 4 * ib, 8);
            const uint8_t *idx = (const uint8_t *)&aux[0];
            const int8_t *q8 = y[i].qs + 32 * ib;
            int acc = 0;
            for (int k = 0; k < 4; k++) {
                uint64_t g = st_iq2xxs_grid[idx[k]];
                acc += signed_grid8((const uint8_t *)&g, st_ksigns_iq2xs[(aux[1] >> (7 * k)) & 127], q8 + 8 * k);
            }
            sum += (int)(2 * (aux[1] >> 28) + 1) * acc;
        }
        s += 0.125f * y[i].d * st_cpu_h2f(x[i].d) * (float)sum;  // (0.5 + s) * 0.25 = (2s + 1) / 8
    }
    return s;
}

static float dot_iq2_xs(int64_t n, const void *w, const void *a) {
    const block_iq2_xs *x = w;
    const block_q8_K *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sum = 0;
        for (int ib = 0; ib < 8; ib++) {
            for (int half = 0; half < 2; half++) {
                int acc = 0;
                for (int k = 2 * half; k < 2 * half + 2; k++) {
                    uint16_t q = x[i].qs[4 * ib + k];
                    uint64_t g = st_iq2xs_grid[q & 511];
                    acc += signed_grid8((const uint8_t *)&g, st_ksigns_iq2xs[q >> 9], y[i].qs + 32 * ib + 8 * k);
                }
                sum += (2 * ((x[i].scales[ib] >> (4 * half)) & 15) + 1) * acc;
            }
        }
        s += 0.125f * y[i].d * st_cpu_h2f(x[i].d) * (float)sum;
    }
    return s;
}

static float dot_iq2_s(int64_t n, const void *w, const void *a) {
    const block_iq2_s *x = w;
    const block_q8_K *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sum = 0;
        for (int ib = 0; ib < 8; ib++) {
            for (int half = 0; half < 2; half++) {
                int acc = 0;
                for (int k = 2 * half; k < 2 * half + 2; k++) {
                    int idx = x[i].qs[4 * ib + k] | (((x[i].qh[ib] >> (2 * k)) & 3) << 8);
                    uint64_t g = st_iq2s_grid[idx];
                    acc += signed_grid8((const uint8_t *)&g, x[i].qs[32 + 4 * ib + k], y[i].qs + 32 * ib + 8 * k);
                }
                sum += (2 * ((x[i].scales[ib] >> (4 * half)) & 15) + 1) * acc;
            }
        }
        s += 0.125f * y[i].d * st_cpu_h2f(x[i].d) * (float)sum;
    }
    return s;
}

static float dot_iq3_xxs(int64_t n, const void *w, const void *a) {
    const block_iq3_xxs *x = w;
    const block_q8_K *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sum = 0;
        for (int ib = 0; ib < 8; ib++) {
            uint32_t ss;
            memcpy(&ss, x[i].qs + 64 + 4 * ib, 4);
            int acc = 0;
            for (int k = 0; k < 4; k++) {
                uint32_t g[2] = {st_iq3xxs_grid[x[i].qs[8 * ib + 2 * k]], st_iq3xxs_grid[x[i].qs[8 * ib + 2 * k + 1]]};
                acc += signed_grid8((const uint8_t *)g, st_ksigns_iq2xs[(ss >> (7 * k)) & 127],
                                    y[i].qs + 32 * ib + 8 * k);
            }
            sum += (int)(2 * (ss >> 28) + 1) * acc;
        }
        s += 0.25f * y[i].d * st_cpu_h2f(x[i].d) * (float)sum;  // (0.5 + s) * 0.5 = (2s + 1) / 4
    }
    return s;
}

static float dot_iq3_s(int64_t n, const void *w, const void *a) {
    const block_iq3_s *x = w;
    const block_q8_K *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sum = 0;
        for (int ib = 0; ib < 8; ib++) {
            int acc = 0;
            for (int k = 0; k < 4; k++) {
                int m0 = 2 * k, m1 = 2 * k + 1;
                uint32_t g[2] = {st_iq3s_grid[x[i].qs[8 * ib + m0] | (((x[i].qh[ib] >> m0) & 1) << 8)],
                                 st_iq3s_grid[x[i].qs[8 * ib + m1] | (((x[i].qh[ib] >> m1) & 1) << 8)]};
                acc += signed_grid8((const uint8_t *)g, x[i].signs[4 * ib + k], y[i].qs + 32 * ib + 8 * k);
            }
            sum += (2 * ((x[i].scales[ib / 2] >> (4 * (ib % 2))) & 15) + 1) * acc;
        }
        s += y[i].d * st_cpu_h2f(x[i].d) * (float)sum;
    }
    return s;
}

// IQ1: y = d * (2s + 1) * (grid + delta); delta = +-1/8, so 8 * y / (d (2s+1)) = 8 grid +- 1 stays integer.
static float dot_iq1_s(int64_t n, const void *w, const void *a) {
    const block_iq1_s *x = w;
    const block_q8_K *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const uint16_t qh = x[i].qh[ib];
            int acc = 0;
            for (int k = 0; k < 4; k++) {
                uint64_t g = st_iq1s_grid[x[i].qs[4 * ib + k] | (((qh >> (3 * k)) & 7) << 8)];
                const int8_t *gv = (const int8_t *)&g, *q8 = y[i].qs + 32 * ib + 8 * k;
                for (int j = 0; j < 8; j++) acc += gv[j] * q8[j];
            }
            int asum = y[i].bsums[2 * ib] + y[i].bsums[2 * ib + 1];
            sum += (2 * ((qh >> 12) & 7) + 1) * (8 * acc + (qh & 0x8000 ? -asum : asum));
        }
        s += 0.125f * y[i].d * st_cpu_h2f(x[i].d) * (float)sum;
    }
    return s;
}

static float dot_iq1_m(int64_t n, const void *w, const void *a) {
    const block_iq1_m *x = w;
    const block_q8_K *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint16_t sc[4];
        memcpy(sc, x[i].scales, 8);
        const uint16_t dbits = (sc[0] >> 12) | ((sc[1] >> 8) & 0xf0) | ((sc[2] >> 4) & 0xf00) | (sc[3] & 0xf000);
        int sum = 0;
        for (int ib = 0; ib < 8; ib++) {
            for (int half = 0; half < 2; half++) {
                int acc = 0;
                for (int k = 2 * half; k < 2 * half + 2; k++) {
                    const int nib = (x[i].qh[2 * ib + k / 2] >> (4 * (k % 2))) & 15;
                    uint64_t g = st_iq1s_grid[x[i].qs[4 * ib + k] | ((nib & 7) << 8)];
                    const int8_t *gv = (const int8_t *)&g, *q8 = y[i].qs + 32 * ib + 8 * k;
                    int gs = 0, as = 0;
                    for (int j = 0; j < 8; j++) { gs += gv[j] * q8[j]; as += q8[j]; }
                    acc += 8 * gs + (nib & 8 ? -as : as);
                }
                const int ls = (sc[ib / 2] >> (6 * (ib % 2) + 3 * half)) & 7;
                sum += (2 * ls + 1) * acc;
            }
        }
        s += 0.125f * y[i].d * st_cpu_h2f(dbits) * (float)sum;
    }
    return s;
}

static float dot_iq4_xs(int64_t n, const void *w, const void *a) {
    const block_iq4_xs *x = w;
    const block_q8_K *y = a;
    float s = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sum = 0;
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((x[i].scales_h >> (2 * ib)) & 3) << 4);
            const uint8_t *q = x[i].qs + 16 * ib;
            const int8_t *q8 = y[i].qs + 32 * ib;
            int acc = 0;
            for (int j = 0; j < 16; j++)
                acc += st_kvalues_iq4nl[q[j] & 15] * q8[j] + st_kvalues_iq4nl[q[j] >> 4] * q8[j + 16];
            sum += (ls - 32) * acc;
        }
        s += y[i].d * st_cpu_h2f(x[i].d) * (float)sum;
    }
    return s;
}

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
}
