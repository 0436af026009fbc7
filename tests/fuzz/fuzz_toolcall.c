// libFuzzer target: the incremental tool-call / reasoning parser (src/server/toolcall.c) on arbitrary model output.
// The model's text is untrusted: whatever it says, the parser must not crash, and the answer it reports must not
// depend on how the text was cut into pieces. Input: byte 0 picks the format and options, byte 1 seeds the chunk
// sizes, the rest is the answer. The answer is fed once whole and once in chunks of 1..16 bytes; the two event
// streams, folded per kind (content, reasoning, each call's name and arguments), must be equal, and every call's
// arguments must be a JSON object. When the answer is valid UTF-8 (the server's detokenizer releases only whole
// characters) the chunks end on character boundaries, as the server's do, and every event's text must be valid
// UTF-8 itself (the server turns each into a JSON string), and st_tc_parse_all must agree on the calls.
// Also linked with replay_main.c into a plain test (tests/server).
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/toolcall.h"

#define REQUIRE(c)                      \
    do {                                \
        if (!(c)) __builtin_trap();     \
    } while (0)

#define MAX_CALLS 64

typedef struct {
    char *buf;
    size_t len, cap;
} sbuf;

static void sb_add(sbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1) cap *= 2;
        b->buf = realloc(b->buf, cap);
        REQUIRE(b->buf);
        b->cap = cap;
    }
    if (n) memcpy(b->buf + b->len, s, n);
    b->len += n;
    b->buf[b->len] = '\0';
}

typedef struct {
    sbuf content, reasoning;
    sbuf name[MAX_CALLS], args[MAX_CALLS];
    int n_calls;  // TOOL_START events (indexes 0, 1, ... in order)
    int utf8;     // the input is valid UTF-8: so must every event's text be
} fold;

static int is_utf8(const char *s, size_t n) {
    json_t *v = json_stringn(s, n);  // (jansson validates UTF-8)
    json_decref(v);
    return v != NULL;
}

static void on_event(void *ud, const st_tc_event *ev) {
    fold *f = ud;
    if (f->utf8 && ev->kind != ST_TC_TOOL_START) REQUIRE(is_utf8(ev->text, ev->len));
    if (f->utf8 && ev->kind == ST_TC_TOOL_START) REQUIRE(is_utf8(ev->name, strlen(ev->name)));
    switch (ev->kind) {
    case ST_TC_CONTENT: sb_add(&f->content, ev->text, ev->len); break;
    case ST_TC_REASONING: sb_add(&f->reasoning, ev->text, ev->len); break;
    case ST_TC_TOOL_START:
        REQUIRE(ev->index == f->n_calls && ev->name && ev->id && ev->id[0]);
        if (f->n_calls < MAX_CALLS) sb_add(&f->name[f->n_calls], ev->name, strlen(ev->name));
        f->n_calls++;
        break;
    case ST_TC_TOOL_ARGS:
        REQUIRE(ev->index >= 0 && ev->index < f->n_calls);
        if (ev->index < MAX_CALLS) sb_add(&f->args[ev->index], ev->text, ev->len);
        break;
    }
}

static void fold_free(fold *f) {
    free(f->content.buf), free(f->reasoning.buf);
    for (int i = 0; i < MAX_CALLS; i++) free(f->name[i].buf), free(f->args[i].buf);
}

static int sb_eq(const sbuf *a, const sbuf *b) {
    return a->len == b->len && (!a->len || !memcmp(a->buf, b->buf, a->len));
}

// A tool definition for QWEN3_CODER's typed parameters (the parser converts values by the declared type).
static json_t *tool_defs(void) {
    return json_pack("[{s:s, s:{s:s, s:{s:s, s:{s:{s:s}, s:{s:s}, s:{s:s}, s:{s:s}}}}}]", "type", "function",
                     "function", "name", "f", "parameters", "type", "object", "properties", "n", "type", "integer",
                     "x", "type", "number", "b", "type", "boolean", "o", "type", "object");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    static const st_tc_format formats[] = {ST_TC_GENERIC, ST_TC_HERMES, ST_TC_QWEN3_CODER, ST_TC_LLAMA3,
                                           ST_TC_HARMONY};
    const uint8_t opt = data[0];
    uint32_t seed = data[1] * 2654435761u + 1;
    const char *text = (const char *)data + 2;
    const size_t n = size - 2;
    json_t *defs = tool_defs();
    st_tc_options o = {.format = formats[opt % 5],
                       .tools = (opt & 8) == 0,
                       .thinking = (opt & 16) != 0,
                       .in_thinking = (opt & 32) != 0,
                       .tool_defs = (opt & 64) ? defs : NULL,
                       .id_prefix = (opt & 128) ? "toolu_" : NULL};
    fold whole = {0}, cut = {0};
    whole.utf8 = cut.utf8 = is_utf8(text, n);
    st_tc_parser *p = st_tc_parser_new(&o, on_event, &whole);
    REQUIRE(p);
    st_tc_feed(p, text, n);
    st_tc_finish(p);
    REQUIRE(st_tc_n_calls(p) == whole.n_calls);
    st_tc_parser_free(p);
    p = st_tc_parser_new(&o, on_event, &cut);
    REQUIRE(p);
    for (size_t at = 0; at < n;) {
        seed = seed * 1103515245u + 12345u;
        size_t k = 1 + (seed >> 16) % 16;
        if (k > n - at) k = n - at;
        if (cut.utf8)  // end on a character boundary (a continuation byte is 10xxxxxx)
            while (at + k < n && ((uint8_t)text[at + k] & 0xc0) == 0x80) k++;
        st_tc_feed(p, text + at, k);
        at += k;
    }
    st_tc_finish(p);
    st_tc_parser_free(p);
    // The same answer however it was cut.
    REQUIRE(sb_eq(&whole.content, &cut.content) && sb_eq(&whole.reasoning, &cut.reasoning));
    REQUIRE(whole.n_calls == cut.n_calls);
    for (int i = 0; i < whole.n_calls && i < MAX_CALLS; i++) {
        REQUIRE(sb_eq(&whole.name[i], &cut.name[i]) && sb_eq(&whole.args[i], &cut.args[i]));
        json_error_t je;  // a call's arguments are a JSON object (what the API promises the client)
        json_t *a = json_loadb(whole.args[i].buf ? whole.args[i].buf : "", whole.args[i].len, JSON_ALLOW_NUL, &je);
        REQUIRE(a && json_is_object(a));
        json_decref(a);
    }
    // The one-shot form agrees with the incremental parser on the number of calls.
    char *z = malloc(n + 1);
    REQUIRE(z);
    memcpy(z, text, n);
    z[n] = '\0';
    if (whole.utf8 && strlen(z) == n) {  // (st_tc_parse_all takes a C string of UTF-8 text)
        json_t *all = st_tc_parse_all(&o, z);
        REQUIRE(all);
        json_t *calls = json_object_get(all, "tool_calls");
        REQUIRE((int)(calls ? json_array_size(calls) : 0) == whole.n_calls);
        json_decref(all);
    }
    free(z);
    fold_free(&whole), fold_free(&cut);
    json_decref(defs);
    return 0;
}
