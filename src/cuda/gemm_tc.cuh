// f16 tensor-core GEMM on weights dequantized in shared memory ("tc" engine), included by gemm.cu only.
//
// Why: the int8 kernel (k_mmq) applies the weight and activation scales per 32 (or 16) k after every MMA, so its
// inner loop is dominated by conversions and FMAs, and it loads each K tile synchronously (31 TFLOP/s on the
// Qwen3-30B-A3B MoE). Here weights are dequantized once per tile into f16 (scales folded in), activations are f16,
// and the MMA (m16n8k16, f32 accumulation) runs without any per-k epilogue; raw weight blocks and activation rows
// are staged with cp.async, double-buffered, so the next K tile's loads overlap this tile's math.
//
// CTA: TC_THREADS = 128 (4 warps), TC_BM = 64 weight rows x up to TC_BN = 64 activation rows (tokens), K in tiles
// of TC_BK = 256 (one K-quant block, or 8 blocks of 32). Per K tile (stage):
//   raw:  [TC_BM][RAWB] bytes: row r's raw block bytes of this K tile, copied in 16-byte cp.async chunks from the
//         16-byte aligned address at or below the span start, so in shared memory the blocks keep their global
//         alignment modulo 16 (st_qb_unpack's wide loads stay legal); chunks are zero-filled past the span end,
//         so nothing beyond the tensor is read.
//   x:    [TC_BN][TC_XS] halves: activation rows (zero rows past the tile's count).
// Warp w owns weight rows 16w..16w+15 and all tokens. Per 64 k it dequantizes its 16 rows x 2 items (one item of
// 32 weights per lane: st_qb_unpack + a * v + b to f16) into a private slab [16][TC_WS] halves, then runs 4 k16
// steps: one ldmatrix.x4 for A, and per pair of n8 token tiles one ldmatrix.x4 for B and two MMAs. Token pairs past
// the tile's row count are skipped (warp-uniform), so a 33-token expert costs 5 n8 tiles, not 8.
// Epilogue through shared memory (coalesced rows): MODE 0 writes f32 rows y[row][o]; MODE 1 (MoE gate/up) holds
// 32 gate rows (warps 0-1) and the same 32 up rows (warps 2-3) and writes h = f16(silu(gate) * up) directly, so
// neither the f32 gate/up product nor a separate SwiGLU pass touch memory.
//
// Inline PTX (cp.async, ldmatrix, mma.sync) is used on sm_80+; otherwise (and with ST_TC_PORTABLE) plain loads and
// shuffles compute the same register contents.
#ifndef STRATA_CUDA_GEMM_TC_CUH
#define STRATA_CUDA_GEMM_TC_CUH

#define TC_BM 64
#define TC_BN 64
#define TC_BK ST_GEMM_BK
#define TC_THREADS 128
#define TC_XS (TC_BK + 8)  // halves per staged activation row: 528 bytes = 33 x 16, ldmatrix rows hit distinct banks
#define TC_WS (64 + 8)     // halves per slab row: 144 bytes = 9 x 16, same reason
#define TC_EPS (TC_BM + 4) // floats per epilogue row (token): stores of a warp's fragment hit 32 banks

#include "cuda/mma.cuh"
#include "cuda/act_math.h"  // the CPU's SwiGLU arithmetic

// Raw bytes of one row per K tile, and the staged row size (room for up to 15 bytes of misalignment).
template <int TYPE> __host__ __device__ constexpr int tc_span() { return (TC_BK / 32 / ST_QB_IPB(TYPE)) * ST_QB_TSIZE(TYPE); }
template <int TYPE> __host__ __device__ constexpr int tc_rawb() { return (tc_span<TYPE>() + 15 + 15) / 16 * 16; }
template <int TYPE> __host__ __device__ constexpr size_t tc_stage_bytes() {
    return (size_t)TC_BM * tc_rawb<TYPE>() + (size_t)TC_BN * TC_XS * 2;
}
template <int TYPE> __host__ __device__ constexpr size_t tc_smem_bytes() {
    return 2 * tc_stage_bytes<TYPE>() + (size_t)(TC_THREADS / 32) * 16 * TC_WS * 2;
}

struct tc_args {
    const uint8_t *W;        // weights; MoE: expert 0 of the stack (MODE 1: the gate stack)
    const uint8_t *W2;       // MODE 1: the up stack
    long long row_bytes;     // bytes per weight row
    long long expert_bytes;  // bytes per expert (MoE)
    int ne0;                 // K, multiple of TC_BK
    int n_out;               // weight rows (MODE 1: n_ff)
    const __half *x;         // activations [rows][ne0] f16 (MoE: in expert order)
    int n_rows;              // dense: activation rows
    float *y;                // MODE 0: y[row * ldy + o]
    long long ldy;
    __half *h;               // MODE 1: h[row * n_out + c], f16(silu(gate) * up)
    const int32_t *tile_e;   // MoE tiles (expert, first row, rows); NULL for dense
    const int32_t *tile_r0;
    const int32_t *tile_n;
    const int32_t *n_tiles;  // device count of valid tiles
};

// Global address of staged row r's raw span for K tile kt.
template <int TYPE, int MODE>
__device__ __forceinline__ const uint8_t *tc_row_src(const tc_args &a, const uint8_t *W1, const uint8_t *W2, int o0,
                                                     int r, int kt) {
    const uint8_t *W = W1;
    int orow;
    if (MODE == 1) {
        W = r < TC_BM / 2 ? W1 : W2;
        orow = o0 + (r & (TC_BM / 2 - 1));
    } else {
        orow = o0 + r;
    }
    orow = min(orow, a.n_out - 1);  // rows past the end repeat the last one (their outputs are not stored)
    return W + (size_t)orow * (size_t)a.row_bytes + (size_t)kt * tc_span<TYPE>();
}

// Issues the cp.async copies of K tile kt into one stage (all threads).
template <int TYPE, int MODE>
__device__ __forceinline__ void tc_load(uint8_t *stage, const tc_args &a, const uint8_t *W1, const uint8_t *W2,
                                        int o0, int row0, int nrows, int kt) {
    constexpr int RAWB = tc_rawb<TYPE>(), SPAN = tc_span<TYPE>(), NCH = RAWB / 16;
    const int tid = threadIdx.x;
    for (int idx = tid; idx < TC_BM * NCH; idx += TC_THREADS) {
        const int r = idx / NCH, c = idx % NCH;
        const uintptr_t p0 = (uintptr_t)tc_row_src<TYPE, MODE>(a, W1, W2, o0, r, kt);
        const uintptr_t al = p0 & ~(uintptr_t)15;
        const long long rem = (long long)(p0 + SPAN) - (long long)(al + 16 * c);  // bytes of the span left
        if (rem > 0) tc_cp16(stage + r * RAWB + 16 * c, (const void *)(al + 16 * c), rem < 16 ? (int)rem : 16);
    }
    __half *xs = (__half *)(stage + TC_BM * RAWB);
    for (int idx = tid; idx < TC_BN * (TC_BK / 8); idx += TC_THREADS) {
        const int t = idx / (TC_BK / 8), c = idx % (TC_BK / 8);
        const bool ok = t < nrows;
        const __half *src = a.x + (size_t)(row0 + (ok ? t : 0)) * a.ne0 + (size_t)kt * TC_BK + c * 8;
        tc_cp16(xs + t * TC_XS + c * 8, src, ok ? 16 : 0);
    }
}

template <int TYPE, int MODE>
__global__ void __launch_bounds__(TC_THREADS, 2) k_gemm_tc(const tc_args a) {
    constexpr int IPB = ST_QB_IPB(TYPE), TS = ST_QB_TSIZE(TYPE), RAWB = tc_rawb<TYPE>();
    constexpr size_t STAGE = tc_stage_bytes<TYPE>();
    extern __shared__ __align__(16) uint8_t smem[];
    __half *slabs = (__half *)(smem + 2 * STAGE);  // [4 warps][16][TC_WS]

    const uint8_t *W1 = a.W, *W2 = a.W2;
    int row0, nrows;
    if (a.tile_e) {
        const int tile = blockIdx.y;
        if (tile >= *a.n_tiles || a.tile_e[tile] < 0) return;  // (< 0: no slot, k_moe_remap_tiles in gemm.cu)
        const size_t eoff = (size_t)a.tile_e[tile] * (size_t)a.expert_bytes;
        W1 += eoff;
        if (W2) W2 += eoff;
        row0 = a.tile_r0[tile];
        nrows = a.tile_n[tile];
    } else {
        row0 = blockIdx.y * TC_BN;
        nrows = min(TC_BN, a.n_rows - row0);
    }
    const int o0 = blockIdx.x * (MODE == 1 ? TC_BM / 2 : TC_BM);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int npairs = (nrows + 15) / 16;  // 16-token pairs of n8 tiles with any valid row
    __half *slab = slabs + warp * 16 * TC_WS;

    float acc[8][4];
#pragma unroll
    for (int n = 0; n < 8; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;

    const int nk = a.ne0 / TC_BK;
    tc_load<TYPE, MODE>(smem, a, W1, W2, o0, row0, nrows, 0);
    tc_cp_commit();
    for (int kt = 0; kt < nk; kt++) {
        uint8_t *cur = smem + (kt & 1) * STAGE;
        if (kt + 1 < nk) tc_load<TYPE, MODE>(smem + ((kt + 1) & 1) * STAGE, a, W1, W2, o0, row0, nrows, kt + 1);
        tc_cp_commit();
        tc_cp_wait<1>();  // this thread's copies of tile kt have landed
        __syncthreads();  // ... and everyone else's

        // This lane's row of the warp's 16 and where its raw span starts in the stage (same offset mod 16).
        const int rr = lane & 15, r = warp * 16 + rr;
        const uint8_t *raw = cur + r * RAWB + ((uintptr_t)tc_row_src<TYPE, MODE>(a, W1, W2, o0, r, kt) & 15);
        const __half *xs = (const __half *)(cur + TC_BM * RAWB);
#pragma unroll 1
        for (int p = 0; p < TC_BK / 64; p++) {
            {  // dequantize item 2p + (lane >> 4) of row rr into the slab (32 halves)
                const int it = 2 * p + (lane >> 4);
                st_qb_w w;
                st_qb_unpack(TYPE, raw + (it / IPB) * TS, it % IPB, &w);
                uint32_t hw[16];
#pragma unroll
                for (int k = 0; k < 16; k++) {
                    const int e = 2 * k, gi = e / 8;
                    const float f0 = fmaf(w.a[gi], (float)(int8_t)(w.v[e / 4] >> (8 * (e % 4))), w.b[gi]);
                    const float f1 = fmaf(w.a[gi], (float)(int8_t)(w.v[e / 4] >> (8 * (e % 4 + 1))), w.b[gi]);
                    const __half2 h2 = __floats2half2_rn(f0, f1);
                    hw[k] = *(const uint32_t *)&h2;
                }
                uint4 *dst = (uint4 *)(slab + rr * TC_WS + (lane >> 4) * 32);
#pragma unroll
                for (int k = 0; k < 4; k++) dst[k] = make_uint4(hw[4 * k], hw[4 * k + 1], hw[4 * k + 2], hw[4 * k + 3]);
            }
            __syncwarp(ST_WARP_FULL_MASK);
#pragma unroll
            for (int ks = 0; ks < 4; ks++) {
                uint32_t af[4];
                tc_ld_a(af, slab + ks * 16, TC_WS);
#pragma unroll
                for (int np = 0; np < 4; np++) {
                    if (np < npairs) {
                        uint32_t bf[4];
                        tc_ld_b(bf, xs + np * 16 * TC_XS + p * 64 + ks * 16, TC_XS);
                        tc_mma(acc[2 * np], af, bf[0], bf[1]);
                        tc_mma(acc[2 * np + 1], af, bf[2], bf[3]);
                    }
                }
            }
            __syncwarp(ST_WARP_FULL_MASK);  // slab reads done before the next item overwrites it
        }
        __syncthreads();  // stage kt is free for tile kt + 2
    }
    tc_cp_wait<0>();
    __syncthreads();

    // Epilogue: fragments to E[token][row] (f32, reusing the stage buffers), then coalesced stores.
    float *E = (float *)smem;
    {
        const int g = lane >> 2, t = lane & 3, rw = warp * 16 + g;
#pragma unroll
        for (int n = 0; n < 8; n++) {
            const int tok = 8 * n + 2 * t;
            E[tok * TC_EPS + rw] = acc[n][0];
            E[(tok + 1) * TC_EPS + rw] = acc[n][1];
            E[tok * TC_EPS + rw + 8] = acc[n][2];
            E[(tok + 1) * TC_EPS + rw + 8] = acc[n][3];
        }
    }
    __syncthreads();
    if (MODE == 0) {
        for (int idx = tid; idx < nrows * TC_BM; idx += TC_THREADS) {
            const int tok = idx / TC_BM, r = idx % TC_BM;
            if (o0 + r < a.n_out) a.y[(size_t)(row0 + tok) * a.ldy + o0 + r] = E[tok * TC_EPS + r];
        }
    } else {
        constexpr int H = TC_BM / 2;
        for (int idx = tid; idx < nrows * H; idx += TC_THREADS) {
            const int tok = idx / H, c = idx % H;
            if (o0 + c >= a.n_out) continue;
            const float gt = E[tok * TC_EPS + c], up = E[tok * TC_EPS + H + c];
            const float v = st_am_silu_mul(gt, up);
            a.h[(size_t)(row0 + tok) * a.n_out + o0 + c] = __float2half_rn(fminf(fmaxf(v, -65504.0f), 65504.0f));
        }
    }
}

// The tc engine's types: st_gemm_tc_type (cuda/gemm_sizes.h), every quantized type st_qb_unpack knows.
#define GEMM_FOR_TCTYPES(X) ST_GEMM_TC_TYPES(X)

template <int TYPE, int MODE>
static int tc_launch_t(st_cuda_ctx *ctx, const tc_args &a, dim3 grid, cudaStream_t stream) {
    const size_t smem = tc_smem_bytes<TYPE>();
    ST_CUDA_CHECK(cudaFuncSetAttribute(k_gemm_tc<TYPE, MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    k_gemm_tc<TYPE, MODE><<<grid, TC_THREADS, smem, stream>>>(a);
    return st_cuda_check_launch(ctx, MODE == 1 ? "gemm_tc (gate/up + SwiGLU)" : "gemm_tc");
}

static int tc_launch(st_cuda_ctx *ctx, int type, int mode, const tc_args &a, dim3 grid, cudaStream_t stream) {
    switch (type) {
#define X(T)                                                                                                        \
    case T: return mode == 1 ? tc_launch_t<T, 1>(ctx, a, grid, stream) : tc_launch_t<T, 0>(ctx, a, grid, stream);
        GEMM_FOR_TCTYPES(X)
#undef X
    default: return st_err("gemm_tc: weight type %s is not supported", st_type_name(type));
    }
}

#endif
