// The native pack file (see pack.h for the byte layout).
#include "place/pack.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quant/quant.h"
#include "util/err.h"
#include "util/log.h"

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// ---- little-endian fields ----------------------------------------------------------------------------------------

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void wr64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

// ---- hashing -----------------------------------------------------------------------------------------------------

#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull

static uint64_t fnv(uint64_t h, const void *data, size_t n) {
    const uint8_t *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * FNV_PRIME;
    return h;
}
static uint64_t fnv_u64(uint64_t h, uint64_t v) {
    uint8_t b[8];
    wr64(b, v);
    return fnv(h, b, 8);
}
static uint64_t fnv_f32(uint64_t h, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return fnv_u64(h, u);
}

// The header hash: FNV-1a over [0, n) with the hash field (120..127) taken as zero.
static uint64_t header_hash(const uint8_t *p, uint64_t n) {
    static const uint8_t zero[8] = {0};
    uint64_t h = fnv(FNV_OFFSET, p, 120);
    h = fnv(h, zero, 8);
    return fnv(h, p + 128, n - 128);
}

uint64_t st_model_fingerprint(const st_model *m) {
    const st_hparams *hp = &m->hp;
    uint64_t h = fnv(FNV_OFFSET, "strata-model-v1", 15);
    const uint64_t f[] = {(uint64_t)hp->arch, hp->n_layer, hp->n_ctx_train, hp->n_embd, hp->n_ff, hp->n_head,
                          hp->n_head_kv, hp->head_dim_k, hp->head_dim_v, hp->n_rot, hp->n_vocab,
                          (uint64_t)hp->rope_type, hp->n_expert, hp->n_expert_used, hp->n_ff_exp,
                          hp->expert_weights_norm, hp->tied_output};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) h = fnv_u64(h, f[i]);
    h = fnv_f32(h, hp->rms_eps);
    h = fnv_f32(h, hp->rope_freq_base);
    h = fnv_f32(h, hp->rope_freq_scale);
    for (uint32_t l = 0; l < hp->n_layer && hp->n_expert; l++) {
        const st_weight *ws[3] = {&m->layers[l].gate_exps, &m->layers[l].up_exps, &m->layers[l].down_exps};
        for (int p = 0; p < 3; p++) {
            const gguf_tensor *t = ws[p]->name ? gguf_find_tensor(m->gguf, ws[p]->name) : NULL;
            if (!t) continue;
            h = fnv(h, t->name, strlen(t->name) + 1);
            h = fnv_u64(h, (uint64_t)t->type);
            for (int d = 0; d < GGUF_MAX_DIMS; d++) h = fnv_u64(h, (uint64_t)t->ne[d]);
            h = fnv_u64(h, (uint64_t)t->file);
            h = fnv_u64(h, t->offset + m->gguf->files[t->file].data_offset);
            h = fnv_u64(h, t->nbytes);
            h = fnv(h, t->data, t->nbytes < 4096 ? t->nbytes : 4096);
        }
    }
    return h;
}

// ---- layout ------------------------------------------------------------------------------------------------------

void st_pack_info_free(st_pack_info *pi) {
    if (!pi) return;
    free(pi->layers);
    pi->layers = NULL;
}

int st_pack_layout(const st_model *m, st_pack_info *out) {
    const st_hparams *hp = &m->hp;
    memset(out, 0, sizeof *out);
    if (hp->n_expert == 0) return st_err("%s: a dense model (no routed experts): there is nothing to pack", m->path);
    out->version = ST_PACK_VERSION;
    out->arch = (uint32_t)hp->arch;
    out->n_layer = hp->n_layer;
    out->n_expert = hp->n_expert;
    out->n_embd = hp->n_embd;
    out->n_ff_exp = hp->n_ff_exp;
    out->fingerprint = st_model_fingerprint(m);
    out->header_bytes = ST_PACK_HEADER_FIXED + (uint64_t)ST_PACK_LAYER_ENTRY * hp->n_layer;
    out->data_offset = align_up(out->header_bytes, ST_PACK_RECORD_ALIGN);
    out->layers = calloc(hp->n_layer, sizeof *out->layers);
    if (!out->layers) return st_err("out of memory");
    uint64_t off = out->data_offset;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const st_layer *L = &m->layers[l];
        st_pack_layer *pl = &out->layers[l];
        st_xlayer_init(&pl->x, hp, L->gate_exps.type, L->up_exps.type, L->down_exps.type);
        pl->record_bytes = align_up(pl->x.slot_bytes, ST_PACK_RECORD_ALIGN);
        pl->offset = off;
        off += pl->record_bytes * hp->n_expert;
    }
    out->data_bytes = off - out->data_offset;
    out->file_bytes = off;
    return 0;
}

void st_pack_encode_header(const st_pack_info *pi, uint8_t *h) {
    memset(h, 0, pi->data_offset);
    memcpy(h, ST_PACK_MAGIC, 8);
    wr32(h + 8, pi->version);
    wr32(h + 12, (uint32_t)pi->header_bytes);
    wr64(h + 16, pi->fingerprint);
    wr32(h + 24, pi->n_layer);
    wr32(h + 28, pi->n_expert);
    wr32(h + 32, pi->n_embd);
    wr32(h + 36, pi->n_ff_exp);
    wr32(h + 40, ST_PACK_PART_ALIGN);
    wr32(h + 44, ST_PACK_RECORD_ALIGN);
    wr64(h + 48, pi->data_offset);
    wr64(h + 56, pi->data_bytes);
    wr64(h + 64, pi->file_bytes);
    wr32(h + 72, pi->arch);
    wr32(h + 76, ST_PACK_LAYER_ENTRY);
    for (uint32_t l = 0; l < pi->n_layer; l++) {
        uint8_t *e = h + ST_PACK_HEADER_FIXED + (uint64_t)l * ST_PACK_LAYER_ENTRY;
        const st_pack_layer *pl = &pi->layers[l];
        for (int p = 0; p < 3; p++) {
            wr32(e + 4 * p, (uint32_t)pl->x.type[p]);
            wr64(e + 16 + 8 * p, pl->x.bytes[p]);
        }
        wr64(e + 40, pl->record_bytes);
        wr64(e + 48, pl->offset);
    }
    wr64(h + 120, header_hash(h, pi->header_bytes));
}

// ---- reading -----------------------------------------------------------------------------------------------------

int st_pack_parse(const uint8_t *d, uint64_t size, const char *name, st_pack_info *out) {
    memset(out, 0, sizeof *out);
    if (size < ST_PACK_HEADER_FIXED)
        return st_err("%s: truncated pack: %" PRIu64 " bytes, the header alone is %u", name, size, ST_PACK_HEADER_FIXED);
    if (memcmp(d, ST_PACK_MAGIC, 8))
        return st_err("%s: offset 0: not a strata pack file (magic is not \"STRPACK\"; make one with strata pack)",
                      name);
    out->version = rd32(d + 8);
    if (out->version != ST_PACK_VERSION)
        return st_err("%s: offset 8: pack version %u, this strata reads version %u (run strata pack again)", name,
                      out->version, ST_PACK_VERSION);
    out->header_bytes = rd32(d + 12);
    out->fingerprint = rd64(d + 16);
    out->n_layer = rd32(d + 24);
    out->n_expert = rd32(d + 28);
    out->n_embd = rd32(d + 32);
    out->n_ff_exp = rd32(d + 36);
    uint32_t part_align = rd32(d + 40), rec_align = rd32(d + 44);
    out->data_offset = rd64(d + 48);
    out->data_bytes = rd64(d + 56);
    out->file_bytes = rd64(d + 64);
    out->arch = rd32(d + 72);
    uint32_t entry = rd32(d + 76);
    if (out->n_layer == 0 || out->n_layer > 65536)
        return st_err("%s: offset 24: n_layer %u is out of range [1, 65536]", name, out->n_layer);
    if (out->n_expert == 0 || out->n_expert > 65536)
        return st_err("%s: offset 28: n_expert %u is out of range [1, 65536]", name, out->n_expert);
    if (out->n_embd == 0 || out->n_embd > (1u << 20) || out->n_ff_exp == 0 || out->n_ff_exp > (1u << 20))
        return st_err("%s: offset 32: n_embd %u / n_ff_exp %u out of range [1, 2^20]", name, out->n_embd,
                      out->n_ff_exp);
    if (part_align != ST_PACK_PART_ALIGN || rec_align != ST_PACK_RECORD_ALIGN || entry != ST_PACK_LAYER_ENTRY)
        return st_err("%s: offset 40: alignments %u/%u and layer entry size %u, expected %u/%u and %u", name,
                      part_align, rec_align, entry, ST_PACK_PART_ALIGN, ST_PACK_RECORD_ALIGN, ST_PACK_LAYER_ENTRY);
    uint64_t want_hdr = ST_PACK_HEADER_FIXED + (uint64_t)ST_PACK_LAYER_ENTRY * out->n_layer;
    if (out->header_bytes != want_hdr)
        return st_err("%s: offset 12: header_bytes %" PRIu64 ", expected %" PRIu64 " for %u layers", name,
                      out->header_bytes, want_hdr, out->n_layer);
    if (size < want_hdr)
        return st_err("%s: truncated pack: %" PRIu64 " bytes, the header and layer table need %" PRIu64, name, size,
                      want_hdr);
    uint64_t h = rd64(d + 120), hh = header_hash(d, want_hdr);
    if (h != hh)
        return st_err("%s: offset 120: header hash 0x%016" PRIx64 " does not match its contents (0x%016" PRIx64
                      "): the header is corrupted; run strata pack again",
                      name, h, hh);
    if (out->data_offset != align_up(want_hdr, ST_PACK_RECORD_ALIGN))
        return st_err("%s: offset 48: data_offset %" PRIu64 ", expected %" PRIu64, name, out->data_offset,
                      align_up(want_hdr, ST_PACK_RECORD_ALIGN));
    out->layers = calloc(out->n_layer, sizeof *out->layers);
    if (!out->layers) return st_err("%s: out of memory", name);
    st_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_embd = out->n_embd;
    hp.n_ff_exp = out->n_ff_exp;
    uint64_t off = out->data_offset;
    for (uint32_t l = 0; l < out->n_layer; l++) {
        const uint8_t *e = d + ST_PACK_HEADER_FIXED + (uint64_t)l * ST_PACK_LAYER_ENTRY;
        uint64_t eo = ST_PACK_HEADER_FIXED + (uint64_t)l * ST_PACK_LAYER_ENTRY;
        st_pack_layer *pl = &out->layers[l];
        int ty[3];
        for (int p = 0; p < 3; p++) {
            uint32_t t = rd32(e + 4 * p);
            int64_t ne0 = p == 2 ? out->n_ff_exp : out->n_embd;
            if (t >= ST_TYPE_COUNT || !st_type_get((int)t) || st_row_size((int)t, ne0) == 0) {
                st_err("%s: offset %" PRIu64 ": layer %u %s type %u is unknown or does not divide rows of %"
                       PRId64, name, eo + 4 * p, l, p == 0 ? "gate" : p == 1 ? "up" : "down", t, ne0);
                goto bad;
            }
            ty[p] = (int)t;
        }
        st_xlayer_init(&pl->x, &hp, ty[0], ty[1], ty[2]);
        for (int p = 0; p < 3; p++) {
            uint64_t b = rd64(e + 16 + 8 * p);
            if (b != pl->x.bytes[p]) {
                st_err("%s: offset %" PRIu64 ": layer %u %s part is %" PRIu64 " bytes, %s rows need %" PRIu64,
                       name, eo + 16 + 8 * p, l, p == 0 ? "gate" : p == 1 ? "up" : "down", b,
                       st_type_name(ty[p]), pl->x.bytes[p]);
                goto bad;
            }
        }
        pl->record_bytes = rd64(e + 40);
        pl->offset = rd64(e + 48);
        if (pl->record_bytes != align_up(pl->x.slot_bytes, ST_PACK_RECORD_ALIGN)) {
            st_err("%s: offset %" PRIu64 ": layer %u record_bytes %" PRIu64 ", expected %" PRIu64, name,
                   eo + 40, l, pl->record_bytes, align_up(pl->x.slot_bytes, ST_PACK_RECORD_ALIGN));
            goto bad;
        }
        if (pl->offset != off) {
            st_err("%s: offset %" PRIu64 ": layer %u layer_offset %" PRIu64 ", expected %" PRIu64, name,
                   eo + 48, l, pl->offset, off);
            goto bad;
        }
        // record_bytes < 2^42 (2^20 x 2^20 elements of at most 4 bytes), n_expert <= 2^16, n_layer <= 2^16:
        // the running offset stays below 2^74 only in theory, so guard the additions.
        uint64_t lb;
        if (__builtin_mul_overflow(pl->record_bytes, (uint64_t)out->n_expert, &lb) ||
            __builtin_add_overflow(off, lb, &off)) {
            st_err("%s: layer %u: data size overflows", name, l);
            goto bad;
        }
    }
    if (out->data_bytes != off - out->data_offset || out->file_bytes != off) {
        uint64_t db = out->data_bytes, fb = out->file_bytes;
        st_err("%s: offset 56: data_bytes %" PRIu64 " / file_bytes %" PRIu64 ", the layer table gives %" PRIu64
               " / %" PRIu64, name, db, fb, off - out->data_offset, off);
        goto bad;
    }
    if (size < out->file_bytes) {
        uint64_t fb = out->file_bytes;
        st_err("%s: truncated pack: %" PRIu64 " bytes, the header says %" PRIu64 " (interrupted strata pack?)",
               name, size, fb);
        goto bad;
    }
    if (size > out->file_bytes) {
        uint64_t fb = out->file_bytes;
        st_err("%s: %" PRIu64 " bytes, the header says %" PRIu64 ": trailing data", name, size, fb);
        goto bad;
    }
    return 0;
bad:
    st_pack_info_free(out);
    return -1;
}

int st_pack_check_model(const st_pack_info *pi, const st_model *m, const char *name) {
    const st_hparams *hp = &m->hp;
    if (hp->n_expert == 0) return st_err("%s: the model %s is dense: it has no pack", name, m->path);
    if (pi->arch != (uint32_t)hp->arch)
        return st_err("%s: offset 72: arch %u, the model %s is %s", name, pi->arch, m->path, st_arch_name(hp->arch));
    if (pi->n_layer != hp->n_layer)
        return st_err("%s: offset 24: n_layer %u, the model %s has %u", name, pi->n_layer, m->path, hp->n_layer);
    if (pi->n_expert != hp->n_expert)
        return st_err("%s: offset 28: n_expert %u, the model %s has %u", name, pi->n_expert, m->path, hp->n_expert);
    if (pi->n_embd != hp->n_embd)
        return st_err("%s: offset 32: n_embd %u, the model %s has %u", name, pi->n_embd, m->path, hp->n_embd);
    if (pi->n_ff_exp != hp->n_ff_exp)
        return st_err("%s: offset 36: n_ff_exp %u, the model %s has %u", name, pi->n_ff_exp, m->path, hp->n_ff_exp);
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const st_weight *ws[3] = {&m->layers[l].gate_exps, &m->layers[l].up_exps, &m->layers[l].down_exps};
        for (int p = 0; p < 3; p++)
            if (pi->layers[l].x.type[p] != ws[p]->type)
                return st_err("%s: offset %u: layer %u %s type %s, the model's '%s' is %s", name,
                              ST_PACK_HEADER_FIXED + l * ST_PACK_LAYER_ENTRY + 4 * p, l,
                              p == 0 ? "gate" : p == 1 ? "up" : "down", st_type_name(pi->layers[l].x.type[p]),
                              ws[p]->name, st_type_name(ws[p]->type));
    }
    uint64_t fp = st_model_fingerprint(m);
    if (pi->fingerprint != fp)
        return st_err("%s: offset 16: model fingerprint 0x%016" PRIx64 ", the model %s has 0x%016" PRIx64
                      ": the pack was made from a different file; run strata pack -m %s -o %s again",
                      name, pi->fingerprint, m->path, fp, m->path, name);
    return 0;
}

st_pack *st_pack_open(const char *path, const st_model *m) {
    st_pack *p = calloc(1, sizeof *p);
    if (!p) return st_err("out of memory"), NULL;
    p->path = strdup(path);
    p->map.fd = -1;
    if (!p->path || st_map_file(&p->map, path)) goto fail;
    if (st_pack_parse(p->map.data, p->map.size, path, &p->info)) goto fail;
    if (st_pack_check_model(&p->info, m, path)) goto fail;
    return p;
fail:
    st_pack_close(p);
    return NULL;
}

void st_pack_close(st_pack *p) {
    if (!p) return;
    st_pack_info_free(&p->info);
    if (p->map.data || p->map.fd >= 0) st_unmap_file(&p->map);
    free(p->path);
    free(p);
}

// ---- writing -----------------------------------------------------------------------------------------------------

static int write_all(int fd, const uint8_t *p, uint64_t n, const char *path) {
    while (n) {
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : (size_t)n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return st_err("%s: write failed: %s", path, strerror(errno));
        }
        p += w;
        n -= (uint64_t)w;
    }
    return 0;
}

#define WRITE_BATCH (64ull << 20)  // records are gathered into a buffer of about this size per write

int st_pack_write(const st_model *m, const char *path, bool quiet) {
    st_pack_info pi;
    if (st_pack_layout(m, &pi)) return -1;
    size_t tl = strlen(path) + 8;
    char *tmp = malloc(tl);
    uint8_t *hdr = calloc(1, pi.data_offset), *buf = NULL;
    int fd = -1, rc = -1;
    if (!tmp || !hdr) {
        st_err("out of memory");
        goto done;
    }
    snprintf(tmp, tl, "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        st_err("%s: cannot create: %s", tmp, strerror(errno));
        goto done;
    }
    st_pack_encode_header(&pi, hdr);
    if (write_all(fd, hdr, pi.data_offset, tmp)) goto done;
    uint64_t max_rec = 0;
    for (uint32_t l = 0; l < pi.n_layer; l++)
        if (pi.layers[l].record_bytes > max_rec) max_rec = pi.layers[l].record_bytes;
    uint64_t batch = WRITE_BATCH / max_rec;
    if (batch < 1) batch = 1;
    if (batch > pi.n_expert) batch = pi.n_expert;
    buf = malloc(batch * max_rec);
    if (!buf) {
        st_err("out of memory for a %" PRIu64 "-byte write buffer", batch * max_rec);
        goto done;
    }
    st_progress prog;
    if (!quiet) st_progress_begin(&prog, "packing experts", pi.data_bytes, 1);
    for (uint32_t l = 0; l < pi.n_layer; l++) {
        const st_pack_layer *pl = &pi.layers[l];
        const st_weight *ws[3] = {&m->layers[l].gate_exps, &m->layers[l].up_exps, &m->layers[l].down_exps};
        for (uint32_t e0 = 0; e0 < pi.n_expert; e0 += (uint32_t)batch) {
            uint32_t n = pi.n_expert - e0 < batch ? pi.n_expert - e0 : (uint32_t)batch;
            memset(buf, 0, n * pl->record_bytes);  // padding is zero, so packs of the same model are identical
            for (uint32_t i = 0; i < n; i++) {
                uint8_t *rec = buf + i * pl->record_bytes;
                for (int p = 0; p < 3; p++) {
                    // Expert e of a [ne0, rows, n_expert] stack: rows consecutive rows starting at e * rows.
                    const uint8_t *src = ws[p]->data + (uint64_t)(e0 + i) * pl->x.bytes[p];
                    memcpy(rec + pl->x.off[p], src, pl->x.bytes[p]);
                }
            }
            if (write_all(fd, buf, n * pl->record_bytes, tmp)) {
                if (!quiet) st_progress_end(&prog);
                goto done;
            }
            if (!quiet) st_progress_add(&prog, n * pl->record_bytes);
        }
    }
    if (!quiet) st_progress_end(&prog);
    if (close(fd)) {
        fd = -1;
        st_err("%s: close failed: %s", tmp, strerror(errno));
        goto done;
    }
    fd = -1;
    if (rename(tmp, path)) {
        st_err("cannot rename %s to %s: %s", tmp, path, strerror(errno));
        goto done;
    }
    rc = 0;
done:
    if (fd >= 0) close(fd);
    if (rc && tmp) unlink(tmp);
    free(tmp);
    free(hdr);
    free(buf);
    st_pack_info_free(&pi);
    return rc;
}
