/*
 * Tar header scanner: see tar.h for the formats, the rules and what is
 * refused. One pass over the headers, each read with one pread; member
 * data is never read (pax extended headers and GNU long names are: they
 * are metadata).
 */
#define _GNU_SOURCE
#include "source/tar.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"

#define BLOCK 512
#define PAX_BUF 8192 /* a pax record longer than this is skipped unread */

typedef unsigned long long ull;

/* Where the archive's bytes come from: a file (pread), memory, or a
 * reader (a remote shard's windows). */
typedef struct tar_in {
    int fd;
    const uint8_t *mem;
    uint64_t size;
    sl__tar_read_fn read;
    void *rctx;
} tar_in;

int sl__tar_pread(void *fdp, uint64_t off, void *buf, size_t n, char *err, size_t errlen) {
    int fd = *(const int *)fdp;
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            sl__msg(err, errlen, "tar: read of %zu bytes at offset %llu failed: %s", n, (ull)(off + got),
                    r < 0 ? strerror(errno) : "file shorter than its size");
            return SL_EIO;
        }
        got += (size_t)r;
    }
    return 0;
}

/* Read exactly n bytes at off (the caller checked off + n <= size). */
static int in_read(const tar_in *in, uint64_t off, void *buf, size_t n, char *err, size_t errlen) {
    if (in->mem) {
        memcpy(buf, in->mem + off, n);
        return 0;
    }
    if (in->read) return in->read(in->rctx, off, buf, n, err, errlen);
    int fd = in->fd;
    return sl__tar_pread(&fd, off, buf, n, err, errlen);
}

/* ---- header fields -------------------------------------------------------- */

/* A numeric field: octal digits (leading spaces, ended by NUL or space,
 * then only NULs and spaces; all blank reads 0) or GNU base-256 (high bit
 * of the first byte set; the value is the two's complement of the rest).
 * 0, or -1 for bad syntax, a negative value or one above INT64_MAX. */
static int tar_number(const uint8_t *f, size_t n, uint64_t *out) {
    uint64_t v = 0;
    if (f[0] & 0x80) {
        if (f[0] & 0x40) return -1; /* negative */
        v = f[0] & 0x3F;
        for (size_t i = 1; i < n; i++) {
            if (v > (UINT64_MAX >> 8)) return -1;
            v = v << 8 | f[i];
        }
        if (v > (uint64_t)INT64_MAX) return -1;
        *out = v;
        return 0;
    }
    size_t i = 0;
    while (i < n && f[i] == ' ') i++;
    for (; i < n && f[i] >= '0' && f[i] <= '7'; i++) {
        if (v > ((uint64_t)INT64_MAX >> 3)) return -1;
        v = v << 3 | (uint64_t)(f[i] - '0');
    }
    for (; i < n; i++)
        if (f[i] != 0 && f[i] != ' ') return -1;
    *out = v;
    return 0;
}

/* Is the stored checksum the sum of the header with its checksum field
 * read as spaces (as unsigned bytes, or as signed ones: old tars)? */
static int checksum_ok(const uint8_t *h) {
    uint64_t stored;
    if (tar_number(h + 148, 8, &stored)) return 0;
    uint64_t u = 0;
    int64_t s = 0;
    for (int i = 0; i < BLOCK; i++) {
        uint8_t c = (i >= 148 && i < 156) ? ' ' : h[i];
        u += c;
        s += (int8_t)c;
    }
    return stored == u || (int64_t)stored == s;
}

static int all_zero(const uint8_t *h) {
    for (int i = 0; i < BLOCK; i++)
        if (h[i]) return 0;
    return 1;
}

/* ---- names ---------------------------------------------------------------- */

/* Normalise raw[0, n) into out (SL_TAR_NAME_MAX + 1 bytes): drop leading
 * "./", empty and "." components; refuse the rest of tar.h's list.
 * Returns the length, or a negative code with a reason. */
static long normalise(const char *raw, size_t n, char *out, uint64_t hdr, char *err, size_t errlen) {
    if (memchr(raw, 0, n)) {
        sl__msg(err, errlen, "tar: member name at offset %llu holds a NUL byte", (ull)hdr);
        return SL_ECORRUPT;
    }
    if (n > 0 && raw[0] == '/') {
        sl__msg(err, errlen, "tar: member name '%.60s' at offset %llu is absolute", raw, (ull)hdr);
        return SL_ECORRUPT;
    }
    if (n > 0 && raw[n - 1] == '/') {
        sl__msg(err, errlen, "tar: regular member '%.60s' at offset %llu ends in '/'", raw, (ull)hdr);
        return SL_ECORRUPT;
    }
    size_t len = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && raw[j] != '/') j++;
        size_t c = j - i;
        if (c == 2 && raw[i] == '.' && raw[i + 1] == '.') {
            sl__msg(err, errlen, "tar: member name '%.60s' at offset %llu has a '..' component", raw, (ull)hdr);
            return SL_ECORRUPT;
        }
        if (c > 0 && !(c == 1 && raw[i] == '.')) {
            if (len + (len > 0) + c > SL_TAR_NAME_MAX) {
                sl__msg(err, errlen, "tar: member name at offset %llu longer than %d bytes", (ull)hdr,
                        SL_TAR_NAME_MAX);
                return SL_ELIMIT;
            }
            if (len > 0) out[len++] = '/';
            memcpy(out + len, raw + i, c);
            len += c;
        }
        i = j + 1;
    }
    if (len == 0) {
        sl__msg(err, errlen, "tar: member at offset %llu has an empty name", (ull)hdr);
        return SL_ECORRUPT;
    }
    out[len] = 0;
    return (long)len;
}

/* ---- the scan ------------------------------------------------------------- */

/* What extended headers say about the next member. */
typedef struct pending {
    char name[SL_TAR_NAME_MAX + 1]; /* raw, from pax path or GNU 'L' */
    size_t name_len;
    int has_name;
    uint64_t size;
    int has_size;
} pending;

/* Parse a decimal pax value v[0, n): 0 or -1. */
static int pax_decimal(const char *v, size_t n, uint64_t *out) {
    uint64_t x = 0;
    if (n == 0) return -1;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9') return -1;
        unsigned d = (unsigned)(v[i] - '0');
        if (x > ((uint64_t)INT64_MAX - d) / 10) return -1;
        x = x * 10 + d;
    }
    *out = x;
    return 0;
}

/* One complete record rec[0, len) ("LEN key=value\n", LEN already
 * checked to be len): apply it to p (global: syntax only). */
static int pax_record(const char *rec, size_t len, size_t digits, int global, pending *p, uint64_t at,
                      char *err, size_t errlen) {
    const char *kv = rec + digits + 1, *end = rec + len - 1; /* end: the '\n' */
    if (*end != '\n') {
        sl__msg(err, errlen, "tar: pax record at offset %llu does not end in a newline", (ull)at);
        return SL_ECORRUPT;
    }
    const char *eq = memchr(kv, '=', (size_t)(end - kv));
    if (!eq || eq == kv) {
        sl__msg(err, errlen, "tar: pax record at offset %llu has no key=value", (ull)at);
        return SL_ECORRUPT;
    }
    size_t klen = (size_t)(eq - kv), vlen = (size_t)(end - eq - 1);
    const char *v = eq + 1;
    if (klen > 11 && !memcmp(kv, "GNU.sparse.", 11)) {
        sl__msg(err, errlen, "tar: pax header at offset %llu describes a sparse file (not supported)", (ull)at);
        return SL_EUNSUPPORTED;
    }
    if (global) return 0;
    if (klen == 4 && !memcmp(kv, "path", 4)) {
        if (vlen > SL_TAR_NAME_MAX) {
            sl__msg(err, errlen, "tar: pax path of %zu bytes at offset %llu (limit %d)", vlen, (ull)at,
                    SL_TAR_NAME_MAX);
            return SL_ELIMIT;
        }
        memcpy(p->name, v, vlen);
        p->name[vlen] = 0;
        p->name_len = vlen;
        p->has_name = 1;
    } else if (klen == 4 && !memcmp(kv, "size", 4)) {
        if (pax_decimal(v, vlen, &p->size)) {
            sl__msg(err, errlen, "tar: pax size '%.*s' at offset %llu is not a decimal number below 2^63",
                    (int)SL_MIN(vlen, 24), v, (ull)at);
            return SL_ECORRUPT;
        }
        p->has_size = 1;
    }
    return 0;
}

/* Parse the pax records in [off, end) through a PAX_BUF window: records
 * that fit are parsed from it; a longer one is skipped after its key is
 * checked (a path or size that long is refused). */
static int pax_parse(const tar_in *in, uint64_t off, uint64_t end, int global, pending *p, char *err,
                     size_t errlen) {
    char buf[PAX_BUF];
    uint64_t wbeg = off, wend = off; /* bytes [wbeg, wend) are in buf */
    while (off < end) {
        if (off + 32 > wend && wend < end) { /* refill: the record's head must be in the window */
            size_t n = (size_t)SL_MIN((uint64_t)PAX_BUF, end - off);
            int rc = in_read(in, off, buf, n, err, errlen);
            if (rc) return rc;
            wbeg = off, wend = off + n;
        }
        const char *r = buf + (off - wbeg);
        size_t avail = (size_t)(wend - off), digits = 0;
        uint64_t len = 0;
        while (digits < avail && digits < 20 && r[digits] >= '0' && r[digits] <= '9')
            len = len * 10 + (uint64_t)(r[digits++] - '0');
        if (digits == 0 || digits == 20 || digits >= avail || r[digits] != ' ' || len < digits + 4 ||
            len > end - off) {
            sl__msg(err, errlen, "tar: bad pax record length at offset %llu", (ull)off);
            return SL_ECORRUPT;
        }
        if (len > avail) {
            if (len <= PAX_BUF) { /* fits a fresh window */
                wend = off;
                continue;
            }
            /* too long to hold: only its key matters */
            const char *k = r + digits + 1;
            size_t kn = avail - digits - 1;
            if (kn >= 11 && !memcmp(k, "GNU.sparse.", 11)) {
                sl__msg(err, errlen, "tar: pax header at offset %llu describes a sparse file (not supported)", (ull)off);
                return SL_EUNSUPPORTED;
            }
            if (kn >= 5 && (!memcmp(k, "path=", 5) || !memcmp(k, "size=", 5))) {
                sl__msg(err, errlen, "tar: pax record of %llu bytes at offset %llu (path or size longer than %d)",
                        (ull)len, (ull)off, SL_TAR_NAME_MAX);
                return SL_ELIMIT;
            }
            off += len;
            wend = off; /* window no longer useful */
            continue;
        }
        int rc = pax_record(r, (size_t)len, digits, global, p, off, err, errlen);
        if (rc) return rc;
        off += len;
    }
    return 0;
}

/* GNU 'L': the long name is the data, NUL-terminated (trailing NULs only).
 * The data may hold SL_TAR_NAME_MAX + 1 bytes (the name and its NUL); a
 * name that fills them all has no room left for its NUL: refused. */
static int gnu_long_name(const tar_in *in, uint64_t data, uint64_t size, pending *p, uint64_t hdr,
                         char *err, size_t errlen) {
    if (size > SL_TAR_NAME_MAX + 1) {
        sl__msg(err, errlen, "tar: GNU long name of %llu bytes at offset %llu (limit %d)", (ull)size,
                (ull)hdr, SL_TAR_NAME_MAX);
        return SL_ELIMIT;
    }
    int rc = in_read(in, data, p->name, (size_t)size, err, errlen);
    if (rc) return rc;
    size_t n = (size_t)size;
    while (n > 0 && p->name[n - 1] == 0) n--;
    if (n > SL_TAR_NAME_MAX) {
        sl__msg(err, errlen, "tar: GNU long name of %zu bytes at offset %llu (limit %d)", n, (ull)hdr,
                SL_TAR_NAME_MAX);
        return SL_ELIMIT;
    }
    p->name[n] = 0;
    p->name_len = n;
    p->has_name = 1;
    return 0;
}

/* The member's name from the header: ustar prefix "/" name (POSIX magic
 * only: GNU headers keep other fields there), else name alone. */
static size_t header_name(const uint8_t *h, char *out) {
    size_t nn = strnlen((const char *)h, 100), pn = 0;
    if (!memcmp(h + 257, "ustar\0", 6)) pn = strnlen((const char *)h + 345, 155);
    size_t len = 0;
    if (pn) {
        memcpy(out, h + 345, pn);
        out[pn] = '/';
        len = pn + 1;
    }
    memcpy(out + len, h, nn);
    len += nn;
    out[len] = 0;
    return len;
}

/* Report a regular member (normalised name). */
static int regular(pending *p, const uint8_t *h, uint64_t hdr, uint64_t data, uint64_t size,
                   sl__tar_member_fn add, void *ctx, char *err, size_t errlen) {
    char raw[SL_TAR_NAME_MAX + 1], norm[SL_TAR_NAME_MAX + 1];
    const char *src = raw;
    size_t n;
    if (p->has_name) {
        src = p->name;
        n = p->name_len;
    } else {
        n = header_name(h, raw);
    }
    long len = normalise(src, n, norm, hdr, err, errlen);
    if (len < 0) return (int)len;
    sl__tar_member m = {norm, (size_t)len, hdr, data, size};
    return add(ctx, &m, err, errlen);
}

static int scan(const tar_in *in, sl__tar_member_fn add, void *ctx, uint64_t *end_block, char *err,
                size_t errlen) {
    uint8_t h[BLOCK];
    pending p;
    memset(&p, 0, sizeof p);
    /* first_hdr: the first header of the member being read (its extended
     * headers come first), UINT64_MAX between members */
    uint64_t off = 0, first_hdr = UINT64_MAX;
    int rc = 0;
    if (end_block) *end_block = UINT64_MAX;
    while (off < in->size) {
        if (in->size - off < BLOCK) {
            sl__msg(err, errlen, "tar: truncated header at offset %llu (%llu bytes left)", (ull)off,
                    (ull)(in->size - off));
            return SL_ECORRUPT;
        }
        if ((rc = in_read(in, off, h, BLOCK, err, errlen))) return rc;
        if (all_zero(h)) { /* end of archive */
            if (end_block) *end_block = off;
            return 0;
        }
        if (!checksum_ok(h)) {
            sl__msg(err, errlen, "tar: header checksum mismatch at offset %llu", (ull)off);
            return SL_ECORRUPT;
        }
        uint64_t size, data = off + BLOCK, padded, end;
        if (tar_number(h + 124, 12, &size)) {
            sl__msg(err, errlen, "tar: bad size field in the header at offset %llu", (ull)off);
            return SL_ECORRUPT;
        }
        char type = (char)h[156];
        int ext = type == 'x' || type == 'g' || type == 'L' || type == 'K';
        if (!ext && p.has_size) size = p.size;
        if (type >= '1' && type <= '6') size = 0; /* no data, whatever the field says */
        if (sl__add(size, BLOCK - 1, &padded) || sl__add(data, padded & ~(uint64_t)(BLOCK - 1), &end) ||
            data + size > in->size || end > in->size) {
            sl__msg(err, errlen, "tar: member at offset %llu declares %llu bytes, past the end of the %llu-byte file",
                    (ull)off, (ull)size, (ull)in->size);
            return SL_ECORRUPT;
        }
        if (first_hdr == UINT64_MAX) first_hdr = off;
        switch (type) {
        case 'x': rc = pax_parse(in, data, data + size, 0, &p, err, errlen); break;
        case 'g': rc = pax_parse(in, data, data + size, 1, &p, err, errlen); break;
        case 'L': rc = gnu_long_name(in, data, size, &p, off, err, errlen); break;
        case 'K': break; /* long link name: links are not members */
        case '0':
        case '\0':
        case '7': rc = regular(&p, h, first_hdr, data, size, add, ctx, err, errlen); break;
        case 'S':
            sl__msg(err, errlen, "tar: GNU sparse member at offset %llu (not supported)", (ull)off);
            return SL_EUNSUPPORTED;
        default: break; /* links, directories, devices, FIFOs, unknown: skipped */
        }
        if (rc) return rc;
        if (!ext) { /* extended headers apply to the next member only */
            p.has_name = p.has_size = 0;
            first_hdr = UINT64_MAX;
        }
        off = end;
    }
    return 0;
}

int sl__tar_scan(int fd, uint64_t file_size, sl__tar_member_fn add, void *ctx, uint64_t *end_block, char *err,
                 size_t errlen) {
    tar_in in = {fd, NULL, file_size, NULL, NULL};
    return scan(&in, add, ctx, end_block, err, errlen);
}

int sl__tar_scan_read(sl__tar_read_fn read, void *rctx, uint64_t size, sl__tar_member_fn add, void *ctx,
                      uint64_t *end_block, char *err, size_t errlen) {
    tar_in in = {-1, NULL, size, read, rctx};
    return scan(&in, add, ctx, end_block, err, errlen);
}

int sl__tar_scan_mem(const uint8_t *data, size_t len, sl__tar_member_fn add, void *ctx, char *err,
                     size_t errlen) {
    tar_in in = {-1, data ? data : (const uint8_t *)"", len, NULL, NULL};
    return scan(&in, add, ctx, NULL, err, errlen);
}
