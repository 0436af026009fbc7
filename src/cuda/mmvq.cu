// Decode matrix-vector products: activation quantization and the host entry points of mmvq.h.
// The kernel itself is in mmvq_impl.cuh, instantiated per type group in mmvq_t_*.cu.
#include "cuda/mmvq_impl.cuh"

#include <stdio.h>

// One warp per 32-element block: amax by shuffles, round to nearest (half away from zero, like the CPU's q8_1),
// quants and the (d, d * sum) pair written in the planar layout (cuda/qblock.h).
__global__ void __launch_bounds__(256) st_k_quantize_q8_1(const float *__restrict__ x, uint8_t *__restrict__ xq,
                                                          int nb, int n_blk_total, long long stride) {
    const int lane = threadIdx.x % ST_WARP_SIZE;
    const int gb = (blockIdx.x * blockDim.x + threadIdx.x) / ST_WARP_SIZE;  // global block index (row-major)
    if (gb >= n_blk_total) return;  // whole warps exit together
    const int t = gb / nb, b = gb % nb;
    uint8_t *row = xq + (size_t)t * (size_t)stride;
#if ST_WARP_SIZE == 32
    const float v = x[(size_t)gb * 32 + lane];
    float amax = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(ST_WARP_FULL_MASK, amax, o));
    const float d = amax / 127.0f;
    const int q = d != 0.0f ? (int)roundf(v / d) : 0;
    int sum = q;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(ST_WARP_FULL_MASK, sum, o);
    row[(size_t)b * 32 + lane] = (uint8_t)(int8_t)q;
    if (lane == 0) ((float2 *)(row + (size_t)nb * 32))[b] = make_float2(d, d * (float)sum);
#else
#error "st_k_quantize_q8_1 assumes 32-lane warps; a wave64 port handles two blocks per wave"
#endif
}

extern "C" int st_cuda_mmvq_supported(int weight_type) { return st_qb_supported(weight_type); }

extern "C" int64_t st_cuda_q8_1_row_bytes(int64_t ne0) { return st_q8_1_row_bytes(ne0); }

extern "C" int st_cuda_quantize_q8_1(st_cuda_ctx *ctx, const float *x_dev, void *xq_dev, int64_t n_tok, int64_t ne0,
                                     cudaStream_t stream) {
    if (ne0 <= 0 || ne0 % 32 || n_tok < 0 || n_tok * (ne0 / 32) > INT32_MAX / ST_WARP_SIZE)
        return st_err("st_cuda_quantize_q8_1: ne0 %lld must be a positive multiple of 32 (n_tok %lld)", (long long)ne0,
                      (long long)n_tok);
    if (((uintptr_t)xq_dev & 15) || ((uintptr_t)x_dev & 3))
        return st_err("st_cuda_quantize_q8_1: xq_dev must be 16-byte aligned and x_dev 4-byte aligned");
    if (n_tok == 0) return 0;
    if (st_cuda_set_device(ctx)) return -1;
    const int nb = (int)(ne0 / 32), total = (int)(n_tok * nb);
    const int threads = 256, per_cta = threads / ST_WARP_SIZE;
    st_k_quantize_q8_1<<<(total + per_cta - 1) / per_cta, threads, 0, stream>>>(x_dev, (uint8_t *)xq_dev, nb, total,
                                                                                 (long long)st_q8_1_row_bytes(ne0));
    return st_cuda_check_launch(ctx, "quantize_q8_1");
}

int st_mmvq_staging = -1;
extern "C" void st_cuda_mmvq_set_staging(int on) { st_mmvq_staging = on < 0 ? -1 : on != 0; }

// Shared argument checks and launch of all three entry points.
static int mmvq_run(st_cuda_ctx *ctx, const char *fn, int type, const void *W, const void *W2, int64_t ne0,
                    int64_t n_out, int64_t n_expert, const void *xq, int64_t n_xrows, int n_tok, const int32_t *ids,
                    const int32_t *xrow, int n_pairs, float *y, bool glu, cudaStream_t stream) {
    const st_type_info *ti = st_type_get(type);
    if (!ti || !st_qb_supported(type))
        return st_err("%s: weight type %s is not supported by the CUDA mmvq kernels", fn, st_type_name(type));
    const int bs = ST_QB_IS_FLOAT(type) ? 32 : ti->block_size;
    if (ne0 <= 0 || ne0 % bs || ne0 / 32 > INT32_MAX / 64)
        return st_err("%s: ne0 %lld must be a positive multiple of %d for %s", fn, (long long)ne0, bs, ti->name);
    if (n_out <= 0 || n_out > INT32_MAX / 8) return st_err("%s: n_out %lld out of range", fn, (long long)n_out);
    if (n_tok < 1 || n_tok > ST_MMVQ_MAX_TOK)
        return st_err("%s: n_tok %d must be 1..%d", fn, n_tok, ST_MMVQ_MAX_TOK);
    if (n_pairs < 0 || n_pairs > 65535) return st_err("%s: n_sel %d must be 0..65535", fn, n_pairs);
    if (ids && (n_expert <= 0 || n_expert > INT32_MAX || n_xrows <= 0 || n_xrows > INT32_MAX))
        return st_err("%s: n_expert %lld and n_xrows %lld must be positive", fn, (long long)n_expert,
                      (long long)n_xrows);
    if (!W || !xq || !y || (glu && !W2) || (ids == NULL && n_pairs != 1))
        return st_err("%s: NULL device pointer", fn);
    if (((uintptr_t)W & 15) || (glu && ((uintptr_t)W2 & 15)) || ((uintptr_t)xq & 15) || ((uintptr_t)y & 3))
        return st_err("%s: weights and activations must be 16-byte aligned, outputs 4-byte aligned", fn);
    if (n_pairs == 0) return 0;
    if (st_cuda_set_device(ctx)) return -1;

    st_mmvq_args a;
    a.W = (const uint8_t *)W;
    a.W2 = (const uint8_t *)(glu ? W2 : W);
    a.row_bytes = (long long)(ST_QB_IS_FLOAT(type) ? ne0 / 32 * ST_QB_TSIZE(type) : (int64_t)st_row_size(type, ne0));
    a.expert_bytes = a.row_bytes * n_out;
    a.nitems = (int)(ne0 / 32);
    a.n_out = (int)n_out;
    a.n_expert = (int)n_expert;
    a.xq = (const uint8_t *)xq;
    a.xq_stride = (long long)st_q8_1_row_bytes(ne0);
    a.n_tok = n_tok;
    a.n_xrows = (int)n_xrows;
    a.ids = ids;
    a.xrow = xrow;
    a.y = y;
    a.ldy = n_out;

    // Warps per row group: split a row across 2 or 4 warps when the matrix alone cannot give each SM about
    // 32 warps (small matrices), as long as every lane keeps at least one item.
    const int rpg = st_mmvq_rows_per_group(type, n_tok, glu);
    const long long groups = (n_out + rpg - 1) / rpg;
    int wpr = 1;
    while (wpr < MMVQ_WARPS && groups * wpr * n_pairs < 32LL * ctx->sm_count && a.nitems >= ST_WARP_SIZE * wpr * 2)
        wpr *= 2;
    a.wpr = wpr;
    const int gpc = MMVQ_WARPS / wpr;
    const dim3 grid((unsigned)((groups + gpc - 1) / gpc), (unsigned)n_pairs);
    if (!(st_mmvq_launch_kquant(type, a, n_tok, glu, grid, stream) || st_mmvq_launch_iq(type, a, n_tok, glu, grid, stream) ||
          st_mmvq_launch_legacy(type, a, n_tok, glu, grid, stream) || st_mmvq_launch_float(type, a, n_tok, glu, grid, stream)))
        return st_err("%s: no kernel instantiated for %s", fn, ti->name);
    char kname[64];
    snprintf(kname, sizeof kname, "mmvq<%s, n_tok %d%s>", ti->name, n_tok, glu ? ", glu" : "");
    return st_cuda_check_launch(ctx, kname);
}

extern "C" int st_cuda_mmvq(st_cuda_ctx *ctx, int weight_type, const void *W_dev, int64_t ne0, int64_t n_out,
                            const void *xq_dev, int n_tok, float *y_dev, cudaStream_t stream) {
    return mmvq_run(ctx, "st_cuda_mmvq", weight_type, W_dev, NULL, ne0, n_out, 1, xq_dev, n_tok, n_tok, NULL, NULL, 1,
                    y_dev, false, stream);
}

extern "C" int st_cuda_mmvq_ids(st_cuda_ctx *ctx, int weight_type, const void *W_dev, int64_t ne0, int64_t n_out,
                                int64_t n_expert, const void *xq_dev, int64_t n_xrows, const int32_t *ids_dev,
                                const int32_t *xrow_dev, int n_sel, float *y_dev, cudaStream_t stream) {
    if (!ids_dev) return st_err("st_cuda_mmvq_ids: ids_dev is NULL");
    return mmvq_run(ctx, "st_cuda_mmvq_ids", weight_type, W_dev, NULL, ne0, n_out, n_expert, xq_dev, n_xrows, 1,
                    ids_dev, xrow_dev, n_sel, y_dev, false, stream);
}

extern "C" int st_cuda_mmvq_ids_glu(st_cuda_ctx *ctx, int weight_type, const void *Wgate_dev, const void *Wup_dev,
                                    int64_t ne0, int64_t n_out, int64_t n_expert, const void *xq_dev, int64_t n_xrows,
                                    const int32_t *ids_dev, const int32_t *xrow_dev, int n_sel, float *y_dev,
                                    cudaStream_t stream) {
    if (!ids_dev) return st_err("st_cuda_mmvq_ids_glu: ids_dev is NULL");
    return mmvq_run(ctx, "st_cuda_mmvq_ids_glu", weight_type, Wgate_dev, Wup_dev, ne0, n_out, n_expert, xq_dev,
                    n_xrows, 1, ids_dev, xrow_dev, n_sel, y_dev, true, stream);
}
