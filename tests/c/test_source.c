/* The source layer: ImageFolder order and labels as torchvision gives them,
 * CSV/JSONL manifests, sample I/O, and every error path. Each case builds
 * its own fixture under a mkdtemp folder and removes it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "files.h"
#include "base/util.h"
#include "source/manifest.h"
#include "source/source.h"

/* ---- fixture helpers ---------------------------------------------------- */

static char tmp_root[256];

static int rm_cb(const char *p, const struct stat *st, int type, struct FTW *f) {
    (void)st;
    (void)type;
    (void)f;
    return remove(p);
}
static void cleanup(void) {
    if (tmp_root[0]) nftw(tmp_root, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *fixture(void) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/sl_test_source_XXXXXX");
    CHECK(mkdtemp(tmp_root) != NULL);
    atexit(cleanup);
    return tmp_root;
}

static const char *P(const char *fmt, ...) {
    static char bufs[8][1024];
    static int k;
    char *b = bufs[k++ % 8];
    int n = snprintf(b, 1024, "%s/", tmp_root);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b + n, 1024 - (size_t)n, fmt, ap);
    va_end(ap);
    return b;
}

/* mkdir -p of every parent, then write content to the file. */
static void put_file(const char *rel, const char *content) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", tmp_root, rel);
    for (char *s = path + strlen(tmp_root) + 1; (s = strchr(s, '/')); s++) {
        *s = 0;
        if (mkdir(path, 0755) != 0 && errno != EEXIST) SL_FAIL("mkdir %s: %s", path, strerror(errno));
        *s = '/';
    }
    FILE *f = fopen(path, "wb");
    if (!f) SL_FAIL("fopen %s: %s", path, strerror(errno));
    fputs(content, f);
    fclose(f);
}

static void put_dir(const char *rel) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/x", tmp_root, rel);
    put_file(path + strlen(tmp_root) + 1, "");
    unlink(path);
}

typedef struct expect {
    const char *rel;
    int64_t label;
} expect;

static void check_index(const sl__source *s, const char *base, const expect *e, size_t n) {
    char buf[2048], want[2048];
    if (sl__source_count(s) != n) {
        for (uint64_t i = 0; i < sl__source_count(s); i++) {
            sl__source_path(s, i, buf, sizeof buf);
            fprintf(stderr, "  [%llu] %s %lld\n", (unsigned long long)i, buf, (long long)sl__source_label(s, i));
        }
    }
    CHECK_EQ(sl__source_count(s), n);
    for (size_t i = 0; i < n; i++) {
        int len = sl__source_path(s, i, buf, sizeof buf);
        if (e[i].rel[0] == '/') snprintf(want, sizeof want, "%s", e[i].rel);
        else snprintf(want, sizeof want, "%s/%s", base, e[i].rel);
        if (strcmp(buf, want) != 0) SL_FAIL("sample %zu: path %s, expected %s", i, buf, want);
        CHECK_EQ(len, (int)strlen(want));
        CHECK_EQ(sl__source_label(s, i), e[i].label);
    }
}

#define MB (1u << 20)

static void open_ok(sl__budget *b, const char *path, uint32_t threads, sl__source **s) {
    char err[512] = "";
    int rc = sl__source_open(b, path, threads, s, err, sizeof err);
    if (rc) SL_FAIL("sl__source_open(%s) = %d (%s): %s", path, rc, sl_strerror(rc), err);
}

static void open_fails(const char *path, int want, const char *msg) {
    sl__budget b;
    sl__budget_init(&b, 64 * MB);
    sl__source *s = (sl__source *)1;
    char err[512] = "";
    int rc = sl__source_open(&b, path, 1, &s, err, sizeof err);
    if (rc != want) SL_FAIL("open(%s) = %d (%s), expected %d; err: %s", path, rc, sl_strerror(rc), want, err);
    CHECK(s == NULL);
    CHECK_STR_CONTAINS(err, msg);
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
}

/* The tree of folder_torchvision_order; returns the expected list. */
static const expect *make_tree(size_t *n) {
    put_file("data/E_upper/e.jpg", "E");
    put_file("data/a_class/2.jpg", "a2");
    put_file("data/a_class/10.jpg", "a10");
    put_file("data/a_class/1.jpg", "a1");
    put_file("data/a_class/pic.Ppm", "p");
    put_file("data/a_class/img.tar.gz", "no");
    put_file("data/a_class/jpg", "no: no dot");
    put_file("data/b_class/z.JPG", "z");
    put_file("data/b_class/a.png", "a");
    put_file("data/b_class/.hidden.jpg", "h");
    put_file("data/b_class/notes.txt", "no");
    put_file("data/b_class/sub/x.jpeg", "x");
    put_file("data/b_class/sub-2/y.webp", "y");
    put_file("data/b_class/sub/deeper/q.TIFF", "q");
    put_file("data/b_class/sub/deeper/r.tif", "r");
    put_dir("data/c_empty");
    put_file("data/c_empty/readme.md", "no");
    put_file("outside/linked/r.pgm", "r");
    put_file("outside/linked/p.bmp", "p");
    CHECK_EQ(symlink("../outside/linked", P("data/d_link")), 0);
    put_file("data/root_file.jpg", "not a class");
    static const expect e[] = {
        {"E_upper/e.jpg", 0},
        {"a_class/1.jpg", 1},
        {"a_class/10.jpg", 1},
        {"a_class/2.jpg", 1},
        {"a_class/pic.Ppm", 1},
        {"b_class/.hidden.jpg", 2},
        {"b_class/a.png", 2},
        {"b_class/z.JPG", 2},
        {"b_class/sub/x.jpeg", 2},     /* "b_class/sub" < "b_class/sub-2" */
        {"b_class/sub-2/y.webp", 2},   /* '-' < '/': before sub/deeper */
        {"b_class/sub/deeper/q.TIFF", 2},
        {"b_class/sub/deeper/r.tif", 2},
        /* c_empty: label 3, no samples */
        {"d_link/p.bmp", 4},
        {"d_link/r.pgm", 4},
    };
    *n = sizeof e / sizeof *e;
    return e;
}

/* ---- folder ------------------------------------------------------------- */

TEST(folder_torchvision_order) {
    fixture();
    size_t n;
    const expect *e = make_tree(&n);
    sl__budget b;
    sl__budget_init(&b, 64 * MB);
    sl__source *s;
    open_ok(&b, P("data"), 1, &s);
    CHECK_EQ(sl__source_num_classes(s), 5);
    check_index(s, P("data"), e, n);
    CHECK(atomic_load(&b.cat[SL_MEM_INDEX]) > 0);
    sl__source_close(s);
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
}

TEST(folder_threads_same_result) {
    fixture();
    size_t n;
    const expect *e = make_tree(&n);
    for (uint32_t t = 0; t <= 8; t++) {
        sl__budget b;
        sl__budget_init(&b, 64 * MB);
        sl__source *s;
        open_ok(&b, P("data"), t, &s);
        check_index(s, P("data"), e, n);
        sl__source_close(s);
        CHECK_EQ(atomic_load(&b.used), 0);
        sl__budget_fini(&b);
    }
}

TEST(folder_trailing_slash) {
    fixture();
    size_t n;
    const expect *e = make_tree(&n);
    sl__budget b;
    sl__budget_init(&b, 64 * MB);
    sl__source *s;
    char p[1100];
    snprintf(p, sizeof p, "%s//", P("data"));
    open_ok(&b, p, 2, &s);
    check_index(s, P("data"), e, n);
    sl__source_close(s);
    sl__budget_fini(&b);
}

TEST(folder_train_subfolder) {
    fixture();
    put_file("ds/train/cat/1.jpg", "c");
    put_file("ds/train/dog/1.jpg", "d");
    put_file("ds/val/cat/9.jpg", "v");
    put_file("ds/val/dog/9.jpg", "v");
    sl__budget b;
    sl__budget_init(&b, 64 * MB);
    sl__source *s;
    open_ok(&b, P("ds"), 1, &s);
    static const expect e[] = {{"cat/1.jpg", 0}, {"dog/1.jpg", 1}};
    check_index(s, P("ds/train"), e, 2);
    CHECK_EQ(sl__source_num_classes(s), 2);
    sl__source_close(s);
    sl__budget_fini(&b);
}

/* File symlinks and broken links count as files (os.walk puts them in
 * fnames); a directory symlink back to an ancestor is listed once instead
 * of looping; a symlink to a sibling folder is followed. */
TEST(folder_symlinks) {
    fixture();
    put_file("d/k/a.jpg", "a");
    put_file("d/k/sub/b.jpg", "b");
    put_file("d/other/o.jpg", "o");
    CHECK_EQ(symlink("a.jpg", P("d/k/link.jpg")), 0);
    CHECK_EQ(symlink("nowhere.jpg", P("d/k/broken.jpg")), 0);
    CHECK_EQ(symlink("..", P("d/k/sub/loop")), 0);
    CHECK_EQ(symlink("../other", P("d/k/sib")), 0);
    CHECK_EQ(symlink("nowhere", P("d/broken_class")), 0); /* not a class */
    sl__budget b;
    sl__budget_init(&b, 64 * MB);
    sl__source *s;
    open_ok(&b, P("d"), 1, &s);
    static const expect e[] = {
        {"k/a.jpg", 0}, {"k/broken.jpg", 0}, {"k/link.jpg", 0}, {"k/sib/o.jpg", 0},
        {"k/sub/b.jpg", 0}, {"other/o.jpg", 1},
    };
    check_index(s, P("d"), e, sizeof e / sizeof *e);
    sl__source_close(s);
    sl__budget_fini(&b);
}

TEST(folder_many_sorted) {
    /* Enough names per folder to exercise the quicksort, not just the
     * insertion sort, with equal-prefix names. */
    fixture();
    char rel[64];
    for (int i = 0; i < 600; i++) {
        snprintf(rel, sizeof rel, "m/c%d/img_%d.JPEG", i % 3, (i * 7919) % 600);
        put_file(rel, "");
    }
    sl__budget b;
    sl__budget_init(&b, 64 * MB);
    sl__source *s;
    open_ok(&b, P("m"), 3, &s);
    CHECK_EQ(sl__source_count(s), 600);
    char prev[1024] = "", cur[1024];
    for (uint64_t i = 0; i < 600; i++) {
        sl__source_path(s, i, cur, sizeof cur);
        if (strcmp(prev, cur) >= 0) SL_FAIL("not sorted at %llu: %s >= %s", (unsigned long long)i, prev, cur);
        CHECK_EQ(sl__source_label(s, i), (int64_t)(i / 200));
        strcpy(prev, cur);
    }
    sl__source_close(s);
    sl__budget_fini(&b);
}

/* ---- manifests ---------------------------------------------------------- */

TEST(csv_with_header) {
    fixture();
    put_file("m/data.csv", "path,label\nimg/a.jpg,3\n/abs/b.jpg,-7\n\nc.png,9223372036854775807\n");
    sl__budget b;
    sl__budget_init(&b, 64 * MB);
    sl__source *s;
    open_ok(&b, P("m/data.csv"), 1, &s);
    static const expect e[] = {{"img/a.jpg", 3}, {"/abs/b.jpg", -7}, {"c.png", INT64_MAX}};
    check_index(s, P("m"), e, 3);
    CHECK_EQ(sl__source_num_classes(s), 0);
    sl__source_close(s);
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
}

TEST(csv_no_header_quotes_crlf) {
    fixture();
    put_file("m/DATA.CSV", "\xEF\xBB\xBF\"a,b.jpg\",1\r\n\"say \"\"hi\"\".jpg\", 2 \r\n\r\n"
                           "\"multi\nline.jpg\",\"3\"\r\nplain.jpg,4");
    sl__budget b;
    sl__budget_init(&b, 64 * MB);
    sl__source *s;
    open_ok(&b, P("m/DATA.CSV"), 1, &s);
    static const expect e[] = {{"a,b.jpg", 1}, {"say \"hi\".jpg", 2}, {"multi\nline.jpg", 3}, {"plain.jpg", 4}};
    check_index(s, P("m"), e, 4);
    sl__source_close(s);
    sl__budget_fini(&b);
}

TEST(jsonl_escapes) {
    fixture();
    put_file("j/list.jsonl",
             "{\"path\": \"a.jpg\", \"label\": 1}\n"
             "  \n"
             "{\"label\": -2, \"extra\": [1, 2.5e3, -0.5], \"tags\": [\"s\", \"t\"], \"path\": \"sub/b\\u00e9.jpg\"}\r\n"
             "{\"p\\u0061th\": \"\\ud83d\\ude00\\t\\\"q\\\\\\/.jpg\", \"label\": 0}\n"
             "{\"path\":\"/abs/\\u4e2d.png\",\"label\":12}");
    sl__budget b;
    sl__budget_init(&b, 64 * MB);
    sl__source *s;
    open_ok(&b, P("j/list.jsonl"), 1, &s);
    static const expect e[] = {{"a.jpg", 1},
                               {"sub/b\xc3\xa9.jpg", -2},
                               {"\xf0\x9f\x98\x80\t\"q\\/.jpg", 0},
                               {"/abs/\xe4\xb8\xad.png", 12}};
    check_index(s, P("j"), e, 4);
    sl__source_close(s);
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
}

TEST(manifest_in_cwd) {
    fixture();
    put_file("w/m.csv", "x.jpg,5\n");
    CHECK_EQ(chdir(P("w")), 0);
    sl__budget b;
    sl__budget_init(&b, 64 * MB);
    sl__source *s;
    open_ok(&b, "m.csv", 1, &s);
    char buf[64];
    CHECK_EQ(sl__source_path(s, 0, buf, sizeof buf), 5);
    CHECK(strcmp(buf, "x.jpg") == 0);
    sl__source_close(s);
    sl__budget_fini(&b);
}

/* Parser-level tables: (input, expected rc, message fragment). */
typedef struct pcase {
    const char *text;
    int rc;
    const char *msg;
} pcase;

static int count_row(void *ctx, const char *p, size_t n, int64_t label) {
    (void)p;
    (void)n;
    (void)label;
    (*(int *)ctx)++;
    return 0;
}

TEST(csv_parse_errors) {
    static const pcase cs[] = {
        {"a.jpg\n", SL_EPARSE, "line 1: expected 2 fields"}, /* header of 1 field */
        {"path,label\nx.jpg,1\ny.jpg,one\n", SL_EPARSE, "line 3: label \"one\" is not"},
        {"x.jpg,1,2\n", SL_EPARSE, "line 1: expected 2 fields"},
        {"\n\nx.jpg,1\n\"open.jpg,2\n", SL_EPARSE, "line 4: quoted field never closed"},
        {"x.jpg,1\n\"a\"b,2\n", SL_EPARSE, "line 2: unexpected character after a closing quote"},
        {"x.jpg,1\na\"b,2\n", SL_EPARSE, "line 2: quote inside an unquoted field"},
        {"x.jpg,1\n,2\n", SL_EPARSE, "line 2: empty path"},
        {"x.jpg,99999999999999999999\n", SL_EPARSE, ""}, /* header, then nothing: ok below */
        {"h,h\nx.jpg,99999999999999999999\n", SL_EPARSE, "line 2: label"},
        {"h,h\nx.jpg,\n", SL_EPARSE, "line 2: label \"\""},
        {"\"a\nb\nc\",1\nq,x\n", SL_EPARSE, "line 4: label"},
        {"a\0b,1\n", SL_EPARSE, "line 1: path contains a NUL byte"},
    };
    for (size_t k = 0; k < sizeof cs / sizeof *cs; k++) {
        char err[256] = "";
        int rows = 0;
        size_t len = strlen(cs[k].text);
        if (k == 11) len = 6;
        int rc = sl__manifest_parse_csv(cs[k].text, len, count_row, &rows, err, sizeof err);
        if (k == 7) { /* an over-long label on the first row reads as a header */
            CHECK_EQ(rc, 0);
            CHECK_EQ(rows, 0);
            continue;
        }
        if (rc != cs[k].rc) SL_FAIL("case %zu: rc %d, expected %d (%s)", k, rc, cs[k].rc, err);
        CHECK_STR_CONTAINS(err, cs[k].msg);
    }
}

TEST(jsonl_parse_errors) {
    static const pcase cs[] = {
        {"{\"path\":\"a\",\"label\":1}\n[1]\n", SL_EPARSE, "line 2: a JSON object expected"},
        {"{\"path\":\"a\"}\n", SL_EPARSE, "line 1: missing \"label\""},
        {"{\"label\":1}\n", SL_EPARSE, "line 1: missing \"path\""},
        {"\n\n{\"path\":\"a\",\"label\":1.5}\n", SL_EPARSE, "line 3: \"label\" must be an integer"},
        {"{\"path\":\"a\",\"label\":1e3}\n", SL_EPARSE, "must be an integer"},
        {"{\"path\":\"a\",\"label\":\"1\"}\n", SL_EPARSE, "\"label\" must be an integer"},
        {"{\"path\":\"a\",\"label\":9223372036854775808}\n", SL_EPARSE, "64-bit"},
        {"{\"path\":\"a\",\"label\":01}\n", SL_EPARSE, "',' or '}' expected"},
        {"{\"path\":\"a\",\"label\":1,}\n", SL_EPARSE, "object key"},
        {"{\"path\":\"a\",\"label\":1} x\n", SL_EPARSE, "characters after the object"},
        {"{\"path\":\"a\",\"path\":\"b\",\"label\":1}\n", SL_EPARSE, "\"path\": duplicate key"},
        {"{\"path\":1,\"label\":1}\n", SL_EPARSE, "\"path\" must be a string"},
        {"{\"path\":\"\\ud800\",\"label\":1}\n", SL_EPARSE, "high surrogate"},
        {"{\"path\":\"\\udc00\",\"label\":1}\n", SL_EPARSE, "lone low surrogate"},
        {"{\"path\":\"\\u12g4\",\"label\":1}\n", SL_EPARSE, "bad \\u escape"},
        {"{\"path\":\"\\x\",\"label\":1}\n", SL_EPARSE, "unknown escape"},
        {"{\"path\":\"a\tb\",\"label\":1}\n", SL_EPARSE, "control character"},
        {"{\"path\":\"\xc0\xaf\",\"label\":1}\n", SL_EPARSE, "invalid UTF-8"},
        {"{\"path\":\"\xed\xa0\x80\",\"label\":1}\n", SL_EPARSE, "invalid UTF-8"},
        {"{\"path\":\"\\u0000\",\"label\":1}\n", SL_EPARSE, "NUL byte"},
        {"{\"path\":\"\",\"label\":1}\n", SL_EPARSE, "empty path"},
        {"{\"path\":\"a\",\"label\":1,\"x\":tru}\n", SL_EPARSE, "\"x\": true, false or null: rows are flat objects"},
        {"{\"path\":\"a\",\"label\":1,\"x\":null}\n", SL_EPARSE, "\"x\": true, false or null"},
        {"{\"path\":\"a\",\"label\":1,\"x\":{\"y\":1}}\n", SL_EPARSE, "\"x\": an object inside a row"},
        {"{\"path\":\"a\",\"label\":1,\"x\":[1,\"s\"]}\n", SL_EPARSE, "\"x\": a list mixing strings and numbers"},
        {"{\"path\":\"a\",\"label\":1,\"x\":[1 2]}\n", SL_EPARSE, "\"x\": ',' or ']' expected"},
        {"{\"path\":\"a\",\"label\":1,\"x\":1234567890123456789012345678901234567890123456789012345678901234}\n",
         SL_EPARSE, "longer than 63 characters"},
        {"{\"path\":\"a\",\"label\":1,\"x\":[1,]}\n", SL_EPARSE, "unexpected character"},
        {"{\"path\":\"a\",\"label\":1,\"x\":-}\n", SL_EPARSE, "bad number"},
        {"{\"path\":\"a\",\"label\":1\n}\n", SL_EPARSE, "line 1: ',' or '}' expected"},
        {"{\"path\":\"a\",\"label\":1,\"x\":"
         "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
         "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}\n",
         SL_EPARSE, "\"x\": a list inside a list"},
    };
    for (size_t k = 0; k < sizeof cs / sizeof *cs; k++) {
        char err[256] = "";
        int rows = 0;
        int rc = sl__manifest_parse_jsonl(cs[k].text, strlen(cs[k].text), count_row, &rows, err, sizeof err);
        if (rc != cs[k].rc) SL_FAIL("case %zu: rc %d, expected %d (%s)", k, rc, cs[k].rc, err);
        CHECK_STR_CONTAINS(err, cs[k].msg);
    }
    /* A path of PATH_MAX bytes cannot be opened: refused. */
    static char big[PATH_MAX + 64];
    int n = snprintf(big, sizeof big, "{\"path\":\"");
    memset(big + n, 'a', PATH_MAX);
    snprintf(big + n + PATH_MAX, sizeof big - (size_t)n - PATH_MAX, "\",\"label\":1}");
    char err[256];
    int rows = 0;
    CHECK_EQ(sl__manifest_parse_jsonl(big, strlen(big), count_row, &rows, err, sizeof err), SL_EPARSE);
    CHECK_STR_CONTAINS(err, "longer than PATH_MAX");
}

static int stop_row(void *ctx, const char *p, size_t n, int64_t label) {
    (void)p;
    (void)n;
    (void)label;
    return ++*(int *)ctx == 2 ? SL_EBUDGET : 0;
}

TEST(parse_callback_error_propagates) {
    int rows = 0;
    char err[64];
    CHECK_EQ(sl__manifest_parse_csv("a,1\nb,2\nc,3\n", 12, stop_row, &rows, err, sizeof err), SL_EBUDGET);
    CHECK_EQ(rows, 2);
    rows = 0;
    const char *j = "{\"path\":\"a\",\"label\":1}\n{\"path\":\"b\",\"label\":1}\n{\"path\":\"c\",\"label\":1}\n";
    CHECK_EQ(sl__manifest_parse_jsonl(j, strlen(j), stop_row, &rows, err, sizeof err), SL_EBUDGET);
    CHECK_EQ(rows, 2);
}

/* ---- open errors -------------------------------------------------------- */

TEST(error_missing) {
    fixture();
    open_fails(P("nope"), SL_ENOENT, "no such file or folder");
    open_fails(P("nope.csv"), SL_ENOENT, "no such file or folder");
    open_fails("", SL_EINVAL, "no dataset path");
}

TEST(error_not_a_dataset) {
    fixture();
    put_file("x.txt", "hello");
    open_fails(P("x.txt"), SL_EINVAL, "neither a folder, a .csv/.jsonl manifest nor .tar shards");
}

/* A manifest's or a shard's name on a FIFO, a device or a socket: said
 * so (never opened: a FIFO would block, /dev/zero never end), not the
 * "neither a folder, ..." of an unknown name. */
TEST(error_special_file_with_a_dataset_name) {
    fixture();
    CHECK_OK(mkfifo(P("m.jsonl"), 0600));
    open_fails(P("m.jsonl"), SL_EINVAL, "m.jsonl is a FIFO, not a regular file");
    CHECK_OK(symlink("/dev/zero", P("z.csv")));
    open_fails(P("z.csv"), SL_EINVAL, "z.csv is a character device, not a regular file");
    CHECK_OK(mkfifo(P("s.tar"), 0600));
    open_fails(P("s.tar"), SL_EINVAL, "s.tar is a FIFO, not a regular file");
}

TEST(error_empty_folder) {
    fixture();
    put_dir("empty");
    open_fails(P("empty"), SL_EEMPTY, "no class folders");
    put_file("flat/a.jpg", "");
    open_fails(P("flat"), SL_EEMPTY, "no class folders");
    put_file("noimg/cls/a.txt", "");
    put_dir("noimg/cls2");
    open_fails(P("noimg"), SL_EEMPTY, "no image files in 2 class folders");
}

TEST(error_empty_manifest) {
    fixture();
    put_file("e.csv", "");
    open_fails(P("e.csv"), SL_EEMPTY, "lists no samples");
    put_file("h.csv", "path,label\n\n");
    open_fails(P("h.csv"), SL_EEMPTY, "lists no samples");
    put_file("e.jsonl", "\n  \n");
    open_fails(P("e.jsonl"), SL_EEMPTY, "lists no samples");
}

TEST(error_parse_names_line) {
    fixture();
    put_file("bad.csv", "path,label\na.jpg,1\nb.jpg,x\n");
    open_fails(P("bad.csv"), SL_EPARSE, "bad.csv: line 3: label \"x\"");
    put_file("bad.jsonl", "{\"path\":\"a\",\"label\":1}\n\n{\"path\":\"a\",\"label\":1\n");
    open_fails(P("bad.jsonl"), SL_EPARSE, "bad.jsonl: line 3:");
}

TEST(error_budget_folder) {
    fixture();
    char rel[64];
    for (int i = 0; i < 2000; i++) {
        snprintf(rel, sizeof rel, "big/c%d/a_rather_long_file_name_%06d.jpg", i % 2, i);
        put_file(rel, "");
    }
    sl__budget b;
    sl__budget_init(&b, 48 << 10); /* less than the index of 2000 names */
    sl__source *s = NULL;
    char err[512] = "";
    int rc = sl__source_open(&b, P("big"), 2, &s, err, sizeof err);
    if (rc != SL_EBUDGET) SL_FAIL("rc %d (%s): %s", rc, sl_strerror(rc), err);
    CHECK(s == NULL);
    CHECK_STR_CONTAINS(err, "the index needs more than");
    CHECK_STR_CONTAINS(err, "budget is 48.0 KiB");
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
    /* And a budget that holds it works. */
    sl__budget_init(&b, 8 * MB);
    open_ok(&b, P("big"), 2, &s);
    CHECK_EQ(sl__source_count(s), 2000);
    CHECK_LE(atomic_load(&b.used), 8 * MB);
    sl__source_close(s);
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
}

TEST(error_budget_manifest) {
    fixture();
    FILE *f = fopen(P("big.csv"), "w");
    for (int i = 0; i < 5000; i++) fprintf(f, "some/folder/file_%06d.jpg,%d\n", i, i % 10);
    fclose(f);
    sl__budget b;
    sl__budget_init(&b, 64 << 10); /* less than the text */
    sl__source *s = NULL;
    char err[512] = "";
    CHECK_EQ(sl__source_open(&b, P("big.csv"), 1, &s, err, sizeof err), SL_EBUDGET);
    CHECK_STR_CONTAINS(err, "budget is 64.0 KiB");
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
    sl__budget_init(&b, 300 << 10); /* holds the text, not text + index */
    CHECK_EQ(sl__source_open(&b, P("big.csv"), 1, &s, err, sizeof err), SL_EBUDGET);
    CHECK_STR_CONTAINS(err, "the index of 5000 samples needs 249.0 KiB; the budget is 300.0 KiB with 14");
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
}

/* Fail allocation n = 0, 1, 2, ... until open succeeds: each failure is a
 * clean code with nothing left counted. */
TEST(alloc_failure_folder) {
    fixture();
    size_t n;
    make_tree(&n);
    fail_each_alloc(P("data"), 1, n);
}

TEST(alloc_failure_folder_threads) {
    fixture();
    size_t n;
    make_tree(&n);
    fail_each_alloc(P("data"), 3, n);
}

TEST(alloc_failure_manifests) {
    fixture();
    FILE *f = fopen(P("m.csv"), "w");
    for (int i = 0; i < 300; i++) fprintf(f, "f_%d.jpg,%d\n", i, i);
    fclose(f);
    f = fopen(P("m.jsonl"), "w");
    for (int i = 0; i < 300; i++) fprintf(f, "{\"path\": \"f_%d.jpg\", \"label\": %d}\n", i, i);
    fclose(f);
    fail_each_alloc(P("m.csv"), 1, 300);
    fail_each_alloc(P("m.jsonl"), 1, 300);
}

/* ---- samples ------------------------------------------------------------ */

TEST(sample_read) {
    fixture();
    put_file("s/c/a.jpg", "hello bytes");
    put_file("s/c/empty.jpg", "");
    sl__budget b;
    sl__budget_init(&b, 64 * MB);
    sl__source *s;
    open_ok(&b, P("s"), 1, &s);
    sl__sample_file f;
    char reason[128] = "", buf[64];
    CHECK_OK(sl__source_open_sample(s, 0, &f, reason, sizeof reason));
    CHECK_EQ(f.size, 11);
    CHECK_EQ(f.offset, 0);
    CHECK_OK(sl__sample_read(&f, buf, reason, sizeof reason));
    CHECK(memcmp(buf, "hello bytes", 11) == 0);
    sl__sample_close(&f);
    CHECK_EQ(f.fd, -1);
    sl__sample_close(&f); /* twice is harmless */
    CHECK_OK(sl__source_open_sample(s, 1, &f, reason, sizeof reason));
    CHECK_EQ(f.size, 0);
    CHECK_OK(sl__sample_read(&f, buf, reason, sizeof reason));
    sl__sample_close(&f);
    CHECK_EQ(sl__source_open_sample(s, 2, &f, reason, sizeof reason), SL_EINVAL);
    CHECK_EQ(f.fd, -1);
    sl__source_close(s);
    sl__budget_fini(&b);
}

TEST(sample_errors) {
    fixture();
    put_file("s/c/gone.jpg", "x");
    put_dir("s/c/dir.jpg");
    CHECK_EQ(mkfifo(P("s/c/fifo.jpg"), 0644), 0);
    put_file("s/c/shrinks.jpg", "0123456789");
    sl__budget b;
    sl__budget_init(&b, 64 * MB);
    sl__source *s;
    open_ok(&b, P("s"), 1, &s);
    /* dir.jpg is a folder: indexed as one, it holds nothing. */
    CHECK_EQ(sl__source_count(s), 3);
    char reason[128] = "", path[256];
    sl__sample_file f;
    sl__source_path(s, 1, path, sizeof path);
    CHECK_STR_CONTAINS(path, "gone.jpg");
    unlink(P("s/c/gone.jpg"));
    CHECK_EQ(sl__source_open_sample(s, 1, &f, reason, sizeof reason), SL_ENOENT);
    CHECK_STR_CONTAINS(reason, "no such file");
    CHECK_EQ(f.fd, -1);
    CHECK_EQ(sl__source_open_sample(s, 0, &f, reason, sizeof reason), SL_EIO); /* fifo: no hang */
    CHECK_STR_CONTAINS(reason, "not a regular file (a FIFO)");
    /* The file shrinks between open and read. */
    CHECK_OK(sl__source_open_sample(s, 2, &f, reason, sizeof reason));
    CHECK_EQ(f.size, 10);
    CHECK_EQ(truncate(P("s/c/shrinks.jpg"), 4), 0);
    char buf[16];
    CHECK_EQ(sl__sample_read(&f, buf, reason, sizeof reason), SL_EIO);
    CHECK_STR_CONTAINS(reason, "file shrank while reading (4 of 10 bytes)");
    sl__sample_close(&f);
    /* A folder listed in a manifest. */
    put_file("m.csv", "s/c/dir.jpg,1\nmissing.jpg,2\n");
    sl__source *m;
    open_ok(&b, P("m.csv"), 1, &m);
    CHECK_EQ(sl__source_open_sample(m, 0, &f, reason, sizeof reason), SL_EIO);
    CHECK_STR_CONTAINS(reason, "a directory");
    CHECK_EQ(sl__source_open_sample(m, 1, &f, reason, sizeof reason), SL_ENOENT);
    sl__source_close(m);
    sl__source_close(s);
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
}

TEST(path_buffer_too_small) {
    fixture();
    put_file("s/cls/abc.jpg", "");
    sl__budget b;
    sl__budget_init(&b, 64 * MB);
    sl__source *s;
    open_ok(&b, P("s"), 1, &s);
    char buf[1024];
    int full = sl__source_path(s, 0, buf, sizeof buf);
    CHECK(full > 0);
    CHECK_EQ(sl__source_path(s, 0, buf, (size_t)full + 1), full);
    CHECK_EQ(sl__source_path(s, 0, buf, (size_t)full), SL_EOVERFLOW);
    CHECK_EQ(sl__source_path(s, 0, buf, 3), SL_EOVERFLOW);
    CHECK_EQ(sl__source_path(s, 1, buf, sizeof buf), SL_EINVAL);
    CHECK_EQ(sl__source_label(s, 1), SL_EINVAL);
    sl__source_close(s);
    sl__budget_fini(&b);
}
