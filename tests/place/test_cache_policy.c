// The VRAM expert cache's policy (place/cache_policy.h) on random shapes: slot split (cache + prefill staging,
// maximal cache, staging bound by the worst layer), initial contents (even spread / profile ranking), decay, and the
// swap choice (per-layer pairs, hysteresis, in-flight experts skipped, best gain first, brute-force optimality of the
// first swap).
//   usage: test_cache_policy   (STRATA_SEED=N fixes the seed; printed on failure)
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "place/cache_policy.h"
#include "util/err.h"
#include "util/rng.h"

#include "../check.h"

// Reference of the spread without a profile: the first `first` layers take all E while slots last, the other
// layers n_cache / (their count) each, the lower ones one more for the remainder.
static uint32_t ref_resident(uint32_t L, uint32_t E, uint64_t n_cache, uint32_t first, uint32_t l) {
    if (first > L) first = L;
    uint64_t left = n_cache;
    for (uint32_t f = 0; f < first; f++) {
        const uint64_t take = left < E ? left : E;
        if (f == l) return (uint32_t)take;
        left -= take;
    }
    const uint64_t k = left / (L - first) + (l - first < left % (L - first) ? 1 : 0);
    return (uint32_t)(k < E ? k : E);
}

// Staging the layout would need for n_cache slots so assigned (reference for maximality).
static uint64_t even_need(uint32_t L, uint32_t E, uint64_t n_cache, uint32_t first, uint32_t bufs) {
    uint32_t m = E;
    for (uint32_t l = 0; l < L; l++) {
        const uint32_t r = ref_resident(L, E, n_cache, first, l);
        if (r < m) m = r;
    }
    return (uint64_t)bufs * (E - m);
}

static void check_layout(const st_hycache_layout *o, uint32_t L, uint32_t E, uint64_t n_total, const uint64_t *counts,
                         uint32_t first) {
    uint64_t sum = 0;
    uint32_t minr = UINT32_MAX;
    for (uint32_t l = 0; l < L; l++) {
        sum += o->resident[l];
        if (o->resident[l] < minr) minr = o->resident[l];
        CHECK(o->resident[l] <= E, "layer %u: %u resident of %u", l, o->resident[l], E);
    }
    CHECK(sum == o->n_cache, "resident sum %" PRIu64 " != n_cache %" PRIu64, sum, o->n_cache);
    CHECK(o->stage_per_buf == E - minr, "stage_per_buf %u, expected %u", o->stage_per_buf, E - minr);
    CHECK(o->n_cache + (uint64_t)o->n_stage_bufs * o->stage_per_buf <= n_total, "layout exceeds %" PRIu64, n_total);
    // every initial entry distinct and counted in its layer
    uint8_t *seen = calloc((size_t)L * E, 1);
    uint32_t *per = calloc(L, sizeof *per);
    for (uint64_t i = 0; i < o->n_cache; i++) {
        uint32_t x = o->initial[i];
        CHECK(x < L * E, "initial[%" PRIu64 "] = %u out of range", i, x);
        if (x >= L * E) continue;
        CHECK(!seen[x], "expert %u twice in the initial contents", x);
        seen[x] = 1;
        per[x / E]++;
    }
    for (uint32_t l = 0; l < L; l++) CHECK(per[l] == o->resident[l], "layer %u: %u initial, %u resident", l, per[l], o->resident[l]);
    if (counts) {  // the first layers' pairs, then the top by count: no excluded pair beats an included one
        uint64_t min_in = UINT64_MAX, max_out = 0;
        int first_out = 0, later_in = 0;
        for (uint64_t i = 0; i < (uint64_t)L * E; i++) {
            if (i / E < first) {
                first_out |= !seen[i];
                continue;
            }
            later_in |= seen[i];
            if (seen[i] && counts[i] < min_in) min_in = counts[i];
            if (!seen[i] && counts[i] > max_out) max_out = counts[i];
        }
        CHECK(!(first_out && later_in), "profile order: a pair of the first %u layers left out for a later one", first);
        if (o->n_cache && o->n_cache < (uint64_t)L * E)
            CHECK(max_out <= min_in, "profile order: an excluded pair (%" PRIu64 ") beats an included one (%" PRIu64 ")",
                  max_out, min_in);
    } else {
        for (uint32_t l = 0; l < L; l++) {
            CHECK(o->resident[l] == ref_resident(L, E, o->n_cache, first, l), "spread (first %u): layer %u has %u, "
                  "expected %u of %" PRIu64, first, l, o->resident[l], ref_resident(L, E, o->n_cache, first, l),
                  o->n_cache);
            for (uint32_t e = 0; e < o->resident[l]; e++) CHECK(seen[l * E + e], "even spread: layer %u lacks id %u", l, e);
        }
        // maximal: one more cache slot would not leave room for the staging (with the same buffering)
        if (o->n_cache < (uint64_t)L * E && o->n_stage_bufs == 2) {
            uint64_t c = o->n_cache + 1;
            CHECK(c + even_need(L, E, c, first, 2) > n_total,
                  "n_cache %" PRIu64 " is not maximal (n_total %" PRIu64 ")",
                  o->n_cache, n_total);
        }
    }
    free(seen);
    free(per);
}

static void test_layout(st_rng *r) {
    for (int it = 0; it < 300; it++) {
        uint32_t L = 1 + st_rng_below(r, 48), E = 2 + st_rng_below(r, 160);
        uint64_t all = (uint64_t)L * E;
        uint64_t n_total = E + st_rng_below(r, (uint32_t)(all + E));
        uint64_t *counts = NULL;
        if (it % 2) {
            counts = malloc(sizeof *counts * all);
            for (uint64_t i = 0; i < all; i++) counts[i] = st_rng_below(r, 50);
        }
        st_hycache_layout o;
        const uint32_t first = st_rng_below(r, 3);  // 0: the even spread; 1-2: that many layers whole
        int rc = st_hycache_layout_compute(L, E, n_total, counts, first, &o);
        CHECK(rc == 0, "L %u E %u n_total %" PRIu64 ": %s", L, E, n_total, st_errmsg());
        if (rc == 0) {
            check_layout(&o, L, E, n_total, counts, first);
            st_hycache_layout_free(&o);
        }
        free(counts);
    }
    // too small: fewer slots than one layer's experts
    st_hycache_layout o;
    CHECK(st_hycache_layout_compute(4, 64, 63, NULL, 1, &o) == -1 && strstr(st_errmsg(), "raise --gpu-mem"),
          "63 slots for 64 experts should fail with a hint, got '%s'", st_errmsg());
    // a known case: 48 layers x 128 experts, 2014 slots -> (2014 - 2 * (128 - r)) / 48 >= r: r = 38, cache 1834+
    CHECK(st_hycache_layout_compute(48, 128, 2014, NULL, 0, &o) == 0, "48x128: %s", st_errmsg());
    CHECK(o.n_stage_bufs == 2 && o.n_cache + 2ull * o.stage_per_buf <= 2014 && o.n_cache >= 1834,
          "48x128 / 2014: cache %" PRIu64 ", %u x %u staging", o.n_cache, o.n_stage_bufs, o.stage_per_buf);
    printf("48 layers x 128 experts, 2014 slots: %" PRIu64 " cache + %u x %u staging\n", o.n_cache, o.n_stage_bufs,
           o.stage_per_buf);
    st_hycache_layout_free(&o);
    // The first layer whole (ST_PLAN_FIRST_LAYERS is 3; one here; the 16 GiB plan's ~4,600 slots of 30B-A3B): 128
    // there, the 47 others even, the staging bound by their minimum.
    CHECK(st_hycache_layout_compute(48, 128, 4600, NULL, 1, &o) == 0, "48x128 first: %s", st_errmsg());
    CHECK(o.resident[0] == 128 && o.resident[1] >= 90 && o.resident[47] >= 90 && o.resident[47] <= o.resident[1] &&
              o.stage_per_buf == 128 - o.resident[47] && o.n_cache + 2ull * o.stage_per_buf <= 4600,
          "48x128 / 4600 first: layer 0 %u, 1 %u, 47 %u, cache %" PRIu64 ", %u x %u staging", o.resident[0],
          o.resident[1], o.resident[47], o.n_cache, o.n_stage_bufs, o.stage_per_buf);
    printf("48 layers x 128 experts, 4600 slots, the first layer whole: %" PRIu64 " cache (%u, %u .. %u) + %u x %u "
           "staging\n", o.n_cache, o.resident[0], o.resident[1], o.resident[47], o.n_stage_bufs, o.stage_per_buf);
    st_hycache_layout_free(&o);
    // Fewer slots than two staging buffers (the 235B IQ1_M at 8 GiB after the prefetch's 4 own sets per layer,
    // place/plan.h ST_PLAN_PREFETCH_SINGLE_BELOW): one buffer, the rest cache (measured there: 122 + 1 x 127).
    CHECK(st_hycache_layout_compute(94, 128, 249, NULL, 0, &o) == 0, "94x128: %s", st_errmsg());
    CHECK(o.n_stage_bufs == 1 && o.stage_per_buf == 127 && o.n_cache == 122, "94x128 / 249: cache %" PRIu64
          ", %u x %u staging", o.n_cache, o.n_stage_bufs, o.stage_per_buf);
    st_hycache_layout_free(&o);
}

// Slots sized per layer (st_hycache_layout_fit): the layout fits the bytes, a reference sum of its slots agrees,
// it holds at least the experts of one slot size for all, and with one size for every layer it is that layout.
static void test_layout_fit(st_rng *r) {
    uint64_t gained = 0, base_total = 0;
    for (int it = 0; it < 200; it++) {
        const uint32_t L = 1 + st_rng_below(r, 48), E = 2 + st_rng_below(r, 160);
        const uint64_t all = (uint64_t)L * E, big = 256ull * (8 + st_rng_below(r, 64));
        const uint64_t small = it % 4 == 0 ? big : big - 256ull * st_rng_below(r, (uint32_t)(big / 256 - 1));
        uint64_t *sb = malloc(sizeof *sb * L), *counts = NULL;
        for (uint32_t l = 0; l < L; l++) sb[l] = st_rng_below(r, 2) ? big : small;
        sb[st_rng_below(r, L)] = big;  // the staging's size is some layer's
        if (it % 2) {
            counts = malloc(sizeof *counts * all);
            for (uint64_t i = 0; i < all; i++) counts[i] = st_rng_below(r, 50);
        }
        const uint64_t avail = big * (E + st_rng_below(r, (uint32_t)(all + E))) + st_rng_below(r, (uint32_t)big);
        st_hycache_layout f, u;
        const uint32_t first = st_rng_below(r, 2);
        const int rf = st_hycache_layout_fit(L, E, avail, sb, big, counts, first, &f);
        const int ru = st_hycache_layout_compute(L, E, avail / big, counts, first, &u);
        CHECK(rf == 0 && ru == 0, "L %u E %u avail %" PRIu64 ": %s", L, E, avail, st_errmsg());
        if (rf == 0 && ru == 0) {
            check_layout(&f, L, E, f.n_total, counts, first);
            uint64_t bytes = (uint64_t)f.n_stage_bufs * f.stage_per_buf * big;
            for (uint64_t i = 0; i < f.n_cache; i++) bytes += sb[f.initial[i] / E];
            CHECK(bytes == st_hycache_layout_bytes(&f, sb, big) && bytes <= avail,
                  "L %u E %u: %" PRIu64 " bytes (reported %" PRIu64 ") for %" PRIu64 " available", L, E, bytes,
                  st_hycache_layout_bytes(&f, sb, big), avail);
            CHECK(f.n_cache >= u.n_cache, "L %u E %u: %" PRIu64 " cache slots sized per layer < %" PRIu64
                  " at one size", L, E, f.n_cache, u.n_cache);
            if (small == big)
                CHECK(f.n_total == u.n_total && f.n_cache == u.n_cache && f.stage_per_buf == u.stage_per_buf &&
                          f.n_stage_bufs == u.n_stage_bufs,
                      "L %u E %u, one size: %" PRIu64 " + %u x %u against %" PRIu64 " + %u x %u", L, E, f.n_cache,
                      f.n_stage_bufs, f.stage_per_buf, u.n_cache, u.n_stage_bufs, u.stage_per_buf);
            gained += f.n_cache - u.n_cache, base_total += u.n_cache;
        }
        if (rf == 0) st_hycache_layout_free(&f);
        if (ru == 0) st_hycache_layout_free(&u);
        free(sb), free(counts);
    }
    printf("slots sized per layer: %" PRIu64 " more cache slots over 200 random layouts (%" PRIu64 " at one size)\n",
           gained, base_total);
}

static void test_decay(st_rng *r) {
    float f[64], ref[64];
    uint32_t c[64];
    for (int i = 0; i < 64; i++) f[i] = ref[i] = st_rng_f32(r) * 10, c[i] = st_rng_below(r, 9);
    st_hycache_decay(f, c, 64, 0.5);
    for (int i = 0; i < 64; i++) CHECK(fabsf(f[i] - (ref[i] * 0.5f + (float)c[i])) < 1e-5f, "decay [%d]", i);
}

static void test_swaps(st_rng *r) {
    // hand case: 1 layer, 4 experts, 0 and 1 resident (cold), 2 hot, 3 warm
    {
        float f[4] = {1, 5, 100, 6};
        int32_t so[4] = {0, 1, -1, -1};
        st_hycache_swap s[4];
        int n = st_hycache_pick_swaps(1, 4, f, so, 4, 2.0, 1.0, s);
        CHECK(n == 1 && s[0].in == 2 && s[0].out == 0 && s[0].slot == 0, "hand case: %d swaps, first %u->%u", n,
              n ? s[0].out : 0, n ? s[0].in : 0);
        so[2] = -2;  // in flight: never picked; the warm expert 3 (6 > 2 * 1 + 1) takes slot 0 instead
        n = st_hycache_pick_swaps(1, 4, f, so, 4, 2.0, 1.0, s);
        CHECK(n == 1 && s[0].in == 3 && s[0].out == 0, "in-flight case: %d swaps, first in %u", n, n ? s[0].in : 0);
        f[3] = 2;  // 2 < 2 * 1 + 1: hysteresis holds it back
        n = st_hycache_pick_swaps(1, 4, f, so, 4, 2.0, 1.0, s);
        CHECK(n == 0, "hysteresis: %d swaps", n);
    }
    for (int it = 0; it < 200; it++) {
        uint32_t L = 1 + st_rng_below(r, 8), E = 2 + st_rng_below(r, 64);
        uint64_t all = (uint64_t)L * E;
        float *f = malloc(sizeof *f * all);
        int32_t *so = malloc(sizeof *so * all);
        int slot = 0;
        for (uint64_t i = 0; i < all; i++) {
            f[i] = (float)st_rng_below(r, 40);
            uint32_t k = st_rng_below(r, 10);
            so[i] = k < 4 ? slot++ : k < 9 ? -1 : -2;
        }
        int max = 1 + (int)st_rng_below(r, 12);
        double ratio = 1.0 + st_rng_f32(r), minf = st_rng_f32(r) * 3;
        st_hycache_swap *s = malloc(sizeof *s * (size_t)max);
        int n = st_hycache_pick_swaps(L, E, f, so, max, ratio, minf, s);
        CHECK(n >= 0 && n <= max, "%d swaps for max %d", n, max);
        uint8_t *used = calloc(all, 1);
        for (int i = 0; i < n; i++) {
            uint64_t in = (uint64_t)s[i].layer * E + s[i].in, out = (uint64_t)s[i].layer * E + s[i].out;
            CHECK(s[i].layer < L && so[in] == -1 && so[out] >= 0 && s[i].slot == so[out], "swap %d invalid", i);
            CHECK(f[in] > ratio * f[out] + minf, "swap %d breaks the hysteresis", i);
            CHECK(!used[in] && !used[out], "swap %d reuses an expert", i);
            used[in] = used[out] = 1;
            if (i) CHECK(s[i].gain <= s[i - 1].gain, "swaps not sorted by gain");
        }
        // the first swap is the best single qualifying pair (brute force): hottest miss vs coldest resident per layer
        float best = -1;
        for (uint32_t l = 0; l < L; l++) {
            float hot = -1, cold = INFINITY;
            for (uint32_t e = 0; e < E; e++) {
                uint64_t i = (uint64_t)l * E + e;
                if (so[i] == -1 && f[i] > hot) hot = f[i];
                if (so[i] >= 0 && f[i] < cold) cold = f[i];
            }
            if (hot >= 0 && cold < INFINITY && hot > ratio * cold + minf && hot - cold > best) best = hot - cold;
        }
        if (best >= 0) CHECK(n > 0 && fabsf(s[0].gain - best) < 1e-6f, "first swap gain %g, best %g", n ? s[0].gain : -1.f, best);
        else CHECK(n == 0, "%d swaps but no qualifying pair", n);
        free(used);
        free(s);
        free(f);
        free(so);
    }
}

// The prefetch gate's rule on random periods against a direct transcription of its three sentences, plus the two
// measured situations (the agent prompt after the refill: off; a cold cache serving most misses: stays on).
static void test_pf_gate(st_rng *r) {
    st_hy_pf_gate g = {1, 0};
    CHECK(!st_hy_pf_gate_step(&g, 16, 8, 66 * 16, 7 * 16) && g.live, "a branch serving 66 per token went off");
    CHECK(st_hy_pf_gate_step(&g, 16, 8, 10, 2 * 16) && !g.live, "a branch serving 0.6 per token stayed on");
    CHECK(!st_hy_pf_gate_step(&g, 16, 8, 0, 30 * 16) && !g.live, "on again before the dwell");
    CHECK(st_hy_pf_gate_step(&g, 16, 8, 0, 30 * 16) && g.live, "not on again after the dwell with 30 misses per token");
    CHECK(!st_hy_pf_gate_step(&g, 4, 8, 0, 0) && g.live, "a short period (a prefill's) changed the state");
    for (int it = 0; it < 20000; it++) {
        const st_hy_pf_gate before = {(int)(st_rng_u32(r) & 1), (int)(st_rng_u32(r) % 4)};
        const int64_t n = (int64_t)(st_rng_u32(r) % 40), min_dec = 8;
        const uint64_t served = st_rng_u32(r) % (uint64_t)(4 * (n + 1));
        const uint64_t misses = st_rng_u32(r) % (uint64_t)(8 * (n + 1));
        st_hy_pf_gate g2 = before;
        const int changed = st_hy_pf_gate_step(&g2, n, min_dec, served, misses);
        st_hy_pf_gate want = before;
        if (n >= min_dec && n > 0) {
            if (before.live) {
                if ((double)served < ST_HY_PF_GATE_OFF * (double)n) want.live = 0, want.off_periods = 0;
            } else {
                want.off_periods = before.off_periods + 1;
                if (want.off_periods >= ST_HY_PF_GATE_DWELL && (double)misses > ST_HY_PF_GATE_ON * (double)n)
                    want.live = 1;
            }
        }
        CHECK(g2.live == want.live && g2.off_periods == want.off_periods && changed == (g2.live != before.live),
              "gate live %d off %d, n %lld served %llu misses %llu: got live %d off %d changed %d", before.live,
              before.off_periods, (long long)n, (unsigned long long)served, (unsigned long long)misses, g2.live,
              g2.off_periods, changed);
    }
}

// The CPU-miss split's gate on random periods against a transcription of its rule, plus the measured situations
// (16 GiB at short depth, 1.7 misses per token: stays split; the agent prompt's decode after the refill, ~0: off
// after two quiet periods; misses back: split again at once).
static void test_split_gate(st_rng *r) {
    const double off = ST_HY_SPLIT_GATE_OFF, on = ST_HY_SPLIT_GATE_ON;
    st_hy_split_gate g = {1, 0};
    CHECK(!st_hy_split_gate_step(&g, 16, 8, 27, off, on) && g.live, "1.7 misses per token turned the split off");
    CHECK(!st_hy_split_gate_step(&g, 16, 8, 0, off, on) && g.live && g.quiet == 1, "off after one quiet period");
    CHECK(!st_hy_split_gate_step(&g, 4, 8, 0, off, on) && g.live && g.quiet == 1, "a short period changed the state");
    CHECK(st_hy_split_gate_step(&g, 16, 8, 1, off, on) && !g.live, "still split after two quiet periods");
    CHECK(!st_hy_split_gate_step(&g, 16, 8, 8, off, on) && !g.live, "0.5 misses per token turned the split on");
    CHECK(st_hy_split_gate_step(&g, 16, 8, 12, off, on) && g.live && g.quiet == 0, "0.75 per token left it off");
    for (int it = 0; it < 20000; it++) {
        const st_hy_split_gate before = {(int)(st_rng_u32(r) & 1), (int)(st_rng_u32(r) % ST_HY_SPLIT_GATE_QUIET)};
        const int64_t n = (int64_t)(st_rng_u32(r) % 40), min_dec = 8;
        const uint64_t misses = st_rng_u32(r) % (uint64_t)(2 * (n + 1));
        const double o = 0.1 * (double)(st_rng_u32(r) % 6), o2 = o + 0.1 * (double)(st_rng_u32(r) % 10);
        st_hy_split_gate g2 = before;
        const int changed = st_hy_split_gate_step(&g2, n, min_dec, misses, o, o2);
        st_hy_split_gate want = before;
        if (n >= min_dec && n > 0) {
            if (!before.live) {
                if ((double)misses >= o2 * (double)n) want.live = 1, want.quiet = 0;
            } else {
                want.quiet = (double)misses < o * (double)n ? before.quiet + 1 : 0;
                if (want.quiet >= ST_HY_SPLIT_GATE_QUIET) want.live = 0, want.quiet = 0;
            }
        }
        CHECK(g2.live == want.live && g2.quiet == want.quiet && changed == (g2.live != before.live),
              "split gate live %d quiet %d, n %lld misses %llu (off %.1f on %.1f): got live %d quiet %d changed %d",
              before.live, before.quiet, (long long)n, (unsigned long long)misses, o, o2, g2.live, g2.quiet, changed);
    }
}

// The own-set refill on random rows: the set afterwards is the brute-force top P of the non-resident experts (by
// freq, ties to the lower id; freq drawn from few values so ties happen), held experts that stay keep their slots,
// fresh marks exactly the slots whose expert changed, and the fresh experts run in expert order.
static void test_pf_set_refill(st_rng *r) {
    for (int it = 0; it < 5000; it++) {
        const uint32_t E = 1 + st_rng_u32(r) % 64;
        const int P = 1 + (int)(st_rng_u32(r) % 12);
        float f[64];
        int32_t so[64], owner[32], before[32];
        uint8_t fresh[32];
        for (uint32_t e = 0; e < E; e++) {
            f[e] = (float)(st_rng_u32(r) % 6);
            so[e] = st_rng_u32(r) % 3 == 0 ? (int32_t)e : -1;
        }
        uint8_t held[64] = {0};
        for (int j = 0; j < P; j++) {  // distinct non-resident experts or -1
            const uint32_t e = st_rng_u32(r) % E;
            owner[j] = st_rng_u32(r) % 3 && so[e] < 0 && !held[e] ? (int32_t)e : -1;
            if (owner[j] >= 0) held[e] = 1;
            before[j] = owner[j];
        }
        const int n_fresh = st_hy_pf_set_refill(E, P, f, so, owner, fresh);
        uint8_t want[64] = {0};  // the top P: selection by (freq desc, id asc)
        int n_want = 0;
        for (; n_want < P; n_want++) {
            int best = -1;
            for (uint32_t e = 0; e < E; e++)
                if (so[e] < 0 && !want[e] && (best < 0 || f[e] > f[best])) best = (int)e;
            if (best < 0) break;
            want[best] = 1;
        }
        int got = 0, fr = 0, last_fresh = -1;
        uint8_t seen[64] = {0};
        for (int j = 0; j < P; j++) {
            if (owner[j] < 0) {
                CHECK(!fresh[j], "it %d: empty slot %d marked fresh", it, j);
                continue;
            }
            CHECK(owner[j] < (int32_t)E && want[owner[j]] && !seen[owner[j]], "it %d: slot %d holds %d", it, j,
                  owner[j]);
            seen[owner[j]] = 1;
            got++;
            CHECK(fresh[j] == (owner[j] != before[j]), "it %d: slot %d fresh %d (%d -> %d)", it, j, fresh[j], before[j],
                  owner[j]);
            if (fresh[j]) {
                CHECK(owner[j] > last_fresh, "it %d: fresh experts out of order", it);
                last_fresh = owner[j];
                fr++;
            }
        }
        for (int j = 0; j < P; j++)
            if (before[j] >= 0 && want[before[j]]) CHECK(owner[j] == before[j], "it %d: held %d moved", it, before[j]);
        CHECK(got == n_want && fr == n_fresh, "it %d: %d of %d picked, %d fresh (returned %d)", it, got, n_want, fr,
              n_fresh);
    }
}

int main(void) {
    const char *env = getenv("STRATA_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
    st_rng r;
    st_rng_init(&r, seed, 0);
    test_layout(&r);
    test_layout_fit(&r);
    test_decay(&r);
    test_swaps(&r);
    test_pf_gate(&r);
    test_split_gate(&r);
    test_pf_set_refill(&r);
    if (failures) {
        fprintf(stderr, "test_cache_policy: %d failure(s) (seed %" PRIu64 ", rerun with STRATA_SEED=%" PRIu64 ")\n",
                failures, seed, seed);
        return 1;
    }
    printf("test_cache_policy: PASS (seed %" PRIu64 ")\n", seed);
    return 0;
}
