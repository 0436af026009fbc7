// A stream of single-token decode jobs for the hybrid's CPU miss workers (place/cpu_experts.h st_hy_cpu_experts)
// over an arena's records, shared by tests/place/bench_cpu_tokens.c and tests/gpu/bench_gpu_contention.c. A job
// takes n_ex experts of one layer in [l0, l0 + nl): distinct records each job (cold: from DRAM), or the last cold
// job's again (hot).
#ifndef STRATA_TESTS_DECODE_JOBS_H
#define STRATA_TESTS_DECODE_JOBS_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <stdio.h>

#include "engine/model.h"
#include "place/arena.h"
#include "place/cpu_experts.h"
#include "util/err.h"
#include "util/log.h"   // st_now
#include "util/pool.h"  // st_cpu_count

// The benches' setup: the model, its arena in anonymous memory (reg / unreg: page-locking for the GPU, or NULL) and
// `threads` CPU miss workers (argv[ti], default all CPUs but one) for jobs of up to max_ex experts (0: the model's
// n_expert_used).
typedef struct bench_setup {
    st_model *m;
    st_arena *a;
    st_hy_cpu *c;
    int threads;
} bench_setup;

static inline void bench_setup_close(bench_setup *b) {
    if (b->c) st_hy_cpu_free(b->c);
    if (b->a) st_arena_free(b->a);
    if (b->m) st_model_free(b->m);
    memset(b, 0, sizeof *b);
}

// 0, or 1 with the error printed under `tool`'s name (b is then closed).
static inline int bench_setup_open(bench_setup *b, const char *tool, int argc, char **argv, int ti, int max_ex,
                                   st_arena_register_fn reg, st_arena_unregister_fn unreg) {
    memset(b, 0, sizeof *b);
    const int n_cpu = st_cpu_count();
    b->threads = argc > ti ? atoi(argv[ti]) : (n_cpu > 2 ? n_cpu - 1 : 1);
    st_log_set_level(ST_LOG_WARN);
    b->m = st_model_load(argv[1]);
    if (b->m && max_ex <= 0) max_ex = (int)b->m->hp.n_expert_used;
    if (b->m && (!b->m->hp.n_expert || b->threads < 1 || max_ex < 1))
        st_err("%s: need a MoE model and 1+ threads", argv[1]);
    else if (b->m) {
        st_arena_opts ao;
        memset(&ao, 0, sizeof ao);
        ao.mode = ST_ARENA_ANON;
        ao.register_chunk = reg;
        ao.unregister_chunk = unreg;
        ao.quiet = true;
        b->a = st_arena_create(b->m, &ao);
        if (b->a) b->c = st_hy_cpu_create(b->a, b->m->hp.n_embd, b->m->hp.n_ff_exp, max_ex, b->threads);
    }
    if (b->c) return 0;
    fprintf(stderr, "%s: %s\n", tool, st_errmsg());
    bench_setup_close(b);
    return 1;
}

typedef struct decode_jobs {
    const st_arena *a;
    st_hy_cpu *c;
    int n_ex;
    uint32_t l0, nl;  // the layers the jobs take
    uint64_t next;    // record cursor
    float *x;         // [n_embd] the input row
    float *y;         // [n_ex][n_embd] the outputs, out[k] row k
    float *out[32];
} decode_jobs;

// 0, or -1 (n_ex outside 1..32, no layers, out of memory).
static inline int decode_jobs_init(decode_jobs *d, const st_arena *a, st_hy_cpu *c, int64_t n_embd, int n_ex,
                                   uint32_t l0, uint32_t nl) {
    memset(d, 0, sizeof *d);
    if (n_ex < 1 || n_ex > 32 || nl < 1) return -1;
    d->a = a, d->c = c, d->n_ex = n_ex, d->l0 = l0, d->nl = nl, d->next = 1;
    d->x = malloc(sizeof(float) * (size_t)n_embd);
    d->y = malloc(sizeof(float) * (size_t)n_embd * (size_t)n_ex);
    if (!d->x || !d->y) return -1;
    for (int64_t i = 0; i < n_embd; i++) d->x[i] = 0.5f * sinf(0.37f * (float)i);
    for (int k = 0; k < n_ex; k++) d->out[k] = d->y + (size_t)k * (size_t)n_embd;
    return 0;
}

// One job: its seconds, or -1 with st_errmsg; *bytes += its records' bytes.
static inline double decode_jobs_run(decode_jobs *d, int hot, double *bytes) {
    const uint32_t E = d->a->n_expert;
    if (!hot) d->next += (uint64_t)d->nl * (uint64_t)d->n_ex + 1;
    const uint32_t l = d->l0 + (uint32_t)(d->next % d->nl);
    int32_t ids[32];
    for (int k = 0; k < d->n_ex; k++) ids[k] = (int32_t)((d->next / d->nl + (uint64_t)k) % E);
    const double t0 = st_now();
    if (st_hy_cpu_experts(d->c, l, d->x, d->n_ex, ids, d->out)) return -1;
    *bytes += (double)d->a->layers[l].record_bytes * d->n_ex;
    return st_now() - t0;
}

static inline void decode_jobs_free(decode_jobs *d) {
    free(d->x);
    free(d->y);
}

#endif
