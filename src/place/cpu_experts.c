// CPU miss workers of hybrid decode (see cpu_experts.h).
#include "place/cpu_experts.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/dot.h"
#include "cpu/features.h"
#include "cpu/gemm_amx.h"
#include "cpu/matmul.h"
#include "cpu/ops.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/log.h"

// Single-token calls (decode), rows per task. Both are multiples of 8 (8-row repacked types keep the CPU engine's
// order) and gate/up's of 16 (each task's SwiGLU takes the CPU engine's 16-element chunks; cpu/ops.c computes
// leftovers with libm's expf). Smaller tasks measured no faster: the job is DRAM-bound and each task's stream
// starts cold (16 GiB, tg128, 2026-12-02c: 16 / 32 rows 375.4 tok/s vs 374.9, 16 / 16 358.7; 8 GiB 16 / 16 254.4
// vs 264.3); so did one task per thread (docs/experiments/2026-12-02-cpu-miss-balance.patch).
#define GU_ROWS 32    // gate/up rows per task
#define DOWN_ROWS 64  // down rows per task
#define TOK_GU_ROWS 64     // multi-token calls: gate/up rows per task (multiples of 8, as above)
#define TOK_DOWN_ROWS 128  // multi-token calls: down rows per task
#define TOK_PAIRS 16       // multi-token calls: pairs per quantization task, tokens per sum task

// Opt-in profile of the single-token calls (st_hy_cpu_set_profile): where a call's time goes. Per pool run each
// thread's first task start and last task end after the publish, and its busy time; per call the phases' walls.
#define HY_PROF_THREADS 256  // threads past this are not profiled
typedef struct hy_prof_run {
    double t_pub;                                   // st_now() before st_pool_run
    double first[HY_PROF_THREADS], last[HY_PROF_THREADS], busy[HY_PROF_THREADS];  // per thread; first 0: no task
} hy_prof_run;
typedef struct hy_prof {
    hy_prof_run run;                  // the run in progress
    uint64_t calls, experts;
    // sums over calls, seconds: the input's quantization, the gate/up run's wall, the SwiGLU rows' quantization,
    // the down run's wall; per run (index 0 gate/up, 1 down): the mean and the latest start of a thread that took
    // a task, the threads' mean busy time and the longest, the threads that took part
    double quant_x, wall[2], quant_g, start_mean[2], start_max[2], busy_mean[2], busy_max[2], took[2];
} hy_prof;

struct st_hy_cpu {
    const st_arena *a;
    int64_t n_embd, n_ff;
    int max_experts;
    st_pool *pool;
    void *xq;            // [act row of n_embd in the widest gate format], 64-aligned
    float *g, *u;        // [max_experts][n_ff]: gate products, then SwiGLU in g; up products
    uint8_t *aq;         // [max_experts][aq_stride]: the SwiGLU rows quantized in the down type's format
    size_t aq_stride;
    // the call in progress (read by the tasks)
    uint32_t layer;
    int n;
    const int32_t *experts;
    float *const *out;
    int64_t n_gu_chunks, n_down_chunks;  // tasks per expert (GU_ROWS, DOWN_ROWS rows each)
    hy_prof *prof;               // st_hy_cpu_set_profile, or NULL
    _Atomic int failed;
    // multi-token calls (st_hy_cpu_tokens): the chunk's CPU pairs in expert order, buffers grown on demand
    int64_t cap_pairs, cap_tk;
    int32_t *pair_tok;   // [cap_pairs] token of each pair
    int32_t *pair_of;    // [cap_tk] pair index of (t, k) at t * K + k, or -1 (not a CPU pair)
    uint8_t *tq;         // [cap_pairs][xq_stride] the pairs' input rows, quantized in the gate format
    float *tg, *tu;      // [cap_pairs][n_ff] gate products (then SwiGLU), up products
    uint8_t *taq;        // [cap_pairs][aq_stride] SwiGLU rows in the down format
    float *ty;           // [cap_pairs][n_embd] unweighted expert outputs
    size_t xq_stride;
    int32_t *ex_id, *ex_off;  // [n_expert], [n_expert + 1]: experts with pairs and their first pair
    int32_t *ex_cur;          // [n_expert]: per expert id, its pair count, then its next free pair index
    uint8_t *tpk;             // AMX: each expert's input rows packed for the tiles (cpu/gemm_amx.h), at pk_off[j]
    size_t tpk_cap;
    size_t *pk_off;           // [n_expert]
    int n_tgu, n_tdown;       // row ranges (tasks) per expert of gate/up and of down
    int n_ex, tK;
    int amx_gu, amx_down;     // this call's gate/up and down products on AMX tiles (types it takes, AMX available)
    int64_t n_pairs, t_tok;
    const float *tX, *tw;
    float *tY;
};

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

st_hy_cpu *st_hy_cpu_create(const st_arena *a, int64_t n_embd, int64_t n_ff, int max_experts, int n_threads) {
    if (!a || n_embd <= 0 || n_ff <= 0 || max_experts <= 0)
        return st_err("CPU miss workers: bad arguments (n_embd %lld, n_ff %lld, %d experts)", (long long)n_embd,
                      (long long)n_ff, max_experts), NULL;
    size_t xq_bytes = 0, aq_bytes = 0;
    for (uint32_t l = 0; l < a->n_layer; l++) {
        const st_xlayer *x = &a->layers[l].x;
        const int64_t ne0[3] = {n_embd, n_embd, n_ff};
        for (int k = 0; k < 3; k++) {
            const size_t ab = st_cpu_act_row_size(x->type[k], ne0[k]);
            if (!ab)
                return st_err("CPU miss workers: layer %u's %s experts are %s with rows of %lld, which the CPU "
                              "kernels cannot multiply",
                              l, k == 0 ? "gate" : k == 1 ? "up" : "down", st_type_name(x->type[k]),
                              (long long)ne0[k]), NULL;
            if (k < 2 && ab > xq_bytes) xq_bytes = ab;
            if (k == 2 && ab > aq_bytes) aq_bytes = ab;
        }
        if (st_cpu_act_type(x->type[0]) != st_cpu_act_type(x->type[1]))
            return st_err("CPU miss workers: layer %u: gate (%s) and up (%s) take different activation formats", l,
                          st_type_name(x->type[0]), st_type_name(x->type[1])), NULL;
    }
    st_hy_cpu *c = calloc(1, sizeof *c);
    if (!c) return st_err("out of memory"), NULL;
    c->a = a;
    c->n_embd = n_embd;
    c->n_ff = n_ff;
    c->max_experts = max_experts;
    c->aq_stride = align64(aq_bytes);
    if (posix_memalign(&c->xq, 64, align64(xq_bytes)) || posix_memalign((void **)&c->g, 64,
                                                                          align64(sizeof(float) * (size_t)n_ff) * (size_t)max_experts) ||
        posix_memalign((void **)&c->u, 64, align64(sizeof(float) * (size_t)n_ff) * (size_t)max_experts) ||
        posix_memalign((void **)&c->aq, 64, c->aq_stride * (size_t)max_experts)) {
        st_hy_cpu_free(c);
        return st_err("CPU miss workers: out of memory"), NULL;
    }
    c->pool = st_pool_create(n_threads);
    if (!c->pool) {
        st_hy_cpu_free(c);
        return st_err("CPU miss workers: cannot start %d threads", n_threads), NULL;
    }
    c->xq_stride = align64(xq_bytes);
    c->ex_id = malloc(sizeof *c->ex_id * a->n_expert);
    c->ex_off = malloc(sizeof *c->ex_off * (a->n_expert + 1));
    c->ex_cur = malloc(sizeof *c->ex_cur * a->n_expert);
    c->pk_off = malloc(sizeof *c->pk_off * a->n_expert);
    if (!c->ex_id || !c->ex_off || !c->ex_cur || !c->pk_off) {
        st_hy_cpu_free(c);
        return st_err("CPU miss workers: out of memory"), NULL;
    }
    c->n_gu_chunks = (n_ff + GU_ROWS - 1) / GU_ROWS;
    c->n_down_chunks = (n_embd + DOWN_ROWS - 1) / DOWN_ROWS;
    c->n_tgu = (int)((n_ff + TOK_GU_ROWS - 1) / TOK_GU_ROWS);
    c->n_tdown = (int)((n_embd + TOK_DOWN_ROWS - 1) / TOK_DOWN_ROWS);
    return c;
}

void st_hy_cpu_free(st_hy_cpu *c) {
    if (!c) return;
    free(c->prof);
    st_pool_destroy(c->pool);
    free(c->xq);
    free(c->g);
    free(c->u);
    free(c->aq);
    free(c->pair_tok);
    free(c->pair_of);
    free(c->tq);
    free(c->tg);
    free(c->tu);
    free(c->taq);
    free(c->ty);
    free(c->ex_id);
    free(c->ex_off);
    free(c->ex_cur);
    free(c->pk_off);
    free(c->tpk);
    free(c);
}

int st_hy_cpu_threads(const st_hy_cpu *c) { return st_pool_threads(c->pool); }

void st_hy_cpu_set_spin(st_hy_cpu *c, double seconds) { st_pool_set_spin(c->pool, seconds); }

int st_hy_cpu_set_profile(st_hy_cpu *c, int on) {
    free(c->prof);
    c->prof = on ? calloc(1, sizeof *c->prof) : NULL;
    return on && !c->prof ? st_err("CPU miss workers: out of memory for the profile") : 0;
}

// Task of `thread` ran [t0, t1) in the profiled run (each thread writes only its own slots; the caller reads them
// after the run's last task is done).
static void prof_task(st_hy_cpu *c, int thread, double t0, double t1) {
    hy_prof_run *r = &c->prof->run;
    if (thread >= HY_PROF_THREADS) return;
    if (r->first[thread] == 0) r->first[thread] = t0;
    r->last[thread] = t1;
    r->busy[thread] += t1 - t0;
}

// Runs the pool on fn, profiled as run k (0 gate/up, 1 down) when the profile is on.
static void prof_pool_run(st_hy_cpu *c, int k, int64_t n_tasks, st_task_fn fn) {
    if (!c->prof) {
        st_pool_run(c->pool, n_tasks, fn, c);
        return;
    }
    hy_prof *p = c->prof;
    memset(&p->run, 0, sizeof p->run);
    p->run.t_pub = st_now();
    st_pool_run(c->pool, n_tasks, fn, c);
    const double t_end = st_now();
    int took = 0;
    double s_sum = 0, s_max = 0, b_sum = 0, b_max = 0;
    for (int t = 0; t < HY_PROF_THREADS; t++) {
        if (p->run.first[t] == 0) continue;
        const double s = p->run.first[t] - p->run.t_pub;
        took++;
        s_sum += s;
        s_max = s > s_max ? s : s_max;
        b_sum += p->run.busy[t];
        b_max = p->run.busy[t] > b_max ? p->run.busy[t] : b_max;
    }
    p->wall[k] += t_end - p->run.t_pub;
    p->start_mean[k] += took ? s_sum / took : 0;
    p->start_max[k] += s_max;
    p->busy_mean[k] += took ? b_sum / took : 0;
    p->busy_max[k] += b_max;
    p->took[k] += took;
}

int st_hy_cpu_profile_text(const st_hy_cpu *c, char *buf, size_t size) {
    const hy_prof *p = c->prof;
    if (!p || !p->calls || size == 0) return 0;
    const double n = (double)p->calls, us = 1e6 / n;
    int w = snprintf(buf, size, "%llu calls, %.2f experts each: quantize x %.1f us", (unsigned long long)p->calls,
                     (double)p->experts / n, p->quant_x * us);
    const char *name[2] = {"gate/up", "down"};
    for (int k = 0; k < 2 && w >= 0 && (size_t)w < size; k++) {
        w += snprintf(buf + w, size - (size_t)w,
                      "; %s run %.1f us (%.1f threads took tasks, start mean %.1f / latest %.1f us, busy mean %.1f "
                      "/ longest %.1f us)",
                      name[k], p->wall[k] * us, p->took[k] / n, p->start_mean[k] * us, p->start_max[k] * us,
                      p->busy_mean[k] * us, p->busy_max[k] * us);
        if (k == 0 && w >= 0 && (size_t)w < size)
            w += snprintf(buf + w, size - (size_t)w, "; quantize SwiGLU %.1f us", p->quant_g * us);
    }
    return 1;
}

static size_t ff_stride(const st_hy_cpu *c) { return align64(sizeof(float) * (size_t)c->n_ff) / sizeof(float); }

// Task (expert i, chunk j) of gate/up: rows [r0, r0 + nr) of both products, then their SwiGLU into g.
static void gu_task(void *ud, int64_t task, int thread) {
    st_hy_cpu *c = ud;
    const double t0 = c->prof ? st_now() : 0;
    const int i = (int)(task / c->n_gu_chunks);
    const int64_t r0 = task % c->n_gu_chunks * GU_ROWS, nr = r0 + GU_ROWS <= c->n_ff ? GU_ROWS : c->n_ff - r0;
    const st_xlayer *x = &c->a->layers[c->layer].x;
    const uint32_t e = (uint32_t)c->experts[i];
    float *g = c->g + (size_t)i * ff_stride(c), *u = c->u + (size_t)i * ff_stride(c);
    if (st_cpu_matmul_rows_q(NULL, x->type[0], st_arena_part(c->a, c->layer, e, 0), c->n_embd, r0, nr, c->xq, 0, 1,
                             g + r0, c->n_ff, ST_MM_EXPERT) ||
        st_cpu_matmul_rows_q(NULL, x->type[1], st_arena_part(c->a, c->layer, e, 1), c->n_embd, r0, nr, c->xq, 0, 1,
                             u + r0, c->n_ff, ST_MM_EXPERT))
        atomic_store(&c->failed, 1);
    else
        st_swiglu(g + r0, g + r0, u + r0, nr);
    if (c->prof) prof_task(c, thread, t0, st_now());
}

// Task (expert i, chunk j) of down: output rows [r0, r0 + nr) of expert i.
static void down_task(void *ud, int64_t task, int thread) {
    st_hy_cpu *c = ud;
    const double t0 = c->prof ? st_now() : 0;
    const int i = (int)(task / c->n_down_chunks);
    const int64_t r0 = task % c->n_down_chunks * DOWN_ROWS,
                  nr = r0 + DOWN_ROWS <= c->n_embd ? DOWN_ROWS : c->n_embd - r0;
    const st_xlayer *x = &c->a->layers[c->layer].x;
    if (st_cpu_matmul_rows_q(NULL, x->type[2], st_arena_part(c->a, c->layer, (uint32_t)c->experts[i], 2), c->n_ff,
                             r0, nr, c->aq + (size_t)i * c->aq_stride, 0, 1, c->out[i] + r0, c->n_embd, ST_MM_EXPERT))
        atomic_store(&c->failed, 1);
    if (c->prof) prof_task(c, thread, t0, st_now());
}

int st_hy_cpu_experts(st_hy_cpu *c, uint32_t layer, const float *x, int n, const int32_t *experts, float *const *out) {
    if (n <= 0) return 0;
    if (layer >= c->a->n_layer || n > c->max_experts)
        return st_err("CPU miss workers: layer %u of %u, %d experts (at most %d)", layer, c->a->n_layer, n,
                      c->max_experts);
    for (int i = 0; i < n; i++)
        if (experts[i] < 0 || (uint32_t)experts[i] >= c->a->n_expert)
            return st_err("CPU miss workers: layer %u: expert id %d of %u", layer, experts[i], c->a->n_expert);
    const st_xlayer *xl = &c->a->layers[layer].x;
    const st_cpu_isa isa = st_cpu_isa_active();
    const double t0 = c->prof ? st_now() : 0;
    if (st_cpu_quantize_act(st_cpu_act_type(xl->type[0]), x, c->xq, c->n_embd, isa)) return -1;
    if (c->prof) {
        c->prof->calls++;
        c->prof->experts += (uint64_t)n;
        c->prof->quant_x += st_now() - t0;
    }
    c->layer = layer;
    c->n = n;
    c->experts = experts;
    c->out = out;
    atomic_store(&c->failed, 0);
    prof_pool_run(c, 0, n * c->n_gu_chunks, gu_task);
    if (atomic_load(&c->failed)) return st_err("CPU miss workers: layer %u: gate/up product failed", layer);
    const int down_act = st_cpu_act_type(xl->type[2]);
    const double t1 = c->prof ? st_now() : 0;
    for (int i = 0; i < n; i++)
        if (st_cpu_quantize_act(down_act, c->g + (size_t)i * ff_stride(c), c->aq + (size_t)i * c->aq_stride, c->n_ff,
                                isa))
            return -1;
    if (c->prof) c->prof->quant_g += st_now() - t1;
    prof_pool_run(c, 1, n * c->n_down_chunks, down_task);
    if (atomic_load(&c->failed)) return st_err("CPU miss workers: layer %u: down product failed", layer);
    return 0;
}

// ---- multi-token calls -------------------------------------------------------------------------------------------

static int grow(void **p, size_t bytes) {
    void *q = NULL;
    if (posix_memalign(&q, 64, bytes ? bytes : 64)) return -1;
    free(*p);
    *p = q;
    return 0;
}

static int tok_reserve(st_hy_cpu *c, int64_t pairs, int64_t tk) {
    if (tk > c->cap_tk) {
        if (grow((void **)&c->pair_of, sizeof(int32_t) * (size_t)tk)) return st_err("CPU prefill workers: out of memory");
        c->cap_tk = tk;
    }
    if (pairs <= c->cap_pairs) return 0;
    const size_t n = (size_t)pairs, ffs = align64(sizeof(float) * (size_t)c->n_ff);
    if (grow((void **)&c->pair_tok, sizeof(int32_t) * n) || grow((void **)&c->tq, c->xq_stride * n) ||
        grow((void **)&c->tg, ffs * n) || grow((void **)&c->tu, ffs * n) || grow((void **)&c->taq, c->aq_stride * n) ||
        grow((void **)&c->ty, sizeof(float) * (size_t)c->n_embd * n)) {
        c->cap_pairs = 0;
        return st_err("CPU prefill workers: out of memory for %lld (token, expert) pairs", (long long)pairs);
    }
    c->cap_pairs = pairs;
    return 0;
}

// Pairs [16 task, 16 task + 16): part 0 quantizes their input rows (gate format), part 2 their SwiGLU rows (down).
static void tok_quant(st_hy_cpu *c, int64_t task, int part) {
    const int fmt = st_cpu_act_type(c->a->layers[c->layer].x.type[part]);
    const st_cpu_isa isa = st_cpu_isa_active();
    for (int64_t i = task * TOK_PAIRS; i < c->n_pairs && i < (task + 1) * TOK_PAIRS; i++) {
        const int rc = part == 0 ? st_cpu_quantize_act(fmt, c->tX + (size_t)c->pair_tok[i] * (size_t)c->n_embd,
                                                       c->tq + (size_t)i * c->xq_stride, c->n_embd, isa)
                                 : st_cpu_quantize_act(fmt, c->tg + (size_t)i * ff_stride(c),
                                                       c->taq + (size_t)i * c->aq_stride, c->n_ff, isa);
        if (rc) atomic_store(&c->failed, 1);
    }
}

static void tok_quant_task(void *ud, int64_t task, int thread) {
    (void)thread;
    tok_quant(ud, task, 0);
}

static void tok_quant_down_task(void *ud, int64_t task, int thread) {
    (void)thread;
    tok_quant(ud, task, 2);
}

// Expert j's quantized rows packed for the AMX tiles, once for all its row ranges: part 0 its input rows
// (gate/up), part 2 its SwiGLU rows (down), into the same space once gate/up are done.
static void tok_pack(st_hy_cpu *c, int64_t j, int part) {
    const int64_t p0 = c->ex_off[j], np = c->ex_off[j + 1] - p0;
    if (part == 0) st_cpu_amx_pack_q8k(c->tq + (size_t)p0 * c->xq_stride, c->xq_stride, c->n_embd, np, c->tpk + c->pk_off[j]);
    else st_cpu_amx_pack_q8k(c->taq + (size_t)p0 * c->aq_stride, c->aq_stride, c->n_ff, np, c->tpk + c->pk_off[j]);
}

static void tok_pack_task(void *ud, int64_t j, int thread) {
    (void)thread;
    tok_pack(ud, j, 0);
}

static void tok_pack_down_task(void *ud, int64_t j, int thread) {
    (void)thread;
    tok_pack(ud, j, 2);
}

// Task (expert j, chunk r): gate and up rows [r0, r0 + nr) for every token of the expert, then their SwiGLU.
static void tok_gu_task(void *ud, int64_t task, int thread) {
    (void)thread;
    st_hy_cpu *c = ud;
    const int j = (int)(task / c->n_tgu);
    const int64_t r0 = (task % c->n_tgu) * TOK_GU_ROWS, nr = r0 + TOK_GU_ROWS <= c->n_ff ? TOK_GU_ROWS : c->n_ff - r0;
    const st_xlayer *x = &c->a->layers[c->layer].x;
    const uint32_t e = (uint32_t)c->ex_id[j];
    const int64_t p0 = c->ex_off[j], np = c->ex_off[j + 1] - p0;
    const size_t ffs = ff_stride(c);
    float *g = c->tg + (size_t)p0 * ffs + r0, *u = c->tu + (size_t)p0 * ffs + r0;
    const uint8_t *xq = c->tq + (size_t)p0 * c->xq_stride;
    int rc;
    if (c->amx_gu) {  // AMX int8 tiles (cpu/gemm_amx.h): the same products in another float order
        const size_t rb = st_row_size(x->type[0], c->n_embd);
        const uint8_t *pk = c->tpk + c->pk_off[j];
        rc = st_cpu_gemm_amx_packed(x->type[0], st_arena_part(c->a, c->layer, e, 0) + (size_t)r0 * rb, c->n_embd,
                                    nr, pk, np, g, (int64_t)ffs) ||
             st_cpu_gemm_amx_packed(x->type[1], st_arena_part(c->a, c->layer, e, 1) + (size_t)r0 * rb, c->n_embd,
                                    nr, pk, np, u, (int64_t)ffs);
    } else {
        rc = st_cpu_matmul_rows_q(NULL, x->type[0], st_arena_part(c->a, c->layer, e, 0), c->n_embd, r0, nr, xq,
                                  c->xq_stride, np, g, (int64_t)ffs, ST_MM_EXPERT) ||
             st_cpu_matmul_rows_q(NULL, x->type[1], st_arena_part(c->a, c->layer, e, 1), c->n_embd, r0, nr, xq,
                                  c->xq_stride, np, u, (int64_t)ffs, ST_MM_EXPERT);
    }
    if (rc) {
        atomic_store(&c->failed, 1);
        return;
    }
    for (int64_t t = 0; t < np; t++) st_swiglu(g + (size_t)t * ffs, g + (size_t)t * ffs, u + (size_t)t * ffs, nr);
}

static void tok_down_task(void *ud, int64_t task, int thread) {
    (void)thread;
    st_hy_cpu *c = ud;
    const int j = (int)(task / c->n_tdown);
    const int64_t r0 = (task % c->n_tdown) * TOK_DOWN_ROWS,
                  nr = r0 + TOK_DOWN_ROWS <= c->n_embd ? TOK_DOWN_ROWS : c->n_embd - r0;
    const st_xlayer *x = &c->a->layers[c->layer].x;
    const int64_t p0 = c->ex_off[j], np = c->ex_off[j + 1] - p0;
    const uint8_t *W = st_arena_part(c->a, c->layer, (uint32_t)c->ex_id[j], 2);
    float *y = c->ty + (size_t)p0 * (size_t)c->n_embd + r0;
    const int rc = c->amx_down ? st_cpu_gemm_amx_packed(x->type[2], W + (size_t)r0 * st_row_size(x->type[2], c->n_ff),
                                                        c->n_ff, nr, c->tpk + c->pk_off[j], np, y, c->n_embd)
                               : st_cpu_matmul_rows_q(NULL, x->type[2], W, c->n_ff, r0, nr,
                                                      c->taq + (size_t)p0 * c->aq_stride, c->aq_stride, np, y,
                                                      c->n_embd, ST_MM_EXPERT);
    if (rc) atomic_store(&c->failed, 1);
}

// Tokens [t0, t1): the rank-order weighted sum of their CPU pairs.
static void tok_sum_task(void *ud, int64_t task, int thread) {
    (void)thread;
    st_hy_cpu *c = ud;
    const int64_t d = c->n_embd;
    for (int64_t t = task * TOK_PAIRS; t < c->t_tok && t < (task + 1) * TOK_PAIRS; t++) {
        float *y = c->tY + (size_t)t * (size_t)d;
        memset(y, 0, sizeof(float) * (size_t)d);
        for (int k = 0; k < c->tK; k++) {
            const int32_t p = c->pair_of[t * c->tK + k];
            if (p < 0) continue;
            const float wk = c->tw[t * c->tK + k], *src = c->ty + (size_t)p * (size_t)d;
            for (int64_t i = 0; i < d; i++) y[i] += wk * src[i];
        }
    }
}

int st_hy_cpu_tokens(st_hy_cpu *c, uint32_t layer, const float *X, int64_t n_tok, const int32_t *ids, const float *w,
                     int K, const uint8_t *on_cpu, float *Y) {
    const uint32_t E = c->a->n_expert;
    if (layer >= c->a->n_layer || n_tok < 0 || K <= 0 || (uint32_t)K > E)
        return st_err("CPU prefill workers: layer %u of %u, %lld tokens, %d experts per token", layer, c->a->n_layer,
                      (long long)n_tok, K);
    if (n_tok == 0) return 0;
    const int64_t tk = n_tok * K;
    // Counting pass (bad ids are an error, as in st_hy_cpu_experts).
    int64_t n_pairs = 0;
    for (int64_t i = 0; i < tk; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= E)
            return st_err("CPU prefill workers: layer %u: expert id %d of %u at pair %lld", layer, ids[i], E,
                          (long long)i);
        if (on_cpu[ids[i]]) n_pairs++;
    }
    if (tok_reserve(c, n_pairs, tk)) return -1;
    // Experts in id order, their pairs in token order: counts, offsets, then placement.
    int32_t *cur = c->ex_cur;
    memset(cur, 0, sizeof *cur * E);
    for (int64_t i = 0; i < tk; i++)
        if (on_cpu[ids[i]]) cur[ids[i]]++;
    c->n_ex = 0;
    int32_t run = 0;
    for (uint32_t e = 0; e < E; e++)
        if (cur[e]) {
            c->ex_id[c->n_ex] = (int32_t)e;
            c->ex_off[c->n_ex++] = run;
            const int32_t n = cur[e];
            cur[e] = run;  // from here: e's next free pair index
            run += n;
        }
    c->ex_off[c->n_ex] = run;
    for (int64_t i = 0; i < tk; i++) {
        c->pair_of[i] = -1;
        if (!on_cpu[ids[i]]) continue;
        const int32_t p = cur[ids[i]]++;
        c->pair_of[i] = p;
        c->pair_tok[p] = (int32_t)(i / K);
    }
    c->layer = layer;
    c->n_pairs = n_pairs;
    c->t_tok = n_tok;
    c->tK = K;
    c->tX = X;
    c->tw = w;
    c->tY = Y;
    const st_xlayer *xl = &c->a->layers[layer].x;
    const int amx = st_cpu_amx_available();
    c->amx_gu = amx && st_cpu_amx_supported(xl->type[0]) && xl->type[1] == xl->type[0] && c->n_ff % 16 == 0 &&
                c->n_embd % 256 == 0;
    c->amx_down = amx && st_cpu_amx_supported(xl->type[2]) && c->n_embd % 16 == 0 && c->n_ff % 256 == 0;
    atomic_store(&c->failed, 0);
    if (c->amx_gu || c->amx_down) {  // the packed rows' buffer: each expert's at pk_off[j] (gate/up, then down)
        size_t need = 0;
        const int64_t ne_max = c->n_embd > c->n_ff ? c->n_embd : c->n_ff;
        for (int j = 0; j < c->n_ex; j++) {
            c->pk_off[j] = need;
            need += st_cpu_amx_pack_bytes(ne_max, c->ex_off[j + 1] - c->ex_off[j]);
        }
        if (need > c->tpk_cap) {
            if (grow((void **)&c->tpk, need)) return st_err("CPU prefill workers: out of memory for packed rows");
            c->tpk_cap = need;
        }
    }
    const int64_t q_tasks = (n_pairs + TOK_PAIRS - 1) / TOK_PAIRS;
    if (n_pairs) {
        st_pool_run(c->pool, q_tasks, tok_quant_task, c);
        if (c->amx_gu) st_pool_run(c->pool, c->n_ex, tok_pack_task, c);
        st_pool_run(c->pool, (int64_t)c->n_ex * c->n_tgu, tok_gu_task, c);
        if (atomic_load(&c->failed)) return st_err("CPU prefill workers: layer %u: gate/up product failed", layer);
        st_pool_run(c->pool, q_tasks, tok_quant_down_task, c);
        if (c->amx_down) st_pool_run(c->pool, c->n_ex, tok_pack_down_task, c);
        st_pool_run(c->pool, (int64_t)c->n_ex * c->n_tdown, tok_down_task, c);
        if (atomic_load(&c->failed)) return st_err("CPU prefill workers: layer %u: down product failed", layer);
    }
    st_pool_run(c->pool, (n_tok + TOK_PAIRS - 1) / TOK_PAIRS, tok_sum_task, c);
    return 0;
}

double st_hy_cpu_time_tokens(st_hy_cpu *c, uint32_t layer, int K, int tok, int n_ex) {
    const int E = (int)c->a->n_expert;
    if (n_ex > E) n_ex = E;
    const int64_t n_tok = (int64_t)tok * E / K, d = c->n_embd;
    if (layer >= c->a->n_layer || K < 1 || K > E || tok < 1 || n_ex < 1 || n_tok < 1)
        return st_err("CPU prefill timing: layer %u, top-%d, %d tokens, %d experts", layer, K, tok, n_ex), -1;
    float *X = malloc(sizeof(float) * (size_t)(n_tok * d)), *w = malloc(sizeof(float) * (size_t)(n_tok * K));
    float *Y = malloc(sizeof(float) * (size_t)(n_tok * d));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n_tok * K));
    uint8_t *on = calloc((size_t)E, 1);
    double t = -1;
    if (X && w && Y && ids && on) {
        for (int64_t i = 0; i < n_tok * d; i++) X[i] = 0.5f * sinf(0.37f * (float)i);  // any finite rows will do
        for (int64_t i = 0; i < n_tok * K; i++) ids[i] = (int32_t)(i % E), w[i] = 1.0f / (float)K;
        for (int e = 0; e < n_ex; e++) on[(e * 7 + (int)layer) % E] = 1;  // 7: coprime with the usual E
        const double t0 = st_now();
        if (st_hy_cpu_tokens(c, layer, X, n_tok, ids, w, K, on, Y) == 0) t = (st_now() - t0) / n_ex;
    } else {
        st_err("out of memory");
    }
    free(X), free(w), free(Y), free(ids), free(on);
    return t;
}

double st_hy_cpu_time_expert(st_hy_cpu *c, int reps) {
    const int K = c->max_experts;
    const uint32_t L = c->a->n_layer, E = c->a->n_expert;
    if (reps < 1) reps = 1;
    float *x = malloc(sizeof(float) * (size_t)c->n_embd), *y = malloc(sizeof(float) * (size_t)c->n_embd * K);
    float **out = malloc(sizeof *out * (size_t)K);
    int32_t *ids = malloc(sizeof *ids * (size_t)K);
    if (!x || !y || !out || !ids) {
        free(x), free(y), free(out), free(ids);
        return st_err("out of memory"), -1;
    }
    for (int64_t i = 0; i < c->n_embd; i++) x[i] = 0.5f * sinf(0.37f * (float)i);  // any finite row will do
    for (int k = 0; k < K; k++) out[k] = y + (size_t)k * c->n_embd;
    double t = INFINITY;  // the best round: a round that shares the cores with other load-time work is not the figure
    int rc = 0;
    uint64_t next = 0;  // (layer, expert) pairs in a stride that visits distinct records before repeating
    for (int r = 0; r <= reps && rc == 0; r++) {
        const uint32_t l = (uint32_t)(next % L);
        for (int k = 0; k < K; k++) ids[k] = (int32_t)((next / L + (uint64_t)k) % E);
        next += (uint64_t)L * (uint64_t)(K < (int)E ? K : 1) + 1;
        const double t0 = st_now();
        rc = st_hy_cpu_experts(c, l, x, K < (int)E ? K : (int)E, ids, out);
        if (r > 0 && st_now() - t0 < t) t = st_now() - t0;  // r == 0: warm-up (threads, code)
    }
    free(x), free(y), free(out), free(ids);
    if (rc) return -1;
    const double per = t / (double)(K < (int)E ? K : (int)E);
    return per > 0 ? per : 1e-9;
}

double st_hy_pick_pcie_frac(double t_pcie, double t_cpu, double t_fixed, double misses_per_layer) {
    if (!(t_pcie > 0) || !(t_cpu > 0) || !(misses_per_layer > 0) || !isfinite(t_pcie) || !isfinite(t_cpu) ||
        !isfinite(misses_per_layer) || !(t_fixed >= 0) || !isfinite(t_fixed))
        return 1.0;
    double f = t_cpu * ST_HY_SPLIT_PCIE_PER_CPU <= t_pcie ? 0.0
                                                         : (t_fixed / misses_per_layer + t_cpu) / (t_pcie + t_cpu);
    if (f < 0) f = 0;
    if (f > 0.95) f = 1.0;
    // The split must save more PCIe time than its fixed cost, or every miss over PCIe is faster.
    if ((1.0 - f) * misses_per_layer * t_pcie <= t_fixed) f = 1.0;
    return f;
}
