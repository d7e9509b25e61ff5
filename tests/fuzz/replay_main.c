/*
 * Replays a fuzz harness's corpus as an ordinary test (any compiler, no
 * libFuzzer): links with one tests/fuzz/fuzz_X.c and calls its
 * LLVMFuzzerTestOneInput on a few built-in edge inputs (empty, each single
 * byte, a run of zeros and of 0xFF) and then on every regular file in each
 * folder (or file) named on the command line. Crashes and sanitizer reports
 * fail the test; a missing folder fails too, so a misnamed corpus cannot
 * pass by replaying nothing.
 *
 *   fuzz_X_replay tests/fuzz/corpus/X [more folders or files]
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Optional in a harness, as with libFuzzer. */
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Run one input from a heap copy of exactly size bytes, so ASan sees any
 * read past its end. */
static void run(const uint8_t *data, size_t size) {
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy) {
        fprintf(stderr, "replay: out of memory\n");
        exit(2);
    }
    if (size) memcpy(copy, data, size);
    LLVMFuzzerTestOneInput(copy, size);
    free(copy);
}

static int run_file(const char *path, long *count) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fprintf(stderr, "replay: out of memory reading %s\n", path);
            exit(2);
        }
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        uint8_t *nb = realloc(buf, cap * 2);
        if (!nb) free(buf);
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "replay: %s: read error\n", path);
        free(buf);
        return -1;
    }
    run(buf, len);
    free(buf);
    (*count)++;
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file directly in dir, in name order (reproducible runs). */
static int run_dir(const char *dir, long *count) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, cap * sizeof *names);
            if (!nn) exit(2);
            names = nn;
        }
        names[n] = strdup(e->d_name);
        if (!names[n]) exit(2);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && run_file(path, count)) rc = -1;
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    long count = 0;
    uint8_t edge[4096];
    run(edge, 0);
    count++;
    for (int v = 0; v < 256; v++) {
        edge[0] = (uint8_t)v;
        run(edge, 1);
        count++;
    }
    memset(edge, 0, sizeof edge);
    run(edge, sizeof edge);
    memset(edge, 0xFF, sizeof edge);
    run(edge, sizeof edge);
    count += 2;
    long builtin = count;
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            rc = 1;
        } else if (S_ISDIR(st.st_mode) ? run_dir(argv[i], &count) : run_file(argv[i], &count)) {
            rc = 1;
        }
    }
    printf("replayed %ld inputs (%ld built-in, %ld from files)\n", count, builtin, count - builtin);
    return rc;
}
