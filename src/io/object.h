/*
 * Objects (object.c): what sources need of a remote object: its size, a
 * read of a range, the whole text of a manifest, the keys under a prefix,
 * and the sentence for a failed request. Each is one or a few requests
 * through the engine (engine.h), waited for on the caller's thread.
 */
#ifndef SL_IO_OBJECT_H
#define SL_IO_OBJECT_H

#include <stddef.h>
#include <stdint.h>

#include "base/mem.h"
#include "io/engine.h"
#include "io/s3.h"

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

#endif
