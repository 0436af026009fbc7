// Session snapshots (the prompt-prefix cache's checkpoints): a session restored from a snapshot of prefix A, after
// having evaluated something else, must continue exactly like a session that only ever saw A.
//   usage: test_snapshot MODEL.gguf [cpu|cuda]
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "engine_test.h"
#include "strata.h"

static int tokenize(strata_engine *e, const char *text, int32_t *out, int cap) {
    return strata_tokenize(e, text, strlen(text), true, true, out, cap);
}

int main(int argc, char **argv) {
    strata_engine_params ep = strata_engine_default_params();
    ep.n_threads = 2;
    strata_engine *e = test_engine_open(argc, argv, "test_snapshot MODEL.gguf [cpu|cuda]", &ep);
    if (!e) return 1;
    int32_t a[256], b[256], next[4];
    int na = tokenize(e, "<|im_start|>system\nYou are a careful assistant who answers briefly.<|im_end|>\n<|im_start|>user\nName three rivers in Europe.<|im_end|>\n", a, 256);
    int nb = tokenize(e, "A completely different conversation about cooking pasta and tomato sauce.", b, 256);
    int nn = tokenize(e, "<|im_start|>assistant\n", next, 4);
    int32_t nv = strata_n_vocab(e);
    float *ref = malloc(sizeof(float) * (size_t)nv), *got = malloc(sizeof(float) * (size_t)nv);
    strata_session_params sp = strata_session_default_params();
    sp.n_ctx = 512;
    strata_session *s1 = strata_session_new(e, &sp), *s2 = strata_session_new(e, &sp);
    CHECK(s1 && s2, "sessions: %s", strata_last_error());
    // Reference: A then the continuation.
    CHECK(strata_session_eval(s1, a, na, NULL, false) == 0, "eval A");
    CHECK(strata_session_eval(s1, next, nn, ref, false) == 0, "eval next");
    // Snapshot A, wander off to B, restore A, continue.
    CHECK(strata_session_eval(s2, a, na, NULL, false) == 0, "eval A (2)");
    strata_snapshot *snap = strata_session_snapshot(s2, na);
    CHECK(snap != NULL, "snapshot: %s", strata_last_error());
    strata_session_truncate(s2, 0);
    CHECK(strata_session_eval(s2, b, nb, NULL, false) == 0, "eval B");
    CHECK(snap && strata_session_restore(s2, snap) == 0, "restore: %s", strata_last_error());
    CHECK(strata_session_n_past(s2) == na, "n_past after restore %d, want %d", strata_session_n_past(s2), na);
    CHECK(memcmp(strata_session_tokens(s2), a, sizeof(int32_t) * (size_t)na) == 0, "tokens after restore");
    CHECK(strata_session_eval(s2, next, nn, got, false) == 0, "eval next (2)");
    double md = 0;
    for (int32_t i = 0; i < nv; i++) md = fmax(md, fabs((double)got[i] - ref[i]));
    CHECK(md == 0.0, "logits after restore differ from the reference by %g", md);
    // A prefix restore keeps only the first part.
    CHECK(snap && strata_session_restore_prefix(s2, snap, na / 2) == 0, "restore_prefix");
    CHECK(strata_session_n_past(s2) == na / 2, "n_past after prefix restore");
    // Errors: more tokens than the snapshot holds.
    CHECK(snap && strata_session_restore_prefix(s2, snap, na + 1) != 0, "restore of too many tokens accepted");
    strata_snapshot_free(snap);
    strata_session_free(s1);
    strata_session_free(s2);
    strata_engine_free(e);
    free(ref);
    free(got);
    printf("test_snapshot (%s): %s\n", ep.device, failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
