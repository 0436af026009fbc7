// The CUDA backend's entry points in a build without CUDA: no device is ever available, so the engine uses the CPU.
#include "engine/gpu.h"
#include <string.h>

#include "util/err.h"

int st_gpu_available(void) { return st_err("this build of Strata has no CUDA backend (rebuild with -DSTRATA_ENABLE_CUDA=ON)"), 0; }
st_gpu_model *st_gpu_model_load(const st_model *m, int device) {
    (void)m;
    (void)device;
    st_gpu_available();
    return NULL;
}
st_gpu_model *st_gpu_model_load_opts(const st_model *m, int device, const st_gpu_load_opts *opts) {
    (void)opts;
    return st_gpu_model_load(m, device);
}
void st_gpu_model_free(st_gpu_model *g) { (void)g; }
const char *st_gpu_device_name(const st_gpu_model *g) { return (void)g, "none"; }
int st_gpu_prefill_chunk(const st_gpu_model *g) { return (void)g, 0; }
int st_gpu_device_memory(st_gpu_model *g, size_t *used, size_t *total) {
    (void)g, (void)used, (void)total;
    return st_err("no CUDA backend in this build");
}
st_gpu_session *st_gpu_session_new(st_gpu_model *g, int64_t n_ctx, int kv_f16) {
    (void)g, (void)n_ctx, (void)kv_f16;
    return NULL;
}
void st_gpu_session_free(st_gpu_session *s) { (void)s; }
int st_gpu_session_eval(st_gpu_session *s, const int32_t *tokens, int64_t n, float *logits, int all_logits) {
    (void)s, (void)tokens, (void)n, (void)logits, (void)all_logits;
    return st_err("no CUDA backend in this build");
}
void st_gpu_session_truncate(st_gpu_session *s, int64_t n_keep) { (void)s, (void)n_keep; }
int st_gpu_gen_begin(st_gpu_session *s, const int32_t *tokens, int64_t n, const strata_sampler_params *p) {
    (void)s, (void)tokens, (void)n, (void)p;
    return st_err("no CUDA backend in this build");
}
int st_gpu_gen_push(st_gpu_session *s, const int32_t *forced) {
    (void)s, (void)forced;
    return st_err("no CUDA backend in this build");
}
int st_gpu_gen_pop(st_gpu_session *s, int32_t *token) {
    (void)s, (void)token;
    return st_err("no CUDA backend in this build");
}
void st_gpu_gen_end(st_gpu_session *s, int64_t n_past, const int32_t *tail, int64_t n_tail) {
    (void)s, (void)n_past, (void)tail, (void)n_tail;
}
int64_t st_gpu_session_n_past(const st_gpu_session *s) { return (void)s, 0; }
int64_t st_gpu_session_n_ctx(const st_gpu_session *s) { return (void)s, 0; }
const int32_t *st_gpu_session_tokens(const st_gpu_session *s) { return (void)s, (const int32_t *)0; }
int st_gpu_session_kv_f16(const st_gpu_session *s) { return (void)s, 0; }
int st_gpu_session_kv_transfer(st_gpu_session *s, uint8_t *host, int64_t n, int64_t n_host, const int32_t *tokens,
                               int to_host) {
    (void)s, (void)host, (void)n, (void)n_host, (void)tokens, (void)to_host;
    return st_err("no CUDA backend in this build");
}
int st_gpu_session_hybrid_stats(st_gpu_session *s, st_gpu_hybrid_stats *out) {
    (void)s;
    memset(out, 0, sizeof *out);
    return 0;
}
