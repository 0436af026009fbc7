// Offsets past 4 GiB: writes a sparse file whose first tensor is 4 GiB + 4 MiB (only two pages of it are ever
// touched) followed by small tensors, then reads it back. Quick because untouched pages are never allocated; the
// file is deleted on every exit path.
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "gguf/gguf.h"
#include "quant/quant.h"
#include "tutil.h"
#include "util/log.h"

static char g_path[512];

static void cleanup(void) { unlink(g_path); }

#define BIG_ROWS 1025ll
#define BIG_COLS (1ll << 20)  // F32: 4 MiB per row

static uint8_t pat(int idx, uint64_t i) { return (uint8_t)(g_seed * 13 + (uint64_t)idx * 101 + i * 3 + 1); }

static int fill(void *ud, int idx, void *dst, uint64_t nbytes) {
    uint8_t *d = dst;
    if (idx == 0) {  // touch only the first and last page of the big tensor
        for (uint64_t i = 0; i < 4096; i++) d[i] = pat(idx, i);
        for (uint64_t i = nbytes - 4096; i < nbytes; i++) d[i] = pat(idx, i);
    } else {
        for (uint64_t i = 0; i < nbytes; i++) d[i] = pat(idx, i);
    }
    return 0;
}

int main(void) {
    test_seed();
    tmp_path(g_path, sizeof g_path, "big.gguf");
    atexit(cleanup);
    // The writer refuses when the file's full size exceeds the free space (a full disk would fault the mapping).
    struct statvfs vfs;
    char dir[512];
    snprintf(dir, sizeof dir, "%s", g_path);
    *strrchr(dir, '/') = '\0';
    if (statvfs(dir, &vfs) == 0 && (double)vfs.f_bavail * (double)vfs.f_frsize < 5.0 * (1ull << 30)) {
        printf("skipped: less than 5 GiB free in %s\n", dir);
        return 77;
    }

    gguf_writer *w = gguf_writer_new();
    gguf_w_set_str(w, "general.architecture", "llama");
    int64_t big[2] = {BIG_COLS, BIG_ROWS}, s1[1] = {64}, s2[2] = {32, 4};
    REQUIRE(gguf_w_add_tensor(w, "big", ST_TYPE_F32, 2, big) == 0);
    REQUIRE(gguf_w_add_tensor(w, "after.f32", ST_TYPE_F32, 1, s1) == 1);
    REQUIRE(gguf_w_add_tensor(w, "after.q8_0", ST_TYPE_Q8_0, 2, s2) == 2);
    double t0 = st_now();
    REQUIRE(gguf_w_write(w, g_path, fill, NULL, 2, NULL) == 0);
    double t1 = st_now();
    gguf_writer_free(w);

    gguf_ctx *c = gguf_open(g_path);
    REQUIRE(c != NULL);
    const gguf_tensor *b = gguf_find_tensor(c, "big");
    REQUIRE(b && b->nbytes == 4ull * BIG_COLS * BIG_ROWS);
    CHECK(b->nbytes > (1ull << 32));
    for (int k = 1; k <= 2; k++) {
        const gguf_tensor *t = &c->tensors[k];
        CHECK(t->offset >= (1ull << 32));
        CHECK(c->files[0].data_offset + t->offset > (1ull << 32));
        CHECK(t->offset % 32 == 0);
        bool ok = true;
        for (uint64_t i = 0; i < t->nbytes; i++)
            if (t->data[i] != pat(k, i)) ok = false;
        CHECK(ok);
    }
    bool ok = true;
    for (uint64_t i = b->nbytes - 4096; i < b->nbytes; i++)
        if (b->data[i] != pat(0, i)) ok = false;
    for (uint64_t i = 0; i < 4096; i++)
        if (b->data[i] != pat(0, i)) ok = false;
    CHECK(ok);
    CHECK(b->data[b->nbytes / 2] == 0);  // untouched middle reads as zeros
    struct stat st;
    CHECK(stat(g_path, &st) == 0 && (uint64_t)st.st_size == c->files[0].map.size);
    printf("file %.2f GiB, %.1f MiB on disk, written in %.3f s, last tensor at file offset 0x%llx\n",
           (double)st.st_size / (1 << 30), (double)st.st_blocks * 512 / (1 << 20), t1 - t0,
           (unsigned long long)(c->files[0].data_offset + c->tensors[2].offset));
    gguf_close(c);
    return g_failures ? 1 : 0;
}
