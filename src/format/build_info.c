/*
 * What this build of libsluice can decode: sl_build_info().
 *
 * One "key=value;key=value" string, made once (the first call) from the
 * macros the build defined and the versions the linked libraries report.
 * Keys, always all present, in this order (the image formats' from the
 * format registry, src/format/decode.c, in its order):
 *   version  SL_VERSION_STRING
 *   jpeg     "libjpeg-turbo 2.1.5 (libjpeg API 62)": built against (libjpeg
 *            has no run-time version call)
 *   png      "libspng 0.7.3" (SL_HAVE_SPNG, run-time version) or "off"
 *   webp     "libwebp 1.2.4" (SL_HAVE_WEBP, run-time version) or "off"
 *   video    "libavformat 59.27.100, libavcodec 59.37.100" (SL_HAVE_FFMPEG,
 *            run-time versions) or "off"
 *   nvjpeg   the library dlopen() finds now ("libnvjpeg.so.13") or
 *            "not loadable" (the GPU engine's; docs/gpu.md)
 *   remote   "libcurl 7.88.1 (OpenSSL/3.0.11)" (SL_HAVE_CURL, run-time
 *            version: s3:// and http(s):// sources, docs/remote.md) or "off"
 * A part built later defines its SL_HAVE_* macro; until then its key says
 * "off". Values hold no ';' or '='.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <jpeglib.h>

#include "format/decode.h"
#include "io/engine.h"
#include "sluice.h"

#ifdef SL_HAVE_SPNG
#include <spng.h>
#endif
#ifdef SL_HAVE_WEBP
#include <webp/decode.h>
#endif
#ifdef SL_HAVE_FFMPEG
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#endif

static char build_info[512];
static pthread_once_t build_info_once = PTHREAD_ONCE_INIT;

/* "M.m.p" of a version packed as M << 16 | m << 8 | p (libwebp, FFmpeg). */
#if defined(SL_HAVE_WEBP) || defined(SL_HAVE_FFMPEG)
static const char *packed_version(unsigned v, char *buf, size_t len) {
    snprintf(buf, len, "%u.%u.%u", (v >> 16) & 0xffff, (v >> 8) & 0xff, v & 0xff);
    return buf;
}
#endif

/* The image formats' libraries (decode.c's registry calls these). */
void sl__jpeg_version(char *buf, size_t len) {
#ifdef LIBJPEG_TURBO_VERSION_NUMBER
    int v = LIBJPEG_TURBO_VERSION_NUMBER; /* 2001005 = 2.1.5 */
    snprintf(buf, len, "libjpeg-turbo %d.%d.%d (libjpeg API %d)", v / 1000000, v / 1000 % 1000, v % 1000,
             JPEG_LIB_VERSION);
#else
    snprintf(buf, len, "libjpeg (API %d)", JPEG_LIB_VERSION);
#endif
}

void sl__png_version(char *buf, size_t len) {
#ifdef SL_HAVE_SPNG
    snprintf(buf, len, "libspng %s", spng_version_string());
#else
    snprintf(buf, len, "off");
#endif
}

void sl__webp_version(char *buf, size_t len) {
#ifdef SL_HAVE_WEBP
    char v[32];
    snprintf(buf, len, "libwebp %s", packed_version((unsigned)WebPGetDecoderVersion(), v, sizeof v));
#else
    snprintf(buf, len, "off");
#endif
}

static void video_info(char *buf, size_t len) {
#ifdef SL_HAVE_FFMPEG
    char f[32], c[32];
    snprintf(buf, len, "libavformat %s, libavcodec %s", packed_version(avformat_version(), f, sizeof f),
             packed_version(avcodec_version(), c, sizeof c));
#else
    snprintf(buf, len, "off");
#endif
}

/* The GPU engine (src/gpu) is always built and loads nvJPEG at run time:
 * say which library the dynamic loader finds now, as the engine looks for
 * it first (no CUDA initialised here: safe before a fork). */
static void nvjpeg_info(char *buf, size_t len) {
    static const char *const names[] = {"libnvjpeg.so.13", "libnvjpeg.so.12", "libnvjpeg.so.11", "libnvjpeg.so"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *h = dlopen(names[i], RTLD_LAZY | RTLD_LOCAL);
        if (h) {
            dlclose(h);
            snprintf(buf, len, "%s", names[i]);
            return;
        }
    }
    snprintf(buf, len, "not loadable");
}

static void make_build_info(void) {
    char v[128], video[128], nvjpeg[64], remote[96];
    size_t n, at = (size_t)snprintf(build_info, sizeof build_info, "version=%s", SL_VERSION_STRING);
    const sl__image_format *f = sl__image_formats(&n);
    for (size_t i = 0; i < n && at < sizeof build_info; i++) {
        f[i].version(v, sizeof v);
        at += (size_t)snprintf(build_info + at, sizeof build_info - at, ";%s=%s", f[i].name, v);
    }
    video_info(video, sizeof video);
    nvjpeg_info(nvjpeg, sizeof nvjpeg);
    sl__io_version(remote, sizeof remote);
    if (at < sizeof build_info)
        snprintf(build_info + at, sizeof build_info - at, ";video=%s;nvjpeg=%s;remote=%s", video, nvjpeg, remote);
}

const char *sl_build_info(void) {
    pthread_once(&build_info_once, make_build_info);
    return build_info;
}
