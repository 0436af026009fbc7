// Bit parity of Strata's CPU matmul with llama.cpp's CPU backend (ggml from llama-cpp-python 0.3.36, the build the
// goldens come from), for every K-quant and IQ type: dense products of 3, 5, 8, 13 and 40 tokens (1-token, 4-token
// and tiled orders) and MUL_MAT_ID experts with 20, 5, 8 and 7 routed tokens, 1 and 2 ggml threads. Rows = 36
// (not a multiple of 8), so neither side repacks the weights. Weights and activations are random (st_random_blocks)
// with a fresh seed each run; STRATA_SEED=<n> reproduces one. Built only where ggml's headers and libraries are
// present (tests/cpu/CMakeLists.txt); exits 77 (skipped) on a CPU without AVX-512 VNNI, which that build needs.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-cpu.h"
#include "ggml.h"

#include "cpu/features.h"
#include "cpu/matmul.h"
#include "quant/quant.h"
#include "util/rng.h"

static uint64_t g_seed;
static int g_fail;

static void compare(const char *what, int type, const float *want, const float *got, int64_t n) {
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&want[i], &got[i], sizeof(float)) != 0 && bad++ == 0) first = i;
    if (bad) {
        fprintf(stderr, "FAIL (seed %llu): %s %s: %lld of %lld outputs differ from ggml (first [%lld]: %.9g vs %.9g)\n",
                (unsigned long long)g_seed, st_type_name(type), what, (long long)bad, (long long)n, (long long)first,
                got[first], want[first]);
        g_fail++;
    }
}

static void fill(float *x, int64_t n, st_rng *rng) {
    for (int64_t i = 0; i < n; i++) x[i] = st_rng_normal(rng) * (st_rng_below(rng, 50) == 0 ? 20.0f : 1.0f);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

// Y[t][r] of ggml_mul_mat(W [ne0, rows], X [ne0, nt]) on n_threads.
static void ggml_dense(int type, const void *W, int64_t ne0, int64_t rows, const float *X, int64_t nt, int n_threads,
                       float *Y) {
    struct ggml_init_params ip = {64u << 20, NULL, false};
    struct ggml_context *ctx = ggml_init(ip);
    struct ggml_tensor *a = ggml_new_tensor_2d(ctx, (enum ggml_type)type, ne0, rows);
    struct ggml_tensor *b = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, ne0, nt);
    memcpy(ggml_get_data(a), W, ggml_nbytes(a));
    memcpy(ggml_get_data(b), X, ggml_nbytes(b));
    struct ggml_tensor *c = ggml_mul_mat(ctx, a, b);
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, c);
    ggml_graph_compute_with_ctx(ctx, gf, n_threads);
    memcpy(Y, ggml_get_data(c), sizeof(float) * (size_t)(rows * nt));
    ggml_free(ctx);
}

static void test_type(int type, st_rng *rng, int n_threads) {
    const int64_t ne0 = 768, rows = 36;
    const size_t rb = st_row_size(type, ne0), tsz = st_type_get(type)->type_size;
    char what[64];
    // Dense.
    uint8_t *W = xmalloc(rb * rows);
    st_random_blocks(type, W, (int64_t)(rb * rows / tsz), 1.0f, rng);
    const int64_t toks[] = {3, 5, 8, 13, 40};
    for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
        const int64_t nt = toks[k];
        float *X = xmalloc(sizeof(float) * ne0 * nt), *Y = xmalloc(sizeof(float) * rows * nt),
              *G = xmalloc(sizeof(float) * rows * nt);
        fill(X, ne0 * nt, rng);
        ggml_dense(type, W, ne0, rows, X, nt, n_threads, G);
        if (st_cpu_matmul(NULL, type, W, ne0, rows, X, nt, Y, NULL) < 0) g_fail++;
        snprintf(what, sizeof what, "dense, %lld tokens, %d ggml threads", (long long)nt, n_threads);
        compare(what, type, G, Y, rows * nt);
        free(X), free(Y), free(G);
    }
    free(W);
    // MUL_MAT_ID: 4 experts, 20 tokens, 2 experts per token; expert 0 gets all 20 tokens, expert 1 the first 5,
    // experts 2 and 3 the other 15 alternately (8 and 7).
    enum { NE = 4, NT = 20, NU = 2 };
    uint8_t *WE = xmalloc(rb * rows * NE);
    st_random_blocks(type, WE, (int64_t)(rb * rows * NE / tsz), 1.0f, rng);
    float *X = xmalloc(sizeof(float) * ne0 * NT);
    fill(X, ne0 * NT, rng);
    int32_t ids[NT][NU];
    for (int t = 0; t < NT; t++) ids[t][0] = 0, ids[t][1] = t < 5 ? 1 : (t % 2 ? 2 : 3);
    struct ggml_init_params ip = {64u << 20, NULL, false};
    struct ggml_context *ctx = ggml_init(ip);
    struct ggml_tensor *as = ggml_new_tensor_3d(ctx, (enum ggml_type)type, ne0, rows, NE);
    struct ggml_tensor *b = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, ne0, 1, NT);  // one row per token, broadcast
    struct ggml_tensor *id = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, NU, NT);
    memcpy(ggml_get_data(as), WE, ggml_nbytes(as));
    memcpy(ggml_get_data(b), X, ggml_nbytes(b));
    memcpy(ggml_get_data(id), ids, sizeof ids);
    struct ggml_tensor *c = ggml_mul_mat_id(ctx, as, b, id);  // [rows, NU, NT]
    struct ggml_cgraph *gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, c);
    ggml_graph_compute_with_ctx(ctx, gf, n_threads);
    const float *out = ggml_get_data(c);
    for (int e = 0; e < NE; e++) {
        int64_t tok[NT], cnt = 0;
        int slot[NT];
        for (int t = 0; t < NT; t++)
            for (int u = 0; u < NU; u++)
                if (ids[t][u] == e) slot[cnt] = u, tok[cnt++] = t;
        float *Xe = xmalloc(sizeof(float) * ne0 * cnt), *Ye = xmalloc(sizeof(float) * rows * cnt),
              *Ge = xmalloc(sizeof(float) * rows * cnt);
        for (int64_t k = 0; k < cnt; k++) {
            memcpy(Xe + k * ne0, X + tok[k] * ne0, sizeof(float) * ne0);
            memcpy(Ge + k * rows, out + (tok[k] * NU + slot[k]) * rows, sizeof(float) * rows);
        }
        if (st_cpu_matmul_rows(NULL, type, WE + (size_t)e * rows * rb, ne0, 0, rows, Xe, cnt, Ye, rows, NULL,
                               ST_MM_EXPERT) < 0)
            g_fail++;
        snprintf(what, sizeof what, "expert %d, %lld tokens, %d ggml threads", e, (long long)cnt, n_threads);
        compare(what, type, Ge, Ye, rows * cnt);
        free(Xe), free(Ye), free(Ge);
    }
    ggml_free(ctx);
    free(WE), free(X);
}

int main(void) {
    if (!st_cpu_isa_supported(ST_CPU_ISA_AVX512)) {
        printf("skipped: no AVX-512 VNNI (llama.cpp's build here needs it)\n");
        return 77;
    }
    const char *env = getenv("STRATA_SEED");
    g_seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    st_rng rng;
    st_rng_init(&rng, g_seed, 0);
    st_cpu_isa_set(ST_CPU_ISA_AVX512);
    const int types[] = {ST_TYPE_Q2_K,   ST_TYPE_Q3_K,   ST_TYPE_Q4_K,    ST_TYPE_Q5_K,  ST_TYPE_Q6_K,
                         ST_TYPE_IQ4_XS, ST_TYPE_IQ2_XXS, ST_TYPE_IQ2_XS, ST_TYPE_IQ2_S, ST_TYPE_IQ3_XXS,
                         ST_TYPE_IQ3_S,  ST_TYPE_IQ1_S,  ST_TYPE_IQ1_M};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) test_type(types[i], &rng, 1 + (int)(i % 2));
    if (g_fail) {
        fprintf(stderr, "%d failures (seed %llu; rerun with STRATA_SEED=%llu)\n", g_fail, (unsigned long long)g_seed,
                (unsigned long long)g_seed);
        return 1;
    }
    printf("ok: %zu types bit-identical to ggml (seed %llu)\n", sizeof types / sizeof types[0],
           (unsigned long long)g_seed);
    return 0;
}
