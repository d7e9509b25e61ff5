/*
 * The GPU half of the resampler: crop + antialiased resize + flip from a
 * decoded RGB region into a CHW uint8 batch slot, as kernels built
 * at run time with NVRTC (see docs/gpu.md for why NVRTC).
 *
 * The arithmetic is the CPU resampler's (src/ops/resize.c): Pillow's
 * triangle filter widened by the scale factor, coefficients normalized in
 * double and rounded to 22-bit fixed point, horizontal pass then vertical
 * with uint8 between them, flip applied where the horizontal pass puts its
 * columns; where the height shrinks by more than twice as many pixels as
 * the width (sl__resample_vertical_first, Pillow's order) the vertical
 * pass runs first. Compiled with --fmad=false so the double arithmetic
 * rounds as the CPU's does: on the same pixels the bytes are equal (tested).
 *
 *   sl_coeffs     one thread per output coordinate per axis: taps, weights
 *   sl_tiled      one block per output tile of SL_GPU_TILE_W x SL_GPU_TILE_H:
 *                 the first pass's rows (or columns) the tile reads, into
 *                 shared memory, then the second pass from there into dst.
 *                 Every sample whose tile fits (SL_GPU_TILED); one launch.
 *   the two-pass kernels, for a sample whose first pass a tile cannot hold
 *   (a downscale of about 28x or more) or with SLUICE_GPU_RESIZE=passes:
 *   sl_hpass      one thread per (output column, region row): planes in tmp
 *   sl_vpass      one thread per (output column, output row): CHW in dst
 *   sl_vfirst_v   vertical first: one thread per (region column, output row)
 *   sl_vfirst_h   then one thread per (output column, output row): CHW in dst
 */
#ifndef SL_GPU_KERNELS_H
#define SL_GPU_KERNELS_H

#include <stdint.h>

#include "base/mem.h"
#include "gpu/cuda.h"

/* One axis, as sl__axis_spec plus the tap count per output (ksize). */
typedef struct sl__gpu_axis {
    double in0, in1, lo, hi;
    uint32_t total, first, n, ksize;
} sl__gpu_axis;

/* One sample's work, in device memory (the kernels' view). Every pointer
 * is a device address inside the engine's pool. Layout shared with the
 * kernel source (checked by _Static_assert against SL_GPU_DESC_SIZE). */
typedef struct sl__gpu_desc {
    uint64_t src, pitch;            /* decoded region, RGB interleaved, bytes per row */
    uint64_t tmp, dst;              /* C planes of reg_h x ax.n; CHW ay.n x ax.n */
    uint64_t kx, minx, cntx;        /* x taps: ax.n x ksize int32, first tap, count */
    uint64_t ky, miny, cnty;
    sl__gpu_axis ax, ay;
    uint32_t reg_x, reg_y, reg_w, reg_h; /* decoded region, image pixels */
    uint32_t full_w, full_h;        /* the image */
    int32_t flip;
    uint32_t how;                   /* SL_GPU_VFIRST | SL_GPU_TILED */
} sl__gpu_desc;
#define SL_GPU_DESC_SIZE 208
_Static_assert(sizeof(sl__gpu_desc) == SL_GPU_DESC_SIZE, "descriptor layout");

#define SL_GPU_VFIRST 1u /* vertical pass first (tmp: C planes of ay.n x reg_w) */
#define SL_GPU_TILED 2u  /* sl_tiled resizes it (tmp unused); else the two-pass kernels */

/* sl_tiled's output tile and the most dynamic shared memory a block may
 * take (CUDA's 48 KiB without opting in, less room for the kernel's own
 * static shared words); the kernel source has the tile's sides. */
#define SL_GPU_TILE_W 32
#define SL_GPU_TILE_H 16
#define SL_GPU_TILE_SHARED_MAX ((48u << 10) - 256)

/* Shared bytes sl_tiled may need for a tile of d (an upper bound: the
 * first pass's span over a tile, C planes), or UINT32_MAX where that
 * exceeds SL_GPU_TILE_SHARED_MAX. ax, ay, how set. */
uint32_t sl__gpu_tile_bytes(const sl__gpu_desc *d);

typedef struct sl__gpu_kernels {
    sl_CUmodule mod;
    sl_CUfunction coeffs, tiled, hpass, vpass, vfirst_v, vfirst_h;
} sl__gpu_kernels;

/* Load the kernels into the current context (device dev): the image kept
 * in the kernel cache on disk for this compute capability and driver
 * (kernels.c says where and why), else one compiled now with NVRTC (loaded
 * then, only then) and kept there for the next process. Every buffer is
 * counted in host and freed before the call returns. where says which
 * ("cached (PATH)", "compiled by NVRTC 12.8, cached (PATH)", ...). 0, or
 * SL_EUNSUPPORTED (no NVRTC, the compiler's log, the driver's reason),
 * SL_EBUDGET (host cannot hold the image). */
int sl__gpu_kernels_load(const sl__cuda_api *cu, sl_CUdevice dev, sl__budget *host, sl__gpu_kernels *k,
                         char *where, size_t wlen, char *err, size_t errlen);
void sl__gpu_kernels_unload(const sl__cuda_api *cu, sl__gpu_kernels *k);

/* Load CUDA C++ program src into the current context as *mod, as the
 * resize kernels are loaded (sl__gpu_kernels_load: the kernel cache, else
 * NVRTC, buffers counted in host). tag names it ("resize": its cache file,
 * sluice_TAG.cu, messages); where as there. 0, or SL_EUNSUPPORTED /
 * SL_EBUDGET with err. */
int sl__gpu_module_load(const sl__cuda_api *cu, sl_CUdevice dev, sl__budget *host, const char *src, const char *tag,
                        sl_CUmodule *mod, char *where, size_t wlen, char *err, size_t errlen);

/* Enqueue the kernels for the n descriptors at descs (device memory) on
 * stream; host holds the same n descriptors, from which the grids are
 * sized (only the passes some sample needs are launched). 0 or SL_EIO
 * with the driver's reason. */
int sl__gpu_kernels_run(const sl__cuda_api *cu, const sl__gpu_kernels *k, sl_CUstream stream, sl_CUdeviceptr descs,
                        const sl__gpu_desc *host, uint32_t n, char *err, size_t errlen);

#endif
