// The GPU resize kernels (src/gpu/kernels.c) run on the host: their CUDA C++,
// extracted by resize_extract.py, built as C++ with stand-ins for the few device-only
// names, each block's threads in turn. Every sample is planned as the loader
// plans it and laid out as the engine lays it out (resize_ref.c); its bytes must equal
// the CPU resampler's through the path the engine picks, through the two-pass
// kernels, and through the tiled kernel's direct path. What a GPU adds (the
// threads at once, the launch sizes of kernels_run) is test_gpu's, on a GPU.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

using std::max;
using std::min;

struct dim3 {
    unsigned x, y, z;
};
static dim3 blockIdx, threadIdx, blockDim;
static unsigned char *emu_shared;
#define __device__
#define __global__
#define __syncthreads()
#include "kernels_emu.inc"

extern "C" int emu_sample(const uint8_t *rgb, uint32_t w, uint32_t h, int val, uint64_t index, uint32_t out,
                          void *desc, uint32_t *tile_bytes, uint8_t *cpu);

static unsigned blocks(unsigned n, unsigned per) { return n ? (n + per - 1) / per : 1; }

// kernel k over grid g of blocks b, one thread after another
static void launch(void (*k)(const sl_desc *), const sl_desc *d, dim3 g, dim3 b) {
    blockDim = b;
    for (blockIdx.z = 0; blockIdx.z < g.z; blockIdx.z++)
        for (blockIdx.y = 0; blockIdx.y < g.y; blockIdx.y++)
            for (blockIdx.x = 0; blockIdx.x < g.x; blockIdx.x++)
                for (threadIdx.y = 0; threadIdx.y < b.y; threadIdx.y++)
                    for (threadIdx.x = 0; threadIdx.x < b.x; threadIdx.x++) k(d);
}

// sl_tiled with cap bytes of shared memory; one thread a block, so each
// __syncthreads() is the block's order already
static void launch_tiled(const sl_desc *d, unsigned cap) {
    std::vector<unsigned char> shared(cap ? cap : 1);
    emu_shared = shared.data();
    blockDim = {1, 1, 1};
    threadIdx = {0, 0, 0};
    blockIdx.z = 0;
    for (blockIdx.y = 0; blockIdx.y < blocks(d->ay.n, TH); blockIdx.y++)
        for (blockIdx.x = 0; blockIdx.x < blocks(d->ax.n, TW); blockIdx.x++) sl_tiled(d, cap);
}

// largest first-pass span of a tile, C planes: what the tile stages
static unsigned tile_need(const sl_desc &d) {
    int vf = (d.how & VFIRST) != 0;
    const unsigned *mins = (const unsigned *)(vf ? d.minx : d.miny), *cnts = (const unsigned *)(vf ? d.cntx : d.cnty);
    unsigned n = vf ? d.ax.n : d.ay.n, tile = vf ? TW : TH, other = vf ? TH : TW, worst = 0;
    for (unsigned q0 = 0; q0 < n; q0 += tile) {
        unsigned a = mins[q0], b = mins[q0] + cnts[q0];
        for (unsigned q = q0; q < min(n, q0 + tile); q++) a = min(a, mins[q]), b = max(b, mins[q] + cnts[q]);
        worst = max(worst, b - a);
    }
    return 3 * worst * other;
}

struct tally {
    long samples = 0, tiled = 0, vfirst_tiled = 0, passes = 0, direct = 0, failed = 0;
};

// one planned sample through each path; a difference is said and counted
static void check(const std::vector<uint8_t> &img, unsigned W, unsigned H, int val, uint64_t index, unsigned out,
                  tally &t) {
    sl_desc d;
    std::vector<uint8_t> cpu(3ull * out * out);
    uint32_t bound;
    if (emu_sample(img.data(), W, H, val, index, out, &d, &bound, cpu.data())) return; // no such sample
    unsigned n = d.ax.n, m = d.ay.n;
    int vf = (d.how & VFIRST) != 0;
    std::vector<int> kx((size_t)n * d.ax.ksize), ky((size_t)m * d.ay.ksize);
    std::vector<unsigned> minx(n), cntx(n), miny(m), cnty(m);
    std::vector<uint8_t> tmp(vf ? 3ull * d.reg_w * m : 3ull * n * d.reg_h), dst(3ull * n * m);
    d.src = (unsigned long long)(img.data() + ((size_t)d.reg_y * W + d.reg_x) * 3);
    d.pitch = 3ull * W;
    d.tmp = (unsigned long long)tmp.data();
    d.kx = (unsigned long long)kx.data(), d.minx = (unsigned long long)minx.data();
    d.cntx = (unsigned long long)cntx.data();
    d.ky = (unsigned long long)ky.data(), d.miny = (unsigned long long)miny.data();
    d.cnty = (unsigned long long)cnty.data();
    d.dst = (unsigned long long)dst.data();
    launch(sl_coeffs, &d, {blocks(max(n, m), 128), 2, 1}, {128, 1, 1});
    unsigned laid = d.how, need = tile_need(d);
    auto same = [&](const char *path) {
        if (dst == cpu) return;
        size_t b = 0;
        while (dst[b] == cpu[b]) b++;
        printf("%ux%u %s index %llu out %u (%s first): %s differs from the CPU at byte %zu: %u against %u\n", W, H,
               val ? "val" : "train", (unsigned long long)index, out, vf ? "vertical" : "horizontal", path, b, dst[b],
               cpu[b]);
        t.failed++;
    };
    t.samples++;
    if (laid & TILED) {
        // the engine's bound (sl__gpu_tile_bytes), which sizes the launch's
        // shared memory, must hold what each tile stages
        if (need > bound) {
            printf("%ux%u index %llu: a tile stages %u bytes, over the engine's bound %u\n", W, H,
                   (unsigned long long)index, need, bound);
            t.failed++;
        }
        t.tiled++, t.vfirst_tiled += vf;
        launch_tiled(&d, bound);
        same("the tiled kernel");
    } else {
        t.passes++;
    }
    std::fill(dst.begin(), dst.end(), 0x5a);
    d.how = laid & ~TILED;
    launch(vf ? sl_vfirst_v : sl_hpass, &d, {blocks(vf ? d.reg_w : n, 32), blocks(vf ? m : d.reg_h, 8), 1}, {32, 8, 1});
    launch(vf ? sl_vfirst_h : sl_vpass, &d, {blocks(n, 32), blocks(m, 8), 1}, {32, 8, 1});
    same("the two-pass kernels");
    // the tiled kernel without room to stage: each first-pass value computed where used
    std::fill(dst.begin(), dst.end(), 0xa5);
    d.how = laid | TILED;
    launch_tiled(&d, 0);
    t.direct++;
    same("the tiled kernel's direct path");
}

int main() {
    // shapes: ImageNet's, square, wide, tall, smaller than a tile, large; the
    // 17-pixel outputs of the larger ones shrink them 30-90 times, past what a
    // tile's shared memory holds, so the engine lays those out for two passes
    const unsigned sizes[][2] = {{500, 375}, {224, 224}, {1200, 90}, {97, 613}, {40, 40}, {1600, 1200}};
    const unsigned outs[] = {224, 100, 17};
    tally t;
    for (auto &sz : sizes) {
        unsigned W = sz[0], H = sz[1];
        std::vector<uint8_t> img((size_t)W * H * 3);
        uint32_t x = 2463534242u ^ (W * 31 + H);
        for (size_t i = 0; i < img.size(); i++) { // texture: gradients, edges and noise
            x ^= x << 13, x ^= x >> 17, x ^= x << 5;
            size_t px = i / 3 % W, py = i / 3 / W;
            img[i] = (uint8_t)((px * 3 + py * 5 + (i % 3) * 70 + ((px / 9 + py / 7) % 2) * 90 + (x & 31)) & 255);
        }
        for (unsigned out : outs)
            for (uint64_t index = 0; index < 24; index++) check(img, W, H, index % 4 == 3, index, out, t);
    }
    printf("%ld samples: %ld tiled (%ld of them vertical first), %ld through the two-pass kernels as laid out, "
           "%ld through the direct path; %ld differences\n",
           t.samples, t.tiled, t.vfirst_tiled, t.passes, t.direct, t.failed);
    // each path must have been taken, or this test checks less than it says
    if (!t.tiled || !t.vfirst_tiled || t.vfirst_tiled == t.tiled || !t.passes || !t.direct) {
        printf("a path went untested\n");
        return 1;
    }
    return t.failed ? 1 : 0;
}
