// Robustness of the chat-template interpreter: random truncations, byte flips and token splices of
// the real templates must parse or fail cleanly (never crash, leak or hang; run under ASan/UBSan
// in the sanitizer build), and hostile templates must hit the step/memory/output/depth limits.
// Usage: test_jinja_fuzz TEMPLATE_DIR. Seed from time unless STRATA_SEED is set; printed on failure.
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/jinja/jinja.h"
#include "util/err.h"
#include "util/rng.h"

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    *n = fread(b, 1, (size_t)sz, f);
    fclose(f);
    return b;
}

static const char *const fragments[] = {
    "{{", "}}", "{%", "%}", "{#", "#}", "{%-", "-%}", "{{-", "-}}", "if ", "endif", "for x in ", "endfor",
    "set ", " = ", "macro m(a) ", "endmacro", "m(1)", "|tojson", "|trim", "|length", "|items", "loop.index",
    "ns.x", "namespace(x=1)", "'str'", "\"q\\\"\"", "[1,2]", "{'a':1}", "[::-1]", "[1:]", ".split('x')",
    " is defined", " is not none", " and ", " or ", " not ", " in ", "(", ")", "[", "]", ",", ":", "~", "+",
    "raw", "endraw", "break", "continue", "else", "elif", "messages", "tools", "message.content", "\n", " ",
    "range(3)", "**", "//", "%", "-1", "1.5e3", "\xc3\xa9", "\xff", "\\u00e9", "recursive", "caller()",
};

static uint64_t g_seed;

static int check_hostile(const char *src, const char *want, const json_t *ctx) {
    st_jinja_opts o = {.max_steps = 2000000, .max_memory = 64 << 20, .max_output = 1 << 20, .max_depth = 32};
    st_jinja_template *t = st_jinja_parse(src, strlen(src), "chat template");
    if (!t) {
        if (strstr(st_errmsg(), want)) return 0;
        fprintf(stderr, "hostile template %.60s: parse error '%s', want '%s'\n", src, st_errmsg(), want);
        return 1;
    }
    char *out = NULL;
    size_t n;
    clock_t c0 = clock();
    int rc = st_jinja_render_ex(t, ctx, &o, &out, &n);
    double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
    st_jinja_free(t);
    if (rc == 0 || !strstr(st_errmsg(), want) || secs > 20) {
        fprintf(stderr, "hostile template %.60s: rc %d '%s' in %.1fs, want error '%s'\n", src, rc,
                rc ? st_errmsg() : "", secs, want);
        free(out);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_jinja_fuzz TEMPLATE_DIR\n");
        return 2;
    }
    const char *env = getenv("STRATA_SEED");
    g_seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
    st_rng rng;
    st_rng_init(&rng, g_seed, 0);

    json_error_t je;
    json_t *ctx = json_loads(
        "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"},"
        " {\"role\": \"assistant\", \"content\": \"<think>a</think>b\", \"tool_calls\": [{\"function\": {\"name\": \"f\","
        " \"arguments\": {\"x\": 1}}}]}, {\"role\": \"tool\", \"content\": \"r\"}],"
        " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\", \"parameters\":"
        " {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"integer\"}}, \"required\": [\"x\"]}}}],"
        " \"add_generation_prompt\": true, \"bos_token\": \"<s>\"}",
        0, &je);
    if (!ctx) {
        fprintf(stderr, "bad context json: %s\n", je.text);
        return 2;
    }

    // corpus: the real templates
    char *srcs[32];
    size_t lens[32];
    int ns = 0;
    DIR *d = opendir(argv[1]);
    if (!d) {
        fprintf(stderr, "%s: cannot open\n", argv[1]);
        return 2;
    }
    struct dirent *e;
    while ((e = readdir(d)) && ns < 32) {
        size_t l = strlen(e->d_name);
        if (l < 7 || strcmp(e->d_name + l - 6, ".jinja")) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
        srcs[ns] = slurp(path, &lens[ns]);
        if (srcs[ns]) ns++;
    }
    closedir(d);
    if (!ns) {
        fprintf(stderr, "no templates in %s\n", argv[1]);
        return 2;
    }

    int failures = 0, parsed = 0, rendered = 0;
    const int iters = 5000;
    st_jinja_opts o = {.max_steps = 200000, .max_memory = 32 << 20, .max_output = 1 << 20, .max_depth = 16};
    for (int it = 0; it < iters; it++) {
        int k = (int)(st_rng_u64(&rng) % (uint64_t)ns);
        size_t cap = lens[k] + 4096;
        char *buf = malloc(cap);
        memcpy(buf, srcs[k], lens[k]);
        size_t n = lens[k];
        int mode = (int)(st_rng_u64(&rng) % 4);
        if (mode == 0) {  // truncate
            n = (size_t)(st_rng_u64(&rng) % (n + 1));
        } else if (mode == 1) {  // flip bytes
            int flips = 1 + (int)(st_rng_u64(&rng) % 8);
            for (int f = 0; f < flips && n; f++) buf[st_rng_u64(&rng) % n] = (char)(st_rng_u64(&rng) & 0xff);
        } else {  // splice fragments at random positions, or delete spans
            int edits = 1 + (int)(st_rng_u64(&rng) % 6);
            for (int f = 0; f < edits; f++) {
                size_t at = n ? (size_t)(st_rng_u64(&rng) % n) : 0;
                if (mode == 3 && n > at + 1) {
                    size_t del = 1 + (size_t)(st_rng_u64(&rng) % 40);
                    if (del > n - at) del = n - at;
                    memmove(buf + at, buf + at + del, n - at - del);
                    n -= del;
                } else {
                    const char *fr = fragments[st_rng_u64(&rng) % (sizeof fragments / sizeof *fragments)];
                    size_t fl = strlen(fr);
                    if (n + fl >= cap) break;
                    memmove(buf + at + fl, buf + at, n - at);
                    memcpy(buf + at, fr, fl);
                    n += fl;
                }
            }
        }
        st_err_clear();
        st_jinja_template *t = st_jinja_parse(buf, n, "chat template");
        if (!t) {
            if (!strstr(st_errmsg(), "chat template line ")) {
                fprintf(stderr, "iteration %d: parse error without position: '%s'\n", it, st_errmsg());
                failures++;
            }
        } else {
            parsed++;
            char *out = NULL;
            size_t on;
            if (st_jinja_render_ex(t, ctx, &o, &out, &on) == 0) {
                rendered++;
                if (strlen(out) > on) failures++;  // out is NUL-terminated at on (may contain NULs)
                free(out);
            } else if (!*st_errmsg()) {
                fprintf(stderr, "iteration %d: render failed without a message\n", it);
                failures++;
            }
            st_jinja_free(t);
        }
        free(buf);
    }

    // hostile templates hit a limit quickly and report it
    failures += check_hostile("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                              "step limit", ctx);
    failures += check_hostile("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "nested deeper", ctx);
    failures += check_hostile("{% macro f(n) %}{{ f(n) }}{{ f(n) }}{% endmacro %}{{ f(1) }}", "nested deeper", ctx);
    failures += check_hostile("{% set ns = namespace(s='xx') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}"
                              "{% endfor %}",
                              "limit", ctx);
    failures += check_hostile("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "output limit", ctx);
    failures += check_hostile("{{ 'x' * 100000000000 }}", "memory limit", ctx);
    failures += check_hostile("{{ [1] * 100000000000 }}", "memory limit", ctx);
    {
        static char deep[20000];
        size_t p = 0;
        p += (size_t)sprintf(deep, "{{ ");
        for (int i = 0; i < 5000; i++) deep[p++] = '(';
        deep[p++] = '1';
        for (int i = 0; i < 5000; i++) deep[p++] = ')';
        strcpy(deep + p, " }}");
        failures += check_hostile(deep, "nested too deeply", ctx);
        p = 0;
        for (int i = 0; i < 1000; i++) p += (size_t)sprintf(deep + p, "{%% if 1 %%}");
        failures += check_hostile(deep, "nested too deeply", ctx);
        p = (size_t)sprintf(deep, "{{ ");
        for (int i = 0; i < 3000; i++) p += (size_t)sprintf(deep + p, "not ");
        strcpy(deep + p, "1 }}");
        failures += check_hostile(deep, "nested too deeply", ctx);
    }

    json_decref(ctx);
    for (int i = 0; i < ns; i++) free(srcs[i]);
    printf("fuzz: %d mutated templates, %d parsed, %d rendered; hostile templates hit their limits\n", iters, parsed,
           rendered);
    if (failures) {
        fprintf(stderr, "%d failure(s); reproduce with STRATA_SEED=%llu\n", failures, (unsigned long long)g_seed);
        return 1;
    }
    return 0;
}
