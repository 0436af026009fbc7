// OpenAI-compatible endpoints: /v1/chat/completions, /v1/completions, /v1/models, plus /tokenize and /detokenize.
// Request fields are checked one by one so that a bad one gets a 400 naming it; generation runs as an engine job.
// Tool calls (tools, tool_choice, tool_calls in the answer) and reasoning_content are the follow-up's (toolcall.c):
// `tools` is validated and passed to the chat template already.
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

typedef struct gen_ctx {
    bool chat;              // chat.completion(.chunk) vs text_completion
    bool include_usage;
    bool role_sent;
    char id[48];
    char model[256];
    time_t created;
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

static const char *finish_reason(json_t *done) {
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

static void chunk_text(gen_ctx *g, st_sbuf *out, const char *text, json_t *finish) {
    json_t *c = chunk_base(g), *choice;
    if (g->chat) {
        json_t *delta = json_object();
        if (!g->role_sent) {
            json_object_set_new(delta, "role", json_string("assistant"));
            g->role_sent = true;
        }
        if (text) json_object_set_new(delta, "content", json_string(text));
        choice = json_pack("{s:i, s:o, s:o, s:n}", "index", 0, "delta", delta, "finish_reason",
                           finish ? finish : json_null(), "logprobs");
    } else {
        choice = json_pack("{s:i, s:s, s:o, s:n}", "index", 0, "text", text ? text : "", "finish_reason",
                           finish ? finish : json_null(), "logprobs");
    }
    json_object_set_new(c, "choices", json_pack("[o]", choice));
    sse_data(out, c);
}

static bool gen_format(void *ud, json_t *ev, st_sbuf *out) {
    gen_ctx *g = ud;
    const char *t = json_string_value(json_object_get(ev, "t"));
    if (!t) return false;
    if (!strcmp(t, "prompt")) {
        if (g->chat && !g->role_sent) chunk_text(g, out, "", NULL);
        return false;
    }
    if (!strcmp(t, "tok")) {
        const char *text = json_string_value(json_object_get(ev, "text"));
        if (text && *text) chunk_text(g, out, text, NULL);
        return false;
    }
    if (!strcmp(t, "done")) {
        chunk_text(g, out, NULL, json_string(finish_reason(ev)));
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
        json_t *err = json_pack("{s:s, s:s, s:s, s:i}", "message", json_string_value(json_object_get(ev, "message")),
                                "type", status == 503 ? "service_unavailable" : status < 500 ? "invalid_request_error" : "server_error",
                                "code", json_string_value(json_object_get(ev, "code")) ? json_string_value(json_object_get(ev, "code")) : "error",
                                "status", status);
        sse_data(out, json_pack("{s:o}", "error", err));
        return true;
    }
    return false;
}

static void gen_end(void *ud) { free(ud); }

static enum MHD_Result run_generation(st_req *r, json_t *gen, gen_ctx *g, bool stream) {
    int status = 0;
    st_job *j = st_job_submit(gen, ST_JOB_GEN, &status);
    if (!j) {
        free(g);
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
                free(g);
                return MHD_NO;
            }
            first = st_job_next(j, 0.25);
        }
        const char *t = first ? json_string_value(json_object_get(first, "t")) : NULL;
        if (t && !strcmp(t, "error")) {
            enum MHD_Result rc = st_reply_engine_error(r, first);
            json_decref(first);
            st_job_release(j);
            free(g);
            return rc;
        }
        return st_reply_sse(r, j, first, gen_format, gen_end, g);
    }
    st_sbuf text = {0};
    st_sbuf_add(&text, "", 0);
    enum MHD_Result rc = MHD_NO;
    for (;;) {
        if (st_client_gone(r)) break;  // closes the connection; the release below cancels the generation
        json_t *ev = st_job_next(j, 0.25);
        if (!ev) continue;
        const char *t = json_string_value(json_object_get(ev, "t"));
        if (t && !strcmp(t, "tok")) {
            const char *s = json_string_value(json_object_get(ev, "text"));
            if (s) st_sbuf_add(&text, s, strlen(s));
        } else if (t && !strcmp(t, "error")) {
            rc = st_reply_engine_error(r, ev);
            json_decref(ev);
            break;
        } else if (t && !strcmp(t, "done")) {
            json_t *choice;
            if (g->chat)
                choice = json_pack("{s:i, s:{s:s, s:s}, s:s, s:n}", "index", 0, "message", "role", "assistant",
                                   "content", text.p, "finish_reason", finish_reason(ev), "logprobs");
            else
                choice = json_pack("{s:i, s:s, s:s, s:n}", "index", 0, "text", text.p, "finish_reason",
                                   finish_reason(ev), "logprobs");
            json_t *resp = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o], s:o, s:o}", "id", g->id, "object",
                                     g->chat ? "chat.completion" : "text_completion", "created",
                                     (json_int_t)g->created, "model", g->model, "system_fingerprint",
                                     fingerprint(), "choices", choice, "usage", usage_json(ev),
                                     "timings", timings_json(ev));
            rc = st_reply_json(r, 200, resp);
            json_decref(ev);
            break;
        }
        json_decref(ev);
    }
    free(text.p);
    st_job_release(j);
    free(g);
    return rc;
}

static gen_ctx *new_gen_ctx(bool chat, json_t *body, st_perr *e) {
    gen_ctx *g = calloc(1, sizeof *g);
    g->chat = chat;
    g->created = time(NULL);
    make_id(g->id, sizeof g->id, chat ? "chatcmpl-" : "cmpl-");
    snprintf(g->model, sizeof g->model, "%s", st_S.model_name);
    json_t *so = json_object_get(body, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) {
            st_perr_set(e, "stream_options", "'stream_options' must be an object");
            free(g);
            return NULL;
        }
        if (st_get_bool(so, "include_usage", &g->include_usage, e)) {
            snprintf(e->param, sizeof e->param, "stream_options.include_usage");
            free(g);
            return NULL;
        }
    }
    return g;
}

#define BAD_REQUEST(e) st_reply_error(r, 400, NULL, (e).param[0] ? (e).param : NULL, "%s", (e).msg)

enum MHD_Result st_api_chat_completions(st_req *r) {
    st_perr e = {{0}, {0}};
    json_t *body = st_parse_body(r, &e), *msgs = NULL, *gen = NULL;
    char *tmpl = NULL, *bos = NULL, *prompt = NULL;
    bool stream = false;
    gen_ctx *g = NULL;
    enum MHD_Result rc;
    const char *model = NULL;
    if (!body || st_get_bool(body, "stream", &stream, &e) || st_get_str(body, "model", &model, &e)) goto bad;
    if (!(msgs = normalize_messages(json_object_get(body, "messages"), &e))) goto bad;
    json_t *tools = json_object_get(body, "tools");
    if (tools && !json_is_null(tools) && !json_is_array(tools)) {
        st_perr_set(&e, "tools", "'tools' must be an array of tool definitions");
        goto bad;
    }
    json_t *kwargs = json_object_get(body, "chat_template_kwargs");
    if (kwargs && !json_is_null(kwargs) && !json_is_object(kwargs)) {
        st_perr_set(&e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
        goto bad;
    }
    gen = json_pack("{s:s}", "t", "gen");
    if (st_parse_sampling(body, gen, &e)) goto bad;
    if (!(g = new_gen_ctx(true, body, &e))) goto bad;
    if (st_wait_model_info(&tmpl, &bos)) {
        rc = st_reply_error(r, 503, NULL, NULL, "the engine is not ready (loading or restarting); retry later");
        goto out;
    }
    char err[1024];
    prompt = st_chat_render(tmpl, bos, "", msgs, json_is_array(tools) ? tools : NULL,
                            json_is_object(kwargs) ? kwargs : NULL, true, err, sizeof err);
    if (!prompt) {
        rc = st_reply_error(r, 400, NULL, "messages", "%s", err);
        goto out;
    }
    json_object_set_new(gen, "prompt", json_string(prompt));
    json_object_set_new(gen, "add_special", json_true());
    json_object_set_new(gen, "parse_special", json_true());
    rc = run_generation(r, gen, g, stream);
    gen = NULL;
    g = NULL;
    goto out;
bad:
    rc = BAD_REQUEST(e);
out:
    free(g);
    json_decref(gen);
    json_decref(msgs);
    json_decref(body);
    free(tmpl);
    free(bos);
    free(prompt);
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
    free(g);
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

// Runs a tokenize/detokenize job and returns its final event, or NULL after replying with the error.
static json_t *run_side(st_req *r, json_t *msg, enum MHD_Result *rc) {
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
    json_t *ev = run_side(r, msg, &rc);
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
    json_t *ev = run_side(r, msg, &rc);
    if (!ev) return rc;
    rc = st_reply_json(r, 200, json_pack("{s:O}", "content", json_object_get(ev, "text")));
    json_decref(ev);
    return rc;
}
