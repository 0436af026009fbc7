// Tokenizer loading and encoding. Behaviour follows llama.cpp (src/llama-vocab.cpp, src/unicode.cpp of the
// llama.cpp vendored in llama-cpp-python 0.3.36) so ids match it exactly; the code is our own.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/err.h"
#include "util/log.h"

// ---- small helpers ------------------------------------------------------------------------------------------

// Doubles the capacity *cap of array v (elem bytes per element; `first` elements when empty). Returns the
// reallocated array with *cap updated, or NULL with v and *cap unchanged.
static void *grow(void *v, int *cap, size_t elem, int first) {
    int nc = *cap ? *cap * 2 : first;
    void *nv = realloc(v, (size_t)nc * elem);
    if (nv) *cap = nc;
    return nv;
}

typedef struct ibuf {  // growable int32 vector
    int32_t *v;
    int n, cap;
} ibuf;

static int ibuf_push(ibuf *b, int32_t x) {
    if (b->n == b->cap) {
        int32_t *nv = grow(b->v, &b->cap, sizeof *nv, 64);
        if (!nv) return -1;
        b->v = nv;
    }
    b->v[b->n++] = x;
    return 0;
}

typedef struct cbuf {  // growable byte vector
    char *v;
    size_t n, cap;
} cbuf;

static int cbuf_reserve(cbuf *b, size_t extra) {
    if (b->n + extra <= b->cap) return 0;
    size_t nc = b->cap ? b->cap : 256;
    while (nc < b->n + extra) nc *= 2;
    char *nv = realloc(b->v, nc);
    if (!nv) return -1;
    b->v = nv;
    b->cap = nc;
    return 0;
}

static int cbuf_add(cbuf *b, const void *p, size_t n) {
    if (cbuf_reserve(b, n)) return -1;
    memcpy(b->v + b->n, p, n);
    b->n += n;
    return 0;
}

static uint64_t hash_bytes(uint64_t h, const char *s, size_t n) {  // FNV-1a
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h;
}
#define HASH_SEED 0xcbf29ce484222325ull

// Encodes a code point as UTF-8 without validity checks beyond range (surrogates are written as 3 bytes, which is
// what llama.cpp does when it re-encodes what it decoded). cp must be <= 0x10FFFF.
static int utf8_put(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

// Lenient UTF-8 decoding as llama.cpp does it for BPE pre-tokenization: the lead byte fixes the length, only the
// 10xxxxxx shape of continuation bytes is checked (so overlong forms and surrogates pass), and a bad lead or a
// short/broken sequence yields U+FFFD for that one byte. Values above U+10FFFF (which llama.cpp cannot re-encode
// and throws on) are also treated as one bad byte.
static uint32_t utf8_get_lenient(const uint8_t *s, size_t n, size_t *pos) {
    size_t i = *pos;
    uint8_t c = s[i];
    if (c < 0x80) { *pos = i + 1; return c; }
    int len = (c & 0x40) == 0 ? 0 : (c & 0x20) == 0 ? 2 : (c & 0x10) == 0 ? 3 : (c & 0x08) == 0 ? 4 : 0;
    if (len == 0 || i + (size_t)len > n) goto bad;
    uint32_t cp = len == 2 ? (c & 0x1Fu) : len == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (int k = 1; k < len; k++) {
        if ((s[i + k] & 0xC0) != 0x80) goto bad;
        cp = (cp << 6) | (s[i + k] & 0x3Fu);
    }
    if (cp > 0x10FFFF) goto bad;
    *pos = i + (size_t)len;
    return cp;
bad:
    *pos = i + 1;
    return 0xFFFD;
}

// Byte length of the UTF-8 sequence a lead byte announces (llama.cpp's unicode_len_utf8: continuation and
// invalid bytes count as 1).
static int utf8_len_lead(uint8_t c) {
    static const uint8_t t[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return t[c >> 4];
}

// ---- hash maps ----------------------------------------------------------------------------------------------

static int hmap_init(tok_hmap *m, uint32_t n) {
    uint32_t cap = 16;
    while (cap < 2 * n + 2) cap *= 2;
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots) return -1;
    m->cap = cap;
    m->count = 0;
    return 0;
}

// Vocabulary map: entry index = token id.
static int32_t vocab_find(const st_tokenizer *t, const char *s, size_t n) {
    const tok_hmap *m = &t->vocab;
    uint32_t mask = m->cap - 1;
    for (uint32_t i = (uint32_t)hash_bytes(HASH_SEED, s, n) & mask;; i = (i + 1) & mask) {
        uint32_t e = m->slots[i];
        if (!e) return -1;
        uint32_t id = e - 1;
        if (t->text_len[id] == n && memcmp(t->text + t->text_off[id], s, n) == 0) return (int32_t)id;
    }
}

static void vocab_insert(st_tokenizer *t, uint32_t id) {
    tok_hmap *m = &t->vocab;
    const char *s = t->text + t->text_off[id];
    size_t n = t->text_len[id];
    uint32_t mask = m->cap - 1;
    for (uint32_t i = (uint32_t)hash_bytes(HASH_SEED, s, n) & mask;; i = (i + 1) & mask) {
        uint32_t e = m->slots[i];
        if (!e) { m->slots[i] = id + 1; m->count++; return; }
        uint32_t o = e - 1;
        if (t->text_len[o] == n && memcmp(t->text + t->text_off[o], s, n) == 0) {
            m->slots[i] = id + 1;  // a later duplicate replaces the earlier one (llama.cpp's token_to_id[word] = i)
            return;
        }
    }
}

static uint64_t pair_hash(const char *a, size_t an, const char *b, size_t bn) {
    uint64_t h = hash_bytes(HASH_SEED, a, an);
    h = (h ^ 0xff) * 0x100000001b3ull;  // separator so ("ab","c") and ("a","bc") hash apart
    return hash_bytes(h, b, bn);
}

// Merge map: entry index = rank. Returns the rank or -1.
static int merge_find(const st_tokenizer *t, const char *a, size_t an, const char *b, size_t bn) {
    const tok_hmap *m = &t->merge_map;
    if (!m->cap) return -1;
    uint32_t mask = m->cap - 1;
    for (uint32_t i = (uint32_t)pair_hash(a, an, b, bn) & mask;; i = (i + 1) & mask) {
        uint32_t e = m->slots[i];
        if (!e) return -1;
        const tok_merge *g = &t->merges[e - 1];
        if (g->a_len == an && g->b_len == bn && memcmp(t->merge_text + g->a_off, a, an) == 0 &&
            memcmp(t->merge_text + g->b_off, b, bn) == 0)
            return (int)(e - 1);
    }
}

static void merge_insert(st_tokenizer *t, uint32_t rank) {
    tok_hmap *m = &t->merge_map;
    const tok_merge *g = &t->merges[rank];
    const char *a = t->merge_text + g->a_off, *b = t->merge_text + g->b_off;
    uint32_t mask = m->cap - 1;
    for (uint32_t i = (uint32_t)pair_hash(a, g->a_len, b, g->b_len) & mask;; i = (i + 1) & mask) {
        uint32_t e = m->slots[i];
        if (!e) { m->slots[i] = rank + 1; m->count++; return; }
        const tok_merge *o = &t->merges[e - 1];
        if (o->a_len == g->a_len && o->b_len == g->b_len && memcmp(t->merge_text + o->a_off, a, g->a_len) == 0 &&
            memcmp(t->merge_text + o->b_off, b, g->b_len) == 0) {
            return;  // a repeated merge keeps its first (lowest) rank, as llama.cpp's map emplace does
        }
    }
}

// ---- GPT-2 byte <-> unicode table ----------------------------------------------------------------------------
// Format fact of byte-level BPE (OpenAI GPT-2 encoder.py bytes_to_unicode): printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100.. in byte order.

static uint16_t g_byte_cp[256];     // byte -> code point
static int16_t g_cp_byte[0x144];    // code point -> byte, -1 if none

static void byte_table_build(void) {
    int n = 0;
    for (int cp = 0; cp < 0x144; cp++) g_cp_byte[cp] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        g_byte_cp[b] = (uint16_t)(printable ? b : 256 + n++);
    }
    for (int b = 0; b < 256; b++) g_cp_byte[g_byte_cp[b]] = (int16_t)b;
}

static void byte_table_init(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, byte_table_build);
}

// ---- pre-tokenizer regexes -----------------------------------------------------------------------------------
// Transcribed from llama.cpp src/llama-vocab.cpp (llm_tokenizer_bpe constructor, llama-cpp-python 0.3.36); they
// come from each model's tokenizer.json. Applied in order: each regex splits every current piece into its matches
// and the unmatched gaps between them.

enum {
    RX_DEFAULT, RX_LLAMA3, RX_DEEPSEEK_LLM, RX_DEEPSEEK_CODER, RX_DEEPSEEK3, RX_FALCON, RX_GPT2, RX_STARCODER,
    RX_QWEN2, RX_QWEN35, RX_PORO, RX_VIKING, RX_TEKKEN, RX_GPT4O, RX_SEED_CODER, RX_UFAKZEKA, RX_MINICPM5, RX_COUNT
};

static const char *const k_regex[RX_COUNT][6] = {
    [RX_LLAMA3] = {
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    },
    [RX_DEEPSEEK_LLM] = {
        "[\r\n]",
        "\\s?[A-Za-z\\x{b5}\\x{c0}-\\x{d6}\\x{d8}-\\x{f6}\\x{f8}-\\x{1ba}\\x{1bc}-\\x{1bf}\\x{1c4}-\\x{293}\\x{295}-\\x{2af}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37b}-\\x{37d}\\x{37f}\\x{386}\\x{388}-\\x{38a}\\x{38c}\\x{38e}-\\x{3a1}\\x{3a3}-\\x{3f5}\\x{3f7}-\\x{481}\\x{48a}-\\x{52f}\\x{531}-\\x{556}\\x{10a0}-\\x{10c5}\\x{13a0}-\\x{13f5}\\x{13f8}-\\x{13fd}\\x{1c90}-\\x{1cba}\\x{1cbd}-\\x{1cbf}\\x{1d00}-\\x{1d2b}\\x{1d6b}-\\x{1d77}\\x{1d79}-\\x{1d9a}\\x{1e00}-\\x{1f15}\\x{1f18}-\\x{1f1d}\\x{1f20}-\\x{1f45}\\x{1f48}-\\x{1f4d}\\x{1f50}-\\x{1f57}\\x{1f59}\\x{1f5b}\\x{1f5d}\\x{1f5f}-\\x{1f7d}\\x{1f80}-\\x{1fb4}\\x{1fb6}-\\x{1fbc}\\x{1fbe}\\x{1fc2}-\\x{1fc4}\\x{1fc6}-\\x{1fcc}\\x{1fd0}-\\x{1fd3}\\x{1fd6}-\\x{1fdb}\\x{1fe0}-\\x{1fec}\\x{1ff2}-\\x{1ff4}\\x{1ff6}-\\x{1ffc}\\x{2102}\\x{2107}\\x{210a}-\\x{2113}\\x{2115}\\x{2119}-\\x{211d}\\x{2124}\\x{2126}\\x{2128}\\x{212a}-\\x{212d}\\x{212f}-\\x{2134}\\x{2139}\\x{213c}-\\x{213f}\\x{2145}-\\x{2149}\\x{214e}\\x{2183}\\x{2184}\\x{2c00}-\\x{2c7b}\\x{2c7e}-\\x{2ce4}\\x{2ceb}-\\x{2cee}\\x{2cf2}\\x{2cf3}\\x{a640}-\\x{a66d}\\x{a680}-\\x{a69b}\\x{a722}-\\x{a76f}\\x{a771}-\\x{a787}\\x{a78b}-\\x{a78e}\\x{ab70}-\\x{abbf}\\x{fb00}-\\x{fb06}\\x{fb13}-\\x{fb17}\\x{ff21}-\\x{ff3a}\\x{ff41}-\\x{ff5a}\\x{10400}-\\x{1044f}\\x{104b0}-\\x{104d3}\\x{104d8}-\\x{104fb}\\x{10c80}-\\x{10cb2}\\x{10cc0}-\\x{10cf2}\\x{118a0}-\\x{118df}\\x{1e900}-\\x{1e943}]+",
        "\\s?[!-/:-~\\x{ff01}-\\x{ff0f}\\x{ff1a}-\\x{ff5e}\\x{2018}-\\x{201f}\\x{3000}-\\x{3002}]+",
        "\\s+$",
        "[\\x{4e00}-\\x{9fa5}\\x{800}-\\x{4e00}\\x{ac00}-\\x{d7ff}]+",
        "\\p{N}+",
    },
    [RX_DEEPSEEK3] = {
        "\\p{N}{1,3}",
        "[\\x{4e00}-\\x{9fa5}\\x{3040}-\\x{309f}\\x{30a0}-\\x{30ff}]+",
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    },
    [RX_DEEPSEEK_CODER] = {
        "[\r\n]",
        "\\s?\\p{L}+",
        "\\s?\\p{P}+",
        "[\\x{4e00}-\\x{9fa5}\\x{800}-\\x{4e00}\\x{ac00}-\\x{d7ff}]+",
        "\\p{N}",
    },
    [RX_FALCON] = {
        "[\\p{P}\\$\\+<=>\\^~\\|`]+",
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
        "[0-9][0-9][0-9]",
    },
    [RX_STARCODER] = {
        "\\p{N}",
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    },
    [RX_GPT2] = {
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    },
    [RX_QWEN2] = {
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    },
    [RX_QWEN35] = {
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    },
    [RX_PORO] = {
        " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{ff0c}\\x{3001}\\x{964}\\x{6d4}\\x{60c})]+",
    },
    [RX_VIKING] = {
        " ?[^(\\s|.,!?\\x{2026}\\x{3002}\\x{ff0c}\\x{3001}\\x{964}\\x{6d4}\\x{60c})]+",
        "\\p{N}",
    },
    [RX_TEKKEN] = {
        "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    },
    [RX_GPT4O] = {
        "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    },
    [RX_SEED_CODER] = {
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    },
    [RX_UFAKZEKA] = {
        "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    },
    [RX_MINICPM5] = {
        "\\p{N}{1,3}",
        "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    },
    [RX_DEFAULT] = {
        "[\\p{P}\\$\\+<=>\\^~\\|]+",
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
        "\\p{N}+",
        "[0-9][0-9][0-9]",
    },
};

// tokenizer.ggml.pre values and what they select (llama.cpp llama_vocab::impl::load).
typedef struct pre_def {
    const char *name;
    uint8_t rx;
    uint8_t ignore_merges;  // whole pre-token looked up before merging
    uint8_t add_bos;        // default add_bos_token = true
    uint8_t no_bos;         // the model has no BOS token by default
} pre_def;

static const pre_def k_pre[] = {
    {"default", RX_DEFAULT, 0, 0, 0},
    {"minicpm5", RX_MINICPM5, 1, 0, 0},
    {"llama3", RX_LLAMA3, 1, 1, 0}, {"llama-v3", RX_LLAMA3, 1, 1, 0}, {"llama-bpe", RX_LLAMA3, 1, 1, 0},
    {"falcon3", RX_LLAMA3, 1, 1, 0}, {"falcon-h1", RX_LLAMA3, 1, 1, 0}, {"pixtral", RX_LLAMA3, 1, 1, 0},
    {"midm-2.0", RX_LLAMA3, 1, 1, 0}, {"lfm2", RX_LLAMA3, 1, 1, 0}, {"jina-v5-nano", RX_LLAMA3, 1, 1, 0},
    {"dbrx", RX_LLAMA3, 0, 0, 0}, {"smaug-bpe", RX_LLAMA3, 0, 0, 0},
    {"chatglm-bpe", RX_LLAMA3, 0, 0, 1}, {"glm4", RX_LLAMA3, 1, 0, 1}, {"glm5", RX_LLAMA3, 1, 0, 1},
    {"deepseek-llm", RX_DEEPSEEK_LLM, 0, 0, 0},
    {"deepseek-coder", RX_DEEPSEEK_CODER, 0, 0, 0},
    {"deepseek-v3", RX_DEEPSEEK3, 0, 0, 0}, {"hunyuan-dense", RX_DEEPSEEK3, 0, 0, 0},
    {"hy_v4", RX_DEEPSEEK3, 0, 0, 0}, {"joyai-llm", RX_DEEPSEEK3, 0, 0, 0},
    {"falcon", RX_FALCON, 0, 0, 0},
    {"mpt", RX_GPT2, 0, 0, 0}, {"gpt-2", RX_GPT2, 0, 0, 0}, {"phi-2", RX_GPT2, 0, 0, 0},
    {"jina-es", RX_GPT2, 0, 0, 0}, {"jina-de", RX_GPT2, 0, 0, 0}, {"gigachat", RX_GPT2, 0, 0, 0},
    {"jina-v2-es", RX_GPT2, 0, 0, 0}, {"jina-v2-de", RX_GPT2, 0, 0, 0}, {"a.x-4.0", RX_GPT2, 0, 0, 0},
    {"mellum", RX_GPT2, 0, 0, 0}, {"modern-bert", RX_GPT2, 0, 0, 0}, {"jina-v1-en", RX_GPT2, 0, 0, 0},
    {"jina-v2-code", RX_GPT2, 0, 0, 0}, {"roberta-bpe", RX_GPT2, 0, 0, 0}, {"exaone4", RX_GPT2, 0, 0, 0},
    {"olmo", RX_GPT2, 0, 0, 0}, {"jais", RX_GPT2, 0, 0, 0}, {"trillion", RX_GPT2, 0, 0, 0},
    {"granite-docling", RX_GPT2, 0, 0, 0},
    {"starcoder", RX_STARCODER, 0, 0, 0}, {"refact", RX_STARCODER, 0, 0, 0}, {"command-r", RX_STARCODER, 0, 0, 0},
    {"smollm", RX_STARCODER, 0, 0, 0}, {"codeshell", RX_STARCODER, 0, 0, 0}, {"exaone", RX_STARCODER, 0, 0, 0},
    {"minerva-7b", RX_STARCODER, 0, 0, 0}, {"mellum2", RX_STARCODER, 0, 0, 0},
    {"qwen2", RX_QWEN2, 0, 0, 0}, {"deepseek-r1-qwen", RX_QWEN2, 0, 0, 0}, {"kormo", RX_QWEN2, 0, 0, 0},
    {"f2llmv2", RX_QWEN2, 0, 0, 0}, {"megrez", RX_QWEN2, 0, 0, 0}, {"stablelm2", RX_QWEN2, 0, 0, 0},
    {"hunyuan", RX_QWEN2, 0, 0, 0}, {"solar-open", RX_QWEN2, 0, 0, 0}, {"grok-2", RX_QWEN2, 0, 0, 0},
    {"qwen35", RX_QWEN35, 0, 0, 0},
    {"poro-chat", RX_PORO, 0, 0, 0}, {"bloom", RX_PORO, 0, 0, 0}, {"gpt3-finnish", RX_PORO, 0, 0, 0},
    {"viking", RX_VIKING, 0, 0, 0},
    {"tekken", RX_TEKKEN, 1, 1, 0},
    {"gpt-4o", RX_GPT4O, 0, 0, 0}, {"llama4", RX_GPT4O, 0, 0, 0}, {"kanana2", RX_GPT4O, 0, 0, 0},
    {"talkie", RX_GPT4O, 0, 0, 0}, {"minimax-m2", RX_GPT4O, 0, 0, 0},
    {"seed-coder", RX_SEED_CODER, 0, 0, 0},
    {"ufakzeka", RX_UFAKZEKA, 0, 0, 0},
};

// \s in these patterns means the Unicode White_Space set (what llama.cpp's tables and HF tokenizers use); PCRE2's
// own \s differs slightly (U+180E), so spell the set out.
#define WS_SET "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"

static char *expand_ws(const char *p) {
    cbuf b = {0};
    int in_class = 0;
    for (size_t i = 0; p[i]; i++) {
        char c = p[i];
        if (c == '\\' && p[i + 1]) {
            char d = p[++i];
            if (d == 's') {
                if (cbuf_add(&b, in_class ? WS_SET : "[" WS_SET "]", strlen(WS_SET) + (in_class ? 0 : 2))) goto oom;
            } else if (d == 'S' && !in_class) {
                if (cbuf_add(&b, "[^" WS_SET "]", strlen(WS_SET) + 3)) goto oom;
            } else {
                char two[2] = {c, d};
                if (cbuf_add(&b, two, 2)) goto oom;
            }
            continue;
        }
        if (c == '[' && !in_class) in_class = 1;
        else if (c == ']' && in_class) in_class = 0;
        if (cbuf_add(&b, &c, 1)) goto oom;
    }
    if (cbuf_add(&b, "", 1)) goto oom;
    return b.v;
oom:
    free(b.v);
    return NULL;
}

static int compile_regexes(st_tokenizer *t, int rx, const char *where) {
    for (int i = 0; i < 6 && k_regex[rx][i]; i++) {
        char *pat = expand_ws(k_regex[rx][i]);
        if (!pat) return st_err("%s: out of memory", where);
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &ec, &eo, NULL);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(ec, msg, sizeof msg);
            st_err("%s: pre-tokenizer regex %d does not compile at offset %zu: %s", where, i, (size_t)eo,
                   (const char *)msg);
            free(pat);
            return -1;
        }
        free(pat);
        // JIT is an optimisation: when unavailable (platform, or no executable memory) the interpreter is used.
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        t->regex[t->n_regex++] = re;
    }
    return 0;
}

// ---- loading ------------------------------------------------------------------------------------------------

static const char *ctx_name(const gguf_ctx *ctx) {
    return ctx->n_files > 0 && ctx->files[0].path ? ctx->files[0].path : "gguf";
}

// Finds an array key with the given element type; NULL (no error) when absent, NULL + error when ill-typed.
static const gguf_value *get_arr(const gguf_ctx *ctx, const char *key, gguf_vtype elem, gguf_vtype elem2,
                                 bool *bad) {
    const gguf_kv *kv = gguf_find_kv(ctx, key);
    *bad = false;
    if (!kv) return NULL;
    if (kv->value.type != GGUF_VT_ARRAY || (kv->value.arr.elem_type != elem && kv->value.arr.elem_type != elem2)) {
        st_err("%s: metadata key '%s': expected an array of %s, found %s%s%s", ctx_name(ctx), key,
               gguf_vtype_name(elem), gguf_vtype_name(kv->value.type), kv->value.type == GGUF_VT_ARRAY ? " of " : "",
               kv->value.type == GGUF_VT_ARRAY ? gguf_vtype_name(kv->value.arr.elem_type) : "");
        *bad = true;
        return NULL;
    }
    return &kv->value;
}

// Optional string key: malloc'd copy, "" when absent; NULL + error when not a string.
static char *get_str(const gguf_ctx *ctx, const char *key) {
    const gguf_kv *kv = gguf_find_kv(ctx, key);
    if (!kv) return strdup("");
    if (kv->value.type != GGUF_VT_STRING) {
        st_err("%s: metadata key '%s': expected a string, found %s", ctx_name(ctx), key,
               gguf_vtype_name(kv->value.type));
        return NULL;
    }
    char *s = malloc(kv->value.str.len + 1);
    if (!s) return NULL;
    memcpy(s, kv->value.str.ptr, kv->value.str.len);
    s[kv->value.str.len] = 0;
    return s;
}

// Optional bool; returns -1 on a wrong type.
static int get_bool_opt(const gguf_ctx *ctx, const char *key, bool *v) {
    const gguf_kv *kv = gguf_find_kv(ctx, key);
    if (!kv) return 0;
    if (kv->value.type != GGUF_VT_BOOL)
        return st_err("%s: metadata key '%s': expected a bool, found %s", ctx_name(ctx), key,
                      gguf_vtype_name(kv->value.type));
    *v = kv->value.u64 != 0;
    return 0;
}

// Optional special-token id: an id outside the vocabulary is ignored with a warning (as llama.cpp does).
static int get_id_opt(const gguf_ctx *ctx, const char *key, int n_vocab, int32_t *id) {
    const gguf_kv *kv = gguf_find_kv(ctx, key);
    if (!kv) return 0;
    uint64_t v;
    switch (kv->value.type) {
    case GGUF_VT_UINT8: case GGUF_VT_UINT16: case GGUF_VT_UINT32: case GGUF_VT_UINT64:
        v = kv->value.u64;
        break;
    case GGUF_VT_INT8: case GGUF_VT_INT16: case GGUF_VT_INT32: case GGUF_VT_INT64:
        if (kv->value.i64 < 0) {
            st_warn("%s: %s = %lld is negative, ignored", ctx_name(ctx), key, (long long)kv->value.i64);
            return 0;
        }
        v = (uint64_t)kv->value.i64;
        break;
    default:
        return st_err("%s: metadata key '%s': expected an integer token id, found %s", ctx_name(ctx), key,
                      gguf_vtype_name(kv->value.type));
    }
    if (v >= (uint64_t)n_vocab) {
        st_warn("%s: %s = %llu is outside the vocabulary (%d tokens), ignored", ctx_name(ctx), key,
                (unsigned long long)v, n_vocab);
        return 0;
    }
    *id = (int32_t)v;
    return 0;
}

// First token (in the order of `names`) whose text is one of names; -1 if none.
static int32_t find_first(const st_tokenizer *t, const char *const *names) {
    for (int i = 0; names[i]; i++) {
        int32_t id = vocab_find(t, names[i], strlen(names[i]));
        if (id >= 0) return id;
    }
    return -1;
}

static void mark_control(st_tokenizer *t, int32_t id) {
    if (id >= 0 && !(t->attr[id] & TA_CONTROL)) {
        st_debug("tokenizer: token %d '%s' looks like a control token; treating it as one", id,
                 t->text + t->text_off[id]);
        t->attr[id] |= TA_CONTROL;
    }
}

// Builds the decoded piece of every token (llama.cpp token_to_piece with special = true).
static int build_pieces(st_tokenizer *t) {
    cbuf b = {0};
    t->piece_off = malloc((size_t)t->n_vocab * sizeof(uint32_t));
    t->piece_len = malloc((size_t)t->n_vocab * sizeof(uint32_t));
    if (!t->piece_off || !t->piece_len) return -1;
    for (int id = 0; id < t->n_vocab; id++) {
        const char *s = t->text + t->text_off[id];
        size_t n = t->text_len[id];
        uint8_t a = t->attr[id];
        size_t start = b.n;
        if (a & (TA_UNKNOWN | TA_CONTROL | TA_USER_DEFINED)) {
            if (cbuf_add(&b, s, n)) goto oom;
        } else if (a & TA_NORMAL) {
            if (t->kind == ST_TOK_SPM) {
                for (size_t i = 0; i < n;) {  // U+2581 (e2 96 81) -> ' '
                    if (i + 3 <= n && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                        if (cbuf_add(&b, " ", 1)) goto oom;
                        i += 3;
                    } else {
                        if (cbuf_add(&b, s + i, 1)) goto oom;
                        i++;
                    }
                }
            } else {
                for (size_t i = 0; i < n;) {  // each code point -> the byte it stands for
                    uint32_t cp = utf8_get_lenient((const uint8_t *)s, n, &i);
                    if (cp < 0x144 && g_cp_byte[cp] >= 0) {
                        char c = (char)g_cp_byte[cp];
                        if (cbuf_add(&b, &c, 1)) goto oom;
                    } else {
                        // not a byte-level character: llama.cpp writes this marker, keep the same text
                        char tmp[32];
                        char u[4];
                        int un = utf8_put(cp, u);
                        if (cbuf_add(&b, "[UNK_BYTE_0x", 12)) goto oom;
                        for (int k = 0; k < un; k++) {
                            snprintf(tmp, sizeof tmp, "%02x", (uint8_t)u[k]);
                            if (cbuf_add(&b, tmp, 2)) goto oom;
                        }
                        if (cbuf_add(&b, s, n) || cbuf_add(&b, "]", 1)) goto oom;
                    }
                }
            }
        } else if (a & TA_BYTE) {
            // "<0xXX>": the byte value is the two hex digits at offset 3
            char c = 0;
            if (n >= 5) {
                char hx[3] = {s[3], s[4], 0};
                c = (char)strtol(hx, NULL, 16);
            }
            if (cbuf_add(&b, &c, 1)) goto oom;
        }
        t->piece_off[id] = (uint32_t)start;
        t->piece_len[id] = (uint32_t)(b.n - start);
    }
    if (cbuf_add(&b, "", 1)) goto oom;
    t->piece = b.v;
    return 0;
oom:
    free(b.v);
    return -1;
}

static int cmp_special(const void *pa, const void *pb, void *ud) {
    const st_tokenizer *t = ud;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    if (t->text_len[a] != t->text_len[b]) return t->text_len[a] > t->text_len[b] ? -1 : 1;
    return a < b ? -1 : a > b;
}

st_tokenizer *st_tokenizer_load(const gguf_ctx *ctx) {
    const char *fname = ctx_name(ctx);
    byte_table_init();
    st_tokenizer *t = calloc(1, sizeof *t);
    if (!t) { st_err("%s: out of memory", fname); return NULL; }
    t->bos = t->eos = t->eot = t->eom = t->unk = t->pad = t->sep = -1;
    char *model = NULL;
    bool bad;

    model = get_str(ctx, "tokenizer.ggml.model");
    if (!model) goto fail;
    if (!model[0]) { st_err("%s: metadata key 'tokenizer.ggml.model' is missing (no tokenizer in this file)", fname); goto fail; }
    t->pre = get_str(ctx, "tokenizer.ggml.pre");
    if (!t->pre) goto fail;

    const pre_def *pd = NULL;
    if (strcmp(model, "gpt2") == 0) {
        t->kind = ST_TOK_BPE;
        if (!t->pre[0]) {
            st_warn("%s: tokenizer.ggml.pre is missing; using the 'default' pre-tokenizer (output may be degraded)",
                    fname);
            pd = &k_pre[0];
        } else {
            for (size_t i = 0; i < sizeof k_pre / sizeof k_pre[0]; i++)
                if (strcmp(k_pre[i].name, t->pre) == 0) pd = &k_pre[i];
            if (!pd) {
                st_err("%s: metadata key 'tokenizer.ggml.pre' = '%s': unsupported pre-tokenizer", fname, t->pre);
                goto fail;
            }
        }
        t->ignore_merges = pd->ignore_merges;
        t->add_bos = pd->add_bos;
        t->add_eos = false;
        t->add_space_prefix = false;
    } else if (strcmp(model, "llama") == 0) {
        t->kind = ST_TOK_SPM;
        t->add_bos = true;
        t->add_eos = false;
        t->add_space_prefix = true;
    } else {
        st_err("%s: metadata key 'tokenizer.ggml.model' = '%s': unsupported tokenizer (supported: gpt2, llama)",
               fname, model);
        goto fail;
    }
    if (get_bool_opt(ctx, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix)) goto fail;

    // tokens
    const gguf_value *tokv = get_arr(ctx, "tokenizer.ggml.tokens", GGUF_VT_STRING, GGUF_VT_STRING, &bad);
    if (!tokv) {
        if (!bad) st_err("%s: metadata key 'tokenizer.ggml.tokens' is missing", fname);
        goto fail;
    }
    if (tokv->arr.n == 0 || tokv->arr.n > (1u << 30)) {
        st_err("%s: metadata key 'tokenizer.ggml.tokens': %llu tokens (expected 1 .. 2^30)", fname,
               (unsigned long long)tokv->arr.n);
        goto fail;
    }
    t->n_vocab = (int)tokv->arr.n;
    const int nv = t->n_vocab;
    {
        cbuf tb = {0};
        t->text_off = malloc((size_t)nv * sizeof(uint32_t));
        t->text_len = malloc((size_t)nv * sizeof(uint32_t));
        t->score = calloc((size_t)nv, sizeof(float));
        t->attr = malloc((size_t)nv);
        t->eog = calloc((size_t)nv, 1);
        if (!t->text_off || !t->text_len || !t->score || !t->attr || !t->eog) goto oom;
        for (int i = 0; i < nv; i++) {
            const gguf_str *s = &tokv->arr.items[i].str;
            char tmp[32];
            const char *p = s->ptr;
            // llama.cpp reads token strings as C strings: text after a NUL byte is lost (a token that is "\0"
            // becomes empty), and empty tokens are renamed so every id keeps a distinct text
            size_t n = strnlen(s->ptr, s->len);
            if (n == 0) {
                n = (size_t)snprintf(tmp, sizeof tmp, "[EMPTY_%d]", i);
                p = tmp;
            }
            if (tb.n + n + 1 > UINT32_MAX) { free(tb.v); st_err("%s: tokenizer.ggml.tokens: text too large", fname); goto fail; }
            t->text_off[i] = (uint32_t)tb.n;
            t->text_len[i] = (uint32_t)n;
            if (cbuf_add(&tb, p, n) || cbuf_add(&tb, "", 1)) { free(tb.v); goto oom; }
        }
        t->text = tb.v;
    }
    if (hmap_init(&t->vocab, (uint32_t)nv)) goto oom;
    for (int i = 0; i < nv; i++) vocab_insert(t, (uint32_t)i);

    // scores (float32 or int32) and token types
    const gguf_value *sc = get_arr(ctx, "tokenizer.ggml.scores", GGUF_VT_FLOAT32, GGUF_VT_INT32, &bad);
    if (bad) goto fail;
    if (sc) {
        if (sc->arr.n < (uint64_t)nv) {
            st_err("%s: metadata key 'tokenizer.ggml.scores': %llu values for %d tokens", fname,
                   (unsigned long long)sc->arr.n, nv);
            goto fail;
        }
        for (int i = 0; i < nv; i++) t->score[i] = (float)gguf_arr_f64(sc, (uint64_t)i);
    }
    const gguf_value *tt = get_arr(ctx, "tokenizer.ggml.token_type", GGUF_VT_INT32, GGUF_VT_INT32, &bad);
    if (bad) goto fail;
    if (tt && tt->arr.n < (uint64_t)nv) {
        st_err("%s: metadata key 'tokenizer.ggml.token_type': %llu values for %d tokens", fname,
               (unsigned long long)tt->arr.n, nv);
        goto fail;
    }
    for (int i = 0; i < nv; i++) {
        int64_t ty = tt ? gguf_arr_i64(tt, (uint64_t)i) : ST_TOKTYPE_NORMAL;
        static const uint8_t map[7] = {TA_UNDEFINED, TA_NORMAL, TA_UNKNOWN, TA_CONTROL, TA_USER_DEFINED, TA_UNUSED, TA_BYTE};
        t->attr[i] = (ty >= 0 && ty <= 6) ? map[ty] : TA_UNDEFINED;
    }

    // merges (BPE): "first second", split at the first space after position 0 (llama.cpp's word.find(' ', 1))
    if (t->kind == ST_TOK_BPE) {
        const gguf_value *mv = get_arr(ctx, "tokenizer.ggml.merges", GGUF_VT_STRING, GGUF_VT_STRING, &bad);
        if (!mv) {
            if (!bad) st_err("%s: metadata key 'tokenizer.ggml.merges' is missing (required for gpt2 BPE)", fname);
            goto fail;
        }
        if (mv->arr.n > (1u << 30)) { st_err("%s: tokenizer.ggml.merges: too many merges", fname); goto fail; }
        t->n_merges = (int)mv->arr.n;
        t->merges = calloc((size_t)t->n_merges + 1, sizeof *t->merges);
        cbuf mb = {0};
        if (!t->merges) goto oom;
        for (int i = 0; i < t->n_merges; i++) {
            const gguf_str *ms = &mv->arr.items[i].str;
            gguf_str s_[1] = {{ms->ptr, strnlen(ms->ptr, ms->len)}};  // C-string semantics, as for tokens
            const gguf_str *s = s_;
            size_t sp = 0;
            for (size_t k = 1; k < s->len; k++)
                if (s->ptr[k] == ' ') { sp = k; break; }
            if (mb.n + s->len > UINT32_MAX) { free(mb.v); st_err("%s: tokenizer.ggml.merges: too large", fname); goto fail; }
            tok_merge *g = &t->merges[i];
            if (sp) {  // without a space llama.cpp records ("", "") which never matches a real pair
                g->a_off = (uint32_t)mb.n;
                g->a_len = (uint32_t)sp;
                g->b_off = (uint32_t)(mb.n + sp + 1);
                g->b_len = (uint32_t)(s->len - sp - 1);
            }
            if (cbuf_add(&mb, s->ptr, s->len)) { free(mb.v); goto oom; }
        }
        if (cbuf_add(&mb, "", 1)) { free(mb.v); goto oom; }
        t->merge_text = mb.v;
        if (hmap_init(&t->merge_map, (uint32_t)t->n_merges)) goto oom;
        for (int i = 0; i < t->n_merges; i++)
            if (t->merges[i].a_len || t->merges[i].b_len) merge_insert(t, (uint32_t)i);
        if (compile_regexes(t, pd->rx, fname)) goto fail;
    }

    // special ids: model defaults, then metadata
    if (t->kind == ST_TOK_SPM) {
        t->bos = 1; t->eos = 2; t->unk = 0;
    } else {
        t->bos = 11; t->eos = 11;  // llama.cpp's defaults for gpt2 vocabularies
        if (pd->no_bos) t->bos = -1;
    }
    if (t->bos >= nv) t->bos = -1;
    if (t->eos >= nv) t->eos = -1;
    if (t->unk >= nv) t->unk = -1;
    int32_t fim_pad = -1, fim_rep = -1, fim_sep = -1;
    if (get_id_opt(ctx, "tokenizer.ggml.bos_token_id", nv, &t->bos) ||
        get_id_opt(ctx, "tokenizer.ggml.eos_token_id", nv, &t->eos) ||
        get_id_opt(ctx, "tokenizer.ggml.eot_token_id", nv, &t->eot) ||
        get_id_opt(ctx, "tokenizer.ggml.eom_token_id", nv, &t->eom) ||
        get_id_opt(ctx, "tokenizer.ggml.unknown_token_id", nv, &t->unk) ||
        get_id_opt(ctx, "tokenizer.ggml.seperator_token_id", nv, &t->sep) ||
        get_id_opt(ctx, "tokenizer.ggml.padding_token_id", nv, &t->pad) ||
        get_id_opt(ctx, "tokenizer.ggml.fim_pad_token_id", nv, &fim_pad) ||
        get_id_opt(ctx, "tokenizer.ggml.fim_rep_token_id", nv, &fim_rep) ||
        get_id_opt(ctx, "tokenizer.ggml.fim_sep_token_id", nv, &fim_sep))
        goto fail;
    if (get_bool_opt(ctx, "tokenizer.ggml.add_bos_token", &t->add_bos) ||
        get_bool_opt(ctx, "tokenizer.ggml.add_eos_token", &t->add_eos))
        goto fail;

    // Tokens recognised by their text (conversion scripts do not always record them): llama.cpp's lists.
    {
        static const char *const eot_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
            "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
            "<end_of_utterance>", NULL};
        static const char *const eom_names[] = {"<|eom_id|>", NULL};
        static const char *const fpad_names[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
        static const char *const frep_names[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
            "<reponame>", NULL};
        static const char *const fsep_names[] = {"<|file_sep|>", NULL};
        static const char *const fpre_names[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
            "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
        static const char *const fsuf_names[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
            "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
        static const char *const fmid_names[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
            "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>", NULL};
        // When several candidates exist llama.cpp picks one in hash-map order; we pick the first listed.
        if (t->eot < 0) { t->eot = find_first(t, eot_names); mark_control(t, t->eot); }
        if (t->eom < 0) { t->eom = find_first(t, eom_names); mark_control(t, t->eom); }
        mark_control(t, find_first(t, fpre_names));
        mark_control(t, find_first(t, fsuf_names));
        mark_control(t, find_first(t, fmid_names));
        if (fim_pad < 0) { fim_pad = find_first(t, fpad_names); mark_control(t, fim_pad); }
        if (fim_rep < 0) { fim_rep = find_first(t, frep_names); mark_control(t, fim_rep); }
        if (fim_sep < 0) { fim_sep = find_first(t, fsep_names); mark_control(t, fim_sep); }

        // control tokens named "unused" are unused
        for (int i = 0; i < nv; i++)
            if ((t->attr[i] & TA_CONTROL) && strstr(t->text + t->text_off[i], "unused")) t->attr[i] |= TA_UNUSED;

        // end of generation
        static const char *const eog_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
            "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>",
            "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
            "<｜end▁of▁sentence｜>", "[e~[", NULL};
        if (fim_pad >= 0) t->eog[fim_pad] = 1;
        if (fim_rep >= 0) t->eog[fim_rep] = 1;
        if (fim_sep >= 0) t->eog[fim_sep] = 1;
        for (int k = 0; eog_names[k]; k++) {
            int32_t id = vocab_find(t, eog_names[k], strlen(eog_names[k]));
            if (id >= 0) { t->eog[id] = 1; mark_control(t, id); }
        }
        // gpt-oss renders these
        static const char *const ud_names[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL};
        for (int k = 0; ud_names[k]; k++) {
            int32_t id = vocab_find(t, ud_names[k], strlen(ud_names[k]));
            if (id >= 0) t->attr[id] = TA_USER_DEFINED;
        }
        if (t->eos >= 0) t->eog[t->eos] = 1;
        if (t->eot >= 0) t->eog[t->eot] = 1;
        if (t->eom >= 0) t->eog[t->eom] = 1;
        // o200k_harmony / solar-open: "<|end|>" ends a message, not the generation
        int32_t end_id = vocab_find(t, "<|end|>", 7);
        int32_t ret_id = vocab_find(t, "<|return|>", 10), call_id = vocab_find(t, "<|call|>", 8);
        int32_t calls_id = vocab_find(t, "<|calls|>", 9), flush_id = vocab_find(t, "<|flush|>", 9);
        bool has_call = (call_id >= 0 && t->eog[call_id]) || (calls_id >= 0 && t->eog[calls_id]);
        if (end_id >= 0 && t->eog[end_id] && has_call &&
            ((ret_id >= 0 && t->eog[ret_id]) || (flush_id >= 0 && t->eog[flush_id]))) {
            t->eog[end_id] = 0;
            t->attr[end_id] = TA_USER_DEFINED;
        }
    }

    // tokens matched whole in text, longest first (ties by id so the order is deterministic)
    for (int i = 0; i < nv; i++)
        if (t->attr[i] & (TA_CONTROL | TA_USER_DEFINED | TA_UNKNOWN)) t->n_special++;
    t->special = malloc(((size_t)t->n_special + 1) * sizeof(int32_t));
    if (!t->special) goto oom;
    for (int i = 0, k = 0; i < nv; i++)
        if (t->attr[i] & (TA_CONTROL | TA_USER_DEFINED | TA_UNKNOWN)) t->special[k++] = i;
    qsort_r(t->special, (size_t)t->n_special, sizeof(int32_t), cmp_special, t);

    if (build_pieces(t)) goto oom;
    free(model);
    return t;
oom:
    st_err("%s: out of memory loading the tokenizer", fname);
fail:
    free(model);
    st_tokenizer_free(t);
    return NULL;
}

void st_tokenizer_free(st_tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n_regex; i++) pcre2_code_free((pcre2_code *)t->regex[i]);
    free(t->pre);
    free(t->text);
    free(t->text_off);
    free(t->text_len);
    free(t->score);
    free(t->attr);
    free(t->piece);
    free(t->piece_off);
    free(t->piece_len);
    free(t->vocab.slots);
    free(t->merge_text);
    free(t->merges);
    free(t->merge_map.slots);
    free(t->special);
    free(t->eog);
    free(t);
}

// ---- merging (shared by BPE and SPM) ------------------------------------------------------------------------
// Symbols form a linked list over one word; candidate pairs sit in a binary heap ordered by priority (best first,
// ties: leftmost first). A popped pair is applied only if both symbols still have the lengths they had when the
// pair was queued (lengths only grow, so this detects every stale entry). O(n log n) per word.

typedef struct sym {
    int32_t start, len;  // byte range in the word; len 0 = merged away
    int32_t prev, next;
} sym;

typedef struct pair {
    float prio;          // higher first: -rank for BPE, score for SPM
    int32_t left, right;
    int32_t llen, rlen;
} pair;

typedef struct work {
    sym *s;
    int ns, cap_s;
    pair *h;
    int nh, cap_h;
    cbuf word;           // the current word's bytes (BPE: byte-level encoded)
    ibuf *out;
    // BPE pre-tokenization scratch
    uint32_t *cps;       // decoded code points of the fragment
    size_t cap_cps;
    int32_t *seg;        // segment lengths in code points
    int nseg, cap_seg;
    int32_t *seg2;
    int cap_seg2;
    size_t *cp_off;      // [n_cps + 1] byte offset of each code point in `subj`
    size_t cap_off;
    cbuf subj;           // regex subject: valid UTF-8 of the fragment
    pcre2_match_data *md;
    pcre2_jit_stack *jit;
    pcre2_match_context *mctx;
} work;

static bool pair_better(const pair *a, const pair *b) {
    return a->prio > b->prio || (a->prio == b->prio && a->left < b->left);
}

static int heap_push(work *w, pair p) {
    if (w->nh == w->cap_h) {
        pair *nh = grow(w->h, &w->cap_h, sizeof *nh, 64);
        if (!nh) return -1;
        w->h = nh;
    }
    int i = w->nh++;
    while (i > 0) {
        int par = (i - 1) / 2;
        if (!pair_better(&p, &w->h[par])) break;
        w->h[i] = w->h[par];
        i = par;
    }
    w->h[i] = p;
    return 0;
}

static pair heap_pop(work *w) {
    pair top = w->h[0];
    pair last = w->h[--w->nh];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, best = i;
        const pair *bp = &last;
        if (l < w->nh && pair_better(&w->h[l], bp)) { best = l; bp = &w->h[l]; }
        if (r < w->nh && pair_better(&w->h[r], bp)) { best = r; }
        if (best == i) break;
        w->h[i] = w->h[best];
        i = best;
    }
    if (w->nh > 0) w->h[i] = last;
    return top;
}

static int syms_reserve(work *w, int n) {
    if (n <= w->cap_s) return 0;
    int nc = w->cap_s ? w->cap_s : 64;
    while (nc < n) nc *= 2;
    sym *ns = realloc(w->s, (size_t)nc * sizeof *ns);
    if (!ns) return -1;
    w->s = ns;
    w->cap_s = nc;
    return 0;
}

// Queues the pair (l, r) if it can merge.
static int try_pair(const st_tokenizer *t, work *w, int l, int r) {
    if (l < 0 || r < 0) return 0;
    const char *wd = w->word.v;
    const sym *a = &w->s[l], *b = &w->s[r];
    pair p = {0, l, r, a->len, b->len};
    if (t->kind == ST_TOK_BPE) {
        int rank = merge_find(t, wd + a->start, (size_t)a->len, wd + b->start, (size_t)b->len);
        if (rank < 0) return 0;
        p.prio = -(float)rank;
    } else {
        int32_t id = vocab_find(t, wd + a->start, (size_t)(a->len + b->len));
        if (id < 0) return 0;
        p.prio = t->score[id];
    }
    return heap_push(w, p);
}

// Splits w->word into characters (by UTF-8 lead byte) and merges until no pair applies.
static int merge_word(const st_tokenizer *t, work *w) {
    int n = (int)w->word.n;
    w->ns = 0;
    w->nh = 0;
    if (syms_reserve(w, n)) return -1;
    for (int i = 0; i < n;) {
        int cl = utf8_len_lead((uint8_t)w->word.v[i]);
        if (cl > n - i) cl = n - i;
        sym *s = &w->s[w->ns];
        s->start = i;
        s->len = cl;
        s->prev = w->ns - 1;
        s->next = i + cl < n ? w->ns + 1 : -1;
        w->ns++;
        i += cl;
    }
    for (int i = 1; i < w->ns; i++)
        if (try_pair(t, w, i - 1, i)) return -1;
    while (w->nh > 0) {
        pair p = heap_pop(w);
        sym *a = &w->s[p.left], *b = &w->s[p.right];
        if (a->len != p.llen || b->len != p.rlen || a->len == 0 || b->len == 0) continue;
        a->len += b->len;
        b->len = 0;
        a->next = b->next;
        if (b->next >= 0) w->s[b->next].prev = p.left;
        if (try_pair(t, w, a->prev, p.left) || try_pair(t, w, p.left, a->next)) return -1;
    }
    return 0;
}

// ---- BPE ----------------------------------------------------------------------------------------------------

static int emit_bpe_word(const st_tokenizer *t, work *w) {
    if (w->word.n == 0) return 0;
    if (t->ignore_merges) {
        int32_t id = vocab_find(t, w->word.v, w->word.n);
        if (id >= 0) return ibuf_push(w->out, id);
    }
    if (merge_word(t, w)) return -1;
    for (int i = 0; i >= 0 && w->ns > 0; i = w->s[i].next) {
        const sym *s = &w->s[i];
        if (s->len == 0) continue;
        int32_t id = vocab_find(t, w->word.v + s->start, (size_t)s->len);
        if (id >= 0) {
            if (ibuf_push(w->out, id)) return -1;
            continue;
        }
        // no token for the symbol: llama.cpp tries each byte of it alone and drops what is not a token
        for (int k = 0; k < s->len; k++) {
            int32_t bid = vocab_find(t, w->word.v + s->start + k, 1);
            if (bid >= 0 && ibuf_push(w->out, bid)) return -1;
        }
    }
    return 0;
}

static int seg_push(int32_t **v, int *n, int *cap, int32_t x) {
    if (*n == *cap) {
        int32_t *nv = grow(*v, cap, sizeof *nv, 64);
        if (!nv) return -1;
        *v = nv;
    }
    (*v)[(*n)++] = x;
    return 0;
}

static int tokenize_bpe(const st_tokenizer *t, work *w, const char *text, size_t len) {
    // 1. code points (lenient decoding) and a valid UTF-8 subject for PCRE2
    if (len + 1 > w->cap_cps) {
        size_t nc = len + 1;
        uint32_t *nv = realloc(w->cps, nc * sizeof *nv);
        size_t *no = realloc(w->cp_off, (nc + 1) * sizeof *no);
        if (nv) w->cps = nv;
        if (no) w->cp_off = no;
        if (!nv || !no) return -1;
        w->cap_cps = nc;
    }
    size_t ncp = 0;
    w->subj.n = 0;
    if (cbuf_reserve(&w->subj, len * 3 + 4)) return -1;  // U+FFFD (3 bytes) per bad byte at most
    for (size_t pos = 0; pos < len;) {
        uint32_t cp = utf8_get_lenient((const uint8_t *)text, len, &pos);
        w->cps[ncp] = cp;
        w->cp_off[ncp] = w->subj.n;
        // Surrogates cannot appear in a UTF-8 subject; a private-use code point has the same regex classes
        // (not a letter, number, mark, punctuation, symbol or space) for every pattern here.
        uint32_t rc = (cp >= 0xD800 && cp <= 0xDFFF) ? 0xE000 : cp;
        w->subj.n += (size_t)utf8_put(rc, w->subj.v + w->subj.n);
        ncp++;
    }
    w->cp_off[ncp] = w->subj.n;

    // 2. regex splits, each applied inside every current segment
    w->nseg = 0;
    if (ncp > 0 && seg_push(&w->seg, &w->nseg, &w->cap_seg, (int32_t)ncp)) return -1;
    for (int r = 0; r < t->n_regex; r++) {
        const pcre2_code *re = (const pcre2_code *)t->regex[r];
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        if (!md) return -1;
        int n2 = 0;
        size_t cs = 0;  // code point index of the segment start
        for (int si = 0; si < w->nseg; si++) {
            size_t ce = cs + (size_t)w->seg[si];
            const char *sub = w->subj.v + w->cp_off[cs];
            size_t slen = w->cp_off[ce] - w->cp_off[cs];
            size_t at = 0, prev = 0;  // byte offsets within the segment
            size_t cp_prev = cs;
            // byte offset within segment -> code point index: walk forward (offsets are increasing)
            size_t cp_walk = cs;
            while (at < slen) {
                int rc = pcre2_match(re, (PCRE2_SPTR)sub, slen, at, PCRE2_NO_UTF_CHECK, md, w->mctx);
                if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !w->jit) {
                    w->jit = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, NULL);
                    w->mctx = pcre2_match_context_create(NULL);
                    if (!w->jit || !w->mctx) { pcre2_match_data_free(md); return -1; }
                    pcre2_jit_stack_assign(w->mctx, NULL, w->jit);
                    continue;
                }
                if (rc == PCRE2_ERROR_NOMATCH) break;
                if (rc < 0) {
                    PCRE2_UCHAR msg[128];
                    pcre2_get_error_message(rc, msg, sizeof msg);
                    st_err("tokenizer: pre-tokenizer regex %d failed: %s", r, (const char *)msg);
                    pcre2_match_data_free(md);
                    return -2;
                }
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                size_t ms = ov[0], me = ov[1];
                if (me == ms) {  // empty match: no piece; move on by one code point
                    at = me + 1;
                    while (at < slen && ((uint8_t)sub[at] & 0xC0) == 0x80) at++;
                    continue;
                }
                // convert byte offsets to code point indices
                while (w->cp_off[cp_walk] - w->cp_off[cs] < ms) cp_walk++;
                size_t cms = cp_walk;
                while (w->cp_off[cp_walk] - w->cp_off[cs] < me) cp_walk++;
                size_t cme = cp_walk;
                if (ms > prev && seg_push(&w->seg2, &n2, &w->cap_seg2, (int32_t)(cms - cp_prev))) goto oom;
                if (seg_push(&w->seg2, &n2, &w->cap_seg2, (int32_t)(cme - cms))) goto oom;
                prev = me;
                cp_prev = cme;
                at = me;
            }
            if (cp_prev < ce && seg_push(&w->seg2, &n2, &w->cap_seg2, (int32_t)(ce - cp_prev))) goto oom;
            cs = ce;
            continue;
        oom:
            pcre2_match_data_free(md);
            return -1;
        }
        pcre2_match_data_free(md);
        // swap segment lists
        int32_t *tv = w->seg; w->seg = w->seg2; w->seg2 = tv;
        int tc = w->cap_seg; w->cap_seg = w->cap_seg2; w->cap_seg2 = tc;
        w->nseg = n2;
    }

    // 3. each segment: re-encode its code points, map bytes to the byte-level alphabet, merge, emit
    size_t cs = 0;
    for (int si = 0; si < w->nseg; si++) {
        size_t ce = cs + (size_t)w->seg[si];
        w->word.n = 0;
        for (size_t i = cs; i < ce; i++) {
            char u[4];
            int un = utf8_put(w->cps[i], u);
            for (int k = 0; k < un; k++) {
                char e[4];
                int en = utf8_put(g_byte_cp[(uint8_t)u[k]], e);
                if (cbuf_add(&w->word, e, (size_t)en)) return -1;
            }
        }
        if (emit_bpe_word(t, w)) return -1;
        cs = ce;
    }
    return 0;
}

// ---- SPM ----------------------------------------------------------------------------------------------------

static int spm_byte(const st_tokenizer *t, work *w, uint8_t c) {
    char hx[8];
    snprintf(hx, sizeof hx, "<0x%02X>", c);
    int32_t id = vocab_find(t, hx, 6);
    if (id < 0) id = vocab_find(t, (const char *)&c, 1);
    if (id < 0) id = t->unk;  // llama.cpp aborts here; an unknown token is the graceful equivalent
    return id >= 0 ? ibuf_push(w->out, id) : 0;
}

// text: one fragment, spaces already escaped to U+2581 (and the prefix added).
static int tokenize_spm(const st_tokenizer *t, work *w) {
    if (w->word.n == 0) return 0;
    if (merge_word(t, w)) return -1;
    for (int i = 0; i >= 0; i = w->s[i].next) {
        const sym *s = &w->s[i];
        if (s->len == 0) continue;
        int32_t id = vocab_find(t, w->word.v + s->start, (size_t)s->len);
        if (id >= 0) {
            if (ibuf_push(w->out, id)) return -1;
            continue;
        }
        // Every merged symbol is a token, so only single characters get here: byte fallback.
        for (int k = 0; k < s->len; k++)
            if (spm_byte(t, w, (uint8_t)w->word.v[s->start + k])) return -1;
    }
    return 0;
}

// ---- special-token partition and the public entry point ----------------------------------------------------

typedef struct frag {
    size_t off, len;  // raw text range when token < 0
    int32_t token;    // >= 0: a special token
} frag;

typedef struct fvec {
    frag *v;
    int n, cap;
} fvec;

static int fvec_push(fvec *f, frag x) {
    if (f->n == f->cap) {
        frag *nv = grow(f->v, &f->cap, sizeof *nv, 16);
        if (!nv) return -1;
        f->v = nv;
    }
    f->v[f->n++] = x;
    return 0;
}

// Splits raw-text fragments at every occurrence of each special token, longest tokens first (llama.cpp
// tokenizer_st_partition). Control/unknown tokens take part only with parse_special; user-defined ones always.
static int partition(const st_tokenizer *t, const char *text, size_t len, bool parse_special, fvec *a, fvec *b) {
    a->n = 0;
    if (len > 0 && fvec_push(a, (frag){0, len, -1})) return -1;
    for (int k = 0; k < t->n_special; k++) {
        int32_t id = t->special[k];
        if (!parse_special && (t->attr[id] & (TA_CONTROL | TA_UNKNOWN))) continue;
        const char *tx = t->text + t->text_off[id];
        size_t tn = t->text_len[id];
        bool any = false;
        for (int i = 0; i < a->n && !any; i++)
            if (a->v[i].token < 0 && a->v[i].len >= tn && memmem(text + a->v[i].off, a->v[i].len, tx, tn)) any = true;
        if (!any) continue;
        b->n = 0;
        for (int i = 0; i < a->n; i++) {
            frag f = a->v[i];
            if (f.token >= 0) {
                if (fvec_push(b, f)) return -1;
                continue;
            }
            size_t p = f.off, end = f.off + f.len;
            while (p < end) {
                const char *m = end - p >= tn ? memmem(text + p, end - p, tx, tn) : NULL;
                if (!m) {
                    if (fvec_push(b, (frag){p, end - p, -1})) return -1;
                    break;
                }
                size_t mo = (size_t)(m - text);
                if (mo > p && fvec_push(b, (frag){p, mo - p, -1})) return -1;
                if (fvec_push(b, (frag){0, 0, id})) return -1;
                p = mo + tn;
            }
        }
        fvec tmp = *a; *a = *b; *b = tmp;
    }
    return 0;
}

int st_tokenize(const st_tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                int32_t *out, int max_out) {
    ibuf res = {0};
    work w = {0};
    fvec fa = {0}, fb = {0};
    int ret = -1;
    w.out = &res;
    if (!text) len = 0;

    if (partition(t, text, len, parse_special, &fa, &fb)) goto oom;
    if (add_special && t->add_bos && t->bos >= 0 && ibuf_push(&res, t->bos)) goto oom;
    bool prev_special = true;  // SPM: a space prefix goes before text that starts the input or follows a token
    for (int i = 0; i < fa.n; i++) {
        const frag *f = &fa.v[i];
        if (f->token >= 0) {
            if (ibuf_push(&res, f->token)) goto oom;
            prev_special = true;
            continue;
        }
        if (t->kind == ST_TOK_BPE) {
            int rc = tokenize_bpe(t, &w, text + f->off, f->len);
            if (rc == -2) goto done;
            if (rc) goto oom;
        } else {
            w.word.n = 0;
            if (t->add_space_prefix && prev_special && cbuf_add(&w.word, "\xe2\x96\x81", 3)) goto oom;
            for (size_t k = 0; k < f->len; k++) {
                char c = text[f->off + k];
                if (c == ' ' ? cbuf_add(&w.word, "\xe2\x96\x81", 3) : cbuf_add(&w.word, &c, 1)) goto oom;
            }
            if (tokenize_spm(t, &w)) goto oom;
            prev_special = false;
        }
    }
    if (add_special && t->add_eos && t->eos >= 0 && ibuf_push(&res, t->eos)) goto oom;

    if (res.n > max_out) {
        ret = -res.n;
    } else {
        if (res.n) memcpy(out, res.v, (size_t)res.n * sizeof(int32_t));
        ret = res.n;
    }
    goto done;
oom:
    st_err("tokenizer: out of memory tokenizing %zu bytes", len);
    ret = INT32_MIN;  // distinguishable from -needed; callers treat any negative as failure
done:
    free(res.v);
    free(w.s);
    free(w.h);
    free(w.word.v);
    free(w.cps);
    free(w.seg);
    free(w.seg2);
    free(w.cp_off);
    free(w.subj.v);
    if (w.mctx) pcre2_match_context_free(w.mctx);
    if (w.jit) pcre2_jit_stack_free(w.jit);
    free(fa.v);
    free(fb.v);
    return ret;
}

// ---- accessors ----------------------------------------------------------------------------------------------

static bool valid_id(const st_tokenizer *t, int32_t id) { return id >= 0 && id < t->n_vocab; }

const char *st_token_piece_ref(const st_tokenizer *t, int32_t id, bool special, size_t *len) {
    if (!valid_id(t, id)) { *len = 0; return NULL; }
    if (!special && (t->attr[id] & (TA_UNKNOWN | TA_CONTROL))) { *len = 0; return ""; }
    *len = t->piece_len[id];
    return t->piece + t->piece_off[id];
}

int st_token_to_piece(const st_tokenizer *t, int32_t id, char *buf, int buflen, bool special) {
    size_t n;
    const char *p = st_token_piece_ref(t, id, special, &n);
    if (!p) return 0;
    if ((size_t)buflen < n) return -(int)n;
    if (n) memcpy(buf, p, n);
    return (int)n;
}

const char *st_token_text(const st_tokenizer *t, int32_t id) {
    return valid_id(t, id) ? t->text + t->text_off[id] : NULL;
}

int st_tokenizer_n_vocab(const st_tokenizer *t) { return t->n_vocab; }
st_tok_kind st_tokenizer_kind(const st_tokenizer *t) { return t->kind; }
const char *st_tokenizer_pre(const st_tokenizer *t) { return t->kind == ST_TOK_BPE ? t->pre : ""; }
int32_t st_token_bos(const st_tokenizer *t) { return t->bos; }
int32_t st_token_eos(const st_tokenizer *t) { return t->eos; }
int32_t st_token_eot(const st_tokenizer *t) { return t->eot; }
int32_t st_token_pad(const st_tokenizer *t) { return t->pad; }
int32_t st_token_unk(const st_tokenizer *t) { return t->unk; }
bool st_tokenizer_adds_bos(const st_tokenizer *t) { return t->add_bos && t->bos >= 0; }
bool st_tokenizer_adds_eos(const st_tokenizer *t) { return t->add_eos && t->eos >= 0; }
bool st_token_is_eog(const st_tokenizer *t, int32_t id) { return valid_id(t, id) && t->eog[id]; }
bool st_token_is_control(const st_tokenizer *t, int32_t id) {
    return valid_id(t, id) && (t->attr[id] & (TA_CONTROL | TA_UNKNOWN));
}

st_token_type st_token_get_type(const st_tokenizer *t, int32_t id) {
    if (!valid_id(t, id)) return ST_TOKTYPE_UNDEFINED;
    uint8_t a = t->attr[id];
    if (a & TA_BYTE) return ST_TOKTYPE_BYTE;
    if (a & TA_UNUSED) return ST_TOKTYPE_UNUSED;
    if (a & TA_CONTROL) return ST_TOKTYPE_CONTROL;
    if (a & TA_USER_DEFINED) return ST_TOKTYPE_USER_DEFINED;
    if (a & TA_UNKNOWN) return ST_TOKTYPE_UNKNOWN;
    if (a & TA_NORMAL) return ST_TOKTYPE_NORMAL;
    return ST_TOKTYPE_UNDEFINED;
}
