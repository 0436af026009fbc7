// Hybrid expert placement on the CUDA backend (see gpu_hybrid.h and docs/HYBRID.md).
//
// Device memory of a hybrid model, besides gpu.c's dense-weight arena:
//   slots   [n_cache + n_bufs * stage_per_buf (+ own prefetch slots)] slots, slot i at byte slot_off[i]: it holds
//           one expert record's first slot_bytes(l) bytes (gate | up | down at the layer's part offsets,
//           place/plan.h st_xlayer); the first n_cache are the expert cache, then the prefill staging buffers (buffer
//           b starts at slot n_cache + b * stage_per_buf). Slots are `stride` bytes apart, except cache slots (unless
//           STRATA_HY_SLOT_FIT=0): each is its layer's slot_bytes (a cache slot never changes layer)
//   tab_d   [n_layer][n_expert][3] const void *: gate/up/down address of every expert (VRAM slot or mapped host
//           record), read by the fused decode kernels (decode.h)
//   pmap_d  [n_layer][n_expert] int32: prefill slot map, the cache slot of a resident expert, else the prefetch
//           slot that holds a copy of it (own-slot sets, below), else the staging slot of a missing one (staging
//           buffer l % n_bufs)
//   cnt_d   [n_layer][n_expert] uint32 routed counts since the last read-back, then [n_layer][2] uint32 decode
//           selections and misses, then [n_layer] uint32 misses computed by the CPU
//
// CPU misses (--pcie-frac F < 1): each one-token decode step's MoE layer classifies its experts on the device
// (hybrid_split.h), the CPU misses go to a host node on a side stream that runs the CPU miss workers
// (place/cpu_experts.h) while the GPU computes the rest, and a combine kernel sums all K outputs in rank order.
// Buffers (one set: a layer's host node finishes before the next layer's classify can run, and every session
// decodes on the model's one compute stream):
//   ids_gpu_d [K] int32, ones_d [K] f32 (1.0), y_d [K][n_embd] f32: the GPU experts' unweighted outputs
//   meta [ST_HY_META_INTS] int32, xrow [n_embd] f32, ycpu [K][n_embd] f32: page-locked, mapped into the device
//   carry_d [n_layer] uint32: the split's error-diffusion residues
// Lookahead prefetch (on by default, STRATA_HY_PREFETCH=P, 0: off; cuda/hybrid.h): on a side stream forked after
// each layer's FFN norm, the next layer's router picks P experts, the missing ones (at most STRATA_HY_PREFETCH_MAX
// per layer, likeliest first) are copied into prefetch slots (one set of P per layer in the prefetch's own slots
// after the staging; with STRATA_HY_PF_OWN=0 sets at the start of the prefill staging slots, one per layer where
// they hold them, at least 3, layer l using set l % n_sets; a prefill resets them) and their table entries flipped
// to the copies. A copy stays until its layer's predictions move on, so the sets also act as a fast-adapting
// per-layer cache (most of their hits are copies made for earlier tokens); joined
// before the LM head. Bitwise equal to all-in-VRAM (the same bytes at either address). Own-slot sets are filled at
// load (hy_pf_fill) and a prefill reads whatever copies they hold instead of staging those experts (a prefill chunk
// uses nearly every expert of a layer, so each copy saves one record of PCIe traffic per chunk). Buffers:
//   home_d [L][E][3]: tab_h's copy (the entries without prefetch); rec_d [L][E]: rec_dev; pf_meta_d [L][4]
//   (slot bytes, part offsets); owner/work/done/progress/stats (hybrid.h st_hy_pf); pred_* : the prediction
// Prefill CPU share (opts.prefill_cpu, on unless --deterministic; chunks of at most pc_max_tok tokens): a chunk
// that stages every non-resident expert is bound by the PCIe link, so CPU threads compute some of each layer's
// non-resident experts instead (the least used; how many from costs measured at load, hy_pc_plan) while the rest
// are staged: the layer's rows, ids and weights go to pinned memory, a host function wakes the prefill CPU thread,
// the GPU computes its experts (the CPU's get slot -1: st_cuda_moe_ffn_slots leaves them out), a second host
// function waits for the CPU, and Y += the CPU's rank-order sum (mapped memory). Not bitwise (the CPU's
// arithmetic for those experts), so --deterministic turns it off. Buffers: pc_x [pc_max_tok][n_embd] f32,
// pc_ids / pc_w [pc_max_tok][K], pc_y [pc_max_tok][n_embd] f32 (mapped), all page-locked.
// Doorbell (the default; STRATA_HY_HOSTNODE=1 for host nodes): no host node, fork or join; the classify (in the
// router launch's last block; STRATA_HY_SPLIT_FUSED=0: a launch of its own) rings a doorbell in mapped memory that a
// host thread polls, and the down kernel (or the combine launch) polls for its answer (cuda/hybrid.h):
//   bell [4] uint32 page-locked, mapped; bell_seq_d [1] uint32 device; join_leader_d [3] uint32 device
#include "engine/gpu_hybrid.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "cuda/decode.h"
#include "cuda/hybrid.h"
#include "cuda/hybrid_split.h"
#include "cuda/mmvq.h"
#include "cuda/ops.h"
#include "cuda/quantize_act.h"
#include "place/arena.h"
#include "place/cache_policy.h"
#include "place/cpu_experts.h"
#include "place/plan.h"
#include "place/profile.h"
#include "util/err.h"
#include "util/log.h"

#define HY_PERIOD_DEFAULT 16       // decode tokens between counter read-backs (and swap decisions)
#define HY_HALFLIFE_DEFAULT 256.0  // tokens for a routing count to lose half its weight
#define HY_SWAPS_DEFAULT 4         // experts swapped per period at most (each costs one slot of PCIe copy)
#define HY_RATIO 1.5               // hysteresis: swap when freq(in) > HY_RATIO * freq(out) + HY_MIN_FREQ
#define HY_MIN_FREQ 1.0
// STRATA_HY_PREFILL_SWAPS=B (default HY_REFILL_BATCHES_DEFAULT; 0 turns it off): after an evaluation of at least
// HY_REFILL_MIN_TOKENS prefill tokens, whose routing counts are then most of the frequencies (half-life 256 tokens),
// up to B more batches of ST_HY_MAX_UPDATES swaps, each copied (PCIe, ~1.7 ms for 32 Qwen3-30B experts) and flipped
// before the next: the cache moves toward the prompt's own experts before the decode instead of 4 swaps per 16
// tokens. The agent prompt at 16 GiB (2026-12-02, bench/ab.sh --gpu-mem 16 -n 256 -d 16384): tg256 @ d16384 271.6
// -> 304.5 tok/s, hit rate 97.55% -> 99.47%, CPU misses 9.4 -> 2.1 per token (predicted +5-15%).
#define HY_REFILL_BATCHES_DEFAULT 16
#define HY_REFILL_MIN_TOKENS 1024
#define HY_PC_MAX_TOK_DEFAULT 1024  // prefill CPU share: chunks up to this many tokens (larger ones are compute-bound)

typedef struct hy_job {  // a host node's argument: the layer whose CPU misses it computes
    struct st_hybrid *h;
    uint32_t l;
    uint64_t seq;  // prefill CPU share: the request number of this layer's job in the chunk in progress
} hy_job;

typedef struct hy_pending {
    uint32_t layer, in;
    int32_t slot;
} hy_pending;

struct st_hybrid {
    const st_model *m;
    st_gpu_load_opts opts;
    st_place_desc desc;
    st_plan plan;
    st_profile prof;
    int have_prof;
    uint64_t *prof_layout;  // [L][E] or NULL: the counts the cache layout ranks by with STRATA_HY_PROFILE_FLOOR (the
                            // profile's, each layer's floor hottest raised above the rest; st_plan_counts_floor)
    st_cuda_ctx *ctx;
    uint32_t L, E;
    // placement
    st_hycache_layout lay;
    uint64_t stride;              // bytes between slots (plan.slot_bytes: the largest layer's record, 256-aligned)
    uint64_t n_slots_alloc;       // n_cache + staging
    int slot_fit;                 // cache slots sized per layer (st_hycache_layout_fit); STRATA_HY_SLOT_FIT=0: one size
    uint64_t *slot_off;           // host [n_slots_alloc + 1]: byte offset of slot i in slots; [n_slots_alloc]: the size
    uint8_t *slots;               // device, see above
    st_arena *arena;
    int pageable_ok;              // the device reads pageable host memory (HMM/ATS): fallback for unregistrable mmap
    int n_reg_failed;             // arena ranges that could not be registered (mmap fallback)
    const uint8_t **rec_dev;      // [L * E] device-accessible address of each arena record
    int32_t *slot_of;             // host [L * E] cache slot or -1
    const void **tab_h;           // host mirror of tab_d
    const void **tab_d;
    int32_t *pmap_h;              // pinned host [L * E], the prefill slot map (slot indices) as last uploaded
    int32_t *pmap_up_h;           // pinned host [L * E] (slot_fit): pmap_h as byte offsets / ST_PLAN_ALIGN, uploaded
    int32_t *pmap_d;              // [L * E] pmap_h, or pmap_up_h with slot_fit (the prefill's slot unit: pmap_unit)
    int pmap_dirty;
    uint64_t *ebytes;             // [L] gate + up + down bytes of one expert of layer l (what a miss reads)
    // prefill staging
    cudaStream_t copy;            // copy stream (staging and swaps), non-blocking
    cudaEvent_t ev_start, ev_staged[2], ev_done[2];
    uint64_t staged_chunk;        // bytes staged in the current chunk
    // adaptive cache
    uint32_t *cnt_d, *cnt_h;      // device / pinned host counters (see above)
    float *freq;                  // [L * E] decayed routing frequency
    double decay;                 // per token
    int period, max_swaps, adapt;
    int refill_batches;           // STRATA_HY_PREFILL_SWAPS (above)
    int64_t since;                // tokens since the last read-back
    // The read-back of a decode period without a stream synchronisation (STRATA_HY_RB_ASYNC, default 1; hy_rb_*):
    // its copies land in the pinned cnt_h / rb_h, ev_rb marks them complete, and a later st_hybrid_after_eval
    // processes them.
    int rb_async, rb_pending;
    int64_t rb_since, rb_dec;     // the pending period's tokens and decode tokens
    int64_t rb_dec_all;           // the pending period's decode tokens, a prefill's period too (layer_stats)
    // STRATA_HY_LAYER_STATS=1: each layer's decode misses and CPU misses summed over the read-backs, printed per
    // decode token when the placement is freed (where in the model the misses sit: bench/cache_sim.py --per-layer
    // predicts it). NULL: off.
    uint64_t *layer_stats;        // [L][2]: misses, CPU misses
    uint64_t layer_stats_dec;     // decode tokens they cover
    unsigned long long *rb_h;     // pinned [6]: the prefetch statistics [5] (st_hy_pf, then hits), the CPU wait (ns)
    cudaEvent_t ev_rb;
    hy_pending pend[ST_HY_MAX_UPDATES];
    int n_pend;                   // swaps whose copies are in flight (0: none)
    cudaEvent_t ev_victims, ev_copied;
    uint64_t swaps, swap_bytes;   // totals (also added to the session's stats)
    // CPU misses (see the top of this file)
    double pcie_frac;             // F in use; 1: every miss over PCIe, no CPU work (the bitwise path)
    uint32_t cpu_q16;             // st_hy_cpu_q16(pcie_frac)
    // The split's gate (place/cache_policy.h st_hy_split_gate_step; STRATA_HY_SPLIT_GATE 0: never, 1 (default): with
    // --pcie-frac auto, 2: with any F): split_gate.live 0 runs the plain path (every miss over PCIe, a decode graph of
    // its own) while misses are rare. Thresholds in misses per decode token (STRATA_HY_SPLIT_GATE_OFF / _ON).
    int split_gating;
    st_hy_split_gate split_gate;
    double split_off, split_on;
    uint64_t split_flips, split_plain_tokens;  // times it went off; decode tokens counted in plain periods
    int K;                        // experts per token
    st_hy_cpu *cpu;               // the workers; NULL when pcie_frac == 1
    cudaStream_t side;            // the decode graph's CPU branch (host nodes)
    cudaEvent_t ev_fork, ev_join;
    uint32_t *carry_d;
    int32_t *ids_gpu_d;
    float *ones_d, *y_d;
    int32_t *meta_h, *meta_dp;    // host / device address of the mapped buffer
    float *xrow_h, *xrow_dp;
    float *ycpu_h, *ycpu_dp;
    hy_job *jobs;                 // [L]
    _Atomic int cpu_failed;       // a host node failed: reported by the next st_hybrid_after_eval
    int cpu_knockout;             // STRATA_HY_CPU_KNOCKOUT=1 (benchmarks only, wrong output): CPU misses answered
                                  // with zero rows at once, to measure the split's cost without the CPU's work
    char cpu_err[256];
    // doorbell (the default; STRATA_HY_HOSTNODE=1 for host nodes): the CPU branch as a polling host thread instead
    // of host nodes in the graph
    int doorbell;
    uint32_t *bell_h, *bell_dp;   // [4] host / device address (cuda/hybrid.h)
    uint32_t *bell_seq_d;         // [1] device: the rings so far (cuda/hybrid.h)
    unsigned long long *bell_wait_d;  // [1] device: ns the combine kernels waited for the answer (stats)
    int split_fused;              // classify in the router launch, combine in the down kernel (default; the
                                  // doorbell only; STRATA_HY_SPLIT_FUSED=0: launches of their own)
    uint32_t *join_leader_d;      // [3] device: the down kernel's waiting blocks' leader words (hybrid.h)
    // STRATA_HY_GLU_SIDE (default 1): one-token decode steps without the lookahead prefetch's branch (off, or gated
    // off after a long prompt) run each layer as all in VRAM does, the route in every GLU block, instead of the router
    // launch's tail (route, classify, counts, exports, ring: ~4.8 us per layer at 16 GiB over all in VRAM): one side
    // block of the GLU launch routes, counts, classifies, exports and rings while every other block routes the token
    // itself and skips a rank whose gate entry is outside VRAM (F 0: every miss is the CPU's; where the CPU takes a
    // share 0 < 1 - F < 1 the split stays in the router's tail). With the branch on, its copies may publish entries
    // during the layer (hybrid.h rule 1): publish locks closed by the router launch before its dependency wait, and
    // the progress word there too, measured 361.96 vs 366.17 tok/s at 16 GiB (the earlier deadline left 1.8 layers
    // per token's plans late against 0.2; docs/experiments/2026-12-02d-glu-side-locks.patch).
    int glu_side;
    _Atomic uint64_t cpu_jobs, cpu_job_ns;  // layers the doorbell thread computed, and its ns on them (stats)
    pthread_t bell_thread;
    int bell_started;
    _Atomic int bell_stop;
    // lookahead prefetch (see the top of this file)
    int pf_on;                    // prefetching in one-token decode steps
    // The prefetch's gate (STRATA_HY_PF_GATE, hy_pf_gate): pf_gate_state.live 0 leaves the side branch out of the
    // decode step (its own graph; the copies already made keep serving); gate_dec counts the period's decode tokens.
    // 2 (default): also, after a long prompt, the own sets refilled as cache and the branch off; 1: the rule only.
    int pf_gate;
    int pf_lean;                  // STRATA_HY_PF_LEAN (default 1): branch off, no progress word (hy_pf_progress)
    int snap_on;                  // STRATA_HY_SNAP (default 1; 0: the router's tail): the side-block GLU also with the
                                  // prefetch's branch on, deciding CPU ranks from the router launch's snapshot
    uint8_t *snap_d;              // device [n_layer][n_expert]: the snapshots (1: the gate entry lay in VRAM)
    st_hy_pf_gate pf_gate_state;
    int64_t gate_dec;
    int pf_P, pf_blocks;          // predictions (= slots per set), copy-kernel blocks
    int pf_stages;                // side-branch kernels launched per layer: 3 (router, plan, copy); fewer only for a
                                  // knockout of their cost (STRATA_HY_PF_STAGES)
    uint64_t pf_own;              // the prefetch's own slots after the staging (L x P), or 0: sets in the staging
    uint32_t pf_borrow;           // with one staging buffer: the first own slots (stage_per_buf) a prefill borrows as
                                  // its second buffer, their copies dropped first; 0: none (STRATA_HY_PF_BORROW=0)
    uint32_t pf_scratch;          // own slots [pf_borrow, pf_borrow + pf_scratch) hold a session's prefill GEMM /
                                  // MoE scratch (st_hybrid_scratch_lend), their copies dropped before every prefill
                                  // step; the cache took those bytes (the plan's scratch_lent_bytes). 0: off
    int scratch_lent;             // a session holds that scratch
    int scratch_step;             // a prefill step drops only the slots under the scratch bytes it uses (a 512-token
                                  // step's ~1/8 of a 4096-token one's), not all pf_scratch (STRATA_HY_PF_SCRATCH_STEP)
    st_hy_pf pf;                  // the kernels' view (device pointers)
    const void **home_d;
    const uint8_t **rec_d;
    long long *pf_meta_d;
    int32_t *pf_owner_d, *pf_work_d, *pf_progress_d;
    int32_t *pf_owner_h;          // pinned host [n_sets * P]: pf_owner_d as last read (own-slot sets, for the pmap)
    int pf_owner_stale;           // decode steps ran since that read (their plans may have moved the owners)
    uint64_t pf_in_pmap;          // non-resident experts the current pmap reads from prefetch copies
    uint32_t *pf_done_d;
    unsigned long long *pf_stats_d;  // [5]: st_hy_pf stats [4], then hits (st_hy_count_pf)
    float *pred_logits_d, *pred_w_d;  // [E], [32]
    int32_t *pred_ids_d, *pred_cnt_d;  // [32], [1] (the router kernel's completion counter)
    uint32_t *pf_seen_d;          // [L][E] or NULL: st_hy_pf.seen (the previous choice), zeroed with cnt_d
    cudaStream_t pf_side;
    cudaEvent_t pf_fork, pf_join;
    int pf_forked;                // this step started a side branch (joined by st_hybrid_step_end)
    // Post plans (STRATA_HY_PF_POST copies per plan, 0: off; cuda/hybrid.h rule 4): layer l's branch also plans
    // layer l-1's choice of this token into set l-1 on a stream of its own, so the experts that missed are copied a
    // token ahead instead of one layer ahead (the side stream's plan caps at one copy per layer and is skipped when
    // late). Only with one set per layer.
    st_hy_pf pf_post;             // pf with its own work list [1 + 2 P], counters [P] and copy cap
    int32_t *pf_post_work_d;
    uint32_t *pf_post_done_d;
    int pf_post_blocks;
    cudaStream_t pf_post_s;
    cudaEvent_t pf_copied[4];     // ring: recorded on pf_side after layer m's copy (slot m % 4)
    cudaEvent_t pf_post_join;
    int pf_post_forked;           // this step started post plans (joined by st_hybrid_step_end)
    // prefill CPU share (see the top of this file)
    st_hy_cpu *pcpu;              // its workers: h->cpu when the decode split made them, else pcpu_own
    st_hy_cpu *pcpu_own;
    int pc_max_tok;               // chunks of at most this many tokens use it (0: off)
    double pc_t_stage;            // seconds to stage one expert record (measured at load)
    double pc_t32;                // CPU seconds per expert of 32 tokens (measured at load; ~linear in tokens)
    int pc_n_tok;                 // the chunk in progress (0: no CPU share in it)
    uint32_t *pc_count;           // [L] experts the CPU computes per layer in this chunk
    uint8_t *pc_on;               // [L][E] 1: the CPU computes (l, e) in this chunk (pmap -1, not staged)
    int32_t *pc_copy;             // [L][E] hy_pc_plan's scratch: the prefetch slot holding a copy, or -1
    float *pc_x, *pc_w, *pc_y, *pc_y_dp;  // page-locked (pc_y mapped: pc_y_dp is its device address)
    int32_t *pc_ids;
    hy_job *pc_jobs;              // [L]: the host functions' arguments (seq: the request number)
    uint64_t pc_seq_enq;          // requests enqueued so far (host, enqueue side)
    pthread_t pc_thread;
    int pc_started;
    pthread_mutex_t pc_mu;
    pthread_cond_t pc_cv;
    uint64_t pc_req_seq, pc_done_seq;  // guarded by pc_mu: the last request and the last finished one
    uint32_t pc_req_layer;
    int pc_stop;
};

static int env_int(const char *name, int def, int lo, int hi) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    int x = atoi(v);
    return x < lo ? lo : x > hi ? hi : x;
}

static double env_double(const char *name, double def, double lo, double hi) {
    const char *v = getenv(name);
    if (!v || !*v) return def;
    char *end;
    const double x = strtod(v, &end);
    if (*end || !(x >= lo && x <= hi)) {
        st_warn("%s=%s ignored (a number in [%g, %g])", name, v, lo, hi);
        return def;
    }
    return x;
}

// --pcie-frac auto (hy_cpu_init), measured on an H200 with the Qwen3-30B-A3B-shaped Q4_K_M (tg128, 2026-12-01,
// bench/results/2026-12-01-h200.md):
//   HY_SPLIT_OVERHEAD_S: what the split costs every layer, misses or not: with the classify in the router launch
//   and the combine in the down kernel, 18.9 GiB without the prefetch F 0.999 (no CPU miss) 420.7 vs F 1 439.4 tok/s
//   = 2.1 us per layer (2026-12-01c; the separate launches cost 4.8 us: 399.2).
//   HY_PCIE_SHARED: a demand miss's cost in decode against the load-time zero-copy figure while the lookahead
//   prefetch's copies share the link: ~131 us per miss at 16 GiB (1 / 324 - 1 / 474 s over 7.1 misses) against
//   80 us measured alone. With it the formula picks F ~0.25 at 12 and 8 GiB, where F 0.25 measured best of
//   0.25 / 0.47 / 0.75 (275.4 / 254.4 / 236.1 at 12 GiB; 226.8 / 215.1 (0.41) / 206.6 (0.5) at 8 GiB; F 1 232.8 /
//   174.7).
//   Since 2026-12-01b the pool's workers stay awake between layer jobs (STRATA_HY_CPU_SPIN_MS): a job of 1.5
//   experts at 16 GiB took 116 us on the CPU without, 80 us with; and with that every budget measured best with
//   all misses on the CPU (F 0): 16 GiB 342.6 vs F 0.25 334.6 vs F 1 317.6; 12 GiB 279.5 vs 278.2 (0.25) vs 263.2
//   (0.5); 8 GiB 252.3 vs 241.9 vs 209.5. A miss over PCIe stalls the GPU for its whole read beside the copies,
//   while a layer's CPU misses cost one job (~70 us of waiting at 16 GiB for 1.5 experts): st_hy_pick_pcie_frac
//   gives F 0 whenever the CPU computes two experts in the shared PCIe figure (one, until 2026-12-01h: the 235B
//   IQ1_M file at 8 GiB, 184 us on the CPU against 218 over PCIe and ~4 misses per layer, stayed on F 0 at 8.54
//   tok/s where F 0.5 gives 13.61). (Until 2026-12-01b F was 1 at cache shares >= 50%: 16 GiB F 1 323.4 vs 0.25
//   311.0 with sleeping workers.)
//   HY_SPLIT_MAX_SHARE: with the skewed routing and the prefetch the real misses are far fewer than the uniform
//   estimate, and at a high enough cache share the split's per-layer launches cost more than the misses it moves:
//   18.9 GiB (78% cached; 1.3 misses per token) F 0 385.6 vs F 1 407.8; 16 GiB (62%) F 0 342.6 vs F 1 317.6.
//   With the split in the router and down launches (2026-12-01c) still so: 18.9 GiB F 0 394.9 vs F 1 ~405 with the
//   prefetch, 424.2 vs 439.4 without it (92% cached, the default there since the planner's share rule).
#define HY_SPLIT_OVERHEAD_S 2e-6
#define HY_PCIE_SHARED 1.6
//   2026-12-03d (cache slots sized per layer, the snapshot, the lent prefill scratch): 16 GiB (70% cached) F 0 406.2
//   vs F 1 349.8; 17.5 GiB without the lent scratch (76%) F 0 423.0 vs F 1 415.7; without the prefetch: 16.8 GiB
//   (85.7%) F 0 432.6 vs F 1 432.0, 17.7 GiB (91.5%, 1.0 misses per token) F 0 470.5 vs F 1 485.4, 18.9 GiB (99%,
//   none) F 0 479.5 vs F 1 502.7: the split's kernels cost ~2 us per layer even where nothing misses. Since the
//   prefetch's share cut (ST_PLAN_PREFETCH_MAX_SHARE, 0.77 of the plan's slots) the cache holds ~85% or more where
//   the prefetch is off and at most ~75% where it is on.
#define HY_SPLIT_MAX_SHARE 0.83
#define HY_BELL_SPIN_S 50e-3  // the doorbell thread spins this long after a split before it dozes
#define HY_BELL_IDLE_S 1.0    // and dozes lightly (20 us) this long before it sleeps 1 ms at a time
// Lookahead prefetch defaults (P: place/plan.h ST_PLAN_PREFETCH_DEFAULT): at most one copy per layer and token.
// Measured on an H200 with the Qwen3-30B-A3B-shaped Q4_K_M, P 8 in own slots (tg128, bench/results/
// 2026-11-30d-h200-prefetch.md): 16 GiB 233 -> 245 tok/s, 12 GiB 125 -> 160, 8 GiB 95 -> 137 (doorbell, auto F).
#define HY_PF_MAX_COPIES_DEFAULT 1
#define HY_PF_POST_DEFAULT 2  // copies per post plan (STRATA_HY_PF_POST)

#define HY_CHECK(call)                                                                                         \
    do {                                                                                                       \
        cudaError_t e_ = (call);                                                                               \
        if (e_ != cudaSuccess) return st_cuda_check_at(e_, #call, __FILE__, __LINE__);                         \
    } while (0)

// ---- planning ---------------------------------------------------------------------------------------------------

int st_hybrid_plan(const st_model *m, const st_gpu_load_opts *o, st_hybrid **out) {
    *out = NULL;
    if (!o || o->gpu_mem_gib <= 0) return 0;
    st_hybrid *h = calloc(1, sizeof *h);
    if (!h) return st_err("out of memory");
    h->m = m;
    h->opts = *o;
    if (st_place_desc_from_model(m, &h->desc)) goto fail;
    st_plan_params pp;
    st_plan_params_default(&pp);
    pp.gpu_mem_gib = o->gpu_mem_gib;
    pp.n_ctx = o->n_ctx > 0 ? o->n_ctx : 4096;
    pp.kv_elem_bytes = o->kv_elem_bytes == 4 ? 4 : 2;
    pp.prefill_chunk = o->n_ubatch;
    if (o->profile_path) {
        if (st_profile_read(&h->prof, o->profile_path, m)) goto fail;
        h->have_prof = 1;
        pp.profile = &h->prof;
    }
    if (st_plan_compute(&h->desc, &pp, &h->plan)) goto fail;
    if (h->have_prof && h->plan.profile_floor > 0) {
        const uint32_t fl = h->plan.profile_floor;
        h->prof_layout = st_plan_counts_floor(h->prof.counts, m->hp.n_layer, m->hp.n_expert, fl);
        if (!h->prof_layout) {
            st_err("out of memory");
            goto fail;
        }
        st_info("hybrid placement: each layer's %u hottest experts of the profile first (STRATA_HY_PROFILE_FLOOR)",
                fl);
    }
    char b[5][32];
    if (h->plan.all_in_vram) {
        st_info("--gpu-mem %.2f GiB holds the whole model (%s of %s planned): every weight in VRAM", o->gpu_mem_gib,
                st_fmt_bytes(b[0], 32, (double)h->plan.used_bytes), st_fmt_bytes(b[1], 32, (double)h->plan.budget));
        st_hybrid_free(h);
        return 0;
    }
    if (!h->plan.moe) {  // unreachable: a dense model either fits or st_plan_compute failed
        st_err("%s: a dense model does not fit in --gpu-mem %.2f GiB", m->path, o->gpu_mem_gib);
        goto fail;
    }
    char rb[32];
    st_info("hybrid placement: --gpu-mem %.2f GiB < %s for every weight; dense %s + KV %s + scratch %s (%lld-token "
            "prefill chunks%s) + reserve %s + host arena page tables %s in VRAM, experts in a host arena with a VRAM "
            "cache",
            o->gpu_mem_gib, st_fmt_bytes(b[0], 32, (double)(h->plan.min_bytes + h->plan.experts_vram_bytes)),
            st_fmt_bytes(b[1], 32, (double)h->plan.dense_bytes), st_fmt_bytes(b[2], 32, (double)h->plan.kv_bytes),
            st_fmt_bytes(b[3], 32, (double)h->plan.scratch_bytes), (long long)h->plan.prefill_chunk,
            h->plan.prefill_chunk_lowered ? ", fewer than the default to fit the budget; -ub sets it" : "",
            st_fmt_bytes(rb, 32, (double)h->plan.reserve_bytes),
            st_fmt_bytes(b[4], 32, (double)h->plan.host_map_bytes));
    *out = h;
    return 0;
fail:
    st_hybrid_free(h);
    return -1;
}

// ---- arena registration -----------------------------------------------------------------------------------------

static int reg_chunk(void *p, size_t n, void *ud) {
    st_hybrid *h = ud;
    unsigned flags = cudaHostRegisterMapped | cudaHostRegisterPortable;
    // (h->arena is published only after st_arena_create returns: the resolved mode is in the options)
    if (h->opts.arena_mode == ST_ARENA_MMAP) flags |= cudaHostRegisterReadOnly;
    cudaError_t e = cudaHostRegister(p, n, flags);
    if (e == cudaSuccess) return 0;
    cudaGetLastError();
    if ((flags & cudaHostRegisterReadOnly) && h->pageable_ok) {
        // Read-only file-backed memory that this driver cannot pin: the GPU still reads it as pageable memory.
        if (!h->n_reg_failed)
            st_warn("cudaHostRegister of the mapped pack failed (%s); the GPU reads the mapping as pageable memory "
                    "(HMM/ATS), which is slower than pinned zero-copy",
                    cudaGetErrorString(e));
        h->n_reg_failed++;
        return 0;
    }
    char b[32];
    return st_err("cudaHostRegister(%p, %s, mapped%s): %s: %s%s", p, st_fmt_bytes(b, sizeof b, (double)n),
                  (flags & cudaHostRegisterReadOnly) ? " | read-only" : "", cudaGetErrorName(e), cudaGetErrorString(e),
                  (flags & cudaHostRegisterReadOnly)
                      ? " (this driver cannot register a read-only file mapping and cannot read pageable memory: use "
                        "the anonymous arena, without --arena-mmap / STRATA_ARENA_MMAP)"
                      : " (page-locking the expert arena failed: check `ulimit -l` and free RAM)");
}

static void unreg_chunk(void *p, size_t n, void *ud) {
    (void)n, (void)ud;
    if (cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();  // ranges that fell back were never registered
}

// Device addresses of every record: chunk by chunk, the registered mapping's device pointer plus the offset.
static int map_records(st_hybrid *h) {
    st_arena *a = h->arena;
    const uint64_t n_rec = (uint64_t)h->L * h->E;
    h->rec_dev = malloc(sizeof *h->rec_dev * n_rec);
    if (!h->rec_dev) return st_err("out of memory");
    int c = 0;
    uint8_t *dbase = NULL;
    int dc = -1;
    for (uint64_t r = 0; r < n_rec; r++) {
        const uint8_t *p = a->rec[r];
        int tries = 0;
        while (!(p >= a->chunks[c].p && p < a->chunks[c].p + a->chunks[c].bytes)) {
            c = (c + 1) % a->n_chunks;  // records follow chunk order; wrap once in case they do not
            if (++tries > a->n_chunks) return st_err("expert arena: record %" PRIu64 " lies in no chunk", r);
        }
        if (dc != c) {
            void *d = NULL;
            if (cudaHostGetDevicePointer(&d, a->chunks[c].p, 0) != cudaSuccess) {
                cudaGetLastError();
                if (!h->pageable_ok)
                    return st_err("expert arena chunk %d of %d is not mapped into the device (cudaHostGetDevicePointer "
                                  "failed)", c, a->n_chunks);
                d = a->chunks[c].p;  // pageable memory read through HMM/ATS: same address
            }
            dbase = d;
            dc = c;
        }
        h->rec_dev[r] = dbase + (p - a->chunks[c].p);
    }
    return 0;
}

// ---- tables -----------------------------------------------------------------------------------------------------

static const uint8_t *slot_ptr(const st_hybrid *h, int64_t slot) { return h->slots + h->slot_off[slot]; }

// The prefill kernels address slot s of pmap_d as base + s * pmap_unit: slot indices at the uniform stride, else
// (slot_fit: slots of several sizes) offsets in ST_PLAN_ALIGN units, every slot being a multiple of it.
static long long pmap_unit(const st_hybrid *h) { return h->slot_fit ? ST_PLAN_ALIGN : (long long)h->stride; }

static int pmap_upload(st_hybrid *h, cudaStream_t st) {
    const uint64_t n = (uint64_t)h->L * h->E;
    const int32_t *src = h->pmap_h;
    if (h->slot_fit) {
        for (uint64_t i = 0; i < n; i++)
            h->pmap_up_h[i] = h->pmap_h[i] < 0 ? -1 : (int32_t)(h->slot_off[h->pmap_h[i]] / ST_PLAN_ALIGN);
        src = h->pmap_up_h;
    }
    HY_CHECK(cudaMemcpyAsync(h->pmap_d, src, sizeof(int32_t) * n, cudaMemcpyHostToDevice, st));
    h->pmap_dirty = 0;
    return 0;
}

// tab_h entry of (l, e) from slot_of.
static void table_entry(st_hybrid *h, uint32_t l, uint32_t e, const void *out[3]) {
    const st_xlayer *x = &h->arena->layers[l].x;
    const int32_t s = h->slot_of[(uint64_t)l * h->E + e];
    const uint8_t *base = s >= 0 ? slot_ptr(h, s) : h->rec_dev[(uint64_t)l * h->E + e];
    for (int k = 0; k < 3; k++) out[k] = base + x->off[k];
}

// First slot of the prefetch's own sets (after the cache and the staging).
static int64_t pf_own_slot0(const st_hybrid *h) {
    return (int64_t)h->lay.n_cache + (int64_t)h->lay.n_stage_bufs * h->lay.stage_per_buf;
}

// Prefill staging buffers in use: the layout's, or two where the second borrows the prefetch's first own slots
// (they follow the one buffer, so buffer b still starts at slot n_cache + b * stage_per_buf).
static uint32_t prefill_bufs(const st_hybrid *h) {
    return h->lay.n_stage_bufs > 1 ? h->lay.n_stage_bufs : h->pf_borrow ? 2u : 1u;
}

// slot[i] = the own-slot prefetch slot holding a copy of non-resident record i (pf_owner_h), else -1, for every
// record; returns how many copies.
static uint64_t pf_copy_slots(const st_hybrid *h, int32_t *slot) {
    const uint64_t n_rec = (uint64_t)h->L * h->E;
    uint64_t n = 0;
    for (uint64_t i = 0; i < n_rec; i++) slot[i] = -1;
    if (h->pf_on && h->pf_own && h->pf_owner_h)
        for (int j = 0; j < h->pf.n_sets * h->pf_P; j++) {
            const int32_t o = h->pf_owner_h[j];
            if (o >= 0 && (uint64_t)o < n_rec && h->slot_of[o] < 0) {
                slot[o] = (int32_t)(pf_own_slot0(h) + j);
                n++;
            }
        }
    return n;
}

// The prefill slot map from slot_of and, with own-slot prefetch sets, the copies they hold: a cached expert reads
// its cache slot, a copied one its prefetch slot, the CPU's of this chunk (pc_on) none, the rest get staging slots
// in expert order.
static void rebuild_pmap(st_hybrid *h) {
    const uint32_t bufs = prefill_bufs(h);
    h->pf_in_pmap = pf_copy_slots(h, h->pmap_h);
    for (uint32_t l = 0; l < h->L; l++) {
        int64_t j = (int64_t)h->lay.n_cache + (int64_t)(l % bufs) * h->lay.stage_per_buf;
        for (uint32_t e = 0; e < h->E; e++) {
            const uint64_t i = (uint64_t)l * h->E + e;
            const int32_t s = h->slot_of[i];
            if (s >= 0) h->pmap_h[i] = s;
            else if (h->pc_on && h->pc_on[i]) h->pmap_h[i] = -1;  // the CPU's in this chunk
            else if (h->pmap_h[i] < 0) h->pmap_h[i] = (int32_t)j++;
        }
    }
}

// Copies the records of `n` experts into consecutive slots from `slot0`, merging runs of consecutive records into
// one 2D copy (source pitch: record bytes; destination pitch: the slot stride). Returns the bytes copied.
static int copy_records(st_hybrid *h, uint32_t l, const uint32_t *experts, int n, int64_t slot0, cudaStream_t st,
                        uint64_t *bytes) {
    const st_pack_layer *pl = &h->arena->layers[l];
    const size_t w = pl->x.slot_bytes, spitch = pl->record_bytes;
    for (int i = 0; i < n;) {
        int run = 1;
        const uint8_t *src = h->arena->rec[(uint64_t)l * h->E + experts[i]];
        const uint64_t *so = h->slot_off + slot0 + i, dpitch = so[1] - so[0];
        if (dpitch < w)
            return st_err("hybrid: slot %" PRId64 " (%" PRIu64 " bytes) is too small for layer %u's records (%zu)",
                          slot0 + i, dpitch, l, w);
        while (i + run < n && h->arena->rec[(uint64_t)l * h->E + experts[i + run]] == src + (uint64_t)run * spitch &&
               so[run + 1] - so[run] == dpitch && so[run] - so[0] == (uint64_t)run * dpitch)
            run++;
        cudaError_t e = cudaMemcpy2DAsync((void *)slot_ptr(h, slot0 + i), dpitch, src, spitch, w, (size_t)run,
                                          cudaMemcpyHostToDevice, st);
        if (e == cudaErrorInvalidValue) {
            // Seen with the read-only mapped pack (--arena-mmap) on the H200 host: the driver refuses the 2D copy
            // from that mapping; copy the records one by one instead.
            cudaGetLastError();
            for (int j = 0; j < run; j++)
                HY_CHECK(cudaMemcpyAsync((void *)slot_ptr(h, slot0 + i + j), src + (uint64_t)j * spitch, w,
                                         cudaMemcpyHostToDevice, st));
        } else {
            HY_CHECK(e);
        }
        *bytes += (uint64_t)w * run;
        i += run;
    }
    return 0;
}

// ---- CPU misses: set-up, auto split ------------------------------------------------------------------------------

static void CUDART_CB hy_noop(void *ud) { (void)ud; }

// Seconds per expert for the GPU reading misses over PCIe: GLU + down (st_cuda_moe_glu, and st_cuda_moe_down_q as K
// one-expert tokens: the split path's kernels until 2026-12-01, kept because HY_PCIE_SHARED was calibrated against
// this figure) on K experts of one layer whose table entries all point at the host arena, over `reps` layers/expert sets (distinct weights, so
// neither the L2 nor the previous rep helps), after a warm-up.
static int hy_time_pcie(st_hybrid *h, cudaStream_t st, int reps, double *t_expert) {
    const st_hparams *hp = &h->m->hp;
    const int K = h->K, E = (int)h->E, d = (int)hp->n_embd, F = (int)hp->n_ff_exp;
    const size_t tab_b = sizeof(void *) * 3 * (size_t)E, xq_b = (size_t)st_cuda_q8_1_row_bytes(d);
    const size_t act_b = sizeof(float) * (size_t)K * F, y_b = sizeof(float) * (size_t)K * d, ids_b = sizeof(int32_t) * K;
#define A256(n) (((n) + 255) & ~(size_t)255)
    const size_t total = A256(tab_b) + A256(xq_b) + A256(act_b) + A256(y_b) + A256(ids_b);
    uint8_t *buf = st_cuda_alloc(h->ctx, total, "--pcie-frac auto measurement");
    const void **tab_h = malloc(tab_b);
    int32_t *ids = malloc(ids_b);
    cudaEvent_t e0 = NULL, e1 = NULL;
    int rc = -1;
    if (!buf || !tab_h || !ids) goto done;
    const void **tab = (const void **)buf;
    uint8_t *xq = buf + A256(tab_b);
    float *act = (float *)(xq + A256(xq_b)), *y = (float *)((uint8_t *)act + A256(act_b));
    int32_t *ids_d = (int32_t *)((uint8_t *)y + A256(y_b));
#undef A256
    if (st_cuda_memset(h->ctx, xq, 0, xq_b, NULL)) goto done;  // zero activations: the timing needs no values
    if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        st_cuda_check_at(cudaGetLastError(), "cudaEventCreate", __FILE__, __LINE__);
        goto done;
    }
    double sum = 0;
    for (int r = 0; r <= reps; r++) {
        const uint32_t l = (uint32_t)(((uint64_t)r * 7 + 3) % h->L);
        const st_xlayer *x = &h->arena->layers[l].x;
        for (int e = 0; e < E; e++)
            for (int k = 0; k < 3; k++) tab_h[3 * e + k] = h->rec_dev[(uint64_t)l * h->E + e] + x->off[k];
        for (int k = 0; k < K; k++) ids[k] = (int32_t)(((uint64_t)r * K + k) % h->E);
        if (st_cuda_memcpy_h2d(h->ctx, (void *)tab, tab_h, tab_b, NULL) ||
            st_cuda_memcpy_h2d(h->ctx, ids_d, ids, ids_b, NULL))
            goto done;
        const int dfmt = st_cuda_act_format(x->type[2]);
        if (cudaEventRecord(e0, st) != cudaSuccess ||
            st_cuda_moe_glu(x->type[0], (const void *const *)tab, E, d, F, xq, ids_d, 1, K, act, st) ||
            st_cuda_moe_down_q(x->type[2], (const void *const *)tab, E, d, F, act, dfmt, ids_d, h->ones_d, K, 1, y,
                               NULL, st) ||
            cudaEventRecord(e1, st) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess) {
            if (cudaGetLastError() != cudaSuccess) st_err("--pcie-frac auto: timing the PCIe expert reads failed");
            goto done;
        }
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (r > 0) sum += ms * 1e-3;
    }
    *t_expert = sum / ((double)reps * K);
    rc = 0;
done:
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (buf) st_cuda_free(h->ctx, buf);
    free(tab_h);
    free(ids);
    return rc;
}

// Seconds from a host node's enqueue to its completion as the stream sees it (the CPU branch's fixed cost).
static int hy_time_host_node(st_hybrid *h, int reps, double *t) {
    cudaEvent_t e0 = NULL, e1 = NULL;
    double best = 1e9;
    HY_CHECK(cudaEventCreate(&e0));
    cudaError_t err = cudaEventCreate(&e1);
    for (int r = 0; err == cudaSuccess && r <= reps; r++) {
        float ms = 0;
        if ((err = cudaEventRecord(e0, h->side)) != cudaSuccess ||
            (err = cudaLaunchHostFunc(h->side, hy_noop, NULL)) != cudaSuccess ||
            (err = cudaEventRecord(e1, h->side)) != cudaSuccess || (err = cudaEventSynchronize(e1)) != cudaSuccess ||
            (err = cudaEventElapsedTime(&ms, e0, e1)) != cudaSuccess)
            break;
        if (r > 0 && ms * 1e-3 < best) best = ms * 1e-3;  // the minimum: the cost when the machine is quiet
    }
    cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    if (err != cudaSuccess) return st_cuda_check_at(err, "timing a host node", __FILE__, __LINE__);
    *t = best;
    return 0;
}

static int hy_map_alloc(void **host, void **dev, size_t bytes, const char *what) {
    cudaError_t e = cudaHostAlloc(host, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e == cudaSuccess) e = cudaHostGetDevicePointer(dev, *host, 0);
    if (e != cudaSuccess) return st_err("cudaHostAlloc(%zu bytes, mapped) for %s: %s", bytes, what, cudaGetErrorString(e));
    memset(*host, 0, bytes);
    return 0;
}

static int hy_bell_init(st_hybrid *h);
static int hy_pf_init(st_hybrid *h);

// The CPU miss workers and their buffers; with --pcie-frac auto, the measured split. Leaves pcie_frac = 1 (no CPU
// work) unless the options ask for CPU misses and the split gives the CPU a share.
static int hy_cpu_init(st_hybrid *h) {
    const st_hparams *hp = &h->m->hp;
    h->pcie_frac = 1.0;
    h->cpu_q16 = 0;
    const double req = h->opts.pcie_frac;
    const int is_auto = req < 0;
    if (!h->opts.cpu_misses || (!is_auto && !(req < 1.0))) return 0;
    h->K = (int)hp->n_expert_used;
    if (h->K < 1 || h->K > 32) {
        st_log(is_auto ? ST_LOG_INFO : ST_LOG_WARN,
               "--pcie-frac: %d experts per token (the CPU miss path takes 1..32); every miss goes over PCIe", h->K);
        return 0;
    }
    const int d = (int)hp->n_embd;
    const int n_cpu = st_cpu_count();
    const int threads = env_int("STRATA_HYBRID_CPU_THREADS", n_cpu > 2 ? n_cpu - 1 : 1, 1, 1024);
    h->cpu = st_hy_cpu_create(h->arena, hp->n_embd, hp->n_ff_exp, h->K, threads);
    if (!h->cpu && is_auto) {  // auto (the default) falls back to every miss over PCIe; an explicit F fails
        st_warn("hybrid decode: no CPU miss workers (%s); every miss goes over PCIe", st_errmsg());
        return 0;
    }
    if (!h->cpu) return st_err_prefix("%s: --pcie-frac: ", h->m->path);
    // The workers stay awake as long as the doorbell thread does: at 16 GiB a layer job came every ~0.7 ms and
    // cost 108 us on the CPU for 1.5 experts, 135 us with 8 threads (2026-12-01b): ~77 us of it fixed.
    st_hy_cpu_set_spin(h->cpu, env_int("STRATA_HY_CPU_SPIN_MS", (int)(HY_BELL_SPIN_S * 1e3), 0, 60000) * 1e-3);
    h->cpu_knockout = env_int("STRATA_HY_CPU_KNOCKOUT", 0, 0, 1);
    if (h->cpu_knockout) st_warn("STRATA_HY_CPU_KNOCKOUT=1: CPU misses answered with zeros (a benchmark knockout; "
                                 "the output is wrong)");
    h->carry_d = st_cuda_alloc(h->ctx, sizeof(uint32_t) * h->L, "CPU-miss split residues");
    h->ids_gpu_d = st_cuda_alloc(h->ctx, sizeof(int32_t) * 32, "CPU-miss expert ids");
    h->ones_d = st_cuda_alloc(h->ctx, sizeof(float) * 32, "CPU-miss unit weights");
    h->y_d = st_cuda_alloc(h->ctx, sizeof(float) * (size_t)h->K * d, "GPU expert outputs");
    h->jobs = calloc(h->L, sizeof *h->jobs);
    if (!h->carry_d || !h->ids_gpu_d || !h->ones_d || !h->y_d) return -1;
    if (!h->jobs) return st_err("out of memory");
    float ones[32];
    for (int k = 0; k < 32; k++) ones[k] = 1.0f;
    if (st_cuda_memset(h->ctx, h->carry_d, 0, sizeof(uint32_t) * h->L, NULL) ||
        st_cuda_memcpy_h2d(h->ctx, h->ones_d, ones, sizeof ones, NULL))
        return -1;
    if (hy_map_alloc((void **)&h->meta_h, (void **)&h->meta_dp, sizeof(int32_t) * ST_HY_META_INTS, "CPU-miss ids") ||
        hy_map_alloc((void **)&h->xrow_h, (void **)&h->xrow_dp, sizeof(float) * (size_t)d, "CPU-miss activations") ||
        hy_map_alloc((void **)&h->ycpu_h, (void **)&h->ycpu_dp, sizeof(float) * (size_t)h->K * d, "CPU expert outputs"))
        return -1;
    for (uint32_t l = 0; l < h->L; l++) h->jobs[l] = (hy_job){h, l, 0};
    HY_CHECK(cudaStreamCreateWithFlags(&h->side, cudaStreamNonBlocking));
    HY_CHECK(cudaEventCreateWithFlags(&h->ev_fork, cudaEventDisableTiming));
    HY_CHECK(cudaEventCreateWithFlags(&h->ev_join, cudaEventDisableTiming));
    double f = req;
    char why[512] = "";
    if (is_auto) {
        // The CPU's figure is the best of three samples taken apart (before, between and after the GPU timings):
        // one sample of six rounds read 735 us/expert where the next process read 35 (2026-12-01f, 12 GiB; auto
        // then sent 85% of the misses over PCIe: 247.9 tok/s against 303.1 at F 0). Whatever slowed it (other
        // load-time work on the cores) did not last; a slow sample must not decide the split for the whole run.
        double t_pcie = 0, t_host = 0, t_cpu = INFINITY, t_cpu_worst = 0;
        for (int k = 0; k < 3; k++) {  // CPU sample k, then the PCIe timing (k 0) or the host node's (k 1)
            const double t = st_hy_cpu_time_expert(h->cpu, 6);
            if (t < 0 || (k == 0 && hy_time_pcie(h, h->ctx->streams[0], 8, &t_pcie)) ||
                (k == 1 && hy_time_host_node(h, 20, &t_host)))
                return st_err_prefix("%s: --pcie-frac auto: ", h->m->path);
            t_cpu = fmin(t_cpu, t);
            t_cpu_worst = fmax(t_cpu_worst, t);
        }
        const double share = (double)h->lay.n_cache / ((double)h->L * h->E);
        const double m = h->K * (1.0 - share);  // misses per layer and token, uniform routing
        // A split layer's fixed cost: the CPU's round trip (the host node's, as the doorbell's stand-in) plus the
        // split's launches; a GPU miss costs more than alone where the prefetch's copies share the link (above).
        const double t_miss = t_pcie * (h->plan.prefetch_per_layer > 0 ? HY_PCIE_SHARED : 1.0);
        f = share >= HY_SPLIT_MAX_SHARE ? 1.0 : st_hy_pick_pcie_frac(t_miss, t_cpu, t_host + HY_SPLIT_OVERHEAD_S, m);
        const double eb = (double)h->ebytes[0];
        snprintf(why, sizeof why,
                 " (measured: PCIe zero-copy %.0f us/expert = %.1f GB/s, %.0f us counted with the prefetch's copies; "
                 "CPU %d threads %.0f us/expert = %.1f GB/s (best of 3 samples, worst %.0f us); host node %.0f us; "
                 "%.1f misses/layer expected at a %.0f%% cache share%s)",
                 t_pcie * 1e6, eb / t_pcie / 1e9, t_miss * 1e6, threads, t_cpu * 1e6, eb / t_cpu / 1e9,
                 t_cpu_worst * 1e6,
                 t_host * 1e6, m, 100.0 * share, share >= HY_SPLIT_MAX_SHARE ? ", too high for a split" : "");
    }
    if (f < 0) f = 0;
    if (f > 1) f = 1;
    h->pcie_frac = f;
    h->cpu_q16 = st_hy_cpu_q16(f);
    if (!h->cpu_q16) {
        h->pcie_frac = 1.0;
        st_info("hybrid decode: --pcie-frac %s -> 1: every miss read by the GPU over PCIe%s", is_auto ? "auto" : "",
                why);
        st_hy_cpu_free(h->cpu);
        h->cpu = NULL;
        return 0;
    }
    st_info("hybrid decode: --pcie-frac %s%.3f: the GPU reads %.0f%% of each layer's misses over PCIe, %d CPU threads "
            "compute the rest%s",
            is_auto ? "auto -> " : "", f, 100.0 * f, threads, why);
    h->split_gate = (st_hy_split_gate){1, 0};
    const int gating = env_int("STRATA_HY_SPLIT_GATE", 1, 0, 2);
    h->split_gating = gating == 2 || (gating == 1 && is_auto);
    h->split_off = env_double("STRATA_HY_SPLIT_GATE_OFF", ST_HY_SPLIT_GATE_OFF, 0, 1e6);
    h->split_on = env_double("STRATA_HY_SPLIT_GATE_ON", ST_HY_SPLIT_GATE_ON, 0, 1e6);
    if (h->split_gating)
        st_info("hybrid decode: the split goes off while misses stay under %.2f per token (%d periods), on again at "
                "%.2f (STRATA_HY_SPLIT_GATE=0: always split)", h->split_off, ST_HY_SPLIT_GATE_QUIET, h->split_on);
    // The doorbell measured faster than host nodes at every budget (12 GiB 111 vs 91 tok/s, 16 GiB at F 0.75 170 vs
    // 123, 8 GiB 86 vs 59; bench/results/2026-11-30c-h200-knockout-hybrid.md).
    // STRATA_HY_CPU_PROFILE=1: where the CPU misses' time goes, printed when the engine closes (after the timing
    // above, which it would otherwise count).
    if (env_int("STRATA_HY_CPU_PROFILE", 0, 0, 1) && st_hy_cpu_set_profile(h->cpu, 1)) return -1;
    return getenv("STRATA_HY_HOSTNODE") ? 0 : hy_bell_init(h);
}

// The CPU-miss split is configured (the workers and F < 1); its gate may have it off for a while.
static int hy_split_configured(const st_hybrid *h) { return h && h->cpu && h->cpu_q16 > 0; }
int st_hybrid_cpu_split(const st_hybrid *h) { return hy_split_configured(h) && h->split_gate.live; }
int st_hybrid_split_gated(const st_hybrid *h) { return hy_split_configured(h) && !h->split_gate.live; }

// The split's gate from one processed read-back period (hy_rb_process).
static void hy_split_gate(st_hybrid *h, int64_t n_dec, uint64_t misses) {
    if (!h->split_gating || !hy_split_configured(h)) return;
    if (!h->split_gate.live) h->split_plain_tokens += n_dec > 0 ? (uint64_t)n_dec : 0;
    if (!st_hy_split_gate_step(&h->split_gate, n_dec, h->period / 2, misses, h->split_off, h->split_on)) return;
    h->split_flips += !h->split_gate.live;
    st_debug("hybrid: the CPU-miss split %s (%.2f misses per token)", h->split_gate.live ? "on" : "off",
             (double)misses / (double)n_dec);
}

// The host node of layer j->l: the CPU misses the classify kernel exported (mapped memory, complete before this
// node starts), computed into their rank rows of ycpu. Runs on CUDA's callback thread: no CUDA calls here.
static void hy_cpu_job(st_hybrid *h, uint32_t l);
static void CUDART_CB hy_host_node(void *ud) {
    const hy_job *j = ud;
    hy_cpu_job(j->h, j->l);
}

// Layer l's CPU misses as the classify kernel exported them, computed into their rank rows of ycpu (a failure is
// kept for the next st_hybrid_after_eval and the rows become NaN). No CUDA calls: it runs on CUDA's callback
// thread (host node) or on the doorbell thread.
static void hy_cpu_job(st_hybrid *h, uint32_t l) {
    const int n = h->meta_h[0], d = (int)h->m->hp.n_embd;
    if (n <= 0) return;
    if (h->cpu_knockout) {
        memset(h->ycpu_h, 0, sizeof(float) * (size_t)h->K * (size_t)d);
        return;
    }
    float *out[32];
    int32_t ids[32];
    int ok = n <= h->K;
    for (int i = 0; ok && i < n; i++) {
        const int rank = h->meta_h[1 + i];
        ids[i] = h->meta_h[1 + 32 + i];
        ok = rank >= 0 && rank < h->K;
        out[i] = h->ycpu_h + (size_t)(ok ? rank : 0) * d;
    }
    if (ok && st_hy_cpu_experts(h->cpu, l, h->xrow_h, n, ids, out) == 0) return;
    if (!atomic_exchange(&h->cpu_failed, 1))
        snprintf(h->cpu_err, sizeof h->cpu_err, "layer %u: %s", l,
                 ok ? st_errmsg() : "the classify kernel exported a bad CPU-miss list");
    for (int k = 0; k < h->K * d; k++) h->ycpu_h[k] = NAN;  // the step's output shows it too
}

// The doorbell thread: polls bell[0] (the classify kernel's ring), runs that layer's CPU misses, answers in
// bell[1]. Spins while splits keep coming; after HY_BELL_SPIN_S without one it polls every 20 us, after
// HY_BELL_IDLE_S every millisecond (an idle engine costs no core, nor 50,000 wake-ups a second now that CPU misses are
// on by default; the first split after a pause waits that long, once). The spin window spans several tokens: with the
// prefetch, most layers have no CPU miss, and a doze between two of them would add its wake-up to the next one.
static void *hy_bell_main(void *ud) {
    st_hybrid *h = ud;
    volatile uint32_t *bell = h->bell_h;
    // Not bell[0] as this thread first finds it: a ring sent before the thread ran would count as seen and its
    // layer wait out the timeout. hy_bell_init zeroed the bell and the ring counter before starting the thread.
    uint32_t seen = 0;
    double last = st_now();
    while (!atomic_load_explicit(&h->bell_stop, memory_order_relaxed)) {
        const uint32_t s = bell[0];
        if (s == seen) {
            const double idle = st_now() - last;
            if (idle > HY_BELL_SPIN_S) {
                struct timespec ts = {0, idle > HY_BELL_IDLE_S ? 1000000 : 20000};
                nanosleep(&ts, NULL);
            } else {
#if defined(__x86_64__) || defined(__i386__)
                __builtin_ia32_pause();
#endif
            }
            continue;
        }
        atomic_thread_fence(memory_order_acquire);  // the exports were written before the ring (system fence)
        seen = s;
        const double t0 = st_now();
        hy_cpu_job(h, bell[2]);
        atomic_thread_fence(memory_order_release);  // the outputs before the answer
        bell[1] = s;
        last = st_now();
        atomic_fetch_add_explicit(&h->cpu_jobs, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&h->cpu_job_ns, (uint64_t)((last - t0) * 1e9), memory_order_relaxed);
    }
    return NULL;
}

static int hy_bell_init(st_hybrid *h) {
    if (hy_map_alloc((void **)&h->bell_h, (void **)&h->bell_dp, sizeof(uint32_t) * 4, "CPU-miss doorbell")) return -1;
    h->bell_seq_d = st_cuda_alloc(h->ctx, sizeof(uint32_t), "CPU-miss doorbell counter");
    h->bell_wait_d = st_cuda_alloc(h->ctx, sizeof(unsigned long long), "CPU-miss wait counter");
    h->join_leader_d = st_cuda_alloc(h->ctx, sizeof(uint32_t) * 3, "CPU-miss join leader words");
    if (!h->bell_seq_d || !h->bell_wait_d || !h->join_leader_d ||
        st_cuda_memset(h->ctx, h->bell_seq_d, 0, sizeof(uint32_t), NULL) ||
        st_cuda_memset(h->ctx, h->bell_wait_d, 0, sizeof(unsigned long long), NULL) ||
        st_cuda_memset(h->ctx, h->join_leader_d, 0, sizeof(uint32_t) * 3, NULL))
        return -1;
    // The split rides in the router and down launches (2 launches fewer per layer): 18.9 GiB without the prefetch,
    // F 0 424.2 vs 402.7 tok/s with the separate classify / combine launches; with it 394.9 vs 392.4, 16 GiB 359.5
    // vs 356.8 (2026-12-01c). STRATA_HY_SPLIT_FUSED=0: the separate launches (A/B; the host-node path's).
    h->split_fused = env_int("STRATA_HY_SPLIT_FUSED", 1, 0, 1);
    if (!h->split_fused)
        st_info("hybrid decode: the split's classify and combine as launches of their own (STRATA_HY_SPLIT_FUSED=0)");
    atomic_store(&h->bell_stop, 0);
    if (pthread_create(&h->bell_thread, NULL, hy_bell_main, h)) return st_err("cannot start the CPU-miss doorbell thread");
    h->bell_started = 1;
    h->doorbell = 1;
    st_info("hybrid decode: CPU misses through a doorbell thread (STRATA_HY_HOSTNODE=1: host nodes instead)");
    return 0;
}

int st_hybrid_split_fused(const st_hybrid *h) { return st_hybrid_cpu_split(h) && h->doorbell && h->split_fused; }

// The side block takes this split: no CPU misses, or every miss the CPU's through the fused doorbell split.
static int hy_side_split_ok(const st_hybrid *h) {
    return !st_hybrid_cpu_split(h) || (st_hybrid_split_fused(h) && h->cpu_q16 == ST_HY_Q16);
}

// The end of the VRAM expert slots (cache, staging, prefetch): an entry in [h->slots, this) is no miss.
static const uint8_t *hy_vram_end(const st_hybrid *h) { return h->slots + h->slot_off[h->n_slots_alloc]; }

int st_hybrid_glu_side(const st_hybrid *h) {
    return h && h->glu_side && (h->snap_on || !st_hybrid_prefetch_on(h)) && hy_side_split_ok(h);
}

static int32_t *hy_pf_progress(const st_hybrid *h);

// The snapshot's layer row, where the side block decodes with the branch on; NULL otherwise.
static uint8_t *hy_snap(const st_hybrid *h, uint32_t l) {
    return h->snap_on && st_hybrid_prefetch_on(h) ? h->snap_d + (uint64_t)l * h->E : NULL;
}

int st_hybrid_snap_args(const st_hybrid *h, uint32_t l, st_hy_snap_args *a) {
    memset(a, 0, sizeof *a);
    uint8_t *snap = h ? hy_snap(h, l) : NULL;
    if (!snap) return 0;
    a->table = st_hybrid_layer_table(h, l);
    a->vram_lo = h->slots;
    a->vram_hi = hy_vram_end(h);
    a->snap = snap;
    a->progress = hy_pf_progress(h);
    a->layer = (int)l;
    return 1;
}

void st_hybrid_split_args(const st_hybrid *h, uint32_t l, const float *xn, st_hy_split_args *a) {
    const st_hy_split_args v = {(int)h->E, st_hybrid_layer_table(h, l), h->slots, hy_vram_end(h), h->cpu_q16,
                                h->carry_d + l, h->ids_gpu_d,
                                h->meta_dp, xn, h->xrow_dp, (int)h->m->hp.n_embd,
                                h->cnt_d + (uint64_t)h->L * h->E + 2ull * h->L + l, h->bell_seq_d, h->bell_dp, (int)l,
                                NULL};
    *a = v;
}

int st_hybrid_moe_decode(st_hybrid *h, uint32_t l, int gu_type, int down_type, const float *xn, const void *xq,
                         int32_t *ids, float *wts, float *act, void *actq, int32_t *counters, float *x,
                         int routed_split, const float *logits, int norm, cudaStream_t st) {
    const st_hparams *hp = &h->m->hp;
    const int K = h->K, E = (int)h->E, d = (int)hp->n_embd, F = (int)hp->n_ff_exp;
    if (routed_split && !st_hybrid_split_fused(h)) return st_err("hybrid: a fused split without the doorbell");
    if (routed_split == 2 && (!st_hybrid_glu_side(h) || !logits))
        return st_err("hybrid: a side block without its mode");
    st_hy_split_args a;
    st_hybrid_split_args(h, l, xn, &a);
    if (routed_split == 2) a.snap = hy_snap(h, l);  // (the router launch took it: st_hybrid_snap_args)
    const int dfmt = st_cuda_act_format(down_type);
    if (!routed_split) {  // classify (the doorbell variant rings); host nodes: fork, the CPU branch waits for it only
        if (h->doorbell ? st_cuda_hy_classify_bell(ids, K, E, a.table, a.vram_lo, a.vram_hi, a.cpu_q16, a.carry,
                                                   a.ids_gpu, a.meta, a.x, a.hx, d, a.cpu_count, a.seq, a.bell,
                                                   a.layer, st)
                        : st_cuda_hy_classify(ids, K, E, a.table, a.vram_lo, a.vram_hi, a.cpu_q16, a.carry,
                                              a.ids_gpu, a.meta, a.x, a.hx, d, a.cpu_count, st))
            return -1;
        if (!h->doorbell) {
            HY_CHECK(cudaEventRecord(h->ev_fork, st));
            HY_CHECK(cudaStreamWaitEvent(h->side, h->ev_fork, 0));
            HY_CHECK(cudaLaunchHostFunc(h->side, hy_host_node, &h->jobs[l]));
            HY_CHECK(cudaEventRecord(h->ev_join, h->side));
        }
    }
    // GPU branch: hits and PCIe misses (CPU ranks have id -1: no weight reads) by the all-GPU path's kernels; with a
    // CPU rank the down kernel leaves x alone and writes each rank's row to y_d for the combine (decode.h
    // st_cuda_moe_down_split), else it adds the sum itself and the combine does nothing; with the split fused
    // (routed_split) the down kernel waits for the CPU's rows and sums them itself. (The split path used to run the
    // down kernel as K one-expert tokens, 8x its blocks, and cost ~50 us per layer: 180 vs 325 tok/s at 16 GiB with
    // almost no CPU misses, 2026-12-01.)
    // With the side block (2) the GLU launch routes, counts, classifies and rings itself (STRATA_HY_GLU_SIDE).
    st_hy_count_args c;
    if (routed_split == 2) st_hybrid_count_args(h, l, 1, &c);
    if (routed_split == 2 ? st_cuda_moe_route_glu_hy(gu_type, a.table, E, d, F, xq, logits, norm, K, ids, wts, act,
                                                     actq, dfmt, counters, &c, &a, st)
                          : st_cuda_moe_glu_q(gu_type, a.table, E, d, F, xq, a.ids_gpu, 1, K, act, actq, dfmt,
                                              counters, st))
        return -1;
    if (routed_split) {
        const st_hy_join_args j = {h->ycpu_dp, h->bell_seq_d, h->bell_dp, h->bell_wait_d, h->join_leader_d};
        return st_cuda_moe_down_join(down_type, a.table, E, d, F, actq, a.ids_gpu, wts, K, x, x, &j, st);
    }
    if (st_cuda_moe_down_split(down_type, a.table, E, d, F, actq, a.ids_gpu, wts, K, x, x, h->y_d, st)) return -1;
    if (h->doorbell)  // the combine waits for the doorbell thread's answer
        return st_cuda_hy_combine_bell(a.ids_gpu, wts, h->y_d, h->ycpu_dp, K, d, x, x, h->bell_seq_d, h->bell_dp,
                                       h->bell_wait_d, st);
    HY_CHECK(cudaStreamWaitEvent(st, h->ev_join, 0));  // join
    return st_cuda_hy_combine(a.ids_gpu, wts, h->y_d, h->ycpu_dp, K, d, x, x, st);
}

// ---- prefill CPU share ---------------------------------------------------------------------------------------------

// Picks, for a chunk of n_tok tokens, how many non-resident experts of each layer the CPU computes and which (the
// least used by the decayed frequencies), from the costs measured at load: staging m - c records over PCIe takes
// (m - c) * t_stage; the CPU's c experts of ~n_tok * K / E tokens each take t_fix + c * t_cpu(tokens), t_fix
// being the rows' and the result's trips over PCIe plus the two host functions. Equal times give c. The rows'
// copy, the result's read and the host functions also lengthen the compute stream (t_crit), so a share whose
// staging saving is under twice that is not taken. Marks pmap_dirty when the choice changed.
static void hy_pc_plan(st_hybrid *h, int n_tok) {
    if (!h->pcpu) return;
    const st_hparams *hp = &h->m->hp;
    const int on = n_tok > 0 && n_tok <= h->pc_max_tok;
    const double tok_per_expert = (double)n_tok * (double)hp->n_expert_used / (double)h->E;
    const double t_cpu = h->pc_t32 * (tok_per_expert > 8 ? tok_per_expert : 8) / 32.0;
    const double t_crit = 2.0 * (double)n_tok * (double)hp->n_embd * 4.0 / 50e9 + 20e-6;
    const double t_fix = t_crit + 40e-6;
    // A prefetch copy counts as resident (rebuild_pmap reads it from VRAM).
    const int32_t *copy = h->pc_copy;
    pf_copy_slots(h, h->pc_copy);
    int changed = h->pc_n_tok != (on ? n_tok : 0);
    h->pc_n_tok = on ? n_tok : 0;
    for (uint32_t l = 0; l < h->L; l++) {
        const uint64_t row = (uint64_t)l * h->E;
        uint32_t m = 0;
        for (uint32_t e = 0; e < h->E; e++) m += h->slot_of[row + e] < 0 && copy[row + e] < 0;
        double c = on ? ((double)m * h->pc_t_stage - t_fix) / (h->pc_t_stage + t_cpu) : 0;
        uint32_t n = c >= 1 && (double)(uint32_t)c * h->pc_t_stage >= 2.0 * t_crit ? (uint32_t)c : 0;
        if (n > m) n = m;
        // The n least used candidates (ties: the highest ids, which stage last anyway).
        uint8_t *pick = h->pc_on + row;
        uint8_t before[1024];
        memcpy(before, pick, h->E);
        memset(pick, 0, h->E);
        for (uint32_t k = 0; k < n; k++) {
            int best = -1;
            for (uint32_t e = 0; e < h->E; e++)
                if (h->slot_of[row + e] < 0 && copy[row + e] < 0 && !pick[e] &&
                    (best < 0 || h->freq[row + e] <= h->freq[row + (uint32_t)best]))
                    best = (int)e;
            if (best < 0) break;
            pick[best] = 1;
        }
        h->pc_count[l] = n;
        changed |= memcmp(before, pick, h->E) != 0;
    }
    if (changed) h->pmap_dirty = 1;
}

// The prefill CPU thread: runs each requested layer's CPU experts (st_hy_cpu_tokens) and reports it done.
static void *hy_pc_main(void *ud) {
    st_hybrid *h = ud;
    const int K = (int)h->m->hp.n_expert_used;
    uint64_t taken = 0;
    for (;;) {
        pthread_mutex_lock(&h->pc_mu);
        while (!h->pc_stop && h->pc_req_seq == taken) pthread_cond_wait(&h->pc_cv, &h->pc_mu);
        if (h->pc_stop) {
            pthread_mutex_unlock(&h->pc_mu);
            return NULL;
        }
        taken = h->pc_req_seq;
        const uint32_t l = h->pc_req_layer;
        pthread_mutex_unlock(&h->pc_mu);
        if (st_hy_cpu_tokens(h->pcpu, l, h->pc_x, h->pc_n_tok, h->pc_ids, h->pc_w, K, h->pc_on + (uint64_t)l * h->E,
                             h->pc_y)) {
            if (!atomic_exchange(&h->cpu_failed, 1))
                snprintf(h->cpu_err, sizeof h->cpu_err, "prefill, layer %u: %s", l, st_errmsg());
            for (int64_t i = 0; i < (int64_t)h->pc_n_tok * h->m->hp.n_embd; i++) h->pc_y[i] = NAN;
        }
        pthread_mutex_lock(&h->pc_mu);
        h->pc_done_seq = taken;
        pthread_cond_broadcast(&h->pc_cv);
        pthread_mutex_unlock(&h->pc_mu);
    }
}

// Host functions on the compute stream (no CUDA calls): start a layer's CPU job; wait for it (blocks the stream).
static void CUDART_CB hy_pc_start(void *ud) {
    hy_job *j = ud;
    st_hybrid *h = j->h;
    pthread_mutex_lock(&h->pc_mu);
    h->pc_req_layer = j->l;
    h->pc_req_seq = j->seq;
    pthread_cond_broadcast(&h->pc_cv);
    pthread_mutex_unlock(&h->pc_mu);
}

static void CUDART_CB hy_pc_wait(void *ud) {
    hy_job *j = ud;
    st_hybrid *h = j->h;
    pthread_mutex_lock(&h->pc_mu);
    while (h->pc_done_seq < j->seq && !h->pc_stop) pthread_cond_wait(&h->pc_cv, &h->pc_mu);
    pthread_mutex_unlock(&h->pc_mu);
}

// Seconds per record staged (a copy of `n` records of layer 0 into the staging slots, after a warm-up).
static int hy_time_stage(st_hybrid *h, int n, double *t) {
    uint32_t ex[64];
    if (n > 64) n = 64;
    if ((uint32_t)n > h->E) n = (int)h->E;
    if ((uint64_t)n > h->lay.stage_per_buf) n = (int)h->lay.stage_per_buf;
    if (n < 1) return st_err("no staging slots to time");
    for (int i = 0; i < n; i++) ex[i] = (uint32_t)i;
    const int64_t slot0 = (int64_t)h->lay.n_cache;
    cudaEvent_t a, b;
    HY_CHECK(cudaEventCreate(&a));
    HY_CHECK(cudaEventCreate(&b));
    uint64_t bytes = 0;
    int rc = copy_records(h, 0, ex, n, slot0, h->copy, &bytes);  // warm-up
    if (!rc) rc = cudaEventRecord(a, h->copy) != cudaSuccess;
    if (!rc) rc = copy_records(h, h->L > 1 ? 1 : 0, ex, n, slot0, h->copy, &bytes);
    if (!rc) rc = cudaEventRecord(b, h->copy) != cudaSuccess || cudaEventSynchronize(b) != cudaSuccess;
    float ms = 0;
    if (!rc) rc = cudaEventElapsedTime(&ms, a, b) != cudaSuccess;
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    cudaGetLastError();
    if (rc) return st_err("timing the staging copies failed");
    *t = (double)ms * 1e-3 / n;
    return 0;
}

static int hy_pc_init(st_hybrid *h) {
    const st_hparams *hp = &h->m->hp;
    const int K = (int)hp->n_expert_used;
    if (!h->opts.prefill_cpu || !env_int("STRATA_HY_PREFILL_CPU", 1, 0, 1) || K < 1 || K > 32 || h->E > 1024) return 0;
    h->pc_max_tok = env_int("STRATA_HY_PREFILL_CPU_MAX", HY_PC_MAX_TOK_DEFAULT, 0, 1 << 20);
    if (h->pc_max_tok > (int)h->plan.prefill_chunk) h->pc_max_tok = (int)h->plan.prefill_chunk;
    if (h->pc_max_tok < (int64_t)h->E / K * 32) {  // (its CPU cost is measured at 32 tokens per expert, below)
        h->pc_max_tok = 0;
        return 0;
    }
    if (h->cpu) {
        h->pcpu = h->cpu;
    } else {
        const int n_cpu = st_cpu_count();
        const int threads = env_int("STRATA_HYBRID_CPU_THREADS", n_cpu > 2 ? n_cpu - 1 : 1, 1, 1024);
        h->pcpu = h->pcpu_own = st_hy_cpu_create(h->arena, hp->n_embd, hp->n_ff_exp, K, threads);
        if (!h->pcpu) return st_err_prefix("%s: prefill CPU share: ", h->m->path);
    }
    const size_t rows = (size_t)h->pc_max_tok, d = (size_t)hp->n_embd;
    h->pc_count = calloc(h->L, sizeof *h->pc_count);
    h->pc_on = calloc((size_t)h->L * h->E, 1);
    h->pc_copy = malloc(sizeof *h->pc_copy * (size_t)h->L * h->E);
    h->pc_jobs = calloc(h->L, sizeof *h->pc_jobs);
    if (!h->pc_count || !h->pc_on || !h->pc_copy || !h->pc_jobs) return st_err("out of memory");
    for (uint32_t l = 0; l < h->L; l++) h->pc_jobs[l] = (hy_job){h, l, 0};
    HY_CHECK(cudaMallocHost((void **)&h->pc_x, sizeof(float) * rows * d));
    HY_CHECK(cudaMallocHost((void **)&h->pc_w, sizeof(float) * rows * (size_t)K));
    HY_CHECK(cudaMallocHost((void **)&h->pc_ids, sizeof(int32_t) * rows * (size_t)K));
    if (hy_map_alloc((void **)&h->pc_y, (void **)&h->pc_y_dp, sizeof(float) * rows * d, "prefill CPU results"))
        return -1;
    // The best of 3 (one sample swings by 2x on a busy host), after a warm-up; other layers each time (cold weights).
    h->pc_t32 = 1e30;
    if (hy_time_stage(h, 16, &h->pc_t_stage) || st_hy_cpu_time_tokens(h->pcpu, 0, K, 8, 8) < 0)
        return st_err_prefix("%s: prefill CPU share: ", h->m->path);
    for (uint32_t r = 1; r <= 3; r++) {
        const double t = st_hy_cpu_time_tokens(h->pcpu, r % h->L, K, 32, 8);
        if (t < 0) return st_err_prefix("%s: prefill CPU share: ", h->m->path);
        if (t < h->pc_t32) h->pc_t32 = t;
    }
    if (pthread_mutex_init(&h->pc_mu, NULL) || pthread_cond_init(&h->pc_cv, NULL) ||
        pthread_create(&h->pc_thread, NULL, hy_pc_main, h))
        return st_err("prefill CPU share: cannot start its thread");
    h->pc_started = 1;
    st_info("hybrid prefill: CPU share for steps up to %d tokens (%d threads): staging %.0f us per expert, CPU %.0f us "
            "per expert of 32 tokens", h->pc_max_tok, st_hy_cpu_threads(h->pcpu), h->pc_t_stage * 1e6, h->pc_t32 * 1e6);
    return 0;
}

static void hy_pc_free(st_hybrid *h) {
    if (h->pc_started) {
        pthread_mutex_lock(&h->pc_mu);
        h->pc_stop = 1;
        pthread_cond_broadcast(&h->pc_cv);
        pthread_mutex_unlock(&h->pc_mu);
        pthread_join(h->pc_thread, NULL);
        pthread_mutex_destroy(&h->pc_mu);
        pthread_cond_destroy(&h->pc_cv);
    }
    st_hy_cpu_free(h->pcpu_own);
    if (h->pc_x) cudaFreeHost(h->pc_x);
    if (h->pc_w) cudaFreeHost(h->pc_w);
    if (h->pc_ids) cudaFreeHost(h->pc_ids);
    if (h->pc_y) cudaFreeHost(h->pc_y);
    free(h->pc_count);
    free(h->pc_on);
    free(h->pc_copy);
    free(h->pc_jobs);
}

// ---- init / free ------------------------------------------------------------------------------------------------

int st_hybrid_init(st_hybrid *h, st_cuda_ctx *ctx, uint64_t dense_bytes) {
    const st_hparams *hp = &h->m->hp;
    h->ctx = ctx;
    h->L = hp->n_layer;
    h->E = hp->n_expert;
    const uint64_t n_rec = (uint64_t)h->L * h->E;
    char b[6][32];
    int dev_attr = 0;
    if (cudaDeviceGetAttribute(&dev_attr, cudaDevAttrPageableMemoryAccess, ctx->device) == cudaSuccess)
        h->pageable_ok = dev_attr;
    cudaGetLastError();
    // Slots: what the budget leaves after the dense weights as uploaded, the tables, the KV cache, scratch and the
    // runtime reserve of the plan.
    h->stride = h->plan.slot_bytes;
    uint64_t tables = n_rec * (3 * sizeof(void *) + sizeof(int32_t) + sizeof(uint32_t)) + 4096;
    if (h->opts.cpu_misses)  // CPU-miss buffers and the --pcie-frac auto measurement's scratch (hy_cpu_init)
        tables += (uint64_t)hp->n_expert_used * (hp->n_embd + 2) * sizeof(float) + 16ull * h->L + (1ull << 20);
    // The plan's reserve stands for the CUDA context, library workspaces and graphs (ST_PLAN_RESERVE_DEFAULT, sized
    // from nvidia-smi peaks on an H200), its host map for the GPU's page tables of the registered arena, so that
    // `strata info --plan` and the engine agree on the slot count.
    const uint64_t held = dense_bytes + h->plan.reserve_bytes + h->plan.host_map_bytes;
    const uint64_t fixed = held + tables + h->plan.kv_bytes + h->plan.scratch_bytes;
    if (h->plan.budget <= fixed + h->stride * h->E)
        return st_err("%s: --gpu-mem %.2f GiB leaves no room for expert slots: dense weights %s (uploaded) + KV %s + "
                      "scratch %s + reserve %s + host arena page tables %s, and prefill staging needs at least %u "
                      "slots of %s: raise --gpu-mem to %.2f GiB or more",
                      h->m->path, h->opts.gpu_mem_gib, st_fmt_bytes(b[0], 32, (double)dense_bytes),
                      st_fmt_bytes(b[1], 32, (double)h->plan.kv_bytes),
                      st_fmt_bytes(b[2], 32, (double)h->plan.scratch_bytes),
                      st_fmt_bytes(b[3], 32, (double)h->plan.reserve_bytes),
                      st_fmt_bytes(b[4], 32, (double)h->plan.host_map_bytes), h->E,
                      st_fmt_bytes(b[5], 32, (double)h->stride),
                      (double)(fixed + h->stride * h->E) / (double)(1ull << 30) + 0.01);
    // The lookahead prefetch (hy_pf_init) as planned (place/plan.h): P predictions per layer, by default in L x P
    // slots of its own out of the cache's share (one set per layer), else in sets carved from the prefill staging.
    h->pf_P = (int)h->plan.prefetch_per_layer;
    if (h->plan.prefetch_share_off)
        st_info("hybrid: lookahead prefetch off: the cache holds %.1f%% of the experts (off from %.0f%%, where its "
                "slots and side launches cost more than its copies save; STRATA_HY_PREFETCH=P keeps it on)",
                100.0 * (double)h->plan.n_slots / (double)h->plan.n_experts_total, 100.0 * ST_PLAN_PREFETCH_MAX_SHARE);
    // The sessions' prefill GEMM / MoE scratch, idle during decode, lives in the own slots (after a borrowed staging
    // buffer, which hy_pf_init leaves out where both do not fit) instead of beside them; the cache takes its bytes.
    // Only where the own slots hold it (the plan's scratch_lent_bytes; STRATA_HY_PF_SCRATCH=0: beside them).
    // Measured on an H200 (bench/ab.sh, 30B-A3B Q4_K_M, --pcie-frac 0 both; 2026-12-03d): 16 GiB tg128 394.5 ->
    // 406.2 (+3.0%; 4093 -> 4322 cache slots, CPU misses/token 6.1 -> 4.3), 17.5 GiB 423.0 -> 439.8 (+4.0%);
    // pp512 7446 -> 7562.
    uint64_t credit = h->plan.scratch_lent_bytes;
    uint64_t n_total;
    uint32_t own_p;
    for (;;) {
        n_total = (h->plan.budget - fixed + credit) / h->stride;
        // The plan's own sets, fewer per layer where the slots left after this engine's tables hold fewer (plan.h)
        own_p = h->plan.n_prefetch
                    ? st_plan_prefetch_own_fit(n_total, 2ull * h->E, h->E, h->L, (uint32_t)h->pf_P, NULL) : 0;
        h->pf_scratch = (uint32_t)((credit + h->stride - 1) / h->stride);
        if (!credit || (uint64_t)h->L * own_p >= h->pf_scratch) break;
        credit = 0;
    }
    h->pf_own = (uint64_t)h->L * own_p;
    if (own_p) h->pf_P = (int)own_p;
    n_total -= h->pf_own;
    // Cache slots sized per layer (default since 2026-12-03; STRATA_HY_SLOT_FIT=0 is the A/B switch back to one
    // size). Q4_K_M's records are 2.53 MiB (Q4_K down) or 2.92 MiB (Q6_K down, ~half the layers), so one size
    // wastes ~7% of the cache; the staging and prefetch slots serve every layer and keep the largest size.
    // Measured on an H200 (bench/ab.sh, 30B-A3B Q4_K_M): 16 GiB tg128 381.3 -> 392.0 (+2.8%, CPU misses/token
    // 7.3 -> 5.9), 12 GiB 323.5 -> 328.3 (+1.5%, 18.5 -> 16.9).
    h->slot_fit = env_int("STRATA_HY_SLOT_FIT", 1, 0, 1);
    uint64_t *lbytes = malloc(sizeof *lbytes * h->L);
    if (!lbytes) return st_err("out of memory");
    for (uint32_t l = 0; l < h->L; l++) {
        const st_layer *ml = &h->m->layers[l];
        st_xlayer x;
        st_xlayer_init(&x, hp, ml->gate_exps.type, ml->up_exps.type, ml->down_exps.type);
        lbytes[l] = h->slot_fit ? x.slot_bytes : h->stride;
    }
    const uint64_t avail = h->plan.budget - fixed + credit - h->pf_own * h->stride;  // (>= n_total * stride)
    const uint64_t *prof = h->prof_layout ? h->prof_layout : h->have_prof ? h->prof.counts : NULL;
    const uint32_t first = h->plan.first_layers;
    const int lay_rc = h->slot_fit ? st_hycache_layout_fit(h->L, h->E, avail, lbytes, h->stride, prof, first, &h->lay)
                                   : st_hycache_layout_compute(h->L, h->E, n_total, prof, first, &h->lay);
    h->n_slots_alloc = lay_rc ? 0 : h->lay.n_cache + (uint64_t)h->lay.n_stage_bufs * h->lay.stage_per_buf + h->pf_own;
    h->slot_off = lay_rc ? NULL : malloc(sizeof *h->slot_off * (h->n_slots_alloc + 1));
    if (h->slot_off) {
        h->slot_off[0] = 0;
        for (uint64_t i = 0; i < h->n_slots_alloc; i++)
            h->slot_off[i + 1] = h->slot_off[i] + (i < h->lay.n_cache ? lbytes[h->lay.initial[i] / h->E] : h->stride);
    }
    free(lbytes);
    if (lay_rc) return st_err_prefix("%s: ", h->m->path);
    if (!h->slot_off) return st_err("out of memory");
    st_hycache_layout one;  // the layout at one slot size, for the log
    // A short prompt's steps use a fraction of that scratch (carved from its start; the LM head's f16 weight, most
    // of it, only for all-position logits): each step drops only the copies under its part
    // (STRATA_HY_PF_SCRATCH_STEP=0: all of them, as before). H200, 30B-A3B Q4_K_M at 16 GiB, `bench/ab.sh -p 512
    // -n 128 -r 2 --rounds 3` (2026-12-03e): tg128 after the pp512 387.2 -> 407.1 tok/s (tg128 alone 405.0; CPU
    // misses per token 7.3 -> 5.1), pp512 7410 -> 8676 (744 instead of 558 experts a chunk read from the copies);
    // 12 GiB 328.4 / 327.4, 8 GiB 260.7 / 268.0 (5 rounds; misses 36 -> 34).
    h->scratch_step = env_int("STRATA_HY_PF_SCRATCH_STEP", 1, 0, 1);
    if (h->pf_scratch)
        st_info("hybrid placement: the prefill GEMM scratch (%s) in %u of the prefetch's own slots, the cache has its "
                "bytes (a prefill %s; STRATA_HY_PF_SCRATCH=0: beside them)",
                st_fmt_bytes(b[0], 32, (double)credit), h->pf_scratch,
                h->scratch_step ? "step drops the copies under the part it uses" : "drops the copies there");
    if (h->slot_fit && st_hycache_layout_compute(h->L, h->E, n_total, prof, first, &one) == 0) {
        st_info("hybrid placement: cache slots sized per layer: %" PRIu64
                " cache slots, %" PRIu64 " at one size", h->lay.n_cache, one.n_cache);
        st_hycache_layout_free(&one);
    }

    // Host arena, page-locked and mapped chunk by chunk.
    st_arena_opts ao;
    memset(&ao, 0, sizeof ao);
    ao.mode = (st_arena_mode)h->opts.arena_mode;
    if (ao.mode == ST_ARENA_AUTO) ao.mode = st_arena_mode_from_env();
    h->opts.arena_mode = ao.mode;
    ao.pack_path = h->opts.pack_path;
    ao.register_chunk = reg_chunk;
    ao.unregister_chunk = unreg_chunk;
    ao.ud = h;
    const int64_t rss0 = st_rss_anon_bytes();
    double t0 = st_now();
    h->arena = st_arena_create(h->m, &ao);
    if (!h->arena) return -1;
    const int64_t rss1 = st_rss_anon_bytes();
    if (map_records(h)) return -1;

    h->slot_of = malloc(sizeof *h->slot_of * n_rec);
    h->tab_h = malloc(sizeof *h->tab_h * n_rec * 3);
    h->ebytes = malloc(sizeof *h->ebytes * h->L);
    h->freq = calloc(n_rec, sizeof *h->freq);
    if (!h->slot_of || !h->tab_h || !h->ebytes || !h->freq) return st_err("out of memory");
    for (uint32_t l = 0; l < h->L; l++) {
        const st_xlayer *x = &h->arena->layers[l].x;
        h->ebytes[l] = x->bytes[0] + x->bytes[1] + x->bytes[2];
        if (x->slot_bytes > h->stride)
            return st_err("%s: layer %u's expert record (%" PRIu64 " bytes) exceeds the slot size %" PRIu64, h->m->path,
                          l, x->slot_bytes, h->stride);
    }
    for (uint64_t i = 0; i < n_rec; i++) h->slot_of[i] = -1;
    for (uint64_t i = 0; i < h->lay.n_cache; i++) h->slot_of[h->lay.initial[i]] = (int32_t)i;

    // Device buffers.
    h->slots = st_cuda_alloc(ctx, h->slot_off[h->n_slots_alloc], "expert cache slots");
    h->tab_d = st_cuda_alloc(ctx, sizeof(void *) * n_rec * 3, "expert address tables");
    h->pmap_d = st_cuda_alloc(ctx, sizeof(int32_t) * n_rec, "prefill slot maps");
    h->cnt_d = st_cuda_alloc(ctx, sizeof(uint32_t) * (n_rec + 3ull * h->L), "routing counters");
    if (!h->slots || !h->tab_d || !h->pmap_d || !h->cnt_d) return -1;
    HY_CHECK(cudaMallocHost((void **)&h->pmap_h, sizeof(int32_t) * n_rec));
    if (h->slot_fit) HY_CHECK(cudaMallocHost((void **)&h->pmap_up_h, sizeof(int32_t) * n_rec));
    HY_CHECK(cudaMallocHost((void **)&h->cnt_h, sizeof(uint32_t) * (n_rec + 3ull * h->L)));
    if (env_int("STRATA_HY_LAYER_STATS", 0, 0, 1) && !(h->layer_stats = calloc(2ull * h->L, sizeof(uint64_t))))
        return st_err("out of memory");
    HY_CHECK(cudaMallocHost((void **)&h->rb_h, sizeof(unsigned long long) * 6));
    // The decode periods' read-back without the stream synchronisation that lets the GPU run dry once per period
    // (the host's decay, swap choice and next launch in series with an idle GPU). Predicted +0.5-2%; measured at the
    // agent prompt, 16 GiB, d16384 (2026-12-02b): 330.94 / 332.99 vs 329.47 / 329.52 tok/s, and +0.3% over the gate
    // alone (333.52 vs 332.59). The default; STRATA_HY_RB_ASYNC=0 synchronises.
    h->rb_async = env_int("STRATA_HY_RB_ASYNC", 1, 0, 1);
    if (st_cuda_memset(ctx, h->cnt_d, 0, sizeof(uint32_t) * (n_rec + 3ull * h->L), NULL)) return -1;
    HY_CHECK(cudaStreamCreateWithFlags(&h->copy, cudaStreamNonBlocking));
    cudaEvent_t *evs[] = {&h->ev_start, &h->ev_staged[0], &h->ev_staged[1], &h->ev_done[0], &h->ev_done[1],
                          &h->ev_victims, &h->ev_copied, &h->ev_rb};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        HY_CHECK(cudaEventCreateWithFlags(evs[i], cudaEventDisableTiming));

    // Initial contents: runs of consecutive slots of one layer in one copy each.
    uint64_t filled = 0;
    st_progress prog;
    st_progress_begin(&prog, "filling the VRAM expert cache", h->lay.n_cache, 0);
    uint32_t *run = malloc(sizeof *run * h->E);
    if (!run) return st_err("out of memory");
    for (uint64_t i = 0; i < h->lay.n_cache;) {
        const uint32_t l = h->lay.initial[i] / h->E;
        int n = 0;
        while (i + n < h->lay.n_cache && h->lay.initial[i + n] / h->E == l && n < (int)h->E) {
            run[n] = h->lay.initial[i + n] % h->E;
            n++;
        }
        if (copy_records(h, l, run, n, (int64_t)i, h->copy, &filled)) {
            free(run);
            return -1;
        }
        i += (uint64_t)n;
        st_progress_add(&prog, (uint64_t)n);
    }
    free(run);
    HY_CHECK(cudaStreamSynchronize(h->copy));
    st_progress_end(&prog);
    for (uint32_t l = 0; l < h->L; l++)
        for (uint32_t e = 0; e < h->E; e++) table_entry(h, l, e, (const void **)&h->tab_h[((uint64_t)l * h->E + e) * 3]);
    if (st_cuda_memcpy_h2d(ctx, (void *)h->tab_d, h->tab_h, sizeof(void *) * n_rec * 3, NULL)) return -1;
    rebuild_pmap(h);
    if (pmap_upload(h, NULL)) return -1;
    HY_CHECK(cudaStreamSynchronize(NULL));

    h->period = env_int("STRATA_HYBRID_PERIOD", HY_PERIOD_DEFAULT, 1, 1 << 20);
    h->max_swaps = env_int("STRATA_HYBRID_SWAPS", HY_SWAPS_DEFAULT, 0, ST_HY_MAX_UPDATES);
    h->adapt = h->max_swaps > 0 && env_int("STRATA_HYBRID_ADAPT", 1, 0, 1);
    h->refill_batches = env_int("STRATA_HY_PREFILL_SWAPS", HY_REFILL_BATCHES_DEFAULT, 0, 1024);
    const char *hl = getenv("STRATA_HYBRID_HALFLIFE");
    double half = hl && atof(hl) > 0 ? atof(hl) : HY_HALFLIFE_DEFAULT;
    h->decay = pow(2.0, -1.0 / half);
    if (h->have_prof)  // start from the profile's shape so the first swaps do not undo its choice
        for (uint64_t i = 0; i < n_rec; i++)
            h->freq[i] = h->prof.n_tokens ? (float)((double)h->prof.counts[i] * half / (double)h->prof.n_tokens) : 0;

    h->glu_side = env_int("STRATA_HY_GLU_SIDE", 1, 0, 1);
    h->snap_on = h->glu_side && env_int("STRATA_HY_SNAP", 1, 0, 1);
    if (h->snap_on && !(h->snap_d = st_cuda_alloc(ctx, (size_t)h->L * h->E, "side-block snapshots"))) return -1;
    if (hy_cpu_init(h) || hy_pf_init(h) || hy_pc_init(h)) return -1;
    if (h->glu_side && hy_side_split_ok(h))
        st_info("hybrid decode: steps %s route in the GLU launch, a side block counting%s "
                "(STRATA_HY_GLU_SIDE=0: in the router's tail)",
                h->snap_on ? "with and without the prefetch's branch (the router's snapshot decides the CPU's ranks; "
                             "STRATA_HY_SNAP=0: only without)" : "without the prefetch's branch",
                st_hybrid_cpu_split(h) ? ", classifying and ringing" : "");

    size_t fr = 0, tot = 0;
    st_cuda_mem_info(ctx, &fr, &tot);
    st_info("hybrid placement: %" PRIu64 " of %" PRIu64 " experts (%.1f%%) in %" PRIu64 " VRAM slots of up to %s (%s), "
            "%u x %u prefill staging slots; host arena %s (%s, %d ranges%s), built in %.2f s, anonymous RSS +%s; "
            "adaptive cache %s (period %d tokens, %d swaps, half-life %.0f tokens); device memory in use %s of %s",
            h->lay.n_cache, n_rec, 100.0 * (double)h->lay.n_cache / (double)n_rec, h->lay.n_cache,
            st_fmt_bytes(b[0], 32, (double)h->stride), st_fmt_bytes(b[1], 32, (double)h->slot_off[h->lay.n_cache]),
            h->lay.n_stage_bufs, h->lay.stage_per_buf, st_fmt_bytes(b[2], 32, (double)h->arena->bytes),
            st_arena_mode_name(h->arena->mode), h->arena->n_chunks,
            h->n_reg_failed ? ", some not page-locked" : ", page-locked and mapped", st_now() - t0,
            st_fmt_bytes(b[3], 32, rss0 >= 0 && rss1 >= rss0 ? (double)(rss1 - rss0) : 0.0),
            h->adapt ? "on" : "off", h->period, h->max_swaps, half, st_fmt_bytes(b[4], 32, (double)(tot - fr)),
            st_fmt_bytes(b[5], 32, (double)tot));
    return 0;
}

// STRATA_HY_LAYER_STATS: the per-layer report (st_info), misses and CPU misses per decode token.
static void hy_layer_report(const st_hybrid *h) {
    if (!h->layer_stats || !h->layer_stats_dec) return;
    char line[64 * 16];
    const double n = (double)h->layer_stats_dec;
    st_info("hybrid: misses per decode token by layer over %" PRIu64 " tokens (layer: all / CPU):",
            h->layer_stats_dec);
    for (uint32_t l0 = 0; l0 < h->L; l0 += 12) {
        size_t k = 0;
        for (uint32_t l = l0; l < h->L && l < l0 + 12; l++)
            k += (size_t)snprintf(line + k, sizeof line - k, " %u: %.2f / %.2f", l, (double)h->layer_stats[2 * l] / n,
                                  (double)h->layer_stats[2 * l + 1] / n);
        st_info("hybrid:  %s", line);
    }
}

void st_hybrid_free(st_hybrid *h) {
    if (!h) return;
    hy_layer_report(h);
    if (h->split_flips)
        st_info("hybrid decode: the CPU-miss split went off %" PRIu64 " time%s (%" PRIu64 " decode tokens counted in "
                "periods with every miss over PCIe)", h->split_flips, h->split_flips == 1 ? "" : "s",
                h->split_plain_tokens);
    free(h->layer_stats);
    if (h->copy) cudaStreamSynchronize(h->copy);
    if (h->side) cudaStreamSynchronize(h->side);  // no host node may still use the workers
    if (h->pf_side) cudaStreamSynchronize(h->pf_side);  // no prefetch copy may still write the slots
    if (h->pf_post_s) cudaStreamSynchronize(h->pf_post_s);
    if (h->bell_started) {  // (the compute stream is idle here: no split is waiting for an answer)
        atomic_store(&h->bell_stop, 1);
        pthread_join(h->bell_thread, NULL);
    }
    hy_pc_free(h);  // (before h->cpu, which its thread may share)
    if (h->bell_h) cudaFreeHost(h->bell_h);
    if (h->bell_seq_d && h->ctx) st_cuda_free(h->ctx, h->bell_seq_d);
    if (h->bell_wait_d && h->ctx) st_cuda_free(h->ctx, h->bell_wait_d);
    if (h->join_leader_d && h->ctx) st_cuda_free(h->ctx, h->join_leader_d);
    char prof[1024];
    if (h->cpu && st_hy_cpu_profile_text(h->cpu, prof, sizeof prof)) st_info("hybrid CPU misses profile: %s", prof);
    st_hy_cpu_free(h->cpu);
    if (h->side) cudaStreamDestroy(h->side);
    if (h->ev_fork) cudaEventDestroy(h->ev_fork);
    if (h->ev_join) cudaEventDestroy(h->ev_join);
    if (h->meta_h) cudaFreeHost(h->meta_h);
    if (h->xrow_h) cudaFreeHost(h->xrow_h);
    if (h->ycpu_h) cudaFreeHost(h->ycpu_h);
    free(h->jobs);
    st_cuda_ctx *ctx = h->ctx;
    if (ctx) {
        if (h->slots) st_cuda_free(ctx, h->slots);
        if (h->tab_d) st_cuda_free(ctx, (void *)h->tab_d);
        if (h->pmap_d) st_cuda_free(ctx, h->pmap_d);
        if (h->cnt_d) st_cuda_free(ctx, h->cnt_d);
        void *cb[] = {h->carry_d, h->ids_gpu_d, h->ones_d, h->y_d, h->snap_d};
        for (size_t i = 0; i < sizeof cb / sizeof cb[0]; i++)
            if (cb[i]) st_cuda_free(ctx, cb[i]);
    }
    if (h->pmap_h) cudaFreeHost(h->pmap_h);
    if (h->pmap_up_h) cudaFreeHost(h->pmap_up_h);
    free(h->slot_off);
    if (h->pf_owner_h) cudaFreeHost(h->pf_owner_h);
    if (h->cnt_h) cudaFreeHost(h->cnt_h);
    if (h->rb_h) cudaFreeHost(h->rb_h);
    cudaEvent_t evs[] = {h->ev_start, h->ev_staged[0], h->ev_staged[1], h->ev_done[0], h->ev_done[1], h->ev_victims,
                         h->ev_copied, h->ev_rb};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        if (evs[i]) cudaEventDestroy(evs[i]);
    if (h->copy) cudaStreamDestroy(h->copy);
    if (h->pf_side) cudaStreamDestroy(h->pf_side);
    if (h->pf_fork) cudaEventDestroy(h->pf_fork);
    if (h->pf_join) cudaEventDestroy(h->pf_join);
    if (h->pf_post_s) cudaStreamDestroy(h->pf_post_s);
    for (int i = 0; i < 4; i++)
        if (h->pf_copied[i]) cudaEventDestroy(h->pf_copied[i]);
    if (h->pf_post_join) cudaEventDestroy(h->pf_post_join);
    if (ctx) {
        void *pb[] = {(void *)h->home_d, (void *)h->rec_d, h->pf_meta_d, h->pf_owner_d, h->pf_work_d,
                      h->pf_progress_d, h->pf_done_d, h->pf_stats_d, h->pred_logits_d, h->pred_w_d, h->pred_ids_d,
                      h->pred_cnt_d, h->pf_seen_d, h->pf_post_work_d, h->pf_post_done_d};
        for (size_t i = 0; i < sizeof pb / sizeof pb[0]; i++)
            if (pb[i]) st_cuda_free(ctx, pb[i]);
    }
    st_arena_free(h->arena);  // unregisters its chunks first
    st_hycache_layout_free(&h->lay);
    free(h->rec_dev);
    free(h->slot_of);
    free(h->tab_h);
    free(h->ebytes);
    free(h->freq);
    st_plan_free(&h->plan);
    st_place_desc_free(&h->desc);
    if (h->have_prof) st_profile_free(&h->prof);
    free(h->prof_layout);
    free(h);
}

const void *const *st_hybrid_layer_table(const st_hybrid *h, uint32_t l) {
    return (const void *const *)(h->tab_d + (uint64_t)l * h->E * 3);
}

void st_hybrid_describe(const st_hybrid *h, st_gpu_hybrid_stats *s) {
    s->active = 1;
    s->n_slots = h->lay.n_cache;
    s->n_experts = (uint64_t)h->L * h->E;
    s->slot_bytes = h->stride;
    s->n_staging = (uint64_t)h->lay.n_stage_bufs * h->lay.stage_per_buf;
    s->pcie_frac = hy_split_configured(h) ? h->pcie_frac : 1.0;
    s->cpu_threads = hy_split_configured(h) ? st_hy_cpu_threads(h->cpu) : 0;
    s->pf_per_layer = h->pf_on ? h->pf_P : 0;
}

// ---- forward-pass hooks -----------------------------------------------------------------------------------------

// The prefetch's progress word for this step's counts (hybrid.h rule 1), or NULL where no branch reads it. With
// the gate's branch off (STRATA_HY_PF_LEAN, default 1) the step leaves out the word's reset and each layer's atomic
// exchange + fence, which sit in the router's tail ahead of the classify's table reads: the agent prompt at 16 GiB,
// tg256 @ d16384, 333.08 / 333.94 -> 336.83 / 336.29 tok/s over two rounds (+0.9%; predicted +0.5-1.5%,
// 2026-12-02c). A graph captured with the branch off keeps NULL; the branch's graph, captured with it on, resets
// the word every step.
static int32_t *hy_pf_progress(const st_hybrid *h) {
    return h->pf_lean && !h->pf_gate_state.live ? NULL : h->pf_progress_d;
}

void st_hybrid_count_args(const st_hybrid *h, uint32_t l, int decode, st_hy_count_args *a) {
    memset(a, 0, sizeof *a);
    a->n_expert = (int)h->E;
    a->table = st_hybrid_layer_table(h, l);
    a->vram_lo = h->slots;
    a->vram_hi = hy_vram_end(h);
    a->counts = h->cnt_d + (uint64_t)l * h->E;
    a->sel_miss = decode ? h->cnt_d + (uint64_t)h->L * h->E + 2ull * l : NULL;
    if (decode && h->pf_on) {
        a->pf.progress = hy_pf_progress(h);
        a->pf.layer = (int)l;
        a->pf.lo = h->pf.pf_slots;
        a->pf.hi = h->pf.pf_slots + (uint64_t)h->pf.n_sets * (uint64_t)h->pf_P * h->stride;
        a->pf.hits = h->pf_stats_d + 4;
    }
}

int st_hybrid_count(st_hybrid *h, uint32_t l, const int32_t *ids, int n_pairs, int decode, cudaStream_t st) {
    st_hy_count_args a;
    st_hybrid_count_args(h, l, decode, &a);
    return st_cuda_hy_count(ids, n_pairs, &a, st);
}

// ---- lookahead prefetch ----------------------------------------------------------------------------------------

int st_hybrid_prefetch_on(const st_hybrid *h) { return h && h->pf_on && h->pf_gate_state.live; }

int st_hybrid_prefetch_gated(const st_hybrid *h) { return h && h->pf_on && !h->pf_gate_state.live; }
int st_hybrid_prefill_chunk(const st_hybrid *h) { return (int)h->plan.prefill_chunk; }

// The lent scratch: own slots [pf_borrow, pf_borrow + pf_scratch), contiguous (own slots have the uniform stride;
// st_hybrid_init keeps pf_scratch <= pf_own, hy_pf_init borrows only where both fit).
static uint8_t *hy_scratch_ptr(const st_hybrid *h) {
    return (uint8_t *)slot_ptr(h, pf_own_slot0(h) + (int64_t)h->pf_borrow);
}

void *st_hybrid_scratch_lend(st_hybrid *h, size_t bytes) {
    if (!h->pf_scratch || h->scratch_lent || bytes > (uint64_t)h->pf_scratch * h->stride) return NULL;
    h->scratch_lent = 1;
    char b[32];
    st_info("hybrid session: the prefill GEMM scratch (%s) lent from the prefetch's own slots", st_fmt_bytes(b, 32,
            (double)bytes));
    return hy_scratch_ptr(h);
}

void st_hybrid_scratch_return(st_hybrid *h, const void *p) {
    if (h->scratch_lent && p == hy_scratch_ptr(h)) h->scratch_lent = 0;
}

int st_hybrid_scratch_step(const st_hybrid *h) { return h && h->scratch_step; }

uint64_t st_hybrid_session_budget(const st_hybrid *h, int64_t *n_ctx) {
    if (n_ctx) *n_ctx = h->plan.n_ctx;
    return h->plan.kv_bytes + h->plan.scratch_bytes;
}

// Fills the own-slot prefetch sets (at load; after a long prompt with STRATA_HY_PF_GATE=2): set s (layer s's,
// n_sets == L in own mode; a set shared by several layers takes its first layer's) gets copies of the P likeliest of
// the layer's non-resident experts by the decayed frequencies (the profile's shape at load when one was loaded,
// else the lowest ids; place/cache_policy.h st_hy_pf_set_refill). A copy the set already holds stays; the entries
// of the experts that leave point home first. The decode-table entries point at the copies, as if the prefetch had
// made them, and the next prefill reads them instead of staging them. The work runs on the copy stream after
// everything queued on st (NULL at load: nothing is) and is complete on return.
static int hy_pf_fill(st_hybrid *h, const char *when, cudaStream_t st) {
    const int P = h->pf_P, n_sets = h->pf.n_sets;
    const uint64_t n_own = (uint64_t)n_sets * (uint64_t)P;
    st_hy_update u[ST_HY_MAX_UPDATES], back[ST_HY_MAX_UPDATES];
    int n_u = 0;
    uint64_t bytes = 0;
    if (st) {  // (a step still queued may read the slots about to be overwritten)
        HY_CHECK(cudaEventRecord(h->ev_victims, st));
        HY_CHECK(cudaStreamWaitEvent(h->copy, h->ev_victims, 0));
    }
    for (int set = 0; set < n_sets && (uint32_t)set < h->L; set++) {
        const uint32_t l = (uint32_t)set;
        const uint64_t row = (uint64_t)l * h->E;
        int32_t *own = h->pf_owner_h + (uint64_t)set * P, expert[32], old[32];
        uint8_t fresh[32];
        for (int j = 0; j < P; j++) {  // (an owner of another layer's row cannot occur in own mode: one set a layer)
            old[j] = own[j];
            expert[j] = own[j] >= 0 && (uint64_t)own[j] >= row && (uint64_t)own[j] < row + h->E ? own[j] - (int32_t)row
                                                                                                   : -1;
        }
        if (!st_hy_pf_set_refill(h->E, P, h->freq + row, h->slot_of + row, expert, fresh)) continue;
        const st_xlayer *x = &h->arena->layers[l].x;
        int n_back = 0;  // (at most P <= ST_HY_MAX_UPDATES: one launch per set)
        for (int j = 0; j < P; j++)
            if (fresh[j] && old[j] >= 0) {  // its expert leaves: the entry points home (tab_h holds the homes)
                back[n_back].index = old[j];
                memcpy(back[n_back++].ptr, &h->tab_h[(uint64_t)old[j] * 3], sizeof back[0].ptr);
            }
        if (n_back && st_cuda_hy_set_table(h->tab_d, back, n_back, h->copy)) return -1;  // before the copies
        const int64_t slot0 = pf_own_slot0(h) + (int64_t)set * P;
        for (int j = 0; j < P;) {  // runs of fresh slots (consecutive experts merge into one copy)
            if (!fresh[j]) {
                j++;
                continue;
            }
            uint32_t run[32];
            int n = 0;
            while (j + n < P && fresh[j + n]) run[n] = (uint32_t)expert[j + n], n++;
            if (copy_records(h, l, run, n, slot0 + j, h->copy, &bytes)) return -1;
            j += n;
        }
        for (int j = 0; j < P; j++) {
            own[j] = expert[j] >= 0 ? (int32_t)(row + (uint64_t)expert[j]) : -1;
            if (!fresh[j]) continue;
            u[n_u].index = (int64_t)(row + (uint64_t)expert[j]);
            for (int k = 0; k < 3; k++) u[n_u].ptr[k] = slot_ptr(h, slot0 + j) + x->off[k];
            if (++n_u == ST_HY_MAX_UPDATES) {
                if (st_cuda_hy_set_table(h->tab_d, u, n_u, h->copy)) return -1;  // after the copies (stream order)
                n_u = 0;
            }
        }
    }
    if (n_u && st_cuda_hy_set_table(h->tab_d, u, n_u, h->copy)) return -1;
    HY_CHECK(cudaMemcpyAsync(h->pf_owner_d, h->pf_owner_h, sizeof(int32_t) * n_own, cudaMemcpyHostToDevice, h->copy));
    HY_CHECK(cudaStreamSynchronize(h->copy));
    h->pmap_dirty = 1;
    char b[32];
    st_info("hybrid: prefetch slots filled %s (%s copied): a prefill reads those experts from VRAM", when,
            st_fmt_bytes(b, sizeof b, (double)bytes));
    return 0;
}

// The post plans' state (STRATA_HY_PF_POST, the struct's comment); h->pf set up but for pf_on.
static int hy_pf_post_init(st_hybrid *h) {
    const int cap = env_int("STRATA_HY_PF_POST", HY_PF_POST_DEFAULT, 0, h->pf_P);
    if (!cap) return 0;
    h->pf_post_blocks = env_int("STRATA_HY_PF_POST_BLOCKS", 2, 1, 1024);
    h->pf_post_work_d = st_cuda_alloc(h->ctx, sizeof(int32_t) * (1 + 2 * (size_t)h->pf_P), "post-plan work list");
    h->pf_post_done_d = st_cuda_alloc(h->ctx, sizeof(uint32_t) * (size_t)h->pf_P, "post-plan counters");
    if (!h->pf_post_work_d || !h->pf_post_done_d ||
        st_cuda_memset(h->ctx, h->pf_post_work_d, 0, sizeof(int32_t) * (1 + 2 * (size_t)h->pf_P), NULL) ||
        st_cuda_memset(h->ctx, h->pf_post_done_d, 0, sizeof(uint32_t) * (size_t)h->pf_P, NULL))
        return -1;
    HY_CHECK(cudaStreamCreateWithFlags(&h->pf_post_s, cudaStreamNonBlocking));
    for (int i = 0; i < 4; i++) HY_CHECK(cudaEventCreateWithFlags(&h->pf_copied[i], cudaEventDisableTiming));
    HY_CHECK(cudaEventCreateWithFlags(&h->pf_post_join, cudaEventDisableTiming));
    h->pf_post = h->pf;
    h->pf_post.work = h->pf_post_work_d;
    h->pf_post.done = h->pf_post_done_d;
    h->pf_post.max_copies = cap;
    st_info("hybrid: post plans: each layer's missed choice copied for the next token (at most %d per layer, %d copy "
            "block%s)", cap, h->pf_post_blocks, h->pf_post_blocks == 1 ? "" : "s");
    return 0;
}

// Sets up the prefetch when h->pf_P > 0 (st_hybrid_init) and its slots hold 3 sets of P. With CPU misses
// too, the classify kernel sees a prefetched expert as a hit (its entry lies in the slot buffer), after the layer's
// count like the MoE kernels. After the tables exist.
static int hy_pf_init(st_hybrid *h) {
    if (h->pf_P <= 0) return 0;
    const uint64_t n_stage = (uint64_t)h->lay.n_stage_bufs * h->lay.stage_per_buf, n_rec = (uint64_t)h->L * h->E;
    // One set per layer when the slots hold them: a copy then stays until its own layer's predictions move on
    // (reused by later tokens); at least 3 sets (the reuse rule of cuda/hybrid.h).
    const uint64_t n_pf = h->pf_own ? h->pf_own : n_stage;
    const uint64_t n_sets = n_pf / (uint64_t)h->pf_P < h->L ? n_pf / (uint64_t)h->pf_P : h->L;
    if (n_sets < 3 || h->L < 2) {
        st_info("hybrid: lookahead prefetch off (too few slots or layers for sets of %d)", h->pf_P);
        return 0;
    }
    // Copy blocks: 4 since 2026-12-02e. The copies' PCIe reads and the CPU-miss workers' DRAM reads share the host's
    // memory (bench_gpu_contention: the workers alone 63.6 GB/s, beside a 16-block copy 54.7), and a copy runs beside
    // the CPU job of the layer before its own. Fewer blocks copy slower but leave the job its bandwidth: 16 GiB
    // tg128 375.8 vs 362.5 tok/s (3 rounds; 2 blocks 364.1), the job 60.5 vs 69.1 us, layers late 4.2 vs 0.2 per
    // token; 8 GiB 261.3 vs 261.8. Pausing the copies while a job runs instead (STRATA_HY_PF_YIELD) lost: 312.6.
    h->pf_blocks = env_int("STRATA_HY_PREFETCH_BLOCKS", 4, 1, 1024);
    // Knockout (A/B of the branch's cost, output unchanged): 1 only predicts (no plan: the sets keep what the load
    // put there), 0 leaves the fork and join alone. (No 2: a plan without its copies would name owners whose slots
    // never got their bytes, which a prefill then reads.)
    h->pf_stages = env_int("STRATA_HY_PF_STAGES", 3, 0, 3);
    if (h->pf_stages == 2) h->pf_stages = 1;
    if (h->pf_stages < 3) st_info("hybrid: prefetch knockout: %d of its 3 kernels per layer (STRATA_HY_PF_STAGES)", h->pf_stages);
    // Copies per layer at most (the likeliest predictions first): a cap when the link cannot carry P per layer.
    const int max_copies = env_int("STRATA_HY_PREFETCH_MAX", HY_PF_MAX_COPIES_DEFAULT, 1, h->pf_P);
    st_cuda_ctx *ctx = h->ctx;
    h->home_d = st_cuda_alloc(ctx, sizeof(void *) * n_rec * 3, "prefetch home table");
    h->rec_d = st_cuda_alloc(ctx, sizeof(void *) * n_rec, "prefetch record table");
    h->pf_meta_d = st_cuda_alloc(ctx, sizeof(long long) * 4 * h->L, "prefetch layer sizes");
    h->pf_owner_d = st_cuda_alloc(ctx, sizeof(int32_t) * n_sets * (size_t)h->pf_P, "prefetch owners");
    h->pf_work_d = st_cuda_alloc(ctx, sizeof(int32_t) * (1 + 2 * (size_t)h->pf_P), "prefetch work list");
    h->pf_progress_d = st_cuda_alloc(ctx, sizeof(int32_t), "prefetch progress");
    h->pf_done_d = st_cuda_alloc(ctx, sizeof(uint32_t) * (size_t)h->pf_P, "prefetch counters");
    h->pf_stats_d = st_cuda_alloc(ctx, sizeof(unsigned long long) * 5, "prefetch statistics");
    h->pred_logits_d = st_cuda_alloc(ctx, sizeof(float) * h->E, "prefetch router logits");
    h->pred_w_d = st_cuda_alloc(ctx, sizeof(float) * 32, "prefetch router weights");
    h->pred_ids_d = st_cuda_alloc(ctx, sizeof(int32_t) * 32, "prefetch router picks");
    h->pred_cnt_d = st_cuda_alloc(ctx, sizeof(int32_t), "prefetch router counter");
    if (!h->home_d || !h->rec_d || !h->pf_meta_d || !h->pf_owner_d || !h->pf_work_d || !h->pf_progress_d ||
        !h->pf_done_d || !h->pf_stats_d || !h->pred_logits_d || !h->pred_w_d || !h->pred_ids_d || !h->pred_cnt_d)
        return -1;
    long long *meta = malloc(sizeof *meta * 4 * h->L);
    if (!meta) return st_err("out of memory");
    for (uint32_t l = 0; l < h->L; l++) {
        const st_xlayer *x = &h->arena->layers[l].x;
        meta[4 * l] = (long long)x->slot_bytes;
        for (int k = 0; k < 3; k++) meta[4 * l + 1 + k] = (long long)x->off[k];
    }
    int rc = st_cuda_memcpy_h2d(ctx, h->pf_meta_d, meta, sizeof *meta * 4 * h->L, NULL) ||
             st_cuda_memcpy_h2d(ctx, (void *)h->home_d, h->tab_h, sizeof(void *) * n_rec * 3, NULL) ||
             st_cuda_memcpy_h2d(ctx, (void *)h->rec_d, h->rec_dev, sizeof(void *) * n_rec, NULL) ||
             st_cuda_memset(ctx, h->pf_owner_d, 0xff, sizeof(int32_t) * n_sets * (size_t)h->pf_P, NULL) ||
             st_cuda_memset(ctx, h->pf_done_d, 0, sizeof(uint32_t) * (size_t)h->pf_P, NULL) ||
             st_cuda_memset(ctx, h->pf_work_d, 0, sizeof(int32_t) * (1 + 2 * (size_t)h->pf_P), NULL) ||
             st_cuda_memset(ctx, h->pf_stats_d, 0, sizeof(unsigned long long) * 5, NULL) ||
             st_cuda_memset(ctx, h->pred_cnt_d, 0, sizeof(int32_t), NULL) ||
             st_cuda_memset(ctx, h->pf_progress_d, 0xff, sizeof(int32_t), NULL);
    free(meta);
    if (rc) return -1;
    HY_CHECK(cudaStreamCreateWithFlags(&h->pf_side, cudaStreamNonBlocking));
    HY_CHECK(cudaEventCreateWithFlags(&h->pf_fork, cudaEventDisableTiming));
    HY_CHECK(cudaEventCreateWithFlags(&h->pf_join, cudaEventDisableTiming));
    st_hy_pf *pf = &h->pf;
    pf->table = h->tab_d;
    pf->home = h->home_d;
    pf->rec = h->rec_d;
    pf->layer_meta = h->pf_meta_d;
    pf->cache_lo = h->slots;
    pf->cache_hi = slot_ptr(h, (int64_t)h->lay.n_cache);
    pf->pf_slots = (uint8_t *)slot_ptr(h, (int64_t)(h->lay.n_cache + (h->pf_own ? n_stage : 0)));  // own, or staging
    pf->stride = (long long)h->stride;
    pf->owner = h->pf_owner_d;
    pf->work = h->pf_work_d;
    pf->done = h->pf_done_d;
    pf->progress = h->pf_progress_d;
    pf->stats = h->pf_stats_d;
    pf->n_sets = (int)n_sets;
    pf->per_set = h->pf_P;
    pf->E = (int)h->E;
    pf->max_copies = max_copies;
    // The previous choice first (default; STRATA_HY_PF_PREV=0: off): each plan puts the experts its layer chose a
    // token ago before the prediction, so their copies stay and the ones that missed are copied (up to the copy
    // cap). Routing repeats itself: on the Qwen3-30B-A3B-shaped file with fresh random tokens the previous token's 8
    // experts hold 85% of a layer's next choice (STRATA_ROUTE_PREDICT); bench/cache_sim.py predicted 3.67 -> 1.64
    // misses per token at 16 GiB. Measured on the H200 (bench/ab.sh -p 512 -n 128, fresh tokens, 2026-12-04b): misses
    // 4.1 -> 3.2 per token and tg128 412.5 -> 420.6 tok/s at 16 GiB, 344.0 -> 352.1 at 12, 275.7 -> 289.6 at 8.
    if (h->E <= ST_HY_PF_PREV_MAX_E && env_int("STRATA_HY_PF_PREV", 1, 0, 1)) {
        h->pf_seen_d = st_cuda_alloc(ctx, sizeof(uint32_t) * n_rec, "prefetch: the counts' last view");
        if (!h->pf_seen_d || st_cuda_memset(ctx, h->pf_seen_d, 0, sizeof(uint32_t) * n_rec, NULL)) return -1;
        pf->prev_max = (int)h->m->hp.n_expert_used;
        pf->counts = h->cnt_d;
        pf->seen = h->pf_seen_d;
    }
    if (pf->prev_max && pf->n_sets >= (int)h->L && h->pf_stages >= 3 && hy_pf_post_init(h)) return -1;
    h->pf_on = 1;
    h->pf_gate_state = (st_hy_pf_gate){1, 0};
    h->pf_gate = env_int("STRATA_HY_PF_GATE", 2, 0, 2);
    h->pf_lean = env_int("STRATA_HY_PF_LEAN", 1, 0, 1);
    st_info("hybrid: lookahead prefetch of %d experts per layer (%d sets of %d slots, %s; at most %d cop%s per layer; "
            "%d copy blocks%s)", h->pf_P, pf->n_sets, h->pf_P, h->pf_own ? "own slots" : "in the prefill staging",
            max_copies, max_copies == 1 ? "y" : "ies", h->pf_blocks,
            pf->prev_max ? "; the previous token's choice first" : "");
    if (!h->pf_own) return 0;
    // The owners' host mirror (a prefill reads the copies they name), empty until the fill or a decode step.
    const uint64_t n_own = (uint64_t)pf->n_sets * (uint64_t)h->pf_P;
    // One staging buffer (the plan kept more own sets instead of the second): a prefill borrows the first own slots
    // as its second buffer. H200, Qwen3-235B-A22B IQ1_M at 8 GiB, pp512 (2026-12-01i): one buffer with 4 own sets
    // 491.2 / 492.6 tok/s, two buffers with 3 own sets 574.4 / 575.0 (tg128 15.0 against 12.3 / 12.9).
    // (Not where the prefill GEMM scratch would not fit after it: one staging buffer then.)
    if (h->lay.n_stage_bufs == 1 && n_own >= h->lay.stage_per_buf + h->pf_scratch &&
        env_int("STRATA_HY_PF_BORROW", 1, 0, 1)) {
        h->pf_borrow = (uint32_t)h->lay.stage_per_buf;
        st_info("hybrid prefill: double-buffered staging, the second buffer in the prefetch's first %u own slots "
                "(a prefill drops the copies there)", h->pf_borrow);
    }
    HY_CHECK(cudaMallocHost((void **)&h->pf_owner_h, sizeof(int32_t) * n_own));
    for (uint64_t j = 0; j < n_own; j++) h->pf_owner_h[j] = -1;
    return env_int("STRATA_HY_PF_FILL", 1, 0, 1) ? hy_pf_fill(h, "at load", NULL) : 0;
}

int st_hybrid_step_begin(st_hybrid *h, cudaStream_t st) {
    if (!h->pf_on || !hy_pf_progress(h)) return 0;
    HY_CHECK(cudaMemsetAsync(h->pf_progress_d, 0xff, sizeof(int32_t), st));  // progress -1: no layer counted yet
    h->pf_forked = 0;
    return 0;
}

int st_hybrid_prefetch(st_hybrid *h, uint32_t l, int router_type, const void *router_next, const float *xn,
                       cudaStream_t st) {
    if (!st_hybrid_prefetch_on(h) || l + 1 >= h->L) return 0;
    const st_hparams *hp = &h->m->hp;
    HY_CHECK(cudaEventRecord(h->pf_fork, st));
    HY_CHECK(cudaStreamWaitEvent(h->pf_side, h->pf_fork, 0));
    h->pf_forked = 1;
    // xn is the main chain's buffer: if this branch runs late, the next layer's norm may have replaced it, which
    // changes only which experts are copied (the prediction), never the output.
    if ((h->pf_stages >= 1 &&
         st_cuda_router_topk(router_type, router_next, (int64_t)hp->n_embd, (int)h->E, xn, 1, h->pf_P, 0,
                             h->pred_logits_d, h->pred_ids_d, h->pred_w_d, h->pred_cnt_d, h->pf_side)) ||
        (h->pf_stages >= 2 && st_cuda_hy_pf_plan(&h->pf, (int)l + 1, h->pred_ids_d, h->pf_P, h->pf_side)) ||
        (h->pf_stages >= 3 && st_cuda_hy_pf_copy(&h->pf, (int)l + 1, h->pf_blocks, h->pf_side)))
        return -1;
    if (!h->pf_post_s) return 0;
    HY_CHECK(cudaEventRecord(h->pf_copied[(l + 1) % 4], h->pf_side));
    if (l < 1) return 0;
    // Layer l-1's post plan: its MoE finished before this fork (after layer l's FFN norm); its side copy was
    // recorded by the branch of layer l-2 (none for layer 0, which no branch plans).
    const uint32_t q = l - 1;
    HY_CHECK(cudaStreamWaitEvent(h->pf_post_s, h->pf_fork, 0));
    if (q >= 1) HY_CHECK(cudaStreamWaitEvent(h->pf_post_s, h->pf_copied[q % 4], 0));
    h->pf_post_forked = 1;
    return st_cuda_hy_pf_plan_post(&h->pf_post, (int)q, h->pf_post_s) ||
           st_cuda_hy_pf_copy(&h->pf_post, (int)q, h->pf_post_blocks, h->pf_post_s) ? -1 : 0;
}

int st_hybrid_step_end(st_hybrid *h, cudaStream_t st) {
    if (!h->pf_on || !h->pf_forked) return 0;
    HY_CHECK(cudaEventRecord(h->pf_join, h->pf_side));
    HY_CHECK(cudaStreamWaitEvent(st, h->pf_join, 0));
    h->pf_forked = 0;
    if (h->pf_post_forked) {
        HY_CHECK(cudaEventRecord(h->pf_post_join, h->pf_post_s));
        HY_CHECK(cudaStreamWaitEvent(st, h->pf_post_join, 0));
        h->pf_post_forked = 0;
    }
    return 0;
}

// Flips the table entries of the swaps in flight to their new slots (their copies are complete).
static int flip_pending(st_hybrid *h, cudaStream_t st) {
    if (!h->n_pend) return 0;
    st_hy_update u[ST_HY_MAX_UPDATES];
    for (int i = 0; i < h->n_pend; i++) {
        const hy_pending *p = &h->pend[i];
        const uint64_t idx = (uint64_t)p->layer * h->E + p->in;
        h->slot_of[idx] = p->slot;
        table_entry(h, p->layer, p->in, (const void **)&h->tab_h[idx * 3]);
        u[i].index = (int64_t)idx;
        memcpy(u[i].ptr, &h->tab_h[idx * 3], sizeof u[i].ptr);
    }
    const int n = h->n_pend;
    h->n_pend = 0;
    h->pmap_dirty = 1;
    return st_cuda_hy_set_table(h->tab_d, u, n, st) || (h->pf_on && st_cuda_hy_set_table(h->home_d, u, n, st));
}

int st_hybrid_before_eval(st_hybrid *h, cudaStream_t st) {
    if (!h->n_pend) return 0;
    const cudaError_t e = cudaEventQuery(h->ev_copied);
    if (e == cudaErrorNotReady) return 0;  // still copying: the next token looks again
    if (e != cudaSuccess) return st_cuda_check_at(e, "cudaEventQuery (expert swap copies)", __FILE__, __LINE__);
    return flip_pending(h, st);
}

// Queues the staging copies of layer l's missing experts into its buffer, after `wait` (if any) on the copy stream.
static int stage_layer(st_hybrid *h, uint32_t l, cudaEvent_t wait) {
    const uint32_t bufs = prefill_bufs(h);
    if (wait) HY_CHECK(cudaStreamWaitEvent(h->copy, wait, 0));
    uint32_t miss[1024];
    int n = 0;
    const int32_t *pm = h->pmap_h + (uint64_t)l * h->E;
    const int64_t base = (int64_t)h->lay.n_cache + (int64_t)(l % bufs) * h->lay.stage_per_buf;
    for (uint32_t e = 0; e < h->E; e++)  // staging slots are numbered in expert order (rebuild_pmap)
        if (pm[e] >= base && pm[e] < base + (int64_t)h->lay.stage_per_buf) miss[n++] = e;
    if (n && copy_records(h, l, miss, n, base, h->copy, &h->staged_chunk)) return -1;
    HY_CHECK(cudaEventRecord(h->ev_staged[l % bufs], h->copy));
    return 0;
}

// The own sets' owners as the decode steps left them (pf_owner_d, after the decode's prefetch copies) into
// pf_owner_h.
static int hy_pf_owners_read(st_hybrid *h, cudaStream_t st) {
    if (!h->pf_on || !h->pf_own || !h->pf_owner_stale) return 0;
    HY_CHECK(cudaMemcpyAsync(h->pf_owner_h, h->pf_owner_d, sizeof(int32_t) * (size_t)h->pf.n_sets * h->pf_P,
                             cudaMemcpyDeviceToHost, st));
    HY_CHECK(cudaStreamSynchronize(st));  // (the engine synchronises after every evaluation anyway)
    h->pf_owner_stale = 0;
    h->pmap_dirty = 1;
    return 0;
}

int st_hybrid_prefill_begin(st_hybrid *h, int n_tok, size_t scratch_bytes, st_gpu_hybrid_stats *stats,
                            cudaStream_t st) {
    if (h->E > 1024) return st_err("hybrid prefill: %u experts per layer (at most 1024)", h->E);
    if (h->n_pend) {  // the slot maps must not name a slot that is being filled
        HY_CHECK(cudaEventSynchronize(h->ev_copied));
        if (flip_pending(h, st)) return -1;
    }
    // Prefetch sets in the staging: every prefetched entry points home again first. Own-slot sets keep their
    // copies, and the prefill reads them (the owners as the last decode steps left them).
    if (h->pf_on && !h->pf_own && st_cuda_hy_pf_reset(&h->pf, -1, st)) return -1;
    if (hy_pf_owners_read(h, st)) return -1;
    // The borrowed slots become staging, the lent ones under the step's scratch bytes GEMM scratch: the copies there
    // go home first (an owner set only with its copy queued, so none is in flight: the engine synchronises after
    // every step).
    uint64_t n_scratch = h->scratch_lent && scratch_bytes ? (scratch_bytes + h->stride - 1) / h->stride : 0;
    if (n_scratch > h->pf_scratch || (n_scratch && !h->scratch_step)) n_scratch = h->pf_scratch;
    const uint32_t n_lend = h->pf_borrow + (uint32_t)n_scratch;
    if (n_lend && h->pf_owner_h) {
        int any = 0;
        for (uint32_t j = 0; j < n_lend; j++)
            if (h->pf_owner_h[j] >= 0) any = 1, h->pf_owner_h[j] = -1;
        if (any && st_cuda_hy_pf_reset(&h->pf, (int)n_lend, st)) return -1;
        h->pmap_dirty |= any;
    }
    hy_pc_plan(h, n_tok);  // (after the owners: a prefetch copy is not the CPU's)
    if (h->pmap_dirty) {
        rebuild_pmap(h);
        if (pmap_upload(h, st)) return -1;
    }
    // Staging may reuse the buffers only after the previous chunk's (and the flips') work on `st`.
    HY_CHECK(cudaEventRecord(h->ev_start, st));
    const uint32_t bufs = prefill_bufs(h);
    for (uint32_t l = 0; l < bufs && l < h->L; l++)
        if (stage_layer(h, l, l == 0 ? h->ev_start : NULL)) return -1;
    if (stats) {
        stats->prefill_chunks++;
        stats->pf_prefill += h->pf_in_pmap;
        if (h->pc_n_tok)
            for (uint32_t l = 0; l < h->L; l++) stats->prefill_cpu += h->pc_count[l];
    }
    return 0;
}

int st_hybrid_moe_prefill(st_hybrid *h, st_gemm_ctx *gemm, int engine, uint32_t l, const float *X,
                          const int32_t *ids, const float *w, int n_tok, float *Y, void *scratch,
                          size_t scratch_bytes, cudaStream_t st) {
    const st_hparams *hp = &h->m->hp;
    const st_layer *ml = &h->m->layers[l];
    const st_xlayer *x = &h->arena->layers[l].x;
    const uint32_t bufs = prefill_bufs(h);
    const int K = (int)hp->n_expert_used;
    // The CPU's experts of this layer (hy_pc_plan): its inputs to pinned memory, then wake the CPU thread.
    const int cpu = h->pc_n_tok == n_tok && h->pc_count[l] > 0;
    hy_job *job = cpu ? &h->pc_jobs[l] : NULL;
    if (cpu) {
        const size_t rows = (size_t)n_tok;
        HY_CHECK(cudaMemcpyAsync(h->pc_x, X, sizeof(float) * rows * hp->n_embd, cudaMemcpyDeviceToHost, st));
        HY_CHECK(cudaMemcpyAsync(h->pc_ids, ids, sizeof(int32_t) * rows * K, cudaMemcpyDeviceToHost, st));
        HY_CHECK(cudaMemcpyAsync(h->pc_w, w, sizeof(float) * rows * K, cudaMemcpyDeviceToHost, st));
        job->seq = ++h->pc_seq_enq;
        HY_CHECK(cudaLaunchHostFunc(st, hy_pc_start, job));
    }
    HY_CHECK(cudaStreamWaitEvent(st, h->ev_staged[l % bufs], 0));
    if (st_hybrid_count(h, l, ids, n_tok * K, 0, st) ||
        st_cuda_moe_ffn_slots(gemm, engine, ml->gate_exps.type, h->slots + x->off[0], h->slots + x->off[1],
                              ml->down_exps.type, h->slots + x->off[2], pmap_unit(h),
                              h->pmap_d + (uint64_t)l * h->E, hp->n_embd, hp->n_ff_exp, (int)h->E, X, ids, w, n_tok,
                              K, Y, scratch, scratch_bytes, st))
        return -1;
    HY_CHECK(cudaEventRecord(h->ev_done[l % bufs], st));
    if (l + bufs < h->L && stage_layer(h, l + bufs, h->ev_done[l % bufs])) return -1;
    if (cpu) {  // the stream waits for the CPU's share, then adds it (read from mapped memory)
        HY_CHECK(cudaLaunchHostFunc(st, hy_pc_wait, job));
        if (st_cuda_add(Y, Y, h->pc_y_dp, (int64_t)n_tok * hp->n_embd, st)) return -1;
    }
    return 0;
}

// ---- adaptive cache ---------------------------------------------------------------------------------------------

// Starts a batch of swaps: victims' entries point back at the host arena first (stream-ordered on st, so a step
// never reads a slot being overwritten), then the copy stream fills the slots; flip_pending publishes them later.
static int start_swaps(st_hybrid *h, int max_swaps, cudaStream_t st, st_gpu_hybrid_stats *stats) {
    st_hycache_swap sw[ST_HY_MAX_UPDATES];
    const int n = st_hycache_pick_swaps(h->L, h->E, h->freq, h->slot_of, max_swaps, HY_RATIO, HY_MIN_FREQ, sw);
    if (n <= 0) return 0;
    st_hy_update u[ST_HY_MAX_UPDATES];
    for (int i = 0; i < n; i++) {
        const uint64_t out = (uint64_t)sw[i].layer * h->E + sw[i].out;
        h->slot_of[out] = -1;
        table_entry(h, sw[i].layer, sw[i].out, (const void **)&h->tab_h[out * 3]);
        u[i].index = (int64_t)out;
        memcpy(u[i].ptr, &h->tab_h[out * 3], sizeof u[i].ptr);
    }
    if (st_cuda_hy_set_table(h->tab_d, u, n, st) || (h->pf_on && st_cuda_hy_set_table(h->home_d, u, n, st)))
        return -1;
    HY_CHECK(cudaEventRecord(h->ev_victims, st));
    HY_CHECK(cudaStreamWaitEvent(h->copy, h->ev_victims, 0));
    uint64_t bytes = 0;
    for (int i = 0; i < n; i++) {
        if (copy_records(h, sw[i].layer, &sw[i].in, 1, sw[i].slot, h->copy, &bytes)) return -1;
        h->pend[i] = (hy_pending){sw[i].layer, sw[i].in, sw[i].slot};
    }
    HY_CHECK(cudaEventRecord(h->ev_copied, h->copy));
    h->n_pend = n;
    h->pmap_dirty = 1;
    h->swaps += (uint64_t)n;
    h->swap_bytes += bytes;
    if (stats) {
        stats->swaps += (uint64_t)n;
        stats->swap_bytes += bytes;
    }
    st_debug("hybrid cache: %d swaps (first: layer %u expert %u in, %u out, gain %.1f)", n, sw[0].layer, sw[0].in,
             sw[0].out, sw[0].gain);
    return 0;
}

// The prefetch's gate (STRATA_HY_PF_GATE, default 2; 0: the branch always runs; rule: place/cache_policy.h
// st_hy_pf_gate_step). The agent prompt at 16 GiB, d16384 before it: the branch served 0.6 selections per token for
// 5.2 experts copied after the refill, 308.2 tok/s with it, 328.9 with its fork / join alone, 336.3 with no prefetch
// at all; tg128 at 16 GiB without a prompt: 66.4 per token served, 369.8 vs 261.1 tok/s without it. Measured
// (2026-12-02b, bench/ab.sh --gpu-mem 16 -n 256 -d 16384): none 304.75, the rule (1) 328.77 (predicted +5-8%), the
// rule and the own sets refilled as cache after the prompt with the branch off (2) 332.59 (1.6 misses per token
// against 2.1), no prefetch at all 337.00.
static void hy_pf_gate(st_hybrid *h, int64_t n_dec, uint64_t pf_hits, uint64_t misses) {
    if (!h->pf_on || !h->pf_gate) return;
    if (st_hy_pf_gate_step(&h->pf_gate_state, n_dec, h->period / 2, pf_hits, misses))
        st_debug("hybrid: the prefetch's branch %s (%.1f selections per token served, %.1f misses)",
                 h->pf_gate_state.live ? "on" : "off", (double)pf_hits / (double)n_dec, (double)misses / (double)n_dec);
}

// The counters' read-back (st_hybrid_after_eval): the period's routing counts, prefetch statistics and CPU wait
// copied to pinned host memory and zeroed on the device after the queued steps; ev_rb marks the copies complete.
static int hy_rb_enqueue(st_hybrid *h, int64_t n_prefill, cudaStream_t st) {
    const uint64_t n_cnt = (uint64_t)h->L * h->E + 3ull * h->L;
    HY_CHECK(cudaMemcpyAsync(h->cnt_h, h->cnt_d, sizeof(uint32_t) * n_cnt, cudaMemcpyDeviceToHost, st));
    HY_CHECK(cudaMemsetAsync(h->cnt_d, 0, sizeof(uint32_t) * n_cnt, st));
    if (h->pf_seen_d) HY_CHECK(cudaMemsetAsync(h->pf_seen_d, 0, sizeof(uint32_t) * (uint64_t)h->L * h->E, st));
    memset(h->rb_h, 0, sizeof(unsigned long long) * 6);
    if (h->pf_on) {
        HY_CHECK(cudaMemcpyAsync(h->rb_h, h->pf_stats_d, sizeof(unsigned long long) * 5, cudaMemcpyDeviceToHost, st));
        HY_CHECK(cudaMemsetAsync(h->pf_stats_d, 0, sizeof(unsigned long long) * 5, st));
    }
    if (h->bell_wait_d) {
        HY_CHECK(cudaMemcpyAsync(h->rb_h + 5, h->bell_wait_d, sizeof(unsigned long long), cudaMemcpyDeviceToHost, st));
        HY_CHECK(cudaMemsetAsync(h->bell_wait_d, 0, sizeof(unsigned long long), st));
    }
    HY_CHECK(cudaEventRecord(h->ev_rb, st));
    h->rb_since = h->since;
    h->rb_dec = n_prefill ? 0 : h->gate_dec;  // (a prefill's period says nothing about the decode's prefetch)
    h->rb_dec_all = h->gate_dec;
    h->since = 0;
    h->gate_dec = 0;
    h->rb_pending = 1;
    return 0;
}

// A completed read-back into the statistics, the prefetch's gate and the decayed frequencies.
static void hy_rb_process(st_hybrid *h, st_gpu_hybrid_stats *stats) {
    const uint64_t n_rec = (uint64_t)h->L * h->E;
    const unsigned long long *pf = h->rb_h;  // st_hy_pf stats [4], then hits
    uint64_t period_misses = 0;
    for (uint32_t l = 0; l < h->L; l++) {
        const uint32_t sel = h->cnt_h[n_rec + 2ull * l], miss = h->cnt_h[n_rec + 2ull * l + 1];
        const uint32_t cpu = h->cnt_h[n_rec + 2ull * h->L + l];
        period_misses += miss;
        if (h->layer_stats) h->layer_stats[2 * l] += miss, h->layer_stats[2 * l + 1] += cpu;
        if (stats) {
            stats->selections += sel;
            stats->misses += miss;
            stats->cpu_misses += cpu;
            stats->miss_bytes += (uint64_t)(miss > cpu ? miss - cpu : 0) * h->ebytes[l];
        }
    }
    h->layer_stats_dec += (uint64_t)h->rb_dec_all;
    hy_pf_gate(h, h->rb_dec, pf[4], period_misses);  // (rb_dec is 0 for a prefill's period)
    hy_split_gate(h, h->rb_dec, period_misses);
    if (stats) {
        stats->cpu_jobs += atomic_exchange(&h->cpu_jobs, 0);  // (jobs after the read-back count a period early)
        stats->cpu_job_s += 1e-9 * (double)atomic_exchange(&h->cpu_job_ns, 0);
        stats->cpu_wait_s += 1e-9 * (double)h->rb_h[5];
        stats->pf_late += pf[1];
        stats->pf_records += pf[2];
        stats->pf_bytes += pf[3];
        stats->pf_hits += pf[4];
    }
    st_hycache_decay(h->freq, h->cnt_h, n_rec, pow(h->decay, (double)h->rb_since));
    h->rb_pending = 0;
}

// After a processed read-back: the swaps (after a long prompt, the refill's batches).
static int hy_rb_adapt(st_hybrid *h, int64_t n_prefill, cudaStream_t st, st_gpu_hybrid_stats *stats) {
    if (!h->adapt || h->n_pend) return 0;
    if (h->refill_batches && n_prefill >= HY_REFILL_MIN_TOKENS) {  // the prompt's own experts, before the decode
        for (int b = 0; b < h->refill_batches; b++) {
            if (start_swaps(h, ST_HY_MAX_UPDATES, st, stats)) return -1;
            if (!h->n_pend) break;  // nothing left worth a swap
            HY_CHECK(cudaEventSynchronize(h->ev_copied));
            if (flip_pending(h, st)) return -1;
        }
        // STRATA_HY_PF_GATE=2 (default): the own sets become cache too (the prompt's next likeliest experts) and the
        // decode starts with the branch off (the gate's rule turns it on when the misses grow).
        if (h->pf_gate == 2 && h->pf_on && h->pf_own) {
            if (hy_pf_owners_read(h, st) || hy_pf_fill(h, "after the prompt", st)) return -1;
            h->pf_gate_state = (st_hy_pf_gate){0, 0};
        }
        return 0;
    }
    return start_swaps(h, h->max_swaps, st, stats);
}

int st_hybrid_after_eval(st_hybrid *h, st_gpu_hybrid_stats *stats, int64_t n_decode, int64_t n_prefill, int force,
                         cudaStream_t st) {
    if (atomic_load(&h->cpu_failed)) return st_err("%s: CPU miss workers failed: %s", h->m->path, h->cpu_err);
    if (h->doorbell && ((volatile uint32_t *)h->bell_h)[3])
        return st_err("%s: the CPU-miss doorbell thread did not answer within %.0f s (its outputs are NaN)",
                      h->m->path, (double)ST_HY_BELL_TIMEOUT_NS * 1e-9);
    if (n_decode && h->pf_on) h->pf_owner_stale = 1;  // (graph replays included: no other hook sees them)
    if (stats) {
        stats->decode_tokens += (uint64_t)n_decode;
        stats->prefill_tokens += (uint64_t)n_prefill;
        stats->staged_bytes += n_prefill ? h->staged_chunk : 0;
    }
    h->staged_chunk = 0;
    h->since += n_decode + n_prefill;
    h->gate_dec += n_decode;
    if (h->rb_pending) {  // an earlier decode period's read-back (STRATA_HY_RB_ASYNC=1)
        const int need = force || n_prefill || h->since >= h->period;  // (the next read-back reuses its buffers)
        const cudaError_t e = need ? cudaEventSynchronize(h->ev_rb) : cudaEventQuery(h->ev_rb);
        if (e == cudaErrorNotReady) return 0;  // still in the stream: a later call looks again
        if (e != cudaSuccess) return st_cuda_check_at(e, "the counters' read-back", __FILE__, __LINE__);
        hy_rb_process(h, stats);
        if (!need) return hy_rb_adapt(h, 0, st, stats);
    }
    if (!force && h->since < h->period && n_prefill == 0) return 0;
    if (h->since == 0 && !force) return 0;
    if (hy_rb_enqueue(h, n_prefill, st)) return -1;
    if (h->rb_async && !force && n_prefill == 0) return 0;  // processed by a later call, the GPU never waiting
    HY_CHECK(cudaEventSynchronize(h->ev_rb));
    hy_rb_process(h, stats);
    return hy_rb_adapt(h, n_prefill, st, stats);
}
