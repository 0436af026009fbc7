// The model's output -> OpenAI `tool_calls` / Anthropic `tool_use` blocks, reasoning and plain content.
//
// A chat template teaches the model one tool-call syntax; the format is chosen from the template's text:
//   HERMES       Qwen3, Qwen2.5, Hermes:  <tool_call>{"name": N, "arguments": {..}}</tool_call>
//   QWEN3_CODER  <tool_call><function=N><parameter=P>value</parameter>...</function></tool_call>
//   LLAMA3       {"name": N, "parameters": {..}} as the whole answer, or <|python_tag|>{json} / code
//   HARMONY      gpt-oss: <|channel|>analysis<|message|>..<|end|> (reasoning), <|channel|>final<|message|>.. (content),
//                <|channel|>commentary to=functions.N <|constrain|>json<|message|>{args}<|call|> (a call)
//   GENERIC      a template that knows no tools (SmolLM2): the server describes the tools in a system message itself
//                and asks for the HERMES syntax, which is then parsed.
// Templates that mention <think> get <think>...</think> at the start of the answer split off as reasoning.
//
// The parser is incremental: text is fed as the model produces it and events come out as soon as they are certain.
// Text that might be the start of markup is held back until it is decided, so markup never reaches content. A tool
// call is emitted once complete (name first, then its arguments); one that does not parse (malformed JSON, missing
// closing tag at the end) comes out as plain content, markup included, so nothing the model said is lost.
#ifndef STRATA_SERVER_TOOLCALL_H
#define STRATA_SERVER_TOOLCALL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

typedef enum { ST_TC_GENERIC, ST_TC_HERMES, ST_TC_QWEN3_CODER, ST_TC_LLAMA3, ST_TC_HARMONY } st_tc_format;

typedef struct st_tc_template_info {
    st_tc_format format;
    bool thinking;        // the template knows <think> (reasoning split at the start of the answer)
    bool special_tokens;  // the syntax uses control tokens: the worker must render them as text
} st_tc_template_info;

// template_src may be NULL (no template: GENERIC).
st_tc_template_info st_tc_detect(const char *template_src);
const char *st_tc_format_name(st_tc_format f);

typedef enum { ST_TC_CONTENT, ST_TC_REASONING, ST_TC_TOOL_START, ST_TC_TOOL_ARGS } st_tc_event_kind;

typedef struct st_tc_event {
    st_tc_event_kind kind;
    const char *text;  // CONTENT / REASONING: the new text; TOOL_ARGS: a fragment of the arguments JSON string
    size_t len;
    int index;         // TOOL_*: the call's index in this answer (0, 1, ...)
    const char *id;    // TOOL_START: the call id ("call_..." or the prefix given)
    const char *name;  // TOOL_START: the function name
} st_tc_event;

typedef void (*st_tc_emit_fn)(void *ud, const st_tc_event *ev);

typedef struct st_tc_parser st_tc_parser;

typedef struct st_tc_options {
    st_tc_format format;
    bool tools;          // parse tool calls (false: tool_choice "none" or no tools; markup stays content)
    bool thinking;       // split <think>...</think> at the start (HARMONY splits its analysis channel always)
    bool in_thinking;    // the prompt already opened <think>: the answer starts inside the reasoning
    const json_t *tool_defs;  // OpenAI-style tools (for parameter types of QWEN3_CODER values), may be NULL
    const char *id_prefix;    // call ids: prefix + random hex ("call_" when NULL)
} st_tc_options;

st_tc_parser *st_tc_parser_new(const st_tc_options *o, st_tc_emit_fn emit, void *ud);
void st_tc_feed(st_tc_parser *p, const char *text, size_t len);
// The end of the answer: held-back text is decided (an unfinished call becomes content).
void st_tc_finish(st_tc_parser *p);
int st_tc_n_calls(const st_tc_parser *p);
void st_tc_parser_free(st_tc_parser *p);

// A whole answer at once: {"content": str, "reasoning_content": str, "tool_calls": [OpenAI tool calls]}.
json_t *st_tc_parse_all(const st_tc_options *o, const char *text);

// What to append to the prompt to force a call (tool_choice "required": name NULL; a named function: its name), in
// the format's syntax; the parser must be fed the same text first. Returns a malloc'd string.
char *st_tc_forced_prefix(st_tc_format f, const char *name);

// GENERIC templates: a system-message text that describes `tools` and the HERMES call syntax (malloc'd).
char *st_tc_generic_tools_prompt(const json_t *tools);

// A fresh id: prefix + 24 random hex digits.
void st_tc_make_id(char *out, size_t n, const char *prefix);

#endif
