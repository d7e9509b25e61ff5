/* Subcommands of the sluice CLI. Each returns the process exit code;
 * argv[0] is the subcommand name. */
#ifndef SL_CLI_H
#define SL_CLI_H

int sl_cli_bench(int argc, char **argv);
int sl_cli_top(int argc, char **argv);
int sl_cli_plan(int argc, char **argv);
int sl_cli_decode(int argc, char **argv);
int sl_cli_show(int argc, char **argv);
int sl_cli_pack(int argc, char **argv);

#endif
