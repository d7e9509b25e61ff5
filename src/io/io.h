/*
 * The I/O layer: objects that live elsewhere, named by URL (s3://bucket/key,
 * http://host/path, https://host/path), read through libcurl (docs/remote.md).
 * A local path never comes here: sources keep their descriptors and preads.
 *
 *  url.c     names: which scheme, a URL's parts, resolving a manifest's
 *            relative paths against its URL, percent-encoding.
 *  aws.c     credentials, region and endpoint the way the AWS tools take them
 *            (environment, ~/.aws/credentials, ~/.aws/config, AWS_PROFILE).
 *  s3.c      an s3:// name as a request URL (virtual-hosted, or path-style
 *            under a custom endpoint), ListObjectsV2 and S3's error bodies
 *            (a bounded XML reader written for hostile input).
 *  engine.c  the engine: one I/O thread driving libcurl's multi interface,
 *            a pool of requests in flight sized on its own (not by the decode
 *            workers), ranged GETs written straight into the caller's buffer,
 *            retries with backoff and jitter, a duplicate request for a read
 *            slower than expected (hedging), stall timeouts, counters.
 *  object.c  what sources need of an object: its size, a read of a range, the
 *            whole text of a manifest, the keys under a prefix.
 *
 * Layering: io/ includes base/ only; source/ (and above) include io/.
 *
 * Memory. Every byte the layer holds is counted in the caller's budget: the
 * engine's request slots and libcurl's state behind them under SL_MEM_IO
 * (reserved whole when the engine starts, held for its life), listing and
 * manifest text under the category the caller names. A read lands in the
 * caller's buffer (counted by the caller); nothing is staged on the way.
 *
 * Built without libcurl (SL_HAVE_CURL unset), every remote call fails with
 * SL_EUNSUPPORTED and a sentence saying how to get it; names are still
 * recognised, so a URL is never mistaken for a missing local file.
 */
#ifndef SL_IO_H
#define SL_IO_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/mem.h"

typedef unsigned long long sl__ull;

/* ---- names (url.c) ---------------------------------------------------------- */

enum { SL__URL_NONE = 0, SL__URL_HTTP = 1, SL__URL_HTTPS = 2, SL__URL_S3 = 3 };
#define SL__URL_MAX 4096 /* bytes of a name or a request URL, NUL included */

/* The scheme path is written in (case-insensitive "s3://", "http://",
 * "https://"), or SL__URL_NONE for a local path. */
int sl__url_scheme(const char *path);

/* A URL's parts (pointers into the string parsed): scheme, authority (an
 * s3 name's bucket; a host[:port] for http), and the rest: path, with any
 * query, from its '/' (possibly empty). */
typedef struct sl__url {
    int scheme;
    const char *auth;
    size_t auth_len;
    const char *path;
    size_t path_len;
} sl__url;

/* Split name. 0, or SL_EINVAL with a reason: no scheme we read, an empty
 * authority (or a bucket name S3 would refuse), a NUL-free string over
 * SL__URL_MAX, a control byte anywhere. */
int sl__url_parse(const char *name, sl__url *u, char *err, size_t errlen);

/* Resolve ref against base (a URL naming a file, e.g. the manifest's):
 * a ref that is itself a URL is taken as is; "/a/b" replaces base's path;
 * anything else replaces base's last segment. Dot segments ("." and "..")
 * of the result's path are removed (RFC 3986, 5.2.4). Into out (len
 * bytes): its length, or SL_EOVERFLOW / SL_EINVAL. */
int sl__url_resolve(const char *base, const char *ref, char *out, size_t len);

/* Percent-encode bytes of s[0, n) into out: keep RFC 3986's unreserved
 * bytes and those in keep; every other byte becomes %XX (upper case). Its
 * length, or SL_EOVERFLOW. */
int sl__url_encode(const char *s, size_t n, const char *keep, char *out, size_t len);

/* 1 when name (a path or URL) ends, in any case, in suffix (a query after
 * '?' in an http URL is not part of it). */
int sl__url_has_suffix(const char *name, const char *suffix);

/* ---- AWS configuration (aws.c) ------------------------------------------------- */

/* What the AWS tools would use, found once when an engine starts:
 *  credentials  AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN),
 *               else the profile's aws_access_key_id / aws_secret_access_key
 *               (+ aws_session_token) in AWS_SHARED_CREDENTIALS_FILE
 *               (~/.aws/credentials), else in AWS_CONFIG_FILE (~/.aws/config);
 *               none: anonymous (unsigned requests, for public buckets)
 *  profile      AWS_PROFILE, else AWS_DEFAULT_PROFILE, else "default"
 *  region       AWS_REGION, else AWS_DEFAULT_REGION, else the profile's region
 *               in the config file, else us-east-1
 *  endpoint     AWS_ENDPOINT_URL_S3, else AWS_ENDPOINT_URL, else the profile's
 *               endpoint_url: then path-style requests (ENDPOINT/bucket/key),
 *               as MinIO, Ceph and moto need; else AWS's virtual-hosted
 *               https://bucket.s3.REGION.amazonaws.com/key
 * A profile named in AWS_PROFILE that neither file holds is an error (the
 * tools refuse it too), as is half a key pair. */
typedef struct sl__aws {
    char key_id[128], secret[256], token[2048];
    char region[64];
    char endpoint[512];   /* "" : AWS's own */
    char profile[128];
    char from[160];       /* where the credentials came from, for messages */
    int anonymous;        /* no credentials found */
    int path_style;       /* requests name the bucket in the path */
} sl__aws;

/* Fill a from the environment and the files (their text counted in b
 * under SL_MEM_IO while it is read). 0, or SL_EINVAL with a sentence (a
 * named profile missing, half a key pair, an endpoint that is not an
 * http(s) URL, a value too long), SL_EBUDGET. */
int sl__aws_load(sl__aws *a, sl__budget *b, char *err, size_t errlen);

/* The value of key in section [section] of an INI file's text[0, n) as the
 * AWS files write them ("key = value", '#' and ';' comments, sections
 * "[default]", "[profile name]", "[name]"): into out (len bytes). 1 found,
 * 0 not found, SL_EOVERFLOW (too long). has_section (may be NULL) is set
 * when the section exists. Exposed for tests and fuzzing. */
int sl__ini_get(const char *text, size_t n, const char *section, const char *key, char *out, size_t len,
                int *has_section);

/* ---- S3 (s3.c) ------------------------------------------------------------------ */

/* The request URL of s3 name "s3://bucket/key" (key may be empty: the
 * bucket itself, for listing) with query q appended when not NULL (already
 * canonical: sorted, encoded). 0, or SL_EOVERFLOW / SL_EINVAL. */
int sl__s3_request_url(const sl__aws *a, const char *name, const char *query, char *out, size_t len);

/* One listed object. */
typedef struct sl__s3_entry {
    const char *key;  /* NUL-terminated, XML entities decoded */
    size_t key_len;
    uint64_t size;
    const char *etag; /* NUL-terminated, as S3 quotes it ("..."), may be "" */
} sl__s3_entry;
typedef int (*sl__s3_entry_fn)(void *ctx, const sl__s3_entry *e);
typedef int (*sl__s3_prefix_fn)(void *ctx, const char *prefix, size_t len);

/* Parse one ListObjectsV2 page (text[0, n), not NUL-terminated): calls
 * entry per <Contents> and prefix per <CommonPrefixes>, sets *truncated and
 * the continuation token (token, tlen bytes; "" when none). 0, the
 * callbacks' nonzero code, or SL_EPARSE (not a listing, a field over its
 * limit, a size that is not a number). Allocates nothing. */
int sl__s3_parse_list(const char *text, size_t n, sl__s3_entry_fn entry, sl__s3_prefix_fn prefix, void *ctx,
                      int *truncated, char *token, size_t tlen);

/* S3's error body <Error><Code>..</Code><Message>..</Message>: code and
 * message (entities decoded, cut to fit). 1 found, 0 not an error body. */
int sl__s3_parse_error(const char *text, size_t n, char *code, size_t clen, char *msg, size_t mlen);

/* Decode XML character data text[0, n) (&amp; &lt; &gt; &quot; &apos;
 * &#N; &#xN;) into out: its length, or SL_EPARSE (a bad entity, or a NUL),
 * SL_EOVERFLOW. */
int sl__xml_text(const char *text, size_t n, char *out, size_t len);

/* ---- the engine (engine.c) -------------------------------------------------------- */

typedef struct sl__io sl__io;

typedef struct sl__io_opts {
    uint32_t requests;    /* requests in flight at once (0: SL__IO_REQUESTS) */
    uint32_t timeout_ms;  /* an attempt that receives nothing for this long is retried (0: 30 s) */
    uint32_t retries;     /* attempts after the first for a retryable failure (0: 8) */
    int no_hedge;         /* 1: never send a duplicate of a slow read */
} sl__io_opts;
#define SL__IO_REQUESTS 64
#define SL__IO_REQUESTS_MAX 1024

/* What the engine reserves in the budget (SL_MEM_IO) for `requests` slots:
 * each slot's record and libcurl's state behind it (an easy handle, its
 * receive buffer, a connection and its TLS session), measured
 * (test_io.curl_heap_within_reserve). */
uint64_t sl__io_reserve(uint32_t requests);
#define SL__IO_SLOT_BYTES ((uint64_t)160 << 10)

/* Counters, read with sl__io_stats (any thread). */
typedef struct sl__io_stats {
    uint64_t requests;     /* HTTP requests started (retries and hedges included) */
    uint64_t bytes;        /* body bytes received */
    uint64_t retries;      /* attempts repeated after a retryable failure */
    uint64_t hedges;       /* duplicates started for slow reads */
    uint64_t hedge_wins;   /* reads the duplicate finished first */
    uint64_t failures;     /* reads that failed for good */
    uint64_t timeouts;     /* attempts given up for receiving nothing */
    uint32_t inflight, inflight_peak;
} sl__io_stats;

/* Start an engine: its credentials (sl__aws_load; a fault there fails
 * every s3:// request with its sentence, not the engine: an http(s) source
 * does not depend on it), its slots and libcurl state counted under
 * SL_MEM_IO in b, its thread (every asynchronous signal blocked). 0, or
 * SL_EINVAL (io_requests), SL_EBUDGET / SL_ENOMEM, SL_ESYS,
 * SL_EUNSUPPORTED (built without libcurl). */
int sl__io_new(sl__budget *b, const sl__io_opts *o, sl__io **out, char *err, size_t errlen);
/* Fail every request queued or in flight with SL_ESTATE ("closing") and
 * every later one at once; waiters return. For a loader that stops. */
void sl__io_cancel(sl__io *io);
/* Cancel, join the thread, free. In a child of fork() (the engine's
 * thread does not exist there, and libcurl's connections are the
 * parent's): only this process's counted memory is given back; libcurl's
 * state is left as it is (it is the parent's copy). NULL is ignored. */
void sl__io_free(sl__io *io);
void sl__io_stats_get(const sl__io *io, sl__io_stats *out);
const sl__aws *sl__io_aws(const sl__io *io);

/* A read: bytes [off, off + len) of the object named name (a URL), into
 * dst. The caller owns the request and dst; the engine writes dst only
 * between submit and the moment done is seen (wait) or cancel returns. */
typedef struct sl__io_req sl__io_req;
struct sl__io_req {
    /* set by the caller */
    const char *name;     /* s3://... or http(s)://...; valid until done */
    const char *query;    /* NULL, or a query for the request URL, canonical (sorted, encoded: signed as is) */
    uint64_t off, len;    /* len SL__IO_TO_END: from off to the object's end (size unknown) */
    uint8_t *dst;         /* len bytes; NULL with len SL__IO_TO_END: alloc gives it */
    /* called on the I/O thread once the size is known (dst NULL): a buffer
     * of n bytes, or NULL to fail the read (no budget) */
    uint8_t *(*alloc)(void *ctx, uint64_t n);
    void *ctx;
    const char *etag;     /* the object as indexed ("" or NULL: any): If-Match */
    uint32_t retries;     /* 0: the engine's; else this many */
    int probe;            /* 1: a stat (bytes 0-0); size and etag come back, 416 means empty */
    int upto;             /* 1: the object may end before off + len (len and got then say where) */
    /* set by the engine once done */
    int rc;               /* 0, or SL_ENOENT (404), SL_EIO, SL_ESTATE (cancelled), SL_EBUDGET (alloc) */
    int status;           /* the last HTTP status (0: none) */
    char reason[160];     /* why it failed: "HTTP 404 NoSuchKey", "curl: Couldn't connect ..." */
    uint64_t size;        /* the object's size, from Content-Range / Content-Length */
    char etag_out[96];    /* the object's ETag ("" when the server gave none) */
    uint64_t got;         /* bytes written to dst */
    /* the engine's (under its lock, or its thread's) */
    int state, cancel;
    uint32_t attempts;
    uint64_t t_submit, next_ns;
    void *tr[2];          /* its transfers: the first, and a hedge */
    sl__io_req *next;
    void (*on_done)(sl__io_req *r, void *arg); /* NULL, or called on the I/O thread after done is set */
    void *done_arg;
};
#define SL__IO_TO_END UINT64_MAX

/* Queue r (its engine fields are reset here). Never blocks. */
void sl__io_submit(sl__io *io, sl__io_req *r);
/* Wait for r to be done: its rc. */
int sl__io_wait(sl__io *io, sl__io_req *r);
/* 1 when r is done (no wait). */
int sl__io_done(sl__io *io, sl__io_req *r);
/* Cancel r: returns once the engine no longer touches r nor its dst (r is
 * then done, SL_ESTATE unless it finished first). */
void sl__io_abandon(sl__io *io, sl__io_req *r);

/* "libcurl 7.88.1 (OpenSSL/3.0.11)", the run-time library's version and
 * TLS backend, or "off" (built without it): for sl_build_info. No ';' or
 * '=' in it. */
void sl__io_version(char *buf, size_t len);

/* Bytes libcurl holds now, process-wide, when it allocates through us
 * (the first to initialise it in the process decides): for the test that
 * holds SL__IO_SLOT_BYTES against a measurement. */
uint64_t sl__io_curl_heap(void);

/* ---- objects (object.c) -------------------------------------------------------- */

/* A remote object as a source holds it: its name and, once known, its
 * size and ETag (reads then ask for that version: If-Match). */
typedef struct sl__obj {
    sl__io *io;
    const char *name;
    uint64_t size;
    char etag[96];
} sl__obj;

/* Size and ETag of name (one request: bytes 0-0). 0, or SL_ENOENT / SL_EIO
 * / SL_EUNSUPPORTED with a sentence naming the object, the HTTP status or
 * curl's error, and what to do (credentials, region, endpoint). */
int sl__obj_stat(sl__io *io, const char *name, sl__obj *o, char *err, size_t errlen);
/* Read exactly n bytes at off into buf: 0, or the read's code with a
 * reason ("HTTP 503 SlowDown (9 attempts)"). */
int sl__obj_read(const sl__obj *o, uint64_t off, void *buf, uint64_t n, char *reason, size_t rlen);
/* The whole object, at most max bytes, into memory counted under cat in b
 * (*size bytes and a NUL); o (may be NULL) gets its size and ETag. Errors
 * as sl__obj_stat; SL_ELIMIT over max. */
int sl__obj_read_all(sl__io *io, const char *name, sl__budget *b, int cat, uint64_t max, char **out,
                     uint64_t *size, char *err, size_t errlen, sl__obj *o);
/* Every object whose key begins with prefix (an s3 name "s3://bucket/dir/"),
 * through ListObjectsV2 and its pages. With delim, objects "below" the next
 * '/' are reported once as a prefix instead (a subfolder). Keys come in
 * S3's order (UTF-8 bytes). 0, a callback's code, or the listing's failure
 * with a sentence. Page text is counted under cat in b while it is read. */
int sl__obj_list(sl__io *io, const char *prefix, int delim, sl__budget *b, int cat, sl__s3_entry_fn entry,
                 sl__s3_prefix_fn sub, void *ctx, char *err, size_t errlen);

/* The sentence for a failed request on name (create-time messages): what
 * the status or error means and how to fix it. */
void sl__obj_explain(const sl__io *io, const char *name, const sl__io_req *r, char *err, size_t errlen);

/* ---- read-ahead (readahead.c) ------------------------------------------------------
 * Files fetched before a worker asks for them (see readahead.c's head).
 * Keys are the caller's (a sample and its field); t is the file's time in
 * the order, used to drop what was passed by. */
typedef struct sl__ra sl__ra;
typedef struct sl__ra_entry sl__ra_entry;

/* What a table of `entries` records costs in the budget. */
uint64_t sl__ra_table_bytes(uint32_t entries);
/* A table of `entries` records (counted under SL_MEM_IO) whose buffers
 * together stay under cap bytes; reads go through io. 0 or SL_EBUDGET. */
int sl__ra_new(sl__budget *b, sl__io *io, uint32_t entries, uint64_t cap, sl__ra **out);
/* Drop every entry (reads in flight abandoned) and free the table. */
void sl__ra_free(sl__ra *ra);
/* In a child of fork(): give back the memory only (the reads were the
 * parent's engine's). */
void sl__ra_forget(sl__ra *ra);
/* Start reading the file of key: [off, off + size) of obj, or (obj NULL)
 * the whole object name of unknown size. 0 started, 1 on its way already,
 * SL_EBUDGET no record or no room under cap (the caller stops for now). */
int sl__ra_start(sl__ra *ra, uint64_t key, uint64_t t, const sl__obj *obj, const char *name, uint64_t off,
                 uint64_t size);
/* The entry of key, its read finished: 1 (release it after use), or 0 (no
 * such entry, or its read failed: read the file yourself). */
int sl__ra_take(sl__ra *ra, uint64_t key, sl__ra_entry **e);
/* A taken entry's bytes. */
const uint8_t *sl__ra_data(const sl__ra_entry *e, uint64_t *size);
void sl__ra_release(sl__ra *ra, sl__ra_entry *e);
/* Drop the entries not taken whose time lies outside [lo, hi]. */
void sl__ra_drop(sl__ra *ra, uint64_t lo, uint64_t hi);
/* Reads started, taken (hits) and dropped unread since creation; bytes held now (may be NULL). */
void sl__ra_stats(const sl__ra *ra, uint64_t *started, uint64_t *hits, uint64_t *dropped, uint64_t *held);

#endif
