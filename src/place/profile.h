// Routing profiles: how often each (layer, expert) was selected over a set of prompts (`strata profile`), used by
// the planner to pick the expert cache's initial contents (hottest first).
//
// File: JSON (jansson, as the server uses)
//   {"format": "strata-profile", "version": 1, "model": "path/at/recording.gguf", "fingerprint": "0x<16 hex>",
//    "n_layer": L, "n_expert": E, "n_expert_used": K, "n_tokens": N, "counts": [[c_0_0, ..., c_0_E-1], ...]}
// counts[l][e] = tokens whose top-K at layer l included expert e; each row sums to N * K.
#ifndef STRATA_PLACE_PROFILE_H
#define STRATA_PLACE_PROFILE_H

#include <stdint.h>

#include "engine/model.h"
#include "place/plan.h"

#ifdef __cplusplus
extern "C" {
#endif

// An all-zero profile shaped for the model (fingerprint set). -1 for dense models.
int st_profile_init(st_profile *p, const st_model *m);
void st_profile_free(st_profile *p);
// Adds a session's counters ([n_layer][n_expert] uint32, see st_session.route_counts) and the tokens they cover.
void st_profile_add(st_profile *p, const uint32_t *counts, uint64_t n_tokens);

// Writes the JSON file. `model_path` is recorded for people reading it. 0 or -1.
int st_profile_write(const st_profile *p, const char *path, const char *model_path, uint32_t n_expert_used);
// Reads and validates a file; with m non-NULL also checks it was recorded on this model (shape and fingerprint).
// -1 with a message naming the file and the field.
int st_profile_read(st_profile *p, const char *path, const st_model *m);

#ifdef __cplusplus
}
#endif

#endif
