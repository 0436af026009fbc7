// The host expert arena: every routed expert of a MoE model in the native layout (place/pack.h: per layer, per
// expert, gate|up|down, parts 256-aligned, records 4096-aligned), reachable by (layer, expert) pointers. The GPU
// reads experts that miss its VRAM cache from here (zero-copy over PCIe, or copied into a cache slot) and the CPU
// miss workers compute from here.
//
// Two modes:
//   ANON: built from the GGUF at load into anonymous memory, allocated in chunks (256 MiB by default, whole
//         records per chunk) rather than one giant allocation, so page-locking can go chunk by chunk (one huge
//         cudaHostRegister / cudaMallocHost fails on some systems). Costs anonymous RSS = the arena size.
//   MMAP: the pack file (`strata pack`) mapped read-only, MAP_SHARED: the arena costs page cache, not anonymous
//         memory, so a machine with little free RAM still runs (the kernel drops and re-reads pages as needed).
//         Chosen with STRATA_ARENA_MMAP=1 or --arena-mmap.
// Both give the same bytes at the same offsets within each record (tests/place checks byte equality).
#ifndef STRATA_PLACE_ARENA_H
#define STRATA_PLACE_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"
#include "place/pack.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum st_arena_mode {
    ST_ARENA_AUTO = 0,  // MMAP when STRATA_ARENA_MMAP=1 is set, else ANON
    ST_ARENA_ANON = 1,
    ST_ARENA_MMAP = 2,
} st_arena_mode;

#define ST_ARENA_CHUNK_DEFAULT (256ull << 20)

// Called once per chunk (ANON) or per mapped range (MMAP) when the arena is complete, e.g. to page-lock it with
// cudaHostRegister (MMAP ranges are read-only: cudaHostRegisterReadOnly where the driver supports it, see
// docs/HYBRID.md for the fallback). p is page-aligned, n a multiple of 4096. Return 0, or -1 with st_errmsg to fail
// the build. unregister_chunk (optional) is called for every range that registered, before the arena is freed.
typedef int (*st_arena_register_fn)(void *p, size_t n, void *ud);
typedef void (*st_arena_unregister_fn)(void *p, size_t n, void *ud);

typedef struct st_arena_opts {
    st_arena_mode mode;
    const char *pack_path;            // MMAP: the pack file (required); ANON: ignored
    uint64_t chunk_bytes;             // 0: ST_ARENA_CHUNK_DEFAULT; a chunk always holds at least one record
    st_arena_register_fn register_chunk;      // NULL: no registration (CPU build)
    st_arena_unregister_fn unregister_chunk;
    void *ud;
    bool quiet;                       // no progress lines
} st_arena_opts;

// A contiguous piece of the arena: ANON chunks own their memory; MMAP ranges point into the mapping.
typedef struct st_arena_chunk {
    uint8_t *p;
    size_t bytes;
    bool registered;
} st_arena_chunk;

typedef struct st_arena {
    st_arena_mode mode;              // ANON or MMAP (never AUTO)
    uint32_t n_layer, n_expert;
    st_pack_layer *layers;           // [n_layer] layout: part offsets within a record, record sizes
    const uint8_t **rec;             // [n_layer * n_expert] record (l, e) at rec[l * n_expert + e]
    int n_chunks;
    st_arena_chunk *chunks;          // [n_chunks]
    uint64_t bytes;                  // sum of record bytes (== the pack's data_bytes)
    st_pack *pack;                   // MMAP: the open pack
    st_arena_unregister_fn unregister_chunk;
    void *ud;
} st_arena;

// Builds the arena for a MoE model. NULL with st_errmsg (dense model, MMAP without a pack: says to run
// strata pack, pack mismatch, out of memory, registration failure).
st_arena *st_arena_create(const st_model *m, const st_arena_opts *o);
void st_arena_free(st_arena *a);

// Expert e of layer l: part 0 gate [n_ff_exp rows of n_embd], 1 up (same), 2 down [n_embd rows of n_ff_exp], each
// in the GGUF block format of its stack's type (layers[l].x.type[part]), rows consecutive.
static inline const uint8_t *st_arena_part(const st_arena *a, uint32_t l, uint32_t e, int part) {
    return a->rec[(uint64_t)l * a->n_expert + e] + a->layers[l].x.off[part];
}

// ST_ARENA_MMAP when STRATA_ARENA_MMAP is set to something other than "" or "0", else ST_ARENA_ANON.
st_arena_mode st_arena_mode_from_env(void);
const char *st_arena_mode_name(st_arena_mode m);  // "anonymous", "mmap"

// A resident-memory field of /proc/self/status ("RssAnon", "RssFile", ...) in bytes; -1 where unavailable.
int64_t st_rss_bytes(const char *field);
// The process's anonymous resident memory (RssAnon) in bytes; -1 where unavailable.
int64_t st_rss_anon_bytes(void);

#ifdef __cplusplus
}
#endif

#endif
