// libFuzzer target: the chat-template interpreter (src/server/jinja) on arbitrary template text. A GGUF file's
// `tokenizer.chat_template` is untrusted input, parsed once at load and rendered for every request: a template must
// parse or be refused with a message, and a parsed one must render or fail with a message within the render limits
// (steps, memory, output, depth), never crash, leak or hang. The context is a small conversation with a tool call
// and a tool, so templates that walk messages and tools reach their loops. Also linked with replay_main.c into a
// plain test (tests/server/jinja).
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/jinja/jinja.h"
#include "util/err.h"

#define REQUIRE(c)                      \
    do {                                \
        if (!(c)) __builtin_trap();     \
    } while (0)

static json_t *g_ctx;

static json_t *context(void) {
    const char *js =
        "{\"messages\": ["
        "{\"role\": \"system\", \"content\": \"You are terse.\"},"
        "{\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
        "{\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"look it up\", \"tool_calls\": ["
        "{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
        "\"arguments\": {\"city\": \"Paris\"}}}]},"
        "{\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"18 C\"},"
        "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Thanks\"}]}],"
        "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"d\", "
        "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, "
        "\"required\": [\"city\"]}}}],"
        "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", "
        "\"enable_thinking\": false}";
    json_error_t je;
    json_t *c = json_loads(js, 0, &je);
    REQUIRE(c);
    return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_ctx) g_ctx = context();  // (kept for the process: one allocation, not a leak per input)
    st_err_clear();
    st_jinja_template *t = st_jinja_parse((const char *)data, size, "fuzz template");
    if (!t) {
        REQUIRE(st_errmsg()[0] != '\0');
        return 0;
    }
    // Limits small enough that a hostile template stops in milliseconds (libFuzzer's -timeout catches a hang).
    const st_jinja_opts o = {.max_output = 1 << 20, .max_memory = 32 << 20, .max_steps = 200000, .max_depth = 16,
                             .now = 1767225600};
    char *out = NULL;
    size_t n = 0;
    st_err_clear();
    if (st_jinja_render_ex(t, g_ctx, &o, &out, &n) == 0) {
        REQUIRE(out && strlen(out) <= n && n <= o.max_output);  // (output may hold NUL bytes from the template)
        free(out);
    } else {
        REQUIRE(st_errmsg()[0] != '\0');
    }
    st_jinja_free(t);
    return 0;
}
