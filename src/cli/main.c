// strata: one binary, subcommands. `strata --help` lists them; `strata CMD --help` documents each flag.
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "strata.h"

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} subcommand;

static const subcommand commands[] = {
    {"info", cmd_info, "show a GGUF model's metadata, tensors, parameter counts and memory needs"},
    {"make-model", cmd_make_model, "write a GGUF of a real model's shape with deterministic random weights"},
    {"run", cmd_run, "generate text from a prompt (streams it, then prints prompt and generation speed)"},
    {"serve", cmd_serve, "serve the model over HTTP (OpenAI-compatible API) with a supervised engine worker"},
    {"bench", cmd_bench, "measure prompt processing and generation speed (llama-bench's pp/tg/-d/-r/-o)"},
    {"logits", cmd_logits, "print a prompt's token ids and the top-K logits at every position as JSON"},
    {"pack", cmd_pack, "write a MoE model's experts as a native pack file (the mmap host expert arena)"},
    {"profile", cmd_profile, "record per-layer expert routing counts over prompts (for the VRAM expert cache)"},
};

static void usage(FILE *f) {
    fprintf(f,
            "strata %s - MoE-first LLM inference engine\n\n"
            "usage: strata COMMAND [options]\n\ncommands:\n",
            strata_version());
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'strata COMMAND --help' documents each command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("strata %s\n", strata_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "strata: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
