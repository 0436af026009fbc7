// The generation API (strata_gen_*) against the plain loop it replaces (eval, host sampler, eval, ...) on fresh
// sessions: greedy tokens, the session's state after an early stop (a step run ahead must not leak into what
// follows), teacher forcing, n_max, a full context, seeded draws at temperature > 0, the host fallback for
// penalties, and one-token steps after all-position logits. On CUDA the default generation is the device-pipelined
// one, so this is its parity test.
//   usage: test_gen MODEL.gguf [cpu|cuda [GPU_MEM_GIB]]   (a budget below the model's size: hybrid placement)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "engine_test.h"
#include "strata.h"


enum { N_GEN = 24, CAP = 512 };

static strata_engine *e;
static int32_t nv;

static strata_session *new_session(int32_t n_ctx) {
    strata_session_params sp = strata_session_default_params();
    sp.n_ctx = n_ctx;
    strata_session *s = strata_session_new(e, &sp);
    CHECK(s, "session: %s", strata_last_error());
    return s;
}

// The reference: eval the prompt, then sample / eval one token at a time on the host. forced (or NULL) replaces
// each evaluated token as strata_gen_params.forced does. Returns the tokens sampled; *logits_out gets the logits
// after evaluating the first `keep` sampled (or forced) tokens of a second pass when keep >= 0.
static int reference(const int32_t *prompt, int n_prompt, int n, const int32_t *forced, strata_sampler *smp,
                     int32_t *out, strata_session *s) {
    float *l = malloc(sizeof(float) * (size_t)nv);
    int got = 0;
    if (strata_session_eval(s, prompt, n_prompt, l, false) == 0)
        for (; got < n; got++) {
            out[got] = strata_sampler_sample(smp, l, nv);
            strata_sampler_accept(smp, out[got]);
            if (got + 1 == n) {
                got++;
                break;
            }
            int32_t in = forced ? forced[got] : out[got];
            if (strata_session_eval(s, &in, 1, l, false)) break;
        }
    free(l);
    return got;
}

// strata_gen over the same prompt; stops after `stop` tokens (<= n_max).
static int generate(strata_session *s, const int32_t *prompt, int n_prompt, int n_max, int stop,
                    const int32_t *forced, strata_sampler *smp, int32_t *out, int *pipelined) {
    strata_gen_params gp = strata_gen_default_params();
    gp.n_max = n_max;
    gp.forced = forced;
    strata_gen *g = strata_gen_begin(s, smp, prompt, n_prompt, &gp);
    CHECK(g, "strata_gen_begin: %s", strata_last_error());
    if (!g) return 0;
    int got = 0;
    for (; got < stop; got++) {
        int32_t t = strata_gen_next(g);
        if (t < 0) break;
        out[got] = t;
    }
    if (pipelined) *pipelined = strata_gen_pipelined(g);
    CHECK(strata_gen_end(g) == 0, "strata_gen_end: %s", strata_last_error());
    return got;
}

static double logit_diff(strata_session *a, strata_session *b, int32_t tok) {
    float *la = malloc(sizeof(float) * (size_t)nv), *lb = malloc(sizeof(float) * (size_t)nv);
    double md = INFINITY;
    if (strata_session_eval(a, &tok, 1, la, false) == 0 && strata_session_eval(b, &tok, 1, lb, false) == 0) {
        md = 0;
        for (int32_t i = 0; i < nv; i++) md = fmax(md, fabs((double)la[i] - lb[i]));
    }
    free(la);
    free(lb);
    return md;
}

static int same_state(strata_session *a, strata_session *b) {
    int n = strata_session_n_past(a);
    return n == strata_session_n_past(b) &&
           memcmp(strata_session_tokens(a), strata_session_tokens(b), sizeof(int32_t) * (size_t)n) == 0;
}

int main(int argc, char **argv) {
    strata_engine_params ep = strata_engine_default_params();
    ep.n_threads = argc > 3 ? 0 : 2;  // (hybrid: the CPU miss workers want every core)
    ep.gpu_mem_gib = argc > 3 ? atof(argv[3]) : 0;
    ep.plan_n_ctx = CAP;
    ep.cpu_misses = false;  // hybrid: every miss read by the GPU, bitwise the all-in-VRAM result whatever the cache
                            // holds, so the two sessions' greedy tokens must agree exactly
    e = test_engine_open(argc, argv, "test_gen MODEL.gguf [cpu|cuda [GPU_MEM_GIB]]", &ep);
    if (!e) return 1;
    nv = strata_n_vocab(e);
    const char *text = "<|im_start|>user\nWrite a short poem about the sea.<|im_end|>\n<|im_start|>assistant\n";
    int32_t prompt[CAP];
    int np = strata_tokenize(e, text, strlen(text), true, true, prompt, CAP);
    CHECK(np > 2, "tokenize: %s", strata_last_error());
    strata_sampler_params greedy = strata_sampler_default_params();
    int32_t ref[N_GEN], got[N_GEN], forced[N_GEN];
    for (int i = 0; i < N_GEN; i++) forced[i] = (int32_t)((i * 7919 + 13) % nv);

    // 1. Greedy: the same tokens and the same session afterwards (prompt + N_GEN - 1 tokens).
    strata_session *sr = new_session(CAP), *sg = new_session(CAP);
    strata_sampler *m1 = strata_sampler_new(&greedy), *m2 = strata_sampler_new(&greedy);
    int nr = reference(prompt, np, N_GEN, NULL, m1, ref, sr);
    int pipelined = 0;
    int ng = generate(sg, prompt, np, N_GEN, N_GEN, NULL, m2, got, &pipelined);
    CHECK(nr == N_GEN && ng == N_GEN, "greedy: %d reference and %d generated tokens, want %d", nr, ng, N_GEN);
    CHECK(memcmp(ref, got, sizeof ref) == 0, "greedy tokens differ from the reference loop");
    CHECK(strata_session_n_past(sg) == np + N_GEN - 1, "greedy: n_past %d, want %d", strata_session_n_past(sg),
          np + N_GEN - 1);
    CHECK(same_state(sr, sg), "greedy: the sessions' tokens differ");
    double md = logit_diff(sr, sg, got[N_GEN - 1]);
    CHECK(md <= 1e-4, "greedy: the next logits differ by %g", md);
    printf("greedy: %d tokens equal to the reference loop (%s), next logits within %g\n", ng,
           pipelined ? "device-pipelined" : "host", md);

    // 2. Early stop after 5 of N_GEN: the step run ahead is dropped; continuing matches the reference.
    strata_session_truncate(sr, 0);
    strata_session_truncate(sg, 0);
    strata_sampler_free(m1), strata_sampler_free(m2);
    m1 = strata_sampler_new(&greedy), m2 = strata_sampler_new(&greedy);
    nr = reference(prompt, np, 5, NULL, m1, ref, sr);
    ng = generate(sg, prompt, np, N_GEN, 5, NULL, m2, got, NULL);
    CHECK(nr == 5 && ng == 5 && memcmp(ref, got, 5 * sizeof(int32_t)) == 0, "early stop: tokens differ");
    CHECK(strata_session_n_past(sg) == np + 4, "early stop: n_past %d, want %d", strata_session_n_past(sg), np + 4);
    CHECK(same_state(sr, sg), "early stop: the sessions' tokens differ");
    md = logit_diff(sr, sg, got[4]);
    CHECK(md <= 1e-4, "early stop: continuing differs by %g", md);

    // 3. Teacher forcing: each step evaluates forced[i]; the samples are the argmax after each forced prefix.
    strata_session_truncate(sr, 0);
    strata_session_truncate(sg, 0);
    nr = reference(prompt, np, N_GEN, forced, m1, ref, sr);
    ng = generate(sg, prompt, np, N_GEN, N_GEN, forced, m2, got, NULL);
    CHECK(nr == N_GEN && ng == N_GEN && memcmp(ref, got, sizeof ref) == 0, "forced: tokens differ");
    CHECK(same_state(sr, sg), "forced: the sessions' tokens differ (they must be the forced ones)");
    CHECK(memcmp(strata_session_tokens(sg) + np, forced, sizeof(int32_t) * (N_GEN - 1)) == 0,
          "forced: the session does not hold the forced tokens");

    // 4. n_max: the call after the last token fails and says why.
    {
        strata_session_truncate(sg, 0);
        strata_gen_params gp = strata_gen_default_params();
        gp.n_max = 3;
        strata_gen *g = strata_gen_begin(sg, m2, prompt, np, &gp);
        int n = 0;
        while (g && strata_gen_next(g) >= 0) n++;
        CHECK(n == 3 && strstr(strata_last_error(), "n_max"), "n_max 3: %d tokens, error '%s'", n,
              strata_last_error());
        CHECK(strata_gen_end(g) == 0 && strata_session_n_past(sg) == np + 2, "n_max: n_past %d, want %d",
              strata_session_n_past(sg), np + 2);
    }

    // 5. A full context: n_ctx = prompt + 3 holds three generated tokens' steps, so four tokens come out.
    {
        strata_session *sc = new_session(np + 3);
        strata_gen_params gp = strata_gen_default_params();
        gp.n_max = N_GEN;
        strata_gen *g = strata_gen_begin(sc, m2, prompt, np, &gp);
        int n = 0;
        while (g && strata_gen_next(g) >= 0) n++;
        CHECK(n == 4 && strstr(strata_last_error(), "context full"), "full context: %d tokens (want 4), error '%s'",
              n, strata_last_error());
        CHECK(strata_gen_end(g) == 0 && strata_session_n_past(sc) == np + 3, "full context: n_past %d, want %d",
              strata_session_n_past(sc), np + 3);
        strata_session_free(sc);
    }

    // 6. Draws at temperature 1.5 (top-k 40): the same seed gives the same tokens, another seed other tokens.
    {
        strata_sampler_params hot = greedy;
        hot.temperature = 1.5f;
        hot.top_k = 40;
        hot.seed = 1234;
        int32_t a[N_GEN], b[N_GEN], c[N_GEN];
        strata_sampler *h1 = strata_sampler_new(&hot), *h2 = strata_sampler_new(&hot);
        hot.seed = 99;
        strata_sampler *h3 = strata_sampler_new(&hot);
        strata_session_truncate(sg, 0);
        int na = generate(sg, prompt, np, N_GEN, N_GEN, NULL, h1, a, NULL);
        strata_session_truncate(sg, 0);
        int nb = generate(sg, prompt, np, N_GEN, N_GEN, NULL, h2, b, NULL);
        strata_session_truncate(sg, 0);
        int nc = generate(sg, prompt, np, N_GEN, N_GEN, NULL, h3, c, NULL);
        CHECK(na == N_GEN && nb == N_GEN && memcmp(a, b, sizeof a) == 0, "seeded draws are not reproducible");
        CHECK(nc == N_GEN && memcmp(a, c, sizeof a) != 0, "two seeds drew the same %d tokens", N_GEN);
        for (int i = 0; i < N_GEN; i++) CHECK(a[i] >= 0 && a[i] < nv, "drawn token %d out of range", a[i]);
        strata_sampler_free(h1), strata_sampler_free(h2), strata_sampler_free(h3);
    }

    // 7. Penalties: the host sampler does them, so generation is not pipelined and equals the reference loop.
    {
        strata_sampler_params pen = greedy;
        pen.repeat_penalty = 1.3f;
        strata_sampler *p1 = strata_sampler_new(&pen), *p2 = strata_sampler_new(&pen);
        strata_session_truncate(sr, 0);
        strata_session_truncate(sg, 0);
        nr = reference(prompt, np, N_GEN, NULL, p1, ref, sr);
        pipelined = -1;
        ng = generate(sg, prompt, np, N_GEN, N_GEN, NULL, p2, got, &pipelined);
        CHECK(pipelined == 0, "penalties: generation must run on the host");
        CHECK(nr == N_GEN && ng == N_GEN && memcmp(ref, got, sizeof ref) == 0, "penalties: tokens differ");
        strata_sampler_free(p1), strata_sampler_free(p2);
    }

    // 8. Bad calls fail with a message and leave the session alone.
    {
        strata_gen_params gp = strata_gen_default_params();
        gp.n_max = 0;
        const int before = strata_session_n_past(sg);
        CHECK(strata_gen_begin(sg, m2, prompt, np, &gp) == NULL && strstr(strata_last_error(), "n_max"),
              "n_max 0 accepted");
        gp.n_max = 4;
        CHECK(strata_gen_begin(sg, m2, prompt, 0, &gp) == NULL, "no tokens to evaluate accepted");
        CHECK(strata_session_n_past(sg) == before, "a refused begin changed the session");
    }

    // 9. All-position logits after one-token steps (on CUDA they ran as a captured graph, and the longer logits
    // buffer replaces the one the graph wrote): the next steps equal a session that took the same tokens with the
    // last position's logits only.
    {
        enum { N_ALL = 40, N_STEP = 4 };
        strata_session *sa = new_session(CAP), *sb = new_session(CAP);
        float *la = malloc(sizeof(float) * (size_t)nv * N_ALL), *lb = malloc(sizeof(float) * (size_t)nv * N_ALL);
        int32_t more[N_ALL];
        for (int i = 0; i < N_ALL; i++) more[i] = (int32_t)((i * 104729 + 7) % nv);
        int rc = strata_session_eval(sa, prompt, np, la, false) | strata_session_eval(sb, prompt, np, lb, false);
        for (int i = 0; i < N_STEP && !rc; i++)
            rc = strata_session_eval(sa, &forced[i], 1, la, false) | strata_session_eval(sb, &forced[i], 1, lb, false);
        rc = rc || strata_session_eval(sa, more, N_ALL, la, true) || strata_session_eval(sb, more, N_ALL, lb, false);
        CHECK(!rc, "all-position logits after decode steps: %s", strata_last_error());
        double worst = 0;
        for (int i = 0; i < N_STEP && !rc; i++) {
            const double d = logit_diff(sa, sb, forced[N_STEP + i]);
            worst = fmax(worst, d);
        }
        CHECK(!rc && worst <= 1e-4, "steps after all-position logits differ by %g", worst);
        free(la), free(lb);
        strata_session_free(sa), strata_session_free(sb);
    }

    strata_sampler_free(m1), strata_sampler_free(m2);
    strata_session_free(sr);
    strata_session_free(sg);
    strata_engine_free(e);
    printf("test_gen (%s): %s\n", ep.device, failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
