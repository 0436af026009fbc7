// The host expert arena (see arena.h).
#include "place/arena.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "util/err.h"
#include "util/log.h"
#include "util/pool.h"

st_arena_mode st_arena_mode_from_env(void) {
    const char *v = getenv("STRATA_ARENA_MMAP");
    return v && v[0] && strcmp(v, "0") ? ST_ARENA_MMAP : ST_ARENA_ANON;
}

const char *st_arena_mode_name(st_arena_mode m) {
    return m == ST_ARENA_MMAP ? "mmap" : m == ST_ARENA_ANON ? "anonymous" : "auto";
}

int64_t st_rss_bytes(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    const size_t n = strlen(field);
    int64_t kb = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':') {
            kb = strtoll(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

int64_t st_rss_anon_bytes(void) { return st_rss_bytes("RssAnon"); }

// Splits the records (layer-major, expert-minor) into chunks of at most chunk_bytes (at least one record each).
// Returns the number of chunks; starts[c] is the index of the chunk's first record, sizes[c] its bytes.
static int plan_chunks(const st_arena *a, uint64_t chunk_bytes, uint64_t **starts_out, uint64_t **sizes_out) {
    uint64_t n_rec = (uint64_t)a->n_layer * a->n_expert, cap = 16, n = 0, cur = 0;
    uint64_t *starts = malloc(sizeof(uint64_t) * cap), *sizes = malloc(sizeof(uint64_t) * cap);
    if (!starts || !sizes) goto oom;
    for (uint64_t r = 0; r < n_rec; r++) {
        uint64_t rb = a->layers[r / a->n_expert].record_bytes;
        if (r == 0 || cur + rb > chunk_bytes) {
            if (n == cap) {
                cap *= 2;
                uint64_t *s2 = realloc(starts, sizeof(uint64_t) * cap), *z2;
                if (!s2) goto oom;
                starts = s2;
                z2 = realloc(sizes, sizeof(uint64_t) * cap);
                if (!z2) goto oom;
                sizes = z2;
            }
            starts[n] = r;
            sizes[n] = 0;
            n++;
            cur = 0;
        }
        sizes[n - 1] += rb;
        cur += rb;
    }
    *starts_out = starts;
    *sizes_out = sizes;
    return (int)n;
oom:
    free(starts);
    free(sizes);
    return st_err("out of memory");
}

typedef struct {
    st_arena *a;
    const st_model *m;
    const uint64_t *starts;
    st_progress *prog;
} fill_job;

// Copies chunk c's records from the GGUF expert stacks (expert e of a stack is `bytes` consecutive bytes at
// e * bytes) into the native layout. Padding stays zero (fresh anonymous pages).
static void fill_chunk(void *ud, int64_t c, int thread) {
    fill_job *j = ud;
    st_arena *a = j->a;
    uint64_t r0 = j->starts[c], r1 = c + 1 < a->n_chunks ? j->starts[c + 1] : (uint64_t)a->n_layer * a->n_expert;
    for (uint64_t r = r0; r < r1; r++) {
        uint32_t l = (uint32_t)(r / a->n_expert), e = (uint32_t)(r % a->n_expert);
        const st_pack_layer *pl = &a->layers[l];
        const st_weight *ws[3] = {&j->m->layers[l].gate_exps, &j->m->layers[l].up_exps, &j->m->layers[l].down_exps};
        uint8_t *dst = (uint8_t *)a->rec[r];
        for (int p = 0; p < 3; p++) memcpy(dst + pl->x.off[p], ws[p]->data + (uint64_t)e * pl->x.bytes[p], pl->x.bytes[p]);
        if (j->prog) st_progress_add(j->prog, pl->record_bytes);
    }
}

static int register_all(st_arena *a, const st_arena_opts *o) {
    if (!o->register_chunk) return 0;
    for (int c = 0; c < a->n_chunks; c++) {
        if (o->register_chunk(a->chunks[c].p, a->chunks[c].bytes, o->ud))
            return st_err_prefix("registering arena chunk %d of %d (%zu bytes): ", c, a->n_chunks, a->chunks[c].bytes);
        a->chunks[c].registered = true;
    }
    return 0;
}

st_arena *st_arena_create(const st_model *m, const st_arena_opts *o_in) {
    st_arena_opts o;
    if (o_in) o = *o_in;
    else memset(&o, 0, sizeof o);
    if (o.mode == ST_ARENA_AUTO) o.mode = st_arena_mode_from_env();
    if (!o.chunk_bytes) o.chunk_bytes = ST_ARENA_CHUNK_DEFAULT;
    const st_hparams *hp = &m->hp;
    if (hp->n_expert == 0) return st_err("%s: a dense model has no experts for a host arena", m->path), NULL;
    if (o.mode == ST_ARENA_MMAP && !o.pack_path)
        return st_err("%s: the mmap expert arena (STRATA_ARENA_MMAP=1 / --arena-mmap) maps a pack file, and none was "
                      "given: run `strata pack -m %s -o MODEL.pack` once and pass --pack MODEL.pack",
                      m->path, m->path),
               NULL;
    st_arena *a = calloc(1, sizeof *a);
    if (!a) return st_err("out of memory"), NULL;
    a->mode = o.mode;
    a->n_layer = hp->n_layer;
    a->n_expert = hp->n_expert;
    a->unregister_chunk = o.unregister_chunk;
    a->ud = o.ud;
    uint64_t *starts = NULL, *sizes = NULL;
    st_pack_info layout;
    memset(&layout, 0, sizeof layout);
    if (o.mode == ST_ARENA_MMAP) {
        a->pack = st_pack_open(o.pack_path, m);
        if (!a->pack) goto fail;
    } else if (st_pack_layout(m, &layout)) {
        goto fail;
    }
    const st_pack_info *pi = a->pack ? &a->pack->info : &layout;
    a->layers = malloc(sizeof *a->layers * hp->n_layer);
    a->rec = malloc(sizeof *a->rec * (uint64_t)hp->n_layer * hp->n_expert);
    if (!a->layers || !a->rec) {
        st_err("out of memory");
        goto fail;
    }
    memcpy(a->layers, pi->layers, sizeof *a->layers * hp->n_layer);
    a->bytes = pi->data_bytes;
    a->n_chunks = plan_chunks(a, o.chunk_bytes, &starts, &sizes);
    if (a->n_chunks < 0) {
        a->n_chunks = 0;
        goto fail;
    }
    a->chunks = calloc((size_t)a->n_chunks, sizeof *a->chunks);
    if (!a->chunks) {
        st_err("out of memory");
        goto fail;
    }
    if (o.mode == ST_ARENA_MMAP) {
        // Records in the file are consecutive from data_offset in the same order, so chunk c is one range.
        for (int c = 0; c < a->n_chunks; c++) {
            uint64_t r = starts[c];
            a->chunks[c].p = (uint8_t *)st_pack_record(a->pack, (uint32_t)(r / a->n_expert), (uint32_t)(r % a->n_expert));
            a->chunks[c].bytes = sizes[c];
        }
        for (uint64_t r = 0; r < (uint64_t)a->n_layer * a->n_expert; r++)
            a->rec[r] = st_pack_record(a->pack, (uint32_t)(r / a->n_expert), (uint32_t)(r % a->n_expert));
        char b[32];
        if (!o.quiet)
            st_info("expert arena: %s mapped read-only from %s (%d ranges)", st_fmt_bytes(b, sizeof b, (double)a->bytes),
                    o.pack_path, a->n_chunks);
    } else {
        for (int c = 0; c < a->n_chunks; c++) {
            void *p = mmap(NULL, sizes[c], PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) {
                char b[32], t[32];
                st_err("%s: cannot allocate expert arena chunk %d of %d (%s; arena %s): %s", m->path, c, a->n_chunks,
                       st_fmt_bytes(b, sizeof b, (double)sizes[c]), st_fmt_bytes(t, sizeof t, (double)a->bytes),
                       strerror(errno));
                goto fail;
            }
            a->chunks[c].p = p;
            a->chunks[c].bytes = sizes[c];
            uint8_t *q = p;
            uint64_t r1 = c + 1 < a->n_chunks ? starts[c + 1] : (uint64_t)a->n_layer * a->n_expert;
            for (uint64_t r = starts[c]; r < r1; r++) {
                a->rec[r] = q;
                q += a->layers[r / a->n_expert].record_bytes;
            }
        }
        st_progress prog;
        double t0 = st_now();
        if (!o.quiet) st_progress_begin(&prog, "building the expert arena", a->bytes, 1);
        fill_job j = {a, m, starts, o.quiet ? NULL : &prog};
        // Page faults on the GGUF mapping and on fresh arena pages dominate: a few threads help on big models.
        int nt = st_cpu_count() < 8 ? st_cpu_count() : 8;
        st_pool *pool = a->n_chunks > 1 && nt > 1 ? st_pool_create(nt) : NULL;
        if (pool) {
            st_pool_run(pool, a->n_chunks, fill_chunk, &j);
            st_pool_destroy(pool);
        } else {
            for (int c = 0; c < a->n_chunks; c++) fill_chunk(&j, c, 0);
        }
        if (!o.quiet) {
            st_progress_end(&prog);
            char b[32];
            st_info("expert arena: %s in %d anonymous chunks, built in %.2f s",
                    st_fmt_bytes(b, sizeof b, (double)a->bytes), a->n_chunks, st_now() - t0);
        }
    }
    if (register_all(a, &o)) goto fail;
    free(starts);
    free(sizes);
    st_pack_info_free(&layout);
    return a;
fail:
    free(starts);
    free(sizes);
    st_pack_info_free(&layout);
    st_arena_free(a);
    return NULL;
}

void st_arena_free(st_arena *a) {
    if (!a) return;
    for (int c = 0; c < a->n_chunks; c++) {
        st_arena_chunk *ch = &a->chunks[c];
        if (ch->registered && a->unregister_chunk) a->unregister_chunk(ch->p, ch->bytes, a->ud);
        if (a->mode == ST_ARENA_ANON && ch->p) munmap(ch->p, ch->bytes);
    }
    free(a->chunks);
    st_pack_close(a->pack);
    free(a->layers);
    free(a->rec);
    free(a);
}
