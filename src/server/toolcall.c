// Tool-call and reasoning parsing of model output (see toolcall.h). Syntax facts (markers, argument layouts) are
// taken from the models' chat templates in tests/server/jinja/templates and llama.cpp's models/templates.
#include "server/toolcall.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/rng.h"

// ---- template detection --------------------------------------------------------------------------------------------

st_tc_template_info st_tc_detect(const char *t) {
    st_tc_template_info i = {ST_TC_GENERIC, false, false};
    if (!t) return i;
    if (strstr(t, "<|channel|>")) {
        i.format = ST_TC_HARMONY;
        i.special_tokens = true;
    } else if (strstr(t, "<function=") && strstr(t, "<parameter=")) {
        i.format = ST_TC_QWEN3_CODER;
    } else if (strstr(t, "<tool_call>")) {
        i.format = ST_TC_HERMES;
    } else if (strstr(t, "<|python_tag|>") || (strstr(t, "<|start_header_id|>") && strstr(t, "tools"))) {
        i.format = ST_TC_LLAMA3;
        i.special_tokens = true;
    }
    i.thinking = i.format != ST_TC_HARMONY && strstr(t, "<think>") != NULL;
    return i;
}

const char *st_tc_format_name(st_tc_format f) {
    switch (f) {
    case ST_TC_HERMES: return "hermes";
    case ST_TC_QWEN3_CODER: return "qwen3-coder";
    case ST_TC_LLAMA3: return "llama3";
    case ST_TC_HARMONY: return "harmony";
    default: return "generic";
    }
}

void st_tc_make_id(char *out, size_t n, const char *prefix) {
    static uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32) ^
                 (__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) * 0x9e3779b97f4a7c15ull);
    uint64_t a = st_splitmix64(&x), b = st_splitmix64(&x);
    snprintf(out, n, "%s%016llx%08llx", prefix ? prefix : "call_", (unsigned long long)a,
             (unsigned long long)(b & 0xffffffffu));
}

// ---- growable text -------------------------------------------------------------------------------------------------

typedef struct buf {
    char *p;
    size_t len, cap;
} buf;

static void buf_add(buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        b->cap = 2 * (b->len + n + 1) + 64;
        b->p = realloc(b->p, b->cap);
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}
static void buf_adds(buf *b, const char *s) { buf_add(b, s, strlen(s)); }
static void buf_drop(buf *b, size_t n) {  // removes the first n bytes
    memmove(b->p, b->p + n, b->len - n + 1);
    b->len -= n;
}
static void buf_clear(buf *b) {
    b->len = 0;
    if (b->p) b->p[0] = 0;
}

// ---- the parser ----------------------------------------------------------------------------------------------------

typedef enum {
    S_START,       // nothing decided yet: <think> or a Llama-3 JSON call may begin here
    S_THINK,       // inside <think>: reasoning until </think>
    S_TEXT,        // content, watching for a call's start marker
    S_CALL,        // inside <tool_call>: buffered until </tool_call>
    S_PYTAG,       // after <|python_tag|>: buffered to the end
    S_LLAMA_JSON,  // a Llama-3 JSON call (or JSON content): buffered until a whole value parsed
    S_H_HEADER,    // harmony: a message header, until <|message|>
    S_H_BODY,      // harmony: a message body, until <|end|> / <|call|> / <|return|> / <|start|>
} state;

typedef enum { BODY_CONTENT, BODY_REASONING, BODY_CALL } body_kind;

struct st_tc_parser {
    st_tc_options o;
    st_tc_emit_fn emit;
    void *ud;
    state st;
    buf in;             // fed text not yet consumed
    buf call;           // the current call's body
    bool trim_ws;       // drop whitespace before the next content (after </think> or a call)
    bool trim_think;    // drop whitespace at the start of the reasoning
    bool final;         // st_tc_finish was called: nothing more comes
    int n_calls;
    body_kind h_body;   // harmony: what the current body is
    bool h_skip_role;   // harmony: after <|start|>, the role name ("assistant") before the next header
    char h_name[256];   // harmony: the call's function name
};

static void emit_text(st_tc_parser *p, st_tc_event_kind k, const char *s, size_t n) {
    if (!n) return;
    st_tc_event ev = {.kind = k, .text = s, .len = n};
    p->emit(p->ud, &ev);
}

static void emit_call(st_tc_parser *p, const char *name, json_t *args) {
    char id[64];
    st_tc_make_id(id, sizeof id, p->o.id_prefix);
    int index = p->n_calls++;
    st_tc_event ev = {.kind = ST_TC_TOOL_START, .index = index, .id = id, .name = name, .text = "", .len = 0};
    p->emit(p->ud, &ev);
    char *a = json_is_string(args) ? strdup(json_string_value(args)) : json_dumps(args, JSON_COMPACT | JSON_ENCODE_ANY);
    ev = (st_tc_event){.kind = ST_TC_TOOL_ARGS, .index = index, .text = a ? a : "{}", .len = a ? strlen(a) : 2};
    p->emit(p->ud, &ev);
    free(a);
}

// The earliest complete marker in s[0..n) (its index in *which, position returned), or -1; then *hold is the length
// of the longest tail of s that is a proper prefix of a marker (text that must wait for more input).
static long find_marker(const char *s, size_t n, const char *const *markers, int n_markers, int *which, size_t *hold) {
    long best = -1;
    *hold = 0;
    for (int m = 0; m < n_markers; m++) {
        const char *hit = memmem(s, n, markers[m], strlen(markers[m]));
        if (hit && (best < 0 || hit - s < best)) {
            best = hit - s;
            *which = m;
        }
    }
    if (best >= 0) return best;
    for (int m = 0; m < n_markers; m++) {
        size_t ml = strlen(markers[m]);
        for (size_t k = ml - 1 < n ? ml - 1 : n; k > *hold; k--)
            if (!memcmp(s + n - k, markers[m], k)) {
                *hold = k;
                break;
            }
    }
    return -1;
}

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

static size_t lead_ws(const buf *b) {
    size_t i = 0;
    while (i < b->len && is_ws(b->p[i])) i++;
    return i;
}

// {"name": N, "arguments"|"parameters": {..} | "json string"} -> emits the call. false if it is not one.
static bool json_call(st_tc_parser *p, json_t *v) {
    if (!json_is_object(v)) return false;
    const char *name = json_string_value(json_object_get(v, "name"));
    json_t *args = json_object_get(v, "arguments");
    if (!args) args = json_object_get(v, "parameters");
    if (!name || !*name || (args && !json_is_object(args) && !json_is_string(args))) return false;
    if (json_is_string(args)) {  // arguments as JSON in a string: only one that encodes an object (what clients parse)
        json_error_t je;
        json_t *o = json_loadb(json_string_value(args), json_string_length(args), 0, &je);
        const bool obj = json_is_object(o);
        json_decref(o);
        if (!obj) return false;
    }
    json_t *empty = NULL;
    if (!args) args = empty = json_object();
    emit_call(p, name, args);
    json_decref(empty);
    return true;
}

static bool parse_hermes_body(st_tc_parser *p, const char *s, size_t n) {
    json_error_t je;
    json_t *v = json_loadb(s, n, 0, &je);
    bool ok = json_call(p, v);
    json_decref(v);
    return ok;
}

// The JSON-schema type of parameter `param` of function `fn` in the OpenAI-style tools, or NULL.
static const char *param_type(const json_t *tools, const char *fn, const char *param) {
    size_t i;
    json_t *t;
    json_array_foreach((json_t *)tools, i, t) {
        json_t *f = json_object_get(t, "function");
        if (!f) f = t;
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!name || strcmp(name, fn)) continue;
        json_t *prop = json_object_get(json_object_get(json_object_get(f, "parameters"), "properties"), param);
        json_t *type = json_object_get(prop, "type");
        if (json_is_string(type)) return json_string_value(type);
        if (json_is_array(type) && json_array_size(type) == 1) return json_string_value(json_array_get(type, 0));
        return NULL;
    }
    return NULL;
}

// <function=NAME>\n<parameter=P>\nvalue\n</parameter>\n...</function>: values are text; a parameter the schema
// does not declare a string is read as JSON when it parses (numbers, booleans, objects), else kept as text.
static bool parse_coder_body(st_tc_parser *p, const char *s, size_t n) {
    char *body = strndup(s, n);
    bool ok = false;
    json_t *args = json_object();
    char *f = strstr(body, "<function=");
    if (!f) goto out;
    for (char *c = body; c < f; c++)
        if (!is_ws(*c)) goto out;
    char *name = f + 10, *gt = strchr(name, '>');
    if (!gt || gt == name) goto out;
    *gt = 0;
    char *q = gt + 1;
    for (;;) {
        while (is_ws(*q)) q++;
        if (!strncmp(q, "</function>", 11)) {
            q += 11;
            break;
        }
        if (strncmp(q, "<parameter=", 11)) goto out;
        char *pn = q + 11, *pgt = strchr(pn, '>');
        if (!pgt || pgt == pn) goto out;
        *pgt = 0;
        char *val = pgt + 1, *end = strstr(val, "</parameter>");
        if (!end) goto out;
        q = end + 12;
        if (*val == '\n') val++;
        if (end > val && end[-1] == '\n') end--;
        *end = 0;
        const char *type = p->o.tool_defs ? param_type(p->o.tool_defs, name, pn) : NULL;
        json_t *v = NULL;
        if (!type || strcmp(type, "string")) {
            json_error_t je;
            v = json_loads(val, JSON_DECODE_ANY, &je);
        }
        json_object_set_new(args, pn, v ? v : json_string(val));
    }
    while (is_ws(*q)) q++;
    if (*q) goto out;
    emit_call(p, name, args);
    ok = true;
out:
    json_decref(args);
    free(body);
    return ok;
}

// A finished <tool_call> body (or an unfinished one at the end): a call, else the raw text as content.
static void close_call(st_tc_parser *p, bool closed) {
    bool ok = p->o.format == ST_TC_QWEN3_CODER ? parse_coder_body(p, p->call.p, p->call.len)
                                               : parse_hermes_body(p, p->call.p, p->call.len);
    if (!ok) {
        emit_text(p, ST_TC_CONTENT, "<tool_call>", 11);
        emit_text(p, ST_TC_CONTENT, p->call.p, p->call.len);
        if (closed) emit_text(p, ST_TC_CONTENT, "</tool_call>", 12);
    }
    buf_clear(&p->call);
}

// s[0..n) ends inside a multi-byte UTF-8 character: a lead byte whose sequence needs more bytes than follow it.
static bool utf8_tail_cut(const char *s, size_t n) {
    size_t k = 0;  // continuation bytes (10xxxxxx) at the end
    while (k < 3 && k < n && ((uint8_t)s[n - 1 - k] & 0xc0) == 0x80) k++;
    if (k == n) return false;
    uint8_t lead = (uint8_t)s[n - 1 - k];
    size_t need = lead >= 0xf0 ? 3 : lead >= 0xe0 ? 2 : lead >= 0xc0 ? 1 : 0;
    return k < need;
}

// A JSON error that more input could fix: the text s[0..len) ended inside a value ("{\"a\": nul" is an invalid
// token to the parser, but only because "null" is not complete yet), or inside a character (jansson calls a cut
// "\xc6" invalid UTF-8, but the rest of it may come with the next piece).
static bool json_cut_off(const json_error_t *je, const char *s, size_t len) {
    return json_error_code(je) == json_error_premature_end_of_input || (size_t)je->position >= len ||
           (json_error_code(je) == json_error_invalid_utf8 && utf8_tail_cut(s, len));
}

// The call body so far cannot be complete: a JSON value cut off (Hermes), or no </function> yet (Qwen3-Coder).
static bool call_incomplete(const st_tc_parser *p) {
    if (p->o.format == ST_TC_QWEN3_CODER) return !strstr(p->call.p, "</function>");
    json_error_t je;
    json_t *v = json_loadb(p->call.p, p->call.len, 0, &je);
    json_decref(v);
    return !v && json_cut_off(&je, p->call.p, p->call.len);
}

// Emits p->in[0..n) as `kind` and consumes it.
static void flush_as(st_tc_parser *p, st_tc_event_kind kind, size_t n) {
    emit_text(p, kind, p->in.p, n);
    buf_drop(&p->in, n);
}

// Harmony header ("<|channel|>commentary to=functions.get_weather <|constrain|>json", or with the recipient first):
// sets what the body is.
static void harmony_header(st_tc_parser *p, const char *h, size_t n) {
    char *hd = strndup(h, n);
    char channel[32] = "";
    char *c = strstr(hd, "<|channel|>");
    if (c) {
        c += 11;
        size_t k = 0;
        while (c[k] && k < sizeof channel - 1 && ((c[k] >= 'a' && c[k] <= 'z') || c[k] == '_')) k++;
        memcpy(channel, c, k);
        channel[k] = 0;
    }
    p->h_name[0] = 0;
    char *to = strstr(hd, "to=");
    if (to && (to == hd || is_ws(to[-1]) || to[-1] == '>')) {
        to += 3;
        if (!strncmp(to, "functions.", 10)) to += 10;
        size_t k = 0;
        while (to[k] && !is_ws(to[k]) && to[k] != '<' && k < sizeof p->h_name - 1) k++;
        memcpy(p->h_name, to, k);
        p->h_name[k] = 0;
    }
    if (p->h_name[0] && p->o.tools) p->h_body = BODY_CALL;
    else if (!strcmp(channel, "analysis")) p->h_body = BODY_REASONING;
    else p->h_body = BODY_CONTENT;
    free(hd);
}

static const char *const M_THINK_END[] = {"</think>"};
static const char *const M_TOOL_CALL[] = {"<tool_call>"};
static const char *const M_TOOL_CALL_END[] = {"</tool_call>"};
static const char *const M_PYTAG[] = {"<|python_tag|>"};
static const char *const M_H_MESSAGE[] = {"<|message|>"};
static const char *const M_H_END[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};

// Consumes as much of p->in as can be decided; returns when more input is needed.
static void step(st_tc_parser *p) {
    for (;;) {
        int which = 0;
        size_t hold = 0;
        long at;
        switch (p->st) {
        case S_START: {
            size_t ws = lead_ws(&p->in);
            const char *rest = p->in.p + ws;
            size_t rn = p->in.len - ws;
            if (!p->final && rn == 0) return;  // only whitespace so far: cannot tell yet
            if (p->o.thinking && rn >= 7 && !memcmp(rest, "<think>", 7)) {
                buf_drop(&p->in, ws + 7);
                p->st = S_THINK;
                p->trim_think = true;
                continue;
            }
            if (p->o.thinking && !p->final && rn < 7 && !memcmp(rest, "<think>", rn)) return;
            if (p->o.format == ST_TC_LLAMA3 && p->o.tools && rn > 0 && rest[0] == '{') {
                p->st = S_LLAMA_JSON;
                continue;
            }
            p->st = S_TEXT;
            continue;
        }
        case S_THINK: {
            // Reasoning is trimmed: whitespace after <think> and before </think> is layout, not thought.
            if (p->trim_think) {
                buf_drop(&p->in, lead_ws(&p->in));
                if (!p->in.len && !p->final) return;
                p->trim_think = false;
            }
            at = find_marker(p->in.p, p->in.len, M_THINK_END, 1, &which, &hold);
            size_t n = at >= 0 ? (size_t)at : p->in.len - (p->final ? 0 : hold), end = n;
            while (end > 0 && is_ws(p->in.p[end - 1])) end--;  // held back until more thought follows
            emit_text(p, ST_TC_REASONING, p->in.p, end);
            buf_drop(&p->in, at >= 0 || p->final ? n : end);
            if (at < 0) return;
            buf_drop(&p->in, 8);
            p->st = S_TEXT;
            p->trim_ws = true;
            continue;
        }
        case S_TEXT: {
            if (p->trim_ws) {
                buf_drop(&p->in, lead_ws(&p->in));
                if (!p->in.len && !p->final) return;
                p->trim_ws = false;
            }
            if (!p->o.tools || p->o.format == ST_TC_HARMONY) {
                flush_as(p, ST_TC_CONTENT, p->in.len);
                return;
            }
            bool llama = p->o.format == ST_TC_LLAMA3;
            at = find_marker(p->in.p, p->in.len, llama ? M_PYTAG : M_TOOL_CALL, 1, &which, &hold);
            if (at < 0) {
                flush_as(p, ST_TC_CONTENT, p->final ? p->in.len : p->in.len - hold);
                return;
            }
            flush_as(p, ST_TC_CONTENT, (size_t)at);
            buf_drop(&p->in, llama ? 14 : 11);
            p->st = llama ? S_PYTAG : S_CALL;
            continue;
        }
        case S_CALL:
            at = find_marker(p->in.p, p->in.len, M_TOOL_CALL_END, 1, &which, &hold);
            if (at < 0) {
                size_t n = p->final ? p->in.len : p->in.len - hold;  // a partial "</tool_call>" waits in p->in
                buf_add(&p->call, p->in.p, n);
                buf_drop(&p->in, n);
                if (p->final) {
                    close_call(p, false);
                    p->st = S_TEXT;
                }
                return;
            }
            buf_add(&p->call, p->in.p, (size_t)at);
            if (call_incomplete(p)) {  // "</tool_call>" inside a JSON string or a parameter value: part of the call
                buf_add(&p->call, p->in.p + at, 12);
                buf_drop(&p->in, (size_t)at + 12);
                continue;
            }
            buf_drop(&p->in, (size_t)at + 12);
            close_call(p, true);
            p->st = S_TEXT;
            p->trim_ws = true;
            continue;
        case S_PYTAG: {
            if (!p->final) return;  // the call runs to the end of the answer (<|eom_id|> / <|eot_id|>)
            size_t ws = lead_ws(&p->in), n = p->in.len;
            while (n > ws && is_ws(p->in.p[n - 1])) n--;
            json_error_t je;
            json_t *v = json_loadb(p->in.p + ws, n - ws, 0, &je);
            bool ok = json_call(p, v);
            json_decref(v);
            if (!ok && n > ws) {  // code for the built-in python tool
                json_t *args = json_pack("{s:s%}", "code", p->in.p + ws, n - ws);
                if (args) {
                    emit_call(p, "python", args);
                    ok = true;
                }
                json_decref(args);
            }
            if (!ok) {
                emit_text(p, ST_TC_CONTENT, "<|python_tag|>", 14);
                emit_text(p, ST_TC_CONTENT, p->in.p, p->in.len);
            }
            buf_clear(&p->in);
            p->st = S_TEXT;
            return;
        }
        case S_LLAMA_JSON: {
            size_t ws = 0;  // whitespace, and the ';' between calls
            while (ws < p->in.len && (is_ws(p->in.p[ws]) || p->in.p[ws] == ';')) ws++;
            if (ws == p->in.len) {
                if (p->final) buf_clear(&p->in);
                return;
            }
            if (p->in.p[ws] != '{') {  // after a call: more text is content
                buf_drop(&p->in, ws);
                p->st = S_TEXT;
                continue;
            }
            json_error_t je;
            json_t *v = json_loadb(p->in.p + ws, p->in.len - ws, JSON_DISABLE_EOF_CHECK, &je);
            // Not JSON after all (or cut off), or JSON but not a call: plain text, in which S_TEXT still finds a
            // <|python_tag|> (as it would have had the text come in smaller pieces).
            if (!v) {
                if (json_cut_off(&je, p->in.p + ws, p->in.len - ws) && !p->final) return;
                p->st = S_TEXT;
                continue;
            }
            size_t used = ws + (size_t)je.position;
            if (!json_call(p, v)) {
                json_decref(v);
                p->st = S_TEXT;
                continue;
            }
            json_decref(v);
            buf_drop(&p->in, used);
            continue;  // more calls may follow
        }
        case S_H_HEADER: {
            if (p->h_skip_role) {
                size_t k = 0;
                while (k < p->in.len && p->in.p[k] >= 'a' && p->in.p[k] <= 'z') k++;
                buf_drop(&p->in, k);
                if (!p->in.len && !p->final) return;
                p->h_skip_role = false;
            }
            at = find_marker(p->in.p, p->in.len, M_H_MESSAGE, 1, &which, &hold);
            // A header starts (after white space) with '<' or "to=" and ends with <|message|> within 512 bytes;
            // anything else where a header must be is the model writing plain text: content. The same rule whether
            // <|message|> has arrived yet or not, so the answer does not depend on how the text came in pieces.
            size_t ws = lead_ws(&p->in), rn = p->in.len - ws;
            bool plausible = (at >= 0 ? (size_t)at : p->in.len - hold) < 512 &&  // (a marker may start at the hold)
                             (rn == 0 || p->in.p[ws] == '<' || !strncmp(p->in.p + ws, "to=", rn < 3 ? rn : 3));
            if (at < 0 || !plausible) {
                if (p->final || !plausible) {
                    p->h_body = BODY_CONTENT;
                    p->st = S_H_BODY;
                    if (p->final && !plausible) continue;
                    if (p->final) {  // an unfinished header: say it as it is
                        flush_as(p, ST_TC_CONTENT, p->in.len);
                        return;
                    }
                    continue;
                }
                return;
            }
            harmony_header(p, p->in.p, (size_t)at);
            buf_drop(&p->in, (size_t)at + 11);
            p->st = S_H_BODY;
            buf_clear(&p->call);
            continue;
        }
        case S_H_BODY: {
            at = find_marker(p->in.p, p->in.len, M_H_END, 4, &which, &hold);
            size_t n = at >= 0 ? (size_t)at : p->final ? p->in.len : p->in.len - hold;
            if (p->h_body == BODY_CALL) {
                buf_add(&p->call, p->in.p, n);
                buf_drop(&p->in, n);
                if (at < 0 && !p->final) return;
                json_error_t je;
                json_t *v = json_loadb(p->call.p ? p->call.p : "", p->call.len, 0, &je);
                if (json_is_object(v)) emit_call(p, p->h_name, v);
                else {
                    emit_text(p, ST_TC_CONTENT, p->call.p, p->call.len);
                }
                json_decref(v);
                buf_clear(&p->call);
            } else {
                flush_as(p, p->h_body == BODY_REASONING ? ST_TC_REASONING : ST_TC_CONTENT, n);
            }
            if (at < 0) return;
            buf_drop(&p->in, strlen(M_H_END[which]));
            p->h_skip_role = which == 3;  // <|start|>: a role name comes before the next header
            p->st = S_H_HEADER;
            continue;
        }
        }
    }
}

st_tc_parser *st_tc_parser_new(const st_tc_options *o, st_tc_emit_fn emit, void *ud) {
    st_tc_parser *p = calloc(1, sizeof *p);
    p->o = *o;
    p->emit = emit;
    p->ud = ud;
    if (o->format == ST_TC_HARMONY) {
        p->st = S_H_HEADER;
        p->o.thinking = false;
    } else {
        p->st = o->thinking && o->in_thinking ? S_THINK : S_START;
        p->trim_think = true;
    }
    buf_add(&p->in, "", 0);
    buf_add(&p->call, "", 0);
    return p;
}

void st_tc_feed(st_tc_parser *p, const char *text, size_t len) {
    if (p->final || !len) return;
    buf_add(&p->in, text, len);
    step(p);
}

void st_tc_finish(st_tc_parser *p) {
    if (p->final) return;
    p->final = true;
    step(p);
    if (p->in.len) {  // whatever no state claimed
        emit_text(p, ST_TC_CONTENT, p->in.p, p->in.len);
        buf_clear(&p->in);
    }
}

int st_tc_n_calls(const st_tc_parser *p) { return p->n_calls; }

void st_tc_parser_free(st_tc_parser *p) {
    if (!p) return;
    free(p->in.p);
    free(p->call.p);
    free(p);
}

// ---- whole answers -------------------------------------------------------------------------------------------------

typedef struct collect {
    buf content, reasoning;
    json_t *calls;
} collect;

static void collect_ev(void *ud, const st_tc_event *ev) {
    collect *c = ud;
    switch (ev->kind) {
    case ST_TC_CONTENT: buf_add(&c->content, ev->text, ev->len); break;
    case ST_TC_REASONING: buf_add(&c->reasoning, ev->text, ev->len); break;
    case ST_TC_TOOL_START:
        json_array_append_new(c->calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", ev->id, "type", "function",
                                                  "function", "name", ev->name, "arguments", ""));
        break;
    case ST_TC_TOOL_ARGS: {
        json_t *f = json_object_get(json_array_get(c->calls, (size_t)ev->index), "function");
        buf a = {0};
        buf_adds(&a, json_string_value(json_object_get(f, "arguments")));
        buf_add(&a, ev->text, ev->len);
        json_object_set_new(f, "arguments", json_string(a.p));
        free(a.p);
        break;
    }
    }
}

json_t *st_tc_parse_all(const st_tc_options *o, const char *text) {
    collect c = {.calls = json_array()};
    buf_add(&c.content, "", 0);
    buf_add(&c.reasoning, "", 0);
    st_tc_parser *p = st_tc_parser_new(o, collect_ev, &c);
    st_tc_feed(p, text, strlen(text));
    st_tc_finish(p);
    st_tc_parser_free(p);
    json_t *r = json_pack("{s:s, s:s, s:o}", "content", c.content.p, "reasoning_content", c.reasoning.p, "tool_calls",
                          c.calls);
    free(c.content.p);
    free(c.reasoning.p);
    return r;
}

// ---- prompts -------------------------------------------------------------------------------------------------------

char *st_tc_forced_prefix(st_tc_format f, const char *name) {
    buf b = {0};
    buf_add(&b, "", 0);
    switch (f) {
    case ST_TC_QWEN3_CODER:
        buf_adds(&b, "<tool_call>\n<function=");
        if (name) {
            buf_adds(&b, name);
            buf_adds(&b, ">\n");
        }
        break;
    case ST_TC_LLAMA3:
        buf_adds(&b, "{\"name\": \"");
        if (name) {
            buf_adds(&b, name);
            buf_adds(&b, "\", \"parameters\": ");
        }
        break;
    case ST_TC_HARMONY:
        buf_adds(&b, "<|channel|>commentary to=functions.");
        if (name) {
            buf_adds(&b, name);
            buf_adds(&b, " <|constrain|>json<|message|>");
        }
        break;
    default:
        buf_adds(&b, "<tool_call>\n{\"name\": \"");
        if (name) {
            buf_adds(&b, name);
            buf_adds(&b, "\", \"arguments\": ");
        }
        break;
    }
    return b.p;
}

char *st_tc_generic_tools_prompt(const json_t *tools) {
    buf b = {0};
    buf_adds(&b, "You can call functions to help with the user's request. The functions are described by these JSON "
                 "signatures:\n<tools>\n");
    size_t i;
    json_t *t;
    json_array_foreach((json_t *)tools, i, t) {
        char *s = json_dumps(t, JSON_COMPACT);
        if (s) {
            buf_adds(&b, s);
            buf_adds(&b, "\n");
        }
        free(s);
    }
    buf_adds(&b, "</tools>\nTo call a function, reply with a JSON object holding its name and arguments inside "
                 "<tool_call></tool_call> tags, like this:\n<tool_call>\n{\"name\": \"function_name\", \"arguments\": "
                 "{\"arg\": \"value\"}}\n</tool_call>\nFunction results come back inside <tool_response>"
                 "</tool_response> tags.");
    return b.p;
}
