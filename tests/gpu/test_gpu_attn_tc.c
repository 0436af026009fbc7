// GPU parity of the tensor-core prefill attention (st_cuda_attn_prefill_tc, src/cuda/attention_tc.cu) against the
// CPU attention (st_attention, cpu/ops.h) on fresh random queries and f16 caches (seed printed; STRATA_SEED
// overrides). Shapes: Qwen3-30B-A3B (32/4 heads x 128), 32/4 x 64, 9/3 x 64 (group of 3: row blocks straddle
// tokens), 16/16 x 128 (no grouping); chunks of 1, 17, 100 and 256 tokens at depths 0, 1000 and 16K (the 16K
// cases with fewer tokens to keep the CPU reference short). The output is poisoned (NaN) before each call.
// Pass per (token, head) row: relative L2 error <= 1e-2 and every element within 3e-2 of the row's RMS (the
// kernel rounds queries and probabilities to f16; typical errors are ~1e-3), and no non-finite value.
// Usage: test_gpu_attn_tc [--quick]   (--quick: small cases only, for compute-sanitizer)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cpu/ops.h"
#include "cuda/attention_tc.h"
#include "cuda/runtime.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/pool.h"
#include "util/rng.h"

#include "gpu_test_util.h"

static uint64_t g_seed;
static int g_fail, g_cases;
static st_pool *g_pool;
static st_rng g_rng;
static st_cuda_ctx g_ctx;

#define CHECK(x)                                                                                      \
    do {                                                                                              \
        if ((x) != 0) {                                                                               \
            fprintf(stderr, "%s:%d: %s: %s (seed %llu)\n", __FILE__, __LINE__, #x, st_errmsg(),      \
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

static void *to_dev(const void *h, size_t bytes, const char *what) {
    void *d = st_cuda_alloc(&g_ctx, bytes, what);
    if (!d) {
        fprintf(stderr, "%s (seed %llu)\n", st_errmsg(), (unsigned long long)g_seed);
        exit(1);
    }
    CHECK(st_cuda_memcpy_h2d(&g_ctx, d, h, bytes, NULL));
    return d;
}

static void run_case(int n_tok, int pos0, int n_head, int n_kv, int hd) {
    const int64_t row = (int64_t)n_kv * hd, n_pos = pos0 + n_tok, qn = (int64_t)n_tok * n_head * hd;
    uint16_t *kc = xmalloc(2 * (size_t)(n_pos * row)), *vc = xmalloc(2 * (size_t)(n_pos * row));
    for (int64_t i = 0; i < n_pos * row; i++) {
        kc[i] = st_f32_to_f16(st_rng_normal(&g_rng));
        vc[i] = st_f32_to_f16(st_rng_normal(&g_rng));
    }
    float *q = xmalloc(sizeof(float) * qn), *ref = xmalloc(sizeof(float) * qn), *got = xmalloc(sizeof(float) * qn);
    // Larger query norms on some heads make the softmax peaky (the online rescaling matters then).
    for (int64_t i = 0; i < qn; i++) q[i] = st_rng_normal(&g_rng) * (1.0f + 2.0f * (float)((i / hd) % 3));
    void *dk = to_dev(kc, 2 * (size_t)(n_pos * row), "k cache"), *dv = to_dev(vc, 2 * (size_t)(n_pos * row), "v cache");
    float *dq = to_dev(q, sizeof(float) * qn, "q");
    int32_t p0 = pos0;
    int32_t *dpos = to_dev(&p0, sizeof p0, "pos");
    float *dout = st_cuda_alloc(&g_ctx, sizeof(float) * qn, "out");
    if (!dout) exit(1);
    CHECK(st_cuda_memset(&g_ctx, dout, 0xff, sizeof(float) * qn, NULL));  // NaN
    const float scale = 1.0f / sqrtf((float)hd);
    CHECK(st_cuda_attn_prefill_tc(dout, dq, dk, dv, dpos, n_tok, n_head, n_kv, hd, scale, g_ctx.streams[0]));
    CHECK(st_cuda_sync(&g_ctx, g_ctx.streams[0]));
    CHECK(st_cuda_memcpy_d2h(&g_ctx, got, dout, sizeof(float) * qn, NULL));
    st_attention(g_pool, ref, q, kc, vc, 1, n_tok, pos0, n_head, n_kv, hd, scale);
    double worst_rel = 0, worst_el = 0;
    int64_t nonfinite = 0, bad_rows = 0;
    for (int64_t r = 0; r < (int64_t)n_tok * n_head; r++) {
        double se = 0, sr = 0, mx = 0;
        for (int d = 0; d < hd; d++) {
            const float a = got[r * hd + d], b = ref[r * hd + d];
            if (!isfinite(a)) {
                nonfinite++;
                continue;
            }
            const double e = fabs((double)a - b);
            se += e * e, sr += (double)b * b;
            if (e > mx) mx = e;
        }
        const double rel = sqrt(se / (sr + 1e-30)), el = mx / (sqrt(sr / hd) + 1e-30);
        if (rel > 1e-2 || el > 3e-2) bad_rows++;
        if (rel > worst_rel) worst_rel = rel;
        if (el > worst_el) worst_el = el;
    }
    const int ok = !nonfinite && !bad_rows;
    printf("  %s attn_prefill_tc n_tok %4d pos0 %5d heads %2d/%2d hd %3d: worst row rel %.2e, max err/rms %.2e, "
           "bad rows %lld, nonfinite %lld\n",
           ok ? "ok  " : "FAIL", n_tok, pos0, n_head, n_kv, hd, worst_rel, worst_el, (long long)bad_rows,
           (long long)nonfinite);
    if (!ok) g_fail = 1;
    g_cases++;
    st_cuda_free(&g_ctx, dk), st_cuda_free(&g_ctx, dv), st_cuda_free(&g_ctx, dq), st_cuda_free(&g_ctx, dpos);
    st_cuda_free(&g_ctx, dout);
    free(kc), free(vc), free(q), free(ref), free(got);
}

int main(int argc, char **argv) {
    int quick = 0;
    if (gpu_test_args(argc, argv, &quick, NULL)) return 2;
    g_seed = gpu_test_seed(16);
    printf("test_gpu_attn_tc: seed %llu%s\n", (unsigned long long)g_seed, quick ? " (quick)" : "");
    if (st_cuda_init(&g_ctx, 0, 1, 0)) {
        fprintf(stderr, "test_gpu_attn_tc: FAIL: %s\n", st_errmsg());
        return 1;
    }
    printf("device: %s (sm_%d%d, %d SMs)\n", g_ctx.name, g_ctx.cc_major, g_ctx.cc_minor, g_ctx.sm_count);
    g_pool = st_pool_create(0);
    st_rng_init(&g_rng, g_seed, 0);

    // Unsupported shapes are refused (the caller then uses the SIMT kernel).
    if (st_cuda_attn_prefill_tc_supported(128, 32, 4, 0) || st_cuda_attn_prefill_tc_supported(96, 32, 4, 1) ||
        !st_cuda_attn_prefill_tc_supported(128, 32, 4, 1) || !st_cuda_attn_prefill_tc_supported(64, 9, 3, 1)) {
        printf("  FAIL st_cuda_attn_prefill_tc_supported\n");
        g_fail = 1;
    }
    static const int shapes[][3] = {{32, 4, 128}, {32, 4, 64}, {9, 3, 64}, {16, 16, 128}};
    if (quick) {
        run_case(17, 0, 32, 4, 128);
        run_case(5, 70, 9, 3, 64);
        run_case(40, 100, 32, 4, 64);
    } else {
        static const int nt[] = {1, 17, 100, 256}, p0[] = {0, 1000};
        for (int s = 0; s < 4; s++)
            for (int a = 0; a < 4; a++)
                for (int b = 0; b < 2; b++) run_case(nt[a], p0[b], shapes[s][0], shapes[s][1], shapes[s][2]);
        run_case(512, 0, 32, 4, 128);        // a whole pp512 chunk
        run_case(24, 16384 - 24, 32, 4, 128);  // 16K depth
        run_case(9, 16000, 32, 4, 64);
        run_case(3, 16381, 9, 3, 64);
    }
    st_pool_destroy(g_pool);
    st_cuda_destroy(&g_ctx);
    if (g_fail) printf("test_gpu_attn_tc: FAIL (%d cases, seed %llu)\n", g_cases, (unsigned long long)g_seed);
    else printf("test_gpu_attn_tc: PASS (%d cases)\n", g_cases);
    return g_fail;
}
