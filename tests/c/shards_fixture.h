/*
 * A fixture dataset as WebDataset tar shards (test_shards.c, test_remote.c):
 * its files, in index order, as members "kNNNNN.jpg" + "kNNNNN.cls".
 * Header-only.
 */
#ifndef SL_TEST_SHARDS_FIXTURE_H
#define SL_TEST_SHARDS_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>

#include "fixture.h"
#include "tarw.h"

/* The loader configuration both tests read shards with (checksums on). */
TW_FN void sf_cfg(sl_config *c, const char *source, uint32_t workers) {
    sl_config_init(c);
    c->source = source;
    c->batch_size = 5;
    c->size = 32;
    c->workers = workers;
    c->budget = 64 << 20;
    c->seed = 5;
    c->flags = SL_FLAG_CHECKSUM;
}

/* A whole file into out (appended). */
TW_FN void sf_read_all(const char *path, buf *out) {
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    uint8_t chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) b_put(out, chunk, n);
    fclose(f);
}

/* The dataset's files, in index order, as nshards shards
 * OUT/s-00000N.tar of samples "kNNNNN.jpg" + "kNNNNN.cls". */
TW_FN void sf_write_shards(const fx_dataset *d, const char *out, int nshards) {
    uint32_t per = (d->files + (uint32_t)nshards - 1) / (uint32_t)nshards;
    for (int s = 0; s < nshards; s++) {
        buf b = {0};
        for (uint32_t k = (uint32_t)s * per; k < d->files && k < (uint32_t)(s + 1) * per; k++) {
            char path[512], name[64], cls[16];
            buf img = {0};
            snprintf(path, sizeof path, "%s/%s", d->root, d->rel[k]);
            sf_read_all(path, &img);
            snprintf(name, sizeof name, "k%05u.jpg", k);
            member_n(&b, name, img.p, img.n);
            snprintf(name, sizeof name, "k%05u.cls", k);
            snprintf(cls, sizeof cls, "%d\n", d->label[k]);
            member(&b, name, cls);
            free(img.p);
        }
        end(&b);
        char path[512];
        snprintf(path, sizeof path, "%s/s-%06d.tar", out, s);
        b_write(&b, path);
        free(b.p);
    }
}

#endif
