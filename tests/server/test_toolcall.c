// Tool-call / reasoning parsers (src/server/toolcall.c) on canned model outputs of every template family: each output
// is fed whole, split at every byte position into two pieces, byte by byte, and in random chunks (fresh seed each run;
// STRATA_SEED=<n> replays), and every feeding must give the same content, reasoning and calls. Malformed calls must
// come back as plain content; markup of valid calls must never reach content.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/toolcall.h"
#include "util/rng.h"

static int g_fail;
static uint64_t g_seed;

typedef struct result {
    char content[4096], reasoning[4096];
    char names[8][64], args[8][1024], ids[8][64];
    int n_calls;
    int bad_order;  // events for a call index out of order
} result;

static void add(char *dst, size_t cap, const char *s, size_t n) {
    size_t l = strlen(dst);
    if (l + n + 1 > cap) n = cap - l - 1;
    memcpy(dst + l, s, n);
    dst[l + n] = 0;
}

static void on_ev(void *ud, const st_tc_event *ev) {
    result *r = ud;
    switch (ev->kind) {
    case ST_TC_CONTENT: add(r->content, sizeof r->content, ev->text, ev->len); break;
    case ST_TC_REASONING: add(r->reasoning, sizeof r->reasoning, ev->text, ev->len); break;
    case ST_TC_TOOL_START:
        if (ev->index != r->n_calls || r->n_calls == 8) {
            r->bad_order++;
            return;
        }
        snprintf(r->names[r->n_calls], sizeof r->names[0], "%s", ev->name);
        snprintf(r->ids[r->n_calls], sizeof r->ids[0], "%s", ev->id);
        r->n_calls++;
        break;
    case ST_TC_TOOL_ARGS:
        if (ev->index != r->n_calls - 1) {
            r->bad_order++;
            return;
        }
        add(r->args[ev->index], sizeof r->args[0], ev->text, ev->len);
        break;
    }
}

typedef struct tcase {
    const char *what;
    st_tc_format format;
    bool tools, thinking, in_thinking;
    const char *prefix;  // forced prefix fed first (tool_choice), or NULL
    const char *text;
    const char *content, *reasoning;
    int n_calls;
    const char *names[3], *args[3];  // args as JSON (compared as values)
} tcase;

static const char *CODER_TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"run\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"cmd\":{\"type\":\"string\"},\"timeout\":{\"type\":\"integer\"},\"tag\":{\"type\":\"string\"}}}}}]";

static const tcase CASES[] = {
    {"hermes: content then a call", ST_TC_HERMES, true, true, false, NULL,
     "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
     "Let me check.\n", "", 1, {"get_weather"}, {"{\"city\": \"Paris\"}"}},
    {"hermes: thinking and two calls", ST_TC_HERMES, true, true, false, NULL,
     "<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n"
     "</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"y\\\": [1, 2]}\"}\n</tool_call>",
     "", "The user wants weather.", 2, {"a", "b"}, {"{\"x\": 1}", "{\"y\": [1, 2]}"}},
    {"hermes: 'parameters' and no arguments", ST_TC_GENERIC, true, false, false, NULL,
     "<tool_call>{\"name\": \"p\", \"parameters\": {\"k\": \"v\"}}</tool_call><tool_call>{\"name\": \"q\"}</tool_call>"
     " done",
     "done", "", 2, {"p", "q"}, {"{\"k\": \"v\"}", "{}"}},
    {"hermes: malformed JSON is content", ST_TC_HERMES, true, false, false, NULL,
     "Try:<tool_call>\n{\"name\": \"x\", \"arguments\": {bad}\n</tool_call>",
     "Try:<tool_call>\n{\"name\": \"x\", \"arguments\": {bad}\n</tool_call>", "", 0, {0}, {0}},
    {"hermes: not a call object is content", ST_TC_HERMES, true, false, false, NULL,
     "<tool_call>[1, 2]</tool_call>", "<tool_call>[1, 2]</tool_call>", "", 0, {0}, {0}},
    {"hermes: unclosed call at the end still parses", ST_TC_HERMES, true, false, false, NULL,
     "<tool_call>\n{\"name\":\"f\",\"arguments\":{}}\n", "", "", 1, {"f"}, {"{}"}},
    {"hermes: unclosed truncated call is content", ST_TC_HERMES, true, false, false, NULL,
     "ok <tool_call>\n{\"name\":\"f\",\"argu", "ok <tool_call>\n{\"name\":\"f\",\"argu", "", 0, {0}, {0}},
    {"hermes: tools off keeps markup as content", ST_TC_HERMES, false, true, false, NULL,
     "<tool_call>{\"name\": \"f\"}</tool_call>", "<tool_call>{\"name\": \"f\"}</tool_call>", "", 0, {0}, {0}},
    {"hermes: prompt opened <think>", ST_TC_HERMES, true, true, true, NULL,
     "step 1 < step 2</think>\n\nAnswer <tool", "Answer <tool", "step 1 < step 2", 0, {0}, {0}},
    {"hermes: a '<' that is not markup", ST_TC_HERMES, true, true, false, NULL,
     "a <b> c <tool_cal d <think> e", "a <b> c <tool_cal d <think> e", "", 0, {0}, {0}},
    {"hermes: unfinished reasoning", ST_TC_HERMES, true, true, false, NULL,
     "  <think>still thinking", "", "still thinking", 0, {0}, {0}},
    {"hermes: reasoning trimmed, inner whitespace kept", ST_TC_HERMES, false, true, false, NULL,
     "<think> \n a \n\n b \n</think>\n\n c ", "c ", "a \n\n b", 0, {0}, {0}},
    {"hermes: forced named call", ST_TC_HERMES, true, true, false, "<tool_call>\n{\"name\": \"f\", \"arguments\": ",
     "{\"a\": \"}</tool_call>\"}}\n</tool_call>", "", "", 1, {"f"}, {"{\"a\": \"}</tool_call>\"}"}},
    {"qwen3-coder: text then a call with typed values", ST_TC_QWEN3_CODER, true, false, false, NULL,
     "I'll run it.\n<tool_call>\n<function=run>\n<parameter=cmd>\nls -la\n/tmp\n</parameter>\n<parameter=timeout>\n30\n"
     "</parameter>\n<parameter=tag>\n42\n</parameter>\n</function>\n</tool_call>",
     "I'll run it.\n", "", 1, {"run"}, {"{\"cmd\": \"ls -la\\n/tmp\", \"timeout\": 30, \"tag\": \"42\"}"}},
    {"qwen3-coder: undeclared values parse as JSON when they can", ST_TC_QWEN3_CODER, true, false, false, NULL,
     "<tool_call>\n<function=other>\n<parameter=n>\n7\n</parameter>\n<parameter=o>\n{\"k\": true}\n</parameter>\n"
     "<parameter=s>\nhello world\n</parameter>\n</function>\n</tool_call>",
     "", "", 1, {"other"}, {"{\"n\": 7, \"o\": {\"k\": true}, \"s\": \"hello world\"}"}},
    {"qwen3-coder: malformed (no </parameter>) is content", ST_TC_QWEN3_CODER, true, false, false, NULL,
     "<tool_call>\n<function=run>\n<parameter=cmd>\nls\n</function>\n</tool_call>",
     "<tool_call>\n<function=run>\n<parameter=cmd>\nls\n</function>\n</tool_call>", "", 0, {0}, {0}},
    {"qwen3-coder: forced required call", ST_TC_QWEN3_CODER, true, false, false, "<tool_call>\n<function=",
     "run>\n<parameter=cmd>\npwd\n</parameter>\n</function>\n</tool_call>", "", "", 1, {"run"},
     {"{\"cmd\": \"pwd\"}"}},
    {"llama3: JSON call", ST_TC_LLAMA3, true, false, false, NULL,
     "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Tokyo\"}}", "", "", 1, {"get_weather"},
     {"{\"city\": \"Tokyo\"}"}},
    {"llama3: two JSON calls", ST_TC_LLAMA3, true, false, false, NULL,
     " {\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"parameters\": {\"z\": null}}", "", "", 2,
     {"a", "b"}, {"{}", "{\"z\": null}"}},
    {"llama3: python_tag JSON", ST_TC_LLAMA3, true, false, false, NULL,
     "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"a\": 1}}", "", "", 1, {"f"}, {"{\"a\": 1}"}},
    {"llama3: python_tag code", ST_TC_LLAMA3, true, false, false, NULL,
     "Computing.<|python_tag|>print(2+2)", "Computing.", "", 1, {"python"}, {"{\"code\": \"print(2+2)\"}"}},
    {"llama3: plain text", ST_TC_LLAMA3, true, false, false, NULL, "Hello {world}", "Hello {world}", "", 0, {0}, {0}},
    {"llama3: JSON that is not a call is content", ST_TC_LLAMA3, true, false, false, NULL,
     "{\"answer\": 42} is it", "{\"answer\": 42} is it", "", 0, {0}, {0}},
    {"llama3: truncated JSON is content", ST_TC_LLAMA3, true, false, false, NULL,
     "{\"name\": \"f\", \"parameters\": {", "{\"name\": \"f\", \"parameters\": {", "", 0, {0}, {0}},
    {"llama3: broken JSON is content", ST_TC_LLAMA3, true, false, false, NULL,
     "{name: f}", "{name: f}", "", 0, {0}, {0}},
    {"llama3: arguments a string that is no JSON object: content", ST_TC_LLAMA3, true, false, false, NULL,
     "{\"name\": \"f\", \"parameters\": \"Pis\"}", "{\"name\": \"f\", \"parameters\": \"Pis\"}", "", 0, {0}, {0}},
    {"llama3: JSON that is not a call, then a python_tag call", ST_TC_LLAMA3, true, false, false, NULL,
     "{\"answer\": 42} <|python_tag|>{\"name\": \"f\", \"parameters\": {\"q\": 1}}", "{\"answer\": 42} ", "", 1,
     {"f"}, {"{\"q\": 1}"}},
    {"harmony: analysis then a call", ST_TC_HARMONY, true, false, false, NULL,
     "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
     "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}<|call|>",
     "", "Need the weather.", 1, {"get_weather"}, {"{\"city\": \"Oslo\"}"}},
    {"harmony: analysis then final", ST_TC_HARMONY, true, false, false, NULL,
     "<|channel|>analysis<|message|>2+2 is 4.<|end|><|start|>assistant<|channel|>final<|message|>The answer is 4.",
     "The answer is 4.", "2+2 is 4.", 0, {0}, {0}},
    {"harmony: recipient before the channel", ST_TC_HARMONY, true, false, false, NULL,
     " to=functions.lookup<|channel|>commentary json<|message|>{\"q\": \"x\"}<|call|>", "", "", 1, {"lookup"},
     {"{\"q\": \"x\"}"}},
    {"harmony: malformed arguments are content", ST_TC_HARMONY, true, false, false, NULL,
     "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{oops<|call|>", "{oops", "", 0, {0}, {0}},
    {"harmony: preamble, then call, tools off", ST_TC_HARMONY, false, false, false, NULL,
     "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary to=functions.f "
     "<|message|>{}<|call|>",
     "Checking.{}", "", 0, {0}, {0}},
    {"harmony: no markup at all", ST_TC_HARMONY, true, false, false, NULL, "Hello there, friend.",
     "Hello there, friend.", "", 0, {0}, {0}},
    {"harmony: a header that is not markup is content", ST_TC_HARMONY, true, false, false, NULL,
     "<|channel|>analysis<|message|>think<|start|>n|>json<|message|>{\"city\": \"Paris\"}<|call|>",
     "|>json<|message|>{\"city\": \"Paris\"}", "think", 0, {0}, {0}},
    {"harmony: forced named call", ST_TC_HARMONY, true, false, false,
     "<|channel|>commentary to=functions.f <|constrain|>json<|message|>", "{\"a\": [1]}", "", "", 1, {"f"},
     {"{\"a\": [1]}"}},
};

static void run_feed(const tcase *c, const json_t *tools, const size_t *cuts, int n_cuts, result *r) {
    memset(r, 0, sizeof *r);
    st_tc_options o = {.format = c->format, .tools = c->tools, .thinking = c->thinking, .in_thinking = c->in_thinking,
                       .tool_defs = tools};
    st_tc_parser *p = st_tc_parser_new(&o, on_ev, r);
    if (c->prefix) st_tc_feed(p, c->prefix, strlen(c->prefix));
    size_t prev = 0, n = strlen(c->text);
    for (int i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : n;
        st_tc_feed(p, c->text + prev, end - prev);
        prev = end;
    }
    st_tc_finish(p);
    st_tc_parser_free(p);
}

static bool json_same(const char *a, const char *b) {
    json_error_t e;
    json_t *x = json_loads(a, JSON_DECODE_ANY, &e), *y = json_loads(b, JSON_DECODE_ANY, &e);
    bool same = x && y && json_equal(x, y);
    json_decref(x);
    json_decref(y);
    return same;
}

static void check(const tcase *c, const result *r, const char *how) {
    char why[256] = "";
    if (strcmp(r->content, c->content)) snprintf(why, sizeof why, "content %s", "differs");
    else if (strcmp(r->reasoning, c->reasoning)) snprintf(why, sizeof why, "reasoning differs");
    else if (r->n_calls != c->n_calls || r->bad_order) snprintf(why, sizeof why, "%d calls (%d out of order), want %d",
                                                                r->n_calls, r->bad_order, c->n_calls);
    for (int i = 0; !why[0] && i < r->n_calls; i++) {
        if (strcmp(r->names[i], c->names[i])) snprintf(why, sizeof why, "call %d name '%s'", i, r->names[i]);
        else if (!json_same(r->args[i], c->args[i])) snprintf(why, sizeof why, "call %d arguments %s", i, r->args[i]);
        else if (strncmp(r->ids[i], "call_", 5) || strlen(r->ids[i]) != 29)
            snprintf(why, sizeof why, "call %d id '%s'", i, r->ids[i]);
    }
    // Markup of well-formed calls must not leak into content.
    if (!why[0] && c->n_calls > 0) {
        static const char *const markup[] = {"<tool_call>", "</tool_call>", "<function=", "<|python_tag|>",
                                             "<|channel|>", "<|message|>", "<|call|>", "<think>", "</think>"};
        for (size_t k = 0; k < sizeof markup / sizeof markup[0]; k++)
            if (strstr(r->content, markup[k])) snprintf(why, sizeof why, "markup %s in content", markup[k]);
    }
    if (why[0]) {
        g_fail++;
        fprintf(stderr, "FAIL [%s] fed %s: %s\n  content   '%s'\n  want      '%s'\n  reasoning '%s'\n", c->what, how, why,
                r->content, c->content, r->reasoning);
    }
}

int main(void) {
    const char *env = getenv("STRATA_SEED");
    g_seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
    st_rng rng;
    st_rng_init(&rng, g_seed, 0);
    json_error_t je;
    json_t *coder_tools = json_loads(CODER_TOOLS, 0, &je);
    size_t cuts[4096];
    int n_runs = 0;
    for (size_t ci = 0; ci < sizeof CASES / sizeof CASES[0]; ci++) {
        const tcase *c = &CASES[ci];
        const json_t *tools = c->format == ST_TC_QWEN3_CODER ? coder_tools : NULL;
        size_t n = strlen(c->text);
        result *r = malloc(sizeof *r);
        char how[64];
        run_feed(c, tools, NULL, 0, r);
        check(c, r, "whole");
        for (size_t k = 0; k <= n; k++) {  // split once, everywhere
            cuts[0] = k;
            run_feed(c, tools, cuts, 1, r);
            snprintf(how, sizeof how, "split at %zu", k);
            check(c, r, how);
        }
        for (size_t k = 0; k < n && k < 4096; k++) cuts[k] = k + 1;
        run_feed(c, tools, cuts, (int)(n < 4096 ? n : 4096) - 1, r);
        check(c, r, "byte by byte");
        for (int t = 0; t < 20; t++) {  // random chunks
            int m = 0;
            for (size_t pos = 0; m < 4096;) {
                pos += 1 + st_rng_below(&rng, 8);
                if (pos >= n) break;
                cuts[m++] = pos;
            }
            run_feed(c, tools, cuts, m, r);
            check(c, r, "in random chunks");
        }
        n_runs += (int)n + 22;
        free(r);
    }
    // st_tc_parse_all and the detection from real templates' text.
    st_tc_options o = {.format = ST_TC_HERMES, .tools = true, .thinking = true};
    json_t *all = st_tc_parse_all(&o, "<think>r</think>c<tool_call>{\"name\":\"n\",\"arguments\":{}}</tool_call>");
    if (strcmp(json_string_value(json_object_get(all, "content")), "c") ||
        strcmp(json_string_value(json_object_get(all, "reasoning_content")), "r") ||
        json_array_size(json_object_get(all, "tool_calls")) != 1) {
        g_fail++;
        fprintf(stderr, "FAIL st_tc_parse_all: %s\n", json_dumps(all, 0));
    }
    json_decref(all);
    struct { const char *tmpl; st_tc_format f; bool think; } det[] = {
        {"{{ '<|start|>assistant<|channel|>final<|message|>' }}", ST_TC_HARMONY, false},
        {"<tool_call>\n<function={{ name }}>\n<parameter={{ p }}>", ST_TC_QWEN3_CODER, false},
        {"{{- '<tool_call>' }} {% if x %}<think>{% endif %}", ST_TC_HERMES, true},
        {"<|start_header_id|>ipython<|end_header_id|> {% if tools %}<|python_tag|>{% endif %}", ST_TC_LLAMA3, false},
        {"{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}", ST_TC_GENERIC, false},
    };
    for (size_t i = 0; i < sizeof det / sizeof det[0]; i++) {
        st_tc_template_info ti = st_tc_detect(det[i].tmpl);
        if (ti.format != det[i].f || ti.thinking != det[i].think) {
            g_fail++;
            fprintf(stderr, "FAIL detect #%zu: %s thinking %d\n", i, st_tc_format_name(ti.format), ti.thinking);
        }
    }
    json_decref(coder_tools);
    if (g_fail) {
        fprintf(stderr, "%d failures (seed %llu; rerun with STRATA_SEED=%llu)\n", g_fail, (unsigned long long)g_seed,
                (unsigned long long)g_seed);
        return 1;
    }
    printf("toolcall: %zu cases, %d feedings each checked, OK (seed %llu)\n", sizeof CASES / sizeof CASES[0], n_runs,
           (unsigned long long)g_seed);
    return 0;
}
