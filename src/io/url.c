/*
 * Names of remote objects (url.h): the scheme, a URL's parts,
 * resolving a manifest's relative paths, percent-encoding. Pure functions
 * of their arguments: no allocation, no I/O.
 */
#include <string.h>
#include <strings.h>

#include "base/util.h"
#include "io/url.h"

static const struct {
    const char *prefix;
    size_t len;
    int scheme;
} schemes[] = {{"s3://", 5, SL__URL_S3}, {"http://", 7, SL__URL_HTTP}, {"https://", 8, SL__URL_HTTPS}};

int sl__url_scheme(const char *path) {
    if (!path) return SL__URL_NONE;
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
        if (strncasecmp(path, schemes[i].prefix, schemes[i].len) == 0) return schemes[i].scheme;
    return SL__URL_NONE;
}

static size_t scheme_len(int scheme) {
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
        if (schemes[i].scheme == scheme) return schemes[i].len;
    return 0;
}

/* S3's bucket rules, loosely: 3 to 63 bytes of lower-case letters, digits,
 * dots and hyphens (older buckets may hold upper case and underscores:
 * accepted). What matters here is that nothing else reaches a host name. */
static int bucket_ok(const char *b, size_t n) {
    if (n < 3 || n > 63) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = b[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
              c == '_'))
            return 0;
    }
    return 1;
}

int sl__url_parse(const char *name, sl__url *u, char *err, size_t errlen) {
    memset(u, 0, sizeof *u);
    int scheme = sl__url_scheme(name);
    if (!scheme) {
        sl__msg(err, errlen, "%.200s: not an s3://, http:// or https:// URL", name ? name : "(null)");
        return SL_EINVAL;
    }
    size_t n = strnlen(name, SL__URL_MAX);
    if (n >= SL__URL_MAX) {
        sl__msg(err, errlen, "%.200s...: a URL of %d bytes or more", name, SL__URL_MAX);
        return SL_EINVAL;
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f) {
            sl__msg(err, errlen, "%.200s: a control byte in the URL", name);
            return SL_EINVAL;
        }
    const char *a = name + scheme_len(scheme);
    size_t alen = strcspn(a, "/?#");
    u->scheme = scheme;
    u->auth = a;
    u->auth_len = alen;
    u->path = a + alen;
    u->path_len = n - (size_t)(u->path - name);
    if (alen == 0) {
        sl__msg(err, errlen, "%.200s: no %s in the URL", name, scheme == SL__URL_S3 ? "bucket" : "host");
        return SL_EINVAL;
    }
    if (scheme == SL__URL_S3 && !bucket_ok(a, alen)) {
        sl__msg(err, errlen, "%.200s: '%.*s' is not an S3 bucket name (3 to 63 letters, digits, dots, hyphens)",
                name, (int)SL_MIN(alen, 80), a);
        return SL_EINVAL;
    }
    if (scheme != SL__URL_S3) { /* host[:port], with user info refused (credentials in URLs leak into messages) */
        if (memchr(a, '@', alen)) {
            sl__msg(err, errlen, "%.200s: user information in the URL (put no credentials in a URL)", name);
            return SL_EINVAL;
        }
    }
    return 0;
}

/* Remove dot segments from path p[0, n) (RFC 3986 5.2.4), in place; the
 * new length. A query (from '?') is kept as it is. */
static size_t remove_dots(char *p, size_t n) {
    size_t qn = 0;
    char *q = memchr(p, '?', n);
    char query[SL__URL_MAX];
    if (q) {
        qn = n - (size_t)(q - p);
        memcpy(query, q, qn);
        n = (size_t)(q - p);
    }
    char out[SL__URL_MAX];
    size_t o = 0, i = 0;
    while (i < n) {
        if (n - i >= 3 && !memcmp(p + i, "../", 3)) i += 3;
        else if (n - i >= 2 && !memcmp(p + i, "./", 2)) i += 2;
        else if (n - i >= 3 && !memcmp(p + i, "/./", 3)) i += 2;
        else if (n - i == 2 && !memcmp(p + i, "/.", 2)) { p[i + 1] = '/'; i += 1; }
        else if ((n - i >= 4 && !memcmp(p + i, "/../", 4)) || (n - i == 3 && !memcmp(p + i, "/..", 3))) {
            if (n - i == 3) { p[i + 2] = '/'; i += 2; }
            else i += 3;
            while (o > 0 && out[o - 1] != '/') o--; /* drop the last output segment and its '/' */
            if (o > 0) o--;
        } else if ((n - i == 1 && p[i] == '.') || (n - i == 2 && !memcmp(p + i, "..", 2))) {
            i = n;
        } else {
            size_t j = i + (p[i] == '/');
            while (j < n && p[j] != '/') j++;
            memcpy(out + o, p + i, j - i);
            o += j - i;
            i = j;
        }
    }
    memcpy(p, out, o);
    if (qn) memcpy(p + o, query, qn);
    return o + qn;
}

int sl__url_resolve(const char *base, const char *ref, char *out, size_t len) {
    if (!base || !ref || !out || len == 0) return SL_EINVAL;
    size_t rn = strlen(ref);
    if (sl__url_scheme(ref)) {
        if (rn >= len) return SL_EOVERFLOW;
        memcpy(out, ref, rn + 1);
        return (int)rn;
    }
    sl__url u;
    if (sl__url_parse(base, &u, NULL, 0)) return SL_EINVAL;
    size_t origin = (size_t)(u.path - base); /* scheme and authority */
    size_t keep;                              /* bytes of base's path kept */
    if (ref[0] == '/') {
        keep = 0;
    } else {
        size_t pl = strcspn(u.path, "?#");
        keep = pl;
        while (keep > 0 && u.path[keep - 1] != '/') keep--;
    }
    char tmp[SL__URL_MAX];
    size_t n = 0;
    if (keep == 0 && ref[0] != '/') tmp[n++] = '/'; /* "s3://b" + "x": "/x" */
    if (n + keep + rn >= sizeof tmp) return SL_EOVERFLOW;
    memcpy(tmp + n, u.path, keep);
    n += keep;
    memcpy(tmp + n, ref, rn);
    n += rn;
    n = remove_dots(tmp, n);
    if (origin + n >= len) return SL_EOVERFLOW;
    memcpy(out, base, origin);
    memcpy(out + origin, tmp, n);
    out[origin + n] = 0;
    return (int)(origin + n);
}

static int unreserved(unsigned char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
           c == '_' || c == '~';
}

int sl__url_encode(const char *s, size_t n, const char *keep, char *out, size_t len) {
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (unreserved(c) || (c && keep && strchr(keep, c))) {
            if (o + 1 >= len) return SL_EOVERFLOW;
            out[o++] = (char)c;
        } else {
            if (o + 3 >= len) return SL_EOVERFLOW;
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    if (o >= len) return SL_EOVERFLOW;
    out[o] = 0;
    return (int)o;
}

int sl__url_has_suffix(const char *name, const char *suffix) {
    size_t n = strlen(name), m = strlen(suffix);
    int scheme = sl__url_scheme(name);
    if (scheme == SL__URL_HTTP || scheme == SL__URL_HTTPS) n = strcspn(name, "?#");
    return n >= m && strncasecmp(name + n - m, suffix, m) == 0;
}
