// GGUF files: a validating reader over read-only mappings (v2 and v3, split models) and a writer.
//
// Reading never trusts the file: every length, count, offset and dimension is checked against the bytes that
// exist before it is used, allocations are bounded by the file size, and every failure returns -1 with a message
// naming the file, the byte offset and what is wrong (see st_errmsg).
#ifndef STRATA_GGUF_GGUF_H
#define STRATA_GGUF_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/fileio.h"

#define GGUF_MAGIC 0x46554747u  // "GGUF" little-endian
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

typedef enum gguf_vtype {
    GGUF_VT_UINT8 = 0,
    GGUF_VT_INT8 = 1,
    GGUF_VT_UINT16 = 2,
    GGUF_VT_INT16 = 3,
    GGUF_VT_UINT32 = 4,
    GGUF_VT_INT32 = 5,
    GGUF_VT_FLOAT32 = 6,
    GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8,
    GGUF_VT_ARRAY = 9,
    GGUF_VT_UINT64 = 10,
    GGUF_VT_INT64 = 11,
    GGUF_VT_FLOAT64 = 12,
    GGUF_VT_COUNT
} gguf_vtype;

const char *gguf_vtype_name(gguf_vtype t);  // "uint32", "array", ...

// A string inside the mapping: not NUL-terminated, may contain any bytes.
typedef struct gguf_str {
    const char *ptr;
    uint64_t len;
} gguf_str;

typedef struct gguf_value gguf_value;
struct gguf_value {
    gguf_vtype type;
    union {
        uint64_t u64;   // UINT8/16/32/64 (zero-extended), BOOL (0/1)
        int64_t i64;    // INT8/16/32/64 (sign-extended)
        double f64;     // FLOAT32/64
        gguf_str str;   // STRING
        struct {
            gguf_vtype elem_type;
            uint64_t n;
            const uint8_t *raw;   // scalar elements: n packed little-endian values in the mapping (maybe unaligned)
            gguf_value *items;    // STRING or ARRAY elements: n decoded values (allocated); NULL otherwise
        } arr;
    };
};

typedef struct gguf_kv {
    gguf_str key;
    gguf_value value;
    uint64_t offset;  // byte offset of the key in its file (for messages)
} gguf_kv;

typedef struct gguf_tensor {
    char *name;                  // NUL-terminated copy
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];   // elements per dim, ne[0] contiguous (row length); unused dims are 1
    int type;                    // st_type
    uint64_t offset;             // relative to its file's data section
    uint64_t nbytes;             // st_row_size(type, ne[0]) * ne[1] * ne[2] * ne[3]
    const uint8_t *data;         // the bytes in the mapping
    int file;                    // index into gguf_ctx.files (split models)
} gguf_tensor;

typedef struct gguf_file {
    char *path;
    st_mapping map;
    uint32_t version;            // 2 or 3
    uint64_t alignment;
    uint64_t data_offset;        // start of the tensor data section in this file
} gguf_file;

// A model: one file, or all parts of a split model merged (metadata from part 1, tensors from every part).
typedef struct gguf_ctx {
    int n_files;
    gguf_file *files;            // [n_files]
    uint64_t n_kv;
    gguf_kv *kv;                 // [n_kv] from the first file
    uint64_t n_tensors;
    gguf_tensor *tensors;        // [n_tensors], in file order
    uint64_t total_bytes;        // sum of tensor nbytes
    void *index;                 // name -> tensor hash (private)
    void *arena;                 // allocations (private)
} gguf_ctx;

// Opens a GGUF file. A path like NAME-00001-of-00003.gguf (or split.count metadata) opens every part.
// Returns NULL with st_errmsg on any defect.
gguf_ctx *gguf_open(const char *path);
// Same, from bytes already in memory (tests and the fuzzer); `name` is used in messages. Never opens splits.
gguf_ctx *gguf_open_memory(const void *data, size_t size, const char *name);
void gguf_close(gguf_ctx *ctx);

// Metadata lookup. NULL / -1 when missing. Typed getters convert between integer widths when the value fits
// and fail with a message naming the key otherwise.
const gguf_kv *gguf_find_kv(const gguf_ctx *ctx, const char *key);
int gguf_get_u32(const gguf_ctx *ctx, const char *key, uint32_t *out);
int gguf_get_u64(const gguf_ctx *ctx, const char *key, uint64_t *out);
int gguf_get_i64(const gguf_ctx *ctx, const char *key, int64_t *out);
int gguf_get_f32(const gguf_ctx *ctx, const char *key, float *out);
int gguf_get_bool(const gguf_ctx *ctx, const char *key, bool *out);
// Returns a malloc'd NUL-terminated copy (caller frees), or NULL.
char *gguf_get_str_dup(const gguf_ctx *ctx, const char *key);
// Array element access (i < arr.n; element type must be a scalar): converted to the requested type.
int64_t gguf_arr_i64(const gguf_value *v, uint64_t i);
double gguf_arr_f64(const gguf_value *v, uint64_t i);

const gguf_tensor *gguf_find_tensor(const gguf_ctx *ctx, const char *name);

// ---- writer ---------------------------------------------------------------------------------------------------

typedef struct gguf_writer gguf_writer;

gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);
// Setting a key that exists replaces it. Strings are copied.
void gguf_w_set_u8(gguf_writer *w, const char *key, uint8_t v);
void gguf_w_set_i8(gguf_writer *w, const char *key, int8_t v);
void gguf_w_set_u16(gguf_writer *w, const char *key, uint16_t v);
void gguf_w_set_i16(gguf_writer *w, const char *key, int16_t v);
void gguf_w_set_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_w_set_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_w_set_u64(gguf_writer *w, const char *key, uint64_t v);
void gguf_w_set_i64(gguf_writer *w, const char *key, int64_t v);
void gguf_w_set_f32(gguf_writer *w, const char *key, float v);
void gguf_w_set_f64(gguf_writer *w, const char *key, double v);
void gguf_w_set_bool(gguf_writer *w, const char *key, bool v);
void gguf_w_set_str(gguf_writer *w, const char *key, const char *v);
// Array of scalars: `data` holds n packed values of elem_type (copied).
void gguf_w_set_arr(gguf_writer *w, const char *key, gguf_vtype elem_type, uint64_t n, const void *data);
void gguf_w_set_arr_str(gguf_writer *w, const char *key, uint64_t n, const char *const *strs);
// Copies any value (nested arrays included) read by the reader, e.g. a tokenizer from another model.
void gguf_w_set_value(gguf_writer *w, const char *key, const gguf_value *v);
void gguf_w_set_alignment(gguf_writer *w, uint32_t alignment);  // also writes general.alignment if != 32
void gguf_w_set_version(gguf_writer *w, uint32_t version);       // 3 by default; 2 for tests

// Declares a tensor; data comes later through the fill callback. Returns its index or -1 (bad type/shape).
int gguf_w_add_tensor(gguf_writer *w, const char *name, int type, uint32_t n_dims, const int64_t *ne);

// Called for each tensor (possibly from several threads at once): fill `dst` (nbytes) with its data.
typedef int (*gguf_fill_fn)(void *ud, int tensor_index, void *dst, uint64_t nbytes);

// Writes the file: header, metadata, tensor infos, then tensor data filled in parallel by n_threads
// (<= 0: all CPUs), with progress on stderr when `progress_label` is non-NULL. Returns 0 or -1.
int gguf_w_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *ud, int n_threads,
                 const char *progress_label);

#endif
