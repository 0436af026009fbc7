// Warp-per-output float matvec for the router (see matvec_f32.h). Tiny: 2048 x 128 per layer.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda/matvec_f32.h"
#include "cuda/runtime.h"
#include "quant/quant.h"

template <typename T>
__device__ __forceinline__ float load_w(const T *w, int64_t i);
template <>
__device__ __forceinline__ float load_w<float>(const float *w, int64_t i) { return w[i]; }
template <>
__device__ __forceinline__ float load_w<__half>(const __half *w, int64_t i) { return __half2float(w[i]); }
template <>
__device__ __forceinline__ float load_w<__nv_bfloat16>(const __nv_bfloat16 *w, int64_t i) {
    return __bfloat162float(w[i]);
}

// The activation as the CPU backend sees it: F16 weights take activations rounded to half (llama.cpp's vec_dot_type
// for F16), F32 and BF16 weights float activations.
template <typename T>
__device__ __forceinline__ float load_x(const float *x, int64_t i) { return x[i]; }
template <>
__device__ __forceinline__ float load_x<__half>(const float *x, int64_t i) { return __half2float(__float2half_rn(x[i])); }

// ids == NULL: plain matrix, warp w -> (token t, row r). Otherwise pair p uses expert ids[p] and input row
// xrow ? xrow[p] : p.
template <typename T>
__global__ void matvec_float_kernel(const T *__restrict__ W, int64_t ne0, int64_t n_out, const float *__restrict__ x,
                                    int n_tok, const int32_t *__restrict__ ids, const int32_t *__restrict__ xrow,
                                    float *__restrict__ y) {
    const int lane = threadIdx.x % ST_WARP_SIZE;
    const int64_t warp = (int64_t)blockIdx.x * (blockDim.x / ST_WARP_SIZE) + threadIdx.x / ST_WARP_SIZE;
    if (warp >= n_out * n_tok) return;
    const int64_t r = warp % n_out, t = warp / n_out;
    const int64_t e = ids ? ids[t] : 0, xr = ids && xrow ? xrow[t] : t;
    const T *w = W + (e * n_out + r) * ne0;
    const float *xt = x + xr * ne0;
    float sum = 0.0f;
    for (int64_t i = lane; i < ne0; i += ST_WARP_SIZE) sum += load_w<T>(w, i) * load_x<T>(xt, i);
    for (int off = ST_WARP_SIZE / 2; off > 0; off >>= 1) sum += __shfl_xor_sync(ST_WARP_FULL_MASK, sum, off);
    if (lane == 0) y[t * n_out + r] = sum;
}

static int launch(int weight_type, const void *W, int64_t ne0, int64_t n_out, const float *x, int n_tok,
                  const int32_t *ids, const int32_t *xrow, float *y, cudaStream_t stream) {
    const int warps_per_block = 8;
    int64_t n_warps = n_out * n_tok;
    dim3 grid((unsigned)((n_warps + warps_per_block - 1) / warps_per_block)), block(warps_per_block * ST_WARP_SIZE);
    if (weight_type == ST_TYPE_F32)
        matvec_float_kernel<float><<<grid, block, 0, stream>>>((const float *)W, ne0, n_out, x, n_tok, ids, xrow, y);
    else if (weight_type == ST_TYPE_F16)
        matvec_float_kernel<__half><<<grid, block, 0, stream>>>((const __half *)W, ne0, n_out, x, n_tok, ids, xrow, y);
    else if (weight_type == ST_TYPE_BF16)
        matvec_float_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>((const __nv_bfloat16 *)W, ne0, n_out, x, n_tok,
                                                                       ids, xrow, y);
    else
        return st_err("st_cuda_matvec_float: weight type %s is not F32, F16 or BF16", st_type_name(weight_type));
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return st_cuda_check_at(e, "matvec_float_kernel", __FILE__, __LINE__);
    return 0;
}

extern "C" int st_cuda_matvec_float(int weight_type, const void *W, int64_t ne0, int64_t n_out, const float *x,
                                    int n_tok, float *y, cudaStream_t stream) {
    return launch(weight_type, W, ne0, n_out, x, n_tok, NULL, NULL, y, stream);
}

extern "C" int st_cuda_matvec_float_ids(int weight_type, const void *W, int64_t ne0, int64_t n_out, const float *x,
                                        const int32_t *ids, const int32_t *xrow, int n_sel, float *y,
                                        cudaStream_t stream) {
    return launch(weight_type, W, ne0, n_out, x, n_sel, ids, xrow, y, stream);
}

extern "C" int st_cuda_matvec_float_supported(int weight_type) {
    return weight_type == ST_TYPE_F32 || weight_type == ST_TYPE_F16 || weight_type == ST_TYPE_BF16;
}
