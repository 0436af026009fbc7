#include "cli/args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/err.h"
#include "util/fileio.h"

bool st_args_is(st_args *a, const char *short_name, const char *long_name) {
    const char *s = a->argv[a->i];
    return (short_name && !strcmp(s, short_name)) || (long_name && !strcmp(s, long_name));
}

const char *st_args_str(st_args *a) {
    const char *flag = a->argv[a->i];
    if (a->i + 1 >= a->argc) {
        fprintf(stderr, "strata %s: option '%s' needs a value (see strata %s --help)\n", a->cmd, flag, a->cmd);
        a->failed = true;
        return "";
    }
    return a->argv[++a->i];
}

int64_t st_args_int(st_args *a, int64_t min, int64_t max) {
    const char *flag = a->argv[a->i];
    const char *v = st_args_str(a);
    if (a->failed) return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 0);
    if (errno || *v == '\0' || *end != '\0' || x < min || x > max) {
        fprintf(stderr, "strata %s: option '%s' needs an integer in [%lld, %lld], got '%s'\n", a->cmd, flag,
                (long long)min, (long long)max, v);
        a->failed = true;
        return 0;
    }
    return x;
}

double st_args_float(st_args *a, double min, double max) {
    const char *flag = a->argv[a->i];
    const char *v = st_args_str(a);
    if (a->failed) return 0;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || *v == '\0' || *end != '\0' || !(x >= min && x <= max)) {
        fprintf(stderr, "strata %s: option '%s' needs a number in [%g, %g], got '%s'\n", a->cmd, flag, min, max, v);
        a->failed = true;
        return 0;
    }
    return x;
}

void st_args_unknown(st_args *a) {
    fprintf(stderr, "strata %s: unknown option '%s' (see strata %s --help)\n", a->cmd, a->argv[a->i], a->cmd);
    a->failed = true;
}

void st_args_cache_type(st_args *a, bool *kv_f32) {
    const char *t = st_args_str(a);
    if (a->failed) return;
    if (!strcmp(t, "f32") || !strcmp(t, "f16")) {
        *kv_f32 = !strcmp(t, "f32");
        return;
    }
    fprintf(stderr, "strata %s: --cache-type must be f16 or f32, got '%s'\n", a->cmd, t);
    a->failed = true;
}

bool st_args_engine(st_args *a, st_engine_args *e) {
    if (st_args_is(a, "-m", "--model")) e->model = st_args_str(a);
    else if (st_args_is(a, "-dev", "--device")) e->device = st_args_str(a);
    else if (st_args_is(a, "-t", "--threads")) e->n_threads = st_args_int(a, 1, 4096);
    else if (st_args_is(a, "-ctk", "--cache-type")) st_args_cache_type(a, &e->kv_f32);
    else return false;
    return true;
}

bool st_args_hybrid(st_args *a, st_engine_args *e) {
    if (st_args_is(a, NULL, "--gpu-mem")) e->gpu_mem_gib = st_args_float(a, 0, 1 << 20);
    else if (st_args_is(a, NULL, "--profile")) e->profile = st_args_str(a);
    else if (st_args_is(a, NULL, "--pack")) e->pack = st_args_str(a);
    else if (st_args_is(a, NULL, "--arena-mmap")) e->arena_mmap = true;
    else if (st_args_is(a, NULL, "--deterministic")) e->deterministic = true;
    else if (st_args_is(a, NULL, "--no-prefill-cpu")) e->no_prefill_cpu = true;
    else if (st_args_is(a, "-ub", "--ubatch-size")) e->n_ubatch = st_args_int(a, 16, 16384);
    else if (st_args_is(a, NULL, "--pcie-frac")) {
        const char *v = st_args_str(a);
        if (a->failed) return true;
        char *end = NULL;
        double f = strtod(v, &end);
        if (!strcmp(v, "auto")) {
            e->cpu_misses = true;
            e->pcie_frac = -1;
        } else if (end != v && !*end && f >= 0 && f <= 1) {
            e->cpu_misses = true;
            e->pcie_frac = f;
        } else {
            fprintf(stderr, "strata %s: --pcie-frac takes a share from 0 to 1 or 'auto', got '%s'\n", a->cmd, v);
            a->failed = true;
        }
    }
    else return false;
    return true;
}

bool st_args_have_model(const st_args *a, const st_engine_args *e) {
    if (e->model) return true;
    fprintf(stderr, "strata %s: no model given: pass -m MODEL.gguf (see strata %s --help)\n", a->cmd, a->cmd);
    return false;
}

int32_t st_args_ubatch(const st_engine_args *e) {
    // --deterministic promises the all-in-VRAM engine's output: its prefill steps too (cuBLAS may pick another
    // algorithm for another step size)
    return (int32_t)(e->n_ubatch > 0 ? e->n_ubatch : e->deterministic ? STRATA_UBATCH_DEFAULT : 0);
}

void st_args_cpu_misses(const st_engine_args *e, bool *cpu_misses, double *pcie_frac) {
    *cpu_misses = !e->deterministic;
    *pcie_frac = e->cpu_misses ? e->pcie_frac : -1.0;
}

strata_engine *st_args_load_engine(const st_args *a, const st_engine_args *e) {
    strata_engine_params ep = strata_engine_default_params();
    ep.model_path = e->model;
    ep.n_threads = (int)e->n_threads;
    ep.device = e->device;
    ep.gpu_mem_gib = e->gpu_mem_gib;
    ep.plan_n_ctx = e->plan_n_ctx > 0 && e->plan_n_ctx < INT32_MAX ? (int32_t)e->plan_n_ctx : 0;
    ep.plan_kv_f32 = e->kv_f32;
    ep.profile_path = e->profile;
    ep.pack_path = e->pack;
    ep.arena_mmap = e->arena_mmap;
    st_args_cpu_misses(e, &ep.cpu_misses, &ep.pcie_frac);
    ep.no_prefill_cpu = e->no_prefill_cpu || e->deterministic;
    ep.n_ubatch = st_args_ubatch(e);
    if (e->cpu_misses && e->deterministic)
        fprintf(stderr, "strata %s: --deterministic: ignoring --pcie-frac (every miss is read over PCIe)\n", a->cmd);
    strata_engine *eng = strata_engine_load(&ep);
    if (!eng) fprintf(stderr, "strata %s: %s\n", a->cmd, strata_last_error());
    return eng;
}

bool st_args_prompt(st_args *a, const char **text, const char **file) {
    if (st_args_is(a, "-p", "--prompt")) *text = st_args_str(a);
    else if (st_args_is(a, "-f", "--file")) *file = st_args_str(a);
    else return false;
    return true;
}

int st_args_read_prompt(const st_args *a, const char *file, char **file_text, const char **text) {
    if (!file) return 0;
    if (st_read_file(file, 1ull << 30, file_text, NULL)) {
        fprintf(stderr, "strata %s: %s\n", a->cmd, st_errmsg());
        return -1;
    }
    *text = *file_text;
    return 0;
}
