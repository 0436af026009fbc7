// The one-token MoE gate/up GLU kernels (see decode.h, decode.cu's notes on groups and rows; decode_impl.cuh).
#include "cuda/decode_impl.cuh"

// ---- MoE gate/up GLU + quantization of the down projection's input -------------------------------------------


extern "C" size_t st_cuda_dec_counters_bytes(int64_t n_ff_exp, int n_used, int n_tok) {
    const int64_t chunks = n_ff_exp > 0 ? (n_ff_exp + 31) / 32 : 1;
    return sizeof(int32_t) * (size_t)(1 + (int64_t)(n_used > 0 ? n_used : 1) * (n_tok > 0 ? n_tok : 1) * chunks);
}

// GLU_SIDE_DOWN_PF (A/B build, default 0; with GLU_FAST_ROUTE): the side block, once it has routed, bulk-prefetches
// the chosen experts' whole down matrices into L2 (st_cuda_glu_affine's down0; one instruction per expert, ~1.3 MB
// each at the 30B shape), GLU_SIDE_DOWN_PF_NS nanoseconds later (0: at once), so the down weights stream while the
// GLU's row blocks are still on theirs and through the GLU's tail (chunk arrivals and quantization, ~2 us per layer
// in which DRAM idles), instead of from when the down's own blocks become resident. The phase probe of 2026-12-05f
// puts the down's row dots at ~9,500 cycles after its wait. Against it: the 2026-11-30j GLU blocks' prefetch of the
// down matrices before their row dots lost 2.1% (contention), after them +0.4%.
#ifndef GLU_SIDE_DOWN_PF
#define GLU_SIDE_DOWN_PF 0
#endif
#ifndef GLU_SIDE_DOWN_PF_NS
#define GLU_SIDE_DOWN_PF_NS 0
#endif
// st_cuda_glu_affine as the kernels take it (the down matrices only in GLU_SIDE_DOWN_PF builds: the other builds'
// kernel parameters stay as measured)
struct glu_affine {
    const void *gate0, *up0;  // expert e's gate / up rows at gate0 / up0 + e stride; gate0 NULL: the table
    long long stride;
#if GLU_SIDE_DOWN_PF
    const void *down0;  // expert e's down matrix at down0 + e down_stride, down_bytes long; NULL: no prefetch
    long long down_stride, down_bytes;
#endif
};
static glu_affine glu_affine_of(const st_cuda_glu_affine *a) {
    glu_affine g;
    memset(&g, 0, sizeof g);
    if (a) {
        g.gate0 = a->gate0, g.up0 = a->up0, g.stride = a->stride;
#if GLU_SIDE_DOWN_PF
        g.down0 = a->down0, g.down_stride = a->down_stride, g.down_bytes = a->down_bytes;
#endif
    }
    return g;
}

// grid (n_ff / (R DEC_GROUPS), n_pairs): group g of block (bx, p) computes rows bx R DEC_GROUPS + g + j DEC_GROUPS,
// j < R, of pair p. R = 2 (default): the two rows' gate and up weights in flight together and the activation block
// loaded once per item (rows_dot_x), and half the groups, so the Qwen3-30B-A3B shape's 384 blocks fit in one wave
// (R = 1: 768 blocks at 5 per SM, 1.16 waves). The per-row arithmetic is the same either way (bit-identical).
// ROUTE (one token): the ids are not an input; every block routes the token itself from the router's logits
// (route_group, the CPU's route, as the router kernel's last block would) and block (0, 0) writes ids and weights
// for the down kernel: the router launch ends with its logits, without its fence / counter / route tail. With
// GLU_FAST_ROUTE (the default) the blocks take only their ids, and a side column writes ids and weights (below).
struct glu_route {
    const float *logits;  // [E] the router's logits
    int norm;             // renormalise the top-k weights
    int32_t *ids;         // [K] out
    float *weights;       // [K] out
    glu_affine aff;       // (GLU_AFFINE) the experts' affine layout
};

// GLU_AFFINE (default 1; -DGLU_AFFINE=0 for an A/B build): the routing launch takes its expert's gate / up rows from
// the affine layout the engine passes (every weight in VRAM: expert e at a fixed stride) instead of the table. The
// table entry is an L2 load that only the route can address, so it sat on the chain between the route and the rows'
// loads (the table's entries staged in shared memory before the wait lost 3% on 2026-11-30, when the ids came from
// the router, at the cost of every block's staging). H100, 2026-12-05e (bench/ab.sh, PDL_EARLY on): tg128 553.1 vs
// 551.0 (+0.4%; predicted +0.8-1.4%).
#ifndef GLU_AFFINE
#define GLU_AFFINE 1
#endif

// The rows of GLU block bx of pair p (token t): the group of `lane` computes rows r + j DEC_GROUPS, j < R (r = bx R
// DEC_GROUPS + group), from expert e's gate / up matrices (e outside [0, E): NaN rows, for an invalid id or a rank
// the GPU skips), then the last block of each chunk quantizes it. The shape is the kernel's before it was shared
// (the check, the table's loads and the input row inside the branch; lane and r computed by the caller before its
// dependency wait): sharing it with the table's loads before the branch made the routing instance spill more (Q4_K
// 16/12 bytes against 12/8) and all in VRAM lost 4.6% (tg128 489 vs 512 tok/s, 2026-12-02e). In this shape ptxas
// gives every two-row instance the registers and spills of 7d65b25's kernel.
template <int TYPE, int R>
__device__ __forceinline__ void glu_rows(int type, const uint8_t *const *__restrict__ tbl, int e, int E, int nitems,
                                         long long row_bytes, int n_ff, const uint8_t *__restrict__ xq,
                                         long long xq_stride, int t, int p, int bx, int lane, int r, float *act,
                                         uint8_t *__restrict__ actq, long long aq_stride, int fmt, int chunk_rows,
                                         int32_t *counters, const glu_affine *aff = nullptr) {
    float v[R];
#pragma unroll
    for (int j = 0; j < R; j++) v[j] = f_nan();
    if (e >= 0 && e < E) {
        const uint8_t *gate, *up;
        if (GLU_AFFINE && aff && aff->gate0) {  // (uniform: a kernel parameter)
            gate = (const uint8_t *)aff->gate0 + (long long)e * aff->stride;
            up = (const uint8_t *)aff->up0 + (long long)e * aff->stride;
        } else {
            gate = st_tbl_entry(tbl, 3 * e), up = st_tbl_entry(tbl, 3 * e + 1);
        }
        const uint8_t *x = xq + (size_t)t * (size_t)xq_stride;
        float a[R], b[R];
        if constexpr (TYPE == 0) {
#pragma unroll
            for (int j = 0; j < R; j++) {
                const size_t off = (size_t)(r + j * DEC_GROUPS) * (size_t)row_bytes;
                row_dot2_any(type, gate + off, up + off, x, nitems, lane, &a[j], &b[j]);
            }
        } else if constexpr (R == 1) {
            row_dot2<TYPE, DEC_TAB | DEC_PROBE(DEC_PK_GLU)>(gate + (size_t)r * (size_t)row_bytes,
                                                            up + (size_t)r * (size_t)row_bytes, x, nitems, lane, a[0],
                                                            b[0]);
        } else {
            const uint8_t *rows[2 * R];
            float o[2 * R];
#pragma unroll
            for (int j = 0; j < R; j++) {
                const size_t off = (size_t)(r + j * DEC_GROUPS) * (size_t)row_bytes;
                rows[2 * j] = gate + off, rows[2 * j + 1] = up + off;
            }
            rows_dot_x<TYPE, 2 * R, DEC_TAB | DEC_PROBE(DEC_PK_GLU)>(rows, x, nitems, lane, o);
#pragma unroll
            for (int j = 0; j < R; j++) a[j] = o[2 * j], b[j] = o[2 * j + 1];
        }
#pragma unroll
        for (int j = 0; j < R; j++) v[j] = st_am_silu_mul(a[j], b[j]);  // the CPU's SwiGLU, bit for bit
    }
    float *arow = act + (size_t)p * (size_t)n_ff;
    if (lane == 0)
#pragma unroll
        for (int j = 0; j < R; j++) arow[r + j * DEC_GROUPS] = v[j];
    PH_MARK(4);  // (thread 0: its own group's rows done)
    if (!actq) return;  // f32 output only (st_cuda_moe_glu): the down kernel quantizes
    // The last block to finish a chunk of chunk_rows rows quantizes it (chunk_rows % (R DEC_GROUPS) == 0, so a
    // block lies in one chunk).
    const int per_chunk = chunk_rows / (R * DEC_GROUPS), chunk = bx / per_chunk;
    __shared__ int last;
    const bool is_last = st_block_arrive_last(counters + (size_t)p * (size_t)(n_ff / chunk_rows) + chunk, per_chunk,
                                              last);
    PH_MARK(5);
    if (!is_last) {
        PH_DONE(0, "glu (p1 wait, p2 logits loaded, p3 route, p4 rows, p5 arrive, p6 chunk quant)");
        return;
    }
    block_quant<true>(fmt, arow + (size_t)chunk * chunk_rows, actq + (size_t)p * (size_t)aq_stride, n_ff / 32,
                      chunk * chunk_rows / 32, chunk_rows / 32);
    PH_MARK(6);
    PH_DONE(0, "glu (p1 wait, p2 logits loaded, p3 route, p4 rows, p5 arrive, p6 chunk quant)");
}

// GLU_FAST_ROUTE (default 1; -DGLU_FAST_ROUTE=0 for an A/B build): the routing GLU blocks take their ids from the
// logits' top K + 1 (route_ids_by_logits; route_group where it cannot answer), and a side column of blocks (grid.x
// one wider; only rank 0's works) runs route_group for the ids and weights the down kernel reads, so no GLU block
// computes the softmax on its way to its rows. The DEC_PHASE_PROBE of 2026-12-05f put the route at ~4,100 cycles of
// each GLU block's chain after its wait, ~3,100 with this (H100); bench/ab.sh on the H100: tg128 562.89 vs 558.55
// (+0.78%), tg128 @ d16384 407.61 vs 407.04 (bench/results/2026-12-05f-h100.md). Its predecessor with block (0, 0)
// routing in full as the writer among the row blocks lost 1.4% (2026-12-04d, docs/experiments/2026-12-04d-*.patch).
#ifndef GLU_FAST_ROUTE
#define GLU_FAST_ROUTE 1
#endif
// (GLU_FAST_ROUTE: one out-of-line copy for the side column and the fallback; two inlined routes cost the rows'
// registers spills)
static __device__ __noinline__ void glu_route_group(const float *l, int E, int K, int norm, int32_t *ids, float *w) {
    route_group(l, E, K, norm, ids, w);
}
#if GLU_FAST_ROUTE
// The side column's work, by warp 0 of rank 0's side block: the ids and weights the down kernel reads, then
// (GLU_SIDE_DOWN_PF) the chosen experts' down matrices into L2.
static __device__ __forceinline__ void glu_side_route(const glu_route &rt, int E, int K, int lane) {
    glu_route_group(rt.logits, E, K, rt.norm, rt.ids, rt.weights);
#if GLU_SIDE_DOWN_PF
    if (!rt.aff.down0 || lane >= K) return;
#if GLU_SIDE_DOWN_PF_NS > 0
    __nanosleep(GLU_SIDE_DOWN_PF_NS);
#endif
    const int ek = rt.ids[lane];  // (the id this lane wrote itself)
    if (ek >= 0 && ek < E)
        st_prefetch_l2_range((const uint8_t *)rt.aff.down0 + (long long)ek * rt.aff.down_stride,
                             (size_t)rt.aff.down_bytes);
#else
    (void)lane;
#endif
}
#endif

// One token's route from the router's logits, by warp 0 of the block (route_group, as the router kernel's last block
// would), into the block's shared memory; returns rank p's expert. write: also ids and weights to rt (one block).
// FAST (GLU_FAST_ROUTE, never with write): the ids from the logits' top K + 1 where route_ids_by_logits can answer.
template <bool FAST = false>
__device__ __forceinline__ int glu_route_rank(const glu_route &rt, int E, int K, int p, int g, bool write) {
    __shared__ int32_t s_ids[G32];
    __shared__ float s_w[G32];
    if constexpr (FAST) {
        if (g == 0 && !route_ids_by_logits(rt.logits, E, K, s_ids))
            glu_route_group(rt.logits, E, K, rt.norm, s_ids, s_w);
    } else if (g == 0) {
        route_group(rt.logits, E, K, rt.norm, s_ids, s_w);
    }
    __syncthreads();
    const int e = s_ids[p];
    if (write && threadIdx.x < K) rt.ids[threadIdx.x] = s_ids[threadIdx.x], rt.weights[threadIdx.x] = s_w[threadIdx.x];
    return e;
}

template <int TYPE, int R = 1, bool ROUTE = false>
__global__ void __launch_bounds__(DEC_THREADS, R == 2 ? 3 : 0)
    k_moe_glu(int type, const uint8_t *const *__restrict__ tbl, int E, int nitems, long long row_bytes, int n_ff,
              const uint8_t *__restrict__ xq, long long xq_stride, const int32_t *__restrict__ ids, int K,
              float *act, uint8_t *__restrict__ actq, long long aq_stride, int fmt, int chunk_rows,
              int32_t *counters, const glu_route rt) {
    PH_MARK(0);
    dec_stage_tables<TYPE>();  // (DEC_SMEM_TABLES)
    const int lane = threadIdx.x % G32, g = threadIdx.x / G32;
    const int p = blockIdx.y, t = p / K, r = blockIdx.x * R * DEC_GROUPS + g;
    st_pdl_wait_trigger<32>();  // ids (or logits), xq: earlier kernels
    PH_MARK(1);
    int e;
    if constexpr (ROUTE) {
#if GLU_FAST_ROUTE
        if (blockIdx.x == gridDim.x - 1) {  // the side column
            if (p == 0 && g == 0) glu_side_route(rt, E, K, lane);
            return;
        }
        e = glu_route_rank<true>(rt, E, K, p, g, false);
#else
        e = glu_route_rank(rt, E, K, p, g, blockIdx.x == 0 && p == 0);
#endif
    } else {
        e = ids[p];
    }
    PH_MARK(3);  // (GLU_FAST_ROUTE: mark 2, the logits loaded, inside route_ids_by_logits)
    glu_rows<TYPE, R>(type, tbl, e, E, nitems, row_bytes, n_ff, xq, xq_stride, t, p, blockIdx.x, lane, r, act, actq,
                      aq_stride, fmt, chunk_rows, counters, ROUTE ? &rt.aff : nullptr);
}

// The hybrid side-block GLU (st_cuda_moe_route_glu_hy), one token, two rows per group: a 1-D grid, block 0 the side
// block, block 1 + p * nbx + bx the GLU block bx of rank p (nbx = n_ff / (2 DEC_GROUPS)), so all fit one wave as
// the routing k_moe_glu<T, 2, true> does (the side block first: its ring starts the CPU as early as the router's
// tail did).
struct glu_hy_args {
    st_hy_count_args cnt;  // the side block's count (pf.progress cleared)
    st_hy_split_args split;
    int has_split;         // 0: count only
};

template <int TYPE>
__global__ void __launch_bounds__(DEC_THREADS, 3)
    k_moe_glu_hy(int type, const uint8_t *const *__restrict__ tbl, int E, int nitems, long long row_bytes, int n_ff,
                 const uint8_t *__restrict__ xq, int K, float *act, uint8_t *__restrict__ actq, long long aq_stride,
                 int fmt, int chunk_rows, int32_t *counters, const glu_route rt, const glu_hy_args hy) {
    dec_stage_tables<TYPE>();  // (DEC_SMEM_TABLES)
    const int g = threadIdx.x / G32;
    st_pdl_wait();  // logits, xq: earlier kernels
    st_pdl_trigger();
    if (blockIdx.x == 0) {  // the side block: the router tail's work (warp 0 reads back the ids it wrote itself)
        if (g == 0) route_group(rt.logits, E, K, rt.norm, rt.ids, rt.weights);
        if (hy.has_split) {
            hy_classify_block(hy.split, rt.ids, K, &hy.cnt);
        } else if (hy.cnt.counts) {
            __syncthreads();
            hy_count_pairs(rt.ids, K, hy.cnt, threadIdx.x, blockDim.x);
        }
        return;
    }
    const int nbx = n_ff / (2 * DEC_GROUPS), q = blockIdx.x - 1, p = q / nbx;
    int e = glu_route_rank(rt, E, K, p, g, false);
    if (hy.has_split && e >= 0 && e < E) {  // F 0: a miss is the CPU's rank, as the side block's classify reads it
        if (hy.split.snap) {  // (the router's snapshot: the side block decides from the same bytes)
            if (!hy.split.snap[e]) e = -1;
        } else {
            if (!hy_in_vram(st_tbl_entry(tbl, 3 * e), hy.split.vram_lo, hy.split.vram_hi)) e = -1;
        }
    }
    const int bx = q % nbx;
    glu_rows<TYPE, 2>(type, tbl, e, E, nitems, row_bytes, n_ff, xq, 0, 0, p, bx, threadIdx.x % G32,
                      bx * 2 * DEC_GROUPS + g, act, actq, aq_stride, fmt, chunk_rows, counters);
}

// STRATA_GLU_ROWS=1: one row per group (A/B against the default 2).
static int glu_rows_env(void) {
    static int v = -1;
    return env_switch(&v, "STRATA_GLU_ROWS", 2) == 1 ? 1 : 2;
}

#define DEC_PICK_CASE_k_moe_glu2(T) \
    case T: fn = route ? k_moe_glu<T, 2, true> : k_moe_glu<T, 2>; break;

#define DEC_PICK_CASE_k_moe_glu_hy(T) \
    case T: fn = k_moe_glu_hy<T>; break;

// hy (with rt): the side-block launch (st_cuda_moe_route_glu_hy).
static int moe_glu(int gu_type, const void *const *table, int n_expert, int64_t n_embd, int64_t n_ff, const void *xq,
                   const int32_t *ids, int n_tok, int n_used, float *act, void *actq, int act_format,
                   int32_t *counters, const glu_route *rt, const glu_hy_args *hy, cudaStream_t stream) {
    const st_type_info *ti = st_type_get(gu_type);
    if (!ti || !st_cuda_dec_supported(gu_type) || n_embd <= 0 || n_embd % ti->block_size || n_embd > INT32_MAX / 2)
        return st_err("st_cuda_moe_glu_q: gate/up type %s with rows of %lld is not supported", st_type_name(gu_type),
                      (long long)n_embd);
    if ((actq && !dec_fmt_ok(act_format)) || n_ff <= 0 || n_ff % 32 ||
        (actq && act_format == ST_TYPE_Q8_K && n_ff % 256) || n_ff > INT32_MAX / 2)
        return st_err("st_cuda_moe_glu_q: n_ff %lld and activation format %d (Q8_0/Q8_1: n_ff %% 32 == 0, Q8_K: "
                      "%% 256)", (long long)n_ff, act_format);
    if (n_tok <= 0 || n_used <= 0 || (int64_t)n_tok * n_used > 65535 || n_expert <= 0)
        return st_err("st_cuda_moe_glu_q: %d tokens x %d experts of %d", n_tok, n_used, n_expert);
    if (!table || !xq || (!ids && !rt) || !act || (actq && !counters) || ((uintptr_t)xq & 15) || ((uintptr_t)actq & 15))
        return st_err("st_cuda_moe_glu_q: NULL or misaligned device pointer");
    const bool route = rt != NULL;
    if (route && (n_tok != 1 || n_used > G32 || n_expert > ROUTER_MAX_PER_LANE * G32 || !rt->logits || !rt->ids ||
                  !rt->weights))
        return st_err("st_cuda_moe_route_glu_q: one token, at most 32 of %d experts, and logits / ids / weights "
                      "(got %d tokens, %d used)", ROUTER_MAX_PER_LANE * G32, n_tok, n_used);
    const int chunk_rows = n_ff % 256 == 0 ? 256 : 32;
    if (hy) {
        if (!route || n_ff % (2 * DEC_GROUPS))
            return st_err("st_cuda_moe_route_glu_hy: the route and n_ff %% %d == 0", 2 * DEC_GROUPS);
        decltype(&k_moe_glu_hy<0>) fn;
        DEC_PICK(fn, k_moe_glu_hy, gu_type);
        const unsigned grid = 1u + (unsigned)(n_ff / (2 * DEC_GROUPS)) * (unsigned)n_used;
        st_dec_launch(fn, dim3(grid), dim3(DEC_THREADS), 0, stream, gu_type, (const uint8_t *const *)table, n_expert,
                      (int)(n_embd / 32), (long long)st_row_size(gu_type, n_embd), (int)n_ff, (const uint8_t *)xq,
                      n_used, act, (uint8_t *)actq, (long long)st_q8_1_row_bytes(n_ff), act_format, chunk_rows,
                      counters + 1, *rt, *hy);
        return launch_check("moe_glu_hy");
    }
    // Two rows per group (chunk_rows is a multiple of 2 DEC_GROUPS) unless the type has no instance.
    // The routing instances exist for two rows per group only.
    const int R = route || (glu_rows_env() == 2 && !dec_switch_forced()) ? 2 : 1;
    decltype(&k_moe_glu<0, 1>) fn;
    DEC_PICK(fn, k_moe_glu, gu_type);
    if (R == 2) switch (gu_type) {
        DEC_TYPES(DEC_PICK_CASE_k_moe_glu2)
        default: break;
        }
    if (route && fn == k_moe_glu<0, 1>)
        return st_err("st_cuda_moe_route_glu_q: gate/up type %s has no routing instance", st_type_name(gu_type));
    const int rows = fn == k_moe_glu<0, 1> ? 1 : R;
    const glu_route rt0 = route ? *rt : glu_route{NULL, 0, NULL, NULL, glu_affine_of(NULL)};
    const dim3 grid((unsigned)(n_ff / (rows * DEC_GROUPS)) + (GLU_FAST_ROUTE && route ? 1u : 0u),
                    (unsigned)(n_tok * n_used));  // (GLU_FAST_ROUTE: the side column)
    st_dec_launch(fn, grid, dim3(DEC_THREADS), 0, stream, gu_type, (const uint8_t *const *)table, n_expert,
                  (int)(n_embd / 32), (long long)st_row_size(gu_type, n_embd), (int)n_ff, (const uint8_t *)xq,
                  (long long)st_q8_1_row_bytes(n_embd), ids, n_used, act, (uint8_t *)actq,
                  (long long)st_q8_1_row_bytes(n_ff), act_format, chunk_rows, counters ? counters + 1 : counters, rt0);
    return launch_check("moe_glu_q");
}

extern "C" int st_cuda_moe_glu_q(int gu_type, const void *const *table, int n_expert, int64_t n_embd, int64_t n_ff,
                                 const void *xq, const int32_t *ids, int n_tok, int n_used, float *act, void *actq,
                                 int act_format, int32_t *counters, cudaStream_t stream) {
    if (!actq) return st_err("st_cuda_moe_glu_q: no quantized output given");
    return moe_glu(gu_type, table, n_expert, n_embd, n_ff, xq, ids, n_tok, n_used, act, actq, act_format, counters,
                   NULL, NULL, stream);
}

extern "C" int st_cuda_moe_route_glu_q(int gu_type, const void *const *table, int n_expert, int64_t n_embd,
                                       int64_t n_ff, const void *xq, const float *logits, int norm, int n_used,
                                       int32_t *ids, float *weights, float *act, void *actq, int act_format,
                                       int32_t *counters, const st_cuda_glu_affine *aff, cudaStream_t stream) {
    if (!actq) return st_err("st_cuda_moe_route_glu_q: no quantized output given");
    if (aff && aff->gate0 && (!aff->up0 || ((uintptr_t)aff->gate0 & 15) || ((uintptr_t)aff->up0 & 15) ||
                              aff->stride % 16))
        return st_err("st_cuda_moe_route_glu_q: the affine experts need gate0, up0 and the stride 16-byte aligned");
    const glu_route rt = {logits, norm, ids, weights, glu_affine_of(aff)};
    return moe_glu(gu_type, table, n_expert, n_embd, n_ff, xq, NULL, 1, n_used, act, actq, act_format, counters, &rt,
                   NULL, stream);
}

extern "C" int st_cuda_moe_route_glu_hy(int gu_type, const void *const *table, int n_expert, int64_t n_embd,
                                        int64_t n_ff, const void *xq, const float *logits, int norm, int n_used,
                                        int32_t *ids, float *weights, float *act, void *actq, int act_format,
                                        int32_t *counters, const st_hy_count_args *count, const st_hy_split_args *split,
                                        cudaStream_t stream) {
    const char *fn = "st_cuda_moe_route_glu_hy";
    if (!actq || !count) return st_err("%s: no quantized output or count given", fn);
    if (count->counts && (count->n_expert != n_expert || (count->sel_miss && !count->table)))
        return st_err("%s: the count's %d experts (of %d) or its table", fn, count->n_expert, n_expert);
    if (split) {
        if (split->n_expert != n_expert || split->table != table || !split->carry || !split->ids_gpu ||
            !split->meta || !split->x || !split->hx || split->n_embd != (int)n_embd || !split->seq != !split->bell ||
            split->cpu_q16 != ST_HY_Q16 || !count->counts)
            return st_err("%s: the split does not match the layer (%d experts, %lld inputs, the table, every miss "
                          "the CPU's, a count)", fn, n_expert, (long long)n_embd);
        if (count->table != split->table || count->vram_lo != split->vram_lo || count->vram_hi != split->vram_hi)
            return st_err("%s: the count and the split must name the same table and VRAM cache", fn);
    }
    glu_hy_args hy;
    memset(&hy, 0, sizeof hy);
    hy.cnt = *count;
    hy.cnt.pf.progress = NULL;  // (the branch off: no plan reads it; with the branch, the router's snapshot launch
                                // set it, hybrid.h st_hy_snap_args)
    if (split) hy.split = *split, hy.has_split = 1;
    const glu_route rt = {logits, norm, ids, weights, glu_affine_of(NULL)};
    return moe_glu(gu_type, table, n_expert, n_embd, n_ff, xq, NULL, 1, n_used, act, actq, act_format, counters, &rt,
                   &hy, stream);
}

extern "C" int st_cuda_glu_affine_enabled(void) { return GLU_AFFINE; }

extern "C" int st_cuda_moe_glu(int gu_type, const void *const *table, int n_expert, int64_t n_embd, int64_t n_ff,
                               const void *xq, const int32_t *ids, int n_tok, int n_used, float *act,
                               cudaStream_t stream) {
    return moe_glu(gu_type, table, n_expert, n_embd, n_ff, xq, ids, n_tok, n_used, act, NULL, -1, NULL, NULL, NULL,
                   stream);
}
