// Floor cost of a dependent chain of kernels in one CUDA graph, shaped like the decode step (48 layers x 9 kernels,
// grids {1,640,10,264,256,1,64,768,512}): empty kernels, PDL, the last-block counter, an L2 data dependence; and the
// same chain of stages inside one persistent kernel whose stages wait on arrival counters instead of kernel
// boundaries (what a whole-step "megakernel" would pay per dependency).
// Run: build-gpu/bin/bench_gpu_chain [-n REPLAYS]   (needs sm_90 for PDL; prints a markdown table)
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/decode_common.cuh"  // st_pdl_wait / st_pdl_trigger / st_dec_launch: the engine's own PDL launch
extern "C" {
#include "util/err.h"
}
static uint64_t g_seed;  // (gpu_check.h prints it with a fatal error; nothing random here)
#include "tests/gpu/gpu_check.h"  // CK

enum { M_EMPTY, M_PDL, M_LAST, M_DATA };
#define DATA_N 2048  // floats: the 8 KiB buffer of M_DATA
#define WARMUP 20
#define BATCH 10

// One kernel for every variant; the mode is a template argument so each body has only its own code.
template <int MODE>
__global__ void k_chain(int *counter, float *flag, const float *in, float *out) {
    if (MODE == M_EMPTY) return;
    st_pdl_wait();  // the engine waits before touching anything an earlier kernel wrote, then triggers at once
    st_pdl_trigger();
    if (MODE == M_LAST) {  // the engine's "last block finishes the job" pattern (decode.cu router, attention)
        __shared__ int last;
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) {
            last = atomicAdd(counter, 1) == (int)gridDim.x - 1;
            if (last) *counter = 0;  // ready for the next replay
        }
        __syncthreads();
        if (last && threadIdx.x == 0) *flag = 1.0f;
    }
    if (MODE == M_DATA) {  // read what the previous kernel wrote (through L2), block 0 writes the next buffer
        const float v = in[(blockIdx.x * blockDim.x + threadIdx.x) % DATA_N];
        if (v < 0.0f) *flag = v;  // never true; keeps the load
        // 8 loads in flight before the stores: in and out may alias for the compiler, so a plain copy loop would
        // be serialized into one L2 round trip per element (and ld.global.nc via __restrict__ is not what the
        // engine uses for data a previous kernel wrote).
        if (blockIdx.x == 0)
            for (int j0 = threadIdx.x; j0 < DATA_N; j0 += 8 * blockDim.x) {
                float r[8];
#pragma unroll
                for (int u = 0; u < 8; u++) r[u] = j0 + u * blockDim.x < DATA_N ? in[j0 + u * blockDim.x] : 0.0f;
#pragma unroll
                for (int u = 0; u < 8; u++)
                    if (j0 + u * blockDim.x < DATA_N) out[j0 + u * blockDim.x] = r[u] + 1.0f;
            }
    }
}

// Spins one thread for ns nanoseconds: holds the stream while the host queues every timed replay, so the events
// measure the GPU and not the host's enqueue rate.
__global__ void k_gate(long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); while ((long long)(t - t0) < ns);
}

typedef void (*kfn)(int *, float *, const float *, float *);
static kfn kernel_for(int mode) {
    switch (mode) {
    case M_EMPTY: return k_chain<M_EMPTY>;
    case M_PDL: return k_chain<M_PDL>;
    case M_LAST: return k_chain<M_LAST>;
    default: return k_chain<M_DATA>;
    }
}

struct Bufs {
    int *counters;  // one per kernel of the chain
    float *flags;   // one per kernel of the chain
    float *data;    // two DATA_N buffers, alternating between consecutive kernels
};

// Ends the stream capture begun by the caller and returns the graph instantiated and uploaded.
static cudaGraphExec_t end_capture(cudaStream_t s) {
    cudaGraph_t g;
    CK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphUpload(ge, s));
    CK(cudaGraphDestroy(g));
    return ge;
}

// ---- the chain inside one persistent kernel ---------------------------------------------------------------------

#define SPIN_LIMIT (1 << 26)  // polls before a wait gives up (~seconds): a bug shows as a flag, not a hung device

struct StageGrids {
    int g[9];  // items per stage, the kernel grids of the graph variants; stage s has g[s % nk]
    int nk;
};

__device__ __forceinline__ int ld_acquire_gpu(const int *p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Every stage of the chain in one launch of resident CTAs. Stage s's items go round-robin to the CTAs; a CTA with
// items in stage s waits (thread 0 polls, then a block barrier) until every item of stage s - 1 has arrived, does
// M_DATA's work per item (one L2 read each; item 0 copies the 8 KiB buffer + 1), and arrives (barrier, fence,
// one atomic add of its item count: the engine's last-block pattern). A CTA with no item in stage s goes on to the
// next stage without waiting. arrive[] is cleared before each launch (a memset node in the graph). Reads of data
// an earlier stage wrote bypass L1 (ld.cg), as they must without a kernel boundary between writer and reader.
__global__ void __launch_bounds__(256) k_persist(int *arrive, float *flag, float *data, const StageGrids sg,
                                                 int nstage) {
    __shared__ int give_up;
    if (threadIdx.x == 0) give_up = 0;
    for (int s = 0; s < nstage; s++) {
        const int g = sg.g[s % sg.nk];
        if ((int)blockIdx.x >= g) continue;
        if (s > 0) {
            if (threadIdx.x == 0) {
                const int want = sg.g[(s - 1) % sg.nk];
                int n = 0;
                while (ld_acquire_gpu(arrive + s - 1) < want)
                    if (++n == SPIN_LIMIT) {
                        give_up = 1;
                        *flag = -1.0f;
                        break;
                    }
            }
            __syncthreads();
            if (give_up) return;
        }
        const float *in = data + (s & 1) * DATA_N;
        float *out = data + ((s + 1) & 1) * DATA_N;
        int done = 0;
        for (int it = blockIdx.x; it < g; it += gridDim.x, done++) {
            const float v = __ldcg(in + (it * (int)blockDim.x + (int)threadIdx.x) % DATA_N);
            if (v < 0.0f) *flag = v;  // never true; keeps the load
            if (it == 0)
                for (int j0 = threadIdx.x; j0 < DATA_N; j0 += 8 * blockDim.x) {
                    float r[8];
#pragma unroll
                    for (int u = 0; u < 8; u++) r[u] = j0 + u * blockDim.x < DATA_N ? __ldcg(in + j0 + u * blockDim.x) : 0.0f;
#pragma unroll
                    for (int u = 0; u < 8; u++)
                        if (j0 + u * blockDim.x < DATA_N) out[j0 + u * blockDim.x] = r[u] + 1.0f;
                }
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            atomicAdd(arrive + s, done);
        }
    }
}

// The persistent chain as a graph: clear the arrival counters, then one launch of `ctas` CTAs of 256 threads (all
// resident at once: the caller keeps ctas within the occupancy, so no poll waits on a CTA that never starts).
static cudaGraphExec_t build_persist_graph(cudaStream_t s, const int *grids, int nk, int layers, int ctas,
                                           const Bufs *b) {
    StageGrids sg;
    memset(&sg, 0, sizeof sg);
    for (int i = 0; i < nk; i++) sg.g[i] = grids[i];
    sg.nk = nk;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CK(cudaMemsetAsync(b->counters, 0, sizeof(int) * (size_t)(layers * nk), s));
    k_persist<<<ctas, 256, 0, s>>>(b->counters, b->flags, b->data, sg, layers * nk);
    CK(cudaGetLastError());
    return end_capture(s);
}


// Captures layers x nk kernels into one graph. With pdl, launched by the engine's st_dec_launch (cudaLaunchKernelEx
// with programmatic stream serialization, which capture turns into programmatic edges); without, plain <<<>>>.
static cudaGraphExec_t build_graph(cudaStream_t s, const int *grids, int nk, int layers, int mode, int pdl,
                                   const Bufs *b) {
    kfn k = kernel_for(mode);
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < layers * nk; i++) {
        const dim3 grid(grids[i % nk]), block(grids[i % nk] == 64 ? 64 : 256);  // the 64-block kernel: 64 threads
        float *in = b->data + (i & 1) * DATA_N, *out = b->data + ((i + 1) & 1) * DATA_N;
        if (pdl) {
            st_dec_launch(k, grid, block, 0, s, b->counters + i, b->flags + i, (const float *)in, out);
            CK(cudaGetLastError());
        } else {
            k<<<grid, block, 0, s>>>(b->counters + i, b->flags + i, in, out);
            CK(cudaGetLastError());
        }
    }
    return end_capture(s);
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Median microseconds per replay over n replays, events around each group of `batch` replays (all queued behind
// the gate; consecutive groups run back to back, as consecutive decode steps would).
static double time_graph(cudaGraphExec_t ge, cudaStream_t s, int n, int batch) {
    for (int i = 0; i < WARMUP; i++) CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    const int ng = n / batch > 0 ? n / batch : 1;
    cudaEvent_t *ev = (cudaEvent_t *)malloc(sizeof(cudaEvent_t) * 2 * ng);
    double *us = (double *)malloc(sizeof(double) * ng);
    if (!ev || !us) { fprintf(stderr, "out of memory\n"); exit(1); }
    for (int i = 0; i < 2 * ng; i++) CK(cudaEventCreate(&ev[i]));
    k_gate<<<1, 1, 0, s>>>(50 * 1000 * 1000);  // 50 ms; a long run fills the queue and then the host just blocks
    CK(cudaGetLastError());
    for (int i = 0; i < ng; i++) {
        CK(cudaEventRecord(ev[2 * i], s));
        for (int j = 0; j < batch; j++) CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(ev[2 * i + 1], s));
    }
    CK(cudaStreamSynchronize(s));
    float span, ms;
    double sum = 0;
    CK(cudaEventElapsedTime(&span, ev[0], ev[2 * ng - 1]));
    for (int i = 0; i < ng; i++) {
        CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
        us[i] = ms * 1e3 / batch;
        sum += ms;
    }
    // Between one group's stop event and the next's start the GPU front end alone needs ~1.3 us (H200); much more
    // means the host was behind and starts may be late too (no reason with the gate, but say so if it happens).
    const double gap_us = ng > 1 ? (span - sum) * 1e3 / (ng - 1) : 0;
    if (gap_us > 5.0) fprintf(stderr, "warning: %.1f us between timed groups on average (host behind?)\n", gap_us);
    qsort(us, ng, sizeof(double), cmp_d);
    const double med = ng % 2 ? us[ng / 2] : 0.5 * (us[ng / 2 - 1] + us[ng / 2]);
    for (int i = 0; i < 2 * ng; i++) CK(cudaEventDestroy(ev[i]));
    free(ev);
    free(us);
    return med;
}

static void usage(const char *argv0) {
    printf("Usage: %s [-n REPLAYS]\n"
           "Times a 48-layer chain of empty/near-empty kernels (the decode step's grids) captured in one CUDA graph.\n"
           "  -n REPLAYS  timed replays per variant (default 200; %d warm-up replays first)\n"
           "Columns: median us per replay with events around each replay, per kernel, and the median of\n"
           "batches of %d back-to-back replays (cross-check; events around each batch).\n",
           argv0, WARMUP, BATCH);
}

int main(int argc, char **argv) {
    int n = 200;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(argv[0]);
            return 0;
        } else if (!strcmp(argv[i], "-n") && i + 1 < argc) {
            n = atoi(argv[++i]);
            if (n < 1) { fprintf(stderr, "-n needs a positive count\n"); return 1; }
        } else {
            usage(argv[0]);
            return 1;
        }
    }
    int dev, drv, rt;
    cudaDeviceProp p;
    CK(cudaGetDevice(&dev));
    CK(cudaGetDeviceProperties(&p, dev));
    CK(cudaDriverGetVersion(&drv));
    CK(cudaRuntimeGetVersion(&rt));
    printf("%s (sm_%d%d, %d SMs), driver %d, runtime %d; %d replays (median), %d warm-up\n\n", p.name, p.major,
           p.minor, p.multiProcessorCount, drv, rt, n, WARMUP);
    if (p.major < 9) fprintf(stderr, "warning: below sm_90 griddepcontrol is compiled out: PDL rows are plain\n");

    static const int g9[9] = {1, 640, 10, 264, 256, 1, 64, 768, 512};
    static const int g6[6] = {640, 264, 256, 64, 768, 512};
    const int L = 48, maxk = 48 * 9;
    Bufs b;
    CK(cudaMalloc(&b.counters, sizeof(int) * maxk));
    CK(cudaMalloc(&b.flags, sizeof(float) * maxk));
    CK(cudaMalloc(&b.data, sizeof(float) * 2 * DATA_N));
    CK(cudaMemset(b.counters, 0, sizeof(int) * maxk));
    CK(cudaMemset(b.flags, 0, sizeof(float) * maxk));
    CK(cudaMemset(b.data, 0, sizeof(float) * 2 * DATA_N));
    cudaStream_t s;
    CK(cudaDeviceSynchronize());  // the memsets, before a stream that does not wait for the legacy one
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    // The persistent variants' CTAs: one per SM, and as many as fit (every stage's items then have CTAs of their own
    // up to that count).
    int occ = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k_persist, 256, 0));
    const int ctas_max = occ * p.multiProcessorCount;
    struct {
        const char *name;
        const int *grids;
        int nk, layers, mode, pdl;
        int ctas;  // > 0: the persistent kernel with this many CTAs (M_DATA's work per item)
    } v[] = {
        {"1. empty, plain launches", g9, 9, L, M_EMPTY, 0, 0},
        {"2. empty, PDL", g9, 9, L, M_PDL, 1, 0},
        {"3. PDL + last-block counter", g9, 9, L, M_LAST, 1, 0},
        {"4. PDL + 8 KiB dependence via L2", g9, 9, L, M_DATA, 1, 0},
        {"5a. PDL, one layer (9 kernels)", g9, 9, 1, M_PDL, 1, 0},
        {"5b. PDL, 6 kernels per layer", g6, 6, L, M_PDL, 1, 0},
        {"6a. one persistent kernel, stage counters, 1 CTA per SM (as 4)", g9, 9, L, M_DATA, 0,
         p.multiProcessorCount},
        {"6b. one persistent kernel, stage counters, every CTA that fits (as 4)", g9, 9, L, M_DATA, 0, ctas_max},
    };
    const int nv = (int)(sizeof v / sizeof v[0]);
    double per[8];
    printf("(persistent kernel: %d CTAs of 256 threads fit per SM, %d in all)\n\n", occ, ctas_max);
    printf("| variant | kernels (stages) per replay | us per replay | us per kernel (stage) | us per replay (batches "
           "of %d) |\n", BATCH);
    printf("|---|---:|---:|---:|---:|\n");
    for (int i = 0; i < nv; i++) {
        const int nk = v[i].nk * v[i].layers;
        if (v[i].ctas > 0) CK(cudaMemsetAsync(b.flags, 0, sizeof(float) * maxk, s));
        cudaGraphExec_t ge = v[i].ctas > 0 ? build_persist_graph(s, v[i].grids, v[i].nk, v[i].layers, v[i].ctas, &b)
                                           : build_graph(s, v[i].grids, v[i].nk, v[i].layers, v[i].mode, v[i].pdl, &b);
        if (v[i].mode == M_DATA) CK(cudaMemsetAsync(b.data, 0, sizeof(float) * 2 * DATA_N, s));
        per[i] = time_graph(ge, s, n, 1);
        const double batched = time_graph(ge, s, n, BATCH);
        printf("| %s | %d | %.1f | %.3f | %.1f |\n", v[i].name, nk, per[i], per[i] / nk, batched);
        fflush(stdout);
        if (v[i].mode == M_DATA) {  // every kernel added 1 (nk even: the result is back in buffer 0)
            const int ng = n / BATCH > 0 ? n / BATCH : 1;
            const float want = (float)nk * (2 * WARMUP + n + ng * BATCH);
            float got;
            CK(cudaMemcpy(&got, b.data, sizeof got, cudaMemcpyDeviceToHost));
            if (want < 16777216.0f && got != want)  // (float counts exactly below 2^24)
                fprintf(stderr, "warning: data chain gave %.0f, expected %.0f (ordering broken?)\n",
                        (double)got, (double)want);
        }
        if (v[i].ctas > 0) {  // a poll that gave up wrote -1 to its stage's flag
            float fl[48 * 9];
            CK(cudaMemcpy(fl, b.flags, sizeof fl, cudaMemcpyDeviceToHost));
            for (int j = 0; j < maxk; j++)
                if (fl[j] != 0.0f) {
                    fprintf(stderr, "warning: %s: a stage wait gave up after %d polls (not all CTAs resident?)\n",
                            v[i].name, SPIN_LIMIT);
                    break;
                }
        }
        CK(cudaGraphExecDestroy(ge));
    }
    printf("\nRemoving 3 kernels per layer (2 vs 5b): %.1f us per replay, %.3f us per removed kernel\n",
           per[1] - per[5], (per[1] - per[5]) / (L * 3));
    printf("A dependency inside one persistent kernel against a PDL kernel boundary (6a / 6b vs 4): %.3f / %.3f us "
           "per stage saved, %.0f / %.0f us per 432-stage step\n",
           (per[3] - per[6]) / (L * 9), (per[3] - per[7]) / (L * 9), per[3] - per[6], per[3] - per[7]);
    CK(cudaStreamDestroy(s));
    CK(cudaFree(b.counters));
    CK(cudaFree(b.flags));
    CK(cudaFree(b.data));
    return 0;
}
