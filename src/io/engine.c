/*
 * The engine (engine.h): one I/O thread drives libcurl's multi
 * interface for every request of a source.
 *
 * A request (sl__io_req, the caller's) is queued under mu, then owned by
 * the thread: it gets a transfer (a slot: an easy handle and its state)
 * when one is free, at most `requests` transfers exist, and a request may
 * hold two (a hedge). Its bytes land in the caller's buffer at their
 * offset; both transfers of a hedged request write the same bytes of the
 * same version (If-Match), so whichever finishes completes it and the
 * other is removed before done is published. Callbacks run on the thread,
 * inside curl_multi_perform, without mu.
 *
 * A failed attempt is classified (classify): done for good (404, 403, 412,
 * a server that ignores Range...) or retried after a backoff with full
 * jitter (a delay drawn uniformly from [0, min(5 s, 50 ms x 2^attempt))),
 * from the first byte not yet received: 5xx, 429, S3's SlowDown and
 * RequestTimeout, connection failures, resets, bodies cut short, and an
 * attempt that received nothing for timeout_ms (our own stall check, to
 * the millisecond). A request that keeps failing ends with the last
 * failure's reason and the number of attempts.
 *
 * Hedging: the thread keeps moving averages of the time to the first byte
 * and of the transfer rate of finished attempts; a request whose only
 * transfer has run longer than three times what those predict for its
 * size (and at least 20 ms), while a slot is free, gets a duplicate for
 * the bytes it still lacks. A read held up by one slow server or
 * connection then costs about one ordinary read more, not a timeout.
 *
 * Locks: mu protects the queue, each request's state and cancel flags,
 * stop; cv signals done. The thread holds mu only to move requests in and
 * out, never across a libcurl call. Lock order: a caller's locks, then mu.
 *
 * Fork: a child of fork() has no I/O thread and shares the parent's
 * sockets (and TLS sessions): sl__io_free there gives back the counted
 * memory and touches neither libcurl nor a lock.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/thread.h"
#include "base/util.h"
#include "io/aws.h"
#include "io/engine.h"
#include "io/s3.h"
#include "io/url.h"

uint64_t sl__io_reserve(uint32_t requests) { return (uint64_t)requests * SL__IO_SLOT_BYTES + (64 << 10); }

#ifndef SL_HAVE_CURL

static const char no_curl[] =
    "this sluice was built without libcurl: s3:// and http(s):// sources need it (Debian/Ubuntu: apt-get install "
    "libcurl4-openssl-dev, then rebuild)";

int sl__io_new(sl__budget *b, const sl__io_opts *o, sl__io **out, char *err, size_t errlen) {
    *out = NULL;
    sl__msg(err, errlen, "%s", no_curl);
    return SL_EUNSUPPORTED;
}
void sl__io_cancel(sl__io *io) {}
void sl__io_free(sl__io *io) {}
void sl__io_stats_get(const sl__io *io, sl__io_stats *out) { memset(out, 0, sizeof *out); }
const sl__aws *sl__io_aws(const sl__io *io) { return NULL; }
void sl__io_submit(sl__io *io, sl__io_req *r) {
    r->rc = SL_EUNSUPPORTED;
    r->state = 3;
    sl__msg(r->reason, sizeof r->reason, "built without libcurl");
}
int sl__io_wait(sl__io *io, sl__io_req *r) { return r->rc; }
int sl__io_done(sl__io *io, sl__io_req *r) { return 1; }
void sl__io_abandon(sl__io *io, sl__io_req *r) {}
uint64_t sl__io_curl_heap(void) { return 0; }
void sl__io_version(char *buf, size_t len) { snprintf(buf, len, "off"); }

#else

#include <curl/curl.h>

typedef unsigned long long ull;

enum { R_QUEUED = 1, R_ACTIVE = 2, R_DONE = 3 };

#define BACKOFF_BASE_NS ((uint64_t)50 * 1000000)
#define BACKOFF_CAP_NS ((uint64_t)5000 * 1000000)
#define HEDGE_MIN_NS ((uint64_t)20 * 1000000)
#define HEDGE_HISTORY 8 /* finished attempts before the averages are trusted */
#define ERRBODY 1024
/* the SHA-256 of nothing: a GET's payload hash */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

typedef struct transfer {
    struct sl__io *io;
    CURL *easy;
    struct curl_slist *hdrs;
    sl__io_req *req;          /* NULL: free */
    struct transfer *next;    /* free list */
    int hedge;
    uint64_t start;           /* absolute offset this attempt asked from */
    uint64_t want;            /* bytes asked (SL__IO_TO_END: to the end) */
    uint64_t got;             /* body bytes written */
    uint64_t t_start, t_first, t_last;
    long status;
    int body;                 /* the body began (status and headers checked) */
    int fail;                 /* our own reason to stop it: F_* */
    uint64_t cr_start, cr_total; /* Content-Range: first byte, total (UINT64_MAX: none) */
    uint64_t clen;            /* Content-Length (UINT64_MAX: none) */
    char etag[96];
    char region[64];          /* x-amz-bucket-region */
    char errbody[ERRBODY];
    size_t errlen;
    char url[SL__URL_MAX];
    char range[48];
    char ifmatch[112];
    char token_hdr[2100];
} transfer;

enum { F_NONE = 0, F_RANGE_IGNORED, F_TOO_LONG, F_ALLOC, F_BAD_RANGE, F_NO_LENGTH, F_STALL, F_PROBED };

struct sl__io {
    sl__budget *b;
    uint64_t reserved;        /* SL_MEM_IO held for the engine's life */
    sl__aws aws;
    int aws_rc;               /* the AWS configuration could not be read: s3:// requests fail with aws_err */
    char aws_err[300];
    uint32_t nslots, retries;
    uint64_t timeout_ns;
    int hedge;
    long pid;                 /* the process that made it */
    CURLM *multi;
    pthread_t thread;
    int thread_on;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sl__io_req *q_head, *q_tail; /* queued (mu) */
    int stop;                 /* (mu) */
    int closing;              /* sl__io_cancel was called: everything fails at once (mu) */
    /* the thread's own */
    transfer *slots, *free;
    uint32_t busy;            /* transfers in use */
    sl__io_req *pend_head, *pend_tail; /* taken from the queue, or waiting out a backoff */
    sl__io_req *active;       /* with a transfer (linked by next) */
    uint64_t rng;
    double ttfb_ns, ns_per_byte; /* moving averages of finished attempts */
    uint32_t history;
    /* counters (any thread) */
    _Atomic uint64_t n_requests, n_bytes, n_retries, n_hedges, n_hedge_wins, n_failures, n_timeouts;
    _Atomic uint32_t inflight, inflight_peak;
};

/* ---- libcurl's heap, counted ------------------------------------------------------ */

static _Atomic uint64_t curl_heap; /* bytes libcurl holds now, process-wide (when our allocator is its) */

static void *c_malloc(size_t n) {
    void *p = malloc(n);
    if (p) atomic_fetch_add_explicit(&curl_heap, malloc_usable_size(p), memory_order_relaxed);
    return p;
}
static void c_free(void *p) {
    if (p) atomic_fetch_sub_explicit(&curl_heap, malloc_usable_size(p), memory_order_relaxed);
    free(p);
}
static void *c_realloc(void *p, size_t n) {
    size_t old = p ? malloc_usable_size(p) : 0;
    void *q = realloc(p, n);
    if (q) {
        atomic_fetch_sub_explicit(&curl_heap, old, memory_order_relaxed);
        atomic_fetch_add_explicit(&curl_heap, malloc_usable_size(q), memory_order_relaxed);
    }
    return q;
}
static char *c_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = c_malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}
static void *c_calloc(size_t a, size_t b) {
    void *p = calloc(a, b);
    if (p) atomic_fetch_add_explicit(&curl_heap, malloc_usable_size(p), memory_order_relaxed);
    return p;
}

uint64_t sl__io_curl_heap(void) { return atomic_load(&curl_heap); }

void sl__io_version(char *buf, size_t len) {
    const curl_version_info_data *v = curl_version_info(CURLVERSION_NOW);
    snprintf(buf, len, "libcurl %s%s%s%s", v->version, v->ssl_version ? " (" : "", v->ssl_version ? v->ssl_version : "",
             v->ssl_version ? ")" : "");
    for (char *p = buf; *p; p++)
        if (*p == ';' || *p == '=') *p = ' ';
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;
static void curl_init(void) {
    /* Our allocator, so what libcurl holds can be measured against what the
     * engine reserves; a process that initialised libcurl before us keeps
     * its own (then nothing is counted here, and the reservation stands). */
    curl_init_rc = curl_global_init_mem(CURL_GLOBAL_DEFAULT, c_malloc, c_free, c_realloc, c_strdup, c_calloc);
}

/* ---- small helpers ----------------------------------------------------------------- */

static uint64_t rnd(sl__io *io) { /* xorshift64*: jitter only, never bytes */
    io->rng ^= io->rng >> 12;
    io->rng ^= io->rng << 25;
    io->rng ^= io->rng >> 27;
    return io->rng * 2685821657736338717ull;
}

static void list_push(sl__io_req **head, sl__io_req **tail, sl__io_req *r) {
    r->next = NULL;
    if (*tail) (*tail)->next = r;
    else *head = r;
    *tail = r;
}

static void list_remove(sl__io_req **head, sl__io_req **tail, sl__io_req *r) {
    sl__io_req *prev = NULL;
    for (sl__io_req *x = *head; x; prev = x, x = x->next)
        if (x == r) {
            if (prev) prev->next = r->next;
            else *head = r->next;
            if (tail && *tail == r) *tail = prev;
            r->next = NULL;
            return;
        }
}

static void active_remove(sl__io *io, sl__io_req *r) { list_remove(&io->active, NULL, r); }

/* ---- callbacks (the I/O thread, inside curl_multi_perform) ----------------------------- */

static size_t on_header(char *h, size_t sz, size_t n, void *arg) {
    transfer *t = arg;
    size_t len = sz * n;
    t->t_last = sl__now_ns();
    if (!t->t_first) t->t_first = t->t_last;
    if (len >= 5 && !strncmp(h, "HTTP/", 5)) { /* a new response (after a 100 or a redirect): start over */
        t->cr_start = t->cr_total = t->clen = UINT64_MAX;
        t->etag[0] = t->region[0] = 0;
        return len;
    }
    const char *colon = memchr(h, ':', len);
    if (!colon) return len;
    size_t kl = (size_t)(colon - h);
    const char *v = colon + 1, *end = h + len;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' ')) end--;
    size_t vl = (size_t)(end - v);
    char val[128];
    if (vl >= sizeof val) return len;
    memcpy(val, v, vl);
    val[vl] = 0;
    if (kl == 13 && !strncasecmp(h, "content-range", 13)) {
        /* "bytes A-B/T" or "bytes * /T" */
        ull a, b, tot;
        if (sscanf(val, "bytes %llu-%llu/%llu", &a, &b, &tot) == 3) t->cr_start = a, t->cr_total = tot;
        else if (sscanf(val, "bytes */%llu", &tot) == 1) t->cr_total = tot;
    } else if (kl == 14 && !strncasecmp(h, "content-length", 14)) {
        ull c;
        if (sscanf(val, "%llu", &c) == 1) t->clen = c;
    } else if (kl == 4 && !strncasecmp(h, "etag", 4)) {
        snprintf(t->etag, sizeof t->etag, "%.95s", val);
    } else if (kl == 19 && !strncasecmp(h, "x-amz-bucket-region", 19)) {
        snprintf(t->region, sizeof t->region, "%.63s", val);
    }
    return len;
}

/* The first body bytes: check the status and range, size the buffer. 0,
 * or F_* (the transfer stops). */
static int body_begins(sl__io *io, transfer *t) {
    sl__io_req *r = t->req;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &t->status);
    t->body = 1;
    if (t->status < 200 || t->status >= 300) return 0; /* the error body is kept (errbody) */
    if (r->probe) return F_PROBED; /* the headers say it all */
    if (t->status == 206) {
        if (t->cr_start != t->start) return F_BAD_RANGE;
    } else if (t->start != 0) {
        return F_RANGE_IGNORED; /* 200 for a ranged read: the whole object would come */
    }
    if (r->upto) { /* at most len: the object may end first */
        uint64_t total = t->cr_total != UINT64_MAX ? t->cr_total : t->clen;
        if (total != UINT64_MAX) {
            r->size = total;
            if (r->len != SL__IO_TO_END && total < r->off + r->len) {
                if (total < t->start) return F_BAD_RANGE;
                r->len = total - r->off;
                t->want = total - t->start;
            }
        }
    }
    if (!r->dst) { /* size unknown until now: the buffer comes from the caller */
        uint64_t total = t->cr_total != UINT64_MAX ? t->cr_total : t->clen;
        if (total == UINT64_MAX) return F_NO_LENGTH;
        if (total < r->off) return F_BAD_RANGE;
        r->size = total;
        r->len = total - r->off;
        t->want = r->len;
        if (r->len && !(r->dst = r->alloc(r->ctx, r->len))) return F_ALLOC;
    }
    (void)io;
    return 0;
}

static size_t on_body(char *p, size_t sz, size_t n, void *arg) {
    transfer *t = arg;
    sl__io_req *r = t->req;
    size_t len = sz * n;
    t->t_last = sl__now_ns();
    if (!t->t_first) t->t_first = t->t_last;
    if (!t->body && (t->fail = body_begins(t->io, t))) return 0;
    if (t->status < 200 || t->status >= 300) { /* keep the start of an error body */
        size_t k = SL_MIN(len, sizeof t->errbody - 1 - t->errlen);
        memcpy(t->errbody + t->errlen, p, k);
        t->errlen += k;
        return len;
    }
    uint64_t at = t->start + t->got - r->off; /* where these bytes go in dst */
    uint64_t room = r->len - (at < r->len ? at : r->len);
    size_t k = len;
    if (k > room) {
        if (t->status == 200 && t->start == 0) k = (size_t)room; /* a whole object for a prefix: take the prefix */
        else return t->fail = F_TOO_LONG, 0;
    }
    if (k) memcpy(r->dst + at, p, k);
    t->got += k;
    atomic_fetch_add_explicit(&t->io->n_bytes, k, memory_order_relaxed);
    if (k < len) return t->fail = F_PROBED, 0; /* got the prefix; stop the rest */
    return len;
}

/* ---- starting, finishing ----------------------------------------------------------- */

/* The request URL of r->name into t->url. 0 or SL_EINVAL. */
static int request_url(sl__io *io, const sl__io_req *r, transfer *t) {
    int scheme = sl__url_scheme(r->name);
    if (scheme == SL__URL_S3) return sl__s3_request_url(&io->aws, r->name, r->query, t->url, sizeof t->url);
    if (scheme != SL__URL_HTTP && scheme != SL__URL_HTTPS) return SL_EINVAL;
    /* as written, with the bytes a URL cannot hold (blanks, controls, non-ASCII) encoded */
    int n = sl__url_encode(r->name, strlen(r->name), ":/?#[]@!$&'()*+,;=%", t->url, sizeof t->url);
    if (n < 0) return SL_EINVAL;
    if (r->query && *r->query) {
        size_t ql = strlen(r->query);
        if ((size_t)n + 1 + ql >= sizeof t->url) return SL_EINVAL;
        t->url[n] = strchr(t->url, '?') ? '&' : '?';
        memcpy(t->url + n + 1, r->query, ql + 1);
    }
    return 0;
}

/* Begin an attempt of r on a free transfer, from absolute offset from. 0,
 * or a code (the request fails with it). */
static int start_transfer(sl__io *io, sl__io_req *r, uint64_t from, int hedge) {
    transfer *t = io->free;
    io->free = t->next;
    uint64_t want = r->len == SL__IO_TO_END ? SL__IO_TO_END : r->off + r->len - from;
    CURL *e = t->easy;
    struct curl_slist *h = t->hdrs;
    memset(t, 0, offsetof(transfer, url));
    t->io = io;
    t->easy = e;
    t->hdrs = NULL;
    if (h) curl_slist_free_all(h);
    t->req = r;
    t->hedge = hedge;
    t->start = from;
    t->want = want;
    t->cr_start = t->cr_total = t->clen = UINT64_MAX;
    t->t_start = sl__now_ns();
    int rc = sl__url_scheme(r->name) == SL__URL_S3 && io->aws_rc ? io->aws_rc : request_url(io, r, t);
    if (!rc && !t->easy && !(t->easy = curl_easy_init())) rc = SL_ENOMEM;
    if (rc) {
        t->req = NULL;
        t->next = io->free;
        io->free = t;
        return rc;
    }
    e = t->easy;
    curl_easy_reset(e);
    curl_easy_setopt(e, CURLOPT_URL, t->url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PRIVATE, t);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)SL_MIN(io->timeout_ns / 1000000, (uint64_t)LONG_MAX));
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, NULL); /* identity: ranges are of the stored bytes */
    curl_easy_setopt(e, CURLOPT_USERAGENT, "sluice/" SL_VERSION_STRING);
    int s3 = sl__url_scheme(r->name) == SL__URL_S3;
    if (!s3) {
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
    }
    if (r->probe) snprintf(t->range, sizeof t->range, "0-0");
    else if (want == SL__IO_TO_END) snprintf(t->range, sizeof t->range, "%llu-", (ull)from);
    else snprintf(t->range, sizeof t->range, "%llu-%llu", (ull)from, (ull)(from + want - 1));
    if (r->probe || from > 0 || want != SL__IO_TO_END) curl_easy_setopt(e, CURLOPT_RANGE, t->range);
    if (r->etag && r->etag[0]) {
        snprintf(t->ifmatch, sizeof t->ifmatch, "If-Match: %s", r->etag);
        t->hdrs = curl_slist_append(t->hdrs, t->ifmatch);
    }
    if (s3 && !io->aws.anonymous) {
        char sig[96];
        snprintf(sig, sizeof sig, "aws:amz:%s:s3", io->aws.region);
        curl_easy_setopt(e, CURLOPT_AWS_SIGV4, sig);
        curl_easy_setopt(e, CURLOPT_USERNAME, io->aws.key_id);
        curl_easy_setopt(e, CURLOPT_PASSWORD, io->aws.secret);
        /* S3 wants the payload's hash; a GET's is that of nothing (libcurl
         * signs the header's value) */
        t->hdrs = curl_slist_append(t->hdrs, "x-amz-content-sha256: " EMPTY_SHA256);
        if (io->aws.token[0]) {
            snprintf(t->token_hdr, sizeof t->token_hdr, "x-amz-security-token: %s", io->aws.token);
            t->hdrs = curl_slist_append(t->hdrs, t->token_hdr);
        }
    }
    if (t->hdrs) curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->hdrs);
    if (curl_multi_add_handle(io->multi, e) != CURLM_OK) {
        t->req = NULL;
        t->next = io->free;
        io->free = t;
        return SL_ENOMEM;
    }
    if (r->tr[0] == NULL) r->tr[0] = t;
    else r->tr[1] = t;
    io->busy++;
    uint32_t now = atomic_fetch_add(&io->inflight, 1) + 1;
    if (now > atomic_load(&io->inflight_peak)) atomic_store(&io->inflight_peak, now);
    atomic_fetch_add_explicit(&io->n_requests, 1, memory_order_relaxed);
    if (hedge) atomic_fetch_add_explicit(&io->n_hedges, 1, memory_order_relaxed);
    return 0;
}

/* Take t off the multi handle and back to the free list. */
static void drop_transfer(sl__io *io, transfer *t) {
    sl__io_req *r = t->req;
    curl_multi_remove_handle(io->multi, t->easy);
    if (r->tr[0] == t) r->tr[0] = r->tr[1], r->tr[1] = NULL;
    else if (r->tr[1] == t) r->tr[1] = NULL;
    t->req = NULL;
    t->next = io->free;
    io->free = t;
    io->busy--;
    atomic_fetch_sub(&io->inflight, 1);
}

/* r is finished: its transfers dropped, done published (the caller may
 * free r from the moment mu is released). */
static void finish(sl__io *io, sl__io_req *r, int rc) {
    while (r->tr[0]) drop_transfer(io, r->tr[0]);
    active_remove(io, r);
    if (rc) atomic_fetch_add_explicit(&io->n_failures, rc != SL_ESTATE, memory_order_relaxed);
    pthread_mutex_lock(&io->mu);
    r->rc = rc;
    r->state = R_DONE;
    pthread_cond_broadcast(&io->cv);
    pthread_mutex_unlock(&io->mu);
}

/* Retry r after a backoff, from its frontier (or fail it, attempts spent). */
static void retry_or_fail(sl__io *io, sl__io_req *r, int rc, int retryable) {
    uint32_t most = r->retries ? r->retries : io->retries;
    if (!retryable || r->attempts > most) {
        if (retryable) {
            size_t at = strlen(r->reason);
            if (at + 1 < sizeof r->reason)
                snprintf(r->reason + at, sizeof r->reason - at, " (%u attempts)", r->attempts);
        }
        finish(io, r, rc);
        return;
    }
    atomic_fetch_add_explicit(&io->n_retries, 1, memory_order_relaxed);
    active_remove(io, r);
    uint64_t cap = BACKOFF_BASE_NS << SL_MIN(r->attempts, 20u);
    if (cap > BACKOFF_CAP_NS) cap = BACKOFF_CAP_NS;
    r->next_ns = sl__now_ns() + rnd(io) % cap;
    list_push(&io->pend_head, &io->pend_tail, r);
}

/* The reason for a failed attempt into r->reason; whether to retry. */
static int classify(sl__io *io, transfer *t, CURLcode cc, int *rc) {
    sl__io_req *r = t->req;
    long st = t->status;
    if (!st) curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &st);
    char code[64] = "", msg[96] = "";
    *rc = SL_EIO;
    switch (t->fail) {
    case F_RANGE_IGNORED:
        sl__msg(r->reason, sizeof r->reason, "the server ignores Range requests (HTTP 200 for bytes %s)", t->range);
        return 0;
    case F_TOO_LONG: sl__msg(r->reason, sizeof r->reason, "the server sent more bytes than asked (%s)", t->range); return 0;
    case F_BAD_RANGE: sl__msg(r->reason, sizeof r->reason, "the server answered another range than %s", t->range); return 0;
    case F_NO_LENGTH: sl__msg(r->reason, sizeof r->reason, "the server gave no size for the object"); return 0;
    case F_ALLOC:
        *rc = SL_EBUDGET;
        sl__msg(r->reason, sizeof r->reason, "no room in the budget for %llu bytes", (ull)r->len);
        return 0;
    case F_STALL:
        atomic_fetch_add_explicit(&io->n_timeouts, 1, memory_order_relaxed);
        sl__msg(r->reason, sizeof r->reason, "nothing received for %llu ms", (ull)(io->timeout_ns / 1000000));
        return 1;
    default: break;
    }
    if (cc != CURLE_OK && cc != CURLE_WRITE_ERROR && !(st >= 200 && t->body)) {
        const char *host = t->url;
        sl__msg(r->reason, sizeof r->reason, "curl: %s (%.80s)", curl_easy_strerror(cc), host);
        switch (cc) {
        case CURLE_URL_MALFORMAT:
        case CURLE_UNSUPPORTED_PROTOCOL:
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CACERT_BADFILE:
        case CURLE_TOO_MANY_REDIRECTS:
            return 0;
        default: return 1; /* connect, resolve, resets, timeouts, bodies cut short, TLS handshakes */
        }
    }
    if (st >= 200 && st < 300) { /* a body cut short (curl said so), or shorter than asked */
        sl__msg(r->reason, sizeof r->reason, "%s after %llu of %llu bytes",
                cc != CURLE_OK ? curl_easy_strerror(cc) : "the body ended", (ull)t->got,
                (ull)(t->want == SL__IO_TO_END ? r->len : t->want));
        /* a complete 206/200 whose range ends early: the object is shorter than indexed */
        return cc != CURLE_OK;
    }
    if (sl__s3_parse_error(t->errbody, t->errlen, code, sizeof code, msg, sizeof msg) && code[0])
        sl__msg(r->reason, sizeof r->reason, "HTTP %ld %s", st, code);
    else
        sl__msg(r->reason, sizeof r->reason, "HTTP %ld", st);
    if (t->region[0] && (st == 301 || st == 400 || st == 307)) {
        size_t at = strlen(r->reason);
        snprintf(r->reason + at, sizeof r->reason - at, " (the bucket is in region %s: set AWS_REGION=%s)",
                 t->region, t->region);
    }
    if (st == 404 || st == 410) *rc = SL_ENOENT;
    if (st == 412) {
        size_t at = strlen(r->reason);
        snprintf(r->reason + at, sizeof r->reason - at, ": the object changed since it was indexed");
    }
    if (st == 429 || st >= 500) return 1;
    if (st == 400 && (!strcmp(code, "RequestTimeout") || !strcmp(code, "SlowDown"))) return 1;
    return 0;
}

/* Update the averages with a finished attempt. */
static void learn(sl__io *io, const transfer *t, uint64_t now) {
    if (!t->t_first) return;
    double ttfb = (double)(t->t_first - t->t_start);
    io->ttfb_ns = io->history ? io->ttfb_ns * 0.875 + ttfb * 0.125 : ttfb;
    if (t->got >= (64 << 10) && now > t->t_first) {
        double npb = (double)(now - t->t_first) / (double)t->got;
        io->ns_per_byte = io->ns_per_byte > 0 ? io->ns_per_byte * 0.875 + npb * 0.125 : npb;
    }
    io->history++;
}

/* Transfer t ended with cc. */
static void transfer_done(sl__io *io, transfer *t, CURLcode cc) {
    sl__io_req *r = t->req;
    uint64_t now = sl__now_ns();
    if (!t->status) curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &t->status);
    uint64_t frontier = t->start + t->got;
    uint64_t end = r->len == SL__IO_TO_END ? UINT64_MAX : r->off + r->len;
    if (!t->body && t->status >= 200 && t->status < 300 && r->len == SL__IO_TO_END && !r->dst) {
        /* no body at all: an empty object (or an empty rest of one) */
        uint64_t total = t->cr_total != UINT64_MAX ? t->cr_total : t->clen;
        if (total != UINT64_MAX && total == r->off) r->size = total, r->len = 0, end = r->off;
    }
    int ok = (t->status >= 200 && t->status < 300 && (t->fail == F_NONE || t->fail == F_PROBED) &&
              (cc == CURLE_OK || t->fail == F_PROBED) && (r->probe || frontier >= end)) ||
             ((r->probe || (r->upto && t->start == r->off)) && t->status == 416);
    if ((r->probe || r->upto) && t->status == 416) {
        if (t->cr_total == UINT64_MAX) t->cr_total = 0;
        if (r->upto) r->size = t->cr_total, r->len = 0;
    }
    if (ok) {
        learn(io, t, now);
        if (r->probe) r->size = t->cr_total != UINT64_MAX ? t->cr_total : t->clen != UINT64_MAX ? t->clen : 0;
        else if (!r->size) r->size = t->cr_total != UINT64_MAX ? t->cr_total : t->clen;
        snprintf(r->etag_out, sizeof r->etag_out, "%s", t->etag);
        r->status = (int)t->status;
        r->got = r->probe ? 0 : r->len;
        if (t->hedge) atomic_fetch_add_explicit(&io->n_hedge_wins, 1, memory_order_relaxed);
        finish(io, r, 0);
        return;
    }
    r->status = (int)t->status;
    if (frontier > r->off + r->got && t->status >= 200 && t->status < 300) r->got = frontier - r->off;
    int rc, retry = classify(io, t, cc, &rc);
    drop_transfer(io, t);
    if (r->tr[0]) return; /* the other transfer goes on */
    retry_or_fail(io, r, rc, retry);
}

/* ---- the thread ------------------------------------------------------------------ */

/* Start what can start: pending requests whose backoff is over, in order. */
static void start_pending(sl__io *io, uint64_t now) {
    sl__io_req *prev = NULL, *r = io->pend_head;
    while (r && io->free) {
        sl__io_req *next = r->next;
        if (r->next_ns > now) {
            prev = r;
            r = next;
            continue;
        }
        if (prev) prev->next = next;
        else io->pend_head = next;
        if (io->pend_tail == r) io->pend_tail = prev;
        r->next = NULL;
        r->attempts++;
        if (r->len == 0 && !r->probe) {
            r->next = io->active, io->active = r;
            finish(io, r, 0);
        } else {
            r->next = io->active;
            io->active = r;
            int rc = start_transfer(io, r, r->off + r->got, 0);
            if (rc && sl__url_scheme(r->name) == SL__URL_S3 && io->aws_rc) {
                sl__msg(r->reason, sizeof r->reason, "%s", io->aws_err);
                finish(io, r, rc);
            } else if (rc) {
                sl__msg(r->reason, sizeof r->reason, "cannot make the request for %.100s (%s)", r->name,
                        sl_strerror(rc));
                finish(io, r, rc);
            }
        }
        r = next;
    }
}

/* Hedge slow reads; give up attempts that receive nothing. Returns the
 * next time either check is due. */
static uint64_t watch(sl__io *io, uint64_t now) {
    uint64_t due = now + 1000000000ull;
    int trusted = io->hedge && io->history >= HEDGE_HISTORY;
    for (sl__io_req *r = io->active, *next; r; r = next) {
        next = r->next;
        int gone = 0;
        for (int k = 0; k < 2 && !gone; k++) {
            transfer *t = r->tr[k];
            if (!t) continue;
            uint64_t last = t->t_last ? t->t_last : t->t_start;
            if (now > last && now - last >= io->timeout_ns) {
                int both = r->tr[1] != NULL;
                t->fail = F_STALL;
                transfer_done(io, t, CURLE_OPERATION_TIMEDOUT);
                gone = !both; /* r was retried or finished: not ours to look at now */
                k--;          /* the other transfer moved to tr[0] */
                continue;
            }
            if (last + io->timeout_ns < due) due = last + io->timeout_ns;
        }
        if (gone || !trusted || r->tr[1] || !r->tr[0] || ((transfer *)r->tr[0])->hedge || (!r->dst && r->len == SL__IO_TO_END)) continue;
        transfer *t = r->tr[0];
        uint64_t left = r->off + r->len - (t->start + t->got);
        double expect = io->ttfb_ns + (double)(t->want == SL__IO_TO_END ? left : t->want) * io->ns_per_byte;
        uint64_t after = SL_MAX((uint64_t)(3 * expect), HEDGE_MIN_NS);
        if (now > t->t_start && now - t->t_start >= after) {
            if (io->free && start_transfer(io, r, t->start + t->got, 1) == 0) continue;
        } else if (t->t_start + after < due) {
            due = t->t_start + after;
        }
    }
    return due;
}

/* Fail every request with SL_ESTATE (closing), those the thread holds. */
static void fail_held(sl__io *io) {
    while (io->active) {
        sl__msg(io->active->reason, sizeof io->active->reason, "closing");
        finish(io, io->active, SL_ESTATE);
    }
    while (io->pend_head) {
        sl__io_req *r = io->pend_head;
        io->pend_head = r->next;
        r->next = io->active, io->active = r;
        sl__msg(r->reason, sizeof r->reason, "closing");
        finish(io, r, SL_ESTATE);
    }
    io->pend_tail = NULL;
}

static void *io_main(void *arg) {
    sl__io *io = arg;
    for (;;) {
        pthread_mutex_lock(&io->mu);
        int stop = io->stop, closing = io->closing;
        sl__io_req *q = io->q_head;
        io->q_head = io->q_tail = NULL;
        for (sl__io_req *r = q; r; r = r->next) r->state = R_ACTIVE;
        /* cancelled requests (the flag is written under mu) */
        sl__io_req *cancelled[64];
        int nc = 0;
        for (sl__io_req *r = io->active; r && nc < 64; r = r->next)
            if (r->cancel) cancelled[nc++] = r;
        for (sl__io_req *r = io->pend_head; r && nc < 64; r = r->next)
            if (r->cancel) cancelled[nc++] = r;
        pthread_mutex_unlock(&io->mu);
        while (q) {
            sl__io_req *next = q->next;
            list_push(&io->pend_head, &io->pend_tail, q);
            q = next;
        }
        for (int i = 0; i < nc; i++) {
            sl__io_req *r = cancelled[i];
            list_remove(&io->pend_head, &io->pend_tail, r);
            active_remove(io, r);
            r->next = io->active, io->active = r;
            sl__msg(r->reason, sizeof r->reason, "cancelled");
            finish(io, r, SL_ESTATE);
        }
        if (stop || closing) {
            fail_held(io);
            if (stop) break;
        }
        uint64_t now = sl__now_ns();
        start_pending(io, now);
        int running = 0;
        curl_multi_perform(io->multi, &running);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(io->multi, &left))) {
            if (m->msg != CURLMSG_DONE) continue;
            transfer *t = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&t);
            if (t && t->req) transfer_done(io, t, m->data.result);
        }
        now = sl__now_ns();
        start_pending(io, now); /* slots freed above */
        uint64_t due = watch(io, now);
        for (sl__io_req *r = io->pend_head; r; r = r->next)
            if (r->next_ns < due) due = r->next_ns;
        long ct = -1;
        curl_multi_timeout(io->multi, &ct);
        uint64_t wait_ms = due > now ? (due - now + 999999) / 1000000 : 0;
        if (ct >= 0 && (uint64_t)ct < wait_ms) wait_ms = (uint64_t)ct;
        if (io->pend_head && !io->free) wait_ms = SL_MIN(wait_ms, (uint64_t)1000);
        curl_multi_poll(io->multi, NULL, 0, (int)SL_MIN(wait_ms, (uint64_t)1000), NULL);
    }
    return NULL;
}

/* ---- the public side ------------------------------------------------------------- */

int sl__io_new(sl__budget *b, const sl__io_opts *o, sl__io **out, char *err, size_t errlen) {
    *out = NULL;
    sl__io_opts d = {0};
    if (!o) o = &d;
    uint32_t n = o->requests ? o->requests : SL__IO_REQUESTS;
    if (n > SL__IO_REQUESTS_MAX) {
        sl__msg(err, errlen, "io_requests %u is over %d", n, SL__IO_REQUESTS_MAX);
        return SL_EINVAL;
    }
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) {
        sl__msg(err, errlen, "libcurl did not initialise: %s", curl_easy_strerror(curl_init_rc));
        return SL_ESYS;
    }
    uint64_t reserve = sl__io_reserve(n);
    if (sl__budget_try(b, reserve, SL_MEM_IO)) {
        char b1[32], b2[32];
        sl__msg(err, errlen, "the budget (%s) cannot hold %u requests in flight (%s for their state and "
                "libcurl's); raise the budget or lower io_requests",
                sl__fmt_bytes(sl__budget_limit(b), b1, sizeof b1), n, sl__fmt_bytes(reserve, b2, sizeof b2));
        return SL_EBUDGET;
    }
    /* the record and the slots: plain allocations inside the reserve */
    sl__io *io = calloc(1, sizeof *io);
    transfer *slots = io ? calloc(n, sizeof *slots) : NULL;
    if (!slots) {
        free(io);
        sl__budget_release(b, reserve, SL_MEM_IO);
        sl__msg(err, errlen, "out of memory for the I/O engine");
        return SL_ENOMEM;
    }
    _Static_assert(sizeof(transfer) < SL__IO_SLOT_BYTES / 8, "a slot's record is a small part of its reserve");
    io->b = b;
    io->reserved = reserve;
    io->slots = slots;
    io->nslots = n;
    io->retries = o->retries ? o->retries : 8;
    io->timeout_ns = (uint64_t)(o->timeout_ms ? o->timeout_ms : 30000) * 1000000;
    io->hedge = !o->no_hedge;
    io->pid = (long)getpid();
    io->rng = sl__now_ns() ^ ((uint64_t)(uintptr_t)io << 16) ^ (uint64_t)io->pid;
    if (!io->rng) io->rng = 1;
    for (uint32_t i = 0; i < n; i++) {
        slots[i].next = io->free;
        io->free = &slots[i];
    }
    /* the AWS configuration: a fault in it fails s3:// requests only (an
     * http(s) source does not depend on it) */
    int rc = sl__aws_load(&io->aws, b, io->aws_err, sizeof io->aws_err);
    if (rc == SL_EBUDGET) {
        sl__msg(err, errlen, "%s", io->aws_err);
        goto fail;
    }
    io->aws_rc = rc;
    if (!(io->multi = curl_multi_init())) {
        rc = SL_ENOMEM;
        sl__msg(err, errlen, "libcurl could not make a multi handle");
        goto fail;
    }
    curl_multi_setopt(io->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)n);
    curl_multi_setopt(io->multi, CURLMOPT_MAXCONNECTS, (long)n);
    if (pthread_mutex_init(&io->mu, NULL) || pthread_cond_init(&io->cv, NULL)) {
        rc = SL_ESYS;
        goto fail;
    }
    /* the library's one thread start (base/thread.h): asynchronous signals
     * blocked, so they go to the caller's threads (libcurl's resolver
     * threads inherit the mask) */
    int prc = sl__thread_start(&io->thread, io_main, io, 0, "sl-io");
    if (prc) {
        pthread_mutex_destroy(&io->mu);
        pthread_cond_destroy(&io->cv);
        rc = SL_ESYS;
        sl__msg(err, errlen, "could not start the I/O thread");
        goto fail;
    }
    io->thread_on = 1;
    *out = io;
    return 0;
fail:
    if (io->multi) curl_multi_cleanup(io->multi);
    free(io->slots);
    free(io);
    sl__budget_release(b, reserve, SL_MEM_IO);
    return rc;
}

void sl__io_cancel(sl__io *io) {
    if (!io || (long)getpid() != io->pid) return;
    pthread_mutex_lock(&io->mu);
    io->closing = 1;
    /* queued ones never reach the thread */
    while (io->q_head) {
        sl__io_req *r = io->q_head;
        io->q_head = r->next;
        sl__msg(r->reason, sizeof r->reason, "closing");
        r->rc = SL_ESTATE;
        r->state = R_DONE;
    }
    io->q_tail = NULL;
    pthread_cond_broadcast(&io->cv);
    pthread_mutex_unlock(&io->mu);
    curl_multi_wakeup(io->multi);
}

void sl__io_free(sl__io *io) {
    if (!io) return;
    sl__budget *b = io->b;
    uint64_t reserve = io->reserved;
    if ((long)getpid() != io->pid) { /* a child of fork(): the parent's libcurl state and sockets stay */
        free(io->slots);
        free(io);
        sl__budget_release(b, reserve, SL_MEM_IO);
        return;
    }
    if (io->thread_on) {
        pthread_mutex_lock(&io->mu);
        io->stop = 1;
        pthread_mutex_unlock(&io->mu);
        curl_multi_wakeup(io->multi);
        pthread_join(io->thread, NULL);
        pthread_mutex_destroy(&io->mu);
        pthread_cond_destroy(&io->cv);
    }
    for (uint32_t i = 0; i < io->nslots; i++) {
        if (io->slots[i].easy) curl_easy_cleanup(io->slots[i].easy);
        if (io->slots[i].hdrs) curl_slist_free_all(io->slots[i].hdrs);
    }
    if (io->multi) curl_multi_cleanup(io->multi);
    free(io->slots);
    free(io);
    sl__budget_release(b, reserve, SL_MEM_IO);
}

void sl__io_stats_get(const sl__io *cio, sl__io_stats *o) {
    memset(o, 0, sizeof *o);
    if (!cio) return;
    sl__io *io = (sl__io *)cio;
    o->requests = atomic_load(&io->n_requests);
    o->bytes = atomic_load(&io->n_bytes);
    o->retries = atomic_load(&io->n_retries);
    o->hedges = atomic_load(&io->n_hedges);
    o->hedge_wins = atomic_load(&io->n_hedge_wins);
    o->failures = atomic_load(&io->n_failures);
    o->timeouts = atomic_load(&io->n_timeouts);
    o->inflight = atomic_load(&io->inflight);
    o->inflight_peak = atomic_load(&io->inflight_peak);
}

const sl__aws *sl__io_aws(const sl__io *io) { return io ? &io->aws : NULL; }

void sl__io_submit(sl__io *io, sl__io_req *r) {
    r->rc = 0;
    r->status = 0;
    r->reason[0] = 0;
    r->etag_out[0] = 0;
    r->got = 0;
    r->size = 0;
    r->cancel = 0;
    r->attempts = 0;
    r->next_ns = 0;
    r->tr[0] = r->tr[1] = NULL;
    r->done_arg = io;
    r->t_submit = sl__now_ns();
    pthread_mutex_lock(&io->mu);
    if (io->closing || io->stop) {
        sl__msg(r->reason, sizeof r->reason, "closing");
        r->rc = SL_ESTATE;
        r->state = R_DONE;
        pthread_mutex_unlock(&io->mu);
        return;
    }
    r->state = R_QUEUED;
    list_push(&io->q_head, &io->q_tail, r);
    pthread_mutex_unlock(&io->mu);
    curl_multi_wakeup(io->multi);
}

int sl__io_wait(sl__io *io, sl__io_req *r) {
    pthread_mutex_lock(&io->mu);
    while (r->state != R_DONE) pthread_cond_wait(&io->cv, &io->mu);
    pthread_mutex_unlock(&io->mu);
    return r->rc;
}

int sl__io_done(sl__io *io, sl__io_req *r) {
    pthread_mutex_lock(&io->mu);
    int d = r->state == R_DONE;
    pthread_mutex_unlock(&io->mu);
    return d;
}

void sl__io_abandon(sl__io *io, sl__io_req *r) {
    pthread_mutex_lock(&io->mu);
    if (r->state == R_QUEUED) { /* still in the queue: the thread has not seen it */
        list_remove(&io->q_head, &io->q_tail, r);
        sl__msg(r->reason, sizeof r->reason, "cancelled");
        r->rc = SL_ESTATE;
        r->state = R_DONE;
    } else if (r->state != R_DONE) {
        r->cancel = 1;
        pthread_mutex_unlock(&io->mu);
        curl_multi_wakeup(io->multi);
        pthread_mutex_lock(&io->mu);
        while (r->state != R_DONE) pthread_cond_wait(&io->cv, &io->mu);
    }
    pthread_mutex_unlock(&io->mu);
}

#endif /* SL_HAVE_CURL */
