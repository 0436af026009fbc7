// strata run: generate text from a prompt, streaming it, then report prompt and generation speed.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "strata.h"
#include "util/log.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: strata run -m MODEL [-p TEXT | -f FILE] [options]\n\n"
            "Generates text from a prompt with the model and streams it to stdout; prompt and generation speed go to\n"
            "stderr at the end, like llama.cpp.\n\n"
            "options:\n"
            "  -m, --model FILE          GGUF model (first part of a split model)\n"
            "  -p, --prompt TEXT         prompt text\n"
            "  -f, --file FILE           read the prompt from FILE\n"
            "  -n, --n-predict N         tokens to generate (default 256; -1: until end of generation or context)\n"
            "  -c, --ctx-size N          context size in tokens (default 4096; 0: the model's trained context)\n"
            "  -dev, --device DEV        cpu, cuda or cuda:N (default: cuda when available)\n"
            "  -t, --threads N           compute threads (default: all CPUs)\n"
            "      --chat                wrap the prompt as one user turn in the model's chat format\n"
            "  -sys, --system TEXT       system message for --chat\n"
            "      --temp T              temperature (default 0.8; 0: greedy)\n"
            "      --top-k K             top-k (default 40; 0: off)\n"
            "      --top-p P             top-p (default 0.95; 1: off)\n"
            "      --min-p P             min-p (default 0.05; 0: off)\n"
            "      --repeat-penalty F    repetition penalty (default 1.0: off)\n"
            "      --repeat-last-n N     tokens the penalties look back over (default 64)\n"
            "      --presence-penalty F  presence penalty (default 0)\n"
            "      --frequency-penalty F frequency penalty (default 0)\n"
            "  -s, --seed N              sampling seed (default: from the clock; printed)\n"
            "      --stop TEXT           stop when TEXT is generated (repeatable)\n"
            "      --ignore-eos          do not stop at end-of-generation tokens\n"
            "  -ctk, --cache-type T      KV cache element type: f16 (default) or f32\n"
            "      --no-display-prompt   do not echo the prompt\n"
            ST_ARGS_HYBRID_HELP
            "  -h, --help                this help\n");
}

// The built-in chat formats; the server brings full Jinja templates.
static char *chat_wrap(const strata_engine *e, const char *system, const char *user) {
    const char *tmpl = strata_chat_template(e);
    size_t n = strlen(user) + (system ? strlen(system) : 0) + 256;
    char *out = malloc(n);
    if (tmpl && strstr(tmpl, "<|start_header_id|>")) {
        int k = snprintf(out, n, "<|begin_of_text|>");
        if (system) k += snprintf(out + k, n - (size_t)k, "<|start_header_id|>system<|end_header_id|>\n\n%s<|eot_id|>", system);
        snprintf(out + k, n - (size_t)k,
                 "<|start_header_id|>user<|end_header_id|>\n\n%s<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
                 user);
    } else {  // ChatML: SmolLM2, Qwen3
        int k = 0;
        if (system) k += snprintf(out, n, "<|im_start|>system\n%s<|im_end|>\n", system);
        snprintf(out + k, n - (size_t)k, "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", user);
    }
    return out;
}

int cmd_run(int argc, char **argv) {
    const char *prompt = NULL, *prompt_file = NULL, *system = NULL;
    int64_t n_predict = 256, n_ctx = 4096;
    bool chat = false, ignore_eos = false, display_prompt = true, seed_set = false;
    st_engine_args ea = {0};  // KV cache f16 by default
    const char *stops[16];
    int n_stops = 0;
    strata_sampler_params sp = strata_sampler_default_params();
    sp.temperature = 0.8f;
    sp.top_k = 40;
    sp.top_p = 0.95f;
    sp.min_p = 0.05f;
    st_args a = {argc, argv, 1, "run", false};
    for (; a.i < argc && !a.failed; a.i++) {
        if (st_args_is(&a, "-h", "--help")) {
            usage(stdout);
            return 0;
        } else if (st_args_engine(&a, &ea) || st_args_hybrid(&a, &ea) ||
                   st_args_prompt(&a, &prompt, &prompt_file)) continue;
        else if (st_args_is(&a, "-n", "--n-predict")) n_predict = st_args_int(&a, -1, 1 << 30);
        else if (st_args_is(&a, "-c", "--ctx-size")) n_ctx = st_args_int(&a, 0, 1 << 30);
        else if (st_args_is(&a, NULL, "--chat")) chat = true;
        else if (st_args_is(&a, "-sys", "--system")) system = st_args_str(&a);
        else if (st_args_is(&a, NULL, "--temp")) sp.temperature = (float)st_args_float(&a, 0, 100);
        else if (st_args_is(&a, NULL, "--top-k")) sp.top_k = (int32_t)st_args_int(&a, 0, 1 << 30);
        else if (st_args_is(&a, NULL, "--top-p")) sp.top_p = (float)st_args_float(&a, 0, 1);
        else if (st_args_is(&a, NULL, "--min-p")) sp.min_p = (float)st_args_float(&a, 0, 1);
        else if (st_args_is(&a, NULL, "--repeat-penalty")) sp.repeat_penalty = (float)st_args_float(&a, 0.01, 100);
        else if (st_args_is(&a, NULL, "--repeat-last-n")) sp.penalty_last_n = (int32_t)st_args_int(&a, 0, 1 << 20);
        else if (st_args_is(&a, NULL, "--presence-penalty")) sp.presence_penalty = (float)st_args_float(&a, -100, 100);
        else if (st_args_is(&a, NULL, "--frequency-penalty")) sp.frequency_penalty = (float)st_args_float(&a, -100, 100);
        else if (st_args_is(&a, "-s", "--seed")) {
            sp.seed = (uint64_t)st_args_int(&a, 0, INT64_MAX);
            seed_set = true;
        } else if (st_args_is(&a, NULL, "--stop")) {
            const char *s = st_args_str(&a);
            if (n_stops < 16 && *s) stops[n_stops++] = s;
        } else if (st_args_is(&a, NULL, "--ignore-eos")) ignore_eos = true;
        else if (st_args_is(&a, NULL, "--no-display-prompt")) display_prompt = false;
        else st_args_unknown(&a);
    }
    if (a.failed || !st_args_have_model(&a, &ea)) return 2;
    char *file_text = NULL;
    if (st_args_read_prompt(&a, prompt_file, &file_text, &prompt)) return 1;
    if (!prompt) prompt = "";
    if (!seed_set) sp.seed = (uint64_t)time(NULL);

    ea.plan_n_ctx = n_ctx;  // a VRAM budget plans for this context (0: 4096)
    strata_engine *e = st_args_load_engine(&a, &ea);
    if (!e) {
        free(file_text);
        return 1;
    }
    char *text = chat ? chat_wrap(e, system, prompt) : strdup(prompt);
    size_t text_len = strlen(text);
    int32_t cap = (int32_t)(text_len + 16);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)cap);
    int32_t n_prompt = strata_tokenize(e, text, text_len, true, chat, toks, cap);
    int rc = 1;
    strata_session *s = NULL;
    strata_sampler *smp = NULL;
    strata_detok *dt = NULL;
    strata_gen *gen = NULL;
    char *generated = NULL;
    if (n_prompt < 0) {
        fprintf(stderr, "strata run: cannot tokenize the prompt: %s\n", strata_last_error());
        goto done;
    }
    strata_session_params spar = strata_session_default_params();
    spar.n_ctx = (int32_t)n_ctx;
    spar.kv_f32 = ea.kv_f32;
    s = strata_session_new(e, &spar);
    if (!s) {
        fprintf(stderr, "strata run: %s\n", strata_last_error());
        goto done;
    }
    int32_t ctx = strata_session_n_ctx(s);
    if (n_prompt == 0 || n_prompt >= ctx) {
        fprintf(stderr, "strata run: the prompt has %d tokens; it must have 1 to %d (the context is %d; raise -c)\n",
                n_prompt, ctx - 1, ctx);
        goto done;
    }
    smp = strata_sampler_new(&sp);
    dt = strata_detok_new(e);
    if (display_prompt) {
        fputs(text, stdout);
        fflush(stdout);
    }
    for (int32_t i = 0; i < n_prompt; i++) strata_sampler_accept(smp, toks[i]);
    if (n_prompt > 512) st_info("prefill: %d tokens", n_prompt);
    int64_t limit = n_predict < 0 ? ctx - n_prompt : n_predict;
    if (limit > ctx - n_prompt) limit = ctx - n_prompt;
    strata_gen_params gp = strata_gen_default_params();
    gp.n_max = limit > 0 ? (int32_t)limit : 1;
    double t0 = st_now();
    gen = strata_gen_begin(s, smp, toks, n_prompt, &gp);  // evaluates the prompt
    if (!gen) {
        fprintf(stderr, "\nstrata run: %s\n", strata_last_error());
        goto done;
    }
    double t_prompt = st_now() - t0;
    size_t gen_cap = 4096, gen_len = 0;
    generated = calloc(1, gen_cap);
    char piece[1024];
    int64_t n_gen = 0;
    double t1 = st_now();
    bool stopped = false;
    while (n_gen < limit && !stopped) {
        int32_t tok = strata_gen_next(gen);  // (sampled and accepted; the step after it is already running)
        if (tok < 0) {
            fprintf(stderr, "\nstrata run: %s\n", strata_last_error());
            goto done;
        }
        n_gen++;
        if (!ignore_eos && strata_token_is_eog(e, tok)) break;
        int32_t k = strata_detok_push(dt, tok, piece, sizeof piece);
        if (k > 0) {
            if (gen_len + (size_t)k + 1 > gen_cap) {
                gen_cap = 2 * (gen_cap + (size_t)k);
                generated = realloc(generated, gen_cap);
            }
            memcpy(generated + gen_len, piece, (size_t)k + 1);
            gen_len += (size_t)k;
            // Stop strings: print only what cannot be the start of a stop string match.
            for (int j = 0; j < n_stops && !stopped; j++) {
                char *hit = strstr(generated, stops[j]);
                if (hit) {
                    stopped = true;
                    *hit = '\0';
                }
            }
            fputs(stopped ? "" : piece, stdout);
            fflush(stdout);
        }
    }
    double t_gen = st_now() - t1;
    const char *how = strata_gen_pipelined(gen) ? "device sampling, pipelined" : "host sampling";
    if (strata_gen_end(gen)) {
        gen = NULL;
        fprintf(stderr, "\nstrata run: %s\n", strata_last_error());
        goto done;
    }
    gen = NULL;
    int32_t k = strata_detok_flush(dt, piece, sizeof piece);
    if (k > 0 && !stopped) fputs(piece, stdout);
    fputs("\n", stdout);
    fflush(stdout);
    fprintf(stderr, "\nprompt:     %6d tokens in %8.2f ms, %8.2f tok/s\n", n_prompt, t_prompt * 1e3,
            n_prompt / (t_prompt > 0 ? t_prompt : 1e-9));
    fprintf(stderr, "generation: %6lld tokens in %8.2f ms, %8.2f tok/s (seed %llu, %d threads, %s)\n",
            (long long)n_gen, t_gen * 1e3, n_gen / (t_gen > 0 ? t_gen : 1e-9), (unsigned long long)sp.seed,
            strata_n_threads(e), how);
    strata_hybrid_stats hy;
    if (strata_session_hybrid_stats(s, &hy) == 0 && hy.active)
        fprintf(stderr, "hybrid:     %llu of %llu experts in VRAM; decode hit rate %.2f%%, %.1f misses/token, %.4f GB/token "
                        "over PCIe; prefill %.4f GB staged; %llu swaps\n",
                (unsigned long long)hy.n_slots, (unsigned long long)hy.n_experts,
                hy.selections ? 100.0 * (1.0 - (double)hy.misses / (double)hy.selections) : 0.0,
                hy.decode_tokens ? (double)hy.misses / (double)hy.decode_tokens : 0.0,
                hy.decode_tokens ? (double)hy.miss_bytes / (double)hy.decode_tokens / 1e9 : 0.0,
                (double)hy.staged_bytes / 1e9, (unsigned long long)hy.swaps);
    if (hy.active && hy.cpu_threads)
        fprintf(stderr, "hybrid:     --pcie-frac %.3f: %.1f CPU misses/token (%d CPU threads); per layer with CPU "
                        "misses %.1f us on the CPU, %.1f us of GPU waiting\n",
                hy.pcie_frac, hy.decode_tokens ? (double)hy.cpu_misses / (double)hy.decode_tokens : 0.0,
                hy.cpu_threads, hy.cpu_jobs ? 1e6 * hy.cpu_job_s / (double)hy.cpu_jobs : 0.0,
                hy.cpu_jobs ? 1e6 * hy.cpu_wait_s / (double)hy.cpu_jobs : 0.0);
    rc = 0;
done:
    strata_gen_end(gen);
    free(generated);
    strata_detok_free(dt);
    strata_sampler_free(smp);
    strata_session_free(s);
    strata_engine_free(e);
    free(toks);
    free(text);
    free(file_text);
    return rc;
}
