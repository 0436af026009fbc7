// STRATA_ROUTE_PREDICT: next-layer routing prediction quality on the CPU engine's decode (see route_predict.h).
// Recall = |predicted set ∩ actual top-k| / k, summed over one-token steps and the layers 1..n_layer-1 (layer 0 has
// no earlier layer to predict it from). Prediction sets are the top-k, top-(k+4) and top-2k of the predictor's
// router probabilities: a wider prefetch set trades PCIe bytes for recall. One more row scores the prediction two
// layers ahead (layer l+1's router on layer l-1's MoE input), over layers 2..n-1 (the GPU's prefetch two layers
// ahead measured slower: docs/experiments/2026-12-03g-pf-ahead2.patch).
// STRATA_ROUTE_TRACE=FILE (with STRATA_ROUTE_PREDICT) appends, per one-token step and layer 1..n-1, the experts the
// layer chose and predictor (a)'s ranking of them, deeper than any prefetch set: the input of bench/cache_sim.py,
// which replays VRAM cache and prefetch policies offline (docs/HYBRID.md).
#include "engine/route_predict.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/matmul.h"
#include "cpu/ops.h"
#include "engine/session.h"
#include "util/log.h"

// The predictors, in the order of the table: three router inputs available during layer l, and the experts most
// often chosen at l+1 so far (prompt and decode; what a frequency-driven cache would hold, the fair baseline when
// routing is skewed, where k/E understates a guess).
enum { CAND_A, CAND_B, CAND_C, CAND_HOT, N_CAND };
enum { N_WIDTH = 3 };  // prediction set sizes k, k + 4, 2k (capped at E)

static const char *const cand_name[N_CAND] = {
    "(a) xn of layer l (after attn, ffn_norm[l])",
    "(b) x after attn of l, ffn_norm[l+1]",
    "(c) x at end of l, ffn_norm[l+1] (no attn l+1)",
    "hottest experts of l+1 so far (counts)",
};

struct st_route_pred {
    const st_model *m;
    int per_layer;           // STRATA_ROUTE_PREDICT=2: a row per layer as well
    int64_t d, E, K, W;      // n_embd, experts, top-k, widest prediction set (2k, at most E)
    int64_t width[N_WIDTH];  // k, k + 4, 2k (each at most E)
    float *xn, *prob, *wt;   // [d] normed predictor input, [E] router probabilities, [W] (unused weights)
    // Predictions for layer t live in slot t & 1: during layer l, (a)/(b) for l+1 are written before l's own
    // predictions (made during l-1) are scored after its MoE.
    int32_t *pred;           // [2][N_CAND][W], each row in descending probability
    int64_t pred_for[2];     // the layer a slot's predictions are for; -1: none
    // Two layers ahead: layer t's prediction, made during layer t-2, in slot t % 3 (during layer l the one for l+2
    // is written while those for l and l+1 wait for their scoring).
    int32_t *pred2;          // [3][W]
    int64_t pred2_for[3];    // as pred_for
    uint64_t *hits2;         // [n_layer][N_WIDTH] |prediction ∩ actual| summed
    uint64_t *n_pred2;       // [n_layer] steps scored
    uint32_t *counts;        // [n_layer][E] times each expert was chosen (every token of every chunk)
    int32_t *hist;           // [n_layer][2][K] experts chosen by the last two tokens (row 0 the newest)
    int32_t *uni;            // [2K] the union of hist's two rows
    int *n_hist;             // [n_layer] valid rows of hist (0..2)
    // Why a predictor works: the cosine between the MoE inputs of consecutive layers (same token), and of
    // consecutive tokens (same layer). Router logits are linear in them.
    float *xn_prev_layer;    // [d] this step's MoE input of the layer before
    int64_t xn_prev_for;     // the layer xn_prev_layer belongs to; -1: none
    float *xn_prev_tok;      // [n_layer][d] the previous token's MoE input per layer
    uint8_t *has_prev_tok;   // [n_layer]
    double *cos_layer, *cos_tok;  // [n_layer] sums
    uint64_t *hits;          // [n_layer][N_CAND][N_WIDTH] |prediction ∩ actual| summed
    uint64_t *t_hits;        // [n_layer][2] same for the previous token's k, the union of the previous two
    uint64_t *t_size;        // [n_layer] size of the union of the previous two tokens' experts, summed
    uint64_t *n_pred;        // [n_layer] steps scored for the predictors (and cos_layer)
    uint64_t *n_temp;        // [n_layer] steps scored for the previous-token baselines (and cos_tok)
    FILE *trace;             // STRATA_ROUTE_TRACE: lines "layer | K chosen | R ranked by (a)"; NULL: off
    int64_t R;               // depth of the traced ranking (min(E, ROUTE_TRACE_DEPTH))
    int32_t *trace_pred;     // [2][R] (a)'s ranking for layer t in slot t & 1 (as pred)
    float *trace_wt;         // [R] (unused weights)
    int ready;               // every buffer allocated (else free prints nothing)
};

#define ROUTE_TRACE_DEPTH 64

st_route_pred *st_route_pred_new(const st_model *m) {
    const char *env = getenv("STRATA_ROUTE_PREDICT");
    if (!env || !*env || !strcmp(env, "0") || !m->hp.n_expert || m->hp.n_layer < 2) return NULL;
    const st_hparams *hp = &m->hp;
    st_route_pred *rp = calloc(1, sizeof *rp);
    if (!rp) return st_warn("STRATA_ROUTE_PREDICT: out of memory"), NULL;
    rp->m = m;
    rp->per_layer = atoi(env) >= 2;
    rp->d = hp->n_embd;
    rp->E = hp->n_expert;
    rp->K = hp->n_expert_used;
    rp->W = 2 * rp->K < rp->E ? 2 * rp->K : rp->E;
    int64_t w[N_WIDTH] = {rp->K, rp->K + 4, 2 * rp->K};
    for (int i = 0; i < N_WIDTH; i++) rp->width[i] = w[i] < rp->E ? w[i] : rp->E;
    size_t nl = hp->n_layer, d = (size_t)rp->d, E = (size_t)rp->E, K = (size_t)rp->K;
    rp->xn = malloc(sizeof(float) * d);
    rp->prob = malloc(sizeof(float) * E);
    rp->wt = malloc(sizeof(float) * (size_t)rp->W);
    rp->pred = malloc(sizeof(int32_t) * 2 * N_CAND * (size_t)rp->W);
    rp->pred2 = malloc(sizeof(int32_t) * 3 * (size_t)rp->W);
    rp->hits2 = calloc(nl * N_WIDTH, sizeof(uint64_t));
    rp->n_pred2 = calloc(nl, sizeof(uint64_t));
    rp->counts = calloc(nl * E, sizeof(uint32_t));
    rp->hist = malloc(sizeof(int32_t) * nl * 2 * K);
    rp->uni = malloc(sizeof(int32_t) * 2 * K);
    rp->n_hist = calloc(nl, sizeof(int));
    rp->xn_prev_layer = malloc(sizeof(float) * d);
    rp->xn_prev_tok = malloc(sizeof(float) * nl * d);
    rp->has_prev_tok = calloc(nl, 1);
    rp->cos_layer = calloc(nl, sizeof(double));
    rp->cos_tok = calloc(nl, sizeof(double));
    rp->hits = calloc(nl * N_CAND * N_WIDTH, sizeof(uint64_t));
    rp->t_hits = calloc(nl * 2, sizeof(uint64_t));
    rp->t_size = calloc(nl, sizeof(uint64_t));
    rp->n_pred = calloc(nl, sizeof(uint64_t));
    rp->n_temp = calloc(nl, sizeof(uint64_t));
    rp->pred_for[0] = rp->pred_for[1] = rp->xn_prev_for = -1;
    rp->pred2_for[0] = rp->pred2_for[1] = rp->pred2_for[2] = -1;
    if (!rp->xn || !rp->prob || !rp->wt || !rp->pred || !rp->pred2 || !rp->hits2 || !rp->n_pred2 || !rp->counts ||
        !rp->hist || !rp->uni || !rp->n_hist ||
        !rp->xn_prev_layer || !rp->xn_prev_tok || !rp->has_prev_tok || !rp->cos_layer || !rp->cos_tok || !rp->hits ||
        !rp->t_hits || !rp->t_size || !rp->n_pred || !rp->n_temp) {
        st_route_pred_free(rp);
        return st_warn("STRATA_ROUTE_PREDICT: out of memory"), NULL;
    }
    const char *tr = getenv("STRATA_ROUTE_TRACE");
    if (tr && *tr) {
        rp->R = rp->E < ROUTE_TRACE_DEPTH ? rp->E : ROUTE_TRACE_DEPTH;
        rp->trace_pred = malloc(sizeof(int32_t) * 2 * (size_t)rp->R);
        rp->trace_wt = malloc(sizeof(float) * (size_t)rp->R);
        rp->trace = rp->trace_pred && rp->trace_wt ? fopen(tr, "a") : NULL;
        if (!rp->trace) st_warn("STRATA_ROUTE_TRACE: cannot write '%s' (or out of memory): no trace", tr);
        else fprintf(rp->trace, "# session: layers %u, experts %lld, top-%lld, ranking depth %lld\n",
                     hp->n_layer, (long long)rp->E, (long long)rp->K, (long long)rp->R);
    }
    rp->ready = 1;
    return rp;
}

// Layer `next`'s router on x normalised with `norm`, softmax, the W most probable experts (the engine's own
// selection, st_route_topk, so a predictor fed layer next's real input reproduces its choice exactly); with
// trace_out, also the R most probable into it.
static void predict(st_route_pred *rp, st_session *s, const float *x, const float *norm, uint32_t next,
                    int32_t *out, int32_t *trace_out) {
    const st_hparams *hp = &rp->m->hp;
    const st_weight *r = &rp->m->layers[next].router;
    st_rmsnorm(rp->xn, x, norm, rp->d, hp->rms_eps);
    if (st_cpu_matmul_rows(s->pool, r->type, r->data, r->ne[0], 0, rp->E, rp->xn, 1, rp->prob, rp->E,
                           &s->mm_scratch, 0)) {
        st_warn("STRATA_ROUTE_PREDICT: router matmul failed: %s", st_errmsg());
        memset(out, 0xff, sizeof(int32_t) * (size_t)rp->W);  // -1: predicts nothing
        if (trace_out) memset(trace_out, 0xff, sizeof(int32_t) * (size_t)rp->R);
        return;
    }
    st_softmax(rp->prob, rp->E);
    if (trace_out) st_route_topk(rp->prob, rp->E, rp->R, 0, trace_out, rp->trace_wt);
    st_route_topk(rp->prob, rp->E, rp->W, 0, out, rp->wt);
}

static int64_t count_hits(const int32_t *set, int64_t n, const int32_t *actual, int64_t K) {
    int64_t h = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; k < K; k++) h += set[i] == actual[k];
    return h;
}

static double cosine(const float *a, const float *b, int64_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (int64_t i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0;
}

void st_route_pred_after_attn(st_route_pred *rp, st_session *s, uint32_t layer, int64_t n) {
    const st_model *m = rp->m;
    const float *xn = s->xn + (n - 1) * rp->d;  // the chunk's last token's MoE input
    if (n == 1) {
        if (rp->xn_prev_for == (int64_t)layer - 1) rp->cos_layer[layer] += cosine(xn, rp->xn_prev_layer, rp->d);
        if (rp->has_prev_tok[layer]) rp->cos_tok[layer] += cosine(xn, rp->xn_prev_tok + layer * rp->d, rp->d);
        memcpy(rp->xn_prev_layer, xn, sizeof(float) * (size_t)rp->d);
        rp->xn_prev_for = layer;
    }
    memcpy(rp->xn_prev_tok + layer * rp->d, xn, sizeof(float) * (size_t)rp->d);
    rp->has_prev_tok[layer] = 1;
    if (n != 1 || layer + 1 >= m->hp.n_layer) return;
    int slot = (layer + 1) & 1;
    int32_t *p = rp->pred + (size_t)slot * N_CAND * rp->W;
    // (a) is exactly layer l's router input: on the GPU it costs one more router matvec and no extra norm
    predict(rp, s, s->x, m->layers[layer].ffn_norm, layer + 1, p + CAND_A * rp->W,
            rp->trace ? rp->trace_pred + (size_t)slot * rp->R : NULL);
    predict(rp, s, s->x, m->layers[layer + 1].ffn_norm, layer + 1, p + CAND_B * rp->W, NULL);
    rp->pred_for[slot] = layer + 1;
    if (layer + 2 < m->hp.n_layer) {  // (a)'s input, two layers ahead
        const int s2 = (int)((layer + 2) % 3);
        predict(rp, s, s->x, m->layers[layer].ffn_norm, layer + 2, rp->pred2 + (size_t)s2 * rp->W, NULL);
        rp->pred2_for[s2] = layer + 2;
    }
}

void st_route_pred_after_moe(st_route_pred *rp, st_session *s, uint32_t layer, int64_t n) {
    const st_model *m = rp->m;
    int64_t K = rp->K;
    const int32_t *actual = s->sel_expert + (n - 1) * K;  // the chunk's last token
    uint32_t *cnt = rp->counts + (size_t)layer * rp->E;
    int slot = layer & 1;
    bool ranked = false;  // (a)'s prediction for this layer was scored (every layer but 0)
    if (n == 1 && rp->pred_for[slot] == (int64_t)layer) {
        int32_t *p = rp->pred + (size_t)slot * N_CAND * rp->W;
        for (int64_t e = 0; e < rp->E; e++) rp->prob[e] = (float)cnt[e];  // counts before this token
        st_route_topk(rp->prob, rp->E, rp->W, 0, p + CAND_HOT * rp->W, rp->wt);
        uint64_t *h = rp->hits + (size_t)layer * N_CAND * N_WIDTH;
        for (int c = 0; c < N_CAND; c++)
            for (int w = 0; w < N_WIDTH; w++) h[c * N_WIDTH + w] += count_hits(p + c * rp->W, rp->width[w], actual, K);
        rp->n_pred[layer]++;
        rp->pred_for[slot] = -1;
        ranked = true;
    }
    if (rp->trace && n == 1) {  // layer 0 without a ranking (nothing runs before it to predict it)
        fprintf(rp->trace, "%u |", layer);
        for (int64_t k = 0; k < K; k++) fprintf(rp->trace, " %d", actual[k]);
        fputs(" |", rp->trace);
        const int32_t *tp = rp->trace_pred + (size_t)slot * rp->R;
        for (int64_t r = 0; ranked && r < rp->R; r++) fprintf(rp->trace, " %d", tp[r]);
        fputc('\n', rp->trace);
    }
    const int s2 = (int)(layer % 3);
    if (n == 1 && rp->pred2_for[s2] == (int64_t)layer) {
        const int32_t *p2 = rp->pred2 + (size_t)s2 * rp->W;
        uint64_t *h2 = rp->hits2 + (size_t)layer * N_WIDTH;
        for (int w = 0; w < N_WIDTH; w++) h2[w] += count_hits(p2, rp->width[w], actual, K);
        rp->n_pred2[layer]++;
        rp->pred2_for[s2] = -1;
    }
    int32_t *hist = rp->hist + (size_t)layer * 2 * K;
    if (n == 1 && rp->n_hist[layer] >= 1) {
        rp->t_hits[layer * 2] += count_hits(hist, K, actual, K);
        // union of the previous two tokens' experts (up to 2k): the temporal analogue of a 2k prefetch set
        int32_t *u = rp->uni;
        int64_t nu = 0, rows = rp->n_hist[layer];
        for (int64_t i = 0; i < rows * K; i++) {
            int dup = 0;
            for (int64_t j = 0; j < nu; j++) dup |= u[j] == hist[i];
            if (!dup) u[nu++] = hist[i];
        }
        rp->t_hits[layer * 2 + 1] += count_hits(u, nu, actual, K);
        rp->t_size[layer] += (uint64_t)nu;
        rp->n_temp[layer]++;
    }
    // counts and history from every chunk, so the first decode step compares with the prompt
    for (int64_t i = 0; i < n * K; i++) cnt[s->sel_expert[i]]++;
    for (int64_t t = n >= 2 ? n - 2 : 0; t < n; t++) {
        memcpy(hist + K, hist, sizeof(int32_t) * (size_t)K);
        memcpy(hist, s->sel_expert + t * K, sizeof(int32_t) * (size_t)K);
        if (rp->n_hist[layer] < 2) rp->n_hist[layer]++;
    }
    if (n == 1 && layer + 1 < m->hp.n_layer) {
        int32_t *p = rp->pred + (size_t)((layer + 1) & 1) * N_CAND * rp->W;
        predict(rp, s, s->x, m->layers[layer + 1].ffn_norm, layer + 1, p + CAND_C * rp->W, NULL);
    }
}

static void print_row(const char *name, const uint64_t *hits, int n, uint64_t trials, const char *note) {
    fprintf(stderr, "  %-48s", name);
    for (int i = 0; i < n; i++)
        if (trials) fprintf(stderr, "  %6.3f", (double)hits[i] / (double)trials);
        else fprintf(stderr, "  %6s", "-");
    fprintf(stderr, "%s\n", note);
}

static void report(const st_route_pred *rp) {
    uint32_t L = rp->m->hp.n_layer;
    uint64_t steps = 0, tsteps = 0, h[N_CAND * N_WIDTH] = {0}, th[2] = {0}, tsize = 0, steps2 = 0, h2[N_WIDTH] = {0};
    double cl = 0, ct = 0;
    for (uint32_t l = 1; l < L; l++) {
        steps += rp->n_pred[l];
        tsteps += rp->n_temp[l];
        steps2 += rp->n_pred2[l];
        for (int i = 0; i < N_WIDTH; i++) h2[i] += rp->hits2[l * N_WIDTH + i];
        for (int i = 0; i < N_CAND * N_WIDTH; i++) h[i] += rp->hits[l * N_CAND * N_WIDTH + i];
        th[0] += rp->t_hits[l * 2];
        th[1] += rp->t_hits[l * 2 + 1];
        tsize += rp->t_size[l];
        cl += rp->cos_layer[l];
        ct += rp->cos_tok[l];
    }
    if (!steps) return;
    char w[N_WIDTH][16];
    for (int i = 0; i < N_WIDTH; i++) snprintf(w[i], sizeof w[i], "top-%lld", (long long)rp->width[i]);
    fprintf(stderr,
            "route prediction (STRATA_ROUTE_PREDICT): recall of layer l+1's top-%lld (E %lld) predicted during layer"
            " l, %llu (step, layer) pairs, layers 1..%u\n  %-48s  %6s  %6s  %6s\n",
            (long long)rp->K, (long long)rp->E, (unsigned long long)steps, L - 1, "predictor of layer l+1", w[0], w[1],
            w[2]);
    uint64_t kt = steps * (uint64_t)rp->K, ktt = tsteps * (uint64_t)rp->K;
    for (int c = 0; c < N_CAND; c++) print_row(cand_name[c], h + c * N_WIDTH, N_WIDTH, kt, "");
    char note2[64];
    snprintf(note2, sizeof note2, "   (layers 2..%u)", L - 1);
    print_row("(d) two ahead: (a) of layer l-1, router l+1", h2, N_WIDTH, steps2 * (uint64_t)rp->K, note2);
    fprintf(stderr, "  %-48s", "random guess (k'/E)");
    for (int i = 0; i < N_WIDTH; i++) fprintf(stderr, "  %6.3f", (double)rp->width[i] / (double)rp->E);
    fputc('\n', stderr);
    char note[64];
    snprintf(note, sizeof note, "   (a set of %.1f)", tsteps ? (double)tsize / (double)tsteps : 0.0);
    print_row("previous token's k experts at l+1", th, 1, ktt, "");
    print_row("previous two tokens' experts at l+1 (union)", th + 1, 1, ktt, note);
    fprintf(stderr, "  cosine of MoE inputs: layer l vs l+1 %.3f, previous token vs this one (same layer) %.3f\n",
            cl / (double)steps, tsteps ? ct / (double)tsteps : 0.0);
    if (!rp->per_layer) return;
    fprintf(stderr, "  per layer, top-%lld recall:  layer  steps     (a)     (b)     (c)     hot   prev1  cos l-1  cos tok"
            "\n", (long long)rp->K);
    for (uint32_t l = 1; l < L; l++) {
        const uint64_t *hl = rp->hits + l * N_CAND * N_WIDTH;
        double n = (double)rp->n_pred[l], nt = (double)rp->n_temp[l];
        if (!rp->n_pred[l]) continue;
        fprintf(stderr, "  %27u  %6llu", l, (unsigned long long)rp->n_pred[l]);
        for (int c = 0; c < N_CAND; c++) fprintf(stderr, "  %6.3f", (double)hl[c * N_WIDTH] / (n * (double)rp->K));
        fprintf(stderr, "  %6.3f  %7.3f  %7.3f\n", nt > 0 ? (double)rp->t_hits[l * 2] / (nt * (double)rp->K) : 0.0,
                rp->cos_layer[l] / n, nt > 0 ? rp->cos_tok[l] / nt : 0.0);
    }
}

void st_route_pred_free(st_route_pred *rp) {
    if (!rp) return;
    if (rp->ready) report(rp);
    if (rp->trace) fclose(rp->trace);
    free(rp->trace_pred);
    free(rp->trace_wt);
    free(rp->xn);
    free(rp->prob);
    free(rp->wt);
    free(rp->pred);
    free(rp->pred2);
    free(rp->hits2);
    free(rp->n_pred2);
    free(rp->counts);
    free(rp->hist);
    free(rp->uni);
    free(rp->n_hist);
    free(rp->xn_prev_layer);
    free(rp->xn_prev_tok);
    free(rp->has_prev_tok);
    free(rp->cos_layer);
    free(rp->cos_tok);
    free(rp->hits);
    free(rp->t_hits);
    free(rp->t_size);
    free(rp->n_pred);
    free(rp->n_temp);
    free(rp);
}
