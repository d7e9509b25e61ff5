/* Image-recipe flags shared by CLI subcommands (see recipe.c). */
#ifndef SL_CLI_RECIPE_H
#define SL_CLI_RECIPE_H

#include <stdint.h>

#include "sluice.h"

/* Where the flags land: a config's or decode options' fields. */
typedef struct sl_cli_recipe {
    sl_image_recipe *recipe;
    uint32_t *size;      /* --size N (and max(H, W) for --size H,W) */
    uint32_t *flags;     /* --fast sets SL_FLAG_FAST */
    uint32_t *max_scans; /* --max-scans */
} sl_cli_recipe;

/* Lines for a command's usage text. */
extern const char *const sl_cli_recipe_usage;
/* The recipe flags, NULL-terminated (for "did you mean"). */
extern const char *const sl_cli_recipe_flags[];

/* If argv[*i] is a recipe flag, consume it (and its value: *i advances)
 * and return 1; 0 if it is not one; -1 after printing why its value is
 * wrong ("sluice CMD: --scale takes A,B ..., not 'x'"). */
int sl_cli_recipe_flag(const char *cmd, int argc, char **argv, int *i, sl_cli_recipe *o);

/* The output height and width of images under size and recipe. */
void sl_cli_out_dims(uint32_t size, const sl_image_recipe *r, uint32_t *height, uint32_t *width);

#endif
