// Hybrid placement, host side: the VRAM planner (budgets, edge cases, profile ordering), the native pack file
// (round trip, errors, header mutations), the host expert arena (anonymous == mmap'd pack, byte for byte; RssAnon
// both ways), routing profiles (write/read, validation) and the CPU session's routing counter.
//   usage: test_place [TMPDIR]   (STRATA_SEED=N fixes the random seed; printed on failure)
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/session.h"
#include "model/make_model.h"
#include "model/mix.h"
#include "place/arena.h"
#include "place/pack.h"
#include "place/plan.h"
#include "place/profile.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/fileio.h"
#include "util/log.h"
#include "util/pool.h"
#include "util/rng.h"

static uint64_t g_seed;
#include "../check.h"
#define CHECK_ERR(cond, needle, what)                                                                         \
    do {                                                                                                      \
        bool c_ = (cond);                                                                                     \
        CHECK(c_ && strstr(st_errmsg(), needle), "%s: expected an error containing '%s', got %s: '%s'", what, \
              needle, c_ ? "error" : "success", st_errmsg());                                                 \
    } while (0)

static char g_dir[512];

static void path_in(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", g_dir, name); }

// A qwen3moe of a few tens of MiB (4 layers, d 512, 16 experts of FF 512) in Q4_K_M: down stacks are Q6_K on
// layers 2-3 and Q4_K on 0-1, so per-layer layouts differ.
static st_hparams moe_hp(void) {
    st_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.arch = ST_ARCH_QWEN3MOE;
    hp.n_layer = 4;
    hp.n_ctx_train = 1024;
    hp.n_embd = 512;
    hp.n_ff = 1024;
    hp.n_head = 4;
    hp.n_head_kv = 1;
    hp.head_dim_k = hp.head_dim_v = 128;
    hp.n_vocab = 512;
    hp.rms_eps = 1e-6f;
    hp.rope_freq_base = 1e6f;
    hp.rope_freq_scale = 1.0f;
    hp.n_expert = 16;
    hp.n_expert_used = 4;
    hp.n_ff_exp = 512;
    return hp;
}

static int make(const char *path, const st_hparams *hp, int ftype, uint64_t seed) {
    st_make_opts o;
    memset(&o, 0, sizeof o);
    o.hp = *hp;
    o.ftype = ftype;
    o.seed = seed;
    o.n_threads = 2;
    o.out_path = path;
    o.quiet = true;
    o.router_skew = 0.5f;
    if (st_make_model(&o)) {
        fprintf(stderr, "make-model %s: %s\n", path, st_errmsg());
        return -1;
    }
    return 0;
}

// ---- planner ------------------------------------------------------------------------------------------------------

static void test_planner(const st_model *m) {
    st_place_desc d, dp;
    CHECK(st_place_desc_from_model(m, &d) == 0, "desc from model: %s", st_errmsg());
    // The same shape and mix planned without the file gives the same tensors, types and bytes.
    CHECK(st_place_desc_from_preset(&m->hp, ST_FTYPE_Q4_K_M, "test", &dp) == 0, "desc from preset: %s", st_errmsg());
    CHECK(d.n_tensors == dp.n_tensors, "tensor counts %d vs %d", d.n_tensors, dp.n_tensors);
    for (int i = 0; i < d.n_tensors && i < dp.n_tensors; i++)
        CHECK(d.t[i].type == dp.t[i].type && d.t[i].bytes == dp.t[i].bytes, "tensor %s: file %s %" PRIu64
              " bytes, preset %s %" PRIu64, d.t[i].spec.name, st_type_name(d.t[i].type), d.t[i].bytes,
              st_type_name(dp.t[i].type), dp.t[i].bytes);
    CHECK(d.xl[0].type[2] != d.xl[3].type[2], "Q4_K_M down stacks should differ between layers 0 and 3");
    st_place_desc_free(&dp);

    st_plan_params pp;
    st_plan_params_default(&pp);
    CHECK(getenv("STRATA_HY_PREFETCH") || (pp.prefetch_per_layer == ST_PLAN_PREFETCH_DEFAULT && pp.prefetch_own),
          "default prefetch %d per layer (own %d)", pp.prefetch_per_layer, pp.prefetch_own);
    pp.prefetch_per_layer = 0;  // the slot arithmetic below is the cache's alone (the prefetch's: further down)
    pp.n_ctx = 1024;
    st_plan p;
    // Unlimited: everything in VRAM.
    CHECK(st_plan_compute(&d, &pp, &p) == 0 && p.all_in_vram && p.arena_bytes == 0 && p.moe, "unlimited plan");
    uint64_t base = p.dense_bytes + p.kv_bytes + p.scratch_bytes + p.reserve_bytes;
    uint64_t all = base + p.experts_vram_bytes;
    CHECK(p.used_bytes == all, "all-in-VRAM used %" PRIu64 " != %" PRIu64, p.used_bytes, all);
    // K/V plus the RoPE table (n_ctx * n_rot floats; a multiple of ST_PLAN_ALIGN here)
    CHECK(p.kv_bytes == st_hparams_kv_bytes(&m->hp, 1024, 2) + 4ull * 1024 * m->hp.n_rot, "kv bytes");
    CHECK(p.prefill_chunk == ST_PLAN_PREFILL_CHUNK && p.scratch_bytes == st_plan_scratch_bytes(&d, ST_PLAN_PREFILL_CHUNK),
          "default chunk %lld", (long long)p.prefill_chunk);
    CHECK(st_plan_scratch_bytes(&d, 512) > 0 && st_plan_scratch_bytes(&d, 512) < p.scratch_bytes &&
              p.scratch_bytes < st_plan_scratch_bytes(&d, 2 * ST_PLAN_PREFILL_CHUNK), "scratch grows with the chunk");
    // Its prefill-only GEMM part (the hybrid may lend it from prefetch slots): a part of it; at >= 256 rows the
    // quantized LM head's f16 copy (cuBLAS) at least; smaller for 128-token steps
    const uint64_t head_f16 = 2ull * m->hp.n_vocab * m->hp.n_embd;
    CHECK(p.gemm_scratch_bytes == st_plan_gemm_scratch_bytes(&d, ST_PLAN_PREFILL_CHUNK) &&
              p.gemm_scratch_bytes > 0 && p.gemm_scratch_bytes < p.scratch_bytes && p.gemm_scratch_bytes % 256 == 0 &&
              p.gemm_scratch_bytes >= head_f16 && st_plan_gemm_scratch_bytes(&d, 128) < p.gemm_scratch_bytes,
          "GEMM scratch %" PRIu64 " of %" PRIu64 " (LM head f16 %" PRIu64 ", 128-token steps %" PRIu64 ")",
          p.gemm_scratch_bytes, p.scratch_bytes, head_f16, st_plan_gemm_scratch_bytes(&d, 128));
    st_plan_free(&p);
    // Exactly all: still all in VRAM; one byte less: hybrid with fewer slots than experts.
    pp.gpu_budget = all;
    CHECK(st_plan_compute(&d, &pp, &p) == 0 && p.all_in_vram, "budget == all should be all-in-VRAM");
    st_plan_free(&p);
    pp.gpu_budget = all - 1;
    CHECK(st_plan_compute(&d, &pp, &p) == 0 && !p.all_in_vram && p.n_slots < p.n_experts_total && p.arena_bytes > 0,
          "budget all-1 should be hybrid");
    uint64_t min = p.min_bytes, slot = p.slot_bytes;
    uint64_t max_slot = 0, arena = 0;
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        if (d.xl[l].slot_bytes > max_slot) max_slot = d.xl[l].slot_bytes;
        arena += (d.xl[l].slot_bytes + 4095) / 4096 * 4096 * m->hp.n_expert;
    }
    CHECK(slot == max_slot && p.arena_bytes == arena, "slot %" PRIu64 " / arena %" PRIu64, slot, p.arena_bytes);
    // The GPU's page tables of the registered arena: ST_PLAN_HOST_MAP_PER_GIB per GiB, at least that (aligned up).
    const double map_want = (double)arena / (double)(1ull << 30) * (double)ST_PLAN_HOST_MAP_PER_GIB;
    CHECK(p.host_map_bytes >= map_want - ST_PLAN_HOST_MAP_PER_GIB / 1024.0 &&
              p.host_map_bytes <= map_want + ST_PLAN_ALIGN, "host map %" PRIu64 " for an arena of %" PRIu64,
          p.host_map_bytes, arena);
    CHECK(min == base + p.staging_bytes + p.host_map_bytes && p.n_staging == m->hp.n_expert,
          "min = base + staging + host map");
    st_plan_free(&p);
    // Exact fit: min + k slots gives k; one byte less gives k - 1; the minimum gives 0 slots.
    for (uint64_t k = 0; k < 20; k += 7) {
        pp.gpu_budget = min + k * slot;
        CHECK(st_plan_compute(&d, &pp, &p) == 0 && p.n_slots == k && p.used_bytes == min + k * slot,
              "min + %" PRIu64 " slots -> %" PRIu64 " slots", k, p.n_slots);
        st_plan_free(&p);
        if (k) {
            pp.gpu_budget = min + k * slot - 1;
            CHECK(st_plan_compute(&d, &pp, &p) == 0 && p.n_slots == k - 1, "min + %" PRIu64 " slots - 1 -> %" PRIu64,
                  k, p.n_slots);
            st_plan_free(&p);
        }
    }
    // The lookahead prefetch's own slots: n_layer x P out of the cache's share when that leaves a layer's worth of
    // cache (n_slots >= own + n_expert), P lowered to fit down to ST_PLAN_PREFETCH_MIN_OWN, or beside a single staging
    // buffer where that fits more (below ST_PLAN_PREFETCH_SINGLE_BELOW), else none (its sets then go into the
    // staging); off with P = 0.
    {
        const uint64_t own = (uint64_t)m->hp.n_layer, E = m->hp.n_expert;
        st_plan_params q = pp;
        q.prefetch_per_layer = 1;
        q.prefetch_own = true;
        q.prefetch_max_share = 0;
        q.gpu_budget = min + (own + E) * slot;
        CHECK(st_plan_compute(&d, &q, &p) == 0 && !p.all_in_vram && p.prefetch_per_layer == 1 &&
                  p.n_prefetch == own && p.prefetch_bytes == own * slot && p.n_slots == E &&
                  p.used_bytes == min + (own + E) * slot,
              "prefetch own slots: %u per layer, %" PRIu64 " own, %" PRIu64 " cache slots", p.prefetch_per_layer,
              p.n_prefetch, p.n_slots);
        CHECK(!p.prefetch_single_staging, "own sets beside both staging buffers");
        st_plan_free(&p);
        // One slot short of that: beside a single staging buffer (fewer than ST_PLAN_PREFETCH_SINGLE_BELOW fit).
        q.gpu_budget = min + (own + E) * slot - 1;
        CHECK(st_plan_compute(&d, &q, &p) == 0 && p.prefetch_per_layer == 1 && p.n_prefetch == own &&
                  p.prefetch_single_staging && p.n_slots == E - 1,
              "prefetch beside one staging buffer: %" PRIu64 " own, %" PRIu64 " cache slots", p.n_prefetch, p.n_slots);
        st_plan_free(&p);
        // Fewer slots than one set per layer: none of its own.
        q.gpu_budget = min + (own - 1) * slot;
        CHECK(st_plan_compute(&d, &q, &p) == 0 && p.prefetch_per_layer == 1 && p.n_prefetch == 0 &&
                  !p.prefetch_single_staging && p.n_slots == own - 1,
              "prefetch without room: %" PRIu64 " own, %" PRIu64 " cache slots", p.n_prefetch, p.n_slots);
        st_plan_free(&p);
        // P lowered until its own sets fit (down to ST_PLAN_PREFETCH_MIN_OWN), not all or nothing
        q.prefetch_per_layer = 8;
        q.gpu_budget = min + (5 * own + E) * slot + slot / 2;
        CHECK(st_plan_compute(&d, &q, &p) == 0 && !p.all_in_vram && p.prefetch_per_layer == 5 &&
                  p.n_prefetch == 5 * own && p.n_slots == E,
              "prefetch lowered to fit: %u per layer, %" PRIu64 " own, %" PRIu64 " cache slots",
              p.prefetch_per_layer, p.n_prefetch, p.n_slots);
        st_plan_free(&p);
        // Below the minimum beside both staging buffers: as many as fit beside one, up to
        // ST_PLAN_PREFETCH_SINGLE_BELOW.
        const uint64_t s1 = (ST_PLAN_PREFETCH_MIN_OWN - 1) * own + E;
        const uint64_t p1 = s1 / own < ST_PLAN_PREFETCH_SINGLE_BELOW ? s1 / own : ST_PLAN_PREFETCH_SINGLE_BELOW;
        q.gpu_budget = min + s1 * slot;
        CHECK(st_plan_compute(&d, &q, &p) == 0 && !p.all_in_vram && p.prefetch_single_staging &&
                  p.prefetch_per_layer == p1 && p.n_prefetch == p1 * own && p.n_slots == s1 - p1 * own,
              "prefetch below its minimum: %u per layer (want %" PRIu64 "), %" PRIu64 " own", p.prefetch_per_layer, p1,
              p.n_prefetch);
        st_plan_free(&p);
        // Below the minimum beside one buffer too: the sets go into the staging.
        q.gpu_budget = min + (ST_PLAN_PREFETCH_MIN_OWN * own - 1) * slot;
        CHECK(st_plan_compute(&d, &q, &p) == 0 && !p.all_in_vram && p.prefetch_per_layer == 8 && p.n_prefetch == 0 &&
                  p.n_slots == ST_PLAN_PREFETCH_MIN_OWN * own - 1,
              "prefetch below its minimum beside one buffer: %u per layer, %" PRIu64 " own (sets in the staging)",
              p.prefetch_per_layer, p.n_prefetch);
        st_plan_free(&p);
        q.prefetch_per_layer = 1;
        q.gpu_budget = min + (own + E) * slot;
        q.prefetch_own = false;
        CHECK(st_plan_compute(&d, &q, &p) == 0 && p.prefetch_per_layer == 1 && p.n_prefetch == 0 &&
                  p.n_slots == own + E,
              "prefetch in the staging: %" PRIu64 " own", p.n_prefetch);
        st_plan_free(&p);
        q.prefetch_own = true;
        q.prefetch_per_layer = 0;
        CHECK(st_plan_compute(&d, &q, &p) == 0 && p.prefetch_per_layer == 0 && p.n_prefetch == 0 &&
                  p.n_slots == own + E,
              "prefetch off: %u per layer", p.prefetch_per_layer);
        st_plan_free(&p);
        // Off where the cache alone would hold prefetch_max_share of the experts (the share counts its slots in).
        const uint64_t T = (uint64_t)m->hp.n_layer * E, k = (uint64_t)ceil(0.5 * (double)T);
        CHECK(k - 1 >= own + E, "the test model is too small for the share check (%" PRIu64 " experts)", T);
        q.prefetch_per_layer = 1;
        q.prefetch_max_share = 0.5;
        q.gpu_budget = min + k * slot;
        CHECK(st_plan_compute(&d, &q, &p) == 0 && p.prefetch_per_layer == 0 && p.n_prefetch == 0 && p.n_slots == k,
              "prefetch at a %.1f%% cache share: %u per layer, %" PRIu64 " own", 100.0 * k / T, p.prefetch_per_layer,
              p.n_prefetch);
        st_plan_free(&p);
        q.gpu_budget = min + (k - 1) * slot;
        CHECK(st_plan_compute(&d, &q, &p) == 0 && p.prefetch_per_layer == 1 && p.n_prefetch == own &&
                  p.n_slots == k - 1 - own,
              "prefetch below the share: %u per layer, %" PRIu64 " own", p.prefetch_per_layer, p.n_prefetch);
        st_plan_free(&p);
        st_plan_params dflt;
        st_plan_params_default(&dflt);
        CHECK(getenv("STRATA_HY_PREFETCH") ? dflt.prefetch_max_share == 0
                                           : dflt.prefetch_max_share == ST_PLAN_PREFETCH_MAX_SHARE,
              "default prefetch share limit %.2f", dflt.prefetch_max_share);
    }
    // Below the minimum with the default chunk: the chunk is halved until the minimum fits (down to
    // ST_PLAN_PREFILL_CHUNK_MIN), the scratch and the minimum follow it, and the plan keeps to the budget.
    pp.gpu_budget = min - 1;
    CHECK(st_plan_compute(&d, &pp, &p) == 0 && p.prefill_chunk_lowered &&
              p.prefill_chunk == ST_PLAN_PREFILL_CHUNK / 2 &&
              p.scratch_bytes == st_plan_scratch_bytes(&d, ST_PLAN_PREFILL_CHUNK / 2) && p.min_bytes < min &&
              p.used_bytes <= min - 1,
          "budget min-1, default chunk: %s; chunk %lld (lowered %d), used %" PRIu64, st_errmsg(),
          (long long)p.prefill_chunk, p.prefill_chunk_lowered, p.used_bytes);
    st_plan_free(&p);
    const uint64_t min_small = min - st_plan_scratch_bytes(&d, ST_PLAN_PREFILL_CHUNK) +
                               st_plan_scratch_bytes(&d, ST_PLAN_PREFILL_CHUNK_MIN);
    pp.gpu_budget = min_small;
    CHECK(st_plan_compute(&d, &pp, &p) == 0 && p.prefill_chunk == ST_PLAN_PREFILL_CHUNK_MIN && p.n_slots == 0,
          "the smallest chunk's minimum: %s; chunk %lld", st_errmsg(), (long long)p.prefill_chunk);
    st_plan_free(&p);
    pp.gpu_budget = min_small - 1;
    CHECK_ERR(st_plan_compute(&d, &pp, &p) != 0, "too small", "below the smallest chunk's minimum");
    // Too small with an explicit chunk (-ub: never lowered): a clear error with the minimum in GiB and each part.
    pp.prefill_chunk = ST_PLAN_PREFILL_CHUNK;
    pp.gpu_budget = min - 1;
    CHECK_ERR(st_plan_compute(&d, &pp, &p) != 0, "too small", "budget min-1");
    char want[64];
    snprintf(want, sizeof want, "at least %.2f GiB", (double)min / (1 << 30));
    CHECK(strstr(st_errmsg(), want) && strstr(st_errmsg(), "dense weights") && strstr(st_errmsg(), "KV cache") &&
              strstr(st_errmsg(), "scratch"),
          "error should give '%s' and the parts: %s", want, st_errmsg());
    pp.gpu_budget = 0;
    pp.gpu_mem_gib = 0.001;
    CHECK_ERR(st_plan_compute(&d, &pp, &p) != 0, "0.00 GiB is too small", "--gpu-mem 0.001");
    pp.gpu_mem_gib = 0;
    pp.prefill_chunk = 0;

    // Without a profile and no first layers whole (STRATA_HY_FIRST_LAYER=0): slots spread evenly over layers, first
    // layers take the remainder, lowest ids.
    CHECK(pp.first_layers == ST_PLAN_FIRST_LAYERS, "first_layers default %u", pp.first_layers);
    pp.first_layers = 0;
    pp.gpu_budget = min + 23 * slot;
    CHECK(st_plan_compute(&d, &pp, &p) == 0 && p.n_slots == 23 && !p.from_profile, "23 slots");
    for (uint32_t l = 0; l < m->hp.n_layer; l++) CHECK(p.resident[l] == (l < 3 ? 6u : 5u), "layer %u has %u", l, p.resident[l]);
    for (uint64_t i = 0, k = 0; i < m->hp.n_layer; i++)
        for (uint32_t e = 0; e < p.resident[i]; e++, k++)
            CHECK(p.initial[k].layer == i && p.initial[k].expert == e, "even slot %" PRIu64, k);
    st_plan_free(&p);
    // The first layer (which the lookahead prefetch never predicts) whole only while the other layers keep half the
    // even share: 23 slots would leave them 7 / 3 < 23 / 4 / 2 each, so the even spread; 40 slots leave them 8 >= 5
    // (and two whole layers would leave 4 < 5: a request for 3 gets 1).
    pp.first_layers = 1;
    CHECK(st_plan_compute(&d, &pp, &p) == 0 && p.n_slots == 23 && p.first_layers == 0 && p.resident[0] == 6,
          "23 slots, first layer asked: %u whole, layer 0 has %u", p.first_layers, p.resident[0]);
    st_plan_free(&p);
    pp.first_layers = 3;
    pp.gpu_budget = min + 40 * slot;
    CHECK(st_plan_compute(&d, &pp, &p) == 0 && p.n_slots == 40 && p.first_layers == 1, "40 slots, first layers: %u",
          p.first_layers);
    for (uint32_t l = 0; l < m->hp.n_layer; l++)
        CHECK(p.resident[l] == (l == 0 ? 16u : 8u), "first layer: layer %u has %u", l, p.resident[l]);
    for (uint64_t i = 0, k = 0; i < m->hp.n_layer; i++)
        for (uint32_t e = 0; e < p.resident[i]; e++, k++)
            CHECK(p.initial[k].layer == i && p.initial[k].expert == e, "first-layer slot %" PRIu64, k);
    st_plan_free(&p);
    st_rng fr;
    st_rng_init(&fr, g_seed, 3);
    for (int i = 0; i < 200; i++) {  // the rule itself on random shapes
        const uint32_t L = 1 + st_rng_below(&fr, 60), E = 1 + st_rng_below(&fr, 200), want = st_rng_below(&fr, 8);
        const uint64_t n = st_rng_below(&fr, L * E + 1);
        const uint32_t f = st_plan_first_layers_fit(n, L, E, want);
        CHECK(f <= want && f <= L && (uint64_t)f * E <= n, "fit(%" PRIu64 ", %u, %u, %u) = %u", n, L, E, want, f);
        if (f && f < L) CHECK((n - (uint64_t)f * E) * 2 * L >= n * (L - f), "fit %u leaves too few", f);
        if (f < want && f < L && (uint64_t)(f + 1) * E <= n && f + 1 < L)
            CHECK((n - (uint64_t)(f + 1) * E) * 2 * L < n * (L - f - 1), "fit %u: %u would fit", f, f + 1);
    }
    pp.gpu_budget = min + 23 * slot;
    pp.first_layers = 0;

    // With a profile: hottest first, ties to lower layer then lower id; counts drawn at random (with ties).
    st_profile prof;
    memset(&prof, 0, sizeof prof);
    prof.n_layer = m->hp.n_layer;
    prof.n_expert = m->hp.n_expert;
    prof.counts = calloc(64, sizeof *prof.counts);
    st_rng r;
    st_rng_init(&r, g_seed, 1);
    for (int i = 0; i < 64; i++) prof.counts[i] = st_rng_below(&r, 8);
    pp.profile = &prof;
    CHECK(st_plan_compute(&d, &pp, &p) == 0 && p.from_profile && p.n_slots == 23, "profile plan");
    uint32_t per_layer[4] = {0};
    for (uint64_t i = 0; i < p.n_slots; i++) {
        const st_plan_slot *s = &p.initial[i];
        per_layer[s->layer]++;
        uint64_t c = prof.counts[s->layer * 16 + s->expert];
        if (i) {
            const st_plan_slot *q = &p.initial[i - 1];
            uint64_t cq = prof.counts[q->layer * 16 + q->expert];
            CHECK(cq > c || (cq == c && (q->layer < s->layer || (q->layer == s->layer && q->expert < s->expert))),
                  "slot %" PRIu64 " out of order", i);
        }
    }
    // Every expert left out is no hotter than the coldest one kept.
    uint64_t coldest = prof.counts[p.initial[p.n_slots - 1].layer * 16 + p.initial[p.n_slots - 1].expert];
    int kept[64] = {0};
    for (uint64_t i = 0; i < p.n_slots; i++) kept[p.initial[i].layer * 16 + p.initial[i].expert]++;
    for (int i = 0; i < 64; i++) {
        CHECK(kept[i] <= 1, "expert %d placed twice", i);
        if (!kept[i]) CHECK(prof.counts[i] <= coldest, "expert %d (count %" PRIu64 ") left out", i, prof.counts[i]);
    }
    for (int l = 0; l < 4; l++) CHECK(per_layer[l] == p.resident[l], "resident[%d]", l);
    st_plan_free(&p);
    // A floor (STRATA_HY_PROFILE_FLOOR): with every count in layer 0, hottest-first gives the other layers only
    // ties; a floor of 4 gives each layer its 4 hottest, the other 7 slots go hottest-first.
    for (int i = 0; i < 64; i++) prof.counts[i] = i < 16 ? 100 + (uint64_t)st_rng_below(&r, 50) : st_rng_below(&r, 3);
    for (int fl = 0; fl <= 9; fl += 3) {
        pp.profile_floor = fl;
        CHECK(st_plan_compute(&d, &pp, &p) == 0 && p.n_slots == 23, "profile plan, floor %d", fl);
        const uint32_t want_floor = fl > 5 ? 5 : (uint32_t)fl;  // at most the even share, 23 / 4
        int in[64] = {0};
        uint32_t total = 0;
        for (uint64_t i = 0; i < p.n_slots; i++) in[p.initial[i].layer * 16 + p.initial[i].expert]++;
        for (uint32_t l = 0; l < 4; l++) {
            total += p.resident[l];
            CHECK(p.resident[l] >= want_floor, "floor %d: layer %u has %u", fl, l, p.resident[l]);
            // the layer's kept experts are its hottest: none left out is hotter than one kept
            for (int a = 0; a < 16; a++)
                for (int b = 0; b < 16; b++)
                    if (in[l * 16 + a] && !in[l * 16 + b])
                        CHECK(prof.counts[l * 16 + a] >= prof.counts[l * 16 + b], "floor %d: layer %u keeps %d, "
                              "leaves hotter %d", fl, l, a, b);
        }
        for (int i = 0; i < 64; i++) CHECK(in[i] <= 1, "floor %d: expert %d placed twice", fl, i);
        CHECK(total == 23, "floor %d: %u slots", fl, total);
        if (fl == 0) CHECK(p.resident[0] == 16, "no floor: layer 0 takes all 16 (%u)", p.resident[0]);
        else CHECK(p.resident[0] == 23 - 3 * want_floor, "floor %d: layer 0 takes the rest (%u)", fl, p.resident[0]);
        st_plan_free(&p);
    }
    // With the first layer whole (40 slots: the other layers keep 8 each, over half the even share): its 16 pairs
    // first (whatever their counts), then the floor (3: under the share of the 24 left) and hottest-first over layers
    // 1-3. Layer 0 cold this time, so that only the rule puts it first.
    for (int i = 0; i < 64; i++) prof.counts[i] = i < 16 ? st_rng_below(&r, 3) : 100 + (uint64_t)st_rng_below(&r, 50);
    pp.first_layers = 1;
    pp.gpu_budget = min + 40 * slot;
    for (int fl = 0; fl <= 3; fl += 3) {
        pp.profile_floor = fl;
        CHECK(st_plan_compute(&d, &pp, &p) == 0 && p.n_slots == 40, "profile plan, first layer, floor %d", fl);
        CHECK(p.resident[0] == 16 && p.profile_floor == (uint32_t)fl, "first layer, floor %d: layer 0 has %u, "
              "floor %u", fl, p.resident[0], p.profile_floor);
        for (uint64_t i = 0; i < 16; i++)
            CHECK(p.initial[i].layer == 0, "first layer: slot %" PRIu64 " not layer 0", i);
        for (uint32_t l = 1; l < 4; l++)
            CHECK(p.resident[l] >= (uint32_t)fl, "first layer, floor %d: layer %u has %u", fl, l, p.resident[l]);
        st_plan_free(&p);
    }
    pp.gpu_budget = min + 23 * slot;
    pp.first_layers = 0;
    // st_plan_counts_floor itself: each layer's `floor` hottest (ties: lower id) above every other pair, the rest as
    // they were.
    uint64_t *fc = st_plan_counts_floor(prof.counts, 4, 16, 2), top = 0;
    CHECK(fc != NULL, "counts_floor");
    for (int i = 0; i < 64; i++) top = prof.counts[i] > top ? prof.counts[i] : top;
    for (uint32_t l = 0; fc && l < 4; l++) {
        int raised = 0;
        for (uint32_t e = 0; e < 16; e++) {
            const uint64_t c = prof.counts[l * 16 + e], f = fc[l * 16 + e];
            if (f == c) continue;
            raised++;
            CHECK(f - c == top + 1, "counts_floor: layer %u expert %u raised by %" PRIu64, l, e, f - c);
            uint32_t hotter = 0;  // experts of the layer ranked before it: hotter, or as hot with a lower id
            for (uint32_t o = 0; o < 16; o++) {
                const uint64_t co = prof.counts[l * 16 + o];
                hotter += co > c || (co == c && o < e);
            }
            CHECK(hotter < 2, "counts_floor: layer %u raised expert %u, %u ranked before it", l, e, hotter);
        }
        CHECK(raised == 2, "counts_floor: layer %u raised %d", l, raised);
    }
    free(fc);
    pp.profile_floor = 0;
    prof.n_expert = 8;  // wrong shape
    CHECK_ERR(st_plan_compute(&d, &pp, &p) != 0, "routing profile has 4 layers x 8 experts", "profile shape");
    free(prof.counts);
    pp.profile = NULL;
    st_place_desc_free(&d);

    // A dense model: no experts; fits or a clear error.
    st_place_desc dd;
    const st_preset *tl = st_preset_find("tiny-llama");
    CHECK(tl && st_place_desc_from_preset(&tl->hp, ST_FTYPE_Q4_0, "tiny-llama", &dd) == 0, "dense desc");
    st_plan_params_default(&pp);
    CHECK(st_plan_compute(&dd, &pp, &p) == 0 && !p.moe && p.all_in_vram && p.n_slots == 0 && !p.initial, "dense ok");
    uint64_t dmin = p.used_bytes;
    st_plan_free(&p);
    pp.gpu_budget = dmin;
    CHECK(st_plan_compute(&dd, &pp, &p) == 0 && p.all_in_vram, "dense exact fit");
    st_plan_free(&p);
    pp.gpu_budget = dmin - 1;
    CHECK_ERR(st_plan_compute(&dd, &pp, &p) != 0, "dense model has no experts", "dense too small");
    st_place_desc_free(&dd);

    // The real shape of the benchmark (no file written): print its plans at 16 / 12 / 8 GiB.
    const st_preset *big = st_preset_find("qwen3-30b-a3b");
    st_place_desc db;
    CHECK(big && st_place_desc_from_preset(&big->hp, ST_FTYPE_Q4_K_M, "qwen3-30b-a3b", &db) == 0, "30B desc");
    for (int g = 16; g >= 8; g -= 4) {
        st_plan_params_default(&pp);
        pp.gpu_mem_gib = g;
        pp.n_ctx = 4096;
        CHECK(st_plan_compute(&db, &pp, &p) == 0 && !p.all_in_vram && p.n_slots > 0, "30B at %d GiB: %s", g,
              st_errmsg());
        printf("qwen3-30b-a3b Q4_K_M @ %2d GiB, ctx 4096: dense %.2f GiB, kv %.2f, scratch %.2f, reserve %.2f, "
               "staging %.2f, slots %" PRIu64 " x %.2f MiB (%.1f%%), arena %.2f GiB\n",
               g, p.dense_bytes / 1073741824.0, p.kv_bytes / 1073741824.0, p.scratch_bytes / 1073741824.0,
               p.reserve_bytes / 1073741824.0, p.staging_bytes / 1073741824.0, p.n_slots, p.slot_bytes / 1048576.0,
               100.0 * p.n_slots / p.n_experts_total, p.arena_bytes / 1073741824.0);
        // The prefill-only GEMM part there is the Q6_K LM head's f16 copy and 512 f16 input rows (cuBLAS), larger
        // than the 4096-token MoE scratch
        CHECK(p.gemm_scratch_bytes == 2ull * 151936 * 2048 + 2ull * 512 * 2048, "30B GEMM scratch %" PRIu64,
              p.gemm_scratch_bytes);
        // That scratch lent from the prefetch's own slots (the default) where they hold it: the cache gets its whole
        // slots, nothing is counted twice, the budget still holds.
        st_plan q;
        pp.scratch_in_prefetch = false;
        CHECK(st_plan_compute(&db, &pp, &q) == 0 && q.scratch_lent_bytes == 0, "30B at %d GiB, no lend", g);
        const uint64_t lent_slots = (p.gemm_scratch_bytes + p.slot_bytes - 1) / p.slot_bytes;
        const bool lends = p.n_prefetch >= lent_slots && p.n_prefetch == q.n_prefetch;
        CHECK(lends ? p.scratch_lent_bytes == p.gemm_scratch_bytes &&
                          p.n_slots == q.n_slots + p.gemm_scratch_bytes / p.slot_bytes
                    : p.scratch_lent_bytes == 0 && p.n_slots == q.n_slots,
              "30B at %d GiB: lent %" PRIu64 " bytes, %" PRIu64 " vs %" PRIu64 " cache slots, %" PRIu64 " own", g,
              p.scratch_lent_bytes, p.n_slots, q.n_slots, p.n_prefetch);
        CHECK(p.used_bytes <= p.budget && q.used_bytes <= q.budget &&
                  p.used_bytes + p.scratch_lent_bytes == q.used_bytes + (p.n_slots - q.n_slots) * p.slot_bytes,
              "30B at %d GiB: used %" PRIu64 " / %" PRIu64 " of %" PRIu64, g, p.used_bytes, q.used_bytes, p.budget);
        if (g == 16) CHECK(lends, "30B at 16 GiB: the scratch is not lent (%" PRIu64 " own slots)", p.n_prefetch);
        st_plan_free(&q);
        st_plan_free(&p);
    }
    st_place_desc_free(&db);
}

// ---- pack -----------------------------------------------------------------------------------------------------

static void test_pack_roundtrip(const st_model *m, const char *pack) {
    CHECK(st_pack_write(m, pack, true) == 0, "pack write: %s", st_errmsg());
    st_pack *p = st_pack_open(pack, m);
    CHECK(p != NULL, "pack open: %s", st_errmsg());
    if (!p) return;
    CHECK(p->info.n_layer == m->hp.n_layer && p->info.n_expert == m->hp.n_expert, "pack shape");
    CHECK(p->info.data_offset % 4096 == 0, "data offset aligned");
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        const st_pack_layer *pl = &p->info.layers[l];
        const st_weight *ws[3] = {&m->layers[l].gate_exps, &m->layers[l].up_exps, &m->layers[l].down_exps};
        CHECK(pl->record_bytes % 4096 == 0 && pl->offset % 4096 == 0, "layer %u alignment", l);
        for (uint32_t e = 0; e < m->hp.n_expert; e++) {
            const uint8_t *rec = st_pack_record(p, l, e);
            for (int k = 0; k < 3; k++) {
                uint64_t n = (uint64_t)ws[k]->ne[1] * ws[k]->row_bytes;
                CHECK(pl->x.bytes[k] == n && pl->x.off[k] % 256 == 0, "layer %u part %d size", l, k);
                CHECK(memcmp(rec + pl->x.off[k], ws[k]->data + e * n, n) == 0, "layer %u expert %u part %d bytes", l,
                      e, k);
            }
            uint64_t end = pl->x.off[2] + pl->x.bytes[2];
            int zero = 1;
            for (uint64_t i = end; i < pl->record_bytes; i++) zero &= rec[i] == 0;
            CHECK(zero, "layer %u expert %u padding not zero", l, e);
        }
    }
    st_pack_close(p);
}

static int copy_file(const char *src, const char *dst, uint64_t keep, int64_t flip_at) {
    st_mapping mp;
    if (st_map_file(&mp, src)) return -1;
    FILE *f = fopen(dst, "wb");
    if (!f) return -1;
    uint8_t *buf = malloc(keep ? keep : 1);
    memcpy(buf, mp.data, keep);
    if (flip_at >= 0) buf[flip_at] ^= 0x5a;
    fwrite(buf, 1, keep, f);
    fclose(f);
    free(buf);
    st_unmap_file(&mp);
    return 0;
}

static void test_pack_errors(const st_model *m, const st_model *other, const st_model *other_seed,
                             const char *pack) {
    char bad[600];
    path_in(bad, sizeof bad, "bad.pack");
    st_mapping mp;
    CHECK(st_map_file(&mp, pack) == 0, "map pack");
    uint64_t size = mp.size;
    // A model of another shape, and one of the same shape with other weights.
    CHECK_ERR(st_pack_open(pack, other) == NULL, "n_embd", "other shape");
    CHECK_ERR(st_pack_open(pack, other_seed) == NULL, "fingerprint", "other seed");
    CHECK(strstr(st_errmsg(), "strata pack"), "fingerprint error should say to run strata pack: %s", st_errmsg());
    // Truncated by a page, by one byte, and to less than the header.
    copy_file(pack, bad, size - 4096, -1);
    CHECK_ERR(st_pack_open(bad, m) == NULL, "truncated", "truncated by 4096");
    copy_file(pack, bad, size - 1, -1);
    CHECK_ERR(st_pack_open(bad, m) == NULL, "truncated", "truncated by 1");
    copy_file(pack, bad, 100, -1);
    CHECK_ERR(st_pack_open(bad, m) == NULL, "truncated", "truncated header");
    CHECK(strstr(st_errmsg(), bad), "error should name the file: %s", st_errmsg());
    // Corrupted header bytes: magic, version, the layer table (caught by the header hash).
    copy_file(pack, bad, size, 2);
    CHECK_ERR(st_pack_open(bad, m) == NULL, "not a strata pack", "magic");
    copy_file(pack, bad, size, 8);
    CHECK_ERR(st_pack_open(bad, m) == NULL, "version", "version");
    copy_file(pack, bad, size, 128 + 64 + 17);
    CHECK_ERR(st_pack_open(bad, m) == NULL, "header hash", "layer table");
    // Random mutations of the header in memory: every one fails cleanly with a message, none crashes (ASan).
    uint64_t hb = 4096;
    uint8_t *h = malloc(hb);
    st_rng r;
    st_rng_init(&r, g_seed, 2);
    int failed_ok = 0;
    for (int it = 0; it < 300; it++) {
        memcpy(h, mp.data, hb);
        int nflip = 1 + (int)st_rng_below(&r, 4);
        for (int k = 0; k < nflip; k++) h[st_rng_below(&r, 128 + 64 * 4)] ^= (uint8_t)(1 + st_rng_below(&r, 255));
        uint64_t sz = st_rng_below(&r, 2) ? hb : st_rng_below(&r, (uint32_t)hb);
        st_pack_info pi;
        st_err_clear();
        if (st_pack_parse(h, sz, "mutated.pack", &pi) == 0) st_pack_info_free(&pi);
        else failed_ok += st_errmsg()[0] != 0;
    }
    CHECK(failed_ok == 300, "every mutated header (with size <= 4096) must fail with a message: %d of 300", failed_ok);
    free(h);
    st_unmap_file(&mp);
    unlink(bad);
}

// A small synthetic pack (n_embd = n_ff_exp = 32, block-32 types): a valid file of a few pages, random contents.
static uint8_t *mini_pack(uint32_t nl, uint32_t ne, int type, st_rng *r, uint64_t *size) {
    st_pack_info pi;
    memset(&pi, 0, sizeof pi);
    pi.version = ST_PACK_VERSION;
    pi.arch = ST_ARCH_QWEN3MOE;
    pi.n_layer = nl, pi.n_expert = ne, pi.n_embd = 32, pi.n_ff_exp = 32;
    pi.fingerprint = st_rng_u64(r);
    pi.header_bytes = ST_PACK_HEADER_FIXED + ST_PACK_LAYER_ENTRY * nl;
    pi.data_offset = (pi.header_bytes + 4095) / 4096 * 4096;
    pi.layers = calloc(nl, sizeof *pi.layers);
    st_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_embd = 32, hp.n_ff_exp = 32;
    uint64_t off = pi.data_offset;
    for (uint32_t l = 0; l < nl; l++) {
        st_xlayer_init(&pi.layers[l].x, &hp, type, type, l % 2 ? ST_TYPE_Q8_0 : type);
        pi.layers[l].record_bytes = (pi.layers[l].x.slot_bytes + 4095) / 4096 * 4096;
        pi.layers[l].offset = off;
        off += pi.layers[l].record_bytes * ne;
    }
    pi.data_bytes = off - pi.data_offset;
    pi.file_bytes = off;
    uint8_t *buf = malloc(off);
    for (uint64_t i = pi.data_offset; i < off; i++) buf[i] = (uint8_t)st_rng_u32(r);
    st_pack_encode_header(&pi, buf);
    *size = off;
    st_pack_info_free(&pi);
    return buf;
}

static void test_mini_packs(void) {
    st_rng r;
    st_rng_init(&r, g_seed, 4);
    for (uint32_t nl = 1; nl <= 3; nl++) {
        uint64_t n;
        uint8_t *b = mini_pack(nl, 2, ST_TYPE_Q4_0, &r, &n);
        st_pack_info pi;
        CHECK(st_pack_parse(b, n, "mini.pack", &pi) == 0 && pi.n_layer == nl, "mini pack %u: %s", nl, st_errmsg());
        st_pack_info_free(&pi);
        CHECK_ERR(st_pack_parse(b, n + 1, "mini.pack", &pi) != 0, "trailing data", "mini pack + 1 byte");
        free(b);
    }
}

// Writes the fuzzer's seed corpus (tests/fuzz/corpus/pack): small valid packs and a truncated one.
static int write_corpus(const char *dir) {
    st_rng r;
    st_rng_init(&r, 12345, 0);
    struct { uint32_t nl, ne; int type; const char *name; } seeds[] = {
        {1, 1, ST_TYPE_Q4_0, "valid-1x1-q4_0"}, {2, 1, ST_TYPE_Q8_0, "valid-2x1-q8_0"},
        {1, 2, ST_TYPE_F16, "valid-1x2-f16"}, {1, 1, ST_TYPE_F32, "truncated-1x1-f32"}};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        uint64_t n;
        uint8_t *b = mini_pack(seeds[i].nl, seeds[i].ne, seeds[i].type, &r, &n);
        if (!strncmp(seeds[i].name, "truncated", 9)) n -= 100;
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, seeds[i].name);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(b, 1, n, f) != n) return 1;
        fclose(f);
        free(b);
    }
    return 0;
}

// ---- arena ------------------------------------------------------------------------------------------------------

typedef struct {
    int n_reg, n_unreg, bad;
    uint64_t bytes;
} reg_log;

static int on_register(void *p, size_t n, void *ud) {
    reg_log *g = ud;
    g->n_reg++;
    g->bytes += n;
    if ((uintptr_t)p % 4096 || n % 4096 || n == 0) g->bad++;
    return 0;
}
static void on_unregister(void *p, size_t n, void *ud) { ((reg_log *)ud)->n_unreg++; }
static int fail_register(void *p, size_t n, void *ud) { return st_err("test: registration refused"); }

static void test_arena(const st_model *m, const char *pack) {
    st_arena_opts o;
    memset(&o, 0, sizeof o);
    o.quiet = true;
    o.mode = ST_ARENA_MMAP;
    CHECK_ERR(st_arena_create(m, &o) == NULL, "run `strata pack", "mmap without a pack");

    // mmap first (its pages are page cache), then anonymous, so the RssAnon deltas do not overlap.
    reg_log gm = {0}, ga = {0};
    o.pack_path = pack;
    o.chunk_bytes = 1 << 20;  // several chunks even for a small model
    o.register_chunk = on_register;
    o.unregister_chunk = on_unregister;
    o.ud = &gm;
    int64_t rss0 = st_rss_anon_bytes();
    st_arena *am = st_arena_create(m, &o);
    CHECK(am != NULL, "mmap arena: %s", st_errmsg());
    if (!am) return;
    volatile uint64_t sink = 0;
    for (uint64_t r = 0; r < (uint64_t)am->n_layer * am->n_expert; r++)  // touch every page
        for (uint64_t i = 0; i < am->layers[r / am->n_expert].record_bytes; i += 4096) sink += am->rec[r][i];
    int64_t rss_mmap = st_rss_anon_bytes() - rss0;
    CHECK(gm.n_reg == am->n_chunks && gm.n_reg > 1 && gm.bad == 0 && gm.bytes == am->bytes, "mmap registration: %d "
          "ranges of %d, %d bad, %" PRIu64 " of %" PRIu64 " bytes", gm.n_reg, am->n_chunks, gm.bad, gm.bytes, am->bytes);

    o.mode = ST_ARENA_ANON;
    o.ud = &ga;
    rss0 = st_rss_anon_bytes();
    st_arena *aa = st_arena_create(m, &o);
    CHECK(aa != NULL, "anon arena: %s", st_errmsg());
    int64_t rss_anon = st_rss_anon_bytes() - rss0;
    if (aa) {
        CHECK(aa->bytes == am->bytes && aa->n_chunks == am->n_chunks, "same size and chunking");
        CHECK(ga.n_reg == aa->n_chunks && ga.bad == 0 && ga.bytes == aa->bytes, "anon registration");
        int same = 1;
        for (uint64_t r = 0; r < (uint64_t)aa->n_layer * aa->n_expert; r++)
            same &= memcmp(aa->rec[r], am->rec[r], aa->layers[r / aa->n_expert].record_bytes) == 0;
        CHECK(same, "anonymous arena differs from the mmap'd pack");
        for (uint32_t l = 0; l < m->hp.n_layer; l++)
            for (uint32_t e = 0; e < m->hp.n_expert; e += 5)
                CHECK(memcmp(st_arena_part(aa, l, e, 2), m->layers[l].down_exps.data + e * aa->layers[l].x.bytes[2],
                             aa->layers[l].x.bytes[2]) == 0, "down of (%u, %u)", l, e);
        printf("arena %.1f MiB: RssAnon grew %.1f MiB in anonymous mode, %.1f MiB in mmap mode\n",
               aa->bytes / 1048576.0, rss_anon / 1048576.0, rss_mmap / 1048576.0);
        CHECK(rss_anon >= (int64_t)(aa->bytes * 9 / 10), "anonymous arena should cost ~its size in RssAnon");
        CHECK(rss_mmap < (int64_t)(aa->bytes / 4), "mmap arena should not cost RssAnon");
        CHECK(rss_mmap < rss_anon, "RssAnon lower in mmap mode");
    }
    st_arena_free(aa);
    st_arena_free(am);
    CHECK(gm.n_unreg == gm.n_reg && ga.n_unreg == ga.n_reg, "every registered range is unregistered");
    // A refused registration fails the build with the callback's message.
    o.register_chunk = fail_register;
    CHECK_ERR(st_arena_create(m, &o) == NULL, "registration refused", "register failure");
    (void)sink;
}

// ---- profiles and the session's routing counter -----------------------------------------------------------------

static void test_profile(const st_model *m, const st_model *other_seed) {
    char path[600], bad[600];
    path_in(path, sizeof path, "prof.json");
    path_in(bad, sizeof bad, "bad.json");
    st_profile p;
    CHECK(st_profile_init(&p, m) == 0, "profile init");
    // Count a real CPU forward pass: every layer's row sums to n_tokens * K.
    st_pool *pool = st_pool_create(2);
    st_session *s = st_session_new(m, pool, 64, 1);
    uint32_t *cnt = calloc(64, sizeof *cnt);
    s->route_counts = cnt;
    int32_t toks[20];
    st_rng r;
    st_rng_init(&r, g_seed, 3);
    for (int i = 0; i < 20; i++) toks[i] = (int32_t)st_rng_below(&r, m->hp.n_vocab);
    CHECK(st_session_eval(s, toks, 19, NULL, 0) == 0 && st_session_eval(s, toks + 19, 1, NULL, 0) == 0, "eval");
    for (uint32_t l = 0; l < 4; l++) {
        uint64_t sum = 0;
        for (int e = 0; e < 16; e++) sum += cnt[l * 16 + e];
        CHECK(sum == 20 * m->hp.n_expert_used, "layer %u counted %" PRIu64 " selections, want %u", l, sum,
              20 * m->hp.n_expert_used);
    }
    st_profile_add(&p, cnt, 20);
    st_session_free(s);
    st_pool_destroy(pool);
    free(cnt);
    p.counts[5] += (uint64_t)1 << 40;  // beyond 32 bits survives the JSON round trip
    CHECK(st_profile_write(&p, path, m->path, m->hp.n_expert_used) == 0, "profile write: %s", st_errmsg());
    st_profile q;
    CHECK(st_profile_read(&q, path, m) == 0, "profile read: %s", st_errmsg());
    CHECK(q.n_layer == 4 && q.n_expert == 16 && q.n_tokens == 20 && q.fingerprint == p.fingerprint &&
              q.counts && memcmp(q.counts, p.counts, 64 * sizeof(uint64_t)) == 0,
          "profile round trip");
    st_profile_free(&q);
    CHECK_ERR(st_profile_read(&q, path, other_seed) != 0, "different model", "profile on another model");
    // Broken files: not JSON, wrong format, wrong row length.
    FILE *f = fopen(bad, "w");
    fputs("{\"format\": \"strata-profile\", \"version\": 1, \"n_layer\": ", f);
    fclose(f);
    CHECK_ERR(st_profile_read(&q, bad, NULL) != 0, "not a valid JSON", "truncated JSON");
    f = fopen(bad, "w");
    fputs("{\"format\": \"strata-profile\", \"version\": 1, \"fingerprint\": \"0x1\", \"n_layer\": 1, \"n_expert\": 2, "
          "\"n_tokens\": 1, \"counts\": [[1, 2, 3]]}", f);
    fclose(f);
    CHECK_ERR(st_profile_read(&q, bad, NULL) != 0, "counts[0] must be an array of n_expert = 2", "row length");
    f = fopen(bad, "w");
    fputs("[1, 2]", f);
    fclose(f);
    CHECK_ERR(st_profile_read(&q, bad, NULL) != 0, "not a strata profile", "array root");
    st_profile_free(&p);
    unlink(path);
    unlink(bad);
}

int main(int argc, char **argv) {
    if (argc > 2 && !strcmp(argv[1], "--write-corpus")) return write_corpus(argv[2]);
    const char *env = getenv("STRATA_SEED");
    g_seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    st_log_set_level(ST_LOG_WARN);
    snprintf(g_dir, sizeof g_dir, "%s/strata-place-XXXXXX", argc > 1 ? argv[1] : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    char mp[600], op[600], sp[600], pack[600];
    path_in(mp, sizeof mp, "moe.gguf");
    path_in(op, sizeof op, "tiny.gguf");
    path_in(sp, sizeof sp, "moe-other-seed.gguf");
    path_in(pack, sizeof pack, "moe.pack");
    st_hparams hp = moe_hp();
    const st_preset *tiny = st_preset_find("tiny-qwen3moe");
    // other: another shape; other2: the same shape with other weights (another seed).
    if (make(mp, &hp, ST_FTYPE_Q4_K_M, g_seed) || make(op, &tiny->hp, ST_FTYPE_Q4_K_M, g_seed + 1) ||
        make(sp, &hp, ST_FTYPE_Q4_K_M, g_seed + 2))
        return 1;
    st_model *m = st_model_load(mp), *other = st_model_load(op), *other2 = st_model_load(sp);
    if (!m || !other || !other2) {
        fprintf(stderr, "load: %s\n", st_errmsg());
        return 1;
    }

    test_planner(m);
    test_pack_roundtrip(m, pack);
    test_pack_errors(m, other, other2, pack);
    test_mini_packs();
    test_arena(m, pack);
    test_profile(m, other2);

    st_model_free(m);
    st_model_free(other);
    st_model_free(other2);
    unlink(mp);
    unlink(op);
    unlink(sp);
    unlink(pack);
    rmdir(g_dir);
    if (failures) fprintf(stderr, "test_place: %d failure(s) (STRATA_SEED=%" PRIu64 ")\n", failures, g_seed);
    else printf("test_place: PASS\n");
    return failures ? 1 : 0;
}
