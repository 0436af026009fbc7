// The VRAM expert cache's policy as pure functions (no CUDA; unit-tested on the CPU by tests/place): how the slots
// that fit in the budget split into cache slots and prefill staging, which experts the cache starts with, and which
// experts to swap between tokens (decayed routing frequency). engine/gpu_hybrid.c does the copying.
//
// Why per-layer swaps: prefill stages every expert of a layer that is not resident (a 512-token chunk routes to
// nearly all of them), so the staging area must hold max over layers of (n_expert - resident[l]). Swapping only
// within a layer keeps every layer's resident count, and so that bound, fixed after load.
#ifndef STRATA_PLACE_CACHE_POLICY_H
#define STRATA_PLACE_CACHE_POLICY_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_hycache_layout {
    uint32_t n_layer, n_expert;
    uint64_t n_total;        // slots that fit (input)
    uint64_t n_cache;        // expert-cache slots
    uint32_t n_stage_bufs;   // 2: double-buffered prefill staging (layer l+1 copies while l computes); 1: serial
    uint32_t stage_per_buf;  // slots per staging buffer = n_expert - min over layers of resident[l]
    uint32_t *resident;      // [n_layer] cache slots per layer
    uint32_t *initial;       // [n_cache] slot i starts with expert (initial[i] / n_expert, initial[i] % n_expert)
} st_hycache_layout;

// Splits n_total slots into cache + staging, preferring double buffering, with the most cache slots that leave room
// for the staging of the worst layer. The first first_layers layers take all their experts first (the plan's
// first_layers: the lookahead prefetch never predicts the first layer). counts (optional, [n_layer][n_expert], a
// routing profile): then the hottest (layer, expert) pairs (ties: lower layer, then lower id, as st_plan_compute);
// without counts the other slots spread evenly over the other layers (the lower ones take the remainder), lowest
// ids first. -1 (st_errmsg) when even one staging buffer of n_expert slots does not fit: the message gives the
// minimum.
int st_hycache_layout_compute(uint32_t n_layer, uint32_t n_expert, uint64_t n_total, const uint64_t *counts,
                              uint32_t first_layers, st_hycache_layout *out);
void st_hycache_layout_free(st_hycache_layout *l);

// Bytes of a layout whose cache slot i is sized for its expert's layer (slot_bytes [n_layer]; slots never change
// layer: swaps stay within one) and whose staging slots take max_bytes each (they serve every layer).
uint64_t st_hycache_layout_bytes(const st_hycache_layout *l, const uint64_t *slot_bytes, uint64_t max_bytes);

// The layout of st_hycache_layout_compute for a large n_total whose st_hycache_layout_bytes fits `avail` bytes
// (binary search from avail / max_bytes, which fits, up to avail / the smallest slot_bytes): with two record sizes
// per model (Q4_K_M's Q4_K and Q6_K down layers) the cache holds ~7% more experts than at one slot size.
// -1 (st_errmsg) as st_hycache_layout_compute when not even avail / max_bytes slots give a layout.
int st_hycache_layout_fit(uint32_t n_layer, uint32_t n_expert, uint64_t avail, const uint64_t *slot_bytes,
                          uint64_t max_bytes, const uint64_t *counts, uint32_t first_layers, st_hycache_layout *out);

// freq[i] = freq[i] * factor + counts[i] for i < n (factor = decay per token ^ tokens since the last update).
void st_hycache_decay(float *freq, const uint32_t *counts, uint64_t n, double factor);

typedef struct st_hycache_swap {
    uint32_t layer;
    uint32_t in;     // expert that gets the slot
    uint32_t out;    // expert that leaves it
    int32_t slot;    // the slot (slot_of[layer][out] before the swap)
    float gain;      // freq[in] - freq[out]
} st_hycache_swap;

// Up to max_swaps swaps, best gain first: within each layer, the hottest non-resident experts against the coldest
// resident ones, a pair qualifying when freq[in] > ratio * freq[out] + min_freq (hysteresis, so two experts of
// similar use do not trade places every period). slot_of: [n_layer][n_expert] slot or -1; entries < -1 mark experts
// in flight (neither swapped in nor out). Ties: lower layer, then lower ids. Returns the count.
int st_hycache_pick_swaps(uint32_t n_layer, uint32_t n_expert, const float *freq, const int32_t *slot_of,
                          int max_swaps, double ratio, double min_freq, st_hycache_swap *out);

// One layer's own prefetch set refilled as cache (gpu_hybrid.c hy_pf_fill: at load, and after a long prompt with
// STRATA_HY_PF_GATE=2): the P likeliest experts by freq [n_expert] among those not resident (slot_of [n_expert] < 0),
// ties to the lower id. owner [P] holds the set's experts (-1: empty) and gets the new ones: a picked expert already
// in the set keeps its slot, the other picks fill the remaining slots in expert order (lowest slot first, so that
// neighbouring records merge into one copy), and the rest become -1. fresh[j] = 1 where slot j gets an expert it
// does not hold (to be copied). Returns the number of fresh slots. P <= 32.
int st_hy_pf_set_refill(uint32_t n_expert, int P, const float *freq, const int32_t *slot_of, int32_t *owner,
                        uint8_t *fresh);

// The lookahead prefetch's gate (gpu_hybrid.c, STRATA_HY_PF_GATE >= 1): whether the next decode steps run the
// prefetch's side branch, from one read-back period of n_dec decode tokens in which served selections were served from
// its copies and misses were not in VRAM. After a long prompt the cache holds the prompt's experts (the refill) and the
// branch serves little while its launches and fork / join cost the main chain; without that it serves most misses. Off
// when it served fewer than ST_HY_PF_GATE_OFF per token; on again when, off for at least ST_HY_PF_GATE_DWELL periods,
// the misses exceed ST_HY_PF_GATE_ON per token. Periods of fewer than min_dec decode tokens (a prefill's) change
// nothing. *live and *off_periods are the state (live 1, off_periods 0 at the start).
#define ST_HY_PF_GATE_OFF 2.0
#define ST_HY_PF_GATE_ON 4.0
#define ST_HY_PF_GATE_DWELL 2
typedef struct st_hy_pf_gate {
    int live;         // the branch runs
    int off_periods;  // periods since it went off
} st_hy_pf_gate;
// Returns 1 when live changed.
int st_hy_pf_gate_step(st_hy_pf_gate *g, int64_t n_dec, int64_t min_dec, uint64_t served, uint64_t misses);

// The CPU-miss split's gate (gpu_hybrid.c, with --pcie-frac auto; STRATA_HY_SPLIT_GATE): whether the next decode
// steps classify each layer's misses for the CPU workers (the split path) or read every miss over PCIe in the plain
// path. The split costs ~2 us per layer where nothing misses (H200, 30B-A3B at 18.9 GiB: 479.5 against 502.7 tok/s
// with the plain path), a miss in the plain path ~140 us against ~65 us of CPU wait (16 GiB, 3.2 misses per token:
// the plain path lost 6%): break-even near 1.2 misses per token. Off after ST_HY_SPLIT_GATE_QUIET periods in a row
// with fewer than `off` misses per token (after a long prompt the refilled cache holds nearly every routed expert); on
// again at the first period with at least `on`. Periods of fewer than min_dec decode tokens change nothing. State:
// live 1, quiet 0 at the start.
#define ST_HY_SPLIT_GATE_OFF 0.25
#define ST_HY_SPLIT_GATE_ON 0.75
#define ST_HY_SPLIT_GATE_QUIET 2
typedef struct st_hy_split_gate {
    int live;   // the split path runs
    int quiet;  // periods in a row under `off` while live
} st_hy_split_gate;
// Returns 1 when live changed.
int st_hy_split_gate_step(st_hy_split_gate *g, int64_t n_dec, int64_t min_dec, uint64_t misses, double off, double on);

#ifdef __cplusplus
}
#endif

#endif
