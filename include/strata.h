// Strata public API: an engine (a loaded, immutable model) and sessions (one timeline each, owning its KV cache).
// The CLI, the server and the benchmarks are users of this header only.
#ifndef STRATA_H
#define STRATA_H

#ifdef __cplusplus
extern "C" {
#endif

// "0.1.0"
const char *strata_version(void);

#ifdef __cplusplus
}
#endif

#endif
