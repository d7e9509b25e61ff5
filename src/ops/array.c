/*
 * Array ops: output shape, per-sample plan, and the windowed read. The
 * contract and the op rules are in array.h.
 *
 * The read walks the taken elements in file order. Storage axes are the
 * logical axes in C order, or reversed for Fortran order; along the
 * innermost storage axis the taken elements form contiguous runs (one per
 * combination of the outer axes' indices, or one per group of consecutive
 * selected rows when the subset axis is the inner one). Runs come in
 * increasing file offset, so the read buffer only moves forward:
 *   coalesce = 1: a window of up to SL_ARRAY_CHUNK bytes is read from the
 *                 first run it lacks, covering the runs after it and the
 *                 gaps between them (one pread for many short runs);
 *   coalesce = 0: each run is read alone (straight into the slot when no
 *                 conversion is needed: no copy at all).
 * The plan picks coalesce when the gap between runs is under SL_ARRAY_GAP
 * bytes: a gap costs a copy, a run a system call. On the development VM a
 * pread costs ~2 us and the page cache copies ~1.8 GB/s: they break even
 * near a 4 KiB gap (bench/array_read.c, numbers in docs/arrays.md: an HWC
 * 256 crop of 720x1280x3 f32, gap 12 KiB, reads in 0.44 ms per run vs 0.93
 * coalesced; a CHW crop, gap 4 KiB, 18.8 vs 24.5 ms; a 16384-of-120000
 * points subset, gap ~100 B, 14.6 vs 0.9 ms).
 */
#define _GNU_SOURCE
#include "ops/array.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "base/util.h"

typedef unsigned long long ull;

#define SL_ARRAY_GAP ((uint64_t)4 << 10)

/* ---- the field's output --------------------------------------------------------- */

static int axis_of(const char *layout, char c) {
    const char *p = strchr(layout, c);
    return p && c ? (int)(p - layout) : -1;
}

/* Spec checks that need no sample. H, W: the spatial axes (-1 if none). */
static int check_spec(const sl__array_spec *s, uint32_t ndim, int *H, int *W, char *reason, size_t rlen) {
    size_t ln = strnlen(s->layout, sizeof s->layout);
    int crop = s->crop[0] || s->crop[1], center = s->center_crop[0] || s->center_crop[1];
    *H = axis_of(s->layout, 'H');
    *W = axis_of(s->layout, 'W');
    if (ln && ln != ndim) {
        sl__msg(reason, rlen, "layout '%s' names %zu axes, the array has %u", s->layout, ln, ndim);
        return SL_EINVAL;
    }
    if (crop && center) {
        sl__msg(reason, rlen, "crop and center_crop together");
        return SL_EINVAL;
    }
    if ((crop || center) && (*H < 0 || *W < 0 || strchr(s->layout + *H + 1, 'H') || strchr(s->layout + *W + 1, 'W'))) {
        sl__msg(reason, rlen, "a crop needs a layout with one H and one W axis (layout '%s')", s->layout);
        return SL_EINVAL;
    }
    const uint64_t *c = crop ? s->crop : s->center_crop;
    if ((crop || center) && (!c[0] || !c[1])) {
        sl__msg(reason, rlen, "crop %llux%llu is empty", (ull)c[0], (ull)c[1]);
        return SL_EINVAL;
    }
    if (s->points && ((crop || center) || ndim == 0)) {
        sl__msg(reason, rlen, "points needs an array of rank >= 1 and no crop");
        return SL_EINVAL;
    }
    if (s->pad_ndim && s->pad_ndim != ndim) {
        sl__msg(reason, rlen, "pad has %u axes, the array %u", s->pad_ndim, ndim);
        return SL_EINVAL;
    }
    if (s->dtype && !sl_dtype_size(s->dtype)) {
        sl__msg(reason, rlen, "unknown output dtype %d", s->dtype);
        return SL_EINVAL;
    }
    return 0;
}

int sl__array_out_shape(const sl__array_spec *spec, const sl__array_info *first, sl__array_shape *out,
                        char *reason, size_t rlen) {
    memset(out, 0, sizeof *out);
    int H, W, rc = check_spec(spec, first->ndim, &H, &W, reason, rlen);
    if (rc) return rc;
    out->dtype = spec->dtype ? spec->dtype : first->dtype;
    out->ndim = first->ndim;
    memcpy(out->shape, first->shape, sizeof out->shape);
    const uint64_t *c = spec->crop[0] ? spec->crop : spec->center_crop;
    if (c[0]) out->shape[H] = c[0], out->shape[W] = c[1];
    if (spec->points) out->shape[0] = spec->points;
    if (spec->pad_ndim) memcpy(out->shape, spec->pad, sizeof(uint64_t) * out->ndim);
    uint64_t bytes = sl_dtype_size(out->dtype);
    for (uint32_t i = 0; i < out->ndim; i++) {
        if (sl__mul(bytes, out->shape[i], &bytes)) {
            sl__msg(reason, rlen, "the field's output size overflows 64 bits");
            return SL_EOVERFLOW;
        }
    }
    out->bytes = bytes;
    return 0;
}

/* ---- the plan ---------------------------------------------------------------- */

static uint64_t half_round_even(uint64_t twice) { /* round(twice / 2), ties to even */
    uint64_t q = twice / 2;
    return (twice & 1) && (q & 1) ? q + 1 : q;
}

static void shape_str(const uint64_t *s, uint32_t n, char *buf, size_t len) {
    size_t k = (size_t)snprintf(buf, len, "(");
    for (uint32_t i = 0; i < n && k < len; i++)
        k += (size_t)snprintf(buf + k, len - k, i + 1 < n || n == 1 ? "%llu, " : "%llu", (ull)s[i]);
    if (n == 1 && k >= 2 && k < len) k -= 1; /* "(3,)" */
    if (k < len) snprintf(buf + k, len - k, ")");
}

static int misfit(const sl__array_info *in, const sl__array_shape *f, const char *why, uint32_t axis, char *reason,
                  size_t rlen) {
    char a[200], b[200];
    shape_str(in->shape, in->ndim, a, sizeof a);
    shape_str(f->shape, f->ndim, b, sizeof b);
    sl__msg(reason, rlen, "array of shape %s does not fit the field's %s: %s (axis %u)", a, b, why, axis);
    return SL_EINVAL;
}

static uint64_t run_gap(const sl__array_info *in, const sl__array_plan *p);

/* Scratch the read needs: its window (coalescing, or a converting read)
 * and the subset's bitmap, each with its quota header. */
static uint64_t plan_scratch(const sl__array_info *in, const sl__array_plan *p) {
    uint64_t s = 0;
    int direct = p->out.dtype == in->dtype && !in->swap && !in->fortran;
    if (p->coalesce || !direct) s += SL_MIN(SL_ARRAY_CHUNK, in->data_bytes) + 64;
    if (p->subset) s += (in->shape[0] + 63) / 64 * 8 + 64;
    return s;
}

int sl__array_plan_sample(const sl__array_info *in, const sl__array_spec *spec, const sl__array_shape *field,
                          sl__rng *rng, sl__array_plan *p, char *reason, size_t rlen) {
    memset(p, 0, sizeof *p);
    int H, W, rc = check_spec(spec, in->ndim, &H, &W, reason, rlen);
    if (rc) return rc;
    if (in->ndim != field->ndim) return misfit(in, field, "rank differs", in->ndim, reason, rlen);
    if (!spec->dtype && in->dtype != field->dtype) {
        sl__msg(reason, rlen, "array dtype %s differs from the field's %s (set a dtype to cast)",
                sl_dtype_name(in->dtype), sl_dtype_name(field->dtype));
        return SL_EINVAL;
    }
    p->ndim = in->ndim;
    p->out = *field;
    for (uint32_t i = 0; i < in->ndim; i++) p->take[i] = in->shape[i];
    const uint64_t *c = spec->crop[0] ? spec->crop : spec->center_crop;
    if (c[0]) {
        if (in->shape[H] < c[0] || in->shape[W] < c[1]) {
            sl__msg(reason, rlen, "crop %llux%llu is larger than the array's %llux%llu (H x W)", (ull)c[0], (ull)c[1],
                    (ull)in->shape[H], (ull)in->shape[W]);
            return SL_EINVAL;
        }
        if (spec->crop[0]) {
            p->start[H] = sl__rng_below(rng, in->shape[H] - c[0] + 1);
            p->start[W] = sl__rng_below(rng, in->shape[W] - c[1] + 1);
        } else {
            p->start[H] = half_round_even(in->shape[H] - c[0]);
            p->start[W] = half_round_even(in->shape[W] - c[1]);
        }
        p->take[H] = c[0], p->take[W] = c[1];
    }
    if (spec->points && in->shape[0] > spec->points) {
        p->take[0] = spec->points;
        /* A zero-size array (a row of no elements) has nothing to choose
         * between: its first rows, no subset, no bitmap (a header may
         * declare 2^40 empty rows in a file of a hundred bytes). */
        p->subset = in->data_bytes > 0;
        p->subset_rng = *rng;
        sl__rng_next(rng); /* the caller's generator moves on too */
    }
    p->rows = in->ndim ? p->take[0] : 1;
    for (uint32_t i = 0; i < in->ndim; i++) {
        if (p->take[i] > field->shape[i]) return misfit(in, field, "larger than the field", i, reason, rlen);
        if (p->take[i] < field->shape[i] && !spec->pad_ndim && !(spec->points && i == 0))
            return misfit(in, field, "smaller than the field (no pad)", i, reason, rlen);
    }
    p->coalesce = run_gap(in, p) < SL_ARRAY_GAP;
    p->scratch = plan_scratch(in, p);
    return 0;
}

/* ---- the read ------------------------------------------------------------------ */

typedef struct reader {
    const sl__sample_file *f;
    uint64_t base;          /* file offset of element 0 */
    const sl__array_info *in;
    const sl__array_plan *p;
    uint32_t axis[SL_ARRAY_MAX_DIMS];    /* storage axis s -> logical axis */
    uint64_t fstride[SL_ARRAY_MAX_DIMS]; /* elements, per storage axis */
    uint64_t ostride[SL_ARRAY_MAX_DIMS]; /* output elements, per logical axis */
    uint32_t run_level;     /* storage axis the runs go along; the axes inside it are folded in */
    uint64_t fold;          /* elements of the folded axes: one step along run_level */
    uint64_t ostep;         /* output elements between consecutive run elements */
    int subset;             /* axis 0 is a subset (p->subset) */
    const uint64_t *bits;   /* its bitmap, during the read */
    uint8_t *buf;           /* window of file bytes [wbeg, wend) (data-relative) */
    uint64_t cap, wbeg, wend, need_end;
    int direct;             /* no conversion: runs may be read straight into dst */
    sl__convert_fn conv;
    uint8_t *dst;
    size_t osize;
    char *reason;
    size_t rlen;
} reader;

static int read_at(reader *r, void *buf, uint64_t n, uint64_t off) {
    if (r->f->obj) { /* a remote object: one ranged read */
        char why[160];
        int rc = sl__sample_pread(r->f, buf, n, r->base + off, why, sizeof why);
        if (rc) sl__msg(r->reason, r->rlen, "array read of %llu bytes at offset %llu failed: %s", (ull)n,
                        (ull)(r->base + off), why);
        return rc == SL_ENOENT || rc == SL_ESTATE ? rc : rc ? SL_EIO : 0;
    }
    uint64_t got = 0;
    while (got < n) {
        ssize_t k = pread(r->f->fd, (char *)buf + got, (size_t)(n - got), (off_t)(r->base + off + got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            sl__msg(r->reason, r->rlen, "array read of %llu bytes at offset %llu failed: %s", (ull)(n - got),
                    (ull)(r->base + off + got), k < 0 ? strerror(errno) : "file shorter than its header says");
            return SL_EIO;
        }
        got += (uint64_t)k;
    }
    return 0;
}

/* Convert n elements at data byte offset off (inside the window) to
 * output element oi, output elements r->ostep apart. */
static void put(reader *r, uint64_t off, uint64_t n, uint64_t oi) {
    uint8_t *src = r->buf + (off - r->wbeg), *dst = r->dst + oi * r->osize;
    uint32_t isz = r->in->itemsize;
    if (r->in->swap) { /* in place: every element belongs to one run only */
        for (uint64_t i = 0; i < n; i++) {
            uint8_t *e = src + i * isz;
            for (uint32_t a = 0, b = isz - 1; a < b; a++, b--) {
                uint8_t t = e[a];
                e[a] = e[b];
                e[b] = t;
            }
        }
    }
    if (r->direct && r->ostep == 1) memcpy(dst, src, (size_t)(n * isz));
    else r->conv(src, dst, n, r->ostep * r->osize);
}

/* One run: n elements from data element fe, to output element oi. */
static int run(reader *r, uint64_t fe, uint64_t n, uint64_t oi) {
    uint32_t isz = r->in->itemsize;
    uint64_t off = fe * isz;
    if (r->direct && !r->p->coalesce && r->ostep == 1)
        return read_at(r, r->dst + oi * r->osize, n * isz, off);
    while (n > 0) {
        if (off < r->wbeg || off + isz > r->wend) { /* refill from here */
            uint64_t want = r->p->coalesce ? r->need_end - off : n * isz;
            uint64_t len = SL_MIN(want, r->cap) / isz * isz;
            int rc = read_at(r, r->buf, len, off);
            if (rc) return rc;
            r->wbeg = off, r->wend = off + len;
        }
        uint64_t k = SL_MIN(n, (r->wend - off) / isz);
        put(r, off, k, oi);
        off += k * isz, oi += k * r->ostep, n -= k;
    }
    return 0;
}

static int bit(const uint64_t *b, uint64_t i) { return (int)(b[i >> 6] >> (i & 63) & 1); }
static int is_subset(const reader *r, uint32_t a) { return a == 0 && r->subset; }

/* Index set of logical axis a: [start, start + take), or the subset. */
static uint64_t first_idx(const reader *r, uint32_t a) {
    if (!is_subset(r, a)) return r->p->start[a];
    uint64_t i = 0;
    while (!bit(r->bits, i)) i++;
    return i;
}
static uint64_t next_idx(const reader *r, uint32_t a, uint64_t i) {
    if (!is_subset(r, a)) return i + 1;
    uint64_t R = r->in->shape[0];
    for (i++; i < R && !bit(r->bits, i); i++) {}
    return i;
}

/* Runs along the run axis (storage level s = run_level): one per group of
 * consecutive taken indices (a range is one group), each index carrying
 * r->fold elements of the folded axes. */
static int runs(reader *r, uint32_t s, uint64_t fbase, uint64_t obase) {
    uint32_t a = r->axis[s];
    uint64_t fs = r->fstride[s], os = r->ostride[a];
    if (!is_subset(r, a))
        return run(r, fbase + r->p->start[a] * fs, r->p->take[a] * r->fold, obase);
    uint64_t R = r->in->shape[0], i = first_idx(r, a), rank = 0;
    while (i < R) {
        uint64_t j = i;
        while (j + 1 < R && bit(r->bits, j + 1)) j++;
        int rc = run(r, fbase + i * fs, (j - i + 1) * r->fold, obase + rank * os);
        if (rc) return rc;
        rank += j - i + 1;
        i = next_idx(r, a, j);
    }
    return 0;
}

/* Every combination of the outer storage axes' indices from level s on. */
static int walk(reader *r, uint32_t s, uint64_t fbase, uint64_t obase) {
    if (s == r->run_level) return runs(r, s, fbase, obase);
    uint32_t a = r->axis[s];
    uint64_t end = is_subset(r, a) ? r->in->shape[0] : r->p->start[a] + r->p->take[a];
    for (uint64_t i = first_idx(r, a), k = 0; i < end && k < r->p->take[a]; i = next_idx(r, a, i), k++) {
        int rc = walk(r, s + 1, fbase + i * r->fstride[s], obase + k * r->ostride[a]);
        if (rc) return rc;
    }
    return 0;
}

/* Floyd's algorithm: a uniform take-subset of [0, R) as a bitmap. */
static void choose_rows(sl__rng rng, uint64_t R, uint64_t take, uint64_t *bits) {
    for (uint64_t j = R - take; j < R; j++) {
        uint64_t t = sl__rng_below(&rng, j + 1);
        if (bit(bits, t)) t = j;
        bits[t >> 6] |= (uint64_t)1 << (t & 63);
    }
}

/* Data offset one past the last byte any run needs. */
static uint64_t last_needed(const reader *r) {
    uint64_t e = 0;
    for (uint32_t s = 0; s < r->p->ndim; s++) {
        uint32_t a = r->axis[s];
        uint64_t last = is_subset(r, a) ? r->in->shape[0] - 1 : r->p->start[a] + r->p->take[a] - 1;
        e += last * r->fstride[s];
    }
    return (e + 1) * r->in->itemsize;
}

/* Strides, and the run level: inner storage axes taken whole, with no
 * padding and no subset, fold into one longer run (an HWC crop reads
 * rows of W x C elements, not C at a time). */
static void reader_setup(reader *r, const sl__array_info *in, const sl__array_plan *p) {
    uint32_t n = p->ndim;
    for (uint32_t s = 0; s < n; s++) r->axis[s] = in->fortran ? n - 1 - s : s;
    uint64_t fs = 1, os = 1;
    for (uint32_t s = n; s-- > 0;) {
        r->fstride[s] = fs;
        fs *= in->shape[r->axis[s]];
    }
    for (uint32_t a = n; a-- > 0;) {
        r->ostride[a] = os;
        os *= p->out.shape[a];
    }
    r->run_level = n - 1;
    r->fold = 1;
    r->ostep = r->ostride[r->axis[n - 1]];
    while (r->run_level > 0) {
        uint32_t a = r->axis[r->run_level], outer = r->axis[r->run_level - 1];
        int whole = p->start[a] == 0 && p->take[a] == in->shape[a] && !is_subset(r, a);
        if (!whole || r->ostride[outer] != r->ostride[a] * p->take[a]) break;
        r->fold *= p->take[a];
        r->run_level--;
    }
    r->direct = p->out.dtype == in->dtype && !in->swap;
    r->conv = sl__array_converter(in->dtype, p->out.dtype);
    r->osize = sl_dtype_size(p->out.dtype);
}

/* The typical gap in bytes between consecutive runs (what decides
 * coalescing): the untaken part of the run axis, or for a subset the
 * rows skipped between selected ones, on average. */
static uint64_t run_gap(const sl__array_info *in, const sl__array_plan *p) {
    if (p->ndim == 0) return 0;
    reader r = {.in = in, .p = p, .subset = p->subset};
    reader_setup(&r, in, p);
    uint32_t a = r.axis[r.run_level];
    uint64_t step = r.fstride[r.run_level] * in->itemsize; /* bytes per index of the run axis */
    if (is_subset(&r, a)) return (in->shape[0] - p->take[0]) / (p->take[0] + 1) * step;
    return (in->shape[a] - p->take[a]) * step;
}

int sl__array_read(const sl__sample_file *f, const sl__array_info *in, const sl__array_plan *p,
                   sl__quota *scratch, void *dst, uint64_t *len_out, char *reason, size_t rlen) {
    uint64_t end;
    if (p->ndim != in->ndim || sl__add(in->data_offset, in->data_bytes, &end) || end > f->size ||
        !sl__array_converter(in->dtype, p->out.dtype)) {
        sl__msg(reason, rlen, "array plan does not match the file (%llu bytes)", (ull)f->size);
        return SL_EINVAL;
    }
    reader r = {.f = f, .base = f->offset + in->data_offset, .in = in, .p = p, .subset = p->subset,
                .dst = dst, .reason = reason, .rlen = rlen};
    int rc = 0, empty = 0, padded = 0;
    for (uint32_t i = 0; i < p->ndim; i++) {
        empty |= p->take[i] == 0;
        padded |= p->take[i] < p->out.shape[i];
    }
    if (padded) memset(dst, 0, (size_t)p->out.bytes); /* the zeros of the padding */
    uint64_t *bits = NULL;
    if (p->subset && !empty) {
        bits = sl__quota_calloc(scratch, (size_t)((in->shape[0] + 63) / 64), 8);
        if (!bits) goto nomem;
        choose_rows(p->subset_rng, in->shape[0], p->take[0], bits);
        r.bits = bits;
    }
    if (p->ndim) reader_setup(&r, in, p);
    else r.direct = p->out.dtype == in->dtype && !in->swap, r.conv = sl__array_converter(in->dtype, p->out.dtype),
         r.osize = sl_dtype_size(p->out.dtype), r.ostep = 1;
    if (!empty && (p->coalesce || !r.direct || r.ostep != 1)) {
        r.cap = SL_MIN(SL_ARRAY_CHUNK, in->data_bytes);
        if (!(r.buf = sl__quota_alloc(scratch, (size_t)r.cap))) goto nomem;
    }
    if (!empty) {
        r.need_end = p->ndim ? last_needed(&r) : in->itemsize;
        rc = p->ndim ? walk(&r, 0, 0, 0) : run(&r, 0, 1, 0);
    }
    sl__quota_free(scratch, r.buf);
    sl__quota_free(scratch, bits);
    if (!rc && len_out) *len_out = p->rows;
    return rc;
nomem:
    sl__quota_free(scratch, bits);
    sl__msg(reason, rlen, "array read needs %llu scratch bytes, %llu of %llu are free", (ull)p->scratch,
            (ull)(scratch->cap - scratch->used), (ull)scratch->cap);
    return SL_EBUDGET;
}
