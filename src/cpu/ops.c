// CPU element-wise and attention operators of the forward pass.
//
// Numerics: llama.cpp is the reference for GGUF semantics and some models (SmolLM2-135M among them) amplify a last-bit
// difference into a different greedy continuation, so these operators reproduce the arithmetic of ggml's CPU backend
// as built for AVX-512 (F32 KV cache, flash attention off) operation for operation. Facts used, read from ggml-cpu
// and llamafile/sgemm.cpp (llama-cpp-python 0.3.36, GCC 12):
//  - ggml_vec_dot_f32: 4 accumulators of 16 lanes over 64-element steps (element i -> accumulator (i/16)%4, lane
//    i%16), one fused multiply-add each; reduced acc0+acc2, acc1+acc3, then their sum, then the 16 lanes by GCC's
//    _mm512_reduce_add_ps tree (upper+lower 8, then 4, then pairs (0,2),(1,3), then the two). Leftover elements
//    (n % 64): groups of 8 multiplied then added in order, the last n % 8 by fused multiply-add.
//  - the K.Q product always takes ggml_vec_dot_f32 (Q is a permuted view, or a single token). The KQV product of a
//    batch of >= 2 tokens takes llamafile's tinyBLAS (one 16-lane accumulator per output over the KV positions, then
//    the same 16-lane tree); a single token takes ggml_vec_dot_f32 over the KV positions.
//  - llama.cpp's KV length is a multiple of 256 with masked positions at -inf, so softmax chunks of 16 run through the
//    vector exp with the masked lanes giving exactly 0, and the KQV sums see zeros there (adding them changes nothing).
//  - soft_max: x*scale (+ mask), max, then per 16-chunk y = ggml_v_expf(x - max) and sum += (double) of the chunk's
//    16-lane tree sum; leftover elements use libm expf with a double sum; then y *= (float)(1.0 / sum).
//  - ggml_v_expf (AVX-512): a 2^n * poly(b) range reduction with fused multiply-adds and the constants below; |n| > 192
//    gives 0 or inf. Emulated exactly per lane with fmaf/ldexpf.
//  - swiglu: per row, 16-chunks y = (g / (1 + v_expf(0 - g))) * u, leftovers g / (1 + expf(-g)) * u.
//  - rms_norm: sum of (double)(x*x) with the product in float, mean = (float)(sum / n), scale = 1.0f / sqrtf(mean+eps),
//    y = x * scale * w.
//  - rope: per position theta_0 = (float)pos, theta_{i+1} = theta_i * powf(base, -2/n_rot), angle = freq_scale *
//    theta_i, cosf/sinf; each pair (x0, x1) (adjacent for normal/GPT-J, n_rot/2 apart for NeoX) becomes
//    y0 = fma(x0, c, -(x1*s)), y1 = fma(x0, s, x1*c) (GCC's contraction of x0*c - x1*s and x0*s + x1*c; checked
//    against llama.cpp's tensors for both modes).
// Every ISA computes the same bits: the AVX-512 lane layout is emulated lane for lane by the AVX2 and portable paths
// (fmaf and ldexpf are exactly rounded everywhere), so only the speed depends on the ISA.
#include "cpu/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/features.h"
#include "quant/quant.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define OPS_X86 1
#include <immintrin.h>
#define TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TARGET_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
#else
#define OPS_X86 0
#endif

// ---- scalar definitions of the reference arithmetic (the portable path, and the spec the SIMD paths follow) ----

// GCC's _mm512_reduce_add_ps: halves, then quarters, then lanes (0,2) and (1,3), then the two.
static inline float hsum16(const float *a) {
    float t8[8], t4[4];
    for (int i = 0; i < 8; i++) t8[i] = a[i] + a[i + 8];
    for (int i = 0; i < 4; i++) t4[i] = t8[i] + t8[i + 4];
    return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

// ggml's AVX-512 vector expf, one lane: x = n*ln2 + b with n = round(x*log2e), exp(b) by a degree-5 polynomial in
// fused multiply-adds, times 2^n (vscalefps, exactly rounded like ldexpf). |n| > 192 saturates to 0 or inf.
static inline float exp_lane(float x) {
    const float r = 0x1.8p23f;
    float z = fmaf(x, 0x1.715476p+0f, r);
    float n = z - r;
    if (isnan(n)) return x;
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    float u = b * b;
    float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                   fmaf(0x1.ffffecp-1f, b, 1.0f));
    return ldexpf(j, (int)n);
}

// ---- kernels, instantiated once per ISA from the same C (the target attribute lets the compiler use FMA and wide
// vectors; the arithmetic per element is the same in every instance) ----

typedef struct ops_kernels {
    float (*dot)(const float *x, const float *y, int64_t n);  // ggml_vec_dot_f32
    // y[i] = exp(x[i] - max) for i < n; elements below n_vec (a multiple of 16, may exceed n: those lanes are 0) go
    // through the vector exp in 16-chunks, the rest through libm expf. Returns the double sum. y may alias x.
    double (*exp_sum)(float *y, const float *x, int64_t n, int64_t n_vec, float max);
    void (*swiglu)(float *y, const float *g, const float *u, int64_t n);  // one row
    void (*axpy)(float *acc, const float *v, float w, int64_t n);         // acc[i] = fma(v[i], w, acc[i])
    void (*reduce16)(float *out, const float *acc, int64_t n);  // out[i] = tree over acc[l][i], l < 16
    void (*reduce64)(float *out, const float *acc, int64_t n);  // vec_dot's 4x16 accumulators, acc[j*16+l][i]
    void (*f16_row)(float *y, const uint16_t *x, int64_t n);    // y[i] = (float)x[i], IEEE half (exact)
} ops_kernels;

#define OPS_GENERIC_KERNELS(SFX, ATTR)                                                                              \
    ATTR static float dot_##SFX(const float *x, const float *y, int64_t n) {                                        \
        float acc[64] = {0};                                                                                         \
        int64_t np = n & ~(int64_t)63;                                                                               \
        for (int64_t i = 0; i < np; i += 64)                                                                         \
            for (int k = 0; k < 64; k++) acc[k] = fmaf(x[i + k], y[i + k], acc[k]);                                 \
        for (int l = 0; l < 16; l++) acc[l] = (acc[l] + acc[32 + l]) + (acc[16 + l] + acc[48 + l]);                  \
        float s = hsum16(acc);                                                                                       \
        int64_t i = np, nv = np + ((n - np) & ~(int64_t)7);                                                          \
        for (; i < nv; i++) s += x[i] * y[i];                                                                        \
        for (; i < n; i++) s = fmaf(x[i], y[i], s);                                                                  \
        return s;                                                                                                    \
    }                                                                                                                \
    ATTR static double exp_sum_##SFX(float *y, const float *x, int64_t n, int64_t n_vec, float max) {               \
        double sum = 0;                                                                                              \
        int64_t i = 0;                                                                                               \
        for (; i < n_vec; i += 16) {                                                                                 \
            float e[16];                                                                                             \
            for (int l = 0; l < 16; l++) e[l] = i + l < n ? exp_lane(x[i + l] - max) : 0.0f;                         \
            for (int l = 0; l < 16 && i + l < n; l++) y[i + l] = e[l];                                               \
            sum += (double)hsum16(e);                                                                                \
        }                                                                                                            \
        for (; i < n; i++) {                                                                                         \
            float v = expf(x[i] - max);                                                                              \
            sum += (double)v;                                                                                        \
            y[i] = v;                                                                                                \
        }                                                                                                            \
        return sum;                                                                                                  \
    }                                                                                                                \
    ATTR static void swiglu_##SFX(float *y, const float *g, const float *u, int64_t n) {                            \
        int64_t nv = n & ~(int64_t)15, i = 0;                                                                        \
        for (; i < nv; i++) y[i] = g[i] / (1.0f + exp_lane(0.0f - g[i])) * u[i];                                     \
        for (; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];                                                \
    }                                                                                                                \
    ATTR static void axpy_##SFX(float *acc, const float *v, float w, int64_t n) {                                   \
        for (int64_t i = 0; i < n; i++) acc[i] = fmaf(v[i], w, acc[i]);                                              \
    }                                                                                                                \
    ATTR static void reduce16_##SFX(float *out, const float *acc, int64_t n) {                                      \
        for (int64_t i = 0; i < n; i++) {                                                                            \
            float a[16];                                                                                             \
            for (int l = 0; l < 16; l++) a[l] = acc[l * n + i];                                                      \
            out[i] = hsum16(a);                                                                                      \
        }                                                                                                            \
    }                                                                                                                \
    ATTR static void reduce64_##SFX(float *out, const float *acc, int64_t n) {                                      \
        for (int64_t i = 0; i < n; i++) {                                                                            \
            float a[16];                                                                                             \
            for (int l = 0; l < 16; l++)                                                                             \
                a[l] = (acc[l * n + i] + acc[(32 + l) * n + i]) + (acc[(16 + l) * n + i] + acc[(48 + l) * n + i]);   \
            out[i] = hsum16(a);                                                                                      \
        }                                                                                                            \
    }

OPS_GENERIC_KERNELS(portable, )
static void f16_row_portable(float *y, const uint16_t *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = st_f16_to_f32(x[i]);
}
static const ops_kernels k_portable = {dot_portable,      exp_sum_portable,  swiglu_portable, axpy_portable,
                                       reduce16_portable, reduce64_portable, f16_row_portable};

#if OPS_X86
OPS_GENERIC_KERNELS(avx2, TARGET_AVX2)
// F16C conversion (exact, so the same values as the portable path); shared by the AVX-512 table.
TARGET_AVX2 static void f16_row_f16c(float *y, const uint16_t *x, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = _cvtsh_ss(x[i]);
}
static const ops_kernels k_avx2 = {dot_avx2,      exp_sum_avx2,  swiglu_avx2, axpy_avx2,
                                   reduce16_avx2, reduce64_avx2, f16_row_f16c};

// AVX-512: the reference layout itself, in intrinsics.
TARGET_AVX512 static inline __m512 exp_v512(__m512 x) {
    const __m512 r = _mm512_set1_ps(0x1.8p23f);
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
    const __m512 n = _mm512_sub_ps(z, r);
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192.0f), _CMP_GT_OQ);
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 p5 = _mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f));
    const __m512 p3 = _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f));
    const __m512 p1 = _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f));
    const __m512 j = _mm512_fmadd_ps(_mm512_fmadd_ps(p5, u, p3), u, p1);
    const __m512 res = _mm512_scalef_ps(j, n);
    if (!big) return res;
    const __mmask16 neg = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
    const __m512 sat = _mm512_mask_blend_ps(neg, _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
    return _mm512_mask_blend_ps(big, res, sat);
}

TARGET_AVX512 static float dot_avx512(const float *x, const float *y, int64_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t np = n & ~(int64_t)63;
    for (int64_t i = 0; i < np; i += 64) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), _mm512_loadu_ps(y + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), _mm512_loadu_ps(y + i + 48), a3);
    }
    a0 = _mm512_add_ps(_mm512_add_ps(a0, a2), _mm512_add_ps(a1, a3));
    float s = _mm512_reduce_add_ps(a0);  // GCC and clang both expand it as the halving tree of hsum16
    int64_t i = np, nv = np + ((n - np) & ~(int64_t)7);
    for (; i < nv; i++) s += x[i] * y[i];
    for (; i < n; i++) s = fmaf(x[i], y[i], s);
    return s;
}

TARGET_AVX512 static double exp_sum_avx512(float *y, const float *x, int64_t n, int64_t n_vec, float max) {
    double sum = 0;
    int64_t i = 0;
    const __m512 vmax = _mm512_set1_ps(max);
    for (; i < n_vec; i += 16) {
        __mmask16 m = i + 16 <= n ? (__mmask16)0xffff : i < n ? (__mmask16)((1u << (n - i)) - 1) : 0;
        // masked-off lanes read -inf: exp gives exactly 0, as llama.cpp's -inf mask does
        __m512 v = exp_v512(_mm512_sub_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), m, x + i), vmax));
        _mm512_mask_storeu_ps(y + i, m, v);
        sum += (double)_mm512_reduce_add_ps(v);
    }
    for (; i < n; i++) {
        float v = expf(x[i] - max);
        sum += (double)v;
        y[i] = v;
    }
    return sum;
}

TARGET_AVX512 static void swiglu_avx512(float *y, const float *g, const float *u, int64_t n) {
    int64_t nv = n & ~(int64_t)15, i = 0;
    const __m512 one = _mm512_set1_ps(1.0f);
    for (; i < nv; i += 16) {
        __m512 gv = _mm512_loadu_ps(g + i);
        __m512 e = exp_v512(_mm512_sub_ps(_mm512_setzero_ps(), gv));
        _mm512_storeu_ps(y + i, _mm512_mul_ps(_mm512_div_ps(gv, _mm512_add_ps(one, e)), _mm512_loadu_ps(u + i)));
    }
    for (; i < n; i++) y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

TARGET_AVX512 static void axpy_avx512(float *acc, const float *v, float w, int64_t n) {
    const __m512 wv = _mm512_set1_ps(w);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(_mm512_loadu_ps(v + i), wv, _mm512_loadu_ps(acc + i)));
    for (; i < n; i++) acc[i] = fmaf(v[i], w, acc[i]);
}

// The 16-lane tree across slots, 16 outputs at a time.
TARGET_AVX512 static inline __m512 tree16_v512(const __m512 *a) {
    __m512 t8[8], t4[4];
    for (int l = 0; l < 8; l++) t8[l] = _mm512_add_ps(a[l], a[l + 8]);
    for (int l = 0; l < 4; l++) t4[l] = _mm512_add_ps(t8[l], t8[l + 4]);
    return _mm512_add_ps(_mm512_add_ps(t4[0], t4[2]), _mm512_add_ps(t4[1], t4[3]));
}

TARGET_AVX512 static void reduce16_avx512(float *out, const float *acc, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 a[16];
        for (int l = 0; l < 16; l++) a[l] = _mm512_loadu_ps(acc + l * n + i);
        _mm512_storeu_ps(out + i, tree16_v512(a));
    }
    for (; i < n; i++) {
        float a[16];
        for (int l = 0; l < 16; l++) a[l] = acc[l * n + i];
        out[i] = hsum16(a);
    }
}

TARGET_AVX512 static void reduce64_avx512(float *out, const float *acc, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 a[16];
        for (int l = 0; l < 16; l++) {
            __m512 x0 = _mm512_add_ps(_mm512_loadu_ps(acc + l * n + i), _mm512_loadu_ps(acc + (32 + l) * n + i));
            __m512 x1 = _mm512_add_ps(_mm512_loadu_ps(acc + (16 + l) * n + i), _mm512_loadu_ps(acc + (48 + l) * n + i));
            a[l] = _mm512_add_ps(x0, x1);
        }
        _mm512_storeu_ps(out + i, tree16_v512(a));
    }
    for (; i < n; i++) {
        float a[16];
        for (int l = 0; l < 16; l++)
            a[l] = (acc[l * n + i] + acc[(32 + l) * n + i]) + (acc[(16 + l) * n + i] + acc[(48 + l) * n + i]);
        out[i] = hsum16(a);
    }
}

static const ops_kernels k_avx512 = {dot_avx512,      exp_sum_avx512,  swiglu_avx512, axpy_avx512,
                                     reduce16_avx512, reduce64_avx512, f16_row_f16c};
#endif

static const ops_kernels *kernels(void) {
#if OPS_X86
    switch (st_cpu_isa_active()) {
    case ST_CPU_ISA_AVX512: return &k_avx512;
    case ST_CPU_ISA_AVX2: return &k_avx2;
    default: break;
    }
#endif
    return &k_portable;
}

// ---- operators ----

void st_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        float sq = x[i] * x[i];  // rounded to float before the double sum, as ggml does
        sum += (double)sq;
    }
    float mean = (float)(sum / (double)n);
    float scale = 1.0f / sqrtf(mean + eps);
    if (w)
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
    else
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
}

void st_rope_cache(float *cs, int64_t n_rot, int64_t pos, float freq_base, float freq_scale) {
    float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    float theta = (float)pos;
    for (int64_t i = 0; i < n_rot / 2; i++) {
        float a = freq_scale * theta;
        cs[2 * i] = cosf(a);
        cs[2 * i + 1] = sinf(a);
        theta *= theta_scale;
    }
}

void st_rope_apply(float *x, const float *cs, int64_t n_rot, int neox) {
    int64_t half = n_rot / 2;
    for (int64_t i = 0; i < half; i++) {
        float c = cs[2 * i], s = cs[2 * i + 1];
        if (neox) {
            float x0 = x[i], x1 = x[i + half];
            x[i] = fmaf(x0, c, -(x1 * s));
            x[i + half] = fmaf(x0, s, x1 * c);
        } else {
            float x0 = x[2 * i], x1 = x[2 * i + 1];
            x[2 * i] = fmaf(x0, c, -(x1 * s));
            x[2 * i + 1] = fmaf(x0, s, x1 * c);
        }
    }
}

void st_rope(float *x, int64_t head_dim, int64_t n_rot, int64_t pos, float freq_base, float freq_scale, int neox) {
    (void)head_dim;
    float cs_small[256];
    float *cs = n_rot <= 256 ? cs_small : malloc(sizeof(float) * (size_t)n_rot);
    if (!cs) return;
    st_rope_cache(cs, n_rot, pos, freq_base, freq_scale);
    st_rope_apply(x, cs, n_rot, neox);
    if (cs != cs_small) free(cs);
}

void st_swiglu(float *y, const float *g, const float *u, int64_t n) { kernels()->swiglu(y, g, u, n); }

void st_softmax(float *x, int64_t n) {
    if (n <= 0) return;
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > m) m = x[i];
    double sum = kernels()->exp_sum(x, x, n, n & ~(int64_t)15, m);
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void st_route_topk(const float *prob, int64_t E, int64_t K, int norm, int32_t *sel, float *wt) {
    for (int64_t k = 0; k < K; k++) {  // K is small (8): selection by repeated max, ties to the lower id
        int32_t best = -1;
        for (int32_t e = 0; e < E; e++) {
            int taken = 0;
            for (int64_t j = 0; j < k; j++) taken |= sel[j] == e;
            if (!taken && (best < 0 || prob[e] > prob[best])) best = e;
        }
        sel[k] = best;
        wt[k] = prob[best];
    }
    if (norm) {
        double sum = 0;
        for (int64_t k = 0; k < K; k++) sum += (double)wt[k];
        float fs = (float)sum;
        if (!(fs >= 6.103515625e-5f)) fs = 6.103515625e-5f;
        for (int64_t k = 0; k < K; k++) wt[k] /= fs;
    }
}

typedef struct {
    float *out;
    const float *q;
    const void *k, *v;
    int kv_f16;
    int gemm_order;      // 1: tinyBLAS order for the KQV product (batches of >= 2 tokens); 0: ggml_vec_dot_f32's
    int64_t pos0, n_head, n_head_kv, head_dim;
    float scale;
    const ops_kernels *kr;
    float *scratch;      // [n_threads][scratch_stride]: scores [n_ctx rounded up to 16], acc [64][head_dim],
                         // row [head_dim] (an F16 row widened to float)
    int64_t scratch_stride, scores_len;
} attn_job;

static void attn_task(void *ud, int64_t task, int thread) {
    attn_job *j = ud;
    const ops_kernels *kr = j->kr;
    int64_t t = task / j->n_head, h = task % j->n_head;
    int64_t hd = j->head_dim, kvh = h / (j->n_head / j->n_head_kv);
    int64_t kv_stride = j->n_head_kv * hd;
    int64_t n_pos = j->pos0 + t + 1;
    const float *q = j->q + (t * j->n_head + h) * hd;
    float *scores = j->scratch + (int64_t)thread * j->scratch_stride;
    float *acc = scores + j->scores_len;
    float *row = acc + 64 * hd;

    // scores = (q . k_p) * scale, then ggml's softmax over the positions this token sees
    float m = -INFINITY;
    for (int64_t p = 0; p < n_pos; p++) {
        int64_t base = p * kv_stride + kvh * hd;
        const float *kr_row;
        if (j->kv_f16) {
            const uint16_t *src = (const uint16_t *)j->k + base;
            kr->f16_row(row, src, hd);
            kr_row = row;
        } else {
            kr_row = (const float *)j->k + base;
        }
        float s = kr->dot(kr_row, q, hd) * j->scale;
        scores[p] = s;
        if (s > m) m = s;
    }
    double sum = kr->exp_sum(scores, scores, n_pos, (n_pos + 15) & ~(int64_t)15, m);
    float inv = (float)(1.0 / sum);
    for (int64_t p = 0; p < n_pos; p++) scores[p] *= inv;

    // out[i] = sum_p prob[p] * v_p[i], accumulated per output in the reference's lanes: position p feeds slot
    // p % 16 (tinyBLAS) or p % 64 (vec_dot's 4 x 16), then the slots reduce by the reference's tree.
    int64_t slots = j->gemm_order ? 16 : 64;
    memset(acc, 0, sizeof(float) * (size_t)(slots * hd));
    for (int64_t p = 0; p < n_pos; p++) {
        int64_t base = p * kv_stride + kvh * hd;
        const float *vr;
        if (j->kv_f16) {
            const uint16_t *src = (const uint16_t *)j->v + base;
            kr->f16_row(row, src, hd);
            vr = row;
        } else {
            vr = (const float *)j->v + base;
        }
        kr->axpy(acc + (p & (slots - 1)) * hd, vr, scores[p], hd);
    }
    float *out = j->out + (t * j->n_head + h) * hd;
    if (j->gemm_order)
        kr->reduce16(out, acc, hd);
    else
        kr->reduce64(out, acc, hd);
}

// Prompt batches: one task per (token, KV head) for the G query heads sharing it, so each K/V row is widened and
// fetched once for all of them. Per (token, head) the arithmetic is attn_task's, in the same order.
static void attn_group_task(void *ud, int64_t task, int thread) {
    attn_job *j = ud;
    const ops_kernels *kr = j->kr;
    const int64_t G = j->n_head / j->n_head_kv, t = task / j->n_head_kv, kvh = task % j->n_head_kv;
    const int64_t hd = j->head_dim, kv_stride = j->n_head_kv * hd, n_pos = j->pos0 + t + 1, slots = 16;
    float *scores = j->scratch + (int64_t)thread * j->scratch_stride;  // [G][scores_len]
    float *acc = scores + G * j->scores_len;                             // [G][slots][hd]
    float *row = acc + G * slots * hd;                                   // [hd]
    const float *q = j->q + (t * j->n_head + kvh * G) * hd;              // [G][hd]
    float m[64];
    for (int64_t g = 0; g < G; g++) m[g] = -INFINITY;
    for (int64_t p = 0; p < n_pos; p++) {
        const int64_t base = p * kv_stride + kvh * hd;
        const float *kr_row = (const float *)j->k + base;
        if (j->kv_f16) {
            kr->f16_row(row, (const uint16_t *)j->k + base, hd);
            kr_row = row;
        }
        for (int64_t g = 0; g < G; g++) {
            const float sc = kr->dot(kr_row, q + g * hd, hd) * j->scale;
            scores[g * j->scores_len + p] = sc;
            if (sc > m[g]) m[g] = sc;
        }
    }
    for (int64_t g = 0; g < G; g++) {
        float *sg = scores + g * j->scores_len;
        const double sum = kr->exp_sum(sg, sg, n_pos, (n_pos + 15) & ~(int64_t)15, m[g]);
        const float inv = (float)(1.0 / sum);
        for (int64_t p = 0; p < n_pos; p++) sg[p] *= inv;
    }
    memset(acc, 0, sizeof(float) * (size_t)(G * slots * hd));
    for (int64_t p = 0; p < n_pos; p++) {
        const int64_t base = p * kv_stride + kvh * hd;
        const float *vr = (const float *)j->v + base;
        if (j->kv_f16) {
            kr->f16_row(row, (const uint16_t *)j->v + base, hd);
            vr = row;
        }
        for (int64_t g = 0; g < G; g++)
            kr->axpy(acc + (g * slots + (p & (slots - 1))) * hd, vr, scores[g * j->scores_len + p], hd);
    }
    for (int64_t g = 0; g < G; g++) kr->reduce16(j->out + (t * j->n_head + kvh * G + g) * hd, acc + g * slots * hd, hd);
}

void st_attention(st_pool *pool, float *out, const float *q, const void *k, const void *v, int kv_f16, int64_t n_tok,
                  int64_t pos0, int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale) {
    int nt = st_pool_threads(pool);
    attn_job j = {0};
    j.out = out;
    j.q = q;
    j.k = k;
    j.v = v;
    j.kv_f16 = kv_f16;
    // llamafile's sgemm takes the KQV product only for >= 2 tokens and a head size that is a multiple of 4
    j.gemm_order = n_tok >= 2 && head_dim % 4 == 0;
    j.pos0 = pos0;
    j.n_head = n_head;
    j.n_head_kv = n_head_kv;
    j.head_dim = head_dim;
    j.scale = scale;
    j.kr = kernels();
    j.scores_len = (pos0 + n_tok + 15) & ~(int64_t)15;
    // Grouped tasks for prompt batches (tinyBLAS order, 16 slots) when there are enough of them for the threads.
    const int64_t G = n_head_kv > 0 && n_head % n_head_kv == 0 ? n_head / n_head_kv : 0;
    const int grouped = j.gemm_order && G > 1 && G <= 64 && n_tok * n_head_kv >= 4 * (int64_t)nt;
    j.scratch_stride = grouped ? G * (j.scores_len + 16 * head_dim) + head_dim : j.scores_len + 65 * head_dim;
    j.scratch = malloc(sizeof(float) * (size_t)(j.scratch_stride * nt));
    if (!j.scratch) abort();  // a few KiB per thread; the session already holds far larger buffers
    if (grouped)
        st_pool_run(pool, n_tok * n_head_kv, attn_group_task, &j);
    else
        st_pool_run(pool, n_tok * n_head, attn_task, &j);
    free(j.scratch);
}
