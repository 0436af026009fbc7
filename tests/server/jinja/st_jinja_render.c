// st-jinja-render TEMPLATE CONTEXT.json [--now UNIX_SECONDS] [--parse-only]
// Renders a chat template with a JSON context and writes the exact bytes to stdout.
// Exit status: 0 ok, 1 render error, 2 parse error, 3 usage/IO error (message on stderr).
// With several CONTEXT files (batch mode, for tests), each result goes to CONTEXT.out, or the
// error message to CONTEXT.err, and the exit status is 0 unless parsing or IO failed.
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/jinja/jinja.h"
#include "util/err.h"

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    size_t r;
    while (b && (r = fread(b + len, 1, cap - len, f)) > 0) {
        len += r;
        if (len == cap) {
            char *nb = realloc(b, cap *= 2);
            if (!nb) free(b);
            b = nb;
        }
    }
    fclose(f);
    *n = len;
    return b;
}

int main(int argc, char **argv) {
    const char *tpath = NULL, *cpaths[4096];
    int nc = 0;
    st_jinja_opts o = {0};
    bool parse_only = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--now") && i + 1 < argc) o.now = strtoll(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--parse-only")) parse_only = true;
        else if (!tpath) tpath = argv[i];
        else if (nc < 4096) cpaths[nc++] = argv[i];
        else tpath = NULL, i = argc;
    }
    if (!tpath || (!nc && !parse_only)) {
        fprintf(stderr, "usage: st-jinja-render TEMPLATE CONTEXT.json [--now UNIX_SECONDS] [--parse-only]\n");
        return 3;
    }
    size_t tn;
    char *src = slurp(tpath, &tn);
    if (!src) {
        fprintf(stderr, "%s: cannot read\n", tpath);
        return 3;
    }
    st_jinja_template *t = st_jinja_parse(src, tn, "chat template");
    free(src);
    if (!t) {
        fprintf(stderr, "%s\n", st_errmsg());
        return 2;
    }
    if (parse_only) {
        st_jinja_free(t);
        return 0;
    }
    int status = 0;
    for (int c = 0; c < nc; c++) {
        json_error_t je;
        json_t *ctx = json_load_file(cpaths[c], JSON_ALLOW_NUL, &je);
        if (!ctx) {
            fprintf(stderr, "%s: line %d: %s\n", cpaths[c], je.line, je.text);
            status = 3;
            break;
        }
        char *out = NULL;
        size_t on = 0;
        int rc = st_jinja_render_ex(t, ctx, &o, &out, &on);
        json_decref(ctx);
        if (nc == 1) {
            if (rc) {
                fprintf(stderr, "%s\n", st_errmsg());
                status = 1;
            } else {
                fwrite(out, 1, on, stdout);
            }
        } else {
            char path[4200];
            snprintf(path, sizeof path, "%s.%s", cpaths[c], rc ? "err" : "out");
            FILE *f = fopen(path, "wb");
            if (!f) {
                fprintf(stderr, "%s: cannot write\n", path);
                status = 3;
            } else {
                if (rc) fputs(st_errmsg(), f);
                else fwrite(out, 1, on, f);
                fclose(f);
            }
        }
        free(out);
    }
    st_jinja_free(t);
    return status;
}
