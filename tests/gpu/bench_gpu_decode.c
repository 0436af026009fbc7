// Decode-step benchmark of one Qwen3-30B-A3B-shaped layer (Q4_K_M types), kernel by kernel and as a whole, for the
// operator-by-operator path (v1: what step() in engine/gpu.c launched before the fused kernels, 18 launches), the
// first fused path (v2, 11 launches) and the round-2 path (v3: step() now, 9 launches: split-adaptive attention
// with the last-block merge and the O input quantization fused in, O through mmvq_multi, GLU without its
// last-block quantization, down kernel quantizing its input in its prologue), v3 measured without and with
// programmatic dependent launch (PDL). v1 and v2 run with PDL off (as they were measured before). Each v3 kernel
// line carries its prediction. Informational (no pass/fail on speed); exits non-zero only when a CUDA call fails.
//
// Shape: n_embd 2048, 32 query / 4 KV heads of 128, 128 experts (top 8) of n_ff 768, f16 KV cache. Types as
// model/mix.c gives Q4_K_M for n_expert 128: Q/K/O, gate/up Q4_K; V and down Q6_K on the "more bits" layers (half
// of the 48), Q4_K on the others, so the copies alternate between the two. The router is F32.
//
// Weights: NC (default 8) layer copies, each with its own router rows (so each copy picks its own experts) and
// KV cache, and the kernels cycle through the copies, so every weight byte comes from HBM (a copy is ~400 MB, L2 is
// 50 MB). Per kernel: a CUDA graph of that kernel over the copies (x REPS), replayed; time per launch, and GB/s of
// weight (and KV) bytes. Per layer: a graph of the whole layer sequence over the copies (= NC layers). Both at KV
// depth 256 and 16384. Also the attention at depth 16384 with other split counts, and the LM head, to predict
// tok/s = 1e6 / (48 x layer + head).
//   bench_gpu_decode [--copies N]
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda/attention.h"
#include "cuda/decode.h"
#include "cuda/matvec_f32.h"
#include "cuda/mmvq.h"
#include "cuda/ops.h"
#include "cuda/qblock.h"
#include "cuda/quantize_act.h"
#include "cuda/runtime.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/rng.h"

#define D 2048
#define NH 32
#define NKV 4
#define HD 128
#define E 128
#define K 8
#define F 768
#define NCTX 16385
#define VOCAB 151936
#define MAXC 32

#define CK(call)                                                                                                  \
    do {                                                                                                          \
        cudaError_t e_ = (call);                                                                                  \
        if (e_ != cudaSuccess) {                                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));              \
            exit(2);                                                                                              \
        }                                                                                                         \
    } while (0)
#define CKL(call)                                                                                                 \
    do {                                                                                                          \
        if ((call) != 0) {                                                                                        \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, st_errmsg());                          \
            exit(2);                                                                                              \
        }                                                                                                         \
    } while (0)

typedef struct {
    int t_v, t_down;                       // V and down types of this copy (Q6_K or Q4_K)
    float *attn_norm, *ffn_norm, *q_norm, *k_norm;
    uint8_t *wq, *wk, *wv, *wo;            // [rows][D] (wo: [D][NH*HD])
    float *router;                         // [E][D] f32
    uint8_t *gate, *up, *down;             // stacks [E][F][D], [E][F][D], [E][D][F]
    const void **table;                    // device [E][3] expert addresses
    void *kc, *vc;                         // f16 [NCTX][NKV*HD]
} lcopy;

static st_cuda_ctx g_ctx;
static cudaStream_t g_st;
static lcopy g_L[MAXC];
static int g_nc = 8;
// Shared activations (as the session's scratch).
static float *x, *xn, *q, *k, *v, *attn, *ffn_a, *ffn_out, *logits, *wts, *ws_attn;
static void *ws_attn2;  // st_cuda_attn_dec workspace (zeroed: counters)
static int g_split2;
static int32_t *ids, *xrow, *dpos, *cnt;
static float *rope_cs;  // [NCTX][HD] RoPE table (zeros: the timing needs no values)
static void *xq, *xq2;
static int g_split;

static void *dalloc(size_t n) {
    void *p = NULL;
    CK(cudaMalloc(&p, n));
    CK(cudaMemset(p, 0, n));
    return p;
}
static void *upload(const void *h, size_t n) {
    void *p = dalloc(n);
    CK(cudaMemcpy(p, h, n, cudaMemcpyHostToDevice));
    return p;
}
// Device buffer of `rows` rows of `type` and ne0, filled by tiling one random block pattern of up to 1 MiB.
static uint8_t *rand_dev(int type, int64_t rows, int64_t ne0, st_rng *r) {
    const st_type_info *ti = st_type_get(type);
    const size_t rb = st_row_size(type, ne0), total = rb * (size_t)rows;
    size_t prow = (1u << 20) / rb;
    if (prow < 1) prow = 1;
    if (prow > (size_t)rows) prow = (size_t)rows;
    uint8_t *h = malloc(rb * prow);
    if (!h || st_random_blocks(type, h, (int64_t)prow * ne0 / ti->block_size, 1.0f, r)) {
        fprintf(stderr, "random %s weights: %s\n", ti->name, h ? st_errmsg() : "out of memory");
        exit(2);
    }
    uint8_t *d = dalloc(total);
    for (size_t off = 0; off < total; off += rb * prow)
        CK(cudaMemcpy(d + off, h, total - off < rb * prow ? total - off : rb * prow, cudaMemcpyHostToDevice));
    free(h);
    return d;
}
static float *rand_vec(int64_t n, float mean, float sd, st_rng *r) {
    float *h = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) h[i] = mean + sd * st_rng_normal(r);
    float *d = upload(h, sizeof(float) * (size_t)n);
    free(h);
    return d;
}

static void make_copies(st_rng *r) {
    for (int c = 0; c < g_nc; c++) {
        lcopy *L = &g_L[c];
        L->t_v = L->t_down = c % 2 == 0 ? ST_TYPE_Q6_K : ST_TYPE_Q4_K;
        L->attn_norm = rand_vec(D, 1.0f, 0.1f, r);
        L->ffn_norm = rand_vec(D, 1.0f, 0.1f, r);
        L->q_norm = rand_vec(HD, 1.0f, 0.1f, r);
        L->k_norm = rand_vec(HD, 1.0f, 0.1f, r);
        L->wq = rand_dev(ST_TYPE_Q4_K, NH * HD, D, r);
        L->wk = rand_dev(ST_TYPE_Q4_K, NKV * HD, D, r);
        L->wv = rand_dev(L->t_v, NKV * HD, D, r);
        L->wo = rand_dev(ST_TYPE_Q4_K, D, NH * HD, r);
        L->router = rand_vec((int64_t)E * D, 0.0f, 0.05f, r);
        L->gate = rand_dev(ST_TYPE_Q4_K, (int64_t)E * F, D, r);
        L->up = rand_dev(ST_TYPE_Q4_K, (int64_t)E * F, D, r);
        L->down = rand_dev(L->t_down, (int64_t)E * D, F, r);
        const void *tbl[E * 3];
        const size_t ge = st_row_size(ST_TYPE_Q4_K, D) * F, de = st_row_size(L->t_down, F) * D;
        for (int e = 0; e < E; e++) {
            tbl[3 * e] = L->gate + e * ge;
            tbl[3 * e + 1] = L->up + e * ge;
            tbl[3 * e + 2] = L->down + e * de;
        }
        L->table = upload(tbl, sizeof tbl);
        const size_t kvb = (size_t)NCTX * NKV * HD * 2;
        L->kc = dalloc(kvb);
        L->vc = dalloc(kvb);
        CK(cudaMemset(L->kc, 0x11, kvb));  // small finite halves
        CK(cudaMemset(L->vc, 0x11, kvb));
    }
}

// ---- the two step sequences, stage by stage ------------------------------------------------------------------

#define FMT ST_TYPE_Q8_K  // activation format of every K-quant

static const char *v1_names[] = {"rmsnorm (attn)",    "quantize x",         "mmvq Q",          "mmvq K",
                                 "mmvq V",            "qk_norm_rope_kv",    "attention (2 k.)", "quantize attn",
                                 "mmvq O",            "rmsnorm+residual",   "router matvec",   "moe_route",
                                 "quantize xn",       "mmvq_ids_glu",       "quantize glu",    "mmvq_ids down",
                                 "moe_sum+residual"};
static const char *v2_names[] = {"rmsnorm_act (attn)", "mmvq_multi Q/K/V", "qk_norm_rope_kv",  "attention (2 k.)",
                                 "quantize attn",      "mmvq O",           "rmsnorm_act+res",  "router_topk",
                                 "moe_glu_q",          "moe_down_sum+res"};
static const char *v3_names[] = {"rmsnorm_act (attn)", "mmvq_multi Q/K/V", "qk_norm_rope_kv", "attn_dec + quant",
                                 "mmvq_multi O",       "rmsnorm_act+res",  "router_topk",     "moe_glu (f32)",
                                 "moe_down_q+res"};
// Predictions for v3 (us at depth 256 / 16384, PDL on), written before the first measurement; the bench prints them
// next to the measured times.
static const char *v3_pred[] = {"3.5 (PDL: launch hidden)",       "3.5 (L2 prefetch before the wait)",
                                 "3.4 (unchanged, plain launch)", "4 / 13 (25.4 / 51.2 + 2.3 quant)",
                                 "3.0 (4.07: PDL + prefetch)",     "3.5 (5.21)",
                                 "4.0 (7.48: weights in regs early)", "7.5 (13.1: no last-block quant)",
                                 "8.5 (9.3: 4 rows in flight)"};
#define V1_N ((int)(sizeof v1_names / sizeof v1_names[0]))
#define V2_N ((int)(sizeof v2_names / sizeof v2_names[0]))
#define V3_N ((int)(sizeof v3_names / sizeof v3_names[0]))

static void attn_stage(const lcopy *L) {
    CKL(st_cuda_attn_decode(attn, q, L->kc, L->vc, 1, dpos, NH, NKV, HD, 0.08838835f, g_split, ws_attn, g_st));
}
static void rope_stage(const lcopy *L) {
    CKL(st_cuda_qk_norm_rope_kv(q, k, v, L->q_norm, L->k_norm, L->kc, L->vc, 1, dpos, 1, NH, NKV, HD, HD, 1e-6f,
                                rope_cs, 1, g_st));
}

static void v3_stage(int s, const lcopy *L) {
    switch (s) {
    case 0: CKL(st_cuda_rmsnorm_act(NULL, xq, FMT, x, NULL, L->attn_norm, 1, D, 1e-6f, g_st)); break;
    case 1: {
        const st_cuda_dec_mat m[3] = {{ST_TYPE_Q4_K, L->wq, NH * HD, q, NULL}, {ST_TYPE_Q4_K, L->wk, NKV * HD, k, NULL},
                                      {L->t_v, L->wv, NKV * HD, v, NULL}};
        CKL(st_cuda_mmvq_multi(m, 3, D, xq, g_st));
        break;
    }
    case 2: rope_stage(L); break;
    case 3:
        CKL(st_cuda_attn_dec(attn, xq, FMT, q, L->kc, L->vc, 1, dpos, NH, NKV, HD, 0.08838835f, g_split2, ws_attn2,
                             g_st));
        break;
    case 4: {
        const st_cuda_dec_mat mo = {ST_TYPE_Q4_K, L->wo, D, ffn_out, NULL};
        CKL(st_cuda_mmvq_multi(&mo, 1, NH * HD, xq, g_st));
        break;
    }
    case 5: CKL(st_cuda_rmsnorm_act(xn, xq, FMT, x, ffn_out, L->ffn_norm, 1, D, 1e-6f, g_st)); break;
    case 6: CKL(st_cuda_router_topk(ST_TYPE_F32, L->router, D, E, xn, 1, K, 1, logits, ids, wts, cnt, g_st)); break;
    case 7: CKL(st_cuda_moe_glu(ST_TYPE_Q4_K, (const void *const *)L->table, E, D, F, xq, ids, 1, K, ffn_a, g_st)); break;
    case 8:
        CKL(st_cuda_moe_down_q(L->t_down, (const void *const *)L->table, E, D, F, ffn_a, FMT, ids, wts, 1, K, x, x,
                               g_st));
        break;
    }
}

static void v1_stage(int s, const lcopy *L) {
    st_cuda_ctx *c = &g_ctx;
    switch (s) {
    case 0: CKL(st_cuda_rmsnorm(xn, NULL, x, NULL, L->attn_norm, 1, D, 1e-6f, g_st)); break;
    case 1: CKL(st_cuda_quantize_act(c, FMT, xn, xq, 1, D, g_st)); break;
    case 2: CKL(st_cuda_mmvq(c, ST_TYPE_Q4_K, L->wq, D, NH * HD, xq, 1, q, g_st)); break;
    case 3: CKL(st_cuda_mmvq(c, ST_TYPE_Q4_K, L->wk, D, NKV * HD, xq, 1, k, g_st)); break;
    case 4: CKL(st_cuda_mmvq(c, L->t_v, L->wv, D, NKV * HD, xq, 1, v, g_st)); break;
    case 5: rope_stage(L); break;
    case 6: attn_stage(L); break;
    case 7: CKL(st_cuda_quantize_act(c, FMT, attn, xq, 1, NH * HD, g_st)); break;
    case 8: CKL(st_cuda_mmvq(c, ST_TYPE_Q4_K, L->wo, NH * HD, D, xq, 1, ffn_out, g_st)); break;
    case 9: CKL(st_cuda_rmsnorm(xn, NULL, x, ffn_out, L->ffn_norm, 1, D, 1e-6f, g_st)); break;
    case 10: CKL(st_cuda_matvec_float(ST_TYPE_F32, L->router, D, E, xn, 1, logits, g_st)); break;
    case 11: CKL(st_cuda_moe_route(ids, wts, logits, 1, E, K, 1, g_st)); break;
    case 12: CKL(st_cuda_quantize_act(c, FMT, xn, xq, 1, D, g_st)); break;
    case 13:
        CKL(st_cuda_mmvq_ids_glu(c, ST_TYPE_Q4_K, L->gate, L->up, D, F, E, xq, 1, ids, xrow, K, ffn_a, g_st));
        break;
    case 14: CKL(st_cuda_quantize_act(c, FMT, ffn_a, xq, K, F, g_st)); break;
    case 15: CKL(st_cuda_mmvq_ids(c, L->t_down, L->down, F, D, E, xq, K, ids, NULL, K, ffn_out, g_st)); break;
    case 16: CKL(st_cuda_moe_sum(x, x, ffn_out, wts, 1, K, D, g_st)); break;
    }
}

static void v2_stage(int s, const lcopy *L) {
    st_cuda_ctx *c = &g_ctx;
    switch (s) {
    case 0: CKL(st_cuda_rmsnorm_act(NULL, xq, FMT, x, NULL, L->attn_norm, 1, D, 1e-6f, g_st)); break;
    case 1: {
        const st_cuda_dec_mat m[3] = {{ST_TYPE_Q4_K, L->wq, NH * HD, q, NULL}, {ST_TYPE_Q4_K, L->wk, NKV * HD, k, NULL},
                                      {L->t_v, L->wv, NKV * HD, v, NULL}};
        CKL(st_cuda_mmvq_multi(m, 3, D, xq, g_st));
        break;
    }
    case 2: rope_stage(L); break;
    case 3: attn_stage(L); break;
    case 4: CKL(st_cuda_quantize_act(c, FMT, attn, xq, 1, NH * HD, g_st)); break;
    case 5: CKL(st_cuda_mmvq(c, ST_TYPE_Q4_K, L->wo, NH * HD, D, xq, 1, ffn_out, g_st)); break;
    case 6: CKL(st_cuda_rmsnorm_act(xn, xq, FMT, x, ffn_out, L->ffn_norm, 1, D, 1e-6f, g_st)); break;
    case 7: CKL(st_cuda_router_topk(ST_TYPE_F32, L->router, D, E, xn, 1, K, 1, logits, ids, wts, cnt, g_st)); break;
    case 8:
        CKL(st_cuda_moe_glu_q(ST_TYPE_Q4_K, (const void *const *)L->table, E, D, F, xq, ids, 1, K, ffn_a, xq2, FMT, cnt,
                              g_st));
        break;
    case 9:
        CKL(st_cuda_moe_down_sum(L->t_down, (const void *const *)L->table, E, D, F, xq2, ids, wts, 1, K, x, x, g_st));
        break;
    }
}

// Weight (and KV) bytes a stage reads for copy L at KV depth `pos` (0: activation-only stage).
static double stage_bytes(int path, int s, const lcopy *L, int pos) {
    const double rq = (double)st_row_size(ST_TYPE_Q4_K, D), rv = (double)st_row_size(L->t_v, D),
                 ro = (double)st_row_size(ST_TYPE_Q4_K, NH * HD), rd = (double)st_row_size(L->t_down, F);
    const double kv = 2.0 * (pos + 1) * NKV * HD * 2, qkv = NH * HD * rq + NKV * HD * (rq + rv);
    const double glu = 2.0 * K * F * rq, down = (double)K * D * rd, router = 4.0 * E * D;
    if (path == 1) {
        switch (s) {
        case 2: return NH * HD * rq;
        case 3: return NKV * HD * rq;
        case 4: return NKV * HD * rv;
        case 6: return kv;
        case 8: return D * ro;
        case 10: return router;
        case 13: return glu;
        case 15: return down;
        default: return 0;
        }
    }
    if (path == 3) {
        switch (s) {
        case 1: return qkv;
        case 3: return kv;
        case 4: return D * ro;
        case 6: return router;
        case 7: return glu;
        case 8: return down;
        default: return 0;
        }
    }
    switch (s) {
    case 1: return qkv;
    case 3: return kv;
    case 5: return D * ro;
    case 7: return router;
    case 8: return glu;
    case 9: return down;
    default: return 0;
    }
}

typedef void (*stage_fn)(int s, const lcopy *L);
static stage_fn path_stage(int path) { return path == 1 ? v1_stage : path == 2 ? v2_stage : v3_stage; }
static int path_n(int path) { return path == 1 ? V1_N : path == 2 ? V2_N : V3_N; }
static const char *path_name(int path, int s) {
    return path == 1 ? v1_names[s] : path == 2 ? v2_names[s] : v3_names[s];
}

static void run_layer(int path, const lcopy *L) {
    const int n = path_n(path);
    for (int s = 0; s < n; s++) path_stage(path)(s, L);
}

// Captures body(arg) into a graph, replays it `iters` times after a warm-up; returns ms per replay.
typedef void (*body_fn)(void *arg);
static double time_graph(body_fn body, void *arg, int iters) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(g_st, cudaStreamCaptureModeThreadLocal));
    body(arg);
    CK(cudaStreamEndCapture(g_st, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphLaunch(exec, g_st));
    CK(cudaStreamSynchronize(g_st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0, g_st));
    for (int i = 0; i < iters; i++) CK(cudaGraphLaunch(exec, g_st));
    CK(cudaEventRecord(e1, g_st));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    cudaEventDestroy(e0), cudaEventDestroy(e1);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return ms / iters;
}

#define REPS 4
typedef struct {
    int path, stage;
} stage_arg;
static void body_stage(void *a) {
    const stage_arg *s = a;
    for (int r = 0; r < REPS; r++)
        for (int c = 0; c < g_nc; c++) path_stage(s->path)(s->stage, &g_L[c]);
}
static void body_layers(void *a) {
    const int path = *(const int *)a;
    for (int c = 0; c < g_nc; c++) run_layer(path, &g_L[c]);
}
static void body_attn(void *a) {
    (void)a;
    for (int r = 0; r < REPS; r++)
        for (int c = 0; c < g_nc; c++) attn_stage(&g_L[c]);
}

static void set_pos(int p) {
    CK(cudaMemcpy(dpos, &p, sizeof p, cudaMemcpyHostToDevice));
}

// Prints per-stage times of one path at depth pos; returns the whole-layer time (us).
static double bench_path(int path, int pos) {
    const int n = path_n(path);
    set_pos(pos);
    for (int c = 0; c < g_nc; c++) run_layer(path, &g_L[c]);  // valid ids, weights and activations everywhere
    CK(cudaStreamSynchronize(g_st));
    static const char *desc[] = {"", "operator by operator, 18 launches", "fused, 11 launches",
                                 "fused round 2, 9 launches"};
    printf("\n%s path (%s%s), KV depth %d: per launch, averaged over %d layer copies\n",
           path == 1 ? "v1" : path == 2 ? "v2" : "v3", desc[path],
           path == 3 ? (st_cuda_dec_pdl() ? ", PDL on" : ", PDL off") : "", pos, g_nc);
    printf("  %-22s %9s %10s %7s%s\n", "kernel", "us", "GB/s", "% 4.4T", path == 3 ? "   predicted (PDL on)" : "");
    double sum = 0;
    for (int s = 0; s < n; s++) {
        stage_arg a = {path, s};
        const double us = 1000.0 * time_graph(body_stage, &a, 20) / (REPS * g_nc);
        double bytes = 0;
        for (int c = 0; c < g_nc; c++) bytes += stage_bytes(path, s, &g_L[c], pos);
        bytes /= g_nc;
        sum += us;
        const char *name = path_name(path, s), *pred = path == 3 ? v3_pred[s] : "";
        if (bytes > 0)
            printf("  %-22s %9.2f %10.0f %6.0f%%   %s\n", name, us, bytes / (us * 1e3),
                   100.0 * bytes / (us * 1e3) / 4400.0, pred);
        else
            printf("  %-22s %9.2f %10s %7s   %s\n", name, us, "-", "-", pred);
    }
    int p = path;
    const double layer = 1000.0 * time_graph(body_layers, &p, 20) / g_nc;
    double lbytes = 0;
    for (int c = 0; c < g_nc; c++)
        for (int s = 0; s < n; s++) lbytes += stage_bytes(path, s, &g_L[c], pos);
    lbytes /= g_nc;
    printf("  %-22s %9.2f   (sum of kernels %.2f us)\n", "whole layer (graph)", layer, sum);
    printf("  layer bytes %.1f MB -> %.0f GB/s (%.0f%% of 4.4 TB/s); roofline %.1f us\n", lbytes / 1e6,
           lbytes / (layer * 1e3), 100.0 * lbytes / (layer * 1e3) / 4400.0, lbytes / 4.4e6);
    return layer;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--copies") && i + 1 < argc) g_nc = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) g_nc = 2;  // run.sh's memcheck pass: just exercise the code
        else {
            fprintf(stderr, "usage: %s [--copies N (1..%d, default 8)]\n", argv[0], MAXC);
            return 2;
        }
    }
    if (g_nc < 1 || g_nc > MAXC) g_nc = 8;
    if (st_cuda_device_count() <= 0 || st_cuda_init(&g_ctx, 0, 1, 0)) {
        fprintf(stderr, "no usable CUDA device: %s\n", st_errmsg());
        return 2;
    }
    g_st = g_ctx.streams[0];
    printf("bench_gpu_decode: %s, %d SMs; Qwen3-30B-A3B layer shape, Q4_K_M types, %d layer copies\n", g_ctx.name,
           g_ctx.sm_count, g_nc);
    st_rng r;
    st_rng_init(&r, 1234, 0);
    make_copies(&r);
    x = rand_vec(D, 0.0f, 1.0f, &r);
    xn = dalloc(sizeof(float) * D);
    q = dalloc(sizeof(float) * NH * HD);
    k = dalloc(sizeof(float) * NKV * HD);
    v = dalloc(sizeof(float) * NKV * HD);
    attn = dalloc(sizeof(float) * NH * HD);
    ffn_a = dalloc(sizeof(float) * K * F);
    ffn_out = dalloc(sizeof(float) * K * D);
    logits = dalloc(sizeof(float) * E);
    wts = dalloc(sizeof(float) * K);
    ids = dalloc(sizeof(int32_t) * K);
    int32_t hx[K] = {0};
    xrow = upload(hx, sizeof hx);
    dpos = dalloc(sizeof(int32_t));
    rope_cs = dalloc(sizeof(float) * NCTX * HD);
    cnt = dalloc(st_cuda_dec_counters_bytes(F, K, 1));
    xq = dalloc((size_t)st_cuda_q8_1_row_bytes(NH * HD) * K);
    xq2 = dalloc((size_t)st_cuda_q8_1_row_bytes(F) * K);
    const int max_split = 8 * st_cuda_attn_decode_splits(NKV, g_ctx.sm_count);
    ws_attn = dalloc(st_cuda_attn_decode_workspace_bytes(NH, HD, max_split));
    g_split = st_cuda_attn_decode_splits(NKV, g_ctx.sm_count);
    g_split2 = st_cuda_attn_dec_splits(NKV, g_ctx.sm_count);
    {
        const size_t b = st_cuda_attn_dec_ws_bytes(NH, NKV, HD, 256);
        ws_attn2 = dalloc(b);  // zeroed
    }

    // layer[depth][0: v1, 1: v2 (PDL off), 2: v3 PDL off, 3: v3 PDL on]
    double layer[2][4];
    for (int dp = 0; dp < 2; dp++) {
        st_cuda_dec_set_pdl(0);
        for (int path = 1; path <= 3; path++) layer[dp][path - 1] = bench_path(path, dp ? NCTX - 1 : 256);
        st_cuda_dec_set_pdl(1);
        layer[dp][3] = bench_path(3, dp ? NCTX - 1 : 256);
    }

    // Attention at depth 16384 with other split counts (the default is g_split).
    printf("\nattention at KV depth %d (f16, 32/4 heads x 128), by split count:\n", NCTX - 1);
    set_pos(NCTX - 1);
    const int def = g_split;
    for (int m = 1; m <= 8; m *= 2) {
        const int sp[2] = {def * m / 2 > 0 ? def * m / 2 : 1, 0};
        g_split = sp[0];
        const double us = 1000.0 * time_graph(body_attn, NULL, 20) / (REPS * g_nc);
        const double bytes = 2.0 * NCTX * NKV * HD * 2;
        printf("  %4d splits: %8.2f us  %6.0f GB/s (%.0f%%)%s\n", g_split, us, bytes / (us * 1e3),
               100.0 * bytes / (us * 1e3) / 4400.0, g_split == def ? "  <- default" : "");
    }
    g_split = def;

    // attn_dec (v3) by depth and grid: the split count follows the depth (chunks of >= 32 positions per block).
    printf("\nattn_dec (v3, + fused Q8_K output) by KV depth and grid (PDL on; predicted < 5 us at 256, < 15 us at 16K):\n");
    {
        static const int depths[] = {1, 256, 1024, 4096, 16384};
        const int grids[3] = {g_split2 / 2 > 0 ? g_split2 / 2 : 1, g_split2, g_split2 * 2 > 256 ? 256 : g_split2 * 2};
        printf("  %7s", "depth");
        for (int gi = 0; gi < 3; gi++) printf("   grid %3d (us, GB/s)", grids[gi]);
        printf("\n");
        const int keep = g_split2;
        for (int di = 0; di < 5; di++) {
            set_pos(depths[di]);
            printf("  %7d", depths[di]);
            for (int gi = 0; gi < 3; gi++) {
                g_split2 = grids[gi];
                stage_arg a = {3, 3};
                const double us = 1000.0 * time_graph(body_stage, &a, 20) / (REPS * g_nc);
                const double bytes = 2.0 * (depths[di] + 1) * NKV * HD * 2;
                printf("   %8.2f %9.0f%s", us, bytes / (us * 1e3), grids[gi] == keep ? "*" : " ");
            }
            printf("\n");
        }
        g_split2 = keep;
        printf("  (* the default grid; v2 attention + quantize at 256 / 16384 are in the v2 tables above)\n");
    }

    // LM head (Q6_K, 151936 x 2048) and the final norm, once per token.
    uint8_t *head = rand_dev(ST_TYPE_Q6_K, VOCAB, D, &r);
    float *dlog = dalloc(sizeof(float) * VOCAB);
    CKL(st_cuda_quantize_act(&g_ctx, FMT, xn, xq, 1, D, g_st));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0, g_st));
    for (int i = 0; i < 20; i++) CKL(st_cuda_mmvq(&g_ctx, ST_TYPE_Q6_K, head, D, VOCAB, xq, 1, dlog, g_st));
    CK(cudaEventRecord(e1, g_st));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    const double head_us = 1000.0 * ms / 20 + 5.0;  // + final rmsnorm and quantization (~2 launches)
    printf("\nLM head Q6_K %d x %d: %.1f us (+5 us for the final norm): %.0f GB/s\n", VOCAB, D, head_us - 5.0,
           st_row_size(ST_TYPE_Q6_K, D) * (double)VOCAB / ((head_us - 5.0) * 1e3));

    printf("\nsummary (48 layers + LM head; predicted decode speed, no sampling or host overhead):\n");
    static const char *lbl[4] = {"v1", "v2", "v3 no PDL", "v3 PDL"};
    for (int dp = 0; dp < 2; dp++) {
        printf("  depth %5d:", dp ? NCTX - 1 : 256);
        for (int i = 0; i < 4; i++)
            printf("  %s %6.2f us/layer -> %5.0f tok/s%s", lbl[i], layer[dp][i], 1e6 / (48 * layer[dp][i] + head_us),
                   i < 3 ? ";" : "");
        printf("\n");
    }
    printf("  v3 PDL vs v2: %.2fx at depth 256, %.2fx at depth %d (predicted: ~45 us/layer at 256 -> ~430 tok/s; "
           "~55 us at 16K)\n", layer[0][1] / layer[0][3], layer[1][1] / layer[1][3], NCTX - 1);
    CK(cudaGetLastError());
    printf("bench_gpu_decode: done\n");
    st_cuda_destroy(&g_ctx);
    return 0;
}
