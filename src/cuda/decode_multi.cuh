// The one-token Q/K/V launch's shared parts, for its two translation units (decode.cu: k_mmvq_multi* on a quantized
// input row; decode_qkv_norm.cu: the norm mode, which normalises and quantizes the residual row in every block): the
// kernel arguments, the matrix of a global output row, the two-type instances' pairs and the host-side checks.
#ifndef STRATA_CUDA_DECODE_MULTI_CUH
#define STRATA_CUDA_DECODE_MULTI_CUH

#include "cuda/decode_impl.cuh"

struct multi_args {
    const uint8_t *W[ST_DEC_MAX_MATS];      // matrix i: [n_out][row_bytes[i]] rows of type[i]
    float *y[ST_DEC_MAX_MATS];              // matrix i: [n_out] f32 outputs
    const float *add[ST_DEC_MAX_MATS];      // matrix i: [n_out] f32 added to the dots, or NULL
    long long row_bytes[ST_DEC_MAX_MATS];
    int type[ST_DEC_MAX_MATS];
    int row_end[ST_DEC_MAX_MATS];  // cumulative row counts
    int n_mat;
    int nitems;                    // 32-element items per row (ne0 / 32)
    const uint8_t *xq;             // the quantized input row (planar, st_q8_1_row_bytes(ne0)); norm mode: unused
};

// Global output row grow's matrix: its rows, output, addend (ADD), row bytes, type and the row r within it.
struct multi_row {
    const uint8_t *W;
    float *y;
    const float *add;
    long long rb;
    int type, r;
};
template <bool ADD> __device__ __forceinline__ multi_row multi_select(const multi_args &a, int grow) {
    // An unrolled scan, so the argument arrays are never indexed dynamically.
    multi_row m = {a.W[0], a.y[0], ADD ? a.add[0] : nullptr, a.row_bytes[0], a.type[0], grow};
#pragma unroll
    for (int i = 1; i < ST_DEC_MAX_MATS; i++)
        if (i < a.n_mat && grow >= a.row_end[i - 1]) {
            m.W = a.W[i], m.y = a.y[i], m.rb = a.row_bytes[i], m.type = a.type[i];
            if (ADD) m.add = a.add[i];
            m.r = grow - a.row_end[i - 1];
        }
    return m;
}

// The two-type instances: the k-quant mixes of the common *_K_M / *_K_S files' Q/K/V (e.g. Q4_K Q/K with V in Q6_K):
// rows of the first type take its inlined row dot, the others the second's (a branch uniform in each group). The
// runtime switch of instance 0 took 3.6 us per launch on such layers against 2.8 for all-Q4_K layers (CUPTI
// timeline, 2026-12-04d).
#define DEC_MIX_PAIRS(X)                                                                                           \
    X(ST_TYPE_Q4_K, ST_TYPE_Q6_K) X(ST_TYPE_Q5_K, ST_TYPE_Q6_K) X(ST_TYPE_Q4_K, ST_TYPE_Q5_K)                       \
        X(ST_TYPE_Q3_K, ST_TYPE_Q5_K) X(ST_TYPE_Q3_K, ST_TYPE_Q4_K) X(ST_TYPE_Q2_K, ST_TYPE_Q3_K)

// The index in DEC_MIX_PAIRS of the pair {mats' two types} (either order), or -1: one type, three or more, a pair
// without an instance, or STRATA_DEC_SWITCH.
static inline int mix_pair(const st_cuda_dec_mat *mats, int n_mat) {
    int ta = mats[0].type, tb = -1;
    for (int i = 1; i < n_mat; i++)
        if (mats[i].type != ta) {
            if (tb >= 0 && mats[i].type != tb) return -1;
            tb = mats[i].type;
        }
    if (tb < 0 || dec_switch_forced()) return -1;
    int p = 0;
#define MIX_INDEX(A, B)                                                                                            \
    if ((ta == A && tb == B) || (ta == B && tb == A)) return p;                                                   \
    p++;
    DEC_MIX_PAIRS(MIX_INDEX)
#undef MIX_INDEX
    return -1;
}

// Checks mats (errors name fn) and fills a for rows of ne0 elements; returns the total row count, or -1.
static inline int64_t multi_fill(const char *fn, const st_cuda_dec_mat *mats, int n_mat, int64_t ne0, multi_args *a) {
    if (n_mat < 1 || n_mat > ST_DEC_MAX_MATS) return st_err("%s: %d matrices (1..%d)", fn, n_mat, ST_DEC_MAX_MATS);
    if (ne0 <= 0 || ne0 % 32) return st_err("%s: ne0 %lld", fn, (long long)ne0);
    memset(a, 0, sizeof *a);
    int64_t rows = 0;
    for (int i = 0; i < n_mat; i++) {
        const st_cuda_dec_mat *m = &mats[i];
        const st_type_info *ti = st_type_get(m->type);
        if (!ti || !st_cuda_dec_supported(m->type) || ne0 % ti->block_size)
            return st_err("%s: matrix %d: type %s with rows of %lld is not supported", fn, i, st_type_name(m->type),
                          (long long)ne0);
        if (!m->W || !m->y || ((uintptr_t)m->W & 15) || ((uintptr_t)m->y & 3) || m->n_out <= 0)
            return st_err("%s: matrix %d: bad pointer or n_out %lld", fn, i, (long long)m->n_out);
        rows += m->n_out;
        if (rows > INT32_MAX / 2) return st_err("%s: %lld rows in all", fn, (long long)rows);
        a->W[i] = (const uint8_t *)m->W;
        a->y[i] = m->y;
        a->add[i] = m->add;
        a->row_bytes[i] = (long long)st_row_size(m->type, ne0);
        a->type[i] = m->type;
        a->row_end[i] = (int)rows;
    }
    a->n_mat = n_mat;
    a->nitems = (int)(ne0 / 32);
    return rows;
}

#endif
