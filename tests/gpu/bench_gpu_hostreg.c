// Device memory that page-locking and mapping host memory costs (the hybrid arena: engine/gpu_hybrid.c registers
// its expert arena with cudaHostRegister(mapped | portable) in ranges): for each size, anonymous memory mapped and
// touched, registered in ranges like the arena's, and the drop of cudaMemGetInfo's free bytes read before and after
// (the GPU's page tables for the mapping live in device memory, outside every cudaMalloc the planner counts).
//   bench_gpu_hostreg [--range MiB] [--huge] [GiB ...]   (default: 256 MiB ranges; 1 4 16 32 GiB)
//   --huge: madvise(MADV_HUGEPAGE) before touching (transparent huge pages, where the kernel allows)

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static size_t free_bytes(void) {
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) != cudaSuccess) {
        fprintf(stderr, "bench_gpu_hostreg: cudaMemGetInfo failed\n");
        exit(1);
    }
    return f;
}

// Registers `gib` GiB in ranges of `range` bytes; returns the device bytes it took (free before - free after), or -1.
static double measure(double gib, size_t range, int huge) {
    const size_t n = (size_t)(gib * (double)(1ull << 30));
    uint8_t *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "bench_gpu_hostreg: mmap of %.1f GiB failed\n", gib);
        return -1;
    }
    if (huge) madvise(p, n, MADV_HUGEPAGE);
    for (size_t i = 0; i < n; i += 4096) p[i] = 1;  // populate (the arena is written before it is registered)
    const size_t before = free_bytes();
    size_t done = 0;
    int ok = 1;
    for (; done < n; done += range) {
        const size_t len = n - done < range ? n - done : range;
        if (cudaHostRegister(p + done, len, cudaHostRegisterMapped | cudaHostRegisterPortable) != cudaSuccess) {
            fprintf(stderr, "bench_gpu_hostreg: cudaHostRegister failed at %zu MiB: %s\n", done >> 20,
                    cudaGetErrorString(cudaGetLastError()));
            ok = 0;
            break;
        }
    }
    const size_t after = free_bytes();
    for (size_t off = 0; off < done; off += range) cudaHostUnregister(p + off);
    munmap(p, n);
    return ok ? (double)before - (double)after : -1;
}

int main(int argc, char **argv) {
    size_t range = 256ull << 20;
    int huge = 0, nsz = 0;
    double sizes[16];
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--range") && i + 1 < argc) range = (size_t)atof(argv[++i]) << 20;
        else if (!strcmp(argv[i], "--huge")) huge = 1;
        else if (argv[i][0] != '-' && nsz < 16 && atof(argv[i]) > 0) sizes[nsz++] = atof(argv[i]);
        else {
            fprintf(stderr, "usage: %s [--range MiB] [--huge] [GiB ...]\n", argv[0]);
            return 2;
        }
    }
    if (!nsz) sizes[0] = 1, sizes[1] = 4, sizes[2] = 16, sizes[3] = 32, nsz = 4;
    if (!range) range = 256ull << 20;
    if (cudaFree(0) != cudaSuccess) {
        fprintf(stderr, "bench_gpu_hostreg: no CUDA device\n");
        return 1;
    }
    printf("| registered GiB | range MiB | THP | device MiB taken | MiB per GiB |\n");
    printf("| ---: | ---: | --- | ---: | ---: |\n");
    for (int i = 0; i < nsz; i++) {
        const double d = measure(sizes[i], range, huge);
        if (d < 0) return 1;
        printf("| %.1f | %zu | %s | %.1f | %.2f |\n", sizes[i], range >> 20, huge ? "madvise" : "default",
               d / (1 << 20), d / (1 << 20) / sizes[i]);
    }
    return 0;
}
