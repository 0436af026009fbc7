// Bad-file corpus: builds a small valid GGUF by hand, then one file per defect (structural edits before building,
// byte patches after), opens each with gguf_open_memory and checks that it fails with the expected message,
// including the byte offset where the defect sits. `--write-corpus DIR` also saves every file (fuzzer seeds).
#include <stdbool.h>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "tutil.h"

enum kv_kind {
    K_STR, K_U32, K_BOOL, K_ARR_STR, K_NESTED, K_F32, K_ALIGN,
    // damaged values
    K_BOOL2, K_VT13, K_STR_HUGE, K_ARR_HUGE, K_ARR_STR_ELEM_HUGE, K_ARR_BADELEM, K_NESTED_HUGE, K_STR_ARR_COUNT_HUGE,
    K_DEEP,
};

typedef struct kvspec {
    const char *key;
    uint64_t key_len;  // bytes of key to write (may include a NUL)
    int kind;
} kvspec;

typedef struct tspec {
    const char *name;
    uint64_t name_len;
    uint32_t n_dims;
    int64_t ne[4];
    uint32_t type;
} tspec;

#define MAXKV 12
#define MAXT 4

typedef struct fspec {
    uint32_t magic, version;
    int n_kv;
    kvspec kv[MAXKV];
    int n_t;
    tspec t[MAXT];
    uint64_t align;          // general.alignment value
    uint32_t align_type;     // its value type
} fspec;

// Byte offsets recorded while building, so expectations can name exact positions.
typedef struct marks {
    size_t kv[MAXKV], kv_type[MAXKV], kv_val[MAXKV], kv_elem[MAXKV];  // kv_elem: 2nd element of a string array
    size_t t[MAXT], t_ndims[MAXT], t_ne[MAXT][4], t_type[MAXT], t_off[MAXT];
    size_t end_infos, data_off;
    uint64_t t_offset[MAXT], t_nbytes[MAXT];
} marks;

static void base_spec(fspec *s) {
    memset(s, 0, sizeof *s);
    s->magic = GGUF_MAGIC;
    s->version = 3;
    const char *keys[] = {"general.architecture", "test.u32", "test.bool", "test.strings",
                          "test.nested", "test.f32", "general.alignment"};
    int kinds[] = {K_STR, K_U32, K_BOOL, K_ARR_STR, K_NESTED, K_F32, K_ALIGN};
    s->n_kv = 7;
    for (int i = 0; i < s->n_kv; i++) s->kv[i] = (kvspec){keys[i], strlen(keys[i]), kinds[i]};
    s->align = 32;
    s->align_type = GGUF_VT_UINT32;
    s->n_t = 3;
    s->t[0] = (tspec){"tok_embd.weight", 15, 2, {8, 2, 1, 1}, ST_TYPE_F32};
    s->t[1] = (tspec){"blk.0.attn_q.weight", 19, 2, {32, 2, 1, 1}, ST_TYPE_Q4_0};
    s->t[2] = (tspec){"output.weight", 13, 1, {4, 1, 1, 1}, ST_TYPE_F16};
}

static void put_value(tbuf *b, const fspec *s, int kind, marks *m, int i) {
    switch (kind) {
    case K_STR: tb_u32(b, GGUF_VT_STRING); m->kv_val[i] = b->n; tb_str(b, "llama"); break;
    case K_U32: tb_u32(b, GGUF_VT_UINT32); m->kv_val[i] = b->n; tb_u32(b, 7); break;
    case K_BOOL: tb_u32(b, GGUF_VT_BOOL); m->kv_val[i] = b->n; tb_u8(b, 1); break;
    case K_BOOL2: tb_u32(b, GGUF_VT_BOOL); m->kv_val[i] = b->n; tb_u8(b, 2); break;
    case K_F32: tb_u32(b, GGUF_VT_FLOAT32); m->kv_val[i] = b->n; tb_u32(b, 0x3fc00000); break;
    case K_VT13: tb_u32(b, 13); m->kv_val[i] = b->n; tb_u32(b, 0); break;
    case K_STR_HUGE: tb_u32(b, GGUF_VT_STRING); m->kv_val[i] = b->n; tb_u64(b, 1ull << 40); tb_put(b, "abc", 3); break;
    case K_ALIGN:
        tb_u32(b, s->align_type);
        m->kv_val[i] = b->n;
        tb_le(b, s->align, s->align_type == GGUF_VT_UINT64 ? 8 : 4);
        break;
    case K_ARR_STR:
    case K_ARR_STR_ELEM_HUGE:
        tb_u32(b, GGUF_VT_ARRAY);
        m->kv_val[i] = b->n;
        tb_u32(b, GGUF_VT_STRING);
        tb_u64(b, 2);
        tb_str(b, "a");
        m->kv_elem[i] = b->n;
        if (kind == K_ARR_STR) tb_str(b, "bc");
        else tb_u64(b, 1ull << 50);
        break;
    case K_STR_ARR_COUNT_HUGE:
        tb_u32(b, GGUF_VT_ARRAY);
        m->kv_val[i] = b->n;
        tb_u32(b, GGUF_VT_STRING);
        tb_u64(b, 1ull << 50);
        tb_str(b, "a");
        break;
    case K_ARR_HUGE:
        tb_u32(b, GGUF_VT_ARRAY);
        m->kv_val[i] = b->n;
        tb_u32(b, GGUF_VT_UINT32);
        tb_u64(b, 1ull << 40);
        tb_u32(b, 1);
        break;
    case K_ARR_BADELEM:
        tb_u32(b, GGUF_VT_ARRAY);
        m->kv_val[i] = b->n;
        tb_u32(b, 42);
        tb_u64(b, 1);
        tb_u32(b, 1);
        break;
    case K_NESTED:
    case K_NESTED_HUGE:  // [[1, 2], [3]] of int32; the damaged one claims 2^40 elements in the second
        tb_u32(b, GGUF_VT_ARRAY);
        m->kv_val[i] = b->n;
        tb_u32(b, GGUF_VT_ARRAY);
        tb_u64(b, 2);
        tb_u32(b, GGUF_VT_INT32);
        tb_u64(b, 2);
        tb_u32(b, 1);
        tb_u32(b, 2);
        m->kv_elem[i] = b->n;
        tb_u32(b, GGUF_VT_INT32);
        tb_u64(b, kind == K_NESTED ? 1 : 1ull << 40);
        tb_u32(b, 3);
        break;
    case K_DEEP:  // 20 levels of one-element arrays
        tb_u32(b, GGUF_VT_ARRAY);
        m->kv_val[i] = b->n;
        for (int d = 0; d < 19; d++) {
            tb_u32(b, GGUF_VT_ARRAY);
            tb_u64(b, 1);
        }
        tb_u32(b, GGUF_VT_INT32);
        tb_u64(b, 0);
        break;
    }
}

static uint64_t tensor_nbytes(const tspec *t) {
    return st_row_size((int)t->type, t->ne[0]) * (uint64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
}

// Serializes s. Tensor offsets and the data size always come from the base layout (defects patch them later).
static void build(const fspec *s, tbuf *b, marks *m) {
    memset(m, 0, sizeof *m);
    b->n = 0;
    fspec base;
    base_spec(&base);
    uint64_t off = 0;
    for (int i = 0; i < base.n_t; i++) {
        m->t_offset[i] = off;
        m->t_nbytes[i] = tensor_nbytes(&base.t[i]);
        off += (m->t_nbytes[i] + 31) / 32 * 32;
    }
    uint64_t data_size = off;
    tb_u32(b, s->magic);
    tb_u32(b, s->version);
    tb_u64(b, (uint64_t)s->n_t);
    tb_u64(b, (uint64_t)s->n_kv);
    for (int i = 0; i < s->n_kv; i++) {
        m->kv[i] = b->n;
        tb_strn(b, s->kv[i].key, s->kv[i].key_len);
        m->kv_type[i] = b->n;
        put_value(b, s, s->kv[i].kind, m, i);
    }
    for (int i = 0; i < s->n_t; i++) {
        const tspec *t = &s->t[i];
        m->t[i] = b->n;
        tb_strn(b, t->name, t->name_len);
        m->t_ndims[i] = b->n;
        tb_u32(b, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) {
            m->t_ne[i][d] = b->n;
            tb_u64(b, (uint64_t)t->ne[d]);
        }
        m->t_type[i] = b->n;
        tb_u32(b, t->type);
        m->t_off[i] = b->n;
        tb_u64(b, m->t_offset[i]);
    }
    m->end_infos = b->n;
    while (b->n % 32) tb_u8(b, 0);
    m->data_off = b->n;
    for (uint64_t k = 0; k < data_size; k++) tb_u8(b, (uint8_t)(k * 7 + 1));
}

typedef struct defect {
    const char *name;
    char want[160];  // expected substring
    long long off;   // expected "offset 0x..:" in the message, or -1
} defect;

#define N_DEFECTS 64

// Builds defect number d into b; returns false when d is past the last defect.
static bool make_defect(int d, tbuf *b, defect *out) {
    fspec s;
    marks m;
    base_spec(&s);
    memset(out, 0, sizeof *out);
    out->off = -1;
    char longname[80];
    memset(longname, 'x', sizeof longname);
    // structural edits (before building)
    switch (d) {
    case 10: s.kv[1].key = ""; s.kv[1].key_len = 0; break;
    case 11: s.kv[2].key = "test.u32"; s.kv[2].key_len = 8; break;
    case 12: s.kv[1].kind = K_VT13; break;
    case 13: s.kv[0].kind = K_STR_HUGE; break;
    case 14: s.kv[1].kind = K_ARR_HUGE; break;
    case 15: s.kv[3].kind = K_ARR_STR_ELEM_HUGE; break;
    case 16: s.kv[4].kind = K_DEEP; break;
    case 17: s.kv[1].kind = K_ARR_BADELEM; break;
    case 18: s.kv[2].kind = K_BOOL2; break;
    case 19: s.align_type = GGUF_VT_UINT64; break;
    case 20: s.align = 48; break;
    case 21: s.align = 0; break;
    case 22: s.t[1].name_len = 0; break;
    case 23: s.t[1].name = longname; s.t[1].name_len = 70; break;
    case 24: s.t[2].name = s.t[0].name; s.t[2].name_len = s.t[0].name_len; break;
    case 39: s.kv[1].key = "test\0u32"; s.kv[1].key_len = 8; break;
    case 40: s.t[0].name = "tok\0embd"; s.t[0].name_len = 8; break;
    case 42: s.kv[4].kind = K_NESTED_HUGE; break;
    case 43: s.kv[3].kind = K_STR_ARR_COUNT_HUGE; break;
    case 44: s.version = 2; break;  // a v2 header is fine, the defect is the bad bool below
    default: break;
    }
    if (d == 44) s.kv[2].kind = K_BOOL2;
    build(&s, b, &m);
    // byte patches and expectations (after building)
#define EXPECT(nm, offset, ...)                                       \
    do {                                                              \
        out->name = nm;                                               \
        out->off = (long long)(offset);                               \
        snprintf(out->want, sizeof out->want, __VA_ARGS__);           \
    } while (0)
    switch (d) {
    case 0: b->n = 0; EXPECT("empty_file", 0, "truncated header (magic)"); break;
    case 1: memcpy(b->p, "GGML", 4); EXPECT("bad_magic", 0, "bad magic 'GGML'"); break;
    case 2: tb_patch_u32(b, 4, 0x03000000); EXPECT("big_endian", 4, "big-endian GGUF"); break;
    case 3: tb_patch_u32(b, 4, 1); EXPECT("version_1", 4, "unsupported GGUF version 1"); break;
    case 4: tb_patch_u32(b, 4, 4); EXPECT("version_4", 4, "unsupported GGUF version 4"); break;
    case 5: b->n = 20; EXPECT("truncated_header", 16, "truncated header (key-value count)"); break;
    case 6: tb_patch_u64(b, 16, 1ull << 60); EXPECT("n_kv_absurd", 16, "key-value count %llu is impossible", 1ull << 60); break;
    case 7: tb_patch_u64(b, 8, 1ull << 40); EXPECT("n_tensors_absurd", 8, "tensor count %llu is impossible", 1ull << 40); break;
    case 8: tb_patch_u64(b, m.kv[0], 1ull << 40); EXPECT("key_len_past_end", m.kv[0], "key length %llu runs past the end", 1ull << 40); break;
    case 9: {  // key length one byte more than the file holds
        size_t rem = b->n - (m.kv[6] + 8);
        tb_patch_u64(b, m.kv[6], rem + 1);
        EXPECT("key_len_one_past_end", m.kv[6], "key length %zu runs past the end of the file (%zu bytes remain)", rem + 1, rem);
        break;
    }
    case 10: EXPECT("empty_key", m.kv[1], "key-value pair 1 has an empty key"); break;
    case 11: EXPECT("duplicate_key", m.kv[2], "duplicate key 'test.u32' (first defined at offset 0x%zx)", m.kv[1]); break;
    case 12: EXPECT("unknown_value_type", m.kv_type[1], "key 'test.u32': unknown value type 13"); break;
    case 13: EXPECT("string_past_end", m.kv_val[0], "string value length %llu runs past the end", 1ull << 40); break;
    case 14: EXPECT("array_count_absurd", m.kv_val[1] + 4, "array of %llu uint32 elements needs at least", 1ull << 40); break;
    case 15: EXPECT("array_string_past_end", m.kv_elem[3], "string value length %llu runs past the end", 1ull << 50); break;
    case 16: EXPECT("arrays_too_deep", m.kv_val[4] + 8 * 12, "key 'test.nested': arrays nested deeper than 8 levels"); break;
    case 17: EXPECT("array_bad_elem_type", m.kv_val[1], "unknown array element type 42"); break;
    case 18: EXPECT("bool_not_0_1", m.kv_val[2], "key 'test.bool': bool value is 2, must be 0 or 1"); break;
    case 19: EXPECT("alignment_type", m.kv[6], "general.alignment has type uint64, must be uint32"); break;
    case 20: EXPECT("alignment_48", m.kv[6], "general.alignment 48 is not a power of two"); break;
    case 21: EXPECT("alignment_0", m.kv[6], "general.alignment 0 is not a power of two"); break;
    case 22: EXPECT("tensor_empty_name", m.t[1], "tensor 1 has an empty name"); break;
    case 23: EXPECT("tensor_name_too_long", m.t[1], "is 70 bytes, longer than the 63 allowed"); break;
    case 24: EXPECT("tensor_duplicate_name", m.t[2], "duplicate tensor name 'tok_embd.weight'"); break;
    case 25: tb_patch_u32(b, m.t_ndims[0], 0); EXPECT("n_dims_0", m.t_ndims[0], "tensor 'tok_embd.weight': n_dims is 0, must be 1..4"); break;
    case 26: tb_patch_u32(b, m.t_ndims[1], 5); EXPECT("n_dims_5", m.t_ndims[1], "tensor 'blk.0.attn_q.weight': n_dims is 5, must be 1..4"); break;
    case 27: tb_patch_u64(b, m.t_ne[0][1], 0); EXPECT("dim_zero", m.t_ne[0][1], "dimension 1 is 0, must be positive"); break;
    case 28: tb_patch_u64(b, m.t_ne[0][0], (uint64_t)-8); EXPECT("dim_negative", m.t_ne[0][0], "dimension 0 is -8, must be positive"); break;
    case 29:
        tb_patch_u64(b, m.t_ne[0][0], 1ull << 32);
        tb_patch_u64(b, m.t_ne[0][1], 1ull << 32);
        EXPECT("dims_product_overflow", m.t_ne[0][1], "element count overflows at dimension 1");
        break;
    case 30:
        tb_patch_u64(b, m.t_ne[0][0], 1ull << 31);
        tb_patch_u64(b, m.t_ne[0][1], 1ull << 31);
        EXPECT("bytes_overflow", m.t_ndims[0], "tensor 'tok_embd.weight': size in bytes overflows");
        break;
    case 31: tb_patch_u32(b, m.t_type[1], 4); EXPECT("tensor_type_4", m.t_type[1], "unknown tensor type 4"); break;
    case 32: tb_patch_u32(b, m.t_type[1], 1000); EXPECT("tensor_type_1000", m.t_type[1], "unknown tensor type 1000"); break;
    case 33:
        tb_patch_u64(b, m.t_ne[1][0], 16);
        EXPECT("block_size", m.t_ndims[1], "row length ne[0]=16 is not a multiple of the Q4_0 block size 32");
        break;
    case 34: tb_patch_u64(b, m.t_off[1], 65); EXPECT("offset_misaligned", m.t_off[1], "data offset 0x41 is not a multiple of the alignment 32"); break;
    case 35: tb_patch_u64(b, m.t_off[2], 0x10000); EXPECT("data_past_end", m.t[2], "tensor 'output.weight': data [0x10000, 0x10008)"); break;
    case 36: tb_patch_u64(b, m.t_off[2], ~(uint64_t)31); EXPECT("offset_wraps", m.t[2], "ends past the end of the file"); break;
    case 37: tb_patch_u64(b, m.t_off[1], 32); EXPECT("overlap", m.t[1], "tensor 'blk.0.attn_q.weight' data [0x20, 0x44) overlaps tensor 'tok_embd.weight' data [0x0, 0x40)"); break;
    case 38: b->n = m.kv_val[3] + 3; EXPECT("truncated_in_kv", m.kv_val[3], "truncated array element type"); break;
    case 39: EXPECT("key_with_nul", m.kv[1], "key 'test\\x00u32' contains a NUL byte"); break;
    case 40: EXPECT("tensor_name_nul", m.t[0], "tensor name 'tok\\x00embd' contains a NUL byte"); break;
    case 41: b->n = m.t_ne[1][0] + 4; EXPECT("truncated_in_infos", m.t_ne[1][0], "truncated tensor dimension"); break;
    case 42: EXPECT("nested_inner_count_absurd", m.kv_elem[4] + 4, "array of %llu int32 elements needs at least", 1ull << 40); break;
    case 43: EXPECT("string_array_count_absurd", m.kv_val[3] + 4, "array of %llu string elements needs at least", 1ull << 50); break;
    case 44: EXPECT("v2_bad_bool", m.kv_val[2], "bool value is 2"); break;
    case 45:
        // Cut right after the infos: the aligned data section start lies past the end.
        if (m.end_infos % 32 == 0) {
            fprintf(stderr, "base layout changed: infos end aligned, defect 45 needs updating\n");
            g_failures++;
        }
        b->n = m.end_infos;
        EXPECT("data_section_past_end", m.end_infos, "data section would start at 0x%zx, past the end", m.data_off);
        break;
    case 46: b->n = m.data_off + 128 + 7; EXPECT("last_tensor_truncated", m.t[2], "tensor 'output.weight': data [0x80, 0x88)"); break;
    case 47: tb_patch_u64(b, m.t_ne[2][0], (uint64_t)INT64_MIN); EXPECT("dim_int64_min", m.t_ne[2][0], "dimension 0 is %lld, must be positive", (long long)INT64_MIN); break;
    case 48: tb_patch_u32(b, m.t_type[0], 0xffffffffu); EXPECT("tensor_type_u32_max", m.t_type[0], "unknown tensor type 4294967295"); break;
    case 49: b->n = m.t[1] + 5; EXPECT("truncated_tensor_name_len", m.t[1], "truncated tensor name"); break;
    case 50: tb_patch_u64(b, m.t[1], 1ull << 62); EXPECT("tensor_name_past_end", m.t[1], "tensor name length %llu runs past the end", 1ull << 62); break;
    case 51: tb_patch_u32(b, m.kv_type[5], GGUF_VT_FLOAT64); b->n = m.kv_val[5] + 4; EXPECT("truncated_value", m.kv_val[5], "truncated value"); break;
    default: return false;
    }
#undef EXPECT
    return true;
}

static int count_mismatch;

int main(int argc, char **argv) {
    test_seed();
    const char *corpus = NULL;
    if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0) corpus = argv[2];

    // The base file is valid.
    {
        fspec s;
        marks m;
        tbuf b = {0};
        base_spec(&s);
        build(&s, &b, &m);
        gguf_ctx *c = gguf_open_memory(b.p, b.n, "base.gguf");
        REQUIRE(c != NULL);
        CHECK(c->n_kv == 7 && c->n_tensors == 3);
        const gguf_kv *kv = gguf_find_kv(c, "test.nested");
        REQUIRE(kv && kv->value.type == GGUF_VT_ARRAY && kv->value.arr.n == 2);
        CHECK(gguf_arr_i64(&kv->value.arr.items[1], 0) == 3);
        const gguf_tensor *t = gguf_find_tensor(c, "output.weight");
        REQUIRE(t != NULL);
        CHECK(t->offset == 128 && t->nbytes == 8 && t->data == b.p + m.data_off + 128);
        gguf_close(c);
        if (corpus) {
            char path[4096];
            snprintf(path, sizeof path, "%s/valid_base.gguf", corpus);
            REQUIRE(write_bytes(path, b.p, b.n) == 0);
        }
        free(b.p);
    }

    int n = 0;
    const char *names[N_DEFECTS] = {0};
    for (int d = 0; d < N_DEFECTS; d++) {
        tbuf b = {0};
        defect df;
        if (!make_defect(d, &b, &df)) {
            free(b.p);
            continue;
        }
        for (int k = 0; k < n; k++)
            if (strcmp(names[k], df.name) == 0) {
                fprintf(stderr, "duplicate defect name %s\n", df.name);
                g_failures++;
            }
        names[n++] = df.name;
        char fname[128];
        snprintf(fname, sizeof fname, "bad_%s.gguf", df.name);
        // Copy into an exactly sized allocation so ASan catches any read past the end.
        uint8_t *exact = malloc(b.n ? b.n : 1);
        if (b.n) memcpy(exact, b.p, b.n);
        st_err_clear();
        gguf_ctx *c = gguf_open_memory(exact, b.n, fname);
        const char *msg = st_errmsg();
        char offs[64] = "";
        if (df.off >= 0) snprintf(offs, sizeof offs, "offset 0x%llx: ", df.off);
        if (c) {
            fprintf(stderr, "FAIL %-28s: opened without error\n", df.name);
            g_failures++;
            gguf_close(c);
        } else if (!strstr(msg, df.want) || !strstr(msg, offs) || strncmp(msg, fname, strlen(fname)) != 0) {
            fprintf(stderr, "FAIL %-28s: got      \"%s\"\n     %-28s  expected \"%s%s...%s\"\n", df.name, msg, "",
                    fname, offs, df.want);
            g_failures++;
            count_mismatch++;
        } else {
            printf("ok   %-28s %s\n", df.name, msg);
        }
        if (corpus && b.n <= 4096) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", corpus, fname);
            REQUIRE(write_bytes(path, b.p, b.n) == 0);
        }
        free(exact);
        free(b.p);
    }
    printf("%d defects checked, %d failures\n", n, g_failures);
    CHECK(n >= 30);
    return g_failures ? 1 : 0;
}
