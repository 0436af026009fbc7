// Writer throughput benchmark (not a ctest): bench_gguf_write PATH GIB [THREADS] [TENSOR_MIB]
// Writes GIB GiB of Q4_K tensors with a cheap per-tensor fill, reports the time, re-opens the file and checks a
// sample of bytes in every tensor, then deletes it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/log.h"

static uint64_t word(int idx, uint64_t i) { return ((uint64_t)idx << 40) ^ (i * 0x9E3779B97F4A7C15ull); }

static int fill(void *ud, int idx, void *dst, uint64_t nbytes) {
    uint64_t *d = dst;
    for (uint64_t i = 0; i < nbytes / 8; i++) d[i] = word(idx, i);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_gguf_write PATH GIB [THREADS] [TENSOR_MIB]\n");
        return 2;
    }
    const char *path = argv[1];
    double gib = atof(argv[2]);
    int threads = argc > 3 ? atoi(argv[3]) : 0;
    double tensor_mib = argc > 4 ? atof(argv[4]) : 72;
    // Q4_K rows of 4096 elements = 2304 bytes; pick rows so each tensor is about tensor_mib MiB.
    int64_t ne[2] = {4096, (int64_t)(tensor_mib * 1048576 / 2304)};
    uint64_t tbytes = st_row_size(ST_TYPE_Q4_K, ne[0]) * (uint64_t)ne[1];
    int n = (int)(gib * 1073741824.0 / (double)tbytes);
    gguf_writer *w = gguf_writer_new();
    gguf_w_set_str(w, "general.architecture", "llama");
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", i);
        if (gguf_w_add_tensor(w, name, ST_TYPE_Q4_K, 2, ne) < 0) {
            fprintf(stderr, "%s\n", st_errmsg());
            return 1;
        }
    }
    double t0 = st_now();
    if (gguf_w_write(w, path, fill, NULL, threads, "bench write")) {
        fprintf(stderr, "%s\n", st_errmsg());
        return 1;
    }
    double t1 = st_now();
    gguf_writer_free(w);
    gguf_ctx *c = gguf_open(path);
    if (!c) {
        fprintf(stderr, "%s\n", st_errmsg());
        unlink(path);
        return 1;
    }
    int bad = 0;
    for (uint64_t k = 0; k < c->n_tensors; k++) {
        const uint64_t *d = (const uint64_t *)c->tensors[k].data;
        uint64_t words = c->tensors[k].nbytes / 8;
        for (uint64_t i = 0; i < words; i += words / 7 + 1)
            if (d[i] != word((int)k, i)) bad++;
        if (d[words - 1] != word((int)k, words - 1)) bad++;
    }
    double t2 = st_now();
    char sz[32];
    printf("%d tensors, %s in %.2f s (%.2f GiB/s), %d threads; reopen+check %.2f s; %s\n", n,
           st_fmt_bytes(sz, sizeof sz, (double)c->total_bytes), t1 - t0, (double)c->total_bytes / (t1 - t0) / 1073741824.0,
           threads, t2 - t1, bad ? "MISMATCH" : "bytes ok");
    gguf_close(c);
    unlink(path);
    return bad ? 1 : 0;
}
