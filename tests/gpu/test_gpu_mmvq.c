// GPU parity and bandwidth test of the decode matrix-vector kernels (src/cuda/mmvq.h).
//
// For every supported weight type, n_tok in {1, 2, 3, 8} and several shapes, on fresh random weights and
// activations (seed printed; STRATA_SEED overrides):
//   - the GPU q8_1 quantizer: each dequantized activation within half a step of its input, s = d * sum(q);
//   - st_cuda_mmvq against an exact host emulation (cuda/qblock.h item dots on the GPU's own quantized
//     activations, summed in double): catches any indexing/reduction bug with a tight bound; once with the q8_1
//     rows and once with the engine's activation format for the type (st_cuda_act_format: Q8_K rows for the K
//     and IQ types, what every multi-token decode step feeds it);
//   - st_cuda_mmvq against st_cpu_matmul (independent CPU path with its own activation quantization):
//     relative L2 error within a per-type bound;
// outputs are poisoned with NaN before every launch so unwritten elements fail. The expert-indexed variants
// (st_cuda_mmvq_ids, st_cuda_mmvq_ids_glu) are checked the same way, including an out-of-range id (NaN rows).
// Then a timing section (informational, not pass/fail) reports GB/s against 4.4 TB/s H200 HBM.
// Usage: test_gpu_mmvq [--quick] [--no-timing]   (--quick: small shapes, for compute-sanitizer)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/matmul.h"
#include "cuda/mmvq.h"
#include "cuda/qblock.h"
#include "cuda/quantize_act.h"
#include "cuda/runtime.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/pool.h"
#include "util/rng.h"

#include "gpu_test_util.h"

static const int k_types[] = {ST_QB_TYPES};
#define N_TYPES ((int)(sizeof(k_types) / sizeof(k_types[0])))

static uint64_t g_seed;
static int g_fail, g_checks;
static st_cuda_ctx g_ctx;
static st_pool *g_pool;
static st_cpu_scratch g_scratch;

#define DIE(...)                                                                   \
    do {                                                                           \
        fprintf(stderr, "test_gpu_mmvq: fatal: " __VA_ARGS__);                     \
        fprintf(stderr, ": %s (seed %llu)\n", st_errmsg(), (unsigned long long)g_seed); \
        exit(2);                                                                   \
    } while (0)
#define CK(call)                                  \
    do {                                          \
        if ((call) != 0) DIE("%s", #call);        \
    } while (0)

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "test_gpu_mmvq: out of host memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

// Relative L2 bound against st_cpu_matmul. Both sides quantize activations to 8 bits (the CPU to Q8_0/Q8_1 over
// 32 or Q8_K over 256 elements, or not at all for float weights), so they differ by ~0.5-1.5% of |y|. A ratio over
// few outputs spreads wider (Q3_K 256 x 33, one token: 3.64% once, seed 5473584391027), so those get 1.5x; the
// exact check is the emulation's.
static double cpu_bound(int type, size_t n_outputs) {
    return (ST_QB_IS_FLOAT(type) ? 0.02 : 0.035) * (n_outputs < 128 ? 1.5 : 1.0);
}

// Host emulation of the kernel: per output, sum of st_qb_dot over items using the GPU's quantized activations.
typedef struct emul_job {
    int type;
    const uint8_t *W;       // weights of the matrix (row r at W + r * row_bytes)
    size_t row_bytes;
    int nitems;
    const uint8_t *xq;      // host copy of quantized rows
    size_t xq_stride;
    const int *xrows;       // activation row per output column t
    int n_cols;             // tokens (or 1)
    int n_out;
    double *y, *mag;        // [n_cols][n_out]
} emul_job;

static void emul_task(void *ud, int64_t r, int thread) {
    (void)thread;
    const emul_job *j = ud;
    const int ipb = ST_QB_IPB(j->type), ts = ST_QB_TSIZE(j->type);
    const uint8_t *row = j->W + (size_t)r * j->row_bytes;
    for (int t = 0; t < j->n_cols; t++) {
        const uint8_t *xr = j->xq + (size_t)j->xrows[t] * j->xq_stride;
        const float *ds = (const float *)(xr + (size_t)j->nitems * 32);
        double s = 0, m = 0;
        for (int it = 0; it < j->nitems; it++) {
            int32_t q[8];
            memcpy(q, xr + (size_t)it * 32, 32);
            const float v = st_qb_dot(j->type, row + (size_t)(it / ipb) * ts, it % ipb, q, ds[2 * it], ds[2 * it + 1]);
            s += v;
            m += fabs(v);
        }
        j->y[(size_t)t * j->n_out + r] = s;
        j->mag[(size_t)t * j->n_out + r] = m;
    }
}

typedef struct cmp_result {
    size_t n;         // outputs compared
    double rel_cpu;   // ||y - y_cpu|| / ||y_cpu||
    double emul_err;  // max |y - y_emul| / (mag + tiny)
    int nonfinite;
} cmp_result;

static void compare(const float *y, const float *y_cpu, const double *y_em, const double *mag, size_t n,
                    cmp_result *res) {
    double num = 0, den = 0, worst = 0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(y[i])) {
            bad++;
            continue;
        }
        num += ((double)y[i] - y_cpu[i]) * ((double)y[i] - y_cpu[i]);
        den += (double)y_cpu[i] * y_cpu[i];
        const double e = fabs((double)y[i] - y_em[i]) / (mag[i] + 1e-30);
        if (e > worst) worst = e;
    }
    res->n = n;
    res->rel_cpu = den > 0 ? sqrt(num / den) : sqrt(num);
    res->emul_err = worst;
    res->nonfinite = bad;
}

static int report(const char *what, int type, const cmp_result *r) {
    const double bc = cpu_bound(type, r->n), be = 2e-5;
    const int ok = r->nonfinite == 0 && r->rel_cpu <= bc && r->emul_err <= be;
    g_checks++;
    if (!ok) g_fail++;
    if (!ok || getenv("STRATA_VERBOSE"))
        printf("  %s %-8s %-34s rel_cpu %.2e (<= %.2g)  emul %.2e (<= %.0e)  nonfinite %d\n", ok ? "ok  " : "FAIL",
               st_type_name(type), what, r->rel_cpu, bc, r->emul_err, be, r->nonfinite);
    return ok;
}

// Checks the GPU quantizer output (host copy) against x.
static int check_quant(const float *x, const uint8_t *xq, int n_tok, int ne0) {
    const size_t stride = (size_t)st_q8_1_row_bytes(ne0);
    const int nb = ne0 / 32;
    int bad = 0;
    for (int t = 0; t < n_tok; t++) {
        const uint8_t *row = xq + t * stride;
        const float *ds = (const float *)(row + (size_t)nb * 32);
        for (int b = 0; b < nb; b++) {
            const float d = ds[2 * b];
            int sum = 0;
            for (int i = 0; i < 32; i++) {
                const int q = (int8_t)row[b * 32 + i];
                sum += q;
                const float xv = x[(size_t)t * ne0 + b * 32 + i];
                if (!(fabsf(d * q - xv) <= 0.5f * d * 1.01f + 1e-30f)) bad++;
            }
            if (!(fabsf(ds[2 * b + 1] - d * sum) <= 1e-5f * fabsf(d) * 32 * 127)) bad++;
        }
    }
    g_checks++;
    if (bad) {
        g_fail++;
        printf("  FAIL quantize_q8_1 n_tok %d ne0 %d: %d bad values\n", n_tok, ne0, bad);
    }
    return bad == 0;
}

static void fill_random_weights(int type, void *dst, int64_t n_elems, st_rng *r) {
    const st_type_info *ti = st_type_get(type);
    CK(st_random_blocks(type, dst, n_elems / ti->block_size, 1.0f, r));
}

// One plain-mode case: W [n_out, ne0] random, n_tok activation rows, quantized by the GPU's q8_1 quantizer (fmt
// -1) or in a CPU activation format (fmt = st_cuda_act_format(type): what the engine's decode uses; the planar
// layout is the same, only the scales' rule differs, so the exact emulation applies unchanged).
static void test_plain_fmt(int type, int ne0, int n_out, int n_tok, int fmt, st_rng *r) {
    const size_t row_bytes = st_row_size(type, ne0), wbytes = row_bytes * (size_t)n_out;
    const size_t xq_stride = (size_t)st_q8_1_row_bytes(ne0);
    uint8_t *W = xmalloc(wbytes);
    fill_random_weights(type, W, (int64_t)ne0 * n_out, r);
    float *x = xmalloc(sizeof(float) * (size_t)n_tok * ne0);
    for (size_t i = 0; i < (size_t)n_tok * ne0; i++) x[i] = st_rng_normal(r) * ((i % 61) == 0 ? 6.0f : 1.0f);
    const size_t ny = (size_t)n_tok * n_out;
    float *y = xmalloc(sizeof(float) * ny), *y_cpu = xmalloc(sizeof(float) * ny);
    double *y_em = xmalloc(sizeof(double) * ny), *mag = xmalloc(sizeof(double) * ny);
    uint8_t *xq = xmalloc(xq_stride * n_tok);

    void *dW = st_cuda_alloc(&g_ctx, wbytes, "W"), *dxq = st_cuda_alloc(&g_ctx, xq_stride * n_tok, "xq");
    float *dx = st_cuda_alloc(&g_ctx, sizeof(float) * (size_t)n_tok * ne0, "x");
    float *dy = st_cuda_alloc(&g_ctx, sizeof(float) * ny, "y");
    if (!dW || !dxq || !dx || !dy) DIE("device alloc");
    CK(st_cuda_memcpy_h2d(&g_ctx, dW, W, wbytes, NULL));
    CK(st_cuda_memcpy_h2d(&g_ctx, dx, x, sizeof(float) * (size_t)n_tok * ne0, NULL));
    CK(st_cuda_memset(&g_ctx, dxq, 0xff, xq_stride * n_tok, NULL));
    CK(st_cuda_memset(&g_ctx, dy, 0xff, sizeof(float) * ny, NULL));  // NaN poison
    cudaStream_t s = g_ctx.streams[0];
    if (fmt < 0) CK(st_cuda_quantize_q8_1(&g_ctx, dx, dxq, n_tok, ne0, s));
    else CK(st_cuda_quantize_act(&g_ctx, fmt, dx, dxq, n_tok, ne0, s));
    CK(st_cuda_mmvq(&g_ctx, type, dW, ne0, n_out, dxq, n_tok, dy, s));
    CK(st_cuda_sync(&g_ctx, s));
    CK(st_cuda_memcpy_d2h(&g_ctx, y, dy, sizeof(float) * ny, NULL));
    CK(st_cuda_memcpy_d2h(&g_ctx, xq, dxq, xq_stride * n_tok, NULL));
    if (fmt < 0) check_quant(x, xq, n_tok, ne0);  // (the q8_1 rule; the CPU formats: test_gpu_decode)

    CK(st_cpu_matmul(g_pool, type, W, ne0, n_out, x, n_tok, y_cpu, &g_scratch));
    int xrows[ST_MMVQ_MAX_TOK];
    for (int t = 0; t < n_tok; t++) xrows[t] = t;
    emul_job j = {type, W, row_bytes, ne0 / 32, xq, xq_stride, xrows, n_tok, n_out, y_em, mag};
    st_pool_run(g_pool, n_out, emul_task, &j);
    cmp_result res;
    compare(y, y_cpu, y_em, mag, ny, &res);
    char what[64];
    snprintf(what, sizeof what, "mmvq %dx%d n_tok %d%s", ne0, n_out, n_tok, fmt < 0 ? "" : " cpu-act");
    report(what, type, &res);

    st_cuda_free(&g_ctx, dW);
    st_cuda_free(&g_ctx, dxq);
    st_cuda_free(&g_ctx, dx);
    st_cuda_free(&g_ctx, dy);
    free(W), free(x), free(y), free(y_cpu), free(y_em), free(mag), free(xq);
}

static void test_plain(int type, int ne0, int n_out, int n_tok, st_rng *r) {
    test_plain_fmt(type, ne0, n_out, n_tok, -1, r);
    // The engine's activation format for this type too (Q8_K rows for the K and IQ types: the decode path of
    // every multi-token step), where the shape allows it.
    const int fmt = st_cuda_act_format(type);
    if (fmt >= 0 && (fmt != ST_TYPE_Q8_K || ne0 % 256 == 0)) test_plain_fmt(type, ne0, n_out, n_tok, fmt, r);
}

// One token through the staged kernel (rows copied to shared memory first) against the direct one: bit for bit.
// n_out is large enough for one warp per row (the staged kernel's condition) and leaves a partial last block.
static void test_staged(int type, int ne0, int n_out, st_rng *r) {
    const size_t row_bytes = st_row_size(type, ne0), wbytes = row_bytes * (size_t)n_out;
    const size_t xq_stride = (size_t)st_q8_1_row_bytes(ne0);
    uint8_t *W = xmalloc(wbytes);
    fill_random_weights(type, W, (int64_t)ne0 * n_out, r);
    float *x = xmalloc(sizeof(float) * (size_t)ne0);
    for (int i = 0; i < ne0; i++) x[i] = st_rng_normal(r);
    float *y[2] = {xmalloc(sizeof(float) * (size_t)n_out), xmalloc(sizeof(float) * (size_t)n_out)};
    void *dW = st_cuda_alloc(&g_ctx, wbytes, "W"), *dxq = st_cuda_alloc(&g_ctx, xq_stride, "xq");
    float *dx = st_cuda_alloc(&g_ctx, sizeof(float) * (size_t)ne0, "x");
    float *dy = st_cuda_alloc(&g_ctx, sizeof(float) * (size_t)n_out, "y");
    if (!dW || !dxq || !dx || !dy) DIE("device alloc");
    cudaStream_t s = g_ctx.streams[0];
    CK(st_cuda_memcpy_h2d(&g_ctx, dW, W, wbytes, NULL));
    CK(st_cuda_memcpy_h2d(&g_ctx, dx, x, sizeof(float) * (size_t)ne0, NULL));
    CK(st_cuda_quantize_q8_1(&g_ctx, dx, dxq, 1, ne0, s));
    for (int v = 0; v < 2; v++) {
        st_cuda_mmvq_set_staging(v == 0);
        CK(st_cuda_memset(&g_ctx, dy, 0xff, sizeof(float) * (size_t)n_out, s));  // NaN poison
        CK(st_cuda_mmvq(&g_ctx, type, dW, ne0, n_out, dxq, 1, dy, s));
        CK(st_cuda_sync(&g_ctx, s));
        CK(st_cuda_memcpy_d2h(&g_ctx, y[v], dy, sizeof(float) * (size_t)n_out, NULL));
    }
    st_cuda_mmvq_set_staging(-1);
    int bad = 0, first = -1;
    for (int i = 0; i < n_out; i++)
        if (memcmp(&y[0][i], &y[1][i], sizeof(float)) || y[0][i] != y[0][i]) {
            if (first < 0) first = i;
            bad++;
        }
    g_checks++;
    if (bad) {
        g_fail++;
        printf("FAIL staged mmvq %s %dx%d: %d of %d outputs differ from the direct kernel (first row %d: %.9g vs "
               "%.9g)\n", st_type_name(type), ne0, n_out, bad, n_out, first, y[0][first], y[1][first]);
    }
    st_cuda_free(&g_ctx, dW);
    st_cuda_free(&g_ctx, dxq);
    st_cuda_free(&g_ctx, dx);
    st_cuda_free(&g_ctx, dy);
    free(W), free(x), free(y[0]), free(y[1]);
}

// Expert-indexed case: stack of n_expert matrices [n_out, ne0]; n_tok tokens x n_slot slots selected.
// glu: gate and up stacks, y = silu(gate) * up. per_pair_x: activations are per pair (xrow NULL), as for down.
static void test_ids(int type, int ne0, int n_out, int n_expert, int n_tok, int n_slot, int glu, int per_pair_x,
                     st_rng *r) {
    const int n_sel = n_tok * n_slot, n_xrows = per_pair_x ? n_sel : n_tok;
    const size_t row_bytes = st_row_size(type, ne0), ebytes = row_bytes * (size_t)n_out;
    const size_t wbytes = ebytes * (size_t)n_expert, xq_stride = (size_t)st_q8_1_row_bytes(ne0);
    uint8_t *W = xmalloc(wbytes), *W2 = glu ? xmalloc(wbytes) : NULL;
    fill_random_weights(type, W, (int64_t)ne0 * n_out * n_expert, r);
    if (glu) fill_random_weights(type, W2, (int64_t)ne0 * n_out * n_expert, r);
    float *x = xmalloc(sizeof(float) * (size_t)n_xrows * ne0);
    for (size_t i = 0; i < (size_t)n_xrows * ne0; i++) x[i] = st_rng_normal(r);
    int32_t ids[64], xrow[64];
    for (int t = 0; t < n_tok; t++)
        for (int k = 0; k < n_slot; k++) {
            int e, dup;
            do {  // distinct experts per token, as a router picks them
                e = (int)st_rng_below(r, (uint32_t)n_expert);
                dup = 0;
                for (int k2 = 0; k2 < k; k2++) dup |= ids[t * n_slot + k2] == e;
            } while (dup);
            ids[t * n_slot + k] = e;
            xrow[t * n_slot + k] = t;
        }
    const int bad_pair = n_sel > 2 ? 1 : -1;  // one pair gets an invalid id: its outputs must be NaN
    int32_t ids_dev_host[64];
    memcpy(ids_dev_host, ids, sizeof ids);
    if (bad_pair >= 0) ids_dev_host[bad_pair] = n_expert + 3;

    const size_t ny = (size_t)n_sel * n_out;
    float *y = xmalloc(sizeof(float) * ny), *y_cpu = xmalloc(sizeof(float) * ny);
    float *g_cpu = xmalloc(sizeof(float) * n_out), *u_cpu = xmalloc(sizeof(float) * n_out);
    double *y_em = xmalloc(sizeof(double) * ny), *mag = xmalloc(sizeof(double) * ny);
    double *u_em = xmalloc(sizeof(double) * n_out), *u_mag = xmalloc(sizeof(double) * n_out);
    uint8_t *xq = xmalloc(xq_stride * n_xrows);

    void *dW = st_cuda_alloc(&g_ctx, wbytes, "W"), *dW2 = glu ? st_cuda_alloc(&g_ctx, wbytes, "W2") : NULL;
    void *dxq = st_cuda_alloc(&g_ctx, xq_stride * n_xrows, "xq");
    float *dx = st_cuda_alloc(&g_ctx, sizeof(float) * (size_t)n_xrows * ne0, "x");
    float *dy = st_cuda_alloc(&g_ctx, sizeof(float) * ny, "y");
    int32_t *dids = st_cuda_alloc(&g_ctx, sizeof(int32_t) * n_sel, "ids");
    int32_t *dxrow = st_cuda_alloc(&g_ctx, sizeof(int32_t) * n_sel, "xrow");
    if (!dW || (glu && !dW2) || !dxq || !dx || !dy || !dids || !dxrow) DIE("device alloc");
    CK(st_cuda_memcpy_h2d(&g_ctx, dW, W, wbytes, NULL));
    if (glu) CK(st_cuda_memcpy_h2d(&g_ctx, dW2, W2, wbytes, NULL));
    CK(st_cuda_memcpy_h2d(&g_ctx, dx, x, sizeof(float) * (size_t)n_xrows * ne0, NULL));
    CK(st_cuda_memcpy_h2d(&g_ctx, dids, ids_dev_host, sizeof(int32_t) * n_sel, NULL));
    CK(st_cuda_memcpy_h2d(&g_ctx, dxrow, xrow, sizeof(int32_t) * n_sel, NULL));
    CK(st_cuda_memset(&g_ctx, dy, 0xff, sizeof(float) * ny, NULL));
    cudaStream_t s = g_ctx.streams[0];
    CK(st_cuda_quantize_q8_1(&g_ctx, dx, dxq, n_xrows, ne0, s));
    if (glu)
        CK(st_cuda_mmvq_ids_glu(&g_ctx, type, dW, dW2, ne0, n_out, n_expert, dxq, n_xrows, dids,
                                per_pair_x ? NULL : dxrow, n_sel, dy, s));
    else
        CK(st_cuda_mmvq_ids(&g_ctx, type, dW, ne0, n_out, n_expert, dxq, n_xrows, dids, per_pair_x ? NULL : dxrow,
                            n_sel, dy, s));
    CK(st_cuda_sync(&g_ctx, s));
    CK(st_cuda_memcpy_d2h(&g_ctx, y, dy, sizeof(float) * ny, NULL));
    CK(st_cuda_memcpy_d2h(&g_ctx, xq, dxq, xq_stride * n_xrows, NULL));

    // References per pair.
    int nan_ok = 1;
    for (int p = 0; p < n_sel; p++) {
        const int e = ids[p], xr = per_pair_x ? p : xrow[p];
        float *yp = y_cpu + (size_t)p * n_out;
        if (p == bad_pair) {
            for (int i = 0; i < n_out; i++) {
                nan_ok &= isnan(y[(size_t)p * n_out + i]);
                y[(size_t)p * n_out + i] = 0, yp[i] = 0, y_em[(size_t)p * n_out + i] = 0, mag[(size_t)p * n_out + i] = 1;
            }
            continue;
        }
        const float *xp = x + (size_t)xr * ne0;
        emul_job j = {type, W + (size_t)e * ebytes, row_bytes, ne0 / 32, xq, xq_stride, &xr, 1, n_out,
                      y_em + (size_t)p * n_out, mag + (size_t)p * n_out};
        st_pool_run(g_pool, n_out, emul_task, &j);
        if (!glu) {
            CK(st_cpu_matmul(g_pool, type, W + (size_t)e * ebytes, ne0, n_out, xp, 1, yp, &g_scratch));
        } else {
            CK(st_cpu_matmul(g_pool, type, W + (size_t)e * ebytes, ne0, n_out, xp, 1, g_cpu, &g_scratch));
            CK(st_cpu_matmul(g_pool, type, W2 + (size_t)e * ebytes, ne0, n_out, xp, 1, u_cpu, &g_scratch));
            emul_job j2 = {type, W2 + (size_t)e * ebytes, row_bytes, ne0 / 32, xq, xq_stride, &xr, 1, n_out, u_em, u_mag};
            st_pool_run(g_pool, n_out, emul_task, &j2);
            for (int i = 0; i < n_out; i++) {
                const double g = y_em[(size_t)p * n_out + i], u = u_em[i];
                const double sg = g / (1 + exp(-g));
                // Error of silu(g) * u from errors in g and u (|d silu/dg| <= 1.1): scale the magnitudes.
                mag[(size_t)p * n_out + i] = 1.1 * mag[(size_t)p * n_out + i] * fabs(u) + fabs(sg) * u_mag[i] + 1e-20;
                y_em[(size_t)p * n_out + i] = sg * u;
                yp[i] = g_cpu[i] / (1.0f + expf(-g_cpu[i])) * u_cpu[i];
            }
        }
    }
    cmp_result res;
    compare(y, y_cpu, y_em, mag, ny, &res);
    char what[96];
    snprintf(what, sizeof what, "%s %dx%dx%d sel %dx%d%s", glu ? "ids_glu" : "ids", ne0, n_out, n_expert, n_tok, n_slot,
             per_pair_x ? " per-pair x" : "");
    report(what, type, &res);
    g_checks++;
    if (!nan_ok) {
        g_fail++;
        printf("  FAIL %-8s %s: pair with an out-of-range expert id was not NaN\n", st_type_name(type), what);
    }

    st_cuda_free(&g_ctx, dW), st_cuda_free(&g_ctx, dW2), st_cuda_free(&g_ctx, dxq), st_cuda_free(&g_ctx, dx);
    st_cuda_free(&g_ctx, dy), st_cuda_free(&g_ctx, dids), st_cuda_free(&g_ctx, dxrow);
    free(W), free(W2), free(x), free(y), free(y_cpu), free(g_cpu), free(u_cpu), free(y_em), free(mag), free(u_em);
    free(u_mag), free(xq);
}

// Argument errors must be reported, not launched.
static void test_errors(void) {
    float *dy = st_cuda_alloc(&g_ctx, 4096, "y");
    void *dW = st_cuda_alloc(&g_ctx, 1 << 20, "W"), *dxq = st_cuda_alloc(&g_ctx, 1 << 16, "xq");
    if (!dy || !dW || !dxq) DIE("alloc");
    int bad = 0;
    bad += st_cuda_mmvq(&g_ctx, ST_TYPE_Q4_K, dW, 100, 8, dxq, 1, dy, NULL) == 0;       // ne0 not a multiple of 256
    bad += st_cuda_mmvq(&g_ctx, ST_TYPE_Q4_K, dW, 256, 8, dxq, 9, dy, NULL) == 0;       // n_tok > 8
    bad += st_cuda_mmvq(&g_ctx, ST_TYPE_TQ1_0, dW, 256, 8, dxq, 1, dy, NULL) == 0;      // unsupported type
    bad += st_cuda_mmvq(&g_ctx, ST_TYPE_Q8_0, (char *)dW + 2, 256, 8, dxq, 1, dy, NULL) == 0;  // misaligned
    const int oom = st_cuda_alloc(&g_ctx, (size_t)1 << 50, "huge") == NULL && strstr(st_errmsg(), "free") != NULL;
    if (!oom) printf("  FAIL out-of-memory message lacks needed/free sizes: %s\n", st_errmsg());
    g_checks += 2;
    if (bad || !oom) g_fail++;
    if (bad) printf("  FAIL %d invalid calls were accepted\n", bad);
    st_cuda_free(&g_ctx, dy), st_cuda_free(&g_ctx, dW), st_cuda_free(&g_ctx, dxq);
}

// ---------------------------------------------------------------------------------------------------------------
// Timing: HBM bandwidth. Weight sets rotate so the working set exceeds L2 and reads come from HBM.

static double time_loop(cudaEvent_t e0, cudaEvent_t e1, int iters) {
    float ms = 0;
    CK(st_cuda_check_at(cudaEventSynchronize(e1), "cudaEventSynchronize", __FILE__, __LINE__));
    CK(st_cuda_check_at(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime", __FILE__, __LINE__));
    (void)iters;
    return ms * 1e-3;
}

static void timing(st_rng *r) {
    const int types[] = {ST_TYPE_Q4_K, ST_TYPE_Q6_K, ST_TYPE_Q8_0, ST_TYPE_IQ3_S, ST_TYPE_IQ1_M};
    const double hbm = 4400.0;  // GB/s, H200 roofline used by the P3 target
    printf("timing (informational; GB/s of weight bytes read; %% of %.0f GB/s):\n", hbm);
    cudaStream_t s = g_ctx.streams[0];
    cudaEvent_t e0, e1;
    CK(st_cuda_check_at(cudaEventCreate(&e0), "cudaEventCreate", __FILE__, __LINE__));
    CK(st_cuda_check_at(cudaEventCreate(&e1), "cudaEventCreate", __FILE__, __LINE__));
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const int type = types[ti];
        // Expert stack [2048, 768, 128] (Qwen3-30B-A3B gate/up shape); one random expert copied to all.
        const int ne0 = 2048, n_out = 768, n_expert = 128;
        const size_t rb = st_row_size(type, ne0), eb = rb * n_out, wb = eb * n_expert;
        uint8_t *W1 = xmalloc(eb);
        fill_random_weights(type, W1, (int64_t)ne0 * n_out, r);
        uint8_t *dW = st_cuda_alloc(&g_ctx, wb, "timing stack"), *dW2 = st_cuda_alloc(&g_ctx, wb, "timing stack 2");
        void *dxq = st_cuda_alloc(&g_ctx, (size_t)st_q8_1_row_bytes(4096) * 8, "xq");
        float *dx = st_cuda_alloc(&g_ctx, sizeof(float) * 4096 * 8, "x");
        float *dy = st_cuda_alloc(&g_ctx, sizeof(float) * (size_t)n_out * n_expert, "y");
        int32_t *dids = st_cuda_alloc(&g_ctx, sizeof(int32_t) * n_expert, "ids");
        if (!dW || !dW2 || !dxq || !dx || !dy || !dids) DIE("timing alloc");
        for (int e = 0; e < n_expert; e++) CK(st_cuda_memcpy_h2d(&g_ctx, dW + e * eb, W1, eb, NULL));
        CK(st_cuda_check_at(cudaMemcpy(dW2, dW, wb, cudaMemcpyDeviceToDevice), "cudaMemcpy", __FILE__, __LINE__));
        float *x = xmalloc(sizeof(float) * 4096 * 8);
        for (int i = 0; i < 4096 * 8; i++) x[i] = st_rng_normal(r);
        CK(st_cuda_memcpy_h2d(&g_ctx, dx, x, sizeof(float) * 4096 * 8, NULL));
        CK(st_cuda_quantize_q8_1(&g_ctx, dx, dxq, 8, 2048, s));
        int32_t perm[128];
        for (int e = 0; e < n_expert; e++) perm[e] = e;
        for (int e = n_expert - 1; e > 0; e--) {
            const int k = (int)st_rng_below(r, (uint32_t)e + 1), t = perm[e];
            perm[e] = perm[k], perm[k] = t;
        }
        CK(st_cuda_memcpy_h2d(&g_ctx, dids, perm, sizeof perm, NULL));
        const int iters = 320;
        // (a) 8 selected experts per call, rotating through all 128 (16 distinct sets, 113 MB for Q4_K > L2).
        for (int glu = 0; glu < 2; glu++) {
            for (int it = 0; it < 16; it++) {  // warm-up
                if (glu) CK(st_cuda_mmvq_ids_glu(&g_ctx, type, dW, dW2, ne0, n_out, n_expert, dxq, 8, dids + (it % 16) * 8, NULL, 8, dy, s));
                else CK(st_cuda_mmvq_ids(&g_ctx, type, dW, ne0, n_out, n_expert, dxq, 8, dids + (it % 16) * 8, NULL, 8, dy, s));
            }
            cudaEventRecord(e0, s);
            for (int it = 0; it < iters; it++) {
                const int32_t *ids = dids + (it % 16) * 8;
                int rc = glu ? st_cuda_mmvq_ids_glu(&g_ctx, type, dW, dW2, ne0, n_out, n_expert, dxq, 8, ids, NULL, 8, dy, s)
                             : st_cuda_mmvq_ids(&g_ctx, type, dW, ne0, n_out, n_expert, dxq, 8, ids, NULL, 8, dy, s);
                if (rc) DIE("timing launch");
            }
            cudaEventRecord(e1, s);
            const double sec = time_loop(e0, e1, iters) / iters, bytes = (double)eb * 8 * (glu ? 2 : 1);
            printf("  %-7s %-44s %8.2f us  %7.0f GB/s  %5.1f%%\n", st_type_name(type),
                   glu ? "ids_glu 2048x768, 8 of 128 experts (x2)" : "ids 2048x768, 8 of 128 experts", sec * 1e6,
                   bytes / sec / 1e9, 100 * bytes / sec / 1e9 / hbm);
        }
        // (b) the whole stack as one 2048 x 98304 matrix (steady-state streaming).
        {
            const int rows = n_out * n_expert;
            CK(st_cuda_mmvq(&g_ctx, type, dW, ne0, rows, dxq, 1, dy, s));
            cudaEventRecord(e0, s);
            for (int it = 0; it < 20; it++) CK(st_cuda_mmvq(&g_ctx, type, dW, ne0, rows, dxq, 1, dy, s));
            cudaEventRecord(e1, s);
            const double sec = time_loop(e0, e1, 20) / 20;
            printf("  %-7s %-44s %8.2f us  %7.0f GB/s  %5.1f%%\n", st_type_name(type), "mmvq 2048x98304 n_tok 1", sec * 1e6,
                   (double)wb / sec / 1e9, 100 * (double)wb / sec / 1e9 / hbm);
        }
        // (c) 4096 x 2048 (dense-layer shape), rotating over copies in the stack memory (> L2).
        {
            const size_t mb = st_row_size(type, 4096) * 2048;
            const int copies = (int)(wb / mb);
            CK(st_cuda_quantize_q8_1(&g_ctx, dx, dxq, 8, 4096, s));
            for (int nt = 1; nt <= 8; nt *= 8) {
                cudaEventRecord(e0, s);
                for (int it = 0; it < iters; it++)
                    CK(st_cuda_mmvq(&g_ctx, type, dW + (size_t)(it % copies) * mb, 4096, 2048, dxq, nt, dy, s));
                cudaEventRecord(e1, s);
                const double sec = time_loop(e0, e1, iters) / iters;
                char what[64];
                snprintf(what, sizeof what, "mmvq 4096x2048 n_tok %d", nt);
                printf("  %-7s %-44s %8.2f us  %7.0f GB/s  %5.1f%%\n", st_type_name(type), what, sec * 1e6,
                       (double)mb / sec / 1e9, 100 * (double)mb / sec / 1e9 / hbm);
            }
        }
        st_cuda_free(&g_ctx, dW), st_cuda_free(&g_ctx, dW2), st_cuda_free(&g_ctx, dxq), st_cuda_free(&g_ctx, dx);
        st_cuda_free(&g_ctx, dy), st_cuda_free(&g_ctx, dids);
        free(W1), free(x);
    }
    cudaEventDestroy(e0), cudaEventDestroy(e1);
}

int main(int argc, char **argv) {
    int quick = 0, no_timing = 0;
    if (gpu_test_args(argc, argv, &quick, &no_timing)) return 2;
    g_seed = gpu_test_seed(32);
    printf("test_gpu_mmvq: seed %llu%s\n", (unsigned long long)g_seed, quick ? " (quick)" : "");
    if (st_cuda_init(&g_ctx, 0, 1, 0) != 0) {
        fprintf(stderr, "test_gpu_mmvq: FAIL: %s\n", st_errmsg());
        return 1;
    }
    printf("device: %s, sm_%d%d, %d SMs, peak %.0f GB/s\n", g_ctx.name, g_ctx.cc_major, g_ctx.cc_minor, g_ctx.sm_count,
           g_ctx.peak_bw_gbs);
    g_pool = st_pool_create(0);
    st_rng r;
    st_rng_init(&r, g_seed, 0);

    test_errors();
    const int toks[] = {1, 2, 3, 8};
    for (int ti = 0; ti < N_TYPES; ti++) {
        const int type = k_types[ti];
        const int before = g_fail;
        // (ne0, n_out): expert gate/up, expert down, dense; every ne0 a multiple of 256.
        const int shapes_full[][2] = {{2048, 768}, {768, 2048}, {4096, 2048}, {256, 33}};
        const int shapes_quick[][2] = {{512, 96}, {256, 33}};
        const int ns = quick ? 2 : 4;
        for (int si = 0; si < ns; si++) {
            const int ne0 = quick ? shapes_quick[si][0] : shapes_full[si][0];
            const int n_out = quick ? shapes_quick[si][1] : shapes_full[si][1];
            for (int k = 0; k < 4; k++) {
                if (quick && toks[k] == 2) continue;
                test_plain(type, ne0, n_out, toks[k], &r);
            }
        }
        if (quick) {
            test_ids(type, 512, 64, 6, 1, 4, 0, 0, &r);
            test_ids(type, 512, 64, 6, 2, 2, 1, 0, &r);
        } else {
            test_ids(type, 2048, 768, 16, 1, 8, 0, 0, &r);  // gate/up of one decode token
            test_ids(type, 2048, 768, 16, 2, 4, 1, 0, &r);  // fused gate+up, 2 tokens
            test_ids(type, 768, 2048, 16, 1, 8, 0, 1, &r);  // down: one activation row per pair
        }
        printf("%s %-8s (%d checks so far)\n", g_fail == before ? "PASS" : "FAIL", st_type_name(type), g_checks);
        fflush(stdout);
    }
    if (!quick) {  // vocabulary-sized output projection, the largest matrix of a decode step
        test_plain(ST_TYPE_Q6_K, 2048, 151936, 1, &r);
        test_plain(ST_TYPE_Q4_K, 2048, 151936, 8, &r);
        test_plain(ST_TYPE_Q8_0, 2048, 151936, 3, &r);
        printf("%s large n_out (2048x151936: Q6_K, Q4_K, Q8_0)\n", g_fail ? "(see above)" : "PASS");
    }
    {  // rows staged through shared memory == direct, bit for bit (n_out: one warp per row, a partial block)
        const int before = g_fail;
        const int staged_types[] = {ST_TYPE_Q6_K, ST_TYPE_Q3_K, ST_TYPE_Q2_K};
        for (int i = 0; i < 3; i++) {
            test_staged(staged_types[i], 2048, quick ? 4 * 32 * g_ctx.sm_count + 3 : 50003, &r);
            test_staged(staged_types[i], 4096, 32 * g_ctx.sm_count + 5, &r);
        }
        printf("%s staged rows == direct (Q6_K, Q3_K, Q2_K; 2048 and 4096 wide)\n", g_fail == before ? "PASS" : "FAIL");
    }
    const int failed = g_fail;
    if (!quick && !no_timing && !failed) timing(&r);

    st_cpu_scratch_free(&g_scratch);
    st_pool_destroy(g_pool);
    st_cuda_destroy(&g_ctx);
    printf("test_gpu_mmvq: %s (%d checks, %d failed, seed %llu)\n", failed ? "FAIL" : "PASS", g_checks, failed,
           (unsigned long long)g_seed);
    return failed ? 1 : 0;
}
