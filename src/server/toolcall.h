// Tool calls in the model's output -> OpenAI `tool_calls` / Anthropic `tool_use` blocks (follow-up work).
#ifndef STRATA_SERVER_TOOLCALL_H
#define STRATA_SERVER_TOOLCALL_H

#include <jansson.h>

// Splits a finished generation into plain content and tool calls, in the format the chat template taught the model
// (Qwen3 / Hermes <tool_call>{json}</tool_call>, Llama-3 JSON, gpt-oss channels, ...). Returns an array of OpenAI
// tool_calls ({"id", "type": "function", "function": {"name", "arguments": string}}), empty when there are none, and
// sets *content (malloc'd) to the text outside them. Not implemented yet: returns no calls and the text unchanged.
json_t *st_toolcall_parse(const char *template_src, const char *text, char **content);

#endif
