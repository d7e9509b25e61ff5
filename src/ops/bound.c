/*
 * An upper bound of a sample's decode memory over every epoch, from its
 * header: what the loader's admission check at create compares with the
 * per-sample room. The val preset's plan does not depend on the epoch, so
 * its own need is the bound. The train preset's crop does: the bound takes
 * the whole image as the box, decoded at full scale (the most rows and
 * columns any crop can reach, at the largest DCT scale), resized from it.
 */
#include "base/util.h"
#include "ops/ops.h"
#include "ops/resize.h"

uint64_t sl__plan_mem_bound(const sl_image_info *info, const sl__plan_params *pp) {
    sl__plan p;
    if (sl__plan_sample(info, pp, &p, NULL, 0)) return 0;
    const sl__recipe *rc = pp->recipe;
    if (rc->preset != SL_PRESET_TRAIN) return p.mem;
    uint32_t W = p.orient >= 5 ? info->height : info->width, H = p.orient >= 5 ? info->width : info->height;
    uint32_t Sw = rc->out_w, Sh = rc->out_h;
    sl__axis_spec ax = {0, W, 0, W, Sw, 0, Sw, rc->interp}, ay = {0, H, 0, H, Sh, 0, Sh, rc->interp};
    sl__decode_req full = {0, 0, info->width, info->height, 0, 0, p.channels, 0, rc->max_scans, NULL, 0};
    uint64_t img = (uint64_t)W * H * p.channels; /* sl__plan_sample checked it */
    uint64_t m = sl__decode_mem(info, &full) + sl__resampler_mem(&ax, &ay, W + 2, H + 2, p.channels);
    if (p.orient != 1) m += 2 * img;
    return SL_MAX(m, p.mem);
}
