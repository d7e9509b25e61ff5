/* A built-in 5x7 bitmap font for captions drawn by the CLI (sluice show):
 * printable ASCII; any other character (each UTF-8 sequence) is drawn as
 * '?'. */
#ifndef SL_CLI_FONT_H
#define SL_CLI_FONT_H

#include <stdint.h>

#define SL_CLI_GLYPH_W 5
#define SL_CLI_GLYPH_H 7
#define SL_CLI_CELL_W 6 /* glyph and one column of space */
#define SL_CLI_CELL_H 8

/* Draw text on an RGB canvas (HWC, canvas_w x canvas_h) with its top-left
 * corner at (x, y), each font pixel a scale x scale square of color, at
 * most max_chars characters. Pixels outside the canvas are skipped. Never
 * fails. */
void sl_cli_draw_text(unsigned char *rgb, uint32_t canvas_w, uint32_t canvas_h, uint32_t x, uint32_t y,
                      const char *text, uint32_t max_chars, uint32_t scale, const unsigned char color[3]);

#endif
