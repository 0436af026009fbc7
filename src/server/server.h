// strata serve: an HTTP server (OpenAI- and Anthropic-style APIs) in front of an engine worker process.
//
// Process model: the HTTP process never loads the model. It supervises one worker process (the same binary,
// re-executed as `strata serve --engine-worker FD ...`) that owns the engine, the session (KV cache) and the prompt
// prefix cache, and talks to it over a socketpair (proto.h). When the worker dies or stops answering, the server
// fails the request in flight, kills and reaps the worker, and starts a new one after a back-off; nothing of the old
// engine's state is kept.
//
// TEST HOOKS (environment variables read by the worker; for the test suite only, never for serving users):
//   STRATA_SERVE_TEST_SCRIPT=FILE    a JSON array of scripted completions: strings (used in order, one per request)
//                                    or {"text", "when", "once"?} (used for prompts that contain "when"; only the
//                                    first time with "once": true). The worker
//                                    prefills the real prompt, then feeds the script's tokens instead of sampled ones
//                                    through the normal path (detokenizer, stop strings, events; they are not
//                                    evaluated, so the KV keeps just the prompt), so the server's parsing of model
//                                    text (tool calls, reasoning) is exercised end to end. Requests
//                                    that no entry matches are sampled as usual.
//   STRATA_SERVE_TEST_TEMPLATE=FILE  a chat template that replaces the model's (to test other template families on
//                                    the small demo model).
#ifndef STRATA_SERVER_SERVER_H
#define STRATA_SERVER_SERVER_H

#include <stdbool.h>
#include <stdint.h>

typedef struct st_server_config {
    // model / engine (forwarded to the worker)
    const char *model_path;
    const char *alias;          // model name reported by the API; NULL: the file's base name
    int n_ctx;                  // context tokens; 0: the model's trained context
    int n_threads;              // 0: all CPUs
    const char *device;         // "cpu", "cuda" or "cuda:N"; NULL: CUDA when the build has it and a GPU exists
    bool kv_f32;
    double gpu_mem_gib;         // VRAM budget (hybrid expert placement, docs/HYBRID.md); 0: unlimited
    const char *profile_path;   // routing profile for the expert cache's initial contents, or NULL
    const char *pack_path;      // pack file for arena_mmap, or NULL
    bool arena_mmap;            // host expert arena = the pack mapped read-only
    bool cpu_misses;            // hybrid decode: a share of the misses computed by CPU threads (unless --deterministic)
    double pcie_frac;           // its F (0..1), or -1 for auto (the default)
    bool no_prefill_cpu;        // --no-prefill-cpu or --deterministic: hybrid prefill stages every expert
    int n_ubatch;               // -ub: tokens per GPU prefill step; 0: the engine's default
    bool chatml;                // --chat-format chatml: the built-in ChatML format instead of the model's template
    bool prefix_cache;          // reuse the KV of the longest common prefix with the live session
    int prompt_checkpoints;     // host-RAM snapshots of earlier timelines kept for the prefix cache (0: none)
    int64_t checkpoint_mib;     // their total size limit, MiB
    int checkpoint_min_tokens;  // shorter timelines are not worth a checkpoint
    // HTTP
    const char *host;           // bind address (default 127.0.0.1)
    int port;                   // default 8080; 0: any free port (printed)
    const char *api_key;        // NULL: no auth
    int64_t max_body;           // bytes (413 past it)
    int queue_max;              // requests waiting for the engine (429 past it)
    int max_connections;
    int timeout_s;              // idle connection timeout (MHD) and the limit for receiving one request's body
    int queue_wait_s;           // how long a request may wait for a (re)loading engine before 503
    double keepalive_s;         // SSE keep-alive comment interval while no tokens flow
    // supervision
    double watchdog_s;          // busy with no message, or idle without answering a ping, this long: kill it
    double load_timeout_s;      // a worker not ready after this long is killed
    double backoff_min_s, backoff_max_s;
    // worker mode (set by the hidden --engine-worker flag)
    int worker_fd;              // -1: run the HTTP server
    int argc;                   // the serve command line, forwarded to workers
    char **argv;
} st_server_config;

void st_server_config_defaults(st_server_config *c);
// The HTTP server; returns the process exit code (runs until SIGINT/SIGTERM).
int st_server_main(const st_server_config *c);
// The engine worker (fd: its end of the socketpair); returns the process exit code.
int st_worker_main(const st_server_config *c);

#endif
