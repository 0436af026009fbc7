// Warp-level tensor-core and async-copy helpers shared by the f16 GEMM (gemm_tc.cuh) and the prefill flash
// attention (attention_tc.cu). CUDA C++ only.
//
// Inline PTX (cp.async, ldmatrix, mma.sync m16n8k16 f16 -> f32) on sm_80+; elsewhere, or with ST_TC_PORTABLE,
// plain loads and shuffles give every lane the same register contents, so the kernels above them are unchanged.
// Fragment layouts (PTX ISA, mma.m16n8k16 with .f16): lane = 4 g + t; A (16 x 16, row-major): a0 = (g, 2t..2t+1),
// a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..); B (16 x 8): b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g);
// C (16 x 8 f32): c0 = (g, 2t), c1 = (g, 2t+1), c2 = (g+8, 2t), c3 = (g+8, 2t+1).
#ifndef STRATA_CUDA_MMA_CUH
#define STRATA_CUDA_MMA_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "cuda/runtime.h"  // ST_WARP_FULL_MASK

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800 && !defined(ST_TC_PORTABLE)
#define ST_TC_PTX 1
#else
#define ST_TC_PTX 0
#endif

// 16 bytes global -> shared, of which the first src_bytes (0..16) are read and the rest zero-filled.
__device__ __forceinline__ void tc_cp16(void *dst, const void *src, int src_bytes) {
#if ST_TC_PTX
    const unsigned s = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(src_bytes) : "memory");
#else
    uint8_t *d = (uint8_t *)dst;
    const uint8_t *p = (const uint8_t *)src;
    for (int i = 0; i < 16; i++) d[i] = i < src_bytes ? p[i] : 0;
#endif
}
__device__ __forceinline__ void tc_cp_commit() {
#if ST_TC_PTX
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
// Waits until at most N committed groups are still in flight (the copies of the calling thread).
template <int N> __device__ __forceinline__ void tc_cp_wait() {
#if ST_TC_PTX
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// Bulk async copies (sm_90, TMA's 1-D form) into shared memory, completed through an mbarrier's transaction
// count: tc_mbar_init once (one thread, then tc_mbar_fence_init and a sync), per use tc_mbar_expect_tx (one thread:
// the arrival plus the bytes to wait for) and any number of tc_bulk_g2s, then tc_mbar_wait on the use's phase parity.
// ST_TC_BULK is 1 where these exist; callers keep another path for the rest.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && ST_TC_PTX
#define ST_TC_BULK 1
__device__ __forceinline__ unsigned tc_smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void tc_mbar_init(uint64_t *bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(tc_smem_u32(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void tc_mbar_fence_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void tc_mbar_expect_tx(uint64_t *bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(tc_smem_u32(bar)), "r"(bytes)
                 : "memory");
}
// bytes: a multiple of 16; dst and src 16-byte aligned.
__device__ __forceinline__ void tc_bulk_g2s(void *dst, const void *src, unsigned bytes, uint64_t *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                     tc_smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(tc_smem_u32(bar))
                 : "memory");
}
// Waits for the phase of the given parity to complete; traps after ~2^26 polls (a lost copy must not hang the
// process: the launch fails and the caller reports it).
__device__ __forceinline__ void tc_mbar_wait(uint64_t *bar, unsigned parity) {
    const unsigned a = tc_smem_u32(bar);
    for (unsigned n = 0;; n++) {
        unsigned done;
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(a), "r"(parity)
                     : "memory");
        if (done) return;
        if (n > (1u << 26)) __trap();
    }
}
// A 2-D TMA tile (cp.async.bulk.tensor) of the box at element coordinates (x, y) of the tensor map at tmap (the
// address of a __grid_constant__ kernel parameter) into dst (aligned as the map's swizzle needs: 1024 bytes for the
// 128-byte swizzle), completing on bar; the box's bytes count in full, out-of-bounds elements as zeros.
__device__ __forceinline__ void tc_tma_2d_g2s(void *dst, const void *tmap, int x, int y, uint64_t *bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
                 "%3}], [%4];\n" ::"r"(tc_smem_u32(dst)),
                 "l"(tmap), "r"(x), "r"(y), "r"(tc_smem_u32(bar))
                 : "memory");
}
// ldmatrix .x4 and .x4.trans from per-lane row addresses the caller computes (lane l: row l % 8 of matrix l / 8),
// for layouts the fixed-stride loaders below do not cover (e.g. a TMA swizzle).
__device__ __forceinline__ void tc_ldsm_x4(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(tc_smem_u32(p))
                 : "memory");
}
__device__ __forceinline__ void tc_ldsm_x4_t(uint32_t (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(tc_smem_u32(p))
                 : "memory");
}
#else
#define ST_TC_BULK 0
#endif

// A fragment of m16n8k16 (16 x 16 halves, rows `ld` halves apart): a0 (row g, k 2t), a1 (g+8, 2t), a2 (g, 2t+8),
// a3 (g+8, 2t+8), each two consecutive halves.
__device__ __forceinline__ void tc_ld_a(uint32_t (&a)[4], const __half *base, int ld) {
    const int lane = threadIdx.x & 31;
#if ST_TC_PTX
    const unsigned s = (unsigned)__cvta_generic_to_shared(base + (lane & 15) * ld + (lane >> 4) * 8);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(s)
                 : "memory");  // orders it after the plain shared-memory stores that filled the tile
#else
    const int g = lane >> 2, t = lane & 3;
    a[0] = *(const uint32_t *)(base + g * ld + 2 * t);
    a[1] = *(const uint32_t *)(base + (g + 8) * ld + 2 * t);
    a[2] = *(const uint32_t *)(base + g * ld + 8 + 2 * t);
    a[3] = *(const uint32_t *)(base + (g + 8) * ld + 8 + 2 * t);
#endif
}
// B fragments of two n8 tiles from token-major rows (token n at base + n * ld, 16 k): b[0], b[1] = tile 0 (tokens
// 0..7: k 2t, k 2t+8, token g), b[2], b[3] = tile 1 (tokens 8..15).
__device__ __forceinline__ void tc_ld_b(uint32_t (&b)[4], const __half *base, int ld) {
    const int lane = threadIdx.x & 31;
#if ST_TC_PTX
    const int m = lane >> 3;
    const unsigned s = (unsigned)__cvta_generic_to_shared(base + ((m >> 1) * 8 + (lane & 7)) * ld + (m & 1) * 8);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                 : "r"(s)
                 : "memory");  // orders it after the plain shared-memory stores that filled the tile
#else
    const int g = lane >> 2, t = lane & 3;
    b[0] = *(const uint32_t *)(base + g * ld + 2 * t);
    b[1] = *(const uint32_t *)(base + g * ld + 8 + 2 * t);
    b[2] = *(const uint32_t *)(base + (g + 8) * ld + 2 * t);
    b[3] = *(const uint32_t *)(base + (g + 8) * ld + 8 + 2 * t);
#endif
}

__device__ __forceinline__ float tc_dot2(uint32_t x, uint32_t y) {
    const float2 a = __half22float2(*(const __half2 *)&x), b = __half22float2(*(const __half2 *)&y);
    return a.x * b.x + a.y * b.y;
}

// c (16 x 8 f32: c0 (row g, col 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1)) += A . B.
__device__ __forceinline__ void tc_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if ST_TC_PTX
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int u = 0; u < 4; u++) {  // k 2u.. and 2u+8.. live on lane 4 row + u (A) and 4 col + u (B)
        const uint32_t r0 = __shfl_sync(ST_WARP_FULL_MASK, a[0], 4 * g + u, 32);
        const uint32_t r1 = __shfl_sync(ST_WARP_FULL_MASK, a[1], 4 * g + u, 32);
        const uint32_t r2 = __shfl_sync(ST_WARP_FULL_MASK, a[2], 4 * g + u, 32);
        const uint32_t r3 = __shfl_sync(ST_WARP_FULL_MASK, a[3], 4 * g + u, 32);
        const uint32_t p0 = __shfl_sync(ST_WARP_FULL_MASK, b0, 4 * (2 * t) + u, 32);
        const uint32_t p1 = __shfl_sync(ST_WARP_FULL_MASK, b1, 4 * (2 * t) + u, 32);
        const uint32_t q0 = __shfl_sync(ST_WARP_FULL_MASK, b0, 4 * (2 * t + 1) + u, 32);
        const uint32_t q1 = __shfl_sync(ST_WARP_FULL_MASK, b1, 4 * (2 * t + 1) + u, 32);
        c[0] += tc_dot2(r0, p0) + tc_dot2(r2, p1);
        c[1] += tc_dot2(r0, q0) + tc_dot2(r2, q1);
        c[2] += tc_dot2(r1, p0) + tc_dot2(r3, p1);
        c[3] += tc_dot2(r1, q0) + tc_dot2(r3, q1);
    }
#endif
}

// B fragments of two n8 tiles from k-major rows (row k at base + k * ld, 16 n columns): b[0], b[1] = columns
// 0..7 (k 2t.., k 2t+8.., column g), b[2], b[3] = columns 8..15. (ldmatrix .trans.)
__device__ __forceinline__ void tc_ld_bt(uint32_t (&b)[4], const __half *base, int ld) {
    const int lane = threadIdx.x & 31;
#if ST_TC_PTX
    const int m = lane >> 3;
    const unsigned s = (unsigned)__cvta_generic_to_shared(base + ((m & 1) * 8 + (lane & 7)) * ld + (m >> 1) * 8);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                 : "r"(s)
                 : "memory");  // orders it after the plain shared-memory stores that filled the tile
#else
    const int g = lane >> 2, t = lane & 3;
    const unsigned short *p = (const unsigned short *)base;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int k = 2 * t + (i & 1) * 8, n = g + (i >> 1) * 8;
        b[i] = (uint32_t)p[k * ld + n] | ((uint32_t)p[(k + 1) * ld + n] << 16);
    }
#endif
}

// Two floats as the halves of one register (lo = x).
__device__ __forceinline__ uint32_t tc_pack_h2(float x, float y) {
    const __half2 h = __floats2half2_rn(x, y);
    return *(const uint32_t *)&h;
}

#endif
