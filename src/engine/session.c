// The CPU forward pass of llama / qwen3 / qwen3moe over a chunk of tokens, and the session's KV cache.
#include "engine/session.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/matmul.h"
#include "cpu/ops.h"
#include "engine/actdump.h"
#include "engine/route_predict.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/log.h"

#define MAX_BATCH_DEFAULT 256

static void *xalloc(size_t n, int *fail) {
    void *p = calloc(1, n ? n : 1);
    if (!p) *fail = 1;
    return p;
}

st_session *st_session_new(const st_model *m, st_pool *pool, int64_t n_ctx, int kv_f16) {
    const st_hparams *hp = &m->hp;
    if (n_ctx <= 0) n_ctx = hp->n_ctx_train ? hp->n_ctx_train : 4096;
    st_session *s = calloc(1, sizeof *s);
    if (!s) return st_err("out of memory"), NULL;
    s->model = m;
    s->pool = pool;
    s->n_ctx = n_ctx;
    s->kv_f16 = kv_f16;
    s->max_batch = MAX_BATCH_DEFAULT;
    int fail = 0;
    size_t el = kv_f16 ? 2 : 4, B = (size_t)s->max_batch;
    size_t kdim = (size_t)hp->n_head_kv * hp->head_dim_k, vdim = (size_t)hp->n_head_kv * hp->head_dim_v;
    s->k_cache = xalloc(sizeof(void *) * hp->n_layer, &fail);
    s->v_cache = xalloc(sizeof(void *) * hp->n_layer, &fail);
    for (uint32_t l = 0; l < hp->n_layer && !fail; l++) {
        s->k_cache[l] = xalloc((size_t)n_ctx * kdim * el, &fail);
        s->v_cache[l] = xalloc((size_t)n_ctx * vdim * el, &fail);
    }
    size_t ff = hp->n_ff > hp->n_ff_exp ? hp->n_ff : hp->n_ff_exp;
    size_t ku = hp->n_expert_used ? hp->n_expert_used : 1;
    s->tokens = xalloc(sizeof(int32_t) * (size_t)n_ctx, &fail);
    s->x = xalloc(sizeof(float) * B * hp->n_embd, &fail);
    s->xn = xalloc(sizeof(float) * B * hp->n_embd, &fail);
    s->q = xalloc(sizeof(float) * B * hp->n_head * hp->head_dim_k, &fail);
    s->k = xalloc(sizeof(float) * B * kdim, &fail);
    s->v = xalloc(sizeof(float) * B * vdim, &fail);
    s->attn = xalloc(sizeof(float) * B * hp->n_head * hp->head_dim_v, &fail);
    s->ffn_a = xalloc(sizeof(float) * B * ff, &fail);
    s->ffn_b = xalloc(sizeof(float) * B * ff, &fail);
    s->ffn_out = xalloc(sizeof(float) * B * hp->n_embd, &fail);
    s->router = xalloc(sizeof(float) * B * (hp->n_expert ? hp->n_expert : 1), &fail);
    s->sel_expert = xalloc(sizeof(int32_t) * B * ku, &fail);
    s->sel_weight = xalloc(sizeof(float) * B * ku, &fail);
    s->group_tok = xalloc(sizeof(int32_t) * B * ku, &fail);
    s->gx = xalloc(sizeof(float) * B * hp->n_embd, &fail);
    if (hp->n_expert) s->moe_y = xalloc(sizeof(float) * B * ku * hp->n_embd, &fail);
    s->rope_cs = xalloc(sizeof(float) * (hp->n_rot ? hp->n_rot : 1), &fail);
    s->route_pred = st_route_pred_new(m);  // NULL unless STRATA_ROUTE_PREDICT is set
    s->actdump = st_actdump_open_env("cpu");  // NULL unless STRATA_DUMP_ACT is set
    if (fail) {
        st_session_free(s);
        char a[32];
        st_err("cannot allocate a session of %lld positions (KV cache %s): out of memory", (long long)n_ctx,
               st_fmt_bytes(a, sizeof a, (double)st_hparams_kv_bytes(hp, (uint64_t)n_ctx, (int)el)));
        return NULL;
    }
    return s;
}

void st_session_free(st_session *s) {
    if (!s) return;
    for (uint32_t l = 0; s->k_cache && l < s->model->hp.n_layer; l++) {
        free(s->k_cache[l]);
        free(s->v_cache[l]);
    }
    free(s->k_cache);
    free(s->v_cache);
    free(s->tokens);
    free(s->x);
    free(s->xn);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->attn);
    free(s->ffn_a);
    free(s->ffn_b);
    free(s->ffn_out);
    free(s->router);
    free(s->sel_expert);
    free(s->sel_weight);
    free(s->group_tok);
    free(s->gx);
    free(s->moe_y);
    free(s->rope_cs);
    st_cpu_scratch_free(&s->mm_scratch);
    st_route_pred_free(s->route_pred);  // prints its table first
    st_actdump_close(s->actdump);
    free(s);
}

void st_session_truncate(st_session *s, int64_t n_keep) {
    if (n_keep < s->n_past) s->n_past = n_keep < 0 ? 0 : n_keep;
}

// Y[n][rows] = X[n][ne0] . W^T for a matrix, or for expert `expert` of a 3D stack (expert < 0: plain matrix).
static int matmul(st_session *s, const st_weight *w, int64_t expert, const float *X, int64_t n, float *Y) {
    int64_t rows = w->ne[1];
    const uint8_t *base = w->data + (expert >= 0 ? (size_t)expert * (size_t)rows * w->row_bytes : 0);
    return st_cpu_matmul_rows(s->pool, w->type, base, w->ne[0], 0, rows, X, n, Y, rows, &s->mm_scratch,
                              expert >= 0 ? ST_MM_EXPERT : 0);
}

static void store_kv(st_session *s, int layer, int64_t pos0, int64_t n) {
    const st_hparams *hp = &s->model->hp;
    int64_t kd = (int64_t)hp->n_head_kv * hp->head_dim_k, vd = (int64_t)hp->n_head_kv * hp->head_dim_v;
    if (s->kv_f16) {
        uint16_t *kc = (uint16_t *)s->k_cache[layer] + pos0 * kd, *vc = (uint16_t *)s->v_cache[layer] + pos0 * vd;
        for (int64_t i = 0; i < n * kd; i++) kc[i] = st_f32_to_f16(s->k[i]);
        for (int64_t i = 0; i < n * vd; i++) vc[i] = st_f32_to_f16(s->v[i]);
    } else {
        memcpy((float *)s->k_cache[layer] + pos0 * kd, s->k, sizeof(float) * (size_t)(n * kd));
        memcpy((float *)s->v_cache[layer] + pos0 * vd, s->v, sizeof(float) * (size_t)(n * vd));
    }
}

static int attention_block(st_session *s, const st_layer *L, int layer, int64_t pos0, int64_t n) {
    const st_hparams *hp = &s->model->hp;
    int64_t d = hp->n_embd, hk = hp->head_dim_k;
    for (int64_t t = 0; t < n; t++) st_rmsnorm(s->xn + t * d, s->x + t * d, L->attn_norm, d, hp->rms_eps);
    if (matmul(s, &L->wq, -1, s->xn, n, s->q) || matmul(s, &L->wk, -1, s->xn, n, s->k) ||
        matmul(s, &L->wv, -1, s->xn, n, s->v))
        return -1;
    int neox = hp->rope_type == ST_ROPE_NEOX;
    for (int64_t t = 0; t < n; t++) {
        // qwen3: QK-norm (per head, with its weight) before RoPE, as llama.cpp's graph does
        st_rope_cache(s->rope_cs, hp->n_rot, pos0 + t, hp->rope_freq_base, hp->rope_freq_scale);
        for (uint32_t h = 0; h < hp->n_head; h++) {
            float *qh = s->q + (t * hp->n_head + h) * hk;
            if (L->q_norm) st_rmsnorm(qh, qh, L->q_norm, hk, hp->rms_eps);
            st_rope_apply(qh, s->rope_cs, hp->n_rot, neox);
        }
        for (uint32_t h = 0; h < hp->n_head_kv; h++) {
            float *kh = s->k + (t * hp->n_head_kv + h) * hk;
            if (L->k_norm) st_rmsnorm(kh, kh, L->k_norm, hk, hp->rms_eps);
            st_rope_apply(kh, s->rope_cs, hp->n_rot, neox);
        }
    }
    store_kv(s, layer, pos0, n);
    st_attention(s->pool, s->attn, s->q, s->k_cache[layer], s->v_cache[layer], s->kv_f16, n, pos0, hp->n_head,
                 hp->n_head_kv, hk, 1.0f / sqrtf((float)hk));
    if (matmul(s, &L->wo, -1, s->attn, n, s->ffn_out)) return -1;
    for (int64_t i = 0; i < n * d; i++) s->x[i] += s->ffn_out[i];
    return 0;
}

static int dense_ffn(st_session *s, const st_layer *L, int64_t n) {
    const st_hparams *hp = &s->model->hp;
    if (matmul(s, &L->ffn_gate, -1, s->xn, n, s->ffn_a) || matmul(s, &L->ffn_up, -1, s->xn, n, s->ffn_b)) return -1;
    for (int64_t t = 0; t < n; t++)
        st_swiglu(s->ffn_a + t * hp->n_ff, s->ffn_a + t * hp->n_ff, s->ffn_b + t * hp->n_ff, hp->n_ff);
    if (matmul(s, &L->ffn_down, -1, s->ffn_a, n, s->ffn_out)) return -1;
    return 0;
}

// Router: softmax over experts, then the top-k and their optional renormalisation (qwen3moe), as llama.cpp's graph.
static void route(st_session *s, int64_t n) {
    const st_hparams *hp = &s->model->hp;
    int64_t E = hp->n_expert, K = hp->n_expert_used;
    for (int64_t t = 0; t < n; t++) {
        float *p = s->router + t * E;
        st_softmax(p, E);
        st_route_topk(p, E, K, hp->expert_weights_norm, s->sel_expert + t * K, s->sel_weight + t * K);
    }
}

// MoE FFN with tokens grouped by expert, so each selected expert's weights are read once per chunk. Each output is
// weighted (rounded) and the k outputs of a token are added in rank order, as llama.cpp's graph does.
static int moe_ffn(st_session *s, const st_layer *L, int64_t n) {
    const st_hparams *hp = &s->model->hp;
    int64_t d = hp->n_embd, E = hp->n_expert, K = hp->n_expert_used, F = hp->n_ff_exp;
    if (matmul(s, &L->router, -1, s->xn, n, s->router)) return -1;
    route(s, n);
    if (s->route_counts) {  // routing profile (strata profile)
        uint32_t *rc = s->route_counts + (L - s->model->layers) * E;
        for (int64_t i = 0; i < n * K; i++) rc[s->sel_expert[i]]++;
    }
    for (int32_t e = 0; e < E; e++) {
        int64_t cnt = 0;
        for (int64_t t = 0; t < n; t++)
            for (int64_t k = 0; k < K; k++)
                if (s->sel_expert[t * K + k] == e) s->group_tok[cnt++] = (int32_t)(t * K + k);
        if (!cnt) continue;
        for (int64_t i = 0; i < cnt; i++)
            memcpy(s->gx + i * d, s->xn + (s->group_tok[i] / K) * d, sizeof(float) * (size_t)d);
        if (matmul(s, &L->gate_exps, e, s->gx, cnt, s->ffn_a) || matmul(s, &L->up_exps, e, s->gx, cnt, s->ffn_b))
            return -1;
        for (int64_t i = 0; i < cnt; i++) st_swiglu(s->ffn_a + i * F, s->ffn_a + i * F, s->ffn_b + i * F, F);
        if (matmul(s, &L->down_exps, e, s->ffn_a, cnt, s->gx)) return -1;
        for (int64_t i = 0; i < cnt; i++) {
            float w = s->sel_weight[s->group_tok[i]];
            const float *y = s->gx + i * d;
            float *o = s->moe_y + (int64_t)s->group_tok[i] * d;
            for (int64_t j = 0; j < d; j++) o[j] = y[j] * w;
        }
    }
    for (int64_t t = 0; t < n; t++) {
        float *o = s->ffn_out + t * d;
        memcpy(o, s->moe_y + t * K * d, sizeof(float) * (size_t)d);
        for (int64_t k = 1; k < K; k++) {
            const float *y = s->moe_y + (t * K + k) * d;
            for (int64_t j = 0; j < d; j++) o[j] += y[j];
        }
    }
    return 0;
}

static int eval_chunk(st_session *s, const int32_t *tokens, int64_t n, float *logits, int all_logits) {
    const st_model *m = s->model;
    const st_hparams *hp = &m->hp;
    int64_t d = hp->n_embd, pos0 = s->n_past;
    for (int64_t t = 0; t < n; t++) {
        const uint8_t *row = m->token_embd.data + (size_t)tokens[t] * m->token_embd.row_bytes;
        if (st_dequantize_row(m->token_embd.type, row, s->x + t * d, d)) return -1;
    }
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const st_layer *L = &m->layers[l];
        if (attention_block(s, L, (int)l, pos0, n)) return -1;
        st_actdump_write(s->actdump, (int)l, 'a', pos0, n, d, s->x);
        for (int64_t t = 0; t < n; t++) st_rmsnorm(s->xn + t * d, s->x + t * d, L->ffn_norm, d, hp->rms_eps);
        if (s->route_pred) st_route_pred_after_attn(s->route_pred, s, l, n);
        if (hp->n_expert ? moe_ffn(s, L, n) : dense_ffn(s, L, n)) return -1;
        for (int64_t i = 0; i < n * d; i++) s->x[i] += s->ffn_out[i];
        st_actdump_write(s->actdump, (int)l, 'f', pos0, n, d, s->x);
        if (s->route_pred) st_route_pred_after_moe(s->route_pred, s, l, n);
    }
    if (logits) {
        int64_t first = all_logits ? 0 : n - 1, cnt = n - first;
        for (int64_t t = first; t < n; t++)
            st_rmsnorm(s->xn + (t - first) * d, s->x + t * d, m->output_norm, d, hp->rms_eps);
        if (matmul(s, &m->output, -1, s->xn, cnt, logits)) return -1;
    }
    memcpy(s->tokens + pos0, tokens, sizeof(int32_t) * (size_t)n);
    s->n_past += n;
    return 0;
}

int st_session_eval(st_session *s, const int32_t *tokens, int64_t n, float *logits, int all_logits) {
    const st_hparams *hp = &s->model->hp;
    if (n <= 0) return 0;
    if (st_model_check_batch(s->model, tokens, n, s->n_past, s->n_ctx)) return -1;
    int64_t start = s->n_past;
    for (int64_t off = 0, c; off < n; off += c) {
        c = n - off < s->max_batch ? n - off : s->max_batch;
        // No one-token tail chunk: one-token steps use decode arithmetic (as llama.cpp), batches batch arithmetic,
        // and a prompt's result should not depend on where max_batch happens to cut it.
        if (n - off - c == 1 && c > 2) c--;
        float *out = NULL;
        if (logits) {
            if (all_logits) out = logits + off * (int64_t)hp->n_vocab;
            else if (off + c == n) out = logits;
        }
        if (eval_chunk(s, tokens + off, c, out, all_logits)) {
            s->n_past = start;
            return -1;
        }
    }
    return 0;
}
