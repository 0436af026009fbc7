// Per-layer activation dumps (actdump.h).
#include "engine/actdump.h"

#include <stdlib.h>
#include <string.h>

#include "util/log.h"

st_actdump *st_actdump_open_env(const char *backend) {
    const char *dir = getenv("STRATA_DUMP_ACT");
    if (!dir || !*dir) return NULL;
    st_actdump *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    snprintf(d->path, sizeof d->path, "%s/%s.act", dir, backend);
    d->f = fopen(d->path, "wb");
    if (!d->f) {
        st_warn("STRATA_DUMP_ACT: cannot create %s (does the folder exist?): no activation dumps", d->path);
        free(d);
        return NULL;
    }
    st_info("STRATA_DUMP_ACT: per-layer activations to %s (diagnosis mode: slower)", d->path);
    return d;
}

void st_actdump_write(st_actdump *d, int layer, char point, int64_t pos0, int64_t n_tok, int64_t n_embd,
                      const float *x) {
    if (!d || d->failed || n_tok <= 0) return;
    const int32_t h[6] = {ST_ACTDUMP_MAGIC, layer, point, (int32_t)pos0, (int32_t)n_tok, (int32_t)n_embd};
    const size_t n = (size_t)n_tok * (size_t)n_embd;
    if (fwrite(h, sizeof h, 1, d->f) != 1 || fwrite(x, sizeof(float), n, d->f) != n) {
        st_warn("STRATA_DUMP_ACT: writing %s failed (disk full?): no further activation dumps", d->path);
        d->failed = 1;
    }
}

void st_actdump_close(st_actdump *d) {
    if (!d) return;
    if (d->f && fclose(d->f)) st_warn("STRATA_DUMP_ACT: closing %s failed", d->path);
    free(d);
}
