// st-cpu-bench: times the CPU matmul for one weight type and shape, to compare with llama.cpp.
//   st-cpu-bench TYPE [ne0 [n_out [threads [n_tok...]]]]     defaults: 4096 4096 1, tokens 1 and 512
// Prints, per token count: time per call, weight bandwidth (GB/s of weight bytes streamed per call) and
// GFLOP/s (2 * ne0 * n_out * n_tok per call). STRATA_CPU_ISA picks the kernel family.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/dot.h"
#include "cpu/features.h"
#include "cpu/matmul.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/log.h"
#include "util/pool.h"
#include "util/rng.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s TYPE [ne0 [n_out [threads [n_tok...]]]]\n", argv[0]);
        return 2;
    }
    const int type = st_type_from_name(argv[1]);
    const int64_t ne0 = argc > 2 ? atoll(argv[2]) : 4096, n_out = argc > 3 ? atoll(argv[3]) : 4096;
    const int threads = argc > 4 ? atoi(argv[4]) : 1;
    int64_t toks[16] = {1, 512};
    int n_toks = 2;
    if (argc > 5) {
        n_toks = 0;
        for (int i = 5; i < argc && n_toks < 16; i++) toks[n_toks++] = atoll(argv[i]);
    }
    if (type < 0 || st_cpu_act_type(type) < 0 || st_row_size(type, ne0) == 0) {
        fprintf(stderr, "unsupported type %s or row length %lld\n", argv[1], (long long)ne0);
        return 2;
    }
    const size_t rb = st_row_size(type, ne0), wbytes = rb * (size_t)n_out;
    uint8_t *W = malloc(wbytes);
    st_rng rng;
    st_rng_init(&rng, 1, 0);
    if (type == ST_TYPE_F32 || type == ST_TYPE_F16 || type == ST_TYPE_BF16) {
        for (size_t i = 0; i < wbytes / 2; i++) ((uint16_t *)W)[i] = (uint16_t)(0x3c00 + (st_rng_u32(&rng) & 0x3ff));
    } else if (st_random_blocks(type, W, (int64_t)(wbytes / st_type_get(type)->type_size), 1.0f, &rng) < 0) {
        fprintf(stderr, "%s\n", st_errmsg());
        return 1;
    }
    int64_t max_tok = 1;
    for (int i = 0; i < n_toks; i++) max_tok = toks[i] > max_tok ? toks[i] : max_tok;
    float *X = malloc(sizeof(float) * ne0 * max_tok), *Y = malloc(sizeof(float) * n_out * max_tok);
    for (int64_t i = 0; i < ne0 * max_tok; i++) X[i] = st_rng_normal(&rng);
    st_pool *pool = st_pool_create(threads);
    st_cpu_scratch scratch = {0};
    printf("%s %lldx%lld (%.1f MiB), %d thread(s), isa %s\n", st_type_name(type), (long long)ne0, (long long)n_out,
           wbytes / 1048576.0, threads, st_cpu_isa_name(st_cpu_isa_active()));
    for (int k = 0; k < n_toks; k++) {
        const int64_t nt = toks[k];
        st_cpu_matmul(pool, type, W, ne0, n_out, X, nt, Y, &scratch);  // warm-up
        int reps = 0;
        double t0 = st_now(), t;
        do {
            if (st_cpu_matmul(pool, type, W, ne0, n_out, X, nt, Y, &scratch) < 0) {
                fprintf(stderr, "%s\n", st_errmsg());
                return 1;
            }
            reps++;
            t = st_now() - t0;
        } while (t < 1.0 && reps < 1000);
        const double per = t / reps;
        printf("  n_tok %4lld: %9.3f ms/call  %7.2f GB/s (weights)  %8.2f GFLOP/s\n", (long long)nt, per * 1e3,
               wbytes / per / 1e9, 2.0 * ne0 * n_out * nt / per / 1e9);
    }
    st_cpu_scratch_free(&scratch);
    st_pool_destroy(pool);
    free(W), free(X), free(Y);
    return 0;
}
