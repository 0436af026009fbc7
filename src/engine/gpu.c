// CUDA forward pass: weights uploaded once into one device arena, a KV cache per session, decode steps of one token
// captured in a CUDA graph and replayed. The math follows engine/session.c (the CPU reference) operator by
// operator; tests/gpu/test_gpu_e2e checks greedy output against it.
#include "engine/gpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "cpu/ops.h"  // st_rope_cache (the RoPE table)
#include "cuda/attention.h"
#include "cuda/attention_tc.h"
#include "cuda/decode.h"
#include "cuda/gemm.h"
#include "cuda/matvec_f32.h"
#include "cuda/mmvq.h"
#include "cuda/ops.h"
#include "cuda/quantize_act.h"
#include "cuda/runtime.h"
#include "engine/actdump.h"
#include "engine/gpu_hybrid.h"
#include "engine/sampler.h"  // st_sampler_has_penalties
#include "strata.h"
#include "quant/quant.h"
#include "util/err.h"
#include "util/log.h"

#define ARENA_ALIGN 256
#define SMALL_BATCH ST_MMVQ_MAX_TOK  // tokens per step of the matrix-vector path
#define GEN_RING 4                   // pipelined generation: samples in flight at most (st_gpu_gen_push)
#define PREFILL_CHUNK STRATA_UBATCH_DEFAULT  // tokens per step of the matrix-matrix (GEMM) path, all in VRAM
#define LOGITS_ROWS 512              // the most rows of one all-position logits step (the logits buffer's cap)
#define GEMM_MIN_DEFAULT 64          // inputs of at least this many tokens take the GEMM path (STRATA_GEMM_MIN)

typedef struct gweight {
    const uint8_t *d;      // device copy of the GGUF tensor data (same block layout)
    int type;              // st_type
    int64_t ne[GGUF_MAX_DIMS];
    size_t row_bytes;
} gweight;

typedef struct glayer {
    float *attn_norm, *ffn_norm;  // [n_embd] f32 (device)
    float *q_norm, *k_norm;       // [head_dim_k] f32 or NULL
    gweight wq, wk, wv, wo;
    gweight ffn_gate, ffn_up, ffn_down;
    gweight router, gate_exps, up_exps, down_exps;
    const void *const *experts;  // device [n_expert][3]: gate, up, down base address of each expert (decode.h), or NULL
} glayer;

struct st_gpu_model {
    const st_model *m;
    st_cuda_ctx ctx;
    st_gemm_ctx *gemm;     // cuBLAS handle and workspace for prefill
    uint8_t *arena;        // every weight, ARENA_ALIGN-aligned sub-allocations
    size_t arena_bytes;
    gweight token_embd, output;
    float *output_norm;    // [n_embd] f32
    glayer *layers;        // [n_layer]
    const void **expert_tables;  // device [n_layer][n_expert][3] expert addresses (glayer.experts points into it)
    st_hybrid *hy;         // hybrid placement (gpu_hybrid.h): expert stacks not uploaded, glayer.experts point at
                           // its tables; NULL when every weight is in VRAM
    int prefill_chunk;     // tokens per step of the GEMM path (-ub; hybrid: the plan's, larger so that each chunk's
                           // expert staging over PCIe serves more tokens)
};

struct st_gpu_session {
    st_gpu_model *g;
    cudaStream_t stream;
    int64_t n_ctx;
    int kv_f16;
    uint64_t dev_bytes;         // device memory this session allocated at creation (dalloc): checked against the plan
    void **k_cache, **v_cache;  // [n_layer] -> device [n_ctx][n_head_kv * head_dim] half or float
    int32_t *tokens;            // host [n_ctx]
    int64_t n_past;
    // device scratch for up to g->prefill_chunk tokens (float32 rows [token][features]); the matrix-vector path
    // uses the first SMALL_BATCH rows
    int32_t *d_tokens;          // [prefill_chunk]
    int32_t *d_pos;             // [1] position of the first token of the step
    float *rope_cs;             // [n_ctx][n_rot / 2][2] cos, sin of each position's RoPE angles: the CPU engine's
                                // st_rope_cache rows (the C library's cosf / sinf), so both backends rotate alike
    float *x, *xn;              // [B][n_embd]
    float *q, *k, *v, *attn;    // [B][n_head*hd], [B][n_kv*hd] x2, [B][n_head*hd_v]
    float *ffn_a, *ffn_b;       // [B * n_expert_used][max(n_ff, n_ff_exp)]
    float *ffn_out;             // [B * n_expert_used][n_embd] (MoE: per (token, slot) down outputs)
    float *router;              // [B][n_expert]
    int32_t *d_ids;             // [B][n_expert_used] selected experts
    float *d_wts;               // [B][n_expert_used] their weights
    int32_t *d_xrow;            // [B * n_expert_used]: activation row of pair p = p / n_expert_used
    void *xq;                   // [B * n_expert_used] planar q8_1 rows of the widest input
    void *xq2;                  // [B * n_expert_used] planar q8_1 rows of n_ff_exp: the fused MoE's down input
    int32_t *dec_counters;      // zeroed counters of the fused decode kernels [st_cuda_dec_counters_bytes]
    int fused;                  // use the fused decode kernels (decode.h); STRATA_NO_FUSED=1 turns them off (A/B)
    int attn_v2;                // one-token attention by st_cuda_attn_dec (STRATA_ATTN_V1=1: the split+combine pair)
    int router_norm;            // one-token FFN norm + router + top-k in one launch (STRATA_ROUTER_NORM=1, A/B)
    int ffn_fold;               // one-token FFN norm folded into the router launch (default; STRATA_FFN_FOLD=0)
    int rope_attn;              // one token: QK-norm + RoPE + K/V store inside the attention launch where supported
                                // (decode.h st_cuda_attn_dec_ex's rope; default; STRATA_ROPE_ATTN=0: its own launch)
    int64_t attn_wide_from;     // one token: the attention in 8-warp blocks from this context length on (0: never;
                                // STRATA_ATTN_WIDE_FROM); one decode graph per side
    int hy_count_launch;        // hybrid: the routing count as a launch of its own (STRATA_HY_COUNT_LAUNCH=1, A/B)
                                // instead of in the router's last block
    unsigned dec_dup;           // timing experiment only (STRATA_DEC_DUP, same bits): kernel classes launched twice
    int32_t *fixed_ids;         // timing experiment only (STRATA_DEC_FIXED_ROUTE): device [n_layer][K] expert ids
                                // copied over the router's after it, or NULL
    unsigned dec_skip;          // timing experiment only (STRATA_DEC_SKIP, bit mask of DEC_SKIP_*): kernel classes
                                // left out of one-token fused steps, to measure each one's share of the graph; the
                                // output is wrong
    void *attn_ws2;             // st_cuda_attn_dec workspace (zeroed once: its counters)
    int n_split2;               // st_cuda_attn_dec grid
    float *logits;              // [logits_rows][n_vocab]
    int64_t logits_rows;        // grows on demand (all-position logits of a prefill chunk)
    void *gemm_scratch;         // prefill GEMM / MoE scratch [gemm_scratch_bytes]
    size_t gemm_scratch_bytes;
    size_t step_scratch_bytes;  // the part of gemm_scratch the current prefill step may use (its first bytes)
    int gemm_scratch_lent;      // gemm_scratch lies in the hybrid's prefetch slots (st_hybrid_scratch_lend)
    int gemm_min;               // inputs of at least this many tokens use the GEMM path
    int glu_route;              // one-token MoE: the GLU launch routes from the logits (STRATA_GLU_ROUTE=0 off)
    void *attn_ws;
    int n_split;
    int32_t *h_io;              // pinned host [prefill_chunk + 1]: tokens, then the position
    st_actdump *actdump;        // STRATA_DUMP_ACT (engine/actdump.h): per-layer activations; NULL: off
    float *h_dump;              // host [prefill_chunk][n_embd]: a dumped residual stream
    cudaGraphExec_t graph[8];   // the one-token decode step; hybrid: [+1] the prefetch's branch gated off, [+2] the
    int graph_ready[8];         // CPU-miss split gated off (gpu_hybrid.h); [+4] the wide attention (attn_wide_from)
    int graph_failed;
    int warm;                   // one eager one-token step has run (kernels loaded) before capture
    st_gpu_hybrid_stats hstats; // hybrid placement counters of this session (gpu.h)
    // pipelined generation (st_gpu_gen_*): allocated on first use
    void *sample_ws;            // device st_cuda_sample workspace [st_cuda_sampler_workspace_bytes]
    int32_t *h_gen;             // pinned host [GEN_RING][4]: word 0 of a slot is its sampled token, written by the
                                // sampler's last kernel (words 1-3 unused); reused only after its sample was popped
    cudaEvent_t gen_ev[GEN_RING]; // recorded after each slot's sampler launch
    int gen_head, gen_n;        // next slot to fill; samples queued and not yet popped
    st_cuda_sample_params gen_p;
};

int st_gpu_available(void) { return st_cuda_device_count() > 0; }

const char *st_gpu_device_name(const st_gpu_model *g) { return g->ctx.name; }
int st_gpu_prefill_chunk(const st_gpu_model *g) { return g->prefill_chunk; }

int st_gpu_device_memory(st_gpu_model *g, size_t *used, size_t *total) {
    size_t free_b = 0, total_b = 0;
    if (st_cuda_mem_info(&g->ctx, &free_b, &total_b)) return -1;
    *used = total_b - free_b;
    *total = total_b;
    return 0;
}

// ---- weights ----------------------------------------------------------------------------------------------------

typedef struct {
    st_gpu_model *g;
    size_t off;
    int copy;  // 0: only measure; 1: copy into the arena
    int failed;
    st_progress *progress;  // upload progress lines (copy pass only)
    int skip_experts;       // hybrid placement: expert stacks stay on the host (their type and shape are kept)
} placer;

static void *place_bytes(placer *p, const void *src, size_t bytes, const char *what) {
    size_t at = p->off;
    p->off += (bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    if (!p->copy || p->failed) return NULL;
    void *dst = p->g->arena + at;
    if (st_cuda_memcpy_h2d(&p->g->ctx, dst, src, bytes, NULL)) {
        st_err_prefix("uploading %s: ", what);
        p->failed = 1;
    }
    if (p->progress) st_progress_add(p->progress, bytes);
    return dst;
}

static void place_weight(placer *p, gweight *gw, const st_weight *w) {
    memset(gw, 0, sizeof *gw);
    if (!w->data) return;
    size_t bytes = w->row_bytes * (size_t)w->ne[1] * (size_t)w->ne[2] * (size_t)w->ne[3];
    gw->d = place_bytes(p, w->data, bytes, w->name);
    gw->type = w->type;
    memcpy(gw->ne, w->ne, sizeof gw->ne);
    gw->row_bytes = w->row_bytes;
}

static float *place_vec(placer *p, const float *v, int64_t n, const char *what) {
    if (!v) return NULL;
    return place_bytes(p, v, sizeof(float) * (size_t)n, what);
}

static void place_all(placer *p) {
    st_gpu_model *g = p->g;
    const st_model *m = g->m;
    const st_hparams *hp = &m->hp;
    place_weight(p, &g->token_embd, &m->token_embd);
    if (m->output.data == m->token_embd.data) g->output = g->token_embd;
    else place_weight(p, &g->output, &m->output);
    g->output_norm = place_vec(p, m->output_norm, hp->n_embd, "output_norm");
    for (uint32_t i = 0; i < hp->n_layer; i++) {
        const st_layer *L = &m->layers[i];
        glayer *G = &g->layers[i];
        G->attn_norm = place_vec(p, L->attn_norm, hp->n_embd, "attn_norm");
        G->ffn_norm = place_vec(p, L->ffn_norm, hp->n_embd, "ffn_norm");
        G->q_norm = place_vec(p, L->q_norm, hp->head_dim_k, "attn_q_norm");
        G->k_norm = place_vec(p, L->k_norm, hp->head_dim_k, "attn_k_norm");
        place_weight(p, &G->wq, &L->wq);
        place_weight(p, &G->wk, &L->wk);
        place_weight(p, &G->wv, &L->wv);
        place_weight(p, &G->wo, &L->wo);
        place_weight(p, &G->ffn_gate, &L->ffn_gate);
        place_weight(p, &G->ffn_up, &L->ffn_up);
        place_weight(p, &G->ffn_down, &L->ffn_down);
        place_weight(p, &G->router, &L->router);
        if (p->skip_experts) {  // hybrid: described, not uploaded (d stays NULL)
            const st_weight *xs[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
            gweight *gs[3] = {&G->gate_exps, &G->up_exps, &G->down_exps};
            for (int k = 0; k < 3; k++) {
                memset(gs[k], 0, sizeof *gs[k]);
                gs[k]->type = xs[k]->type;
                memcpy(gs[k]->ne, xs[k]->ne, sizeof gs[k]->ne);
                gs[k]->row_bytes = xs[k]->row_bytes;
            }
        } else {
            place_weight(p, &G->gate_exps, &L->gate_exps);
            place_weight(p, &G->up_exps, &L->up_exps);
            place_weight(p, &G->down_exps, &L->down_exps);
        }
    }
}

static int check_types(const st_model *m) {
    const st_hparams *hp = &m->hp;
    const st_weight *ws[] = {&m->output};
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++)
        if (!st_cuda_mmvq_supported(ws[i]->type))
            return st_err("%s: tensor '%s' has type %s, which the CUDA backend cannot multiply yet", m->path,
                          ws[i]->name, st_type_name(ws[i]->type));
    if (!st_cuda_get_rows_supported(m->token_embd.type))
        return st_err("%s: token_embd.weight has type %s, which the CUDA embedding lookup does not support yet",
                      m->path, st_type_name(m->token_embd.type));
    for (uint32_t i = 0; i < hp->n_layer; i++) {
        const st_layer *L = &m->layers[i];
        const st_weight *lw[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->ffn_gate, &L->ffn_up, &L->ffn_down,
                                 &L->gate_exps, &L->up_exps, &L->down_exps};
        for (size_t j = 0; j < sizeof lw / sizeof lw[0]; j++)
            if (lw[j]->data && !st_cuda_mmvq_supported(lw[j]->type))
                return st_err("%s: tensor '%s' has type %s, which the CUDA backend cannot multiply yet", m->path,
                              lw[j]->name, st_type_name(lw[j]->type));
        if (L->router.data && !st_cuda_matvec_float_supported(L->router.type))
            return st_err("%s: router '%s' has type %s; the CUDA backend needs F32, F16 or BF16", m->path,
                          L->router.name, st_type_name(L->router.type));
    }
    if (!st_cuda_attn_supported((int)hp->head_dim_k, (int)hp->n_head, (int)hp->n_head_kv) ||
        hp->head_dim_k != hp->head_dim_v)
        return st_err("%s: attention with head_dim %u/%u, %u/%u heads is not supported by the CUDA kernels", m->path,
                      hp->head_dim_k, hp->head_dim_v, hp->n_head, hp->n_head_kv);
    return 0;
}

// Per-layer tables of expert addresses for the fused MoE decode kernels (decode.h): expert e of a stack starts
// e * (rows per expert) * row_bytes into it. A later hybrid mode points entries at VRAM cache slots or mapped host
// memory instead; the kernels only see the table.
static int build_expert_tables(st_gpu_model *g) {
    const st_hparams *hp = &g->m->hp;
    const size_t E = hp->n_expert;
    if (E == 0) return 0;
    const size_t per_layer = E * 3;
    const void **h = calloc(per_layer * hp->n_layer, sizeof *h);
    if (!h) return st_err("out of memory");
    int any = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const glayer *L = &g->layers[l];
        if (!L->gate_exps.d || !L->up_exps.d || !L->down_exps.d) continue;
        any = 1;
        const gweight *w[3] = {&L->gate_exps, &L->up_exps, &L->down_exps};
        for (size_t e = 0; e < E; e++)
            for (int k = 0; k < 3; k++)
                h[l * per_layer + e * 3 + k] = w[k]->d + e * (size_t)w[k]->ne[1] * w[k]->row_bytes;
    }
    int rc = 0;
    if (any) {
        g->expert_tables = st_cuda_alloc(&g->ctx, sizeof *h * per_layer * hp->n_layer, "expert address tables");
        rc = g->expert_tables ? st_cuda_memcpy_h2d(&g->ctx, g->expert_tables, h, sizeof *h * per_layer * hp->n_layer,
                                                   NULL)
                              : -1;
        for (uint32_t l = 0; rc == 0 && l < hp->n_layer; l++)
            if (g->layers[l].gate_exps.d)
                g->layers[l].experts = (const void *const *)(g->expert_tables + l * per_layer);
    }
    free(h);
    return rc;
}

st_gpu_model *st_gpu_model_load(const st_model *m, int device) { return st_gpu_model_load_opts(m, device, NULL); }

st_gpu_model *st_gpu_model_load_opts(const st_model *m, int device, const st_gpu_load_opts *opts) {
    if (check_types(m)) return NULL;
    st_gpu_model *g = calloc(1, sizeof *g);
    if (!g) return st_err("out of memory"), NULL;
    g->m = m;
    g->layers = calloc(m->hp.n_layer, sizeof *g->layers);
    if (!g->layers || st_cuda_init(&g->ctx, device, 1, 0)) goto fail;
    if (st_hybrid_plan(m, opts, &g->hy)) goto fail;  // a budget below the model's size: hybrid placement
    g->prefill_chunk = g->hy ? st_hybrid_prefill_chunk(g->hy) : opts && opts->n_ubatch > 0 ? opts->n_ubatch
                                                                                             : PREFILL_CHUNK;
    if (g->prefill_chunk <= SMALL_BATCH) g->prefill_chunk = SMALL_BATCH + 1;
    const int skip = g->hy != NULL;
    placer p = {g, 0, 0, 0, NULL, skip};
    place_all(&p);
    g->arena_bytes = p.off;
    double t0 = st_now();
    g->arena = st_cuda_alloc(&g->ctx, g->arena_bytes, "model weights");
    if (!g->arena) {
        st_err_prefix("%s: ", m->path);
        goto fail;
    }
    st_progress prog;
    st_progress_begin(&prog, "uploading weights to the GPU", g->arena_bytes, 1);
    placer q = {g, 0, 1, 0, &prog, skip};
    place_all(&q);
    st_progress_end(&prog);
    if (q.failed) goto fail;
    if (g->hy) {  // the experts: host arena + VRAM cache; every layer's table comes from the hybrid state
        if (st_hybrid_init(g->hy, &g->ctx, g->arena_bytes)) goto fail;
        for (uint32_t l = 0; l < m->hp.n_layer; l++)
            if (m->layers[l].gate_exps.data) g->layers[l].experts = st_hybrid_layer_table(g->hy, l);
    } else if (build_expert_tables(g)) {
        goto fail;
    }
    g->gemm = st_cuda_gemm_create(&g->ctx);
    if (!g->gemm) goto fail;
    char a[32];
    st_info("uploaded %s of weights to %s (cuda:%d) in %.2f s", st_fmt_bytes(a, sizeof a, (double)g->arena_bytes),
            g->ctx.name, device, st_now() - t0);
    return g;
fail:
    st_gpu_model_free(g);
    return NULL;
}

void st_gpu_model_free(st_gpu_model *g) {
    if (!g) return;
    if (g->gemm) st_cuda_gemm_destroy(g->gemm);
    if (g->arena) st_cuda_free(&g->ctx, g->arena);
    if (g->expert_tables) st_cuda_free(&g->ctx, (void *)g->expert_tables);
    st_hybrid_free(g->hy);
    st_cuda_destroy(&g->ctx);
    free(g->layers);
    free(g);
}

// ---- sessions ---------------------------------------------------------------------------------------------------

// Prefill MoE engine: the f16 tensor-core kernel where it applies (sizes % 256), else int8 mmq, else cuBLAS.
// STRATA_MOE_ENGINE=mmq|tc|cublas forces one (for A/B timing); a forced engine that cannot run falls back.
static int moe_engine(const glayer *L) {
    const int gt = L->gate_exps.type, dt = L->down_exps.type;
    const int e = st_moe_pick(gt, dt, L->gate_exps.ne[0], L->down_exps.ne[0]);  // (cuda/gemm_sizes.h)
    const char *env = getenv("STRATA_MOE_ENGINE");
    if (env && !strcmp(env, "cublas")) return ST_MOE_CUBLAS_LOOP;
    if (env && !strcmp(env, "mmq") && (e == ST_MOE_TC || e == ST_MOE_MMQ) && st_cuda_mmq_supported(gt) &&
        st_cuda_mmq_supported(dt))
        return ST_MOE_MMQ;
    return e;
}

// The prefill MoE engine of a layer of g: hybrid placement needs one that takes a slot map (st_cuda_moe_ffn_slots:
// tensor cores, else int8), even when STRATA_MOE_ENGINE asks for cuBLAS. -1 when neither handles the types.
static int prefill_moe_engine(const st_gpu_model *g, const glayer *L) {
    const int e = moe_engine(L);
    if (!g->hy || e == ST_MOE_TC || e == ST_MOE_MMQ) return e;
    const int d = st_moe_pick(L->gate_exps.type, L->down_exps.type, L->gate_exps.ne[0], L->down_exps.ne[0]);
    return d == ST_MOE_TC || d == ST_MOE_MMQ ? d : -1;
}

// The largest scratch any prefill GEMM or MoE call of a P-token chunk needs, with the LM head's GEMM over head_rows
// rows (0: none; a session plans for min(P, LOGITS_ROWS): st_gpu_session_eval's all-position logits steps are capped
// there). Each call carves its pieces from the scratch's start, so such a step touches only the first bytes
// returned. (With cuBLAS the head's f16 weight, 622 MB for a 151,936 x 2048 head, outweighs a 512-token step's
// layers ~10x; a step with only its last row's logits takes the matrix-vector path.)
static size_t gemm_scratch_need(const st_gpu_model *g, int P, int head_rows) {
    const st_hparams *hp = &g->m->hp;
    size_t need = 0;
#define NEED(w, n)                                                                                                 \
    do {                                                                                                           \
        if ((w)->d) {                                                                                              \
            size_t b_ = st_cuda_gemm_scratch_bytes(ST_GEMM_AUTO, (w)->type, (w)->ne[0], (w)->ne[1], (n));          \
            if (b_ > need) need = b_;                                                                              \
        }                                                                                                          \
    } while (0)
    if (head_rows > 0) NEED(&g->output, head_rows);
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        const glayer *L = &g->layers[l];
        NEED(&L->wq, P);
        NEED(&L->wk, P);
        NEED(&L->wv, P);
        NEED(&L->wo, P);
        NEED(&L->ffn_gate, P);
        NEED(&L->ffn_up, P);
        NEED(&L->ffn_down, P);
        if (g->m->layers[l].gate_exps.data) {  // (hybrid: the stack is on the host, its MoE scratch still needed)
            const int eng = prefill_moe_engine(g, L);
            size_t b = st_cuda_moe_scratch_bytes(eng < 0 ? ST_MOE_MMQ : eng, L->gate_exps.type, L->down_exps.type, hp->n_embd,
                                                 hp->n_ff_exp, (int)hp->n_expert, P,
                                                 (int)hp->n_expert_used);
            if (b > need) need = b;
        }
    }
#undef NEED
    return need;
}

static int fused_moe(const st_gpu_session *s, const glayer *L, int n);

// Hybrid placement runs every MoE layer through the fused decode kernels (they read the expert address tables) and
// the slot-map prefill engines; says which layer cannot, or 0.
static int hybrid_session_check(st_gpu_session *s) {
    const st_gpu_model *g = s->g;
    if (getenv("STRATA_NO_FUSED")) st_warn("hybrid placement: STRATA_NO_FUSED is ignored (misses need the fused kernels)");
    s->fused = 1;
    for (uint32_t l = 0; l < g->m->hp.n_layer; l++) {
        const glayer *L = &g->layers[l];
        if (!g->m->layers[l].gate_exps.data) continue;
        if (!fused_moe(s, L, 1))
            return st_err("%s: layer %u: hybrid placement needs the fused MoE decode kernels, which do not take "
                          "expert types %s/%s with n_embd %u, n_ff_exp %u, %u experts: load without --gpu-mem",
                          g->m->path, l, st_type_name(L->gate_exps.type), st_type_name(L->down_exps.type),
                          g->m->hp.n_embd, g->m->hp.n_ff_exp, g->m->hp.n_expert);
        if (prefill_moe_engine(g, L) < 0)
            return st_err("%s: layer %u: hybrid prefill needs the tensor-core or int8 MoE engine, which do not take "
                          "%s/%s with these sizes: load without --gpu-mem",
                          g->m->path, l, st_type_name(L->gate_exps.type), st_type_name(L->down_exps.type));
    }
    st_hybrid_describe(g->hy, &s->hstats);
    return 0;
}

static void *dalloc(st_gpu_session *s, size_t bytes, const char *what, int *fail) {
    if (*fail) return NULL;
    void *p = st_cuda_alloc(&s->g->ctx, bytes ? bytes : 16, what);
    if (!p) *fail = 1;
    s->dev_bytes += (bytes + 255) / 256 * 256;
    return p;
}

// s->rope_cs for every position of the session, made on the host in slabs (~0.14 s for 128K positions).
static int rope_table_upload(st_gpu_session *s) {
    const st_hparams *hp = &s->g->m->hp;
    const int64_t n_rot = hp->n_rot, slab = 4096;
    float *h = malloc(sizeof(float) * (size_t)(slab * n_rot));
    if (!h) return st_err("out of memory (RoPE table)");
    int rc = 0;
    for (int64_t p0 = 0; p0 < s->n_ctx && !rc; p0 += slab) {
        const int64_t n = s->n_ctx - p0 < slab ? s->n_ctx - p0 : slab;
        for (int64_t p = 0; p < n; p++)
            st_rope_cache(h + p * n_rot, n_rot, p0 + p, hp->rope_freq_base, hp->rope_freq_scale);
        rc = st_cuda_memcpy_h2d(&s->g->ctx, s->rope_cs + p0 * n_rot, h, sizeof(float) * (size_t)(n * n_rot), NULL);
    }
    free(h);
    return rc;
}

// The context length from which one-token steps take the attention in 8-warp blocks (STRATA_ATTN_WIDE_FROM): at long
// contexts each warp then has half the tiles of a 4-warp block (two warps per scheduler hide each other's
// latencies) and a split covers twice the positions (half the partials to merge); at short ones the wider block's
// merge and setup cost more than that saves. H200, Qwen3-30B-A3B shape (bench/ab.sh, 2026-12-04e), 8 warps against
// 4: tg128 534.9 vs 543.3 tok/s at depth 0 (an A/B build), 484.7 vs 475.5 at depth 2048, 470.2 vs 458.7 at 4096,
// 412.0 vs 395.8 at 16384. Between 128 and 2048 unmeasured: 2048, the smallest measured gain.
#define ATTN_WIDE_FROM 2048

st_gpu_session *st_gpu_session_new(st_gpu_model *g, int64_t n_ctx, int kv_f16) {
    const st_hparams *hp = &g->m->hp;
    if (n_ctx <= 0) n_ctx = hp->n_ctx_train ? hp->n_ctx_train : 4096;
    st_gpu_session *s = calloc(1, sizeof *s);
    if (!s) return st_err("out of memory"), NULL;
    s->g = g;
    s->n_ctx = n_ctx;
    s->kv_f16 = kv_f16;
    s->stream = g->ctx.streams[0];
    int fail = 0;
    size_t B = SMALL_BATCH, P = (size_t)g->prefill_chunk, K = hp->n_expert_used ? hp->n_expert_used : 1, d = hp->n_embd;
    size_t kd = (size_t)hp->n_head_kv * hp->head_dim_k, qd = (size_t)hp->n_head * hp->head_dim_k;
    size_t ff = hp->n_ff > hp->n_ff_exp ? hp->n_ff : hp->n_ff_exp;
    size_t el = kv_f16 ? 2 : 4;
    s->tokens = calloc((size_t)n_ctx, sizeof(int32_t));
    s->k_cache = calloc(hp->n_layer, sizeof(void *));
    s->v_cache = calloc(hp->n_layer, sizeof(void *));
    if (!s->tokens || !s->k_cache || !s->v_cache) fail = 1;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        s->k_cache[l] = dalloc(s, (size_t)n_ctx * kd * el, "KV cache", &fail);
        s->v_cache[l] = dalloc(s, (size_t)n_ctx * kd * el, "KV cache", &fail);
    }
    // FFN rows: SMALL_BATCH * K (token, expert) pairs on the matrix-vector path, P tokens of a dense
    // FFN on the GEMM path (the MoE GEMM path keeps its pairs in gemm_scratch).
    size_t ffn_rows = B * K > P ? B * K : P;
    s->d_tokens = dalloc(s, sizeof(int32_t) * P, "tokens", &fail);
    s->d_pos = dalloc(s, sizeof(int32_t), "position", &fail);
    s->rope_cs = dalloc(s, sizeof(float) * (size_t)n_ctx * hp->n_rot, "RoPE table", &fail);
    if (!fail && rope_table_upload(s)) fail = 1;
    s->x = dalloc(s, sizeof(float) * P * d, "activations", &fail);
    s->xn = dalloc(s, sizeof(float) * P * d, "activations", &fail);
    s->q = dalloc(s, sizeof(float) * P * qd, "activations", &fail);
    s->k = dalloc(s, sizeof(float) * P * kd, "activations", &fail);
    s->v = dalloc(s, sizeof(float) * P * kd, "activations", &fail);
    s->attn = dalloc(s, sizeof(float) * P * qd, "activations", &fail);
    s->ffn_a = dalloc(s, sizeof(float) * ffn_rows * ff, "activations", &fail);
    s->ffn_b = dalloc(s, sizeof(float) * ffn_rows * ff, "activations", &fail);
    s->ffn_out = dalloc(s, sizeof(float) * ffn_rows * d, "activations", &fail);
    s->router = dalloc(s, sizeof(float) * P * (hp->n_expert ? hp->n_expert : 1), "router", &fail);
    s->d_ids = dalloc(s, sizeof(int32_t) * P * K, "router", &fail);
    s->d_wts = dalloc(s, sizeof(float) * P * K, "router", &fail);
    s->d_xrow = dalloc(s, sizeof(int32_t) * B * K, "router", &fail);
    size_t widest = d > qd ? d : qd;
    if (ff > widest) widest = ff;
    s->xq = dalloc(s, (size_t)st_cuda_q8_1_row_bytes((int64_t)widest) * B * K, "quantized activations", &fail);
    s->xq2 = dalloc(s, (size_t)st_cuda_q8_1_row_bytes((int64_t)ff) * B * K, "quantized activations", &fail);
    const size_t cnt_bytes = st_cuda_dec_counters_bytes((int64_t)ff, (int)K, (int)B);
    s->dec_counters = dalloc(s, cnt_bytes, "decode counters", &fail);
    if (!fail && st_cuda_memset(&g->ctx, s->dec_counters, 0, cnt_bytes, NULL)) fail = 1;
    s->fused = getenv("STRATA_NO_FUSED") == NULL;
    s->attn_v2 = getenv("STRATA_ATTN_V1") == NULL;
    s->router_norm = getenv("STRATA_ROUTER_NORM") != NULL;
    const char *fold = getenv("STRATA_FFN_FOLD");
    s->ffn_fold = !(fold && *fold == '0');
    const char *ra = getenv("STRATA_ROPE_ATTN");
    s->rope_attn = !(ra && *ra == '0');
    const char *wf = getenv("STRATA_ATTN_WIDE_FROM");
    // (not measured with experts in host RAM, where the 8-warp blocks' shared memory would also crowd the side
    // branches' kernels off the SMs: off there unless asked for)
    s->attn_wide_from = wf ? strtoll(wf, NULL, 10) : g->hy ? 0 : ATTN_WIDE_FROM;
    s->hy_count_launch = getenv("STRATA_HY_COUNT_LAUNCH") != NULL;
    const char *gr = getenv("STRATA_GLU_ROUTE");
    s->glu_route = !(gr && *gr == '0');
    if (getenv("STRATA_NO_PDL")) st_cuda_dec_set_pdl(0);  // process-wide (A/B timing)
    const char *skip = getenv("STRATA_DEC_SKIP");
    if (skip) {
        s->dec_skip = (unsigned)strtoul(skip, NULL, 0);
        st_warn("STRATA_DEC_SKIP=0x%x: decode kernels left out for a timing experiment; the output is wrong",
                s->dec_skip);
    }
    const char *dup = getenv("STRATA_DEC_DUP");
    if (dup) {
        s->dec_dup = (unsigned)strtoul(dup, NULL, 0);
        st_warn("STRATA_DEC_DUP=0x%x: decode kernels launched twice for a timing experiment; the output is wrong",
                s->dec_dup);
    }
    // Timing experiment: every token routed to fixed experts per layer, contiguous (0..K-1), spread evenly over the
    // stack, or a fixed random set: does the experts' placement in memory change the MoE kernels' time?
    const char *fr = getenv("STRATA_DEC_FIXED_ROUTE");
    if (fr && hp->n_expert) {
        const int E = (int)hp->n_expert, Kf = (int)hp->n_expert_used;
        int32_t *ids = malloc(sizeof(int32_t) * hp->n_layer * Kf);
        uint64_t r = 88172645463325252ull;
        for (uint32_t l = 0; ids && l < hp->n_layer; l++)
            for (int k = 0; k < Kf; k++) {
                int e = !strcmp(fr, "contig") ? k : !strcmp(fr, "spread") ? (k * E / Kf + (int)l * 5) % E : -1;
                while (e < 0) {  // rand: distinct ids from a fixed xorshift sequence
                    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
                    e = (int)(r % (uint64_t)E);
                    for (int j = 0; j < k; j++)
                        if (ids[l * Kf + j] == e) e = -1;
                }
                ids[l * Kf + k] = e;
            }
        s->fixed_ids = ids ? dalloc(s, sizeof(int32_t) * hp->n_layer * Kf, "fixed routes", &fail) : NULL;
        if (s->fixed_ids && st_cuda_memcpy_h2d(&g->ctx, s->fixed_ids, ids, sizeof(int32_t) * hp->n_layer * Kf, NULL))
            fail = 1;
        free(ids);
        st_warn("STRATA_DEC_FIXED_ROUTE=%s: every decode token takes fixed experts (timing experiment; the output is "
                "wrong)", fr);
    }
    s->n_split2 = st_cuda_attn_dec_splits((int)hp->n_head_kv, g->ctx.sm_count);
    // STRATA_ATTN_SPLITS=N (A/B): at most N splits per KV head at long contexts (fewer blocks, fewer merge levels;
    // with -DATC_SG=N one level)
    const char *asp = getenv("STRATA_ATTN_SPLITS");
    if (asp && atoi(asp) >= 1 && atoi(asp) < s->n_split2) s->n_split2 = atoi(asp);
    const size_t ws2 = st_cuda_attn_dec_ws_bytes((int)hp->n_head, (int)hp->n_head_kv, (int)hp->head_dim_k, s->n_split2);
    s->attn_ws2 = dalloc(s, ws2, "attention workspace", &fail);
    if (!fail && st_cuda_memset(&g->ctx, s->attn_ws2, 0, ws2, NULL)) fail = 1;
    s->logits_rows = B;
    s->logits = dalloc(s, sizeof(float) * B * hp->n_vocab, "logits", &fail);
    s->gemm_min = GEMM_MIN_DEFAULT;
    const char *gm = getenv("STRATA_GEMM_MIN");
    if (gm && atoi(gm) > 0) s->gemm_min = atoi(gm);
    s->gemm_scratch_bytes = gemm_scratch_need(g, g->prefill_chunk,
                                              g->prefill_chunk < LOGITS_ROWS ? g->prefill_chunk : LOGITS_ROWS);
    s->step_scratch_bytes = s->gemm_scratch_bytes;
    s->gemm_scratch = g->hy && !fail ? st_hybrid_scratch_lend(g->hy, s->gemm_scratch_bytes) : NULL;
    s->gemm_scratch_lent = s->gemm_scratch != NULL;
    if (!s->gemm_scratch) s->gemm_scratch = dalloc(s, s->gemm_scratch_bytes, "prefill scratch", &fail);
    s->n_split = st_cuda_attn_decode_splits((int)hp->n_head_kv, g->ctx.sm_count);
    s->attn_ws = dalloc(s, st_cuda_attn_decode_workspace_bytes((int)hp->n_head, (int)hp->head_dim_k, s->n_split),
                        "attention workspace", &fail);
    s->actdump = st_actdump_open_env("cuda");  // NULL unless STRATA_DUMP_ACT is set (then no CUDA graphs)
    if (s->actdump && !(s->h_dump = malloc(sizeof(float) * P * d))) fail = 1;
    if (!fail && cudaMallocHost((void **)&s->h_io, sizeof(int32_t) * (P + 1)) != cudaSuccess) {
        st_err("cannot allocate pinned host memory");
        fail = 1;
    }
    if (!fail) {
        int32_t xrow[SMALL_BATCH * 64];
        size_t n = B * K < sizeof xrow / sizeof xrow[0] ? B * K : sizeof xrow / sizeof xrow[0];
        for (size_t p = 0; p < n; p++) xrow[p] = (int32_t)(p / K);
        if (st_cuda_memcpy_h2d(&g->ctx, s->d_xrow, xrow, sizeof(int32_t) * n, NULL)) fail = 1;
    }
    if (!fail && g->hy && hybrid_session_check(s)) fail = 1;
    if (!fail && g->hy) {
        // --gpu-mem holds only if the session stays within what the plan set aside for it (KV cache and scratch
        // as place/plan.c estimates them); a larger context than planned, or an estimate that drifted from these
        // allocations, would exceed the budget: say so with the numbers.
        int64_t plan_ctx = 0;
        const uint64_t planned = st_hybrid_session_budget(g->hy, &plan_ctx);
        char a[32], b2[32];
        st_fmt_bytes(a, sizeof a, (double)s->dev_bytes);
        st_fmt_bytes(b2, sizeof b2, (double)planned);
        if (s->dev_bytes <= planned + (64u << 20)) {
            st_info("hybrid session: %s of VRAM for context %lld (the plan set aside %s for context %lld)", a,
                    (long long)n_ctx, b2, (long long)plan_ctx);
        } else {
            st_warn("--gpu-mem: this session (context %lld) allocated %s of VRAM where the plan (context %lld) set "
                    "aside %s for KV cache and scratch: the budget may be exceeded by the difference; plan for this "
                    "context (-c)", (long long)n_ctx, a, (long long)plan_ctx, b2);
        }
    }
    if (fail) {
        char a[32];
        st_err_prefix("session of %lld positions (KV cache %s): ", (long long)n_ctx,
                      st_fmt_bytes(a, sizeof a, (double)st_hparams_kv_bytes(hp, (uint64_t)n_ctx, (int)el)));
        st_gpu_session_free(s);
        return NULL;
    }
    return s;
}

// The captured decode graphs hold the buffers' addresses at capture: a buffer reallocated later (the logits' on
// growth) makes them write freed memory, so they go and the next one-token steps capture again.
static void drop_decode_graphs(st_gpu_session *s) {
    for (int i = 0; i < 8; i++) {
        if (s->graph_ready[i]) cudaGraphExecDestroy(s->graph[i]);
        s->graph_ready[i] = 0;
    }
}

void st_gpu_session_free(st_gpu_session *s) {
    if (!s) return;
    st_cuda_ctx *c = &s->g->ctx;
    drop_decode_graphs(s);
    for (uint32_t l = 0; s->k_cache && l < s->g->m->hp.n_layer; l++) {
        if (s->k_cache[l]) st_cuda_free(c, s->k_cache[l]);
        if (s->v_cache[l]) st_cuda_free(c, s->v_cache[l]);
    }
    if (s->gemm_scratch_lent) {
        st_hybrid_scratch_return(s->g->hy, s->gemm_scratch);
        s->gemm_scratch = NULL;
    }
    void *bufs[] = {s->d_tokens, s->d_pos, s->rope_cs, s->x, s->xn, s->q, s->k, s->v, s->attn, s->ffn_a, s->ffn_b,
                    s->ffn_out, s->router, s->d_ids, s->d_wts, s->d_xrow, s->xq, s->logits, s->attn_ws, s->gemm_scratch,
                    s->xq2, s->dec_counters, s->attn_ws2, s->fixed_ids};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) st_cuda_free(c, bufs[i]);
    if (s->h_io) cudaFreeHost(s->h_io);
    if (s->h_gen) {
        cudaFreeHost(s->h_gen);
        for (int i = 0; i < GEN_RING; i++) cudaEventDestroy(s->gen_ev[i]);
    }
    if (s->sample_ws) st_cuda_free(c, s->sample_ws);
    st_actdump_close(s->actdump);
    free(s->h_dump);
    free(s->k_cache);
    free(s->v_cache);
    free(s->tokens);
    free(s);
}

void st_gpu_session_truncate(st_gpu_session *s, int64_t n_keep) {
    if (n_keep < s->n_past) s->n_past = n_keep < 0 ? 0 : n_keep;
}
int64_t st_gpu_session_n_past(const st_gpu_session *s) { return s->n_past; }
int64_t st_gpu_session_n_ctx(const st_gpu_session *s) { return s->n_ctx; }
const int32_t *st_gpu_session_tokens(const st_gpu_session *s) { return s->tokens; }
int st_gpu_session_kv_f16(const st_gpu_session *s) { return s->kv_f16; }

int st_gpu_session_kv_transfer(st_gpu_session *s, uint8_t *host, int64_t n, int64_t n_host, const int32_t *tokens,
                               int to_host) {
    const st_hparams *hp = &s->g->m->hp;
    st_cuda_ctx *c = &s->g->ctx;
    if (n < 0 || n > n_host || n > s->n_ctx || (to_host && n > s->n_past))
        return st_err("KV transfer of %lld positions: out of range (cached %lld, context %lld)", (long long)n,
                      (long long)s->n_past, (long long)s->n_ctx);
    size_t el = s->kv_f16 ? 2 : 4;
    size_t k_row = (size_t)hp->n_head_kv * hp->head_dim_k * el, v_row = (size_t)hp->n_head_kv * hp->head_dim_v * el;
    uint8_t *p = host;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        int rc = to_host ? st_cuda_memcpy_d2h(c, p, s->k_cache[l], (size_t)n * k_row, NULL)
                         : st_cuda_memcpy_h2d(c, s->k_cache[l], p, (size_t)n * k_row, NULL);
        p += (size_t)n_host * k_row;
        if (rc == 0)
            rc = to_host ? st_cuda_memcpy_d2h(c, p, s->v_cache[l], (size_t)n * v_row, NULL)
                         : st_cuda_memcpy_h2d(c, s->v_cache[l], p, (size_t)n * v_row, NULL);
        p += (size_t)n_host * v_row;
        if (rc) return -1;
    }
    if (!to_host) {
        memcpy(s->tokens, tokens, sizeof(int32_t) * (size_t)n);
        s->n_past = n;
    }
    return 0;
}

// ---- forward ----------------------------------------------------------------------------------------------------

// Quantizes x [n][ne0] into s->xq in the CPU backend's activation format for weights of `type`.
static int quant(st_gpu_session *s, int type, const float *x, int n, int64_t ne0) {
    return st_cuda_quantize_act(&s->g->ctx, st_cuda_act_format(type), x, s->xq, n, ne0, s->stream);
}

// y[n][rows] = W . x[n]. Float weights take float activations; quantized weights int8 activations in the CPU's
// format, quantized here unless `reuse` says s->xq already holds x in that format (Q, K, V share one input).
static int mv(st_gpu_session *s, const gweight *w, const float *x, int n, float *y, int reuse) {
    if (st_cuda_matvec_float_supported(w->type))
        return st_cuda_matvec_float(w->type, w->d, w->ne[0], w->ne[1], x, n, y, s->stream);
    if (!reuse && quant(s, w->type, x, n, w->ne[0])) return -1;
    return st_cuda_mmvq(&s->g->ctx, w->type, w->d, w->ne[0], w->ne[1], s->xq, n, y, s->stream);
}

// Whether b can reuse the activations quantized for a (same input, same format).
static int same_act(const gweight *a, const gweight *b) {
    return !st_cuda_matvec_float_supported(a->type) && st_cuda_act_format(a->type) == st_cuda_act_format(b->type);
}

// The embeddings of the n tokens in d_tokens into s->x (enqueued on the session's stream).
static int embed_tokens(st_gpu_session *s, int n) {
    const st_gpu_model *g = s->g;
    const st_hparams *hp = &g->m->hp;
    return st_cuda_get_rows(s->x, g->token_embd.d, g->token_embd.type, g->token_embd.row_bytes, hp->n_vocab,
                            s->d_tokens, n, (int)hp->n_embd, s->stream);
}

// Layer l's QK-norm and RoPE of s->q and s->k for n tokens from position d_pos, and the K/V store into its cache.
static int qk_rope_kv(st_gpu_session *s, const glayer *L, uint32_t l, int n) {
    const st_hparams *hp = &s->g->m->hp;
    const int hd = (int)hp->head_dim_k, neox = hp->rope_type == ST_ROPE_NEOX;
    return st_cuda_qk_norm_rope_kv(s->q, s->k, s->v, L->q_norm, L->k_norm, s->k_cache[l], s->v_cache[l], s->kv_f16,
                                   s->d_pos, n, (int)hp->n_head, (int)hp->n_head_kv, hd, (int)hp->n_rot,
                                   hp->rms_eps, s->rope_cs, neox, s->stream);
}

// Whether rmsnorm_act can write rows of n elements in the activation format of weights of `type`.
static int norm_act_ok(int64_t n, int type) {
    const int fmt = st_cuda_act_format(type);
    return fmt >= 0 && n % 32 == 0 && n <= 12288 && (fmt != ST_TYPE_Q8_K || n % 256 == 0);
}

// Whether layer L's attention input takes the fused path: RMSNorm + quantization in one kernel, then Q, K and V in
// one launch from the shared quantized input (one token).
static int fused_qkv(const st_gpu_session *s, const glayer *L, int n) {
    const int64_t d = s->g->m->hp.n_embd;
    return s->fused && n == 1 && st_cuda_dec_supported(L->wq.type) && st_cuda_dec_supported(L->wk.type) &&
           st_cuda_dec_supported(L->wv.type) && same_act(&L->wq, &L->wk) && same_act(&L->wq, &L->wv) &&
           norm_act_ok(d, L->wq.type);
}

// Whether layer L's MoE FFN takes the fused path (decode.h): RMSNorm + residual + quantization, router + top-k,
// gate/up GLU + quantization, down + weighted sum + residual: four launches for n <= SMALL_BATCH tokens.
static int fused_moe(const st_gpu_session *s, const glayer *L, int n) {
    const st_hparams *hp = &s->g->m->hp;
    const int64_t d = hp->n_embd, F = hp->n_ff_exp;
    const int dfmt = st_cuda_act_format(L->down_exps.type);
    return s->fused && n <= SMALL_BATCH && L->experts && st_cuda_matvec_float_supported(L->router.type) &&
           st_cuda_dec_supported(L->gate_exps.type) && L->up_exps.type == L->gate_exps.type &&
           st_cuda_dec_supported(L->down_exps.type) && norm_act_ok(d, L->gate_exps.type) && d % 4 == 0 &&
           hp->n_expert <= 512 && hp->n_expert_used >= 1 && hp->n_expert_used <= 32 && F % 32 == 0 &&
           (dfmt != ST_TYPE_Q8_K || F % 256 == 0);
}

// Whether layer L's one-token attention takes st_cuda_attn_dec with the O projection's input quantized in it, O
// then by st_cuda_mmvq_multi (both PDL launches).
static int fused_attn(const st_gpu_session *s, const glayer *L, int n) {
    const st_hparams *hp = &s->g->m->hp;
    return s->fused && s->attn_v2 && n == 1 && st_cuda_dec_supported(L->wo.type) &&
           st_cuda_attn_dec_supported((int)hp->head_dim_k, (int)hp->n_head, (int)hp->n_head_kv,
                                      st_cuda_act_format(L->wo.type)) &&
           L->wo.ne[0] == (int64_t)hp->n_head * hp->head_dim_k;
}

// Hybrid lookahead prefetch (gpu_hybrid.h): after layer l's FFN norm, a side branch copies layer l+1's likely
// experts into VRAM (l+1 must be an MoE layer with a float router).
static int prefetch_next(st_gpu_session *s, uint32_t l, cudaStream_t st) {
    const st_gpu_model *g = s->g;
    if (!st_hybrid_prefetch_on(g->hy) || l + 1 >= g->m->hp.n_layer) return 0;
    const glayer *N = &g->layers[l + 1];
    if (!N->experts || !st_cuda_matvec_float_supported(N->router.type)) return 0;
    return st_hybrid_prefetch(g->hy, l, N->router.type, N->router.d, s->xn, st);
}

// STRATA_DUMP_ACT (engine/actdump.h): the residual stream of n tokens after layer l's attention ('a') or FFN ('f')
// into the dump file. Synchronizes the stream: only ever called outside graph capture (no graphs while dumping).
static int dump_act(st_gpu_session *s, uint32_t l, char point, int n) {
    if (!s->actdump) return 0;
    const int64_t d = s->g->m->hp.n_embd;
    cudaError_t e = cudaMemcpyAsync(s->h_dump, s->x, sizeof(float) * (size_t)n * (size_t)d, cudaMemcpyDeviceToHost,
                                    s->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess) return st_cuda_check_at(e, "STRATA_DUMP_ACT copy", __FILE__, __LINE__);
    st_actdump_write(s->actdump, (int)l, point, s->n_past, n, d, s->h_dump);
    return 0;
}

// Whether this one-token step (at position n_past) takes the attention in 8-warp blocks (ATTN_WIDE_FROM).
static int attn_wide(const st_gpu_session *s) {
    return s->attn_wide_from > 0 && s->n_past + 1 >= s->attn_wide_from;
}

// STRATA_DEC_SKIP bits (timing experiment): the one-token fused step leaves these launches out.
enum {
    DEC_SKIP_ATTN_NORM = 1, DEC_SKIP_QKV = 2, DEC_SKIP_ROPE = 4, DEC_SKIP_ATTN = 8, DEC_SKIP_O = 16,
    DEC_SKIP_FFN_NORM = 32, DEC_SKIP_ROUTER = 64, DEC_SKIP_GLU = 128, DEC_SKIP_DOWN = 256, DEC_SKIP_HEAD = 512
};

// One step of n <= SMALL_BATCH tokens whose ids are in d_tokens and first position in d_pos. Enqueues only
// (capturable): no host synchronisation, no allocation. Layers whose types allow it take the fused decode
// kernels (decode.h: 9 launches per MoE layer instead of 18, most of them PDL launches whose start overlaps the
// previous kernel's tail); the rest goes operator by operator.
static int step(st_gpu_session *s, int n, int out_first, int out_rows) {
    st_gpu_model *g = s->g;
    st_cuda_ctx *c = &g->ctx;
    const st_hparams *hp = &g->m->hp;
    cudaStream_t st = s->stream;
    int d = (int)hp->n_embd, hd = (int)hp->head_dim_k, K = (int)hp->n_expert_used;
    float scale = 1.0f / sqrtf((float)hd);
    const unsigned skip = n == 1 ? s->dec_skip : 0;
    const unsigned dup = n == 1 ? s->dec_dup : 0;
#define SKIPPED(bit) (skip & (bit))
// A launch of kernel class `bit`: left out (STRATA_DEC_SKIP), or issued twice (STRATA_DEC_DUP: the second, warm
// instance's cost against the knockout's full share tells the launch's fixed cost from its work); nonzero on error.
#define RUN(bit, call) (SKIPPED(bit) ? 0 : ((call) || ((dup & (bit)) && (call))))
    if (embed_tokens(s, n) || (n == 1 && g->hy && st_hybrid_step_begin(g->hy, st))) return -1;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        glayer *L = &g->layers[l];
        if (l > 0 && dump_act(s, l - 1, 'f', n)) return -1;  // (the FFN paths below end in `continue`)
        if (fused_qkv(s, L, n)) {
            const st_cuda_dec_mat m[3] = {{L->wq.type, L->wq.d, L->wq.ne[1], s->q, NULL},
                                          {L->wk.type, L->wk.d, L->wk.ne[1], s->k, NULL},
                                          {L->wv.type, L->wv.d, L->wv.ne[1], s->v, NULL}};
            if (RUN(DEC_SKIP_ATTN_NORM, st_cuda_rmsnorm_act(NULL, s->xq, st_cuda_act_format(L->wq.type), s->x, NULL,
                                                            L->attn_norm, n, d, hp->rms_eps, st)) ||
                RUN(DEC_SKIP_QKV, st_cuda_mmvq_multi(m, 3, d, s->xq, st)))
                return -1;
        } else {
            if (st_cuda_rmsnorm(s->xn, NULL, s->x, NULL, L->attn_norm, n, d, hp->rms_eps, st)) return -1;
            if (mv(s, &L->wq, s->xn, n, s->q, 0) || mv(s, &L->wk, s->xn, n, s->k, same_act(&L->wq, &L->wk)) ||
                mv(s, &L->wv, s->xn, n, s->v, same_act(&L->wk, &L->wv)))
                return -1;
        }
        const int attn_fused = fused_attn(s, L, n);
        // One token: QK-norm + RoPE + the K/V store inside the attention launch (decode.h st_cuda_attn_dec_ex's rope)
        const int rope_in_attn = attn_fused && s->rope_attn && !skip && !dup &&
                                 st_cuda_attn_dec_rope_supported(hd, (int)hp->n_rot, s->kv_f16);
        if (!rope_in_attn && RUN(DEC_SKIP_ROPE, qk_rope_kv(s, L, l, n))) return -1;
        // One token all in VRAM: the FFN norm folded into the router launch (decode.h st_cuda_router_fold), the
        // residual add into the O launch; bit for bit the separate norm (STRATA_FFN_FOLD=0: the separate launch).
        const int ffn_fold = n == 1 && s->ffn_fold && !skip && !dup && !g->hy && !s->fixed_ids && !s->router_norm &&
                             s->glu_route && hp->n_expert && fused_moe(s, L, n) && attn_fused &&
                             !((uintptr_t)L->ffn_norm & 15) &&
                             st_cuda_router_fold_supported(L->router.type, d, (int)hp->n_expert,
                                                           st_cuda_act_format(L->gate_exps.type));
        if (attn_fused) {
            // Attention with the O projection's input quantization fused in, then O from that row (PDL launches).
            const st_cuda_dec_mat mo = {L->wo.type, L->wo.d, L->wo.ne[1], ffn_fold ? s->x : s->ffn_out,
                                        ffn_fold ? s->x : NULL};
            const st_cuda_attn_rope rope = {s->k, s->v, L->q_norm, L->k_norm, s->rope_cs, hp->rms_eps,
                                            (int)hp->n_rot, hp->rope_type == ST_ROPE_NEOX};
            if (RUN(DEC_SKIP_ATTN, st_cuda_attn_dec_ex(s->attn, s->xq, st_cuda_act_format(L->wo.type), s->q,
                                                       s->k_cache[l], s->v_cache[l], s->kv_f16, s->d_pos,
                                                       (int)hp->n_head, (int)hp->n_head_kv, hd, scale, s->n_split2,
                                                       s->attn_ws2, rope_in_attn ? &rope : NULL, attn_wide(s), st)) ||
                RUN(DEC_SKIP_O, st_cuda_mmvq_multi(&mo, 1, L->wo.ne[0], s->xq, st)))
                return -1;
        } else {
            int rc = n == 1 ? st_cuda_attn_decode(s->attn, s->q, s->k_cache[l], s->v_cache[l], s->kv_f16, s->d_pos,
                                                  (int)hp->n_head, (int)hp->n_head_kv, hd, scale, s->n_split,
                                                  s->attn_ws, st)
                            : st_cuda_attn_prefill(s->attn, s->q, s->k_cache[l], s->v_cache[l], s->kv_f16, s->d_pos,
                                                   n, (int)hp->n_head, (int)hp->n_head_kv, hd, scale, st);
            if (rc || mv(s, &L->wo, s->attn, n, s->ffn_out, 0)) return -1;
        }
        if (hp->n_expert && fused_moe(s, L, n)) {
            // x += attention output; xn = ffn_norm(x) (f32 for the router, quantized for gate/up); then
            // x += sum_k w_k down_k(GLU_k(xn)), the down input quantized by the GLU kernel.
            const int F = (int)hp->n_ff_exp, E = (int)hp->n_expert;
            const int afmt = st_cuda_act_format(L->gate_exps.type);
            // One token all in VRAM (no experiment on): the router launch ends with the logits and the GLU launch
            // takes the route (no fence / counter tail between them), bit for bit the router_topk + moe_glu_q pair.
            const int route_in_glu = n == 1 && s->glu_route && !s->fixed_ids && !skip && !dup && !s->router_norm;
            const int glu_routes = route_in_glu && !g->hy;
            // Hybrid without the prefetch's branch (gpu_hybrid.h st_hybrid_glu_side): the same, a side block of the
            // GLU launch counting (classifying and ringing with CPU misses) in place of the router's tail.
            const int hy_side = route_in_glu && g->hy && st_hybrid_glu_side(g->hy);
            // Hybrid: the router's last block counts the route (hits, misses, the prefetch's progress word) where
            // no experiment changes or repeats the ids after it; else a count launch of its own.
            st_hy_count_args hc;
            const int count_in_router = g->hy && !s->hy_count_launch && !s->fixed_ids && !s->router_norm &&
                                        !glu_routes && !hy_side && !SKIPPED(DEC_SKIP_ROUTER) &&
                                        !(dup & DEC_SKIP_ROUTER);
            if (count_in_router || hy_side) st_hybrid_count_args(g->hy, l, 1, &hc);
            // Hybrid split folded into the router and down launches (STRATA_HY_SPLIT_FUSED=1): the router's last
            // block classifies after its count.
            const int routed_split = n == 1 && count_in_router && st_hybrid_split_fused(g->hy);
            st_hy_split_args sa;
            if (routed_split) st_hybrid_split_args(g->hy, l, s->xn, &sa);
            // The side block with the prefetch's branch on (STRATA_HY_SNAP): the router launch snapshots the layer's
            // table and sets the progress word (cuda/hybrid.h st_hy_snap_args)
            st_hy_snap_args sn;
            const st_hy_snap_args *snap = hy_side && st_hybrid_snap_args(g->hy, l, &sn) ? &sn : NULL;
            if (ffn_fold) {
                if (st_cuda_router_fold(L->router.type, L->router.d, d, E, s->x, L->ffn_norm, hp->rms_eps, s->xq, afmt,
                                        s->router, st))
                    return -1;
            } else if (n == 1 && s->router_norm && !skip) {
                // A/B: the norm inside the router launch (decode.h st_cuda_router_norm_topk), bit for bit the same
                if (st_cuda_router_norm_topk(L->router.type, L->router.d, d, E, s->x, s->ffn_out, L->ffn_norm,
                                             hp->rms_eps, s->xn, s->xq, afmt, K, hp->expert_weights_norm, s->router,
                                             s->d_ids, s->d_wts, s->dec_counters, st) ||
                    (g->hy && prefetch_next(s, l, st)))
                    return -1;
            } else if (RUN(DEC_SKIP_FFN_NORM, st_cuda_rmsnorm_act(s->xn, s->xq, afmt, s->x, s->ffn_out, L->ffn_norm,
                                                                  n, d, hp->rms_eps, st)) ||
                       (n == 1 && g->hy && prefetch_next(s, l, st)) ||
                       (glu_routes || hy_side
                            ? st_cuda_router_logits(L->router.type, L->router.d, d, E, s->xn, s->router, snap, st)
                        : routed_split
                            ? st_cuda_router_topk_split(L->router.type, L->router.d, d, E, s->xn, K,
                                                        hp->expert_weights_norm, s->router, s->d_ids, s->d_wts,
                                                        s->dec_counters, &hc, &sa, st)
                            : RUN(DEC_SKIP_ROUTER,
                                  st_cuda_router_topk_count(L->router.type, L->router.d, d, E, s->xn, n, K,
                                                            hp->expert_weights_norm, s->router, s->d_ids, s->d_wts,
                                                            s->dec_counters, count_in_router ? &hc : NULL, st)))) {
                return -1;
            }
            if (n == 1 && s->fixed_ids &&
                cudaMemcpyAsync(s->d_ids, s->fixed_ids + (size_t)l * K, sizeof(int32_t) * K, cudaMemcpyDeviceToDevice,
                                st) != cudaSuccess)
                return st_err("STRATA_DEC_FIXED_ROUTE: copy failed");
            if (dump_act(s, l, 'a', n)) return -1;  // x = x + attention output (the FFN norm wrote it back)
            if (g->hy && !count_in_router && !hy_side && st_hybrid_count(g->hy, l, s->d_ids, n * K, 1, st))
                return -1;  // hybrid: hit/miss counters
            if (n == 1 && st_hybrid_cpu_split(g->hy)) {
                // hybrid --pcie-frac < 1: a share of the misses computed by CPU workers in parallel (gpu_hybrid.h)
                if (st_hybrid_moe_decode(g->hy, l, L->gate_exps.type, L->down_exps.type, s->xn, s->xq, s->d_ids,
                                         s->d_wts, s->ffn_a, s->xq2, s->dec_counters, s->x,
                                         hy_side ? 2 : routed_split, s->router, hp->expert_weights_norm, st))
                    return -1;
                continue;
            }
            const int dfmt = st_cuda_act_format(L->down_exps.type);
            // Every weight in VRAM (no hybrid): the table is affine (build_expert_tables), so the routing GLU
            // launch may address its expert's rows without it (decode.h st_cuda_glu_affine).
            const long long gu_stride = (long long)L->gate_exps.ne[1] * (long long)L->gate_exps.row_bytes;
            const long long dn_stride = (long long)L->down_exps.ne[1] * (long long)L->down_exps.row_bytes;
            const st_cuda_glu_affine aff = {L->gate_exps.d, L->up_exps.d, gu_stride, L->down_exps.d, dn_stride,
                                            dn_stride};  // (the down matrices: GLU_SIDE_DOWN_PF builds)
            const int aff_ok = L->up_exps.type == L->gate_exps.type && L->up_exps.ne[1] == L->gate_exps.ne[1] &&
                               gu_stride % 16 == 0;  // (as the table's entries are: 16-byte aligned)
            if ((glu_routes ? st_cuda_moe_route_glu_q(L->gate_exps.type, (const void *const *)L->experts, E, d, F,
                                                      s->xq, s->router, hp->expert_weights_norm, K, s->d_ids, s->d_wts,
                                                      s->ffn_a, s->xq2, dfmt, s->dec_counters, aff_ok ? &aff : NULL, st)
                 : hy_side ? st_cuda_moe_route_glu_hy(L->gate_exps.type, (const void *const *)L->experts, E, d, F,
                                                      s->xq, s->router, hp->expert_weights_norm, K, s->d_ids, s->d_wts,
                                                      s->ffn_a, s->xq2, dfmt, s->dec_counters, &hc, NULL, st)
                            : RUN(DEC_SKIP_GLU, st_cuda_moe_glu_q(L->gate_exps.type, (const void *const *)L->experts,
                                                                  E, d, F, s->xq, s->d_ids, n, K, s->ffn_a, s->xq2,
                                                                  dfmt, s->dec_counters, st))) ||
                RUN(DEC_SKIP_DOWN, st_cuda_moe_down_sum(L->down_exps.type, (const void *const *)L->experts, E, d, F,
                                                        s->xq2, s->d_ids, s->d_wts, n, K, s->x, s->x, st)))
                return -1;
            continue;
        }
        // x += attention output; xn = ffn_norm(x)
        if (st_cuda_rmsnorm(s->xn, NULL, s->x, s->ffn_out, L->ffn_norm, n, d, hp->rms_eps, st) ||
            dump_act(s, l, 'a', n))
            return -1;
        if (hp->n_expert == 0) {
            int ff = (int)hp->n_ff;
            if (mv(s, &L->ffn_gate, s->xn, n, s->ffn_a, 0) ||
                mv(s, &L->ffn_up, s->xn, n, s->ffn_b, same_act(&L->ffn_gate, &L->ffn_up)) ||
                st_cuda_swiglu(s->ffn_a, NULL, s->ffn_a, s->ffn_b, n, ff, st) ||
                mv(s, &L->ffn_down, s->ffn_a, n, s->ffn_out, 0) ||
                st_cuda_add(s->x, s->x, s->ffn_out, (int64_t)n * d, st))
                return -1;
        } else {
            int F = (int)hp->n_ff_exp, E = (int)hp->n_expert, sel = n * K;
            if (st_cuda_matvec_float(L->router.type, L->router.d, d, E, s->xn, n, s->router, st) ||
                st_cuda_moe_route(s->d_ids, s->d_wts, s->router, n, E, K, hp->expert_weights_norm, st))
                return -1;
            if (st_cuda_matvec_float_supported(L->gate_exps.type)) {  // float experts (test models)
                if (st_cuda_matvec_float_ids(L->gate_exps.type, L->gate_exps.d, d, F, s->xn, s->d_ids, s->d_xrow, sel,
                                             s->ffn_a, st) ||
                    st_cuda_matvec_float_ids(L->up_exps.type, L->up_exps.d, d, F, s->xn, s->d_ids, s->d_xrow, sel,
                                             s->ffn_b, st) ||
                    st_cuda_swiglu(s->ffn_a, NULL, s->ffn_a, s->ffn_b, sel, F, st))
                    return -1;
            } else if (quant(s, L->gate_exps.type, s->xn, n, d) ||
                       st_cuda_mmvq_ids_glu(c, L->gate_exps.type, L->gate_exps.d, L->up_exps.d, d, F, E, s->xq, n,
                                            s->d_ids, s->d_xrow, sel, s->ffn_a, st)) {
                return -1;
            }
            int rc2 = st_cuda_matvec_float_supported(L->down_exps.type)
                          ? st_cuda_matvec_float_ids(L->down_exps.type, L->down_exps.d, F, d, s->ffn_a, s->d_ids, NULL,
                                                     sel, s->ffn_out, st)
                          : (quant(s, L->down_exps.type, s->ffn_a, sel, F) ||
                             st_cuda_mmvq_ids(c, L->down_exps.type, L->down_exps.d, F, d, E, s->xq, sel, s->d_ids,
                                              NULL, sel, s->ffn_out, st));
            if (rc2 || st_cuda_moe_sum(s->x, s->x, s->ffn_out, s->d_wts, n, K, d, st)) return -1;
        }
    }
    if (dump_act(s, hp->n_layer - 1, 'f', n)) return -1;
#undef RUN
#undef SKIPPED
    if (n == 1 && g->hy && st_hybrid_step_end(g->hy, st)) return -1;
    if (out_rows > 0 && !(skip & DEC_SKIP_HEAD)) {
        float *xo = s->x + (size_t)out_first * d;
        if (out_rows == 1 && s->fused && !st_cuda_matvec_float_supported(g->output.type) &&
            norm_act_ok(d, g->output.type)) {
            // One row: the final norm writes the LM head's quantized input itself (a PDL launch; bit for bit
            // st_cuda_rmsnorm + the quantization, which were two plain launches).
            if (st_cuda_rmsnorm_act(NULL, s->xq, st_cuda_act_format(g->output.type), xo, NULL,
                                    g->output_norm, 1, d, hp->rms_eps, st) ||
                st_cuda_mmvq(c, g->output.type, g->output.d, g->output.ne[0], g->output.ne[1], s->xq, 1, s->logits,
                             st))
                return -1;
        } else if (st_cuda_rmsnorm(s->xn, NULL, xo, NULL, g->output_norm, out_rows, d, hp->rms_eps, st) ||
                   mv(s, &g->output, s->xn, out_rows, s->logits, 0)) {
            return -1;
        }
    }
    return 0;
}

static int gemm(st_gpu_session *s, const gweight *w, const float *x, int n, float *y) {
    return st_cuda_gemm(s->g->gemm, ST_GEMM_AUTO, w->type, w->d, w->ne[0], w->ne[1], x, n, y, s->gemm_scratch,
                        s->step_scratch_bytes, s->stream);
}

// Prefill attention of layer l: the tensor-core flash kernel for f16 caches (head_dim 64/128), else the SIMT one.
// STRATA_ATTN_SIMT=1 forces the SIMT kernel (A/B timing).
static int attn_prefill(st_gpu_session *s, uint32_t l, int n, float scale) {
    const st_hparams *hp = &s->g->m->hp;
    const int hd = (int)hp->head_dim_k, nh = (int)hp->n_head, nkv = (int)hp->n_head_kv;
    if (st_cuda_attn_prefill_tc_supported(hd, nh, nkv, s->kv_f16) && !getenv("STRATA_ATTN_SIMT"))
        return st_cuda_attn_prefill_tc(s->attn, s->q, s->k_cache[l], s->v_cache[l], s->d_pos, n, nh, nkv, hd, scale,
                                       s->stream);
    return st_cuda_attn_prefill(s->attn, s->q, s->k_cache[l], s->v_cache[l], s->kv_f16, s->d_pos, n, nh, nkv, hd,
                                scale, s->stream);
}

// One chunk of g->prefill_chunk >= n > SMALL_BATCH tokens through matrix-matrix products (tensor cores): the same
// operators as step(), with GEMMs for the projections and the grouped MoE.
static int step_prefill(st_gpu_session *s, int n, int out_first, int out_rows) {
    st_gpu_model *g = s->g;
    const st_hparams *hp = &g->m->hp;
    cudaStream_t st = s->stream;
    int d = (int)hp->n_embd, hd = (int)hp->head_dim_k;
    float scale = 1.0f / sqrtf((float)hd);
    if (embed_tokens(s, n)) return -1;
    // A scratch lent from the prefetch's slots: the step claims (drops the copies in) only the part it uses, and
    // its calls are held to that part (they fail, naming the sizes, rather than write past it).
    s->step_scratch_bytes = s->gemm_scratch_lent && st_hybrid_scratch_step(g->hy)
                                ? gemm_scratch_need(g, n, out_rows > SMALL_BATCH ? out_rows : 0)
                                : s->gemm_scratch_bytes;
    if (s->step_scratch_bytes > s->gemm_scratch_bytes) s->step_scratch_bytes = s->gemm_scratch_bytes;
    if (g->hy && st_hybrid_prefill_begin(g->hy, n, s->gemm_scratch_lent ? s->step_scratch_bytes : 0, &s->hstats, st))
        return -1;  // hybrid: stage layers 0 (and 1)
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        glayer *L = &g->layers[l];
        if (st_cuda_rmsnorm(s->xn, NULL, s->x, NULL, L->attn_norm, n, d, hp->rms_eps, st) ||
            gemm(s, &L->wq, s->xn, n, s->q) || gemm(s, &L->wk, s->xn, n, s->k) || gemm(s, &L->wv, s->xn, n, s->v) ||
            qk_rope_kv(s, L, l, n) ||
            attn_prefill(s, l, n, scale) ||
            gemm(s, &L->wo, s->attn, n, s->ffn_out) ||
            st_cuda_rmsnorm(s->xn, NULL, s->x, s->ffn_out, L->ffn_norm, n, d, hp->rms_eps, st) ||
            dump_act(s, l, 'a', n))  // x = x + attention output (the FFN norm wrote it back)
            return -1;
        if (hp->n_expert == 0) {
            int ff = (int)hp->n_ff;
            if (gemm(s, &L->ffn_gate, s->xn, n, s->ffn_a) || gemm(s, &L->ffn_up, s->xn, n, s->ffn_b) ||
                st_cuda_swiglu(s->ffn_a, NULL, s->ffn_a, s->ffn_b, n, ff, st) ||
                gemm(s, &L->ffn_down, s->ffn_a, n, s->ffn_out))
                return -1;
        } else {
            int E = (int)hp->n_expert, K = (int)hp->n_expert_used;
            if (st_cuda_matvec_float(L->router.type, L->router.d, d, E, s->xn, n, s->router, st) ||
                st_cuda_moe_route(s->d_ids, s->d_wts, s->router, n, E, K, hp->expert_weights_norm, st) ||
                (g->hy ? st_hybrid_moe_prefill(g->hy, g->gemm, prefill_moe_engine(g, L), l, s->xn, s->d_ids,
                                               s->d_wts, n, s->ffn_out, s->gemm_scratch, s->step_scratch_bytes, st)
                       : st_cuda_moe_ffn(g->gemm, moe_engine(L), L->gate_exps.type, L->gate_exps.d, L->up_exps.d,
                                         L->down_exps.type, L->down_exps.d, d, hp->n_ff_exp, E, s->xn, s->d_ids,
                                         s->d_wts, n, K, s->ffn_out, s->gemm_scratch, s->step_scratch_bytes, st)))
                return -1;
        }
        if (st_cuda_add(s->x, s->x, s->ffn_out, (int64_t)n * d, st) || dump_act(s, l, 'f', n)) return -1;
    }
    if (out_rows > 0) {
        if (st_cuda_rmsnorm(s->xn, NULL, s->x + (size_t)out_first * d, NULL, g->output_norm, out_rows, d, hp->rms_eps,
                            st))
            return -1;
        if (out_rows > SMALL_BATCH ? gemm(s, &g->output, s->xn, out_rows, s->logits)
                                   : mv(s, &g->output, s->xn, out_rows, s->logits, 0))
            return -1;
    }
    return 0;
}

// Runs the one-token step through a CUDA graph captured on the second use (the first runs eagerly so every kernel
// is loaded before capture). Falls back to eager launches if capture fails; STRATA_NO_GRAPH=1 forces that (A/B).
// A hybrid session has one graph per state of its two gates (gpu_hybrid.h: the prefetch's branch, the CPU split).
static int step_one(st_gpu_session *s) {
    cudaStream_t st = s->stream;
    if (!s->warm) {
        s->warm = 1;
        return step(s, 1, 0, 1);
    }
    const int gi = st_hybrid_prefetch_gated(s->g->hy) + 2 * st_hybrid_split_gated(s->g->hy)  // (NULL: 0 both)
                   + 4 * attn_wide(s);
    if (!s->graph_ready[gi] && !s->graph_failed && getenv("STRATA_NO_GRAPH") == NULL && !s->actdump) {
        cudaGraph_t graph;
        if (cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
            int rc = step(s, 1, 0, 1);
            cudaError_t e = cudaStreamEndCapture(st, &graph);
            if (rc == 0 && e == cudaSuccess && cudaGraphInstantiate(&s->graph[gi], graph, 0) == cudaSuccess) {
                s->graph_ready[gi] = 1;
            } else {
                s->graph_failed = 1;
                st_warn("CUDA graph capture failed (%s); decoding with eager launches",
                        rc ? st_errmsg() : cudaGetErrorString(e));
                cudaGetLastError();
            }
            if (e == cudaSuccess) cudaGraphDestroy(graph);
        } else {
            s->graph_failed = 1;
            cudaGetLastError();
        }
    }
    if (s->graph_ready[gi]) {
        cudaError_t e = cudaGraphLaunch(s->graph[gi], st);
        if (e != cudaSuccess) return st_cuda_check_at(e, "cudaGraphLaunch", __FILE__, __LINE__);
        return 0;
    }
    return step(s, 1, 0, 1);
}

// st_gpu_session_eval; with `device_logits`, the last token's logits are computed into s->logits row 0 and stay
// there (logits must be NULL): the pipelined generation samples them on the device.
static int eval_tokens(st_gpu_session *s, const int32_t *tokens, int64_t n, float *logits, int all_logits,
                       int device_logits) {
    st_gpu_model *g = s->g;
    st_cuda_ctx *c = &g->ctx;
    const st_hparams *hp = &g->m->hp;
    if (n <= 0) return 0;
    if (st_model_check_batch(g->m, tokens, n, s->n_past, s->n_ctx)) return -1;
    int64_t start = s->n_past;
    size_t nv = hp->n_vocab;
    int64_t n_dec = 0, n_pre = 0;  // tokens through step() / step_prefill() (hybrid counters)
    // all-position logits: at most LOGITS_ROWS rows a step, so the logits buffer stays within the plan
    const int chunk = all_logits && logits && g->prefill_chunk > LOGITS_ROWS ? LOGITS_ROWS : g->prefill_chunk;
    if (g->hy && st_hybrid_before_eval(g->hy, s->stream)) return -1;
    for (int64_t off = 0; off < n;) {
        int64_t left = n - off;
        int big = left >= s->gemm_min && left > SMALL_BATCH;
        // Big inputs in equal steps of at most `chunk` (17,000 tokens: 5 x 3,400, not 4 x 4,096 + 616): in hybrid
        // placement every step stages nearly all non-resident experts, so a small last step costs as much PCIe
        // time as a full one; with every weight in VRAM equal steps keep the GEMMs at their efficient sizes.
        const int64_t n_steps = (left + chunk - 1) / chunk;
        int c_n = (int)(big ? (left + n_steps - 1) / n_steps : (left < SMALL_BATCH ? left : SMALL_BATCH));
        int last_chunk = off + c_n == n;
        int want = (logits && (all_logits || last_chunk)) || (device_logits && last_chunk);
        int out_first = all_logits ? 0 : c_n - 1, out_rows = want ? (all_logits ? c_n : 1) : 0;
        if (out_rows > s->logits_rows) {  // all-position logits of a big chunk: grow once (outside any capture)
            drop_decode_graphs(s);
            st_cuda_free(c, s->logits);
            s->logits = st_cuda_alloc(c, sizeof(float) * nv * (size_t)out_rows, "logits");
            s->logits_rows = s->logits ? out_rows : 0;
            if (!s->logits) {
                s->n_past = start;
                return -1;
            }
        }
        memcpy(s->h_io, tokens + off, sizeof(int32_t) * (size_t)c_n);
        s->h_io[g->prefill_chunk] = (int32_t)s->n_past;
        if (cudaMemcpyAsync(s->d_tokens, s->h_io, sizeof(int32_t) * (size_t)c_n, cudaMemcpyHostToDevice,
                            s->stream) != cudaSuccess ||
            cudaMemcpyAsync(s->d_pos, s->h_io + g->prefill_chunk, sizeof(int32_t), cudaMemcpyHostToDevice, s->stream) !=
                cudaSuccess) {
            s->n_past = start;
            return st_err("copying tokens to the GPU: %s", cudaGetErrorString(cudaGetLastError()));
        }
        // The captured graph always computes the last token's logits; other one-token steps go eagerly.
        int rc = big ? step_prefill(s, c_n, out_first, out_rows)
                     : (c_n == 1 && (out_rows == 1 || !want)) ? step_one(s) : step(s, c_n, out_first, out_rows);
        if (rc == 0 && want && logits) {
            float *dst = all_logits ? logits + (size_t)off * nv : logits;
            rc = st_cuda_memcpy_d2h(c, dst, s->logits, sizeof(float) * nv * (size_t)out_rows, s->stream);
        }
        if (rc == 0) rc = st_cuda_sync(c, s->stream);
        if (rc) {
            s->n_past = start;
            return -1;
        }
        memcpy(s->tokens + s->n_past, tokens + off, sizeof(int32_t) * (size_t)c_n);
        s->n_past += c_n;
        off += c_n;
        *(big ? &n_pre : &n_dec) += c_n;
    }
    if (g->hy) return st_hybrid_after_eval(g->hy, &s->hstats, n_dec, n_pre, 0, s->stream);
    return 0;
}

int st_gpu_session_eval(st_gpu_session *s, const int32_t *tokens, int64_t n, float *logits, int all_logits) {
    return eval_tokens(s, tokens, n, logits, all_logits, 0);
}

// ---- pipelined generation -----------------------------------------------------------------------------------------
// Each step's sample stays in d_tokens[0], where the next step's embedding reads it, and the sampler's last kernel
// also writes it into a pinned slot the host reads one step later: the host queues step i + 1 before it waits for
// token i, so the GPU never waits for the host between tokens (no logits copy, no host sampling, no launch latency
// on the critical path; between two steps only the sampler and st_cuda_set_step's one-thread kernel run).

// Queues the sample of s->logits row 0 into d_tokens[0] and its copy into the next slot.
static int gen_sample(st_gpu_session *s) {
    cudaStream_t st = s->stream;
    const int slot = s->gen_head;
    // The sampler's last kernel writes the token into the pinned slot itself (no copy operation between steps).
    if (st_cuda_sample_to(s->d_tokens, s->h_gen + 4 * slot, s->logits, (int)s->g->m->hp.n_vocab, &s->gen_p,
                          s->sample_ws, NULL, st))
        return -1;
    if (cudaEventRecord(s->gen_ev[slot], st) != cudaSuccess)
        return st_cuda_check_at(cudaGetLastError(), "queueing the sampled token's event", __FILE__, __LINE__);
    s->gen_head = (slot + 1) % GEN_RING;
    s->gen_n++;
    return 0;
}

int st_gpu_gen_begin(st_gpu_session *s, const int32_t *tokens, int64_t n, const strata_sampler_params *p) {
    st_cuda_ctx *c = &s->g->ctx;
    if (n <= 0) return st_err("generation needs at least one token to evaluate first");
    if (!s->h_gen) {
        if (cudaMallocHost((void **)&s->h_gen, sizeof(int32_t) * 4 * GEN_RING) != cudaSuccess) {
            s->h_gen = NULL;
            return st_err("cannot allocate pinned host memory for generation");
        }
        for (int i = 0; i < GEN_RING; i++)
            if (cudaEventCreateWithFlags(&s->gen_ev[i], cudaEventDisableTiming) != cudaSuccess)
                return st_cuda_check_at(cudaGetLastError(), "cudaEventCreate", __FILE__, __LINE__);
    }
    if (!s->sample_ws) {
        const size_t b = st_cuda_sampler_workspace_bytes((int)s->g->m->hp.n_vocab);
        s->sample_ws = st_cuda_alloc(c, b, "sampler workspace");
        if (!s->sample_ws) return -1;
    }
    if (st_cuda_sampler_init(s->sample_ws, (int)s->g->m->hp.n_vocab)) return -1;  // the draw counter: seed's start
    if (st_sampler_has_penalties(p))
        return st_err("the device sampler has no penalties (generate with the host sampler)");
    s->gen_p = (st_cuda_sample_params){p->temperature, p->top_k, p->top_p, p->min_p, p->seed};
    s->gen_head = 0;
    s->gen_n = 0;
    if (eval_tokens(s, tokens, n, NULL, 0, 1)) return -1;
    return gen_sample(s);
}

int st_gpu_gen_push(st_gpu_session *s, const int32_t *forced) {
    st_gpu_model *g = s->g;
    cudaStream_t st = s->stream;
    if (s->gen_n >= GEN_RING) return st_err("generation: %d samples queued and none taken", GEN_RING);
    if (s->n_past >= s->n_ctx) return st_err("context full (%lld tokens)", (long long)s->n_ctx);
    if (forced && (*forced < 0 || (uint32_t)*forced >= g->m->hp.n_vocab))
        return st_err("generation: forced token %d is not in the vocabulary (%u)", *forced, g->m->hp.n_vocab);
    // The position and a forced input by one kernel's arguments (not two copies from host memory)
    if (st_cuda_set_step(s->d_pos, (int32_t)s->n_past, s->d_tokens, forced ? *forced : -1, st)) return -1;
    if (g->hy && st_hybrid_before_eval(g->hy, st)) return -1;
    if (step_one(s) || gen_sample(s)) return -1;
    s->tokens[s->n_past] = forced ? *forced : -1;  // a sampled input: the caller names it (st_gpu_gen_end)
    s->n_past++;
    if (g->hy) return st_hybrid_after_eval(g->hy, &s->hstats, 1, 0, 0, st);
    return 0;
}

int st_gpu_gen_pop(st_gpu_session *s, int32_t *token) {
    if (s->gen_n <= 0) return st_err("generation: no sample queued");
    const int slot = (s->gen_head - s->gen_n + GEN_RING) % GEN_RING;
    cudaError_t e = cudaEventSynchronize(s->gen_ev[slot]);
    if (e != cudaSuccess) return st_cuda_check_at(e, "waiting for a sampled token", __FILE__, __LINE__);
    s->gen_n--;
    *token = s->h_gen[4 * slot];
    return 0;
}

void st_gpu_gen_end(st_gpu_session *s, int64_t n_past, const int32_t *tail, int64_t n_tail) {
    s->gen_n = 0;
    if (n_past < s->n_past) s->n_past = n_past < 0 ? 0 : n_past;
    for (int64_t i = 0; i < n_tail; i++)
        if (s->n_past - n_tail + i >= 0) s->tokens[s->n_past - n_tail + i] = tail[i];
}

int st_gpu_session_hybrid_stats(st_gpu_session *s, st_gpu_hybrid_stats *out) {
    if (!s->g->hy) {
        memset(out, 0, sizeof *out);
        return 0;
    }
    if (st_hybrid_after_eval(s->g->hy, &s->hstats, 0, 0, 1, s->stream)) return -1;
    *out = s->hstats;
    return 0;
}
