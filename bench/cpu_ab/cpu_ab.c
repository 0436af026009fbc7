// A/B of two versions of the x86 CPU dot kernels (src/cpu/dot_x86.inc), compiled alike into one binary
// (bench/cpu_ab.sh): for each type, the results must be bitwise equal (random rows, the 1-token dot and the tiled
// dot with 1-4 tokens), then both are timed on a ROWS x N matrix, alternating which runs first rep by rep (the
// order alone moves a kernel by 10-40% on a busy machine). Prints old / new ms and the speedup per type, best of
// the reps (interference only adds time) and the means.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/dot.h"
#include "cpu/dot_impl.h"
#include "quant/quant.h"
#include "util/rng.h"

void st_cpu_kernels_init_ab_old(st_cpu_kernels *k);
void st_cpu_kernels_init_ab_new(st_cpu_kernels *k);

enum { N = 4096, ROWS = 1536, REPS = 40, CHECKS = 4000 };
static volatile float g_sink;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static st_quant_act_fn quant_for(const st_cpu_kernels *k, int type) {
    const int fmt = st_cpu_act_type(type);
    return fmt == ST_TYPE_Q8_0 ? k->quant_q8_0 : fmt == ST_TYPE_Q8_1 ? k->quant_q8_1 : k->quant_q8_K;
}

static double run(const st_cpu_kernels *k, int t, int nt, const uint8_t *w, size_t rowb, const uint8_t *q, size_t qb) {
    const double t0 = now();
    float o[4];
    for (int r = 0; r < ROWS; r++) {
        if (nt == 1) g_sink += k->dot[t](N, w + (size_t)r * rowb, q);
        else k->tdot[t](N, w + (size_t)r * rowb, q, qb, nt, o), g_sink += o[0];
    }
    return now() - t0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s TYPE...\n", argv[0]);
        return 2;
    }
    static st_cpu_kernels ko, kn;
    st_cpu_kernels_init_ab_old(&ko);
    st_cpu_kernels_init_ab_new(&kn);
    st_rng rng;
    st_rng_init(&rng, 20261201, 0);
    int rc = 0;
    for (int ai = 1; ai < argc; ai++) {
        const int t = st_type_from_name(argv[ai]);
        if (t < 0 || !ko.dot[t] || !kn.dot[t]) {
            fprintf(stderr, "%s: no 1-token dot for this type\n", argv[ai]);
            rc = 2;
            continue;
        }
        const size_t rowb = st_row_size(t, N), qb = st_row_size(st_cpu_act_type(t), N);
        uint8_t *w = malloc(rowb * ROWS), *q = malloc(qb * 4);
        float *x = malloc(sizeof(float) * N);
        if (!w || !q || !x || st_random_blocks(t, w, (int64_t)ROWS * N / st_type_get(t)->block_size, 1.0f, &rng)) {
            fprintf(stderr, "%s: out of memory or no random blocks\n", argv[ai]);
            return 2;
        }
        int bad = 0;
        for (int it = 0; it < CHECKS; it++) {  // bitwise: fresh activations (with outliers) against random rows
            for (int c = 0; c < 4; c++) {
                for (int i = 0; i < N; i++) x[i] = st_rng_normal(&rng) * (st_rng_below(&rng, 50) == 0 ? 20.0f : 1.0f);
                quant_for(&ko, t)(x, q + c * qb, N);
            }
            const uint8_t *row = w + (size_t)st_rng_below(&rng, ROWS) * rowb;
            const float a = ko.dot[t](N, row, q), b = kn.dot[t](N, row, q);
            bad += memcmp(&a, &b, sizeof a) != 0;
            if (ko.tdot[t] && kn.tdot[t]) {
                float oa[4], ob[4];
                const int nt = 1 + it % 4;
                ko.tdot[t](N, row, q, qb, nt, oa);
                kn.tdot[t](N, row, q, qb, nt, ob);
                bad += memcmp(oa, ob, sizeof(float) * (size_t)nt) != 0;
            }
        }
        printf("%-8s bitwise: %s (%d checks differ)\n", argv[ai], bad ? "DIFFER" : "equal", bad);
        rc |= bad != 0;
        for (int nt = 1; nt <= 4; nt += 3) {
            if (nt > 1 && !(ko.tdot[t] && kn.tdot[t])) break;
            double to = 0, tn = 0, bo = 1e30, bn = 1e30;  // sums and bests (a busy machine only ever adds time)
            for (int rep = 0; rep < REPS; rep++) {
                double a, b;
                if (rep % 2) a = run(&ko, t, nt, w, rowb, q, qb), b = run(&kn, t, nt, w, rowb, q, qb);
                else b = run(&kn, t, nt, w, rowb, q, qb), a = run(&ko, t, nt, w, rowb, q, qb);
                to += a, tn += b;
                if (a < bo) bo = a;
                if (b < bn) bn = b;
            }
            printf("%-8s %d token(s), %d x %d: old %.3f ms, new %.3f ms, %.2fx (best of %d; means %.3f / %.3f ms, "
                   "%.2fx)\n", argv[ai], nt, ROWS, N, bo * 1e3, bn * 1e3, bo / bn, REPS, to / REPS * 1e3,
                   tn / REPS * 1e3, to / tn);
        }
        free(w), free(q), free(x);
    }
    return rc;
}
