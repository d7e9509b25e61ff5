/*
 * Host devices that stand in for a GPU in CI (sl__gpu_dev_override): their
 * "device memory" is host memory; the copies every such device makes.
 */
#ifndef SL_TEST_HOST_DEVICE_H
#define SL_TEST_HOST_DEVICE_H

#include <stdint.h>
#include <string.h>

#include "fixture.h"

FX_FN int hd_upload(void *ctx, uint32_t lane, uint64_t dst, const void *src, size_t n) {
    (void)ctx, (void)lane;
    memcpy((void *)(uintptr_t)dst, src, n);
    return 0;
}

FX_FN int hd_upload_runs(void *ctx, uint32_t lane, uint32_t n, const uint64_t *dst, const void *const *src,
                         const size_t *len) {
    for (uint32_t i = 0; i < n; i++) hd_upload(ctx, lane, dst[i], src[i], len[i]);
    return 0;
}

FX_FN int hd_move(void *ctx, uint32_t lane, uint64_t dst, uint64_t src, size_t n) {
    return hd_upload(ctx, lane, dst, (const void *)(uintptr_t)src, n);
}

FX_FN int hd_download(void *ctx, uint32_t lane, void *dst, uint64_t src, size_t n) {
    (void)ctx, (void)lane;
    memcpy(dst, (const void *)(uintptr_t)src, n);
    return 0;
}

#endif
