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
