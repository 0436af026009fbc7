// Copy-engine time of a CPU miss's GPU share (docs/STATUS-2026-12-03c.md Next 2: the CPU computes an expert's FFN
// rows [0, r0), the GPU the rest, its weights copied host -> VRAM after the doorbell). Per record: the gate or up
// rows [r0, n_ff), one contiguous run; the down matrix's last column block, `rows` pieces of `piece` bytes at a
// `pitch` stride (cudaMemcpy2DAsync), against the same bytes as one contiguous run; and the round trip of a 64-byte
// copy issued by a host thread (API call to completion, what the doorbell thread would add). Records rotate through
// a pinned buffer larger than the host's caches; one copy at a time on a non-blocking stream, events around each;
// medians. Defaults: the Qwen3-30B-A3B Q4_K_M shape, r0 = 512 (gate/up rows [512, 768) in Q4_K: 256 x 1,152 bytes;
// down in Q6_K: 2,048 rows of 630 bytes, the last 256 columns 210 of them).
//   bench_gpu_copy2d [--gib G] [--record BYTES] [--run BYTES] [--rows N] [--piece BYTES] [--pitch BYTES] [--iters N]

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(x)                                                                                                   \
    do {                                                                                                           \
        cudaError_t e_ = (x);                                                                                      \
        if (e_ != cudaSuccess) {                                                                                   \
            fprintf(stderr, "bench_gpu_copy2d: %s: %s\n", #x, cudaGetErrorString(e_));                            \
            exit(1);                                                                                               \
        }                                                                                                          \
    } while (0)

static int cmp_f(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

typedef enum { RUN, PIECES, PIECES_FLAT, TINY } shape;

// Median microseconds of `iters` copies of one shape, record i of the rotation each time; *host_us (TINY): the
// host clock's median from the API call to the event's completion.
static float measure(shape s, uint8_t *host, size_t n_rec, size_t record, uint8_t *dev, size_t run, size_t rows,
                     size_t piece, size_t pitch, int iters, cudaStream_t st, float *host_us) {
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    float *t = malloc(sizeof(float) * (size_t)iters), *h = malloc(sizeof(float) * (size_t)iters);
    for (int i = 0; i < iters; i++) {
        const uint8_t *src = host + (size_t)((i * 7919ull) % n_rec) * record;  // a stride through the records
        const double h0 = now_us();
        CHECK(cudaEventRecord(a, st));
        if (s == RUN) CHECK(cudaMemcpyAsync(dev, src, run, cudaMemcpyHostToDevice, st));
        else if (s == PIECES)  // the last `piece` bytes of each `pitch`-byte row
            CHECK(cudaMemcpy2DAsync(dev, piece, src + pitch - piece, pitch, piece, rows, cudaMemcpyHostToDevice, st));
        else if (s == PIECES_FLAT) CHECK(cudaMemcpyAsync(dev, src, rows * piece, cudaMemcpyHostToDevice, st));
        else CHECK(cudaMemcpyAsync(dev, src, 64, cudaMemcpyHostToDevice, st));
        CHECK(cudaEventRecord(b, st));
        CHECK(cudaEventSynchronize(b));
        h[i] = (float)(now_us() - h0);
        CHECK(cudaEventElapsedTime(&t[i], a, b));
        t[i] *= 1000.0f;
    }
    qsort(t, (size_t)iters, sizeof *t, cmp_f);
    qsort(h, (size_t)iters, sizeof *h, cmp_f);
    const float med = t[iters / 2];
    if (host_us) *host_us = h[iters / 2];
    free(t);
    free(h);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return med;
}

static int usage(void) {
    fprintf(stderr, "usage: bench_gpu_copy2d [--gib G] [--record BYTES] [--run BYTES] [--rows N] [--piece BYTES] "
                    "[--pitch BYTES] [--iters N]\n  (run <= record, piece <= pitch, rows x pitch <= record, at least "
                    "two records in G GiB)\n");
    return 2;
}

int main(int argc, char **argv) {
    double gib = 2.0;
    size_t record = 3059712, run = 256 * 1152, rows = 2048, piece = 210, pitch = 630;
    int iters = 200;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) return usage();
        if (!strcmp(a, "--gib")) gib = atof(argv[++i]);
        else if (!strcmp(a, "--record")) record = (size_t)atoll(argv[++i]);
        else if (!strcmp(a, "--run")) run = (size_t)atoll(argv[++i]);
        else if (!strcmp(a, "--rows")) rows = (size_t)atoll(argv[++i]);
        else if (!strcmp(a, "--piece")) piece = (size_t)atoll(argv[++i]);
        else if (!strcmp(a, "--pitch")) pitch = (size_t)atoll(argv[++i]);
        else if (!strcmp(a, "--iters")) iters = atoi(argv[++i]);
        else return usage();
    }
    const size_t bytes = (size_t)(gib * (double)(1ull << 30));
    if (gib <= 0 || iters < 1 || piece == 0 || piece > pitch || run > record || rows * pitch > record ||
        bytes < 2 * record)
        return usage();
    uint8_t *host = NULL, *dev = NULL;
    CHECK(cudaHostAlloc((void **)&host, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    memset(host, 1, bytes);  // populated, as the arena is
    const size_t dev_bytes = run > rows * piece ? run : rows * piece;
    CHECK(cudaMalloc((void **)&dev, dev_bytes));
    cudaStream_t st;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    const size_t n_rec = bytes / record;
    measure(RUN, host, n_rec, record, dev, run, rows, piece, pitch, 20, st, NULL);  // warm-up
    const float t_run = measure(RUN, host, n_rec, record, dev, run, rows, piece, pitch, iters, st, NULL);
    const float t_2d = measure(PIECES, host, n_rec, record, dev, run, rows, piece, pitch, iters, st, NULL);
    const float t_flat = measure(PIECES_FLAT, host, n_rec, record, dev, run, rows, piece, pitch, iters, st, NULL);
    float host_us = 0;
    const float t_tiny = measure(TINY, host, n_rec, record, dev, run, rows, piece, pitch, iters, st, &host_us);
    printf("bench_gpu_copy2d: %zu records of %zu bytes in %.1f GiB pinned, %d copies each, medians\n", n_rec, record,
           gib, iters);
    printf("| copy | bytes | us | GB/s |\n| --- | ---: | ---: | ---: |\n");
    printf("| contiguous run (gate or up rows) | %zu | %.1f | %.1f |\n", run, t_run, (double)run / t_run * 1e-3);
    printf("| 2-D: %zu pieces of %zu at a %zu stride (down columns) | %zu | %.1f | %.1f |\n", rows, piece, pitch,
           rows * piece, t_2d, (double)(rows * piece) / t_2d * 1e-3);
    printf("| the same bytes contiguous | %zu | %.1f | %.1f |\n", rows * piece, t_flat,
           (double)(rows * piece) / t_flat * 1e-3);
    printf("| 64 bytes (events) / host round trip (API call to completion) | 64 | %.1f / %.1f | |\n", t_tiny, host_us);
    cudaFree(dev);
    cudaFreeHost(host);
    cudaStreamDestroy(st);
    return 0;
}
