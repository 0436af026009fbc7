// Split models as llama.cpp's gguf-split writes them: PREFIX-0000K-of-00003.gguf, split.no / split.count /
// split.tensors.count in every part, metadata in part 1. Checks the merged view and each inconsistency's message.
#include "gguf/gguf.h"
#include "quant/quant.h"
#include "tutil.h"

#define N_PARTS 3
#define N_T 8

static char g_prefix[512];

static void part_path(char *buf, size_t n, int no, int count) {
    snprintf(buf, n, "%s-%05d-of-%05d.gguf", g_prefix, no, count);
}

// Tensor k: F32 [4*(k+1), 2] filled with bytes derived from (seed, k).
static int fill(void *ud, int idx, void *dst, uint64_t nbytes) {
    const int *first = ud;
    int k = *first + idx;
    for (uint64_t i = 0; i < nbytes; i++) ((uint8_t *)dst)[i] = (uint8_t)(g_seed + (uint64_t)k * 31 + i * 7);
    return 0;
}

typedef struct over {
    int part;          // which part (0-based) the overrides apply to; -1 none
    int split_no;      // -1: the right one
    int split_count;   // -1: N_PARTS; -2: leave the key out
    int tensors_count; // -1: N_T
    const char *dup;   // extra tensor with this name
} over;

static const int g_first[N_PARTS + 1] = {0, 3, 6, N_T};  // tensors [first[p], first[p+1]) live in part p

static void write_part(int p, const over *o) {
    gguf_writer *w = gguf_writer_new();
    bool ov = o && o->part == p;
    if (p == 0) {
        gguf_w_set_str(w, "general.architecture", "llama");
        gguf_w_set_u32(w, "llama.block_count", 2);
    }
    gguf_w_set_u16(w, "split.no", (uint16_t)(ov && o->split_no >= 0 ? o->split_no : p));
    if (!(ov && o->split_count == -2)) gguf_w_set_u16(w, "split.count", (uint16_t)(ov && o->split_count >= 0 ? o->split_count : N_PARTS));
    gguf_w_set_i32(w, "split.tensors.count", ov && o->tensors_count >= 0 ? o->tensors_count : N_T);
    for (int k = g_first[p]; k < g_first[p + 1]; k++) {
        char name[32];
        snprintf(name, sizeof name, "t%d", k);
        int64_t ne[2] = {4 * (k + 1), 2};
        REQUIRE(gguf_w_add_tensor(w, name, ST_TYPE_F32, 2, ne) >= 0);
    }
    if (ov && o->dup) {
        int64_t ne[1] = {8};
        REQUIRE(gguf_w_add_tensor(w, o->dup, ST_TYPE_F32, 1, ne) >= 0);
    }
    char path[600];
    part_path(path, sizeof path, p + 1, N_PARTS);
    REQUIRE(gguf_w_write(w, path, fill, (void *)&g_first[p], 1, NULL) == 0);
    gguf_writer_free(w);
}

static void write_all(const over *o) {
    for (int p = 0; p < N_PARTS; p++) write_part(p, o);
}

static void remove_all(void) {
    char path[600];
    for (int p = 0; p < N_PARTS; p++) {
        part_path(path, sizeof path, p + 1, N_PARTS);
        unlink(path);
    }
    part_path(path, sizeof path, 1, 1);
    unlink(path);
    snprintf(path, sizeof path, "%s.gguf", g_prefix);
    unlink(path);
}

static void check_merged(const char *open_path) {
    gguf_ctx *c = gguf_open(open_path);
    REQUIRE(c != NULL);
    CHECK(c->n_files == N_PARTS);
    CHECK(c->n_tensors == N_T);
    uint32_t u;
    CHECK(gguf_get_u32(c, "llama.block_count", &u) == 0 && u == 2);  // metadata from part 1
    CHECK(gguf_get_u32(c, "split.no", &u) == 0 && u == 0);
    uint64_t total = 0;
    for (int k = 0; k < N_T; k++) {
        char name[32];
        snprintf(name, sizeof name, "t%d", k);
        const gguf_tensor *t = gguf_find_tensor(c, name);
        REQUIRE(t != NULL);
        CHECK(t == &c->tensors[k]);  // file order across parts
        int part = k >= g_first[2] ? 2 : k >= g_first[1] ? 1 : 0;
        CHECK(t->file == part);
        CHECK(t->ne[0] == 4 * (k + 1) && t->ne[1] == 2);
        CHECK(t->data == c->files[part].map.data + c->files[part].data_offset + t->offset);
        bool ok = true;
        for (uint64_t i = 0; i < t->nbytes; i++)
            if (t->data[i] != (uint8_t)(g_seed + (uint64_t)k * 31 + i * 7)) ok = false;
        CHECK(ok);
        total += t->nbytes;
    }
    CHECK(c->total_bytes == total);
    gguf_close(c);
}

static void expect_fail(const char *what, const char *open_path, const char *want1, const char *want2) {
    st_err_clear();
    gguf_ctx *c = gguf_open(open_path);
    if (c) {
        fprintf(stderr, "FAIL %s: opened without error\n", what);
        g_failures++;
        gguf_close(c);
        return;
    }
    const char *msg = st_errmsg();
    if (!strstr(msg, want1) || (want2 && !strstr(msg, want2))) {
        fprintf(stderr, "FAIL %s: got \"%s\", expected \"%s\" and \"%s\"\n", what, msg, want1, want2 ? want2 : "");
        g_failures++;
    } else {
        printf("ok   %-24s %s\n", what, msg);
    }
}

int main(void) {
    test_seed();
    tmp_path(g_prefix, sizeof g_prefix, "split");
    atexit(remove_all);
    char p1[600], p2[600], p3[600];
    part_path(p1, sizeof p1, 1, N_PARTS);
    part_path(p2, sizeof p2, 2, N_PARTS);
    part_path(p3, sizeof p3, 3, N_PARTS);

    write_all(NULL);
    check_merged(p1);
    check_merged(p2);  // naming any part opens the whole model

    // A missing part names the file that is missing.
    unlink(p3);
    expect_fail("missing part", p1, "part 3 of 3", p3);
    write_part(2, NULL);

    over o = {.part = 1, .split_no = -1, .split_count = 4, .tensors_count = -1};
    write_all(&o);
    expect_fail("split.count mismatch", p1, "split.count is 4 but the model has 3 parts", p2);

    o = (over){.part = 1, .split_no = 2, .split_count = -1, .tensors_count = -1};
    write_all(&o);
    expect_fail("split.no mismatch", p1, "split.no is 2, expected 1 for part 2 of 3", p2);

    o = (over){.part = 0, .split_no = -1, .split_count = -1, .tensors_count = 9};
    write_all(&o);
    expect_fail("tensors.count mismatch", p1, "split.tensors.count is 9 but the 3 parts hold 8 tensors", p1);

    o = (over){.part = 2, .split_no = -1, .split_count = -1, .tensors_count = -1, .dup = "t1"};
    write_all(&o);
    expect_fail("duplicate across parts", p1, "duplicate tensor name 't1': also in split part 1", p3);

    o = (over){.part = 0, .split_no = -1, .split_count = -2, .tensors_count = -1};
    write_all(&o);
    expect_fail("no split.count", p1, "has no split.count metadata", p1);

    // split.count > 1 in a file whose name does not say where the other parts are.
    write_all(NULL);
    char plain[600];
    snprintf(plain, sizeof plain, "%s.gguf", g_prefix);
    REQUIRE(rename(p1, plain) == 0);
    expect_fail("unsplit name", plain, "does not follow NAME-00001-of-00003.gguf", plain);
    // ... and the named set now lacks part 1.
    expect_fail("missing part 1", p2, "part 1 of 3", p1);

    char bad[700];
    snprintf(bad, sizeof bad, "%s-00004-of-00003.gguf", g_prefix);
    expect_fail("part number > count", bad, "part 4 of 3", NULL);

    // A single file named as part 1 of 1, without split metadata, is an ordinary model.
    {
        char single[600];
        part_path(single, sizeof single, 1, 1);
        gguf_writer *w = gguf_writer_new();
        gguf_w_set_str(w, "general.architecture", "llama");
        REQUIRE(gguf_w_write(w, single, NULL, NULL, 1, NULL) == 0);
        gguf_writer_free(w);
        gguf_ctx *c = gguf_open(single);
        CHECK(c && c->n_files == 1);
        gguf_close(c);
    }

    if (g_failures) fprintf(stderr, "%d failures (seed %llu)\n", g_failures, (unsigned long long)g_seed);
    else printf("split ok\n");
    return g_failures ? 1 : 0;
}
