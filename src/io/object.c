/*
 * What sources need of a remote object (object.h): its size, a read
 * of a range, a manifest's whole text, the keys under a prefix, and the
 * sentence for a failure at create (which failure, and what to change).
 * Each is one or a few requests through the engine, waited for on the
 * caller's thread.
 */
#include <string.h>

#include "base/util.h"
#include "io/aws.h"
#include "io/engine.h"
#include "io/object.h"
#include "io/s3.h"
#include "io/url.h"

void sl__obj_explain(const sl__io *io, const char *name, const sl__io_req *r, char *err, size_t errlen) {
    const sl__aws *a = sl__io_aws(io);
    int s3 = sl__url_scheme(name) == SL__URL_S3;
    const char *hint = "";
    char tmp[300];
    if (r->status == 404 || r->status == 410) {
        hint = strstr(r->reason, "NoSuchBucket") ? ": no such bucket (check the bucket name and AWS_REGION / the endpoint)"
                                                 : ": no such object";
    } else if (r->status == 403 || r->status == 401) {
        if (s3 && a && a->anonymous)
            hint = ": access denied to an unsigned request (no AWS credentials were found: set AWS_ACCESS_KEY_ID and "
                   "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE with ~/.aws/credentials)";
        else if (s3 && strstr(r->reason, "InvalidAccessKeyId"))
            hint = ": the access key is not known to this endpoint (check AWS_ACCESS_KEY_ID, AWS_PROFILE, "
                   "AWS_ENDPOINT_URL)";
        else if (s3 && strstr(r->reason, "SignatureDoesNotMatch"))
            hint = ": the signature does not match (check AWS_SECRET_ACCESS_KEY and AWS_REGION)";
        else if (s3) {
            snprintf(tmp, sizeof tmp, ": access denied (the credentials from %.120s lack s3:GetObject or "
                     "s3:ListBucket here)", a ? a->from : "?");
            hint = tmp;
        } else {
            hint = ": access denied";
        }
    } else if (r->status == 0 && strstr(r->reason, "curl:")) {
        if (s3 && a && a->endpoint[0]) {
            snprintf(tmp, sizeof tmp, ": cannot reach the endpoint %.200s (AWS_ENDPOINT_URL): check it is right and "
                     "the server runs", a->endpoint);
            hint = tmp;
        } else {
            hint = ": cannot reach the server (check the host name, the port, and the network)";
        }
    }
    sl__msg(err, errlen, "%.300s: %s%s", name, r->reason[0] ? r->reason : sl_strerror(r->rc), hint);
}

int sl__obj_stat(sl__io *io, const char *name, sl__obj *o, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    o->io = io;
    o->name = name;
    sl__io_req r;
    memset(&r, 0, sizeof r);
    r.name = name;
    r.probe = 1;
    r.retries = 3; /* a wrong endpoint or bucket fails create quickly */
    sl__io_submit(io, &r);
    int rc = sl__io_wait(io, &r);
    if (rc) {
        sl__obj_explain(io, name, &r, err, errlen);
        return rc;
    }
    o->size = r.size;
    snprintf(o->etag, sizeof o->etag, "%s", r.etag_out);
    return 0;
}

int sl__obj_read(const sl__obj *o, uint64_t off, void *buf, uint64_t n, char *reason, size_t rlen) {
    sl__io_req r;
    memset(&r, 0, sizeof r);
    r.name = o->name;
    r.off = off;
    r.len = n;
    r.dst = buf;
    r.etag = o->etag;
    sl__io_submit(o->io, &r);
    int rc = sl__io_wait(o->io, &r);
    if (rc) sl__msg(reason, rlen, "%s", r.reason[0] ? r.reason : sl_strerror(rc));
    return rc;
}

typedef struct whole {
    sl__budget *b;
    int cat;
    uint64_t max;
    char *p;
} whole;

static uint8_t *whole_alloc(void *ctx, uint64_t n) {
    whole *w = ctx;
    if (n > w->max || n >= SIZE_MAX - 1) return NULL;
    w->p = sl__alloc(w->b, (size_t)n + 1, w->cat);
    return (uint8_t *)w->p;
}

/* GET the whole of name (with query) into w's budgeted buffer: r's rc. */
static int get_whole(sl__io *io, const char *name, const char *query, whole *w, sl__io_req *r) {
    memset(r, 0, sizeof *r);
    r->name = name;
    r->query = query;
    r->len = SL__IO_TO_END;
    r->alloc = whole_alloc;
    r->ctx = w;
    sl__io_submit(io, r);
    return sl__io_wait(io, r);
}

int sl__obj_read_all(sl__io *io, const char *name, sl__budget *b, int cat, uint64_t max, char **out, uint64_t *size,
                     char *err, size_t errlen, sl__obj *o) {
    *out = NULL;
    *size = 0;
    whole w = {b, cat, max, NULL};
    sl__io_req r;
    int rc = get_whole(io, name, NULL, &w, &r);
    if (rc == SL_EBUDGET && r.len > max) {
        char b1[32];
        sl__msg(err, errlen, "%.300s: %llu bytes, over the %s a manifest may have", name, (unsigned long long)r.len,
                sl__fmt_bytes(max, b1, sizeof b1));
        rc = SL_ELIMIT;
    } else if (rc == SL_EBUDGET) {
        char b1[32], b2[32];
        sl__msg(err, errlen, "%.300s: reading it needs %s but the budget is %s", name,
                sl__fmt_bytes(r.len + 1, b1, sizeof b1), sl__fmt_bytes(sl__budget_limit(b), b2, sizeof b2));
    } else if (rc) {
        sl__obj_explain(io, name, &r, err, errlen);
    }
    if (rc) {
        sl__free(b, w.p);
        return rc;
    }
    if (!w.p) w.p = sl__alloc(b, 1, cat); /* an empty object */
    if (!w.p) {
        sl__msg(err, errlen, "%.300s: no room in the budget", name);
        return SL_EBUDGET;
    }
    w.p[r.len] = 0;
    *out = w.p;
    *size = r.len;
    if (o) {
        memset(o, 0, sizeof *o);
        o->io = io;
        o->name = name;
        o->size = r.len;
        snprintf(o->etag, sizeof o->etag, "%s", r.etag_out);
    }
    return 0;
}

/* ---- listing ---------------------------------------------------------------------- */

#define PAGE_MAX ((uint64_t)16 << 20) /* a page of 1000 keys is ~350 KB */

int sl__obj_list(sl__io *io, const char *prefix, int delim, sl__budget *b, int cat, sl__s3_entry_fn entry,
                 sl__s3_prefix_fn sub, void *ctx, char *err, size_t errlen) {
    sl__url u;
    if (sl__url_parse(prefix, &u, err, errlen)) return SL_EINVAL;
    if (u.scheme != SL__URL_S3) {
        sl__msg(err, errlen, "%.300s: only an s3:// prefix can be listed (an http server has no listing)", prefix);
        return SL_EINVAL;
    }
    char bucket[80], eprefix[SL__URL_MAX], etoken[SL__URL_MAX], token[2048] = "", query[2 * SL__URL_MAX + 128];
    snprintf(bucket, sizeof bucket, "s3://%.*s", (int)u.auth_len, u.auth);
    const char *key = u.path_len ? u.path + 1 : "";
    if (sl__url_encode(key, strlen(key), NULL, eprefix, sizeof eprefix) < 0) return SL_EOVERFLOW;
    for (int page = 0;; page++) {
        /* the canonical query: names in byte order, values encoded (libcurl signs it as written) */
        if (token[0] && sl__url_encode(token, strlen(token), NULL, etoken, sizeof etoken) < 0) return SL_EOVERFLOW;
        int qn = snprintf(query, sizeof query, "%s%s%s%slist-type=2&prefix=%s", token[0] ? "continuation-token=" : "",
                          token[0] ? etoken : "", token[0] ? "&" : "", delim ? "delimiter=%2F&" : "", eprefix);
        if (qn < 0 || (size_t)qn >= sizeof query) return SL_EOVERFLOW;
        whole w = {b, cat, PAGE_MAX, NULL};
        sl__io_req r;
        int rc = get_whole(io, bucket, query, &w, &r);
        if (rc) {
            sl__free(b, w.p);
            sl__obj_explain(io, prefix, &r, err, errlen);
            return rc == SL_EBUDGET ? SL_EBUDGET : rc;
        }
        int truncated = 0;
        rc = w.p ? sl__s3_parse_list(w.p, (size_t)r.len, entry, sub, ctx, &truncated, token, sizeof token) : SL_EPARSE;
        sl__free(b, w.p);
        if (rc == SL_EPARSE) sl__msg(err, errlen, "%.300s: page %d of the listing is not a ListObjectsV2 result", prefix, page + 1);
        if (rc) return rc;
        if (!truncated) return 0;
        if (!token[0]) {
            sl__msg(err, errlen, "%.300s: the listing is truncated but gives no continuation token", prefix);
            return SL_EPARSE;
        }
    }
}
