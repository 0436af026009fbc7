// Shared by the one-launch MoE FFN kernels of a decode token (decode_moe.cu: grid barriers; decode_moe_cl.cu:
// thread-block clusters): the part of their kernel parameters that mirrors st_cuda_dec_moe_args (decode.h), filled on
// the host, and the per-phase clock stamps. CUDA C++ only.
#ifndef STRATA_CUDA_DECODE_MOE_CUH
#define STRATA_CUDA_DECODE_MOE_CUH

#include "cuda/decode.h"
#include "cuda/decode_common.cuh"  // dec_fmt_ok
#include "cuda/quantize_act.h"     // st_cuda_act_format

struct moe_ffn_base {
    float *x;                           // [d] residual stream, read, then written
    const float *add, *norm_w;          // [d] added to x first (or NULL); ffn_norm gains
    float eps;
    int d;
    const void *router;                 // [E][d] F32 / F16 / BF16
    int E, K, norm_topk;
    int gu_type, down_type, gfmt, dfmt; // weight types and their activation formats
    const uint8_t *const *tbl;          // [E][3] expert row pointers
    int F;
    long long gu_row_bytes, dn_row_bytes;
    float *logits;                      // [E] out
    int32_t *ids;                       // [K] out
    float *weights;                     // [K] out
    long long *stamps;                  // NULL, or [grid][ST_DEC_MOE_STAMPS] clock64() per phase boundary
};

static inline void moe_ffn_base_fill(moe_ffn_base &p, const st_cuda_dec_moe_args *a) {
    p.x = a->x, p.add = a->add, p.norm_w = a->norm_w, p.eps = a->eps, p.d = (int)a->n_embd;
    p.router = a->router, p.E = a->n_expert, p.K = a->n_used, p.norm_topk = a->norm_topk;
    p.gu_type = a->gu_type, p.down_type = a->down_type;
    p.gfmt = st_cuda_act_format(a->gu_type), p.dfmt = st_cuda_act_format(a->down_type);
    p.tbl = (const uint8_t *const *)a->table, p.F = (int)a->n_ff;
    p.gu_row_bytes = (long long)st_row_size(a->gu_type, a->n_embd);
    p.dn_row_bytes = (long long)st_row_size(a->down_type, a->n_ff);
    p.logits = a->logits, p.ids = a->ids, p.weights = a->weights;
    p.stamps = a->stamps;
}

// Clock stamp i of this block (thread 0) when the launch asked for stamps; `p` is the kernel's parameter struct.
#define MOE_STAMP(i)                                                                                               \
    do {                                                                                                           \
        if (p.stamps && threadIdx.x == 0) p.stamps[(size_t)blockIdx.x * ST_DEC_MOE_STAMPS + (i)] = clock64();     \
    } while (0)

#endif
