// Decode attention, version 2 (decode.h: st_cuda_attn_dec): flash-decoding whose split count follows the actual
// KV length read on the device, the combine done by the last block of each KV head, the CPU-format quantization
// of the output fused in.
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

#include "cuda/decode_common.cuh"
#include "cuda/qblock.h"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(ST_ATT_NO_ASYNC)
#include <cuda_pipeline_primitives.h>
#define ATT_ASYNC 1
#else
#define ATT_ASYNC 0
#endif

#define ATT_NW 4                   // warps per block
#define ATT_NT (ATT_NW * 32)       // threads per block
#define ATT_NB 4                   // rows per group per batch
#define ATT_ST 3                   // staging stages
#define ATT_MAX_SPLIT 256          // n_split limit (last-block weights in shared memory)
#define ATT_SMEM 49152             // static shared bytes: the staging, reused by the merges

__device__ __forceinline__ void att_cp16(void *dst_smem, const void *src) {
#if ATT_ASYNC
    __pipeline_memcpy_async(dst_smem, src, 16);
#else
    *(uint4 *)dst_smem = *(const uint4 *)src;
#endif
}
__device__ __forceinline__ void att_commit() {
#if ATT_ASYNC
    __pipeline_commit();
#endif
}
template <int N> __device__ __forceinline__ void att_wait() {
#if ATT_ASYNC
    __pipeline_wait_prior(N);
#endif
}

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

    st_pdl_wait();  // q, this step's K/V row and d_pos come from earlier work
    st_pdl_trigger();
    const int L = *d_pos + 1;
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
                att_cp16(&stg[((s * ATT_NB + r) * 2 + 0) * ATT_NT + tid], kb + (int64_t)p * row);
                att_cp16(&stg[((s * ATT_NB + r) * 2 + 1) * ATT_NT + tid], vb + (int64_t)p * row);
            }
        }
        att_commit();  // an empty group past the end keeps the wait counts uniform
    };
#pragma unroll
    for (int i = 0; i < ATT_ST - 1; i++) issue(i);
    for (int i = 0; i < nbw; i++) {
        issue(i + ATT_ST - 1);
        att_wait<ATT_ST - 1>();  // batch i has landed
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
    att_wait<0>();
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
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        s_last = atomicAdd(&counters[kvh], 1) == n_act - 1;
        if (s_last) counters[kvh] = 0;  // ready for the next launch (graph replay)
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();
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

extern "C" int st_cuda_attn_dec_supported(int head_dim, int n_head, int n_head_kv, int act_format) {
    if ((head_dim != 64 && head_dim != 128) || n_head_kv <= 0 || n_head % n_head_kv || n_head / n_head_kv > 8)
        return 0;
    const int gh = n_head / n_head_kv * head_dim;
    return act_format < 0 || (dec_fmt_ok(act_format) && gh % (act_format == ST_TYPE_Q8_K ? 256 : 32) == 0);
}

extern "C" int st_cuda_attn_dec_splits(int n_head_kv, int n_sm) {
    int s = n_head_kv > 0 ? (2 * n_sm + n_head_kv - 1) / n_head_kv : 1;  // about two blocks per SM at long contexts
    return s < 1 ? 1 : s > ATT_MAX_SPLIT ? ATT_MAX_SPLIT : s;
}

// Workspace: [256 bytes: n_head_kv int32 counters][ws_o n_head * n_split * head_dim f32][ws_ml n_head * n_split * 2]
extern "C" size_t st_cuda_attn_dec_ws_bytes(int n_head, int n_head_kv, int head_dim, int n_split) {
    const size_t cnt = ((size_t)n_head_kv * 4 + 255) / 256 * 256;
    return cnt + sizeof(float) * (size_t)n_head * (size_t)n_split * (size_t)(head_dim + 2);
}

template <typename KT, int HD, int GP>
static void att_launch(float *out, void *outq, int fmt, const float *q, const void *kc, const void *vc,
                       const int32_t *d_pos, int G, int n_head_kv, float scale, int n_split, float *ws_o,
                       float *ws_ml, int32_t *cnt, cudaStream_t stream) {
    st_dec_launch(k_attn_dec<KT, HD, GP>, dim3(n_split, n_head_kv), dim3(ATT_NT), 0, stream, out, (uint8_t *)outq,
                  fmt, q, (const KT *)kc, (const KT *)vc, d_pos, G, n_head_kv, scale, n_split, ws_o, ws_ml, cnt);
}

extern "C" int st_cuda_attn_dec(float *out, void *outq, int act_format, const float *q, const void *k_cache,
                                const void *v_cache, int kv_f16, const int32_t *d_pos, int n_head, int n_head_kv,
                                int head_dim, float scale, int n_split, void *workspace, cudaStream_t stream) {
    if (!st_cuda_attn_dec_supported(head_dim, n_head, n_head_kv, outq ? act_format : -1))
        return st_err("st_cuda_attn_dec: unsupported shape: head_dim %d (64 or 128), %d heads over %d KV heads (at "
                      "most 8 per KV head), output format %d", head_dim, n_head, n_head_kv, outq ? act_format : -1);
    if (n_split < 1 || n_split > ATT_MAX_SPLIT)
        return st_err("st_cuda_attn_dec: n_split %d (1..%d)", n_split, ATT_MAX_SPLIT);
    if (!out || !q || !k_cache || !v_cache || !d_pos || !workspace || ((uintptr_t)out & 15) || ((uintptr_t)q & 15) ||
        ((uintptr_t)k_cache & 15) || ((uintptr_t)v_cache & 15) || ((uintptr_t)outq & 15))
        return st_err("st_cuda_attn_dec: NULL or misaligned (16 bytes) device pointer");
    const int G = n_head / n_head_kv;
    int32_t *cnt = (int32_t *)workspace;
    float *ws_o = (float *)((uint8_t *)workspace + ((size_t)n_head_kv * 4 + 255) / 256 * 256);
    float *ws_ml = ws_o + (size_t)n_head * n_split * head_dim;
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
