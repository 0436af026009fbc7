#include "cpu/ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

void st_rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0;  // double: the sum of squares of a few thousand activations loses bits in float
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / (double)n + eps));
    if (w)
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale * w[i];
    else
        for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
}

void st_rope(float *x, int64_t head_dim, int64_t n_rot, int64_t pos, float freq_base, float freq_scale, int neox) {
    (void)head_dim;
    float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    float theta = (float)pos * freq_scale;
    int64_t half = n_rot / 2;
    for (int64_t i = 0; i < half; i++) {
        float c = cosf(theta), s = sinf(theta);
        int64_t a = neox ? i : 2 * i, b = neox ? i + half : 2 * i + 1;
        float x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
        theta *= theta_scale;
    }
}

void st_swiglu(float *y, const float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float v = g[i];
        y[i] = v / (1.0f + expf(-v)) * u[i];
    }
}

void st_softmax(float *x, int64_t n) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > m) m = x[i];
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (x[i] = expf(x[i] - m));
    float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

typedef struct {
    float *out;
    const float *q;
    const void *k, *v;
    int kv_f16;
    int64_t pos0, n_head, n_head_kv, head_dim;
    float scale;
    float *scratch;      // [n_threads][scores: n_ctx + acc: head_dim]
    int64_t scratch_stride;
} attn_job;

static void attn_task(void *ud, int64_t task, int thread) {
    attn_job *j = ud;
    int64_t t = task / j->n_head, h = task % j->n_head;
    int64_t hd = j->head_dim, kvh = h / (j->n_head / j->n_head_kv);
    int64_t kv_stride = j->n_head_kv * hd;
    int64_t n_pos = j->pos0 + t + 1;
    const float *q = j->q + (t * j->n_head + h) * hd;
    float *scores = j->scratch + (int64_t)thread * j->scratch_stride;
    float *acc = scores + j->scratch_stride - hd;
    for (int64_t p = 0; p < n_pos; p++) {
        int64_t base = p * kv_stride + kvh * hd;
        float dot = 0;
        if (j->kv_f16) {
            const uint16_t *kr = (const uint16_t *)j->k + base;
            for (int64_t i = 0; i < hd; i++) dot += q[i] * st_f16_to_f32(kr[i]);
        } else {
            const float *kr = (const float *)j->k + base;
            for (int64_t i = 0; i < hd; i++) dot += q[i] * kr[i];
        }
        scores[p] = dot * j->scale;
    }
    st_softmax(scores, n_pos);
    memset(acc, 0, sizeof(float) * (size_t)hd);
    for (int64_t p = 0; p < n_pos; p++) {
        int64_t base = p * kv_stride + kvh * hd;
        float w = scores[p];
        if (j->kv_f16) {
            const uint16_t *vr = (const uint16_t *)j->v + base;
            for (int64_t i = 0; i < hd; i++) acc[i] += w * st_f16_to_f32(vr[i]);
        } else {
            const float *vr = (const float *)j->v + base;
            for (int64_t i = 0; i < hd; i++) acc[i] += w * vr[i];
        }
    }
    memcpy(j->out + (t * j->n_head + h) * hd, acc, sizeof(float) * (size_t)hd);
}

void st_attention(st_pool *pool, float *out, const float *q, const void *k, const void *v, int kv_f16, int64_t n_tok,
                  int64_t pos0, int64_t n_head, int64_t n_head_kv, int64_t head_dim, float scale) {
    int nt = st_pool_threads(pool);
    attn_job j = {out, q, k, v, kv_f16, pos0, n_head, n_head_kv, head_dim, scale, NULL, 0};
    j.scratch_stride = pos0 + n_tok + head_dim;
    j.scratch = malloc(sizeof(float) * (size_t)(j.scratch_stride * nt));
    st_pool_run(pool, n_tok * n_head, attn_task, &j);
    free(j.scratch);
}
