// GGUF writer: metadata and tensor infos are serialized in memory; tensor data is produced by the caller's fill
// callback straight into a shared writable mapping of the output file, so each byte is written exactly once by the
// callback and the kernel writes it back (no staging buffers, no small writes). The file is built under a
// temporary name and renamed into place, so a reader mapping the old file never sees it truncated.
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "gguf/gguf_internal.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/log.h"
#include "util/pool.h"

typedef unsigned long long ull;

typedef struct wkv {
    char *key;     // NUL-terminated copy
    uint8_t *val;  // [len] bytes: u32 value type then the encoded value, exactly as it goes into the file
    size_t len;
} wkv;

typedef struct wtensor {
    char *name;  // NUL-terminated copy (also the key of gguf_writer.names)
    int type;    // st_type
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    uint64_t nbytes;
    uint64_t offset;  // in the data section, set by gguf_w_write
} wtensor;

struct gguf_writer {
    wkv *kv;  // [n_kv] in insertion order
    size_t n_kv, cap_kv;
    wtensor *t;  // [n_t] in declaration order (= file order)
    size_t n_t, cap_t;
    gg_map names;  // tensor name -> index into t
    uint32_t alignment;
    uint32_t version;
    // The setters return nothing, so the first failure is kept here and reported by gguf_w_write.
    bool failed;
    char err[ST_ERR_MAX];
};

static void ST_PRINTF(2, 3) werr(gguf_writer *w, const char *fmt, ...) {
    if (w->failed) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
    w->failed = true;
}

// ---- growable byte buffer ---------------------------------------------------------------------------------------

typedef struct wbuf {
    uint8_t *p;  // [n] bytes, capacity cap
    size_t n, cap;
    bool oom;
} wbuf;

static void wb_put(wbuf *b, const void *src, size_t n) {
    if (b->oom || n == 0) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

// Little-endian integer of `bytes` width.
static void wb_le(wbuf *b, uint64_t v, int bytes) {
    uint8_t tmp[8];
    for (int i = 0; i < bytes; i++) tmp[i] = (uint8_t)(v >> (8 * i));
    wb_put(b, tmp, (size_t)bytes);
}

static void wb_str(wbuf *b, const char *s, uint64_t len) {
    wb_le(b, len, 8);
    wb_put(b, s, (size_t)len);
}

// Encodes v (without its type tag). Returns 0, or -1 with a message in msg.
static int enc_value(wbuf *b, const gguf_value *v, int depth, char *msg, size_t msglen) {
    switch (v->type) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: wb_le(b, v->u64, 1); return 0;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: wb_le(b, v->u64, 2); return 0;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: wb_le(b, v->u64, 4); return 0;
    case GGUF_VT_UINT64: case GGUF_VT_INT64: wb_le(b, v->u64, 8); return 0;
    case GGUF_VT_FLOAT32: {
        float f = (float)v->f64;
        uint32_t u;
        memcpy(&u, &f, 4);
        wb_le(b, u, 4);
        return 0;
    }
    case GGUF_VT_FLOAT64: {
        uint64_t u;
        memcpy(&u, &v->f64, 8);
        wb_le(b, u, 8);
        return 0;
    }
    case GGUF_VT_STRING:
        if (v->str.len && !v->str.ptr) break;
        wb_str(b, v->str.ptr, v->str.len);
        return 0;
    case GGUF_VT_ARRAY: {
        gguf_vtype et = v->arr.elem_type;
        if (depth + 1 > GGUF_MAX_ARRAY_DEPTH) {
            snprintf(msg, msglen, "arrays nested deeper than %d levels", GGUF_MAX_ARRAY_DEPTH);
            return -1;
        }
        if ((unsigned)et >= GGUF_VT_COUNT) break;
        wb_le(b, (uint64_t)et, 4);
        wb_le(b, v->arr.n, 8);
        if (v->arr.n == 0) return 0;
        size_t es = gg_vtype_size(et);
        if (es) {
            if (!v->arr.raw || v->arr.n > SIZE_MAX / es) break;
            wb_put(b, v->arr.raw, (size_t)(v->arr.n * es));  // already packed little-endian
            return 0;
        }
        if (!v->arr.items) break;
        for (uint64_t i = 0; i < v->arr.n; i++) {
            if (v->arr.items[i].type != et) {
                snprintf(msg, msglen, "array element %llu has type %s, the array says %s", (ull)i,
                         gguf_vtype_name(v->arr.items[i].type), gguf_vtype_name(et));
                return -1;
            }
            if (enc_value(b, &v->arr.items[i], depth + 1, msg, msglen)) return -1;
        }
        return 0;
    }
    default: break;
    }
    snprintf(msg, msglen, "malformed %s value", gguf_vtype_name(v->type));
    return -1;
}

// ---- metadata ---------------------------------------------------------------------------------------------------

gguf_writer *gguf_writer_new(void) {
    gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->alignment = GGUF_DEFAULT_ALIGNMENT;
    w->version = 3;
    return w;
}

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    gg_map_free(&w->names);
    free(w);
}

static wkv *find_key(gguf_writer *w, const char *key) {
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) return &w->kv[i];
    return NULL;
}

static void remove_key(gguf_writer *w, const char *key) {
    wkv *kv = find_key(w, key);
    if (!kv) return;
    free(kv->key);
    free(kv->val);
    size_t i = (size_t)(kv - w->kv);
    memmove(&w->kv[i], &w->kv[i + 1], (w->n_kv - i - 1) * sizeof *kv);
    w->n_kv--;
}

void gguf_w_set_value(gguf_writer *w, const char *key, const gguf_value *v) {
    if (!key || !key[0]) {
        werr(w, "gguf writer: empty metadata key");
        return;
    }
    wbuf b = {0};
    char msg[256] = "";
    wb_le(&b, (uint64_t)v->type, 4);
    if (enc_value(&b, v, 0, msg, sizeof msg) || b.oom) {
        werr(w, "gguf writer: key '%s': %s", key, b.oom ? "out of memory" : msg);
        free(b.p);
        return;
    }
    // general.alignment decides the data layout, so keep w->alignment in step with it.
    if (strcmp(key, "general.alignment") == 0) {
        if (v->type != GGUF_VT_UINT32 || v->u64 == 0 || (v->u64 & (v->u64 - 1)) || v->u64 > UINT32_MAX) {
            werr(w, "gguf writer: general.alignment must be a uint32 power of two");
            free(b.p);
            return;
        }
        w->alignment = (uint32_t)v->u64;
    }
    wkv *kv = find_key(w, key);
    if (kv) {
        free(kv->val);
    } else {
        if (w->n_kv == w->cap_kv) {
            size_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
            wkv *n = realloc(w->kv, cap * sizeof *n);
            if (!n) {
                werr(w, "gguf writer: out of memory");
                free(b.p);
                return;
            }
            w->kv = n;
            w->cap_kv = cap;
        }
        kv = &w->kv[w->n_kv];
        kv->key = strdup(key);
        if (!kv->key) {
            werr(w, "gguf writer: out of memory");
            free(b.p);
            return;
        }
        w->n_kv++;
    }
    kv->val = b.p;
    kv->len = b.n;
}

static void set_scalar(gguf_writer *w, const char *key, gguf_vtype t, uint64_t bits) {
    gguf_value v;
    memset(&v, 0, sizeof v);
    v.type = t;
    v.u64 = bits;
    gguf_w_set_value(w, key, &v);
}

void gguf_w_set_u8(gguf_writer *w, const char *key, uint8_t v) { set_scalar(w, key, GGUF_VT_UINT8, v); }
void gguf_w_set_i8(gguf_writer *w, const char *key, int8_t v) { set_scalar(w, key, GGUF_VT_INT8, (uint64_t)(int64_t)v); }
void gguf_w_set_u16(gguf_writer *w, const char *key, uint16_t v) { set_scalar(w, key, GGUF_VT_UINT16, v); }
void gguf_w_set_i16(gguf_writer *w, const char *key, int16_t v) {
    set_scalar(w, key, GGUF_VT_INT16, (uint64_t)(int64_t)v);
}
void gguf_w_set_u32(gguf_writer *w, const char *key, uint32_t v) { set_scalar(w, key, GGUF_VT_UINT32, v); }
void gguf_w_set_i32(gguf_writer *w, const char *key, int32_t v) {
    set_scalar(w, key, GGUF_VT_INT32, (uint64_t)(int64_t)v);
}
void gguf_w_set_u64(gguf_writer *w, const char *key, uint64_t v) { set_scalar(w, key, GGUF_VT_UINT64, v); }
void gguf_w_set_i64(gguf_writer *w, const char *key, int64_t v) { set_scalar(w, key, GGUF_VT_INT64, (uint64_t)v); }
void gguf_w_set_bool(gguf_writer *w, const char *key, bool v) { set_scalar(w, key, GGUF_VT_BOOL, v ? 1 : 0); }

static void set_float(gguf_writer *w, const char *key, gguf_vtype t, double v) {
    gguf_value x;
    memset(&x, 0, sizeof x);
    x.type = t;
    x.f64 = v;
    gguf_w_set_value(w, key, &x);
}

void gguf_w_set_f32(gguf_writer *w, const char *key, float v) { set_float(w, key, GGUF_VT_FLOAT32, v); }
void gguf_w_set_f64(gguf_writer *w, const char *key, double v) { set_float(w, key, GGUF_VT_FLOAT64, v); }

void gguf_w_set_str(gguf_writer *w, const char *key, const char *s) {
    gguf_value x;
    memset(&x, 0, sizeof x);
    x.type = GGUF_VT_STRING;
    x.str.ptr = s ? s : "";
    x.str.len = s ? strlen(s) : 0;
    gguf_w_set_value(w, key, &x);
}

void gguf_w_set_arr(gguf_writer *w, const char *key, gguf_vtype elem_type, uint64_t n, const void *data) {
    if (gg_vtype_size(elem_type) == 0) {
        werr(w, "gguf writer: key '%s': gguf_w_set_arr takes scalar elements, not %s", key ? key : "",
             gguf_vtype_name(elem_type));
        return;
    }
    gguf_value x;
    memset(&x, 0, sizeof x);
    x.type = GGUF_VT_ARRAY;
    x.arr.elem_type = elem_type;
    x.arr.n = n;
    x.arr.raw = data;
    gguf_w_set_value(w, key, &x);
}

void gguf_w_set_arr_str(gguf_writer *w, const char *key, uint64_t n, const char *const *strs) {
    gguf_value x;
    memset(&x, 0, sizeof x);
    x.type = GGUF_VT_ARRAY;
    x.arr.elem_type = GGUF_VT_STRING;
    x.arr.n = n;
    if (n) {
        x.arr.items = n <= SIZE_MAX / sizeof(gguf_value) ? calloc((size_t)n, sizeof(gguf_value)) : NULL;
        if (!x.arr.items) {
            werr(w, "gguf writer: key '%s': out of memory", key ? key : "");
            return;
        }
        for (uint64_t i = 0; i < n; i++) {
            x.arr.items[i].type = GGUF_VT_STRING;
            x.arr.items[i].str.ptr = strs[i] ? strs[i] : "";
            x.arr.items[i].str.len = strs[i] ? strlen(strs[i]) : 0;
        }
    }
    gguf_w_set_value(w, key, &x);
    free(x.arr.items);
}

void gguf_w_set_alignment(gguf_writer *w, uint32_t alignment) {
    if (alignment == 0 || (alignment & (alignment - 1))) {
        werr(w, "gguf writer: alignment %u is not a power of two", alignment);
        return;
    }
    if (alignment == GGUF_DEFAULT_ALIGNMENT) {
        remove_key(w, "general.alignment");
        w->alignment = alignment;
    } else {
        gguf_w_set_u32(w, "general.alignment", alignment);
    }
}

void gguf_w_set_version(gguf_writer *w, uint32_t version) {
    if (version != 2 && version != 3) {
        werr(w, "gguf writer: version %u is not supported (2 or 3)", version);
        return;
    }
    w->version = version;
}

// ---- tensors ----------------------------------------------------------------------------------------------------

int gguf_w_add_tensor(gguf_writer *w, const char *name, int type, uint32_t n_dims, const int64_t *ne) {
    size_t len = name ? strlen(name) : 0;
    if (len == 0) return st_err("gguf writer: tensor with an empty name");
    if (len >= GGUF_MAX_NAME)
        return st_err("gguf writer: tensor name '%s' is %zu bytes, longer than the %d allowed", name, len,
                      GGUF_MAX_NAME - 1);
    if (gg_map_get(&w->names, name, len, NULL)) return st_err("gguf writer: duplicate tensor name '%s'", name);
    const st_type_info *ti = st_type_get(type);
    if (!ti) return st_err("gguf writer: tensor '%s': unknown tensor type %d", name, type);
    if (n_dims == 0 || n_dims > GGUF_MAX_DIMS)
        return st_err("gguf writer: tensor '%s': n_dims is %u, must be 1..%d", name, n_dims, GGUF_MAX_DIMS);
    wtensor t = {.type = type, .n_dims = n_dims};
    uint64_t nel = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        int64_t v = (uint32_t)d < n_dims ? ne[d] : 1;
        if (v <= 0) return st_err("gguf writer: tensor '%s': dimension %d is %lld, must be positive", name, d, (long long)v);
        if ((uint64_t)v > (uint64_t)INT64_MAX / nel)
            return st_err("gguf writer: tensor '%s': element count overflows", name);
        nel *= (uint64_t)v;
        t.ne[d] = v;
    }
    if (t.ne[0] % ti->block_size)
        return st_err("gguf writer: tensor '%s': row length %lld is not a multiple of the %s block size %d", name,
                      (long long)t.ne[0], ti->name, ti->block_size);
    uint64_t row = st_row_size(type, t.ne[0]), rows = nel / (uint64_t)t.ne[0];
    if (row == 0 || row > UINT64_MAX / rows) return st_err("gguf writer: tensor '%s': size in bytes overflows", name);
    t.nbytes = row * rows;
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 64;
        wtensor *n = realloc(w->t, cap * sizeof *n);
        if (!n) return st_err("gguf writer: out of memory");
        w->t = n;
        w->cap_t = cap;
    }
    t.name = strdup(name);
    if (!t.name) return st_err("gguf writer: out of memory");
    if (gg_map_put(&w->names, t.name, len, w->n_t, NULL) < 0) {
        free(t.name);
        return st_err("gguf writer: out of memory");
    }
    w->t[w->n_t] = t;
    return (int)w->n_t++;
}

// ---- writing ----------------------------------------------------------------------------------------------------

static int pwrite_all(int fd, const void *buf, uint64_t n, uint64_t off, const char *path) {
    const uint8_t *p = buf;
    while (n > 0) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;  // Linux caps one write near 2 GiB
        ssize_t k = pwrite(fd, p, chunk, (off_t)off);
        if (k < 0) {
            if (errno == EINTR) continue;
            return st_err("%s: write of %zu bytes at offset 0x%llx failed: %s", path, chunk, (ull)off, strerror(errno));
        }
        p += k;
        off += (uint64_t)k;
        n -= (uint64_t)k;
    }
    return 0;
}

typedef struct wjob {
    const gguf_writer *w;
    gguf_fill_fn fill;
    void *ud;
    int fd;
    const char *path;
    uint8_t *map;          // writable mapping of the file from byte map_off (NULL: buffered pwrite fallback)
    uint64_t map_off;
    uint64_t data_off;     // file offset of the data section
    const uint32_t *order; // tensor indices, largest first, so big tensors do not finish last on one thread
    st_progress *prog;
    atomic_int failed;
    pthread_mutex_t lock;
    char err[ST_ERR_MAX];  // first failure (errors are per thread, so workers copy theirs here)
} wjob;

static void job_fail(wjob *j) {
    pthread_mutex_lock(&j->lock);
    if (!atomic_load(&j->failed)) snprintf(j->err, sizeof j->err, "%s", st_errmsg());
    atomic_store(&j->failed, 1);
    pthread_mutex_unlock(&j->lock);
}

static void write_task(void *ud, int64_t k, int thread) {
    wjob *j = ud;
    if (atomic_load(&j->failed)) return;
    uint32_t i = j->order[k];
    const wtensor *t = &j->w->t[i];
    uint64_t file_off = j->data_off + t->offset;
    if (j->map) {
        st_err_clear();
        if (j->fill(j->ud, (int)i, j->map + (file_off - j->map_off), t->nbytes) != 0) {
            st_err_prefix("%s: tensor '%s': fill failed: ", j->path, t->name);
            job_fail(j);
            return;
        }
    } else {
        void *buf = malloc((size_t)t->nbytes);
        if (!buf) {
            st_err("%s: tensor '%s': out of memory for %llu bytes", j->path, t->name, (ull)t->nbytes);
            job_fail(j);
            return;
        }
        st_err_clear();
        int rc = j->fill(j->ud, (int)i, buf, t->nbytes);
        if (rc != 0) st_err_prefix("%s: tensor '%s': fill failed: ", j->path, t->name);
        else rc = pwrite_all(j->fd, buf, t->nbytes, file_off, j->path);
        free(buf);
        if (rc) {
            job_fail(j);
            return;
        }
    }
    if (j->prog) st_progress_add(j->prog, t->nbytes);
}

typedef struct size_idx {
    uint64_t nbytes;
    uint32_t idx;
} size_idx;

static int cmp_size_desc(const void *a, const void *b) {
    const size_idx *x = a, *y = b;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? 1 : -1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

int gguf_w_write(gguf_writer *w, const char *path, gguf_fill_fn fill, void *ud, int n_threads,
                 const char *progress_label) {
    if (w->failed) return st_err("%s: %s", path, w->err);
    uint64_t al = w->alignment, off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        off += w->t[i].nbytes;
        off += (al - off % al) % al;  // llama.cpp expects every tensor, the last one included, padded
    }
    uint64_t data_size = off;

    wbuf b = {0};
    wb_le(&b, GGUF_MAGIC, 4);
    wb_le(&b, w->version, 4);
    wb_le(&b, w->n_t, 8);
    wb_le(&b, w->n_kv, 8);
    for (size_t i = 0; i < w->n_kv; i++) {
        wb_str(&b, w->kv[i].key, strlen(w->kv[i].key));
        wb_put(&b, w->kv[i].val, w->kv[i].len);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        wb_str(&b, t->name, strlen(t->name));
        wb_le(&b, t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++) wb_le(&b, (uint64_t)t->ne[d], 8);
        wb_le(&b, (uint64_t)t->type, 4);
        wb_le(&b, t->offset, 8);
    }
    static const uint8_t zeros[4096];
    while (b.n % al) wb_put(&b, zeros, (size_t)(al - b.n % al) > sizeof zeros ? sizeof zeros : (size_t)(al - b.n % al));
    if (b.oom) {
        free(b.p);
        return st_err("%s: out of memory building the header", path);
    }
    uint64_t data_off = b.n, total = data_off + data_size;

    size_t tlen = strlen(path) + 32;
    char *tmp = malloc(tlen);
    if (!tmp) {
        free(b.p);
        return st_err("out of memory");
    }
    snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st_err("%s: cannot create: %s", tmp, strerror(errno));
        free(b.p);
        free(tmp);
        return -1;
    }
    int rc = -1;
    uint32_t *order = NULL;
    st_pool *pool = NULL;
    wjob j = {.w = w, .fill = fill, .ud = ud, .fd = fd, .path = path, .data_off = data_off};
    pthread_mutex_init(&j.lock, NULL);

    // A writable mapping of a file the disk cannot hold faults with SIGBUS instead of returning ENOSPC, so check
    // the space first (tensors the callback leaves untouched stay sparse, so this may over-estimate).
    struct statvfs vfs;
    if (fill && data_size && fstatvfs(fd, &vfs) == 0 && vfs.f_frsize &&
        (uint64_t)vfs.f_bavail < total / vfs.f_frsize + 1) {
        char need[32], have[32];
        st_err("%s: not enough disk space: the file needs %s, %s available", path, st_fmt_bytes(need, 32, (double)total),
               st_fmt_bytes(have, 32, (double)vfs.f_bavail * (double)vfs.f_frsize));
        goto out;
    }
    if (ftruncate(fd, (off_t)total) != 0) {
        st_err("%s: cannot size to %llu bytes: %s", tmp, (ull)total, strerror(errno));
        goto out;
    }
    if (pwrite_all(fd, b.p, data_off, 0, tmp)) goto out;

    if (fill && w->n_t) {
        long page = sysconf(_SC_PAGESIZE);
        j.map_off = data_off / (uint64_t)page * (uint64_t)page;
        void *m = mmap(NULL, (size_t)(total - j.map_off), PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)j.map_off);
        if (m == MAP_FAILED) {
            st_warn("%s: cannot map for writing (%s); writing through buffers", path, strerror(errno));
        } else {
            j.map = m;
        }
        order = malloc(w->n_t * sizeof *order);
        size_idx *si = malloc(w->n_t * sizeof *si);
        if (!order || !si) {
            free(si);
            st_err("out of memory");
            goto out;
        }
        for (size_t i = 0; i < w->n_t; i++) si[i] = (size_idx){w->t[i].nbytes, (uint32_t)i};
        qsort(si, w->n_t, sizeof *si, cmp_size_desc);
        for (size_t i = 0; i < w->n_t; i++) order[i] = si[i].idx;
        free(si);
        j.order = order;
        if (n_threads <= 0) n_threads = st_cpu_count();
        if ((size_t)n_threads > w->n_t) n_threads = (int)w->n_t;
        pool = st_pool_create(n_threads);
        if (!pool) {
            st_err("out of memory");
            goto out;
        }
        st_progress prog;
        if (progress_label) {
            st_progress_begin(&prog, progress_label, data_size, 1);
            j.prog = &prog;
        }
        st_pool_run(pool, (int64_t)w->n_t, write_task, &j);
        if (progress_label) st_progress_end(&prog);
        if (atomic_load(&j.failed)) {
            st_err("%s", j.err);
            goto out;
        }
    }
    rc = 0;
out:
    if (j.map && munmap(j.map, (size_t)(total - j.map_off)) != 0 && rc == 0)
        rc = st_err("%s: unmap failed: %s", tmp, strerror(errno));
    if (close(fd) != 0 && rc == 0) rc = st_err("%s: close failed: %s", tmp, strerror(errno));
    if (rc == 0 && rename(tmp, path) != 0) rc = st_err("%s: cannot rename from %s: %s", path, tmp, strerror(errno));
    if (rc != 0) unlink(tmp);
    st_pool_destroy(pool);
    pthread_mutex_destroy(&j.lock);
    free(order);
    free(b.p);
    free(tmp);
    return rc;
}
