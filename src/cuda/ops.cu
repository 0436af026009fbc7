// CUDA element-wise operators (see ops.h). Version 1: straightforward one-pass kernels; the decode step is
// bandwidth- and launch-bound, so these aim at few launches (fusions: residual add + RMSNorm + q8_1 quantization,
// QK-norm + RoPE + KV store, SwiGLU + q8_1) rather than at peak arithmetic.
//
// Numerics follow the CPU reference (cpu/ops.c) closely enough for tight parity tests under --use_fast_math:
// reductions that the CPU does in double are done in double here, divisions whose rounding decides a quantized
// value use the IEEE-rounded intrinsics, and RoPE angles get a double sin/cos (the fast-math __sinf of an angle of
// 10^4 radians is wrong in the second digit).
#include "cuda/ops.h"

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

extern "C" {  // C headers without their own extern "C" (included here first so qblock.h's includes are no-ops)
#include "quant/blocks.h"
#include "quant/iq_tables.h"
#include "quant/quant.h"
#include "util/err.h"
}
#include "cuda/common.cuh"  // warp reductions (warp_sum, warp_max), launch_check
#include "cuda/decode_common.cuh"  // PDL launch and wait (the decode step's Q/K norm + RoPE kernel)
#include "cuda/decode_rows.cuh"    // route_group (the MoE route)
#include "cuda/qblock.h"      // planar q8_1 layout, per-type item unpacking (shared with mmvq)
#include "cuda/act_math.h"  // the CPU's SwiGLU arithmetic

// ---- reductions -------------------------------------------------------------------------------------------------

// Reductions over aligned groups of 32 lanes (a q8_1 block), also correct on a 64-wide wave.
__device__ __forceinline__ float group32_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(ST_WARP_MASK, v, o));
    return v;
}
__device__ __forceinline__ int group32_sum(int v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(ST_WARP_MASK, v, o);
    return v;
}

// Block-wide sum (blockDim.x a multiple of the warp size, <= 1024); every thread gets the result.
template <typename T> __device__ T block_sum(T v) {
    __shared__ T part[1024 / ST_WARP_SIZE];
    int lane = threadIdx.x % ST_WARP_SIZE, w = threadIdx.x / ST_WARP_SIZE, nw = blockDim.x / ST_WARP_SIZE;
    v = warp_sum(v);
    __syncthreads();  // part[] may still be read by a previous call
    if (lane == 0) part[w] = v;
    __syncthreads();
    T s = 0;
    for (int i = 0; i < nw; i++) s += part[i];  // fixed order: deterministic
    return s;
}

__device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ uint16_t f2h(float f) { return __half_as_ushort(__float2half_rn(f)); }

// Quantizes the value v of this lane into block b of a planar q8_1 row (cuda/qblock.h) of nb blocks; lane j of an
// aligned 32-lane group owns element j. Rounding as st_qb_quantize_q8_1: d = amax / 127, q = roundf(x * (1/d)),
// s = d * sum(q); IEEE-rounded division so fast math does not move a quant across a rounding boundary.
__device__ __forceinline__ void q8_1_store(uint8_t *row, int64_t nb, int64_t b, int j, float v) {
    float amax = group32_max(fabsf(v));
    float d = __fdiv_rn(amax, 127.0f);
    float id = d != 0.0f ? __fdiv_rn(1.0f, d) : 0.0f;
    int q = (int)roundf(__fmul_rn(v, id));
    int sum = group32_sum(q);
    row[b * 32 + j] = (uint8_t)(int8_t)q;
    if (j == 0) ((float2 *)(row + nb * 32))[b] = make_float2(d, __fmul_rn(d, (float)sum));
}

// ---- RMSNorm (+ residual add, + q8_1) ---------------------------------------------------------------------------

#define NORM_THREADS 256

__global__ void k_rmsnorm(float *__restrict__ y, uint8_t *__restrict__ yq, float *__restrict__ x,
                          const float *__restrict__ res, const float *__restrict__ w, int n, float eps) {
    const int64_t r = blockIdx.x;
    float *xr = x + r * n;
    // The CPU reference's rounding steps (st_rmsnorm): each square rounded to float, summed in double, the mean in
    // float, then IEEE add, sqrt and divide (norm_rms_scale), x * scale * w in that order. A double square or a
    // double scale moves the output by an ulp now and then, and an ulp at a Q8_K rounding tie flips a quant:
    // tests/gpu/parity_probe.py traced the IQ3_S e2e gap to one such element (token 38, 2026-11-30g).
    double ss = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = xr[i];
        if (res) {
            v = __fadd_rn(v, res[r * n + i]);
            xr[i] = v;
        }
        ss += (double)__fmul_rn(v, v);
    }
    ss = block_sum(ss);
    const float scale = norm_rms_scale(ss, n, eps);
    // Each thread re-reads only the elements it wrote itself, so no barrier is needed before this loop.
    // The loop runs over whole 32-element groups so the q8_1 shuffles see every lane (n % 32 == 0 then).
    const int n_up = yq ? n : (n + blockDim.x - 1) / blockDim.x * blockDim.x;
    for (int i = threadIdx.x; i < n_up; i += blockDim.x) {
        float v = i < n ? __fmul_rn(xr[i], scale) : 0.0f;
        if (w && i < n) v = __fmul_rn(v, w[i]);
        if (y && i < n) y[r * n + i] = v;
        if (yq) q8_1_store(yq + r * st_q8_1_row_bytes(n), n / 32, i / 32, i % 32, v);
    }
}

extern "C" int st_cuda_rmsnorm(float *y, void *yq, float *x, const float *res, const float *w, int n_rows, int n,
                               float eps, cudaStream_t stream) {
    if (!y && !yq) return st_err("st_cuda_rmsnorm: no output given");
    if (yq && n % 32) return st_err("st_cuda_rmsnorm: q8_1 output needs n %% 32 == 0 (n = %d)", n);
    if (n_rows <= 0) return 0;
    k_rmsnorm<<<n_rows, NORM_THREADS, 0, stream>>>(y, (uint8_t *)yq, x, res, w, n, eps);
    return launch_check("rmsnorm");
}

// ---- add, SwiGLU, q8_1 ------------------------------------------------------------------------------------------

__global__ void k_add(float *y, const float *a, const float *b, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = a[i] + b[i];
}

static int grid_for(int64_t n, int threads) {
    int64_t g = (n + threads - 1) / threads;
    return (int)(g < 65535 ? (g > 0 ? g : 1) : 65535);
}

extern "C" int st_cuda_add(float *y, const float *a, const float *b, int64_t n, cudaStream_t stream) {
    if (n <= 0) return 0;
    k_add<<<grid_for(n, 256), 256, 0, stream>>>(y, a, b, n);
    return launch_check("add");
}

// One element per thread; blocks of 256 threads cover whole q8_1 groups (ne0 % 32 == 0 when yq is given, so a
// group never straddles two rows).
__global__ void k_swiglu(float *y, uint8_t *yq, const float *g, const float *u, int64_t n, int64_t ne0) {
    const int64_t nb = ne0 / 32, rb = yq ? st_q8_1_row_bytes(ne0) : 0;
    for (int64_t base = blockIdx.x * (int64_t)blockDim.x; base < n; base += (int64_t)gridDim.x * blockDim.x) {
        int64_t i = base + threadIdx.x;
        float v = 0.0f;
        if (i < n) {
            float a = g[i];
            v = st_am_silu_mul(a, u[i]);
            if (y) y[i] = v;
        }
        if (yq && base + (threadIdx.x & ~31) < n) {
            const int64_t r = i / ne0, e = i % ne0;
            q8_1_store(yq + r * rb, nb, e / 32, (int)(e % 32), v);
        }
    }
}

extern "C" int st_cuda_swiglu(float *y, void *yq, const float *g, const float *u, int64_t n_rows, int64_t ne0,
                              cudaStream_t stream) {
    if (!y && !yq) return st_err("st_cuda_swiglu: no output given");
    if (yq && ne0 % 32) return st_err("st_cuda_swiglu: q8_1 output needs ne0 %% 32 == 0 (ne0 = %lld)", (long long)ne0);
    const int64_t n = n_rows * ne0;
    if (n <= 0) return 0;
    k_swiglu<<<grid_for(n, 256), 256, 0, stream>>>(y, (uint8_t *)yq, g, u, n, ne0);
    return launch_check("swiglu");
}

// ---- QK-norm + RoPE + KV store ----------------------------------------------------------------------------------

// One warp per head vector: warps [0, n_head) of a token are its Q heads, then n_head_kv K heads, then n_head_kv
// V heads (V is only converted and stored).
__global__ void k_qk_norm_rope_kv(float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,
                                  const float *__restrict__ q_norm, const float *__restrict__ k_norm, void *k_cache,
                                  void *v_cache, int kv_f16, const int32_t *__restrict__ d_pos, int n_tok,
                                  int n_head, int n_head_kv, int hd, int n_rot, float eps,
                                  const float *__restrict__ rope_cs, int neox) {
    const int per_tok = n_head + 2 * n_head_kv;
    const int64_t wid = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / ST_WARP_SIZE;
    const int lane = threadIdx.x % ST_WARP_SIZE;
    if (wid >= (int64_t)n_tok * per_tok) {  // whole warps leave together
        st_pdl_wait();
        st_pdl_trigger();
        return;
    }
    const int t = (int)(wid / per_tok), j = (int)(wid % per_tok);
    const int64_t pos = (int64_t)*d_pos + t;  // (the position is no kernel's output: readable before the wait)
    const int64_t kv_row = (int64_t)n_head_kv * hd;
    const int half = n_rot / 2;
    // Before the dependency wait (PDL): the rotation of this lane's pairs and the norm gains of its elements (no
    // kernel's output), so their loads overlap the Q/K/V kernel's tail instead of following the sum of squares.
    const bool is_q = j < n_head;
    const float *gain = is_q ? q_norm : k_norm;
    float rc[8], rs[8], ga[8], gb[8], gc[8];
    if (j < n_head + n_head_kv) {
        const float2 *cs = (const float2 *)(rope_cs + pos * n_rot);
        int m = 0;
        for (int i = lane; i < half && m < 8; i += ST_WARP_SIZE, m++) {
            const float2 v = cs[i];
            rc[m] = v.x, rs[m] = v.y;
            const int ea = neox ? i : 2 * i, eb = neox ? i + half : 2 * i + 1;
            ga[m] = gain ? gain[ea] : 1.0f, gb[m] = gain ? gain[eb] : 1.0f;
        }
        m = 0;
        for (int e = n_rot + lane; e < hd && m < 8; e += ST_WARP_SIZE, m++) gc[m] = gain ? gain[e] : 1.0f;
    }
    st_pdl_wait();  // q, k, v: the previous kernel's output
    st_pdl_trigger();

    if (j >= n_head + n_head_kv) {  // V: store only
        const int h = j - n_head - n_head_kv;
        const float *src = v + t * kv_row + (int64_t)h * hd;
        int64_t dst = pos * kv_row + (int64_t)h * hd;
        for (int e = lane; e < hd; e += ST_WARP_SIZE) {
            if (kv_f16) ((uint16_t *)v_cache)[dst + e] = f2h(src[e]);
            else ((float *)v_cache)[dst + e] = src[e];
        }
        return;
    }
    const int h = is_q ? j : j - n_head;
    const float *src = is_q ? q + ((int64_t)t * n_head + h) * hd : k + t * kv_row + (int64_t)h * hd;
    // This lane's elements, read once before any write (q is rotated in place, pairs cross lanes): at most hd/32
    // pairs and a tail.
    float a_[8], b_[8], c_[8];
    int n_mine = 0, n_tail = 0;
    for (int i = lane; i < half && n_mine < 8; i += ST_WARP_SIZE, n_mine++) {
        const int ea = neox ? i : 2 * i, eb = neox ? i + half : 2 * i + 1;
        a_[n_mine] = src[ea];
        b_[n_mine] = src[eb];
    }
    for (int e = n_rot + lane; e < hd && n_tail < 8; e += ST_WARP_SIZE, n_tail++) c_[n_tail] = src[e];
    float scale = 1.0f;
    if (gain) {  // the CPU's st_rmsnorm rounding steps (see k_rmsnorm): squares rounded to float, summed in double
        double ss = 0;
        for (int m = 0; m < n_mine; m++) ss += (double)__fmul_rn(a_[m], a_[m]) + (double)__fmul_rn(b_[m], b_[m]);
        for (int m = 0; m < n_tail; m++) ss += (double)__fmul_rn(c_[m], c_[m]);
        ss = warp_sum(ss);
        scale = norm_rms_scale(ss, hd, eps);
        for (int m = 0; m < n_mine; m++)
            a_[m] = __fmul_rn(__fmul_rn(a_[m], scale), ga[m]), b_[m] = __fmul_rn(__fmul_rn(b_[m], scale), gb[m]);
        for (int m = 0; m < n_tail; m++) c_[m] = __fmul_rn(__fmul_rn(c_[m], scale), gc[m]);
    }
    auto put = [&](int e, float x) {
        if (is_q) q[((int64_t)t * n_head + h) * hd + e] = x;
        else if (kv_f16) ((uint16_t *)k_cache)[pos * kv_row + (int64_t)h * hd + e] = f2h(x);
        else ((float *)k_cache)[pos * kv_row + (int64_t)h * hd + e] = x;
    };
    __syncwarp(ST_WARP_MASK);  // every lane has read its elements
    int m = 0;
    for (int i = lane; i < half && m < 8; i += ST_WARP_SIZE, m++) {
        const int ea = neox ? i : 2 * i, eb = neox ? i + half : 2 * i + 1;
        float x0 = a_[m], x1 = b_[m];
        rope_rot(x0, x1, make_float2(rc[m], rs[m]));
        put(ea, x0);
        put(eb, x1);
    }
    m = 0;
    for (int e = n_rot + lane; e < hd && m < 8; e += ST_WARP_SIZE, m++) put(e, c_[m]);
}

extern "C" int st_cuda_qk_norm_rope_kv(float *q, const float *k, const float *v, const float *q_norm,
                                       const float *k_norm, void *k_cache, void *v_cache, int kv_f16,
                                       const int32_t *d_pos, int n_tok, int n_head, int n_head_kv, int head_dim,
                                       int n_rot, float eps, const float *rope_cs, int neox,
                                       cudaStream_t stream) {
    if (n_rot % 2 || n_rot > head_dim || head_dim > 8 * ST_WARP_SIZE * 2)
        return st_err("st_cuda_qk_norm_rope_kv: unsupported head_dim %d / n_rot %d (n_rot even, <= head_dim, "
                      "head_dim <= %d)", head_dim, n_rot, 16 * ST_WARP_SIZE);
    if (head_dim - n_rot > 8 * ST_WARP_SIZE)
        return st_err("st_cuda_qk_norm_rope_kv: too many unrotated dims (%d)", head_dim - n_rot);
    if (n_tok <= 0) return 0;
    const int64_t warps = (int64_t)n_tok * (n_head + 2 * n_head_kv);
    const int threads = 128, wpb = threads / ST_WARP_SIZE;
    static int plain = -1;  // A/B (STRATA_ROPE_PLAIN=1): a plain launch, no PDL overlap; read once
    if (plain < 0) plain = getenv("STRATA_ROPE_PLAIN") != NULL;
    if (plain)
        k_qk_norm_rope_kv<<<(unsigned)((warps + wpb - 1) / wpb), threads, 0, stream>>>(
            q, k, v, q_norm, k_norm, k_cache, v_cache, kv_f16, d_pos, n_tok, n_head, n_head_kv, head_dim, n_rot, eps,
            rope_cs, neox);
    else
        st_dec_launch(k_qk_norm_rope_kv, dim3((unsigned)((warps + wpb - 1) / wpb)), dim3(threads), 0, stream, q, k,
                      v, q_norm, k_norm, k_cache, v_cache, kv_f16, d_pos, n_tok, n_head, n_head_kv, head_dim, n_rot,
                      eps, rope_cs, neox);
    return launch_check("qk_norm_rope_kv");
}

// ---- embedding rows ---------------------------------------------------------------------------------------------

__device__ __forceinline__ uint16_t ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

// Element i of the block at b (layouts: quant/blocks.h).
template <int TYPE> __device__ float dq_elem(const uint8_t *b, int i);

template <> __device__ float dq_elem<ST_TYPE_F32>(const uint8_t *b, int i) {
    return __uint_as_float((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
}
template <> __device__ float dq_elem<ST_TYPE_F16>(const uint8_t *b, int i) { return h2f(ld16(b)); }
template <> __device__ float dq_elem<ST_TYPE_BF16>(const uint8_t *b, int i) {
    return __uint_as_float((uint32_t)ld16(b) << 16);
}
template <> __device__ float dq_elem<ST_TYPE_Q4_0>(const uint8_t *b, int i) {
    const uint8_t q = b[2 + (i & 15)];
    return h2f(ld16(b)) * (float)((i < 16 ? q & 15 : q >> 4) - 8);
}
template <> __device__ float dq_elem<ST_TYPE_Q4_1>(const uint8_t *b, int i) {
    const uint8_t q = b[4 + (i & 15)];
    return h2f(ld16(b)) * (float)(i < 16 ? q & 15 : q >> 4) + h2f(ld16(b + 2));
}
template <> __device__ float dq_elem<ST_TYPE_Q5_0>(const uint8_t *b, int i) {
    const uint8_t q = b[6 + (i & 15)];
    const int hb = (b[2 + i / 8] >> (i % 8)) & 1;
    return h2f(ld16(b)) * (float)(((i < 16 ? q & 15 : q >> 4) | hb << 4) - 16);
}
template <> __device__ float dq_elem<ST_TYPE_Q5_1>(const uint8_t *b, int i) {
    const uint8_t q = b[8 + (i & 15)];
    const int hb = (b[4 + i / 8] >> (i % 8)) & 1;
    return h2f(ld16(b)) * (float)((i < 16 ? q & 15 : q >> 4) | hb << 4) + h2f(ld16(b + 2));
}
template <> __device__ float dq_elem<ST_TYPE_Q8_0>(const uint8_t *b, int i) {
    return h2f(ld16(b)) * (float)(int8_t)b[2 + i];
}
template <> __device__ float dq_elem<ST_TYPE_Q2_K>(const uint8_t *b, int i) {
    const block_q2_K *x = (const block_q2_K *)b;
    const int h = i / 128, s = (i % 128) / 32, l = i % 32, sb = 8 * h + 2 * s + l / 16;
    const int q = (x->qs[32 * h + l] >> (2 * s)) & 3;
    return h2f(ld16((const uint8_t *)&x->d)) * (float)(x->scales[sb] & 15) * (float)q -
           h2f(ld16((const uint8_t *)&x->dmin)) * (float)(x->scales[sb] >> 4);
}
template <> __device__ float dq_elem<ST_TYPE_Q3_K>(const uint8_t *b, int i) {
    const block_q3_K *x = (const block_q3_K *)b;
    const int h = i / 128, s = (i % 128) / 32, l = i % 32, sb = 8 * h + 2 * s + l / 16;
    const int q = (x->qs[32 * h + l] >> (2 * s)) & 3;
    const int hi = (x->hmask[l] >> (4 * h + s)) & 1;
    const int lo4 = sb < 8 ? x->scales[sb] & 15 : x->scales[sb - 8] >> 4;
    const int hi2 = (x->scales[8 + sb % 4] >> (2 * (sb / 4))) & 3;
    return h2f(ld16((const uint8_t *)&x->d)) * (float)((lo4 | hi2 << 4) - 32) * (float)(q - (hi ? 0 : 4));
}
__device__ __forceinline__ void scale_min_k4(const uint8_t *sc, int j, int *s, int *m) {
    if (j < 4) {
        *s = sc[j] & 63;
        *m = sc[j + 4] & 63;
    } else {
        *s = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
        *m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
    }
}
template <> __device__ float dq_elem<ST_TYPE_Q4_K>(const uint8_t *b, int i) {
    const block_q4_K *x = (const block_q4_K *)b;
    const int c = i / 64, hi = (i % 64) / 32, l = i % 32;
    const int q = hi ? x->qs[32 * c + l] >> 4 : x->qs[32 * c + l] & 15;
    int s, m;
    scale_min_k4(x->scales, 2 * c + hi, &s, &m);
    return h2f(ld16((const uint8_t *)&x->d)) * (float)s * (float)q -
           h2f(ld16((const uint8_t *)&x->dmin)) * (float)m;
}
template <> __device__ float dq_elem<ST_TYPE_Q5_K>(const uint8_t *b, int i) {
    const block_q5_K *x = (const block_q5_K *)b;
    const int c = i / 64, hi = (i % 64) / 32, l = i % 32;
    int q = hi ? x->qs[32 * c + l] >> 4 : x->qs[32 * c + l] & 15;
    q |= ((x->qh[l] >> (2 * c + hi)) & 1) << 4;
    int s, m;
    scale_min_k4(x->scales, 2 * c + hi, &s, &m);
    return h2f(ld16((const uint8_t *)&x->d)) * (float)s * (float)q -
           h2f(ld16((const uint8_t *)&x->dmin)) * (float)m;
}
template <> __device__ float dq_elem<ST_TYPE_Q6_K>(const uint8_t *b, int i) {
    const block_q6_K *x = (const block_q6_K *)b;
    const int h = i / 128, qt = (i % 128) / 32, l = i % 32;
    const uint8_t *ql = x->ql + 64 * h, *qh = x->qh + 32 * h;
    const int lo = (qt & 1) ? ql[l + 32] : ql[l];
    const int q = ((qt & 2) ? lo >> 4 : lo & 15) | (((qh[l] >> (2 * qt)) & 3) << 4);
    return h2f(ld16((const uint8_t *)&x->d)) * (float)x->scales[8 * h + 2 * qt + l / 16] * (float)(q - 32);
}

template <int TYPE, int BS, int TS>
__global__ void k_get_rows(float *__restrict__ y, const uint8_t *__restrict__ table, size_t row_bytes,
                           int64_t n_vocab, const int32_t *__restrict__ tokens, int n_embd) {
    const int t = blockIdx.x;
    const int32_t tok = tokens[t];
    float *yr = y + (int64_t)t * n_embd;
    if (tok < 0 || tok >= n_vocab) {
        for (int i = threadIdx.x; i < n_embd; i += blockDim.x) yr[i] = 0.0f;
        return;
    }
    const uint8_t *row = table + (size_t)tok * row_bytes;
    for (int i = threadIdx.x; i < n_embd; i += blockDim.x) yr[i] = dq_elem<TYPE>(row + (size_t)(i / BS) * TS, i % BS);
}

#define GET_ROWS_TYPES(X)                                                                                              \
    X(ST_TYPE_F32, 1, 4)                                                                                               \
    X(ST_TYPE_F16, 1, 2)                                                                                               \
    X(ST_TYPE_BF16, 1, 2)                                                                                              \
    X(ST_TYPE_Q4_0, 32, sizeof(block_q4_0))                                                                            \
    X(ST_TYPE_Q4_1, 32, sizeof(block_q4_1))                                                                            \
    X(ST_TYPE_Q5_0, 32, sizeof(block_q5_0))                                                                            \
    X(ST_TYPE_Q5_1, 32, sizeof(block_q5_1))                                                                            \
    X(ST_TYPE_Q8_0, 32, sizeof(block_q8_0))                                                                            \
    X(ST_TYPE_Q2_K, QK_K, sizeof(block_q2_K))                                                                          \
    X(ST_TYPE_Q3_K, QK_K, sizeof(block_q3_K))                                                                          \
    X(ST_TYPE_Q4_K, QK_K, sizeof(block_q4_K))                                                                          \
    X(ST_TYPE_Q5_K, QK_K, sizeof(block_q5_K))                                                                          \
    X(ST_TYPE_Q6_K, QK_K, sizeof(block_q6_K))

// Any other type qblock.h can unpack: one thread per 32-element item, weight i = a[i/8] * v_i + b[i/8].
__global__ void k_get_rows_items(float *__restrict__ y, const uint8_t *__restrict__ table, int type, size_t row_bytes,
                                 int64_t n_vocab, const int32_t *__restrict__ tokens, int n_embd, int ipb, int tsize) {
    const int t = blockIdx.x;
    const int32_t tok = tokens[t];
    float *yr = y + (int64_t)t * n_embd;
    for (int it = threadIdx.x; it < n_embd / 32; it += blockDim.x) {
        if (tok < 0 || tok >= n_vocab) {
            for (int i = 0; i < 32; i++) yr[it * 32 + i] = 0.0f;
            continue;
        }
        st_qb_w w;
        st_qb_unpack(type, table + (size_t)tok * row_bytes + (size_t)(it / ipb) * tsize, it % ipb, &w);
        for (int i = 0; i < 32; i++) {
            const int8_t v = (int8_t)(w.v[i / 4] >> (8 * (i % 4)));
            yr[it * 32 + i] = w.a[i / 8] * (float)v + w.b[i / 8];
        }
    }
}

extern "C" int st_cuda_get_rows_supported(int type) {
#define X(T, BS, TS) \
    if (type == T) return 1;
    GET_ROWS_TYPES(X)
#undef X
    return st_qb_supported(type) && !ST_QB_IS_FLOAT(type);
}

extern "C" int st_cuda_get_rows(float *y, const void *table, int type, size_t row_bytes, int64_t n_vocab,
                                const int32_t *tokens, int n_tok, int n_embd, cudaStream_t stream) {
    if (n_tok <= 0) return 0;
    if (row_bytes != st_row_size(type, n_embd))
        return st_err("st_cuda_get_rows: row of %d %s elements is %zu bytes, not %zu", n_embd, st_type_name(type),
                      st_row_size(type, n_embd), row_bytes);
    switch (type) {
#define X(T, BS, TS)                                                                                                   \
    case T:                                                                                                            \
        k_get_rows<T, BS, TS><<<n_tok, 256, 0, stream>>>(y, (const uint8_t *)table, row_bytes, n_vocab, tokens,      \
                                                         n_embd);                                                     \
        break;
        GET_ROWS_TYPES(X)
#undef X
    default:
        if (!st_cuda_get_rows_supported(type))
            return st_err("st_cuda_get_rows: token embedding type %s is not supported on CUDA", st_type_name(type));
        k_get_rows_items<<<n_tok, 64, 0, stream>>>(y, (const uint8_t *)table, type, row_bytes, n_vocab, tokens, n_embd,
                                                   ST_QB_IPB(type), ST_QB_TSIZE(type));
    }
    return launch_check("get_rows");
}

// ---- MoE router and weighted sum --------------------------------------------------------------------------------

// The CPU's route (engine/session.c: softmax with a double sum, top n_used by probability with ties to the lower
// id, renormalised in double when norm), one 32-lane group per token: route_group of the fused decode kernels.
__global__ void k_moe_route(int32_t *__restrict__ ids, float *__restrict__ weights, const float *__restrict__ logits,
                            int n_tok, int E, int K, int norm) {
    const int t = (int)((blockIdx.x * blockDim.x + threadIdx.x) / G32);
    if (t >= n_tok) return;  // whole groups leave together
    route_group(logits + (int64_t)t * E, E, K, norm, ids + (int64_t)t * K, weights + (int64_t)t * K);
}

extern "C" int st_cuda_moe_route(int32_t *ids, float *weights, const float *logits, int n_tok, int n_expert,
                                 int n_used, int norm, cudaStream_t stream) {
    if (n_expert <= 0 || n_expert > ROUTER_MAX_PER_LANE * G32 || n_used > G32 || n_used > n_expert || n_used <= 0)
        return st_err("st_cuda_moe_route: unsupported n_expert %d / n_used %d (n_expert <= %d, n_used <= %d)",
                      n_expert, n_used, ROUTER_MAX_PER_LANE * G32, G32);
    if (n_tok <= 0) return 0;
    const int threads = 128, gpb = threads / G32;
    k_moe_route<<<(n_tok + gpb - 1) / gpb, threads, 0, stream>>>(ids, weights, logits, n_tok, n_expert, n_used, norm);
    return launch_check("moe_route");
}

__global__ void k_moe_sum(float *out, const float *add, const float *__restrict__ y, const float *__restrict__ w,
                          int K, int d) {
    const int t = blockIdx.y;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= d) return;
    float acc = add ? add[(int64_t)t * d + j] : 0.0f;
    float s = 0.0f;
    for (int k = 0; k < K; k++) s += w[t * K + k] * y[((int64_t)t * K + k) * d + j];
    out[(int64_t)t * d + j] = acc + s;
}

extern "C" int st_cuda_moe_sum(float *out, const float *add, const float *y, const float *weights, int n_tok,
                               int n_used, int n_embd, cudaStream_t stream) {
    if (n_tok <= 0) return 0;
    dim3 grid((n_embd + 255) / 256, n_tok);
    k_moe_sum<<<grid, 256, 0, stream>>>(out, add, y, weights, n_used, n_embd);
    return launch_check("moe_sum");
}

// ---- argmax and sampling ----------------------------------------------------------------------------------------
//
// Sampler design. The CPU sampler sorts every logit within 30 nats of the best, then cuts the sorted list with
// top-k, top-p and min-p. Every cut keeps a prefix of that order, so only a prefix needs sorting:
//   1. per-block maxima (grid),
//   2. a histogram of d = max - logit over [0, cutoff] in SAMPLE_BINS bins, with counts and exp(-d) masses (grid),
//   3. one block scans the histogram and finds the last bin the final candidate set can reach, from the top-k count,
//      a conservative top-p mass bound and the min-p logit floor (all prefix cuts),
//   4. the logits in bins up to that one are gathered (grid; at most ST_CUDA_SAMPLE_CAP),
//   5. one block sorts them (bitonic, by logit descending then id ascending: the CPU order) and applies exactly the
//      CPU's arithmetic: top-k, softmax at temperature 1, top-p on the running sum, min-p, then the draw at T.
// When more than ST_CUDA_SAMPLE_CAP logits would have to be gathered (a nearly flat distribution with a loose
// top-p/top-k), the gather keeps whole bins up to the cap, the draw is approximate and the debug flag says so.
// The truncated set is then the best prefix of the CPU's list that fits: its temperature-1 probabilities are
// still taken against the mass of the whole (top-k) set (exact without top-k, the histogram's estimate with it),
// so top-p and min-p cut where the CPU would; normalising over the gathered subset instead made top-p cut that
// subset again (e.g. 14405 CPU survivors -> ~8150 gathered -> ~4900 kept), dropping mass the cap did not require.

#define AMAX_BLOCKS 128
#define AMAX_THREADS 256
#define SAMPLE_BINS 2048
#define SAMPLE_SORT_THREADS 1024

typedef struct sample_ws {
    float part_val[AMAX_BLOCKS];   // per-block maxima
    int32_t part_idx[AMAX_BLOCKS];
    float part_mass[AMAX_BLOCKS];  // per-block sum of exp(l - max) over candidates (fixed-order total)
    int32_t hist_cnt[SAMPLE_BINS]; // candidates per bin of d = max - l
    float hist_mass[SAMPLE_BINS];  // their sum of exp(-d)
    float maxl;
    int32_t n_cand;                // candidates within the cutoff
    int32_t last_bin;              // gather bins 0 .. last_bin
    int32_t n_gather;              // atomic slot counter of the gather
    int32_t flags;                 // 1: truncated to the cap
    double z;                      // mass of all candidates (sum of exp(l - max))
    double z_topk;                 // with a top-k cut: histogram estimate of the top-k set's mass (used if truncated)
    unsigned long long draws;      // draw counter (persistent across calls)
    int32_t amax_done;             // greedy: k_amax1's arrival counter (its last block picks; back to 0 after)
    float cand_val[ST_CUDA_SAMPLE_CAP];
    int32_t cand_id[ST_CUDA_SAMPLE_CAP];
} sample_ws;

extern "C" size_t st_cuda_sampler_workspace_bytes(int n_vocab) { return sizeof(sample_ws); }

// One thread: the next one-token step's position and (forced >= 0) input token.
__global__ void k_set_step(int32_t *d_pos, int32_t pos, int32_t *d_token, int32_t forced) {
    *d_pos = pos;
    if (forced >= 0) *d_token = forced;
}

extern "C" int st_cuda_set_step(int32_t *d_pos, int32_t pos, int32_t *d_token, int32_t forced, cudaStream_t stream) {
    k_set_step<<<1, 1, 0, stream>>>(d_pos, pos, d_token, forced);
    return launch_check("set_step");
}

extern "C" int st_cuda_sampler_init(void *workspace, int n_vocab) {
    cudaError_t e = cudaMemset(workspace, 0, sizeof(sample_ws));
    if (e != cudaSuccess) return st_err("cuda: sampler workspace: cudaMemset: %s", cudaGetErrorString(e));
    return 0;
}

__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);  // NaN never wins
}

// Block reduction of (value, index) pairs, ties to the lower index; result valid in thread 0.
__device__ void block_argmax(float &v, int &i) {
    __shared__ float sv[32];
    __shared__ int si[32];
    for (int o = ST_WARP_SIZE / 2; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(ST_WARP_MASK, v, o);
        int oi = __shfl_xor_sync(ST_WARP_MASK, i, o);
        if (better(ov, oi, v, i)) v = ov, i = oi;
    }
    const int lane = threadIdx.x % ST_WARP_SIZE, w = threadIdx.x / ST_WARP_SIZE;
    __syncthreads();
    if (lane == 0) sv[w] = v, si[w] = i;
    __syncthreads();
    if (threadIdx.x == 0)
        for (int k = 1; k < (int)(blockDim.x / ST_WARP_SIZE); k++)
            if (better(sv[k], si[k], v, i)) v = sv[k], i = si[k];
}

// Pass 1: per-block maxima. With `ws_zero`, also clears the histogram and counters for the sampler. With d_token
// (greedy), the last block to arrive reduces the maxima itself (the argmax with ties to the lower index is the same
// in any order) and writes the pick to *d_token, to *h_token (host memory the device can write: the caller's copy
// without a copy operation; NULL: none) and to d_debug ([0] 1, [1] 0, [2] the pick): one launch, not two.
__global__ void k_amax1(const float *__restrict__ x, int n, sample_ws *ws, int zero_hist, int32_t *d_token,
                        int32_t *h_token, int32_t *d_debug) {
    float v = -INFINITY;
    int i = 0x7fffffff;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x)
        if (better(x[j], j, v, i)) v = x[j], i = j;
    block_argmax(v, i);
    if (threadIdx.x == 0) {
        ws->part_val[blockIdx.x] = v;
        ws->part_idx[blockIdx.x] = i;
    }
    if (d_token) {
        __shared__ int last;
        if (!st_block_arrive_last(&ws->amax_done, (int)gridDim.x, last)) return;
        v = -INFINITY, i = 0x7fffffff;
        for (int k = threadIdx.x; k < (int)gridDim.x; k += blockDim.x) {
            const float pv = __ldcg(&ws->part_val[k]);
            const int pi = __ldcg(&ws->part_idx[k]);
            if (better(pv, pi, v, i)) v = pv, i = pi;
        }
        block_argmax(v, i);
        if (threadIdx.x == 0) {
            if (i == 0x7fffffff) i = 0;  // all NaN: the CPU loop would return 0 too
            *d_token = i;
            if (h_token) *(volatile int32_t *)h_token = i;
            if (d_debug) d_debug[0] = 1, d_debug[1] = 0, d_debug[2] = i;
        }
        return;
    }
    if (zero_hist) {
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < SAMPLE_BINS; j += gridDim.x * blockDim.x) {
            ws->hist_cnt[j] = 0;
            ws->hist_mass[j] = 0.0f;
        }
        if (blockIdx.x == 0 && threadIdx.x == 0) ws->n_gather = 0;
    }
}

// Reduces the per-block maxima in a fixed order (every caller gets the same answer).
__device__ void amax_final(const sample_ws *ws, float *v, int *i) {
    float bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int k = 0; k < AMAX_BLOCKS; k++)
        if (better(ws->part_val[k], ws->part_idx[k], bv, bi)) bv = ws->part_val[k], bi = ws->part_idx[k];
    *v = bv;
    *i = bi;
}

extern "C" int st_cuda_argmax(int32_t *d_token, const float *logits, int n_vocab, void *workspace,
                              cudaStream_t stream) {
    if (n_vocab <= 0) return st_err("st_cuda_argmax: empty vocabulary");
    k_amax1<<<AMAX_BLOCKS, AMAX_THREADS, 0, stream>>>(logits, n_vocab, (sample_ws *)workspace, 0, d_token, NULL,
                                                     NULL);
    return launch_check("argmax");
}

__device__ __forceinline__ int bin_of(float d, float inv_w) {
    int b = (int)(d * inv_w);
    return b < SAMPLE_BINS - 1 ? b : SAMPLE_BINS - 1;
}

// Pass 2: histogram of candidates (d = max - l <= cutoff) and per-block masses.
__global__ void k_sample_hist(const float *__restrict__ x, int n, sample_ws *ws, float cutoff) {
    __shared__ int hc[SAMPLE_BINS];
    __shared__ float hm[SAMPLE_BINS];
    __shared__ float s_max;
    for (int j = threadIdx.x; j < SAMPLE_BINS; j += blockDim.x) hc[j] = 0, hm[j] = 0.0f;
    if (threadIdx.x == 0) {
        float v;
        int i;
        amax_final(ws, &v, &i);
        s_max = v;
        if (blockIdx.x == 0) ws->maxl = v;
    }
    __syncthreads();
    const float mx = s_max, inv_w = (float)SAMPLE_BINS / cutoff;
    float mass = 0.0f;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x) {
        const float d = mx - x[j];
        if (d <= cutoff) {  // false for NaN
            const float e = expf(-d);
            const int b = bin_of(d, inv_w);
            atomicAdd(&hc[b], 1);
            atomicAdd(&hm[b], e);
            mass += e;
        }
    }
    mass = block_sum(mass);
    __syncthreads();
    for (int j = threadIdx.x; j < SAMPLE_BINS; j += blockDim.x)
        if (hc[j]) {
            atomicAdd(&ws->hist_cnt[j], hc[j]);
            atomicAdd(&ws->hist_mass[j], hm[j]);
        }
    if (threadIdx.x == 0) ws->part_mass[blockIdx.x] = mass;
}

// Pass 3 (one block of SAMPLE_SORT_THREADS): inclusive scans of the histogram, then the last bin to gather.
__global__ void k_sample_plan(sample_ws *ws, st_cuda_sample_params p) {
    __shared__ int cc[SAMPLE_BINS];
    __shared__ double cm[SAMPLE_BINS];
    __shared__ int s_first[3];
    const int tid = threadIdx.x, nt = blockDim.x;
    for (int j = tid; j < SAMPLE_BINS; j += nt) cc[j] = ws->hist_cnt[j], cm[j] = ws->hist_mass[j];
    if (tid < 3) s_first[tid] = SAMPLE_BINS - 1;
    __syncthreads();
    // Hillis-Steele scans: log2(2048) = 11 steps, cheap for one block.
    for (int o = 1; o < SAMPLE_BINS; o <<= 1) {
        int c[SAMPLE_BINS / SAMPLE_SORT_THREADS];
        double m[SAMPLE_BINS / SAMPLE_SORT_THREADS];
        for (int r = 0; r < SAMPLE_BINS / SAMPLE_SORT_THREADS; r++) {
            const int j = tid + r * nt;
            c[r] = j >= o ? cc[j - o] : 0;
            m[r] = j >= o ? cm[j - o] : 0.0;
        }
        __syncthreads();
        for (int r = 0; r < SAMPLE_BINS / SAMPLE_SORT_THREADS; r++) {
            const int j = tid + r * nt;
            cc[j] += c[r];
            cm[j] += m[r];
        }
        __syncthreads();
    }
    const int n_c = cc[SAMPLE_BINS - 1];
    const bool topk_cut = p.top_k > 0 && p.top_k < n_c;
    const int n1 = topk_cut ? p.top_k : n_c;
    // First bin whose running count reaches n1: holds the last top-k candidate.
    for (int j = tid; j < SAMPLE_BINS; j += nt)
        if (cc[j] >= n1 && (j == 0 || cc[j - 1] < n1)) s_first[0] = j;
    __syncthreads();
    const int b_k = s_first[0];
    double z = 0;
    if (tid == 0)
        for (int k = 0; k < AMAX_BLOCKS; k++) z += ws->part_mass[k];
    // top-p crossing bound: the first bin whose running mass reaches top_p of an upper bound of the top-k mass.
    const double z1_hi = cm[b_k] * (1.0 + 1e-4);
    if (p.top_p < 1.0f)
        for (int j = tid; j < SAMPLE_BINS; j += nt)
            if (cm[j] >= p.top_p * z1_hi && (j == 0 || cm[j - 1] < p.top_p * z1_hi)) s_first[1] = j;
    __syncthreads();
    if (tid == 0) {
        const float cutoff = 30.0f * (p.temperature > 1.0f ? p.temperature : 1.0f);
        int last = b_k;
        // With a top-k cut, top-p needs the exact mass of the whole top-k set: then gather all of it.
        const bool need_topk_set = topk_cut && p.top_p < 1.0f;
        if (!need_topk_set) {
            if (p.top_p < 1.0f && s_first[1] < last) last = s_first[1];
            if (p.min_p > 0.0f) {
                const float dm = -logf(p.min_p);  // keep l - max >= log(min_p), up to rounding: one bin of slack
                const int bm = (int)(dm * ((float)SAMPLE_BINS / cutoff)) + 1;
                if (bm < last) last = bm;
            }
        }
        int flags = 0;
        if (cc[last] > ST_CUDA_SAMPLE_CAP) {
            flags = 1;
            while (last > 0 && cc[last] > ST_CUDA_SAMPLE_CAP) last--;
        }
        // The top-k set's mass from the histogram: the bins before b_k whole, plus b_k's share at its mean mass.
        // Only needed when the gather is truncated (otherwise the final pass sums the exact top-k set).
        double z_topk = z;
        if (topk_cut) {
            const int pc = b_k > 0 ? cc[b_k - 1] : 0;
            const double pm = b_k > 0 ? cm[b_k - 1] : 0.0;
            const int bc = cc[b_k] - pc;  // > 0: cc[b_k] >= n1 > pc
            z_topk = pm + (double)(n1 - pc) * ((cm[b_k] - pm) / (double)(bc > 0 ? bc : 1));
        }
        ws->n_cand = n_c;
        ws->z_topk = z_topk;
        ws->last_bin = last;
        ws->flags = flags;
        ws->z = z;
    }
}

// Pass 4: gather the logits of bins 0 .. last_bin.
__global__ void k_sample_gather(const float *__restrict__ x, int n, sample_ws *ws, float cutoff) {
    const float mx = ws->maxl, inv_w = (float)SAMPLE_BINS / cutoff;
    const int last = ws->last_bin;
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < n; j += gridDim.x * blockDim.x) {
        const float d = mx - x[j];
        if (d <= cutoff && bin_of(d, inv_w) <= last) {
            const int slot = atomicAdd(&ws->n_gather, 1);
            if (slot < ST_CUDA_SAMPLE_CAP) {
                ws->cand_val[slot] = x[j];
                ws->cand_id[slot] = j;
            }
        }
    }
}

__device__ __forceinline__ uint64_t splitmix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Inclusive block scan (double) of one value per thread; returns this thread's running sum.
__device__ double block_scan(double v, double *tmp) {
    const int tid = threadIdx.x;
    tmp[tid] = v;
    __syncthreads();
    for (int o = 1; o < (int)blockDim.x; o <<= 1) {
        double a = tid >= o ? tmp[tid - o] : 0.0;
        __syncthreads();
        tmp[tid] += a;
        __syncthreads();
    }
    double r = tmp[tid];
    __syncthreads();
    return r;
}

// Pass 5 (one block of SAMPLE_SORT_THREADS): sort the gathered candidates and apply the CPU sampler's arithmetic.
__global__ void k_sample_final(int32_t *d_token, int32_t *h_token, sample_ws *ws, st_cuda_sample_params p,
                               int32_t *d_debug) {
    extern __shared__ unsigned char smem[];
    float *sv = (float *)smem;                       // [ST_CUDA_SAMPLE_CAP] logits
    int32_t *si = (int32_t *)(sv + ST_CUDA_SAMPLE_CAP);  // [ST_CUDA_SAMPLE_CAP] ids
    float *sp = (float *)(si + ST_CUDA_SAMPLE_CAP);      // [ST_CUDA_SAMPLE_CAP] probabilities, then weights
    __shared__ double scan_tmp[SAMPLE_SORT_THREADS];
    __shared__ int s_n2, s_n3, s_pick;
    const int tid = threadIdx.x, nt = blockDim.x;
    const int n = ws->n_gather < ST_CUDA_SAMPLE_CAP ? ws->n_gather : ST_CUDA_SAMPLE_CAP;
    int P = 1;
    while (P < n) P <<= 1;
    for (int j = tid; j < P; j += nt) {
        sv[j] = j < n ? ws->cand_val[j] : -INFINITY;
        si[j] = j < n ? ws->cand_id[j] : 0x7fffffff;
    }
    __syncthreads();
    // Bitonic sort into the CPU order: logit descending, then id ascending.
    for (int k = 2; k <= P; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int a = tid; a < P; a += nt) {
                const int b = a ^ j;
                if (b > a) {
                    const bool up = (a & k) == 0;  // this run is ordered "best first"
                    const bool b_first = better(sv[b], si[b], sv[a], si[a]);
                    if (b_first == up) {
                        float tv = sv[a];
                        sv[a] = sv[b];
                        sv[b] = tv;
                        int ti = si[a];
                        si[a] = si[b];
                        si[b] = ti;
                    }
                }
            }
            __syncthreads();
        }
    const float maxl = ws->maxl;
    const int n_c = ws->n_cand;
    const bool topk_cut = p.top_k > 0 && p.top_k < n_c;
    const int n1 = topk_cut ? (p.top_k < n ? p.top_k : n) : n;
    // Each thread owns a contiguous run of candidates so the scans follow the sorted order.
    const int per = (n1 + nt - 1) / nt, lo = tid * per, hi = lo + per < n1 ? lo + per : n1;
    double z1;
    {
        double part = 0;
        for (int i = lo; i < hi; i++) part += (double)expf(sv[i] - maxl);
        z1 = block_sum(part);
        // Without top-k the set is all candidates: the histogram pass summed their mass, also when the gather was
        // truncated (probabilities must be relative to the whole set, or top-p would cut the truncated subset
        // again). With top-k and a truncated gather, only the histogram's estimate of the top-k mass is available.
        if (!topk_cut) z1 = ws->z;
        else if (ws->flags & 1) z1 = ws->z_topk;
    }
    if (tid == 0) s_n2 = n1, s_n3 = n1;
    for (int i = lo; i < hi; i++) sp[i] = (float)((double)expf(sv[i] - maxl) / z1);
    __syncthreads();
    if (p.top_p < 1.0f) {
        double run = 0;
        for (int i = lo; i < hi; i++) run += sp[i];
        double cum = block_scan(run, scan_tmp) - run;
        for (int i = lo; i < hi; i++) {
            cum += sp[i];
            if (cum >= p.top_p) {
                atomicMin(&s_n2, i + 1);
                break;
            }
        }
    }
    __syncthreads();
    const int n2 = s_n2;
    if (p.min_p > 0.0f) {
        const float floor_p = sp[0] * p.min_p;
        for (int i = lo > 1 ? lo : 1; i < hi && i < n2; i++)
            if (sp[i] < floor_p) {
                atomicMin(&s_n3, i);
                break;
            }
    }
    __syncthreads();
    const int nf = s_n3 < n2 ? s_n3 : n2;
    // Temperature, then the draw: first i whose running weight exceeds r = u * total.
    const int hf = hi < nf ? hi : nf;
    double run = 0;
    for (int i = lo; i < hf; i++) run += (sp[i] = expf(__fdiv_rn(sv[i] - maxl, p.temperature)));
    const double total = block_sum(run);
    const uint64_t ctr = ws->draws;
    const uint64_t h = splitmix(splitmix(p.seed ^ 0x5A3D1E) ^ (ctr * 0xD1B54A32D192ED03ull));
    const double r = (double)((float)(h >> 40) * (1.0f / 16777216.0f)) * total;
    if (tid == 0) s_pick = nf - 1;
    double cum = block_scan(run, scan_tmp) - run;
    for (int i = lo; i < hf; i++) {
        cum += sp[i];
        if (cum > r) {
            atomicMin(&s_pick, i);
            break;
        }
    }
    __syncthreads();
    if (tid == 0) {
        *d_token = nf > 0 ? si[s_pick] : 0;  // nf == 0 only when no logit is finite
        if (h_token) *(volatile int32_t *)h_token = *d_token;
        ws->draws = ctr + 1;
        if (d_debug) {
            d_debug[0] = nf;
            d_debug[1] = ws->flags;
        }
    }
    if (d_debug)
        for (int i = tid; i < nf; i += nt) d_debug[2 + i] = si[i];
}

extern "C" int st_cuda_sample(int32_t *d_token, const float *logits, int n_vocab, const st_cuda_sample_params *p,
                              void *workspace, int32_t *d_debug, cudaStream_t stream) {
    return st_cuda_sample_to(d_token, NULL, logits, n_vocab, p, workspace, d_debug, stream);
}

extern "C" int st_cuda_sample_to(int32_t *d_token, int32_t *h_token, const float *logits, int n_vocab,
                                 const st_cuda_sample_params *p, void *workspace, int32_t *d_debug,
                                 cudaStream_t stream) {
    if (n_vocab <= 0) return st_err("st_cuda_sample: empty vocabulary");
    sample_ws *ws = (sample_ws *)workspace;
    if (p->temperature <= 0.0f) {
        k_amax1<<<AMAX_BLOCKS, AMAX_THREADS, 0, stream>>>(logits, n_vocab, ws, 0, d_token, h_token, d_debug);
        return launch_check("sample (greedy)");
    }
    // Set on every call (a host-side attribute of the current device, cheap, not a stream operation), so no
    // process-global "already set" flag ties this to one device.
    const size_t smem = (size_t)ST_CUDA_SAMPLE_CAP * 12;
    cudaError_t e = cudaFuncSetAttribute(k_sample_final, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return st_err("cuda: sample: cudaFuncSetAttribute: %s", cudaGetErrorString(e));
    const float cutoff = 30.0f * (p->temperature > 1.0f ? p->temperature : 1.0f);
    k_amax1<<<AMAX_BLOCKS, AMAX_THREADS, 0, stream>>>(logits, n_vocab, ws, 1, NULL, NULL, NULL);
    k_sample_hist<<<AMAX_BLOCKS, AMAX_THREADS, 0, stream>>>(logits, n_vocab, ws, cutoff);
    k_sample_plan<<<1, SAMPLE_SORT_THREADS, 0, stream>>>(ws, *p);
    k_sample_gather<<<AMAX_BLOCKS, AMAX_THREADS, 0, stream>>>(logits, n_vocab, ws, cutoff);
    k_sample_final<<<1, SAMPLE_SORT_THREADS, smem, stream>>>(d_token, h_token, ws, *p, d_debug);
    return launch_check("sample");
}
