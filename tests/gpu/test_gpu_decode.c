// GPU parity test of the fused one-token decode kernels (src/cuda/decode.h) on fresh random inputs (seed printed;
// STRATA_SEED reproduces a run). Outputs are poisoned (0xff bytes: NaN) before every launch, and every kernel is
// launched twice with the outputs poisoned again in between, so the second launch proves the cross-block
// counters were reset (what a CUDA graph replay needs).
//   rmsnorm_act:   x (+res) exact; y against st_rmsnorm; the quantized row byte-exact against the CPU backend's
//                  st_cpu_quantize_act of the kernel's own y (Q8_0, Q8_1, Q8_K), and the same with y == NULL
//   mmvq_multi:    each matrix against st_cuda_mmvq on the same quantized input (same item dots: 1e-5 of the
//                  magnitude) and against st_cpu_matmul (independent path, 3.5% relative L2)
//   g32_sum4:      the four-at-once group sums against four butterflies (hashed inputs), bit for bit
//   router_topk:   logits against a double-precision CPU dot; ids/weights against the CPU route on those logits
//   moe_glu_q:     through a permuted expert table: act against st_cuda_mmvq_ids_glu on the stack (1e-5), the
//                  quantized down input byte-exact against the CPU quantizer of act; an invalid id gives NaN
//   moe_down_sum:  against st_cuda_mmvq_ids per expert, combined on the host in rank order, plus the residual
//   moe v2:        st_cuda_moe_glu (act only) against the same reference; st_cuda_moe_down_q from that f32 act
//                  (its own prologue quantization) against the same down reference, in place and not
//   route_glu:     the route inside the GLU launch (router_logits + moe_route_glu_q) against router_topk +
//                  moe_glu_q, bit for bit (x after moe_down_sum, ids, weights), twice (counters back to zero)
//   attn_dec:      split-adaptive decode attention against the CPU's st_attention (f16/f32 caches, head_dim 64/128,
//                  1..8 query heads per KV head, L from 1 to 16385, several grids, one workspace shared by all
//                  cases so the counters must come back to zero), and its fused output row byte-exact against the
//                  CPU quantizer of its own f32 output (Q8_0 / Q8_1 / Q8_K); f16 caches through the tensor-core
//                  kernel (cases for its two-level merge), then a set through the SIMT kernel
//   pdl chain:     a whole fused MoE layer (norm, Q/K/V, rope, attention, O, norm, router, GLU, down) captured in a
//                  CUDA graph with PDL launches, replayed, against the same sequence run eagerly with PDL off and a
//                  synchronisation after each launch: the residual stream must be bit-identical
// One PASS/FAIL line per kernel; exit status 1 on any failure.
//   test_gpu_decode [--quick]
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cpu/dot.h"
#include "cpu/features.h"
#include "cpu/matmul.h"
#include "cpu/ops.h"
#include "cuda/ops.h"
#include "util/pool.h"
#include "cuda/decode.h"
#include "cuda/matvec_f32.h"
#include "cuda/mmvq.h"
#include "cuda/qblock.h"
#include "cuda/quantize_act.h"
#include "cuda/runtime.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/rng.h"

#include "gpu_test_util.h"

static uint64_t g_seed;
static int g_quick, g_fail_total, g_fail_cur;
static st_rng g_rng;

#include "gpu_test_cuda.h"
static st_cuda_ctx g_ctx;


static uint8_t *rand_weights(int type, int64_t rows, int64_t ne0) {
    const st_type_info *ti = st_type_get(type);
    const size_t bytes = st_row_size(type, ne0) * (size_t)rows;
    uint8_t *w = xmalloc(bytes);
    if (st_random_blocks(type, w, rows * ne0 / ti->block_size, 1.0f, &g_rng)) {
        fprintf(stderr, "st_random_blocks(%s): %s\n", ti->name, st_errmsg());
        exit(2);
    }
    return w;
}

static void report(const char *kernel) {
    printf("%s %s\n", g_fail_cur ? "FAIL" : "PASS", kernel);
    fflush(stdout);
    g_fail_total += g_fail_cur;
    g_fail_cur = 0;
}

static void check_close(const char *what, const float *got, const float *ref, int64_t n, float atol, float rtol) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const double err = fabs((double)got[i] - ref[i]);
        if (!(err <= atol + rtol * fabs(ref[i]))) {
            if (bad < 4) printf("  %s: [%lld] got %.8g want %.8g\n", what, (long long)i, got[i], ref[i]);
            bad++;
        }
    }
    if (bad) {
        printf("  %s: %lld of %lld elements out of tolerance\n", what, (long long)bad, (long long)n);
        g_fail_cur++;
    }
}

// |got - ref| <= tol * (mag + tiny) per element, where mag is a magnitude scale per element (sum of |terms|).
static void check_rel_mag(const char *what, const float *got, const float *ref, const double *mag, int64_t n,
                          double tol) {
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const double err = fabs((double)got[i] - ref[i]);
        if (!(err <= tol * (mag[i] + 1e-20))) {
            if (bad < 4) printf("  %s: [%lld] got %.8g want %.8g (scale %.3g)\n", what, (long long)i, got[i], ref[i], mag[i]);
            bad++;
        }
    }
    if (bad) {
        printf("  %s: %lld of %lld elements out of tolerance\n", what, (long long)bad, (long long)n);
        g_fail_cur++;
    }
}

static double rel_l2(const float *got, const float *ref, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        num += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

// ---- CPU-format check of planar q8_1 rows ----------------------------------------------------------------------

// Compares one planar row (quants, then (d, s) float pairs; cuda/qblock.h) of n elements with the CPU backend's
// quantization of x in `fmt`, byte for byte: quants equal, d equal (the f16 scale widened for Q8_0/Q8_1), s as
// quantize_act.h defines it. Returns the number of differing 32-blocks.
static int64_t cmp_cpu_quant(const char *what, int fmt, const uint8_t *row, const float *x, int64_t n) {
    const int64_t nb = n / 32;
    const size_t cpu_bytes = st_row_size(fmt, n);
    uint8_t *c = xmalloc(cpu_bytes);
    if (st_cpu_quantize_act(fmt, x, c, n, ST_CPU_ISA_PORTABLE)) {
        printf("  %s: st_cpu_quantize_act: %s\n", what, st_errmsg());
        free(c);
        return nb;
    }
    int64_t bad = 0;
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *qg = (const int8_t *)(row + b * 32);
        float dg, sg;
        memcpy(&dg, row + nb * 32 + b * 8, 4);
        memcpy(&sg, row + nb * 32 + b * 8 + 4, 4);
        const int8_t *qc;
        float dc, sc;
        int sum = 0;
        if (fmt == ST_TYPE_Q8_K) {
            const block_q8_K *k = (const block_q8_K *)c + b / 8;
            qc = k->qs + (b % 8) * 32;
            for (int j = 0; j < 32; j++) sum += qc[j];
            dc = k->d;
            sc = dc * (float)sum;
        } else if (fmt == ST_TYPE_Q8_1) {
            const block_q8_1 *k = (const block_q8_1 *)c + b;
            qc = k->qs;
            dc = st_f16_to_f32(k->d);
            sc = st_f16_to_f32(k->s);
        } else {
            const block_q8_0 *k = (const block_q8_0 *)c + b;
            qc = k->qs;
            for (int j = 0; j < 32; j++) sum += qc[j];
            dc = st_f16_to_f32(k->d);
            sc = dc * (float)sum;
        }
        const int ok = !memcmp(qg, qc, 32) && dg == dc && sg == sc;
        if (!ok) {
            if (bad < 4)
                printf("  %s: block %lld: d %.9g/%.9g s %.9g/%.9g q0 %d/%d\n", what, (long long)b, dg, dc, sg, sc, qg[0],
                       qc[0]);
            bad++;
        }
    }
    free(c);
    return bad;
}

static const char *fmt_name(int fmt) { return st_type_name(fmt); }

// ---- rmsnorm_act -----------------------------------------------------------------------------------------------

// Both kernels against the CPU: one row of n % 256 == 0, n <= 8192 takes the span kernel unless switched off.
static void test_rmsnorm_act(void) {
    static const int fmts[] = {ST_TYPE_Q8_0, ST_TYPE_Q8_1, ST_TYPE_Q8_K};
    const float eps = 1e-6f;
    for (int span = 0; span <= 1; span++)
    for (int fi = 0; fi < 3; fi++)
        for (int rows = 1; rows <= 3; rows += 2)
            for (int with_res = 0; with_res <= 1; with_res++) {
                const int fmt = fmts[fi], n = fmt == ST_TYPE_Q8_K ? 2048 : (g_quick ? 768 : 2048);
                const int64_t N = (int64_t)rows * n;
                const size_t rb = (size_t)st_q8_1_row_bytes(n);
                float *x = rand_f32(N, 1.5f), *res = rand_f32(N, 0.7f), *w = rand_f32(n, 1.0f);
                st_cuda_rmsnorm_act_set_span(span);
                const int64_t z = rows == 3 ? n : 256;  // an all-zero block (span)
                memset(x + z, 0, sizeof(float) * 256), memset(res + z, 0, sizeof(float) * 256);
                float *dres = dup_h2d(res, sizeof(float) * N), *dw = dup_h2d(w, sizeof(float) * n);
                float *dx = dup_h2d(x, sizeof(float) * N), *dy = dalloc(sizeof(float) * N);
                uint8_t *dq = dalloc(rb * rows);
                float *y = xmalloc(sizeof(float) * N), *xs = xmalloc(sizeof(float) * N), *ref = xmalloc(sizeof(float) * N);
                uint8_t *q = xmalloc(rb * rows), *q2 = xmalloc(rb * rows);
                // Twice: the second launch sees the first's x when with_res (so reset x in between).
                for (int rep = 0; rep < 2; rep++) {
                    CK(cudaMemcpy(dx, x, sizeof(float) * N, cudaMemcpyHostToDevice));
                    poison(dy, sizeof(float) * N), poison(dq, rb * rows);
                    CKL(st_cuda_rmsnorm_act(dy, dq, fmt, dx, with_res ? dres : NULL, dw, rows, n, eps, 0));
                }
                d2h(y, dy, sizeof(float) * N), d2h(xs, dx, sizeof(float) * N), d2h(q, dq, rb * rows);
                float *xr = xmalloc(sizeof(float) * N);
                for (int64_t i = 0; i < N; i++) xr[i] = with_res ? x[i] + res[i] : x[i];
                char what[96];
                snprintf(what, sizeof what, "rmsnorm_act%s %s rows %d res %d: x", span ? "" : " (block kernel)",
                         fmt_name(fmt), rows, with_res);
                check_close(what, xs, xr, N, 0, 0);
                for (int r = 0; r < rows; r++) st_rmsnorm(ref + (int64_t)r * n, xr + (int64_t)r * n, w, n, eps);
                snprintf(what, sizeof what, "rmsnorm_act%s %s rows %d res %d: y", span ? "" : " (block kernel)",
                         fmt_name(fmt), rows, with_res);
                check_close(what, y, ref, N, 1e-6f, 2e-6f);
                int64_t bad = 0;
                for (int r = 0; r < rows; r++) bad += cmp_cpu_quant(what, fmt, q + r * rb, y + (int64_t)r * n, n);
                if (bad) printf("  %s: %lld blocks differ from the CPU quantizer\n", what, (long long)bad), g_fail_cur++;
                // Quantized output only: the same bytes.
                CK(cudaMemcpy(dx, x, sizeof(float) * N, cudaMemcpyHostToDevice));
                poison(dq, rb * rows);
                CKL(st_cuda_rmsnorm_act(NULL, dq, fmt, dx, with_res ? dres : NULL, dw, rows, n, eps, 0));
                d2h(q2, dq, rb * rows);
                for (int r = 0; r < rows; r++)
                    if (memcmp(q + r * rb, q2 + r * rb, (size_t)n / 32 * 40)) {
                        printf("  %s: yq-only run differs (row %d)\n", what, r);
                        g_fail_cur++;
                    }
                free(x), free(res), free(w), free(y), free(xs), free(ref), free(q), free(q2), free(xr);
                cudaFree(dres), cudaFree(dw), cudaFree(dx), cudaFree(dy), cudaFree(dq);
            }
    st_cuda_rmsnorm_act_set_span(-1);
    report("rmsnorm_act (+residual, CPU-format Q8_0 / Q8_1 / Q8_K; the span and block kernels)");
}

// ---- mmvq_multi --------------------------------------------------------------------------------------------------

// add_last: the last matrix adds a vector (the O launch's residual: the _add instances); 0: the plain and two-type
// instances (the Q/K/V launch).
static void test_mmvq_multi_case_ex(const int *types, const int *rows, int n_mat, int ne0, int add_last) {
    const int fmt = st_cuda_act_format(types[0]);
    float *x = rand_f32(ne0, 1.0f);
    float *dx = dup_h2d(x, sizeof(float) * ne0);
    uint8_t *dxq = dalloc((size_t)st_q8_1_row_bytes(ne0));
    CKL(st_cuda_quantize_act(&g_ctx, fmt, dx, dxq, 1, ne0, 0));
    st_cuda_dec_mat m[ST_DEC_MAX_MATS];
    uint8_t *hw[ST_DEC_MAX_MATS];
    float *dref[ST_DEC_MAX_MATS], *hadd[ST_DEC_MAX_MATS];
    for (int i = 0; i < n_mat; i++) {
        hw[i] = rand_weights(types[i], rows[i], ne0);
        // The last matrix adds a vector to its dots (the O launch's residual add): its reference is dot + add.
        hadd[i] = add_last && i == n_mat - 1 ? rand_f32(rows[i], 2.0f) : NULL;
        m[i].add = hadd[i] ? dup_h2d(hadd[i], sizeof(float) * rows[i]) : NULL;
        m[i].type = types[i];
        m[i].W = dup_h2d(hw[i], st_row_size(types[i], ne0) * rows[i]);
        m[i].n_out = rows[i];
        m[i].y = dalloc(sizeof(float) * rows[i]);
        dref[i] = dalloc(sizeof(float) * rows[i]);
        CKL(st_cuda_mmvq(&g_ctx, types[i], m[i].W, ne0, rows[i], dxq, 1, dref[i], 0));
    }
    for (int rep = 0; rep < 2; rep++) {
        for (int i = 0; i < n_mat; i++) poison(m[i].y, sizeof(float) * rows[i]);
        CKL(st_cuda_mmvq_multi(m, n_mat, ne0, dxq, 0));
    }
    for (int i = 0; i < n_mat; i++) {
        float *got = xmalloc(sizeof(float) * rows[i]), *ref = xmalloc(sizeof(float) * rows[i]),
              *cpu = xmalloc(sizeof(float) * rows[i]);
        double *mag = xmalloc(sizeof(double) * rows[i]);
        d2h(got, m[i].y, sizeof(float) * rows[i]);
        d2h(ref, dref[i], sizeof(float) * rows[i]);
        if (st_cpu_matmul(NULL, types[i], hw[i], ne0, rows[i], x, 1, cpu, NULL)) {
            printf("  st_cpu_matmul: %s\n", st_errmsg());
            g_fail_cur++;
        }
        if (hadd[i]) {
            // The sum is one IEEE add of the dot to add[r] (as the FFN norm's residual add): the dot part must be
            // st_cuda_mmvq's to within the row's summation order, then got - add is that dot up to one rounding.
            for (int r = 0; r < rows[i]; r++) ref[r] = hadd[i][r] + ref[r], cpu[r] = hadd[i][r] + cpu[r];
        }
        double l2 = 0;
        for (int r = 0; r < rows[i]; r++) l2 += (double)cpu[r] * cpu[r];
        l2 = sqrt(l2 / rows[i]);
        for (int r = 0; r < rows[i]; r++) mag[r] = fabs(ref[r]) + l2;  // sums of ~ne0/32 items: order error << 1e-5
        char what[96];
        snprintf(what, sizeof what, "mmvq_multi matrix %d (%s, %d x %d) vs st_cuda_mmvq", i, st_type_name(types[i]),
                 rows[i], ne0);
        check_rel_mag(what, got, ref, mag, rows[i], 1e-5);
        const double e = rel_l2(got, cpu, rows[i]);
        if (!(e <= 0.035)) {
            printf("  mmvq_multi matrix %d (%s): relative L2 error vs CPU %.3g > 0.035\n", i, st_type_name(types[i]), e);
            g_fail_cur++;
        }
        free(got), free(ref), free(cpu), free(mag), free(hw[i]), free(hadd[i]);
        cudaFree((void *)m[i].W), cudaFree(m[i].y), cudaFree(dref[i]), cudaFree((void *)m[i].add);
    }
    free(x);
    cudaFree(dx), cudaFree(dxq);
}

static void test_mmvq_multi_case(const int *types, const int *rows, int n_mat, int ne0) {
    test_mmvq_multi_case_ex(types, rows, n_mat, ne0, 1);
}

static void test_mmvq_multi(void) {
    const int big = g_quick ? 512 : 4096;
    {
        const int t[3] = {ST_TYPE_Q4_K, ST_TYPE_Q4_K, ST_TYPE_Q6_K}, r[3] = {big, 512, 512};
        test_mmvq_multi_case(t, r, 3, 2048);  // Qwen3-30B-A3B Q4_K_M attention (V in Q6_K)
    }
    {  // one type (the per-type instances; under MULTI_STAGE the staged ones: 2 and 4 items per lane, partial)
        const int t[3] = {ST_TYPE_Q4_K, ST_TYPE_Q4_K, ST_TYPE_Q4_K}, r[3] = {big, 512, 512};
        test_mmvq_multi_case_ex(t, r, 3, 2048, 0);  // Qwen3-30B-A3B attention, all Q4_K
        const int tm[3] = {ST_TYPE_Q4_K, ST_TYPE_Q4_K, ST_TYPE_Q6_K};
        test_mmvq_multi_case_ex(tm, r, 3, 2048, 0);  // and with V in Q6_K (the two-type instance)
        const int o[1] = {ST_TYPE_Q4_K}, ro[1] = {2048};
        test_mmvq_multi_case(o, ro, 1, 4096);  // its O projection with the residual
        const int t8[2] = {ST_TYPE_Q8_0, ST_TYPE_Q8_0}, r8[2] = {300, 45};
        test_mmvq_multi_case(t8, r8, 2, 3072);
        const int t6[2] = {ST_TYPE_Q6_K, ST_TYPE_Q6_K}, r6[2] = {77, 64};
        test_mmvq_multi_case(t6, r6, 2, 1280);
    }
    {
        const int t[4] = {ST_TYPE_Q2_K, ST_TYPE_Q3_K, ST_TYPE_Q5_K, ST_TYPE_Q4_K}, r[4] = {64, 33, 129, 7};
        test_mmvq_multi_case(t, r, 4, 512);
    }
    {
        const int t[3] = {ST_TYPE_Q8_0, ST_TYPE_Q4_0, ST_TYPE_Q5_0}, r[3] = {96, 65, 31};
        test_mmvq_multi_case(t, r, 3, 576);
    }
    {
        const int t[2] = {ST_TYPE_Q4_1, ST_TYPE_Q5_1}, r[2] = {576, 192};
        test_mmvq_multi_case(t, r, 2, 576);  // SmolLM2 (Q4_1) shape
    }
    {
        const int t[1] = {ST_TYPE_Q6_K}, r[1] = {1};
        test_mmvq_multi_case(t, r, 1, 256);
    }
    {  // the i-quants (Q8_K activations): IQ1/IQ2/IQ3 mixes of low-bit files
        const int t[4] = {ST_TYPE_IQ1_S, ST_TYPE_IQ1_M, ST_TYPE_IQ2_XXS, ST_TYPE_IQ2_XS}, r[4] = {64, 33, 129, 7};
        test_mmvq_multi_case(t, r, 4, 1024);
    }
    {
        const int t[4] = {ST_TYPE_IQ2_S, ST_TYPE_IQ3_XXS, ST_TYPE_IQ3_S, ST_TYPE_IQ4_XS}, r[4] = {96, 65, 31, 40};
        test_mmvq_multi_case(t, r, 4, 512);
    }
    {  // the 16-entry codebook types (Q8_0 activations): IQ4_NL, gpt-oss's MXFP4
        const int t[2] = {ST_TYPE_IQ4_NL, ST_TYPE_MXFP4}, r[2] = {96, 65};
        test_mmvq_multi_case(t, r, 2, 2880);
    }
    {  // one i-quant type alone: the per-type instance, not the mixed-type switch
        const int t[1] = {ST_TYPE_IQ1_M}, r[1] = {512};
        test_mmvq_multi_case(t, r, 1, 4096);
    }
    report("mmvq_multi (Q/K/V in one launch, mixed types)");
}

// g32_sum4 / g32_sum4_t (the GLU kernel's four-row sums) against the one-value butterfly, bit for bit.
static void test_sum4(void) {
    int bad = -1;
    CKE(st_cuda_dec_selftest_sum4((unsigned long long)g_seed, g_quick ? 256 : 65536, &bad));
    if (bad != 0) {
        printf("  g32_sum4: %d lanes differ from g32_sum_f\n", bad);
        g_fail_cur++;
    }
    report("g32_sum4 (four group sums at once == four butterflies, bit for bit)");
}

// ---- router ------------------------------------------------------------------------------------------------------

// The CPU's route (engine/session.c) on given logits; prob receives the softmax.
static void cpu_route(const float *logits, int E, int K, int norm, int32_t *ids, float *w, float *prob) {
    memcpy(prob, logits, sizeof(float) * E);
    st_softmax(prob, E);
    st_route_topk(prob, E, K, norm, ids, w);
}

static void test_router(void) {
    static const int wtypes[] = {ST_TYPE_F32, ST_TYPE_F16, ST_TYPE_BF16};
    const int E = 128, K = 8, d = g_quick ? 512 : 2048;
    int32_t *dcnt = dalloc(st_cuda_dec_counters_bytes(768, K, 8));
    CK(cudaMemset(dcnt, 0, st_cuda_dec_counters_bytes(768, K, 8)));
    for (int ti = 0; ti < 3; ti++)
        for (int n_tok = 1; n_tok <= 5; n_tok += 4)
            for (int norm = 0; norm <= 1; norm++) {
                const int wt = wtypes[ti];
                uint8_t *W = rand_weights(wt, E, d);
                float *Wf = xmalloc(sizeof(float) * E * d);
                st_dequantize_row(wt, W, Wf, (int64_t)E * d);
                float *x = rand_f32((int64_t)n_tok * d, 1.0f);
                void *dW = dup_h2d(W, st_row_size(wt, d) * E);
                float *dx = dup_h2d(x, sizeof(float) * n_tok * d), *dl = dalloc(sizeof(float) * n_tok * E);
                int32_t *dids = dalloc(sizeof(int32_t) * n_tok * K);
                float *dw = dalloc(sizeof(float) * n_tok * K);
                for (int rep = 0; rep < 2; rep++) {
                    poison(dl, sizeof(float) * n_tok * E), poison(dids, sizeof(int32_t) * n_tok * K);
                    poison(dw, sizeof(float) * n_tok * K);
                    CKL(st_cuda_router_topk(wt, dW, d, E, dx, n_tok, K, norm, dl, dids, dw, dcnt, 0));
                }
                float l[8 * 128], w[8 * 8], rw[8], prob[128], ref[8 * 128];
                int32_t ids[8 * 8], rids[8];
                double mag[8 * 128];
                d2h(l, dl, sizeof(float) * n_tok * E), d2h(ids, dids, sizeof(int32_t) * n_tok * K);
                d2h(w, dw, sizeof(float) * n_tok * K);
                for (int t = 0; t < n_tok; t++)
                    for (int e = 0; e < E; e++) {
                        double s = 0, m = 0;
                        for (int i = 0; i < d; i++) {
                            // F16 routers see activations rounded to half, as the CPU backend (llama.cpp's
                            // vec_dot_type for F16)
                            const float xi = wt == ST_TYPE_F16 ? st_f16_to_f32(st_f32_to_f16(x[(int64_t)t * d + i]))
                                                               : x[(int64_t)t * d + i];
                            const double p = (double)Wf[(int64_t)e * d + i] * xi;
                            s += p, m += fabs(p);
                        }
                        ref[t * E + e] = (float)s;
                        mag[t * E + e] = m;
                    }
                char what[96];
                snprintf(what, sizeof what, "router_topk %s n_tok %d norm %d: logits", st_type_name(wt), n_tok, norm);
                check_rel_mag(what, l, ref, mag, (int64_t)n_tok * E, 1e-5);
                for (int t = 0; t < n_tok; t++) {
                    cpu_route(l + t * E, E, K, norm, rids, rw, prob);
                    for (int k = 0; k < K; k++) {
                        const int g = ids[t * K + k];
                        if (g != rids[k] && !(g >= 0 && g < E && fabsf(prob[g] - prob[rids[k]]) < 1e-6f)) {
                            printf("  %s: token %d slot %d: expert %d, CPU %d\n", what, t, k, g, rids[k]);
                            g_fail_cur++;
                        }
                        if (!(fabsf(w[t * K + k] - rw[k]) <= 1e-6f + 1e-5f * rw[k])) {
                            printf("  %s: token %d slot %d: weight %.8g, CPU %.8g\n", what, t, k, w[t * K + k], rw[k]);
                            g_fail_cur++;
                        }
                    }
                }
                free(W), free(Wf), free(x);
                cudaFree(dW), cudaFree(dx), cudaFree(dl), cudaFree(dids), cudaFree(dw);
            }
    cudaFree(dcnt);
    report("router_topk (F32/F16/BF16 logits, softmax, top-8 of 128, renorm)");
}

// ---- FFN norm + router in one launch -------------------------------------------------------------------------------

// st_cuda_router_norm_topk against st_cuda_rmsnorm_act + st_cuda_router_topk (each checked against the CPU above),
// bit for bit: x + res, xn, the quantized row, logits, ids and weights; launched twice with the outputs poisoned in
// between (the completion counter must come back to zero).
static void test_router_norm_case(int rt, int fmt, int E, int K, int d, int norm, int with_res) {
    uint8_t *W = rand_weights(rt, E, d);
    void *dW = dup_h2d(W, st_row_size(rt, d) * E);
    float *x0 = rand_f32(d, 1.0f), *res = rand_f32(d, 0.5f), *nw = rand_f32(d, 0.1f);
    for (int i = 0; i < d; i++) nw[i] += 1.0f;
    float *dx = dup_h2d(x0, sizeof(float) * d), *dres = dup_h2d(res, sizeof(float) * d);
    float *dnw = dup_h2d(nw, sizeof(float) * d), *dxn = dalloc(sizeof(float) * d), *dl = dalloc(sizeof(float) * E);
    float *dw = dalloc(sizeof(float) * K);
    int32_t *dids = dalloc(sizeof(int32_t) * K), *dcnt = dalloc(sizeof(int32_t) * 4);
    const size_t qb = (size_t)st_q8_1_row_bytes(d);
    uint8_t *dxq = dalloc(qb);
    CK(cudaMemset(dcnt, 0, sizeof(int32_t) * 4));
    // reference: the two launches
    CKL(st_cuda_rmsnorm_act(dxn, dxq, fmt, dx, with_res ? dres : NULL, dnw, 1, d, 1e-6f, 0));
    CKL(st_cuda_router_topk(rt, dW, d, E, dxn, 1, K, norm, dl, dids, dw, dcnt, 0));
    float *rx = xmalloc(sizeof(float) * d), *rxn = xmalloc(sizeof(float) * d), *rl = xmalloc(sizeof(float) * E);
    float *gx = xmalloc(sizeof(float) * d), *gxn = xmalloc(sizeof(float) * d), *gl = xmalloc(sizeof(float) * E);
    uint8_t *rq = xmalloc(qb), *gq = xmalloc(qb);
    float rw[32], gw[32];
    int32_t rids[32], gids[32];
    d2h(rx, dx, sizeof(float) * d), d2h(rxn, dxn, sizeof(float) * d), d2h(rl, dl, sizeof(float) * E);
    d2h(rq, dxq, qb), d2h(rids, dids, sizeof(int32_t) * K), d2h(rw, dw, sizeof(float) * K);
    for (int rep = 0; rep < 2; rep++) {
        CK(cudaMemcpy(dx, x0, sizeof(float) * d, cudaMemcpyHostToDevice));
        poison(dxn, sizeof(float) * d), poison(dl, sizeof(float) * E), poison(dxq, qb);
        poison(dids, sizeof(int32_t) * K), poison(dw, sizeof(float) * K);
        CKL(st_cuda_router_norm_topk(rt, dW, d, E, dx, with_res ? dres : NULL, dnw, 1e-6f, dxn, dxq, fmt, K, norm, dl,
                                     dids, dw, dcnt, 0));
        d2h(gx, dx, sizeof(float) * d), d2h(gxn, dxn, sizeof(float) * d), d2h(gl, dl, sizeof(float) * E);
        d2h(gq, dxq, qb), d2h(gids, dids, sizeof(int32_t) * K), d2h(gw, dw, sizeof(float) * K);
        const char *bad = memcmp(gx, rx, sizeof(float) * d)     ? "x"
                          : memcmp(gxn, rxn, sizeof(float) * d) ? "xn"
                          : memcmp(gq, rq, qb)                  ? "quantized row"
                          : memcmp(gl, rl, sizeof(float) * E)   ? "logits"
                          : memcmp(gids, rids, sizeof(int32_t) * K) ? "ids"
                          : memcmp(gw, rw, sizeof(float) * K)   ? "weights"
                                                                : NULL;
        if (bad) {
            printf("  router_norm %s %s E %d K %d d %d norm %d res %d rep %d: %s differ from the two launches\n",
                   st_type_name(rt), fmt_name(fmt), E, K, d, norm, with_res, rep, bad);
            g_fail_cur++;
        }
    }
    free(W), free(x0), free(res), free(nw), free(rx), free(rxn), free(rl), free(gx), free(gxn), free(gl), free(rq);
    free(gq);
    void *bufs[] = {dW, dx, dres, dnw, dxn, dl, dw, dids, dcnt, dxq};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
}

static void test_router_norm(void) {
    const int d = g_quick ? 512 : 2048;
    test_router_norm_case(ST_TYPE_F32, ST_TYPE_Q8_K, 128, 8, d, 1, 1);  // Qwen3-30B-A3B
    test_router_norm_case(ST_TYPE_F16, ST_TYPE_Q8_0, 64, 4, d, 0, 1);
    test_router_norm_case(ST_TYPE_BF16, ST_TYPE_Q8_1, 160, 6, 1024, 1, 0);  // no residual
    test_router_norm_case(ST_TYPE_F32, ST_TYPE_Q8_K, 128, 8, 4096, 1, 1);   // wider than the registers' preload
    report("router_norm_topk (FFN norm + router + top-k in one launch == the two launches, bit for bit)");
}

// ---- FFN norm folded into the router launch ---------------------------------------------------------------------

// st_cuda_router_fold against st_cuda_rmsnorm_act + st_cuda_router_logits (each checked against the CPU above), bit
// for bit: logits and the quantized row; launched twice with the outputs poisoned in between.
static void test_router_fold_case(int fmt, int E, int d) {
    uint8_t *W = rand_weights(ST_TYPE_F32, E, d);
    void *dW = dup_h2d(W, st_row_size(ST_TYPE_F32, d) * E);
    float *x = rand_f32(d, 1.0f), *nw = rand_f32(d, 0.1f);
    for (int i = 0; i < d; i++) nw[i] += 1.0f;
    memset(x + d - 256, 0, sizeof(float) * 256);  // an all-zero span
    float *dx = dup_h2d(x, sizeof(float) * d), *dnw = dup_h2d(nw, sizeof(float) * d);
    float *dxn = dalloc(sizeof(float) * d), *dl = dalloc(sizeof(float) * E);
    const size_t qb = (size_t)st_q8_1_row_bytes(d);
    uint8_t *dxq = dalloc(qb);
    CKL(st_cuda_rmsnorm_act(dxn, dxq, fmt, dx, NULL, dnw, 1, d, 1e-6f, 0));
    CKL(st_cuda_router_logits(ST_TYPE_F32, dW, d, E, dxn, dl, NULL, 0));
    float *rl = xmalloc(sizeof(float) * E), *gl = xmalloc(sizeof(float) * E);
    uint8_t *rq = xmalloc(qb), *gq = xmalloc(qb);
    d2h(rl, dl, sizeof(float) * E), d2h(rq, dxq, qb);
    if (!st_cuda_router_fold_supported(ST_TYPE_F32, d, E, fmt)) {
        printf("  router_fold %s E %d d %d: reported unsupported\n", fmt_name(fmt), E, d);
        g_fail_cur++;
    }
    for (int rep = 0; rep < 2; rep++) {
        poison(dl, sizeof(float) * E), poison(dxq, qb);
        CKL(st_cuda_router_fold(ST_TYPE_F32, dW, d, E, dx, dnw, 1e-6f, dxq, fmt, dl, 0));
        d2h(gl, dl, sizeof(float) * E), d2h(gq, dxq, qb);
        const char *bad = memcmp(gq, rq, qb) ? "quantized row" : memcmp(gl, rl, sizeof(float) * E) ? "logits" : NULL;
        if (bad) {
            printf("  router_fold %s E %d d %d rep %d: %s differ from the two launches\n", fmt_name(fmt), E, d, rep,
                   bad);
            g_fail_cur++;
        }
    }
    free(W), free(x), free(nw), free(rl), free(gl), free(rq), free(gq);
    void *bufs[] = {dW, dx, dnw, dxn, dl, dxq};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
}

static void test_router_fold(void) {
    test_router_fold_case(ST_TYPE_Q8_K, 128, 2048);  // Qwen3-30B-A3B
    test_router_fold_case(ST_TYPE_Q8_0, 64, 1024);
    test_router_fold_case(ST_TYPE_Q8_1, 16, 2048);
    test_router_fold_case(ST_TYPE_Q8_K, 9, 2048);  // an odd count: a block shared by logit and span groups
    test_router_fold_case(ST_TYPE_Q8_K, 60, 256);
    test_router_fold_case(ST_TYPE_Q8_K, 3, 2048);  // fewer experts than spans
    if (st_cuda_router_fold_supported(ST_TYPE_F32, 4096, 128, ST_TYPE_Q8_K) ||
        st_cuda_router_fold_supported(ST_TYPE_F16, 2048, 128, ST_TYPE_Q8_K) ||
        st_cuda_router_fold_supported(ST_TYPE_F32, 2048, 0, ST_TYPE_Q8_K)) {
        printf("  router_fold: an unsupported shape reported supported\n");
        g_fail_cur++;
    }
    report("router_fold (FFN norm + router logits + the GLU's input in one launch == the two launches, bit for bit)");
}

// ---- fused MoE ---------------------------------------------------------------------------------------------------

// One case: E experts stacked in a [.., E] tensor per projection, reached through a table that maps expert e to
// stack slot perm[e] (so the kernels must use the table, not base + stride).
static void test_moe_case(int gu_type, int down_type, int E, int K, int d, int F, int n_tok, int bad_id) {
    const int n_pairs = n_tok * K;
    const int gfmt = st_cuda_act_format(gu_type), dfmt = st_cuda_act_format(down_type);
    const size_t gu_row = st_row_size(gu_type, d), dn_row = st_row_size(down_type, F);
    const size_t gu_exp = gu_row * F, dn_exp = dn_row * d;
    uint8_t *hg = rand_weights(gu_type, (int64_t)E * F, d), *hu = rand_weights(gu_type, (int64_t)E * F, d),
            *hd = rand_weights(down_type, (int64_t)E * d, F);
    uint8_t *dg = dup_h2d(hg, gu_exp * E), *du = dup_h2d(hu, gu_exp * E), *ddn = dup_h2d(hd, dn_exp * E);
    int32_t *perm = xmalloc(sizeof(int32_t) * E);
    for (int e = 0; e < E; e++) perm[e] = e;
    for (int e = E - 1; e > 0; e--) {
        const int j = (int)st_rng_below(&g_rng, (uint32_t)e + 1), t = perm[e];
        perm[e] = perm[j], perm[j] = t;
    }
    const void **tbl = xmalloc(sizeof(void *) * 3 * E);
    for (int e = 0; e < E; e++) {
        tbl[3 * e] = dg + (size_t)perm[e] * gu_exp;
        tbl[3 * e + 1] = du + (size_t)perm[e] * gu_exp;
        tbl[3 * e + 2] = ddn + (size_t)perm[e] * dn_exp;
    }
    void *dtbl = dup_h2d(tbl, sizeof(void *) * 3 * E);
    // Distinct experts per token (as top-k gives); ids_stack: the same pairs as stack slots for the references.
    int32_t *ids = xmalloc(sizeof(int32_t) * n_pairs), *ids_stack = xmalloc(sizeof(int32_t) * n_pairs);
    float *wts = xmalloc(sizeof(float) * n_pairs);
    for (int t = 0; t < n_tok; t++)
        for (int k = 0; k < K; k++) {
            int e, dup;
            do {
                e = (int)st_rng_below(&g_rng, (uint32_t)E);
                dup = 0;
                for (int j = 0; j < k; j++) dup |= ids[t * K + j] == e;
            } while (dup);
            ids[t * K + k] = e;
            ids_stack[t * K + k] = perm[e];
            wts[t * K + k] = st_rng_f32(&g_rng);
        }
    const int bad_pair = bad_id ? (n_tok - 1) * K + 1 : -1;
    if (bad_id) ids[bad_pair] = E + 3, ids_stack[bad_pair] = E + 3;
    float *xn = rand_f32((int64_t)n_tok * d, 1.0f), *xres = rand_f32((int64_t)n_tok * d, 1.0f);
    float *dxn = dup_h2d(xn, sizeof(float) * n_tok * d);
    const size_t xq_rb = (size_t)st_q8_1_row_bytes(d), aq_rb = (size_t)st_q8_1_row_bytes(F);
    uint8_t *dxq = dalloc(xq_rb * n_tok), *daq = dalloc(aq_rb * n_pairs);
    CKL(st_cuda_quantize_act(&g_ctx, gfmt, dxn, dxq, n_tok, d, 0));
    int32_t *dids = dup_h2d(ids, sizeof(int32_t) * n_pairs), *dids_stack = dup_h2d(ids_stack, sizeof(int32_t) * n_pairs);
    float *dwts = dup_h2d(wts, sizeof(float) * n_pairs), *dact = dalloc(sizeof(float) * n_pairs * F);
    int32_t *dcnt = dalloc(st_cuda_dec_counters_bytes(F, K, n_tok));
    CK(cudaMemset(dcnt, 0, st_cuda_dec_counters_bytes(F, K, n_tok)));
    for (int rep = 0; rep < 2; rep++) {
        poison(dact, sizeof(float) * n_pairs * F), poison(daq, aq_rb * n_pairs);
        CKL(st_cuda_moe_glu_q(gu_type, (const void *const *)dtbl, E, d, F, dxq, dids, n_tok, K, dact, daq, dfmt, dcnt, 0));
    }
    // GLU reference: the existing expert-indexed kernel on the stack.
    int32_t *xrow = xmalloc(sizeof(int32_t) * n_pairs);
    for (int p = 0; p < n_pairs; p++) xrow[p] = p / K;
    int32_t *dxrow = dup_h2d(xrow, sizeof(int32_t) * n_pairs);
    float *dact_ref = dalloc(sizeof(float) * n_pairs * F);
    CKL(st_cuda_mmvq_ids_glu(&g_ctx, gu_type, dg, du, d, F, E, dxq, n_tok, dids_stack, dxrow, n_pairs, dact_ref, 0));
    float *act = xmalloc(sizeof(float) * n_pairs * F), *act_ref = xmalloc(sizeof(float) * n_pairs * F);
    uint8_t *aq = xmalloc(aq_rb * n_pairs);
    d2h(act, dact, sizeof(float) * n_pairs * F), d2h(act_ref, dact_ref, sizeof(float) * n_pairs * F);
    d2h(aq, daq, aq_rb * n_pairs);
    char what[128];
    snprintf(what, sizeof what, "moe_glu_q %s->%s E %d K %d d %d F %d n_tok %d", st_type_name(gu_type),
             st_type_name(dfmt), E, K, d, F, n_tok);
    int64_t badq = 0;
    for (int p = 0; p < n_pairs; p++) {
        if (p == bad_pair) {
            for (int r = 0; r < F; r++)
                if (!isnan(act[(int64_t)p * F + r])) {
                    printf("  %s: invalid expert id: act[%d][%d] = %g, not NaN\n", what, p, r, act[(int64_t)p * F + r]);
                    g_fail_cur++;
                    break;
                }
            continue;
        }
        double l2 = 0;
        for (int r = 0; r < F; r++) l2 += (double)act_ref[(int64_t)p * F + r] * act_ref[(int64_t)p * F + r];
        l2 = sqrt(l2 / F);
        double *mag = xmalloc(sizeof(double) * F);
        for (int r = 0; r < F; r++) mag[r] = fabs(act_ref[(int64_t)p * F + r]) + l2;
        check_rel_mag(what, act + (int64_t)p * F, act_ref + (int64_t)p * F, mag, F, 2e-5);
        free(mag);
        badq += cmp_cpu_quant(what, dfmt, aq + p * aq_rb, act + (int64_t)p * F, F);
    }
    if (badq) printf("  %s: %lld blocks of the down input differ from the CPU quantizer\n", what, (long long)badq), g_fail_cur++;

    // Down + weighted sum + residual, in place (x += moe) and into a separate output.
    float *dx = dup_h2d(xres, sizeof(float) * n_tok * d), *dout = dalloc(sizeof(float) * n_tok * d);
    for (int rep = 0; rep < 2; rep++) {
        CK(cudaMemcpy(dx, xres, sizeof(float) * n_tok * d, cudaMemcpyHostToDevice));
        poison(dout, sizeof(float) * n_tok * d);
        CKL(st_cuda_moe_down_sum(down_type, (const void *const *)dtbl, E, d, F, daq, dids, dwts, n_tok, K, dx, dx, 0));
        CKL(st_cuda_moe_down_sum(down_type, (const void *const *)dtbl, E, d, F, daq, dids, dwts, n_tok, K, dout, NULL, 0));
    }
    float *dy = dalloc(sizeof(float) * n_pairs * d);
    CKL(st_cuda_mmvq_ids(&g_ctx, down_type, ddn, F, d, E, daq, n_pairs, dids_stack, NULL, n_pairs, dy, 0));
    float *y = xmalloc(sizeof(float) * n_pairs * d), *gx = xmalloc(sizeof(float) * n_tok * d),
          *gout = xmalloc(sizeof(float) * n_tok * d), *ref = xmalloc(sizeof(float) * n_tok * d),
          *ref_x = xmalloc(sizeof(float) * n_tok * d);
    double *mag = xmalloc(sizeof(double) * n_tok * d);
    d2h(y, dy, sizeof(float) * n_pairs * d), d2h(gx, dx, sizeof(float) * n_tok * d);
    d2h(gout, dout, sizeof(float) * n_tok * d);
    for (int t = 0; t < n_tok; t++)
        for (int j = 0; j < d; j++) {
            float o = 0;
            double m = 0;
            for (int k = 0; k < K; k++) {
                const float yk = y[((int64_t)t * K + k) * d + j], p = yk * wts[t * K + k];
                o = k == 0 ? p : o + p;
                m += fabs((double)p);
            }
            ref[(int64_t)t * d + j] = o;
            ref_x[(int64_t)t * d + j] = xres[(int64_t)t * d + j] + o;
            mag[(int64_t)t * d + j] = m + 1e-3 * fabs(xres[(int64_t)t * d + j]);
        }
    snprintf(what, sizeof what, "moe_down_sum %s E %d K %d d %d F %d n_tok %d", st_type_name(down_type), E, K, d, F,
             n_tok);
    const int good_tok = bad_id ? n_tok - 1 : n_tok;
    check_rel_mag(what, gout, ref, mag, (int64_t)good_tok * d, 2e-5);
    check_rel_mag(what, gx, ref_x, mag, (int64_t)good_tok * d, 2e-5);
    if (bad_id)
        for (int j = 0; j < d; j++)
            if (!isnan(gout[(int64_t)(n_tok - 1) * d + j])) {
                printf("  %s: invalid expert id: out[%d] = %g, not NaN\n", what, j, gout[(int64_t)(n_tok - 1) * d + j]);
                g_fail_cur++;
                break;
            }
    // Every guess of the ranks' experts wrong (the tests' launches read the ids in stream order, so they never miss
    // otherwise): the path after a miss must give the same outputs, bit for bit (NaN rows NaN).
    if (st_cuda_dec_down_guess_poison(1)) {
        float *gp = xmalloc(sizeof(float) * n_tok * d);
        poison(dout, sizeof(float) * n_tok * d);
        CKL(st_cuda_moe_down_sum(down_type, (const void *const *)dtbl, E, d, F, daq, dids, dwts, n_tok, K, dout, NULL,
                                 0));
        d2h(gp, dout, sizeof(float) * n_tok * d);
        int64_t bad = 0;
        for (int64_t i = 0; i < (int64_t)n_tok * d; i++)
            bad += memcmp(&gp[i], &gout[i], sizeof(float)) != 0 && !(isnan(gp[i]) && isnan(gout[i]));
        if (bad) printf("  %s: %lld outputs differ after wrong guesses\n", what, (long long)bad), g_fail_cur++;
        free(gp);
    }
    st_cuda_dec_down_guess_poison(0);
    // Version 2: GLU without quantization, down with the quantization in its prologue.
    {
        float *dact2 = dalloc(sizeof(float) * n_pairs * F), *act2 = xmalloc(sizeof(float) * n_pairs * F);
        for (int rep = 0; rep < 2; rep++) {
            poison(dact2, sizeof(float) * n_pairs * F);
            CKL(st_cuda_moe_glu(gu_type, (const void *const *)dtbl, E, d, F, dxq, dids, n_tok, K, dact2, 0));
        }
        d2h(act2, dact2, sizeof(float) * n_pairs * F);
        snprintf(what, sizeof what, "moe_glu (v2) %s E %d K %d d %d F %d n_tok %d", st_type_name(gu_type), E, K, d, F,
                 n_tok);
        for (int p = 0; p < n_pairs; p++) {
            if (p == bad_pair) continue;
            double l2 = 0;
            for (int r = 0; r < F; r++) l2 += (double)act_ref[(int64_t)p * F + r] * act_ref[(int64_t)p * F + r];
            l2 = sqrt(l2 / F);
            double *mg = xmalloc(sizeof(double) * F);
            for (int r = 0; r < F; r++) mg[r] = fabs(act_ref[(int64_t)p * F + r]) + l2;
            check_rel_mag(what, act2 + (int64_t)p * F, act_ref + (int64_t)p * F, mg, F, 2e-5);
            free(mg);
        }
        if (st_cuda_moe_down_q_smem(F, K) <= ST_DEC_DOWN_Q_MAX_SMEM) {
            float *gx2 = xmalloc(sizeof(float) * n_tok * d), *gout2 = xmalloc(sizeof(float) * n_tok * d);
            for (int rep = 0; rep < 2; rep++) {
                CK(cudaMemcpy(dx, xres, sizeof(float) * n_tok * d, cudaMemcpyHostToDevice));
                poison(dout, sizeof(float) * n_tok * d);
                CKL(st_cuda_moe_down_q(down_type, (const void *const *)dtbl, E, d, F, dact2, dfmt, dids, dwts, n_tok,
                                       K, dx, dx, 0));
                CKL(st_cuda_moe_down_q(down_type, (const void *const *)dtbl, E, d, F, dact2, dfmt, dids, dwts, n_tok,
                                       K, dout, NULL, 0));
            }
            d2h(gx2, dx, sizeof(float) * n_tok * d), d2h(gout2, dout, sizeof(float) * n_tok * d);
            snprintf(what, sizeof what, "moe_down_q (v2) %s E %d K %d d %d F %d n_tok %d", st_type_name(down_type), E,
                     K, d, F, n_tok);
            check_rel_mag(what, gout2, ref, mag, (int64_t)good_tok * d, 2e-5);
            check_rel_mag(what, gx2, ref_x, mag, (int64_t)good_tok * d, 2e-5);
            int64_t diff = 0;  // same int8 inputs, same per-row order: v1 and v2 should agree exactly
            for (int64_t i = 0; i < (int64_t)good_tok * d; i++) diff += gout2[i] != gout[i];
            if (diff) printf("  %s: note: %lld of %lld outputs differ from version 1 in the last bits\n", what,
                             (long long)diff, (long long)good_tok * d);
            if (bad_id)
                for (int j = 0; j < d; j++)
                    if (!isnan(gout2[(int64_t)(n_tok - 1) * d + j])) {
                        printf("  %s: invalid expert id: out[%d] = %g, not NaN\n", what, j,
                               gout2[(int64_t)(n_tok - 1) * d + j]);
                        g_fail_cur++;
                        break;
                    }
            free(gx2), free(gout2);
        }
        free(act2);
        cudaFree(dact2);
    }
    free(hg), free(hu), free(hd), free(perm), free(tbl), free(ids), free(ids_stack), free(wts), free(xn), free(xres);
    free(xrow), free(act), free(act_ref), free(aq), free(y), free(gx), free(gout), free(ref), free(ref_x), free(mag);
    cudaFree(dg), cudaFree(du), cudaFree(ddn), cudaFree(dtbl), cudaFree(dxn), cudaFree(dxq), cudaFree(daq);
    cudaFree(dids), cudaFree(dids_stack), cudaFree(dwts), cudaFree(dact), cudaFree(dcnt), cudaFree(dxrow);
    cudaFree(dact_ref), cudaFree(dx), cudaFree(dout), cudaFree(dy);
}

static void test_moe(void) {
    const int E = g_quick ? 12 : 32, d = g_quick ? 512 : 2048;
    test_moe_case(ST_TYPE_Q4_K, ST_TYPE_Q6_K, E, 8, d, 768, 1, 0);  // Qwen3-30B-A3B Q4_K_M ("more bits" layer)
    test_moe_case(ST_TYPE_Q4_K, ST_TYPE_Q4_K, E, 8, d, 768, 3, 1);  // batch, one invalid id
    test_moe_case(ST_TYPE_Q8_0, ST_TYPE_Q4_0, E, 4, 256, 96, 2, 0); // Q8_0 format, 32-row chunks
    test_moe_case(ST_TYPE_Q4_1, ST_TYPE_Q5_1, E, 2, 256, 512, 1, 0); // Q8_1 format
    if (!g_quick) test_moe_case(ST_TYPE_Q5_K, ST_TYPE_Q3_K, E, 8, 1024, 512, 8, 0);
    test_moe_case(ST_TYPE_IQ1_M, ST_TYPE_IQ2_XXS, E, 8, 1024, 512, 1, 0);  // a Qwen3-235B-A22B IQ1_M-style mix
    test_moe_case(ST_TYPE_IQ2_XS, ST_TYPE_IQ3_S, E, 4, 512, 768, 2, 0);
    test_moe_case(ST_TYPE_IQ3_XXS, ST_TYPE_IQ4_XS, E, 8, 512, 256, 1, 1);
    test_moe_case(ST_TYPE_MXFP4, ST_TYPE_MXFP4, E, 4, 576, 320, 1, 0);    // gpt-oss: MXFP4 experts, Q8_0 inputs
    if (!g_quick) test_moe_case(ST_TYPE_IQ1_S, ST_TYPE_IQ2_S, E, 8, 4096, 1536, 1, 0);  // the 235B shape
    if (!g_quick) test_moe_case(ST_TYPE_IQ4_NL, ST_TYPE_IQ4_NL, E, 2, 256, 96, 3, 0);
    report("moe_glu_q + moe_down_sum, moe_glu + moe_down_q (expert table, CPU-format down input, rank-order sum)");
}

// ---- the route inside the GLU launch -----------------------------------------------------------------------------

// The one-token default (st_cuda_router_logits + st_cuda_moe_route_glu_q) against router_topk + moe_glu_q, bit for
// bit: the residual stream after moe_down_sum, the selected ids and their weights. (Until 2026-12-03e this case also
// checked the one-launch MoE FFN, st_cuda_dec_moe: removed, docs/experiments/2026-12-03e-moe-one-launch.patch.)
// ties: only 4 distinct router rows (expert e's is row e % 4), so the logits tie in every top K + 1 and the GLU
// blocks' ids from the logits (GLU_FAST_ROUTE) defer to the route.
static void test_route_glu_case(int rt, int gu_type, int down_type, int E, int K, int d, int F, int norm, int ties) {
    const int gfmt = st_cuda_act_format(gu_type), dfmt = st_cuda_act_format(down_type);
    const size_t gu_exp = st_row_size(gu_type, d) * F, dn_exp = st_row_size(down_type, F) * d;
    uint8_t *hg = rand_weights(gu_type, (int64_t)E * F, d), *hu = rand_weights(gu_type, (int64_t)E * F, d),
            *hd = rand_weights(down_type, (int64_t)E * d, F), *hr = rand_weights(rt, E, d);
    const size_t rrow = st_row_size(rt, d);
    for (int e = 4; ties && e < E; e++) memcpy(hr + rrow * e, hr + rrow * (e % 4), rrow);
    uint8_t *dg = dup_h2d(hg, gu_exp * E), *du = dup_h2d(hu, gu_exp * E), *ddn = dup_h2d(hd, dn_exp * E);
    void *drouter = dup_h2d(hr, st_row_size(rt, d) * E);
    const void **tbl = xmalloc(sizeof(void *) * 3 * E);
    for (int e = 0; e < E; e++) {  // experts in reverse order in memory: the table is what counts
        tbl[3 * e] = dg + (size_t)(E - 1 - e) * gu_exp, tbl[3 * e + 1] = du + (size_t)(E - 1 - e) * gu_exp;
        tbl[3 * e + 2] = ddn + (size_t)(E - 1 - e) * dn_exp;
    }
    void *dtbl = dup_h2d(tbl, sizeof(void *) * 3 * E);
    // The affine runs (GLU_AFFINE, the default): the same experts by gate0 / up0 + e stride (a negative stride
    // here), and a table whose gate / up entries all name expert 0, so a GLU that read the table would differ.
    const st_cuda_glu_affine aff = {dg + (size_t)(E - 1) * gu_exp, du + (size_t)(E - 1) * gu_exp, -(long long)gu_exp,
                                    ddn + (size_t)(E - 1) * dn_exp, -(long long)dn_exp, (long long)dn_exp};
    for (int e = 0; e < E; e++) tbl[3 * e] = tbl[0], tbl[3 * e + 1] = tbl[1];
    void *dtbl_aff = dup_h2d(tbl, sizeof(void *) * 3 * E);
    const int n_runs = st_cuda_glu_affine_enabled() ? 5 : 3;
    float *x0 = rand_f32(d, 1.0f), *add = rand_f32(d, 0.5f), *nw = rand_f32(d, 0.1f);
    for (int i = 0; i < d; i++) nw[i] += 1.0f;
    float *dx = dup_h2d(x0, sizeof(float) * d), *dadd = dup_h2d(add, sizeof(float) * d), *dnw = dup_h2d(nw, sizeof(float) * d);
    float *dxn = dalloc(sizeof(float) * d), *dlog = dalloc(sizeof(float) * E), *dact = dalloc(sizeof(float) * K * F);
    float *dw = dalloc(sizeof(float) * K);
    int32_t *dids = dalloc(sizeof(int32_t) * K);
    const size_t aqb = (size_t)st_q8_1_row_bytes(F) * K;
    uint8_t *dxq = dalloc((size_t)st_q8_1_row_bytes(d)), *daq = dalloc(aqb);
    int32_t *dcnt = dalloc(st_cuda_dec_counters_bytes(F, K, 1));
    CK(cudaMemset(dcnt, 0, st_cuda_dec_counters_bytes(F, K, 1)));
    // Reference: the four launches.
    CKL(st_cuda_rmsnorm_act(dxn, dxq, gfmt, dx, dadd, dnw, 1, d, 1e-6f, 0));
    CKL(st_cuda_router_topk(rt, drouter, d, E, dxn, 1, K, norm, dlog, dids, dw, dcnt, 0));
    CKL(st_cuda_moe_glu(gu_type, (const void *const *)dtbl, E, d, F, dxq, dids, 1, K, dact, 0));
    CKL(st_cuda_moe_down_q(down_type, (const void *const *)dtbl, E, d, F, dact, dfmt, dids, dw, 1, K, dx, dx, 0));
    float *ref = xmalloc(sizeof(float) * d);
    d2h(ref, dx, sizeof(float) * d);
    int64_t moved = 0;
    for (int i = 0; i < d; i++) moved += ref[i] != x0[i] + add[i];
    if (moved < d / 2) printf("  route_glu: the reference barely moved x (%lld of %d)\n", (long long)moved, d), g_fail_cur++;
    // The route taken inside the GLU launch (st_cuda_router_logits + st_cuda_moe_route_glu_q, the default for one
    // token) against st_cuda_router_topk + st_cuda_moe_glu_q, then st_cuda_moe_down_sum for both: bit for bit,
    // twice (the chunk counters must come back to zero), then twice more by the affine layout where built in.
    {
        float *r1 = xmalloc(sizeof(float) * d), *g1 = xmalloc(sizeof(float) * d), rw1[32], gw1[32];
        int32_t rid1[32], gid1[32];
        for (int v = 0; v < n_runs; v++) {
            CK(cudaMemcpy(dx, x0, sizeof(float) * d, cudaMemcpyHostToDevice));
            poison(dlog, sizeof(float) * E), poison(dact, sizeof(float) * K * F), poison(daq, aqb);
            poison(dids, sizeof(int32_t) * K), poison(dw, sizeof(float) * K);
            CKL(st_cuda_rmsnorm_act(dxn, dxq, gfmt, dx, dadd, dnw, 1, d, 1e-6f, 0));
            if (v == 0) {
                CKL(st_cuda_router_topk(rt, drouter, d, E, dxn, 1, K, norm, dlog, dids, dw, dcnt, 0));
                CKL(st_cuda_moe_glu_q(gu_type, (const void *const *)dtbl, E, d, F, dxq, dids, 1, K, dact, daq, dfmt,
                                      dcnt, 0));
            } else {
                CKL(st_cuda_router_logits(rt, drouter, d, E, dxn, dlog, NULL, 0));
                CKL(st_cuda_moe_route_glu_q(gu_type, (const void *const *)(v < 3 ? dtbl : dtbl_aff), E, d, F, dxq,
                                            dlog, norm, K, dids, dw, dact, daq, dfmt, dcnt, v < 3 ? NULL : &aff, 0));
            }
            CKL(st_cuda_moe_down_sum(down_type, (const void *const *)dtbl, E, d, F, daq, dids, dw, 1, K, dx, dx, 0));
            d2h(v ? g1 : r1, dx, sizeof(float) * d), d2h(v ? gid1 : rid1, dids, sizeof(int32_t) * K);
            d2h(v ? gw1 : rw1, dw, sizeof(float) * K);
            if (v == 0) continue;
            int64_t bad = 0;
            for (int i = 0; i < d; i++) bad += memcmp(&g1[i], &r1[i], sizeof(float)) != 0;
            const int idbad = memcmp(gid1, rid1, sizeof(int32_t) * K) != 0, wbad = memcmp(gw1, rw1, sizeof(float) * K) != 0;
            if (bad || idbad || wbad) {
                printf("  route_glu router %s %s/%s E %d K %d d %d F %d norm %d run %d: %lld of %d outputs differ, "
                       "ids %s, weights %s\n", st_type_name(rt), st_type_name(gu_type), st_type_name(down_type), E, K,
                       d, F, norm, v, (long long)bad, d, idbad ? "DIFFER" : "same", wbad ? "DIFFER" : "same");
                g_fail_cur++;
            }
        }
        free(r1), free(g1);
    }
    free(hg), free(hu), free(hd), free(hr), free(tbl), free(x0), free(add), free(nw), free(ref);
    void *bufs[] = {dg, du, ddn, drouter, dtbl, dtbl_aff, dx, dadd, dnw, dxn, dlog, dact, dw, dids, dxq, daq,
                    dcnt};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
}

static void test_route_glu(void) {
    const int E = g_quick ? 32 : 128, d = g_quick ? 512 : 2048;
    test_route_glu_case(ST_TYPE_F32, ST_TYPE_Q4_K, ST_TYPE_Q6_K, E, 8, d, 768, 1, 0);   // Qwen3-30B-A3B Q4_K_M
    test_route_glu_case(ST_TYPE_F32, ST_TYPE_Q4_K, ST_TYPE_Q4_K, E, 8, d, 768, 1, 0);
    test_route_glu_case(ST_TYPE_F32, ST_TYPE_Q4_K, ST_TYPE_Q6_K, E, 8, d, 768, 1, 1);   // tied logits
    test_route_glu_case(ST_TYPE_F16, ST_TYPE_Q5_K, ST_TYPE_Q3_K, 16, 4, 1024, 512, 0, 0);
    test_route_glu_case(ST_TYPE_BF16, ST_TYPE_Q8_0, ST_TYPE_Q4_0, 32, 2, 256, 96, 1, 0);  // Q8_0 inputs, 32-row chunks
    test_route_glu_case(ST_TYPE_F32, ST_TYPE_Q4_1, ST_TYPE_Q5_1, 8, 8, 256, 512, 1, 0);   // Q8_1 inputs, all experts
    test_route_glu_case(ST_TYPE_F32, ST_TYPE_Q6_K, ST_TYPE_Q6_K, 16, 4, 512, 256, 1, 0);  // Q6_K gate/up
    if (!g_quick) test_route_glu_case(ST_TYPE_F32, ST_TYPE_Q2_K, ST_TYPE_Q8_0, 64, 6, 4096, 1536, 1, 0);
    report("route_glu (the route inside the GLU launch == router_topk + moe_glu_q, bit for bit)");
}

// GLU_FAST_ROUTE's ids from the logits' top K + 1 (route_ids_by_logits) against route_group: where the fast path
// answers, its ids must be the route's; on random logits it must answer almost always (else the switch buys nothing),
// and it must decline rows where the order by logits and by probability may differ: exact ties, adjacent floats at
// the top or at the K / K + 1 boundary, +0 / -0, a NaN, probabilities that underflow, E <= K.
static void test_route_fast_case(int E, int K, int n_rows) {
    float *l = xmalloc(sizeof(float) * (size_t)n_rows * E);
    int *must_decline = xmalloc(sizeof(int) * (size_t)n_rows);
    for (int r = 0; r < n_rows; r++) {
        float *x = l + (size_t)r * E;
        for (int e = 0; e < E; e++) x[e] = st_rng_normal(&g_rng) * 2.0f;
        const int a = (int)st_rng_below(&g_rng, (uint32_t)E);
        const int b = (a + 1 + (int)st_rng_below(&g_rng, (uint32_t)E - 1)) % E;  // (another expert)
        must_decline[r] = E <= K;
        // (cases 1, 5, 6: the rest 50 below, so the crafted values are the top picks; adjacent floats below 1, whose
        // probabilities differ by less than the check's 2^-20 margin)
        if (r % 8 == 1 || r % 8 == 5 || r % 8 == 6)
            for (int e = 0; e < E; e++) x[e] -= 50.0f;
        switch (r % 8) {
            case 1: x[a] = 0.5f, x[b] = nextafterf(0.5f, 1.0f), must_decline[r] = 1; break;  // adjacent, at the top
            case 2: x[a] = x[b] = 7.0f, must_decline[r] = 1; break;                           // an exact tie
            case 3: x[a] = NAN, must_decline[r] = 1; break;
            case 4:  // all but three far below: the K + 1 picks' probabilities underflow
                for (int e = 0; e < E; e++) x[e] = e < 3 ? (float)e : -200.0f - (float)e;
                must_decline[r] = K >= 3;
                break;
            case 5: x[a] = 0.0f, x[b] = -0.0f, must_decline[r] = 1; break;  // equal, with different bits
            case 6:  // the K-th and (K + 1)-th picks adjacent floats
                if (K + 1 <= E) {
                    for (int k = 0; k < K; k++) x[(a + k) % E] = 0.9f - 0.05f * (float)k;
                    x[(a + K) % E] = nextafterf(x[(a + K - 1) % E], 0.0f), must_decline[r] = 1;
                }
                break;
            default: break;
        }
    }
    float *dl = dup_h2d(l, sizeof(float) * (size_t)n_rows * E), *dw = dalloc(sizeof(float) * (size_t)n_rows * K);
    int32_t *dfast = dalloc(sizeof(int32_t) * (size_t)n_rows * K), *dref = dalloc(sizeof(int32_t) * (size_t)n_rows * K);
    int32_t *dok = dalloc(sizeof(int32_t) * (size_t)n_rows);
    CKL(st_cuda_route_fast_check(dl, n_rows, E, K, 1, dfast, dok, dref, dw, 0));
    int32_t *fast = xmalloc(sizeof(int32_t) * (size_t)n_rows * K), *ref = xmalloc(sizeof(int32_t) * (size_t)n_rows * K);
    int32_t *ok = xmalloc(sizeof(int32_t) * (size_t)n_rows);
    d2h(fast, dfast, sizeof(int32_t) * (size_t)n_rows * K), d2h(ref, dref, sizeof(int32_t) * (size_t)n_rows * K);
    d2h(ok, dok, sizeof(int32_t) * (size_t)n_rows);
    int n_plain = 0, n_plain_ok = 0, wrong = 0, bad_accept = 0;
    for (int r = 0; r < n_rows; r++) {
        if (ok[r] && memcmp(fast + (size_t)r * K, ref + (size_t)r * K, sizeof(int32_t) * K) != 0) wrong++;
        if (ok[r] && must_decline[r]) bad_accept++;
        if (r % 8 == 0 || r % 8 == 7) n_plain++, n_plain_ok += ok[r] != 0;
    }
    const int want_ok = E > K ? n_plain - n_plain / 100 : 0;  // >= 99% of the plain rows where E > K
    if (wrong || bad_accept || n_plain_ok < want_ok) {
        printf("  route_fast E %d K %d: %d rows with other ids than the route, %d accepted that must be declined, "
               "%d of %d plain rows answered (want >= %d)\n", E, K, wrong, bad_accept, n_plain_ok, n_plain, want_ok);
        g_fail_cur++;
    }
    free(l), free(must_decline), free(fast), free(ref), free(ok);
    void *bufs[] = {dl, dw, dfast, dref, dok};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
}

static void test_route_fast(void) {
    test_route_fast_case(128, 8, g_quick ? 2048 : 16384);  // Qwen3-30B-A3B
    test_route_fast_case(16, 4, 2048);
    test_route_fast_case(32, 2, 2048);
    test_route_fast_case(9, 8, 2048);
    test_route_fast_case(8, 8, 512);  // E <= K: always declined
    report("route_fast (GLU_FAST_ROUTE's ids from the logits' top K + 1 == route_group's wherever it answers)");
}

// ---- attention v2 ------------------------------------------------------------------------------------------------

static st_pool *g_pool;
static void *g_att_ws;  // one workspace for every case (zeroed once): the counters must return to 0
static size_t g_att_ws_bytes;

static void *rand_cache(int64_t n_pos, int64_t row, int kv_f16) {
    const size_t el = kv_f16 ? 2 : 4;
    void *c = xmalloc(el * (size_t)(n_pos * row));
    for (int64_t i = 0; i < n_pos * row; i++) {
        const float x = st_rng_normal(&g_rng);
        if (kv_f16) ((uint16_t *)c)[i] = st_f32_to_f16(x);
        else ((float *)c)[i] = x;
    }
    return c;
}

static void test_attn_case(int L, int n_head, int n_kv, int hd, int kv_f16, int n_split, int fmt, int wide) {
    const int64_t row = (int64_t)n_kv * hd, nq = (int64_t)n_head * hd;
    const size_t el = kv_f16 ? 2 : 4;
    if (n_split <= 0) n_split = st_cuda_attn_dec_splits(n_kv, g_ctx.sm_count);
    if (!st_cuda_attn_dec_supported(hd, n_head, n_kv, fmt)) {
        printf("  attn_dec: shape %d/%d x %d format %d unexpectedly unsupported\n", n_head, n_kv, hd, fmt);
        g_fail_cur++;
        return;
    }
    if (st_cuda_attn_dec_ws_bytes(n_head, n_kv, hd, n_split) > g_att_ws_bytes) {
        printf("  attn_dec: test workspace too small\n");
        g_fail_cur++;
        return;
    }
    void *kc = rand_cache(L, row, kv_f16), *vc = rand_cache(L, row, kv_f16);
    float *q = rand_f32(nq, 1.0f), *ref = xmalloc(sizeof(float) * nq), *got = xmalloc(sizeof(float) * nq);
    // The caches hold n_ctx = L + 37 rows, those past L all-ones bits (NaN in f16 and f32): no path may let a row at
    // or past the end reach the output (the staging clamps the row).
    const int64_t n_ctx = L + 37;
    void *dkc = dalloc(el * n_ctx * row), *dvc = dalloc(el * n_ctx * row);
    CK(cudaMemset(dkc, 0xff, el * n_ctx * row));
    CK(cudaMemset(dvc, 0xff, el * n_ctx * row));
    CK(cudaMemcpy(dkc, kc, el * L * row, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dvc, vc, el * L * row, cudaMemcpyHostToDevice));
    float *dq = dup_h2d(q, sizeof(float) * nq), *dout = dalloc(sizeof(float) * nq);
    const size_t rb = (size_t)st_q8_1_row_bytes(nq);
    uint8_t *dyq = fmt >= 0 ? dalloc(rb) : NULL, *yq = xmalloc(rb);
    const int32_t pos = L - 1;
    int32_t *dpos = dup_h2d(&pos, sizeof pos);
    const float scale = 1.0f / sqrtf((float)hd);
    for (int rep = 0; rep < 2; rep++) {  // twice: the last-block counters must have been reset
        poison(dout, sizeof(float) * nq);
        if (dyq) poison(dyq, rb);
        CKL(st_cuda_attn_dec_ex(dout, dyq, fmt, dq, dkc, dvc, kv_f16, dpos, n_head, n_kv, hd, scale, n_split, g_att_ws,
                                NULL, wide, 0));
    }
    d2h(got, dout, sizeof(float) * nq);
    st_attention(g_pool, ref, q, kc, vc, kv_f16, 1, L - 1, n_head, n_kv, hd, scale);
    char what[128];
    snprintf(what, sizeof what, "attn_dec L %d, %d/%d heads, hd %d, %s, grid %d, out format %s%s", L, n_head, n_kv, hd,
             kv_f16 ? "f16" : "f32", n_split, fmt >= 0 ? st_type_name(fmt) : "-", wide ? ", wide" : "");
    check_close(what, got, ref, nq, 2e-5f, 1e-3f);
    if (dyq) {
        d2h(yq, dyq, rb);
        const int64_t bad = cmp_cpu_quant(what, fmt, yq, got, nq);
        if (bad) printf("  %s: %lld blocks differ from the CPU quantizer\n", what, (long long)bad), g_fail_cur++;
    }
    free(kc), free(vc), free(q), free(ref), free(got), free(yq);
    cudaFree(dkc), cudaFree(dvc), cudaFree(dq), cudaFree(dout), cudaFree(dpos);
    if (dyq) cudaFree(dyq);
}

static void test_attn_dec(void) {
    g_att_ws_bytes = st_cuda_attn_dec_ws_bytes(64, 64, 128, 256);
    g_att_ws = dalloc(g_att_ws_bytes);
    CK(cudaMemset(g_att_ws, 0, g_att_ws_bytes));
    st_cuda_attn_dec_set_tc(1);  // f16 caches: the tensor-core kernel where the device has it (opt-in in the engine)
    static const int Ls[] = {1, 7, 33, 256, 1000, 4097, 16385};
    const int nL = g_quick ? 5 : 7;
    // {n_head, n_kv, hd}: Qwen3-30B-A3B (G 8), hd 64, G 3 (padded to 4), G 1, G 4 with 8 KV heads
    static const int shapes[][3] = {{32, 4, 128}, {32, 4, 64}, {9, 3, 64}, {16, 16, 128}, {32, 8, 128}};
    for (int s = 0; s < 5; s++)
        for (int f16 = 1; f16 >= 0; f16--)
            for (int i = 0; i < nL; i++) {
                if (s >= 2 && Ls[i] > 4097) continue;
                const int G = shapes[s][0] / shapes[s][1], gh = G * shapes[s][2];
                const int fmt = gh % 256 == 0 ? ST_TYPE_Q8_K : (i % 2 ? ST_TYPE_Q8_0 : ST_TYPE_Q8_1);
                test_attn_case(Ls[i], shapes[s][0], shapes[s][1], shapes[s][2], f16, 0, i == 2 ? -1 : fmt, 0);
            }
    test_attn_case(1000, 32, 4, 128, 1, 1, ST_TYPE_Q8_K, 0);    // one split: the whole sequence in one block
    test_attn_case(777, 32, 4, 128, 1, 7, ST_TYPE_Q8_0, 0);     // uneven chunks
    test_attn_case(5000, 32, 4, 128, 1, 256, ST_TYPE_Q8_1, 0);  // the largest grid
    test_attn_case(300, 32, 4, 128, 0, 3, ST_TYPE_Q8_K, 0);
    // Tensor-core kernel's two-level merge (groups of 8 splits of >= 64 positions): 8 + 1 and 8 + 2 splits, a
    // single group of exactly 8, and 8 x 8 + 7 at hd 64 with G 3.
    test_attn_case(576, 32, 4, 128, 1, 9, ST_TYPE_Q8_K, 0);
    test_attn_case(577, 32, 4, 128, 1, 256, ST_TYPE_Q8_K, 0);
    test_attn_case(512, 32, 4, 128, 1, 8, ST_TYPE_Q8_0, 0);
    test_attn_case(4500, 9, 3, 64, 1, 71, ST_TYPE_Q8_1, 0);
    // Blocks of >= 16 tiles stage by bulk copies on sm_90 (decode_attn.cu ATC_BULK), at hd 64 here, with a ragged
    // last tile; the blocks of the 16385 case above mix both stagings in one launch.
    test_attn_case(2001, 9, 3, 64, 1, 2, ST_TYPE_Q8_0, 0);
    test_attn_case(3003, 32, 4, 128, 1, 3, ST_TYPE_Q8_K, 0);
    // 8-warp blocks (the engine's choice at long contexts; sm_90 TMA kernel at head_dim 128, else the 4-warp one)
    for (int i = 0; i < nL; i++) test_attn_case(Ls[i], 32, 4, 128, 1, 0, i % 2 ? ST_TYPE_Q8_K : ST_TYPE_Q8_0, 1);
    test_attn_case(777, 32, 4, 128, 1, 7, ST_TYPE_Q8_0, 1);
    test_attn_case(5000, 32, 4, 128, 1, 256, ST_TYPE_Q8_1, 1);
    test_attn_case(1100, 32, 4, 128, 1, 9, ST_TYPE_Q8_K, 1);
    test_attn_case(300, 16, 16, 128, 1, 0, -1, 1);
    // The SIMT kernel on f16 caches too (the engine's default for now), then back to the environment's choice.
    printf("  attn_dec: f16 caches took the %s kernel above\n", st_cuda_attn_dec_tc(1) ? "tensor-core" : "SIMT");
    if (st_cuda_attn_dec_tc(1)) {
        st_cuda_attn_dec_set_tc(0);
        for (int i = 0; i < nL; i++) test_attn_case(Ls[i], 32, 4, 128, 1, 0, ST_TYPE_Q8_K, 0);
        test_attn_case(257, 32, 4, 64, 1, 0, ST_TYPE_Q8_K, 0);
        test_attn_case(33, 9, 3, 64, 1, 0, ST_TYPE_Q8_0, 0);
        test_attn_case(777, 32, 4, 128, 1, 7, ST_TYPE_Q8_0, 0);
    }
    st_cuda_attn_dec_set_tc(-1);
    cudaFree(g_att_ws);
    report("attn_dec (split-adaptive flash-decoding, last-block merge, fused CPU-format output quantization)");
}

// ---- attention in rope mode ----------------------------------------------------------------------------------

// st_cuda_attn_dec_ex's rope mode against st_cuda_qk_norm_rope_kv + st_cuda_attn_dec_ex on the same inputs: the output, its
// quantization and both caches bit for bit, q left unrotated. The step's own cache row starts as garbage (the rope
// mode stages it before its wait and patches it in).
static void test_attn_rope_case(int L, int n_split, int neox, int norm, int wide) {
    const int n_head = 32, n_kv = 4, hd = 128, fmt = ST_TYPE_Q8_K;
    const int64_t row = (int64_t)n_kv * hd, nq = (int64_t)n_head * hd, n_ctx = L + 37;
    if (n_split <= 0) n_split = st_cuda_attn_dec_splits(n_kv, g_ctx.sm_count);
    const size_t cb = 2 * (size_t)(n_ctx * row), rb = (size_t)st_q8_1_row_bytes(nq);
    void *kc = rand_cache(n_ctx, row, 1), *vc = rand_cache(n_ctx, row, 1);
    memset((uint16_t *)kc + (L - 1) * row, 0xff, 2 * (size_t)row);  // NaN: the own row must be written, never read
    memset((uint16_t *)vc + (L - 1) * row, 0xff, 2 * (size_t)row);
    float *q = rand_f32(nq, 1.0f), *k = rand_f32(row, 1.0f), *v = rand_f32(row, 1.0f);
    float *gain = rand_f32(hd, 0.1f);
    for (int i = 0; i < hd; i++) gain[i] += 1.0f;
    float *dqn = norm ? dup_h2d(gain, sizeof(float) * hd) : NULL, *dkn = norm ? dup_h2d(gain, sizeof(float) * hd) : NULL;
    float *cs = rope_table_h2d(n_ctx, hd, 1e6f, 1.0f);
    float *dk = dup_h2d(k, sizeof(float) * row), *dv = dup_h2d(v, sizeof(float) * row);
    const int32_t pos = L - 1;
    int32_t *dpos = dup_h2d(&pos, sizeof pos);
    const float scale = 1.0f / sqrtf((float)hd);
    float *dq[2], *dout[2];
    void *dkc[2], *dvc[2];
    uint8_t *dyq[2];
    for (int m = 0; m < 2; m++) {
        dq[m] = dup_h2d(q, sizeof(float) * nq), dout[m] = dalloc(sizeof(float) * nq), dyq[m] = dalloc(rb);
        dkc[m] = dup_h2d(kc, cb), dvc[m] = dup_h2d(vc, cb);
    }
    const st_cuda_attn_rope rp = {dk, dv, dqn, dkn, cs, 1e-6f, hd, neox};
    for (int rep = 0; rep < 2; rep++) {  // twice: the last-block counters must have been reset
        for (int m = 0; m < 2; m++) {
            poison(dout[m], sizeof(float) * nq), poison(dyq[m], rb);
            CK(cudaMemcpy(dq[m], q, sizeof(float) * nq, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dkc[m], kc, cb, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dvc[m], vc, cb, cudaMemcpyHostToDevice));
        }
        CKL(st_cuda_qk_norm_rope_kv(dq[0], dk, dv, dqn, dkn, dkc[0], dvc[0], 1, dpos, 1, n_head, n_kv, hd, hd, 1e-6f,
                                    cs, neox, 0));
        CKL(st_cuda_attn_dec_ex(dout[0], dyq[0], fmt, dq[0], dkc[0], dvc[0], 1, dpos, n_head, n_kv, hd, scale, n_split,
                                g_att_ws, NULL, wide, 0));
        CKL(st_cuda_attn_dec_ex(dout[1], dyq[1], fmt, dq[1], dkc[1], dvc[1], 1, dpos, n_head, n_kv, hd, scale,
                                n_split, g_att_ws, &rp, wide, 0));
    }
    char what[160];
    snprintf(what, sizeof what, "attn_dec rope mode L %d, grid %d, %s, %s%s", L, n_split, neox ? "neox" : "normal",
             norm ? "QK-norm" : "no norm", wide ? ", wide" : "");
    uint8_t *a = xmalloc(cb), *b = xmalloc(cb);
    struct {
        const char *name;
        void *x, *y;
        size_t n;
    } cmp[] = {{"output", dout[0], dout[1], sizeof(float) * nq},
               {"output quantization", dyq[0], dyq[1], rb},
               {"K cache", dkc[0], dkc[1], cb},
               {"V cache", dvc[0], dvc[1], cb},
               {"q (unrotated)", dq[1], NULL, sizeof(float) * nq}};
    for (size_t c = 0; c < sizeof cmp / sizeof cmp[0]; c++) {
        d2h(a, cmp[c].x, cmp[c].n);
        if (cmp[c].y) d2h(b, cmp[c].y, cmp[c].n);
        else memcpy(b, q, cmp[c].n);
        int64_t bad = 0;
        for (size_t i = 0; i < cmp[c].n; i++) bad += a[i] != b[i];
        if (bad) printf("  %s: %s: %lld bytes differ from the separate launches\n", what, cmp[c].name, (long long)bad),
            g_fail_cur++;
    }
    free(a), free(b), free(kc), free(vc), free(q), free(k), free(v), free(gain);
    for (int m = 0; m < 2; m++) cudaFree(dq[m]), cudaFree(dout[m]), cudaFree(dyq[m]), cudaFree(dkc[m]), cudaFree(dvc[m]);
    cudaFree(dk), cudaFree(dv), cudaFree(dpos), cudaFree(cs);
    if (dqn) cudaFree(dqn), cudaFree(dkn);
}

static void test_attn_rope(void) {
    if (!st_cuda_attn_dec_rope_supported(128, 128, 1)) {
        printf("  attn_dec rope mode: not supported on this device (needs the sm_90 tensor-core kernel): not tested\n");
        report("attn_dec rope mode (SKIPPED on this device)");
        return;
    }
    g_att_ws_bytes = st_cuda_attn_dec_ws_bytes(64, 64, 128, 256);
    g_att_ws = dalloc(g_att_ws_bytes);
    CK(cudaMemset(g_att_ws, 0, g_att_ws_bytes));
    st_cuda_attn_dec_set_tc(1);
    static const int Ls[] = {1, 16, 17, 128, 129, 1000, 4097, 16385};
    for (int wide = 0; wide < 2; wide++) {  // 4-warp and 8-warp blocks
        for (int i = 0; i < (g_quick ? 6 : 8); i++) test_attn_rope_case(Ls[i], 0, i % 2, 1, wide);
        test_attn_rope_case(200, 0, 1, 0, wide);  // no QK-norm (llama-style)
        test_attn_rope_case(77, 0, 0, 0, wide);
        test_attn_rope_case(777, 7, 1, 1, wide);  // uneven chunks: the own row in the last split's middle tile
        test_attn_rope_case(5000, 256, 1, 1, wide);
    }
    st_cuda_attn_dec_set_tc(-1);
    cudaFree(g_att_ws);
    report("attn_dec rope mode (QK-norm + RoPE + K/V store in the attention launch == the separate launches, bit for bit; 4 and 8 warps)");
}

// ---- PDL chain ---------------------------------------------------------------------------------------------------

#define PC_NH 8
#define PC_NKV 2
#define PC_HD 128
#define PC_E 16
#define PC_K 4
#define PC_F 256
#define PC_CTX 300
typedef struct {
    int D;
    float *x, *xn, *q, *k, *v, *attn, *ffn_out, *act, *logits, *wts, *an, *fn, *qn, *kn, *router;
    float *rope_cs;  // [PC_CTX][PC_HD] RoPE table
    int32_t *ids, *cnt, *dpos;
    uint8_t *xq, *wq, *wk, *wv, *wo, *gate, *up, *down;
    void *kc, *vc, *ws, *tbl, *aq;
    int n_split;
} pchain;

static void pc_layer(pchain *c, cudaStream_t st, int sync) {
    const int D = c->D, f = ST_TYPE_Q8_K;
    const st_cuda_dec_mat m[3] = {{ST_TYPE_Q4_K, c->wq, PC_NH * PC_HD, c->q, NULL},
                                  {ST_TYPE_Q4_K, c->wk, PC_NKV * PC_HD, c->k, NULL},
                                  {ST_TYPE_Q6_K, c->wv, PC_NKV * PC_HD, c->v, NULL}};
    const st_cuda_dec_mat mo = {ST_TYPE_Q4_K, c->wo, D, c->ffn_out, NULL};
#define PCK(call)                                                                                                  \
    do {                                                                                                           \
        CKE(call);                                                                                                 \
        if (sync) CK(cudaStreamSynchronize(st));                                                                   \
    } while (0)
    PCK(st_cuda_rmsnorm_act(NULL, c->xq, f, c->x, NULL, c->an, 1, D, 1e-6f, st));
    PCK(st_cuda_mmvq_multi(m, 3, D, c->xq, st));
    PCK(st_cuda_qk_norm_rope_kv(c->q, c->k, c->v, c->qn, c->kn, c->kc, c->vc, 1, c->dpos, 1, PC_NH, PC_NKV, PC_HD,
                                PC_HD, 1e-6f, c->rope_cs, 1, st));
    PCK(st_cuda_attn_dec(c->attn, c->xq, f, c->q, c->kc, c->vc, 1, c->dpos, PC_NH, PC_NKV, PC_HD, 0.0883883f,
                         c->n_split, c->ws, st));
    PCK(st_cuda_mmvq_multi(&mo, 1, PC_NH * PC_HD, c->xq, st));
    PCK(st_cuda_rmsnorm_act(c->xn, c->xq, f, c->x, c->ffn_out, c->fn, 1, D, 1e-6f, st));
    PCK(st_cuda_router_topk(ST_TYPE_F32, c->router, D, PC_E, c->xn, 1, PC_K, 1, c->logits, c->ids, c->wts, c->cnt, st));
    PCK(st_cuda_moe_glu(ST_TYPE_Q4_K, (const void *const *)c->tbl, PC_E, D, PC_F, c->xq, c->ids, 1, PC_K, c->act, st));
    PCK(st_cuda_moe_down_q(ST_TYPE_Q6_K, (const void *const *)c->tbl, PC_E, D, PC_F, c->act, f, c->ids, c->wts, 1,
                           PC_K, c->x, c->x, st));
#undef PCK
}

static void test_pdl_chain(void) {
    pchain c;
    memset(&c, 0, sizeof c);
    const int D = c.D = g_quick ? 512 : 2048, layers = 3;
    float *x0 = rand_f32(D, 1.0f);
    c.x = dup_h2d(x0, sizeof(float) * D);
    c.xn = dalloc(sizeof(float) * D), c.q = dalloc(sizeof(float) * PC_NH * PC_HD);
    c.k = dalloc(sizeof(float) * PC_NKV * PC_HD), c.v = dalloc(sizeof(float) * PC_NKV * PC_HD);
    c.attn = dalloc(sizeof(float) * PC_NH * PC_HD), c.ffn_out = dalloc(sizeof(float) * D);
    c.act = dalloc(sizeof(float) * PC_K * PC_F), c.logits = dalloc(sizeof(float) * PC_E);
    c.wts = dalloc(sizeof(float) * PC_K), c.ids = dalloc(sizeof(int32_t) * PC_K);
    float *h;
    h = rand_f32(D, 0.1f);
    for (int i = 0; i < D; i++) h[i] += 1.0f;
    c.an = dup_h2d(h, sizeof(float) * D), c.fn = dup_h2d(h, sizeof(float) * D);
    free(h);
    h = rand_f32(PC_HD, 0.1f);
    for (int i = 0; i < PC_HD; i++) h[i] += 1.0f;
    c.qn = dup_h2d(h, sizeof(float) * PC_HD), c.kn = dup_h2d(h, sizeof(float) * PC_HD);
    free(h);
    h = rand_f32((int64_t)PC_E * D, 0.05f);
    c.router = dup_h2d(h, sizeof(float) * PC_E * D);
    free(h);
    c.cnt = dalloc(st_cuda_dec_counters_bytes(PC_F, PC_K, 1));
    CK(cudaMemset(c.cnt, 0, st_cuda_dec_counters_bytes(PC_F, PC_K, 1)));
    const int32_t pos = 200;
    c.dpos = dup_h2d(&pos, sizeof pos);
    c.rope_cs = rope_table_h2d(PC_CTX, PC_HD, 1e6f, 1.0f);
    c.xq = dalloc((size_t)st_q8_1_row_bytes(PC_NH * PC_HD > D ? PC_NH * PC_HD : D));
    uint8_t *hw;
#define PCW(dst, type, rows, ne0) \
    (hw = rand_weights(type, rows, ne0), dst = dup_h2d(hw, st_row_size(type, ne0) * (size_t)(rows)), free(hw))
    PCW(c.wq, ST_TYPE_Q4_K, PC_NH * PC_HD, D);
    PCW(c.wk, ST_TYPE_Q4_K, PC_NKV * PC_HD, D);
    PCW(c.wv, ST_TYPE_Q6_K, PC_NKV * PC_HD, D);
    PCW(c.wo, ST_TYPE_Q4_K, D, PC_NH * PC_HD);
    PCW(c.gate, ST_TYPE_Q4_K, PC_E * PC_F, D);
    PCW(c.up, ST_TYPE_Q4_K, PC_E * PC_F, D);
    PCW(c.down, ST_TYPE_Q6_K, PC_E * D, PC_F);
#undef PCW
    const void *tb[PC_E * 3];
    for (int e = 0; e < PC_E; e++) {
        tb[3 * e] = c.gate + (size_t)e * PC_F * st_row_size(ST_TYPE_Q4_K, D);
        tb[3 * e + 1] = c.up + (size_t)e * PC_F * st_row_size(ST_TYPE_Q4_K, D);
        tb[3 * e + 2] = c.down + (size_t)e * D * st_row_size(ST_TYPE_Q6_K, PC_F);
    }
    c.tbl = dup_h2d(tb, sizeof tb);
    void *kc0 = rand_cache(PC_CTX, PC_NKV * PC_HD, 1), *vc0 = rand_cache(PC_CTX, PC_NKV * PC_HD, 1);
    const size_t kvb = (size_t)PC_CTX * PC_NKV * PC_HD * 2;
    c.kc = dup_h2d(kc0, kvb), c.vc = dup_h2d(vc0, kvb);
    c.n_split = st_cuda_attn_dec_splits(PC_NKV, g_ctx.sm_count);
    const size_t wsb = st_cuda_attn_dec_ws_bytes(PC_NH, PC_NKV, PC_HD, c.n_split);
    c.ws = dalloc(wsb);
    CK(cudaMemset(c.ws, 0, wsb));
    c.aq = dalloc((size_t)st_q8_1_row_bytes(PC_F) * PC_K);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    // Reference: no PDL, synchronised after every launch.
    st_cuda_dec_set_pdl(0);
    for (int l = 0; l < layers; l++) pc_layer(&c, st, 1);
    float *ref = xmalloc(sizeof(float) * D), *got = xmalloc(sizeof(float) * D);
    d2h(ref, c.x, sizeof(float) * D);
    // PDL launches in a captured graph, replayed three times from the same start.
    st_cuda_dec_set_pdl(1);
    printf("  pdl chain: PDL %s on this device\n", st_cuda_dec_pdl() ? "used" : "NOT used (below sm_90)");
    {
        const char *how = "four-launch FFN";
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        for (int l = 0; l < layers; l++) pc_layer(&c, st, 0);
        CK(cudaStreamEndCapture(st, &graph));
        CK(cudaGraphInstantiate(&exec, graph, 0));
        for (int rep = 0; rep < 3; rep++) {
            CK(cudaMemcpyAsync(c.x, x0, sizeof(float) * D, cudaMemcpyHostToDevice, st));
            CK(cudaGraphLaunch(exec, st));
            CK(cudaStreamSynchronize(st));
            d2h(got, c.x, sizeof(float) * D);
            int64_t bad = 0;
            for (int i = 0; i < D; i++) bad += memcmp(&got[i], &ref[i], sizeof(float)) != 0;
            if (bad) {
                printf("  pdl chain (%s) replay %d: %lld of %d residual values differ from the eager run (x[0] %.8g "
                       "vs %.8g)\n", how, rep, (long long)bad, D, got[0], ref[0]);
                g_fail_cur++;
            }
        }
        // And eager PDL launches without synchronisation.
        CK(cudaMemcpyAsync(c.x, x0, sizeof(float) * D, cudaMemcpyHostToDevice, st));
        for (int l = 0; l < layers; l++) pc_layer(&c, st, 0);
        CK(cudaStreamSynchronize(st));
        d2h(got, c.x, sizeof(float) * D);
        if (memcmp(got, ref, sizeof(float) * D)) {
            printf("  pdl chain (%s, eager PDL launches): the residual stream differs from the synchronised run\n", how);
            g_fail_cur++;
        }
        CK(cudaGraphExecDestroy(exec));
        CK(cudaGraphDestroy(graph));
    }
    CK(cudaStreamDestroy(st));
    free(x0), free(kc0), free(vc0), free(ref), free(got);
    void *bufs[] = {c.x, c.xn, c.q, c.k, c.v, c.attn, c.ffn_out, c.act, c.logits, c.wts, c.an, c.fn, c.qn, c.kn,
                    c.router, c.ids, c.cnt, c.dpos, c.xq, c.wq, c.wk, c.wv, c.wo, c.gate, c.up, c.down, c.kc, c.vc,
                    c.ws, c.tbl, c.aq, c.rope_cs};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) cudaFree(bufs[i]);
    report("pdl chain (fused layer x3 in a CUDA graph with PDL launches == synchronised eager run, bit for bit)");
}

int main(int argc, char **argv) {
    if (gpu_test_args(argc, argv, &g_quick, NULL)) return 2;
    g_seed = gpu_test_seed(20);
    printf("test_gpu_decode: seed %llu%s\n", (unsigned long long)g_seed, g_quick ? " (quick)" : "");
    st_rng_init(&g_rng, g_seed, 0);
    if (st_cuda_device_count() <= 0) {
        fprintf(stderr, "no CUDA device: %s\n", st_errmsg());
        return 2;
    }
    if (st_cuda_init(&g_ctx, 0, 1, 0)) {
        fprintf(stderr, "st_cuda_init: %s\n", st_errmsg());
        return 2;
    }
    printf("device: %s, %d SMs\n", g_ctx.name, g_ctx.sm_count);
    test_rmsnorm_act();
    test_sum4();
    test_mmvq_multi();
    test_router();
    test_router_norm();
    test_router_fold();
    test_moe();
    test_route_glu();
    test_route_fast();
    g_pool = st_pool_create(0);
    test_attn_dec();
    test_attn_rope();
    test_pdl_chain();
    st_pool_destroy(g_pool);
    st_cuda_destroy(&g_ctx);
    if (g_fail_total) {
        printf("FAILED: %d checks (seed %llu; rerun with STRATA_SEED=%llu)\n", g_fail_total, (unsigned long long)g_seed,
               (unsigned long long)g_seed);
        return 1;
    }
    printf("ALL PASS (seed %llu)\n", (unsigned long long)g_seed);
    return 0;
}
