// Helpers shared by the quant sources (not part of the public API).
#ifndef STRATA_QUANT_INTERNAL_H
#define STRATA_QUANT_INTERNAL_H

#include <stdint.h>
#include <string.h>

// Little-endian loads/stores through memcpy: blocks may sit at any address (MXFP4 rows are 17-byte strided and
// callers may hand us unaligned buffers), so we never dereference multi-byte fields through struct pointers.
static inline uint16_t st_ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t st_ld32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline void st_st16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void st_st32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline float st_ldf32(const uint8_t *p) {
    uint32_t u = st_ld32(p);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline void st_stf32(uint8_t *p, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    st_st32(p, u);
}

// Round to nearest, ties to even, for |x| < 2^22 (the float-magic trick: adding 1.5 * 2^23 leaves the rounded
// integer in the low mantissa bits). Inputs are clamped so out-of-range values saturate instead of wrapping.
static inline int st_nearest_int(float x) {
    if (!(x > -4194303.f)) x = -4194303.f;  // also maps NaN to the clamp
    if (x > 4194303.f) x = 4194303.f;
    float v = x + 12582912.f;
    int32_t i;
    memcpy(&i, &v, 4);
    return (i & 0x007fffff) - 0x00400000;
}

#endif
