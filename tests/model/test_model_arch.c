// Unit tests for src/model: tensor enumeration and parameter counts against closed-form formulas, quantization mix
// rules against llama-quant.cpp facts, hparams round trip through a written GGUF, validation errors naming the
// tensor/key, determinism of make-model across thread counts and seeds, and the router skew profile.
// Random choices use a fresh seed per run (STRATA_SEED overrides); the seed is printed on failure.
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "model/arch.h"
#include "model/make_model.h"
#include "model/mix.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/fileio.h"
#include "util/log.h"
#include "util/rng.h"

static int n_fail = 0;
static uint64_t g_seed;
static char g_dir[256];

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            n_fail++;                                                      \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
        }                                                                  \
    } while (0)

static st_hparams preset_hp(const char *name) {
    const st_preset *p = st_preset_find(name);
    if (!p) {
        fprintf(stderr, "no preset %s\n", name);
        exit(1);
    }
    st_hparams hp = p->hp;
    st_hparams_defaults(&hp);
    return hp;
}

// Independent closed form of the parameter count for these architectures.
static void formula(const st_hparams *h, uint64_t *total, uint64_t *active) {
    uint64_t d = h->n_embd, hd = h->head_dim_k;
    uint64_t attn = d * h->n_head * hd * 2 + d * h->n_head_kv * hd * 2;
    uint64_t norms = 2 * d + (h->arch == ST_ARCH_LLAMA ? 0 : 2 * hd);
    uint64_t ffn_tot, ffn_act;
    if (h->n_expert) {
        uint64_t one = 3 * d * h->n_ff_exp;
        ffn_tot = one * h->n_expert + d * h->n_expert;
        ffn_act = one * h->n_expert_used + d * h->n_expert;
    } else {
        ffn_tot = ffn_act = 3 * d * h->n_ff;
    }
    uint64_t emb = d * h->n_vocab * (h->tied_output ? 1 : 2) + d;
    *total = h->n_layer * (attn + norms + ffn_tot) + emb;
    *active = h->n_layer * (attn + norms + ffn_act) + emb;
}

static void test_param_counts(void) {
    for (int i = 0; i < st_preset_count(); i++) {
        st_hparams hp = st_preset_at(i)->hp;
        st_hparams_defaults(&hp);
        CHECK(st_hparams_check(&hp) == 0, "preset %s: %s", st_preset_at(i)->name, st_errmsg());
        uint64_t t, a, ft, fa;
        st_hparams_param_count(&hp, &t, &a);
        formula(&hp, &ft, &fa);
        CHECK(t == ft && a == fa, "preset %s: counted %" PRIu64 "/%" PRIu64 ", formula %" PRIu64 "/%" PRIu64,
              st_preset_at(i)->name, t, a, ft, fa);
    }
    // Published figures: Qwen3-30B-A3B has 30.5B parameters, 3.3B activated; 235B-A22B: 235B / 22B.
    st_hparams hp = preset_hp("qwen3-30b-a3b");
    uint64_t t, a;
    st_hparams_param_count(&hp, &t, &a);
    CHECK(t > 30.4e9 && t < 30.6e9 && a > 3.2e9 && a < 3.4e9, "30B-A3B: %" PRIu64 " / %" PRIu64, t, a);
    hp = preset_hp("qwen3-235b-a22b");
    st_hparams_param_count(&hp, &t, &a);
    CHECK(t > 234e9 && t < 236e9 && a > 21.5e9 && a < 22.5e9, "235B-A22B: %" PRIu64 " / %" PRIu64, t, a);
    hp = preset_hp("qwen3-coder-480b-a35b");
    st_hparams_param_count(&hp, &t, &a);
    CHECK(t > 475e9 && t < 485e9 && a > 34e9 && a < 36e9, "480B-A35B: %" PRIu64 " / %" PRIu64, t, a);
    // KV cache of 30B-A3B at 40960 tokens, F16: 48 layers * 4 kv heads * 256 * 2 bytes per token.
    hp = preset_hp("qwen3-30b-a3b");
    CHECK(st_hparams_kv_bytes(&hp, 40960, 2) == 48ull * 40960 * 4 * 256 * 2, "kv bytes");
}

static void test_tensor_list(void) {
    st_hparams hp = preset_hp("tiny-qwen3moe");
    int n = 0;
    st_tensor_spec *s = st_arch_tensors(&hp, &n);
    CHECK(s && n == 3 + 12 * (int)hp.n_layer, "tiny-qwen3moe: %d tensors", n);
    const st_tensor_spec *g = NULL, *inp = NULL, *qn = NULL;
    for (int i = 0; s && i < n; i++) {
        if (!strcmp(s[i].name, "blk.2.ffn_gate_exps.weight")) g = &s[i];
        if (!strcmp(s[i].name, "blk.0.ffn_gate_inp.weight")) inp = &s[i];
        if (!strcmp(s[i].name, "blk.3.attn_q_norm.weight")) qn = &s[i];
    }
    CHECK(g && g->n_dims == 3 && g->ne[0] == 256 && g->ne[1] == 256 && g->ne[2] == 16 && g->expert && g->layer == 2,
          "ffn_gate_exps spec");
    CHECK(inp && inp->n_dims == 2 && inp->ne[0] == 256 && inp->ne[1] == 16 && inp->tclass == ST_TCLASS_ROUTER,
          "ffn_gate_inp spec");
    CHECK(qn && qn->n_dims == 1 && qn->ne[0] == 128 && qn->tclass == ST_TCLASS_NORM, "attn_q_norm spec");
    free(s);
    hp = preset_hp("tiny-llama");
    s = st_arch_tensors(&hp, &n);
    bool has_output = false;
    for (int i = 0; s && i < n; i++)
        if (!strcmp(s[i].name, "output.weight")) has_output = true;
    CHECK(s && !has_output && n == 2 + 9 * (int)hp.n_layer, "tiny-llama (tied): %d tensors", n);
    CHECK(hp.rope_type == ST_ROPE_NORM && preset_hp("tiny-qwen3").rope_type == ST_ROPE_NEOX, "rope types");
    free(s);
}

static int type_of(int ftype, const st_hparams *hp, const char *name) {
    int n = 0;
    st_tensor_spec *s = st_arch_tensors(hp, &n);
    int t = -1;
    for (int i = 0; s && i < n; i++)
        if (!strcmp(s[i].name, name)) t = st_mix_tensor_type(ftype, hp, &s[i]);
    free(s);
    return t;
}

#define EXPECT_TYPE(ft, hp, name, want)                                                                     \
    do {                                                                                                    \
        int got_ = type_of(ft, hp, name);                                                                   \
        CHECK(got_ == (want), "%s %s: got %s, want %s", st_ftype_name(ft), name, st_type_name(got_),        \
              st_type_name(want));                                                                          \
    } while (0)

static void test_mix_rules(void) {
    st_hparams q = preset_hp("qwen3-30b-a3b");  // 48 layers, GQA 8, 128 experts
    // Q4_K_M: "use more bits" layers (first/last eighth, every third between) get Q6_K attn_v and ffn_down.
    EXPECT_TYPE(ST_FTYPE_Q4_K_M, &q, "token_embd.weight", ST_TYPE_Q4_K);
    EXPECT_TYPE(ST_FTYPE_Q4_K_M, &q, "output.weight", ST_TYPE_Q6_K);
    EXPECT_TYPE(ST_FTYPE_Q4_K_M, &q, "blk.0.attn_v.weight", ST_TYPE_Q6_K);
    EXPECT_TYPE(ST_FTYPE_Q4_K_M, &q, "blk.6.attn_v.weight", ST_TYPE_Q4_K);
    EXPECT_TYPE(ST_FTYPE_Q4_K_M, &q, "blk.8.attn_v.weight", ST_TYPE_Q6_K);
    EXPECT_TYPE(ST_FTYPE_Q4_K_M, &q, "blk.42.ffn_down_exps.weight", ST_TYPE_Q6_K);
    EXPECT_TYPE(ST_FTYPE_Q4_K_M, &q, "blk.7.ffn_down_exps.weight", ST_TYPE_Q4_K);
    EXPECT_TYPE(ST_FTYPE_Q4_K_M, &q, "blk.7.ffn_up_exps.weight", ST_TYPE_Q4_K);
    EXPECT_TYPE(ST_FTYPE_Q4_K_M, &q, "blk.7.attn_q.weight", ST_TYPE_Q4_K);
    EXPECT_TYPE(ST_FTYPE_Q4_K_M, &q, "blk.7.ffn_gate_inp.weight", ST_TYPE_F32);
    EXPECT_TYPE(ST_FTYPE_Q4_K_M, &q, "blk.7.attn_k_norm.weight", ST_TYPE_F32);
    // Q2_K: attn_v Q4_K with GQA >= 4, ffn_down Q3_K, attn_output Q3_K.
    EXPECT_TYPE(ST_FTYPE_Q2_K, &q, "blk.5.attn_v.weight", ST_TYPE_Q4_K);
    EXPECT_TYPE(ST_FTYPE_Q2_K, &q, "blk.5.ffn_down_exps.weight", ST_TYPE_Q3_K);
    EXPECT_TYPE(ST_FTYPE_Q2_K, &q, "blk.5.attn_output.weight", ST_TYPE_Q3_K);
    EXPECT_TYPE(ST_FTYPE_Q2_K, &q, "blk.5.ffn_gate_exps.weight", ST_TYPE_Q2_K);
    EXPECT_TYPE(ST_FTYPE_Q2_K, &q, "token_embd.weight", ST_TYPE_Q2_K);
    // IQ1_M: embeddings Q2_K, head Q5_K, attn_v Q4_K (many experts), first-eighth ffn_down Q2_K.
    EXPECT_TYPE(ST_FTYPE_IQ1_M, &q, "token_embd.weight", ST_TYPE_Q2_K);
    EXPECT_TYPE(ST_FTYPE_IQ1_M, &q, "output.weight", ST_TYPE_Q5_K);
    EXPECT_TYPE(ST_FTYPE_IQ1_M, &q, "blk.9.attn_v.weight", ST_TYPE_Q4_K);
    EXPECT_TYPE(ST_FTYPE_IQ1_M, &q, "blk.1.ffn_down_exps.weight", ST_TYPE_Q2_K);
    EXPECT_TYPE(ST_FTYPE_IQ1_M, &q, "blk.20.ffn_down_exps.weight", ST_TYPE_IQ1_M);
    EXPECT_TYPE(ST_FTYPE_IQ1_M, &q, "blk.20.attn_output.weight", ST_TYPE_IQ2_XXS);
    // IQ3_S: attn_v Q4_K with GQA >= 4; everything else IQ3_S; Q8_0 output stays Q8_0 in Q8_0 files.
    EXPECT_TYPE(ST_FTYPE_IQ3_S, &q, "blk.3.attn_v.weight", ST_TYPE_Q4_K);
    EXPECT_TYPE(ST_FTYPE_IQ3_S, &q, "blk.3.ffn_up_exps.weight", ST_TYPE_IQ3_S);
    EXPECT_TYPE(ST_FTYPE_Q8_0, &q, "output.weight", ST_TYPE_Q8_0);
    EXPECT_TYPE(ST_FTYPE_Q4_0, &q, "output.weight", ST_TYPE_Q6_K);
    EXPECT_TYPE(ST_FTYPE_F16, &q, "blk.3.ffn_up_exps.weight", ST_TYPE_F16);
    EXPECT_TYPE(ST_FTYPE_F16, &q, "blk.3.ffn_gate_inp.weight", ST_TYPE_F32);
    EXPECT_TYPE(ST_FTYPE_BF16, &q, "token_embd.weight", ST_TYPE_BF16);
    // Tied embeddings are quantized like the LM head.
    st_hparams l = preset_hp("tiny-llama");
    EXPECT_TYPE(ST_FTYPE_Q4_K_M, &l, "token_embd.weight", ST_TYPE_Q6_K);
    EXPECT_TYPE(ST_FTYPE_IQ1_M, &l, "token_embd.weight", ST_TYPE_Q5_K);
    // Fallbacks: rows of 96 cannot hold 256-blocks (Q4_K -> Q5_0, IQ types -> IQ4_NL); rows of 100 -> F16.
    st_hparams f = q;
    f.n_layer = 8;
    f.n_ff_exp = 96;
    EXPECT_TYPE(ST_FTYPE_Q4_K_M, &f, "blk.4.ffn_down_exps.weight", ST_TYPE_Q5_0);
    EXPECT_TYPE(ST_FTYPE_Q4_K_M, &f, "blk.3.ffn_down_exps.weight", ST_TYPE_Q8_0);  // Q6_K (more bits) -> Q8_0
    EXPECT_TYPE(ST_FTYPE_IQ3_S, &f, "blk.3.ffn_down_exps.weight", ST_TYPE_IQ4_NL);
    EXPECT_TYPE(ST_FTYPE_Q6_K, &f, "blk.3.ffn_down_exps.weight", ST_TYPE_Q8_0);
    EXPECT_TYPE(ST_FTYPE_Q5_K_S, &f, "blk.4.ffn_down_exps.weight", ST_TYPE_Q5_1);
    f.n_ff_exp = 100;
    EXPECT_TYPE(ST_FTYPE_Q4_K_M, &f, "blk.3.ffn_down_exps.weight", ST_TYPE_F16);
    EXPECT_TYPE(ST_FTYPE_Q4_K_M, &f, "blk.3.ffn_up_exps.weight", ST_TYPE_Q4_K);
    // LM head with rows that do not fit the default block: Q8_0.
    f.n_embd = 320;
    EXPECT_TYPE(ST_FTYPE_Q4_K_M, &f, "output.weight", ST_TYPE_Q8_0);
    CHECK(st_ftype_from_name("q4_k_m") == ST_FTYPE_Q4_K_M && st_ftype_from_name("nope") == -1, "ftype names");
}

static int read_all(const char *path, char **buf, size_t *len) { return st_read_file(path, 1ull << 30, buf, len); }

static int make(const char *preset, int ftype, uint64_t seed, int threads, float skew, const char *out) {
    st_make_opts o;
    memset(&o, 0, sizeof o);
    o.hp = st_preset_find(preset)->hp;
    o.ftype = ftype;
    o.seed = seed;
    o.n_threads = threads;
    o.router_skew = skew;
    o.out_path = out;
    o.label = preset;
    o.quiet = true;
    int rc = st_make_model(&o);
    if (rc) fprintf(stderr, "make %s: %s\n", preset, st_errmsg());
    return rc;
}

static void test_roundtrip_and_determinism(void) {
    char a[320], b[320], c[320];
    snprintf(a, sizeof a, "%s/a.gguf", g_dir);
    snprintf(b, sizeof b, "%s/b.gguf", g_dir);
    snprintf(c, sizeof c, "%s/c.gguf", g_dir);
    static const int mixes[] = {ST_FTYPE_Q4_K_M, ST_FTYPE_Q8_0, ST_FTYPE_IQ1_M};
    const int mix = mixes[g_seed % 3];
    CHECK(make("tiny-qwen3moe", mix, g_seed, 1, 0.5f, a) == 0, "make a");
    CHECK(make("tiny-qwen3moe", mix, g_seed, 3, 0.5f, b) == 0, "make b");
    CHECK(make("tiny-qwen3moe", mix, g_seed + 1, 2, 0.5f, c) == 0, "make c");
    char *da = NULL, *db = NULL, *dc = NULL;
    size_t la = 0, lb = 0, lc = 0;
    CHECK(read_all(a, &da, &la) == 0 && read_all(b, &db, &lb) == 0 && read_all(c, &dc, &lc) == 0, "read");
    CHECK(da && db && la == lb && memcmp(da, db, la) == 0, "1 vs 3 threads differ (%s)", st_ftype_name(mix));
    CHECK(da && dc && (la != lc || memcmp(da, dc, la) != 0), "different seeds gave identical files");
    free(da), free(db), free(dc);

    gguf_ctx *ctx = gguf_open(a);
    CHECK(ctx != NULL, "open: %s", st_errmsg());
    if (!ctx) return;
    st_hparams hp, want = preset_hp("tiny-qwen3moe");
    CHECK(st_hparams_from_gguf(ctx, &hp) == 0, "hparams: %s", st_errmsg());
    CHECK(hp.n_layer == want.n_layer && hp.n_embd == want.n_embd && hp.n_head == want.n_head &&
              hp.n_head_kv == want.n_head_kv && hp.head_dim_k == want.head_dim_k && hp.n_expert == want.n_expert &&
              hp.n_expert_used == want.n_expert_used && hp.n_ff_exp == want.n_ff_exp && hp.n_vocab == want.n_vocab &&
              hp.n_ctx_train == want.n_ctx_train && hp.rms_eps == want.rms_eps &&
              hp.rope_freq_base == want.rope_freq_base && hp.rope_type == ST_ROPE_NEOX && hp.expert_weights_norm &&
              !hp.tied_output,
          "hparams round trip");
    int n_unknown = -1;
    CHECK(st_arch_validate(ctx, &hp, a, &n_unknown) == 0 && n_unknown == 0, "validate: %s", st_errmsg());

    // Router skew: expert rows follow (1 + rank)^-0.5, so row norms spread by sqrt(16) = 4x; without skew they
    // are within a few percent of each other.
    const gguf_tensor *r = gguf_find_tensor(ctx, "blk.1.ffn_gate_inp.weight");
    CHECK(r && r->type == ST_TYPE_F32, "router type");
    if (r) {
        const float *w = (const float *)r->data;
        double mn = 1e30, mx = 0;
        for (int e = 0; e < 16; e++) {
            double s = 0;
            for (int i = 0; i < 256; i++) s += (double)w[e * 256 + i] * w[e * 256 + i];
            s = sqrt(s);
            if (s < mn) mn = s;
            if (s > mx) mx = s;
        }
        CHECK(mx / mn > 3.0 && mx / mn < 5.5, "router norm ratio %.2f with skew 0.5", mx / mn);
    }
    // Weights have the requested spread: dequantize one expert matrix.
    const gguf_tensor *t = gguf_find_tensor(ctx, "blk.0.ffn_up_exps.weight");
    if (t) {
        int64_t n = t->ne[0];
        float *row = malloc((size_t)n * sizeof *row);
        double s2 = 0;
        int64_t rows = t->ne[1] * t->ne[2], cnt = 0;
        size_t rb = st_row_size(t->type, n);
        for (int64_t i = 0; i < rows; i += 7) {
            CHECK(st_dequantize_row(t->type, t->data + i * rb, row, n) == 0, "dequant");
            for (int64_t k = 0; k < n; k++) s2 += (double)row[k] * row[k];
            cnt += n;
        }
        double sd = sqrt(s2 / (double)cnt);
        CHECK(sd > 0.01 && sd < 0.04, "%s weights std %.4f, want ~0.02", st_type_name(t->type), sd);
        free(row);
    }
    gguf_close(ctx);
    unlink(a), unlink(b), unlink(c);
}

// Writes a tiny-qwen3 file by hand with one tensor changed: drop it, resize it, or give it the wrong type.
static int write_broken(const char *path, const char *victim, int mode) {
    st_hparams hp = preset_hp("tiny-qwen3");
    gguf_writer *w = gguf_writer_new();
    gguf_w_set_str(w, "general.architecture", "qwen3");
    gguf_w_set_u32(w, "qwen3.block_count", hp.n_layer);
    gguf_w_set_u32(w, "qwen3.context_length", hp.n_ctx_train);
    gguf_w_set_u32(w, "qwen3.embedding_length", hp.n_embd);
    gguf_w_set_u32(w, "qwen3.feed_forward_length", hp.n_ff);
    gguf_w_set_u32(w, "qwen3.attention.head_count", hp.n_head);
    gguf_w_set_u32(w, "qwen3.attention.head_count_kv", hp.n_head_kv);
    gguf_w_set_u32(w, "qwen3.attention.key_length", hp.head_dim_k);
    gguf_w_set_u32(w, "qwen3.attention.value_length", hp.head_dim_v);
    gguf_w_set_f32(w, "qwen3.attention.layer_norm_rms_epsilon", hp.rms_eps);
    gguf_w_set_u32(w, "qwen3.vocab_size", hp.n_vocab);
    int n = 0;
    st_tensor_spec *s = st_arch_tensors(&hp, &n);
    for (int i = 0; i < n; i++) {
        int type = s[i].tclass == ST_TCLASS_NORM ? ST_TYPE_F32 : ST_TYPE_F16;
        if (!strcmp(s[i].name, victim)) {
            if (mode == 0) continue;
            if (mode == 1) s[i].ne[1] += 1;
            if (mode == 2) type = ST_TYPE_F16;
        }
        gguf_w_add_tensor(w, s[i].name, type, s[i].n_dims, s[i].ne);
    }
    free(s);
    int rc = gguf_w_write(w, path, NULL, NULL, 1, NULL);
    gguf_writer_free(w);
    return rc;
}

static void expect_invalid(const char *path, const char *victim, int mode, const char *needle) {
    CHECK(write_broken(path, victim, mode) == 0, "write broken: %s", st_errmsg());
    gguf_ctx *ctx = gguf_open(path);
    CHECK(ctx != NULL, "open broken: %s", st_errmsg());
    if (!ctx) return;
    st_hparams hp;
    int rc = st_hparams_from_gguf(ctx, &hp);
    CHECK(rc == 0, "hparams of broken file: %s", st_errmsg());
    rc = st_arch_validate(ctx, &hp, path, NULL);
    CHECK(rc != 0 && strstr(st_errmsg(), victim) && strstr(st_errmsg(), needle),
          "mode %d: validate rc %d, message '%s' should name '%s' and contain '%s'", mode, rc, st_errmsg(), victim,
          needle);
    gguf_close(ctx);
}

static void test_validation_errors(void) {
    char p[320];
    snprintf(p, sizeof p, "%s/broken.gguf", g_dir);
    expect_invalid(p, "blk.2.attn_k.weight", 0, "missing");
    expect_invalid(p, "blk.1.ffn_down.weight", 1, "[768, 257], expected [768, 256]");
    expect_invalid(p, "blk.3.attn_q_norm.weight", 2, "F16");
    // Missing / inconsistent hparams name the key.
    gguf_writer *w = gguf_writer_new();
    gguf_w_set_str(w, "general.architecture", "qwen3moe");
    gguf_w_set_u32(w, "qwen3moe.block_count", 2);
    gguf_w_set_u32(w, "qwen3moe.context_length", 128);
    gguf_w_set_u32(w, "qwen3moe.embedding_length", 64);
    gguf_w_set_u32(w, "qwen3moe.attention.head_count", 4);
    gguf_w_set_f32(w, "qwen3moe.attention.layer_norm_rms_epsilon", 1e-6f);
    gguf_w_set_u32(w, "qwen3moe.vocab_size", 1000);
    CHECK(gguf_w_write(w, p, NULL, NULL, 1, NULL) == 0, "write: %s", st_errmsg());
    gguf_ctx *ctx = gguf_open(p);
    st_hparams hp;
    CHECK(ctx && st_hparams_from_gguf(ctx, &hp) != 0 && strstr(st_errmsg(), "qwen3moe.expert_count"),
          "missing expert_count: '%s'", st_errmsg());
    gguf_close(ctx);
    gguf_w_set_u32(w, "qwen3moe.expert_count", 8);
    gguf_w_set_u32(w, "qwen3moe.expert_used_count", 9);
    CHECK(gguf_w_write(w, p, NULL, NULL, 1, NULL) == 0, "write: %s", st_errmsg());
    ctx = gguf_open(p);
    CHECK(ctx && st_hparams_from_gguf(ctx, &hp) != 0 && strstr(st_errmsg(), "qwen3moe.expert_used_count"),
          "bad expert_used_count: '%s'", st_errmsg());
    gguf_close(ctx);
    gguf_w_set_str(w, "general.architecture", "mamba");
    CHECK(gguf_w_write(w, p, NULL, NULL, 1, NULL) == 0, "write: %s", st_errmsg());
    ctx = gguf_open(p);
    CHECK(ctx && st_hparams_from_gguf(ctx, &hp) != 0 && strstr(st_errmsg(), "'mamba'"), "unknown arch: '%s'",
          st_errmsg());
    gguf_close(ctx);
    gguf_writer_free(w);
    unlink(p);
}

static void test_synth_vocab(void) {
    char p[320];
    snprintf(p, sizeof p, "%s/vocab.gguf", g_dir);
    gguf_writer *w = gguf_writer_new();
    uint32_t nv = 300 + (uint32_t)(g_seed % 70000);
    CHECK(st_synth_vocab(w, nv) == 0, "synth vocab %u: %s", nv, st_errmsg());
    CHECK(st_synth_vocab(w, 10) != 0, "tiny vocab accepted");
    CHECK(gguf_w_write(w, p, NULL, NULL, 1, NULL) == 0, "write: %s", st_errmsg());
    gguf_writer_free(w);
    gguf_ctx *ctx = gguf_open(p);
    const gguf_kv *tk = ctx ? gguf_find_kv(ctx, "tokenizer.ggml.tokens") : NULL;
    const gguf_kv *mk = ctx ? gguf_find_kv(ctx, "tokenizer.ggml.merges") : NULL;
    CHECK(tk && tk->value.arr.n == nv && mk && mk->value.arr.n == nv - 259, "vocab %u: sizes", nv);
    if (tk && mk && tk->value.arr.items) {
        // Every merge joins to the token at 256 + merge index.
        for (uint64_t i = 0; i < mk->value.arr.n; i += 1 + i / 64) {
            const gguf_str *m = &mk->value.arr.items[i].str;
            const gguf_str *t = &tk->value.arr.items[256 + i].str;
            const char *sp = memchr(m->ptr + 1, ' ', m->len - 1);
            CHECK(sp, "merge %" PRIu64 " has no space", i);
            if (!sp) break;
            size_t l1 = (size_t)(sp - m->ptr), l2 = m->len - l1 - 1;
            CHECK(t->len == l1 + l2 && !memcmp(t->ptr, m->ptr, l1) && !memcmp(t->ptr + l1, sp + 1, l2),
                  "merge %" PRIu64 " does not produce token %" PRIu64, i, 256 + i);
        }
    }
    gguf_close(ctx);
    unlink(p);
}

int main(void) {
    const char *env = getenv("STRATA_SEED");
    g_seed = env ? strtoull(env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    st_log_set_level(ST_LOG_WARN);
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/strata_model_test_XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_param_counts();
    test_tensor_list();
    test_mix_rules();
    test_roundtrip_and_determinism();
    test_validation_errors();
    test_synth_vocab();
    rmdir(g_dir);
    if (n_fail) {
        fprintf(stderr, "%d check(s) failed (seed %" PRIu64 ", rerun with STRATA_SEED=%" PRIu64 ")\n", n_fail, g_seed,
                g_seed);
        return 1;
    }
    printf("model arch tests passed (seed %" PRIu64 ")\n", g_seed);
    return 0;
}
