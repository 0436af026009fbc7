// Small kernels of the hybrid expert placement (docs/HYBRID.md, engine/gpu_hybrid.c): routing counters for the
// adaptive expert cache, and stream-ordered updates of the per-layer expert address tables that the fused decode
// kernels read (decode.h). Launchers are C-callable, enqueue only (capturable in a CUDA graph) and return 0, or -1
// with st_errmsg.
#ifndef STRATA_CUDA_HYBRID_H
#define STRATA_CUDA_HYBRID_H

#include <stddef.h>
#include <stdint.h>

#include "cuda/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

// The routing count of one layer's step, as one value (st_cuda_hy_count, or the router launch's last block right
// after the route: decode.h st_cuda_router_topk_count, one launch fewer per hybrid decode layer).
//   pf (decode with the lookahead prefetch; progress NULL: none): first pf.progress = layer (the MoE kernels of
//   `layer` read the table only after this count), then pf.hits += the pairs whose gate address lies in the
//   prefetch slots [pf.lo, pf.hi).
typedef struct st_hy_count_pf {
    int32_t *progress;             // device: the main chain's progress word (st_hy_pf)
    int layer;
    const void *lo, *hi;           // the prefetch slots
    unsigned long long *hits;      // device counter
} st_hy_count_pf;
typedef struct st_hy_count_args {
    int n_expert;
    const void *const *table;      // the layer's [n_expert][3] address table (needed with sel_miss)
    const void *vram_lo, *vram_hi; // the VRAM expert cache
    uint32_t *counts;              // device [n_expert] of this layer: counts[ids[p]] += 1 (NULL: no count)
    uint32_t *sel_miss;            // device [2] of this layer or NULL (decode statistics): [0] += n_pairs, [1] += 1
                                   // per pair whose gate address lies outside [vram_lo, vram_hi) (a PCIe miss)
    st_hy_count_pf pf;
} st_hy_count_args;
// Counts the routed experts ids [n_pairs] (valid ids in [0, n_expert)) by a's rules; integer atomics only
// (order-independent).
int st_cuda_hy_count(const int32_t *ids, int n_pairs, const st_hy_count_args *a, cudaStream_t stream);

// Up to ST_HY_MAX_UPDATES table entries written in one launch (the values travel as kernel arguments, so the host
// needs no buffer that outlives the call): table[u.index * 3 + k] = u.ptr[k] for k < 3.
#define ST_HY_MAX_UPDATES 32
typedef struct st_hy_update {
    int64_t index;         // entry index in the whole table: layer * n_expert + expert
    const void *ptr[3];    // gate, up, down addresses (device-accessible)
} st_hy_update;
int st_cuda_hy_set_table(const void **table, const st_hy_update *u, int n, cudaStream_t stream);


// ---- CPU misses (--pcie-frac < 1, docs/HYBRID.md) -----------------------------------------------------------------

// Classifies the K selected experts of one decode token of one layer (cuda/hybrid_split.h: hit, PCIe miss or CPU
// miss; a miss = the gate address in `table` outside [vram_lo, vram_hi)) and exports the CPU's work:
//   ids_gpu[k] = ids[k] for hits and PCIe misses, -1 for CPU misses (the GPU kernels skip -1: no weight reads);
//   meta[0] = n_cpu, meta[1 + i] = rank, meta[1 + 32 + i] = expert id of the i-th CPU miss (rank order);
//   hx[0 .. n_embd) = x (only when n_cpu > 0);
//   *carry: the layer's error-diffusion residue (st_hy_split_cpu), *cpu_count += n_cpu (if cpu_count).
//   ids: device int32 [K] (K <= 32); x: device f32 [n_embd]; ids_gpu: device int32 [K]; meta: int32 [65] and hx:
//   f32 [n_embd], both page-locked host memory mapped into the device (device pointers); carry, cpu_count: device
//   uint32 [1]. cpu_q16: st_hy_cpu_q16(F). One block.
#define ST_HY_META_INTS 65
int st_cuda_hy_classify(const int32_t *ids, int K, int n_expert, const void *const *table, const void *vram_lo,
                        const void *vram_hi, uint32_t cpu_q16, uint32_t *carry, int32_t *ids_gpu, int32_t *meta,
                        const float *x, float *hx, int n_embd, uint32_t *cpu_count, cudaStream_t stream);

// After st_cuda_moe_down_split (decode.h) of ids_gpu: nothing when no rank is a CPU miss (the down kernel wrote
// out); otherwise the rank-order weighted sum of the K expert outputs and the residual add, as the fused down
// kernel's (o = w[0] y_0; o = o + w[k] y_k ...; out = add + o, each step IEEE-rounded), where y_k is y_gpu row k
// (the down kernel's per-rank rows) when ids_gpu[k] >= 0, else y_cpu row k (host memory mapped into the device,
// read uncached):
//   out[r] = add[r] + o[r] for r < n_embd; out may alias add. y_gpu: device f32 [K][n_embd]; y_cpu: mapped
//   f32 [K][n_embd]; w: device f32 [K].
int st_cuda_hy_combine(const int32_t *ids_gpu, const float *w, const float *y_gpu, const float *y_cpu, int K,
                       int n_embd, float *out, const float *add, cudaStream_t stream);

// ---- doorbell: the CPU branch without a host node (the engine's default; STRATA_HY_HOSTNODE=1 for host nodes) --
//
// bell: 4 words of page-locked host memory mapped into the device (its device address here), seq: one word of
// device memory; both zeroed once, one pair per stream of splits. When the classify kernel exported CPU misses it
// increments *seq (value s), writes bell[2] = layer and then, after a system fence, bell[0] = s; with none it
// touches neither. A host thread that sees bell[0] change reads the exports, computes those experts into
// y_cpu and then writes bell[1] = s (release). The combine kernel, when ids_gpu holds a CPU rank (-1), first waits
// until bell[1] == *seq, polling system memory (a layer without CPU misses costs no PCIe round trip); after
// ST_HY_BELL_TIMEOUT_NS it gives up, writes bell[3] = 1 and the CPU rows it reads are NaN, so a lost host thread
// shows as an error, never as a hang. wait_ns (device, may be NULL): the nanoseconds the combine waited are added to
// it (how long the GPU stood still for the CPU).
#define ST_HY_BELL_TIMEOUT_NS 5000000000ull
int st_cuda_hy_classify_bell(const int32_t *ids, int K, int n_expert, const void *const *table, const void *vram_lo,
                             const void *vram_hi, uint32_t cpu_q16, uint32_t *carry, int32_t *ids_gpu, int32_t *meta,
                             const float *x, float *hx, int n_embd, uint32_t *cpu_count, uint32_t *seq,
                             uint32_t *bell, int layer, cudaStream_t stream);
int st_cuda_hy_combine_bell(const int32_t *ids_gpu, const float *w, const float *y_gpu, const float *y_cpu, int K,
                            int n_embd, float *out, const float *add, const uint32_t *seq, uint32_t *bell,
                            unsigned long long *wait_ns, cudaStream_t stream);

// ---- the split inside the neighbouring launches (STRATA_HY_SPLIT_FUSED=1, A/B) ------------------------------------
//
// The classify and combine launches cost ~2.5 us in every split layer, with or without CPU misses. The same two steps
// as arguments of the launches beside them: the router's last block classifies and rings right after the route
// and the count (decode.h st_cuda_router_topk_split), the down kernel's blocks take the CPU rows in the rank-order sum
// themselves (decode.h st_cuda_moe_down_join). Bit for bit the classify + down_split + combine sequence.
typedef struct st_hy_split_args {  // st_cuda_hy_classify_bell's arguments after ids and K (seq, bell NULL: no ring)
    int n_expert;
    const void *const *table;
    const void *vram_lo, *vram_hi;
    uint32_t cpu_q16;
    uint32_t *carry;
    int32_t *ids_gpu;
    int32_t *meta;
    const float *x;
    float *hx;
    int n_embd;
    uint32_t *cpu_count;
    uint32_t *seq, *bell;
    int layer;
    const uint8_t *snap;           // device [n_expert] or NULL: the misses as this snapshot of the table (the router
                                   // launch's, st_hy_snap_args) says, not as the live table does (STRATA_HY_SNAP)
} st_hy_split_args;
// The router launch's snapshot for the side-block GLU (decode.h st_cuda_moe_route_glu_hy) in steps with the
// lookahead prefetch's branch (STRATA_HY_SNAP, default 1): each task records, after the launch's dependency wait,
// whether its expert's gate entry lies in VRAM, and block 0 sets the prefetch's progress word. The GLU blocks
// and the side block then decide a rank's side from the snapshot: one decision per rank while a late copy or plan
// may flip the layer's entries (both addresses of an entry hold the expert's bytes, prefetch rule 1 below; a flip
// makes a rank slower, never wrong), and the progress word orders the plan's evictions before the layer's reads.
typedef struct st_hy_snap_args {
    const void *const *table;      // the layer's [n_expert][3] address table
    const void *vram_lo, *vram_hi; // the VRAM expert slots (cache, staging, prefetch)
    uint8_t *snap;                 // device [n_expert]: 1 where the gate entry lay in VRAM
    int32_t *progress;             // device: the prefetch's progress word, set to layer (NULL: none)
    int layer;
} st_hy_snap_args;
typedef struct st_hy_join_args {  // st_cuda_hy_combine_bell's wait
    const float *y_cpu;            // mapped f32 [K][n_embd]: the CPU's rank rows
    const uint32_t *seq;
    uint32_t *bell;
    unsigned long long *wait_ns;   // may be NULL
    uint32_t *leader;              // device uint32 [3], zeroed once: the first block to wait polls the host's
                                   // answer and publishes it here; the others poll it in L2 (hundreds of blocks
                                   // polling host memory would load the link and the host's memory)
} st_hy_join_args;

// ---- lookahead prefetch (decode; STRATA_HY_PREFETCH=P in the engine, docs/HYBRID.md) ---------------------------
//
// While layer m-1 computes, layer m's likely experts (its router on layer m-1's MoE input, top P: the engine runs
// st_cuda_router_topk on a side stream) are copied from the host arena into VRAM slots, and their decode-table
// entries are pointed at the copies once complete. Both addresses hold the same bytes, so the decode output does not
// depend on when, or whether, a copy lands: bitwise equal to all-in-VRAM.
//
// Slots: n_sets sets of per_set slots; layer m uses set m % n_sets; owner[set * per_set + j] = m * E + e of the
// record slot j holds, or -1. Reuse is safe because (1) the plan kernel points the old owner's entry back home,
// fences, and only then reads the main chain's progress word (the layer whose st_cuda_hy_count ran last this token,
// -1 at the token's start); it lets the copy run only when progress < m: layer m's MoE kernels read the table after
// that count, so they see the restored or the new entries, never a slot being overwritten; (2) the side branch of
// layer m is forked after layer m-1's FFN norm, so every layer <= m - 2 has finished its MoE, and layers that share
// a set (m - n_sets, ...) with n_sets >= 3 are among them; (3) the copy kernel publishes an entry only after every
// block's part of the record is written and fenced. The decode kernels read the table through L2 (__ldcg).
// (4) A post plan of layer m (st_cuda_hy_pf_plan_post) runs on its own stream, forked after layer m+1's FFN norm (so
// layer m's MoE is complete for the token) and after the side stream's copy of layer m (an event): it only touches
// set m, which no other layer shares when n_sets == L (the engine's condition for it), and its copies, with their own
// work list and counters, land for the next token. A plan that finds progress >= m on entry changes nothing.
typedef struct st_hy_pf {
    const void **table;             // device [L][E][3]: the decode kernels' table
    const void *const *home;        // device [L][E][3]: the entries without prefetch (cache slot or arena record)
    const uint8_t *const *rec;      // device [L][E]: arena record addresses (device-accessible host memory)
    const long long *layer_meta;    // device [L][4]: slot bytes (multiple of 16), offsets of gate, up, down
    const void *cache_lo, *cache_hi;  // the expert-cache slots: a home in this range is resident (not prefetched)
    uint8_t *pf_slots;              // device: n_sets * per_set slots of `stride` bytes (16-byte aligned)
    long long stride;
    int32_t *owner;                 // device [n_sets * per_set], -1 initially
    int32_t *work;                  // device [1 + 2 * per_set]: the plan's list for the copy kernel: n, (slot, expert)...
    uint32_t *done;                 // device [per_set], zero: per-record completion counters (reset by their publisher)
    int32_t *progress;              // device: the main chain's progress word (see above)
    unsigned long long *stats;      // device [4]: plans run, plans skipped (late), records copied, bytes copied
    int n_sets, per_set, E;         // per_set <= 32
    int max_copies;                 // records copied per plan at most (the likeliest first); <= 0: per_set
    // The previous choice (STRATA_HY_PF_PREV): routing keeps choosing what it chose a token ago, so the experts layer
    // m chose since its last plan come before pred: their copies are kept, and those that missed are copied. They
    // are the experts whose routing count moved since the plan last looked (prev_max of them at most, in id order).
    int prev_max;                   // 0: off
    const uint32_t *counts;         // device [L][E]: routing counts (st_cuda_hy_count's; zeroed at each read-back)
    uint32_t *seen;                 // device [L][E]: counts as this layer's last plan saw them (zeroed with counts)
} st_hy_pf;
#define ST_HY_PF_PREV_MAX_E 1024    // experts per layer the previous-choice pass handles
// Plans layer m's copies from the previous choice (prev_max > 0) and pred[0..P) (device int32, P <= 32; invalid ids
// skipped): the wanted records in that order, at most max_copies (or per_set). One warp.
int st_cuda_hy_pf_plan(const st_hy_pf *pf, int m, const int32_t *pred, int P, cudaStream_t stream);
// Layer m's post plan (rule 4, needs prev_max > 0): after the token's layer m counted its choice, the chosen experts
// (counts moved since the last plan, at most prev_max in id order) that are neither resident nor in set m are
// planned for copying (at most max_copies), slots held by chosen ones kept, `seen` left as it is (the next plan of
// layer m still puts the same experts first and finds their copies). No progress check. One warp.
int st_cuda_hy_pf_plan_post(const st_hy_pf *pf, int m, cudaStream_t stream);
// Runs the planned copies of layer m on n_blocks blocks (reads the host arena over PCIe) and publishes each record.
int st_cuda_hy_pf_copy(const st_hy_pf *pf, int m, int n_blocks, cudaStream_t stream);
// Points the owned entries of slots [0, n_slots) back home and clears their owners (n_slots < 0: every slot): before
// a prefill whose staging reuses those slots.
int st_cuda_hy_pf_reset(const st_hy_pf *pf, int n_slots, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
