// Device helpers of the fused decode kernels that work on matrix rows (decode.cu, decode_glu.cu): the
// weight types they take, one 32-lane group's dot products of quantized rows with planar q8_1 activation rows
// (cuda/qblock.h unpack + dp4a, then a butterfly sum: the same arithmetic and order as st_k_mmvq with one warp per
// row), float row loads for the router, and the CPU's MoE route of one token. CUDA C++ only; every function is
// static or a template, so each translation unit gets its own copy.
#ifndef STRATA_CUDA_DECODE_ROWS_CUH
#define STRATA_CUDA_DECODE_ROWS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "cuda/decode_common.cuh"  // groups, reductions
#include "cuda/qblock.h"           // planar q8_1 layout, st_qb_unpack / st_qb_dot_w

#define ROUTER_MAX_PER_LANE 16  // n_expert <= 16 * 32

#define DEC_TYPES(X)                                                                                               \
    X(ST_TYPE_Q4_0) X(ST_TYPE_Q4_1) X(ST_TYPE_Q5_0) X(ST_TYPE_Q5_1) X(ST_TYPE_Q8_0) X(ST_TYPE_Q2_K) X(ST_TYPE_Q3_K) \
        X(ST_TYPE_Q4_K) X(ST_TYPE_Q5_K) X(ST_TYPE_Q6_K) X(ST_TYPE_IQ1_S) X(ST_TYPE_IQ1_M) X(ST_TYPE_IQ2_XXS)      \
        X(ST_TYPE_IQ2_XS) X(ST_TYPE_IQ2_S) X(ST_TYPE_IQ3_XXS) X(ST_TYPE_IQ3_S) X(ST_TYPE_IQ4_NL) X(ST_TYPE_IQ4_XS) \
        X(ST_TYPE_MXFP4)

// DEC_SMEM_TABLES (default 1; -DDEC_SMEM_TABLES=0 for an A/B build): the per-type kernel instances read the
// i-quant codebooks from a block's copy in shared memory, staged by dec_stage_tables<TYPE>() at the start of each
// kernel (before its PDL wait: the tables are no kernel's output), instead of the device copy through L1: a warp's
// random lookups there touch up to 32 lines (one L1 wavefront each) per instruction; in shared memory they cost bank
// conflicts only. The row dots take it in their MODE argument (DEC_TAB at the kernels' call sites); the runtime-type
// functions (instance 0) keep the device copy. Same values, so the same results. Measured 2026-12-01f (bench/ab.sh,
// Qwen3-30B-A3B shape): IQ1_M tg128 456.6 vs 429.3 (+6.4%; the probe that makes every lookup nearly free,
// -DST_QB_PROBE_MASK=7, 472.9), Q4_K_M 490.86 vs 490.86 (no codebook: unchanged). The IQ1 codebook as 8 KiB of
// uint32 nibbles instead of 16 KiB of uint64 lost (444.9; docs/experiments/2026-12-01-iq1-nibble-table.patch).
#ifndef DEC_SMEM_TABLES
#define DEC_SMEM_TABLES 1
#endif
// The row dots' MODE template argument: DEC_MODE_SMEM (the codebooks from shared memory) and DEC_MODE_PROBE
// (DEC_UNPACK_PROBE's timing items where the kernel is one of DEC_PROBE_KERNELS).
#define DEC_MODE_SMEM 1
#define DEC_MODE_PROBE 2
#define DEC_TAB (DEC_SMEM_TABLES != 0 ? DEC_MODE_SMEM : 0)
// DEC_PROBE_KERNELS (with DEC_UNPACK_PROBE): the kernels whose items the probe replaces, bits DEC_PK_*: one kernel's
// weight bytes against the others' (default: all four).
#define DEC_PK_MULTI 1  // k_mmvq_multi: Q/K/V and O
#define DEC_PK_GLU 2    // k_moe_glu: gate/up
#define DEC_PK_DOWN 4   // k_moe_down
#ifndef DEC_PROBE_KERNELS
#define DEC_PROBE_KERNELS 7
#endif
#ifdef DEC_UNPACK_PROBE
#define DEC_PROBE(bit) ((DEC_PROBE_KERNELS & (bit)) ? DEC_MODE_PROBE : 0)
#else
#define DEC_PROBE(bit) 0
#endif
#if DEC_SMEM_TABLES
static __shared__ uint64_t dec_s_iq2xxs[256], dec_s_iq2xs[512], dec_s_iq2s[1024], dec_s_iq1s[2048];
static __shared__ uint32_t dec_s_iq3xxs[256], dec_s_iq3s[512];
#endif

// Copies the codebook TYPE's unpack reads into shared memory (all threads of the block; ends with a barrier), or
// nothing where it reads none or DEC_SMEM_TABLES is 0. Call it first in a kernel, before any thread may return.
template <typename T, int N> __device__ __forceinline__ void dec_copy_table(T (&dst)[N], const T (&src)[N]) {
    for (int i = threadIdx.x; i < N; i += blockDim.x) dst[i] = src[i];
    __syncthreads();
}
template <int TYPE> __device__ __forceinline__ void dec_stage_tables() {
#if DEC_SMEM_TABLES
    if constexpr (TYPE == ST_TYPE_IQ2_XXS) dec_copy_table(dec_s_iq2xxs, st_dev_iq2xxs_grid);
    else if constexpr (TYPE == ST_TYPE_IQ2_XS) dec_copy_table(dec_s_iq2xs, st_dev_iq2xs_grid);
    else if constexpr (TYPE == ST_TYPE_IQ2_S) dec_copy_table(dec_s_iq2s, st_dev_iq2s_grid);
    else if constexpr (TYPE == ST_TYPE_IQ3_XXS) dec_copy_table(dec_s_iq3xxs, st_dev_iq3xxs_grid);
    else if constexpr (TYPE == ST_TYPE_IQ3_S) dec_copy_table(dec_s_iq3s, st_dev_iq3s_grid);
    else if constexpr (TYPE == ST_TYPE_IQ1_S || TYPE == ST_TYPE_IQ1_M) dec_copy_table(dec_s_iq1s, st_dev_iq1s_grid);
#endif
}

// Item j of block x of weight type TYPE (the row dots' st_qb_unpack); MODE & DEC_MODE_SMEM: the codebooks from the
// block's copy (the per-type kernel instances under DEC_SMEM_TABLES, which stage it; the runtime-type functions never).
// DEC_UNPACK_PROBE (timing experiment, wrong results): Q4_K / Q6_K items of the DEC_PROBE_KERNELS kernels 1: with
// their loads but no unpack arithmetic (the speed with a free unpack), 2: with neither (no weight reads: the speed
// without weight bytes). 2026-12-01g, all four kernels: tg128 498.2 (1) and 616.2 (2) against 490.5.
#ifdef DEC_UNPACK_PROBE
template <int TYPE> __device__ __forceinline__ void dec_probe_unpack(const uint8_t *x, int j, st_qb_w *w) {
#if DEC_UNPACK_PROBE == 1
    uint32_t q[8], h[8];
    if constexpr (TYPE == ST_TYPE_Q4_K) {
        st_qb_ldw(x, h, 4, 16);
        st_qb_ldw(x + 16 + 32 * (j >> 1), q, 8, 16);
        h[4] = h[5] = h[6] = h[7] = 0;
    } else {
        st_qb_ldw(x + 64 * (j >> 2) + 32 * (j & 1), q, 8, 2);
        st_qb_ldw(x + 128 + 32 * (j >> 2), h, 8, 2);
    }
    ST_QB_UNROLL
    for (int k = 0; k < 8; k++) w->v[k] = (int32_t)(q[k] ^ h[k & 3] ^ h[4 + (k & 3)]);
#else
    ST_QB_UNROLL
    for (int k = 0; k < 8; k++) w->v[k] = (int32_t)(0x01010101u * (unsigned)(j + k));
#endif
    st_qb_set_ab(w, 1e-3f, 1e-3f, 0.0f, 0.0f);
}
#endif

template <int TYPE, int MODE> __device__ __forceinline__ void dec_unpack(const uint8_t *x, int j, st_qb_w *w) {
#ifdef DEC_UNPACK_PROBE
    if constexpr ((MODE & DEC_MODE_PROBE) && (TYPE == ST_TYPE_Q4_K || TYPE == ST_TYPE_Q6_K))
        return dec_probe_unpack<TYPE>(x, j, w);
#endif
#if DEC_SMEM_TABLES
    if constexpr (!(MODE & DEC_MODE_SMEM)) {
    } else if constexpr (TYPE == ST_TYPE_IQ2_XXS) return st_qb_unpack_iq2_xxs_t(x, j, w, dec_s_iq2xxs);
    else if constexpr (TYPE == ST_TYPE_IQ2_XS) return st_qb_unpack_iq2_xs_t(x, j, w, dec_s_iq2xs);
    else if constexpr (TYPE == ST_TYPE_IQ2_S) return st_qb_unpack_iq2_s_t(x, j, w, dec_s_iq2s);
    else if constexpr (TYPE == ST_TYPE_IQ3_XXS) return st_qb_unpack_iq3_xxs_t(x, j, w, dec_s_iq3xxs);
    else if constexpr (TYPE == ST_TYPE_IQ3_S) return st_qb_unpack_iq3_s_t(x, j, w, dec_s_iq3s);
    else if constexpr (TYPE == ST_TYPE_IQ1_S) return st_qb_unpack_iq1_s_t(x, j, w, dec_s_iq1s);
    else if constexpr (TYPE == ST_TYPE_IQ1_M) return st_qb_unpack_iq1_m_t(x, j, w, dec_s_iq1s);
#endif
    st_qb_unpack(TYPE, x, j, w);
}

// switch (type) over DEC_TYPES: CASE(T) for each (it returns), else FALLBACK. The *_any functions below are the
// runtime-type entry points of the row dots (one out-of-line copy each).
#define DEC_TYPE_SWITCH(type, CASE, FALLBACK) \
    switch (type) {                           \
        DEC_TYPES(CASE)                       \
    default: FALLBACK;                        \
    }

// The items (32-weight blocks) one lane takes in a row of nitems, in its summation order: l, l + 32, ... (adjacent
// pairs per lane, whose shared header loads the compiler merges, measured 316 vs 362 tok/s: more registers.)
#define DEC_FOR_ITEMS(it, nitems, lane) for (int it = (lane); it < (nitems); it += G32)

// Activation block `it` of a planar q8_1 row: quants as 8 ints, (d, s) pair.
static __device__ __forceinline__ void load_act(const uint8_t *xq, const uint8_t *xds, int it, int32_t q[8], float2 &ds) {
    const uint4 *qp = (const uint4 *)(xq + (size_t)it * 32);
    const uint4 v0 = qp[0], v1 = qp[1];
    q[0] = (int32_t)v0.x, q[1] = (int32_t)v0.y, q[2] = (int32_t)v0.z, q[3] = (int32_t)v0.w;
    q[4] = (int32_t)v1.x, q[5] = (int32_t)v1.y, q[6] = (int32_t)v1.z, q[7] = (int32_t)v1.w;
    ds = ((const float2 *)xds)[it];
}

// dot(row, x) over nitems items by one 32-lane group; every lane gets the sum.
template <int TYPE, int MODE = 0>
__device__ __forceinline__ float row_dot(const uint8_t *row, const uint8_t *xq, int nitems, int lane) {
    constexpr int IPB = ST_QB_IPB(TYPE), TS = ST_QB_TSIZE(TYPE);
    const uint8_t *xds = xq + (size_t)nitems * 32;
    float acc = 0.0f;
#pragma unroll 2
    DEC_FOR_ITEMS(it, nitems, lane) {  // unrolled: both items' loads in flight together
        int32_t q[8];
        float2 ds;
        load_act(xq, xds, it, q, ds);
        st_qb_w w;
        dec_unpack<TYPE, MODE>(row + (size_t)(it / IPB) * TS, it % IPB, &w);
        acc += st_qb_dot_w(&w, q, ds.x, ds.y, ST_QB_AMODE(TYPE), ST_QB_BMODE(TYPE));
    }
    return g32_sum_f(acc);
}

// row_dot in two halves around a dependency wait: row_stage unpacks the lane's items of a weight row (item lane +
// 32 i into w[i], i < NI, NI * 32 >= nitems) before the wait (weights are no kernel's output), row_dot_staged takes
// them against the activations after it, in row_dot's order (bit for bit): the weights' L2/HBM round trip and
// unpack leave the chain that follows the wait.
template <int TYPE, int MODE, int NI>
__device__ __forceinline__ void row_stage(const uint8_t *row, int nitems, int lane, st_qb_w (&w)[NI]) {
    constexpr int IPB = ST_QB_IPB(TYPE), TS = ST_QB_TSIZE(TYPE);
#pragma unroll
    for (int i = 0; i < NI; i++) {
        const int it = lane + i * G32;
        if (it < nitems) dec_unpack<TYPE, MODE>(row + (size_t)(it / IPB) * TS, it % IPB, &w[i]);
    }
}
template <int TYPE, int NI>
__device__ __forceinline__ float row_dot_staged(const st_qb_w (&w)[NI], const uint8_t *xq, int nitems, int lane) {
    const uint8_t *xds = xq + (size_t)nitems * 32;
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < NI; i++) {
        const int it = lane + i * G32;
        if (it < nitems) {
            int32_t q[8];
            float2 ds;
            load_act(xq, xds, it, q, ds);
            acc += st_qb_dot_w(&w[i], q, ds.x, ds.y, ST_QB_AMODE(TYPE), ST_QB_BMODE(TYPE));
        }
    }
    return g32_sum_f(acc);
}

// Two rows (gate, up) against the same activations in one pass.
template <int TYPE, int MODE = 0>
__device__ __forceinline__ void row_dot2(const uint8_t *ra, const uint8_t *rb, const uint8_t *xq, int nitems, int lane,
                                         float &a, float &b) {
    constexpr int IPB = ST_QB_IPB(TYPE), TS = ST_QB_TSIZE(TYPE);
    const uint8_t *xds = xq + (size_t)nitems * 32;
    float acc_a = 0.0f, acc_b = 0.0f;
#pragma unroll 2
    DEC_FOR_ITEMS(it, nitems, lane) {
        int32_t q[8];
        float2 ds;
        load_act(xq, xds, it, q, ds);
        const size_t off = (size_t)(it / IPB) * TS;
        st_qb_w w;
        dec_unpack<TYPE, MODE>(ra + off, it % IPB, &w);
        acc_a += st_qb_dot_w(&w, q, ds.x, ds.y, ST_QB_AMODE(TYPE), ST_QB_BMODE(TYPE));
        dec_unpack<TYPE, MODE>(rb + off, it % IPB, &w);
        acc_b += st_qb_dot_w(&w, q, ds.x, ds.y, ST_QB_AMODE(TYPE), ST_QB_BMODE(TYPE));
    }
    a = g32_sum_f(acc_a);
    b = g32_sum_f(acc_b);
}

// Runtime type dispatch (uniform per group).
template <int MODE = 0>  // (DEC_MODE_PROBE only: these never read shared-memory codebooks)
static __device__ __noinline__ float row_dot_any(int type, const uint8_t *row, const uint8_t *xq, int nitems, int lane) {
#define RD1(T) \
    case T: return row_dot<T, MODE>(row, xq, nitems, lane);
    DEC_TYPE_SWITCH(type, RD1, return f_nan())
#undef RD1
}
static __device__ __noinline__ void row_dot2_any(int type, const uint8_t *ra, const uint8_t *rb, const uint8_t *xq,
                                                 int nitems, int lane, float *a, float *b) {
#define RD2(T) \
    case T: row_dot2<T>(ra, rb, xq, nitems, lane, *a, *b); return;
    DEC_TYPE_SWITCH(type, RD2, *a = *b = f_nan())
#undef RD2
}

template <typename T> __device__ __forceinline__ float4 ld4(const T *w, int64_t i4);
template <> __device__ __forceinline__ float4 ld4<float>(const float *w, int64_t i4) {
    return ((const float4 *)w)[i4];
}
template <> __device__ __forceinline__ float4 ld4<__half>(const __half *w, int64_t i4) {
    const uint2 u = ((const uint2 *)w)[i4];
    const float2 a = __half22float2(*(const __half2 *)&u.x), b = __half22float2(*(const __half2 *)&u.y);
    return make_float4(a.x, a.y, b.x, b.y);
}
template <> __device__ __forceinline__ float4 ld4<__nv_bfloat16>(const __nv_bfloat16 *w, int64_t i4) {
    const uint2 u = ((const uint2 *)w)[i4];
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                       __uint_as_float(u.y & 0xffff0000u));
}

// The router's input as the CPU sees it: rounded to half for F16 weights (llama.cpp's vec_dot_type), else float.
template <typename T> __device__ __forceinline__ float4 ldx4(const float *x, int64_t i4) { return ((const float4 *)x)[i4]; }
template <> __device__ __forceinline__ float4 ldx4<__half>(const float *x, int64_t i4) {
    const float4 v = ((const float4 *)x)[i4];
    return make_float4(__half2float(__float2half_rn(v.x)), __half2float(__float2half_rn(v.y)),
                       __half2float(__float2half_rn(v.z)), __half2float(__float2half_rn(v.w)));
}

#define ROUTER_PRE 16  // router weights (float4 per lane) loaded before the PDL wait

// The first ROUTER_PRE float4 of a lane's router row go into registers before the dependency wait: the router
// rows are no kernel's output, so their HBM latency overlaps the previous kernel.
template <typename T>
__device__ __forceinline__ void router_preload(const T *w, int n4, int lane, bool have, float4 wp[ROUTER_PRE]) {
#pragma unroll
    for (int u = 0; u < ROUTER_PRE; u++) {
        const int i4 = lane + u * G32;
        wp[u] = have && i4 < n4 ? ld4<T>(w, i4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

// One float4 step of a router dot (one expression, so every kernel that takes it contracts it alike).
__device__ __forceinline__ void router_acc4(float &sum, const float4 a, const float4 b) {
    sum += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
}

// One logit: dot(router row w, x) by one group, i4 ascending per lane, then the butterfly (every lane gets it).
template <typename T>
__device__ __forceinline__ float router_dot(const T *w, const float4 wp[ROUTER_PRE], const float *x, int n4,
                                           int lane) {
    float sum = 0.0f;
#pragma unroll
    for (int u = 0; u < ROUTER_PRE; u++) {
        const int i4 = lane + u * G32;
        if (i4 < n4) router_acc4(sum, wp[u], ldx4<T>(x, i4));
    }
    for (int i4 = lane + ROUTER_PRE * G32; i4 < n4; i4 += G32) router_acc4(sum, ld4<T>(w, i4), ldx4<T>(x, i4));
    return g32_sum_f(sum);
}

// ---- one row normalised by one group, no barrier (the FFN norm folded into the router) ---------------------------
//
// Lane l of a 32-lane group holds float4 u of the row as v[u] = elements 4 (l + 32 u) .. + 3 (the router's layout),
// for rows of n = 4 n4 <= 128 WN_U elements. Every group that needs the RMS scale computes it from the whole row
// itself (a butterfly instead of a block's barriers); each 256-element span is quantized by one group.
#define WN_U ROUTER_PRE  // float4 per lane: rows of up to 2048 elements
static_assert(WN_U % 2 == 0, "a 256-element span is two float4 per lane");

// v[u] = row[4 (lane + 32 u) ..] (0 past n4): a batch of loads in flight together.
__device__ __forceinline__ void wn_load(float4 (&v)[WN_U], const float *row, int n4, int lane) {
#pragma unroll
    for (int u = 0; u < WN_U; u++) {
        const int i4 = lane + u * G32;
        v[u] = i4 < n4 ? ((const float4 *)row)[i4] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

// The RMSNorm scale 1 / sqrt(mean(v^2) + eps) of the group's row of n elements: squares rounded to float and summed
// in double (as norm_load_sumsq; the double sum's order differs, which moves a float result only when a double
// sum's last bits straddle a float rounding boundary), every lane gets it.
__device__ __forceinline__ float wn_scale(const float4 (&v)[WN_U], int n, float eps) {
    double a[4] = {0, 0, 0, 0};
#pragma unroll
    for (int u = 0; u < WN_U; u++) {
        a[0] += (double)__fmul_rn(v[u].x, v[u].x), a[1] += (double)__fmul_rn(v[u].y, v[u].y);
        a[2] += (double)__fmul_rn(v[u].z, v[u].z), a[3] += (double)__fmul_rn(v[u].w, v[u].w);
    }
    return norm_rms_scale(g32_sum_d((a[0] + a[1]) + (a[2] + a[3])), n, eps);
}

// v = v * scale * w (norm_scale's two IEEE products per element; w: wn_load'ed norm weights).
__device__ __forceinline__ void wn_apply(float4 (&v)[WN_U], float scale, const float4 (&w)[WN_U]) {
#pragma unroll
    for (int u = 0; u < WN_U; u++) {
        v[u].x = __fmul_rn(__fmul_rn(v[u].x, scale), w[u].x), v[u].y = __fmul_rn(__fmul_rn(v[u].y, scale), w[u].y);
        v[u].z = __fmul_rn(__fmul_rn(v[u].z, scale), w[u].z), v[u].w = __fmul_rn(__fmul_rn(v[u].w, scale), w[u].w);
    }
}

// a, b = v[2 sp], v[2 sp + 1] by selects on an opaque predicate: the compiler turns a plain select loop back into a
// dynamic index, which puts the whole row in local memory.
__device__ __forceinline__ void wn_span(const float4 (&v)[WN_U], int sp, float4 &a, float4 &b) {
    a = v[0], b = v[1];
#pragma unroll
    for (int u = 2; u < WN_U; u += 2) {
        int hit = u == 2 * sp;
        asm volatile("" : "+r"(hit));
        if (hit) a = v[u], b = v[u + 1];
    }
}

// Quantizes 256-element span sp of the group's row (v[2 sp], v[2 sp + 1]) into the planar row `row` of nb 32-blocks,
// in act_format fmt by the CPU's rules, bit for bit block_quant's: Q8_K (one scale per 256, the first element of
// largest magnitude), or Q8_0 / Q8_1 (eight 32-blocks; the lanes 8 k .. 8 k + 7 hold one between them).
__device__ __forceinline__ void wn_quant_span(const float4 (&v)[WN_U], int sp, int fmt, uint8_t *row, int nb,
                                              int lane) {
    float4 a, b;
    wn_span(v, sp, a, b);
    const float e[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    int q[8];
    float d[2];  // the scales of the lane's two 32-blocks (a's, b's)
    if (fmt == ST_TYPE_Q8_K) {
        int idx[8];  // ascending: 4 lane + j, then 128 + 4 lane + j - 4
#pragma unroll
        for (int j = 0; j < 8; j++) idx[j] = (j < 4 ? 0 : 128 - 4) + 4 * lane + j;
        d[0] = d[1] = q8k_block_idx(e, idx, q);
    } else {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float m = fmaxf(fmaxf(fabsf(e[4 * h]), fabsf(e[4 * h + 1])),
                            fmaxf(fabsf(e[4 * h + 2]), fabsf(e[4 * h + 3])));
#pragma unroll
            for (int o = 1; o < 8; o <<= 1) m = fmaxf(m, __shfl_xor_sync(ST_WARP_MASK, m, o));
            const float id = m != 0.0f ? __fdiv_rn(127.0f, m) : 0.0f;
#pragma unroll
            for (int j = 4 * h; j < 4 * h + 4; j++) q[j] = __float2int_rn(__fmul_rn(e[j], id));
            d[h] = __fdiv_rn(m, 127.0f);
        }
    }
    uint8_t *qs = row + (size_t)sp * 256 + 4 * lane;
    float2 *ds = (float2 *)(row + (size_t)nb * 32) + (size_t)sp * 8 + lane / 8;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int *qh = q + 4 * h;
        *(uint32_t *)(qs + 128 * h) = (uint32_t)(qh[0] & 255) | (uint32_t)(qh[1] & 255) << 8 |
                                      (uint32_t)(qh[2] & 255) << 16 | (uint32_t)(qh[3] & 255) << 24;
        int sum = (qh[0] + qh[1]) + (qh[2] + qh[3]);
#pragma unroll
        for (int o = 1; o < 8; o <<= 1) sum += __shfl_xor_sync(ST_WARP_MASK, sum, o);
        if (lane % 8 == 0) {
            float2 o;
            if (fmt == ST_TYPE_Q8_K) {
                o = make_float2(d[h], __fmul_rn(d[h], (float)sum));
            } else {
                const float d16 = __half2float(__float2half_rn(d[h]));
                o = make_float2(d16, fmt == ST_TYPE_Q8_1 ? __half2float(__float2half_rn(__fmul_rn((float)sum, d[h])))
                                                         : __fmul_rn(d16, (float)sum));
            }
            ds[4 * h] = o;
        }
    }
}

// ROUTE_SORTED (default 1, -DROUTE_SORTED=0 for an A/B build; sm_80+ 32-lane groups, E <= 128): the top-K rounds of
// route_group_t from lane lists sorted once (probability descending, id ascending: a 5-comparator network), so a
// round takes each lane's head instead of scanning its PL values, and only the winning lane shifts its list. The
// same picks in the same order (the order is total: ids differ). The route runs on every GLU block's chain after
// its wait. H100, 2026-12-05e (bench/ab.sh): tg128 551.6 vs 551.0 alone, with GLU_AFFINE 553.9 vs 553.1.
#ifndef ROUTE_SORTED
#define ROUTE_SORTED 1
#endif

// (key, id) pairs a, b in (key descending, id ascending) order.
template <typename T> __device__ __forceinline__ void route_cswap(T &pa, int &ia, T &pb, int &ib) {
    const bool sw = pb > pa || (pb == pa && ib < ia);
    const T tp = sw ? pb : pa;
    const int ti = sw ? ib : ia;
    pb = sw ? pa : pb, ib = sw ? ia : ib;
    pa = tp, ia = ti;
}
// A lane's four (key, id) pairs sorted in that order (a 5-comparator network).
template <typename T> __device__ __forceinline__ void route_sort4(T (&k)[4], int (&id)[4]) {
    route_cswap(k[0], id[0], k[1], id[1]), route_cswap(k[2], id[2], k[3], id[3]);
    route_cswap(k[0], id[0], k[2], id[2]), route_cswap(k[1], id[1], k[3], id[3]);
    route_cswap(k[1], id[1], k[2], id[2]);
}

// The CPU's route of one token by one 32-lane group: logits l[E] (read from L2) -> ids/weights in rank order.
template <int PL>
static __device__ void route_group_t(const float *l, int E, int K, int norm, int32_t *ids, float *weights) {
    const int lane = threadIdx.x % G32;
    float p[PL];
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < PL; j++) {
        const int e = lane + j * G32;
        p[j] = e < E ? __ldcg(l + e) : -INFINITY;
        mx = fmaxf(mx, p[j]);
    }
    mx = g32_max_f(mx);
    double sum = 0;
#pragma unroll
    for (int j = 0; j < PL; j++) {
        const int e = lane + j * G32;
        p[j] = e < E ? (float)exp((double)(p[j] - mx)) : 0.0f;  // accurate exp: the weights feed the sum
        sum += p[j];
    }
    sum = g32_sum_d(sum);
    const float inv = (float)(1.0 / sum);
#pragma unroll
    for (int j = 0; j < PL; j++) {
        const int e = lane + j * G32;
        p[j] = e < E ? __fmul_rn(p[j], inv) : -1.0f;  // -1: no expert / taken (probabilities are >= 0)
    }
    float my_w = 0.0f;  // lane k keeps the k-th pick
    int32_t my_id = 0;
    double wsum = 0;
#if ROUTE_SORTED && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && ST_WARP_SIZE == 32
    if constexpr (PL == 4) {
        int id[4] = {lane, lane + G32, lane + 2 * G32, lane + 3 * G32};
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (!(p[j] >= 0.0f)) p[j] = -1.0f;  // NaN: never picked (the scan's p > bv), like "none"
        route_sort4(p, id);
        for (int k = 0; k < K; k++) {
            // (the scan's key: p >= 0 as its float bits + 1, "none" 0; the lowest id among the largest)
            const unsigned key = p[0] >= 0.0f ? __float_as_uint(p[0]) + 1u : 0u;
            const unsigned mk = __reduce_max_sync(0xffffffffu, key);
            const int bi = (int)__reduce_min_sync(0xffffffffu, key == mk && key ? (unsigned)id[0] : 0x7fffffffu);
            const float bv = mk ? __uint_as_float(mk - 1u) : -1.0f;
            if (key && key == mk && id[0] == bi) {  // this lane's head was taken: the list moves up
                p[0] = p[1], p[1] = p[2], p[2] = p[3], p[3] = -1.0f;
                id[0] = id[1], id[1] = id[2], id[2] = id[3];
            }
            if (lane == k) my_w = bv, my_id = bi;
            wsum += (double)bv;
        }
    } else
#endif
    for (int k = 0; k < K; k++) {
        float bv = -1.0f;
        int bi = 0x7fffffff;
#pragma unroll
        for (int j = 0; j < PL; j++)
            if (p[j] > bv) bv = p[j], bi = lane + j * G32;  // strict: the lower id wins within a lane
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && ST_WARP_SIZE == 32
        // Two warp reductions (one instruction each) instead of five shuffle rounds: the largest value (p >= 0: its
        // float bits order like the values; +1 keeps 0.0 above "none"), then the lowest id holding it.
        const unsigned key = bv >= 0.0f ? __float_as_uint(bv) + 1u : 0u;
        const unsigned mk = __reduce_max_sync(0xffffffffu, key);
        bi = (int)__reduce_min_sync(0xffffffffu, key == mk ? (unsigned)bi : 0x7fffffffu);
        bv = mk ? __uint_as_float(mk - 1u) : -1.0f;
#else
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(ST_WARP_MASK, bv, o);
            const int oi = __shfl_xor_sync(ST_WARP_MASK, bi, o);
            if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
        }
#endif
#pragma unroll
        for (int j = 0; j < PL; j++)
            if (lane + j * G32 == bi) p[j] = -1.0f;
        if (lane == k) my_w = bv, my_id = bi;
        wsum += (double)bv;  // k ascending, in double, as the CPU
    }
    if (lane < K) {
        float w = my_w;
        if (norm) {
            float fs = (float)wsum;
            if (!(fs >= 6.103515625e-5f)) fs = 6.103515625e-5f;
            w = __fdiv_rn(my_w, fs);
        }
        ids[lane] = my_id;
        weights[lane] = w;
    }
}
// GLU_FAST_ROUTE (default 1; decode_glu.cu): the routing GLU blocks take their expert ids from the top
// K + 1 of the logits themselves (softmax is monotone, so no max / exp / sum / division before the K rounds), and
// only a side block computes route_group's weights. route_ids_by_logits gives route_group's ids exactly or says it
// cannot (returns false: the caller falls back to route_group): route_group picks by p = RN(a RN(1 / sum)) with
// a = (float)exp((double)(l - max)), monotone non-decreasing in l, so a larger logit never ranks below a smaller one;
// the two orders differ only where distinct logits give equal p. The ids are route_group's when every adjacent pair
// of the first K + 1 picks has a_k >= 2^-100 and a_k > a_{k+1} (1 + 2^-20): their products by the same inv (>= 1 /
// E) then lie more than two ulps apart, above the normal range's floor, and every unpicked expert's a is at most
// a_K. Falls back on a NaN or all -inf logits, exact ties (equal a), E <= K, and K + 1 > 32.
static __device__ bool route_ids_by_logits(const float *l, int E, int K, int32_t *ids) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && ST_WARP_SIZE == 32
    const int lane = threadIdx.x % G32;
    if (E > 4 * G32 || K + 1 > G32 || E <= K) return false;  // (uniform)
    unsigned key[4];  // order-preserving bits of the logit (negative: all bits flipped, else the sign set); 0: none
    int id[4];
    bool nan = false;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int e = lane + j * G32;
        const float x = e < E ? __ldcg(l + e) : 0.0f;
        const unsigned u = __float_as_uint(x);
        nan |= e < E && x != x;
        key[j] = e < E ? ((u & 0x80000000u) ? ~u : u | 0x80000000u) : 0u;
        id[j] = e;
    }
    if (__any_sync(0xffffffffu, nan)) return false;
    PH_MARK(2);  // (DEC_PHASE_PROBE: the logits are in; the vote consumed them)
    route_sort4(key, id);  // (once per lane, as route_group_t's lists)
    unsigned my_key = 0u;
    int my_id = 0;
    for (int k = 0; k <= K; k++) {
        const unsigned mk = __reduce_max_sync(0xffffffffu, key[0]);
        const int bi = (int)__reduce_min_sync(0xffffffffu, key[0] == mk ? (unsigned)id[0] : 0x7fffffffu);
        if (key[0] == mk && id[0] == bi) {  // this lane's head was taken: the list moves up
            key[0] = key[1], key[1] = key[2], key[2] = key[3], key[3] = 0u;
            id[0] = id[1], id[1] = id[2], id[2] = id[3];
        }
        if (lane == k) my_key = mk, my_id = bi;
    }
    // the picks' logits back from their keys; a as route_group computes it (the difference in float, exp in double)
    const float my_l = __uint_as_float((my_key & 0x80000000u) ? my_key & 0x7fffffffu : ~my_key);
    const float mx = __shfl_sync(0xffffffffu, my_l, 0);
    const float a = lane <= K ? (float)exp((double)(my_l - mx)) : 0.0f;
    const float a_next = __shfl_down_sync(0xffffffffu, a, 1);
    const bool ok = lane >= K || (a >= 0x1p-100f && (double)a > (double)a_next * (1.0 + 0x1p-20));
    if (!__all_sync(0xffffffffu, ok && mx > -INFINITY)) return false;
    if (lane < K) ids[lane] = my_id;
    return true;
#else
    (void)l, (void)E, (void)K, (void)ids;
    return false;
#endif
}

// PL: experts per lane the code is unrolled for (E <= 32 PL); the common E <= 128 gets a 4x smaller body (this runs
// once per token per layer, so its instructions come cold from L2: code size is latency here).
static __device__ void route_group(const float *l, int E, int K, int norm, int32_t *ids, float *weights) {
    if (E <= 4 * G32) route_group_t<4>(l, E, K, norm, ids, weights);
    else route_group_t<ROUTER_MAX_PER_LANE>(l, E, K, norm, ids, weights);
}

#ifndef ST_ROWS_BRANCHFREE
#define ST_ROWS_BRANCHFREE 1  // 0: a branch per NULL row again (an A/B build of 2026-11-30h's change)
#endif
// The rows of a branch-free pass: a NULL row reads the first non-NULL row instead (its result is dropped), so the
// loads of every row of an item issue together. A `continue` per NULL row made each row's loads wait behind a
// branch, i.e. behind the previous row's arithmetic on its loaded data: one memory round trip per row and item.
// (Selects, not an index: a runtime index into the arrays would put them in local memory.) False when all are NULL.
template <int N>
__device__ __forceinline__ bool rows_or_first(const uint8_t *const *rows, const uint8_t **r,
                                              const uint8_t *const *xs_in = nullptr, const uint8_t **xs = nullptr) {
    const uint8_t *any = nullptr, *any_x = nullptr;
#pragma unroll
    for (int n = N - 1; n >= 0; n--)
        if (rows[n]) any = rows[n], any_x = xs_in ? xs_in[n] : nullptr;
#pragma unroll
    for (int n = 0; n < N; n++) {
        r[n] = rows[n] ? rows[n] : any;
        if (xs) xs[n] = rows[n] ? xs_in[n] : any_x;
    }
    return any != nullptr;
}

// out[n] = the group sum of acc[n] where rows[n] is given (else left NaN), as g32_sum_f: four at a time by
// g32_sum4 (bit for bit; half the shuffles, which issue at 32 lanes per clock per SM while every warp of the GLU
// launch reduces its rows at about the same time). ST_SUM4 0: the separate butterflies (an A/B build). (The down
// kernel's row_dotN with these sums, row n in lane 8 n, -DST_SUM4_DOWN=1, lost on an H200: tg128 -0.4%, its Q4_K /
// Q6_K instances spilling 16 / 4 bytes instead of 4 / 0; removed 2026-12-05,
// docs/experiments/2026-12-05-sum4-down.patch.)
#ifndef ST_SUM4
#define ST_SUM4 1
#endif
template <int N>
__device__ __forceinline__ void g32_sum_rows(const uint8_t *const *rows, const float (&acc)[N], int lane, float *out) {
    if constexpr (ST_SUM4 && N % 4 == 0) {
#pragma unroll
        for (int n0 = 0; n0 < N; n0 += 4) {
            const float a[4] = {acc[n0], acc[n0 + 1], acc[n0 + 2], acc[n0 + 3]};
            float s[4];
            g32_sum4(a, lane, s);
#pragma unroll
            for (int n = 0; n < 4; n++)
                if (rows[n0 + n]) out[n0 + n] = s[n];
        }
    } else {
#pragma unroll
        for (int n = 0; n < N; n++)
            if (rows[n]) out[n] = g32_sum_f(acc[n]);
    }
}

// N rows against N activation rows in one pass (rows[n] NULL: out[n] NaN); same per-row arithmetic and order as
// row_dot.
template <int TYPE, int N, int MODE = 0>
__device__ __forceinline__ void row_dotN(const uint8_t *const *rows, const uint8_t *const *xqs, int nitems, int lane,
                                         float *out) {
    constexpr int IPB = ST_QB_IPB(TYPE), TS = ST_QB_TSIZE(TYPE);
    const uint8_t *r[N], *xs[N];
#pragma unroll
    for (int n = 0; n < N; n++) out[n] = f_nan();
    if (!rows_or_first<N>(rows, r, xqs, xs)) return;
    float acc[N];
#pragma unroll
    for (int n = 0; n < N; n++) acc[n] = 0.0f;
    DEC_FOR_ITEMS(it, nitems, lane) {
#pragma unroll
        for (int n = 0; n < N; n++) {
            if (!ST_ROWS_BRANCHFREE && !rows[n]) continue;
            int32_t q[8];
            float2 ds;
            load_act(xs[n], xs[n] + (size_t)nitems * 32, it, q, ds);
            st_qb_w w;
            dec_unpack<TYPE, MODE>(r[n] + (size_t)(it / IPB) * TS, it % IPB, &w);
            acc[n] += st_qb_dot_w(&w, q, ds.x, ds.y, ST_QB_AMODE(TYPE), ST_QB_BMODE(TYPE));
        }
    }
#pragma unroll
    for (int n = 0; n < N; n++)
        if (rows[n]) out[n] = g32_sum_f(acc[n]);
}
#define DOWN_N 4  // row dots per group pass (the down kernel)


// N rows against one activation row (the MoE GLU's gate and up rows of several outputs): the activation block is
// loaded once per item; per-row arithmetic and order as row_dot (rows[n] NULL: out[n] NaN; branch-free as row_dotN).
template <int TYPE, int N, int MODE = 0>
__device__ __forceinline__ void rows_dot_x(const uint8_t *const *rows, const uint8_t *xq, int nitems, int lane,
                                           float *out) {
    constexpr int IPB = ST_QB_IPB(TYPE), TS = ST_QB_TSIZE(TYPE);
    const uint8_t *xds = xq + (size_t)nitems * 32;
    const uint8_t *r[N];
#pragma unroll
    for (int n = 0; n < N; n++) out[n] = f_nan();
    if (!rows_or_first<N>(rows, r)) return;
    float acc[N];
#pragma unroll
    for (int n = 0; n < N; n++) acc[n] = 0.0f;
#pragma unroll 2
    DEC_FOR_ITEMS(it, nitems, lane) {
        int32_t q[8];
        float2 ds;
        load_act(xq, xds, it, q, ds);
#pragma unroll
        for (int n = 0; n < N; n++) {
            if (!ST_ROWS_BRANCHFREE && !rows[n]) continue;
            st_qb_w w;
            dec_unpack<TYPE, MODE>(r[n] + (size_t)(it / IPB) * TS, it % IPB, &w);
            acc[n] += st_qb_dot_w(&w, q, ds.x, ds.y, ST_QB_AMODE(TYPE), ST_QB_BMODE(TYPE));
        }
    }
    g32_sum_rows<N>(rows, acc, lane, out);
}
#define ROWS_X_N 4  // rows per rows_dot_x4_any pass
static __device__ __noinline__ void rows_dot_x4_any(int type, const uint8_t *const *rows, const uint8_t *xq, int nitems,
                                                    int lane, float *out) {
#define RDX(T) \
    case T: rows_dot_x<T, ROWS_X_N>(rows, xq, nitems, lane, out); return;
    DEC_TYPE_SWITCH(type, RDX, for (int n = 0; n < ROWS_X_N; n++) out[n] = f_nan())
#undef RDX
}

// The rank-order weighted sum of K expert outputs of one row, the CPU's order with every step IEEE-rounded:
// o = w[0] y_0; o = o + w[k] y_k. ys: the per-expert outputs, y_k = ys[k * ld + rr].
static __device__ __forceinline__ float rank_sum(const float *ys, int ld, int rr, const float *w, int K) {
    float o = __fmul_rn(ys[rr], w[0]);
    for (int k = 1; k < K; k++) o = __fadd_rn(o, __fmul_rn(ys[k * ld + rr], w[k]));
    return o;
}

#endif
