/*
 * The calls of 0.1's header whose struct sizes it fixed: a program built
 * against 0.1 binds to these names, and each one passes the size its
 * struct had in 0.1 to the call that took its place (docs/abi.md). The
 * header turns these names into macros over the sized calls for programs
 * built against it now, so they are defined here with the macros undone.
 * (sl_batch_field and sl_batch_find, from before 0.1, are in loader.c.)
 */
#include "base/abi.h"
#include "sluice.h"

#undef sl_loader_errors
#undef sl_loader_last_error
#undef sl_loader_get_state
#undef sl_loader_set_state
#undef sl_image_probe
#undef sl_video_opts_init
#undef sl_video_probe
#undef sl_video_decode
#undef sl_budget_stats
#undef sl_governor_opts_init
#undef sl_budget_govern
#undef sl_budget_create_auto
#undef sl_budget_events
#undef sl_source_value

size_t sl_loader_errors(const sl_loader *ld, size_t first, sl_error_record *out, size_t max) {
    return sl_loader_errors_sized(ld, first, out, max, SL__SIZE_0_1_ERROR_RECORD);
}

int sl_loader_last_error(const sl_loader *ld, sl_error_record *out) {
    return sl_loader_last_error_sized(ld, out, SL__SIZE_0_1_ERROR_RECORD);
}

int sl_loader_get_state(const sl_loader *ld, sl_state *out) {
    return sl_loader_get_state_sized(ld, out, SL__SIZE_0_1_STATE);
}

int sl_loader_set_state(sl_loader *ld, const sl_state *st) {
    return sl_loader_set_state_sized(ld, st, SL__SIZE_0_1_STATE);
}

int sl_image_probe(const void *data, size_t len, sl_image_info *info) {
    return sl_image_probe_sized(data, len, info, SL__SIZE_0_1_IMAGE_INFO);
}

void sl_video_opts_init(sl_video_opts *o) { sl_video_opts_init_sized(o, SL__SIZE_0_1_VIDEO_OPTS); }

int sl_video_probe(const char *path, const sl_video_opts *o, sl_video_info *info, char *errbuf, size_t errlen) {
    return sl_video_probe_sized(path, o, SL__SIZE_0_1_VIDEO_OPTS, info, SL__SIZE_0_1_VIDEO_INFO, errbuf, errlen);
}

int sl_video_decode(const char *path, const sl_video_opts *o, void *out, size_t out_len, sl_video_clip *clip,
                    char *errbuf, size_t errlen) {
    return sl_video_decode_sized(path, o, SL__SIZE_0_1_VIDEO_OPTS, out, out_len, clip, SL__SIZE_0_1_VIDEO_CLIP,
                                 errbuf, errlen);
}

int sl_budget_stats(const sl_budget *b, sl_budget_info *out) {
    return sl_budget_stats_sized(b, out, SL__SIZE_0_1_BUDGET_INFO);
}

void sl_governor_opts_init(sl_governor_opts *o) { sl_governor_opts_init_sized(o, SL__SIZE_0_1_GOVERNOR_OPTS); }

int sl_budget_govern(sl_budget *b, const sl_governor_opts *o, char *errbuf, size_t errlen) {
    return sl_budget_govern_sized(b, o, SL__SIZE_0_1_GOVERNOR_OPTS, errbuf, errlen);
}

int sl_budget_create_auto(const sl_governor_opts *o, sl_budget **out, char *errbuf, size_t errlen) {
    return sl_budget_create_auto_sized(o, SL__SIZE_0_1_GOVERNOR_OPTS, out, errbuf, errlen);
}

size_t sl_budget_events(const sl_budget *b, uint64_t first, sl_budget_event *out, size_t max) {
    return sl_budget_events_sized(b, first, out, max, SL__SIZE_0_1_BUDGET_EVENT);
}

int sl_source_value(const sl_source *s, uint64_t i, int k, sl_value *out) {
    return sl_source_value_sized(s, i, k, out, SL__SIZE_0_1_VALUE);
}
