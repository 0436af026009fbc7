// AVX2 + FMA + F16C kernels (this file is compiled with -mavx2 -mfma -mf16c; see CMakeLists.txt).
#if defined(__x86_64__)
#define ST_SFX avx2
#include "cpu/dot_x86.inc"
#endif
