// CUDA runtime layer (see runtime.h). Plain C against the CUDA runtime API.
#include "cuda/runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

static void fmt_ver(char *buf, size_t n, int v) { snprintf(buf, n, "%d.%d", v / 1000, (v % 1000) / 10); }

static const char *err_hint(cudaError_t e) {
    if (e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction)
        return " (this build has no kernels for this GPU's architecture: rebuild with CMAKE_CUDA_ARCHITECTURES "
               "including it, e.g. -DCMAKE_CUDA_ARCHITECTURES=90 for H100/H200)";
    if (e == cudaErrorMemoryAllocation) return " (device out of memory)";
    if (e == cudaErrorInsufficientDriver)
        return " (the NVIDIA driver is older than this CUDA runtime: update the driver)";
    return "";
}

int st_cuda_check_at(cudaError_t e, const char *call, const char *file, int line) {
    if (e == cudaSuccess) return 0;
    return st_err("%s:%d: %s: %s: %s%s", file, line, call, cudaGetErrorName(e), cudaGetErrorString(e), err_hint(e));
}

int st_cuda_check_launch(const st_cuda_ctx *ctx, const char *kernel) {
    const cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) return 0;
    return st_err("CUDA device %d (%s, sm_%d%d): launching kernel %s: %s: %s%s", ctx->device, ctx->name,
                  ctx->cc_major, ctx->cc_minor, kernel, cudaGetErrorName(e), cudaGetErrorString(e), err_hint(e));
}

int st_cuda_device_count(void) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess) {
        if (n == 0) return st_err("no CUDA device found (cudaGetDeviceCount returned 0)");
        return n;
    }
    cudaGetLastError();  // clear the sticky error
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    char sd[16], sr[16];
    fmt_ver(sd, sizeof sd, drv);
    fmt_ver(sr, sizeof sr, rt);
    if (e == cudaErrorNoDevice) return st_err("no CUDA device found (%s)", cudaGetErrorString(e));
    if (e == cudaErrorInsufficientDriver) {
        if (drv == 0) return st_err("no NVIDIA driver is installed (CUDA runtime %s needs one)", sr);
        return st_err("the NVIDIA driver supports CUDA %s but this build uses CUDA runtime %s: update the NVIDIA "
                      "driver to one supporting CUDA %s or newer",
                      sd, sr, sr);
    }
    return st_err("cannot use CUDA: cudaGetDeviceCount: %s: %s (driver supports CUDA %s, runtime %s)",
                  cudaGetErrorName(e), cudaGetErrorString(e), sd, sr);
}

int st_cuda_set_device(const st_cuda_ctx *ctx) {
    ST_CUDA_CHECK(cudaSetDevice(ctx->device));
    return 0;
}

void st_cuda_destroy(st_cuda_ctx *ctx) {
    if (!ctx) return;
    if (ctx->initialized) cudaSetDevice(ctx->device);
    for (int i = 0; i < ctx->n_streams; i++)
        if (ctx->streams[i]) cudaStreamDestroy(ctx->streams[i]);
    if (ctx->workspace) cudaFree(ctx->workspace);
    memset(ctx, 0, sizeof *ctx);
}

int st_cuda_init(st_cuda_ctx *ctx, int device, int n_streams, size_t workspace_bytes) {
    memset(ctx, 0, sizeof *ctx);
    const int n = st_cuda_device_count();
    if (n < 0) return -1;
    if (device < 0 || device >= n) return st_err("CUDA device %d requested, but only %d device(s) exist", device, n);
    if (n_streams < 1 || n_streams > ST_CUDA_MAX_STREAMS)
        return st_err("st_cuda_init: n_streams must be 1..%d (got %d)", ST_CUDA_MAX_STREAMS, n_streams);
    ctx->device = device;
    cudaDriverGetVersion(&ctx->driver_version);
    cudaRuntimeGetVersion(&ctx->runtime_version);
    ST_CUDA_CHECK(cudaSetDevice(device));
    // STRATA_CUDA_SCHED=spin|yield|block: how a host thread waits for the device (A/B; default the runtime's
    // heuristic, which spins: a spinning waiter takes a core from the hybrid's CPU-miss workers).
    const char *sched = getenv("STRATA_CUDA_SCHED");
    if (sched && *sched) {
        const unsigned fl = !strcmp(sched, "spin")    ? cudaDeviceScheduleSpin
                            : !strcmp(sched, "yield") ? cudaDeviceScheduleYield
                            : !strcmp(sched, "block") ? cudaDeviceScheduleBlockingSync
                                                      : cudaDeviceScheduleAuto;
        if (cudaSetDeviceFlags(fl) != cudaSuccess)
            st_warn("STRATA_CUDA_SCHED=%s: cudaSetDeviceFlags failed: %s", sched,
                    cudaGetErrorString(cudaGetLastError()));
    }
    struct cudaDeviceProp p;
    ST_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
    snprintf(ctx->name, sizeof ctx->name, "%s", p.name);
    ctx->cc_major = p.major;
    ctx->cc_minor = p.minor;
    ctx->sm_count = p.multiProcessorCount;
    ctx->warp_size = p.warpSize;
    ctx->total_mem = p.totalGlobalMem;
    ctx->smem_per_block = p.sharedMemPerBlock;
    ctx->smem_per_block_optin = p.sharedMemPerBlockOptin;
    ctx->l2_bytes = p.l2CacheSize;
    int mem_khz = 0, bus_bits = 0;
    if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device) == cudaSuccess &&
        cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess)
        ctx->peak_bw_gbs = 2.0 * mem_khz * 1e3 * (bus_bits / 8.0) / 1e9;  // DDR: two transfers per clock
    cudaGetLastError();
    ctx->initialized = 1;
    if (ctx->warp_size != ST_WARP_SIZE) {
        st_err("CUDA device %d (%s): warp size %d, but this build assumes %d", device, ctx->name, ctx->warp_size,
               ST_WARP_SIZE);
        st_cuda_destroy(ctx);
        return -1;
    }
    // dp4a (the int8 dot products of every quantized kernel) needs compute capability 6.1.
    if (ctx->cc_major * 10 + ctx->cc_minor < 61) {
        st_err("CUDA device %d (%s) has compute capability %d.%d; Strata needs 6.1 or newer", device, ctx->name,
               ctx->cc_major, ctx->cc_minor);
        st_cuda_destroy(ctx);
        return -1;
    }
    for (int i = 0; i < n_streams; i++) {
        const cudaError_t e = cudaStreamCreateWithFlags(&ctx->streams[i], cudaStreamNonBlocking);
        if (e != cudaSuccess) {
            st_cuda_check_at(e, "cudaStreamCreateWithFlags", __FILE__, __LINE__);
            st_cuda_destroy(ctx);
            return -1;
        }
        ctx->n_streams = i + 1;
    }
    if (workspace_bytes && !st_cuda_workspace(ctx, workspace_bytes)) {
        st_err_prefix("CUDA device %d workspace: ", device);
        st_cuda_destroy(ctx);
        return -1;
    }
    char sd[16], sr[16];
    fmt_ver(sd, sizeof sd, ctx->driver_version);
    fmt_ver(sr, sizeof sr, ctx->runtime_version);
    st_debug("CUDA device %d: %s, sm_%d%d, %d SMs, %.1f GiB, peak %.0f GB/s, driver %s, runtime %s", device,
             ctx->name, ctx->cc_major, ctx->cc_minor, ctx->sm_count, ctx->total_mem / 1073741824.0, ctx->peak_bw_gbs,
             sd, sr);
    return 0;
}

void *st_cuda_alloc(st_cuda_ctx *ctx, size_t bytes, const char *what) {
    if (st_cuda_set_device(ctx)) return NULL;
    void *p = NULL;
    const cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaSuccess) return p;
    cudaGetLastError();
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    cudaGetLastError();
    char b1[32], b2[32], b3[32];
    if (e == cudaErrorMemoryAllocation)
        st_err("CUDA device %d (%s): out of memory allocating %s: needed %s, free %s of %s", ctx->device, ctx->name,
               what ? what : "a buffer", st_fmt_bytes(b1, sizeof b1, (double)bytes), st_fmt_bytes(b2, sizeof b2, (double)fr),
               st_fmt_bytes(b3, sizeof b3, (double)tot));
    else
        st_err("CUDA device %d: cudaMalloc(%s, %zu bytes): %s: %s", ctx->device, what ? what : "buffer", bytes,
               cudaGetErrorName(e), cudaGetErrorString(e));
    return NULL;
}

void st_cuda_free(st_cuda_ctx *ctx, void *p) {
    if (!p) return;
    cudaSetDevice(ctx->device);
    cudaFree(p);
}

int st_cuda_memcpy_h2d(st_cuda_ctx *ctx, void *dst_dev, const void *src_host, size_t bytes, cudaStream_t stream) {
    if (!bytes) return 0;
    if (st_cuda_set_device(ctx)) return -1;
    if (stream)
        ST_CUDA_CHECK(cudaMemcpyAsync(dst_dev, src_host, bytes, cudaMemcpyHostToDevice, stream));
    else
        ST_CUDA_CHECK(cudaMemcpy(dst_dev, src_host, bytes, cudaMemcpyHostToDevice));
    return 0;
}

int st_cuda_memcpy_d2h(st_cuda_ctx *ctx, void *dst_host, const void *src_dev, size_t bytes, cudaStream_t stream) {
    if (!bytes) return 0;
    if (st_cuda_set_device(ctx)) return -1;
    if (stream)
        ST_CUDA_CHECK(cudaMemcpyAsync(dst_host, src_dev, bytes, cudaMemcpyDeviceToHost, stream));
    else
        ST_CUDA_CHECK(cudaMemcpy(dst_host, src_dev, bytes, cudaMemcpyDeviceToHost));
    return 0;
}

int st_cuda_memset(st_cuda_ctx *ctx, void *dst_dev, int byte, size_t bytes, cudaStream_t stream) {
    if (!bytes) return 0;
    if (st_cuda_set_device(ctx)) return -1;
    if (stream)
        ST_CUDA_CHECK(cudaMemsetAsync(dst_dev, byte, bytes, stream));
    else
        ST_CUDA_CHECK(cudaMemset(dst_dev, byte, bytes));
    return 0;
}

int st_cuda_mem_info(st_cuda_ctx *ctx, size_t *free_bytes, size_t *total_bytes) {
    if (st_cuda_set_device(ctx)) return -1;
    size_t f = 0, t = 0;
    ST_CUDA_CHECK(cudaMemGetInfo(&f, &t));
    if (free_bytes) *free_bytes = f;
    if (total_bytes) *total_bytes = t;
    return 0;
}

int st_cuda_sync(st_cuda_ctx *ctx, cudaStream_t stream) {
    if (st_cuda_set_device(ctx)) return -1;
    if (stream)
        ST_CUDA_CHECK(cudaStreamSynchronize(stream));
    else
        ST_CUDA_CHECK(cudaDeviceSynchronize());
    return 0;
}

void *st_cuda_workspace(st_cuda_ctx *ctx, size_t bytes) {
    if (bytes <= ctx->workspace_size && ctx->workspace) return ctx->workspace;
    if (ctx->workspace) {
        // Pending work may still use the old buffer.
        if (st_cuda_sync(ctx, NULL)) return NULL;
        st_cuda_free(ctx, ctx->workspace);
        ctx->workspace = NULL;
        ctx->workspace_size = 0;
    }
    void *p = st_cuda_alloc(ctx, bytes, "workspace");
    if (!p) return NULL;
    ctx->workspace = p;
    ctx->workspace_size = bytes;
    return p;
}
