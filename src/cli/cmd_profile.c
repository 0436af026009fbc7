// strata profile: run prompts through the CPU engine and record how often each (layer, expert) is routed to,
// for the hybrid planner's initial expert-cache contents (place/profile.h).
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "engine/internal.h"
#include "engine/session.h"
#include "place/profile.h"
#include "util/err.h"
#include "util/fileio.h"
#include "util/log.h"
#include "util/pool.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: strata profile -m MODEL.gguf -f PROMPT_FILE [-f PROMPT_FILE ...] -o PROFILE.json [options]\n"
            "\n"
            "Runs each prompt file through the CPU engine (a fresh context per file; special-token text such as\n"
            "<|im_start|> is parsed) and records, per layer and expert, how many tokens the router sent to it.\n"
            "strata info --plan --profile PROFILE.json (and the hybrid engine) fill the VRAM expert cache hottest\n"
            "first from it. The profile records the model's fingerprint; loading it with another model fails.\n"
            "\n"
            "options:\n"
            "  -m, --model FILE       the MoE GGUF\n"
            "  -f, --file FILE        a prompt file (repeatable)\n"
            "  -o, --output FILE      the profile to write (JSON)\n"
            "  -c, --ctx-size N       context per prompt (default 4096); longer prompts are cut to fit\n"
            "  -n, --n-predict N      also generate N tokens greedily after each prompt (default 0)\n"
            "  -t, --threads N        compute threads (default: all CPUs)\n"
            "  -h, --help             this text\n");
}

int cmd_profile(int argc, char **argv) {
    const char *files[256];
    int n_files = 0;
    const char *out = NULL;
    int64_t n_ctx = 4096, n_predict = 0;
    st_engine_args ea = {0};
    st_args a = {argc, argv, 1, "profile", false};
    for (; a.i < argc && !a.failed; a.i++) {
        if (st_args_is(&a, "-h", "--help")) {
            usage(stdout);
            return 0;
        } else if (st_args_is(&a, "-f", "--file")) {
            const char *f = st_args_str(&a);
            if (n_files < 256) files[n_files++] = f;
            else {
                fprintf(stderr, "strata profile: at most 256 prompt files\n");
                return 2;
            }
        } else if (st_args_is(&a, "-o", "--output")) out = st_args_str(&a);
        else if (st_args_is(&a, "-c", "--ctx-size")) n_ctx = st_args_int(&a, 16, 1 << 24);
        else if (st_args_is(&a, "-n", "--n-predict")) n_predict = st_args_int(&a, 0, 1 << 20);
        else if (st_args_is(&a, "-dev", "--device")) {
            const char *d = st_args_str(&a);
            if (strcmp(d, "cpu")) {
                fprintf(stderr, "strata profile: runs on the CPU engine only (got --device %s)\n", d);
                return 2;
            }
        } else if (st_args_engine(&a, &ea)) continue;
        else st_args_unknown(&a);
    }
    if (a.failed || !st_args_have_model(&a, &ea)) return 2;
    if (!n_files || !out) {
        fprintf(stderr, "strata profile: give at least one -f PROMPT_FILE and -o PROFILE.json (see --help)\n");
        return 2;
    }
    ea.device = "cpu";
    strata_engine *e = st_args_load_engine(&a, &ea);
    if (!e) return 1;
    const st_model *m = strata_engine_model(e);
    st_profile prof;
    memset(&prof, 0, sizeof prof);
    st_pool *pool = NULL;
    st_session *s = NULL;
    uint32_t *counts = NULL;
    float *logits = NULL;
    int32_t *toks = NULL;
    char *text = NULL;
    int rc = 1;
    if (st_profile_init(&prof, m)) goto fail;
    // The session is made here (not through strata.h) so its router can count into route_counts.
    pool = st_pool_create((int)ea.n_threads);
    s = pool ? st_session_new(m, pool, n_ctx, !ea.kv_f32) : NULL;
    counts = calloc((uint64_t)m->hp.n_layer * m->hp.n_expert, sizeof *counts);
    logits = malloc(sizeof(float) * m->hp.n_vocab);
    if (!s || !counts || !logits) goto fail;
    s->route_counts = counts;
    double t0 = st_now();
    for (int i = 0; i < n_files; i++) {
        size_t len = 0;
        if (st_read_file(files[i], 1ull << 30, &text, &len)) goto fail;
        int32_t cap = (int32_t)(len + 16);
        free(toks);
        toks = malloc(sizeof(int32_t) * (size_t)cap);
        int32_t n = toks ? strata_tokenize(e, text, len, true, true, toks, cap) : -1;
        free(text);
        text = NULL;
        if (n < 0) {
            st_err("%s: cannot tokenize: %s", files[i], strata_last_error());
            goto fail;
        }
        int64_t room = n_ctx - n_predict;
        if (room < 1) {
            st_err("the context (%" PRId64 ") leaves no room for a prompt after -n %" PRId64, n_ctx, n_predict);
            goto fail;
        }
        if (n > room) {
            st_warn("%s: %d tokens, cut to %" PRId64 " to fit the context (-c %" PRId64 ")", files[i], n, room, n_ctx);
            n = (int32_t)room;
        }
        st_session_truncate(s, 0);
        if (n > 0 && st_session_eval(s, toks, n, n_predict ? logits : NULL, 0)) goto fail;
        uint64_t evald = (uint64_t)n;
        for (int64_t g = 0; g < n_predict && n > 0; g++) {
            int32_t best = 0;
            for (uint32_t v = 1; v < m->hp.n_vocab; v++)
                if (logits[v] > logits[best]) best = (int32_t)v;
            if (strata_token_is_eog(e, best)) break;
            if (st_session_eval(s, &best, 1, logits, 0)) goto fail;
            evald++;
        }
        st_profile_add(&prof, counts, evald);
        memset(counts, 0, sizeof *counts * (uint64_t)m->hp.n_layer * m->hp.n_expert);
        st_info("%s: %" PRIu64 " tokens", files[i], evald);
    }
    if (st_profile_write(&prof, out, m->path, m->hp.n_expert_used)) goto fail;
    // A short summary: how concentrated routing is (share of selections going to each layer's top 25% experts).
    double top_share = 0;
    uint32_t E = m->hp.n_expert, q = E / 4 ? E / 4 : 1;
    uint64_t *row = malloc(sizeof(uint64_t) * E);
    for (uint32_t l = 0; row && l < m->hp.n_layer; l++) {
        memcpy(row, prof.counts + (uint64_t)l * E, sizeof(uint64_t) * E);
        uint64_t tot = 0, top = 0;
        for (uint32_t k = 0; k < E; k++) tot += row[k];
        for (uint32_t k = 0; k < q; k++) {  // partial selection of the q largest
            uint32_t bi = k;
            for (uint32_t j = k + 1; j < E; j++)
                if (row[j] > row[bi]) bi = j;
            uint64_t t = row[k];
            row[k] = row[bi];
            row[bi] = t;
            top += row[k];
        }
        top_share += tot ? (double)top / (double)tot / m->hp.n_layer : 0;
    }
    free(row);
    printf("wrote %s: %" PRIu64 " tokens over %d prompt file%s in %.1f s; the hottest 25%% of experts take %.1f%% of "
           "selections (uniform: 25%%)\n",
           out, prof.n_tokens, n_files, n_files == 1 ? "" : "s", st_now() - t0, 100 * top_share);
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "strata profile: %s\n", st_errmsg());
done:
    free(text);
    free(toks);
    free(logits);
    free(counts);
    st_session_free(s);
    if (pool) st_pool_destroy(pool);
    st_profile_free(&prof);
    strata_engine_free(e);
    return rc;
}
