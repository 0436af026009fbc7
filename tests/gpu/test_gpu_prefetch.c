// Hybrid lookahead prefetch kernels (cuda/hybrid.h: st_cuda_hy_pf_plan / _copy / _reset, and st_cuda_hy_count's
// progress word and prefetch hits) against a host model of the same rules, on NL layers of NE expert records in
// page-locked host memory mapped into the device (the arena), two resident experts per layer in "cache" slots:
//   scripted   a first plan copies the non-resident predictions into free slots of set m % 3, their entries point
//              at the copies; a second plan keeps what is in place and reassigns a slot (its owner's entry back
//              home); a late plan (progress >= m) changes nothing (no copy, no slot freed); reset
//   random     400 rounds of random layers, predictions (with invalid and duplicate-free ids), copy caps and
//              progress values:
//              after each, every entry is either its home or a prefetch slot whose bytes equal that record and whose
//              owner names it, owners are unique, and the counters match the host model
//   previous   300 random plans with the previous choice on (prev_max): routing counts moved at random (and zeroed
//              with their last view, as the read-back does); the experts whose count moved come before the
//              predictions, their copies kept or made, at most prev_max of them in id order; the same checks, and
//              the device's last view of the counts equals the model's
//   post       300 random rounds of plans and post plans (st_cuda_hy_pf_plan_post: the layer's moved counts only,
//              no progress check, the last view left alone) on random layers; the same checks, and some copy came
//              from a post plan alone
//   count      st_cuda_hy_count writes the progress word and counts the pairs served from prefetch slots; the
//              router launch counting in its last block (st_cuda_router_topk_count, random router and inputs) gives
//              the same ids, weights, counters and progress as st_cuda_router_topk + st_cuda_hy_count
// Record sizes are not multiples of 16 (the copy kernel's tail). Fresh random bytes each run (seed printed;
// STRATA_SEED fixes it). One PASS/FAIL line per check; exit 1 on failure.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "cuda/decode.h"
#include "cuda/hybrid.h"
#include "quant/quant.h"  // ST_TYPE_F32
#include "util/err.h"
#include "util/rng.h"

static uint64_t g_seed;
#include "gpu_check.h"  // CK, CKE

#define NL 7   // layers
#define NE 24  // experts per layer
#define P 6          // predictions = slots per set
#define NSETS 3
#define NRES 2       // resident experts per layer (experts 0 and 1)
#define STRIDE 8192  // slot stride (bytes)

static int g_fail;

static void report(const char *what, int bad, const char *detail) {
    printf("%s %s%s%s\n", bad ? "FAIL" : "PASS", what, detail && detail[0] ? ": " : "", detail ? detail : "");
    g_fail += bad != 0;
}

typedef struct {
    long long rec_bytes[NL];  // per layer, not a multiple of 16
    long long off[NL][3];
    uint8_t *host, *host_dev;  // arena [NL][NE][STRIDE] (records at the start of each)
    uint8_t *slots;            // device: [NL * NRES] cache slots, then NSETS * P prefetch slots
    const void **home_h;       // host [NL][NE][3]
    const void **table_d, **home_d;
    const uint8_t **rec_d;
    long long *meta_d;
    int32_t *owner_d, *work_d, *progress_d;
    uint32_t *done_d;
    unsigned long long *stats_d;
    int32_t *pred_d;
    uint32_t *counts_d, *seen_d;  // [NL][NE] routing counts and the plans' last view of them (previous choice)
    st_hy_pf pf;
    int32_t owner[NSETS * P];  // host model
    uint32_t counts[NL * NE], seen[NL * NE];
} world;

static const uint8_t *pf_slot(const world *w, int i) { return w->slots + (size_t)(NL * NRES + i) * STRIDE; }

static void setup(world *w, st_rng *r) {
    memset(w, 0, sizeof *w);
    for (int l = 0; l < NL; l++) {
        w->rec_bytes[l] = 3000 + 16 * (long long)st_rng_below(r, 300) + 1 + (long long)st_rng_below(r, 15);
        w->off[l][0] = 0, w->off[l][1] = w->rec_bytes[l] / 3, w->off[l][2] = 2 * (w->rec_bytes[l] / 3);
    }
    const size_t arena = (size_t)NL * NE * STRIDE;
    CK(cudaHostAlloc((void **)&w->host, arena, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void **)&w->host_dev, w->host, 0));
    for (size_t i = 0; i < arena; i++) w->host[i] = (uint8_t)st_rng_below(r, 256);
    CK(cudaMalloc((void **)&w->slots, (size_t)(NL * NRES + NSETS * P) * STRIDE));
    CK(cudaMemset(w->slots, 0xee, (size_t)(NL * NRES + NSETS * P) * STRIDE));
    w->home_h = malloc(sizeof(void *) * NL * NE * 3);
    const uint8_t **rec_h = malloc(sizeof(void *) * NL * NE);
    for (int l = 0; l < NL; l++)
        for (int e = 0; e < NE; e++) {
            const size_t idx = (size_t)l * NE + e;
            rec_h[idx] = w->host_dev + idx * STRIDE;
            const uint8_t *base = rec_h[idx];
            if (e < NRES) {  // resident: a cache slot holding the same bytes
                uint8_t *slot = w->slots + (size_t)(l * NRES + e) * STRIDE;
                CK(cudaMemcpy(slot, w->host + idx * STRIDE, (size_t)w->rec_bytes[l], cudaMemcpyHostToDevice));
                base = slot;
            }
            for (int k = 0; k < 3; k++) w->home_h[idx * 3 + k] = base + w->off[l][k];
        }
    long long meta[NL * 4];
    for (int l = 0; l < NL; l++) {
        meta[4 * l] = w->rec_bytes[l];
        for (int k = 0; k < 3; k++) meta[4 * l + 1 + k] = w->off[l][k];
    }
    CK(cudaMalloc((void **)&w->table_d, sizeof(void *) * NL * NE * 3));
    CK(cudaMalloc((void **)&w->home_d, sizeof(void *) * NL * NE * 3));
    CK(cudaMalloc((void **)&w->rec_d, sizeof(void *) * NL * NE));
    CK(cudaMalloc((void **)&w->meta_d, sizeof meta));
    CK(cudaMalloc((void **)&w->owner_d, sizeof(int32_t) * NSETS * P));
    CK(cudaMalloc((void **)&w->work_d, sizeof(int32_t) * (1 + 2 * P)));
    CK(cudaMalloc((void **)&w->progress_d, sizeof(int32_t)));
    CK(cudaMalloc((void **)&w->done_d, sizeof(uint32_t) * P));
    CK(cudaMalloc((void **)&w->stats_d, sizeof(unsigned long long) * 5));
    CK(cudaMalloc((void **)&w->pred_d, sizeof(int32_t) * 32));
    CK(cudaMalloc((void **)&w->counts_d, sizeof(uint32_t) * NL * NE));
    CK(cudaMalloc((void **)&w->seen_d, sizeof(uint32_t) * NL * NE));
    CK(cudaMemset(w->counts_d, 0, sizeof(uint32_t) * NL * NE));
    CK(cudaMemset(w->seen_d, 0, sizeof(uint32_t) * NL * NE));
    CK(cudaMemcpy(w->table_d, w->home_h, sizeof(void *) * NL * NE * 3, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w->home_d, w->home_h, sizeof(void *) * NL * NE * 3, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w->rec_d, rec_h, sizeof(void *) * NL * NE, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w->meta_d, meta, sizeof meta, cudaMemcpyHostToDevice));
    CK(cudaMemset(w->owner_d, 0xff, sizeof(int32_t) * NSETS * P));
    CK(cudaMemset(w->done_d, 0, sizeof(uint32_t) * P));
    CK(cudaMemset(w->stats_d, 0, sizeof(unsigned long long) * 5));
    free(rec_h);
    for (int i = 0; i < NSETS * P; i++) w->owner[i] = -1;
    st_hy_pf *pf = &w->pf;
    pf->table = w->table_d;
    pf->home = w->home_d;
    pf->rec = w->rec_d;
    pf->layer_meta = w->meta_d;
    pf->cache_lo = w->slots;
    pf->cache_hi = w->slots + (size_t)NL * NRES * STRIDE;
    pf->pf_slots = (uint8_t *)pf_slot(w, 0);
    pf->stride = STRIDE;
    pf->owner = w->owner_d;
    pf->work = w->work_d;
    pf->done = w->done_d;
    pf->progress = w->progress_d;
    pf->stats = w->stats_d;
    pf->n_sets = NSETS;
    pf->per_set = P;
    pf->E = NE;
    pf->counts = w->counts_d;  // (read only with prev_max > 0)
    pf->seen = w->seen_d;
}

// The host model of one plan (k_hy_pf_plan's rule): returns the records to copy, updates w->owner (and, with the
// previous choice on, w->seen). A late plan changes nothing. post: a post plan (no predictions, never late, the
// last view not moved).
static int model_plan_mode(world *w, int m, const int32_t *pred, int np, int late, int post, int *restored,
                           int *n_restored) {
    int32_t *own = w->owner + (m % NSETS) * P;
    int keep[P] = {0}, need[P], n_need = 0, n = 0;
    *n_restored = 0;
    if (late && !post) return 0;
    int32_t cand[NE + 32];  // the previous choice (at most prev_max, id order), then the predictions not among it
    int nc = 0, n_sel = 0;
    for (int e = 0; e < NE && w->pf.prev_max > 0; e++) {
        const int idx = m * NE + e;
        const uint32_t cur = w->counts[idx], seen = w->seen[idx];
        if (!post) w->seen[idx] = cur;
        if (cur != seen && cur > 0 && n_sel++ < w->pf.prev_max) cand[nc++] = e;
    }
    const int n_prev = nc;
    for (int i = 0; i < np; i++) {
        int dup = 0;
        for (int j = 0; j < n_prev; j++) dup |= cand[j] == pred[i];
        if (!dup) cand[nc++] = pred[i];
    }
    for (int i = 0; i < nc; i++) {
        const int e = cand[i];
        if (e < 0 || e >= NE || e < NRES) continue;
        int found = -1;
        for (int j = 0; j < P; j++)
            if (own[j] == m * NE + e) found = j;
        if (found >= 0) keep[found] = 1;
        else if (n_need < P && (w->pf.max_copies <= 0 || n_need < w->pf.max_copies)) need[n_need++] = e;
    }
    int slots[P];
    for (int j = 0; j < P && n < n_need; j++) {
        if (keep[j]) continue;
        if (own[j] >= 0) restored[(*n_restored)++] = own[j];
        own[j] = -1;
        slots[n++] = j;
    }
    for (int i = 0; i < n; i++) own[slots[i]] = m * NE + need[i];
    return n;
}
static int model_plan(world *w, int m, const int32_t *pred, int np, int late, int *restored, int *n_restored) {
    return model_plan_mode(w, m, pred, np, late, 0, restored, n_restored);
}

// Every entry is home, or points into the prefetch slot its owner names, whose bytes are the record's.
static int check_world(world *w, char *detail, size_t dn) {
    const void **tab = malloc(sizeof(void *) * NL * NE * 3);
    int32_t own_d[NSETS * P];
    CK(cudaMemcpy(tab, w->table_d, sizeof(void *) * NL * NE * 3, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(own_d, w->owner_d, sizeof own_d, cudaMemcpyDeviceToHost));
    int bad = 0;
    if (memcmp(own_d, w->owner, sizeof own_d)) {
        snprintf(detail, dn, "device owners differ from the host model");
        bad = 1;
    }
    if (!bad && w->pf.prev_max > 0) {
        uint32_t seen_d[NL * NE];
        CK(cudaMemcpy(seen_d, w->seen_d, sizeof seen_d, cudaMemcpyDeviceToHost));
        if (memcmp(seen_d, w->seen, sizeof seen_d)) {
            snprintf(detail, dn, "the device's last view of the routing counts differs from the host model");
            bad = 1;
        }
    }
    uint8_t *buf = malloc(STRIDE);
    for (int l = 0; l < NL && !bad; l++)
        for (int e = 0; e < NE && !bad; e++) {
            const size_t idx = (size_t)l * NE + e;
            if (!memcmp(&tab[idx * 3], &w->home_h[idx * 3], sizeof(void *) * 3)) continue;
            int slot = -1;
            for (int i = 0; i < NSETS * P; i++)
                if ((const uint8_t *)tab[idx * 3] == pf_slot(w, i) + w->off[l][0]) slot = i;
            if (slot < 0 || w->owner[slot] != (int32_t)idx || slot / P != l % NSETS) {
                snprintf(detail, dn, "layer %d expert %d: entry neither home nor its own prefetch slot (slot %d)", l,
                         e, slot);
                bad = 1;
                break;
            }
            for (int k = 1; k < 3; k++)
                if ((const uint8_t *)tab[idx * 3 + k] != pf_slot(w, slot) + w->off[l][k]) bad = 1;
            CK(cudaMemcpy(buf, pf_slot(w, slot), (size_t)w->rec_bytes[l], cudaMemcpyDeviceToHost));
            if (bad || memcmp(buf, w->host + idx * STRIDE, (size_t)w->rec_bytes[l])) {
                snprintf(detail, dn, "layer %d expert %d: slot %d bytes or part addresses differ from the record", l,
                         e, slot);
                bad = 1;
            }
        }
    // An owner is set only with its copy queued: its entry points there.
    for (int i = 0; i < NSETS * P && !bad; i++)
        if (w->owner[i] >= 0 && (const uint8_t *)tab[(size_t)w->owner[i] * 3] != pf_slot(w, i) + w->off[w->owner[i] / NE][0]) {
            snprintf(detail, dn, "slot %d: its owner %d's entry does not point at it", i, w->owner[i]);
            bad = 1;
        }
    for (int i = 0; i < NSETS * P && !bad; i++)
        for (int j = i + 1; j < NSETS * P; j++)
            if (w->owner[i] >= 0 && w->owner[i] == w->owner[j]) {
                snprintf(detail, dn, "record %d owns two slots", w->owner[i]);
                bad = 1;
            }
    free(buf);
    free(tab);
    return bad;
}

// np distinct expert ids in [0, NE), as a router's top-k gives.
static void random_top(st_rng *r, int32_t *pred, int np) {
    for (int i = 0; i < np; i++) {
        int e;
        do {
            e = (int)st_rng_below(r, NE);
            for (int j = 0; j < i; j++)
                if (pred[j] == e) e = -99;
        } while (e == -99);
        pred[i] = e;
    }
}

static void run_plan(world *w, int m, const int32_t *pred, int np, int progress) {
    CK(cudaMemcpy(w->pred_d, pred, sizeof(int32_t) * np, cudaMemcpyHostToDevice));
    if (w->pf.prev_max > 0) CK(cudaMemcpy(w->counts_d, w->counts, sizeof w->counts, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(w->progress_d, &progress, sizeof progress, cudaMemcpyHostToDevice));
    CKE(st_cuda_hy_pf_plan(&w->pf, m, w->pred_d, np, 0));
    CKE(st_cuda_hy_pf_copy(&w->pf, m, 5, 0));
    CK(cudaDeviceSynchronize());
}

// One random round's plan and copies on the device, then the checks against the host model (which the caller has
// stepped): the world, and the copy and late counters. Returns 1 on a failure (detail says what).
static int plan_round(world *w, int m, const int32_t *pred, int np, int progress, unsigned long long copies,
                      unsigned long long lates, int round, char *detail, size_t dn) {
    unsigned long long stats[5];
    run_plan(w, m, pred, np, progress);
    CK(cudaMemcpy(stats, w->stats_d, sizeof stats, cudaMemcpyDeviceToHost));
    if (!check_world(w, detail, dn) && stats[2] == copies && stats[1] == lates) return 0;
    if (!detail[0])
        snprintf(detail, dn, "round %d: copies %llu (model %llu), late %llu (model %llu)", round, stats[2], copies,
                 stats[1], lates);
    return 1;
}

int main(void) {
    const char *env = getenv("STRATA_SEED");
    g_seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
    st_rng r;
    st_rng_init(&r, g_seed, 0);
    int dev = 0;
    if (cudaGetDeviceCount(&dev) != cudaSuccess || dev == 0) {
        printf("test_gpu_prefetch: no CUDA device\n");
        return 1;
    }
    world w;
    setup(&w, &r);
    char detail[256] = "";
    int restored[P], n_restored;
    unsigned long long stats[5];

    // Scripted: layer 1, predictions 0 (resident), 5, 6, 7.
    const int32_t p1[] = {0, 5, 6, 7};
    int n = model_plan(&w, 1, p1, 4, 0, restored, &n_restored);
    run_plan(&w, 1, p1, 4, 0);
    CK(cudaMemcpy(stats, w.stats_d, sizeof stats, cudaMemcpyDeviceToHost));
    int bad = check_world(&w, detail, sizeof detail) || n != 3 || stats[2] != 3 ||
              stats[3] != 3ull * (unsigned long long)w.rec_bytes[1];
    report("plan + copy: 3 non-resident predictions copied into set 1, entries point at the copies", bad, detail);
    // Same layer: 5 and 6 kept, 9 and 10 new; a free slot reused (7's entry back home).
    const int32_t p2[] = {5, 6, 9, 10, 11, 12, 13};
    n = model_plan(&w, 1, p2, 7, 0, restored, &n_restored);
    run_plan(&w, 1, p2, 7, 0);
    CK(cudaMemcpy(stats, w.stats_d, sizeof stats, cudaMemcpyDeviceToHost));
    bad = check_world(&w, detail, sizeof detail) || n != 4 || n_restored != 1 || stats[2] != 7;
    report("second plan: kept records stay, a reassigned slot's owner goes home", bad, detail);
    // Late: layer 4 (set 1 again), progress 4: nothing copied, no slot freed (layer 1's copies stay).
    const int32_t p3[] = {3, 4, 8};
    int32_t owners_before[NSETS * P];
    memcpy(owners_before, w.owner, sizeof owners_before);
    n = model_plan(&w, 4, p3, 3, 1, restored, &n_restored);
    run_plan(&w, 4, p3, 3, 4);
    CK(cudaMemcpy(stats, w.stats_d, sizeof stats, cudaMemcpyDeviceToHost));
    bad = check_world(&w, detail, sizeof detail) || n != 0 || stats[1] != 1 || stats[2] != 7 || n_restored != 0 ||
          memcmp(owners_before, w.owner, sizeof owners_before);
    report("late plan (its layer's MoE started): no copy, no slot freed", bad, detail);

    // Random rounds.
    bad = 0;
    unsigned long long copies = stats[2], lates = stats[1];
    for (int round = 0; round < 400 && !bad; round++) {
        const int m = (int)st_rng_below(&r, NL), np = 1 + (int)st_rng_below(&r, P + 2 > 32 ? 32 : P + 2);
        int32_t pred[32];
        for (int i = 0; i < np; i++) {  // distinct ids, some invalid
            int e;
            do {
                e = (int)st_rng_below(&r, NE + 2) - 1;
                for (int j = 0; j < i; j++)
                    if (pred[j] == e) e = -99;
            } while (e == -99);
            pred[i] = e == NE ? 1000 : e;
        }
        const int late = st_rng_below(&r, 5) == 0;
        static const int caps[] = {0, 1, 2, P};  // STRATA_HY_PREFETCH_MAX: none, or at most 1, 2, P copies
        w.pf.max_copies = caps[st_rng_below(&r, 4)];
        const int progress = late ? m + (int)st_rng_below(&r, 3) : m - 1 - (int)st_rng_below(&r, 2);
        copies += (unsigned long long)model_plan(&w, m, pred, np, late, restored, &n_restored);
        lates += (unsigned long long)late;
        bad = plan_round(&w, m, pred, np, progress, copies, lates, round, detail, sizeof detail);
    }
    report("400 random plans (late ones, invalid ids, copy caps, every layer): entries, slot bytes, owners, counters",
           bad,
           detail);

    // The previous choice first (STRATA_HY_PF_PREV): routing counts moved at random between plans, sometimes zeroed
    // with the plans' last view (the read-back).
    bad = 0;
    w.pf.prev_max = 3;
    int prev_copies = 0;  // copies of experts that only the previous choice named (not predicted)
    for (int round = 0; round < 300 && !bad; round++) {
        const int m = (int)st_rng_below(&r, NL), np = 1 + (int)st_rng_below(&r, P);
        if (st_rng_below(&r, 8) == 0) {
            memset(w.counts, 0, sizeof w.counts);
            memset(w.seen, 0, sizeof w.seen);
            CK(cudaMemset(w.seen_d, 0, sizeof w.seen));
        }
        for (int k = (int)st_rng_below(&r, 6); k > 0; k--) w.counts[m * NE + st_rng_below(&r, NE)] += 1;
        int32_t pred[32];
        random_top(&r, pred, np);
        const int late = st_rng_below(&r, 6) == 0;
        w.pf.max_copies = (int)st_rng_below(&r, 3) * 2;  // none, 2 or 4
        int32_t before[NSETS * P];
        memcpy(before, w.owner, sizeof before);
        copies += (unsigned long long)model_plan(&w, m, pred, np, late, restored, &n_restored);
        lates += (unsigned long long)late;
        for (int j = 0; j < P; j++) {  // a new owner that no prediction named came from the previous choice
            const int32_t o = w.owner[(m % NSETS) * P + j];
            int predicted = 0;
            for (int i = 0; i < np; i++) predicted |= o == m * NE + pred[i];
            prev_copies += o >= 0 && o != before[(m % NSETS) * P + j] && !predicted;
        }
        bad = plan_round(&w, m, pred, np, late ? m : m - 1, copies, lates, round, detail, sizeof detail);
    }
    if (!bad && !prev_copies) snprintf(detail, sizeof detail, "no copy came from the previous choice alone"), bad = 1;
    report("300 random plans with the previous choice first: entries, slot bytes, owners, counters, last view", bad,
           detail);

    // Post plans (STRATA_HY_PF_POST) between plans: a layer's counts move (its token's choice), then its post plan
    // copies the moved experts not in place, leaving the last view for the next plan, which keeps those copies.
    bad = 0;
    int post_copies = 0;
    for (int round = 0; round < 300 && !bad; round++) {
        const int m = (int)st_rng_below(&r, NL), post = st_rng_below(&r, 2) == 0;
        if (st_rng_below(&r, 10) == 0) {
            memset(w.counts, 0, sizeof w.counts);
            memset(w.seen, 0, sizeof w.seen);
            CK(cudaMemset(w.seen_d, 0, sizeof w.seen));
        }
        for (int k = (int)st_rng_below(&r, 6); k > 0; k--) w.counts[m * NE + st_rng_below(&r, NE)] += 1;
        w.pf.max_copies = (int)st_rng_below(&r, 3) * 2;  // none, 2 or 4
        if (!post) {
            const int np = 1 + (int)st_rng_below(&r, P);
            int32_t pred[32];
            random_top(&r, pred, np);
            const int late = st_rng_below(&r, 6) == 0;
            copies += (unsigned long long)model_plan(&w, m, pred, np, late, restored, &n_restored);
            lates += (unsigned long long)late;
            bad = plan_round(&w, m, pred, np, late ? m : m - 1, copies, lates, round, detail, sizeof detail);
            continue;
        }
        const int n_post = model_plan_mode(&w, m, NULL, 0, 0, 1, restored, &n_restored);
        copies += (unsigned long long)n_post;
        post_copies += n_post;
        CK(cudaMemcpy(w.counts_d, w.counts, sizeof w.counts, cudaMemcpyHostToDevice));
        const int progress = m + 5;  // (ignored by a post plan)
        CK(cudaMemcpy(w.progress_d, &progress, sizeof progress, cudaMemcpyHostToDevice));
        CKE(st_cuda_hy_pf_plan_post(&w.pf, m, 0));
        CKE(st_cuda_hy_pf_copy(&w.pf, m, 3, 0));
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(stats, w.stats_d, sizeof stats, cudaMemcpyDeviceToHost));
        if (check_world(&w, detail, sizeof detail) || stats[2] != copies || stats[1] != lates) {
            if (!detail[0])
                snprintf(detail, sizeof detail, "post round %d: copies %llu (model %llu), late %llu (model %llu)",
                         round, stats[2], copies, stats[1], lates);
            bad = 1;
        }
    }
    if (!bad && !post_copies) snprintf(detail, sizeof detail, "no copy came from a post plan"), bad = 1;
    report("300 random plans and post plans: entries, slot bytes, owners, counters, last view", bad, detail);
    w.pf.prev_max = 0;

    // Partial reset (a prefill that borrows the first slots as its second staging buffer): slots [0, cut) home and
    // unowned, the rest as they were.
    {
        int owned[NSETS * P], c = 0;  // cut lies between two owned slots (the 400 plans leave most slots owned)
        for (int i = 0; i < NSETS * P; i++)
            if (w.owner[i] >= 0) owned[c++] = i;
        const int t = c >= 2 ? (int)st_rng_below(&r, (uint32_t)(c - 1)) : 0;
        const int cut = c >= 2 ? owned[t] + 1 + (int)st_rng_below(&r, (uint32_t)(owned[t + 1] - owned[t])) : 1;
        int kept = 0, cleared = 0;
        for (int i = 0; i < NSETS * P; i++) {
            if (w.owner[i] < 0) continue;
            if (i < cut) cleared++, w.owner[i] = -1;
            else kept++;
        }
        CKE(st_cuda_hy_pf_reset(&w.pf, cut, 0));
        CK(cudaDeviceSynchronize());
        detail[0] = 0;
        bad = check_world(&w, detail, sizeof detail);
        if (!detail[0])
            snprintf(detail, sizeof detail, "first %d of %d slots: %d owners cleared, %d kept", cut, NSETS * P, cleared,
                     kept);
        report("partial reset: the first slots' entries home, the others' copies kept", bad || !cleared || !kept,
               detail);
    }

    // Count: progress word and hits (after a reset, so that only this plan's records are prefetched).
    w.pf.max_copies = 0;
    CKE(st_cuda_hy_pf_reset(&w.pf, -1, 0));
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < NSETS * P; i++) w.owner[i] = -1;
    {
        const int m = 2;
        const int32_t pred[] = {14, 15, 16};
        model_plan(&w, m, pred, 3, 0, restored, &n_restored);
        run_plan(&w, m, pred, 3, m - 1);
        int32_t ids[8] = {0, 14, 15, 16, 17, 18, 1, 19}, *ids_d;
        uint32_t *cnt_d, *sel_d;
        unsigned long long *hits_d, hits = 0;
        CK(cudaMalloc((void **)&ids_d, sizeof ids));
        CK(cudaMalloc((void **)&cnt_d, sizeof(uint32_t) * NE));
        CK(cudaMalloc((void **)&sel_d, sizeof(uint32_t) * 2));
        CK(cudaMalloc((void **)&hits_d, sizeof hits));
        CK(cudaMemcpy(ids_d, ids, sizeof ids, cudaMemcpyHostToDevice));
        CK(cudaMemset(cnt_d, 0, sizeof(uint32_t) * NE));
        CK(cudaMemset(sel_d, 0, sizeof(uint32_t) * 2));
        CK(cudaMemset(hits_d, 0, sizeof hits));
        const st_hy_count_pf cp = {w.progress_d, m, w.pf.pf_slots, w.pf.pf_slots + (size_t)NSETS * P * STRIDE, hits_d};
        const st_hy_count_args ca = {NE, (const void *const *)(w.table_d + (size_t)m * NE * 3), w.slots,
                                     w.slots + (size_t)(NL * NRES + NSETS * P) * STRIDE, cnt_d, sel_d, cp};
        CKE(st_cuda_hy_count(ids_d, 8, &ca, 0));
        int32_t progress = -5;
        uint32_t sel[2];
        CK(cudaMemcpy(&progress, w.progress_d, sizeof progress, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(&hits, hits_d, sizeof hits, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(sel, sel_d, sizeof sel, cudaMemcpyDeviceToHost));
        // 0, 1 resident; 14-16 prefetched (hits, not misses); 17-19 in the arena (misses)
        snprintf(detail, sizeof detail, "progress %d, hits %llu, selections %u, misses %u", progress, hits, sel[0],
                 sel[1]);
        report("count: progress word = layer, prefetched selections counted as hits", progress != m || hits != 3 ||
               sel[0] != 8 || sel[1] != 3, detail);

        // The same count by the router launch's last block, against router + count launch, on random routes.
        enum { D = 256, K = 8 };
        float *wr = malloc(sizeof(float) * NE * D), xr[D], *wr_d, *x_d, *logit_d, *wts_d;
        int32_t *rids_d, *rcnt_d;
        for (int i = 0; i < NE * D; i++) wr[i] = st_rng_normal(&r);
        CK(cudaMalloc((void **)&wr_d, sizeof(float) * NE * D));
        CK(cudaMalloc((void **)&x_d, sizeof xr));
        CK(cudaMalloc((void **)&logit_d, sizeof(float) * NE));
        CK(cudaMalloc((void **)&wts_d, sizeof(float) * K));
        CK(cudaMalloc((void **)&rids_d, sizeof(int32_t) * K));
        CK(cudaMalloc((void **)&rcnt_d, sizeof(int32_t) * 16));
        CK(cudaMemset(rcnt_d, 0, sizeof(int32_t) * 16));
        CK(cudaMemcpy(wr_d, wr, sizeof(float) * NE * D, cudaMemcpyHostToDevice));
        int bad_rc = 0;
        for (int round = 0; round < 20 && !bad_rc; round++) {
            for (int i = 0; i < D; i++) xr[i] = st_rng_normal(&r);
            CK(cudaMemcpy(x_d, xr, sizeof xr, cudaMemcpyHostToDevice));
            int32_t ref_ids[K], got_ids[K], prog[2];
            float ref_w[K], got_w[K];
            uint32_t cnt[2][NE], sl[2][2];
            unsigned long long ht[2];
            for (int v = 0; v < 2; v++) {  // v 0: router + count launch; v 1: the router counting
                CK(cudaMemset(cnt_d, 0, sizeof(uint32_t) * NE));
                CK(cudaMemset(sel_d, 0, sizeof(uint32_t) * 2));
                CK(cudaMemset(hits_d, 0, sizeof hits));
                CK(cudaMemset(w.progress_d, 0xff, sizeof(int32_t)));
                if (v == 0) {
                    CKE(st_cuda_router_topk(ST_TYPE_F32, wr_d, D, NE, x_d, 1, K, 1, logit_d, rids_d, wts_d, rcnt_d, 0));
                    CKE(st_cuda_hy_count(rids_d, K, &ca, 0));
                } else {
                    CKE(st_cuda_router_topk_count(ST_TYPE_F32, wr_d, D, NE, x_d, 1, K, 1, logit_d, rids_d, wts_d,
                                                  rcnt_d, &ca, 0));
                }
                CK(cudaMemcpy(v ? got_ids : ref_ids, rids_d, sizeof ref_ids, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(v ? got_w : ref_w, wts_d, sizeof ref_w, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(cnt[v], cnt_d, sizeof cnt[v], cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(sl[v], sel_d, sizeof sl[v], cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(&ht[v], hits_d, sizeof ht[v], cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(&prog[v], w.progress_d, sizeof prog[v], cudaMemcpyDeviceToHost));
            }
            bad_rc = memcmp(ref_ids, got_ids, sizeof ref_ids) || memcmp(ref_w, got_w, sizeof ref_w) ||
                     memcmp(cnt[0], cnt[1], sizeof cnt[0]) || memcmp(sl[0], sl[1], sizeof sl[0]) || ht[0] != ht[1] ||
                     prog[0] != m || prog[1] != m || sl[1][0] != K;
            snprintf(detail, sizeof detail, "round %d: selections %u / %u, misses %u / %u, hits %llu / %llu, "
                     "progress %d / %d", round, sl[0][0], sl[1][0], sl[0][1], sl[1][1], ht[0], ht[1], prog[0], prog[1]);
        }
        report("router counting in its last block == router + count launch (20 random routes)", bad_rc, detail);
        free(wr);
        cudaFree(wr_d), cudaFree(x_d), cudaFree(logit_d), cudaFree(wts_d), cudaFree(rids_d), cudaFree(rcnt_d);
        cudaFree(ids_d), cudaFree(cnt_d), cudaFree(sel_d), cudaFree(hits_d);
    }

    // Reset: every entry home, owners -1.
    CKE(st_cuda_hy_pf_reset(&w.pf, -1, 0));
    CK(cudaDeviceSynchronize());
    for (int i = 0; i < NSETS * P; i++) w.owner[i] = -1;
    detail[0] = 0;
    const void **tab = malloc(sizeof(void *) * NL * NE * 3);
    CK(cudaMemcpy(tab, w.table_d, sizeof(void *) * NL * NE * 3, cudaMemcpyDeviceToHost));
    bad = memcmp(tab, w.home_h, sizeof(void *) * NL * NE * 3) != 0 || check_world(&w, detail, sizeof detail);
    free(tab);
    report("reset: every entry home, no owners", bad, detail);

    printf("%s (seed %llu)\n", g_fail ? "FAILED" : "ALL PASS", (unsigned long long)g_seed);
    return g_fail ? 1 : 0;
}
