// Private helpers shared by the GGUF reader and writer: a string->index hash map and small byte-size facts.
#ifndef STRATA_GGUF_INTERNAL_H
#define STRATA_GGUF_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

// Deepest array nesting we accept (an array of arrays is depth 2). Real files use 1; the limit keeps the
// recursive parser's stack bounded on hostile input.
#define GGUF_MAX_ARRAY_DEPTH 8
// llama.cpp stores tensor names in a 64-byte field (GGML_MAX_NAME), so longer names make files it rejects.
#define GGUF_MAX_NAME 64

// Open-addressing hash map from byte strings (not owned, must outlive the map) to uint64 values.
typedef struct gg_map_slot {
    const char *key;   // NULL = empty slot
    uint64_t len;
    uint64_t hash;
    uint64_t value;
} gg_map_slot;

typedef struct gg_map {
    gg_map_slot *slots;  // [cap], cap a power of two, kept at most half full
    uint64_t cap;
    uint64_t count;
} gg_map;

uint64_t gg_hash(const char *s, uint64_t len);
// Finds key; returns true and sets *value when present.
bool gg_map_get(const gg_map *m, const char *key, uint64_t len, uint64_t *value);
// Inserts key if absent. Returns 1 if inserted, 0 if it was already there (*existing set), -1 on out of memory.
int gg_map_put(gg_map *m, const char *key, uint64_t len, uint64_t value, uint64_t *existing);
void gg_map_free(gg_map *m);

// Bytes of one scalar of type t; 0 for STRING, ARRAY and unknown types.
size_t gg_vtype_size(gguf_vtype t);

#endif
