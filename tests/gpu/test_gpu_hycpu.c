// Hybrid decode with CPU misses (--pcie-frac, docs/HYBRID.md): the kernels of cuda/hybrid.h (st_cuda_hy_classify,
// st_cuda_hy_combine) and the split sequence engine/gpu_hybrid.c builds from them, on one MoE layer of random Q4_K
// gate/up and Q6_K down experts, half of them in device memory ("VRAM slots") and half in page-locked host memory
// mapped into the device (misses, read zero-copy):
//   classify   ids_gpu / exported CPU list / activation row / carry / counter == the host rule (cuda/hybrid_split.h)
//   split==fused  the GPU branch (decode.h st_cuda_moe_glu_q + st_cuda_moe_down_split of ids_gpu: the per-rank
//              rows when a rank is the CPU's, else the sum itself), the CPU ranks filled with the GPU's own
//              per-expert outputs, then the combine: bit-equal to the all-GPU decode kernels (st_cuda_moe_glu_q +
//              st_cuda_moe_down_sum); shares 0, 1/2 and 1
//   graph      the whole sequence captured in a CUDA graph with the CPU part as a host node on a side stream (fork /
//              join events), replayed with fresh routings: the host node computes its experts with the CPU kernels
//              (cpu/matmul.h, as place/cpu_experts.c), the output matches the fused reference closely, and replays
//              without CPU misses match it bit for bit; and the same with the doorbell instead of the host node
//              (st_cuda_hy_classify_bell / st_cuda_hy_combine_bell and a polling host thread, the engine's default)
//   fused      the split folded into the router and down launches (st_cuda_router_topk_split +
//              st_cuda_moe_down_join, STRATA_HY_SPLIT_FUSED) == the separate launches, bit for bit
// Fresh random inputs each run (seed printed; STRATA_SEED fixes it). One PASS/FAIL line per check; exit 1 on failure.
//   usage: test_gpu_hycpu [--quick]
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cpu/matmul.h"
#include "cpu/ops.h"
#include "cuda/decode.h"
#include "cuda/hybrid.h"
#include "cuda/hybrid_split.h"
#include "cuda/mmvq.h"
#include "cuda/quantize_act.h"
#include "cuda/runtime.h"
#include "gpu_test_util.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/log.h"
#include "util/rng.h"

#define E 16
#define K 8
#define D 1024
#define FF 512
#define GU_TYPE ST_TYPE_Q4_K
#define DN_TYPE ST_TYPE_Q6_K

static int g_fail;
static uint64_t g_seed;

#define CK(call)                                                                                     \
    do {                                                                                             \
        cudaError_t e_ = (call);                                                                     \
        if (e_ != cudaSuccess) {                                                                     \
            printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));       \
            exit(1);                                                                                 \
        }                                                                                            \
    } while (0)
#define ST(call)                                                                                     \
    do {                                                                                             \
        if ((call) != 0) {                                                                           \
            printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, st_errmsg());                  \
            exit(1);                                                                                 \
        }                                                                                            \
    } while (0)

static void report(const char *what, int bad, const char *detail) {
    printf("%s %s%s%s\n", bad ? "FAIL" : "PASS", what, detail[0] ? ": " : "", detail);
    g_fail += bad != 0;
}

// The layer: host records (mapped), device copies of the resident ones, the device address table.
typedef struct {
    size_t gu_row, dn_row, part[3], rec_bytes;
    uint8_t *host, *host_dev;  // [E][rec_bytes] mapped host memory: host / device address
    uint8_t *vram;             // [E][rec_bytes] device copies (only resident experts filled)
    int resident[E];
    const void **tab_d;        // device [E][3]
} layer;

static void make_layer(layer *L, st_rng *r) {
    L->gu_row = st_row_size(GU_TYPE, D);
    L->dn_row = st_row_size(DN_TYPE, FF);
    L->part[0] = 0;
    L->part[1] = L->gu_row * FF;
    L->part[2] = 2 * L->gu_row * FF;
    L->rec_bytes = (L->part[2] + L->dn_row * D + 255) & ~(size_t)255;
    CK(cudaHostAlloc((void **)&L->host, L->rec_bytes * E, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void **)&L->host_dev, L->host, 0));
    CK(cudaMalloc((void **)&L->vram, L->rec_bytes * E));
    CK(cudaMalloc((void **)&L->tab_d, sizeof(void *) * 3 * E));
    const st_type_info *gi = st_type_get(GU_TYPE), *di = st_type_get(DN_TYPE);
    const void *tab[3 * E];
    for (int e = 0; e < E; e++) {
        uint8_t *rec = L->host + (size_t)e * L->rec_bytes;
        ST(st_random_blocks(GU_TYPE, rec, 2 * (int64_t)FF * D / gi->block_size, 0.05f, r));
        ST(st_random_blocks(DN_TYPE, rec + L->part[2], (int64_t)D * FF / di->block_size, 0.05f, r));
        L->resident[e] = e % 2 == 0 ? 1 : (int)st_rng_below(r, 4) == 0;  // about 5/8 resident
        const uint8_t *base = L->host_dev + (size_t)e * L->rec_bytes;
        if (L->resident[e]) {
            CK(cudaMemcpy(L->vram + (size_t)e * L->rec_bytes, rec, L->rec_bytes, cudaMemcpyHostToDevice));
            base = L->vram + (size_t)e * L->rec_bytes;
        }
        for (int k = 0; k < 3; k++) tab[3 * e + k] = base + L->part[k];
    }
    CK(cudaMemcpy(L->tab_d, tab, sizeof tab, cudaMemcpyHostToDevice));
}

// CPU expert output (cpu/matmul.h with ST_MM_EXPERT, as place/cpu_experts.c computes it) into y [D].
static int cpu_expert(const layer *L, int e, const float *x, float *y) {
    const uint8_t *rec = L->host + (size_t)e * L->rec_bytes;
    float g[FF], u[FF];
    if (st_cpu_matmul_rows(NULL, GU_TYPE, rec + L->part[0], D, 0, FF, x, 1, g, FF, NULL, ST_MM_EXPERT) ||
        st_cpu_matmul_rows(NULL, GU_TYPE, rec + L->part[1], D, 0, FF, x, 1, u, FF, NULL, ST_MM_EXPERT))
        return -1;
    st_swiglu(g, g, u, FF);
    return st_cpu_matmul_rows(NULL, DN_TYPE, rec + L->part[2], FF, 0, D, g, 1, y, D, NULL, ST_MM_EXPERT);
}

// Device buffers of one step.
typedef struct {
    float *x, *xn, *act, *y, *yfull, *ref, *out, *wts, *ones;
    void *xq, *actq;       // the gate/up input row; the GLU's quantized output rows [K][st_q8_1_row_bytes(FF)]
    int32_t *counters;     // st_cuda_moe_glu_q's (zero between launches)
    int32_t *ids, *ids_gpu;
    uint32_t *carry, *cnt;
    int32_t *meta_h, *meta_d;  // mapped
    float *xrow_h, *xrow_d, *ycpu_h, *ycpu_d;  // mapped
} bufs;

static void make_bufs(bufs *b) {
    CK(cudaMalloc((void **)&b->x, sizeof(float) * D));
    CK(cudaMalloc((void **)&b->xn, sizeof(float) * D));
    CK(cudaMalloc((void **)&b->act, sizeof(float) * K * FF));
    CK(cudaMalloc((void **)&b->y, sizeof(float) * K * D));
    CK(cudaMalloc((void **)&b->yfull, sizeof(float) * K * D));
    CK(cudaMalloc((void **)&b->ref, sizeof(float) * D));
    CK(cudaMalloc((void **)&b->out, sizeof(float) * D));
    CK(cudaMalloc((void **)&b->wts, sizeof(float) * K));
    CK(cudaMalloc((void **)&b->ones, sizeof(float) * K));
    CK(cudaMalloc(&b->xq, (size_t)st_cuda_q8_1_row_bytes(D)));
    CK(cudaMalloc(&b->actq, (size_t)st_cuda_q8_1_row_bytes(FF) * K));
    const size_t cnt_bytes = st_cuda_dec_counters_bytes(FF, K, 1);
    CK(cudaMalloc((void **)&b->counters, cnt_bytes));
    CK(cudaMemset(b->counters, 0, cnt_bytes));
    CK(cudaMalloc((void **)&b->ids, sizeof(int32_t) * K));
    CK(cudaMalloc((void **)&b->ids_gpu, sizeof(int32_t) * K));
    CK(cudaMalloc((void **)&b->carry, sizeof(uint32_t)));
    CK(cudaMalloc((void **)&b->cnt, sizeof(uint32_t)));
    CK(cudaMemset(b->carry, 0, sizeof(uint32_t)));
    CK(cudaMemset(b->cnt, 0, sizeof(uint32_t)));
    CK(cudaHostAlloc((void **)&b->meta_h, sizeof(int32_t) * ST_HY_META_INTS, cudaHostAllocMapped));
    CK(cudaHostAlloc((void **)&b->xrow_h, sizeof(float) * D, cudaHostAllocMapped));
    CK(cudaHostAlloc((void **)&b->ycpu_h, sizeof(float) * K * D, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void **)&b->meta_d, b->meta_h, 0));
    CK(cudaHostGetDevicePointer((void **)&b->xrow_d, b->xrow_h, 0));
    CK(cudaHostGetDevicePointer((void **)&b->ycpu_d, b->ycpu_h, 0));
    float ones[K];
    for (int k = 0; k < K; k++) ones[k] = 1.0f;
    CK(cudaMemcpy(b->ones, ones, sizeof ones, cudaMemcpyHostToDevice));
}

// A fresh routing and activations: K distinct ids, positive weights summing to about 1, x and xn random.
static void fresh_inputs(bufs *b, st_rng *r, int32_t *ids, float *wts, float *x, float *xn, cudaStream_t st) {
    int used[E] = {0};
    float sum = 0;
    for (int k = 0; k < K; k++) {
        int e;
        do e = (int)st_rng_below(r, E);
        while (used[e]);
        used[e] = 1;
        ids[k] = e;
        wts[k] = 0.05f + st_rng_f32(r);
        sum += wts[k];
    }
    for (int k = 0; k < K; k++) wts[k] /= sum;
    for (int i = 0; i < D; i++) {
        x[i] = st_rng_normal(r);
        xn[i] = st_rng_normal(r);
    }
    CK(cudaMemcpyAsync(b->ids, ids, sizeof(int32_t) * K, cudaMemcpyHostToDevice, st));
    CK(cudaMemcpyAsync(b->wts, wts, sizeof(float) * K, cudaMemcpyHostToDevice, st));
    CK(cudaMemcpyAsync(b->x, x, sizeof(float) * D, cudaMemcpyHostToDevice, st));
    CK(cudaMemcpyAsync(b->xn, xn, sizeof(float) * D, cudaMemcpyHostToDevice, st));
    CK(cudaStreamSynchronize(st));  // (pageable sources)
}

// The all-GPU reference (ref = x + sum_k w_k y_k, the engine's decode kernels) and every expert's unweighted
// output (yfull rows).
static void reference(const layer *L, st_cuda_ctx *ctx, bufs *b, cudaStream_t st) {
    const int dfmt = st_cuda_act_format(DN_TYPE);
    ST(st_cuda_quantize_act(ctx, st_cuda_act_format(GU_TYPE), b->xn, b->xq, 1, D, st));
    ST(st_cuda_moe_glu_q(GU_TYPE, L->tab_d, E, D, FF, b->xq, b->ids, 1, K, b->act, b->actq, dfmt, b->counters, st));
    ST(st_cuda_moe_down_sum(DN_TYPE, L->tab_d, E, D, FF, b->actq, b->ids, b->wts, 1, K, b->ref, b->x, st));
    ST(st_cuda_moe_glu(GU_TYPE, L->tab_d, E, D, FF, b->xq, b->ids, 1, K, b->act, st));
    ST(st_cuda_moe_down_q(DN_TYPE, L->tab_d, E, D, FF, b->act, dfmt, b->ids, b->ones, K, 1, b->yfull, NULL, st));
}

// The GPU branch of the split (as engine/gpu_hybrid.c): GLU + down of ids_gpu (CPU ranks -1); out = x + the sum
// when no rank is the CPU's, else each rank's row in y.
static void gpu_branch(const layer *L, bufs *b, cudaStream_t st) {
    const int dfmt = st_cuda_act_format(DN_TYPE);
    ST(st_cuda_moe_glu_q(GU_TYPE, L->tab_d, E, D, FF, b->xq, b->ids_gpu, 1, K, b->act, b->actq, dfmt, b->counters,
                         st));
    ST(st_cuda_moe_down_split(DN_TYPE, L->tab_d, E, D, FF, b->actq, b->ids_gpu, b->wts, K, b->out, b->x, b->y, st));
}

static void classify(const layer *L, bufs *b, uint32_t q, cudaStream_t st) {
    ST(st_cuda_hy_classify(b->ids, K, E, L->tab_d, L->vram, L->vram + L->rec_bytes * E, q, b->carry, b->ids_gpu,
                           b->meta_d, b->xn, b->xrow_d, D, b->cnt, st));
}

static int bitwise_eq(const float *a, const float *b, int n, int *at) {
    for (int i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float))) {
            *at = i;
            return 0;
        }
    return 1;
}

// ---- 1 + 2: classify and split == fused ----------------------------------------------------------------------

static void test_split(const layer *L, st_cuda_ctx *ctx, bufs *b, st_rng *r, cudaStream_t st, int reps) {
    const uint32_t qs[3] = {ST_HY_Q16 / 2, ST_HY_Q16, 0};
    int bad_cls = 0, bad_eq = 0, bad_rows = 0;
    char det_cls[256] = "", det_eq[256] = "";
    uint32_t carry_h = 0, cnt_h = 0;
    CK(cudaMemset(b->carry, 0, sizeof(uint32_t)));
    CK(cudaMemset(b->cnt, 0, sizeof(uint32_t)));
    int32_t ids[K], ids_gpu[K];
    float wts[K], x[D], xn[D], ref[D], out[D], yfull[K * D], y[K * D];
    long n_cpu_total = 0;
    for (int it = 0; it < reps; it++) {
        const uint32_t q = qs[it % 3];
        fresh_inputs(b, r, ids, wts, x, xn, st);
        reference(L, ctx, b, st);
        for (int i = 0; i < ST_HY_META_INTS; i++) b->meta_h[i] = -7;  // poison the export
        for (int i = 0; i < D; i++) b->xrow_h[i] = NAN;
        CK(cudaMemsetAsync(b->out, 0xff, sizeof(float) * D, st));  // NaN: the split must write every element
        CK(cudaMemsetAsync(b->y, 0xff, sizeof(float) * K * D, st));
        classify(L, b, q, st);
        gpu_branch(L, b, st);
        CK(cudaStreamSynchronize(st));
        // the host rule
        uint8_t miss[K], cls[K];
        for (int k = 0; k < K; k++) miss[k] = !L->resident[ids[k]];
        int n_miss = 0;
        for (int k = 0; k < K; k++) n_miss += miss[k];
        const int n_cpu = st_hy_split_cpu(n_miss, q, &carry_h);
        st_hy_classify(miss, K, n_cpu, cls);
        cnt_h += (uint32_t)n_cpu;
        n_cpu_total += n_cpu;
        CK(cudaMemcpy(ids_gpu, b->ids_gpu, sizeof ids_gpu, cudaMemcpyDeviceToHost));
        uint32_t carry_d, cnt_d;
        CK(cudaMemcpy(&carry_d, b->carry, sizeof carry_d, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(&cnt_d, b->cnt, sizeof cnt_d, cudaMemcpyDeviceToHost));
        int ok = b->meta_h[0] == n_cpu && carry_d == carry_h && cnt_d == cnt_h;
        for (int k = 0, i = 0; k < K; k++) {
            ok = ok && ids_gpu[k] == (cls[k] == ST_HY_CPU ? -1 : ids[k]);
            if (cls[k] == ST_HY_CPU) {
                ok = ok && b->meta_h[1 + i] == k && b->meta_h[1 + 32 + i] == ids[k];
                i++;
            }
        }
        if (n_cpu > 0) ok = ok && memcmp(b->xrow_h, xn, sizeof xn) == 0;
        if (!ok && !bad_cls)
            snprintf(det_cls, sizeof det_cls, "it %d (share %u/65536): n_cpu %d on the device, %d by the rule; carry %u vs %u",
                     it, q, b->meta_h[0], n_cpu, carry_d, carry_h);
        bad_cls += !ok;
        // the GPU branch's rows equal the per-expert reference; CPU ranks get the reference rows as "CPU output"
        CK(cudaMemcpy(yfull, b->yfull, sizeof yfull, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(y, b->y, sizeof y, cudaMemcpyDeviceToHost));
        for (int k = 0; k < K; k++) {
            int at;
            if (n_cpu > 0 && cls[k] != ST_HY_CPU && !bitwise_eq(y + k * D, yfull + k * D, D, &at)) bad_rows++;
            for (int i = 0; i < D; i++) b->ycpu_h[k * D + i] = cls[k] == ST_HY_CPU ? yfull[k * D + i] : NAN;
        }
        ST(st_cuda_hy_combine(b->ids_gpu, b->wts, b->y, b->ycpu_d, K, D, b->out, b->x, st));
        CK(cudaStreamSynchronize(st));
        CK(cudaMemcpy(ref, b->ref, sizeof ref, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(out, b->out, sizeof out, cudaMemcpyDeviceToHost));
        int at = -1;
        if (!bitwise_eq(out, ref, D, &at)) {
            if (!bad_eq)
                snprintf(det_eq, sizeof det_eq, "it %d (%d CPU ranks): out[%d] = %.9g, fused %.9g", it, n_cpu, at,
                         out[at], ref[at]);
            bad_eq++;
        }
    }
    char d[320];
    snprintf(d, sizeof d, "%d routings, %ld CPU misses%s%s", reps, n_cpu_total, det_cls[0] ? "; " : "", det_cls);
    report("classify == host rule (ids_gpu, export, carry, counter)", bad_cls || n_cpu_total == 0, d);
    snprintf(d, sizeof d, "%d routings, %d GPU rows differ from the per-expert reference%s%s", reps, bad_rows,
             det_eq[0] ? "; " : "", det_eq);
    report("split (GPU branch + CPU rows + combine) == fused decode kernels, bitwise", bad_eq || bad_rows, d);
}

// ---- 3: the captured graph with a host node ------------------------------------------------------------------

typedef struct {
    const layer *L;
    bufs *b;
    int failed;
    long n_cpu;
} host_ctx;

static void CUDART_CB host_node(void *ud) {
    host_ctx *h = ud;
    const int n = h->b->meta_h[0];
    for (int i = 0; i < n; i++) {
        const int rank = h->b->meta_h[1 + i], e = h->b->meta_h[1 + 32 + i];
        if (rank < 0 || rank >= K || e < 0 || e >= E || cpu_expert(h->L, e, h->b->xrow_h, h->b->ycpu_h + rank * D))
            h->failed = 1;
    }
    h->n_cpu += n > 0 ? n : 0;
}

// The doorbell's host thread (as engine/gpu_hybrid.c's): on a new bell[0], the host node's work, then bell[1].
typedef struct {
    host_ctx *hc;
    volatile uint32_t *bell;
    uint32_t seen;  // bell[0] before the thread starts (the first replay may ring before it runs)
    atomic_int stop;
} bell_ctx;

static void *bell_main(void *ud) {
    bell_ctx *bc = ud;
    uint32_t seen = bc->seen;
    while (!atomic_load(&bc->stop)) {
        const uint32_t s = bc->bell[0];
        if (s == seen) continue;
        atomic_thread_fence(memory_order_acquire);
        seen = s;
        if (bc->bell[2] != 0) bc->hc->failed = 1;  // the only layer here is 0
        host_node(bc->hc);
        atomic_thread_fence(memory_order_release);
        bc->bell[1] = s;
    }
    return NULL;
}

static void test_graph(const layer *L, st_cuda_ctx *ctx, bufs *b, st_rng *r, cudaStream_t st, int reps, int bell) {
    cudaStream_t side;
    cudaEvent_t fork, join;
    CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    host_ctx hc = {L, b, 0, 0};
    const uint32_t q = ST_HY_Q16 / 2;
    uint32_t *bell_h = NULL, *bell_d = NULL, *seq_d = NULL;
    unsigned long long *wait_d = NULL;  // the combine's waits (ns)
    bell_ctx bc;
    pthread_t thr;
    if (bell) {
        CK(cudaHostAlloc((void **)&bell_h, 4 * sizeof(uint32_t), cudaHostAllocMapped));
        CK(cudaHostGetDevicePointer((void **)&bell_d, bell_h, 0));
        memset(bell_h, 0, 4 * sizeof(uint32_t));
        CK(cudaMalloc((void **)&seq_d, sizeof(uint32_t)));
        CK(cudaMemset(seq_d, 0, sizeof(uint32_t)));
        CK(cudaMalloc((void **)&wait_d, sizeof *wait_d));
        CK(cudaMemset(wait_d, 0, sizeof *wait_d));
        bc.hc = &hc, bc.bell = bell_h, bc.seen = 0;
        atomic_store(&bc.stop, 0);
        if (pthread_create(&thr, NULL, bell_main, &bc)) {
            printf("FAIL pthread_create\n");
            exit(1);
        }
    }
    // capture: quantize, classify, fork -> host node, GPU branch, join, combine (doorbell: classify rings, the
    // combine waits for the thread's answer; no fork or join)
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    ST(st_cuda_quantize_act(ctx, st_cuda_act_format(GU_TYPE), b->xn, b->xq, 1, D, st));
    if (bell) {
        ST(st_cuda_hy_classify_bell(b->ids, K, E, L->tab_d, L->vram, L->vram + L->rec_bytes * E, q, b->carry,
                                    b->ids_gpu, b->meta_d, b->xn, b->xrow_d, D, b->cnt, seq_d, bell_d, 0, st));
        gpu_branch(L, b, st);
        ST(st_cuda_hy_combine_bell(b->ids_gpu, b->wts, b->y, b->ycpu_d, K, D, b->out, b->x, seq_d, bell_d, wait_d,
                                     st));
    } else {
        classify(L, b, q, st);
        CK(cudaEventRecord(fork, st));
        CK(cudaStreamWaitEvent(side, fork, 0));
        CK(cudaLaunchHostFunc(side, host_node, &hc));
        CK(cudaEventRecord(join, side));
        gpu_branch(L, b, st);
        CK(cudaStreamWaitEvent(st, join, 0));
        ST(st_cuda_hy_combine(b->ids_gpu, b->wts, b->y, b->ycpu_d, K, D, b->out, b->x, st));
    }
    CK(cudaStreamEndCapture(st, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    int32_t ids[K], ids_gpu[K];
    float wts[K], x[D], xn[D], ref[D], out[D], yfull[K * D];
    int bad = 0, bad_exact = 0, n_with = 0, n_without = 0, bad_rows = 0;
    double worst = 0, worst_row = 0, replay_s = 0, first_timeout_ms = 0;
    int first_timeout_at = -1;
    for (int it = 0; it < reps; it++) {
        fresh_inputs(b, r, ids, wts, x, xn, st);
        for (int i = 0; i < K * D; i++) b->ycpu_h[i] = NAN;  // CPU rows must be written by this replay
        const long before = hc.n_cpu;
        const double t0 = st_now();
        CK(cudaGraphLaunch(exec, st));
        CK(cudaStreamSynchronize(st));
        replay_s += st_now() - t0;
        if (bell && bell_h[3] && !first_timeout_ms) {  // a step of the device clock ends at once, a lost ring in 5 s
            first_timeout_ms = 1e3 * (st_now() - t0);
            first_timeout_at = it;
        }
        CK(cudaMemcpy(out, b->out, sizeof out, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(ids_gpu, b->ids_gpu, sizeof ids_gpu, cudaMemcpyDeviceToHost));
        reference(L, ctx, b, st);
        CK(cudaStreamSynchronize(st));
        CK(cudaMemcpy(ref, b->ref, sizeof ref, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(yfull, b->yfull, sizeof yfull, cudaMemcpyDeviceToHost));
        const int cpu_here = hc.n_cpu > before;
        n_with += cpu_here;
        n_without += !cpu_here;
        double scale = 0, maxd = 0;
        for (int i = 0; i < D; i++) {
            const double o = fabs((double)ref[i] - (double)x[i]);
            if (o > scale) scale = o;
            const double dd = fabs((double)out[i] - (double)ref[i]);
            maxd = gpu_max_nan(maxd, dd);
        }
        const double rel = maxd / (scale > 0 ? scale : 1);
        worst = gpu_max_nan(worst, rel);
        if (!(rel <= 1e-2)) bad++;
        int at;
        if (!cpu_here && !bitwise_eq(out, ref, D, &at)) bad_exact++;
        for (int k = 0; k < K; k++) {  // the CPU's expert rows against the GPU's (the same int8 math, other sum order)
            if (ids_gpu[k] >= 0) continue;
            double m = 0, s = 0;
            for (int i = 0; i < D; i++) {
                const double dd = fabs((double)b->ycpu_h[k * D + i] - (double)yfull[k * D + i]);
                m = gpu_max_nan(m, dd);
                if (fabs((double)yfull[k * D + i]) > s) s = fabs((double)yfull[k * D + i]);
            }
            const double rr = m / (s > 0 ? s : 1);
            worst_row = gpu_max_nan(worst_row, rr);
            if (!(rr <= 1e-2)) bad_rows++;
        }
    }
    char d[400];
    snprintf(d, sizeof d, "%d replays (%d with CPU misses, %ld CPU experts), max |out - fused| / max|moe| = %.2e "
             "(bound 1e-2: an int8 rounding may flip), %d without CPU misses not bitwise%s",
             reps, n_with, hc.n_cpu, worst, bad_exact, hc.failed ? ", HOST NODE FAILED" : "");
    const int timed_out = bell && bell_h[3] != 0;
    if (timed_out) {
        char t[96];
        snprintf(t, sizeof t, ", THE COMBINE TIMED OUT WAITING (first in replay %d, which took %.1f ms)",
                 first_timeout_at, first_timeout_ms);
        strncat(d, t, sizeof d - strlen(d) - 1);
    }
    report(bell ? "graph: doorbell thread (no host node), output vs fused" : "graph: host node fork/join, output vs fused",
           bad || bad_exact || hc.failed || n_with == 0 || timed_out, d);
    snprintf(d, sizeof d, "max relative row difference %.2e (bound 1e-2), %d rows over", worst_row, bad_rows);
    report(bell ? "graph (doorbell): CPU expert rows vs the GPU's per-expert outputs"
                : "graph: CPU expert rows vs the GPU's per-expert outputs",
           bad_rows || n_with == 0, d);
    if (bell) {  // the combine's wait counter: its total lies within the replays' wall time
        unsigned long long waited = 0;
        CK(cudaMemcpy(&waited, wait_d, sizeof waited, cudaMemcpyDeviceToHost));
        snprintf(d, sizeof d, "%.1f us waited per replay with CPU misses (replays took %.1f us each)",
                 n_with ? (double)waited / 1e3 / n_with : 0.0, 1e6 * replay_s / reps);
        report("graph (doorbell): the combine's wait counter", (double)waited > replay_s * 1e9 || n_with == 0, d);
        CK(cudaFree(wait_d));
        atomic_store(&bc.stop, 1);
        pthread_join(thr, NULL);
        CK(cudaFreeHost(bell_h));
        CK(cudaFree(seq_d));
    }
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaEventDestroy(fork));
    CK(cudaEventDestroy(join));
    CK(cudaStreamDestroy(side));
}

// ---- 4: the split folded into the router and down launches (STRATA_HY_SPLIT_FUSED) ---------------------------
//
// Router weights W [E][D] (f32) route a fresh xn per replay. Path A, the separate launches the engine runs by
// default: st_cuda_router_topk_count (with the count) -> st_cuda_hy_classify_bell -> glu_q -> down_split ->
// st_cuda_hy_combine_bell. Path B: st_cuda_router_topk_split -> glu_q -> st_cuda_moe_down_join. Each path has its own
// carry, counters, export and output; a host thread answers every ring at once, and the CPU rows are the same
// random rows for both, so B must equal A bit for bit: ids, weights, ids_gpu, the export, carry, counters, out.
// Path C (STRATA_HY_GLU_SIDE), on the replays where every miss is the CPU's or none is: st_cuda_router_logits ->
// st_cuda_moe_route_glu_hy (its side block routes, counts, classifies and rings; the other blocks route and skip
// the CPU's ranks) -> st_cuda_moe_down_join (or _down_sum without a CPU share), equal to A bit for bit on that
// replay: ids, weights, ids_gpu, export, the replay's counts, out.

typedef struct {
    volatile uint32_t *bell;
    atomic_int stop;
} answer_ctx;

static void *answer_main(void *ud) {  // answers each ring at once (the CPU rows are already in place)
    answer_ctx *a = ud;
    while (!atomic_load(&a->stop)) {
        const uint32_t s = a->bell[0];
        if (a->bell[1] != s) {
            atomic_thread_fence(memory_order_seq_cst);
            a->bell[1] = s;
        }
    }
    return NULL;
}

typedef struct {  // one path's own state
    int32_t *ids, *ids_gpu;
    float *wts, *out;
    uint32_t *carry, *cnt, *counts, *sel_miss;
    int32_t *meta_h, *meta_d;
    float *hx_h, *hx_d;
} fused_path;

static void make_path(fused_path *p) {
    CK(cudaMalloc((void **)&p->ids, sizeof(int32_t) * K));
    CK(cudaMalloc((void **)&p->ids_gpu, sizeof(int32_t) * K));
    CK(cudaMalloc((void **)&p->wts, sizeof(float) * K));
    CK(cudaMalloc((void **)&p->out, sizeof(float) * D));
    CK(cudaMalloc((void **)&p->carry, sizeof(uint32_t)));
    CK(cudaMalloc((void **)&p->cnt, sizeof(uint32_t)));
    CK(cudaMalloc((void **)&p->counts, sizeof(uint32_t) * E));
    CK(cudaMalloc((void **)&p->sel_miss, sizeof(uint32_t) * 2));
    CK(cudaMemset(p->carry, 0, sizeof(uint32_t)));
    CK(cudaMemset(p->cnt, 0, sizeof(uint32_t)));
    CK(cudaMemset(p->counts, 0, sizeof(uint32_t) * E));
    CK(cudaMemset(p->sel_miss, 0, sizeof(uint32_t) * 2));
    CK(cudaHostAlloc((void **)&p->meta_h, sizeof(int32_t) * ST_HY_META_INTS, cudaHostAllocMapped));
    CK(cudaHostAlloc((void **)&p->hx_h, sizeof(float) * D, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void **)&p->meta_d, p->meta_h, 0));
    CK(cudaHostGetDevicePointer((void **)&p->hx_d, p->hx_h, 0));
}

// A path's carry and counters as one row: [0] carry, [1] CPU count, [2, 2 + E) counts, [2 + E, 2 + E + 2) sel_miss.
#define PATH_COUNTERS (2 + E + 2)
static void read_counters(const fused_path *p, uint32_t *c) {
    CK(cudaMemcpy(c, p->carry, sizeof(uint32_t), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(c + 1, p->cnt, sizeof(uint32_t), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(c + 2, p->counts, sizeof(uint32_t) * E, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(c + 2 + E, p->sel_miss, sizeof(uint32_t) * 2, cudaMemcpyDeviceToHost));
}

static void free_path(fused_path *p) {
    cudaFree(p->ids), cudaFree(p->ids_gpu), cudaFree(p->wts), cudaFree(p->out), cudaFree(p->carry);
    cudaFree(p->cnt), cudaFree(p->counts), cudaFree(p->sel_miss);
    cudaFreeHost(p->meta_h), cudaFreeHost(p->hx_h);
}

static void test_fused(const layer *L, st_cuda_ctx *ctx, bufs *b, st_rng *r, cudaStream_t st, int reps) {
    float *W = malloc(sizeof(float) * E * D), *W_d, *logits_d;
    for (int i = 0; i < E * D; i++) W[i] = 0.05f * st_rng_normal(r);
    CK(cudaMalloc((void **)&W_d, sizeof(float) * E * D));
    CK(cudaMalloc((void **)&logits_d, sizeof(float) * E));
    CK(cudaMemcpy(W_d, W, sizeof(float) * E * D, cudaMemcpyHostToDevice));
    const size_t cnt_bytes = st_cuda_dec_counters_bytes(FF, K, 1);
    int32_t *rcnt;  // the router's own last-block counter
    CK(cudaMalloc((void **)&rcnt, cnt_bytes));
    CK(cudaMemset(rcnt, 0, cnt_bytes));
    uint32_t *bell_h, *bell_d, *seq_d, *leader_d;
    unsigned long long *wait_d;
    CK(cudaHostAlloc((void **)&bell_h, 4 * sizeof(uint32_t), cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void **)&bell_d, bell_h, 0));
    memset(bell_h, 0, 4 * sizeof(uint32_t));
    CK(cudaMalloc((void **)&seq_d, sizeof(uint32_t)));
    CK(cudaMalloc((void **)&leader_d, 3 * sizeof(uint32_t)));
    CK(cudaMalloc((void **)&wait_d, sizeof *wait_d));
    CK(cudaMemset(seq_d, 0, sizeof(uint32_t)));
    CK(cudaMemset(leader_d, 0, 3 * sizeof(uint32_t)));
    CK(cudaMemset(wait_d, 0, sizeof *wait_d));
    answer_ctx ac;
    ac.bell = bell_h;
    atomic_store(&ac.stop, 0);
    pthread_t thr;
    if (pthread_create(&thr, NULL, answer_main, &ac)) {
        printf("FAIL pthread_create\n");
        exit(1);
    }
    fused_path pa, pb, pc;
    make_path(&pa);
    make_path(&pb);
    make_path(&pc);
    int bad_c = 0, n_side = 0, n_side_cpu = 0, n_snap = 0;
    char det_c[256] = "";
    uint8_t *snap_d = NULL;  // every other side-block replay decides from the router's snapshot (STRATA_HY_SNAP)
    int32_t *prog_d = NULL;
    CK(cudaMalloc((void **)&snap_d, E));
    CK(cudaMalloc((void **)&prog_d, sizeof(int32_t)));
    const int dfmt = st_cuda_act_format(DN_TYPE);
    int bad = 0, n_cpu_layers = 0;
    char det[256] = "";
    float x[D], xn[D];
    for (int it = 0; it < reps; it++) {
        // every fourth replay without CPU ranks, every fourth with every miss to the CPU (F 0)
        const uint32_t q = it % 4 == 3 ? 0 : it % 4 == 2 ? ST_HY_Q16 : ST_HY_Q16 / 2;
        for (int i = 0; i < D; i++) x[i] = st_rng_normal(r), xn[i] = st_rng_normal(r);
        for (int i = 0; i < K * D; i++) b->ycpu_h[i] = st_rng_normal(r);  // "the CPU's rows" of every rank
        CK(cudaMemcpy(b->x, x, sizeof x, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(b->xn, xn, sizeof xn, cudaMemcpyHostToDevice));
        ST(st_cuda_quantize_act(ctx, st_cuda_act_format(GU_TYPE), b->xn, b->xq, 1, D, st));
        uint32_t ca0[PATH_COUNTERS];  // A's counters before this replay (path C's are zeroed each replay)
        read_counters(&pa, ca0);
        fused_path *ps[2] = {&pa, &pb};
        for (int w = 0; w < 2; w++) {
            fused_path *p = ps[w];
            for (int i = 0; i < ST_HY_META_INTS; i++) p->meta_h[i] = -7;
            CK(cudaMemsetAsync(p->out, 0xff, sizeof(float) * D, st));
            st_hy_count_args cnt;
            memset(&cnt, 0, sizeof cnt);
            cnt.n_expert = E, cnt.table = L->tab_d, cnt.vram_lo = L->vram, cnt.vram_hi = L->vram + L->rec_bytes * E;
            cnt.counts = p->counts, cnt.sel_miss = p->sel_miss;
            if (w == 0) {
                ST(st_cuda_router_topk_count(ST_TYPE_F32, W_d, D, E, b->xn, 1, K, 1, logits_d, p->ids, p->wts, rcnt,
                                             &cnt, st));
                ST(st_cuda_hy_classify_bell(p->ids, K, E, L->tab_d, L->vram, L->vram + L->rec_bytes * E, q, p->carry,
                                            p->ids_gpu, p->meta_d, b->xn, p->hx_d, D, p->cnt, seq_d, bell_d, 0, st));
                ST(st_cuda_moe_glu_q(GU_TYPE, L->tab_d, E, D, FF, b->xq, p->ids_gpu, 1, K, b->act, b->actq, dfmt,
                                     b->counters, st));
                ST(st_cuda_moe_down_split(DN_TYPE, L->tab_d, E, D, FF, b->actq, p->ids_gpu, p->wts, K, p->out, b->x,
                                          b->y, st));
                ST(st_cuda_hy_combine_bell(p->ids_gpu, p->wts, b->y, b->ycpu_d, K, D, p->out, b->x, seq_d, bell_d,
                                           NULL, st));
            } else {
                const st_hy_split_args sa = {E, L->tab_d, L->vram, L->vram + L->rec_bytes * E, q, p->carry,
                                             p->ids_gpu, p->meta_d, b->xn, p->hx_d, D, p->cnt, seq_d, bell_d, 0, NULL};
                const st_hy_join_args j = {b->ycpu_d, seq_d, bell_d, wait_d, leader_d};
                ST(st_cuda_router_topk_split(ST_TYPE_F32, W_d, D, E, b->xn, K, 1, logits_d, p->ids, p->wts, rcnt, &cnt,
                                             &sa, st));
                ST(st_cuda_moe_glu_q(GU_TYPE, L->tab_d, E, D, FF, b->xq, p->ids_gpu, 1, K, b->act, b->actq, dfmt,
                                     b->counters, st));
                ST(st_cuda_moe_down_join(DN_TYPE, L->tab_d, E, D, FF, b->actq, p->ids_gpu, p->wts, K, p->out, b->x, &j,
                                         st));
            }
            CK(cudaStreamSynchronize(st));
        }
        int32_t ia[K], ib[K], ga[K], gb[K];
        float wa[K], wb[K], oa[D], ob[D];
        uint32_t ca[PATH_COUNTERS], cb[PATH_COUNTERS];
        CK(cudaMemcpy(ia, pa.ids, sizeof ia, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(ib, pb.ids, sizeof ib, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(ga, pa.ids_gpu, sizeof ga, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gb, pb.ids_gpu, sizeof gb, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(wa, pa.wts, sizeof wa, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(wb, pb.wts, sizeof wb, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(oa, pa.out, sizeof oa, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(ob, pb.out, sizeof ob, cudaMemcpyDeviceToHost));
        fused_path *ps2[2] = {&pa, &pb};
        uint32_t *cs[2] = {ca, cb};
        for (int w = 0; w < 2; w++) {
            read_counters(ps2[w], cs[w]);
        }
        const int n_cpu = pa.meta_h[0] > 0 ? pa.meta_h[0] : 0;  // (the doorbell writes meta[0] only with CPU ranks)
        n_cpu_layers += n_cpu > 0;
        if (q == ST_HY_Q16 || q == 0) {  // path C on this replay
            fused_path *p = &pc;
            const int split = q == ST_HY_Q16;
            for (int i = 0; i < ST_HY_META_INTS; i++) p->meta_h[i] = -7;
            CK(cudaMemsetAsync(p->out, 0xff, sizeof(float) * D, st));
            CK(cudaMemsetAsync(p->ids_gpu, 0x7f, sizeof(int32_t) * K, st));
            CK(cudaMemcpyAsync(p->carry, &ca0[0], sizeof(uint32_t), cudaMemcpyHostToDevice, st));
            CK(cudaMemsetAsync(p->cnt, 0, sizeof(uint32_t), st));
            CK(cudaMemsetAsync(p->counts, 0, sizeof(uint32_t) * E, st));
            CK(cudaMemsetAsync(p->sel_miss, 0, sizeof(uint32_t) * 2, st));
            st_hy_count_args cnt;
            memset(&cnt, 0, sizeof cnt);
            cnt.n_expert = E, cnt.table = L->tab_d, cnt.vram_lo = L->vram, cnt.vram_hi = L->vram + L->rec_bytes * E;
            cnt.counts = p->counts, cnt.sel_miss = p->sel_miss;
            const int use_snap = n_side % 2;
            const st_hy_split_args sa = {E, L->tab_d, L->vram, L->vram + L->rec_bytes * E, q, p->carry,
                                         p->ids_gpu, p->meta_d, b->xn, p->hx_d, D, p->cnt, seq_d, bell_d, 0,
                                         use_snap ? snap_d : NULL};
            const st_hy_join_args j = {b->ycpu_d, seq_d, bell_d, wait_d, leader_d};
            const st_hy_snap_args sn = {L->tab_d, L->vram, L->vram + L->rec_bytes * E, snap_d, prog_d, 7};
            CK(cudaMemsetAsync(snap_d, 0x55, E, st));     // poison: an unwritten entry reads as neither 0 nor 1
            CK(cudaMemsetAsync(prog_d, 0xff, sizeof(int32_t), st));
            ST(st_cuda_router_logits(ST_TYPE_F32, W_d, D, E, b->xn, logits_d, use_snap ? &sn : NULL, st));
            ST(st_cuda_moe_route_glu_hy(GU_TYPE, L->tab_d, E, D, FF, b->xq, logits_d, 1, K, p->ids, p->wts, b->act,
                                        b->actq, dfmt, b->counters, &cnt, split ? &sa : NULL, st));
            if (split)
                ST(st_cuda_moe_down_join(DN_TYPE, L->tab_d, E, D, FF, b->actq, p->ids_gpu, p->wts, K, p->out, b->x,
                                         &j, st));
            else
                ST(st_cuda_moe_down_sum(DN_TYPE, L->tab_d, E, D, FF, b->actq, p->ids, p->wts, 1, K, p->out, b->x,
                                        st));
            CK(cudaStreamSynchronize(st));
            if (use_snap) {  // the snapshot: every entry written, 1 exactly where the gate lies in VRAM; progress set
                uint8_t sh[E];
                const void *tab[E * 3];
                int32_t prog = 0;
                CK(cudaMemcpy(sh, snap_d, E, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(tab, L->tab_d, sizeof tab, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(&prog, prog_d, sizeof prog, cudaMemcpyDeviceToHost));
                int snap_ok = prog == 7;
                for (int e = 0; e < E; e++) {
                    const uint8_t *gp = (const uint8_t *)tab[3 * e];
                    snap_ok &= sh[e] == (gp >= L->vram && gp < L->vram + L->rec_bytes * E);
                }
                if (!snap_ok && !bad_c) snprintf(det_c, sizeof det_c, "replay %d: the snapshot or progress word", it);
                bad_c += !snap_ok;
                n_snap++;
            }
            int32_t ic[K], gc[K];
            float wc[K], oc[D];
            uint32_t cc[PATH_COUNTERS], ca1[PATH_COUNTERS];
            CK(cudaMemcpy(ic, pc.ids, sizeof ic, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(gc, pc.ids_gpu, sizeof gc, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(wc, pc.wts, sizeof wc, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(oc, pc.out, sizeof oc, cudaMemcpyDeviceToHost));
            read_counters(&pc, cc);
            read_counters(&pa, ca1);
            int same_counts = 1;  // the replay's deltas (the carry: its value)
            for (int i = 0; i < PATH_COUNTERS; i++)
                if (i == 0 ? cc[0] != ca1[0] : i == 1 && !split ? cc[1] != 0 : cc[i] != ca1[i] - ca0[i])
                    same_counts = 0;
            const int same_route = !memcmp(ia, ic, sizeof ia) && !memcmp(wa, wc, sizeof wa) &&
                                   (!split || !memcmp(ga, gc, sizeof ga));
            const int same_export = !split || (!memcmp(pa.meta_h, pc.meta_h, sizeof(int32_t) * (1 + n_cpu)) &&
                                               !memcmp(pa.meta_h + 33, pc.meta_h + 33, sizeof(int32_t) * n_cpu) &&
                                               (n_cpu == 0 || !memcmp(pa.hx_h, pc.hx_h, sizeof(float) * D)));
            int at_c = -1;
            const int same_out = bitwise_eq(oc, oa, D, &at_c);
            n_side++;
            n_side_cpu += split && n_cpu > 0;
            if (!(same_route && same_export && same_counts && same_out)) {
                if (!bad_c)
                    snprintf(det_c, sizeof det_c, "replay %d (%s, %d CPU ranks): route %s, export %s, counts %s, "
                             "out %s", it, split ? "F 0" : "no CPU share", n_cpu, same_route ? "same" : "DIFFERS",
                             same_export ? "same" : "DIFFERS", same_counts ? "same" : "DIFFER",
                             same_out ? "same" : "DIFFERS");
                bad_c++;
            }
        }
        int at = -1;
        const int same_route = !memcmp(ia, ib, sizeof ia) && !memcmp(wa, wb, sizeof wa) && !memcmp(ga, gb, sizeof ga);
        const int same_export = !memcmp(pa.meta_h, pb.meta_h, sizeof(int32_t) * (1 + n_cpu)) &&
                                !memcmp(pa.meta_h + 33, pb.meta_h + 33, sizeof(int32_t) * (n_cpu > 0 ? n_cpu : 0)) &&
                                (n_cpu == 0 || !memcmp(pa.hx_h, pb.hx_h, sizeof(float) * D));
        const int same_counts = !memcmp(ca, cb, sizeof ca);
        const int same_out = bitwise_eq(ob, oa, D, &at);
        if (!(same_route && same_export && same_counts && same_out)) {
            if (!bad)
                snprintf(det, sizeof det, "replay %d (%d CPU ranks): route %s, export %s, counters %s, out %s%s", it,
                         n_cpu, same_route ? "same" : "DIFFERS", same_export ? "same" : "DIFFERS",
                         same_counts ? "same" : "DIFFER", same_out ? "same" : "DIFFERS",
                         same_out ? "" : " (first at an element)");
            bad++;
        }
    }
    const int timed_out = bell_h[3] != 0;
    unsigned long long waited = 0;
    CK(cudaMemcpy(&waited, wait_d, sizeof waited, cudaMemcpyDeviceToHost));
    char d[400];
    snprintf(d, sizeof d, "%d replays, %d with CPU ranks, %.1f us waited per such replay%s%s%s", reps, n_cpu_layers,
             n_cpu_layers ? (double)waited / 1e3 / n_cpu_layers : 0.0, timed_out ? ", TIMED OUT" : "",
             det[0] ? "; " : "", det);
    report("fused split (router classifies, down joins) == the separate launches, bitwise", bad || timed_out ||
               n_cpu_layers == 0 || n_cpu_layers == reps, d);
    snprintf(d, sizeof d, "%d replays (%d deciding from the router's snapshot), %d with CPU ranks%s%s", n_side,
             n_snap, n_side_cpu, det_c[0] ? "; " : "", det_c);
    report("side block (GLU launch routes, counts, classifies, rings; live table or the router's snapshot) == the "
           "separate launches, bitwise", bad_c || bell_h[3] != 0 || n_side_cpu == 0 || n_snap == 0, d);
    cudaFree(snap_d), cudaFree(prog_d);
    free_path(&pc);
    atomic_store(&ac.stop, 1);
    pthread_join(thr, NULL);
    free_path(&pa), free_path(&pb);
    cudaFreeHost(bell_h), cudaFree(seq_d), cudaFree(leader_d), cudaFree(wait_d), cudaFree(rcnt), cudaFree(W_d),
        cudaFree(logits_d);
    free(W);
}

int main(int argc, char **argv) {
    int quick = 0;
    if (gpu_test_args(argc, argv, &quick, NULL)) return 2;
    g_seed = gpu_test_seed(8);
    printf("test_gpu_hycpu: seed %llu%s\n", (unsigned long long)g_seed, quick ? " (quick)" : "");
    st_cuda_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    if (st_cuda_init(&ctx, 0, 1, 0)) {
        printf("FAIL st_cuda_init: %s\n", st_errmsg());
        return 1;
    }
    st_rng r;
    st_rng_init(&r, g_seed, 0);
    layer L;
    bufs b;
    make_layer(&L, &r);
    make_bufs(&b);
    cudaStream_t st = ctx.streams[0];
    test_split(&L, &ctx, &b, &r, st, quick ? 9 : 60);
    test_graph(&L, &ctx, &b, &r, st, quick ? 6 : 40, 0);
    test_graph(&L, &ctx, &b, &r, st, quick ? 6 : 40, 1);
    test_fused(&L, &ctx, &b, &r, st, quick ? 8 : 60);
    if (g_fail) printf("FAILED: %d checks (seed %llu; rerun with STRATA_SEED=%llu)\n", g_fail,
                       (unsigned long long)g_seed, (unsigned long long)g_seed);
    else printf("ALL PASS (seed %llu)\n", (unsigned long long)g_seed);
    st_cuda_destroy(&ctx);
    return g_fail ? 1 : 0;
}
