// The MoE FFN of one decode token in one launch (decode.h: st_cuda_dec_moe).
//
// Why: the four-launch path (rmsnorm_act, router_topk, moe_glu, moe_down_q) spent ~50 us per Qwen3-30B-A3B layer
// on an H200 (Nsight Compute, bench/profile_decode.sh) for ~26 MB of weights (~6 us at 4.4 TB/s): each kernel was
// one latency chain long (the norm one block, the router 16 blocks, the down kernel quantizing its input again in
// each of its 512 blocks) and each launch boundary drained the GPU. Here the blocks stay resident and meet at two
// grid barriers (decode_common.cuh), and the down rows stream into L2 while the GLU runs.
//
// Phases (grid: blocks_per_sm x SMs, all resident; 256 threads = 8 groups of 32 lanes):
//   0. every block: x2 = x + add, the RMSNorm (same per-thread element order and double sum as k_rmsnorm_act),
//      xn = normalised row (f32) and xq = xn in the gate/up activation format, all in shared memory; the router
//      logit e by group (e / grid) of block (e % grid), from xn.                                 -> barrier 1
//   1. every block: the route (route_group, the CPU's) from the logits; L2 prefetch of its down rows of each
//      selected expert; a contiguous share of the n_used * n_ff GLU rows (gate and up of ROWS_X_N / 2 outputs
//      per pass, the activation loaded once); per chunk of the GLU output (256 rows, or 32 when n_ff % 256 != 0 and
//      the format allows) an atomic count, and the group that completes a chunk quantizes it.     -> barrier 2
//   2. block b: output rows [b R, b R + R) of every selected expert (R = ceil(n_embd / grid)), their rank-order
//      weighted sum, + x2, written to x.
// Arithmetic is that of the four-launch path, operation for operation, so the results are bit-identical.
#include "cuda/decode.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "cuda/decode_common.cuh"  // groups, quantizers, PDL, grid barrier
#include "cuda/decode_rows.cuh"    // row dots, router loads, route_group
#include "cuda/qblock.h"
#include "cuda/quantize_act.h"
#include "cuda/act_math.h"  // the CPU's SwiGLU arithmetic

#define FFN_GROUPS 8
#define FFN_THREADS (FFN_GROUPS * G32)
#define FFN_MAX_USED 32
#define FFN_MAX_ROWS 64  // output rows per block in phase 2
#define FFN_DEFAULT_BPS 2

// The kernel parameters that mirror st_cuda_dec_moe_args (decode.h), filled on the host, and the per-phase clock
// stamps.
struct moe_ffn_base {
    float *x;                           // [d] residual stream, read, then written
    const float *add, *norm_w;          // [d] added to x first (or NULL); ffn_norm gains
    float eps;
    int d;
    const void *router;                 // [E][d] F32 / F16 / BF16
    int E, K, norm_topk;
    int gu_type, down_type, gfmt, dfmt; // weight types and their activation formats
    const uint8_t *const *tbl;          // [E][3] expert row pointers
    int F;
    long long gu_row_bytes, dn_row_bytes;
    float *logits;                      // [E] out
    int32_t *ids;                       // [K] out
    float *weights;                     // [K] out
    long long *stamps;                  // NULL, or [grid][ST_DEC_MOE_STAMPS] clock64() per phase boundary
};

static inline void moe_ffn_base_fill(moe_ffn_base &p, const st_cuda_dec_moe_args *a) {
    p.x = a->x, p.add = a->add, p.norm_w = a->norm_w, p.eps = a->eps, p.d = (int)a->n_embd;
    p.router = a->router, p.E = a->n_expert, p.K = a->n_used, p.norm_topk = a->norm_topk;
    p.gu_type = a->gu_type, p.down_type = a->down_type;
    p.gfmt = st_cuda_act_format(a->gu_type), p.dfmt = st_cuda_act_format(a->down_type);
    p.tbl = (const uint8_t *const *)a->table, p.F = (int)a->n_ff;
    p.gu_row_bytes = (long long)st_row_size(a->gu_type, a->n_embd);
    p.dn_row_bytes = (long long)st_row_size(a->down_type, a->n_ff);
    p.logits = a->logits, p.ids = a->ids, p.weights = a->weights;
    p.stamps = a->stamps;
}

// Clock stamp i of this block (thread 0) when the launch asked for stamps; `p` is the kernel's parameter struct.
#define MOE_STAMP(i)                                                                                               \
    do {                                                                                                           \
        if (p.stamps && threadIdx.x == 0) p.stamps[(size_t)blockIdx.x * ST_DEC_MOE_STAMPS + (i)] = clock64();     \
    } while (0)

// One group quantizes 32-blocks [b0, b0 + n32) of an f32 row that other blocks wrote (L2 loads) into the planar
// row `row` of nb blocks (b0, n32 multiples of 8 for Q8_K).
static __device__ void group_quant(int fmt, const float *src, uint8_t *row, int nb, int b0, int n32, int lane) {
    if (fmt == ST_TYPE_Q8_K) {
        for (int kb = 0; kb < n32 / 8; kb++) {
            float v[8];
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = __ldcg(src + (size_t)kb * 256 + 32 * j + lane);
            quant256(row, nb, b0 / 8 + kb, lane, v);
        }
    } else {
        for (int b = 0; b < n32; b++)
            quant32(row, nb, b0 + b, lane, __ldcg(src + (size_t)b * 32 + lane), fmt == ST_TYPE_Q8_1);
    }
}

struct ffn_params : moe_ffn_base {
    long long aq_stride;
    int chunk_rows;
    float *act;
    uint8_t *actq;
    unsigned int *bar;
    int32_t *chunk_cnt;
    int rows_per_block;
};

template <typename T> __global__ void __launch_bounds__(FFN_THREADS) k_moe_ffn(const ffn_params p) {
    extern __shared__ __align__(16) uint8_t smem[];
    float *x2 = (float *)smem;              // [d] x + add
    float *xn = x2 + p.d;                   // [d] normalised (router input)
    uint8_t *xq = (uint8_t *)(xn + p.d);    // planar q8_1 row of d (gate/up input)
    __shared__ int32_t s_ids[FFN_MAX_USED];
    __shared__ float s_w[FFN_MAX_USED];
    __shared__ float ys[FFN_MAX_USED][FFN_MAX_ROWS];
    const int lane = threadIdx.x % G32, g = threadIdx.x / G32, ng = blockDim.x / G32;
    const int nblk = gridDim.x, d = p.d, E = p.E, K = p.K, F = p.F;
    const T *W = (const T *)p.router;

    // Weights before the dependency wait: this block's router rows and the norm weights into L2.
    for (int e = blockIdx.x; e < E; e += nblk)
        for (int off = threadIdx.x * 32; off < d; off += blockDim.x * 32) st_prefetch_l2(W + (size_t)e * d + off);
    for (int i = threadIdx.x * 32; i < d; i += blockDim.x * 32) st_prefetch_l2(p.norm_w + i);
    st_pdl_wait();
    st_pdl_trigger();
    MOE_STAMP(0);

    // ---- phase 0: x + add, RMSNorm, quantization (every block), router logits (spread) ----
    const double ss = norm_load_sumsq(x2, p.x, p.add, d, false);  // as k_rmsnorm_act
    const float scale = norm_rms_scale(ss, d, p.eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) xn[i] = x2[i];
    norm_scale(xn, p.norm_w, scale, NULL, d);
    __syncthreads();
    block_quant<false>(p.gfmt, xn, xq, d / 32, 0, d / 32);
    MOE_STAMP(1);
    const int n4 = d / 4;
    for (int e = blockIdx.x + g * nblk; e < E; e += nblk * ng) {
        const T *w = W + (size_t)e * d;
        float sum = 0.0f;  // as k_router: i4 ascending per lane, then the butterfly
#pragma unroll 16
        for (int i4 = lane; i4 < n4; i4 += G32) {
            const float4 a = ld4<T>(w, i4), b = ldx4<T>(xn, i4);
            sum += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
        }
        sum = g32_sum_f(sum);
        if (lane == 0) p.logits[e] = sum;
    }
    MOE_STAMP(2);
    st_grid_sync(p.bar);
    MOE_STAMP(3);

    // ---- phase 1: route (every block), down-row prefetch, GLU share, chunk quantization ----
    if (g == 0) route_group(p.logits, E, K, p.norm_topk, s_ids, s_w);
    __syncthreads();
    MOE_STAMP(4);
    if (blockIdx.x == 0 && threadIdx.x < K) p.ids[threadIdx.x] = s_ids[threadIdx.x], p.weights[threadIdx.x] = s_w[threadIdx.x];
    const int R = p.rows_per_block, r0 = blockIdx.x * R, nr = min(R, d - r0);
    if (nr > 0) {
        const long long span = (long long)nr * p.dn_row_bytes;  // this block's rows of one expert: contiguous
        const int lines = (int)((span + 127) / 128);
        for (int i = threadIdx.x; i < K * lines; i += blockDim.x) {
            const int k = i / lines, e = s_ids[k];
            if (e >= 0 && e < E) st_prefetch_l2(st_tbl_entry(p.tbl, 3 * e + 2) + (size_t)r0 * p.dn_row_bytes + (size_t)(i % lines) * 128);
        }
    }
    const int np = K * F, nw = nblk * ng, per = (np + nw - 1) / nw;
    const int gw = blockIdx.x * ng + g, p_begin = min(np, gw * per), p_end = min(np, p_begin + per);
    const int nitems = d / 32;
    for (int p0 = p_begin; p0 < p_end; p0 += ROWS_X_N / 2) {
        const uint8_t *rows[ROWS_X_N];
#pragma unroll
        for (int n = 0; n < ROWS_X_N / 2; n++) {
            const int pp = p0 + n, k = pp / F, r = pp % F;
            const int e = pp < p_end ? s_ids[k] : -1;
            const bool ok = e >= 0 && e < E;
            rows[2 * n] = ok ? st_tbl_entry(p.tbl, 3 * e) + (size_t)r * p.gu_row_bytes : NULL;
            rows[2 * n + 1] = ok ? st_tbl_entry(p.tbl, 3 * e + 1) + (size_t)r * p.gu_row_bytes : NULL;
        }
        float v[ROWS_X_N];
        rows_dot_x4_any(p.gu_type, rows, xq, nitems, lane, v);
        if (lane == 0)
#pragma unroll
            for (int n = 0; n < ROWS_X_N / 2; n++) {
                const int pp = p0 + n;
                if (pp >= p_end) break;
                const float a = v[2 * n], b = v[2 * n + 1];
                p.act[pp] = st_am_silu_mul(a, b);  // as k_moe_glu (NaN for an invalid id)
            }
    }
    MOE_STAMP(5);
    // Chunk accounting: the group that brings a chunk's count to chunk_rows quantizes it.
    for (int c0 = p_begin; c0 < p_end;) {
        const int c = c0 / p.chunk_rows, c_end = min(p_end, (c + 1) * p.chunk_rows), cnt = c_end - c0;
        int last = 0;
        if (lane == 0) {
            __threadfence();
            const int old = atomicAdd(p.chunk_cnt + c, cnt);
            last = old + cnt == p.chunk_rows;
            if (last) __threadfence();
        }
        last = __shfl_sync(ST_WARP_MASK, last, 0);
        if (last) {
            const int k = c * p.chunk_rows / F, rb = c * p.chunk_rows % F;
            group_quant(p.dfmt, p.act + (size_t)k * F + rb, p.actq + (size_t)k * p.aq_stride, F / 32, rb / 32,
                        p.chunk_rows / 32, lane);
            if (lane == 0) p.chunk_cnt[c] = 0;  // ready for the next launch
        }
        c0 = c_end;
    }
    MOE_STAMP(6);
    st_grid_sync(p.bar);
    MOE_STAMP(7);

    // ---- phase 2: this block's output rows of every selected expert, rank-order sum, residual ----
    if (nr <= 0) {
        MOE_STAMP(8);
        return;
    }
    const int nit_f = F / 32;
    for (int t0 = g; t0 < K * R; t0 += ng * DOWN_N) {
        const uint8_t *rows[DOWN_N], *xqs[DOWN_N];
#pragma unroll
        for (int n = 0; n < DOWN_N; n++) {
            const int task = t0 + n * ng, k = task / R, rr = task % R;
            rows[n] = NULL;
            xqs[n] = p.actq;
            if (task < K * R && rr < nr) {
                const int e = s_ids[k];
                if (e >= 0 && e < E) rows[n] = st_tbl_entry(p.tbl, 3 * e + 2) + (size_t)(r0 + rr) * p.dn_row_bytes;
                xqs[n] = p.actq + (size_t)k * p.aq_stride;
            }
        }
        float v[DOWN_N];
        row_dot4_any(p.down_type, rows, xqs, nit_f, lane, v);
#pragma unroll
        for (int n = 0; n < DOWN_N; n++) {
            const int task = t0 + n * ng;
            if (task < K * R && lane == 0) ys[task / R][task % R] = v[n];
        }
    }
    __syncthreads();
    // (actq was written by other SMs in phase 1; plain loads are safe: no SM reads it before barrier 2 in this
    // launch, so no L1 holds a line of it from this launch, and L1 does not outlive a launch.)
    for (int rr = threadIdx.x; rr < nr; rr += blockDim.x) {
        p.x[r0 + rr] = __fadd_rn(x2[r0 + rr], rank_sum(&ys[0][0], FFN_MAX_ROWS, rr, s_w, K));
    }
    MOE_STAMP(8);
}

static size_t ffn_smem(int64_t d) { return sizeof(float) * 2 * (size_t)d + (size_t)st_q8_1_row_bytes(d); }

extern "C" size_t st_cuda_dec_moe_ws_bytes(int64_t n_ff, int n_used) {
    const int64_t chunks = (n_ff > 0 ? (n_ff + 31) / 32 : 1) * (n_used > 0 ? n_used : 1);
    return sizeof(int32_t) * (size_t)(1 + chunks);
}

// Occupancy of the kernel (per device ordinal and row width: the shared memory depends on it).
static int ffn_blocks_per_sm(int64_t d, int *n_sm) {
    static int cached_dev = -1, cached_sm = 0, cached_occ = 0;
    static int64_t cached_d = -1;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    if (dev != cached_dev || d != cached_d) {
        const size_t smem = ffn_smem(d);
        int occ = 1 << 30, sm = 0;
        if (cudaDeviceGetAttribute(&sm, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 0;
        // The three router instantiations have the same resources but are separate functions: take the minimum.
        void (*const fns[3])(const ffn_params) = {k_moe_ffn<float>, k_moe_ffn<__half>, k_moe_ffn<__nv_bfloat16>};
        for (int f = 0; f < 3; f++) {
            int o = 0;
            if ((smem > 48 * 1024 && cudaFuncSetAttribute(fns[f], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                          (int)smem) != cudaSuccess) ||
                cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o, fns[f], FFN_THREADS, smem) != cudaSuccess) {
                cudaGetLastError();
                return 0;
            }
            occ = o < occ ? o : occ;
        }
        cached_dev = dev, cached_d = d, cached_sm = sm, cached_occ = occ;
    }
    *n_sm = cached_sm;
    return cached_occ;
}

extern "C" int st_cuda_dec_moe_grid(int64_t n_embd, int blocks_per_sm) {
    if (n_embd <= 0 || n_embd > ST_MOE_FFN_MAX_EMBD) return 0;
    int sm = 0;
    const int occ = ffn_blocks_per_sm(n_embd, &sm);
    int bps = blocks_per_sm > 0 ? blocks_per_sm : FFN_DEFAULT_BPS;
    if (bps > occ) bps = occ;
    if (bps <= 0 || (n_embd + (int64_t)bps * sm - 1) / ((int64_t)bps * sm) > FFN_MAX_ROWS) return 0;
    return bps * sm;
}

// Launch with PDL when on. No cooperative attribute: the grid is sized by the occupancy, and with PDL the blocks
// of this kernel are placed as the previous kernel's blocks leave (those never wait on this kernel), while the next
// kernel's blocks are placed only after every block of this one has started (st_pdl_trigger), so all blocks of
// this grid are resident together and the barriers cannot deadlock on a device this process has to itself.
template <typename T> static int ffn_launch(const ffn_params &p, int grid, size_t smem, cudaStream_t stream) {
    st_dec_launch(k_moe_ffn<T>, dim3((unsigned)grid), dim3(FFN_THREADS), smem, stream, p);
    return launch_check("moe_ffn");
}

extern "C" int st_cuda_dec_moe(const st_cuda_dec_moe_args *a, cudaStream_t stream) {
    const int64_t d = a->n_embd, F = a->n_ff;
    const int E = a->n_expert, K = a->n_used;
    const int gfmt = st_cuda_act_format(a->gu_type), dfmt = st_cuda_act_format(a->down_type);
    if (!st_cuda_dec_supported(a->gu_type) || !st_cuda_dec_supported(a->down_type) || !dec_fmt_ok(gfmt) ||
        !dec_fmt_ok(dfmt))
        return st_err("st_cuda_dec_moe: expert types %s / %s are not supported", st_type_name(a->gu_type),
                      st_type_name(a->down_type));
    if (d <= 0 || d > ST_MOE_FFN_MAX_EMBD || d % 32 || (gfmt == ST_TYPE_Q8_K && d % 256) ||
        d % st_type_get(a->gu_type)->block_size)
        return st_err("st_cuda_dec_moe: n_embd %lld (multiple of 32, of 256 for Q8_K inputs, at most %d)",
                      (long long)d, ST_MOE_FFN_MAX_EMBD);
    if (F <= 0 || F % 32 || (dfmt == ST_TYPE_Q8_K && F % 256) || F % st_type_get(a->down_type)->block_size ||
        F > INT32_MAX / 64)
        return st_err("st_cuda_dec_moe: n_ff %lld for a %s down projection", (long long)F, st_type_name(a->down_type));
    if (E <= 0 || E > ROUTER_MAX_PER_LANE * G32 || K <= 0 || K > FFN_MAX_USED || K > E)
        return st_err("st_cuda_dec_moe: %d of %d experts (at most 32 of %d)", K, E, ROUTER_MAX_PER_LANE * G32);
    if (!a->x || !a->norm_w || !a->router || !a->table || !a->logits || !a->act || !a->actq || !a->ids ||
        !a->weights || !a->ws || ((uintptr_t)a->actq & 15) || ((uintptr_t)a->router & 15))
        return st_err("st_cuda_dec_moe: NULL or misaligned device pointer");
    const int grid = a->grid > 0 ? a->grid : st_cuda_dec_moe_grid(d, 0);
    if (grid <= 0) return st_err("st_cuda_dec_moe: the kernel cannot be resident on this device");
    const int R = (int)((d + grid - 1) / grid);
    if (R > FFN_MAX_ROWS)
        return st_err("st_cuda_dec_moe: %d blocks for %lld rows (at most %d rows per block)", grid, (long long)d,
                      FFN_MAX_ROWS);
    ffn_params p;
    moe_ffn_base_fill(p, a);
    p.aq_stride = (long long)st_q8_1_row_bytes(F);
    p.chunk_rows = F % 256 == 0 ? 256 : 32;
    p.act = a->act, p.actq = (uint8_t *)a->actq;
    p.bar = (unsigned int *)a->ws, p.chunk_cnt = (int32_t *)a->ws + 1;
    p.rows_per_block = R;
    const size_t smem = ffn_smem(d);
    int sm = 0;
    if (ffn_blocks_per_sm(d, &sm) * sm < grid)
        return st_err("st_cuda_dec_moe: %d blocks cannot all be resident (%d per SM x %d SMs)", grid,
                      ffn_blocks_per_sm(d, &sm), sm);
    switch (a->router_type) {
    case ST_TYPE_F32: return ffn_launch<float>(p, grid, smem, stream);
    case ST_TYPE_F16: return ffn_launch<__half>(p, grid, smem, stream);
    case ST_TYPE_BF16: return ffn_launch<__nv_bfloat16>(p, grid, smem, stream);
    default: return st_err("st_cuda_dec_moe: router type %s (F32, F16 or BF16)", st_type_name(a->router_type));
    }
}
