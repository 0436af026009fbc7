// Test helper for the Python interop test:
//   gguf_tool write-sample OUT SEED [--v2] [--align N] [--no-nested]   writes the sample model (sample.h)
//   gguf_tool dump FILE                                                 prints what our reader sees, as JSON
//   gguf_tool copy IN OUT [THREADS]                                     re-writes a model through reader + writer
#include <math.h>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "sample.h"
#include "util/err.h"

static void json_str(const char *p, uint64_t n) {
    putchar('"');
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);  // UTF-8 passes through
    }
    putchar('"');
}

static void json_double(double d) {
    if (isnan(d)) printf("NaN");
    else if (isinf(d)) printf(d > 0 ? "Infinity" : "-Infinity");
    else printf("%.17g", d);
}

static void json_value(const gguf_value *v) {
    switch (v->type) {
    case GGUF_VT_UINT8: case GGUF_VT_UINT16: case GGUF_VT_UINT32: case GGUF_VT_UINT64:
        printf("%llu", (unsigned long long)v->u64);
        break;
    case GGUF_VT_INT8: case GGUF_VT_INT16: case GGUF_VT_INT32: case GGUF_VT_INT64:
        printf("%lld", (long long)v->i64);
        break;
    case GGUF_VT_BOOL: printf(v->u64 ? "true" : "false"); break;
    case GGUF_VT_FLOAT32: case GGUF_VT_FLOAT64: json_double(v->f64); break;
    case GGUF_VT_STRING: json_str(v->str.ptr, v->str.len); break;
    case GGUF_VT_ARRAY: {
        printf("{\"elem\": \"%s\", \"items\": [", gguf_vtype_name(v->arr.elem_type));
        for (uint64_t i = 0; i < v->arr.n; i++) {
            if (i) printf(", ");
            gguf_vtype et = v->arr.elem_type;
            if (et == GGUF_VT_STRING || et == GGUF_VT_ARRAY) json_value(&v->arr.items[i]);
            else if (et == GGUF_VT_FLOAT32 || et == GGUF_VT_FLOAT64) json_double(gguf_arr_f64(v, i));
            else if (et == GGUF_VT_BOOL) printf(gguf_arr_i64(v, i) ? "true" : "false");
            else if (et == GGUF_VT_UINT64) printf("%llu", (unsigned long long)gguf_arr_i64(v, i));
            else printf("%lld", (long long)gguf_arr_i64(v, i));
        }
        printf("]}");
        break;
    }
    default: printf("null");
    }
}

static uint64_t fnv(const uint8_t *p, uint64_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static int dump(const char *path) {
    gguf_ctx *c = gguf_open(path);
    if (!c) {
        fprintf(stderr, "%s\n", st_errmsg());
        return 1;
    }
    printf("{\"version\": %u, \"alignment\": %llu, \"data_offset\": %llu, \"n_files\": %d,\n \"kv\": [\n",
           c->files[0].version, (unsigned long long)c->files[0].alignment, (unsigned long long)c->files[0].data_offset,
           c->n_files);
    for (uint64_t i = 0; i < c->n_kv; i++) {
        printf("  {\"key\": ");
        json_str(c->kv[i].key.ptr, c->kv[i].key.len);
        printf(", \"type\": \"%s\", \"value\": ", gguf_vtype_name(c->kv[i].value.type));
        json_value(&c->kv[i].value);
        printf("}%s\n", i + 1 < c->n_kv ? "," : "");
    }
    printf(" ],\n \"tensors\": [\n");
    for (uint64_t i = 0; i < c->n_tensors; i++) {
        const gguf_tensor *t = &c->tensors[i];
        printf("  {\"name\": ");
        json_str(t->name, strlen(t->name));
        printf(", \"type\": %d, \"ne\": [", t->type);
        for (uint32_t d = 0; d < t->n_dims; d++) printf("%s%lld", d ? ", " : "", (long long)t->ne[d]);
        printf("], \"file\": %d, \"offset\": %llu, \"nbytes\": %llu, \"fnv\": \"%016llx\"}%s\n", t->file,
               (unsigned long long)t->offset, (unsigned long long)t->nbytes,
               (unsigned long long)fnv(t->data, t->nbytes), i + 1 < c->n_tensors ? "," : "");
    }
    printf(" ]}\n");
    gguf_close(c);
    return 0;
}

static int copy_fill(void *ud, int idx, void *dst, uint64_t nbytes) {
    memcpy(dst, ((const gguf_ctx *)ud)->tensors[idx].data, nbytes);
    return 0;
}

static int copy(const char *in, const char *out, int threads) {
    gguf_ctx *c = gguf_open(in);
    if (!c) {
        fprintf(stderr, "%s\n", st_errmsg());
        return 1;
    }
    gguf_writer *w = gguf_writer_new();
    gguf_w_set_version(w, c->files[0].version);
    for (uint64_t i = 0; i < c->n_kv; i++) {
        char *key = strndup(c->kv[i].key.ptr, (size_t)c->kv[i].key.len);
        gguf_w_set_value(w, key, &c->kv[i].value);
        free(key);
    }
    for (uint64_t i = 0; i < c->n_tensors; i++) {
        const gguf_tensor *t = &c->tensors[i];
        if (gguf_w_add_tensor(w, t->name, t->type, t->n_dims, t->ne) < 0) {
            fprintf(stderr, "%s\n", st_errmsg());
            return 1;
        }
    }
    int rc = gguf_w_write(w, out, copy_fill, c, threads, "copy");
    if (rc) fprintf(stderr, "%s\n", st_errmsg());
    gguf_writer_free(w);
    gguf_close(c);
    return rc ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "dump") == 0) return dump(argv[2]);
    if (argc >= 4 && strcmp(argv[1], "copy") == 0) return copy(argv[2], argv[3], argc > 4 ? atoi(argv[4]) : 0);
    if (argc >= 4 && strcmp(argv[1], "write-sample") == 0) {
        int flags = 0;
        uint32_t align = GGUF_DEFAULT_ALIGNMENT, version = 3;
        for (int i = 4; i < argc; i++) {
            if (strcmp(argv[i], "--v2") == 0) version = 2;
            else if (strcmp(argv[i], "--no-nested") == 0) flags |= SAMPLE_NO_NESTED;
            else if (strcmp(argv[i], "--align") == 0 && i + 1 < argc) align = (uint32_t)atoi(argv[++i]);
        }
        gguf_writer *w = gguf_writer_new();
        gguf_w_set_version(w, version);
        sample s;
        sample_build(w, &s, strtoull(argv[3], NULL, 0), flags, align);
        int rc = gguf_w_write(w, argv[2], sample_fill, &s, 2, NULL);
        if (rc) fprintf(stderr, "%s\n", st_errmsg());
        gguf_writer_free(w);
        sample_free(&s);
        return rc ? 1 : 0;
    }
    fprintf(stderr, "usage: gguf_tool write-sample OUT SEED [--v2] [--align N] [--no-nested] | dump FILE | copy IN OUT [THREADS]\n");
    return 2;
}
