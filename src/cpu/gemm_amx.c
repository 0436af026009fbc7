// Q4_K and Q6_K x Q8_K products on AMX int8 tiles (cpu/gemm_amx.h). Compiled with -mamx-tile -mamx-int8 and AVX-512.
//
// Q4_K, per 16 weight rows x 16 tokens, per 256-element block b and 32-element sub-block j:
//   C[m][n] = sum_k q[m][32j + k] * x[n][32j + k]      (TDPBUSD: u8 4-bit quants x s8 activations, int32)
//   acc[m][n] += d_m dx_n * (sum_j sc_mj C_j[m][n]) - sum_j (dmin_m mn_mj) * dx_n * (bsum_n,2j + bsum_n,2j+1)
// with the 6-bit sub-block scales applied in int32 (exact) and one float step per block. The A tile (16 rows x 32
// bytes) holds one sub-block's quants of 16 rows, unpacked from nibbles once per row tile and block for every token
// tile; the B tile (8 x 64 bytes) holds 32 activations of 16 tokens in the VNNI order TDPBUSD reads (four
// consecutive k of one token per 32-bit lane), packed once for all row ranges (st_cpu_amx_pack_q8k). Q6_K likewise
// with 16-element sub-blocks (TDPBSSD on q - 32, k = 16: half of a packed 32-element B tile), its int8 scales, and
// no mins.
#include "cpu/gemm_amx.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "quant/blocks.h"
#include "quant/quant.h"
#include "util/err.h"

#if defined(__x86_64__) && defined(__AMX_TILE__) && defined(__AMX_INT8__) && defined(__AVX512F__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023  // Linux: ask for an XSAVE feature's state (AMX tile data: feature 18)
#define XFEATURE_XTILEDATA 18

static _Atomic int g_amx = -1;  // -1 unknown, 0 no, 1 yes
static _Atomic int g_amx_off = -1;

bool st_cpu_amx_available(void) {
    int v = atomic_load(&g_amx);
    if (v < 0) {
        unsigned a, b, c, d;
        v = 0;
        if (__get_cpuid_max(0, NULL) >= 7) {
            __cpuid_count(7, 0, a, b, c, d);
            const int tile = (d >> 24) & 1, i8 = (d >> 25) & 1;
            // The kernel gives the tile state to a process that asks (Linux 5.16+); refused: no AMX.
            if (tile && i8 && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0) v = 1;
        }
        atomic_store(&g_amx, v);
    }
    int off = atomic_load(&g_amx_off);
    if (off < 0) {
        const char *e = getenv("STRATA_CPU_AMX");
        off = e && !strcmp(e, "0");
        atomic_store(&g_amx_off, off);
    }
    return v == 1 && !off;
}

void st_cpu_amx_enable(bool on) { atomic_store(&g_amx_off, on ? 0 : 1); }

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

// Tiles: 0 = C (16 x 16 int32), 1 = A (16 rows x k bytes), 2 = B (k / 4 rows x 64 bytes): k = 32 for Q4_K's
// sub-blocks, 16 for Q6_K's.
static void tiles_configure(int k) {
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    cfg.rows[0] = 16, cfg.colsb[0] = 64;
    cfg.rows[1] = 16, cfg.colsb[1] = (uint16_t)k;
    cfg.rows[2] = (uint8_t)(k / 4), cfg.colsb[2] = 64;
    _tile_loadconfig(&cfg);
}

// Packed activations (st_cpu_amx_pack_q8k): per token tile tt and block b, at ((tt * nb) + b) * PK_BLOCK bytes:
// B tiles [8 sub-blocks][8][64] (int8, VNNI order: row k4 = the 4 quants 4 k4 .. 4 k4 + 3 of each of 16 tokens),
// dx [16] float (the tokens' Q8_K scales), dmx [8][16] float (dx * (bsum 2j + bsum 2j+1)); tokens past n_tok 0.
#define PK_B 4096
#define PK_BLOCK (PK_B + 16 * 4 + 8 * 16 * 4)

size_t st_cpu_amx_pack_bytes(int64_t ne0, int64_t n_tok) {
    return (size_t)((n_tok + 15) / 16) * (size_t)(ne0 / QK_K) * PK_BLOCK;
}

void st_cpu_amx_pack_q8k(const void *Xq, size_t xq_stride, int64_t ne0, int64_t n_tok, void *packed) {
    const int nb = (int)(ne0 / QK_K);
    for (int64_t t0 = 0, tt = 0; t0 < n_tok; t0 += 16, tt++) {
        const int nt = n_tok - t0 < 16 ? (int)(n_tok - t0) : 16;
        // Gather offsets of the 16 tokens' rows (a missing token reads token t0's row; its lanes are zeroed).
        int32_t offs[16];
        for (int n = 0; n < 16; n++) offs[n] = (int32_t)((size_t)(n < nt ? n : 0) * xq_stride);
        const __m512i vo = _mm512_loadu_si512(offs);
        const __mmask16 live = (__mmask16)((1u << nt) - 1);
        const uint8_t *x0 = (const uint8_t *)Xq + (size_t)t0 * xq_stride;
        for (int b = 0; b < nb; b++) {
            uint8_t *pk = (uint8_t *)packed + ((size_t)tt * nb + b) * PK_BLOCK;
            float *dx = (float *)(pk + PK_B), *dmx = dx + 16;
            const uint8_t *xb = x0 + (size_t)b * sizeof(block_q8_K);
            const __m512 vd = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, vo, xb, 1);
            _mm512_storeu_ps(dx, vd);
            for (int j = 0; j < 8; j++) {
                for (int k4 = 0; k4 < 8; k4++) {  // 4 quants of every token: one 32-bit gather
                    const uint8_t *src = xb + offsetof(block_q8_K, qs) + 32 * j + 4 * k4;
                    _mm512_storeu_si512(pk + (size_t)j * 512 + k4 * 64,
                                        _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, vo, src, 1));
                }
                float bs[16];
                for (int n = 0; n < 16; n++) {
                    const block_q8_K *x = (const block_q8_K *)(x0 + (size_t)(n < nt ? n : 0) * xq_stride) + b;
                    bs[n] = n < nt ? (float)(x->bsums[2 * j] + x->bsums[2 * j + 1]) : 0.0f;
                }
                _mm512_storeu_ps(dmx + j * 16, _mm512_mul_ps(vd, _mm512_loadu_ps(bs)));
            }
        }
    }
}

// Q6_K: 16 rows' block b unpacked: A [16 sub-blocks][16 rows][16] signed quants (q - 32), sc [16][16] the int8
// sub-block scales, d [16] (blocks.h's element order).
static void unpack_rows_q6k(const uint8_t *W, size_t row_bytes, int b, int8_t *A, int32_t *sc, float *d) {
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
    for (int r = 0; r < 16; r++) {
        const block_q6_K *w = (const block_q6_K *)(W + (size_t)r * row_bytes) + b;
        d[r] = _cvtsh_ss(w->d);
        for (int sb = 0; sb < 16; sb++) sc[sb * 16 + r] = w->scales[sb];
        for (int h = 0; h < 2; h++) {
            const __m256i lo = _mm256_loadu_si256((const __m256i *)(w->ql + 64 * h));
            const __m256i hi = _mm256_loadu_si256((const __m256i *)(w->ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(w->qh + 32 * h));
            __m256i v[4];
            v[0] = _mm256_or_si256(_mm256_and_si256(lo, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
            v[1] = _mm256_or_si256(_mm256_and_si256(hi, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
            v[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
            v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(hi, 4), m4),
                                   _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
            for (int i = 0; i < 4; i++) {  // elements 128h + 32i + l: sub-blocks 8h + 2i (l < 16) and + 1
                const __m256i q = _mm256_sub_epi8(v[i], k32);
                const int sb = 8 * h + 2 * i;
                _mm_storeu_si128((__m128i *)(A + ((size_t)sb * 16 + r) * 16), _mm256_castsi256_si128(q));
                _mm_storeu_si128((__m128i *)(A + ((size_t)(sb + 1) * 16 + r) * 16), _mm256_extracti128_si256(q, 1));
            }
        }
    }
}

// Q4_K: 16 rows' block b unpacked: A [8 sub-blocks][16 rows][32] quants, sc [8][16] the 6-bit scales (int32), d [16],
// m [8][16] = dmin mn.
static void unpack_rows(const uint8_t *W, size_t row_bytes, int b, uint8_t *A, int32_t *sc, float *d, float *m) {
    for (int r = 0; r < 16; r++) {
        const block_q4_K *w = (const block_q4_K *)(W + (size_t)r * row_bytes) + b;
        const float dmin = _cvtsh_ss(w->dmin);  // (F16C, inline: st_f16_to_f32 is a call per row)
        d[r] = _cvtsh_ss(w->d);
        for (int j = 0; j < 8; j++) {
            int s, mn;
            if (j < 4) {
                s = w->scales[j] & 63, mn = w->scales[j + 4] & 63;
            } else {
                s = (w->scales[j + 4] & 15) | ((w->scales[j - 4] >> 6) << 4);
                mn = (w->scales[j + 4] >> 4) | ((w->scales[j] >> 6) << 4);
            }
            sc[j * 16 + r] = s;
            m[j * 16 + r] = dmin * (float)mn;
        }
        for (int c = 0; c < 4; c++) {  // chunk c: sub-blocks 2c (low nibbles) and 2c + 1 (high)
            const __m256i q = _mm256_loadu_si256((const __m256i *)(w->qs + 32 * c));
            const __m256i lo = _mm256_and_si256(q, _mm256_set1_epi8(15));
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), _mm256_set1_epi8(15));
            _mm256_storeu_si256((__m256i *)(A + ((size_t)(2 * c) * 16 + r) * 32), lo);
            _mm256_storeu_si256((__m256i *)(A + ((size_t)(2 * c + 1) * 16 + r) * 32), hi);
        }
    }
}

bool st_cpu_amx_supported(int type) { return type == ST_TYPE_Q4_K || type == ST_TYPE_Q6_K; }

int st_cpu_gemm_amx_packed(int type, const void *W, int64_t ne0, int64_t n_rows, const void *packed, int64_t n_tok,
                           float *Y, int64_t ldy) {
    if (!st_cpu_amx_available()) return st_err("st_cpu_gemm_amx: no AMX int8 on this CPU (or turned off)");
    if (!st_cpu_amx_supported(type)) return st_err("st_cpu_gemm_amx: weight type %s (Q4_K or Q6_K)", st_type_name(type));
    if (ne0 <= 0 || ne0 % QK_K || n_rows % 16 || n_rows < 0 || n_tok < 0)
        return st_err("st_cpu_gemm_amx: ne0 %lld (multiple of 256), rows %lld (multiple of 16)", (long long)ne0,
                      (long long)n_rows);
    if (!n_rows || !n_tok) return 0;
    const int q6 = type == ST_TYPE_Q6_K, n_sub = q6 ? 16 : 8, k = q6 ? 16 : 32;
    const int nb = (int)(ne0 / QK_K), n_tt = (int)((n_tok + 15) / 16);
    const size_t row_bytes = st_row_size(type, ne0);
    float *acc = aligned_alloc(64, sizeof(float) * (size_t)n_tt * 16 * 16);  // [tt][row][token]
    if (!acc) return st_err("st_cpu_gemm_amx: out of memory");
    _Alignas(64) uint8_t A[16 * 16 * 16];  // [sub-block][row][k]: 8 x 16 x 32 (Q4_K) or 16 x 16 x 16 (Q6_K)
    _Alignas(64) int32_t sc[16 * 16], C[16 * 16];
    _Alignas(64) float d[16], mm[8 * 16];
    tiles_configure(k);
    for (int64_t r0 = 0; r0 < n_rows; r0 += 16) {
        memset(acc, 0, sizeof(float) * (size_t)n_tt * 256);
        const uint8_t *Wr = (const uint8_t *)W + (size_t)r0 * row_bytes;
        for (int b = 0; b < nb; b++) {
            // once per row tile and block, for every token tile
            if (q6) unpack_rows_q6k(Wr, row_bytes, b, (int8_t *)A, sc, d);
            else unpack_rows(Wr, row_bytes, b, A, sc, d, mm);
            for (int tt = 0; tt < n_tt; tt++) {
                const uint8_t *pk = (const uint8_t *)packed + ((size_t)tt * nb + b) * PK_BLOCK;
                // The block's int32 sums scaled by the integer sub-block scales: sum_j sc_mj C_j[m][n].
                __m512i isum[16];
                for (int r = 0; r < 16; r++) isum[r] = _mm512_setzero_si512();
                for (int j = 0; j < n_sub; j++) {
                    _tile_zero(0);
                    _tile_loadd(1, A + (size_t)j * 16 * k, k);
                    _tile_loadd(2, pk + (size_t)j * (k / 4) * 64, 64);  // (Q6_K: half a 32-sub-block's rows)
                    if (q6) _tile_dpbssd(0, 1, 2);
                    else _tile_dpbusd(0, 1, 2);
                    _tile_stored(0, C, 64);
                    for (int r = 0; r < 16; r++)
                        isum[r] = _mm512_add_epi32(
                            isum[r], _mm512_mullo_epi32(_mm512_load_si512(C + r * 16), _mm512_set1_epi32(sc[j * 16 + r])));
                }
                const float *dx = (const float *)(pk + PK_B), *dm = dx + 16;
                const __m512 vdx = _mm512_loadu_ps(dx);
                float *at = acc + (size_t)tt * 256;
                for (int r = 0; r < 16; r++) {
                    __m512 a = _mm512_load_ps(at + r * 16);
                    a = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(d[r]), vdx), _mm512_cvtepi32_ps(isum[r]), a);
                    if (!q6)
                        for (int j = 0; j < 8; j++)  // Q4_K's mins: dmin mn_mj * dx_n (bsum 2j + bsum 2j+1)
                            a = _mm512_fnmadd_ps(_mm512_set1_ps(mm[j * 16 + r]), _mm512_loadu_ps(dm + j * 16), a);
                    _mm512_store_ps(at + r * 16, a);
                }
            }
        }
        const __m512i col = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                               _mm512_set1_epi32(16));
        for (int tt = 0; tt < n_tt; tt++) {  // acc[tt][r] lane n = row r0 + r, token 16 tt + n: one column per token
            const int nt = n_tok - 16 * tt < 16 ? (int)(n_tok - 16 * tt) : 16;
            for (int n = 0; n < nt; n++)
                _mm512_storeu_ps(Y + (16 * (int64_t)tt + n) * ldy + r0,
                                 _mm512_i32gather_ps(col, acc + (size_t)tt * 256 + n, 4));
        }
    }
    _tile_release();
    free(acc);
    return 0;
}

int st_cpu_gemm_amx(int type, const void *W, int64_t ne0, int64_t n_rows, const void *Xq, size_t xq_stride,
                    int64_t n_tok, float *Y, int64_t ldy) {
    if (!st_cpu_amx_available()) return st_err("st_cpu_gemm_amx: no AMX int8 on this CPU (or turned off)");
    if (ne0 <= 0 || ne0 % QK_K || n_rows % 16 || n_rows < 0 || n_tok < 0)
        return st_err("st_cpu_gemm_amx: ne0 %lld (multiple of 256), rows %lld (multiple of 16)", (long long)ne0,
                      (long long)n_rows);
    if (!n_rows || !n_tok) return 0;
    void *pk = aligned_alloc(64, st_cpu_amx_pack_bytes(ne0, n_tok));
    if (!pk) return st_err("st_cpu_gemm_amx: out of memory");
    st_cpu_amx_pack_q8k(Xq, xq_stride, ne0, n_tok, pk);
    const int rc = st_cpu_gemm_amx_packed(type, W, ne0, n_rows, pk, n_tok, Y, ldy);
    free(pk);
    return rc;
}

#else  // no AMX in this build or on this architecture

bool st_cpu_amx_available(void) { return false; }
void st_cpu_amx_enable(bool on) { (void)on; }
size_t st_cpu_amx_pack_bytes(int64_t ne0, int64_t n_tok) {
    (void)ne0, (void)n_tok;
    return 0;
}
void st_cpu_amx_pack_q8k(const void *Xq, size_t xq_stride, int64_t ne0, int64_t n_tok, void *packed) {
    (void)Xq, (void)xq_stride, (void)ne0, (void)n_tok, (void)packed;
}
bool st_cpu_amx_supported(int type) {
    (void)type;
    return false;
}
int st_cpu_gemm_amx_packed(int type, const void *W, int64_t ne0, int64_t n_rows, const void *packed, int64_t n_tok,
                           float *Y, int64_t ldy) {
    (void)type, (void)W, (void)ne0, (void)n_rows, (void)packed, (void)n_tok, (void)Y, (void)ldy;
    return st_err("st_cpu_gemm_amx: this build has no AMX kernels");
}
int st_cpu_gemm_amx(int type, const void *W, int64_t ne0, int64_t n_rows, const void *Xq, size_t xq_stride,
                    int64_t n_tok, float *Y, int64_t ldy) {
    (void)type, (void)W, (void)ne0, (void)n_rows, (void)Xq, (void)xq_stride, (void)n_tok, (void)Y, (void)ldy;
    return st_err("st_cpu_gemm_amx: this build has no AMX kernels");
}

#endif
