/* ctest: tsan */
/*
 * Tar shards as a source (src/source/shards.c): the same images as a
 * folder, packed into shards in the folder's order, give the same batches
 * (bytes and labels: equal checksums) for 1 and 8 workers, through a
 * .tar file, a brace pattern and a folder of shards; resume mid-epoch;
 * schemas find members by key (a field "x" finds "x.npy"); a member over
 * 4 GiB keeps its size; shards past a quarter of the descriptor limit are
 * opened per read; hostile shards are index errors naming the shard, or
 * error records for the sample (a member that is not an image).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"
#include "fixture.h"
#include "shards_fixture.h"
#include "source/shards.h"
#include "source/tar.h"
#include "source/wds.h"
#include "sluice.h"
#include "tarw.h"

static void cfg_for(sl_config *c, const char *source, uint32_t workers) { sf_cfg(c, source, workers); }

/* The code and message sl_loader_create gives for source (it must fail). */
static int create_fails(const char *source, const char *fields, char *err, size_t errlen) {
    sl_config c;
    cfg_for(&c, source, 1);
    c.fields = fields;
    return fx_create_fails(&c, err, errlen);
}

static fx_dataset *dataset_and_shards(char *shards, size_t len, int nshards, uint32_t corrupt) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 23, corrupt, 48, 200);
    fx_empty_dir(shards, len);
    sf_write_shards(d, shards, nshards);
    return d;
}

TEST(shards_equal_the_folder_for_1_and_8_workers) {
    char dir[256], pattern[300];
    fx_dataset *d = dataset_and_shards(dir, sizeof dir, 3, 3);
    snprintf(pattern, sizeof pattern, "%s/s-{000000..000002}.tar", dir);
    for (int preset = SL_PRESET_TRAIN; preset <= SL_PRESET_VAL; preset++) {
        sl_config folder, tar1, tar8, bydir;
        cfg_for(&folder, d->root, 2);
        cfg_for(&tar1, pattern, 1);
        cfg_for(&tar8, pattern, 8);
        cfg_for(&bydir, dir, 3);
        folder.preset = tar1.preset = tar8.preset = bydir.preset = preset;
        uint64_t n0, n1, n8, nd;
        uint64_t want = fx_epoch_sum(&folder, &n0);
        CHECK_EQ(fx_epoch_sum(&tar1, &n1), want);
        CHECK_EQ(fx_epoch_sum(&tar8, &n8), want);
        CHECK_EQ(fx_epoch_sum(&bydir, &nd), want);
        CHECK(n0 == 23 && n1 == 23 && n8 == 23 && nd == 23); /* 3 corrupt ones skipped */
    }
    /* a sample's path names its shard and member; the corrupt ones are error
     * records in both */
    sl_config c;
    cfg_for(&c, pattern, 2);
    sl_loader *ld;
    char err[512], path[512];
    if (sl_loader_create(&c, &ld, err, sizeof err)) SL_FAIL("create: %s", err);
    CHECK(sl_loader_sample_path(ld, 20, path, sizeof path) != NULL);
    CHECK_STR_CONTAINS(path, "/s-000002.tar:k00020");
    sl_batch *b;
    while (sl_loader_next(ld, &b) == 0) sl_loader_release(ld, b);
    sl_stats st;
    CHECK_OK(sl_loader_stats(ld, &st));
    CHECK_EQ(st.errors, 3);
    sl_loader_destroy(ld);
    free(d);
}

TEST(one_tar_file_and_resume) {
    char dir[256], one[300];
    fx_dataset *d = dataset_and_shards(dir, sizeof dir, 1, 0);
    snprintf(one, sizeof one, "%s/s-000000.tar", dir);
    sl_config folder, tar, tar4;
    cfg_for(&folder, d->root, 2);
    cfg_for(&tar, one, 1);
    cfg_for(&tar4, one, 4);
    CHECK_EQ(fx_epoch_sum(&tar, NULL), fx_epoch_sum(&folder, NULL));
    fx_check_resume(&tar4, &tar, 2);
    free(d);
}

/* A minimal .npy of float32 [rows, cols]: a v1 header of 128 bytes. */
static void npy(buf *out, uint32_t rows, uint32_t cols, float first) {
    char h[118]; /* the dict, spaces, '\n' */
    int n = snprintf(h, sizeof h, "{'descr': '<f4', 'fortran_order': False, 'shape': (%u, %u), }", rows, cols);
    CHECK(n > 0 && (size_t)n < sizeof h);
    memset(h + n, ' ', sizeof h - 1 - (size_t)n);
    h[sizeof h - 1] = '\n';
    b_put(out, "\x93NUMPY\x01\x00\x76\x00", 10);
    b_put(out, h, sizeof h);
    for (uint32_t i = 0; i < rows * cols; i++) {
        float v = first + (float)i;
        b_put(out, &v, 4);
    }
}

TEST(schema_finds_members_by_key) {
    char dir[256], path[300];
    fx_empty_dir(dir, sizeof dir);
    buf b = {0};
    for (int k = 0; k < 6; k++) {
        char name[64];
        buf a = {0}, s = {0};
        npy(&a, 6, 8, (float)(100 * k));
        npy(&s, 6, 8, (float)(100 * k) + 1);
        snprintf(name, sizeof name, "p/%03d.blur.npy", k);
        member_n(&b, name, a.p, a.n);
        snprintf(name, sizeof name, "p/%03d.sharp.npy", k);
        member_n(&b, name, s.p, s.n);
        snprintf(name, sizeof name, "p/%03d.Label", k); /* keys compare lowercased */
        member(&b, name, k % 2 ? " 7 \n" : "-3");
        free(a.p), free(s.p);
    }
    end(&b);
    snprintf(path, sizeof path, "%s/pairs.tar", dir);
    b_write(&b, path);
    free(b.p);
    sl_config c;
    cfg_for(&c, path, 2);
    c.batch_size = 6;
    c.shuffle = 0;
    c.fields = "{\"blur\": {\"kind\": \"array\", \"layout\": \"HW\", \"crop\": [3, 4], \"crop_group\": \"g\"},"
               " \"sharp\": {\"kind\": \"array\", \"layout\": \"HW\", \"crop\": [3, 4], \"crop_group\": \"g\"},"
               " \"y\": {\"kind\": \"label\", \"key\": \"label\"}}";
    sl_loader *ld;
    char err[512];
    if (sl_loader_create(&c, &ld, err, sizeof err)) SL_FAIL("create: %s", err);
    sl_batch *bt;
    CHECK_OK(sl_loader_next(ld, &bt));
    sl_field x, y, lab;
    CHECK_OK(sl_batch_find(bt, "blur", &x));
    CHECK_OK(sl_batch_find(bt, "sharp", &y));
    CHECK_OK(sl_batch_find(bt, "y", &lab));
    CHECK(x.shape[1] == 3 && x.shape[2] == 4);
    for (int k = 0; k < 6; k++) {
        const float *xb = (const float *)x.data + k * 12, *yb = (const float *)y.data + k * 12;
        CHECK(xb[0] >= 100.0f * k && xb[0] < 100.0f * k + 48);
        for (int e = 0; e < 12; e++) CHECK(yb[e] == xb[e] + 1.0f);
        CHECK_EQ(((const int64_t *)lab.data)[k], k % 2 ? 7 : -3);
    }
    sl_loader_release(ld, bt);
    char p[512];
    CHECK(sl_loader_sample_path(ld, 4, p, sizeof p) != NULL);
    CHECK_STR_CONTAINS(p, "pairs.tar:p/004");
    sl_loader_destroy(ld);
    /* a sequence has no tar form */
    char why[512];
    CHECK_EQ(create_fails(path, "{\"s\": {\"kind\": \"sequence\", \"of\": {\"kind\": \"array\"}}}", why, sizeof why),
             SL_EINVAL);
    CHECK_STR_CONTAINS(why, "needs a .jsonl manifest");
}

/* A tar of one member of 2^32 + 5 bytes (sparse) and its label, then a
 * small sample. */
TEST(member_over_4_gib_keeps_its_size) {
    char dir[256], path[300];
    fx_empty_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/big.tar", dir);
    uint64_t size = ((uint64_t)1 << 32) + 5, data_end = 512 + (size + 511) / 512 * 512;
    buf h = {0}, t = {0};
    header(&h, "a.jpg", '0', size, NULL);
    member(&t, "a.cls", "1");
    unsigned long len;
    unsigned char *jpg = fx_jpeg_bytes(40, 30, 2, 0, 85, &len);
    member_n(&t, "b.jpg", jpg, len); /* and a good sample: an epoch of failures only stops a loader */
    member(&t, "b.cls", "2");
    free(jpg);
    end(&t);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK_EQ(pwrite(fd, h.p, h.n, 0), (ssize_t)h.n);
    CHECK_EQ(pwrite(fd, t.p, t.n, (off_t)data_end), (ssize_t)t.n);
    close(fd);
    free(h.p), free(t.p);
    sl_config c;
    cfg_for(&c, path, 1);
    c.batch_size = 1;
    sl_loader *ld;
    char err[512];
    if (sl_loader_create(&c, &ld, err, sizeof err)) SL_FAIL("create: %s", err);
    sl_batch *b;
    for (int k = 0; k < 2; k++)
        if (sl_loader_next(ld, &b) == 0) sl_loader_release(ld, b);
    sl_error_record e;
    CHECK_EQ(sl_loader_errors(ld, 0, &e, 1), 1);
    CHECK_STR_CONTAINS(e.reason, "file is 4294967301 bytes, over the max_bytes limit");
    sl_loader_destroy(ld);
}

/* With a soft limit of 64 descriptors, 16 of 40 shards stay open; the rest
 * are opened per read, and every sample loads. */
TEST(shards_past_the_fd_limit_open_per_read) {
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 40, 0, 32, 48);
    char dir[256], pattern[300];
    fx_empty_dir(dir, sizeof dir);
    sf_write_shards(d, dir, 40);
    snprintf(pattern, sizeof pattern, "%s/s-{000000..000039}.tar", dir);
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    rl.rlim_cur = 64;
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    sl__budget bg;
    CHECK_OK(sl__budget_init(&bg, 16 << 20));
    sl__source *s;
    char err[512];
    if (sl__source_open(&bg, pattern, 1, &s, err, sizeof err)) SL_FAIL("open: %s", err);
    CHECK_EQ(sl__shards_open_fds(s), 16);
    sl__source_close(s);
    CHECK_EQ(atomic_load(&bg.used), 0);
    sl__budget_fini(&bg);
    sl_config folder, tar;
    cfg_for(&folder, d->root, 2);
    cfg_for(&tar, pattern, 4);
    uint64_t n;
    CHECK_EQ(fx_epoch_sum(&tar, &n), fx_epoch_sum(&folder, NULL));
    CHECK_EQ(n, 40);
    free(d);
}

/* ---- hostile shards ---------------------------------------------------------------- */

/* One shard of two good samples, then what add() appends; the index must
 * fail with code and a message holding why (and the shard's name). */
static void refused(void (*add)(buf *), int code, const char *why) {
    static char dir[256];
    char path[300], err[512];
    if (!dir[0]) fx_empty_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/x.tar", dir);
    buf b = {0};
    member(&b, "a.jpg", "jpeg bytes");
    member(&b, "a.cls", "1");
    add(&b);
    b_write(&b, path);
    free(b.p);
    CHECK_EQ(create_fails(path, NULL, err, sizeof err), code);
    CHECK_STR_CONTAINS(err, why);
    CHECK_STR_CONTAINS(err, "x.tar");
}

static void bad_checksum(buf *b) {
    member(b, "b.jpg", "x");
    b->p[b->n - 1024 + 148] ^= 1;
    end(b);
}
static void truncated(buf *b) {
    header(b, "b.jpg", '0', 5000, NULL);
    b_put(b, "short", 5);
}
static void dotdot(buf *b) {
    member(b, "../b.jpg", "x");
    end(b);
}
static void huge(buf *b) {
    header(b, "b.jpg", '0', 0, (const uint8_t *)"\x80\x00\x00\x00\x7f\xff\xff\xff\xff\xff\xff\xff");
    end(b);
}
static void swallowing(buf *b) { /* a size that swallows the next header: b.cls is data */
    header(b, "b.jpg", '0', 1024, NULL);
    member(b, "b.cls", "2");
    end(b);
}
static void no_label(buf *b) {
    member(b, "b.jpg", "x");
    end(b);
}
static void bad_label(buf *b) {
    member(b, "b.jpg", "x");
    member(b, "b.cls", "dog");
    end(b);
}
static void ambiguous(buf *b) {
    member(b, "b.jpg", "x");
    member(b, "b.jpeg", "x");
    member(b, "b.cls.txt", "1");
    member(b, "b.cls.bak", "1");
    end(b);
}
static void comes_back(buf *b) {
    member(b, "b.jpg", "x");
    member(b, "b.cls", "1");
    member(b, "a.txt", "again");
    end(b);
}

TEST(hostile_shards_are_index_errors) {
    refused(bad_checksum, SL_ECORRUPT, "checksum");
    refused(truncated, SL_ECORRUPT, "declares 5000 bytes, past the end");
    refused(dotdot, SL_ECORRUPT, "..");
    refused(huge, SL_ECORRUPT, "declares 9223372036854775807 bytes");
    refused(swallowing, SL_EPARSE, "sample 'b' has no member for \"cls;label\" (its members: jpg)");
    refused(no_label, SL_EPARSE, "no member for \"cls;label\"");
    refused(bad_label, SL_EPARSE, "'b.cls' is not an integer label");
    refused(ambiguous, SL_EPARSE, "sample 'b' has more than one member for \"cls;label\"");
    refused(comes_back, SL_ECORRUPT, "contiguous");
    char err[512], pattern[300];
    snprintf(pattern, sizeof pattern, "/tmp/sl-no-such-folder/none-{0..2}.tar");
    CHECK_EQ(create_fails(pattern, NULL, err, sizeof err), SL_ENOENT);
    CHECK_STR_CONTAINS(err, "none-0.tar");
    snprintf(pattern, sizeof pattern, "/tmp/sl-no-such-folder/x-{0..b}.tar");
    CHECK_EQ(create_fails(pattern, NULL, err, sizeof err), SL_EPARSE);
}

/* ---- nothing silently shorter -------------------------------------------------- */

/* A shard cut on a block boundary between samples (an interrupted write or
 * copy) lacks tar's end-of-archive block: refused at create, naming it,
 * where tar and Python's tarfile read a smaller archive. */
static void cut_between_samples(buf *b) {
    member(b, "b.jpg", "x");
    member(b, "b.cls", "2");
}
/* The trailer sluice pack writes, with these numbers. */
static void trailer(buf *b, uint64_t samples, uint64_t bytes) {
    char line[128];
    snprintf(line, sizeof line, "{\"sluice_shard\": 1, \"samples\": %llu, \"bytes\": %llu}\n",
             (unsigned long long)samples, (unsigned long long)bytes);
    member(b, SL_WDS_TRAILER, line);
}
static void trailer_says_more(buf *b) { /* a sample cut out and the shard mended: the trailer still counts it */
    member(b, "b.jpg", "x");
    member(b, "b.cls", "2");
    trailer(b, 3, b->n);
    end(b);
}
static void trailer_wrong_size(buf *b) {
    member(b, "b.jpg", "x");
    member(b, "b.cls", "2");
    trailer(b, 2, b->n - 512);
    end(b);
}
static void after_trailer(buf *b) { /* appended to (tar -r) after pack finished it */
    trailer(b, 1, b->n);
    member(b, "b.jpg", "x");
    member(b, "b.cls", "2");
    end(b);
}
static void trailer_garbled(buf *b) {
    member(b, SL_WDS_TRAILER, "{\"samples\": \"one\"}");
    end(b);
}

TEST(shards_cut_short_or_mended_are_refused) {
    refused(cut_between_samples, SL_ECORRUPT, "without tar's end-of-archive block: the shard was cut short");
    refused(trailer_says_more, SL_ECORRUPT, "trailer says 3 samples in 4096 bytes, the shard holds 2 samples in 4096");
    refused(trailer_wrong_size, SL_ECORRUPT, "says 2 samples in 3584 bytes, the shard holds 2 samples in 4096 bytes");
    refused(after_trailer, SL_ECORRUPT, "comes after the shard trailer");
    refused(trailer_garbled, SL_ECORRUPT, "is not {\"samples\": N, \"bytes\": B}");
}

/* sluice pack's shards carry the trailer; one of a set that lost its end
 * (the cut mended with zero blocks, so the archive ends cleanly) is
 * refused by the trailer the others have; a .partial left by a pack that
 * never finished makes its folder refused; a matching trailer loads, and
 * WebDataset's rule skips it (a top-level __NAME__ is metadata). */
TEST(packed_shards_are_checked_by_their_trailer) {
    char dir[256], pattern[400], path[400], err[512];
    fx_dataset *d = calloc(1, sizeof *d);
    fx_simple(d, 12, 0, 48, 64);
    fx_empty_dir(dir, sizeof dir);
    char args[1024], out[4096];
    snprintf(args, sizeof args, "pack %s %s --samples-per-shard 4 --workers 2 2>&1", d->root, dir);
    if (fx_sluice(args, out, sizeof out)) SL_FAIL("%s: %s", args, out);
    snprintf(pattern, sizeof pattern, "%s/shard-{000000..000002}.tar", dir);
    sl_config c;
    cfg_for(&c, pattern, 1);
    uint64_t n;
    fx_epoch_sum(&c, &n);
    CHECK_EQ(n, 12);
    /* the last member of each shard is the trailer, and it matches */
    snprintf(path, sizeof path, "%s/shard-000001.tar", dir);
    buf b = {0};
    sf_read_all(path, &b);
    CHECK(b.n > 3 * 512);
    size_t last = b.n - 1024 - 1024; /* trailer header: before its one data block and the end blocks */
    CHECK(strcmp((const char *)b.p + last, SL_WDS_TRAILER) == 0);
    CHECK_STR_CONTAINS((const char *)b.p + last + 512, "\"samples\": 4");
    /* mended: the shard's last sample cut off and the file ended with zero blocks */
    size_t cut = 0;
    for (size_t off = 0; off + 512 <= last; off += 512)
        if (!memcmp(b.p + off + 257, "ustar", 5) && strstr((const char *)b.p + off, ".jpg")) cut = off;
    CHECK(cut > 0);
    memset(b.p + cut, 0, b.n - cut);
    b_write(&b, path);
    CHECK_EQ(create_fails(pattern, NULL, err, sizeof err), SL_ECORRUPT);
    CHECK_STR_CONTAINS(err, "shard-000001.tar has no shard trailer");
    CHECK_STR_CONTAINS(err, "while 2 other shards of the set have one");
    /* cut on a block boundary (no zero blocks at all) */
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK_EQ(fwrite(b.p, 1, cut, f), cut);
    fclose(f);
    CHECK_EQ(create_fails(pattern, NULL, err, sizeof err), SL_ECORRUPT);
    CHECK_STR_CONTAINS(err, "shard-000001.tar: the file stops at byte");
    /* a folder an unfinished pack left: its .partial is named */
    unlink(path);
    snprintf(path, sizeof path, "%s/shard-000001.tar.partial", dir);
    b.n = cut;
    b_write(&b, path);
    CHECK_EQ(create_fails(dir, NULL, err, sizeof err), SL_ECORRUPT);
    CHECK_STR_CONTAINS(err, "shard-000001.tar.partial is a shard `sluice pack` was still writing");
    free(b.p);
    free(d);
}

/* A folder of shards with subfolders that hold no images (logs,
 * checkpoints) is still shards; one whose subfolders hold images could be
 * either dataset: refused, naming both. */
TEST(shard_folder_with_subfolders) {
    char dir[256], path[400], err[512];
    fx_dataset *d = dataset_and_shards(dir, sizeof dir, 2, 0);
    snprintf(path, sizeof path, "%s/logs", dir);
    CHECK_OK(mkdir(path, 0755));
    snprintf(path, sizeof path, "%s/logs/run.txt", dir);
    fx_write(path, "loss 1.0\n", 9);
    snprintf(path, sizeof path, "%s/.cache", dir);
    CHECK_OK(mkdir(path, 0755));
    sl_config c;
    cfg_for(&c, dir, 1);
    uint64_t n;
    fx_epoch_sum(&c, &n);
    CHECK_EQ(n, 23);
    /* a class folder that is a link to a folder of images: the same */
    char cls[300], link[400];
    snprintf(cls, sizeof cls, "%s-cls", dir);
    CHECK_OK(mkdir(cls, 0755));
    fx_track(cls);
    snprintf(path, sizeof path, "%s/dog.png", cls);
    fx_write(path, "x", 1);
    snprintf(link, sizeof link, "%s/dogs", dir);
    CHECK_OK(symlink(cls, link));
    CHECK_EQ(create_fails(dir, NULL, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "(dogs/ has dog.png)");
    unlink(link);
    snprintf(path, sizeof path, "%s/logs/deep", dir);
    CHECK_OK(mkdir(path, 0755));
    snprintf(path, sizeof path, "%s/logs/deep/cat.JPG", dir);
    fx_write(path, "x", 1);
    CHECK_EQ(create_fails(dir, NULL, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "holds .tar shards and also folders with images (logs/ has cat.JPG)");
    CHECK_STR_CONTAINS(err, "brace pattern");
    free(d);
}

TEST(members_that_are_not_images_are_error_records) {
    char dir[256], path[300];
    fx_empty_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/x.tar", dir);
    unsigned long len;
    unsigned char *jpg = fx_jpeg_bytes(64, 48, 3, 0, 85, &len);
    buf b = {0};
    member_n(&b, "a.jpg", jpg, len);
    member(&b, "a.cls", "0");
    member(&b, "b.png", "not a png");
    member(&b, "b.cls", "1");
    member_n(&b, "c.webp", jpg, len / 2); /* a truncated JPEG under a .webp key: found by content */
    member(&b, "c.cls", "2");
    end(&b);
    b_write(&b, path);
    free(b.p);
    free(jpg);
    sl_config c;
    cfg_for(&c, path, 2);
    c.shuffle = 0;
    sl_loader *ld;
    char err[512];
    if (sl_loader_create(&c, &ld, err, sizeof err)) SL_FAIL("create: %s", err);
    sl_batch *bt;
    CHECK_OK(sl_loader_next(ld, &bt));
    CHECK_EQ(sl_batch_len(bt), 1);
    sl_loader_release(ld, bt);
    sl_error_record e[2];
    CHECK_EQ(sl_loader_errors(ld, 0, e, 2), 2);
    CHECK(e[0].index == 1 && e[0].code == SL_EFORMAT);
    CHECK(e[1].index == 2 && e[1].code == SL_ECORRUPT);
    sl_loader_destroy(ld);
}

/* A member name of the longest length allowed (4,096 bytes) in an error
 * record: its path is whole in a buffer of SL_PATH_MAX bytes (the shard,
 * ':', the name), in the C API and in `sluice bench --json` (it was "?":
 * the callers' buffers were 4,096 bytes). */
TEST(error_record_path_of_a_4096_byte_member_name) {
    char dir[256], path[300], err[512];
    fx_empty_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/x.tar", dir);
    unsigned long len;
    unsigned char *jpg = fx_jpeg_bytes(64, 48, 3, 0, 85, &len);
    static char name[SL_TAR_NAME_MAX + 1];
    memset(name, 'p', SL_TAR_NAME_MAX);
    name[100] = '/';
    buf b = {0};
    member_n(&b, "a.jpg", jpg, len);
    member(&b, "a.cls", "0");
    const char *keys[] = {".jpg", ".cls"}, *data[] = {"not an image", "1"};
    for (int k = 0; k < 2; k++) {
        memcpy(name + SL_TAR_NAME_MAX - 4, keys[k], 4);
        header(&b, "././@LongLink", 'L', SL_TAR_NAME_MAX + 1, NULL);
        b_put(&b, name, SL_TAR_NAME_MAX + 1);
        b_pad(&b);
        member(&b, "placeholder", data[k]);
    }
    end(&b);
    b_write(&b, path);
    free(b.p);
    free(jpg);
    sl_config c;
    cfg_for(&c, path, 1);
    c.shuffle = 0;
    sl_loader *ld;
    if (sl_loader_create(&c, &ld, err, sizeof err)) SL_FAIL("create: %s", err);
    sl_batch *bt;
    CHECK_OK(sl_loader_next(ld, &bt));
    sl_loader_release(ld, bt);
    sl_error_record e;
    CHECK_EQ(sl_loader_errors(ld, 0, &e, 1), 1);
    CHECK_EQ(e.index, 1);
    static char got[SL_PATH_MAX];
    CHECK(sl_loader_sample_path(ld, e.index, got, sizeof got) == got);
    CHECK_EQ(strlen(got), strlen(path) + 1 + SL_TAR_NAME_MAX - 4);
    CHECK(memcmp(got + strlen(path) + 1, name, SL_TAR_NAME_MAX - 4) == 0);
    sl_loader_destroy(ld);
    char args[512];
    static char out[65536];
    snprintf(args, sizeof args, "bench %s --batch 2 --size 32 --epochs 1 --workers 1 --json 2>/dev/null", path);
    CHECK_EQ(fx_sluice(args, out, sizeof out), 0);
    CHECK_STR_CONTAINS(out, "\"error_samples\": [{\"path\": \"");
    CHECK(strstr(out, "\"path\": \"?\"") == NULL);
    name[SL_TAR_NAME_MAX - 4] = 0;
    CHECK_STR_CONTAINS(out, name + 101); /* the long last component */
}

TEST(alloc_failure_at_every_allocation) {
    char dir[256], pattern[300];
    fx_dataset *d = dataset_and_shards(dir, sizeof dir, 4, 0);
    snprintf(pattern, sizeof pattern, "%s/s-{000000..000003}.tar", dir);
    fail_each_alloc(pattern, 1, 23);
    fail_each_alloc(dir, 1, 23);
    free(d);
}
