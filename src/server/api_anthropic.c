// Anthropic Messages API: POST /v1/messages (stream and non-stream) and POST /v1/messages/count_tokens.
// The request is mapped onto the normalized chat messages of the OpenAI module (system, text, tool_use -> tool_calls,
// tool_result -> tool messages, thinking -> reasoning_content) and runs as the same engine job with the same parser;
// the parser's events become content blocks (text, thinking, tool_use) and the streaming event sequence
// message_start, ping, content_block_start/delta/stop, message_delta, message_stop. Errors use Anthropic's shape
// ({"type": "error", "error": {"type", "message"}}; see st_reply_error).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"
#include "util/log.h"

// ---- request -> normalized messages ---------------------------------------------------------------------------------

// A tool_result's content: a string or an array of text blocks.
static int result_text(json_t *c, size_t mi, size_t bi, st_sbuf *out, st_perr *e) {
    st_sbuf_add(out, "", 0);
    if (!c || json_is_null(c)) return 0;
    if (json_is_string(c)) {
        st_sbuf_add(out, json_string_value(c), json_string_length(c));
        return 0;
    }
    if (!json_is_array(c))
        return st_perr_set(e, "messages", "'messages[%zu].content[%zu].content' must be a string or an array of text "
                           "blocks", mi, bi);
    size_t i;
    json_t *b;
    json_array_foreach(c, i, b) {
        const char *type = json_string_value(json_object_get(b, "type"));
        json_t *text = json_object_get(b, "text");
        if (!type || strcmp(type, "text") || !json_is_string(text))
            return st_perr_set(e, "messages", "'messages[%zu].content[%zu].content[%zu]' must be a text block "
                               "{\"type\": \"text\", \"text\": ...}; only text tool results are supported", mi, bi, i);
        if (out->len) st_sbuf_add(out, "\n", 1);
        st_sbuf_add(out, json_string_value(text), json_string_length(text));
    }
    return 0;
}

static json_t *normalize(json_t *body, st_perr *e) {
    json_t *out = json_array();
    json_t *sys = json_object_get(body, "system");
    if (json_is_string(sys)) {
        if (json_string_length(sys)) json_array_append_new(out, json_pack("{s:s, s:O}", "role", "system", "content", sys));
    } else if (json_is_array(sys)) {
        st_sbuf b = {0};
        st_sbuf_add(&b, "", 0);
        size_t i;
        json_t *blk;
        json_array_foreach(sys, i, blk) {
            json_t *text = json_object_get(blk, "text");
            if (!json_is_string(text)) {
                free(b.p);
                st_perr_set(e, "system", "'system[%zu]' must be a text block {\"type\": \"text\", \"text\": ...}", i);
                goto fail;
            }
            if (b.len) st_sbuf_add(&b, "\n\n", 2);
            st_sbuf_add(&b, json_string_value(text), json_string_length(text));
        }
        if (b.len) json_array_append_new(out, json_pack("{s:s, s:s}", "role", "system", "content", b.p));
        free(b.p);
    } else if (sys && !json_is_null(sys)) {
        st_perr_set(e, "system", "'system' must be a string or an array of text blocks");
        goto fail;
    }
    json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs) || !json_array_size(msgs)) {
        st_perr_set(e, "messages", "'messages' must be a non-empty array of {role, content} objects");
        goto fail;
    }
    size_t mi;
    json_t *m;
    json_array_foreach(msgs, mi, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!json_is_object(m) || !role || (strcmp(role, "user") && strcmp(role, "assistant"))) {
            st_perr_set(e, "messages", "'messages[%zu].role' must be \"user\" or \"assistant\"", mi);
            goto fail;
        }
        bool assistant = !strcmp(role, "assistant");
        json_t *c = json_object_get(m, "content");
        if (json_is_string(c)) {
            json_array_append_new(out, json_pack("{s:s, s:O}", "role", role, "content", c));
            continue;
        }
        if (!json_is_array(c)) {
            st_perr_set(e, "messages", "'messages[%zu].content' must be a string or an array of content blocks", mi);
            goto fail;
        }
        st_sbuf text = {0}, thinking = {0};
        st_sbuf_add(&text, "", 0);
        st_sbuf_add(&thinking, "", 0);
        json_t *calls = json_array();
        bool had_results = false;
        size_t bi;
        json_t *b;
        bool ok = true;
        json_array_foreach(c, bi, b) {
            const char *type = json_string_value(json_object_get(b, "type"));
            if (!type) {
                ok = !st_perr_set(e, "messages", "'messages[%zu].content[%zu].type' must be a string", mi, bi);
                break;
            }
            if (!strcmp(type, "text")) {
                json_t *t = json_object_get(b, "text");
                if (!json_is_string(t)) {
                    ok = !st_perr_set(e, "messages", "'messages[%zu].content[%zu].text' must be a string", mi, bi);
                    break;
                }
                st_sbuf_add(&text, json_string_value(t), json_string_length(t));
            } else if (!strcmp(type, "thinking") && assistant) {
                const char *t = json_string_value(json_object_get(b, "thinking"));
                if (t) st_sbuf_add(&thinking, t, strlen(t));
            } else if (!strcmp(type, "redacted_thinking") && assistant) {
                // opaque to us: dropped
            } else if (!strcmp(type, "tool_use") && assistant) {
                const char *id = json_string_value(json_object_get(b, "id"));
                const char *name = json_string_value(json_object_get(b, "name"));
                json_t *input = json_object_get(b, "input");
                if (!id || !name || (input && !json_is_object(input))) {
                    ok = !st_perr_set(e, "messages", "'messages[%zu].content[%zu]' (tool_use) needs a string 'id', a "
                                      "string 'name' and an object 'input'", mi, bi);
                    break;
                }
                char *args = json_dumps(input ? input : json_object(), JSON_COMPACT);
                json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function",
                                                       "function", "name", name, "arguments", args ? args : "{}"));
                free(args);
            } else if (!strcmp(type, "tool_result") && !assistant) {
                const char *id = json_string_value(json_object_get(b, "tool_use_id"));
                if (!id) {
                    ok = !st_perr_set(e, "messages", "'messages[%zu].content[%zu].tool_use_id' must be a string", mi, bi);
                    break;
                }
                st_sbuf r = {0};
                if (result_text(json_object_get(b, "content"), mi, bi, &r, e)) {
                    free(r.p);
                    ok = false;
                    break;
                }
                if (json_is_true(json_object_get(b, "is_error"))) {
                    st_sbuf er = {0};
                    st_sbuf_printf(&er, "Error: %s", r.p);
                    free(r.p);
                    r = er;
                }
                json_array_append_new(out, json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", id, "content",
                                                     r.p));
                had_results = true;
                free(r.p);
            } else {
                ok = !st_perr_set(e, "messages", "'messages[%zu].content[%zu].type' is '%s', which is not supported in "
                                  "a%s %s message (supported: text, %s)", mi, bi, type, assistant ? "n" : "", role,
                                  assistant ? "thinking, tool_use" : "tool_result");
                break;
            }
        }
        // A user turn that held only tool results needs no (empty) user message after them.
        if (ok && (assistant || text.len || !had_results)) {
            json_t *n = json_pack("{s:s, s:s}", "role", role, "content", text.p);
            if (json_array_size(calls)) json_object_set(n, "tool_calls", calls);
            if (thinking.len) json_object_set_new(n, "reasoning_content", json_string(thinking.p));
            if (n) json_array_append_new(out, n);
        }
        free(text.p);
        free(thinking.p);
        json_decref(calls);
        if (!ok) goto fail;
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

// tools: [{"name", "description"?, "input_schema"}] -> OpenAI-style function tools for the template.
static json_t *map_tools(json_t *tools, st_perr *e) {
    json_t *out = json_array();
    if (!tools || json_is_null(tools)) return out;
    if (!json_is_array(tools)) {
        json_decref(out);
        st_perr_set(e, "tools", "'tools' must be an array of {name, description, input_schema}");
        return NULL;
    }
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *name = json_string_value(json_object_get(t, "name"));
        json_t *schema = json_object_get(t, "input_schema");
        if (!name || !*name || !json_is_object(schema)) {
            json_decref(out);
            st_perr_set(e, "tools", "'tools[%zu]' needs a non-empty string 'name' and an object 'input_schema' (server "
                        "tools are not supported)", i);
            return NULL;
        }
        json_t *f = json_pack("{s:s, s:O}", "name", name, "parameters", schema);
        json_t *d = json_object_get(t, "description");
        if (json_is_string(d)) json_object_set(f, "description", d);
        json_array_append_new(out, json_pack("{s:s, s:o}", "type", "function", "function", f));
    }
    return out;
}

// tool_choice: {"type": "auto" | "any" | "none" | "tool", "name"?}.
static int map_tool_choice(json_t *body, json_t *tools, st_tool_choice *choice, const char **name, st_perr *e) {
    json_t *tc = json_object_get(body, "tool_choice");
    *choice = ST_TOOLS_AUTO;
    *name = NULL;
    if (!tc || json_is_null(tc)) return 0;
    const char *type = json_string_value(json_object_get(tc, "type"));
    if (!json_is_object(tc) || !type)
        return st_perr_set(e, "tool_choice", "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\" | "
                           "\"tool\", \"name\"?}");
    if (!strcmp(type, "auto")) *choice = ST_TOOLS_AUTO;
    else if (!strcmp(type, "none")) *choice = ST_TOOLS_NONE;
    else if (!strcmp(type, "any")) *choice = ST_TOOLS_REQUIRED;
    else if (!strcmp(type, "tool")) {
        *choice = ST_TOOLS_NAMED;
        *name = json_string_value(json_object_get(tc, "name"));
        bool found = false;
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            const char *n = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
            if (n && *name && !strcmp(n, *name)) found = true;
        }
        if (!found)
            return st_perr_set(e, "tool_choice", "'tool_choice.name' must name one of 'tools', got '%s'",
                               *name ? *name : "(none)");
    } else return st_perr_set(e, "tool_choice", "'tool_choice.type' must be auto, any, none or tool, got '%s'", type);
    if ((*choice == ST_TOOLS_REQUIRED || *choice == ST_TOOLS_NAMED) && !json_array_size(tools))
        return st_perr_set(e, "tool_choice", "'tool_choice' asks for a tool call but 'tools' is empty");
    return 0;
}

// thinking: {"type": "enabled", "budget_tokens"} | {"type": "disabled"} -> the template's enable_thinking.
static json_t *map_kwargs(json_t *body, st_perr *e) {
    json_t *kw = json_object();
    json_t *th = json_object_get(body, "thinking");
    if (!th || json_is_null(th)) return kw;
    const char *type = json_string_value(json_object_get(th, "type"));
    if (!json_is_object(th) || !type || (strcmp(type, "enabled") && strcmp(type, "disabled") && strcmp(type, "adaptive"))) {
        json_decref(kw);
        st_perr_set(e, "thinking", "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": "
                    "\"disabled\"}");
        return NULL;
    }
    json_object_set_new(kw, "enable_thinking", json_boolean(strcmp(type, "disabled") != 0));
    return kw;
}

// The sampling fields in the OpenAI module's names, for st_parse_sampling.
static json_t *sampling_body(json_t *body, st_perr *e) {
    json_t *s = json_object();
    static const char *const same[] = {"temperature", "top_p", "top_k", "max_tokens"};
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++) {
        json_t *v = json_object_get(body, same[i]);
        if (v) json_object_set(s, same[i], v);
    }
    json_t *stop = json_object_get(body, "stop_sequences");
    if (stop && !json_is_null(stop) && !json_is_array(stop)) {
        json_decref(s);
        st_perr_set(e, "stop_sequences", "'stop_sequences' must be an array of strings");
        return NULL;
    }
    if (stop) json_object_set(s, "stop", stop);
    // Anthropic's own defaults where ours differ: full-distribution sampling unless the request narrows it.
    if (!json_object_get(s, "temperature")) json_object_set_new(s, "temperature", json_real(1.0));
    if (!json_object_get(s, "top_p")) json_object_set_new(s, "top_p", json_real(1.0));
    if (!json_object_get(s, "top_k")) json_object_set_new(s, "top_k", json_integer(0));
    return s;
}

// ---- the answer -----------------------------------------------------------------------------------------------------

typedef enum { BLK_NONE, BLK_TEXT, BLK_THINKING, BLK_TOOL } blk_kind;

typedef struct an_ctx {
    bool stream;
    char id[48];
    char model[256];
    st_tc_parser *parser;
    json_t *tools;
    st_sbuf *out;          // streaming: where events are written
    bool started;          // message_start sent
    int n_blocks;          // content blocks opened so far
    blk_kind open;         // the block open now (streaming) / the last block (non-stream)
    json_t *content;       // non-stream: the content blocks
    st_sbuf args;          // non-stream: the open tool_use block's input JSON
    json_int_t n_prompt, n_cached;
} an_ctx;

static void event(st_sbuf *out, const char *name, json_t *data) {
    char *s = json_dumps(data, JSON_COMPACT);
    st_sbuf_printf(out, "event: %s\ndata: %s\n\n", name, s ? s : "{}");
    free(s);
    json_decref(data);
}

static json_t *usage(an_ctx *a, json_int_t n_gen) {
    return json_pack("{s:I, s:I, s:I, s:I}", "input_tokens", a->n_prompt - a->n_cached, "output_tokens", n_gen,
                     "cache_read_input_tokens", a->n_cached, "cache_creation_input_tokens", (json_int_t)0);
}

static json_t *str_n(const char *s, size_t n) {
    json_t *v = json_stringn(s, n);
    return v ? v : json_string("\xef\xbf\xbd");
}

static void message_start(an_ctx *a, st_sbuf *out) {
    if (a->started) return;
    a->started = true;
    event(out, "message_start", json_pack("{s:s, s:{s:s, s:s, s:s, s:s, s:[], s:n, s:n, s:o}}", "type", "message_start",
                                          "message", "id", a->id, "type", "message", "role", "assistant", "model",
                                          a->model, "content", "stop_reason", "stop_sequence", "usage", usage(a, 0)));
    event(out, "ping", json_pack("{s:s}", "type", "ping"));
}

static void close_block(an_ctx *a) {
    if (a->stream) {
        if (a->open != BLK_NONE)
            event(a->out, "content_block_stop", json_pack("{s:s, s:i}", "type", "content_block_stop", "index",
                                                          a->n_blocks - 1));
    } else if (a->open == BLK_TOOL) {
        json_t *blk = json_array_get(a->content, json_array_size(a->content) - 1);
        json_error_t je;
        json_t *input = json_loadb(a->args.p ? a->args.p : "{}", a->args.len, 0, &je);
        json_object_set_new(blk, "input", json_is_object(input) ? input : json_object());
        if (!json_is_object(input)) json_decref(input);
        a->args.len = 0;
    }
    a->open = BLK_NONE;
}

static void open_block(an_ctx *a, blk_kind k, json_t *blk) {  // steals blk
    close_block(a);
    a->open = k;
    if (a->stream)
        event(a->out, "content_block_start", json_pack("{s:s, s:i, s:o}", "type", "content_block_start", "index",
                                                       a->n_blocks, "content_block", blk));
    else json_array_append_new(a->content, blk);
    a->n_blocks++;
}

static void append_field(json_t *blk, const char *key, const char *s, size_t n) {
    st_sbuf b = {0};
    st_sbuf_printf(&b, "%s", json_string_value(json_object_get(blk, key)));
    st_sbuf_add(&b, s, n);
    json_object_set_new(blk, key, str_n(b.p, b.len));
    free(b.p);
}

static void on_parsed(void *ud, const st_tc_event *ev) {
    an_ctx *a = ud;
    if (a->stream && !a->out) return;  // only a forced prefix is parsed before the stream exists: all markup
    switch (ev->kind) {
    case ST_TC_CONTENT:
    case ST_TC_REASONING: {
        bool text = ev->kind == ST_TC_CONTENT;
        blk_kind k = text ? BLK_TEXT : BLK_THINKING;
        if (a->open != k)
            open_block(a, k, text ? json_pack("{s:s, s:s}", "type", "text", "text", "")
                                  : json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", ""));
        if (a->stream)
            event(a->out, "content_block_delta",
                  json_pack("{s:s, s:i, s:{s:s, s:o}}", "type", "content_block_delta", "index", a->n_blocks - 1,
                            "delta", "type", text ? "text_delta" : "thinking_delta", text ? "text" : "thinking",
                            str_n(ev->text, ev->len)));
        else append_field(json_array_get(a->content, json_array_size(a->content) - 1), text ? "text" : "thinking",
                          ev->text, ev->len);
        break;
    }
    case ST_TC_TOOL_START:
        open_block(a, BLK_TOOL, json_pack("{s:s, s:s, s:s, s:{}}", "type", "tool_use", "id", ev->id, "name", ev->name,
                                          "input"));
        break;
    case ST_TC_TOOL_ARGS:
        if (a->stream)
            event(a->out, "content_block_delta",
                  json_pack("{s:s, s:i, s:{s:s, s:o}}", "type", "content_block_delta", "index", a->n_blocks - 1,
                            "delta", "type", "input_json_delta", "partial_json", str_n(ev->text, ev->len)));
        else st_sbuf_add(&a->args, ev->text, ev->len);
        break;
    }
}

static const char *stop_reason(an_ctx *a, json_t *done) {
    if (st_tc_n_calls(a->parser) > 0) return "tool_use";
    if (json_string_value(json_object_get(done, "stop_hit"))) return "stop_sequence";
    const char *f = json_string_value(json_object_get(done, "finish"));
    return f && !strcmp(f, "length") ? "max_tokens" : "end_turn";
}

static bool an_format(void *ud, json_t *ev, st_sbuf *out) {
    an_ctx *a = ud;
    const char *t = json_string_value(json_object_get(ev, "t"));
    if (!t) return false;
    a->out = out;
    if (!strcmp(t, "prompt")) {
        a->n_prompt = json_integer_value(json_object_get(ev, "n_prompt"));
        a->n_cached = json_integer_value(json_object_get(ev, "n_cached"));
        if (a->stream) message_start(a, out);
        return false;
    }
    if (!strcmp(t, "tok")) {
        const char *text = json_string_value(json_object_get(ev, "text"));
        if (text && *text) st_tc_feed(a->parser, text, strlen(text));
        return false;
    }
    if (!strcmp(t, "done")) {
        a->n_prompt = json_integer_value(json_object_get(ev, "n_prompt"));
        a->n_cached = json_integer_value(json_object_get(ev, "n_cached"));
        if (a->stream) message_start(a, out);
        st_tc_finish(a->parser);
        close_block(a);
        if (!a->stream) return true;
        json_t *seq = json_object_get(ev, "stop_hit");
        event(out, "message_delta", json_pack("{s:s, s:{s:s, s:O?}, s:o}", "type", "message_delta", "delta",
                                              "stop_reason", stop_reason(a, ev), "stop_sequence", seq, "usage",
                                              usage(a, json_integer_value(json_object_get(ev, "n_gen")))));
        event(out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
        return true;
    }
    if (!strcmp(t, "error")) {
        int status = (int)json_integer_value(json_object_get(ev, "status"));
        event(out, "error", json_pack("{s:s, s:{s:s, s:s}}", "type", "error", "error", "type",
                                      status == 503 ? "overloaded_error" : status < 500 ? "invalid_request_error"
                                                                                        : "api_error",
                                      "message", json_string_value(json_object_get(ev, "message"))));
        return true;
    }
    return false;
}

static json_t *an_respond(void *ud, json_t *done) {
    an_ctx *a = ud;
    json_t *seq = json_object_get(done, "stop_hit");
    return json_pack("{s:s, s:s, s:s, s:s, s:O, s:s, s:O?, s:o}", "id", a->id, "type", "message", "role", "assistant",
                     "model", a->model, "content", a->content, "stop_reason", stop_reason(a, done), "stop_sequence",
                     seq, "usage", usage(a, json_integer_value(json_object_get(done, "n_gen"))));
}

static void an_free(void *ud) {
    an_ctx *a = ud;
    if (!a) return;
    st_tc_parser_free(a->parser);
    json_decref(a->tools);
    json_decref(a->content);
    free(a->args.p);
    free(a);
}

#define BAD_REQUEST(e) st_reply_error(r, 400, NULL, (e).param[0] ? (e).param : NULL, "%s", (e).msg)

// The parts of a messages request both endpoints need: normalized messages, tools, tool choice, template kwargs.
typedef struct an_req {
    json_t *msgs, *tools, *kwargs;
    st_tool_choice choice;
    const char *tool_name;
} an_req;

static int parse_req(json_t *body, an_req *q, st_perr *e) {
    const char *model = NULL;
    if (st_get_str(body, "model", &model, e)) return -1;
    if (!(q->msgs = normalize(body, e))) return -1;
    if (!(q->tools = map_tools(json_object_get(body, "tools"), e))) return -1;
    if (map_tool_choice(body, q->tools, &q->choice, &q->tool_name, e)) return -1;
    if (!(q->kwargs = map_kwargs(body, e))) return -1;
    return 0;
}

static void free_req(an_req *q) {
    json_decref(q->msgs);
    json_decref(q->tools);
    json_decref(q->kwargs);
}

enum MHD_Result st_api_messages(st_req *r) {
    st_perr e = {{0}, {0}};
    an_req q = {0};
    json_t *body = st_parse_body(r, &e), *gen = NULL, *sb = NULL;
    an_ctx *a = NULL;
    st_chat_plan plan = {0};
    bool stream = false;
    enum MHD_Result rc;
    if (!body || st_get_bool(body, "stream", &stream, &e) || parse_req(body, &q, &e)) goto bad;
    json_t *mt = json_object_get(body, "max_tokens");
    if (!mt || json_is_null(mt)) {
        st_perr_set(&e, "max_tokens", "'max_tokens' is required");
        goto bad;
    }
    gen = json_pack("{s:s}", "t", "gen");
    if (!(sb = sampling_body(body, &e)) || st_parse_sampling(sb, gen, &e)) goto bad;
    char err[1024];
    int prc = st_chat_prepare(q.msgs, q.tools, q.kwargs, q.choice, q.tool_name, &plan, err, sizeof err);
    if (prc) {
        rc = prc == -2 ? st_reply_error(r, 503, NULL, NULL, "%s", err) : st_reply_error(r, 400, NULL, "messages", "%s", err);
        goto out;
    }
    st_chat_gen_setup(gen, &plan);
    a = calloc(1, sizeof *a);
    a->stream = stream;
    a->content = json_array();
    st_new_id(a->id, sizeof a->id, "msg_");
    const char *model = json_string_value(json_object_get(body, "model"));
    snprintf(a->model, sizeof a->model, "%s", model && *model ? model : st_S.model_name);
    a->tools = json_incref(q.tools);
    plan.popt.tool_defs = a->tools;
    plan.popt.id_prefix = "toolu_";
    a->parser = st_tc_parser_new(&plan.popt, on_parsed, a);
    if (plan.prefix) st_tc_feed(a->parser, plan.prefix, strlen(plan.prefix));
    rc = st_run_generation(r, gen, stream, an_format, an_free, a, an_respond);
    gen = NULL;
    goto out;
bad:
    rc = BAD_REQUEST(e);
out:
    st_chat_plan_free(&plan);
    free_req(&q);
    json_decref(sb);
    json_decref(gen);
    json_decref(body);
    return rc;
}

// POST /v1/messages/count_tokens: the prompt's token count as the template renders it (tools included).
enum MHD_Result st_api_count_tokens(st_req *r) {
    st_perr e = {{0}, {0}};
    an_req q = {0};
    json_t *body = st_parse_body(r, &e);
    st_chat_plan plan = {0};
    enum MHD_Result rc;
    if (!body || parse_req(body, &q, &e)) {
        rc = BAD_REQUEST(e);
        goto out;
    }
    char err[1024];
    int prc = st_chat_prepare(q.msgs, q.tools, q.kwargs, q.choice, q.tool_name, &plan, err, sizeof err);
    if (prc) {
        rc = prc == -2 ? st_reply_error(r, 503, NULL, NULL, "%s", err) : st_reply_error(r, 400, NULL, "messages", "%s", err);
        goto out;
    }
    json_t *msg = json_pack("{s:s, s:s, s:b, s:b}", "t", "tokenize", "text", plan.prompt, "add_special", 1,
                            "parse_special", 1);
    json_t *ev = st_run_side(r, msg, &rc);
    if (ev) {
        rc = st_reply_json(r, 200, json_pack("{s:I}", "input_tokens",
                                             (json_int_t)json_array_size(json_object_get(ev, "tokens"))));
        json_decref(ev);
    }
out:
    st_chat_plan_free(&plan);
    free_req(&q);
    json_decref(body);
    return rc;
}
