// Private to the decode kernels' two translation units (decode.cu: norms, Q/K/V, router, the MoE's down projection;
// decode_glu.cu: its gate/up GLU): the includes, block shapes, A/B build switches and the per-type kernel pick they
// share. Two files so that the GLU's many instances (~44 s of nvcc) compile beside the rest (~25 s): one file was
// the longest step of a GPU build. Every kernel's PTX is the same as from one file (scripts/ptx_same.py: entry by
// entry, up to the names of labels, registers and local depots); the down kernels stay with Q/K/V, whose shared
// non-inlined row dot would otherwise compile with global instead of generic loads.
#ifndef STRATA_CUDA_DECODE_IMPL_CUH
#define STRATA_CUDA_DECODE_IMPL_CUH

#include "cuda/decode.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/decode_common.cuh"  // groups, CPU-format quantizers, PDL
#include "cuda/qblock.h"           // planar q8_1 layout, st_qb_unpack / st_qb_dot_w
#include "cuda/decode_rows.cuh"     // row dots, router loads, route_group
#include "cuda/act_math.h"  // the CPU's SwiGLU arithmetic
#include "cuda/hybrid_bell.cuh"   // the hybrid split's classify and join (st_cuda_router_topk_split, moe_down_join)
#include "cuda/hybrid_count.cuh"  // the hybrid routing count (st_cuda_router_topk_count)

#define DEC_GROUPS 8                           // groups per block
#define DEC_THREADS (DEC_GROUPS * G32)
#define NORM_MAX_N 12288                       // rmsnorm_act stages the row in shared memory (48 KiB)
#define DOWN_R 4                               // output rows per block of the down projection
#define DOWN_MAX_USED 32
// ST_DOWN_ROWS4 (default 1; -DST_DOWN_ROWS4=0 for an A/B build): the down kernel's groups run their DOWN_N
// (expert, row) tasks with the loads in flight together (row_dotN inlined per weight type) instead of one row dot
// after the other: 365.8 vs 363.1 tok/s (2026-11-30). Staging the expert table in shared memory before the PDL wait
// measured 355 (dropped).
#ifndef ST_DOWN_ROWS4
#define ST_DOWN_ROWS4 1
#endif
// DOWN_GUESS (default 1; -DDOWN_GUESS=0 for an A/B build): the down kernel reads each rank's expert id and down-matrix
// base before its dependency wait and, after it, takes the base from that guess when the id read again matches:
// the row addresses wait for one L2 round trip (ids) instead of two (ids, then the table). Written 2026-12-01h.
#ifndef DOWN_GUESS
#define DOWN_GUESS 1
#endif
#ifndef DOWN_GUESS_COUNT
#define DOWN_GUESS_COUNT 0  // a diagnostic build (decode.cu down_guess_count)
#endif
// DEC_MINB_MULTI0: minimum resident blocks per SM of the mixed-type Q/K/V instance (k_mmvq_multi<0>): its 56
// registers allow 4 per SM, so the Qwen3-30B-A3B shape's 640 blocks take 1.21 waves (Nsight Compute 2026-11-30);
// 5 fits them in one at 48 registers with a few spills: tg128 393.7 vs 389.8 (bench/ab.sh, 2026-11-30). A/B build:
// -DDEC_MINB_MULTI0=0 (the compiler's choice).
#ifndef DEC_MINB_MULTI0
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 750
#define DEC_MINB_MULTI0 4  // Turing holds 1,024 threads per SM: 5 blocks of 256 would be out of range
#else
#define DEC_MINB_MULTI0 5
#endif
#endif
// DEC_MINB_DOWN: minimum resident blocks per SM of the MoE down kernel (0: the compiler's choice). With its row dots
// branch-free (decode_rows.cuh rows_or_first) the Q6_K instance would take 127 registers (2 blocks per SM, the
// Qwen3-30B-A3B shape's 512 blocks in ~2 waves); 4 keeps the 64 registers and one wave it had. Unmeasured
// (2026-11-30h, written without a GPU): A/B with -DDEC_MINB_DOWN=0.
#ifndef DEC_MINB_DOWN
#define DEC_MINB_DOWN 4
#endif
#ifndef ROUTER_GROUPS
#define ROUTER_GROUPS 2                        // groups (logits) per router block (-D for an A/B build)
#endif

// ---- weight-type instances ----------------------------------------------------------------------------------
//
// The matrix-vector kernels are templates on the weight type: instance T inlines that type's row dots (no per-row
// type switch, no out-of-line call with its row pointers in local memory, and only that type's code on a path that
// runs once per launch, whose instructions come cold from L2). Instance 0 keeps the runtime switch: it takes mixed
// types (Q/K/V of different types in one launch) and STRATA_DEC_SWITCH=1 forces it everywhere (A/B).
static inline int dec_switch_forced(void) {
    static int v = -1;
    if (v < 0) v = getenv("STRATA_DEC_SWITCH") != NULL;
    return v;
}
// fn = KERNEL<t>, or KERNEL<0> for other types / when forced.
#define DEC_PICK(fn, KERNEL, t)                                                                                    \
    do {                                                                                                           \
        fn = KERNEL<0>;                                                                                            \
        if (!dec_switch_forced()) switch (t) {                                                                     \
            DEC_TYPES(DEC_PICK_CASE_##KERNEL)                                                                      \
            default: break;                                                                                        \
            }                                                                                                      \
    } while (0)

#define DEC_PICK_CASE_k_mmvq_multi(T) \
    case T: fn = k_mmvq_multi<T>; break;
#define DEC_PICK_CASE_k_mmvq_multi_add(T) \
    case T: fn = k_mmvq_multi_add<T>; break;
#define DEC_PICK_CASE_k_moe_glu(T) \
    case T: fn = k_moe_glu<T, 1>; break;
#define DEC_PICK_CASE_k_moe_down(T) \
    case T: fn = k_moe_down<T>; break;
#define DEC_PICK_CASE_k_moe_down_join(T) \
    case T: fn = k_moe_down_join<T>; break;


#endif
