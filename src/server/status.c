// Health, status and metrics: what the supervisor knows about the engine, as JSON (/health, /v1/status) and as
// Prometheus text (/metrics).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"
#include "util/log.h"

static const char *state_name(st_eng_state s) {
    switch (s) {
    case ST_ENG_READY: return "ready";
    case ST_ENG_LOADING: return "loading";
    case ST_ENG_BACKOFF: return "restarting";
    default: return "stopped";
    }
}

enum MHD_Result st_api_health(st_req *r) {
    pthread_mutex_lock(&st_S.mu);
    st_eng_state s = st_S.state;
    pthread_mutex_unlock(&st_S.mu);
    if (s == ST_ENG_READY) return st_reply_json(r, 200, json_pack("{s:s}", "status", "ok"));
    // "loading" for clients that poll for readiness (llama.cpp's convention), with the detail next to it.
    return st_reply_json(r, 503, json_pack("{s:s, s:s, s:{s:s, s:s, s:i}}", "status", "loading", "engine",
                                           state_name(s), "error", "message", "the engine is loading", "type",
                                           "unavailable_error", "code", 503));
}

enum MHD_Result st_api_status(st_req *r) {
    pthread_mutex_lock(&st_S.mu);
    json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:f, s:I, s:s, s:i, s:b}", "model", st_S.model_name, "model_path",
                          st_S.cfg->model_path, "engine", state_name(st_S.state), "worker_pid", (int)st_S.pid,
                          "uptime_s", st_now() - st_S.t_start, "engine_restarts", (json_int_t)st_S.restarts,
                          "last_engine_exit", st_S.last_exit, "queue_depth", st_S.q_len, "busy", (int)(st_S.current != NULL));
    json_object_set_new(o, "placement", json_string("cpu"));
    if (st_S.info) {
        json_object_set_new(o, "context", json_pack("{s:O, s:O, s:i}", "n_ctx", json_object_get(st_S.info, "n_ctx"),
                                                    "n_ctx_train", json_object_get(st_S.info, "n_ctx_train"),
                                                    "kv_used", st_S.kv_used));
        json_object_set(o, "arch", json_object_get(st_S.info, "arch"));
        json_object_set(o, "threads", json_object_get(st_S.info, "threads"));
        json_object_set(o, "load_s", json_object_get(st_S.info, "load_s"));
    } else {
        json_object_set_new(o, "context", json_pack("{s:n, s:n, s:i}", "n_ctx", "n_ctx_train", "kv_used", 0));
    }
    json_object_set_new(o, "prefix_cache",
                        json_pack("{s:b, s:I, s:I, s:I}", "enabled", st_S.cfg->prefix_cache, "lookups",
                                  (json_int_t)st_S.n_cache_lookups, "hits", (json_int_t)st_S.n_cache_hits,
                                  "cached_tokens_total", (json_int_t)st_S.n_cached_tokens));
    json_object_set_new(o, "speed", json_pack("{s:f, s:f}", "last_prefill_tokens_per_s", st_S.last_prefill_tps,
                                              "last_decode_tokens_per_s", st_S.last_decode_tps));
    json_object_set_new(o, "prefill", json_pack("{s:b, s:i, s:i}", "active", st_S.current && st_S.prefill_total > 0 &&
                                                st_S.prefill_done < st_S.prefill_total, "done", st_S.prefill_done,
                                                "total", st_S.prefill_total));
    json_object_set_new(o, "requests", json_pack("{s:I, s:I, s:I, s:I, s:I}", "total", (json_int_t)st_S.n_requests,
                                                 "engine_errors", (json_int_t)st_S.n_errors, "rejected_queue_full",
                                                 (json_int_t)st_S.n_rejected_queue_full, "prompt_tokens",
                                                 (json_int_t)st_S.n_prompt_tokens, "generated_tokens",
                                                 (json_int_t)st_S.n_gen_tokens));
    pthread_mutex_unlock(&st_S.mu);
    return st_reply_json(r, 200, o);
}

enum MHD_Result st_api_metrics(st_req *r) {
    st_sbuf b = {0};
    pthread_mutex_lock(&st_S.mu);
#define METRIC(name, type, help, fmt, ...)                                                  \
    st_sbuf_printf(&b, "# HELP strata_" name " " help "\n# TYPE strata_" name " " type "\n" \
                   "strata_" name " " fmt "\n", __VA_ARGS__)
    METRIC("engine_ready", "gauge", "1 when the engine worker is loaded and serving", "%d", st_S.state == ST_ENG_READY);
    METRIC("engine_restarts_total", "counter", "Engine workers that died or were killed", "%llu",
           (unsigned long long)st_S.restarts);
    METRIC("requests_total", "counter", "Requests handed to the engine", "%llu", (unsigned long long)st_S.n_requests);
    METRIC("engine_errors_total", "counter", "Requests the engine answered with an error", "%llu",
           (unsigned long long)st_S.n_errors);
    METRIC("requests_rejected_total", "counter", "Requests refused because the queue was full", "%llu",
           (unsigned long long)st_S.n_rejected_queue_full);
    METRIC("queue_depth", "gauge", "Requests waiting for the engine", "%d", st_S.q_len);
    METRIC("busy", "gauge", "1 while the engine generates", "%d", st_S.current != NULL);
    METRIC("prompt_tokens_total", "counter", "Prompt tokens of finished requests", "%llu",
           (unsigned long long)st_S.n_prompt_tokens);
    METRIC("prompt_cached_tokens_total", "counter", "Prompt tokens reused from the prefix cache", "%llu",
           (unsigned long long)st_S.n_cached_tokens);
    METRIC("generated_tokens_total", "counter", "Generated tokens", "%llu", (unsigned long long)st_S.n_gen_tokens);
    METRIC("prefix_cache_hits_total", "counter", "Requests that reused a cached prefix", "%llu",
           (unsigned long long)st_S.n_cache_hits);
    METRIC("prefill_tokens_per_second", "gauge", "Prefill speed of the last request", "%.3f", st_S.last_prefill_tps);
    METRIC("decode_tokens_per_second", "gauge", "Generation speed of the last request", "%.3f", st_S.last_decode_tps);
    METRIC("kv_used_tokens", "gauge", "Tokens held in the KV cache", "%d", st_S.kv_used);
    METRIC("context_tokens", "gauge", "KV cache capacity in tokens", "%lld",
           st_S.info ? (long long)json_integer_value(json_object_get(st_S.info, "n_ctx")) : 0ll);
    METRIC("prefill_progress_tokens", "gauge", "Prompt tokens evaluated so far in the current prefill", "%d",
           st_S.prefill_done);
#undef METRIC
    pthread_mutex_unlock(&st_S.mu);
    enum MHD_Result rc = st_reply_text(r, 200, "text/plain; version=0.0.4", b.p);
    free(b.p);
    return rc;
}
