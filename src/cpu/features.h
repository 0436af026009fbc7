// Runtime CPU feature detection and the choice of kernel instruction set.
// Kernels are compiled once per ISA (per-file compile flags) and picked at run time, so one binary runs on any
// x86-64 (and the portable C path everywhere else).
#ifndef STRATA_CPU_FEATURES_H
#define STRATA_CPU_FEATURES_H

#include <stdbool.h>

typedef struct st_cpu_features {
    bool avx2, fma, f16c;                  // Haswell+ / Zen+
    bool avx512f, avx512bw, avx512vl;      // Skylake-X+ / Zen4+
    bool avx512vnni;                       // Cascade Lake+ / Zen4+ (vpdpbusd on zmm)
    bool avx_vnni;                         // Alder Lake+ (VEX-encoded vpdpbusd on ymm)
    bool os_avx, os_avx512;                // the OS saves ymm / zmm+opmask state (XGETBV)
} st_cpu_features;

// Kernel families, in increasing order of capability. Each implies the ones below it.
typedef enum st_cpu_isa {
    ST_CPU_ISA_PORTABLE = 0,  // plain C
    ST_CPU_ISA_AVX2 = 1,      // AVX2 + FMA + F16C
    ST_CPU_ISA_AVX512 = 2,    // AVX2 set + AVX-512 F/BW/VL + AVX-512 VNNI
    ST_CPU_ISA_COUNT = 3
} st_cpu_isa;

// Detected once (thread-safe) and cached.
const st_cpu_features *st_cpu_features_get(void);
// The best ISA this CPU (and this build) supports.
st_cpu_isa st_cpu_isa_best(void);
// The ISA kernels use: STRATA_CPU_ISA=portable|avx2|avx512 when set (clamped to what the CPU supports, with a
// warning), else st_cpu_isa_best(). Read once and cached; st_cpu_isa_set overrides it (tests, A/B).
st_cpu_isa st_cpu_isa_active(void);
void st_cpu_isa_set(st_cpu_isa isa);
bool st_cpu_isa_supported(st_cpu_isa isa);
const char *st_cpu_isa_name(st_cpu_isa isa);
// "portable" -> ST_CPU_ISA_PORTABLE; -1 if unknown.
int st_cpu_isa_from_name(const char *name);

#endif
