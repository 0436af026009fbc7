// The host expert arena's memory cost, both ways (issue #6: "measure and report anonymous RSS both ways"): loads a
// MoE model, builds its arena anonymous (from the GGUF) or mapped (--pack FILE, the file `strata pack` writes), reads
// one byte of every 4 KiB page of every expert record (as decode misses eventually do), and prints the build time,
// the arena's bytes and the process's anonymous and file-backed resident memory before and after (RssAnon /
// RssFile of /proc/self/status). No GPU: the CUDA engine additionally page-locks the same ranges, which does not
// change which of the two kinds of memory they are.
//   usage: bench_arena MODEL.gguf [--pack FILE.pack] [--check]
//   --check: exit 1 unless the anonymous build grows RssAnon by >= 90% of the arena and the mapped build by <= 10%
//            (+ 4 MiB) of it (a test of the modes' claim, for small models in CI).
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model.h"
#include "place/arena.h"
#include "util/err.h"
#include "util/log.h"  // st_now

static double mib(int64_t b) { return (double)b / (1 << 20); }

int main(int argc, char **argv) {
    const char *model = NULL, *pack = NULL;
    int check = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--pack") && i + 1 < argc) pack = argv[++i];
        else if (!strcmp(argv[i], "--check")) check = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: bench_arena MODEL.gguf [--pack FILE.pack] [--check]\n");
            return 0;
        } else if (!model && argv[i][0] != '-') model = argv[i];
        else {
            fprintf(stderr, "bench_arena: unknown argument %s (see --help)\n", argv[i]);
            return 2;
        }
    }
    if (!model) {
        fprintf(stderr, "bench_arena: no model given (see --help)\n");
        return 2;
    }
    st_model *m = st_model_load(model);
    if (!m) {
        fprintf(stderr, "bench_arena: %s\n", st_errmsg());
        return 1;
    }
    const int64_t anon0 = st_rss_anon_bytes(), file0 = st_rss_bytes("RssFile");
    st_arena_opts o;
    memset(&o, 0, sizeof o);
    o.mode = pack ? ST_ARENA_MMAP : ST_ARENA_ANON;
    o.pack_path = pack;
    o.quiet = true;
    const double t0 = st_now();
    st_arena *a = st_arena_create(m, &o);
    if (!a) {
        fprintf(stderr, "bench_arena: %s\n", st_errmsg());
        st_model_free(m);
        return 1;
    }
    const double t_build = st_now() - t0;
    // Touch every page of every record once (what decode misses do over time); the sum keeps the reads.
    uint64_t sum = 0;
    const double t1 = st_now();
    for (uint32_t l = 0; l < a->n_layer; l++)
        for (uint32_t e = 0; e < a->n_expert; e++) {
            const uint8_t *r = a->rec[(uint64_t)l * a->n_expert + e];
            for (uint64_t off = 0; off < a->layers[l].record_bytes; off += 4096) sum += r[off];
        }
    const double t_touch = st_now() - t1;
    const int64_t anon1 = st_rss_anon_bytes(), file1 = st_rss_bytes("RssFile");
    const int64_t d_anon = anon1 - anon0, d_file = file1 - file0;
    printf("arena %s: %.1f MiB in %d %s, built in %.2f s, every page read in %.2f s (checksum %" PRIu64 ")\n",
           st_arena_mode_name(a->mode), mib((int64_t)a->bytes), a->n_chunks,
           a->mode == ST_ARENA_MMAP ? "mapped ranges" : "anonymous chunks", t_build, t_touch, sum & 0xffff);
    printf("RssAnon %.1f -> %.1f MiB (%+.1f MiB = %.1f%% of the arena); RssFile %.1f -> %.1f MiB (%+.1f MiB)\n",
           mib(anon0), mib(anon1), mib(d_anon), 100.0 * (double)d_anon / (double)a->bytes, mib(file0), mib(file1),
           mib(d_file));
    int rc = 0;
    if (check) {
        const double share = (double)d_anon / (double)a->bytes;
        if (a->mode == ST_ARENA_ANON && share < 0.9) {
            printf("FAIL: the anonymous arena grew RssAnon by only %.1f%% of its bytes\n", 100 * share);
            rc = 1;
        } else if (a->mode == ST_ARENA_MMAP && d_anon > (int64_t)(0.1 * (double)a->bytes) + (4 << 20)) {
            printf("FAIL: the mapped arena grew RssAnon by %.1f MiB (%.1f%% of its bytes)\n", mib(d_anon), 100 * share);
            rc = 1;
        } else {
            printf("PASS: %s arena, RssAnon %+.1f MiB for %.1f MiB of experts\n", st_arena_mode_name(a->mode),
                   mib(d_anon), mib((int64_t)a->bytes));
        }
    }
    st_arena_free(a);
    st_model_free(m);
    return rc;
}
