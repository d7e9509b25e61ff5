/*
 * The growth protocol of the public header (docs/abi.md), in two copies.
 * A public struct crosses the API with the size its caller was built
 * with; fields are only appended, so the caller's struct and ours share
 * every field the smaller one has, at the same place. Private.
 */
#ifndef SL_ABI_H
#define SL_ABI_H

#include <stddef.h>

#include "sluice.h"

/*
 * A caller's input struct (src, size bytes) over dst (our_size bytes,
 * holding our defaults): the first min(size, our_size) bytes are copied,
 * the rest keep the defaults. 0; SL_EINVAL when size < min (the smallest
 * size a header ever gave it: the struct was not set up by its sized
 * _init); SL_EUNSUPPORTED when size > our_size and a byte past our_size is
 * not zero: the caller set a field this library does not know (built
 * against a newer header). Both with a sentence naming `what` and the
 * sizes in err (and `fix`, the call that sets the struct up, for the
 * first).
 */
int sl__abi_in(void *dst, size_t our_size, const void *src, size_t size, size_t min, const char *what,
               const char *fix, char *err, size_t errlen);

/* Our output struct (src, our_size bytes) into the caller's (dst, size
 * bytes): the first min(size, our_size) bytes, and zeros past our_size, so
 * a field this library does not know reads 0. */
void sl__abi_out(void *dst, size_t size, const void *src, size_t our_size);

/* End of field f of struct type T: where the struct of a header that
 * ended with f stopped (its size, less any padding after f). */
#define SL__ABI_END(T, f) (offsetof(T, f) + sizeof(((T *)0)->f))

/* The smallest sizes callers pass: sl_config and sl_decode_opts as the
 * first headers that carried struct_size, sl_image_recipe as 0.2 (the
 * first that reached it through a pointer), the others as 0.1, the first
 * whose calls took the size. Every 0.1 call kept for callers built against
 * 0.1 (pipeline/abi_0_1.c) passes its struct's 0.1 size. */
#define SL__SIZE_CONFIG_MIN SL__ABI_END(sl_config, fields)
#define SL__SIZE_DECODE_OPTS_MIN SL__ABI_END(sl_decode_opts, flags)
#define SL__SIZE_RECIPE_MIN SL__ABI_END(sl_image_recipe, resize)
#define SL__SIZE_0_1_CONFIG SL__ABI_END(sl_config, worker_nice)
#define SL__SIZE_0_1_DECODE_OPTS SL__ABI_END(sl_decode_opts, max_scans)
#define SL__SIZE_0_1_STATS SL__ABI_END(sl_stats, gpu_device_name)
#define SL__SIZE_0_1_ERROR_RECORD SL__ABI_END(sl_error_record, reason)
#define SL__SIZE_0_1_STATE SL__ABI_END(sl_state, flags)
#define SL__SIZE_0_1_IMAGE_INFO SL__ABI_END(sl_image_info, bit_depth)
#define SL__SIZE_0_1_VIDEO_OPTS SL__ABI_END(sl_video_opts, codecs)
#define SL__SIZE_0_1_VIDEO_INFO SL__ABI_END(sl_video_info, codec)
#define SL__SIZE_0_1_VIDEO_CLIP SL__ABI_END(sl_video_clip, frame_index)
#define SL__SIZE_0_1_BUDGET_INFO SL__ABI_END(sl_budget_info, psi_some_avg10)
#define SL__SIZE_0_1_GOVERNOR_OPTS SL__ABI_END(sl_governor_opts, cgroup_dir)
#define SL__SIZE_0_1_BUDGET_EVENT SL__ABI_END(sl_budget_event, reason)
#define SL__SIZE_0_1_VALUE SL__ABI_END(sl_value, ival)

/* 0.1's header embedded an sl_image_recipe in sl_config and sl_decode_opts
 * where reserved_0_1_recipe now lies; this is its layout. */
typedef struct sl__recipe_0_1 {
    uint32_t height, width;
    int interpolation;
    double scale_min, scale_max, ratio_min, ratio_max, hflip, crop_pct;
    uint32_t resize;
} sl__recipe_0_1;
_Static_assert(sizeof(sl__recipe_0_1) == sizeof(((sl_config *)0)->reserved_0_1_recipe), "0.1's recipe");

#endif
