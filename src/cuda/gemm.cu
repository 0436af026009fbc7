// Prefill matrix products (see gemm.h): dequantize-to-f16 + cuBLAS, the int8 tensor-core kernel ("mmq") on weight
// tiles unpacked on the fly, and the expert-grouped MoE feed-forward built from them.
#include "cuda/act_math.h"  // the CPU's SwiGLU arithmetic
#include "cuda/gemm.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_fp16.h>

#include "cuda/decode_common.cuh"  // the CPU-format quantizers (q8_32, q8k_block)
#include "cuda/qblock.h"
#include "cuda/quantize_act.h"
#include "quant/quant.h"
#include "util/log.h"

// cuBLAS workspace set once at create time: without it cuBLAS may allocate during graph capture.
#define GEMM_CUBLAS_WS (32u << 20)

struct st_gemm_ctx {
    st_cuda_ctx *ctx;
    cublasHandle_t h;
    void *ws;                 // device [GEMM_CUBLAS_WS] bytes, cuBLAS workspace
    int32_t *h_counts;        // pinned host [ST_GEMM_MAX_EXPERT + 1]: counts then total valid pairs
    void **h_ptrs;            // pinned host [6 * ST_GEMM_MAX_EXPERT]: A/B/C pointer arrays of the grouped GEMMs
    int last_n_expert;
    int grouped_unsupported;  // cublasGemmGroupedBatchedEx returned NOT_SUPPORTED once: use the loop
};
#define ST_GEMM_MAX_EXPERT 1024

static const char *cublas_name(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_?";
    }
}
#define ST_CUBLAS_CHECK(call)                                                                        \
    do {                                                                                             \
        cublasStatus_t st_cb_s_ = (call);                                                            \
        if (st_cb_s_ != CUBLAS_STATUS_SUCCESS)                                                       \
            return st_err("%s:%d: %s: %s (%d)", __FILE__, __LINE__, #call, cublas_name(st_cb_s_), (int)st_cb_s_); \
    } while (0)

// Carves consecutive 256-byte aligned pieces out of a scratch buffer.
struct carve {
    uint8_t *p;
    size_t used, cap;
    void *take(size_t bytes) {
        void *r = p ? p + used : NULL;
        used += st_gemm_align(bytes);
        return r;
    }
};

// ---------------------------------------------------------------------------------------------------------------
// Handle.

extern "C" st_gemm_ctx *st_cuda_gemm_create(st_cuda_ctx *ctx) {
    if (st_cuda_set_device(ctx)) return NULL;
    st_gemm_ctx *g = (st_gemm_ctx *)calloc(1, sizeof *g);
    if (!g) {
        st_err("st_cuda_gemm_create: out of host memory");
        return NULL;
    }
    g->ctx = ctx;
    cublasStatus_t s = cublasCreate(&g->h);
    if (s != CUBLAS_STATUS_SUCCESS) {
        st_err("CUDA device %d: cublasCreate: %s", ctx->device, cublas_name(s));
        free(g);
        return NULL;
    }
    g->ws = st_cuda_alloc(ctx, GEMM_CUBLAS_WS, "cuBLAS workspace");
    if (!g->ws) goto fail;
    s = cublasSetWorkspace(g->h, g->ws, GEMM_CUBLAS_WS);
    if (s != CUBLAS_STATUS_SUCCESS) {
        st_err("CUDA device %d: cublasSetWorkspace: %s", ctx->device, cublas_name(s));
        goto fail;
    }
    if (cudaMallocHost((void **)&g->h_counts, (ST_GEMM_MAX_EXPERT + 1) * sizeof(int32_t)) != cudaSuccess ||
        cudaMallocHost((void **)&g->h_ptrs, 6 * ST_GEMM_MAX_EXPERT * sizeof(void *)) != cudaSuccess) {
        cudaGetLastError();
        st_err("CUDA device %d: cudaMallocHost of %zu bytes for MoE counts failed", ctx->device,
               (size_t)(ST_GEMM_MAX_EXPERT + 1) * 4 + 6 * ST_GEMM_MAX_EXPERT * sizeof(void *));
        goto fail;
    }
    if (!ctx->cublas) ctx->cublas = g->h;
    return g;
fail:
    st_cuda_gemm_destroy(g);
    return NULL;
}

extern "C" void st_cuda_gemm_destroy(st_gemm_ctx *g) {
    if (!g) return;
    cudaSetDevice(g->ctx->device);
    if (g->ctx->cublas == (void *)g->h) g->ctx->cublas = NULL;
    if (g->h) cublasDestroy(g->h);
    st_cuda_free(g->ctx, g->ws);
    if (g->h_counts) cudaFreeHost(g->h_counts);
    if (g->h_ptrs) cudaFreeHost(g->h_ptrs);
    free(g);
}

extern "C" const int32_t *st_cuda_moe_last_counts(const st_gemm_ctx *g) {
    return g && g->last_n_expert ? g->h_counts : NULL;
}

// ---------------------------------------------------------------------------------------------------------------
// Type tables.

#define GEMM_FOR_QTYPES(X) ST_GEMM_MMQ_TYPES(X)  // (cuda/gemm_sizes.h)
// IQ1_M has offsets per 8 elements (ST_QB_BMODE 3), which the per-16 epilogue of mmq does not carry.
#define GEMM_FOR_DQTYPES(X) GEMM_FOR_QTYPES(X) X(ST_TYPE_IQ1_M) X(ST_TYPE_F32) X(ST_TYPE_F16) X(ST_TYPE_BF16)

extern "C" int st_cuda_gemm_supported(int t) {
#define X(T) if (t == T) return 1;
    GEMM_FOR_DQTYPES(X)
#undef X
    return 0;
}
extern "C" int st_cuda_mmq_supported(int t) { return st_gemm_mmq_type(t); }

// Elements per block as the kernels see it (32 for the float types: one "item").
static int gemm_block_elems(int t) {
    if (ST_QB_IS_FLOAT(t)) return 32;
    const st_type_info *ti = st_type_get(t);
    return ti ? ti->block_size : 0;
}

// ---------------------------------------------------------------------------------------------------------------
// Dequantization to f16 and conversions.

__device__ __forceinline__ __half sat_half(float v) { return __float2half_rn(fminf(fmaxf(v, -65504.0f), 65504.0f)); }

// One thread per 32-weight item: unpack (qblock.h) and write 64 bytes of halves.
template <int TYPE>
__global__ void __launch_bounds__(256) k_dequant_f16(const uint8_t *__restrict__ W, long long row_bytes, int nitems,
                                                     long long n_items, long long group_rows, long long dst_group_rows,
                                                     long long ne0, __half *__restrict__ out) {
    const long long it = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (it >= n_items) return;
    const long long r = it / nitems;
    const int i = (int)(it % nitems);
    const long long dr = (r / group_rows) * dst_group_rows + r % group_rows;
    const uint8_t *row = W + r * row_bytes;
    float f[32];
    if (TYPE == ST_TYPE_F32) {
        const float4 *p = (const float4 *)(row + (size_t)i * 128);
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float4 v = p[k];
            f[4 * k] = v.x, f[4 * k + 1] = v.y, f[4 * k + 2] = v.z, f[4 * k + 3] = v.w;
        }
    } else if (TYPE == ST_TYPE_F16 || TYPE == ST_TYPE_BF16) {
        uint32_t u[16];
        st_qb_ldw(row + (size_t)i * 64, u, 16, 16);
#pragma unroll
        for (int k = 0; k < 32; k++) {
            const uint32_t h = (u[k / 2] >> (16 * (k % 2))) & 0xffff;
            f[k] = TYPE == ST_TYPE_F16 ? st_qb_f16(h) : st_qb_bf16(h);
        }
    } else {
        constexpr int IPB = ST_QB_IPB(TYPE), TS = ST_QB_TSIZE(TYPE);
        st_qb_w w;
        st_qb_unpack(TYPE, row + (size_t)(i / IPB) * TS, i % IPB, &w);
#pragma unroll
        for (int k = 0; k < 32; k++) f[k] = w.a[k / 8] * (float)(int8_t)(w.v[k / 4] >> (8 * (k % 4))) + w.b[k / 8];
    }
    uint4 *o = (uint4 *)(out + dr * ne0 + (long long)i * 32);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        uint32_t u[4];
#pragma unroll
        for (int m = 0; m < 4; m++) {
            const __half2 h2 = __halves2half2(sat_half(f[8 * k + 2 * m]), sat_half(f[8 * k + 2 * m + 1]));
            u[m] = *(const uint32_t *)&h2;
        }
        o[k] = make_uint4(u[0], u[1], u[2], u[3]);
    }
}

extern "C" int st_cuda_dequant_f16(st_cuda_ctx *ctx, int type, const void *W_dev, int64_t ne0, int64_t n_rows,
                                   int64_t group_rows, int64_t dst_group_rows, void *out_f16, cudaStream_t stream) {
    const int bs = gemm_block_elems(type);
    if (!st_cuda_gemm_supported(type) || bs <= 0)
        return st_err("st_cuda_dequant_f16: weight type %s is not supported", st_type_name(type));
    if (ne0 <= 0 || ne0 % bs || n_rows < 0 || group_rows <= 0 || dst_group_rows < group_rows)
        return st_err("st_cuda_dequant_f16: bad sizes (type %s, ne0 %lld: multiple of %d needed, rows %lld, "
                      "group %lld/%lld)",
                      st_type_name(type), (long long)ne0, bs, (long long)n_rows, (long long)group_rows,
                      (long long)dst_group_rows);
    if (((uintptr_t)W_dev & 15) || ((uintptr_t)out_f16 & 15))
        return st_err("st_cuda_dequant_f16: W_dev and out_f16 must be 16-byte aligned");
    if (n_rows == 0) return 0;
    if (st_cuda_set_device(ctx)) return -1;
    const long long nitems = ne0 / 32, n_items = nitems * n_rows;
    const long long rb = (long long)st_row_size(type, ne0);
    const long long blocks = (n_items + 255) / 256;
    if (blocks > INT_MAX) return st_err("st_cuda_dequant_f16: %lld rows x %lld is too large", (long long)n_rows, (long long)ne0);
    switch (type) {
#define X(T)                                                                                                      \
    case T:                                                                                                       \
        k_dequant_f16<T><<<(unsigned)blocks, 256, 0, stream>>>((const uint8_t *)W_dev, rb, (int)nitems, n_items, \
                                                             group_rows, dst_group_rows, ne0, (__half *)out_f16); \
        break;
        GEMM_FOR_DQTYPES(X)
#undef X
    default: return st_err("st_cuda_dequant_f16: type %s", st_type_name(type));
    }
    return st_cuda_check_launch(ctx, "dequant_f16");
}

// y[i] = half(x[src row][c]); map (optional): row r reads source row map[r] / map_div; rows >= *n_rows_dev
// (optional) are skipped.
__global__ void k_rows_to_f16(const float *__restrict__ x, const int32_t *__restrict__ map, int map_div,
                              const int32_t *__restrict__ n_rows_dev, long long n_rows, long long ne0,
                              __half *__restrict__ y) {
    const long long r = blockIdx.y + 65535LL * blockIdx.z;
    if (r >= n_rows || (n_rows_dev && r >= *n_rows_dev)) return;
    const long long src = map ? map[r] / map_div : r;
    for (long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x; c < ne0; c += (long long)gridDim.x * blockDim.x)
        y[r * ne0 + c] = sat_half(x[src * ne0 + c]);
}

static dim3 rows_grid(long long n_rows, long long ne0) {
    const unsigned gx = (unsigned)((ne0 + 255) / 256 < 64 ? (ne0 + 255) / 256 : 64);
    return dim3(gx, (unsigned)(n_rows < 65535 ? n_rows : 65535), (unsigned)((n_rows + 65534) / 65535));
}

extern "C" int st_cuda_f32_to_f16(st_cuda_ctx *ctx, const float *x, void *y_f16, int64_t n, cudaStream_t stream) {
    if (n <= 0) return n < 0 ? st_err("st_cuda_f32_to_f16: n %lld", (long long)n) : 0;
    if (st_cuda_set_device(ctx)) return -1;
    // One "row" of n elements.
    k_rows_to_f16<<<dim3((unsigned)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096), 1, 1), 256, 0, stream>>>(
        x, NULL, 1, NULL, 1, n, (__half *)y_f16);
    return st_cuda_check_launch(ctx, "f32_to_f16");
}

// ---------------------------------------------------------------------------------------------------------------
// int8 activation rows for mmq: q int8 [rows][ne0], d f32 [rows][ne0/32] (amax / 127), s f32 [rows][ne0/16]
// (d * sum of the 16 quants). MODE 0: x rows (optionally gathered through map[r] / map_div); MODE 1: the SwiGLU
// silu(x[r][c]) * x[r][n_ff + c] of gate/up rows of width 2 ne0.

template <int MODE>
__global__ void __launch_bounds__(256) k_quant_rows(const float *__restrict__ x, long long ldx,
                                                    const int32_t *__restrict__ map, int map_div,
                                                    const int32_t *__restrict__ n_rows_dev, long long n_rows,
                                                    int ne0, int8_t *__restrict__ q, float *__restrict__ d,
                                                    float *__restrict__ s) {
    const long long r = blockIdx.x + 65535LL * blockIdx.y;
    if (r >= n_rows || (n_rows_dev && r >= *n_rows_dev)) return;
    const long long src = map ? map[r] / map_div : r;
    const float *xr = x + src * ldx;
    const int lane = threadIdx.x & 31;  // 32-element groups (also on wave64: shuffles below stay within 32 lanes)
    for (int c = threadIdx.x; c < ne0; c += blockDim.x) {  // ne0 % 32 == 0: groups of 32 threads stay together
        float v;
        if (MODE == 0) {
            v = xr[c];
        } else {
            const float gt = xr[c];
            v = st_am_silu_mul(gt, xr[ne0 + c]);
        }
        float amax = fabsf(v);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(ST_WARP_FULL_MASK, amax, o, 32));
        const float dd = amax / 127.0f;
        const int qi = dd != 0.0f ? (int)roundf(v / dd) : 0;
        int sum = qi;
#pragma unroll
        for (int o = 8; o > 0; o >>= 1) sum += __shfl_xor_sync(ST_WARP_FULL_MASK, sum, o, 32);
        q[r * ne0 + c] = (int8_t)qi;
        if (lane == 0) d[r * (ne0 / 32) + c / 32] = dd;
        if ((lane & 15) == 0) s[r * (ne0 / 16) + c / 16] = dd * (float)sum;
    }
}

// The same rows in the CPU backend's activation format for the weights (st_cuda_act_format; the default since
// 2026-11-30f, STRATA_MMQ_CPU_ACT=0 for llama.cpp's q8_1 rows above: CPU parity of the prefill products at no cost,
// pp512 14,124 vs 14,116 tok/s on an H200; layer 0 of tiny-qwen3 Q4_K_M 2.7e-7 from the CPU instead of 1.1e-2): the CPU's int8 quants and scales, Q8_0 / Q8_1 per 32 elements with
// the scale rounded to half as the CPU stores it, Q8_K per 256; in the mmq layout, s per 16 = d * the 16 quants'
// sum, except Q8_1: the CPU's one half-rounded d * sum per 32 in the first 16-slot, 0 in the second (the weights
// that take Q8_1 have one offset per 32, so b * s32 + b * 0 is the CPU's term). One 32-lane group per block.
template <int FMT>
__global__ void __launch_bounds__(256) k_quant_rows_cpu(const float *__restrict__ x, long long ldx,
                                                        const int32_t *__restrict__ n_rows_dev, long long n_rows,
                                                        int ne0, int8_t *__restrict__ q, float *__restrict__ d,
                                                        float *__restrict__ s) {
    const long long r = blockIdx.x + 65535LL * blockIdx.y;
    if (r >= n_rows || (n_rows_dev && r >= *n_rows_dev)) return;
    const float *xr = x + r * ldx;
    int8_t *qr = q + r * ne0;
    float *dr = d + r * (ne0 / 32), *sr = s + r * (ne0 / 16);
    const int lane = threadIdx.x % 32, g = threadIdx.x / 32, ng = blockDim.x / 32;
    if (FMT == ST_TYPE_Q8_K) {
        for (int kb = g; kb < ne0 / 256; kb += ng) {
            float v[8];
            int qv[8];
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = xr[kb * 256 + 32 * j + lane];
            const float dd = q8k_block(lane, v, qv);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                qr[kb * 256 + 32 * j + lane] = (int8_t)qv[j];
                int h = qv[j];
#pragma unroll
                for (int o = 8; o > 0; o >>= 1) h += __shfl_xor_sync(ST_WARP_FULL_MASK, h, o, 32);
                if ((lane & 15) == 0) sr[kb * 16 + 2 * j + lane / 16] = __fmul_rn(dd, (float)h);
            }
            if (lane < 8) dr[kb * 8 + lane] = dd;
        }
    } else {
        for (int b = g; b < ne0 / 32; b += ng) {
            float dd;
            const int qi = q8_32(xr[b * 32 + lane], dd);
            const float d16 = __half2float(__float2half_rn(dd));
            qr[b * 32 + lane] = (int8_t)qi;
            int h = qi;
#pragma unroll
            for (int o = 8; o > 0; o >>= 1) h += __shfl_xor_sync(ST_WARP_FULL_MASK, h, o, 32);
            if (FMT == ST_TYPE_Q8_1) {
                const int h32 = h + __shfl_xor_sync(ST_WARP_FULL_MASK, h, 16, 32);
                if (lane == 0) sr[2 * b] = __half2float(__float2half_rn(__fmul_rn((float)h32, dd))), sr[2 * b + 1] = 0.0f;
            } else if ((lane & 15) == 0) {
                sr[2 * b + lane / 16] = __fmul_rn(d16, (float)h);
            }
            if (lane == 0) dr[b] = d16;
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// int8 tensor-core GEMM.
//
// A CTA computes a tile of MMQ_BM weight rows x BN activation rows, walking K in tiles of 256 elements (8 items).
// Per K tile the weight rows are unpacked from their blocks (st_qb_unpack: 32 int8 + per-8 scale/offset) into
// shared memory as int8 with the scale a and offset b per 16 elements; the activation rows' int8 quants, scales d
// and 16-sums s are copied next to them. 8 warps: warp w takes rows 16 (w % 4).. and tokens (w / 4) BN/2.. of the
// tile; each item (32 k) is one m16n8k32 MMA per 8 tokens when the scale is per 32 (AMODE 1), two m16n8k16 when it
// is per 16, and the integer sums are folded into float accumulators: acc += a_row d_tok isum + b_row s_tok.
// Shared rows are padded to 272 bytes so the fragment loads (row g, word tig) hit 32 different banks.

#define MMQ_BM 64
#define MMQ_BK ST_GEMM_BK
#define MMQ_LDS (MMQ_BK + 16)
#define MMQ_THREADS 256

struct mmq_args {
    const uint8_t *W;        // weights; MoE: expert 0 of the stack
    const uint8_t *W2;       // MoE gate/up: the up stack (blockIdx.z == 1), else NULL
    long long row_bytes;     // bytes per weight row
    long long expert_bytes;  // bytes per expert (MoE)
    int ne0;                 // K, multiple of 256
    int n_out;               // weight rows
    const int8_t *xq;        // activation quants [rows][ne0]
    const float *xd;         // [rows][ne0 / 32]
    const float *xs;         // [rows][ne0 / 16]
    int n_rows;              // dense: activation rows (tokens)
    float *y;                // output rows: y[row * ldy + col_off + r]
    long long ldy;
    int col_off2;            // column offset for blockIdx.z == 1 (gate/up: n_ff)
    const int32_t *tile_e;   // MoE tiles: expert, first row, row count; NULL for dense
    const int32_t *tile_r0;
    const int32_t *tile_n;
    const int32_t *n_tiles;  // device count of valid tiles
};

__device__ __forceinline__ int lds32(const int8_t *p) { return *(const int *)p; }

// c += A(16x32, rows of a0..a3) . B(32x8, b0, b1) with the PTX m16n8k32 fragment layout; the portable fallback
// computes the same per-lane results through shuffles and dp4a.
__device__ __forceinline__ void mma_k32(int (&c)[4], int a0, int a1, int a2, int a3, int b0, int b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(ST_MMQ_PORTABLE)
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    const int lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
#pragma unroll
    for (int t = 0; t < 4; t++) {
        // Row g / g+8 words t (k 4t..) and 4+t (k 16+4t..) live on lane 4g+t; column n's on lane 4n+t.
        const int ra0 = __shfl_sync(ST_WARP_FULL_MASK, a0, 4 * g + t, 32);
        const int ra1 = __shfl_sync(ST_WARP_FULL_MASK, a1, 4 * g + t, 32);
        const int ra2 = __shfl_sync(ST_WARP_FULL_MASK, a2, 4 * g + t, 32);
        const int ra3 = __shfl_sync(ST_WARP_FULL_MASK, a3, 4 * g + t, 32);
        const int bA0 = __shfl_sync(ST_WARP_FULL_MASK, b0, 4 * (2 * tig) + t, 32);
        const int bA1 = __shfl_sync(ST_WARP_FULL_MASK, b1, 4 * (2 * tig) + t, 32);
        const int bB0 = __shfl_sync(ST_WARP_FULL_MASK, b0, 4 * (2 * tig + 1) + t, 32);
        const int bB1 = __shfl_sync(ST_WARP_FULL_MASK, b1, 4 * (2 * tig + 1) + t, 32);
        c[0] = st_dp4a(ra2, bA1, st_dp4a(ra0, bA0, c[0]));
        c[1] = st_dp4a(ra2, bB1, st_dp4a(ra0, bB0, c[1]));
        c[2] = st_dp4a(ra3, bA1, st_dp4a(ra1, bA0, c[2]));
        c[3] = st_dp4a(ra3, bB1, st_dp4a(ra1, bB0, c[3]));
    }
#endif
}

// m16n8k16: A(16x16: a0 row g, a1 row g+8, k 4 tig..), B(16x8: b0 k 4 tig.., column g).
__device__ __forceinline__ void mma_k16(int (&c)[4], int a0, int a1, int b0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(ST_MMQ_PORTABLE)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b0));
#else
    const int lane = threadIdx.x & 31, g = lane >> 2, tig = lane & 3;
#pragma unroll
    for (int t = 0; t < 4; t++) {
        const int ra0 = __shfl_sync(ST_WARP_FULL_MASK, a0, 4 * g + t, 32);
        const int ra1 = __shfl_sync(ST_WARP_FULL_MASK, a1, 4 * g + t, 32);
        const int bA = __shfl_sync(ST_WARP_FULL_MASK, b0, 4 * (2 * tig) + t, 32);
        const int bB = __shfl_sync(ST_WARP_FULL_MASK, b0, 4 * (2 * tig + 1) + t, 32);
        c[0] = st_dp4a(ra0, bA, c[0]);
        c[1] = st_dp4a(ra0, bB, c[1]);
        c[2] = st_dp4a(ra1, bA, c[2]);
        c[3] = st_dp4a(ra1, bB, c[3]);
    }
#endif
}

template <int BN>
static constexpr size_t mmq_smem_bytes() {
    return (size_t)MMQ_BM * MMQ_LDS + (size_t)BN * MMQ_LDS + 2 * (size_t)MMQ_BM * 16 * 4 + (size_t)BN * 8 * 4 +
           (size_t)BN * 16 * 4;
}

template <int TYPE, int BN>
__global__ void __launch_bounds__(MMQ_THREADS, 2) k_mmq(const mmq_args a) {
    constexpr int IPB = ST_QB_IPB(TYPE), TS = ST_QB_TSIZE(TYPE);
    constexpr int AMODE = ST_QB_AMODE(TYPE), BMODE = ST_QB_BMODE(TYPE);
    constexpr int NT = BN / 16;  // n8 tiles per warp (each warp covers BN/2 tokens)
    extern __shared__ __align__(16) uint8_t smem[];
    int8_t *Ws = (int8_t *)smem;                                   // [BM][LDS] weight quants
    int8_t *Xs = Ws + MMQ_BM * MMQ_LDS;                            // [BN][LDS] activation quants
    float *Wa = (float *)(Xs + BN * MMQ_LDS);                      // [BM][16] scale per 16 k
    float *Wb = Wa + MMQ_BM * 16;                                  // [BM][16] offset per 16 k
    float *Xd = Wb + MMQ_BM * 16;                                  // [BN][8] activation scale per 32 k
    float *Xsum = Xd + BN * 8;                                     // [BN][16] d * sum(q) per 16 k

    // Which rows of activations/outputs this CTA covers.
    const uint8_t *W = blockIdx.z == 1 ? a.W2 : a.W;
    int row0, nrows;
    if (a.tile_e) {
        const int tile = blockIdx.y;
        if (tile >= *a.n_tiles || a.tile_e[tile] < 0) return;  // (< 0: no slot, k_moe_remap_tiles)
        W += (size_t)a.tile_e[tile] * (size_t)a.expert_bytes;
        row0 = a.tile_r0[tile];
        nrows = a.tile_n[tile];
    } else {
        row0 = blockIdx.y * BN;
        nrows = min(BN, a.n_rows - row0);
    }
    const int o0 = blockIdx.x * MMQ_BM;  // first weight row
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, tig = lane & 3;
    const int wm = (warp & 3) * 16, wn = (warp >> 2) * (BN / 2);

    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

    const int nk = a.ne0 / MMQ_BK;
    for (int kt = 0; kt < nk; kt++) {
        __syncthreads();  // previous tile's reads are done
        // Weights: 64 rows x 8 items.
#pragma unroll
        for (int k = 0; k < MMQ_BM * 8 / MMQ_THREADS; k++) {
            const int idx = tid + k * MMQ_THREADS;
            const int r = idx >> 3, j = idx & 7;
            const int orow = min(o0 + r, a.n_out - 1);
            const int ig = kt * 8 + j;
            st_qb_w w;
            st_qb_unpack(TYPE, W + (size_t)orow * (size_t)a.row_bytes + (size_t)(ig / IPB) * TS, ig % IPB, &w);
            int4 *dst = (int4 *)(Ws + r * MMQ_LDS + j * 32);
            dst[0] = make_int4(w.v[0], w.v[1], w.v[2], w.v[3]);
            dst[1] = make_int4(w.v[4], w.v[5], w.v[6], w.v[7]);
            Wa[r * 16 + 2 * j] = w.a[0];
            Wa[r * 16 + 2 * j + 1] = w.a[2];
            Wb[r * 16 + 2 * j] = w.b[0];
            Wb[r * 16 + 2 * j + 1] = w.b[2];
        }
        // Activations: BN rows x 256 bytes as 16-byte pieces; rows past the tile are zero.
#pragma unroll
        for (int k = 0; k < BN * 16 / MMQ_THREADS; k++) {
            const int idx = tid + k * MMQ_THREADS;
            const int t = idx >> 4, c = idx & 15;
            int4 v = make_int4(0, 0, 0, 0);
            if (t < nrows) v = *(const int4 *)(a.xq + (size_t)(row0 + t) * a.ne0 + (size_t)kt * MMQ_BK + c * 16);
            *(int4 *)(Xs + t * MMQ_LDS + c * 16) = v;
        }
        for (int idx = tid; idx < BN * 8; idx += MMQ_THREADS) {
            const int t = idx >> 3, c = idx & 7;
            Xd[idx] = t < nrows ? a.xd[(size_t)(row0 + t) * (a.ne0 / 32) + kt * 8 + c] : 0.0f;
        }
        if (BMODE != 0) {
            for (int idx = tid; idx < BN * 16; idx += MMQ_THREADS) {
                const int t = idx >> 4, c = idx & 15;
                Xsum[idx] = t < nrows ? a.xs[(size_t)(row0 + t) * (a.ne0 / 16) + kt * 16 + c] : 0.0f;
            }
        }
        __syncthreads();

        const int8_t *wr0 = Ws + (wm + g) * MMQ_LDS + tig * 4, *wr1 = wr0 + 8 * MMQ_LDS;
#pragma unroll 2
        for (int j = 0; j < 8; j++) {
            const int a0 = lds32(wr0 + 32 * j), a1 = lds32(wr1 + 32 * j);
            const int a2 = lds32(wr0 + 32 * j + 16), a3 = lds32(wr1 + 32 * j + 16);
            const float sa0 = Wa[(wm + g) * 16 + 2 * j], sa1 = Wa[(wm + g + 8) * 16 + 2 * j];
            float sa0h = 0.0f, sa1h = 0.0f, sb0 = 0.0f, sb1 = 0.0f, sb0h = 0.0f, sb1h = 0.0f;
            if (AMODE == 2) sa0h = Wa[(wm + g) * 16 + 2 * j + 1], sa1h = Wa[(wm + g + 8) * 16 + 2 * j + 1];
            if (BMODE != 0) {
                sb0 = Wb[(wm + g) * 16 + 2 * j], sb1 = Wb[(wm + g + 8) * 16 + 2 * j];
                sb0h = Wb[(wm + g) * 16 + 2 * j + 1], sb1h = Wb[(wm + g + 8) * 16 + 2 * j + 1];
            }
#pragma unroll
            for (int n = 0; n < NT; n++) {
                const int tb = wn + 8 * n;  // first token of this n8 tile
                const int8_t *xb = Xs + (tb + g) * MMQ_LDS + 32 * j + tig * 4;
                const int b0 = lds32(xb), b1 = lds32(xb + 16);
                const int t0 = tb + 2 * tig, t1 = t0 + 1;  // the tokens of c[0]/c[2] and c[1]/c[3]
                const float d0 = Xd[t0 * 8 + j], d1 = Xd[t1 * 8 + j];
                if (AMODE == 1) {
                    int c[4] = {0, 0, 0, 0};
                    mma_k32(c, a0, a1, a2, a3, b0, b1);
                    acc[n][0] += sa0 * d0 * (float)c[0];
                    acc[n][1] += sa0 * d1 * (float)c[1];
                    acc[n][2] += sa1 * d0 * (float)c[2];
                    acc[n][3] += sa1 * d1 * (float)c[3];
                } else {
                    int c[4] = {0, 0, 0, 0}, e[4] = {0, 0, 0, 0};
                    mma_k16(c, a0, a1, b0);
                    mma_k16(e, a2, a3, b1);
                    acc[n][0] += d0 * (sa0 * (float)c[0] + sa0h * (float)e[0]);
                    acc[n][1] += d1 * (sa0 * (float)c[1] + sa0h * (float)e[1]);
                    acc[n][2] += d0 * (sa1 * (float)c[2] + sa1h * (float)e[2]);
                    acc[n][3] += d1 * (sa1 * (float)c[3] + sa1h * (float)e[3]);
                }
                if (BMODE != 0) {
                    const float s00 = Xsum[t0 * 16 + 2 * j], s01 = Xsum[t0 * 16 + 2 * j + 1];
                    const float s10 = Xsum[t1 * 16 + 2 * j], s11 = Xsum[t1 * 16 + 2 * j + 1];
                    acc[n][0] += sb0 * s00 + sb0h * s01;
                    acc[n][1] += sb0 * s10 + sb0h * s11;
                    acc[n][2] += sb1 * s00 + sb1h * s01;
                    acc[n][3] += sb1 * s10 + sb1h * s11;
                }
            }
        }
    }

    // Store: c[0] (row g, token t0), c[1] (row g, t1), c[2] (row g+8, t0), c[3] (row g+8, t1).
    float *y = a.y + (blockIdx.z == 1 ? a.col_off2 : 0);
    const int r0 = o0 + wm + g, r1 = r0 + 8;
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int t0 = wn + 8 * n + 2 * tig, t1 = t0 + 1;
        if (t0 < nrows) {
            if (r0 < a.n_out) y[(size_t)(row0 + t0) * a.ldy + r0] = acc[n][0];
            if (r1 < a.n_out) y[(size_t)(row0 + t0) * a.ldy + r1] = acc[n][2];
        }
        if (t1 < nrows) {
            if (r0 < a.n_out) y[(size_t)(row0 + t1) * a.ldy + r0] = acc[n][1];
            if (r1 < a.n_out) y[(size_t)(row0 + t1) * a.ldy + r1] = acc[n][3];
        }
    }
}

template <int TYPE, int BN>
static int mmq_launch_t(st_cuda_ctx *ctx, const mmq_args &a, dim3 grid, cudaStream_t stream) {
    const size_t smem = mmq_smem_bytes<BN>();
    // Setting the attribute every launch is cheap and keeps the per-device state out of globals.
    if (smem > 48 * 1024) ST_CUDA_CHECK(cudaFuncSetAttribute(k_mmq<TYPE, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    k_mmq<TYPE, BN><<<grid, MMQ_THREADS, smem, stream>>>(a);
    return st_cuda_check_launch(ctx, "mmq");
}

static int mmq_launch(st_cuda_ctx *ctx, int type, int bn, const mmq_args &a, dim3 grid, cudaStream_t stream) {
    switch (type) {
#define X(T)                                                                                   \
    case T: return bn == 32 ? mmq_launch_t<T, 32>(ctx, a, grid, stream) : mmq_launch_t<T, 64>(ctx, a, grid, stream);
        GEMM_FOR_QTYPES(X)
#undef X
    default: return st_err("mmq: weight type %s is not supported", st_type_name(type));
    }
}

// ---------------------------------------------------------------------------------------------------------------
// f16 tensor-core kernel on weights dequantized in shared memory.

#include "cuda/gemm_tc.cuh"

extern "C" int st_cuda_tc_supported(int t) { return st_gemm_tc_type(t); }

// ---------------------------------------------------------------------------------------------------------------
// Dense entry points.

static int gemm_check(const char *fn, int type, int64_t ne0, int64_t n_out, int64_t n_tok) {
    const int bs = gemm_block_elems(type);
    if (!st_cuda_gemm_supported(type) || bs <= 0)
        return st_err("%s: weight type %s is not supported by the CUDA GEMM", fn, st_type_name(type));
    if (ne0 <= 0 || ne0 % bs || n_out <= 0 || n_tok < 0 || ne0 > INT_MAX / 2 || n_out > INT_MAX / 2 ||
        n_tok > INT_MAX / 2)
        return st_err("%s: bad sizes: ne0 %lld (multiple of %d for %s), n_out %lld, n_tok %lld", fn, (long long)ne0,
                      bs, st_type_name(type), (long long)n_out, (long long)n_tok);
    return 0;
}

extern "C" size_t st_cuda_gemm_scratch_bytes(int engine, int type, int64_t ne0, int64_t n_out, int64_t n_tok) {
    return st_gemm_scratch_size(engine, type, ne0, n_out, n_tok);
}

static int cublas_gemm_f16(st_gemm_ctx *g, const __half *Wh, const __half *Xh, int64_t ne0, int64_t n_out,
                           int64_t n_tok, float *Y, int64_t ldy, cudaStream_t stream) {
    const float alpha = 1.0f, beta = 0.0f;
    ST_CUBLAS_CHECK(cublasSetStream(g->h, stream));
    // Column-major view: Y^T (n_out x n_tok) = W (stored ne0 x n_out, transposed) . X^T (ne0 x n_tok).
    ST_CUBLAS_CHECK(cublasGemmEx(g->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)n_out, (int)n_tok, (int)ne0, &alpha, Wh,
                                 CUDA_R_16F, (int)ne0, Xh, CUDA_R_16F, (int)ne0, &beta, Y, CUDA_R_32F, (int)ldy,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return 0;
}

static int gemm_cublas(st_gemm_ctx *g, int type, const void *W, int64_t ne0, int64_t n_out, const float *X,
                       const void *Xh_in, int64_t n_tok, float *Y, void *scratch, size_t scratch_bytes,
                       cudaStream_t stream) {
    st_cuda_ctx *ctx = g->ctx;
    carve c = {(uint8_t *)scratch, 0, scratch_bytes};
    const __half *Wh = type == ST_TYPE_F16 ? (const __half *)W : (const __half *)c.take((size_t)n_out * ne0 * 2);
    const __half *Xh = Xh_in ? (const __half *)Xh_in : (const __half *)c.take((size_t)n_tok * ne0 * 2);
    if (c.used > scratch_bytes)
        return st_err("st_cuda_gemm: scratch of %zu bytes is too small (%zu needed for %s %lld x %lld, %lld tokens)",
                      scratch_bytes, c.used, st_type_name(type), (long long)n_out, (long long)ne0, (long long)n_tok);
    if (type != ST_TYPE_F16 && st_cuda_dequant_f16(ctx, type, W, ne0, n_out, n_out, n_out, (void *)Wh, stream))
        return -1;
    if (!Xh_in && st_cuda_f32_to_f16(ctx, X, (void *)Xh, n_tok * ne0, stream)) return -1;
    return cublas_gemm_f16(g, Wh, Xh, ne0, n_out, n_tok, Y, n_out, stream);
}

static int quant_rows(st_cuda_ctx *ctx, int mode, const float *x, long long ldx, const int32_t *map, int map_div,
                      const int32_t *n_rows_dev, long long n_rows, int ne0, int8_t *q, float *d, float *s,
                      cudaStream_t stream) {
    if (n_rows == 0) return 0;
    const dim3 grid((unsigned)(n_rows < 65535 ? n_rows : 65535), (unsigned)((n_rows + 65534) / 65535));
    if (mode == 0)
        k_quant_rows<0><<<grid, 256, 0, stream>>>(x, ldx, map, map_div, n_rows_dev, n_rows, ne0, q, d, s);
    else
        k_quant_rows<1><<<grid, 256, 0, stream>>>(x, ldx, map, map_div, n_rows_dev, n_rows, ne0, q, d, s);
    return st_cuda_check_launch(ctx, "quant_rows");
}

extern "C" int st_cuda_gemm(st_gemm_ctx *g, int engine, int type, const void *W, int64_t ne0, int64_t n_out,
                            const float *X, int64_t n_tok, float *Y, void *scratch, size_t scratch_bytes,
                            cudaStream_t stream) {
    if (gemm_check("st_cuda_gemm", type, ne0, n_out, n_tok)) return -1;
    if (n_tok == 0) return 0;
    if (((uintptr_t)W & 15) || ((uintptr_t)scratch & 15))
        return st_err("st_cuda_gemm: W_dev and scratch must be 16-byte aligned");
    if (st_cuda_set_device(g->ctx)) return -1;
    engine = st_gemm_pick(engine, type, ne0, n_tok);
    if (engine == ST_GEMM_CUBLAS) return gemm_cublas(g, type, W, ne0, n_out, X, NULL, n_tok, Y, scratch, scratch_bytes, stream);
    if (engine == ST_GEMM_TC) {
        if (!st_gemm_tc_type(type) || ne0 % TC_BK)
            return st_err("st_cuda_gemm: the f16 tensor-core engine does not handle %s with ne0 %lld (needs a "
                          "multiple of %d)", st_type_name(type), (long long)ne0, TC_BK);
        const size_t need = st_gemm_scratch_size(ST_GEMM_TC, type, ne0, n_out, n_tok);
        if (need > scratch_bytes)
            return st_err("st_cuda_gemm: scratch of %zu bytes is too small (%zu needed)", scratch_bytes, need);
        if (st_cuda_f32_to_f16(g->ctx, X, scratch, n_tok * ne0, stream)) return -1;
        tc_args a;
        memset(&a, 0, sizeof a);
        a.W = (const uint8_t *)W;
        a.row_bytes = (long long)st_row_size(type, ne0);
        a.ne0 = (int)ne0, a.n_out = (int)n_out;
        a.x = (const __half *)scratch;
        a.n_rows = (int)n_tok;
        a.y = Y, a.ldy = n_out;
        const dim3 grid((unsigned)((n_out + TC_BM - 1) / TC_BM), (unsigned)((n_tok + TC_BN - 1) / TC_BN), 1);
        if (grid.y > 65535) return st_err("st_cuda_gemm: %lld tokens is too many for one call", (long long)n_tok);
        return tc_launch(g->ctx, type, 0, a, grid, stream);
    }
    if (engine != ST_GEMM_MMQ) return st_err("st_cuda_gemm: unknown engine %d", engine);
    if (!st_cuda_mmq_supported(type) || ne0 % MMQ_BK)
        return st_err("st_cuda_gemm: the int8 engine does not handle %s with ne0 %lld (needs a multiple of %d)",
                      st_type_name(type), (long long)ne0, MMQ_BK);
    carve c = {(uint8_t *)scratch, 0, scratch_bytes};
    int8_t *xq = (int8_t *)c.take((size_t)n_tok * ne0);
    float *xd = (float *)c.take((size_t)n_tok * (ne0 / 32) * 4);
    float *xs = (float *)c.take((size_t)n_tok * (ne0 / 16) * 4);
    if (c.used > scratch_bytes)
        return st_err("st_cuda_gemm: scratch of %zu bytes is too small (%zu needed)", scratch_bytes, c.used);
    const char *ca = getenv("STRATA_MMQ_CPU_ACT");
    const int cpu_fmt = !ca || strcmp(ca, "0") ? st_cuda_act_format(type) : -1;  // (see k_quant_rows_cpu)
    if (cpu_fmt >= 0) {
        const dim3 qg((unsigned)(n_tok < 65535 ? n_tok : 65535), (unsigned)((n_tok + 65534) / 65535));
        if (cpu_fmt == ST_TYPE_Q8_K)
            k_quant_rows_cpu<ST_TYPE_Q8_K><<<qg, 256, 0, stream>>>(X, ne0, NULL, n_tok, (int)ne0, xq, xd, xs);
        else if (cpu_fmt == ST_TYPE_Q8_1)
            k_quant_rows_cpu<ST_TYPE_Q8_1><<<qg, 256, 0, stream>>>(X, ne0, NULL, n_tok, (int)ne0, xq, xd, xs);
        else
            k_quant_rows_cpu<ST_TYPE_Q8_0><<<qg, 256, 0, stream>>>(X, ne0, NULL, n_tok, (int)ne0, xq, xd, xs);
        if (st_cuda_check_launch(g->ctx, "quant_rows_cpu")) return -1;
    } else if (quant_rows(g->ctx, 0, X, ne0, NULL, 1, NULL, n_tok, (int)ne0, xq, xd, xs, stream)) {
        return -1;
    }
    const int bn = n_tok <= 32 ? 32 : 64;
    mmq_args a;
    memset(&a, 0, sizeof a);
    a.W = (const uint8_t *)W;
    a.row_bytes = (long long)st_row_size(type, ne0);
    a.ne0 = (int)ne0;
    a.n_out = (int)n_out;
    a.xq = xq, a.xd = xd, a.xs = xs;
    a.n_rows = (int)n_tok;
    a.y = Y;
    a.ldy = n_out;
    const dim3 grid((unsigned)((n_out + MMQ_BM - 1) / MMQ_BM), (unsigned)((n_tok + bn - 1) / bn), 1);
    if (grid.y > 65535) return st_err("st_cuda_gemm: %lld tokens is too many for one call", (long long)n_tok);
    return mmq_launch(g->ctx, type, bn, a, grid, stream);
}

extern "C" int st_cuda_gemm_f16x(st_gemm_ctx *g, int type, const void *W, int64_t ne0, int64_t n_out,
                                 const void *X_f16, int64_t n_tok, float *Y, void *scratch, size_t scratch_bytes,
                                 cudaStream_t stream) {
    if (gemm_check("st_cuda_gemm_f16x", type, ne0, n_out, n_tok)) return -1;
    if (n_tok == 0) return 0;
    if (st_cuda_set_device(g->ctx)) return -1;
    return gemm_cublas(g, type, W, ne0, n_out, NULL, X_f16, n_tok, Y, scratch, scratch_bytes, stream);
}

// ---------------------------------------------------------------------------------------------------------------
// MoE: routing plan (stable counting sort by expert).

// counts[e] = number of pairs routed to e (one CTA per expert, scanning all pairs). CTA 0 also marks pairs with
// invalid ids in inv[] (-1), so every inv entry is written exactly once per call.
__global__ void __launch_bounds__(256) k_moe_count(const int32_t *__restrict__ ids, int n_pairs, int n_expert,
                                                   int32_t *__restrict__ counts, int32_t *__restrict__ inv) {
    const int e = blockIdx.x;
    int c = 0;
    for (int p = threadIdx.x; p < n_pairs; p += blockDim.x) {
        const int id = ids[p];
        c += id == e;
        if (e == 0 && (id < 0 || id >= n_expert)) inv[p] = -1;
    }
    __shared__ int red[256];
    red[threadIdx.x] = c;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) counts[e] = red[0];
}

// One CTA per expert: its first sorted row is the sum of the lower experts' counts; pairs are placed in pair order
// (block-wide exclusive scan of the match flags, 256 pairs at a time). Also writes the expert's token tiles of bn
// rows for the mmq kernel, and (expert 0) the totals: offsets[n_expert] = valid pairs, *n_tiles.
__global__ void __launch_bounds__(256) k_moe_place(const int32_t *__restrict__ ids, int n_pairs, int n_expert,
                                                   const int32_t *__restrict__ counts, int32_t *__restrict__ offsets,
                                                   int32_t *__restrict__ perm, int32_t *__restrict__ inv, int bn,
                                                   int32_t *__restrict__ tile_e, int32_t *__restrict__ tile_r0,
                                                   int32_t *__restrict__ tile_n, int32_t *__restrict__ n_tiles) {
    const int e = blockIdx.x, tid = threadIdx.x;
    __shared__ int s_off, s_tile, s_tot, s_ttot;
    __shared__ int warp_tot[256 / 32];
    if (tid == 0) s_off = s_tile = s_tot = s_ttot = 0;
    __syncthreads();
    int off = 0, toff = 0, tot = 0, ttot = 0;
    for (int i = tid; i < n_expert; i += blockDim.x) {
        const int c = counts[i], nt = (c + bn - 1) / bn;
        if (i < e) off += c, toff += nt;
        tot += c, ttot += nt;
    }
    atomicAdd(&s_off, off);  // integer atomics: order-independent, so still deterministic
    atomicAdd(&s_tile, toff);
    atomicAdd(&s_tot, tot);
    atomicAdd(&s_ttot, ttot);
    __syncthreads();
    const int base = s_off, tbase = s_tile, count = counts[e];
    if (e == 0 && tid == 0) {
        offsets[n_expert] = s_tot;
        *n_tiles = s_ttot;
    }
    if (tid == 0) offsets[e] = base;
    for (int t = tid; t * bn < count; t += blockDim.x) {
        tile_e[tbase + t] = e;
        tile_r0[tbase + t] = base + t * bn;
        tile_n[tbase + t] = min(bn, count - t * bn);
    }
    if (count == 0) return;
    const int lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
    int run = 0;
    for (int p0 = 0; p0 < n_pairs; p0 += blockDim.x) {
        const int p = p0 + tid;
        const bool f = p < n_pairs && ids[p] == e;
        const unsigned m = __ballot_sync(ST_WARP_FULL_MASK, f);
        const int before = __popc(m & ((1u << lane) - 1u));
        __syncthreads();  // warp_tot of the previous round has been read
        if (lane == 0) warp_tot[warp] = __popc(m);
        __syncthreads();
        int wb = 0, all = 0;
        for (int w = 0; w < nwarps; w++) {
            if (w < warp) wb += warp_tot[w];
            all += warp_tot[w];
        }
        if (f) {
            const int row = base + run + wb + before;
            perm[row] = p;
            inv[p] = row;
        }
        run += all;
    }
}

// out[t][j] = sum_k w[t][k] * D[inv[t n_used + k]][j] (pairs with inv < 0 contribute nothing).
__global__ void k_moe_scatter(const float *__restrict__ D, const int32_t *__restrict__ inv,
                              const float *__restrict__ w, long long n_tok, int n_used, int n_embd,
                              float *__restrict__ out) {
    const long long t = blockIdx.y + 65535LL * blockIdx.z;
    if (t >= n_tok) return;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n_embd; j += gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int k = 0; k < n_used; k++) {
            const int r = inv[t * n_used + k];
            if (r >= 0) s += w[t * n_used + k] * D[(long long)r * n_embd + j];
        }
        out[t * n_embd + j] = s;
    }
}

// h[r][c] = half(silu(gu[r][c]) * gu[r][n_ff + c]) for rows < *n_rows_dev.
__global__ void k_swiglu_f16(const float *__restrict__ gu, const int32_t *__restrict__ n_rows_dev, long long n_rows,
                             int n_ff, __half *__restrict__ h) {
    const long long r = blockIdx.y + 65535LL * blockIdx.z;
    if (r >= n_rows || r >= *n_rows_dev) return;
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < n_ff; c += gridDim.x * blockDim.x) {
        const float gt = gu[r * 2 * n_ff + c];
        h[r * n_ff + c] = sat_half(st_am_silu_mul(gt, gu[r * 2 * n_ff + n_ff + c]));
    }
}

// Scratch layout of a MoE call; with base NULL only sizes are computed.
struct moe_bufs {
    int32_t *counts, *offsets, *perm, *inv, *tile_e, *tile_r0, *tile_n, *n_tiles;
    int8_t *xq, *hq;
    float *xd, *xs, *hd, *hs, *gu, *d;
    __half *xh, *hh, *wh;
    void **ptrs;  // device [6 * n_expert] pointer arrays (cuBLAS grouped)
    size_t total;
};

static int moe_bn(int engine, int n_tok, int n_used, int n_expert) {
    if (engine == ST_MOE_TC) return TC_BN;  // the kernel skips the unused n8 tiles of a short tile
    return (long long)n_tok * n_used <= 48LL * n_expert ? 32 : 64;
}

static moe_bufs moe_layout(void *base, int engine, int64_t n_embd, int64_t n_ff, int n_expert, int n_tok,
                           int n_used) {
    moe_bufs b;
    memset(&b, 0, sizeof b);
    carve c = {(uint8_t *)base, 0, 0};
    // The parts and their order: cuda/gemm_sizes.h (the planner reserves the same bytes); 0 bytes: none.
    const st_moe_scratch_parts p = st_moe_scratch_parts_of(engine, n_embd, n_ff, n_expert, n_tok, n_used);
#define TAKE(field, T) b.field = p.field ? (T)c.take(p.field) : NULL
    TAKE(counts, int32_t *);
    TAKE(offsets, int32_t *);
    TAKE(perm, int32_t *);
    TAKE(inv, int32_t *);
    TAKE(tile_e, int32_t *);
    TAKE(tile_r0, int32_t *);
    TAKE(tile_n, int32_t *);
    TAKE(n_tiles, int32_t *);
    TAKE(gu, float *);
    TAKE(d, float *);
    TAKE(xh, __half *);
    TAKE(hh, __half *);
    TAKE(xq, int8_t *);
    TAKE(xd, float *);
    TAKE(xs, float *);
    TAKE(hq, int8_t *);
    TAKE(hd, float *);
    TAKE(hs, float *);
    TAKE(wh, __half *);
    TAKE(ptrs, void **);
#undef TAKE
    b.total = c.used;
    return b;
}

extern "C" size_t st_cuda_moe_scratch_bytes(int engine, int type_gu, int type_down, int64_t n_embd, int64_t n_ff,
                                            int n_expert, int n_tok, int n_used) {
    return moe_layout(NULL, engine, n_embd, n_ff, n_expert, n_tok, n_used).total;
}

// One grouped cuBLAS GEMM over the active experts: C_e (rows x m_e) = A_e^T B_e, where expert e's B rows start at
// sorted row off_e; A_e = Wh + e * rows * k.
static int moe_cublas_proj(st_gemm_ctx *g, int engine, const __half *Wh, int64_t rows, int64_t k, const __half *B,
                           float *C, int64_t ldc, const int32_t *counts, const int32_t *offs, int n_expert,
                           void **h_ptrs, void **d_ptrs, cudaStream_t stream) {
    const float alpha = 1.0f, beta = 0.0f;
    ST_CUBLAS_CHECK(cublasSetStream(g->h, stream));
    if (engine == ST_MOE_CUBLAS_LOOP) {
        for (int e = 0; e < n_expert; e++) {
            if (!counts[e]) continue;
            ST_CUBLAS_CHECK(cublasGemmEx(g->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, counts[e], (int)k, &alpha,
                                         Wh + (size_t)e * rows * k, CUDA_R_16F, (int)k, B + (size_t)offs[e] * k,
                                         CUDA_R_16F, (int)k, &beta, C + (size_t)offs[e] * ldc, CUDA_R_32F, (int)ldc,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        }
        return 0;
    }
    // Grouped: one group per active expert (group size 1), sizes on the host, pointer arrays on the device.
    int n = 0;
    static const int MAXE = ST_GEMM_MAX_EXPERT;
    cublasOperation_t ta[MAXE], tb[MAXE];
    int m[MAXE], nn[MAXE], kk[MAXE], lda[MAXE], ldb[MAXE], ldcs[MAXE], gs[MAXE];
    float al[MAXE], be[MAXE];
    for (int e = 0; e < n_expert; e++) {
        if (!counts[e]) continue;
        ta[n] = CUBLAS_OP_T, tb[n] = CUBLAS_OP_N;
        m[n] = (int)rows, nn[n] = counts[e], kk[n] = (int)k;
        lda[n] = (int)k, ldb[n] = (int)k, ldcs[n] = (int)ldc, gs[n] = 1;
        al[n] = alpha, be[n] = beta;
        h_ptrs[n] = (void *)(Wh + (size_t)e * rows * k);
        h_ptrs[n_expert + n] = (void *)(B + (size_t)offs[e] * k);
        h_ptrs[2 * n_expert + n] = (void *)(C + (size_t)offs[e] * ldc);
        n++;
    }
    if (!n) return 0;
    ST_CUDA_CHECK(cudaMemcpyAsync(d_ptrs, h_ptrs, (size_t)3 * n_expert * sizeof(void *), cudaMemcpyHostToDevice, stream));
    const cublasStatus_t s = cublasGemmGroupedBatchedEx(g->h, ta, tb, m, nn, kk, al, (const void *const *)d_ptrs, CUDA_R_16F,
                                               lda, (const void *const *)(d_ptrs + n_expert), CUDA_R_16F, ldb, be,
                                               (void *const *)(d_ptrs + 2 * n_expert), CUDA_R_32F, ldcs, n, gs,
                                               CUBLAS_COMPUTE_32F);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED) {
        // This cuBLAS lacks f16 x f16 -> f32 grouped GEMMs: use the per-expert loop (said once).
        if (!g->grouped_unsupported) st_warn("cublasGemmGroupedBatchedEx (f16 in, f32 out) is not supported here; "
                                             "using one cublasGemmEx per expert");
        g->grouped_unsupported = 1;
        return moe_cublas_proj(g, ST_MOE_CUBLAS_LOOP, Wh, rows, k, B, C, ldc, counts, offs, n_expert, h_ptrs, d_ptrs,
                               stream);
    }
    if (s != CUBLAS_STATUS_SUCCESS)
        return st_err("cublasGemmGroupedBatchedEx (%d experts, %lld x %lld): %s", n, (long long)rows, (long long)k,
                      cublas_name(s));
    return 0;
}

// Hybrid placement (st_cuda_moe_ffn_slots): tile t's expert id becomes the slot that holds the expert, so the
// kernels' `tile_e * expert_bytes` lands on the slot. Runs after k_moe_place; tiles past *n_tiles are left alone.
// An expert without a slot (slot -1: the CPU computes it, engine/gpu_hybrid.c) keeps tile -1, which the GEMM
// kernels skip, and its pairs leave the weighted sum (inv -1; the caller adds the CPU's share).
__global__ void k_moe_remap_tiles(int32_t *__restrict__ tile_e, const int32_t *__restrict__ n_tiles, int max_tiles,
                                  const int32_t *__restrict__ slot_of, const int32_t *__restrict__ ids, int np,
                                  int n_expert, int32_t *__restrict__ inv) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < max_tiles && t < *n_tiles) tile_e[t] = slot_of[tile_e[t]];
    if (t < np && ids[t] >= 0 && ids[t] < n_expert && slot_of[ids[t]] < 0) inv[t] = -1;
}

static int moe_ffn_impl(st_gemm_ctx *g, int engine, int type_gu, const void *Wgate, const void *Wup, int type_down,
                        const void *Wdown, long long stride_gu, long long stride_down, const int32_t *slot_of,
                        int64_t n_embd, int64_t n_ff, int n_expert, const float *X, const int32_t *ids,
                        const float *w, int n_tok, int n_used, float *Y, void *scratch, size_t scratch_bytes,
                        cudaStream_t stream, const char *fn);

extern "C" int st_cuda_moe_ffn(st_gemm_ctx *g, int engine, int type_gu, const void *Wgate, const void *Wup,
                               int type_down, const void *Wdown, int64_t n_embd, int64_t n_ff, int n_expert,
                               const float *X, const int32_t *ids, const float *w, int n_tok, int n_used, float *Y,
                               void *scratch, size_t scratch_bytes, cudaStream_t stream) {
    return moe_ffn_impl(g, engine, type_gu, Wgate, Wup, type_down, Wdown, 0, 0, NULL, n_embd, n_ff, n_expert, X, ids,
                        w, n_tok, n_used, Y, scratch, scratch_bytes, stream, "st_cuda_moe_ffn");
}

extern "C" int st_cuda_moe_ffn_slots(st_gemm_ctx *g, int engine, int type_gu, const void *Wgate0, const void *Wup0,
                                     int type_down, const void *Wdown0, long long slot_stride,
                                     const int32_t *slot_of_dev, int64_t n_embd, int64_t n_ff, int n_expert,
                                     const float *X, const int32_t *ids, const float *w, int n_tok, int n_used,
                                     float *Y, void *scratch, size_t scratch_bytes, cudaStream_t stream) {
    const char *fn = "st_cuda_moe_ffn_slots";
    if (engine != ST_MOE_TC && engine != ST_MOE_MMQ)
        return st_err("%s: only the tensor-core and int8 engines take a slot map (engine %d)", fn, engine);
    if (!slot_of_dev || slot_stride <= 0 || slot_stride % 16)
        return st_err("%s: needs a slot map and a positive slot stride that is a multiple of 16 (got %lld)", fn,
                      slot_stride);
    if ((uintptr_t)Wgate0 % 16 || (uintptr_t)Wup0 % 16 || (uintptr_t)Wdown0 % 16)
        return st_err("%s: slot parts must be 16-byte aligned", fn);
    return moe_ffn_impl(g, engine, type_gu, Wgate0, Wup0, type_down, Wdown0, slot_stride, slot_stride, slot_of_dev,
                        n_embd, n_ff, n_expert, X, ids, w, n_tok, n_used, Y, scratch, scratch_bytes, stream, fn);
}

static int moe_ffn_impl(st_gemm_ctx *g, int engine, int type_gu, const void *Wgate, const void *Wup, int type_down,
                        const void *Wdown, long long stride_gu, long long stride_down, const int32_t *slot_of,
                        int64_t n_embd, int64_t n_ff, int n_expert, const float *X, const int32_t *ids,
                        const float *w, int n_tok, int n_used, float *Y, void *scratch, size_t scratch_bytes,
                        cudaStream_t stream, const char *fn) {
    st_cuda_ctx *ctx = g->ctx;
    if (engine < ST_MOE_MMQ || engine > ST_MOE_TC) return st_err("%s: unknown engine %d", fn, engine);
    if (n_expert <= 0 || n_expert > ST_GEMM_MAX_EXPERT || n_used <= 0 || n_used > n_expert || n_tok < 0 ||
        (long long)n_tok * n_used > INT_MAX / 4 || n_embd % 32 || n_ff % 32)
        return st_err("%s: bad sizes: n_expert %d (max %d), n_used %d, n_tok %d, n_embd %lld, n_ff %lld", fn,
                      n_expert, ST_GEMM_MAX_EXPERT, n_used, n_tok, (long long)n_embd, (long long)n_ff);
    if (gemm_check(fn, type_gu, n_embd, n_ff, n_tok) || gemm_check(fn, type_down, n_ff, n_embd, n_tok)) return -1;
    if (engine == ST_MOE_MMQ) {
        if (!st_cuda_mmq_supported(type_gu) || !st_cuda_mmq_supported(type_down) || n_embd % MMQ_BK || n_ff % MMQ_BK)
            return st_err("%s: the int8 engine needs mmq types and sizes that are multiples of %d (got %s/%s, "
                          "n_embd %lld, n_ff %lld)",
                          fn, MMQ_BK, st_type_name(type_gu), st_type_name(type_down), (long long)n_embd,
                          (long long)n_ff);
    }
    if (engine == ST_MOE_TC) {
        if (!st_gemm_tc_type(type_gu) || !st_gemm_tc_type(type_down) || n_embd % TC_BK || n_ff % TC_BK)
            return st_err("%s: the f16 tensor-core engine needs quantized types and sizes that are multiples of %d "
                          "(got %s/%s, n_embd %lld, n_ff %lld)",
                          fn, TC_BK, st_type_name(type_gu), st_type_name(type_down), (long long)n_embd,
                          (long long)n_ff);
    }
    if (n_tok == 0) return 0;
    if ((uintptr_t)scratch & (ST_GEMM_ALIGN - 1))
        return st_err("%s: scratch must be %d-byte aligned", fn, ST_GEMM_ALIGN);
    moe_bufs b = moe_layout(scratch, engine, n_embd, n_ff, n_expert, n_tok, n_used);
    if (b.total > scratch_bytes)
        return st_err("%s: scratch of %zu bytes is too small (%zu needed for %d tokens x %d experts)", fn,
                      scratch_bytes, b.total, n_tok, n_used);
    if (st_cuda_set_device(ctx)) return -1;
    const int np = n_tok * n_used;
    const int bn = moe_bn(engine, n_tok, n_used, n_expert);

    k_moe_count<<<n_expert, 256, 0, stream>>>(ids, np, n_expert, b.counts, b.inv);
    if (st_cuda_check_launch(ctx, "moe_count")) return -1;
    k_moe_place<<<n_expert, 256, 0, stream>>>(ids, np, n_expert, b.counts, b.offsets, b.perm, b.inv, bn, b.tile_e,
                                              b.tile_r0, b.tile_n, b.n_tiles);
    if (st_cuda_check_launch(ctx, "moe_place")) return -1;
    const int32_t *n_valid = b.offsets + n_expert;
    if (slot_of) {
        const int max_tiles = np / bn + n_expert, n_thr = max_tiles > np ? max_tiles : np;
        k_moe_remap_tiles<<<(n_thr + 255) / 256, 256, 0, stream>>>(b.tile_e, b.n_tiles, max_tiles, slot_of, ids, np,
                                                                   n_expert, b.inv);
        if (st_cuda_check_launch(ctx, "moe_remap_tiles")) return -1;
    }

    if (engine == ST_MOE_TC) {
        g->last_n_expert = 0;
        // Routed rows gathered into expert order as f16 (rows past the valid count are skipped).
        k_rows_to_f16<<<rows_grid(np, n_embd), 256, 0, stream>>>(X, b.perm, n_used, n_valid, np, n_embd, b.xh);
        if (st_cuda_check_launch(ctx, "moe_gather_f16")) return -1;
        const unsigned max_tiles = (unsigned)(np / bn + n_expert);
        if (max_tiles > 65535)
            return st_err("%s: %d (token, expert) pairs are too many for one call (split the chunk)", fn, np);
        tc_args a;
        memset(&a, 0, sizeof a);
        a.tile_e = b.tile_e, a.tile_r0 = b.tile_r0, a.tile_n = b.tile_n, a.n_tiles = b.n_tiles;
        // gate + up + SwiGLU: 32 gate and the same 32 up rows per CTA, h [rows][n_ff] f16.
        a.W = (const uint8_t *)Wgate, a.W2 = (const uint8_t *)Wup;
        a.row_bytes = (long long)st_row_size(type_gu, n_embd);
        a.expert_bytes = stride_gu ? stride_gu : a.row_bytes * n_ff;
        a.ne0 = (int)n_embd, a.n_out = (int)n_ff;
        a.x = b.xh;
        a.h = b.hh;
        if (tc_launch(ctx, type_gu, 1, a, dim3((unsigned)((n_ff + TC_BM / 2 - 1) / (TC_BM / 2)), max_tiles, 1), stream))
            return -1;
        // down: D [rows][n_embd] f32 in expert order; the weighted sum below restores token order.
        a.W = (const uint8_t *)Wdown, a.W2 = NULL;
        a.row_bytes = (long long)st_row_size(type_down, n_ff);
        a.expert_bytes = stride_down ? stride_down : a.row_bytes * n_embd;
        a.ne0 = (int)n_ff, a.n_out = (int)n_embd;
        a.x = b.hh;
        a.h = NULL;
        a.y = b.d, a.ldy = n_embd;
        if (tc_launch(ctx, type_down, 0, a, dim3((unsigned)((n_embd + TC_BM - 1) / TC_BM), max_tiles, 1), stream))
            return -1;
    } else if (engine == ST_MOE_MMQ) {
        g->last_n_expert = 0;
        if (quant_rows(ctx, 0, X, n_embd, b.perm, n_used, n_valid, np, (int)n_embd, b.xq, b.xd, b.xs, stream))
            return -1;
        const unsigned max_tiles = (unsigned)(np / bn + n_expert);
        if (max_tiles > 65535)
            return st_err("%s: %d (token, expert) pairs are too many for one call (split the chunk)", fn, np);
        mmq_args a;
        memset(&a, 0, sizeof a);
        a.tile_e = b.tile_e, a.tile_r0 = b.tile_r0, a.tile_n = b.tile_n, a.n_tiles = b.n_tiles;
        // gate (z = 0) and up (z = 1) into gu [rows][2 n_ff].
        a.W = (const uint8_t *)Wgate, a.W2 = (const uint8_t *)Wup;
        a.row_bytes = (long long)st_row_size(type_gu, n_embd);
        a.expert_bytes = stride_gu ? stride_gu : a.row_bytes * n_ff;
        a.ne0 = (int)n_embd, a.n_out = (int)n_ff;
        a.xq = b.xq, a.xd = b.xd, a.xs = b.xs;
        a.y = b.gu, a.ldy = 2 * n_ff, a.col_off2 = (int)n_ff;
        if (mmq_launch(ctx, type_gu, bn, a, dim3((unsigned)((n_ff + MMQ_BM - 1) / MMQ_BM), max_tiles, 2), stream))
            return -1;
        if (quant_rows(ctx, 1, b.gu, 2 * n_ff, NULL, 1, n_valid, np, (int)n_ff, b.hq, b.hd, b.hs, stream)) return -1;
        a.W = (const uint8_t *)Wdown, a.W2 = NULL;
        a.row_bytes = (long long)st_row_size(type_down, n_ff);
        a.expert_bytes = stride_down ? stride_down : a.row_bytes * n_embd;
        a.ne0 = (int)n_ff, a.n_out = (int)n_embd;
        a.xq = b.hq, a.xd = b.hd, a.xs = b.hs;
        a.y = b.d, a.ldy = n_embd, a.col_off2 = 0;
        if (mmq_launch(ctx, type_down, bn, a, dim3((unsigned)((n_embd + MMQ_BM - 1) / MMQ_BM), max_tiles, 1), stream))
            return -1;
    } else {
        // Expert counts to the host (cuBLAS takes sizes there): the one synchronisation of this engine.
        ST_CUDA_CHECK(cudaMemcpyAsync(g->h_counts, b.counts, (size_t)n_expert * 4, cudaMemcpyDeviceToHost, stream));
        ST_CUDA_CHECK(cudaMemcpyAsync(g->h_counts + n_expert, b.offsets + n_expert, 4, cudaMemcpyDeviceToHost, stream));
        // Meanwhile nothing else is queued; the gather and dequantization go after the copy on the stream anyway.
        k_rows_to_f16<<<rows_grid(np, n_embd), 256, 0, stream>>>(X, b.perm, n_used, n_valid, np, n_embd, b.xh);
        if (st_cuda_check_launch(ctx, "moe_gather_f16")) return -1;
        if (st_cuda_dequant_f16(ctx, type_gu, Wgate, n_embd, (int64_t)n_expert * n_ff, n_ff, 2 * n_ff, b.wh, stream) ||
            st_cuda_dequant_f16(ctx, type_gu, Wup, n_embd, (int64_t)n_expert * n_ff, n_ff, 2 * n_ff,
                                b.wh + (size_t)n_ff * n_embd, stream))
            return -1;
        ST_CUDA_CHECK(cudaStreamSynchronize(stream));
        g->last_n_expert = n_expert;
        int32_t offs[ST_GEMM_MAX_EXPERT];
        int run = 0;
        for (int e = 0; e < n_expert; e++) offs[e] = run, run += g->h_counts[e];
        if (moe_cublas_proj(g, engine, b.wh, 2 * n_ff, n_embd, b.xh, b.gu, 2 * n_ff, g->h_counts, offs, n_expert,
                            g->h_ptrs, b.ptrs, stream))
            return -1;
        k_swiglu_f16<<<rows_grid(np, n_ff), 256, 0, stream>>>(b.gu, n_valid, np, (int)n_ff, b.hh);
        if (st_cuda_check_launch(ctx, "moe_swiglu_f16")) return -1;
        if (st_cuda_dequant_f16(ctx, type_down, Wdown, n_ff, (int64_t)n_expert * n_embd, n_expert * n_embd,
                                n_expert * n_embd, b.wh, stream))
            return -1;
        if (moe_cublas_proj(g, engine, b.wh, n_embd, n_ff, b.hh, b.d, n_embd, g->h_counts, offs, n_expert,
                            g->h_ptrs + 3 * n_expert, b.ptrs + 3 * n_expert, stream))
            return -1;
    }
    k_moe_scatter<<<rows_grid(n_tok, n_embd), 256, 0, stream>>>(b.d, b.inv, w, n_tok, n_used, (int)n_embd, Y);
    return st_cuda_check_launch(ctx, "moe_scatter");
}
