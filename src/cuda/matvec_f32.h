// Float matrix-vector products for small float weights that must stay exact (the MoE router: a flipped expert
// choice changes the output, so its logits use float activations, not int8 ones as mmvq does).
#ifndef STRATA_CUDA_MATVEC_F32_H
#define STRATA_CUDA_MATVEC_F32_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

// y[t][r] = dot(W row r, x[t]) for t < n_tok; W [n_out][ne0] rows of F32, F16 or BF16, x [n_tok][ne0] f32,
// y [n_tok][n_out] f32. One warp per (row, token). Returns 0 or -1 (unsupported type, launch error).
int st_cuda_matvec_float(int weight_type, const void *W, int64_t ne0, int64_t n_out, const float *x, int n_tok,
                         float *y, cudaStream_t stream);
// MoE form: W is a [ne0, n_out, n_expert] stack; for pair p: y[p][r] = dot(W[ids[p]] row r, x[xrow ? xrow[p] : p]).
int st_cuda_matvec_float_ids(int weight_type, const void *W, int64_t ne0, int64_t n_out, const float *x,
                             const int32_t *ids, const int32_t *xrow, int n_sel, float *y, cudaStream_t stream);
// 1 for the float weight types these kernels take.
int st_cuda_matvec_float_supported(int weight_type);

#ifdef __cplusplus
}
#endif

#endif
