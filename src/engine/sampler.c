#include "engine/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"

strata_sampler_params strata_sampler_default_params(void) {
    st_sampler_params p = {0};
    p.temperature = 0.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.0f;
    p.penalty_last_n = 64;
    return p;
}

int st_sampler_init(st_sampler *s, const st_sampler_params *p) {
    memset(s, 0, sizeof *s);
    s->p = *p;
    st_rng_init(&s->rng, p->seed, 0x5A3D1E);
    s->cap = p->penalty_last_n > 0 ? p->penalty_last_n : 0;
    if (s->cap) {
        s->history = malloc(sizeof(int32_t) * (size_t)s->cap);
        if (!s->history) return st_err("sampler: out of memory");
    }
    return 0;
}

void st_sampler_free(st_sampler *s) {
    free(s->history);
    free(s->work_logit);
    free(s->work_id);
    memset(s, 0, sizeof *s);
}

void st_sampler_accept(st_sampler *s, int32_t token) {
    if (!s->cap) return;
    s->history[s->head] = token;
    s->head = (s->head + 1) % s->cap;
    if (s->n_history < s->cap) s->n_history++;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static int cmp_desc(const void *a, const void *b, void *ctx) {
    const float *l = ctx;
    float x = l[*(const int32_t *)a], y = l[*(const int32_t *)b];
    if (x > y) return -1;
    if (x < y) return 1;
    return *(const int32_t *)a - *(const int32_t *)b;  // stable tie-break by id
}

int st_sampler_has_penalties(const st_sampler_params *p) {
    return p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
}

// Penalties touch only tokens in the history window; applied on a private copy of the logits.
static void apply_penalties(st_sampler *s, float *l) {
    const st_sampler_params *p = &s->p;
    if (!s->n_history || !st_sampler_has_penalties(p)) return;
    for (int32_t i = 0; i < s->n_history; i++) {
        int32_t t = s->history[i];
        if (t < 0 || t >= s->n_vocab) continue;
        int count = 0, first = 1;
        for (int32_t j = 0; j < s->n_history; j++) {
            if (s->history[j] != t) continue;
            if (j < i) first = 0;
            count++;
        }
        if (!first) continue;  // each distinct token once
        if (p->repeat_penalty != 1.0f) l[t] = l[t] > 0 ? l[t] / p->repeat_penalty : l[t] * p->repeat_penalty;
        l[t] -= (float)count * p->frequency_penalty + p->presence_penalty;
    }
}

int32_t st_sampler_sample(st_sampler *s, const float *logits, int32_t n_vocab) {
    if (n_vocab <= 0) return st_err("sampler: empty vocabulary"), -1;
    if (s->n_vocab != n_vocab) {
        free(s->work_logit);
        free(s->work_id);
        s->work_logit = malloc(sizeof(float) * (size_t)n_vocab);
        s->work_id = malloc(sizeof(int32_t) * (size_t)n_vocab);
        if (!s->work_logit || !s->work_id) return st_err("sampler: out of memory"), -1;
        s->n_vocab = n_vocab;
    }
    float *l = s->work_logit;
    memcpy(l, logits, sizeof(float) * (size_t)n_vocab);
    apply_penalties(s, l);
    const st_sampler_params *p = &s->p;
    if (p->temperature <= 0.0f) return argmax(l, n_vocab);

    // Candidates: tokens within 30 nats (times the temperature, if above 1) of the best: the rest have relative
    // probability < 1e-13 and cannot matter to top-p, min-p or the draw), sorted by logit; top-k then truncates the sorted list.
    int32_t *id = s->work_id;
    float maxl = l[argmax(l, n_vocab)];
    float cutoff = 30.0f * (p->temperature > 1.0f ? p->temperature : 1.0f);
    int32_t n = 0;
    for (int32_t i = 0; i < n_vocab; i++)
        if (l[i] >= maxl - cutoff) id[n++] = i;
    qsort_r(id, (size_t)n, sizeof *id, cmp_desc, l);
    if (p->top_k > 0 && p->top_k < n) n = p->top_k;

    // Softmax over the candidates at temperature 1 for top-p / min-p (as llama.cpp applies them before temp).
    double sum = 0;
    float *prob = malloc(sizeof(float) * (size_t)n);
    if (!prob) return st_err("sampler: out of memory"), -1;
    for (int32_t i = 0; i < n; i++) sum += (prob[i] = expf(l[id[i]] - maxl));
    for (int32_t i = 0; i < n; i++) prob[i] = (float)(prob[i] / sum);
    if (p->top_p < 1.0f) {
        double cum = 0;
        for (int32_t i = 0; i < n; i++) {
            cum += prob[i];
            if (cum >= p->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    if (p->min_p > 0.0f) {
        float floor_p = prob[0] * p->min_p;
        int32_t keep = 1;
        while (keep < n && prob[keep] >= floor_p) keep++;
        n = keep;
    }
    free(prob);

    // Temperature, then draw.
    double total = 0;
    float *w = malloc(sizeof(float) * (size_t)n);
    if (!w) return st_err("sampler: out of memory"), -1;
    for (int32_t i = 0; i < n; i++) total += (w[i] = expf((l[id[i]] - maxl) / p->temperature));
    double r = (double)st_rng_f32(&s->rng) * total;
    int32_t pick = id[n - 1];
    for (int32_t i = 0; i < n; i++) {
        r -= w[i];
        if (r < 0) {
            pick = id[i];
            break;
        }
    }
    free(w);
    return pick;
}
