/*
 * One core's decode rates on a dataset's files, in this one thread:
 *   libjpeg   full decode to RGB with libjpeg-turbo directly (the ceiling a
 *             loader that decodes whole images can reach per core)
 *   train     sluice's train preset (crop-in-decode + resize + flip)
 *   val       sluice's val preset
 * Files are read into memory first; only decoding is timed.
 *
 *   find DATA -name '*.JPEG' | sort | head -1000 | bench/jpeg_loop [--size 224]
 * Built by bench/images.sh: cc -O2 bench/jpeg_loop.c -Iinclude build/libsluice.a -ljpeg ...
 */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jpeglib.h>

#include "sluice.h"

struct blob {
    unsigned char *p;
    size_t n;
};

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

struct jerr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
};
static void jexit(j_common_ptr c) { longjmp(((struct jerr *)c->err)->jb, 1); }

static int decode_full(struct jpeg_decompress_struct *ci, struct jerr *e, const struct blob *b, unsigned char *out) {
    if (setjmp(e->jb)) {
        jpeg_abort_decompress(ci);
        return -1;
    }
    jpeg_mem_src(ci, b->p, b->n);
    jpeg_read_header(ci, TRUE);
    ci->out_color_space = (ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK) ? JCS_CMYK : JCS_RGB;
    jpeg_start_decompress(ci);
    JSAMPROW row = out;
    while (ci->output_scanline < ci->output_height) jpeg_read_scanlines(ci, &row, 1);
    jpeg_finish_decompress(ci);
    return 0;
}

int main(int argc, char **argv) {
    unsigned size = 224;
    if (argc > 2 && !strcmp(argv[1], "--size")) size = (unsigned)atoi(argv[2]);
    struct blob *bl = NULL;
    size_t n = 0, cap = 0;
    char path[4096];
    while (fgets(path, sizeof path, stdin)) {
        path[strcspn(path, "\n")] = 0;
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        if (len <= 0) {
            fclose(f);
            continue;
        }
        if (n == cap) bl = realloc(bl, (cap = cap ? cap * 2 : 1024) * sizeof *bl);
        bl[n].p = malloc((size_t)len);
        bl[n].n = fread(bl[n].p, 1, (size_t)len, f);
        fclose(f);
        n++;
    }
    if (!n) {
        fprintf(stderr, "no files on stdin\n");
        return 1;
    }
    unsigned char *out = malloc((size_t)8192 * 8192 * 4);
    struct jpeg_decompress_struct ci;
    struct jerr e;
    ci.err = jpeg_std_error(&e.pub);
    e.pub.error_exit = jexit;
    jpeg_create_decompress(&ci);
    size_t ok = 0, jpegs = 0;
    double t = now();
    for (size_t i = 0; i < n; i++) {
        if (bl[i].n < 3 || bl[i].p[0] != 0xFF || bl[i].p[1] != 0xD8) continue; /* PNG under .JPEG */
        jpegs++;
        ok += decode_full(&ci, &e, &bl[i], out) == 0;
    }
    double t_full = now() - t;
    jpeg_destroy_decompress(&ci);

    double rates[2];
    for (int preset = 0; preset < 2; preset++) {
        sl_decode_opts o;
        sl_decode_opts_init(&o);
        o.preset = preset == 0 ? SL_PRESET_TRAIN : SL_PRESET_VAL;
        o.size = size;
        size_t good = 0;
        t = now();
        for (size_t i = 0; i < n; i++) {
            o.index = i;
            good += sl_image_decode(bl[i].p, bl[i].n, &o, out, (size_t)4 * size * size, NULL, 0) == 0;
        }
        rates[preset] = good / (now() - t);
    }
    printf("{\"files\": %zu, \"libjpeg_full_decode_per_s\": %.1f, \"sluice_train_per_s\": %.1f, "
           "\"sluice_val_per_s\": %.1f, \"size\": %u}\n",
           n, ok / t_full, rates[0], rates[1], size);
    (void)jpegs;
    return 0;
}
