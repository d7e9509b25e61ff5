/* ctest: tsan */
/*
 * The I/O layer (src/io/): names, the AWS configuration, S3's XML, and the
 * engine against the in-process server of httpd.h: ranged reads landing in
 * the caller's buffer, retries through 503s, bodies cut short and resets,
 * a stalled request rescued by its hedge or by the stall timeout, cancel
 * and abandon, whole-object reads inside the budget, If-Match, a server
 * that ignores Range, and what libcurl holds measured against the reserve.
 * Every check is on bytes and counters; nothing waits on a clock.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/util.h"
#include "check.h"
#include "dataset.h" /* fx_empty_dir */
#include "httpd.h"
#include "io/aws.h"
#include "io/engine.h"
#include "io/object.h"
#include "io/s3.h"
#include "io/url.h"

typedef unsigned long long ull;

/* ---- names ------------------------------------------------------------------------- */

TEST(url_scheme_and_parse) {
    CHECK_EQ(sl__url_scheme("s3://b/k"), SL__URL_S3);
    CHECK_EQ(sl__url_scheme("HTTPS://h/x"), SL__URL_HTTPS);
    CHECK_EQ(sl__url_scheme("http://h"), SL__URL_HTTP);
    CHECK_EQ(sl__url_scheme("/data/s3://x"), SL__URL_NONE);
    CHECK_EQ(sl__url_scheme("file://x"), SL__URL_NONE);
    sl__url u;
    char err[200];
    CHECK_OK(sl__url_parse("s3://my-bucket/dir/a.tar", &u, err, sizeof err));
    CHECK_EQ(u.auth_len, 9);
    CHECK(!strncmp(u.path, "/dir/a.tar", u.path_len));
    CHECK_OK(sl__url_parse("http://127.0.0.1:8000/x?y=1", &u, err, sizeof err));
    CHECK_EQ(u.auth_len, 14);
    CHECK_EQ(sl__url_parse("s3:///key", &u, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "no bucket");
    CHECK_EQ(sl__url_parse("s3://a/key", &u, err, sizeof err), SL_EINVAL); /* 1-byte bucket */
    CHECK_EQ(sl__url_parse("s3://bad_bucket!/k", &u, err, sizeof err), SL_EINVAL);
    CHECK_EQ(sl__url_parse("http://user:pw@h/x", &u, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "no credentials in a URL");
    CHECK_EQ(sl__url_parse("http://h/a\nb", &u, err, sizeof err), SL_EINVAL);
    char big[SL__URL_MAX + 16];
    memset(big, 'a', sizeof big);
    memcpy(big, "http://h/", 9);
    big[sizeof big - 1] = 0;
    CHECK_EQ(sl__url_parse(big, &u, err, sizeof err), SL_EINVAL);
}

TEST(url_resolve) {
    char out[SL__URL_MAX];
    struct {
        const char *base, *ref, *want;
    } cases[] = {
        {"s3://bkt/dir/m.jsonl", "img/a.jpg", "s3://bkt/dir/img/a.jpg"},
        {"s3://bkt/dir/m.jsonl", "../x/a.jpg", "s3://bkt/x/a.jpg"},
        {"s3://bkt/dir/m.jsonl", "./a.jpg", "s3://bkt/dir/a.jpg"},
        {"s3://bkt/dir/m.jsonl", "/top/a.jpg", "s3://bkt/top/a.jpg"},
        {"s3://bkt/m.jsonl", "../../a.jpg", "s3://bkt/a.jpg"},
        {"s3://bkt", "a.jpg", "s3://bkt/a.jpg"},
        {"http://h:80/d/m.csv?sig=1", "a b.jpg", "http://h:80/d/a b.jpg"},
        {"http://h/d/m.csv", "https://other/x.jpg", "https://other/x.jpg"},
        {"http://h/a/b/c/m.csv", "../../x/./y/../z.jpg", "http://h/a/x/z.jpg"},
        {"http://h/d/m.csv", "x/..", "http://h/d/"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n = sl__url_resolve(cases[i].base, cases[i].ref, out, sizeof out);
        if (n < 0 || strcmp(out, cases[i].want)) SL_FAIL("resolve(%s, %s) = %s (%d), want %s", cases[i].base, cases[i].ref, out, n, cases[i].want);
    }
    CHECK_EQ(sl__url_resolve("s3://bkt/m.jsonl", "a", out, 10), SL_EOVERFLOW);
    CHECK_EQ(sl__url_resolve("/local/m.jsonl", "a", out, sizeof out), SL_EINVAL);
}

TEST(url_encode_and_suffix) {
    char out[64];
    CHECK_EQ(sl__url_encode("a b/c~d%", 8, "/", out, sizeof out), 12);
    CHECK(!strcmp(out, "a%20b/c~d%25"));
    CHECK_EQ(sl__url_encode("\xc3\xa9", 2, NULL, out, sizeof out), 6);
    CHECK(!strcmp(out, "%C3%A9"));
    CHECK_EQ(sl__url_encode("abcdef", 6, NULL, out, 6), SL_EOVERFLOW);
    CHECK(sl__url_has_suffix("s3://b/x.TAR", ".tar"));
    CHECK(sl__url_has_suffix("http://h/m.jsonl?X-Amz-Signature=1", ".jsonl"));
    CHECK(!sl__url_has_suffix("http://h/m.jsonl.gz", ".jsonl"));
}

/* ---- S3 -------------------------------------------------------------------------- */

TEST(s3_request_urls) {
    sl__aws a;
    memset(&a, 0, sizeof a);
    snprintf(a.region, sizeof a.region, "eu-west-1");
    char out[SL__URL_MAX];
    CHECK_OK(sl__s3_request_url(&a, "s3://bkt/dir/a b+c.tar", NULL, out, sizeof out));
    CHECK(!strcmp(out, "https://bkt.s3.eu-west-1.amazonaws.com/dir/a%20b%2Bc.tar"));
    CHECK_OK(sl__s3_request_url(&a, "s3://my.dotted/k", NULL, out, sizeof out));
    CHECK(!strcmp(out, "https://s3.eu-west-1.amazonaws.com/my.dotted/k"));
    snprintf(a.endpoint, sizeof a.endpoint, "http://127.0.0.1:9000");
    a.path_style = 1;
    CHECK_OK(sl__s3_request_url(&a, "s3://bkt/k", NULL, out, sizeof out));
    CHECK(!strcmp(out, "http://127.0.0.1:9000/bkt/k"));
    CHECK_OK(sl__s3_request_url(&a, "s3://bkt", "list-type=2&prefix=a%2F", out, sizeof out));
    CHECK(!strcmp(out, "http://127.0.0.1:9000/bkt?list-type=2&prefix=a%2F"));
}

typedef struct listed {
    char keys[8][64];
    uint64_t sizes[8];
    char prefixes[4][64];
    int n, np;
} listed;

static int on_entry(void *ctx, const sl__s3_entry *e) {
    listed *l = ctx;
    if (l->n == 8) return 99;
    snprintf(l->keys[l->n], 64, "%s", e->key);
    l->sizes[l->n++] = e->size;
    return 0;
}
static int on_prefix(void *ctx, const char *p, size_t n) {
    listed *l = ctx;
    snprintf(l->prefixes[l->np++], 64, "%.*s", (int)n, p);
    return 0;
}

TEST(s3_list_xml) {
    static const char page[] =
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<Name>bkt</Name><Prefix>d/</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>"
        "<Contents><Key>d/a&amp;b.tar</Key><LastModified>2024-01-01T00:00:00.000Z</LastModified>"
        "<ETag>&quot;abc&quot;</ETag><Size>1536</Size><StorageClass>STANDARD</StorageClass></Contents>"
        "<Contents><Key>d/caf&#233;.tar</Key><Size>0</Size><ETag>\"e\"</ETag></Contents>"
        "<CommonPrefixes><Prefix>d/sub/</Prefix></CommonPrefixes>"
        "<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>"
        "</ListBucketResult>";
    listed l = {0};
    int trunc = 0;
    char token[256];
    CHECK_OK(sl__s3_parse_list(page, sizeof page - 1, on_entry, on_prefix, &l, &trunc, token, sizeof token));
    CHECK_EQ(l.n, 2);
    CHECK(!strcmp(l.keys[0], "d/a&b.tar"));
    CHECK_EQ(l.sizes[0], 1536);
    CHECK(!strcmp(l.keys[1], "d/caf\xc3\xa9.tar"));
    CHECK_EQ(l.np, 1);
    CHECK(!strcmp(l.prefixes[0], "d/sub/"));
    CHECK(trunc);
    CHECK(!strcmp(token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="));
    /* hostile pages: each refused, nothing read past the end */
    const char *bad[] = {
        "<Error><Code>x</Code></Error>",
        "<ListBucketResult><Contents><Key>a</Key></Contents></ListBucketResult>",             /* no size */
        "<ListBucketResult><Contents><Key>a</Key><Size>-1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>a</Key><Size>99999999999999999999</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>a&bogus;</Key><Size>1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>a&#0;</Key><Size>1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>a<b>x</b></Key><Size>1</Size></Contents></ListBucketResult>",
        "<ListBucketResult><Contents><Key>a",
        "<ListBucketResult>",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        listed m = {0};
        int rc = sl__s3_parse_list(bad[i], strlen(bad[i]), on_entry, on_prefix, &m, &trunc, token, sizeof token);
        if (rc != SL_EPARSE) SL_FAIL("page %zu: %d, want SL_EPARSE", i, rc);
    }
    /* a key of 2000 bytes: over S3's limit, refused */
    char *big = malloc(3000);
    int n = snprintf(big, 3000, "<ListBucketResult><Contents><Key>");
    memset(big + n, 'k', 2000);
    n += 2000;
    n += snprintf(big + n, 3000 - (size_t)n, "</Key><Size>1</Size></Contents></ListBucketResult>");
    listed m = {0};
    CHECK_EQ(sl__s3_parse_list(big, (size_t)n, on_entry, on_prefix, &m, &trunc, token, sizeof token), SL_EPARSE);
    free(big);
}

TEST(s3_error_xml) {
    static const char body[] = "<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code><Message>The &lt;bucket&gt; "
                               "does not exist</Message><BucketName>x</BucketName></Error>";
    char code[32], msg[64];
    CHECK_EQ(sl__s3_parse_error(body, sizeof body - 1, code, sizeof code, msg, sizeof msg), 1);
    CHECK(!strcmp(code, "NoSuchBucket"));
    CHECK(!strcmp(msg, "The <bucket> does not exist"));
    CHECK_EQ(sl__s3_parse_error("<html>nope</html>", 17, code, sizeof code, msg, sizeof msg), 0);
    CHECK_EQ(sl__s3_parse_error(body, 30, code, sizeof code, msg, sizeof msg), 0); /* cut short */
    char small[8];
    CHECK_EQ(sl__s3_parse_error(body, sizeof body - 1, code, sizeof code, small, sizeof small), 1);
    CHECK(strlen(small) < sizeof small);
}

/* ---- the AWS configuration ----------------------------------------------------------- */

static char home[256];

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    fputs(text, f);
    fclose(f);
}

static void aws_env_clean(void) {
    const char *vars[] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
                          "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL",
                          "AWS_ENDPOINT_URL_S3", "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    /* a new folder, removed at exit: one named by the pid could be an earlier run's, files and all */
    fx_empty_dir(home, sizeof home);
    char aws[300];
    snprintf(aws, sizeof aws, "%s/.aws", home);
    mkdir(aws, 0700);
    setenv("HOME", home, 1);
}

TEST(ini_sections) {
    static const char t[] = "# comment\n[default]\naws_access_key_id = AK1\n; x\n[profile dev]\nregion=eu-west-3\r\n"
                            "  nested = x\n[other]\naws_access_key_id=AK2 \n";
    char v[64];
    int has;
    CHECK_EQ(sl__ini_get(t, sizeof t - 1, "default", "aws_access_key_id", v, sizeof v, &has), 1);
    CHECK(!strcmp(v, "AK1") && has);
    CHECK_EQ(sl__ini_get(t, sizeof t - 1, "dev", "region", v, sizeof v, &has), 1);
    CHECK(!strcmp(v, "eu-west-3"));
    CHECK_EQ(sl__ini_get(t, sizeof t - 1, "other", "aws_access_key_id", v, sizeof v, &has), 1);
    CHECK(!strcmp(v, "AK2"));
    CHECK_EQ(sl__ini_get(t, sizeof t - 1, "missing", "region", v, sizeof v, &has), 0);
    CHECK(!has);
    CHECK_EQ(sl__ini_get(t, sizeof t - 1, "default", "aws_access_key_id", v, 3, &has), SL_EOVERFLOW);
}

TEST(aws_from_env_and_files) {
    aws_env_clean();
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 64 << 20));
    sl__aws a;
    char err[300];
    /* nothing: anonymous, us-east-1, AWS's endpoint */
    CHECK_OK(sl__aws_load(&a, &b, err, sizeof err));
    CHECK(a.anonymous && !strcmp(a.region, "us-east-1") && !a.path_style);
    /* the files */
    char path[400];
    snprintf(path, sizeof path, "%s/.aws/credentials", home);
    write_file(path, "[default]\naws_access_key_id = AKD\naws_secret_access_key = SKD\n[dev]\n"
                     "aws_access_key_id=AKDEV\naws_secret_access_key=SKDEV\naws_session_token=TOK\n[half]\n"
                     "aws_access_key_id=X\n");
    snprintf(path, sizeof path, "%s/.aws/config", home);
    write_file(path, "[default]\nregion = eu-central-1\n[profile dev]\nregion = ap-south-1\n"
                     "endpoint_url = http://127.0.0.1:9000/\n");
    CHECK_OK(sl__aws_load(&a, &b, err, sizeof err));
    CHECK(!a.anonymous && !strcmp(a.key_id, "AKD") && !strcmp(a.secret, "SKD") && !strcmp(a.region, "eu-central-1"));
    setenv("AWS_PROFILE", "dev", 1);
    CHECK_OK(sl__aws_load(&a, &b, err, sizeof err));
    CHECK(!strcmp(a.key_id, "AKDEV") && !strcmp(a.token, "TOK") && !strcmp(a.region, "ap-south-1"));
    CHECK(a.path_style && !strcmp(a.endpoint, "http://127.0.0.1:9000"));
    CHECK_STR_CONTAINS(a.from, "profile 'dev'");
    /* the environment wins */
    setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "SKENV", 1);
    setenv("AWS_REGION", "us-west-2", 1);
    setenv("AWS_ENDPOINT_URL", "https://minio.local:9000", 1);
    CHECK_OK(sl__aws_load(&a, &b, err, sizeof err));
    CHECK(!strcmp(a.key_id, "AKENV") && !a.token[0] && !strcmp(a.region, "us-west-2"));
    CHECK(!strcmp(a.endpoint, "https://minio.local:9000"));
    /* refusals, each with its sentence */
    unsetenv("AWS_SECRET_ACCESS_KEY");
    CHECK_EQ(sl__aws_load(&a, &b, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "AWS_SECRET_ACCESS_KEY is not");
    unsetenv("AWS_ACCESS_KEY_ID");
    setenv("AWS_PROFILE", "nope", 1);
    CHECK_EQ(sl__aws_load(&a, &b, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "profile 'nope' is in neither");
    setenv("AWS_PROFILE", "half", 1);
    CHECK_EQ(sl__aws_load(&a, &b, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "no aws_secret_access_key");
    unsetenv("AWS_PROFILE");
    setenv("AWS_ENDPOINT_URL", "ftp://x", 1);
    CHECK_EQ(sl__aws_load(&a, &b, err, sizeof err), SL_EINVAL);
    CHECK_STR_CONTAINS(err, "not an http:// or https:// URL");
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1", 1);
    setenv("AWS_REGION", "us east", 1);
    CHECK_EQ(sl__aws_load(&a, &b, err, sizeof err), SL_EINVAL);
    CHECK_EQ(atomic_load(&b.used), 0); /* the files' text was given back */
    sl__budget_fini(&b);
}

/* ---- the engine -------------------------------------------------------------------- */

/* The engine's cases need libcurl; a build without it refuses URLs (and
 * these cases have nothing to run). */
static int have_curl(void) {
    char v[96];
    sl__io_version(v, sizeof v);
    if (!strcmp(v, "off")) fprintf(stderr, "built without libcurl: nothing to test\n");
    return strcmp(v, "off") != 0;
}
#define NEED_CURL()                                                                                                  \
    do {                                                                                                             \
        if (!have_curl()) return;                                                                                    \
    } while (0)

typedef struct fixture {
    sl__budget b;
    hd_server *srv;
    sl__io *io;
    uint8_t *obj;
    size_t len;
    char url[128];
} fixture;

static void fx_up(fixture *f, size_t len, const sl__io_opts *o) {
    aws_env_clean();
    CHECK_OK(sl__budget_init(&f->b, 256 << 20));
    f->srv = hd_start();
    f->len = len;
    f->obj = malloc(len);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        f->obj[i] = (uint8_t)x;
    }
    hd_put(f->srv, "/data/obj.bin", f->obj, len);
    hd_url(f->srv, "/data/obj.bin", f->url, sizeof f->url);
    char err[300] = "";
    int rc = sl__io_new(&f->b, o, &f->io, err, sizeof err);
    if (rc) SL_FAIL("sl__io_new: %s (%s)", sl_strerror(rc), err);
}

static void fx_down(fixture *f) {
    sl__io_free(f->io);
    hd_stop(f->srv);
    free(f->obj);
    CHECK_EQ(atomic_load(&f->b.used), 0);
    sl__budget_fini(&f->b);
}

/* n reads of pseudo-random ranges, all submitted at once, then checked;
 * the engine's counters after them. */
static sl__io_stats many_reads(fixture *f, int n, uint64_t max_len) {
    sl__io_req *r = calloc((size_t)n, sizeof *r);
    uint8_t **bufs = calloc((size_t)n, sizeof *bufs);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t len = 1 + x % max_len, off = (x >> 20) % (f->len - len + 1);
        bufs[i] = malloc(len);
        r[i] = (sl__io_req){.name = f->url, .off = off, .len = len, .dst = bufs[i]};
        sl__io_submit(f->io, &r[i]);
    }
    for (int i = 0; i < n; i++) {
        int rc = sl__io_wait(f->io, &r[i]);
        if (rc) SL_FAIL("read %d [%llu, +%llu): %s: %s", i, (ull)r[i].off, (ull)r[i].len, sl_strerror(rc), r[i].reason);
        if (memcmp(bufs[i], f->obj + r[i].off, r[i].len)) SL_FAIL("read %d: wrong bytes", i);
        CHECK_EQ(r[i].size, f->len);
        free(bufs[i]);
    }
    free(bufs);
    free(r);
    sl__io_stats st;
    sl__io_stats_get(f->io, &st);
    return st;
}

TEST(engine_ranged_reads) {
    NEED_CURL();
    fixture f;
    sl__io_opts o = {.requests = 8, .no_hedge = 1}; /* one request a read: no duplicate of a slow one */
    fx_up(&f, 3 << 20, &o);
    sl__io_stats st = many_reads(&f, 200, 300 << 10);
    if (st.requests != 200)
        SL_FAIL("%llu requests for 200 reads (%llu retries, %llu hedges, %llu timeouts)", (ull)st.requests,
                (ull)st.retries, (ull)st.hedges, (ull)st.timeouts);
    CHECK_EQ(st.failures, 0);
    CHECK_LE(st.inflight_peak, 8);
    CHECK_EQ(atomic_load(&f.b.cat[SL_MEM_IO]), sl__io_reserve(8));
    fx_down(&f);
}

static void faulty(int kind, int every) {
    fixture f;
    sl__io_opts o = {.requests = 6, .retries = 20, .no_hedge = 1}; /* a fault met by a hedge would need no retry */
    fx_up(&f, 1 << 20, &o);
    hd_faults(f.srv, kind, every, 0);
    sl__io_stats st = many_reads(&f, 120, 200 << 10);
    CHECK(st.retries > 0);
    CHECK_EQ(st.failures, 0);
    fx_down(&f);
}

TEST(engine_retries_503) { NEED_CURL(); faulty(HD_503, 3); }
TEST(engine_retries_cut_bodies) { NEED_CURL(); faulty(HD_CUT, 4); }
TEST(engine_retries_resets) { NEED_CURL(); faulty(HD_RESET, 5); }

TEST(engine_not_found_and_exhausted) {
    NEED_CURL();
    fixture f;
    sl__io_opts o = {.requests = 4, .retries = 3, .no_hedge = 1};
    fx_up(&f, 4096, &o);
    char url[128], reason[200];
    uint8_t buf[16];
    sl__obj ob = {f.io, hd_url(f.srv, "/data/none.bin", url, sizeof url), 4096, ""};
    CHECK_EQ(sl__obj_read(&ob, 0, buf, 16, reason, sizeof reason), SL_ENOENT);
    CHECK_STR_CONTAINS(reason, "HTTP 404 NoSuchKey");
    hd_faults(f.srv, HD_503, 1, 0); /* every request */
    ob.name = f.url;
    CHECK_EQ(sl__obj_read(&ob, 0, buf, 16, reason, sizeof reason), SL_EIO);
    CHECK_STR_CONTAINS(reason, "HTTP 503 SlowDown (4 attempts)");
    sl__io_stats st;
    sl__io_stats_get(f.io, &st);
    CHECK_EQ(st.failures, 2);
    CHECK_EQ(st.retries, 3);
    fx_down(&f);
}

TEST(engine_hedges_a_stalled_read) {
    NEED_CURL();
    fixture f;
    sl__io_opts o = {.requests = 4, .timeout_ms = 600000}; /* only a hedge can rescue it */
    fx_up(&f, 1 << 20, &o);
    many_reads(&f, 16, 64 << 10); /* history for the averages */
    hd_faults(f.srv, HD_STALL, 1, 1); /* the next request stalls until the end */
    sl__io_stats st = many_reads(&f, 8, 64 << 10);
    CHECK_EQ(atomic_load(&f.srv->stalled), 1);
    CHECK(st.hedges >= 1);
    CHECK(st.hedge_wins >= 1);
    CHECK_EQ(st.failures, 0);
    fx_down(&f);
}

TEST(engine_stall_timeout_retries) {
    NEED_CURL();
    fixture f;
    sl__io_opts o = {.requests = 4, .timeout_ms = 300, .no_hedge = 1};
    fx_up(&f, 1 << 20, &o);
    hd_faults(f.srv, HD_STALL, 2, 3);
    sl__io_stats st = many_reads(&f, 12, 64 << 10);
    CHECK(st.timeouts >= 3);
    CHECK_EQ(st.hedges, 0);
    CHECK_EQ(st.failures, 0);
    fx_down(&f);
}

TEST(engine_cancel_and_abandon) {
    NEED_CURL();
    fixture f;
    sl__io_opts o = {.requests = 2, .timeout_ms = 600000, .no_hedge = 1};
    fx_up(&f, 1 << 20, &o);
    hd_faults(f.srv, HD_STALL, 1, 0);
    uint8_t a[100], b[100], c[100];
    sl__io_req ra = {.name = f.url, .off = 0, .len = 100, .dst = a};
    sl__io_req rb = {.name = f.url, .off = 100, .len = 100, .dst = b};
    sl__io_req rc = {.name = f.url, .off = 200, .len = 100, .dst = c};
    sl__io_submit(f.io, &ra);
    sl__io_submit(f.io, &rb);
    sl__io_submit(f.io, &rc); /* queued behind two stalled ones */
    sl__io_abandon(f.io, &ra);
    CHECK_EQ(ra.rc, SL_ESTATE);
    sl__io_cancel(f.io);
    CHECK_EQ(sl__io_wait(f.io, &rb), SL_ESTATE);
    CHECK_EQ(sl__io_wait(f.io, &rc), SL_ESTATE);
    sl__io_req rd = {.name = f.url, .off = 0, .len = 10, .dst = a};
    sl__io_submit(f.io, &rd); /* after cancel: refused at once */
    CHECK_EQ(sl__io_wait(f.io, &rd), SL_ESTATE);
    fx_down(&f);
}

TEST(engine_whole_objects_in_the_budget) {
    NEED_CURL();
    fixture f;
    fx_up(&f, 200000, NULL);
    char *text = NULL, err[300];
    uint64_t n = 0;
    uint64_t before = atomic_load(&f.b.used);
    CHECK_OK(sl__obj_read_all(f.io, f.url, &f.b, SL_MEM_INDEX, 1 << 20, &text, &n, err, sizeof err, NULL));
    CHECK_EQ(n, 200000);
    CHECK(!memcmp(text, f.obj, n) && text[n] == 0);
    CHECK_EQ(atomic_load(&f.b.cat[SL_MEM_INDEX]), sl__alloc_cost(200001));
    sl__free(&f.b, text);
    CHECK_EQ(sl__obj_read_all(f.io, f.url, &f.b, SL_MEM_INDEX, 1000, &text, &n, err, sizeof err, NULL), SL_ELIMIT);
    CHECK_STR_CONTAINS(err, "over the");
    CHECK_EQ(atomic_load(&f.b.used), before);
    hd_put(f.srv, "/empty", "", 0);
    char url[128];
    CHECK_OK(sl__obj_read_all(f.io, hd_url(f.srv, "/empty", url, sizeof url), &f.b, SL_MEM_INDEX, 1000, &text, &n,
                              err, sizeof err, NULL));
    CHECK_EQ(n, 0);
    sl__free(&f.b, text);
    sl__obj o;
    CHECK_OK(sl__obj_stat(f.io, url, &o, err, sizeof err));
    CHECK_EQ(o.size, 0);
    CHECK_OK(sl__obj_stat(f.io, f.url, &o, err, sizeof err));
    CHECK_EQ(o.size, 200000);
    CHECK(o.etag[0] == '"');
    CHECK_EQ(sl__obj_stat(f.io, hd_url(f.srv, "/nope", url, sizeof url), &o, err, sizeof err), SL_ENOENT);
    CHECK_STR_CONTAINS(err, "/nope: HTTP 404 NoSuchKey: no such object");
    fx_down(&f);
}

TEST(engine_if_match_and_ignored_ranges) {
    NEED_CURL();
    fixture f;
    fx_up(&f, 100000, NULL);
    char err[300];
    sl__obj o;
    CHECK_OK(sl__obj_stat(f.io, f.url, &o, err, sizeof err));
    uint8_t buf[1000];
    CHECK_OK(sl__obj_read(&o, 500, buf, 1000, err, sizeof err));
    CHECK(!memcmp(buf, f.obj + 500, 1000));
    f.obj[7] ^= 1; /* the object is replaced */
    hd_put(f.srv, "/data/obj.bin", f.obj, f.len);
    CHECK_EQ(sl__obj_read(&o, 500, buf, 1000, err, sizeof err), SL_EIO);
    CHECK_STR_CONTAINS(err, "HTTP 412: the object changed since it was indexed");
    o.etag[0] = 0;
    hd_faults(f.srv, HD_NORANGE, 0, 0);
    CHECK_EQ(sl__obj_read(&o, 500, buf, 1000, err, sizeof err), SL_EIO);
    CHECK_STR_CONTAINS(err, "ignores Range");
    CHECK_OK(sl__obj_read(&o, 0, buf, 1000, err, sizeof err)); /* a prefix of the whole object will do */
    CHECK(!memcmp(buf, f.obj, 1000));
    fx_down(&f);
}

TEST(engine_unreachable_and_budget) {
    NEED_CURL();
    aws_env_clean();
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 1 << 20));
    sl__io *io = NULL;
    char err[300];
    sl__io_opts o = {.requests = 64};
    CHECK_EQ(sl__io_new(&b, &o, &io, err, sizeof err), SL_EBUDGET);
    CHECK_STR_CONTAINS(err, "cannot hold 64 requests in flight");
    o.requests = 2;
    CHECK_OK(sl__io_new(&b, &o, &io, err, sizeof err));
    sl__obj ob;
    /* a port nobody listens on (bound, not listening) */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(bind(s, (struct sockaddr *)&a, sizeof a) == 0);
    socklen_t al = sizeof a;
    getsockname(s, (struct sockaddr *)&a, &al);
    char url[80];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/x.tar", ntohs(a.sin_port));
    CHECK_EQ(sl__obj_stat(io, url, &ob, err, sizeof err), SL_EIO);
    CHECK_STR_CONTAINS(err, "curl: Couldn't connect");
    CHECK_STR_CONTAINS(err, "cannot reach the server");
    close(s);
    sl__io_free(io);
    CHECK_EQ(atomic_load(&b.used), 0);
    sl__budget_fini(&b);
}

/* What libcurl holds with every slot busy on large objects stays inside the
 * engine's reserve (libcurl allocates through our counter when we are the
 * first to initialise it: this process). */
TEST(curl_heap_within_reserve) {
    NEED_CURL();
    fixture f;
    sl__io_opts o = {.requests = 32};
    fx_up(&f, 6 << 20, &o);
    uint64_t base = sl__io_curl_heap();
    CHECK(base > 0); /* counting is on */
    enum { N = 48 };
    sl__io_req r[N];
    uint8_t *bufs[N];
    uint64_t peak = 0;
    for (int i = 0; i < N; i++) {
        bufs[i] = malloc(2 << 20);
        r[i] = (sl__io_req){.name = f.url, .off = (uint64_t)(i % 4) << 20, .len = 2 << 20, .dst = bufs[i]};
        sl__io_submit(f.io, &r[i]);
    }
    for (int i = 0; i < N; i++) {
        uint64_t h = sl__io_curl_heap();
        if (h > peak) peak = h;
        CHECK_OK(sl__io_wait(f.io, &r[i]));
        CHECK(!memcmp(bufs[i], f.obj + r[i].off, r[i].len));
        free(bufs[i]);
    }
    uint64_t h = sl__io_curl_heap();
    if (h > peak) peak = h;
    sl__io_stats st;
    sl__io_stats_get(f.io, &st);
    fprintf(stderr, "libcurl heap: %llu bytes at start, peak %llu with %u in flight (reserve %llu)\n", (ull)base,
            (ull)peak, st.inflight_peak, (ull)sl__io_reserve(32));
    CHECK(st.inflight_peak >= 16);
    CHECK_LE(peak, sl__io_reserve(32));
    fx_down(&f);
}

/* Built without libcurl, a URL is refused with a sentence saying how to get it. */
TEST(without_curl_urls_are_refused) {
    if (have_curl()) return; /* the refusal only exists in a build without it */
    sl__budget b;
    CHECK_OK(sl__budget_init(&b, 64 << 20));
    sl__io *io = NULL;
    char err[300];
    CHECK_EQ(sl__io_new(&b, NULL, &io, err, sizeof err), SL_EUNSUPPORTED);
    CHECK_STR_CONTAINS(err, "libcurl4-openssl-dev");
    sl__budget_fini(&b);
}
