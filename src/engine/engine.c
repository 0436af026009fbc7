// The public API (include/strata.h) over the model, tokenizer, sessions and sampler.
#include <stdlib.h>
#include <string.h>

#include "engine/gpu.h"
#include "engine/internal.h"
#include "engine/model.h"
#include "engine/sampler.h"
#include "engine/session.h"
#include "strata.h"
#include "tokenizer/tokenizer.h"
#include "util/err.h"
#include "util/log.h"
#include "util/pool.h"

struct strata_engine {
    st_model *model;
    st_tokenizer *tok;
    st_pool *pool;
    st_gpu_model *gpu;    // weights in VRAM when the CUDA backend runs this engine, else NULL
    char *chat_template;  // tokenizer.chat_template or NULL
};

// A session runs on the engine's backend: exactly one of cpu / gpu is set.
struct strata_session {
    strata_engine *engine;
    st_session *cpu;
    st_gpu_session *gpu;
};

struct strata_sampler {
    st_sampler s;
};

struct strata_detok {
    st_detok_stream *stream;
};

const char *strata_version(void) { return "0.1.0"; }
const char *strata_last_error(void) { return st_errmsg(); }

strata_engine_params strata_engine_default_params(void) {
    strata_engine_params p = {0};
    p.cpu_misses = true;  // hybrid decode: CPU threads take a measured share of the misses (docs/HYBRID.md)
    p.pcie_frac = -1;
    return p;
}

// Parses "cpu" / "cuda" / "cuda:N"; NULL means CUDA if available. Loads the weights into VRAM for CUDA (hybrid
// placement under a budget: gpu_hybrid.h).
static int pick_gpu(strata_engine *e, const char *device, const strata_engine_params *p) {
    int want_gpu = 0, index = 0;
    if (!device || !*device) {
        want_gpu = -1;  // if available
    } else if (!strcmp(device, "cpu")) {
        return 0;
    } else if (!strncmp(device, "cuda", 4) && (device[4] == '\0' || device[4] == ':')) {
        want_gpu = 1;
        if (device[4] == ':') {
            char *end;
            long v = strtol(device + 5, &end, 10);
            if (*end || v < 0 || end == device + 5)
                return st_err("device '%s': expected cpu, cuda or cuda:N", device);
            index = (int)v;
        }
    } else {
        return st_err("device '%s': expected cpu, cuda or cuda:N", device);
    }
    if (!st_gpu_available()) {
        if (want_gpu == 1) return st_err_prefix("device '%s': ", device);
        st_err_clear();
        return 0;
    }
    st_gpu_load_opts o;
    memset(&o, 0, sizeof o);
    o.gpu_mem_gib = p->gpu_mem_gib;
    o.n_ctx = p->plan_n_ctx;
    o.kv_elem_bytes = p->plan_kv_f32 ? 4 : 2;
    o.profile_path = p->profile_path;
    o.pack_path = p->pack_path;
    o.arena_mode = p->arena_mmap ? 2 : 0;  // st_arena_mode: ST_ARENA_MMAP, or AUTO (STRATA_ARENA_MMAP)
    o.cpu_misses = p->cpu_misses;
    o.pcie_frac = p->pcie_frac;
    o.prefill_cpu = !p->no_prefill_cpu;
    o.n_ubatch = p->n_ubatch;
    e->gpu = st_gpu_model_load_opts(e->model, index, &o);
    // A budget was asked for: falling back to the CPU silently would hide the error.
    if (!e->gpu && p->gpu_mem_gib > 0) return -1;
    if (!e->gpu) {
        if (want_gpu == 1) return -1;
        st_warn("the CUDA backend cannot run this model (%s); using the CPU", st_errmsg());
        st_err_clear();
    }
    return 0;
}

strata_engine *strata_engine_load(const strata_engine_params *p) {
    if (!p || !p->model_path) return st_err("strata_engine_load: no model path"), NULL;
    strata_engine *e = calloc(1, sizeof *e);
    if (!e) return st_err("out of memory"), NULL;
    e->model = st_model_load(p->model_path);
    if (!e->model) goto fail;
    e->tok = st_tokenizer_load(e->model->gguf);
    if (!e->tok) {
        st_err_prefix("%s: tokenizer: ", p->model_path);
        goto fail;
    }
    if (st_tokenizer_n_vocab(e->tok) > (int)e->model->hp.n_vocab) {
        st_err("%s: the tokenizer has %d tokens but the model's embedding only %u", p->model_path,
               st_tokenizer_n_vocab(e->tok), e->model->hp.n_vocab);
        goto fail;
    }
    e->chat_template = gguf_get_str_dup(e->model->gguf, "tokenizer.chat_template");
    if (pick_gpu(e, p->device, p)) goto fail;
    if (!e->gpu && p->gpu_mem_gib > 0) st_warn("--gpu-mem is ignored: the engine runs on the CPU");
    e->pool = st_pool_create(p->n_threads);
    if (!e->pool) {
        st_err("cannot start %d compute threads", p->n_threads);
        goto fail;
    }
    return e;
fail:
    strata_engine_free(e);
    return NULL;
}

void strata_engine_free(strata_engine *e) {
    if (!e) return;
    st_gpu_model_free(e->gpu);
    st_pool_destroy(e->pool);
    st_tokenizer_free(e->tok);
    st_model_free(e->model);
    free(e->chat_template);
    free(e);
}

int32_t strata_n_vocab(const strata_engine *e) { return (int32_t)e->model->hp.n_vocab; }
int32_t strata_n_ctx_train(const strata_engine *e) { return (int32_t)e->model->hp.n_ctx_train; }
const char *strata_arch_name(const strata_engine *e) { return st_arch_name(e->model->hp.arch); }
int strata_n_threads(const strata_engine *e) { return st_pool_threads(e->pool); }
int32_t strata_prefill_chunk(const strata_engine *e) { return e->gpu ? (int32_t)st_gpu_prefill_chunk(e->gpu) : 0; }
const char *strata_backend_name(const strata_engine *e) { return e->gpu ? st_gpu_device_name(e->gpu) : "CPU"; }

int strata_device_memory(const strata_engine *e, size_t *used, size_t *total) {
    if (!e->gpu) return st_err("the engine runs on the CPU");
    return st_gpu_device_memory(e->gpu, used, total);
}

const st_model *strata_engine_model(const strata_engine *e) { return e->model; }

int32_t strata_tokenize(const strata_engine *e, const char *text, size_t len, bool add_special, bool parse_special,
                        int32_t *out, int32_t max_out) {
    return st_tokenize(e->tok, text, len, add_special, parse_special, out, max_out);
}

int32_t strata_token_to_piece(const strata_engine *e, int32_t token, char *buf, int32_t buflen) {
    return st_token_to_piece(e->tok, token, buf, buflen, false);
}

bool strata_token_is_eog(const strata_engine *e, int32_t token) { return st_token_is_eog(e->tok, token); }
int32_t strata_token_bos(const strata_engine *e) { return st_token_bos(e->tok); }
const char *strata_chat_template(const strata_engine *e) { return e->chat_template; }

strata_detok *strata_detok_new(const strata_engine *e) {
    strata_detok *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->stream = st_detok_stream_new(e->tok, 0);
    if (!d->stream) {
        free(d);
        return NULL;
    }
    return d;
}

static int32_t copy_out(const char *s, size_t n, char *buf, int32_t buflen) {
    if (!s || buflen <= 0) return 0;
    if (n >= (size_t)buflen) n = (size_t)buflen - 1;  // callers size buf for a token's worth of text
    memcpy(buf, s, n);
    buf[n] = '\0';
    return (int32_t)n;
}

int32_t strata_detok_push(strata_detok *d, int32_t token, char *buf, int32_t buflen) {
    size_t n = 0;
    const char *s = st_detok_stream_push(d->stream, token, &n);
    return copy_out(s, n, buf, buflen);
}

int32_t strata_detok_flush(strata_detok *d, char *buf, int32_t buflen) {
    size_t n = 0;
    const char *s = st_detok_stream_flush(d->stream, &n);
    return copy_out(s, n, buf, buflen);
}

void strata_detok_free(strata_detok *d) {
    if (!d) return;
    st_detok_stream_free(d->stream);
    free(d);
}

strata_session_params strata_session_default_params(void) {
    strata_session_params p = {0};
    return p;
}

strata_session *strata_session_new(strata_engine *e, const strata_session_params *p) {
    strata_session_params def = strata_session_default_params();
    if (!p) p = &def;
    strata_session *s = calloc(1, sizeof *s);
    if (!s) return st_err("out of memory"), NULL;
    s->engine = e;
    if (e->gpu) s->gpu = st_gpu_session_new(e->gpu, p->n_ctx, !p->kv_f32);
    else s->cpu = st_session_new(e->model, e->pool, p->n_ctx, !p->kv_f32);
    if (!s->cpu && !s->gpu) {
        free(s);
        return NULL;
    }
    return s;
}

void strata_session_free(strata_session *s) {
    if (!s) return;
    st_session_free(s->cpu);
    st_gpu_session_free(s->gpu);
    free(s);
}

int strata_session_eval(strata_session *s, const int32_t *tokens, int32_t n, float *logits, bool all_logits) {
    if (s->gpu) return st_gpu_session_eval(s->gpu, tokens, n, logits, all_logits);
    return st_session_eval(s->cpu, tokens, n, logits, all_logits);
}

int strata_session_hybrid_stats(strata_session *s, strata_hybrid_stats *out) {
    memset(out, 0, sizeof *out);
    if (!s->gpu) return 0;
    st_gpu_hybrid_stats h;
    if (st_gpu_session_hybrid_stats(s->gpu, &h)) return -1;
    out->active = h.active != 0;
    out->n_slots = h.n_slots;
    out->n_experts = h.n_experts;
    out->slot_bytes = h.slot_bytes;
    out->n_staging = h.n_staging;
    out->decode_tokens = h.decode_tokens;
    out->selections = h.selections;
    out->misses = h.misses;
    out->miss_bytes = h.miss_bytes;
    out->prefill_tokens = h.prefill_tokens;
    out->prefill_chunks = h.prefill_chunks;
    out->staged_bytes = h.staged_bytes;
    out->swaps = h.swaps;
    out->swap_bytes = h.swap_bytes;
    out->cpu_misses = h.cpu_misses;
    out->cpu_jobs = h.cpu_jobs;
    out->cpu_job_s = h.cpu_job_s;
    out->cpu_wait_s = h.cpu_wait_s;
    out->pcie_frac = h.active ? h.pcie_frac : 1.0;
    out->cpu_threads = h.cpu_threads;
    out->prefetch_per_layer = h.pf_per_layer;
    out->prefetch_records = h.pf_records;
    out->prefetch_bytes = h.pf_bytes;
    out->prefetch_hits = h.pf_hits;
    out->prefetch_late = h.pf_late;
    out->prefetch_prefill = h.pf_prefill;
    out->prefill_cpu = h.prefill_cpu;
    return 0;
}

int32_t strata_session_n_past(const strata_session *s) {
    return (int32_t)(s->gpu ? st_gpu_session_n_past(s->gpu) : s->cpu->n_past);
}
int32_t strata_session_n_ctx(const strata_session *s) {
    return (int32_t)(s->gpu ? st_gpu_session_n_ctx(s->gpu) : s->cpu->n_ctx);
}
const int32_t *strata_session_tokens(const strata_session *s) {
    return s->gpu ? st_gpu_session_tokens(s->gpu) : s->cpu->tokens;
}
void strata_session_truncate(strata_session *s, int32_t n_keep) {
    if (s->gpu) st_gpu_session_truncate(s->gpu, n_keep);
    else st_session_truncate(s->cpu, n_keep);
}

strata_sampler *strata_sampler_new(const strata_sampler_params *p) {
    strata_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (st_sampler_init(&s->s, p)) {
        free(s);
        return NULL;
    }
    return s;
}

void strata_sampler_free(strata_sampler *s) {
    if (!s) return;
    st_sampler_free(&s->s);
    free(s);
}

void strata_sampler_accept(strata_sampler *s, int32_t token) { st_sampler_accept(&s->s, token); }

int32_t strata_sampler_sample(strata_sampler *s, const float *logits, int32_t n_vocab) {
    return st_sampler_sample(&s->s, logits, n_vocab);
}

// ---- generation ---------------------------------------------------------------------------------------------------

struct strata_gen {
    strata_session *s;
    strata_sampler *smp;
    strata_gen_params p;
    int device;        // pipelined on the GPU (st_gpu_gen_*), else eval + host sampler per token
    int failed;
    int32_t n_ret;     // tokens returned so far
    int32_t n_queued;  // device: samples queued (the first one and one per pushed step)
    int32_t last;      // the last returned token
    int64_t base;      // n_past after the prompt's evaluation
    int32_t *taken;    // device: [n_max] the returned tokens (they name the evaluated ones at the end)
    float *logits;     // host: [n_vocab] the last evaluation's logits
};

strata_gen_params strata_gen_default_params(void) {
    strata_gen_params p = {0};
    p.n_max = 1;
    return p;
}

strata_gen *strata_gen_begin(strata_session *s, strata_sampler *smp, const int32_t *tokens, int32_t n,
                             const strata_gen_params *params) {
    if (!s || !smp || !params || params->n_max < 1 || n < 1) {
        st_err("strata_gen_begin: needs a session, a sampler, n_max >= 1 and at least one token to evaluate");
        return NULL;
    }
    strata_gen *g = calloc(1, sizeof *g);
    if (!g) return st_err("out of memory"), NULL;
    g->s = s;
    g->smp = smp;
    g->p = *params;
    // STRATA_GEN_HOST=1: the host path on a GPU too (A/B, and the reference tests/gpu/serve_smoke.py compares with)
    g->device = s->gpu && !params->host && !st_sampler_has_penalties(&smp->s.p) && !getenv("STRATA_GEN_HOST");
    int rc;
    if (g->device) {
        g->taken = malloc(sizeof(int32_t) * (size_t)params->n_max);
        rc = !g->taken ? st_err("out of memory") : st_gpu_gen_begin(s->gpu, tokens, n, &smp->s.p);
        g->n_queued = rc ? 0 : 1;
    } else {
        g->logits = malloc(sizeof(float) * (size_t)strata_n_vocab(s->engine));
        rc = !g->logits ? st_err("out of memory") : strata_session_eval(s, tokens, n, g->logits, false);
    }
    g->base = strata_session_n_past(s);
    if (rc) {
        if (g->device && s->gpu) st_gpu_gen_end(s->gpu, g->base, NULL, 0);
        free(g->taken);
        free(g->logits);
        free(g);
        return NULL;
    }
    return g;
}

int32_t strata_gen_next(strata_gen *g) {
    if (g->failed) return st_err("generation: an earlier step failed"), -1;
    if (g->n_ret >= g->p.n_max) return st_err("generation: %d tokens returned (n_max)", g->p.n_max), -1;
    strata_session *s = g->s;
    int32_t tok;
    if (g->device) {
        // Queue the step that evaluates the token about to be returned (its input is on the device already, or
        // forced), then wait for that token: the GPU runs the step while the caller handles the token.
        if (g->n_ret + 1 < g->p.n_max && strata_session_n_past(s) < strata_session_n_ctx(s)) {
            if (st_gpu_gen_push(s->gpu, g->p.forced ? &g->p.forced[g->n_ret] : NULL)) goto fail;
            g->n_queued++;
        }
        if (g->n_ret >= g->n_queued)
            return st_err("context full (%d tokens)", strata_session_n_ctx(s)), -1;
        if (st_gpu_gen_pop(s->gpu, &tok)) goto fail;
        g->taken[g->n_ret] = tok;
    } else {
        if (g->n_ret > 0) {
            if (strata_session_n_past(s) >= strata_session_n_ctx(s))
                return st_err("context full (%d tokens)", strata_session_n_ctx(s)), -1;
            int32_t in = g->p.forced ? g->p.forced[g->n_ret - 1] : g->last;
            if (strata_session_eval(s, &in, 1, g->logits, false)) goto fail;
        }
        tok = strata_sampler_sample(g->smp, g->logits, strata_n_vocab(s->engine));
        if (tok < 0) goto fail;
    }
    strata_sampler_accept(g->smp, tok);
    g->last = tok;
    g->n_ret++;
    return tok;
fail:
    g->failed = 1;
    return -1;
}

bool strata_gen_pipelined(const strata_gen *g) { return g && g->device; }

int strata_gen_end(strata_gen *g) {
    if (!g) return 0;
    int rc = g->failed ? -1 : 0;
    if (g->device) {
        // Keep the evaluated inputs of the returned tokens but the last (the caller may still evaluate it); steps
        // queued past that are dropped. Their names: the forced tokens, else the returned ones.
        const int32_t kept = g->n_ret > 1 ? g->n_ret - 1 : 0;
        st_gpu_gen_end(g->s->gpu, g->base + kept, g->p.forced ? g->p.forced : g->taken, kept);
    }
    free(g->taken);
    free(g->logits);
    free(g);
    return rc;
}

// ---- snapshots ---------------------------------------------------------------------------------------------------

struct strata_snapshot {
    const strata_engine *engine;  // the engine it was taken from (restore checks it)
    int kv_f16;                   // element type of the rows: 1 IEEE half, 0 float32 (as st_session.kv_f16)
    int32_t n_tokens;
    uint32_t n_layer;
    size_t k_row, v_row;          // bytes of one position's K row (n_head_kv * head_dim_k elements) / V row
    int32_t *tokens;              // [n_tokens] token ids of positions 0..n_tokens-1
    uint8_t *kv;                  // [n_layer] x { K [n_tokens][k_row bytes], V [n_tokens][v_row bytes] }, one block
};

// The backend-independent view of a session's cache for snapshots.
static int64_t sess_n_past(const strata_session *s) { return s->gpu ? st_gpu_session_n_past(s->gpu) : s->cpu->n_past; }
static int64_t sess_n_ctx(const strata_session *s) { return s->gpu ? st_gpu_session_n_ctx(s->gpu) : s->cpu->n_ctx; }
static int sess_kv_f16(const strata_session *s) { return s->gpu ? st_gpu_session_kv_f16(s->gpu) : s->cpu->kv_f16; }

strata_snapshot *strata_session_snapshot(strata_session *s, int32_t n_tokens) {
    if (n_tokens < 0 || n_tokens > sess_n_past(s))
        return st_err("snapshot of %d tokens: the session holds %lld", n_tokens, (long long)sess_n_past(s)), NULL;
    const st_hparams *hp = &s->engine->model->hp;
    size_t el = sess_kv_f16(s) ? 2 : 4;
    strata_snapshot *snap = calloc(1, sizeof *snap);
    if (!snap) return st_err("out of memory"), NULL;
    snap->engine = s->engine;
    snap->kv_f16 = sess_kv_f16(s);
    snap->n_tokens = n_tokens;
    snap->n_layer = hp->n_layer;
    snap->k_row = (size_t)hp->n_head_kv * hp->head_dim_k * el;
    snap->v_row = (size_t)hp->n_head_kv * hp->head_dim_v * el;
    size_t per_layer = (size_t)n_tokens * (snap->k_row + snap->v_row);
    snap->tokens = malloc(sizeof(int32_t) * (size_t)(n_tokens ? n_tokens : 1));
    snap->kv = malloc(per_layer * hp->n_layer + 1);
    if (!snap->tokens || !snap->kv) {
        strata_snapshot_free(snap);
        return st_err("out of memory for a snapshot of %d tokens (%zu bytes)", n_tokens, per_layer * hp->n_layer),
               NULL;
    }
    memcpy(snap->tokens, strata_session_tokens(s), sizeof(int32_t) * (size_t)n_tokens);
    if (s->gpu) {
        if (st_gpu_session_kv_transfer(s->gpu, snap->kv, n_tokens, n_tokens, NULL, 1)) {
            strata_snapshot_free(snap);
            return NULL;
        }
        return snap;
    }
    st_session *c = s->cpu;
    // Rows of positions 0..n-1 are contiguous at the start of each layer's [n_ctx][row] cache.
    uint8_t *p = snap->kv;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        memcpy(p, c->k_cache[l], (size_t)n_tokens * snap->k_row);
        p += (size_t)n_tokens * snap->k_row;
        memcpy(p, c->v_cache[l], (size_t)n_tokens * snap->v_row);
        p += (size_t)n_tokens * snap->v_row;
    }
    return snap;
}

int strata_session_restore_prefix(strata_session *s, const strata_snapshot *snap, int32_t n_tokens) {
    if (snap->engine != s->engine) return st_err("snapshot restore: the snapshot was taken from another engine");
    if (snap->kv_f16 != sess_kv_f16(s))
        return st_err("snapshot restore: the snapshot holds %s K/V but the session %s", snap->kv_f16 ? "f16" : "f32",
                      sess_kv_f16(s) ? "f16" : "f32");
    if (n_tokens < 0 || n_tokens > snap->n_tokens)
        return st_err("snapshot restore of %d tokens: the snapshot holds %d", n_tokens, snap->n_tokens);
    if (n_tokens > sess_n_ctx(s))
        return st_err("snapshot restore: %d tokens exceed the session's context of %lld", n_tokens,
                      (long long)sess_n_ctx(s));
    if (s->gpu) return st_gpu_session_kv_transfer(s->gpu, snap->kv, n_tokens, snap->n_tokens, snap->tokens, 0);
    st_session *c = s->cpu;
    const uint8_t *p = snap->kv;
    for (uint32_t l = 0; l < snap->n_layer; l++) {
        memcpy(c->k_cache[l], p, (size_t)n_tokens * snap->k_row);
        p += (size_t)snap->n_tokens * snap->k_row;
        memcpy(c->v_cache[l], p, (size_t)n_tokens * snap->v_row);
        p += (size_t)snap->n_tokens * snap->v_row;
    }
    memcpy(c->tokens, snap->tokens, sizeof(int32_t) * (size_t)n_tokens);
    c->n_past = n_tokens;
    return 0;
}

int strata_session_restore(strata_session *s, const strata_snapshot *snap) {
    return strata_session_restore_prefix(s, snap, snap->n_tokens);
}

const int32_t *strata_snapshot_tokens(const strata_snapshot *snap, int32_t *n_tokens) {
    if (n_tokens) *n_tokens = snap->n_tokens;
    return snap->tokens;
}

size_t strata_snapshot_bytes(const strata_snapshot *snap) {
    return sizeof *snap + (size_t)snap->n_tokens * (sizeof(int32_t) + snap->n_layer * (snap->k_row + snap->v_row));
}

void strata_snapshot_free(strata_snapshot *snap) {
    if (!snap) return;
    free(snap->tokens);
    free(snap->kv);
    free(snap);
}
