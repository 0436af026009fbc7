// The VRAM expert cache's policy (see cache_policy.h).
#include "place/cache_policy.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "place/plan.h"
#include "util/err.h"

// Fills resident[] and initial[] for n_cache slots. order: the profile ranking (NULL: the first layers' experts, then
// an even spread; st_plan_spread_even).
static void assign(st_hycache_layout *o, uint64_t n_cache, const st_plan_slot *order, uint32_t first_layers) {
    const uint32_t L = o->n_layer, E = o->n_expert;
    memset(o->resident, 0, sizeof *o->resident * L);
    if (order) {
        for (uint64_t i = 0; i < n_cache; i++) {
            o->initial[i] = order[i].layer * E + order[i].expert;
            o->resident[order[i].layer]++;
        }
        return;
    }
    st_plan_spread_even(n_cache, L, E, first_layers, o->resident);
    uint64_t k = 0;
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t e = 0; e < o->resident[l]; e++) o->initial[k++] = l * E + e;
}

static uint32_t min_resident(const st_hycache_layout *o) {
    uint32_t m = UINT32_MAX;
    for (uint32_t l = 0; l < o->n_layer; l++)
        if (o->resident[l] < m) m = o->resident[l];
    return m;
}

int st_hycache_layout_compute(uint32_t n_layer, uint32_t n_expert, uint64_t n_total, const uint64_t *counts,
                              uint32_t first_layers, st_hycache_layout *out) {
    memset(out, 0, sizeof *out);
    if (n_layer == 0 || n_expert == 0) return st_err("expert cache layout: no experts (%u layers x %u)", n_layer, n_expert);
    const uint64_t all = (uint64_t)n_layer * n_expert;
    out->n_layer = n_layer;
    out->n_expert = n_expert;
    out->n_total = n_total;
    out->resident = calloc(n_layer, sizeof *out->resident);
    out->initial = calloc(all, sizeof *out->initial);
    st_plan_slot *order = counts ? st_plan_rank_by_count(counts, n_layer, n_expert, first_layers) : NULL;
    if (!out->resident || !out->initial || (counts && !order)) {
        free(order);
        st_hycache_layout_free(out);
        return st_err("out of memory");
    }
    int ok = 0;
    for (uint32_t bufs = 2; bufs >= 1 && !ok; bufs--) {
        // n_cache shrinks until the staging of the worst layer fits beside it; each step can only lower the minimum
        // resident count, so the loop ends (at n_cache = 0 at worst).
        uint64_t n_cache = n_total < all ? n_total : all;
        for (;;) {
            assign(out, n_cache, order, first_layers);
            uint64_t need = (uint64_t)bufs * (n_expert - min_resident(out));
            if (n_cache + need <= n_total) {
                ok = 1;
                out->n_cache = n_cache;
                out->n_stage_bufs = need ? bufs : 0;
                out->stage_per_buf = n_expert - min_resident(out);
                break;
            }
            if (n_cache == 0 || need > n_total) break;
            uint64_t next = n_total - need;
            n_cache = next < n_cache ? next : n_cache - 1;
        }
    }
    free(order);
    if (!ok) {
        st_hycache_layout_free(out);
        return st_err("expert cache: %" PRIu64 " expert slots fit in the budget, but prefill staging alone needs %u "
                      "(one layer's %u experts): raise --gpu-mem",
                      n_total, n_expert, n_expert);
    }
    return 0;
}

uint64_t st_hycache_layout_bytes(const st_hycache_layout *l, const uint64_t *slot_bytes, uint64_t max_bytes) {
    uint64_t b = (uint64_t)l->n_stage_bufs * l->stage_per_buf * max_bytes;
    for (uint64_t i = 0; i < l->n_cache; i++) b += slot_bytes[l->initial[i] / l->n_expert];
    return b;
}

int st_hycache_layout_fit(uint32_t n_layer, uint32_t n_expert, uint64_t avail, const uint64_t *slot_bytes,
                          uint64_t max_bytes, const uint64_t *counts, uint32_t first_layers, st_hycache_layout *out) {
    uint64_t min_bytes = max_bytes;
    for (uint32_t l = 0; l < n_layer; l++)
        if (slot_bytes[l] < min_bytes) min_bytes = slot_bytes[l];
    if (min_bytes == 0) return st_err("expert cache layout: a layer's slot size is 0");
    uint64_t lo = avail / max_bytes, hi = avail / min_bytes;  // lo fits: every slot at most max_bytes
    if (st_hycache_layout_compute(n_layer, n_expert, lo, counts, first_layers, out)) return -1;
    // Invariant: lo fits (its layout in out). The bytes are not strictly monotone in n_total (one more slot may
    // raise the least resident count and so free staging), so the search finds a large fit, not always the largest.
    while (lo < hi) {
        const uint64_t mid = lo + (hi - lo + 1) / 2;
        st_hycache_layout t;
        if (st_hycache_layout_compute(n_layer, n_expert, mid, counts, first_layers, &t) == 0 &&
            st_hycache_layout_bytes(&t, slot_bytes, max_bytes) <= avail) {
            st_hycache_layout_free(out);
            *out = t;
            lo = mid;
        } else {
            st_hycache_layout_free(&t);
            hi = mid - 1;
        }
    }
    return 0;
}

void st_hycache_layout_free(st_hycache_layout *l) {
    if (!l) return;
    free(l->resident);
    free(l->initial);
    l->resident = NULL;
    l->initial = NULL;
}

void st_hycache_decay(float *freq, const uint32_t *counts, uint64_t n, double factor) {
    const float f = (float)factor;
    for (uint64_t i = 0; i < n; i++) freq[i] = freq[i] * f + (float)counts[i];
}

typedef struct {
    float f;
    uint32_t e;
} fe;

static int fe_desc(const void *a, const void *b) {
    const fe *x = a, *y = b;
    if (x->f != y->f) return x->f > y->f ? -1 : 1;
    return x->e < y->e ? -1 : x->e > y->e;
}

static int fe_asc(const void *a, const void *b) {
    const fe *x = a, *y = b;
    if (x->f != y->f) return x->f < y->f ? -1 : 1;
    return x->e < y->e ? -1 : x->e > y->e;
}

static int swap_by_gain(const void *a, const void *b) {
    const st_hycache_swap *x = a, *y = b;
    if (x->gain != y->gain) return x->gain > y->gain ? -1 : 1;
    if (x->layer != y->layer) return x->layer < y->layer ? -1 : 1;
    return x->in < y->in ? -1 : x->in > y->in;
}

int st_hycache_pick_swaps(uint32_t n_layer, uint32_t n_expert, const float *freq, const int32_t *slot_of,
                          int max_swaps, double ratio, double min_freq, st_hycache_swap *out) {
    if (max_swaps <= 0) return 0;
    fe *miss = malloc(sizeof *miss * n_expert), *res = malloc(sizeof *res * n_expert);
    // Candidates: at most min(missing, resident) per layer; keep the best max_swaps overall.
    uint64_t cap = (uint64_t)max_swaps * 2 + n_expert, n = 0;
    st_hycache_swap *cand = malloc(sizeof *cand * cap);
    if (!miss || !res || !cand) {
        free(miss), free(res), free(cand);
        return 0;  // no swaps this period; the cache stays valid
    }
    for (uint32_t l = 0; l < n_layer; l++) {
        const float *f = freq + (uint64_t)l * n_expert;
        const int32_t *so = slot_of + (uint64_t)l * n_expert;
        uint32_t nm = 0, nr = 0;
        for (uint32_t e = 0; e < n_expert; e++) {
            if (so[e] == -1) miss[nm++] = (fe){f[e], e};
            else if (so[e] >= 0) res[nr++] = (fe){f[e], e};
        }
        qsort(miss, nm, sizeof *miss, fe_desc);
        qsort(res, nr, sizeof *res, fe_asc);
        for (uint32_t i = 0; i < nm && i < nr && i < (uint32_t)max_swaps; i++) {
            if (!(miss[i].f > ratio * res[i].f + min_freq)) break;
            if (n == cap) {  // keep the best max_swaps so far
                qsort(cand, n, sizeof *cand, swap_by_gain);
                n = (uint64_t)max_swaps;
            }
            cand[n++] = (st_hycache_swap){l, miss[i].e, res[i].e, so[res[i].e], miss[i].f - res[i].f};
        }
    }
    qsort(cand, n, sizeof *cand, swap_by_gain);
    if (n > (uint64_t)max_swaps) n = (uint64_t)max_swaps;
    memcpy(out, cand, sizeof *cand * n);
    free(miss), free(res), free(cand);
    return (int)n;
}

int st_hy_pf_gate_step(st_hy_pf_gate *g, int64_t n_dec, int64_t min_dec, uint64_t served, uint64_t misses) {
    if (n_dec <= 0 || n_dec < min_dec) return 0;
    const double per_served = (double)served / (double)n_dec, per_miss = (double)misses / (double)n_dec;
    if (g->live) {
        if (per_served >= ST_HY_PF_GATE_OFF) return 0;
        g->live = 0;
        g->off_periods = 0;
        return 1;
    }
    if (++g->off_periods < ST_HY_PF_GATE_DWELL || per_miss <= ST_HY_PF_GATE_ON) return 0;
    g->live = 1;
    return 1;
}

int st_hy_split_gate_step(st_hy_split_gate *g, int64_t n_dec, int64_t min_dec, uint64_t misses, double off, double on) {
    if (n_dec <= 0 || n_dec < min_dec) return 0;
    const double per_tok = (double)misses / (double)n_dec;
    if (!g->live) {
        if (per_tok < on) return 0;
        g->live = 1;
        g->quiet = 0;
        return 1;
    }
    g->quiet = per_tok < off ? g->quiet + 1 : 0;
    if (g->quiet < ST_HY_SPLIT_GATE_QUIET) return 0;
    g->live = 0;
    g->quiet = 0;
    return 1;
}

int st_hy_pf_set_refill(uint32_t n_expert, int P, const float *freq, const int32_t *slot_of, int32_t *owner,
                        uint8_t *fresh) {
    int32_t pick[32];
    int n = 0;
    if (P > 32) P = 32;
    for (; n < P; n++) {  // P passes of a selection (P <= 32, n_expert small): the likeliest not yet taken
        int32_t best = -1;
        for (uint32_t e = 0; e < n_expert; e++) {
            if (slot_of[e] >= 0) continue;
            int taken = 0;
            for (int k = 0; k < n; k++) taken |= pick[k] == (int32_t)e;
            if (!taken && (best < 0 || freq[e] > freq[best])) best = (int32_t)e;
        }
        if (best < 0) break;
        pick[n] = best;
    }
    for (int a = 1; a < n; a++)  // expert order
        for (int b = a; b > 0 && pick[b - 1] > pick[b]; b--) {
            const int32_t t = pick[b];
            pick[b] = pick[b - 1];
            pick[b - 1] = t;
        }
    int kept[32] = {0};
    for (int j = 0; j < P; j++) {  // a picked expert already held stays in its slot
        fresh[j] = 0;
        int hit = -1;
        for (int k = 0; k < n && hit < 0; k++)
            if (pick[k] == owner[j] && !kept[k]) hit = k;
        if (hit >= 0) kept[hit] = 1;
        else owner[j] = -1;
    }
    int n_fresh = 0, k = 0;
    for (int j = 0; j < P; j++) {
        if (owner[j] >= 0) continue;
        while (k < n && kept[k]) k++;
        if (k == n) break;
        owner[j] = pick[k++];
        fresh[j] = 1;
        n_fresh++;
    }
    return n_fresh;
}
