// strata info --plan: where a model's weights go under a VRAM budget (place/plan.h): dense weights, KV cache,
// compute scratch, expert-cache slots in VRAM, and the host expert arena. Works from a GGUF, or from a preset shape
// and quantization mix without writing the file (--preset NAME --type MIX).
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "engine/model.h"
#include "model/make_model.h"
#include "model/mix.h"
#include "place/arena.h"
#include "place/pack.h"
#include "place/plan.h"
#include "place/profile.h"
#include "util/err.h"
#include "util/log.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: strata info --plan (-m MODEL.gguf | --preset NAME --type MIX) [--gpu-mem GiB] [-c CTX]\n"
            "                   [-ctk f16|f32] [--profile FILE] [--pack FILE] [--arena-mmap] [--json]\n"
            "\n"
            "Prints the hybrid placement plan: the VRAM the dense weights (attention, norms, routers, embeddings,\n"
            "LM head), the KV cache, the compute scratch and the CUDA runtime need, how many fixed-size expert-cache\n"
            "slots fit in the rest of the budget, the host expert arena, and which experts the cache starts with\n"
            "(all of the first layers', which the lookahead prefetch predicts worst or not at all; then from a\n"
            "routing profile, hottest first, otherwise spread evenly over the other layers, lowest ids). When every\n"
            "expert fits, the plan says all experts stay in VRAM. Exit status 1 when the budget cannot hold the\n"
            "dense weights, KV cache and scratch (the message gives the minimum and each part).\n"
            "\n"
            "options:\n"
            "  -m, --model FILE       the GGUF (or give it as the only positional argument)\n"
            "  --preset NAME          plan a make-model preset shape instead of a file (with --type MIX)\n"
            "  --type MIX             quantization mix for --preset (Q4_K_M, ...)\n"
            "  --gpu-mem GiB          VRAM budget per GPU (default: unlimited)\n"
            "  -c, --ctx-size N       context length of the KV cache (default: the trained context)\n"
            "  -ctk, --cache-type T   KV cache element type f16 (default) or f32\n"
            "  --profile FILE         routing profile (strata profile) for the initial cache contents\n"
            "  --pack FILE            pack file (strata pack) for the mmap arena; checked against the model\n"
            "  --arena-mmap           host arena = the pack mapped read-only (also STRATA_ARENA_MMAP=1)\n"
            "  --staging N            expert slots reserved for streaming prefill (default 2 x experts per token)\n"
            "  --reserve MiB          VRAM for the CUDA context and library workspaces (default %llu)\n"
            "  -ub, --ubatch-size N   prefill chunk the scratch is sized for (default %d; also --chunk)\n"
            "  --json                 machine-readable output\n"
            "  -h, --help             this text\n",
            ST_PLAN_RESERVE_DEFAULT >> 20, ST_PLAN_PREFILL_CHUNK);
}

// A JSON string literal of s (quotes, backslashes and control characters escaped).
static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static double gib(uint64_t b) { return (double)b / (double)(1ull << 30); }
// "1.23 GiB" / "12.0 MiB" in one of a few rotating buffers (several per printf).
static const char *fb(uint64_t b) {
    static char bufs[8][32];
    static int k;
    k = (k + 1) % 8;
    return st_fmt_bytes(bufs[k], sizeof bufs[k], (double)b);
}

int cmd_info_plan(int argc, char **argv) {
    const char *model = NULL, *preset = NULL, *mix = NULL, *profile_path = NULL, *pack_path = NULL;
    bool kv_f32 = false, arena_mmap = st_arena_mode_from_env() == ST_ARENA_MMAP, json = false;
    st_plan_params pp;
    st_plan_params_default(&pp);
    st_args a = {argc, argv, 1, "info --plan", false};
    for (; a.i < argc && !a.failed; a.i++) {
        const char *s = argv[a.i];
        if (st_args_is(&a, "-h", "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(s, "--plan")) continue;
        else if (st_args_is(&a, "-m", "--model")) model = st_args_str(&a);
        else if (st_args_is(&a, NULL, "--preset")) preset = st_args_str(&a);
        else if (st_args_is(&a, NULL, "--type")) mix = st_args_str(&a);
        else if (st_args_is(&a, NULL, "--gpu-mem")) pp.gpu_mem_gib = st_args_float(&a, 0, 1 << 20);
        else if (st_args_is(&a, "-c", "--ctx-size") || st_args_is(&a, NULL, "--ctx")) pp.n_ctx = st_args_int(&a, 1, 1 << 24);
        else if (st_args_is(&a, "-ctk", "--cache-type")) st_args_cache_type(&a, &kv_f32);
        else if (st_args_is(&a, NULL, "--profile")) profile_path = st_args_str(&a);
        else if (st_args_is(&a, NULL, "--pack")) pack_path = st_args_str(&a);
        else if (st_args_is(&a, NULL, "--arena-mmap")) arena_mmap = true;
        else if (st_args_is(&a, NULL, "--staging")) pp.staging_slots = st_args_int(&a, 0, 1 << 20);
        else if (st_args_is(&a, NULL, "--reserve")) pp.reserve_bytes = st_args_int(&a, 0, 1 << 20) << 20;
        else if (st_args_is(&a, "-ub", "--ubatch-size") || st_args_is(&a, NULL, "--chunk"))
            pp.prefill_chunk = st_args_int(&a, 16, 16384);
        else if (st_args_is(&a, NULL, "--json")) json = true;
        else if (s[0] != '-' && !model) model = s;
        else st_args_unknown(&a);
    }
    if (a.failed) return 2;
    if (!model == !preset) {
        fprintf(stderr, "strata info --plan: give a model (-m FILE) or --preset NAME --type MIX (see --help)\n");
        return 2;
    }
    pp.kv_elem_bytes = kv_f32 ? 4 : 2;
    st_model *m = NULL;
    st_place_desc d;
    memset(&d, 0, sizeof d);
    st_profile prof;
    memset(&prof, 0, sizeof prof);
    st_plan plan;
    memset(&plan, 0, sizeof plan);
    int rc = 1;
    if (model) {
        if (mix) {
            fprintf(stderr, "strata info --plan: --type goes with --preset (a file has its own types)\n");
            return 2;
        }
        m = st_model_load(model);
        if (!m || st_place_desc_from_model(m, &d)) goto fail;
    } else {
        const st_preset *p = st_preset_find(preset);
        int ft = mix ? st_ftype_from_name(mix) : -1;
        if (!p || ft < 0) {
            fprintf(stderr, "strata info --plan: %s '%s'; presets:", p ? "unknown mix" : "unknown preset",
                    p ? (mix ? mix : "(none: give --type)") : preset);
            if (!p)
                for (int i = 0; i < st_preset_count(); i++) fprintf(stderr, " %s", st_preset_at(i)->name);
            else
                fprintf(stderr, " ok; mixes: %s", st_ftype_list());
            fprintf(stderr, "\n");
            return 2;
        }
        char label[128];
        snprintf(label, sizeof label, "preset %s", p->name);
        if (st_place_desc_from_preset(&p->hp, ft, label, &d)) goto fail;
        if (profile_path || pack_path) {
            fprintf(stderr, "strata info --plan: --profile and --pack need a model file (-m) to check against\n");
            goto done;
        }
    }
    if (profile_path) {
        if (st_profile_read(&prof, profile_path, m)) goto fail;
        pp.profile = &prof;
    }
    if (st_plan_compute(&d, &pp, &plan)) goto fail;
    const st_hparams *hp = &d.hp;
    // The arena: checked here so the plan says what the engine would do.
    const char *arena_desc = "anonymous memory in 256 MiB chunks, page-locked chunk by chunk by the CUDA engine";
    char arena_buf[512];
    if (plan.moe && !plan.all_in_vram && arena_mmap) {
        if (!pack_path) {
            fprintf(stderr, "strata info --plan: the mmap arena needs a pack file: run `strata pack -m %s -o "
                            "MODEL.pack` and pass --pack MODEL.pack\n", model ? model : "MODEL.gguf");
            goto done;
        }
        snprintf(arena_buf, sizeof arena_buf, "the pack %s mapped read-only (page cache, not anonymous memory)",
                 pack_path);
        arena_desc = arena_buf;
    }
    if (pack_path && m && plan.moe) {
        st_pack *pk = st_pack_open(pack_path, m);
        if (!pk) goto fail;
        st_pack_close(pk);
    }
    // Expected decode hit rate of the initial contents: with a profile, the share of its selections that hit;
    // without, uniform routing (slots / experts).
    double hit = 0;
    if (plan.moe) {
        if (plan.all_in_vram) hit = 1;
        else if (pp.profile) {
            uint64_t tot = 0, got = 0;
            for (uint64_t i = 0; i < plan.n_experts_total; i++) tot += prof.counts[i];
            for (uint64_t i = 0; i < plan.n_slots; i++)
                got += prof.counts[(uint64_t)plan.initial[i].layer * hp->n_expert + plan.initial[i].expert];
            hit = tot ? (double)got / (double)tot : 0;
        } else hit = (double)plan.n_slots / (double)plan.n_experts_total;
    }
    double miss_per_tok = plan.moe ? (1 - hit) * hp->n_layer * hp->n_expert_used : 0;
    double avg_expert = plan.moe ? (double)plan.experts_bytes / (double)plan.n_experts_total : 0;
    uint32_t rmin = UINT32_MAX, rmax = 0;
    for (uint32_t l = 0; plan.resident && l < hp->n_layer; l++) {
        if (plan.resident[l] < rmin) rmin = plan.resident[l];
        if (plan.resident[l] > rmax) rmax = plan.resident[l];
    }
    if (json) {
        printf("{\"model\": ");
        json_str(d.name);
        printf(", \"budget_bytes\": %" PRIu64 ", \"n_ctx\": %" PRId64 ", \"kv_type\": \"%s\", "
               "\"moe\": %s, \"all_in_vram\": %s, \"dense_bytes\": %" PRIu64 ", \"kv_bytes\": %" PRIu64
               ", \"scratch_bytes\": %" PRIu64 ", \"gemm_scratch_bytes\": %" PRIu64
               ", \"scratch_lent_bytes\": %" PRIu64 ", \"prefill_chunk\": %" PRId64
               ", \"reserve_bytes\": %" PRIu64
               ", \"staging_bytes\": %" PRIu64 ", \"host_map_bytes\": %" PRIu64
               ", \"min_bytes\": %" PRIu64 ", \"slot_bytes\": %" PRIu64 ", \"n_slots\": %" PRIu64
               ", \"prefetch_per_layer\": %u, \"prefetch_share_off\": %s, \"n_prefetch\": %" PRIu64
               ", \"prefetch_bytes\": %" PRIu64
               ", \"cache_bytes\": %" PRIu64 ", \"used_bytes\": %" PRIu64 ", \"n_experts\": %" PRIu64
               ", \"experts_bytes\": %" PRIu64 ", \"arena_bytes\": %" PRIu64 ", \"arena_mode\": \"%s\""
               ", \"expected_hit_rate\": %.6f, \"misses_per_token\": %.3f, \"resident_per_layer\": [",
               plan.budget, plan.n_ctx, plan.kv_elem_bytes == 2 ? "F16" : "F32", plan.moe ? "true" : "false",
               plan.all_in_vram ? "true" : "false", plan.dense_bytes, plan.kv_bytes, plan.scratch_bytes,
               plan.gemm_scratch_bytes, plan.scratch_lent_bytes, plan.prefill_chunk, plan.reserve_bytes,
               plan.staging_bytes, plan.host_map_bytes,
               plan.min_bytes,
               plan.slot_bytes, plan.n_slots,
               plan.prefetch_per_layer, plan.prefetch_share_off ? "true" : "false", plan.n_prefetch, plan.prefetch_bytes, plan.cache_bytes, plan.used_bytes, plan.n_experts_total, plan.experts_bytes, plan.arena_bytes,
               plan.all_in_vram || !plan.moe ? "none" : arena_mmap ? "mmap" : "anonymous", hit, miss_per_tok);
        for (uint32_t l = 0; plan.resident && l < hp->n_layer; l++) printf("%s%u", l ? ", " : "", plan.resident[l]);
        printf("]}\n");
        rc = 0;
        goto done;
    }
    char bud[64];
    if (plan.unlimited) snprintf(bud, sizeof bud, "unlimited");
    else snprintf(bud, sizeof bud, "%s", fb(plan.budget));
    printf("plan for:        %s\n", d.name);
    printf("VRAM budget:     %s per GPU, context %" PRId64 " (%s KV cache)\n", bud, plan.n_ctx,
           plan.kv_elem_bytes == 2 ? "F16" : "F32");
    printf("VRAM:\n");
    printf("  dense weights    %10s  attention, norms, routers, embeddings, LM head\n", fb(plan.dense_bytes));
    printf("  KV cache         %10s  %" PRId64 " positions x %u layers\n", fb(plan.kv_bytes), plan.n_ctx,
           hp->n_layer);
    printf("  compute scratch  %10s  %" PRId64 "-token prefill chunk (activations, GEMM/MoE scratch)%s\n",
           fb(plan.scratch_bytes), plan.prefill_chunk,
           plan.prefill_chunk_lowered ? ", lowered from the default to fit the budget" : "");
    printf("  runtime reserve  %10s  CUDA context, cuBLAS workspace\n", fb(plan.reserve_bytes));
    if (!plan.moe) {
        printf("  total            %10s\n", fb(plan.used_bytes));
        printf("result:          dense model, everything in VRAM (no experts to place)\n");
        rc = 0;
        goto done;
    }
    if (plan.all_in_vram) {
        printf("  experts          %10s  all %" PRIu64 " experts (%u layers x %u)\n", fb(plan.experts_vram_bytes),
               plan.n_experts_total, hp->n_layer, hp->n_expert);
        printf("  total            %10s%s%s\n", fb(plan.used_bytes), plan.unlimited ? "" : " of ",
               plan.unlimited ? "" : bud);
        printf("result:          all experts in VRAM (no expert cache, no host arena)\n");
        rc = 0;
        goto done;
    }
    printf("  prefill staging  %10s  %" PRIu64 " expert slots for streaming prefill\n", fb(plan.staging_bytes),
           plan.n_staging);
    printf("  host arena map   %10s  the GPU's page tables of the %s host arena (zero-copy reads)\n",
           fb(plan.host_map_bytes), fb(plan.arena_bytes));
    if (plan.n_prefetch && plan.prefetch_per_layer < (uint32_t)pp.prefetch_per_layer)
        printf("  prefetch slots   %10s  %" PRIu64 " slots: the lookahead prefetch's %u per layer (of %d: fewer, so "
               "that its own slots fit%s)\n",
               fb(plan.prefetch_bytes), plan.n_prefetch, plan.prefetch_per_layer, pp.prefetch_per_layer,
               plan.prefetch_single_staging ? " beside a single prefill staging buffer" : "");
    else if (plan.n_prefetch)
        printf("  prefetch slots   %10s  %" PRIu64 " slots: the lookahead prefetch's %u per layer\n",
               fb(plan.prefetch_bytes), plan.n_prefetch, plan.prefetch_per_layer);
    else if (plan.prefetch_per_layer)
        printf("  prefetch slots   %10s  the lookahead prefetch's %u per layer in the prefill staging slots\n", fb(0),
               plan.prefetch_per_layer);
    else if (plan.prefetch_share_off)
        printf("  prefetch slots   %10s  none: the cache holds %.0f%% of the experts, the lookahead prefetch is off from "
               "%.0f%% (STRATA_HY_PREFETCH=P keeps it on)\n",
               fb(0), 100.0 * (double)plan.n_slots / (double)plan.n_experts_total, 100.0 * ST_PLAN_PREFETCH_MAX_SHARE);
    if (plan.scratch_lent_bytes)  // (own slots only)
        printf("                   %10s  of them hold the prefill GEMM scratch (counted above; idle in decode)\n",
               fb(plan.scratch_lent_bytes));
    printf("  expert cache     %10s  %" PRIu64 " slots of %s = %.1f%% of %" PRIu64 " experts\n",
           fb(plan.cache_bytes), plan.n_slots, fb(plan.slot_bytes),
           100.0 * (double)plan.n_slots / (double)plan.n_experts_total, plan.n_experts_total);
    printf("  total            %10s of %s (minimum to run: %.2f GiB)\n", fb(plan.used_bytes), bud,
           gib(plan.min_bytes));
    printf("experts:         %u layers x %u, top-%u; %s-%s each (gate+up+down), %s in all\n", hp->n_layer,
           hp->n_expert, hp->n_expert_used, fb(plan.expert_bytes_min), fb(plan.expert_bytes_max),
           fb(plan.experts_bytes));
    printf("host arena:      %s, %s\n", fb(plan.arena_bytes), arena_desc);
    char first[96] = "";  // the first layers' experts come first (ST_PLAN_FIRST_LAYERS; STRATA_HY_FIRST_LAYER=0: not)
    if (plan.first_layers)
        snprintf(first, sizeof first, "the first %u layer%s whole (the lookahead's weakest), then ",
                 plan.first_layers, plan.first_layers > 1 ? "s" : "");
    if (plan.from_profile)
        printf("initial cache:   %shottest first from %s (%" PRIu64 " tokens); %u-%u experts per layer\n", first,
               profile_path, prof.n_tokens, rmin, rmax);
    else
        printf("initial cache:   %sspread evenly over layers, lowest ids first: %u-%u experts per layer\n", first,
               rmin, rmax);
    printf("resident/layer: ");
    for (uint32_t l = 0; l < hp->n_layer; l++) printf(" %u", plan.resident[l]);
    printf("\n");
    printf("decode estimate: hit rate %.1f%% (%s; the initial contents: the adaptive cache%s in use), "
           "%.1f misses per token, %.1f MiB per token from the arena\n",
           100 * hit, pp.profile ? "on the profile's routing" : "uniform routing",
           plan.prefetch_per_layer ? " and the lookahead prefetch raise it" : " raises it", miss_per_tok,
           miss_per_tok * avg_expert / (1 << 20));
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "strata info --plan: %s\n", st_errmsg());
done:
    st_plan_free(&plan);
    st_profile_free(&prof);
    st_place_desc_free(&d);
    st_model_free(m);
    return rc;
}
