/* ctest: tsan */
/*
 * Table sources without a JSON library (src/source/table.c, jsonrow.c):
 * .csv tables whose header names the fields give the same batches as the
 * same .jsonl table; a headerless path,label .csv with a schema is mapped
 * as before; rows outside the row grammar, headers without a column, cells
 * of the wrong type are index errors naming the line and the key; every
 * allocation may fail cleanly.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files.h"
#include "fixture.h"
#include "sluice.h"

static const char *SCHEMA =
    "{\"img\": {\"kind\": \"image\", \"size\": 24}, \"y\": {\"kind\": \"label\"},"
    " \"t\": {\"kind\": \"target\", \"length\": 1}}";

/* ROOT/NAME with text. */
static void put(const fx_dataset *d, const char *name, const char *text, char *path, size_t len) {
    snprintf(path, len, "%s/%s", d->root, name);
    fx_write(path, text, strlen(text));
}

static void cfg_for(sl_config *c, const char *source, const char *fields, uint32_t workers) {
    sl_config_init(c);
    c->source = source;
    c->fields = fields;
    c->batch_size = 4;
    c->size = 24;
    c->workers = workers;
    c->budget = 64 << 20;
    c->seed = 3;
    c->flags = SL_FLAG_CHECKSUM;
}

static int create_fails(const char *source, const char *fields, char *err, size_t errlen) {
    sl_config c;
    cfg_for(&c, source, fields, 1);
    return fx_create_fails(&c, err, errlen);
}

/* The dataset as a .jsonl and a .csv table of the same rows (the csv's
 * columns in another order, quoted, CRLF). */
static void tables(const fx_dataset *d, char *jsonl, char *csv, size_t len) {
    char *j = calloc(1, 1 << 16), *c = calloc(1, 1 << 16);
    size_t nj = 0, nc = (size_t)snprintf(c, 1 << 16, "t,\"y\",img,unused\r\n");
    for (uint32_t k = 0; k < d->files; k++) {
        nj += (size_t)snprintf(j + nj, (1 << 16) - nj, "{\"img\": \"%s\", \"y\": %d, \"t\": %u.25, \"tags\": [\"a\"]}\n",
                               d->rel[k], d->label[k], k);
        nc += (size_t)snprintf(c + nc, (1 << 16) - nc, "%u.25,%d,\"%s\",x\r\n", k, d->label[k], d->rel[k]);
    }
    put(d, "m.jsonl", j, jsonl, len);
    put(d, "m.csv", c, csv, len);
    free(j), free(c);
}

TEST(csv_table_equals_jsonl_table) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 13, 2, 48, 96);
    char jsonl[512], csv[512];
    tables(d, jsonl, csv, sizeof jsonl);
    sl_config a, b, c8;
    cfg_for(&a, jsonl, SCHEMA, 2);
    cfg_for(&b, csv, SCHEMA, 1);
    cfg_for(&c8, csv, SCHEMA, 8);
    uint64_t na, nb;
    uint64_t want = fx_epoch_sum(&a, &na);
    CHECK_EQ(fx_epoch_sum(&b, &nb), want);
    CHECK_EQ(fx_epoch_sum(&c8, NULL), want);
    CHECK(na == 13 && nb == 13);
    fx_check_resume(&c8, &b, 1);
    free(d);
}

TEST(headerless_csv_with_a_schema_is_path_label) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 9, 0, 48, 96);
    char csv[512], text[4096];
    size_t n = 0;
    for (uint32_t k = 0; k < d->files; k++) n += (size_t)snprintf(text + n, sizeof text - n, "%s,%d\n", d->rel[k], d->label[k]);
    put(d, "p.csv", text, csv, sizeof csv);
    sl_config a, b;
    cfg_for(&a, csv, NULL, 2);
    cfg_for(&b, csv, "{\"image\": {\"kind\": \"image\"}, \"label\": {\"kind\": \"label\"}}", 2);
    CHECK_EQ(fx_epoch_sum(&a, NULL), fx_epoch_sum(&b, NULL));
    free(d);
}

TEST(rows_outside_the_grammar_name_line_and_key) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 2, 0, 48, 64);
    char path[512], err[512], text[1024];
    static const struct {
        const char *row, *why;
    } bad[] = {
        {"{\"img\": \"%s\", \"y\": 1, \"t\": 1, \"meta\": {\"w\": 3}}", "line 2: \"meta\": an object inside a row"},
        {"{\"img\": \"%s\", \"y\": 1, \"t\": 1, \"ok\": true}", "line 2: \"ok\": true, false or null"},
        {"{\"img\": \"%s\", \"y\": 1, \"t\": [1, \"a\"]}", "line 2: \"t\": a list mixing strings and numbers"},
        {"{\"img\": \"%s\", \"y\": 1.5, \"t\": 1}", "line 2: \"y\" is not an integer"},
        {"{\"img\": \"%s\", \"y\": 1, \"t\": \"1\"}", "line 2: \"t\" is neither a number nor a list of numbers"},
        {"{\"img\": [\"%s\"], \"y\": 1, \"t\": 1}", "line 2: \"img\" is not a path string"},
        {"{\"img\": \"%s\", \"t\": 1}", "line 2: no \"y;label;cls\" key (an integer wanted)"},
        {"{\"img\": \"%s\", \"y\": 1, \"t\": 1, \"y\": 2}", "line 2: \"y\": duplicate key"},
        {"{\"img\": \"%s\", \"y\": 99999999999999999999, \"t\": 1}", "line 2: \"y\" is outside the 64-bit integer range"},
        {"[\"%s\"]", "line 2: a JSON object expected"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        int n = snprintf(text, sizeof text, "{\"img\": \"%s\", \"y\": 0, \"t\": 0}\n", d->rel[0]);
        snprintf(text + n, sizeof text - (size_t)n, bad[k].row, d->rel[1]);
        put(d, "bad.jsonl", text, path, sizeof path);
        CHECK_EQ(create_fails(path, SCHEMA, err, sizeof err), SL_EPARSE);
        CHECK_STR_CONTAINS(err, "bad.jsonl: ");
        CHECK_STR_CONTAINS(err, bad[k].why);
    }
    free(d);
}

TEST(csv_tables_refused_with_line_and_column) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 1, 0, 48, 64);
    char path[512], err[512], text[1024];
    static const struct {
        const char *text, *why;
        int rc;
    } bad[] = {
        {"img,y\n%s,1\n", "line 1: the header names no column for \"t\"", SL_EPARSE},
        {"img,y,t\n%s,1,2\n%s,x,2\n", "line 3: \"y\" is not a 64-bit integer", SL_EPARSE},
        {"img,y,t\n%s,1,2\n%s,1,2.5.1\n", "line 3: \"t\" is not a number", SL_EPARSE},
        {"img,y,t\n%s,1,2\n%s,1\n", "line 3: 2 fields, the header has 3", SL_EPARSE},
        {"img,y,t\n%s,1,2\n,1,2\n", "line 3: \"img\" an empty path", SL_EPARSE},
        {"img,y,t\n\"%s,1,2\n", "line 2: quoted field never closed", SL_EPARSE},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        snprintf(text, sizeof text, bad[k].text, d->rel[0], d->rel[0]);
        put(d, "bad.csv", text, path, sizeof path);
        CHECK_EQ(create_fails(path, SCHEMA, err, sizeof err), bad[k].rc);
        CHECK_STR_CONTAINS(err, "bad.csv: ");
        CHECK_STR_CONTAINS(err, bad[k].why);
    }
    put(d, "seq.csv", "s\na.jpg\n", path, sizeof path);
    CHECK_EQ(create_fails(path, "{\"s\": {\"kind\": \"sequence\", \"of\": {\"kind\": \"image\"}}}", err, sizeof err),
             SL_EINVAL);
    CHECK_STR_CONTAINS(err, "a .csv cell holds one value (use .jsonl)");
    free(d);
}

/* Line ends: a .jsonl with CR-only line ends (old Mac files, some
 * exports) is the same table as with LF and CRLF, as the CSV reader
 * takes it; line numbers count the CRs. */
TEST(jsonl_with_cr_only_line_ends) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 11, 1, 48, 96);
    char jsonl[512], csv[512], cr[512], err[512];
    tables(d, jsonl, csv, sizeof jsonl);
    char *text = fx_read_text(jsonl);
    for (char *p = text; *p; p++)
        if (*p == '\n') *p = '\r';
    put(d, "cr.jsonl", text, cr, sizeof cr);
    sl_config a, b;
    cfg_for(&a, jsonl, SCHEMA, 2);
    cfg_for(&b, cr, SCHEMA, 2);
    uint64_t na, nb;
    CHECK_EQ(fx_epoch_sum(&b, &nb), fx_epoch_sum(&a, &na));
    CHECK(na == 11 && nb == 11); /* 12 rows, one a corrupt file */
    /* the path,label manifest reader too */
    put(d, "pl.jsonl", "{\"path\": \"a.jpg\", \"label\": 1}\r\r{\"path\": \"b.jpg\", \"label\": x}\r", cr, sizeof cr);
    sl_config c;
    cfg_for(&c, cr, NULL, 1);
    CHECK_EQ(fx_create_fails(&c, err, sizeof err), SL_EPARSE);
    CHECK_STR_CONTAINS(err, "line 3:");
    free(text);
    free(d);
}

/* Numbers a target cannot hold: past a double (1e400, which strtod makes
 * an infinity) is an index error naming the line, as the CSV reader
 * refuses a non-finite cell; past float32 (3.4e39, finite as a double) is
 * an error record naming the number, from .jsonl and .csv alike, never an
 * infinity in the batch. */
TEST(target_numbers_outside_their_range) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 4, 0, 48, 64);
    char path[512], err[512], text[2048];
    int n = 0;
    for (uint32_t k = 0; k < 4; k++)
        n += snprintf(text + n, sizeof text - (size_t)n, "{\"img\": \"%s\", \"y\": 0, \"t\": %s}\n", d->rel[k],
                      k == 2 ? "1e400" : "1.5");
    put(d, "huge.jsonl", text, path, sizeof path);
    CHECK_EQ(create_fails(path, SCHEMA, err, sizeof err), SL_EPARSE);
    CHECK_STR_CONTAINS(err, "huge.jsonl: line 3: \"t\" holds a number beyond a double's range");
    const char *over[] = {"-3.4e39", "3.5e38"};
    for (int f = 0; f < 2; f++) {
        n = 0;
        for (uint32_t k = 0; k < 4; k++)
            n += snprintf(text + n, sizeof text - (size_t)n, "{\"img\": \"%s\", \"y\": 0, \"t\": %s}\n", d->rel[k],
                          k == 1 ? over[f] : "3.4e38");
        put(d, "over.jsonl", text, path, sizeof path);
        n = snprintf(text, sizeof text, "img,y,t\n");
        for (uint32_t k = 0; k < 4; k++)
            n += snprintf(text + n, sizeof text - (size_t)n, "%s,0,%s\n", d->rel[k], k == 1 ? over[f] : "3.4e38");
        char csv[512];
        put(d, "over.csv", text, csv, sizeof csv);
        const char *src[] = {path, csv};
        for (int s = 0; s < 2; s++) {
            sl_config c;
            cfg_for(&c, src[s], SCHEMA, 2);
            c.shuffle = 0;
            c.max_error_rate = 1;
            sl_loader *ld = fx_open(&c);
            sl_batch *b;
            CHECK_OK(sl_loader_next(ld, &b));
            CHECK_EQ(sl_batch_len(b), 3);
            sl_field t;
            CHECK_OK(sl_batch_find(b, "t", &t));
            for (uint32_t i = 0; i < 3; i++) CHECK(((const float *)t.data)[i] == 3.4e38f);
            sl_loader_release(ld, b);
            sl_error_record e;
            CHECK_EQ(sl_loader_errors(ld, 0, &e, 1), 1);
            CHECK_EQ(e.index, 1);
            CHECK_EQ(e.code, SL_EINVAL);
            CHECK_STR_CONTAINS(e.reason, "target number 0 is ");
            CHECK_STR_CONTAINS(e.reason, "outside float32's range");
            sl_loader_destroy(ld);
        }
    }
    free(d);
}

/* An index that outgrows the budget says how large it was and the budget,
 * and how far through the file it got. */
TEST(index_over_budget_states_the_sizes) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 1, 0, 48, 64);
    char path[512], err[512];
    size_t cap = 40000 * 64;
    char *text = malloc(cap);
    size_t n = 0;
    for (int k = 0; k < 40000; k++)
        n += (size_t)snprintf(text + n, cap - n, "{\"img\": \"%s\", \"y\": %d, \"t\": 1}\n", d->rel[0], k);
    put(d, "big.jsonl", text, path, sizeof path);
    sl_config c;
    cfg_for(&c, path, SCHEMA, 1);
    c.budget = 2 << 20;
    CHECK_EQ(fx_create_fails(&c, err, sizeof err), SL_EBUDGET);
    CHECK_STR_CONTAINS(err, "indexing needs more memory than the budget leaves: the index holds ");
    CHECK_STR_CONTAINS(err, " of a 2.0 MiB budget, ");
    CHECK_STR_CONTAINS(err, "% through: about ");
    free(text);
    free(d);
}

TEST(alloc_failure_at_every_allocation) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 40, 0, 32, 40);
    char jsonl[512], csv[512];
    tables(d, jsonl, csv, sizeof jsonl);
    sl__colreq req[3] = {{"img", SL__VAL_FILE, 0}, {"y", SL__VAL_INT, 0}, {"t", SL__VAL_NUMBERS, 0}};
    fail_each_alloc_cols(jsonl, 1, req, 3, 40);
    fail_each_alloc_cols(csv, 1, req, 3, 40);
    free(d);
}
