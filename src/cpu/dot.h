// Per-weight-type dot products and activation quantization for the CPU backend.
//
// Every weight type is paired with an activation format (GGML's "vec_dot_type" pairing; facts from ggml-cpu.c):
//   F32, F16, BF16                                   -> F32 activations (weights widened on the fly)
//   Q4_0, Q5_0, Q8_0, IQ4_NL, MXFP4                  -> Q8_0 activations
//   Q4_1, Q5_1 (types with a min)                    -> Q8_1 activations (s = d*sum(q) covers the min term)
//   Q2_K..Q6_K, IQ1_*, IQ2_*, IQ3_*, IQ4_XS          -> Q8_K activations (bsums cover the K-quant mins)
// (GGML uses F16/BF16 activations for F16/BF16 weights; we keep F32, which is exact and just as memory-bound.)
//
// A dot function computes sum_i w[i] * a[i] over n elements of one weight row and one activation row, where both
// rows are in their stored formats. n must be a multiple of the weight type's block size (and of 256 for Q8_K
// pairings, 32 for Q8_0/Q8_1 pairings).
#ifndef STRATA_CPU_DOT_H
#define STRATA_CPU_DOT_H

#include <stddef.h>
#include <stdint.h>

#include "cpu/features.h"

typedef float (*st_vec_dot_fn)(int64_t n, const void *w_row, const void *act_row);

// Activation type for a weight type (ST_TYPE_F32, ST_TYPE_Q8_0, ST_TYPE_Q8_1 or ST_TYPE_Q8_K); -1 if the CPU
// backend has no dot product for it.
int st_cpu_act_type(int weight_type);
// Bytes of one activation row of n elements for this weight type (0 if unsupported or n not a block multiple).
size_t st_cpu_act_row_size(int weight_type, int64_t n);

// The dot product for weight_type on `isa`. Types without a kernel for that ISA fall back to the next lower ISA
// (so every supported type returns a function for every ISA). NULL if the type is unsupported.
st_vec_dot_fn st_cpu_vec_dot(int weight_type, st_cpu_isa isa);
// Whether `weight_type` has a kernel written specifically for `isa` (not a fallback); for reports and tests.
int st_cpu_vec_dot_native(int weight_type, st_cpu_isa isa);

// Quantizes a float row of n elements to act_type (F32 = copy, Q8_0, Q8_1, Q8_K), with the same bytes on every ISA.
// Q8_K follows st_quantize_row (GGML's reference, round half to even; an all-zero block gets d = 0). Q8_0/Q8_1 follow
// llama.cpp's x86 run-time quantizer (inverse scale 127/amax, ties to even), which differs from the reference
// quantizer in a few values per block: these are the activations llama.cpp multiplies with, so matching them keeps
// Strata's outputs bit-compatible with llama.cpp's. Returns 0, or -1 with st_errmsg.
int st_cpu_quantize_act(int act_type, const float *x, void *dst, int64_t n, st_cpu_isa isa);

#endif
