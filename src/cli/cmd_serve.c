// strata serve: OpenAI-compatible HTTP server. The flags are parsed here; the server lives in src/server/.
// The same command, with the hidden --engine-worker FD, is the engine worker process the server supervises.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "server/server.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: strata serve -m MODEL [options]\n\n"
            "Serves the model over HTTP with OpenAI-compatible endpoints: POST /v1/chat/completions, /v1/completions,\n"
            "GET /v1/models, /health, /v1/status, /metrics, POST /tokenize, /detokenize. The model runs in a supervised\n"
            "worker process that is restarted (with back-off) when it dies or stops answering; /health is 503 until it\n"
            "is ready. A follow-up turn reuses the KV cache of the longest common token prefix with the last request,\n"
            "or with a checkpoint of an earlier conversation.\n\n"
            "options:\n"
            "  -m, --model FILE          GGUF model (first part of a split model)\n"
            "  -a, --alias NAME          model name the API reports (default: the file name without .gguf)\n"
            "      --host ADDR           address to bind (default 127.0.0.1; 0.0.0.0 exposes it to the network)\n"
            "      --port N              port (default 8080; 0: any free port, printed at start)\n"
            "      --api-key KEY         require 'Authorization: Bearer KEY' or 'x-api-key: KEY' on /v1/*, /tokenize,\n"
            "                            /detokenize (default: the STRATA_API_KEY environment variable, else none)\n"
            "  -c, --ctx-size N          context size in tokens (default 0: the model's trained context, at most 32768)\n"
            "  -t, --threads N           compute threads (default: all CPUs)\n"
            "  -dev, --device DEV        cpu, cuda or cuda:N (default: cuda when the build has it and a GPU exists)\n"
            "  -ctk, --cache-type T      KV cache element type: f16 (default) or f32\n"
            "      --no-prefix-cache     evaluate every prompt from scratch\n"
            "      --prompt-checkpoints N  keep up to N earlier conversations' KV in RAM, so that switching between\n"
            "                            conversations (an agent and its sub-agents) still reuses each one's prefix\n"
            "                            (default 4; 0: only the live session)\n"
            "      --checkpoint-mib M    RAM limit of those checkpoints in MiB (default 1024)\n"
            "      --checkpoint-min-tokens N  conversations shorter than N tokens get no checkpoint (default 256)\n"
            "      --chat-format F       auto (default: the model's chat template) or chatml (built-in ChatML)\n"
            "      --parallel-queue N    requests that may wait for the engine; more get 429 (default 32)\n"
            "      --max-body BYTES      largest request body; larger gets 413 (default 16 MiB)\n"
            "      --timeout S           idle connection timeout and the limit for receiving a request (default 60)\n"
            "      --queue-wait S        how long a request waits for a loading/restarting engine before 503\n"
            "                            (default 120)\n"
            "      --keepalive S         SSE keep-alive comment interval while no tokens flow (default 5)\n"
            "      --watchdog S          kill an engine that makes no progress for S seconds while busy, or does not\n"
            "                            answer a ping for S seconds while idle (default 120)\n"
            "      --load-timeout S      kill an engine that is not ready S seconds after start (default 1800)\n"
            "      --max-connections N   simultaneous HTTP connections (default 256)\n"
            ST_ARGS_HYBRID_HELP
            "                          (with --gpu-mem the budget reserves KV for -c, or 32768 tokens when -c is 0)\n"
            "  -h, --help                this help\n");
}

int cmd_serve(int argc, char **argv) {
    st_server_config c;
    st_server_config_defaults(&c);
    c.argc = argc;
    c.argv = argv;
    st_args a = {argc, argv, 1, "serve", false};
    st_engine_args hy;  // the hybrid placement flags, parsed as every command parses them
    memset(&hy, 0, sizeof hy);
    hy.pcie_frac = 1.0;
    for (; a.i < argc && !a.failed; a.i++) {
        if (st_args_is(&a, "-h", "--help")) {
            usage(stdout);
            return 0;
        } else if (st_args_is(&a, "-m", "--model")) c.model_path = st_args_str(&a);
        else if (st_args_is(&a, "-a", "--alias")) c.alias = st_args_str(&a);
        else if (st_args_is(&a, NULL, "--host")) c.host = st_args_str(&a);
        else if (st_args_is(&a, NULL, "--port")) c.port = (int)st_args_int(&a, 0, 65535);
        else if (st_args_is(&a, NULL, "--api-key")) c.api_key = st_args_str(&a);
        else if (st_args_is(&a, "-c", "--ctx-size")) c.n_ctx = (int)st_args_int(&a, 0, 1 << 30);
        else if (st_args_is(&a, "-t", "--threads")) c.n_threads = (int)st_args_int(&a, 1, 4096);
        else if (st_args_is(&a, "-dev", "--device")) c.device = st_args_str(&a);
        else if (st_args_hybrid(&a, &hy)) {}  // --gpu-mem, --profile, --pack, --arena-mmap, --pcie-frac, --deterministic
        else if (st_args_is(&a, NULL, "--no-prefix-cache")) c.prefix_cache = false;
        else if (st_args_is(&a, NULL, "--prompt-checkpoints")) c.prompt_checkpoints = (int)st_args_int(&a, 0, 4096);
        else if (st_args_is(&a, NULL, "--checkpoint-mib")) c.checkpoint_mib = st_args_int(&a, 0, 1ll << 30);
        else if (st_args_is(&a, NULL, "--checkpoint-min-tokens"))
            c.checkpoint_min_tokens = (int)st_args_int(&a, 1, 1 << 30);
        else if (st_args_is(&a, NULL, "--parallel-queue")) c.queue_max = (int)st_args_int(&a, 1, 1 << 20);
        else if (st_args_is(&a, NULL, "--max-body")) c.max_body = st_args_int(&a, 1024, 1ll << 40);
        else if (st_args_is(&a, NULL, "--timeout")) c.timeout_s = (int)st_args_int(&a, 1, 86400);
        else if (st_args_is(&a, NULL, "--queue-wait")) c.queue_wait_s = (int)st_args_int(&a, 1, 86400);
        else if (st_args_is(&a, NULL, "--keepalive")) c.keepalive_s = st_args_float(&a, 0.1, 3600);
        else if (st_args_is(&a, NULL, "--watchdog")) c.watchdog_s = st_args_float(&a, 1, 86400);
        else if (st_args_is(&a, NULL, "--load-timeout")) c.load_timeout_s = st_args_float(&a, 1, 864000);
        else if (st_args_is(&a, NULL, "--max-connections")) c.max_connections = (int)st_args_int(&a, 1, 1 << 20);
        else if (st_args_is(&a, NULL, "--engine-worker")) c.worker_fd = (int)st_args_int(&a, 0, 1 << 20);
        else if (st_args_is(&a, "-ctk", "--cache-type")) st_args_cache_type(&a, &c.kv_f32);
        else if (st_args_is(&a, NULL, "--chat-format")) {
            const char *t = st_args_str(&a);
            if (!a.failed && !strcmp(t, "chatml")) c.chatml = true;
            else if (!a.failed && strcmp(t, "auto")) {
                fprintf(stderr, "strata serve: --chat-format must be auto or chatml, got '%s'\n", t);
                return 2;
            }
        } else st_args_unknown(&a);
    }
    if (a.failed) return 2;
    c.gpu_mem_gib = hy.gpu_mem_gib;
    c.profile_path = hy.profile;
    c.pack_path = hy.pack;
    c.arena_mmap = hy.arena_mmap;
    st_args_cpu_misses(&hy, &c.cpu_misses, &c.pcie_frac);
    c.no_prefill_cpu = hy.no_prefill_cpu || hy.deterministic;
    c.n_ubatch = st_args_ubatch(&hy);
    if (hy.cpu_misses && hy.deterministic && c.worker_fd < 0)
        fprintf(stderr, "strata serve: --deterministic: ignoring --pcie-frac (every miss is read over PCIe)\n");
    if (!c.model_path) {
        fprintf(stderr, "strata serve: no model given: pass -m MODEL.gguf (see strata serve --help)\n");
        return 2;
    }
    if (!c.api_key) c.api_key = getenv("STRATA_API_KEY");
#ifdef STRATA_HAVE_SERVER
    return c.worker_fd >= 0 ? st_worker_main(&c) : st_server_main(&c);
#else
    fprintf(stderr, "strata serve: this strata was built without the server (libmicrohttpd and jansson were not "
                    "found at configure time)\n");
    return 1;
#endif
}

#ifndef STRATA_HAVE_SERVER
void st_server_config_defaults(st_server_config *c) { memset(c, 0, sizeof *c); }
#endif
