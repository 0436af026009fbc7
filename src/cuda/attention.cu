// CUDA attention over the KV cache (see attention.h).
//
// Decode, version 1 (flash-decoding, SIMT f32 arithmetic): grid (n_split, n_head_kv). A block takes one chunk of
// positions for one KV head and all G = n_head / n_head_kv query heads of its group, so every K/V byte is read from
// memory once per step. Per tile of positions it stages K and V in shared memory with 16-byte loads, computes the
// G x tile scores (thread = position x subset of heads; rows padded by 16 bytes so a warp's 16-byte reads of
// different rows are bank-conflict free), does the online-softmax update per head (one warp per head), then
// accumulates P.V (thread = output dimension x subset of heads). Partial (max, sum, unnormalised output) per
// (head, split) go to the workspace; a combine kernel merges the splits. Decode at 16K positions reads 32 MiB of
// cache per layer for the Qwen3-30B-A3B shape; the arithmetic (2 x G FMAs per cached element) stays below the
// memory time on an H200, so SIMT suffices here; tensor cores would matter only for much larger groups.
//
// Prefill, version 1 (SIMT, correctness first; a tensor-core mma version is the planned next step): grid
// (row tiles, n_head_kv). A block owns 64 query rows = (token, head-in-group) pairs of one KV head, so K/V tiles
// in shared memory serve all heads of the group; each thread computes a 4 x 4 block of scores and a 4 x (HD/16)
// block of the output, with the causal mask and an online softmax per row.
#include "cuda/attention.h"

#include <cuda_fp16.h>
#include <math.h>

#include "cuda/common.cuh"  // warp reductions, launch_check

// 16 bytes of cache elements to floats.
__device__ __forceinline__ void cvt16(const uint4 &u, float *f, const __half *) {
    const __half2 *h = (const __half2 *)&u;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 x = __half22float2(h[i]);
        f[2 * i] = x.x;
        f[2 * i + 1] = x.y;
    }
}
__device__ __forceinline__ void cvt16(const uint4 &u, float *f, const float *) {
    f[0] = __uint_as_float(u.x);
    f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z);
    f[3] = __uint_as_float(u.w);
}
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f(float x) { return x; }

// ---- decode -----------------------------------------------------------------------------------------------------

#define DEC_THREADS 128
#define DEC_GMAX 16  // query heads per KV head the decode kernel holds (Qwen3-30B-A3B: 8)

template <typename KT, int HD>
__global__ void __launch_bounds__(DEC_THREADS)
    k_attn_decode(const float *__restrict__ q, const KT *__restrict__ kc, const KT *__restrict__ vc,
                  const int32_t *__restrict__ d_pos, int n_head, int n_head_kv, float scale, int n_split,
                  float *__restrict__ ws_o, float *__restrict__ ws_ml) {
    constexpr int T = sizeof(KT) == 2 ? 64 : 32;        // positions per tile
    constexpr int VEC = 16 / (int)sizeof(KT);            // elements per 16-byte load
    constexpr int KS = HD + VEC;                         // padded K row (16 bytes of padding)
    constexpr int GS = DEC_THREADS / T;                  // head subsets in the score phase
    constexpr int HPT = (DEC_GMAX + GS - 1) / GS;        // heads per thread there
    constexpr int DGS = DEC_THREADS / HD;                // head subsets in the P.V phase (HD <= DEC_THREADS)
    constexpr int OPT = (DEC_GMAX + DGS - 1) / DGS;      // heads per thread there
    constexpr int CPR = HD / VEC;                        // 16-byte chunks per row

    __shared__ __align__(16) float Qs[DEC_GMAX][HD];
    __shared__ __align__(16) KT Ks[T][KS];
    __shared__ __align__(16) KT Vs[T][HD];
    __shared__ __align__(16) float Ps[DEC_GMAX][T];
    __shared__ float m_s[DEC_GMAX], l_s[DEC_GMAX], c_s[DEC_GMAX];

    const int split = blockIdx.x, kvh = blockIdx.y, tid = threadIdx.x;
    const int G = n_head / n_head_kv;
    const int L = *d_pos + 1;
    int chunk = (L + n_split - 1) / n_split;
    chunk = (chunk + T - 1) / T * T;
    const int start = split * chunk, end = min(L, start + chunk);
    const int64_t row = (int64_t)n_head_kv * HD;
    const KT *kb = kc + (int64_t)kvh * HD, *vb = vc + (int64_t)kvh * HD;

    for (int i = tid; i < G * HD; i += DEC_THREADS) Qs[i / HD][i % HD] = q[(int64_t)kvh * G * HD + i] * scale;
    if (tid < DEC_GMAX) {
        m_s[tid] = -INFINITY;
        l_s[tid] = 0.0f;
    }
    const int pd = tid % HD, pg = tid / HD;
    float o[OPT];
#pragma unroll
    for (int i = 0; i < OPT; i++) o[i] = 0.0f;
    __syncthreads();

    for (int p0 = start; p0 < end; p0 += T) {
        for (int c = tid; c < T * CPR; c += DEC_THREADS) {
            const int r = c / CPR, cc = c % CPR, pos = p0 + r;
            uint4 kk = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
            if (pos < end) {
                kk = *(const uint4 *)(kb + pos * row + cc * VEC);
                vv = *(const uint4 *)(vb + pos * row + cc * VEC);
            }
            *(uint4 *)&Ks[r][cc * VEC] = kk;
            *(uint4 *)&Vs[r][cc * VEC] = vv;
        }
        __syncthreads();
        {  // scores: thread = (position p, heads gs, gs + GS, ...)
            const int p = tid % T, gs = tid / T;
            float acc[HPT];
#pragma unroll
            for (int i = 0; i < HPT; i++) acc[i] = 0.0f;
#pragma unroll 4
            for (int d = 0; d < HD; d += VEC) {
                float kf[VEC];
                cvt16(*(const uint4 *)&Ks[p][d], kf, (const KT *)nullptr);
#pragma unroll
                for (int i = 0; i < HPT; i++) {
                    const int g = gs + i * GS;
                    if (g < G) {
#pragma unroll
                        for (int v4 = 0; v4 < VEC; v4 += 4) {
                            const float4 qq = *(const float4 *)&Qs[g][d + v4];
                            acc[i] += qq.x * kf[v4] + qq.y * kf[v4 + 1] + qq.z * kf[v4 + 2] + qq.w * kf[v4 + 3];
                        }
                    }
                }
            }
            const bool valid = p0 + p < end;
#pragma unroll
            for (int i = 0; i < HPT; i++) {
                const int g = gs + i * GS;
                if (g < G) Ps[g][p] = valid ? acc[i] : -INFINITY;
            }
        }
        __syncthreads();
        {  // online softmax, one warp per head (the tile's first position is always valid: the max is finite)
            const int w = tid / ST_WARP_SIZE, lane = tid % ST_WARP_SIZE;
            for (int g = w; g < G; g += DEC_THREADS / ST_WARP_SIZE) {
                float mx = -INFINITY;
                for (int p = lane; p < T; p += ST_WARP_SIZE) mx = fmaxf(mx, Ps[g][p]);
                mx = warp_max(mx);
                const float m_old = m_s[g], m_new = fmaxf(m_old, mx);
                float sum = 0.0f;
                for (int p = lane; p < T; p += ST_WARP_SIZE) {
                    const float e = __expf(Ps[g][p] - m_new);
                    Ps[g][p] = e;
                    sum += e;
                }
                sum = warp_sum(sum);
                if (lane == 0) {
                    const float c = __expf(m_old - m_new);
                    c_s[g] = c;
                    l_s[g] = l_s[g] * c + sum;
                    m_s[g] = m_new;
                }
            }
        }
        __syncthreads();
        {  // P.V: thread = (dimension pd, heads pg, pg + DGS, ...)
#pragma unroll
            for (int i = 0; i < OPT; i++) {
                const int g = pg + i * DGS;
                if (g < G) o[i] *= c_s[g];
            }
#pragma unroll 2
            for (int p = 0; p < T; p += 4) {
                const float v0 = to_f(Vs[p][pd]), v1 = to_f(Vs[p + 1][pd]), v2 = to_f(Vs[p + 2][pd]),
                            v3 = to_f(Vs[p + 3][pd]);
#pragma unroll
                for (int i = 0; i < OPT; i++) {
                    const int g = pg + i * DGS;
                    if (g < G) {
                        const float4 pp = *(const float4 *)&Ps[g][p];
                        o[i] += pp.x * v0 + pp.y * v1 + pp.z * v2 + pp.w * v3;
                    }
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < OPT; i++) {
        const int g = pg + i * DGS;
        if (g < G) ws_o[(((int64_t)kvh * G + g) * n_split + split) * HD + pd] = o[i];
    }
    if (tid < G) {
        const int64_t k = ((int64_t)kvh * G + tid) * n_split + split;
        ws_ml[2 * k] = m_s[tid];
        ws_ml[2 * k + 1] = l_s[tid];
    }
}

// One block per head, one thread per dimension: merge the splits' partials (empty splits have max -inf).
__global__ void k_attn_combine(float *__restrict__ out, const float *__restrict__ ws_o,
                               const float *__restrict__ ws_ml, int n_split, int hd) {
    const int h = blockIdx.x, d = threadIdx.x;
    const float *ml = ws_ml + (int64_t)h * n_split * 2;
    float M = -INFINITY;
    for (int s = 0; s < n_split; s++) M = fmaxf(M, ml[2 * s]);
    float l = 0.0f, acc = 0.0f;
    for (int s = 0; s < n_split; s++) {
        const float m = ml[2 * s];
        if (m == -INFINITY) continue;
        const float w = __expf(m - M);
        l += w * ml[2 * s + 1];
        acc += w * ws_o[((int64_t)h * n_split + s) * hd + d];
    }
    out[(int64_t)h * hd + d] = acc / l;
}

extern "C" int st_cuda_attn_supported(int head_dim, int n_head, int n_head_kv) {
    return (head_dim == 64 || head_dim == 128) && n_head_kv > 0 && n_head % n_head_kv == 0 &&
           n_head / n_head_kv <= DEC_GMAX;
}

extern "C" int st_cuda_attn_decode_splits(int n_head_kv, int n_sm) {
    int s = (4 * n_sm + n_head_kv - 1) / n_head_kv;  // about four blocks per SM at long contexts
    return s < 1 ? 1 : s;
}

extern "C" size_t st_cuda_attn_decode_workspace_bytes(int n_head, int head_dim, int n_split) {
    return sizeof(float) * (size_t)n_head * (size_t)n_split * (size_t)(head_dim + 2);
}

template <typename KT, int HD>
static void launch_decode(float *out, const float *q, const void *kc, const void *vc, const int32_t *d_pos,
                          int n_head, int n_head_kv, float scale, int n_split, void *ws, cudaStream_t stream) {
    float *ws_o = (float *)ws, *ws_ml = ws_o + (size_t)n_head * n_split * HD;
    k_attn_decode<KT, HD><<<dim3(n_split, n_head_kv), DEC_THREADS, 0, stream>>>(
        q, (const KT *)kc, (const KT *)vc, d_pos, n_head, n_head_kv, scale, n_split, ws_o, ws_ml);
    k_attn_combine<<<n_head, HD, 0, stream>>>(out, ws_o, ws_ml, n_split, HD);
}

extern "C" int st_cuda_attn_decode(float *out, const float *q, const void *k_cache, const void *v_cache, int kv_f16,
                                   const int32_t *d_pos, int n_head, int n_head_kv, int head_dim, float scale,
                                   int n_split, void *workspace, cudaStream_t stream) {
    if (!st_cuda_attn_supported(head_dim, n_head, n_head_kv))
        return st_err("st_cuda_attn_decode: unsupported shape: head_dim %d (64 or 128), %d heads over %d KV heads "
                      "(at most %d per KV head)", head_dim, n_head, n_head_kv, DEC_GMAX);
    if (n_split < 1) return st_err("st_cuda_attn_decode: n_split %d < 1", n_split);
    if (kv_f16) {
        if (head_dim == 128) launch_decode<__half, 128>(out, q, k_cache, v_cache, d_pos, n_head, n_head_kv, scale, n_split, workspace, stream);
        else launch_decode<__half, 64>(out, q, k_cache, v_cache, d_pos, n_head, n_head_kv, scale, n_split, workspace, stream);
    } else {
        if (head_dim == 128) launch_decode<float, 128>(out, q, k_cache, v_cache, d_pos, n_head, n_head_kv, scale, n_split, workspace, stream);
        else launch_decode<float, 64>(out, q, k_cache, v_cache, d_pos, n_head, n_head_kv, scale, n_split, workspace, stream);
    }
    return launch_check("attn_decode");
}

// ---- prefill ----------------------------------------------------------------------------------------------------

#define PF_THREADS 256
#define PF_BM 64  // query rows per block
#define PF_BN 64  // cache positions per tile
#define PF_PS (PF_BN + 4)

template <int HD> static constexpr size_t prefill_smem() {
    return sizeof(float) * ((size_t)(PF_BM + PF_BN) * (HD + 4) + (size_t)PF_BM * PF_PS + 3 * PF_BM);
}

// Stages cache positions kv0 .. kv0 + PF_BN - 1 of one head (base: its first element; rows `row` elements apart;
// zeros past max_pos) as f32 into the shared tile KV[PF_BN][HD + 4]. All PF_THREADS threads take part.
template <typename KT, int HD>
__device__ __forceinline__ void pf_stage_tile(float *KV, const KT *base, int64_t row, int kv0, int max_pos, int tid) {
    constexpr int QS = HD + 4, VEC = 16 / (int)sizeof(KT), CPR = HD / VEC;
    for (int c = tid; c < PF_BN * CPR; c += PF_THREADS) {
        const int r = c / CPR, cc = c % CPR, pos = kv0 + r;
        float f[VEC];
        uint4 u = make_uint4(0, 0, 0, 0);
        if (pos <= max_pos) u = *(const uint4 *)(base + pos * row + cc * VEC);
        cvt16(u, f, (const KT *)nullptr);
#pragma unroll
        for (int v = 0; v < VEC; v += 4) *(float4 *)&KV[r * QS + cc * VEC + v] = make_float4(f[v], f[v + 1], f[v + 2], f[v + 3]);
    }
}

template <typename KT, int HD>
__global__ void __launch_bounds__(PF_THREADS)
    k_attn_prefill(float *__restrict__ out, const float *__restrict__ q, const KT *__restrict__ kc,
                   const KT *__restrict__ vc, const int32_t *__restrict__ d_pos, int n_tok, int n_head,
                   int n_head_kv, float scale) {
    constexpr int QS = HD + 4;       // padded f32 row
    constexpr int DJ = HD / 64;      // float4 column groups per thread in P.V (2 for HD 128, 1 for 64)
    extern __shared__ __align__(16) float sm[];
    float *Qs = sm;                  // [PF_BM][QS] scaled queries
    float *KV = Qs + PF_BM * QS;     // [PF_BN][QS] K tile, then V tile, as f32
    float *Ps = KV + PF_BN * QS;     // [PF_BM][PF_PS] scores, then probabilities
    float *m_r = Ps + PF_BM * PF_PS, *l_r = m_r + PF_BM, *c_r = l_r + PF_BM;

    const int tid = threadIdx.x, ty = tid / 16, tx = tid % 16;
    const int kvh = blockIdx.y, G = n_head / n_head_kv;
    const int64_t R0 = (int64_t)blockIdx.x * PF_BM;
    const int pos0 = *d_pos;
    const int64_t row = (int64_t)n_head_kv * HD;
    const KT *kb = kc + (int64_t)kvh * HD, *vb = vc + (int64_t)kvh * HD;

    for (int i = tid; i < PF_BM * HD; i += PF_THREADS) {
        const int r = i / HD, d = i % HD;
        const int64_t fr = R0 + r, t = fr / G, g = fr % G;
        Qs[r * QS + d] = t < n_tok ? q[(t * n_head + (int64_t)kvh * G + g) * HD + d] * scale : 0.0f;
    }
    if (tid < PF_BM) {
        m_r[tid] = -INFINITY;
        l_r[tid] = 0.0f;
    }
    int64_t t_last = (R0 + PF_BM - 1) / G;
    if (t_last > n_tok - 1) t_last = n_tok - 1;
    const int max_pos = pos0 + (int)t_last;  // the last cache position any row of this block sees
    int lim[4];                               // causal limit of this thread's rows (-1: padding row)
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t t = (R0 + ty * 4 + i) / G;
        lim[i] = t < n_tok ? pos0 + (int)t : -1;
    }
    float acc[4][DJ * 4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < DJ * 4; j++) acc[i][j] = 0.0f;
    __syncthreads();

    for (int kv0 = 0; kv0 <= max_pos; kv0 += PF_BN) {
        pf_stage_tile<KT, HD>(KV, kb, row, kv0, max_pos, tid);
        __syncthreads();
        {  // scores: rows ty*4 + i, positions tx + 16 j
            float s[4][4];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) s[i][j] = 0.0f;
#pragma unroll 4
            for (int d = 0; d < HD; d += 4) {
                float4 a[4], b[4];
#pragma unroll
                for (int i = 0; i < 4; i++) a[i] = *(const float4 *)&Qs[(ty * 4 + i) * QS + d];
#pragma unroll
                for (int j = 0; j < 4; j++) b[j] = *(const float4 *)&KV[(tx + 16 * j) * QS + d];
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        s[i][j] += a[i].x * b[j].x + a[i].y * b[j].y + a[i].z * b[j].z + a[i].w * b[j].w;
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int p = tx + 16 * j;
                    Ps[(ty * 4 + i) * PF_PS + p] = kv0 + p <= lim[i] ? s[i][j] : -INFINITY;
                }
        }
        __syncthreads();
        // V tile into KV (K is no longer needed), and the online softmax: 4 consecutive threads per row.
        pf_stage_tile<KT, HD>(KV, vb, row, kv0, max_pos, tid);
        {
            const int r = tid / 4, part = tid % 4;
            float *pr = Ps + r * PF_PS + part * (PF_BN / 4);
            float mx = -INFINITY;
#pragma unroll
            for (int p = 0; p < PF_BN / 4; p++) mx = fmaxf(mx, pr[p]);
            mx = fmaxf(mx, __shfl_xor_sync(ST_WARP_MASK, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(ST_WARP_MASK, mx, 2));
            const float m_old = m_r[r], m_new = fmaxf(m_old, mx);
            const bool none = m_new == -INFINITY;  // padding row, or nothing visible yet
            float sum = 0.0f;
#pragma unroll
            for (int p = 0; p < PF_BN / 4; p++) {
                const float e = none ? 0.0f : __expf(pr[p] - m_new);
                pr[p] = e;
                sum += e;
            }
            sum += __shfl_xor_sync(ST_WARP_MASK, sum, 1);
            sum += __shfl_xor_sync(ST_WARP_MASK, sum, 2);
            __syncwarp(ST_WARP_MASK);  // all four have read m_r[r] before it changes
            if (part == 0) {
                const float c = none ? 1.0f : __expf(m_old - m_new);
                c_r[r] = c;
                l_r[r] = l_r[r] * c + sum;
                m_r[r] = m_new;
            }
        }
        __syncthreads();
        {  // P.V: rows ty*4 + i, columns tx*4 + 64 jj .. +3
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float c = c_r[ty * 4 + i];
#pragma unroll
                for (int j = 0; j < DJ * 4; j++) acc[i][j] *= c;
            }
#pragma unroll 4
            for (int p = 0; p < PF_BN; p++) {
                float pv[4];
#pragma unroll
                for (int i = 0; i < 4; i++) pv[i] = Ps[(ty * 4 + i) * PF_PS + p];
#pragma unroll
                for (int jj = 0; jj < DJ; jj++) {
                    const float4 v = *(const float4 *)&KV[p * QS + tx * 4 + 64 * jj];
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        acc[i][jj * 4 + 0] += pv[i] * v.x;
                        acc[i][jj * 4 + 1] += pv[i] * v.y;
                        acc[i][jj * 4 + 2] += pv[i] * v.z;
                        acc[i][jj * 4 + 3] += pv[i] * v.w;
                    }
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int r = ty * 4 + i;
        const int64_t fr = R0 + r, t = fr / G, g = fr % G;
        if (t >= n_tok) continue;
        const float inv = 1.0f / l_r[r];
        float *o = out + (t * n_head + (int64_t)kvh * G + g) * HD;
#pragma unroll
        for (int jj = 0; jj < DJ; jj++)
            *(float4 *)&o[tx * 4 + 64 * jj] = make_float4(acc[i][jj * 4] * inv, acc[i][jj * 4 + 1] * inv,
                                                          acc[i][jj * 4 + 2] * inv, acc[i][jj * 4 + 3] * inv);
    }
}

template <typename KT, int HD>
static int launch_prefill(float *out, const float *q, const void *kc, const void *vc, const int32_t *d_pos, int n_tok,
                          int n_head, int n_head_kv, float scale, cudaStream_t stream) {
    const size_t smem = prefill_smem<HD>();
    cudaError_t e = cudaFuncSetAttribute(k_attn_prefill<KT, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return st_err("cuda: attn_prefill: cudaFuncSetAttribute(%zu bytes): %s", smem, cudaGetErrorString(e));
    const int64_t rows = (int64_t)n_tok * (n_head / n_head_kv);
    dim3 grid((unsigned)((rows + PF_BM - 1) / PF_BM), n_head_kv);
    k_attn_prefill<KT, HD><<<grid, PF_THREADS, smem, stream>>>(out, q, (const KT *)kc, (const KT *)vc, d_pos, n_tok,
                                                              n_head, n_head_kv, scale);
    return launch_check("attn_prefill");
}

extern "C" int st_cuda_attn_prefill(float *out, const float *q, const void *k_cache, const void *v_cache, int kv_f16,
                                    const int32_t *d_pos, int n_tok, int n_head, int n_head_kv, int head_dim,
                                    float scale, cudaStream_t stream) {
    if (head_dim != 64 && head_dim != 128)
        return st_err("st_cuda_attn_prefill: head_dim %d unsupported (64 or 128)", head_dim);
    if (n_head_kv <= 0 || n_head % n_head_kv)
        return st_err("st_cuda_attn_prefill: %d heads are not a multiple of %d KV heads", n_head, n_head_kv);
    if (n_tok <= 0) return 0;
    if (kv_f16)
        return head_dim == 128 ? launch_prefill<__half, 128>(out, q, k_cache, v_cache, d_pos, n_tok, n_head, n_head_kv, scale, stream)
                               : launch_prefill<__half, 64>(out, q, k_cache, v_cache, d_pos, n_tok, n_head, n_head_kv, scale, stream);
    return head_dim == 128 ? launch_prefill<float, 128>(out, q, k_cache, v_cache, d_pos, n_tok, n_head, n_head_kv, scale, stream)
                           : launch_prefill<float, 64>(out, q, k_cache, v_cache, d_pos, n_tok, n_head, n_head_kv, scale, stream);
}
