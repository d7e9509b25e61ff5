/*
 * Ops: what happens to a sample between its bytes and its batch slot.
 *
 *   sl__plan()       from the header alone: which window to decode, what
 *                    output, flip; the bytes the whole sample will need
 *   sl__run()        decode that window straight into a resampler that
 *                    writes the output (CHW, flipped) into the caller's slot
 *
 * Resampling is Pillow's/torchvision's antialiased bilinear or bicubic (a
 * triangle or a=-0.5 cubic filter widened by the downscale factor;
 * separable, horizontal pass then vertical, 22-bit fixed point, uint8
 * between passes), so outputs match Resize(antialias=True) on the same
 * pixels.
 */
#ifndef SL_OPS_H
#define SL_OPS_H

#include <stdint.h>

#include "format/decode.h"
#include "format/video.h"
#include "sluice.h"

/* Deterministic per-sample randomness: depends only on (seed, epoch,
 * index), never on which worker runs the sample or when. */
typedef struct sl__rng {
    uint64_t s[4];
} sl__rng;
void sl__rng_init(sl__rng *r, uint64_t seed, uint64_t epoch, uint64_t index);
uint64_t sl__rng_next(sl__rng *r);
double sl__rng_uniform(sl__rng *r); /* [0, 1) */
uint64_t sl__rng_below(sl__rng *r, uint64_t n); /* [0, n), unbiased */
/* What a crop group xors into the seed: fields of one group (a field with
 * no group is a group of its own name) draw the same crops. "image" (and
 * NULL) is 0: the field of a loader without a schema, and sl_image_decode
 * and sl_video_decode without a crop_group, draw with the seed itself. */
uint64_t sl__rng_stream(const char *group);

/* One axis of a resize: outputs [first, first+n) of a resize of the box
 * [in0, in1) (source pixels) to total outputs, taps limited to [lo, hi),
 * with Pillow's filter `filter` (SL_INTERP_*, 0 = bilinear). */
typedef struct sl__axis_spec {
    double in0, in1;
    double lo, hi;
    uint32_t total, first, n;
    int filter;
} sl__axis_spec;

/* A recipe resolved: every default filled in, every value checked. Built
 * once from sl_config / sl_decode_opts (or, later, a schema field); plain
 * data, nothing to free. */
typedef struct sl__recipe {
    int preset;              /* SL_PRESET_TRAIN, SL_PRESET_VAL, SL_TRANSFORM_NONE */
    uint32_t out_w, out_h;   /* output (presets) */
    int interp;              /* SL_INTERP_* */
    double scale[2], ratio[2]; /* train: RandomResizedCrop ranges */
    double hflip;            /* train: P(flip), 0..1 */
    uint32_t resize;         /* val: short side after the resize, square output (0: cover) */
    uint32_t cover_w, cover_h; /* val, non-square: the resize keeps the aspect and covers
                                  cover_w x cover_h (timm ResizeKeepRatio) */
    uint32_t flags;          /* SL_FLAG_EXIF, SL_FLAG_KEEP_ALPHA, SL_FLAG_FAST */
    uint32_t max_scans;      /* JPEG scan limit, >= 1 */
} sl__recipe;

/* Resolve and check a recipe. 0, or SL_EINVAL with a reason naming the
 * value. `in` may be NULL (all defaults); max_scans 0 means the default. */
int sl__recipe_make(int preset, uint32_t size, const sl_image_recipe *in, uint32_t flags, uint32_t max_scans,
                    sl__recipe *out, char *reason, size_t rlen);
int sl__recipe_from_config(const sl_config *c, sl__recipe *out, char *reason, size_t rlen);
int sl__recipe_from_opts(const sl_decode_opts *o, sl__recipe *out, char *reason, size_t rlen);
/*
 * The recipe a caller's sl_config or sl_decode_opts asks for, into *dst
 * (this library's layout, struct_size ours). caller_size is the caller's
 * struct_size, ptr_end where the struct's recipe pointer ends: a caller
 * whose struct holds the pointer gets *ptr (NULL: the classic presets;
 * its struct_size checked as sl__abi_in does), an older one the 0.1
 * recipe embedded at legacy (reserved_0_1_recipe, of the library's copy
 * of the struct: zeros where the caller's was too short). 0, or SL_EINVAL
 * / SL_EUNSUPPORTED with a sentence naming `what`.
 */
int sl__recipe_import(sl_image_recipe *dst, size_t caller_size, size_t ptr_end, const sl_image_recipe *ptr,
                      const uint64_t *legacy, const char *what, char *err, size_t errlen);
/* A caller's configuration over the defaults (sl_config_init): its size
 * checked (sl__abi_in), its recipe resolved into *recipe and dst->recipe
 * pointing there, struct_size ours. Nothing else is checked. 0, or
 * SL_EINVAL / SL_EUNSUPPORTED with a sentence. */
int sl__config_import(sl_config *dst, sl_image_recipe *recipe, const sl_config *cfg, char *err, size_t errlen);

typedef struct sl__plan {
    int preset;              /* SL_PRESET_TRAIN, SL_PRESET_VAL, SL_TRANSFORM_NONE */
    sl__decode_req req;      /* window to decode (source pixels) */
    sl__axis_spec ax, ay;    /* resize (presets) */
    uint32_t out_w, out_h, channels;
    int flip;
    int orient;              /* EXIF orientation to apply (1: none) */
    uint32_t box[4];         /* train: the crop (x, y, w, h) */
    uint64_t mem;            /* bytes the sample needs beyond the input bytes */
} sl__plan;

/* One sample's plan inputs. The recipe is borrowed for the call. cancel,
 * when not NULL, is polled by the decoder (see sl__decode_req). */
typedef struct sl__plan_params {
    const sl__recipe *recipe;
    uint64_t seed, epoch, index;
    const _Atomic int *cancel;
} sl__plan_params;

/* Plan from the header. 0 or SL_EOVERFLOW/SL_EINVAL with a reason. */
int sl__plan_sample(const sl_image_info *info, const sl__plan_params *pp, sl__plan *p, char *reason,
                    size_t rlen);

/* What the format's library allocates for this file, read from its bytes
 * (sl__decode_lib_need; 0: nothing read), in place of the header's bound:
 * p->req carries it to the decoder and p->mem counts it. */
void sl__plan_lib_mem(const sl_image_info *info, sl__plan *p, uint64_t lib);

/* An upper bound of sl__plan_sample()'s mem for this header over every
 * epoch and index (the train crop varies; see bound.c). 0 if the header
 * cannot be planned. */
uint64_t sl__plan_mem_bound(const sl_image_info *info, const sl__plan_params *pp);

/* Decode and transform into dst (presets: CHW out_h x out_w; NONE: HWC).
 * Allocates only from q (which must hold p->mem). */
int sl__run(sl__decoder *d, const uint8_t *data, size_t len, const sl_image_info *info,
            const sl__plan *p, sl__quota *q, uint8_t *dst, char *reason, size_t rlen);


/* RandomResizedCrop box (x, y, w, h) for the recipe's scale and ratio,
 * torchvision's algorithm (10 tries, then the centre crop at the nearest
 * allowed ratio), then the flip draw. Never fails: the box is inside the
 * image and at least 1x1 for any width, height >= 1. */
void sl__train_box(const sl__recipe *rc, uint32_t width, uint32_t height, sl__rng *r, uint32_t box[4], int *flip);

/* The val preset's geometry for a W x H image under the recipe: resized to
 * rw x rh (short side to size*256/224, or the recipe's crop_pct / resize),
 * then the output window at (cx, cy) (torchvision's Resize + CenterCrop
 * rounding). 0, or SL_EINVAL / SL_ELIMIT (too thin or too elongated) with
 * a reason. */
int sl__val_geometry(const sl__recipe *rc, uint32_t W, uint32_t H, uint32_t *rw, uint32_t *rh, uint32_t *cx,
                     uint32_t *cy, char *reason, size_t rlen);

/* ---- video clips (clip.c): which frames, which crop ----------------------- */

typedef struct sl__clip_spec {
    uint32_t frames;   /* T, 1..SL_CLIP_MAX_FRAMES */
    uint32_t stride;   /* frames between clip frames (>= 1); ignored when fps > 0 */
    double fps;        /* > 0: sample at this rate instead of stride */
    int short_clip;    /* SL_CLIP_PAD, SL_CLIP_LOOP or SL_CLIP_ERROR (sluice.h): a clip
                          longer than the video repeats its last frame, wraps
                          around, or is an SL_ELIMIT record */
    sl__recipe recipe; /* preset, output size and the crop options, as an image field's */
} sl__clip_spec;

/* The clip's frames, crop and memory from the header alone. Draws from rng
 * (seeded by the caller from (seed, epoch, index)) in a fixed order: the
 * temporal offset (train), then the RandomResizedCrop box and the flip
 * (sl__train_box, the recipe's, as images); val takes the centred clip and the val preset's
 * resize + centre crop (sl__val_geometry). Pure: returns 0, or SL_EINVAL (bad spec) /
 * SL_ELIMIT (SL_CLIP_ERROR and too short) / SL_EOVERFLOW with a reason. */
int sl__video_plan(const sl__video_info *info, const sl__clip_spec *spec, sl__rng *rng,
                   sl__clip_plan *plan, char *reason, size_t rlen);

/* The single-clip calls' steps on a file (clip.c): open path, probe it
 * with o's limits, plan o's clip (its seed, epoch, index). 0 with f open
 * (the caller closes f->fd), or the failure with nothing open. */
int sl__clip_file(const char *path, const sl_video_opts *o, sl__sample_file *f, sl__video_info *vi,
                  sl__clip_plan *p, char *err, size_t errlen);

/* ---- video clips on the GPU path, its arithmetic on the CPU (yuv.c) --------
 * The GPU decodes with NVDEC, resizes the box's luma and chroma planes
 * with the image path's kernels and converts the result from YUV to RGB
 * (src/gpu/video.c): the steps of the CPU path's swscale, in the image
 * path's arithmetic. The same steps on the CPU, over the software
 * decoder's frames, give the same bytes (the kernels mirror
 * sl__yuv_pack_row and sl__yuv_rgb, the resize kernels the CPU
 * resampler). docs/video.md bounds their difference from the CPU path's
 * clip. */

/* The clip's resize on the GPU path: the plan's box (its origin on the
 * 4:2:0 chroma grid, as the CPU path's swscale reads it; coded pixels)
 * and its chroma box (swscale's: ceil(w/2) x ceil(h/2) samples from
 * (x/2, y/2)), each scaled to the plan's scaled size of which the output
 * window is taken: axes of the image presets' arithmetic, taps inside
 * the boxes. Rotated streams are not taken: SL_EUNSUPPORTED "for the
 * CPU: ...". */
typedef struct sl__clip_geom {
    sl__axis_spec ax, ay;   /* luma */
    sl__axis_spec bx, by;   /* chroma */
    uint32_t x, y, w, h;    /* luma box */
    uint32_t cx, cy, cw, ch; /* chroma box */
} sl__clip_geom;
int sl__clip_geometry(const sl__video_info *info, const sl__clip_plan *p, sl__clip_geom *g, char *reason,
                      size_t rlen);

/* YUV -> RGB coefficients, 16-bit fixed point: R = cy(Y-oy) + crv(V-128),
 * G = cy(Y-oy) - cgu(U-128) - cgv(V-128), B = cy(Y-oy) + cbu(U-128). */
typedef struct sl__yuv_coefs {
    int32_t cy, oy, crv, cbu, cgu, cgv;
} sl__yuv_coefs;
void sl__yuv_coefs_of(int colorspace, int full_range, sl__yuv_coefs *c);

/* n pixels of row y from column x0 of frame fr (host memory) as the
 * resize takes them: luma (chroma 0) as (Y, Y, Y), chroma (row and
 * columns in chroma samples) as (U, V, V). */
void sl__yuv_pack_row(const sl__video_frame *fr, int chroma, uint32_t x0, uint32_t y, uint32_t n, uint8_t *px);
/* n resized pixels (planes y, u, v) to RGB planes r, g, b. */
void sl__yuv_rgb(const uint8_t *y, const uint8_t *u, const uint8_t *v, size_t n, const sl__yuv_coefs *c, uint8_t *r,
                 uint8_t *g, uint8_t *b);

/* A sink (sl__video_decode_into, software decoder) writing the clip the
 * GPU path would write, into dst ([T][3][out_h][out_w]); its buffers from
 * q, mem bytes beyond the decode's own plan.quota. */
typedef struct sl__clip_ref {
    sl__video_sink sink;
    sl__clip_geom geom;
    sl__quota *q;
    uint8_t *dst;
    uint64_t frame_bytes;
    uint64_t mem;
    int flip;
} sl__clip_ref;
int sl__clip_ref_init(sl__clip_ref *r, const sl__video_info *info, const sl__clip_plan *p, sl__quota *q,
                      uint8_t *dst, char *reason, size_t rlen);
uint64_t sl__clip_ref_mem(const sl__clip_geom *g, uint32_t out_w, uint32_t out_h);

#endif
