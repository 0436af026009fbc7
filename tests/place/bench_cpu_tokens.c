// The hybrid prefill CPU share's throughput (place/cpu_experts.h st_hy_cpu_tokens): builds a MoE model's host arena
// and times the CPU computing `experts` experts of a layer for `tokens` tokens each (distinct layers per repeat, so
// the weights come from DRAM), with `threads` threads; prints microseconds per expert and GFLOP/s (3 products of
// 2 * n_embd * n_ff per token and expert). What gpu_hybrid.c measures at load to size the share, repeatable.
//   usage: bench_cpu_tokens MODEL.gguf [threads [tokens [experts [reps]]]]   (defaults: all CPUs - 1, 32, 8, 5)
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model.h"
#include "place/arena.h"
#include "place/cpu_experts.h"
#include "util/err.h"
#include "util/log.h"
#include "util/pool.h"

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        printf("usage: bench_cpu_tokens MODEL.gguf [threads [tokens [experts [reps]]]]\n");
        return argc < 2 ? 2 : 0;
    }
    const int n_cpu = st_cpu_count();
    const int threads = argc > 2 ? atoi(argv[2]) : (n_cpu > 2 ? n_cpu - 1 : 1);
    const int tok = argc > 3 ? atoi(argv[3]) : 32, n_ex = argc > 4 ? atoi(argv[4]) : 8, reps = argc > 5 ? atoi(argv[5]) : 5;
    st_log_set_level(ST_LOG_WARN);
    st_model *m = st_model_load(argv[1]);
    if (!m) {
        fprintf(stderr, "bench_cpu_tokens: %s\n", st_errmsg());
        return 1;
    }
    const st_hparams *hp = &m->hp;
    const int K = (int)hp->n_expert_used, E = (int)hp->n_expert;
    if (!E || K < 1 || tok < 1 || n_ex < 1 || n_ex > E || threads < 1 || reps < 1) {
        fprintf(stderr, "bench_cpu_tokens: need a MoE model and positive sizes (experts <= %d)\n", E);
        return 2;
    }
    st_arena_opts ao;
    memset(&ao, 0, sizeof ao);
    ao.mode = ST_ARENA_ANON;
    ao.quiet = true;
    st_arena *a = st_arena_create(m, &ao);
    st_hy_cpu *c = a ? st_hy_cpu_create(a, hp->n_embd, hp->n_ff_exp, K, threads) : NULL;
    if (!c) {
        fprintf(stderr, "bench_cpu_tokens: %s\n", st_errmsg());
        return 1;
    }
    double best = 1e30, sum = 0;
    for (int r = 0; r <= reps; r++) {  // r == 0: warm-up (threads, buffers); then other layers each time
        const double t = st_hy_cpu_time_tokens(c, (uint32_t)r % hp->n_layer, K, tok, n_ex);
        if (t < 0) {
            fprintf(stderr, "bench_cpu_tokens: %s\n", st_errmsg());
            return 1;
        }
        if (r == 0) continue;
        sum += t;
        if (t < best) best = t;
    }
    const double flop = 3.0 * 2.0 * (double)hp->n_embd * (double)hp->n_ff_exp * tok;
    printf("%d threads, %d experts x %d tokens: %.1f us per expert (best %.1f), %.1f GFLOP/s (%.1f per thread)\n",
           threads, n_ex, tok, sum / reps * 1e6, best * 1e6, flop / (sum / reps) / 1e9,
           flop / (sum / reps) / 1e9 / threads);
    st_hy_cpu_free(c);
    st_arena_free(a);
    st_model_free(m);
    return 0;
}
