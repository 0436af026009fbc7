// strata info: a GGUF's metadata (long arrays summarised), tensors, bytes per type, parameter counts (total and
// active per token) and the memory it needs (weights + F16 KV cache at the trained context). Works on any GGUF;
// for architectures strata cannot run it says so and still prints what the file holds.
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "gguf/gguf.h"
#include "model/arch.h"
#include "model/mix.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/log.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: strata info [-m] FILE.gguf [--tensors] [--json] [--ctx N]\n"
            "\n"
            "Shows a GGUF model's metadata (long arrays summarised), bytes per tensor type, total parameters and\n"
            "parameters active per token (MoE: only the routed experts count), and the memory the model needs:\n"
            "weights plus an F16 KV cache at the trained context length (or --ctx N). Any GGUF can be inspected;\n"
            "for architectures strata cannot run, it says so. Exit status 1 if the file is unreadable or a supported\n"
            "architecture's tensors do not match its hyperparameters (the message names the tensor).\n"
            "\n"
            "options:\n"
            "  -m, --model FILE   the GGUF file (or give it as the only positional argument)\n"
            "  --tensors          list every tensor: name, type, shape (GGUF ne order), bytes\n"
            "  --json             machine-readable output on stdout\n"
            "  --ctx N            context length for the KV cache estimate (default: the trained context)\n"
            "  --plan             the hybrid placement plan under a VRAM budget instead (strata info --plan --help)\n"
            "  -h, --help         this text\n");
}

// ---- output helpers --------------------------------------------------------------------------------------------

static void json_str(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

// Text form of a string: escapes control characters, truncated to `max` bytes.
static void text_str(FILE *f, const char *s, size_t n, size_t max) {
    fputc('"', f);
    size_t m = n < max ? n : max;
    for (size_t i = 0; i < m; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c < 0x20) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
    fputc('"', f);
    if (n > max) fprintf(f, "... (%" PRIu64 " bytes)", (uint64_t)n);
}

static bool is_int_type(gguf_vtype t) {
    return t == GGUF_VT_UINT8 || t == GGUF_VT_INT8 || t == GGUF_VT_UINT16 || t == GGUF_VT_INT16 ||
           t == GGUF_VT_UINT32 || t == GGUF_VT_INT32 || t == GGUF_VT_UINT64 || t == GGUF_VT_INT64;
}

static bool is_signed_type(gguf_vtype t) {
    return t == GGUF_VT_INT8 || t == GGUF_VT_INT16 || t == GGUF_VT_INT32 || t == GGUF_VT_INT64;
}

static void scalar(FILE *f, const gguf_value *v, bool json) {
    switch (v->type) {
        case GGUF_VT_FLOAT32:
        case GGUF_VT_FLOAT64:
            if (json && !isfinite(v->f64)) fputs("null", f);  // JSON has no NaN/Inf
            else fprintf(f, "%.9g", v->f64);
            break;
        case GGUF_VT_BOOL: fputs(v->u64 ? "true" : "false", f); break;
        case GGUF_VT_STRING:
            if (json) json_str(f, v->str.ptr, v->str.len);
            else text_str(f, v->str.ptr, v->str.len, 96);
            break;
        default:
            if (is_signed_type(v->type)) fprintf(f, "%" PRId64, v->i64);
            else if (is_int_type(v->type)) fprintf(f, "%" PRIu64, v->u64);
            else fputs(json ? "null" : "?", f);
    }
}

// First few elements of an array, for summaries.
static void array_head(FILE *f, const gguf_value *v, bool json, int max) {
    uint64_t n = v->arr.n < (uint64_t)max ? v->arr.n : (uint64_t)max;
    for (uint64_t i = 0; i < n; i++) {
        if (i) fputs(", ", f);
        gguf_vtype et = v->arr.elem_type;
        if (et == GGUF_VT_STRING || et == GGUF_VT_ARRAY) {
            if (v->arr.items) {
                if (et == GGUF_VT_STRING) scalar(f, &v->arr.items[i], json);
                else fputs(json ? "null" : "[...]", f);
            }
        } else if (et == GGUF_VT_FLOAT32 || et == GGUF_VT_FLOAT64) {
            double x = gguf_arr_f64(v, i);
            if (json && !isfinite(x)) fputs("null", f);
            else fprintf(f, "%.9g", x);
        } else if (et == GGUF_VT_BOOL) {
            fputs(gguf_arr_i64(v, i) ? "true" : "false", f);
        } else {
            fprintf(f, "%" PRId64, gguf_arr_i64(v, i));
        }
    }
}

static void fmt_shape(char *buf, size_t n, const gguf_tensor *t) {
    size_t off = (size_t)snprintf(buf, n, "[");
    for (uint32_t i = 0; i < t->n_dims && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s%" PRId64, i ? ", " : "", t->ne[i]);
    if (off < n) snprintf(buf + off, n - off, "]");
}

static uint64_t numel(const gguf_tensor *t) {
    uint64_t n = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) n *= (uint64_t)t->ne[d];
    return n;
}

static const char *human_count(char *buf, size_t n, uint64_t v) {
    if (v >= 1000000000ull) snprintf(buf, n, "%.2fB", v / 1e9);
    else if (v >= 1000000ull) snprintf(buf, n, "%.2fM", v / 1e6);
    else if (v >= 1000ull) snprintf(buf, n, "%.2fK", v / 1e3);
    else snprintf(buf, n, "%" PRIu64, v);
    return buf;
}

// ---- command ---------------------------------------------------------------------------------------------------

typedef struct {
    int n;
    uint64_t bytes, params;
} type_stat;

int cmd_info(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--plan")) return cmd_info_plan(argc, argv);  // placement plan: cmd_plan.c
    const char *path = NULL;
    bool tensors = false, json = false;
    uint64_t ctx_override = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--tensors")) {
            tensors = true;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model") || !strcmp(a, "--ctx")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "info: %s needs a value\n", a);
                return 2;
            }
            if (!strcmp(a, "--ctx")) {
                char *end;
                ctx_override = strtoull(argv[++i], &end, 10);
                if (*end || ctx_override == 0) {
                    fprintf(stderr, "info: --ctx '%s': expected a positive integer\n", argv[i]);
                    return 2;
                }
            } else {
                path = argv[++i];
            }
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "info: unknown option '%s' (see --help)\n", a);
            return 2;
        } else if (!path) {
            path = a;
        } else {
            fprintf(stderr, "info: more than one model path given ('%s' and '%s')\n", path, a);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "info: give a model: strata info -m FILE.gguf (see --help)\n");
        return 2;
    }
    gguf_ctx *ctx = gguf_open(path);
    if (!ctx) {
        fprintf(stderr, "info: %s\n", st_errmsg());
        return 1;
    }

    // Architecture and validation.
    char *arch = gguf_get_str_dup(ctx, "general.architecture");
    st_hparams hp;
    bool supported = arch && st_arch_from_name(arch) != ST_ARCH_UNKNOWN;
    bool valid = false;
    char problem[ST_ERR_MAX] = "";
    int n_unknown = 0;
    if (supported) {
        if (st_hparams_from_gguf(ctx, &hp) == 0 && st_arch_validate(ctx, &hp, path, &n_unknown) == 0) valid = true;
        else snprintf(problem, sizeof problem, "%s", st_errmsg());
    } else {
        snprintf(problem, sizeof problem, "architecture '%s' is not supported for inference (supported: llama, "
                 "qwen3, qwen3moe)", arch ? arch : "(missing general.architecture)");
    }

    // Per-type totals and file parameter count.
    type_stat stats[ST_TYPE_COUNT + 1];
    memset(stats, 0, sizeof stats);
    uint64_t file_params = 0;
    for (uint64_t i = 0; i < ctx->n_tensors; i++) {
        const gguf_tensor *t = &ctx->tensors[i];
        int ty = t->type >= 0 && t->type < ST_TYPE_COUNT ? t->type : ST_TYPE_COUNT;
        stats[ty].n++;
        stats[ty].bytes += t->nbytes;
        stats[ty].params += numel(t);
        file_params += numel(t);
    }
    uint64_t total = file_params, active = file_params, kv_bytes = 0, n_ctx = 0;
    if (valid) {
        st_hparams_param_count(&hp, &total, &active);
        // Tensors the architecture does not use (e.g. rope_freqs) still count towards the file's total.
        if (file_params > total) {
            active += file_params - total;
            total = file_params;
        }
        n_ctx = ctx_override ? ctx_override : hp.n_ctx_train;
        kv_bytes = st_hparams_kv_bytes(&hp, n_ctx, 2);
    }
    uint32_t file_type = 0;
    bool has_ft = gguf_find_kv(ctx, "general.file_type") && gguf_get_u32(ctx, "general.file_type", &file_type) == 0;

    FILE *f = stdout;
    char b1[32], b2[32], b3[32];
    if (json) {
        fprintf(f, "{\n  \"file\": ");
        json_str(f, path, strlen(path));
        fprintf(f, ",\n  \"version\": %u,\n  \"n_files\": %d,\n  \"architecture\": ", ctx->files[0].version,
                ctx->n_files);
        if (arch) json_str(f, arch, strlen(arch));
        else fputs("null", f);
        fprintf(f, ",\n  \"supported\": %s,\n  \"valid\": %s,\n  \"problem\": ", supported ? "true" : "false",
                valid ? "true" : "false");
        if (problem[0]) json_str(f, problem, strlen(problem));
        else fputs("null", f);
        fprintf(f, ",\n  \"file_type\": ");
        if (has_ft) json_str(f, st_ftype_name((int)file_type), strlen(st_ftype_name((int)file_type)));
        else fputs("null", f);
        fprintf(f, ",\n  \"metadata\": {");
        for (uint64_t i = 0; i < ctx->n_kv; i++) {
            const gguf_kv *kv = &ctx->kv[i];
            fprintf(f, "%s\n    ", i ? "," : "");
            json_str(f, kv->key.ptr, kv->key.len);
            fputs(": ", f);
            if (kv->value.type == GGUF_VT_ARRAY) {
                fprintf(f, "{\"array\": \"%s\", \"n\": %" PRIu64 ", \"head\": [",
                        gguf_vtype_name(kv->value.arr.elem_type), kv->value.arr.n);
                array_head(f, &kv->value, true, 8);
                fputs("]}", f);
            } else {
                scalar(f, &kv->value, true);
            }
        }
        fprintf(f, "\n  },\n  \"n_tensors\": %" PRIu64 ",\n  \"tensor_bytes\": %" PRIu64 ",\n  \"types\": {",
                ctx->n_tensors, ctx->total_bytes);
        bool first = true;
        for (int t = 0; t <= ST_TYPE_COUNT; t++) {
            if (!stats[t].n) continue;
            fprintf(f, "%s\n    \"%s\": {\"tensors\": %d, \"bytes\": %" PRIu64 ", \"params\": %" PRIu64 "}",
                    first ? "" : ",", t < ST_TYPE_COUNT ? st_type_name(t) : "?", stats[t].n, stats[t].bytes,
                    stats[t].params);
            first = false;
        }
        fprintf(f, "\n  },\n  \"params\": {\"file\": %" PRIu64 ", \"total\": %" PRIu64 ", \"active\": %" PRIu64 "}",
                file_params, total, active);
        if (valid) {
            fprintf(f,
                    ",\n  \"hparams\": {\"n_layer\": %u, \"n_ctx_train\": %u, \"n_embd\": %u, \"n_ff\": %u, "
                    "\"n_head\": %u, \"n_head_kv\": %u, \"head_dim_k\": %u, \"head_dim_v\": %u, \"n_rot\": %u, "
                    "\"n_vocab\": %u, \"rms_eps\": %.9g, \"rope_freq_base\": %.9g, \"rope_freq_scale\": %.9g, "
                    "\"rope_type\": \"%s\", \"n_expert\": %u, \"n_expert_used\": %u, \"n_ff_exp\": %u, "
                    "\"expert_weights_norm\": %s, \"tied_output\": %s, \"unknown_tensors\": %d}",
                    hp.n_layer, hp.n_ctx_train, hp.n_embd, hp.n_ff, hp.n_head, hp.n_head_kv, hp.head_dim_k,
                    hp.head_dim_v, hp.n_rot, hp.n_vocab, hp.rms_eps, hp.rope_freq_base, hp.rope_freq_scale,
                    hp.rope_type == ST_ROPE_NEOX ? "neox" : "norm", hp.n_expert, hp.n_expert_used, hp.n_ff_exp,
                    hp.expert_weights_norm ? "true" : "false", hp.tied_output ? "true" : "false", n_unknown);
            fprintf(f,
                    ",\n  \"memory\": {\"weights_bytes\": %" PRIu64 ", \"kv_cache_bytes\": %" PRIu64
                    ", \"kv_type\": \"F16\", \"n_ctx\": %" PRIu64 ", \"total_bytes\": %" PRIu64 "}",
                    ctx->total_bytes, kv_bytes, n_ctx, ctx->total_bytes + kv_bytes);
        }
        if (tensors) {
            fprintf(f, ",\n  \"tensors\": [");
            for (uint64_t i = 0; i < ctx->n_tensors; i++) {
                const gguf_tensor *t = &ctx->tensors[i];
                fprintf(f, "%s\n    {\"name\": ", i ? "," : "");
                json_str(f, t->name, strlen(t->name));
                fprintf(f, ", \"type\": \"%s\", \"shape\": [", st_type_name(t->type));
                for (uint32_t d = 0; d < t->n_dims; d++) fprintf(f, "%s%" PRId64, d ? ", " : "", t->ne[d]);
                fprintf(f, "], \"bytes\": %" PRIu64 ", \"offset\": %" PRIu64 "}", t->nbytes, t->offset);
            }
            fprintf(f, "\n  ]");
        }
        fprintf(f, "\n}\n");
    } else {
        fprintf(f, "file:          %s (GGUF v%u, %d file%s)\n", path, ctx->files[0].version, ctx->n_files,
                ctx->n_files == 1 ? "" : "s");
        fprintf(f, "architecture:  %s%s\n", arch ? arch : "(none)", supported ? "" : " (not supported for inference)");
        if (has_ft) fprintf(f, "file type:     %s (%u)\n", st_ftype_name((int)file_type), file_type);
        fprintf(f, "\nmetadata (%" PRIu64 " keys):\n", ctx->n_kv);
        for (uint64_t i = 0; i < ctx->n_kv; i++) {
            const gguf_kv *kv = &ctx->kv[i];
            fprintf(f, "  %-44.*s = ", (int)kv->key.len, kv->key.ptr);
            if (kv->value.type == GGUF_VT_ARRAY) {
                fprintf(f, "[%s x %" PRIu64 "]", gguf_vtype_name(kv->value.arr.elem_type), kv->value.arr.n);
                if (kv->value.arr.n) {
                    fputs(" ", f);
                    array_head(f, &kv->value, false, kv->value.arr.n <= 8 ? 8 : 5);
                    if (kv->value.arr.n > 8) fputs(", ...", f);
                }
            } else {
                scalar(f, &kv->value, false);
            }
            fputc('\n', f);
        }
        if (tensors) {
            fprintf(f, "\ntensors (%" PRIu64 "):\n", ctx->n_tensors);
            fprintf(f, "  %-40s %-8s %-28s %12s\n", "name", "type", "shape", "bytes");
            for (uint64_t i = 0; i < ctx->n_tensors; i++) {
                const gguf_tensor *t = &ctx->tensors[i];
                char shape[96];
                fmt_shape(shape, sizeof shape, t);
                fprintf(f, "  %-40s %-8s %-28s %12" PRIu64 "\n", t->name, st_type_name(t->type), shape, t->nbytes);
            }
        }
        fprintf(f, "\nbytes per type:\n");
        for (int t = 0; t <= ST_TYPE_COUNT; t++) {
            if (!stats[t].n) continue;
            fprintf(f, "  %-8s %5d tensors %12s %10s params\n", t < ST_TYPE_COUNT ? st_type_name(t) : "?",
                    stats[t].n, st_fmt_bytes(b1, sizeof b1, (double)stats[t].bytes),
                    human_count(b2, sizeof b2, stats[t].params));
        }
        fprintf(f, "  total    %5" PRIu64 " tensors %12s\n", ctx->n_tensors,
                st_fmt_bytes(b1, sizeof b1, (double)ctx->total_bytes));
        fprintf(f, "\nparameters:    %s total (%" PRIu64 ")", human_count(b1, sizeof b1, total), total);
        if (valid && hp.n_expert > 0)
            fprintf(f, ", %s active per token (%" PRIu64 "; %u of %u experts)", human_count(b2, sizeof b2, active),
                    active, hp.n_expert_used, hp.n_expert);
        fputc('\n', f);
        if (valid) {
            fprintf(f, "hparams:       %u layers, d %u, %u/%u heads of %u, %s%u vocab, ctx %u, rope %s base %g\n",
                    hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv, hp.head_dim_k, hp.tied_output ? "tied, " : "",
                    hp.n_vocab, hp.n_ctx_train, hp.rope_type == ST_ROPE_NEOX ? "neox" : "norm", hp.rope_freq_base);
            if (hp.n_expert > 0)
                fprintf(f, "experts:       %u, top-%u, FF %u%s\n", hp.n_expert, hp.n_expert_used, hp.n_ff_exp,
                        hp.expert_weights_norm ? ", weights renormalised" : "");
            fprintf(f, "memory:        %s weights + %s KV cache (F16, n_ctx %" PRIu64 "%s) = %s\n",
                    st_fmt_bytes(b1, sizeof b1, (double)ctx->total_bytes),
                    st_fmt_bytes(b2, sizeof b2, (double)kv_bytes), n_ctx, ctx_override ? "" : ", trained context",
                    st_fmt_bytes(b3, sizeof b3, (double)(ctx->total_bytes + kv_bytes)));
            if (n_unknown > 0) fprintf(f, "note:          %d tensor(s) not used by %s\n", n_unknown, arch);
        } else {
            fprintf(f, "memory:        %s weights (KV cache unknown)\n",
                    st_fmt_bytes(b1, sizeof b1, (double)ctx->total_bytes));
        }
        if (problem[0]) fprintf(f, "%s:       %s\n", supported ? "error" : "note ", problem);
    }
    int rc = supported && !valid ? 1 : 0;
    if (rc) fprintf(stderr, "info: %s\n", problem);
    free(arch);
    gguf_close(ctx);
    return rc;
}
