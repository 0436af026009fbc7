// Tokenizers read from GGUF metadata (tokenizer.ggml.*): GPT-2 style byte-level BPE ("gpt2") with the
// pre-tokenizer regex selected by tokenizer.ggml.pre, and SentencePiece-style score merging ("llama") with byte
// fallback. Output ids match llama.cpp's llama_tokenize for the same file (tests/tokenizer checks this).
//
// A loaded tokenizer is immutable: st_tokenize and st_token_to_piece may be called from several threads at once.
#ifndef STRATA_TOKENIZER_TOKENIZER_H
#define STRATA_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gguf/gguf.h"

typedef struct st_tokenizer st_tokenizer;

typedef enum st_tok_kind {
    ST_TOK_BPE = 0,  // tokenizer.ggml.model == "gpt2": byte-level BPE, merges by rank
    ST_TOK_SPM = 1,  // tokenizer.ggml.model == "llama": SentencePiece pieces merged by score, <0xXX> byte fallback
} st_tok_kind;

// tokenizer.ggml.token_type values (a GGUF format fact).
typedef enum st_token_type {
    ST_TOKTYPE_UNDEFINED = 0,
    ST_TOKTYPE_NORMAL = 1,
    ST_TOKTYPE_UNKNOWN = 2,
    ST_TOKTYPE_CONTROL = 3,
    ST_TOKTYPE_USER_DEFINED = 4,
    ST_TOKTYPE_UNUSED = 5,
    ST_TOKTYPE_BYTE = 6,
} st_token_type;

// Loads the tokenizer from ctx's metadata. Everything needed is copied, so ctx may be closed afterwards.
// Returns NULL with st_errmsg naming the key on missing/ill-typed metadata or an unsupported model/pre.
st_tokenizer *st_tokenizer_load(const gguf_ctx *ctx);
void st_tokenizer_free(st_tokenizer *tok);

// Tokenizes text[0..len) (any bytes; invalid UTF-8 is handled like llama.cpp: each bad byte acts as U+FFFD for
// BPE, raw byte tokens for SPM). add_special: add BOS/EOS as the metadata says (tokenizer.ggml.add_bos_token /
// add_eos_token, defaults per model type). parse_special: control tokens written in the text (e.g. "<|im_end|>")
// become their ids; user-defined tokens are always matched whole. Returns the number of ids written, or
// -(number needed) when max_out is too small (nothing meaningful is written then), or INT32_MIN on allocation
// failure (st_errmsg).
int st_tokenize(const st_tokenizer *tok, const char *text, size_t len, bool add_special, bool parse_special,
                int32_t *out, int max_out);

// The bytes a token stands for (byte-level BPE decoded, U+2581 -> space for SPM, <0xXX> -> one byte).
// Control/unknown tokens give "" unless special is set (then their text, e.g. "<|im_end|>").
// Returns the length written, or -(length needed) when buflen is too small; 0 for an out-of-range id.
int st_token_to_piece(const st_tokenizer *tok, int32_t id, char *buf, int buflen, bool special);
// The same piece without copying (valid while tok lives); NULL for an out-of-range id.
const char *st_token_piece_ref(const st_tokenizer *tok, int32_t id, bool special, size_t *len);
// The raw vocabulary string of a token (as stored in tokenizer.ggml.tokens), NUL-terminated.
const char *st_token_text(const st_tokenizer *tok, int32_t id);

int st_tokenizer_n_vocab(const st_tokenizer *tok);
st_tok_kind st_tokenizer_kind(const st_tokenizer *tok);
const char *st_tokenizer_pre(const st_tokenizer *tok);  // tokenizer.ggml.pre as loaded ("" for SPM)
// Special ids, -1 when the model has none.
int32_t st_token_bos(const st_tokenizer *tok);
int32_t st_token_eos(const st_tokenizer *tok);
int32_t st_token_eot(const st_tokenizer *tok);
int32_t st_token_pad(const st_tokenizer *tok);
int32_t st_token_unk(const st_tokenizer *tok);
bool st_tokenizer_adds_bos(const st_tokenizer *tok);
bool st_tokenizer_adds_eos(const st_tokenizer *tok);
// End of generation: EOS, EOT, EOM and the end-of-turn-looking control tokens (<|im_end|>, <|eot_id|>, ...).
bool st_token_is_eog(const st_tokenizer *tok, int32_t id);
// Control or unknown token (rendered as "" unless special).
bool st_token_is_control(const st_tokenizer *tok, int32_t id);
st_token_type st_token_get_type(const st_tokenizer *tok, int32_t id);

// ---- streaming detokenization ---------------------------------------------------------------------------------
//
// Turns token ids into text one id at a time, returning only complete, valid UTF-8: a character split across
// tokens (byte-fallback or byte-level pieces) is held back until its last byte arrives. Bytes that can never form
// a valid character are replaced by U+FFFD, so the output is always valid UTF-8.

typedef struct st_detok_stream st_detok_stream;

enum {
    ST_DETOK_SPECIAL = 1,      // render control tokens' text instead of ""
    ST_DETOK_STRIP_SPACE = 2,  // drop the space that add_space_prefix (SPM) put before the first text; use when
                               // detokenizing a whole tokenized text, not when streaming a continuation
};

st_detok_stream *st_detok_stream_new(const st_tokenizer *tok, unsigned flags);
void st_detok_stream_free(st_detok_stream *s);
void st_detok_stream_reset(st_detok_stream *s);
// Feeds one id. Returns the text that is now complete (NUL-terminated, *len bytes, possibly ""); the pointer
// stays valid until the next call on s. Returns NULL only on allocation failure.
const char *st_detok_stream_push(st_detok_stream *s, int32_t id, size_t *len);
// Ends the stream: an incomplete tail becomes U+FFFD. Resets s for reuse.
const char *st_detok_stream_flush(st_detok_stream *s, size_t *len);

// Whole-sequence convenience built on the stream: writes valid UTF-8 to buf (NUL-terminated when it fits).
// Returns the length, or -(length needed) when buflen is too small (needs length + 1 for the NUL).
int st_detokenize(const st_tokenizer *tok, const int32_t *ids, int n, char *buf, int buflen, unsigned flags);

#endif
