// Opt-in measurement for hybrid placement (docs/HYBRID.md): how well can layer l+1's expert choice be predicted
// while layer l still computes, so that its missing experts could be copied host -> VRAM during layer l?
// STRATA_ROUTE_PREDICT=1 (=2: also per layer) makes every CPU session score, on one-token decode steps, layer l+1's
// router applied to three early hidden states against the experts layer l+1 actually selects, plus two baselines
// (random k/E, the previous token's experts), and print the table to stderr when the session is freed.
// Unset, st_route_pred_new returns NULL and the forward pass pays one pointer test per layer.
#ifndef STRATA_ENGINE_ROUTE_PREDICT_H
#define STRATA_ENGINE_ROUTE_PREDICT_H

#include <stdint.h>

#include "engine/model.h"

struct st_session;
typedef struct st_route_pred st_route_pred;

// NULL when STRATA_ROUTE_PREDICT is unset or 0, or the model has no experts (or on out of memory: a warning).
st_route_pred *st_route_pred_new(const st_model *m);
// After layer `layer`'s attention and its ffn_norm (s->x: residual after attention, s->xn: the MoE input), for a
// chunk of n tokens: predicts layer + 1 from candidates (a) and (b) when n == 1.
void st_route_pred_after_attn(st_route_pred *rp, struct st_session *s, uint32_t layer, int64_t n);
// After layer `layer`'s MoE output is added (s->x: end of the layer; s->sel_expert: its choice): scores the
// predictions made for this layer, updates the previous-token history, predicts layer + 1 from candidate (c).
void st_route_pred_after_moe(st_route_pred *rp, struct st_session *s, uint32_t layer, int64_t n);
// Prints the table (if any step was scored) and frees.
void st_route_pred_free(st_route_pred *rp);

#endif
