// Chat-template renderer: a Jinja2 subset interpreter, written for the templates that ship in
// `tokenizer.chat_template` (Qwen3, Qwen3-Coder, SmolLM2, Llama-3.x, gpt-oss, and ones like them).
//
// Output is meant to be byte-identical to HF transformers' rendering, which uses
//   jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
//                                                extensions=[loopcontrols, generation-tag])
// with globals raise_exception(msg) and strftime_now(fmt) and a `tojson` filter that is plain
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
// Consequences kept here: list.append() and other mutating methods are refused (the sandbox is
// immutable); macros return plain strings (no autoescape); undefined variables print as "".
//
// Anything outside the subset (template inheritance, includes, imports, {% call %}, {% filter %},
// recursive loops, unknown filters/tests/methods/functions) is refused by st_jinja_parse with a
// message naming line, column and construct, so a model with an unusual template fails loudly
// instead of getting a wrong prompt.
//
// Thread safety: a parsed template is read-only; any number of threads may render it at once.
#ifndef STRATA_SERVER_JINJA_H
#define STRATA_SERVER_JINJA_H

#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

typedef struct st_jinja_template st_jinja_template;

// Parses `src` (`len` bytes, UTF-8). `name` prefixes error messages ("chat template line 12 col 5:
// unsupported filter 'xyz'"). Returns NULL and sets st_err() on a syntax error or unsupported construct.
st_jinja_template *st_jinja_parse(const char *src, size_t len, const char *name);
void st_jinja_free(st_jinja_template *t);

// Bounds that keep a hostile template from hanging the server or exhausting memory. Rendering stops
// with an error when one is exceeded. Zero fields take the defaults noted.
typedef struct st_jinja_opts {
    size_t max_output;   // bytes of rendered text (default 64 MiB)
    size_t max_memory;   // bytes of scratch memory for one render (default 512 MiB)
    uint64_t max_steps;  // evaluated statements + loop iterations + calls (default 50 million)
    int max_depth;       // nested macro calls (default 64)
    int64_t now;         // Unix time used by strftime_now(); 0 = the current time
} st_jinja_opts;

// Renders with `context` (a JSON object: messages, tools, add_generation_prompt, bos_token, ...)
// as the template's variables. On success *out is a malloc'd NUL-terminated string (free() it) of
// *out_len bytes and 0 is returned; on failure (raise_exception(), undefined access, type error,
// limit exceeded) -1 is returned with st_err() set ("chat template line 40: <message>").
int st_jinja_render(const st_jinja_template *t, const json_t *context, char **out, size_t *out_len);
int st_jinja_render_ex(const st_jinja_template *t, const json_t *context, const st_jinja_opts *opts,
                       char **out, size_t *out_len);

#endif
