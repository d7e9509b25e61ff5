/*
 * The image-recipe flags shared by `sluice bench` and `sluice decode`:
 *   --size N | --size H,W   --interpolation bilinear|bicubic
 *   --scale A,B  --ratio A,B  --hflip P          (train)
 *   --crop-pct X | --resize N                     (val)
 *   --fast  --max-scans N
 * They fill the public sl_image_recipe; the library checks the ranges
 * (sl_loader_create / sl_image_decode say what is wrong).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "recipe.h"

const char *const sl_cli_recipe_usage =
    "  recipe: [--size N | --size H,W] [--interpolation bilinear|bicubic] [--fast]\n"
    "          train: [--scale A,B] [--ratio A,B] [--hflip P]   val: [--crop-pct X | --resize N]\n"
    "          [--max-scans N] (JPEG scans a file may have, 64)\n";

static int parse_double(const char *s, double *v, char **end) {
    errno = 0;
    *v = strtod(s, end);
    return errno || *end == s || !isfinite(*v) ? -1 : 0;
}

/* "A,B" into two doubles. */
static int parse_pair(const char *s, double *a, double *b) {
    char *end;
    if (parse_double(s, a, &end) || *end != ',') return -1;
    if (parse_double(end + 1, b, &end) || *end) return -1;
    return 0;
}

/* A whole number 1..max. */
static int parse_u32(const char *s, uint32_t max, uint32_t *v) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || x < 1 || x > max) return -1;
    *v = (uint32_t)x;
    return 0;
}

/* --size N or H,W */
static int parse_size(const char *v, sl_cli_recipe *o) {
    const char *comma = strchr(v, ',');
    if (!comma) return parse_u32(v, 16384, o->size);
    char h[32];
    size_t n = (size_t)(comma - v);
    if (n == 0 || n >= sizeof h) return -1;
    memcpy(h, v, n);
    h[n] = 0;
    if (parse_u32(h, 16384, &o->recipe->height) || parse_u32(comma + 1, 16384, &o->recipe->width)) return -1;
    *o->size = o->recipe->height > o->recipe->width ? o->recipe->height : o->recipe->width;
    return 0;
}

static int parse_value(const char *a, const char *v, sl_cli_recipe *o) {
    sl_image_recipe *r = o->recipe;
    char *end;
    if (!strcmp(a, "--size")) return parse_size(v, o);
    if (!strcmp(a, "--interpolation")) {
        if (!strcmp(v, "bilinear")) r->interpolation = SL_INTERP_BILINEAR;
        else if (!strcmp(v, "bicubic")) r->interpolation = SL_INTERP_BICUBIC;
        else return -1;
        return 0;
    }
    if (!strcmp(a, "--scale")) return parse_pair(v, &r->scale_min, &r->scale_max);
    if (!strcmp(a, "--ratio")) return parse_pair(v, &r->ratio_min, &r->ratio_max);
    if (!strcmp(a, "--resize")) return parse_u32(v, 65536, &r->resize);
    if (!strcmp(a, "--max-scans")) return parse_u32(v, 1u << 20, o->max_scans);
    if (!strcmp(a, "--crop-pct")) return parse_double(v, &r->crop_pct, &end) || *end || r->crop_pct <= 0 ? -1 : 0;
    /* --hflip: a probability; 0 never flips */
    double p;
    if (parse_double(v, &p, &end) || *end || p < 0 || p > 1) return -1;
    r->hflip = p > 0 ? p : SL_HFLIP_NEVER;
    return 0;
}

/* The flags that take a value first, in the order of expect[]. */
const char *const sl_cli_recipe_flags[] = {"--size", "--interpolation", "--scale", "--ratio", "--resize",
                                           "--max-scans", "--crop-pct", "--hflip", "--fast", NULL};
static const char *const expect[] = {"N or H,W (1..16384)", "bilinear or bicubic", "A,B (0 < A <= B <= 1)",
                                     "A,B (w/h, 0 < A <= B)", "a side in pixels", "a count (1..1048576)",
                                     "a fraction in (0, 1]", "a probability in [0, 1]"};

int sl_cli_recipe_flag(const char *cmd, int argc, char **argv, int *i, sl_cli_recipe *o) {
    const char *a = argv[*i];
    if (!strcmp(a, "--fast")) {
        *o->flags |= SL_FLAG_FAST;
        return 1;
    }
    for (size_t k = 0; k < sizeof expect / sizeof expect[0]; k++) {
        if (strcmp(a, sl_cli_recipe_flags[k])) continue;
        if (*i + 1 >= argc) {
            fprintf(stderr, "sluice %s: %s needs a value: %s\n", cmd, a, expect[k]);
            return -1;
        }
        const char *v = argv[++*i];
        if (parse_value(a, v, o)) {
            fprintf(stderr, "sluice %s: %s takes %s, not '%s'\n", cmd, a, expect[k], v);
            return -1;
        }
        return 1;
    }
    return 0;
}

void sl_cli_out_dims(uint32_t size, const sl_image_recipe *r, uint32_t *height, uint32_t *width) {
    *height = r->height ? r->height : size;
    *width = r->width ? r->width : size;
}
