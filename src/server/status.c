// Health, status and metrics: what the supervisor knows about the engine, as JSON (/health, /v1/status) and as
// Prometheus text (/metrics).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

// ---- machine use (for the monitor page): /proc, sampled between successive /v1/status calls ----------------------

static double rss_mb(const char *statm) {
    FILE *f = fopen(statm, "r");
    long size = 0, rss = 0;
    if (!f) return 0;
    if (fscanf(f, "%ld %ld", &size, &rss) != 2) rss = 0;
    fclose(f);
    return (double)rss * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

static double proc_cpu_s(int pid) {  // user + system CPU seconds of a process
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');  // the command name may hold spaces
    unsigned long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2) return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static json_t *system_json(int worker_pid) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static unsigned long long prev_busy, prev_total;
    static double prev_worker_cpu = -1, prev_t;
    static int prev_pid;
    json_t *o = json_object();
    json_object_set_new(o, "cpus", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
    pthread_mutex_lock(&mu);
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[8] = {0};
    if (f && fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                    &v[7]) == 8) {
        unsigned long long idle = v[3] + v[4], total = 0;
        for (int i = 0; i < 8; i++) total += v[i];
        unsigned long long busy = total - idle;
        if (prev_total && total > prev_total)
            json_object_set_new(o, "cpu_percent", json_real(100.0 * (double)(busy - prev_busy) / (double)(total - prev_total)));
        else json_object_set_new(o, "cpu_percent", json_real(total ? 100.0 * (double)busy / (double)total : 0));
        prev_busy = busy;
        prev_total = total;
    }
    if (f) fclose(f);
    double now = st_now();
    if (worker_pid > 0) {
        char statm[64];
        snprintf(statm, sizeof statm, "/proc/%d/statm", worker_pid);
        json_object_set_new(o, "worker_rss_mb", json_real(rss_mb(statm)));
        double cpu = proc_cpu_s(worker_pid);
        if (cpu >= 0 && prev_pid == worker_pid && prev_worker_cpu >= 0 && now > prev_t)
            json_object_set_new(o, "worker_cpu_percent", json_real(100.0 * (cpu - prev_worker_cpu) / (now - prev_t)));
        prev_worker_cpu = cpu;
        prev_pid = worker_pid;
        prev_t = now;
    }
    pthread_mutex_unlock(&mu);
    json_object_set_new(o, "server_rss_mb", json_real(rss_mb("/proc/self/statm")));
    f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        long long total = -1, avail = -1;
        while (fgets(line, sizeof line, f)) {
            sscanf(line, "MemTotal: %lld kB", &total);
            sscanf(line, "MemAvailable: %lld kB", &avail);
        }
        fclose(f);
        if (total > 0 && avail >= 0) {
            json_object_set_new(o, "mem_total_mb", json_real((double)total / 1024.0));
            json_object_set_new(o, "mem_used_mb", json_real((double)(total - avail) / 1024.0));
        }
    }
    return o;
}

enum MHD_Result st_api_status(st_req *r) {
    pthread_mutex_lock(&st_S.mu);
    int worker_pid = (int)st_S.pid;
    pthread_mutex_unlock(&st_S.mu);
    json_t *sys = system_json(worker_pid);
    pthread_mutex_lock(&st_S.mu);
    json_t *o = json_pack("{s:s, s:s, s:s, s:i, s:f, s:I, s:s, s:i, s:b}", "model", st_S.model_name, "model_path",
                          st_S.cfg->model_path, "engine", state_name(st_S.state), "worker_pid", (int)st_S.pid,
                          "uptime_s", st_now() - st_S.t_start, "engine_restarts", (json_int_t)st_S.restarts,
                          "last_engine_exit", st_S.last_exit, "queue_depth", st_S.q_len, "busy", (int)(st_S.current != NULL));
    // Where the weights live: "CPU" or the GPU's name (all weights in VRAM until hybrid placement exists).
    json_t *backend = st_S.info ? json_object_get(st_S.info, "backend") : NULL;
    json_object_set_new(o, "placement", json_string(json_is_string(backend) ? json_string_value(backend) : "unknown"));
    if (st_S.gpu_mem_total_mb > 0)
        json_object_set_new(o, "gpu", json_pack("{s:s, s:f, s:f}", "name", json_string_value(backend), "mem_used_mb",
                                                st_S.gpu_mem_used_mb, "mem_total_mb", st_S.gpu_mem_total_mb));
    // Hybrid expert placement (--gpu-mem below the model's size): VRAM cache size, hit rate, misses and PCIe bytes
    // per decoded token, prefill staging, swaps (as of the last ping).
    if (st_S.hybrid) json_object_set(o, "hybrid", st_S.hybrid);
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
                        json_pack("{s:b, s:I, s:I, s:I, s:I, s:i, s:i, s:f, s:f}", "enabled", st_S.cfg->prefix_cache,
                                  "lookups", (json_int_t)st_S.n_cache_lookups, "hits", (json_int_t)st_S.n_cache_hits,
                                  "cached_tokens_total", (json_int_t)st_S.n_cached_tokens, "checkpoint_hits",
                                  (json_int_t)st_S.n_checkpoint_hits, "checkpoints", st_S.n_checkpoints,
                                  "max_checkpoints", st_S.cfg->prefix_cache ? st_S.cfg->prompt_checkpoints : 0,
                                  "checkpoint_mib", (double)st_S.checkpoint_bytes / (1 << 20), "checkpoint_mib_max",
                                  (double)st_S.cfg->checkpoint_mib));
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
    json_object_set_new(o, "system", sys);
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
    METRIC("checkpoint_hits_total", "counter", "Requests whose cached prefix came from a prompt checkpoint", "%llu",
           (unsigned long long)st_S.n_checkpoint_hits);
    METRIC("checkpoints", "gauge", "Prompt checkpoints (earlier conversations' KV) held in RAM", "%d",
           st_S.n_checkpoints);
    METRIC("checkpoint_bytes", "gauge", "RAM held by prompt checkpoints", "%lld", (long long)st_S.checkpoint_bytes);
    METRIC("prefill_tokens_per_second", "gauge", "Prefill speed of the last request", "%.3f", st_S.last_prefill_tps);
    METRIC("decode_tokens_per_second", "gauge", "Generation speed of the last request", "%.3f", st_S.last_decode_tps);
    METRIC("kv_used_tokens", "gauge", "Tokens held in the KV cache", "%d", st_S.kv_used);
    if (st_S.gpu_mem_total_mb > 0)
        METRIC("gpu_memory_used_mib", "gauge", "Device memory in use on the engine's GPU", "%.0f", st_S.gpu_mem_used_mb);
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
