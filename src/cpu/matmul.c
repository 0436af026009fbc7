#include "cpu/matmul.h"

#include <stdlib.h>
#include <string.h>

#include "cpu/dot.h"
#include "cpu/dot_impl.h"
#include "quant/quant.h"
#include "util/err.h"

void st_cpu_scratch_free(st_cpu_scratch *s) {
    free(s->data);
    s->data = NULL;
    s->size = 0;
}

void *st_cpu_scratch_get(st_cpu_scratch *s, size_t size) {
    if (s->size >= size && s->data) return s->data;
    size_t want = (size + 63) & ~(size_t)63;
    void *p = NULL;
    if (posix_memalign(&p, 64, want ? want : 64) != 0) {
        st_err("cpu matmul: cannot allocate %zu bytes of scratch", want);
        return NULL;
    }
    free(s->data);
    s->data = p;
    s->size = want;
    return p;
}

// ---------------------------------------------------------------------------------------------------------------
// Activation quantization, one task per token row.

typedef struct {
    int act_type;
    st_cpu_isa isa;
    const float *X;
    int64_t ne0;
    uint8_t *Xq;
    size_t xq_stride;
} quant_job;

static void quant_task(void *ud, int64_t t, int thread) {
    (void)thread;
    const quant_job *j = ud;
    st_cpu_quantize_act(j->act_type, j->X + t * j->ne0, j->Xq + (size_t)t * j->xq_stride, j->ne0, j->isa);
}

// ---------------------------------------------------------------------------------------------------------------
// Tiled products.

typedef struct {
    st_gemm8_fn gemm8;    // NULL: no 8-row tiles; else every row goes through repacked 8-row tiles
    int weight_type;
    int64_t n_chunk_tok;  // gemm8: tokens [0, n_chunk_tok) in 4-token groups take the chunk order, the rest GEMV
    uint8_t *w8;          // gemm8: [n_threads][w8_bytes] one repacked 8-row tile per thread
    size_t w8_bytes;
    st_tdot_fn tdot;      // non-NULL: every token goes through the tiled-order kernel (st_cpu_tiled_applies)
    st_vec_dot_fn dot;
    st_vec_dot4_fn dot4;  // NULL: per-token dot only
    int tail4;            // leftover tokens also go through dot4 (a_stride 0): st_cpu_dot4_gemm_order types
    const uint8_t *W;     // row row0
    size_t w_stride;      // bytes per weight row
    int64_t ne0, n_rows, n_tok;
    const uint8_t *Xq;
    size_t xq_stride;
    float *Y;
    int64_t ldy;
    int64_t tile_rows, tile_toks, n_row_tiles;
} mm_job;

#define PF_AHEAD 2048


static void mm_task(void *ud, int64_t task, int thread) {
    const mm_job *j = ud;
    const int64_t rt = task % j->n_row_tiles, tt = task / j->n_row_tiles;
    const int64_t r0 = rt * j->tile_rows, r1 = r0 + j->tile_rows < j->n_rows ? r0 + j->tile_rows : j->n_rows;
    const int64_t t0 = tt * j->tile_toks, t1 = t0 + j->tile_toks < j->n_tok ? t0 + j->tile_toks : j->n_tok;
    // Software prefetch of the weights PF_AHEAD bytes ahead: a one-token matvec does too little work per byte for
    // the out-of-order window to keep enough cache misses in flight, and the hardware prefetchers alone left DRAM
    // reads at 2.5 GB/s per core here (6.4 GB/s with this, st-cpu-bench Q4_1 576 x 262144).
    const size_t ahead = PF_AHEAD > j->w_stride ? PF_AHEAD : j->w_stride;
    int64_t r = r0;
    if (j->gemm8) {
        // 8 rows repacked once into this thread's buffer, then swept over every token of the tile 4 at a time.
        void *w8 = j->w8 + (size_t)thread * j->w8_bytes;
        for (; r + 8 <= r1; r += 8) {
            st_cpu_repack8(j->weight_type, j->W + (size_t)r * j->w_stride, j->w_stride, j->ne0, w8);
            for (int64_t t = t0; t < t1; t += 4) {
                const int nt = t1 - t < 4 ? (int)(t1 - t) : 4;
                j->gemm8(j->ne0, w8, j->Xq + (size_t)t * j->xq_stride, j->xq_stride, nt, j->Y + t * j->ldy + r,
                         j->ldy, t + 4 <= j->n_chunk_tok);
            }
        }
    }
    // Row-outer: one weight row stays in L1 while the tile's activation rows (sized to fit L2) stream past it.
    for (; r < r1; r++) {
        const uint8_t *w = j->W + (size_t)r * j->w_stride;
        for (size_t off = 0; off < j->w_stride; off += 64) __builtin_prefetch(w + ahead + off, 0, 3);
        int64_t t = t0;
        if (j->tdot) {
            for (; t < t1; t += 4) {
                const int nt = t1 - t < 4 ? (int)(t1 - t) : 4;
                float out[4];
                j->tdot(j->ne0, w, j->Xq + (size_t)t * j->xq_stride, j->xq_stride, nt, out);
                for (int c = 0; c < nt; c++) j->Y[(t + c) * j->ldy + r] = out[c];
            }
            continue;
        }
        if (j->dot4) {
            for (; t + 4 <= t1; t += 4) {
                float out[4];
                j->dot4(j->ne0, w, j->Xq + (size_t)t * j->xq_stride, j->xq_stride, out);
                for (int c = 0; c < 4; c++) j->Y[(t + c) * j->ldy + r] = out[c];
            }
        }
        if (j->tail4) {
            for (; t < t1; t++) {
                float out[4];
                j->dot4(j->ne0, w, j->Xq + (size_t)t * j->xq_stride, 0, out);
                j->Y[t * j->ldy + r] = out[0];
            }
        }
        for (; t < t1; t++) j->Y[t * j->ldy + r] = j->dot(j->ne0, w, j->Xq + (size_t)t * j->xq_stride);
    }
}

static int check_shape(int weight_type, int64_t ne0, const char *what) {
    if (st_cpu_act_type(weight_type) < 0)
        return st_err("%s: weight type %s has no CPU kernel", what, st_type_name(weight_type));
    if (ne0 <= 0 || st_row_size(weight_type, ne0) == 0 || st_cpu_act_row_size(weight_type, ne0) == 0)
        return st_err("%s: row length %lld is not a multiple of the %s block size", what, (long long)ne0,
                      st_type_name(weight_type));
    return 0;
}

int st_cpu_matmul_rows_q(st_pool *pool, int weight_type, const void *W, int64_t ne0, int64_t row0, int64_t n_rows,
                         const void *Xq, size_t xq_stride, int64_t n_tok, float *Y, int64_t ldy, int flags) {
    if (check_shape(weight_type, ne0, "st_cpu_matmul_rows_q") < 0) return -1;
    if (n_rows <= 0 || n_tok <= 0) return 0;
    const st_cpu_isa isa = st_cpu_isa_active();
    mm_job j = {
        .dot = st_cpu_vec_dot(weight_type, isa),
        .dot4 = n_tok >= 4 ? st_cpu_vec_dot4(weight_type, isa) : NULL,
        .tail4 = 0,
        .w_stride = st_row_size(weight_type, ne0),
        .ne0 = ne0,
        .n_rows = n_rows,
        .n_tok = n_tok,
        .Xq = Xq,
        .xq_stride = xq_stride,
        .Y = Y,
        .ldy = ldy,
    };
    j.W = (const uint8_t *)W + (size_t)row0 * j.w_stride;
    // llama.cpp computes prompts (2+ tokens) of these types in one accumulation order, decode in another.
    // Float weights take it only in dense products (llama.cpp's mul_mat_id for experts has no tinyBLAS path); their
    // 4-token kernels exist only in that order.
    const int float_w = weight_type == ST_TYPE_F32 || weight_type == ST_TYPE_F16;
    if (float_w) j.dot4 = NULL;
    if (n_tok >= 2 && st_cpu_dot4_gemm_order(weight_type) && !(float_w && (flags & ST_MM_EXPERT))) {
        j.dot4 = st_cpu_vec_dot4(weight_type, isa);
        j.tail4 = j.dot4 != NULL;
    }
    // Types llama.cpp repacks into 8-row tiles (row count a multiple of 8) follow its repacked kernels' order:
    // dense products of 4+ tokens take 4-token groups in the GEMM's chunk order and the rest in the GEMV order;
    // experts (its mul_mat_id) and fewer than 4 tokens the GEMV order. The tiles also run ~2x faster than 4-token
    // row kernels (STRATA_NO_GEMM8=1 turns them off, for A/B measurements).
    static int no_x8 = -1;
    if (no_x8 < 0) no_x8 = getenv("STRATA_NO_GEMM8") != NULL;
    const int x8 = row0 % 8 == 0 && n_rows % 8 == 0 && st_cpu_gemm8(weight_type, isa) && !no_x8;
    if (x8) {
        j.dot = st_cpu_vec_dot_x8(weight_type, isa);
        j.dot4 = NULL;
        j.tail4 = 0;
        if (n_tok >= 4) {
            j.gemm8 = st_cpu_gemm8(weight_type, isa);
            j.weight_type = weight_type;
            j.n_chunk_tok = (flags & ST_MM_EXPERT) ? 0 : n_tok - n_tok % 4;
        }
    }
    // llama.cpp computes products of 8+ tokens (for experts: 8+ tokens routed to the expert) of K-quant and IQ
    // weights that it did not repack in its tiled order (cpu/dot_impl.h, st_tdot_fn). A row range that does not
    // start on a multiple of 8 cannot be a whole repackable tensor, hence the row count 1 passed for it.
    if (!x8 && st_cpu_tiled_applies(weight_type, row0 % 8 ? 1 : n_rows, n_tok, isa)) {
        j.tdot = st_cpu_tiled_dot(weight_type, isa);
        j.dot4 = NULL;
        j.tail4 = 0;
    }
    const int n_threads = pool ? st_pool_threads(pool) : 1;
    if (j.gemm8) {
        j.w8_bytes = (st_cpu_repack8_size(weight_type, ne0) + 63) & ~(size_t)63;
        if (posix_memalign((void **)&j.w8, 64, j.w8_bytes * (size_t)n_threads) != 0)
            return st_err("cpu matmul: cannot allocate %zu bytes for repacked tiles", j.w8_bytes * (size_t)n_threads);
    }
    // Token tile: activation rows that fit in ~128 KiB of L2. Row tile: enough tasks for load balance
    // (about 8 per thread for a single token tile), each at least a few rows.
    int64_t tt = (int64_t)((128 << 10) / (xq_stride ? xq_stride : 1));
    if (j.gemm8 || j.tdot) tt &= ~(int64_t)3;  // token tiles hold whole 4-token groups
    if (tt < 1) tt = j.gemm8 || j.tdot ? 4 : 1;
    if (tt > n_tok) tt = n_tok;
    const int64_t n_tok_tiles = (n_tok + tt - 1) / tt;
    int64_t tr = n_rows / ((int64_t)n_threads * 8 / n_tok_tiles + 1);
    const int64_t max_rows = (int64_t)((256 << 10) / j.w_stride) + 1;  // keep a tile's weights L2-sized
    if (tr > max_rows) tr = max_rows;
    if (tr < 4) tr = 4;
    if (x8) tr = (tr + 7) & ~(int64_t)7;  // whole 8-row tiles
    if (tr > n_rows) tr = n_rows;
    j.tile_rows = tr;
    j.tile_toks = tt;
    j.n_row_tiles = (n_rows + tr - 1) / tr;
    const int64_t n_tasks = j.n_row_tiles * n_tok_tiles;
    if (pool && n_threads > 1 && n_tasks > 1) {
        st_pool_run(pool, n_tasks, mm_task, &j);
    } else {
        for (int64_t t = 0; t < n_tasks; t++) mm_task(&j, t, 0);
    }
    free(j.w8);
    return 0;
}

int st_cpu_matmul_rows(st_pool *pool, int weight_type, const void *W, int64_t ne0, int64_t row0, int64_t n_rows,
                       const float *X, int64_t n_tok, float *Y, int64_t ldy, st_cpu_scratch *scratch, int flags) {
    if (check_shape(weight_type, ne0, "st_cpu_matmul") < 0) return -1;
    if (n_rows <= 0 || n_tok <= 0) return 0;
    const int act_type = st_cpu_act_type(weight_type);
    const size_t ab = st_cpu_act_row_size(weight_type, ne0);
    const size_t stride = (ab + 63) & ~(size_t)63;  // cache-line aligned rows
    st_cpu_scratch local = {0};
    st_cpu_scratch *s = scratch ? scratch : &local;
    uint8_t *Xq = st_cpu_scratch_get(s, stride * (size_t)n_tok);
    if (!Xq) return -1;
    quant_job qj = {act_type, st_cpu_isa_active(), X, ne0, Xq, stride};
    if (pool && st_pool_threads(pool) > 1 && n_tok > 1) {
        st_pool_run(pool, n_tok, quant_task, &qj);
    } else {
        for (int64_t t = 0; t < n_tok; t++) quant_task(&qj, t, 0);
    }
    int rc = st_cpu_matmul_rows_q(pool, weight_type, W, ne0, row0, n_rows, Xq, stride, n_tok, Y, ldy, flags);
    if (!scratch) st_cpu_scratch_free(&local);
    return rc;
}

int st_cpu_matmul(st_pool *pool, int weight_type, const void *W, int64_t ne0, int64_t n_out, const float *X,
                  int64_t n_tok, float *Y, st_cpu_scratch *scratch) {
    return st_cpu_matmul_rows(pool, weight_type, W, ne0, 0, n_out, X, n_tok, Y, n_out, scratch, 0);
}
