// libFuzzer target: gguf_open_memory on arbitrary bytes, then every lookup and accessor on what it returns.
// A failed open must leave a message; a successful one must be self-consistent (checked with __builtin_trap so
// the fuzzer reports it as a crash). Also linked with replay_main.c into a plain test that replays the corpus.
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "util/err.h"

#define REQUIRE(c) \
    do {           \
        if (!(c)) __builtin_trap(); \
    } while (0)

static volatile uint64_t g_sink;

static void walk(const gguf_value *v, int depth) {
    REQUIRE(depth <= 16);
    switch (v->type) {
    case GGUF_VT_STRING:
        if (v->str.len) g_sink += (uint8_t)v->str.ptr[0] + (uint8_t)v->str.ptr[v->str.len - 1];
        break;
    case GGUF_VT_ARRAY:
        if (v->arr.elem_type == GGUF_VT_STRING || v->arr.elem_type == GGUF_VT_ARRAY) {
            REQUIRE(v->arr.n == 0 || v->arr.items != NULL);
            for (uint64_t i = 0; i < v->arr.n; i++) {
                REQUIRE(v->arr.items[i].type == v->arr.elem_type);
                walk(&v->arr.items[i], depth + 1);
            }
        } else if (v->arr.n) {
            g_sink += (uint64_t)gguf_arr_i64(v, 0) + (uint64_t)gguf_arr_i64(v, v->arr.n - 1);
            double d = gguf_arr_f64(v, v->arr.n - 1);
            g_sink += d == d;
        }
        break;
    default: break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_err_clear();
    gguf_ctx *c = gguf_open_memory(data, size, "fuzz.gguf");
    if (!c) {
        REQUIRE(st_errmsg()[0] != '\0');
        return 0;
    }
    char key[4096];
    for (uint64_t i = 0; i < c->n_kv; i++) {
        const gguf_kv *kv = &c->kv[i];
        REQUIRE(kv->key.len > 0 && kv->offset < size);
        walk(&kv->value, 0);
        if (kv->key.len >= sizeof key) continue;
        memcpy(key, kv->key.ptr, (size_t)kv->key.len);
        key[kv->key.len] = '\0';
        REQUIRE(gguf_find_kv(c, key) == kv);
        uint32_t u32;
        uint64_t u64;
        int64_t i64;
        float f;
        bool b;
        g_sink += (uint64_t)gguf_get_u32(c, key, &u32) + (uint64_t)gguf_get_u64(c, key, &u64) +
                  (uint64_t)gguf_get_i64(c, key, &i64) + (uint64_t)gguf_get_f32(c, key, &f) +
                  (uint64_t)gguf_get_bool(c, key, &b);
        char *s = gguf_get_str_dup(c, key);
        REQUIRE((s != NULL) == (kv->value.type == GGUF_VT_STRING));
        free(s);
    }
    uint64_t total = 0;
    for (uint64_t i = 0; i < c->n_tensors; i++) {
        const gguf_tensor *t = &c->tensors[i];
        REQUIRE(gguf_find_tensor(c, t->name) == t);
        REQUIRE(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS && t->nbytes > 0);
        REQUIRE(t->data >= data && t->nbytes <= size && t->data + t->nbytes <= data + size);
        g_sink += t->data[0] + t->data[t->nbytes - 1];
        total += t->nbytes;
    }
    REQUIRE(total == c->total_bytes);
    REQUIRE(gguf_find_kv(c, "strata.fuzz.absent") == NULL || c->n_kv > 0);
    gguf_close(c);
    return 0;
}
