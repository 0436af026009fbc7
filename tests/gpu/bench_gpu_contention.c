// Do the CPU miss workers and the GPU's reads of the host arena over PCIe share one bandwidth? The hybrid decode's
// CPU job is DRAM-bound (~75 GB/s from 15 threads, 2026-12-02c); a miss split by columns between the CPU and a
// zero-copy read (docs/STATUS-2026-12-02d.md, next step 2) pays only if the GPU's reads do not slow the CPU's. Three
// phases on the model's page-locked arena (the engine's registration flags), the CPU's records and the GPU's in
// different layers (no shared cache lines):
//   cpu   decode jobs of `experts` experts each (st_hy_cpu_experts, distinct records: from DRAM), `threads` workers
//   gpu   the prefetch's copy kernel (st_cuda_hy_pf_copy, the engine's 16 blocks) reading records into VRAM
//   both  the copies queued on a stream while the CPU runs jobs until they complete
// and prints each side's rate alone and together, and the sum. --dma: the GPU side as copy-engine copies of the same
// records (cudaMemcpyAsync from the registered arena) instead of the kernel (docs/STATUS-2026-12-03c.md Next 2).
//   usage: bench_gpu_contention MODEL.gguf [threads [experts [records]]] [--dma]   (defaults: CPUs - 1, 2, 1920)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda/hybrid.h"
#include "engine/model.h"
#include "place/arena.h"
#include "place/cpu_experts.h"
#include "util/err.h"
#include "util/log.h"
#include "util/pool.h"

#include "../place/decode_jobs.h"

#define PER_LAUNCH 16  // records per copy launch (the work list's slots)
#define BLOCKS 16      // copy blocks (STRATA_HY_PREFETCH_BLOCKS' default)

static int reg_chunk(void *p, size_t n, void *ud) {
    (void)ud;
    const cudaError_t e = cudaHostRegister(p, n, cudaHostRegisterMapped | cudaHostRegisterPortable);
    return e == cudaSuccess ? 0 : st_err("cudaHostRegister: %s", cudaGetErrorString(e));
}

static void unreg_chunk(void *p, size_t n, void *ud) {
    (void)n, (void)ud;
    cudaHostUnregister(p);
}

#define CK(x)                                                                                                      \
    do {                                                                                                           \
        const cudaError_t e_ = (x);                                                                                \
        if (e_ != cudaSuccess) {                                                                                   \
            fprintf(stderr, "bench_gpu_contention: %s: %s\n", #x, cudaGetErrorString(e_));                         \
            exit(1);                                                                                               \
        }                                                                                                          \
    } while (0)

// One cold decode job (tests/place/decode_jobs.h): its seconds; exits on a failure.
static double cpu_job(decode_jobs *s, double *bytes) {
    const double t = decode_jobs_run(s, 0, bytes);
    if (t < 0) {
        fprintf(stderr, "bench_gpu_contention: %s\n", st_errmsg());
        exit(1);
    }
    return t;
}

// The copies of n_launch work lists (launch i: list i, layer i % Lg) queued on st between events e0 and e1; the
// copy kernel takes its list from pf.work, so each launch gets a pf of its own. Exits on a launch failure.
static void gpu_batch(const st_hy_pf *pf, int32_t *work_d, int n_launch, uint32_t Lg, cudaStream_t st, cudaEvent_t e0,
                      cudaEvent_t e1, const st_arena *dma, const int32_t *work_h) {
    CK(cudaEventRecord(e0, st));
    if (dma) {  // the same records by the copy engine
        for (int i = 0; i < n_launch; i++) {
            const int32_t *w = work_h + (size_t)i * (1 + 2 * PER_LAUNCH);
            const uint32_t l = (uint32_t)i % Lg;
            for (int j = 0; j < w[0]; j++)
                CK(cudaMemcpyAsync(pf->pf_slots + (size_t)w[1 + 2 * j] * (size_t)pf->stride,
                                   dma->rec[(size_t)l * dma->n_expert + (size_t)w[2 + 2 * j]],
                                   dma->layers[l].record_bytes, cudaMemcpyHostToDevice, st));
        }
    } else {
        for (int i = 0; i < n_launch; i++) {
            st_hy_pf p = *pf;
            p.work = work_d + (size_t)i * (1 + 2 * PER_LAUNCH);
            if (st_cuda_hy_pf_copy(&p, i % (int)Lg, BLOCKS, st)) {
                fprintf(stderr, "bench_gpu_contention: %s\n", st_errmsg());
                exit(1);
            }
        }
    }
    CK(cudaEventRecord(e1, st));
}

int main(int argc, char **argv) {
    const int use_dma = argc > 2 && !strcmp(argv[argc - 1], "--dma");
    if (use_dma) argc--;
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        printf("usage: bench_gpu_contention MODEL.gguf [threads [experts [records]]] [--dma]\n");
        return argc < 2 ? 2 : 0;
    }
    const int n_ex = argc > 3 ? atoi(argv[3]) : 2, n_rec = argc > 4 ? atoi(argv[4]) : 1920;
    if (n_ex < 1 || n_ex > 32 || n_rec < PER_LAUNCH) {
        fprintf(stderr, "bench_gpu_contention: 1..32 experts per job, %d+ records\n", PER_LAUNCH);
        return 2;
    }
    CK(cudaSetDevice(0));
    bench_setup bs;
    if (bench_setup_open(&bs, "bench_gpu_contention", argc, argv, 2, n_ex, reg_chunk, unreg_chunk)) return 1;
    const st_hparams *hp = &bs.m->hp;
    const st_arena *a = bs.a;
    st_hy_cpu *c = bs.c;
    if (hp->n_layer < 2 || n_ex > (int)hp->n_expert) {
        fprintf(stderr, "bench_gpu_contention: need 2+ layers and at most %u experts per job\n", hp->n_expert);
        bench_setup_close(&bs);
        return 2;
    }
    st_hy_cpu_set_spin(c, 0.05);  // awake between jobs, as the engine's workers
    const uint32_t L = a->n_layer, E = a->n_expert, Lg = L / 2;  // the GPU reads layers [0, Lg), the CPU the rest

    // The copy kernel's view: records of layers [0, Lg) into PER_LAUNCH slots of the largest record.
    size_t stride = 0;
    for (uint32_t l = 0; l < L; l++)
        if (a->layers[l].record_bytes > stride) stride = a->layers[l].record_bytes;
    stride = (stride + 255) & ~(size_t)255;
    const uint8_t **rec_h = malloc(sizeof(void *) * L * E);
    long long *meta_h = malloc(sizeof(long long) * 4 * L);
    for (uint64_t i = 0; i < (uint64_t)L * E; i++) {
        void *d = NULL;
        CK(cudaHostGetDevicePointer(&d, (void *)a->rec[i], 0));
        rec_h[i] = d;
    }
    for (uint32_t l = 0; l < L; l++) {
        meta_h[4 * l] = (long long)a->layers[l].record_bytes;
        for (int k = 0; k < 3; k++) meta_h[4 * l + 1 + k] = (long long)a->layers[l].x.off[k];
    }
    st_hy_pf pf;
    memset(&pf, 0, sizeof pf);
    CK(cudaMalloc((void **)&pf.table, sizeof(void *) * L * E * 3));
    CK(cudaMalloc((void **)&pf.rec, sizeof(void *) * L * E));
    CK(cudaMalloc((void **)&pf.layer_meta, sizeof(long long) * 4 * L));
    CK(cudaMalloc((void **)&pf.pf_slots, stride * PER_LAUNCH));
    CK(cudaMalloc((void **)&pf.done, sizeof(uint32_t) * PER_LAUNCH));
    CK(cudaMalloc((void **)&pf.stats, sizeof(unsigned long long) * 4));
    CK(cudaMemcpy((void *)pf.rec, rec_h, sizeof(void *) * L * E, cudaMemcpyHostToDevice));
    CK(cudaMemcpy((void *)pf.layer_meta, meta_h, sizeof(long long) * 4 * L, cudaMemcpyHostToDevice));
    CK(cudaMemset(pf.done, 0, sizeof(uint32_t) * PER_LAUNCH));
    CK(cudaMemset(pf.stats, 0, sizeof(unsigned long long) * 4));
    pf.stride = (long long)stride;
    pf.n_sets = 1, pf.per_set = PER_LAUNCH, pf.E = (int)E;
    // One work list per launch (device), written once: launch i copies PER_LAUNCH records of layer i % Lg.
    const int n_launch = n_rec / PER_LAUNCH;
    int32_t *work_d, *work_h = malloc(sizeof(int32_t) * (1 + 2 * PER_LAUNCH) * n_launch);
    CK(cudaMalloc((void **)&work_d, sizeof(int32_t) * (1 + 2 * PER_LAUNCH) * n_launch));
    double gpu_bytes = 0;
    for (int i = 0; i < n_launch; i++) {
        int32_t *w = work_h + (size_t)i * (1 + 2 * PER_LAUNCH);
        const uint32_t l = (uint32_t)i % Lg;
        w[0] = PER_LAUNCH;
        for (int j = 0; j < PER_LAUNCH; j++) w[1 + 2 * j] = j, w[2 + 2 * j] = (int32_t)((i / Lg * PER_LAUNCH + j) % E);
        gpu_bytes += (double)a->layers[l].record_bytes * PER_LAUNCH;
    }
    CK(cudaMemcpy(work_d, work_h, sizeof(int32_t) * (1 + 2 * PER_LAUNCH) * n_launch, cudaMemcpyHostToDevice));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));

    decode_jobs s;
    if (decode_jobs_init(&s, a, c, hp->n_embd, n_ex, Lg, L - Lg)) {
        fprintf(stderr, "bench_gpu_contention: out of memory\n");
        return 1;
    }

    double b = 0, t = 0;
    for (int r = 0; r < 20; r++) cpu_job(&s, &b);  // warm-up (threads, buffers)
    b = 0;
    const int cpu_n = 300;
    for (int r = 0; r < cpu_n; r++) t += cpu_job(&s, &b);
    const double cpu_us = t / cpu_n * 1e6, cpu_gbs = b / t / 1e9;
    printf("cpu alone:  %d threads, jobs of %d experts: %.1f us per job, %.1f GB/s\n", bs.threads, n_ex, cpu_us,
           cpu_gbs);

    gpu_batch(&pf, work_d, n_launch, Lg, st, e0, e1, use_dma ? a : NULL, work_h);  // warm-up
    CK(cudaStreamSynchronize(st));
    gpu_batch(&pf, work_d, n_launch, Lg, st, e0, e1, use_dma ? a : NULL, work_h);
    CK(cudaStreamSynchronize(st));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    const double gpu_gbs = gpu_bytes / (ms * 1e-3) / 1e9;
    char reader[48];
    snprintf(reader, sizeof reader, use_dma ? "copy engine" : "copy kernel (%d blocks)", BLOCKS);
    printf("gpu alone:  %s, %d records: %.1f ms, %.1f GB/s\n", reader, n_launch * PER_LAUNCH, ms, gpu_gbs);

    gpu_batch(&pf, work_d, n_launch, Lg, st, e0, e1, use_dma ? a : NULL, work_h);
    int n_both = 0;
    b = 0, t = 0;
    const double w0 = st_now();
    while (cudaEventQuery(e1) == cudaErrorNotReady) t += cpu_job(&s, &b), n_both++;
    const double wall = st_now() - w0;
    CK(cudaStreamSynchronize(st));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    const double both_gpu = gpu_bytes / (ms * 1e-3) / 1e9, both_cpu = n_both ? b / t / 1e9 : 0;
    const double sum = both_cpu * t / wall + both_gpu;  // (the CPU's bytes over the whole wall)
    printf("together:   cpu %.1f us per job (%d jobs, %.1f GB/s), gpu %.1f GB/s; sum %.1f GB/s against %.1f + %.1f "
           "apart (%.0f%%)\n", n_both ? t / n_both * 1e6 : 0, n_both, both_cpu, both_gpu, sum, cpu_gbs, gpu_gbs,
           100.0 * sum / (cpu_gbs + gpu_gbs));
    decode_jobs_free(&s);
    bench_setup_close(&bs);
    return 0;
}
