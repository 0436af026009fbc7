// Per-layer activation dumps for backend parity diagnosis (STRATA_DUMP_ACT=DIR): each engine appends, for every
// evaluated chunk, the residual stream after each layer's attention ('a') and after its FFN ('f') to
// DIR/<backend>.act, so that tests/gpu/act_diff.py can find the first layer and sublayer where the CUDA engine
// leaves the CPU engine (the end-to-end top-1 checks only see the final logits). Diagnosis only: the GPU engine
// runs without CUDA graphs and synchronizes after every layer while dumping.
//
// File format (little-endian): records of a 24-byte header, int32 {magic 0x41435444 "DTCA", layer, point ('a' or
// 'f'), pos0 (position of the first row), n_tok, n_embd}, then n_tok * n_embd float32 (row-major [token][feature]).
#ifndef STRATA_ENGINE_ACTDUMP_H
#define STRATA_ENGINE_ACTDUMP_H

#include <stdint.h>
#include <stdio.h>

#define ST_ACTDUMP_MAGIC 0x41435444

typedef struct st_actdump {
    FILE *f;
    char path[512];
    int failed;  // a write failed: reported once, further records dropped
} st_actdump;

// Opens DIR/<backend>.act for writing when STRATA_DUMP_ACT=DIR is set (truncating it): NULL when unset, or on an
// error (printed as a warning: the evaluation goes on without dumps).
st_actdump *st_actdump_open_env(const char *backend);
// Appends one record; x: host memory [n_tok][n_embd].
void st_actdump_write(st_actdump *d, int layer, char point, int64_t pos0, int64_t n_tok, int64_t n_embd,
                      const float *x);
void st_actdump_close(st_actdump *d);

#endif
