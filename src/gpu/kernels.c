/* The resize kernels, compiled at run time with NVRTC. See kernels.h. */
#include "gpu/kernels.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"

/* CUDA C++ source. Mirrors axis_build / hpass / the vertical pass and the
 * vertical-first order (vfirst_*) of src/ops/resize.c line for line; keep
 * them together. Each pass kernel runs over every descriptor and returns
 * at once for the samples of the other order. */
static const char kernel_src[] =
    "#define PRECISION_BITS 22\n"
    "struct sl_axis { double in0, in1, lo, hi; unsigned total, first, n, ksize; };\n"
    "struct sl_desc {\n"
    "  unsigned long long src, pitch, tmp, dst, kx, minx, cntx, ky, miny, cnty;\n"
    "  sl_axis ax, ay;\n"
    "  unsigned reg_x, reg_y, reg_w, reg_h, full_w, full_h;\n"
    "  int flip; unsigned vfirst;\n"
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
    /* horizontal: region row r, output column i -> tmp planes (flip here) */
    "extern \"C\" __global__ void sl_hpass(const sl_desc *descs) {\n"
    "  const sl_desc &d = descs[blockIdx.z];\n"
    "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "  unsigned W = d.ax.n;\n"
    "  if (d.vfirst || i >= W || r >= d.reg_h) return;\n"
    "  const int *k = (const int *)d.kx + (unsigned long long)i * d.ax.ksize;\n"
    "  const unsigned char *p = (const unsigned char *)d.src + r * d.pitch + 3ull * ((const unsigned *)d.minx)[i];\n"
    "  unsigned cnt = ((const unsigned *)d.cntx)[i];\n"
    "  int half = 1 << (PRECISION_BITS - 1), s0 = half, s1 = half, s2 = half;\n"
    "  for (unsigned t = 0; t < cnt; t++, p += 3) { int kt = k[t]; s0 += p[0] * kt; s1 += p[1] * kt; s2 += p[2] * kt; }\n"
    "  unsigned xo = d.flip ? W - 1 - i : i;\n"
    "  unsigned long long plane = (unsigned long long)W * d.reg_h;\n"
    "  unsigned char *o = (unsigned char *)d.tmp + (unsigned long long)r * W + xo;\n"
    "  o[0] = clip8(s0); o[plane] = clip8(s1); o[2 * plane] = clip8(s2);\n"
    "}\n"
    /* vertical: output row j, column x, every channel -> dst (CHW) */
    "extern \"C\" __global__ void sl_vpass(const sl_desc *descs) {\n"
    "  const sl_desc &d = descs[blockIdx.z];\n"
    "  unsigned x = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "  unsigned W = d.ax.n, H = d.ay.n;\n"
    "  if (d.vfirst || x >= W || j >= H) return;\n"
    "  const int *k = (const int *)d.ky + (unsigned long long)j * d.ay.ksize;\n"
    "  unsigned m = ((const unsigned *)d.miny)[j], cnt = ((const unsigned *)d.cnty)[j];\n"
    "  unsigned long long tplane = (unsigned long long)W * d.reg_h, oplane = (unsigned long long)W * H;\n"
    "  const unsigned char *t0 = (const unsigned char *)d.tmp + (unsigned long long)m * W + x;\n"
    "  int half = 1 << (PRECISION_BITS - 1), s0 = half, s1 = half, s2 = half;\n"
    "  for (unsigned t = 0; t < cnt; t++, t0 += W) {\n"
    "    int kt = k[t]; s0 += t0[0] * kt; s1 += t0[tplane] * kt; s2 += t0[2 * tplane] * kt;\n"
    "  }\n"
    "  unsigned char *o = (unsigned char *)d.dst + (unsigned long long)j * W + x;\n"
    "  o[0] = clip8(s0); o[oplane] = clip8(s1); o[2 * oplane] = clip8(s2);\n"
    "}\n"
    /* vertical first (the height shrinks much more than the width, as Pillow
     * orders the passes): region column c, output row j -> tmp planes of
     * ay.n rows x reg_w columns */
    "extern \"C\" __global__ void sl_vfirst_v(const sl_desc *descs) {\n"
    "  const sl_desc &d = descs[blockIdx.z];\n"
    "  unsigned c = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "  unsigned H = d.ay.n, RW = d.reg_w;\n"
    "  if (!d.vfirst || c >= RW || j >= H) return;\n"
    "  const int *k = (const int *)d.ky + (unsigned long long)j * d.ay.ksize;\n"
    "  unsigned m = ((const unsigned *)d.miny)[j], cnt = ((const unsigned *)d.cnty)[j];\n"
    "  const unsigned char *p = (const unsigned char *)d.src + (unsigned long long)m * d.pitch + 3ull * c;\n"
    "  int half = 1 << (PRECISION_BITS - 1), s0 = half, s1 = half, s2 = half;\n"
    "  for (unsigned t = 0; t < cnt; t++, p += d.pitch) { int kt = k[t]; s0 += p[0] * kt; s1 += p[1] * kt; s2 += p[2] * kt; }\n"
    "  unsigned long long plane = (unsigned long long)RW * H;\n"
    "  unsigned char *o = (unsigned char *)d.tmp + (unsigned long long)j * RW + c;\n"
    "  o[0] = clip8(s0); o[plane] = clip8(s1); o[2 * plane] = clip8(s2);\n"
    "}\n"
    /* then horizontal: output column i, row j -> dst (CHW; flip here) */
    "extern \"C\" __global__ void sl_vfirst_h(const sl_desc *descs) {\n"
    "  const sl_desc &d = descs[blockIdx.z];\n"
    "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;\n"
    "  unsigned W = d.ax.n, H = d.ay.n, RW = d.reg_w;\n"
    "  if (!d.vfirst || i >= W || j >= H) return;\n"
    "  const int *k = (const int *)d.kx + (unsigned long long)i * d.ax.ksize;\n"
    "  unsigned long long tplane = (unsigned long long)RW * H, oplane = (unsigned long long)W * H;\n"
    "  const unsigned char *t0 = (const unsigned char *)d.tmp + (unsigned long long)j * RW + ((const unsigned *)d.minx)[i];\n"
    "  unsigned cnt = ((const unsigned *)d.cntx)[i];\n"
    "  int half = 1 << (PRECISION_BITS - 1), s0 = half, s1 = half, s2 = half;\n"
    "  for (unsigned t = 0; t < cnt; t++, t0++) {\n"
    "    int kt = k[t]; s0 += t0[0] * kt; s1 += t0[tplane] * kt; s2 += t0[2 * tplane] * kt;\n"
    "  }\n"
    "  unsigned xo = d.flip ? W - 1 - i : i;\n"
    "  unsigned char *o = (unsigned char *)d.dst + (unsigned long long)j * W + xo;\n"
    "  o[0] = clip8(s0); o[oplane] = clip8(s1); o[2 * oplane] = clip8(s2);\n"
    "}\n";

/* Compiled images, one per compute capability, for the process's life. */
typedef struct compiled {
    int cc;            /* major * 10 + minor */
    int cubin;         /* 1: CUBIN for this exact arch, 0: PTX (driver JIT) */
    char *image;
    size_t size;
} compiled;
static compiled cache[8];
static int ncache;
static pthread_mutex_t cache_mu = PTHREAD_MUTEX_INITIALIZER;

/* Compile for cc (CUBIN where this NVRTC offers it, else PTX). */
static int compile(const sl__cuda_api *cu, int cc, compiled *out, char *err, size_t errlen) {
    sl_nvrtcProgram prog;
    sl_nvrtcResult r = cu->nvrtcCreateProgram(&prog, kernel_src, "sluice_resize.cu", 0, NULL, NULL);
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
        cu->nvrtcCreateProgram(&prog, kernel_src, "sluice_resize.cu", 0, NULL, NULL);
        cubin = 0;
        snprintf(arch, sizeof arch, "--gpu-architecture=compute_%d", cc);
        r = cu->nvrtcCompileProgram(prog, 3, opts);
    }
    if (r) {
        size_t n = 0;
        char log[400] = "";
        if (cu->nvrtcGetProgramLogSize(prog, &n) == 0 && n > 0 && n < 65536) {
            char *full = malloc(n);
            if (full && cu->nvrtcGetProgramLog(prog, full) == 0) snprintf(log, sizeof log, "%s", full);
            free(full);
        }
        sl__msg(err, errlen, "NVRTC could not compile the resize kernels for sm_%d: %s %s", cc,
                cu->nvrtcGetErrorString(r), log);
        cu->nvrtcDestroyProgram(&prog);
        return SL_EUNSUPPORTED;
    }
    size_t n = 0;
    r = cubin ? cu->nvrtcGetCUBINSize(prog, &n) : cu->nvrtcGetPTXSize(prog, &n);
    char *img = r == 0 && n ? malloc(n) : NULL;
    if (img) r = cubin ? cu->nvrtcGetCUBIN(prog, img) : cu->nvrtcGetPTX(prog, img);
    cu->nvrtcDestroyProgram(&prog);
    if (!img || r) {
        free(img);
        sl__msg(err, errlen, "NVRTC: no compiled image (%zu bytes)", n);
        return SL_ENOMEM;
    }
    *out = (compiled){cc, cubin, img, n};
    return 0;
}

/* The cached image for cc, compiling it on first use. */
static int image_for(const sl__cuda_api *cu, int cc, const compiled **out, char *err, size_t errlen) {
    int rc = 0;
    pthread_mutex_lock(&cache_mu);
    int i = 0;
    while (i < ncache && cache[i].cc != cc) i++;
    if (i == ncache) {
        if (ncache == (int)(sizeof cache / sizeof cache[0])) rc = SL_EUNSUPPORTED;
        else if ((rc = compile(cu, cc, &cache[i], err, errlen)) == 0) ncache++;
    }
    if (!rc) *out = &cache[i];
    pthread_mutex_unlock(&cache_mu);
    return rc;
}

int sl__gpu_kernels_load(const sl__cuda_api *cu, sl_CUdevice dev, sl__gpu_kernels *k, char *err, size_t errlen) {
    memset(k, 0, sizeof *k);
    int major = 0, minor = 0;
    cu->cuDeviceGetAttribute(&major, SL_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    cu->cuDeviceGetAttribute(&minor, SL_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    const compiled *img;
    int rc = image_for(cu, major * 10 + minor, &img, err, errlen);
    if (rc) return rc;
    sl_CUresult r = cu->cuModuleLoadData(&k->mod, img->image);
    if (r) {
        sl__msg(err, errlen, "loading the resize kernels (%s, sm_%d%d): %s", img->cubin ? "CUBIN" : "PTX", major,
                minor, sl__cu_errname(cu, r));
        k->mod = NULL;
        return SL_EUNSUPPORTED;
    }
    if ((r = cu->cuModuleGetFunction(&k->coeffs, k->mod, "sl_coeffs")) ||
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

static uint32_t blocks(uint32_t n, uint32_t per) { return n ? (n + per - 1) / per : 1; }

int sl__gpu_kernels_run(const sl__cuda_api *cu, const sl__gpu_kernels *k, sl_CUstream stream, sl_CUdeviceptr descs,
                        const sl__gpu_desc *host, uint32_t n, char *err, size_t errlen) {
    /* grids from the largest sample of each pass order; a pair of pass
     * kernels no sample of the batch needs is not launched */
    uint32_t max_w = 0, max_h = 0, hfirst_reg_h = 0, vfirst_reg_w = 0;
    for (uint32_t i = 0; i < n; i++) {
        max_w = SL_MAX(max_w, host[i].ax.n), max_h = SL_MAX(max_h, host[i].ay.n);
        if (host[i].vfirst) vfirst_reg_w = SL_MAX(vfirst_reg_w, host[i].reg_w);
        else hfirst_reg_h = SL_MAX(hfirst_reg_h, host[i].reg_h);
    }
    void *args[] = {&descs};
    uint32_t axis_n = SL_MAX(max_w, max_h);
    sl_CUresult r = cu->cuLaunchKernel(k->coeffs, blocks(axis_n, 128), 2, n, 128, 1, 1, 0, stream, args, NULL);
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
