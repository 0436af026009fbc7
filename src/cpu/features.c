#include "cpu/features.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/log.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define ST_X86 1
#endif

static st_cpu_features g_features;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Atomic int g_active = -1;  // -1 until resolved

#ifdef ST_X86
static unsigned long long read_xcr0(void) {
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}
#endif

static void detect(void) {
    st_cpu_features *f = &g_features;
    memset(f, 0, sizeof *f);
#ifdef ST_X86
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    bool osxsave = (c >> 27) & 1;
    bool avx = (c >> 28) & 1;
    f->fma = (c >> 12) & 1;
    f->f16c = (c >> 29) & 1;
    if (osxsave) {
        unsigned long long xcr0 = read_xcr0();
        f->os_avx = avx && (xcr0 & 0x6) == 0x6;           // xmm + ymm state
        f->os_avx512 = f->os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask + zmm_hi256 + hi16_zmm
    }
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        f->avx2 = (b >> 5) & 1;
        f->avx512f = (b >> 16) & 1;
        f->avx512bw = (b >> 30) & 1;
        f->avx512vl = (b >> 31) & 1;
        f->avx512vnni = (c >> 11) & 1;
        __cpuid_count(7, 1, a, b, c, d);
        f->avx_vnni = (a >> 4) & 1;
    }
    // Features the OS does not enable are unusable.
    if (!f->os_avx) f->avx2 = f->fma = f->f16c = f->avx_vnni = false;
    if (!f->os_avx512) f->avx512f = f->avx512bw = f->avx512vl = f->avx512vnni = false;
#endif
}

const st_cpu_features *st_cpu_features_get(void) {
    pthread_once(&g_once, detect);
    return &g_features;
}

bool st_cpu_isa_supported(st_cpu_isa isa) {
    const st_cpu_features *f = st_cpu_features_get();
    switch (isa) {
    case ST_CPU_ISA_PORTABLE: return true;
#ifdef ST_X86
    case ST_CPU_ISA_AVX2: return f->avx2 && f->fma && f->f16c;
    case ST_CPU_ISA_AVX512:
        return f->avx2 && f->fma && f->f16c && f->avx512f && f->avx512bw && f->avx512vl && f->avx512vnni;
#endif
    default: (void)f; return false;
    }
}

st_cpu_isa st_cpu_isa_best(void) {
    for (int i = ST_CPU_ISA_COUNT - 1; i > 0; i--)
        if (st_cpu_isa_supported((st_cpu_isa)i)) return (st_cpu_isa)i;
    return ST_CPU_ISA_PORTABLE;
}

static const char *const k_names[ST_CPU_ISA_COUNT] = {"portable", "avx2", "avx512"};

const char *st_cpu_isa_name(st_cpu_isa isa) {
    return (unsigned)isa < ST_CPU_ISA_COUNT ? k_names[isa] : "?";
}

int st_cpu_isa_from_name(const char *name) {
    for (int i = 0; i < ST_CPU_ISA_COUNT; i++)
        if (strcasecmp(name, k_names[i]) == 0) return i;
    return -1;
}

st_cpu_isa st_cpu_isa_active(void) {
    int a = atomic_load(&g_active);
    if (a >= 0) return (st_cpu_isa)a;
    st_cpu_isa isa = st_cpu_isa_best();
    const char *env = getenv("STRATA_CPU_ISA");
    if (env && *env) {
        int want = st_cpu_isa_from_name(env);
        if (want < 0) {
            st_warn("STRATA_CPU_ISA=%s: unknown (expected portable, avx2 or avx512); using %s", env,
                    st_cpu_isa_name(isa));
        } else if (!st_cpu_isa_supported((st_cpu_isa)want)) {
            st_warn("STRATA_CPU_ISA=%s: this CPU does not support it; using %s", env, st_cpu_isa_name(isa));
        } else {
            isa = (st_cpu_isa)want;
        }
    }
    atomic_store(&g_active, (int)isa);
    return isa;
}

void st_cpu_isa_set(st_cpu_isa isa) {
    if (!st_cpu_isa_supported(isa)) isa = st_cpu_isa_best();
    atomic_store(&g_active, (int)isa);
}
