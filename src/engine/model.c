#include "engine/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "util/err.h"
#include "util/log.h"

static int bind_weight(const st_model *m, st_weight *w, const char *name) {
    const gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    if (!t) return st_err("%s: tensor '%s' is missing", m->path, name);
    w->data = t->data;
    w->type = t->type;
    memcpy(w->ne, t->ne, sizeof w->ne);
    w->row_bytes = st_row_size(t->type, t->ne[0]);
    w->name = t->name;
    return 0;
}

// Norm gains are tiny; an owned F32 copy lets the kernels assume F32 whatever the file stores.
static int bind_vector(const st_model *m, float **out, const char *name, int64_t n) {
    const gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    if (!t) return st_err("%s: tensor '%s' is missing", m->path, name);
    if (t->ne[0] != n || t->ne[1] != 1)
        return st_err("%s: tensor '%s' has %lld x %lld elements, expected a vector of %lld", m->path, name,
                      (long long)t->ne[0], (long long)t->ne[1], (long long)n);
    *out = malloc(sizeof(float) * (size_t)n);
    if (!*out) return st_err("%s: out of memory", m->path);
    if (st_dequantize_row(t->type, t->data, *out, n) != 0) return st_err_prefix("%s: tensor '%s': ", m->path, name);
    return 0;
}

st_model *st_model_load(const char *path) {
    double t0 = st_now();
    st_model *m = calloc(1, sizeof *m);
    if (!m) return st_err("out of memory"), NULL;
    m->path = strdup(path);
    m->gguf = gguf_open(path);
    if (!m->gguf) goto fail;
    if (st_hparams_from_gguf(m->gguf, &m->hp) != 0) {
        st_err_prefix("%s: ", path);
        goto fail;
    }
    if (st_arch_validate(m->gguf, &m->hp, path, NULL) != 0) goto fail;

    const st_hparams *hp = &m->hp;
    if (bind_weight(m, &m->token_embd, "token_embd.weight") ||
        bind_vector(m, &m->output_norm, "output_norm.weight", hp->n_embd) ||
        bind_weight(m, &m->output, hp->tied_output ? "token_embd.weight" : "output.weight"))
        goto fail;
    m->layers = calloc(hp->n_layer, sizeof *m->layers);
    if (!m->layers) goto fail;
    char name[96];
#define W(field, fmt) (snprintf(name, sizeof name, fmt, i), bind_weight(m, &L->field, name))
#define V(field, fmt, n) (snprintf(name, sizeof name, fmt, i), bind_vector(m, &L->field, name, n))
    for (uint32_t i = 0; i < hp->n_layer; i++) {
        st_layer *L = &m->layers[i];
        if (V(attn_norm, "blk.%u.attn_norm.weight", hp->n_embd) || W(wq, "blk.%u.attn_q.weight") ||
            W(wk, "blk.%u.attn_k.weight") || W(wv, "blk.%u.attn_v.weight") ||
            W(wo, "blk.%u.attn_output.weight") || V(ffn_norm, "blk.%u.ffn_norm.weight", hp->n_embd))
            goto fail;
        if (hp->arch == ST_ARCH_QWEN3 || hp->arch == ST_ARCH_QWEN3MOE) {
            if (V(q_norm, "blk.%u.attn_q_norm.weight", hp->head_dim_k) ||
                V(k_norm, "blk.%u.attn_k_norm.weight", hp->head_dim_k))
                goto fail;
        }
        if (hp->n_expert > 0) {
            if (W(router, "blk.%u.ffn_gate_inp.weight") || W(gate_exps, "blk.%u.ffn_gate_exps.weight") ||
                W(up_exps, "blk.%u.ffn_up_exps.weight") || W(down_exps, "blk.%u.ffn_down_exps.weight"))
                goto fail;
        } else {
            if (W(ffn_gate, "blk.%u.ffn_gate.weight") || W(ffn_up, "blk.%u.ffn_up.weight") ||
                W(ffn_down, "blk.%u.ffn_down.weight"))
                goto fail;
        }
    }
#undef W
#undef V
    char buf[32];
    st_info("loaded %s: %s, %u layers, %s of weights, %.2f s", path, st_arch_name(hp->arch), hp->n_layer,
            st_fmt_bytes(buf, sizeof buf, (double)m->gguf->total_bytes), st_now() - t0);
    return m;
fail:
    st_model_free(m);
    return NULL;
}

void st_model_free(st_model *m) {
    if (!m) return;
    if (m->layers) {
        for (uint32_t i = 0; i < m->hp.n_layer; i++) {
            st_layer *L = &m->layers[i];
            free(L->attn_norm);
            free(L->ffn_norm);
            free(L->q_norm);
            free(L->k_norm);
        }
        free(m->layers);
    }
    free(m->output_norm);
    if (m->gguf) gguf_close(m->gguf);
    free(m->path);
    free(m);
}

int st_model_check_batch(const st_model *m, const int32_t *tokens, int64_t n, int64_t n_past, int64_t n_ctx) {
    if (n_past + n > n_ctx)
        return st_err("context full: %lld cached + %lld new tokens exceed the context of %lld (raise -c)",
                      (long long)n_past, (long long)n, (long long)n_ctx);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= m->hp.n_vocab)
            return st_err("token id %d at index %lld is outside the vocabulary (%u)", tokens[i], (long long)i,
                          m->hp.n_vocab);
    return 0;
}
