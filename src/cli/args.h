// Small helpers for the subcommands' flag parsing: value flags with clear errors naming the flag.
#ifndef STRATA_CLI_ARGS_H
#define STRATA_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "strata.h"

typedef struct st_args {
    int argc;
    char **argv;
    int i;              // index of the flag being parsed
    const char *cmd;    // "run", for messages
    bool failed;
} st_args;

// True when argv[i] equals one of the names (e.g. "-n", "--n-predict").
bool st_args_is(st_args *a, const char *short_name, const char *long_name);
// The flag's value (argv[i+1]); advances i. On a missing value sets failed and prints an error.
const char *st_args_str(st_args *a);
int64_t st_args_int(st_args *a, int64_t min, int64_t max);
double st_args_float(st_args *a, double min, double max);
// Prints "strata CMD: unknown option 'X' (see strata CMD --help)" and sets failed.
void st_args_unknown(st_args *a);

// The -ctk/--cache-type value: "f32" sets *kv_f32, "f16" clears it; anything else prints an error and sets failed.
void st_args_cache_type(st_args *a, bool *kv_f32);

// The flags of every command that loads an engine.
typedef struct st_engine_args {
    const char *model;   // -m, --model (NULL: not given)
    const char *device;  // -dev, --device (NULL: the default device)
    int64_t n_threads;   // -t, --threads (0: all CPUs)
    bool kv_f32;         // -ctk, --cache-type f32 (the default is the command's)
    // hybrid expert placement (st_args_hybrid; docs/HYBRID.md)
    double gpu_mem_gib;       // --gpu-mem GiB (0: unlimited)
    const char *profile;      // --profile FILE
    const char *pack;         // --pack FILE
    bool arena_mmap;          // --arena-mmap
    int64_t plan_n_ctx;       // KV positions the budget reserves: set by the command from its context size
    bool cpu_misses;          // --pcie-frac given (else auto, unless --deterministic)
    double pcie_frac;         // --pcie-frac F (0..1), or -1 for auto
    bool deterministic;       // --deterministic: every miss over PCIe, whatever --pcie-frac says; no prefill CPU share
    bool no_prefill_cpu;      // --no-prefill-cpu: hybrid prefill stages every non-resident expert
    int64_t n_ubatch;         // -ub, --ubatch-size N (0: the engine's default)
} st_engine_args;

// Parses argv[i] when it is one of the hybrid placement flags (--gpu-mem, --profile, --pack, --arena-mmap,
// --pcie-frac, --no-prefill-cpu, --deterministic, -ub); false (nothing consumed) for any other flag.
bool st_args_hybrid(st_args *a, st_engine_args *e);
// Help lines for those flags (usage texts).
#define ST_ARGS_HYBRID_HELP                                                                                        \
    "      --gpu-mem GiB       VRAM budget (CUDA; default unlimited). An MoE model larger than the budget runs in\n"  \
    "                          hybrid placement: dense weights + KV in VRAM, experts in host RAM, a VRAM expert\n"     \
    "                          cache in the rest (docs/HYBRID.md)\n"                                                   \
    "      --profile FILE      routing profile (strata profile) for the expert cache's initial contents\n"              \
    "      --pack FILE         pack file (strata pack) for --arena-mmap\n"                                             \
    "      --arena-mmap        host expert arena = the pack mapped read-only (also STRATA_ARENA_MMAP=1)\n"               \
    "      --pcie-frac F|auto  hybrid decode: the GPU reads a share F (0..1) of each layer's expert-cache misses\n"   \
    "                          over PCIe and CPU threads compute the rest at the same time; auto (the default)\n"  \
    "                          measures both at load and picks F (0 when the CPU computes an expert faster than\n"   \
    "                          the GPU reads one; 1 when the VRAM cache holds 70%% of the experts or more)\n"        \
    "      --no-prefill-cpu    hybrid prefill: stage every non-resident expert over PCIe (by default, in steps of\n"\
    "                          up to 1024 tokens CPU threads compute a share of them at the same time)\n"             \
    "      --deterministic     hybrid output identical to all-in-VRAM (every miss read by the GPU; overrides\n"      \
    "                          --pcie-frac; no prefill CPU share; prefill in the all-in-VRAM engine's steps unless\n"\
    "                          -ub)\n"                                                                                \
    "  -ub, --ubatch-size N    tokens per prefill step on the GPU (default 2048; 4096 in hybrid placement, where\n"  \
    "                          each step streams the experts it needs over PCIe once)\n"

// Parses argv[i] into e when it is one of the flags above; false (nothing consumed) for any other flag.
bool st_args_engine(st_args *a, st_engine_args *e);
// True when a model was given; otherwise prints "strata CMD: no model given ..." and returns false.
bool st_args_have_model(const st_args *a, const st_engine_args *e);
// The engine's prefill step for these flags: -ub, else the all-in-VRAM default under --deterministic, else 0.
int32_t st_args_ubatch(const st_engine_args *e);
// The engine's CPU-miss options for these flags: on unless --deterministic; F from --pcie-frac, else -1 (auto).
void st_args_cpu_misses(const st_engine_args *e, bool *cpu_misses, double *pcie_frac);
// Loads the engine the flags name; on failure prints "strata CMD: <error>" and returns NULL.
strata_engine *st_args_load_engine(const st_args *a, const st_engine_args *e);
// Parses argv[i] when it is -p/--prompt TEXT or -f/--file FILE; false (nothing consumed) for any other flag.
bool st_args_prompt(st_args *a, const char **text, const char **file);
// When a prompt file was given (file != NULL), reads it into *file_text (caller frees) and points *text at it.
// Returns 0, or -1 after printing "strata CMD: <error>".
int st_args_read_prompt(const st_args *a, const char *file, char **file_text, const char **text);

#endif
