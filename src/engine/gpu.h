// The CUDA backend of the engine: the model's weights in VRAM and sessions whose KV cache and forward pass live on
// the GPU. Same math as the CPU path (engine/session.c), kernel by kernel; decode steps are captured once in a CUDA
// graph and replayed, so per-token host work is a few small copies and one graph launch.
#ifndef STRATA_ENGINE_GPU_H
#define STRATA_ENGINE_GPU_H

#include <stdint.h>

#include "engine/model.h"
#include "strata.h"

typedef struct st_gpu_model st_gpu_model;
typedef struct st_gpu_session st_gpu_session;

// Load options. Zeroed = every weight in VRAM (the default path).
typedef struct st_gpu_load_opts {
    double gpu_mem_gib;        // VRAM budget in GiB (--gpu-mem); <= 0: unlimited. A budget below the model's size
                               // loads it in hybrid mode (docs/HYBRID.md): dense weights in VRAM, experts in a host
                               // arena, an expert cache of VRAM slots
    int64_t n_ctx;             // KV positions the budget plans for (<= 0: 4096)
    int kv_elem_bytes;         // 2 (F16, default) or 4
    const char *profile_path;  // routing profile (strata profile) for the cache's initial contents, or NULL
    const char *pack_path;     // pack file (strata pack) for the mmap arena, or NULL
    int arena_mode;            // st_arena_mode: 0 auto (STRATA_ARENA_MMAP), 1 anonymous, 2 the pack mapped
    int cpu_misses;            // hybrid decode computes a share of the misses on the CPU (--pcie-frac); 0: every
                               // miss read by the GPU over PCIe (output bitwise equal to all-in-VRAM)
    double pcie_frac;          // with cpu_misses: share F in [0, 1] of each layer's misses the GPU reads over PCIe
                               // (the rest on the CPU); < 0: auto (measured at load); >= 1: as cpu_misses = 0
    int n_ubatch;              // tokens per prefill step on the GEMM path (-ub); <= 0: STRATA_UBATCH_DEFAULT, or in
                               // hybrid placement the planner's ST_PLAN_PREFILL_CHUNK
    int prefill_cpu;           // hybrid prefill: CPU threads compute a share of each small chunk's non-resident
                               // experts (docs/HYBRID.md); 0: every one staged (bitwise all-in-VRAM; --deterministic)
} st_gpu_load_opts;

// Hybrid placement counters of a session (all zero when the model is entirely in VRAM).
typedef struct st_gpu_hybrid_stats {
    int active;                // 1: hybrid placement
    uint64_t n_slots;          // expert-cache slots in VRAM
    uint64_t n_experts;        // routed experts of the model (n_layer * n_expert)
    uint64_t slot_bytes;       // bytes of one slot
    uint64_t n_staging;        // prefill staging slots
    uint64_t decode_tokens;    // tokens through the decode path (one to eight at a time)
    uint64_t selections;       // (token, layer, expert) selections of those tokens
    uint64_t misses;           // of which the expert was not in VRAM: read by the GPU over PCIe (zero-copy) or
                               // computed by the CPU
    uint64_t miss_bytes;       // expert bytes the GPU read over PCIe for misses
    uint64_t prefill_tokens;   // tokens through the prefill (GEMM) path
    uint64_t prefill_chunks;
    uint64_t staged_bytes;     // bytes copied into prefill staging
    uint64_t swaps;            // experts swapped into the cache between tokens
    uint64_t swap_bytes;
    uint64_t cpu_misses;       // misses computed by the CPU miss workers (--pcie-frac < 1)
    uint64_t cpu_jobs;         // layers whose CPU misses the doorbell thread computed
    double cpu_job_s;          // their time on the CPU side (doorbell seen to answer written)
    double cpu_wait_s;         // time the GPU's combine kernels waited for those answers
    double pcie_frac;          // the share F of misses read over PCIe in use (1: no CPU work)
    int cpu_threads;           // CPU miss worker threads (0: none)
    int pf_per_layer;          // lookahead prefetch (STRATA_HY_PREFETCH): predictions per layer, 0: off
    uint64_t pf_records;       // lookahead prefetch: expert records copied ahead
    uint64_t pf_bytes;         // their bytes (over PCIe, off the critical path)
    uint64_t pf_hits;          // selections served from a prefetched copy (counted as hits)
    uint64_t pf_late;          // layers whose prefetch was skipped: their MoE had started
    uint64_t pf_prefill;       // (layer, expert) records prefill chunks read from prefetch copies, not staged
    uint64_t prefill_cpu;      // (layer, expert) records of prefill chunks computed by the CPU (not staged)
} st_gpu_hybrid_stats;

// 1 when this build has the CUDA backend and a usable device exists (the reason otherwise in st_errmsg).
int st_gpu_available(void);
// Uploads every weight of m to `device`. NULL with st_errmsg (no device, too little memory: needed vs free).
st_gpu_model *st_gpu_model_load(const st_model *m, int device);
// The same with options (NULL = st_gpu_model_load): a VRAM budget, hybrid placement.
st_gpu_model *st_gpu_model_load_opts(const st_model *m, int device, const st_gpu_load_opts *opts);
void st_gpu_model_free(st_gpu_model *g);
const char *st_gpu_device_name(const st_gpu_model *g);
int st_gpu_prefill_chunk(const st_gpu_model *g);  // tokens per prefill (GEMM) step
int st_gpu_device_memory(st_gpu_model *g, size_t *used, size_t *total);

st_gpu_session *st_gpu_session_new(st_gpu_model *g, int64_t n_ctx, int kv_f16);
void st_gpu_session_free(st_gpu_session *s);
// As st_session_eval: tokens at positions n_past.., logits [n][n_vocab] (all_logits) or [n_vocab] (last), or none.
int st_gpu_session_eval(st_gpu_session *s, const int32_t *tokens, int64_t n, float *logits, int all_logits);
void st_gpu_session_truncate(st_gpu_session *s, int64_t n_keep);
// Pipelined generation, sampling on the device (no penalties): st_gpu_gen_begin evaluates tokens[n] as eval does
// and queues the sample of the last one; st_gpu_gen_push queues one step that evaluates the latest queued sample
// (or *forced: teacher forcing) at position n_past (n_past + 1 after it) and queues its sample; st_gpu_gen_pop
// waits for the oldest queued sample. At most 4 samples are queued. st_gpu_gen_end sets n_past (a step the caller
// did not keep is dropped) and names the last n_tail evaluated tokens (pushed samples are only known to the host
// after their pop). Draws at temperature > 0 come from the device's counter-based generator: reproducible per
// seed, not the CPU sampler's sequence. 0 or -1 (st_errmsg).
int st_gpu_gen_begin(st_gpu_session *s, const int32_t *tokens, int64_t n, const strata_sampler_params *p);
int st_gpu_gen_push(st_gpu_session *s, const int32_t *forced);
int st_gpu_gen_pop(st_gpu_session *s, int32_t *token);
void st_gpu_gen_end(st_gpu_session *s, int64_t n_past, const int32_t *tail, int64_t n_tail);
int64_t st_gpu_session_n_past(const st_gpu_session *s);
int64_t st_gpu_session_n_ctx(const st_gpu_session *s);
const int32_t *st_gpu_session_tokens(const st_gpu_session *s);
int st_gpu_session_kv_f16(const st_gpu_session *s);
// The session's hybrid placement counters (out->active == 0 when the model is entirely in VRAM). Reads back the
// device counters first, so call it between evaluations. 0 or -1.
int st_gpu_session_hybrid_stats(st_gpu_session *s, st_gpu_hybrid_stats *out);
// Copies the K/V rows of positions [0, n) of every layer between the device cache and host memory laid out as
// [n_layer] x { K [n_host][k_row bytes], V [n_host][v_row bytes] } (n <= n_host). to_host: 1 device -> host,
// 0 host -> device (the session then holds exactly `tokens[0..n)`). Synchronous. Returns 0 or -1.
int st_gpu_session_kv_transfer(st_gpu_session *s, uint8_t *host, int64_t n, int64_t n_host, const int32_t *tokens,
                               int to_host);

#endif
