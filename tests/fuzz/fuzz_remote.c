/*
 * Fuzz the parsers of the remote-I/O layer (src/io/), which read what a
 * server or a user's files send: a ListObjectsV2 page and an S3 error body
 * (the bounded XML reader, s3.c), XML character data, the AWS INI files
 * (aws.c), and URLs as a manifest row gives them (parse, resolve against a
 * manifest's URL, encode; url.c). None may crash, read outside the input or
 * write past a buffer; every key reported must be NUL-terminated at its
 * length, every resolved URL no longer than the buffer it was given.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/aws.h"
#include "io/s3.h"
#include "io/url.h"

static int on_entry(void *ctx, const sl__s3_entry *e) {
    size_t *n = ctx;
    if (strlen(e->key) != e->key_len || e->key_len == 0 || strlen(e->etag) >= 96) abort();
    return ++*n > 5000; /* a page holds 1000 */
}

static int on_prefix(void *ctx, const char *p, size_t len) {
    size_t *n = ctx;
    if (strlen(p) != len) abort();
    ++*n;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *t = (const char *)data;
    size_t n = 0;
    int truncated;
    char token[256], code[64], msg[128], out[512];
    int rc = sl__s3_parse_list(t, size, on_entry, on_prefix, &n, &truncated, token, sizeof token);
    if (rc > 1 || (rc == 0 && strlen(token) >= sizeof token)) abort();
    if (sl__s3_parse_error(t, size, code, sizeof code, msg, sizeof msg) && !code[0]) abort();
    if (strlen(code) >= sizeof code || strlen(msg) >= sizeof msg) abort();
    int k = sl__xml_text(t, size, out, sizeof out);
    if (k >= 0 && (size_t)k >= sizeof out) abort();
    int has;
    if (sl__ini_get(t, size, "default", "aws_access_key_id", out, 64, &has) == 1 && strlen(out) >= 64) abort();
    sl__ini_get(t, size, "dev", "region", out, sizeof out, &has);

    /* the input as a NUL-terminated string: a URL and a manifest row */
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = 0;
    sl__url u;
    if (sl__url_parse(s, &u, out, sizeof out) == 0 && u.auth + u.auth_len > s + strlen(s)) abort();
    int m = sl__url_resolve("s3://bucket/dir/m.jsonl", s, out, sizeof out);
    if (m >= 0 && ((size_t)m >= sizeof out || strlen(out) != (size_t)m)) abort();
    m = sl__url_resolve("http://127.0.0.1:8000/a/b/m.csv?x=1", s, out, 64);
    if (m >= 0 && (size_t)m >= 64) abort();
    m = sl__url_encode(s, strlen(s), "/", out, sizeof out);
    if (m >= 0 && strlen(out) != (size_t)m) abort();
    sl__aws a;
    memset(&a, 0, sizeof a);
    snprintf(a.region, sizeof a.region, "us-east-1");
    if (sl__url_scheme(s) == SL__URL_S3) sl__s3_request_url(&a, s, "list-type=2", out, sizeof out);
    free(s);
    return 0;
}
