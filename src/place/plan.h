// Hybrid expert placement, step 1: the VRAM budget planner.
//
// Given a model's tensors (from a loaded file, or from a preset shape and quantization mix without writing the
// file), a per-GPU VRAM budget, the context length and KV element size, the planner decides what lives where:
// dense weights (attention, norms, routers, embeddings, LM head, shared experts), the KV cache and the compute
// scratch go to VRAM first; the rest of the budget becomes an expert cache of fixed-size slots; every expert also
// lives in the host expert arena (place/arena.h) in the native layout (place/pack.h). docs/HYBRID.md has the design.
//
// Sizes mirror the CUDA engine (engine/gpu.c): every device tensor is a 256-byte aligned sub-allocation, norm gains
// are uploaded as F32, and the compute scratch of a 512-token prefill chunk follows gpu.c's session allocation and
// its gemm_scratch_need() (st_plan_scratch_bytes re-derives those numbers on the host, so a CPU-only build can plan).
#ifndef STRATA_PLACE_PLAN_H
#define STRATA_PLACE_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/model.h"
#include "model/arch.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ST_PLAN_ALIGN 256             // device sub-allocation alignment (gpu.c ARENA_ALIGN, gemm.cu GEMM_ALIGN)
// Tokens per prefill chunk on the GEMM path in hybrid placement (-ub overrides): every chunk stages the experts it
// routes to that are not in VRAM (nearly all of them from ~512 tokens on), so a long prompt in larger chunks moves
// fewer bytes over PCIe per token. pp16384 at 8 GiB on an H200 (Qwen3-30B-A3B Q4_K_M): 1,814 tok/s at 512, 7,154
// at 2048, 12,094 at 4096, with tg128 unchanged (150.3 / 151.8 at 2048 / 4096). All in VRAM the engine's default is
// STRATA_UBATCH_DEFAULT (gpu.c PREFILL_CHUNK).
#define ST_PLAN_PREFILL_CHUNK 4096
// The default chunk is halved (down to this) where its scratch would not leave the budget's minimum: Qwen3-235B-A22B
// at 8 GiB needs 5.06 GiB of scratch for 4096 tokens and ran nothing; a smaller chunk stages the experts more often
// on long prompts but still runs them. An explicit -ub is never lowered.
#define ST_PLAN_PREFILL_CHUNK_MIN 512
#define ST_PLAN_LOGITS_ROWS 512       // the most LM-head rows of one prefill step (gpu.c LOGITS_ROWS)
#define ST_PLAN_DECODE_BATCH 8        // tokens per step of the matrix-vector path (ST_MMVQ_MAX_TOK)
#define ST_PLAN_SM_COUNT 132          // streaming multiprocessors assumed for the attention workspace (H200)
// CUDA context, cuBLAS handle + workspace, graphs, allocator slack: ~700 MiB measured on an H200 (nvidia-smi peak
// minus the planned bytes, bench/results/2026-11-30-h200-hybrid-q30b-q4km.md); the engine also measures it at load.
#define ST_PLAN_RESERVE_DEFAULT (704ull << 20)
// GPU page tables of the host arena where it is registered for zero-copy reads (cudaHostRegister, mapped): device
// memory outside every allocation, so outside the reserve's measurement too, and proportional to the arena: 8 bytes
// per 4 KiB page. Measured by tests/gpu/bench_gpu_hostreg (H200, driver 580): see bench/results/2026-12-01g-h200.md.
// (The Qwen3-235B-A22B IQ1_M arena, 47 GiB, put the 8 and 12 GiB peaks 61-65 MiB over their budgets without it.)
#define ST_PLAN_HOST_MAP_PER_GIB (2ull << 20)
// The hybrid decode's lookahead prefetch (engine/gpu_hybrid.c): predictions per layer, each layer with a set of that
// many slots of its own (taken from the expert cache's share) unless STRATA_HY_PF_OWN=0 puts the sets in the prefill
// staging slots. STRATA_HY_PREFETCH=P overrides (0: off).
// Off by default where the cache alone (its share of every expert, the prefetch's slots counted in) is at least
// ST_PLAN_PREFETCH_MAX_SHARE: there its own slots and side launches cost more than its copies save. H200, Qwen3-30B-A3B
// shape Q4_K_M, tg128 on / off (2026-12-01c): 17.0 GiB (81.2%) 360.3 / 327.5; 17.6 GiB (84.8%) 369.4 / 382.6;
// 18.2 GiB (88.4%) 382.7 / 403.9; 16 GiB (74.7%) 356.8 / 251.8. Again after the CPU split, the per-layer slot sizes,
// the snapshot and the lent prefill scratch (2026-12-03d, the share as this rule computes it): 16 GiB (74.0%) 403.1 /
// 381.5; 16.8 GiB (78.5%) 417.9 / 434.3; 17.5 GiB (82.5%) 439.8 / 475.3: the crossover near 76.7%.
#define ST_PLAN_PREFETCH_MAX_SHARE 0.77
// ST_PLAN_PREFETCH_MIN_OWN: the fewest predictions per layer the prefetch's own sets are lowered to where the default
// does not fit (below it they go into the staging). H200, Qwen3-235B-A22B IQ1_M at 8 GiB, tg128 (2026-12-01g): own
// sets of 4 / 3 / 2 per layer 10.30 / 8.66 / 7.69 tok/s, the sets in the staging 7.4 (94 layers share its slots).
#define ST_PLAN_PREFETCH_MIN_OWN 2
// ST_PLAN_PREFETCH_SINGLE_BELOW: own sets beside a single prefill staging buffer only where the double-buffered one
// leaves fewer predictions per layer than this, and then at most this many (the rest stays cache). Same shape and
// budget, pp512 + tg128 (context 513): one buffer with 4 own + 122 cache slots tg128 10.80, pp512 494.7; with 5 own
// + 27 cache 8.16 (hit rate 57.8% against 50.7%, yet slower: one run each); two buffers with 3 own 8.66 (tg only).
// The engine's prefill then borrows the first own slots as its second staging buffer (engine/gpu_hybrid.c
// prefill_bufs): 2026-12-01i, --pcie-frac auto (0.46): one buffer pp512 491.2 / 492.6, borrowed 575.3 / 570.8, two
// buffers with 3 own 574.4 / 575.0 (tg128 15.0 / 15.4 / 15.2 with 4 own sets, 12.3 / 12.9 with 3).
#define ST_PLAN_PREFETCH_SINGLE_BELOW 4
#define ST_PLAN_PREFETCH_DEFAULT 16  // 2026-11-30h: 16 / 12 / 8 GiB 294.2 / 215.0 / 164.2 vs 285.1 / 211.5 / 153.2 (P 12); P 20-24 no better, 32 loses

// One tensor of the model as the planner sees it: its spec (name, role, layer, shape) and stored type.
typedef struct st_place_tensor {
    st_tensor_spec spec;
    int type;         // st_type as stored in the file (or chosen by the mix)
    uint64_t bytes;   // bytes as stored: st_row_size(type, ne[0]) * ne[1] * ne[2] * ne[3]
} st_place_tensor;

// Native layout of one layer's experts: a record is gate | up | down, each part starting at a multiple of
// ST_PLAN_ALIGN. `slot_bytes` is what one expert occupies in a VRAM slot; pack records are padded further to 4096.
typedef struct st_xlayer {
    int type[3];          // st_type of gate, up, down
    uint64_t bytes[3];    // one expert's part: rows * row bytes (gate/up: n_ff_exp rows of n_embd; down: n_embd
                          // rows of n_ff_exp)
    uint64_t off[3];      // offset of each part inside the record: 0, align(bytes[0]), off[1] + align(bytes[1])
    uint64_t slot_bytes;  // off[2] + align(bytes[2])
} st_xlayer;

// The model as the planner sees it.
typedef struct st_place_desc {
    st_hparams hp;
    int n_tensors;
    st_place_tensor *t;    // [n_tensors] in st_arch_tensors order
    st_xlayer *xl;         // [hp.n_layer] expert layouts; NULL for dense models
    char name[256];        // for messages: the model path, or "preset qwen3-30b-a3b Q4_K_M"
} st_place_desc;

// From a loaded model (types and bytes from its GGUF). 0 or -1 (st_errmsg).
int st_place_desc_from_model(const st_model *m, st_place_desc *d);
// From hparams (st_hparams_defaults applied) and an st_ftype mix: the tensors make-model would write.
int st_place_desc_from_preset(const st_hparams *hp, int ftype, const char *label, st_place_desc *d);
void st_place_desc_free(st_place_desc *d);
// The layout of one layer's experts from its three stacks' types (used by the pack writer and reader too).
void st_xlayer_init(st_xlayer *x, const st_hparams *hp, int type_gate, int type_up, int type_down);

// Compute scratch in VRAM of a CUDA session of this model: activations for a `chunk`-token prefill step, the
// matrix-vector step's quantized activations and logits, the largest GEMM / MoE scratch of a chunk (cuBLAS for
// dense GEMMs of >= 256 tokens: the weight dequantized to f16; int8 mmq for MoE where the type allows), and the
// decode attention workspace. Excludes the KV cache and ST_PLAN_RESERVE_DEFAULT.
uint64_t st_plan_scratch_bytes(const st_place_desc *d, int64_t chunk);
// Its largest GEMM / MoE part (gpu.c's `gemm_scratch`, used by prefill steps only), 256-aligned.
uint64_t st_plan_gemm_scratch_bytes(const st_place_desc *d, int64_t chunk);

// Per-layer, per-expert routing counts (place/profile.h reads and writes them).
typedef struct st_profile {
    uint32_t n_layer, n_expert;
    uint64_t fingerprint;   // st_model_fingerprint of the model it was recorded on
    uint64_t n_tokens;      // tokens evaluated while recording
    uint64_t *counts;       // [n_layer][n_expert] times each expert was selected
} st_profile;

typedef struct st_plan_params {
    double gpu_mem_gib;       // per-GPU budget in GiB (--gpu-mem); <= 0: unlimited
    uint64_t gpu_budget;      // the same in bytes; used when gpu_mem_gib <= 0 and this is non-zero
    int64_t n_ctx;            // KV positions; <= 0: the trained context
    int kv_elem_bytes;        // 2 (F16) or 4 (F32)
    int64_t prefill_chunk;    // <= 0: ST_PLAN_PREFILL_CHUNK
    int64_t staging_slots;    // expert slots reserved for streaming prefill; < 0: default (n_expert: one layer)
    int64_t reserve_bytes;    // < 0: ST_PLAN_RESERVE_DEFAULT
    int prefetch_per_layer;   // lookahead prefetch predictions per layer (0: none); st_plan_params_default sets the
                              // engine's (STRATA_HY_PREFETCH, else ST_PLAN_PREFETCH_DEFAULT)
    bool prefetch_own;        // the prefetch's sets in slots of their own (default; STRATA_HY_PF_OWN=0: in staging)
    double prefetch_max_share; // no prefetch where the cache would hold at least this share of the experts without
                               // it; <= 0: no limit (st_plan_params_default: ST_PLAN_PREFETCH_MAX_SHARE, no limit
                               // when STRATA_HY_PREFETCH names P)
    bool scratch_in_prefetch;  // the prefill GEMM / MoE scratch (idle in decode) lent from the prefetch's own slots,
                               // the cache taking its bytes (default; STRATA_HY_PF_SCRATCH=0: beside them)
    const st_profile *profile;  // optional: initial cache contents by count (must match the model's shape)
    int profile_floor;          // with a profile: every layer first gets its hottest profile_floor experts (at most
                                // the even share), then hottest-first (st_plan_counts_floor; the engine's cache
                                // layout too); bounds the prefill staging, which must hold the worst layer's
                                // non-resident experts. 0: none (STRATA_HY_PROFILE_FLOOR; opt-in)
    uint32_t first_layers;      // the cache's first slots go to every expert of the first first_layers layers, the
                                // rest spread (or ranked) over the others: ST_PLAN_FIRST_LAYERS (STRATA_HY_FIRST_LAYER)
} st_plan_params;

// The first MoE layer is the one the lookahead prefetch never predicts (nothing runs before it in a step), so each
// of its non-resident choices is a miss, and the next layers' predictions (from layer l's MoE input) are the weakest
// (the hidden state moves most early): a slot there saves several times the misses of a later layer's, while a
// whole layer costs the others about (n_expert - share) / n_layer slots each. bench/cache_sim.py over the 30B-A3B
// file's 512-token trace (docs/HYBRID.md, 2026-12-04), misses per token with the first 0 / 1 / 3 / 6 layers whole:
// 100 resident per layer (16 GiB) 7.80 / 5.95 / 3.67 / 2.44, 80 (12 GiB) 15.06 / 11.99 / 7.59 / 6.05, 64 (8 GiB)
// 21.94 / 18.43 / 12.78 / 9.43; with STRATA_HY_PF_PREV the gain flattens after 3 (16 GiB 4.14 / 2.35 / 1.64 / 1.58).
// Measured on the H200 (bench/ab.sh -p 512 -n 128, fresh tokens, 2026-12-04b), even / 3 whole, tg128 tok/s: 16 GiB
// 385.5 / 412.5 (misses 8.2 -> 4.1 per token; 1 whole 405.8), 12 GiB 303.8 / 344.0 (5 whole 341.5), 8 GiB 254.8 /
// 275.7 (5 whole 296.4). STRATA_HY_FIRST_LAYER=N sets it (0: the even spread); st_plan_first_layers_fit caps it.
#define ST_PLAN_FIRST_LAYERS 3

void st_plan_params_default(st_plan_params *p);

// Predictions per layer whose own prefetch sets (n_layer x that many slots) fit in `slots` beside `keep` (the prefill
// staging, double-buffered): p itself, else as many as fit down to ST_PLAN_PREFETCH_MIN_OWN; where that is below p
// and below ST_PLAN_PREFETCH_SINGLE_BELOW, up to that many beside `keep_single` instead (one staging buffer: the
// cache layout falls back to it, and prefill copies and computes in turn) if that fits more, and *single (may be
// NULL) says so; 0: none (the sets go into the staging).
// The planner's rule (keep: one layer's worth of slots beside its minimum, which holds the other; keep_single 0) and
// the engine's for its own slot count (keep: both buffers; keep_single: one). A set of its own per layer is worth
// more than a double-buffered prefill where the cache is small (ST_PLAN_PREFETCH_MIN_OWN's measurements).
uint32_t st_plan_prefetch_own_fit(uint64_t slots, uint64_t keep, uint64_t keep_single, uint32_t n_layer, uint32_t p,
                                  bool *single);

// One expert-cache slot's initial occupant.
typedef struct st_plan_slot {
    uint32_t layer, expert;
} st_plan_slot;

// Every (layer, expert) of an [n_layer][n_expert] count table: the pairs of the layers below first_layers first,
// then hottest first; ties: lower layer, then lower id (so the ranking is deterministic). Returns a malloc'd array
// of n_layer * n_expert entries, NULL when out of memory.
st_plan_slot *st_plan_rank_by_count(const uint64_t *counts, uint32_t n_layer, uint32_t n_expert,
                                    uint32_t first_layers);
// How many of the first `want` layers n slots make whole (ST_PLAN_FIRST_LAYERS): the most that leave the other
// layers at least half the even share each (a small budget would otherwise give every slot to layer 0 and leave the
// others none: a 5% share on the 8-layer test model). 0: the even spread.
uint32_t st_plan_first_layers_fit(uint64_t n, uint32_t n_layer, uint32_t n_expert, uint32_t want);
// Resident experts per layer [n_layer] for n slots without a profile: each of the first first_layers layers takes
// all n_expert (while slots last), the rest spread evenly over the other layers (the lower ones take the remainder).
void st_plan_spread_even(uint64_t n, uint32_t n_layer, uint32_t n_expert, uint32_t first_layers, uint32_t *resident);
// A copy of counts in which each layer's `floor` hottest (ties: lower id) rank above every other pair (raised by the
// largest count + 1), so that the first n slots of st_plan_rank_by_count hold them all when n >= n_layer * floor:
// the routing profile's floor (STRATA_HY_PROFILE_FLOOR). malloc'd, NULL when out of memory.
uint64_t *st_plan_counts_floor(const uint64_t *counts, uint32_t n_layer, uint32_t n_expert, uint32_t floor);

typedef struct st_plan {
    bool moe;                  // the model has routed experts
    bool unlimited;            // no budget given
    bool all_in_vram;          // every expert fits next to the dense weights: no cache, no arena needed
    uint64_t budget;           // bytes (0: unlimited)
    int64_t n_ctx;
    int kv_elem_bytes;
    // VRAM
    uint64_t dense_bytes;      // every non-expert tensor as uploaded (256-aligned, norms as F32)
    uint64_t kv_bytes;         // K and V of n_ctx positions, all layers
    uint64_t scratch_bytes;    // st_plan_scratch_bytes
    uint64_t gemm_scratch_bytes;  // its prefill-only GEMM / MoE part (st_plan_gemm_scratch_bytes)
    int64_t prefill_chunk;     // the chunk scratch_bytes is for (tokens)
    bool prefill_chunk_lowered;  // the default chunk was halved to fit the budget (ST_PLAN_PREFILL_CHUNK_MIN)
    uint64_t reserve_bytes;    // CUDA context and library workspaces
    uint64_t staging_bytes;    // n_staging slots for streaming prefill (hybrid mode only)
    uint64_t host_map_bytes;   // GPU page tables of the registered host arena (hybrid; ST_PLAN_HOST_MAP_PER_GIB)
    uint64_t min_bytes;        // dense + kv + scratch + reserve (+ staging + host map, hybrid): the least budget
                               // that runs
    uint64_t experts_vram_bytes;  // all-in-VRAM mode: the expert stacks as uploaded
    uint64_t slot_bytes;       // one expert slot: the largest st_xlayer.slot_bytes over layers
    uint64_t n_staging;
    uint32_t prefetch_per_layer;  // lookahead prefetch predictions per layer in use (hybrid; 0: off): the engine
                               // runs it where every router after the first layer is F32/F16/BF16
    uint64_t n_prefetch;       // the prefetch's own slots, n_layer x prefetch_per_layer (0: sets in the staging)
    bool prefetch_single_staging;  // its own sets fit only beside a single prefill staging buffer
                                   // (st_plan_prefetch_own_fit)
    bool prefetch_share_off;   // asked for, but off: the cache alone holds >= prefetch_max_share of the experts
    uint64_t prefetch_bytes;   // n_prefetch * slot_bytes
    uint64_t scratch_lent_bytes;  // gemm_scratch_bytes where the prefetch's own slots hold it (scratch_in_prefetch):
                                  // counted in scratch_bytes and in the own slots, so the cache has that much more
    uint64_t n_slots;          // expert-cache slots (hybrid), or every expert (all in VRAM)
    uint64_t cache_bytes;      // n_slots * slot_bytes (hybrid)
    uint64_t used_bytes;       // everything above that is allocated
    // experts
    uint64_t n_experts_total;  // n_layer * n_expert
    uint64_t expert_bytes_min, expert_bytes_max;  // gate+up+down of one expert, smallest / largest layer
    uint64_t experts_bytes;    // every expert's parts (no padding)
    // host
    uint64_t arena_bytes;      // host expert arena in the native layout (pack records, 4096-aligned); 0 if all in VRAM
    bool from_profile;         // initial contents came from a profile
    uint32_t profile_floor;    // the floor applied with the profile (params' profile_floor capped by the even share)
    uint32_t first_layers;     // layers whose experts took the first slots (params' first_layers)
    st_plan_slot *initial;     // [n_slots] initial cache contents (hybrid), hottest first with a profile
    uint32_t *resident;        // [n_layer] experts with a slot per layer (hybrid)
} st_plan;

// Computes the plan. -1 (st_errmsg) when the budget cannot hold dense weights + KV cache + scratch: the message
// gives the minimum in GiB and each part; or when the profile does not fit the model.
int st_plan_compute(const st_place_desc *d, const st_plan_params *p, st_plan *out);
void st_plan_free(st_plan *p);

#ifdef __cplusplus
}
#endif

#endif
