// A rich sample GGUF shared by the round-trip test and gguf_tool: every value type (nested arrays, empty arrays,
// empty strings, bools), tensors of several types with random bytes. Records what it set so readers can compare.
#ifndef STRATA_TESTS_GGUF_SAMPLE_H
#define STRATA_TESTS_GGUF_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "util/rng.h"

#define SAMPLE_NO_NESTED 1  // leave out arrays of arrays (llama.cpp's reader rejects them)
#define SAMPLE_MAX_KV 96
#define SAMPLE_MAX_T 16

typedef struct sample_kv {
    char key[64];
    gguf_value v;  // expected value, in the reader's representation (see gguf_value)
} sample_kv;

typedef struct sample {
    uint64_t seed;
    int n_kv;
    sample_kv kv[SAMPLE_MAX_KV];  // in the order the file stores them
    int n_t;
    struct {
        char name[64];
        int type;
        uint32_t n_dims;
        int64_t ne[4];
    } t[SAMPLE_MAX_T];
    void *allocs[1024];  // storage behind expected values
    int n_allocs;
} sample;

static void *sample_alloc(sample *s, size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (!p || s->n_allocs == 1024) abort();
    s->allocs[s->n_allocs++] = p;
    return p;
}

static void sample_free(sample *s) {
    for (int i = 0; i < s->n_allocs; i++) free(s->allocs[i]);
    s->n_allocs = 0;
}

// Records key -> v (replacing an earlier entry in place, as the writer does).
static void sample_expect(sample *s, const char *key, const gguf_value *v) {
    for (int i = 0; i < s->n_kv; i++)
        if (strcmp(s->kv[i].key, key) == 0) {
            s->kv[i].v = *v;
            return;
        }
    if (s->n_kv == SAMPLE_MAX_KV) abort();
    snprintf(s->kv[s->n_kv].key, sizeof s->kv[0].key, "%s", key);
    s->kv[s->n_kv++].v = *v;
}

static gguf_value sv_str(sample *s, const char *str) {
    gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = GGUF_VT_STRING;
    size_t n = strlen(str);
    char *p = sample_alloc(s, n);
    memcpy(p, str, n);
    v.str.ptr = p;
    v.str.len = n;
    return v;
}

static gguf_value sv_arr(gguf_vtype et, uint64_t n, const void *raw, gguf_value *items) {
    gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = GGUF_VT_ARRAY;
    v.arr.elem_type = et;
    v.arr.n = n;
    v.arr.raw = raw;
    v.arr.items = items;
    return v;
}

static gguf_value sv_i32s(sample *s, int n, const int32_t *vals) {
    uint8_t *raw = sample_alloc(s, (size_t)n * 4);
    if (n) memcpy(raw, vals, (size_t)n * 4);  // tests run on little-endian hosts, like GGUF
    return sv_arr(GGUF_VT_INT32, (uint64_t)n, raw, NULL);
}

static size_t sample_esize(gguf_vtype t) {
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
    default: return 8;
    }
}

// Builds the sample into w and records the expected metadata and tensors in s.
static void sample_build(gguf_writer *w, sample *s, uint64_t seed, int flags, uint32_t alignment) {
    memset(s, 0, sizeof *s);
    s->seed = seed;
    st_rng r;
    st_rng_init(&r, seed, 0);
    gguf_value v;
    memset(&v, 0, sizeof v);

    gguf_w_set_str(w, "general.architecture", "llama");
    v = sv_str(s, "llama");
    sample_expect(s, "general.architecture", &v);
    gguf_w_set_str(w, "general.name", "strata sample \xe2\x9c\x93");
    v = sv_str(s, "strata sample \xe2\x9c\x93");
    sample_expect(s, "general.name", &v);
    if (alignment != GGUF_DEFAULT_ALIGNMENT) {
        gguf_w_set_alignment(w, alignment);
        memset(&v, 0, sizeof v);
        v.type = GGUF_VT_UINT32;
        v.u64 = alignment;
        sample_expect(s, "general.alignment", &v);
    }

    // scalars through the typed setters
    uint64_t x = st_rng_u64(&r);
#define SCALAR(setter, key, vt, field, val)   \
    do {                                      \
        setter(w, key, val);                  \
        memset(&v, 0, sizeof v);              \
        v.type = vt;                          \
        v.field = val;                        \
        sample_expect(s, key, &v);            \
    } while (0)
    SCALAR(gguf_w_set_u8, "s.u8", GGUF_VT_UINT8, u64, (uint8_t)x);
    SCALAR(gguf_w_set_i8, "s.i8", GGUF_VT_INT8, i64, (int8_t)(-100 - (int)(x % 20)));
    SCALAR(gguf_w_set_u16, "s.u16", GGUF_VT_UINT16, u64, (uint16_t)(x >> 8));
    SCALAR(gguf_w_set_i16, "s.i16", GGUF_VT_INT16, i64, (int16_t)-31000);
    SCALAR(gguf_w_set_u32, "s.u32", GGUF_VT_UINT32, u64, (uint32_t)(x >> 16) | 0x80000000u);
    SCALAR(gguf_w_set_i32, "s.i32", GGUF_VT_INT32, i64, -(int32_t)(x >> 40) - 1);
    SCALAR(gguf_w_set_u64, "s.u64", GGUF_VT_UINT64, u64, x | (1ull << 63));
    SCALAR(gguf_w_set_i64, "s.i64", GGUF_VT_INT64, i64, -(int64_t)(x >> 2) - 1);
    float rf = st_rng_normal(&r) * 1000.0f;  // the macro evaluates its value twice: draw first
    double rd = (double)st_rng_normal(&r) * 1e-300;
    SCALAR(gguf_w_set_f32, "s.f32", GGUF_VT_FLOAT32, f64, (double)rf);
    SCALAR(gguf_w_set_f64, "s.f64", GGUF_VT_FLOAT64, f64, rd);
    SCALAR(gguf_w_set_bool, "s.bool_t", GGUF_VT_BOOL, u64, true);
    SCALAR(gguf_w_set_bool, "s.bool_f", GGUF_VT_BOOL, u64, false);
#undef SCALAR
    gguf_w_set_str(w, "s.str_empty", "");
    v = sv_str(s, "");
    sample_expect(s, "s.str_empty", &v);
    // replaced key: keeps its first position, takes the last value and type
    gguf_w_set_u32(w, "s.replaced", 1);
    gguf_w_set_str(w, "s.replaced", "final");
    v = sv_str(s, "final");
    sample_expect(s, "s.replaced", &v);

    // scalar arrays of every type, random lengths (0 included)
    static const gguf_vtype ets[] = {GGUF_VT_UINT8, GGUF_VT_INT8, GGUF_VT_UINT16, GGUF_VT_INT16, GGUF_VT_UINT32,
                                     GGUF_VT_INT32, GGUF_VT_FLOAT32, GGUF_VT_BOOL, GGUF_VT_UINT64, GGUF_VT_INT64,
                                     GGUF_VT_FLOAT64};
    for (size_t k = 0; k < sizeof ets / sizeof ets[0]; k++) {
        gguf_vtype et = ets[k];
        uint64_t n = st_rng_below(&r, 24);
        size_t es = sample_esize(et);
        uint8_t *raw = sample_alloc(s, (size_t)n * es);
        for (uint64_t i = 0; i < n; i++) {
            uint64_t bits = st_rng_u64(&r);
            if (et == GGUF_VT_BOOL) bits &= 1;
            if (et == GGUF_VT_FLOAT32) {
                float f = st_rng_normal(&r) * 100.0f;
                uint32_t u;
                memcpy(&u, &f, 4);
                bits = u;
            }
            if (et == GGUF_VT_FLOAT64) {
                double d = (double)st_rng_normal(&r) * 1e10;
                memcpy(&bits, &d, 8);
            }
            memcpy(raw + i * es, &bits, es);
        }
        char key[64];
        snprintf(key, sizeof key, "a.%s", gguf_vtype_name(et));
        gguf_w_set_arr(w, key, et, n, raw);
        v = sv_arr(et, n, raw, NULL);
        sample_expect(s, key, &v);
    }
    gguf_w_set_arr(w, "a.empty", GGUF_VT_UINT32, 0, NULL);
    v = sv_arr(GGUF_VT_UINT32, 0, NULL, NULL);
    sample_expect(s, "a.empty", &v);
    {
        const char *strs[] = {"", "a", "\xe2\x96\x81hello", "<|endoftext|>", "", "multi\nline"};
        int n = 6;
        gguf_w_set_arr_str(w, "a.strings", (uint64_t)n, strs);
        gguf_value *items = sample_alloc(s, (size_t)n * sizeof *items);
        for (int i = 0; i < n; i++) items[i] = sv_str(s, strs[i]);
        v = sv_arr(GGUF_VT_STRING, (uint64_t)n, NULL, items);
        sample_expect(s, "a.strings", &v);
        gguf_w_set_arr_str(w, "a.strings_empty", 0, NULL);
        v = sv_arr(GGUF_VT_STRING, 0, NULL, NULL);
        sample_expect(s, "a.strings_empty", &v);
    }

    if (!(flags & SAMPLE_NO_NESTED)) {
        // [[1, 2], [], [3]] of int32
        gguf_value *it = sample_alloc(s, 3 * sizeof *it);
        it[0] = sv_i32s(s, 2, (const int32_t[]){1, 2});
        it[1] = sv_i32s(s, 0, NULL);
        it[2] = sv_i32s(s, 1, (const int32_t[]){3});
        v = sv_arr(GGUF_VT_ARRAY, 3, NULL, it);
        gguf_w_set_value(w, "n.i32", &v);
        sample_expect(s, "n.i32", &v);
        // [["a", ""], ["b"]]
        gguf_value *ss = sample_alloc(s, 3 * sizeof *ss);
        ss[0] = sv_str(s, "a");
        ss[1] = sv_str(s, "");
        ss[2] = sv_str(s, "b");
        gguf_value *is = sample_alloc(s, 2 * sizeof *is);
        is[0] = sv_arr(GGUF_VT_STRING, 2, NULL, ss);
        is[1] = sv_arr(GGUF_VT_STRING, 1, NULL, ss + 2);
        v = sv_arr(GGUF_VT_ARRAY, 2, NULL, is);
        gguf_w_set_value(w, "n.str", &v);
        sample_expect(s, "n.str", &v);
        // [[[1]], [[2, 3]]] of int32, three levels
        gguf_value *l2 = sample_alloc(s, 2 * sizeof *l2);
        l2[0] = sv_i32s(s, 1, (const int32_t[]){1});
        l2[1] = sv_i32s(s, 2, (const int32_t[]){2, 3});
        gguf_value *l1 = sample_alloc(s, 2 * sizeof *l1);
        l1[0] = sv_arr(GGUF_VT_ARRAY, 1, NULL, l2);
        l1[1] = sv_arr(GGUF_VT_ARRAY, 1, NULL, l2 + 1);
        v = sv_arr(GGUF_VT_ARRAY, 2, NULL, l1);
        gguf_w_set_value(w, "n.deep", &v);
        sample_expect(s, "n.deep", &v);
        // an empty array of arrays
        v = sv_arr(GGUF_VT_ARRAY, 0, NULL, NULL);
        gguf_w_set_value(w, "n.empty", &v);
        sample_expect(s, "n.empty", &v);
    }

    // tensors
    struct {
        const char *name;
        int type;
        uint32_t n_dims;
        int64_t ne[4];
    } ts[] = {
        {"t.f32", ST_TYPE_F32, 2, {17, 3, 1, 1}},      {"t.f16", ST_TYPE_F16, 3, {8, 2, 3, 1}},
        {"t.bf16", ST_TYPE_BF16, 1, {5, 1, 1, 1}},     {"t.q4_0", ST_TYPE_Q4_0, 2, {64, 3, 1, 1}},
        {"t.q8_0", ST_TYPE_Q8_0, 3, {32, 2, 2, 1}},    {"t.q4_k", ST_TYPE_Q4_K, 2, {256, 2, 1, 1}},
        {"t.q6_k", ST_TYPE_Q6_K, 4, {256, 1, 1, 2}},   {"t.i32", ST_TYPE_I32, 1, {3, 1, 1, 1}},
        {"t.iq4_nl", ST_TYPE_IQ4_NL, 2, {32, 1, 1, 1}},
    };
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) {
        int idx = gguf_w_add_tensor(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne);
        if (idx != (int)i) abort();
        snprintf(s->t[i].name, sizeof s->t[i].name, "%s", ts[i].name);
        s->t[i].type = ts[i].type;
        s->t[i].n_dims = ts[i].n_dims;
        memcpy(s->t[i].ne, ts[i].ne, sizeof ts[i].ne);
        s->n_t++;
    }
}

// Tensor bytes: a random stream per tensor, so any thread can produce any tensor.
static void sample_bytes(uint64_t seed, int idx, uint8_t *dst, uint64_t n) {
    st_rng r;
    st_rng_init(&r, seed, 1000 + (uint64_t)idx);
    for (uint64_t i = 0; i < n; i += 8) {
        uint64_t x = st_rng_u64(&r);
        memcpy(dst + i, &x, n - i < 8 ? (size_t)(n - i) : 8);
    }
}

static int sample_fill(void *ud, int idx, void *dst, uint64_t nbytes) {
    sample_bytes(((sample *)ud)->seed, idx, dst, nbytes);
    return 0;
}

// Deep comparison in the reader's representation. Returns true when equal.
static inline bool sample_value_eq(const gguf_value *a, const gguf_value *b) {
    if (a->type != b->type) return false;
    switch (a->type) {
    case GGUF_VT_FLOAT32: case GGUF_VT_FLOAT64: return memcmp(&a->f64, &b->f64, 8) == 0;
    case GGUF_VT_STRING: return a->str.len == b->str.len && memcmp(a->str.ptr, b->str.ptr, (size_t)a->str.len) == 0;
    case GGUF_VT_ARRAY:
        if (a->arr.elem_type != b->arr.elem_type || a->arr.n != b->arr.n) return false;
        if (a->arr.elem_type == GGUF_VT_STRING || a->arr.elem_type == GGUF_VT_ARRAY) {
            for (uint64_t i = 0; i < a->arr.n; i++)
                if (!sample_value_eq(&a->arr.items[i], &b->arr.items[i])) return false;
            return true;
        }
        return a->arr.n == 0 || memcmp(a->arr.raw, b->arr.raw, (size_t)a->arr.n * sample_esize(a->arr.elem_type)) == 0;
    default: return a->u64 == b->u64;
    }
}

#endif
