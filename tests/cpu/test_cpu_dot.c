// CPU kernels against a float64 reference: for every weight type and every ISA this machine supports,
//  - activation quantization is byte-identical on every ISA to its reference: st_quantize_row for Q8_K, and for
//    Q8_0/Q8_1 llama.cpp's x86 runtime rule (inverse scale 127/amax, ties to even), which differs from GGML's
//    reference quantizer (1/(amax/127), ties away from zero) in a few values per block and is what the CPU
//    backend matches for parity with llama.cpp;
//  - vec_dot(w, q8(x)) matches sum(dequant(w) * dequant(q8(x))) in float64 within a per-type relative bound
//    (relative to sum |w_i * a_i|, which is robust to cancellation);
//  - SIMD results agree with the portable path;
//  - st_cpu_matmul / st_cpu_matmul_rows (1 and several tokens, 1 and 2 threads, row subsets) match the reference
//    element by element; outputs are poisoned with NaN first, so unwritten elements fail;
//  - 4-token (prefill) kernels are bit-identical per token to the 1-token kernels, directly and through matmul;
//  - tiled-order kernels (products of 8+ tokens, llama.cpp's ggml-cpu/tiled) are bit-identical on every ISA to a
//    scalar transcription of that order, directly and through matmul (dense and expert), and match float64.
// Random blocks (st_random_blocks) and activations are fresh each run; STRATA_SEED=<n> reproduces a run.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/dot.h"
#include "cpu/dot_impl.h"
#include "cpu/features.h"
#include "cpu/matmul.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/pool.h"
#include "util/rng.h"

static uint64_t g_seed;
static int g_fail;

#define FAIL(...)                                                                       \
    do {                                                                                \
        fprintf(stderr, "FAIL (seed %llu): ", (unsigned long long)g_seed);            \
        fprintf(stderr, __VA_ARGS__);                                                   \
        fputc('\n', stderr);                                                            \
        g_fail++;                                                                       \
    } while (0)

static const int k_types[] = {
    ST_TYPE_F32,    ST_TYPE_F16,    ST_TYPE_BF16,  ST_TYPE_Q4_0,    ST_TYPE_Q4_1,   ST_TYPE_Q5_0,
    ST_TYPE_Q5_1,   ST_TYPE_Q8_0,   ST_TYPE_Q2_K,  ST_TYPE_Q3_K,    ST_TYPE_Q4_K,   ST_TYPE_Q5_K,
    ST_TYPE_Q6_K,   ST_TYPE_IQ1_S,  ST_TYPE_IQ1_M, ST_TYPE_IQ2_XXS, ST_TYPE_IQ2_XS, ST_TYPE_IQ2_S,
    ST_TYPE_IQ3_XXS, ST_TYPE_IQ3_S, ST_TYPE_IQ4_NL, ST_TYPE_IQ4_XS, ST_TYPE_MXFP4,
};
#define N_TYPES ((int)(sizeof k_types / sizeof k_types[0]))

// Relative error bound (against sum |w a|). Integer sums are exact; what remains is float scale products and
// summation (~1e-6), except Q4_1/Q5_1 whose min term uses the activation's f16-rounded s = d * sum(q)
// (relative error 2^-11 of that term).
static double tol_for(int type) {
    if (type == ST_TYPE_Q4_1 || type == ST_TYPE_Q5_1) return 2e-3;
    return 2e-5;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

static void fill_weights(int type, void *dst, int64_t n_elems, st_rng *rng) {
    if (type == ST_TYPE_F32) {
        float *f = dst;
        for (int64_t i = 0; i < n_elems; i++) f[i] = st_rng_normal(rng);
    } else if (type == ST_TYPE_F16 || type == ST_TYPE_BF16) {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n_elems; i++)
            h[i] = type == ST_TYPE_F16 ? st_f32_to_f16(st_rng_normal(rng)) : st_f32_to_bf16(st_rng_normal(rng));
    } else {
        int64_t nb = n_elems / st_type_get(type)->block_size;
        if (st_random_blocks(type, dst, nb, 1.0f, rng) < 0) {
            FAIL("st_random_blocks(%s): %s", st_type_name(type), st_errmsg());
            memset(dst, 0, st_row_size(type, n_elems));
        }
    }
}

// Random activations with occasional outliers and all-zero blocks (edge cases of the quantizers).
static void fill_acts(float *x, int64_t n, st_rng *rng) {
    for (int64_t i = 0; i < n; i++) x[i] = st_rng_normal(rng) * (st_rng_below(rng, 50) == 0 ? 20.0f : 1.0f);
    if (n >= 512 && st_rng_below(rng, 3) == 0) memset(x + 256, 0, 256 * sizeof(float));
    if (st_rng_below(rng, 4) == 0) x[st_rng_below(rng, (uint32_t)n)] = 0.5f;  // exact ties after scaling are rare
}

static void dequant(int type, const void *src, double *dst, int64_t n) {
    float *f = xmalloc((size_t)n * sizeof(float));
    if (type == ST_TYPE_F32) {
        memcpy(f, src, (size_t)n * sizeof(float));
    } else if (st_dequantize_row(type, src, f, n) < 0) {
        FAIL("st_dequantize_row(%s): %s", st_type_name(type), st_errmsg());
        memset(f, 0, (size_t)n * sizeof(float));
    }
    for (int64_t i = 0; i < n; i++) dst[i] = f[i];
    free(f);
}

static void ref_dot(const double *w, const double *a, int64_t n, double *dot, double *mag) {
    double s = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        s += w[i] * a[i];
        m += fabs(w[i] * a[i]);
    }
    *dot = s;
    *mag = m;
}

// Q8_0 / Q8_1 activation blocks as llama.cpp quantizes activations at run time on x86.
static void ref_act_q8(int type, const float *x, void *dst, int64_t n) {
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int8_t *qs;
        int sum = 0;
        if (type == ST_TYPE_Q8_0) {
            block_q8_0 *y = (block_q8_0 *)dst + b;
            y->d = st_f32_to_f16(d);
            qs = y->qs;
        } else {
            block_q8_1 *y = (block_q8_1 *)dst + b;
            y->d = st_f32_to_f16(d);
            qs = y->qs;
        }
        for (int j = 0; j < 32; j++) sum += qs[j] = (int8_t)nearbyintf(xb[j] * id);
        if (type == ST_TYPE_Q8_1) ((block_q8_1 *)dst + b)->s = st_f32_to_f16(d * (float)sum);
    }
}

static void test_quantize_act(st_rng *rng) {
    const int acts[] = {ST_TYPE_Q8_0, ST_TYPE_Q8_1, ST_TYPE_Q8_K};
    const int64_t n = 1024;
    float *x = xmalloc(n * sizeof(float));
    for (int rep = 0; rep < 8; rep++) {
        fill_acts(x, n, rng);
        for (int k = 0; k < 3; k++) {
            size_t bytes = st_row_size(acts[k], n);
            uint8_t *ref = xmalloc(bytes), *got = xmalloc(bytes);
            if (acts[k] != ST_TYPE_Q8_K) {
                ref_act_q8(acts[k], x, ref, n);
            } else if (st_quantize_row(acts[k], x, ref, n) < 0) {
                FAIL("st_quantize_row(%s): %s", st_type_name(acts[k]), st_errmsg());
                free(ref), free(got);
                continue;
            }
            for (int isa = 0; isa < ST_CPU_ISA_COUNT; isa++) {
                if (!st_cpu_isa_supported(isa)) continue;
                memset(got, 0xa5, bytes);
                if (st_cpu_quantize_act(acts[k], x, got, n, isa) < 0) FAIL("quantize_act: %s", st_errmsg());
                for (size_t b = 0; b < bytes; b++) {
                    if (got[b] != ref[b]) {
                        FAIL("quantize %s on %s: byte %zu (block %zu) is 0x%02x, the reference gives 0x%02x",
                             st_type_name(acts[k]), st_cpu_isa_name(isa), b, b / st_type_get(acts[k])->type_size,
                             got[b], ref[b]);
                        break;
                    }
                }
            }
            free(ref), free(got);
        }
    }
    free(x);
}

static void test_dot(int type, st_rng *rng) {
    const int bs = st_type_get(type)->block_size;
    const int act = st_cpu_act_type(type);
    // Lengths: several super-blocks, plus an odd number of blocks to exercise unrolled-loop tails.
    const int64_t lens[] = {act == ST_TYPE_Q8_K ? 256 * 3 : 32 * 7, act == ST_TYPE_Q8_K ? 2048 : 1024};
    for (int li = 0; li < 2; li++) {
        int64_t n = lens[li];
        if (n % bs) continue;
        void *w = xmalloc(st_row_size(type, n));
        float *x = xmalloc(n * sizeof(float));
        void *aq = xmalloc(st_cpu_act_row_size(type, n) + 64);
        double *wd = xmalloc(n * sizeof(double)), *ad = xmalloc(n * sizeof(double));
        for (int rep = 0; rep < 4; rep++) {
            fill_weights(type, w, n, rng);
            fill_acts(x, n, rng);
            dequant(type, w, wd, n);
            float portable = NAN;
            for (int isa = 0; isa < ST_CPU_ISA_COUNT; isa++) {
                if (!st_cpu_isa_supported(isa)) continue;
                if (st_cpu_quantize_act(act, x, aq, n, isa) < 0) FAIL("quantize_act: %s", st_errmsg());
                if (act == ST_TYPE_F32) {
                    for (int64_t i = 0; i < n; i++) ad[i] = x[i];
                } else {
                    dequant(act, aq, ad, n);
                }
                double ref, mag;
                ref_dot(wd, ad, n, &ref, &mag);
                st_vec_dot_fn fn = st_cpu_vec_dot(type, isa);
                if (!fn) {
                    FAIL("%s: no dot product on %s", st_type_name(type), st_cpu_isa_name(isa));
                    continue;
                }
                float got = fn(n, w, aq);
                double err = fabs(got - ref), bound = tol_for(type) * mag + 1e-30;
                if (!(err <= bound))
                    FAIL("dot %s n=%lld on %s: got %.9g, reference %.9g (error %.3g > bound %.3g)", st_type_name(type),
                         (long long)n, st_cpu_isa_name(isa), got, ref, err, bound);
                if (isa == ST_CPU_ISA_PORTABLE) {
                    portable = got;
                } else if (!(fabs(got - portable) <= 1e-5 * mag + 1e-30)) {
                    FAIL("dot %s n=%lld: %s gives %.9g, portable %.9g", st_type_name(type), (long long)n,
                         st_cpu_isa_name(isa), got, portable);
                }
            }
        }
        free(w), free(x), free(aq), free(wd), free(ad);
    }
}

static void test_matmul(int type, st_rng *rng, st_pool *pool2) {
    const int act = st_cpu_act_type(type);
    const int64_t ne0 = act == ST_TYPE_Q8_K ? 512 : 160, n_out = 37;
    const int64_t toks[] = {1, 5};
    const size_t rb = st_row_size(type, ne0);
    uint8_t *W = xmalloc(rb * n_out);
    for (int64_t r = 0; r < n_out; r++) fill_weights(type, W + r * rb, ne0, rng);
    double *wd = xmalloc(sizeof(double) * ne0 * n_out), *ad = xmalloc(sizeof(double) * ne0);
    for (int64_t r = 0; r < n_out; r++) dequant(type, W + r * rb, wd + r * ne0, ne0);
    st_cpu_scratch scratch = {0};
    for (int ti = 0; ti < 2; ti++) {
        const int64_t nt = toks[ti];
        float *X = xmalloc(sizeof(float) * ne0 * nt), *Y = xmalloc(sizeof(float) * n_out * nt);
        double *ref = xmalloc(sizeof(double) * n_out * nt), *mag = xmalloc(sizeof(double) * n_out * nt);
        void *aq = xmalloc(st_cpu_act_row_size(type, ne0));
        fill_acts(X, ne0 * nt, rng);
        for (int isa = 0; isa < ST_CPU_ISA_COUNT; isa++) {
            if (!st_cpu_isa_supported(isa)) continue;
            st_cpu_isa_set(isa);
            for (int64_t t = 0; t < nt; t++) {
                st_cpu_quantize_act(act, X + t * ne0, aq, ne0, isa);
                if (act == ST_TYPE_F32) {
                    for (int64_t i = 0; i < ne0; i++) ad[i] = X[t * ne0 + i];
                } else {
                    dequant(act, aq, ad, ne0);
                }
                for (int64_t r = 0; r < n_out; r++) ref_dot(wd + r * ne0, ad, ne0, &ref[t * n_out + r], &mag[t * n_out + r]);
            }
            for (int variant = 0; variant < 3; variant++) {
                for (size_t i = 0; i < (size_t)(n_out * nt); i++) Y[i] = NAN;
                int64_t row0 = 0, nr = n_out;
                int rc;
                if (variant < 2) {
                    rc = st_cpu_matmul(variant ? pool2 : NULL, type, W, ne0, n_out, X, nt, Y, &scratch);
                } else {
                    // rows [5, 29) written with ldy = n_out at their own columns
                    row0 = 5, nr = 24;
                    rc = st_cpu_matmul_rows(pool2, type, W, ne0, row0, nr, X, nt, Y + row0, n_out, NULL, 0);
                }
                if (rc < 0) {
                    FAIL("matmul %s: %s", st_type_name(type), st_errmsg());
                    continue;
                }
                for (int64_t t = 0; t < nt; t++) {
                    for (int64_t r = 0; r < n_out; r++) {
                        float got = Y[t * n_out + r];
                        int inside = r >= row0 && r < row0 + nr;
                        if (!inside) {
                            if (!isnan(got)) FAIL("matmul_rows %s wrote outside its rows (row %lld)", st_type_name(type), (long long)r);
                            continue;
                        }
                        double e = fabs(got - ref[t * n_out + r]), b = tol_for(type) * mag[t * n_out + r] + 1e-30;
                        if (!(e <= b)) {
                            FAIL("matmul %s on %s (variant %d, %lld tokens) Y[%lld][%lld] = %.9g, reference %.9g",
                                 st_type_name(type), st_cpu_isa_name(isa), variant, (long long)nt, (long long)t,
                                 (long long)r, got, ref[t * n_out + r]);
                            t = nt;
                            break;
                        }
                    }
                }
            }
        }
        free(X), free(Y), free(ref), free(mag), free(aq);
    }
    st_cpu_scratch_free(&scratch);
    free(W), free(wd), free(ad);
}

// 4-token kernels (prefill): for every type that has one on an ISA, each token's result must be bit-identical to
// that ISA's 1-token kernel (parity with llama.cpp rests on the 1-token kernels' accumulation order), and
// st_cpu_matmul over 7 tokens (a 4-token group and a tail) must equal per-token dot products bit for bit.
// Exception, st_cpu_dot4_gemm_order types: llama.cpp's prompt path uses another order, so there the reference is
// the 4-token kernel run on one token (a_stride 0), which must equal each token's result in a group of 4 (no
// cross-talk, no dependence on the position in the group), and the 1-token kernel must agree within tolerance.
// Types listed in k_dot4_x86 must have a 4-token kernel on AVX2 and AVX-512, so a lost table entry fails.
static const int k_dot4_x86[] = {ST_TYPE_Q4_0, ST_TYPE_Q4_1, ST_TYPE_Q5_0,   ST_TYPE_Q5_1,  ST_TYPE_Q8_0,
                                 ST_TYPE_Q2_K, ST_TYPE_Q3_K, ST_TYPE_Q4_K,   ST_TYPE_Q5_K,  ST_TYPE_Q6_K,
                                 ST_TYPE_IQ4_NL, ST_TYPE_IQ4_XS, ST_TYPE_MXFP4};

static void test_dot4(int type, st_rng *rng) {
    const int act = st_cpu_act_type(type);
    const int bs = st_type_get(type)->block_size;
    int want_x86 = 0;
    for (size_t k = 0; k < sizeof k_dot4_x86 / sizeof k_dot4_x86[0]; k++) want_x86 |= k_dot4_x86[k] == type;
    const int64_t lens[] = {act == ST_TYPE_Q8_K ? 256 * 3 : 32 * 7, act == ST_TYPE_Q8_K ? 1024 : 32 * 8};
    for (int isa = 0; isa < ST_CPU_ISA_COUNT; isa++) {
        if (!st_cpu_isa_supported(isa)) continue;
        st_vec_dot4_fn fn4 = st_cpu_vec_dot4(type, isa);
        if (!fn4) {
            if (want_x86 && (isa == ST_CPU_ISA_AVX2 || isa == ST_CPU_ISA_AVX512))
                FAIL("%s: no 4-token kernel on %s", st_type_name(type), st_cpu_isa_name(isa));
            continue;
        }
        st_vec_dot_fn fn = st_cpu_vec_dot(type, isa);
        const int gemm = st_cpu_dot4_gemm_order(type);
        for (int li = 0; li < 2; li++) {
            const int64_t n = lens[li];
            if (n % bs) continue;
            // A stride that is not a multiple of 16 exercises unaligned vector loads (+4 keeps the blocks' own
            // 2/4-byte alignment).
            const size_t ab = st_cpu_act_row_size(type, n), stride = ab + 4;
            void *w = xmalloc(st_row_size(type, n));
            float *x = xmalloc(n * sizeof(float));
            uint8_t *aq = xmalloc(stride * 4);
            for (int rep = 0; rep < 8; rep++) {
                fill_weights(type, w, n, rng);
                for (int c = 0; c < 4; c++) {
                    fill_acts(x, n, rng);
                    if (st_cpu_quantize_act(act, x, aq + c * stride, n, isa) < 0) FAIL("quantize_act: %s", st_errmsg());
                }
                float out[4];
                fn4(n, w, aq, stride, out);
                for (int c = 0; c < 4; c++) {
                    float one = fn(n, w, aq + c * stride), solo[4];
                    if (gemm) {
                        fn4(n, w, aq + c * stride, 0, solo);
                        if (!(fabs(solo[0] - one) <= 1e-5 * fabs(one) + 1e-2))
                            FAIL("dot4 %s n=%lld on %s (one token): %.9g, 1-token kernel %.9g", st_type_name(type),
                                 (long long)n, st_cpu_isa_name(isa), solo[0], one);
                        one = solo[0];
                    }
                    if (memcmp(&one, &out[c], sizeof one) != 0)
                        FAIL("dot4 %s n=%lld on %s token %d: %.9g, 1-token kernel %.9g", st_type_name(type),
                             (long long)n, st_cpu_isa_name(isa), c, out[c], one);
                }
            }
            free(w), free(x), free(aq);
        }
        // Through the matmul dispatch, with fewer tokens than the tiled order's minimum (test_tiled covers 8+).
        const int64_t ne0 = lens[1], n_out = 11, nt = ST_CPU_TILED_MIN_TOK - 1;
        const size_t rb = st_row_size(type, ne0), ab = st_cpu_act_row_size(type, ne0);
        uint8_t *W = xmalloc(rb * n_out), *aq = xmalloc(ab);
        float *X = xmalloc(sizeof(float) * ne0 * nt), *Y = xmalloc(sizeof(float) * n_out * nt);
        for (int64_t r = 0; r < n_out; r++) fill_weights(type, W + r * rb, ne0, rng);
        fill_acts(X, ne0 * nt, rng);
        st_cpu_isa_set(isa);
        if (st_cpu_matmul(NULL, type, W, ne0, n_out, X, nt, Y, NULL) < 0) FAIL("matmul %s: %s", st_type_name(type), st_errmsg());
        for (int64_t t = 0; t < nt; t++) {
            st_cpu_quantize_act(act, X + t * ne0, aq, ne0, isa);
            for (int64_t r = 0; r < n_out; r++) {
                float one = fn(ne0, W + r * rb, aq), solo[4];
                if (gemm) {
                    fn4(ne0, W + r * rb, aq, 0, solo);
                    one = solo[0];
                }
                // Rows in 8-row repacked tiles sum in another float order: within rounding, not bit-equal
                // (their accuracy against the float64 reference is checked by test_matmul).
                const int tiled = st_cpu_gemm8(type, isa) && r < (n_out & ~7);
                const int same = tiled ? fabsf(one - Y[t * n_out + r]) <= 2e-5f * (fabsf(one) + 1.0f)
                                       : memcmp(&one, &Y[t * n_out + r], sizeof one) == 0;
                if (!same) {
                    FAIL("matmul %s on %s: Y[%lld][%lld] = %.9g, 1-token kernel %.9g", st_type_name(type),
                         st_cpu_isa_name(isa), (long long)t, (long long)r, Y[t * n_out + r], one);
                    t = nt;
                    break;
                }
            }
        }
        free(W), free(aq), free(X), free(Y);
    }
}

// Tiled order (llama.cpp's ggml-cpu/tiled; cpu/dot_impl.h st_tdot_fn), the order of prefill products with 8+
// tokens for K-quant and IQ weights. The reference is a scalar transcription of that kernel's float epilogue,
//     r = (float)s1 * d_w;  r = fmaf(-dmin_w, (float)s2, r);  y = fmaf(r, d_a, y)   (per super-block, y from 0)
// whose integer sums come from the portable 1-token kernel run on one super-block with its scales replaced by
// 1 (then it returns K * (float)s1 exactly) or, for s2, d = 0 and dmin = 1 (it returns -(float)s2): independent
// of the tiled kernels, and the 1-token kernel itself is checked against float64 by test_dot.
static const int k_tiled_types[] = {ST_TYPE_Q2_K,    ST_TYPE_Q3_K,   ST_TYPE_Q4_K,    ST_TYPE_Q5_K,  ST_TYPE_Q6_K,
                                    ST_TYPE_IQ4_XS,  ST_TYPE_IQ2_XXS, ST_TYPE_IQ2_XS, ST_TYPE_IQ2_S, ST_TYPE_IQ3_XXS,
                                    ST_TYPE_IQ3_S,   ST_TYPE_IQ1_S,  ST_TYPE_IQ1_M};

static int tiled_has_min(int type) { return type == ST_TYPE_Q2_K || type == ST_TYPE_Q4_K || type == ST_TYPE_Q5_K; }

// The constant the type's block scale is multiplied with (llama.cpp's tiled unpack: IQ2_*, IQ1_*: 1/8; IQ3_XXS: 1/4).
static float tiled_k(int type) {
    switch (type) {
    case ST_TYPE_IQ2_XXS: case ST_TYPE_IQ2_XS: case ST_TYPE_IQ2_S: case ST_TYPE_IQ1_S: case ST_TYPE_IQ1_M: return 0.125f;
    case ST_TYPE_IQ3_XXS: return 0.25f;
    default: return 1.0f;
    }
}

// Reads (get) or replaces (set) a block's f16 scale d and, for types with mins, dmin.
static void block_scales(int type, void *b, uint16_t *d, uint16_t *dmin, int set) {
    uint16_t *pd = NULL, *pm = NULL;
    switch (type) {
    case ST_TYPE_Q2_K: pd = &((block_q2_K *)b)->d, pm = &((block_q2_K *)b)->dmin; break;
    case ST_TYPE_Q3_K: pd = &((block_q3_K *)b)->d; break;
    case ST_TYPE_Q4_K: pd = &((block_q4_K *)b)->d, pm = &((block_q4_K *)b)->dmin; break;
    case ST_TYPE_Q5_K: pd = &((block_q5_K *)b)->d, pm = &((block_q5_K *)b)->dmin; break;
    case ST_TYPE_Q6_K: pd = &((block_q6_K *)b)->d; break;
    case ST_TYPE_IQ1_M: {  // the f16 scale is the top nibbles of the 4 16-bit scale words
        uint16_t sc[4];
        memcpy(sc, ((block_iq1_m *)b)->scales, 8);
        if (set) {
            for (int k = 0; k < 4; k++) sc[k] = (uint16_t)((sc[k] & 0x0fff) | (((*d >> (4 * k)) & 15) << 12));
            memcpy(((block_iq1_m *)b)->scales, sc, 8);
        } else {
            *d = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0xf0) | ((sc[2] >> 4) & 0xf00) | (sc[3] & 0xf000));
            *dmin = 0;
        }
        return;
    }
    default: pd = (uint16_t *)b; break;  // the IQ types other than IQ1_M start with d
    }
    if (set) {
        memcpy(pd, d, 2);
        if (pm) memcpy(pm, dmin, 2);
    } else {
        memcpy(d, pd, 2);
        uint16_t z = 0;
        if (pm) memcpy(dmin, pm, 2); else *dmin = z;
    }
}

// One token's tiled-order result for a row of n elements (scalar transcription, see above).
static float tiled_ref(int type, const void *w, const void *a, int64_t n) {
    const size_t tsz = st_type_get(type)->type_size;
    st_vec_dot_fn dot1 = st_cpu_vec_dot(type, ST_CPU_ISA_PORTABLE);
    const float k = tiled_k(type);
    uint8_t blk[512];
    block_q8_K act;
    float acc = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        const uint8_t *wb = (const uint8_t *)w + (size_t)i * tsz;
        memcpy(&act, (const block_q8_K *)a + i, sizeof act);
        const float da = act.d;
        act.d = 1.0f;
        uint16_t d, dmin, one = 0x3c00, zero = 0;
        memcpy(blk, wb, tsz);
        block_scales(type, blk, &d, &dmin, 0);
        block_scales(type, blk, &one, &zero, 1);
        const float f1 = dot1(256, blk, &act) / k;  // (float)s1, rounded as the kernel's int -> float conversion
        float f2 = 0.0f;
        if (tiled_has_min(type)) {
            block_scales(type, blk, &zero, &one, 1);
            f2 = -dot1(256, blk, &act);
        }
        float r = f1 * (st_f16_to_f32(d) * k);
        r = fmaf(-st_f16_to_f32(dmin), f2, r);
        acc = fmaf(r, da, acc);
    }
    return acc;
}

static void test_tiled(int type, st_rng *rng, st_pool *pool2) {
    const int act = st_cpu_act_type(type);
    const int64_t n = 1024;
    const size_t ab = st_cpu_act_row_size(type, n), stride = ab + 4, rb = st_row_size(type, n);
    void *w = xmalloc(rb);
    float *x = xmalloc(n * sizeof(float));
    uint8_t *aq = xmalloc(stride * 4);
    double *wd = xmalloc(n * sizeof(double)), *ad = xmalloc(n * sizeof(double));
    for (int isa = 0; isa < ST_CPU_ISA_COUNT; isa++) {
        if (!st_cpu_isa_supported(isa)) continue;
        st_tdot_fn td = st_cpu_tiled_dot(type, isa);
        if (!td) {
            FAIL("%s: no tiled-order kernel on %s", st_type_name(type), st_cpu_isa_name(isa));
            continue;
        }
        for (int rep = 0; rep < 6; rep++) {
            fill_weights(type, w, n, rng);
            dequant(type, w, wd, n);
            for (int c = 0; c < 4; c++) {
                fill_acts(x, n, rng);
                st_cpu_quantize_act(act, x, aq + c * stride, n, isa);
            }
            for (int nt = 1; nt <= 4; nt++) {
                float out[4] = {NAN, NAN, NAN, NAN};
                td(n, w, aq, stride, nt, out);
                for (int c = 0; c < 4; c++) {
                    if (c >= nt) {
                        if (!isnan(out[c])) FAIL("tdot %s on %s wrote out[%d] for %d tokens", st_type_name(type), st_cpu_isa_name(isa), c, nt);
                        continue;
                    }
                    const float ref = tiled_ref(type, w, aq + c * stride, n);
                    if (memcmp(&ref, &out[c], sizeof ref) != 0)
                        FAIL("tdot %s on %s (%d tokens) token %d: %.9g, scalar transcription %.9g", st_type_name(type),
                             st_cpu_isa_name(isa), nt, c, out[c], ref);
                    double r64, mag;
                    dequant(act, aq + c * stride, ad, n);
                    ref_dot(wd, ad, n, &r64, &mag);
                    if (!(fabs(out[c] - r64) <= tol_for(type) * mag + 1e-30))
                        FAIL("tdot %s on %s token %d: %.9g, float64 reference %.9g", st_type_name(type),
                             st_cpu_isa_name(isa), c, out[c], r64);
                }
            }
        }
        // Through the matmul dispatch: 11 rows (not repackable), 8 tokens (two groups) and 13 (a tail of 1), dense
        // and as an expert, 1 and 2 threads: bit-identical to the transcription; 7 tokens stay in the old order.
        const int64_t ne0 = 512, n_out = 11, toks[] = {8, 13, 7};
        const size_t rb2 = st_row_size(type, ne0), ab2 = st_cpu_act_row_size(type, ne0);
        uint8_t *W = xmalloc(rb2 * n_out), *q = xmalloc(ab2);
        for (int64_t r = 0; r < n_out; r++) fill_weights(type, W + r * rb2, ne0, rng);
        st_cpu_isa_set(isa);
        for (int k = 0; k < 3; k++) {
            const int64_t nt = toks[k];
            float *X = xmalloc(sizeof(float) * ne0 * nt), *Y = xmalloc(sizeof(float) * n_out * nt);
            fill_acts(X, ne0 * nt, rng);
            for (int variant = 0; variant < 2; variant++) {
                for (int64_t i = 0; i < n_out * nt; i++) Y[i] = NAN;
                if (st_cpu_matmul_rows(variant ? pool2 : NULL, type, W, ne0, 0, n_out, X, nt, Y, n_out, NULL,
                                       variant ? ST_MM_EXPERT : 0) < 0)
                    FAIL("matmul %s: %s", st_type_name(type), st_errmsg());
                for (int64_t t = 0; t < nt; t++) {
                    st_cpu_quantize_act(act, X + t * ne0, q, ne0, isa);
                    for (int64_t r = 0; r < n_out; r++) {
                        const float want = nt >= 8 ? tiled_ref(type, W + r * rb2, q, ne0)
                                                   : st_cpu_vec_dot(type, isa)(ne0, W + r * rb2, q);
                        if (memcmp(&want, &Y[t * n_out + r], sizeof want) != 0) {
                            FAIL("matmul %s on %s (%lld tokens, %s): Y[%lld][%lld] = %.9g, expected %.9g (%s order)",
                                 st_type_name(type), st_cpu_isa_name(isa), (long long)nt, variant ? "expert" : "dense",
                                 (long long)t, (long long)r, Y[t * n_out + r], want, nt >= 8 ? "tiled" : "1-token");
                            t = nt;
                            break;
                        }
                    }
                }
            }
            free(X), free(Y);
        }
        free(W), free(q);
    }
    free(w), free(x), free(aq), free(wd), free(ad);
}

// Which products take the tiled order (llama.cpp's rule, see st_cpu_tiled_applies).
static void test_tiled_rule(void) {
    const struct { int type; int64_t rows, tok; st_cpu_isa isa; int want; } cases[] = {
        {ST_TYPE_Q6_K, 16, 8, ST_CPU_ISA_AVX512, 1},   {ST_TYPE_Q6_K, 16, 7, ST_CPU_ISA_AVX512, 0},
        {ST_TYPE_IQ3_S, 12, 512, ST_CPU_ISA_AVX2, 1},  {ST_TYPE_Q4_K, 16, 8, ST_CPU_ISA_AVX512, 0},
        {ST_TYPE_Q4_K, 12, 8, ST_CPU_ISA_AVX512, 1},   {ST_TYPE_Q2_K, 16, 8, ST_CPU_ISA_AVX512, 0},
        {ST_TYPE_Q2_K, 16, 8, ST_CPU_ISA_AVX2, 1},     {ST_TYPE_Q2_K, 12, 8, ST_CPU_ISA_AVX512, 1},
        {ST_TYPE_Q8_0, 16, 64, ST_CPU_ISA_AVX512, 0},  {ST_TYPE_IQ4_NL, 12, 64, ST_CPU_ISA_AVX512, 0},
        {ST_TYPE_Q4_1, 12, 64, ST_CPU_ISA_PORTABLE, 0}, {ST_TYPE_IQ1_M, 12, 8, ST_CPU_ISA_PORTABLE, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = st_cpu_tiled_applies(cases[i].type, cases[i].rows, cases[i].tok, cases[i].isa);
        if (got != cases[i].want)
            FAIL("st_cpu_tiled_applies(%s, %lld rows, %lld tokens, %s) = %d, expected %d", st_type_name(cases[i].type),
                 (long long)cases[i].rows, (long long)cases[i].tok, st_cpu_isa_name(cases[i].isa), got, cases[i].want);
    }
}

// 8-row repacking (st_cpu_repack8): the tile decodes back to the rows it came from (scales, mins, quants).
static void test_repack8(st_rng *rng) {
    const int type = ST_TYPE_Q4_K;
    const int64_t ne0 = 512;
    const size_t rb = st_row_size(type, ne0), sz = st_cpu_repack8_size(type, ne0);
    uint8_t *W = xmalloc(rb * 8), *ref = xmalloc(sz);
    for (int r = 0; r < 8; r++) fill_weights(type, W + r * rb, ne0, rng);
    if (st_cpu_repack8(type, W, rb, ne0, ref) != 0) FAIL("repack8 Q4_K refused");
    const block_q4_Kx8 *x = (const block_q4_Kx8 *)ref;
    for (int64_t i = 0; i < ne0 / 256; i++)
        for (int r = 0; r < 8; r++) {
            const block_q4_K *b = (const block_q4_K *)(W + r * rb) + i;
            for (int q = 0; q < 128; q++)
                if (x[i].qs[q / 32][(q % 32) / 4][4 * r + q % 4] != b->qs[q]) FAIL("repack8: quant byte %d of row %d", q, r);
            for (int j = 0; j < 8; j++) {
                uint8_t sc, mn;
                st_cpu_scale_min_k4(j, b->scales, &sc, &mn);
                if (x[i].sc[j][r] != sc || x[i].mn[j / 2][2 * r + (j & 1)] != mn) FAIL("repack8: scale %d of row %d", j, r);
            }
        }
    free(W), free(ref);
}

int main(void) {
    const char *env = getenv("STRATA_SEED");
    g_seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    st_rng rng;
    st_rng_init(&rng, g_seed, 0);
    printf("cpu features:");
    for (int isa = 0; isa < ST_CPU_ISA_COUNT; isa++)
        if (st_cpu_isa_supported(isa)) printf(" %s", st_cpu_isa_name(isa));
    printf(" (seed %llu)\n", (unsigned long long)g_seed);

    st_pool *pool2 = st_pool_create(2);
    test_quantize_act(&rng);
    test_repack8(&rng);
    for (int i = 0; i < N_TYPES; i++) {
        test_dot(k_types[i], &rng);
        test_matmul(k_types[i], &rng, pool2);
        test_dot4(k_types[i], &rng);
    }
    test_tiled_rule();
    for (size_t i = 0; i < sizeof k_tiled_types / sizeof k_tiled_types[0]; i++) test_tiled(k_tiled_types[i], &rng, pool2);
    // Error paths: unsupported type and a row length that is not a block multiple.
    float x[64] = {0}, y[4];
    if (st_cpu_matmul(NULL, ST_TYPE_I32, x, 16, 1, x, 1, y, NULL) != -1) FAIL("I32 weights accepted");
    if (st_cpu_matmul(NULL, ST_TYPE_Q4_K, x, 64, 1, x, 1, y, NULL) != -1) FAIL("Q4_K with ne0=64 accepted");
    st_pool_destroy(pool2);
    if (g_fail) {
        fprintf(stderr, "%d failures (seed %llu; rerun with STRATA_SEED=%llu)\n", g_fail, (unsigned long long)g_seed,
                (unsigned long long)g_seed);
        return 1;
    }
    printf("ok: %d types\n", N_TYPES);
    return 0;
}
