// QK-norm + RoPE of one head vector by one warp (CUDA C++): the arithmetic of the CPU reference (cpu/ops.c
// st_rope, st_rmsnorm), shared by the Q/K norm + RoPE + KV-store kernel (ops.cu) and the decode attention kernel
// that applies them itself (decode_attn.cu), so both give the same bits.
#ifndef STRATA_CUDA_ROPE_CUH
#define STRATA_CUDA_ROPE_CUH

#include <math.h>
#include <stdint.h>

#include "cuda/common.cuh"  // warp_sum

#define ROPE_MAX_PAIRS 8  // rotated pairs per lane (n_rot / 2 <= 8 x warp size)

// This lane's rotation factors for position pos: pairs i = lane, lane + 32, ... of n_rot / 2. theta_i = pos *
// freq_scale * theta_scale^i by repeated products, then sincos in double, exactly as the CPU reference.
__device__ __forceinline__ void rope_factors(int64_t pos, float freq_scale, float theta_scale, int n_rot, int lane,
                                             float rc[ROPE_MAX_PAIRS], float rs[ROPE_MAX_PAIRS]) {
    const int half = n_rot / 2;
    int m = 0;
    for (int i = lane; i < half && m < ROPE_MAX_PAIRS; i += ST_WARP_SIZE, m++) {
        float theta = (float)pos * freq_scale;
        for (int r = 0; r < i; r++) theta *= theta_scale;
        double sd, cd;
        sincos((double)theta, &sd, &cd);
        rc[m] = (float)cd, rs[m] = (float)sd;
    }
}

// src[hd] (global or shared) -> put(e, value) for every element e of the head: RMS-normalised with gain (when
// gain; the sum of squares in double), the first n_rot dims rotated in pairs (neox: (i, i + n_rot/2), else (2i,
// 2i+1)), the rest copied. Every lane reads its values before any put (so put may write src in place).
template <class PUT>
__device__ __forceinline__ void rope_head(const float *src, const float *gain, float eps, int hd, int n_rot, int neox,
                                          const float rc[ROPE_MAX_PAIRS], const float rs[ROPE_MAX_PAIRS], int lane,
                                          PUT put) {
    const int half = n_rot / 2;
    float scale = 1.0f;
    if (gain) {
        double ss = 0;
        for (int e = lane; e < hd; e += ST_WARP_SIZE) ss += (double)src[e] * src[e];
        ss = warp_sum(ss);
        scale = (float)(1.0 / sqrt(ss / (double)hd + (double)eps));
    }
    auto val = [&](int e) { return gain ? src[e] * scale * gain[e] : src[e]; };
    // Gather this lane's values first (at most ROPE_MAX_PAIRS pairs + tail per lane), then write.
    float a_[ROPE_MAX_PAIRS], b_[ROPE_MAX_PAIRS], c_[ROPE_MAX_PAIRS];
    int n_mine = 0;
    for (int i = lane; i < half && n_mine < ROPE_MAX_PAIRS; i += ST_WARP_SIZE, n_mine++) {
        const int ea = neox ? i : 2 * i, eb = neox ? i + half : 2 * i + 1;
        a_[n_mine] = val(ea);
        b_[n_mine] = val(eb);
    }
    int n_tail = 0;
    for (int e = n_rot + lane; e < hd && n_tail < ROPE_MAX_PAIRS; e += ST_WARP_SIZE, n_tail++) c_[n_tail] = val(e);
    __syncwarp(ST_WARP_MASK);
    int m = 0;
    for (int i = lane; i < half && m < ROPE_MAX_PAIRS; i += ST_WARP_SIZE, m++) {
        const float c = rc[m], s = rs[m];
        const int ea = neox ? i : 2 * i, eb = neox ? i + half : 2 * i + 1;
        const float x0 = a_[m], x1 = b_[m];
        put(ea, x0 * c - x1 * s);
        put(eb, x0 * s + x1 * c);
    }
    m = 0;
    for (int e = n_rot + lane; e < hd && m < ROPE_MAX_PAIRS; e += ST_WARP_SIZE, m++) put(e, c_[m]);
}

#endif
