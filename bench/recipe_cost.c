/*
 * The work a recipe costs a sample: decode every file named on stdin with
 * sl_image_decode under one recipe, in this one thread, files read into
 * memory first. Run it under callgrind (bench/recipe_cost.sh does) to
 * count the instructions of decode_all alone: instruction counts, unlike
 * timings, are stable on a shared machine.
 *
 *   find DATA -name '*.JPEG' | sort | head -100 | bench/recipe_cost --preset val [--fast] [--bicubic] [--size N]
 *
 * Prints: samples, failures and the seconds the decodes took.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice.h"

struct blob {
    unsigned char *p;
    size_t n;
};

static int read_file(const char *path, struct blob *b) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    b->p = n > 0 ? malloc((size_t)n) : NULL;
    b->n = b->p && fread(b->p, 1, (size_t)n, f) == (size_t)n ? (size_t)n : 0;
    fclose(f);
    return b->n ? 0 : -1;
}

/* The measured part (callgrind --toggle-collect=decode_all). */
__attribute__((noinline)) int decode_all(const struct blob *files, size_t n, const sl_decode_opts *o, unsigned char *out,
                                         size_t out_len) {
    int failed = 0;
    sl_decode_opts each = *o;
    for (size_t i = 0; i < n; i++) {
        each.index = i;
        char why[256];
        if (sl_image_decode(files[i].p, files[i].n, &each, out, out_len, why, sizeof why)) failed++;
    }
    return failed;
}

int main(int argc, char **argv) {
    sl_decode_opts o;
    sl_decode_opts_init(&o);
    sl_image_recipe recipe;
    sl_image_recipe_init(&recipe);
    o.recipe = &recipe;
    o.preset = SL_PRESET_TRAIN;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--preset") && i + 1 < argc) {
            i++;
            o.preset = !strcmp(argv[i], "val") ? SL_PRESET_VAL : SL_PRESET_TRAIN;
        } else if (!strcmp(argv[i], "--size") && i + 1 < argc) {
            o.size = (uint32_t)atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--fast")) {
            o.flags |= SL_FLAG_FAST;
        } else if (!strcmp(argv[i], "--bicubic")) {
            recipe.interpolation = SL_INTERP_BICUBIC;
        } else {
            fprintf(stderr, "usage: ... | recipe_cost [--preset train|val] [--size N] [--fast] [--bicubic]\n");
            return 2;
        }
    }
    size_t cap = 64, n = 0;
    struct blob *files = malloc(cap * sizeof *files);
    char line[4096];
    while (files && fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        if (n == cap) files = realloc(files, (cap *= 2) * sizeof *files);
        if (files && read_file(line, &files[n]) == 0) n++;
    }
    if (!files || !n) {
        fprintf(stderr, "recipe_cost: no readable files on stdin\n");
        return 1;
    }
    size_t out_len = (size_t)4 * o.size * o.size;
    unsigned char *out = malloc(out_len);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int failed = decode_all(files, n, &o, out, out_len);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("samples %zu failed %d seconds %.3f\n", n, failed, (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
    for (size_t i = 0; i < n; i++) free(files[i].p);
    free(files);
    free(out);
    return 0;
}
