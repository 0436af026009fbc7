// Engine internals for Strata's own tools (strata bench, strata info --plan later); not part of strata.h.
#ifndef STRATA_ENGINE_INTERNAL_H
#define STRATA_ENGINE_INTERNAL_H

#include "engine/model.h"
#include "strata.h"

// The loaded model behind an engine (weights, hparams, the GGUF context).
const st_model *strata_engine_model(const strata_engine *e);

#endif
