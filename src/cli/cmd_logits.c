// strata logits: the prompt's token ids and the top-K logits after every position, as JSON. Used by the golden
// tests and by anyone comparing engines.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "strata.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: strata logits -m MODEL (-p TEXT | -f FILE) [--top K] [options]\n\n"
            "Prints {\"tokens\": [ids], \"positions\": [{\"top\": [[id, logit], ...]}, ...]}: the prompt's token ids\n"
            "(tokenized as `strata run` does: BOS per the model, special tokens parsed) and, after each position, the K\n"
            "largest logits, highest first.\n\n"
            "options:\n"
            "  -m, --model FILE       GGUF model\n"
            "  -p, --prompt TEXT      prompt text\n"
            "  -f, --file FILE        read the prompt from FILE\n"
            "      --tokens IDS       evaluate these comma-separated token ids instead of tokenizing a prompt\n"
            "      --top K            logits per position (default 10)\n"
            "      --last             only the last position's logits (the prompt evaluated as a server does: GPU\n"
            "                         prefill in -ub-token steps instead of 512-row all-position ones)\n"
            "  -dev, --device DEV     cpu, cuda or cuda:N (default: cuda when available)\n"
            "  -t, --threads N        compute threads (default: all CPUs)\n"
            "  -ctk, --cache-type T   KV cache element type: f32 (default here, exact) or f16\n"
            "      --no-special       do not parse special-token text in the prompt\n"
            "      --greedy N         also continue greedily for N tokens (end-of-generation tokens included) and\n"
            "                         add \"greedy\": [ids] to the output\n"
            ST_ARGS_HYBRID_HELP
            "  -h, --help             this help\n");
}

int cmd_logits(int argc, char **argv) {
    const char *prompt = NULL, *prompt_file = NULL, *token_list = NULL;
    int64_t top = 10, n_greedy = 0;
    bool parse_special = true, last_only = false;
    st_engine_args ea = {.kv_f32 = true};  // exact logits: f32 KV cache by default
    st_args a = {argc, argv, 1, "logits", false};
    for (; a.i < argc && !a.failed; a.i++) {
        if (st_args_is(&a, "-h", "--help")) {
            usage(stdout);
            return 0;
        } else if (st_args_engine(&a, &ea) || st_args_hybrid(&a, &ea) ||
                   st_args_prompt(&a, &prompt, &prompt_file)) continue;
        else if (st_args_is(&a, NULL, "--tokens")) token_list = st_args_str(&a);
        else if (st_args_is(&a, NULL, "--top")) top = st_args_int(&a, 1, 1 << 20);
        else if (st_args_is(&a, NULL, "--no-special")) parse_special = false;
        else if (st_args_is(&a, NULL, "--last")) last_only = true;
        else if (st_args_is(&a, NULL, "--greedy")) n_greedy = st_args_int(&a, 0, 1 << 20);
        else st_args_unknown(&a);
    }
    if (a.failed) return 2;
    if (!ea.model || (!prompt && !prompt_file && !token_list)) {
        fprintf(stderr, "strata logits: need -m MODEL and -p TEXT, -f FILE or --tokens IDS (see strata logits --help)\n");
        return 2;
    }
    char *file_text = NULL;
    if (st_args_read_prompt(&a, prompt_file, &file_text, &prompt)) return 1;
    strata_engine *e = st_args_load_engine(&a, &ea);
    if (!e) {
        free(file_text);
        return 1;
    }
    int rc = 1;
    size_t len = token_list ? strlen(token_list) : strlen(prompt);
    int32_t cap = (int32_t)len + 16;
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)cap);
    int32_t n = 0;
    float *logits = NULL;
    strata_session *s = NULL;
    int32_t nv = strata_n_vocab(e);
    if (token_list) {  // "12,345,6": ids checked against the vocabulary by the session
        for (const char *c = token_list; *c && n < cap;) {
            char *end;
            long v = strtol(c, &end, 10);
            if (end == c) {
                fprintf(stderr, "strata logits: --tokens: expected comma-separated integers at '%s'\n", c);
                goto done;
            }
            toks[n++] = (int32_t)v;
            c = *end == ',' ? end + 1 : end;
        }
    } else {
        n = strata_tokenize(e, prompt, len, true, parse_special, toks, cap);
    }
    if (n <= 0) {
        fprintf(stderr, "strata logits: the prompt gives no tokens\n");
        goto done;
    }
    strata_session_params sp = strata_session_default_params();
    sp.n_ctx = n + (int32_t)n_greedy;
    sp.kv_f32 = ea.kv_f32;
    s = strata_session_new(e, &sp);
    logits = malloc(sizeof(float) * (size_t)(last_only ? 1 : n) * (size_t)nv);
    if (!s || !logits) {
        fprintf(stderr, "strata logits: %s\n", s ? "out of memory" : strata_last_error());
        goto done;
    }
    if (strata_session_eval(s, toks, n, logits, !last_only)) {
        fprintf(stderr, "strata logits: %s\n", strata_last_error());
        goto done;
    }
    if (top > nv) top = nv;
    printf("{\"tokens\": [");
    for (int32_t i = 0; i < n; i++) printf("%s%d", i ? ", " : "", toks[i]);
    printf("], \"positions\": [");
    int32_t *best = malloc(sizeof(int32_t) * (size_t)top);
    for (int32_t i = 0; i < (last_only ? 1 : n); i++) {
        const float *l = logits + (size_t)i * (size_t)nv;
        int64_t k = 0;  // insertion into a sorted top list: K is small
        for (int32_t v = 0; v < nv; v++) {
            if (k == top && l[v] <= l[best[k - 1]]) continue;
            int64_t j = k < top ? k++ : top - 1;
            while (j > 0 && l[best[j - 1]] < l[v]) {
                best[j] = best[j - 1];
                j--;
            }
            best[j] = v;
        }
        printf("%s{\"top\": [", i ? ", " : "");
        for (int64_t j = 0; j < k; j++) printf("%s[%d, %.6g]", j ? ", " : "", best[j], l[best[j]]);
        printf("]}");
    }
    printf("]");
    free(best);
    if (n_greedy > 0) {
        printf(", \"greedy\": [");
        const float *l = logits + (size_t)(last_only ? 0 : n - 1) * (size_t)nv;
        for (int64_t g = 0; g < n_greedy; g++) {
            int32_t tok = 0;
            for (int32_t v = 1; v < nv; v++)
                if (l[v] > l[tok]) tok = v;
            printf("%s%d", g ? ", " : "", tok);
            fflush(stdout);
            if (g + 1 < n_greedy && strata_session_eval(s, &tok, 1, logits, false)) {
                fprintf(stderr, "strata logits: %s\n", strata_last_error());
                goto done;
            }
            l = logits;
        }
        printf("]");
    }
    printf("}\n");
    rc = 0;
done:
    free(logits);
    strata_session_free(s);
    strata_engine_free(e);
    free(toks);
    free(file_text);
    return rc;
}
