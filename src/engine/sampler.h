// Token sampling from logits: penalties, then greedy or temperature with top-k / top-p / min-p, seeded.
// Order (as llama.cpp's common sampler chain): penalties -> top-k -> top-p -> min-p -> temperature -> draw.
#ifndef STRATA_ENGINE_SAMPLER_H
#define STRATA_ENGINE_SAMPLER_H

#include <stdint.h>

#include "strata.h"
#include "util/rng.h"

typedef strata_sampler_params st_sampler_params;  // the public struct: one definition of the knobs


typedef struct st_sampler {
    st_sampler_params p;
    st_rng rng;
    int32_t *history;     // [cap] recent token ids, ring buffer for penalties
    int32_t n_history, cap, head;
    // scratch, [n_vocab] each, allocated on first use
    int32_t n_vocab;
    float *work_logit;
    int32_t *work_id;
} st_sampler;

int st_sampler_init(st_sampler *s, const st_sampler_params *p);
// Whether p sets any penalty (repeat, presence, frequency): the device sampler has none.
int st_sampler_has_penalties(const st_sampler_params *p);
void st_sampler_free(st_sampler *s);
// Remembers a token (prompt or generated) for the penalties.
void st_sampler_accept(st_sampler *s, int32_t token);
// Picks the next token from logits[n_vocab] (logits are not modified). Returns the token id or -1 on error.
int32_t st_sampler_sample(st_sampler *s, const float *logits, int32_t n_vocab);

#endif
