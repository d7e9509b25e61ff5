/* The resize kernels, compiled at run time with NVRTC. See kernels.h. */
#include "gpu/kernels.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "base/hash.h"
#include "base/util.h"

#define SL_STR_(x) #x
#define SL_STR(x) SL_STR_(x)

/* CUDA C++ source. Mirrors axis_build / hpass / the vertical pass and the
 * vertical-first order (vfirst_*) of src/ops/resize.c line for line; keep
 * them together. Each pass kernel runs over every descriptor and returns
 * at once for the samples it does not resize (the tiled kernel's, the
 * other order's). */
static const char kernel_src[] =
    "#define PRECISION_BITS 22\n"
    "#define VFIRST 1u\n"
    "#define TILED 2u\n"
    "#define TW " SL_STR(SL_GPU_TILE_W) "u\n"
    "#define TH " SL_STR(SL_GPU_TILE_H) "u\n"
    "struct sl_axis { double in0, in1, lo, hi; unsigned total, first, n, ksize; };\n"
    "struct sl_desc {\n"
    "  unsigned long long src, pitch, tmp, dst, kx, minx, cntx, ky, miny, cnty;\n"
    "  sl_axis ax, ay;\n"
    "  unsigned reg_x, reg_y, reg_w, reg_h, full_w, full_h;\n"
    "  int flip; unsigned how;\n"
    "};\n"
    "static_assert(sizeof(sl_desc) == 208, \"descriptor layout\");\n"
    "__device__ double tri(double x) { if (x < 0.0) x = -x; return x < 1.0 ? 1.0 - x : 0.0; }\n"
    "__device__ unsigned char clip8(int v) { v >>= PRECISION_BITS; return (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v); }\n"
    "__device__ int fixed(double v) {\n"
    "  return v < 0 ? (int)(-0.5 + v * (1 << PRECISION_BITS)) : (int)(0.5 + v * (1 << PRECISION_BITS));\n"
    "}\n"
    /* one axis: taps and weights of output i (resize.c axis_build, decode scale 1) */
    "__device__ void axis_one(const sl_axis &s, unsigned full, unsigned reg0, unsigned regn, unsigned i,\n"
    "                         int *k, unsigned *mins, unsigned *cnts) {\n"
    "  double lo = floor(s.lo), hi = ceil(s.hi - 1e-9);\n"
    "  if (hi > full) hi = full;\n"
    "  if (lo < reg0) lo = reg0;\n"
    "  if (hi > (double)reg0 + regn) hi = (double)reg0 + regn;\n"
    "  long long in_size = (long long)(hi - lo);\n"
    "  double c0 = s.in0 - lo, scale = (s.in1 - s.in0) / s.total;\n"
    "  double fs = scale < 1.0 ? 1.0 : scale, support = fs, ss = 1.0 / fs;\n"
    "  double center = c0 + (s.first + i + 0.5) * scale;\n"
    "  long long xmin = (long long)(center - support + 0.5);\n"
    "  if (xmin < 0) xmin = 0;\n"
    "  long long xmax = (long long)(center + support + 0.5);\n"
    "  if (xmax > in_size) xmax = in_size;\n"
    "  xmax -= xmin;\n"
    "  int *kk = k + (unsigned long long)i * s.ksize;\n"
    "  if (xmax <= 0) {\n"
    "    xmin = (long long)center;\n"
    "    if (xmin >= in_size) xmin = in_size - 1;\n"
    "    if (xmin < 0) xmin = 0;\n"
    "    xmax = 1;\n"
    "    for (unsigned x = 0; x < s.ksize; x++) kk[x] = x == 0 ? fixed(1.0) : 0;\n"
    "  } else {\n"
    "    if (xmax > s.ksize) xmax = s.ksize;\n"
    "    double ww = 0.0;\n"
    "    for (long long x = 0; x < xmax; x++) ww += tri((x + xmin - center + 0.5) * ss);\n"
    "    for (unsigned x = 0; x < s.ksize; x++) {\n"
    "      double v = 0.0;\n"
    "      if (x < xmax) { v = tri((x + xmin - center + 0.5) * ss); if (ww != 0.0) v /= ww; }\n"
    "      kk[x] = fixed(v);\n"
    "    }\n"
    "  }\n"
    "  mins[i] = (unsigned)(lo - reg0 + xmin);\n"
    "  cnts[i] = (unsigned)xmax;\n"
    "}\n"
    "extern \"C\" __global__ void sl_coeffs(const sl_desc *descs) {\n"
    "  const sl_desc &d = descs[blockIdx.z];\n"
    "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (blockIdx.y == 0) {\n"
    "    if (i < d.ax.n) axis_one(d.ax, d.full_w, d.reg_x, d.reg_w, i, (int *)d.kx, (unsigned *)d.minx, (unsigned *)d.cntx);\n"
    "  } else {\n"
    "    if (i < d.ay.n) axis_one(d.ay, d.full_h, d.reg_y, d.reg_h, i, (int *)d.ky, (unsigned *)d.miny, (unsigned *)d.cnty);\n"
    "  }\n"
    "}\n"
    /* a first-pass value before clipping, its three channels in s: hsum the
     * horizontal taps of region row r for output column i, vsum the vertical
     * taps of region column c for output row j (sl_tiled and the two-pass
     * kernels both sum through these) */
    "__device__ void hsum(const sl_desc &d, unsigned r, unsigned i, int *s) {\n"
    "  const int *k = (const int *)d.kx + (unsigned long long)i * d.ax.ksize;\n"
    "  const unsigned char *p = (const unsigned char *)d.src + r * d.pitch + 3ull * ((const unsigned *)d.minx)[i];\n"
    "  unsigned cnt = ((const unsigned *)d.cntx)[i];\n"
    "  s[0] = s[1] = s[2] = 1 << (PRECISION_BITS - 1);\n"
    "  for (unsigned t = 0; t < cnt; t++, p += 3) { int kt = k[t]; s[0] += p[0] * kt; s[1] += p[1] * kt; s[2] += p[2] * kt; }\n"
    "}\n"
    "__device__ void vsum(const sl_desc &d, unsigned c, unsigned j, int *s) {\n"
    "  const int *k = (const int *)d.ky + (unsigned long long)j * d.ay.ksize;\n"
    "  const unsigned char *p = (const unsigned char *)d.src + ((const unsigned *)d.miny)[j] * d.pitch + 3ull * c;\n"
    "  unsigned cnt = ((const unsigned *)d.cnty)[j];\n"
    "  s[0] = s[1] = s[2] = 1 << (PRECISION_BITS - 1);\n"
    "  for (unsigned t = 0; t < cnt; t++, p += d.pitch) { int kt = k[t]; s[0] += p[0] * kt; s[1] += p[1] * kt; s[2] += p[2] * kt; }\n"
    "}\n"
    /* a second-pass value before clipping, from first-pass values kept in
     * three planes plane bytes apart (tmp, or sl_tiled's shared memory):
     * cnt taps of k from t0, step bytes apart */
    "__device__ void psum(const unsigned char *t0, unsigned step, unsigned long long plane, const int *k, unsigned cnt,\n"
    "                     int *s) {\n"
    "  s[0] = s[1] = s[2] = 1 << (PRECISION_BITS - 1);\n"
    "  for (unsigned t = 0; t < cnt; t++, t0 += step) {\n"
    "    int kt = k[t]; s[0] += t0[0] * kt; s[1] += t0[plane] * kt; s[2] += t0[2 * plane] * kt;\n"
    "  }\n"
    "}\n"
    /* one output tile of sample blockIdx.z, both passes in one block: the
     * first pass's values the tile reads (uint8, as the two-pass kernels
     * keep them in tmp) go to shared memory, C planes; then the second
     * pass from there to dst. cap: the shared bytes of this launch. A
     * span over cap (the host's bound is an upper one: not expected)
     * takes the direct path, which recomputes each first-pass value. */
    "extern \"C\" __global__ void sl_tiled(const sl_desc *descs, unsigned cap) {\n"
    "  extern __shared__ unsigned char sh[];\n"
    "  __shared__ unsigned lo, hi;\n"
    "  const sl_desc &d = descs[blockIdx.z];\n"
    "  unsigned W = d.ax.n, H = d.ay.n, i0 = blockIdx.x * TW, j0 = blockIdx.y * TH;\n"
    "  if (!(d.how & TILED) || i0 >= W || j0 >= H) return;\n"
    "  unsigned tw = min(TW, W - i0), th = min(TH, H - j0), tid = threadIdx.x, nt = blockDim.x;\n"
    "  int vfirst = (d.how & VFIRST) != 0;\n"
    "  const unsigned *mins = (const unsigned *)(vfirst ? d.minx : d.miny);\n"
    "  const unsigned *cnts = (const unsigned *)(vfirst ? d.cntx : d.cnty);\n"
    "  unsigned q0 = vfirst ? i0 : j0, qn = vfirst ? tw : th;\n"
    "  if (tid == 0) {\n"
    "    unsigned a = mins[q0], b = mins[q0] + cnts[q0];\n"
    "    for (unsigned q = q0 + 1; q < q0 + qn; q++) { a = min(a, mins[q]); b = max(b, mins[q] + cnts[q]); }\n"
    "    lo = a; hi = b;\n"
    "  }\n"
    "  __syncthreads();\n"
    "  unsigned L = lo, S = hi - lo, other = vfirst ? th : tw;\n"
    "  unsigned long long plane = (unsigned long long)S * other;\n"
    "  int staged = 3 * plane <= cap, s[3], f[3];\n"
    /* first pass: horizontal first, region rows L.. x tile columns; vertical
     * first, tile rows x region columns L.. */
    "  for (unsigned e = tid; staged && e < S * other; e += nt) {\n"
    "    unsigned a = e / other, b = e % other;\n"
    "    if (vfirst) vsum(d, L + a, j0 + b, f); else hsum(d, L + a, i0 + b, f);\n"
    "    unsigned long long at = vfirst ? (unsigned long long)b * S + a : (unsigned long long)a * tw + b;\n"
    "    sh[at] = clip8(f[0]); sh[plane + at] = clip8(f[1]); sh[2 * plane + at] = clip8(f[2]);\n"
    "  }\n"
    "  __syncthreads();\n"
    /* second pass: output (j, i) of the tile -> dst (CHW; flip here) */
    "  unsigned long long oplane = (unsigned long long)W * H;\n"
    "  for (unsigned e = tid; e < th * tw; e += nt) {\n"
    "    unsigned jj = e / tw, ii = e % tw, j = j0 + jj, i = i0 + ii;\n"
    "    const int *k = vfirst ? (const int *)d.kx + (unsigned long long)i * d.ax.ksize\n"
    "                          : (const int *)d.ky + (unsigned long long)j * d.ay.ksize;\n"
    "    unsigned m = vfirst ? ((const unsigned *)d.minx)[i] : ((const unsigned *)d.miny)[j];\n"
    "    unsigned cnt = vfirst ? ((const unsigned *)d.cntx)[i] : ((const unsigned *)d.cnty)[j];\n"
    "    if (staged) {\n"
    "      psum(sh + (vfirst ? (unsigned long long)jj * S + (m - L) : (unsigned long long)(m - L) * tw + ii),\n"
    "           vfirst ? 1 : tw, plane, k, cnt, s);\n"
    "    } else {\n"
    "      s[0] = s[1] = s[2] = 1 << (PRECISION_BITS - 1);\n"
    "      for (unsigned t = 0; t < cnt; t++) {\n"
    "        if (vfirst) vsum(d, m + t, j, f); else hsum(d, m + t, i, f);\n"
    "        int kt = k[t]; s[0] += clip8(f[0]) * kt; s[1] += clip8(f[1]) * kt; s[2] += clip8(f[2]) * kt;\n"
    "      }\n"
    "    }\n"
    "    unsigned char *o = (unsigned char *)d.dst + (unsigned long long)j * W + (d.flip ? W - 1 - i : i);\n"
    "    o[0] = clip8(s[0]); o[oplane] = clip8(s[1]); o[2 * oplane] = clip8(s[2]);\n"
    "  }\n"
    "}\n"
    /* horizontal: region row r, output column i -> tmp planes (flip here) */
    "extern \"C\" __global__ void sl_hpass(const sl_desc *descs) {\n"
    "  const sl_desc &d = descs[blockIdx.z];\n"
    "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "  unsigned W = d.ax.n;\n"
    "  if ((d.how & (VFIRST | TILED)) || i >= W || r >= d.reg_h) return;\n"
    "  int s[3];\n"
    "  hsum(d, r, i, s);\n"
    "  unsigned xo = d.flip ? W - 1 - i : i;\n"
    "  unsigned long long plane = (unsigned long long)W * d.reg_h;\n"
    "  unsigned char *o = (unsigned char *)d.tmp + (unsigned long long)r * W + xo;\n"
    "  o[0] = clip8(s[0]); o[plane] = clip8(s[1]); o[2 * plane] = clip8(s[2]);\n"
    "}\n"
    /* vertical: output row j, column x, every channel -> dst (CHW) */
    "extern \"C\" __global__ void sl_vpass(const sl_desc *descs) {\n"
    "  const sl_desc &d = descs[blockIdx.z];\n"
    "  unsigned x = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "  unsigned W = d.ax.n, H = d.ay.n;\n"
    "  if ((d.how & (VFIRST | TILED)) || x >= W || j >= H) return;\n"
    "  const int *k = (const int *)d.ky + (unsigned long long)j * d.ay.ksize;\n"
    "  unsigned m = ((const unsigned *)d.miny)[j], cnt = ((const unsigned *)d.cnty)[j];\n"
    "  unsigned long long tplane = (unsigned long long)W * d.reg_h, oplane = (unsigned long long)W * H;\n"
    "  int s[3];\n"
    "  psum((const unsigned char *)d.tmp + (unsigned long long)m * W + x, W, tplane, k, cnt, s);\n"
    "  unsigned char *o = (unsigned char *)d.dst + (unsigned long long)j * W + x;\n"
    "  o[0] = clip8(s[0]); o[oplane] = clip8(s[1]); o[2 * oplane] = clip8(s[2]);\n"
    "}\n"
    /* vertical first (the height shrinks much more than the width, as Pillow
     * orders the passes): region column c, output row j -> tmp planes of
     * ay.n rows x reg_w columns */
    "extern \"C\" __global__ void sl_vfirst_v(const sl_desc *descs) {\n"
    "  const sl_desc &d = descs[blockIdx.z];\n"
    "  unsigned c = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "  unsigned H = d.ay.n, RW = d.reg_w;\n"
    "  if ((d.how & (VFIRST | TILED)) != VFIRST || c >= RW || j >= H) return;\n"
    "  int s[3];\n"
    "  vsum(d, c, j, s);\n"
    "  unsigned long long plane = (unsigned long long)RW * H;\n"
    "  unsigned char *o = (unsigned char *)d.tmp + (unsigned long long)j * RW + c;\n"
    "  o[0] = clip8(s[0]); o[plane] = clip8(s[1]); o[2 * plane] = clip8(s[2]);\n"
    "}\n"
    /* then horizontal: output column i, row j -> dst (CHW; flip here) */
    "extern \"C\" __global__ void sl_vfirst_h(const sl_desc *descs) {\n"
    "  const sl_desc &d = descs[blockIdx.z];\n"
    "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "  unsigned W = d.ax.n, H = d.ay.n, RW = d.reg_w;\n"
    "  if ((d.how & (VFIRST | TILED)) != VFIRST || i >= W || j >= H) return;\n"
    "  const int *k = (const int *)d.kx + (unsigned long long)i * d.ax.ksize;\n"
    "  unsigned long long tplane = (unsigned long long)RW * H, oplane = (unsigned long long)W * H;\n"
    "  int s[3];\n"
    "  psum((const unsigned char *)d.tmp + (unsigned long long)j * RW + ((const unsigned *)d.minx)[i], 1, tplane, k,\n"
    "       ((const unsigned *)d.cntx)[i], s);\n"
    "  unsigned xo = d.flip ? W - 1 - i : i;\n"
    "  unsigned char *o = (unsigned char *)d.dst + (unsigned long long)j * W + xo;\n"
    "  o[0] = clip8(s[0]); o[oplane] = clip8(s[1]); o[2 * oplane] = clip8(s[2]);\n"
    "}\n";

/* ---- the kernel cache ------------------------------------------------------
 *
 * A compiled image is kept on disk, one file per (kernel source, compute
 * capability, driver version): a process that finds it never loads NVRTC,
 * whose library and compile heap were the largest part of the engine's
 * host memory. The key leaves NVRTC's version out on purpose: asking it
 * means loading NVRTC, which is what the cache saves, and an image any
 * NVRTC made computes the same bytes (the arithmetic is pinned by
 * --fmad=false and checked against the CPU resampler); an image the driver
 * cannot load (made by a newer NVRTC than the driver knows) is removed and
 * compiled again. The file is a header line (magic, key, kind, size, hash
 * of the image) and the image; anything else is not ours and is replaced.
 * Written to a temporary name and renamed, so readers see whole files. */
#define CACHE_MAGIC "sluice-kernels 1"
#define IMAGE_MAX ((size_t)8 << 20) /* a larger file is not one of ours */
#define HEADER_MAX 200

typedef struct image {
    char *buf;    /* counted in the host budget; the image starts at buf + off */
    size_t off, size;
    int cubin;    /* 1: CUBIN for this exact arch, 0: PTX (driver JIT) */
} image;

/* A program: its CUDA C++ source (a static string) and its tag, which
 * names its file in the cache ("resize": TAG-HASH-smCC-cudaDRIVER.img),
 * its NVRTC name (sluice_TAG.cu) and its messages. */
typedef struct program {
    const char *src, *tag;
} program;

static uint64_t source_hash(const program *p) { return sl__hash64(p->src, strlen(p->src), 0x736c756963656b72ull); }

/* The cache's folder: $SLUICE_KERNEL_CACHE (empty: no cache), else
 * $XDG_CACHE_HOME/sluice, else $HOME/.cache/sluice. 0, or -1: none. */
static int cache_dir(char *out, size_t len) {
    const char *env = getenv("SLUICE_KERNEL_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (env) n = snprintf(out, len, "%s", env);
    else if (xdg && *xdg) n = snprintf(out, len, "%s/sluice", xdg);
    else if (home && *home) n = snprintf(out, len, "%s/.cache/sluice", home);
    else return -1;
    return n > 0 && (size_t)n < len ? 0 : -1;
}

static void cache_path(const char *dir, const program *p, int cc, int driver, char *out, size_t len) {
    snprintf(out, len, "%s/%s-%016llx-sm%d-cuda%d.img", dir, p->tag, (unsigned long long)source_hash(p), cc, driver);
}

static void image_free(sl__budget *host, image *im) {
    sl__free(host, im->buf);
    memset(im, 0, sizeof *im);
}

/* Read the image cached for (cc, driver): 0 with *im (counted in host),
 * or -1 (none, not ours, or the budget cannot hold it). */
static int cache_read(const char *path, const program *p, int cc, int driver, sl__budget *host, image *im) {
    memset(im, 0, sizeof *im);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat sb;
    int ok = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == geteuid() && sb.st_size > 0 &&
             (uint64_t)sb.st_size <= IMAGE_MAX + HEADER_MAX;
    size_t n = ok ? (size_t)sb.st_size : 0, got = 0;
    char *buf = ok ? sl__alloc(host, n + 1, SL_MEM_OTHER) : NULL; /* + NUL: PTX is text */
    while (buf && got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (!buf || got != n) {
        sl__free(host, buf);
        return -1;
    }
    buf[n] = 0;
    char *nl = memchr(buf, '\n', n < HEADER_MAX ? n : HEADER_MAX);
    unsigned long long src = 0, sum = 0;
    int hcc = 0, hdrv = 0;
    char kind[8] = "";
    size_t size = 0;
    if (nl) *nl = 0;
    ok = nl && sscanf(buf, CACHE_MAGIC " %llx sm%d cuda%d %7s %zu %llx", &src, &hcc, &hdrv, kind, &size, &sum) == 6 &&
         src == source_hash(p) && hcc == cc && hdrv == driver && (!strcmp(kind, "cubin") || !strcmp(kind, "ptx")) &&
         size == n - (size_t)(nl + 1 - buf) && size > 0 && sl__hash64(nl + 1, size, 0) == sum;
    if (!ok) {
        sl__free(host, buf);
        return -1;
    }
    *im = (image){buf, (size_t)(nl + 1 - buf), size, kind[0] == 'c'};
    return 0;
}

/* Keep im for the next process: 0, or -1 with why (the cache is best effort). */
static int cache_write(const char *dir, const char *path, const program *p, int cc, int driver, const image *im,
                       char *why, size_t wlen) {
    char tmp[600], head[HEADER_MAX];
    if (mkdir(dir, 0700) && errno == ENOENT) { /* $HOME/.cache itself may be missing */
        char parent[520];
        snprintf(parent, sizeof parent, "%s", dir);
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent) *slash = 0, mkdir(parent, 0700);
        mkdir(dir, 0700);
    }
    snprintf(tmp, sizeof tmp, "%s/.%s-XXXXXX", dir, p->tag);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        sl__msg(why, wlen, "cannot write in %s: %s", dir, strerror(errno));
        return -1;
    }
    int hn = snprintf(head, sizeof head, CACHE_MAGIC " %016llx sm%d cuda%d %s %zu %016llx\n",
                      (unsigned long long)source_hash(p), cc, driver, im->cubin ? "cubin" : "ptx", im->size,
                      (unsigned long long)sl__hash64(im->buf + im->off, im->size, 0));
    const char *parts[2] = {head, im->buf + im->off};
    size_t lens[2] = {(size_t)hn, im->size};
    int ok = hn > 0 && (size_t)hn < sizeof head;
    for (int i = 0; i < 2 && ok; i++)
        for (size_t done = 0; ok && done < lens[i];) {
            ssize_t w = write(fd, parts[i] + done, lens[i] - done);
            if (w <= 0) ok = 0;
            else done += (size_t)w;
        }
    ok = close(fd) == 0 && ok && rename(tmp, path) == 0;
    if (!ok) {
        sl__msg(why, wlen, "writing %s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* ---- NVRTC -------------------------------------------------------------------- */

/* Compile for cc with NVRTC (CUBIN where this NVRTC offers it, else PTX)
 * into *im, counted in host; NVRTC's own heap is handed back to the
 * system afterwards (malloc_trim). 0, SL_EUNSUPPORTED (no NVRTC, or it
 * failed: err has its log), SL_EBUDGET (the host budget). */
static int compile(const program *p, int cc, sl__budget *host, image *im, char *err, size_t errlen) {
    const sl__cuda_api *cu = sl__cuda_nvrtc(err, errlen);
    if (!cu) return SL_EUNSUPPORTED;
    char name[48];
    snprintf(name, sizeof name, "sluice_%s.cu", p->tag);
    sl_nvrtcProgram prog;
    sl_nvrtcResult r = cu->nvrtcCreateProgram(&prog, p->src, name, 0, NULL, NULL);
    if (r) {
        sl__msg(err, errlen, "NVRTC: %s", cu->nvrtcGetErrorString(r));
        return SL_EUNSUPPORTED;
    }
    char arch[48];
    int cubin = cu->nvrtcGetCUBIN != NULL;
    snprintf(arch, sizeof arch, "--gpu-architecture=%s_%d", cubin ? "sm" : "compute", cc);
    const char *opts[] = {arch, "--fmad=false", "-default-device"};
    r = cu->nvrtcCompileProgram(prog, 3, opts);
    if (r && cubin) { /* an NVRTC older than the GPU: PTX for the driver to finish */
        cu->nvrtcDestroyProgram(&prog);
        cu->nvrtcCreateProgram(&prog, p->src, name, 0, NULL, NULL);
        cubin = 0;
        snprintf(arch, sizeof arch, "--gpu-architecture=compute_%d", cc);
        r = cu->nvrtcCompileProgram(prog, 3, opts);
    }
    int rc = 0;
    if (r) {
        size_t n = 0;
        char log[400] = "";
        if (cu->nvrtcGetProgramLogSize(prog, &n) == 0 && n > 0 && n < 65536) {
            char *full = sl__alloc(host, n, SL_MEM_OTHER);
            if (full && cu->nvrtcGetProgramLog(prog, full) == 0) snprintf(log, sizeof log, "%s", full);
            sl__free(host, full);
        }
        sl__msg(err, errlen, "NVRTC could not compile the %s kernels for sm_%d: %s %s", p->tag, cc,
                cu->nvrtcGetErrorString(r), log);
        rc = SL_EUNSUPPORTED;
    } else {
        size_t n = 0;
        r = cubin ? cu->nvrtcGetCUBINSize(prog, &n) : cu->nvrtcGetPTXSize(prog, &n);
        char *buf = r == 0 && n && n <= IMAGE_MAX ? sl__alloc(host, n + 1, SL_MEM_OTHER) : NULL;
        if (buf) r = cubin ? cu->nvrtcGetCUBIN(prog, buf) : cu->nvrtcGetPTX(prog, buf);
        if (!buf || r) {
            sl__free(host, buf);
            sl__msg(err, errlen, "NVRTC: no compiled image (%zu bytes)", n);
            rc = buf || r || !n || n > IMAGE_MAX ? SL_EUNSUPPORTED : SL_EBUDGET;
        } else {
            buf[n] = 0;
            *im = (image){buf, 0, n, cubin};
        }
    }
    cu->nvrtcDestroyProgram(&prog);
#ifdef __GLIBC__
    malloc_trim(0); /* NVRTC's compile heap (tens of MB, freed now) back to the system */
#endif
    return rc;
}

/* *mod: p for cc, the cached image, else one compiled now (then cached). */
static int load_module(const sl__cuda_api *cu, const program *p, int cc, sl__budget *host, sl_CUmodule *mod,
                       char *where, size_t wlen, char *err, size_t errlen) {
    char dir[512], path[600] = "", why[200] = "no cache folder ($SLUICE_KERNEL_CACHE, $XDG_CACHE_HOME, $HOME)";
    int have_dir = cache_dir(dir, sizeof dir) == 0 && dir[0];
    if (have_dir) cache_path(dir, p, cc, cu->driver_version, path, sizeof path);
    image im;
    if (have_dir && cache_read(path, p, cc, cu->driver_version, host, &im) == 0) {
        sl_CUresult r = cu->cuModuleLoadData(mod, im.buf + im.off);
        image_free(host, &im);
        if (r == 0) {
            sl__msg(where, wlen, "cached (%s)", path);
            return 0;
        }
        *mod = NULL;
        unlink(path); /* made by an NVRTC newer than this driver: compile again */
    }
    int rc = compile(p, cc, host, &im, err, errlen);
    if (rc) return rc;
    if (have_dir && cache_write(dir, path, p, cc, cu->driver_version, &im, why, sizeof why) == 0)
        sl__msg(where, wlen, "compiled by NVRTC %d.%d, cached (%s)", cu->nvrtc_version[0], cu->nvrtc_version[1], path);
    else
        sl__msg(where, wlen, "compiled by NVRTC %d.%d, not cached (%s)", cu->nvrtc_version[0], cu->nvrtc_version[1],
                why);
    sl_CUresult r = cu->cuModuleLoadData(mod, im.buf + im.off);
    if (r) {
        sl__msg(err, errlen, "loading the %s kernels (%s, sm_%d): %s", p->tag, im.cubin ? "CUBIN" : "PTX", cc,
                sl__cu_errname(cu, r));
        *mod = NULL;
    }
    image_free(host, &im);
    return r ? SL_EUNSUPPORTED : 0;
}

int sl__gpu_module_load(const sl__cuda_api *cu, sl_CUdevice dev, sl__budget *host, const char *src, const char *tag,
                        sl_CUmodule *mod, char *where, size_t wlen, char *err, size_t errlen) {
    *mod = NULL;
    int major = 0, minor = 0;
    cu->cuDeviceGetAttribute(&major, SL_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    cu->cuDeviceGetAttribute(&minor, SL_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    const program p = {src, tag};
    return load_module(cu, &p, major * 10 + minor, host, mod, where, wlen, err, errlen);
}

int sl__gpu_kernels_load(const sl__cuda_api *cu, sl_CUdevice dev, sl__budget *host, sl__gpu_kernels *k,
                         char *where, size_t wlen, char *err, size_t errlen) {
    memset(k, 0, sizeof *k);
    int rc = sl__gpu_module_load(cu, dev, host, kernel_src, "resize", &k->mod, where, wlen, err, errlen);
    if (rc) return rc;
    sl_CUresult r;
    if ((r = cu->cuModuleGetFunction(&k->coeffs, k->mod, "sl_coeffs")) ||
        (r = cu->cuModuleGetFunction(&k->tiled, k->mod, "sl_tiled")) ||
        (r = cu->cuModuleGetFunction(&k->hpass, k->mod, "sl_hpass")) ||
        (r = cu->cuModuleGetFunction(&k->vpass, k->mod, "sl_vpass")) ||
        (r = cu->cuModuleGetFunction(&k->vfirst_v, k->mod, "sl_vfirst_v")) ||
        (r = cu->cuModuleGetFunction(&k->vfirst_h, k->mod, "sl_vfirst_h"))) {
        sl__msg(err, errlen, "resize kernels: %s", sl__cu_errname(cu, r));
        sl__gpu_kernels_unload(cu, k);
        return SL_EUNSUPPORTED;
    }
    return 0;
}

void sl__gpu_kernels_unload(const sl__cuda_api *cu, sl__gpu_kernels *k) {
    if (k->mod) cu->cuModuleUnload(k->mod);
    memset(k, 0, sizeof *k);
}

uint32_t sl__gpu_tile_bytes(const sl__gpu_desc *d) {
    int vfirst = (d->how & SL_GPU_VFIRST) != 0;
    const sl__gpu_axis *a = vfirst ? &d->ax : &d->ay;
    uint32_t tile = vfirst ? SL_GPU_TILE_W : SL_GPU_TILE_H, other = vfirst ? SL_GPU_TILE_H : SL_GPU_TILE_W;
    uint32_t region = vfirst ? d->reg_w : d->reg_h;
    if (!a->total || !(a->in1 >= a->in0)) return UINT32_MAX;
    /* a tap window starts at most scale + 1 further each step and holds at
     * most ksize taps, all inside the region (axis_one) */
    double span = (tile - 1) * ((a->in1 - a->in0) / a->total) + 1.0 + a->ksize + 1.0;
    if (span > region) span = region;
    double bytes = 3.0 * ceil(span) * other;
    return bytes <= SL_GPU_TILE_SHARED_MAX ? (uint32_t)bytes : UINT32_MAX;
}

static uint32_t blocks(uint32_t n, uint32_t per) { return n ? (n + per - 1) / per : 1; }

int sl__gpu_kernels_run(const sl__cuda_api *cu, const sl__gpu_kernels *k, sl_CUstream stream, sl_CUdeviceptr descs,
                        const sl__gpu_desc *host, uint32_t n, char *err, size_t errlen) {
    /* grids from the largest sample each kernel resizes; a kernel no
     * sample of the batch needs is not launched */
    uint32_t max_w = 0, max_h = 0, tiled_w = 0, tiled_h = 0, shared = 0, hfirst_reg_h = 0, vfirst_reg_w = 0;
    for (uint32_t i = 0; i < n; i++) {
        const sl__gpu_desc *d = &host[i];
        max_w = SL_MAX(max_w, d->ax.n), max_h = SL_MAX(max_h, d->ay.n);
        if (d->how & SL_GPU_TILED) {
            tiled_w = SL_MAX(tiled_w, d->ax.n), tiled_h = SL_MAX(tiled_h, d->ay.n);
            uint32_t b = sl__gpu_tile_bytes(d);
            shared = SL_MAX(shared, b == UINT32_MAX ? SL_GPU_TILE_SHARED_MAX : b);
        } else if (d->how & SL_GPU_VFIRST) vfirst_reg_w = SL_MAX(vfirst_reg_w, d->reg_w);
        else hfirst_reg_h = SL_MAX(hfirst_reg_h, d->reg_h);
    }
    void *args[] = {&descs}, *targs[] = {&descs, &shared};
    uint32_t axis_n = SL_MAX(max_w, max_h);
    sl_CUresult r = cu->cuLaunchKernel(k->coeffs, blocks(axis_n, 128), 2, n, 128, 1, 1, 0, stream, args, NULL);
    if (!r && tiled_w)
        r = cu->cuLaunchKernel(k->tiled, blocks(tiled_w, SL_GPU_TILE_W), blocks(tiled_h, SL_GPU_TILE_H), n, 256, 1, 1,
                               shared, stream, targs, NULL);
    if (!r && hfirst_reg_h) {
        r = cu->cuLaunchKernel(k->hpass, blocks(max_w, 32), blocks(hfirst_reg_h, 8), n, 32, 8, 1, 0, stream, args, NULL);
        if (!r) r = cu->cuLaunchKernel(k->vpass, blocks(max_w, 32), blocks(max_h, 8), n, 32, 8, 1, 0, stream, args, NULL);
    }
    if (!r && vfirst_reg_w) {
        r = cu->cuLaunchKernel(k->vfirst_v, blocks(vfirst_reg_w, 32), blocks(max_h, 8), n, 32, 8, 1, 0, stream, args,
                               NULL);
        if (!r) r = cu->cuLaunchKernel(k->vfirst_h, blocks(max_w, 32), blocks(max_h, 8), n, 32, 8, 1, 0, stream, args,
                                       NULL);
    }
    if (r) {
        sl__msg(err, errlen, "launching the resize kernels: %s", sl__cu_errname(cu, r));
        return SL_EIO;
    }
    return 0;
}
