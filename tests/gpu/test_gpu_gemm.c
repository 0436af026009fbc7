// GPU parity and timing of the prefill GEMMs (src/cuda/gemm.h) against the CPU path (st_cpu_matmul), on fresh
// random weights (st_random_blocks) and activations (seed printed; STRATA_SEED overrides):
//   dense:  every weight type x shapes (ne0 -> n_out) 2048->4096, 4096->2048, 2048->768, 768->2048 x
//           N in {1, 7, 64, 512}, every engine (cuBLAS f16, int8 mmq, f16 tensor cores on shared-memory-dequantized
//           tiles ("tc"), the last two where supported; mmq with llama.cpp's q8_1 rows, STRATA_MMQ_CPU_ACT=0), and mmq
//           as by default (activations in the CPU's format: relative RMS error <= 2e-5, only the float order
//           differs). Outputs are poisoned (NaN)
//           first. Pass: every |gpu - cpu| <= 1e-2 |W_r| |X_t| (row norms of the dequantized weights and of the
//           activations) and the relative RMS error of the whole product <= 3e-2 (int8/f16 rounding on both
//           sides gives ~1e-2).
//   MoE:    st_cuda_moe_ffn with each engine (mmq, cuBLAS grouped/loop, tc with gate/up + SwiGLU fused) vs a CPU loop over experts with the same routing (skewed random ids,
//           the top eighth of the experts never used); pass: per-token relative RMS error <= 4e-2 and every element
//           within 0.25 of the token's output RMS.
//   timing: one 48-layer prefill chunk of 512 tokens on the Qwen3-30B-A3B shape (attention projections, router,
//           MoE), per engine; prints ms, TFLOP/s and the pp512 tok/s that the GEMM part alone would allow.
// Usage: test_gpu_gemm [--quick] [--no-timing]   (--quick: few types and small shapes, for compute-sanitizer)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "cpu/matmul.h"
#include "cuda/gemm.h"
#include "cuda/runtime.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/log.h"
#include "util/pool.h"
#include "util/rng.h"

#include "gpu_test_util.h"

static uint64_t g_seed;
static int g_fail;
static st_pool *g_pool;

#define CHECK(x)                                                                                      \
    do {                                                                                              \
        if ((x) != 0) {                                                                               \
            fprintf(stderr, "%s:%d: %s: %s (seed %llu)\n", __FILE__, __LINE__, #x, st_errmsg(),      \
                    (unsigned long long)g_seed);                                                      \
            exit(1);                                                                                  \
        }                                                                                             \
    } while (0)
#define CHECKP(p)                                                                                     \
    do {                                                                                              \
        if (!(p)) {                                                                                   \
            fprintf(stderr, "%s:%d: %s: %s (seed %llu)\n", __FILE__, __LINE__, #p, st_errmsg(),      \
                    (unsigned long long)g_seed);                                                      \
            exit(1);                                                                                  \
        }                                                                                             \
    } while (0)

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of host memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static void poison(st_cuda_ctx *ctx, void *p, size_t bytes) { CHECK(st_cuda_memset(ctx, p, 0xff, bytes, NULL)); }

// Random weights of `type` (n_rows x ne0) on the host; plus the row L2 norms of the dequantized rows.
static uint8_t *random_weights(int type, int64_t ne0, int64_t n_rows, st_rng *r, float *row_norm) {
    const size_t rb = st_row_size(type, ne0);
    uint8_t *w = xmalloc(rb * n_rows);
    const st_type_info *ti = st_type_get(type);
    CHECK(st_random_blocks(type, w, (int64_t)(rb * n_rows / ti->type_size), 0.05f, r));
    if (row_norm) {
        float *tmp = xmalloc(sizeof(float) * ne0);
        for (int64_t i = 0; i < n_rows; i++) {
            CHECK(st_dequantize_row(type, w + i * rb, tmp, ne0));
            double s = 0;
            for (int64_t k = 0; k < ne0; k++) s += (double)tmp[k] * tmp[k];
            row_norm[i] = (float)sqrt(s);
        }
        free(tmp);
    }
    return w;
}

// ---- dense parity ----------------------------------------------------------------------------------------------

static void test_dense(st_cuda_ctx *ctx, st_gemm_ctx *g, int type, int64_t ne0, int64_t n_out, const int *ns,
                       int n_ns, st_rng *r) {
    const int64_t max_tok = ns[n_ns - 1];
    float *wn = xmalloc(sizeof(float) * n_out);
    uint8_t *w = random_weights(type, ne0, n_out, r, wn);
    const size_t wbytes = st_row_size(type, ne0) * n_out;
    float *x = xmalloc(sizeof(float) * ne0 * max_tok), *xn = xmalloc(sizeof(float) * max_tok);
    for (int64_t i = 0; i < ne0 * max_tok; i++) x[i] = st_rng_normal(r) * (1.0f + (float)(i % 7) * 0.3f);
    for (int64_t t = 0; t < max_tok; t++) {
        double s = 0;
        for (int64_t k = 0; k < ne0; k++) s += (double)x[t * ne0 + k] * x[t * ne0 + k];
        xn[t] = (float)sqrt(s);
    }
    float *y_cpu = xmalloc(sizeof(float) * n_out * max_tok), *y_gpu = xmalloc(sizeof(float) * n_out * max_tok);
    void *dW = st_cuda_alloc(ctx, wbytes, "W");
    float *dX = st_cuda_alloc(ctx, sizeof(float) * ne0 * max_tok, "X");
    float *dY = st_cuda_alloc(ctx, sizeof(float) * n_out * max_tok, "Y");
    CHECKP(dW && dX && dY);
    CHECK(st_cuda_memcpy_h2d(ctx, dW, w, wbytes, NULL));
    CHECK(st_cuda_memcpy_h2d(ctx, dX, x, sizeof(float) * ne0 * max_tok, NULL));
    st_cpu_scratch cs = {0};
    for (int ni = 0; ni < n_ns; ni++) {
        const int64_t n_tok = ns[ni];
        CHECK(st_cpu_matmul(g_pool, type, w, ne0, n_out, x, n_tok, y_cpu, &cs));
        // Every engine, mmq with llama.cpp's q8_1 activations (STRATA_MMQ_CPU_ACT=0); then (cpu_act) mmq with the
        // default, the activations in the CPU's format: the same int8 products as the CPU, so only the float order
        // differs (bound 2e-5 relative RMS).
        static const int passes[][2] = {{ST_GEMM_CUBLAS, 0}, {ST_GEMM_MMQ, 0}, {ST_GEMM_TC, 0}, {ST_GEMM_MMQ, 1}};
        for (int pi = 0; pi < 4; pi++) {
            const int eng = passes[pi][0], cpu_act = passes[pi][1];
            if (eng == ST_GEMM_MMQ && (!st_cuda_mmq_supported(type) || ne0 % 256)) continue;
            if (eng == ST_GEMM_TC && (!st_cuda_tc_supported(type) || ne0 % 256)) continue;
            const size_t sb = st_cuda_gemm_scratch_bytes(eng, type, ne0, n_out, n_tok);
            void *scr = st_cuda_alloc(ctx, sb, "scratch");
            CHECKP(scr);
            poison(ctx, dY, sizeof(float) * n_out * n_tok);
            if (!cpu_act) setenv("STRATA_MMQ_CPU_ACT", "0", 1);
            CHECK(st_cuda_gemm(g, eng, type, dW, ne0, n_out, dX, n_tok, dY, scr, sb, ctx->streams[0]));
            unsetenv("STRATA_MMQ_CPU_ACT");
            CHECK(st_cuda_sync(ctx, ctx->streams[0]));
            CHECK(st_cuda_memcpy_d2h(ctx, y_gpu, dY, sizeof(float) * n_out * n_tok, NULL));
            st_cuda_free(ctx, scr);
            double worst = 0, se = 0, sr = 0;
            int64_t bad = 0, nonfinite = 0;
            for (int64_t t = 0; t < n_tok; t++)
                for (int64_t o = 0; o < n_out; o++) {
                    const float a = y_gpu[t * n_out + o], b = y_cpu[t * n_out + o];
                    if (!isfinite(a)) {
                        nonfinite++;
                        continue;
                    }
                    const double e = fabs((double)a - b), bound = 1e-2 * wn[o] * xn[t] + 1e-30;
                    if (e > bound) bad++;
                    if (e / bound > worst) worst = e / bound;
                    se += e * e, sr += (double)b * b;
                }
            const double rel = sqrt(se / (sr + 1e-30));
            const int ok = !bad && !nonfinite && rel <= (cpu_act ? 2e-5 : 3e-2);
            if (!ok || n_tok == max_tok)
                printf("  %s %-7s %-6s %5lld -> %-5lld N %-4lld rel_rms %.2e  max err/bound %.3f  bad %lld  "
                       "nonfinite %lld\n",
                       ok ? "ok  " : "FAIL", st_type_name(type),
                       cpu_act ? "mmq-cpuact" : eng == ST_GEMM_MMQ ? "mmq" : eng == ST_GEMM_TC ? "tc" : "cublas",
                       (long long)ne0, (long long)n_out, (long long)n_tok, rel, worst, (long long)bad,
                       (long long)nonfinite);
            if (!ok) g_fail = 1;
        }
    }
    st_cpu_scratch_free(&cs);
    st_cuda_free(ctx, dW);
    st_cuda_free(ctx, dX);
    st_cuda_free(ctx, dY);
    free(w), free(wn), free(x), free(xn), free(y_cpu), free(y_gpu);
}

// ---- MoE parity ------------------------------------------------------------------------------------------------

// Skewed ids: n_used distinct experts per token from the lower 7/8 of the range, low ids more likely.
static void random_routing(st_rng *r, int n_tok, int n_used, int n_expert, int32_t *ids, float *w) {
    const int usable = n_expert - n_expert / 8;
    for (int t = 0; t < n_tok; t++) {
        float s = 0;
        for (int k = 0; k < n_used; k++) {
            int e, dup;
            do {
                const float u = st_rng_f32(r);
                e = (int)(u * u * usable);
                dup = 0;
                for (int j = 0; j < k; j++) dup |= ids[t * n_used + j] == e;
            } while (dup);
            ids[t * n_used + k] = e;
            w[t * n_used + k] = 0.1f + st_rng_f32(r);
            s += w[t * n_used + k];
        }
        for (int k = 0; k < n_used; k++) w[t * n_used + k] /= s;
    }
}

// CPU reference: per expert, the routed tokens' gate/up products, SwiGLU, down, weighted into y.
static void moe_cpu(int type_gu, const uint8_t *wg, const uint8_t *wu, int type_d, const uint8_t *wd, int64_t n_embd,
                    int64_t n_ff, int n_expert, const float *x, const int32_t *ids, const float *w, int n_tok,
                    int n_used, float *y) {
    const size_t gu_eb = st_row_size(type_gu, n_embd) * n_ff, d_eb = st_row_size(type_d, n_ff) * n_embd;
    float *xe = xmalloc(sizeof(float) * n_embd * n_tok), *g = xmalloc(sizeof(float) * n_ff * n_tok);
    float *u = xmalloc(sizeof(float) * n_ff * n_tok), *d = xmalloc(sizeof(float) * n_embd * n_tok);
    int *tok = xmalloc(sizeof(int) * n_tok), *slot = xmalloc(sizeof(int) * n_tok);
    st_cpu_scratch cs = {0};
    memset(y, 0, sizeof(float) * n_embd * n_tok);
    for (int e = 0; e < n_expert; e++) {
        int m = 0;
        for (int t = 0; t < n_tok; t++)
            for (int k = 0; k < n_used; k++)
                if (ids[t * n_used + k] == e) tok[m] = t, slot[m] = k, m++;
        if (!m) continue;
        for (int i = 0; i < m; i++) memcpy(xe + (size_t)i * n_embd, x + (size_t)tok[i] * n_embd, sizeof(float) * n_embd);
        CHECK(st_cpu_matmul(g_pool, type_gu, wg + e * gu_eb, n_embd, n_ff, xe, m, g, &cs));
        CHECK(st_cpu_matmul(g_pool, type_gu, wu + e * gu_eb, n_embd, n_ff, xe, m, u, &cs));
        for (int64_t i = 0; i < (int64_t)m * n_ff; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
        CHECK(st_cpu_matmul(g_pool, type_d, wd + e * d_eb, n_ff, n_embd, g, m, d, &cs));
        for (int i = 0; i < m; i++) {
            const float wt = w[tok[i] * n_used + slot[i]];
            for (int64_t j = 0; j < n_embd; j++) y[(size_t)tok[i] * n_embd + j] += wt * d[(size_t)i * n_embd + j];
        }
    }
    st_cpu_scratch_free(&cs);
    free(xe), free(g), free(u), free(d), free(tok), free(slot);
}

// Whether MoE engine eng takes these types and sizes (the mmq and tc engines have limits; cuBLAS takes all).
static int moe_engine_ok(int eng, int type_gu, int type_d, int64_t n_embd, int64_t n_ff) {
    if (eng == ST_MOE_MMQ) return st_cuda_mmq_supported(type_gu) && st_cuda_mmq_supported(type_d);
    if (eng == ST_MOE_TC)
        return st_cuda_tc_supported(type_gu) && st_cuda_tc_supported(type_d) && n_embd % 256 == 0 && n_ff % 256 == 0;
    return 1;
}

// A MoE call's scratch for engine eng, poisoned (NaN); *sb gets its size.
static void *moe_scratch(st_cuda_ctx *ctx, int eng, int type_gu, int type_d, int64_t n_embd, int64_t n_ff, int n_expert,
                         int n_tok, int n_used, size_t *sb) {
    *sb = st_cuda_moe_scratch_bytes(eng, type_gu, type_d, n_embd, n_ff, n_expert, n_tok, n_used);
    void *scr = st_cuda_alloc(ctx, *sb, "moe scratch");
    if (scr) poison(ctx, scr, *sb);
    return scr;
}

static void test_moe(st_cuda_ctx *ctx, st_gemm_ctx *g, int type_gu, int type_d, int64_t n_embd, int64_t n_ff,
                     int n_expert, int n_used, int n_tok, st_rng *r) {
    uint8_t *wg = random_weights(type_gu, n_embd, n_ff * n_expert, r, NULL);
    uint8_t *wu = random_weights(type_gu, n_embd, n_ff * n_expert, r, NULL);
    uint8_t *wd = random_weights(type_d, n_ff, n_embd * n_expert, r, NULL);
    const size_t gub = st_row_size(type_gu, n_embd) * n_ff * n_expert, db = st_row_size(type_d, n_ff) * n_embd * n_expert;
    float *x = xmalloc(sizeof(float) * n_embd * n_tok), *w = xmalloc(sizeof(float) * n_tok * n_used);
    int32_t *ids = xmalloc(sizeof(int32_t) * n_tok * n_used);
    for (int64_t i = 0; i < n_embd * n_tok; i++) x[i] = st_rng_normal(r);
    random_routing(r, n_tok, n_used, n_expert, ids, w);
    float *y_cpu = xmalloc(sizeof(float) * n_embd * n_tok), *y_gpu = xmalloc(sizeof(float) * n_embd * n_tok);
    moe_cpu(type_gu, wg, wu, type_d, wd, n_embd, n_ff, n_expert, x, ids, w, n_tok, n_used, y_cpu);
    int used = 0;
    int *cnt = calloc((size_t)n_expert, sizeof(int));
    for (int i = 0; i < n_tok * n_used; i++) cnt[ids[i]]++;
    for (int e = 0; e < n_expert; e++) used += cnt[e] > 0;

    void *dg = st_cuda_alloc(ctx, gub, "gate"), *du = st_cuda_alloc(ctx, gub, "up"), *dd = st_cuda_alloc(ctx, db, "down");
    float *dx = st_cuda_alloc(ctx, sizeof(float) * n_embd * n_tok, "x"), *dy = st_cuda_alloc(ctx, sizeof(float) * n_embd * n_tok, "y");
    float *dw = st_cuda_alloc(ctx, sizeof(float) * n_tok * n_used, "w");
    int32_t *dids = st_cuda_alloc(ctx, sizeof(int32_t) * n_tok * n_used, "ids");
    CHECKP(dg && du && dd && dx && dy && dw && dids);
    CHECK(st_cuda_memcpy_h2d(ctx, dg, wg, gub, NULL));
    CHECK(st_cuda_memcpy_h2d(ctx, du, wu, gub, NULL));
    CHECK(st_cuda_memcpy_h2d(ctx, dd, wd, db, NULL));
    CHECK(st_cuda_memcpy_h2d(ctx, dx, x, sizeof(float) * n_embd * n_tok, NULL));
    CHECK(st_cuda_memcpy_h2d(ctx, dw, w, sizeof(float) * n_tok * n_used, NULL));
    CHECK(st_cuda_memcpy_h2d(ctx, dids, ids, sizeof(int32_t) * n_tok * n_used, NULL));
    static const char *names[] = {"mmq", "cublas-grouped", "cublas-loop", "tc"};
    for (int eng = ST_MOE_MMQ; eng <= ST_MOE_TC; eng++) {
        if (!moe_engine_ok(eng, type_gu, type_d, n_embd, n_ff)) continue;
        size_t sb;
        void *scr = moe_scratch(ctx, eng, type_gu, type_d, n_embd, n_ff, n_expert, n_tok, n_used, &sb);
        CHECKP(scr);
        poison(ctx, dy, sizeof(float) * n_embd * n_tok);
        CHECK(st_cuda_moe_ffn(g, eng, type_gu, dg, du, type_d, dd, n_embd, n_ff, n_expert, dx, dids, dw, n_tok, n_used,
                              dy, scr, sb, ctx->streams[0]));
        CHECK(st_cuda_sync(ctx, ctx->streams[0]));
        CHECK(st_cuda_memcpy_d2h(ctx, y_gpu, dy, sizeof(float) * n_embd * n_tok, NULL));
        st_cuda_free(ctx, scr);
        int ok = 1;
        if (eng == ST_MOE_CUBLAS_GROUPED || eng == ST_MOE_CUBLAS_LOOP) {  // the host saw the device's counting sort: it must match
            const int32_t *hc = st_cuda_moe_last_counts(g);
            for (int e = 0; hc && e < n_expert; e++)
                if (hc[e] != cnt[e]) ok = 0;
            if (!ok) printf("  FAIL moe %s: device expert counts differ from the routing\n", names[eng]);
        }
        double worst_rel = 0, worst_el = 0;
        int64_t nonfinite = 0;
        for (int t = 0; t < n_tok; t++) {
            double se = 0, sr = 0, mx = 0;
            for (int64_t j = 0; j < n_embd; j++) {
                const float a = y_gpu[(size_t)t * n_embd + j], b = y_cpu[(size_t)t * n_embd + j];
                if (!isfinite(a)) {
                    nonfinite++;
                    continue;
                }
                const double e = fabs((double)a - b);
                se += e * e, sr += (double)b * b;
                if (e > mx) mx = e;
            }
            const double rms = sqrt(sr / n_embd) + 1e-30;
            if (sqrt(se / (sr + 1e-30)) > worst_rel) worst_rel = sqrt(se / (sr + 1e-30));
            if (mx / rms > worst_el) worst_el = mx / rms;
        }
        ok = ok && !nonfinite && worst_rel <= 4e-2 && worst_el <= 0.25;
        printf("  %s moe %-14s %s/%s embd %lld ff %lld experts %d (used %d) top-%d tokens %d: worst token rel_rms "
               "%.2e  max err/rms %.3f  nonfinite %lld\n",
               ok ? "ok  " : "FAIL", names[eng], st_type_name(type_gu), st_type_name(type_d), (long long)n_embd,
               (long long)n_ff, n_expert, used, n_used, n_tok, worst_rel, worst_el, (long long)nonfinite);
        if (!ok) g_fail = 1;
    }
    // Slot maps (hybrid placement): each expert's gate | up | down in a slot of a shuffled slot buffer, and about a
    // third of the experts left out (slot -1, the CPU's share in hybrid prefill). Must be bit-identical to the
    // contiguous stacks with the left-out pairs' weights set to 0 (0 * finite adds +0 to the rank-order sum).
    const size_t gu_eb = st_row_size(type_gu, n_embd) * n_ff, d_eb = st_row_size(type_d, n_ff) * n_embd;
    const long long stride = (long long)((2 * gu_eb + d_eb + 255) / 256 * 256);
    if (gu_eb % 16 == 0 && d_eb % 16 == 0) {
        int32_t *slot_of = xmalloc(sizeof(int32_t) * n_expert), *order = xmalloc(sizeof(int32_t) * n_expert);
        for (int e = 0; e < n_expert; e++) order[e] = e;
        for (int e = n_expert - 1; e > 0; e--) {
            const int j = (int)st_rng_below(r, (uint32_t)e + 1), t = order[e];
            order[e] = order[j], order[j] = t;
        }
        uint8_t *slots = xmalloc((size_t)stride * n_expert);
        memset(slots, 0, (size_t)stride * n_expert);
        for (int s = 0; s < n_expert; s++) {
            const int e = order[s];
            slot_of[e] = st_rng_below(r, 3) == 0 ? -1 : s;
            memcpy(slots + (size_t)s * stride, wg + (size_t)e * gu_eb, gu_eb);
            memcpy(slots + (size_t)s * stride + gu_eb, wu + (size_t)e * gu_eb, gu_eb);
            memcpy(slots + (size_t)s * stride + 2 * gu_eb, wd + (size_t)e * d_eb, d_eb);
        }
        slot_of[ids[0]] = -1;  // at least one pair left out
        float *w0 = xmalloc(sizeof(float) * n_tok * n_used);
        for (int i = 0; i < n_tok * n_used; i++) w0[i] = slot_of[ids[i]] < 0 ? 0.0f : w[i];
        uint8_t *dslots = st_cuda_alloc(ctx, (size_t)stride * n_expert, "slots");
        int32_t *dslot_of = st_cuda_alloc(ctx, sizeof(int32_t) * n_expert, "slot map");
        float *dw0 = st_cuda_alloc(ctx, sizeof(float) * n_tok * n_used, "w0");
        float *dy0 = st_cuda_alloc(ctx, sizeof(float) * n_embd * n_tok, "y0");
        CHECKP(dslots && dslot_of && dw0 && dy0);
        CHECK(st_cuda_memcpy_h2d(ctx, dslots, slots, (size_t)stride * n_expert, NULL));
        CHECK(st_cuda_memcpy_h2d(ctx, dslot_of, slot_of, sizeof(int32_t) * n_expert, NULL));
        CHECK(st_cuda_memcpy_h2d(ctx, dw0, w0, sizeof(float) * n_tok * n_used, NULL));
        float *y_ref = xmalloc(sizeof(float) * n_embd * n_tok);
        for (int eng = ST_MOE_MMQ; eng <= ST_MOE_TC; eng += ST_MOE_TC - ST_MOE_MMQ) {
            if (!moe_engine_ok(eng, type_gu, type_d, n_embd, n_ff)) continue;
            size_t sb;
            void *scr = moe_scratch(ctx, eng, type_gu, type_d, n_embd, n_ff, n_expert, n_tok, n_used, &sb);
            CHECKP(scr);
            poison(ctx, dy0, sizeof(float) * n_embd * n_tok);
            CHECK(st_cuda_moe_ffn(g, eng, type_gu, dg, du, type_d, dd, n_embd, n_ff, n_expert, dx, dids, dw0, n_tok,
                                  n_used, dy0, scr, sb, ctx->streams[0]));
            CHECK(st_cuda_sync(ctx, ctx->streams[0]));
            CHECK(st_cuda_memcpy_d2h(ctx, y_ref, dy0, sizeof(float) * n_embd * n_tok, NULL));
            poison(ctx, scr, sb);
            poison(ctx, dy0, sizeof(float) * n_embd * n_tok);
            CHECK(st_cuda_moe_ffn_slots(g, eng, type_gu, dslots, dslots + gu_eb, type_d, dslots + 2 * gu_eb, stride,
                                        dslot_of, n_embd, n_ff, n_expert, dx, dids, dw, n_tok, n_used, dy0, scr, sb,
                                        ctx->streams[0]));
            CHECK(st_cuda_sync(ctx, ctx->streams[0]));
            CHECK(st_cuda_memcpy_d2h(ctx, y_gpu, dy0, sizeof(float) * n_embd * n_tok, NULL));
            st_cuda_free(ctx, scr);
            int64_t bad = -1;
            for (int64_t i = 0; i < n_embd * n_tok && bad < 0; i++)
                if (memcmp(&y_gpu[i], &y_ref[i], sizeof(float))) bad = i;
            printf("  %s moe %-14s slots, a third of the experts left out: %s\n", bad < 0 ? "ok  " : "FAIL", names[eng],
                   bad < 0 ? "bit-identical to the stacks with their weights 0" : "differs");
            if (bad >= 0) {
                printf("       element %lld: %g vs %g\n", (long long)bad, y_gpu[bad], y_ref[bad]);
                g_fail = 1;
            }
        }
        st_cuda_free(ctx, dslots), st_cuda_free(ctx, dslot_of), st_cuda_free(ctx, dw0), st_cuda_free(ctx, dy0);
        free(slot_of), free(order), free(slots), free(w0), free(y_ref);
    }
    st_cuda_free(ctx, dg), st_cuda_free(ctx, du), st_cuda_free(ctx, dd), st_cuda_free(ctx, dx);
    st_cuda_free(ctx, dy), st_cuda_free(ctx, dw), st_cuda_free(ctx, dids);
    free(wg), free(wu), free(wd), free(x), free(w), free(ids), free(y_cpu), free(y_gpu), free(cnt);
}

// ---- timing ----------------------------------------------------------------------------------------------------

// Device buffer of `copies` x the weights of one random (type, ne0 x n_rows) matrix: distinct copies make the
// timing read DRAM rather than L2 (a layer's attention weights alone would fit in the 50 MB L2).
static void *dev_weights(st_cuda_ctx *ctx, int type, int64_t ne0, int64_t n_rows, int copies, st_rng *r) {
    const size_t bytes = st_row_size(type, ne0) * n_rows;
    // Random content for at most 64 MiB, repeated: generating GBs on the host would dominate the test's run time.
    const size_t chunk = bytes < (64u << 20) ? bytes : (64u << 20) / st_row_size(type, ne0) * st_row_size(type, ne0);
    uint8_t *h = random_weights(type, ne0, (int64_t)(chunk / st_row_size(type, ne0)), r, NULL);
    uint8_t *d = st_cuda_alloc(ctx, bytes * copies, "timing weights");
    CHECKP(d);
    for (size_t off = 0; off < bytes * copies; off += chunk) {
        const size_t n = bytes * copies - off < chunk ? bytes * copies - off : chunk;
        CHECK(st_cuda_memcpy_h2d(ctx, d + off, h, n, NULL));
    }
    free(h);
    return d;
}

typedef struct {
    int type;
    int64_t ne0, n_out;
    const char *name;
    void *w;  // [copies] matrices
} dense_w;

static void timing(st_cuda_ctx *ctx, st_gemm_ctx *g, st_rng *r) {
    // Qwen3-30B-A3B: d 2048, 32/4 heads x 128, 128 experts top-8, expert FF 768; Q4_K_M mix.
    const int64_t n_embd = 2048, n_ff = 768, n_tok = 512;
    const int n_expert = 128, n_used = 8, n_layer = 48, copies = 8;
    dense_w dw[] = {
        {ST_TYPE_Q4_K, 2048, 4096, "attn_q", NULL},  {ST_TYPE_Q4_K, 2048, 512, "attn_k", NULL},
        {ST_TYPE_Q6_K, 2048, 512, "attn_v", NULL},   {ST_TYPE_Q4_K, 4096, 2048, "attn_output", NULL},
        {ST_TYPE_F32, 2048, 128, "ffn_gate_inp", NULL},
    };
    const int n_dw = (int)(sizeof dw / sizeof dw[0]);
    for (int i = 0; i < n_dw; i++) dw[i].w = dev_weights(ctx, dw[i].type, dw[i].ne0, dw[i].n_out, copies, r);
    void *wg = dev_weights(ctx, ST_TYPE_Q4_K, n_embd, n_ff * n_expert, 1, r);
    void *wu = dev_weights(ctx, ST_TYPE_Q4_K, n_embd, n_ff * n_expert, 1, r);
    void *wd = dev_weights(ctx, ST_TYPE_Q6_K, n_ff, n_embd * n_expert, 1, r);
    float *hx = xmalloc(sizeof(float) * 4096 * n_tok);
    for (int64_t i = 0; i < 4096 * n_tok; i++) hx[i] = st_rng_normal(r);
    float *dx = st_cuda_alloc(ctx, sizeof(float) * 4096 * n_tok, "x"), *dy = st_cuda_alloc(ctx, sizeof(float) * 4096 * n_tok, "y");
    float *dwt = st_cuda_alloc(ctx, sizeof(float) * n_tok * n_used, "w");
    int32_t *dids = st_cuda_alloc(ctx, sizeof(int32_t) * n_tok * n_used, "ids");
    CHECKP(dx && dy && dwt && dids);
    CHECK(st_cuda_memcpy_h2d(ctx, dx, hx, sizeof(float) * 4096 * n_tok, NULL));
    int32_t *ids = xmalloc(sizeof(int32_t) * n_tok * n_used);
    float *w = xmalloc(sizeof(float) * n_tok * n_used);
    // Router-like ids: uniform over all experts (real routers are mildly skewed; every expert active).
    for (int t = 0; t < n_tok; t++) {
        for (int k = 0; k < n_used; k++) {
            int e, dup;
            do {
                e = (int)st_rng_below(r, n_expert);
                dup = 0;
                for (int j = 0; j < k; j++) dup |= ids[t * n_used + j] == e;
            } while (dup);
            ids[t * n_used + k] = e;
            w[t * n_used + k] = 1.0f / n_used;
        }
    }
    CHECK(st_cuda_memcpy_h2d(ctx, dids, ids, sizeof(int32_t) * n_tok * n_used, NULL));
    CHECK(st_cuda_memcpy_h2d(ctx, dwt, w, sizeof(float) * n_tok * n_used, NULL));
    size_t sb = 0;
    for (int i = 0; i < n_dw; i++)
        for (int e = ST_GEMM_CUBLAS; e <= ST_GEMM_TC; e++) {
            const size_t s = st_cuda_gemm_scratch_bytes(e, dw[i].type, dw[i].ne0, dw[i].n_out, n_tok);
            if (s > sb) sb = s;
        }
    for (int e = ST_MOE_MMQ; e <= ST_MOE_TC; e++) {
        const size_t s = st_cuda_moe_scratch_bytes(e, ST_TYPE_Q4_K, ST_TYPE_Q6_K, n_embd, n_ff, n_expert, n_tok, n_used);
        if (s > sb) sb = s;
    }
    void *scr = st_cuda_alloc(ctx, sb, "timing scratch");
    CHECKP(scr);
    cudaStream_t s = ctx->streams[0];
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0) != cudaSuccess);
    CHECK(cudaEventCreate(&e1) != cudaSuccess);
    const int reps = 8;
    float ms;

    // Dense projections, per engine; the best engine per matrix counts towards the total.
    double dense_best_ms = 0, dense_flop = 0;
    printf("  timing (512 tokens, per layer; x%d layers):\n", n_layer);
    for (int i = 0; i < n_dw; i++) {
        double best = 1e30;
        const double flop = 2.0 * n_tok * dw[i].ne0 * dw[i].n_out;
        for (int eng = ST_GEMM_CUBLAS; eng <= ST_GEMM_TC; eng++) {
            if (eng == ST_GEMM_MMQ && !st_cuda_mmq_supported(dw[i].type)) continue;
            if (eng == ST_GEMM_TC && !st_cuda_tc_supported(dw[i].type)) continue;
            const size_t wb = st_row_size(dw[i].type, dw[i].ne0) * dw[i].n_out;
            for (int k = 0; k < 2; k++)  // warm-up
                CHECK(st_cuda_gemm(g, eng, dw[i].type, dw[i].w, dw[i].ne0, dw[i].n_out, dx, n_tok, dy, scr, sb, s));
            CHECK(cudaEventRecord(e0, s) != cudaSuccess);
            for (int k = 0; k < reps; k++)
                CHECK(st_cuda_gemm(g, eng, dw[i].type, (uint8_t *)dw[i].w + (size_t)(k % copies) * wb, dw[i].ne0,
                                   dw[i].n_out, dx, n_tok, dy, scr, sb, s));
            CHECK(cudaEventRecord(e1, s) != cudaSuccess);
            CHECK(cudaEventSynchronize(e1) != cudaSuccess);
            CHECK(cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess);
            const double per = ms / reps;
            printf("    %-12s %-5s %5lld -> %-5lld %-6s %8.3f ms  %7.1f TFLOP/s\n", dw[i].name, st_type_name(dw[i].type),
                   (long long)dw[i].ne0, (long long)dw[i].n_out, eng == ST_GEMM_MMQ ? "mmq" : eng == ST_GEMM_TC ? "tc" : "cublas", per,
                   flop / (per * 1e-3) / 1e12);
            if (per < best) best = per;
        }
        dense_best_ms += best;
        dense_flop += flop;
    }
    static const char *names[] = {"mmq", "cublas-grouped", "cublas-loop", "tc"};
    const double moe_flop = 2.0 * n_tok * n_used * 3.0 * n_embd * n_ff;
    double moe_best = 1e30;
    for (int eng = ST_MOE_MMQ; eng <= ST_MOE_TC; eng++) {
        for (int k = 0; k < 2; k++)
            CHECK(st_cuda_moe_ffn(g, eng, ST_TYPE_Q4_K, wg, wu, ST_TYPE_Q6_K, wd, n_embd, n_ff, n_expert, dx, dids, dwt,
                                  n_tok, n_used, dy, scr, sb, s));
        CHECK(st_cuda_sync(ctx, s));
        const double t0 = st_now();
        CHECK(cudaEventRecord(e0, s) != cudaSuccess);
        for (int k = 0; k < reps; k++)
            CHECK(st_cuda_moe_ffn(g, eng, ST_TYPE_Q4_K, wg, wu, ST_TYPE_Q6_K, wd, n_embd, n_ff, n_expert, dx, dids,
                                  dwt, n_tok, n_used, dy, scr, sb, s));
        CHECK(cudaEventRecord(e1, s) != cudaSuccess);
        CHECK(cudaEventSynchronize(e1) != cudaSuccess);
        const double wall = (st_now() - t0) * 1e3 / reps;
        CHECK(cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess);
        const double per = ms / reps > wall ? ms / reps : wall;  // host syncs of the cuBLAS engines count too
        printf("    moe %-14s Q4_K/Q6_K 128x(3x2048x768) top-8 %8.3f ms (gpu %.3f)  %7.1f TFLOP/s\n", names[eng], per,
               ms / reps, moe_flop / (per * 1e-3) / 1e12);
        if (per < moe_best) moe_best = per;
    }
    const double layer_ms = dense_best_ms + moe_best, total_ms = layer_ms * n_layer;
    printf("  GEMM part of one 48-layer pp512 chunk: %.2f ms per layer (dense %.3f + moe %.3f), %.1f ms total, "
           "%.1f TFLOP/s => pp512 <= %.0f tok/s from the GEMMs alone (target 9006 for the whole step)\n",
           layer_ms, dense_best_ms, moe_best, total_ms, (dense_flop + moe_flop) * n_layer / (total_ms * 1e-3) / 1e12,
           n_tok / (total_ms * 1e-3));
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    for (int i = 0; i < n_dw; i++) st_cuda_free(ctx, dw[i].w);
    st_cuda_free(ctx, wg), st_cuda_free(ctx, wu), st_cuda_free(ctx, wd), st_cuda_free(ctx, dx), st_cuda_free(ctx, dy);
    st_cuda_free(ctx, dwt), st_cuda_free(ctx, dids), st_cuda_free(ctx, scr);
    free(hx), free(ids), free(w);
}

// ---- argument checks -------------------------------------------------------------------------------------------

static void test_errors(st_cuda_ctx *ctx, st_gemm_ctx *g) {
    int bad = 0;
    float *d = st_cuda_alloc(ctx, 4096, "tiny");
    CHECKP(d);
    if (st_cuda_gemm(g, ST_GEMM_CUBLAS, ST_TYPE_Q4_K, d, 100, 8, d, 1, d, d, 4096, NULL) == 0) bad++;  // ne0 % 256
    if (st_cuda_gemm(g, ST_GEMM_MMQ, ST_TYPE_F16, d, 256, 8, d, 1, d, d, 4096, NULL) == 0) bad++;      // float mmq
    if (st_cuda_gemm(g, ST_GEMM_CUBLAS, ST_TYPE_Q4_K, d, 2048, 2048, d, 64, d, d, 4096, NULL) == 0) bad++;  // scratch
    if (st_cuda_moe_ffn(g, ST_MOE_MMQ, ST_TYPE_Q4_K, d, d, ST_TYPE_Q6_K, d, 2048, 768, 128, d, (int32_t *)d, d, 4, 9,
                        d, d, 4096, NULL) == 0)
        bad++;  // n_used > n_expert? no: 9 <= 128, but scratch too small
    if (st_cuda_gemm(g, ST_GEMM_TC, ST_TYPE_F16, d, 256, 8, d, 1, d, d, 4096, NULL) == 0) bad++;  // float tc
    if (st_cuda_moe_ffn(g, ST_MOE_TC, ST_TYPE_Q4_K, d, d, ST_TYPE_Q6_K, d, 2048, 96, 128, d, (int32_t *)d, d, 4, 8,
                        d, d, 1 << 30, NULL) == 0)
        bad++;  // n_ff % 256
    if (st_cuda_gemm(g, ST_GEMM_CUBLAS, 5 /* no such type */, d, 256, 8, d, 1, d, d, 4096, NULL) == 0) bad++;
    st_cuda_free(ctx, d);
    printf("  %s argument checks (%d accepted that should fail)\n", bad ? "FAIL" : "ok  ", bad);
    if (bad) g_fail = 1;
    st_err_clear();
}

int main(int argc, char **argv) {
    int quick = 0, no_timing = 0;
    if (gpu_test_args(argc, argv, &quick, &no_timing)) return 2;
    g_seed = gpu_test_seed(32);
    printf("test_gpu_gemm: seed %llu%s\n", (unsigned long long)g_seed, quick ? " (quick)" : "");
    st_cuda_ctx ctx;
    if (st_cuda_init(&ctx, 0, 1, 0)) {
        fprintf(stderr, "test_gpu_gemm: FAIL: %s\n", st_errmsg());
        return 1;
    }
    printf("device: %s (sm_%d%d, %d SMs)\n", ctx.name, ctx.cc_major, ctx.cc_minor, ctx.sm_count);
    st_gemm_ctx *g = st_cuda_gemm_create(&ctx);
    CHECKP(g);
    g_pool = st_pool_create(0);
    st_rng r;
    st_rng_init(&r, g_seed, 0);

    printf("dense parity vs st_cpu_matmul:\n");
    static const int all_types[] = {
        ST_TYPE_Q4_K,   ST_TYPE_Q6_K,   ST_TYPE_Q5_K,   ST_TYPE_Q3_K,    ST_TYPE_Q2_K,   ST_TYPE_Q4_0,
        ST_TYPE_Q4_1,   ST_TYPE_Q5_0,   ST_TYPE_Q5_1,   ST_TYPE_Q8_0,    ST_TYPE_IQ2_XXS, ST_TYPE_IQ2_XS,
        ST_TYPE_IQ2_S,  ST_TYPE_IQ3_XXS, ST_TYPE_IQ3_S, ST_TYPE_IQ1_S,   ST_TYPE_IQ1_M,  ST_TYPE_IQ4_NL,
        ST_TYPE_IQ4_XS, ST_TYPE_MXFP4,  ST_TYPE_F32,    ST_TYPE_F16,     ST_TYPE_BF16,
    };
    static const int quick_types[] = {ST_TYPE_Q4_K, ST_TYPE_Q6_K, ST_TYPE_Q2_K, ST_TYPE_Q4_1, ST_TYPE_IQ1_M, ST_TYPE_F16};
    static const int64_t shapes[][2] = {{2048, 4096}, {4096, 2048}, {2048, 768}, {768, 2048}};
    static const int64_t quick_shapes[][2] = {{512, 96}, {256, 64}};
    static const int ns_full[] = {1, 7, 64, 512}, ns_quick[] = {1, 7, 40};
    const int n_types = quick ? (int)(sizeof quick_types / sizeof *quick_types) : (int)(sizeof all_types / sizeof *all_types);
    for (int ti = 0; ti < n_types; ti++) {
        const int type = quick ? quick_types[ti] : all_types[ti];
        for (int si = 0; si < (quick ? 2 : 4); si++) {
            const int64_t ne0 = quick ? quick_shapes[si][0] : shapes[si][0];
            const int64_t n_out = quick ? quick_shapes[si][1] : shapes[si][1];
            test_dense(&ctx, g, type, ne0, n_out, quick ? ns_quick : ns_full, quick ? 3 : 4, &r);
        }
    }
    printf("MoE parity vs a CPU loop over experts:\n");
    if (quick) {
        test_moe(&ctx, g, ST_TYPE_Q4_K, ST_TYPE_Q6_K, 512, 256, 16, 4, 37, &r);
    } else {
        test_moe(&ctx, g, ST_TYPE_Q4_K, ST_TYPE_Q6_K, 2048, 768, 128, 8, 200, &r);
        test_moe(&ctx, g, ST_TYPE_Q5_K, ST_TYPE_Q8_0, 1024, 512, 8, 2, 600, &r);  // 64-token tiles, other types
        test_moe(&ctx, g, ST_TYPE_IQ1_M, ST_TYPE_Q4_0, 512, 256, 8, 2, 5, &r);    // cuBLAS only (IQ1_M)
    }
    test_errors(&ctx, g);
    if (!quick && !no_timing) timing(&ctx, g, &r);

    st_pool_destroy(g_pool);
    st_cuda_gemm_destroy(g);
    st_cuda_destroy(&ctx);
    if (g_fail) printf("test_gpu_gemm: FAIL (seed %llu)\n", (unsigned long long)g_seed);
    else printf("test_gpu_gemm: PASS\n");
    return g_fail;
}
