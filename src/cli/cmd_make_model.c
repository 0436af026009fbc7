// strata make-model: write a GGUF of a real (or tiny test) model shape with deterministic random weights.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "model/arch.h"
#include "model/make_model.h"
#include "model/mix.h"
#include "util/err.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: strata make-model --arch ARCH (--preset NAME | dims...) --type MIX [options] -o FILE.gguf\n"
            "\n"
            "Writes a GGUF with the tensors, metadata and per-tensor quantization types a llama.cpp-quantized file\n"
            "of that shape and mix would have, filled with deterministic random weights (gaussian, std 0.02; norm\n"
            "gains ~1). The same --seed gives byte-identical files for any thread count.\n"
            "\n"
            "options:\n"
            "  --arch ARCH          llama, qwen3 or qwen3moe (optional with --preset)\n"
            "  --preset NAME        a model shape (dims flags given as well override it):\n");
    for (int i = 0; i < st_preset_count(); i++)
        fprintf(f, "                         %-22s %s\n", st_preset_at(i)->name, st_preset_at(i)->desc);
    fprintf(f,
            "  --n-layer N          blocks\n"
            "  --n-embd N           residual width\n"
            "  --n-ff N             dense FFN width (qwen3moe: metadata only)\n"
            "  --n-head N           query heads\n"
            "  --n-head-kv N        key/value heads (default: n-head)\n"
            "  --head-dim N         per-head width (default: n-embd / n-head)\n"
            "  --n-expert N         experts per MoE layer (0: dense)\n"
            "  --n-expert-used N    experts routed per token (top-k)\n"
            "  --n-ff-exp N         expert FFN width\n"
            "  --n-vocab N          vocabulary size of the synthetic vocabulary (default 4096)\n"
            "  --n-ctx N            trained context length (default 4096)\n"
            "  --rope-base F        RoPE frequency base (default 10000 for llama, 1e6 for qwen3*)\n"
            "  --rms-eps F          RMSNorm epsilon (default 1e-5 for llama, 1e-6 for qwen3*)\n"
            "  --tied / --untied    LM head shares token_embd (no output.weight) or not\n"
            "  --type MIX           quantization mix, llama.cpp ftype names:\n"
            "                       %s\n"
            "  --seed N             random seed (default 1)\n"
            "  --vocab-from FILE    copy every tokenizer.* key (tokens, merges, chat template) from a GGUF and use\n"
            "                       its token count as n_vocab; default: a synthetic gpt2-style byte-level BPE\n"
            "                       vocabulary (256 byte tokens, merges, <|endoftext|> <|im_start|> <|im_end|>)\n"
            "  --router-skew S      expert popularity skew (default 0 = uniform). In each layer the experts get a\n"
            "                       random popularity rank and router row e is scaled by (1 + rank)^-S, so larger-norm\n"
            "                       rows win top-k more often: ~0.5 gives a few hot experts and a long tail\n"
            "  -t, --threads N      worker threads (default: all CPUs)\n"
            "  -o, --output FILE    output path (required)\n"
            "  -q, --quiet          no progress output\n"
            "  -h, --help           this text\n",
            st_ftype_list());
}

static int parse_u32(const char *flag, const char *s, uint32_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || !*s || v > 0xffffffffull || s[0] == '-') {
        fprintf(stderr, "make-model: %s '%s': expected a non-negative integer\n", flag, s);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

static int parse_f32(const char *flag, const char *s, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !*s) {
        fprintf(stderr, "make-model: %s '%s': expected a number\n", flag, s);
        return -1;
    }
    *out = (float)v;
    return 0;
}

int cmd_make_model(int argc, char **argv) {
    st_make_opts o;
    memset(&o, 0, sizeof o);
    o.seed = 1;
    o.ftype = -1;
    const char *arch_name = NULL, *preset_name = NULL;
    // Explicit dims; UINT32_MAX marks "not given".
    enum { F_LAYER, F_EMBD, F_FF, F_HEAD, F_HEAD_KV, F_HEAD_DIM, F_EXPERT, F_EXPERT_USED, F_FF_EXP, F_VOCAB, F_CTX,
           F_COUNT };
    static const char *dim_flags[F_COUNT] = {"--n-layer", "--n-embd", "--n-ff", "--n-head", "--n-head-kv",
                                             "--head-dim", "--n-expert", "--n-expert-used", "--n-ff-exp",
                                             "--n-vocab", "--n-ctx"};
    uint32_t dims[F_COUNT];
    for (int i = 0; i < F_COUNT; i++) dims[i] = UINT32_MAX;
    float rope_base = -1, rms_eps = -1;
    int tied = -1;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            o.quiet = true;
            continue;
        }
        if (!strcmp(a, "--tied") || !strcmp(a, "--untied")) {
            tied = !strcmp(a, "--tied");
            continue;
        }
        int dim = -1;
        for (int k = 0; k < F_COUNT; k++)
            if (!strcmp(a, dim_flags[k])) dim = k;
        bool known = dim >= 0 || !strcmp(a, "--arch") || !strcmp(a, "--preset") || !strcmp(a, "--type") ||
                     !strcmp(a, "--seed") || !strcmp(a, "--vocab-from") || !strcmp(a, "--router-skew") ||
                     !strcmp(a, "-t") || !strcmp(a, "--threads") || !strcmp(a, "-o") || !strcmp(a, "--output") ||
                     !strcmp(a, "--rope-base") || !strcmp(a, "--rms-eps");
        if (!known) {
            fprintf(stderr, "make-model: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (!v) {
            fprintf(stderr, "make-model: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (dim >= 0) {
            if (parse_u32(a, v, &dims[dim])) return 2;
        } else if (!strcmp(a, "--arch")) {
            arch_name = v;
        } else if (!strcmp(a, "--preset")) {
            preset_name = v;
        } else if (!strcmp(a, "--type")) {
            o.ftype = st_ftype_from_name(v);
            if (o.ftype < 0) {
                fprintf(stderr, "make-model: --type '%s': unknown mix; known: %s\n", v, st_ftype_list());
                return 2;
            }
        } else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            o.seed = strtoull(v, &end, 0);
            if (errno || *end || !*v) {
                fprintf(stderr, "make-model: --seed '%s': expected an integer\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--vocab-from")) {
            o.vocab_from = v;
        } else if (!strcmp(a, "--router-skew")) {
            if (parse_f32(a, v, &o.router_skew)) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            uint32_t t;
            if (parse_u32(a, v, &t)) return 2;
            o.n_threads = (int)t;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            o.out_path = v;
        } else if (!strcmp(a, "--rope-base")) {
            if (parse_f32(a, v, &rope_base)) return 2;
        } else if (!strcmp(a, "--rms-eps")) {
            if (parse_f32(a, v, &rms_eps)) return 2;
        }
    }
    if (!o.out_path) {
        fprintf(stderr, "make-model: -o FILE.gguf is required (see --help)\n");
        return 2;
    }
    if (o.ftype < 0) {
        fprintf(stderr, "make-model: --type MIX is required; known: %s\n", st_ftype_list());
        return 2;
    }
    st_hparams *hp = &o.hp;
    if (preset_name) {
        const st_preset *p = st_preset_find(preset_name);
        if (!p) {
            fprintf(stderr, "make-model: unknown preset '%s'; known:", preset_name);
            for (int i = 0; i < st_preset_count(); i++) fprintf(stderr, " %s", st_preset_at(i)->name);
            fprintf(stderr, "\n");
            return 2;
        }
        *hp = p->hp;
        o.label = p->name;
        if (arch_name && st_arch_from_name(arch_name) != hp->arch) {
            fprintf(stderr, "make-model: --arch %s contradicts preset %s (arch %s)\n", arch_name, p->name,
                    st_arch_name(hp->arch));
            return 2;
        }
    } else {
        if (!arch_name) {
            fprintf(stderr, "make-model: give --preset NAME or --arch ARCH with dims (see --help)\n");
            return 2;
        }
        hp->arch = st_arch_from_name(arch_name);
        if (hp->arch == ST_ARCH_UNKNOWN) {
            fprintf(stderr, "make-model: --arch '%s': unknown; known: llama, qwen3, qwen3moe\n", arch_name);
            return 2;
        }
        bool llama = hp->arch == ST_ARCH_LLAMA;
        hp->n_vocab = 4096;
        hp->n_ctx_train = 4096;
        hp->rope_freq_base = llama ? 10000.0f : 1000000.0f;
        hp->rms_eps = llama ? 1e-5f : 1e-6f;
        o.label = arch_name;
        for (int k = 0; k < F_COUNT; k++)
            if (dims[k] == UINT32_MAX && (k == F_LAYER || k == F_EMBD || k == F_HEAD ||
                                          (k == F_FF && hp->arch != ST_ARCH_QWEN3MOE))) {
                fprintf(stderr, "make-model: %s is required without --preset\n", dim_flags[k]);
                return 2;
            }
    }
    uint32_t *fields[F_COUNT] = {&hp->n_layer, &hp->n_embd, &hp->n_ff, &hp->n_head, &hp->n_head_kv,
                                 &hp->head_dim_k, &hp->n_expert, &hp->n_expert_used, &hp->n_ff_exp,
                                 &hp->n_vocab, &hp->n_ctx_train};
    for (int k = 0; k < F_COUNT; k++)
        if (dims[k] != UINT32_MAX) *fields[k] = dims[k];
    if (dims[F_HEAD_DIM] != UINT32_MAX) hp->head_dim_v = dims[F_HEAD_DIM];
    if (!preset_name && dims[F_HEAD_DIM] == UINT32_MAX) hp->head_dim_k = hp->head_dim_v = 0;  // n_embd / n_head
    if (dims[F_HEAD] != UINT32_MAX && dims[F_HEAD_KV] == UINT32_MAX && !preset_name) hp->n_head_kv = 0;
    if (rope_base > 0) hp->rope_freq_base = rope_base;
    if (rms_eps > 0) hp->rms_eps = rms_eps;
    if (tied >= 0) hp->tied_output = tied;
    if (o.vocab_from && dims[F_VOCAB] != UINT32_MAX) {
        fprintf(stderr, "make-model: --n-vocab and --vocab-from exclude each other\n");
        return 2;
    }
    if (st_make_model(&o) != 0) {
        fprintf(stderr, "make-model: %s\n", st_errmsg());
        return 1;
    }
    return 0;
}
