/*
 * Names of remote objects (url.c): which scheme, a URL's parts, resolving
 * a manifest's relative paths against its URL, percent-encoding.
 *
 * The I/O layer, src/io/ (docs/remote.md), reads objects that live
 * elsewhere, named by URL (s3://bucket/key, http://host/path,
 * https://host/path), through libcurl. A local path never comes here:
 * sources keep their descriptors and preads. One header a module: url.h
 * names, aws.h credentials, s3.h S3's URLs and XML, engine.h the I/O
 * thread and its requests, object.h what sources need of an object,
 * readahead.h files fetched before a worker asks for them. Layering: io/
 * includes base/ only; source/ (and above) include io/.
 *
 * Names are recognised also when built without libcurl (SL_HAVE_CURL
 * unset), so a URL is never mistaken for a missing local file.
 */
#ifndef SL_IO_URL_H
#define SL_IO_URL_H

#include <stddef.h>

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

#endif
