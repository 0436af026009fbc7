// CUDA runtime layer: one context per device (properties, streams, a cuBLAS handle slot, a scratch workspace),
// checked allocation and copies whose errors say what was needed and what is free, and an error-check macro.
// C API; every CUDA call is checked and failures are reported through st_err() (util/err.h).
#ifndef STRATA_CUDA_RUNTIME_H
#define STRATA_CUDA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "util/err.h"  // a C header: included inside extern "C" for CUDA C++ users

// Warp width the kernels are written for (a compile-time parameter so a HIP port can use 64 on gfx9).
#ifndef ST_WARP_SIZE
#define ST_WARP_SIZE 32
#endif
// Mask of all lanes of a warp for *_sync intrinsics.
#define ST_WARP_FULL_MASK 0xffffffffu

#define ST_CUDA_MAX_STREAMS 4

typedef struct st_cuda_ctx {
    int device;                 // CUDA device ordinal
    char name[256];             // "NVIDIA H200"
    int cc_major, cc_minor;     // compute capability
    int sm_count;               // multiprocessors
    int warp_size;              // from the device (checked against ST_WARP_SIZE at init)
    size_t total_mem;           // bytes of device memory
    size_t smem_per_block;      // default shared memory per block, bytes
    size_t smem_per_block_optin;  // with cudaFuncAttributeMaxDynamicSharedMemorySize
    int l2_bytes;               // L2 cache size
    double peak_bw_gbs;         // theoretical DRAM bandwidth, GB/s (0 if the driver does not say)
    int driver_version;         // e.g. 13000 for 13.0
    int runtime_version;
    cudaStream_t streams[ST_CUDA_MAX_STREAMS];  // non-blocking streams; streams[0] is the main compute stream
    int n_streams;
    void *cublas;               // cublasHandle_t, created by the first user of cuBLAS (NULL until then); owner
                                // code destroys it before st_cuda_destroy (runtime.c does not link cuBLAS calls)
    void *workspace;            // device scratch [workspace_size] bytes, grown by st_cuda_workspace
    size_t workspace_size;
    int initialized;
} st_cuda_ctx;

// Number of CUDA devices, or -1 with a message that says why none can be used (no device, no driver, driver older
// than the runtime: both versions and "update the NVIDIA driver").
int st_cuda_device_count(void);

// Initialises ctx for `device`: selects it, reads properties, creates n_streams (1..ST_CUDA_MAX_STREAMS) streams,
// and allocates workspace_bytes of scratch (0 for none). Returns 0 or -1 (st_errmsg).
int st_cuda_init(st_cuda_ctx *ctx, int device, int n_streams, size_t workspace_bytes);
// Frees streams and workspace. Safe on a zeroed or half-initialised ctx.
void st_cuda_destroy(st_cuda_ctx *ctx);
// Makes ctx's device current for this thread (every entry point that launches work calls it).
int st_cuda_set_device(const st_cuda_ctx *ctx);

// Device memory. `what` names the buffer in error messages ("blk.3.ffn_up.weight"); may be NULL.
// Out of memory says how much was needed and how much is free on that device.
void *st_cuda_alloc(st_cuda_ctx *ctx, size_t bytes, const char *what);
void st_cuda_free(st_cuda_ctx *ctx, void *p);
// Copies; stream NULL means a synchronous copy, otherwise asynchronous on that stream (host memory must then
// stay valid until the stream passes the copy; pageable host memory makes the copy synchronous anyway).
int st_cuda_memcpy_h2d(st_cuda_ctx *ctx, void *dst_dev, const void *src_host, size_t bytes, cudaStream_t stream);
int st_cuda_memcpy_d2h(st_cuda_ctx *ctx, void *dst_host, const void *src_dev, size_t bytes, cudaStream_t stream);
int st_cuda_memset(st_cuda_ctx *ctx, void *dst_dev, int byte, size_t bytes, cudaStream_t stream);
int st_cuda_mem_info(st_cuda_ctx *ctx, size_t *free_bytes, size_t *total_bytes);
int st_cuda_sync(st_cuda_ctx *ctx, cudaStream_t stream);  // stream NULL: the whole device
// Ensures the workspace has at least `bytes`; returns it or NULL (contents are not preserved when it grows).
void *st_cuda_workspace(st_cuda_ctx *ctx, size_t bytes);

// Turns a CUDA error into st_err("file:line: call: cudaErrorX: text"), adding a hint for common causes
// (no kernel image for this GPU, out of memory). Returns -1 for an error, 0 for cudaSuccess.
int st_cuda_check_at(cudaError_t e, const char *call, const char *file, int line);
// Checks for a launch error right after a kernel launch (cudaGetLastError), naming the kernel.
int st_cuda_check_launch(const st_cuda_ctx *ctx, const char *kernel);

// `ST_CUDA_CHECK(cudaMemcpy(...));` in a function returning int: returns -1 with a message on failure.
#define ST_CUDA_CHECK(call)                                                              \
    do {                                                                                 \
        cudaError_t st_cuda_e_ = (call);                                                 \
        if (st_cuda_e_ != cudaSuccess) return st_cuda_check_at(st_cuda_e_, #call, __FILE__, __LINE__); \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif
