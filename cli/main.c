/* sluice — command-line entry: dispatches to a subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "sluice.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"bench", sl_cli_bench, "run the pipeline flat out and report throughput and memory"},
    {"show", sl_cli_show, "write a grid of the first batch, with labels, as PNG"},
    {"decode", sl_cli_decode, "decode one image as the loader would (PNG/PPM output)"},
    {"plan", sl_cli_plan, "size a pipeline for a dataset before starting it"},
    {"top", sl_cli_top, "watch memory of a process tree, the cgroup and the GPUs"},
    {"pack", sl_cli_pack, "write WebDataset tar shards from any source (optionally re-encoded smaller)"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f) {
    fprintf(f, "usage: sluice COMMAND [ARGS]   (sluice help COMMAND, or sluice COMMAND --help)\n\ncommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++) fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "  %-8s %s\n", "help", "this list, or a command's options (help COMMAND)");
    fprintf(f, "  %-8s %s\n", "version", "the version and what this build decodes (also --version)");
    fprintf(f, "\nsluice %s\n", sl_version());
}

static int find_command(const char *name) {
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (!strcmp(name, commands[i].name)) return (int)i;
    return -1;
}

static int unknown_command(const char *name) {
    const char *names[NCOMMANDS + 3] = {"help", "version"};
    for (size_t i = 0; i < NCOMMANDS; i++) names[2 + i] = commands[i].name;
    const char *near = sl_cli_closest(name, names, NULL);
    if (near) fprintf(stderr, "sluice: unknown command '%s': did you mean %s?\n", name, near);
    else fprintf(stderr, "sluice: unknown command '%s'\n", name);
    usage(stderr);
    return 2;
}

/* sluice help [COMMAND]: the list, or COMMAND --help. */
static int help(int argc, char **argv) {
    if (argc < 3) {
        usage(stdout);
        return 0;
    }
    int c = find_command(argv[2]);
    if (c < 0) return unknown_command(argv[2]);
    char *args[] = {argv[2], "--help", NULL};
    return commands[c].fn(2, args);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) return help(argc, argv);
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("sluice %s\nbuild: %s\n", sl_version(), sl_build_info());
        return 0;
    }
    int c = find_command(argv[1]);
    if (c < 0) return unknown_command(argv[1]);
    return commands[c].fn(argc - 1, argv + 1);
}
