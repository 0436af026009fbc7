// The one-token Q/K/V launch in norm mode (decode.h st_cuda_mmvq_multi_norm): the attention RMSNorm of the residual
// row folded into the launch. Every block normalises and quantizes the row itself (decode_common.cuh span_norm and
// span_quant, the code of the span RMSNorm kernel: one barrier for the sum of squares, each group a 256-element span
// from registers) into shared memory, then its groups dot their rows with it (decode.cu's k_mmvq_multi on the row
// k_rmsnorm_act_span would have written: bit for bit). No norm launch, no kernel boundary and no L2 round trip of the
// quantized row between the norm and the projections: a layer is one launch shorter.
//
// Why it could lose (2026-11-30g: the norm of that day, three barriers and two shared-memory passes, in every block
// of the launch cost more than the launch it saved): the head is now the span norm's chain only, and each group's
// weight rows go into L1 while the head runs (into L2 before the dependency wait, into L1 right after it), so the row
// dots after the head find them there instead of paying the L2 round trip the head would otherwise put in series.
// Its own translation unit: its instances compile beside decode.cu's.
#include "cuda/decode_multi.cuh"
#include "cuda/quantize_act.h"  // st_cuda_act_format

// QN_DEFER (A/B build, default 0; not bit for bit): the block quantizes x * w without waiting for the RMS scale and
// multiplies each dot by it at the end (the scale is a per-row factor of every output), so the head is the load and
// the quantization only; the sum of squares meets across the same barrier as the quantized row. The outputs then
// differ from the two launches' by float rounding (a quant moves by one where x * w / max lies within ~1e-5 of a
// rounding boundary; the scale applies after the dot instead of before the quantization).
#ifndef QN_DEFER
#define QN_DEFER 0
#endif
extern "C" int st_cuda_mmvq_multi_norm_exact(void) { return !QN_DEFER; }

struct multi_norm {
    const float *x;  // [ne0] the residual row (f32; an earlier kernel's output)
    const float *w;  // [ne0] the RMSNorm gains
    float eps;
    int fmt;         // the activation format of every matrix (Q8_0, Q8_1 or Q8_K)
};

// NS: 256-element spans per group (ne0 <= 256 DEC_GROUPS NS); TB: a two-type instance (DEC_MIX_PAIRS).
template <int TYPE, int NS, int TB = 0>
__device__ __forceinline__ void mmvq_norm_body(const multi_args &a, const multi_norm &nm) {
    extern __shared__ __align__(16) uint8_t qn_row[];  // the quantized row (planar, st_q8_1_row_bytes(ne0))
    __shared__ double qn_part[DEC_GROUPS * NS];          // span_norm's sums of squares, [ne0 / 256]
    dec_stage_tables<TYPE>();
    const int lane = threadIdx.x % G32, g = threadIdx.x / G32;
    const int grow = blockIdx.x * DEC_GROUPS + g;  // global output row
    const bool active = grow < a.row_end[a.n_mat - 1];  // (groups past the end leave after the barriers)
    const multi_row m = multi_select<false>(a, active ? grow : 0);
    const uint8_t *wr = m.W + (size_t)m.r * (size_t)m.rb;
    if (active)
        for (long long off = (long long)lane * 128; off < m.rb; off += 32 * 128) st_prefetch_l2(wr + off);
    const int n = a.nitems * 32, nsp = n / 256;
    float w[NS][8], v[NS][8];
#pragma unroll
    for (int s = 0; s < NS; s++) {
        const int kb = g + DEC_GROUPS * s;
#pragma unroll
        for (int j = 0; j < 8; j++) w[s][j] = kb < nsp ? nm.w[256 * kb + 32 * j + lane] : 0.0f;  // (no kernel's output)
    }
    st_pdl_wait();  // x (and y's previous readers) belong to earlier kernels
    st_pdl_trigger();
    // The rows from L2 into L1 while the head runs (after the wait: its visibility rule may drop L1 lines taken
    // before it), so the row dots after the head read L1.
    if (active)
        for (long long off = (long long)lane * 128; off < m.rb; off += 32 * 128) st_prefetch_line<true>(wr + off);
    // Plain loads, through L1 (as the separate launches read their quantized row): the SM's blocks share x's lines,
    // where .cg loads would take 8 KiB per block from L2 (~5 MiB for the launch, ~0.7 us of L2 bandwidth).
#pragma unroll
    for (int s = 0; s < NS; s++) {
        const int kb = g + DEC_GROUPS * s;
#pragma unroll
        for (int j = 0; j < 8; j++) v[s][j] = kb < nsp ? nm.x[256 * kb + 32 * j + lane] : 0.0f;
    }
#if QN_DEFER
    span_sumsq<NS>(v, n, qn_part);
#pragma unroll
    for (int s = 0; s < NS; s++)
#pragma unroll
        for (int j = 0; j < 8; j++) v[s][j] = __fmul_rn(v[s][j], w[s][j]);
#else
    span_norm<NS>(v, w, n, nm.eps, qn_part);
#endif
#pragma unroll
    for (int s = 0; s < NS; s++)
        if (g + DEC_GROUPS * s < nsp) span_quant(qn_row, a.nitems, g + DEC_GROUPS * s, lane, v[s], nm.fmt);
    __syncthreads();
    if (!active) return;
    float d;
    if constexpr (TYPE == 0) d = row_dot_any<DEC_PROBE(DEC_PK_MULTI)>(m.type, wr, qn_row, a.nitems, lane);
    else if constexpr (TB != 0)
        d = m.type == TYPE ? row_dot<TYPE, DEC_TAB | DEC_PROBE(DEC_PK_MULTI)>(wr, qn_row, a.nitems, lane)
                           : row_dot<TB, DEC_TAB | DEC_PROBE(DEC_PK_MULTI)>(wr, qn_row, a.nitems, lane);
    else d = row_dot<TYPE, DEC_TAB | DEC_PROBE(DEC_PK_MULTI)>(wr, qn_row, a.nitems, lane);
#if QN_DEFER
    d = __fmul_rn(d, span_rms_scale(qn_part, n, nm.eps));
#endif
    if (lane == 0) m.y[m.r] = d;
}

// One span per group: every instance at DEC_MINB_MULTI0 blocks per SM (48 registers), the Qwen3-30B-A3B shape's 640
// blocks in one wave (the per-type Q4_K instance took 51 registers on its own: 4 blocks per SM). Two (rows of 4096:
// 1,152 blocks for Qwen3-235B-A22B, more than a wave either way): the compiler's choice, as 48 registers spill the
// 32 values of the head (~100 bytes).
#define QN_MINB(NS) ((NS) == 1 ? DEC_MINB_MULTI0 : 0)
template <int TYPE, int NS>
__global__ void __launch_bounds__(DEC_THREADS, QN_MINB(NS)) k_mmvq_norm(const multi_args a, const multi_norm nm) {
    mmvq_norm_body<TYPE, NS>(a, nm);
}
template <int TA, int TB, int NS>
__global__ void __launch_bounds__(DEC_THREADS, QN_MINB(NS)) k_mmvq_norm_mix(const multi_args a, const multi_norm nm) {
    mmvq_norm_body<TA, NS, TB>(a, nm);
}

#define QN_MAX_SPANS 2  // spans per group: rows of up to 256 x DEC_GROUPS x 2 = 4096 elements

extern "C" int st_cuda_mmvq_multi_norm_supported(const st_cuda_dec_mat *mats, int n_mat, int64_t ne0) {
    if (n_mat < 1 || n_mat > ST_DEC_MAX_MATS || ne0 <= 0 || ne0 % 256 || ne0 > 256 * DEC_GROUPS * QN_MAX_SPANS)
        return 0;
    const int fmt = st_cuda_act_format(mats[0].type);
    if (!dec_fmt_ok(fmt)) return 0;
    for (int i = 0; i < n_mat; i++)
        if (!st_cuda_dec_supported(mats[i].type) || st_cuda_act_format(mats[i].type) != fmt || mats[i].add) return 0;
    return 1;
}

extern "C" int st_cuda_mmvq_multi_norm(const st_cuda_dec_mat *mats, int n_mat, int64_t ne0, const float *x,
                                       const float *norm_w, float eps, cudaStream_t stream) {
    multi_args a;
    const int64_t rows = multi_fill("st_cuda_mmvq_multi_norm", mats, n_mat, ne0, &a);
    if (rows < 0) return -1;
    if (!st_cuda_mmvq_multi_norm_supported(mats, n_mat, ne0))
        return st_err("st_cuda_mmvq_multi_norm: rows of %lld (a multiple of 256 up to %d), one activation format "
                      "(Q8_0, Q8_1 or Q8_K) for every matrix, no addends", (long long)ne0,
                      256 * DEC_GROUPS * QN_MAX_SPANS);
    if (!x || !norm_w || ((uintptr_t)x & 15) || ((uintptr_t)norm_w & 15))
        return st_err("st_cuda_mmvq_multi_norm: x and norm_w must be 16-byte aligned device pointers");
    const multi_norm nm = {x, norm_w, eps, st_cuda_act_format(mats[0].type)};
    const bool two = ne0 > 256 * DEC_GROUPS;  // two spans per group
    int same = 1;
    for (int i = 1; i < n_mat; i++) same &= mats[i].type == mats[0].type;
    void (*fn)(const multi_args, const multi_norm) = two ? k_mmvq_norm<0, 2> : k_mmvq_norm<0, 1>;
    if (same && !dec_switch_forced()) {  // the per-type instance (DEC_PICK's rule)
#define NORM_CASE(T)                                                                                               \
    case T: fn = two ? k_mmvq_norm<T, 2> : k_mmvq_norm<T, 1>; break;
        switch (mats[0].type) {
            DEC_TYPES(NORM_CASE)
        default: break;
        }
#undef NORM_CASE
    } else if (!same) {
        const int p = mix_pair(mats, n_mat);
        int i = 0;
#define MIX_CASE(A, B)                                                                                             \
    if (p == i++) fn = two ? k_mmvq_norm_mix<A, B, 2> : k_mmvq_norm_mix<A, B, 1>;
        DEC_MIX_PAIRS(MIX_CASE)
#undef MIX_CASE
    }
    const size_t smem = (size_t)st_q8_1_row_bytes(ne0);
    st_dec_launch(fn, dim3((unsigned)((rows + DEC_GROUPS - 1) / DEC_GROUPS)), dim3(DEC_THREADS), smem, stream, a, nm);
    return launch_check("mmvq_multi_norm");
}
