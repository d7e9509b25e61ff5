/*
 * Large test images and the process's resident memory, header-only (for
 * test_arena.c, test_rss.c, test_live_limit.c, test_governor.c and
 * test_loader_cache.c).
 *
 *  - bx_jpeg(): a JPEG of w x h written with libjpeg's compressor in one
 *    of the layouts that make a decoder hold the most: baseline 4:2:0
 *    (strips only), progressive 4:4:4 and sequential multi-scan 4:4:4
 *    (one component a scan), both of which buffer every coefficient of the
 *    image; or grayscale.
 *  - bx_rss(): VmRSS / VmHWM of this process from /proc/self/status, and
 *    bx_reset_peak() (clear_refs 5) so the peak starts now; BX_RSS_MEANINGFUL
 *    (not under a sanitizer); bx_now_s() and bx_sleep_ms() come from
 *    clock.h.
 *  - bx_fill_slots(): wait, consuming nothing, until every live batch slot
 *    of a loader is filled or held.
 */
#ifndef SL_BIGIMG_H
#define SL_BIGIMG_H

#include "fixture.h" /* first: it defines _GNU_SOURCE */

#include "clock.h"

/* Under ASan or TSan resident memory includes the sanitizer's shadow and
 * quarantine, which are not the library's (and a memory cgroup would be
 * charged for them): RSS bounds are checked in plain builds only. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define BX_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define BX_SANITIZED 1
#endif
#endif
#ifndef BX_SANITIZED
#define BX_SANITIZED 0
#endif
#define BX_RSS_MEANINGFUL (!BX_SANITIZED)

enum { BX_BASELINE_420 = 0, BX_PROGRESSIVE_444, BX_MULTISCAN_444, BX_GRAY_PROGRESSIVE };

/* bx_jpeg's layout, set on the compressor (fx_jpeg_tuned's tune). */
FX_FN void bx_layout(struct jpeg_compress_struct *c, int layout) {
    if (layout == BX_GRAY_PROGRESSIVE) jpeg_set_colorspace(c, JCS_GRAYSCALE);
    if (layout != BX_BASELINE_420)
        for (int i = 0; i < c->num_components; i++) c->comp_info[i].h_samp_factor = c->comp_info[i].v_samp_factor = 1;
    static jpeg_scan_info scans[3]; /* read when the compression starts */
    if (layout == BX_PROGRESSIVE_444 || layout == BX_GRAY_PROGRESSIVE) jpeg_simple_progression(c);
    if (layout == BX_MULTISCAN_444) {
        for (int i = 0; i < 3; i++) scans[i] = (jpeg_scan_info){1, {i, 0, 0, 0}, 0, 63, 0, 0};
        c->scan_info = scans;
        c->num_scans = 3;
    }
}

/* A JPEG in memory (malloc'd by libjpeg; the caller frees). */
FX_FN unsigned char *bx_jpeg(uint32_t w, uint32_t h, int layout, uint64_t seed, unsigned long *len) {
    uint8_t *px = fx_texture(w, h, seed, 0);
    unsigned char *out;
    fx_jpeg_tuned(px, w, h, 90, bx_layout, layout, &out, len);
    free(px);
    return out;
}

/* Bytes of "VmRSS:" or "VmHWM:" (the key with its colon) of this process. */
FX_FN uint64_t bx_status(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    uint64_t v = 0;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl)) {
            v = strtoull(line + kl, NULL, 10) * 1024;
            break;
        }
    fclose(f);
    return v;
}
FX_FN uint64_t bx_rss(void) { return bx_status("VmRSS:"); }
FX_FN uint64_t bx_hwm(void) { return bx_status("VmHWM:"); }

/* Reset VmHWM to the current RSS (Linux 4.0+). 0 when it worked. */
FX_FN int bx_reset_peak(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return -1;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Wait until every live slot of ld is filled or held (its workers idle).
 * Fails only when 30 s pass with no slot filled: under a sanitizer on a
 * busy machine a slot can take seconds, and the tests are about what is
 * filled, not how fast. */
FX_FN void bx_fill_slots(sl_loader *ld) {
    sl_stats st;
    uint32_t last = UINT32_MAX;
    double since = bx_now_s();
    for (;;) {
        CHECK_OK(sl_loader_stats(ld, &st));
        uint32_t filled = st.slots_ready + st.slots_held;
        if (filled >= st.slots) return;
        if (filled != last) last = filled, since = bx_now_s();
        else if (bx_now_s() - since > 30)
            SL_FAIL("slots never filled: %u ready, %u held of %u", st.slots_ready, st.slots_held, st.slots);
        bx_sleep_ms(5);
    }
}

#endif
