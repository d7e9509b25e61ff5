/*
 * Fuzz the video entry point end to end on one input: the bytes as a file
 * (a memfd, read through the module's pread reader), sl__video_probe under
 * tight limits, then for a train and a val clip sl__video_plan and
 * sl__video_decode from a quota of exactly plan.quota. Nothing may crash,
 * read outside the input, leak, or write outside the output; every failure
 * is a negative SL_E* code with a reason; the quota is back to zero after
 * every decode, and a decode never takes more than the plan's quota.
 *
 * FFmpeg's own libraries are the system's (not instrumented): the fuzzer
 * steers by our code's coverage and the sanitizers check our side of every
 * call (frame buffers, plane offsets, conversion into the output).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ops/ops.h"

static void clip(const sl__sample_file *f, const sl__video_info *info, int preset, uint32_t size, uint64_t index) {
    sl__clip_spec spec = {4, 3, 0, (int)(index % 3), {0}};
    if (sl__recipe_make(preset, size, NULL, 0, 0, &spec.recipe, NULL, 0)) return;
    sl__rng r;
    sl__rng_init(&r, 1, 0, index);
    sl__clip_plan *p = malloc(sizeof *p);
    if (!p) return;
    char why[256] = "";
    int rc = sl__video_plan(info, &spec, &r, p, why, sizeof why);
    if (rc > 0) abort();
    if (rc < 0) {
        if (!why[0]) abort();
        free(p);
        return;
    }
    if (p->out_bytes != (uint64_t)4 * 3 * size * size || p->mem < p->quota) abort();
    uint8_t *out = malloc(p->out_bytes + 1);
    if (out) {
        out[p->out_bytes] = 0x5A;
        sl__quota q = {p->quota, 0, 0, 0};
        rc = sl__video_decode(f, info, p, &q, NULL, out, why, sizeof why);
        if (rc > 0 || (rc < 0 && (!why[0] || rc < SL_ESYS))) abort();
        if (q.used != 0 || q.peak > p->quota || out[p->out_bytes] != 0x5A) abort();
        if (rc == 0) { /* every output byte written: touch them for the sanitizers */
            volatile unsigned sum = 0;
            for (uint64_t i = 0; i < p->out_bytes; i++) sum += out[i];
            (void)sum;
        }
        free(out);
    }
    free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = memfd_create("fuzz_video", MFD_CLOEXEC);
    if (fd < 0) return 0;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    sl__sample_file f = {.fd = fd, .offset = 0, .size = size};
    sl__video_limits lim = {(uint64_t)1 << 20, 5000, (uint64_t)1 << 20, 600, NULL};
    sl__video_info info;
    char why[256] = "";
    int rc = sl__video_probe(&f, &lim, &info, why, sizeof why);
    if (rc > 0 || (rc < 0 && !why[0])) abort();
    if (rc == 0) {
        if (!info.width || !info.height || (uint64_t)info.coded_width * info.coded_height > lim.max_pixels ||
            info.frames < 1 || info.frames > 5000)
            abort();
        clip(&f, &info, SL_PRESET_TRAIN, 16, size);
        clip(&f, &info, SL_PRESET_VAL, 12, size + 1);
    }
    close(fd);
    return 0;
}
