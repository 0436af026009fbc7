// Shared by reader and writer: value type names/sizes and the string hash map.
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_internal.h"

const char *gguf_vtype_name(gguf_vtype t) {
    static const char *const names[GGUF_VT_COUNT] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool",  "string", "array", "uint64", "int64", "float64",
    };
    return (unsigned)t < GGUF_VT_COUNT ? names[t] : "unknown";
}

size_t gg_vtype_size(gguf_vtype t) {
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
    case GGUF_VT_UINT64: case GGUF_VT_INT64: case GGUF_VT_FLOAT64: return 8;
    default: return 0;
    }
}

// FNV-1a, then a final avalanche so the low bits used for the slot index are well mixed.
uint64_t gg_hash(const char *s, uint64_t len) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t i = 0; i < len; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static gg_map_slot *find_slot(gg_map_slot *slots, uint64_t cap, const char *key, uint64_t len, uint64_t h) {
    uint64_t mask = cap - 1;
    for (uint64_t i = h & mask;; i = (i + 1) & mask) {
        gg_map_slot *s = &slots[i];
        if (!s->key) return s;
        if (s->hash == h && s->len == len && memcmp(s->key, key, (size_t)len) == 0) return s;
    }
}

bool gg_map_get(const gg_map *m, const char *key, uint64_t len, uint64_t *value) {
    if (m->cap == 0) return false;
    gg_map_slot *s = find_slot(m->slots, m->cap, key, len, gg_hash(key, len));
    if (!s->key) return false;
    if (value) *value = s->value;
    return true;
}

static int grow(gg_map *m) {
    uint64_t cap = m->cap ? m->cap * 2 : 16;
    gg_map_slot *slots = calloc((size_t)cap, sizeof *slots);
    if (!slots) return -1;
    for (uint64_t i = 0; i < m->cap; i++) {
        gg_map_slot *o = &m->slots[i];
        if (o->key) *find_slot(slots, cap, o->key, o->len, o->hash) = *o;
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return 0;
}

int gg_map_put(gg_map *m, const char *key, uint64_t len, uint64_t value, uint64_t *existing) {
    if ((m->count + 1) * 2 > m->cap && grow(m) != 0) return -1;
    uint64_t h = gg_hash(key, len);
    gg_map_slot *s = find_slot(m->slots, m->cap, key, len, h);
    if (s->key) {
        if (existing) *existing = s->value;
        return 0;
    }
    s->key = key;
    s->len = len;
    s->hash = h;
    s->value = value;
    m->count++;
    return 1;
}

void gg_map_free(gg_map *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}
