// The VRAM budget planner (see plan.h).
#include "place/plan.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/gemm_sizes.h"  // the GEMM engines' scratch, as the engine sizes it
#include "model/mix.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/log.h"

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// ---- model description ------------------------------------------------------------------------------------------

void st_xlayer_init(st_xlayer *x, const st_hparams *hp, int tg, int tu, int td) {
    memset(x, 0, sizeof *x);
    x->type[0] = tg, x->type[1] = tu, x->type[2] = td;
    x->bytes[0] = (uint64_t)st_row_size(tg, hp->n_embd) * hp->n_ff_exp;
    x->bytes[1] = (uint64_t)st_row_size(tu, hp->n_embd) * hp->n_ff_exp;
    x->bytes[2] = (uint64_t)st_row_size(td, hp->n_ff_exp) * hp->n_embd;
    x->off[0] = 0;
    x->off[1] = align_up(x->bytes[0], ST_PLAN_ALIGN);
    x->off[2] = x->off[1] + align_up(x->bytes[1], ST_PLAN_ALIGN);
    x->slot_bytes = x->off[2] + align_up(x->bytes[2], ST_PLAN_ALIGN);
}

static uint64_t tensor_bytes(int type, const int64_t *ne) {
    return (uint64_t)st_row_size(type, ne[0]) * (uint64_t)ne[1] * (uint64_t)ne[2] * (uint64_t)ne[3];
}

// Fills d->xl from the expert stacks' types once d->t is complete.
static int build_xlayers(st_place_desc *d) {
    const st_hparams *hp = &d->hp;
    if (hp->n_expert == 0) return 0;
    d->xl = calloc(hp->n_layer, sizeof *d->xl);
    int *ty = malloc(sizeof(int) * 3 * hp->n_layer);
    if (!d->xl || !ty) {
        free(ty);
        return st_err("%s: out of memory", d->name);
    }
    for (uint32_t i = 0; i < 3 * hp->n_layer; i++) ty[i] = -1;
    for (int i = 0; i < d->n_tensors; i++) {
        const st_tensor_spec *s = &d->t[i].spec;
        int part = s->role == ST_T_FFN_GATE_EXPS ? 0 : s->role == ST_T_FFN_UP_EXPS ? 1 : s->role == ST_T_FFN_DOWN_EXPS ? 2 : -1;
        if (part >= 0 && s->layer >= 0 && (uint32_t)s->layer < hp->n_layer) ty[s->layer * 3 + part] = d->t[i].type;
    }
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        if (ty[l * 3] < 0 || ty[l * 3 + 1] < 0 || ty[l * 3 + 2] < 0) {
            free(ty);
            return st_err("%s: layer %u lacks one of ffn_gate_exps / ffn_up_exps / ffn_down_exps", d->name, l);
        }
        st_xlayer_init(&d->xl[l], hp, ty[l * 3], ty[l * 3 + 1], ty[l * 3 + 2]);
    }
    free(ty);
    return 0;
}

int st_place_desc_from_model(const st_model *m, st_place_desc *d) {
    memset(d, 0, sizeof *d);
    d->hp = m->hp;
    snprintf(d->name, sizeof d->name, "%s", m->path ? m->path : "model");
    st_tensor_spec *specs = st_arch_tensors(&m->hp, &d->n_tensors);
    if (!specs) return st_err_prefix("%s: ", d->name);
    d->t = calloc((size_t)d->n_tensors, sizeof *d->t);
    if (!d->t) {
        free(specs);
        return st_err("%s: out of memory", d->name);
    }
    for (int i = 0; i < d->n_tensors; i++) {
        const gguf_tensor *t = gguf_find_tensor(m->gguf, specs[i].name);
        if (!t) {
            free(specs);
            st_place_desc_free(d);
            return st_err("%s: tensor '%s' is missing", m->path, specs[i].name);
        }
        d->t[i].spec = specs[i];
        d->t[i].type = t->type;
        d->t[i].bytes = t->nbytes;
    }
    free(specs);
    if (build_xlayers(d)) {
        st_place_desc_free(d);
        return -1;
    }
    return 0;
}

int st_place_desc_from_preset(const st_hparams *hp_in, int ftype, const char *label, st_place_desc *d) {
    memset(d, 0, sizeof *d);
    d->hp = *hp_in;
    st_hparams_defaults(&d->hp);
    snprintf(d->name, sizeof d->name, "%s %s", label ? label : "model", st_ftype_name(ftype));
    if (st_hparams_check(&d->hp)) return st_err_prefix("%s: ", d->name);
    st_tensor_spec *specs = st_arch_tensors(&d->hp, &d->n_tensors);
    if (!specs) return st_err_prefix("%s: ", d->name);
    d->t = calloc((size_t)d->n_tensors, sizeof *d->t);
    if (!d->t) {
        free(specs);
        return st_err("%s: out of memory", d->name);
    }
    for (int i = 0; i < d->n_tensors; i++) {
        d->t[i].spec = specs[i];
        d->t[i].type = st_mix_tensor_type(ftype, &d->hp, &specs[i]);
        d->t[i].bytes = tensor_bytes(d->t[i].type, specs[i].ne);
    }
    free(specs);
    if (build_xlayers(d)) {
        st_place_desc_free(d);
        return -1;
    }
    return 0;
}

void st_place_desc_free(st_place_desc *d) {
    if (!d) return;
    free(d->t);
    free(d->xl);
    d->t = NULL;
    d->xl = NULL;
    d->n_tensors = 0;
}

// ---- CUDA engine sizes, re-derived on the host -----------------------------------------------------------------

// cuda/qblock.h st_q8_1_row_bytes: 40 bytes per 32 elements, rows padded to 128.
static uint64_t q8_1_row_bytes(uint64_t ne0) { return align_up(ne0 / 32 * 40, 128); }

// gpu.c gemm_scratch_need: the largest GEMM / MoE scratch of one chunk (cuda/gemm_sizes.h), 256-aligned.
uint64_t st_plan_gemm_scratch_bytes(const st_place_desc *d, int64_t chunk) {
    const st_hparams *hp = &d->hp;
    if (chunk <= 0) chunk = ST_PLAN_PREFILL_CHUNK;
    const uint64_t P = (uint64_t)chunk, K = hp->n_expert_used ? hp->n_expert_used : 1;
    uint64_t need = 0;
    int moe_gu = -1;
    for (int i = 0; i < d->n_tensors; i++) {
        const st_place_tensor *t = &d->t[i];
        switch (t->spec.role) {
            case ST_T_ATTN_Q: case ST_T_ATTN_K: case ST_T_ATTN_V: case ST_T_ATTN_OUT: case ST_T_FFN_GATE:
            case ST_T_FFN_UP: case ST_T_FFN_DOWN: case ST_T_OUTPUT: {
                const uint64_t rows = t->spec.role == ST_T_OUTPUT && P > ST_PLAN_LOGITS_ROWS ? ST_PLAN_LOGITS_ROWS : P;
                uint64_t b = st_gemm_scratch_size(ST_GEMM_AUTO, t->type, t->spec.ne[0], t->spec.ne[1], (int64_t)rows);
                if (b > need) need = b;
                break;
            }
            case ST_T_FFN_GATE_EXPS: moe_gu = t->type; break;
            case ST_T_FFN_DOWN_EXPS: {
                const int eng = st_moe_pick(moe_gu, t->type, hp->n_embd, hp->n_ff_exp);
                uint64_t b = st_moe_scratch_size(eng, hp->n_embd, hp->n_ff_exp, (int)hp->n_expert, (int)P, (int)K);
                if (b > need) need = b;
                break;
            }
            default: break;
        }
    }
    if (hp->tied_output) {  // the LM head is token_embd: gemm_scratch_need still sizes a GEMM for it
        for (int i = 0; i < d->n_tensors; i++)
            if (d->t[i].spec.role == ST_T_TOKEN_EMBD) {
                uint64_t b = st_gemm_scratch_size(ST_GEMM_AUTO, d->t[i].type, d->t[i].spec.ne[0], d->t[i].spec.ne[1],
                                                  (int64_t)P);
                if (b > need) need = b;
            }
    }
    return align_up(need, ST_PLAN_ALIGN);
}

uint64_t st_plan_scratch_bytes(const st_place_desc *d, int64_t chunk) {
    const st_hparams *hp = &d->hp;
    if (chunk <= 0) chunk = ST_PLAN_PREFILL_CHUNK;
    const uint64_t P = (uint64_t)chunk, B = ST_PLAN_DECODE_BATCH, K = hp->n_expert_used ? hp->n_expert_used : 1;
    const uint64_t dd = hp->n_embd, kd = (uint64_t)hp->n_head_kv * hp->head_dim_k;
    const uint64_t qd = (uint64_t)hp->n_head * hp->head_dim_k, ff = hp->n_ff > hp->n_ff_exp ? hp->n_ff : hp->n_ff_exp;
    const uint64_t A = ST_PLAN_ALIGN;
    // gpu.c st_gpu_session_new: the per-chunk activations (each its own allocation).
    uint64_t ffn_rows = B * K > P ? B * K : P;
    uint64_t widest = dd > qd ? dd : qd;
    if (ff > widest) widest = ff;
    uint64_t s = align_up(4 * P, A) + align_up(4, A) + 2 * align_up(4 * P * dd, A) + 2 * align_up(4 * P * qd, A) +
                 2 * align_up(4 * P * kd, A) + 2 * align_up(4 * ffn_rows * ff, A) + align_up(4 * ffn_rows * dd, A) +
                 align_up(4 * P * (hp->n_expert ? hp->n_expert : 1), A) + 2 * align_up(4 * P * K, A) +
                 align_up(4 * B * K, A) + align_up(q8_1_row_bytes(widest) * B * K, A) +
                 align_up(4 * B * hp->n_vocab, A);
    s += st_plan_gemm_scratch_bytes(d, chunk);
    // Decode attention workspace: n_head * n_split * (head_dim + 2) floats, n_split = ceil(4 n_sm / n_head_kv).
    uint64_t n_split = (4 * ST_PLAN_SM_COUNT + hp->n_head_kv - 1) / (hp->n_head_kv ? hp->n_head_kv : 1);
    s += align_up(4 * (uint64_t)hp->n_head * n_split * (hp->head_dim_k + 2), A);
    return s;
}

// ---- the plan ---------------------------------------------------------------------------------------------------

static uint32_t own_fit(uint64_t slots, uint64_t keep, uint32_t n_layer, uint32_t p) {
    if (!n_layer || slots <= keep) return 0;
    const uint64_t fit = (slots - keep) / n_layer;
    return fit >= p ? p : fit >= ST_PLAN_PREFETCH_MIN_OWN ? (uint32_t)fit : 0;
}

uint32_t st_plan_prefetch_own_fit(uint64_t slots, uint64_t keep, uint64_t keep_single, uint32_t n_layer, uint32_t p,
                                  bool *single) {
    const uint32_t two = own_fit(slots, keep, n_layer, p);
    const uint32_t below = p < ST_PLAN_PREFETCH_SINGLE_BELOW ? p : ST_PLAN_PREFETCH_SINGLE_BELOW;
    const uint32_t one = two < below && keep_single < keep ? own_fit(slots, keep_single, n_layer, below) : 0;
    if (single) *single = one > two;
    return one > two ? one : two;
}

void st_plan_params_default(st_plan_params *p) {
    memset(p, 0, sizeof *p);
    p->kv_elem_bytes = 2;
    p->staging_slots = -1;
    p->reserve_bytes = -1;
    const char *pf = getenv("STRATA_HY_PREFETCH"), *own = getenv("STRATA_HY_PF_OWN"),
               *lend = getenv("STRATA_HY_PF_SCRATCH");
    p->prefetch_per_layer = pf && *pf ? atoi(pf) : ST_PLAN_PREFETCH_DEFAULT;
    if (p->prefetch_per_layer < 0) p->prefetch_per_layer = 0;
    if (p->prefetch_per_layer > 32) p->prefetch_per_layer = 32;
    p->prefetch_own = !(own && *own && atoi(own) == 0);
    p->scratch_in_prefetch = !(lend && *lend && atoi(lend) == 0);
    p->prefetch_max_share = pf && *pf ? 0.0 : ST_PLAN_PREFETCH_MAX_SHARE;
    const char *pfloor = getenv("STRATA_HY_PROFILE_FLOOR"), *first = getenv("STRATA_HY_FIRST_LAYER");
    p->profile_floor = pfloor && *pfloor && atoi(pfloor) > 0 ? atoi(pfloor) : 0;
    p->first_layers = first && *first ? (atoi(first) > 0 ? (uint32_t)atoi(first) : 0) : ST_PLAN_FIRST_LAYERS;
}

// Whether the lookahead prefetch can predict every MoE layer after the first: their routers are float matrices.
static bool routers_float(const st_place_desc *d) {
    bool any = false;
    for (int i = 0; i < d->n_tensors; i++) {
        const st_place_tensor *t = &d->t[i];
        if (t->spec.tclass != ST_TCLASS_ROUTER || t->spec.layer < 1) continue;
        if (t->type != ST_TYPE_F32 && t->type != ST_TYPE_F16 && t->type != ST_TYPE_BF16) return false;
        any = true;
    }
    return any;
}

static double gib(uint64_t b) { return (double)b / (double)(1ull << 30); }

typedef struct {
    uint64_t count;
    st_plan_slot at;
    bool first;  // a pair of the first layers (ranked before every other)
} ranked;

static int by_count_desc(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->first != y->first) return x->first ? -1 : 1;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    if (x->at.layer != y->at.layer) return x->at.layer < y->at.layer ? -1 : 1;
    return x->at.expert < y->at.expert ? -1 : x->at.expert > y->at.expert;
}

st_plan_slot *st_plan_rank_by_count(const uint64_t *counts, uint32_t n_layer, uint32_t n_expert,
                                    uint32_t first_layers) {
    const uint64_t all = (uint64_t)n_layer * n_expert;
    ranked *r = malloc(sizeof *r * (all ? all : 1));
    st_plan_slot *out = malloc(sizeof *out * (all ? all : 1));
    if (!r || !out) {
        free(r);
        free(out);
        return NULL;
    }
    for (uint64_t i = 0; i < all; i++)
        r[i] = (ranked){counts[i], {(uint32_t)(i / n_expert), (uint32_t)(i % n_expert)}, i / n_expert < first_layers};
    qsort(r, all, sizeof *r, by_count_desc);
    for (uint64_t i = 0; i < all; i++) out[i] = r[i].at;
    free(r);
    return out;
}

uint32_t st_plan_first_layers_fit(uint64_t n, uint32_t n_layer, uint32_t n_expert, uint32_t want) {
    if (want > n_layer) want = n_layer;
    for (uint32_t f = want; f > 0; f--) {
        const uint64_t whole = (uint64_t)f * n_expert;
        if (whole > n) continue;
        // the other layers keep at least half the even share: (n - whole) / (n_layer - f) >= n / n_layer / 2
        if (f == n_layer || (n - whole) * 2 * n_layer >= n * (n_layer - f)) return f;
    }
    return 0;
}

void st_plan_spread_even(uint64_t n, uint32_t n_layer, uint32_t n_expert, uint32_t first_layers, uint32_t *resident) {
    if (first_layers > n_layer) first_layers = n_layer;
    for (uint32_t l = 0; l < first_layers; l++) {
        resident[l] = (uint32_t)(n < n_expert ? n : n_expert);
        n -= resident[l];
    }
    const uint32_t rest = n_layer - first_layers;
    if (!rest) return;
    const uint64_t per = n / rest, extra = n % rest;
    for (uint32_t l = first_layers; l < n_layer; l++) {
        const uint64_t k = per + (l - first_layers < extra ? 1 : 0);
        resident[l] = (uint32_t)(k < n_expert ? k : n_expert);
    }
}

uint64_t *st_plan_counts_floor(const uint64_t *counts, uint32_t n_layer, uint32_t n_expert, uint32_t floor) {
    const uint64_t all = (uint64_t)n_layer * n_expert;
    uint64_t *c = malloc(sizeof *c * (all ? all : 1)), top = 0;
    if (!c) return NULL;
    memcpy(c, counts, sizeof *c * all);
    for (uint64_t i = 0; i < all; i++)
        if (counts[i] > top) top = counts[i];
    if (floor > n_expert) floor = n_expert;
    if (top > UINT64_MAX / 4) floor = 0;  // (no real profile counts that high; raising them would overflow)
    for (uint32_t l = 0; l < n_layer && floor; l++) {
        uint64_t *row = c + (uint64_t)l * n_expert;
        for (uint32_t k = 0; k < floor; k++) {  // the hottest not yet raised (floor passes; n_expert is small)
            int64_t best = -1;
            for (uint32_t e = 0; e < n_expert; e++)
                if (row[e] <= top && (best < 0 || row[e] > row[best])) best = e;
            row[best] += top + 1;
        }
    }
    return c;
}

int st_plan_compute(const st_place_desc *d, const st_plan_params *pp, st_plan *out) {
    st_plan_params def;
    if (!pp) {
        st_plan_params_default(&def);
        pp = &def;
    }
    memset(out, 0, sizeof *out);
    const st_hparams *hp = &d->hp;
    out->moe = hp->n_expert > 0;
    out->n_ctx = pp->n_ctx > 0 ? pp->n_ctx : (hp->n_ctx_train ? hp->n_ctx_train : 4096);
    out->kv_elem_bytes = pp->kv_elem_bytes == 4 ? 4 : 2;
    if (pp->gpu_mem_gib > 0) out->budget = (uint64_t)(pp->gpu_mem_gib * (double)(1ull << 30));
    else out->budget = pp->gpu_budget;
    out->unlimited = out->budget == 0;

    // Dense weights as gpu.c uploads them: each tensor 256-aligned, norm gains as F32, a tied head once.
    for (int i = 0; i < d->n_tensors; i++) {
        const st_place_tensor *t = &d->t[i];
        if (t->spec.expert) {
            out->experts_vram_bytes += align_up(t->bytes, ST_PLAN_ALIGN);
            continue;
        }
        uint64_t b = t->spec.tclass == ST_TCLASS_NORM ? 4 * (uint64_t)t->spec.ne[0] : t->bytes;
        out->dense_bytes += align_up(b, ST_PLAN_ALIGN);
    }
    // gpu.c allocates K and V per layer, each n_ctx * n_head_kv * head_dim_k elements, and the RoPE table
    // (rope_cs: n_ctx * n_rot floats).
    out->kv_bytes = st_hparams_kv_bytes(hp, (uint64_t)out->n_ctx, out->kv_elem_bytes) +
                    align_up(4 * (uint64_t)out->n_ctx * hp->n_rot, ST_PLAN_ALIGN);
    out->prefill_chunk = pp->prefill_chunk > 0 ? pp->prefill_chunk : ST_PLAN_PREFILL_CHUNK;
    out->scratch_bytes = st_plan_scratch_bytes(d, out->prefill_chunk);
    out->gemm_scratch_bytes = st_plan_gemm_scratch_bytes(d, out->prefill_chunk);
    out->reserve_bytes = pp->reserve_bytes >= 0 ? (uint64_t)pp->reserve_bytes : ST_PLAN_RESERVE_DEFAULT;
    uint64_t base = out->dense_bytes + out->kv_bytes + out->scratch_bytes + out->reserve_bytes;

    if (out->moe) {
        out->n_experts_total = (uint64_t)hp->n_layer * hp->n_expert;
        out->expert_bytes_min = UINT64_MAX;
        for (uint32_t l = 0; l < hp->n_layer; l++) {
            const st_xlayer *x = &d->xl[l];
            uint64_t e = x->bytes[0] + x->bytes[1] + x->bytes[2];
            if (e < out->expert_bytes_min) out->expert_bytes_min = e;
            if (e > out->expert_bytes_max) out->expert_bytes_max = e;
            if (x->slot_bytes > out->slot_bytes) out->slot_bytes = x->slot_bytes;
            out->experts_bytes += e * hp->n_expert;
            out->arena_bytes += align_up(x->slot_bytes, 4096) * hp->n_expert;
        }
        // Default: one layer's experts, the least the engine's prefill staging runs with (a chunk can route to every
        // expert of a layer, and the misses of a layer are staged together).
        out->n_staging = pp->staging_slots >= 0 ? (uint64_t)pp->staging_slots : (uint64_t)hp->n_expert;
        out->staging_bytes = out->n_staging * out->slot_bytes;
        out->host_map_bytes = align_up((out->arena_bytes >> 20) * (ST_PLAN_HOST_MAP_PER_GIB >> 10), ST_PLAN_ALIGN);
    }
    // Besides the base, a hybrid session holds the prefill staging and the arena's page tables.
    const uint64_t hy_fixed = out->staging_bytes + out->host_map_bytes;
    out->min_bytes = base + hy_fixed;
    if (pp->profile && out->moe &&
        (pp->profile->n_layer != hp->n_layer || pp->profile->n_expert != hp->n_expert))
        return st_err("%s: the routing profile has %u layers x %u experts, the model %u x %u", d->name,
                      pp->profile->n_layer, pp->profile->n_expert, hp->n_layer, hp->n_expert);

    // Everything in VRAM: no budget, or the budget holds the expert stacks as well.
    if (out->unlimited || base + out->experts_vram_bytes <= out->budget) {
        out->all_in_vram = true;
        out->staging_bytes = 0;
        out->n_staging = 0;
        out->arena_bytes = 0;
        out->host_map_bytes = 0;
        out->n_slots = out->n_experts_total;
        out->used_bytes = base + out->experts_vram_bytes;
        return 0;
    }
    // Hybrid with the default chunk: halve it while its scratch keeps the budget from holding the minimum.
    while (out->moe && pp->prefill_chunk <= 0 && out->budget < out->min_bytes &&
           out->prefill_chunk / 2 >= ST_PLAN_PREFILL_CHUNK_MIN) {
        out->prefill_chunk /= 2;
        out->prefill_chunk_lowered = true;
        const uint64_t s2 = st_plan_scratch_bytes(d, out->prefill_chunk);
        base = base - out->scratch_bytes + s2;
        out->scratch_bytes = s2;
        out->gemm_scratch_bytes = st_plan_gemm_scratch_bytes(d, out->prefill_chunk);
        out->min_bytes = base + hy_fixed;
    }
    if (out->budget < out->min_bytes) {
        char b[7][32], what[224] = "";
        if (out->moe)
            snprintf(what, sizeof what, " + prefill staging %s (%" PRIu64 " expert slots of %s) + host arena page "
                     "tables %s", st_fmt_bytes(b[5], 32, (double)out->staging_bytes), out->n_staging,
                     st_fmt_bytes(b[6], 32, (double)out->slot_bytes),
                     st_fmt_bytes(b[4], 32, (double)out->host_map_bytes));
        return st_err("%s: a VRAM budget of %.2f GiB is too small: at least %.2f GiB (%" PRIu64 " bytes) is needed = "
                      "dense weights %s + KV cache %s (%" PRId64 " positions, %s) + compute scratch %s + CUDA runtime "
                      "reserve %s%s%s",
                      d->name, gib(out->budget), gib(out->min_bytes), out->min_bytes,
                      st_fmt_bytes(b[0], 32, (double)out->dense_bytes), st_fmt_bytes(b[1], 32, (double)out->kv_bytes),
                      out->n_ctx, out->kv_elem_bytes == 2 ? "F16" : "F32",
                      st_fmt_bytes(b[2], 32, (double)out->scratch_bytes),
                      st_fmt_bytes(b[3], 32, (double)out->reserve_bytes), what,
                      out->moe ? "" : " (a dense model has no experts to keep in host memory)");
    }
    // Hybrid: the rest of the budget becomes fixed-size expert slots.
    uint64_t rest = out->budget - out->min_bytes;
    out->n_slots = rest / out->slot_bytes;
    if (out->n_slots >= out->n_experts_total) out->n_slots = out->n_experts_total - 1;  // unreachable in practice
    // The lookahead prefetch: its own n_layer x P slots come out of the cache's share when that leaves one layer's
    // worth of slots for the second prefill staging buffer, with P lowered until they fit (down to
    // ST_PLAN_PREFETCH_MIN_OWN), or beside a single staging buffer where that fits more (st_plan_prefetch_own_fit),
    // else its sets go into the staging slots; none where the cache alone holds prefetch_max_share of the experts.
    // (All or nothing was a cliff: Qwen3-235B-A22B IQ1_M at 16 GiB, where the own sets hold nearly every slot, ran
    // tg128 at 44.4 tok/s with them and at 8.5 with the ~70 MiB of KV cache that a 640-token context adds, which
    // put the sets into the staging: 16 sets shared by 94 layers, each copy evicted before its next use.)
    const bool pf_worth = pp->prefetch_max_share <= 0 ||
                          (double)out->n_slots < pp->prefetch_max_share * (double)out->n_experts_total;
    out->prefetch_share_off = pp->prefetch_per_layer > 0 && !pf_worth;
    if (pp->prefetch_per_layer > 0 && hp->n_layer >= 2 && routers_float(d) && pf_worth) {
        out->prefetch_per_layer = (uint32_t)pp->prefetch_per_layer;
        const uint32_t own_p = pp->prefetch_own ? st_plan_prefetch_own_fit(out->n_slots, hp->n_expert, 0, hp->n_layer,
                                                                          out->prefetch_per_layer,
                                                                          &out->prefetch_single_staging)
                                                : 0;
        if (own_p) {
            const uint64_t own = (uint64_t)hp->n_layer * own_p;
            out->prefetch_per_layer = own_p;
            out->n_prefetch = own;
            out->prefetch_bytes = own * out->slot_bytes;
            out->n_slots -= own;
            // The prefill GEMM / MoE scratch, idle while the prefetch's copies are in use (decode) and those copies
            // dropped before every prefill step, lives in the own slots; the cache gets its bytes. (Engine:
            // st_hybrid_scratch_lend; measured in gpu_hybrid.c at the lend.)
            const uint64_t lent_slots = (out->gemm_scratch_bytes + out->slot_bytes - 1) / out->slot_bytes;
            if (pp->scratch_in_prefetch && lent_slots && own >= lent_slots) {
                out->scratch_lent_bytes = out->gemm_scratch_bytes;
                out->n_slots += out->gemm_scratch_bytes / out->slot_bytes;
                if (out->n_slots >= out->n_experts_total) out->n_slots = out->n_experts_total - 1;
            }
        }
    }
    out->cache_bytes = out->n_slots * out->slot_bytes;
    out->used_bytes = out->min_bytes + out->prefetch_bytes + out->cache_bytes - out->scratch_lent_bytes;
    out->resident = calloc(hp->n_layer, sizeof *out->resident);
    out->initial = calloc(out->n_slots ? out->n_slots : 1, sizeof *out->initial);
    if (!out->resident || !out->initial) {
        st_plan_free(out);
        return st_err("%s: out of memory", d->name);
    }
    out->first_layers = st_plan_first_layers_fit(out->n_slots, hp->n_layer, hp->n_expert, pp->first_layers);
    if (pp->profile) {
        // Hottest (layer, expert) pairs first; every layer routes the same number of tokens, so counts compare
        // across layers. Ties: lower layer, then lower id (deterministic).
        out->from_profile = true;
        // With a floor, each layer's hottest per_floor first (at most the even share of what the first layers
        // leave), then the hottest of the rest.
        uint32_t per_floor = pp->profile_floor > 0 ? (uint32_t)pp->profile_floor : 0;
        const uint32_t fl = out->first_layers;
        const uint64_t first_all = (uint64_t)fl * hp->n_expert;
        const uint64_t share = fl < hp->n_layer && out->n_slots > first_all
                                   ? (out->n_slots - first_all) / (hp->n_layer - fl) : 0;
        if (per_floor > share) per_floor = (uint32_t)share;
        out->profile_floor = per_floor;
        uint64_t *fc = per_floor ? st_plan_counts_floor(pp->profile->counts, hp->n_layer, hp->n_expert, per_floor)
                                 : NULL;
        st_plan_slot *r = per_floor && !fc ? NULL
                                           : st_plan_rank_by_count(fc ? fc : pp->profile->counts, hp->n_layer,
                                                                   hp->n_expert, fl);
        free(fc);
        if (!r) {
            st_plan_free(out);
            return st_err("%s: out of memory", d->name);
        }
        for (uint64_t i = 0; i < out->n_slots; i++) {
            out->initial[i] = r[i];
            out->resident[r[i].layer]++;
        }
        free(r);
    } else {
        // No profile: the first layers' experts, then the slots spread evenly over the others, lowest ids first.
        st_plan_spread_even(out->n_slots, hp->n_layer, hp->n_expert, out->first_layers, out->resident);
        uint64_t k = 0;
        for (uint32_t l = 0; l < hp->n_layer; l++)
            for (uint32_t e = 0; e < out->resident[l]; e++) out->initial[k++] = (st_plan_slot){l, e};
    }
    return 0;
}

void st_plan_free(st_plan *p) {
    if (!p) return;
    free(p->initial);
    free(p->resident);
    p->initial = NULL;
    p->resident = NULL;
}
