// Streaming detokenization: pieces are concatenated and only complete, valid UTF-8 characters are released.
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/err.h"

struct st_detok_stream {
    const st_tokenizer *tok;
    unsigned flags;
    bool started;        // some text has been released or dropped (the leading-space strip applies once)
    uint8_t pend[4];     // an incomplete character carried to the next push (at most 3 bytes)
    int n_pend;
    char *out;           // [cap] the last returned text, NUL-terminated
    size_t cap;
};

st_detok_stream *st_detok_stream_new(const st_tokenizer *tok, unsigned flags) {
    st_detok_stream *s = calloc(1, sizeof *s);
    if (!s) { st_err("detok: out of memory"); return NULL; }
    s->tok = tok;
    s->flags = flags;
    return s;
}

void st_detok_stream_free(st_detok_stream *s) {
    if (!s) return;
    free(s->out);
    free(s);
}

void st_detok_stream_reset(st_detok_stream *s) {
    s->started = false;
    s->n_pend = 0;
}

static int out_reserve(st_detok_stream *s, size_t n) {
    if (n <= s->cap) return 0;
    size_t nc = s->cap ? s->cap : 64;
    while (nc < n) nc *= 2;
    char *p = realloc(s->out, nc);
    if (!p) return -1;
    s->out = p;
    s->cap = nc;
    return 0;
}

// Length of the valid UTF-8 character at b[0..n): >0 complete, 0 = valid so far but needs more bytes,
// -k = invalid, the first k bytes (k >= 1) form the maximal ill-formed subpart to replace with one U+FFFD.
// Ranges per the Unicode standard (table 3-7): no overlongs, no surrogates, nothing above U+10FFFF.
static int utf8_check(const uint8_t *b, size_t n) {
    uint8_t c = b[0];
    if (c < 0x80) return 1;
    int len;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return -1;
    for (int k = 1; k < len; k++) {
        if ((size_t)k >= n) return 0;
        uint8_t lo_k = k == 1 ? lo : 0x80, hi_k = k == 1 ? hi : 0xBF;
        if (b[k] < lo_k || b[k] > hi_k) return -k;
    }
    return len;
}

// Appends valid text from src to s->out (at *o), holding an incomplete tail in s->pend when !final.
static int emit(st_detok_stream *s, const uint8_t *src, size_t n, size_t *o, bool final) {
    if (out_reserve(s, *o + n * 3 + 8)) return -1;  // worst case: every byte becomes U+FFFD
    size_t i = 0;
    while (i < n) {
        int r = utf8_check(src + i, n - i);
        if (r > 0) {
            memcpy(s->out + *o, src + i, (size_t)r);
            *o += (size_t)r;
            i += (size_t)r;
        } else if (r < 0 || final) {
            memcpy(s->out + *o, "\xEF\xBF\xBD", 3);
            *o += 3;
            i += r < 0 ? (size_t)-r : n - i;  // an incomplete tail at the end is one replacement
        } else {
            memcpy(s->pend, src + i, n - i);
            s->n_pend = (int)(n - i);
            return 0;
        }
    }
    s->n_pend = 0;
    return 0;
}

const char *st_detok_stream_push(st_detok_stream *s, int32_t id, size_t *len) {
    size_t n;
    const char *p = st_token_piece_ref(s->tok, id, (s->flags & ST_DETOK_SPECIAL) != 0, &n);
    if (!p) { p = ""; n = 0; }
    if ((s->flags & ST_DETOK_STRIP_SPACE) && !s->started && s->tok->add_space_prefix && n > 0 && s->n_pend == 0) {
        if (p[0] == ' ') { p++; n--; }
    }
    if (n > 0) s->started = true;
    // join the held-back bytes with the new piece
    size_t o = 0;
    uint8_t small[4 + 64];
    uint8_t *joined = small, *heap = NULL;
    size_t jn = (size_t)s->n_pend + n;
    if (jn > sizeof small) {
        heap = malloc(jn);
        if (!heap) { st_err("detok: out of memory"); return NULL; }
        joined = heap;
    }
    memcpy(joined, s->pend, (size_t)s->n_pend);
    if (n) memcpy(joined + s->n_pend, p, n);
    int rc = emit(s, joined, jn, &o, false);
    free(heap);
    if (rc || out_reserve(s, o + 1)) { st_err("detok: out of memory"); return NULL; }
    s->out[o] = 0;
    *len = o;
    return s->out;
}

const char *st_detok_stream_flush(st_detok_stream *s, size_t *len) {
    size_t o = 0;
    uint8_t tail[4];
    int nt = s->n_pend;
    memcpy(tail, s->pend, (size_t)nt);
    if (emit(s, tail, (size_t)nt, &o, true) || out_reserve(s, o + 1)) { st_err("detok: out of memory"); return NULL; }
    s->out[o] = 0;
    *len = o;
    st_detok_stream_reset(s);
    return s->out;
}

int st_detokenize(const st_tokenizer *tok, const int32_t *ids, int n, char *buf, int buflen, unsigned flags) {
    st_detok_stream *s = st_detok_stream_new(tok, flags);
    if (!s) return INT32_MIN;
    size_t total = 0;
    for (int i = 0; i <= n; i++) {
        size_t l;
        const char *p = i < n ? st_detok_stream_push(s, ids[i], &l) : st_detok_stream_flush(s, &l);
        if (!p) { st_detok_stream_free(s); return INT32_MIN; }
        if (total + l < (size_t)buflen) memcpy(buf + total, p, l);
        total += l;
    }
    st_detok_stream_free(s);
    if (total + 1 > (size_t)buflen) return -(int)total;
    buf[total] = 0;
    return (int)total;
}
