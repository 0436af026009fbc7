// The CPU-miss split's device steps (hybrid.h) as functions of one block, shared by their own launches (hybrid.cu
// k_hy_classify, k_hy_combine) and the neighbouring decode launches they can ride in (decode.cu: the router's last
// block classifies, the down kernel's blocks join).
#ifndef STRATA_CUDA_HYBRID_BELL_CUH
#define STRATA_CUDA_HYBRID_BELL_CUH

#include "cuda/common.cuh"         // st_tbl_entry
#include "cuda/decode_common.cuh"  // st_globaltimer_ns, st_elapsed_ns
#include "cuda/hybrid.h"
#include "cuda/hybrid_count.cuh"  // the count's statistics (hy_pf_hit, hy_count_stats)
#include "cuda/hybrid_split.h"

// A rank of ids_gpu [K] is the CPU's (-1): only then has the layer an answer to wait for and CPU rows to sum.
// Unrolled to the bound so that the K loads issue together (a rolled loop waited for each in turn).
__device__ __forceinline__ bool hy_any_cpu_rank(const int32_t *ids_gpu, int K) {
    bool any = false;
#pragma unroll
    for (int k = 0; k < 32; k++)
        if (k < K) any |= ids_gpu[k] == -1;
    return any;
}

// One row's rank-order weighted sum over all K ranks, the fused down kernel's order (o = w0 y0; o = o + w_k y_k ...,
// each step IEEE-rounded): y_k = y_gpu[k * gpu_stride] for a GPU rank, else the CPU's y_cpu_r[k * d], read uncached
// (the host wrote it after the launch began), plus cpu_nan (NaN after a wait that timed out).
__device__ __forceinline__ float hy_join_row(const int32_t *ids_gpu, const float *w, int K, const float *y_gpu,
                                             int gpu_stride, const float *y_cpu_r, int d, float cpu_nan) {
    float o = 0.0f;
    for (int k = 0; k < K; k++) {
        const float y = ids_gpu[k] >= 0 ? y_gpu[(size_t)k * gpu_stride] : __ldcv(y_cpu_r + (size_t)k * d) + cpu_nan;
        const float t = __fmul_rn(y, w[k]);
        o = k == 0 ? t : __fadd_rn(o, t);
    }
    return o;
}

// Classifies ids [K] (K <= 32, visible to the block) by a's rules and exports the CPU's work (hybrid.h
// st_cuda_hy_classify); with a doorbell, rings it once the exports are fenced. Every thread of the block calls it.
// Warp 0 classifies, one rank per lane: the K table reads and the carry's read are in flight together (one thread
// walked the ranks, waiting for each table read in turn: 385.6 -> 389.0 tok/s at 18.9 GiB F 0, 2026-12-01c). The
// CPU's ranks are st_hy_cpu_mask's (hybrid_split.h, the host rule's too): the last n_cpu misses in rank order.
// An id out of range stays on the GPU, whose kernels turn it into NaN (visible, never a wild read).
// cnt (the router launch's tail, one token): the routing count rides in warp 0 too, from the same table reads
// (hy_count_pairs' rules): the progress word first, fenced by its one writer before the warp's table reads (prefetch
// rule 1, hybrid.h), the counts' and statistics' atomics after the classify, unfenced (order-independent integers
// nobody reads in this step). It replaced a block barrier, the count's own ids -> table reads and a fence of every
// thread between the route and the classify.
__device__ inline void hy_classify_block(const st_hy_split_args &a, const int32_t *ids, int K,
                                         const st_hy_count_args *cnt = nullptr) {
    __shared__ int s_ncpu;
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        if (cnt && cnt->pf.progress) {
            if (lane == 0) {
                atomicExch(cnt->pf.progress, cnt->pf.layer);  // before any MoE kernel of the layer
                __threadfence();
            }
            __syncwarp();
        }
        const uint32_t carry_in = lane == 0 ? *a.carry : 0u;
        const int e = lane < K ? ids[lane] : -1;
        const bool valid = e >= 0 && e < a.n_expert;
        const uint8_t *lo = (const uint8_t *)a.vram_lo, *hi = (const uint8_t *)a.vram_hi;
        const uint8_t *w = valid ? st_tbl_entry(a.table, 3 * (size_t)e) : lo;
        // (a.snap: the router's snapshot decides, as the GLU blocks read it; w then only feeds the statistics)
        const bool in_vram = a.snap ? !valid || a.snap[e] != 0 : hy_in_vram(w, lo, hi);
        const uint32_t miss_mask = __ballot_sync(0xffffffffu, lane < K && !in_vram);
        const int n_miss = __popc(miss_mask);
        int n_cpu = 0;
        if (lane == 0) {
            uint32_t c = carry_in;
            n_cpu = st_hy_split_cpu(n_miss, a.cpu_q16, &c);
            *a.carry = c;
        }
        n_cpu = __shfl_sync(0xffffffffu, n_cpu, 0);
        const uint32_t below = (1u << lane) - 1u;  // the lower ranks' bits
        const uint32_t cpu_mask = st_hy_cpu_mask(miss_mask, n_cpu);
        const bool cpu = (cpu_mask >> lane) & 1u;
        if (lane < K) a.ids_gpu[lane] = cpu ? -1 : e;
        if (cpu) {
            const int i = __popc(cpu_mask & below);
            a.meta[1 + i] = lane;
            a.meta[1 + 32 + i] = e;
        }
        if (lane == 0) {
            // meta[0] (host memory) only where a reader looks: with the doorbell the host reads meta after a ring,
            // which only a layer with CPU ranks sends; the host-node path reads it after every classify.
            if (n_cpu || !a.bell) a.meta[0] = n_cpu;
            if (a.cpu_count && n_cpu) *a.cpu_count += (uint32_t)n_cpu;
            s_ncpu = n_cpu;
        }
        if (cnt) {
            if (lane < K && valid) atomicAdd(&cnt->counts[e], 1u);
            if (cnt->sel_miss) {  // (uniform in the warp)
                const int pf_hits = __popc(__ballot_sync(0xffffffffu, lane < K && valid && hy_pf_hit(*cnt, w)));
                if (lane == 0) hy_count_stats(*cnt, (unsigned)K, (unsigned)n_miss, (unsigned)pf_hits);
            }
        }
    }
    __syncthreads();
    if (s_ncpu == 0) return;  // nothing for the CPU: no exports, no ring (the join sees no -1 in ids_gpu)
    for (int i = threadIdx.x; i < a.n_embd; i += blockDim.x) a.hx[i] = a.x[i];
    __threadfence_system();  // (kernel completion publishes these too; the host node reads them after it)
    if (!a.bell) return;
    __syncthreads();  // every export is fenced: ring (hybrid.h, doorbell)
    if (threadIdx.x == 0) {
        const uint32_t s = *a.seq + 1;
        *a.seq = s;
        volatile uint32_t *vb = a.bell;
        vb[2] = (uint32_t)a.layer;
        __threadfence_system();
        vb[0] = s;
        __threadfence_system();
    }
}

// Thread 0 of a block: waits until the host answered the last ring (bell[1] == *seq); false after
// ST_HY_BELL_TIMEOUT_NS (bell[3] = 1 then). With j.leader the first block to arrive polls host memory and publishes
// the outcome in leader[1] (round) and leader[2] (ok); the others poll those in L2 (the first to arrive is resident,
// so no block waits on one that cannot run). Without it every block polls host memory. Adds the wait to *j.wait_ns
// once per round (the leader's, else block 0's).
__device__ inline bool hy_wait_answer(const st_hy_join_args &j) {
    const uint32_t s = *(volatile const uint32_t *)j.seq;
    unsigned long long t0 = st_globaltimer_ns();
    const bool poll_host = !j.leader || atomicExch(&j.leader[0], s) != s;  // the round's first claim
    if (!poll_host) {
        const volatile uint32_t *vl = j.leader;
        while (vl[1] != s) {
            if (st_elapsed_ns(&t0) > 2 * ST_HY_BELL_TIMEOUT_NS) return false;  // (the leader gives up first)
#if __CUDA_ARCH__ >= 700
            __nanosleep(128);
#endif
        }
        __threadfence();
        return vl[2] != 0;
    }
    const volatile uint32_t *vb = j.bell;
    bool ok = true;
    while (vb[1] != s) {
        if (st_elapsed_ns(&t0) > ST_HY_BELL_TIMEOUT_NS) {
            ok = false;
            ((volatile uint32_t *)j.bell)[3] = 1;
            break;
        }
#if __CUDA_ARCH__ >= 700
        __nanosleep(256);
#endif
    }
    __threadfence_system();
    if (j.wait_ns && (j.leader || blockIdx.x == 0)) atomicAdd(j.wait_ns, st_elapsed_ns(&t0));
    if (j.leader) {
        ((volatile uint32_t *)j.leader)[2] = ok ? 1u : 0u;
        __threadfence();
        ((volatile uint32_t *)j.leader)[1] = s;
    }
    return ok;
}

#endif
