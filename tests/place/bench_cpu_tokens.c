// The hybrid prefill CPU share's throughput (place/cpu_experts.h st_hy_cpu_tokens): builds a MoE model's host arena
// and times the CPU computing `experts` experts of a layer for `tokens` tokens each (distinct layers per repeat, so
// the weights come from DRAM), with `threads` threads; prints microseconds per expert and GFLOP/s (3 products of
// 2 * n_embd * n_ff per token and expert). What gpu_hybrid.c measures at load to size the share, repeatable.
//   usage: bench_cpu_tokens MODEL.gguf [threads [tokens [experts [reps]]]]   (defaults: all CPUs - 1, 32, 8, 5)
// With tokens = 1: the hybrid decode's single-token layer jobs instead (st_hy_cpu_experts, `experts` experts per
// call, default 2 here; `reps` calls, default 200, per way), two ways: cold (distinct records each call, from
// DRAM) and hot (the same records every call); prints microseconds per call, GB/s of weights and the workers'
// profile (place/cpu_experts.h st_hy_cpu_set_profile) of each way. (H200 host, 2026-12-02d: 2 experts cold 109.8,
// hot 83.4 us; the records read by the workers just before the call, warm, 102.7: docs/experiments/
// 2026-12-02d-cpu-warm-tbl-l2.patch.)
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model.h"
#include "place/arena.h"
#include "place/cpu_experts.h"
#include "util/err.h"
#include "util/log.h"
#include "util/pool.h"

#include "decode_jobs.h"

// The single-token layer jobs of the usage above: cold and hot.
static int decode_ways(const st_arena *a, st_hy_cpu *c, const st_hparams *hp, int n_ex, int calls) {
    decode_jobs d;
    memset(&d, 0, sizeof d);
    if (n_ex > (int)hp->n_expert_used || calls < 1 || decode_jobs_init(&d, a, c, hp->n_embd, n_ex, 0, a->n_layer)) {
        fprintf(stderr, "bench_cpu_tokens: 1 to %u experts per decode job, at least one call (or out of memory)\n",
                hp->n_expert_used);
        decode_jobs_free(&d);
        return 2;
    }
    const char *way[2] = {"cold", "hot"};
    for (int w = 0; w < 2; w++) {
        if (st_hy_cpu_set_profile(c, 1)) return fprintf(stderr, "bench_cpu_tokens: %s\n", st_errmsg()), 1;
        double t = 0, bytes = 0, b0 = 0;
        for (int r = 0; r <= calls; r++) {  // r == 0: warm-up, not counted (hot: the records it reads)
            const double s = decode_jobs_run(&d, w == 1 && r > 0, r > 0 ? &bytes : &b0);
            if (s < 0) return fprintf(stderr, "bench_cpu_tokens: %s\n", st_errmsg()), 1;
            if (r > 0) t += s;
        }
        char prof[1024] = "";
        st_hy_cpu_profile_text(c, prof, sizeof prof);
        printf("%d threads, decode jobs of %d experts, %s: %.1f us per call (%.1f GB/s of weights); %s\n",
               st_hy_cpu_threads(c), n_ex, way[w], t / calls * 1e6, bytes / t / 1e9, prof);
    }
    decode_jobs_free(&d);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        printf("usage: bench_cpu_tokens MODEL.gguf [threads [tokens [experts [reps]]]]\n");
        return argc < 2 ? 2 : 0;
    }
    const int tok = argc > 3 ? atoi(argv[3]) : 32, n_ex = argc > 4 ? atoi(argv[4]) : 8, reps = argc > 5 ? atoi(argv[5]) : 5;
    bench_setup b;
    if (bench_setup_open(&b, "bench_cpu_tokens", argc, argv, 2, 0, NULL, NULL)) return 1;
    st_hy_cpu *c = b.c;
    const st_arena *a = b.a;
    const st_hparams *hp = &b.m->hp;
    const int K = (int)hp->n_expert_used, E = (int)hp->n_expert;
    if (K < 1 || tok < 1 || n_ex < 1 || n_ex > E || reps < 1) {
        fprintf(stderr, "bench_cpu_tokens: need positive sizes (experts <= %d)\n", E);
        bench_setup_close(&b);
        return 2;
    }
    if (tok == 1) {
        const int rc = decode_ways(a, c, hp, argc > 4 ? n_ex : 2, argc > 5 ? reps : 200);
        bench_setup_close(&b);
        return rc;
    }
    double best = 1e30, sum = 0;
    for (int r = 0; r <= reps; r++) {  // r == 0: warm-up (threads, buffers); then other layers each time
        const double t = st_hy_cpu_time_tokens(c, (uint32_t)r % hp->n_layer, K, tok, n_ex);
        if (t < 0) {
            fprintf(stderr, "bench_cpu_tokens: %s\n", st_errmsg());
            bench_setup_close(&b);
            return 1;
        }
        if (r == 0) continue;
        sum += t;
        if (t < best) best = t;
    }
    const double flop = 3.0 * 2.0 * (double)hp->n_embd * (double)hp->n_ff_exp * tok;
    printf("%d threads, %d experts x %d tokens: %.1f us per expert (best %.1f), %.1f GFLOP/s (%.1f per thread)\n",
           b.threads, n_ex, tok, sum / reps * 1e6, best * 1e6, flop / (sum / reps) / 1e9,
           flop / (sum / reps) / 1e9 / b.threads);
    bench_setup_close(&b);
    return 0;
}
