// Chat prompts: the model's own tokenizer.chat_template rendered by the jinja helper's interpreter (strata_jinja) when
// it is built, else (or with --chat-format chatml) the built-in ChatML format.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/srv.h"
#include "util/err.h"
#include "util/log.h"
#ifdef STRATA_HAVE_JINJA
#include "server/jinja/jinja.h"
#endif

// Built-in fallback: ChatML ("<|im_start|>role\ncontent<|im_end|>\n"), the format of SmolLM2 and Qwen. Used only when
// no Jinja interpreter is built in or the user asks for it; the model's template is the reference otherwise.
static char *render_chatml_fallback(json_t *messages, bool add_generation_prompt) {
    st_sbuf b = {0};
    st_sbuf_add(&b, "", 0);
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        const char *content = json_string_value(json_object_get(m, "content"));
        st_sbuf_printf(&b, "<|im_start|>%s\n%s<|im_end|>\n", role ? role : "user", content ? content : "");
    }
    if (add_generation_prompt) st_sbuf_printf(&b, "<|im_start|>assistant\n");
    return b.p;
}

#ifdef STRATA_HAVE_JINJA
// The parsed template, re-parsed only when the engine reports a different template text.
static pthread_mutex_t tmpl_mu = PTHREAD_MUTEX_INITIALIZER;
static char *tmpl_src;
static st_jinja_template *tmpl;
static char tmpl_err[512];

static int get_template(const char *src, st_jinja_template **out, char *err, size_t errlen) {
    pthread_mutex_lock(&tmpl_mu);
    if (!tmpl_src || strcmp(tmpl_src, src)) {
        st_jinja_free(tmpl);
        free(tmpl_src);
        tmpl_src = strdup(src);
        tmpl = st_jinja_parse(src, strlen(src), "chat template");
        tmpl_err[0] = 0;
        if (!tmpl) {
            snprintf(tmpl_err, sizeof tmpl_err, "%s", st_errmsg());
            st_error("serve: the model's chat template cannot be used: %s (start with --chat-format chatml to use "
                     "the built-in ChatML format instead)", tmpl_err);
        }
    }
    *out = tmpl;
    if (!tmpl) snprintf(err, errlen, "the model's chat template cannot be used: %s (start the server with "
                        "--chat-format chatml to use the built-in ChatML format)", tmpl_err);
    pthread_mutex_unlock(&tmpl_mu);
    return tmpl ? 0 : -1;
}
#endif

char *st_chat_render(const char *template_src, const char *bos, const char *eos, json_t *messages, json_t *tools,
                     json_t *extra, bool add_generation_prompt, char *err, size_t errlen) {
#ifdef STRATA_HAVE_JINJA
    if (template_src && !st_S.cfg->chatml) {
        st_jinja_template *t;
        if (get_template(template_src, &t, err, errlen)) return NULL;
        json_t *ctx = json_pack("{s:O, s:b, s:s, s:s}", "messages", messages, "add_generation_prompt",
                                add_generation_prompt, "bos_token", bos ? bos : "", "eos_token", eos ? eos : "");
        if (tools && json_array_size(tools)) json_object_set(ctx, "tools", tools);
        if (extra) json_object_update_missing(ctx, extra);  // chat_template_kwargs
        char *out = NULL;
        size_t len = 0;
        int rc = st_jinja_render(t, ctx, &out, &len);
        json_decref(ctx);
        if (rc) {
            snprintf(err, errlen, "cannot render the chat template for these messages: %s", st_errmsg());
            return NULL;
        }
        return out;
    }
#else
    (void)template_src;
    (void)bos;
    (void)eos;
    (void)tools;
    (void)extra;
    (void)err;
    (void)errlen;
#endif
    return render_chatml_fallback(messages, add_generation_prompt);
}

// ---- chat requests: messages adapted to the template's family, rendering, and the parser plan ----------------------

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !memcmp(s + n - k, suffix, k);
}

// A tool call's arguments as templates expect them: an object (templates write them with tojson or iterate them),
// parsed from the JSON string OpenAI clients send. Unparseable strings stay strings.
static json_t *args_object(json_t *args) {
    if (json_is_string(args)) {
        json_error_t je;
        json_t *v = json_loads(json_string_value(args), 0, &je);
        if (json_is_object(v)) return v;
        json_decref(v);
    }
    return json_incref(args ? args : json_object());
}

// messages for the template: tool-call arguments as objects; for GENERIC templates (no tool support) calls and
// results written into the text in the HERMES syntax the tools prompt teaches; harmony's "thinking" field.
static json_t *adapt_messages(json_t *messages, st_tc_format f, const char *tools_prompt) {
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        json_t *n = json_deep_copy(m);
        const char *role = json_string_value(json_object_get(n, "role"));
        json_t *calls = json_object_get(n, "tool_calls");
        if (json_is_array(calls)) {
            size_t k;
            json_t *c;
            json_array_foreach(calls, k, c) {
                json_t *fn = json_object_get(c, "function");
                if (json_is_object(fn)) json_object_set_new(fn, "arguments", args_object(json_object_get(fn, "arguments")));
            }
        }
        if (f == ST_TC_GENERIC && json_is_array(calls)) {
            st_sbuf b = {0};
            const char *content = json_string_value(json_object_get(n, "content"));
            st_sbuf_printf(&b, "%s", content ? content : "");
            size_t k;
            json_t *c;
            json_array_foreach(calls, k, c) {
                json_t *fn = json_object_get(c, "function");
                json_t *call = json_pack("{s:O?, s:O?}", "name", json_object_get(fn, "name"), "arguments",
                                         json_object_get(fn, "arguments"));
                char *s = json_dumps(call, JSON_COMPACT);
                st_sbuf_printf(&b, "%s<tool_call>\n%s\n</tool_call>", b.len ? "\n" : "", s ? s : "{}");
                free(s);
                json_decref(call);
            }
            json_object_set_new(n, "content", json_string(b.p ? b.p : ""));
            json_object_del(n, "tool_calls");
            free(b.p);
        }
        if (f == ST_TC_GENERIC && role && !strcmp(role, "tool")) {
            const char *content = json_string_value(json_object_get(n, "content"));
            st_sbuf b = {0};
            st_sbuf_printf(&b, "<tool_response>\n%s\n</tool_response>", content ? content : "");
            json_object_set_new(n, "role", json_string("user"));
            json_object_set_new(n, "content", json_string(b.p));
            free(b.p);
        }
        if (f == ST_TC_HARMONY && json_object_get(n, "reasoning_content"))
            json_object_set(n, "thinking", json_object_get(n, "reasoning_content"));
        json_array_append_new(out, n);
    }
    if (tools_prompt) {  // GENERIC: the tools go into the system message
        json_t *first = json_array_get(out, 0);
        const char *role = json_string_value(json_object_get(first, "role"));
        if (role && !strcmp(role, "system")) {
            st_sbuf b = {0};
            st_sbuf_printf(&b, "%s\n\n%s", json_string_value(json_object_get(first, "content")), tools_prompt);
            json_object_set_new(first, "content", json_string(b.p));
            free(b.p);
        } else {
            json_array_insert_new(out, 0, json_pack("{s:s, s:s}", "role", "system", "content", tools_prompt));
        }
    }
    return out;
}

int st_chat_prepare(json_t *messages, json_t *tools, json_t *kwargs, st_tool_choice choice, const char *tool_name,
                    st_chat_plan *plan, char *err, size_t errlen) {
    memset(plan, 0, sizeof *plan);
    char *tsrc = NULL, *bos = NULL;
    if (st_wait_model_info(&tsrc, &bos)) {
        snprintf(err, errlen, "the engine is not ready (loading or restarting); retry later");
        return -2;
    }
    st_tc_template_info ti = st_tc_detect(st_S.cfg->chatml ? NULL : tsrc);
    bool tools_on = json_array_size(tools) > 0 && choice != ST_TOOLS_NONE;
    char *tools_prompt = tools_on && ti.format == ST_TC_GENERIC ? st_tc_generic_tools_prompt(tools) : NULL;
    json_t *msgs = adapt_messages(messages, ti.format, tools_prompt);
    free(tools_prompt);
    char *prompt = st_chat_render(tsrc, bos, "", msgs, tools_on && ti.format != ST_TC_GENERIC ? tools : NULL, kwargs,
                                  true, err, errlen);
    json_decref(msgs);
    free(tsrc);
    free(bos);
    if (!prompt) return -1;
    plan->popt.format = ti.format;
    plan->popt.tools = tools_on;
    plan->popt.thinking = ti.thinking;
    plan->popt.in_thinking = ti.thinking && (ends_with(prompt, "<think>") || ends_with(prompt, "<think>\n"));
    plan->popt.tool_defs = tools;
    plan->special = ti.special_tokens;
    if (tools_on && (choice == ST_TOOLS_REQUIRED || choice == ST_TOOLS_NAMED)) {
        plan->prefix = st_tc_forced_prefix(ti.format, choice == ST_TOOLS_NAMED ? tool_name : NULL);
        st_sbuf b = {0};
        st_sbuf_printf(&b, "%s%s", prompt, plan->prefix);
        free(prompt);
        prompt = b.p;
    }
    plan->prompt = prompt;
    return 0;
}

void st_chat_plan_free(st_chat_plan *plan) {
    free(plan->prompt);
    free(plan->prefix);
    memset(plan, 0, sizeof *plan);
}
