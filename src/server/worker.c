// The engine worker process: owns the engine, one session (the live KV timeline) and the prompt-prefix cache, and
// serves one generation at a time for the HTTP process over the framed channel (proto.h). Between prefill chunks and
// tokens it reads side messages (cancel, ping, tokenize) so that a cancel stops work promptly and a busy worker
// keeps the supervisor's watchdog fed.
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "engine/internal.h"
#include "gguf/gguf.h"
#include "server/proto.h"
#include "server/server.h"
#include "strata.h"
#include "util/log.h"

#define PREFILL_CHUNK 256  // tokens per eval during prefill: the granularity of progress, heartbeat and cancel (at
                           // least the backend's own prefill step: strata_prefill_chunk)
// Tokens at the end of a timeline that a chat template may render differently next turn (the generation prompt vs
// the rendered assistant message, an empty think block, re-tokenized answer text): a request that reuses all of the
// previous prompt but these continues that conversation, and a checkpoint that covers all but these is as good.
#define CKPT_SLACK 32

// A checkpoint: a host copy of an earlier timeline's KV (strata_session_snapshot), so that after the live session
// moved on to another conversation (a sub-agent, a title request) the next turn of this one still finds its prefix.
typedef struct ckpt {
    strata_snapshot *snap;
    const int32_t *tokens;  // [n] the snapshot's token ids (owned by snap)
    int32_t n;
    int32_t reusable;       // leading positions computed by prompt prefill (see prefix_lookup), <= n
    size_t bytes;           // host memory it holds
    uint64_t used;          // LRU clock of its last save or hit
} ckpt;

typedef struct worker {
    int fd;
    strata_engine *e;
    strata_session *s;
    int32_t n_vocab;
    bool prefix_cache;
    // Checkpoints (see ckpt): at most ckpt_max of them, ckpt_bytes in all <= ckpt_budget.
    ckpt *ckpts;        // [ckpt_max]; the first n_ckpts are in use
    int n_ckpts, ckpt_max;
    size_t ckpt_bytes, ckpt_budget;
    int32_t ckpt_min;   // timelines shorter than this get no checkpoint
    size_t kv_token_bytes;  // estimated snapshot bytes per token (to fit a snapshot in the budget before taking it)
    uint64_t ckpt_clock;
    int32_t live_prompt; // prompt length of the request that built the live session (0: none)
    json_int_t cur_id;  // the generation in progress, 0 when idle
    bool cancel;        // a cancel for cur_id arrived
    bool gone;          // the server closed the channel: stop everything and exit
    char **ctrl_text;   // [n_vocab] the text of control tokens that do not end generation (NULL for others): rendered
                        // for chat formats whose markup is control tokens (gpt-oss <|channel|>, Llama-3 <|python_tag|>)
    // Test hook (STRATA_SERVE_TEST_SCRIPT, see server.h): scripted completions replace sampling.
    json_t *script;     // array of {"text", "when"?}; NULL when the hook is off
    size_t script_next; // the next unconditional entry
} worker;

static void send_msg(worker *w, json_t *msg) {
    if (!msg) {  // json_pack failed (e.g. text that is not UTF-8): a bug, but not a reason to drop the channel
        st_warn("engine worker: could not encode a message");
        return;
    }
    if (!w->gone && st_proto_send(w->fd, msg)) w->gone = true;
    json_decref(msg);
}

static void send_error(worker *w, json_int_t id, int status, const char *code, const char *param, const char *fmt,
                       ...) ST_PRINTF(6, 7);
static void send_error(worker *w, json_int_t id, int status, const char *code, const char *param, const char *fmt,
                       ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    json_t *m = json_pack("{s:s, s:I, s:i, s:s, s:s}", "t", "error", "id", id, "status", status, "code", code,
                          "message", buf);
    if (param) json_object_set_new(m, "param", json_string(param));
    send_msg(w, m);
}

// Tokenizes into a malloc'd array; returns the count or -1 (st_err-style message in strata_last_error()).
static int32_t tokenize(worker *w, const char *text, size_t len, bool add_special, bool parse_special, int32_t **out) {
    int32_t cap = (int32_t)(len < (1u << 28) ? len : (1u << 28)) + 8;
    int32_t *t = malloc(sizeof(int32_t) * (size_t)cap);
    int32_t n = strata_tokenize(w->e, text, len, add_special, parse_special, t, cap);
    if (n < 0 && n != INT32_MIN) {
        cap = -n;
        t = realloc(t, sizeof(int32_t) * (size_t)cap);
        n = strata_tokenize(w->e, text, len, add_special, parse_special, t, cap);
    }
    if (n < 0) {
        free(t);
        return -1;
    }
    // Chat templates usually write the BOS text themselves; with add_special that would give BOS twice.
    int32_t bos = strata_token_bos(w->e);
    if (n >= 2 && bos >= 0 && t[0] == bos && t[1] == bos) {
        memmove(t, t + 1, sizeof(int32_t) * (size_t)(n - 1));
        n--;
    }
    *out = t;
    return n;
}

// Reads a JSON array of token ids; returns the count or -1 naming the bad element.
static int32_t read_tokens(worker *w, json_t *arr, int32_t **out, char *why, size_t why_len) {
    size_t n = json_array_size(arr);
    int32_t *t = malloc(sizeof(int32_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= w->n_vocab) {
            snprintf(why, why_len, "token %zu is not a token id in [0, %d)", i, w->n_vocab);
            free(t);
            return -1;
        }
        t[i] = (int32_t)json_integer_value(v);
    }
    *out = t;
    return (int32_t)n;
}

static void do_tokenize(worker *w, json_t *m, json_int_t id) {
    const char *text = json_string_value(json_object_get(m, "text"));
    size_t len = json_string_length(json_object_get(m, "text"));
    int32_t *t = NULL;
    int32_t n = tokenize(w, text ? text : "", text ? len : 0, json_is_true(json_object_get(m, "add_special")),
                         json_is_true(json_object_get(m, "parse_special")), &t);
    if (n < 0) {
        send_error(w, id, 400, "tokenize_failed", "content", "cannot tokenize: %s", strata_last_error());
        return;
    }
    json_t *arr = json_array();
    for (int32_t i = 0; i < n; i++) json_array_append_new(arr, json_integer(t[i]));
    free(t);
    send_msg(w, json_pack("{s:s, s:I, s:o}", "t", "tokens", "id", id, "tokens", arr));
}

static void do_detokenize(worker *w, json_t *m, json_int_t id) {
    int32_t *t = NULL;
    char why[128];
    int32_t n = read_tokens(w, json_object_get(m, "tokens"), &t, why, sizeof why);
    if (n < 0) {
        send_error(w, id, 400, "invalid_tokens", "tokens", "tokens: %s", why);
        return;
    }
    strata_detok *d = strata_detok_new(w->e);
    size_t cap = 256, len = 0;
    char *out = malloc(cap), piece[512];
    out[0] = 0;
    for (int32_t i = 0; i <= n; i++) {
        int32_t k = i < n ? strata_detok_push(d, t[i], piece, sizeof piece) : strata_detok_flush(d, piece, sizeof piece);
        if (k <= 0) continue;
        if (len + (size_t)k + 1 > cap) out = realloc(out, cap = 2 * (cap + (size_t)k));
        memcpy(out + len, piece, (size_t)k + 1);
        len += (size_t)k;
    }
    strata_detok_free(d);
    free(t);
    send_msg(w, json_pack("{s:s, s:I, s:s%}", "t", "text", "id", id, "text", out, len));
    free(out);
}

// A message that may arrive while a generation runs.
static void handle_side(worker *w, json_t *m) {
    const char *t = json_string_value(json_object_get(m, "t"));
    json_int_t id = json_integer_value(json_object_get(m, "id"));
    if (!t) return;
    if (!strcmp(t, "cancel")) {
        if (id == w->cur_id) w->cancel = true;
    } else if (!strcmp(t, "ping")) {
        json_t *pong = json_pack("{s:s, s:I, s:i}", "t", "pong", "id", id, "kv_used", strata_session_n_past(w->s));
        size_t used, total;
        if (strata_device_memory(w->e, &used, &total) == 0)
            json_object_set_new(pong, "gpu_mem", json_pack("{s:I, s:I}", "used", (json_int_t)used, "total",
                                                           (json_int_t)total));
        strata_hybrid_stats hy;  // hybrid expert placement: cache size, hit rate, PCIe traffic
        if (strata_session_hybrid_stats(w->s, &hy) == 0 && hy.active) {
            const double dt = hy.decode_tokens ? (double)hy.decode_tokens : 1.0;
            json_object_set_new(
                pong, "hybrid",
                json_pack("{s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:I, s:I, s:I, s:I}", "n_slots", (json_int_t)hy.n_slots,
                          "n_experts", (json_int_t)hy.n_experts, "decode_tokens", (json_int_t)hy.decode_tokens,
                          "misses", (json_int_t)hy.misses, "hit_rate",
                          hy.selections ? 1.0 - (double)hy.misses / (double)hy.selections : 0.0, "misses_per_token",
                          (double)hy.misses / dt, "pcie_bytes_per_token", (double)hy.miss_bytes / dt, "prefill_tokens",
                          (json_int_t)hy.prefill_tokens, "staged_bytes", (json_int_t)hy.staged_bytes, "swaps",
                          (json_int_t)hy.swaps, "swap_bytes", (json_int_t)hy.swap_bytes));
            json_t *ho = json_object_get(pong, "hybrid");
            if (ho && hy.cpu_threads)  // CPU misses (--pcie-frac)
                json_object_set_new(
                    ho, "cpu",
                    json_pack("{s:f, s:i, s:I, s:I, s:f, s:f}", "pcie_frac", hy.pcie_frac, "threads", hy.cpu_threads,
                              "misses", (json_int_t)hy.cpu_misses, "layer_jobs", (json_int_t)hy.cpu_jobs,
                              "job_us", hy.cpu_jobs ? 1e6 * hy.cpu_job_s / (double)hy.cpu_jobs : 0.0, "gpu_wait_us",
                              hy.cpu_jobs ? 1e6 * hy.cpu_wait_s / (double)hy.cpu_jobs : 0.0));
            if (ho && hy.prefetch_per_layer)  // lookahead prefetch (on by default; STRATA_HY_PREFETCH)
                json_object_set_new(ho, "prefetch",
                                    json_pack("{s:i, s:I, s:I, s:I, s:I}", "per_layer", hy.prefetch_per_layer,
                                              "records", (json_int_t)hy.prefetch_records, "bytes",
                                              (json_int_t)hy.prefetch_bytes, "hits", (json_int_t)hy.prefetch_hits,
                                              "late", (json_int_t)hy.prefetch_late));
        }
        send_msg(w, pong);
    } else if (!strcmp(t, "tokenize")) {
        do_tokenize(w, m, id);
    } else if (!strcmp(t, "detokenize")) {
        do_detokenize(w, m, id);
    } else if (!strcmp(t, "gen")) {
        send_error(w, id, 500, "engine_busy", NULL, "the engine is already generating (the server sends one at a time)");
    }
}

// Handles whatever side messages are waiting, without blocking.
static void poll_side(worker *w) {
    for (;;) {
        int eof = 0;
        json_t *m = st_proto_recv(w->fd, 0, &eof);
        if (eof) w->gone = true;
        if (!m) return;
        handle_side(w, m);
        json_decref(m);
    }
}

static double num(json_t *o, const char *key, double def) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : def;
}

// Stop strings: text is held back while it could still be the start of a stop string, so that a stop string never
// reaches the client. Returns the bytes of `pending` that may be emitted; *hit is set when a stop string matched
// (pending is then cut at the match).
static size_t stop_scan(char *pending, size_t len, json_t *stops, bool *hit, const char **which) {
    size_t hold = 0;
    for (size_t i = 0; i < json_array_size(stops); i++) {
        const char *s = json_string_value(json_array_get(stops, i));
        size_t sl = s ? strlen(s) : 0;
        if (!sl) continue;
        char *p = memmem(pending, len, s, sl);
        if (p) {  // later stop strings search only before this match, so the earliest match wins
            *hit = true;
            *which = s;
            len = (size_t)(p - pending);
            pending[len] = 0;
            hold = 0;
            continue;
        }
        for (size_t k = sl - 1 < len ? sl - 1 : len; k > hold; k--)
            if (!memcmp(pending + len - k, s, k)) {
                hold = k;
                break;
            }
    }
    return *hit ? len : len - hold;
}

// The text of control tokens, from the GGUF vocabulary (the public detokenizer renders them as "").
static void load_control_texts(worker *w) {
    const st_model *model = strata_engine_model(w->e);
    const gguf_kv *types = model ? gguf_find_kv(model->gguf, "tokenizer.ggml.token_type") : NULL;
    const gguf_kv *toks = model ? gguf_find_kv(model->gguf, "tokenizer.ggml.tokens") : NULL;
    if (!types || !toks || types->value.type != GGUF_VT_ARRAY || toks->value.type != GGUF_VT_ARRAY ||
        toks->value.arr.elem_type != GGUF_VT_STRING || !toks->value.arr.items)
        return;
    uint64_t n = toks->value.arr.n < (uint64_t)w->n_vocab ? toks->value.arr.n : (uint64_t)w->n_vocab;
    if (types->value.arr.n < n) n = types->value.arr.n;
    w->ctrl_text = calloc((size_t)w->n_vocab, sizeof *w->ctrl_text);
    for (uint64_t i = 0; i < n; i++) {
        if (gguf_arr_i64(&types->value, i) != 3 /* CONTROL */ || strata_token_is_eog(w->e, (int32_t)i)) continue;
        const gguf_str *t = &toks->value.arr.items[i].str;
        w->ctrl_text[i] = strndup(t->ptr, (size_t)t->len);
    }
}

// Test hook: the scripted completion for this prompt (the first entry whose "when" occurs in the prompt, or the next
// entry without "when"; an entry with "once" is used a single time), or NULL to sample as usual.
static const char *script_pick(worker *w, const char *prompt) {
    size_t i;
    json_t *e;
    json_array_foreach(w->script, i, e) {
        const char *when = json_string_value(json_object_get(e, "when"));
        if (json_is_true(json_object_get(e, "used"))) continue;
        if (when) {
            if (!prompt || !strstr(prompt, when)) continue;
            if (json_is_true(json_object_get(e, "once"))) json_object_set_new(e, "used", json_true());
            return json_string_value(json_object_get(e, "text"));
        } else if (i >= w->script_next) {
            w->script_next = i + 1;
            return json_string_value(json_object_get(e, "text"));
        }
    }
    return NULL;
}

static json_t *script_load(const char *path) {
    json_error_t je;
    json_t *s = json_load_file(path, 0, &je);
    if (!json_is_array(s)) {
        st_error("engine worker: test script %s: %s", path, s ? "must be a JSON array" : je.text);
        json_decref(s);
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(s, i, e) {
        if (json_is_string(e)) json_array_append_new(out, json_pack("{s:O}", "text", e));
        else if (json_is_string(json_object_get(e, "text"))) json_array_append(out, e);
    }
    json_decref(s);
    st_warn("engine worker: TEST HOOK: %zu scripted completions from %s replace sampling", json_array_size(out), path);
    return out;
}

// Tokens at the start of a and b that are equal.
static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    int32_t n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

static void ckpt_drop(worker *w, int i) {
    w->ckpt_bytes -= w->ckpts[i].bytes;
    strata_snapshot_free(w->ckpts[i].snap);
    w->ckpts[i] = w->ckpts[--w->n_ckpts];
}

// Before a request replaces the live timeline: keep it as a checkpoint when the request does not continue it
// (live_common: the tokens the request shares with it), it is long enough, and no checkpoint already covers it.
// Saving here, rather than after every prefill, copies KV only when the server switches conversations; a
// conversation that simply continues never pays for a copy.
static void ckpt_save_live(worker *w, int32_t live_common) {
    int32_t n = strata_session_n_past(w->s);
    const int32_t *past = strata_session_tokens(w->s);
    int32_t prev = w->live_prompt < n ? w->live_prompt : n;
    if (w->ckpt_max <= 0 || n < w->ckpt_min || live_common + CKPT_SLACK >= prev) return;
    for (int i = 0; i < w->n_ckpts; i++)
        if (common_prefix(w->ckpts[i].tokens, w->ckpts[i].n, past, n) + CKPT_SLACK >= n) {
            w->ckpts[i].used = ++w->ckpt_clock;
            return;
        }
    // Longer than the whole budget: keep the prefix that fits (the start of a conversation is what is reused).
    if (w->kv_token_bytes && (size_t)n * w->kv_token_bytes > w->ckpt_budget) {
        n = (int32_t)((w->ckpt_budget - (w->ckpt_budget > 4096 ? 4096 : 0)) / w->kv_token_bytes);  // 4096: headers
        if (n < w->ckpt_min) return;
    }
    strata_snapshot *snap = strata_session_snapshot(w->s, n);
    if (!snap) {
        // CUDA sessions cannot snapshot yet: live with the live session alone.
        st_warn("engine worker: prompt checkpoints off: %s", strata_last_error());
        w->ckpt_max = 0;
        return;
    }
    size_t bytes = strata_snapshot_bytes(snap);
    // Checkpoints this one covers serve no request that it does not.
    for (int i = w->n_ckpts - 1; i >= 0; i--)
        if (common_prefix(w->ckpts[i].tokens, w->ckpts[i].n, past, n) + CKPT_SLACK >= w->ckpts[i].n) ckpt_drop(w, i);
    while (w->n_ckpts > 0 && (w->n_ckpts >= w->ckpt_max || w->ckpt_bytes + bytes > w->ckpt_budget)) {
        int lru = 0;
        for (int i = 1; i < w->n_ckpts; i++)
            if (w->ckpts[i].used < w->ckpts[lru].used) lru = i;
        ckpt_drop(w, lru);
    }
    if (w->ckpt_bytes + bytes > w->ckpt_budget) {
        strata_snapshot_free(snap);
        return;
    }
    ckpt *c = &w->ckpts[w->n_ckpts++];
    c->snap = snap;
    c->tokens = strata_snapshot_tokens(snap, &c->n);
    c->reusable = w->live_prompt < c->n ? w->live_prompt : c->n;
    c->bytes = bytes;
    c->used = ++w->ckpt_clock;
    w->ckpt_bytes += bytes;
    st_info("engine worker: checkpoint of %d tokens (%.1f MiB; %d checkpoints, %.1f MiB)", c->n,
            (double)bytes / (1 << 20), w->n_ckpts, (double)w->ckpt_bytes / (1 << 20));
}

// The prefix cache: saves the live timeline if this request abandons it, then puts the longest common prefix of the
// prompt with the live session or a checkpoint into the session. Returns the cached prompt tokens; *from_ckpt is set
// when a checkpoint supplied them.
// Outputs must not depend on the cache, and the CPU backend follows llama.cpp's arithmetic, which differs between
// one-token steps and batches (attention's V product). So only positions that were computed by prompt prefill
// batches are reused (not the generated answer, which was decoded one token at a time and is evaluated again as part
// of the next prompt), and at least two tokens are evaluated, never a one-token batch.
static int32_t prefix_lookup(worker *w, const int32_t *toks, int32_t n_prompt, bool use_cache, bool *from_ckpt) {
    *from_ckpt = false;
    if (!w->prefix_cache) {
        strata_session_truncate(w->s, 0);
        return 0;
    }
    int32_t live = common_prefix(strata_session_tokens(w->s), strata_session_n_past(w->s), toks, n_prompt);
    ckpt_save_live(w, live);
    if (live > w->live_prompt) live = w->live_prompt;
    if (!use_cache) {
        strata_session_truncate(w->s, 0);
        return 0;
    }
    int best = -1;
    int32_t n_best = live;
    for (int i = 0; i < w->n_ckpts; i++) {
        int32_t c = common_prefix(w->ckpts[i].tokens, w->ckpts[i].n, toks, n_prompt);
        if (c > w->ckpts[i].reusable) c = w->ckpts[i].reusable;
        if (c > n_best) n_best = c, best = i;
    }
    int32_t max_reuse = n_prompt >= 2 ? n_prompt - 2 : 0;
    if (n_best > max_reuse) n_best = max_reuse;
    if (live > max_reuse) live = max_reuse;
    // Copying K/V rows is far cheaper than evaluating even one token, so any gain makes a restore worth it.
    if (best >= 0 && n_best > live) {
        if (strata_session_restore_prefix(w->s, w->ckpts[best].snap, n_best) == 0) {
            w->ckpts[best].used = ++w->ckpt_clock;
            *from_ckpt = true;
            return n_best;
        }
        st_warn("engine worker: checkpoint restore failed: %s", strata_last_error());
    }
    strata_session_truncate(w->s, live);
    return live;
}

static void do_generate(worker *w, json_t *m, json_int_t id) {
    int32_t *toks = NULL;
    int32_t n_prompt;
    json_t *jt = json_object_get(m, "tokens");
    if (json_is_array(jt)) {
        char why[128];
        n_prompt = read_tokens(w, jt, &toks, why, sizeof why);
        if (n_prompt < 0) {
            send_error(w, id, 400, "invalid_prompt", "prompt", "prompt: %s", why);
            return;
        }
    } else {
        json_t *jp = json_object_get(m, "prompt");
        n_prompt = tokenize(w, json_string_value(jp) ? json_string_value(jp) : "", json_string_length(jp),
                            !json_is_false(json_object_get(m, "add_special")),
                            !json_is_false(json_object_get(m, "parse_special")), &toks);
        if (n_prompt < 0) {
            send_error(w, id, 400, "tokenize_failed", "prompt", "cannot tokenize the prompt: %s", strata_last_error());
            return;
        }
    }
    int32_t n_ctx = strata_session_n_ctx(w->s);
    if (n_prompt == 0) {
        send_error(w, id, 400, "empty_prompt", "prompt", "the prompt is empty (0 tokens)");
        free(toks);
        return;
    }
    if (n_prompt >= n_ctx) {
        send_error(w, id, 400, "context_length_exceeded", "messages",
                   "the prompt has %d tokens but the context is %d tokens (at most %d prompt tokens, leaving room for "
                   "one generated token); shorten the prompt or start the server with a larger -c",
                   n_prompt, n_ctx, n_ctx - 1);
        free(toks);
        return;
    }
    // max_tokens is clamped to what the context can still hold.
    json_int_t max_tokens = json_integer_value(json_object_get(m, "max_tokens"));
    if (max_tokens <= 0 || max_tokens > n_ctx - n_prompt) max_tokens = n_ctx - n_prompt;

    // Prefix cache: keep the longest common prefix with the live session or a checkpoint, evaluate only the rest.
    bool from_ckpt = false;
    int32_t n_cached = prefix_lookup(w, toks, n_prompt, !json_is_false(json_object_get(m, "cache")), &from_ckpt);
    w->live_prompt = n_prompt;
    send_msg(w, json_pack("{s:s, s:I, s:i, s:i, s:b}", "t", "prompt", "id", id, "n_prompt", n_prompt, "n_cached",
                          n_cached, "checkpoint", from_ckpt));

    w->cur_id = id;
    w->cancel = false;
    const char *finish = "stop";
    int32_t n_gen = 0;
    double t0 = st_now(), t_prefill = 0, t_decode = 0;
    strata_sampler *smp = NULL;
    strata_gen *gen = NULL;  // decoding: sampling and one step ahead (strata.h)
    strata_detok *dt = NULL;
    char *pending = NULL;
    int32_t *forced = NULL, n_forced = -1, i_forced = 0;  // test hook: scripted tokens
    const char *stop_hit = NULL;  // the stop string that ended the answer
    // Every chunk but the last: the last one is evaluated by strata_gen_begin, which then samples from its logits.
    // Equal pieces of at most the chunk (17,000 tokens on a 4,096-token backend: 5 x 3,400, not a 616-token tail
    // that stages as many experts as a full piece).
    int32_t i_pre = n_cached;
    const int32_t chunk = strata_prefill_chunk(w->e) > PREFILL_CHUNK ? strata_prefill_chunk(w->e) : PREFILL_CHUNK;
    const int32_t n_pieces = (n_prompt - n_cached + chunk - 1) / chunk;
    const int32_t pre_n = n_pieces > 0 ? (n_prompt - n_cached + n_pieces - 1) / n_pieces : chunk;
    for (; i_pre < n_prompt && !w->cancel && !w->gone;) {
        int32_t n = n_prompt - i_pre < pre_n ? n_prompt - i_pre : pre_n;
        if (n_prompt - i_pre - n == 1) n--;  // no one-token tail batch (see prefix_lookup)
        if (i_pre + n >= n_prompt) break;
        if (strata_session_eval(w->s, toks + i_pre, n, NULL, false)) {
            send_error(w, id, 500, "engine_error", NULL, "prefill failed at token %d: %s", i_pre, strata_last_error());
            strata_session_truncate(w->s, 0);
            goto out;
        }
        i_pre += n;
        send_msg(w, json_pack("{s:s, s:I, s:i, s:i}", "t", "prefill", "id", id, "done", i_pre - n_cached, "total",
                              n_prompt - n_cached));
        poll_side(w);
    }
    if (w->cancel || w->gone) {
        t_prefill = st_now() - t0;
        finish = "cancelled";
        goto done;
    }

    json_t *js = json_object_get(m, "sampling");
    strata_sampler_params sp = strata_sampler_default_params();
    sp.temperature = (float)num(js, "temperature", sp.temperature);
    sp.top_k = (int32_t)num(js, "top_k", sp.top_k);
    sp.top_p = (float)num(js, "top_p", sp.top_p);
    sp.min_p = (float)num(js, "min_p", sp.min_p);
    sp.repeat_penalty = (float)num(js, "repeat_penalty", sp.repeat_penalty);
    sp.presence_penalty = (float)num(js, "presence_penalty", sp.presence_penalty);
    sp.frequency_penalty = (float)num(js, "frequency_penalty", sp.frequency_penalty);
    sp.penalty_last_n = (int32_t)num(js, "penalty_last_n", sp.penalty_last_n);
    sp.seed = (uint64_t)json_integer_value(json_object_get(js, "seed"));
    smp = strata_sampler_new(&sp);
    // Test hook: a scripted completion is fed through the same path as sampled tokens (eval, detokenize, stops).
    const char *scripted = w->script && !json_is_array(jt) ? script_pick(w, json_string_value(json_object_get(m, "prompt"))) : NULL;
    if (scripted) n_forced = tokenize(w, scripted, strlen(scripted), false, true, &forced);
    bool special = json_is_true(json_object_get(m, "special")) && w->ctrl_text;
    for (int32_t i = 0; i < n_prompt; i++) strata_sampler_accept(smp, toks[i]);
    strata_gen_params gp = strata_gen_default_params();
    gp.n_max = (int32_t)max_tokens;
    gen = strata_gen_begin(w->s, smp, toks + i_pre, n_prompt - i_pre, &gp);  // the prompt's last chunk
    if (!gen) {
        send_error(w, id, 500, "engine_error", NULL, "prefill failed at token %d: %s", i_pre, strata_last_error());
        strata_session_truncate(w->s, 0);
        goto out;
    }
    send_msg(w, json_pack("{s:s, s:I, s:i, s:i}", "t", "prefill", "id", id, "done", n_prompt - n_cached, "total",
                          n_prompt - n_cached));
    t_prefill = st_now() - t0;
    dt = strata_detok_new(w->e);
    json_t *stops = json_object_get(m, "stop");
    bool ignore_eos = json_is_true(json_object_get(m, "ignore_eos"));
    size_t cap = 4096, len = 0;
    pending = malloc(cap);
    pending[0] = 0;
    char piece[1024];
    bool hit = false;
    double t1 = st_now();
    finish = "length";
    for (;;) {
        int32_t tok;
        if (n_forced >= 0) {
            if (i_forced == n_forced) {
                finish = "stop";
                break;
            }
            tok = forced[i_forced++];
            strata_sampler_accept(smp, tok);
        } else if ((tok = strata_gen_next(gen)) < 0) {  // (accepted; the step that evaluates it already runs)
            send_error(w, id, 500, "engine_error", NULL, "decode failed after %d tokens: %s", n_gen,
                       strata_last_error());
            strata_gen_end(gen);
            gen = NULL;
            strata_session_truncate(w->s, 0);
            goto out;
        }
        n_gen++;
        if (!ignore_eos && strata_token_is_eog(w->e, tok)) {
            finish = "stop";
            break;
        }
        int32_t k = strata_detok_push(dt, tok, piece, sizeof piece);
        if (special && w->ctrl_text[tok]) k = snprintf(piece, sizeof piece, "%s", w->ctrl_text[tok]);
        if (k > 0) {
            if (len + (size_t)k + 1 > cap) pending = realloc(pending, cap = 2 * (cap + (size_t)k));
            memcpy(pending + len, piece, (size_t)k + 1);
            len += (size_t)k;
        }
        size_t emit = stop_scan(pending, len, stops, &hit, &stop_hit);
        send_msg(w, json_pack("{s:s, s:I, s:s%, s:i}", "t", "tok", "id", id, "text", pending, emit, "n_gen", n_gen));
        memmove(pending, pending + emit, len - emit + 1);
        len -= emit;
        if (hit) {
            finish = "stop";
            break;
        }
        if (n_gen >= max_tokens) break;
        if (strata_session_n_past(w->s) >= n_ctx) break;
        // Scripted tokens (test hook) are not evaluated: the test is about the server's path, and evaluating costs
        // time on CI's two cores; the KV then holds the prompt, which is what the next turn's prefix reuses anyway.
        poll_side(w);
        if (w->cancel || w->gone) {
            finish = "cancelled";
            break;
        }
    }
    if (!hit) {
        int32_t k = strata_detok_flush(dt, piece, sizeof piece);
        if (k > 0 || len > 0) {
            if (len + (size_t)k + 1 > cap) pending = realloc(pending, cap = len + (size_t)k + 1);
            memcpy(pending + len, piece, (size_t)k + 1);
            len += (size_t)k;
            bool hit2 = false;
            size_t emit = stop_scan(pending, len, stops, &hit2, &stop_hit);
            if (hit2) finish = "stop";
            else emit = len;  // at the end, a partial stop-string prefix is just text
            send_msg(w, json_pack("{s:s, s:I, s:s%, s:i}", "t", "tok", "id", id, "text", pending, emit, "n_gen", n_gen));
        }
    }
    t_decode = st_now() - t1;
done:
    if (gen && strata_gen_end(gen)) {  // (the session keeps the prompt and the generated tokens but the last)
        gen = NULL;
        send_error(w, id, 500, "engine_error", NULL, "decode failed after %d tokens: %s", n_gen, strata_last_error());
        strata_session_truncate(w->s, 0);
        goto out;
    }
    gen = NULL;
    json_t *done_msg = json_pack("{s:s, s:I, s:s, s:i, s:i, s:i, s:f, s:f, s:i, s:b, s:i, s:I}", "t", "done", "id", id,
                                 "finish", finish, "n_prompt", n_prompt, "n_cached", n_cached, "n_gen", n_gen,
                                 "t_prefill", t_prefill, "t_decode", t_decode, "kv_used", strata_session_n_past(w->s),
                                 "checkpoint", from_ckpt, "checkpoints", w->n_ckpts, "checkpoint_bytes",
                                 (json_int_t)w->ckpt_bytes);
    if (stop_hit && done_msg) json_object_set_new(done_msg, "stop_hit", json_string(stop_hit));
    send_msg(w, done_msg);
out:
    strata_gen_end(gen);
    w->cur_id = 0;
    free(forced);
    free(pending);
    strata_detok_free(dt);
    strata_sampler_free(smp);
    free(toks);
}

int st_worker_main(const st_server_config *c) {
    // The worker must never outlive the server: die with it (and check it is not already gone).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1) return 1;
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, SIG_IGN);  // Ctrl-C reaches the whole process group; the server decides when the worker ends
    worker w = {.fd = c->worker_fd, .prefix_cache = c->prefix_cache};
    w.ckpt_max = c->prefix_cache && c->prompt_checkpoints > 0 && c->checkpoint_mib > 0 ? c->prompt_checkpoints : 0;
    w.ckpt_budget = (size_t)c->checkpoint_mib << 20;
    w.ckpt_min = c->checkpoint_min_tokens > 0 ? c->checkpoint_min_tokens : 1;
    if (w.ckpt_max) w.ckpts = calloc((size_t)w.ckpt_max, sizeof *w.ckpts);
    st_info("engine worker %d: loading %s", (int)getpid(), c->model_path);
    double t0 = st_now();
    strata_engine_params ep = strata_engine_default_params();
    ep.model_path = c->model_path;
    ep.n_threads = c->n_threads;
    ep.device = c->device;
    ep.gpu_mem_gib = c->gpu_mem_gib;
    ep.plan_n_ctx = c->n_ctx > 0 ? c->n_ctx : 32768;  // the session's context is known only after loading: at most
    ep.plan_kv_f32 = c->kv_f32;                       // 32768 (below), so a budget plans for that
    ep.profile_path = c->profile_path;
    ep.pack_path = c->pack_path;
    ep.arena_mmap = c->arena_mmap;
    ep.cpu_misses = c->cpu_misses;
    ep.pcie_frac = c->pcie_frac;
    ep.no_prefill_cpu = c->no_prefill_cpu;
    ep.n_ubatch = c->n_ubatch;
    w.e = strata_engine_load(&ep);
    if (!w.e) {
        st_error("engine worker: %s", strata_last_error());
        return 1;
    }
    strata_session_params sp = strata_session_default_params();
    sp.n_ctx = c->n_ctx;
    if (sp.n_ctx <= 0) {
        // Default: the trained context, capped so a 128K-context model does not reserve a huge KV by surprise.
        sp.n_ctx = strata_n_ctx_train(w.e);
        if (sp.n_ctx > 32768) sp.n_ctx = 32768;
    }
    sp.kv_f32 = c->kv_f32;
    w.s = strata_session_new(w.e, &sp);
    if (!w.s) {
        st_error("engine worker: %s", strata_last_error());
        strata_engine_free(w.e);
        return 1;
    }
    w.n_vocab = strata_n_vocab(w.e);
    const st_model *model = strata_engine_model(w.e);
    if (model)
        w.kv_token_bytes = sizeof(int32_t) + (size_t)model->hp.n_layer * model->hp.n_head_kv *
                                                 (model->hp.head_dim_k + model->hp.head_dim_v) * (c->kv_f32 ? 4 : 2);
    load_control_texts(&w);
    const char *tmpl = strata_chat_template(w.e);
    // Test hooks (server.h): scripted completions, and a chat template that replaces the model's.
    const char *script_path = getenv("STRATA_SERVE_TEST_SCRIPT");
    if (script_path && *script_path) w.script = script_load(script_path);
    char *test_tmpl = NULL;
    const char *tmpl_path = getenv("STRATA_SERVE_TEST_TEMPLATE");
    if (tmpl_path && *tmpl_path) {
        FILE *f = fopen(tmpl_path, "rb");
        if (f) {
            fseek(f, 0, SEEK_END);
            long n = ftell(f);
            fseek(f, 0, SEEK_SET);
            test_tmpl = calloc(1, (size_t)(n > 0 ? n : 0) + 1);
            if (n > 0 && fread(test_tmpl, 1, (size_t)n, f) != (size_t)n) test_tmpl[0] = 0;
            fclose(f);
            tmpl = test_tmpl;
            st_warn("engine worker: TEST HOOK: chat template from %s replaces the model's", tmpl_path);
        } else st_error("engine worker: test template %s: %s", tmpl_path, strerror(errno));
    }
    char bos[256] = "";
    int32_t bos_id = strata_token_bos(w.e);
    if (bos_id >= 0) {
        int32_t k = strata_token_to_piece(w.e, bos_id, bos, sizeof bos - 1);
        bos[k > 0 ? k : 0] = 0;
    }
    double load_s = st_now() - t0;
    st_info("engine worker %d: ready in %.2f s (context %d tokens, %d threads)", (int)getpid(), load_s,
            strata_session_n_ctx(w.s), strata_n_threads(w.e));
    json_t *ready = json_pack("{s:s, s:i, s:i, s:i, s:s, s:i, s:s, s:f, s:i}", "t", "ready", "n_ctx",
                              strata_session_n_ctx(w.s), "n_ctx_train", strata_n_ctx_train(w.e), "n_vocab",
                              w.n_vocab, "arch", strata_arch_name(w.e), "threads", strata_n_threads(w.e), "bos_token",
                              bos, "load_s", load_s, "pid", (int)getpid());
    if (tmpl) json_object_set_new(ready, "chat_template", json_string(tmpl));
    json_object_set_new(ready, "backend", json_string(strata_backend_name(w.e)));
    send_msg(&w, ready);

    while (!w.gone) {
        int eof = 0;
        json_t *m = st_proto_recv(w.fd, -1, &eof);
        if (!m) {
            if (eof) break;
            continue;
        }
        const char *t = json_string_value(json_object_get(m, "t"));
        json_int_t id = json_integer_value(json_object_get(m, "id"));
        if (t && !strcmp(t, "gen")) do_generate(&w, m, id);
        else handle_side(&w, m);
        json_decref(m);
    }
    while (w.n_ckpts > 0) ckpt_drop(&w, w.n_ckpts - 1);
    free(w.ckpts);
    if (w.ctrl_text)
        for (int32_t i = 0; i < w.n_vocab; i++) free(w.ctrl_text[i]);
    free(w.ctrl_text);
    free(test_tmpl);
    json_decref(w.script);
    strata_session_free(w.s);
    strata_engine_free(w.e);
    return 0;
}
