// CPU miss workers of hybrid decode (see cpu_experts.h).
#include "place/cpu_experts.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/dot.h"
#include "cpu/features.h"
#include "cpu/matmul.h"
#include "cpu/ops.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/log.h"

#define GU_ROWS 32    // gate/up rows per task (a multiple of 8: 8-row tiled types keep their order)
#define DOWN_ROWS 64  // down rows per task

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
    int n_gu_chunks, n_down_chunks;
    _Atomic int failed;
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
    c->n_gu_chunks = (int)((n_ff + GU_ROWS - 1) / GU_ROWS);
    c->n_down_chunks = (int)((n_embd + DOWN_ROWS - 1) / DOWN_ROWS);
    return c;
}

void st_hy_cpu_free(st_hy_cpu *c) {
    if (!c) return;
    st_pool_destroy(c->pool);
    free(c->xq);
    free(c->g);
    free(c->u);
    free(c->aq);
    free(c);
}

int st_hy_cpu_threads(const st_hy_cpu *c) { return st_pool_threads(c->pool); }

static size_t ff_stride(const st_hy_cpu *c) { return align64(sizeof(float) * (size_t)c->n_ff) / sizeof(float); }

// Task (expert i, chunk j) of gate/up: rows [r0, r1) of both products, then their SwiGLU into g.
static void gu_task(void *ud, int64_t task, int thread) {
    (void)thread;
    st_hy_cpu *c = ud;
    const int i = (int)(task / c->n_gu_chunks), j = (int)(task % c->n_gu_chunks);
    const int64_t r0 = (int64_t)j * GU_ROWS, nr = r0 + GU_ROWS <= c->n_ff ? GU_ROWS : c->n_ff - r0;
    const st_xlayer *x = &c->a->layers[c->layer].x;
    const uint32_t e = (uint32_t)c->experts[i];
    float *g = c->g + (size_t)i * ff_stride(c), *u = c->u + (size_t)i * ff_stride(c);
    if (st_cpu_matmul_rows_q(NULL, x->type[0], st_arena_part(c->a, c->layer, e, 0), c->n_embd, r0, nr, c->xq, 0, 1,
                             g + r0, c->n_ff, ST_MM_EXPERT) ||
        st_cpu_matmul_rows_q(NULL, x->type[1], st_arena_part(c->a, c->layer, e, 1), c->n_embd, r0, nr, c->xq, 0, 1,
                             u + r0, c->n_ff, ST_MM_EXPERT)) {
        atomic_store(&c->failed, 1);
        return;
    }
    st_swiglu(g + r0, g + r0, u + r0, nr);
}

// Task (expert i, chunk j) of down: output rows [r0, r1) of expert i.
static void down_task(void *ud, int64_t task, int thread) {
    (void)thread;
    st_hy_cpu *c = ud;
    const int i = (int)(task / c->n_down_chunks), j = (int)(task % c->n_down_chunks);
    const int64_t r0 = (int64_t)j * DOWN_ROWS, nr = r0 + DOWN_ROWS <= c->n_embd ? DOWN_ROWS : c->n_embd - r0;
    const st_xlayer *x = &c->a->layers[c->layer].x;
    const uint32_t e = (uint32_t)c->experts[i];
    if (st_cpu_matmul_rows_q(NULL, x->type[2], st_arena_part(c->a, c->layer, e, 2), c->n_ff, r0, nr,
                             c->aq + (size_t)i * c->aq_stride, 0, 1, c->out[i] + r0, c->n_embd, ST_MM_EXPERT))
        atomic_store(&c->failed, 1);
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
    if (st_cpu_quantize_act(st_cpu_act_type(xl->type[0]), x, c->xq, c->n_embd, isa)) return -1;
    c->layer = layer;
    c->n = n;
    c->experts = experts;
    c->out = out;
    atomic_store(&c->failed, 0);
    st_pool_run(c->pool, (int64_t)n * c->n_gu_chunks, gu_task, c);
    if (atomic_load(&c->failed)) return st_err("CPU miss workers: layer %u: gate/up product failed", layer);
    const int down_act = st_cpu_act_type(xl->type[2]);
    for (int i = 0; i < n; i++)
        if (st_cpu_quantize_act(down_act, c->g + (size_t)i * ff_stride(c), c->aq + (size_t)i * c->aq_stride, c->n_ff,
                                isa))
            return -1;
    st_pool_run(c->pool, (int64_t)n * c->n_down_chunks, down_task, c);
    if (atomic_load(&c->failed)) return st_err("CPU miss workers: layer %u: down product failed", layer);
    return 0;
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
    double t = 0;
    int rc = 0;
    uint64_t next = 0;  // (layer, expert) pairs in a stride that visits distinct records before repeating
    for (int r = 0; r <= reps && rc == 0; r++) {
        const uint32_t l = (uint32_t)(next % L);
        for (int k = 0; k < K; k++) ids[k] = (int32_t)((next / L + (uint64_t)k) % E);
        next += (uint64_t)L * (uint64_t)(K < (int)E ? K : 1) + 1;
        const double t0 = st_now();
        rc = st_hy_cpu_experts(c, l, x, K < (int)E ? K : (int)E, ids, out);
        if (r > 0) t += st_now() - t0;  // r == 0: warm-up (threads, code)
    }
    free(x), free(y), free(out), free(ids);
    if (rc) return -1;
    const double per = t / ((double)reps * (double)(K < (int)E ? K : (int)E));
    return per > 0 ? per : 1e-9;
}

double st_hy_pick_pcie_frac(double t_pcie, double t_cpu, double t_fixed, double misses_per_layer) {
    if (!(t_pcie > 0) || !(t_cpu > 0) || !(misses_per_layer > 0) || !isfinite(t_pcie) || !isfinite(t_cpu) ||
        !isfinite(misses_per_layer) || !(t_fixed >= 0) || !isfinite(t_fixed))
        return 1.0;
    double f = (t_fixed / misses_per_layer + t_cpu) / (t_pcie + t_cpu);
    if (f < 0) f = 0;
    if (f > 0.95) f = 1.0;
    // The split must save more PCIe time than its fixed cost, or every miss over PCIe is faster.
    if ((1.0 - f) * misses_per_layer * t_pcie <= t_fixed) f = 1.0;
    return f;
}
