// make-model: presets, metadata, synthetic vocabulary and the parallel deterministic weight fill.
//
// Determinism: every tensor is cut into chunks of rows whose size depends only on the tensor's shape; chunk c of
// tensor i draws from rng stream (i, c) of the seed. Threads only decide who computes which chunk, so the file is
// byte-identical for any -t.
//
// Router skew (--router-skew S): in layer l the experts get a popularity rank from a permutation drawn from the
// seed; router row e (the logit weights of expert e, row e of ffn_gate_inp [n_embd, n_expert]) is scaled by
// (1 + rank(e))^-S. Router logits are dot products with the normalised hidden state, so a row of larger norm
// gives logits of larger spread and lands in the top-k more often: rank 0 is the hottest expert, the tail ones
// are picked rarely and roughly uniformly among themselves. S = 0 keeps all rows alike (uniform routing).
#include "model/make_model.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/mix.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/log.h"
#include "util/pool.h"
#include "util/rng.h"

// ---- presets ---------------------------------------------------------------------------------------------------

// Real shapes from the models' published config.json (Qwen3 / Qwen3-Coder, Apr-Jul 2025). feed_forward_length of
// the MoE presets is the config's dense intermediate_size: llama.cpp does not use it for qwen3moe.
#define QWEN3_VOCAB 151936
static const st_preset presets[] = {
    {"tiny-llama", "llama, 4 layers, d 256, 4/2 heads of 64, FF 768, tied embeddings (test shape)",
     {.arch = ST_ARCH_LLAMA, .n_layer = 4, .n_ctx_train = 2048, .n_embd = 256, .n_ff = 768, .n_head = 4,
      .n_head_kv = 2, .head_dim_k = 64, .head_dim_v = 64, .n_vocab = 4096, .rms_eps = 1e-5f,
      .rope_freq_base = 10000.0f, .tied_output = true}},
    {"tiny-qwen3", "qwen3, 4 layers, d 256, 4/1 heads of 128, FF 768 (test shape)",
     {.arch = ST_ARCH_QWEN3, .n_layer = 4, .n_ctx_train = 4096, .n_embd = 256, .n_ff = 768, .n_head = 4,
      .n_head_kv = 1, .head_dim_k = 128, .head_dim_v = 128, .n_vocab = 4096, .rms_eps = 1e-6f,
      .rope_freq_base = 1000000.0f}},
    {"tiny-qwen3moe", "qwen3moe, 4 layers, d 256, 4/1 heads of 128, 16 experts top-4 of FF 256 (test shape)",
     {.arch = ST_ARCH_QWEN3MOE, .n_layer = 4, .n_ctx_train = 4096, .n_embd = 256, .n_ff = 768, .n_head = 4,
      .n_head_kv = 1, .head_dim_k = 128, .head_dim_v = 128, .n_vocab = 4096, .rms_eps = 1e-6f,
      .rope_freq_base = 1000000.0f, .n_expert = 16, .n_expert_used = 4, .n_ff_exp = 256}},
    {"qwen3-30b-a3b", "Qwen3-30B-A3B: 48 layers, d 2048, 32/4 heads of 128, 128 experts top-8 of FF 768",
     {.arch = ST_ARCH_QWEN3MOE, .n_layer = 48, .n_ctx_train = 40960, .n_embd = 2048, .n_ff = 6144, .n_head = 32,
      .n_head_kv = 4, .head_dim_k = 128, .head_dim_v = 128, .n_vocab = QWEN3_VOCAB, .rms_eps = 1e-6f,
      .rope_freq_base = 1000000.0f, .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 768}},
    {"qwen3-coder-30b-a3b", "Qwen3-Coder-30B-A3B: as 30B-A3B, context 262144, rope base 1e7",
     {.arch = ST_ARCH_QWEN3MOE, .n_layer = 48, .n_ctx_train = 262144, .n_embd = 2048, .n_ff = 5472, .n_head = 32,
      .n_head_kv = 4, .head_dim_k = 128, .head_dim_v = 128, .n_vocab = QWEN3_VOCAB, .rms_eps = 1e-6f,
      .rope_freq_base = 10000000.0f, .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 768}},
    {"qwen3-235b-a22b", "Qwen3-235B-A22B: 94 layers, d 4096, 64/4 heads of 128, 128 experts top-8 of FF 1536",
     {.arch = ST_ARCH_QWEN3MOE, .n_layer = 94, .n_ctx_train = 40960, .n_embd = 4096, .n_ff = 12288, .n_head = 64,
      .n_head_kv = 4, .head_dim_k = 128, .head_dim_v = 128, .n_vocab = QWEN3_VOCAB, .rms_eps = 1e-6f,
      .rope_freq_base = 1000000.0f, .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 1536}},
    {"qwen3-coder-480b-a35b",
     "Qwen3-Coder-480B-A35B: 62 layers, d 6144, 96/8 heads of 128, 160 experts top-8 of FF 2560",
     {.arch = ST_ARCH_QWEN3MOE, .n_layer = 62, .n_ctx_train = 262144, .n_embd = 6144, .n_ff = 8192, .n_head = 96,
      .n_head_kv = 8, .head_dim_k = 128, .head_dim_v = 128, .n_vocab = QWEN3_VOCAB, .rms_eps = 1e-6f,
      .rope_freq_base = 10000000.0f, .n_expert = 160, .n_expert_used = 8, .n_ff_exp = 2560}},
};
#define N_PRESETS ((int)(sizeof presets / sizeof presets[0]))

int st_preset_count(void) { return N_PRESETS; }
const st_preset *st_preset_at(int i) { return i >= 0 && i < N_PRESETS ? &presets[i] : NULL; }
const st_preset *st_preset_find(const char *name) {
    for (int i = 0; i < N_PRESETS; i++)
        if (!strcmp(presets[i].name, name)) return &presets[i];
    return NULL;
}

// ---- random values ---------------------------------------------------------------------------------------------

float st_fast_normal(struct st_rng *r) {
    // Sum of four 16-bit uniforms: mean 2, variance 4/12; rescaled to unit variance. Much cheaper than Box-Muller
    // and close enough to a normal for synthetic weights.
    uint64_t x = st_rng_u64(r);
    float s = (float)(x & 0xffff) + (float)((x >> 16) & 0xffff) + (float)((x >> 32) & 0xffff) + (float)(x >> 48);
    return (s * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

// ---- synthetic vocabulary --------------------------------------------------------------------------------------

// GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves, the other 68 bytes map to U+0100..
// (fact from the GPT-2 tokenizer's bytes_to_unicode, used by every "gpt2" GGUF vocabulary).
static int byte_to_cp(int b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return b;
    int n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) n++;
    return 256 + n;
}

static int put_utf8(char *p, int cp) {
    if (cp < 0x80) {
        p[0] = (char)cp;
        return 1;
    }
    p[0] = (char)(0xC0 | (cp >> 6));
    p[1] = (char)(0x80 | (cp & 0x3F));
    return 2;  // every code point here is < 0x800
}

int st_synth_vocab(gguf_writer *w, uint32_t n_vocab) {
    static const char *specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    const uint32_t n_special = 3;
    if (n_vocab < 300) return st_err("synthetic vocabulary: n_vocab %u is too small (need >= 300)", n_vocab);
    if (n_vocab > 256u + 65536u + 65536u * 256u) return st_err("synthetic vocabulary: n_vocab %u too large", n_vocab);

    // Byte priority for the merged tokens: space and lower-case letters first so common text gets short encodings.
    int order[256];
    {
        const char *pri = " etaoinshrdlcumwfgypbvkjxqzETAOINSHRDLCUMWFGYPBVKJXQZ0123456789.,'\"-\n:;!?()_/";
        int n = 0;
        bool used[256] = {false};
        for (const char *p = pri; *p; p++)
            if (!used[(unsigned char)*p]) {
                used[(unsigned char)*p] = true;
                order[n++] = (unsigned char)*p;
            }
        for (int b = 0; b < 256; b++)
            if (!used[b]) order[n++] = b;
    }
    char sym[256][3];  // UTF-8 of each byte's stand-in code point
    int sym_len[256];
    for (int b = 0; b < 256; b++) {
        sym_len[b] = put_utf8(sym[b], byte_to_cp(b));
        sym[b][sym_len[b]] = 0;
    }

    const uint32_t n_merged = n_vocab - 256 - n_special;
    char **tokens = calloc(n_vocab, sizeof *tokens);
    char **merges = calloc(n_merged ? n_merged : 1, sizeof *merges);
    int32_t *types = calloc(n_vocab, sizeof *types);
    // Level-2 tokens in generation order, as byte pairs (needed to build level 3).
    uint16_t *l2 = calloc(65536, sizeof *l2);
    if (!tokens || !merges || !types || !l2) {
        free(tokens), free(merges), free(types), free(l2);
        return st_err("synthetic vocabulary: out of memory");
    }
    int rc = 0;
    uint32_t k = 0;
    for (int b = 0; b < 256; b++) {
        tokens[k] = strdup(sym[b]);
        types[k++] = 1;  // NORMAL
    }
    uint32_t m = 0, n_l2 = 0;
    // Level 2: byte pairs along anti-diagonals of the priority ranks (common pairs first).
    for (int s = 0; s <= 510 && m < n_merged; s++)
        for (int i = 0; i <= s && m < n_merged; i++) {
            int j = s - i;
            if (i > 255 || j > 255) continue;
            int a = order[i], b = order[j];
            char buf[16];
            snprintf(buf, sizeof buf, "%s%s", sym[a], sym[b]);
            tokens[k] = strdup(buf);
            types[k++] = 1;
            snprintf(buf, sizeof buf, "%s %s", sym[a], sym[b]);
            merges[m++] = strdup(buf);
            l2[n_l2++] = (uint16_t)(a << 8 | b);
        }
    // Level 3: a level-2 token followed by one byte, again along anti-diagonals (pair index + byte rank).
    for (uint64_t s = 0; m < n_merged; s++)
        for (uint64_t c = 0; c <= s && c < 256 && m < n_merged; c++) {
            uint64_t p = s - c;
            if (p >= n_l2) continue;
            int a = l2[p] >> 8, b = l2[p] & 0xff, z = order[c];
            char buf[24];
            snprintf(buf, sizeof buf, "%s%s%s", sym[a], sym[b], sym[z]);
            tokens[k] = strdup(buf);
            types[k++] = 1;
            snprintf(buf, sizeof buf, "%s%s %s", sym[a], sym[b], sym[z]);
            merges[m++] = strdup(buf);
        }
    for (uint32_t i = 0; i < n_special; i++) {
        tokens[k] = strdup(specials[i]);
        types[k++] = 3;  // CONTROL
    }
    for (uint32_t i = 0; i < k; i++)
        if (!tokens[i]) rc = st_err("synthetic vocabulary: out of memory");
    for (uint32_t i = 0; i < m; i++)
        if (!merges[i]) rc = st_err("synthetic vocabulary: out of memory");
    if (rc == 0 && k != n_vocab) rc = st_err("synthetic vocabulary: built %u tokens, wanted %u", k, n_vocab);
    if (rc == 0) {
        const uint32_t eot = n_vocab - 3, im_end = n_vocab - 1;
        gguf_w_set_str(w, "tokenizer.ggml.model", "gpt2");
        gguf_w_set_str(w, "tokenizer.ggml.pre", "qwen2");
        gguf_w_set_arr_str(w, "tokenizer.ggml.tokens", n_vocab, (const char *const *)tokens);
        gguf_w_set_arr(w, "tokenizer.ggml.token_type", GGUF_VT_INT32, n_vocab, types);
        gguf_w_set_arr_str(w, "tokenizer.ggml.merges", m, (const char *const *)merges);
        gguf_w_set_u32(w, "tokenizer.ggml.eos_token_id", im_end);
        gguf_w_set_u32(w, "tokenizer.ggml.padding_token_id", eot);
        gguf_w_set_u32(w, "tokenizer.ggml.bos_token_id", eot);
        gguf_w_set_bool(w, "tokenizer.ggml.add_bos_token", false);
        gguf_w_set_str(w, "tokenizer.chat_template",
                       "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
                       "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
                       "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}");
    }
    for (uint32_t i = 0; i < n_vocab; i++) free(tokens[i]);
    for (uint32_t i = 0; i < n_merged; i++) free(merges[i]);
    free(tokens), free(merges), free(types), free(l2);
    return rc;
}

// ---- weight fill -----------------------------------------------------------------------------------------------

#define WEIGHT_STD 0.02f  // like common initialisers; keeps activations O(1) through the layers
#define NORM_STD 0.05f    // norm gains are 1 + N(0, NORM_STD)
#define CHUNK_ELEMS (1 << 18)

typedef struct {
    st_tensor_spec spec;
    int type;
    int64_t rows;            // ne[1] * ne[2] * ne[3]
    int64_t rows_per_chunk;  // fixed by shape: determinism does not depend on threads
    int64_t n_chunks;
    size_t row_bytes;
} tensor_job;

typedef struct {
    const st_make_opts *o;
    const st_hparams *hp;
    tensor_job *jobs;
    int n_jobs;
    float *router_scale;  // [n_layer * n_expert]: the skew factor of each router row
    st_pool *pool;
    float **scratch;      // [threads][max row length] float rows
    int64_t scratch_elems;
    // current tensor being filled (set by fill_cb, read by workers)
    int cur;
    uint8_t *cur_dst;
    int err;
    char errmsg[256];
} fill_ctx;

// How the data of a quantized type is produced. Reference round-to-nearest quantization of gaussian rows is used
// where it is cheap; for k-quants and i-quants (whose reference quantizers search scales and would make an 18 GiB
// model take many minutes) random valid blocks with the same standard deviation are written instead.
static bool use_quantizer(int type) {
    switch (type) {
        case ST_TYPE_F32:
        case ST_TYPE_F16:
        case ST_TYPE_BF16:
        case ST_TYPE_Q8_0:
        case ST_TYPE_Q4_0:
        case ST_TYPE_Q4_1:
        case ST_TYPE_Q5_0:
        case ST_TYPE_Q5_1: return true;
        default: return false;
    }
}

static void fill_chunk(void *ud, int64_t chunk, int thread) {
    fill_ctx *c = ud;
    if (c->err) return;
    const tensor_job *j = &c->jobs[c->cur];
    const st_tensor_spec *s = &j->spec;
    const int64_t ne0 = s->ne[0];
    int64_t r0 = chunk * j->rows_per_chunk, r1 = r0 + j->rows_per_chunk;
    if (r1 > j->rows) r1 = j->rows;
    st_rng rng;
    st_rng_init(&rng, c->o->seed, ((uint64_t)(c->cur + 1) << 32) ^ (uint64_t)chunk);
    float *buf = c->scratch[thread];
    const st_type_info *ti = st_type_get(j->type);
    for (int64_t r = r0; r < r1; r++) {
        uint8_t *dst = c->cur_dst + (size_t)r * j->row_bytes;
        float std = WEIGHT_STD;
        if (s->tclass == ST_TCLASS_ROUTER && c->router_scale) {
            // Row r of ffn_gate_inp is expert r's router vector.
            std *= c->router_scale[(size_t)s->layer * c->hp->n_expert + (size_t)r];
        }
        if (s->tclass == ST_TCLASS_NORM) {
            for (int64_t i = 0; i < ne0; i++) buf[i] = 1.0f + NORM_STD * st_fast_normal(&rng);
        } else if (use_quantizer(j->type)) {
            for (int64_t i = 0; i < ne0; i++) buf[i] = std * st_fast_normal(&rng);
        } else {
            if (st_random_blocks(j->type, dst, ne0 / ti->block_size, std, &rng) != 0) goto fail;
            continue;
        }
        if (j->type == ST_TYPE_F32) memcpy(dst, buf, (size_t)ne0 * sizeof(float));
        else if (st_quantize_row(j->type, buf, dst, ne0) != 0) goto fail;
    }
    return;
fail:
    if (!c->err) {
        c->err = 1;
        snprintf(c->errmsg, sizeof c->errmsg, "tensor '%s' (%s): %s", s->name, st_type_name(j->type), st_errmsg());
    }
}

static int fill_cb(void *ud, int tensor_index, void *dst, uint64_t nbytes) {
    fill_ctx *c = ud;
    if (tensor_index < 0 || tensor_index >= c->n_jobs) return st_err("fill: bad tensor index %d", tensor_index);
    tensor_job *j = &c->jobs[tensor_index];
    if (nbytes != (uint64_t)j->row_bytes * (uint64_t)j->rows)
        return st_err("fill: tensor '%s': writer asks for %" PRIu64 " bytes, expected %" PRIu64, j->spec.name,
                      nbytes, (uint64_t)j->row_bytes * (uint64_t)j->rows);
    c->cur = tensor_index;
    c->cur_dst = dst;
    st_pool_run(c->pool, j->n_chunks, fill_chunk, c);
    if (c->err) return st_err("%s", c->errmsg);
    return 0;
}

// Per-layer expert popularity profile for --router-skew (see the header comment).
static float *router_profile(const st_hparams *hp, uint64_t seed, float skew) {
    if (hp->n_expert == 0 || skew == 0) return NULL;
    size_t ne = hp->n_expert;
    float *scale = malloc(hp->n_layer * ne * sizeof *scale);
    uint32_t *perm = malloc(ne * sizeof *perm);
    if (!scale || !perm) {
        free(scale), free(perm);
        return NULL;
    }
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        st_rng rng;
        st_rng_init(&rng, seed, 0x524f555445520000ull + l);  // "ROUTER" streams, apart from tensor streams
        for (uint32_t e = 0; e < ne; e++) perm[e] = e;
        for (uint32_t e = (uint32_t)ne - 1; e > 0; e--) {  // Fisher-Yates
            uint32_t x = st_rng_below(&rng, e + 1), t = perm[e];
            perm[e] = perm[x];
            perm[x] = t;
        }
        for (uint32_t rank = 0; rank < ne; rank++) scale[l * ne + perm[rank]] = powf(1.0f + (float)rank, -skew);
    }
    free(perm);
    return scale;
}

static void set_arch_metadata(gguf_writer *w, const st_hparams *hp) {
    const char *a = st_arch_name(hp->arch);
    char key[128];
#define K(suffix) (snprintf(key, sizeof key, "%s.%s", a, suffix), key)
    gguf_w_set_u32(w, K("block_count"), hp->n_layer);
    gguf_w_set_u32(w, K("context_length"), hp->n_ctx_train);
    gguf_w_set_u32(w, K("embedding_length"), hp->n_embd);
    gguf_w_set_u32(w, K("feed_forward_length"), hp->n_ff);
    gguf_w_set_u32(w, K("attention.head_count"), hp->n_head);
    gguf_w_set_u32(w, K("attention.head_count_kv"), hp->n_head_kv);
    gguf_w_set_u32(w, K("attention.key_length"), hp->head_dim_k);
    gguf_w_set_u32(w, K("attention.value_length"), hp->head_dim_v);
    gguf_w_set_u32(w, K("rope.dimension_count"), hp->n_rot);
    gguf_w_set_f32(w, K("attention.layer_norm_rms_epsilon"), hp->rms_eps);
    gguf_w_set_f32(w, K("rope.freq_base"), hp->rope_freq_base);
    if (hp->rope_freq_scale != 1.0f) gguf_w_set_f32(w, K("rope.scaling.factor"), 1.0f / hp->rope_freq_scale);
    if (hp->n_expert > 0) {
        gguf_w_set_u32(w, K("expert_count"), hp->n_expert);
        gguf_w_set_u32(w, K("expert_used_count"), hp->n_expert_used);
        if (hp->arch != ST_ARCH_LLAMA) gguf_w_set_u32(w, K("expert_feed_forward_length"), hp->n_ff_exp);
    }
#undef K
}

// Copies every tokenizer.* key from `path`; returns the token count, or -1.
static int64_t copy_vocab(gguf_writer *w, const char *path) {
    gguf_ctx *src = gguf_open(path);
    if (!src) return st_err_prefix("--vocab-from: ");
    int64_t n_vocab = -1;
    for (uint64_t i = 0; i < src->n_kv; i++) {
        const gguf_kv *kv = &src->kv[i];
        char key[256];
        if (kv->key.len >= sizeof key) continue;
        memcpy(key, kv->key.ptr, kv->key.len);
        key[kv->key.len] = 0;
        if (strncmp(key, "tokenizer.", 10) != 0) continue;
        gguf_w_set_value(w, key, &kv->value);
        if (!strcmp(key, "tokenizer.ggml.tokens") && kv->value.type == GGUF_VT_ARRAY) n_vocab = (int64_t)kv->value.arr.n;
    }
    gguf_close(src);
    if (n_vocab <= 0) return st_err("--vocab-from %s: no tokenizer.ggml.tokens array", path);
    return n_vocab;
}

int st_make_model(const st_make_opts *o) {
    st_hparams hp = o->hp;
    const char *ftname = st_ftype_name(o->ftype);
    if (!strcmp(ftname, "?")) return st_err("unknown quantization mix %d", o->ftype);
    if (!(o->router_skew >= 0 && o->router_skew <= 16)) return st_err("--router-skew %g: expected 0..16", o->router_skew);

    gguf_writer *w = gguf_writer_new();
    if (!w) return st_err("out of memory");
    int rc = -1;
    fill_ctx fc;
    memset(&fc, 0, sizeof fc);
    tensor_job *jobs = NULL;
    st_tensor_spec *specs = NULL;

    gguf_w_set_str(w, "general.architecture", st_arch_name(hp.arch));
    char name[160];
    snprintf(name, sizeof name, "strata synthetic %s %s", o->label ? o->label : st_arch_name(hp.arch), ftname);
    gguf_w_set_str(w, "general.name", name);
    gguf_w_set_u32(w, "general.file_type", (uint32_t)o->ftype);
    gguf_w_set_u32(w, "general.quantization_version", 2);
    gguf_w_set_u64(w, "strata.make_model.seed", o->seed);
    gguf_w_set_f32(w, "strata.make_model.router_skew", o->router_skew);

    if (o->vocab_from) {
        int64_t nv = copy_vocab(w, o->vocab_from);
        if (nv < 0) goto done;
        hp.n_vocab = (uint32_t)nv;
    }
    st_hparams_defaults(&hp);
    if (st_hparams_check(&hp) != 0) goto done;
    if (!o->vocab_from && st_synth_vocab(w, hp.n_vocab) != 0) goto done;
    set_arch_metadata(w, &hp);

    int n = 0;
    specs = st_arch_tensors(&hp, &n);
    if (!specs) goto done;
    jobs = calloc((size_t)n, sizeof *jobs);
    if (!jobs) {
        st_err("out of memory");
        goto done;
    }
    int64_t max_ne0 = 0;
    uint64_t total_bytes = 0;
    for (int i = 0; i < n; i++) {
        tensor_job *j = &jobs[i];
        j->spec = specs[i];
        j->type = st_mix_tensor_type(o->ftype, &hp, &specs[i]);
        const st_type_info *ti = st_type_get(j->type);
        bool ok = ti && (j->type == ST_TYPE_F32 || (use_quantizer(j->type) ? ti->can_quantize : ti->can_dequantize));
        if (!ok) {
            st_err("tensor '%s': type %s is not supported by the quant library", specs[i].name,
                   st_type_name(j->type));
            goto done;
        }
        j->rows = specs[i].ne[1] * specs[i].ne[2] * specs[i].ne[3];
        j->row_bytes = st_row_size(j->type, specs[i].ne[0]);
        j->rows_per_chunk = CHUNK_ELEMS / specs[i].ne[0];
        if (j->rows_per_chunk < 1) j->rows_per_chunk = 1;
        j->n_chunks = (j->rows + j->rows_per_chunk - 1) / j->rows_per_chunk;
        if (specs[i].ne[0] > max_ne0) max_ne0 = specs[i].ne[0];
        total_bytes += (uint64_t)j->row_bytes * (uint64_t)j->rows;
        if (gguf_w_add_tensor(w, specs[i].name, j->type, specs[i].n_dims, specs[i].ne) < 0) {
            st_err_prefix("tensor '%s': ", specs[i].name);
            goto done;
        }
    }

    fc.o = o;
    fc.hp = &hp;
    fc.jobs = jobs;
    fc.n_jobs = n;
    fc.router_scale = router_profile(&hp, o->seed, o->router_skew);
    fc.pool = st_pool_create(o->n_threads);
    if (!fc.pool) {
        st_err("cannot create a thread pool");
        goto done;
    }
    int nt = st_pool_threads(fc.pool);
    fc.scratch = calloc((size_t)nt, sizeof *fc.scratch);
    fc.scratch_elems = max_ne0;
    for (int t = 0; fc.scratch && t < nt; t++) {
        fc.scratch[t] = malloc((size_t)max_ne0 * sizeof(float));
        if (!fc.scratch[t]) break;
    }
    if (!fc.scratch || !fc.scratch[nt - 1]) {
        st_err("out of memory for scratch rows");
        goto done;
    }

    double t0 = st_now();
    // The writer calls fill_cb one tensor at a time (n_threads 1); each tensor is split over our pool. This keeps
    // the output independent of threading and balances huge tensors (embeddings, expert stacks) across cores.
    if (gguf_w_write(w, o->out_path, fill_cb, &fc, 1, o->quiet ? NULL : "make-model") != 0) goto done;
    double dt = st_now() - t0;
    if (!o->quiet) {
        char b[32];
        st_info("make-model: wrote %s (%s, %s, %d tensors) in %.2f s: %.1f MB/s with %d threads", o->out_path,
                st_fmt_bytes(b, sizeof b, (double)total_bytes), ftname, n, dt, total_bytes / 1e6 / (dt > 0 ? dt : 1e-9),
                nt);
    }
    rc = 0;
done:
    if (fc.scratch) {
        for (int t = 0; fc.pool && t < st_pool_threads(fc.pool); t++) free(fc.scratch[t]);
        free(fc.scratch);
    }
    if (fc.pool) st_pool_destroy(fc.pool);
    free(fc.router_scale);
    free(jobs);
    free(specs);
    gguf_writer_free(w);
    return rc;
}
