/* ctest: tsan */
/*
 * Samples with fields (src/fields/, collate): the schema's strict parsing
 * (every error names the field), the default schema equal to the loader
 * without one, .jsonl table sources (paths, lists, integers, numbers),
 * image + label + target + sequence outputs with their shapes, crop
 * groups (same group, same random window), determinism over worker counts,
 * resume mid-epoch, and rows that break the schema as error records or
 * index errors with line numbers.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"
#include "sluice.h"

/* Write ROOT/m.jsonl: row k = the dataset file k, its label, a target
 * [k, k + 0.5] and a sequence of the file and the next one. */
static void write_table(const fx_dataset *d, char *path, size_t len, int bad_row) {
    snprintf(path, len, "%s/m.jsonl", d->root);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    for (uint32_t k = 0; k < d->files; k++) {
        if ((int)k == bad_row) {
            fprintf(f, "{\"img\": \"%s\", \"y\": \"not a number\"}\n", d->rel[k]);
            continue;
        }
        fprintf(f, "{\"img\": \"%s\", \"y\": %d, \"t\": [%u, %u.5], \"seq\": [\"%s\", \"%s\"]}\n", d->rel[k],
                d->label[k], k, k, d->rel[k], d->rel[(k + 1) % d->files]);
    }
    fclose(f);
}

static const char *SCHEMA =
    "{\"img\": {\"kind\": \"image\", \"size\": 24, \"preset\": \"val\"},"
    " \"y\": {\"kind\": \"label\"},"
    " \"t\": {\"kind\": \"target\", \"length\": 2},"
    " \"seq\": {\"kind\": \"sequence\", \"of\": {\"kind\": \"image\", \"size\": 16, \"preset\": \"val\"}}}";

static void cfg_for(sl_config *c, const char *source, const char *fields, uint32_t workers) {
    sl_config_init(c);
    c->source = source;
    c->fields = fields;
    c->batch_size = 4;
    c->size = 32;
    c->workers = workers;
    c->budget = 64 << 20;
    c->seed = 7;
    c->flags = SL_FLAG_CHECKSUM;
}

static const char *create_error(const char *source, const char *fields) {
    static char err[512];
    sl_config c;
    cfg_for(&c, source, fields, 1);
    sl_loader *ld = NULL;
    err[0] = 0;
    int rc = sl_loader_create(&c, &ld, err, sizeof err);
    if (rc == 0) {
        sl_loader_destroy(ld);
        SL_FAIL("schema %s was accepted", fields);
    }
    return err;
}

TEST(schema_errors_name_the_field) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 4, 0, 64, 96);
    CHECK_STR_CONTAINS(create_error(d->root, "{\"a\": {\"kind\": \"nope\"}}"), "field \"a\": unknown kind \"nope\"");
    CHECK_STR_CONTAINS(create_error(d->root, "{\"a\": {\"kind\": \"image\", \"sise\": 3}}"), "unknown option \"sise\"");
    CHECK_STR_CONTAINS(create_error(d->root, "{\"a\": {\"size\": 3}}"), "\"kind\"");
    CHECK_STR_CONTAINS(create_error(d->root, "{\"a\": {\"kind\": \"image\", \"size\": 0}}"), "\"size\" must be");
    CHECK_STR_CONTAINS(create_error(d->root, "{\"index\": {\"kind\": \"label\"}}"), "not a field name");
    CHECK_STR_CONTAINS(create_error(d->root, "[1, 2]"), "JSON object");
    CHECK_STR_CONTAINS(create_error(d->root, "{\"a\": {\"kind\": \"label\"}, \"a\": {}}"), "not valid JSON");
    CHECK_STR_CONTAINS(create_error(d->root, "{\"t\": {\"kind\": \"target\"}}"), "needs \"length\"");
    CHECK_STR_CONTAINS(create_error(d->root, "{\"s\": {\"kind\": \"sequence\"}}"), "needs \"of\"");
    /* a folder has one file and one label a sample */
    CHECK_STR_CONTAINS(create_error(d->root, "{\"a\": {\"kind\": \"image\"}, \"b\": {\"kind\": \"image\"}}"),
                       "one file and one label");
    free(d);
}

TEST(default_schema_is_the_loader_without_one) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 12, 2, 64, 160);
    sl_config a, b;
    cfg_for(&a, d->root, NULL, 2);
    cfg_for(&b, d->root, "{\"image\": {\"kind\": \"image\"}, \"label\": {\"kind\": \"label\"}}", 2);
    uint64_t na, nb;
    CHECK_EQ(fx_epoch_sum(&a, &na), fx_epoch_sum(&b, &nb));
    CHECK_EQ(na, 12);
    CHECK_EQ(nb, 12);
    free(d);
}

TEST(table_outputs_and_shapes) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 10, 0, 64, 128);
    char path[512];
    write_table(d, path, sizeof path, -1);
    sl_config c;
    cfg_for(&c, path, SCHEMA, 2);
    c.shuffle = 0;
    sl_loader *ld;
    char err[512];
    if (sl_loader_create(&c, &ld, err, sizeof err)) SL_FAIL("create: %s", err);
    sl_batch *b;
    CHECK_OK(sl_loader_next(ld, &b));
    CHECK_EQ(sl_batch_num_fields(b), 5);
    sl_field f;
    CHECK_OK(sl_batch_find(b, "img", &f));
    CHECK_EQ(f.ndim, 4);
    CHECK_EQ(f.shape[1], 3);
    CHECK_EQ(f.shape[3], 24);
    CHECK_EQ(f.kind, SL_KIND_IMAGE);
    CHECK_OK(sl_batch_find(b, "t", &f));
    CHECK_EQ(f.dtype, SL_DTYPE_FLOAT32);
    CHECK_EQ(f.ndim, 2);
    CHECK_EQ(f.shape[1], 2);
    const float *t = f.data;
    CHECK(t[0] == 0.0f && t[1] == 0.5f && t[2] == 1.0f && t[3] == 1.5f); /* no shuffle: rows 0, 1 */
    CHECK_OK(sl_batch_find(b, "y", &f));
    CHECK_EQ(((const int64_t *)f.data)[1], d->label[1]);
    CHECK_OK(sl_batch_find(b, "seq", &f));
    CHECK_EQ(f.ndim, 5);
    CHECK_EQ(f.shape[1], 2);
    CHECK_EQ(f.shape[4], 16);
    CHECK_EQ(f.strides[0], 2 * 3 * 16 * 16);
    /* element 1 of row 0 is file 1, which is element 0 of row 1 */
    const uint8_t *s = f.data;
    CHECK(memcmp(s + 3 * 16 * 16, s + 2 * 3 * 16 * 16, 3 * 16 * 16) == 0);
    CHECK_OK(sl_batch_find(b, "index", &f));
    CHECK_EQ(((const int64_t *)f.data)[3], 3);
    sl_loader_release(ld, b);
    sl_loader_destroy(ld);
    free(d);
}

TEST(crop_group_draws_one_window) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 8, 0, 96, 200);
    char path[512];
    write_table(d, path, sizeof path, -1);
    const char *schema =
        "{\"a\": {\"kind\": \"image\", \"key\": \"img\", \"size\": 20, \"crop_group\": \"g\"},"
        " \"b\": {\"kind\": \"image\", \"key\": \"img\", \"size\": 20, \"crop_group\": \"g\"},"
        " \"c\": {\"kind\": \"image\", \"key\": \"img\", \"size\": 20}}";
    sl_config c;
    cfg_for(&c, path, schema, 3);
    sl_loader *ld;
    char err[512];
    if (sl_loader_create(&c, &ld, err, sizeof err)) SL_FAIL("create: %s", err);
    sl_batch *bt;
    int differs = 0;
    while (sl_loader_next(ld, &bt) == 0) {
        sl_field fa, fb, fc;
        CHECK_OK(sl_batch_find(bt, "a", &fa));
        CHECK_OK(sl_batch_find(bt, "b", &fb));
        CHECK_OK(sl_batch_find(bt, "c", &fc));
        CHECK(memcmp(fa.data, fb.data, fa.nbytes) == 0); /* one group: the same crop and flip */
        differs |= memcmp(fa.data, fc.data, fa.nbytes) != 0;
        sl_loader_release(ld, bt);
    }
    CHECK(differs); /* another group draws other windows */
    sl_loader_destroy(ld);
    free(d);
}

TEST(same_bytes_for_any_worker_count_and_resume) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 14, 0, 64, 128);
    char path[512];
    write_table(d, path, sizeof path, -1);
    sl_config c1, c4;
    cfg_for(&c1, path, SCHEMA, 1);
    cfg_for(&c4, path, SCHEMA, 4);
    uint64_t full = fx_epoch_sum(&c1, NULL);
    CHECK_EQ(full, fx_epoch_sum(&c4, NULL));
    fx_check_resume(&c4, &c1, 2); /* resume after batch 2 of epoch 0 */
    free(d);
}

TEST(rows_that_break_the_schema) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 6, 0, 64, 96);
    char path[512];
    write_table(d, path, sizeof path, 3);
    /* a label that is not an integer stops the index, naming the line */
    CHECK_STR_CONTAINS(create_error(path, SCHEMA), "line 4: \"y\" is not an integer");
    /* a key no row has */
    write_table(d, path, sizeof path, -1);
    CHECK_STR_CONTAINS(create_error(path, "{\"z\": {\"kind\": \"label\"}}"), "line 1: no \"z;label;cls\" key");
    /* a sequence whose list is longer than its length: an error record */
    sl_config c;
    cfg_for(&c, path,
            "{\"seq\": {\"kind\": \"sequence\", \"length\": 3, \"of\": {\"kind\": \"image\", \"size\": 8}}}", 2);
    sl_loader *ld;
    char err[512];
    if (sl_loader_create(&c, &ld, err, sizeof err)) SL_FAIL("create: %s", err);
    sl_batch *b;
    int rc;
    while ((rc = sl_loader_next(ld, &b)) == 0) sl_loader_release(ld, b);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.errors, 6);
    sl_error_record r;
    CHECK_EQ(sl_loader_errors(ld, 0, &r, 1), 1);
    CHECK_STR_CONTAINS(r.reason, "list of 2 files; the sequence's length is 3");
    sl_loader_destroy(ld);
    free(d);
}

TEST(plan_matches_create) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 9, 0, 64, 96);
    char path[512];
    write_table(d, path, sizeof path, -1);
    sl_config c;
    cfg_for(&c, path, SCHEMA, 2);
    sl_plan p;
    char err[512];
    if (sl_loader_plan(&c, &p, err, sizeof err)) SL_FAIL("plan: %s", err);
    CHECK_EQ(p.dataset_size, 9);
    CHECK_EQ(p.num_fields, 5);
    CHECK_EQ(p.sample_bytes, 3 * 24 * 24 + 8 + 2 * 4 + 2 * 3 * 16 * 16 + 8);
    sl_loader *ld;
    if (sl_loader_create(&c, &ld, err, sizeof err)) SL_FAIL("create: %s", err);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.slots, p.slots);
    CHECK_EQ(st.workers, p.workers);
    sl_loader_destroy(ld);
    /* a budget below the minimum: plan says what is needed, create refuses */
    c.budget = p.min_budget - 1;
    CHECK_OK(sl_loader_plan(&c, &p, err, sizeof err));
    CHECK(p.min_budget > c.budget);
    CHECK_EQ(sl_loader_create(&c, &ld, err, sizeof err), SL_EBUDGET);
    free(d);
}

TEST(config_struct_size_checked) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 2, 0, 64, 96);
    sl_config c;
    cfg_for(&c, d->root, NULL, 1);
    c.struct_size = 8; /* not initialised by sl_config_init */
    sl_loader *ld;
    char err[512];
    CHECK_EQ(sl_loader_create(&c, &ld, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "sl_config_init");
    /* a newer header than this library: its fields past ours are refused
     * once set (docs/abi.md), taken while they are zero */
    struct {
        sl_config c;
        uint64_t newer[2];
    } big;
    memset(&big, 0, sizeof big);
    cfg_for(&big.c, d->root, NULL, 1);
    big.c.struct_size = sizeof big;
    big.newer[1] = 5;
    CHECK_EQ(sl_loader_create(&big.c, &ld, err, sizeof err), SL_EUNSUPPORTED);
    CHECK_STR_CONTAINS(err, "newer header");
    big.newer[1] = 0;
    CHECK_OK(sl_loader_create(&big.c, &ld, err, sizeof err));
    sl_loader_destroy(ld);
    free(d);
}
