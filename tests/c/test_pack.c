/*
 * sluice pack (cli/pack.c): shards written from a folder, a manifest and a
 * schema table load back to the same batches as their source (checksums),
 * for any worker count of the writer the bytes are the same, shards split
 * at --samples-per-shard and --shard-size, --max-side bounds the re-encoded
 * images' sides and leaves smaller ones byte for byte, and what has no tar
 * form is refused.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "files.h"
#include "fixture.h"
#include "sluice.h"

static void cfg_for(sl_config *c, const char *source, const char *fields, int preset) {
    sl_config_init(c);
    c->source = source;
    c->fields = fields;
    c->batch_size = 5;
    c->size = 32;
    c->preset = preset;
    c->workers = 3;
    c->budget = 64 << 20;
    c->seed = 9;
    c->flags = SL_FLAG_CHECKSUM;
}

/* sluice pack ARGS; fails the case unless it exits 0. */
static void pack(const char *args) {
    char out[4096], cmd[2048];
    snprintf(cmd, sizeof cmd, "pack %s 2>&1", args);
    if (fx_sluice(cmd, out, sizeof out) != 0) SL_FAIL("sluice %s: %s", cmd, out);
}

static long file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static int same_file(const char *a, const char *b) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

TEST(folder_packs_to_the_same_batches_and_bytes_for_any_writer) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 21, 2, 48, 200);
    char out[256], args[1024], pattern[400], a[400], b[400];
    fx_empty_dir(out, sizeof out);
    snprintf(args, sizeof args, "%s %s/one --samples-per-shard 5 --workers 1", d->root, out);
    pack(args);
    snprintf(args, sizeof args, "%s %s/four --samples-per-shard 5 --workers 4", d->root, out);
    pack(args);
    for (int s = 0; s < 5; s++) { /* 23 samples: 5 shards, the last of 3 */
        snprintf(a, sizeof a, "%s/one/shard-%06d.tar", out, s);
        snprintf(b, sizeof b, "%s/four/shard-%06d.tar", out, s);
        CHECK(same_file(a, b));
    }
    snprintf(a, sizeof a, "%s/one/shard-000005.tar", out);
    CHECK_EQ(file_size(a), -1);
    snprintf(pattern, sizeof pattern, "%s/one/shard-{000000..000004}.tar", out);
    for (int preset = SL_PRESET_TRAIN; preset <= SL_PRESET_VAL; preset++) {
        sl_config src, tar;
        cfg_for(&src, d->root, NULL, preset);
        cfg_for(&tar, pattern, NULL, preset);
        uint64_t ns, nt;
        CHECK_EQ(fx_epoch_sum(&tar, &nt), fx_epoch_sum(&src, &ns));
        CHECK(ns == 21 && nt == 21); /* the 2 corrupt files copied as they are: error records in both */
    }
    free(d);
}

TEST(shard_size_closes_shards) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 12, 0, 100, 300);
    char out[256], args[1024], path[400];
    fx_empty_dir(out, sizeof out);
    snprintf(args, sizeof args, "%s %s --shard-size 40K --name t", d->root, out);
    pack(args);
    int shards = 0;
    for (;; shards++) {
        snprintf(path, sizeof path, "%s/t-%06d.tar", out, shards);
        long n = file_size(path);
        if (n < 0) break;
        /* samples up to 40K, the trailer (1K) and the end blocks; over only for a lone large sample */
        CHECK(n <= 40 * 1024 + 2048 || n < 3 * 512 + 2048 + 160 * 1024);
    }
    CHECK(shards >= 2);
    free(d);
}

/* The longer side of the JPEG member bytes. */
static uint32_t side_of(const uint8_t *p, size_t n) {
    sl_image_info info;
    CHECK_OK(sl_image_probe(p, n, &info));
    return info.width > info.height ? info.width : info.height;
}

TEST(max_side_bounds_reencoded_images) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 16, 1, 64, 400);
    char out[256], args[1024], pattern[400];
    fx_empty_dir(out, sizeof out);
    snprintf(args, sizeof args, "%s %s --max-side 160 --quality 85", d->root, out);
    pack(args);
    snprintf(pattern, sizeof pattern, "%s/shard-{000000..000000}.tar", out);
    sl_config c;
    cfg_for(&c, pattern, NULL, SL_PRESET_VAL);
    sl_source *s;
    char err[512];
    if (sl_source_open(&c, &s, err, sizeof err)) SL_FAIL("open: %s", err);
    CHECK_EQ(sl_source_len(s), 17);
    int smaller = 0, reencoded = 0;
    for (uint64_t i = 0; i < 17; i++) {
        if (d->kind[i] != FX_GOOD) continue;
        uint64_t size;
        char name[512];
        CHECK_OK(sl_source_file(s, i, 0, 0, &size, name, sizeof name, err, sizeof err));
        CHECK_STR_CONTAINS(name, ".jpg");
        uint8_t *buf = malloc(size);
        CHECK_EQ(sl_source_read(s, i, 0, 0, buf, size, err, sizeof err), (int64_t)size);
        uint32_t side = side_of(buf, size), orig = d->w[i] > d->h[i] ? d->w[i] : d->h[i];
        if (orig <= 160) { /* copied as it was */
            char path[600];
            snprintf(path, sizeof path, "%s/%s", d->root, d->rel[i]);
            CHECK_EQ(file_size(path), (long)size);
            smaller++;
        } else {
            CHECK_EQ(side, 160);
            reencoded++;
        }
        free(buf);
        sl_value v;
        CHECK_OK(sl_source_value(s, i, 1, &v));
        CHECK(v.type == SL_VALUE_INT && v.ival == d->label[i]);
    }
    CHECK(smaller > 0 && reencoded > 0);
    sl_source_close(s);
    free(d);
}

TEST(schema_table_packs_and_loads_back) {
    const char *dir = fx_demo_fields("--pairs 7 --scans 8");
    char out[300], args[1200], src[400], fields[400], pattern[400];
    snprintf(src, sizeof src, "%s/pairs.jsonl", dir);
    snprintf(fields, sizeof fields, "%s/pairs.fields.json", dir);
    snprintf(out, sizeof out, "%s/packed", dir);
    snprintf(args, sizeof args, "%s %s --fields %s --samples-per-shard 3", src, out, fields);
    pack(args);
    snprintf(pattern, sizeof pattern, "%s/shard-{000000..000002}.tar", out);
    char *schema = fx_read_text(fields);
    sl_config a, b;
    cfg_for(&a, src, schema, SL_PRESET_TRAIN);
    cfg_for(&b, pattern, schema, SL_PRESET_TRAIN);
    uint64_t na, nb;
    CHECK_EQ(fx_epoch_sum(&b, &nb), fx_epoch_sum(&a, &na));
    CHECK(na == 7 && nb == 7);
    /* a sequence has no tar form */
    char lidar[400], lf[400], text[4096];
    snprintf(lidar, sizeof lidar, "%s/lidar.jsonl", dir);
    snprintf(lf, sizeof lf, "%s/lidar.fields.json", dir);
    snprintf(args, sizeof args, "pack %s %s/l --fields %s 2>&1", lidar, dir, lf);
    CHECK_EQ(fx_sluice(args, text, sizeof text), 1);
    CHECK_STR_CONTAINS(text, "field \"lidar\" is a list of files: tar samples hold files and integers");
    free(schema);
}

TEST(missing_file_fails_the_pack) {
    char dir[256], m[400], args[1024], text[4096];
    fx_empty_dir(dir, sizeof dir);
    snprintf(m, sizeof m, "%s/m.csv", dir);
    fx_write(m, "nope.jpg,1\n", 11);
    snprintf(args, sizeof args, "pack %s %s/out 2>&1", m, dir);
    CHECK_EQ(fx_sluice(args, text, sizeof text), 1);
    CHECK_STR_CONTAINS(text, "no such file");
    snprintf(args, sizeof args, "pack %s 2>&1", m);
    CHECK_EQ(fx_sluice(args, text, sizeof text), 2);
    CHECK_STR_CONTAINS(text, "usage: sluice pack");
}

/* A pack that fails midway leaves no shard holding part of what it
 * should: the shard being written (NAME.tar.partial until it is complete)
 * is removed, and no NAME.tar of it appears. */
TEST(failed_pack_leaves_no_partial_shard) {
    char dir[256], m[400], args[1024], text[4096], path[400];
    fx_empty_dir(dir, sizeof dir);
    snprintf(m, sizeof m, "%s/m.csv", dir);
    FILE *f = fopen(m, "w");
    CHECK(f != NULL);
    for (int i = 0; i < 100; i++) {
        snprintf(path, sizeof path, "%s/%03d.jpg", dir, i);
        if (i != 80) fx_write(path, "not really a jpeg", 17); /* copied as they are */
        fprintf(f, "%03d.jpg,%d\n", i, i % 3);
    }
    fclose(f);
    snprintf(args, sizeof args, "pack %s %s/out --samples-per-shard 1000 2>&1", m, dir);
    CHECK_EQ(fx_sluice(args, text, sizeof text), 1);
    CHECK_STR_CONTAINS(text, "080.jpg");
    snprintf(path, sizeof path, "%s/out/shard-000000.tar", dir);
    CHECK_EQ(file_size(path), -1);
    snprintf(path, sizeof path, "%s/out/shard-000000.tar.partial", dir);
    CHECK_EQ(file_size(path), -1);
}

/* Field names whose members the loader could not tell apart (keys are
 * lowercased; a field finds KEY and KEY.EXT) are refused before anything
 * is written, naming both. */
TEST(pack_refuses_field_names_its_loader_refuses) {
    char dir[256], m[400], args[2048], text[4096], path[400];
    fx_empty_dir(dir, sizeof dir);
    snprintf(m, sizeof m, "%s/m.jsonl", dir);
    snprintf(path, sizeof path, "%s/x.bin", dir);
    fx_write(path, "bytes", 5);
    static const char *pairs[][2] = {{"a", "A"}, {"a", "a.b"}, {"A.b", "a"}};
    for (int i = 0; i < 3; i++) {
        char fields[400], jsonl[200];
        snprintf(jsonl, sizeof jsonl, "{\"%s\": \"x.bin\", \"%s\": \"x.bin\"}\n", pairs[i][0], pairs[i][1]);
        fx_write(m, jsonl, strlen(jsonl));
        snprintf(fields, sizeof fields, "%s/f%d.json", dir, i);
        snprintf(jsonl, sizeof jsonl, "{\"%s\": {\"kind\": \"array\"}, \"%s\": {\"kind\": \"array\"}}", pairs[i][0],
                 pairs[i][1]);
        fx_write(fields, jsonl, strlen(jsonl));
        snprintf(args, sizeof args, "pack %s %s/out%d --fields %s 2>&1", m, dir, i, fields);
        CHECK_EQ(fx_sluice(args, text, sizeof text), 2);
        CHECK_STR_CONTAINS(text, "cannot both be tar members");
        CHECK_STR_CONTAINS(text, pairs[i][0]);
        CHECK_STR_CONTAINS(text, pairs[i][1]);
        snprintf(path, sizeof path, "%s/out%d", dir, i);
        CHECK_EQ(file_size(path), -1); /* nothing written */
    }
}

/* The public sl_source contract: refusals and their codes. */
TEST(source_api_refusals) {
    char dir[256], m[400], err[512], buf[8];
    fx_empty_dir(dir, sizeof dir);
    snprintf(m, sizeof m, "%s/m.csv", dir);
    fx_write(m, "a.jpg,1\nmissing.jpg,2\n", 22);
    snprintf(buf, sizeof buf, "%s", "hello");
    char a[400];
    snprintf(a, sizeof a, "%s/a.jpg", dir);
    fx_write(a, "0123456789", 10);
    sl_config c;
    sl_config_init(&c);
    sl_source *s = NULL;
    CHECK_EQ(sl_source_open(NULL, &s, err, sizeof err), SL_EINVAL);
    c.source = m;
    c.struct_size = 3;
    CHECK_EQ(sl_source_open(&c, &s, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "sl_config_init");
    sl_config_init(&c);
    c.source = "/tmp/sl-no-such-dataset";
    CHECK_EQ(sl_source_open(&c, &s, err, sizeof err), SL_ENOENT);
    c.source = m;
    c.fields = "{\"x\": {\"kind\": \"nope\"}}";
    CHECK_EQ(sl_source_open(&c, &s, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "unknown kind");
    c.fields = NULL;
    c.budget = 64;
    CHECK_EQ(sl_source_open(&c, &s, err, sizeof err), SL_EBUDGET);
    c.budget = 1 << 20;
    CHECK_OK(sl_source_open(&c, &s, err, sizeof err));
    CHECK_EQ(sl_source_len(s), 2);
    CHECK_EQ(sl_source_num_values(s), 2);
    sl_value v;
    CHECK_EQ(sl_source_value(s, 0, 2, &v), SL_EINVAL);
    CHECK_EQ(sl_source_value(s, 2, 0, &v), SL_EINVAL);
    CHECK_OK(sl_source_value(s, 1, 1, &v));
    CHECK(v.type == SL_VALUE_INT && v.ival == 2 && !strcmp(v.name, "label") && v.kind == SL_KIND_LABEL);
    double d;
    CHECK_EQ(sl_source_numbers(s, 0, 0, 0, &d, 1), SL_EINVAL); /* a file has no numbers */
    CHECK_EQ(sl_source_numbers(s, 0, 1, 0, &d, 1), 1);
    CHECK(d == 1.0);
    uint64_t size;
    char name[512];
    CHECK_OK(sl_source_file(s, 0, 0, 0, &size, name, sizeof name, err, sizeof err));
    CHECK(size == 10 && !strcmp(name, a));
    CHECK_EQ(sl_source_file(s, 0, 1, 0, &size, name, sizeof name, err, sizeof err), SL_EINVAL); /* a label */
    CHECK_EQ(sl_source_read(s, 0, 0, 0, buf, sizeof buf, err, sizeof err), SL_EOVERFLOW);
    CHECK_STR_CONTAINS(err, "10 bytes do not fit a buffer of 8");
    CHECK_EQ(sl_source_read(s, 1, 0, 0, buf, sizeof buf, err, sizeof err), SL_ENOENT);
    CHECK_STR_CONTAINS(err, "sample 1, image (");
    CHECK_STR_CONTAINS(err, "/missing.jpg): no such file");
    char big[16];
    CHECK_EQ(sl_source_read(s, 0, 0, 0, big, sizeof big, err, sizeof err), 10);
    CHECK(memcmp(big, "0123456789", 10) == 0);
    sl_source_close(s);
    sl_source_close(NULL);
}
