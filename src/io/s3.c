/*
 * S3 (s3.h): request URLs, and a bounded reader of the two XML
 * documents S3 sends us, a ListObjectsV2 page and an error body. The
 * reader is written for hostile input: no recursion, no allocation, every
 * field bounded, entities decoded by a whitelist; what it does not
 * understand it skips, what it cannot bound it refuses.
 */
#include <string.h>

#include "base/util.h"
#include "io/aws.h"
#include "io/s3.h"
#include "io/url.h"

/* ---- request URLs ------------------------------------------------------------- */

int sl__s3_request_url(const sl__aws *a, const char *name, const char *query, char *out, size_t len) {
    sl__url u;
    if (sl__url_parse(name, &u, NULL, 0) || u.scheme != SL__URL_S3) return SL_EINVAL;
    const char *key = u.path_len ? u.path + 1 : ""; /* the key is everything after "bucket/" */
    size_t kn = u.path_len ? u.path_len - 1 : 0;
    char ek[SL__URL_MAX];
    int en = sl__url_encode(key, kn, "/", ek, sizeof ek);
    if (en < 0) return en;
    const char *q = query && *query ? query : NULL;
    int dotted = memchr(u.auth, '.', u.auth_len) != NULL;
    int n;
    if (a->path_style)
        n = snprintf(out, len, "%s/%.*s%s%s%s%s", a->endpoint, (int)u.auth_len, u.auth, kn ? "/" : "", ek,
                     q ? "?" : "", q ? q : "");
    else if (dotted) /* a dotted bucket breaks the wildcard certificate of virtual-hosted names */
        n = snprintf(out, len, "https://s3.%s.amazonaws.com/%.*s%s%s%s%s", a->region, (int)u.auth_len, u.auth,
                     kn ? "/" : "", ek, q ? "?" : "", q ? q : "");
    else
        n = snprintf(out, len, "https://%.*s.s3.%s.amazonaws.com/%s%s%s", (int)u.auth_len, u.auth, a->region, ek,
                     q ? "?" : "", q ? q : "");
    return n < 0 || (size_t)n >= len ? SL_EOVERFLOW : 0;
}

/* ---- XML ------------------------------------------------------------------------ */

static int xml_text(const char *t, size_t n, char *out, size_t len);

int sl__xml_text(const char *t, size_t n, char *out, size_t len) {
    int rc = xml_text(t, n, out, len);
    if (rc < 0 && len) out[0] = 0; /* never a half-decoded string */
    return rc;
}

static int xml_text(const char *t, size_t n, char *out, size_t len) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned long c = (unsigned char)t[i];
        size_t adv = 1;
        if (c == 0) return SL_EPARSE;
        if (c == '&') {
            const char *semi = memchr(t + i, ';', SL_MIN(n - i, (size_t)12));
            if (!semi) return SL_EPARSE;
            size_t el = (size_t)(semi - (t + i)) + 1;
            const char *e = t + i + 1;
            if (el == 5 && !memcmp(e, "amp", 3)) c = '&';
            else if (el == 4 && !memcmp(e, "lt", 2)) c = '<';
            else if (el == 4 && !memcmp(e, "gt", 2)) c = '>';
            else if (el == 6 && !memcmp(e, "quot", 4)) c = '"';
            else if (el == 6 && !memcmp(e, "apos", 4)) c = '\'';
            else if (el >= 4 && e[0] == '#') {
                int hex = e[1] == 'x' || e[1] == 'X';
                unsigned long v = 0;
                size_t k = 1 + (size_t)hex;
                if (k >= el - 2) return SL_EPARSE; /* no digits */
                for (; k < el - 2; k++) {
                    char d = e[k];
                    int dv = d >= '0' && d <= '9' ? d - '0'
                             : hex && d >= 'a' && d <= 'f' ? d - 'a' + 10
                             : hex && d >= 'A' && d <= 'F' ? d - 'A' + 10 : -1;
                    if (dv < 0 || dv >= (hex ? 16 : 10)) return SL_EPARSE;
                    v = v * (hex ? 16 : 10) + (unsigned long)dv;
                    if (v > 0x10FFFF) return SL_EPARSE;
                }
                if (v == 0 || (v >= 0xD800 && v <= 0xDFFF)) return SL_EPARSE;
                c = v;
            } else {
                return SL_EPARSE;
            }
            adv = el;
        }
        /* UTF-8 of c (raw bytes pass as they are) */
        char enc[4];
        size_t m;
        if (c < 0x80 || t[i] != '&') enc[0] = (char)c, m = 1;
        else if (c < 0x800) enc[0] = (char)(0xC0 | c >> 6), enc[1] = (char)(0x80 | (c & 0x3F)), m = 2;
        else if (c < 0x10000)
            enc[0] = (char)(0xE0 | c >> 12), enc[1] = (char)(0x80 | ((c >> 6) & 0x3F)), enc[2] = (char)(0x80 | (c & 0x3F)),
            m = 3;
        else
            enc[0] = (char)(0xF0 | c >> 18), enc[1] = (char)(0x80 | ((c >> 12) & 0x3F)),
            enc[2] = (char)(0x80 | ((c >> 6) & 0x3F)), enc[3] = (char)(0x80 | (c & 0x3F)), m = 4;
        if (o + m >= len) return SL_EOVERFLOW;
        memcpy(out + o, enc, m);
        o += m;
        i += adv;
    }
    if (o >= len) return SL_EOVERFLOW;
    out[o] = 0;
    return (int)o;
}

/* A tag at t[i] == '<': its kind and name. Returns the index after '>',
 * or 0 when the markup is not closed. */
enum { TAG_OPEN = 1, TAG_CLOSE, TAG_EMPTY, TAG_OTHER };
static size_t tag_at(const char *t, size_t n, size_t i, int *kind, const char **name, size_t *nlen) {
    size_t j = i + 1;
    if (j < n && (t[j] == '?' || t[j] == '!')) {
        /* declarations, comments, CDATA: skipped to their end */
        const char *end = n - j >= 3 && !memcmp(t + j, "!--", 3)        ? "-->"
                          : n - j >= 8 && !memcmp(t + j, "![CDATA[", 8) ? "]]>"
                                                                        : ">";
        size_t el = strlen(end);
        for (size_t k = j; k + el <= n; k++)
            if (!memcmp(t + k, end, el)) {
                *kind = TAG_OTHER;
                return k + el;
            }
        return 0;
    }
    int close = j < n && t[j] == '/';
    j += (size_t)close;
    size_t s = j;
    while (j < n && t[j] != '>' && t[j] != ' ' && t[j] != '/' && t[j] != '\t' && t[j] != '\n' && t[j] != '\r') j++;
    *name = t + s;
    *nlen = j - s;
    const char *gt = memchr(t + j, '>', n - j);
    if (!gt) return 0;
    size_t end = (size_t)(gt - t);
    *kind = close ? TAG_CLOSE : end > j && t[end - 1] == '/' ? TAG_EMPTY : TAG_OPEN;
    return end + 1;
}

static int name_is(const char *name, size_t n, const char *want) { return n == strlen(want) && !memcmp(name, want, n); }

/* The next tag of t[*i, n): 1 with its kind and name (*i past it), 0 at
 * the end of the text, -1 on markup that is not closed. */
static int next_tag(const char *t, size_t n, size_t *i, int *kind, const char **name, size_t *nl) {
    const char *lt = *i < n ? memchr(t + *i, '<', n - *i) : NULL;
    if (!lt) return 0;
    size_t next = tag_at(t, n, (size_t)(lt - t), kind, name, nl);
    if (!next) return -1;
    *i = next;
    return 1;
}

/* The character data of a leaf element whose open tag ends at i: [i, end)
 * up to the next '<', which must close it. *next: after the close tag. 0,
 * or -1 (markup inside, unclosed). */
static int leaf(const char *t, size_t n, size_t i, const char *want, size_t *end, size_t *next) {
    const char *lt = memchr(t + i, '<', n - i);
    if (!lt) return -1;
    *end = (size_t)(lt - t);
    int kind;
    const char *name;
    size_t nl;
    size_t after = tag_at(t, n, *end, &kind, &name, &nl);
    if (!after || kind != TAG_CLOSE || !name_is(name, nl, want)) return -1;
    *next = after;
    return 0;
}

static int parse_u64(const char *s, size_t n, uint64_t *out) {
    uint64_t v = 0;
    if (n == 0 || n > 19) return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *out = v;
    return 0;
}

#define KEY_MAX 1100 /* S3 keys are at most 1024 bytes */

int sl__s3_parse_list(const char *t, size_t n, sl__s3_entry_fn entry, sl__s3_prefix_fn prefix, void *ctx,
                      int *truncated, char *token, size_t tlen) {
    char key[KEY_MAX], etag[96], pre[KEY_MAX];
    uint64_t size = 0;
    int have_key = 0, have_size = 0, in_contents = 0, in_prefixes = 0, have_pre = 0, root = 0, depth = 0;
    *truncated = 0;
    if (tlen) token[0] = 0;
    etag[0] = 0;
    size_t i = 0, nl;
    int kind, more;
    const char *name;
    while ((more = next_tag(t, n, &i, &kind, &name, &nl)) > 0) {
        if (kind == TAG_OTHER || kind == TAG_EMPTY) continue;
        if (kind == TAG_CLOSE) {
            if (depth == 0) return SL_EPARSE;
            depth--;
            if (depth == 1 && in_contents && name_is(name, nl, "Contents")) {
                in_contents = 0;
                if (!have_key || !have_size) return SL_EPARSE;
                sl__s3_entry e = {key, strlen(key), size, etag};
                int rc = entry ? entry(ctx, &e) : 0;
                if (rc) return rc;
            } else if (depth == 1 && in_prefixes && name_is(name, nl, "CommonPrefixes")) {
                in_prefixes = 0;
                if (!have_pre) return SL_EPARSE;
                int rc = prefix ? prefix(ctx, pre, strlen(pre)) : 0;
                if (rc) return rc;
            }
            continue;
        }
        /* an open tag */
        depth++;
        if (depth > 16) return SL_EPARSE;
        if (depth == 1) {
            if (!name_is(name, nl, "ListBucketResult")) return SL_EPARSE;
            root = 1;
            continue;
        }
        if (depth == 2) {
            if (name_is(name, nl, "Contents")) {
                in_contents = 1, have_key = have_size = 0, etag[0] = 0;
                continue;
            }
            if (name_is(name, nl, "CommonPrefixes")) {
                in_prefixes = 1, have_pre = 0;
                continue;
            }
            const char *leaf_name = name_is(name, nl, "IsTruncated") ? "IsTruncated"
                                    : name_is(name, nl, "NextContinuationToken") ? "NextContinuationToken" : NULL;
            if (!leaf_name) continue;
            size_t end, after;
            if (leaf(t, n, i, leaf_name, &end, &after)) return SL_EPARSE;
            if (leaf_name[0] == 'I') *truncated = end - i == 4 && !memcmp(t + i, "true", 4);
            else if (sl__xml_text(t + i, end - i, token, tlen) < 0) return SL_EPARSE;
            i = after;
            depth--;
            continue;
        }
        if (depth == 3 && (in_contents || in_prefixes)) {
            size_t end, after;
            if (in_contents && name_is(name, nl, "Key")) {
                if (leaf(t, n, i, "Key", &end, &after) || sl__xml_text(t + i, end - i, key, sizeof key) <= 0)
                    return SL_EPARSE;
                have_key = 1;
            } else if (in_contents && name_is(name, nl, "Size")) {
                if (leaf(t, n, i, "Size", &end, &after) || parse_u64(t + i, end - i, &size)) return SL_EPARSE;
                have_size = 1;
            } else if (in_contents && name_is(name, nl, "ETag")) {
                if (leaf(t, n, i, "ETag", &end, &after) || sl__xml_text(t + i, end - i, etag, sizeof etag) < 0)
                    return SL_EPARSE;
            } else if (in_prefixes && name_is(name, nl, "Prefix")) {
                if (leaf(t, n, i, "Prefix", &end, &after) || sl__xml_text(t + i, end - i, pre, sizeof pre) <= 0)
                    return SL_EPARSE;
                have_pre = 1;
            } else {
                continue;
            }
            i = after;
            depth--;
        }
    }
    return more == 0 && root && depth == 0 ? 0 : SL_EPARSE;
}

int sl__s3_parse_error(const char *t, size_t n, char *code, size_t clen, char *msg, size_t mlen) {
    if (clen) code[0] = 0;
    if (mlen) msg[0] = 0;
    int in_error = 0, kind;
    size_t i = 0, nl;
    const char *name;
    while (next_tag(t, n, &i, &kind, &name, &nl) > 0) {
        if (kind != TAG_OPEN) continue;
        if (name_is(name, nl, "Error")) {
            in_error = 1;
            continue;
        }
        if (!in_error) continue;
        int is_code = name_is(name, nl, "Code"), is_msg = name_is(name, nl, "Message");
        if (!is_code && !is_msg) continue;
        size_t end, after;
        if (leaf(t, n, i, is_code ? "Code" : "Message", &end, &after)) break;
        char *dst = is_code ? code : msg;
        size_t dl = is_code ? clen : mlen;
        /* cut to fit: decode at most what fits */
        size_t take = end - i;
        int rc;
        while (take && (rc = sl__xml_text(t + i, take, dst, dl)) == SL_EOVERFLOW) take = take > 16 ? take - 16 : 0;
        if ((!take || rc < 0) && dl) dst[0] = 0;
        for (char *c = dst; *c; c++) /* what a server says reaches terminals and logs: printable only */
            if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
        i = after;
    }
    /* a code is a word (NoSuchKey, SlowDown): anything else is not one */
    for (const char *c = code; clen && *c; c++)
        if (!((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '.' ||
              *c == '_' || *c == '-')) {
            code[0] = 0;
            break;
        }
    return in_error && code[0] != 0;
}
