// Subcommands of the `strata` binary. Each takes argc/argv starting at its own name, prints its own --help,
// and returns the process exit code (0 ok, 1 runtime error, 2 usage error).
#ifndef STRATA_CLI_CLI_H
#define STRATA_CLI_CLI_H

int cmd_info(int argc, char **argv);
int cmd_make_model(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_pack(int argc, char **argv);
int cmd_profile(int argc, char **argv);
// strata info --plan (cmd_plan.c); cmd_info hands over when --plan is given.
int cmd_info_plan(int argc, char **argv);

#endif
