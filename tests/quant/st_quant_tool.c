// st-quant-tool: a thin command-line front end to the quant library for the Python reference tests.
//
//   st-quant-tool types                                   id name block_size type_size can_deq can_quant, per line
//   st-quant-tool random TYPE NBLOCKS STDDEV SEED OUT.bin OUT.f32
//        st_random_blocks -> OUT.bin, and our dequantization of it -> OUT.f32
//   st-quant-tool raw TYPE NBLOCKS SEED OUT.bin OUT.f32
//        uniformly random bytes with only the float scale fields made finite (covers every code/index/sign bit
//        pattern, unlike `random`), plus our dequantization
//   st-quant-tool quantize TYPE IN.f32 OUT.bin OUT.f32    st_quantize_row of the floats, then our dequantization
//   st-quant-tool f16 IN.f32 OUT16.bin OUTBF16.bin        st_f32_to_f16 / st_f32_to_bf16 of each float
//   st-quant-tool half OUT16.f32 OUTBF16.f32               st_f16_to_f32 / st_bf16_to_f32 of all 65536 patterns
// All files are raw little-endian arrays. TYPE is a name ("Q4_K") or numeric id.
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/blocks.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/rng.h"

static int die(const char *what) {
    fprintf(stderr, "st-quant-tool: %s: %s\n", what, st_errmsg());
    return 1;
}

static int write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return st_err("%s: cannot create: %s", path, strerror(errno));
    size_t w = fwrite(p, 1, n, f);
    if (fclose(f) != 0 || w != n) return st_err("%s: write failed", path);
    return 0;
}

static void *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        st_err("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(sz > 0 ? (size_t)sz : 1);
    if (p && fread(p, 1, (size_t)sz, f) != (size_t)sz) {
        free(p);
        p = NULL;
        st_err("%s: read failed", path);
    }
    fclose(f);
    *n = (size_t)sz;
    return p;
}

static int parse_type(const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end == 0 && st_type_get((int)v)) return (int)v;
    int t = st_type_from_name(s);
    if (t < 0) st_err("unknown type '%s'", s);
    return t;
}

// A random finite f16 with magnitude in roughly [2^-12, 2^6] and random sign.
static uint16_t rand_f16(st_rng *r) {
    float v = ldexpf(1.0f + st_rng_f32(r), (int)st_rng_below(r, 19) - 12);
    return st_f32_to_f16(st_rng_u32(r) & 1 ? -v : v);
}

static void put16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

// Makes the float fields of raw random blocks finite (layouts: quant/blocks.h).
static void sanitize_raw(int type, uint8_t *b, st_rng *r) {
    switch (type) {
    case ST_TYPE_Q4_1: put16(b + offsetof(block_q4_1, m), rand_f16(r)); put16(b, rand_f16(r)); break;
    case ST_TYPE_Q5_1: put16(b + offsetof(block_q5_1, m), rand_f16(r)); put16(b, rand_f16(r)); break;
    case ST_TYPE_Q8_1: put16(b + offsetof(block_q8_1, s), rand_f16(r)); put16(b, rand_f16(r)); break;
    case ST_TYPE_Q4_K:
    case ST_TYPE_Q5_K: put16(b + 2, rand_f16(r)); put16(b, rand_f16(r)); break;  // d, dmin lead both
    case ST_TYPE_Q2_K:
        put16(b + offsetof(block_q2_K, d), rand_f16(r));
        put16(b + offsetof(block_q2_K, dmin), rand_f16(r));
        break;
    case ST_TYPE_Q3_K: put16(b + offsetof(block_q3_K, d), rand_f16(r)); break;
    case ST_TYPE_Q6_K: put16(b + offsetof(block_q6_K, d), rand_f16(r)); break;
    case ST_TYPE_TQ1_0: put16(b + offsetof(block_tq1_0, d), rand_f16(r)); break;
    case ST_TYPE_TQ2_0: put16(b + offsetof(block_tq2_0, d), rand_f16(r)); break;
    case ST_TYPE_Q8_K: {
        float d = ldexpf(st_rng_f32(r) + 0.5f, (int)st_rng_below(r, 20) - 15);
        memcpy(b, &d, 4);
        break;
    }
    case ST_TYPE_MXFP4: b[0] = (uint8_t)st_rng_below(r, 251); break;  // e <= 250 keeps 12 * 2^(e-128) finite
    case ST_TYPE_IQ1_M: {
        // d's f16 bits are the top nibbles of the four scale words: nibble k holds d bits 4k..4k+3.
        uint16_t d = rand_f16(r);
        uint8_t *sc = b + offsetof(block_iq1_m, scales);
        for (int k = 0; k < 4; k++) sc[2 * k + 1] = (uint8_t)((sc[2 * k + 1] & 0x0f) | (((d >> (4 * k)) & 15) << 4));
        break;
    }
    case ST_TYPE_F16:
    case ST_TYPE_BF16: {
        uint16_t v = (uint16_t)(b[0] | (b[1] << 8));
        if (type == ST_TYPE_F16 && ((v >> 10) & 31) == 31) v &= (uint16_t)~0x4000;  // no inf/NaN
        if (type == ST_TYPE_BF16 && ((v >> 7) & 255) == 255) v &= (uint16_t)~0x4000;
        put16(b, v);
        break;
    }
    case ST_TYPE_F32: {
        float f = (st_rng_normal(r));
        memcpy(b, &f, 4);
        break;
    }
    case ST_TYPE_F64: {
        double f = st_rng_normal(r);
        memcpy(b, &f, 8);
        break;
    }
    case ST_TYPE_I8:
    case ST_TYPE_I16:
    case ST_TYPE_I32:
    case ST_TYPE_I64: break;
    default: put16(b, rand_f16(r)); break;  // every other format starts with its f16 d
    }
}

static int deq_and_write(int type, const uint8_t *blocks, int64_t n, const char *out_bin, size_t nbytes,
                         const char *out_f32) {
    float *f = malloc((size_t)n * sizeof(float) + 1);
    if (!f) return st_err("out of memory");
    int rc = st_dequantize_row(type, blocks, f, n);
    if (rc == 0 && out_bin) rc = write_file(out_bin, blocks, nbytes);
    if (rc == 0) rc = write_file(out_f32, f, (size_t)n * sizeof(float));
    free(f);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: see the comment at the top of tests/quant/st_quant_tool.c\n");
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "types")) {
        for (int t = 0; t < ST_TYPE_COUNT; t++) {
            const st_type_info *ti = st_type_get(t);
            if (ti)
                printf("%d %s %d %d %d %d\n", t, ti->name, ti->block_size, ti->type_size, ti->can_dequantize,
                       ti->can_quantize);
        }
        return 0;
    }
    if ((!strcmp(cmd, "random") && argc == 8) || (!strcmp(cmd, "raw") && argc == 7)) {
        const int raw = !strcmp(cmd, "raw");
        int type = parse_type(argv[2]);
        if (type < 0) return die("type");
        const st_type_info *ti = st_type_get(type);
        int64_t nb = strtoll(argv[3], NULL, 10);
        float sd = raw ? 0 : strtof(argv[4], NULL);
        uint64_t seed = strtoull(argv[raw ? 4 : 5], NULL, 10);
        size_t nbytes = (size_t)nb * (size_t)ti->type_size;
        uint8_t *b = malloc(nbytes + 1);
        if (!b) return 1;
        st_rng r;
        st_rng_init(&r, seed, (uint64_t)type);
        if (raw) {
            for (size_t i = 0; i < nbytes; i++) b[i] = (uint8_t)st_rng_u32(&r);
            for (int64_t i = 0; i < nb; i++) sanitize_raw(type, b + (size_t)i * (size_t)ti->type_size, &r);
        } else if (st_random_blocks(type, b, nb, sd, &r) != 0) {
            free(b);
            return die("random_blocks");
        }
        int rc = deq_and_write(type, b, nb * ti->block_size, argv[raw ? 5 : 6], nbytes, argv[raw ? 6 : 7]);
        free(b);
        return rc ? die(cmd) : 0;
    }
    if (!strcmp(cmd, "quantize") && argc == 6) {
        int type = parse_type(argv[2]);
        if (type < 0) return die("type");
        size_t n_in;
        float *x = read_file(argv[3], &n_in);
        if (!x) return die("read");
        int64_t n = (int64_t)(n_in / 4);
        size_t nbytes = st_row_size(type, n);
        uint8_t *b = malloc(nbytes + 1);
        int rc = b ? st_quantize_row(type, x, b, n) : -1;
        if (rc == 0) rc = deq_and_write(type, b, n, argv[4], nbytes, argv[5]);
        free(b);
        free(x);
        return rc ? die("quantize") : 0;
    }
    if (!strcmp(cmd, "f16") && argc == 5) {
        size_t n_in;
        float *x = read_file(argv[2], &n_in);
        if (!x) return die("read");
        size_t n = n_in / 4;
        uint16_t *h = malloc(2 * n + 2), *bf = malloc(2 * n + 2);
        for (size_t i = 0; i < n; i++) {
            h[i] = st_f32_to_f16(x[i]);
            bf[i] = st_f32_to_bf16(x[i]);
        }
        int rc = write_file(argv[3], h, 2 * n);
        if (rc == 0) rc = write_file(argv[4], bf, 2 * n);
        free(x);
        free(h);
        free(bf);
        return rc ? die("f16") : 0;
    }
    if (!strcmp(cmd, "half") && argc == 4) {
        float *a = malloc(65536 * 4), *b = malloc(65536 * 4);
        for (uint32_t i = 0; i < 65536; i++) {
            a[i] = st_f16_to_f32((uint16_t)i);
            b[i] = st_bf16_to_f32((uint16_t)i);
        }
        int rc = write_file(argv[2], a, 65536 * 4);
        if (rc == 0) rc = write_file(argv[3], b, 65536 * 4);
        free(a);
        free(b);
        return rc ? die("half") : 0;
    }
    fprintf(stderr, "st-quant-tool: bad command or argument count (see tests/quant/st_quant_tool.c)\n");
    return 2;
}
