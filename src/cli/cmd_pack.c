// strata pack: write a MoE model's experts as a native pack file (place/pack.h) for the mmap expert arena.
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/cli.h"
#include "engine/model.h"
#include "place/pack.h"
#include "util/err.h"
#include "util/log.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: strata pack -m MODEL.gguf -o FILE.pack [-q]\n"
            "\n"
            "Writes every routed expert of a MoE model in the native layout of the hybrid engine's host expert\n"
            "arena: per layer, per expert, gate|up|down contiguous (parts 256-byte aligned, records 4096-byte\n"
            "aligned), with a header that records the model's fingerprint. With STRATA_ARENA_MMAP=1 (or\n"
            "--arena-mmap) the engine maps this file read-only instead of building the arena in anonymous memory,\n"
            "so the arena costs page cache rather than RAM. The file is written as FILE.tmp and renamed at the end.\n"
            "docs/HYBRID.md describes the layout.\n"
            "\n"
            "options:\n"
            "  -m, --model FILE    the MoE GGUF (qwen3moe)\n"
            "  -o, --output FILE   the pack file to write\n"
            "  -q, --quiet         no progress lines\n"
            "  -h, --help          this text\n");
}

int cmd_pack(int argc, char **argv) {
    const char *model = NULL, *out = NULL;
    bool quiet = false;
    st_args a = {argc, argv, 1, "pack", false};
    for (; a.i < argc && !a.failed; a.i++) {
        if (st_args_is(&a, "-h", "--help")) {
            usage(stdout);
            return 0;
        } else if (st_args_is(&a, "-m", "--model")) model = st_args_str(&a);
        else if (st_args_is(&a, "-o", "--output")) out = st_args_str(&a);
        else if (st_args_is(&a, "-q", "--quiet")) quiet = true;
        else st_args_unknown(&a);
    }
    if (a.failed) return 2;
    if (!model || !out) {
        fprintf(stderr, "strata pack: give -m MODEL.gguf and -o FILE.pack (see strata pack --help)\n");
        return 2;
    }
    double t0 = st_now();
    st_model *m = st_model_load(model);
    if (!m) {
        fprintf(stderr, "strata pack: %s\n", st_errmsg());
        return 1;
    }
    int rc = st_pack_write(m, out, quiet);
    if (rc) {
        fprintf(stderr, "strata pack: %s\n", st_errmsg());
    } else {
        st_pack_info pi;
        if (st_pack_layout(m, &pi) == 0) {
            char b[32];
            double dt = st_now() - t0;
            printf("wrote %s: %u layers x %u experts, %s in %.2f s (%.2f GB/s)\n", out, pi.n_layer, pi.n_expert,
                   st_fmt_bytes(b, sizeof b, (double)pi.file_bytes), dt, dt > 0 ? (double)pi.file_bytes / dt / 1e9 : 0);
            st_pack_info_free(&pi);
        }
    }
    st_model_free(m);
    return rc ? 1 : 0;
}
