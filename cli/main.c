/* sluice — command-line entry: dispatches to a subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "sluice.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"bench", sl_cli_bench, "run the pipeline flat out and report throughput and memory"},
    {"top", sl_cli_top, "watch memory of a process tree, the cgroup and the GPUs"},
    {"plan", sl_cli_plan, "size a pipeline for a dataset before starting it"},
    {"decode", sl_cli_decode, "decode one image as the loader would (PPM/raw output)"},
    {"pack", sl_cli_pack, "write WebDataset tar shards from any source (optionally re-encoded smaller)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: sluice COMMAND [ARGS]   (sluice COMMAND --help)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nsluice %s\n", sl_version());
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("sluice %s\n", sl_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "sluice: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
