/* Writing 8-bit RGB pictures from the CLI (decode -o, show -o): PNG or
 * binary PPM, chosen by the file name's extension. No library needed: the
 * PNG is a valid zlib stream of stored (uncompressed) deflate blocks. */
#ifndef SL_CLI_IMAGE_OUT_H
#define SL_CLI_IMAGE_OUT_H

#include <stddef.h>
#include <stdint.h>

enum { SL_CLI_IMAGE_UNKNOWN = 0, SL_CLI_IMAGE_PNG, SL_CLI_IMAGE_PPM };

/* The format path's extension names (".png", ".ppm", any case), or
 * SL_CLI_IMAGE_UNKNOWN. Check it before doing the work that makes the
 * picture. */
int sl_cli_image_format(const char *path);

/* Write rgb (h rows of w * 3 bytes, top row first) to path in the format
 * its extension names. Returns 0, or -1 with a sentence naming path and the
 * reason in err (unknown extension, a picture too large for the format, a
 * failed open or write; a partly written file is removed). Fails on no
 * input: w and h must be >= 1. */
int sl_cli_write_rgb(const char *path, const unsigned char *rgb, uint32_t w, uint32_t h, char *err, size_t errlen);

#endif
