/*
 * The CPU clip decoder alone (src/format/video*.c), on one thread, with and
 * without the early end of a pass (video_decode.c: reading stops at the
 * first packet decoded after the last target's time), the two modes
 * alternating clip by clip (A B B A ...) so that a machine loaded by
 * others weighs on both alike. Each clip is probed, planned (train: a
 * seeded offset, one RandomResizedCrop box and flip) and decoded as a
 * loader's worker does it; the CPU time of this thread is measured per
 * step, and the two modes' clips are compared byte for byte.
 *
 *   video_cpu [--frames 16] [--stride 2] [--size 224] [--rounds 2] FILE...
 *
 * Prints one JSON line: clips, CPU ms a clip for the probe + plan and for
 * the decode in each mode, their ratio, passes ended early, whether every
 * clip had the same bytes. bench/video_cpu.sh builds it and runs it beside
 * the loader and its peers.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "format/video.h"
#include "ops/ops.h"

static double thread_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* Probe, plan and decode one clip into out (resized to fit); the CPU ms of
 * the probe + plan and of the decode added to *setup and *dec. */
static int clip(const char *path, const sl__clip_spec *spec, uint64_t epoch, uint64_t index, uint8_t **out,
                size_t *cap, size_t *len, double *setup, double *dec) {
    char why[256];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "video_cpu: cannot open %s\n", path);
        exit(1);
    }
    sl__sample_file f = {.fd = fd, .offset = 0, .size = (uint64_t)st.st_size};
    sl__video_info info;
    sl__clip_plan plan;
    sl__rng r;
    double t0 = thread_ms();
    int rc = sl__video_probe(&f, NULL, &info, why, sizeof why);
    if (rc == 0) {
        sl__rng_init(&r, 7, epoch, index);
        rc = sl__video_plan(&info, spec, &r, &plan, why, sizeof why);
    }
    double t1 = thread_ms();
    if (rc == 0 && plan.out_bytes > *cap) {
        free(*out);
        *cap = plan.out_bytes;
        if (!(*out = malloc(*cap))) rc = SL_ENOMEM;
    }
    if (rc == 0) {
        sl__quota q = {plan.quota, 0, 0, 0};
        rc = sl__video_decode(&f, &info, &plan, &q, NULL, *out, why, sizeof why);
        *len = plan.out_bytes;
    }
    *setup += t1 - t0;
    *dec += thread_ms() - t1;
    close(fd);
    if (rc) fprintf(stderr, "video_cpu: %s: %s (%s)\n", path, why, sl_strerror(rc));
    return rc;
}

int main(int argc, char **argv) {
    uint32_t frames = 16, stride = 2, size = 224, rounds = 2;
    int i = 1;
    for (; i + 1 < argc && argv[i][0] == '-' && argv[i][1] == '-'; i += 2) {
        uint32_t v = (uint32_t)strtoul(argv[i + 1], NULL, 10);
        if (!strcmp(argv[i], "--frames")) frames = v;
        else if (!strcmp(argv[i], "--stride")) stride = v;
        else if (!strcmp(argv[i], "--size")) size = v;
        else if (!strcmp(argv[i], "--rounds")) rounds = v;
        else break;
    }
    if (i >= argc) {
        fprintf(stderr, "usage: video_cpu [--frames 16] [--stride 2] [--size 224] [--rounds 2] FILE...\n");
        return 2;
    }
    if (!sl__video_available()) {
        fprintf(stderr, "video_cpu: this build has no video\n");
        return 1;
    }
    sl__clip_spec spec = {frames, stride, 0, SL_CLIP_PAD, {0}};
    char why[256];
    if (sl__recipe_make(SL_PRESET_TRAIN, size, NULL, 0, 0, &spec.recipe, why, sizeof why)) {
        fprintf(stderr, "video_cpu: %s\n", why);
        return 2;
    }
    uint8_t *buf[2] = {NULL, NULL};
    size_t cap[2] = {0, 0}, len[2] = {0, 0};
    double setup = 0, dec[2] = {0, 0}; /* [0]: early end, [1]: reading on */
    uint64_t clips = 0, ends0 = sl__video_early_ends(), differ = 0, failed = 0;
    for (uint32_t r = 0; r < rounds; r++)
        for (int k = i; k < argc; k++, clips++) {
            for (int m = 0; m < 2; m++) {
                int mode = (int)(clips & 1) ^ m; /* A B, then B A */
                sl__video_no_early_end(mode);
                failed += clip(argv[k], &spec, r, (uint64_t)k, &buf[mode], &cap[mode], &len[mode], &setup,
                               &dec[mode]) != 0;
            }
            differ += len[0] != len[1] || memcmp(buf[0], buf[1], len[0]) != 0;
        }
    sl__video_no_early_end(0);
    printf("{\"clips\": %llu, \"frames\": %u, \"stride\": %u, \"size\": %u, \"probe_plan_ms\": %.2f, "
           "\"decode_ms\": %.1f, \"decode_ms_read_on\": %.1f, \"read_on_over_early\": %.3f, \"early_ends\": %llu, "
           "\"failed\": %llu, \"same_bytes\": %s}\n",
           (unsigned long long)clips, frames, stride, size, setup / (2.0 * (double)clips), dec[0] / (double)clips,
           dec[1] / (double)clips, dec[0] > 0 ? dec[1] / dec[0] : 0, (unsigned long long)(sl__video_early_ends() - ends0),
           (unsigned long long)failed, differ ? "false" : "true");
    free(buf[0]), free(buf[1]);
    return differ || failed ? 1 : 0;
}
