// The mmvq kernel template, shared by the per-type-group instantiation files (mmvq_t_*.cu) so the many
// instantiations compile in parallel. Only mmvq*.cu include this.
//
// Work split: a CTA is MMVQ_WARPS warps. A "row group" is R output rows (2 rows, gate and up, for GLU) computed
// together so each activation item loaded into registers is reused R times; `wpr` warps (1, 2 or 4, chosen at
// launch so small matrices still fill the GPU) split one row group's items and combine through shared memory.
// Within a warp, lane l takes items l, l + 32 wpr, ...: consecutive lanes read consecutive 32-weight items, so a
// warp's loads cover contiguous row bytes (every byte read once from DRAM). Weights are unpacked once per item
// (cuda/qblock.h) and dotted with the NT tokens' activations via dp4a; partial sums are reduced by shuffles.
// blockIdx.y selects the (token, slot) pair in the expert-indexed (ids) mode.
#ifndef STRATA_CUDA_MMVQ_IMPL_CUH
#define STRATA_CUDA_MMVQ_IMPL_CUH

#include <stdlib.h>

#include "cuda/mmvq.h"
#include "cuda/qblock.h"
#include "cuda/runtime.h"
#include "cuda/act_math.h"  // the CPU's SwiGLU arithmetic
#include "cuda/decode_common.cuh"  // PDL: st_pdl_wait / st_pdl_trigger, st_dec_launch (the staged kernel)

#define MMVQ_WARPS 4

struct st_mmvq_args {
    const uint8_t *W;      // weights (expert 0 in ids mode); GLU: gate
    const uint8_t *W2;     // GLU: up (same layout as W); else unused
    long long row_bytes;   // bytes per weight row
    long long expert_bytes;  // bytes per expert (n_out rows)
    int nitems;            // 32-element items per row (ne0 / 32)
    int n_out;             // rows per matrix
    int n_expert;          // ids mode: experts in the stack
    const uint8_t *xq;     // planar q8_1 activation rows
    long long xq_stride;   // bytes per activation row
    int n_tok;             // plain mode: tokens (activation rows 0..n_tok-1)
    int n_xrows;           // ids mode: rows in xq (bounds check)
    const int32_t *ids;    // [n_sel] expert per pair, or NULL for plain mode
    const int32_t *xrow;   // [n_sel] activation row per pair, or NULL (row p)
    float *y;              // output
    long long ldy;         // plain: floats between tokens' outputs; ids: between pairs' outputs
    int wpr;               // warps per row group: 1, 2 or 4
};

__device__ __forceinline__ float st_warp_sum(float v) {
#pragma unroll
    for (int o = ST_WARP_SIZE / 2; o > 0; o >>= 1) v += __shfl_xor_sync(ST_WARP_FULL_MASK, v, o);
    return v;
}

template <int TYPE, int NT, int R, bool GLU>
__global__ void __launch_bounds__(MMVQ_WARPS * ST_WARP_SIZE) st_k_mmvq(const st_mmvq_args a) {
    constexpr int IPB = ST_QB_IPB(TYPE), TS = ST_QB_TSIZE(TYPE), RR = GLU ? 2 : R;
    constexpr int AMODE = ST_QB_AMODE(TYPE), BMODE = ST_QB_BMODE(TYPE);
    constexpr bool FLT = ST_QB_IS_FLOAT(TYPE);
    const int lane = threadIdx.x, warp = threadIdx.y;
    const int wpr = a.wpr;
    const int grp = blockIdx.x * (MMVQ_WARPS / wpr) + warp / wpr, kp = warp % wpr;
    const int row0 = grp * (GLU ? 1 : R);

    const uint8_t *W = a.W, *W2 = a.W2, *xq = a.xq;
    float *y = a.y;
    bool bad = false;
    if (a.ids) {
        const int p = blockIdx.y;
        const int e = a.ids[p];
        const int xr = a.xrow ? a.xrow[p] : p;
        bad = e < 0 || e >= a.n_expert || xr < 0 || xr >= a.n_xrows;
        if (!bad) {
            W += (size_t)e * (size_t)a.expert_bytes;
            if (GLU) W2 += (size_t)e * (size_t)a.expert_bytes;
            xq += (size_t)xr * (size_t)a.xq_stride;
        }
        y += (size_t)p * (size_t)a.ldy;
    }
    const uint8_t *rp[RR];
    bool rv[RR];
#pragma unroll
    for (int k = 0; k < RR; k++) {
        const int row = GLU ? row0 : row0 + k;
        rv[k] = !bad && row < a.n_out;
        rp[k] = (GLU && k == 1 ? W2 : W) + (size_t)(rv[k] ? row : 0) * (size_t)a.row_bytes;
    }
    float acc[RR][NT];
#pragma unroll
    for (int k = 0; k < RR; k++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[k][t] = 0.0f;

    if (rv[0]) {  // rows of a group are consecutive, so an invalid first row means the whole group is
        const uint8_t *xds = xq + (size_t)a.nitems * 32;
        for (int it = kp * ST_WARP_SIZE + lane; it < a.nitems; it += ST_WARP_SIZE * wpr) {
            int32_t q[NT][8];
            float d8[NT], s8[NT];
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (NT == 1 || t < a.n_tok) {
                    const uint4 *qp = (const uint4 *)(xq + (size_t)t * (size_t)a.xq_stride + (size_t)it * 32);
                    const uint4 v0 = qp[0], v1 = qp[1];
                    q[t][0] = (int32_t)v0.x, q[t][1] = (int32_t)v0.y, q[t][2] = (int32_t)v0.z, q[t][3] = (int32_t)v0.w;
                    q[t][4] = (int32_t)v1.x, q[t][5] = (int32_t)v1.y, q[t][6] = (int32_t)v1.z, q[t][7] = (int32_t)v1.w;
                    const float2 ds = ((const float2 *)(xds + (size_t)t * (size_t)a.xq_stride))[it];
                    d8[t] = ds.x, s8[t] = ds.y;
                } else {
#pragma unroll
                    for (int k = 0; k < 8; k++) q[t][k] = 0;
                    d8[t] = 0.0f, s8[t] = 0.0f;
                }
            }
            const int blk = it / IPB, j = it % IPB;
#pragma unroll
            for (int k = 0; k < RR; k++) {
                if (!rv[k]) continue;
                const uint8_t *bp = rp[k] + (size_t)blk * TS;
                if (FLT) {
                    // Stream 4 weights at a time so NT tokens x R rows do not hold 32 weights each in registers.
                    float part[NT];
#pragma unroll
                    for (int t = 0; t < NT; t++) part[t] = 0.0f;
#pragma unroll
                    for (int c = 0; c < 8; c++) {
                        float w4[4];
                        st_qb_float4(TYPE, bp, c, w4);
#pragma unroll
                        for (int t = 0; t < NT; t++) part[t] += st_qb_float4_dot(w4, q[t][c]);
                    }
#pragma unroll
                    for (int t = 0; t < NT; t++) acc[k][t] += part[t] * d8[t];
                } else {
                    st_qb_w w;
                    st_qb_unpack(TYPE, bp, j, &w);
#pragma unroll
                    for (int t = 0; t < NT; t++) acc[k][t] += st_qb_dot_w(&w, q[t], d8[t], s8[t], AMODE, BMODE);
                }
            }
        }
    }
#pragma unroll
    for (int k = 0; k < RR; k++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[k][t] = st_warp_sum(acc[k][t]);

    if (wpr > 1) {  // uniform across the CTA, so the barrier is safe
        __shared__ float red[MMVQ_WARPS][RR * NT];
        if (lane == 0) {
#pragma unroll
            for (int k = 0; k < RR; k++)
#pragma unroll
                for (int t = 0; t < NT; t++) red[warp][k * NT + t] = acc[k][t];
        }
        __syncthreads();
        if (kp == 0) {
#pragma unroll
            for (int k = 0; k < RR; k++)
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    float s = 0.0f;
                    for (int w2 = 0; w2 < wpr; w2++) s += red[warp + w2][k * NT + t];
                    acc[k][t] = s;
                }
        }
    }
    if (kp != 0) return;
    const float nan = __int_as_float(0x7fc00000);
    if (GLU) {
        if (lane == 0 && row0 < a.n_out) {
            const float g = acc[0][0], u = acc[1][0];
            y[row0] = bad ? nan : st_am_silu_mul(g, u);
        }
    } else {
#pragma unroll
        for (int k = 0; k < RR; k++)
#pragma unroll
            for (int t = 0; t < NT; t++)
                if (lane == k * NT + t && row0 + k < a.n_out && (NT == 1 || t < a.n_tok))
                    y[(size_t)t * (size_t)a.ldy + row0 + k] = bad ? nan : acc[k][t];
    }
}

// Staged rows (one token, one warp per row, no ids, rows 16-byte aligned): for block layouts whose fields are not
// 16-byte aligned (Q6_K's 210-byte blocks, Q3_K, Q2_K), each lane's item loads are many 2-byte loads scattered
// over several blocks, so a warp-wide load touches many cache lines (the Q6_K LM head ran at 52% of bandwidth).
// Here the warp first copies its ST_MMVQ_STAGE_ROWS rows into shared memory with 16-byte loads, all in flight
// together, then unpacks the items from there. Per row, the same items per lane, the same order of the sums and
// the same butterfly as st_k_mmvq<TYPE, 1, 1, false> with one warp per row: the outputs are bit-identical.
#ifndef ST_MMVQ_STAGE_ROWS
#define ST_MMVQ_STAGE_ROWS 2  // rows per warp
#endif
#define ST_MMVQ_STAGE_MAX_SMEM 49152  // dynamic shared bytes per block (MMVQ_WARPS x rows x row bytes)
#define ST_MMVQ_STAGE_U 8             // 16-byte loads per lane in flight per pass

template <int TYPE>
__global__ void __launch_bounds__(MMVQ_WARPS *ST_WARP_SIZE) st_k_mmvq_staged(const st_mmvq_args a) {
    constexpr int IPB = ST_QB_IPB(TYPE), TS = ST_QB_TSIZE(TYPE), RW = ST_MMVQ_STAGE_ROWS;
    constexpr int AMODE = ST_QB_AMODE(TYPE), BMODE = ST_QB_BMODE(TYPE);
    extern __shared__ __align__(16) uint4 st_stage[];  // [MMVQ_WARPS][RW][row_bytes / 16]
    const int lane = threadIdx.x, warp = threadIdx.y;
    const int n16 = (int)(a.row_bytes / 16);
    const long long row0 = ((long long)blockIdx.x * MMVQ_WARPS + warp) * RW;
    const int nrows = (int)min((long long)RW, (long long)a.n_out - row0);  // rows of this warp (<= 0: none)
    if (nrows <= 0) return;  // whole warps; no block barrier below
    uint4 *sw = st_stage + (size_t)warp * RW * n16;
    const uint4 *src = (const uint4 *)(a.W + (size_t)row0 * (size_t)a.row_bytes);  // the warp's rows, contiguous
    const int total = nrows * n16;
    for (int c0 = 0; c0 < total; c0 += ST_WARP_SIZE * ST_MMVQ_STAGE_U) {
        uint4 v[ST_MMVQ_STAGE_U];
#pragma unroll
        for (int u = 0; u < ST_MMVQ_STAGE_U; u++) {
            const int c = c0 + u * ST_WARP_SIZE + lane;
            if (c < total) v[u] = __ldcs(src + c);  // streamed: read once
        }
#pragma unroll
        for (int u = 0; u < ST_MMVQ_STAGE_U; u++) {
            const int c = c0 + u * ST_WARP_SIZE + lane;
            if (c < total) sw[c] = v[u];
        }
    }
    __syncwarp();
    // The dependency wait after the staging: the rows are weights (no kernel's output), so a PDL launch (the LM head
    // after the final norm) has its first wave's rows in flight while the previous kernel finishes.
    st_pdl_wait();
    st_pdl_trigger();
    const uint8_t *rows = (const uint8_t *)sw;
    const uint8_t *xds = a.xq + (size_t)a.nitems * 32;
    float acc[RW];
#pragma unroll
    for (int r = 0; r < RW; r++) acc[r] = 0.0f;
    for (int it = lane; it < a.nitems; it += ST_WARP_SIZE) {
        int32_t q[8];
        const uint4 *qp = (const uint4 *)(a.xq + (size_t)it * 32);
        const uint4 v0 = qp[0], v1 = qp[1];
        q[0] = (int32_t)v0.x, q[1] = (int32_t)v0.y, q[2] = (int32_t)v0.z, q[3] = (int32_t)v0.w;
        q[4] = (int32_t)v1.x, q[5] = (int32_t)v1.y, q[6] = (int32_t)v1.z, q[7] = (int32_t)v1.w;
        const float2 ds = ((const float2 *)xds)[it];
        const int blk = it / IPB, j = it % IPB;
#pragma unroll
        for (int r = 0; r < RW; r++) {
            st_qb_w w;
            st_qb_unpack(TYPE, rows + (size_t)r * a.row_bytes + (size_t)blk * TS, j, &w);
            acc[r] += st_qb_dot_w(&w, q, ds.x, ds.y, AMODE, BMODE);
        }
    }
#pragma unroll
    for (int r = 0; r < RW; r++) acc[r] = st_warp_sum(acc[r]);
    if (lane < nrows) {
        float o = acc[0];
#pragma unroll
        for (int r = 1; r < RW; r++)
            if (lane == r) o = acc[r];
        a.y[row0 + lane] = o;
    }
}

extern int st_mmvq_staging;  // 1 on, 0 off, -1 from STRATA_MMVQ_STAGE at the first launch (mmvq.cu)
// Whether (and with how much dynamic shared memory) st_k_mmvq_staged takes a launch that would otherwise run
// st_k_mmvq<type, 1, 1, false> with one warp per row: returns the shared bytes, or 0 for "not staged".
static inline size_t st_mmvq_staged_smem(int type, const st_mmvq_args &a, int n_tok, bool glu) {
    if (glu || a.ids || n_tok != 1 || a.wpr != 1 || a.row_bytes % 16 || ST_QB_IS_FLOAT(type) ||
        (ST_QB_ALIGN(type) >= 16))
        return 0;
    if (st_mmvq_staging < 0) {  // STRATA_MMVQ_STAGE=0: never staged (A/B)
        const char *e = getenv("STRATA_MMVQ_STAGE");
        st_mmvq_staging = !(e && atoi(e) == 0);
    }
    const size_t smem = (size_t)MMVQ_WARPS * ST_MMVQ_STAGE_ROWS * (size_t)a.row_bytes;
    return st_mmvq_staging && smem <= ST_MMVQ_STAGE_MAX_SMEM ? smem : 0;
}
// The staged kernel as a PDL launch (default; STRATA_MMVQ_PDL=0: a plain launch, A/B): the LM head's launch gap and
// first rows behind the final norm. H200 (2026-12-05): tg128 560.70 vs 560.44 tok/s, ~1 us per token (predicted 2-4).
static inline bool st_mmvq_pdl(void) {
    static int v = -1;
    return env_switch(&v, "STRATA_MMVQ_PDL", 1) != 0;
}
#define ST_MMVQ_STAGED_CASE(T)                                                                              \
    case T:                                                                                                 \
        st_dec_launch_if(st_mmvq_pdl(), st_k_mmvq_staged<T>,                                                \
                      dim3((unsigned)((a.n_out + MMVQ_WARPS * ST_MMVQ_STAGE_ROWS - 1) /                     \
                                      (MMVQ_WARPS * ST_MMVQ_STAGE_ROWS))),                                  \
                      dim3(ST_WARP_SIZE, MMVQ_WARPS), staged, s, a);                                        \
        return 1;

// Launches the kernel variant for (TYPE, token count class, glu).
template <int TYPE>
static void st_mmvq_launch_type(const st_mmvq_args &a, int n_tok, bool glu, dim3 grid, cudaStream_t s) {
    const dim3 block(ST_WARP_SIZE, MMVQ_WARPS);
    if (glu)
        st_k_mmvq<TYPE, 1, 1, true><<<grid, block, 0, s>>>(a);
    else if (n_tok == 1)
        st_k_mmvq<TYPE, 1, 1, false><<<grid, block, 0, s>>>(a);
    else if (n_tok == 2)
        st_k_mmvq<TYPE, 2, ST_QB_IS_FLOAT(TYPE) ? 1 : 2, false><<<grid, block, 0, s>>>(a);
    else if (n_tok <= 4)
        st_k_mmvq<TYPE, 4, ST_QB_IS_FLOAT(TYPE) ? 1 : 4, false><<<grid, block, 0, s>>>(a);
    else
        st_k_mmvq<TYPE, 8, ST_QB_IS_FLOAT(TYPE) ? 1 : 4, false><<<grid, block, 0, s>>>(a);
}

// Rows per row group (must match st_mmvq_launch_type). Float weights use 1 row for 3+ tokens: the compiler
// would otherwise keep every token's 32 converted activations live across rows and spill.
static inline int st_mmvq_rows_per_group(int type, int n_tok, bool glu) {
    return glu || n_tok == 1 || ST_QB_IS_FLOAT(type) ? 1 : n_tok == 2 ? 2 : 4;
}

// Per-group dispatchers (mmvq_t_*.cu): return 1 if the type belongs to the group (and was launched), else 0.
int st_mmvq_launch_float(int type, const st_mmvq_args &a, int n_tok, bool glu, dim3 grid, cudaStream_t s);
int st_mmvq_launch_legacy(int type, const st_mmvq_args &a, int n_tok, bool glu, dim3 grid, cudaStream_t s);
int st_mmvq_launch_kquant(int type, const st_mmvq_args &a, int n_tok, bool glu, dim3 grid, cudaStream_t s);
int st_mmvq_launch_iq(int type, const st_mmvq_args &a, int n_tok, bool glu, dim3 grid, cudaStream_t s);

#define ST_MMVQ_CASE(T)                              \
    case T: st_mmvq_launch_type<T>(a, n_tok, glu, grid, s); return 1;

#endif
