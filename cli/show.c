/*
 * sluice show SOURCE [--fields FILE.json] [--preset train|val] [--size N] [--batch 16]
 *   [--seed S] [--epoch E] [--no-shuffle] [--cols N] [--budget SIZE] [--workers N] -o GRID.png
 *
 * What the model sees: the first batch of SOURCE, exactly as a loader with
 * these options delivers it, drawn as a grid (PNG or PPM by extension).
 * Each tile shows a sample: one panel per visual field, side by side, and
 * captions under them: the label (and the class name, the sample's folder,
 * for an ImageFolder source), other scalars as name=value, and the dataset
 * index, which `sluice decode FILE --index I` takes to redo it.
 *
 * Only the public API is used. A batch field maps to a renderer by its
 * dtype, shape and kind (field_view): a picture (uint8 C x H x W), the
 * middle frame of a clip or the middle element of a sequence, an array as
 * a heat map of its own range, points seen from above, a scalar per sample
 * as a caption line. A new way to draw is a kind and an entry in
 * renderers[].
 */
#include <inttypes.h>
#include <math.h>
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
#define MAX_PANELS 4                /* visual fields a tile shows */
#define SL_CLI_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SL_CLI_MAX(a, b) ((a) > (b) ? (a) : (b))
#define MAX_BATCH 1024

static const unsigned char BACKGROUND[3] = {40, 40, 40};
static const unsigned char TEXT[3] = {255, 255, 255};

typedef struct show_args {
    sl_config cfg;
    char *fields; /* the --fields file's text (owned) */
    const char *fields_path;
    const char *out;
    uint64_t epoch;
    uint32_t cols; /* 0: about square */
} show_args;

/* The canvas and the tile geometry. A tile holds one panel per visual
 * field of the batch, side by side, each drawn scaled (nearest) into a
 * panel_w x panel_h box, and caption lines under the panels. */
typedef struct grid {
    const sl_loader *ld;
    int folder_source;     /* labels have class names: the sample's folder */
    unsigned char *rgb;    /* canvas, HWC, w x h */
    uint32_t w, h;
    uint32_t cols, rows;
    uint32_t panels;       /* visual fields a tile shows */
    uint32_t panel_w, panel_h;
    uint32_t tile_w;       /* panels and the gaps between them */
    uint32_t lines;        /* caption lines under it */
    uint32_t scale;        /* caption font scale */
    uint32_t line_h;       /* height of a caption line */
    uint32_t tile_h;       /* panels, 2 pixels, caption lines */
} grid;

/* Where sample i's tile is, the panel being drawn and the caption line. */
typedef struct tile {
    uint32_t x, y, panel, line;
} tile;

/* ---- views: sample i of a field as a 2-D thing to draw ------------------------ */

enum { SHOW_SKIP = 0, SHOW_PICTURE, SHOW_HEAT, SHOW_POINTS, SHOW_CAPTION, SHOW__KINDS };

/* A sample's view: rows x cols of elements (with chans planes for a
 * picture), byte strides from base. For points: rows points of cols values,
 * valid of them real (the rest padding). */
typedef struct view {
    const unsigned char *base;
    int dtype;
    uint64_t rows, cols, chans;
    int64_t row_stride, col_stride, chan_stride;
    uint64_t valid;
} view;

#define MAX_PANEL 320 /* a panel's side at most, in canvas pixels */
#define MIN_HEAT 96   /* a heat map smaller than this on both sides is drawn an integer times larger */

/* The element at p as a double (NaN for what cannot be read). */
static double elem(const unsigned char *p, int dtype) {
    switch (dtype) {
    case SL_DTYPE_UINT8: return *p;
    case SL_DTYPE_BOOL: return *p != 0;
    case SL_DTYPE_INT8: return *(const int8_t *)p;
    case SL_DTYPE_INT16: { int16_t v; memcpy(&v, p, 2); return v; }
    case SL_DTYPE_UINT16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case SL_DTYPE_INT32: { int32_t v; memcpy(&v, p, 4); return v; }
    case SL_DTYPE_UINT32: { uint32_t v; memcpy(&v, p, 4); return v; }
    case SL_DTYPE_INT64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case SL_DTYPE_UINT64: { uint64_t v; memcpy(&v, p, 8); return (double)v; }
    case SL_DTYPE_FLOAT32: { float v; memcpy(&v, p, 4); return v; }
    case SL_DTYPE_FLOAT64: { double v; memcpy(&v, p, 8); return v; }
    case SL_DTYPE_FLOAT16: {
        uint16_t h;
        memcpy(&h, p, 2);
        int e = (h >> 10) & 31, m = h & 1023;
        double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
        return h & 0x8000 ? -v : v;
    }
    default: return NAN;
    }
}

/* The per-sample count of points of field f (its "<name>_len"), at the
 * sequence element elt when the field is a sequence; rows when none. */
static uint64_t points_valid(const sl_batch *b, const sl_field *f, uint32_t i, int64_t elt, uint64_t rows) {
    char name[256];
    sl_field len;
    snprintf(name, sizeof name, "%s_len", f->name);
    if (sl_batch_find(b, name, &len) || len.dtype != SL_DTYPE_INT64) return rows;
    const unsigned char *p = (const unsigned char *)len.data + (uint64_t)i * (uint64_t)len.strides[0];
    if (len.ndim == 2 && elt >= 0 && elt < len.shape[1]) p += (uint64_t)elt * (uint64_t)len.strides[1];
    else if (len.ndim != 1) return rows;
    int64_t v;
    memcpy(&v, p, sizeof v);
    return v >= 0 && (uint64_t)v < rows ? (uint64_t)v : rows;
}

/* How field f is drawn, and sample i's view of it (i = 0 to classify). A
 * clip or a sequence shows its middle element; uint8 C x H x W (C <= 4) is
 * a picture; a P x K array with few columns (K <= 16, P > K) is points
 * (x, y seen from above, colored by the third column); any other 2-D array
 * (or the first plane of a 3-D one) is a heat map; an int64 or float scalar
 * per sample is a caption. */
static int field_view(const sl_batch *b, const sl_field *f, uint32_t i, view *v) {
    memset(v, 0, sizeof *v);
    if (f->ndim == 1) return f->dtype == SL_DTYPE_INT64 || f->dtype == SL_DTYPE_FLOAT32 ? SHOW_CAPTION : SHOW_SKIP;
    const int64_t *shape = f->shape + 1, *strides = f->strides + 1;
    int dims = f->ndim - 1;
    int64_t elt = -1;
    v->base = (const unsigned char *)f->data + (uint64_t)i * (uint64_t)f->strides[0];
    v->dtype = f->dtype;
    if ((f->kind == SL_KIND_VIDEO || f->kind == SL_KIND_SEQUENCE) && dims >= 3 && shape[0] > 0) {
        elt = shape[0] / 2; /* the middle frame or element */
        v->base += (uint64_t)elt * (uint64_t)strides[0];
        shape++, strides++, dims--;
    }
    for (int d = 0; d < dims; d++)
        if (shape[d] <= 0) return SHOW_SKIP;
    if (dims == 3 && f->dtype == SL_DTYPE_UINT8 && shape[0] <= 4) {
        *v = (view){v->base, f->dtype, (uint64_t)shape[1], (uint64_t)shape[2], (uint64_t)shape[0],
                    strides[1], strides[2], strides[0], 0};
        return SHOW_PICTURE;
    }
    if (dims == 2 && shape[1] <= 16 && shape[0] > shape[1]) {
        *v = (view){v->base, f->dtype, (uint64_t)shape[0], (uint64_t)shape[1], 1, strides[0], strides[1], 0, 0};
        v->valid = points_valid(b, f, i, elt, v->rows);
        return shape[1] >= 2 ? SHOW_POINTS : SHOW_SKIP;
    }
    if (dims == 3 && shape[2] <= 4 && shape[0] > 4) /* H x W x C: its first channel */
        *v = (view){v->base, f->dtype, (uint64_t)shape[0], (uint64_t)shape[1], 1, strides[0], strides[1], 0, 0};
    else if (dims == 3) /* C x H x W: its first plane */
        *v = (view){v->base, f->dtype, (uint64_t)shape[1], (uint64_t)shape[2], 1, strides[1], strides[2], 0, 0};
    else if (dims == 2)
        *v = (view){v->base, f->dtype, (uint64_t)shape[0], (uint64_t)shape[1], 1, strides[0], strides[1], 0, 0};
    else return SHOW_SKIP;
    return SHOW_HEAT;
}

/* ---- renderers: a field kind maps to one ----------------------------------- */

typedef void (*render_fn)(const grid *g, const sl_batch *b, const sl_field *f, uint32_t i, const tile *t);

/* A color for t in [0, 1]: dark blue, teal, green, yellow (viridis-like). */
static void ramp(double t, unsigned char out[3]) {
    static const unsigned char stops[5][3] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
    if (!(t > 0)) t = 0; /* NaN too */
    if (t > 1) t = 1;
    double x = t * 4;
    int k = x >= 4 ? 3 : (int)x;
    double u = x - k;
    for (int c = 0; c < 3; c++) out[c] = (unsigned char)(stops[k][c] + u * (stops[k + 1][c] - stops[k][c]) + 0.5);
}

/* The panel's top-left pixel and the scale that fits rows x cols in it. */
static unsigned char *panel_origin(const grid *g, const tile *t, uint64_t rows, uint64_t cols, double *scale) {
    double sx = (double)g->panel_w / (double)cols, sy = (double)g->panel_h / (double)rows;
    *scale = sx < sy ? sx : sy;
    uint32_t x = t->x + t->panel * (g->panel_w + GAP);
    return g->rgb + ((uint64_t)t->y * g->w + x) * 3;
}

/* A CHW uint8 picture (1 channel: gray; 4: alpha ignored) into the panel. */
static void render_picture(const grid *g, const sl_batch *b, const sl_field *f, uint32_t i, const tile *t) {
    view v;
    field_view(b, f, i, &v);
    double s;
    unsigned char *o = panel_origin(g, t, v.rows, v.cols, &s);
    uint32_t ph = (uint32_t)(v.rows * s), pw = (uint32_t)(v.cols * s);
    for (uint32_t y = 0; y < ph; y++)
        for (uint32_t x = 0; x < pw; x++) {
            const unsigned char *src = v.base + (uint64_t)(y / s) * v.row_stride + (uint64_t)(x / s) * v.col_stride;
            unsigned char *px = o + ((uint64_t)y * g->w + x) * 3;
            for (uint64_t k = 0; k < 3; k++) px[k] = src[(k < v.chans ? k : 0) * v.chan_stride];
        }
}

/* A 2-D array as a heat map of its own range (min to max of the sample). */
static void render_heat(const grid *g, const sl_batch *b, const sl_field *f, uint32_t i, const tile *t) {
    view v;
    field_view(b, f, i, &v);
    double lo = INFINITY, hi = -INFINITY;
    for (uint64_t r = 0; r < v.rows; r++)
        for (uint64_t c = 0; c < v.cols; c++) {
            double e = elem(v.base + r * v.row_stride + c * v.col_stride, v.dtype);
            if (e < lo) lo = e;
            if (e > hi) hi = e;
        }
    double span = hi > lo ? hi - lo : 1, s;
    unsigned char *o = panel_origin(g, t, v.rows, v.cols, &s);
    uint32_t ph = (uint32_t)(v.rows * s), pw = (uint32_t)(v.cols * s);
    for (uint32_t y = 0; y < ph; y++)
        for (uint32_t x = 0; x < pw; x++) {
            double e = elem(v.base + (uint64_t)(y / s) * v.row_stride + (uint64_t)(x / s) * v.col_stride, v.dtype);
            ramp((e - lo) / span, o + ((uint64_t)y * g->w + x) * 3);
        }
}

/* Points seen from above: columns 0 and 1 as x and y over their range,
 * one pixel each, colored by column 2 when there is one. */
static void render_points(const grid *g, const sl_batch *b, const sl_field *f, uint32_t i, const tile *t) {
    view v;
    field_view(b, f, i, &v);
    double lo[3] = {INFINITY, INFINITY, INFINITY}, hi[3] = {-INFINITY, -INFINITY, -INFINITY};
    uint64_t nc = v.cols >= 3 ? 3 : 2;
    for (uint64_t r = 0; r < v.valid; r++)
        for (uint64_t c = 0; c < nc; c++) {
            double e = elem(v.base + r * v.row_stride + c * v.col_stride, v.dtype);
            if (e < lo[c]) lo[c] = e;
            if (e > hi[c]) hi[c] = e;
        }
    double s, span = SL_CLI_MAX(hi[0] - lo[0], hi[1] - lo[1]);
    if (!(span > 0)) span = 1;
    unsigned char *o = panel_origin(g, t, 1, 1, &s);
    uint32_t side = SL_CLI_MIN(g->panel_w, g->panel_h) - 1;
    for (uint64_t r = 0; r < v.valid; r++) {
        const unsigned char *row = v.base + r * v.row_stride;
        double x = (elem(row, v.dtype) - lo[0]) / span, y = (elem(row + v.col_stride, v.dtype) - lo[1]) / span;
        if (!(x >= 0 && x <= 1 && y >= 0 && y <= 1)) continue;
        unsigned char *px = o + ((uint64_t)(side - (uint32_t)(y * side)) * g->w + (uint32_t)(x * side)) * 3;
        if (nc == 3) ramp(hi[2] > lo[2] ? (elem(row + 2 * v.col_stride, v.dtype) - lo[2]) / (hi[2] - lo[2]) : 1, px);
        else memcpy(px, TEXT, 3);
    }
}

/* The class name of dataset sample index: its file's folder. */
static int class_name(const grid *g, int64_t index, char *name, size_t len) {
    char path[SL_PATH_MAX];
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
    sl_field index;
    if (f->dtype == SL_DTYPE_FLOAT32) {
        snprintf(text, sizeof text, "%s=%.4g", f->name, elem((const unsigned char *)f->data + i * 4u, f->dtype));
    } else {
        int64_t v = ((const int64_t *)f->data)[i];
        if (!strcmp(f->name, "index")) snprintf(text, sizeof text, "#%" PRId64, v);
        else if (strcmp(f->name, "label")) snprintf(text, sizeof text, "%s=%" PRId64, f->name, v);
        else if (g->folder_source && !sl_batch_find(b, "index", &index) &&
                 !class_name(g, ((const int64_t *)index.data)[i], cls, sizeof cls))
            snprintf(text, sizeof text, "%" PRId64 " %s", v, cls);
        else snprintf(text, sizeof text, "%" PRId64, v);
    }
    uint32_t max_chars = g->tile_w / (SL_CLI_CELL_W * g->scale);
    sl_cli_draw_text(g->rgb, g->w, g->h, t->x + 1, t->y + g->panel_h + 2 + t->line * g->line_h, text, max_chars,
                     g->scale, TEXT);
}

static const render_fn renderers[SHOW__KINDS] = {
    [SHOW_PICTURE] = render_picture,
    [SHOW_HEAT] = render_heat,
    [SHOW_POINTS] = render_points,
    [SHOW_CAPTION] = render_caption,
};

static const char *const kind_names[SHOW__KINDS] = {
    [SHOW_PICTURE] = "picture", [SHOW_HEAT] = "heat map", [SHOW_POINTS] = "points from above",
};

/* ---- layout ------------------------------------------------------------------ */

/* The panel box: the largest view of the visual fields (sample 0), each
 * side at most MAX_PANEL (a larger view is drawn scaled down; a small heat
 * map scaled up); points take a square. */
static void panel_size(grid *g, const sl_batch *b, const sl_field *fields, const int *kinds, int nfields) {
    g->panel_w = g->panel_h = 0;
    for (int k = 0; k < nfields; k++) {
        view v;
        if (kinds[k] == SHOW_SKIP || kinds[k] == SHOW_CAPTION) continue;
        field_view(b, &fields[k], 0, &v);
        uint64_t h = kinds[k] == SHOW_POINTS ? 160 : v.rows, w = kinds[k] == SHOW_POINTS ? 160 : v.cols;
        double s = SL_CLI_MIN(1.0, SL_CLI_MIN((double)MAX_PANEL / (double)h, (double)MAX_PANEL / (double)w));
        if (kinds[k] == SHOW_HEAT && SL_CLI_MAX(h, w) < MIN_HEAT) /* small crops: whole pixels, larger */
            s = (double)(MIN_HEAT / SL_CLI_MAX(h, w));
        g->panel_h = SL_CLI_MAX(g->panel_h, (uint32_t)(h * s));
        g->panel_w = SL_CLI_MAX(g->panel_w, (uint32_t)(w * s));
    }
    g->panel_h = SL_CLI_MAX(g->panel_h, 1u);
    g->panel_w = SL_CLI_MAX(g->panel_w, 1u);
}

/* Size the grid for n samples; allocate the canvas. Returns 0 or -1
 * (message printed). */
static int grid_layout(grid *g, uint32_t ncaptions, uint32_t n, uint32_t cols) {
    g->tile_w = g->panels * (g->panel_w + GAP) - GAP;
    g->lines = ncaptions;
    g->scale = g->tile_w >= 160 ? 2 : 1;
    g->line_h = SL_CLI_CELL_H * g->scale + 2;
    g->tile_h = g->panel_h + 2 + g->lines * g->line_h;
    g->cols = cols ? (cols < n ? cols : n) : 1;
    while (!cols && (uint64_t)g->cols * g->cols * g->panels < n) g->cols++;
    g->rows = (n + g->cols - 1) / g->cols;
    uint64_t w = (uint64_t)g->cols * (g->tile_w + GAP) + GAP, h = (uint64_t)g->rows * (g->tile_h + GAP) + GAP;
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

/* Draw every sample of b: each visual field a panel (the first
 * MAX_PANELS), scalar fields (the first MAX_CAPTIONS) caption lines; of
 * the batch's fields, the first MAX_FIELDS are looked at. The panels
 * drawn are listed in legend. Returns 0 or -1 (message printed). */
static int draw_batch(grid *g, const sl_batch *b, uint32_t cols, char *legend, size_t legend_len) {
    sl_field fields[MAX_FIELDS];
    int kinds[MAX_FIELDS], nfields = sl_batch_num_fields(b);
    uint32_t ncaptions = 0;
    size_t used = 0;
    if (nfields > MAX_FIELDS) nfields = MAX_FIELDS;
    g->panels = 0;
    legend[0] = 0;
    for (int k = 0; k < nfields; k++) {
        view v;
        kinds[k] = sl_batch_field(b, k, &fields[k]) || !sl_batch_len(b) ? SHOW_SKIP : field_view(b, &fields[k], 0, &v);
        if (kinds[k] == SHOW_CAPTION && ncaptions == MAX_CAPTIONS) kinds[k] = SHOW_SKIP;
        if (kinds[k] == SHOW_CAPTION) ncaptions++;
        if (kinds[k] != SHOW_SKIP && kinds[k] != SHOW_CAPTION && g->panels == MAX_PANELS) kinds[k] = SHOW_SKIP;
        if (kinds[k] == SHOW_SKIP || kinds[k] == SHOW_CAPTION) continue;
        g->panels++;
        int m = snprintf(legend + used, legend_len - used, "%s%s (%s)", used ? ", " : "", fields[k].name, kind_names[kinds[k]]);
        if (m > 0 && (size_t)m < legend_len - used) used += (size_t)m;
    }
    if (!g->panels) {
        fprintf(stderr, "sluice show: the batch has no field to draw (a picture, a clip, an array or points)\n");
        return -1;
    }
    panel_size(g, b, fields, kinds, nfields);
    uint32_t n = sl_batch_len(b);
    if (grid_layout(g, ncaptions, n, cols)) return -1;
    for (uint32_t i = 0; i < n; i++) {
        tile t = {GAP + (i % g->cols) * (g->tile_w + GAP), GAP + (i / g->cols) * (g->tile_h + GAP), 0, 0};
        for (int k = 0; k < nfields; k++) {
            if (kinds[k] == SHOW_SKIP) continue;
            renderers[kinds[k]](g, b, &fields[k], i, &t);
            if (kinds[k] == SHOW_CAPTION) t.line++;
            else t.panel++;
        }
    }
    return 0;
}

/* ---- command line -------------------------------------------------------------- */

static const char *const flags[] = {"-o", "--output", "--fields", "--preset", "--size", "--batch", "--seed",
                                    "--epoch", "--cols", "--budget", "--workers", "--no-shuffle", "--help", NULL};

static void usage(FILE *f) {
    fputs("usage: sluice show SOURCE -o GRID.png [--fields FILE.json] [--preset train|val]\n"
          "                   [--size 224] [--batch 16] [--seed S] [--epoch E] [--no-shuffle]\n"
          "                   [--cols N] [--budget 512M] [--workers N|auto]\n"
          "Draws the first batch of SOURCE (an image folder, a .csv/.jsonl manifest, tar\n"
          "shards; with --fields, the schema's fields: docs/fields.md), as a loader with\n"
          "these options delivers it, as a grid: a tile a sample, a panel a field (images;\n"
          "clips and sequences by their middle frame; arrays as heat maps; points seen\n"
          "from above), its label (and class folder), other scalars and dataset index (for\n"
          "sluice decode --index) under it. The extension of GRID picks PNG or PPM.\n",
          f);
}

/* One flag and its value; returns 0, or -1 (message printed). */
static int parse_valued(show_args *a, const char *flag, const char *v) {
    uint64_t n;
    if (!strcmp(flag, "-o") || !strcmp(flag, "--output")) a->out = v;
    else if (!strcmp(flag, "--fields")) {
        free(a->fields);
        if (!(a->fields = sl_cli_read_fields("show", v))) return -1;
        a->cfg.fields = a->fields;
        a->fields_path = v;
    }
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
        sl_cli_unknown_flag("show", flag, flags, NULL);
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
                if (sl_cli_flag_known(arg, flags, NULL)) fprintf(stderr, "sluice show: %s needs a value\n", arg);
                else sl_cli_unknown_flag("show", arg, flags, NULL);
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

/* Load the first batch and draw it; the loader is gone when this returns.
 * Returns 0 or -1 (message printed); n and errors as delivered. */
static int draw_first_batch(const show_args *a, grid *g, char *legend, size_t legend_len, uint32_t *n, uint64_t *errors) {
    char err[512] = "";
    sl_loader *ld;
    int rc = sl_loader_create(&a->cfg, &ld, err, sizeof err);
    if (rc) {
        sl_cli_error("show", rc, err[0] ? err : a->cfg.source);
        if (rc == SL_EBUDGET) fprintf(stderr, "sluice show: the options: --budget, --batch, --size, --workers\n");
        return -1;
    }
    struct stat st;
    g->ld = ld;
    g->folder_source = !a->fields && !stat(a->cfg.source, &st) && S_ISDIR(st.st_mode);
    sl_batch *b = first_batch(ld, a);
    rc = !b || draw_batch(g, b, a->cols, legend, legend_len) ? -1 : 0;
    *n = b ? sl_batch_len(b) : 0;
    sl_loader_release(ld, b);
    sl_stats stats;
    *errors = !sl_loader_stats(ld, &stats) ? stats.errors : 0;
    sl_loader_destroy(ld);
    g->ld = NULL;
    return rc;
}

int sl_cli_show(int argc, char **argv) {
    show_args a;
    int prc = parse_args(argc, argv, &a);
    if (prc) {
        free(a.fields);
        return prc > 0 ? 0 : 2;
    }
    grid g = {0};
    char legend[512], err[512];
    uint32_t n = 0;
    uint64_t errors = 0;
    int rc = draw_first_batch(&a, &g, legend, sizeof legend, &n, &errors);
    if (!rc && sl_cli_write_rgb(a.out, g.rgb, g.w, g.h, err, sizeof err)) {
        fprintf(stderr, "sluice show: %s\n", err);
        rc = -1;
    }
    free(g.rgb);
    free(a.fields);
    if (rc) return 1;
    char how[320];
    if (a.fields) snprintf(how, sizeof how, "fields of %s", a.fields_path);
    else snprintf(how, sizeof how, "preset %s, size %u", a.cfg.preset == SL_PRESET_VAL ? "val" : "train", a.cfg.size);
    printf("sluice show: wrote %s: %u samples of %s (%s, seed %" PRIu64 ", epoch %" PRIu64
           "), %ux%u tiles of %s, %ux%u pixels; %" PRIu64 " samples skipped as errors\n",
           a.out, n, a.cfg.source, how, a.cfg.seed, a.epoch, g.cols, g.rows, legend, g.w, g.h, errors);
    return 0;
}
