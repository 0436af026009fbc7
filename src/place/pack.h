// The native pack file: every routed expert of a MoE model in the layout the hybrid engine reads, written once by
// `strata pack` and mapped read-only (MAP_SHARED) by the host expert arena's mmap mode.
//
// Layout (little-endian; docs/HYBRID.md has the picture):
//   [0, 128)            header
//     0   char[8]  magic "STRPACK\0"
//     8   u32      version (1)
//     12  u32      header_bytes = 128 + 64 * n_layer (fixed header + layer table)
//     16  u64      model fingerprint (st_model_fingerprint)
//     24  u32      n_layer          28  u32  n_expert
//     32  u32      n_embd           36  u32  n_ff_exp
//     40  u32      part alignment (256)      44  u32  record alignment (4096)
//     48  u64      data_offset = header_bytes rounded up to 4096
//     56  u64      data_bytes  = sum over layers of n_expert * record_bytes
//     64  u64      file_bytes  = data_offset + data_bytes
//     72  u32      arch (st_arch)   76  u32  layer entry bytes (64)
//     80  u8[40]   zero
//     120 u64      header hash: FNV-1a 64 of bytes [0, header_bytes) with this field read as zero
//   [128, header_bytes)  layer table, 64 bytes per layer
//     0   u32[3]   types of gate, up, down (st_type)     12  u32  zero
//     16  u64[3]   bytes of one expert's gate, up, down part
//     40  u64      record_bytes: the parts at offsets 0, align256(gate), + align256(up), whole record rounded up
//                  to 4096 so each record can be mapped / registered page-wise
//     48  u64      layer_offset: absolute file offset of the layer's expert 0 (records of a layer are consecutive,
//                  layers follow each other from data_offset)
//     56  u64      zero
//   [data_offset, file_bytes)  records: layer-major, expert-minor; record (l, e) at layer_offset(l) + e * record_bytes
//
// The reader never trusts the file: sizes are recomputed from the types and checked, offsets are checked for
// overflow and against the file size, and every mismatch with the model names the file and the field.
#ifndef STRATA_PLACE_PACK_H
#define STRATA_PLACE_PACK_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/model.h"
#include "place/plan.h"
#include "util/fileio.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ST_PACK_MAGIC "STRPACK"      // 7 chars + NUL = 8 bytes
#define ST_PACK_VERSION 1u
#define ST_PACK_HEADER_FIXED 128u
#define ST_PACK_LAYER_ENTRY 64u
#define ST_PACK_PART_ALIGN 256u
#define ST_PACK_RECORD_ALIGN 4096u

// One layer of the pack: the native expert layout plus where its records are.
typedef struct st_pack_layer {
    st_xlayer x;              // types, part bytes, part offsets in a record
    uint64_t record_bytes;    // x.slot_bytes rounded up to ST_PACK_RECORD_ALIGN
    uint64_t offset;          // absolute file offset of expert 0
} st_pack_layer;

// A parsed, structurally valid header.
typedef struct st_pack_info {
    uint64_t fingerprint;
    uint32_t version, arch, n_layer, n_expert, n_embd, n_ff_exp;
    uint64_t header_bytes, data_offset, data_bytes, file_bytes;
    st_pack_layer *layers;    // [n_layer]
} st_pack_info;

// Hash of what the pack's bytes depend on: architecture, hyperparameters, and for every expert stack its name,
// type, shape, data offset and size in the GGUF, and the first 4 KiB of its data (so a re-quantized or regenerated
// file of the same shape is told apart). Stable across runs and machines.
uint64_t st_model_fingerprint(const st_model *m);

// The pack layout this model would get (layers' types, record sizes, offsets). -1 for dense models.
int st_pack_layout(const st_model *m, st_pack_info *out);
void st_pack_info_free(st_pack_info *pi);

// Parses and checks a header in memory (size: bytes available, the whole file for a full check). Structure only:
// no model needed. -1 with a message naming `name` and the field.
int st_pack_parse(const uint8_t *data, uint64_t size, const char *name, st_pack_info *out);
// Checks a parsed header against the model: shape, per-layer types and sizes, fingerprint. -1 naming the field.
int st_pack_check_model(const st_pack_info *pi, const st_model *m, const char *name);

// Encodes pi's header and layer table into h[0, pi->data_offset) (zero-padded, hash filled in). The writer uses it;
// tests and the fuzzer's seed corpus use it to build small packs.
void st_pack_encode_header(const st_pack_info *pi, uint8_t *h);

// Writes the pack (to path.tmp, renamed at the end) with progress lines on stderr unless quiet.
int st_pack_write(const st_model *m, const char *path, bool quiet);

// An open pack: the file mapped read-only (MAP_SHARED), validated against the model.
typedef struct st_pack {
    char *path;
    st_mapping map;
    st_pack_info info;
} st_pack;

st_pack *st_pack_open(const char *path, const st_model *m);
void st_pack_close(st_pack *p);
// Record (l, e): gate at +x.off[0], up at +x.off[1], down at +x.off[2].
static inline const uint8_t *st_pack_record(const st_pack *p, uint32_t l, uint32_t e) {
    return p->map.data + p->info.layers[l].offset + (uint64_t)e * p->info.layers[l].record_bytes;
}

#ifdef __cplusplus
}
#endif

#endif
