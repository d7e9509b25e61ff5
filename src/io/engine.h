/*
 * The engine (engine.c): one I/O thread driving libcurl's multi interface,
 * a pool of requests in flight sized on its own (not by the decode
 * workers), ranged GETs written straight into the caller's buffer, retries
 * with backoff and jitter, a duplicate request for a read slower than
 * expected (hedging), stall timeouts, counters.
 *
 * Memory. Every byte the I/O layer holds is counted in the caller's
 * budget: the engine's request slots and libcurl's state behind them under
 * SL_MEM_IO (reserved whole when the engine starts, held for its life),
 * listing and manifest text (object.h) under the category the caller
 * names, read-ahead buffers (readahead.h) under SL_MEM_IO. A read lands in
 * the caller's buffer (counted by the caller); nothing is staged on the way.
 *
 * Built without libcurl (SL_HAVE_CURL unset), every remote call fails with
 * SL_EUNSUPPORTED and a sentence saying how to get it; names are still
 * recognised (url.h), so a URL is never mistaken for a missing local file.
 */
#ifndef SL_IO_ENGINE_H
#define SL_IO_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "base/mem.h"
#include "io/aws.h"

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

#endif
