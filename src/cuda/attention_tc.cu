// Tensor-core prefill attention (see attention_tc.h): flash attention 2 style with mma.sync m16n8k16 (f16 in, f32
// accumulation) and an online softmax.
//
// Grid (row blocks, n_head_kv). A block owns FA_BM = 64 query rows of one KV head, row = (token, head in group)
// in token-major order, so the K/V tiles in shared memory serve all G query heads of the group (GQA: each K/V byte
// is read once per 64 / G tokens instead of once per 64 / G tokens per head). 4 warps, 16 rows each.
// Per tile of FA_BN = 64 cache positions (K and V staged with cp.async, double-buffered, zero-filled past the last
// visible position so no unwritten cache memory is read):
//   S = Q K^T    (Q fragments held in registers for the whole block; K rows are the n-major B operand)
//   causal mask  (row's limit pos0 + t; only tiles that cross a row's limit need it)
//   online softmax in base 2 (Q pre-scaled by scale * log2 e), per row across the 4 lanes of a quad
//   O += P V     (P re-packed from the S accumulators as f16 A fragments; V through ldmatrix.trans)
// Tiles past the block's last visible position are never visited, so the causal half of a chunk costs nothing.
#include "cuda/attention_tc.h"

#include <cuda_fp16.h>
#include <math.h>

#include "cuda/common.cuh"
#include "cuda/mma.cuh"

#define FA_THREADS 128
#define FA_BM 64
#define FA_BN 64

template <int HD> struct fa_cfg {
    static constexpr int LD = HD + 8;                          // halves per staged row: (HD/8 + 1) x 16 bytes, odd
    static constexpr size_t Q_BYTES = (size_t)FA_BM * LD * 2;  // scaled queries
    static constexpr size_t KV_BYTES = (size_t)FA_BN * LD * 2; // one K or V tile
    static constexpr size_t SMEM = Q_BYTES + 4 * KV_BYTES;     // Q + 2 stages x (K, V)
};

// Stages positions kv0 .. kv0 + FA_BN - 1 of one head into dst[FA_BN][LD] (zeros past max_pos).
template <int HD>
__device__ __forceinline__ void fa_load(__half *dst, const __half *base, int64_t row, int kv0, int max_pos) {
    constexpr int CPR = HD / 8, LD = fa_cfg<HD>::LD;
    for (int c = threadIdx.x; c < FA_BN * CPR; c += FA_THREADS) {
        const int r = c / CPR, cc = c % CPR, pos = kv0 + r;
        const bool ok = pos <= max_pos;
        tc_cp16(dst + r * LD + cc * 8, base + (int64_t)(ok ? pos : 0) * row + cc * 8, ok ? 16 : 0);
    }
}

template <int HD>
__global__ void __launch_bounds__(FA_THREADS, 2)
    k_attn_prefill_tc(float *__restrict__ out, const float *__restrict__ q, const __half *__restrict__ kc,
                      const __half *__restrict__ vc, const int32_t *__restrict__ d_pos, int n_tok, int n_head,
                      int n_head_kv, float scale_log2) {
    using C = fa_cfg<HD>;
    constexpr int LD = C::LD, KS = HD / 16, NO = HD / 8;  // k16 steps over head_dim; n8 tiles of the output
    extern __shared__ __align__(16) uint8_t fa_smem[];
    __half *Qs = (__half *)fa_smem;
    __half *KVs = (__half *)(fa_smem + C::Q_BYTES);  // [stage][K, V][FA_BN][LD]

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, t4 = lane & 3;
    const int kvh = blockIdx.y, G = n_head / n_head_kv;
    const int64_t R0 = (int64_t)blockIdx.x * FA_BM;
    const int pos0 = *d_pos;
    const int64_t row = (int64_t)n_head_kv * HD;
    const __half *kb = kc + (int64_t)kvh * HD, *vb = vc + (int64_t)kvh * HD;

    int64_t t_last = (R0 + FA_BM - 1) / G;
    if (t_last > n_tok - 1) t_last = n_tok - 1;
    const int max_pos = pos0 + (int)t_last;  // the last position any row of this block sees
    const int n_tiles = max_pos / FA_BN + 1;

    fa_load<HD>(KVs, kb, row, 0, max_pos);
    fa_load<HD>(KVs + FA_BN * LD, vb, row, 0, max_pos);
    tc_cp_commit();

    // Scaled queries to shared memory as f16 (padding rows zero), then this warp's A fragments to registers.
    for (int i = tid; i < FA_BM * (HD / 2); i += FA_THREADS) {
        const int r = i / (HD / 2), d = 2 * (i % (HD / 2));
        const int64_t fr = R0 + r, t = fr / G, hq = (int64_t)kvh * G + fr % G;
        float2 v = make_float2(0.0f, 0.0f);
        if (t < n_tok) v = *(const float2 *)&q[(t * n_head + hq) * HD + d];
        *(uint32_t *)&Qs[r * LD + d] = tc_pack_h2(v.x * scale_log2, v.y * scale_log2);
    }
    __syncthreads();
    uint32_t qf[KS][4];
#pragma unroll
    for (int ks = 0; ks < KS; ks++) tc_ld_a(qf[ks], Qs + warp * 16 * LD + ks * 16, LD);

    // This lane's two rows (g and g + 8 of the warp's 16): causal limits, -1 for padding rows.
    int lim[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t t = (R0 + warp * 16 + g + 8 * h) / G;
        lim[h] = t < n_tok ? pos0 + (int)t : -1;
    }
    const int lim_min = min(lim[0] < 0 ? max_pos : lim[0], lim[1] < 0 ? max_pos : lim[1]);
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f};
    float o[NO][4];
#pragma unroll
    for (int n = 0; n < NO; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

    for (int it = 0; it < n_tiles; it++) {
        const int kv0 = it * FA_BN;
        __half *Kt = KVs + (size_t)(it & 1) * 2 * FA_BN * LD, *Vt = Kt + FA_BN * LD;
        if (it + 1 < n_tiles) {
            __half *nk = KVs + (size_t)((it + 1) & 1) * 2 * FA_BN * LD;
            fa_load<HD>(nk, kb, row, kv0 + FA_BN, max_pos);
            fa_load<HD>(nk + FA_BN * LD, vb, row, kv0 + FA_BN, max_pos);
        }
        tc_cp_commit();
        tc_cp_wait<1>();
        __syncthreads();

        // S = Q K^T: 16 rows x 64 positions per warp (8 n8 tiles).
        float s[8][4];
#pragma unroll
        for (int n = 0; n < 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
#pragma unroll
            for (int np = 0; np < 4; np++) {
                uint32_t bf[4];
                tc_ld_b(bf, Kt + np * 16 * LD + ks * 16, LD);
                tc_mma(s[2 * np], qf[ks], bf[0], bf[1]);
                tc_mma(s[2 * np + 1], qf[ks], bf[2], bf[3]);
            }
        }
        // Causal mask where the tile reaches past a row's limit (always for padding rows).
        if (kv0 + FA_BN - 1 > lim_min || lim[0] < 0 || lim[1] < 0) {
#pragma unroll
            for (int n = 0; n < 8; n++) {
                const int p = kv0 + 8 * n + 2 * t4;
                if (p > lim[0]) s[n][0] = -INFINITY;
                if (p + 1 > lim[0]) s[n][1] = -INFINITY;
                if (p > lim[1]) s[n][2] = -INFINITY;
                if (p + 1 > lim[1]) s[n][3] = -INFINITY;
            }
        }
        // Online softmax per row (h = 0: row g, c0/c1; h = 1: row g + 8, c2/c3); a row's 64 values sit on 4 lanes.
        float alpha[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float mx = -INFINITY;
#pragma unroll
            for (int n = 0; n < 8; n++) mx = fmaxf(mx, fmaxf(s[n][2 * h], s[n][2 * h + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(ST_WARP_FULL_MASK, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(ST_WARP_FULL_MASK, mx, 2));
            const float m_new = fmaxf(m_r[h], mx);
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // nothing visible yet: every p is 0
            alpha[h] = exp2f(m_r[h] - m_use);                        // m_r = -inf gives 0 (o and l are 0 then)
            float sum = 0.0f;
#pragma unroll
            for (int n = 0; n < 8; n++) {
                s[n][2 * h] = exp2f(s[n][2 * h] - m_use);
                s[n][2 * h + 1] = exp2f(s[n][2 * h + 1] - m_use);
                sum += s[n][2 * h] + s[n][2 * h + 1];
            }
            sum += __shfl_xor_sync(ST_WARP_FULL_MASK, sum, 1);
            sum += __shfl_xor_sync(ST_WARP_FULL_MASK, sum, 2);
            l_r[h] = l_r[h] * alpha[h] + sum;
            m_r[h] = m_new;
        }
#pragma unroll
        for (int n = 0; n < NO; n++) {
            o[n][0] *= alpha[0], o[n][1] *= alpha[0];
            o[n][2] *= alpha[1], o[n][3] *= alpha[1];
        }
        // O += P V: P's accumulators of n8 tiles 2j, 2j+1 are the A fragment of k16 step j.
#pragma unroll
        for (int j = 0; j < 4; j++) {
            uint32_t pf[4];
            pf[0] = tc_pack_h2(s[2 * j][0], s[2 * j][1]);
            pf[1] = tc_pack_h2(s[2 * j][2], s[2 * j][3]);
            pf[2] = tc_pack_h2(s[2 * j + 1][0], s[2 * j + 1][1]);
            pf[3] = tc_pack_h2(s[2 * j + 1][2], s[2 * j + 1][3]);
#pragma unroll
            for (int dp = 0; dp < NO / 2; dp++) {
                uint32_t bf[4];
                tc_ld_bt(bf, Vt + j * 16 * LD + dp * 16, LD);
                tc_mma(o[2 * dp], pf, bf[0], bf[1]);
                tc_mma(o[2 * dp + 1], pf, bf[2], bf[3]);
            }
        }
        __syncthreads();  // this stage is refilled two tiles later
    }
    tc_cp_wait<0>();

#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t fr = R0 + warp * 16 + g + 8 * h, t = fr / G, hq = (int64_t)kvh * G + fr % G;
        if (t >= n_tok) continue;
        const float inv = 1.0f / l_r[h];
        float *dst = out + (t * n_head + hq) * HD;
#pragma unroll
        for (int n = 0; n < NO; n++)
            *(float2 *)&dst[8 * n + 2 * t4] = make_float2(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
    }
}

extern "C" int st_cuda_attn_prefill_tc_supported(int head_dim, int n_head, int n_head_kv, int kv_f16) {
    return kv_f16 && (head_dim == 64 || head_dim == 128) && n_head_kv > 0 && n_head % n_head_kv == 0;
}

template <int HD>
static int fa_launch(float *out, const float *q, const void *kc, const void *vc, const int32_t *d_pos, int n_tok,
                     int n_head, int n_head_kv, float scale, cudaStream_t stream) {
    const size_t smem = fa_cfg<HD>::SMEM;
    cudaError_t e = cudaFuncSetAttribute(k_attn_prefill_tc<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess)
        return st_err("cuda: attn_prefill_tc: cudaFuncSetAttribute(%zu bytes): %s", smem, cudaGetErrorString(e));
    const int64_t rows = (int64_t)n_tok * (n_head / n_head_kv);
    const int64_t bx = (rows + FA_BM - 1) / FA_BM;
    if (bx > 0x7fffffff || n_head_kv > 65535)
        return st_err("st_cuda_attn_prefill_tc: %d tokens x %d heads is too large for one launch", n_tok, n_head);
    const dim3 grid((unsigned)bx, (unsigned)n_head_kv);
    k_attn_prefill_tc<HD><<<grid, FA_THREADS, smem, stream>>>(out, q, (const __half *)kc, (const __half *)vc, d_pos,
                                                             n_tok, n_head, n_head_kv, scale * 1.4426950408889634f);
    return launch_check("attn_prefill_tc");
}

extern "C" int st_cuda_attn_prefill_tc(float *out, const float *q, const void *k_cache, const void *v_cache,
                                       const int32_t *d_pos, int n_tok, int n_head, int n_head_kv, int head_dim,
                                       float scale, cudaStream_t stream) {
    if (!st_cuda_attn_prefill_tc_supported(head_dim, n_head, n_head_kv, 1))
        return st_err("st_cuda_attn_prefill_tc: head_dim %d with %d/%d heads is not supported (64 or 128, n_head a "
                      "multiple of n_head_kv)", head_dim, n_head, n_head_kv);
    if (n_tok <= 0) return 0;
    if (((uintptr_t)k_cache & 15) || ((uintptr_t)v_cache & 15) || ((uintptr_t)q & 7))
        return st_err("st_cuda_attn_prefill_tc: caches must be 16-byte and q 8-byte aligned");
    return head_dim == 128 ? fa_launch<128>(out, q, k_cache, v_cache, d_pos, n_tok, n_head, n_head_kv, scale, stream)
                           : fa_launch<64>(out, q, k_cache, v_cache, d_pos, n_tok, n_head, n_head_kv, scale, stream);
}
