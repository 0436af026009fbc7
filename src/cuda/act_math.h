// The CPU reference's element-wise activation arithmetic (cpu/ops.c: ggml's AVX-512 vector expf, one lane, and
// SwiGLU y = g / (1 + exp(0 - g)) * u) as functions for both compilers: `__host__ __device__` under nvcc, `static
// inline` under a C compiler, so the CUDA kernels compute the CPU engine's bits and tests/cuda_host checks that
// against st_swiglu without a GPU. Every step is an IEEE-rounded operation named explicitly (fmaf, and
// __fdiv_rn / __fadd_rn / __fmul_rn on the device, where --use_fast_math would make a plain '/' approximate and may
// contract a multiply into an add): a last-bit difference here moves a quant at a Q8_K rounding tie of the down
// projection's input (the CPU/GPU parity of tests/gpu/e2e.py).
#ifndef STRATA_CUDA_ACT_MATH_H
#define STRATA_CUDA_ACT_MATH_H

#include <math.h>

#if defined(__CUDACC__)
#define ST_AM __host__ __device__ __forceinline__
#else
#define ST_AM static inline
#endif

#if defined(__CUDA_ARCH__)
#define ST_AM_ADD(a, b) __fadd_rn((a), (b))
#define ST_AM_SUB(a, b) __fsub_rn((a), (b))
#define ST_AM_MUL(a, b) __fmul_rn((a), (b))
#define ST_AM_DIV(a, b) __fdiv_rn((a), (b))
#else
#define ST_AM_ADD(a, b) ((a) + (b))
#define ST_AM_SUB(a, b) ((a) - (b))
#define ST_AM_MUL(a, b) ((a) * (b))
#define ST_AM_DIV(a, b) ((a) / (b))
#endif

// exp(x) as ggml's AVX-512 ggml_v_expf computes one lane: x = n ln2 + b with n = round(x log2 e), exp(b) by a
// degree-5 polynomial in fused multiply-adds, times 2^n; |n| > 192 saturates to 0 or inf (constants: cpu/ops.c).
ST_AM float st_am_expf(float x) {
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = ST_AM_SUB(z, r);
    if (isnan(n)) return x;
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    const float u = ST_AM_MUL(b, b);
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                         fmaf(0x1.ffffecp-1f, b, 1.0f));
    return ldexpf(j, (int)n);
}

// SwiGLU of one element, the CPU engine's st_swiglu (whose rows are multiples of 16 here: every element takes the
// vector exp): silu(g) * u = g / (1 + exp(0 - g)) * u.
ST_AM float st_am_silu_mul(float g, float u) {
    return ST_AM_MUL(ST_AM_DIV(g, ST_AM_ADD(1.0f, st_am_expf(ST_AM_SUB(0.0f, g)))), u);
}

#endif
