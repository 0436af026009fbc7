// Activation quantization that reproduces the CPU backend's formats (cpu/dot.h pairing), written in the planar
// q8_1 row layout the matrix-vector kernels read (cuda/qblock.h). With the same int8 activations on both sides the
// GPU's integer dot products equal the CPU's exactly, so GPU and CPU outputs differ only by float summation order.
//   Q8_0 pairing (Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4): per 32: d = amax / 127 rounded to f16, q = x * (127 / amax)
//     rounded to nearest, ties to even (llama.cpp's x86 runtime quantizer, which the CPU backend follows)
//   Q8_1 pairing (Q4_1, Q5_1): as Q8_0, and s = f16(d * sum(q)) (d unrounded), as GGML's reference
//   Q8_K pairing (K- and I-quants): per 256: iscale = -127 / (signed value of largest magnitude), q = round-half-even
//     (iscale * x) clamped to 127, d = 1 / iscale shared by the eight 32-blocks, s = d * sum(q) per 32-block
// Float weights (F32/F16/BF16) take float activations (cuda/matvec_f32.h) and never come here.
#ifndef STRATA_CUDA_QUANTIZE_ACT_H
#define STRATA_CUDA_QUANTIZE_ACT_H

#include <stdint.h>

#include "cuda/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

// The CPU activation format of weight_type: ST_TYPE_Q8_0, ST_TYPE_Q8_1, ST_TYPE_Q8_K, or -1 for float weights.
int st_cuda_act_format(int weight_type);
// Quantizes x_dev [n_tok][ne0] into n_tok planar q8_1 rows (stride st_cuda_q8_1_row_bytes(ne0)) in `format`
// (st_cuda_act_format). ne0 % 32 == 0 (% 256 for Q8_K).
int st_cuda_quantize_act(st_cuda_ctx *ctx, int format, const float *x_dev, void *xq_dev, int64_t n_tok, int64_t ne0,
                         cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
