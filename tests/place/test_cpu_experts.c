// Hybrid decode's CPU miss workers (place/cpu_experts.h) and the miss split rule (cuda/hybrid_split.h, the same code
// the GPU's classify kernel runs):
//   1. st_hy_cpu_q16 / st_hy_split_cpu: every token's CPU count within one of share * misses and never above the
//      misses, the long-run share exact (error diffusion), the edge shares 0 and 1
//   2. st_hy_classify: classes in rank order (the CPU takes the highest-ranked misses), counts
//   3. st_hy_pick_pcie_frac: both sides finish together inside (0, 0.95], clamps and bad inputs
//   4. st_hy_cpu_experts on an arena built from a small Q4_K_M qwen3moe (Q4_K and Q6_K down stacks): bit-equal to
//      st_cpu_matmul_rows over each whole expert matrix of the model (the CPU engine's products), with 1 and 3
//      threads, and 7 with the profile on (its counts); close to a
//      float64 reference from the dequantized weights; bad ids refused; the timing helper
//   5. st_hy_cpu_tokens (hybrid prefill's CPU share): a chunk of tokens routed top-K, a random subset of experts on
//      the CPU: bit-equal to the CPU engine's batched products (st_cpu_matmul_rows over each expert's tokens as one
//      batch) summed in rank order with the AMX kernels off (1 and 3 threads); with them on (where the CPU has
//      AMX) within 1e-3 relative RMS (another float order, and the rare activation rounding it flips); tokens
//      without a CPU pair get 0; bad ids refused
//   usage: test_cpu_experts [TMPDIR]   (STRATA_SEED=N fixes the seed; printed on failure)
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu/matmul.h"
#include "cpu/gemm_amx.h"
#include "cpu/ops.h"
#include "cuda/hybrid_split.h"
#include "engine/model.h"
#include "model/make_model.h"
#include "model/mix.h"
#include "place/arena.h"
#include "place/cpu_experts.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/log.h"
#include "util/rng.h"

static uint64_t g_seed;
#include "../check.h"

static void test_split(st_rng *r) {
    CHECK(st_hy_cpu_q16(1.0) == 0 && st_hy_cpu_q16(2.0) == 0 && st_hy_cpu_q16(NAN) == 0, "F >= 1 / NaN: no CPU share");
    CHECK(st_hy_cpu_q16(0.0) == ST_HY_Q16 && st_hy_cpu_q16(-1.0) == ST_HY_Q16, "F <= 0: every miss to the CPU");
    CHECK(st_hy_cpu_q16(0.5) == 32768 && st_hy_cpu_q16(0.75) == 16384, "F 0.5 / 0.75");
    const double shares[] = {0.0, 1.0, 0.5, 0.3, 0.9, (double)st_rng_f32(r)};
    for (size_t si = 0; si < sizeof shares / sizeof shares[0]; si++) {
        const uint32_t q = st_hy_cpu_q16(1.0 - shares[si]);
        uint32_t carry = 0;
        uint64_t sum_miss = 0, sum_cpu = 0;
        for (int t = 0; t < 5000; t++) {
            const int n = (int)st_rng_below(r, 9);  // 0..8 misses (K = 8)
            const int c = st_hy_split_cpu(n, q, &carry);
            const double want = (double)n * q / 65536.0;
            CHECK(c >= 0 && c <= n && c >= (int)floor(want) && c <= (int)floor(want) + 1 && carry < 65536,
                  "share %.3f, %d misses: %d to the CPU (share x misses %.3f, carry %u)", shares[si], n, c, want, carry);
            sum_miss += (uint64_t)n;
            sum_cpu += (uint64_t)c;
        }
        const double exact = (double)sum_miss * q / 65536.0;
        CHECK(fabs((double)sum_cpu - exact) <= 1.0, "share %.3f: %" PRIu64 " of %" PRIu64 " misses to the CPU, %.2f expected",
              shares[si], sum_cpu, sum_miss, exact);
        if (q == 0) CHECK(sum_cpu == 0, "share 0 sent misses to the CPU");
        if (q == ST_HY_Q16) CHECK(sum_cpu == sum_miss, "share 1 kept misses on the GPU");
    }
    // 32 misses at full share (the largest K the kernels take) cannot overflow
    uint32_t carry = 65535;
    CHECK(st_hy_split_cpu(32, ST_HY_Q16, &carry) == 32, "32 misses, share 1");
    carry = 0;
    CHECK(st_hy_split_cpu(0, 40000, &carry) == 0 && carry == 0, "no misses: no change");
}

static void test_classify(st_rng *r) {
    for (int it = 0; it < 2000; it++) {
        const int K = 1 + (int)st_rng_below(r, 32);
        uint8_t miss[32], cls[32];
        int n_miss = 0;
        for (int k = 0; k < K; k++) n_miss += (miss[k] = st_rng_below(r, 2)) != 0;
        const int n_cpu = n_miss ? (int)st_rng_below(r, (uint32_t)n_miss + 1) : 0;
        CHECK(st_hy_classify(miss, K, n_cpu, cls) == n_miss, "miss count");
        int seen_cpu = 0, c_hit = 0, c_pcie = 0, c_cpu = 0;
        for (int k = 0; k < K; k++) {
            if (!miss[k]) CHECK(cls[k] == ST_HY_HIT, "hit at rank %d classed %d", k, cls[k]);
            else CHECK(cls[k] == ST_HY_PCIE || cls[k] == ST_HY_CPU, "miss at rank %d classed %d", k, cls[k]);
            if (cls[k] == ST_HY_CPU) seen_cpu = 1;
            if (cls[k] == ST_HY_PCIE) CHECK(!seen_cpu, "a PCIe miss after a CPU miss (rank %d): CPU takes the last", k);
            c_hit += cls[k] == ST_HY_HIT;
            c_pcie += cls[k] == ST_HY_PCIE;
            c_cpu += cls[k] == ST_HY_CPU;
        }
        CHECK(c_cpu == n_cpu && c_pcie == n_miss - n_cpu && c_hit == K - n_miss, "class counts %d/%d/%d", c_hit, c_pcie,
              c_cpu);
    }
}

static void test_pick(void) {
    const double tp = 70e-6, tc = 90e-6, tf = 20e-6;  // a CPU slower per expert than the link: the two share
    int balanced = 0;
    for (double m = 1; m <= 8; m += 0.5) {
        const double f = st_hy_pick_pcie_frac(tp, tc, tf, m);
        CHECK(f >= 0 && f <= 1, "F %.3f out of range", f);
        if (f > 0 && f < 0.95) {
            const double gpu = f * m * tp, cpu = tf + (1 - f) * m * tc;
            CHECK(fabs(gpu - cpu) <= 1e-9 * (gpu + cpu) + 1e-12, "m %.1f: F %.4f, GPU %.3g s vs CPU %.3g s", m, f, gpu,
                  cpu);
            balanced++;
        }
    }
    CHECK(balanced >= 8, "only %d of 15 miss counts gave a balanced split", balanced);
    CHECK(st_hy_pick_pcie_frac(tp, 30e-6, tf, 2) == 0.0,
          "a CPU that computes two experts in one PCIe read: every miss (F 0)");
    CHECK(st_hy_pick_pcie_frac(tp, 30e-6, 200e-6, 2) == 1.0, "... unless the split cannot pay its fixed cost");
    const double f_near = st_hy_pick_pcie_frac(tp, 60e-6, tf, 4);
    CHECK(f_near > 0.3 && f_near < 0.7, "a CPU a little faster per expert than the link: the two share (F %.3f)",
          f_near);
    CHECK(st_hy_pick_pcie_frac(tp, 2e-3, 0, 4) == 1.0, "a slow CPU: F 1");
    CHECK(st_hy_pick_pcie_frac(1e-3, 1e-6, 0, 4) < 0.01, "a fast CPU: F near 0");
    CHECK(st_hy_pick_pcie_frac(tp, tc, 1.0, 4) == 1.0, "a huge fixed cost: F 1");
    CHECK(st_hy_pick_pcie_frac(tp, tc, 100e-6, 2) == 1.0, "a split saving less than its fixed cost: F 1");
    CHECK(st_hy_pick_pcie_frac(tp, tc, 100e-6, 8) < 1.0, "enough misses to pay for the split: F < 1");
    CHECK(st_hy_pick_pcie_frac(0, tc, tf, 4) == 1.0 && st_hy_pick_pcie_frac(tp, NAN, tf, 4) == 1.0 &&
              st_hy_pick_pcie_frac(tp, tc, tf, 0) == 1.0 && st_hy_pick_pcie_frac(tp, tc, -1, 4) == 1.0,
          "bad inputs: F 1");
}

// The CPU engine's way for one expert: whole-matrix st_cpu_matmul_rows (ST_MM_EXPERT) on the model's stacks.
static int ref_expert(const st_model *m, uint32_t l, uint32_t e, const float *x, float *y, st_cpu_scratch *s) {
    const st_hparams *hp = &m->hp;
    const st_layer *L = &m->layers[l];
    const int64_t d = hp->n_embd, F = hp->n_ff_exp;
    float *g = malloc(sizeof(float) * (size_t)F), *u = malloc(sizeof(float) * (size_t)F);
    const st_weight *w[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    const uint8_t *p[3];
    for (int k = 0; k < 3; k++) p[k] = w[k]->data + (size_t)e * (size_t)w[k]->ne[1] * w[k]->row_bytes;
    int rc = st_cpu_matmul_rows(NULL, w[0]->type, p[0], d, 0, F, x, 1, g, F, s, ST_MM_EXPERT) ||
             st_cpu_matmul_rows(NULL, w[1]->type, p[1], d, 0, F, x, 1, u, F, s, ST_MM_EXPERT);
    if (!rc) {
        st_swiglu(g, g, u, F);
        rc = st_cpu_matmul_rows(NULL, w[2]->type, p[2], F, 0, d, g, 1, y, d, s, ST_MM_EXPERT);
    }
    free(g);
    free(u);
    return rc;
}

// float64 reference from the dequantized weights (no activation quantization).
static void f64_expert(const st_model *m, uint32_t l, uint32_t e, const float *x, double *y) {
    const st_hparams *hp = &m->hp;
    const st_layer *L = &m->layers[l];
    const int64_t d = hp->n_embd, F = hp->n_ff_exp;
    float *row = malloc(sizeof(float) * (size_t)(d > F ? d : F));
    double *a = malloc(sizeof(double) * (size_t)F);
    const st_weight *w[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    for (int64_t r = 0; r < F; r++) {
        double gu[2];
        for (int k = 0; k < 2; k++) {
            st_dequantize_row(w[k]->type, w[k]->data + ((size_t)e * (size_t)F + (size_t)r) * w[k]->row_bytes, row, d);
            double s = 0;
            for (int64_t i = 0; i < d; i++) s += (double)row[i] * x[i];
            gu[k] = s;
        }
        a[r] = gu[0] / (1.0 + exp(-gu[0])) * gu[1];
    }
    for (int64_t r = 0; r < d; r++) {
        st_dequantize_row(w[2]->type, w[2]->data + ((size_t)e * (size_t)d + (size_t)r) * w[2]->row_bytes, row, F);
        double s = 0;
        for (int64_t i = 0; i < F; i++) s += (double)row[i] * a[i];
        y[r] = s;
    }
    free(row);
    free(a);
}

// The model's arena (anonymous, chunk_bytes per registered range; 0: the default), or NULL after a failed CHECK.
static st_arena *test_arena(const st_model *m, size_t chunk_bytes) {
    st_arena_opts ao;
    memset(&ao, 0, sizeof ao);
    ao.mode = ST_ARENA_ANON;
    ao.chunk_bytes = chunk_bytes;
    ao.quiet = true;
    st_arena *a = st_arena_create(m, &ao);
    CHECK(a != NULL, "arena: %s", st_errmsg());
    return a;
}

// The thread counts every worker test runs with, and the workers for one of them (NULL after a failed CHECK).
static const int k_threads[2] = {1, 3};
static st_hy_cpu *test_workers(const st_arena *a, const st_hparams *hp, int threads) {
    st_hy_cpu *c = st_hy_cpu_create(a, hp->n_embd, hp->n_ff_exp, (int)hp->n_expert_used, threads);
    CHECK(c != NULL, "st_hy_cpu_create: %s", st_errmsg());
    return c;
}

static void test_experts(const st_model *m, st_rng *r) {
    const st_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd;
    const int K = (int)hp->n_expert_used;
    st_arena *a = test_arena(m, 1 << 20);  // several chunks
    if (!a) return;
    int types_seen[2] = {0, 0};
    for (uint32_t l = 0; l < hp->n_layer; l++) types_seen[a->layers[l].x.type[2] == ST_TYPE_Q6_K] = 1;
    CHECK(types_seen[0] && types_seen[1], "the test model should mix Q6_K and other down types");
    float *x = malloc(sizeof(float) * (size_t)d), *got = malloc(sizeof(float) * (size_t)d * K),
          *want = malloc(sizeof(float) * (size_t)d);
    double *ref = malloc(sizeof(double) * (size_t)d);
    float *out[32];
    for (int k = 0; k < K; k++) out[k] = got + (size_t)k * d;
    st_cpu_scratch s = {0};
    // 1, 3 and 7 threads; the profile on with 7 (it must not change the results)
    const int cfg_threads[3] = {k_threads[0], k_threads[1], 7};
    for (int ti = 0; ti < 3; ti++) {
        st_hy_cpu *c = test_workers(a, hp, cfg_threads[ti]);
        if (!c) continue;
        char txt[1024] = "";
        CHECK(st_hy_cpu_profile_text(c, txt, sizeof txt) == 0, "the profile is off by default");
        if (ti == 2) CHECK(st_hy_cpu_set_profile(c, 1) == 0, "profile: %s", st_errmsg());  // (results unchanged)
        for (uint32_t l = 0; l < hp->n_layer; l++) {
            for (int64_t i = 0; i < d; i++) x[i] = st_rng_normal(r);
            const int n = 1 + (int)st_rng_below(r, (uint32_t)K);
            int32_t ids[32];
            for (int i = 0; i < n; i++) ids[i] = (int32_t)st_rng_below(r, hp->n_expert);
            for (int i = 0; i < n * (int)d; i++) got[i] = NAN;  // poison: unwritten rows fail
            CHECK(st_hy_cpu_experts(c, l, x, n, ids, out) == 0, "layer %u: %s", l, st_errmsg());
            for (int i = 0; i < n; i++) {
                CHECK(ref_expert(m, l, (uint32_t)ids[i], x, want, &s) == 0, "reference: %s", st_errmsg());
                int64_t bad = -1;
                for (int64_t j = 0; j < d && bad < 0; j++)
                    if (memcmp(&got[(size_t)i * d + j], &want[j], sizeof(float))) bad = j;
                CHECK(bad < 0, "%d threads, layer %u, expert %d (%s down): row %lld is %g, the CPU engine's %g",
                      cfg_threads[ti], l, ids[i],
                      st_type_name(a->layers[l].x.type[2]), (long long)bad,
                      bad >= 0 ? got[(size_t)i * d + bad] : 0.0, bad >= 0 ? want[bad] : 0.0);
                if (ti == 0 && i == 0) {
                    f64_expert(m, l, (uint32_t)ids[i], x, ref);
                    double num = 0, den = 0;
                    for (int64_t j = 0; j < d; j++) {
                        num += (got[j] - ref[j]) * (got[j] - ref[j]);
                        den += ref[j] * ref[j];
                    }
                    const double rel = sqrt(num / (den > 0 ? den : 1e-30));
                    CHECK(rel < 0.05, "layer %u expert %d: relative RMS error %.4f against float64", l, ids[i], rel);
                }
            }
        }
        if (ti == 2) {  // one call per layer, both runs on at most 7 threads
            unsigned long long calls = 0;
            double took = 0;
            const char *gu = strstr(txt, "gate/up run");
            CHECK(st_hy_cpu_profile_text(c, txt, sizeof txt) == 1 && sscanf(txt, "%llu calls", &calls) == 1 &&
                      calls == hp->n_layer && (gu = strstr(txt, "gate/up run")) && strstr(txt, "down run") &&
                      sscanf(strchr(gu, '(') + 1, "%lf threads", &took) == 1 && took >= 1 && took <= 7,
                  "profile after %u calls: '%s'", hp->n_layer, txt);
        }
        int32_t bad_id = (int32_t)hp->n_expert;
        CHECK(st_hy_cpu_experts(c, 0, x, 1, &bad_id, out) == -1 && strstr(st_errmsg(), "expert id"),
              "an expert id out of range must fail: '%s'", st_errmsg());
        CHECK(st_hy_cpu_experts(c, 0, x, 0, NULL, out) == 0, "no experts: no work");
        const double t = st_hy_cpu_time_expert(c, 2);
        CHECK(t > 0 && t < 1.0, "timed expert: %g s", t);
        st_hy_cpu_free(c);
    }
    st_cpu_scratch_free(&s);
    free(x);
    free(got);
    free(want);
    free(ref);
    st_arena_free(a);
}

// The CPU engine's batched way for one expert: its n tokens' rows X [n][d] through whole-matrix products.
static int ref_expert_batch(const st_model *m, uint32_t l, uint32_t e, const float *X, int64_t n, float *Y,
                            st_cpu_scratch *s) {
    const st_hparams *hp = &m->hp;
    const st_layer *L = &m->layers[l];
    const int64_t d = hp->n_embd, F = hp->n_ff_exp;
    float *g = malloc(sizeof(float) * (size_t)(F * n)), *u = malloc(sizeof(float) * (size_t)(F * n));
    const st_weight *w[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
    const uint8_t *p[3];
    for (int k = 0; k < 3; k++) p[k] = w[k]->data + (size_t)e * (size_t)w[k]->ne[1] * w[k]->row_bytes;
    int rc = st_cpu_matmul_rows(NULL, w[0]->type, p[0], d, 0, F, X, n, g, F, s, ST_MM_EXPERT) ||
             st_cpu_matmul_rows(NULL, w[1]->type, p[1], d, 0, F, X, n, u, F, s, ST_MM_EXPERT);
    if (!rc) {
        st_swiglu(g, g, u, F * n);
        rc = st_cpu_matmul_rows(NULL, w[2]->type, p[2], F, 0, d, g, n, Y, d, s, ST_MM_EXPERT);
    }
    free(g);
    free(u);
    return rc;
}

static void test_tokens(const st_model *m, st_rng *r) {
    const st_hparams *hp = &m->hp;
    const int64_t d = hp->n_embd, n_tok = 37;
    const int K = (int)hp->n_expert_used;
    const uint32_t E = hp->n_expert;
    st_arena *a = test_arena(m, 0);
    if (!a) return;
    float *X = malloc(sizeof(float) * (size_t)(n_tok * d)), *w = malloc(sizeof(float) * (size_t)(n_tok * K));
    float *got = malloc(sizeof(float) * (size_t)(n_tok * d)), *want = calloc((size_t)(n_tok * d), sizeof(float));
    float *Xe = malloc(sizeof(float) * (size_t)(n_tok * d)), *Ye = malloc(sizeof(float) * (size_t)(n_tok * d));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n_tok * K)), *rows = malloc(sizeof(int32_t) * (size_t)(n_tok * K));
    uint8_t *on = malloc(E);
    st_cpu_scratch s = {0};
    const int n_pass = 2 + st_cpu_amx_available();  // 1 and 3 threads without AMX, then 3 with it
    for (int pass = 0; pass < n_pass; pass++) {
        const int threads = k_threads[pass < 2 ? pass : 1], amx = pass == 2;
        st_cpu_amx_enable(amx);
        st_hy_cpu *c = test_workers(a, hp, threads);
        if (!c) continue;
        const double tt = st_hy_cpu_time_tokens(c, hp->n_layer - 1, K, 8, 4);
        CHECK(tt > 0 && tt < 1.0, "timed tokens: %g s (%s)", tt, st_errmsg());
        for (uint32_t l = 0; l < hp->n_layer; l++) {
            for (int64_t i = 0; i < n_tok * d; i++) X[i] = st_rng_normal(r);
            for (int64_t t = 0; t < n_tok; t++)  // K distinct experts per token, random weights
                for (int k = 0; k < K; k++) {
                    int32_t e;
                    int dup;
                    do {
                        e = (int32_t)st_rng_below(r, E);
                        dup = 0;
                        for (int j = 0; j < k; j++) dup |= ids[t * K + j] == e;
                    } while (dup);
                    ids[t * K + k] = e;
                    w[t * K + k] = 0.1f + st_rng_f32(r);
                }
            for (uint32_t e = 0; e < E; e++) on[e] = st_rng_below(r, 2);
            on[ids[0]] = 1;      // at least one CPU pair
            on[ids[K - 1]] = 0;  // and one GPU pair
            if (l == 0) {  // one token with no CPU pair at all (its row must be 0), another pair still on the CPU
                for (int k = 0; k < K; k++) on[ids[(n_tok - 1) * K + k]] = 0;
                for (int64_t i = 0; i < (n_tok - 1) * K; i++) {
                    int last = 0;
                    for (int k = 0; k < K; k++) last |= ids[(n_tok - 1) * K + k] == ids[i];
                    if (!last) {
                        on[ids[i]] = 1;
                        break;
                    }
                }
            }
            for (int64_t i = 0; i < n_tok * d; i++) got[i] = NAN;
            CHECK(st_hy_cpu_tokens(c, l, X, n_tok, ids, w, K, on, got) == 0, "layer %u: %s", l, st_errmsg());
            // Reference: per CPU expert, its tokens' rows in token order as one batch; then rank-order sums.
            memset(want, 0, sizeof(float) * (size_t)(n_tok * d));
            float *yp = malloc(sizeof(float) * (size_t)(n_tok * K * d));  // [t * K + k][d]
            for (uint32_t e = 0; e < E; e++) {
                if (!on[e]) continue;
                int64_t n = 0;
                for (int64_t i = 0; i < n_tok * K; i++)
                    if (ids[i] == (int32_t)e) {
                        memcpy(Xe + n * d, X + (i / K) * d, sizeof(float) * (size_t)d);
                        rows[n++] = (int32_t)i;
                    }
                if (!n) continue;
                CHECK(ref_expert_batch(m, l, e, Xe, n, Ye, &s) == 0, "reference: %s", st_errmsg());
                for (int64_t j = 0; j < n; j++) memcpy(yp + (size_t)rows[j] * d, Ye + j * d, sizeof(float) * (size_t)d);
            }
            for (int64_t t = 0; t < n_tok; t++)
                for (int k = 0; k < K; k++)
                    if (on[ids[t * K + k]])
                        for (int64_t i = 0; i < d; i++) want[t * d + i] += w[t * K + k] * yp[(size_t)(t * K + k) * d + i];
            free(yp);
            if (amx) {
                double se = 0, sr = 0;
                for (int64_t i = 0; i < n_tok * d; i++) {
                    const double e = (double)got[i] - want[i];
                    se += e * e, sr += (double)want[i] * want[i];
                }
                const double rel = sqrt(se / (sr + 1e-30));
                CHECK(rel <= 1e-3, "tokens with AMX, layer %u: relative RMS %.3e against the CPU engine", l, rel);
            } else {
                int64_t bad = -1;
                for (int64_t i = 0; i < n_tok * d && bad < 0; i++)
                    if (memcmp(&got[i], &want[i], sizeof(float))) bad = i;
                CHECK(bad < 0, "tokens, %d threads, layer %u: element %lld (token %lld) is %g, the CPU engine's %g",
                      threads, l, (long long)bad, (long long)(bad / d), bad >= 0 ? got[bad] : 0.0,
                      bad >= 0 ? want[bad] : 0.0);
            }
            if (l == 0) {
                int zero = 1;
                for (int64_t i = 0; i < d; i++) zero &= got[(n_tok - 1) * d + i] == 0.0f;
                CHECK(zero, "a token without CPU pairs must get a zero row");
            }
        }
        ids[3] = (int32_t)E;
        CHECK(st_hy_cpu_tokens(c, 0, X, n_tok, ids, w, K, on, got) == -1 && strstr(st_errmsg(), "expert id"),
              "tokens: an expert id out of range must fail: '%s'", st_errmsg());
        st_hy_cpu_free(c);
    }
    st_cpu_amx_enable(true);
    printf("test_cpu_experts: tokens %s\n", n_pass > 2 ? "with and without AMX" : "(no AMX on this CPU)");
    st_cpu_scratch_free(&s);
    free(X), free(w), free(got), free(want), free(Xe), free(Ye), free(ids), free(rows), free(on);
    st_arena_free(a);
}

int main(int argc, char **argv) {
    const char *env = getenv("STRATA_SEED");
    g_seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    st_log_set_level(ST_LOG_WARN);
    st_rng r;
    st_rng_init(&r, g_seed, 0);
    test_split(&r);
    test_classify(&r);
    test_pick();

    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/strata-cpuexp-XXXXXX", argc > 1 ? argv[1] : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(path, sizeof path, "%s/moe.gguf", dir);
    // 4 layers, d 256, 8 experts top-4 of FF 256 in Q4_K_M: down stacks Q4_K and Q6_K by layer.
    st_make_opts o;
    memset(&o, 0, sizeof o);
    const st_preset *tiny = st_preset_find("tiny-qwen3moe");
    o.hp = tiny->hp;
    o.hp.n_expert = 8;
    o.hp.n_vocab = 512;
    o.ftype = ST_FTYPE_Q4_K_M;
    o.seed = g_seed;
    o.n_threads = 2;
    o.out_path = path;
    o.quiet = true;
    st_model *m = NULL;
    if (st_make_model(&o) || !(m = st_model_load(path))) {
        fprintf(stderr, "FAIL: test model: %s\n", st_errmsg());
        failures++;
    } else {
        test_experts(m, &r);
        test_tokens(m, &r);
        st_model_free(m);
    }
    unlink(path);
    rmdir(dir);
    if (failures) fprintf(stderr, "test_cpu_experts: %d failure(s) (STRATA_SEED=%" PRIu64 ")\n", failures, g_seed);
    else printf("test_cpu_experts: PASS\n");
    return failures ? 1 : 0;
}
