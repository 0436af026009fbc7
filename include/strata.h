// Strata public API.
//
// An *engine* is a loaded, immutable model (weights, tokenizer, compute threads). A *session* is one timeline over
// an engine: it owns a KV cache holding a prefix of tokens, extended by eval and cut back by truncate (which is how a
// prompt-prefix cache reuses work). The CLI, the server and the benchmarks use only this header.
//
// Errors: functions return NULL or a negative value and leave a message for strata_last_error() on the calling
// thread, naming the file, tensor, key or argument at fault.
#ifndef STRATA_H
#define STRATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

const char *strata_version(void);  // "0.1.0"
const char *strata_last_error(void);

// ---- engine ----------------------------------------------------------------------------------------------------

typedef struct strata_engine strata_engine;

typedef struct strata_engine_params {
    const char *model_path;  // GGUF file (first part of a split model)
    int n_threads;           // compute threads; <= 0: all CPUs this process may use
    const char *device;      // "cpu", "cuda" or "cuda:N"; NULL: CUDA when built with it and a GPU exists, else CPU
    // Hybrid expert placement (CUDA, MoE models; docs/HYBRID.md): with a VRAM budget below the model's size, the
    // dense weights and KV cache stay in VRAM, the routed experts live in host memory and the rest of the budget is a
    // cache of experts. Output is the same as with every weight in VRAM (misses are read by the GPU over PCIe).
    double gpu_mem_gib;        // VRAM budget per GPU in GiB; <= 0: unlimited (every weight in VRAM)
    int32_t plan_n_ctx;        // KV positions the budget reserves for sessions (<= 0: 4096)
    bool plan_kv_f32;          // the budget plans for f32 K/V
    const char *profile_path;  // routing profile (strata profile) for the expert cache's initial contents, or NULL
    const char *pack_path;     // pack file (strata pack) for arena_mmap, or NULL
    bool arena_mmap;           // host arena = the pack mapped read-only (also STRATA_ARENA_MMAP=1)
    // CPU misses (hybrid decode, --pcie-frac): a share of each layer's misses is computed by CPU threads while the
    // GPU computes the rest; output then differs slightly from all-in-VRAM (CPU arithmetic). false: every miss is
    // read by the GPU over PCIe and the output is bitwise the all-in-VRAM one (--deterministic). Default true, auto.
    bool cpu_misses;
    double pcie_frac;          // with cpu_misses: share of the misses the GPU reads over PCIe, 0..1; < 0: auto
    // Hybrid prefill in steps of up to 1024 tokens: CPU threads compute a share of each layer's non-resident
    // experts while the rest are staged over PCIe (CPU arithmetic for those). true: every one staged (bitwise the
    // all-in-VRAM output, with cpu_misses false).
    bool no_prefill_cpu;
    int32_t n_ubatch;          // CUDA: tokens per prefill step (-ub); <= 0: STRATA_UBATCH_DEFAULT, in hybrid
                               // placement 4096 (each step streams the experts it needs over PCIe once)
} strata_engine_params;
// The CUDA engine's prefill step with every weight in VRAM (pp16384 on an H200, Qwen3-30B-A3B Q4_K_M: 10,934 tok/s
// at 512, 12,464 at 2048, 12,704 at 4096; 2048 keeps the scratch 160 MiB over 512's).
#define STRATA_UBATCH_DEFAULT 2048

strata_engine_params strata_engine_default_params(void);
strata_engine *strata_engine_load(const strata_engine_params *params);
void strata_engine_free(strata_engine *engine);

int32_t strata_n_vocab(const strata_engine *engine);
int32_t strata_n_ctx_train(const strata_engine *engine);
const char *strata_arch_name(const strata_engine *engine);  // "llama", "qwen3", "qwen3moe"
int strata_n_threads(const strata_engine *engine);
// Tokens the backend evaluates in one prefill step (CUDA: its GEMM chunk, -ub or the hybrid plan's); 0 on the CPU,
// where any split of a prompt costs the same. Callers that evaluate a long prompt in pieces (for progress) should
// use pieces at least this long: in hybrid placement every piece stages the experts it needs over PCIe again.
int32_t strata_prefill_chunk(const strata_engine *engine);
// "CPU" or the GPU's name ("NVIDIA H200").
const char *strata_backend_name(const strata_engine *engine);
// Device memory of a GPU engine in bytes (used by every process, and total). -1 for CPU engines.
int strata_device_memory(const strata_engine *engine, size_t *used, size_t *total);

// ---- tokens ----------------------------------------------------------------------------------------------------

// Tokenizes text. add_special adds BOS/EOS as the model's metadata says; parse_special turns special-token text
// (e.g. "<|im_start|>") into its token. Returns the count, or -(needed) when max_out is too small, or INT32_MIN on
// error.
int32_t strata_tokenize(const strata_engine *engine, const char *text, size_t len, bool add_special,
                        bool parse_special, int32_t *out, int32_t max_out);
// The bytes of one token (may be part of a UTF-8 character). Returns the length, or -(needed) if buf is too small.
int32_t strata_token_to_piece(const strata_engine *engine, int32_t token, char *buf, int32_t buflen);
bool strata_token_is_eog(const strata_engine *engine, int32_t token);  // end of generation (EOS, EOT, ...)
int32_t strata_token_bos(const strata_engine *engine);                 // -1 if none
// The model's tokenizer.chat_template, or NULL.
const char *strata_chat_template(const strata_engine *engine);

// Streaming detokenizer: feeds token ids, yields only complete UTF-8 sequences.
typedef struct strata_detok strata_detok;
strata_detok *strata_detok_new(const strata_engine *engine);
// Appends the text of `token` that is complete so far to buf (NUL-terminated). Returns the byte count written.
int32_t strata_detok_push(strata_detok *d, int32_t token, char *buf, int32_t buflen);
// Flushes whatever is pending (an incomplete tail becomes U+FFFD). Returns the byte count written.
int32_t strata_detok_flush(strata_detok *d, char *buf, int32_t buflen);
void strata_detok_free(strata_detok *d);

// ---- sessions --------------------------------------------------------------------------------------------------

typedef struct strata_session strata_session;

typedef struct strata_session_params {
    int32_t n_ctx;   // KV capacity in tokens; <= 0: the model's trained context
    bool kv_f32;     // float32 K/V (exact, for tests); default IEEE half
} strata_session_params;

strata_session_params strata_session_default_params(void);
strata_session *strata_session_new(strata_engine *engine, const strata_session_params *params);
void strata_session_free(strata_session *session);

// Evaluates tokens after the cached prefix. logits (may be NULL) receives [n][n_vocab] when all_logits, else the
// last token's [n_vocab]. Returns 0, or -1 (context full, bad token) with the cache unchanged.
int strata_session_eval(strata_session *session, const int32_t *tokens, int32_t n, float *logits, bool all_logits);
int32_t strata_session_n_past(const strata_session *session);
int32_t strata_session_n_ctx(const strata_session *session);
const int32_t *strata_session_tokens(const strata_session *session);  // [n_past] cached tokens
void strata_session_truncate(strata_session *session, int32_t n_keep);

// Hybrid expert placement counters of a session since it was created (active = false: every weight is in VRAM or
// the engine runs on the CPU). Call between evaluations. Returns 0, or -1.
typedef struct strata_hybrid_stats {
    bool active;
    uint64_t n_slots;          // experts the VRAM cache holds
    uint64_t n_experts;        // routed experts of the model (layers x experts)
    uint64_t slot_bytes;
    uint64_t n_staging;        // prefill staging slots
    uint64_t decode_tokens;    // tokens evaluated one to eight at a time
    uint64_t selections;       // (token, layer, expert) selections of those tokens
    uint64_t misses;           // selections whose expert was not in VRAM (read over PCIe or computed by the CPU)
    uint64_t miss_bytes;       // bytes the GPU read over PCIe for misses
    uint64_t prefill_tokens;   // tokens evaluated in prefill chunks
    uint64_t prefill_chunks;
    uint64_t staged_bytes;     // bytes copied into VRAM staging for prefill
    uint64_t swaps;            // experts moved into the cache between tokens (adaptive replacement)
    uint64_t swap_bytes;
    uint64_t cpu_misses;       // misses computed by the CPU miss workers (included in misses, not in miss_bytes)
    uint64_t cpu_jobs;         // layers whose CPU misses the workers computed (one-token decode, doorbell)
    double cpu_job_s;          // the workers' time on those layers (request seen to answer written), seconds
    double cpu_wait_s;         // the time the GPU stood still waiting for those answers, seconds
    double pcie_frac;          // share of misses read over PCIe in use (1: none on the CPU)
    int cpu_threads;           // CPU miss worker threads (0: none)
    int prefetch_per_layer;    // lookahead prefetch (STRATA_HY_PREFETCH=P, default 8): predictions per layer, 0: off
    uint64_t prefetch_records; // lookahead prefetch: experts copied ahead of their layer
    uint64_t prefetch_bytes;
    uint64_t prefetch_hits;    // selections served from a prefetched copy (counted as hits, not misses)
    uint64_t prefetch_late;    // layers whose prefetch was dropped because their MoE had already started
    uint64_t prefetch_prefill; // (layer, expert) records prefill chunks read from prefetch copies instead of staging
    uint64_t prefill_cpu;      // (layer, expert) records of prefill chunks computed by CPU threads instead of staging
} strata_hybrid_stats;
int strata_session_hybrid_stats(strata_session *session, strata_hybrid_stats *out);

// ---- snapshots (prompt-prefix checkpoints) ---------------------------------------------------------------------

// A host-memory copy of the first n tokens of a session's KV cache and their token ids, so a prefix evaluated once
// can be put back into a session after the session moved on to another timeline (the server's checkpoints).
typedef struct strata_snapshot strata_snapshot;

// Copies the first n_tokens cached positions (n_tokens <= n_past). NULL on error (CUDA sessions: not implemented
// yet).
strata_snapshot *strata_session_snapshot(strata_session *session, int32_t n_tokens);
// Replaces the session's cache with the snapshot: afterwards it holds exactly the snapshot's tokens. The session
// must belong to the engine the snapshot was taken from, have the same KV element type and n_ctx >= its tokens.
// Returns 0, or -1 with the session unchanged.
int strata_session_restore(strata_session *session, const strata_snapshot *snap);
// As restore, but only the first n_tokens (<= the snapshot's) positions: the session then holds that prefix.
int strata_session_restore_prefix(strata_session *session, const strata_snapshot *snap, int32_t n_tokens);
const int32_t *strata_snapshot_tokens(const strata_snapshot *snap, int32_t *n_tokens);  // [n_tokens] token ids
size_t strata_snapshot_bytes(const strata_snapshot *snap);  // host memory it holds (KV + tokens)
void strata_snapshot_free(strata_snapshot *snap);

// ---- sampling --------------------------------------------------------------------------------------------------

// Order as llama.cpp's default chain: penalties -> top-k -> top-p -> min-p -> temperature -> draw.
typedef struct strata_sampler_params {
    float temperature;        // <= 0: greedy (argmax)
    int32_t top_k;            // <= 0: off
    float top_p;              // >= 1: off
    float min_p;              // <= 0: off
    float repeat_penalty;     // 1: off; divides positive logits / multiplies negative ones of recent tokens
    float presence_penalty;   // 0: off; subtracted once per distinct recent token
    float frequency_penalty;  // 0: off; subtracted per occurrence
    int32_t penalty_last_n;   // recent tokens the penalties look at
    uint64_t seed;
} strata_sampler_params;

typedef struct strata_sampler strata_sampler;
strata_sampler_params strata_sampler_default_params(void);  // greedy, no penalties
strata_sampler *strata_sampler_new(const strata_sampler_params *params);
void strata_sampler_free(strata_sampler *sampler);
void strata_sampler_accept(strata_sampler *sampler, int32_t token);
int32_t strata_sampler_sample(strata_sampler *sampler, const float *logits, int32_t n_vocab);

// ---- generation -------------------------------------------------------------------------------------------------

// Generates tokens one at a time after evaluating `tokens` (a prompt, or what of it is not cached): each
// strata_gen_next returns the next sampled token (and accepts it into the sampler); strata_gen_end finishes. The
// session then holds the evaluated tokens and every returned token but the last, as an eval / sample / eval loop
// leaves it. On a CUDA session with a sampler without penalties, sampling runs on the device and the step that
// evaluates a token is queued before the host reads that token (one step ahead: no logits copy and no host work
// between the GPU's steps; a step the caller did not need is dropped at the end). Otherwise (or with `host`) each
// token is an evaluation plus the host sampler. With temperature > 0 the device draws from its own counter-based
// generator: reproducible for a seed, but not the host sampler's sequence.
typedef struct strata_gen_params {
    int32_t n_max;          // tokens strata_gen_next returns at most (>= 1)
    const int32_t *forced;  // NULL, or [n_max]: the step after token i evaluates forced[i] instead of it (teacher
                            // forcing: benchmarks on llama-bench's random inputs, parity tests)
    bool host;              // one evaluation and one host sample per token (the reference path)
} strata_gen_params;

typedef struct strata_gen strata_gen;
strata_gen_params strata_gen_default_params(void);  // n_max 1
// NULL on error (the session is then as before, or holds the evaluated tokens if only the first sample failed).
strata_gen *strata_gen_begin(strata_session *session, strata_sampler *sampler, const int32_t *tokens, int32_t n,
                             const strata_gen_params *params);
// The next token, or -1: an error, n_max tokens already returned, or the context is full (strata_last_error).
int32_t strata_gen_next(strata_gen *gen);
// Whether the last tokens came from the device-pipelined path (for reports).
bool strata_gen_pipelined(const strata_gen *gen);
// Finishes and frees. Returns 0, or -1 if a step failed (the session then keeps only what was evaluated for sure).
int strata_gen_end(strata_gen *gen);

#ifdef __cplusplus
}
#endif

#endif
