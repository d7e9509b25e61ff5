/*
 * Tar shards: the header scanner over every dialect in the committed
 * corpus (tests/fuzz/corpus/tar, made by make_tar_corpus.py with Python's
 * tarfile, GNU tar and by hand) compared with Python's tarfile, the
 * WebDataset grouping, brace patterns, and one case per way a hostile
 * header is refused (archives built here, block by block).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "base/util.h"
#include "source/tar.h"
#include "source/wds.h"
#include "tarw.h"

/* A pax 'x' header holding one record key=value (value of vlen bytes). */
static void pax(buf *b, const char *key, const char *value, size_t vlen, char type) {
    char rec[8192];
    size_t body = strlen(key) + vlen + 3, n = body + 1; /* " key=value\n" + digits */
    while (snprintf(NULL, 0, "%zu", n) + body != n) n++;
    int k = snprintf(rec, sizeof rec, "%zu %s=", n, key);
    memcpy(rec + k, value, vlen);
    rec[k + vlen] = '\n';
    header(b, "././@PaxHeader", type, n, NULL);
    b_put(b, rec, n);
    b_pad(b);
}

/* ---- listing ---------------------------------------------------------------- */

typedef struct listing {
    int n;
    char name[32][SL_TAR_NAME_MAX + 1];
    uint64_t off[32], size[32], hdr[32];
} listing;

static int on_member(void *ctx, const sl__tar_member *m, char *err, size_t errlen) {
    listing *l = ctx;
    CHECK(l->n < 32);
    CHECK_EQ(strlen(m->name), m->name_len);
    memcpy(l->name[l->n], m->name, m->name_len + 1);
    l->off[l->n] = m->offset;
    l->size[l->n] = m->size;
    l->hdr[l->n] = m->header_offset;
    l->n++;
    return 0;
}

static int scan(const buf *b, listing *l, char *err) {
    memset(l, 0, sizeof *l);
    err[0] = 0;
    int rc = sl__tar_scan_mem(b->p, b->n, on_member, l, err, 256);
    if (rc) CHECK(err[0] != 0);
    return rc;
}

/* The scan must fail with code and a reason holding why; b is freed and
 * emptied for the next archive. Returns the members listed before. */
static int refused(buf *b, int code, const char *why) {
    listing l;
    char err[256];
    CHECK_EQ(scan(b, &l, err), code);
    CHECK_STR_CONTAINS(err, why);
    free(b->p);
    *b = (buf){0};
    return l.n;
}

static buf read_file(const char *path) {
    buf b = {0};
    FILE *f = fopen(path, "rb");
    if (!f) SL_FAIL("cannot open %s: %s", path, strerror(errno));
    uint8_t tmp[4096];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0) b_put(&b, tmp, n);
    fclose(f);
    return b;
}

static const char *corpus(const char *name) {
    static char path[1024];
    const char *src = getenv("SL_SRC");
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/tar/%s", src ? src : ".", name);
    return path;
}

/* ---- the corpus against Python's tarfile --------------------------------------- */

/* Every regular member of the corpus file: as tarfile lists it (names
 * normalised as tar.h says), each data starting with its own name. */
static void check_against_tarfile(const char *file) {
    buf b = read_file(corpus(file));
    listing l;
    char err[256];
    CHECK_OK(scan(&b, &l, err));
    for (int i = 0; i < l.n; i++) { /* make_tar_corpus.py: data = name "\n" ... */
        size_t nl = strlen(l.name[i]);
        CHECK(l.off[i] + l.size[i] <= b.n);
        CHECK(l.size[i] > nl);
        if (memcmp(b.p + l.off[i], l.name[i], nl) || b.p[l.off[i] + nl] != '\n')
            SL_FAIL("%s: member %d '%s' at %llu holds '%.*s'", file, i, l.name[i], (unsigned long long)l.off[i],
                    (int)nl, (const char *)b.p + l.off[i]);
    }
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import tarfile,sys,posixpath\n"
             "for m in tarfile.open(sys.argv[1]).getmembers():\n"
             "  if m.isreg(): print(posixpath.normpath(m.name), m.offset_data, m.size)\" %s",
             corpus(file));
    FILE *p = popen(cmd, "r");
    if (!p) {
        printf("python3 not available: tarfile comparison skipped\n");
        free(b.p);
        return;
    }
    char line[SL_TAR_NAME_MAX + 64];
    int i = 0;
    while (fgets(line, sizeof line, p)) {
        char name[SL_TAR_NAME_MAX + 1];
        unsigned long long off, size;
        CHECK_EQ(sscanf(line, "%4096s %llu %llu", name, &off, &size), 3);
        CHECK(i < l.n);
        if (strcmp(name, l.name[i])) SL_FAIL("%s: member %d: tarfile '%s', sluice '%s'", file, i, name, l.name[i]);
        CHECK_EQ(off, l.off[i]);
        CHECK_EQ(size, l.size[i]);
        i++;
    }
    int st = pclose(p);
    if (st == 127 << 8) printf("python3 not available: tarfile comparison skipped\n");
    else CHECK_EQ(i, l.n);
    free(b.p);
}

TEST(corpus_matches_tarfile) {
    const char *files[] = {"ustar.tar", "gnu.tar", "pax.tar", "gnu_long.tar", "pax_long_global.tar",
                           "base256_size.tar", "pax_size.tar", "v7.tar", "ustar_prefix.tar",
                           "normalise_no_end.tar", "cli_gnu.tar", "cli_posix.tar"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        struct stat st;
        if (!strncmp(files[i], "cli_", 4) && stat(corpus(files[i]), &st) != 0) continue; /* no GNU tar there */
        check_against_tarfile(files[i]);
    }
}

TEST(dialects_list_what_was_written) {
    listing l;
    char err[256];
    buf b = read_file(corpus("gnu_long.tar")); /* dir, 'L' name, symlink with 'L'+'K', hard link */
    CHECK_OK(scan(&b, &l, err));
    CHECK_EQ(l.n, 2);
    CHECK_EQ(strlen(l.name[0]), 6 + 120 + 4);
    CHECK(strcmp(l.name[1], "shard/000100.cls") == 0);
    CHECK(l.hdr[0] < l.off[0] - 512); /* the 'L' header comes first */
    free(b.p);
    b = read_file(corpus("pax_long_global.tar"));
    CHECK_OK(scan(&b, &l, err));
    CHECK_EQ(l.n, 4);
    CHECK(strcmp(l.name[1], "caf\xc3\xa9/000201.jpg") == 0);
    free(b.p);
    b = read_file(corpus("normalise_no_end.tar")); /* "./a//b/./000014.jpg", no end blocks */
    CHECK_OK(scan(&b, &l, err));
    CHECK_EQ(l.n, 1);
    CHECK(strcmp(l.name[0], "a/b/000014.jpg") == 0);
    free(b.p);
}

TEST(scan_by_fd_equals_memory) {
    buf b = read_file(corpus("pax.tar"));
    listing lm, lf;
    char err[256];
    CHECK_OK(scan(&b, &lm, err));
    int fd = open(corpus("pax.tar"), O_RDONLY);
    CHECK(fd >= 0);
    memset(&lf, 0, sizeof lf);
    CHECK_OK(sl__tar_scan(fd, b.n, on_member, &lf, NULL, err, sizeof err));
    CHECK_EQ(lf.n, lm.n);
    for (int i = 0; i < lm.n; i++) {
        CHECK(strcmp(lf.name[i], lm.name[i]) == 0);
        CHECK_EQ(lf.off[i], lm.off[i]);
        CHECK_EQ(lf.size[i], lm.size[i]);
    }
    close(fd);
    /* a file shorter than the size it was said to have: a read error */
    fd = open(corpus("normalise_no_end.tar"), O_RDONLY); /* no end blocks: the scan reads on */
    CHECK(fd >= 0);
    CHECK_EQ(sl__tar_scan(fd, 1024 + 4096, on_member, &lf, NULL, err, sizeof err), SL_EIO);
    CHECK_STR_CONTAINS(err, "shorter");
    close(fd);
    free(b.p);
}

/* ---- hostile headers -------------------------------------------------------- */

TEST(bad_checksum_refused) {
    buf b = {0};
    member(&b, "000001.jpg", "x");
    end(&b);
    b.p[0] = 'y'; /* name changed, checksum not */
    refused(&b, SL_ECORRUPT, "checksum mismatch at offset 0");
}

TEST(negative_base256_size_refused) {
    buf b = {0};
    uint8_t neg[12];
    memset(neg, 0xFF, sizeof neg);
    header(&b, "000001.jpg", '0', 0, neg);
    end(&b);
    refused(&b, SL_ECORRUPT, "bad size field");
}

TEST(base256_size_read) {
    buf b = {0};
    uint8_t f[12] = {0x80};
    f[11] = 3;
    header(&b, "000001.jpg", '0', 0, f);
    b_put(&b, "abc", 3);
    b_pad(&b);
    end(&b);
    listing l;
    char err[256];
    CHECK_OK(scan(&b, &l, err));
    CHECK_EQ(l.n, 1);
    CHECK_EQ(l.size[0], 3);
    free(b.p);
}

TEST(huge_size_refused) {
    buf b = {0};
    member(&b, "000000.jpg", "fine");
    uint8_t big[12] = {0x80, 0, 0, 0, 0x3F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xF0}; /* ~2^62 */
    header(&b, "000001.jpg", '0', 0, big);
    end(&b);
    CHECK_EQ(refused(&b, SL_ECORRUPT, "past the end"), 1); /* what came before stays valid */
    /* 2^63 and above: not a size at all */
    uint8_t over[12] = {0x80, 0, 0, 0, 0x80};
    header(&b, "000001.jpg", '0', 0, over);
    end(&b);
    refused(&b, SL_ECORRUPT, "bad size field");
}

TEST(truncated_member_refused) {
    buf b = {0};
    member(&b, "000000.jpg", "whole");
    header(&b, "000000.cls", '0', 5000, NULL);
    b_put(&b, "short", 5);
    CHECK_EQ(refused(&b, SL_ECORRUPT, "declares 5000 bytes, past the end"), 1);
}

TEST(truncated_header_refused) {
    buf b = {0};
    member(&b, "000000.jpg", "whole");
    b_put(&b, "partial header", 14);
    refused(&b, SL_ECORRUPT, "truncated header at offset 1024");
}

/* A size that swallows the next header: that member is data of the first
 * (as for tar itself); what is reported never overlaps. */
TEST(overlapping_size_swallows_next_header) {
    buf b = {0};
    header(&b, "000000.jpg", '0', 3 * 512, NULL); /* its data + the next header + its data */
    b_put(&b, "first", 5);
    b_pad(&b);
    member(&b, "000001.jpg", "second");
    member(&b, "000002.jpg", "third");
    end(&b);
    listing l;
    char err[256];
    CHECK_OK(scan(&b, &l, err));
    CHECK_EQ(l.n, 2);
    CHECK(strcmp(l.name[1], "000002.jpg") == 0);
    CHECK(l.off[0] + l.size[0] <= l.hdr[1]);
    free(b.p);
}

static void refuses_name(const char *name, const char *why) {
    buf b = {0};
    member(&b, name, "x");
    end(&b);
    CHECK_EQ(refused(&b, SL_ECORRUPT, why), 0);
}

TEST(path_tricks_refused) {
    refuses_name("../000001.jpg", "'..' component");
    refuses_name("a/../../000001.jpg", "'..' component");
    refuses_name("/etc/000001.jpg", "absolute");
    refuses_name("./", "ends in '/'");
    refuses_name("./.", "empty name");
    refuses_name("", "empty name");
}

TEST(path_normalised) {
    buf b = {0};
    member(&b, "./a//b/./c.jpg", "x");
    member(&b, "..x/.hidden/y..z.jpg", "y"); /* dots inside components are fine */
    end(&b);
    listing l;
    char err[256];
    CHECK_OK(scan(&b, &l, err));
    CHECK_EQ(l.n, 2);
    CHECK(strcmp(l.name[0], "a/b/c.jpg") == 0);
    CHECK(strcmp(l.name[1], "..x/.hidden/y..z.jpg") == 0);
    free(b.p);
}

TEST(pax_path_with_nul_refused) {
    buf b = {0};
    pax(&b, "path", "000001\0.jpg", 11, 'x');
    member(&b, "ignored.jpg", "x");
    end(&b);
    refused(&b, SL_ECORRUPT, "NUL byte");
}

TEST(pax_path_and_size_apply_to_next_member_only) {
    buf b = {0};
    char longname[300];
    memset(longname, 'p', 290);
    strcpy(longname + 290, ".jpg");
    pax(&b, "path", longname, strlen(longname), 'x');
    pax(&b, "size", "4", 1, 'x');
    header(&b, "short.jpg", '0', 99, NULL); /* pax size 4 wins */
    b_put(&b, "data", 4);
    b_pad(&b);
    member(&b, "000002.jpg", "plain");
    end(&b);
    listing l;
    char err[256];
    CHECK_OK(scan(&b, &l, err));
    CHECK_EQ(l.n, 2);
    CHECK(strcmp(l.name[0], longname) == 0);
    CHECK_EQ(l.size[0], 4);
    CHECK_EQ(l.hdr[0], 0); /* the member starts at its first extended header */
    CHECK(strcmp(l.name[1], "000002.jpg") == 0);
    CHECK_EQ(l.size[1], 5);
    free(b.p);
}

TEST(pax_global_header_ignored) {
    buf b = {0};
    pax(&b, "path", "everything.jpg", 14, 'g');
    member(&b, "000001.jpg", "x");
    end(&b);
    listing l;
    char err[256];
    CHECK_OK(scan(&b, &l, err));
    CHECK_EQ(l.n, 1);
    CHECK(strcmp(l.name[0], "000001.jpg") == 0);
    free(b.p);
}

TEST(pax_bad_records_refused) {
    const char *bad[] = {"x path=a\n", "99 path=a\n", "5 =x\n", "7 pxyz\n", "0 =\n", "8 path=a!"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        buf b = {0};
        header(&b, "././@PaxHeader", 'x', strlen(bad[i]), NULL);
        b_put(&b, bad[i], strlen(bad[i]));
        b_pad(&b);
        member(&b, "000001.jpg", "x");
        end(&b);
        refused(&b, SL_ECORRUPT, "pax record");
    }
    buf b = {0};
    pax(&b, "size", "12x", 3, 'x');
    member(&b, "000001.jpg", "x");
    end(&b);
    refused(&b, SL_ECORRUPT, "pax size '12x'");
}

TEST(long_names_over_limit_refused) {
    static char name[SL_TAR_NAME_MAX + 10];
    memset(name, 'n', sizeof name - 1);
    buf b = {0};
    pax(&b, "path", name, SL_TAR_NAME_MAX + 1, 'x');
    member(&b, "x.jpg", "x");
    end(&b);
    refused(&b, SL_ELIMIT, "pax path of 4097 bytes");
    b = (buf){0};
    header(&b, "././@LongLink", 'L', SL_TAR_NAME_MAX + 2, NULL);
    b_put(&b, name, SL_TAR_NAME_MAX + 2);
    b_pad(&b);
    member(&b, "x.jpg", "x");
    end(&b);
    refused(&b, SL_ELIMIT, "GNU long name of 4098 bytes");
}

/* A GNU long name filling all SL_TAR_NAME_MAX + 1 bytes of its data
 * (4,097 bytes, no NUL) is one byte over the limit: refused, never written
 * past the name buffer (UBSan saw name[4097] written before). The longest
 * name allowed, 4,096 bytes and its NUL, is read whole. */
TEST(gnu_long_name_of_4097_bytes_refused) {
    static char name[SL_TAR_NAME_MAX + 2];
    memset(name, 'n', SL_TAR_NAME_MAX + 1);
    memcpy(name + SL_TAR_NAME_MAX + 1 - 4, ".jpg", 4);
    buf b = {0};
    header(&b, "././@LongLink", 'L', SL_TAR_NAME_MAX + 1, NULL);
    b_put(&b, name, SL_TAR_NAME_MAX + 1);
    b_pad(&b);
    member(&b, "x.jpg", "x");
    end(&b);
    refused(&b, SL_ELIMIT, "GNU long name of 4097 bytes");
    /* 4,096 bytes and the NUL: the whole name */
    memcpy(name + SL_TAR_NAME_MAX - 4, ".jpg", 5);
    b = (buf){0};
    header(&b, "././@LongLink", 'L', SL_TAR_NAME_MAX + 1, NULL);
    b_put(&b, name, SL_TAR_NAME_MAX + 1);
    b_pad(&b);
    member(&b, "x.jpg", "x");
    end(&b);
    listing *l = malloc(sizeof *l);
    char err[256];
    CHECK_OK(scan(&b, l, err));
    CHECK_EQ(l->n, 1);
    CHECK_EQ(strlen(l->name[0]), SL_TAR_NAME_MAX);
    CHECK(memcmp(l->name[0], name, SL_TAR_NAME_MAX) == 0);
    free(l);
    free(b.p);
}

TEST(gnu_long_name_with_inner_nul_refused) {
    buf b = {0};
    header(&b, "././@LongLink", 'L', 12, NULL);
    b_put(&b, "ab\0cd.jpg\0\0\0", 12);
    b_pad(&b);
    member(&b, "x.jpg", "x");
    end(&b);
    refused(&b, SL_ECORRUPT, "NUL byte");
}

TEST(sparse_refused) {
    buf b = {0};
    header(&b, "000001.bin", 'S', 0, NULL);
    end(&b);
    refused(&b, SL_EUNSUPPORTED, "sparse");
    b = (buf){0};
    pax(&b, "GNU.sparse.major", "1", 1, 'x');
    member(&b, "000001.bin", "x");
    end(&b);
    refused(&b, SL_EUNSUPPORTED, "sparse");
}

TEST(non_regular_members_skipped) {
    buf b = {0};
    header(&b, "dir/", '5', 0, NULL);
    header(&b, "dir/link.jpg", '2', 0, NULL);
    header(&b, "dir/hard.jpg", '1', 1234, NULL); /* size ignored, as tarfile does */
    header(&b, "dir/fifo", '6', 0, NULL);
    header(&b, "dir/odd", 'Z', 3, NULL);        /* unknown type: its data skipped */
    b_put(&b, "zzz", 3);
    b_pad(&b);
    member(&b, "dir/000001.jpg", "x");
    header(&b, "dir/contig.jpg", '7', 1, NULL);
    b_put(&b, "c", 1);
    b_pad(&b);
    end(&b);
    listing l;
    char err[256];
    CHECK_OK(scan(&b, &l, err));
    CHECK_EQ(l.n, 2);
    CHECK(strcmp(l.name[0], "dir/000001.jpg") == 0);
    CHECK(strcmp(l.name[1], "dir/contig.jpg") == 0);
    free(b.p);
}

TEST(end_at_first_zero_block) {
    buf b = {0};
    member(&b, "000001.jpg", "x");
    end(&b);
    member(&b, "000002.jpg", "after the end"); /* not part of the archive */
    listing l;
    char err[256];
    CHECK_OK(scan(&b, &l, err));
    CHECK_EQ(l.n, 1);
    free(b.p);
}

/* ---- WebDataset grouping ----------------------------------------------------------- */

typedef struct samples {
    int n;
    char prefix[16][64];
    char keys[16][128];
    uint64_t off[16][8];
} samples;

static int on_sample(void *ctx, const char *prefix, size_t plen, const sl__wds_member *m, uint32_t n, char *err,
                     size_t errlen) {
    samples *s = ctx;
    CHECK(s->n < 16);
    snprintf(s->prefix[s->n], 64, "%s", prefix);
    s->keys[s->n][0] = 0;
    for (uint32_t i = 0; i < n; i++) {
        strcat(s->keys[s->n], m[i].key);
        strcat(s->keys[s->n], i + 1 < n ? "," : "");
        s->off[s->n][i] = m[i].offset;
    }
    s->n++;
    return 0;
}

static int group(const buf *b, samples *s, uint64_t *skipped, char *err) {
    sl__budget bud;
    CHECK_OK(sl__budget_init(&bud, 1 << 20));
    sl__wds_grouper *g = malloc(sizeof *g);
    memset(s, 0, sizeof *s);
    sl__wds_group_init(g, &bud, on_sample, s);
    err[0] = 0;
    int rc = sl__tar_scan_mem(b->p, b->n, sl__wds_group_add, g, err, 256);
    if (!rc) rc = sl__wds_group_finish(g, err, 256);
    if (skipped) *skipped = g->skipped;
    sl__wds_group_free(g);
    free(g);
    CHECK_EQ(atomic_load(&bud.used), 0);
    sl__budget_fini(&bud);
    return rc;
}

TEST(wds_split_rules) {
    size_t p, k;
    CHECK_OK(sl__wds_split("000123.jpg", 10, &p, &k));
    CHECK_EQ(p, 6);
    CHECK_EQ(k, 7);
    const char *n = "dir.v2/000123.blur.npy";
    CHECK_OK(sl__wds_split(n, strlen(n), &p, &k));
    CHECK_EQ(p, strlen("dir.v2/000123"));
    CHECK(strcmp(n + k, "blur.npy") == 0);
    CHECK_EQ(sl__wds_split("dir/000123", 10, &p, &k), -1);
    CHECK_EQ(sl__wds_split("dir/.hidden.jpg", 15, &p, &k), -1);
    CHECK_EQ(sl__wds_split("a.", 2, &p, &k), -1); /* an empty key names no field */
}

TEST(wds_groups_contiguous_members) {
    buf b = read_file(corpus("ustar.tar"));
    samples s;
    char err[256];
    CHECK_OK(group(&b, &s, NULL, err));
    CHECK_EQ(s.n, 4);
    CHECK(strcmp(s.prefix[0], "000000") == 0);
    CHECK(strcmp(s.keys[0], "jpg,cls") == 0);
    CHECK(strcmp(s.prefix[3], "000003") == 0);
    CHECK(strcmp(s.keys[3], "blur.npy,sharp.npy,json") == 0); /* keys lowercased */
    CHECK(memcmp(b.p + s.off[3][1], "000003.sharp.npy\n", 17) == 0);
    free(b.p);
    uint64_t skipped;
    b = read_file(corpus("pax_long_global.tar"));
    CHECK_OK(group(&b, &s, &skipped, err));
    CHECK_EQ(s.n, 2);
    CHECK_EQ(skipped, 2); /* "000202" (no key) and "._000203.jpg" (no prefix) */
    free(b.p);
}

TEST(wds_non_contiguous_sample_refused) {
    buf b = {0};
    member(&b, "a/000001.jpg", "x");
    member(&b, "a/000002.jpg", "x");
    member(&b, "a/000001.cls", "x");
    end(&b);
    samples s;
    char err[256];
    CHECK_EQ(group(&b, &s, NULL, err), SL_ECORRUPT);
    CHECK_STR_CONTAINS(err, "sample 'a/000001' comes back at offset 2048");
    free(b.p);
}

TEST(wds_duplicate_key_refused) {
    buf b = {0};
    member(&b, "000001.jpg", "x");
    member(&b, "000001.JPG", "x"); /* the same key once lowercased */
    end(&b);
    samples s;
    char err[256];
    CHECK_EQ(group(&b, &s, NULL, err), SL_ECORRUPT);
    CHECK_STR_CONTAINS(err, "key 'jpg' twice in sample '000001'");
    free(b.p);
}

TEST(wds_too_many_members_refused) {
    buf b = {0};
    for (int i = 0; i <= SL_WDS_MAX_MEMBERS; i++) {
        char name[32];
        snprintf(name, sizeof name, "000001.k%d", i);
        member(&b, name, "x");
    }
    end(&b);
    samples s;
    char err[256];
    CHECK_EQ(group(&b, &s, NULL, err), SL_ELIMIT);
    CHECK_STR_CONTAINS(err, "more than 64 members");
    free(b.p);
}

static int on_sample_count(void *ctx, const char *prefix, size_t plen, const sl__wds_member *m, uint32_t n,
                           char *err, size_t errlen) {
    ++*(uint64_t *)ctx;
    return 0;
}

TEST(wds_budget_refusal_is_clean) {
    /* 3000 samples: the prefix set outgrows a 64 KiB budget */
    buf b = {0};
    for (int i = 0; i < 3000; i++) {
        char name[32];
        snprintf(name, sizeof name, "%06d.cls", i);
        header(&b, name, '0', 0, NULL);
    }
    end(&b);
    sl__budget bud;
    CHECK_OK(sl__budget_init(&bud, 64 << 10));
    char err[256];
    int fd = open("/tmp", O_TMPFILE | O_RDWR, 0600);
    CHECK(fd >= 0);
    CHECK_EQ(pwrite(fd, b.p, b.n, 0), (ssize_t)b.n);
    uint64_t count = 0;
    int rc = sl__wds_scan(fd, b.n, &bud, on_sample_count, &count, NULL, err, sizeof err);
    CHECK_EQ(rc, SL_EBUDGET);
    CHECK_STR_CONTAINS(err, "no memory");
    CHECK_EQ(atomic_load(&bud.used), 0);
    /* with room, every sample */
    sl__budget_fini(&bud);
    CHECK_OK(sl__budget_init(&bud, 8 << 20));
    sl__wds_stats ws;
    count = 0;
    CHECK_OK(sl__wds_scan(fd, b.n, &bud, on_sample_count, &count, &ws, err, sizeof err));
    CHECK_EQ(ws.samples, 3000);
    CHECK_EQ(ws.trailer, 0);
    CHECK_EQ(count, 3000);
    CHECK_EQ(atomic_load(&bud.used), 0);
    sl__budget_fini(&bud);
    close(fd);
    free(b.p);
}

/* ---- brace patterns ----------------------------------------------------------------- */

static int on_count(void *ctx, const char *name, size_t len) {
    (void)name, (void)len;
    ++*(long *)ctx;
    return 0;
}

typedef struct names {
    int n;
    char all[4096];
} names;

static int on_name(void *ctx, const char *name, size_t len) {
    names *s = ctx;
    CHECK_EQ(strlen(name), len);
    if (s->n++) strcat(s->all, " ");
    strcat(s->all, name);
    return 0;
}

static int expand(const char *pattern, names *s, char *err) {
    memset(s, 0, sizeof *s);
    err[0] = 0;
    int rc = sl__brace_expand(pattern, on_name, s, err, 256);
    if (rc) CHECK(err[0] != 0);
    return rc;
}

TEST(brace_expansion) {
    names s;
    char err[256];
    CHECK_OK(expand("shards/train-{000000..000003}.tar", &s, err));
    CHECK(strcmp(s.all, "shards/train-000000.tar shards/train-000001.tar shards/train-000002.tar "
                        "shards/train-000003.tar") == 0);
    CHECK_OK(expand("{a,b}-{8..10}.tar", &s, err));
    CHECK(strcmp(s.all, "a-8.tar a-9.tar a-10.tar b-8.tar b-9.tar b-10.tar") == 0);
    CHECK_OK(expand("x{08..10}", &s, err));
    CHECK(strcmp(s.all, "x08 x09 x10") == 0);
    CHECK_OK(expand("x{3..1}", &s, err)); /* counting down */
    CHECK(strcmp(s.all, "x3 x2 x1") == 0);
    CHECK_OK(expand("x{1..0010}", &s, err)); /* padded to the wider endpoint */
    CHECK_EQ(s.n, 10);
    CHECK(strncmp(s.all, "x0001 x0002", 11) == 0);
    CHECK_OK(expand("plain.tar", &s, err));
    CHECK(strcmp(s.all, "plain.tar") == 0);
    CHECK_OK(expand("{a,,b}", &s, err)); /* an empty alternative, as bash */
    CHECK_EQ(s.n, 3);
    long count = 0; /* the limit: exactly 10^6 names */
    CHECK_OK(sl__brace_expand("{0..999}{0..999}", on_count, &count, err, sizeof err));
    CHECK_EQ(count, 1000000);
}

TEST(brace_errors) {
    names s;
    char err[256];
    CHECK_EQ(expand("a{1..3", &s, err), SL_EPARSE);
    CHECK_STR_CONTAINS(err, "unclosed");
    CHECK_EQ(expand("a}", &s, err), SL_EPARSE);
    CHECK_STR_CONTAINS(err, "unbalanced");
    CHECK_EQ(expand("{a,{b,c}}", &s, err), SL_EPARSE);
    CHECK_STR_CONTAINS(err, "nested");
    CHECK_EQ(expand("{x}", &s, err), SL_EPARSE);
    CHECK_STR_CONTAINS(err, "neither a list");
    CHECK_EQ(expand("{a..z}", &s, err), SL_EPARSE);
    CHECK_STR_CONTAINS(err, "decimal numbers");
    CHECK_EQ(expand("{-1..3}", &s, err), SL_EPARSE);
    CHECK_EQ(expand("{0..1000}{0..999}", &s, err), SL_ELIMIT);
    CHECK_STR_CONTAINS(err, "more than 1000000 names");
    CHECK_EQ(s.n, 0); /* nothing emitted before the refusal */
    static char longp[SL_TAR_NAME_MAX + 16];
    memset(longp, 'a', SL_TAR_NAME_MAX - 2);
    strcpy(longp + SL_TAR_NAME_MAX - 2, "{1..100}");
    CHECK_EQ(expand(longp, &s, err), SL_ELIMIT);
    CHECK_STR_CONTAINS(err, "names of up to 4097 bytes");
}
