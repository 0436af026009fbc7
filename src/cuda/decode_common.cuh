// Device helpers shared by the fused decode kernels (decode.cu, decode_glu.cu, decode_attn.cu): 32-lane group
// reductions, the activation quantizers in the CPU's formats, and programmatic dependent launch (PDL). CUDA C++ only.
//
// Work unit: a "group" of 32 lanes (a whole warp on NVIDIA; half a wave on a wave64 part, whose shuffles with
// xor offsets < 32 stay inside the group), so the 32-element quantization blocks map one to one onto groups
// whatever ST_WARP_SIZE is.
//
// PDL (sm_90+): a kernel launched with st_dec_launch() may start while the previous kernel on the stream is still
// running (its blocks get placed as soon as every block of the previous kernel has called st_pdl_trigger() or
// exited), so its launch latency and prologue overlap the previous kernel's tail. Every such kernel therefore calls
// st_pdl_wait() before it reads anything an earlier kernel wrote or writes anything an earlier kernel reads
// (griddepcontrol.wait returns once the previous grids have completed and their writes are visible); only pure
// index math and reads of data no kernel of the step writes (weights) may come before it. Triggering early is safe:
// it only lets the next kernel be scheduled, and that kernel waits the same way. The macro ST_DEC_PDL (default 1)
// turns the device side off; on devices below sm_90 (and HIP) the intrinsics compile to nothing and the launches
// are plain <<<>>> launches.
#ifndef STRATA_CUDA_DECODE_COMMON_CUH
#define STRATA_CUDA_DECODE_COMMON_CUH

#include <cuda_fp16.h>  // __float2half_rn in the quantizers
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>  // getenv, atoi (env_switch)

#include "cuda/common.cuh"  // launch_check, ST_WARP_MASK
#include "quant/quant.h"    // ST_TYPE_*

#define G32 32  // lanes per group

#if ST_WARP_SIZE % 32 != 0
#error "decode kernels: groups of 32 lanes must tile the warp"
#endif

#ifndef ST_DEC_PDL
#define ST_DEC_PDL 1
#endif

// ---- programmatic dependent launch ----------------------------------------------------------------------------

__device__ __forceinline__ void st_pdl_wait() {
#if ST_DEC_PDL && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void st_pdl_trigger() {
#if ST_DEC_PDL && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}
// PDL_EARLY (default 63: all; -DPDL_EARLY=0 for an A/B build): bits of the launches that let their dependents be
// scheduled before their own wait instead of after it (1 the span norm, 2 the router fold, 4 the decode attention,
// 8 Q/K/V and O, 16 the down projection, 32 the GLU), so the next launch's blocks take SM slots, and start their
// pre-wait loads, as soon as slots free up. Safe either way: a kernel's whole grid is resident before it triggers,
// and each wait still waits for the whole previous grid. H100, 2026-12-05e (bench/ab.sh): tg128 551.1 vs 550.2,
// tg128 @ d16384 403.2 vs 395.0 (+2.1%: the attention's blocks, and their pre-wait K/V copies, may start during
// Q/K/V).
#ifndef PDL_EARLY
#define PDL_EARLY 63
#endif
template <int BIT> __device__ __forceinline__ void st_pdl_wait_trigger() {
    if (PDL_EARLY & BIT) st_pdl_trigger();
    st_pdl_wait();
    if (!(PDL_EARLY & BIT)) st_pdl_trigger();
}

// DEC_PHASE_PROBE (diagnostic build, default 0; its tok/s mean nothing): where a launch's block time goes. Thread 0 of
// each probed block stamps clock64() at the kernel's marks (ph_mark(i): 0 entry, 1 the PDL wait released, then the
// kernel's own phases) and at its exit adds each phase's cycles (mark i - the last mark reached before it) to totals
// (ph_done); every 2^12 blocks it prints the running mean cycles per block of each phase (device printf, flushed at
// the next synchronisation). A phase counts only the blocks that reached its mark (e.g. a chunk's last block).
#ifndef DEC_PHASE_PROBE
#define DEC_PHASE_PROBE 0
#endif
#if DEC_PHASE_PROBE
#include <cstdio>
#define PH_MARKS 9
static __shared__ long long s_ph[PH_MARKS];            // this block's marks (cycles; -1: not reached)
static __device__ unsigned long long g_ph[2][2 * PH_MARKS];  // [kernel][phase i: cycles sum, blocks reaching it]
static __device__ __forceinline__ void ph_mark(int i) {
    if (threadIdx.x == 0) s_ph[i] = clock64();
    if (threadIdx.x == 0 && i == 0)
        for (int j = 1; j < PH_MARKS; j++) s_ph[j] = -1;
}
static __device__ __noinline__ void ph_done(int kern, const char *name) {
    if (threadIdx.x != 0) return;
    for (int i = 1, prev = 0; i < PH_MARKS; i++)
        if (s_ph[i] >= 0) {  // phase i: from the last mark reached before it
            atomicAdd(&g_ph[kern][2 * i], (unsigned long long)(s_ph[i] - s_ph[prev]));
            atomicAdd(&g_ph[kern][2 * i + 1], 1ull);
            prev = i;
        }
    const unsigned long long b = atomicAdd(&g_ph[kern][1], 1ull) + 1;
    if ((b & 0xfffull) == 0) {
        double m[PH_MARKS];
        for (int i = 1; i < PH_MARKS; i++) {
            const unsigned long long n = __ldcg(&g_ph[kern][2 * i + 1]);
            m[i] = n ? (double)__ldcg(&g_ph[kern][2 * i]) / (double)n : 0.0;
        }
        printf("phase %s: %llu blocks; mean cycles: p1 %.0f p2 %.0f p3 %.0f p4 %.0f p5 %.0f p6 %.0f p7 %.0f p8 %.0f "
               "(blocks reaching p5 %llu, p6 %llu, p7 %llu, p8 %llu)\n",
               name, b, m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8], __ldcg(&g_ph[kern][2 * 5 + 1]),
               __ldcg(&g_ph[kern][2 * 6 + 1]), __ldcg(&g_ph[kern][2 * 7 + 1]), __ldcg(&g_ph[kern][2 * 8 + 1]));
    }
}
#define PH_MARK(i) ph_mark(i)
#define PH_DONE(k, name) ph_done(k, name)
#else
#define PH_MARK(i) ((void)0)
#define PH_DONE(k, name) ((void)0)
#endif

// Brings a weight line into L2 ahead of use (before st_pdl_wait, while the previous kernel finishes).
__device__ __forceinline__ void st_prefetch_l2(const void *p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
    (void)p;
#endif
}

// Brings bytes [p, p + n) into L2 ahead of use: one bulk prefetch by the copy engine on sm_90 (the range widened to
// 16-byte bounds, as cp.async.bulk.prefetch requires), else one prefetch per 128-byte line by the calling thread.
// A hint only: a stale or wrong range costs bandwidth, never correctness.
__device__ __forceinline__ void st_prefetch_l2_range(const void *p, size_t n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const uintptr_t a = (uintptr_t)p & ~(uintptr_t)15, b = ((uintptr_t)p + n + 15) & ~(uintptr_t)15;
    if (b > a)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"((unsigned)(b - a)) : "memory");
#else
    for (size_t o = 0; o < n; o += 128) st_prefetch_l2((const char *)p + o);
#endif
}

// An A/B switch read once: the integer in `name`, else dflt (*cache < 0 until the first read).
static inline int env_switch(int *cache, const char *name, int dflt) {
    if (*cache < 0) {
        const char *e = getenv(name);
        *cache = e && *e ? atoi(e) : dflt;
    }
    return *cache;
}

// The current device's compute capability major (decode.cu; cached per device ordinal), 0 when unknown.
int st_dec_device_major(void);
// Whether launches on the current device use PDL (decode.cu: process-wide switch, then sm_90+).
int st_dec_pdl_enabled(void);

// Launches kernel k with PDL when enabled and stream is a created stream (captured into graphs as a programmatic
// edge), else <<<>>>.
template <typename... KArgs, typename... Args>
static inline void st_dec_launch(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                 Args... args) {
#if ST_DEC_PDL
    if (stream != 0 && st_dec_pdl_enabled()) {  // (never on the legacy default stream: plain semantics there)
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = grid;
        cfg.blockDim = block;
        cfg.dynamicSmemBytes = smem;
        cfg.stream = stream;
        cudaLaunchAttribute at[1];
        at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = at;
        cfg.numAttrs = 1;
        cudaLaunchKernelEx(&cfg, k, ((KArgs)args)...);  // errors surface through launch_check
        return;
    }
#endif
    k<<<grid, block, smem, stream>>>(((KArgs)args)...);
}

// st_dec_launch when pdl, else a plain <<<>>> launch (a kernel whose completion an event in the stream must see
// before the next kernel could start: a stream fork).
template <typename... KArgs, typename... Args>
static inline void st_dec_launch_if(bool pdl, void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                    cudaStream_t stream, Args... args) {
    if (pdl) st_dec_launch(k, grid, block, smem, stream, args...);
    else k<<<grid, block, smem, stream>>>(((KArgs)args)...);
}

// ---- 32-lane group reductions (xor offsets < 32 never leave the group) ---------------------------------------
//
// G32_REDUX (sm_80+ where a group is a whole 32-lane warp; -DG32_REDUX=0 for an A/B build): the integer reductions
// of the quantizers by redux.sync, one instruction each instead of a five-shuffle butterfly, with the butterflies'
// results exactly (integer sums and maxima do not depend on the order). A warp shuffle issues at 32 lanes per clock
// per SM, so the quantizers' butterflies (55 shuffles per 256-element Q8_K block) were throughput, not only latency.
// With ST_SUM4: tg128 +3.0% against -DG32_REDUX=0 -DST_SUM4=0 (H200, 2026-12-05).
#ifndef G32_REDUX
#define G32_REDUX 1
#endif
#if G32_REDUX && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && ST_WARP_SIZE == 32
#define G32_REDUX_ON 1
#else
#define G32_REDUX_ON 0
#endif

__device__ __forceinline__ float f_nan() { return __int_as_float(0x7fc00000); }

__device__ __forceinline__ float g32_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(ST_WARP_MASK, v, o));
    return v;
}
// g32_max by one reduction where G32_REDUX_ON: the floats as order-preserving integers (negative values' magnitude
// bits flipped); a NaN counts as -inf, as fmaxf ignores it (all NaN: -inf where the butterfly gives NaN).
__device__ __forceinline__ float g32_max_f(float v) {
#if G32_REDUX_ON
    const int b = v == v ? __float_as_int(v) : (int)0xff800000;
    const int k = __reduce_max_sync(ST_WARP_MASK, b ^ ((b >> 31) & 0x7fffffff));
    return __int_as_float(k ^ ((k >> 31) & 0x7fffffff));
#else
    return g32_max(v);
#endif
}
// g32_max of a >= 0 or NaN (an absolute value): the same result (fmaxf's: NaN only where every lane's is NaN).
__device__ __forceinline__ float g32_max_abs(float a) {
#if G32_REDUX_ON
    const unsigned k = __reduce_max_sync(ST_WARP_MASK, a == a ? __float_as_uint(a) : 0u);  // (a >= 0: bits order)
    return k == 0u && __all_sync(ST_WARP_MASK, a != a) ? f_nan() : __uint_as_float(k);
#else
    return g32_max(a);
#endif
}
__device__ __forceinline__ int g32_sum_i(int v) {
#if G32_REDUX_ON
    return __reduce_add_sync(ST_WARP_MASK, v);
#else
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(ST_WARP_MASK, v, o);
    return v;
#endif
}
__device__ __forceinline__ float g32_sum_f(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(ST_WARP_MASK, v, o);
    return v;
}
// The group sums of four per-lane values at once (a transposing butterfly: 6 shuffles instead of 4 x 5): returns in
// lane l the sum of a[(l >> 3) & 3], so lane 8 n holds value n's. Bit for bit g32_sum_f(a[n]): every level adds the
// same two partials as its butterfly does (own + the xor partner's; float addition is commutative), only the lanes
// that would carry the other three values' partials carry nothing for value n.
__device__ __forceinline__ float g32_sum4_t(const float (&a)[4], int lane) {
    const bool h16 = (lane & 16) != 0, h8 = (lane & 8) != 0;
    const float b0 = (h16 ? a[2] : a[0]) + __shfl_xor_sync(ST_WARP_MASK, h16 ? a[0] : a[2], 16);
    const float b1 = (h16 ? a[3] : a[1]) + __shfl_xor_sync(ST_WARP_MASK, h16 ? a[1] : a[3], 16);
    float c = (h8 ? b1 : b0) + __shfl_xor_sync(ST_WARP_MASK, h8 ? b0 : b1, 8);
#pragma unroll
    for (int o = 4; o > 0; o >>= 1) c += __shfl_xor_sync(ST_WARP_MASK, c, o);
    return c;
}
// g32_sum_f of a[0..3], each in every lane of the group (g32_sum4_t and four broadcasts: 10 shuffles, not 20).
__device__ __forceinline__ void g32_sum4(const float (&a)[4], int lane, float (&out)[4]) {
    const float t = g32_sum4_t(a, lane);
#pragma unroll
    for (int n = 0; n < 4; n++) out[n] = __shfl_sync(ST_WARP_MASK, t, 8 * n, 32);
}
__device__ __forceinline__ double g32_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(ST_WARP_MASK, v, o);
    return v;
}

// Deterministic block sum of doubles (fixed order over the groups); every thread gets the result.
static __device__ double block_sum_d(double v) {
    __shared__ double part[1024 / G32];
    const int lane = threadIdx.x % G32, g = threadIdx.x / G32, ng = blockDim.x / G32;
    v = g32_sum_d(v);
    __syncthreads();
    if (lane == 0) part[g] = v;
    __syncthreads();
    double s = 0;
    for (int i = 0; i < ng; i++) s += part[i];
    return s;
}

// ---- RMSNorm stages with every load of a thread in flight at once ---------------------------------------------
//
// Element i belongs to thread i % blockDim.x (ascending i per thread: the order of the double sum of squares, as
// st_rmsnorm's). The loads go in batches of NORM_U per thread, issued before any store, so a row costs one memory
// latency per batch instead of one per element (the compiler does not move loads above stores that may alias).
#define NORM_U 8

// sv[i] = x[i] (+ res[i], written back to x when write_back); returns the block's sum of the squares (each rounded
// to float, summed in double). Every thread of the block calls it.
static __device__ double norm_load_sumsq(float *sv, float *x, const float *res, int n, bool write_back) {
    double ss = 0;
    for (int i0 = threadIdx.x; i0 < n; i0 += blockDim.x * NORM_U) {
        float v[NORM_U], r[NORM_U];
#pragma unroll
        for (int u = 0; u < NORM_U; u++) {
            const int i = i0 + u * (int)blockDim.x;
            v[u] = i < n ? x[i] : 0.0f;
            r[u] = res && i < n ? res[i] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < NORM_U; u++) {
            const int i = i0 + u * (int)blockDim.x;
            if (i >= n) break;
            float t = v[u];
            if (res) {
                t = __fadd_rn(t, r[u]);
                if (write_back) x[i] = t;
            }
            sv[i] = t;
            ss += (double)__fmul_rn(t, t);
        }
    }
    return block_sum_d(ss);
}

// The RMSNorm scale 1 / sqrt(mean + eps) from norm_load_sumsq's sum of squares of n elements (the CPU's rounding
// steps: mean in float, then IEEE add, sqrt and divide).
static __device__ __forceinline__ float norm_rms_scale(double ss, int n, float eps) {
    const float mean = (float)(ss / (double)n);
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
}

// One RoPE pair (a, b) rotated by cs = (cos, sin): the CPU's st_rope_apply, fma for fma (not the compiler's choice).
static __device__ __forceinline__ void rope_rot(float &a, float &b, float2 cs) {
    const float x0 = a, x1 = b;
    a = fmaf(x0, cs.x, -__fmul_rn(x1, cs.y));
    b = fmaf(x0, cs.y, __fmul_rn(x1, cs.x));
}

// The thread's first batch of norm weights (w[threadIdx.x + u blockDim.x], 1 past n) into registers: weights are no
// kernel's output, so a kernel loads them before its dependency wait and norm_scale skips that round trip.
static __device__ __forceinline__ void norm_weights_pre(const float *w, int n, float (&wpre)[NORM_U]) {
#pragma unroll
    for (int u = 0; u < NORM_U; u++) {
        const int i = threadIdx.x + u * (int)blockDim.x;
        wpre[u] = w && i < n ? w[i] : 1.0f;
    }
}

// sv[i] = sv[i] * scale (* w[i] when w), also to y[i] when y; each thread touches only its own elements. wpre:
// norm_weights_pre's registers for the first batch, or NULL.
static __device__ void norm_scale(float *sv, const float *w, float scale, float *y, int n,
                                  const float *wpre = nullptr) {
    for (int i0 = threadIdx.x; i0 < n; i0 += blockDim.x * NORM_U) {
        float wv[NORM_U];
#pragma unroll
        for (int u = 0; u < NORM_U; u++) {
            const int i = i0 + u * (int)blockDim.x;
            wv[u] = wpre && i0 == (int)threadIdx.x ? wpre[u] : w && i < n ? w[i] : 1.0f;
        }
#pragma unroll
        for (int u = 0; u < NORM_U; u++) {
            const int i = i0 + u * (int)blockDim.x;
            if (i >= n) break;
            float v = __fmul_rn(sv[i], scale);
            if (w) v = __fmul_rn(v, wv[u]);
            sv[i] = v;
            if (y) y[i] = v;
        }
    }
}

// sv = RMSNorm(x + res) * w of one row in shared memory, as k_rmsnorm_act computes it (x is not written back);
// every thread of the block calls it, and it ends with a barrier (sv complete).
static __device__ void block_rmsnorm_smem(float *sv, const float *x, const float *res, const float *w, int n,
                                          float eps) {
    const double ss = norm_load_sumsq(sv, (float *)x, res, n, false);
    norm_scale(sv, w, norm_rms_scale(ss, n, eps), NULL, n);
    __syncthreads();
}

// ---- grid-wide barrier -------------------------------------------------------------------------------------------
//
// For kernels whose blocks are all resident at once (grid no larger than the occupancy allows, launched cooperatively
// where the driver can): *bar is one word, zeroed once, used by one kernel at a time. Every block adds 1, block 0
// adds 2^31 - (gridDim.x - 1), so the word's top bit flips exactly when the last block arrives and the low bits come
// back to where they were: no reset between barriers or between graph replays. Writes before the barrier are
// visible after it (fence before the add, acquire loads while spinning); data other blocks wrote must still be read
// with loads that bypass L1 (__ldcg) when this SM may hold an older copy.
__device__ __forceinline__ unsigned int st_ld_acquire(const unsigned int *p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    unsigned int v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
#else
    const unsigned int v = *(const volatile unsigned int *)p;
    __threadfence();
    return v;
#endif
}
// Counts this block's arrival at *counter (target arrivals per use) after its writes; true, in every thread of the
// block, for the last block to arrive, whose reads then see every arrived block's writes (read data other blocks
// wrote with __ldcg when this SM may hold an older copy). Resets the counter for the next launch (graph replay).
// Block-uniform: every thread of the block must call it. s_last: a shared-memory word of the caller's.
// Without ONE_RMW (and below sm_70) every thread fences (sequentially consistent) before the barrier; thread 0
// alone fencing (acq_rel, the cooperative-groups pattern) had measured 454.6 vs 458.0 tok/s tg128 (2026-11-30i).
// ONE_RMW: thread 0's arrival is one acquire-release atomic after the barrier (the barrier orders the block's
// writes before it; the release is cumulative) and no thread fences: the CUTLASS semaphore pattern. H200
// (2026-12-01j, bench/ab.sh): the decode attention's merges, tg128 @ d16384 358.05 -> 362.34 tok/s; then the other
// kernels' (the router's and the GLU's last blocks; ST_ARRIVE_ONE_RMW, the default; 0 for an A/B build): tg128
// 505.17 -> 510.38, d16384 362.56 -> 365.02.
#ifndef ST_ARRIVE_ONE_RMW
#define ST_ARRIVE_ONE_RMW 1
#endif
template <bool ONE_RMW = ST_ARRIVE_ONE_RMW != 0>
__device__ __forceinline__ bool st_block_arrive_last(int32_t *counter, int target, int &s_last) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    if (ONE_RMW) {
        __syncthreads();
        if (threadIdx.x == 0) {
            int old;
            asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(old) : "l"(counter) : "memory");
            s_last = old == target - 1;
            if (s_last) *counter = 0;
        }
        __syncthreads();
        return s_last != 0;
    }
#endif
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        s_last = atomicAdd(counter, 1) == target - 1;
        if (s_last) *counter = 0;
    }
    __syncthreads();
    if (s_last) __threadfence();
    return s_last != 0;
}
// The device's nanosecond clock (for timeouts of waits that must never hang).
__device__ __forceinline__ unsigned long long st_globaltimer_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
// Nanoseconds since *t0 by st_globaltimer_ns, never "negative": where the clock stepped back (the driver may set it
// again), *t0 moves back with it, so an unsigned now - t0 cannot read as ~2^64 ns and end a timeout at once.
__device__ __forceinline__ unsigned long long st_elapsed_ns(unsigned long long *t0) {
    const unsigned long long now = st_globaltimer_ns();
    if (now < *t0) *t0 = now;
    return now - *t0;
}

// ---- activation quantization in the CPU's formats (quantize_act.h), IEEE-rounded ---------------------------
//
// Every division is __fdiv_rn: under --use_fast_math a plain '/' is approximate and would move a quant or a scale
// by one unit against the CPU's IEEE arithmetic.

// Q8_0 / Q8_1 block b of a planar row of nb blocks; lane j of the group holds element j (value v).
// The CPU's Q8_0 / Q8_1 rules for one 32-element block, lane j holding element j (value v): returns its quant; d
// receives the block scale (f32, before the CPU's rounding to half).
__device__ __forceinline__ int q8_32(float v, float &d) {
    const float amax = g32_max_abs(fabsf(v));
    d = __fdiv_rn(amax, 127.0f);
    const float id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    return __float2int_rn(__fmul_rn(v, id));  // ties to even, as the CPU's nearbyintf
}

__device__ __forceinline__ void quant32(uint8_t *row, int nb, int b, int j, float v, bool q81) {
    float d;
    const int q = q8_32(v, d);
    const int sum = g32_sum_i(q);
    row[(size_t)b * 32 + j] = (uint8_t)(int8_t)q;
    if (j == 0) {
        const float d16 = __half2float(__float2half_rn(d));
        const float s = q81 ? __half2float(__float2half_rn(__fmul_rn((float)sum, d))) : __fmul_rn(d16, (float)sum);
        ((float2 *)(row + (size_t)nb * 32))[b] = make_float2(d16, s);
    }
}

// The CPU's Q8_K rules for one 256-element block held by a group, the lane's v[j] being element idx[j] of it (idx
// ascending in j): q[j] the int8 quant of v[j]; returns d (0 for an all-zero block, whose quants are 0).
__device__ __forceinline__ float q8k_block_idx(const float v[8], const int idx[8], int q[8]) {
    // The CPU keeps the first element of strictly larger magnitude (index order).
    float best_abs = -1.0f, best_val = 0.0f;
    int best_idx = 1 << 30;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const float a = fabsf(v[j]);
        if (a > best_abs) best_abs = a, best_val = v[j], best_idx = idx[j];
    }
#if G32_REDUX_ON
    // The largest magnitude (its float bits order like the values; +1 keeps 0.0 above a lane with none, -1), then the
    // lowest index holding it, then that element's sign: two reductions and a vote instead of 15 shuffles.
    const unsigned key = best_abs >= 0.0f ? __float_as_uint(best_abs) + 1u : 0u;
    const unsigned mk = __reduce_max_sync(ST_WARP_MASK, key);
    if (mk != 0u) {  // (0: every element NaN, which the butterfly also leaves at -1 / 0)
        const unsigned mi = __reduce_min_sync(ST_WARP_MASK, key == mk ? (unsigned)best_idx : 0xffffffffu);
        const bool neg = __any_sync(ST_WARP_MASK, key == mk && (unsigned)best_idx == mi && best_val < 0.0f);
        best_abs = __uint_as_float(mk - 1u);
        best_val = neg ? -best_abs : best_abs;
    }
#else
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float oa = __shfl_xor_sync(ST_WARP_MASK, best_abs, o);
        const float ov = __shfl_xor_sync(ST_WARP_MASK, best_val, o);
        const int oi = __shfl_xor_sync(ST_WARP_MASK, best_idx, o);
        if (oa > best_abs || (oa == best_abs && oi < best_idx)) best_abs = oa, best_val = ov, best_idx = oi;
    }
#endif
    if (best_abs == 0.0f) {
#pragma unroll
        for (int j = 0; j < 8; j++) q[j] = 0;
        return 0.0f;
    }
    const float iscale = __fdiv_rn(-127.0f, best_val);
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int t = __float2int_rn(__fmul_rn(iscale, v[j]));
        q[j] = t > 127 ? 127 : t;
    }
    return __fdiv_rn(1.0f, iscale);
}
// The same for a group holding v[j] = element 32 j + lane.
__device__ __forceinline__ float q8k_block(int lane, const float v[8], int q[8]) {
    int idx[8];
#pragma unroll
    for (int j = 0; j < 8; j++) idx[j] = 32 * j + lane;
    return q8k_block_idx(v, idx, q);
}

// Q8_K 256-element block kb of a planar row of nb 32-blocks; lane l holds v[j] = element 32 j + l.
__device__ __forceinline__ void quant256(uint8_t *row, int nb, int kb, int lane, const float v[8]) {
    int q[8];
    const float d = q8k_block(lane, v, q);
    float2 *ds = (float2 *)(row + (size_t)nb * 32) + (size_t)kb * 8;
    uint8_t *qs = row + (size_t)kb * 256;
    int my_sum = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        qs[32 * j + lane] = (uint8_t)(int8_t)q[j];
        const int s = g32_sum_i(q[j]);
        if (lane == j) my_sum = s;
    }
    if (lane < 8) ds[lane] = make_float2(d, __fmul_rn(d, (float)my_sum));
}

// Loads of values other blocks of this launch wrote: straight from L2 (never a stale L1 line).
template <bool CG> __device__ __forceinline__ float ldv(const float *p) { return CG ? __ldcg(p) : *p; }

// The block quantizes 32-blocks [b0, b0 + n32) of a row into the planar row `row` of nb blocks; src points at the
// first element of block b0 (element 32 b0 + i at src[i]); b0, n32 multiples of 8 for Q8_K. All threads of the
// block call it (no barrier inside).
template <bool CG>
__device__ void block_quant(int fmt, const float *src, uint8_t *row, int nb, int b0, int n32) {
    const int lane = threadIdx.x % G32, g = threadIdx.x / G32, ng = blockDim.x / G32;
    if (fmt == ST_TYPE_Q8_K) {
        for (int kb = g; kb < n32 / 8; kb += ng) {
            float v[8];
#pragma unroll
            for (int j = 0; j < 8; j++) v[j] = ldv<CG>(src + (size_t)kb * 256 + 32 * j + lane);
            quant256(row, nb, b0 / 8 + kb, lane, v);
        }
    } else {
        for (int b = g; b < n32; b += ng)
            quant32(row, nb, b0 + b, lane, ldv<CG>(src + (size_t)b * 32 + lane), fmt == ST_TYPE_Q8_1);
    }
}

static inline bool dec_fmt_ok(int fmt) { return fmt == ST_TYPE_Q8_0 || fmt == ST_TYPE_Q8_1 || fmt == ST_TYPE_Q8_K; }

#endif
