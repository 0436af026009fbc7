// The CUDA backend of the engine: the model's weights in VRAM and sessions whose KV cache and forward pass live on
// the GPU. Same math as the CPU path (engine/session.c), kernel by kernel; decode steps are captured once in a CUDA
// graph and replayed, so per-token host work is a few small copies and one graph launch.
#ifndef STRATA_ENGINE_GPU_H
#define STRATA_ENGINE_GPU_H

#include <stdint.h>

#include "engine/model.h"

typedef struct st_gpu_model st_gpu_model;
typedef struct st_gpu_session st_gpu_session;

// 1 when this build has the CUDA backend and a usable device exists (the reason otherwise in st_errmsg).
int st_gpu_available(void);
// Uploads every weight of m to `device`. NULL with st_errmsg (no device, too little memory: needed vs free).
st_gpu_model *st_gpu_model_load(const st_model *m, int device);
void st_gpu_model_free(st_gpu_model *g);
const char *st_gpu_device_name(const st_gpu_model *g);
int st_gpu_device_memory(st_gpu_model *g, size_t *used, size_t *total);

st_gpu_session *st_gpu_session_new(st_gpu_model *g, int64_t n_ctx, int kv_f16);
void st_gpu_session_free(st_gpu_session *s);
// As st_session_eval: tokens at positions n_past.., logits [n][n_vocab] (all_logits) or [n_vocab] (last), or none.
int st_gpu_session_eval(st_gpu_session *s, const int32_t *tokens, int64_t n, float *logits, int all_logits);
void st_gpu_session_truncate(st_gpu_session *s, int64_t n_keep);
int64_t st_gpu_session_n_past(const st_gpu_session *s);
int64_t st_gpu_session_n_ctx(const st_gpu_session *s);
const int32_t *st_gpu_session_tokens(const st_gpu_session *s);
int st_gpu_session_kv_f16(const st_gpu_session *s);
// Copies the K/V rows of positions [0, n) of every layer between the device cache and host memory laid out as
// [n_layer] x { K [n_host][k_row bytes], V [n_host][v_row bytes] } (n <= n_host). to_host: 1 device -> host,
// 0 host -> device (the session then holds exactly `tokens[0..n)`). Synchronous. Returns 0 or -1.
int st_gpu_session_kv_transfer(st_gpu_session *s, uint8_t *host, int64_t n, int64_t n_host, const int32_t *tokens,
                               int to_host);

#endif
