// GGUF reader: validates every field against the bytes that exist before using it.
//
// Format facts (from the GGUF spec in ggml's docs and ggml/src/gguf.cpp): little-endian; header = magic "GGUF",
// u32 version, u64 n_tensors, u64 n_kv (v2+; v1 used u32 counts); kv = string key, u32 type, value; string = u64
// length + bytes; array = u32 element type, u64 count, elements; tensor info = name, u32 n_dims, n_dims x i64 ne,
// u32 type, u64 offset (relative to the data section); the data section starts at the end of the infos rounded up
// to general.alignment (u32, default 32). Split models (llama.cpp gguf-split) are named PREFIX-%05d-of-%05d.gguf and
// carry split.no (0-based), split.count and split.tensors.count (total over all parts) in every part.
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf_internal.h"
#include "quant/quant.h"
#include "util/err.h"

typedef unsigned long long ull;

// ---- private context state -------------------------------------------------------------------------------------

typedef struct ar_node {
    struct ar_node *next;
} ar_node;

// Header size rounded so the payload keeps malloc's alignment.
#define AR_HDR ((sizeof(ar_node) + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t))

typedef struct gguf_priv {
    ar_node *allocs;       // every arena allocation, freed together by gguf_close
    gg_map kv_index;       // key -> index into ctx->kv (first file)
    gg_map tensor_index;   // name -> index into tensors (all files)
    gguf_tensor *tensors;  // [n_tensors, cap_tensors) grown per file; becomes ctx->tensors
    uint64_t n_tensors, cap_tensors;
    bool own_maps;         // false for gguf_open_memory: the caller owns the bytes
} gguf_priv;

static void *ar_alloc(gguf_priv *pv, size_t n) {
    if (n > SIZE_MAX - AR_HDR) return NULL;
    ar_node *a = malloc(AR_HDR + n);
    if (!a) return NULL;
    a->next = pv->allocs;
    pv->allocs = a;
    return (char *)a + AR_HDR;
}

// ---- cursor over one file's bytes --------------------------------------------------------------------------------

typedef struct rd {
    gguf_priv *pv;
    const char *name;     // file name for messages
    const uint8_t *data;  // [size] bytes
    uint64_t size;
    uint64_t pos;
} rd;

static int ST_PRINTF(3, 4) rerr(const rd *r, uint64_t off, const char *fmt, ...) {
    char msg[ST_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return st_err("%s: offset 0x%llx: %s", r->name, (ull)off, msg);
}

// Printable rendering of untrusted bytes for messages (escapes, truncates long names).
typedef struct shown {
    char s[96];
} shown;

static shown show(const char *p, uint64_t len) {
    shown o;
    size_t k = 0;
    for (uint64_t i = 0; i < len; i++) {
        if (k + 8 >= sizeof o.s) {
            memcpy(o.s + k, "...", 4);
            return o;
        }
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') o.s[k++] = (char)c;
        else k += (size_t)snprintf(o.s + k, sizeof o.s - k, "\\x%02x", c);
    }
    o.s[k] = '\0';
    return o;
}

static int need(const rd *r, uint64_t n, const char *what) {
    if (r->size - r->pos < n)
        return rerr(r, r->pos, "truncated %s: needs %llu bytes but only %llu remain (file size %llu)", what, (ull)n,
                    (ull)(r->size - r->pos), (ull)r->size);
    return 0;
}

static uint32_t ld_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t ld_u64(const uint8_t *p) { return (uint64_t)ld_u32(p) | (uint64_t)ld_u32(p + 4) << 32; }

static int rd_u32(rd *r, uint32_t *v, const char *what) {
    if (need(r, 4, what)) return -1;
    *v = ld_u32(r->data + r->pos);
    r->pos += 4;
    return 0;
}

static int rd_u64(rd *r, uint64_t *v, const char *what) {
    if (need(r, 8, what)) return -1;
    *v = ld_u64(r->data + r->pos);
    r->pos += 8;
    return 0;
}

static int rd_str(rd *r, gguf_str *s, const char *what) {
    uint64_t off = r->pos, len;
    if (rd_u64(r, &len, what)) return -1;
    if (len > r->size - r->pos)
        return rerr(r, off, "%s length %llu runs past the end of the file (%llu bytes remain)", what, (ull)len,
                    (ull)(r->size - r->pos));
    s->ptr = (const char *)r->data + r->pos;
    s->len = len;
    r->pos += len;
    return 0;
}

// ---- values -------------------------------------------------------------------------------------------------------

// Smallest encoding of one element of type t, used to bound counts by the bytes that remain.
static uint64_t min_elem_size(gguf_vtype t) {
    if (t == GGUF_VT_STRING) return 8;       // u64 length
    if (t == GGUF_VT_ARRAY) return 12;       // u32 type + u64 count
    return gg_vtype_size(t);
}

static int read_value(rd *r, gguf_vtype type, gguf_value *v, int depth, const char *key);

static int read_array(rd *r, gguf_value *v, int depth, const char *key) {
    uint64_t off = r->pos;
    uint32_t et;
    uint64_t n;
    if (depth > GGUF_MAX_ARRAY_DEPTH)
        return rerr(r, off, "key '%s': arrays nested deeper than %d levels", key, GGUF_MAX_ARRAY_DEPTH);
    if (rd_u32(r, &et, "array element type")) return -1;
    if (et >= GGUF_VT_COUNT)
        return rerr(r, off, "key '%s': unknown array element type %u", key, et);
    if (rd_u64(r, &n, "array length")) return -1;
    uint64_t remain = r->size - r->pos, es = min_elem_size((gguf_vtype)et);
    if (n > remain / es)
        return rerr(r, off + 4, "key '%s': array of %llu %s elements needs at least %llu bytes but only %llu remain", key,
                    (ull)n, gguf_vtype_name((gguf_vtype)et), n > UINT64_MAX / es ? (ull)UINT64_MAX : (ull)(n * es),
                    (ull)remain);
    v->arr.elem_type = (gguf_vtype)et;
    v->arr.n = n;
    v->arr.raw = r->data + r->pos;
    v->arr.items = NULL;
    if (et != GGUF_VT_STRING && et != GGUF_VT_ARRAY) {
        if (et == GGUF_VT_BOOL) {
            for (uint64_t i = 0; i < n; i++)
                if (r->data[r->pos + i] > 1)
                    return rerr(r, r->pos + i, "key '%s': bool array element %llu is %u, must be 0 or 1", key, (ull)i,
                                r->data[r->pos + i]);
        }
        r->pos += n * es;
        return 0;
    }
    if (n > SIZE_MAX / sizeof(gguf_value)) return rerr(r, off, "key '%s': array too large", key);
    // n is bounded by the remaining bytes, so this allocation is at most a few times the file size.
    v->arr.items = n ? ar_alloc(r->pv, (size_t)n * sizeof(gguf_value)) : NULL;
    if (n && !v->arr.items) return rerr(r, off, "key '%s': out of memory for %llu array elements", key, (ull)n);
    for (uint64_t i = 0; i < n; i++) {
        if (et == GGUF_VT_ARRAY) {
            v->arr.items[i].type = GGUF_VT_ARRAY;
            if (read_array(r, &v->arr.items[i], depth + 1, key)) return -1;
        } else if (read_value(r, GGUF_VT_STRING, &v->arr.items[i], depth, key)) {
            return -1;
        }
    }
    return 0;
}

static int read_value(rd *r, gguf_vtype type, gguf_value *v, int depth, const char *key) {
    memset(v, 0, sizeof *v);
    v->type = type;
    uint64_t off = r->pos;
    size_t sz = gg_vtype_size(type);
    if (type == GGUF_VT_STRING) return rd_str(r, &v->str, "string value");
    if (type == GGUF_VT_ARRAY) return read_array(r, v, depth + 1, key);
    if (sz == 0) return rerr(r, off, "key '%s': unknown value type %d", key, (int)type);
    if (need(r, sz, "value")) return -1;
    const uint8_t *p = r->data + r->pos;
    r->pos += sz;
    switch (type) {
    case GGUF_VT_UINT8: v->u64 = p[0]; break;
    case GGUF_VT_INT8: v->i64 = (int8_t)p[0]; break;
    case GGUF_VT_UINT16: v->u64 = (uint16_t)(p[0] | p[1] << 8); break;
    case GGUF_VT_INT16: v->i64 = (int16_t)(uint16_t)(p[0] | p[1] << 8); break;
    case GGUF_VT_UINT32: v->u64 = ld_u32(p); break;
    case GGUF_VT_INT32: v->i64 = (int32_t)ld_u32(p); break;
    case GGUF_VT_UINT64: v->u64 = ld_u64(p); break;
    case GGUF_VT_INT64: v->i64 = (int64_t)ld_u64(p); break;
    case GGUF_VT_FLOAT32: {
        uint32_t b = ld_u32(p);
        float f;
        memcpy(&f, &b, 4);
        v->f64 = f;
        break;
    }
    case GGUF_VT_FLOAT64: {
        uint64_t b = ld_u64(p);
        memcpy(&v->f64, &b, 8);
        break;
    }
    case GGUF_VT_BOOL:
        if (p[0] > 1) return rerr(r, off, "key '%s': bool value is %u, must be 0 or 1", key, p[0]);
        v->u64 = p[0];
        break;
    default: break;
    }
    return 0;
}

// ---- one file -----------------------------------------------------------------------------------------------------

// What parsing one file yields besides the tensors appended to pv->tensors.
typedef struct part {
    uint64_t n_kv;
    gguf_kv *kv;       // [n_kv] (arena)
    gg_map kv_map;     // key -> index into kv
    uint64_t t_first;  // this file's tensors are pv->tensors[t_first, t_first + n_tensors)
    uint64_t n_tensors;
} part;

static const gguf_kv *part_kv(const part *p, const char *key) {
    uint64_t i;
    return gg_map_get(&p->kv_map, key, strlen(key), &i) ? &p->kv[i] : NULL;
}

typedef struct span {
    uint64_t off, end;  // [off, end) relative to the data section
    uint64_t idx;       // global tensor index
} span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->off != y->off) return x->off < y->off ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int parse_file(gguf_priv *pv, gguf_file *f, int file_idx, part *out) {
    memset(out, 0, sizeof *out);
    rd r = {.pv = pv, .name = f->path, .data = f->map.data, .size = f->map.size, .pos = 0};
    uint32_t magic, version;
    uint64_t n_tensors, n_kv;

    // header
    if (rd_u32(&r, &magic, "header (magic)")) return -1;
    if (magic != GGUF_MAGIC) {
        shown m = show((const char *)r.data, 4);
        return rerr(&r, 0, "bad magic '%s' (0x%08x): not a GGUF file (expected 'GGUF')", m.s, magic);
    }
    if (rd_u32(&r, &version, "header (version)")) return -1;
    if (version != 2 && version != 3) {
        uint32_t swapped = __builtin_bswap32(version);
        if (swapped == 2 || swapped == 3)
            return rerr(&r, 4, "big-endian GGUF (version field 0x%08x) is not supported", version);
        return rerr(&r, 4, "unsupported GGUF version %u (only 2 and 3 are supported)", version);
    }
    f->version = version;
    if (rd_u64(&r, &n_tensors, "header (tensor count)")) return -1;
    if (rd_u64(&r, &n_kv, "header (key-value count)")) return -1;
    // Each kv takes at least 14 bytes (8 key length + 1 key byte + 4 type + 1 value) and each tensor info at
    // least 33 (8 + 1 name, 4 n_dims, 8 ne, 4 type, 8 offset), so larger counts cannot be honest.
    uint64_t remain = r.size - r.pos;
    if (n_kv > remain / 14)
        return rerr(&r, 16, "key-value count %llu is impossible: the remaining %llu bytes hold at most %llu", (ull)n_kv,
                    (ull)remain, (ull)(remain / 14));
    if (n_tensors > remain / 33)
        return rerr(&r, 8, "tensor count %llu is impossible: the remaining %llu bytes hold at most %llu", (ull)n_tensors,
                    (ull)remain, (ull)(remain / 33));

    // key-value pairs
    out->n_kv = n_kv;
    out->kv = n_kv ? ar_alloc(pv, (size_t)n_kv * sizeof(gguf_kv)) : NULL;
    if (n_kv && !out->kv) return rerr(&r, 16, "out of memory for %llu key-value pairs", (ull)n_kv);
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &out->kv[i];
        uint64_t off = r.pos, prev;
        uint32_t type;
        kv->offset = off;
        if (rd_str(&r, &kv->key, "key")) return -1;
        if (kv->key.len == 0) return rerr(&r, off, "key-value pair %llu has an empty key", (ull)i);
        shown k = show(kv->key.ptr, kv->key.len);
        if (memchr(kv->key.ptr, 0, (size_t)kv->key.len)) return rerr(&r, off, "key '%s' contains a NUL byte", k.s);
        int put = gg_map_put(&out->kv_map, kv->key.ptr, kv->key.len, i, &prev);
        if (put < 0) return rerr(&r, off, "out of memory");
        if (put == 0)
            return rerr(&r, off, "duplicate key '%s' (first defined at offset 0x%llx)", k.s, (ull)out->kv[prev].offset);
        uint64_t toff = r.pos;
        if (rd_u32(&r, &type, "value type")) return -1;
        if (type >= GGUF_VT_COUNT) return rerr(&r, toff, "key '%s': unknown value type %u", k.s, type);
        if (read_value(&r, (gguf_vtype)type, &kv->value, 0, k.s)) return -1;
    }

    // alignment
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = part_kv(out, "general.alignment");
    if (al) {
        if (al->value.type != GGUF_VT_UINT32)
            return rerr(&r, al->offset, "general.alignment has type %s, must be uint32", gguf_vtype_name(al->value.type));
        uint64_t a = al->value.u64;
        if (a == 0 || (a & (a - 1)))
            return rerr(&r, al->offset, "general.alignment %llu is not a power of two", (ull)a);
        f->alignment = a;
    }

    // tensor infos
    out->t_first = pv->n_tensors;
    out->n_tensors = n_tensors;
    if (pv->n_tensors + n_tensors > pv->cap_tensors) {
        uint64_t cap = pv->n_tensors + n_tensors;
        if (cap > SIZE_MAX / sizeof(gguf_tensor)) return rerr(&r, 8, "too many tensors");
        gguf_tensor *t = realloc(pv->tensors, (size_t)cap * sizeof *t);
        if (!t) return rerr(&r, 8, "out of memory for %llu tensor infos", (ull)n_tensors);
        pv->tensors = t;
        pv->cap_tensors = cap;
    }
    // File offset of each tensor's info, for messages about checks done after all infos are read.
    uint64_t *info_off = n_tensors ? malloc((size_t)n_tensors * sizeof *info_off) : NULL;
    span *spans = n_tensors ? malloc((size_t)n_tensors * sizeof *spans) : NULL;
    if (n_tensors && (!info_off || !spans)) {
        free(info_off);
        free(spans);
        return rerr(&r, 8, "out of memory for %llu tensor infos", (ull)n_tensors);
    }
    int rc = -1;
    for (uint64_t i = 0; i < n_tensors; i++) {
        uint64_t off = r.pos, g = pv->n_tensors, prev;
        gguf_tensor *t = &pv->tensors[g];
        memset(t, 0, sizeof *t);
        t->file = file_idx;
        info_off[i] = off;
        gguf_str name;
        if (rd_str(&r, &name, "tensor name")) goto done;
        if (name.len == 0) {
            rerr(&r, off, "tensor %llu has an empty name", (ull)i);
            goto done;
        }
        shown nm = show(name.ptr, name.len);
        if (name.len >= GGUF_MAX_NAME) {
            rerr(&r, off, "tensor name '%s' is %llu bytes, longer than the %d allowed", nm.s, (ull)name.len,
                 GGUF_MAX_NAME - 1);
            goto done;
        }
        if (memchr(name.ptr, 0, (size_t)name.len)) {
            rerr(&r, off, "tensor name '%s' contains a NUL byte", nm.s);
            goto done;
        }
        t->name = ar_alloc(pv, (size_t)name.len + 1);
        if (!t->name) {
            rerr(&r, off, "out of memory");
            goto done;
        }
        memcpy(t->name, name.ptr, (size_t)name.len);
        t->name[name.len] = '\0';
        int put = gg_map_put(&pv->tensor_index, t->name, name.len, g, &prev);
        if (put < 0) {
            rerr(&r, off, "out of memory");
            goto done;
        }
        if (put == 0) {
            if (pv->tensors[prev].file == file_idx)
                rerr(&r, off, "duplicate tensor name '%s' (tensor %llu and an earlier one)", nm.s, (ull)i);
            else
                rerr(&r, off, "duplicate tensor name '%s': also in split part %d", nm.s, pv->tensors[prev].file + 1);
            goto done;
        }
        pv->n_tensors++;  // from here on t is owned by pv (name in the arena, index entry live)

        uint64_t doff = r.pos;
        uint32_t n_dims;
        if (rd_u32(&r, &n_dims, "tensor n_dims")) goto done;
        if (n_dims == 0 || n_dims > GGUF_MAX_DIMS) {
            rerr(&r, doff, "tensor '%s': n_dims is %u, must be 1..%d", nm.s, n_dims, GGUF_MAX_DIMS);
            goto done;
        }
        t->n_dims = n_dims;
        uint64_t nel = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) {
            uint64_t v = 1, eoff = r.pos;
            if ((uint32_t)d < n_dims && rd_u64(&r, &v, "tensor dimension")) goto done;
            if ((int64_t)v <= 0) {
                rerr(&r, eoff, "tensor '%s': dimension %d is %lld, must be positive", nm.s, d, (long long)(int64_t)v);
                goto done;
            }
            if (v > (uint64_t)INT64_MAX / nel) {
                rerr(&r, eoff, "tensor '%s': element count overflows at dimension %d (%lld)", nm.s, d,
                     (long long)(int64_t)v);
                goto done;
            }
            nel *= v;
            t->ne[d] = (int64_t)v;
        }
        uint64_t ty_off = r.pos;
        uint32_t type;
        if (rd_u32(&r, &type, "tensor type")) goto done;
        const st_type_info *ti = type <= INT32_MAX ? st_type_get((int)type) : NULL;
        if (!ti || ti->block_size <= 0 || ti->type_size <= 0) {
            rerr(&r, ty_off, "tensor '%s': unknown tensor type %u", nm.s, type);
            goto done;
        }
        t->type = (int)type;
        if (t->ne[0] % ti->block_size) {
            rerr(&r, doff, "tensor '%s': row length ne[0]=%lld is not a multiple of the %s block size %d", nm.s,
                 (long long)t->ne[0], ti->name, ti->block_size);
            goto done;
        }
        // nbytes = blocks per row * block bytes * rows, each product checked before st_row_size computes it.
        uint64_t blocks = (uint64_t)t->ne[0] / (uint64_t)ti->block_size, rows = nel / (uint64_t)t->ne[0];
        if (blocks > UINT64_MAX / (uint64_t)ti->type_size ||
            blocks * (uint64_t)ti->type_size > UINT64_MAX / rows) {
            rerr(&r, doff, "tensor '%s': size in bytes overflows", nm.s);
            goto done;
        }
        uint64_t row = st_row_size(t->type, t->ne[0]);
        if (row != blocks * (uint64_t)ti->type_size) {
            rerr(&r, ty_off, "tensor '%s': cannot size rows of type %s", nm.s, ti->name);
            goto done;
        }
        t->nbytes = row * rows;
        uint64_t o_off = r.pos;
        if (rd_u64(&r, &t->offset, "tensor data offset")) goto done;
        if (t->offset % f->alignment) {
            rerr(&r, o_off, "tensor '%s': data offset 0x%llx is not a multiple of the alignment %llu", nm.s,
                 (ull)t->offset, (ull)f->alignment);
            goto done;
        }
    }

    // data section: starts at the end of the infos rounded up to the alignment
    uint64_t data_off = r.pos + (f->alignment - r.pos % f->alignment) % f->alignment;
    f->data_offset = data_off;
    if (n_tensors && data_off > r.size) {
        rerr(&r, r.pos, "data section would start at 0x%llx, past the end of the file (size %llu)", (ull)data_off,
             (ull)r.size);
        goto done;
    }
    uint64_t avail = n_tensors ? r.size - data_off : 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        gguf_tensor *t = &pv->tensors[out->t_first + i];
        if (t->offset > avail || t->nbytes > avail - t->offset) {
            rerr(&r, info_off[i],
                 "tensor '%s': data [0x%llx, 0x%llx) in the data section at 0x%llx ends past the end of the file "
                 "(size %llu)",
                 t->name, (ull)t->offset, (ull)(t->offset + t->nbytes), (ull)data_off, (ull)r.size);
            goto done;
        }
        t->data = r.data + data_off + t->offset;
        spans[i] = (span){t->offset, t->offset + t->nbytes, out->t_first + i};
    }
    if (n_tensors > 1) {
        qsort(spans, (size_t)n_tensors, sizeof *spans, cmp_span);
        for (uint64_t i = 1; i < n_tensors; i++) {
            if (spans[i].off < spans[i - 1].end) {
                const gguf_tensor *a = &pv->tensors[spans[i - 1].idx], *b = &pv->tensors[spans[i].idx];
                rerr(&r, info_off[spans[i].idx - out->t_first],
                     "tensor '%s' data [0x%llx, 0x%llx) overlaps tensor '%s' data [0x%llx, 0x%llx)", b->name,
                     (ull)spans[i].off, (ull)spans[i].end, a->name, (ull)spans[i - 1].off, (ull)spans[i - 1].end);
                goto done;
            }
        }
    }
    rc = 0;
done:
    free(info_off);
    free(spans);
    return rc;
}

// ---- contexts -----------------------------------------------------------------------------------------------------

void gguf_close(gguf_ctx *ctx) {
    if (!ctx) return;
    gguf_priv *pv = ctx->arena;
    for (int i = 0; i < ctx->n_files; i++) {
        if (pv && pv->own_maps) st_unmap_file(&ctx->files[i].map);
        free(ctx->files[i].path);
    }
    free(ctx->files);
    if (pv) {
        for (ar_node *a = pv->allocs; a;) {
            ar_node *next = a->next;
            free(a);
            a = next;
        }
        gg_map_free(&pv->kv_index);
        gg_map_free(&pv->tensor_index);
        free(pv->tensors);
        free(pv);
    }
    free(ctx);
}

static gguf_ctx *ctx_new(int n_files, bool own_maps) {
    gguf_ctx *ctx = calloc(1, sizeof *ctx);
    gguf_priv *pv = calloc(1, sizeof *pv);
    gguf_file *files = calloc((size_t)n_files, sizeof *files);
    if (!ctx || !pv || !files) {
        free(ctx);
        free(pv);
        free(files);
        st_err("out of memory");
        return NULL;
    }
    for (int i = 0; i < n_files; i++) files[i].map.fd = -1;
    pv->own_maps = own_maps;
    ctx->arena = pv;
    ctx->index = &pv->tensor_index;
    ctx->files = files;
    ctx->n_files = n_files;
    return ctx;
}

// Hands the first file's kv and every tensor to ctx.
static void ctx_finish(gguf_ctx *ctx, part *first) {
    gguf_priv *pv = ctx->arena;
    ctx->n_kv = first->n_kv;
    ctx->kv = first->kv;
    pv->kv_index = first->kv_map;
    memset(&first->kv_map, 0, sizeof first->kv_map);
    ctx->n_tensors = pv->n_tensors;
    ctx->tensors = pv->tensors;
    ctx->total_bytes = 0;
    for (uint64_t i = 0; i < pv->n_tensors; i++) ctx->total_bytes += pv->tensors[i].nbytes;
}

gguf_ctx *gguf_open_memory(const void *data, size_t size, const char *name) {
    if (!name) name = "<memory>";
    gguf_ctx *ctx = ctx_new(1, false);
    if (!ctx) return NULL;
    ctx->files[0].path = strdup(name);
    ctx->files[0].map.data = data;
    ctx->files[0].map.size = size;
    part p;
    if (!ctx->files[0].path) {
        st_err("out of memory");
        gguf_close(ctx);
        return NULL;
    }
    if (parse_file(ctx->arena, &ctx->files[0], 0, &p)) {
        gg_map_free(&p.kv_map);
        gguf_close(ctx);
        return NULL;
    }
    ctx_finish(ctx, &p);
    return ctx;
}

// ---- splits -------------------------------------------------------------------------------------------------------

// Recognizes PREFIX-NNNNN-of-MMMMM.gguf (at least 5 digits each, as llama.cpp's "%s-%05d-of-%05d.gguf" writes).
static bool split_name(const char *path, size_t *prefix_len, int *no, int *count) {
    size_t n = strlen(path);
    const char *ext = ".gguf";
    if (n < 5 || strcmp(path + n - 5, ext) != 0) return false;
    size_t e = n - 5, i = e;
    while (i > 0 && path[i - 1] >= '0' && path[i - 1] <= '9') i--;
    size_t d2 = e - i;
    if (d2 < 5 || d2 > 9 || i < 4 || memcmp(path + i - 4, "-of-", 4) != 0) return false;
    size_t j = i - 4, k = j;
    while (k > 0 && path[k - 1] >= '0' && path[k - 1] <= '9') k--;
    size_t d1 = j - k;
    if (d1 < 5 || d1 > 9 || k < 1 || path[k - 1] != '-') return false;
    *no = atoi(path + k);
    *count = atoi(path + i);
    *prefix_len = k - 1;
    return true;
}

// Integer metadata of a part as u64; -1 when absent, -2 when present but not a non-negative integer.
static int part_uint(const part *p, const char *key, uint64_t *v, const gguf_kv **kv) {
    *kv = part_kv(p, key);
    if (!*kv) return -1;
    const gguf_value *x = &(*kv)->value;
    switch (x->type) {
    case GGUF_VT_UINT8: case GGUF_VT_UINT16: case GGUF_VT_UINT32: case GGUF_VT_UINT64: *v = x->u64; return 0;
    case GGUF_VT_INT8: case GGUF_VT_INT16: case GGUF_VT_INT32: case GGUF_VT_INT64:
        if (x->i64 < 0) return -2;
        *v = (uint64_t)x->i64;
        return 0;
    default: return -2;
    }
}

// Reads the split keys of part `idx` (0-based) of `count`; checks split.no and split.count.
static int check_split_keys(const gguf_file *f, const part *p, int idx, int count, bool required) {
    const gguf_kv *kv;
    uint64_t v;
    int rc = part_uint(p, "split.count", &v, &kv);
    if (rc == -2) return st_err("%s: offset 0x%llx: split.count is not a non-negative integer", f->path, (ull)kv->offset);
    if (rc == -1) {
        if (required) return st_err("%s: split part %d of %d has no split.count metadata", f->path, idx + 1, count);
    } else if (v != (uint64_t)count) {
        return st_err("%s: offset 0x%llx: split.count is %llu but the model has %d parts", f->path, (ull)kv->offset,
                      (ull)v, count);
    }
    rc = part_uint(p, "split.no", &v, &kv);
    if (rc == -2) return st_err("%s: offset 0x%llx: split.no is not a non-negative integer", f->path, (ull)kv->offset);
    if (rc == -1) {
        if (required) return st_err("%s: split part %d of %d has no split.no metadata", f->path, idx + 1, count);
    } else if (v != (uint64_t)idx) {
        return st_err("%s: offset 0x%llx: split.no is %llu, expected %d for part %d of %d", f->path, (ull)kv->offset,
                      (ull)v, idx, idx + 1, count);
    }
    return 0;
}

static int map_and_parse(gguf_ctx *ctx, int i, const char *path, part *p) {
    gguf_file *f = &ctx->files[i];
    memset(p, 0, sizeof *p);
    f->path = strdup(path);
    if (!f->path) return st_err("out of memory");
    if (st_map_file(&f->map, path)) return -1;
    return parse_file(ctx->arena, f, i, p);
}

gguf_ctx *gguf_open(const char *path) {
    size_t plen = 0;
    int no = 0, count = 1;
    bool named = split_name(path, &plen, &no, &count);
    // The cap keeps the per-part bookkeeping small whatever the name claims (gguf-split writes 5-digit counts).
    if (named && (count < 1 || count > 99999 || no < 1 || no > count)) {
        st_err("%s: split file name says part %d of %d, which is not a valid part of a split model", path, no, count);
        return NULL;
    }
    if (!named) count = 1;
    gguf_ctx *ctx = ctx_new(count, true);
    if (!ctx) return NULL;
    part *parts = calloc((size_t)count, sizeof *parts);
    char *pbuf = malloc(strlen(path) + 32);
    if (!parts || !pbuf) {
        st_err("out of memory");
        goto fail;
    }
    // Metadata comes from part 1 whichever part was named.
    if (named) snprintf(pbuf, strlen(path) + 32, "%.*s-%05d-of-%05d.gguf", (int)plen, path, 1, count);
    else strcpy(pbuf, path);
    if (map_and_parse(ctx, 0, pbuf, &parts[0])) {
        if (count > 1) st_err_prefix("split model part 1 of %d: ", count);
        goto fail;
    }

    const gguf_kv *kv;
    uint64_t meta_count = 0;
    int rc = part_uint(&parts[0], "split.count", &meta_count, &kv);
    if (rc == -2) {
        st_err("%s: offset 0x%llx: split.count is not a non-negative integer", pbuf, (ull)kv->offset);
        goto fail;
    }
    if (!named && rc == 0 && meta_count > 1) {
        st_err("%s: split.count is %llu but the file name does not follow NAME-00001-of-%05llu.gguf, so the other parts "
               "cannot be found",
               pbuf, (ull)meta_count, (ull)meta_count);
        goto fail;
    }
    if (count > 1 || rc == 0) {
        if (check_split_keys(&ctx->files[0], &parts[0], 0, count, count > 1)) goto fail;
    }
    for (int i = 1; i < count; i++) {
        snprintf(pbuf, strlen(path) + 32, "%.*s-%05d-of-%05d.gguf", (int)plen, path, i + 1, count);
        if (map_and_parse(ctx, i, pbuf, &parts[i]) || check_split_keys(&ctx->files[i], &parts[i], i, count, true)) {
            st_err_prefix("split model part %d of %d: ", i + 1, count);
            goto fail;
        }
    }
    if (count > 1) {
        uint64_t total = ((gguf_priv *)ctx->arena)->n_tensors, want;
        for (int i = 0; i < count; i++) {
            rc = part_uint(&parts[i], "split.tensors.count", &want, &kv);
            if (rc == -2) {
                st_err("%s: offset 0x%llx: split.tensors.count is not a non-negative integer", ctx->files[i].path,
                       (ull)kv->offset);
                goto fail;
            }
            if (rc == 0 && want != total) {
                st_err("%s: offset 0x%llx: split.tensors.count is %llu but the %d parts hold %llu tensors",
                       ctx->files[i].path, (ull)kv->offset, (ull)want, count, (ull)total);
                goto fail;
            }
        }
    }
    ctx_finish(ctx, &parts[0]);
    for (int i = 0; i < count; i++) gg_map_free(&parts[i].kv_map);
    free(parts);
    free(pbuf);
    return ctx;
fail:
    if (parts)
        for (int i = 0; i < count; i++) gg_map_free(&parts[i].kv_map);
    free(parts);
    free(pbuf);
    gguf_close(ctx);
    return NULL;
}

// ---- lookups ------------------------------------------------------------------------------------------------------

const gguf_kv *gguf_find_kv(const gguf_ctx *ctx, const char *key) {
    const gguf_priv *pv = ctx->arena;
    uint64_t i;
    if (!gg_map_get(&pv->kv_index, key, strlen(key), &i)) return NULL;
    return &ctx->kv[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_ctx *ctx, const char *name) {
    const gguf_priv *pv = ctx->arena;
    uint64_t i;
    if (!gg_map_get(&pv->tensor_index, name, strlen(name), &i)) return NULL;
    return &ctx->tensors[i];
}

static const char *ctx_name(const gguf_ctx *ctx) { return ctx->n_files ? ctx->files[0].path : "?"; }

static bool is_signed_int(gguf_vtype t) {
    return t == GGUF_VT_INT8 || t == GGUF_VT_INT16 || t == GGUF_VT_INT32 || t == GGUF_VT_INT64;
}
static bool is_unsigned_int(gguf_vtype t) {
    return t == GGUF_VT_UINT8 || t == GGUF_VT_UINT16 || t == GGUF_VT_UINT32 || t == GGUF_VT_UINT64;
}

// Finds key and checks it holds an integer; sets *neg for negative values.
static const gguf_kv *find_int(const gguf_ctx *ctx, const char *key, const char *want) {
    const gguf_kv *kv = gguf_find_kv(ctx, key);
    if (!kv) {
        st_err("%s: metadata key '%s' not found", ctx_name(ctx), key);
        return NULL;
    }
    if (!is_signed_int(kv->value.type) && !is_unsigned_int(kv->value.type)) {
        st_err("%s: metadata key '%s' has type %s, expected %s", ctx_name(ctx), key, gguf_vtype_name(kv->value.type),
               want);
        return NULL;
    }
    return kv;
}

int gguf_get_u64(const gguf_ctx *ctx, const char *key, uint64_t *out) {
    const gguf_kv *kv = find_int(ctx, key, "an unsigned integer");
    if (!kv) return -1;
    if (is_signed_int(kv->value.type) && kv->value.i64 < 0)
        return st_err("%s: metadata key '%s' is %lld, expected a non-negative value", ctx_name(ctx), key,
                      (long long)kv->value.i64);
    *out = kv->value.u64;  // non-negative i64 and u64 share the representation
    return 0;
}

int gguf_get_u32(const gguf_ctx *ctx, const char *key, uint32_t *out) {
    uint64_t v = 0;
    if (gguf_get_u64(ctx, key, &v)) return -1;
    if (v > UINT32_MAX)
        return st_err("%s: metadata key '%s' is %llu, does not fit in uint32", ctx_name(ctx), key, (ull)v);
    *out = (uint32_t)v;
    return 0;
}

int gguf_get_i64(const gguf_ctx *ctx, const char *key, int64_t *out) {
    const gguf_kv *kv = find_int(ctx, key, "an integer");
    if (!kv) return -1;
    if (is_unsigned_int(kv->value.type) && kv->value.u64 > INT64_MAX)
        return st_err("%s: metadata key '%s' is %llu, does not fit in int64", ctx_name(ctx), key, (ull)kv->value.u64);
    *out = kv->value.i64;
    return 0;
}

int gguf_get_f32(const gguf_ctx *ctx, const char *key, float *out) {
    const gguf_kv *kv = gguf_find_kv(ctx, key);
    if (!kv) return st_err("%s: metadata key '%s' not found", ctx_name(ctx), key);
    gguf_vtype t = kv->value.type;
    if (t == GGUF_VT_FLOAT32 || t == GGUF_VT_FLOAT64) *out = (float)kv->value.f64;
    else if (is_signed_int(t)) *out = (float)kv->value.i64;
    else if (is_unsigned_int(t)) *out = (float)kv->value.u64;
    else
        return st_err("%s: metadata key '%s' has type %s, expected a number", ctx_name(ctx), key, gguf_vtype_name(t));
    return 0;
}

int gguf_get_bool(const gguf_ctx *ctx, const char *key, bool *out) {
    const gguf_kv *kv = gguf_find_kv(ctx, key);
    if (!kv) return st_err("%s: metadata key '%s' not found", ctx_name(ctx), key);
    if (kv->value.type != GGUF_VT_BOOL)
        return st_err("%s: metadata key '%s' has type %s, expected bool", ctx_name(ctx), key,
                      gguf_vtype_name(kv->value.type));
    *out = kv->value.u64 != 0;
    return 0;
}

char *gguf_get_str_dup(const gguf_ctx *ctx, const char *key) {
    const gguf_kv *kv = gguf_find_kv(ctx, key);
    if (!kv) {
        st_err("%s: metadata key '%s' not found", ctx_name(ctx), key);
        return NULL;
    }
    if (kv->value.type != GGUF_VT_STRING) {
        st_err("%s: metadata key '%s' has type %s, expected string", ctx_name(ctx), key, gguf_vtype_name(kv->value.type));
        return NULL;
    }
    char *s = malloc((size_t)kv->value.str.len + 1);
    if (!s) {
        st_err("out of memory");
        return NULL;
    }
    memcpy(s, kv->value.str.ptr, (size_t)kv->value.str.len);
    s[kv->value.str.len] = '\0';
    return s;
}

// Element i of a scalar array; 0 for an index out of range or a non-scalar array (callers check arr.n and type).
int64_t gguf_arr_i64(const gguf_value *v, uint64_t i) {
    if (v->type != GGUF_VT_ARRAY || i >= v->arr.n) return 0;
    const uint8_t *p = v->arr.raw + i * gg_vtype_size(v->arr.elem_type);
    switch (v->arr.elem_type) {
    case GGUF_VT_UINT8: case GGUF_VT_BOOL: return p[0];
    case GGUF_VT_INT8: return (int8_t)p[0];
    case GGUF_VT_UINT16: return (uint16_t)(p[0] | p[1] << 8);
    case GGUF_VT_INT16: return (int16_t)(uint16_t)(p[0] | p[1] << 8);
    case GGUF_VT_UINT32: return ld_u32(p);
    case GGUF_VT_INT32: return (int32_t)ld_u32(p);
    case GGUF_VT_UINT64: case GGUF_VT_INT64: return (int64_t)ld_u64(p);
    case GGUF_VT_FLOAT32: case GGUF_VT_FLOAT64: {
        double d = gguf_arr_f64(v, i);
        // Saturate instead of the undefined behaviour of converting an out-of-range double.
        if (!(d == d)) return 0;
        if (d >= 9.2233720368547758e18) return INT64_MAX;
        if (d <= -9.2233720368547758e18) return INT64_MIN;
        return (int64_t)d;
    }
    default: return 0;
    }
}

double gguf_arr_f64(const gguf_value *v, uint64_t i) {
    if (v->type != GGUF_VT_ARRAY || i >= v->arr.n) return 0;
    const uint8_t *p = v->arr.raw + i * gg_vtype_size(v->arr.elem_type);
    switch (v->arr.elem_type) {
    case GGUF_VT_FLOAT32: {
        uint32_t b = ld_u32(p);
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    case GGUF_VT_FLOAT64: {
        uint64_t b = ld_u64(p);
        double d;
        memcpy(&d, &b, 8);
        return d;
    }
    case GGUF_VT_UINT64: return (double)ld_u64(p);
    case GGUF_VT_STRING: case GGUF_VT_ARRAY: return 0;
    default: return (double)gguf_arr_i64(v, i);
    }
}
