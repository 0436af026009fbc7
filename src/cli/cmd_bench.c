// strata bench: prompt processing (pp) and token generation (tg) speed, with llama-bench's meanings:
// ppN evaluates N tokens in one batch, tgN generates N tokens one at a time, -d DEPTH fills the KV cache with
// DEPTH tokens first (not timed), -r repeats each test and reports mean and standard deviation.
// Achieved memory bandwidth is reported for tg: the bytes one token must read (weights it touches + KV cache).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "engine/internal.h"
#include "strata.h"
#include "util/log.h"
#include "util/rng.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: strata bench -m MODEL [-p N] [-n N] [-d DEPTH] [-r REPS] [-t THREADS] [-o md|json]\n\n"
            "Measures prompt processing (ppN: N tokens in one batch) and token generation (tgN: N tokens one at a\n"
            "time) like llama-bench, on random token ids (fresh ones for every run, as llama-bench draws them),\n"
            "optionally after DEPTH tokens already in the KV cache (the same DEPTH tokens for every run).\n\n"
            "options:\n"
            "  -m, --model FILE       GGUF model\n"
            "  -p, --n-prompt N       prompt tokens for the pp test (default 512; 0: skip)\n"
            "  -n, --n-gen N          generated tokens for the tg test (default 128; 0: skip)\n"
            "  -d, --n-depth N        tokens in the KV cache before each test (default 0)\n"
            "  -r, --repetitions N    repetitions of each test (default 3)\n"
            "  -dev, --device DEV     cpu, cuda or cuda:N (default: cuda when available)\n"
            "  -t, --threads N        compute threads (default: all CPUs)\n"
            "  -ctk, --cache-type T   KV cache element type: f16 (default) or f32\n"
            "  -o, --output FMT       md (default) or json\n"
            "  --tg-mode MODE         gen (default): tg runs the generation path (strata_gen: on a GPU, greedy\n"
            "                         sampling on the device and each step queued before the host reads the last\n"
            "                         token), fed llama-bench's random tokens; eval: one strata_session_eval per\n"
            "                         token with its logits copied to the host and no sampling, as llama-bench does\n"
            "  --repeat-tokens        every run of a test evaluates the same tokens (strata bench before 2026-12-03g;\n"
            "                         a hybrid expert cache then learns the test's own routing over the runs)\n"
            ST_ARGS_HYBRID_HELP
            "  -h, --help             this help\n\n"
            "In hybrid placement (--gpu-mem below the model's size) each test also reports the expert cache: hit rate,\n"
            "misses per token and bytes over PCIe per token (tg), bytes staged into VRAM per token (pp).\n");
}

typedef struct {
    const char *name;
    double mean, sd;      // tok/s
    double gbps;          // achieved GB/s (tg only; 0 otherwise)
    strata_hybrid_stats hy;  // hybrid counters over the timed runs (differences), hy.active when hybrid
} result;

// b - a for the counters (the sizes from b).
static strata_hybrid_stats hy_diff(const strata_hybrid_stats *a, const strata_hybrid_stats *b) {
    strata_hybrid_stats d = *b;
    d.decode_tokens -= a->decode_tokens;
    d.selections -= a->selections;
    d.misses -= a->misses;
    d.miss_bytes -= a->miss_bytes;
    d.prefill_tokens -= a->prefill_tokens;
    d.prefill_chunks -= a->prefill_chunks;
    d.staged_bytes -= a->staged_bytes;
    d.swaps -= a->swaps;
    d.swap_bytes -= a->swap_bytes;
    d.cpu_misses -= a->cpu_misses;
    d.cpu_jobs -= a->cpu_jobs;
    d.cpu_job_s -= a->cpu_job_s;
    d.cpu_wait_s -= a->cpu_wait_s;
    d.prefetch_records -= a->prefetch_records;
    d.prefetch_bytes -= a->prefetch_bytes;
    d.prefetch_hits -= a->prefetch_hits;
    d.prefetch_late -= a->prefetch_late;
    d.prefetch_prefill -= a->prefetch_prefill;
    d.prefill_cpu -= a->prefill_cpu;
    return d;
}

static void hy_add(strata_hybrid_stats *acc, const strata_hybrid_stats *d) {
    strata_hybrid_stats a = *acc;
    *acc = *d;
    acc->decode_tokens += a.decode_tokens;
    acc->selections += a.selections;
    acc->misses += a.misses;
    acc->miss_bytes += a.miss_bytes;
    acc->prefill_tokens += a.prefill_tokens;
    acc->prefill_chunks += a.prefill_chunks;
    acc->staged_bytes += a.staged_bytes;
    acc->swaps += a.swaps;
    acc->swap_bytes += a.swap_bytes;
    acc->cpu_misses += a.cpu_misses;
    acc->cpu_jobs += a.cpu_jobs;
    acc->cpu_job_s += a.cpu_job_s;
    acc->cpu_wait_s += a.cpu_wait_s;
    acc->prefetch_records += a.prefetch_records;
    acc->prefetch_bytes += a.prefetch_bytes;
    acc->prefetch_hits += a.prefetch_hits;
    acc->prefetch_late += a.prefetch_late;
    acc->prefetch_prefill += a.prefetch_prefill;
    acc->prefill_cpu += a.prefill_cpu;
}

// Per-token figures of a hybrid result: hit rate, misses and PCIe bytes per decoded token, staged bytes per
// prefill token.
typedef struct {
    double hit_rate, misses_per_tok, pcie_gb_per_tok, pcie_gbps, staged_gb_per_tok;
    double cpu_misses_per_tok;  // of misses_per_tok, computed by the CPU miss workers (--pcie-frac)
    double cpu_layers_per_tok, cpu_job_us, cpu_wait_us;  // layers with CPU misses; per layer: CPU time, GPU's wait
    double pf_per_tok, pf_hits_per_tok, pf_late_per_tok;  // lookahead prefetch: copies, selections served, late layers
    double pf_prefill_per_chunk, cpu_prefill_per_chunk;  // prefill: records read from prefetch copies / by the CPU
} hy_figs;

static hy_figs hy_figures(const result *r) {
    const strata_hybrid_stats *h = &r->hy;
    double dt = h->decode_tokens ? (double)h->decode_tokens : 1, pt = h->prefill_tokens ? (double)h->prefill_tokens : 1;
    hy_figs f;
    f.hit_rate = h->selections ? 1.0 - (double)h->misses / (double)h->selections : 0;
    f.misses_per_tok = (double)h->misses / dt;
    f.pcie_gb_per_tok = (double)h->miss_bytes / dt / 1e9;
    f.pcie_gbps = h->decode_tokens ? f.pcie_gb_per_tok * r->mean : 0;
    f.staged_gb_per_tok = (double)h->staged_bytes / pt / 1e9;
    f.cpu_misses_per_tok = (double)h->cpu_misses / dt;
    f.cpu_layers_per_tok = (double)h->cpu_jobs / dt;
    f.cpu_job_us = h->cpu_jobs ? 1e6 * h->cpu_job_s / (double)h->cpu_jobs : 0;
    f.cpu_wait_us = h->cpu_jobs ? 1e6 * h->cpu_wait_s / (double)h->cpu_jobs : 0;
    f.pf_per_tok = (double)h->prefetch_records / dt;
    f.pf_hits_per_tok = (double)h->prefetch_hits / dt;
    f.pf_late_per_tok = (double)h->prefetch_late / dt;
    const double ch = h->prefill_chunks ? (double)h->prefill_chunks : 1;
    f.pf_prefill_per_chunk = (double)h->prefetch_prefill / ch;
    f.cpu_prefill_per_chunk = (double)h->prefill_cpu / ch;
    return f;
}

// Bytes one decoded token reads: every non-expert weight, n_used/n_expert of the expert stacks (uniform
// routing), the token's embedding row instead of the whole table (unless tied), and the KV cache at `depth`.
static double bytes_per_token(const strata_engine *e, const st_model *m, int64_t depth, int kv_bytes) {
    const st_hparams *hp = &m->hp;
    double bytes = 0;
    for (uint64_t i = 0; i < m->gguf->n_tensors; i++) {
        const gguf_tensor *t = &m->gguf->tensors[i];
        double b = (double)t->nbytes;
        if (strstr(t->name, "_exps.")) b *= (double)hp->n_expert_used / (double)hp->n_expert;
        if (!strcmp(t->name, "token_embd.weight") && !hp->tied_output) b = b / (double)t->ne[1];
        bytes += b;
    }
    bytes += (double)hp->n_layer * (double)depth * hp->n_head_kv * (hp->head_dim_k + hp->head_dim_v) * kv_bytes;
    (void)e;
    return bytes;
}

int cmd_bench(int argc, char **argv) {
    const char *fmt = "md", *tg_mode = "gen";
    int64_t n_prompt = 512, n_gen = 128, depth = 0, reps = 3;
    bool repeat_tokens = false;
    st_engine_args ea = {0};  // KV cache f16 by default
    st_args a = {argc, argv, 1, "bench", false};
    for (; a.i < argc && !a.failed; a.i++) {
        if (st_args_is(&a, "-h", "--help")) {
            usage(stdout);
            return 0;
        } else if (st_args_engine(&a, &ea) || st_args_hybrid(&a, &ea)) continue;
        else if (st_args_is(&a, "-p", "--n-prompt")) n_prompt = st_args_int(&a, 0, 1 << 20);
        else if (st_args_is(&a, "-n", "--n-gen")) n_gen = st_args_int(&a, 0, 1 << 20);
        else if (st_args_is(&a, "-d", "--n-depth")) depth = st_args_int(&a, 0, 1 << 22);
        else if (st_args_is(&a, "-r", "--repetitions")) reps = st_args_int(&a, 1, 1000);
        else if (st_args_is(&a, "-o", "--output")) fmt = st_args_str(&a);
        else if (st_args_is(&a, NULL, "--tg-mode")) tg_mode = st_args_str(&a);
        else if (st_args_is(&a, NULL, "--repeat-tokens")) repeat_tokens = true;
        else st_args_unknown(&a);
    }
    if (a.failed || !st_args_have_model(&a, &ea)) return 2;
    if (strcmp(fmt, "md") && strcmp(fmt, "json")) {
        fprintf(stderr, "strata bench: -o must be md or json, got '%s'\n", fmt);
        return 2;
    }
    if (strcmp(tg_mode, "gen") && strcmp(tg_mode, "eval")) {
        fprintf(stderr, "strata bench: --tg-mode must be gen or eval, got '%s'\n", tg_mode);
        return 2;
    }
    const bool tg_eval = !strcmp(tg_mode, "eval");
    int64_t n_max = n_prompt > n_gen ? n_prompt : n_gen;
    ea.plan_n_ctx = depth + n_max + 1;  // a VRAM budget plans for exactly the bench's KV cache
    strata_engine *e = st_args_load_engine(&a, &ea);
    if (!e) return 1;
    const st_model *m = strata_engine_model(e);
    int32_t nv = strata_n_vocab(e);
    strata_session_params sp = strata_session_default_params();
    sp.n_ctx = (int32_t)(depth + n_max + 1);
    sp.kv_f32 = ea.kv_f32;
    strata_session *s = strata_session_new(e, &sp);
    if (!s) {
        fprintf(stderr, "strata bench: %s\n", strata_last_error());
        strata_engine_free(e);
        return 1;
    }
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(depth + n_max + 1));
    st_rng rng;
    st_rng_init(&rng, 1234, 0);
    for (int64_t i = 0; i < depth + n_max + 1; i++) toks[i] = (int32_t)st_rng_below(&rng, (uint32_t)nv);
    float *logits = malloc(sizeof(float) * (size_t)nv);
    strata_sampler_params gsp = strata_sampler_default_params();  // greedy
    strata_sampler *greedy = strata_sampler_new(&gsp);
    bool pipelined = false;
    result res[2];
    int n_res = 0;
    char name[2][64];
    int rc = 0;
    for (int test = 0; test < 2 && rc == 0; test++) {
        int64_t n = test == 0 ? n_prompt : n_gen;
        if (n == 0) continue;
        double sum = 0, sum2 = 0;
        strata_hybrid_stats hy_acc, hy0, hy1;
        memset(&hy_acc, 0, sizeof hy_acc);
        for (int64_t r = 0; r < reps + 1 && rc == 0; r++) {  // the first run warms up and is not counted
            // Fresh random tokens after the depth prefix for every run, as llama-bench's std::rand() draws them:
            // with the same tokens each run, the hybrid expert cache and the prefetch's copies would serve the
            // counted runs from what the earlier runs of the same tokens routed (--repeat-tokens does that).
            if (!repeat_tokens && (test > 0 || r > 0))
                for (int64_t i = depth; i < depth + n_max + 1; i++) toks[i] = (int32_t)st_rng_below(&rng, (uint32_t)nv);
            strata_session_truncate(s, 0);
            if (depth > 0 && strata_session_eval(s, toks, (int32_t)depth, NULL, false)) rc = 1;
            if (!rc && strata_session_hybrid_stats(s, &hy0)) rc = 1;  // (reads counters back: outside the timing)
            double t0 = st_now();
            if (test == 0) {
                if (!rc && strata_session_eval(s, toks + depth, (int32_t)n, logits, false)) rc = 1;
            } else if (tg_eval) {
                for (int64_t i = 0; i < n && !rc; i++)
                    if (strata_session_eval(s, toks + depth + i, 1, logits, false)) rc = 1;
            } else {  // n evaluations of the same tokens, each followed by a greedy sample
                strata_gen_params gp = strata_gen_default_params();
                gp.n_max = (int32_t)n;
                gp.forced = toks + depth + 1;
                strata_gen *gen = strata_gen_begin(s, greedy, toks + depth, 1, &gp);
                if (!gen) rc = 1;
                for (int64_t i = 0; i < n && !rc; i++)
                    if (strata_gen_next(gen) < 0) rc = 1;
                pipelined = strata_gen_pipelined(gen);
                if (strata_gen_end(gen)) rc = 1;
            }
            double tps = (double)n / (st_now() - t0);
            if (!rc && strata_session_hybrid_stats(s, &hy1)) rc = 1;
            if (r > 0) {
                sum += tps;
                sum2 += tps * tps;
                if (!rc) {
                    strata_hybrid_stats d = hy_diff(&hy0, &hy1);
                    hy_add(&hy_acc, &d);
                }
            }
        }
        if (rc) {
            fprintf(stderr, "strata bench: %s\n", strata_last_error());
            break;
        }
        double mean = sum / (double)reps, var = sum2 / (double)reps - mean * mean;
        snprintf(name[n_res], sizeof name[n_res], "%s%lld%s", test == 0 ? "pp" : "tg", (long long)n, "");
        if (depth) snprintf(name[n_res] + strlen(name[n_res]), 32, " @ d%lld", (long long)depth);
        res[n_res].name = name[n_res];
        res[n_res].mean = mean;
        res[n_res].sd = var > 0 ? sqrt(var) : 0;
        res[n_res].gbps = test == 1 ? mean * bytes_per_token(e, m, depth + n / 2, ea.kv_f32 ? 4 : 2) / 1e9 : 0;
        res[n_res].hy = hy_acc;
        n_res++;
    }
    if (rc == 0) {
        char size[32];
        st_fmt_bytes(size, sizeof size, (double)m->gguf->total_bytes);
        const char *base = strrchr(ea.model, '/') ? strrchr(ea.model, '/') + 1 : ea.model;
        if (!strcmp(fmt, "md")) {
            printf("| model | size | backend | threads | test | t/s | GB/s |\n");
            printf("| --- | ---: | --- | ---: | --- | ---: | ---: |\n");
            for (int i = 0; i < n_res; i++) {
                printf("| %s %s | %s | %s | %d | %s | %.2f ± %.2f | ", base, strata_arch_name(e), size,
                       strata_backend_name(e), strata_n_threads(e), res[i].name, res[i].mean, res[i].sd);
                if (res[i].gbps > 0) printf("%.1f |\n", res[i].gbps);
                else printf("- |\n");
            }
            for (int i = 0; i < n_res; i++) {
                const strata_hybrid_stats *h = &res[i].hy;
                if (!h->active) continue;
                hy_figs f = hy_figures(&res[i]);
                if (i == 0 || !res[0].hy.active)
                    printf("\nhybrid placement: %llu of %llu experts in VRAM slots (%.1f%%), %llu staging slots, "
                           "--gpu-mem %.2f GiB\n",
                           (unsigned long long)h->n_slots, (unsigned long long)h->n_experts,
                           h->n_experts ? 100.0 * (double)h->n_slots / (double)h->n_experts : 0.0,
                           (unsigned long long)h->n_staging, ea.gpu_mem_gib);
                if (h->decode_tokens)
                    printf("hybrid %s: hit rate %.2f%%, %.1f misses/token, %.4f GB/token over PCIe (%.1f GB/s), "
                           "%llu swaps (%.3f GB)\n",
                           res[i].name, 100.0 * f.hit_rate, f.misses_per_tok, f.pcie_gb_per_tok, f.pcie_gbps,
                           (unsigned long long)h->swaps, (double)h->swap_bytes / 1e9);
                if (h->decode_tokens && h->cpu_threads)
                    printf("hybrid %s: --pcie-frac %.3f: %.1f CPU misses/token (%d CPU threads) in %.1f layers/token: "
                           "%.1f us each on the CPU, the GPU waited %.1f us each\n",
                           res[i].name, h->pcie_frac, f.cpu_misses_per_tok, h->cpu_threads, f.cpu_layers_per_tok,
                           f.cpu_job_us, f.cpu_wait_us);
                if (h->decode_tokens && (h->prefetch_records || h->prefetch_late))
                    printf("hybrid %s: lookahead prefetch: %.1f experts/token copied ahead (%.4f GB/token), %.1f "
                           "selections/token served from them, %.1f layers/token too late\n",
                           res[i].name, f.pf_per_tok, (double)h->prefetch_bytes / (double)h->decode_tokens / 1e9,
                           f.pf_hits_per_tok, f.pf_late_per_tok);
                if (h->prefill_tokens)
                    printf("hybrid %s: %.4f GB staged/token (%.3f GB per %llu-chunk run, %.1f GB/s at %.1f tok/s); "
                           "per chunk %.1f experts read from prefetch copies, %.1f computed by the CPU\n",
                           res[i].name, f.staged_gb_per_tok, (double)h->staged_bytes / 1e9 / (double)reps,
                           (unsigned long long)(h->prefill_chunks / (uint64_t)reps),
                           f.staged_gb_per_tok * res[i].mean, res[i].mean, f.pf_prefill_per_chunk,
                           f.cpu_prefill_per_chunk);
            }
        } else {
            printf("[");
            for (int i = 0; i < n_res; i++) {
                printf("%s\n  {\"model\": \"%s\", \"arch\": \"%s\", \"size_bytes\": %llu, \"backend\": \"%s\", "
                       "\"threads\": %d, \"test\": \"%s\", \"n_depth\": %lld, \"avg_ts\": %.4f, \"stddev_ts\": %.4f, "
                       "\"gbps\": %.3f, \"tokens\": \"%s\"",
                       i ? "," : "", base, strata_arch_name(e), (unsigned long long)m->gguf->total_bytes,
                       strata_backend_name(e), strata_n_threads(e), res[i].name, (long long)depth, res[i].mean, res[i].sd,
                       res[i].gbps, repeat_tokens ? "repeated" : "fresh");
                if (!strncmp(res[i].name, "tg", 2))
                    printf(", \"tg_mode\": \"%s\"", tg_eval ? "eval" : pipelined ? "gen-device" : "gen-host");
                if (!res[i].hy.active) {
                    printf("}");
                    continue;
                }
                const hy_figs f = hy_figures(&res[i]);
                printf(", \"hybrid\": {\"gpu_mem_gib\": %.3f, \"n_slots\": %llu, \"n_experts\": %llu, \"hit_rate\": %.6f, "
                       "\"misses_per_token\": %.3f, \"pcie_gb_per_token\": %.6f, \"staged_gb_per_token\": %.6f, "
                       "\"swaps\": %llu, \"pcie_frac\": %.4f, \"cpu_misses_per_token\": %.3f, \"cpu_threads\": %d, "
                       "\"cpu_layers_per_token\": %.3f, \"cpu_job_us\": %.2f, \"cpu_wait_us\": %.2f, "
                       "\"prefetch_per_token\": %.3f, \"prefetch_hits_per_token\": %.3f, "
                       "\"prefetch_late_per_token\": %.3f, \"prefill_prefetch_records_per_chunk\": %.1f, "
                       "\"prefill_cpu_records_per_chunk\": %.1f}}",
                       ea.gpu_mem_gib, (unsigned long long)res[i].hy.n_slots, (unsigned long long)res[i].hy.n_experts,
                       f.hit_rate, f.misses_per_tok, f.pcie_gb_per_tok, f.staged_gb_per_tok,
                       (unsigned long long)res[i].hy.swaps, res[i].hy.pcie_frac, f.cpu_misses_per_tok,
                       res[i].hy.cpu_threads, f.cpu_layers_per_tok, f.cpu_job_us, f.cpu_wait_us, f.pf_per_tok, f.pf_hits_per_tok, f.pf_late_per_tok,
                       f.pf_prefill_per_chunk, f.cpu_prefill_per_chunk);
            }
            printf("\n]\n");
        }
    }
    if (rc == 0 && repeat_tokens)
        fprintf(stderr, "strata bench: --repeat-tokens: every run evaluated the same tokens\n");
    if (rc == 0 && n_gen > 0)
        fprintf(stderr, "strata bench: tg%lld %s\n", (long long)n_gen,
                tg_eval ? "by one strata_session_eval per token (logits to the host, no sampling)"
                : pipelined ? "by the generation path: greedy sampling on the device, one step queued ahead"
                            : "by the generation path: evaluation and greedy sampling on the host per token");
    strata_sampler_free(greedy);
    free(logits);
    free(toks);
    strata_session_free(s);
    strata_engine_free(e);
    return rc;
}
