/*
 * sluice decode FILE [-o OUT.png|OUT.ppm] [--preset none|train|val]
 *   [--seed S] [--epoch E] [--index I] [--crop-group G] [--exif] [--max-pixels N] [--max-bytes SIZE]
 *   [--info]
 *   [recipe flags, cli/recipe.c: --size N|H,W --interpolation --scale --ratio
 *   --hflip --crop-pct --resize --fast --max-scans]
 *
 * Decodes one image exactly as the loader would and writes it in the
 * format OUT's extension names, or prints its header (without -o, or with
 * --info). For looking at what the model sees, and for checking a
 * suspicious file. Every value is checked before any work: numbers are
 * whole and >= 0, the output's extension is known, the file is within
 * --max-bytes before it is read.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "image_out.h"
#include "recipe.h"
#include "sluice.h"

/* Every flag but the recipe's, for "did you mean": those taking a value first. */
#define NVALUED 9
static const char *const flags[] = {"-o", "--output", "--preset", "--seed", "--epoch", "--index", "--max-pixels",
                                    "--max-bytes", "--crop-group", "--info", "--exif", "--help", NULL};

typedef struct decode_args {
    const char *in, *out;
    int info;
    sl_decode_opts o;
    sl_image_recipe recipe;     /* what o.recipe points at */
    const char *transform_flag; /* a flag that only matters when writing (for the error without -o) */
} decode_args;

static void usage(FILE *f) {
    fputs("usage: sluice decode FILE [-o OUT.png|OUT.ppm] [--preset none|train|val]\n"
          "                     [--seed S] [--epoch E] [--index I] [--crop-group G] [--exif]\n"
          "                     [--max-pixels N] [--max-bytes SIZE] [--info] [recipe flags]\n"
          "Decodes FILE as the loader would and writes what the model sees to OUT (its\n"
          "extension picks PNG or PPM). Without -o, prints the header only.\n"
          "  --preset     none (the whole image; the default), train (RandomResizedCrop + flip\n"
          "               of sample --index in --epoch of a loader seeded with --seed) or val\n"
          "               (resize + centre crop)\n"
          "  --crop-group G  train: the crop of a schema field other than \"image\": its\n"
          "               crop_group, or its name when it has none\n"
          "  --size N or H,W   output size for train and val (224)\n"
          "  --exif       apply EXIF orientation (ignored by default, as Pillow)\n"
          "  --max-pixels N, --max-bytes SIZE   the loader's per-sample limits (64 Mpx, 64M)\n"
          "  --info       also print the header when writing\n",
          f);
    fputs(sl_cli_recipe_usage, f);
}

static int parse_preset(const char *v, int *preset) {
    if (!strcmp(v, "none")) *preset = SL_TRANSFORM_NONE;
    else if (!strcmp(v, "train")) *preset = SL_PRESET_TRAIN;
    else if (!strcmp(v, "val")) *preset = SL_PRESET_VAL;
    else {
        fprintf(stderr, "sluice decode: --preset is none, train or val, not '%s'\n", v);
        return -1;
    }
    return 0;
}

/* One flag with its value v (NULL when it was the last word); *used is set
 * when v was taken. Returns 0 or -1 (message printed). */
static int parse_valued(decode_args *a, const char *flag, const char *v, int *used) {
    int known = 0;
    for (size_t i = 0; i < NVALUED; i++) known |= !strcmp(flag, flags[i]);
    if (!known) {
        sl_cli_unknown_flag("decode", flag, flags, sl_cli_recipe_flags);
        usage(stderr);
        return -1;
    }
    if (!v) {
        fprintf(stderr, "sluice decode: %s needs a value\n", flag);
        return -1;
    }
    *used = 1;
    uint64_t n;
    if (!strcmp(flag, "-o") || !strcmp(flag, "--output")) {
        a->out = v;
        return 0;
    }
    if (strcmp(flag, "--max-bytes")) a->transform_flag = flag;
    if (!strcmp(flag, "--preset")) return parse_preset(v, &a->o.preset);
    if (!strcmp(flag, "--crop-group")) {
        a->o.crop_group = v;
        return 0;
    }
    if (!strcmp(flag, "--max-bytes")) {
        char why[256] = "0 bytes: give a size above 0, such as 64M";
        if (sl_parse_size_msg(v, &n, why, sizeof why) || n == 0) {
            fprintf(stderr, "sluice decode: --max-bytes: %s\n", why);
            return -1;
        }
        a->o.max_bytes = n;
        return 0;
    }
    if (sl_cli_whole("decode", flag, v, !strcmp(flag, "--max-pixels") ? 1 : 0, UINT64_MAX, &n)) return -1;
    if (!strcmp(flag, "--seed")) a->o.seed = n;
    else if (!strcmp(flag, "--epoch")) a->o.epoch = n;
    else if (!strcmp(flag, "--index")) a->o.index = n;
    else a->o.max_pixels = n;
    return 0;
}

/* Returns 0 to go on, 1 when help was printed, -1 on a bad command line. */
static int parse_args(int argc, char **argv, decode_args *a) {
    memset(a, 0, sizeof *a);
    sl_decode_opts_init(&a->o);
    sl_image_recipe_init(&a->recipe);
    a->o.recipe = &a->recipe;
    sl_cli_recipe ro = {&a->recipe, &a->o.size, &a->o.flags, &a->o.max_scans};
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        int used = sl_cli_recipe_flag("decode", argc, argv, &i, &ro);
        if (used < 0) return -1;
        if (used) {
            a->transform_flag = arg;
            continue;
        }
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(arg, "--info")) {
            a->info = 1;
        } else if (!strcmp(arg, "--exif")) {
            a->o.flags |= SL_FLAG_EXIF;
            a->transform_flag = arg;
        } else if (arg[0] == '-' && arg[1]) {
            if (parse_valued(a, arg, i + 1 < argc ? argv[i + 1] : NULL, &used)) return -1;
            i += used;
        } else if (!a->in) {
            a->in = arg;
        } else {
            fprintf(stderr, "sluice decode: one FILE only ('%s' and '%s')\n", a->in, arg);
            return -1;
        }
    }
    if (!a->in) {
        fprintf(stderr, "sluice decode: no FILE\n");
        usage(stderr);
        return -1;
    }
    if (!a->out && a->transform_flag) {
        fprintf(stderr, "sluice decode: %s only matters when writing the picture: add -o OUT.png "
                        "(without -o, decode prints the header only)\n", a->transform_flag);
        return -1;
    }
    if (a->out && sl_cli_image_format(a->out) == SL_CLI_IMAGE_UNKNOWN) {
        fprintf(stderr, "sluice decode: cannot tell the format of '%s' from its extension: write .png or .ppm\n",
                a->out);
        return -1;
    }
    return 0;
}

/* The file's bytes, refused before reading when it is not a regular file
 * or is over max_bytes (never blocking: common.c). Returns 0, or 1 with a
 * message printed. */
static int read_input(const char *path, uint64_t max_bytes, unsigned char **data, size_t *len) {
    char err[512] = "";
    int rc = sl_cli_read_file(path, max_bytes ? max_bytes : (64ull << 20), data, len, err, sizeof err);
    if (rc) fprintf(stderr, "sluice decode: %s%s\n", err, rc == SL_ELIMIT ? " (--max-bytes)" : "");
    return rc ? 1 : 0;
}

static const char *format_name(int format) {
    switch (format) {
    case SL_FORMAT_JPEG: return "JPEG";
    case SL_FORMAT_PNG: return "PNG";
    case SL_FORMAT_WEBP: return "WebP";
    default: return "image";
    }
}

static void print_info(const char *path, const sl_image_info *info) {
    printf("%s: %s %ux%u, %u channels, %d-bit%s, orientation %d\n", path, format_name(info->format), info->width,
           info->height, info->channels, info->bit_depth,
           info->progressive ? (info->format == SL_FORMAT_JPEG   ? ", progressive"
                                : info->format == SL_FORMAT_WEBP ? ", decoded whole"
                                                                 : ", interlaced")
                             : "",
           info->orientation);
}

/* Decode with the library's own path; *rgb (HWC, 3 channels, malloc'd) for
 * the caller to free. Returns 0 or 1 (message printed). */
static int decode_rgb(const decode_args *a, const unsigned char *data, size_t len, unsigned char **rgb, uint32_t *w,
                      uint32_t *h) {
    uint32_t c;
    char err[256] = "";
    int rc = sl_image_output_size(data, len, &a->o, w, h, &c);
    size_t n = (size_t)*w * *h * c;
    unsigned char *px = rc ? NULL : malloc(n);
    *rgb = rc ? NULL : malloc((size_t)*w * *h * 3);
    if (!rc && (!px || !*rgb)) rc = SL_ENOMEM;
    if (!rc) rc = sl_image_decode(data, len, &a->o, px, n, err, sizeof err);
    if (rc) {
        char why[400];
        fprintf(stderr, "sluice decode: %s: %s\n", a->in, sl_cli_reason(rc, err, why, sizeof why));
        free(px);
        free(*rgb);
        return 1;
    }
    /* presets write CHW, NONE writes HWC; c is 3 (4 only with keep-alpha) */
    uint64_t plane = (uint64_t)*w * *h;
    for (uint64_t i = 0; i < plane; i++)
        for (uint32_t k = 0; k < 3; k++)
            (*rgb)[i * 3 + k] = a->o.preset == SL_TRANSFORM_NONE ? px[i * c + (k < c ? k : 0)]
                                                                 : px[(uint64_t)(k < c ? k : 0) * plane + i];
    free(px);
    return 0;
}

int sl_cli_decode(int argc, char **argv) {
    decode_args a;
    int prc = parse_args(argc, argv, &a);
    if (prc) return prc > 0 ? 0 : 2;
    unsigned char *data;
    size_t len;
    if (read_input(a.in, a.o.max_bytes, &data, &len)) return 1;
    sl_image_info info;
    int rc = sl_image_probe(data, len, &info);
    if (rc) {
        char err[256] = "";
        sl_image_check(data, len, &a.o, NULL, NULL, NULL, err, sizeof err); /* the probe's reason */
        char why[400];
        fprintf(stderr, "sluice decode: %s: %s\n", a.in, sl_cli_reason(rc, err, why, sizeof why));
        free(data);
        return 1;
    }
    if (a.info || !a.out) print_info(a.in, &info);
    if (!a.out) {
        free(data);
        return 0;
    }
    unsigned char *rgb;
    uint32_t w, h;
    rc = decode_rgb(&a, data, len, &rgb, &w, &h);
    free(data);
    if (rc) return 1;
    char err[512];
    rc = sl_cli_write_rgb(a.out, rgb, w, h, err, sizeof err);
    free(rgb);
    if (rc) {
        fprintf(stderr, "sluice decode: %s\n", err);
        return 1;
    }
    return 0;
}
