/* The host side of tests/gpu/resize_emu.cpp, in C: a sample planned as the
 * loader plans it (train or val preset), its descriptor as the engine lays
 * it out (sl__gpu_window, sl__gpu_layout: the pass order, the tiled flag),
 * and the CPU resampler's bytes for it. */
#include <stdint.h>
#include <string.h>

#include "gpu/engine_impl.h"
#include "gpu/kernels.h"
#include "ops/resize.h"
#include "resample.h"

int emu_sample(const uint8_t *rgb, uint32_t w, uint32_t h, int val, uint64_t index, uint32_t out, void *desc,
               uint32_t *tile_bytes, uint8_t *cpu);

/* 0 with *desc (208 bytes, sl__gpu_desc; addresses left 0), the shared
 * bytes the engine sizes a tile of it by (sl__gpu_tile_bytes) and cpu
 * (3 x out x out, CHW); or -1: no such sample (too thin for val). */
int emu_sample(const uint8_t *rgb, uint32_t w, uint32_t h, int val, uint64_t index, uint32_t out, void *desc,
               uint32_t *tile_bytes, uint8_t *cpu) {
    sl_image_info info = {w, h, 3, SL_FORMAT_JPEG, 0, 1, 8};
    sl__recipe rcp;
    sl__plan p;
    sl__gpu_item it;
    sl__plan_params pp = {&rcp, 7, 3, index, NULL};
    if (sl__recipe_make(val ? SL_PRESET_VAL : SL_PRESET_TRAIN, out, NULL, 0, 0, &rcp, NULL, 0) ||
        sl__plan_sample(&info, &pp, &p, NULL, 0) || sl__gpu_item_from_plan(&p, &info, 0, &it, NULL, 0))
        return -1;
    sl__gpu_work wk;
    memset(&wk, 0, sizeof wk);
    uint64_t size;
    if (sl__gpu_window(&it, &wk.desc)) return -1;
    wk.desc.flip = it.flip != 0;
    wk.dx = wk.desc.reg_x, wk.dy = wk.desc.reg_y, wk.dw = wk.desc.reg_w, wk.dh = wk.desc.reg_h;
    if (sl__gpu_layout(&wk, &it, &size)) return -1;
    memcpy(desc, &wk.desc, sizeof wk.desc);
    *tile_bytes = sl__gpu_tile_bytes(&wk.desc);
    return fx_resample(rgb, w, h, &p.ax, &p.ay, p.flip, 1ull << 30, cpu) ? -1 : 0;
}
