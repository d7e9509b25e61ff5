/*
 * S3 (s3.c): an s3:// name as a request URL (virtual-hosted, or path-style
 * under a custom endpoint), ListObjectsV2 and S3's error bodies (a bounded
 * XML reader written for hostile input).
 */
#ifndef SL_IO_S3_H
#define SL_IO_S3_H

#include <stddef.h>
#include <stdint.h>

#include "io/aws.h"

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

#endif
