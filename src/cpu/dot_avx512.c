// AVX-512 (F/BW/VL) + AVX-512 VNNI kernels: the x86 kernels recompiled with EVEX encodings (32 vector registers)
// and vpdpbusd for unscaled int8 sums. Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni (CMakeLists.txt).
#if defined(__x86_64__)
#define ST_SFX avx512
#define ST_VNNI 1
#include "cpu/dot_x86.inc"
#endif
