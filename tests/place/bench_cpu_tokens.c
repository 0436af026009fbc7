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

// The single-token layer jobs of the usage above: cold and hot.
static int decode_jobs(const st_arena *a, st_hy_cpu *c, const st_hparams *hp, int n_ex, int calls) {
    const uint32_t L = a->n_layer, E = a->n_expert;
    if (n_ex < 1 || n_ex > (int)hp->n_expert_used || calls < 1) {
        fprintf(stderr, "bench_cpu_tokens: 1 to %u experts per decode job and at least one call\n",
                hp->n_expert_used);
        return 2;
    }
    float *x = malloc(sizeof(float) * (size_t)hp->n_embd), *y = malloc(sizeof(float) * (size_t)hp->n_embd * n_ex);
    float *out[32];
    if (!x || !y) return fprintf(stderr, "bench_cpu_tokens: out of memory\n"), 1;
    for (int64_t i = 0; i < hp->n_embd; i++) x[i] = 0.5f * sinf(0.37f * (float)i);
    for (int k = 0; k < n_ex; k++) out[k] = y + (size_t)k * hp->n_embd;
    const char *way[2] = {"cold", "hot"};
    uint64_t next = 1;
    for (int w = 0; w < 2; w++) {
        if (st_hy_cpu_set_profile(c, 1)) return fprintf(stderr, "bench_cpu_tokens: %s\n", st_errmsg()), 1;
        double t = 0, bytes = 0;
        for (int r = 0; r <= calls; r++) {  // r == 0: warm-up, not counted
            int32_t ids[32];
            if (w == 0 || r == 0) next += (uint64_t)L * (uint64_t)n_ex + 1;  // distinct records (hot: the first ones)
            const uint32_t l = (uint32_t)(next % L);
            for (int k = 0; k < n_ex; k++) ids[k] = (int32_t)((next / L + (uint64_t)k) % E);
            const double t0 = st_now();
            if (st_hy_cpu_experts(c, l, x, n_ex, ids, out))
                return fprintf(stderr, "bench_cpu_tokens: %s\n", st_errmsg()), 1;
            if (r > 0) t += st_now() - t0, bytes += (double)a->layers[l].record_bytes * n_ex;
        }
        char prof[1024] = "";
        st_hy_cpu_profile_text(c, prof, sizeof prof);
        printf("%d threads, decode jobs of %d experts, %s: %.1f us per call (%.1f GB/s of weights); %s\n",
               st_hy_cpu_threads(c), n_ex, way[w], t / calls * 1e6, bytes / t / 1e9, prof);
    }
    free(x);
    free(y);
    return 0;
}

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
    if (tok == 1) {
        const int rc = decode_jobs(a, c, hp, argc > 4 ? n_ex : 2, argc > 5 ? reps : 200);
        st_hy_cpu_free(c);
        st_arena_free(a);
        st_model_free(m);
        return rc;
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
