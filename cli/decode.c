/*
 * sluice decode FILE [-o OUT.ppm] [--preset none|train|val]
 *   [--seed S --epoch E --index I] [--exif] [--max-pixels N] [--max-bytes N]
 *   [recipe flags, cli/recipe.c: --size N|H,W --interpolation --scale
 *   --ratio --hflip --crop-pct --resize --fast --max-scans]
 *
 * Decodes one image exactly as the loader would and writes it as a binary
 * PPM (RGB), or prints its header with --info. For looking at what the
 * model sees, and for checking a suspicious file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "common.h"
#include "recipe.h"
#include "sluice.h"

int sl_cli_decode(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    int info_only = 0;
    sl_decode_opts o;
    sl_decode_opts_init(&o);
    sl_cli_recipe ro = {&o.recipe, &o.size, &o.flags, &o.max_scans};
    for (int i = 1; i < argc; i++) {
        int used = sl_cli_recipe_flag("decode", argc, argv, &i, &ro);
        if (used < 0) return 2;
        if (used) continue;
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--info")) info_only = 1;
        else if (!strcmp(a, "--exif")) o.flags |= SL_FLAG_EXIF;
        else if ((!strcmp(a, "-o") || !strcmp(a, "--preset") || !strcmp(a, "--seed") ||
                  !strcmp(a, "--epoch") || !strcmp(a, "--index") || !strcmp(a, "--max-pixels") ||
                  !strcmp(a, "--max-bytes")) && v) {
            i++;
            if (!strcmp(a, "-o")) out = v;
            else if (!strcmp(a, "--preset")) {
                if (!strcmp(v, "none")) o.preset = SL_TRANSFORM_NONE;
                else if (!strcmp(v, "train")) o.preset = SL_PRESET_TRAIN;
                else if (!strcmp(v, "val")) o.preset = SL_PRESET_VAL;
                else {
                    fprintf(stderr, "sluice decode: --preset is none, train or val\n");
                    return 2;
                }
            } else {
                char *end;
                errno = 0;
                unsigned long long x = strtoull(v, &end, 10);
                if (errno || *end || end == v) {
                    fprintf(stderr, "sluice decode: %s takes a number, not '%s'\n", a, v);
                    return 2;
                }
                if (!strcmp(a, "--seed")) o.seed = x;
                else if (!strcmp(a, "--epoch")) o.epoch = x;
                else if (!strcmp(a, "--index")) o.index = x;
                else if (!strcmp(a, "--max-bytes")) o.max_bytes = x;
                else o.max_pixels = x;
            }
        } else if (a[0] != '-' && !in) in = a;
        else {
            fprintf(stderr, "usage: sluice decode FILE [-o OUT.ppm] [--info] [--preset none|train|val]\n"
                            "                     [--seed S --epoch E --index I] [--exif] [--max-pixels N]\n"
                            "                     [--max-bytes N]\n%s",
                    sl_cli_recipe_usage);
            return 2;
        }
    }
    if (!in) {
        fprintf(stderr, "sluice decode: no FILE\n");
        return 2;
    }
    unsigned char *data;
    size_t len;
    char err[256] = "";
    int rc = sl_cli_read_file(in, o.max_bytes ? o.max_bytes : (64ull << 20), &data, &len, err, sizeof err);
    if (rc) {
        fprintf(stderr, "sluice decode: %s\n", err);
        return 1;
    }
    sl_image_info info;
    rc = sl_image_probe(data, len, &info);
    if (rc) {
        sl_image_check(data, len, &o, NULL, NULL, NULL, err, sizeof err); /* the probe's reason */
        fprintf(stderr, "sluice decode: %s: %s%s%s\n", in, sl_strerror(rc), err[0] ? ": " : "", err);
        free(data);
        return 1;
    }
    if (info_only || !out) {
        printf("%s: %s %ux%u, %u channels, %d-bit%s, orientation %d\n", in,
               info.format == SL_FORMAT_JPEG ? "JPEG" : info.format == SL_FORMAT_WEBP ? "WebP" : "PNG", info.width,
               info.height, info.channels, info.bit_depth,
               info.progressive ? (info.format == SL_FORMAT_JPEG   ? ", progressive"
                                   : info.format == SL_FORMAT_WEBP ? ", decoded whole"
                                                                   : ", interlaced")
                                : "",
               info.orientation);
        if (!out) {
            free(data);
            return 0;
        }
    }
    uint32_t w, h, c;
    rc = sl_image_check(data, len, &o, &w, &h, &c, err, sizeof err);
    unsigned char *px = rc ? NULL : malloc((size_t)w * h * c);
    if (!rc && !px) rc = SL_ENOMEM;
    if (!rc) rc = sl_image_decode(data, len, &o, px, (size_t)w * h * c, err, sizeof err);
    free(data);
    if (rc) {
        fprintf(stderr, "sluice decode: %s: %s%s%s\n", in, sl_strerror(rc), err[0] ? ": " : "", err);
        free(px);
        return 1;
    }
    FILE *f = fopen(out, "wb");
    if (!f) {
        fprintf(stderr, "sluice decode: cannot write %s: %s\n", out, strerror(errno));
        free(px);
        return 1;
    }
    fprintf(f, "P6\n%u %u\n255\n", w, h);
    for (uint64_t i = 0; i < (uint64_t)w * h; i++) {
        unsigned char rgb[3];
        for (int k = 0; k < 3; k++)
            rgb[k] = o.preset == SL_TRANSFORM_NONE ? px[i * c + k] : px[(uint64_t)k * w * h + i];
        fwrite(rgb, 1, 3, f);
    }
    fclose(f);
    free(px);
    return 0;
}
