// Small helpers shared by the GGUF tests: checks that report file:line, seeds, temporary paths, raw byte builders.
#ifndef STRATA_TESTS_GGUF_TUTIL_H
#define STRATA_TESTS_GGUF_TUTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/err.h"

static int g_failures;
static uint64_t g_seed;

#define CHECK(cond)                                                                                     \
    do {                                                                                                \
        if (!(cond)) {                                                                                  \
            fprintf(stderr, "%s:%d: CHECK failed: %s (seed %llu; last error: %s)\n", __FILE__, __LINE__, \
                    #cond, (unsigned long long)g_seed, st_errmsg());                                    \
            g_failures++;                                                                               \
        }                                                                                               \
    } while (0)

#define REQUIRE(cond)                                                                                   \
    do {                                                                                                \
        if (!(cond)) {                                                                                  \
            fprintf(stderr, "%s:%d: REQUIRE failed: %s (seed %llu; last error: %s)\n", __FILE__, __LINE__, \
                    #cond, (unsigned long long)g_seed, st_errmsg());                                    \
            exit(1);                                                                                    \
        }                                                                                               \
    } while (0)

// Fresh seed each run unless STRATA_SEED is set; printed on failure by CHECK.
static inline uint64_t test_seed(void) {
    const char *s = getenv("STRATA_SEED");
    if (s && *s) g_seed = strtoull(s, NULL, 0);
    else g_seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    return g_seed;
}

// A per-process path in the temporary directory: $TMPDIR/strata-gguf-<pid>-<tag>.
static inline void tmp_path(char *buf, size_t n, const char *tag) {
    const char *dir = getenv("TMPDIR");
    snprintf(buf, n, "%s/strata-gguf-%ld-%s", dir && *dir ? dir : "/tmp", (long)getpid(), tag);
}

// Growable byte buffer for building files by hand (little-endian puts).
typedef struct tbuf {
    uint8_t *p;  // [n] bytes
    size_t n, cap;
} tbuf;

static inline void tb_put(tbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) abort();
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}
static inline void tb_le(tbuf *b, uint64_t v, int bytes) {
    uint8_t t[8];
    for (int i = 0; i < bytes; i++) t[i] = (uint8_t)(v >> (8 * i));
    tb_put(b, t, (size_t)bytes);
}
static inline void tb_u8(tbuf *b, uint8_t v) { tb_le(b, v, 1); }
static inline void tb_u32(tbuf *b, uint32_t v) { tb_le(b, v, 4); }
static inline void tb_u64(tbuf *b, uint64_t v) { tb_le(b, v, 8); }
static inline void tb_strn(tbuf *b, const char *s, uint64_t len) {
    tb_u64(b, len);
    tb_put(b, s, (size_t)len);
}
static inline void tb_str(tbuf *b, const char *s) { tb_strn(b, s, strlen(s)); }
static inline void tb_patch_u32(tbuf *b, size_t off, uint32_t v) {
    for (int i = 0; i < 4; i++) b->p[off + (size_t)i] = (uint8_t)(v >> (8 * i));
}
static inline void tb_patch_u64(tbuf *b, size_t off, uint64_t v) {
    for (int i = 0; i < 8; i++) b->p[off + (size_t)i] = (uint8_t)(v >> (8 * i));
}

static inline int write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t k = n ? fwrite(p, 1, n, f) : 0;
    return (fclose(f) == 0 && k == n) ? 0 : -1;
}

#endif
