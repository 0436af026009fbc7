// OpenAI-compatible endpoints: /v1/chat/completions, /v1/completions, /v1/models, plus /tokenize and /detokenize.
// Request fields are checked one by one so that a bad one gets a 400 naming it; generation runs as an engine job.
// Chat answers go through the tool-call/reasoning parser (toolcall.c): tool_calls and reasoning_content, streamed as
// deltas.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/srv.h"
#include "strata.h"
#include "util/log.h"
#include "util/rng.h"

static uint64_t fresh_u64(void) {
    static uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^
                 (__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) << 40) ^ (uint64_t)getpid();
    return st_splitmix64(&x);
}

static const char *fingerprint(void) {
    static char fp[32];
    if (!fp[0]) snprintf(fp, sizeof fp, "strata-%s", strata_version());
    return fp;
}

static void make_id(char *out, size_t n, const char *prefix) {
    snprintf(out, n, "%s%016llx%08llx", prefix, (unsigned long long)fresh_u64(),
             (unsigned long long)(fresh_u64() & 0xffffffffu));
}

// ---- shared request fields ----------------------------------------------------------------------------------------

int st_parse_sampling(json_t *b, json_t *gen, st_perr *e) {
    double temperature = 0.8, top_p = 0.95, min_p = 0.05, presence = 0, frequency = 0, repeat = 1;
    int64_t top_k = 40, seed = -1, max_tokens = 0, n = 1, last_n = 64;
    bool cache = true, ignore_eos = false, logprobs = false;
    if (st_get_num(b, "temperature", &temperature, 0, 100, e) || st_get_num(b, "top_p", &top_p, 0, 1, e) ||
        st_get_int(b, "top_k", &top_k, 0, 1 << 30, e) || st_get_num(b, "min_p", &min_p, 0, 1, e) ||
        st_get_num(b, "presence_penalty", &presence, -2, 2, e) ||
        st_get_num(b, "frequency_penalty", &frequency, -2, 2, e) ||
        st_get_num(b, "repeat_penalty", &repeat, 0.01, 100, e) ||
        st_get_int(b, "repeat_last_n", &last_n, 0, 1 << 20, e) ||
        st_get_int(b, "seed", &seed, INT64_MIN, INT64_MAX, e) ||
        st_get_int(b, "max_tokens", &max_tokens, 1, 1ll << 31, e) ||
        st_get_int(b, "max_completion_tokens", &max_tokens, 1, 1ll << 31, e) ||  // the newer name wins
        st_get_int(b, "n", &n, 1, 1, e) || st_get_bool(b, "cache_prompt", &cache, e) ||
        st_get_bool(b, "ignore_eos", &ignore_eos, e) || st_get_bool(b, "logprobs", &logprobs, e))
        return -1;
    if (logprobs) return st_perr_set(e, "logprobs", "'logprobs' is not supported yet");
    json_t *stop = json_object_get(b, "stop"), *stops = json_array();
    if (json_is_string(stop)) {
        if (json_string_length(stop)) json_array_append(stops, stop);
    } else if (json_is_array(stop)) {
        size_t i;
        json_t *s;
        json_array_foreach(stop, i, s) {
            if (!json_is_string(s)) {
                json_decref(stops);
                return st_perr_set(e, "stop", "'stop[%zu]' must be a string", i);
            }
            if (json_string_length(s)) json_array_append(stops, s);
        }
        if (json_array_size(stops) > 16) {
            json_decref(stops);
            return st_perr_set(e, "stop", "'stop' may hold at most 16 strings, got %zu", json_array_size(stops));
        }
    } else if (stop && !json_is_null(stop)) {
        json_decref(stops);
        return st_perr_set(e, "stop", "'stop' must be a string or an array of strings");
    }
    json_object_set_new(gen, "stop", stops);
    json_object_set_new(gen, "max_tokens", json_integer(max_tokens));
    json_object_set_new(gen, "cache", json_boolean(cache));
    json_object_set_new(gen, "ignore_eos", json_boolean(ignore_eos));
    json_object_set_new(gen, "sampling",
                        json_pack("{s:f, s:I, s:f, s:f, s:f, s:f, s:f, s:I, s:I}", "temperature", temperature, "top_k",
                                  (json_int_t)top_k, "top_p", top_p, "min_p", min_p, "presence_penalty", presence,
                                  "frequency_penalty", frequency, "repeat_penalty", repeat, "penalty_last_n",
                                  (json_int_t)last_n, "seed", (json_int_t)(seed == -1 ? (int64_t)(fresh_u64() >> 1) : seed)));
    return 0;
}

// A message's content as one string: a string, null, or an array of {"type": "text", "text"} parts.
static int content_text(json_t *c, const char *where, st_sbuf *out, st_perr *e) {
    st_sbuf_add(out, "", 0);
    if (!c || json_is_null(c)) return 0;
    if (json_is_string(c)) {
        st_sbuf_add(out, json_string_value(c), json_string_length(c));
        return 0;
    }
    if (!json_is_array(c)) return st_perr_set(e, where, "'%s' must be a string or an array of content parts", where);
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        json_t *text = json_object_get(p, "text");
        if (!type) return st_perr_set(e, where, "'%s[%zu].type' must be a string", where, i);
        if (strcmp(type, "text") && strcmp(type, "input_text"))
            return st_perr_set(e, where, "'%s[%zu].type' is '%s'; only text content is supported", where, i, type);
        if (!json_is_string(text)) return st_perr_set(e, where, "'%s[%zu].text' must be a string", where, i);
        st_sbuf_add(out, json_string_value(text), json_string_length(text));
    }
    return 0;
}

// messages -> [{"role", "content": string, + name, tool_calls, tool_call_id, reasoning_content}] for the template.
static json_t *normalize_messages(json_t *msgs, st_perr *e) {
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        st_perr_set(e, "messages", "'messages' must be a non-empty array of {role, content} objects");
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        char where[64];
        snprintf(where, sizeof where, "messages[%zu]", i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!json_is_object(m) || !role) {
            st_perr_set(e, "messages", "'%s' must be an object with a string 'role'", where);
            goto fail;
        }
        if (!strcmp(role, "developer")) role = "system";
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "tool")) {
            st_perr_set(e, "messages", "'%s.role' is '%s'; expected system, developer, user, assistant or tool", where,
                        role);
            goto fail;
        }
        json_t *content = json_object_get(m, "content");
        json_t *tool_calls = json_object_get(m, "tool_calls");
        if ((!content || json_is_null(content)) && !(strcmp(role, "assistant") == 0 && tool_calls)) {
            st_perr_set(e, "messages", "'%s.content' is missing", where);
            goto fail;
        }
        snprintf(where, sizeof where, "messages[%zu].content", i);
        st_sbuf text = {0};
        if (content_text(content, where, &text, e)) {
            free(text.p);
            snprintf(e->param, sizeof e->param, "messages");
            goto fail;
        }
        json_t *n = json_pack("{s:s, s:s}", "role", role, "content", text.p);
        free(text.p);
        if (!n) {
            st_perr_set(e, "messages", "'%s' is not valid UTF-8", where);
            goto fail;
        }
        static const char *const keep[] = {"name", "tool_calls", "tool_call_id", "reasoning_content"};
        for (size_t k = 0; k < sizeof keep / sizeof keep[0]; k++) {
            json_t *v = json_object_get(m, keep[k]);
            if (v && !json_is_null(v)) json_object_set(n, keep[k], v);
        }
        json_array_append_new(out, n);
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

// ---- running a generation -----------------------------------------------------------------------------------------

void st_new_id(char *out, size_t n, const char *prefix) { make_id(out, n, prefix); }

typedef struct gen_ctx {
    bool chat;              // chat.completion(.chunk) vs text_completion
    bool include_usage;
    bool role_sent;
    bool stream;
    char id[48];
    char model[256];
    time_t created;
    // chat: the answer parser (tool calls, reasoning) and, for non-stream replies, what it produced
    st_tc_parser *parser;
    json_t *tools;          // the request's tools (the parser reads parameter types from them)
    st_sbuf *out;           // while streaming: where the parser's events are written
    st_sbuf content, reasoning;
    json_t *tool_calls;     // non-stream: [OpenAI tool calls]
} gen_ctx;

static json_t *usage_json(json_t *done) {
    json_int_t p = json_integer_value(json_object_get(done, "n_prompt"));
    json_int_t g = json_integer_value(json_object_get(done, "n_gen"));
    json_int_t c = json_integer_value(json_object_get(done, "n_cached"));
    return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", p, "completion_tokens", g, "total_tokens", p + g,
                     "prompt_tokens_details", "cached_tokens", c);
}

static json_t *timings_json(json_t *done) {
    double tp = json_number_value(json_object_get(done, "t_prefill"));
    double td = json_number_value(json_object_get(done, "t_decode"));
    json_int_t p = json_integer_value(json_object_get(done, "n_prompt"));
    json_int_t c = json_integer_value(json_object_get(done, "n_cached"));
    json_int_t g = json_integer_value(json_object_get(done, "n_gen"));
    return json_pack("{s:I, s:I, s:f, s:f, s:I, s:f, s:f}", "prompt_n", p - c, "cache_n", c, "prompt_ms", tp * 1e3,
                     "prompt_per_second", tp > 0 ? (double)(p - c) / tp : 0.0, "predicted_n", g, "predicted_ms",
                     td * 1e3, "predicted_per_second", td > 0 && g > 1 ? (double)(g - 1) / td : 0.0);
}

static const char *finish_reason(gen_ctx *g, json_t *done) {
    if (g->parser && st_tc_n_calls(g->parser) > 0) return "tool_calls";
    const char *f = json_string_value(json_object_get(done, "finish"));
    return f && !strcmp(f, "length") ? "length" : "stop";
}

static json_t *chunk_base(gen_ctx *g) {
    return json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", g->id, "object",
                     g->chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)g->created, "model",
                     g->model, "system_fingerprint", fingerprint());
}

static void sse_data(st_sbuf *out, json_t *obj) {
    char *s = json_dumps(obj, JSON_COMPACT);
    st_sbuf_printf(out, "data: %s\n\n", s ? s : "{}");
    free(s);
    json_decref(obj);
}

// One chat chunk with `delta` (stolen; the role is added to the first), or a completion chunk with text.
static void chunk_delta(gen_ctx *g, st_sbuf *out, json_t *delta, const char *text, json_t *finish) {
    json_t *c = chunk_base(g), *choice;
    if (g->chat) {
        if (!delta) delta = json_object();
        if (!g->role_sent) {
            json_object_set_new(delta, "role", json_string("assistant"));
            if (!json_object_get(delta, "content")) json_object_set_new(delta, "content", json_string(""));
            g->role_sent = true;
        }
        choice = json_pack("{s:i, s:o, s:o, s:n}", "index", 0, "delta", delta, "finish_reason",
                           finish ? finish : json_null(), "logprobs");
    } else {
        choice = json_pack("{s:i, s:s, s:o, s:n}", "index", 0, "text", text ? text : "", "finish_reason",
                           finish ? finish : json_null(), "logprobs");
    }
    json_object_set_new(c, "choices", json_pack("[o]", choice));
    sse_data(out, c);
}

static json_t *str_n(const char *s, size_t n) {
    json_t *v = json_stringn(s, n);
    return v ? v : json_string("\xef\xbf\xbd");  // not UTF-8 (cannot happen with the detokenizer): U+FFFD
}

// The parser's events: deltas while streaming, else accumulated for the reply.
static void on_parsed(void *ud, const st_tc_event *ev) {
    gen_ctx *g = ud;
    if (!g->stream) {
        switch (ev->kind) {
        case ST_TC_CONTENT: st_sbuf_add(&g->content, ev->text, ev->len); break;
        case ST_TC_REASONING: st_sbuf_add(&g->reasoning, ev->text, ev->len); break;
        case ST_TC_TOOL_START:
            json_array_append_new(g->tool_calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", ev->id, "type",
                                                           "function", "function", "name", ev->name, "arguments", ""));
            break;
        case ST_TC_TOOL_ARGS: {
            json_t *f = json_object_get(json_array_get(g->tool_calls, (size_t)ev->index), "function");
            st_sbuf a = {0};
            st_sbuf_printf(&a, "%s", json_string_value(json_object_get(f, "arguments")));
            st_sbuf_add(&a, ev->text, ev->len);
            json_object_set_new(f, "arguments", str_n(a.p, a.len));
            free(a.p);
            break;
        }
        }
        return;
    }
    if (!g->out) return;  // only a forced prefix is parsed before the stream exists, and it is all markup
    json_t *delta = json_object();
    switch (ev->kind) {
    case ST_TC_CONTENT: json_object_set_new(delta, "content", str_n(ev->text, ev->len)); break;
    case ST_TC_REASONING: json_object_set_new(delta, "reasoning_content", str_n(ev->text, ev->len)); break;
    case ST_TC_TOOL_START:
        json_object_set_new(delta, "tool_calls",
                            json_pack("[{s:i, s:s, s:s, s:{s:s, s:s}}]", "index", ev->index, "id", ev->id, "type",
                                      "function", "function", "name", ev->name, "arguments", ""));
        break;
    case ST_TC_TOOL_ARGS:
        json_object_set_new(delta, "tool_calls", json_pack("[{s:i, s:{s:o}}]", "index", ev->index, "function",
                                                           "arguments", str_n(ev->text, ev->len)));
        break;
    }
    chunk_delta(g, g->out, delta, NULL, NULL);
}

static bool gen_format(void *ud, json_t *ev, st_sbuf *out) {
    gen_ctx *g = ud;
    const char *t = json_string_value(json_object_get(ev, "t"));
    if (!t) return false;
    g->out = out;
    if (!strcmp(t, "prompt")) {
        if (g->stream && g->chat && !g->role_sent) chunk_delta(g, out, NULL, NULL, NULL);
        return false;
    }
    if (!strcmp(t, "tok")) {
        const char *text = json_string_value(json_object_get(ev, "text"));
        if (!text || !*text) return false;
        if (g->parser) st_tc_feed(g->parser, text, strlen(text));
        else if (g->stream) chunk_delta(g, out, NULL, text, NULL);
        else st_sbuf_add(&g->content, text, strlen(text));
        return false;
    }
    if (!strcmp(t, "done")) {
        if (g->parser) st_tc_finish(g->parser);
        if (!g->stream) return true;
        chunk_delta(g, out, NULL, NULL, json_string(finish_reason(g, ev)));
        if (g->include_usage) {
            json_t *c = chunk_base(g);
            json_object_set_new(c, "choices", json_array());
            json_object_set_new(c, "usage", usage_json(ev));
            json_object_set_new(c, "timings", timings_json(ev));
            sse_data(out, c);
        }
        st_sbuf_printf(out, "data: [DONE]\n\n");
        return true;
    }
    if (!strcmp(t, "error")) {
        // The OpenAI clients raise an APIError for a data line with an "error" object.
        int status = (int)json_integer_value(json_object_get(ev, "status"));
        const char *code = json_string_value(json_object_get(ev, "code"));
        json_t *err = json_pack("{s:s, s:s, s:s, s:i}", "message", json_string_value(json_object_get(ev, "message")),
                                "type", status == 503 ? "service_unavailable" : status < 500 ? "invalid_request_error"
                                                                                             : "server_error",
                                "code", code ? code : "error", "status", status);
        sse_data(out, json_pack("{s:o}", "error", err));
        return true;
    }
    return false;
}

static json_t *gen_respond(void *ud, json_t *done) {
    gen_ctx *g = ud;
    json_t *choice;
    if (g->chat) {
        bool calls = json_array_size(g->tool_calls) > 0;
        json_t *msg = json_pack("{s:s}", "role", "assistant");
        json_object_set_new(msg, "content", calls && !g->content.len ? json_null()
                                                                     : str_n(g->content.p ? g->content.p : "", g->content.len));
        if (g->reasoning.len) json_object_set_new(msg, "reasoning_content", str_n(g->reasoning.p, g->reasoning.len));
        if (calls) json_object_set(msg, "tool_calls", g->tool_calls);
        choice = json_pack("{s:i, s:o, s:s, s:n}", "index", 0, "message", msg, "finish_reason", finish_reason(g, done),
                           "logprobs");
    } else {
        choice = json_pack("{s:i, s:o, s:s, s:n}", "index", 0, "text", str_n(g->content.p ? g->content.p : "",
                           g->content.len), "finish_reason", finish_reason(g, done), "logprobs");
    }
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o], s:o, s:o}", "id", g->id, "object",
                     g->chat ? "chat.completion" : "text_completion", "created", (json_int_t)g->created, "model",
                     g->model, "system_fingerprint", fingerprint(), "choices", choice, "usage", usage_json(done),
                     "timings", timings_json(done));
}

static void gen_free(void *ud) {
    gen_ctx *g = ud;
    if (!g) return;
    st_tc_parser_free(g->parser);
    json_decref(g->tools);
    json_decref(g->tool_calls);
    free(g->content.p);
    free(g->reasoning.p);
    free(g);
}

enum MHD_Result st_run_generation(st_req *r, json_t *gen, bool stream, st_sse_format format, void (*on_end)(void *ud),
                                  void *ud, json_t *(*respond)(void *ud, json_t *done)) {
    int status = 0;
    st_job *j = st_job_submit(gen, ST_JOB_GEN, &status);
    if (!j) {
        on_end(ud);
        return st_reply_error(r, 429, NULL, NULL, "too many requests are waiting for the engine (--parallel-queue %d); "
                              "retry later", st_S.cfg->queue_max);
    }
    if (stream) {
        // Wait briefly for the engine to accept the prompt, so that early errors (prompt over the context) get a
        // real HTTP status; if the request is queued behind others, the stream starts and errors come as events.
        json_t *first = NULL;
        for (double t0 = st_now(); !first && st_now() - t0 < 2.0;) {
            if (st_client_gone(r)) {
                st_job_release(j);
                on_end(ud);
                return MHD_NO;
            }
            first = st_job_next(j, 0.25);
        }
        const char *t = first ? json_string_value(json_object_get(first, "t")) : NULL;
        if (t && !strcmp(t, "error")) {
            enum MHD_Result rc = st_reply_engine_error(r, first);
            json_decref(first);
            st_job_release(j);
            on_end(ud);
            return rc;
        }
        return st_reply_sse(r, j, first, format, on_end, ud);
    }
    st_sbuf scratch = {0};
    enum MHD_Result rc = MHD_NO;
    for (;;) {
        if (st_client_gone(r)) break;  // closes the connection; the release below cancels the generation
        json_t *ev = st_job_next(j, 0.25);
        if (!ev) continue;
        const char *t = json_string_value(json_object_get(ev, "t"));
        if (t && !strcmp(t, "error")) {
            rc = st_reply_engine_error(r, ev);
            json_decref(ev);
            break;
        }
        format(ud, ev, &scratch);
        scratch.len = 0;
        if (t && !strcmp(t, "done")) {
            rc = st_reply_json(r, 200, respond(ud, ev));
            json_decref(ev);
            break;
        }
        json_decref(ev);
    }
    free(scratch.p);
    st_job_release(j);
    on_end(ud);
    return rc;
}

static enum MHD_Result run_generation(st_req *r, json_t *gen, gen_ctx *g, bool stream) {
    g->stream = stream;
    return st_run_generation(r, gen, stream, gen_format, gen_free, g, gen_respond);
}

static gen_ctx *new_gen_ctx(bool chat, json_t *body, st_perr *e) {
    gen_ctx *g = calloc(1, sizeof *g);
    g->chat = chat;
    g->created = time(NULL);
    g->tool_calls = json_array();
    make_id(g->id, sizeof g->id, chat ? "chatcmpl-" : "cmpl-");
    snprintf(g->model, sizeof g->model, "%s", st_S.model_name);
    json_t *so = json_object_get(body, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) {
            st_perr_set(e, "stream_options", "'stream_options' must be an object");
            gen_free(g);
            return NULL;
        }
        if (st_get_bool(so, "include_usage", &g->include_usage, e)) {
            snprintf(e->param, sizeof e->param, "stream_options.include_usage");
            gen_free(g);
            return NULL;
        }
    }
    return g;
}

#define BAD_REQUEST(e) st_reply_error(r, 400, NULL, (e).param[0] ? (e).param : NULL, "%s", (e).msg)

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?}}].
static int check_tools(json_t *tools, st_perr *e) {
    if (!tools || json_is_null(tools)) return 0;
    if (!json_is_array(tools)) return st_perr_set(e, "tools", "'tools' must be an array of tool definitions");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *type = json_string_value(json_object_get(t, "type"));
        json_t *f = json_object_get(t, "function");
        if (!json_is_object(t) || !type || strcmp(type, "function"))
            return st_perr_set(e, "tools", "'tools[%zu].type' must be \"function\"", i);
        if (!json_is_object(f) || !json_string_value(json_object_get(f, "name")) ||
            !json_string_length(json_object_get(f, "name")))
            return st_perr_set(e, "tools", "'tools[%zu].function.name' must be a non-empty string", i);
        json_t *params = json_object_get(f, "parameters");
        if (params && !json_is_null(params) && !json_is_object(params))
            return st_perr_set(e, "tools", "'tools[%zu].function.parameters' must be a JSON-schema object", i);
    }
    return 0;
}

static bool has_tool(json_t *tools, const char *name) {
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *n = json_string_value(json_object_get(t, "name"));
        if (!n) n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (n && !strcmp(n, name)) return true;
    }
    return false;
}

// tool_choice: "auto" | "none" | "required" | {"type": "function", "function": {"name"}}.
static int parse_tool_choice(json_t *body, json_t *tools, st_tool_choice *choice, const char **name, st_perr *e) {
    json_t *tc = json_object_get(body, "tool_choice");
    *choice = ST_TOOLS_AUTO;
    *name = NULL;
    if (!tc || json_is_null(tc)) return 0;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (!strcmp(s, "auto")) *choice = ST_TOOLS_AUTO;
        else if (!strcmp(s, "none")) *choice = ST_TOOLS_NONE;
        else if (!strcmp(s, "required")) *choice = ST_TOOLS_REQUIRED;
        else return st_perr_set(e, "tool_choice", "'tool_choice' must be \"auto\", \"none\", \"required\" or "
                                "{\"type\": \"function\", \"function\": {\"name\": ...}}, got \"%s\"", s);
    } else {
        *name = json_string_value(json_object_get(json_object_get(tc, "function"), "name"));
        if (!json_is_object(tc) || !*name)
            return st_perr_set(e, "tool_choice", "'tool_choice' must be a string or {\"type\": \"function\", "
                               "\"function\": {\"name\": ...}}");
        *choice = ST_TOOLS_NAMED;
    }
    if (*choice != ST_TOOLS_NONE && *choice != ST_TOOLS_AUTO && !json_array_size(tools))
        return st_perr_set(e, "tool_choice", "'tool_choice' asks for a tool call but 'tools' is empty");
    if (*choice == ST_TOOLS_NAMED && !has_tool(tools, *name))
        return st_perr_set(e, "tool_choice", "'tool_choice' names the function '%s', which is not in 'tools'", *name);
    return 0;
}

// reasoning_effort (gpt-oss reads it from the template variables; "none" turns Qwen3's thinking off) and
// chat_template_kwargs (enable_thinking, ...): the template's extra variables. Returns a new object.
static json_t *template_kwargs(json_t *body, st_perr *e) {
    json_t *kwargs = json_object_get(body, "chat_template_kwargs");
    if (kwargs && !json_is_null(kwargs) && !json_is_object(kwargs)) {
        st_perr_set(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
        return NULL;
    }
    json_t *out = json_is_object(kwargs) ? json_deep_copy(kwargs) : json_object();
    const char *effort = NULL;
    if (st_get_str(body, "reasoning_effort", &effort, e)) {
        json_decref(out);
        return NULL;
    }
    if (effort) {
        static const char *const ok[] = {"none", "minimal", "low", "medium", "high"};
        bool found = false;
        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) found |= !strcmp(effort, ok[i]);
        if (!found) {
            st_perr_set(e, "reasoning_effort", "'reasoning_effort' must be none, minimal, low, medium or high, got "
                        "'%s'", effort);
            json_decref(out);
            return NULL;
        }
        if (!json_object_get(out, "reasoning_effort"))
            json_object_set_new(out, "reasoning_effort", json_string(!strcmp(effort, "none") || !strcmp(effort, "minimal")
                                                                         ? "low" : effort));
        if (!strcmp(effort, "none") && !json_object_get(out, "enable_thinking"))
            json_object_set_new(out, "enable_thinking", json_false());
    }
    return out;
}

// Sets up the engine message and the parser for a prepared chat request. tools: borrowed.
void st_chat_gen_setup(json_t *gen, const st_chat_plan *plan) {
    json_object_set_new(gen, "prompt", json_string(plan->prompt));
    json_object_set_new(gen, "add_special", json_true());
    json_object_set_new(gen, "parse_special", json_true());
    if (plan->special) json_object_set_new(gen, "special", json_true());
}

enum MHD_Result st_api_chat_completions(st_req *r) {
    st_perr e = {{0}, {0}};
    json_t *body = st_parse_body(r, &e), *msgs = NULL, *gen = NULL, *kwargs = NULL;
    bool stream = false;
    gen_ctx *g = NULL;
    enum MHD_Result rc;
    const char *model = NULL, *tool_name = NULL;
    st_tool_choice choice;
    st_chat_plan plan = {0};
    if (!body || st_get_bool(body, "stream", &stream, &e) || st_get_str(body, "model", &model, &e)) goto bad;
    if (!(msgs = normalize_messages(json_object_get(body, "messages"), &e))) goto bad;
    json_t *tools = json_object_get(body, "tools");
    if (check_tools(tools, &e) || parse_tool_choice(body, tools, &choice, &tool_name, &e)) goto bad;
    if (!json_is_array(tools)) tools = NULL;
    if (!(kwargs = template_kwargs(body, &e))) goto bad;
    gen = json_pack("{s:s}", "t", "gen");
    if (st_parse_sampling(body, gen, &e)) goto bad;
    if (!(g = new_gen_ctx(true, body, &e))) goto bad;
    char err[1024];
    int prc = st_chat_prepare(msgs, tools, kwargs, choice, tool_name, &plan, err, sizeof err);
    if (prc) {
        rc = prc == -2 ? st_reply_error(r, 503, NULL, NULL, "%s", err) : st_reply_error(r, 400, NULL, "messages", "%s", err);
        goto out;
    }
    st_chat_gen_setup(gen, &plan);
    g->stream = stream;
    g->tools = json_incref(tools);
    plan.popt.tool_defs = g->tools;
    g->parser = st_tc_parser_new(&plan.popt, on_parsed, g);
    if (plan.prefix) st_tc_feed(g->parser, plan.prefix, strlen(plan.prefix));
    rc = run_generation(r, gen, g, stream);
    gen = NULL;
    g = NULL;
    goto out;
bad:
    rc = BAD_REQUEST(e);
out:
    st_chat_plan_free(&plan);
    gen_free(g);
    json_decref(gen);
    json_decref(msgs);
    json_decref(kwargs);
    json_decref(body);
    return rc;
}

enum MHD_Result st_api_completions(st_req *r) {
    st_perr e = {{0}, {0}};
    json_t *body = st_parse_body(r, &e), *gen = NULL;
    bool stream = false, echo = false;
    gen_ctx *g = NULL;
    const char *model = NULL;
    if (!body || st_get_bool(body, "stream", &stream, &e) || st_get_str(body, "model", &model, &e) ||
        st_get_bool(body, "echo", &echo, &e))
        goto bad;
    if (echo) {
        st_perr_set(&e, "echo", "'echo' is not supported");
        goto bad;
    }
    gen = json_pack("{s:s}", "t", "gen");
    json_t *p = json_object_get(body, "prompt");
    if (json_is_array(p) && json_array_size(p) == 1 && !json_is_integer(json_array_get(p, 0)))
        p = json_array_get(p, 0);  // a batch of one
    if (json_is_string(p)) {
        json_object_set(gen, "prompt", p);
        json_object_set_new(gen, "add_special", json_true());
        json_object_set_new(gen, "parse_special", json_true());
    } else if (json_is_array(p) && json_array_size(p) > 0) {
        size_t i;
        json_t *v;
        json_array_foreach(p, i, v) if (!json_is_integer(v)) {
            st_perr_set(&e, "prompt", "'prompt' must be a string, an array of one string, or an array of token ids "
                        "(element %zu is not an integer; batches of several prompts are not supported)", i);
            goto bad;
        }
        json_object_set(gen, "tokens", p);
    } else {
        st_perr_set(&e, "prompt", "'prompt' must be a non-empty string or an array of token ids");
        goto bad;
    }
    if (!json_object_get(body, "max_tokens") || json_is_null(json_object_get(body, "max_tokens")))
        json_object_set_new(body, "max_tokens", json_integer(16));  // the OpenAI default for completions
    if (st_parse_sampling(body, gen, &e)) goto bad;
    if (!(g = new_gen_ctx(false, body, &e))) goto bad;
    json_decref(body);
    return run_generation(r, gen, g, stream);
bad:;
    enum MHD_Result rc = BAD_REQUEST(e);
    gen_free(g);
    json_decref(gen);
    json_decref(body);
    return rc;
}

enum MHD_Result st_api_models(st_req *r) {
    json_t *m = json_pack("{s:s, s:s, s:I, s:s}", "id", st_S.model_name, "object", "model", "created",
                          (json_int_t)(time(NULL) - (time_t)(st_now() - st_S.t_start)), "owned_by", "strata");
    pthread_mutex_lock(&st_S.mu);
    if (st_S.info)
        json_object_set_new(m, "meta", json_pack("{s:O, s:O, s:O, s:O}", "n_ctx", json_object_get(st_S.info, "n_ctx"),
                                                 "n_ctx_train", json_object_get(st_S.info, "n_ctx_train"), "n_vocab",
                                                 json_object_get(st_S.info, "n_vocab"), "arch",
                                                 json_object_get(st_S.info, "arch")));
    pthread_mutex_unlock(&st_S.mu);
    return st_reply_json(r, 200, json_pack("{s:s, s:[o]}", "object", "list", "data", m));
}

json_t *st_run_side(st_req *r, json_t *msg, enum MHD_Result *rc) {
    int status = 0;
    st_job *j = st_job_submit(msg, ST_JOB_SIDE, &status);
    json_t *ev = NULL;
    *rc = MHD_NO;
    while (!st_client_gone(r)) {
        ev = st_job_next(j, 0.25);
        if (ev) break;
    }
    st_job_release(j);
    if (ev && !strcmp(json_string_value(json_object_get(ev, "t")), "error")) {
        *rc = st_reply_engine_error(r, ev);
        json_decref(ev);
        return NULL;
    }
    return ev;
}

enum MHD_Result st_api_tokenize(st_req *r) {
    st_perr e = {{0}, {0}};
    json_t *body = st_parse_body(r, &e);
    const char *content = NULL;
    bool add_special = false, parse_special = true, pieces = false;
    if (!body || st_get_str(body, "content", &content, &e) || st_get_bool(body, "add_special", &add_special, &e) ||
        st_get_bool(body, "parse_special", &parse_special, &e) || st_get_bool(body, "with_pieces", &pieces, &e)) {
        json_decref(body);
        return BAD_REQUEST(e);
    }
    if (!content) {
        json_decref(body);
        return st_reply_error(r, 400, NULL, "content", "'content' (the text to tokenize) is missing");
    }
    json_t *msg = json_pack("{s:s, s:O, s:b, s:b}", "t", "tokenize", "text", json_object_get(body, "content"),
                            "add_special", add_special, "parse_special", parse_special);
    json_decref(body);
    enum MHD_Result rc;
    json_t *ev = st_run_side(r, msg, &rc);
    if (!ev) return rc;
    rc = st_reply_json(r, 200, json_pack("{s:O}", "tokens", json_object_get(ev, "tokens")));
    json_decref(ev);
    return rc;
}

enum MHD_Result st_api_detokenize(st_req *r) {
    st_perr e = {{0}, {0}};
    json_t *body = st_parse_body(r, &e);
    if (!body) return BAD_REQUEST(e);
    json_t *toks = json_object_get(body, "tokens");
    if (!json_is_array(toks)) {
        json_decref(body);
        return st_reply_error(r, 400, NULL, "tokens", "'tokens' must be an array of token ids");
    }
    json_t *msg = json_pack("{s:s, s:O}", "t", "detokenize", "tokens", toks);
    json_decref(body);
    enum MHD_Result rc;
    json_t *ev = st_run_side(r, msg, &rc);
    if (!ev) return rc;
    rc = st_reply_json(r, 200, json_pack("{s:O}", "content", json_object_get(ev, "text")));
    json_decref(ev);
    return rc;
}
