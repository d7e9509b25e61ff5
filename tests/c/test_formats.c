/*
 * The image format registry (src/format/decode.c): JPEG, PNG and WebP are
 * entries probed by content in order; sl_version() names each with its
 * library (or "off") and sl_build_info() gives their versions; files no entry handles are SL_EFORMAT, and error
 * records in a loader, whatever their name says.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "fixture.h"
#include "format/decode.h"
#include "sluice.h"

TEST(registry_lists_the_formats_and_version_names_them) {
    size_t n;
    const sl__image_format *f = sl__image_formats(&n);
    CHECK_EQ(n, 3);
    const char *names[3] = {"jpeg", "png", "webp"};
    int ids[3] = {SL_FORMAT_JPEG, SL_FORMAT_PNG, SL_FORMAT_WEBP};
    for (size_t i = 0; i < n; i++) {
        CHECK(strcmp(f[i].name, names[i]) == 0);
        CHECK_EQ(f[i].id, ids[i]);
        char want[64];
        snprintf(want, sizeof want, "%s %s", f[i].name, f[i].available() ? f[i].library : "off");
        CHECK_STR_CONTAINS(sl_version(), want);
    }
    CHECK(strncmp(sl_version(), SL_VERSION_STRING " (", strlen(SL_VERSION_STRING) + 2) == 0);
    /* sl_build_info's image keys are the registry's, in its order, each
     * with the library's version or "off" */
    const char *bi = sl_build_info(), *at = bi;
    for (size_t i = 0; i < n; i++) {
        char key[64], v[128];
        snprintf(key, sizeof key, ";%s=", f[i].name);
        const char *k = strstr(at, key);
        CHECK(k != NULL);
        f[i].version(v, sizeof v);
        CHECK(strncmp(k + strlen(key), v, strlen(v)) == 0);
        CHECK(f[i].available() ? strcmp(v, "off") != 0 : strcmp(v, "off") == 0);
        at = k + 1;
    }
}

TEST(probe_goes_by_content) {
    unsigned long len;
    unsigned char *jpg = fx_jpeg_bytes(40, 30, 1, 0, 90, &len);
    sl_image_info info;
    CHECK_OK(sl_image_probe(jpg, len, &info));
    CHECK(info.format == SL_FORMAT_JPEG && info.width == 40 && info.height == 30);
    size_t n;
    const sl__image_format *f = sl__image_formats(&n);
    for (size_t i = 0; i < n; i++) CHECK_EQ(f[i].sig(jpg, len), f[i].id == SL_FORMAT_JPEG);
    free(jpg);
    static const uint8_t bmp[32] = "BM6\x00\x00\x00\x00\x00\x00\x00\x36", gif[16] = "GIF89a";
    CHECK_EQ(sl_image_probe(bmp, sizeof bmp, &info), SL_EFORMAT);
    CHECK_EQ(sl_image_probe(gif, sizeof gif, &info), SL_EFORMAT);
    CHECK_EQ(sl_image_probe(gif, 0, &info), SL_EFORMAT);
}

/* A folder of a JPEG, a BMP, a GIF named .jpg and a text named .png: the
 * three others are error records saying no decoder handles them. */
TEST(files_no_decoder_handles_are_error_records) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 1, 0, 48, 64);
    char path[400];
    static const uint8_t bmp[64] = "BM@\x00\x00\x00\x00\x00\x00\x00\x36\x00\x00\x00\x28";
    snprintf(path, sizeof path, "%s/c00/x1.bmp", d->root);
    fx_write(path, bmp, sizeof bmp);
    snprintf(path, sizeof path, "%s/c00/x2.jpg", d->root);
    fx_write(path, "GIF89a\x01\x00\x01\x00", 10);
    snprintf(path, sizeof path, "%s/c00/x3.png", d->root);
    fx_write(path, "hello", 5);
    sl_config c;
    sl_config_init(&c);
    c.source = d->root;
    c.batch_size = 4;
    c.size = 16;
    c.workers = 2;
    c.budget = 32 << 20;
    sl_loader *ld;
    char err[512];
    if (sl_loader_create(&c, &ld, err, sizeof err)) SL_FAIL("create: %s", err);
    sl_batch *b;
    CHECK_OK(sl_loader_next(ld, &b));
    CHECK_EQ(sl_batch_len(b), 1);
    sl_loader_release(ld, b);
    sl_error_record e[3];
    CHECK_EQ(sl_loader_errors(ld, 0, e, 3), 3);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(e[i].code, SL_EFORMAT);
        CHECK_STR_CONTAINS(e[i].reason, "not a JPEG, PNG or WebP file");
    }
    sl_loader_destroy(ld);
    free(d);
}
