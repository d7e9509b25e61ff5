/*
 * Every field of every struct of 0.1's header (sluice-0.1.h), in order, as
 * X-macro lists: X(struct, field) for a field today's header keeps under
 * its name, XR(struct, field, now) for one it keeps in place under a new
 * name (a reserved_0_1_ region), XS(struct) for the struct itself. The
 * recipe 0.1 embedded in sl_config and sl_decode_opts, whose own layout
 * the library keeps as sl__recipe_0_1 (base/abi.h), is SL_ABI_RECIPE_0_1,
 * with XE(field). The including file defines the macros.
 */
#ifndef SL_ABI_FIELDS_0_1_H
#define SL_ABI_FIELDS_0_1_H

#define SL_ABI_STRUCTS_0_1 \
    XS(sl_config) \
    X(sl_config, struct_size) \
    X(sl_config, source) \
    X(sl_config, batch_size) \
    X(sl_config, size) \
    X(sl_config, preset) \
    X(sl_config, shuffle) \
    X(sl_config, seed) \
    X(sl_config, drop_last) \
    X(sl_config, rank) \
    X(sl_config, world_size) \
    X(sl_config, workers) \
    X(sl_config, prefetch) \
    X(sl_config, min_slots) \
    X(sl_config, budget) \
    X(sl_config, on_error) \
    X(sl_config, max_pixels) \
    X(sl_config, max_bytes) \
    X(sl_config, flags) \
    X(sl_config, max_error_records) \
    X(sl_config, fields) \
    XR(sl_config, recipe, reserved_0_1_recipe) \
    X(sl_config, max_scans) \
    X(sl_config, max_error_rate) \
    X(sl_config, shared_budget) \
    X(sl_config, cache) \
    X(sl_config, cache_share) \
    X(sl_config, cache_what) \
    X(sl_config, local_rank) \
    X(sl_config, local_world_size) \
    X(sl_config, decode) \
    X(sl_config, gpu_device) \
    X(sl_config, gpu_budget) \
    X(sl_config, gpu_max_pixels) \
    X(sl_config, gpu_staging) \
    X(sl_config, worker_nice) \
    XS(sl_field) \
    X(sl_field, name) \
    X(sl_field, data) \
    X(sl_field, dtype) \
    X(sl_field, ndim) \
    X(sl_field, shape) \
    X(sl_field, strides) \
    X(sl_field, nbytes) \
    X(sl_field, kind) \
    X(sl_field, device_type) \
    X(sl_field, device_id) \
    XS(sl_stats) \
    X(sl_stats, samples) \
    X(sl_stats, batches) \
    X(sl_stats, errors) \
    X(sl_stats, epoch) \
    X(sl_stats, seconds) \
    X(sl_stats, samples_per_s) \
    X(sl_stats, consumer_wait_s) \
    X(sl_stats, worker_busy_s) \
    X(sl_stats, worker_idle_s) \
    X(sl_stats, budget_wait_s) \
    X(sl_stats, workers) \
    X(sl_stats, slots) \
    X(sl_stats, slots_held) \
    X(sl_stats, slots_ready) \
    X(sl_stats, budget_bytes) \
    X(sl_stats, accounted_bytes) \
    X(sl_stats, peak_accounted_bytes) \
    X(sl_stats, fixed_bytes) \
    XR(sl_stats, mem, reserved_0_1_mem) \
    XR(sl_stats, mem_peak, reserved_0_1_mem_peak) \
    X(sl_stats, cache_hits) \
    X(sl_stats, cache_misses) \
    X(sl_stats, index_seconds) \
    X(sl_stats, cache_bytes) \
    X(sl_stats, cache_capacity) \
    X(sl_stats, cache_evictions) \
    X(sl_stats, storage_bytes_read) \
    X(sl_stats, slots_retired) \
    X(sl_stats, slots_min) \
    X(sl_stats, slot_retirements) \
    X(sl_stats, slot_reactivations) \
    X(sl_stats, cache_hit_rate) \
    X(sl_stats, cache_entries) \
    X(sl_stats, cache_shared) \
    X(sl_stats, cache_processes) \
    X(sl_stats, decode) \
    X(sl_stats, decode_reason) \
    X(sl_stats, gpu_samples) \
    X(sl_stats, cpu_samples) \
    X(sl_stats, gpu_handed_back) \
    X(sl_stats, gpu_pool_bytes) \
    X(sl_stats, gpu_pool_peak) \
    X(sl_stats, gpu_batch_bytes) \
    X(sl_stats, gpu_pinned_bytes) \
    X(sl_stats, gpu_staging_peak) \
    X(sl_stats, gpu_rate) \
    X(sl_stats, cpu_rate) \
    X(sl_stats, gpu_device_name) \
    XS(sl_error_record) \
    X(sl_error_record, index) \
    X(sl_error_record, epoch) \
    X(sl_error_record, code) \
    X(sl_error_record, reason) \
    XS(sl_state) \
    X(sl_state, version) \
    X(sl_state, seed) \
    X(sl_state, epoch) \
    X(sl_state, batch) \
    X(sl_state, tail) \
    X(sl_state, dataset_size) \
    X(sl_state, rank) \
    X(sl_state, world_size) \
    X(sl_state, batch_size) \
    X(sl_state, flags) \
    XS(sl_plan) \
    X(sl_plan, dataset_size) \
    X(sl_plan, samples_per_rank) \
    X(sl_plan, batches) \
    X(sl_plan, workers) \
    X(sl_plan, slots) \
    X(sl_plan, num_fields) \
    X(sl_plan, sample_bytes) \
    X(sl_plan, slot_bytes) \
    X(sl_plan, worker_bytes) \
    X(sl_plan, index_bytes) \
    X(sl_plan, fixed_bytes) \
    X(sl_plan, min_budget) \
    X(sl_plan, index_seconds) \
    XS(sl_image_info) \
    X(sl_image_info, width) \
    X(sl_image_info, height) \
    X(sl_image_info, channels) \
    X(sl_image_info, format) \
    X(sl_image_info, progressive) \
    X(sl_image_info, orientation) \
    X(sl_image_info, bit_depth) \
    XS(sl_decode_opts) \
    X(sl_decode_opts, struct_size) \
    X(sl_decode_opts, preset) \
    X(sl_decode_opts, size) \
    X(sl_decode_opts, seed) \
    X(sl_decode_opts, epoch) \
    X(sl_decode_opts, index) \
    X(sl_decode_opts, max_pixels) \
    X(sl_decode_opts, max_bytes) \
    X(sl_decode_opts, flags) \
    XR(sl_decode_opts, recipe, reserved_0_1_recipe) \
    X(sl_decode_opts, max_scans) \
    XS(sl_video_opts) \
    X(sl_video_opts, frames) \
    X(sl_video_opts, stride) \
    X(sl_video_opts, fps) \
    X(sl_video_opts, size) \
    X(sl_video_opts, preset) \
    X(sl_video_opts, short_clip) \
    X(sl_video_opts, seed) \
    X(sl_video_opts, epoch) \
    X(sl_video_opts, index) \
    X(sl_video_opts, max_pixels) \
    X(sl_video_opts, max_frames) \
    X(sl_video_opts, max_bytes) \
    X(sl_video_opts, max_seconds) \
    X(sl_video_opts, codecs) \
    XS(sl_video_info) \
    X(sl_video_info, width) \
    X(sl_video_info, height) \
    X(sl_video_info, rotation) \
    X(sl_video_info, fps) \
    X(sl_video_info, duration) \
    X(sl_video_info, frames) \
    X(sl_video_info, codec) \
    XS(sl_video_clip) \
    X(sl_video_clip, box) \
    X(sl_video_clip, flip) \
    X(sl_video_clip, scaled_w) \
    X(sl_video_clip, scaled_h) \
    X(sl_video_clip, win_x) \
    X(sl_video_clip, win_y) \
    X(sl_video_clip, frame_index) \
    XS(sl_budget_info) \
    X(sl_budget_info, limit) \
    X(sl_budget_info, ceiling) \
    X(sl_budget_info, used) \
    X(sl_budget_info, peak) \
    X(sl_budget_info, fixed) \
    XR(sl_budget_info, mem, reserved_0_1_mem) \
    XR(sl_budget_info, mem_peak, reserved_0_1_mem_peak) \
    X(sl_budget_info, wait_s) \
    X(sl_budget_info, waiters) \
    X(sl_budget_info, loaders) \
    X(sl_budget_info, loader_used) \
    X(sl_budget_info, loader_peak) \
    X(sl_budget_info, loader_fixed) \
    X(sl_budget_info, governor) \
    X(sl_budget_info, governor_moves) \
    X(sl_budget_info, container_limit) \
    X(sl_budget_info, container_usage) \
    X(sl_budget_info, mem_available) \
    X(sl_budget_info, psi_some_avg10) \
    XS(sl_governor_opts) \
    X(sl_governor_opts, period_ms) \
    X(sl_governor_opts, margin) \
    X(sl_governor_opts, grow_after_ms) \
    X(sl_governor_opts, psi_high) \
    X(sl_governor_opts, cgroup_dir) \
    XS(sl_budget_event) \
    X(sl_budget_event, t) \
    X(sl_budget_event, old_limit) \
    X(sl_budget_event, new_limit) \
    X(sl_budget_event, container_limit) \
    X(sl_budget_event, container_usage) \
    X(sl_budget_event, mem_available) \
    X(sl_budget_event, reason) \
    XS(sl_value) \
    X(sl_value, name) \
    X(sl_value, kind) \
    X(sl_value, type) \
    X(sl_value, count) \
    X(sl_value, ival)

#define SL_ABI_RECIPE_0_1 \
    XE(height) \
    XE(width) \
    XE(interpolation) \
    XE(scale_min) \
    XE(scale_max) \
    XE(ratio_min) \
    XE(ratio_max) \
    XE(hflip) \
    XE(crop_pct) \
    XE(resize)

#endif
