// The prefill GEMM engines' type lists, engine choices and scratch sizes, in plain C: cuda/gemm.cu sizes and carves
// its scratch by these, the engine (engine/gpu.c) picks its MoE engine by them, and the VRAM planner (place/plan.c,
// which also runs in a build without CUDA) reserves the same bytes. One definition, so a plan cannot drift from what
// a session allocates (it did: the planner still sized the cuBLAS MoE engine's f16 copy of a layer's experts for
// IQ1_M, 3 GiB on the Qwen3-235B-A22B shape, after the tensor-core engine had taken that type).
#ifndef STRATA_CUDA_GEMM_SIZES_H
#define STRATA_CUDA_GEMM_SIZES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "quant/quant.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ST_GEMM_ALIGN 256  // every scratch part starts on this boundary
#define ST_GEMM_BK 256     // the int8 and tensor-core engines' K tile: ne0 (and n_embd, n_ff) a multiple of it

// Types the int8 engine (mmq) takes: every unpacker whose offsets are per 16 or 32 elements. IQ1_M has offsets per
// 8 elements, which mmq's per-16 epilogue does not carry; the f16 tensor-core engine takes it as well.
#define ST_GEMM_MMQ_TYPES(X)                                                                                        \
    X(ST_TYPE_Q4_0) X(ST_TYPE_Q4_1) X(ST_TYPE_Q5_0) X(ST_TYPE_Q5_1) X(ST_TYPE_Q8_0) X(ST_TYPE_Q2_K)            \
    X(ST_TYPE_Q3_K) X(ST_TYPE_Q4_K) X(ST_TYPE_Q5_K) X(ST_TYPE_Q6_K) X(ST_TYPE_IQ2_XXS) X(ST_TYPE_IQ2_XS)      \
    X(ST_TYPE_IQ2_S) X(ST_TYPE_IQ3_XXS) X(ST_TYPE_IQ3_S) X(ST_TYPE_IQ1_S) X(ST_TYPE_IQ4_NL) X(ST_TYPE_IQ4_XS) \
    X(ST_TYPE_MXFP4)
#define ST_GEMM_TC_TYPES(X) ST_GEMM_MMQ_TYPES(X) X(ST_TYPE_IQ1_M)

typedef enum st_gemm_engine {
    ST_GEMM_AUTO = 0,     // mmq where supported and n_tok is small per weight tile, else cuBLAS
    ST_GEMM_CUBLAS = 1,   // dequantize to f16 + cublasGemmEx
    ST_GEMM_MMQ = 2,      // int8 tensor cores on unpacked tiles (error if the type is not supported)
    ST_GEMM_TC = 3,       // f16 tensor cores on tiles dequantized in shared memory (st_gemm_tc_type types,
                          // ne0 % 256 == 0); X is converted to f16 in the scratch
} st_gemm_engine;

typedef enum st_moe_engine {
    ST_MOE_MMQ = 0,           // int8 grouped kernel, device-side counts (no host sync)
    ST_MOE_CUBLAS_GROUPED = 1,  // dequantize all experts to f16 + cublasGemmGroupedBatchedEx per projection
    ST_MOE_CUBLAS_LOOP = 2,   // dequantize + one cublasGemmEx per active expert
    ST_MOE_TC = 3,            // f16 mma on weights dequantized in shared memory, gate+up+SwiGLU in one kernel,
                              // device-side counts (no host sync); st_gemm_tc_type types, sizes % 256 == 0
} st_moe_engine;

static inline int st_gemm_mmq_type(int t) {
#define ST_GEMM_X_(T) if (t == T) return 1;
    ST_GEMM_MMQ_TYPES(ST_GEMM_X_)
#undef ST_GEMM_X_
    return 0;
}
static inline int st_gemm_tc_type(int t) { return st_gemm_mmq_type(t) || t == ST_TYPE_IQ1_M; }

static inline size_t st_gemm_align(size_t x) { return (x + ST_GEMM_ALIGN - 1) / ST_GEMM_ALIGN * ST_GEMM_ALIGN; }

// The dense engine ST_GEMM_AUTO resolves to: mmq below 256 tokens where the type allows, else cuBLAS.
static inline int st_gemm_pick(int engine, int type, int64_t ne0, int64_t n_tok) {
    if (engine != ST_GEMM_AUTO) return engine;
    return st_gemm_mmq_type(type) && ne0 % ST_GEMM_BK == 0 && n_tok < 256 ? ST_GEMM_MMQ : ST_GEMM_CUBLAS;
}

// Scratch bytes of one dense product (cuBLAS: the weight as f16, the dominant term for an LM head, and X as f16).
static inline size_t st_gemm_scratch_size(int engine, int type, int64_t ne0, int64_t n_out, int64_t n_tok) {
    engine = st_gemm_pick(engine, type, ne0, n_tok);
    if (engine == ST_GEMM_TC) return st_gemm_align((size_t)n_tok * ne0 * 2);
    if (engine == ST_GEMM_MMQ)
        return st_gemm_align((size_t)n_tok * ne0) + st_gemm_align((size_t)n_tok * (ne0 / 32) * 4) +
               st_gemm_align((size_t)n_tok * (ne0 / 16) * 4);
    return (type == ST_TYPE_F16 ? 0 : st_gemm_align((size_t)n_out * ne0 * 2)) + st_gemm_align((size_t)n_tok * ne0 * 2);
}

// The MoE engine a layer of these stack types and sizes runs by default: tensor cores, else int8, else the cuBLAS
// loop (which dequantizes every expert of the layer). Hybrid placement takes no cuBLAS engine (-1 there).
static inline int st_moe_pick(int type_gu, int type_down, int64_t n_embd, int64_t n_ff) {
    const int sizes = n_embd % ST_GEMM_BK == 0 && n_ff % ST_GEMM_BK == 0;
    if (sizes && st_gemm_tc_type(type_gu) && st_gemm_tc_type(type_down)) return ST_MOE_TC;
    if (sizes && st_gemm_mmq_type(type_gu) && st_gemm_mmq_type(type_down)) return ST_MOE_MMQ;
    return ST_MOE_CUBLAS_LOOP;
}

// The MoE scratch, part by part in carving order (bytes before alignment; 0: the engine has no such part).
typedef struct st_moe_scratch_parts {
    size_t counts, offsets, perm, inv, tile_e, tile_r0, tile_n, n_tiles;  // the grouping (int32)
    size_t gu;                  // [pairs][2 n_ff] f32 gate|up outputs (not the tensor-core engine: SwiGLU fused)
    size_t d;                   // [pairs][n_embd] f32 down outputs
    size_t xh, hh;              // [pairs][n_embd], [pairs][n_ff] f16 inputs (tensor cores, cuBLAS)
    size_t xq, xd, xs, hq, hd, hs;  // int8 inputs with per-32 scales and per-16 sums (mmq)
    size_t wh, ptrs;            // cuBLAS: every expert dequantized [e][2 n_ff][n_embd] f16; its pointer arrays
} st_moe_scratch_parts;

static inline st_moe_scratch_parts st_moe_scratch_parts_of(int engine, int64_t n_embd, int64_t n_ff, int n_expert,
                                                           int n_tok, int n_used) {
    st_moe_scratch_parts p;
    memset(&p, 0, sizeof p);
    const size_t np = (size_t)n_tok * n_used;
    const size_t max_tiles = np / 32 + n_expert + 1;  // bn >= 32 for every engine
    p.counts = (size_t)n_expert * 4;
    p.offsets = ((size_t)n_expert + 1) * 4;
    p.perm = p.inv = np * 4;
    p.tile_e = p.tile_r0 = p.tile_n = max_tiles * 4;
    p.n_tiles = 4;
    if (engine != ST_MOE_TC) p.gu = np * 2 * n_ff * 4;
    p.d = np * n_embd * 4;
    if (engine == ST_MOE_MMQ) {
        p.xq = np * n_embd, p.xd = np * (n_embd / 32) * 4, p.xs = np * (n_embd / 16) * 4;
        p.hq = np * n_ff, p.hd = np * (n_ff / 32) * 4, p.hs = np * (n_ff / 16) * 4;
    } else {
        p.xh = np * n_embd * 2, p.hh = np * n_ff * 2;
        if (engine != ST_MOE_TC)
            p.wh = (size_t)n_expert * 2 * n_ff * n_embd * 2, p.ptrs = (size_t)6 * n_expert * sizeof(void *);
    }
    return p;
}

static inline size_t st_moe_scratch_size(int engine, int64_t n_embd, int64_t n_ff, int n_expert, int n_tok,
                                         int n_used) {
    const st_moe_scratch_parts p = st_moe_scratch_parts_of(engine, n_embd, n_ff, n_expert, n_tok, n_used);
    const size_t *f = &p.counts;
    size_t t = 0;
    for (size_t i = 0; i < sizeof p / sizeof(size_t); i++) t += st_gemm_align(f[i]);
    return t;
}

#ifdef __cplusplus
}
#endif

#endif
