/*
 * sluice show SOURCE [--preset train|val] [--size N] [--batch 16] [--seed S]
 *   [--epoch E] [--no-shuffle] [--cols N] [--budget SIZE] [--workers N] -o GRID.png
 *
 * What the model sees: the first batch of SOURCE, exactly as a loader with
 * these options delivers it, drawn as a grid (PNG or PPM by extension).
 * Each tile is the sample's picture with captions under it: the label (and
 * the class name, the sample's folder, for an ImageFolder source) and the
 * dataset index, which `sluice decode FILE --index I` takes to redo it.
 *
 * Only the public API is used. A batch field maps to a tile renderer by its
 * kind (show_kind): a picture (uint8 [n, C, H, W]) fills the tile, a scalar
 * per sample (int64 [n]) becomes a caption line. New kinds (the middle frame
 * of a clip, an array as a heat map) are a new kind and an entry in
 * renderers[].
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "common.h"
#include "font.h"
#include "image_out.h"
#include "sluice.h"

#define GAP 4                       /* pixels between tiles and around the grid */
#define MAX_GRID_BYTES (1ull << 30) /* the canvas this command allocates, at most */
#define MAX_CAPTIONS 4              /* caption lines under a tile */
#define MAX_FIELDS 16               /* batch fields looked at */
#define MAX_BATCH 1024

static const unsigned char BACKGROUND[3] = {40, 40, 40};
static const unsigned char TEXT[3] = {255, 255, 255};

typedef struct show_args {
    sl_config cfg;
    const char *out;
    uint64_t epoch;
    uint32_t cols; /* 0: about square */
} show_args;

/* The canvas and the tile geometry. */
typedef struct grid {
    const sl_loader *ld;
    int folder_source;     /* labels have class names: the sample's folder */
    unsigned char *rgb;    /* canvas, HWC, w x h */
    uint32_t w, h;
    uint32_t cols, rows;
    uint32_t pic_w, pic_h; /* the picture area of a tile */
    uint32_t lines;        /* caption lines under it */
    uint32_t scale;        /* caption font scale */
    uint32_t line_h;       /* height of a caption line */
    uint32_t tile_h;       /* picture, 2 pixels, caption lines */
} grid;

/* Where sample i's tile is and which caption line the field being drawn got. */
typedef struct tile {
    uint32_t x, y, line;
} tile;

/* ---- renderers: a field kind maps to one ----------------------------------- */

enum { SHOW_SKIP = 0, SHOW_PICTURE, SHOW_CAPTION, SHOW__KINDS };

typedef void (*render_fn)(const grid *g, const sl_batch *b, const sl_field *f, uint32_t i, const tile *t);

/* The kind of a batch field, from its dtype and shape. */
static int show_kind(const sl_field *f) {
    if (f->dtype == SL_DTYPE_UINT8 && f->ndim == 4 && f->shape[1] >= 1 && f->shape[1] <= 4) return SHOW_PICTURE;
    if (f->dtype == SL_DTYPE_INT64 && f->ndim == 1) return SHOW_CAPTION;
    return SHOW_SKIP;
}

/* A CHW uint8 picture (1 channel: gray; 4: alpha ignored) into the tile. */
static void render_picture(const grid *g, const sl_batch *b, const sl_field *f, uint32_t i, const tile *t) {
    (void)b;
    uint64_t c = (uint64_t)f->shape[1], plane = (uint64_t)g->pic_w * g->pic_h;
    const unsigned char *img = (const unsigned char *)f->data + (uint64_t)i * (uint64_t)f->strides[0];
    for (uint32_t row = 0; row < g->pic_h; row++) {
        unsigned char *px = g->rgb + ((uint64_t)(t->y + row) * g->w + t->x) * 3;
        const unsigned char *src = img + (uint64_t)row * g->pic_w;
        for (uint32_t col = 0; col < g->pic_w; col++, px += 3)
            for (uint64_t k = 0; k < 3; k++) px[k] = src[(k < c ? k : 0) * plane + col];
    }
}

/* The class name of dataset sample index: its file's folder. */
static int class_name(const grid *g, int64_t index, char *name, size_t len) {
    char path[4096];
    const char *p = index >= 0 ? sl_loader_sample_path(g->ld, (uint64_t)index, path, sizeof path) : NULL;
    const char *slash = p ? strrchr(p, '/') : NULL;
    if (!slash || slash == p) return -1;
    const char *start = slash - 1;
    while (start > p && start[-1] != '/') start--;
    snprintf(name, len, "%.*s", (int)(slash - start), start);
    return 0;
}

/* "3 dog" (a label and its class folder), "#17" (the dataset index), or
 * "name=v" for any other scalar. */
static void render_caption(const grid *g, const sl_batch *b, const sl_field *f, uint32_t i, const tile *t) {
    char text[160], cls[128];
    int64_t v = ((const int64_t *)f->data)[i];
    sl_field index;
    if (!strcmp(f->name, "index")) snprintf(text, sizeof text, "#%" PRId64, v);
    else if (strcmp(f->name, "label")) snprintf(text, sizeof text, "%s=%" PRId64, f->name, v);
    else if (g->folder_source && !sl_batch_find(b, "index", &index) &&
             !class_name(g, ((const int64_t *)index.data)[i], cls, sizeof cls))
        snprintf(text, sizeof text, "%" PRId64 " %s", v, cls);
    else snprintf(text, sizeof text, "%" PRId64, v);
    uint32_t max_chars = g->pic_w / (SL_CLI_CELL_W * g->scale);
    sl_cli_draw_text(g->rgb, g->w, g->h, t->x + 1, t->y + g->pic_h + 2 + t->line * g->line_h, text, max_chars,
                     g->scale, TEXT);
}

static const render_fn renderers[SHOW__KINDS] = {
    [SHOW_PICTURE] = render_picture,
    [SHOW_CAPTION] = render_caption,
};

/* ---- layout ------------------------------------------------------------------ */

/* Size the grid for n samples from the batch's picture field; allocate the
 * canvas. Returns 0 or -1 (message printed). */
static int grid_layout(grid *g, const sl_field *picture, uint32_t ncaptions, uint32_t n, uint32_t cols) {
    g->pic_h = (uint32_t)picture->shape[2];
    g->pic_w = (uint32_t)picture->shape[3];
    g->lines = ncaptions;
    g->scale = g->pic_w >= 160 ? 2 : 1;
    g->line_h = SL_CLI_CELL_H * g->scale + 2;
    g->tile_h = g->pic_h + 2 + g->lines * g->line_h;
    g->cols = cols ? (cols < n ? cols : n) : 1;
    while (!cols && (uint64_t)g->cols * g->cols < n) g->cols++;
    g->rows = (n + g->cols - 1) / g->cols;
    uint64_t w = (uint64_t)g->cols * (g->pic_w + GAP) + GAP, h = (uint64_t)g->rows * (g->tile_h + GAP) + GAP;
    if (w * h * 3 > MAX_GRID_BYTES) {
        fprintf(stderr, "sluice show: a %" PRIu64 "x%" PRIu64 " grid is over the %llu MiB this command draws: lower --batch or --size\n",
                w, h, MAX_GRID_BYTES >> 20);
        return -1;
    }
    g->w = (uint32_t)w;
    g->h = (uint32_t)h;
    g->rgb = malloc(w * h * 3);
    if (!g->rgb) {
        fprintf(stderr, "sluice show: no memory for a %" PRIu64 "x%" PRIu64 " grid\n", w, h);
        return -1;
    }
    for (uint64_t p = 0; p < w * h; p++) memcpy(g->rgb + p * 3, BACKGROUND, 3);
    return 0;
}

/* Draw every sample of b: the first picture field fills the tile, scalar
 * fields (the first MAX_CAPTIONS) become caption lines; of the batch's
 * fields, the first MAX_FIELDS are looked at. Returns 0 or -1 (message
 * printed). */
static int draw_batch(grid *g, const sl_batch *b, uint32_t cols) {
    sl_field fields[MAX_FIELDS], *picture = NULL;
    int kinds[MAX_FIELDS], nfields = sl_batch_num_fields(b);
    uint32_t ncaptions = 0;
    if (nfields > MAX_FIELDS) nfields = MAX_FIELDS;
    for (int k = 0; k < nfields; k++) {
        kinds[k] = sl_batch_field(b, k, &fields[k]) ? SHOW_SKIP : show_kind(&fields[k]);
        if (kinds[k] == SHOW_PICTURE && picture) kinds[k] = SHOW_SKIP; /* one picture a tile */
        if (kinds[k] == SHOW_PICTURE) picture = &fields[k];
        if (kinds[k] == SHOW_CAPTION && ncaptions == MAX_CAPTIONS) kinds[k] = SHOW_SKIP;
        if (kinds[k] == SHOW_CAPTION) ncaptions++;
    }
    if (!picture) {
        fprintf(stderr, "sluice show: the batch has no picture field to draw\n");
        return -1;
    }
    uint32_t n = sl_batch_len(b);
    if (grid_layout(g, picture, ncaptions, n, cols)) return -1;
    for (uint32_t i = 0; i < n; i++) {
        tile t = {GAP + (i % g->cols) * (g->pic_w + GAP), GAP + (i / g->cols) * (g->tile_h + GAP), 0};
        for (int k = 0; k < nfields; k++) {
            if (kinds[k] == SHOW_SKIP) continue;
            renderers[kinds[k]](g, b, &fields[k], i, &t);
            if (kinds[k] == SHOW_CAPTION) t.line++;
        }
    }
    return 0;
}

/* ---- command line -------------------------------------------------------------- */

static void usage(FILE *f) {
    fputs("usage: sluice show SOURCE -o GRID.png [--preset train|val] [--size 224] [--batch 16]\n"
          "                   [--seed S] [--epoch E] [--no-shuffle] [--cols N]\n"
          "                   [--budget 512M] [--workers N|auto]\n"
          "Draws the first batch of SOURCE (an image folder or a .csv/.jsonl manifest), as a\n"
          "loader with these options delivers it, as a grid: each picture with its label (and\n"
          "class folder) and dataset index (for sluice decode --index) under it. The\n"
          "extension of GRID picks PNG or PPM.\n",
          f);
}

/* One flag and its value; returns 0, or -1 (message printed). */
static int parse_valued(show_args *a, const char *flag, const char *v) {
    uint64_t n;
    if (!strcmp(flag, "-o") || !strcmp(flag, "--output")) a->out = v;
    else if (!strcmp(flag, "--preset")) {
        if (!strcmp(v, "train")) a->cfg.preset = SL_PRESET_TRAIN;
        else if (!strcmp(v, "val")) a->cfg.preset = SL_PRESET_VAL;
        else {
            fprintf(stderr, "sluice show: --preset is train or val, not '%s'\n", v);
            return -1;
        }
    } else if (!strcmp(flag, "--budget")) {
        char why[256] = "0 bytes: give a size above 0, such as 512M";
        if (sl_parse_size_msg(v, &a->cfg.budget, why, sizeof why) || a->cfg.budget == 0) {
            fprintf(stderr, "sluice show: --budget: %s\n", why);
            return -1;
        }
    } else if (!strcmp(flag, "--workers") && !strcmp(v, "auto")) a->cfg.workers = 0;
    else if (!strcmp(flag, "--workers")) {
        if (sl_cli_whole("show", flag, v, 1, 1024, &n)) return -1;
        a->cfg.workers = (uint32_t)n;
    } else if (!strcmp(flag, "--size")) {
        if (sl_cli_whole("show", flag, v, 1, 16384, &n)) return -1;
        a->cfg.size = (uint32_t)n;
    } else if (!strcmp(flag, "--batch")) {
        if (sl_cli_whole("show", flag, v, 1, MAX_BATCH, &n)) return -1;
        a->cfg.batch_size = (uint32_t)n;
    } else if (!strcmp(flag, "--cols")) {
        if (sl_cli_whole("show", flag, v, 1, MAX_BATCH, &n)) return -1;
        a->cols = (uint32_t)n;
    } else if (!strcmp(flag, "--seed")) return sl_cli_whole("show", flag, v, 0, UINT64_MAX, &a->cfg.seed);
    else if (!strcmp(flag, "--epoch")) return sl_cli_whole("show", flag, v, 0, UINT64_MAX, &a->epoch);
    else {
        fprintf(stderr, "sluice show: unknown option %s\n", flag);
        usage(stderr);
        return -1;
    }
    return 0;
}

/* Returns 0 to go on, 1 when help was printed, -1 on a bad command line. */
static int parse_args(int argc, char **argv, show_args *a) {
    memset(a, 0, sizeof *a);
    sl_config_init(&a->cfg);
    a->cfg.batch_size = 16;
    a->cfg.workers = 2; /* one batch: a few threads are plenty */
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(arg, "--no-shuffle")) {
            a->cfg.shuffle = 0;
        } else if (arg[0] == '-' && arg[1]) {
            if (i + 1 >= argc) {
                fprintf(stderr, "sluice show: %s needs a value\n", arg);
                return -1;
            }
            if (parse_valued(a, arg, argv[++i])) return -1;
        } else if (!a->cfg.source) {
            a->cfg.source = arg;
        } else {
            fprintf(stderr, "sluice show: one SOURCE only ('%s' and '%s')\n", a->cfg.source, arg);
            return -1;
        }
    }
    if (!a->cfg.source || !a->out) {
        fprintf(stderr, "sluice show: %s\n", !a->cfg.source ? "no SOURCE" : "no -o GRID.png to write");
        usage(stderr);
        return -1;
    }
    if (sl_cli_image_format(a->out) == SL_CLI_IMAGE_UNKNOWN) {
        fprintf(stderr, "sluice show: cannot tell the format of '%s' from its extension: write .png or .ppm\n", a->out);
        return -1;
    }
    return 0;
}

/* The first batch of the loader, or NULL (message printed). */
static sl_batch *first_batch(sl_loader *ld, const show_args *a) {
    sl_batch *b = NULL;
    int rc = sl_loader_set_epoch(ld, a->epoch);
    if (!rc) rc = sl_loader_next(ld, &b);
    if (rc) fprintf(stderr, "sluice show: %s: %s\n", a->cfg.source, rc == SL_EEND ? "no batch in this epoch" : sl_strerror(rc));
    return rc ? NULL : b;
}

int sl_cli_show(int argc, char **argv) {
    show_args a;
    int prc = parse_args(argc, argv, &a);
    if (prc) return prc > 0 ? 0 : 2;
    char err[512] = "";
    sl_loader *ld;
    int rc = sl_loader_create(&a.cfg, &ld, err, sizeof err);
    if (rc) {
        fprintf(stderr, "sluice show: %s: %s\n", sl_strerror(rc), err[0] ? err : a.cfg.source);
        if (rc == SL_EBUDGET) fprintf(stderr, "sluice show: the options: --budget, --batch, --size, --workers\n");
        return 1;
    }
    struct stat st;
    grid g = {.ld = ld, .folder_source = !stat(a.cfg.source, &st) && S_ISDIR(st.st_mode)};
    sl_batch *b = first_batch(ld, &a);
    rc = !b || draw_batch(&g, b, a.cols) ? -1 : 0;
    uint32_t n = b ? sl_batch_len(b) : 0;
    sl_loader_release(ld, b);
    sl_stats stats;
    uint64_t errors = !sl_loader_stats(ld, &stats) ? stats.errors : 0;
    sl_loader_destroy(ld);
    if (!rc && sl_cli_write_rgb(a.out, g.rgb, g.w, g.h, err, sizeof err)) {
        fprintf(stderr, "sluice show: %s\n", err);
        rc = -1;
    }
    free(g.rgb);
    if (rc) return 1;
    printf("sluice show: wrote %s: %u samples of %s (preset %s, size %u, seed %" PRIu64 ", epoch %" PRIu64
           "), %ux%u tiles, %ux%u pixels; %" PRIu64 " samples skipped as errors\n",
           a.out, n, a.cfg.source, a.cfg.preset == SL_PRESET_VAL ? "val" : "train", a.cfg.size, a.cfg.seed, a.epoch,
           g.cols, g.rows, g.w, g.h, errors);
    return 0;
}
