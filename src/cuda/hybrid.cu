// Hybrid placement kernels (see hybrid.h).
#include "cuda/hybrid.h"

#include <string.h>

#include "cuda/common.cuh"         // st_tbl_entry, ST_WARP_SIZE
#include "cuda/decode_common.cuh"  // PDL: the per-layer kernels of the decode step sit between PDL launches
#include "cuda/hybrid_bell.cuh"   // the split's classify and wait
#include "cuda/hybrid_count.cuh"

__global__ void k_hy_count(const int32_t *__restrict__ ids, int n_pairs, const st_hy_count_args a) {
    st_pdl_wait();  // ids: the router's output (decode_common.cuh's PDL rules)
    st_pdl_trigger();
    hy_count_pairs(ids, n_pairs, a, threadIdx.x, blockDim.x);
}

extern "C" int st_cuda_hy_count(const int32_t *ids, int n_pairs, const st_hy_count_args *a, cudaStream_t stream) {
    if (n_pairs <= 0) return 0;
    if (!a->counts || (a->sel_miss && !a->table))
        return st_err("st_cuda_hy_count: no counters, or miss counting without the layer's address table");
    const int threads = n_pairs < 256 ? ((n_pairs + ST_WARP_SIZE - 1) / ST_WARP_SIZE) * ST_WARP_SIZE : 256;
    // A PDL launch: between the router and the MoE kernels of every hybrid decode layer, a plain launch would cost
    // the chain its overlap on both sides.
    st_dec_launch(k_hy_count, dim3(1), dim3((unsigned)threads), 0, stream, ids, n_pairs, *a);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : st_cuda_check_at(e, "k_hy_count<<<>>>", __FILE__, __LINE__);
}

struct hy_updates {
    st_hy_update u[ST_HY_MAX_UPDATES];
    int n;
};

__global__ void k_hy_set_table(const void **table, const hy_updates up) {
    const int i = threadIdx.x;
    if (i >= up.n * 3) return;
    const st_hy_update &u = up.u[i / 3];
    table[u.index * 3 + i % 3] = u.ptr[i % 3];
}

extern "C" int st_cuda_hy_set_table(const void **table, const st_hy_update *u, int n, cudaStream_t stream) {
    if (n <= 0) return 0;
    if (n > ST_HY_MAX_UPDATES) return st_err("st_cuda_hy_set_table: %d updates, at most %d per call", n, ST_HY_MAX_UPDATES);
    hy_updates up;
    memset(&up, 0, sizeof up);
    memcpy(up.u, u, sizeof *u * (size_t)n);
    up.n = n;
    k_hy_set_table<<<1, ST_HY_MAX_UPDATES * 3, 0, stream>>>(table, up);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : st_cuda_check_at(e, "k_hy_set_table<<<>>>", __FILE__, __LINE__);
}

// ---- CPU misses -------------------------------------------------------------------------------------------------

__global__ void k_hy_classify(const int32_t *__restrict__ ids, int K, const st_hy_split_args a) {
    st_pdl_wait();  // ids, the table entries, x: earlier kernels (a no-op after a plain launch)
    st_pdl_trigger();
    hy_classify_block(a, ids, K);
}

// Both classify entry points: argument checks, then the kernel (seq, bell NULL: no doorbell).
static int hy_classify(const char *fn, const int32_t *ids, int K, int n_expert, const void *const *table,
                       const void *vram_lo, const void *vram_hi, uint32_t cpu_q16, uint32_t *carry, int32_t *ids_gpu,
                       int32_t *meta, const float *x, float *hx, int n_embd, uint32_t *cpu_count, uint32_t *seq,
                       uint32_t *bell, int layer, cudaStream_t stream) {
    if (K <= 0 || K > 32 || n_expert <= 0 || n_embd <= 0)
        return st_err("%s: %d experts used of %d (1..32), n_embd %d", fn, K, n_expert, n_embd);
    if (!ids || !table || !carry || !ids_gpu || !meta || !x || !hx) return st_err("%s: NULL pointer", fn);
    // The doorbell path is a plain chain of kernels: PDL there; the host-node path forks after this kernel, whose
    // event must see it complete: a plain launch.
    const st_hy_split_args a = {n_expert, table, vram_lo, vram_hi, cpu_q16, carry, ids_gpu, meta, x, hx, n_embd,
                                cpu_count, seq, bell, layer, NULL};
    st_dec_launch_if(bell != NULL, k_hy_classify, dim3(1), dim3(256), 0, stream, ids, K, a);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : st_cuda_check_at(e, "k_hy_classify<<<>>>", __FILE__, __LINE__);
}

extern "C" int st_cuda_hy_classify(const int32_t *ids, int K, int n_expert, const void *const *table,
                                   const void *vram_lo, const void *vram_hi, uint32_t cpu_q16, uint32_t *carry,
                                   int32_t *ids_gpu, int32_t *meta, const float *x, float *hx, int n_embd,
                                   uint32_t *cpu_count, cudaStream_t stream) {
    return hy_classify("st_cuda_hy_classify", ids, K, n_expert, table, vram_lo, vram_hi, cpu_q16, carry, ids_gpu, meta,
                       x, hx, n_embd, cpu_count, NULL, NULL, 0, stream);
}

extern "C" int st_cuda_hy_classify_bell(const int32_t *ids, int K, int n_expert, const void *const *table,
                                        const void *vram_lo, const void *vram_hi, uint32_t cpu_q16, uint32_t *carry,
                                        int32_t *ids_gpu, int32_t *meta, const float *x, float *hx, int n_embd,
                                        uint32_t *cpu_count, uint32_t *seq, uint32_t *bell, int layer,
                                        cudaStream_t stream) {
    if (!seq || !bell) return st_err("st_cuda_hy_classify_bell: NULL doorbell");
    return hy_classify("st_cuda_hy_classify_bell", ids, K, n_expert, table, vram_lo, vram_hi, cpu_q16, carry, ids_gpu,
                       meta, x, hx, n_embd, cpu_count, seq, bell, layer, stream);
}


__global__ void k_hy_combine(const int32_t *__restrict__ ids_gpu, const float *__restrict__ w,
                             const float *__restrict__ y_gpu, const float *y_cpu, int K, int d, float *out,
                             const float *add, const st_hy_join_args j) {
    __shared__ int s_ok;
    st_pdl_wait();  // y_gpu, w, seq, add: earlier kernels (a no-op after a plain launch)
    st_pdl_trigger();
    if (!hy_any_cpu_rank(ids_gpu, K)) return;  // (uniform) the down kernel wrote out itself (decode.h)
    if (j.bell) {  // doorbell: wait for the host thread's answer (hybrid.h)
        if (threadIdx.x == 0) s_ok = hy_wait_answer(j);
        __syncthreads();
    }
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= d) return;
    const float o = hy_join_row(ids_gpu, w, K, y_gpu + r, d, y_cpu + r, d,
                                j.bell && !s_ok ? __int_as_float(0x7fc00000) : 0.0f);
    out[r] = add ? __fadd_rn(add[r], o) : o;
}

// Both combine entry points: argument checks, then the kernel (seq, bell NULL: no doorbell).
static int hy_combine(const char *fn, const int32_t *ids_gpu, const float *w, const float *y_gpu, const float *y_cpu,
                      int K, int n_embd, float *out, const float *add, const uint32_t *seq, uint32_t *bell,
                      unsigned long long *wait_ns, cudaStream_t stream) {
    if (K <= 0 || K > 32 || n_embd <= 0) return st_err("%s: K %d (1..32), n_embd %d", fn, K, n_embd);
    if (!ids_gpu || !w || !y_gpu || !y_cpu || !out) return st_err("%s: NULL pointer", fn);
    // (as the classify launch: PDL on the doorbell path; the host-node path joins an event first)
    const st_hy_join_args j = {y_cpu, seq, bell, wait_ns, NULL};  // 8 blocks: each polls host memory itself
    st_dec_launch_if(bell != NULL, k_hy_combine, dim3((unsigned)((n_embd + 255) / 256)), dim3(256), 0, stream, ids_gpu,
                     w, y_gpu, y_cpu, K, n_embd, out, add, j);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : st_cuda_check_at(e, "k_hy_combine<<<>>>", __FILE__, __LINE__);
}

extern "C" int st_cuda_hy_combine(const int32_t *ids_gpu, const float *w, const float *y_gpu, const float *y_cpu,
                                  int K, int n_embd, float *out, const float *add, cudaStream_t stream) {
    return hy_combine("st_cuda_hy_combine", ids_gpu, w, y_gpu, y_cpu, K, n_embd, out, add, NULL, NULL, NULL, stream);
}

extern "C" int st_cuda_hy_combine_bell(const int32_t *ids_gpu, const float *w, const float *y_gpu, const float *y_cpu,
                                       int K, int n_embd, float *out, const float *add, const uint32_t *seq,
                                       uint32_t *bell, unsigned long long *wait_ns, cudaStream_t stream) {
    if (!seq || !bell) return st_err("st_cuda_hy_combine_bell: NULL doorbell");
    return hy_combine("st_cuda_hy_combine_bell", ids_gpu, w, y_gpu, y_cpu, K, n_embd, out, add, seq, bell, wait_ns,
                      stream);
}

// ---- lookahead prefetch (hybrid.h) ------------------------------------------------------------------------------

#define PF_CHUNK (64 << 10)  // bytes of a record one block copies at a time
#define PF_UNROLL 8          // 16-byte loads in flight per thread (PCIe latency: many loads outstanding)

// Layer m's plan from pred [P] (hybrid.h, st_cuda_hy_pf_plan's rule) by one warp (P, per_set <= 32): lane i looks
// up prediction i (its home entry and the set's owners) so the P lookups are in flight together (one thread walking
// them waited for each home entry in turn); lane 0 then frees slots, restores their owners, checks the progress
// word and writes the work list, as few steps as copies (at most max_copies). With prev_max > 0 the experts layer m
// chose since this layer's last plan (its routing counts moved) come first, 32 per pass in id order.
__device__ __forceinline__ bool pf_resident(const st_hy_pf &pf, int idx) {
    const uint8_t *home = st_tbl_entry(pf.home, 3 * (size_t)idx);
    return home >= (const uint8_t *)pf.cache_lo && home < (const uint8_t *)pf.cache_hi;
}

__global__ void k_hy_pf_plan(const st_hy_pf pf, int m, const int32_t *__restrict__ pred, int P, int post) {
    __shared__ int32_t s_own[32], s_need[32];
    __shared__ unsigned s_keep;
    __shared__ unsigned s_prev[ST_HY_PF_PREV_MAX_E / 32];  // bit e: e is one of the previous choice's candidates
    const int lane = threadIdx.x % 32, E = pf.E, set = m % pf.n_sets;
    int32_t *own = pf.owner + (size_t)set * pf.per_set;
    // A plan that starts after its layer's MoE began changes nothing: its copies would land after the reads, and
    // freeing slots then would only send earlier tokens' copies home (and moving `seen` would hide this token's
    // choice from the next plans). Checked again after the restores below (rule 1).
    if (!post) {
        const int late = __shfl_sync(0xffffffffu, lane == 0 ? *(volatile const int32_t *)pf.progress >= m : 0, 0);
        if (late) {
            if (lane == 0) {
                pf.work[0] = 0;
                atomicAdd(&pf.stats[1], 1ull);
            }
            return;
        }
    }
    if (lane < pf.per_set) s_own[lane] = own[lane];
    if (lane == 0) s_keep = 0;
    __syncwarp();
    const int cap = pf.max_copies > 0 && pf.max_copies < pf.per_set ? pf.max_copies : pf.per_set;
    const unsigned below = (1u << lane) - 1u;
    int n_prev_want = 0;  // wanted records of the previous choice, s_need[0 ..)
    if (pf.prev_max > 0) {
        int n_sel = 0;
        for (int e0 = 0; e0 < E; e0 += 4 * 32) {  // four chunks' counts loaded together, then decided in order
            uint32_t cur[4], seen[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int e = e0 + 32 * k + lane, idx = m * E + e;
                cur[k] = e < E ? pf.counts[idx] : 0u;
                seen[k] = e < E ? pf.seen[idx] : 0u;
            }
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int e = e0 + 32 * k + lane, idx = m * E + e;
                if (e0 + 32 * k >= E) break;  // (uniform in the warp)
                if (e < E && !post) pf.seen[idx] = cur[k];  // (a post plan leaves them for the next plan)
                // The read-back zeroes both, so cur < seen does not occur; cur > seen: chosen since the last plan.
                bool sel = e < E && cur[k] != seen[k] && cur[k] > 0;
                const unsigned sel_mask = __ballot_sync(0xffffffffu, sel);
                sel = sel && n_sel + __popc(sel_mask & below) < pf.prev_max;
                n_sel += __popc(sel_mask);
                bool want = false;
                int found = -1;
                if (sel && !pf_resident(pf, idx)) {
                    for (int j = 0; j < pf.per_set; j++)
                        if (s_own[j] == idx) found = j;
                    want = found < 0;
                }
                if (found >= 0) atomicOr(&s_keep, 1u << found);
                const unsigned cand = __ballot_sync(0xffffffffu, sel), want_mask = __ballot_sync(0xffffffffu, want);
                if (lane == 0) s_prev[(e0 + 32 * k) / 32] = cand;
                const int rank = n_prev_want + __popc(want_mask & below);
                if (want && rank < cap) s_need[rank] = e;
                n_prev_want += __popc(want_mask);
            }
        }
        __syncwarp();
    }
    int e = -1, found = -1;
    bool want = false;  // to copy: valid, not resident, not in the set already, not one of the previous choice's
    if (lane < P) {
        e = pred[lane];
        if (e >= 0 && e < E && !(pf.prev_max > 0 && (s_prev[e / 32] >> (e % 32)) & 1u)) {
            const int idx = m * E + e;
            if (!pf_resident(pf, idx)) {
                for (int j = 0; j < pf.per_set; j++)
                    if (s_own[j] == idx) found = j;
                want = found < 0;  // (found: copied for an earlier token, still in place)
            }
        }
    }
    if (found >= 0) atomicOr(&s_keep, 1u << found);
    const uint32_t want_mask = __ballot_sync(0xffffffffu, want);
    const int rank = n_prev_want + __popc(want_mask & below);  // the likeliest first: prediction order
    if (want && rank < cap) s_need[rank] = e;
    __syncwarp();
    if (lane != 0) return;
    const int n_need = min(n_prev_want + __popc(want_mask), cap);
    // Free slots in index order; a reassigned slot's owner goes back home first.
    int slot[32], n = 0;
    for (int j = 0; j < pf.per_set && n < n_need; j++) {
        if (s_keep & (1u << j)) continue;
        const int o = s_own[j];
        if (o >= 0)
            for (int k = 0; k < 3; k++) pf.table[3 * (size_t)o + k] = st_tbl_entry(pf.home, 3 * (size_t)o + k);
        own[j] = -1;
        slot[n++] = j;
    }
    __threadfence();  // the restores are visible before the progress word is read (hybrid.h, rule 1)
    if (!post) {  // (a post plan's layer finished its MoE: the caller's fork order, hybrid.h rule 4)
        const int progress = atomicAdd(pf.progress, 0);
        if (progress >= m) {  // layer m's MoE may be running: leave its slots unowned, copy nothing
            n = 0;
            atomicAdd(&pf.stats[1], 1ull);
        } else {
            atomicAdd(&pf.stats[0], 1ull);
        }
    }
    for (int i = 0; i < n; i++) {
        own[slot[i]] = m * E + s_need[i];
        pf.work[1 + 2 * i] = slot[i];
        pf.work[2 + 2 * i] = s_need[i];
    }
    pf.work[0] = n;
}

// Both plan entry points: argument checks, then the kernel (post: no predictions, the previous choice required).
static int hy_pf_plan_launch(const char *fn, const st_hy_pf *pf, int m, const int32_t *pred, int P, int post,
                             cudaStream_t stream) {
    if (!pf || (!post && (!pred || P <= 0 || P > 32)) || pf->per_set <= 0 || pf->per_set > 32 || pf->n_sets < 3 ||
        m < 0)
        return st_err("%s: layer %d, %d predictions (1..32), %d slots per set (1..32), %d sets (>= 3)", fn, m, P,
                      pf ? pf->per_set : 0, pf ? pf->n_sets : 0);
    if (post && pf->prev_max <= 0) return st_err("%s: a post plan needs the previous choice (prev_max > 0)", fn);
    if (pf->prev_max > 0 && (!pf->counts || !pf->seen || pf->E > ST_HY_PF_PREV_MAX_E))
        return st_err("%s: the previous choice needs the routing counts and their last view, and at most %d experts "
                      "(%d)", fn, ST_HY_PF_PREV_MAX_E, pf->E);
    k_hy_pf_plan<<<1, 32, 0, stream>>>(*pf, m, pred, P, post);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : st_cuda_check_at(e, "k_hy_pf_plan<<<>>>", __FILE__, __LINE__);
}

extern "C" int st_cuda_hy_pf_plan(const st_hy_pf *pf, int m, const int32_t *pred, int P, cudaStream_t stream) {
    return hy_pf_plan_launch("st_cuda_hy_pf_plan", pf, m, pred, P, 0, stream);
}

extern "C" int st_cuda_hy_pf_plan_post(const st_hy_pf *pf, int m, cudaStream_t stream) {
    return hy_pf_plan_launch("st_cuda_hy_pf_plan_post", pf, m, NULL, 0, 1, stream);
}

__global__ void __launch_bounds__(256) k_hy_pf_copy(const st_hy_pf pf, int m) {
    const int n = *(volatile const int32_t *)pf.work;
    if (n <= 0) return;
    const long long bytes = pf.layer_meta[4 * (size_t)m];
    const int per_rec = (int)((bytes + PF_CHUNK - 1) / PF_CHUNK), set = m % pf.n_sets;
    __shared__ int s_last;
    for (int c = blockIdx.x; c < n * per_rec; c += gridDim.x) {
        const int i = c / per_rec, part = c % per_rec;
        const int j = pf.work[1 + 2 * i], e = pf.work[2 + 2 * i];
        const long long off = (long long)part * PF_CHUNK, len = min((long long)PF_CHUNK, bytes - off);
        const uint4 *src = (const uint4 *)(pf.rec[(size_t)m * pf.E + e] + off);
        uint8_t *slot = pf.pf_slots + ((size_t)set * pf.per_set + j) * (size_t)pf.stride;
        uint4 *dst = (uint4 *)(slot + off);
        const int n16 = (int)(len / 16);
        for (int i0 = threadIdx.x; i0 < n16; i0 += blockDim.x * PF_UNROLL) {
            uint4 v[PF_UNROLL];
#pragma unroll
            for (int u = 0; u < PF_UNROLL; u++) {
                const int k = i0 + u * (int)blockDim.x;
                if (k < n16) v[u] = __ldcs(src + k);  // streamed once: do not keep the host bytes in L2
            }
#pragma unroll
            for (int u = 0; u < PF_UNROLL; u++) {
                const int k = i0 + u * (int)blockDim.x;
                if (k < n16) dst[k] = v[u];
            }
        }
        for (long long k = (long long)n16 * 16 + threadIdx.x; k < len; k += blockDim.x)  // a tail under 16 bytes
            ((uint8_t *)dst)[k] = ((const uint8_t *)src)[k];
        __threadfence();  // this thread's part of the record is visible device-wide (hybrid.h, rule 3)
        __syncthreads();
        if (threadIdx.x == 0) s_last = atomicAdd(&pf.done[i], 1u) == (unsigned)per_rec - 1;
        __syncthreads();
        if (s_last && threadIdx.x < 3) {  // every part is in place: publish the record's entry
            if (threadIdx.x == 0) pf.done[i] = 0;
            const size_t idx = (size_t)m * pf.E + e;
            __threadfence();
            pf.table[3 * idx + threadIdx.x] = slot + pf.layer_meta[4 * (size_t)m + 1 + threadIdx.x];
            if (threadIdx.x == 0) {
                atomicAdd(&pf.stats[2], 1ull);
                atomicAdd(&pf.stats[3], (unsigned long long)bytes);
            }
        }
        __syncthreads();  // s_last is reused by the next chunk
    }
}

extern "C" int st_cuda_hy_pf_copy(const st_hy_pf *pf, int m, int n_blocks, cudaStream_t stream) {
    if (!pf || m < 0 || n_blocks <= 0 || ((uintptr_t)pf->pf_slots & 15) || pf->stride % 16)
        return st_err("st_cuda_hy_pf_copy: layer %d, %d blocks, slots must be 16-byte aligned", m, n_blocks);
    k_hy_pf_copy<<<n_blocks, 256, 0, stream>>>(*pf, m);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : st_cuda_check_at(e, "k_hy_pf_copy<<<>>>", __FILE__, __LINE__);
}

__global__ void k_hy_pf_reset(const st_hy_pf pf, int n_slots) {
    for (int j = threadIdx.x; j < n_slots; j += blockDim.x) {
        const int o = pf.owner[j];
        if (o >= 0)
            for (int k = 0; k < 3; k++) pf.table[3 * (size_t)o + k] = pf.home[3 * (size_t)o + k];
        pf.owner[j] = -1;
    }
}

extern "C" int st_cuda_hy_pf_reset(const st_hy_pf *pf, int n_slots, cudaStream_t stream) {
    if (!pf) return st_err("st_cuda_hy_pf_reset: NULL");
    const int all = pf->n_sets * pf->per_set;
    if (n_slots < 0 || n_slots > all) n_slots = all;
    if (!n_slots) return 0;
    k_hy_pf_reset<<<1, 128, 0, stream>>>(*pf, n_slots);
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : st_cuda_check_at(e, "k_hy_pf_reset<<<>>>", __FILE__, __LINE__);
}
