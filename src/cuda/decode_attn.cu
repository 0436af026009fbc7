// Decode attention, version 2 (decode.h: st_cuda_attn_dec): flash-decoding whose split count follows the actual
// KV length read on the device, the combine done by the last block of each KV head, the CPU-format quantization
// of the output fused in. Two kernels: k_attn_dec_tc (round 3, below: f16 caches on sm_80+, tensor cores,
// two-level merge) and the SIMT k_attn_dec described here (f32 caches, older devices, A/B).
//
// Grid (n_split, n_head_kv), 128 threads. From L = *d_pos + 1 every block computes the same chunk =
// max(ceil(L / n_split), ATT_MINC) rounded up to ATT_MINC and n_act = ceil(L / chunk); blocks with split >= n_act
// exit at once, so depth 256 runs ~9 blocks per KV head and depth 16K ~64, from one captured graph.
//
// Inside a block the work unit is a lane "row group" of LPR = head_dim / VEC lanes (VEC = elements per 16 bytes:
// 8 for f16, 4 for f32), so one 16-byte load per lane reads one cache row of the KV head (16 lanes for f16 x 128).
// A warp holds NGW = 32 / LPR row groups, each running its own online softmax over its own positions; lane j of a
// group keeps the VEC query elements j*VEC.. of all GP (>= G, padded) heads of the KV head in registers and the
// matching VEC output elements of every head, so K and V are read from memory exactly once per step and never
// pass through shared memory except as cp.async staging (each thread reads back only what it copied: no barrier
// in the main loop). Scores: GP partial dots per lane, reduced over the group by a transposing butterfly (halving
// the values each step: GP - 1 + log2(LPR / GP) shuffles instead of GP log2(LPR)), after which lane j holds the
// score of head j / (LPR / GP). Batches of NB rows per group share one max update, then P.V.
//
// Loads: cp.async (sm_80+) of each batch's K and V rows into per-thread staging, ATT_ST stages deep, so 2 batches
// (8 KiB per warp) are in flight while one is computed; portable fallback: plain loads.
//
// End: the block merges its NW * NGW partials in shared memory and writes one (max, sum, unnormalised output) per
// head and split; then the last block of the KV head to finish (atomic counter, reset by that block for the next
// graph replay) merges the n_act splits, writes out[] and, when asked, quantizes its heads' G * head_dim outputs
// (a whole number of 32/256 blocks of the planar row) in the CPU format for the O projection.
#include "cuda/decode.h"

#include <cuda_fp16.h>
#include <math.h>
#include <stdlib.h>  // getenv
#include <string.h>  // memcpy
#include <cuda.h>  // CUtensorMap and cuTensorMapEncodeTiled's types (ATC_TMA; the function: a driver entry point)

#include "cuda/decode_common.cuh"
#include "cuda/mma.cuh"  // mma.sync m16n8k16 (portable fallback without PTX), cp.async
#include "cuda/qblock.h"


// The decode attention kernels take the step's position from their read before the dependency wait: d_pos is no
// kernel's output (the host's copy precedes the step's launches in stream order, engine/gpu.c), so that read is the
// step's value, and the chunk and the first K/V rows follow the wait without an L2 round trip. H200 (2026-12-01i,
// then an A/B build): tg128 502.30 vs 500.69 tok/s, tg128 at depth 16384 345.67 vs 345.43.
#define ATT_NW 4                   // warps per block
#define ATT_NT (ATT_NW * 32)       // threads per block
#define ATT_NB 4                   // rows per group per batch
#define ATT_ST 3                   // staging stages
#define ATT_MAX_SPLIT 256          // n_split limit (last-block weights in shared memory)
#define ATT_SMEM 49152             // static shared bytes: the staging, reused by the merges

__device__ __forceinline__ void att_cvt(const uint4 &u, float *f, const __half *) {
    const __half2 *h = (const __half2 *)&u;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 x = __half22float2(h[i]);
        f[2 * i] = x.x;
        f[2 * i + 1] = x.y;
    }
}
__device__ __forceinline__ void att_cvt(const uint4 &u, float *f, const float *) {
    f[0] = __uint_as_float(u.x), f[1] = __uint_as_float(u.y), f[2] = __uint_as_float(u.z), f[3] = __uint_as_float(u.w);
}

// Chunk of positions per split (a multiple of minc) and the number of non-empty splits, for L positions.
__device__ __forceinline__ void att_chunk(int L, int n_split, int minc, int &chunk, int &n_act) {
    int c = (L + n_split - 1) / n_split;
    c = c < minc ? minc : (c + minc - 1) / minc * minc;
    chunk = c;
    n_act = (L + c - 1) / c;
}

// Transposing butterfly over a group of LPR lanes: v[GP] per lane -> the group sum of v[h] for the lane's head h.
template <int GP, int LPR> __device__ __forceinline__ float att_reduce(float (&v)[GP], int j) {
    int o = LPR / 2;
#pragma unroll
    for (int c = GP; c > 1; c >>= 1) {
        const bool up = (j & o) != 0;
#pragma unroll
        for (int i = 0; i < c / 2; i++) {
            const float send = up ? v[i] : v[i + c / 2], keep = up ? v[i + c / 2] : v[i];
            v[i] = keep + __shfl_xor_sync(ST_WARP_MASK, send, o);
        }
        o >>= 1;
    }
    float r = v[0];
#pragma unroll
    for (int oo = LPR / (2 * GP); oo > 0; oo >>= 1) r += __shfl_xor_sync(ST_WARP_MASK, r, oo);
    return r;
}

template <typename KT, int HD, int GP>
__global__ void __launch_bounds__(ATT_NT)
    k_attn_dec(float *__restrict__ out, uint8_t *__restrict__ outq, int fmt, const float *__restrict__ q,
               const KT *__restrict__ kc, const KT *__restrict__ vc, const int32_t *__restrict__ d_pos, int G,
               int n_head_kv, float scale, int n_split, float *__restrict__ ws_o, float *__restrict__ ws_ml,
               int32_t *__restrict__ counters) {
    constexpr int VEC = 16 / (int)sizeof(KT);   // elements per 16-byte load
    constexpr int LPR = HD / VEC;               // lanes per cache row (group size)
    constexpr int NGW = 32 / LPR;               // row groups per warp
    constexpr int BP = ATT_NB * NGW;            // positions per warp batch
    constexpr int MINC = ATT_NW * BP;           // positions per block batch (minimum chunk)
    constexpr int NSUB = ATT_NW * NGW;          // row groups per block
    constexpr int HSTEP = LPR / GP;             // lanes per head after the reduction
    static_assert(GP <= LPR && LPR <= 32 && (LPR & (LPR - 1)) == 0, "group layout");
    static_assert(ATT_ST * ATT_NB * 2 * 16 * ATT_NT <= ATT_SMEM, "staging");
    static_assert(sizeof(float) * NSUB * GP * (HD + 2) <= ATT_SMEM - 16, "block merge");
    static_assert(sizeof(float) * GP * (ATT_MAX_SPLIT + HD) <= ATT_SMEM - 16, "last-block merge");
    __shared__ __align__(16) uint8_t smem[ATT_SMEM];
    int &s_last = *(int *)(smem + ATT_SMEM - 16);  // past both merges' data (after the staging is done)

    const int split = blockIdx.x, kvh = blockIdx.y, tid = threadIdx.x;
    const int w = tid / 32, lane = tid % 32, grp = lane / LPR, j = lane % LPR, sub = w * NGW + grp;
    const int64_t row = (int64_t)n_head_kv * HD;
    int hl = 0;  // the head whose score this lane holds after att_reduce
    {
        int o = LPR / 2;
#pragma unroll
        for (int c = GP; c > 1; c >>= 1) {
            if (j & o) hl += c / 2;
            o >>= 1;
        }
    }

    const int L = __ldcg(d_pos) + 1;  // (see the top of the file)
    st_pdl_wait();  // q and this step's K/V row come from earlier work
    st_pdl_trigger();
    int chunk, n_act;
    att_chunk(L, n_split, MINC, chunk, n_act);
    if (split >= n_act) return;  // idle split (uniform per block)
    const int start = split * chunk, end = min(L, start + chunk);

    // Query slice of every head of the group, scaled (padded heads: 0).
    float qr[GP][VEC];
#pragma unroll
    for (int g = 0; g < GP; g++) {
        if (g < G) {
            const float4 *qp = (const float4 *)(q + ((int64_t)kvh * G + g) * HD + j * VEC);
#pragma unroll
            for (int v4 = 0; v4 < VEC / 4; v4++) {
                const float4 t = qp[v4];
                qr[g][4 * v4] = t.x * scale, qr[g][4 * v4 + 1] = t.y * scale;
                qr[g][4 * v4 + 2] = t.z * scale, qr[g][4 * v4 + 3] = t.w * scale;
            }
        } else {
#pragma unroll
            for (int d = 0; d < VEC; d++) qr[g][d] = 0.0f;
        }
    }
    float o[GP][VEC];
#pragma unroll
    for (int g = 0; g < GP; g++)
#pragma unroll
        for (int d = 0; d < VEC; d++) o[g][d] = 0.0f;
    float m = -INFINITY, l = 0.0f;  // running max and sum of the lane's head hl

    // Warp batches: block batch index b = w + ATT_NW * i covers positions start + b * BP .. + BP - 1; row r of the
    // batch for group grp is position start + b * BP + r * NGW + grp.
    const int n_bb = (end - start + BP - 1) / BP;
    const int nbw = w < n_bb ? (n_bb - w + ATT_NW - 1) / ATT_NW : 0;
    uint4 *stg = (uint4 *)smem;  // [ATT_ST][ATT_NB][2][ATT_NT]
    const KT *kb = kc + (int64_t)kvh * HD + j * VEC, *vb = vc + (int64_t)kvh * HD + j * VEC;
    auto issue = [&](int i) {
        if (i < nbw) {
            const int p0 = start + (w + ATT_NW * i) * BP + grp, s = i % ATT_ST;
#pragma unroll
            for (int r = 0; r < ATT_NB; r++) {
                const int p = min(p0 + r * NGW, end - 1);  // past the end: a valid row, masked below
                tc_cp16(&stg[((s * ATT_NB + r) * 2 + 0) * ATT_NT + tid], kb + (int64_t)p * row, 16);
                tc_cp16(&stg[((s * ATT_NB + r) * 2 + 1) * ATT_NT + tid], vb + (int64_t)p * row, 16);
            }
        }
        tc_cp_commit();  // an empty group past the end keeps the wait counts uniform
    };
#pragma unroll
    for (int i = 0; i < ATT_ST - 1; i++) issue(i);
    for (int i = 0; i < nbw; i++) {
        issue(i + ATT_ST - 1);
        tc_cp_wait<ATT_ST - 1>();  // batch i has landed
        const int s = i % ATT_ST, p0 = start + (w + ATT_NW * i) * BP + grp;
        float sc[ATT_NB];
#pragma unroll
        for (int r = 0; r < ATT_NB; r++) {
            float kf[VEC];
            att_cvt(stg[((s * ATT_NB + r) * 2 + 0) * ATT_NT + tid], kf, (const KT *)nullptr);
            float v[GP];
#pragma unroll
            for (int g = 0; g < GP; g++) {
                float a = 0.0f;
#pragma unroll
                for (int d = 0; d < VEC; d++) a += qr[g][d] * kf[d];
                v[g] = a;
            }
            const float x = att_reduce<GP, LPR>(v, j);
            sc[r] = p0 + r * NGW < end ? x : -INFINITY;
        }
        float mb = sc[0];
#pragma unroll
        for (int r = 1; r < ATT_NB; r++) mb = fmaxf(mb, sc[r]);
        const float mn = fmaxf(m, mb);
        const bool none = mn == -INFINITY;  // nothing valid yet (cannot happen for the first row of a batch)
        const float c = none ? 1.0f : __expf(m - mn);
        float e[ATT_NB], es = 0.0f;
#pragma unroll
        for (int r = 0; r < ATT_NB; r++) {
            e[r] = none ? 0.0f : __expf(sc[r] - mn);
            es += e[r];
        }
        l = l * c + es;
        m = mn;
#pragma unroll
        for (int g = 0; g < GP; g++) {
            const float cg = __shfl_sync(ST_WARP_MASK, c, g * HSTEP, LPR);
#pragma unroll
            for (int d = 0; d < VEC; d++) o[g][d] *= cg;
        }
#pragma unroll
        for (int r = 0; r < ATT_NB; r++) {
            float vf[VEC];
            att_cvt(stg[((s * ATT_NB + r) * 2 + 1) * ATT_NT + tid], vf, (const KT *)nullptr);
#pragma unroll
            for (int g = 0; g < GP; g++) {
                const float pg = __shfl_sync(ST_WARP_MASK, e[r], g * HSTEP, LPR);
#pragma unroll
                for (int d = 0; d < VEC; d++) o[g][d] += pg * vf[d];
            }
        }
    }
    tc_cp_wait<0>();
    __syncthreads();  // every warp is done with its staging: the merges reuse it

    // Block merge of the NSUB row-group partials.
    float *so = (float *)smem;                       // [NSUB][GP][HD]
    float *sm = so + NSUB * GP * HD, *sl = sm + NSUB * GP;  // [NSUB][GP]
#pragma unroll
    for (int g = 0; g < GP; g++)
#pragma unroll
        for (int v4 = 0; v4 < VEC / 4; v4++)
            *(float4 *)&so[(sub * GP + g) * HD + j * VEC + 4 * v4] =
                make_float4(o[g][4 * v4], o[g][4 * v4 + 1], o[g][4 * v4 + 2], o[g][4 * v4 + 3]);
    if (j % HSTEP == 0) sm[sub * GP + hl] = m, sl[sub * GP + hl] = l;
    __syncthreads();
    const int nh = G * HD;
    for (int idx = tid; idx < nh; idx += ATT_NT) {
        const int g = idx / HD, d = idx % HD;
        float M = -INFINITY;
#pragma unroll
        for (int t = 0; t < NSUB; t++) M = fmaxf(M, sm[t * GP + g]);
        float acc = 0.0f, ls = 0.0f;
#pragma unroll
        for (int t = 0; t < NSUB; t++) {
            const float mt = sm[t * GP + g];
            const float wt = mt == -INFINITY ? 0.0f : __expf(mt - M);
            acc += wt * so[(t * GP + g) * HD + d];
            ls += wt * sl[t * GP + g];
        }
        const int64_t k = ((int64_t)kvh * G + g) * n_split + split;
        ws_o[k * HD + d] = acc;
        if (d == 0) ws_ml[2 * k] = M, ws_ml[2 * k + 1] = ls;
    }

    // The last block of this KV head merges the splits.
    if (!st_block_arrive_last(&counters[kvh], n_act, s_last)) return;
    float *sw = (float *)smem;             // [GP][ATT_MAX_SPLIT] split weights (w_s / sum)
    float *sout = sw + GP * ATT_MAX_SPLIT;  // [G][HD] the final outputs, for the quantization
    for (int g = w; g < G; g += ATT_NW) {
        const float *ml = ws_ml + 2 * ((int64_t)kvh * G + g) * n_split;
        float M = -INFINITY;
        for (int s = lane; s < n_act; s += 32) M = fmaxf(M, __ldcg(ml + 2 * s));
        M = g32_max(M);
        float ls = 0.0f;
        for (int s = lane; s < n_act; s += 32) {
            const float ms = __ldcg(ml + 2 * s), wt = ms == -INFINITY ? 0.0f : __expf(ms - M);
            sw[g * ATT_MAX_SPLIT + s] = wt;
            ls += wt * __ldcg(ml + 2 * s + 1);
        }
        ls = g32_sum_f(ls);
        __syncwarp();
        const float inv = 1.0f / ls;
        for (int s = lane; s < n_act; s += 32) sw[g * ATT_MAX_SPLIT + s] *= inv;
    }
    __syncthreads();
    for (int idx = tid; idx < nh / 4; idx += ATT_NT) {
        const int g = idx / (HD / 4), d4 = idx % (HD / 4);
        const float4 *src = (const float4 *)(ws_o + ((int64_t)kvh * G + g) * n_split * HD) + d4;
        const float *wg = sw + g * ATT_MAX_SPLIT;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 4
        for (int s = 0; s < n_act; s++) {
            const float4 t = __ldcg(src + (int64_t)s * (HD / 4));
            const float ws = wg[s];
            acc.x += ws * t.x, acc.y += ws * t.y, acc.z += ws * t.z, acc.w += ws * t.w;
        }
        *(float4 *)(out + ((int64_t)kvh * G + g) * HD + 4 * d4) = acc;
        *(float4 *)&sout[g * HD + 4 * d4] = acc;
    }
    if (!outq) return;  // uniform
    __syncthreads();
    const int nb = G * HD * n_head_kv / 32;
    block_quant<false>(fmt, sout, outq, nb, kvh * (G * HD / 32), G * HD / 32);
}

// ---- round 3: tensor-core decode attention (f16 caches) ------------------------------------------------------
//
// Why: with 8 query heads per KV head the SIMT kernel above does 16 FMAs per cached f16 (8 heads x (K and V)),
// 134 M FMAs at depth 16K for 33.5 MB, issued by only 8 warps per SM (register-bound): it ran at ~1 TB/s, limited
// by FMA issue and its serial latency, not by HBM. Here both products run on mma.sync m16n8k16 (f16 in, f32
// accumulate) and the FP32 pipe only does the softmax.
//
// Layout per warp and tile of 16 positions p0 .. p0 + 15 (lane = 4 g + t):
//   S = Q . K^T: A = Q (rows g < 8: the f16 "hi" part of head g's query, rows g + 8: the "lo" residual
//   f16(q - hi), so hi + lo carries ~22 bits and the padding half of the m16 tile costs nothing; the scale goes
//   on the f32 scores), B = K^T of n-tile j (positions p0 + 8 j + n, n = the lane group g that loaded the row).
//   The head-dim order of the k
//   steps is a permutation (a dot product's terms may be taken in any order if Q and K use the same one): lane t
//   holds the row's 16-byte pieces at halves 32 u + 8 t (u < HD / 32), word i of piece u being k-step
//   (4 u + i) / 2, so every K load is a plain 16-byte copy and a warp load instruction covers whole sectors.
//   Lane (g, t) then holds s[head g][positions p0 + 8 j + 2 t + e] as c[e] (hi) + c[2 + e] (lo).
//   O += P . V: A = P (x 2^10, exact; rows g: f16 hi of the probabilities, rows g + 8: lo residual; k 2t.. =
//   n-tile 0, k 2t+8.. = n-tile 1: exactly the lane's own S values), B = V with k = positions p0 + {2t, 2t+1,
//   8+2t, 9+2t} (the rows lane (g, t) loads) and n = head dim 64 c + 8 g + i for dim tile 8 c + i, assembled from
//   the 16-byte pieces by byte permutes. The output C of dim tile 8 c + i holds head g's dims 64 c + 16 t + i (+ 8) as hi + lo.
// A warp reads 8 KiB per tile (16 K rows and 16 V rows of 256 bytes at head_dim 128), staged by cp.async into
// per-thread shared-memory slots (no barrier in the loop), ATC_ST tiles deep. The scaling, masking, online
// softmax (__expf, f32) and the two-level merge are as in the SIMT kernel; numerics differ from it only by the
// summation order and the ~2^-22 relative rounding of the hi/lo splits.
//
// Merge: blocks write (max, sum, unnormalised output) per head and split; when a KV head has more than ATC_SG
// active splits, the last block of each group of ATC_SG splits merges its group into a level-1 partial first, so
// no single block reads more than max(ATC_SG, n_split / ATC_SG) partials (at depth 16K with 33 splits: 8 + 5 x 4
// KiB instead of 33 x 4 KiB from L2 through one SM).
// Warps per block: the kernel's NW template parameter, ATC_NW or (st_cuda_attn_dec_ex's wide) ATC_NW_WIDE. With 4 at
// depth 16K each warp walks ~8 tiles in sequence, one warp per scheduler, whose per-tile chains (ldmatrix, MMA,
// softmax shuffles) nothing hides; 8 halve the walk and the splits' partials: tg128 @ d16384 412.0 vs 395.8 tok/s,
// but 534.9 vs 543.3 at depth 0 (H200, 2026-12-04e; the engine takes 8 from 2048 positions on, engine/gpu.c).
#define ATC_NW 4
#ifndef ATC_NW_WIDE
#define ATC_NW_WIDE 8  // (-D for an A/B build; 6 warps with -DATC_ST=4 lost, tg128 @ d16384 -5.1%, 2026-12-05)
#endif
#define ATC_TP 16                         // positions per warp tile
#ifndef ATC_ST
#define ATC_ST 3                          // staging depth (tiles; -D for an A/B build)
#endif
// Blocks per SM the launch bounds ask for and the split count targets (st_cuda_attn_dec_splits). At depth 16K
// Nsight Compute (2026-11-30j) shows the kernel latency bound: 2 blocks of 4 warps per SM (registers and the
// 3-stage staging allow no more), 12.8 cycles per issued instruction, DRAM at 25%; yet 3 blocks of a 2-stage
// staging (297.1 vs 309.7 tok/s at tg64 @ d16384), 1 block (281.6) or 3 requested (281.0) all lost. With the TMA
// staging and the one-pass merge (2026-12-01j) 1 block per SM (33 splits per KV head at 4 KV heads) won: isolated
// depth 4096 9.70 vs 12.25 us, 16384 17.26 vs 17.45; tg128 @ d16384 365.81 vs 362.56 tok/s. -D for A/B.
#ifndef ATC_BLOCKS_PER_SM
#define ATC_BLOCKS_PER_SM 1
#endif
// ATC_L2_PREFETCH: the L2 prefetch of the block's K/V rows before the dependency wait, 1 (default) only when the
// context takes one split per KV head, 2 always, 0 never. At depth 16K the prefetches (one per 128-byte line, all
// blocks at once) flooded the memory system ahead of the blocks' own copies: tg64 @ d16384 319.5 vs 311.2 tok/s
// without them (bench/ab.sh, 2026-11-30j); at short depth they are few and the A/B was even (470.1 vs 472.0).
#ifndef ATC_L2_PREFETCH
#define ATC_L2_PREFETCH 1
#endif
// ATC_BULK (sm_90; the cp.async path elsewhere): a block with at least ATC_BULK_MIN_TILES tiles stages its K/V by
// bulk copies instead of cp.async: each warp's tile arrives by 32 bulk copies (one 2 x HD-byte row per lane, TMA's
// 1-D form) completing on an mbarrier per stage, into row-major staging whose row strides (2 HD + 64 bytes for K,
// 2 HD + 16 for V) keep the fragment loads free of bank conflicts, instead of 16 cp.async of 16 bytes per thread
// into per-thread slots. At depth 16K Nsight's stall sampling put 29% of the kernel's stalls on issuing the first
// tiles' cp.async (MIO and LSU queue throttles, 2026-11-30j); bulk staging for every block measured tg64 @ d16384
// 332.1 vs 316.4 tok/s but tg128 466.5 vs 474.5 (2026-12-01, bench/ab.sh): the SASS issues the 32 copies as a loop
// over the lanes (UBLKCP takes uniform registers, ~8 instructions per copy), which a block of few tiles pays on its
// critical path. 0: never, 1: blocks of >= ATC_BULK_MIN_TILES tiles (default), 2: every block.
#ifndef ATC_BULK
#define ATC_BULK 1
#endif
#ifndef ATC_BULK_MIN_TILES
#define ATC_BULK_MIN_TILES 16  // 4 tiles per warp
#endif
// ATC_TMA (sm_90; default 2, 0 for the bulk-copy path): every block stages its K/V tiles by 2-D TMA tensor copies
// (one per 16 rows x 64 halves box: 4 per warp tile at head_dim 128, issued by one lane, against 32 one-row bulk
// copies that the SASS issues as a ~256-instruction loop over the lanes), into 128-byte-swizzled boxes read by
// ldmatrix (K) and ldmatrix.trans (V: no byte permutes), with the head dims in their natural order. The maps
// (cuTensorMapEncodeTiled through the driver entry point, no libcuda link) are kernel parameters, encoded at every
// launch (a graph keeps the captured ones). Rows past the context inside the box are stale or never written: V's are
// zeroed in shared memory before use (K's scores are masked). 2: also the first tiles before the PDL wait, where all
// their rows are below the step's own K/V row (written by finished work). H200 (2026-12-01j, bench/ab.sh): tg128 @
// d16384 344.49 (bulk) / 348.67 (1) / 357.13 (2) tok/s, d32768 299.39 / 311.69 (2), tg128 501.21 / 504.94 (2);
// predicted +12-20% at 16K: the copies' issue was not what bound it (the merge levels are, below). Refuted: a lazy
// rescale of the output (only where some head's max moved: 344.19), 3 blocks per SM with 2 stages (337.19); every
// stage's tile issued before the wait, not ATC_ST - 1 (-DATC_EARLY=3, 2026-12-05: tg128 @ d16384 419.12 vs 422.02;
// with PDL_EARLY, H100 2026-12-05e: 396.3 vs 403.2; docs/experiments/2026-12-05-atc-early.patch).
#ifndef ATC_TMA
#define ATC_TMA 2
#endif
#define ATC_TMA_ON (ATC_TMA && ST_TC_BULK)  // (device code: the TMA path is compiled for this target)
struct alignas(64) atc_tmap {  // a CUtensorMap's 128 opaque bytes (filled on the host)
    unsigned long long w[16];
};
#define ATC_TMA_BOX_H 64                          // TMA box width in halves: 128 bytes, the 128-byte swizzle's span
#define ATC_TMA_BOX (ATC_TP * 2 * ATC_TMA_BOX_H)  // bytes per box (16 rows)
#define ATC_TMA_WSB(hd) (2 * ((hd) / ATC_TMA_BOX_H) * ATC_TMA_BOX)  // TMA staging: K then V boxes per warp and stage
#define ATC_KSTR(hd) (2 * (hd) + 64)  // bulk staging: bytes per K row
#define ATC_VSTR(hd) (2 * (hd) + 16)  // bulk staging: bytes per V row
#define ATC_WSB(hd) (16 * ATC_KSTR(hd) + 16 * ATC_VSTR(hd))  // bulk staging: bytes per warp and stage
#ifndef ATC_SG
#define ATC_SG 8                          // splits per level-1 merge group (-D for an A/B build)
#endif
#define ATC_NG (ATT_MAX_SPLIT / ATC_SG)   // level-1 groups per KV head at most
// Partials per batch of loads in flight in atc_merge (-D for an A/B build). At 16K the 33 splits merge in two levels
// (8, then 5 partials). One level of 3 batches (-DATC_SG=64 -DATC_MERGE_BATCH=16, one arrival less; predicted -0.5..1
// us per layer) measured slower (2026-12-02): the kernel alone at 16384 20.0 vs 17.0 us, tg128 @ d16384 350.2 vs 369.6.
#ifndef ATC_MERGE_BATCH
#define ATC_MERGE_BATCH 8
#endif
// The cross-block merge (bench_gpu_decode on the H200, 2026-12-01j, ATC_TMA 2, grid 66): depth 1 (one split, no
// merge) 4.3 us, depth 256 (5 splits, one level) 9.2 us, 1024 (17 splits, two levels) 11.1, 4096 12.8, 16384 17.9;
// from 4096 to 16384 the 25 MB more cost 5.1 us (4.9 TB/s): the data streams at the roofline, and the merge levels'
// synchronisation chains are most of the rest. Hence the arrivals as one acquire-release atomic of thread 0 after
// the barrier, without a fence in every thread (st_block_arrive_last<true>: depth 256 9.20 -> 8.96 us, 16384 17.90
// -> 17.26; tg128 @ d16384 358.05 -> 362.34 tok/s), and atc_merge in one pass (every thread reads its partials'
// maxima, sums and outputs together and merges them online: one L2 round trip instead of two and no barrier
// between; 256: 7.12 us, 1024: 11.07 -> 9.29, 16384: 17.39; tg128 @ d16384 363.32). Refuted: clusters of 8 splits
// merging through distributed shared memory (isolated 256: 6.17 us, 16384: 16.83, but tg128 @ d16384 355.93 and
// tg128 497.27 vs 505.59 in the engine: cluster scheduling beside the PDL overlap; patch
// docs/experiments/2026-12-01j-attn-cluster-merge.patch).
#define ATC_PS 1024.0f                    // P scale before the f16 split (a power of two: exact)

// Rope mode of the tensor-core kernel (st_cuda_attn_dec_ex's rope; k NULL: off): the kernel applies the step's
// QK-norm + RoPE itself, st_cuda_qk_norm_rope_kv's arithmetic: each warp to its query fragments in registers (a
// head's dims lie in the 4 lanes of its quad, and a RoPE pair in one lane), and the warp whose tile holds the step's
// position to this KV head's K row, which it stores with the V row into the caches and patches into its staged
// tile. So every tile can be staged before the dependency wait, and the separate launch's kernel boundary and L2
// round trips go (tg128 +2.1%, tg128 @ d16384 +3.5%, bench/results/2026-12-04e-h200.md).
struct atc_rope {
    const float *k, *v;            // [n_head_kv][HD] the step's K and V (the Q/K/V outputs; q is not rotated)
    const float *q_norm, *k_norm;  // [HD] QK-norm gains, or NULL
    const float *cs;               // [n_ctx][HD / 2] (cos, sin) of each RoPE pair (st_cuda_qk_norm_rope_kv's table)
    float eps;
    int neox;                      // pairs (i, i + HD / 2), else (2 i, 2 i + 1); n_rot == HD
};

// The tensor-core kernel's split of L positions: one split per KV head up to single_max positions (a short context:
// the cross-block merge's workspace round trip, fence and counter cost more than the split saves), else att_chunk.
template <int NW>
__device__ __forceinline__ void atc_chunk(int L, int n_split, int single_max, int &chunk, int &n_act) {
    constexpr int MINC = NW * ATC_TP;  // positions per block step (the minimum chunk)
    if (L <= single_max) {
        chunk = (L + MINC - 1) / MINC * MINC;
        n_act = 1;
    } else {
        att_chunk(L, n_split, MINC, chunk, n_act);
    }
}

template <int NW> static size_t atc_smem_bytes(int hd) {  // the larger of the two stagings where both may run
    const size_t cp = (size_t)ATC_ST * (hd / 8) * (NW * 32) * 16, bulk = (size_t)ATC_ST * NW * ATC_WSB(hd);
    if (ATC_TMA) return (size_t)ATC_ST * NW * ATC_TMA_WSB(hd) + 1024;  // (+ the 1024-byte alignment)
    return ATC_BULK && bulk > cp ? bulk : cp;
}

__device__ __forceinline__ uint32_t atc_h2(__half2 h) { return *(const uint32_t *)&h; }
__device__ __forceinline__ uint32_t atc_w(const uint4 &u, int i) {
    return i == 0 ? u.x : i == 1 ? u.y : i == 2 ? u.z : u.w;
}

// One partial (max mi, sum li, unnormalised output v) into a running (M, L, acc), online; a max of -inf (no
// positions) weighs 0.
__device__ __forceinline__ void atc_merge_step(float &M, float &L, float4 &acc, float mi, float li, const float4 &v) {
    const float mn = fmaxf(M, mi);
    const float a = M == -INFINITY ? 0.0f : __expf(M - mn), b = mi == -INFINITY ? 0.0f : __expf(mi - mn);
    acc.x = acc.x * a + b * v.x, acc.y = acc.y * a + b * v.y;
    acc.z = acc.z * a + b * v.z, acc.w = acc.w * a + b * v.w;
    L = L * a + b * li;
    M = mn;
}

// Merges n partials s0 .. s0 + n - 1 of the G heads of KV head kvh (partial s of head h at o[(h * stride + s) *
// HD ..], ml[2 (h * stride + s)]): into one unnormalised partial at index di of dst_o/dst_ml (stride dst_stride),
// or, when out != NULL, normalised into out (and sout [G][HD] in shared memory). One pass: each thread merges its
// float4 of every partial online (atc_merge_step). All threads of the block call it; it ends with a barrier.
template <int HD>
__device__ void atc_merge(const float *o, const float *ml, int stride, int s0, int n, int G, int kvh, float *dst_o,
                          float *dst_ml, int dst_stride, int di, float *out, float *sout) {
    const int tid = threadIdx.x;
    for (int idx = tid; idx < G * HD / 4; idx += (int)blockDim.x) {
        const int g = idx / (HD / 4), d4 = idx % (HD / 4);
        const int64_t h = (int64_t)kvh * G + g;
        const float4 *src = (const float4 *)(o + (h * stride + s0) * HD) + d4;
        const float2 *mls = (const float2 *)(ml + 2 * (h * stride + s0));
        float M = -INFINITY, L = 0.0f;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int s1 = 0; s1 < n; s1 += ATC_MERGE_BATCH) {  // a batch of partials' loads in flight, then their merge
            float4 v[ATC_MERGE_BATCH];
            float2 q[ATC_MERGE_BATCH];
#pragma unroll
            for (int j = 0; j < ATC_MERGE_BATCH; j++)
                if (s1 + j < n) v[j] = __ldcg(src + (int64_t)(s1 + j) * (HD / 4)), q[j] = __ldcg(mls + s1 + j);
#pragma unroll
            for (int j = 0; j < ATC_MERGE_BATCH; j++)
                if (s1 + j < n) atc_merge_step(M, L, acc, q[j].x, q[j].y, v[j]);
        }
        if (out) {
            const float r = 1.0f / L;
            acc.x *= r, acc.y *= r, acc.z *= r, acc.w *= r;
            *(float4 *)(out + h * HD + 4 * d4) = acc;
            *(float4 *)&sout[g * HD + 4 * d4] = acc;
        } else {
            *(float4 *)(dst_o + (h * dst_stride + di) * HD + 4 * d4) = acc;
            if (d4 == 0) dst_ml[2 * (h * dst_stride + di)] = M, dst_ml[2 * (h * dst_stride + di) + 1] = L;
        }
    }
    __syncthreads();
}

// One tile's online softmax (atc_tiles, atc_tiles_tma): lane (g, t)'s scores sc[j] (hi rows + lo rows) of
// positions p0 + 8 j + 2 t + e, masked from end on; updates head g's running max m and this lane's sum lsum,
// rescales o, and returns P x 2^10 (exact; undone in the block merge) as the A fragment of P . V: hi halves in
// pa[0], pa[2], the lo residuals p - hi in pa[1], pa[3] (down to ~1e-5 a normal half).
template <int DT>
__device__ __forceinline__ void atc_softmax(const float (&sc)[2][4], int p0, int end, int t, float scale, float &m,
                                            float &lsum, float (&o)[DT][4], uint32_t (&pa)[4]) {
    float x[4], mx = -INFINITY;  // positions p0 + 8 j + 2 t + e as x[2 j + e]
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const float v = (sc[j][e] + sc[j][2 + e]) * scale;
            x[2 * j + e] = p0 + 8 * j + 2 * t + e < end ? v : -INFINITY;
            mx = fmaxf(mx, x[2 * j + e]);
        }
    mx = fmaxf(mx, __shfl_xor_sync(ST_WARP_FULL_MASK, mx, 1, 32));
    mx = fmaxf(mx, __shfl_xor_sync(ST_WARP_FULL_MASK, mx, 2, 32));
    const float mn = fmaxf(m, mx);
    const bool none = mn == -INFINITY;  // cannot happen (a tile's first position is valid); kept for safety
    const float cr = none ? 1.0f : __expf(m - mn);
    float p[4], ps = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; e++) {
        p[e] = none ? 0.0f : __expf(x[e] - mn);
        ps += p[e];
    }
    lsum = lsum * cr + ps;
    m = mn;
#pragma unroll
    for (int d = 0; d < DT; d++) o[d][0] *= cr, o[d][1] *= cr, o[d][2] *= cr, o[d][3] *= cr;
    const float a0 = p[0] * ATC_PS, a1 = p[1] * ATC_PS, a2 = p[2] * ATC_PS, a3 = p[3] * ATC_PS;
    const __half2 h0 = __floats2half2_rn(a0, a1), h1 = __floats2half2_rn(a2, a3);
    const float2 f0 = __half22float2(h0), f1 = __half22float2(h1);
    pa[0] = atc_h2(h0);
    pa[1] = atc_h2(__floats2half2_rn(a0 - f0.x, a1 - f0.y));
    pa[2] = atc_h2(h1);
    pa[3] = atc_h2(__floats2half2_rn(a2 - f1.x, a3 - f1.y));
}

// The block's tiles [start, end) into the warp's running (m, lsum, o): Q . K^T, online softmax, P . V, each warp on
// tiles w, w + NW, ... ; staging by cp.async (BULK false) or bulk copies (BULK true, sm_90; see ATC_BULK).
template <int HD, bool BULK, int NW>
__device__ __forceinline__ void atc_tiles(uint8_t *smem, const uint32_t (&qa)[HD / 16][4], float (&o)[HD / 8][4],
                                          float &m, float &lsum, int start, int end, int n_tiles,
                                          const __half *kb, const __half *vb, int64_t row, float scale) {
    constexpr int NK = HD / 32, NV = HD / 64, NU = 2 * NK + 4 * NV, KS = HD / 16, NT = NW * 32;
    const int tid = threadIdx.x, w = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int nbw = w < n_tiles ? (n_tiles - w + NW - 1) / NW : 0;
    // Bulk: [ATC_ST][NW][16 K rows at KSTR bytes | 16 V rows at VSTR bytes], one mbarrier per warp and stage.
    // Otherwise: [ATC_ST][NU][NT] uint4, thread tid's slots at stride NT.
    constexpr int KSTR = ATC_KSTR(HD), VSTR = ATC_VSTR(HD), WSB = ATC_WSB(HD);
#if ST_TC_BULK
    __shared__ __align__(8) uint64_t s_bar[NW][ATC_ST];
#endif
    uint4 *stg = (uint4 *)smem;
    auto stage = [&](int i) { return smem + ((size_t)(i % ATC_ST) * NW + w) * WSB; };
#if ST_TC_BULK
    if constexpr (BULK) {
        if (lane == 0) {
#pragma unroll
            for (int s = 0; s < ATC_ST; s++) tc_mbar_init(&s_bar[w][s], 1);
            tc_mbar_fence_init();
        }
        __syncwarp();
    }
#endif
    auto issue = [&](int i) {
        if constexpr (BULK) {
#if ST_TC_BULK
            if (i >= nbw) return;  // warp-uniform
            uint8_t *base = stage(i);
            __syncwarp();  // every lane is done reading this stage's previous tile
            if (lane == 0) tc_mbar_expect_tx(&s_bar[w][i % ATC_ST], 32 * HD * 2);
            const int rr = lane % 16, p = min(start + (w + NW * i) * ATC_TP + rr, end - 1);  // past the end: masked
            if (lane < 16) tc_bulk_g2s(base + rr * KSTR, kb + p * row, HD * 2, &s_bar[w][i % ATC_ST]);
            else tc_bulk_g2s(base + 16 * KSTR + rr * VSTR, vb + p * row, HD * 2, &s_bar[w][i % ATC_ST]);
#endif
        } else {
            if (i < nbw) {
                const int p0 = start + (w + NW * i) * ATC_TP;
                uint4 *dst = stg + (size_t)(i % ATC_ST) * NU * NT + tid;
#pragma unroll
                for (int j = 0; j < 2; j++) {
                    const int p = min(p0 + 8 * j + g, end - 1);  // past the end: a valid row, masked below
#pragma unroll
                    for (int u = 0; u < NK; u++)
                        tc_cp16(dst + (j * NK + u) * NT, kb + p * row + 32 * u + 8 * t, 16);
                }
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int p = min(p0 + (r >> 1) * 8 + 2 * t + (r & 1), end - 1);
#pragma unroll
                    for (int c = 0; c < NV; c++)
                        tc_cp16(dst + (2 * NK + r * NV + c) * NT, vb + p * row + 64 * c + 8 * g, 16);
                }
            }
            tc_cp_commit();  // an empty group past the end keeps the wait counts uniform
        }
    };
#pragma unroll
    for (int i = 0; i < ATC_ST - 1; i++) issue(i);
    for (int i = 0; i < nbw; i++) {
        issue(i + ATC_ST - 1);
        const uint8_t *kst = stage(i), *vst = kst + 16 * KSTR;
        const uint4 *src = stg + (size_t)(i % ATC_ST) * NU * NT + tid;
        if constexpr (BULK) {
#if ST_TC_BULK
            tc_mbar_wait(&s_bar[w][i % ATC_ST], (unsigned)(i / ATC_ST) & 1u);  // tile i has landed
#endif
        } else {
            tc_cp_wait<ATC_ST - 1>();  // tile i has landed (this thread's own copies)
        }
        // Bulk: K row 8 j + g, bytes 64 u + 16 t (halves 32 u + 8 t, as the slots hold); V row (r >> 1) 8 + 2 t +
        // (r & 1), bytes 128 c + 16 g.
#define ATC_KW(j, u) \
    (BULK ? *(const uint4 *)(kst + (8 * (j) + g) * KSTR + 64 * (u) + 16 * t) : src[((j) * NK + (u)) * NT])
#define ATC_VW(r, c)                                                                                      \
    (BULK ? *(const uint4 *)(vst + (((r) >> 1) * 8 + 2 * t + ((r) & 1)) * VSTR + 128 * (c) + 16 * g) \
          : src[(2 * NK + (r) * NV + (c)) * NT])
        const int p0 = start + (w + NW * i) * ATC_TP;
        float sc[2][4];
#pragma unroll
        for (int j = 0; j < 2; j++) {
            sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
            uint4 kw[NK];
#pragma unroll
            for (int u = 0; u < NK; u++) kw[u] = ATC_KW(j, u);
#pragma unroll
            for (int kk = 0; kk < KS; kk++)
                tc_mma(sc[j], qa[kk], atc_w(kw[kk / 2], 2 * (kk % 2)), atc_w(kw[kk / 2], 2 * (kk % 2) + 1));
        }
        uint32_t pa[4];
        atc_softmax(sc, p0, end, t, scale, m, lsum, o, pa);
#pragma unroll
        for (int c = 0; c < NV; c++) {
            const uint4 v0 = ATC_VW(0, c), v1 = ATC_VW(1, c), v2 = ATC_VW(2, c), v3 = ATC_VW(3, c);
#pragma unroll
            for (int i2 = 0; i2 < 8; i2++) {
                const unsigned sel = i2 % 2 ? 0x7632u : 0x5410u;  // high halves / low halves of the two words
                const uint32_t b0 = __byte_perm(atc_w(v0, i2 / 2), atc_w(v1, i2 / 2), sel);
                const uint32_t b1 = __byte_perm(atc_w(v2, i2 / 2), atc_w(v3, i2 / 2), sel);
                tc_mma(o[8 * c + i2], pa, b0, b1);
            }
        }
    }
#undef ATC_KW
#undef ATC_VW
    if constexpr (!BULK) tc_cp_wait<0>();
}

#if ATC_TMA && ST_TC_BULK
// atc_tiles with TMA staging (ATC_TMA): per warp and stage, K then V as HD / 64 boxes of 16 rows x 128 bytes each,
// 128-byte swizzled (16-byte chunk c of box row r at chunk c ^ (r % 8)), so each ldmatrix's 8 rows hit 8 different
// bank groups. Q . K^T: ldmatrix.x4 of rows 8 j + (lane % 8), dim chunks 2 kk + lane / 8 gives the B fragments of
// k steps kk and kk + 1 for n tile j (qa in the natural dim order); P . V: ldmatrix.x4.trans of rows
// 8 (m & 1) + (lane % 8), dim chunk c + (m >> 1) (m = lane / 8) gives those of dim tiles c and c + 1, whose outputs
// hold dims 8 d + 2 t (+1). ATC_TMA 2: the first tiles are issued before the kernel's dependency wait where all
// their rows were written by finished work (below the step's own row L - 1).
struct atc_tma_warp {
    uint8_t *base;       // the block's staging, 1024-byte aligned: [ATC_ST][NW][K boxes | V boxes]
    uint64_t *bar;       // [ATC_ST] this warp's mbarriers (shared memory)
    int nbw, start, x0;  // the warp's tile count, the block's first position, the KV head's first element of a row
    unsigned early;      // bit i: tile i is issued (atc_tma_begin)
};

// The warp's stage of its tile i: K's boxes, then V's.
template <int HD, int NW> __device__ __forceinline__ uint8_t *atc_tma_stage(const atc_tma_warp &s, int i) {
    return s.base + ((size_t)(i % ATC_ST) * NW + threadIdx.x / 32) * ATC_TMA_WSB(HD);
}

// Tile i of the warp into its stage (one lane issues; no-op past the warp's tiles).
template <int HD, int NW>
__device__ __forceinline__ void atc_tma_issue(const atc_tma_warp &s, int i, const atc_tmap *tk, const atc_tmap *tv) {
    constexpr int NB = HD / ATC_TMA_BOX_H;
    if (i >= s.nbw) return;  // warp-uniform
    uint8_t *dst = atc_tma_stage<HD, NW>(s, i);
    __syncwarp();  // every lane is done reading this stage's previous tile
    if (threadIdx.x % 32 == 0) {
        const int p0 = s.start + (threadIdx.x / 32 + NW * i) * ATC_TP;
        tc_mbar_expect_tx(&s.bar[i % ATC_ST], ATC_TMA_WSB(HD));
#pragma unroll
        for (int b = 0; b < NB; b++) {
            const int x = s.x0 + ATC_TMA_BOX_H * b;
            tc_tma_2d_g2s(dst + b * ATC_TMA_BOX, tk, x, p0, &s.bar[i % ATC_ST]);
            tc_tma_2d_g2s(dst + (NB + b) * ATC_TMA_BOX, tv, x, p0, &s.bar[i % ATC_ST]);
        }
    }
}

// The warp's staging for positions [start, end) (none where end <= start), its mbarriers set up, and its first
// ATC_ST - 1 tiles issued where every row lies below `complete` (rows written by finished work).
template <int HD, int NW>
__device__ __forceinline__ atc_tma_warp atc_tma_begin(uint8_t *smem, uint64_t (*bars)[ATC_ST], const atc_tmap *tk,
                                                      const atc_tmap *tv, int x0, int start, int end, int complete) {
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int n_tiles = end > start ? (end - start + ATC_TP - 1) / ATC_TP : 0;
    atc_tma_warp s;
    s.base = (uint8_t *)(((uintptr_t)smem + 1023) & ~(uintptr_t)1023);
    s.bar = bars[w];
    s.nbw = w < n_tiles ? (n_tiles - w + NW - 1) / NW : 0;
    s.start = start;
    s.x0 = x0;
    s.early = 0;
    if (lane == 0) {
#pragma unroll
        for (int st = 0; st < ATC_ST; st++) tc_mbar_init(&s.bar[st], 1);
        tc_mbar_fence_init();
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < ATC_ST - 1; i++)
        if (i < s.nbw && start + (w + NW * i + 1) * ATC_TP <= complete) {
            atc_tma_issue<HD, NW>(s, i, tk, tv);
            s.early |= 1u << i;
        }
    return s;
}

template <int HD, int NW>
__device__ __forceinline__ void atc_tiles_tma(const atc_tma_warp &s, const atc_tmap *tk, const atc_tmap *tv,
                                              const uint32_t (&qa)[HD / 16][4], float (&o)[HD / 8][4], float &m,
                                              float &lsum, int end, float scale, int patch,
                                              const uint32_t (&pkv)[4]) {
    constexpr int NB = HD / ATC_TMA_BOX_H, KS = HD / 16, DT = HD / 8;
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
#pragma unroll
    for (int i = 0; i < ATC_ST - 1; i++)
        if (!((s.early >> i) & 1u)) atc_tma_issue<HD, NW>(s, i, tk, tv);
    // the byte offset of 16-byte chunk c (of the row's HD / 8) in row r of a K or V stage
    auto at = [](int r, int c) { return (c / 8) * ATC_TMA_BOX + r * 128 + (((c % 8) ^ (r % 8)) << 4); };
    for (int i = 0; i < s.nbw; i++) {
        atc_tma_issue<HD, NW>(s, i + ATC_ST - 1, tk, tv);
        uint8_t *kst = atc_tma_stage<HD, NW>(s, i), *vst = kst + NB * ATC_TMA_BOX;
        tc_mbar_wait(&s.bar[i % ATC_ST], (unsigned)(i / ATC_ST) & 1u);  // tile i has landed
        const int p0 = s.start + (w + NW * i) * ATC_TP;
        if (patch >= p0 && patch < p0 + ATC_TP) {  // (warp-uniform; rope mode) the step's own K/V row, staged stale
            const int r = patch - p0, c = lane >> 2, b = (lane & 3) * 4;
            *(uint32_t *)(kst + at(r, c) + b) = pkv[0], *(uint32_t *)(kst + at(r, HD / 16 + c) + b) = pkv[1];
            *(uint32_t *)(vst + at(r, c) + b) = pkv[2], *(uint32_t *)(vst + at(r, HD / 16 + c) + b) = pkv[3];
            __syncwarp();
        }
        if (p0 + ATC_TP > end) {  // (warp-uniform; the block's last tile) V rows past the end: no 0 * NaN into O
            const int r0 = end - p0;
            for (int idx = lane; idx < (ATC_TP - r0) * NB * 8; idx += 32)
                *(uint4 *)(vst + at(r0 + idx / (NB * 8), idx % (NB * 8))) = make_uint4(0u, 0u, 0u, 0u);
            __syncwarp();
        }
        float sc[2][4];
#pragma unroll
        for (int j = 0; j < 2; j++) {
            sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
            for (int kk = 0; kk < KS; kk += 2) {
                uint32_t kf[4];
                tc_ldsm_x4(kf, kst + at(8 * j + (lane & 7), 2 * kk + (lane >> 3)));
                tc_mma(sc[j], qa[kk], kf[0], kf[1]);
                tc_mma(sc[j], qa[kk + 1], kf[2], kf[3]);
            }
        }
        uint32_t pa[4];
        atc_softmax(sc, p0, end, t, scale, m, lsum, o, pa);
#pragma unroll
        for (int c = 0; c < DT; c += 2) {
            uint32_t vf[4];
            tc_ldsm_x4_t(vf, vst + at(8 * ((lane >> 3) & 1) + (lane & 7), c + (lane >> 4)));
            tc_mma(o[c], pa, vf[0], vf[1]);
            tc_mma(o[c + 1], pa, vf[2], vf[3]);
        }
    }
}
#endif

template <int HD, int NW>
__global__ void __launch_bounds__(NW * 32, ATC_BLOCKS_PER_SM)
    k_attn_dec_tc(float *__restrict__ out, uint8_t *__restrict__ outq, int fmt, const float *__restrict__ q,
                  const __half *kc, const __half *vc, const int32_t *d_pos, int G, int n_head_kv, float scale,
                  int n_split, int single_max, float *__restrict__ ws_o, float *__restrict__ ws_ml,
                  float *__restrict__ ws_o1, float *__restrict__ ws_ml1, int32_t *__restrict__ counters,
                  const atc_rope rp
#if ATC_TMA
                  , const __grid_constant__ atc_tmap tmk, const __grid_constant__ atc_tmap tmv
#endif
    ) {
    constexpr int NK = HD / 32;          // 16-byte pieces of a K row per lane (the lane's quarter)
    constexpr int NV = HD / 64;          // 16-byte pieces of a V row per lane (an eighth, of 4 rows)
    constexpr int NU = 2 * NK + 4 * NV;  // staging slots per lane and tile
    constexpr int KS = HD / 16;          // k steps of Q . K^T
    constexpr int DT = HD / 8;           // dim tiles of P . V
    constexpr int NT = NW * 32;          // threads per block
    static_assert(HD == 64 || HD == 128, "head_dim");
    PH_MARK(0);
    constexpr int SOS = HD + 1;          // row stride of the block-merge buffer (HD: 16-way bank conflicts)
    static_assert(sizeof(float) * (NW * 8 * (SOS + 2) + 8 * HD) <= ATC_ST * NU * NT * 16,
                  "merge buffers fit in the staging");
    static_assert((NW * 8 * (SOS + 2)) % 4 == 0, "sout 16-byte aligned");
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ int s_last;

    const int split = blockIdx.x, kvh = blockIdx.y, tid = threadIdx.x;
    const int w = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int64_t row = (int64_t)n_head_kv * HD;  // halves per cache row
    const __half *kb = kc + (int64_t)kvh * HD, *vb = vc + (int64_t)kvh * HD;

    // The step's split (see the top of the file for the position's read before the dependency wait).
    const int L = __ldcg(d_pos) + 1;
    int chunk, n_act;
    atc_chunk<NW>(L, n_split, single_max, chunk, n_act);
    const int start = split * chunk, end = split < n_act ? min(L, start + chunk) : start;  // (empty: idle split)
    // Before the wait: L2 prefetch of this block's rows. Rows below the current position were written by earlier
    // steps; the current row may still be in flight, but a prefetch is only a hint to L2 (the point of coherence;
    // L1 untouched).
    if ((ATC_L2_PREFETCH == 2 || (ATC_L2_PREFETCH == 1 && n_act == 1)) && L >= 1) {
        constexpr int LN = HD * 2 / 128;  // 128-byte lines per row slice
        for (int i = tid; i < (end - start) * 2 * LN; i += NT) {
            const int p = start + i / (2 * LN), r = i % (2 * LN);
            st_prefetch_l2((const uint8_t *)((r < LN ? kb : vb) + (int64_t)p * row) + (r % LN) * 128);
        }
    }
#if ATC_TMA_ON
    __shared__ __align__(8) uint64_t s_tbar[NW][ATC_ST];
    atc_tma_warp tw;
    // ATC_TMA 2: the first tiles now, where all their rows are below the step's own row L - 1 (rope mode: all, the
    // own row is patched in)
    if (ATC_TMA >= 2)
        tw = atc_tma_begin<HD, NW>(smem, s_tbar, &tmk, &tmv, kvh * HD, start, end, rp.k ? 0x7fffffff : L - 1);
    // Rope mode: the gains and rotations of this lane's query dims (fragment order) and, in the warp whose tile
    // holds row L - 1, of its K dims 2 lane, + 1 and HD / 2 + 2 lane, + 1: no kernel's outputs, loaded before the wait.
    const bool rope = rp.k != nullptr;
    const bool own_row = rope && HD == 128 && L - 1 >= start && L - 1 < end && w == ((L - 1 - start) / ATC_TP) % NW;
    float2 gq[KS][2], cq[KS][2][2], gk[2], ck[2];
    if (rope) {
        const float2 *cs = (const float2 *)(rp.cs + (int64_t)(L - 1) * HD);
#pragma unroll
        for (int kk = 0; kk < KS; kk++)
#pragma unroll
            for (int sub = 0; sub < 2; sub++) {
                const int dim = 16 * kk + 8 * sub + 2 * t;
                gq[kk][sub] = rp.q_norm ? *(const float2 *)(rp.q_norm + dim) : make_float2(1.0f, 1.0f);
                if (rp.neox && kk < KS / 2) cq[kk][sub][0] = cs[dim], cq[kk][sub][1] = cs[dim + 1];
                else if (!rp.neox) cq[kk][sub][0] = cs[dim / 2];
            }
        if (own_row) {
            const int d0 = 2 * lane, d1 = HD / 2 + 2 * lane;
            gk[0] = rp.k_norm ? *(const float2 *)(rp.k_norm + d0) : make_float2(1.0f, 1.0f);
            gk[1] = rp.k_norm ? *(const float2 *)(rp.k_norm + d1) : make_float2(1.0f, 1.0f);
            ck[0] = rp.neox ? cs[d0] : cs[lane];
            ck[1] = rp.neox ? cs[d0 + 1] : cs[HD / 4 + lane];
        }
    }
#endif
    st_pdl_wait_trigger<4>();  // q and this step's K/V row come from earlier work
    PH_MARK(1);
    if (split >= n_act) return;  // idle split (uniform per block)

    // Query fragments: head g's query as hi (A rows g) + lo (rows g + 8), in the permuted dim order; the scale is
    // applied to the f32 scores.
    float2 qx[KS][2];
#pragma unroll
    for (int kk = 0; kk < KS; kk++)
#pragma unroll
        for (int sub = 0; sub < 2; sub++) {
            const int wd = 2 * kk + sub;
            const int dim = ATC_TMA_ON ? 16 * kk + 8 * sub + 2 * t : 32 * (wd / 4) + 8 * t + 2 * (wd % 4);
            qx[kk][sub] = g < G ? *(const float2 *)(q + ((int64_t)kvh * G + g) * HD + dim) : make_float2(0.0f, 0.0f);
        }
#if ATC_TMA_ON
    // Rope mode, the K/V row first (its loads in flight with q's): normalised, rotated, stored, kept for the patch.
    uint32_t pkv[4] = {0u, 0u, 0u, 0u};  // K dims 2 lane, + 1; HD / 2 + 2 lane, + 1; then V's, as half2
    if constexpr (HD == 128) {
        if (own_row) {
            const int d0 = 2 * lane, d1 = HD / 2 + 2 * lane;
            const float *kr = rp.k + (int64_t)kvh * HD, *vr = rp.v + (int64_t)kvh * HD;
            float2 a = *(const float2 *)(kr + d0), b = *(const float2 *)(kr + d1);
            const float2 va = *(const float2 *)(vr + d0), vb = *(const float2 *)(vr + d1);
            if (rp.k_norm) {  // the CPU's rounding steps: float squares, summed in double
                const double ss = g32_sum_d(((double)__fmul_rn(a.x, a.x) + (double)__fmul_rn(a.y, a.y)) +
                                            ((double)__fmul_rn(b.x, b.x) + (double)__fmul_rn(b.y, b.y)));
                const float sc = norm_rms_scale(ss, HD, rp.eps);
                a.x = __fmul_rn(__fmul_rn(a.x, sc), gk[0].x), a.y = __fmul_rn(__fmul_rn(a.y, sc), gk[0].y);
                b.x = __fmul_rn(__fmul_rn(b.x, sc), gk[1].x), b.y = __fmul_rn(__fmul_rn(b.y, sc), gk[1].y);
            }
            if (rp.neox) rope_rot(a.x, b.x, ck[0]), rope_rot(a.y, b.y, ck[1]);
            else rope_rot(a.x, a.y, ck[0]), rope_rot(b.x, b.y, ck[1]);
            pkv[0] = atc_h2(__floats2half2_rn(a.x, a.y)), pkv[1] = atc_h2(__floats2half2_rn(b.x, b.y));
            pkv[2] = atc_h2(__floats2half2_rn(va.x, va.y)), pkv[3] = atc_h2(__floats2half2_rn(vb.x, vb.y));
            const int64_t at = (int64_t)(L - 1) * row + (int64_t)kvh * HD;
            *(uint32_t *)(kc + at + d0) = pkv[0], *(uint32_t *)(kc + at + d1) = pkv[1];
            *(uint32_t *)(vc + at + d0) = pkv[2], *(uint32_t *)(vc + at + d1) = pkv[3];
        }
    }
    if (rope) {  // this warp's query fragments: head g's dims lie in the quad's 4 lanes, each RoPE pair in one lane
        if (rp.q_norm) {
            double ss = 0;
#pragma unroll
            for (int kk = 0; kk < KS; kk++)
#pragma unroll
                for (int sub = 0; sub < 2; sub++)
                    ss += (double)__fmul_rn(qx[kk][sub].x, qx[kk][sub].x) +
                          (double)__fmul_rn(qx[kk][sub].y, qx[kk][sub].y);
            ss += __shfl_xor_sync(ST_WARP_FULL_MASK, ss, 1, 32);
            ss += __shfl_xor_sync(ST_WARP_FULL_MASK, ss, 2, 32);
            const float sc = norm_rms_scale(ss, HD, rp.eps);
#pragma unroll
            for (int kk = 0; kk < KS; kk++)
#pragma unroll
                for (int sub = 0; sub < 2; sub++) {
                    qx[kk][sub].x = __fmul_rn(__fmul_rn(qx[kk][sub].x, sc), gq[kk][sub].x);
                    qx[kk][sub].y = __fmul_rn(__fmul_rn(qx[kk][sub].y, sc), gq[kk][sub].y);
                }
        }
#pragma unroll
        for (int kk = 0; kk < KS; kk++)
#pragma unroll
            for (int sub = 0; sub < 2; sub++)
                if (!rp.neox) rope_rot(qx[kk][sub].x, qx[kk][sub].y, cq[kk][sub][0]);
                else if (kk < KS / 2) {  // dims d and d + HD / 2: dim tile kk + KS / 2 of the same lane
                    rope_rot(qx[kk][sub].x, qx[kk + KS / 2][sub].x, cq[kk][sub][0]);
                    rope_rot(qx[kk][sub].y, qx[kk + KS / 2][sub].y, cq[kk][sub][1]);
                }
    }
#endif
    uint32_t qa[KS][4];
#pragma unroll
    for (int kk = 0; kk < KS; kk++)
#pragma unroll
        for (int sub = 0; sub < 2; sub++) {
            // unscaled (|q| ~ 1 keeps the lo part out of the f16 subnormals)
            const float x0 = qx[kk][sub].x, x1 = qx[kk][sub].y;
            const __half2 hi = __floats2half2_rn(x0, x1);
            const float2 hf = __half22float2(hi);
            qa[kk][sub ? 2 : 0] = atc_h2(hi);
            qa[kk][sub ? 3 : 1] = atc_h2(__floats2half2_rn(x0 - hf.x, x1 - hf.y));
        }
    PH_MARK(2);  // (the query's fragments ready: QK-norm, RoPE, the own K/V row stored)
    float o[DT][4];
#pragma unroll
    for (int d = 0; d < DT; d++) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
    float m = -INFINITY, lsum = 0.0f;  // head g's running max and this lane's share of the sum

    // Warp tiles: block tile b = w + NW i covers positions start + 16 b .. + 15.
#if ATC_TMA_ON
    if (ATC_TMA < 2) tw = atc_tma_begin<HD, NW>(smem, s_tbar, &tmk, &tmv, kvh * HD, start, end, 0x7fffffff);
    atc_tiles_tma<HD, NW>(tw, &tmk, &tmv, qa, o, m, lsum, end, scale, own_row ? L - 1 : -1, pkv);
#else
    const int n_tiles = (end - start + ATC_TP - 1) / ATC_TP;
#if ATC_BULK && ST_TC_BULK
    if (ATC_BULK == 2 || n_tiles >= ATC_BULK_MIN_TILES)  // uniform per block
        atc_tiles<HD, true, NW>(smem, qa, o, m, lsum, start, end, n_tiles, kb, vb, row, scale);
    else
#endif
        atc_tiles<HD, false, NW>(smem, qa, o, m, lsum, start, end, n_tiles, kb, vb, row, scale);
#endif
    lsum += __shfl_xor_sync(ST_WARP_FULL_MASK, lsum, 1, 32);
    lsum += __shfl_xor_sync(ST_WARP_FULL_MASK, lsum, 2, 32);
    __syncthreads();  // every warp is done with its staging: the merges reuse it
    PH_MARK(3);

    // Block merge of the NW warp partials into the split's partial.
    float *so = (float *)smem;                             // [NW][8][SOS]
    float *sm = so + NW * 8 * SOS, *sl = sm + NW * 8;  // [NW][8]
    float *sout = sl + NW * 8;                         // [8][HD] (final merge)
    if (g < G && ATC_TMA_ON) {  // (atc_tiles_tma: dim tile d holds dims 8 d + 2 t, + 1)
        float *dst = so + (w * 8 + g) * SOS;
#pragma unroll
        for (int d = 0; d < DT; d++) {
            dst[8 * d + 2 * t] = (o[d][0] + o[d][2]) * (1.0f / ATC_PS);
            dst[8 * d + 2 * t + 1] = (o[d][1] + o[d][3]) * (1.0f / ATC_PS);
        }
        if (t == 0) sm[w * 8 + g] = m, sl[w * 8 + g] = lsum;
    } else if (g < G) {
        float *dst = so + (w * 8 + g) * SOS;
#pragma unroll
        for (int c = 0; c < NV; c++)
#pragma unroll
            for (int i2 = 0; i2 < 8; i2++) {
                const float *od = o[8 * c + i2];
                dst[64 * c + 16 * t + i2] = (od[0] + od[2]) * (1.0f / ATC_PS);
                dst[64 * c + 16 * t + 8 + i2] = (od[1] + od[3]) * (1.0f / ATC_PS);
            }
        if (t == 0) sm[w * 8 + g] = m, sl[w * 8 + g] = lsum;
    }
    __syncthreads();
    // One split (a short context): this block's merge is the result, written directly (no workspace round trip,
    // fence and counter); the same values as the last block's merge of one partial (weight exp(0) = 1, 1 / l).
    const bool direct = n_act == 1;
    for (int idx = tid; idx < G * HD; idx += NT) {
        const int hg = idx / HD, d = idx % HD;
        float M = -INFINITY;
#pragma unroll
        for (int ww = 0; ww < NW; ww++) M = fmaxf(M, sm[ww * 8 + hg]);
        float acc = 0.0f, ls = 0.0f;
#pragma unroll
        for (int ww = 0; ww < NW; ww++) {
            const float mt = sm[ww * 8 + hg], wt = mt == -INFINITY ? 0.0f : __expf(mt - M);
            acc += wt * so[(ww * 8 + hg) * SOS + d];
            ls += wt * sl[ww * 8 + hg];
        }
        if (direct) {
            const float o = (1.0f / ls) * acc;
            out[((int64_t)kvh * G + hg) * HD + d] = o;
            sout[hg * HD + d] = o;
            continue;
        }
        const int64_t k = ((int64_t)kvh * G + hg) * n_split + split;
        ws_o[k * HD + d] = acc;
        if (d == 0) ws_ml[2 * k] = M, ws_ml[2 * k + 1] = ls;
    }
#define ATC_PH_DONE                                                                                         \
    PH_DONE(0, "attention (p1 wait, p2 query, p3 tiles, p4 block merge, p5 level-1 arrive, p6 its merge + level-2 " \
               "arrive, p7 final merge, p8 quantization)")
    PH_MARK(4);
    if (direct) {
        if (!outq) return;  // uniform
        __syncthreads();
        block_quant<false>(fmt, sout, outq, G * HD * n_head_kv / 32, kvh * (G * HD / 32), G * HD / 32);
        PH_MARK(8);
        ATC_PH_DONE;
        return;
    }

    // Cross-block merge: level 1 (groups of ATC_SG splits) when there are more than ATC_SG, then the last block.
    const int n_grp = (n_act + ATC_SG - 1) / ATC_SG;
    int target = n_act;
    if (n_grp > 1) {
        const int grp = split / ATC_SG, gs0 = grp * ATC_SG, gn = min(ATC_SG, n_act - gs0);
        const bool grp_last = st_block_arrive_last<true>(counters + n_head_kv + kvh * ATC_NG + grp, gn, s_last);
        PH_MARK(5);
        if (!grp_last) {
            ATC_PH_DONE;
            return;
        }
        atc_merge<HD>(ws_o, ws_ml, n_split, gs0, gn, G, kvh, ws_o1, ws_ml1, ATC_NG, grp, NULL, NULL);
        target = n_grp;
    }
    const bool head_last = st_block_arrive_last<true>(&counters[kvh], target, s_last);
    PH_MARK(6);
    if (!head_last) {
        ATC_PH_DONE;
        return;
    }
    if (n_grp > 1) atc_merge<HD>(ws_o1, ws_ml1, ATC_NG, 0, n_grp, G, kvh, NULL, NULL, 0, 0, out, sout);
    else atc_merge<HD>(ws_o, ws_ml, n_split, 0, n_act, G, kvh, NULL, NULL, 0, 0, out, sout);
    PH_MARK(7);
    if (outq) {  // uniform
        const int nb = G * HD * n_head_kv / 32;
        block_quant<false>(fmt, sout, outq, nb, kvh * (G * HD / 32), G * HD / 32);
    }
    PH_MARK(8);
    ATC_PH_DONE;
#undef ATC_PH_DONE
}

extern "C" int st_cuda_attn_dec_supported(int head_dim, int n_head, int n_head_kv, int act_format) {
    if ((head_dim != 64 && head_dim != 128) || n_head_kv <= 0 || n_head % n_head_kv || n_head / n_head_kv > 8)
        return 0;
    const int gh = n_head / n_head_kv * head_dim;
    return act_format < 0 || (dec_fmt_ok(act_format) && gh % (act_format == ST_TYPE_Q8_K ? 256 : 32) == 0);
}

extern "C" int st_cuda_attn_dec_splits(int n_head_kv, int n_sm) {
    // about ATC_BLOCKS_PER_SM blocks per SM at long contexts
    int s = n_head_kv > 0 ? (ATC_BLOCKS_PER_SM * n_sm + n_head_kv - 1) / n_head_kv : 1;
    return s < 1 ? 1 : s > ATT_MAX_SPLIT ? ATT_MAX_SPLIT : s;
}

// Workspace (offsets rounded to 256 bytes): [counters: int32, n_head_kv final + n_head_kv * ATC_NG level-1 (room
// for max(n_head_kv, 64) KV heads, so callers that share one workspace between shapes keep the same layout)][ws_o
// n_head * n_split * head_dim f32][ws_ml n_head * n_split
// * 2][ws_o1 n_head * ATC_NG * head_dim][ws_ml1 n_head * ATC_NG * 2] (the level-1 partials; the SIMT kernel uses
// only the final counters, ws_o and ws_ml).
typedef struct {
    size_t o, ml, o1, ml1, total;
} att_ws_layout;
static size_t att_r256(size_t b) { return (b + 255) / 256 * 256; }
static att_ws_layout att_ws(int n_head, int n_head_kv, int head_dim, int n_split) {
    att_ws_layout l;
    const size_t nh = (size_t)(n_head > 0 ? n_head : 1), sp = (size_t)(n_split > 0 ? n_split : 1);
    const size_t n_cnt = (size_t)(n_head_kv > 64 ? n_head_kv : 64) * (1 + ATC_NG);
    l.o = att_r256(sizeof(int32_t) * n_cnt);
    l.ml = l.o + att_r256(sizeof(float) * nh * sp * (size_t)head_dim);
    l.o1 = l.ml + att_r256(sizeof(float) * nh * sp * 2);
    l.ml1 = l.o1 + att_r256(sizeof(float) * nh * ATC_NG * (size_t)head_dim);
    l.total = l.ml1 + att_r256(sizeof(float) * nh * ATC_NG * 2);
    return l;
}
extern "C" size_t st_cuda_attn_dec_ws_bytes(int n_head, int n_head_kv, int head_dim, int n_split) {
    return att_ws(n_head, n_head_kv, head_dim, n_split).total;
}

// Tensor-core kernel switch and per-device capability (mma.sync needs sm_80). On by default (2026-11-30e, tg64 at
// depth 16384: 269.0 vs 243.7 tok/s with the SIMT kernel); STRATA_ATTN_TC=0 (or st_cuda_attn_dec_set_tc(0)) turns
// it off.
static int g_att_tc_on = -1;  // -1: from the environment at the first use
static int g_att_tc_smem[64][2][2];  // per device: max dynamic shared memory set for k_attn_dec_tc<64 | 128, 4 | 8>
extern "C" void st_cuda_attn_dec_set_tc(int on) { g_att_tc_on = on < 0 ? -1 : on != 0; }
extern "C" int st_cuda_attn_dec_tc(int kv_f16) {
#if ST_WARP_SIZE != 32
    (void)kv_f16;
    return 0;
#else
    if (g_att_tc_on < 0) {
        const char *e = getenv("STRATA_ATTN_TC");
        g_att_tc_on = !(e && *e == '0');
    }
    return g_att_tc_on && kv_f16 && st_dec_device_major() >= 8;
#endif
}

// Positions up to which the tensor-core kernel takes one split per KV head: STRATA_ATTN_SINGLE (default 128, 0
// off).
static int atc_single_max(void) {
    static int v = -2;
    if (v == -2) {
        const char *e = getenv("STRATA_ATTN_SINGLE");
        v = e ? atoi(e) : 128;
        if (v < 0) v = 0;
    }
    return v;
}

#if ATC_TMA
// The ATC_TMA tensor map of one cache: rows of row_halves f16 from base to the end of its allocation
// (cuMemGetAddressRange: a box never leaves it; rows past the context are masked or zeroed in the kernel), boxes of
// 16 rows x 64 halves, 128-byte swizzle, zeros out of bounds.
typedef CUresult (*atc_encode_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                  const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                  CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
typedef CUresult (*atc_range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);
static void *atc_driver_fn(const char *name) {
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q;
    return cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
                   q == cudaDriverEntryPointSuccess
               ? fn
               : NULL;
}
static int atc_encode(atc_tmap *map, const void *base, int row_halves) {
    static atc_encode_fn enc;
    static atc_range_fn range;
    if (!enc) enc = (atc_encode_fn)atc_driver_fn("cuTensorMapEncodeTiled");
    if (!range) range = (atc_range_fn)atc_driver_fn("cuMemGetAddressRange");
    if (!enc || !range)
        return st_err("st_cuda_attn_dec (ATC_TMA): the driver lacks cuTensorMapEncodeTiled / cuMemGetAddressRange");
    CUdeviceptr a0 = 0;
    size_t an = 0;
    if (range(&a0, &an, (CUdeviceptr)(uintptr_t)base) != CUDA_SUCCESS)
        return st_err("st_cuda_attn_dec (ATC_TMA): cuMemGetAddressRange failed for the K/V cache");
    const cuuint64_t row_bytes = 2ull * (cuuint64_t)row_halves;
    const cuuint64_t rows = ((cuuint64_t)a0 + an - (cuuint64_t)(uintptr_t)base) / row_bytes;
    const cuuint64_t dims[2] = {(cuuint64_t)row_halves, rows};
    const cuuint64_t strides[1] = {row_bytes};
    const cuuint32_t box[2] = {ATC_TMA_BOX_H, ATC_TP}, elem[2] = {1, 1};
    static_assert(sizeof(atc_tmap) == sizeof(CUtensorMap), "atc_tmap holds a CUtensorMap");
    CUtensorMap tm;
    const CUresult r = enc(&tm, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, (void *)base, dims, strides, box, elem,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return st_err("st_cuda_attn_dec (ATC_TMA): cuTensorMapEncodeTiled failed (%d)", (int)r);
    memcpy(map, &tm, sizeof tm);
    return 0;
}
#endif

// The dynamic shared memory (and the carveout) of k_attn_dec_tc<HD, NW>, set once per device.
template <int HD, int NW> static int atc_set_smem(int dev) {
    int *set = &g_att_tc_smem[dev][HD == 128][NW == ATC_NW_WIDE];
    if (*set) return 0;
    const size_t smem = atc_smem_bytes<NW>(HD);
    cudaError_t e = cudaFuncSetAttribute(k_attn_dec_tc<HD, NW>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    // All of the unified L1 / shared memory as shared: two blocks of the bulk staging per SM need 2 x 113.7 KB.
    if (ATC_BULK && e == cudaSuccess)
        e = cudaFuncSetAttribute(k_attn_dec_tc<HD, NW>, cudaFuncAttributePreferredSharedMemoryCarveout,
                                 (int)cudaSharedmemCarveoutMaxShared);
    if (e != cudaSuccess)
        return st_err("st_cuda_attn_dec: cudaFuncSetAttribute(%zu bytes of shared memory): %s", smem,
                      cudaGetErrorString(e));
    *set = 1;
    return 0;
}

template <int HD, int NW>
static int atc_launch(float *out, void *outq, int fmt, const float *q, const void *kc, const void *vc,
                      const int32_t *d_pos, int G, int n_head_kv, float scale, int n_split, uint8_t *ws,
                      const att_ws_layout &lo, const atc_rope &rp, cudaStream_t stream) {
    const size_t smem = atc_smem_bytes<NW>(HD);
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
        return st_err("st_cuda_attn_dec: no current device");
    // Both block widths at the first (eager) use: the engine's first wide step may be inside a graph capture.
    if (atc_set_smem<HD, ATC_NW>(dev)) return -1;
    if constexpr (HD == 128)
        if (atc_set_smem<HD, ATC_NW_WIDE>(dev)) return -1;
    float *o = (float *)(ws + lo.o), *ml = (float *)(ws + lo.ml), *o1 = (float *)(ws + lo.o1),
          *ml1 = (float *)(ws + lo.ml1);
#if ATC_TMA
    // Only the sm_90 code reads the maps (ATC_TMA_ON); an older device runs code that ignores them, and its driver
    // may not encode them.
    atc_tmap tmk = {}, tmv = {};
    if (st_dec_device_major() >= 9 &&
        (atc_encode(&tmk, kc, n_head_kv * HD) || atc_encode(&tmv, vc, n_head_kv * HD)))
        return -1;
#endif
    st_dec_launch(k_attn_dec_tc<HD, NW>, dim3(n_split, n_head_kv), dim3(NW * 32), smem, stream, out, (uint8_t *)outq,
                  fmt, q, (const __half *)kc, (const __half *)vc, d_pos, G, n_head_kv, scale, n_split,
                  atc_single_max(), o, ml, o1, ml1, (int32_t *)ws, rp
#if ATC_TMA
                  , tmk, tmv
#endif
    );
    return 0;
}

template <typename KT, int HD, int GP>
static void att_launch(float *out, void *outq, int fmt, const float *q, const void *kc, const void *vc,
                       const int32_t *d_pos, int G, int n_head_kv, float scale, int n_split, float *ws_o,
                       float *ws_ml, int32_t *cnt, cudaStream_t stream) {
    st_dec_launch(k_attn_dec<KT, HD, GP>, dim3(n_split, n_head_kv), dim3(ATT_NT), 0, stream, out, (uint8_t *)outq,
                  fmt, q, (const KT *)kc, (const KT *)vc, d_pos, G, n_head_kv, scale, n_split, ws_o, ws_ml, cnt);
}

extern "C" int st_cuda_attn_dec_rope_supported(int head_dim, int n_rot, int kv_f16) {
    return ATC_TMA && head_dim == 128 && n_rot == head_dim && st_cuda_attn_dec_tc(kv_f16) && st_dec_device_major() >= 9;
}

static int attn_dec(float *out, void *outq, int act_format, const float *q, const void *k_cache, const void *v_cache,
                    int kv_f16, const int32_t *d_pos, int n_head, int n_head_kv, int head_dim, float scale,
                    int n_split, void *workspace, const st_cuda_attn_rope *rope, int wide, cudaStream_t stream) {
    if (!st_cuda_attn_dec_supported(head_dim, n_head, n_head_kv, outq ? act_format : -1))
        return st_err("st_cuda_attn_dec: unsupported shape: head_dim %d (64 or 128), %d heads over %d KV heads (at "
                      "most 8 per KV head), output format %d", head_dim, n_head, n_head_kv, outq ? act_format : -1);
    if (n_split < 1 || n_split > ATT_MAX_SPLIT)
        return st_err("st_cuda_attn_dec: n_split %d (1..%d)", n_split, ATT_MAX_SPLIT);
    if (!out || !q || !k_cache || !v_cache || !d_pos || !workspace || ((uintptr_t)out & 15) || ((uintptr_t)q & 15) ||
        ((uintptr_t)k_cache & 15) || ((uintptr_t)v_cache & 15) || ((uintptr_t)outq & 15))
        return st_err("st_cuda_attn_dec: NULL or misaligned (16 bytes) device pointer");
    const int G = n_head / n_head_kv;
    const att_ws_layout lo = att_ws(n_head, n_head_kv, head_dim, n_split);
    atc_rope rp = {};
    if (rope)
        rp = {rope->k, rope->v, rope->q_norm, rope->k_norm, rope->rope_cs, rope->eps, rope->neox};
    if (st_cuda_attn_dec_tc(kv_f16)) {
        // wide: ATC_NW_WIDE warps per block where the TMA staging runs (head_dim 128)
        const bool w8 = wide && head_dim == 128 && ATC_TMA && st_dec_device_major() >= 9;
        if ((head_dim == 128 ? (w8 ? atc_launch<128, ATC_NW_WIDE> : atc_launch<128, ATC_NW>)(
                                   out, outq, act_format, q, k_cache, v_cache, d_pos, G, n_head_kv, scale, n_split,
                                   (uint8_t *)workspace, lo, rp, stream)
                             : atc_launch<64, ATC_NW>(out, outq, act_format, q, k_cache, v_cache, d_pos, G, n_head_kv,
                                                      scale, n_split, (uint8_t *)workspace, lo, rp, stream)))
            return -1;
        return launch_check("attn_dec (tensor cores)");
    }
    int32_t *cnt = (int32_t *)workspace;
    float *ws_o = (float *)((uint8_t *)workspace + lo.o);
    float *ws_ml = (float *)((uint8_t *)workspace + lo.ml);
#define ATT_GO(KT, HD, GP) \
    att_launch<KT, HD, GP>(out, outq, act_format, q, k_cache, v_cache, d_pos, G, n_head_kv, scale, n_split, ws_o, ws_ml, cnt, stream)
    if (kv_f16) {
        if (head_dim == 128) { if (G <= 4) ATT_GO(__half, 128, 4); else ATT_GO(__half, 128, 8); }
        else { if (G <= 4) ATT_GO(__half, 64, 4); else ATT_GO(__half, 64, 8); }
    } else {
        if (head_dim == 128) { if (G <= 4) ATT_GO(float, 128, 4); else ATT_GO(float, 128, 8); }
        else { if (G <= 4) ATT_GO(float, 64, 4); else ATT_GO(float, 64, 8); }
    }
#undef ATT_GO
    return launch_check("attn_dec");
}

extern "C" int st_cuda_attn_dec(float *out, void *outq, int act_format, const float *q, const void *k_cache,
                                const void *v_cache, int kv_f16, const int32_t *d_pos, int n_head, int n_head_kv,
                                int head_dim, float scale, int n_split, void *workspace, cudaStream_t stream) {
    return attn_dec(out, outq, act_format, q, k_cache, v_cache, kv_f16, d_pos, n_head, n_head_kv, head_dim, scale,
                    n_split, workspace, NULL, 0, stream);
}

extern "C" int st_cuda_attn_dec_ex(float *out, void *outq, int act_format, const float *q, const void *k_cache,
                                   const void *v_cache, int kv_f16, const int32_t *d_pos, int n_head, int n_head_kv,
                                   int head_dim, float scale, int n_split, void *workspace,
                                   const st_cuda_attn_rope *rope, int wide, cudaStream_t stream) {
    if (rope && (!rope->k || !rope->v || !rope->rope_cs || ((uintptr_t)rope->k & 7) || ((uintptr_t)rope->v & 7) ||
        ((uintptr_t)rope->q_norm & 7) || ((uintptr_t)rope->k_norm & 7) || ((uintptr_t)rope->rope_cs & 7)))
        return st_err("st_cuda_attn_dec_ex: K, V and the rotation table must be 8-byte aligned device pointers "
                      "(the norm gains too, or NULL)");
    if (rope && !st_cuda_attn_dec_rope_supported(head_dim, rope->n_rot, kv_f16))
        return st_err("st_cuda_attn_dec_ex: head_dim %d with %d rotated dims, %s cache: needs head_dim 128 rotated "
                      "whole, an f16 cache and the sm_90 tensor-core kernel", head_dim, rope->n_rot,
                      kv_f16 ? "an f16" : "an f32");
    return attn_dec(out, outq, act_format, q, k_cache, v_cache, kv_f16, d_pos, n_head, n_head_kv, head_dim, scale,
                    n_split, workspace, rope, wide, stream);
}
