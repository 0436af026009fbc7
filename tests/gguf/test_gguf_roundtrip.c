// Writer -> reader round trip: every value type (nested/empty arrays, empty strings, bools), tensors of several
// types, v2 and v3, default and larger alignment; re-writing what was read gives a byte-identical file; typed
// getters; writer error paths.
#include <sys/stat.h>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "sample.h"
#include "tutil.h"
#include "util/fileio.h"

static void check_ctx_matches(const gguf_ctx *c, const sample *s, uint32_t version, uint32_t alignment) {
    REQUIRE(c->n_files == 1);
    CHECK(c->files[0].version == version);
    CHECK(c->files[0].alignment == alignment);
    CHECK(c->files[0].data_offset % alignment == 0);
    CHECK(c->n_kv == (uint64_t)s->n_kv);
    for (int i = 0; i < s->n_kv && (uint64_t)i < c->n_kv; i++) {
        const gguf_kv *kv = &c->kv[i];
        bool same_key = kv->key.len == strlen(s->kv[i].key) && memcmp(kv->key.ptr, s->kv[i].key, kv->key.len) == 0;
        CHECK(same_key);
        if (!same_key) continue;
        CHECK(gguf_find_kv(c, s->kv[i].key) == kv);
        if (!sample_value_eq(&kv->value, &s->kv[i].v)) {
            fprintf(stderr, "value of '%s' differs\n", s->kv[i].key);
            g_failures++;
        }
    }
    CHECK(c->n_tensors == (uint64_t)s->n_t);
    uint64_t total = 0;
    for (int i = 0; i < s->n_t && (uint64_t)i < c->n_tensors; i++) {
        const gguf_tensor *t = &c->tensors[i];
        CHECK(strcmp(t->name, s->t[i].name) == 0);
        CHECK(gguf_find_tensor(c, s->t[i].name) == t);
        CHECK(t->type == s->t[i].type);
        CHECK(t->n_dims == s->t[i].n_dims);
        uint64_t rows = 1;
        for (int d = 0; d < 4; d++) {
            CHECK(t->ne[d] == s->t[i].ne[d]);
            if (d) rows *= (uint64_t)s->t[i].ne[d];
        }
        CHECK(t->nbytes == st_row_size(t->type, t->ne[0]) * rows);
        CHECK(t->offset % alignment == 0);
        CHECK(t->data == c->files[0].map.data + c->files[0].data_offset + t->offset);
        uint8_t *want = malloc(t->nbytes);
        sample_bytes(s->seed, i, want, t->nbytes);
        CHECK(memcmp(want, t->data, t->nbytes) == 0);
        free(want);
        total += t->nbytes;
    }
    CHECK(c->total_bytes == total);
    CHECK(gguf_find_tensor(c, "no.such.tensor") == NULL);
    CHECK(gguf_find_kv(c, "no.such.key") == NULL);
}

static void check_getters(const gguf_ctx *c, const sample *s) {
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f;
    bool b;
    const gguf_value *u8v = NULL;
    for (int i = 0; i < s->n_kv; i++)
        if (strcmp(s->kv[i].key, "s.u8") == 0) u8v = &s->kv[i].v;
    REQUIRE(u8v);
    CHECK(gguf_get_u32(c, "s.u8", &u32) == 0 && u32 == u8v->u64);  // u8 widens
    CHECK(gguf_get_u32(c, "s.u32", &u32) == 0);
    CHECK(gguf_get_u64(c, "s.u64", &u64) == 0 && (u64 >> 63) == 1);
    CHECK(gguf_get_i64(c, "s.u64", &i64) == -1 && strstr(st_errmsg(), "s.u64") && strstr(st_errmsg(), "int64"));
    CHECK(gguf_get_u32(c, "s.i32", &u32) == -1 && strstr(st_errmsg(), "non-negative"));
    CHECK(gguf_get_u32(c, "s.u64", &u32) == -1 && strstr(st_errmsg(), "does not fit in uint32"));
    CHECK(gguf_get_i64(c, "s.i8", &i64) == 0 && i64 <= -100);
    CHECK(gguf_get_f32(c, "s.f32", &f) == 0);
    CHECK(gguf_get_f32(c, "s.u16", &f) == 0);
    CHECK(gguf_get_f32(c, "general.name", &f) == -1 && strstr(st_errmsg(), "expected a number"));
    CHECK(gguf_get_bool(c, "s.bool_t", &b) == 0 && b);
    CHECK(gguf_get_bool(c, "s.bool_f", &b) == 0 && !b);
    CHECK(gguf_get_bool(c, "s.u8", &b) == -1);
    CHECK(gguf_get_u32(c, "missing.key", &u32) == -1 && strstr(st_errmsg(), "'missing.key' not found"));
    CHECK(gguf_get_u32(c, "general.name", &u32) == -1 && strstr(st_errmsg(), "has type string"));
    char *str = gguf_get_str_dup(c, "s.replaced");
    CHECK(str && strcmp(str, "final") == 0);
    free(str);
    str = gguf_get_str_dup(c, "s.str_empty");
    CHECK(str && str[0] == '\0');
    free(str);
    CHECK(gguf_get_str_dup(c, "s.u8") == NULL);
    const gguf_kv *kv = gguf_find_kv(c, "a.int16");
    REQUIRE(kv);
    for (uint64_t i = 0; i < kv->value.arr.n; i++) {
        int16_t e;
        memcpy(&e, kv->value.arr.raw + 2 * i, 2);
        CHECK(gguf_arr_i64(&kv->value, i) == e && gguf_arr_f64(&kv->value, i) == (double)e);
    }
    kv = gguf_find_kv(c, "a.float32");
    REQUIRE(kv);
    for (uint64_t i = 0; i < kv->value.arr.n; i++) {
        float e;
        memcpy(&e, kv->value.arr.raw + 4 * i, 4);
        CHECK(gguf_arr_f64(&kv->value, i) == (double)e);
    }
    CHECK(gguf_arr_i64(&kv->value, kv->value.arr.n) == 0);  // out of range reads as 0
}

static int fail_fill(void *ud, int idx, void *dst, uint64_t nbytes) {
    if (idx == 3) return st_err("synthetic failure");
    memset(dst, 1, nbytes);
    return 0;
}

static bool file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

// Re-writes everything read from c (metadata through gguf_w_set_value, tensor bytes copied) to path.
static int copy_fill(void *ud, int idx, void *dst, uint64_t nbytes) {
    const gguf_ctx *c = ud;
    memcpy(dst, c->tensors[idx].data, nbytes);
    return 0;
}

static void rewrite(const gguf_ctx *c, const char *path) {
    gguf_writer *w = gguf_writer_new();
    gguf_w_set_version(w, c->files[0].version);
    for (uint64_t i = 0; i < c->n_kv; i++) {
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)c->kv[i].key.len, c->kv[i].key.ptr);
        gguf_w_set_value(w, key, &c->kv[i].value);
    }
    for (uint64_t i = 0; i < c->n_tensors; i++) {
        const gguf_tensor *t = &c->tensors[i];
        REQUIRE(gguf_w_add_tensor(w, t->name, t->type, t->n_dims, t->ne) == (int)i);
    }
    REQUIRE(gguf_w_write(w, path, copy_fill, (void *)c, 1, NULL) == 0);
    gguf_writer_free(w);
}

static void run_case(uint32_t version, uint32_t alignment, int threads) {
    char path[512], path2[512];
    tmp_path(path, sizeof path, "rt.gguf");
    tmp_path(path2, sizeof path2, "rt2.gguf");
    sample s;
    gguf_writer *w = gguf_writer_new();
    REQUIRE(w);
    if (version != 3) gguf_w_set_version(w, version);
    sample_build(w, &s, g_seed + version * 131 + alignment, 0, alignment);
    REQUIRE(gguf_w_write(w, path, sample_fill, &s, threads, NULL) == 0);
    gguf_writer_free(w);

    gguf_ctx *c = gguf_open(path);
    REQUIRE(c != NULL);
    check_ctx_matches(c, &s, version, alignment);
    check_getters(c, &s);

    // Whole file re-encoded from what the reader returned must match byte for byte.
    rewrite(c, path2);
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    REQUIRE(st_read_file(path, 1 << 26, &a, &na) == 0 && st_read_file(path2, 1 << 26, &b, &nb) == 0);
    CHECK(na == nb && memcmp(a, b, na) == 0);
    CHECK(na == c->files[0].map.size);
    // every tensor padded to the alignment, the last one included
    CHECK(na % alignment == 0);
    free(a);
    free(b);

    // The same bytes through gguf_open_memory.
    gguf_ctx *m = gguf_open_memory(c->files[0].map.data, c->files[0].map.size, "mem");
    REQUIRE(m);
    check_ctx_matches(m, &s, version, alignment);
    gguf_close(m);
    gguf_close(c);
    sample_free(&s);
    unlink(path);
    unlink(path2);
}

static void writer_errors(void) {
    char path[512];
    tmp_path(path, sizeof path, "err.gguf");
    gguf_writer *w = gguf_writer_new();
    int64_t ne[4] = {32, 2, 1, 1};
    CHECK(gguf_w_add_tensor(w, "a", ST_TYPE_Q4_0, 2, ne) == 0);
    CHECK(gguf_w_add_tensor(w, "a", ST_TYPE_F32, 2, ne) == -1 && strstr(st_errmsg(), "duplicate tensor name 'a'"));
    CHECK(gguf_w_add_tensor(w, "", ST_TYPE_F32, 2, ne) == -1 && strstr(st_errmsg(), "empty name"));
    char longname[100];
    memset(longname, 'y', 99);
    longname[99] = 0;
    CHECK(gguf_w_add_tensor(w, longname, ST_TYPE_F32, 2, ne) == -1 && strstr(st_errmsg(), "longer than"));
    CHECK(gguf_w_add_tensor(w, "b", 4, 2, ne) == -1 && strstr(st_errmsg(), "unknown tensor type 4"));
    CHECK(gguf_w_add_tensor(w, "b", ST_TYPE_F32, 0, ne) == -1 && strstr(st_errmsg(), "n_dims is 0"));
    CHECK(gguf_w_add_tensor(w, "b", ST_TYPE_F32, 5, ne) == -1 && strstr(st_errmsg(), "n_dims is 5"));
    int64_t bad[4] = {16, 2, 1, 1};
    CHECK(gguf_w_add_tensor(w, "b", ST_TYPE_Q4_0, 2, bad) == -1 && strstr(st_errmsg(), "block size 32"));
    int64_t neg[4] = {16, -2, 1, 1};
    CHECK(gguf_w_add_tensor(w, "b", ST_TYPE_F32, 2, neg) == -1 && strstr(st_errmsg(), "dimension 1 is -2"));
    int64_t big[4] = {1ll << 40, 1ll << 40, 1, 1};
    CHECK(gguf_w_add_tensor(w, "b", ST_TYPE_F32, 2, big) == -1 && strstr(st_errmsg(), "overflows"));
    for (int i = 0; i < 5; i++) {
        char name[16];
        snprintf(name, sizeof name, "t%d", i);
        CHECK(gguf_w_add_tensor(w, name, ST_TYPE_F32, 1, ne) == i + 1);
    }
    // A failing fill callback fails the write, names the tensor, and leaves no file behind.
    CHECK(gguf_w_write(w, path, fail_fill, NULL, 2, NULL) == -1);
    CHECK(strstr(st_errmsg(), "tensor 't2'") && strstr(st_errmsg(), "synthetic failure"));
    CHECK(!file_exists(path));
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    CHECK(!file_exists(tmp));
    // Sticky errors from the void setters surface at write time.
    gguf_w_set_arr(w, "x", GGUF_VT_STRING, 1, "abc");
    CHECK(gguf_w_write(w, path, fail_fill, NULL, 1, NULL) == -1 && strstr(st_errmsg(), "scalar elements"));
    gguf_writer_free(w);
    w = gguf_writer_new();
    gguf_w_set_alignment(w, 48);
    CHECK(gguf_w_write(w, path, NULL, NULL, 1, NULL) == -1 && strstr(st_errmsg(), "48 is not a power of two"));
    gguf_writer_free(w);
    w = gguf_writer_new();
    gguf_w_set_u64(w, "general.alignment", 64);
    CHECK(gguf_w_write(w, path, NULL, NULL, 1, NULL) == -1 && strstr(st_errmsg(), "uint32 power of two"));
    gguf_writer_free(w);
    // Unwritable destination.
    w = gguf_writer_new();
    CHECK(gguf_w_write(w, "/nonexistent-dir/x.gguf", NULL, NULL, 1, NULL) == -1 && strstr(st_errmsg(), "cannot create"));
    gguf_writer_free(w);
    // An empty model (no kv, no tensors) is valid.
    w = gguf_writer_new();
    CHECK(gguf_w_write(w, path, NULL, NULL, 1, NULL) == 0);
    gguf_writer_free(w);
    gguf_ctx *c = gguf_open(path);
    CHECK(c && c->n_kv == 0 && c->n_tensors == 0);
    gguf_close(c);
    unlink(path);
    // Missing file.
    CHECK(gguf_open("/nonexistent-dir/x.gguf") == NULL && strstr(st_errmsg(), "/nonexistent-dir/x.gguf"));
}

int main(void) {
    test_seed();
    run_case(3, 32, 2);
    run_case(2, 32, 1);   // v2 files are accepted
    run_case(3, 256, 3);  // general.alignment
    writer_errors();
    if (g_failures) fprintf(stderr, "%d failures (seed %llu)\n", g_failures, (unsigned long long)g_seed);
    else printf("round trip ok (seed %llu)\n", (unsigned long long)g_seed);
    return g_failures ? 1 : 0;
}
