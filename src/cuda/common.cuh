// Device helpers shared by the CUDA kernel files: warp width and mask, warp reductions, the launch error check.
// CUDA C++ only.
#ifndef STRATA_CUDA_COMMON_CUH
#define STRATA_CUDA_COMMON_CUH

#include <cuda_runtime_api.h>
#include <math.h>

extern "C" {  // a C header without its own extern "C"
#include "util/err.h"
}

#ifndef ST_WARP_SIZE
#define ST_WARP_SIZE 32  // threads per warp: 32 on NVIDIA; a HIP build for wave64 parts defines 64
#endif
// All lanes of a warp, for the *_sync intrinsics.
#if ST_WARP_SIZE == 32
#define ST_WARP_MASK 0xffffffffu
#else
#define ST_WARP_MASK 0xffffffffffffffffull
#endif

// 0, or -1 with st_err naming `what` when the last kernel launch failed.
static inline int launch_check(const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return st_err("cuda: %s: kernel launch failed: %s", what, cudaGetErrorString(e));
    return 0;
}

// Butterfly reductions over a whole warp: every lane gets the result.
template <typename T> __device__ __forceinline__ T warp_sum(T v) {
    for (int o = ST_WARP_SIZE / 2; o > 0; o >>= 1) v += __shfl_xor_sync(ST_WARP_MASK, v, o);
    return v;
}
template <typename T> __device__ __forceinline__ T warp_max(T v) {
    for (int o = ST_WARP_SIZE / 2; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(ST_WARP_MASK, v, o));
    return v;
}

// Entry i of an expert address table (decode.h): read through L2, because the hybrid lookahead prefetch
// (hybrid.h) rewrites entries from a side stream while decode kernels run.
__device__ __forceinline__ const unsigned char *st_tbl_entry(const void *table, size_t i) {  // table: pointer array
    return (const unsigned char *)__ldcg((const unsigned long long *)table + i);
}

#endif
