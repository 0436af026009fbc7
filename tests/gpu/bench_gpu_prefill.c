// Prefill kernel timing on the Qwen3-30B-A3B shape (d 2048, 32/4 heads x 128, 128 experts top-8, expert FF 768,
// Q4_K_M mix), one 512-token chunk, CUDA events, each engine side by side:
//   MoE:       st_cuda_moe_ffn per engine (int8 mmq, f16 tensor cores "tc", cuBLAS grouped) with gate/up Q4_K and
//              down Q6_K or Q4_K (Q4_K_M uses both), uniform random top-8 routing; ms, TFLOP/s of the useful work
//              (2 x pairs x 3 x 2048 x 768) and effective GB/s of the expert weights (all 128 experts are active).
//   dense:     attn_q/k/v/output GEMMs per engine (weights cycled over 8 copies so they come from DRAM).
//   attention: prefill of 512 queries at depth 0 and 15,872 (f16 cache), SIMT v1 vs tensor-core flash kernel;
//              TFLOP/s counts only the visible (causal) positions: 4 x head_dim x heads x sum of visible positions.
// Ends with the per-layer total of the best engines and the pp512 those kernels alone allow (x48 layers; the
// small element-wise kernels, router and norms come on top). Not a test: it only fails on CUDA errors.
// Usage: bench_gpu_prefill [--reps N]
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cuda/attention.h"
#include "cuda/attention_tc.h"
#include "cuda/gemm.h"
#include "cuda/runtime.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/log.h"
#include "util/rng.h"

#define CHECK(x)                                                                      \
    do {                                                                              \
        if ((x) != 0) {                                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, st_errmsg()); \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)
#define CUCHECK(x)                                                                                        \
    do {                                                                                                  \
        cudaError_t e_ = (x);                                                                             \
        if (e_ != cudaSuccess) {                                                                          \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));          \
            exit(1);                                                                                      \
        }                                                                                                 \
    } while (0)

static st_cuda_ctx g_ctx;
static int g_reps = 10;

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static void *dalloc(size_t bytes, const char *what) {
    void *p = st_cuda_alloc(&g_ctx, bytes, what);
    if (!p) {
        fprintf(stderr, "%s\n", st_errmsg());
        exit(1);
    }
    return p;
}

// `copies` x one random (type, n_rows x ne0) matrix on the device; random content for at most 64 MiB, repeated.
static void *dev_weights(int type, int64_t ne0, int64_t n_rows, int copies, st_rng *r) {
    const size_t rb = st_row_size(type, ne0), bytes = rb * n_rows;
    const size_t chunk = bytes < (64u << 20) ? bytes : (64u << 20) / rb * rb;
    uint8_t *h = xmalloc(chunk);
    CHECK(st_random_blocks(type, h, (int64_t)(chunk / st_type_get(type)->type_size), 0.05f, r));
    uint8_t *d = dalloc(bytes * copies, "weights");
    for (size_t off = 0; off < bytes * copies; off += chunk) {
        const size_t n = bytes * copies - off < chunk ? bytes * copies - off : chunk;
        CHECK(st_cuda_memcpy_h2d(&g_ctx, d + off, h, n, NULL));
    }
    free(h);
    return d;
}

static void *dev_random_f32(int64_t n, float sd, st_rng *r) {
    float *h = xmalloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) h[i] = st_rng_normal(r) * sd;
    void *d = dalloc(sizeof(float) * n, "f32");
    CHECK(st_cuda_memcpy_h2d(&g_ctx, d, h, sizeof(float) * n, NULL));
    free(h);
    return d;
}

static cudaEvent_t g_e0, g_e1;
static void t_begin(cudaStream_t s) { CUCHECK(cudaEventRecord(g_e0, s)); }
static double t_end(cudaStream_t s, int reps) {  // ms per rep
    float ms;
    CUCHECK(cudaEventRecord(g_e1, s));
    CUCHECK(cudaEventSynchronize(g_e1));
    CUCHECK(cudaEventElapsedTime(&ms, g_e0, g_e1));
    return ms / reps;
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) g_reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--reps N]\n", argv[0]);
            return 2;
        }
    }
    if (g_reps < 1) g_reps = 1;
    if (st_cuda_init(&g_ctx, 0, 1, 0)) {
        fprintf(stderr, "bench_gpu_prefill: %s\n", st_errmsg());
        return 1;
    }
    printf("bench_gpu_prefill: %s (sm_%d%d, %d SMs), %d reps per measurement\n", g_ctx.name, g_ctx.cc_major,
           g_ctx.cc_minor, g_ctx.sm_count, g_reps);
    st_gemm_ctx *g = st_cuda_gemm_create(&g_ctx);
    if (!g) {
        fprintf(stderr, "%s\n", st_errmsg());
        return 1;
    }
    CUCHECK(cudaEventCreate(&g_e0));
    CUCHECK(cudaEventCreate(&g_e1));
    cudaStream_t s = g_ctx.streams[0];
    st_rng r;
    st_rng_init(&r, 1234, 0);

    const int64_t n_embd = 2048, n_ff = 768, n_tok = 512, n_q = 32, n_kv = 4, hd = 128;
    const int n_expert = 128, n_used = 8, n_layer = 48;
    float *dx = dev_random_f32(4096 * n_tok, 1.0f, &r);
    float *dy = dalloc(sizeof(float) * 4096 * n_tok, "y");

    // ---- MoE --------------------------------------------------------------------------------------------------
    int32_t *ids = xmalloc(sizeof(int32_t) * n_tok * n_used);
    float *w = xmalloc(sizeof(float) * n_tok * n_used);
    for (int t = 0; t < n_tok; t++)
        for (int k = 0; k < n_used; k++) {
            int e, dup;
            do {
                e = (int)st_rng_below(&r, n_expert);
                dup = 0;
                for (int j = 0; j < k; j++) dup |= ids[t * n_used + j] == e;
            } while (dup);
            ids[t * n_used + k] = e;
            w[t * n_used + k] = 1.0f / n_used;
        }
    int32_t *dids = dalloc(sizeof(int32_t) * n_tok * n_used, "ids");
    float *dw = dalloc(sizeof(float) * n_tok * n_used, "w");
    CHECK(st_cuda_memcpy_h2d(&g_ctx, dids, ids, sizeof(int32_t) * n_tok * n_used, NULL));
    CHECK(st_cuda_memcpy_h2d(&g_ctx, dw, w, sizeof(float) * n_tok * n_used, NULL));
    void *wg = dev_weights(ST_TYPE_Q4_K, n_embd, n_ff * n_expert, 1, &r);
    void *wu = dev_weights(ST_TYPE_Q4_K, n_embd, n_ff * n_expert, 1, &r);
    static const int down_types[] = {ST_TYPE_Q6_K, ST_TYPE_Q4_K};
    void *wd[2];
    for (int i = 0; i < 2; i++) wd[i] = dev_weights(down_types[i], n_ff, n_embd * n_expert, 1, &r);
    size_t sb = 0;
    for (int e = ST_MOE_MMQ; e <= ST_MOE_TC; e++)
        for (int i = 0; i < 2; i++) {
            const size_t b = st_cuda_moe_scratch_bytes(e, ST_TYPE_Q4_K, down_types[i], n_embd, n_ff, n_expert,
                                                       (int)n_tok, n_used);
            if (b > sb) sb = b;
        }
    static const int64_t dense[][3] = {{ST_TYPE_Q4_K, 2048, 4096}, {ST_TYPE_Q4_K, 2048, 512},
                                       {ST_TYPE_Q6_K, 2048, 512},  {ST_TYPE_Q4_K, 4096, 2048}};
    static const char *dense_names[] = {"attn_q", "attn_k", "attn_v", "attn_output"};
    for (int i = 0; i < 4; i++)
        for (int e = ST_GEMM_CUBLAS; e <= ST_GEMM_TC; e++) {
            const size_t b = st_cuda_gemm_scratch_bytes(e, (int)dense[i][0], dense[i][1], dense[i][2], n_tok);
            if (b > sb) sb = b;
        }
    void *scr = dalloc(sb, "scratch");

    const double moe_flop = 2.0 * n_tok * n_used * 3.0 * n_embd * n_ff;
    static const char *moe_names[] = {"mmq (int8)", "cublas-grouped", "cublas-loop", "tc (f16 mma)"};
    static const int moe_engines[] = {ST_MOE_MMQ, ST_MOE_TC, ST_MOE_CUBLAS_GROUPED};
    double moe_best[2] = {1e30, 1e30};
    printf("\nMoE, one layer, %lld tokens x top-%d of %d experts (uniform routing), %lld -> %lld -> %lld:\n",
           (long long)n_tok, n_used, n_expert, (long long)n_embd, (long long)n_ff, (long long)n_embd);
    for (int di = 0; di < 2; di++) {
        const double wbytes = 2.0 * n_expert * st_row_size(ST_TYPE_Q4_K, n_embd) * n_ff +
                              (double)n_expert * st_row_size(down_types[di], n_ff) * n_embd;
        for (int ei = 0; ei < 3; ei++) {
            const int eng = moe_engines[ei];
            for (int k = 0; k < 2; k++)
                CHECK(st_cuda_moe_ffn(g, eng, ST_TYPE_Q4_K, wg, wu, down_types[di], wd[di], n_embd, n_ff, n_expert,
                                      dx, dids, dw, (int)n_tok, n_used, dy, scr, sb, s));
            CHECK(st_cuda_sync(&g_ctx, s));
            const double h0 = st_now();
            t_begin(s);
            for (int k = 0; k < g_reps; k++)
                CHECK(st_cuda_moe_ffn(g, eng, ST_TYPE_Q4_K, wg, wu, down_types[di], wd[di], n_embd, n_ff, n_expert,
                                      dx, dids, dw, (int)n_tok, n_used, dy, scr, sb, s));
            double ms = t_end(s, g_reps);
            const double wall = (st_now() - h0) * 1e3 / g_reps;
            if (wall > ms) ms = wall;  // the cuBLAS engines synchronise with the host
            printf("  %-15s gate/up Q4_K, down %-5s %8.3f ms  %7.1f TFLOP/s  %7.0f GB/s of weights\n", moe_names[eng],
                   st_type_name(down_types[di]), ms, moe_flop / (ms * 1e-3) / 1e12, wbytes / (ms * 1e-3) / 1e9);
            if (ms < moe_best[di]) moe_best[di] = ms;
        }
    }

    // ---- dense --------------------------------------------------------------------------------------------------
    const int copies = 8;
    double dense_best = 0;
    printf("\nDense projections, %lld tokens (weights cycled over %d copies):\n", (long long)n_tok, copies);
    for (int i = 0; i < 4; i++) {
        const int type = (int)dense[i][0];
        const int64_t ne0 = dense[i][1], n_out = dense[i][2];
        const size_t wb = st_row_size(type, ne0) * n_out;
        uint8_t *wdn = dev_weights(type, ne0, n_out, copies, &r);
        const double flop = 2.0 * n_tok * ne0 * n_out;
        double best = 1e30;
        for (int eng = ST_GEMM_CUBLAS; eng <= ST_GEMM_TC; eng++) {
            if (eng == ST_GEMM_MMQ && !st_cuda_mmq_supported(type)) continue;
            if (eng == ST_GEMM_TC && !st_cuda_tc_supported(type)) continue;
            for (int k = 0; k < 2; k++) CHECK(st_cuda_gemm(g, eng, type, wdn, ne0, n_out, dx, n_tok, dy, scr, sb, s));
            t_begin(s);
            for (int k = 0; k < g_reps; k++)
                CHECK(st_cuda_gemm(g, eng, type, wdn + (size_t)(k % copies) * wb, ne0, n_out, dx, n_tok, dy, scr, sb, s));
            const double ms = t_end(s, g_reps);
            printf("  %-12s %-5s %5lld -> %-5lld %-7s %8.3f ms  %7.1f TFLOP/s\n", dense_names[i], st_type_name(type),
                   (long long)ne0, (long long)n_out,
                   eng == ST_GEMM_MMQ ? "mmq" : eng == ST_GEMM_TC ? "tc" : "cublas", ms, flop / (ms * 1e-3) / 1e12);
            if (ms < best) best = ms;
        }
        dense_best += best;
        st_cuda_free(&g_ctx, wdn);
    }

    // ---- attention ----------------------------------------------------------------------------------------------
    printf("\nPrefill attention, %lld queries, %lld/%lld heads x %lld, f16 cache:\n", (long long)n_tok, (long long)n_q,
           (long long)n_kv, (long long)hd);
    static const int depths[] = {0, 15872};
    double attn_best[2] = {0, 0};
    const int64_t max_pos = 15872 + n_tok;
    void *kc = dalloc((size_t)max_pos * n_kv * hd * 2, "k cache"), *vc = dalloc((size_t)max_pos * n_kv * hd * 2, "v cache");
    {  // random f16 in [-2, 2): converted on the device from f32
        float *tmp = dev_random_f32(max_pos * n_kv * hd, 1.0f, &r);
        CHECK(st_cuda_f32_to_f16(&g_ctx, tmp, kc, max_pos * n_kv * hd, s));
        CHECK(st_cuda_f32_to_f16(&g_ctx, tmp, vc, max_pos * n_kv * hd, s));
        CHECK(st_cuda_sync(&g_ctx, s));
        st_cuda_free(&g_ctx, tmp);
    }
    float *aq = dev_random_f32(n_tok * n_q * hd, 1.0f, &r);
    float *ao = dalloc(sizeof(float) * n_tok * n_q * hd, "attn out");
    int32_t *dpos = dalloc(sizeof(int32_t), "pos");
    for (int di = 0; di < 2; di++) {
        const int32_t p0 = depths[di];
        CHECK(st_cuda_memcpy_h2d(&g_ctx, dpos, &p0, sizeof p0, NULL));
        const double vis = (double)n_tok * p0 + (double)n_tok * (n_tok + 1) / 2;  // visible (query, position) pairs
        const double flop = 4.0 * hd * n_q * vis;
        double best = 1e30;
        for (int kind = 0; kind < 2; kind++) {
            for (int k = 0; k < 2; k++)
                CHECK(kind ? st_cuda_attn_prefill_tc(ao, aq, kc, vc, dpos, (int)n_tok, (int)n_q, (int)n_kv, (int)hd,
                                                     0.088f, s)
                           : st_cuda_attn_prefill(ao, aq, kc, vc, 1, dpos, (int)n_tok, (int)n_q, (int)n_kv, (int)hd,
                                                  0.088f, s));
            t_begin(s);
            for (int k = 0; k < g_reps; k++)
                CHECK(kind ? st_cuda_attn_prefill_tc(ao, aq, kc, vc, dpos, (int)n_tok, (int)n_q, (int)n_kv, (int)hd,
                                                     0.088f, s)
                           : st_cuda_attn_prefill(ao, aq, kc, vc, 1, dpos, (int)n_tok, (int)n_q, (int)n_kv, (int)hd,
                                                  0.088f, s));
            const double ms = t_end(s, g_reps);
            printf("  depth %5d  %-14s %8.3f ms  %7.1f TFLOP/s\n", p0, kind ? "tc (flash mma)" : "simt v1", ms,
                   flop / (ms * 1e-3) / 1e12);
            if (ms < best) best = ms;
        }
        attn_best[di] = best;
    }

    const double layer0 = moe_best[0] + dense_best + attn_best[0];
    // Q4_K_M: about a third of the layers keep Q6_K down projections, the rest Q4_K.
    const double layer_mix = (moe_best[0] + 2.0 * moe_best[1]) / 3.0 + dense_best + attn_best[0];
    printf("\nBest engines per layer at depth 0: MoE %.3f (Q6_K down) / %.3f (Q4_K down) + dense %.3f + attention "
           "%.3f ms = %.3f ms;\n  x%d layers (Q4_K_M mix) = %.1f ms => pp512 <= %.0f tok/s from these kernels "
           "(the element-wise kernels, router and norms come on top)\n",
           moe_best[0], moe_best[1], dense_best, attn_best[0], layer0, n_layer, layer_mix * n_layer,
           n_tok / (layer_mix * n_layer * 1e-3));
    printf("  at depth 15872 attention adds %.3f ms per layer (%.1f ms per 512-token chunk)\n",
           attn_best[1] - attn_best[0], (attn_best[1] - attn_best[0]) * n_layer);

    cudaEventDestroy(g_e0);
    cudaEventDestroy(g_e1);
    st_cuda_free(&g_ctx, kc), st_cuda_free(&g_ctx, vc), st_cuda_free(&g_ctx, aq), st_cuda_free(&g_ctx, ao);
    st_cuda_free(&g_ctx, dpos), st_cuda_free(&g_ctx, dx), st_cuda_free(&g_ctx, dy), st_cuda_free(&g_ctx, scr);
    st_cuda_free(&g_ctx, wg), st_cuda_free(&g_ctx, wu), st_cuda_free(&g_ctx, wd[0]), st_cuda_free(&g_ctx, wd[1]);
    st_cuda_free(&g_ctx, dids), st_cuda_free(&g_ctx, dw);
    st_cuda_gemm_destroy(g);
    st_cuda_destroy(&g_ctx);
    free(ids), free(w);
    printf("bench_gpu_prefill: done\n");
    return 0;
}
