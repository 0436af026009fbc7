// Private structures shared by the tokenizer's source files.
#ifndef STRATA_TOKENIZER_TOK_INTERNAL_H
#define STRATA_TOKENIZER_TOK_INTERNAL_H

#include <stdint.h>

#include "tokenizer/tokenizer.h"

// Token attribute bits (llama.cpp's llama_token_attr values, so flag logic reads the same).
enum {
    TA_UNDEFINED = 0,
    TA_UNKNOWN = 1 << 0,
    TA_UNUSED = 1 << 1,
    TA_NORMAL = 1 << 2,
    TA_CONTROL = 1 << 3,
    TA_USER_DEFINED = 1 << 4,
    TA_BYTE = 1 << 5,
};

// Open-addressing hash from a byte string to an int32 (token id or merge rank).
typedef struct tok_hmap {
    uint32_t cap;        // power of two, >= 2 * count
    uint32_t count;
    uint32_t *slots;     // [cap] entry index + 1, 0 = empty
} tok_hmap;

// A merge "first second" (strings in encoded/vocabulary form) with its rank = position in tokenizer.ggml.merges.
typedef struct tok_merge {
    uint32_t a_off, a_len;  // into st_tokenizer.merge_text
    uint32_t b_off, b_len;
} tok_merge;

typedef struct pcre2_real_code_8 tok_re;

struct st_tokenizer {
    st_tok_kind kind;
    char *pre;                  // tokenizer.ggml.pre ("" if absent)
    int n_vocab;
    char *text;                 // all token strings, each NUL-terminated
    uint32_t *text_off;         // [n_vocab] offset of token i in text
    uint32_t *text_len;         // [n_vocab]
    float *score;               // [n_vocab] tokenizer.ggml.scores (0 if absent)
    uint8_t *attr;              // [n_vocab] TA_* bits
    char *piece;                // decoded pieces (special=true form), concatenated
    uint32_t *piece_off;        // [n_vocab]
    uint32_t *piece_len;        // [n_vocab]
    tok_hmap vocab;             // text -> id (later duplicates win, as in llama.cpp)

    int n_merges;
    char *merge_text;           // merge halves, concatenated
    tok_merge *merges;          // [n_merges]
    tok_hmap merge_map;         // (first, second) -> rank

    int32_t *special;           // [n_special] ids matched whole in text, longest text first
    int n_special;
    uint8_t *eog;               // [n_vocab] 1 = end of generation

    int32_t bos, eos, eot, eom, unk, pad, sep;
    bool add_bos, add_eos, add_space_prefix;
    bool ignore_merges;         // a pre-token that is itself a token is taken whole (llama-3 style)
    int n_regex;
    tok_re *regex[8];           // compiled pre-tokenizer splits, applied in order
};

#endif
