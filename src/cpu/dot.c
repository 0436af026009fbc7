// Kernel dispatch: one table per ISA, filled once; missing entries fall back to the next lower ISA.
#include <pthread.h>
#include <stdlib.h>

#include "cpu/dot_impl.h"
#include "cpu/features.h"
#include "quant/blocks.h"
#include "util/err.h"

static st_cpu_kernels g_native[ST_CPU_ISA_COUNT];    // as each ISA file filled it (NULL = no kernel)
static st_cpu_kernels g_resolved[ST_CPU_ISA_COUNT];  // with fallbacks applied
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_tables(void) {
    st_cpu_kernels_init_portable(&g_native[ST_CPU_ISA_PORTABLE]);
#ifdef ST_CPU_X86
    // Only the ISAs this CPU has: each init function is compiled with its ISA's flags, and the compiler may use
    // them even to fill the table (GCC 12 stores the pointers with zmm moves). An ISA the CPU lacks keeps an empty
    // table, resolved to the next lower ISA below.
    if (st_cpu_isa_supported(ST_CPU_ISA_AVX2)) st_cpu_kernels_init_avx2(&g_native[ST_CPU_ISA_AVX2]);
    if (st_cpu_isa_supported(ST_CPU_ISA_AVX512)) st_cpu_kernels_init_avx512(&g_native[ST_CPU_ISA_AVX512]);
#endif
    for (int isa = 0; isa < ST_CPU_ISA_COUNT; isa++) {
        st_cpu_kernels *r = &g_resolved[isa];
        *r = g_native[isa];
        if (isa == 0) continue;
        const st_cpu_kernels *lo = &g_resolved[isa - 1];
        for (int t = 0; t < ST_TYPE_COUNT; t++)
            if (!r->dot[t]) r->dot[t] = lo->dot[t];
        for (int t = 0; t < ST_TYPE_COUNT; t++)
            if (!r->tdot[t]) r->tdot[t] = lo->tdot[t];
        if (!r->quant_q8_0) r->quant_q8_0 = lo->quant_q8_0;
        if (!r->quant_q8_1) r->quant_q8_1 = lo->quant_q8_1;
        if (!r->quant_q8_K) r->quant_q8_K = lo->quant_q8_K;
    }
}

static const st_cpu_kernels *kernels(st_cpu_isa isa) {
    pthread_once(&g_once, init_tables);
    if ((unsigned)isa >= ST_CPU_ISA_COUNT) isa = ST_CPU_ISA_PORTABLE;
    return &g_resolved[isa];
}

int st_cpu_act_type(int t) {
    switch (t) {
    case ST_TYPE_F32:
    case ST_TYPE_BF16: return ST_TYPE_F32;
    case ST_TYPE_F16: return ST_TYPE_F16;  // llama.cpp's vec_dot_type: activations rounded to half
    case ST_TYPE_Q4_0:
    case ST_TYPE_Q5_0:
    case ST_TYPE_Q8_0:
    case ST_TYPE_IQ4_NL:
    case ST_TYPE_MXFP4: return ST_TYPE_Q8_0;
    case ST_TYPE_Q4_1:
    case ST_TYPE_Q5_1: return ST_TYPE_Q8_1;
    case ST_TYPE_Q2_K:
    case ST_TYPE_Q3_K:
    case ST_TYPE_Q4_K:
    case ST_TYPE_Q5_K:
    case ST_TYPE_Q6_K:
    case ST_TYPE_IQ2_XXS:
    case ST_TYPE_IQ2_XS:
    case ST_TYPE_IQ2_S:
    case ST_TYPE_IQ3_XXS:
    case ST_TYPE_IQ3_S:
    case ST_TYPE_IQ1_S:
    case ST_TYPE_IQ1_M:
    case ST_TYPE_IQ4_XS: return ST_TYPE_Q8_K;
    default: return -1;
    }
}

size_t st_cpu_act_row_size(int weight_type, int64_t n) {
    int at = st_cpu_act_type(weight_type);
    if (at < 0 || st_row_size(weight_type, n) == 0) return 0;
    return st_row_size(at, n);
}

st_vec_dot_fn st_cpu_vec_dot(int weight_type, st_cpu_isa isa) {
    if (st_cpu_act_type(weight_type) < 0) return NULL;
    return kernels(isa)->dot[weight_type];
}

st_vec_dot4_fn st_cpu_vec_dot4(int weight_type, st_cpu_isa isa) {
    if (weight_type < 0 || weight_type >= ST_TYPE_COUNT) return NULL;
    return kernels(isa)->dot4[weight_type];
}

st_gemm8_fn st_cpu_gemm8(int weight_type, st_cpu_isa isa) {
    if (weight_type < 0 || weight_type >= ST_TYPE_COUNT) return NULL;
    const st_cpu_kernels *k = kernels(isa);
    return k->dot_x8[weight_type] ? k->gemm8[weight_type] : NULL;
}

st_vec_dot_fn st_cpu_vec_dot_x8(int weight_type, st_cpu_isa isa) {
    if (weight_type < 0 || weight_type >= ST_TYPE_COUNT) return NULL;
    const st_cpu_kernels *k = kernels(isa);
    return k->gemm8[weight_type] ? k->dot_x8[weight_type] : NULL;
}

st_tdot_fn st_cpu_tiled_dot(int weight_type, st_cpu_isa isa) {
    if (weight_type < 0 || weight_type >= ST_TYPE_COUNT) return NULL;
    return kernels(isa)->tdot[weight_type];
}

int st_cpu_tiled_applies(int weight_type, int64_t n_rows, int64_t n_tok, st_cpu_isa isa) {
    if (n_tok < ST_CPU_TILED_MIN_TOK || !st_cpu_tiled_dot(weight_type, isa)) return 0;
    // Tensors llama.cpp repacks at load time go through its repacked kernels instead (Strata: gemm8 / dot_x8).
    if (weight_type == ST_TYPE_Q4_K && n_rows % 8 == 0) return 0;
    if (weight_type == ST_TYPE_Q2_K && n_rows % 8 == 0 && isa == ST_CPU_ISA_AVX512) return 0;
    return 1;
}

size_t st_cpu_repack8_size(int weight_type, int64_t ne0) {
    if (weight_type != ST_TYPE_Q4_K || ne0 <= 0 || ne0 % QK_K) return 0;
    return (size_t)(ne0 / QK_K) * sizeof(block_q4_Kx8);
}

int st_cpu_repack8(int weight_type, const void *w, size_t w_stride, int64_t ne0, void *dst) {
    if (st_cpu_repack8_size(weight_type, ne0) == 0) return -1;
    block_q4_Kx8 *o = dst;
    for (int64_t i = 0; i < ne0 / QK_K; i++, o++) {
        for (int r = 0; r < 8; r++) {
            const block_q4_K *b = (const block_q4_K *)((const uint8_t *)w + (size_t)r * w_stride) + i;
            o->d[r] = st_cpu_h2f(b->d);
            o->dmin[r] = st_cpu_h2f(b->dmin);
            for (int j = 0; j < 8; j++) {
                uint8_t sc, mn;
                st_cpu_scale_min_k4(j, b->scales, &sc, &mn);
                o->sc[j][r] = sc;
                o->mn[j / 2][2 * r + (j & 1)] = mn;
            }
            for (int c = 0; c < 4; c++)
                for (int g = 0; g < 8; g++) memcpy(&o->qs[c][g][4 * r], b->qs + 32 * c + 4 * g, 4);
        }
    }
    return 0;
}

int st_cpu_dot4_gemm_order(int weight_type) {
    return weight_type == ST_TYPE_Q8_0 || weight_type == ST_TYPE_Q4_0 || weight_type == ST_TYPE_Q5_0 ||
           weight_type == ST_TYPE_IQ4_NL || weight_type == ST_TYPE_F32 || weight_type == ST_TYPE_F16;
}

int st_cpu_vec_dot_native(int weight_type, st_cpu_isa isa) {
    if (weight_type < 0 || weight_type >= ST_TYPE_COUNT || (unsigned)isa >= ST_CPU_ISA_COUNT) return 0;
    pthread_once(&g_once, init_tables);
    return g_native[isa].dot[weight_type] != NULL;
}

int st_cpu_quantize_act(int act_type, const float *x, void *dst, int64_t n, st_cpu_isa isa) {
    const st_cpu_kernels *k = kernels(isa);
    switch (act_type) {
    case ST_TYPE_F32: memcpy(dst, x, (size_t)n * sizeof(float)); return 0;
    case ST_TYPE_F16: {  // round to nearest even, as ggml's fp32 -> fp16 row conversion (F16C)
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = st_f32_to_f16(x[i]);
        return 0;
    }
    case ST_TYPE_Q8_0:
    case ST_TYPE_Q8_1:
        if (n % 32) return st_err("st_cpu_quantize_act: %s row of %lld elements is not a multiple of 32",
                                  st_type_name(act_type), (long long)n);
        (act_type == ST_TYPE_Q8_0 ? k->quant_q8_0 : k->quant_q8_1)(x, dst, n);
        return 0;
    case ST_TYPE_Q8_K:
        if (n % 256) return st_err("st_cpu_quantize_act: Q8_K row of %lld elements is not a multiple of 256",
                                   (long long)n);
        k->quant_q8_K(x, dst, n);
        return 0;
    default:
        return st_err("st_cpu_quantize_act: %s is not an activation type (expected F32, F16, Q8_0, Q8_1 or Q8_K)",
                      st_type_name(act_type));
    }
}
