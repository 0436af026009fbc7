// make-model: writes a GGUF with a real model's shape, a llama.cpp-style quantization mix and deterministic random
// weights, so the engine can be tested and benchmarked at real sizes without downloading weights.
#ifndef STRATA_MODEL_MAKE_MODEL_H
#define STRATA_MODEL_MAKE_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "gguf/gguf.h"
#include "model/arch.h"

typedef struct st_preset {
    const char *name;  // "qwen3-30b-a3b"
    const char *desc;  // one line for --help
    st_hparams hp;     // n_vocab is the preset's; --vocab-from replaces it
} st_preset;

int st_preset_count(void);
const st_preset *st_preset_at(int i);
const st_preset *st_preset_find(const char *name);

typedef struct st_make_opts {
    st_hparams hp;           // arch and dims (st_hparams_defaults is applied by st_make_model)
    int ftype;               // st_ftype mix
    uint64_t seed;
    const char *vocab_from;  // GGUF to copy tokenizer.* from, or NULL for the synthetic byte-level BPE vocab
    float router_skew;       // 0: experts equally popular; larger: a few hot experts per layer (see make_model.c)
    int n_threads;           // <= 0: all CPUs; the output does not depend on it
    const char *out_path;
    const char *label;       // general.name ("strata synthetic <label>"), e.g. the preset name; may be NULL
    bool quiet;              // no progress / summary on stderr
} st_make_opts;

// Writes the model. Returns 0 or -1 with st_errmsg.
int st_make_model(const st_make_opts *o);

// Adds a synthetic GPT-2-style byte-level BPE vocabulary of exactly n_vocab tokens (>= 300) to `w`: the 256 byte
// tokens, merged 2- and 3-byte tokens with their merges, and ChatML special tokens (<|endoftext|>, <|im_start|>,
// <|im_end|>) at the end, plus a ChatML chat template. llama.cpp loads it as tokenizer model "gpt2", pre "qwen2".
int st_synth_vocab(gguf_writer *w, uint32_t n_vocab);

// Fast approximately normal value (Irwin-Hall sum of four uniforms, variance 1, |x| < 3.47) from one draw.
struct st_rng;
float st_fast_normal(struct st_rng *r);

#endif
