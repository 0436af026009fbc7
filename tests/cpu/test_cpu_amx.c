// The AMX int8 kernels (cpu/gemm_amx.h, Q4_K and Q6_K) against the CPU engine's products (st_cpu_matmul_rows_q)
// on the same Q8_K activations, fresh random weights and rows: the same int8 products in another float order, so
// every output within 1e-5 of its row's sum of |w x| (and the relative RMS error <= 1e-6); shapes with token tails
// (1, 5, 17, 37 tokens) and row counts 16 .. 2048; bad shapes and types refused; switched off -> refused. Exit 77
// (skipped) on a CPU or build without AMX. STRATA_SEED=N fixes the seed (printed on failure).
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu/dot.h"
#include "cpu/features.h"
#include "cpu/gemm_amx.h"
#include "cpu/matmul.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/log.h"
#include "util/rng.h"

static int failures;
#define CHECK(cond, ...)                                                                                           \
    do {                                                                                                           \
        if (!(cond)) {                                                                                             \
            if (failures++ < 20) {                                                                                 \
                fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                              \
                fprintf(stderr, __VA_ARGS__);                                                                      \
                fprintf(stderr, "\n");                                                                             \
            }                                                                                                      \
        }                                                                                                          \
    } while (0)

static void test_shape(st_rng *r, int type, int64_t ne0, int64_t n_rows, int64_t n_tok) {
    const size_t rb = st_row_size(type, ne0), xs = (st_cpu_act_row_size(type, ne0) + 63) & ~(size_t)63;
    uint8_t *W = malloc(rb * (size_t)n_rows), *Xq = aligned_alloc(64, xs * (size_t)n_tok);
    float *row = malloc(sizeof(float) * (size_t)ne0), *X = malloc(sizeof(float) * (size_t)(ne0 * n_tok));
    float *want = malloc(sizeof(float) * (size_t)(n_rows * n_tok)), *got = malloc(sizeof(float) * (size_t)(n_rows * n_tok));
    float *absw = malloc(sizeof(float) * (size_t)(n_rows * ne0));
    for (int64_t i = 0; i < n_rows; i++) {
        for (int64_t j = 0; j < ne0; j++) row[j] = st_rng_normal(r) * 0.02f * (1.0f + (float)(j % 7));
        st_quantize_row(type, row, W + (size_t)i * rb, ne0);
        st_dequantize_row(type, W + (size_t)i * rb, absw + (size_t)i * ne0, ne0);
    }
    for (int64_t i = 0; i < ne0 * n_tok; i++) X[i] = st_rng_normal(r) * (i % 13 == 0 ? 8.0f : 1.0f);
    for (int64_t t = 0; t < n_tok; t++)
        CHECK(st_cpu_quantize_act(st_cpu_act_type(type), X + t * ne0, Xq + (size_t)t * xs, ne0,
                                  st_cpu_isa_active()) == 0, "quantize: %s", st_errmsg());
    CHECK(st_cpu_matmul_rows_q(NULL, type, W, ne0, 0, n_rows, Xq, xs, n_tok, want, n_rows, 0) == 0,
          "reference: %s", st_errmsg());
    for (int64_t i = 0; i < n_rows * n_tok; i++) got[i] = NAN;  // poison: unwritten outputs fail
    CHECK(st_cpu_gemm_amx(type, W, ne0, n_rows, Xq, xs, n_tok, got, n_rows) == 0, "amx: %s", st_errmsg());
    double se = 0, sr = 0, worst = 0;
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t o = 0; o < n_rows; o++) {
            double mag = 0;
            for (int64_t j = 0; j < ne0; j++) mag += fabs((double)absw[o * ne0 + j] * X[t * ne0 + j]);
            const double d = fabs((double)got[t * n_rows + o] - want[t * n_rows + o]);
            const double e = d / (mag + 1e-30);
            if (!(e <= worst)) worst = e;  // (a NaN sticks and fails the check)
            se += d * d, sr += (double)want[t * n_rows + o] * want[t * n_rows + o];
        }
    const double rel = sqrt(se / (sr + 1e-30));
    CHECK(worst <= 1e-5 && rel <= 1e-6, "%s, ne0 %lld, %lld rows, %lld tokens: worst |d| / sum|w x| %.3e, relative RMS %.3e",
          st_type_name(type), (long long)ne0, (long long)n_rows, (long long)n_tok, worst, rel);
    free(W), free(Xq), free(row), free(X), free(want), free(got), free(absw);
}

int main(void) {
    st_log_set_level(ST_LOG_WARN);
    if (!st_cpu_amx_available()) {
        printf("test_cpu_amx: SKIP (no AMX int8 on this CPU or in this build)\n");
        return 77;
    }
    const char *env = getenv("STRATA_SEED");
    const uint64_t seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    st_rng r;
    st_rng_init(&r, seed, 0);
    const int64_t shapes[][3] = {{256, 16, 1}, {256, 32, 5}, {2048, 64, 16}, {2048, 768, 17}, {768, 2048, 37},
                                 {4096, 48, 32}};
    const int types[2] = {ST_TYPE_Q4_K, ST_TYPE_Q6_K};
    for (int ti = 0; ti < 2; ti++)
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            test_shape(&r, types[ti], shapes[i][0], shapes[i][1], shapes[i][2]);
    float y[16];
    uint8_t dummy[1024] = {0};
    CHECK(st_cpu_gemm_amx(ST_TYPE_Q4_K, dummy, 256, 8, dummy, 512, 1, y, 8) == -1 && strstr(st_errmsg(), "multiple of 16"),
          "8 rows must be refused: '%s'", st_errmsg());
    CHECK(st_cpu_gemm_amx(ST_TYPE_Q6_K, dummy, 100, 16, dummy, 512, 1, y, 16) == -1, "ne0 100 must be refused");
    CHECK(st_cpu_gemm_amx(ST_TYPE_Q5_K, dummy, 256, 16, dummy, 512, 1, y, 16) == -1 && strstr(st_errmsg(), "Q6_K"),
          "Q5_K must be refused: '%s'", st_errmsg());
    st_cpu_amx_enable(false);
    CHECK(!st_cpu_amx_available() && st_cpu_gemm_amx(ST_TYPE_Q4_K, dummy, 256, 16, dummy, 512, 1, y, 16) == -1,
          "turned off: must be unavailable and refuse");
    st_cpu_amx_enable(true);
    if (failures) fprintf(stderr, "test_cpu_amx: %d failure(s) (STRATA_SEED=%" PRIu64 ")\n", failures, seed);
    else printf("test_cpu_amx: PASS\n");
    return failures ? 1 : 0;
}
