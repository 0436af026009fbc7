// The MoE FFN of one decode token in one launch of thread-block clusters (decode.h: st_cuda_dec_moe_cl).
//
// Why: the four-launch path spends ~37 us per Qwen3-30B-A3B layer (knockout in the graph: FFN norm ~3, router +
// top-k 10, GLU 14, down 10) on ~26 MB of weights (~6 us at 4.4 TB/s), and the one-launch version with grid-wide
// barriers (decode_moe.cu) was no faster: each barrier is a chain through L2 across the whole GPU. Here each
// selected expert gets one cluster of CL_SIZE blocks on one GPC, and every dependency inside the FFN stays inside
// the cluster (barrier.cluster, distributed shared memory): the router's logits, the route, the GLU output the down
// projection needs. The clusters meet only at the end, where the last cluster to finish a range of output rows sums
// the K experts' rows in rank order. Each block asks for all the weight bytes it will read (its GLU rows and its down
// rows, sm_90 bulk L2 prefetch) as soon as the route is known, so the DRAM stream starts at once instead of one
// row dot's latency at a time.
//
// Phases (grid: n_used clusters of CL_SIZE blocks, cluster c computes the c-th selected expert; block j of a
// cluster: its j-th share of every split; 256 threads = 8 groups of 32 lanes):
//   0. x + add, RMSNorm and the gate/up input quantization in every block (shared memory; k_rmsnorm_act's order),
//      then the block's ceil(E / CL_SIZE) router logits (k_router's order)                    -> cluster barrier
//   1. every block gathers the E logits from the cluster's blocks and routes (route_group, the CPU's); block 0 of
//      the grid writes ids, weights and logits out; bulk L2 prefetch of this block's rows; the block's F / CL_SIZE
//      GLU rows of its cluster's expert                                                       -> cluster barrier
//   2. every block gathers the expert's F GLU outputs and quantizes them (the down input in the CPU format)
//                                                                                              -> cluster barrier
//   3. the block's n_embd / CL_SIZE down rows of the expert, into part[k][row]; the block that completes a row range
//      over all K clusters (a counter per range) waits until every block has read x, then writes
//      x = (x + add) + sum_k w_k part[k] in rank order.
// Arithmetic is the four-launch path's, operation for operation, so the results are bit-identical (test_gpu_decode).
#include "cuda/decode.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#include <cooperative_groups.h>
#endif

#include "cuda/decode_common.cuh"  // groups, quantizers, PDL, st_ld_acquire
#include "cuda/decode_moe.cuh"     // the parameters shared with the grid-barrier version, stamps
#include "cuda/decode_rows.cuh"    // row dots, router loads, route_group_shared
#include "cuda/qblock.h"
#include "cuda/quantize_act.h"

#define CL_SIZE ST_DEC_MOE_CL_SIZE
#define CL_GROUPS 8
#define CL_THREADS (CL_GROUPS * G32)

struct cl_params : moe_ffn_base {
    float *part;              // [K][d] each expert's down outputs (unweighted)
    unsigned int *started;    // blocks past their reads of x and add
    unsigned int *done;       // row ranges summed
    int32_t *row_cnt;         // [CL_SIZE] clusters done with each row range
};

// Shared memory of one block (dynamic, 16-byte aligned parts): sv [d] f32, xq planar q8_1 row of d, act_full [F] f32,
// aq planar row of F, logits [E] f32, the block's logits [E / CL_SIZE rounded up], its GLU outputs [F / CL_SIZE].
struct cl_layout {
    size_t sv, xq, act, aq, logits, loc, act_loc, total;
};
static __host__ __device__ inline size_t cl_align(size_t v) { return (v + 15) & ~(size_t)15; }
static __host__ __device__ inline cl_layout cl_smem(int d, int F, int E) {
    cl_layout L;
    size_t o = 0;
    L.sv = o, o += cl_align(sizeof(float) * (size_t)d);
    L.xq = o, o += cl_align((size_t)d + (size_t)(d / 32) * 8);  // st_q8_1_row_bytes: quants, then (d, s) pairs
    L.act = o, o += cl_align(sizeof(float) * (size_t)F);
    L.aq = o, o += cl_align((size_t)F + (size_t)(F / 32) * 8);
    L.logits = o, o += cl_align(sizeof(float) * (size_t)E);
    L.loc = o, o += cl_align(sizeof(float) * (size_t)((E + CL_SIZE - 1) / CL_SIZE));
    L.act_loc = o, o += cl_align(sizeof(float) * (size_t)(F / CL_SIZE));
    L.total = o;
    return L;
}

// GT / DT: the gate-up and down weight types the row dots are inlined for, 0: runtime switch (any DEC_TYPES type).
// (Two blocks per SM at most 128 registers: a cluster then fits in half a GPC's SMs, so every selected expert's
// cluster is resident at once on a 132-SM part whatever its GPC sizes.)
template <typename T, int GT, int DT> __global__ void __launch_bounds__(CL_THREADS, 2) k_moe_cl(const cl_params p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    extern __shared__ __align__(16) uint8_t smem[];
    const int d = p.d, E = p.E, K = p.K, F = p.F;
    const cl_layout Ls = cl_smem(d, F, E);
    float *sv = (float *)(smem + Ls.sv), *act_full = (float *)(smem + Ls.act), *logits = (float *)(smem + Ls.logits);
    float *loc = (float *)(smem + Ls.loc), *act_loc = (float *)(smem + Ls.act_loc);
    uint8_t *xq = smem + Ls.xq, *aq = smem + Ls.aq;
    __shared__ int32_t s_ids[32];
    __shared__ float s_w[32];
    __shared__ int s_last;
    const int lane = threadIdx.x % G32, g = threadIdx.x / G32;
    const int j = (int)cluster.block_rank(), k = blockIdx.x / CL_SIZE;
    const int LB = (E + CL_SIZE - 1) / CL_SIZE, RG = F / CL_SIZE, RD = d / CL_SIZE, n4 = d / 4;
    const T *W = (const T *)p.router;

    // Before the dependency wait: this block's router rows and the norm weights into L2 (no kernel writes them).
    {
        const int e0 = j * LB, ne = min(LB, E - e0);
        const size_t rb = sizeof(T) * (size_t)d;
        if (ne > 0) st_prefetch_l2_bulk(W + (size_t)e0 * d, (unsigned long long)ne * rb);
        for (int i = threadIdx.x * 32; i < d; i += blockDim.x * 32) st_prefetch_l2(p.norm_w + i);
    }
    st_pdl_wait();
    st_pdl_trigger();
    MOE_STAMP(0);

    // ---- 0: x + add, RMSNorm, quantization; this block's logits ----
    block_rmsnorm_smem(sv, p.x, p.add, p.norm_w, d, p.eps);
    if (threadIdx.x == 0) atomicAdd(p.started, 1u);  // this block reads x and add no more
    block_quant<false>(p.gfmt, sv, xq, d / 32, 0, d / 32);
    MOE_STAMP(1);
    for (int li = g; li < LB; li += CL_GROUPS) {
        const int e = j * LB + li;
        if (e >= E) break;
        const T *w = W + (size_t)e * d;
        float4 wq[ROUTER_PRE];  // (k_router's split of the loads: the same sums in the same order)
        router_preload<T>(w, n4, lane, true, wq);
        const float s = router_dot<T>(w, wq, sv, n4, lane);
        if (lane == 0) loc[li] = s;
    }
    MOE_STAMP(2);
    cluster.sync();
    MOE_STAMP(3);

    // ---- 1: route, prefetch, GLU rows ----
    for (int e = threadIdx.x; e < E; e += blockDim.x) logits[e] = cluster.map_shared_rank(loc, e / LB)[e % LB];
    __syncthreads();
    if (g == 0) route_group_shared(logits, E, K, p.norm_topk, s_ids, s_w);
    __syncthreads();
    MOE_STAMP(4);
    if (blockIdx.x == 0) {
        if (threadIdx.x < K) p.ids[threadIdx.x] = s_ids[threadIdx.x], p.weights[threadIdx.x] = s_w[threadIdx.x];
        for (int e = threadIdx.x; e < E; e += blockDim.x) p.logits[e] = logits[e];
    }
    const int e = s_ids[k];
    const bool valid = e >= 0 && e < E;
    const uint8_t *gate = valid ? st_tbl_entry(p.tbl, 3 * e) : NULL, *up = valid ? st_tbl_entry(p.tbl, 3 * e + 1) : NULL;
    const uint8_t *down = valid ? st_tbl_entry(p.tbl, 3 * e + 2) : NULL;
    if (valid && threadIdx.x == 0) {  // every weight byte this block reads, requested at once
        st_prefetch_l2_bulk(gate + (size_t)j * RG * p.gu_row_bytes, (unsigned long long)RG * p.gu_row_bytes);
        st_prefetch_l2_bulk(up + (size_t)j * RG * p.gu_row_bytes, (unsigned long long)RG * p.gu_row_bytes);
        st_prefetch_l2_bulk(down + (size_t)j * RD * p.dn_row_bytes, (unsigned long long)RD * p.dn_row_bytes);
    }
    const int nit_d = d / 32, nit_f = F / 32;
    // Two outputs per pass (gate and up rows of r and r + 8 in flight together; rows_dot_x's per-row arithmetic is
    // row_dot2's), so a group runs RG / 16 passes instead of RG / 8.
    for (int r0 = g; r0 < RG; r0 += 2 * CL_GROUPS) {
        const int r1 = r0 + CL_GROUPS;
        const uint8_t *rows[ROWS_X_N] = {NULL, NULL, NULL, NULL};  // NULL rows: NaN, as k_moe_glu for an invalid id
        if (valid) {
            const size_t o0 = (size_t)(j * RG + r0) * (size_t)p.gu_row_bytes;
            rows[0] = gate + o0, rows[1] = up + o0;
            if (r1 < RG) {
                const size_t o1 = (size_t)(j * RG + r1) * (size_t)p.gu_row_bytes;
                rows[2] = gate + o1, rows[3] = up + o1;
            }
        }
        float v[ROWS_X_N];
        if constexpr (GT == 0) rows_dot_x4_any(p.gu_type, rows, xq, nit_d, lane, v);
        else rows_dot_x<GT, ROWS_X_N>(rows, xq, nit_d, lane, v);
        if (lane == 0) {
            act_loc[r0] = v[0] / (1.0f + __expf(-v[0])) * v[1];  // as k_moe_glu
            if (r1 < RG) act_loc[r1] = v[2] / (1.0f + __expf(-v[2])) * v[3];
        }
    }
    MOE_STAMP(5);
    cluster.sync();

    // ---- 2: the expert's GLU output, quantized as the down input ----
    for (int i = threadIdx.x; i < F; i += blockDim.x) act_full[i] = cluster.map_shared_rank(act_loc, i / RG)[i % RG];
    cluster.sync();  // every block has read the others' shared memory: from here on a block may leave
    block_quant<false>(p.dfmt, act_full, aq, nit_f, 0, nit_f);
    __syncthreads();
    MOE_STAMP(6);

    // ---- 3: down rows, then the rank-order sum by the last cluster to finish each row range ----
    for (int t0 = g; t0 < RD; t0 += CL_GROUPS * DOWN_N) {
        const uint8_t *rows[DOWN_N], *xqs[DOWN_N];
#pragma unroll
        for (int n = 0; n < DOWN_N; n++) {
            const int rr = t0 + n * CL_GROUPS;
            rows[n] = valid && rr < RD ? down + (size_t)(j * RD + rr) * (size_t)p.dn_row_bytes : NULL;
            xqs[n] = aq;
        }
        float v[DOWN_N];
        if constexpr (DT == 0) row_dot4_any(p.down_type, rows, xqs, nit_f, lane, v);
        else row_dotN<DT, DOWN_N>(rows, xqs, nit_f, lane, v);  // NaN for a skipped row
#pragma unroll
        for (int n = 0; n < DOWN_N; n++) {
            const int rr = t0 + n * CL_GROUPS;
            if (rr < RD && lane == 0) __stcg(p.part + (size_t)k * d + j * RD + rr, v[n]);
        }
    }
    MOE_STAMP(7);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(p.row_cnt + j, 1) == K - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    if (threadIdx.x == 0) {  // x is written below: first every block must have read it (all resident: no deadlock)
        const unsigned long long t0 = st_globaltimer_ns();
        while (st_ld_acquire(p.started) < gridDim.x)
            if (st_globaltimer_ns() - t0 > 2000000000ull) __trap();  // a block that never started: fail, never hang
    }
    __syncthreads();
    for (int rr = threadIdx.x; rr < RD; rr += blockDim.x) {
        const int r = j * RD + rr;
        float o = __fmul_rn(__ldcg(p.part + r), s_w[0]);  // rank_sum's order
        for (int kk = 1; kk < K; kk++) o = __fadd_rn(o, __fmul_rn(__ldcg(p.part + (size_t)kk * d + r), s_w[kk]));
        const float x2 = p.add ? __fadd_rn(__ldcg(p.x + r), __ldcg(p.add + r)) : __ldcg(p.x + r);
        p.x[r] = __fadd_rn(x2, o);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        p.row_cnt[j] = 0;  // ready for the next launch
        if (atomicAdd(p.done, 1u) == CL_SIZE - 1) {  // the last range: every spin above is over
            *p.started = 0;
            *p.done = 0;
        }
    }
    MOE_STAMP(8);
#else
    (void)p;
#endif
}

// ---- host side ---------------------------------------------------------------------------------------------------

extern "C" size_t st_cuda_dec_moe_cl_ws_bytes(int64_t n_embd, int n_used) {
    return 256 + sizeof(float) * (size_t)(n_embd > 0 ? n_embd : 1) * (size_t)(n_used > 0 ? n_used : 1);
}

typedef void (*cl_kernel)(const cl_params);

// The instance for these types: inlined row dots for the Qwen3-MoE Q4_K_M pairs, the runtime switch otherwise.
static cl_kernel cl_pick(int router_type, int gu, int dn) {
#define CL_ROUTER(T)                                                                                               \
    do {                                                                                                           \
        if (gu == ST_TYPE_Q4_K && dn == ST_TYPE_Q6_K) return k_moe_cl<T, ST_TYPE_Q4_K, ST_TYPE_Q6_K>;              \
        if (gu == ST_TYPE_Q4_K && dn == ST_TYPE_Q4_K) return k_moe_cl<T, ST_TYPE_Q4_K, ST_TYPE_Q4_K>;              \
        return k_moe_cl<T, 0, 0>;                                                                                  \
    } while (0)
    if (router_type == ST_TYPE_F32) CL_ROUTER(float);
    if (router_type == ST_TYPE_F16) CL_ROUTER(__half);
    if (router_type == ST_TYPE_BF16) CL_ROUTER(__nv_bfloat16);
#undef CL_ROUTER
    return NULL;
}

// Whether this device runs clusters of CL_SIZE with n_used of them resident at once (the final sum waits for every
// block's start). 0 or an error message.
static int cl_resident(cl_kernel fn, int n_used, size_t smem) {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess)
        return st_err("st_cuda_dec_moe_cl: no device");
    if (major < 9) return st_err("st_cuda_dec_moe_cl: thread-block clusters need compute capability 9.0 or newer");
    if (cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess ||
        (smem > 48 * 1024 && cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess)) {
        cudaGetLastError();
        return st_err("st_cuda_dec_moe_cl: cannot configure clusters of %d blocks", CL_SIZE);
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(n_used * CL_SIZE));
    cfg.blockDim = dim3(CL_THREADS);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = CL_SIZE, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, fn, &cfg) != cudaSuccess) {
        cudaGetLastError();
        return st_err("st_cuda_dec_moe_cl: cannot query cluster occupancy");
    }
    if (n < n_used) return st_err("st_cuda_dec_moe_cl: %d clusters of %d blocks resident at most, %d needed", n, CL_SIZE, n_used);
    return 0;
}

extern "C" int st_cuda_dec_moe_cl_supported(int64_t n_embd, int64_t n_ff, int n_expert, int n_used, int router_type,
                                            int gu_type, int down_type) {
    const int gfmt = st_cuda_act_format(gu_type), dfmt = st_cuda_act_format(down_type);
    if (!st_cuda_dec_supported(gu_type) || !st_cuda_dec_supported(down_type) || !dec_fmt_ok(gfmt) || !dec_fmt_ok(dfmt))
        return 0;
    if (n_embd <= 0 || n_embd > ST_MOE_FFN_MAX_EMBD || n_embd % (CL_SIZE * 4) ||
        (gfmt == ST_TYPE_Q8_K && n_embd % 256) || n_embd % st_type_get(gu_type)->block_size)
        return 0;
    if (n_ff <= 0 || n_ff % CL_SIZE || n_ff % 32 || (dfmt == ST_TYPE_Q8_K && n_ff % 256) ||
        n_ff % st_type_get(down_type)->block_size || n_ff > 65536)
        return 0;
    if (n_expert <= 0 || n_expert > ROUTER_MAX_PER_LANE * G32 || n_used <= 0 || n_used > 16 || n_used > n_expert)
        return 0;
    const cl_kernel fn = cl_pick(router_type, gu_type, down_type);
    if (!fn) return 0;
    const size_t smem = cl_smem((int)n_embd, (int)n_ff, n_expert).total;
    // The residency answer per (device, instance, clusters, shared memory): the engine asks once per layer and step.
    static struct {
        int dev, n_used, ok;
        cl_kernel fn;
        size_t smem;
    } cache[16];
    static int n_cache;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    for (int i = 0; i < n_cache; i++)
        if (cache[i].dev == dev && cache[i].fn == fn && cache[i].n_used == n_used && cache[i].smem == smem)
            return cache[i].ok;
    const int ok = cl_resident(fn, n_used, smem) == 0;
    cudaGetLastError();
    if (n_cache < 16) cache[n_cache].dev = dev, cache[n_cache].fn = fn, cache[n_cache].n_used = n_used,
                      cache[n_cache].smem = smem, cache[n_cache].ok = ok, n_cache++;
    return ok;
}

extern "C" int st_cuda_dec_moe_cl(const st_cuda_dec_moe_args *a, cudaStream_t stream) {
    const int64_t d = a->n_embd, F = a->n_ff;
    const int E = a->n_expert, K = a->n_used;
    if (!st_cuda_dec_moe_cl_supported(d, F, E, K, a->router_type, a->gu_type, a->down_type))
        return st_err("st_cuda_dec_moe_cl: %s / %s experts, n_embd %lld, n_ff %lld, %d of %d, router %s: not supported "
                      "here (n_embd %% 64, n_ff %% 16, <= 16 used, clusters of %d resident; use the four-launch path)",
                      st_type_name(a->gu_type), st_type_name(a->down_type), (long long)d, (long long)F, K, E,
                      st_type_name(a->router_type), CL_SIZE);
    if (!a->x || !a->norm_w || !a->router || !a->table || !a->logits || !a->ids || !a->weights || !a->ws ||
        ((uintptr_t)a->router & 15) || ((uintptr_t)a->ws & 15))
        return st_err("st_cuda_dec_moe_cl: NULL or misaligned device pointer");
    cl_params p;
    moe_ffn_base_fill(p, a);
    uint8_t *ws = (uint8_t *)a->ws;  // [0] started, [4] done, [64..128) row counters, [256..) parts
    p.started = (unsigned int *)ws, p.done = (unsigned int *)(ws + 4), p.row_cnt = (int32_t *)(ws + 64);
    p.part = (float *)(ws + 256);
    const cl_kernel fn = cl_pick(a->router_type, a->gu_type, a->down_type);
    const size_t smem = cl_smem((int)d, (int)F, E).total;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)(K * CL_SIZE));
    cfg.blockDim = dim3(CL_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = CL_SIZE, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
    int n_at = 1;
    if (stream != 0 && st_dec_pdl_enabled()) {
        at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[1].val.programmaticStreamSerializationAllowed = 1;
        n_at = 2;
    }
    cfg.attrs = at;
    cfg.numAttrs = n_at;
    cudaLaunchKernelEx(&cfg, fn, p);  // errors surface through launch_check
    return launch_check("moe_cl");
}
