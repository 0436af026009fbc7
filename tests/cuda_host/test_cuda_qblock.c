// Checks src/cuda/qblock.h on the CPU: for every weight type the GPU kernels support, on random valid blocks,
//   1. unpacked items (a[g] * v + b[g]) reproduce st_dequantize_row exactly up to float rounding;
//   2. the item dot with a q8_1 activation block equals the float64 dot of the dequantized weights and the
//      dequantized activations (d8 * q) within a tight bound;
//   3. the q8_1 block quantizer is within half a step of its input;
//   4. the device codebooks (cuda/qblock_tables.h) equal the host tables (quant/iq_tables.h);
//   5. type sizes and items per block agree with quant.h.
// Fresh seed per run (STRATA_SEED overrides); the seed is printed on failure.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/qblock.h"
#include "cuda/qblock_tables.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/rng.h"

static const int k_types[] = {ST_QB_TYPES};
#define N_TYPES ((int)(sizeof(k_types) / sizeof(k_types[0])))

static uint64_t g_seed;
static int g_fail;

#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        if (!(cond)) {                                                                \
            if (g_fail++ < 20) {                                                      \
                fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                  \
                fprintf(stderr, __VA_ARGS__);                                         \
                fprintf(stderr, " (seed %llu)\n", (unsigned long long)g_seed);        \
            }                                                                         \
        }                                                                             \
    } while (0)

static void check_tables(void) {
    CHECK(memcmp(st_dev_iq2xxs_grid, st_iq2xxs_grid, sizeof st_dev_iq2xxs_grid) == 0, "iq2xxs_grid copy differs");
    CHECK(memcmp(st_dev_iq2xs_grid, st_iq2xs_grid, sizeof st_dev_iq2xs_grid) == 0, "iq2xs_grid copy differs");
    CHECK(memcmp(st_dev_iq2s_grid, st_iq2s_grid, sizeof st_dev_iq2s_grid) == 0, "iq2s_grid copy differs");
    CHECK(memcmp(st_dev_iq3xxs_grid, st_iq3xxs_grid, sizeof st_dev_iq3xxs_grid) == 0, "iq3xxs_grid copy differs");
    CHECK(memcmp(st_dev_iq3s_grid, st_iq3s_grid, sizeof st_dev_iq3s_grid) == 0, "iq3s_grid copy differs");
    CHECK(memcmp(st_dev_iq1s_grid, st_iq1s_grid, sizeof st_dev_iq1s_grid) == 0, "iq1s_grid copy differs");
    CHECK(sizeof st_dev_iq1s_grid == sizeof(uint64_t) * ST_NGRID_IQ1S, "iq1s_grid size");
    const uint32_t nl[4] = {ST_DEV_KVALUES_IQ4NL_W0, ST_DEV_KVALUES_IQ4NL_W1, ST_DEV_KVALUES_IQ4NL_W2,
                            ST_DEV_KVALUES_IQ4NL_W3};
    const uint32_t mx[4] = {ST_DEV_KVALUES_MXFP4_W0, ST_DEV_KVALUES_MXFP4_W1, ST_DEV_KVALUES_MXFP4_W2,
                            ST_DEV_KVALUES_MXFP4_W3};
    for (int i = 0; i < 16; i++) {
        CHECK((int8_t)(nl[i / 4] >> (8 * (i % 4))) == st_kvalues_iq4nl[i], "kvalues_iq4nl[%d] packed wrong", i);
        CHECK((int8_t)(mx[i / 4] >> (8 * (i % 4))) == st_kvalues_mxfp4[i], "kvalues_mxfp4[%d] packed wrong", i);
    }
    for (int i = 0; i < 128; i++) CHECK(st_qb_ksigns((uint32_t)i) == st_ksigns_iq2xs[i], "ksigns[%d]", i);
}

// Portable helpers against byte-wise definitions, on random words.
static void check_helpers(st_rng *r) {
    for (int it = 0; it < 20000; it++) {
        const uint32_t a = st_rng_u32(r), b = st_rng_u32(r), s = st_rng_u32(r);
        uint32_t sub = 0, perm = 0, lut = 0;
        const uint32_t q = a & 0x0f0f0f0fu;
        int32_t dp = (int32_t)(s & 0xffff) - 32768;
        const int32_t dp_in = dp;
        for (int k = 0; k < 4; k++) {
            const uint8_t ak = (uint8_t)(a >> (8 * k)), bk = (uint8_t)(b >> (8 * k));
            sub |= (uint32_t)(uint8_t)(ak - bk) << (8 * k);
            const int sel = (s >> (4 * k)) & 7;
            const uint64_t xy = (uint64_t)a | ((uint64_t)b << 32);
            perm |= (uint32_t)((xy >> (8 * sel)) & 0xff) << (8 * k);
            lut |= (uint32_t)(uint8_t)st_kvalues_iq4nl[(q >> (8 * k)) & 15] << (8 * k);
            dp += (int8_t)ak * (int8_t)bk;
        }
        CHECK(st_vsub4(a, b) == sub, "vsub4(%08x, %08x) = %08x, want %08x", a, b, st_vsub4(a, b), sub);
        CHECK(st_byte_perm(a, b, s) == perm, "byte_perm");
        uint32_t t[4];
        memcpy(t, st_kvalues_iq4nl, 16);
        CHECK(st_lut16(q, t[0], t[1], t[2], t[3]) == lut, "lut16(%08x) = %08x, want %08x", q,
              st_lut16(q, t[0], t[1], t[2], t[3]), lut);
        CHECK(st_dp4a((int32_t)a, (int32_t)b, dp_in) == dp, "dp4a");
        const uint32_t b4 = a & 15, m = st_qb_bits_to_mask(b4);
        for (int k = 0; k < 4; k++) CHECK(((m >> (8 * k)) & 0xff) == ((b4 >> k) & 1 ? 0xffu : 0u), "bits_to_mask");
    }
}

static void check_type(int type, st_rng *r, int64_t n_items, float stddev) {
    const st_type_info *ti = st_type_get(type);
    const int64_t n = 32 * n_items;
    CHECK(ti != NULL && st_qb_supported(type), "type %d unsupported", type);
    if (!ti) return;
    const int ipb = ST_QB_IPB(type), tsize = ST_QB_TSIZE(type);
    if (ST_QB_IS_FLOAT(type)) {
        CHECK(ti->block_size == 1 && tsize == 32 * ti->type_size, "%s: size macros", ti->name);
    } else {
        CHECK(ti->block_size == 32 * ipb && tsize == ti->type_size, "%s: ST_QB_IPB/TSIZE (%d, %d) vs quant.h (%d, %d)",
              ti->name, ipb, tsize, ti->block_size, ti->type_size);
        CHECK(n % ti->block_size == 0, "bad n");
    }
    const size_t bytes = st_row_size(type, n);
    uint8_t *W = malloc(bytes);
    float *deq = malloc(sizeof(float) * (size_t)n), *x = malloc(sizeof(float) * (size_t)n);
    if (!W || !deq || !x) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    if (st_random_blocks(type, W, n / ti->block_size, stddev, r) != 0 || st_dequantize_row(type, W, deq, n) != 0) {
        CHECK(0, "%s: %s", ti->name, st_errmsg());
        goto done;
    }
    for (int64_t i = 0; i < n; i++) x[i] = st_rng_normal(r) * (i % 97 == 0 ? 8.0f : 1.0f);
    double worst = 0;
    for (int64_t it = 0; it < n_items; it++) {
        const uint8_t *blk = W + (size_t)(it / ipb) * (size_t)tsize;
        const int j = (int)(it % ipb);
        int32_t q[8];
        float d8, s8;
        st_qb_quantize_q8_1(x + 32 * it, (int8_t *)q, &d8, &s8);
        const float *wd = deq + 32 * it;
        // 3. quantizer
        for (int e = 0; e < 32; e++) {
            const float back = d8 * (float)((const int8_t *)q)[e];
            CHECK(fabsf(back - x[32 * it + e]) <= 0.5f * d8 * 1.0001f + 1e-30f, "q8_1 quantize off by %g (d %g)",
                  (double)(back - x[32 * it + e]), (double)d8);
        }
        // 1. unpack
        if (!ST_QB_IS_FLOAT(type)) {
            st_qb_w w;
            memset(&w, 0x7f, sizeof w);
            CHECK(st_qb_unpack(type, blk, j, &w) == 0, "%s: unpack refused", ti->name);
            for (int e = 0; e < 32; e++) {
                const int g = e / 8;
                const float v = (float)(int8_t)(w.v[e / 4] >> (8 * (e % 4)));
                const float got = w.a[g] * v + w.b[g];
                const float tol = 4e-7f * (fabsf(w.a[g] * v) + fabsf(w.b[g])) + 1e-37f;
                CHECK(fabsf(got - wd[e]) <= tol, "%s item %lld elem %d: unpacked %.9g, dequantized %.9g", ti->name,
                      (long long)it, e, (double)got, (double)wd[e]);
            }
            // a/b modes must describe what unpack produced (the dot relies on them)
            if (ST_QB_AMODE(type) == 1) CHECK(w.a[0] == w.a[1] && w.a[0] == w.a[2] && w.a[0] == w.a[3], "%s amode", ti->name);
            if (ST_QB_AMODE(type) == 2) CHECK(w.a[0] == w.a[1] && w.a[2] == w.a[3], "%s amode", ti->name);
            if (ST_QB_BMODE(type) == 0) CHECK(w.b[0] == 0 && w.b[1] == 0 && w.b[2] == 0 && w.b[3] == 0, "%s bmode", ti->name);
            if (ST_QB_BMODE(type) == 1) CHECK(w.b[0] == w.b[1] && w.b[0] == w.b[2] && w.b[0] == w.b[3], "%s bmode", ti->name);
            if (ST_QB_BMODE(type) == 2) CHECK(w.b[0] == w.b[1] && w.b[2] == w.b[3], "%s bmode", ti->name);
        }
        // 2. dot
        double ref = 0, mag = 0;
        for (int e = 0; e < 32; e++) {
            const double a = (double)d8 * (double)((const int8_t *)q)[e];
            ref += (double)wd[e] * a;
            mag += fabs((double)wd[e] * a);
        }
        const float got = st_qb_dot(type, blk, j, q, d8, s8);
        const double err = fabs((double)got - ref), tol = 2e-6 * mag + 1e-35;
        if (mag > 0 && err / mag > worst) worst = err / mag;
        CHECK(err <= tol, "%s item %lld: dot %.9g, float64 reference %.9g (|err| %.3g > %.3g)", ti->name,
              (long long)it, (double)got, ref, err, tol);
    }
    printf("  %-8s items %5lld  worst |err|/sum|w*a| = %.2e\n", ti->name, (long long)n_items, worst);
done:
    free(W);
    free(deq);
    free(x);
}

int main(void) {
    const char *env = getenv("STRATA_SEED");
    g_seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    printf("test_cuda_qblock: seed %llu\n", (unsigned long long)g_seed);
    st_rng r;
    st_rng_init(&r, g_seed, 0);
    check_tables();
    check_helpers(&r);
    for (int i = 0; i < N_TYPES; i++) {
        check_type(k_types[i], &r, 1024, 1.0f);
        check_type(k_types[i], &r, 64, 0.01f);
    }
    CHECK(!st_qb_supported(ST_TYPE_TQ1_0) && !st_qb_supported(ST_TYPE_Q8_K), "unexpected support");
    if (g_fail) {
        printf("test_cuda_qblock: FAIL (%d failures, seed %llu)\n", g_fail, (unsigned long long)g_seed);
        return 1;
    }
    printf("test_cuda_qblock: PASS\n");
    return 0;
}
