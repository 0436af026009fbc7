// CPU-format activation quantization into the planar q8_1 layout (see quantize_act.h).
#include <cuda_fp16.h>

#include "cuda/qblock.h"
#include "cuda/quantize_act.h"

// One warp per 32-element block (Q8_0 / Q8_1 formats).
__global__ void k_quantize_act32(const float *__restrict__ x, uint8_t *__restrict__ xq, int nb, int n_blk_total,
                                 long long stride, int with_sum) {
    const int lane = threadIdx.x % ST_WARP_SIZE;
    const int gb = (blockIdx.x * blockDim.x + threadIdx.x) / ST_WARP_SIZE;
    if (gb >= n_blk_total) return;
    const int t = gb / nb, b = gb % nb;
    uint8_t *row = xq + (size_t)t * (size_t)stride;
    const float v = x[(size_t)gb * 32 + lane];
    float amax = fabsf(v);
    for (int o = ST_WARP_SIZE / 2; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(ST_WARP_FULL_MASK, amax, o));
    // As llama.cpp's x86 runtime quantizer (the CPU backend follows it): inverse scale 127 / amax, ties to even.
    // IEEE-rounded divisions: under --use_fast_math a plain '/' is approximate and moves quants and scales.
    const float d = __fdiv_rn(amax, 127.0f), id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    const int q = __float2int_rn(v * id);
    int sum = q;
    for (int o = ST_WARP_SIZE / 2; o > 0; o >>= 1) sum += __shfl_xor_sync(ST_WARP_FULL_MASK, sum, o);
    row[(size_t)b * 32 + lane] = (uint8_t)(int8_t)q;
    if (lane == 0) {
        const float d16 = __half2float(__float2half_rn(d));
        const float s = with_sum ? __half2float(__float2half_rn(d * (float)sum)) : d16 * (float)sum;
        ((float2 *)(row + (size_t)nb * 32))[b] = make_float2(d16, s);
    }
}

// One warp per 256-element block (Q8_K format); lane l holds element 32 j + l of sub-block j.
__global__ void k_quantize_act256(const float *__restrict__ x, uint8_t *__restrict__ xq, int nb, int n_kblk_total,
                                  long long stride) {
    const int lane = threadIdx.x % ST_WARP_SIZE;
    const int gk = (blockIdx.x * blockDim.x + threadIdx.x) / ST_WARP_SIZE;
    if (gk >= n_kblk_total) return;
    const int nk = nb / 8, t = gk / nk, kb = gk % nk;
    uint8_t *row = xq + (size_t)t * (size_t)stride;
    const float *xs = x + (size_t)t * (size_t)nb * 32 + (size_t)kb * 256;
    float v[8];
    // The reference scans in index order and keeps the first element of strictly larger magnitude.
    float best_abs = -1.0f, best_val = 0.0f;
    int best_idx = 1 << 30;
    for (int j = 0; j < 8; j++) {
        v[j] = xs[32 * j + lane];
        const float a = fabsf(v[j]);
        if (a > best_abs) {
            best_abs = a;
            best_val = v[j];
            best_idx = 32 * j + lane;
        }
    }
    for (int o = ST_WARP_SIZE / 2; o > 0; o >>= 1) {
        const float oa = __shfl_xor_sync(ST_WARP_FULL_MASK, best_abs, o);
        const float ov = __shfl_xor_sync(ST_WARP_FULL_MASK, best_val, o);
        const int oi = __shfl_xor_sync(ST_WARP_FULL_MASK, best_idx, o);
        if (oa > best_abs || (oa == best_abs && oi < best_idx)) {
            best_abs = oa;
            best_val = ov;
            best_idx = oi;
        }
    }
    float2 *ds = (float2 *)(row + (size_t)nb * 32) + (size_t)kb * 8;
    if (best_abs == 0.0f) {
        for (int j = 0; j < 8; j++) row[(size_t)kb * 256 + 32 * j + lane] = 0;
        if (lane < 8) ds[lane] = make_float2(0.0f, 0.0f);
        return;
    }
    const float iscale = __fdiv_rn(-127.0f, best_val), d = __fdiv_rn(1.0f, iscale);
    int sums[8];
    for (int j = 0; j < 8; j++) {
        int q = __float2int_rn(iscale * v[j]);
        q = q > 127 ? 127 : q;
        row[(size_t)kb * 256 + 32 * j + lane] = (uint8_t)(int8_t)q;
        int s = q;
        for (int o = ST_WARP_SIZE / 2; o > 0; o >>= 1) s += __shfl_xor_sync(ST_WARP_FULL_MASK, s, o);
        sums[j] = s;
    }
    if (lane < 8) {
        int s = 0;
        for (int j = 0; j < 8; j++) s = j == lane ? sums[j] : s;
        ds[lane] = make_float2(d, d * (float)s);
    }
}

extern "C" int st_cuda_act_format(int weight_type) {
    switch (weight_type) {
    case ST_TYPE_F32:
    case ST_TYPE_F16:
    case ST_TYPE_BF16: return -1;
    case ST_TYPE_Q4_0:
    case ST_TYPE_Q5_0:
    case ST_TYPE_Q8_0:
    case ST_TYPE_IQ4_NL:
    case ST_TYPE_MXFP4: return ST_TYPE_Q8_0;
    case ST_TYPE_Q4_1:
    case ST_TYPE_Q5_1: return ST_TYPE_Q8_1;
    default: return ST_TYPE_Q8_K;
    }
}

extern "C" int st_cuda_quantize_act(st_cuda_ctx *ctx, int format, const float *x_dev, void *xq_dev, int64_t n_tok,
                                    int64_t ne0, cudaStream_t stream) {
    const int block = format == ST_TYPE_Q8_K ? 256 : 32;
    if (ne0 <= 0 || ne0 % block || n_tok < 0)
        return st_err("st_cuda_quantize_act: ne0 %lld is not a positive multiple of %d", (long long)ne0, block);
    if (n_tok == 0) return 0;
    if (st_cuda_set_device(ctx)) return -1;
    const int nb = (int)(ne0 / 32), threads = 256, warps = threads / ST_WARP_SIZE;
    const long long stride = (long long)st_q8_1_row_bytes(ne0);
    if (format == ST_TYPE_Q8_K) {
        const int total = (int)(n_tok * (ne0 / 256));
        k_quantize_act256<<<(total + warps - 1) / warps, threads, 0, stream>>>(x_dev, (uint8_t *)xq_dev, nb, total,
                                                                               stride);
    } else if (format == ST_TYPE_Q8_0 || format == ST_TYPE_Q8_1) {
        const int total = (int)(n_tok * nb);
        k_quantize_act32<<<(total + warps - 1) / warps, threads, 0, stream>>>(x_dev, (uint8_t *)xq_dev, nb, total,
                                                                              stride, format == ST_TYPE_Q8_1);
    } else {
        return st_err("st_cuda_quantize_act: format %d is not Q8_0, Q8_1 or Q8_K", format);
    }
    return st_cuda_check_launch(ctx, "quantize_act");
}
