// Fused one-token decode kernels (see decode.h; decode_attn.cu has the attention, decode_common.cuh the shared
// device helpers and the PDL rules every kernel here follows: weights may be touched before st_pdl_wait(),
// nothing an earlier kernel writes or reads).
//
// Work unit: a "group" of 32 lanes (a whole warp on NVIDIA; half a wave on a wave64 part, whose shuffles with
// xor offsets < 32 stay inside the group), so the 32-element quantization blocks and the per-row dot products map
// one to one onto groups whatever ST_WARP_SIZE is. A block is DEC_GROUPS groups.
//
// Matrix-vector rows: one group per output row, lane l takes the 32-weight items l, l + 32, ... of the row and
// dots them with the matching int8 activation block (cuda/qblock.h unpack + dp4a), then a butterfly sum: the same
// arithmetic and order as st_k_mmvq with one warp per row (mmvq_impl.cuh), so the outputs match that kernel's.
#include "cuda/decode_impl.cuh"

// ---- PDL switch -------------------------------------------------------------------------------------------------

static int g_pdl_on = 1;     // process-wide A/B switch (st_cuda_dec_set_pdl); not device state
static int g_cc_major[64];   // per device ordinal: compute capability major, 0 unknown

extern "C" void st_cuda_dec_set_pdl(int on) { g_pdl_on = on != 0; }
extern "C" int st_cuda_dec_pdl(void) { return st_dec_pdl_enabled(); }

int st_dec_device_major(void) {
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;
    if (!g_cc_major[dev] &&
        cudaDeviceGetAttribute(&g_cc_major[dev], cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
        g_cc_major[dev] = 0;
    return g_cc_major[dev];
}

int st_dec_pdl_enabled(void) { return g_pdl_on && st_dec_device_major() >= 9; }

// ---- self-test of the group reductions -------------------------------------------------------------------------

// Per warp: four values per lane from a hash of (seed, warp, lane, n), signs and exponents spread over 2^-20..2^20
// (so the order of the additions shows in the bits); counts the lanes whose g32_sum4 / g32_sum4_t results differ in
// any bit from g32_sum_f's.
__global__ void k_selftest_sum4(unsigned long long seed, int *bad) {
    const int lane = threadIdx.x % G32, w = (int)(blockIdx.x * (blockDim.x / G32) + threadIdx.x / G32);
    float a[4];
#pragma unroll
    for (int n = 0; n < 4; n++) {
        const unsigned long long i = (unsigned long long)(((long long)w * 32 + lane) * 4 + n + 1);
        unsigned long long h = seed ^ (0x9e3779b97f4a7c15ull * i);
        h ^= h >> 31, h *= 0xbf58476d1ce4e5b9ull, h ^= h >> 29, h *= 0x94d049bb133111ebull, h ^= h >> 32;
        const float m = 1.0f + (float)(h & 0xffffff) / 16777216.0f;
        a[n] = ldexpf((h >> 24) & 1 ? -m : m, (int)((h >> 25) % 41) - 20);
    }
    float s[4];
    g32_sum4(a, lane, s);
    const float t = g32_sum4_t(a, lane);
    int nb = 0;
#pragma unroll
    for (int n = 0; n < 4; n++) {
        const float r = g32_sum_f(a[n]);
        nb += __float_as_uint(s[n]) != __float_as_uint(r);
        if (((lane >> 3) & 3) == n) nb += __float_as_uint(t) != __float_as_uint(r);
    }
    if (nb) atomicAdd(bad, nb);
}

extern "C" int st_cuda_dec_selftest_sum4(unsigned long long seed, int n_warps, int *mismatches) {
    int *d = NULL;
    if (n_warps <= 0 || !mismatches) return st_err("st_cuda_dec_selftest_sum4: %d warps", n_warps);
    if (cudaMalloc((void **)&d, sizeof(int)) != cudaSuccess || cudaMemset(d, 0, sizeof(int)) != cudaSuccess)
        return st_err("st_cuda_dec_selftest_sum4: device memory");
    k_selftest_sum4<<<(unsigned)((n_warps + DEC_GROUPS - 1) / DEC_GROUPS), DEC_THREADS>>>(seed, d);
    const int rc = launch_check("selftest_sum4");
    const cudaError_t e = cudaMemcpy(mismatches, d, sizeof(int), cudaMemcpyDeviceToHost);
    cudaFree(d);
    if (rc) return rc;
    return e == cudaSuccess ? 0 : st_err("st_cuda_dec_selftest_sum4: %s", cudaGetErrorString(e));
}

// ---- RMSNorm + residual + quantization ---------------------------------------------------------------------------

__global__ void __launch_bounds__(DEC_THREADS)
    k_rmsnorm_act(float *__restrict__ y, uint8_t *__restrict__ yq, int fmt, float *__restrict__ x,
                  const float *__restrict__ res, const float *__restrict__ w, int n, float eps, long long qstride) {
    extern __shared__ float sv[];  // [n]: the row after the residual add, then normalised
    const int64_t r = blockIdx.x;
    // The norm weights are no kernel's output: the first batch into registers, the rest into L2, while the previous
    // kernel finishes.
    float wpre[NORM_U];
    norm_weights_pre(w, n, wpre);
    if (w)
        for (int i = NORM_U * blockDim.x + threadIdx.x * 32; i < n; i += blockDim.x * 32) st_prefetch_l2(w + i);
    st_pdl_wait();
    st_pdl_trigger();
    double ss = norm_load_sumsq(sv, x + r * n, res ? res + r * n : NULL, n, true);
    const float scale = norm_rms_scale(ss, n, eps);
    norm_scale(sv, w, scale, y ? y + r * n : NULL, n, wpre);
    if (!yq) return;  // uniform across the block
    __syncthreads();
    block_quant<false>(fmt, sv, yq + r * qstride, n / 32, 0, n / 32);
}

// One row of n = 256 k <= 256 G32 elements, group g owning 256-element span g (lane l: elements 256 g + 32 j + l,
// j < 8): the sum of squares meets in one barrier, and each group scales and quantizes its span from registers
// (quant256 / quant32, as block_quant). k_rmsnorm_act's chain has three barriers and two shared-memory passes.
// Bit for bit k_rmsnorm_act's outputs up to the double sum of squares' order (decode_rows.cuh wn_scale).
#define SPAN_MAX_N (256 * G32)  // one group per 256-element span, at most G32 groups per block

__global__ void __launch_bounds__(SPAN_MAX_N / 8)
    k_rmsnorm_act_span(float *__restrict__ y, uint8_t *__restrict__ yq, int fmt, float *x, const float *res,
                       const float *__restrict__ w, int n, float eps) {
    __shared__ double part[G32];
    const int lane = threadIdx.x % G32, g = threadIdx.x / G32, ng = blockDim.x / G32;
    const int i0 = 256 * g + lane;
    float wv[8], v[8];
#pragma unroll
    for (int j = 0; j < 8; j++) wv[j] = w[i0 + 32 * j];  // the norm weights are no kernel's output
    st_pdl_wait_trigger<1>();
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = x[i0 + 32 * j];
    if (res) {
        float r[8];
#pragma unroll
        for (int j = 0; j < 8; j++) r[j] = res[i0 + 32 * j];
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = __fadd_rn(v[j], r[j]), x[i0 + 32 * j] = v[j];  // (each element: one thread)
    }
    double ss = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) ss += (double)__fmul_rn(v[j], v[j]);
    ss = g32_sum_d(ss);
    if (lane == 0) part[g] = ss;
    __syncthreads();
    ss = 0;
    for (int k = 0; k < ng; k++) ss += part[k];
    const float scale = norm_rms_scale(ss, n, eps);
#pragma unroll
    for (int j = 0; j < 8; j++) v[j] = __fmul_rn(__fmul_rn(v[j], scale), wv[j]);
    if (y)
#pragma unroll
        for (int j = 0; j < 8; j++) y[i0 + 32 * j] = v[j];
    if (!yq) return;
    if (fmt == ST_TYPE_Q8_K) quant256(yq, n / 32, g, lane, v);
    else
#pragma unroll
        for (int j = 0; j < 8; j++) quant32(yq, n / 32, 8 * g + j, lane, v[j], fmt == ST_TYPE_Q8_1);
}

static int g_norm_span = -1;  // st_cuda_rmsnorm_act_set_span; -1: STRATA_NORM_SPAN (default 1)
extern "C" void st_cuda_rmsnorm_act_set_span(int on) { g_norm_span = on < 0 ? -1 : on != 0; }
static bool norm_span_on(void) {
    static int env = -1;
    return g_norm_span >= 0 ? g_norm_span != 0 : env_switch(&env, "STRATA_NORM_SPAN", 1) != 0;
}

extern "C" int st_cuda_rmsnorm_act(float *y, void *yq, int act_format, float *x, const float *res, const float *w,
                                   int n_rows, int n, float eps, cudaStream_t stream) {
    if (!y && !yq) return st_err("st_cuda_rmsnorm_act: no output given");
    if (n <= 0 || n > NORM_MAX_N || n % 32)
        return st_err("st_cuda_rmsnorm_act: row of %d elements (need a multiple of 32, at most %d)", n, NORM_MAX_N);
    if (yq && (!dec_fmt_ok(act_format) || (act_format == ST_TYPE_Q8_K && n % 256)))
        return st_err("st_cuda_rmsnorm_act: activation format %d for rows of %d (Q8_0, Q8_1, or Q8_K with n %% 256 "
                      "== 0)", act_format, n);
    if (yq && ((uintptr_t)yq & 15)) return st_err("st_cuda_rmsnorm_act: yq must be 16-byte aligned");
    if (n_rows <= 0) return 0;
    if (n_rows == 1 && w && n % 256 == 0 && n <= SPAN_MAX_N && norm_span_on()) {
        st_dec_launch(k_rmsnorm_act_span, dim3(1), dim3(G32 * (n / 256)), 0, stream, y, (uint8_t *)yq, act_format, x,
                      res, w, n, eps);
        return launch_check("rmsnorm_act");
    }
    st_dec_launch(k_rmsnorm_act, dim3(n_rows), dim3(DEC_THREADS), sizeof(float) * (size_t)n, stream, y, (uint8_t *)yq,
                  act_format, x, res, w, n, eps, (long long)st_q8_1_row_bytes(n));
    return launch_check("rmsnorm_act");
}

// ---- matrix-vector rows ----------------------------------------------------------------------------------------

extern "C" int st_cuda_dec_supported(int t) {
#define X(T) \
    if (t == T) return 1;
    DEC_TYPES(X)
#undef X
    return 0;
}

// ---- Q/K/V in one launch ---------------------------------------------------------------------------------------

struct multi_args {
    const uint8_t *W[ST_DEC_MAX_MATS];      // matrix i: [n_out][row_bytes[i]] rows of type[i]
    float *y[ST_DEC_MAX_MATS];              // matrix i: [n_out] f32 outputs
    const float *add[ST_DEC_MAX_MATS];      // matrix i: [n_out] f32 added to the dots, or NULL
    long long row_bytes[ST_DEC_MAX_MATS];
    int type[ST_DEC_MAX_MATS];
    int row_end[ST_DEC_MAX_MATS];  // cumulative row counts
    int n_mat;
    int nitems;                    // 32-element items per row (ne0 / 32)
    const uint8_t *xq;             // the quantized input row (planar, st_q8_1_row_bytes(ne0))
};

// ADD (the O launch with the residual add): a separate instance, since holding the addend across the dot costs the
// plain instances 4-10 registers (one spilled).
// TB (a mixed-type launch of two k-quant types, e.g. Q4_K Q/K with V in Q6_K, as Q4_K_M files have): rows of type
// TYPE take its inlined row dot, the others TB's: a branch uniform in each group. The runtime switch of instance 0
// took 3.6 us per launch on such layers against 2.8 for all-Q4_K layers (CUPTI timeline, 2026-12-04d).
// NI > 0 (MULTI_STAGE instances, nitems <= 32 NI): the group's row is loaded and unpacked into registers before the
// dependency wait (row_stage), so after it only the activations' L2 round trip and the dots remain.
template <int TYPE, bool ADD, int TB = 0, int NI = 0>
__device__ __forceinline__ void mmvq_multi_body(const multi_args &a) {
    dec_stage_tables<TYPE>();  // (DEC_SMEM_TABLES; before any group leaves)
    const int lane = threadIdx.x % G32;
    const int grow = blockIdx.x * (blockDim.x / G32) + threadIdx.x / G32;  // global output row
    if (grow >= a.row_end[a.n_mat - 1]) {  // whole groups leave (no barrier below)
        st_pdl_wait_trigger<8>();  // (a block's exit before its wait would be fine too; keep the rule simple)
        return;
    }
    // Select the matrix with an unrolled scan, so the argument arrays are never indexed dynamically.
    const uint8_t *W = a.W[0];
    float *y = a.y[0];
    const float *add = ADD ? a.add[0] : nullptr;
    long long rb = a.row_bytes[0];
    int type = a.type[0], r = grow;
#pragma unroll
    for (int i = 1; i < ST_DEC_MAX_MATS; i++)
        if (i < a.n_mat && grow >= a.row_end[i - 1]) {
            W = a.W[i], y = a.y[i], rb = a.row_bytes[i], type = a.type[i];
            if (ADD) add = a.add[i];
            r = grow - a.row_end[i - 1];
        }
    const uint8_t *wr = W + (size_t)r * (size_t)rb;
    constexpr int TO = TB > 0 ? TB : TYPE;  // the other type of a two-type instance
    const bool own = TB == 0 || type == TYPE;
    st_qb_w w[NI > 0 ? NI : 1];
    if constexpr (NI > 0) {
        if (own) row_stage<TYPE, DEC_TAB | DEC_PROBE(DEC_PK_MULTI), NI>(wr, a.nitems, lane, w);
        else row_stage<TO, DEC_TAB | DEC_PROBE(DEC_PK_MULTI), NI>(wr, a.nitems, lane, w);
    } else {
        for (long long off = (long long)lane * 128; off < rb; off += 32 * 128) st_prefetch_l2(wr + off);
    }
    st_pdl_wait_trigger<8>();  // xq (and y's previous readers) belong to earlier kernels
    const float base = ADD && add ? add[r] : 0.0f;  // (issued before the dot: its L2 round trip off the chain)
    float v;
    if constexpr (NI > 0)
        v = own ? row_dot_staged<TYPE, NI>(w, a.xq, a.nitems, lane) : row_dot_staged<TO, NI>(w, a.xq, a.nitems, lane);
    else if constexpr (TYPE == 0) v = row_dot_any<DEC_PROBE(DEC_PK_MULTI)>(type, wr, a.xq, a.nitems, lane);
    else if constexpr (TB != 0)
        v = type == TYPE ? row_dot<TYPE, DEC_TAB | DEC_PROBE(DEC_PK_MULTI)>(wr, a.xq, a.nitems, lane)
                         : row_dot<TB, DEC_TAB | DEC_PROBE(DEC_PK_MULTI)>(wr, a.xq, a.nitems, lane);
    else v = row_dot<TYPE, DEC_TAB | DEC_PROBE(DEC_PK_MULTI)>(wr, a.xq, a.nitems, lane);
    if (lane == 0) y[r] = ADD && add ? __fadd_rn(base, v) : v;
}

template <int TYPE, int NI = 0>
__global__ void __launch_bounds__(DEC_THREADS, TYPE == 0 ? DEC_MINB_MULTI0 : 0) k_mmvq_multi(const multi_args a) {
    mmvq_multi_body<TYPE, false, 0, NI>(a);
}
template <int TYPE, int NI = 0>
__global__ void __launch_bounds__(DEC_THREADS, TYPE == 0 ? DEC_MINB_MULTI0 : 0) k_mmvq_multi_add(const multi_args a) {
    mmvq_multi_body<TYPE, true, 0, NI>(a);
}
template <int TA, int TB, int NI = 0>
__global__ void __launch_bounds__(DEC_THREADS, DEC_MINB_MULTI0) k_mmvq_multi_mix(const multi_args a) {
    mmvq_multi_body<TA, false, TB, NI>(a);
}

// MULTI_STAGE (default 1; -DMULTI_STAGE=0 for an A/B build): the Q/K/V and O launches of the common k-quant / Q8_0
// types with rows of at most 128 items (4096 weights) take the NI instances (mmvq_multi_body: the row in registers
// before the wait, instead of an L2 prefetch and the loads after it). H200, Qwen3-30B-A3B Q4_K_M (2026-12-05b):
// tg128 587.8 vs 564.0 tok/s (+4.2%); the same launches without any weight bytes (DEC_UNPACK_PROBE=2,
// DEC_PROBE_KERNELS=1) 603.1, so the staging removes ~60% of what those weights cost the chain.
#ifndef MULTI_STAGE
#define MULTI_STAGE 1
#endif
#define MULTI_STAGE_TYPES(X) X(ST_TYPE_Q4_K) X(ST_TYPE_Q5_K) X(ST_TYPE_Q6_K) X(ST_TYPE_Q8_0)

#if MULTI_STAGE
// The staged instances' items per lane for rows of nitems items: 2 or 4, or 0 (not staged).
static int multi_stage_ni(int nitems) {
    return nitems > 4 * G32 || dec_switch_forced() ? 0 : nitems > 2 * G32 ? 4 : 2;
}
#endif

// The staged instance for matrices all of type t (add: the residual instance), or NULL.
static void (*multi_stage_pick(int t, int nitems, bool add))(const multi_args) {
#if MULTI_STAGE
    const int ni = multi_stage_ni(nitems);
    if (!ni) return NULL;
    const bool two = ni == 2;
#define STAGE_CASE(T)                                                                                              \
    case T:                                                                                                        \
        if (add) return two ? k_mmvq_multi_add<T, 2> : k_mmvq_multi_add<T, 4>;                                     \
        return two ? k_mmvq_multi<T, 2> : k_mmvq_multi<T, 4>;
    switch (t) {
        MULTI_STAGE_TYPES(STAGE_CASE)
    default: break;
    }
#undef STAGE_CASE
#else
    (void)t, (void)nitems, (void)add;
#endif
    return NULL;
}

// The two-type instances (k_mmvq_multi_mix): the k-quant mixes of the common *_K_M / *_K_S files' Q/K/V.
#define DEC_MIX_PAIRS(X)                                                                                           \
    X(ST_TYPE_Q4_K, ST_TYPE_Q6_K) X(ST_TYPE_Q5_K, ST_TYPE_Q6_K) X(ST_TYPE_Q4_K, ST_TYPE_Q5_K)                       \
        X(ST_TYPE_Q3_K, ST_TYPE_Q5_K) X(ST_TYPE_Q3_K, ST_TYPE_Q4_K) X(ST_TYPE_Q2_K, ST_TYPE_Q3_K)

// k_mmvq_multi_mix for mats of exactly the types {ta, tb} (either order), else NULL.
static void (*mix_pick(const st_cuda_dec_mat *mats, int n_mat, int nitems))(const multi_args) {
    int ta = mats[0].type, tb = -1;
    for (int i = 1; i < n_mat; i++)
        if (mats[i].type != ta) {
            if (tb >= 0 && mats[i].type != tb) return NULL;
            tb = mats[i].type;
        }
    if (tb < 0 || dec_switch_forced()) return NULL;
#if MULTI_STAGE
    const int ni = multi_stage_ni(nitems);
#define MIX_CASE(A, B)                                                                                             \
    if ((ta == A && tb == B) || (ta == B && tb == A))                                                              \
        return ni == 0 ? k_mmvq_multi_mix<A, B> : ni == 4 ? k_mmvq_multi_mix<A, B, 4> : k_mmvq_multi_mix<A, B, 2>;
#else
#define MIX_CASE(A, B)                                                                                             \
    if ((ta == A && tb == B) || (ta == B && tb == A)) return k_mmvq_multi_mix<A, B>;
#endif
    DEC_MIX_PAIRS(MIX_CASE)
#undef MIX_CASE
    return NULL;
}

extern "C" int st_cuda_mmvq_multi(const st_cuda_dec_mat *mats, int n_mat, int64_t ne0, const void *xq,
                                  cudaStream_t stream) {
    if (n_mat < 1 || n_mat > ST_DEC_MAX_MATS) return st_err("st_cuda_mmvq_multi: %d matrices (1..%d)", n_mat, ST_DEC_MAX_MATS);
    if (ne0 <= 0 || ne0 % 32) return st_err("st_cuda_mmvq_multi: ne0 %lld", (long long)ne0);
    if (!xq || ((uintptr_t)xq & 15)) return st_err("st_cuda_mmvq_multi: xq must be a 16-byte aligned device pointer");
    multi_args a;
    memset(&a, 0, sizeof a);
    int64_t rows = 0;
    for (int i = 0; i < n_mat; i++) {
        const st_cuda_dec_mat *m = &mats[i];
        const st_type_info *ti = st_type_get(m->type);
        if (!ti || !st_cuda_dec_supported(m->type) || ne0 % ti->block_size)
            return st_err("st_cuda_mmvq_multi: matrix %d: type %s with rows of %lld is not supported", i,
                          st_type_name(m->type), (long long)ne0);
        if (!m->W || !m->y || ((uintptr_t)m->W & 15) || ((uintptr_t)m->y & 3) || m->n_out <= 0)
            return st_err("st_cuda_mmvq_multi: matrix %d: bad pointer or n_out %lld", i, (long long)m->n_out);
        rows += m->n_out;
        if (rows > INT32_MAX / 2) return st_err("st_cuda_mmvq_multi: %lld rows in all", (long long)rows);
        a.W[i] = (const uint8_t *)m->W;
        a.y[i] = m->y;
        a.add[i] = m->add;
        a.row_bytes[i] = (long long)st_row_size(m->type, ne0);
        a.type[i] = m->type;
        a.row_end[i] = (int)rows;
    }
    a.n_mat = n_mat;
    a.nitems = (int)(ne0 / 32);
    a.xq = (const uint8_t *)xq;
    const int per_block = DEC_THREADS / G32;
    int same = 1, any_add = 0;
    for (int i = 1; i < n_mat; i++) same &= mats[i].type == mats[0].type;
    for (int i = 0; i < n_mat; i++) any_add |= mats[i].add != NULL;
    void (*fn)(const multi_args) = any_add ? k_mmvq_multi_add<0> : k_mmvq_multi<0>;
    void (*staged)(const multi_args) = same ? multi_stage_pick(mats[0].type, a.nitems, any_add) : NULL;
    if (staged) fn = staged;
    else if (same && any_add) DEC_PICK(fn, k_mmvq_multi_add, mats[0].type);
    else if (same) DEC_PICK(fn, k_mmvq_multi, mats[0].type);
    else if (!any_add) {
        void (*mix)(const multi_args) = mix_pick(mats, n_mat, a.nitems);
        if (mix) fn = mix;
    }
    st_dec_launch(fn, dim3((unsigned)((rows + per_block - 1) / per_block)), dim3(DEC_THREADS), 0, stream, a);
    return launch_check("mmvq_multi");
}

// ---- router: float matvec + softmax + top-k ---------------------------------------------------------------------

// The launch's completion counter: 1 in the block that finished last (all blocks' writes visible), else 0.
__device__ __forceinline__ bool last_block_done(int32_t *counter) {
    __shared__ int last;
    return st_block_arrive_last(counter, (int)gridDim.x, last);
}

// The router launch's body; SPLIT (one token, hybrid CPU misses): after the route and the count the last block
// also classifies the route and rings the doorbell (hybrid_bell.cuh), in place of a classify launch.
template <typename T, bool SPLIT>
__device__ __forceinline__ void router_body(const T *__restrict__ W, int ne0, int E, const float *__restrict__ x,
                                            int n_tok, int K, int norm, float *logits, int32_t *__restrict__ ids,
                                            float *__restrict__ weights, int32_t *counter,
                                            const st_hy_count_args &cnt, const st_hy_split_args *split,
                                            const st_hy_snap_args *snap = nullptr) {
    const int lane = threadIdx.x % G32, g = threadIdx.x / G32, ng = blockDim.x / G32;
    const int task = blockIdx.x * ng + g;  // (token, expert) logit
    const int n4 = ne0 / 4;
    float4 wp[ROUTER_PRE];
    const bool have = task < E * n_tok;
    const T *w = W + (int64_t)(have ? task % E : 0) * ne0;
    router_preload<T>(w, n4, lane, have, wp);
    st_pdl_wait();
    st_pdl_trigger();
    // (hybrid.h st_hy_snap_args) The snapshot's entry load issues here and is used after the dot, off the chain; after
    // the wait, so that a copy finishing while the FFN norm runs still counts (a snapshot taken before it, as the
    // publish locks of 2026-12-02d were, moved the prefetch's deadline and lost 1.1%).
    const bool snapping = snap && snap->snap && have && lane == 0;
    const uint8_t *snap_gate = snapping ? st_tbl_entry(snap->table, 3 * (size_t)(task % E)) : nullptr;
    if (snap && snap->progress && blockIdx.x == 0 && threadIdx.x == 0) {
        atomicExch(snap->progress, snap->layer);  // before the layer's MoE kernels read the table (prefetch rule 1)
        __threadfence();
    }
    if (have) {
        const int r = task % E, t = task / E;
        const float sum = router_dot<T>(w, wp, x + (int64_t)t * ne0, n4, lane);
        if (lane == 0) logits[(int64_t)t * E + r] = sum;
    }
    if (snapping) snap->snap[task % E] = hy_in_vram(snap_gate, snap->vram_lo, snap->vram_hi);
    if (!counter || !last_block_done(counter)) return;  // the last block routes each token (NULL: logits only)
    for (int t = g; t < n_tok; t += ng)
        route_group(logits + (int64_t)t * E, E, K, norm, ids + (int64_t)t * K, weights + (int64_t)t * K);
    if constexpr (SPLIT) {
        // One token, routed by warp 0, which classifies it with the count inside (lane k reads back the ids[k] it
        // wrote itself: no barrier before the classify).
        hy_classify_block(*split, ids, K, &cnt);
        return;
    }
    if (!cnt.counts) return;
    __syncthreads();  // the ids of every token
    hy_count_pairs(ids, n_tok * K, cnt, threadIdx.x, blockDim.x);
}

template <typename T>
__global__ void __launch_bounds__(DEC_THREADS)
    k_router(const T *__restrict__ W, int ne0, int E, const float *__restrict__ x, int n_tok, int K, int norm,
             float *logits, int32_t *__restrict__ ids, float *__restrict__ weights, int32_t *counter,
             const st_hy_count_args cnt, const st_hy_snap_args snap) {
    router_body<T, false>(W, ne0, E, x, n_tok, K, norm, logits, ids, weights, counter, cnt, nullptr, &snap);
}

template <typename T>
__global__ void __launch_bounds__(DEC_THREADS)
    k_router_split(const T *__restrict__ W, int ne0, int E, const float *__restrict__ x, int K, int norm,
                   float *logits, int32_t *__restrict__ ids, float *__restrict__ weights, int32_t *counter,
                   const st_hy_count_args cnt, const st_hy_split_args split) {
    router_body<T, true>(W, ne0, E, x, 1, K, norm, logits, ids, weights, counter, cnt, &split);
}

// FFN RMSNorm + router + top-k of one token in one launch (st_cuda_router_norm_topk): every block normalises the
// row itself into shared memory (x + res from L2) and computes its logits from it; the last block, when every block
// has read x, writes x + res back, xn and the quantized row, and routes. Bit for bit st_cuda_rmsnorm_act +
// st_cuda_router_topk.
template <typename T>
__global__ void __launch_bounds__(DEC_THREADS)
    k_router_norm(const T *__restrict__ W, int ne0, int E, float *x, const float *res, const float *__restrict__ nw,
                  float eps, float *xn, uint8_t *__restrict__ xq, int fmt, int K, int norm, float *logits,
                  int32_t *__restrict__ ids, float *__restrict__ weights, int32_t *counter) {
    extern __shared__ float sv[];  // [ne0]: x + res, then normalised
    const int lane = threadIdx.x % G32, g = threadIdx.x / G32, ng = blockDim.x / G32;
    const int r = blockIdx.x * ng + g, n4 = ne0 / 4;
    float4 wp[ROUTER_PRE];
    const bool have = r < E;
    const T *w = W + (int64_t)(have ? r : 0) * ne0;
    router_preload<T>(w, n4, lane, have, wp);
    for (int i = threadIdx.x * 32; i < ne0; i += blockDim.x * 32) st_prefetch_l2(nw + i);
    st_pdl_wait();
    st_pdl_trigger();
    block_rmsnorm_smem(sv, x, res, nw, ne0, eps);  // (x + res written back below)
    if (have) {
        const float sum = router_dot<T>(w, wp, sv, n4, lane);
        if (lane == 0) logits[r] = sum;
    }
    if (!last_block_done(counter)) return;
    // Every block has read x and res: the residual sum goes back to x; xn and the gate/up input row; the route.
    if (res)
        for (int i0 = threadIdx.x; i0 < ne0; i0 += blockDim.x * NORM_U) {
            float v[NORM_U];
#pragma unroll
            for (int u = 0; u < NORM_U; u++) {
                const int i = i0 + u * (int)blockDim.x;
                v[u] = i < ne0 ? __fadd_rn(__ldcg(x + i), __ldcg(res + i)) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < NORM_U; u++) {
                const int i = i0 + u * (int)blockDim.x;
                if (i < ne0) x[i] = v[u];
            }
        }
    if (xn)
        for (int i = threadIdx.x; i < ne0; i += blockDim.x) xn[i] = sv[i];
    block_quant<false>(fmt, sv, xq, ne0 / 32, 0, ne0 / 32);
    if (g == 0) route_group(logits, E, K, norm, ids, weights);
}

// The FFN norm folded into the router launch (st_cuda_router_fold; F32 router, one token): every group loads the
// residual row x, computes the RMS scale by a butterfly and normalises the row in registers (decode_rows.cuh wn_*:
// no shared memory, no barrier) and dots it with its router row; ne0 / 256 groups past the E logit groups quantize
// one 256-element span each: no group waits for another, unlike k_router_norm's last block, and none does both (every
// (E / spans)-th logit group quantizing a span after its dot instead: tg128 544.5 vs 550.1 tok/s, bench/ab.sh
// 2026-12-04e).
__global__ void __launch_bounds__(ROUTER_GROUPS * G32)
    k_router_fold(const float *__restrict__ W, int ne0, int E, const float *__restrict__ x,
                  const float *__restrict__ nw, float eps, uint8_t *__restrict__ xq, int fmt, float *logits) {
    const int lane = threadIdx.x % G32, g = threadIdx.x / G32, ng = blockDim.x / G32;
    const int task = blockIdx.x * ng + g, n4 = ne0 / 4;
    const bool have = task < E;
    float4 wp[ROUTER_PRE], gw[WN_U];
    router_preload<float>(W + (int64_t)(have ? task : 0) * ne0, n4, lane, have, wp);
    wn_load(gw, nw, n4, lane);
    st_pdl_wait_trigger<2>();
    float4 v[WN_U];
    wn_load(v, x, n4, lane);
    wn_apply(v, wn_scale(v, ne0, eps), gw);
    if (have) {
        float sum = 0.0f;  // router_dot's order over the normalised row
#pragma unroll
        for (int u = 0; u < ROUTER_PRE; u++)
            if (lane + u * G32 < n4) router_acc4(sum, wp[u], v[u]);
        sum = g32_sum_f(sum);
        if (lane == 0) logits[task] = sum;
    }
    if (task >= E && task - E < ne0 / 256) wn_quant_span(v, task - E, fmt, xq, ne0 / 32, lane);
}

extern "C" int st_cuda_router_fold_supported(int w_type, int64_t ne0, int n_expert, int act_format) {
    return w_type == ST_TYPE_F32 && ne0 > 0 && ne0 % 256 == 0 && ne0 <= 4 * G32 * WN_U &&
           n_expert >= 1 && n_expert <= 65536 && dec_fmt_ok(act_format);
}

extern "C" int st_cuda_router_fold(int w_type, const void *W, int64_t ne0, int n_expert, const float *x,
                                   const float *norm_w, float eps, void *xq, int act_format, float *logits,
                                   cudaStream_t stream) {
    if (!st_cuda_router_fold_supported(w_type, ne0, n_expert, act_format))
        return st_err("st_cuda_router_fold: router %s, rows of %lld, %d experts, activation format %d (F32, a "
                      "multiple of 256 up to %d, 1 to 65536 experts)", st_type_name(w_type),
                      (long long)ne0, n_expert, act_format, 4 * G32 * WN_U);
    if (!W || !x || !norm_w || !xq || !logits || ((uintptr_t)W & 15) || ((uintptr_t)x & 15) ||
        ((uintptr_t)norm_w & 15) || ((uintptr_t)xq & 15))
        return st_err("st_cuda_router_fold: W, x, norm_w and xq must be 16-byte aligned device pointers; logits "
                      "non-NULL");
    const int groups = n_expert + (int)(ne0 / 256);
    const unsigned grid = (unsigned)((groups + ROUTER_GROUPS - 1) / ROUTER_GROUPS);
    st_dec_launch(k_router_fold, dim3(grid), dim3(ROUTER_GROUPS * G32), 0, stream, (const float *)W, (int)ne0,
                  n_expert, x, norm_w, eps, (uint8_t *)xq, act_format, logits);
    return launch_check("router_fold");
}

// GO(T) for the router's weight type T (F32, F16, BF16); any other type returns an error naming fn.
#define ROUTER_TYPE_DISPATCH(w_type, GO, fn)                                                                       \
    do {                                                                                                           \
        if ((w_type) == ST_TYPE_F32) GO(float);                                                                    \
        else if ((w_type) == ST_TYPE_F16) GO(__half);                                                              \
        else if ((w_type) == ST_TYPE_BF16) GO(__nv_bfloat16);                                                      \
        else return st_err("%s: router type %s (F32, F16 or BF16)", fn, st_type_name(w_type));                     \
    } while (0)

// k_router over n_tok tokens (counters NULL: the logits only, no route).
static int router_launch(const char *fn, int w_type, const void *W, int64_t ne0, int n_expert, const float *x,
                         int n_tok, int n_used, int norm, float *logits, int32_t *ids, float *weights,
                         int32_t *counters, const st_hy_count_args *count, const st_hy_snap_args *snap,
                         cudaStream_t stream) {
    const st_hy_count_args cnt = count ? *count : st_hy_count_args{};
    const st_hy_snap_args sn = snap ? *snap : st_hy_snap_args{};
    if (((uintptr_t)W & 15) || ((uintptr_t)x & 15) || !logits)
        return st_err("%s: W and x must be 16-byte aligned; logits non-NULL", fn);
    const int per_block = ROUTER_GROUPS;  // few logits per block: the rows are pulled by many SMs at once
    const unsigned grid = (unsigned)((n_expert * n_tok + per_block - 1) / per_block);
#define RT_GO(T)                                                                                                   \
    st_dec_launch(k_router<T>, dim3(grid), dim3(ROUTER_GROUPS * G32), 0, stream, (const T *)W, (int)ne0, n_expert, \
                  x, n_tok, n_used, norm, logits, ids, weights, counters, cnt, sn)
    ROUTER_TYPE_DISPATCH(w_type, RT_GO, fn);
#undef RT_GO
    return launch_check(fn);
}

// The routing launches' argument checks (fn names the caller): shape, outputs, and the count's match.
static int router_route_check(const char *fn, int64_t ne0, int n_expert, int n_tok, int n_used, const int32_t *ids,
                              const float *weights, const int32_t *counters, const st_hy_count_args *count) {
    if (ne0 <= 0 || ne0 % 4 || ne0 > INT32_MAX / 2 || n_expert <= 0 || n_expert > ROUTER_MAX_PER_LANE * G32 ||
        n_used <= 0 || n_used > G32 || n_used > n_expert || n_tok <= 0 || n_tok > 64)
        return st_err("%s: unsupported shape: ne0 %lld (multiple of 4), %d experts (<= %d), %d used (<= 32), %d tokens",
                      fn, (long long)ne0, n_expert, ROUTER_MAX_PER_LANE * G32, n_used, n_tok);
    if (!ids || !weights || !counters) return st_err("%s: ids, weights and counters must be non-NULL", fn);
    if (count && count->counts && (count->n_expert != n_expert || (count->sel_miss && !count->table)))
        return st_err("%s: the count's %d experts (of %d) or its table", fn, count->n_expert, n_expert);
    return 0;
}

extern "C" int st_cuda_router_topk_count(int w_type, const void *W, int64_t ne0, int n_expert, const float *x,
                                         int n_tok, int n_used, int norm, float *logits, int32_t *ids,
                                         float *weights, int32_t *counters, const st_hy_count_args *count,
                                         cudaStream_t stream) {
    if (router_route_check("st_cuda_router_topk", ne0, n_expert, n_tok, n_used, ids, weights, counters, count))
        return -1;
    return router_launch("st_cuda_router_topk", w_type, W, ne0, n_expert, x, n_tok, n_used, norm, logits, ids,
                         weights, counters, count, NULL, stream);
}

extern "C" int st_cuda_router_topk_split(int w_type, const void *W, int64_t ne0, int n_expert, const float *x,
                                         int n_used, int norm, float *logits, int32_t *ids, float *weights,
                                         int32_t *counters, const st_hy_count_args *count,
                                         const st_hy_split_args *split, cudaStream_t stream) {
    const char *fn = "st_cuda_router_topk_split";
    if (router_route_check(fn, ne0, n_expert, 1, n_used, ids, weights, counters, count)) return -1;
    if (!logits || !count || !count->counts || !split)
        return st_err("%s: logits, the count and the split must be given", fn);
    if (split->n_expert != n_expert || !split->table || !split->carry || !split->ids_gpu || !split->meta ||
        !split->x || !split->hx || split->n_embd != (int)ne0 || !split->seq != !split->bell)
        return st_err("%s: the split does not match the layer (%d experts, %lld inputs)", fn, n_expert,
                      (long long)ne0);
    if (count->table != split->table || count->vram_lo != split->vram_lo || count->vram_hi != split->vram_hi)
        return st_err("%s: the count and the split must name the same table and VRAM cache (the classify's table "
                      "reads serve both)", fn);
    if (((uintptr_t)W & 15) || ((uintptr_t)x & 15)) return st_err("%s: W and x must be 16-byte aligned", fn);
    const unsigned grid = (unsigned)((n_expert + ROUTER_GROUPS - 1) / ROUTER_GROUPS);
#define RS_GO(T)                                                                                                   \
    st_dec_launch(k_router_split<T>, dim3(grid), dim3(ROUTER_GROUPS * G32), 0, stream, (const T *)W, (int)ne0,     \
                  n_expert, x, n_used, norm, logits, ids, weights, counters, *count, *split)
    ROUTER_TYPE_DISPATCH(w_type, RS_GO, fn);
#undef RS_GO
    return launch_check(fn);
}

extern "C" int st_cuda_router_topk(int w_type, const void *W, int64_t ne0, int n_expert, const float *x, int n_tok,
                                   int n_used, int norm, float *logits, int32_t *ids, float *weights,
                                   int32_t *counters, cudaStream_t stream) {
    return st_cuda_router_topk_count(w_type, W, ne0, n_expert, x, n_tok, n_used, norm, logits, ids, weights,
                                     counters, NULL, stream);
}

extern "C" int st_cuda_router_logits(int w_type, const void *W, int64_t ne0, int n_expert, const float *x,
                                     float *logits, const st_hy_snap_args *snap, cudaStream_t stream) {
    if (ne0 <= 0 || ne0 % 4 || ne0 > INT32_MAX / 2 || n_expert <= 0)
        return st_err("st_cuda_router_logits: unsupported shape: ne0 %lld (multiple of 4), %d experts",
                      (long long)ne0, n_expert);
    if (snap && snap->snap && !snap->table)
        return st_err("st_cuda_router_logits: a snapshot without its table");
    return router_launch("st_cuda_router_logits", w_type, W, ne0, n_expert, x, 1, 1, 0, logits, NULL, NULL, NULL,
                         NULL, snap, stream);
}

// Test hook: route_ids_by_logits (GLU_FAST_ROUTE's ids) against route_group, one 32-lane block per row.
__global__ void k_route_fast_check(const float *l, int E, int K, int norm, int32_t *ids_fast, int32_t *ok,
                                   int32_t *ids_ref, float *w_ref) {
    __shared__ int32_t s_ids[G32];
    const int row = blockIdx.x;
    const bool r = route_ids_by_logits(l + (size_t)row * E, E, K, s_ids);
    if ((int)threadIdx.x < K) ids_fast[(size_t)row * K + threadIdx.x] = r ? s_ids[threadIdx.x] : -1;
    if (threadIdx.x == 0) ok[row] = r;
    route_group(l + (size_t)row * E, E, K, norm, ids_ref + (size_t)row * K, w_ref + (size_t)row * K);
}

extern "C" int st_cuda_route_fast_check(const float *logits, int n_rows, int n_expert, int n_used, int norm,
                                        int32_t *ids_fast, int32_t *ok, int32_t *ids_ref, float *w_ref,
                                        cudaStream_t stream) {
    if (n_rows <= 0 || n_expert <= 0 || n_expert > 4 * G32 || n_used <= 0 || n_used > G32)
        return st_err("st_cuda_route_fast_check: %d rows of %d experts (<= %d), %d used (<= %d)", n_rows, n_expert,
                      4 * G32, n_used, G32);
    k_route_fast_check<<<n_rows, G32, 0, stream>>>(logits, n_expert, n_used, norm, ids_fast, ok, ids_ref, w_ref);
    return launch_check("route_fast_check");
}

extern "C" int st_cuda_router_norm_topk(int w_type, const void *W, int64_t ne0, int n_expert, float *x,
                                        const float *res, const float *norm_w, float eps, float *xn, void *xq,
                                        int act_format, int n_used, int norm, float *logits, int32_t *ids,
                                        float *weights, int32_t *counters, cudaStream_t stream) {
    if (ne0 <= 0 || ne0 % 32 || ne0 > NORM_MAX_N || n_expert <= 0 || n_expert > ROUTER_MAX_PER_LANE * G32 ||
        n_used <= 0 || n_used > G32 || n_used > n_expert)
        return st_err("st_cuda_router_norm_topk: unsupported shape: ne0 %lld (multiple of 32, <= %d), %d experts "
                      "(<= %d), %d used (<= 32)", (long long)ne0, NORM_MAX_N, n_expert, ROUTER_MAX_PER_LANE * G32,
                      n_used);
    if (!dec_fmt_ok(act_format) || (act_format == ST_TYPE_Q8_K && ne0 % 256))
        return st_err("st_cuda_router_norm_topk: activation format %d for rows of %lld", act_format, (long long)ne0);
    if (((uintptr_t)W & 15) || ((uintptr_t)xq & 15) || !x || !norm_w || !xq || !logits || !ids || !weights ||
        !counters)
        return st_err("st_cuda_router_norm_topk: W and xq must be 16-byte aligned; x, norm_w, outputs, counters "
                      "non-NULL");
    const unsigned grid = (unsigned)((n_expert + ROUTER_GROUPS - 1) / ROUTER_GROUPS);
    const size_t smem = sizeof(float) * (size_t)ne0;
#define RN_GO(T)                                                                                                   \
    st_dec_launch(k_router_norm<T>, dim3(grid), dim3(ROUTER_GROUPS * G32), smem, stream, (const T *)W, (int)ne0,   \
                  n_expert, x, res, norm_w, eps, xn, (uint8_t *)xq, act_format, n_used, norm, logits, ids, weights, \
                  counters)
    ROUTER_TYPE_DISPATCH(w_type, RN_GO, "st_cuda_router_norm_topk");
#undef RN_GO
    return launch_check("router_norm_topk");
}

// ---- MoE down projection + weighted sum + residual -----------------------------------------------------------

// down_quant_rows: Q8_K blocks per group in flight (24 blocks over 8 groups for Qwen3-30B-A3B: all at once). ptxas
// (sm_90): k_moe_down_q's Q6_K / Q4_K instances spill 68 / 20 bytes with 3, 12 / 20 with 2, 4 / 0 with 1 (A/B: -D).
#ifndef DQ_T
#define DQ_T 3
#endif

// One token's K activation rows of n_ff (f32 at act, the GLU's output: plain loads, so a SM's blocks share the
// lines) quantized in the CPU format fmt into shared rows aq of stride aq_stride, by all the block's groups; ends
// with a barrier. Q8_K: DQ_T 256-element blocks per group at once (their loads and reductions interleave).
__device__ __forceinline__ void down_quant_rows(const float *act, int K, int n_ff, int fmt, uint8_t *aq,
                                                long long aq_stride) {
    const int lane = threadIdx.x % G32, g = threadIdx.x / G32, ng = blockDim.x / G32, nb = n_ff / 32;
    if (fmt == ST_TYPE_Q8_K) {
        const int nkb = n_ff / 256, ntask = K * nkb;
        for (int t0 = g; t0 < ntask; t0 += ng * DQ_T) {
            float v[DQ_T][8];
#pragma unroll
            for (int q = 0; q < DQ_T; q++) {
                const int task = t0 + q * ng, k = task / nkb, kb = task % nkb;
#pragma unroll
                for (int j = 0; j < 8; j++)
                    v[q][j] = task < ntask ? act[(size_t)k * n_ff + kb * 256 + 32 * j + lane] : 0.0f;
            }
#pragma unroll
            for (int q = 0; q < DQ_T; q++) {
                const int task = t0 + q * ng;
                if (task < ntask) quant256(aq + (size_t)(task / nkb) * aq_stride, nb, task % nkb, lane, v[q]);
            }
        }
    } else {
        for (int task = g; task < K * nb; task += ng) {
            const int k = task / nb, b = task % nb;
            quant32(aq + (size_t)k * aq_stride, nb, b, lane, act[(size_t)k * n_ff + b * 32 + lane],
                    fmt == ST_TYPE_Q8_1);
        }
    }
    __syncthreads();
}

#if DOWN_GUESS_COUNT
#include <cstdio>  // (device printf)
// DOWN_GUESS_COUNT (diagnostic build, default 0; timings of such a build mean nothing): how often the down kernel's
// guess (the ids read before its wait) names the expert the route chose. Threads k < K compare after the wait; each
// block adds its hits and misses, and every 2^16 blocks thread 0 of the block that completes them prints the running
// totals (device printf, flushed at the next synchronisation). A miss costs the table's round trip after the wait and
// wastes the guessed rows' L2 prefetch; DOWN_SPEC (removed 2026-12-05e) paid a whole second pass of row dots for it.
__device__ unsigned long long g_down_guess_stats[3];  // hits, misses, blocks
__device__ __noinline__ void down_guess_count(const int32_t *ids_t, const int32_t *guess, int K) {
    __shared__ int s_miss;
    if (threadIdx.x == 0) s_miss = 0;
    __syncthreads();
    if ((int)threadIdx.x < K && __ldcg(ids_t + threadIdx.x) != guess[threadIdx.x]) atomicAdd(&s_miss, 1);
    __syncthreads();
    if (threadIdx.x != 0) return;
    atomicAdd(&g_down_guess_stats[0], (unsigned long long)(K - s_miss));
    atomicAdd(&g_down_guess_stats[1], (unsigned long long)s_miss);
    const unsigned long long b = atomicAdd(&g_down_guess_stats[2], 1ull) + 1;
    if ((b & 0xffffull) == 0)
        printf("down guess: %llu blocks, %llu hits, %llu misses\n", b, __ldcg(&g_down_guess_stats[0]),
               __ldcg(&g_down_guess_stats[1]));
}
#endif

// One pass of a down group's DOWN_N (rank, row) tasks t0 + n ng: each task's row at base_of(n, k, p) + r row_bytes
// (NULL: NaN, as row_dotN's skipped rows), dotted together, into ys[k][rr].
template <int TYPE, typename BaseOf>
__device__ __forceinline__ void down_pass(int t0, int ng, int K, int t, int r0, int d, int pbase, long long row_bytes,
                                          const uint8_t *actq, long long aq_stride, int nitems, int lane,
                                          BaseOf base_of, float (*ys)[DOWN_R]) {
    const uint8_t *rows[DOWN_N], *xqs[DOWN_N];
#pragma unroll
    for (int n = 0; n < DOWN_N; n++) {
        const int task = t0 + n * ng, k = task / DOWN_R, r = r0 + task % DOWN_R, p = t * K + k;
        rows[n] = NULL;
        xqs[n] = actq;
        if (task < K * DOWN_R && r < d) {
            const uint8_t *base = base_of(n, k, p);
            if (base) rows[n] = base + (size_t)r * (size_t)row_bytes;
            xqs[n] = actq + (size_t)(p - pbase) * (size_t)aq_stride;
        }
    }
    float v[DOWN_N];
    row_dotN<TYPE, DOWN_N, DEC_TAB | DEC_PROBE(DEC_PK_DOWN)>(rows, xqs, nitems, lane, v);
#pragma unroll
    for (int n = 0; n < DOWN_N; n++) {
        const int task = t0 + n * ng;
        if (task < K * DOWN_R && lane == 0) ys[task / DOWN_R][task % DOWN_R] = v[n];
    }
}

// grid (ceil(n_embd / DOWN_R), n_tok): the block computes rows r0 .. r0 + DOWN_R - 1 of every selected expert of
// token t (group tasks (k, row)), then combines them in rank order. JOIN (one token, the hybrid split fused,
// hybrid.h): where a rank is the CPU's (id -1), the block waits for the host's answer and takes that rank's row from
// the CPU's output, as st_cuda_hy_combine would after a down_split.
// SELFQ (st_cuda_moe_down_q): the input is the GLU's f32 output act, which every block quantizes itself
// (down_quant_rows) into shared rows of stride aq_stride, so the GLU launch ends without its chunk tail.
template <int TYPE, bool JOIN, bool SELFQ = false>
__device__ __forceinline__ void moe_down_body(int type, const uint8_t *const *__restrict__ tbl, int E, int nitems,
                                              long long row_bytes, int d, const uint8_t *__restrict__ actq,
                                              long long aq_stride, const int32_t *__restrict__ ids,
                                              const float *__restrict__ wts, int K, float *out, const float *add,
                                              float *yk, const st_hy_join_args *join, int pf,
                                              const float *act = nullptr, int n_ff = 0, int fmt = 0) {
    __shared__ float ys[DOWN_MAX_USED][DOWN_R];
    PH_MARK(0);
    dec_stage_tables<TYPE>();  // (DEC_SMEM_TABLES)
    const int lane = threadIdx.x % G32, g = threadIdx.x / G32, ng = blockDim.x / G32;
    const int t = blockIdx.y, r0 = blockIdx.x * DOWN_R;
#if ST_DOWN_ROWS4 && DOWN_GUESS
    // The guess (below the wait's rows): expert id and down-matrix base of each rank, read before the wait.
    __shared__ int32_t s_ge[DOWN_MAX_USED];
    __shared__ const uint8_t *s_gb[DOWN_MAX_USED];
#endif
    if (threadIdx.x < K) {
        // Before the wait, while the GLU finishes: each rank's expert and its down rows' base, and (pf) the block's
        // DOWN_R rows of it (contiguous) into L2. The ids may still be an earlier layer's (the GLU writes them; nothing
        // orders that before this read): a wasted prefetch and a guess the row dots find wrong after the wait, never
        // a wrong result. (The table entries of a layer's experts hold valid bytes whenever the layer's routing
        // count has run, hybrid.h rule 1, and the router that runs it finished before this block started.)
        const int e = __ldcg(ids + (size_t)t * K + threadIdx.x);
        const uint8_t *base = e >= 0 && e < E ? st_tbl_entry(tbl, 3 * e + 2) : NULL;
        if (!JOIN && (pf & 1) && base && r0 < d)
            st_prefetch_l2_range(base + (size_t)r0 * (size_t)row_bytes,
                                 (size_t)min(DOWN_R, d - r0) * (size_t)row_bytes);
#if ST_DOWN_ROWS4 && DOWN_GUESS
        // pf & 2 (tests: st_cuda_dec_down_guess_poison): every guess wrong, its base the next expert's rows, so the
        // path after a wrong guess runs (with the ids in stream order before the launch, tests never miss otherwise)
        const bool poison = (pf & 2) != 0;
        s_ge[threadIdx.x] = poison ? -2 : base ? e : -1;
        s_gb[threadIdx.x] = poison && base ? st_tbl_entry(tbl, 3 * ((e + 1) % E) + 2) : base;
#endif
    }
#if ST_DOWN_ROWS4 && DOWN_GUESS
    __syncthreads();  // (before the wait: costs the chain nothing)
#endif
    st_pdl_wait_trigger<16>();
    PH_MARK(1);
#if ST_DOWN_ROWS4 && DOWN_GUESS && DOWN_GUESS_COUNT
    down_guess_count(ids + (size_t)t * K, s_ge, K);
#endif
    int pbase = 0;  // the first rank row of actq
    if constexpr (SELFQ) {
        extern __shared__ __align__(16) uint8_t dq_rows[];  // [K][aq_stride]: token t's K rows, quantized here
        down_quant_rows(act + (size_t)t * K * n_ff, K, n_ff, fmt, dq_rows, aq_stride);
        actq = dq_rows;
        pbase = t * K;
    }
#if ST_DOWN_ROWS4
    if constexpr (TYPE != 0) {
        for (int t0 = g; t0 < K * DOWN_R; t0 += ng * DOWN_N)
            down_pass<TYPE>(t0, ng, K, t, r0, d, pbase, row_bytes, actq, aq_stride, nitems, lane,
                            [&](int, int k, int p) -> const uint8_t * {
                                const int e = ids[p];
#if DOWN_GUESS
                                // Right guess (the common case): the base without the table's round trip.
                                if (e == s_ge[k]) return s_gb[k];
#endif
                                return e >= 0 && e < E ? st_tbl_entry(tbl, 3 * e + 2) : NULL;
                            },
                            ys);
    } else
#endif
    for (int task = g; task < K * DOWN_R; task += ng) {
        const int k = task / DOWN_R, rr = task % DOWN_R, r = r0 + rr, p = t * K + k;
        const int e = ids[p];
        float v = f_nan();
        if (r < d && e >= 0 && e < E) {
            const uint8_t *row = st_tbl_entry(tbl, 3 * e + 2) + (size_t)r * (size_t)row_bytes;
            const uint8_t *xr = actq + (size_t)(p - pbase) * (size_t)aq_stride;
            if constexpr (TYPE == 0) v = row_dot_any<DEC_PROBE(DEC_PK_DOWN)>(type, row, xr, nitems, lane);
            else v = row_dot<TYPE, DEC_TAB | DEC_PROBE(DEC_PK_DOWN)>(row, xr, nitems, lane);
        }
        if (lane == 0) ys[k][rr] = v;
    }
    __syncthreads();
    PH_MARK(2);
    const int rr = threadIdx.x, r = r0 + rr;
    if constexpr (JOIN) {
        if (hy_any_cpu_rank(ids, K)) {  // (uniform in the block)
            __shared__ int s_ok;
            if (threadIdx.x == 0) s_ok = hy_wait_answer(*join);
            __syncthreads();
            if (rr < DOWN_R && r < d) {
                const float o = hy_join_row(ids, wts, K, &ys[0][rr], DOWN_R, join->y_cpu + r, d,
                                            s_ok ? 0.0f : __int_as_float(0x7fc00000));
                out[r] = add ? __fadd_rn(add[r], o) : o;
            }
            return;
        }
    }
    if (rr < DOWN_R && r < d) {
        if (yk && hy_any_cpu_rank(ids, K)) {  // split (one token): a CPU rank (-1) defers the sum to the combine kernel
            for (int k = 0; k < K; k++) yk[(size_t)k * d + r] = ys[k][rr];
            return;
        }
        const float o = rank_sum(&ys[0][0], DOWN_R, rr, wts + (size_t)t * K, K);
        const size_t at = (size_t)t * d + r;
        out[at] = add ? __fadd_rn(add[at], o) : o;
        PH_MARK(3);
        PH_DONE(1, "down (p1 wait, p2 rows, p3 rank sum + store)");
    }
}

template <int TYPE>
__global__ void __launch_bounds__(DEC_THREADS, DEC_MINB_DOWN)
    k_moe_down(int type, const uint8_t *const *__restrict__ tbl, int E, int nitems, long long row_bytes, int d,
               const uint8_t *__restrict__ actq, long long aq_stride, const int32_t *__restrict__ ids,
               const float *__restrict__ wts, int K, float *out, const float *add, float *yk, int pf) {
    moe_down_body<TYPE, false>(type, tbl, E, nitems, row_bytes, d, actq, aq_stride, ids, wts, K, out, add, yk,
                               nullptr, pf);
}

template <int TYPE>
__global__ void __launch_bounds__(DEC_THREADS, DEC_MINB_DOWN)
    k_moe_down_join(int type, const uint8_t *const *__restrict__ tbl, int E, int nitems, long long row_bytes, int d,
                    const uint8_t *__restrict__ actq, long long aq_stride, const int32_t *__restrict__ ids,
                    const float *__restrict__ wts, int K, float *out, const float *add, const st_hy_join_args join) {
    moe_down_body<TYPE, true>(type, tbl, E, nitems, row_bytes, d, actq, aq_stride, ids, wts, K, out, add, nullptr,
                              &join, 0);
}

// STRATA_DOWN_PF=0|1: the down kernel's L2 prefetch of its rows before the dependency wait (A/B; default 1). The
// down blocks become resident as the GLU's blocks leave, so the prefetch fills the GLU's tail (its last blocks and
// chunk quantization) with the down weights' DRAM reads. Measured 2026-12-01f (bench/ab.sh, Qwen3-30B-A3B Q4_K_M):
// tg128 490.86 vs 485.18 all in VRAM (+1.2%), 356.8 vs 341.6 at --gpu-mem 16 (+4.4%).
static int g_down_guess_poison;  // st_cuda_dec_down_guess_poison
extern "C" int st_cuda_dec_down_guess_poison(int on) {
    g_down_guess_poison = on != 0;
    return ST_DOWN_ROWS4 && DOWN_GUESS;
}

// The down kernels' pf argument: bit 0 the L2 prefetch of the guessed rows (STRATA_DOWN_PF=0: off), bit 1 the
// tests' poisoned guesses.
static int down_prefetch_env(void) {
    static int v = -1;
    return (env_switch(&v, "STRATA_DOWN_PF", 1) != 0) | (g_down_guess_poison ? 2 : 0);
}

static int moe_down_sum(const char *what, int down_type, const void *const *table, int n_expert, int64_t n_embd,
                        int64_t n_ff, const void *actq, const int32_t *ids, const float *weights, int n_tok,
                        int n_used, float *out, const float *add, float *yk, const st_hy_join_args *join,
                        cudaStream_t stream) {
    const st_type_info *ti = st_type_get(down_type);
    if (!ti || !st_cuda_dec_supported(down_type) || n_ff <= 0 || n_ff % ti->block_size || n_ff > INT32_MAX / 2)
        return st_err("%s: down type %s with rows of %lld is not supported", what, st_type_name(down_type),
                      (long long)n_ff);
    if (n_embd <= 0 || n_embd > INT32_MAX / 2 || n_tok <= 0 || n_tok > 65535 || n_used <= 0 ||
        n_used > DOWN_MAX_USED || n_expert <= 0 || ((yk || join) && n_tok != 1))
        return st_err("%s: n_embd %lld, %d tokens (one with a per-rank output or a join), %d used (<= %d)", what,
                      (long long)n_embd, n_tok, n_used, DOWN_MAX_USED);
    if (!table || !actq || !ids || !weights || !out || ((uintptr_t)actq & 15))
        return st_err("%s: NULL or misaligned device pointer", what);
    const dim3 grid((unsigned)((n_embd + DOWN_R - 1) / DOWN_R), (unsigned)n_tok);
    if (join) {
        decltype(&k_moe_down_join<0>) fn;  // (DEC_PICK's cases assign `fn`)
        DEC_PICK(fn, k_moe_down_join, down_type);
        st_dec_launch(fn, grid, dim3(DEC_THREADS), 0, stream, down_type, (const uint8_t *const *)table, n_expert,
                      (int)(n_ff / 32), (long long)st_row_size(down_type, n_ff), (int)n_embd, (const uint8_t *)actq,
                      (long long)st_q8_1_row_bytes(n_ff), ids, weights, n_used, out, add, *join);
        return launch_check(what);
    }
    decltype(&k_moe_down<0>) fn;
    DEC_PICK(fn, k_moe_down, down_type);
    st_dec_launch(fn, grid, dim3(DEC_THREADS), 0, stream, down_type, (const uint8_t *const *)table, n_expert,
                  (int)(n_ff / 32), (long long)st_row_size(down_type, n_ff), (int)n_embd, (const uint8_t *)actq,
                  (long long)st_q8_1_row_bytes(n_ff), ids, weights, n_used, out, add, yk, down_prefetch_env());
    return launch_check(what);
}

extern "C" int st_cuda_moe_down_split(int down_type, const void *const *table, int n_expert, int64_t n_embd,
                                      int64_t n_ff, const void *actq, const int32_t *ids_gpu, const float *weights,
                                      int n_used, float *out, const float *add, float *yk, cudaStream_t stream) {
    if (!yk) return st_err("st_cuda_moe_down_split: no per-rank output");
    return moe_down_sum("st_cuda_moe_down_split", down_type, table, n_expert, n_embd, n_ff, actq, ids_gpu, weights, 1,
                        n_used, out, add, yk, NULL, stream);
}

extern "C" int st_cuda_moe_down_join(int down_type, const void *const *table, int n_expert, int64_t n_embd,
                                     int64_t n_ff, const void *actq, const int32_t *ids_gpu, const float *weights,
                                     int n_used, float *out, const float *add, const st_hy_join_args *join,
                                     cudaStream_t stream) {
    if (!join || !join->y_cpu || !join->seq || !join->bell || !join->leader)
        return st_err("st_cuda_moe_down_join: the join's CPU rows, doorbell and leader words must be given");
    return moe_down_sum("st_cuda_moe_down_join", down_type, table, n_expert, n_embd, n_ff, actq, ids_gpu, weights, 1,
                        n_used, out, add, NULL, join, stream);
}

extern "C" int st_cuda_moe_down_sum(int down_type, const void *const *table, int n_expert, int64_t n_embd,
                                    int64_t n_ff, const void *actq, const int32_t *ids, const float *weights, int n_tok,
                                    int n_used, float *out, const float *add, cudaStream_t stream) {
    return moe_down_sum("st_cuda_moe_down_sum", down_type, table, n_expert, n_embd, n_ff, actq, ids, weights, n_tok,
                        n_used, out, add, NULL, NULL, stream);
}

// ---- MoE down projection with the input quantization in its prologue ------------------------------------------
//
// st_cuda_moe_down_q: the GLU writes f32 only (no chunk tail: no fence, counter or last block between the GLU's rows
// and the down launch), and every down block quantizes the K activation rows of its token into shared memory itself
// (moe_down_body's SELFQ prologue: K * n_ff / 256 Q8_K blocks, 24 for the Qwen3-30B-A3B shape, 3 per group) before
// the row dots of k_moe_down. grid (ceil(n_embd / DOWN_R), n_tok); dynamic shared memory: K planar rows of n_ff.
template <int TYPE>
__global__ void __launch_bounds__(DEC_THREADS, DEC_MINB_DOWN)
    k_moe_down_q(int type, const uint8_t *const *__restrict__ tbl, int E, int nitems, long long row_bytes, int d,
                 const float *__restrict__ act, int n_ff, int fmt, long long aq_stride,
                 const int32_t *__restrict__ ids, const float *__restrict__ wts, int K, float *out, const float *add,
                 int pf) {
    moe_down_body<TYPE, false, true>(type, tbl, E, nitems, row_bytes, d, nullptr, aq_stride, ids, wts, K, out, add,
                                     nullptr, nullptr, pf, act, n_ff, fmt);
}
#define DEC_PICK_CASE_k_moe_down_q(T) \
    case T: fn = k_moe_down_q<T>; break;

extern "C" size_t st_cuda_moe_down_q_smem(int64_t n_ff, int n_used) {
    return (size_t)st_q8_1_row_bytes(n_ff) * (size_t)(n_used > 0 ? n_used : 1);
}

extern "C" int st_cuda_moe_down_q(int down_type, const void *const *table, int n_expert, int64_t n_embd,
                                  int64_t n_ff, const float *act, int act_format, const int32_t *ids,
                                  const float *weights, int n_tok, int n_used, float *out, const float *add,
                                  cudaStream_t stream) {
    const st_type_info *ti = st_type_get(down_type);
    if (!ti || !st_cuda_dec_supported(down_type) || n_ff <= 0 || n_ff % ti->block_size || n_ff > INT32_MAX / 2)
        return st_err("st_cuda_moe_down_q: down type %s with rows of %lld is not supported",
                      st_type_name(down_type), (long long)n_ff);
    if (!dec_fmt_ok(act_format) || n_ff % 32 || (act_format == ST_TYPE_Q8_K && n_ff % 256))
        return st_err("st_cuda_moe_down_q: n_ff %lld and activation format %d", (long long)n_ff, act_format);
    if (n_embd <= 0 || n_embd > INT32_MAX / 2 || n_tok <= 0 || n_tok > 65535 || n_used <= 0 ||
        n_used > DOWN_MAX_USED || n_expert <= 0)
        return st_err("st_cuda_moe_down_q: n_embd %lld, %d tokens, %d used (<= %d)", (long long)n_embd, n_tok, n_used,
                      DOWN_MAX_USED);
    const size_t smem = st_cuda_moe_down_q_smem(n_ff, n_used);
    if (smem > ST_DEC_DOWN_Q_MAX_SMEM)
        return st_err("st_cuda_moe_down_q: %d x %lld activations need %zu bytes of shared memory (at most %d)", n_used,
                      (long long)n_ff, smem, ST_DEC_DOWN_Q_MAX_SMEM);
    if (!table || !act || !ids || !weights || !out || ((uintptr_t)act & 15))
        return st_err("st_cuda_moe_down_q: NULL or misaligned device pointer");
    const dim3 grid((unsigned)((n_embd + DOWN_R - 1) / DOWN_R), (unsigned)n_tok);
    decltype(&k_moe_down_q<0>) fn;
    DEC_PICK(fn, k_moe_down_q, down_type);
    st_dec_launch(fn, grid, dim3(DEC_THREADS), smem, stream, down_type, (const uint8_t *const *)table, n_expert,
                  (int)(n_ff / 32), (long long)st_row_size(down_type, n_ff), (int)n_embd, act, (int)n_ff, act_format,
                  (long long)st_q8_1_row_bytes(n_ff), ids, weights, n_used, out, add, down_prefetch_env());
    return launch_check("moe_down_q");
}
